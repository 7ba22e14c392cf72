"""``shardc.numpy``'s elementwise functions beyond the arithmetic core (``_arithmetic``):
inverse and hyperbolic trigonometry, logarithms and exponentials, rounding, signs and
floating-point routines, bit shifts, integer routines, complex parts; and ``jnp.ufunc``, whose
objects are the functions JAX makes ufuncs (``add``, ``maximum``, ``logaddexp``, ...): called,
the function; ``.reduce``, ``.accumulate``, ``.at``, ``.reduceat`` and ``.outer`` as JAX's.

Transcendental functions and bit operations bind their own primitives (numpy's kernels at run
time); the rest are exact compositions. Dtypes follow JAX with x64 off: integer and boolean
operands of floating functions compute in float32.
"""
from __future__ import annotations

import math
import operator

import numpy as np

from compiler.control_flow import scan, while_loop
from compiler.custom_ad import custom_jvp
from compiler.jit import trace_function
from compiler.tracing import bind
from ir import dtypes as _dt
from ir import primitives as p
from shardc.dtypes import result_type
from shardc.numpy._arithmetic import (abs, add, arctan2, binary_op, bitwise_and, bitwise_or,
                                      bitwise_xor, ceil, clip, divide, equal, exp, floor,
                                      floor_divide, greater, greater_equal, isfinite, isinf, isnan,
                                      less, log, log1p, logical_and, logical_not, logical_or,
                                      make_unary, maximum, minimum, multiply, negative,
                                      nonzero_int_divisor, not_equal, numeric_pair, power,
                                      remainder, sin, sqrt, subtract, where)
from shardc.numpy._core import (as_array, as_inexact, asarray, astype, broadcast_arrays,
                                broadcast_operands, broadcast_shapes_of, broadcast_to,
                                canonical_axis, concatenate, convert, dtype_of, expand_dims, fresh,
                                full, full_like, keeps_weak, keeps_weak_scalars, ndim_of,
                                ones_like, promote, ravel, reshape, shape_of, weakly_typed_like,
                                zeros_like)
from shardc.numpy._functional import vectorize
from shardc.numpy._arraylike import check_arraylike
from shardc.numpy._indexing import take
from shardc.numpy._manipulation import append, moveaxis
from shardc.numpy._reductions import (any, cumprod, cumsum, max as reduce_max, min as reduce_min,
                                      prod, reduce_axes, sum as reduce_sum)

__all__ = [
    "arcsin", "asin", "acos", "arccos", "arctan", "atan", "sinh", "cosh", "arcsinh", "asinh",
    "acosh", "arccosh", "arctanh", "atanh", "cbrt", "exp2", "atan2", "pow", "log2", "log10",
    "deg2rad", "rad2deg", "degrees", "radians", "fabs", "positive", "float_power", "fmod", "divmod",
    "trunc", "modf", "rint", "round", "around", "signbit", "copysign", "heaviside", "hypot",
    "logaddexp", "logaddexp2", "sinc", "isneginf", "isposinf", "invert", "bitwise_invert",
    "bitwise_not", "left_shift", "right_shift", "bitwise_left_shift", "bitwise_right_shift",
    "bitwise_count", "logical_xor", "nextafter", "spacing", "ldexp", "frexp", "gcd", "lcm", "real",
    "imag", "conj", "conjugate", "angle", "iscomplex", "isreal", "iscomplexobj", "isrealobj",
    "nan_to_num", "fmax", "fmin", "ufunc", "frompyfunc", "negative", "add", "multiply",
    "subtract", "maximum", "minimum", "bitwise_and", "bitwise_or", "bitwise_xor", "logical_and",
    "logical_or",
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
    """``x`` and ``y`` in the inexact dtype they promote to, each converted from its own value
    (JAX's promote_dtypes_inexact: ``uint8_array`` with ``-1`` takes -1.0, not a wrapped
    255)."""
    promoted = result_type(x, y)
    if not _dt.is_inexact(promoted):
        inexact = _dt.to_inexact(promoted)
        x, y = convert(x, inexact), convert(y, inexact)
    return promote(x, y)


def log2(x):
    """Base-2 logarithm; exact at powers of two."""
    return _scaled_log(x, lambda part: divide(part, convert(np.log(2), dtype_of(part))))


def log10(x):
    """Base-10 logarithm: ``log(x)`` times 1/ln(10) rounded to ``x``'s precision (JAX's)."""
    return _scaled_log(x, lambda part: multiply(part, convert(1 / np.log(10), dtype_of(part))))


def _scaled_log(x, scale):
    """``scale`` applied to ``log(x)``, to each part of a complex one (as JAX's), so an
    infinite real part leaves the angle finite (a complex division would make it NaN)."""
    logarithm = log(as_inexact(x))
    if _dt.kind(dtype_of(logarithm)) != _dt.COMPLEX:
        return scale(logarithm)
    return bind(p.complex_p, scale(bind(p.real_p, logarithm)),
                scale(bind(p.imag_p, logarithm)))


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
    """``+x``: a new array of ``x``'s value (booleans too, as JAX's; numpy refuses them)."""
    return fresh(as_array(x))


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
        return fresh(x)
    return where(less(x, 0), ceil(x), floor(x))


@keeps_weak
def modf(x):
    """``(fractional part, integral part)`` of ``x``, both with ``x``'s sign, as floats."""
    x = as_inexact(x)
    whole = trunc(x)
    # x - trunc(x), as JAX's: an infinity's fractional part is NaN (numpy's is a zero)
    return subtract(x, whole), whole


def rint(x):
    """Round to the nearest integer, halves to even; integers become float32, typed (as in
    JAX)."""
    x = as_array(x)
    return round(x if _dt.is_inexact(dtype_of(x)) else astype(x, _dt.float_))


def round(x, decimals=0):
    """Round to ``decimals`` places, halves to even as numpy does: scaled by ``10**decimals``
    in ``x``'s dtype (float16 in float32), as JAX's. Integers are returned as they are."""
    x = as_array(x)
    decimals = operator.index(decimals)
    dtype = dtype_of(x)
    if dtype == np.bool_:
        # JAX's error (its round reads finfo of the dtype, which booleans have none of)
        raise ValueError(f"data type {np.bool_} not inexact")
    if not _dt.is_inexact(dtype):
        if decimals < 0:
            raise NotImplementedError("integer np.round not implemented for decimals < 0")
        return fresh(x)
    if decimals:
        work = astype(x, np.float32) if dtype == np.float16 else x
        scale = convert(10.0 ** decimals, _dt.real_dtype(dtype_of(work)))
        out = divide(round(multiply(work, scale)), scale)
        return astype(out, dtype) if dtype == np.float16 else out
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
    """``sqrt(x**2 + y**2)`` without overflow or underflow in the squares (real ``x`` and
    ``y``: complex ones are JAX's ValueError)."""
    x, y = _inexact_pair(x, y)
    if _dt.kind(dtype_of(x)) == _dt.COMPLEX:
        raise ValueError("jnp.hypot is not well defined for complex-valued inputs. Please "
                         "convert to real values first, such as by using abs(x)")
    x, y = abs(x), abs(y)
    big, small = maximum(x, y), minimum(x, y)
    safe_big = where(equal(big, 0), ones_like(big), big)
    ratio = divide(small, safe_big)
    result = multiply(big, sqrt(add(1, multiply(ratio, ratio))))
    infinite = logical_or(isinf(x), isinf(y))
    return where(infinite, full_like(result, np.inf), result)


def _logaddexp(x, y, log1p_of_exp_neg, period=np.pi):
    x, y = _inexact_pair(x, y)
    big = maximum(x, y)
    if dtype_of(x).kind == "c":
        # JAX's complex form: the larger (real part first) plus log1p(exp(the other's
        # offset)), the imaginary part wrapped into [-period, period)
        offset = subtract(add(x, y), multiply(big, convert(2, dtype_of(big))))
        out = add(big, log1p_of_exp_neg(offset))
        angle = imag(out)
        half = convert(period, dtype_of(angle))
        turned = remainder(add(angle, half), convert(2 * period, dtype_of(angle)))
        return bind(p.complex_p, real(out), subtract(turned, half))
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
    return _logaddexp(x, y, _log2_1p_exp2, np.pi / np.log(2))


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
    pix = multiply(convert(np.pi, dtype_of(x)), x)
    safe = where(zero, ones_like(x), pix)
    return where(zero, _sinc_maclaurin(0, pix), divide(sin(safe), safe))


def _sinc_maclaurin(k: int, x):
    """The k-th derivative of ``sin(x) / x`` at 0, shaped as ``x``; its own derivative is the
    next one, so every derivative of ``sinc`` at 0 is exact (JAX's rule)."""
    return _sinc_maclaurins[k](x) if k < len(_sinc_maclaurins) else _sinc_term(k, x)


def _sinc_term(k: int, x):
    coeff = 0.0 if k % 2 else (-1) ** (k // 2) / (k + 1)
    return add(multiply(x, convert(0, dtype_of(x))), convert(coeff, dtype_of(x)))


def _make_sinc_maclaurin(k: int):
    @custom_jvp
    def term(x):
        return _sinc_term(k, x)

    @term.defjvp
    def _jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return term(x), multiply(_sinc_maclaurin(k + 1, x), t)
    return term


_sinc_maclaurins = [_make_sinc_maclaurin(k) for k in range(8)]


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
    if dtype_of(x) == np.float16:
        # numpy's float16 spacing (and so JAX's) is the step up, whatever the sign
        return subtract(nextafter(x, full_like(x, np.inf)), x)
    away = where(signbit(x), full_like(x, -np.inf), full_like(x, np.inf))
    result = subtract(nextafter(x, away), x)
    tiny = _dt.finfo(dtype_of(x)).smallest_subnormal
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
    info = _dt.finfo(dtype)
    e = clip(astype(e, _dt.int_), -3 * (info.maxexp - 1), 3 * (info.maxexp - 1))
    # three finite factors (2**(maxexp - 1) at most: 0 times any stays 0): 2**e itself may
    # not be finite
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
    info = _dt.finfo(dtype)
    special = logical_or(equal(x, 0), logical_not(isfinite(x)))
    safe = where(special, ones_like(x), x)
    # subnormals first scaled into the normal range, so log2 sees a normal number
    tiny = less(abs(safe), info.smallest_normal)
    boost = info.nmant + 1
    scaled = where(tiny, multiply(safe, _exp2_int(np.int32(boost), dtype)), safe)
    e = astype(floor(log2(abs(scaled))), np.int32) + 1      # int32 with x64 on too (JAX's)
    m = ldexp(scaled, negative(e))
    # log2 may round across a power of two: one step of correction either way
    too_big = greater_equal(abs(m), 1)
    too_small = less(abs(m), 0.5)
    m = where(too_big, multiply(m, 0.5), where(too_small, multiply(m, 2.0), m))
    e = add(e, subtract(astype(too_big, np.int32), astype(too_small, np.int32)))
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
    # |x| / gcd * |y| in the operands' dtype, wrapping on overflow as numpy's (and JAX's)
    return multiply(abs(floor_divide(x, safe)), abs(y))


def _is_complex(x) -> bool:
    return bool(np.issubdtype(dtype_of(x), np.complexfloating))


def real(x):
    """The real part (of a real array, a new array of its value)."""
    x = as_array(x)
    return bind(p.real_p, x) if _is_complex(x) else fresh(x)


def imag(x):
    """The imaginary part (zeros for a real array)."""
    x = as_array(x)
    return bind(p.imag_p, x) if _is_complex(x) else zeros_like(x)


def conj(x):
    """The complex conjugate (of a real array, a new array of its value)."""
    x = as_array(x)
    return bind(p.conj_p, x) if _is_complex(x) else fresh(x)


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
    """Whether ``x`` has a complex dtype: read from its type, or its ``dtype``, where it has
    one (a number, an array: no transfer to the devices, as JAX's); else from the array
    made of it."""
    if isinstance(x, (complex, np.complexfloating)):
        return True
    if x is None or isinstance(x, (bool, int, float, str, np.generic)):
        return False
    dtype = getattr(x, "dtype", None)
    if dtype is not None:           # (a key array's dtype is no numpy one: not complex)
        return isinstance(dtype, np.dtype) and bool(np.issubdtype(dtype, np.complexfloating))
    return bool(np.issubdtype(dtype_of(as_array(x)), np.complexfloating))


def isrealobj(x) -> bool:
    """Whether ``x`` has a non-complex dtype."""
    return not iscomplexobj(x)


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """NaN to ``nan``, infinities to ``posinf``/``neginf`` (default: the dtype's extremes)."""
    x = as_array(x)
    dtype = dtype_of(x)
    if not _dt.is_inexact(dtype):
        return fresh(x)
    if _is_complex(x):          # each part on its own
        parts = [nan_to_num(bind(prim, x), copy, nan, posinf, neginf)
                 for prim in (p.real_p, p.imag_p)]
        return bind(p.complex_p, *parts)
    info = _dt.finfo(dtype)
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


# --- jnp.ufunc ---------------------------------------------------------------------------------
# JAX makes fourteen of its elementwise functions ufunc objects (the others stay functions):
# called, each is the function; its methods reduce, accumulate, pair up and update with it.

_where = where            # the methods take a ``where=`` mask of their own

_AT_INPLACE_MESSAGE = (
    "Because JAX arrays are immutable, jnp.ufunc.at() cannot operate inplace like\n"
    "np.ufunc.at(). Instead, you can pass inplace=False and capture the result; e.g.\n"
    ">>> arr = jnp.add.at(arr, ind, val, inplace=False)\n")


class ufunc:
    """A numpy-style universal function (JAX's ``jnp.ufunc``): called, it applies ``func``
    elementwise to its broadcast arguments. A binary one also folds along an axis
    (``reduce``), keeps the running values (``accumulate``), pairs every element of one array
    with every element of another (``outer``) and folds between indices (``reduceat``); any
    one updates an array at indices (``at``).

    Each method uses the rule given for it (``jnp.add.reduce`` is ``jnp.sum``) or else folds
    ``func`` along the axis with ``scan``, one element after another, as JAX's does.

    Args:
      func: the elementwise function (of ``nin`` scalars, ``nout`` results).
      nin, nout: its numbers of inputs and results.
      name, nargs, identity: its name (``func``'s by default), its number of arguments
        (``nin``), the value that changes nothing (None: there is none).
      call, reduce, accumulate, at, reduceat: the rules of the methods, when not a fold.

    >>> jnp.add.reduce(jnp.arange(5))                             # 10
    >>> jnp.multiply.outer(jnp.arange(3), jnp.arange(2)).shape    # (3, 2)
    """

    def __init__(self, func, /, nin, nout, *, name=None, nargs=None, identity=None, call=None,
                 reduce=None, accumulate=None, at=None, reduceat=None):
        self.__doc__ = func.__doc__
        self.__name__ = name or func.__name__
        # One record, read through properties: a ufunc marked static in jit is hashed by what
        # it is, which must not change after it is made.
        self.__rules = dict(func=func, nin=operator.index(nin), nout=operator.index(nout),
                            nargs=operator.index(nargs or nin), identity=identity, call=call,
                            reduce=reduce, accumulate=accumulate, at=at, reduceat=reduceat)

    _func = property(lambda self: self.__rules["func"])
    nin = property(lambda self: self.__rules["nin"])
    nout = property(lambda self: self.__rules["nout"])
    nargs = property(lambda self: self.__rules["nargs"])
    identity = property(lambda self: self.__rules["identity"])

    def _key(self) -> tuple:
        # the rules of the methods are how it computes, not what it is
        return self._func, self.__name__, self.identity, self.nin, self.nout, self.nargs

    def __hash__(self):
        return hash(self._key())

    def __eq__(self, other):
        return isinstance(other, ufunc) and self._key() == other._key()

    def __repr__(self):
        return f"<jnp.ufunc '{self.__name__}'>"

    def __call__(self, *args, out=None, where=None):
        if out is not None:
            raise NotImplementedError(f"out argument of {self}")
        if where is not None:
            raise NotImplementedError(f"where argument of {self}")
        for position, a in enumerate(args):
            check_arraylike(self.__name__, a, position)
        return (self.__rules["call"] or self._call_vectorized)(*args)

    def _call_vectorized(self, *args):
        if len(args) != self.nin:
            raise TypeError(f"{self.__name__}() takes {self.nin} positional argument(s) but "
                            f"{len(args)} were given")
        return vectorize(self._func)(*args)

    def _check_single_result(self, method: str) -> None:
        if self.nin != 2:
            raise ValueError(f"{method} only supported for binary ufuncs")
        if self.nout != 1:
            raise ValueError(f"{method} only supported for functions returning a single value")

    def _result_dtype(self, *operands):
        """The dtype ``func`` gives for one element of each operand (traced, not run)."""
        ones = tuple(full_like(x, 1, shape=()) for x in operands)
        return trace_function(self._func, ones, {}).out_avals[0].dtype

    def reduce(self, a, axis=0, dtype=None, out=None, keepdims=False, initial=None,
               where=None):
        """``func`` folded along ``axis`` (all axes when None; one axis unless the ufunc has
        a reduction of its own): ``func(func(a[0], a[1]), a[2])...``, started from
        ``initial`` (or the identity) where given.

        Args:
          a: the array to reduce.
          axis: the axis (default 0).
          dtype: the dtype to compute and return in (by default ``func``'s result's).
          out: unsupported (must be None).
          keepdims: keep the reduced axes, of size 1.
          initial: the value to start from.
          where: a boolean mask of the elements to fold in (needs an identity or
            ``initial``).

        >>> jnp.add.reduce(jnp.array([[1, 2], [3, 4]]))         # [4, 6]
        """
        self._check_single_result("reduce")
        if out is not None:
            raise NotImplementedError(f"out argument of {self.__name__}.reduce()")
        if where is not None:
            if self.identity is None and initial is None:
                raise ValueError(f"reduction operation {self.__name__!r} does not have an "
                                 "identity, so to use a where mask one has to specify "
                                 "'initial'.")
            if dtype_of(as_array(where)) != np.bool_:
                raise ValueError(f"where argument must have dtype=bool; got "
                                 f"dtype={dtype_of(as_array(where))}")
        rule = self.__rules["reduce"] or self._reduce_via_scan
        return rule(a, axis=axis, dtype=dtype, keepdims=keepdims, initial=initial, where=where)

    def _reduce_via_scan(self, a, axis=0, dtype=None, keepdims=False, initial=None,
                         where=None):
        a = as_array(a)
        initial = self.identity if initial is None else initial
        dtype = self._result_dtype(a, a) if dtype is None else dtype
        if where is not None:
            where = broadcast_to(where, shape_of(a))
        if isinstance(axis, tuple):
            raise NotImplementedError("tuple of axes")
        if axis is None:
            final_shape = (1,) * ndim_of(a) if keepdims else ()
            a, where, axis = ravel(a), None if where is None else ravel(where), 0
        else:
            axis = canonical_axis(axis, ndim_of(a))
            kept = shape_of(a)[:axis] + shape_of(a)[axis + 1:]
            final_shape = kept[:axis] + (1,) + kept[axis:] if keepdims else kept
            a = moveaxis(a, axis, 0)
            where = None if where is None else moveaxis(where, axis, 0)
        if shape_of(a)[0] == 0:
            if initial is None:
                raise ValueError(f"zero-size array to reduction operation {self.__name__} "
                                 "which has no identity")
            return full(final_shape, initial, dtype)
        if initial is None:
            start, a, where = a[0], a[1:], None if where is None else where[1:]
        else:
            start = initial
        start = broadcast_to(astype(asarray(start), dtype), shape_of(a)[1:])

        def step(acc, element):
            if where is None:
                return self(acc, astype(element, dtype)), None
            x, keep = element
            return _where(keep, self(acc, astype(x, dtype)), acc), None
        result, _ = scan(step, start, a if where is None else (a, where))
        return reshape(result, final_shape) if keepdims else result

    def accumulate(self, a, axis=0, dtype=None, out=None):
        """The running values of ``func`` folded along ``axis``: ``[a[0], func(a[0], a[1]),
        ...]`` (``jnp.add.accumulate`` is ``cumsum``).

        >>> jnp.add.accumulate(jnp.array([1, 2, 3]))            # [1, 3, 6]
        """
        self._check_single_result("accumulate")
        if out is not None:
            raise NotImplementedError(f"out argument of {self.__name__}.accumulate()")
        rule = self.__rules["accumulate"] or self._accumulate_via_scan
        return rule(a, axis=axis, dtype=dtype)

    def _accumulate_via_scan(self, a, axis=0, dtype=None):
        a = as_array(a)
        dtype = self._result_dtype(a, a) if dtype is None else dtype
        if axis is None or isinstance(axis, tuple):
            raise ValueError("accumulate does not allow multiple axes")
        axis = canonical_axis(axis, ndim_of(a))
        if math.prod(shape_of(a)) == 0:
            return full(shape_of(a), 0, dtype)
        moved = moveaxis(a, axis, 0)
        first = astype(moved[0], dtype)

        def step(acc, x):
            # promoted with the running value, as JAX's select of the first element promotes
            _, value = promote(acc, self(acc, astype(x, dtype)))
            return value, value
        _, rest = scan(step, first, moved[1:])
        return moveaxis(concatenate([first[None], rest]), 0, axis)

    def at(self, a, indices, b=None, /, *, inplace=True):
        """``a`` with ``func`` applied at ``indices`` (to ``a[indices]`` and ``b``): a
        copy, so ``inplace=False`` must be passed. Repeated indices compound, as numpy's.

        >>> jnp.add.at(jnp.zeros(3), jnp.array([0, 0, 2]), 1.0, inplace=False)   # [2, 0, 1]
        """
        if inplace:
            raise NotImplementedError(_AT_INPLACE_MESSAGE)
        rule = self.__rules["at"] or self._at_via_scan
        return rule(a, indices) if b is None else rule(a, indices, b)

    def _at_via_scan(self, a, indices, *args):
        dtype = self._result_dtype(a, *args)
        a = astype(as_array(a), dtype)
        args = tuple(astype(as_array(arg), dtype) for arg in args)
        indices = _index_tuple(indices)
        if not indices:
            return a
        shapes = [np.shape(i) for i in indices if not isinstance(i, slice)]
        shape = broadcast_shapes_of(*shapes) if shapes else ()
        if not shape:
            return a.at[indices].set(self(a.at[indices].get(), *args))
        # one update per index, in order, so that repeated indices compound
        if args:
            tail = shape_of(args[0])[len(shape):]
            args = (reshape(broadcast_to(args[0], shape + tail), (math.prod(shape),) + tail),)
        flat = tuple(i if isinstance(i, slice) else ravel(broadcast_to(i, shape))
                     for i in indices)
        arrays = [i for i in flat if not isinstance(i, slice)]

        def step(acc, row):
            picked, values = iter(row[0]), row[1]
            index = tuple(i if isinstance(i, slice) else next(picked) for i in flat)
            return acc.at[index].set(self(acc.at[index].get(), *values)), None
        result, _ = scan(step, a, (arrays, args))
        return result

    def reduceat(self, a, indices, axis=0, dtype=None, out=None):
        """``func`` folded over each slice ``a[indices[k]:indices[k + 1]]`` along ``axis``
        (the last to the end; ``a[indices[k]]`` alone where the next index is not larger).
        ``indices`` may be traced. As JAX's, ``dtype`` does not change the result.

        >>> jnp.add.reduceat(jnp.arange(8), jnp.array([0, 2, 5]))   # [1, 9, 18]
        """
        self._check_single_result("reduceat")
        if out is not None:
            raise NotImplementedError(f"out argument of {self.__name__}.reduceat()")
        rule = self.__rules["reduceat"] or self._reduceat_via_scan
        return rule(a, indices, axis=axis, dtype=dtype)

    def _reduceat_via_scan(self, a, indices, axis=0, dtype=None):
        a, indices = as_array(a), as_array(indices)
        if ndim_of(a) == 0:
            raise ValueError(f"reduceat: a must have 1 or more dimension, got "
                             f"a.shape={shape_of(a)}")
        if ndim_of(indices) != 1:
            raise ValueError(f"reduceat: indices must be one-dimensional, got "
                             f"indices.shape={shape_of(indices)}")
        if axis is None or isinstance(axis, (tuple, list)):
            raise ValueError("reduceat requires a single integer axis.")
        axis = canonical_axis(axis, ndim_of(a))
        size = shape_of(a)[axis]
        # the k-th result starts at a[indices[k]] and takes in each later element before
        # the next index
        starts = reshape(indices, (1,) * axis + (-1,) + (1,) * (ndim_of(a) - axis - 1))
        ends = reshape(append(indices, size)[1:], shape_of(starts))

        def step(out, element):
            i, slab = element
            inside = logical_and(greater(i, starts), less(i, ends))
            return _where(inside, self(out, expand_dims(slab, axis)), out), None
        elements = (asarray(np.arange(size, dtype=np.int32)), moveaxis(a, axis, 0))
        result, _ = scan(step, take(a, indices, axis=axis), elements)
        return result

    def outer(self, A, B, /):
        """``func`` of every element of ``A`` with every element of ``B``: shape
        ``A.shape + B.shape``.

        >>> jnp.multiply.outer(jnp.arange(1, 4), jnp.arange(1, 3))   # [[1, 2], [2, 4], [3, 6]]
        """
        self._check_single_result("outer")
        # both of the result's rank (no rank promotion: JAX's rank check passes it)
        return self(reshape(A, np.shape(A) + (1,) * len(np.shape(B))),
                    reshape(B, (1,) * len(np.shape(A)) + np.shape(B)))


def frompyfunc(func, /, nin, nout, *, identity=None):
    """``func``, a function of ``nin`` scalars with ``nout`` results, as a ``jnp.ufunc``
    (its calls ``vmap`` it over the broadcast elements; ``identity``: its identity, if any).

    >>> add = jnp.frompyfunc(lambda a, b: a + b, 2, 1, identity=0)
    >>> add.reduce(jnp.arange(5))                               # 10
    """
    return ufunc(func, nin, nout, identity=identity)


# The rules of the ufuncs' methods that are not folds, as JAX's: reductions and cumulative
# reductions, and scatters for ``at``.

def _extremum_reduce(reduce):
    """``jnp.max`` or ``jnp.min`` as a ufunc's reduction (which takes a dtype)."""
    def rule(a, axis=None, dtype=None, keepdims=False, initial=None, where=None):
        a = as_array(a)
        a = a if dtype is None else astype(a, dtype)
        return reduce(a, axis=axis, keepdims=keepdims, initial=initial, where=where)
    return rule


def _require_integer(a):
    if not (_dt.is_int(dtype_of(a)) or _dt.is_bool(dtype_of(a))):
        raise ValueError(f"integer argument required; got dtype={dtype_of(a)}")
    return a


def _as_bool(a):
    return astype(real(a) if _is_complex(a) else a, np.bool_)


def _pairwise(op, x, fill):
    """``op`` (associative and commutative, ``fill`` its identity) over the first axis of
    ``x``: neighbours combined, level after level."""
    if shape_of(x)[0] == 0:
        return full(shape_of(x)[1:], fill, dtype_of(x))
    while shape_of(x)[0] > 1:
        if shape_of(x)[0] % 2:
            x = concatenate([x, full((1,) + shape_of(x)[1:], fill, dtype_of(x))])
        x = op(x[0::2], x[1::2])
    return x[0]


def _monoid_reduce(op, identity, prepare):
    """A reduction by the elementwise ``op`` (bitwise and, or, xor) whose identity is
    ``identity``, of the operand ``prepare`` gives: JAX's reductions of the bitwise and
    logical ufuncs."""
    def rule(a, axis=None, dtype=None, keepdims=False, initial=None, where=None):
        a = prepare(as_array(a))
        a = a if dtype is None else astype(a, dtype)
        fill = np.array(identity).astype(dtype_of(a))
        if where is not None:
            a = _where(broadcast_to(where, shape_of(a)), a, fill)
        axes = reduce_axes(a, axis)
        kept = tuple(d for k, d in enumerate(shape_of(a)) if k not in axes)
        rows = reshape(moveaxis(a, axes, tuple(range(len(axes)))), (-1,) + kept)
        result = _pairwise(op, rows, fill)
        if initial is not None:
            initial = as_array(initial)
            if shape_of(initial) != ():
                raise ValueError(f"initial value must be a scalar. Got array of shape "
                                 f"{shape_of(initial)}")
            result = op(astype(initial, dtype_of(result)), result)
        if keepdims:
            result = expand_dims(result, axes)
        return result
    return rule


def _logsumexp_reduce(a, axis=None, dtype=None, keepdims=False, initial=None, where=None):
    """``log(sum(exp(a)))`` over ``axis``, shifted by the maximum (held constant for the
    derivative) so that nothing overflows: ``jnp.logaddexp.reduce``. As JAX's, ``dtype`` is
    not used."""
    a = as_inexact(as_array(a))
    axes = reduce_axes(a, axis)
    peak = reduce_max(real(a), axis=axes, keepdims=keepdims, where=where, initial=-np.inf)
    peak = bind(p.stop_gradient_p, _where(isfinite(peak), peak, zeros_like(peak)))
    shift = peak if keepdims else expand_dims(peak, axes)
    total = reduce_sum(exp(subtract(a, astype(shift, dtype_of(a)))), axis=axes,
                       keepdims=keepdims, where=where)
    result = add(log(total), astype(peak, dtype_of(total)))
    return result if initial is None else logaddexp(initial, result)


def _logsumexp2_reduce(a, axis=None, dtype=None, keepdims=False, initial=None, where=None):
    """``log2(sum(2 ** a))`` over ``axis``: ``jnp.logaddexp2.reduce``."""
    ln2 = float(np.log(2))
    initial = None if initial is None else multiply(initial, ln2)
    scaled = multiply(as_array(a), ln2)
    return divide(_logsumexp_reduce(scaled, axis, dtype, keepdims, initial, where), ln2)


def _add_at(a, indices, b):
    """``jnp.add.at``: a scatter-add (booleans add as integers, then are true where
    nonzero)."""
    return _scatter_at("add", a, indices, b)


def _multiply_at(a, indices, b):
    """``jnp.multiply.at``: a scatter-multiply (booleans as integers)."""
    return _scatter_at("multiply", a, indices, b)


def _scatter_at(method, a, indices, b):
    """``a.at[indices].<method>(b)``; booleans computed as int32, then true where nonzero."""
    a = as_array(a)
    if dtype_of(a) != np.bool_:
        return getattr(a.at[indices], method)(b)
    wide = getattr(astype(a, np.int32).at[indices], method)(astype(astype(b, np.bool_),
                                                                   np.int32))
    return astype(wide, np.bool_)


def _subtract_at(a, indices, b):
    """``jnp.subtract.at``: a scatter-add of ``-b``."""
    return as_array(a).at[indices].add(negative(as_array(b)))


def _index_tuple(indices) -> tuple:
    """An index as a tuple of entries (a list is one integer array)."""
    if isinstance(indices, list):
        return (asarray(indices),)
    return indices if isinstance(indices, tuple) else (indices,)


def _binary_ufunc(func, identity, **rules):
    return ufunc(func, 2, 1, name=func.__name__, identity=identity, call=func, **rules)


_reduce_bitwise_and = _monoid_reduce(bitwise_and, -1, _require_integer)
_reduce_bitwise_or = _monoid_reduce(bitwise_or, 0, _require_integer)
_reduce_bitwise_xor = _monoid_reduce(bitwise_xor, 0, _require_integer)
_reduce_logical_and = _monoid_reduce(bitwise_and, True, _as_bool)
_reduce_logical_or = _monoid_reduce(bitwise_or, False, _as_bool)
_reduce_logical_xor = _monoid_reduce(bitwise_xor, False, _as_bool)

negative = ufunc(negative, 1, 1, name="negative", call=negative)
add = _binary_ufunc(add, 0, reduce=reduce_sum, accumulate=cumsum, at=_add_at)
multiply = _binary_ufunc(multiply, 1, reduce=prod, accumulate=cumprod, at=_multiply_at)
subtract = _binary_ufunc(subtract, None, at=_subtract_at)
maximum = _binary_ufunc(maximum, None, reduce=_extremum_reduce(reduce_max))
minimum = _binary_ufunc(minimum, None, reduce=_extremum_reduce(reduce_min))
bitwise_and = _binary_ufunc(bitwise_and, -1, reduce=_reduce_bitwise_and)
bitwise_or = _binary_ufunc(bitwise_or, 0, reduce=_reduce_bitwise_or)
bitwise_xor = _binary_ufunc(bitwise_xor, 0, reduce=_reduce_bitwise_xor)
logical_and = _binary_ufunc(logical_and, True, reduce=_reduce_logical_and)
logical_or = _binary_ufunc(logical_or, False, reduce=_reduce_logical_or)
logical_xor = _binary_ufunc(logical_xor, False, reduce=_reduce_logical_xor)
logaddexp = _binary_ufunc(logaddexp, -np.inf, reduce=_logsumexp_reduce)
logaddexp2 = _binary_ufunc(logaddexp2, -np.inf, reduce=_logsumexp2_reduce)
