"""Elementwise arithmetic, comparisons and logic: the binary operators with JAX's type
promotion, division and powers as numpy defines them, the first transcendental functions,
``clip`` and the elementwise ``where``."""
from __future__ import annotations

import operator

import numpy as np

from compiler.tracing import Tracer, bind, is_python_scalar, weakened
from ir import dtypes as _dt
from ir import primitives as p
from runtime.array import Array
from shardc.dtypes import is_weakly_typed, result_type
from shardc.numpy._core import (as_array, as_inexact, asarray, astype, broadcast_operands,
                                broadcast_shapes_of, broadcast_typed_operands, convert,
                                dtype_of, fresh, full_like,
                                is_array, keeps_weak, keeps_weak_scalars, ones_like, promote,
                                promoted, shape_of, weak_of_scalars, weakly_typed_like,
                                zeros_like)
from shardc.numpy._scalars import bool_

__all__ = [
    "add", "subtract", "multiply", "maximum", "minimum", "equal", "not_equal", "less", "less_equal",
    "greater", "greater_equal", "bitwise_and", "logical_and_", "bitwise_or", "bitwise_xor",
    "arctan2", "logical_and", "logical_or", "logical_not", "true_divide", "divide", "floor_divide",
    "remainder", "mod", "power", "sin", "cos", "tan", "tanh", "exp", "log", "log1p", "expm1",
    "sqrt", "floor", "ceil", "abs", "absolute", "sign", "negative", "isfinite", "square",
    "reciprocal", "isnan", "isinf", "clip",
]


def binary_op(prim, x, y):
    """``prim`` bound to ``x`` and ``y`` promoted and broadcast; weakly typed as their
    promotion is (JAX's lattice)."""
    (x, y), weak = promoted(x, y)
    x, y = broadcast_operands(x, y, name=prim.name)
    result = bind(prim, x, y)
    return weakened(result) if weak else result


def _make_binary(prim, name, doc):
    def fn(x, y):
        return binary_op(prim, x, y)
    fn.__name__ = name
    fn.__doc__ = doc
    return fn


add = _make_binary(p.add_p, "add", "Elementwise ``x + y``.")
subtract = _make_binary(p.sub_p, "subtract", "Elementwise ``x - y``.")
multiply = _make_binary(p.mul_p, "multiply", "Elementwise ``x * y``.")
maximum = _make_binary(p.max_p, "maximum", "Elementwise maximum.")
minimum = _make_binary(p.min_p, "minimum", "Elementwise minimum.")
equal = _make_binary(p.eq_p, "equal", "Elementwise ``x == y``.")
not_equal = _make_binary(p.ne_p, "not_equal", "Elementwise ``x != y``.")
less = _make_binary(p.lt_p, "less", "Elementwise ``x < y``.")
less_equal = _make_binary(p.le_p, "less_equal", "Elementwise ``x <= y``.")
greater = _make_binary(p.gt_p, "greater", "Elementwise ``x > y``.")
greater_equal = _make_binary(p.ge_p, "greater_equal", "Elementwise ``x >= y``.")
bitwise_and = logical_and_ = _make_binary(p.and_p, "bitwise_and", "Elementwise and.")
bitwise_or = _make_binary(p.or_p, "bitwise_or", "Elementwise or.")
bitwise_xor = _make_binary(p.xor_p, "bitwise_xor", "Elementwise xor.")


@keeps_weak
def arctan2(x, y):
    """Elementwise arctan(x / y) in the quadrant of (y, x); integers compute in float32."""
    promoted = result_type(x, y)
    if not _dt.is_inexact(promoted):
        inexact = _dt.to_inexact(promoted)
        x, y = convert(x, inexact), convert(y, inexact)
    x, y = promote(x, y)
    return binary_op(p.atan2_p, x, y)


@keeps_weak_scalars
def logical_and(x, y):
    """Elementwise logical and (operands taken as booleans)."""
    return binary_op(p.and_p, astype(x, bool_), astype(y, bool_))


@keeps_weak_scalars
def logical_or(x, y):
    """Elementwise logical or (operands taken as booleans)."""
    return binary_op(p.or_p, astype(x, bool_), astype(y, bool_))


@keeps_weak_scalars
def logical_not(x):
    """Elementwise logical not (operand taken as boolean)."""
    return bind(p.not_p, astype(x, bool_))


def true_divide(x, y):
    """``x / y``; integers divide to float32 (a Python int converts straight to float, as in
    JAX: ``uint8_array / -3`` divides by -3.0, not by a wrapped 253)."""
    operands = (x, y)
    promoted = result_type(x, y)
    if not _dt.is_inexact(promoted):
        inexact = _dt.to_inexact(promoted)
        x, y = convert(x, inexact), convert(y, inexact)
    x, y = promote(x, y)
    if _eager_broadcast_divisor(x, y):
        # JAX's jnp.divide is one program, where XLA divides by a broadcast value as a
        # product with its reciprocal (compiler.passes.reciprocal does so under jit)
        y = bind(p.div_p, convert(1, dtype_of(y)), y)
        x, y = broadcast_operands(x, y, name="div")
        return weakly_typed_like(bind(p.mul_p, x, y), *operands)
    x, y = broadcast_operands(x, y, name="div")
    return weakly_typed_like(bind(p.div_p, x, y), *operands)


def _eager_broadcast_divisor(x, y) -> bool:
    """Whether concrete operands divide by a value of more than one element that broadcasts
    (a rank-0 divisor is the division kernel's to handle)."""
    shape = shape_of(y)
    if not shape or isinstance(x, Tracer) or isinstance(y, Tracer) or \
            not _dt.divides_by_reciprocal(dtype_of(y)):
        return False
    try:
        return shape != broadcast_shapes_of(shape_of(x), shape)
    except ValueError:
        return False            # shapes that do not broadcast: the division's own error


divide = true_divide


def numeric_pair(x, y, name="rem", fun_name="remainder"):
    """Promoted, broadcast operands of an arithmetic function; booleans as int32 (JAX's
    numeric promotion: ``True // True`` is int32 1). ``name``: the lax operation JAX's
    broadcasting error names (``rem`` for ``%`` and ``//``); ``fun_name``: the jnp function
    its rank promotion warning or error names."""
    x, y = promote(x, y)
    if _dt.is_bool(dtype_of(x)):
        x, y = convert(x, _dt.int_), convert(y, _dt.int_)
    return broadcast_operands(x, y, name=name, fun_name=fun_name)


def floor_divide(x, y):
    """``x // y`` rounding towards negative infinity (weakly typed if both are)."""
    return weakly_typed_like(_floor_divide(*numeric_pair(x, y, fun_name="floor_divide")), x, y)


def _floor_divide(x, y):
    if _dt.is_inexact(dtype_of(x)):
        return _float_floor_divide(x, y)
    quotient = bind(p.div_p, x, y)
    if np.issubdtype(dtype_of(x), np.unsignedinteger):
        return quotient
    # JAX's rule, which also fixes x // 0 (quotient -1, as XLA divides): -2 for x != 0
    remainder = bind(p.rem_p, x, y)
    adjust = logical_and(not_equal(remainder, 0), not_equal(sign(x), sign(y)))
    return where(adjust, subtract(quotient, 1), quotient)


def _float_floor_divide(x, y):
    # numpy's divmod: (x - fmod(x, y)) / y is exact where floor(x / y) can round up wrongly
    # (np.float32(1) // np.float32(0.1) is 9, not floor(10.0)).
    mod = bind(p.rem_p, x, y)
    div = bind(p.div_p, subtract(x, mod), y)
    fix = logical_and(not_equal(mod, 0), not_equal(less(mod, 0), less(y, 0)))
    div = bind(p.round_p, where(fix, subtract(div, 1), div))
    return where(equal(y, 0), bind(p.div_p, x, y), div)


def remainder(x, y):
    """``x % y`` with the sign of ``y``, as in numpy (weakly typed if both are)."""
    operands = (x, y)
    x, y = numeric_pair(x, y)
    y = nonzero_int_divisor(y)
    rem = bind(p.rem_p, x, y)
    fix = logical_and(not_equal(rem, 0), not_equal(less(rem, 0), less(y, 0)))
    return weakly_typed_like(where(fix, add(rem, y), rem), *operands)


def nonzero_int_divisor(y):
    """An integer divisor with 0 replaced by 1: jnp's ``x % 0`` is 0 for integers, as numpy's,
    where ``lax.rem`` (XLA) gives ``x``."""
    if not _dt.is_int(dtype_of(y)):
        return y
    return where(equal(y, 0), ones_like(y), y)


mod = remainder


def power(x, y):
    """``x ** y`` with JAX's rules.

    A concrete integer exponent (a Python or numpy int, a concrete 0-d integer array) is
    JAX's ``integer_pow`` (repeated squaring), which keeps ``x``'s dtype (``uint8 **
    np.int64(3)`` is uint8). Integer arrays raised to integer arrays wrap and, as JAX, use only the
    exponent's low 6 bits (so negative exponents give a value, not an error); booleans count
    as int32.

    >>> power(jnp.arange(4, dtype=jnp.uint8), 3)             # uint8 [0, 1, 8, 27]
    """
    operands = (x, y)
    exponent = _concrete_int_exponent(y)
    if exponent is not None:
        return weakly_typed_like(_integer_pow(x, exponent), x)    # the base's, as JAX's
    x, y = promote(x, y)
    if _dt.is_bool(dtype_of(x)):
        x, y = astype(x, _dt.int_), astype(y, _dt.int_)
    if _dt.is_int(dtype_of(x)):
        # JAX's binary exponentiation sees the exponent's low 6 bits; 0 ** y is 0 for y != 0
        low_bits = bitwise_and(y, convert(63, dtype_of(y)))
        zero_base = logical_and(equal(x, 0), not_equal(y, 0))
        result = where(zero_base, zeros_like(x), binary_op(p.pow_p, x, low_bits))
        # its constants are made like the operands: weak only of weak scalars, as JAX's
        return weak_of_scalars(result, operands)
    if _dt.is_int(dtype_of(operands[1])) and not _dt.is_bool(dtype_of(operands[1])):
        # an inexact base to integer powers is lax.pow of the operands as they are (JAX's):
        # weakly typed only where both are. JAX differentiates an integer exponent by its
        # own rule, 0 where it is 0 (x ** 0 is the constant 1, even at x == 0, where the
        # float rule's 0 * 0 ** -1 is nan): the same values, that derivative (the exponent
        # 1 in the unused branch keeps its derivative finite)
        zero = equal(operands[1], 0)
        result = binary_op(p.pow_p, x, where(zero, ones_like(y), y))
        result = where(zero, ones_like(result), result)
        return _all_weak_like(result, *operands)
    return weakly_typed_like(binary_op(p.pow_p, x, y), *operands)


def _all_weak_like(result, *operands):
    """``result``, weakly typed where every operand is (a lax operation's rule)."""
    return weakly_typed_like(result, *operands) if all(
        is_weakly_typed(a) for a in operands) else result


def _concrete_int_exponent(y):
    """``y`` as a Python int when it is a concrete integer scalar, else None."""
    if isinstance(y, Tracer) or (not is_python_scalar(y) and is_array(y) and (
            shape_of(y) != () or not (_dt.is_int(dtype_of(y)) or _dt.is_bool(dtype_of(y))))):
        return None
    if not isinstance(y, (int, np.integer, np.bool_, np.ndarray, Array)):
        return None
    return operator.index(np.asarray(y)[()]) if not isinstance(y, int) else int(y)


def _integer_pow(x, n: int):
    """``x ** n`` in ``x``'s dtype (booleans as int32)."""
    x = as_array(x)
    if _dt.is_bool(dtype_of(x)):
        x = astype(x, _dt.int_)
    return bind(p.integer_pow_p, x, y=n)


def make_unary(prim, name, floating=True):
    """The elementwise function ``name`` binding ``prim`` (integers compute in float32 when
    ``floating``)."""
    def fn(x):
        operand = x
        x = as_array(x)
        if floating and not _dt.is_inexact(dtype_of(x)):
            x = convert(x, _dt.to_inexact(dtype_of(x)))
        return weakly_typed_like(bind(prim, x), operand)
    fn.__name__ = name
    fn.__doc__ = f"Elementwise {name}."
    return fn


sin = make_unary(p.sin_p, "sin")
cos = make_unary(p.cos_p, "cos")
tan = make_unary(p.tan_p, "tan")
tanh = make_unary(p.tanh_p, "tanh")
exp = make_unary(p.exp_p, "exp")
log = make_unary(p.log_p, "log")
log1p = make_unary(p.log1p_p, "log1p")
expm1 = make_unary(p.expm1_p, "expm1")
sqrt = make_unary(p.sqrt_p, "sqrt")
_float_floor = make_unary(p.floor_p, "floor")
_float_ceil = make_unary(p.ceil_p, "ceil")


def floor(x):
    """Elementwise floor; integers pass through unchanged (as in JAX)."""
    x = as_array(x)
    return fresh(x) if not _dt.is_inexact(dtype_of(x)) else _float_floor(x)


def ceil(x):
    """Elementwise ceiling; integers pass through unchanged (as in JAX)."""
    x = as_array(x)
    return fresh(x) if not _dt.is_inexact(dtype_of(x)) else _float_ceil(x)
_lax_abs = make_unary(p.abs_p, "abs", floating=False)


def absolute(x):
    """Elementwise absolute value; booleans and unsigned integers are their own (as JAX's,
    which does not hand them to lax.abs)."""
    x = as_array(x)
    dtype = dtype_of(x)
    return fresh(x) if dtype == _dt.bool_ or _dt.is_unsigned(dtype) else _lax_abs(x)


abs = absolute
sign = make_unary(p.sign_p, "sign", floating=False)
negative = make_unary(p.neg_p, "negative", floating=False)
_isfinite_real = make_unary(p.is_finite_p, "isfinite")


def isfinite(x):
    """Elementwise test for a finite value (of both parts of a complex one)."""
    x = as_array(x)
    if np.issubdtype(dtype_of(x), np.complexfloating):
        return logical_and(_isfinite_real(bind(p.real_p, x)), _isfinite_real(bind(p.imag_p, x)))
    if not _dt.is_inexact(dtype_of(x)):
        return full_like(x, True, bool)      # as JAX's (typed)
    return _isfinite_real(x)


def abs2(x):
    """``|x|^2`` elementwise: ``x * x``, or the real ``real(x * conj(x))`` of complex ``x``."""
    x = as_array(x)
    if np.issubdtype(dtype_of(x), np.complexfloating):
        return bind(p.real_p, multiply(x, bind(p.conj_p, x)))
    return multiply(x, x)


def square(x):
    """Elementwise ``x * x`` (booleans as int32, as JAX)."""
    x = as_array(x)
    if _dt.is_bool(dtype_of(x)):
        x = astype(x, _dt.int_)
    return multiply(x, x)


def reciprocal(x):
    """Elementwise ``1 / x`` (integers divide to float32); weakly typed where ``x`` is."""
    return weakly_typed_like(bind(p.integer_pow_p, as_inexact(x), y=-1), x)


def isnan(x):
    """Elementwise test for NaN."""
    return not_equal(x, x)


def isinf(x):
    """Elementwise test for positive or negative infinity (in either part of a complex
    value)."""
    x = as_array(x)
    if np.issubdtype(dtype_of(x), np.complexfloating):
        return logical_or(isinf(bind(p.real_p, x)), isinf(bind(p.imag_p, x)))
    if not _dt.is_inexact(dtype_of(x)):
        return zeros_like(x, bool)
    # against a typed infinity, as JAX's: the result is typed
    return equal(abs(x), convert(np.inf, dtype_of(x)))


def clip(x, min=None, max=None, a_min=None, a_max=None):
    """Limit values to ``[min, max]`` (complex values, which have no order, are JAX's
    ValueError)."""
    lo = min if min is not None else a_min
    hi = max if max is not None else a_max
    for value in (x, lo, hi):
        if value is not None and _is_complex(value):
            raise ValueError(
                "Clip received a complex value either through the input or the min/max "
                "keywords. Complex values have no ordering and cannot be clipped. Please "
                "convert to a real value or array by taking the real or imaginary components "
                "via jax.numpy.real/imag respectively.")
    if lo is not None:
        x = maximum(x, lo)
    if hi is not None:
        x = minimum(x, hi)
    if lo is None and hi is None:
        return fresh(as_array(x))   # a new array, as JAX's jitted clip gives
    return asarray(x) if isinstance(x, np.ndarray) else x     # an array, never the caller's


def where(condition, x, y):
    """Choose ``x`` where ``condition`` holds, else ``y`` (promoted and broadcast): the
    elementwise ``jnp.where``, which the public one (``_sorting.where``) extends with the
    one-argument form."""
    condition = astype(condition, bool_) if dtype_of(condition) != np.bool_ else condition
    operands = (x, y)
    x, y = promote(x, y)
    condition, x, y = broadcast_typed_operands(condition, x, y, name="where")
    return weakly_typed_like(bind(p.select_n_p, condition, y, x), *operands)


def _is_complex(value) -> bool:
    """Whether ``value`` (a number or an array) is complex."""
    if isinstance(value, complex):
        return True
    dtype = getattr(value, "dtype", None)
    return dtype is not None and _dt.kind(np.dtype(dtype)) == _dt.COMPLEX
