"""The dtype names of ``shardc.numpy``: numpy's scalar types, which called make 0-d arrays
(``jnp.float32(3)``), numpy's abstract types, the dtype routines and the constants."""
from __future__ import annotations

import builtins

import numpy as np

from compiler.tracing import Tracer
from ir import dtypes as _dt
from runtime.array import Array
from shardc.dtypes import (bfloat16, bool_, can_cast, complex128, complex64, finfo, float16,
                           float32, float4_e2m1fn, float64, float6_e2m3fn, float6_e3m2fn,
                           float8_e3m4, float8_e4m3, float8_e4m3b11fnuz, float8_e4m3fn,
                           float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz, float8_e8m0fnu, iinfo,
                           int16, int2, int32, int4, int64, int8, issubdtype, promote_types,
                           result_type, uint16, uint2, uint32, uint4, uint64, uint8)
from shardc.numpy._core import asarray, is_array, shape_of

__all__ = [
    "can_cast", "finfo", "iinfo", "issubdtype", "promote_types", "result_type", "bfloat16", "bool_",
    "complex128", "complex64", "float16", "float32", "float4_e2m1fn", "float64", "float6_e2m3fn",
    "float6_e3m2fn", "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn",
    "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "int16", "int2", "int32",
    "int4", "int64", "int8", "uint16", "uint2", "uint32", "uint4", "uint64", "uint8", "dtype", "e",
    "inf", "nan", "pi", "newaxis", "ndarray", "character", "complexfloating", "flexible",
    "floating", "generic", "inexact", "integer", "number", "object_", "signedinteger",
    "unsignedinteger", "euler_gamma", "ComplexWarning", "isdtype", "isscalar", "iterable",
]


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


# numpy's abstract scalar types and constants, as jax.numpy re-exports them
character, complexfloating, flexible, floating = (np.character, np.complexfloating,
                                                  np.flexible, np.floating)
generic, inexact, integer, number = np.generic, np.inexact, np.integer, np.number
object_, signedinteger, unsignedinteger = np.object_, np.signedinteger, np.unsignedinteger
euler_gamma = np.euler_gamma
ComplexWarning = np.exceptions.ComplexWarning


def isdtype(dtype, kind) -> bool:
    """The array API's dtype test (``'real floating'``, ``'integral'``, a dtype, or a tuple of
    them); JAX's extra types (bfloat16, float8s, int4 ...) are the kinds of numbers they hold."""
    dtype = np.dtype(dtype)
    if isinstance(kind, tuple):
        return builtins.any(isdtype(dtype, k) for k in kind)
    if not isinstance(kind, str):
        return dtype == np.dtype(kind)
    if dtype.type.__module__.startswith("numpy"):
        return bool(np.isdtype(dtype, kind))
    # an ml_dtypes type: tested as a numpy type of its kind
    stand_in = {_dt.BOOL: np.bool_, _dt.FLOAT: np.float32, _dt.COMPLEX: np.complex64,
                _dt.INT: np.uint8 if _dt.is_unsigned(dtype) else np.int8}.get(_dt.kind(dtype))
    return stand_in is not None and bool(np.isdtype(np.dtype(stand_in), kind))


def isscalar(element) -> bool:
    """True for Python and numpy scalars and for 0-d arrays (JAX's rule: a traced scalar is a
    scalar too)."""
    if hasattr(type(element), "__jax_array__") and not is_array(element):
        element = element.__jax_array__()           # an array-like wrapper
    if isinstance(element, (Tracer,)) or is_array(element):
        return shape_of(element) == ()
    return bool(np.isscalar(element))


iterable = np.iterable
