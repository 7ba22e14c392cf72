"""Collectives with ``axis_index_groups``: each group of indices along the mesh axes reduces
or gathers on its own.

They are built from collectives over the whole axis, so every backend, autodiff and vmap
handle them with no rule of their own: the members' blocks are gathered, and each device keeps
those of its own group (a select, never an arithmetic mask, so a non-member's inf or nan never
reaches the result). The result varies over the axes: groups hold different values.

    psum over 'i' with axis_index_groups=[[0, 1], [2, 3]]:
        blocks  [1] [2] [3] [4]   ->   [3] [3] [7] [7]
"""
from __future__ import annotations

import numpy as np

from compiler.tracing import bind
from ir import dtypes as _dt
from ir import primitives as p
from ir import collectives as coll
import shardc.numpy as jnp


def check_groups(name: str, groups, size: int, *, equal_sizes: bool) -> tuple:
    """``groups`` as a tuple of tuples, checked to partition ``range(size)``."""
    groups = tuple(tuple(int(i) for i in g) for g in groups)
    members = sorted(i for g in groups for i in g)
    if members != list(range(size)):
        raise ValueError(f"{name}: axis_index_groups must cover all indices exactly once: the "
                         f"groups {[list(g) for g in groups]} do not partition the {size} "
                         "indices along the axes")
    if equal_sizes and len({len(g) for g in groups}) > 1:
        raise ValueError(f"{name}: axis_index_groups must all be the same size, got "
                         f"{[list(g) for g in groups]}")
    return groups


def _own_row(table: np.ndarray, axes):
    """Row ``axis_index(axes)`` of a constant table: this device's entry."""
    me = bind(coll.axis_index_p, mesh_axes=axes)
    return jnp.take(jnp.asarray(table), me, axis=0)


def _gather_all(leaf, axes, size):
    return bind(coll.all_gather_p, leaf, mesh_axes=axes, gather_axis=0, tiled=False,
                axis_size=size)


def reduce(name: str, leaf, axes: tuple, groups: tuple, size: int):
    """psum, pmean, pmax or pmin of ``leaf`` within each group."""
    same_group = np.zeros((size, size), bool)
    for g in groups:
        for i in g:
            same_group[i, list(g)] = True
    leaf = jnp.asarray(leaf)
    gathered = _gather_all(leaf, axes, size)
    mine = jnp.reshape(_own_row(same_group, axes), (size,) + (1,) * leaf.ndim)
    if name in ("psum", "pmean"):
        total = jnp.sum(jnp.where(mine, gathered, jnp.zeros((), leaf.dtype)), axis=0)
        if name == "psum":
            return jnp.astype(total, leaf.dtype)
        count = _own_row(same_group.sum(axis=1).astype(np.int32), axes)
        return jnp.divide(total, count)
    neutral = _lowest(leaf.dtype) if name == "pmax" else _highest(leaf.dtype)
    picked = jnp.where(mine, gathered, jnp.full((), neutral, leaf.dtype))
    return jnp.max(picked, axis=0) if name == "pmax" else jnp.min(picked, axis=0)


def _lowest(dtype):
    if _dt.is_float(dtype):
        return -np.inf
    return False if _dt.is_bool(dtype) else np.iinfo(dtype).min


def _highest(dtype):
    if _dt.is_float(dtype):
        return np.inf
    return True if _dt.is_bool(dtype) else np.iinfo(dtype).max


def all_gather(leaf, axes: tuple, groups: tuple, size: int, dim: int, tiled: bool):
    """The blocks of this device's group, in the group's order, stacked along ``dim``
    (concatenated when ``tiled``)."""
    stacked = jnp.moveaxis(_group_blocks(leaf, axes, groups, size), 0, dim)
    return _merged(stacked, dim) if tiled else stacked


def _group_blocks(leaf, axes, groups, size):
    """The blocks of this device's group's members, in the group's order, stacked on a new
    leading dimension (gathered over the whole axis, then picked)."""
    position = np.zeros((size, len(groups[0])), np.int32)
    for g in groups:
        for i in g:
            position[i] = g
    gathered = _gather_all(jnp.asarray(leaf), axes, size)
    return jnp.take(gathered, _own_row(position, axes), axis=0)


def _merged(x, dim: int):
    """``x`` with dimensions ``dim`` and ``dim + 1`` joined into one."""
    shape = jnp.shape(x)
    return jnp.reshape(x, shape[:dim] + (shape[dim] * shape[dim + 1],) + shape[dim + 2:])


def _rank_in_group(groups: tuple, size: int) -> np.ndarray:
    rank = np.zeros(size, np.int32)
    for g in groups:
        for r, i in enumerate(g):
            rank[i] = r
    return rank


def _own_chunk(x, axes, groups, size, dim: int, chunk: int):
    """This device's chunk of ``x`` along ``dim``: the one at its rank within its group."""
    rank = _own_row(_rank_in_group(groups, size), axes)
    return jnp.take(x, rank * chunk + jnp.arange(chunk, dtype=np.int32), axis=dim)


def psum_scatter(leaf, axes: tuple, groups: tuple, size: int, dim: int, tiled: bool):
    """The group's sum, of which member r keeps chunk r along ``dim`` (the chunk's dimension
    dropped when not ``tiled``)."""
    total = reduce("psum", leaf, axes, groups, size)
    n = jnp.shape(total)[dim]
    piece = _own_chunk(total, axes, groups, size, dim, n // len(groups[0]) if tiled else 1)
    return piece if tiled else jnp.squeeze(piece, dim)


def all_to_all(leaf, axes: tuple, groups: tuple, size: int, split: int, concat: int,
               tiled: bool):
    """Member r of each group gets chunk r (along ``split``) of every member's block, joined
    along ``concat`` in the group's order (untiled: ``split`` dropped, the members on a new
    ``concat`` dimension)."""
    n = jnp.shape(leaf)[split]
    pieces = _own_chunk(_group_blocks(leaf, axes, groups, size), axes, groups, size,
                        split + 1, n // len(groups[0]) if tiled else 1)
    if not tiled:
        return jnp.moveaxis(jnp.squeeze(pieces, split + 1), 0, concat)
    return _merged(jnp.moveaxis(pieces, 0, concat), concat)
