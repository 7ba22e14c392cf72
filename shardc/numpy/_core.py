"""``shardc.numpy``: the jax.numpy subset, as thin wrappers that bind primitives.

Broadcasting follows numpy; type promotion follows JAX with x64 off (float32 and int32
defaults, Python scalars weakly typed, so ``x * 2`` keeps ``x``'s dtype).
"""
from __future__ import annotations

import builtins
import functools
import math
import operator

import numpy as np

from compiler.tracing import (ProgramTracer, Tracer, aval_of, bind, check_jax_value,
                              is_python_scalar)
from ir import dtypes as _dt
from ir import primitives as p
from ir.sharding import NamedSharding
from runtime.array import Array
from runtime.reference import convert_element



class _ScalarMeta(type):
    """The type of ``jnp.float32`` and friends: usable wherever a dtype is (``np.dtype``
    reads their ``dtype`` attribute), and called, a constructor of arrays.

    As in JAX, ``jnp.float32(3)`` is a 0-d float32 Array (not a numpy scalar, whose arithmetic
    would run in numpy: ``jnp.float32(3) / jnp.int32(2)`` is float32 here, float64 there).
    """

    def __call__(cls, x):
        return asarray(x, cls.dtype)

    def __eq__(cls, other):
        return cls is other or cls.dtype.type == other

    def __ne__(cls, other):
        return not cls == other

    def __hash__(cls):
        return hash(cls.dtype.type)

    def __instancecheck__(cls, instance):
        return isinstance(instance, cls.dtype.type)


def _scalar_type(np_type) -> _ScalarMeta:
    name = np.dtype(np_type).name
    return _ScalarMeta(name, (object,), {"dtype": np.dtype(np_type), "__module__": "shardc.numpy"})


# dtypes, ml_dtypes' ML types (bfloat16, float8_*) and the dtype functions: shardc/dtypes.py
from shardc.dtypes import (  # noqa: F401 (re-exported as jax.numpy has them)
    is_weakly_typed, result_type, bfloat16, bool_, can_cast, complex64, complex128, complexfloating, finfo, float4_e2m1fn,
    float6_e2m3fn, float6_e3m2fn, float8_e3m4, float8_e4m3, float8_e4m3b11fnuz, float8_e4m3fn,
    float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz, float8_e8m0fnu, float16, float32, float64,
    floating, generic, iinfo, inexact, int2, int4, int8, int16, int32, int64, integer,
    issubdtype, number, promote_types, signedinteger, uint2, uint4, uint8, uint16, uint32,
    uint64, unsignedinteger)
# the concrete types called as constructors give 0-d Arrays (_ScalarMeta): jnp.float32(3)
(bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, float32, float64,
 complex64, complex128, bfloat16, float8_e3m4, float8_e4m3, float8_e8m0fnu, float8_e4m3b11fnuz,
 float8_e4m3fn, float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz, float4_e2m1fn, float6_e2m3fn,
 float6_e3m2fn, int2, int4, uint2, uint4) = map(_scalar_type, (
    bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, float32, float64,
    complex64, complex128, bfloat16, float8_e3m4, float8_e4m3, float8_e8m0fnu,
    float8_e4m3b11fnuz, float8_e4m3fn, float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz,
    float4_e2m1fn, float6_e2m3fn, float6_e3m2fn, int2, int4, uint2, uint4))
dtype = np.dtype
pi, e, inf, nan = np.pi, np.e, np.inf, np.nan
newaxis = None
ndarray = Array


def _is_array(x) -> bool:
    return isinstance(x, (Tracer, Array, np.ndarray, np.generic))


def _dtype_of(x) -> np.dtype:
    return aval_of(x).dtype


def _weak_tracer_types() -> tuple:
    from compiler.eager import ShardTracer
    return (ProgramTracer, ShardTracer)


_WEAK_TRACERS = _weak_tracer_types()     # the tracers that carry ``weak``


def _weakly(result, *operands):
    """``result``, marked weakly typed when every operand is (JAX's weak_type propagation)."""
    if type(result) in _WEAK_TRACERS:
        for a in operands:
            if not is_weakly_typed(a):
                return result
        result.weak = True
    return result


def _convert(x, dtype):
    """``x`` as ``dtype``: Python scalars become typed numpy scalars (inline literals).

    Values convert as JAX's ``convert_element_type`` does (float to int saturates); a Python
    int must fit int32 and wraps into a narrower integer type (``int8_array + 300`` adds 44).
    """
    dtype = _dt.canonicalize(dtype)
    if is_python_scalar(x):
        return _python_scalar_as(x, dtype)
    if isinstance(x, np.generic):
        return convert_element(np.asarray(x), dtype)[()]
    if isinstance(x, np.ndarray):
        return asarray(convert_element(x, dtype))
    if isinstance(x, (list, tuple)):
        return asarray(x, dtype)
    if _dtype_of(x) == dtype:
        return x
    return bind(p.convert_element_type_p, x, new_dtype=dtype)


def _promote(*args):
    for a in args:      # result_type reads a string as a dtype name; an operand is a value
                        # (lists are converted by asarray, which checks them)
        if not (isinstance(a, (Tracer, list, tuple)) or is_python_scalar(a)):
            check_jax_value(a, "an operand")
    dtype = result_type(*args)
    return [a if isinstance(a, Tracer) and a.aval.dtype == dtype else _convert(a, dtype)
            for a in args]


def _shape(x) -> tuple:
    return aval_of(x).shape


def _broadcast_shapes(*shapes) -> tuple:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ValueError("Incompatible shapes for broadcasting: "
                         + ", ".join(str(tuple(s)) for s in shapes)) from None


def broadcast_to(x, shape):
    """Broadcast ``x`` to ``shape`` by numpy's rules."""
    shape = tuple(int(d) for d in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    x = asarray(x) if not _is_array(x) else x
    old = _shape(x)
    if old == shape:
        return x
    if len(old) > len(shape) or _broadcast_shapes(old, shape) != shape:
        raise ValueError(f"Incompatible shapes for broadcasting: {old} and requested shape "
                         f"{shape}")
    lead = len(shape) - len(old)
    keep = [k for k, d in enumerate(old) if d == shape[lead + k]]
    if len(keep) != len(old):
        x = reshape(x, tuple(old[k] for k in keep))
    return bind(p.broadcast_in_dim_p, x, shape=shape,
                broadcast_dimensions=tuple(lead + k for k in keep))


def _broadcast_operands(*args):
    """Broadcast array operands to one shape; rank-0 operands stay (primitives accept them)."""
    shapes = [_shape(a) for a in args]
    if len(shapes) == 2 and (shapes[0] == shapes[1] or shapes[0] == () or shapes[1] == ()):
        return list(args)                       # the common case: nothing to broadcast
    target = _broadcast_shapes(*shapes)
    return [a if s == target or s == () else broadcast_to(a, target)
            for a, s in zip(args, shapes)]


def _binary(prim, x, y):
    operands = (x, y)
    x, y = _promote(x, y)
    x, y = _broadcast_operands(x, y)
    return _weakly(bind(prim, x, y), *operands)


def _make_binary(prim, name, doc):
    def fn(x, y):
        return _binary(prim, x, y)
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


def arctan2(x, y):
    """Elementwise arctan(x / y) in the quadrant of (y, x); integers compute in float32."""
    x, y = _promote(x, y)
    if not _dt.is_inexact(_dtype_of(x)):
        x, y = _convert(x, _dt.float_), _convert(y, _dt.float_)
    return _binary(p.atan2_p, x, y)


def logical_and(x, y):
    """Elementwise logical and (operands taken as booleans)."""
    return _binary(p.and_p, astype(x, bool_), astype(y, bool_))


def logical_or(x, y):
    """Elementwise logical or (operands taken as booleans)."""
    return _binary(p.or_p, astype(x, bool_), astype(y, bool_))


def logical_not(x):
    """Elementwise logical not (operand taken as boolean)."""
    return bind(p.not_p, astype(x, bool_))


def true_divide(x, y):
    """``x / y``; integers divide to float32 (a Python int converts straight to float, as in
    JAX: ``uint8_array / -3`` divides by -3.0, not by a wrapped 253)."""
    if not _dt.is_inexact(result_type(x, y)):
        x, y = _convert(x, _dt.float_), _convert(y, _dt.float_)
    x, y = _promote(x, y)
    x, y = _broadcast_operands(x, y)
    return bind(p.div_p, x, y)


divide = true_divide


def _numeric_pair(x, y):
    """Promoted, broadcast operands of an arithmetic function; booleans as int32 (JAX's
    numeric promotion: ``True // True`` is int32 1)."""
    x, y = _promote(x, y)
    if _dt.is_bool(_dtype_of(x)):
        x, y = _convert(x, _dt.int_), _convert(y, _dt.int_)
    return _broadcast_operands(x, y)


def floor_divide(x, y):
    """``x // y`` rounding towards negative infinity."""
    x, y = _numeric_pair(x, y)
    if _dt.is_inexact(_dtype_of(x)):
        return _float_floor_divide(x, y)
    quotient = bind(p.div_p, x, y)
    if np.issubdtype(_dtype_of(x), np.unsignedinteger):
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
    """``x % y`` with the sign of ``y``, as in numpy."""
    x, y = _numeric_pair(x, y)
    y = _nonzero_int_divisor(y)
    rem = bind(p.rem_p, x, y)
    fix = logical_and(not_equal(rem, 0), not_equal(less(rem, 0), less(y, 0)))
    return where(fix, add(rem, y), rem)


def _nonzero_int_divisor(y):
    """An integer divisor with 0 replaced by 1: jnp's ``x % 0`` is 0 for integers, as numpy's,
    where ``lax.rem`` (XLA) gives ``x``."""
    if not _dt.is_int(_dtype_of(y)):
        return y
    return where(equal(y, 0), ones_like(y), y)


mod = remainder


def power(x, y):
    """``x ** y`` with JAX's rules.

    A concrete integer exponent (a Python or numpy int, a concrete 0-d integer array) keeps
    ``x``'s dtype, as JAX's ``integer_pow`` (``uint8 ** np.int64(3)`` is uint8); small ones
    multiply (exact). Integer arrays raised to integer arrays wrap and, as JAX, use only the
    exponent's low 6 bits (so negative exponents give a value, not an error); booleans count
    as int32.

    >>> power(jnp.arange(4, dtype=jnp.uint8), 3)             # uint8 [0, 1, 8, 27]
    """
    exponent = _concrete_int_exponent(y)
    if exponent is not None:
        return _integer_pow(x, exponent)
    x, y = _promote(x, y)
    if _dt.is_bool(_dtype_of(x)):
        x, y = astype(x, _dt.int_), astype(y, _dt.int_)
    if _dt.is_int(_dtype_of(x)):
        # JAX's binary exponentiation sees the exponent's low 6 bits; 0 ** y is 0 for y != 0
        low_bits = bitwise_and(y, _convert(63, _dtype_of(y)))
        zero_base = logical_and(equal(x, 0), not_equal(y, 0))
        return where(zero_base, zeros_like(x), _binary(p.pow_p, x, low_bits))
    return _binary(p.pow_p, x, y)


def _concrete_int_exponent(y):
    """``y`` as a Python int when it is a concrete integer scalar, else None."""
    if isinstance(y, Tracer) or (not is_python_scalar(y) and _is_array(y) and (
            _shape(y) != () or not (_dt.is_int(_dtype_of(y)) or _dt.is_bool(_dtype_of(y))))):
        return None
    if not isinstance(y, (int, np.integer, np.bool_, np.ndarray, Array)):
        return None
    return operator.index(np.asarray(y)[()]) if not isinstance(y, int) else int(y)


def _integer_pow(x, n: int):
    """``x ** n`` in ``x``'s dtype (booleans as int32)."""
    x = asarray(x) if not _is_array(x) else x
    if _dt.is_bool(_dtype_of(x)):
        x = astype(x, _dt.int_)
    if n < 0 and not _dt.is_inexact(_dtype_of(x)):
        raise TypeError(f"Integers cannot be raised to negative powers, got "
                        f"integer_pow({_dtype_of(x).name}{list(_shape(x))}, {n})")
    if 0 <= n <= 4:
        result = ones_like(x) if n == 0 else x
        for _ in range(builtins.max(0, n - 1)):
            result = multiply(result, x)
        return result
    return _binary(p.pow_p, x, n)


def _make_unary(prim, name, floating=True):
    def fn(x):
        operand = x
        x = asarray(x) if not _is_array(x) else x
        if floating and not _dt.is_inexact(_dtype_of(x)):
            x = _convert(x, _dt.float_)
        return _weakly(bind(prim, x), operand)
    fn.__name__ = name
    fn.__doc__ = f"Elementwise {name}."
    return fn


sin = _make_unary(p.sin_p, "sin")
cos = _make_unary(p.cos_p, "cos")
tan = _make_unary(p.tan_p, "tan")
tanh = _make_unary(p.tanh_p, "tanh")
exp = _make_unary(p.exp_p, "exp")
log = _make_unary(p.log_p, "log")
log1p = _make_unary(p.log1p_p, "log1p")
expm1 = _make_unary(p.expm1_p, "expm1")
sqrt = _make_unary(p.sqrt_p, "sqrt")
_float_floor = _make_unary(p.floor_p, "floor")
_float_ceil = _make_unary(p.ceil_p, "ceil")


def floor(x):
    """Elementwise floor; integers pass through unchanged (as in JAX)."""
    x = asarray(x) if not _is_array(x) else x
    return x if not _dt.is_inexact(_dtype_of(x)) else _float_floor(x)


def ceil(x):
    """Elementwise ceiling; integers pass through unchanged (as in JAX)."""
    x = asarray(x) if not _is_array(x) else x
    return x if not _dt.is_inexact(_dtype_of(x)) else _float_ceil(x)
abs = absolute = _make_unary(p.abs_p, "abs", floating=False)
sign = _make_unary(p.sign_p, "sign", floating=False)
negative = _make_unary(p.neg_p, "negative", floating=False)
isfinite = _make_unary(p.is_finite_p, "isfinite")


def round(x, decimals=0):
    """Round to ``decimals`` places, halves to even as numpy does."""
    if decimals:
        scale = 10.0 ** decimals
        return divide(round(multiply(x, scale)), scale)
    x = asarray(x) if not _is_array(x) else x
    if not _dt.is_inexact(_dtype_of(x)):
        return x
    # numpy rounds half to even
    floor_x = floor(x)
    diff = subtract(x, floor_x)
    even = equal(remainder(floor_x, 2), 0)
    up = logical_or(greater(diff, 0.5), logical_and(equal(diff, 0.5), logical_not(even)))
    # a zero result keeps x's sign (round(-0.4) is -0.0), as JAX and numpy
    return copysign(where(up, add(floor_x, 1), floor_x), x)  # noqa: F405


around = round


def square(x):
    """Elementwise ``x * x`` (booleans as int32, as JAX)."""
    x = asarray(x) if not _is_array(x) else x
    if _dt.is_bool(_dtype_of(x)):
        x = astype(x, _dt.int_)
    return multiply(x, x)


def reciprocal(x):
    """Elementwise ``1 / x`` (integers divide to float32)."""
    return divide(1, x)


def isnan(x):
    """Elementwise test for NaN."""
    return not_equal(x, x)


def isinf(x):
    """Elementwise test for positive or negative infinity."""
    return logical_and(logical_not(isfinite(x)), equal(x, x))


def clip(x, min=None, max=None, a_min=None, a_max=None):
    """Limit values to ``[min, max]``."""
    lo = min if min is not None else a_min
    hi = max if max is not None else a_max
    if lo is not None:
        x = maximum(x, lo)
    if hi is not None:
        x = minimum(x, hi)
    return x


def where(condition, x=None, y=None, *, size=None, fill_value=None):
    """Choose ``x`` where ``condition`` holds, else ``y``; with ``condition`` alone, its
    ``nonzero`` (``size=`` as there)."""
    if x is None and y is None:
        return nonzero(condition, size=size, fill_value=fill_value)  # noqa: F405
    if x is None or y is None:
        raise ValueError("Either both or neither of the x and y arguments should be provided "
                         "to jax.numpy.where, got x=None or y=None")
    condition = astype(condition, bool_) if _dtype_of(condition) != np.bool_ else condition
    x, y = _promote(x, y)
    condition, x, y = _broadcast_operands(condition, x, y)
    return bind(p.select_n_p, condition, y, x)


# --- creation --------------------------------------------------------------------------------

def _takes_device(create):
    """Give a constructor JAX's ``device=`` keyword: a Sharding, a Device, or a PartitionSpec
    on the current mesh. A concrete result is laid out there; a traced one gets a sharding
    constraint (a mesh layout) or is left as it is (one device: where a jit's caller gets a
    value is the jit's business)."""
    @functools.wraps(create)
    def placed(*args, device=None, **kwargs):
        result = create(*args, **kwargs)
        return result if device is None else _put_on(result, device)

    return placed


def _put_on(value, device):
    from shardc.sharding import resolve_sharding
    from runtime.reference import device_put
    sharding = resolve_sharding(device, "device=")
    if isinstance(value, Tracer):
        if not isinstance(sharding, NamedSharding):
            return value
        return bind(p.sharding_constraint_p, value, sharding=sharding)
    return device_put(value, sharding)

@_takes_device
def asarray(x, dtype=None):
    """``x`` as an array of ``dtype`` (traced values pass through)."""
    if isinstance(x, Tracer):
        return x if dtype is None else astype(x, dtype)
    if isinstance(x, (list, tuple)) and builtins.any(isinstance(v, Tracer) for v in _flat(x)):
        return stack([asarray(v, dtype) for v in x])
    if isinstance(x, Array):
        return x if dtype is None or np.dtype(dtype) == x.dtype else astype(x, dtype)
    if dtype is None and (is_python_scalar(x) or (isinstance(x, (list, tuple)) and x
                                                 and _all_python_scalars(x))):
        dtype = _dt.result_type([_dt.weak_scalar_dtype(v) for v in _flat(x)],
                                [False] * len(list(_flat(x))))
    array = np.asarray(x, dtype=_dt.canonicalize(dtype) if dtype is not None else None)
    if not _dt.is_valid(array.dtype):
        # name the value as given; a list is named by what numpy made of it
        check_jax_value(array if isinstance(x, (list, tuple)) else x, "asarray: x")
    return Array.from_global(array)


def _all_python_scalars(x) -> bool:
    return builtins.all(is_python_scalar(v) for v in _flat(x))


def _flat(x):
    if isinstance(x, (list, tuple)):
        for v in x:
            yield from _flat(v)
    else:
        yield x


@_takes_device
def array(x, dtype=None, copy=True):
    """``x`` as a new array of ``dtype`` (see ``asarray``)."""
    return asarray(x, dtype)


def _default_dtype(dtype, *values):
    if dtype is not None:
        return _dt.canonicalize(dtype)
    if builtins.any(isinstance(v, float) for v in values):
        return _dt.float_
    return _dt.float_


@_takes_device
def full(shape, fill_value, dtype=None):
    """An array of ``shape`` filled with ``fill_value``."""
    shape = _shape_tuple(shape)
    if dtype is None:
        dtype = _dtype_of(fill_value) if not is_python_scalar(fill_value) else \
            _dt.weak_scalar_dtype(fill_value)
    value = _convert(fill_value, dtype)
    if _shape(value) == shape:
        # a 0-d result is an array too (a numpy scalar would compute in numpy's types)
        return value if isinstance(value, (Tracer, Array)) else asarray(value)
    return broadcast_to(value, shape)


def _shape_tuple(shape) -> tuple:
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(d) for d in shape)


@_takes_device
def zeros(shape, dtype=None):
    """An array of ``shape`` filled with zeros (float32 unless ``dtype`` says)."""
    return full(shape, 0, _default_dtype(dtype))


@_takes_device
def ones(shape, dtype=None):
    """An array of ``shape`` filled with ones (float32 unless ``dtype`` says)."""
    return full(shape, 1, _default_dtype(dtype))


@_takes_device
def empty(shape, dtype=None):
    """Like ``zeros`` (shardc has no uninitialised memory)."""
    return zeros(shape, dtype)


@_takes_device
def full_like(x, fill_value, dtype=None, shape=None):
    """An array shaped like ``x`` (its dtype unless ``dtype`` says) filled with ``fill_value``.

    In a shard_map body the result varies over the mesh axes ``x`` varies over (JAX 0.10.2).
    """
    result = full(_shape(x) if shape is None else shape, fill_value,
                  dtype if dtype is not None else _dtype_of(x))
    return _vary_like(result, x)


def _vary_like(result, x):
    from compiler.shard_map import current_shard_context
    shard = current_shard_context()
    vma = aval_of(x).vma
    if not vma or shard is None or not shard.check_vma:
        return result
    axes = tuple(a for a in shard.mesh.axis_names if a in vma and a not in aval_of(result).vma)
    return bind(p.pvary_p, result, mesh_axes=axes) if axes else result


@_takes_device
def zeros_like(x, dtype=None, shape=None):
    """Zeros shaped like ``x``, of its dtype unless ``dtype`` says."""
    return full_like(x, 0, dtype, shape)


@_takes_device
def ones_like(x, dtype=None, shape=None):
    """Ones shaped like ``x``, of its dtype unless ``dtype`` says."""
    return full_like(x, 1, dtype, shape)


@_takes_device
def empty_like(x, dtype=None, shape=None):
    """Like ``zeros_like``."""
    return zeros_like(x, dtype, shape)


@_takes_device
def arange(start, stop=None, step=None, dtype=None):
    """Evenly spaced values; ``arange(8 * 16.)`` is float32."""
    for v in (start, stop, step):
        if isinstance(v, Tracer):
            raise TypeError("arange needs concrete start, stop and step: the length of the "
                            "result must be known when tracing")
    if stop is None:
        start, stop = 0, start
    step = 1 if step is None else step
    values = [v for v in (start, stop, step)]
    if dtype is None:
        dtype = _dt.float_ if builtins.any(isinstance(v, float) or (isinstance(v, np.floating))
                                  for v in values) else _dt.int_
    dtype = _dt.canonicalize(dtype)
    length = builtins.max(0, int(math.ceil((stop - start) / step)))
    ramp = bind(p.iota_p, dtype=dtype, shape=(length,), dimension=0)
    if step != 1:
        ramp = multiply(ramp, _convert(step, dtype))
    if start != 0:
        ramp = add(ramp, _convert(start, dtype))
    return ramp


@_takes_device
def linspace(start, stop, num=50, endpoint=True, dtype=None):
    """``num`` evenly spaced values from ``start`` to ``stop`` (included when ``endpoint``).

    Integer dtypes round towards negative infinity, as numpy 2 and JAX do.
    """
    num = operator.index(num)
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.")
    dtype = _dt.canonicalize(dtype or _dt.float_)
    start, stop = _convert(start, _dt.float_), _convert(stop, _dt.float_)
    if num <= 1:
        values = broadcast_to(start, (num,))
    else:
        div = (num - 1) if endpoint else num
        count = num - 1 if endpoint else num
        ramp = bind(p.iota_p, dtype=_dt.float_, shape=(count,), dimension=0)
        values = add(start, multiply(ramp, divide(subtract(stop, start), div)))
        if endpoint:
            values = concatenate([values, broadcast_to(stop, (1,))])
    if not _dt.is_inexact(dtype):
        values = floor(values)
    return astype(values, dtype)


@_takes_device
def eye(N, M=None, k=0, dtype=None):
    """An ``N x M`` matrix with ones on diagonal ``k`` (float32 unless ``dtype`` says)."""
    M = N if M is None else M
    dtype = _dt.canonicalize(dtype or _dt.float_)
    rows = bind(p.iota_p, dtype=_dt.int_, shape=(N, M), dimension=0)
    cols = bind(p.iota_p, dtype=_dt.int_, shape=(N, M), dimension=1)
    return astype(equal(add(rows, k), cols), dtype)


@_takes_device
def identity(n, dtype=None):
    """The ``n x n`` identity matrix."""
    return eye(n, dtype=dtype)


def _python_scalar_as(x, dtype: np.dtype):
    """A Python scalar as a numpy scalar of ``dtype``, converted as JAX converts weakly typed
    values: an int is an int32 first (OverflowError outside its range, as JAX with x64 off).
    A program repeats its constants: each (type, value, sign, dtype) is converted once."""
    kind = type(x)
    if kind is complex:
        return _python_scalar_converted(x, dtype)
    # 0.0 and -0.0 are equal keys: the sign keeps them apart (a NaN never matches, so is
    # converted each time)
    key = (kind, x, math.copysign(1.0, x) if kind is float else 1.0, dtype)
    found = _SCALARS.get(key)
    if found is None:
        found = _python_scalar_converted(x, dtype)
        if len(_SCALARS) > 4096:
            _SCALARS.clear()
        _SCALARS[key] = found
    return found


_SCALARS: dict = _dt.register_cache({})


def _python_scalar_converted(x, dtype: np.dtype):
    if isinstance(x, int) and not isinstance(x, bool):
        if not _INT32_MIN <= x <= _INT32_MAX:
            raise OverflowError(f"Python int {x} is too large to convert to int32 (the default "
                                "integer type; x64 is off)")
        x = np.int64(x)
    with np.errstate(over="ignore"):      # a float too large for float16 is inf, as in JAX
        return convert_element(np.asarray(x), dtype)[()]


_INT32_MIN, _INT32_MAX = -2 ** 31, 2 ** 31 - 1


def astype(x, dtype):
    """``x`` converted to ``dtype`` (canonicalised: float64 -> float32, int64 -> int32)."""
    x = asarray(x) if not _is_array(x) else x
    return _convert(x, dtype)


# --- shapes ----------------------------------------------------------------------------------

def _resolve_shape(old: tuple, shape) -> tuple:
    """``shape`` with its one ``-1`` filled in; TypeError naming both shapes if sizes differ."""
    requested = _shape_tuple(shape)
    size = math.prod(old)
    shape = list(requested)
    if shape.count(-1) > 1:
        raise ValueError(f"can only specify one unknown dimension, got shape {requested}")
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        shape[shape.index(-1)] = size // known if known and size % known == 0 else -1
    if builtins.any(d < 0 for d in shape) or math.prod(shape) != size:
        raise TypeError(f"cannot reshape array of shape {old} (size {size}) into shape "
                        f"{requested}")
    return tuple(shape)


def reshape(x, *shape, order="C"):
    """Reshape ``x`` (row-major) to ``shape``; one entry may be -1.

    >>> jnp.arange(6).reshape(2, -1).shape
    (2, 3)
    """
    if order != "C":
        raise NotImplementedError("reshape: only order='C' is supported")
    if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
        shape = shape[0]
    x = asarray(x) if not _is_array(x) else x
    new = _resolve_shape(_shape(x), shape)
    if _shape(x) == new:
        return x
    return bind(p.reshape_p, x, new_sizes=new)


def ravel(x):
    """``x`` flattened to one dimension (row-major)."""
    return reshape(x, (-1,))


def _axis(axis, ndim) -> int:
    """``axis`` in ``[0, ndim)``; numpy's AxisError (a ValueError and an IndexError) if out of
    bounds."""
    axis = operator.index(axis)
    if not -ndim <= axis < ndim:
        raise np.exceptions.AxisError(axis, ndim)
    return axis % ndim


def transpose(x, axes=None):
    """Permute the dimensions of ``x`` (reverse them when ``axes`` is None)."""
    x = asarray(x) if not _is_array(x) else x
    ndim = len(_shape(x))
    perm = tuple(reversed(range(ndim))) if axes is None else tuple(_axis(a, ndim) for a in axes)
    if sorted(perm) != list(range(ndim)):
        raise ValueError(f"transpose: axes {tuple(axes)} are not a permutation of the "
                         f"{ndim} dimensions of an array of shape {_shape(x)}")
    if perm == tuple(range(ndim)):
        return x
    return bind(p.transpose_p, x, permutation=perm)


def swapaxes(x, axis1, axis2):
    """``x`` with dimensions ``axis1`` and ``axis2`` exchanged."""
    ndim = len(_shape(x))
    perm = list(range(ndim))
    a, b = _axis(axis1, ndim), _axis(axis2, ndim)
    perm[a], perm[b] = perm[b], perm[a]
    return transpose(x, perm)


def moveaxis(x, source, destination):
    """``x`` with dimension ``source`` moved to position ``destination``."""
    ndim = len(_shape(x))
    perm = [d for d in range(ndim) if d != _axis(source, ndim)]
    perm.insert(_axis(destination, ndim), _axis(source, ndim))
    return transpose(x, perm)


def expand_dims(x, axis):
    """``x`` with size-1 dimensions inserted at ``axis`` (an int or a tuple)."""
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    shape = list(_shape(x))
    ndim = len(shape) + len(axes)
    for a in sorted(_axis(a, ndim) for a in axes):
        shape.insert(a, 1)
    return reshape(x, tuple(shape))


def squeeze(x, axis=None):
    """``x`` without its size-1 dimensions (all of them, or those in ``axis``)."""
    shape = _shape(x)
    if axis is None:
        dims = tuple(k for k, d in enumerate(shape) if d == 1)
    else:
        dims = tuple(_axis(a, len(shape)) for a in ((axis,) if isinstance(axis, int) else axis))
        if builtins.any(shape[d] != 1 for d in dims):
            raise ValueError("cannot select an axis to squeeze out which has size not equal to "
                             f"one, got shape={shape} and dimensions={dims}")
    if not dims:
        return x
    return bind(p.squeeze_p, x, dimensions=dims)


def concatenate(arrays, axis=0):
    """Join ``arrays`` along an existing ``axis`` (flattened first when ``axis`` is None)."""
    if not len(arrays):
        raise ValueError("Need at least one array to concatenate.")
    arrays = [asarray(a) if not _is_array(a) else a for a in _promote(*arrays)]
    if axis is None:
        return concatenate([ravel(a) for a in arrays], 0)
    shapes = [_shape(a) for a in arrays]
    if shapes[0] == ():
        raise ValueError("Zero-dimensional arrays cannot be concatenated.")
    axis = _axis(axis, len(shapes[0]))
    for s in shapes[1:]:
        if len(s) != len(shapes[0]) or s[:axis] + s[axis + 1:] != \
                shapes[0][:axis] + shapes[0][axis + 1:]:
            raise TypeError("Cannot concatenate arrays with shapes that differ in dimensions "
                            f"other than the one being concatenated (axis {axis}): got "
                            + ", ".join(str(t) for t in shapes))
    if len(arrays) == 1:
        return arrays[0]
    return bind(p.concatenate_p, *arrays, dimension=axis)


def stack(arrays, axis=0):
    """Join ``arrays`` of one shape along a new ``axis``."""
    if not len(arrays):
        raise ValueError("Need at least one array to stack.")
    arrays = [asarray(a) if not _is_array(a) else a for a in arrays]
    if len({_shape(a) for a in arrays}) > 1:
        raise ValueError("All input arrays must have the same shape, got "
                         + ", ".join(str(_shape(a)) for a in arrays))
    ndim = len(_shape(arrays[0])) + 1
    axis = _axis(axis, ndim)
    return concatenate([expand_dims(a, axis) for a in arrays], axis)


def vstack(arrays):
    """Stack arrays as rows (at least 2-D), along axis 0."""
    return concatenate([atleast_2d(a) for a in arrays], 0)


def hstack(arrays):
    """Stack arrays along their second axis (the first for 1-D arrays)."""
    arrays = [atleast_1d(a) for a in arrays]
    return concatenate(arrays, 0 if len(_shape(arrays[0])) == 1 else 1)


def atleast_1d(x):
    """``x`` with at least one dimension."""
    return reshape(x, (1,)) if _shape(x) == () else x


def atleast_2d(x):
    """``x`` with at least two dimensions."""
    x = atleast_1d(x)
    return reshape(x, (1,) + _shape(x)) if len(_shape(x)) == 1 else x


def split(x, indices_or_sections, axis=0):
    """Split into equal sections, or at the given indices."""
    shape = _shape(x)
    axis = _axis(axis, len(shape))
    n = shape[axis]
    if isinstance(indices_or_sections, (int, np.integer)):
        sections = int(indices_or_sections)
        if n % sections:
            raise ValueError("array split does not result in an equal division")
        bounds = [k * (n // sections) for k in range(sections + 1)]
    else:
        bounds = [0] + [int(i) for i in indices_or_sections] + [n]
    cuts = [slice(lo, hi).indices(n)[:2] for lo, hi in zip(bounds[:-1], bounds[1:])]
    return [_slice_axis(x, axis, lo, builtins.max(lo, hi)) for lo, hi in cuts]


def array_split(x, sections, axis=0):
    """Split into ``sections`` nearly equal parts along ``axis``."""
    shape = _shape(x)
    axis = _axis(axis, len(shape))
    n = shape[axis]
    base, extra = divmod(n, sections)
    sizes = [base + (1 if k < extra else 0) for k in range(sections)]
    bounds = np.cumsum([0] + sizes).tolist()
    return [_slice_axis(x, axis, lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]


def _slice_axis(x, axis, lo, hi):
    shape = _shape(x)
    start = [0] * len(shape)
    limit = list(shape)
    start[axis], limit[axis] = lo, hi
    return bind(p.slice_p, x, start_indices=tuple(start), limit_indices=tuple(limit),
                strides=None)


def tile(x, reps):
    """``x`` repeated ``reps`` times along each dimension, as numpy's tile."""
    x = asarray(x) if not _is_array(x) else x
    reps = (reps,) if isinstance(reps, int) else tuple(reps)
    shape = _shape(x)
    ndim = builtins.max(len(shape), len(reps))
    shape = (1,) * (ndim - len(shape)) + shape
    reps = (1,) * (ndim - len(reps)) + reps
    x = reshape(x, shape)
    # (r0, s0, r1, s1, ...) then merge pairs
    expanded = []
    for r, s in zip(reps, shape):
        expanded += [r, s]
    x = bind(p.broadcast_in_dim_p, x, shape=tuple(expanded),
             broadcast_dimensions=tuple(2 * k + 1 for k in range(ndim)))
    return reshape(x, tuple(r * s for r, s in zip(reps, shape)))


def pad(array, pad_width, mode="constant", constant_values=0):
    """``array`` with ``(before, after)`` elements of ``constant_values`` added along each axis.

    ``pad_width`` is numpy's: an int, one ``(before, after)`` pair, or one pair per axis. Only
    ``mode='constant'``. ``jnp.pad(jnp.ones(2), (1, 0))`` is ``[0., 1., 1.]``.
    """
    if mode != "constant":
        raise NotImplementedError(f"jnp.pad: mode={mode!r} is not supported by shardc; "
                                  "only mode='constant'")
    x = asarray(array) if not _is_array(array) else array
    shape, dtype = _shape(x), _dtype_of(x)
    widths = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (len(shape), 2))
    if (widths < 0).any():
        raise ValueError(f"jnp.pad: pad_width must be non-negative, got {pad_width}")
    for axis, (before, after) in enumerate(widths.tolist()):
        parts = []
        for width in (before, after):
            edge = _shape(x)[:axis] + (width,) + _shape(x)[axis + 1:]
            parts.append(full(edge, constant_values, dtype) if width else None)
        pieces = [p for p in (parts[0], x, parts[1]) if p is not None]
        x = concatenate(pieces, axis) if len(pieces) > 1 else x
    return x


def repeat(x, repeats, axis=None):
    """Each element of ``x`` repeated ``repeats`` times along ``axis``."""
    if axis is None:
        x, axis = ravel(x), 0
    shape = _shape(x)
    axis = _axis(axis, len(shape))
    x = expand_dims(x, axis + 1)
    target = shape[:axis + 1] + (repeats,) + shape[axis + 1:]
    x = broadcast_to(x, target)
    return reshape(x, shape[:axis] + (shape[axis] * repeats,) + shape[axis + 1:])


def flip(x, axis=None):
    """``x`` reversed along ``axis`` (all axes when None)."""
    ndim = len(_shape(x))
    dims = tuple(range(ndim)) if axis is None else tuple(
        _axis(a, ndim) for a in ((axis,) if isinstance(axis, int) else axis))
    return bind(p.rev_p, x, dimensions=dims)


def roll(x, shift, axis=None):
    """``x`` rotated by ``shift`` positions along ``axis``."""
    if axis is None:
        return reshape(roll(ravel(x), shift, 0), _shape(x))
    shape = _shape(x)
    axis = _axis(axis, len(shape))
    n = shape[axis]
    if isinstance(shift, Tracer):
        doubled = concatenate([x, x], axis)
        start = remainder(subtract(n, shift), n)
        return _dynamic_slice_axis(doubled, axis, start, n)
    shift = int(shift) % n if n else 0
    if shift == 0:
        return x
    return concatenate([_slice_axis(x, axis, n - shift, n), _slice_axis(x, axis, 0, n - shift)],
                       axis)


def _dynamic_slice_axis(x, axis, start, size):
    shape = _shape(x)
    starts = [np.int32(0)] * len(shape)
    starts[axis] = _convert(start, _dt.int_)
    sizes = list(shape)
    sizes[axis] = size
    return bind(p.dynamic_slice_p, x, *starts, slice_sizes=tuple(sizes))


# --- reductions ------------------------------------------------------------------------------

def _no_out(fn):
    """numpy hands ``out=`` to these when called as ``np.sum(array)``; only None makes sense."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, out=None, **kwargs):
        if out is not None:
            raise NotImplementedError(f"{fn.__name__}: out= is not supported (arrays are "
                                      "immutable); use the result")
        return fn(*args, **kwargs)
    return wrapper


def _reduce_axes(x, axis) -> tuple:
    ndim = len(_shape(x))
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (int, np.integer)):
        return (_axis(int(axis), ndim),)
    axes = tuple(sorted(_axis(a, ndim) for a in axis))
    if len(set(axes)) != len(axes):
        raise ValueError(f"duplicate value in 'axis': {tuple(axis)}")
    return axes


def _accumulator_dtype(dtype) -> np.dtype:
    """JAX sums and multiplies booleans and narrow integers in the default int width."""
    if _dt.is_bool(dtype) or (_dt.is_int(dtype) and np.dtype(dtype).itemsize < 4):
        return _dt.uint_ if _dt.is_unsigned(dtype) else _dt.int_
    return np.dtype(dtype)


def _cumulative_dtype(dtype) -> np.dtype:
    """JAX's cumulative sums and products count booleans in int32 and keep every other dtype
    (an int8 cumsum wraps in int8)."""
    return _dt.int_ if _dt.is_bool(dtype) else np.dtype(dtype)


def _keep(x, result, axes, keepdims):
    if not keepdims:
        return result
    shape = tuple(1 if k in axes else d for k, d in enumerate(_shape(x)))
    return reshape(result, shape)


def _reduction(prim, x, axis, keepdims, dtype=None):
    x = asarray(x) if not _is_array(x) else x
    if dtype is not None:
        x = astype(x, dtype)
    elif prim in (p.reduce_sum_p, p.reduce_prod_p):
        x = astype(x, _accumulator_dtype(_dtype_of(x)))
    result_dtype = _dtype_of(x)
    if dtype is None and prim in (p.reduce_sum_p, p.reduce_prod_p):
        x = astype(x, _dt.computation_dtype(result_dtype))    # bf16/f16 sum in f32, as JAX
    axes = _reduce_axes(x, axis)
    if prim in (p.reduce_max_p, p.reduce_min_p) and builtins.any(_shape(x)[a] == 0
                                                                   for a in axes):
        raise ValueError(f"zero-size array to reduction operation {prim} which has no "
                         f"identity (shape {_shape(x)}, axis {axis})")
    result = astype(bind(prim, x, axes=axes), result_dtype)
    return _keep(x, result, axes, keepdims)


@_no_out
def sum(x, axis=None, dtype=None, keepdims=False):
    """Sum over ``axis`` (None: all; an int or a tuple, negative from the end)."""
    return _reduction(p.reduce_sum_p, x, axis, keepdims, dtype)


@_no_out
def prod(x, axis=None, dtype=None, keepdims=False):
    """Product over ``axis`` (None: all; an int or a tuple)."""
    return _reduction(p.reduce_prod_p, x, axis, keepdims, dtype)


@_no_out
def max(x, axis=None, keepdims=False):
    """Maximum over ``axis`` (None: all; an int or a tuple)."""
    return _reduction(p.reduce_max_p, x, axis, keepdims)


@_no_out
def min(x, axis=None, keepdims=False):
    """Minimum over ``axis`` (None: all; an int or a tuple)."""
    return _reduction(p.reduce_min_p, x, axis, keepdims)


amax, amin = max, min


@_no_out
def all(x, axis=None, keepdims=False):
    """True where every element over ``axis`` is true."""
    return _reduction(p.reduce_and_p, astype(x, bool_), axis, keepdims)


@_no_out
def any(x, axis=None, keepdims=False):
    """True where some element over ``axis`` is true."""
    return _reduction(p.reduce_or_p, astype(x, bool_), axis, keepdims)


@_no_out
def mean(x, axis=None, dtype=None, keepdims=False):
    """Mean over ``axis``; integers and booleans average in float32."""
    x = asarray(x) if not _is_array(x) else x
    axes = _reduce_axes(x, axis)
    count = int(np.prod([_shape(x)[a] for a in axes], dtype=np.int64))
    if not _dt.is_inexact(_dtype_of(x)):
        x = astype(x, _dt.float_)
    result_dtype = _dt.canonicalize(dtype) if dtype is not None else _dtype_of(x)
    x = astype(x, _dt.computation_dtype(result_dtype))   # bf16/f16 average in f32, as JAX
    total = sum(x, axis, None, keepdims)
    return astype(divide(total, count), result_dtype)


@_no_out
def var(x, axis=None, keepdims=False, ddof=0):
    """Variance over ``axis`` with ``ddof`` delta degrees of freedom."""
    x = asarray(x) if not _is_array(x) else x
    result_dtype = _dtype_of(x) if _dt.is_inexact(_dtype_of(x)) else _dt.float_
    x = astype(x, _dt.computation_dtype(result_dtype))   # bf16/f16 in f32, as JAX
    centered = subtract(x, mean(x, axis, keepdims=True))
    axes = _reduce_axes(x, axis)
    count = int(np.prod([_shape(x)[a] for a in axes], dtype=np.int64))
    variance = divide(sum(square(centered), axis, keepdims=keepdims), count - ddof)
    return astype(variance, result_dtype)


@_no_out
def std(x, axis=None, keepdims=False, ddof=0):
    """Standard deviation over ``axis``."""
    return sqrt(var(x, axis, keepdims, ddof))


def _arg_reduction(prim, x, axis, keepdims):
    x = asarray(x) if not _is_array(x) else x
    original = x
    if axis is None:
        x, axis = ravel(x), 0
    axis = _axis(axis, len(_shape(x)))
    if _shape(x)[axis] == 0:
        raise ValueError(f"attempt to get {prim} of an empty sequence (shape {_shape(x)})")
    result = bind(prim, x, axes=(axis,), index_dtype=_dt.int_)
    if original is not x:       # axis=None: keepdims keeps every dimension of the input
        return reshape(result, (1,) * len(_shape(original))) if keepdims else result
    return _keep(x, result, (axis,), keepdims)


@_no_out
def argmax(x, axis=None, keepdims=False):
    """Index (int32) of the first maximum along ``axis`` (of the flattened array if None)."""
    return _arg_reduction(p.argmax_p, x, axis, keepdims)


@_no_out
def argmin(x, axis=None, keepdims=False):
    """Index (int32) of the first minimum along ``axis`` (of the flattened array if None)."""
    return _arg_reduction(p.argmin_p, x, axis, keepdims)


@_no_out
def cumsum(x, axis=None, dtype=None):
    """Cumulative sum along ``axis`` (of the flattened array if None)."""
    x = asarray(x) if not _is_array(x) else x
    if axis is None:
        x, axis = ravel(x), 0
    x = astype(x, dtype if dtype is not None else _cumulative_dtype(_dtype_of(x)))
    return bind(p.cumsum_p, x, axis=_axis(axis, len(_shape(x))), reverse=False)


# --- linear algebra --------------------------------------------------------------------------

def _check_dot_dims(xs, ys, contract, batch):
    """TypeError naming the shapes when contracting or batch dimensions disagree in size."""
    for kind, (left, right) in (("contracting", contract), ("batch", batch)):
        lsizes = tuple(xs[d] for d in left)
        rsizes = tuple(ys[d] for d in right)
        if lsizes != rsizes:
            raise TypeError(f"dot_general requires {kind} dimensions to have the same shape, "
                            f"got {lsizes} and {rsizes} (operand shapes {xs} and {ys})")


def _dot_general(x, y, contract, batch=((), ())):
    x, y = _promote(x, y)
    _check_dot_dims(_shape(x), _shape(y), contract, batch)
    return bind(p.dot_general_p, x, y, dimension_numbers=(contract, batch),
                preferred_element_type=_dtype_of(x))


def _accepts_out_sharding(fn):
    """Let ``fn`` take ``out_sharding`` (a NamedSharding, or a PartitionSpec on the mesh of
    ``set_mesh``) and ``precision``, as JAX's do: the result is constrained to that layout."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, out_sharding=None, precision=None, **kwargs):
        result = fn(*args, **kwargs)
        if out_sharding is None:
            return result
        from shardc.sharding import resolve_sharding
        sharding = resolve_sharding(out_sharding, f"{fn.__name__}(out_sharding=...)")
        return bind(p.sharding_constraint_p, result, sharding=sharding)
    return wrapper


@_accepts_out_sharding
def dot(x, y):
    """numpy's dot: matrix product on the last axis of ``x`` and second-to-last of ``y``."""
    xs, ys = _shape(x), _shape(y)
    if xs == () or ys == ():
        return multiply(x, y)
    y_axis = 0 if len(ys) == 1 else len(ys) - 2
    return _dot_general(x, y, ((len(xs) - 1,), (y_axis,)))


@_accepts_out_sharding
def matmul(x, y):
    """``x @ y`` with numpy's batching rules."""
    xs, ys = _shape(x), _shape(y)
    if xs == () or ys == ():
        raise ValueError(f"matmul: operands must be at least 1-dimensional, got shapes {xs} "
                         f"and {ys}")
    if len(xs) <= 2 and len(ys) <= 2:
        return dot(x, y)
    x2 = x if len(xs) > 1 else reshape(x, (1,) + xs)
    y2 = y if len(ys) > 1 else reshape(y, ys + (1,))
    batch = _broadcast_shapes(_shape(x2)[:-2], _shape(y2)[:-2])
    x2 = broadcast_to(x2, batch + _shape(x2)[-2:])
    y2 = broadcast_to(y2, batch + _shape(y2)[-2:])
    nb = len(batch)
    out = _dot_general(x2, y2, ((nb + 1,), (nb,)), (tuple(range(nb)), tuple(range(nb))))
    if len(xs) == 1:
        out = squeeze(out, nb)
    if len(ys) == 1:
        out = squeeze(out, -1)
    return out


@_accepts_out_sharding
def vdot(x, y):
    """Dot product of the flattened operands."""
    return dot(ravel(x), ravel(y))


@_accepts_out_sharding
def inner(x, y):
    """Inner product over the last axes of ``x`` and ``y``."""
    return _dot_general(x, y, ((len(_shape(x)) - 1,), (len(_shape(y)) - 1,)))


def outer(x, y):
    """Outer product of the flattened operands: ``out[i, j] = x[i] * y[j]``."""
    x, y = ravel(x), ravel(y)
    return multiply(reshape(x, (-1, 1)), reshape(y, (1, -1)))


@_accepts_out_sharding
def tensordot(x, y, axes=2):
    """Contract ``axes`` of ``x`` with ``axes`` of ``y`` (an int: the last/first ``axes``)."""
    xs, ys = _shape(x), _shape(y)
    if isinstance(axes, int):
        left = tuple(range(len(xs) - axes, len(xs)))
        right = tuple(range(axes))
    else:
        left, right = axes
        left = (left,) if isinstance(left, int) else tuple(left)
        right = (right,) if isinstance(right, int) else tuple(right)
    return _dot_general(x, y, (tuple(_axis(a, len(xs)) for a in left),
                               tuple(_axis(a, len(ys)) for a in right)))


@_accepts_out_sharding
def einsum(subscripts, *operands, optimize=None):
    """Einstein summation over two operands at a time (``dot_general`` plus transposes).

    >>> jnp.einsum("ij,jk->ik", a, b)      # a @ b
    """
    from shardc.numpy._einsum import einsum as _einsum
    return _einsum(subscripts, *operands)


def trace(x, offset=0, axis1=0, axis2=1):
    """Sum of diagonal ``offset`` over ``axis1`` and ``axis2``."""
    return sum(diagonal(x, offset, axis1, axis2), axis=-1)  # noqa: F405


# --- comparisons of whole arrays -------------------------------------------------------------

def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """True when every element of ``a`` is close to ``b`` (a scalar boolean array)."""
    return all(isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan))


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """Elementwise ``|a - b| <= atol + rtol * |b|`` (equal infinities are close)."""
    a, b = _promote(a, b)
    if not _dt.is_inexact(_dtype_of(a)):
        a, b = astype(a, _dt.float_), astype(b, _dt.float_)
    close = logical_or(equal(a, b),
                       less_equal(abs(subtract(a, b)), add(atol, multiply(rtol, abs(b)))))
    if equal_nan:
        close = logical_or(close, logical_and(isnan(a), isnan(b)))
    return close


def array_equal(a, b, equal_nan=False):
    """True when ``a`` and ``b`` have one shape and equal elements (a scalar boolean array)."""
    if _shape(a) != _shape(b):
        return asarray(False)
    same = equal(a, b)
    if equal_nan:
        same = logical_or(same, logical_and(isnan(a), isnan(b)))
    return all(same)


# --- indexing --------------------------------------------------------------------------------

def take(a, indices, axis=None, out=None, mode=None, unique_indices=False,
         indices_are_sorted=False, fill_value=None):
    """Elements of ``a`` at ``indices`` along ``axis`` (of the flattened array if None);
    out-of-bounds indices read ``fill_value`` by default (NaN, the most negative integer,
    True), as JAX's ``mode='fill'``; ``mode='clip'`` or ``'wrap'`` as numpy.

    >>> take(arange(4.), array([1, -1, 9]))                          # [1., 3., nan]
    """
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.take is not supported.")
    return _indexing.take(asarray(a), indices, axis, mode, fill_value)


from shardc.numpy import _indexing  # noqa: E402
from shardc.numpy._indexing import getitem as _getitem, AtIndexer  # noqa: E402


# --- methods of traced values and Arrays -----------------------------------------------------

def _reflected(fn):
    return lambda self, other: fn(other, self)


def _bool_first(fn):
    return lambda self, other: fn(self, other)


_METHODS = {
    "__add__": add, "__radd__": _reflected(add),
    "__sub__": subtract, "__rsub__": _reflected(subtract),
    "__mul__": multiply, "__rmul__": _reflected(multiply),
    "__truediv__": true_divide, "__rtruediv__": _reflected(true_divide),
    "__floordiv__": floor_divide, "__rfloordiv__": _reflected(floor_divide),
    "__mod__": remainder, "__rmod__": _reflected(remainder),
    "__pow__": power, "__rpow__": _reflected(power),
    "__matmul__": matmul, "__rmatmul__": _reflected(matmul),
    "__and__": bitwise_and, "__rand__": _reflected(bitwise_and),
    "__or__": bitwise_or, "__ror__": _reflected(bitwise_or),
    "__xor__": bitwise_xor, "__rxor__": _reflected(bitwise_xor),
    "__eq__": equal, "__ne__": not_equal, "__lt__": less, "__le__": less_equal,
    "__gt__": greater, "__ge__": greater_equal,
    "__neg__": negative, "__pos__": lambda self: self, "__abs__": abs,
    "__invert__": lambda self: bind(p.not_p, self),
    "__round__": lambda self, ndigits=None: (
        round(self, ndigits) if ndigits is not None else astype(round(self), _dt.int_)),
    "__getitem__": lambda self, index: _getitem(self, index),
    "at": property(lambda self: AtIndexer(self)),
    "T": property(lambda self: transpose(self)),
    "mT": property(lambda self: swapaxes(self, -1, -2)),
    "reshape": reshape, "transpose": lambda self, *axes: transpose(
        self, axes[0] if len(axes) == 1 and not isinstance(axes[0], int) else (axes or None)),
    "astype": astype, "sum": sum, "mean": mean, "max": max, "min": min, "prod": prod,
    "argmax": argmax, "argmin": argmin, "all": all, "any": any, "var": var, "std": std,
    "cumsum": cumsum, "dot": dot, "squeeze": squeeze, "ravel": ravel,
    "flatten": ravel, "swapaxes": swapaxes, "clip": clip, "round": round,
    "take": take, "repeat": repeat,
}


# The rest of jax.numpy, one module per concern (they import the helpers above).
from shardc.numpy._ufuncs import *  # noqa: E402,F401,F403
from shardc.numpy._reductions import *  # noqa: E402,F401,F403
from shardc.numpy._sorting import *  # noqa: E402,F401,F403
from shardc.numpy._manipulation import *  # noqa: E402,F401,F403
from shardc.numpy._calculus import *  # noqa: E402,F401,F403
from shardc.numpy._functional import *  # noqa: E402,F401,F403
from shardc.numpy._index_tricks import *  # noqa: E402,F401,F403

_METHODS.update({
    "sort": sort, "argsort": argsort, "searchsorted": searchsorted,  # noqa: F405
    "cumprod": cumprod, "nonzero": nonzero, "diagonal": diagonal, "ptp": ptp,  # noqa: F405
    "conj": conj, "conjugate": conj, "real": property(real),  # noqa: F405
    "imag": property(imag), "trace": trace,  # noqa: F405
    "compress": lambda self, condition, axis=None, **kw: compress(  # noqa: F405
        condition, self, axis, **kw),
    "choose": lambda self, choices, mode="raise": choose(self, choices, mode=mode),  # noqa: F405
    "__divmod__": divmod, "__rdivmod__": _reflected(divmod),  # noqa: F405
    "__lshift__": left_shift, "__rlshift__": _reflected(left_shift),  # noqa: F405
    "__rshift__": right_shift, "__rrshift__": _reflected(right_shift),  # noqa: F405
})


def _install():
    from compiler.tracing import install_array_methods
    install_array_methods(Tracer, _METHODS)
    install_array_methods(Array, _METHODS)


_install()


from shardc.numpy import linalg  # noqa: E402,F401  (jnp.linalg)
