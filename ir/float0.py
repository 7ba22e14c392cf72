"""float0 zeros: the cotangent of an integer or boolean value (JAX's ``float0``), a host array
that holds nothing, typed as the value it is the cotangent of: its shape and its split over
Explicit mesh axes (JAX's ``TypedNdArray``, whose ``typeof`` prints ``float0[16@i]``)."""
from __future__ import annotations

import numpy as np

from ir import dtypes
from ir.core import Aval


class TypedNdArray(np.ndarray):
    """float0 zeros that remember the type of the value they are the cotangent of (dtype
    float0; ``float0_aval`` reads it). A view or slice of one is typed by its own shape alone.
    (The type is no ``aval`` attribute: a value with one is taken for an operand, and float0
    zeros are refused as operands.)

    >>> float0_aval(float0_zeros(Aval((3,), np.dtype('int32')))).str_long()
    'float0[3]'
    """

    def __array_finalize__(self, obj):
        self._float0_aval = None

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        # numpy's own operations see a plain array (and give one)
        inputs = tuple(np.asarray(x) if isinstance(x, TypedNdArray) else x for x in inputs)
        return getattr(ufunc, method)(*inputs, **kwargs)


def float0_zeros(aval: Aval) -> TypedNdArray:
    """The float0 zeros of a value of type ``aval``: its shape, and its split."""
    zeros = np.zeros(aval.shape, dtypes.FLOAT0).view(TypedNdArray)
    zeros._float0_aval = Aval(aval.shape, dtypes.FLOAT0, type_sharding=aval.type_sharding)
    return zeros


def float0_aval(value) -> Aval:
    """The type of float0 zeros (a plain numpy array's: its shape alone)."""
    typed = getattr(value, "_float0_aval", None)
    return typed if typed is not None else Aval(np.shape(value), dtypes.FLOAT0)
