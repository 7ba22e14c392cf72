"""Diagonals and triangles: ``diagonal``, ``diag``, ``tri``, ``tril``/``triu``, the index
arrays of diagonals and triangles, and ``fill_diagonal``."""
from __future__ import annotations

import builtins

import numpy as np

from compiler.tracing import bind, known_nested, static_int
from ir import dtypes as _dt
from ir import primitives as p
from shardc.numpy._arithmetic import add, less_equal, where
from shardc.numpy._core import (as_array, asarray, astype, canonical_axis, convert,
                                dtype_of, key_array_rule, ndim_of, ones, ravel, reshape,
                                shape_of, shape_tuple, zeros, zeros_like)
from shardc.numpy._creation import eye
from shardc.numpy._indexing import take
from shardc.numpy._manipulation import moveaxis
from shardc.numpy._sorting import nonzero

__all__ = [
    "diagonal", "diag", "diagflat", "tri", "tril", "triu", "tril_indices", "triu_indices",
    "tril_indices_from", "triu_indices_from", "diag_indices", "diag_indices_from", "mask_indices",
    "fill_diagonal",
]


def diagonal(a, offset=0, axis1=0, axis2=1):
    """The diagonal ``offset`` of the planes ``(axis1, axis2)``, as a last axis."""
    if (rule := key_array_rule("moved", a)) is not None:
        return rule(a, lambda i: diagonal(i, offset, axis1, axis2))
    a = as_array(a)
    n = ndim_of(a)
    a1, a2 = canonical_axis(axis1, n), canonical_axis(axis2, n)
    if a1 == a2:
        raise ValueError("axis1 and axis2 must not be equal")
    offset = static_int(offset, "argument 'offset' of jnp.diagonal()")
    moved = moveaxis(moveaxis(a, a1, -1), a2 - (a2 > a1), -1)
    rows, cols = shape_of(moved)[-2:]
    start_row, start_col = builtins.max(-offset, 0), builtins.max(offset, 0)
    length = builtins.max(0, builtins.min(rows - start_row, cols - start_col))
    positions = np.arange(length) * (cols + 1) + start_row * cols + start_col
    flat = reshape(moved, shape_of(moved)[:-2] + (rows * cols,))
    return bind(p.gather_p, flat, asarray(positions.astype(np.int32)), axis=ndim_of(flat) - 1)


def diag(v, k=0):
    """The ``k``-th diagonal of a 2-D ``v``, or a 2-D array with 1-D ``v`` on diagonal ``k``."""
    v = as_array(v)
    if ndim_of(v) == 2:
        return diagonal(v, k)
    if ndim_of(v) != 1:
        raise ValueError("diag input must be 1d or 2d")
    k = static_int(k, "argument 'k' of jnp.diag()")
    n = shape_of(v)[0] + builtins.abs(k)
    # JAX's: row i of the result holds v padded to n at i (no gather, so a split v keeps
    # its split along the rows)
    zero = zeros((), dtype_of(v))
    padded = bind(p.pad_p, v, zero,
                  padding_config=((builtins.max(0, -k), builtins.max(0, k), 0),))
    return where(eye(n, n, k=k, dtype=bool), reshape(padded, (n, 1)), zero)


def diagflat(v, k=0):
    """A 2-D array with the flattened ``v`` on diagonal ``k``."""
    return diag(ravel(as_array(v)), k)


def tri(N, M=None, k=0, dtype=None):
    """``N x M`` ones at and below diagonal ``k`` (float32 unless ``dtype`` says)."""
    N, M = shape_tuple((N, N if M is None else M))
    rows = bind(p.iota_p, dtype=_dt.int_, shape=(N, M), dimension=0)
    cols = bind(p.iota_p, dtype=_dt.int_, shape=(N, M), dimension=1)
    # float32 by default, x64 on or off (JAX's)
    dtype = np.float32 if dtype is None else _dt.requested(dtype, "tri")
    return astype(less_equal(cols, add(rows, k)), dtype)


def tril(m, k=0):
    """``m`` with the elements above diagonal ``k`` (of its last two axes) zeroed."""
    if (rule := key_array_rule("moved", m)) is not None:
        return rule(m, lambda i: tril(i, k))
    m = as_array(m)
    if ndim_of(m) < 2:
        raise ValueError("Argument to jax.numpy.tril must be at least 2D")
    mask = tri(*shape_of(m)[-2:], k=k, dtype=bool)
    return where(mask, m, zeros_like(m, shape=()))


def triu(m, k=0):
    """``m`` with the elements below diagonal ``k`` (of its last two axes) zeroed."""
    if (rule := key_array_rule("moved", m)) is not None:
        return rule(m, lambda i: triu(i, k))
    m = as_array(m)
    if ndim_of(m) < 2:
        raise ValueError("Argument to jax.numpy.triu must be at least 2D")
    mask = tri(*shape_of(m)[-2:], k=k - 1, dtype=bool)
    return where(mask, zeros_like(m, shape=()), m)


def _index_arrays(arrays):
    """Index arrays in the default int (int64 with x64 on), as JAX's."""
    return tuple(asarray(np.asarray(a).astype(_dt.int_)) for a in arrays)


def tril_indices(n, k=0, m=None):
    """Row and column indices of the lower triangle of an ``n x m`` array."""
    return _index_arrays(np.tril_indices(*known_nested((n, k, m))))


def triu_indices(n, k=0, m=None):
    """Row and column indices of the upper triangle of an ``n x m`` array."""
    return _index_arrays(np.triu_indices(*known_nested((n, k, m))))


def tril_indices_from(arr, k=0):
    """``tril_indices`` for the shape of the 2-D ``arr``."""
    shape = shape_of(as_array(arr))
    if len(shape) != 2:
        raise ValueError("input array must be 2-d")
    return tril_indices(shape[0], k, shape[1])


def triu_indices_from(arr, k=0):
    """``triu_indices`` for the shape of the 2-D ``arr``."""
    shape = shape_of(as_array(arr))
    if len(shape) != 2:
        raise ValueError("input array must be 2-d")
    return triu_indices(shape[0], k, shape[1])


def diag_indices(n, ndim=2):
    """Indices of the main diagonal of an ``n``-sided ``ndim``-dimensional array."""
    if n < 0:
        raise ValueError(f"n argument to diag_indices must be nonnegative, got {n}")
    if ndim < 0:
        raise ValueError(f"ndim argument to diag_indices must be nonnegative, got {ndim}")
    return _index_arrays((np.arange(n),) * ndim)


def diag_indices_from(arr):
    """``diag_indices`` for ``arr``, whose sides must all be equal."""
    shape = shape_of(as_array(arr))
    if len(shape) < 2:
        raise ValueError("input array must be at least 2-d")
    if len(set(shape)) != 1:
        raise ValueError("All dimensions of input must be of equal length")
    return diag_indices(shape[0], len(shape))


def mask_indices(n, mask_func, k=0, *, size=None):
    """Indices where ``mask_func(ones((n, n)), k)`` is non-zero (``size=`` as for
    ``nonzero``)."""
    return nonzero(mask_func(ones((n, n), _dt.int_), k), size=size)


def fill_diagonal(a, val, wrap=False, *, inplace=True):
    """``a`` with its main diagonal set to ``val`` (needs ``inplace=False``)."""
    if inplace:
        raise NotImplementedError("JAX arrays are immutable, must use inplace=False")
    a = as_array(a)
    shape = shape_of(a)
    if len(shape) < 2:
        raise ValueError("array must be at least 2-d")
    if len(shape) > 2 and len(set(shape)) != 1:
        raise ValueError("All dimensions of input must be of equal length")
    if len(shape) == 2:
        rows, cols = shape
        step = cols + 1
        end = cols * cols if not wrap else rows * cols
        positions = np.arange(0, builtins.min(end, rows * cols), step)
    else:
        positions = np.arange(shape[0]) * int(sum(np.prod(shape[d + 1:]) for d in
                                                 range(len(shape))))
    count = len(positions)
    values = ravel(convert(as_array(val), dtype_of(a)))
    if shape_of(values)[0] == 0:
        return a
    values = take(values, asarray(np.arange(count, dtype=np.int32) % shape_of(values)[0]))
    flat = bind(p.scatter_p, ravel(a), asarray(positions.astype(np.int32)), values,
                axis=0, mode="set")
    return reshape(flat, shape)
