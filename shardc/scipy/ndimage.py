"""``shardc.scipy.ndimage`` (``jax.scipy.ndimage``): ``map_coordinates``, the values of an
N-dimensional array at fractional coordinates, by nearest-neighbour (``order=0``) or linear
(``order=1``) interpolation.

Each output point is a weighted sum of the input at the integer points around it: one point
per dimension for ``order=0`` (the coordinate rounded half away from zero), two for
``order=1`` (its floor and the next one up, weighted by closeness). Points outside the input
are found as ``mode`` says: ``'constant'`` reads ``cval`` there, ``'nearest'`` the nearest
edge point, ``'wrap'`` wraps around (period ``size``), ``'mirror'`` reflects about the edge
points (period ``2 * (size - 1)``) and ``'reflect'`` about the edges (period ``2 * size``).
As JAX's, ``'constant'`` and ``'wrap'`` are scipy's ``'grid-constant'`` and ``'grid-wrap'``.

The weights differentiate with respect to the coordinates and the input, and an integer
input's result is rounded back to its dtype.

>>> jax.scipy.ndimage.map_coordinates(jnp.arange(4.0), [jnp.array([0.5, 2.25])], order=1)
Array([0.5 , 2.25], dtype=float32)
"""
from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Sequence

import numpy as np

import shardc.lax as lax
import shardc.numpy as jnp
from shardc._transforms import jit

__all__ = ["map_coordinates"]


def _mirrored(index, size: int):
    """``index`` folded into ``[0, size)`` by reflecting about the edge points 0 and
    ``size - 1``: a triangle wave of period ``2 * (size - 1)``."""
    half_period = size - 1
    return jnp.abs((index + half_period) % (2 * half_period) - half_period)


def _reflected(index, size: int):
    """``index`` folded into ``[0, size)`` by reflecting about the edges -1/2 and
    ``size - 1/2`` (the edge points repeat): ``_mirrored`` on the doubled grid."""
    return jnp.floor_divide(_mirrored(2 * index + 1, 2 * size + 1) - 1, 2)


# How each mode maps an integer index that may fall outside [0, size) to one inside (for
# 'constant' the index is kept; the points outside read cval instead).
_INDEX_RULES = {
    "constant": lambda index, size: index,
    "nearest": lambda index, size: jnp.clip(index, 0, size - 1),
    "wrap": lambda index, size: index % size,
    "mirror": _mirrored,
    "reflect": _reflected,
}


def _rounded(a):
    """``a`` rounded half away from zero (integers as they are)."""
    return a if jnp.issubdtype(a.dtype, np.integer) else lax.round(a)


def _nearest_nodes(coordinate):
    """``[(index, weight)]`` of order 0: the rounded coordinate, with weight one of the
    coordinate's dtype."""
    return [(_rounded(coordinate).astype(np.int32), coordinate.dtype.type(1))]


def _linear_nodes(coordinate):
    """``[(index, weight), (index + 1, weight)]`` of order 1: the points either side of the
    coordinate, each weighted by its closeness."""
    lower = jnp.floor(coordinate)
    upper_weight = coordinate - lower
    index = lower.astype(np.int32)
    return [(index, 1 - upper_weight), (index + 1, upper_weight)]


_NODES = {0: _nearest_nodes, 1: _linear_nodes}


def _map_coordinates(input, coordinates, order: int, mode: str, cval):
    input = jnp.asarray(input)
    coordinates = [jnp.asarray(c) for c in coordinates]
    cval = jnp.asarray(cval, input.dtype)
    if len(coordinates) != input.ndim:
        raise ValueError(f"coordinates must be a sequence of length input.ndim, but "
                         f"{len(coordinates)} != {input.ndim}")
    index_rule = _INDEX_RULES.get(mode)
    if index_rule is None:
        raise NotImplementedError(
            f"jax.scipy.ndimage.map_coordinates does not yet support mode {mode}. "
            f"Currently supported modes are {set(_INDEX_RULES)}.")
    nodes_of = _NODES.get(order)
    if nodes_of is None:
        raise NotImplementedError("jax.scipy.ndimage.map_coordinates currently requires "
                                  "order<=1")
    # per dimension: [(index inside the input, whether it was inside before, weight)]
    per_dimension = []
    for coordinate, size in zip(coordinates, input.shape):
        nodes = []
        for index, weight in nodes_of(coordinate):
            inside = (0 <= index) & (index < size) if mode == "constant" else None
            nodes.append((index_rule(index, size), inside, weight))
        per_dimension.append(nodes)
    terms = []
    for corner in itertools.product(*per_dimension):
        indices, insides, weights = zip(*corner)
        value = input[indices]
        if mode == "constant":
            value = jnp.where(functools.reduce(operator.and_, insides), value, cval)
        terms.append(functools.reduce(operator.mul, weights) * value)
    result = functools.reduce(operator.add, terms)
    if jnp.issubdtype(input.dtype, np.integer):
        result = _rounded(result)
    return result.astype(input.dtype)


_map_coordinates_jit = jit(_map_coordinates, static_argnums=(2, 3, 4))


def map_coordinates(input, coordinates: Sequence, order: int, mode: str = "constant",
                    cval=0.0):
    """``input`` interpolated at ``coordinates`` (one array per dimension of ``input``, all
    broadcasting to the result's shape) by nearest neighbour (``order=0``) or linearly
    (``order=1``), points outside the input found as ``mode`` says: ``'constant'`` (``cval``,
    a hashable scalar), ``'nearest'``, ``'wrap'``, ``'mirror'`` or ``'reflect'``. The result
    has ``input``'s dtype (an integer input's values rounded half away from zero).

    >>> image = jnp.arange(12.0).reshape(3, 4)
    >>> jax.scipy.ndimage.map_coordinates(image, [jnp.array([0.5, 1.5]),
    ...                                           jnp.array([1.5, 2.5])], order=1)
    Array([3.5, 8.5], dtype=float32)
    """
    return _map_coordinates_jit(input, coordinates, order, mode, cval)
