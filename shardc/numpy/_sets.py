"""Unique values and set operations: ``unique`` and its array API forms, ``isin``,
``union1d``, ``intersect1d``, ``setdiff1d`` and ``setxor1d``.

Each sorts with the ``sort`` primitive; a result whose size depends on the data takes
``size=`` as in JAX, and without it the input must be concrete (eager, outside ``jit`` and
shard_map bodies).
"""
from __future__ import annotations

import builtins
import collections
import math

import numpy as np

from compiler.tracing import aval_of, bind
from ir import dtypes as _dt
from ir import primitives as p
from shardc.numpy._arithmetic import (clip, equal, greater, isnan, less, logical_and, logical_not,
                                      logical_or, subtract, where)
from shardc.numpy._core import (as_array, broadcast_to, canonical_axis, concatenate, convert,
                                dtype_of, full, ones, promote, ravel, reshape, shape_of, zeros)
from shardc.numpy._creation import arange
from shardc.numpy._indexing import take
from shardc.numpy._manipulation import moveaxis
from shardc.numpy._reductions import all, amax, amin, any, cumsum, sum
from shardc.numpy._sorting import (compact, concrete_size, iota_along, searchsorted, sort,
                                   sort_operands)

__all__ = [
    "unique", "unique_values", "unique_counts", "unique_inverse", "unique_all", "isin", "union1d",
    "intersect1d", "setdiff1d", "setxor1d",
]


def _distinct_from_previous(ordered, equal_nan):
    """True at the first element (row) of each run of equal sorted elements (rows)."""
    n = shape_of(ordered)[0]
    if n == 0:
        return zeros((0,), bool)
    later, earlier = ordered[1:], ordered[:-1]
    same = equal(later, earlier)
    if equal_nan and _dt.is_inexact(dtype_of(ordered)):
        same = logical_or(same, logical_and(isnan(later), isnan(earlier)))
    if len(shape_of(ordered)) > 1:
        same = all(same, axis=tuple(range(1, len(shape_of(ordered)))))
    return concatenate([ones((1,), bool), logical_not(same)])


def _sorted_rows(rows):
    """``rows`` (1-D, or 2-D ordered lexicographically by row) sorted, and the permutation."""
    n = shape_of(rows)[0]
    iota = iota_along((n,), 0)
    if len(shape_of(rows)) == 1:
        return sort_operands([rows, iota], 0)
    columns = [rows[:, j] for j in range(shape_of(rows)[1])]
    order = sort_operands(columns + [iota], 0, num_keys=len(columns))[-1]
    return take(rows, order, axis=0), order


def _unique_rows(rows, size, fill_value, equal_nan):
    """(values, first indices, inverse, counts) of the elements of a 1-D ``rows``, or of the
    rows of a 2-D one."""
    n = shape_of(rows)[0]
    ordered, order = _sorted_rows(rows)
    first = _distinct_from_previous(ordered, equal_nan)
    if size is None:
        size = concrete_size(sum(first), "unique")
    if fill_value is None:
        fill_value = ordered[0] if n else 0
    values = compact(ordered, first, size, None, "unique")
    count = sum(first)
    valid = less(arange(size), count)
    valid = reshape(valid, (size,) + (1,) * (len(shape_of(rows)) - 1))
    values = where(valid, values, convert(fill_value, dtype_of(rows)))
    # indices past the distinct ones are the first sorted element's, as JAX's (its nonzero
    # pads the positions it picks with 0)
    indices = compact(order, first, size, None, "unique")
    if n:
        indices = where(less(arange(size), count), indices, order[0])
    group = subtract(cumsum(first), 1)
    inverse = bind(p.scatter_p, zeros((n,), _dt.int_), order, convert(group, _dt.int_),
                   axis=0, mode="set")
    counts = bind(p.scatter_p, zeros((size,), _dt.int_), convert(group, _dt.int_),
                  ones((n,), _dt.int_), axis=0, mode="add")
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
    ar = as_array(ar)
    if np.issubdtype(dtype_of(ar), np.complexfloating):
        # as JAX's: a complex number with a NaN part is NaN (sorted last, one such value)
        ar = where(isnan(ar), convert(float("nan"), dtype_of(ar)), ar)
    if axis is None:
        rows = ravel(ar)
    else:
        axis = canonical_axis(axis, len(shape_of(ar)))
        moved = moveaxis(ar, axis, 0)
        n, rest = shape_of(moved)[0], shape_of(moved)[1:]
        width = math.prod(rest)
        # empty slices are all alike: one distinct slice (if any), as JAX's
        rows = reshape(moved, (n, width)) if width else zeros((n, 1), dtype_of(ar))
        if fill_value is not None and len(shape_of(as_array(fill_value))):
            fill_value = reshape(broadcast_to(as_array(fill_value), rest), (width,))
    values, indices, inverse, counts = _unique_rows(rows, size, fill_value, equal_nan)
    if axis is not None:
        found = (shape_of(values)[0],) + rest
        values = moveaxis(reshape(values, found) if width else zeros(found, dtype_of(ar)),
                          0, axis)
    extras = []
    if return_index:
        extras.append(indices)
    if return_inverse:
        extras.append(reshape(inverse, shape_of(ar)) if axis is None and shape_of(ar)
                      else inverse)
    if return_counts:
        extras.append(counts)
    return (values, *extras) if extras else values


UniqueAllResult = collections.namedtuple("UniqueAllResult",
                                         "values indices inverse_indices counts")
UniqueCountsResult = collections.namedtuple("UniqueCountsResult", "values counts")
UniqueInverseResult = collections.namedtuple("UniqueInverseResult", "values inverse_indices")


def unique_values(x, *, size=None, fill_value=None):
    """The distinct elements of ``x`` (the array API's unique_values: NaNs are distinct)."""
    return unique(x, size=size, fill_value=fill_value, equal_nan=False)


def unique_counts(x, *, size=None, fill_value=None):
    """(values, counts) of the distinct elements of ``x``."""
    return UniqueCountsResult(*unique(x, return_counts=True, size=size, fill_value=fill_value,
                                      equal_nan=False))


def unique_inverse(x, *, size=None, fill_value=None):
    """(values, inverse_indices shaped like ``x``) of the distinct elements of ``x``."""
    values, inverse = unique(x, return_inverse=True, size=size, fill_value=fill_value,
                             equal_nan=False)
    return UniqueInverseResult(values, reshape(inverse, shape_of(x)))


def unique_all(x, *, size=None, fill_value=None):
    """(values, indices, inverse_indices, counts) of the distinct elements of ``x``."""
    values, indices, inverse, counts = unique(x, True, True, True, size=size,
                                              fill_value=fill_value, equal_nan=False)
    return UniqueAllResult(values, indices, reshape(inverse, shape_of(x)), counts)


def isin(element, test_elements, assume_unique=False, invert=False, *, method="auto"):
    """True where an element of ``element`` occurs in ``test_elements`` (NaN never does)."""
    element = as_array(element)
    tests = ravel(as_array(test_elements))
    element, tests = promote(element, tests)
    if shape_of(tests)[0] == 0:
        found = zeros(shape_of(element), bool)
    elif method == "compare_all" or (method == "auto" and _split(element, tests)):
        # JAX's 'auto': every element against every test, which keeps the elements' split
        # (sorting and searching would gather them); unsplit operands keep the cheaper search
        flat = ravel(element)
        pairs = equal(reshape(flat, shape_of(flat) + (1,)), reshape(tests, (1, -1)))
        found = reshape(any(pairs, axis=-1), shape_of(element))
    else:
        ordered = sort(tests)
        place = clip(searchsorted(ordered, element), 0, shape_of(ordered)[0] - 1)
        found = equal(take(ordered, place), element)
    return logical_not(found) if invert else found


def _split(*arrays) -> bool:
    """Whether some array's type splits it over mesh axes."""
    return builtins.any(aval_of(a).type_sharding is not None for a in arrays)


def _distinct(x, assume_unique):
    """(values, valid, first index): the sorted distinct elements of ``x`` (flattened) padded
    to its length, which of them are real, and where each first occurs in ``x``; ``x`` itself
    when ``assume_unique``."""
    x = ravel(as_array(x))
    n = shape_of(x)[0]
    if assume_unique or n == 0:
        return x, full((n,), n > 0, bool), iota_along((n,), 0)
    values, first, _, counts = _unique_rows(x, n, None, True)
    return values, greater(counts, 0), first


def _sorted_compact(values, keep, size, fill_value, name):
    """The kept ``values`` in ascending order, as ``_compact`` lays them out."""
    if shape_of(values)[0] == 0:
        return compact(values, keep, size, fill_value, name)
    dropped = logical_not(keep)
    _, ordered, kept_first = sort_operands([dropped, values, keep], 0, num_keys=2)
    return compact(ordered, kept_first, size, fill_value, name)


def union1d(ar1, ar2, *, size=None, fill_value=None):
    """The sorted distinct elements of both arrays."""
    ar1, ar2 = promote(ravel(as_array(ar1)), ravel(as_array(ar2)))
    return unique(concatenate([ar1, ar2]), size=size, fill_value=fill_value)


def _matches(ar1, ar2, assume_unique):
    """(values, matched, index in ar1, index in ar2) over the sorted distinct elements of both
    arrays laid end to end: ``matched`` marks an element of ``ar1`` followed by the same value
    from ``ar2``."""
    values1, valid1, index1 = _distinct(ar1, assume_unique)
    values2, valid2, index2 = _distinct(ar2, assume_unique)
    source = concatenate([zeros(shape_of(values1), _dt.int_),
                              ones(shape_of(values2), _dt.int_)])
    valid = concatenate([valid1, valid2])
    _, values, source, index, valid = sort_operands(
        [logical_not(valid), concatenate([values1, values2]), source,
         concatenate([index1, index2]), valid], 0, num_keys=3)
    matched = logical_and(
        logical_and(valid[:-1], valid[1:]),
        logical_and(equal(values[:-1], values[1:]),
                        less(source[:-1], source[1:])))
    return values[:-1], matched, index[:-1], index[1:]


def intersect1d(ar1, ar2, assume_unique=False, return_indices=False, *, size=None,
                fill_value=None):
    """The sorted distinct elements found in both arrays; with ``return_indices``, also where
    each first occurs in ``ar1`` and in ``ar2`` (padded with the arrays' lengths, as JAX's)."""
    ar1, ar2 = promote(ravel(as_array(ar1)), ravel(as_array(ar2)))
    lengths = (shape_of(ar1)[0], shape_of(ar2)[0])
    if builtins.sum(lengths) < 2:
        empty = zeros((0,), _dt.int_)
        values = compact(ar1[:0], zeros((0,), bool), size, fill_value, "intersect1d")
        return (values, *(compact(empty, empty > 0, size, n, "intersect1d")
                          for n in lengths)) if return_indices else values
    values, matched, index1, index2 = _matches(ar1, ar2, assume_unique)
    if size is None:
        size = concrete_size(sum(matched), "intersect1d")
    result = compact(values, matched, size, fill_value, "intersect1d")
    if fill_value is None and int(size) > 0:
        # JAX's default padding: the smallest element found (the first, sorted), else 0
        found = arange(int(size)) < sum(matched)
        result = where(found, result, result[0])
    if not return_indices:
        return result
    return (result, *(compact(index, matched, size, n, "intersect1d")
                      for index, n in zip((index1, index2), lengths)))


def setdiff1d(ar1, ar2, assume_unique=False, *, size=None, fill_value=None):
    """The distinct elements of ``ar1`` that are not in ``ar2``: sorted, or in ``ar1``'s order
    when ``assume_unique``; of ``ar1``'s dtype (as JAX's: ``ar2`` only tests membership)."""
    ar1, ar2 = ravel(as_array(ar1)), ravel(as_array(ar2))
    values, valid, _ = _distinct(ar1, assume_unique)
    keep = logical_and(valid, isin(values, ar2, invert=True))
    return compact(values, keep, size, fill_value, "setdiff1d")


def setxor1d(ar1, ar2, assume_unique=False, *, size=None, fill_value=None):
    """The sorted elements found in exactly one of the arrays."""
    ar1, ar2 = promote(ravel(as_array(ar1)), ravel(as_array(ar2)))
    values1, valid1, _ = _distinct(ar1, assume_unique)
    values2, valid2, _ = _distinct(ar2, assume_unique)
    # as JAX's (and numpy's): the elements of both, sorted, kept where unlike both neighbours,
    # so a value found twice in one array is dropped too when it was assumed unique
    valid = concatenate([valid1, valid2])
    invalid, ordered = sort_operands([logical_not(valid),
                                      concatenate([values1, values2])], 0, num_keys=2)
    keep = logical_not(invalid)
    if shape_of(ordered)[0] > 1:
        unlike = logical_not(equal(ordered[1:], ordered[:-1]))      # (NaN is unlike NaN)
        before = concatenate([ones((1,), bool), unlike])
        after = concatenate([logical_or(unlike, invalid[1:]), ones((1,), bool)])
        keep = logical_and(keep, logical_and(before, after))
    result = compact(ordered, keep, size, fill_value, "setxor1d")
    if fill_value is None and size is not None and int(size) > 0:
        # JAX's default padding: the smallest element found (NaN if one is), else 0
        found = arange(int(size)) < sum(keep)
        result = where(found, result, amax(result))
        result = where(found, result, amin(result))
    return result
