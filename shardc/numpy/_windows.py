"""Window functions (``bartlett``, ``blackman``, ``hamming``, ``hanning``, ``kaiser``) and
the modified Bessel function ``i0`` that ``kaiser`` uses."""
from __future__ import annotations

import numpy as np

from compiler.custom_ad import custom_jvp
from compiler.tracing import bind
from ir import dtypes as _dt
from ir import primitives as p
from shardc.numpy._arithmetic import abs, cos, exp, less_equal, sqrt, where
from shardc.numpy._core import (as_inexact, astype, convert, full, full_like, ones, zeros,
                                zeros_like)
from shardc.numpy._creation import arange

__all__ = ["bartlett", "blackman", "hamming", "hanning", "kaiser", "i0"]


def _window_ramp(M):
    return arange(1 - M, M, 2, dtype=_dt.float_)


def _short_window(M):
    if M < 1:
        return zeros((0,), _dt.float_)
    return ones((1,), _dt.float_)


def bartlett(M):
    """The triangular (Bartlett) window of ``M`` points."""
    M = int(M)
    if M <= 1:
        return _short_window(M)
    n = _window_ramp(M)
    return where(less_equal(n, 0), 1 + n / (M - 1), 1 - n / (M - 1))


def _cosine_window(M, terms):
    M = int(M)
    if M <= 1:
        return _short_window(M)
    n = _window_ramp(M)
    result = full((M,), terms[0], _dt.float_)
    for k, weight in enumerate(terms[1:], start=1):
        result = result + weight * cos(k * np.pi * n / (M - 1))
    return result


def blackman(M):
    """The Blackman window of ``M`` points."""
    return _cosine_window(M, (0.42, 0.5, 0.08))


def hamming(M):
    """The Hamming window of ``M`` points."""
    return _cosine_window(M, (0.54, 0.46))


def hanning(M):
    """The Hann window of ``M`` points."""
    return _cosine_window(M, (0.5, 0.5))


def kaiser(M, beta):
    """The Kaiser window of ``M`` points with shape ``beta``."""
    M = int(M)
    if M <= 1:
        return _short_window(M)
    n = arange(0, M, dtype=_dt.float_)
    alpha = (M - 1) / 2.0
    ratio = (n - alpha) / alpha
    return i0(beta * sqrt(1 - ratio * ratio)) / i0(convert(beta, _dt.float_))


# Chebyshev coefficients of exp(-x) I0(x) on [0, 8] and of exp(-x) sqrt(x) I0(x) on (8, inf)
# (the Cephes library's, which numpy's i0 uses too).
_I0_SMALL = (
    -4.4153416464793395e-18, 3.3307945188222384e-17, -2.431279846547955e-16,
    1.715391285555133e-15, -1.1685332877993451e-14, 7.676185498604936e-14,
    -4.856446783111929e-13, 2.95505266312964e-12, -1.726826291441556e-11,
    9.675809035373237e-11, -5.189795601635263e-10, 2.6598237246823866e-09,
    -1.300025009986248e-08, 6.046995022541919e-08, -2.670793853940612e-07,
    1.1173875391201037e-06, -4.4167383584587505e-06, 1.6448448070728896e-05,
    -5.754195010082104e-05, 0.00018850288509584165, -0.0005763755745385824,
    0.0016394756169413357, -0.004324309995050576, 0.010546460394594998, -0.02373741480589947,
    0.04930528423967071, -0.09490109704804764, 0.17162090152220877, -0.3046826723431984,
    0.6767952744094761,
)
_I0_LARGE = (
    -7.233180487874754e-18, -4.830504485944182e-18, 4.46562142029676e-17,
    3.461222867697461e-17, -2.8276239805165836e-16, -3.425485619677219e-16,
    1.7725601330565263e-15, 3.8116806693526224e-15, -9.554846698828307e-15,
    -4.150569347287222e-14, 1.54008621752141e-14, 3.8527783827421426e-13,
    7.180124451383666e-13, -1.7941785315068062e-12, -1.3215811840447713e-11,
    -3.1499165279632416e-11, 1.1889147107846439e-11, 4.94060238822497e-10,
    3.3962320257083865e-09, 2.266668990498178e-08, 2.0489185894690638e-07,
    2.8913705208347567e-06, 6.889758346916825e-05, 0.0033691164782556943, 0.8044904110141088,
)


def _chebyshev(t, coefficients):
    """Clenshaw's recurrence for a Chebyshev series at ``t``."""
    b0 = full_like(t, coefficients[0])
    b1 = zeros_like(t)
    b2 = b1
    for c in coefficients[1:]:
        b2, b1 = b1, b0
        b0 = t * b1 - b2 + c
    return 0.5 * (b0 - b2)


def i0(x):
    """The modified Bessel function of the first kind, order 0 (float32 for integer ``x``;
    float16 and bfloat16 computed in float32). Its derivative is ``i1``, as JAX's (exactly 0
    at 0)."""
    x = as_inexact(x)
    if np.dtype(x.dtype).itemsize < 4:
        return astype(_i0(astype(x, np.float32)), x.dtype)
    return _i0(x)


@custom_jvp
def _i0(x):
    x = abs(x)
    small = less_equal(x, 8.0)
    safe_large = where(small, full_like(x, 16.0), x)
    near = _chebyshev(x / 2.0 - 2.0, _I0_SMALL)
    far = _chebyshev(32.0 / safe_large - 2.0, _I0_LARGE) / sqrt(safe_large)
    return exp(x) * where(small, near, far)


@_i0.defjvp
def _i0_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    i1 = exp(abs(x)) * bind(p.bessel_i1e_p, x)         # i1 is odd, as i1e is
    return _i0(x), i1 * t
