"""Kernels of the special functions (``lax.erf``, ``erfc``, ``erf_inv``, ``lgamma``,
``digamma``) and of float32 ``log`` and ``log1p``, elementwise on numpy arrays of any shape.

Each is computed in float64 and rounded once to the operand's dtype, so float32 results are
correctly rounded or within an ulp, but for float32 (and narrower) ``erf``, ``erf_inv``,
``log`` and ``log1p``, which compute as XLA's CPU code does, bit for bit (JAX's random
samplers are made of them). ``erfc``, ``lgamma`` and float64 ``erf`` evaluate the C
library's functions (``math``) per element; float64 ``erf_inv`` refines a closed-form estimate
by Newton steps on ``erf``/``erfc``; ``digamma`` shifts its argument up by the recurrence and
sums the asymptotic series (the reflection formula covers negative arguments).
"""
from __future__ import annotations

import functools
import math

import ml_dtypes
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


# XLA's float32 ``erf`` (Eigen's rational interpolant): ``x P(x^2) / Q(x^2)``, each polynomial
# evaluated by fused multiply-adds, and +-1 from ``erf_inv(1 - 2**-24)`` on.
_ERF32_P = (0.00022905065861350646, 0.0034082910107109506, 0.050955695062380861,
            0.18520832239976145, 1.128379143519084)
_ERF32_Q = (-1.1791602954361697e-7, 0.000023547966471313185, 0.0010179625278914885,
            0.014070470171167667, 0.11098505178285362, 0.49746925110067538, 1.0)
_ERF32_SATURATES = np.float32(3.832506856900711)


def _fma32(a, b, c):
    """``a * b + c`` rounded once to float32 (as a fused multiply-add, but for a double
    rounding through float64 once in about 2**29 cases): the float32 product is exact in
    float64."""
    return (a.astype(np.float64) * b + np.float64(c)).astype(np.float32)


def _horner32(x2, coefficients):
    value = np.full_like(x2, np.float32(coefficients[0]))
    value = _fma32(x2, value, np.float32(coefficients[1]))
    for c in coefficients[2:]:
        value = _fma32(x2, value, np.float32(c))
    return value


def _erf32(x: np.ndarray) -> np.ndarray:
    """``erf`` in float32 as XLA's CPU code computes it (JAX's values). A subnormal operand
    counts as zero (XLA flushes them)."""
    x = np.where(np.abs(x) < np.finfo(np.float32).tiny, x * np.float32(0), x)
    x2 = x * x
    with np.errstate(invalid="ignore", over="ignore"):
        ratio = x * _horner32(x2, _ERF32_P) / _horner32(x2, _ERF32_Q)
    return np.where(np.abs(x) >= _ERF32_SATURATES, np.copysign(np.float32(1), x), ratio)


# XLA's float32 ``log`` (Cephes' ``logf``): ``x = 2**e m`` with ``m`` in ``[sqrt(1/2),
# sqrt(2))``, ``log(m)`` a polynomial in ``m - 1``, ``e log 2`` added in two parts. Only
# ``erf_inv`` computes with it (and so the normal draws are JAX's): ``lax.log`` and ``log1p``
# are numpy's, within an ulp of XLA's and a hundred times faster.
_LOG32_P = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
            1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
            3.3333331174e-1)
_LOG32_LN2_LOW, _LOG32_LN2_HIGH = np.float32(-2.12194440e-4), np.float32(0.693359375)
# XLA's float32 ``log1p`` for ``|x| < sqrt(2) - 1`` (Cephes' rational approximation), and
# ``log(1 + x)`` beyond.
_LOG1P32_P = (4.5270000862445199635215e-5, 4.9854102823193375972212e-1,
              6.5787325942061044846969e0, 2.9911919328553073277375e1,
              6.0949667980987787057556e1, 5.7112963590585538103336e1,
              2.0039553499201281259648e1)
_LOG1P32_Q = (1.0, 1.5062909083469192043167e1, 8.3047565967967209469434e1,
              2.2176239823732856465394e2, 3.0909872225312059774938e2,
              2.1642788614495947685003e2, 6.0118660497603843919306e1)


def _log32(x: np.ndarray) -> np.ndarray:
    """``log`` in float32 as XLA's CPU code computes it (JAX's values): -inf at 0 and at
    subnormals (XLA flushes them), NaN below 0."""
    with np.errstate(invalid="ignore", over="ignore"):
        return _log32_unchecked(x)


def _log32_unchecked(x: np.ndarray) -> np.ndarray:
    tiny = np.finfo(np.float32).tiny
    mantissa, exponent = np.frexp(np.maximum(x, tiny))
    mantissa, exponent = mantissa.astype(np.float32), exponent.astype(np.float32)
    low = mantissa < np.float32(0.707106781186547524)
    m = (mantissa - np.float32(1)) + np.where(low, mantissa, np.float32(0))
    exponent = exponent - low.astype(np.float32)
    m2 = m * m
    m3 = m2 * m
    c = [np.float32(v) for v in _LOG32_P]
    y = _fma32(c[0], m, c[1])
    y1 = _fma32(c[3], m, c[4])
    y2 = _fma32(c[6], m, c[7])
    y = _fma32(y, m, c[2])
    y1 = _fma32(y1, m, c[5])
    y2 = _fma32(y2, m, c[8])
    y = _fma32(y, m3, y1)
    y = _fma32(y, m3, y2)
    y = _fma32(y, m3, exponent * _LOG32_LN2_LOW)
    result = ((m - m2 * np.float32(0.5)) + y) + exponent * _LOG32_LN2_HIGH
    result = np.where(x < tiny, np.float32(-np.inf), result)
    result = np.where(x < 0, np.float32(np.nan), result)
    return np.where(np.isinf(x) & (x > 0), x, np.where(np.isnan(x), x, result))


def _log1p32(x: np.ndarray) -> np.ndarray:
    """``log1p`` in float32 as XLA's CPU code computes it (JAX's values)."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        x2 = x * x
        ratio = _horner32(x, (0.0,) + _LOG1P32_P) / _horner32(x, (0.0,) + _LOG1P32_Q)
        small = x + _fma32(np.float32(-0.5), x2, (x * x2) * ratio)
        large = _log32(x + np.float32(1))
    return np.where(np.abs(x) < np.float32(0.41421356237309504880), small, large)



def erf(x):
    """float64 in float64 (the C library's); float32 and narrower floats through XLA's
    float32 approximation, as JAX computes them."""
    x = np.asarray(x)
    if x.dtype == np.float64:
        return _as(x, _erf64(_float64(x)))
    return _erf32(x.astype(np.float32)).astype(x.dtype)


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


# XLA's float32 ``erf_inv`` (Giles' single-precision approximation): a polynomial in
# ``w = -log1p(-x * x)``, shifted, one set of coefficients each side of ``w = 5``.
_ERF_INV32_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06,
                      0.00021858087, -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
_ERF_INV32_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844,
                   0.00573950773, -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)


def _erf_inv32(x: np.ndarray) -> np.ndarray:
    """``erf_inv`` in float32 as XLA computes it (within 3 ulps of the true value; JAX's
    values): the polynomial evaluated by fused multiply-adds, of XLA's ``log1p``."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        w = -_log1p32(-x * x)
        central = w < np.float32(5)
        out = np.empty(x.shape, np.float32)
        if central.all():          # the common case: no tail, no copies in and out
            out[...] = _erf_inv32_polynomial(w - np.float32(2.5), _ERF_INV32_CENTRAL) * x
        else:
            tail = ~central
            out[central] = _erf_inv32_polynomial(w[central] - np.float32(2.5),
                                                 _ERF_INV32_CENTRAL) * x[central]
            out[tail] = _erf_inv32_polynomial(np.sqrt(w[tail]) - np.float32(3),
                                              _ERF_INV32_TAIL) * x[tail]
        return np.where(np.abs(x) == 1, x * np.float32(np.inf), out)


def _erf_inv32_polynomial(w: np.ndarray, coefficients) -> np.ndarray:
    """Horner's steps ``p = c + p * w`` in float32, each multiply-add rounded once as XLA's
    CPU code fuses them: the float32 product is exact in float64, the sum rounds there, then
    to float32."""
    wide = w.astype(np.float64)
    step = np.empty_like(wide)
    p = np.empty(w.shape, np.float32)
    p[...] = np.float32(coefficients[0])
    for c in coefficients[1:]:
        np.multiply(p, wide, out=step)
        step += np.float64(np.float32(c))
        p[...] = step
    return p


def erf_inv(x):
    """float64 in float64 (closely); float32 and narrower floats through XLA's float32
    approximation, as JAX computes them."""
    x = np.asarray(x)
    if x.dtype == np.float64:
        return _erf_inv64(x)
    return _erf_inv32(x.astype(np.float32)).astype(x.dtype)


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
        # at a pole an odd order is zeta of an even order there: +inf (XLA's, Eigen's rule)
        out = np.where(pole, np.where((m >= 1) & (order % 2 == 1), np.inf, np.nan), out)
        return np.where(bad_order, np.nan, out)


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
    info = ml_dtypes.finfo(x.dtype)       # numpy's finfo knows no bfloat16
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
    # a NaN stays NaN wherever the format has a mantissa to spell one (the rounding, or the
    # saturated exponent, would make it inf)
    return np.where(np.isnan(x), x, out) if mantissa_bits > 0 else out


# --- incomplete gamma, Hurwitz zeta, exponentially scaled Bessel functions --------------------
# (JAX's lax.igamma, igammac, igamma_grad_a, zeta, bessel_i0e, bessel_i1e.) Each in float64,
# vectorised with masks, iterated until every element has converged.

_EPS = np.finfo(np.float64).eps
_TINY = 1e-300


def _igamma_prefix(a, x):
    """``x^a e^-x / Gamma(a)``, in logs."""
    with np.errstate(all="ignore"):
        return np.exp(a * np.log(x) - x - _lgamma64(a).astype(np.float64))


def _igamma_pq64(a, x):
    """(P, Q): the regularized lower and upper incomplete gamma functions. A series for
    ``x < a + 1``, Lentz's continued fraction for Q otherwise; nan where ``a < 0`` or
    ``x < 0``; P(0, x > 0) = 1 and P(a, 0) = 0, as JAX gives."""
    a, x = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(x, np.float64))
    p, q = np.full(a.shape, np.nan), np.full(a.shape, np.nan)
    ok = (a > 0) & (x > 0) & np.isfinite(x) & np.isfinite(a)
    series = ok & (x < a + 1)
    if series.any():
        aa, xx = a[series], x[series]
        term = 1.0 / aa
        total = term.copy()
        n = 0
        while n < 100000:
            n += 1
            term = term * xx / (aa + n)
            total = total + term
            if np.all(np.abs(term) <= np.abs(total) * _EPS):
                break
        value = np.minimum(total * _igamma_prefix(aa, xx), 1.0)
        p[series], q[series] = value, 1.0 - value
    fraction = ok & ~series
    if fraction.any():
        aa, xx = a[fraction], x[fraction]
        b = xx + 1.0 - aa
        c = np.full(aa.shape, 1.0 / _TINY)
        d = 1.0 / b
        h = d.copy()
        for i in range(1, 100000):
            an = -i * (i - aa)
            b = b + 2.0
            d = an * d + b
            d = np.where(np.abs(d) < _TINY, _TINY, d)
            c = b + an / c
            c = np.where(np.abs(c) < _TINY, _TINY, c)
            d = 1.0 / d
            step = d * c
            h = h * step
            if np.all(np.abs(step - 1.0) <= _EPS):
                break
        value = np.minimum(h * _igamma_prefix(aa, xx), 1.0)
        p[fraction], q[fraction] = 1.0 - value, value
    edge_zero_x = (a > 0) & (x == 0)
    p[edge_zero_x], q[edge_zero_x] = 0.0, 1.0
    edge_inf_x = (a >= 0) & (x == np.inf)
    p[edge_inf_x], q[edge_inf_x] = 1.0, 0.0
    edge_zero_a = (a == 0) & (x > 0)
    p[edge_zero_a], q[edge_zero_a] = 1.0, 0.0
    # XLA's P(0, x) is 1 only where it takes 1 - Q (x of 1 and above); its series, used
    # below, divides by a and gives nan (Q(0, x) is 0 either way)
    p[(a == 0) & (x > 0) & (x < 1)] = np.nan
    return p, q


def igamma(a, x):
    """The regularized lower incomplete gamma function P(a, x)."""
    return _as(x, _igamma_pq64(_float64(a), _float64(x))[0])


def igammac(a, x):
    """The regularized upper incomplete gamma function Q(a, x) = 1 - P(a, x)."""
    return _as(x, _igamma_pq64(_float64(a), _float64(x))[1])


def _central_difference(fn, s, *rest, low=-np.inf):
    """``d fn(s, *rest) / ds`` by a central difference in float64 (relative step 1e-5: the
    error, about 1e-10, is far below float32's), the step kept inside ``(low, inf)``."""
    h = 1e-5 * np.maximum(1.0, np.abs(s))
    h = np.where(s - h > low, h, (s - low) / 2)
    return (fn(s + h, *rest) - fn(s - h, *rest)) / (2 * h)


def igamma_grad_a(a, x):
    """``d P(a, x) / da``."""
    a64, x64 = _float64(a), _float64(x)
    return _as(x, _central_difference(lambda s, y: _igamma_pq64(s, y)[0], a64, x64, low=0.0))


def _zeta64(s, q):
    """The Hurwitz zeta function ``sum_k (q + k)^-s`` for ``s > 1`` (inf at ``s == 1``; at
    the poles ``q = 0, -1, ...`` inf for an even integer ``s``, else nan, as XLA's; nan below
    ``s = 1``)."""
    s, q = np.broadcast_arrays(np.asarray(s, np.float64), np.asarray(q, np.float64))
    with np.errstate(all="ignore"):
        value = _hurwitz_zeta64(np.where(s > 1, s, 2.0), q)
        # at q = 0, -1, ... XLA (Eigen) gives +inf for an even integer s, else nan
        pole = (q <= 0) & (q == np.floor(q))
        even = (s == np.floor(s)) & (np.fmod(s, 2) == 0)
        value = np.where(pole, np.where(even, np.inf, np.nan), value)
        return np.where(s == 1, np.inf, np.where(s > 1, value, np.nan))


def zeta(s, q):
    return _as(q, _zeta64(_float64(s), _float64(q)))


def zeta_grad_s(s, q):
    """``d zeta(s, q) / ds``."""
    return _as(q, _central_difference(_zeta64, _float64(s), _float64(q), low=1.0))


def _bessel_ie64(order: int, x):
    """``exp(-|x|) I_order(x)`` for order 0 or 1: the power series up to |x| = 40, the
    asymptotic series beyond (both to float64 precision there)."""
    x = np.asarray(x, np.float64)
    ax = np.abs(x)
    out = np.empty(x.shape)
    small = ax <= 40
    if small.any():
        half = ax[small] / 2
        term = np.ones(half.shape) if order == 0 else half.copy()
        total = term.copy()
        for k in range(1, 500):
            term = term * half * half / (k * (k + order))
            total = total + term
            if np.all(term <= total * _EPS):
                break
        out[small] = total * np.exp(-ax[small])
    if (~small).any():
        big = ax[~small]
        mu, term, total = 4.0 * order * order, np.ones(big.shape), np.ones(big.shape)
        for k in range(1, 30):
            term = -term * (mu - (2 * k - 1) ** 2) / (k * 8 * big)
            total = total + term
        out[~small] = total / np.sqrt(2 * np.pi * big)
    out = np.where(np.isnan(x), np.nan, out)
    return np.sign(x) * out if order == 1 else out


def bessel_i0e(x):
    return _as(x, _bessel_ie64(0, _float64(x)))


def bessel_i1e(x):
    return _as(x, _bessel_ie64(1, _float64(x)))
