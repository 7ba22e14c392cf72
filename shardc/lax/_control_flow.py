"""``shardc.lax``'s control flow: ``cond``, ``switch``, ``while_loop``, ``fori_loop`` and
``scan`` (the compiler's), and ``map`` and ``associative_scan`` built on them."""
from __future__ import annotations

import numpy as np

from compiler import tree
from compiler.control_flow import cond, fori_loop, scan, switch, while_loop
import shardc.numpy as jnp
from shardc.batching_api import vmap
from shardc.lax._shapes import array_operand, checked_axis, pad, slice_along
from shardc.numpy._core import typed

__all__ = ["cond", "fori_loop", "scan", "switch", "while_loop", "associative_scan", "map"]


# --- associative_scan ------------------------------------------------------------------------

def _interleave(evens, odds, axis):
    """``[e0, o0, e1, o1, ...]`` along ``axis``; ``evens`` has as many items or one more.
    As JAX builds it: each spread by zero padding, then added (so a -0 comes out +0)."""
    longer = evens.shape[axis] > odds.shape[axis]
    spread = []
    for x, config in ((evens, (0, 0 if longer else 1, 1)), (odds, (1, 1 if longer else 0, 1))):
        config_per_dim = [(0, 0, 0)] * x.ndim
        config_per_dim[axis] = config
        spread.append(pad(x, np.zeros((), x.dtype)[()], config_per_dim))
    merged = (jnp.logical_or if evens.dtype == np.bool_ else jnp.add)(*spread)
    # typed, as JAX's (which pads both halves with a constant typed like an array)
    return typed(merged)


def associative_scan(fn, elems, reverse=False, axis=0):
    """Inclusive scan of ``elems`` (an array or a pytree of arrays of one length along ``axis``)
    with an associative ``fn``, in ``O(log n)`` steps of ``fn`` on whole slices.

    ``fn(a, b)`` takes and returns pytrees like ``elems`` and must act elementwise along
    ``axis`` (as JAX requires).

    >>> lax.associative_scan(jnp.add, jnp.arange(5))      # [0, 1, 3, 6, 10]
    """
    if not callable(fn):
        raise TypeError("lax.associative_scan: fn argument should be callable.")
    leaves, treedef = tree.tree_flatten(elems)
    leaves = [array_operand(x) for x in leaves]
    if not leaves:
        return elems
    axis = checked_axis(axis, leaves[0].ndim)
    lengths = {x.shape[axis] for x in leaves}
    if len(lengths) != 1:
        raise ValueError(f"associative_scan: every leaf must have one length along axis {axis}, "
                         f"got {sorted(lengths)}")
    if reverse:
        leaves = [jnp.flip(x, axis) for x in leaves]

    def combine(a, b):
        out = fn(tree.tree_unflatten(treedef, a), tree.tree_unflatten(treedef, b))
        return [array_operand(x) for x in tree.tree_leaves(out)]

    def scan_leaves(xs):
        n = xs[0].shape[axis]
        if n < 2:
            return xs
        # combine neighbours, scan the half-length result, then fill in the even positions
        pairs = combine([slice_along(x, 0, n - 1, 2, axis) for x in xs],
                        [slice_along(x, 1, n, 2, axis) for x in xs])
        odds = scan_leaves(pairs)
        if n % 2 == 0:
            evens = combine([slice_along(x, 0, -1, 1, axis) for x in odds],
                            [slice_along(x, 2, n, 2, axis) for x in xs])
        else:
            evens = combine(odds, [slice_along(x, 2, n, 2, axis) for x in xs])
        evens = [jnp.concatenate([slice_along(x, 0, 1, 1, axis), e], axis=axis)
                 for x, e in zip(xs, evens)]
        return [_interleave(e, o, axis) for e, o in zip(evens, odds)]

    out = scan_leaves(leaves)
    if reverse:
        out = [jnp.flip(x, axis) for x in out]
    return tree.tree_unflatten(treedef, out)


# --- map -------------------------------------------------------------------------------------

def map(f, xs, *, batch_size=None):
    """``f`` applied to each slice of ``xs`` (a pytree) along its leading axis, one after the
    other (a ``scan``); with ``batch_size``, ``vmap`` over batches of that many slices, and
    the remainder after.

    >>> lax.map(lambda row: row.sum(), jnp.ones((3, 4)))      # [4, 4, 4]
    """
    if batch_size is None:
        return scan(lambda carry, x: (carry, f(x)), None, xs)[1]
    leaves, treedef = tree.tree_flatten(xs)
    n = leaves[0].shape[0]
    batch_size = int(batch_size)
    if batch_size == 0:                     # one batch of everything: a vmap (JAX's)
        return vmap(f)(xs)
    if batch_size < 0:
        raise ValueError(f"lax.map: batch_size must be a non-negative int, got {batch_size}")
    full_batches, rest = divmod(n, batch_size)
    outs = []
    if full_batches:
        batched = [jnp.reshape(x[:full_batches * batch_size],
                               (full_batches, batch_size) + x.shape[1:]) for x in leaves]
        out = map(vmap(f), tree.tree_unflatten(treedef, batched))
        outs.append(tree.tree_map(lambda y: jnp.reshape(y, (-1,) + y.shape[2:]), out))
    if rest:
        outs.append(vmap(f)(tree.tree_unflatten(treedef,
                                                [x[full_batches * batch_size:] for x in leaves])))
    if not outs:            # no slices: the map of a zero-length batch, as JAX's
        return vmap(f)(xs)
    if len(outs) == 1:
        return outs[0]
    return tree.tree_map(lambda a, b: jnp.concatenate([a, b]), outs[0], outs[1])
