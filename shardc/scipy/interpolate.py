"""``shardc.scipy.interpolate`` (``jax.scipy.interpolate``): interpolation on a regular grid.

``RegularGridInterpolator`` is scipy's, for the ``'linear'`` and ``'nearest'`` methods: the
grid's axes must be strictly increasing (not checked, as in JAX: a decreasing axis gives wrong
values silently), points outside the grid take ``fill_value`` (``None``: extrapolated), and
``bounds_error=True`` is refused, since a traced point cannot raise. The interpolator is a
pytree (children: the grid, the values and the fill value; static: the method and
``bounds_error``), so it can be passed through ``jit`` and ``vmap``.

>>> grid = (jnp.array([1., 2., 3.]), jnp.array([4., 5., 6.]))
>>> values = jnp.array([[10., 20., 30.], [40., 50., 60.], [70., 80., 90.]])
>>> RegularGridInterpolator(grid, values)(jnp.array([[1.5, 4.5], [2.2, 5.8]]))
Array([30., 64.], dtype=float32)
"""
from __future__ import annotations

import itertools

import numpy as np

import shardc.numpy as jnp
from ir.dtypes import to_inexact
from shardc.numpy._arraylike import check_arraylike
from shardc.tree_util import register_pytree_node

__all__ = ["RegularGridInterpolator"]

_METHODS = ("linear", "nearest")


def _check_method(method) -> None:
    if method not in _METHODS:
        raise ValueError(f"method {method!r} is not defined")


def _check_arraylikes(name: str, *values) -> None:
    for position, value in enumerate(values):
        check_arraylike(name, value, position)


def _sample_points(xi, ndim: int):
    """``xi`` as an array whose last axis holds the coordinates: a tuple of coordinate arrays
    is broadcast and stacked (in the default float dtype), a 1-D array holds whole points."""
    if isinstance(xi, tuple) and len(xi) == 1:
        xi = xi[0]
    if isinstance(xi, tuple):
        coordinates = jnp.broadcast_arrays(*xi)
        float_dtype = jnp.result_type(float)
        return jnp.stack([c.astype(float_dtype) for c in coordinates], axis=-1)
    check_arraylike("_ndim_coords_from_arrays", xi, 0)
    xi = jnp.asarray(xi)
    return xi.reshape(-1, ndim) if xi.ndim == 1 else xi


class RegularGridInterpolator:
    """Interpolation of ``values`` given on the rectangular grid ``points`` (one strictly
    increasing 1-D array per leading axis of ``values``; trailing axes are carried along).

    Args:
      points: a sequence of N 1-D arrays, the grid's coordinates along each axis.
      values: an array whose first N axes match the grid (promoted to an inexact dtype).
      method: ``'linear'`` or ``'nearest'``.
      bounds_error: must be False (JAX cannot raise on traced points).
      fill_value: the value of points outside the grid; ``None`` extrapolates.

    Calling it on ``xi`` (an array ``(..., N)``, or a tuple of N coordinate arrays) gives an
    array ``xi.shape[:-1] + values.shape[N:]``.

    >>> RegularGridInterpolator((jnp.arange(3.),), jnp.array([0., 10., 40.]))(
    ...     jnp.array([0.5, 1.5, 5.]))
    Array([ 5., 25., nan], dtype=float32)
    """

    def __init__(self, points, values, method="linear", bounds_error=False,
                 fill_value=np.nan):
        _check_method(method)
        self.method = method
        self.bounds_error = bounds_error
        if bounds_error:
            raise NotImplementedError("`bounds_error` takes no effect under JIT")
        check_arraylike("RegularGridInterpolator", values, 0)
        if len(points) > values.ndim:
            raise ValueError(f"there are {len(points)} point arrays, but values has "
                             f"{values.ndim} dimensions")
        values = jnp.asarray(values)
        values = values.astype(to_inexact(jnp.result_type(values)))
        if fill_value is not None:
            check_arraylike("RegularGridInterpolator", fill_value, 0)
            fill_value = jnp.asarray(fill_value)
            if not jnp.can_cast(fill_value.dtype, values.dtype, casting="same_kind"):
                raise ValueError("fill_value must be either 'None' or of a type compatible "
                                 "with values")
        self.fill_value = fill_value
        _check_arraylikes("RegularGridInterpolator", *points)
        self.grid = tuple(jnp.asarray(p) for p in points)
        self.values = values

    def __call__(self, xi, method=None):
        """The interpolated values at ``xi`` (by ``method``, default the interpolator's)."""
        method = self.method if method is None else method
        _check_method(method)
        ndim = len(self.grid)
        xi = _sample_points(xi, ndim)
        if xi.shape[-1] != ndim:
            raise ValueError(f"the requested sample points xi have dimension {xi.shape[1]}, "
                             f"but this RegularGridInterpolator has dimension {ndim}")
        batch_shape = xi.shape[:-1]
        xi = xi.reshape(-1, ndim)
        cells, fractions = self._locate(xi)
        if method == "linear":
            result = self._linear(cells, fractions)
        else:
            result = self._nearest(cells, fractions)
        if self.fill_value is not None:
            outside = self._outside(xi)
            result = jnp.where(outside.reshape(outside.shape + (1,) * (result.ndim - 1)),
                               self.fill_value, result)
        return result.reshape(batch_shape + self.values.shape[ndim:])

    def _locate(self, xi):
        """Per axis, the index of each point's cell (its lower corner; points outside use
        the end cell) and the point's fractional position in it (outside [0, 1] there)."""
        cells, fractions = [], []
        for axis, coordinates in enumerate(self.grid):
            x = xi[:, axis]
            cell = jnp.clip(jnp.searchsorted(coordinates, x) - 1, 0, coordinates.size - 2)
            lower, upper = coordinates[cell], coordinates[cell + 1]
            cells.append(cell)
            fractions.append((x - lower) / (upper - lower))
        return cells, fractions

    def _outside(self, xi):
        """Whether each point lies outside the grid along some axis."""
        outside = jnp.zeros(xi.shape[:1], dtype=bool)
        for axis, coordinates in enumerate(self.grid):
            x = xi[:, axis]
            outside = outside | (x < coordinates[0]) | (x > coordinates[-1])
        return outside

    def _linear(self, cells, fractions):
        """The sum over the cell's 2**N corners of the corner value times its weight (the
        product over axes of ``1 - t`` at the lower side and ``t`` at the upper)."""
        trailing = (None,) * (self.values.ndim - len(cells))
        total = None
        for corner in itertools.product((0, 1), repeat=len(cells)):
            weight = None
            for upper, t in zip(corner, fractions):
                factor = t if upper else 1 - t
                weight = factor if weight is None else weight * factor
            index = tuple(cell + upper for cell, upper in zip(cells, corner))
            term = self.values[index] * weight[(slice(None),) + trailing]
            total = term if total is None else total + term
        return total

    def _nearest(self, cells, fractions):
        """The value at the nearer corner along each axis (the lower one at a tie)."""
        index = tuple(jnp.where(t <= 0.5, cell, cell + 1) for cell, t in zip(cells, fractions))
        return self.values[index]


def _flatten_interpolator(interpolator: RegularGridInterpolator):
    return ((interpolator.grid, interpolator.values, interpolator.fill_value),
            (interpolator.method, interpolator.bounds_error))


def _unflatten_interpolator(static, children) -> RegularGridInterpolator:
    grid, values, fill_value = children
    method, bounds_error = static
    return RegularGridInterpolator(grid, values, method, bounds_error, fill_value)


register_pytree_node(RegularGridInterpolator, _flatten_interpolator, _unflatten_interpolator)
