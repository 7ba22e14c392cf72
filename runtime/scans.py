"""Cumulative reductions computed in the order XLA's CPU backend computes them, so floating
point results round exactly as JAX's do.

JAX lowers ``cumsum``/``cumprod``/``cummax``/``cummin`` to one reduce-window whose window spans
the whole scanned dimension, and XLA rewrites a window longer than ``BASE`` into blocks:

    x (padded with the identity at the end to a multiple of BASE)  ->  rows of BASE
    inner[r, j] = the fold of row r's window for j        (one pass over BASE columns)
    totals[r]   = row r's whole fold
    offsets     = the exclusive scan of the totals        (the same rewrite, recursively)
    out[r, j]   = op(inner[r, j], offsets[r])

A window no longer than BASE is folded from the identity, one element after another in index
order; a reverse window (each output folds itself and what follows) also folds in index
order. Every step is one numpy operation over all rows, so the work is O(n) per level and
there are log_BASE(n) levels.
"""
from __future__ import annotations

import numpy as np

BASE = 16   # the block length of XLA's CPU reduce-window rewrite


def cumulative(ufunc, x, axis: int, reverse: bool, identity) -> np.ndarray:
    """``ufunc`` accumulated along ``axis`` of ``x`` in ``x``'s dtype (each entry combining
    itself and the entries after it when ``reverse``), starting from ``identity``.

    >>> cumulative(np.add, np.ones(3, np.float32), 0, False, 0)    # [1, 2, 3]
    """
    x = np.asarray(x)
    if x.shape[axis] == 0:
        return x.copy()
    identity = np.asarray(identity, x.dtype)
    if axis in (-1, x.ndim - 1):
        return np.ascontiguousarray(_inclusive(ufunc, x, identity, reverse))
    moved = np.moveaxis(x, axis, -1)
    return np.ascontiguousarray(np.moveaxis(_inclusive(ufunc, moved, identity, reverse), -1, axis))


def _fold_windows(ufunc, x, identity, reverse):
    """Each entry's window along the last axis folded from ``identity`` in index order: the
    entries up to it, or (``reverse``) from it to the end."""
    if not reverse:
        # one accumulate from the identity (numpy rounds each step to the dtype, as XLA)
        edge = np.full(x.shape[:-1] + (1,), identity, x.dtype)
        return ufunc.accumulate(np.concatenate([edge, x], -1), axis=-1)[..., 1:]
    columns = np.ascontiguousarray(np.moveaxis(x, -1, 0))    # each step reads one column
    out = np.full(columns.shape, identity, x.dtype)   # one accumulator per window start
    for k, column in enumerate(columns):   # column k joins the windows starting up to k
        ufunc(out[:k + 1], column, out=out[:k + 1])
    return np.moveaxis(out, 0, -1)


def _inclusive(ufunc, x, identity, reverse):
    n = x.shape[-1]
    if n <= BASE:
        return _fold_windows(ufunc, x, identity, reverse)
    rows = -(-n // BASE)
    pad = np.full(x.shape[:-1] + (rows * BASE - n,), identity, x.dtype)
    blocks = np.concatenate([x, pad], -1).reshape(x.shape[:-1] + (rows, BASE))
    inner = _fold_windows(ufunc, blocks, identity, reverse)
    totals = inner[..., 0] if reverse else inner[..., -1]
    offsets = _exclusive(ufunc, totals, identity, reverse)
    out = ufunc(inner, offsets[..., None])
    return out.reshape(x.shape[:-1] + (rows * BASE,))[..., :n]


def _exclusive(ufunc, x, identity, reverse):
    """Each entry's fold of the entries before it (after it, when ``reverse``), the identity
    for the first (last)."""
    edge = np.full(x.shape[:-1] + (1,), identity, x.dtype)
    if x.shape[-1] <= BASE:    # a window one longer than x, its extra place the identity
        if reverse:
            return _fold_windows(ufunc, np.concatenate([x, edge], -1), identity, True)[..., 1:]
        return _fold_windows(ufunc, np.concatenate([edge, x], -1), identity, False)[..., :-1]
    inclusive = _inclusive(ufunc, x, identity, reverse)
    if reverse:
        return np.concatenate([inclusive[..., 1:], edge], -1)
    return np.concatenate([edge, inclusive[..., :-1]], -1)
