"""``mode``, ``rankdata`` and ``sem``: summaries of samples along an axis."""
from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np

import shardc.lax as lax
import shardc.numpy as jnp
from shardc.dtypes import canonicalize_dtype
from shardc.numpy._arraylike import check_arraylike
from shardc.numpy._core import weakly_typed_like
from shardc.scipy.stats._util import promote_args_inexact

__all__ = ["ModeResult", "mode", "rankdata", "sem"]

_NAN_POLICIES = ("propagate", "omit", "raise")
_RANK_METHODS = ("average", "min", "max", "dense", "ordinal")


class ModeResult(NamedTuple):
    """``mode``'s result: the modal values and how often each occurs."""
    mode: jnp.ndarray
    count: jnp.ndarray


def _check_nan_policy(nan_policy, name):
    """Only ``'propagate'`` is supported: a NaN cannot be found while tracing."""
    if nan_policy not in _NAN_POLICIES:
        raise ValueError(f"Illegal nan_policy value {nan_policy!r}; expected one of "
                         "{'propagate', 'omit', 'raise'}")
    if nan_policy == "omit":
        raise NotImplementedError(f"Logic for `nan_policy` of {nan_policy} is not implemented")
    if nan_policy == "raise":
        raise NotImplementedError(
            f"In order to best JIT compile `{name}`, we cannot know whether `x` contains nans. "
            f"Please check if nans exist in `x` outside of the `{name}` function.")


def _canonical_axis(axis, ndim):
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of bounds for array of dimension {ndim}")
    return axis % ndim


def _column_modes(columns):
    """The most common value of each column of ``columns`` (the smallest among ties; NaNs
    count as one value, above every other) and its count: from the lengths of the runs of
    equal values in the sorted columns."""
    n = columns.shape[0]
    if n == 0:
        float_dtype = canonicalize_dtype(np.float64)
        return (jnp.full(columns.shape[1:], np.nan, float_dtype),
                jnp.zeros(columns.shape[1:], float_dtype))
    ordered = jnp.sort(columns, axis=0)
    same = (ordered[1:] == ordered[:-1]) | (jnp.isnan(ordered[1:]) & jnp.isnan(ordered[:-1]))
    edge = jnp.ones((1,) + columns.shape[1:], bool)
    starts = jnp.concatenate([edge, ~same], axis=0)
    ends = jnp.concatenate([~same, edge], axis=0)
    index = jnp.broadcast_to(jnp.arange(n).reshape((n,) + (1,) * (columns.ndim - 1)),
                             columns.shape)
    run_start = lax.cummax(jnp.where(starts, index, 0), axis=0)
    run_end = lax.cummin(jnp.where(ends, index, n - 1), axis=0, reverse=True)
    counts = run_end - run_start + 1
    best = jnp.argmax(counts, axis=0)
    modes = jnp.take_along_axis(ordered, best[None], axis=0)[0]
    return modes, jnp.max(counts, axis=0)


def mode(a, axis=0, nan_policy="propagate", keepdims=False):
    """The most common value along ``axis`` (the smallest among ties; ``None``: of the
    flattened array) and how often it occurs, as ``ModeResult(mode, count)``. Along an empty
    axis the mode is NaN and the count 0 (both floating). Only ``nan_policy='propagate'``.

    >>> mode(jnp.array([2, 4, 1, 1, 3, 4, 4]))      # ModeResult(mode=4, count=3)
    """
    check_arraylike("mode", a, 0)
    x = jnp.atleast_1d(a)
    _check_nan_policy(nan_policy, "mode")
    if axis is None:
        shape = (1,) * x.ndim if keepdims else ()
        x, axis = jnp.ravel(x), 0
    else:
        axis = _canonical_axis(axis, x.ndim)
        shape = tuple(1 if i == axis else s for i, s in enumerate(x.shape)
                      if keepdims or i != axis)
    modes, counts = _column_modes(jnp.moveaxis(x, axis, 0))
    modes = weakly_typed_like(modes, a)           # (a Python number's mode is, as JAX's)
    return ModeResult(jnp.reshape(modes, shape), jnp.reshape(counts, shape))


def _ranks(a, method):
    """The ranks (from 1) of the entries of the one-dimensional ``a``, ties resolved by
    ``method``; all NaN if ``a`` holds a NaN."""
    float_dtype = canonicalize_dtype(np.float64)
    n = a.shape[0]
    ordered, order = lax.sort_key_val(a, jnp.arange(n))
    position = jnp.zeros_like(order).at[order].set(jnp.arange(n, dtype=order.dtype))
    if method == "ordinal":
        ranks = (position + 1).astype(float_dtype)
    else:
        # runs of equal values in sorted order: ``dense`` numbers them from 1, ``starts``
        # holds where each begins (and n after the last)
        new_run = jnp.concatenate([jnp.ones(1, bool), ordered[1:] != ordered[:-1]])
        dense = jnp.cumsum(new_run)[position]
        starts = jnp.nonzero(new_run, size=n + 1, fill_value=new_run.size)[0]
        starts = starts.astype(float_dtype)
        ranks = {"dense": lambda: dense.astype(float_dtype),
                 "max": lambda: starts[dense],
                 "min": lambda: starts[dense - 1] + 1,
                 "average": lambda: 0.5 * (starts[dense] + starts[dense - 1] + 1)}[method]()
    return jnp.where(jnp.any(jnp.isnan(a)), jnp.full_like(ranks, np.nan), ranks)


def rankdata(a, method="average", *, axis=None, nan_policy="propagate"):
    """The ranks of the data, from 1, along ``axis`` (``None``: of the flattened array), as
    floats; ties get the ``method``'s rank: ``'average'``, ``'min'``, ``'max'``, ``'dense'``
    (consecutive ranks of distinct values) or ``'ordinal'`` (in order of appearance). A slice
    holding a NaN ranks as NaN. Only ``nan_policy='propagate'``.

    >>> rankdata(jnp.array([1, 3, 2, 3]))            # [1, 3.5, 2, 3.5]
    """
    check_arraylike("rankdata", a, 0)
    _check_nan_policy(nan_policy, "rankdata")
    if method not in _RANK_METHODS:
        raise ValueError(f"unknown method '{method}'")
    a = jnp.asarray(a)
    if axis is not None:
        return jnp.apply_along_axis(functools.partial(_ranks, method=method), axis, a)
    return _ranks(jnp.ravel(a), method)


def sem(a, axis=0, ddof=1, nan_policy="propagate", *, keepdims=False):
    """The standard error of the mean along ``axis`` (``None``: of every entry): the standard
    deviation with ``ddof`` over the square root of the count. ``nan_policy='omit'`` leaves
    NaNs out of both.

    >>> sem(jnp.array([1., 2., 4.]))                  # 0.8819
    """
    (b,) = promote_args_inexact("sem", a)
    if nan_policy == "propagate":
        size = b.size if axis is None else b.shape[axis]
        return b.std(axis, ddof=ddof, keepdims=keepdims) / jnp.asarray(math.sqrt(size), b.dtype)
    if nan_policy == "omit":
        count = jnp.sum(~jnp.isnan(b), axis, keepdims=keepdims)
        return (jnp.nanstd(b, axis, ddof=ddof, keepdims=keepdims)
                / jnp.sqrt(count).astype(b.dtype))
    raise ValueError(f"{nan_policy} is not supported")
