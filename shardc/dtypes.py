"""``shardc.dtypes`` (``jax.dtypes``) and the dtype names ``shardc.numpy`` exports.

The ML types are ml_dtypes' numpy extension types, as in JAX: ``bfloat16``, the float8 family
(``float8_e4m3fn``, ``float8_e5m2``, ...), the 4- and 6-bit floats and the 2- and 4-bit
integers. Their promotion follows JAX's lattice (``promote_types``); numpy does not file them
under ``np.floating``, so ``issubdtype`` here does, as ``jnp.issubdtype`` does.

    >>> import shardc.numpy as jnp
    >>> jnp.promote_types(jnp.bfloat16, jnp.float16)
    dtype('float32')
    >>> jnp.issubdtype(jnp.bfloat16, jnp.floating)
    True
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from compiler.tracing import Tracer, aval_of, is_python_scalar, weakly_typed
from ir import dtypes as _dt

__all__ = [
    "TypePromotionError", "bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
    "uint64", "float16", "float32", "float64", "complex64", "complex128", "bfloat16", "float8_e3m4",
    "float8_e4m3", "float8_e8m0fnu", "float8_e4m3b11fnuz", "float8_e4m3fn", "float8_e4m3fnuz",
    "float8_e5m2", "float8_e5m2fnuz", "float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn", "int2",
    "int4", "uint2", "uint4", "generic", "number", "inexact", "floating", "complexfloating",
    "integer", "signedinteger", "unsignedinteger", "issubdtype", "promote_types",
    "canonicalize_dtype", "is_weakly_typed", "result_type", "finfo", "iinfo", "can_cast",
    "float0", "extended", "prng_key", "itemsize_bits",
]

TypePromotionError = _dt.TypePromotionError

# --- scalar types under their numpy names --------------------------------------------------
bool_ = np.bool_
int8, int16, int32, int64 = np.int8, np.int16, np.int32, np.int64
uint8, uint16, uint32, uint64 = np.uint8, np.uint16, np.uint32, np.uint64
float16, float32, float64 = np.float16, np.float32, np.float64
complex64, complex128 = np.complex64, np.complex128
# the dtype of the (zero) cotangent of an integer or boolean value, as JAX's: zero bytes
float0 = _dt.FLOAT0
bfloat16 = ml_dtypes.bfloat16
float8_e3m4, float8_e4m3, float8_e8m0fnu = (ml_dtypes.float8_e3m4, ml_dtypes.float8_e4m3,
                                            ml_dtypes.float8_e8m0fnu)
float8_e4m3b11fnuz, float8_e4m3fn, float8_e4m3fnuz = (
    ml_dtypes.float8_e4m3b11fnuz, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz)
float8_e5m2, float8_e5m2fnuz = ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz
float4_e2m1fn, float6_e2m3fn, float6_e3m2fn = (ml_dtypes.float4_e2m1fn,
                                               ml_dtypes.float6_e2m3fn, ml_dtypes.float6_e3m2fn)
int2, int4, uint2, uint4 = ml_dtypes.int2, ml_dtypes.int4, ml_dtypes.uint2, ml_dtypes.uint4

# the abstract classes of numpy's hierarchy, for issubdtype
generic, number, inexact, floating, complexfloating = (np.generic, np.number, np.inexact,
                                                       np.floating, np.complexfloating)
integer, signedinteger, unsignedinteger = np.integer, np.signedinteger, np.unsignedinteger

_ML_PARENTS = {
    _dt.FLOAT: (np.floating, np.inexact, np.number, np.generic),
    "signed": (np.signedinteger, np.integer, np.number, np.generic),
    "unsigned": (np.unsignedinteger, np.integer, np.number, np.generic),
}


class extended(np.generic):
    """JAX's abstract scalar type of the extended dtypes (key dtypes are under it)."""


class prng_key(extended):
    """JAX's abstract scalar type of PRNG key dtypes: ``issubdtype(key.dtype, prng_key)``."""


def _extended_type(x):
    """The abstract type an extended dtype files under (a key dtype's ``type``), or None."""
    kind = x if isinstance(x, type) else getattr(x, "type", None)
    return kind if isinstance(kind, type) and issubclass(kind, extended) else None


def issubdtype(a, b) -> bool:
    """Whether ``a`` is ``b`` or under it in numpy's hierarchy, with ml_dtypes' types filed
    where JAX files them (``issubdtype(bfloat16, floating)`` is True; numpy says False), and
    key dtypes under ``prng_key`` and ``extended`` (and nothing numeric).

    >>> issubdtype(float8_e4m3fn, inexact), issubdtype(int4, signedinteger)
    (True, True)
    """
    if isinstance(a, type) and a in _ABSTRACT_SCALAR_TYPES:
        # an abstract type (np.generic, np.floating, ...) has no dtype: numpy's hierarchy
        b_type = b if _is_scalar_type(b) else np.dtype(b).type
        return bool(np.issubdtype(a, b_type))
    a_ext, b_ext = _extended_type(a), _extended_type(b)
    if a_ext is not None or b_ext is not None:
        return a_ext is not None and (b_ext is not None and issubclass(a_ext, b_ext)
                                      or b is np.generic)
    a_type = a if _is_scalar_type(a) else np.dtype(a).type
    b_type = b if _is_scalar_type(b) else np.dtype(b).type
    a_dtype = np.dtype(a_type)
    if a_dtype in _dt.ML_FLOATS:
        return b_type is a_type or b_type in _ML_PARENTS[_dt.FLOAT]
    if a_dtype in _dt.SMALL_INTS:
        parents = _ML_PARENTS["unsigned" if _dt.is_unsigned(a_dtype) else "signed"]
        return b_type is a_type or b_type in parents
    return bool(np.issubdtype(a_type, b_type))


_ABSTRACT_SCALAR_TYPES = frozenset((np.generic, np.number, np.integer, np.signedinteger,
                                    np.unsignedinteger, np.inexact, np.floating,
                                    np.complexfloating, np.flexible, np.character))


def _is_scalar_type(x) -> bool:
    return isinstance(x, type) and issubclass(x, np.generic)


def promote_types(a, b) -> np.dtype:
    """The dtype ``a`` and ``b`` promote to on JAX's lattice; Python's ``int``, ``float`` and
    ``complex`` count as weak types (``promote_types('uint8', int)`` is uint8).

    >>> promote_types(bfloat16, float32), promote_types(bfloat16, float)
    (dtype('float32'), dtype(bfloat16))
    """
    return _dt.promote_types(a, b)


def canonicalize_dtype(dtype) -> np.dtype:
    """``dtype`` as arrays hold it: 64-bit types become 32-bit unless x64 is enabled; float0
    (the dtype of an integer input's tangent) is its own canonical dtype, as in JAX."""
    if not isinstance(dtype, str) and np.dtype(dtype) == float0:
        return np.dtype(float0)
    return _dt.canonicalize(dtype)


is_weakly_typed = weakly_typed   # a Python number (a bool is typed), or what stands for one

_PYTHON_SCALAR_TYPES = (bool, int, float, complex)


def result_type(*args, return_weak_type_flag: bool = False):
    """The dtype JAX would give an operation on ``args`` (dtypes or values); of key arrays
    (or key dtypes), their key dtype. ``return_weak_type_flag``: ``(dtype, whether the
    result is weakly typed)``, as JAX's."""
    if any(_is_key(a) for a in args):
        from shardc.numpy._core import KEY_ARRAY_RULES
        dtype = KEY_ARRAY_RULES["result_type"](*args)
        return (dtype, False) if return_weak_type_flag else dtype
    # None stands for the default float dtype (JAX's)
    dtype, weak = promotion(*(_dt.float_ if a is None else a for a in args))
    return (dtype, bool(weak)) if return_weak_type_flag else dtype


def _is_key(value) -> bool:
    dtype = value if not hasattr(value, "shape") else getattr(value, "dtype", None)
    return isinstance(getattr(dtype, "type", None), type) and \
        not isinstance(dtype, (np.dtype, type)) and issubclass(dtype.type, prng_key)


def promotion(*args) -> tuple:
    """``(dtype, weak)``: the dtype JAX would give an operation on ``args`` (dtypes or
    values), and whether its result is weakly typed (JAX's lattice: every operand is, or a
    weak one lifts the kind above the typed ones')."""
    dts, weak = [], []
    for a in args:
        if isinstance(a, Tracer):                       # the common operand: weak only when it
            dts.append(a.aval.dtype)                    # stands for a Python scalar
            weak.append(getattr(a, "weak", False) is True)
        elif type(a) in _PYTHON_SCALAR_TYPES:           # a Python number: weak (a bool
            dts.append(_dt.weak_scalar_dtype(a))        # is typed)
            weak.append(type(a) is not bool)
        elif a is int or a is float or a is complex:    # Python's types are weak, as in JAX
            dts.append(_dt.weak_scalar_dtype(a(0)))
            weak.append(True)
        elif isinstance(a, (np.dtype, type, str)) and not is_python_scalar(a):
            dts.append(_dt.canonicalize(np.dtype(a)))
            weak.append(False)
        else:
            if hasattr(type(a), "__jax_array__") and not hasattr(a, "aval"):
                a = a.__jax_array__()                   # an array-like wrapper
            dts.append(aval_of(a).dtype)
            weak.append(is_weakly_typed(a))
    return _dt.result_type(dts, weak), _dt.promotes_weak(dts, weak)


finfo = ml_dtypes.finfo       # np.finfo extended to bfloat16 and the small floats
iinfo = ml_dtypes.iinfo       # np.iinfo extended to int2/int4/uint2/uint4


def itemsize_bits(dtype) -> int:
    """Bits per element (``itemsize`` counts whole bytes: int4 is 4 bits here, 8 there;
    a bool is 8, as stored)."""
    if dtype is None:
        raise ValueError("dtype cannot be None.")
    if np.dtype(dtype) == np.dtype(bool):
        return 8
    if issubdtype(dtype, np.integer):
        return iinfo(dtype).bits
    if issubdtype(dtype, np.floating):
        return finfo(dtype).bits
    if issubdtype(dtype, np.complexfloating):
        return 2 * finfo(dtype).bits
    raise ValueError(f"unexpected input: {dtype=}")
can_cast = np.can_cast
