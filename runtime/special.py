"""Kernels of the special functions (``lax.erf``, ``erfc``, ``erf_inv``, ``lgamma``,
``digamma``), elementwise on numpy arrays of any shape.

Each is computed in float64 and rounded once to the operand's dtype, so float32 results are
correctly rounded or within an ulp. ``erf``, ``erfc`` and ``lgamma`` evaluate the C library's
functions (``math``) per element; ``erf_inv`` refines a closed-form estimate by Newton steps on
``erf``/``erfc``; ``digamma`` shifts its argument up by the recurrence and sums the asymptotic
series (the reflection formula covers negative arguments).
"""
from __future__ import annotations

import functools
import math

import numpy as np

_erf_objects = np.frompyfunc(math.erf, 1, 1)
_erfc_objects = np.frompyfunc(math.erfc, 1, 1)


def _erf64(x):
    # frompyfunc gives an object array (a Python float for a 0-d operand)
    return np.asarray(_erf_objects(x), np.float64)


def _erfc64(x):
    return np.asarray(_erfc_objects(x), np.float64)


def _lgamma_scalar(x: float) -> float:
    # math.lgamma raises at the poles (0, -1, ...); lax.lgamma gives +inf there.
    try:
        return math.lgamma(x)
    except (ValueError, OverflowError):
        return math.inf if not math.isnan(x) else math.nan


_lgamma64 = np.frompyfunc(_lgamma_scalar, 1, 1)


def _float64(x) -> np.ndarray:
    return np.asarray(x, np.float64)


def _as(x, values) -> np.ndarray:
    return np.asarray(values, np.float64).astype(np.asarray(x).dtype)


def erf(x):
    return _as(x, _erf64(_float64(x)))


def erfc(x):
    return _as(x, _erfc64(_float64(x)))


def lgamma(x):
    return _as(x, _lgamma64(_float64(x)))


def _erf_inv64(y: np.ndarray) -> np.ndarray:
    """``erf_inv`` in float64: Winitzki's estimate (relative error < 2e-3) then Newton steps,
    on ``erfc`` where ``|y| > 0.5`` so the tails keep their relative accuracy."""
    a = 0.147
    with np.errstate(divide="ignore", invalid="ignore"):
        log_term = np.log1p(-y * y)
        first = 2 / (np.pi * a) + log_term / 2
        x = np.sign(y) * np.sqrt(np.sqrt(first * first - log_term / a) - first)
        tail = np.abs(y) > 0.5
        one_minus = 1 - np.abs(y)                     # exact for float32 operands
        for _ in range(5):
            ax = np.abs(x)
            slope = 2 / np.sqrt(np.pi) * np.exp(-ax * ax)
            residual = np.where(tail, _erfc64(ax) - one_minus, _erf64(ax) - np.abs(y))
            step = np.where(tail, -residual, residual) / slope
            x = np.sign(y) * (ax - np.where(np.isfinite(step), step, 0))
    x = np.where(np.abs(y) == 1, np.sign(y) * np.inf, x)
    return np.where(np.abs(y) > 1, np.nan, x)


def erf_inv(x):
    return _as(x, _erf_inv64(_float64(x)))


_DIGAMMA_SERIES = (1 / 12, -1 / 120, 1 / 252, -1 / 240, 1 / 132, -691 / 32760, 1 / 12)


def _digamma_positive(x: np.ndarray) -> np.ndarray:
    """``digamma`` for ``x > 0``: the recurrence ``psi(x) = psi(x + 1) - 1/x`` up to ``x >= 10``,
    then the asymptotic series ``log x - 1/2x - sum B_2k / (2k x^2k)``."""
    shift = np.zeros_like(x)
    for _ in range(10):
        small = x < 10
        shift = shift - np.where(small, 1 / np.where(small, x, 1), 0)
        x = np.where(small, x + 1, x)
    inv2 = 1 / (x * x)
    series = 0.0
    for coefficient in reversed(_DIGAMMA_SERIES):
        series = (series + coefficient) * inv2
    return shift + np.log(x) - 0.5 / x - series


def _digamma64(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        negative = x <= 0
        # reflection: psi(x) = psi(1 - x) - pi / tan(pi x); poles at 0, -1, ... give nan
        reflected = np.where(negative, 1 - x, x)
        out = _digamma_positive(reflected)
        out = np.where(negative, out - np.pi / np.tan(np.pi * x), out)
        return np.where(negative & (x == np.floor(x)), np.nan, out)


def digamma(x):
    return _as(x, _digamma64(_float64(x)))


# B_2j / (2j)! for the Euler-Maclaurin tail of the Hurwitz zeta function
_ZETA_TAIL = (1 / 12, -1 / 720, 1 / 30240, -1 / 1209600, 1 / 47900160,
              -691 / 1307674368000, 1 / 74724249600)


def _hurwitz_zeta64(s: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``sum_k (q + k)^-s`` for integer ``s >= 2``: direct terms until ``q + k >= 10``, then the
    Euler-Maclaurin tail."""
    total = np.zeros(np.broadcast(s, q).shape)
    q = q + np.zeros_like(total)
    for _ in range(int(np.ceil(max(0.0, 10 - np.nanmin(q, initial=10.0))))):
        small = q < 10
        total = total + np.where(small, np.where(small, q, 1.0) ** -s, 0)
        q = np.where(small, q + 1, q)
    tail = q ** (1 - s) / (s - 1) + 0.5 * q ** -s
    rising, power = s.copy() if np.ndim(s) else np.asarray(s, np.float64), q ** (-s - 1)
    for k, coefficient in enumerate(_ZETA_TAIL):
        tail = tail + coefficient * rising * power
        rising = rising * (s + 2 * k + 1) * (s + 2 * k + 2)
        power = power / (q * q)
    return total + tail


def _polygamma64(m: np.ndarray, x: np.ndarray) -> np.ndarray:
    m, x = np.broadcast_arrays(m, x)
    with np.errstate(all="ignore"):
        order = np.where(m >= 1, m, 1.0)
        sign = np.where(order % 2 == 1, 1.0, -1.0)
        factorial = np.vectorize(math.gamma, otypes=[np.float64])(order + 1)
        higher = sign * factorial * _hurwitz_zeta64(order + 1, x)
        out = np.where(m == 0, _digamma64(x), higher)
        pole = (x <= 0) & (x == np.floor(x))
        bad_order = (m < 0) | (m != np.floor(m))
        return np.where(pole | bad_order, np.nan, out)


def polygamma(m, x):
    """``polygamma(m, x)``: the ``m``-th derivative of ``digamma`` (``m`` a non-negative
    integer-valued float; nan otherwise and at the poles)."""
    return _as(x, _polygamma64(_float64(m), _float64(x)))


@functools.lru_cache(maxsize=None)
def reduce_precision_kernel(exponent_bits: int, mantissa_bits: int):
    """The elementwise kernel of ``reduce_precision`` for one format (one function object per
    format, so kernels built from it are shared)."""
    return functools.partial(_reduce_precision, exponent_bits=exponent_bits,
                             mantissa_bits=mantissa_bits)


def _reduce_precision(x, *, exponent_bits: int, mantissa_bits: int):
    """XLA's rounding on the float's bits (read as the unsigned integer of its width): round
    the mantissa to nearest even, then saturate the exponent to inf or flush it to zero."""
    x = np.asarray(x)
    info = np.finfo(x.dtype)
    width = x.dtype.itemsize * 8
    uint = np.dtype(f"uint{width}")
    src_mantissa, src_exponent = int(info.nmant), int(info.nexp)
    u = lambda value: uint.type(value)
    bits = np.ascontiguousarray(x).view(uint)
    if mantissa_bits < src_mantissa:
        # half an ulp of the new format, less one, plus the kept last bit: ties go to even
        dropped = src_mantissa - mantissa_bits
        kept_bit = (bits >> u(dropped)) & u(1)
        bias = kept_bit + u((1 << (dropped - 1)) - 1)
        bits = (bits + bias) & u(~((1 << dropped) - 1) & (2 ** width - 1))
    if exponent_bits < src_exponent:
        exponent_mask = u(((1 << src_exponent) - 1) << src_mantissa)
        src_bias = (1 << (src_exponent - 1)) - 1
        new_bias = (1 << (exponent_bits - 1)) - 1
        exponent = bits & exponent_mask
        signed_zero = bits & u(1 << (width - 1))
        bits = np.where(exponent > u((src_bias + new_bias) << src_mantissa),
                        signed_zero | exponent_mask,
                        np.where(exponent <= u((src_bias - new_bias) << src_mantissa),
                                 signed_zero, bits))
    out = np.asarray(bits, uint).view(x.dtype).reshape(x.shape)
    return np.where(np.isnan(x), x, out) if mantissa_bits < src_mantissa else out
