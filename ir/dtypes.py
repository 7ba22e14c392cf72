"""Dtypes as JAX has them with x64 off: float32/int32 defaults and weakly typed Python scalars."""
from __future__ import annotations

import numpy as np

_CANONICAL = {
    np.dtype("float64"): np.dtype("float32"),
    np.dtype("int64"): np.dtype("int32"),
    np.dtype("uint64"): np.dtype("uint32"),
    np.dtype("complex128"): np.dtype("complex64"),
}

float_ = np.dtype("float32")
int_ = np.dtype("int32")
bool_ = np.dtype("bool")

# The dtypes a program computes on (the 64-bit ones canonicalize to 32 bits): no strings, bytes,
# objects, dates, structured records or extended precision.
_VALID = frozenset(np.dtype(name) for name in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128"))


def is_valid(dtype) -> bool:
    """Whether arrays of ``dtype`` are JAX values (bool, integer, floating or complex)."""
    try:
        return np.dtype(dtype) in _VALID
    except TypeError:                 # not a dtype at all
        return False


def canonicalize(dtype) -> np.dtype:
    """The dtype JAX would use with x64 off (float64 -> float32, int64 -> int32).

    Raises TypeError for a dtype no program computes on (strings, objects, ...)."""
    dtype = np.dtype(dtype)
    dtype = _CANONICAL.get(dtype, dtype)
    if dtype not in _VALID:
        raise TypeError(f"dtype {dtype.name} is not a valid JAX type: arrays hold bool, "
                        "integer, floating or complex numbers")
    return dtype


def is_float(dtype) -> bool:
    return np.issubdtype(np.dtype(dtype), np.floating)


def is_int(dtype) -> bool:
    return np.issubdtype(np.dtype(dtype), np.integer)


def is_bool(dtype) -> bool:
    return np.dtype(dtype) == bool_


def is_inexact(dtype) -> bool:
    return np.issubdtype(np.dtype(dtype), np.inexact)


def _kind_rank(dtype) -> int:
    rank = _KIND_RANKS.get(dtype)
    if rank is None:
        rank = _KIND_RANKS[np.dtype(dtype)] = _compute_kind_rank(np.dtype(dtype))
    return rank


_KIND_RANKS: dict = {}


def _compute_kind_rank(dtype: np.dtype) -> int:
    if dtype == bool_:
        return 0
    if np.issubdtype(dtype, np.integer):
        return 1
    if np.issubdtype(dtype, np.floating):
        return 2
    return 3


def weak_scalar_dtype(value) -> np.dtype:
    """The default dtype of a Python scalar."""
    if isinstance(value, (bool, np.bool_)):
        return bool_
    if isinstance(value, int):
        return int_
    if isinstance(value, float):
        return float_
    if isinstance(value, complex):
        return np.dtype("complex64")
    raise TypeError(f"not a Python scalar: {value!r}")


def result_type(dtypes, weak) -> np.dtype:
    """See ``_result_type``; the answer is cached per (dtypes, weak flags)."""
    key = (tuple(dtypes), tuple(weak))
    try:
        return _RESULT_TYPES[key]
    except KeyError:
        pass
    except TypeError:                  # an unhashable dtype-like: compute it
        return _result_type(dtypes, weak)
    result = _RESULT_TYPES[key] = _result_type(dtypes, weak)
    return result


_RESULT_TYPES: dict = {}


def _result_type(dtypes, weak) -> np.dtype:
    """Promote ``dtypes``; entries flagged ``weak`` (Python scalars) only lift the kind.

    A weak int with a float32 array gives float32; a weak float with an int32 array gives
    float32; weak values alone give their defaults.
    """
    strong = [np.dtype(d) for d, w in zip(dtypes, weak) if not w]
    weak_kinds = [_kind_rank(d) for d, w in zip(dtypes, weak) if w]
    if strong:
        result = strong[0]
        for d in strong[1:]:
            result = _promote_strong(result, d)
        top_weak = max(weak_kinds, default=-1)
        if top_weak > _kind_rank(result):
            result = {1: int_, 2: float_, 3: np.dtype("complex64")}[top_weak]
        return canonicalize(result)
    top = max(weak_kinds)
    return {0: bool_, 1: int_, 2: float_, 3: np.dtype("complex64")}[top]


def _promote_strong(a: np.dtype, b: np.dtype) -> np.dtype:
    if a == b:
        return a
    ka, kb = _kind_rank(a), _kind_rank(b)
    if ka != kb:
        # JAX: a float array with an int array takes the float type (no widening).
        return a if ka > kb else b
    return canonicalize(np.promote_types(a, b))
