"""Bit packing: ``packbits`` and ``unpackbits`` (the bitwise operations themselves are
``_arithmetic``'s and ``_ufuncs``')."""
from __future__ import annotations

import builtins

import numpy as np

from ir import dtypes as _dt
from shardc.numpy._arithmetic import bitwise_and, multiply, not_equal
from shardc.numpy._core import (as_array, asarray, astype, canonical_axis, dtype_of, ndim_of, ravel,
                                reshape, shape_of)
from shardc.numpy._creation import arange
from shardc.numpy._indexing import take
from shardc.numpy._manipulation import moveaxis, pad
from shardc.numpy._reductions import sum
from shardc.numpy._ufuncs import right_shift

__all__ = ["packbits", "unpackbits"]


def packbits(a, axis=None, bitorder="big"):
    """Booleans (non-zero elements) packed eight to a uint8, along ``axis``."""
    if bitorder not in ("big", "little"):
        raise ValueError("'order' must be either 'little' or 'big'")
    a = as_array(a)
    if not (_dt.is_int(dtype_of(a)) or _dt.is_bool(dtype_of(a))):
        raise TypeError("Expected an input array of integer or boolean data type")
    if axis is None:
        a, axis = ravel(a), 0
    axis = canonical_axis(axis, ndim_of(a))
    bits = astype(not_equal(a, 0), np.uint8)
    n = shape_of(bits)[axis]
    padding = (-n) % 8
    widths = [(0, 0)] * ndim_of(bits)
    widths[axis] = (0, padding)
    bits = pad(bits, widths)
    bits = moveaxis(bits, axis, -1)
    bits = reshape(bits, shape_of(bits)[:-1] + ((n + padding) // 8, 8))
    shifts = np.arange(7, -1, -1) if bitorder == "big" else np.arange(8)
    weights = asarray((1 << shifts).astype(np.uint8))
    packed = sum(multiply(bits, weights), axis=-1, dtype=np.uint8)
    return moveaxis(packed, -1, axis)


def unpackbits(a, axis=None, count=None, bitorder="big"):
    """The bits of each uint8 as eight 0/1 uint8 values along ``axis``: the first ``count``
    (past the bits there are, zeros; a negative count drops as many from the end)."""
    if bitorder not in ("big", "little"):
        raise ValueError("'order' must be either 'little' or 'big'")
    a = as_array(a)
    if dtype_of(a) != np.uint8:
        raise TypeError("Expected an input array of unsigned byte data type")
    if axis is None:
        a, axis = ravel(a), 0
    axis = canonical_axis(axis, ndim_of(a))
    shifts = np.arange(7, -1, -1) if bitorder == "big" else np.arange(8)
    bits = bitwise_and(right_shift(a[..., None], asarray(shifts.astype(np.uint8))),
                           np.uint8(1))
    bits = moveaxis(bits, ndim_of(a), axis + 1)
    shape = list(shape_of(a))
    shape[axis] *= 8
    bits = reshape(bits, tuple(shape))
    if count is not None:
        count = int(count)
        keep = builtins.min(count, shape[axis]) if count >= 0 else shape[axis] + count
        bits = take(bits, arange(builtins.max(keep, 0)), axis=axis)
        if count > shape[axis]:
            widths = [(0, 0)] * len(shape)
            widths[axis] = (0, count - shape[axis])
            bits = pad(bits, widths)
    return bits
