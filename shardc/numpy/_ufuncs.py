"""``shardc.numpy``'s elementwise functions beyond the arithmetic core in ``numpy.py``.

Transcendental functions and bit operations bind their own primitives (numpy's kernels at run
time); the rest are exact compositions. Dtypes follow JAX with x64 off: integer and boolean
operands of floating functions compute in float32.
"""
from __future__ import annotations

import numpy as np

from compiler.tracing import bind
from ir import dtypes as _dt
from ir import primitives as p
from shardc.numpy._core import (_binary, _broadcast_operands, _convert, _dtype_of, _is_array,
                                _make_unary, _promote, arctan2, asarray, power, where)
import shardc.numpy as jnp

__all__ = [
    "acos", "arccos", "acosh", "arccosh", "asin", "arcsin", "asinh", "arcsinh", "atan", "arctan",
    "atanh", "arctanh", "atan2", "sinh", "cosh", "cbrt", "exp2", "log2", "log10", "deg2rad",
    "radians", "rad2deg", "degrees", "fabs", "positive", "pow", "float_power", "fmod", "divmod",
    "modf", "trunc", "rint", "copysign", "signbit", "heaviside", "hypot", "logaddexp",
    "logaddexp2", "sinc", "isneginf", "isposinf", "invert", "bitwise_not", "bitwise_invert",
    "left_shift", "bitwise_left_shift", "right_shift", "bitwise_right_shift", "bitwise_count",
    "logical_xor", "nextafter", "spacing", "frexp", "ldexp", "gcd", "lcm", "real", "imag",
    "conj", "conjugate", "angle", "iscomplex", "isreal", "iscomplexobj", "isrealobj",
    "nan_to_num", "fmax", "fmin",
]

arcsin = asin = _make_unary(p.asin_p, "arcsin")
arccos = acos = _make_unary(p.acos_p, "arccos")
arctan = atan = _make_unary(p.atan_p, "arctan")
sinh = _make_unary(p.sinh_p, "sinh")
cosh = _make_unary(p.cosh_p, "cosh")
arcsinh = asinh = _make_unary(p.asinh_p, "arcsinh")
arccosh = acosh = _make_unary(p.acosh_p, "arccosh")
arctanh = atanh = _make_unary(p.atanh_p, "arctanh")
cbrt = _make_unary(p.cbrt_p, "cbrt")
exp2 = _make_unary(p.exp2_p, "exp2")
atan2 = arctan2
pow = power


def _array(x):
    return asarray(x) if not _is_array(x) else x


def _inexact(x):
    """``x`` as an array of a floating dtype (integers and booleans become float32)."""
    x = _array(x)
    return x if _dt.is_inexact(_dtype_of(x)) else _convert(x, _dt.float_)


def _inexact_pair(x, y):
    x, y = _promote(x, y)
    if not _dt.is_inexact(_dtype_of(x)):
        x, y = _convert(x, _dt.float_), _convert(y, _dt.float_)
    return x, y


def log2(x):
    """Base-2 logarithm; exact at powers of two."""
    x = _inexact(x)
    return jnp.divide(jnp.log(x), _convert(np.log(2), _dtype_of(x)))


def log10(x):
    """Base-10 logarithm."""
    x = _inexact(x)
    return jnp.divide(jnp.log(x), _convert(np.log(10), _dtype_of(x)))


def deg2rad(x):
    """Degrees to radians."""
    x = _inexact(x)
    return jnp.multiply(x, _convert(np.pi / 180, _dtype_of(x)))


def rad2deg(x):
    """Radians to degrees."""
    x = _inexact(x)
    return jnp.multiply(x, _convert(180 / np.pi, _dtype_of(x)))


radians, degrees = deg2rad, rad2deg


def fabs(x):
    """Absolute value as a float (integers become float32)."""
    return jnp.abs(_inexact(x))


def positive(x):
    """``+x``: ``x`` itself (booleans are refused, as by numpy and JAX)."""
    x = _array(x)
    if _dt.is_bool(_dtype_of(x)):
        raise TypeError("positive does not accept dtype bool.")
    return x


def float_power(x, y):
    """``x ** y`` in the widest float (float32 with x64 off)."""
    x, y = _inexact_pair(x, y)
    return jnp.power(x, y)


def fmod(x, y):
    """Remainder of ``x / y`` with the sign of ``x`` (C's fmod); integer ``y == 0`` gives 0."""
    x, y = jnp._numeric_pair(x, y)
    return bind(p.rem_p, x, jnp._nonzero_int_divisor(y))


def divmod(x, y):
    """``(x // y, x % y)``, floor division and the remainder with ``y``'s sign."""
    return jnp.floor_divide(x, y), jnp.remainder(x, y)


def trunc(x):
    """Round towards zero; integers pass through."""
    x = _array(x)
    if not _dt.is_inexact(_dtype_of(x)):
        return x
    return where(jnp.less(x, 0), jnp.ceil(x), jnp.floor(x))


def modf(x):
    """``(fractional part, integral part)`` of ``x``, both with ``x``'s sign, as floats."""
    x = _inexact(x)
    whole = trunc(x)
    # an infinity's fractional part is a zero of its sign
    fraction = where(jnp.isinf(x), copysign(0.0, x), jnp.subtract(x, whole))
    return fraction, whole


def rint(x):
    """Round to the nearest integer, halves to even; integers become float32 (as in JAX)."""
    return jnp.round(_inexact(x))


def signbit(x):
    """True where the sign bit is set (so for -0.0 and negative NaNs too)."""
    x = _array(x)
    dtype = _dtype_of(x)
    if _dt.is_bool(dtype):
        return jnp.zeros_like(x, bool)
    if not _dt.is_inexact(dtype):
        return jnp.less(x, 0)
    return bind(p.signbit_p, x)


def copysign(x, y):
    """``|x|`` with the sign bit of ``y``."""
    x, y = _inexact_pair(x, y)
    x, y = _broadcast_operands(x, y)
    magnitude = jnp.abs(x)
    return where(signbit(y), jnp.negative(magnitude), magnitude)


def heaviside(x, h0):
    """0 where ``x < 0``, ``h0`` where ``x == 0``, 1 where ``x > 0`` (NaN stays NaN); a float
    result, as numpy's and JAX's."""
    x, h0 = _inexact_pair(x, h0)
    zero, one = jnp.zeros_like(x), jnp.ones_like(x)
    step = where(jnp.less(x, 0), zero, where(jnp.greater(x, 0), one, h0))
    if _dt.is_inexact(_dtype_of(x)):
        step = where(jnp.isnan(x), x, step)
    return step


def hypot(x, y):
    """``sqrt(x**2 + y**2)`` without overflow or underflow in the squares."""
    x, y = _inexact_pair(x, y)
    x, y = jnp.abs(x), jnp.abs(y)
    big, small = jnp.maximum(x, y), jnp.minimum(x, y)
    safe_big = where(jnp.equal(big, 0), jnp.ones_like(big), big)
    ratio = jnp.divide(small, safe_big)
    result = jnp.multiply(big, jnp.sqrt(jnp.add(1, jnp.multiply(ratio, ratio))))
    infinite = jnp.logical_or(jnp.isinf(x), jnp.isinf(y))
    return where(infinite, jnp.full_like(result, np.inf), result)


def _logaddexp(x, y, log1p_of_exp_neg):
    x, y = _inexact_pair(x, y)
    big = jnp.maximum(x, y)
    gap = jnp.negative(jnp.abs(jnp.subtract(x, y)))
    out = jnp.add(big, log1p_of_exp_neg(gap))
    # equal infinities: their difference is NaN, the answer the infinity itself
    same = jnp.equal(x, y)
    return where(same & jnp.isinf(x), x, out)


def logaddexp(x, y):
    """``log(exp(x) + exp(y))`` without overflow."""
    return _logaddexp(x, y, lambda gap: jnp.log1p(jnp.exp(gap)))


def logaddexp2(x, y):
    """``log2(2**x + 2**y)`` without overflow."""
    def log2_1p_exp2(gap):
        return jnp.divide(jnp.log1p(exp2(gap)), _convert(np.log(2), _dtype_of(gap)))
    return _logaddexp(x, y, log2_1p_exp2)


def sinc(x):
    """``sin(pi x) / (pi x)``, 1 at 0."""
    x = _inexact(x)
    zero = jnp.equal(x, 0)
    safe = where(zero, jnp.ones_like(x), x)
    pix = jnp.multiply(safe, _convert(np.pi, _dtype_of(x)))
    return where(zero, jnp.ones_like(x), jnp.divide(jnp.sin(pix), pix))


def isneginf(x):
    """True where ``x`` is negative infinity."""
    x = _array(x)
    return jnp.logical_and(jnp.isinf(x), signbit(x)) if _dt.is_inexact(_dtype_of(x)) \
        else jnp.zeros_like(x, bool)


def isposinf(x):
    """True where ``x`` is positive infinity."""
    x = _array(x)
    return jnp.logical_and(jnp.isinf(x), jnp.logical_not(signbit(x))) \
        if _dt.is_inexact(_dtype_of(x)) else jnp.zeros_like(x, bool)


def invert(x):
    """Bitwise not (logical not of booleans)."""
    x = _array(x)
    if _dt.is_inexact(_dtype_of(x)):
        raise TypeError(f"invert requires integer or boolean operands, got {_dtype_of(x)}")
    return bind(p.not_p, x)


bitwise_not = bitwise_invert = invert


def _integer_pair(name, x, y):
    x, y = _promote(x, y)
    if _dt.is_bool(_dtype_of(x)):      # as JAX: booleans shift as int32
        x, y = _convert(x, _dt.int_), _convert(y, _dt.int_)
    if not (_dt.is_int(_dtype_of(x))):
        raise TypeError(f"{name} requires integer operands, got {_dtype_of(x)}")
    return _broadcast_operands(x, y)


def left_shift(x, y):
    """``x << y``; shifting by the bit width or more (or by a negative amount) gives 0."""
    x, y = _integer_pair("left_shift", x, y)
    return bind(p.shift_left_p, x, y)


def right_shift(x, y):
    """``x >> y``: arithmetic for signed integers (sign fill), logical for unsigned ones."""
    x, y = _integer_pair("right_shift", x, y)
    prim = p.shift_right_logical_p if np.issubdtype(_dtype_of(x), np.unsignedinteger) \
        else p.shift_right_arithmetic_p
    return bind(prim, x, y)


bitwise_left_shift, bitwise_right_shift = left_shift, right_shift


def bitwise_count(x):
    """Number of 1 bits in ``|x|`` as uint8 (numpy's and JAX's choice)."""
    x = _array(x)
    dtype = _dtype_of(x)
    if _dt.is_bool(dtype):
        return jnp.astype(x, np.uint8)
    if not _dt.is_int(dtype):
        raise TypeError(f"bitwise_count requires integer operands, got {dtype}")
    return jnp.astype(bind(p.population_count_p, jnp.abs(x)), np.uint8)


def logical_xor(x, y):
    """Elementwise logical exclusive or (operands taken as booleans)."""
    return _binary(p.xor_p, jnp.astype(x, bool), jnp.astype(y, bool))


def nextafter(x, y):
    """The next representable float after ``x`` towards ``y``."""
    x, y = _inexact_pair(x, y)
    x, y = _broadcast_operands(x, y)
    return bind(p.nextafter_p, x, y)


def spacing(x):
    """Distance from ``x`` to the next float away from zero, with ``x``'s sign (so -0.0 gives
    the negative smallest subnormal, as in JAX; numpy gives the positive one)."""
    x = _inexact(x)
    away = where(signbit(x), jnp.full_like(x, -np.inf), jnp.full_like(x, np.inf))
    result = jnp.subtract(nextafter(x, away), x)
    tiny = np.finfo(_dtype_of(x)).smallest_subnormal
    return where(jnp.equal(result, 0), copysign(_convert(tiny, _dtype_of(x)), x), result)


def _exp2_int(e, dtype):
    """``2 ** e`` for integer ``e`` within the normal range of ``dtype`` (exact)."""
    return exp2(jnp.astype(e, dtype))


def ldexp(x, e):
    """``x * 2 ** e`` (integer ``e``), exact across the whole range of ``x``'s dtype."""
    x = _inexact(x)
    e = _array(e)
    if not _dt.is_int(_dtype_of(e)):
        raise TypeError(f"ldexp: the exponent must be an integer, got {_dtype_of(e)}")
    dtype = _dtype_of(x)
    info = np.finfo(dtype)
    e = jnp.clip(jnp.astype(e, _dt.int_), -3 * info.maxexp, 3 * info.maxexp)
    # three factors, each within the normal range: 2**e itself may not be
    step = jnp.floor_divide(e, 3)
    result = x
    for part in (step, step, jnp.subtract(e, jnp.multiply(step, 2))):
        result = jnp.multiply(result, _exp2_int(part, dtype))
    return result


def frexp(x):
    """``(m, e)`` with ``x == m * 2 ** e``, ``0.5 <= |m| < 1`` (``m = x``, ``e = 0`` at 0,
    infinities and NaN); ``e`` is int32."""
    x = _inexact(x)
    dtype = _dtype_of(x)
    info = np.finfo(dtype)
    special = jnp.logical_or(jnp.equal(x, 0), jnp.logical_not(jnp.isfinite(x)))
    safe = where(special, jnp.ones_like(x), x)
    # subnormals first scaled into the normal range, so log2 sees a normal number
    tiny = jnp.less(jnp.abs(safe), info.smallest_normal)
    boost = info.nmant + 1
    scaled = where(tiny, jnp.multiply(safe, _exp2_int(np.int32(boost), dtype)), safe)
    e = jnp.astype(jnp.floor(log2(jnp.abs(scaled))), _dt.int_) + 1
    m = ldexp(scaled, jnp.negative(e))
    # log2 may round across a power of two: one step of correction either way
    too_big = jnp.greater_equal(jnp.abs(m), 1)
    too_small = jnp.less(jnp.abs(m), 0.5)
    m = where(too_big, jnp.multiply(m, 0.5), where(too_small, jnp.multiply(m, 2.0), m))
    e = jnp.add(e, jnp.subtract(jnp.astype(too_big, _dt.int_), jnp.astype(too_small, _dt.int_)))
    e = jnp.subtract(e, jnp.where(tiny, boost, 0))
    return where(special, x, m), where(special, jnp.zeros_like(e), e)


def gcd(x, y):
    """Greatest common divisor of integers (non-negative), by Euclid's algorithm."""
    from compiler.control_flow import while_loop
    x, y = _integer_pair("gcd", x, y)
    x, y = jnp.broadcast_arrays(jnp.abs(x), jnp.abs(y))

    def unfinished(state):
        return jnp.any(jnp.not_equal(state[1], 0))

    def step(state):
        a, b = state
        safe_b = where(jnp.equal(b, 0), jnp.ones_like(b), b)
        return where(jnp.equal(b, 0), a, b), where(jnp.equal(b, 0), b, jnp.remainder(a, safe_b))
    return while_loop(unfinished, step, (x, y))[0]


def lcm(x, y):
    """Least common multiple of integers (non-negative); 0 if either is 0."""
    x, y = _integer_pair("lcm", x, y)
    divisor = gcd(x, y)
    safe = where(jnp.equal(divisor, 0), jnp.ones_like(divisor), divisor)
    return jnp.abs(jnp.multiply(jnp.floor_divide(x, safe), y))


def _real_only(name, x):
    x = _array(x)
    if np.issubdtype(_dtype_of(x), np.complexfloating):
        raise NotImplementedError(f"jnp.{name}: complex arrays are not supported by shardc")
    return x


def real(x):
    """The real part: a real array itself."""
    return _real_only("real", x)


def imag(x):
    """The imaginary part: zeros for a real array."""
    return jnp.zeros_like(_real_only("imag", x))


def conj(x):
    """The complex conjugate: a real array itself."""
    return _real_only("conj", x)


conjugate = conj


def angle(z, deg=False):
    """The argument of ``z``: 0 for non-negative reals, pi for negative ones (and -0.0)."""
    z = _inexact(_real_only("angle", z))
    result = jnp.arctan2(jnp.zeros_like(z), z)
    return rad2deg(result) if deg else result


def iscomplex(x):
    """False everywhere for a real array (shardc has no complex arrays)."""
    return jnp.zeros_like(_real_only("iscomplex", x), bool)


def isreal(x):
    """True everywhere for a real array."""
    return jnp.ones_like(_real_only("isreal", x), bool)


def iscomplexobj(x) -> bool:
    """Whether ``x`` has a complex dtype."""
    return bool(np.issubdtype(_dtype_of(_array(x)), np.complexfloating))


def isrealobj(x) -> bool:
    """Whether ``x`` has a non-complex dtype."""
    return not iscomplexobj(x)


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """NaN to ``nan``, infinities to ``posinf``/``neginf`` (default: the dtype's extremes)."""
    x = _array(x)
    dtype = _dtype_of(x)
    if not _dt.is_inexact(dtype):
        return x
    info = np.finfo(dtype)
    posinf = info.max if posinf is None else posinf
    neginf = info.min if neginf is None else neginf
    x = where(jnp.isnan(x), _convert(nan, dtype), x)
    x = where(isposinf(x), _convert(posinf, dtype), x)
    return where(isneginf(x), _convert(neginf, dtype), x)


def fmax(x, y):
    """Elementwise maximum that ignores a NaN (NaN only where both are). At a tie the result
    is ``y`` (so is its derivative), as JAX's."""
    x, y = _promote(x, y)
    return where(jnp.logical_or(jnp.greater(x, y), jnp.isnan(y)), x, y)


def fmin(x, y):
    """Elementwise minimum that ignores a NaN (NaN only where both are). At a tie the result
    is ``y`` (so is its derivative), as JAX's."""
    x, y = _promote(x, y)
    return where(jnp.logical_or(jnp.less(x, y), jnp.isnan(y)), x, y)
