"""``shardc.numpy``'s elementwise functions beyond the arithmetic core (``_arithmetic``):
inverse and hyperbolic trigonometry, logarithms and exponentials, rounding, signs and
floating-point routines, bit shifts, integer routines, complex parts.

Transcendental functions and bit operations bind their own primitives (numpy's kernels at run
time); the rest are exact compositions. Dtypes follow JAX with x64 off: integer and boolean
operands of floating functions compute in float32.
"""
from __future__ import annotations

import numpy as np

from compiler.control_flow import while_loop
from compiler.custom_ad import custom_jvp
from compiler.tracing import bind
from ir import dtypes as _dt
from ir import primitives as p
from shardc.numpy._arithmetic import (abs, add, arctan2, binary_op, ceil, clip, divide, equal, exp,
                                      floor, floor_divide, greater, greater_equal, isfinite, isinf,
                                      isnan, less, log, log1p, logical_and, logical_not, logical_or,
                                      make_unary, maximum, minimum, multiply, negative,
                                      nonzero_int_divisor, not_equal, numeric_pair, power,
                                      remainder, sin, sqrt, subtract, where)
from shardc.numpy._core import (as_array, as_inexact, astype, broadcast_arrays,
                                broadcast_operands, convert, dtype_of, full_like, keeps_weak,
                                keeps_weak_scalars, ndim_of, ones_like, promote,
                                weakly_typed_like, zeros_like)
from shardc.numpy._reductions import any

__all__ = [
    "arcsin", "asin", "acos", "arccos", "arctan", "atan", "sinh", "cosh", "arcsinh", "asinh",
    "acosh", "arccosh", "arctanh", "atanh", "cbrt", "exp2", "atan2", "pow", "log2", "log10",
    "deg2rad", "rad2deg", "degrees", "radians", "fabs", "positive", "float_power", "fmod", "divmod",
    "trunc", "modf", "rint", "round", "around", "signbit", "copysign", "heaviside", "hypot",
    "logaddexp", "logaddexp2", "sinc", "isneginf", "isposinf", "invert", "bitwise_invert",
    "bitwise_not", "left_shift", "right_shift", "bitwise_left_shift", "bitwise_right_shift",
    "bitwise_count", "logical_xor", "nextafter", "spacing", "ldexp", "frexp", "gcd", "lcm", "real",
    "imag", "conj", "conjugate", "angle", "iscomplex", "isreal", "iscomplexobj", "isrealobj",
    "nan_to_num", "fmax", "fmin",
]


arcsin = asin = make_unary(p.asin_p, "arcsin")
arccos = acos = make_unary(p.acos_p, "arccos")
arctan = atan = make_unary(p.atan_p, "arctan")
sinh = make_unary(p.sinh_p, "sinh")
cosh = make_unary(p.cosh_p, "cosh")
arcsinh = asinh = make_unary(p.asinh_p, "arcsinh")
arccosh = acosh = make_unary(p.acosh_p, "arccosh")
arctanh = atanh = make_unary(p.atanh_p, "arctanh")
cbrt = make_unary(p.cbrt_p, "cbrt")
exp2 = make_unary(p.exp2_p, "exp2")
atan2 = arctan2
pow = power


def _inexact_pair(x, y):
    x, y = promote(x, y)
    if not _dt.is_inexact(dtype_of(x)):
        x, y = convert(x, _dt.float_), convert(y, _dt.float_)
    return x, y


def log2(x):
    """Base-2 logarithm; exact at powers of two."""
    x = as_inexact(x)
    return divide(log(x), convert(np.log(2), dtype_of(x)))


def log10(x):
    """Base-10 logarithm."""
    x = as_inexact(x)
    return divide(log(x), convert(np.log(10), dtype_of(x)))


@keeps_weak_scalars
def deg2rad(x):
    """Degrees to radians."""
    x = as_inexact(x)
    return multiply(x, convert(np.pi / 180, dtype_of(x)))


@keeps_weak_scalars
def rad2deg(x):
    """Radians to degrees."""
    x = as_inexact(x)
    return multiply(x, convert(180 / np.pi, dtype_of(x)))


radians, degrees = deg2rad, rad2deg


def fabs(x):
    """Absolute value as a float (integers become float32)."""
    return abs(as_inexact(x))


def positive(x):
    """``+x``: ``x`` itself (booleans are refused, as by numpy and JAX)."""
    x = as_array(x)
    if _dt.is_bool(dtype_of(x)):
        raise TypeError("positive does not accept dtype bool.")
    return x


@keeps_weak
def float_power(x, y):
    """``x ** y`` in the widest float (float32 with x64 off)."""
    x, y = _inexact_pair(x, y)
    return power(x, y)


@keeps_weak
def fmod(x, y):
    """Remainder of ``x / y`` with the sign of ``x`` (C's fmod); integer ``y == 0`` gives 0."""
    x, y = numeric_pair(x, y)
    return bind(p.rem_p, x, nonzero_int_divisor(y))


def divmod(x, y):
    """``(x // y, x % y)``, floor division and the remainder with ``y``'s sign."""
    return floor_divide(x, y), remainder(x, y)


def trunc(x):
    """Round towards zero; integers pass through."""
    x = as_array(x)
    if not _dt.is_inexact(dtype_of(x)):
        return x
    return where(less(x, 0), ceil(x), floor(x))


@keeps_weak
def modf(x):
    """``(fractional part, integral part)`` of ``x``, both with ``x``'s sign, as floats."""
    x = as_inexact(x)
    whole = trunc(x)
    # an infinity's fractional part is a zero of its sign
    fraction = where(isinf(x), copysign(0.0, x), subtract(x, whole))
    return fraction, whole


def rint(x):
    """Round to the nearest integer, halves to even; integers become float32, typed (as in
    JAX)."""
    x = as_array(x)
    return round(x if _dt.is_inexact(dtype_of(x)) else astype(x, _dt.float_))


def round(x, decimals=0):
    """Round to ``decimals`` places, halves to even as numpy does."""
    if decimals:
        scale = 10.0 ** decimals
        return divide(round(multiply(x, scale)), scale)
    x = as_array(x)
    if not _dt.is_inexact(dtype_of(x)):
        return x
    if _is_complex(x):          # each part on its own
        return bind(p.complex_p, round(bind(p.real_p, x)), round(bind(p.imag_p, x)))
    # numpy rounds half to even
    floor_x = floor(x)
    diff = subtract(x, floor_x)
    even = equal(remainder(floor_x, 2), 0)
    up = logical_or(greater(diff, 0.5), logical_and(equal(diff, 0.5), logical_not(even)))
    # a zero result keeps x's sign (round(-0.4) is -0.0), as JAX and numpy
    return copysign(where(up, add(floor_x, 1), floor_x), x)


around = round


def signbit(x):
    """True where the sign bit is set (so for -0.0 and negative NaNs too)."""
    x = as_array(x)
    dtype = dtype_of(x)
    if _dt.is_bool(dtype):
        return zeros_like(x, bool)
    if not _dt.is_inexact(dtype):
        return less(x, convert(0, dtype))     # against a typed zero, as JAX's
    return bind(p.signbit_p, x)


@keeps_weak
def copysign(x, y):
    """``|x|`` with the sign bit of ``y``."""
    x, y = _inexact_pair(x, y)
    x, y = broadcast_operands(x, y)
    magnitude = abs(x)
    return where(signbit(y), negative(magnitude), magnitude)


@keeps_weak_scalars(like=(0,))          # its constants are made like x
def heaviside(x, h0):
    """0 where ``x < 0``, ``h0`` where ``x == 0``, 1 where ``x > 0`` (NaN stays NaN); a float
    result, as numpy's and JAX's."""
    x, h0 = _inexact_pair(x, h0)
    zero, one = zeros_like(x), ones_like(x)
    step = where(less(x, 0), zero, where(greater(x, 0), one, h0))
    if _dt.is_inexact(dtype_of(x)):
        step = where(isnan(x), x, step)
    return step


@keeps_weak_scalars
def hypot(x, y):
    """``sqrt(x**2 + y**2)`` without overflow or underflow in the squares."""
    x, y = _inexact_pair(x, y)
    x, y = abs(x), abs(y)
    big, small = maximum(x, y), minimum(x, y)
    safe_big = where(equal(big, 0), ones_like(big), big)
    ratio = divide(small, safe_big)
    result = multiply(big, sqrt(add(1, multiply(ratio, ratio))))
    infinite = logical_or(isinf(x), isinf(y))
    return where(infinite, full_like(result, np.inf), result)


def _logaddexp(x, y, log1p_of_exp_neg):
    x, y = _inexact_pair(x, y)
    big = maximum(x, y)
    gap = negative(abs(subtract(x, y)))
    out = add(big, log1p_of_exp_neg(gap))
    # equal infinities: their difference is NaN, the answer the infinity itself
    same = equal(x, y)
    return where(same & isinf(x), x, out)


def _log2_1p_exp2(gap):
    return divide(log1p(exp2(gap)), convert(np.log(2), dtype_of(gap)))


@custom_jvp
def _logaddexp_e(x, y):
    return _logaddexp(x, y, lambda gap: log1p(exp(gap)))


@custom_jvp
def _logaddexp_2(x, y):
    return _logaddexp(x, y, _log2_1p_exp2)


def _logaddexp_rule(fn, exp_fn):
    """JAX's derivative: each input's tangent weighted by ``exp(x - out)``, so equal inputs
    share it evenly (``softplus'(0) = 1/2``), not as the maximum's derivative splits it."""
    def jvp(primals, tangents):
        (x, y), (tx, ty) = primals, tangents
        out = fn(x, y)
        return out, (tx * exp_fn(_replace_inf(x) - _replace_inf(out))
                     + ty * exp_fn(_replace_inf(y) - _replace_inf(out)))
    return jvp


def _replace_inf(x):
    return where(isposinf(real(x)), zeros_like(x), x)


_logaddexp_e.defjvp(_logaddexp_rule(_logaddexp_e, exp))
_logaddexp_2.defjvp(_logaddexp_rule(_logaddexp_2, exp2))


@keeps_weak
def logaddexp(x, y):
    """``log(exp(x) + exp(y))`` without overflow."""
    return _logaddexp_e(*_inexact_pair(x, y))


@keeps_weak_scalars
def logaddexp2(x, y):
    """``log2(2**x + 2**y)`` without overflow."""
    return _logaddexp_2(*_inexact_pair(x, y))


@keeps_weak_scalars
def sinc(x):
    """``sin(pi x) / (pi x)``, 1 at 0."""
    x = as_inexact(x)
    zero = equal(x, 0)
    safe = where(zero, ones_like(x), x)
    pix = multiply(safe, convert(np.pi, dtype_of(x)))
    return where(zero, ones_like(x), divide(sin(pix), pix))


def isneginf(x):
    """True where ``x`` is negative infinity."""
    x = as_array(x)
    return logical_and(isinf(x), signbit(x)) if _dt.is_inexact(dtype_of(x)) \
        else zeros_like(x, bool)


def isposinf(x):
    """True where ``x`` is positive infinity."""
    x = as_array(x)
    return logical_and(isinf(x), logical_not(signbit(x))) \
        if _dt.is_inexact(dtype_of(x)) else zeros_like(x, bool)


def invert(x):
    """Bitwise not (logical not of booleans)."""
    x = as_array(x)
    if _dt.is_inexact(dtype_of(x)):
        raise TypeError(f"invert requires integer or boolean operands, got {dtype_of(x)}")
    return bind(p.not_p, x)


bitwise_not = bitwise_invert = invert


def _integer_pair(name, x, y):
    x, y = promote(x, y)
    if _dt.is_bool(dtype_of(x)):      # as JAX: booleans shift as int32
        x, y = convert(x, _dt.int_), convert(y, _dt.int_)
    if not (_dt.is_int(dtype_of(x))):
        if name in ("gcd", "lcm"):    # JAX's type and words
            raise ValueError(f"Arguments to jax.numpy.{name} must be integers.")
        raise TypeError(f"{name} requires integer operands, got {dtype_of(x)}")
    return broadcast_operands(x, y)


def left_shift(x, y):
    """``x << y``; shifting by the bit width or more (or by a negative amount) gives 0."""
    operands = (x, y)
    x, y = _integer_pair("left_shift", x, y)
    return weakly_typed_like(bind(p.shift_left_p, x, y), *operands)


def right_shift(x, y):
    """``x >> y``: arithmetic for signed integers (sign fill), logical for unsigned ones."""
    operands = (x, y)
    x, y = _integer_pair("right_shift", x, y)
    prim = p.shift_right_logical_p if np.issubdtype(dtype_of(x), np.unsignedinteger) \
        else p.shift_right_arithmetic_p
    return weakly_typed_like(bind(prim, x, y), *operands)


bitwise_left_shift, bitwise_right_shift = left_shift, right_shift


def bitwise_count(x):
    """Number of 1 bits in ``|x|`` as uint8 (numpy's and JAX's choice)."""
    x = as_array(x)
    dtype = dtype_of(x)
    if _dt.is_bool(dtype):
        return astype(x, np.uint8)
    if not _dt.is_int(dtype):
        raise TypeError(f"bitwise_count requires integer operands, got {dtype}")
    return astype(bind(p.population_count_p, abs(x)), np.uint8)


@keeps_weak_scalars
def logical_xor(x, y):
    """Elementwise logical exclusive or (operands taken as booleans)."""
    return binary_op(p.xor_p, astype(x, bool), astype(y, bool))


@keeps_weak
def nextafter(x, y):
    """The next representable float after ``x`` towards ``y``."""
    x, y = _inexact_pair(x, y)
    x, y = broadcast_operands(x, y)
    return bind(p.nextafter_p, x, y)


def spacing(x):
    """Distance from ``x`` to the next float away from zero, with ``x``'s sign (so -0.0 gives
    the negative smallest subnormal, as in JAX; numpy gives the positive one)."""
    x = as_inexact(x)
    away = where(signbit(x), full_like(x, -np.inf), full_like(x, np.inf))
    result = subtract(nextafter(x, away), x)
    tiny = np.finfo(dtype_of(x)).smallest_subnormal
    return where(equal(result, 0), copysign(convert(tiny, dtype_of(x)), x), result)


def _exp2_int(e, dtype):
    """``2 ** e`` for integer ``e`` within the normal range of ``dtype`` (exact)."""
    return exp2(astype(e, dtype))


def ldexp(x, e):
    """``x * 2 ** e`` (integer ``e``), exact across the whole range of ``x``'s dtype."""
    x = as_inexact(x)
    e = as_array(e)
    if not _dt.is_int(dtype_of(e)):
        raise ValueError(f"ldexp not supported for input types {(dtype_of(x), dtype_of(e))}")
    dtype = dtype_of(x)
    info = np.finfo(dtype)
    e = clip(astype(e, _dt.int_), -3 * info.maxexp, 3 * info.maxexp)
    # three factors, each within the normal range: 2**e itself may not be
    step = floor_divide(e, 3)
    result = x
    for part in (step, step, subtract(e, multiply(step, 2))):
        result = multiply(result, _exp2_int(part, dtype))
    return result


def frexp(x):
    """``(m, e)`` with ``x == m * 2 ** e``, ``0.5 <= |m| < 1`` (``m = x``, ``e = 0`` at 0,
    infinities and NaN); ``e`` is int32."""
    x = as_inexact(x)
    dtype = dtype_of(x)
    info = np.finfo(dtype)
    special = logical_or(equal(x, 0), logical_not(isfinite(x)))
    safe = where(special, ones_like(x), x)
    # subnormals first scaled into the normal range, so log2 sees a normal number
    tiny = less(abs(safe), info.smallest_normal)
    boost = info.nmant + 1
    scaled = where(tiny, multiply(safe, _exp2_int(np.int32(boost), dtype)), safe)
    e = astype(floor(log2(abs(scaled))), _dt.int_) + 1
    m = ldexp(scaled, negative(e))
    # log2 may round across a power of two: one step of correction either way
    too_big = greater_equal(abs(m), 1)
    too_small = less(abs(m), 0.5)
    m = where(too_big, multiply(m, 0.5), where(too_small, multiply(m, 2.0), m))
    e = add(e, subtract(astype(too_big, _dt.int_), astype(too_small, _dt.int_)))
    e = subtract(e, where(tiny, boost, 0))
    return where(special, x, m), where(special, zeros_like(e), e)


@keeps_weak_scalars
def gcd(x, y):
    """Greatest common divisor of integers (non-negative), by Euclid's algorithm."""
    x, y = _integer_pair("gcd", x, y)
    x, y = broadcast_arrays(abs(x), abs(y))

    def unfinished(state):
        return any(not_equal(state[1], 0))

    def step(state):
        a, b = state
        safe_b = where(equal(b, 0), ones_like(b), b)
        return where(equal(b, 0), a, b), where(equal(b, 0), b, remainder(a, safe_b))
    return while_loop(unfinished, step, (x, y))[0]


@keeps_weak_scalars
def lcm(x, y):
    """Least common multiple of integers (non-negative); 0 if either is 0."""
    x, y = _integer_pair("lcm", x, y)
    divisor = gcd(x, y)
    safe = where(equal(divisor, 0), ones_like(divisor), divisor)
    return abs(multiply(floor_divide(x, safe), y))


def _is_complex(x) -> bool:
    return bool(np.issubdtype(dtype_of(x), np.complexfloating))


def real(x):
    """The real part (a real array itself)."""
    x = as_array(x)
    return bind(p.real_p, x) if _is_complex(x) else x


def imag(x):
    """The imaginary part (zeros for a real array)."""
    x = as_array(x)
    return bind(p.imag_p, x) if _is_complex(x) else zeros_like(x)


def conj(x):
    """The complex conjugate (a real array itself)."""
    x = as_array(x)
    return bind(p.conj_p, x) if _is_complex(x) else x


conjugate = conj


def angle(z, deg=False):
    """The argument of ``z``: ``atan2(imag, real)``; 0 for non-negative reals, pi for negative
    ones (and -0.0)."""
    z = as_array(z)
    if _is_complex(z):
        result = arctan2(imag(z), real(z))
    else:
        if not _dt.is_inexact(dtype_of(z)) or ndim_of(z) == 0:
            # JAX converts these to float (typed)
            z = astype(z, dtype_of(z) if _dt.is_inexact(dtype_of(z)) else _dt.float_)
        result = arctan2(zeros_like(z), z)
    return rad2deg(result) if deg else result


def iscomplex(x):
    """Where the imaginary part is not zero (False everywhere for a real array)."""
    x = as_array(x)
    return not_equal(imag(x), 0) if _is_complex(x) else zeros_like(x, bool)


def isreal(x):
    """Where the imaginary part is zero (True everywhere for a real array)."""
    x = as_array(x)
    return equal(imag(x), 0) if _is_complex(x) else ones_like(x, bool)


def iscomplexobj(x) -> bool:
    """Whether ``x`` has a complex dtype."""
    return bool(np.issubdtype(dtype_of(as_array(x)), np.complexfloating))


def isrealobj(x) -> bool:
    """Whether ``x`` has a non-complex dtype."""
    return not iscomplexobj(x)


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """NaN to ``nan``, infinities to ``posinf``/``neginf`` (default: the dtype's extremes)."""
    x = as_array(x)
    dtype = dtype_of(x)
    if not _dt.is_inexact(dtype):
        return x
    if _is_complex(x):          # each part on its own
        parts = [nan_to_num(bind(prim, x), copy, nan, posinf, neginf)
                 for prim in (p.real_p, p.imag_p)]
        return bind(p.complex_p, *parts)
    info = np.finfo(dtype)
    posinf = info.max if posinf is None else posinf
    neginf = info.min if neginf is None else neginf
    x = where(isnan(x), convert(nan, dtype), x)
    x = where(isposinf(x), convert(posinf, dtype), x)
    return where(isneginf(x), convert(neginf, dtype), x)


@keeps_weak
def fmax(x, y):
    """Elementwise maximum that ignores a NaN (NaN only where both are). At a tie the result
    is ``y`` (so is its derivative), as JAX's."""
    x, y = promote(x, y)
    return where(logical_or(greater(x, y), isnan(y)), x, y)


@keeps_weak
def fmin(x, y):
    """Elementwise minimum that ignores a NaN (NaN only where both are). At a tie the result
    is ``y`` (so is its derivative), as JAX's."""
    x, y = promote(x, y)
    return where(logical_or(less(x, y), isnan(y)), x, y)
