"""Sorting, searching and data-dependent selections (``nonzero``, ``argwhere``, ``where``
with one argument, ``extract``, ``compress``).

Everything sorts with the ``sort`` primitive (stable, floats in JAX's total order: -nan < -inf
< -0 < 0 < inf < nan) and searches with ``searchsorted``. Functions whose result size depends
on the data (``nonzero``, ``argwhere``, ...) take ``size=`` as in JAX; without it the input
must be concrete (eager, outside ``jit`` and shard_map bodies), and its size is read from the
data.
"""
from __future__ import annotations

import numpy as np

from compiler.tracing import (ConcretizationTypeError, Tracer, aval_of, bind,
                              value_if_known)
from ir.sharding_rules import named_sharding
from ir import dtypes as _dt
from ir import primitives as p
from shardc.numpy._arithmetic import (floor_divide, greater_equal, less, less_equal, not_equal,
                                      remainder, subtract, where as elementwise_where)
from shardc.numpy._core import (as_array, constrain, astype, canonical_axis, concatenate, convert, dtype_of,
                                full, key_array_rule, promote, ravel, reshape, shape_of, stack,
                                zeros)
from shardc.numpy._creation import arange
from shardc.numpy._indexing import take
from shardc.numpy._manipulation import atleast_1d, flip, split
from shardc.numpy._reductions import any, cumsum, sum

__all__ = [
    "sort", "argsort", "lexsort", "partition", "argpartition", "sort_complex", "searchsorted",
    "digitize", "flatnonzero", "nonzero", "argwhere", "extract", "compress", "trim_zeros", "where",
]


def sort_operands(operands, axis, num_keys=1):
    """``operands`` sorted together along ``axis`` by the first ``num_keys`` of them."""
    outs = bind(p.sort_p, *operands, dimension=axis, num_keys=num_keys)
    return list(outs)


def iota_along(shape, axis, like=None):
    """int32 positions along ``axis``, broadcast to ``shape``; split as ``like``'s type says
    (positions sorted along with ``like`` have its type, as JAX's argsort makes them)."""
    iota = bind(p.iota_p, dtype=_dt.int_, shape=tuple(shape), dimension=axis)
    if like is not None and aval_of(like).type_sharding is not None:
        iota = constrain(iota, named_sharding(aval_of(like)))
    return iota


def flatten_if_none(a, axis):
    """``a`` and ``axis``; ``a`` flattened with axis 0 when ``axis`` is None."""
    a = as_array(a)
    if axis is None:
        return ravel(a), 0
    return a, canonical_axis(axis, len(shape_of(a)))


# --- sorting ---------------------------------------------------------------------------------

def sort(a, axis=-1, *, kind=None, order=None, stable=True, descending=False):
    """``a`` sorted along ``axis`` (flattened when None); NaNs last, -0.0 before 0.0.

    >>> jnp.sort(jnp.array([3, 1, 2]))       # [1, 2, 3]
    """
    if order is not None:
        raise TypeError("jnp.sort: order is not supported (arrays have no fields)")
    if axis is not None and not shape_of(as_array(a)):
        raise ValueError("jnp.sort: a 0-d array cannot be sorted along an axis")
    a, axis = flatten_if_none(a, axis)
    if descending:
        return flip(sort(a, axis), axis)
    return sort_operands([a], axis)[0]


def argsort(a, axis=-1, *, kind=None, order=None, stable=True, descending=False,
            dtype=None):
    """Indices (int32, or ``dtype`` when given) that sort ``a`` along ``axis``; ties keep
    their order (stable).

    >>> jnp.argsort(jnp.array([3, 1, 2]))                    # [1, 2, 0]
    >>> jnp.argsort(jnp.array([3, 1, 3]), descending=True)   # [0, 2, 1]
    """
    if order is not None:
        raise TypeError("jnp.argsort: order is not supported (arrays have no fields)")
    if dtype is not None:
        return astype(argsort(a, axis, kind=kind, stable=stable, descending=descending),
                      _dt.requested(dtype, "argsort"))
    if axis is not None and not shape_of(as_array(a)):
        raise ValueError("jnp.argsort: a 0-d array cannot be sorted along an axis")
    a, axis = flatten_if_none(a, axis)
    if descending:
        # a stable descending order: sort the reversed array, reverse back, renumber
        n = shape_of(a)[axis]
        backwards = argsort(flip(a, axis), axis)
        return subtract(n - 1, flip(backwards, axis))
    iota = iota_along(shape_of(a), axis, like=a)
    return sort_operands([a, iota], axis)[1]


def lexsort(keys, axis=-1):
    """Indices that sort by several keys, the last key primary (numpy's convention).

    >>> jnp.lexsort((jnp.array([1, 0, 2]), jnp.array([1, 1, 0])))     # [2, 1, 0]
    """
    keys = [as_array(k) for k in keys]
    if not keys:
        raise TypeError("jnp.lexsort: need at least one key")
    shapes = {shape_of(k) for k in keys}
    if len(shapes) > 1:
        raise ValueError(f"jnp.lexsort: all keys need the same shape, got {sorted(shapes)}")
    shape = shape_of(keys[0])
    if not shape:
        return zeros((), _dt.int_)           # 0-d keys: the one position (JAX's)
    axis = canonical_axis(axis, len(shape))
    iota = iota_along(shape, axis)
    return sort_operands(keys[::-1] + [iota], axis, num_keys=len(keys))[-1]


def partition(a, kth, axis=-1):
    """``a`` with its ``kth`` element (along ``axis``) in sorted position, smaller ones before,
    larger after: as JAX arranges it, the first ``kth + 1`` ascending, the rest descending."""
    a = as_array(a)
    axis = canonical_axis(axis, len(shape_of(a)))
    n = shape_of(a)[axis]
    kth = _kth(kth, n)
    ordered = sort(a, axis)
    head, tail = split(ordered, [kth + 1], axis)
    return concatenate([head, flip(tail, axis)], axis)


def argpartition(a, kth, axis=-1):
    """Indices that partition ``a`` around its ``kth`` element, as JAX picks them: the
    ``kth + 1`` smallest ascending (stable: among equal values the lower index first), then
    every other index in increasing order (each index once, ties across ``kth`` too)."""
    a = as_array(a)
    axis = canonical_axis(axis, len(shape_of(a)))
    n = shape_of(a)[axis]
    kth = _kth(kth, n)
    order = argsort(a, axis)
    head = split(order, [kth + 1], axis)[0]
    # an element's rank in that order tells whether it is in the head
    in_head = less_equal(argsort(order, axis), kth).astype(np.int8)
    tail = split(argsort(in_head, axis), [n - kth - 1], axis)[0]
    # int32, x64 on or off (JAX's: its top_k's indices)
    return astype(concatenate([head, tail], axis), np.int32)


def _kth(kth, n):
    kth = int(kth)
    if not -n <= kth < n:
        raise ValueError(f"kth={kth} is out of bounds for an axis of size {n}")
    return kth % n


def sort_complex(a):
    """``a`` sorted (flattened along the last axis) as a complex array."""
    a = as_array(a)
    dtype = dtype_of(a)
    if not np.issubdtype(dtype, np.complexfloating):
        return astype(sort(a, -1), _dt.complex_dtype(dtype) if _dt.is_inexact(dtype)
                      else _dt.complex_)
    if not a.ndim:
        return a
    # lexicographic: by the real parts, then the imaginary ones
    *_, out = bind(p.sort_p, bind(p.real_p, a), bind(p.imag_p, a), a, dimension=a.ndim - 1,
                   num_keys=2)
    return out


# --- searching -------------------------------------------------------------------------------

def searchsorted(a, v, side="left", sorter=None, *, method="scan"):
    """Where ``v``'s elements would go in the sorted 1-D ``a`` to keep it sorted (int32).

    ``side='left'`` gives the first such place, ``'right'`` the last. ``method`` is accepted for
    JAX's signature; every method gives the same answer here.

    >>> jnp.searchsorted(jnp.array([1, 2, 2, 3]), jnp.array([2, 5]))            # [1, 4]
    >>> jnp.searchsorted(jnp.array([1, 2, 2, 3]), 2, side="right")             # 3
    """
    if side not in ("left", "right"):
        raise ValueError(f"{side!r} is an invalid value for keyword 'side'; expected 'left' or "
                         "'right'")
    if method not in ("scan", "scan_unrolled", "sort", "compare_all"):
        raise ValueError(f"{method!r} is an invalid value for keyword 'method'")
    a = as_array(a)
    if len(shape_of(a)) != 1:
        raise ValueError(f"a should be 1-dimensional, got shape {shape_of(a)}")
    if sorter is not None:
        a = take(a, sorter)
    a, v = promote(a, v)
    v = as_array(v)
    return bind(p.searchsorted_p, a, v, side=side)


def digitize(x, bins, right=False, *, method=None):
    """The index of the bin of ``bins`` (monotonic) each ``x`` falls into, as numpy's.
    ``method`` (JAX's searchsorted strategy, checked) changes nothing here."""
    bins = as_array(bins)
    if len(shape_of(bins)) != 1:
        raise ValueError(f"digitize: bins must be a 1-dimensional array, got shape "
                         f"{shape_of(bins)}")
    x = as_array(x)
    n = shape_of(bins)[0]
    if n == 0:
        return zeros(shape_of(x), np.int32)
    side = "left" if right else "right"
    method = "scan" if method is None else method
    increasing = searchsorted(bins, x, side=side, method=method)
    decreasing = subtract(n, searchsorted(flip(bins), x, side=side, method=method))
    return elementwise_where(greater_equal(bins[-1], bins[0]), increasing, decreasing)


# --- data-dependent sizes --------------------------------------------------------------------

def concrete_size(count, name):
    """The Python int ``count`` holds; an error naming ``size=`` when it is traced (and not
    known now)."""
    count = value_if_known(count)
    if isinstance(count, Tracer):
        raise ConcretizationTypeError(
            f"jnp.{name}: the size of the result depends on the values, which are traced here; "
            "pass size= (and fill_value=) to give the result a static size")
    return int(np.asarray(count))


def compact(values, keep, size, fill_value, name):
    """The elements (rows) of ``values`` where ``keep`` holds, in order, as an array of
    ``size`` of them (padded with ``fill_value``, default 0; cut when more are kept)."""
    if size is None:
        size = concrete_size(sum(keep), name)
    size = int(size)
    positions = subtract(cumsum(keep), 1)
    target = elementwise_where(keep, positions, size)               # size is out of range: dropped
    fill = 0 if fill_value is None else fill_value
    out = full((size,) + shape_of(values)[1:], fill, dtype_of(values))
    return bind(p.scatter_p, out, convert(target, _dt.int_), values, axis=0, mode="set")


def host_count(x, limit=None):
    """The number of non-zero entries of ``x`` (flattened, the first ``limit``) when ``x`` is a
    concrete value (host data, or an array outside a trace), else None: a condition given as
    a numpy array decides the size even under ``jit``."""
    x = value_if_known(x)
    if isinstance(x, Tracer):
        return None
    values = np.ravel(np.asarray(x))
    return int(np.count_nonzero(values[:limit] if limit is not None else values))


def flatnonzero(a, *, size=None, fill_value=None):
    """Indices (int32) of the non-zero elements of the flattened ``a``."""
    if size is None:
        size = host_count(a)
    a = ravel(as_array(a))
    keep = not_equal(a, 0)
    return compact(iota_along(shape_of(a), 0), keep, size, fill_value, "flatnonzero")


def nonzero(a, *, size=None, fill_value=None):
    """A tuple of index arrays (int32), one per dimension, of the non-zero elements."""
    if size is None:
        size = host_count(a)
    a = as_array(a)
    shape = shape_of(a)
    if not shape:
        raise ValueError("Calling nonzero on 0d arrays is not allowed. Use jnp.atleast_1d(a)"
                         ".nonzero() instead.")
    flat = flatnonzero(a, size=size)
    coordinates = unravel_positions(flat, shape)
    if fill_value is None or size is None:
        return coordinates
    valid = less(arange(shape_of(flat)[0]), sum(not_equal(a, 0)))
    fills = fill_value if isinstance(fill_value, (tuple, list)) else (fill_value,) * len(shape)
    return tuple(elementwise_where(valid, c, convert(f, _dt.int_))
                 for c, f in zip(coordinates, fills))


def unravel_positions(flat, shape):
    """Row-major coordinates (a tuple of int32 arrays) of flat positions in ``shape``."""
    coordinates = []
    for d in range(len(shape)):
        stride = int(np.prod(shape[d + 1:], dtype=np.int64))
        coordinates.append(remainder(floor_divide(flat, stride), max(shape[d], 1)))
    return tuple(coordinates)


def argwhere(a, *, size=None, fill_value=None):
    """Indices (int32) of the non-zero elements, one row per element."""
    a = as_array(a)
    if not shape_of(a):
        rows = nonzero(atleast_1d(a), size=size, fill_value=fill_value)
        return reshape(rows[0], (-1, 1))[:, :0]
    return stack(nonzero(a, size=size, fill_value=fill_value), axis=-1)


def where(condition, x=None, y=None, *, size=None, fill_value=None):
    """Choose ``x`` where ``condition`` holds, else ``y``; with ``condition`` alone, its
    ``nonzero`` (``size=`` as there)."""
    if x is None and y is None:
        return nonzero(condition, size=size, fill_value=fill_value)
    if x is None or y is None:
        raise ValueError("Either both or neither of the x and y arguments should be provided "
                         "to jax.numpy.where, got x=None or y=None")
    if (rule := key_array_rule("where", x, y)) is not None:
        return rule(condition, x, y)
    return elementwise_where(condition, x, y)


def extract(condition, arr, *, size=None, fill_value=0):
    """The elements of ``arr`` (flattened) where ``condition`` (flattened) is non-zero."""
    if (rule := key_array_rule("moved", arr)) is not None:
        return rule(arr, lambda i: extract(condition, i, size=size, fill_value=0))
    if size is None:
        size = host_count(condition, limit=int(np.prod(shape_of(as_array(arr)), dtype=np.int64)))
    arr = ravel(as_array(arr))
    condition = ravel(as_array(condition))
    n = shape_of(arr)[0]
    if shape_of(condition)[0] < n:
        condition = concatenate([condition, zeros(n - shape_of(condition)[0],
                                                          dtype_of(condition))])
    keep = not_equal(condition[:n], 0)
    return compact(arr, keep, size, fill_value, "extract")


def compress(condition, a, axis=None, *, size=None, fill_value=0):
    """The slices of ``a`` along ``axis`` where the 1-D ``condition`` is true."""
    if (rule := key_array_rule("moved", a)) is not None:
        return rule(a, lambda i: compress(condition, i, axis, size=size, fill_value=0))
    host_condition = condition
    condition = ravel(as_array(condition))
    a, axis = flatten_if_none(a, axis)
    n = shape_of(a)[axis]
    if size is None:
        size = host_count(host_condition, limit=n)
    if shape_of(condition)[0] > n:
        extra = condition[n:]
        if not isinstance(extra, Tracer) and bool(np.asarray(any(extra))):
            raise ValueError(f"condition contains entries that are out of bounds for an axis "
                             f"of size {n}")
        condition = condition[:n]
    elif shape_of(condition)[0] < n:
        a = take(a, arange(shape_of(condition)[0]), axis=axis)
    keep = not_equal(condition, 0)
    count = sum(keep)
    rows = compact(iota_along(shape_of(keep), 0), keep, size, None, "compress")
    taken = take(a, rows, axis=axis)
    valid = less(arange(shape_of(rows)[0]), count)
    shape = [1] * len(shape_of(taken))
    shape[axis] = shape_of(rows)[0]
    return elementwise_where(reshape(valid, shape), taken, convert(fill_value, dtype_of(a)))


def trim_zeros(filt, trim="fb", axis=None):
    """``filt`` without its leading (``'f'``) and trailing (``'b'``) zeros along each axis in
    ``axis`` (all of them when None): along an axis, the slices holding only zeros at either
    end are cut (all of them when every element is zero). Needs a concrete array (the
    result's shape depends on the values)."""
    filt = as_array(filt)
    known = value_if_known(filt)
    if isinstance(known, Tracer):
        raise ConcretizationTypeError("jnp.trim_zeros: the shape of the result depends on the "
                                      "values, which are traced here (Error arose in the "
                                      "`filt` argument of trim_zeros())")
    ndim = len(shape_of(filt))
    axes = range(ndim) if axis is None else (axis,) if isinstance(axis, int) else axis
    axes = {canonical_axis(a, ndim) for a in axes}
    trim = trim.lower()
    if not axes or ("f" not in trim and "b" not in trim):
        return filt
    nonzero_at = np.asarray(known) != 0
    index = []
    for ax in range(ndim):
        if ax not in axes:
            index.append(slice(None))
            continue
        found = np.flatnonzero(nonzero_at.any(axis=tuple(a for a in range(ndim) if a != ax)))
        if found.size == 0:
            index.append(slice(0, 0))
            continue
        index.append(slice(int(found[0]) if "f" in trim else None,
                           int(found[-1]) + 1 if "b" in trim else None))
    return filt[tuple(index)]
