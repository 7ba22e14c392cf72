"""Sorting, searching, set operations, quantiles and data-dependent selections.

Everything sorts with the ``sort`` primitive (stable, floats in JAX's total order: -nan < -inf
< -0 < 0 < inf < nan) and searches with ``searchsorted``. Functions whose result size depends
on the data (``unique``, ``nonzero``, ...) take ``size=`` as in JAX; without it the input must
be concrete (eager, outside ``jit`` and shard_map bodies), and its size is read from the data.
"""
from __future__ import annotations

import collections

import numpy as np

from compiler.tracing import ConcretizationTypeError, Tracer, bind
from ir import dtypes as _dt
from ir import primitives as p
from shardc.numpy._core import _axis, _convert, _dtype_of, _is_array, _promote, _shape, asarray
import shardc.numpy as jnp

__all__ = [
    "sort", "argsort", "lexsort", "partition", "argpartition", "sort_complex", "searchsorted",
    "digitize", "take_along_axis", "put_along_axis", "unique", "unique_values",
    "unique_counts", "unique_inverse", "unique_all", "isin", "intersect1d", "union1d",
    "setdiff1d", "setxor1d", "nonzero", "flatnonzero", "argwhere", "extract", "compress",
    "trim_zeros", "bincount", "histogram", "histogram_bin_edges", "histogram2d", "histogramdd",
    "quantile", "percentile", "median", "nanquantile", "nanpercentile", "nanmedian",
]


def _array(x):
    return asarray(x) if not _is_array(x) else x


def _sort_operands(operands, axis, num_keys=1):
    outs = bind(p.sort_p, *operands, dimension=axis, num_keys=num_keys)
    return list(outs)


def _iota_along(shape, axis):
    return bind(p.iota_p, dtype=_dt.int_, shape=tuple(shape), dimension=axis)


def _flatten_if_none(a, axis):
    a = _array(a)
    if axis is None:
        return jnp.ravel(a), 0
    return a, _axis(axis, len(_shape(a)))


# --- sorting ---------------------------------------------------------------------------------

def sort(a, axis=-1, *, kind=None, order=None, stable=True, descending=False):
    """``a`` sorted along ``axis`` (flattened when None); NaNs last, -0.0 before 0.0.

    >>> jnp.sort(jnp.array([3, 1, 2]))       # [1, 2, 3]
    """
    if order is not None:
        raise TypeError("jnp.sort: order is not supported (arrays have no fields)")
    if axis is not None and not _shape(_array(a)):
        raise ValueError("jnp.sort: a 0-d array cannot be sorted along an axis")
    a, axis = _flatten_if_none(a, axis)
    if descending:
        return jnp.flip(sort(a, axis), axis)
    return _sort_operands([a], axis)[0]


def argsort(a, axis=-1, *, kind=None, order=None, stable=True, descending=False):
    """Indices (int32) that sort ``a`` along ``axis``; ties keep their order (stable).

    >>> jnp.argsort(jnp.array([3, 1, 2]))                    # [1, 2, 0]
    >>> jnp.argsort(jnp.array([3, 1, 3]), descending=True)   # [0, 2, 1]
    """
    if order is not None:
        raise TypeError("jnp.argsort: order is not supported (arrays have no fields)")
    if axis is not None and not _shape(_array(a)):
        raise ValueError("jnp.argsort: a 0-d array cannot be sorted along an axis")
    a, axis = _flatten_if_none(a, axis)
    if descending:
        # a stable descending order: sort the reversed array, reverse back, renumber
        n = _shape(a)[axis]
        backwards = argsort(jnp.flip(a, axis), axis)
        return jnp.subtract(n - 1, jnp.flip(backwards, axis))
    iota = _iota_along(_shape(a), axis)
    return _sort_operands([a, iota], axis)[1]


def lexsort(keys, axis=-1):
    """Indices that sort by several keys, the last key primary (numpy's convention).

    >>> jnp.lexsort((jnp.array([1, 0, 2]), jnp.array([1, 1, 0])))     # [2, 1, 0]
    """
    keys = [_array(k) for k in keys]
    if not keys:
        raise TypeError("jnp.lexsort: need at least one key")
    shapes = {_shape(k) for k in keys}
    if len(shapes) > 1:
        raise ValueError(f"jnp.lexsort: all keys need the same shape, got {sorted(shapes)}")
    shape = _shape(keys[0])
    if not shape:
        raise TypeError("jnp.lexsort: keys must be at least 1-dimensional")
    axis = _axis(axis, len(shape))
    iota = _iota_along(shape, axis)
    return _sort_operands(keys[::-1] + [iota], axis, num_keys=len(keys))[-1]


def partition(a, kth, axis=-1):
    """``a`` with its ``kth`` element (along ``axis``) in sorted position, smaller ones before,
    larger after: as JAX arranges it, the first ``kth + 1`` ascending, the rest descending."""
    a = _array(a)
    axis = _axis(axis, len(_shape(a)))
    n = _shape(a)[axis]
    kth = _kth(kth, n)
    ordered = sort(a, axis)
    head, tail = jnp.split(ordered, [kth + 1], axis)
    return jnp.concatenate([head, jnp.flip(tail, axis)], axis)


def argpartition(a, kth, axis=-1):
    """Indices that partition ``a`` around its ``kth`` element, as JAX picks them: the
    ``kth + 1`` smallest ascending, then the others descending (each stable, so among equal
    values the lower index comes first)."""
    a = _array(a)
    axis = _axis(axis, len(_shape(a)))
    n = _shape(a)[axis]
    kth = _kth(kth, n)
    head = jnp.split(argsort(a, axis), [kth + 1], axis)[0]
    tail = jnp.split(argsort(a, axis, descending=True), [n - kth - 1], axis)[0]
    return jnp.concatenate([head, tail], axis)


def _kth(kth, n):
    kth = int(kth)
    if not -n <= kth < n:
        raise ValueError(f"kth={kth} is out of bounds for an axis of size {n}")
    return kth % n


def sort_complex(a):
    """``a`` sorted (flattened along the last axis) as a complex array."""
    a = _array(a)
    if np.issubdtype(_dtype_of(a), np.complexfloating):
        raise NotImplementedError("jnp.sort_complex: complex arrays are not supported by shardc")
    return jnp.astype(sort(a, -1), np.complex64)


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
    a = _array(a)
    if len(_shape(a)) != 1:
        raise ValueError(f"a should be 1-dimensional, got shape {_shape(a)}")
    if sorter is not None:
        a = jnp.take(a, sorter)
    a, v = _promote(a, v)
    v = _array(v)
    return bind(p.searchsorted_p, a, v, side=side)


def digitize(x, bins, right=False):
    """The index of the bin of ``bins`` (monotonic) each ``x`` falls into, as numpy's."""
    bins = _array(bins)
    if len(_shape(bins)) != 1:
        raise ValueError(f"digitize: bins must be a 1-dimensional array, got shape "
                         f"{_shape(bins)}")
    x = _array(x)
    n = _shape(bins)[0]
    if n == 0:
        return jnp.zeros(_shape(x), _dt.int_)
    side = "left" if right else "right"
    increasing = searchsorted(bins, x, side=side)
    decreasing = jnp.subtract(n, searchsorted(jnp.flip(bins), x, side=side))
    return jnp.where(jnp.greater_equal(bins[-1], bins[0]), increasing, decreasing)


# --- indices along an axis ---------------------------------------------------------------------

def _along_axis_positions(arr_shape, indices, axis):
    """Flat positions in an array of ``arr_shape`` (broadcast) of ``indices`` along ``axis``,
    with the result shape; negative indices count from the end, others are clamped."""
    idx_shape = _shape(indices)
    if len(idx_shape) != len(arr_shape):
        raise ValueError(f"indices and arr must have the same number of dimensions; got "
                         f"{len(idx_shape)} and {len(arr_shape)}")
    rest = np.broadcast_shapes(arr_shape[:axis] + (1,) + arr_shape[axis + 1:],
                               idx_shape[:axis] + (1,) + idx_shape[axis + 1:])
    out_shape = rest[:axis] + (idx_shape[axis],) + rest[axis + 1:]
    full_shape = rest[:axis] + (arr_shape[axis],) + rest[axis + 1:]
    n = arr_shape[axis]
    indices = jnp.broadcast_to(_convert(indices, _dt.int_), out_shape)
    indices = jnp.where(jnp.less(indices, 0), jnp.add(indices, n), indices)
    indices = jnp.clip(indices, 0, max(n - 1, 0))
    strides = [int(np.prod(full_shape[d + 1:], dtype=np.int64)) for d in range(len(full_shape))]
    flat = jnp.multiply(indices, strides[axis])
    for d in range(len(full_shape)):
        if d != axis and out_shape[d] > 1:
            flat = jnp.add(flat, jnp.multiply(_iota_along(out_shape, d), strides[d]))
    return flat, out_shape, full_shape


def _invalid_value(dtype):
    """What JAX's 'fill' mode reads out of bounds: NaN, the most negative signed integer, the
    largest unsigned one, True."""
    if _dt.is_inexact(dtype):
        return np.nan
    if _dt.is_bool(dtype):
        return True
    info = np.iinfo(dtype)
    return info.min if info.min < 0 else info.max


def take_along_axis(arr, indices, axis, mode=None, fill_value=None):
    """Elements of ``arr`` at ``indices`` along ``axis`` (other axes broadcast), as numpy's.

    Negative indices count from the end. Out-of-range ones read ``fill_value`` (default: NaN,
    the most negative integer, True) in JAX's default ``mode='fill'``, the nearest element with
    ``mode='clip'``.

    >>> x = jnp.array([[3, 1], [0, 2]])
    >>> jnp.take_along_axis(x, jnp.argsort(x, axis=1), axis=1)      # [[1, 3], [0, 2]]
    """
    if mode not in (None, "fill", "clip"):
        raise NotImplementedError(f"take_along_axis: mode={mode!r} is not supported; use "
                                  "'fill' or 'clip'")
    arr = _array(arr)
    indices = _array(indices)
    if not _dt.is_int(_dtype_of(indices)):
        raise TypeError(f"take_along_axis indices must be of integer type, got "
                        f"{_dtype_of(indices)}")
    if axis is None:
        arr, indices, axis = jnp.ravel(arr), jnp.ravel(indices), 0
    axis = _axis(axis, len(_shape(arr)))
    flat, out_shape, full_shape = _along_axis_positions(_shape(arr), indices, axis)
    source = jnp.ravel(jnp.broadcast_to(arr, full_shape))
    taken = bind(p.gather_p, source, flat, axis=0)
    if mode == "clip":
        return taken
    n = _shape(arr)[axis]
    wanted = jnp.broadcast_to(_convert(indices, _dt.int_), out_shape)
    inside = jnp.logical_and(jnp.greater_equal(wanted, -n), jnp.less(wanted, n))
    fill = _invalid_value(_dtype_of(arr)) if fill_value is None else fill_value
    return jnp.where(inside, taken, _convert(fill, _dtype_of(arr)))


def put_along_axis(arr, indices, values, axis, inplace=True, *, mode=None):
    """``arr`` with ``values`` written at ``indices`` along ``axis`` (needs ``inplace=False``:
    arrays are immutable)."""
    if inplace:
        raise ValueError("jax.numpy.put_along_axis cannot modify arrays in-place, because JAX "
                         "arrays are immutable. Pass inplace=False to instead return an "
                         "updated array.")
    arr = _array(arr)
    if axis is None:
        flat = put_along_axis(jnp.ravel(arr), jnp.ravel(_array(indices)),
                              jnp.ravel(_array(values)), 0, inplace=False)
        return jnp.reshape(flat, _shape(arr))
    axis = _axis(axis, len(_shape(arr)))
    positions, out_shape, full_shape = _along_axis_positions(_shape(arr), _array(indices), axis)
    if tuple(full_shape) != _shape(arr):
        raise ValueError(f"put_along_axis: indices of shape {_shape(indices)} do not fit an "
                         f"array of shape {_shape(arr)}")
    values = jnp.broadcast_to(_convert(values, _dtype_of(arr)), out_shape)
    flat = bind(p.scatter_p, jnp.ravel(arr), positions, values, axis=0, mode="set")
    return jnp.reshape(flat, _shape(arr))


# --- data-dependent sizes --------------------------------------------------------------------

def _concrete_size(count, name):
    """The Python int ``count`` holds; an error naming ``size=`` when it is traced."""
    if isinstance(count, Tracer):
        raise ConcretizationTypeError(
            f"jnp.{name}: the size of the result depends on the values, which are traced here; "
            "pass size= (and fill_value=) to give the result a static size")
    return int(np.asarray(count))


def _compact(values, keep, size, fill_value, name):
    """The elements (rows) of ``values`` where ``keep`` holds, in order, as an array of
    ``size`` of them (padded with ``fill_value``, default 0; cut when more are kept)."""
    if size is None:
        size = _concrete_size(jnp.sum(keep), name)
    size = int(size)
    positions = jnp.subtract(jnp.cumsum(keep), 1)
    target = jnp.where(keep, positions, size)               # size is out of range: dropped
    fill = 0 if fill_value is None else fill_value
    out = jnp.full((size,) + _shape(values)[1:], fill, _dtype_of(values))
    return bind(p.scatter_p, out, _convert(target, _dt.int_), values, axis=0, mode="set")


def _host_count(x, limit=None):
    """The number of non-zero entries of ``x`` (flattened, the first ``limit``) when ``x`` is a
    concrete value (host data, or an array outside a trace), else None: a condition given as
    a numpy array decides the size even under ``jit``."""
    if isinstance(x, Tracer):
        return None
    values = np.ravel(np.asarray(x))
    return int(np.count_nonzero(values[:limit] if limit is not None else values))


def flatnonzero(a, *, size=None, fill_value=None):
    """Indices (int32) of the non-zero elements of the flattened ``a``."""
    if size is None:
        size = _host_count(a)
    a = jnp.ravel(_array(a))
    keep = jnp.not_equal(a, 0)
    return _compact(_iota_along(_shape(a), 0), keep, size, fill_value, "flatnonzero")


def nonzero(a, *, size=None, fill_value=None):
    """A tuple of index arrays (int32), one per dimension, of the non-zero elements."""
    if size is None:
        size = _host_count(a)
    a = _array(a)
    shape = _shape(a)
    if not shape:
        raise ValueError("Calling nonzero on 0d arrays is not allowed. Use jnp.atleast_1d(a)"
                         ".nonzero() instead.")
    flat = flatnonzero(a, size=size)
    coordinates = unravel_positions(flat, shape)
    if fill_value is None or size is None:
        return coordinates
    valid = jnp.less(jnp.arange(_shape(flat)[0]), jnp.sum(jnp.not_equal(a, 0)))
    fills = fill_value if isinstance(fill_value, (tuple, list)) else (fill_value,) * len(shape)
    return tuple(jnp.where(valid, c, _convert(f, _dt.int_)) for c, f in zip(coordinates, fills))


def unravel_positions(flat, shape):
    """Row-major coordinates (a tuple of int32 arrays) of flat positions in ``shape``."""
    coordinates = []
    for d in range(len(shape)):
        stride = int(np.prod(shape[d + 1:], dtype=np.int64))
        coordinates.append(jnp.remainder(jnp.floor_divide(flat, stride), max(shape[d], 1)))
    return tuple(coordinates)


def argwhere(a, *, size=None, fill_value=None):
    """Indices (int32) of the non-zero elements, one row per element."""
    a = _array(a)
    if not _shape(a):
        rows = nonzero(jnp.atleast_1d(a), size=size, fill_value=fill_value)
        return jnp.reshape(rows[0], (-1, 1))[:, :0]
    return jnp.stack(nonzero(a, size=size, fill_value=fill_value), axis=-1)


def extract(condition, arr, *, size=None, fill_value=0):
    """The elements of ``arr`` (flattened) where ``condition`` (flattened) is non-zero."""
    if size is None:
        size = _host_count(condition, limit=int(np.prod(_shape(_array(arr)), dtype=np.int64)))
    arr = jnp.ravel(_array(arr))
    condition = jnp.ravel(_array(condition))
    n = _shape(arr)[0]
    if _shape(condition)[0] < n:
        condition = jnp.concatenate([condition, jnp.zeros(n - _shape(condition)[0],
                                                          _dtype_of(condition))])
    keep = jnp.not_equal(condition[:n], 0)
    return _compact(arr, keep, size, fill_value, "extract")


def compress(condition, a, axis=None, *, size=None, fill_value=0):
    """The slices of ``a`` along ``axis`` where the 1-D ``condition`` is true."""
    host_condition = condition
    condition = jnp.ravel(_array(condition))
    a, axis = _flatten_if_none(a, axis)
    n = _shape(a)[axis]
    if size is None:
        size = _host_count(host_condition, limit=n)
    if _shape(condition)[0] > n:
        extra = condition[n:]
        if not isinstance(extra, Tracer) and bool(np.asarray(jnp.any(extra))):
            raise ValueError(f"condition contains entries that are out of bounds for an axis "
                             f"of size {n}")
        condition = condition[:n]
    elif _shape(condition)[0] < n:
        a = jnp.take(a, jnp.arange(_shape(condition)[0]), axis=axis)
    keep = jnp.not_equal(condition, 0)
    count = jnp.sum(keep)
    rows = _compact(_iota_along(_shape(keep), 0), keep, size, None, "compress")
    taken = jnp.take(a, rows, axis=axis)
    valid = jnp.less(jnp.arange(_shape(rows)[0]), count)
    shape = [1] * len(_shape(taken))
    shape[axis] = _shape(rows)[0]
    return jnp.where(jnp.reshape(valid, shape), taken, _convert(fill_value, _dtype_of(a)))


def trim_zeros(filt, trim="fb"):
    """``filt`` (1-D) without its leading (``'f'``) and trailing (``'b'``) zeros; needs a
    concrete array (the result's length depends on the values)."""
    filt = _array(filt)
    if len(_shape(filt)) != 1:
        raise ValueError(f"trim_zeros: filt must be 1-D, got shape {_shape(filt)}")
    nonzero_at = np.asarray(jnp.not_equal(filt, 0)) if not isinstance(filt, Tracer) else None
    if nonzero_at is None:
        raise ConcretizationTypeError("jnp.trim_zeros: the length of the result depends on the "
                                      "values, which are traced here")
    found = np.flatnonzero(nonzero_at)
    if found.size == 0:
        return filt[:0]
    start = int(found[0]) if "f" in trim.lower() else 0
    stop = int(found[-1]) + 1 if "b" in trim.lower() else _shape(filt)[0]
    return filt[start:stop]


# --- unique and set operations ---------------------------------------------------------------

def _distinct_from_previous(ordered, equal_nan):
    """True at the first element (row) of each run of equal sorted elements (rows)."""
    n = _shape(ordered)[0]
    if n == 0:
        return jnp.zeros((0,), bool)
    later, earlier = ordered[1:], ordered[:-1]
    same = jnp.equal(later, earlier)
    if equal_nan and _dt.is_inexact(_dtype_of(ordered)):
        same = jnp.logical_or(same, jnp.logical_and(jnp.isnan(later), jnp.isnan(earlier)))
    if len(_shape(ordered)) > 1:
        same = jnp.all(same, axis=tuple(range(1, len(_shape(ordered)))))
    return jnp.concatenate([jnp.ones((1,), bool), jnp.logical_not(same)])


def _sorted_rows(rows):
    """``rows`` (1-D, or 2-D ordered lexicographically by row) sorted, and the permutation."""
    n = _shape(rows)[0]
    iota = _iota_along((n,), 0)
    if len(_shape(rows)) == 1:
        return _sort_operands([rows, iota], 0)
    columns = [rows[:, j] for j in range(_shape(rows)[1])]
    order = _sort_operands(columns + [iota], 0, num_keys=len(columns))[-1]
    return jnp.take(rows, order, axis=0), order


def _unique_rows(rows, size, fill_value, equal_nan):
    """(values, first indices, inverse, counts) of the elements of a 1-D ``rows``, or of the
    rows of a 2-D one."""
    n = _shape(rows)[0]
    ordered, order = _sorted_rows(rows)
    first = _distinct_from_previous(ordered, equal_nan)
    if size is None:
        size = _concrete_size(jnp.sum(first), "unique")
    if fill_value is None:
        fill_value = ordered[0] if n else 0
    values = _compact(ordered, first, size, None, "unique")
    count = jnp.sum(first)
    valid = jnp.less(jnp.arange(size), count)
    valid = jnp.reshape(valid, (size,) + (1,) * (len(_shape(rows)) - 1))
    values = jnp.where(valid, values, _convert(fill_value, _dtype_of(rows)))
    indices = _compact(order, first, size, None, "unique")
    group = jnp.subtract(jnp.cumsum(first), 1)
    inverse = bind(p.scatter_p, jnp.zeros((n,), _dt.int_), order, _convert(group, _dt.int_),
                   axis=0, mode="set")
    counts = bind(p.scatter_p, jnp.zeros((size,), _dt.int_), _convert(group, _dt.int_),
                  jnp.ones((n,), _dt.int_), axis=0, mode="add")
    return values, indices, inverse, counts


def unique(ar, return_index=False, return_inverse=False, return_counts=False, axis=None, *,
           equal_nan=True, size=None, fill_value=None, sorted=True):
    """The sorted distinct elements of ``ar`` (flattened), or its distinct slices along
    ``axis``, optionally with the index of each one's first occurrence, the inverse map and
    the counts. ``size=`` fixes the length (padded with ``fill_value``, default the smallest
    element) so the call traces.

    >>> jnp.unique(jnp.array([3, 1, 3]))                               # [1, 3]
    >>> jnp.unique(jnp.array([3, 1, 3]), size=3, fill_value=0)         # [1, 3, 0]
    """
    ar = _array(ar)
    if axis is None:
        rows = jnp.ravel(ar)
    else:
        axis = _axis(axis, len(_shape(ar)))
        moved = jnp.moveaxis(ar, axis, 0)
        rows = jnp.reshape(moved, (_shape(moved)[0], -1))
    values, indices, inverse, counts = _unique_rows(rows, size, fill_value, equal_nan)
    if axis is not None:
        values = jnp.moveaxis(jnp.reshape(values, (_shape(values)[0],) + _shape(moved)[1:]),
                              0, axis)
    extras = []
    if return_index:
        extras.append(indices)
    if return_inverse:
        extras.append(jnp.reshape(inverse, _shape(ar)) if axis is None and _shape(ar)
                      else inverse)
    if return_counts:
        extras.append(counts)
    return (values, *extras) if extras else values


UniqueAllResult = collections.namedtuple("UniqueAllResult",
                                         "values indices inverse_indices counts")
UniqueCountsResult = collections.namedtuple("UniqueCountsResult", "values counts")
UniqueInverseResult = collections.namedtuple("UniqueInverseResult", "values inverse_indices")


def unique_values(x, *, size=None, fill_value=None):
    """The distinct elements of ``x`` (the array API's unique_values)."""
    return unique(x, size=size, fill_value=fill_value)


def unique_counts(x, *, size=None, fill_value=None):
    """(values, counts) of the distinct elements of ``x``."""
    return UniqueCountsResult(*unique(x, return_counts=True, size=size, fill_value=fill_value))


def unique_inverse(x, *, size=None, fill_value=None):
    """(values, inverse_indices shaped like ``x``) of the distinct elements of ``x``."""
    values, inverse = unique(x, return_inverse=True, size=size, fill_value=fill_value)
    return UniqueInverseResult(values, jnp.reshape(inverse, _shape(x)))


def unique_all(x, *, size=None, fill_value=None):
    """(values, indices, inverse_indices, counts) of the distinct elements of ``x``."""
    values, indices, inverse, counts = unique(x, True, True, True, size=size,
                                              fill_value=fill_value)
    return UniqueAllResult(values, indices, jnp.reshape(inverse, _shape(x)), counts)


def isin(element, test_elements, assume_unique=False, invert=False, *, method="auto"):
    """True where an element of ``element`` occurs in ``test_elements`` (NaN never does)."""
    element = _array(element)
    tests = jnp.ravel(_array(test_elements))
    element, tests = _promote(element, tests)
    if _shape(tests)[0] == 0:
        found = jnp.zeros(_shape(element), bool)
    else:
        ordered = sort(tests)
        place = jnp.clip(searchsorted(ordered, element), 0, _shape(ordered)[0] - 1)
        found = jnp.equal(jnp.take(ordered, place), element)
    return jnp.logical_not(found) if invert else found


def _distinct(x, assume_unique):
    """(values, valid, first index): the sorted distinct elements of ``x`` (flattened) padded
    to its length, which of them are real, and where each first occurs in ``x``; ``x`` itself
    when ``assume_unique``."""
    x = jnp.ravel(_array(x))
    n = _shape(x)[0]
    if assume_unique or n == 0:
        return x, jnp.full((n,), n > 0, bool), _iota_along((n,), 0)
    values, first, _, counts = _unique_rows(x, n, None, True)
    return values, jnp.greater(counts, 0), first


def _sorted_compact(values, keep, size, fill_value, name):
    """The kept ``values`` in ascending order, as ``_compact`` lays them out."""
    if _shape(values)[0] == 0:
        return _compact(values, keep, size, fill_value, name)
    dropped = jnp.logical_not(keep)
    _, ordered, kept_first = _sort_operands([dropped, values, keep], 0, num_keys=2)
    return _compact(ordered, kept_first, size, fill_value, name)


def union1d(ar1, ar2, *, size=None, fill_value=None):
    """The sorted distinct elements of both arrays."""
    ar1, ar2 = _promote(jnp.ravel(_array(ar1)), jnp.ravel(_array(ar2)))
    return unique(jnp.concatenate([ar1, ar2]), size=size, fill_value=fill_value)


def _matches(ar1, ar2, assume_unique):
    """(values, matched, index in ar1, index in ar2) over the sorted distinct elements of both
    arrays laid end to end: ``matched`` marks an element of ``ar1`` followed by the same value
    from ``ar2``."""
    values1, valid1, index1 = _distinct(ar1, assume_unique)
    values2, valid2, index2 = _distinct(ar2, assume_unique)
    source = jnp.concatenate([jnp.zeros(_shape(values1), _dt.int_),
                              jnp.ones(_shape(values2), _dt.int_)])
    valid = jnp.concatenate([valid1, valid2])
    _, values, source, index, valid = _sort_operands(
        [jnp.logical_not(valid), jnp.concatenate([values1, values2]), source,
         jnp.concatenate([index1, index2]), valid], 0, num_keys=3)
    matched = jnp.logical_and(
        jnp.logical_and(valid[:-1], valid[1:]),
        jnp.logical_and(jnp.equal(values[:-1], values[1:]),
                        jnp.less(source[:-1], source[1:])))
    return values[:-1], matched, index[:-1], index[1:]


def intersect1d(ar1, ar2, assume_unique=False, return_indices=False, *, size=None,
                fill_value=None):
    """The sorted distinct elements found in both arrays; with ``return_indices``, also where
    each first occurs in ``ar1`` and in ``ar2`` (index padding is 0)."""
    ar1, ar2 = _promote(jnp.ravel(_array(ar1)), jnp.ravel(_array(ar2)))
    if _shape(ar1)[0] + _shape(ar2)[0] < 2:
        empty = jnp.zeros((0,), _dt.int_)
        values = _compact(ar1[:0], jnp.zeros((0,), bool), size, fill_value, "intersect1d")
        return (values, _compact(empty, empty > 0, size, None, "intersect1d"),
                _compact(empty, empty > 0, size, None, "intersect1d")) if return_indices \
            else values
    values, matched, index1, index2 = _matches(ar1, ar2, assume_unique)
    if size is None:
        size = _concrete_size(jnp.sum(matched), "intersect1d")
    result = _compact(values, matched, size, fill_value, "intersect1d")
    if not return_indices:
        return result
    return (result, _compact(index1, matched, size, None, "intersect1d"),
            _compact(index2, matched, size, None, "intersect1d"))


def setdiff1d(ar1, ar2, assume_unique=False, *, size=None, fill_value=None):
    """The distinct elements of ``ar1`` that are not in ``ar2``: sorted, or in ``ar1``'s order
    when ``assume_unique``."""
    ar1, ar2 = _promote(jnp.ravel(_array(ar1)), jnp.ravel(_array(ar2)))
    values, valid, _ = _distinct(ar1, assume_unique)
    keep = jnp.logical_and(valid, isin(values, ar2, invert=True))
    return _compact(values, keep, size, fill_value, "setdiff1d")


def setxor1d(ar1, ar2, assume_unique=False, *, size=None, fill_value=None):
    """The sorted elements found in exactly one of the arrays."""
    ar1, ar2 = _promote(jnp.ravel(_array(ar1)), jnp.ravel(_array(ar2)))
    values1, valid1, _ = _distinct(ar1, assume_unique)
    values2, valid2, _ = _distinct(ar2, assume_unique)
    keep = jnp.concatenate([jnp.logical_and(valid1, isin(values1, ar2, invert=True)),
                            jnp.logical_and(valid2, isin(values2, ar1, invert=True))])
    return _sorted_compact(jnp.concatenate([values1, values2]), keep, size, fill_value,
                           "setxor1d")


# --- counting --------------------------------------------------------------------------------

def bincount(x, weights=None, minlength=0, *, length=None):
    """Occurrences (or summed ``weights``) of each non-negative integer in ``x``.

    ``length=`` fixes the result's length (values beyond it are dropped) so the call traces;
    without it ``x`` must be concrete. Negative values count as 0, as in JAX.
    """
    x = _array(x)
    if not _dt.is_int(_dtype_of(x)):
        raise TypeError(f"bincount: x must have an integer type, got {_dtype_of(x)}")
    if len(_shape(x)) != 1:
        raise ValueError(f"bincount only accepts 1-dimensional input, got shape {_shape(x)}")
    if length is None:
        top = _concrete_size(jnp.max(x) if _shape(x)[0] else 0, "bincount")
        length = max(top + 1, int(minlength))
    x = jnp.clip(x, 0, None)
    if weights is None:
        weights = jnp.ones(_shape(x), _dt.int_)
    weights = jnp.broadcast_to(_array(weights), _shape(x))
    out = jnp.zeros((int(length),), _dtype_of(weights))
    return bind(p.scatter_p, out, _convert(x, _dt.int_), weights, axis=0, mode="add")


def histogram_bin_edges(a, bins=10, range=None, weights=None):
    """The edges of the bins ``histogram`` uses: ``bins + 1`` evenly spaced from the data's
    (or ``range``'s) minimum to maximum, or ``bins`` itself when it is an array."""
    a = jnp.ravel(_array(a))
    dtype = _dtype_of(a) if _dt.is_inexact(_dtype_of(a)) else _dt.float_
    if not isinstance(bins, (int, np.integer)):
        bins = _array(bins)
        return jnp.astype(bins, jnp.result_type(dtype, bins) if _dt.is_inexact(
            _dtype_of(bins)) else dtype)
    if range is None:
        lo, hi = jnp.min(a), jnp.max(a)
    else:
        lo, hi = range
    lo, hi = _convert(lo, dtype), _convert(hi, dtype)
    hi = jnp.where(jnp.equal(lo, hi), jnp.add(hi, 1), hi)   # one value: a unit-wide range
    lo = jnp.where(jnp.equal(lo, hi), jnp.subtract(lo, 0.5), lo)
    return jnp.astype(jnp.linspace(lo, hi, int(bins) + 1), dtype)


def _bin_index(a, edges):
    """Each value's bin (0 .. len(edges) - 2; the last bin includes its right edge), or -1
    outside."""
    nbins = _shape(edges)[0] - 1
    index = jnp.subtract(searchsorted(edges, a, side="right"), 1)
    index = jnp.where(jnp.equal(a, edges[-1]), nbins - 1, index)
    inside = jnp.logical_and(jnp.greater_equal(a, edges[0]), jnp.less_equal(a, edges[-1]))
    return jnp.where(inside, index, -1)


def histogramdd(sample, bins=10, range=None, weights=None, density=None):
    """The histogram of ``sample`` (``(N, D)``): counts per bin (float32, as in JAX) and the
    edges per dimension."""
    sample = _array(sample)
    if len(_shape(sample)) != 2:
        raise ValueError(f"histogramdd: sample must be 2-D (N, D), got shape {_shape(sample)}")
    n, dims = _shape(sample)
    bins = bins if isinstance(bins, (list, tuple)) else [bins] * dims
    ranges = range if range is not None else [None] * dims
    edges = [histogram_bin_edges(sample[:, d], bins[d], ranges[d]) for d in builtins_range(dims)]
    flat = jnp.zeros((n,), _dt.int_)
    inside = jnp.ones((n,), bool)
    shape = tuple(_shape(e)[0] - 1 for e in edges)
    for d, e in enumerate(edges):
        index = _bin_index(_convert(sample[:, d], _dtype_of(e)), e)
        inside = jnp.logical_and(inside, jnp.greater_equal(index, 0))
        flat = jnp.add(jnp.multiply(flat, shape[d]), jnp.clip(index, 0, None))
    size = int(np.prod(shape, dtype=np.int64))
    weights = jnp.ones((n,), _dt.float_) if weights is None else jnp.astype(weights, _dt.float_)
    weights = jnp.where(inside, weights, 0)
    counts = bind(p.scatter_p, jnp.zeros((size,), _dtype_of(weights)), flat, weights, axis=0,
                  mode="add")
    counts = jnp.reshape(counts, shape)
    if density:
        widths = [jnp.diff(e) for e in edges]
        volume = widths[0]
        for w in widths[1:]:
            volume = jnp.multiply(jnp.expand_dims(volume, -1), w)
        counts = jnp.divide(counts, jnp.multiply(jnp.sum(counts), volume))
    return counts, edges


builtins_range = range


def histogram(a, bins=10, range=None, weights=None, density=None):
    """Counts per bin (float32, as in JAX) of the flattened ``a``, and the bin edges."""
    a = jnp.ravel(_array(a))
    edges = histogram_bin_edges(a, bins, range)
    if weights is not None:
        weights = jnp.ravel(_array(weights))
    counts, _ = histogramdd(jnp.reshape(a, (-1, 1)), [edges], None, weights, density)
    return counts, edges


def histogram2d(x, y, bins=10, range=None, weights=None, density=None):
    """The 2-D histogram of points ``(x, y)``: counts and the edges along x and along y."""
    sample = jnp.stack([_array(x), _array(y)], axis=1)
    if isinstance(bins, (int, np.integer)) or (_is_array(bins) and len(_shape(bins)) == 1):
        bins = [bins, bins]
    counts, (edges_x, edges_y) = histogramdd(sample, bins, range, weights, density)
    return counts, edges_x, edges_y


# --- quantiles -------------------------------------------------------------------------------

_QUANTILE_METHODS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile(a, q, axis, method, keepdims, ignore_nan, name):
    if method not in _QUANTILE_METHODS:
        raise ValueError(f"{name}: method={method!r} is not supported; use one of "
                         f"{_QUANTILE_METHODS}")
    a = _array(a)
    if not _dt.is_inexact(_dtype_of(a)):
        a = jnp.astype(a, _dt.float_)
    dtype = _dtype_of(a)
    q = _convert(q, dtype) if not _is_array(q) else jnp.astype(q, dtype)
    original_shape = _shape(a)
    if axis is None:
        a, axes = jnp.ravel(a), (0,)
    else:
        axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
        axes = tuple(sorted(_axis(x, len(original_shape)) for x in axes))
        kept = [d for d in builtins_range(len(original_shape)) if d not in axes]
        a = jnp.transpose(a, kept + list(axes))
        a = jnp.reshape(a, tuple(original_shape[d] for d in kept) + (-1,))
        axes = (len(kept),)
    a = jnp.moveaxis(a, axes[0], -1)
    nan = jnp.isnan(a)
    a = jnp.where(nan, jnp.full_like(a, np.nan), a)       # one NaN, sorted last
    ordered = sort(a, -1)
    n = _shape(a)[-1]
    count = jnp.sum(jnp.logical_not(nan), axis=-1, keepdims=True) if ignore_nan \
        else jnp.full(_shape(a)[:-1] + (1,), n, _dt.int_)
    result = _interpolate(ordered, q, count, method, dtype)
    if ignore_nan:
        empty = jnp.equal(count, 0)[..., 0]
        result = jnp.where(empty, np.nan, result)
    else:
        result = jnp.where(jnp.any(nan, axis=-1), np.nan, result)
    result = jnp.astype(result, dtype)
    if keepdims:
        shape = tuple(1 if (axis is None or d in _normalized(axis, len(original_shape))) else s
                      for d, s in enumerate(original_shape))
        result = jnp.reshape(result, _shape(q) + shape)
    return result


def _normalized(axis, ndim):
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    return {_axis(x, ndim) for x in axes}


def _interpolate(ordered, q, count, method, dtype):
    """Values at quantile(s) ``q`` of rows sorted along the last axis with ``count`` values
    each; the result has ``q``'s dimensions first."""
    q_shape = _shape(q)
    qs = jnp.reshape(q, q_shape + (1,) * len(_shape(ordered)))
    last = jnp.astype(jnp.subtract(count, 1), dtype)
    position = jnp.multiply(qs, last)
    low = jnp.floor(position)
    high = jnp.ceil(position)
    if method == "lower":
        position = low
    elif method == "higher":
        position = high
    elif method == "nearest":
        position = jnp.round(position)
    index_shape = q_shape + _shape(ordered)[:-1] + (1,)
    rows = jnp.broadcast_to(ordered, q_shape + _shape(ordered))

    def at(index):
        index = jnp.broadcast_to(jnp.astype(jnp.clip(index, 0, None), _dt.int_), index_shape)
        return take_along_axis(rows, index, -1)[..., 0]
    if method == "midpoint":
        return jnp.multiply(jnp.add(at(low), at(high)), 0.5)
    if method != "linear":
        return at(position)
    weight = jnp.subtract(position, low)[..., 0]
    below, above = at(low), at(high)
    return jnp.add(below, jnp.multiply(jnp.subtract(above, below), weight))


def quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
             keepdims=False, *, interpolation=None):
    """The ``q``-th quantile(s) of ``a`` along ``axis`` (NaN where a slice holds a NaN)."""
    return _quantile(a, q, axis, interpolation or method, keepdims, False, "quantile")


def nanquantile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
                keepdims=False, *, interpolation=None):
    """``quantile`` ignoring NaNs (NaN only for an all-NaN slice)."""
    return _quantile(a, q, axis, interpolation or method, keepdims, True, "nanquantile")


def percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
               keepdims=False, *, interpolation=None):
    """The ``q``-th percentile(s) (0 to 100) of ``a`` along ``axis``."""
    return quantile(a, jnp.divide(q, 100), axis, method=interpolation or method,
                    keepdims=keepdims)


def nanpercentile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
                  keepdims=False, *, interpolation=None):
    """``percentile`` ignoring NaNs."""
    return nanquantile(a, jnp.divide(q, 100), axis, method=interpolation or method,
                       keepdims=keepdims)


def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """The median of ``a`` along ``axis`` (the mean of the middle two for an even count)."""
    return quantile(a, 0.5, axis, keepdims=keepdims)


def nanmedian(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """The median ignoring NaNs."""
    return nanquantile(a, 0.5, axis, keepdims=keepdims)
