"""The tapering windows of ``scipy.signal.get_window``, computed on the host in float64.

A window is named by a string (``'hann'``) or by a tuple of a name and its parameters
(``('tukey', 0.25)``, ``('kaiser', 8.0)``). Windows are periodic by default (``fftbins=True``):
the symmetric window one point longer, its last point dropped, as an FFT of a segment wants.
A ``'_periodic'`` or ``'_symmetric'`` suffix on the name overrides ``fftbins``.

>>> get_window(('tukey', 0.5), 8)
array([0. , 0.5, 1. , 1. , 1. , 1. , 1. , 0.5])
"""
from __future__ import annotations

import math
import warnings

import numpy as np

__all__ = ["get_window", "window_names"]


def _general_cosine(m: int, *coefficients) -> np.ndarray:
    """``sum_k a_k cos(k t)`` over ``m`` points of ``t`` from -pi to pi."""
    phase = np.linspace(-np.pi, np.pi, m)
    return sum(a * np.cos(k * phase) for k, a in enumerate(coefficients))


def _general_cosine_window(m: int, coefficients) -> np.ndarray:
    """The general cosine window: its parameter is the sequence of coefficients."""
    return _general_cosine(m, *np.asarray(coefficients, dtype=np.float64))


def _general_hamming(m: int, alpha) -> np.ndarray:
    return _general_cosine(m, alpha, 1.0 - alpha)


def _hann(m: int) -> np.ndarray:
    return _general_hamming(m, 0.5)


def _hamming(m: int) -> np.ndarray:
    return _general_hamming(m, 0.54)


def _blackman(m: int) -> np.ndarray:
    return _general_cosine(m, 0.42, 0.50, 0.08)


def _nuttall(m: int) -> np.ndarray:
    return _general_cosine(m, 0.3635819, 0.4891775, 0.1365995, 0.0106411)


def _blackmanharris(m: int) -> np.ndarray:
    return _general_cosine(m, 0.35875, 0.48829, 0.14128, 0.01168)


def _flattop(m: int) -> np.ndarray:
    return _general_cosine(m, 0.21557895, 0.41663158, 0.277263158, 0.083578947, 0.006947368)


def _boxcar(m: int) -> np.ndarray:
    return np.ones(m)


def _bartlett(m: int) -> np.ndarray:
    n = np.arange(m, dtype=np.float64)
    return np.where(n <= (m - 1) / 2, 2 * n / (m - 1), 2 - 2 * n / (m - 1))


def _triang(m: int) -> np.ndarray:
    # unlike bartlett, triang does not reach zero at its ends
    n = np.arange(1, (m + 1) // 2 + 1, dtype=np.float64)
    if m % 2 == 0:
        half = (2 * n - 1) / m
        return np.concatenate([half, half[::-1]])
    half = 2 * n / (m + 1)
    return np.concatenate([half, half[-2::-1]])


def _tukey(m: int, alpha=0.5) -> np.ndarray:
    if alpha <= 0:
        return np.ones(m)
    if alpha >= 1:
        return _hann(m)
    n = np.arange(m, dtype=np.float64)
    width = int(math.floor(alpha * (m - 1) / 2))
    rise = 0.5 * (1 + np.cos(np.pi * (-1 + 2 * n[:width + 1] / alpha / (m - 1))))
    fall = 0.5 * (1 + np.cos(np.pi * (-2 / alpha + 1 + 2 * n[m - width - 1:] / alpha / (m - 1))))
    return np.concatenate([rise, np.ones(m - 2 * width - 2), fall])


def _cosine(m: int) -> np.ndarray:
    return np.sin(np.pi / m * (np.arange(m) + 0.5))


def _bohman(m: int) -> np.ndarray:
    fac = np.abs(np.linspace(-1, 1, m)[1:-1])
    inner = (1 - fac) * np.cos(np.pi * fac) + np.sin(np.pi * fac) / np.pi
    return np.concatenate([[0.0], inner, [0.0]])


def _parzen(m: int) -> np.ndarray:
    distance = np.abs(np.arange(-(m - 1) / 2, (m - 1) / 2 + 0.5, 1.0))
    r = distance / (m / 2)
    return np.where(distance <= (m - 1) / 4, 1 - 6 * r ** 2 + 6 * r ** 3, 2 * (1 - r) ** 3)


def _barthann(m: int) -> np.ndarray:
    fac = np.abs(np.arange(m) / (m - 1) - 0.5)
    return 0.62 - 0.48 * fac + 0.38 * np.cos(2 * np.pi * fac)


def _kaiser(m: int, beta) -> np.ndarray:
    alpha = (m - 1) / 2
    n = np.arange(m, dtype=np.float64)
    return np.i0(beta * np.sqrt(1 - ((n - alpha) / alpha) ** 2)) / np.i0(float(beta))


def _gaussian(m: int, std) -> np.ndarray:
    n = np.arange(m) - (m - 1) / 2
    return np.exp(-n ** 2 / (2 * std * std))


def _general_gaussian(m: int, p, sig) -> np.ndarray:
    n = np.arange(m) - (m - 1) / 2
    return np.exp(-0.5 * np.abs(n / sig) ** (2 * p))


def _exponential(m: int, center=None, tau=1.0) -> np.ndarray:
    if center is None:
        center = (m - 1) / 2
    return np.exp(-np.abs(np.arange(m) - center) / tau)


def _lanczos(m: int) -> np.ndarray:
    # built from its right half so that it is exactly symmetric
    if m % 2 == 0:
        right = np.sinc(2 * np.arange(m / 2, m) / (m - 1) - 1)
        return np.concatenate([right[::-1], right])
    right = np.sinc(2 * np.arange((m + 1) / 2, m) / (m - 1) - 1)
    return np.concatenate([right[::-1], [1.0], right])


def _taylor(m: int, nbar=4, sll=30, norm=True) -> np.ndarray:
    a = np.arccosh(10 ** (sll / 20)) / np.pi
    s2 = nbar ** 2 / (a ** 2 + (nbar - 0.5) ** 2)
    ma = np.arange(1, nbar, dtype=np.float64)
    m2 = ma * ma
    signs = np.where(np.arange(nbar - 1) % 2 == 0, 1.0, -1.0)
    coefficients = np.empty(nbar - 1)
    for i in range(nbar - 1):
        numer = signs[i] * np.prod(1 - m2[i] / s2 / (a ** 2 + (ma - 0.5) ** 2))
        denom = 2 * np.prod(1 - m2[i] / m2[:i]) * np.prod(1 - m2[i] / m2[i + 1:])
        coefficients[i] = numer / denom

    def at(n):
        return 1 + 2 * coefficients @ np.cos(2 * np.pi * ma[:, None] * (n - m / 2 + 0.5) / m)

    w = at(np.arange(m, dtype=np.float64))
    return w / at((m - 1) / 2) if norm else w


def _chebwin(m: int, at) -> np.ndarray:
    if abs(at) < 45:
        warnings.warn("This window is not suitable for spectral analysis for attenuation "
                      "values lower than about 45dB because the equivalent noise bandwidth "
                      "of a Chebyshev window does not grow monotonically with increasing "
                      "sidelobe attenuation when the attenuation is smaller than about 45 dB.",
                      stacklevel=4)
    order = m - 1.0
    beta = np.cosh(np.arccosh(10 ** (abs(at) / 20)) / order)
    x = beta * np.cos(np.pi * np.arange(m) / m)
    # the Chebyshev polynomial by its closed forms, each where it is defined
    with np.errstate(invalid="ignore"):
        p = np.where(x > 1, np.cosh(order * np.arccosh(x)),
                     np.where(x < -1, (2 * (m % 2) - 1) * np.cosh(order * np.arccosh(-x)),
                              np.cos(order * np.arccos(np.clip(x, -1, 1)))))
    if m % 2:
        w = np.real(np.fft.fft(p))[:(m + 1) // 2]
        w = np.concatenate([w[1:][::-1], w])
    else:
        w = np.real(np.fft.fft(p * np.exp(1j * np.pi / m * np.arange(m))))[1:m // 2 + 1]
        w = np.concatenate([w[::-1], w])
    return w / np.max(w)


# name -> (symmetric window of m > 1 points, its parameters: False none, True required,
# None optional); aliases as scipy's
_WINDOWS = {
    ("barthann", "brthan", "bth"): (_barthann, False),
    ("bartlett", "bart", "brt"): (_bartlett, False),
    ("blackman", "black", "blk"): (_blackman, False),
    ("blackmanharris", "blackharr", "bkh"): (_blackmanharris, False),
    ("bohman", "bman", "bmn"): (_bohman, False),
    ("boxcar", "box", "ones", "rect", "rectangular"): (_boxcar, False),
    ("chebwin", "cheb"): (_chebwin, True),
    ("cosine", "halfcosine"): (_cosine, False),
    ("exponential", "poisson"): (_exponential, None),
    ("flattop", "flat", "flt"): (_flattop, False),
    ("gaussian", "gauss", "gss"): (_gaussian, True),
    ("general cosine", "general_cosine"): (_general_cosine_window, True),
    ("general gaussian", "general_gaussian", "general gauss", "general_gauss", "ggs"):
        (_general_gaussian, True),
    ("general hamming", "general_hamming"): (_general_hamming, True),
    ("hamming", "hamm", "ham"): (_hamming, False),
    ("hann", "han"): (_hann, False),
    ("kaiser", "ksr"): (_kaiser, True),
    ("lanczos", "sinc"): (_lanczos, False),
    ("nuttall", "nutl", "nut"): (_nuttall, False),
    ("parzen", "parz", "par"): (_parzen, False),
    ("taylor", "taylorwin"): (_taylor, None),
    ("triangle", "triang", "tri"): (_triang, False),
    ("tukey", "tuk"): (_tukey, None),
}
_BY_NAME = {name: entry for names, entry in _WINDOWS.items() for name in names}


def window_names() -> tuple:
    """Every window name ``get_window`` knows, aliases included."""
    return tuple(_BY_NAME)


def _parsed(window, fftbins: bool):
    """``(name, parameters, symmetric)`` of a window spec, checked against the table."""
    if isinstance(window, tuple):
        if not window or not isinstance(window[0], str):
            raise ValueError(f"The first entry of window={window!r} must be a window name.")
        name, args = window[0], window[1:]
    elif isinstance(window, str):
        name, args = window, ()
    else:
        raise ValueError(f"window={window!r} must be a window name or a tuple of a name and "
                         f"its parameters.")
    symmetric = not fftbins
    if name.endswith("_symmetric"):
        symmetric, name = True, name[:-len("_symmetric")]
    elif name.endswith("_periodic"):
        symmetric, name = False, name[:-len("_periodic")]
    if name not in _BY_NAME:
        raise ValueError(f"Unknown window type '{name}' in window={window!r}; known windows: "
                         f"{', '.join(sorted(names[0] for names in _WINDOWS))}.")
    takes = _BY_NAME[name][1]
    if args and takes is False:
        raise ValueError(f"Window '{name}' takes no parameters, but window={window!r}.")
    if not args and takes is True:
        raise ValueError(f"Window '{name}' needs parameters, but window={window!r}.")
    return name, args, symmetric


def get_window(window, nx: int, fftbins: bool = True) -> np.ndarray:
    """The float64 window named by ``window`` (a name or a ``(name, *parameters)`` tuple) of
    ``nx`` points, periodic when ``fftbins`` (scipy.signal.get_window's windows).

    >>> get_window('hann', 4)
    array([0. , 0.5, 1. , 0.5])
    """
    name, args, symmetric = _parsed(window, fftbins)
    if int(nx) != nx or nx < 0:
        raise ValueError(f"Window length nx={nx!r} must be a non-negative integer.")
    nx = int(nx)
    function = _BY_NAME[name][0]
    if function is _exponential and symmetric and args and args[0] is not None:
        raise ValueError("A symmetric exponential window takes no center: its center must "
                         "be None.")
    if nx <= 1:
        return np.ones(nx)
    # a periodic window is the symmetric one a point longer, without its last point
    points = nx if symmetric else nx + 1
    return np.asarray(function(points, *args), dtype=np.float64)[:nx]
