"""numpy's index objects under ``shardc.numpy``.

``mgrid`` and ``ogrid`` build grids from static slices; ``r_`` and ``c_`` join arrays (and
slices, read as ranges) along the first and the last axis, with numpy's directive strings;
``s_`` and ``index_exp`` are numpy's own (they only build index tuples).
"""
from __future__ import annotations

import numpy as np

from compiler.tracing import ConcretizationTypeError, Tracer, value_if_known
from shardc.numpy._core import array, concatenate, expand_dims, promote, stack
from shardc.numpy._creation import arange, linspace
from shardc.numpy._index_routines import meshgrid
from shardc.numpy._manipulation import transpose

__all__ = ["index_exp", "s_", "mgrid", "ogrid", "r_", "c_"]


s_, index_exp = np.s_, np.index_exp


def _static(value, what: str):
    """A slice entry as the Python value it must be; JAX's error naming ``what`` if traced."""
    value = value_if_known(value)
    if isinstance(value, Tracer):
        raise ConcretizationTypeError(
            "Abstract tracer value encountered where concrete value is expected: the value of "
            f"the {what} is traced here.")
    return value


def _grid_1d(s: slice, name: str):
    """The 1-D grid of one slice (JAX's): ``arange(start, stop, step)``, or ``|step|``
    points from start to stop (included) when the step is imaginary."""
    start = _static(s.start, f"slice start of jnp.{name}") or 0
    stop = _static(s.stop, f"slice stop of jnp.{name}")
    step = _static(s.step, f"slice step of jnp.{name}") or 1
    if np.iscomplex(step):
        return linspace(start, stop, int(abs(step)))
    return arange(start, stop, step)


class _Grid:
    """``mgrid[...]`` / ``ogrid[...]``: the 1-D grids of the slices, promoted to one dtype,
    as a dense stacked grid (``mgrid``) or a list of open ones (``ogrid``), as JAX's."""

    def __init__(self, sparse: bool, name: str):
        self.sparse, self.name = sparse, name

    def __getitem__(self, key):
        if isinstance(key, slice):
            return _grid_1d(key, self.name)
        grids = [_grid_1d(k, self.name) for k in key]
        grids = promote(*grids) if grids else grids
        if self.sparse:
            return meshgrid(*grids, indexing="ij", sparse=True)
        if not grids:
            return arange(0)
        return stack(meshgrid(*grids, indexing="ij", sparse=False), 0)


mgrid = _Grid(False, "mgrid")
ogrid = _Grid(True, "ogrid")


class _Concatenator:
    """``r_[...]`` / ``c_[...]`` (JAX's ``_AxisConcat``): the pieces (slices read as ranges)
    made at least ``ndmin``-dimensional, a 1-D piece's axis placed by ``trans1d``, joined along
    ``axis``; a leading string ``'axis,ndmin,trans1d'`` changes these, ``'r'`` / ``'c'`` make a
    1-D result a row or a column."""

    def __init__(self, axis: int, ndmin: int, trans1d: int, name: str):
        self.axis, self.ndmin, self.trans1d, self.name = axis, ndmin, trans1d, name

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        params = [self.axis, self.ndmin, self.trans1d, -1]
        if key and isinstance(key[0], str):
            directive, key = key[0], key[1:]
            if directive in ("r", "c"):
                params[-1] = 0 if directive == "r" else 1
            else:
                entries = directive.split(",")
                entries = entries + params[len(entries):] if len(entries) < 4 \
                    else entries[:3] + [params[-1]]
                try:
                    params = [int(v) for v in entries]
                except ValueError as err:
                    raise ValueError(f"could not understand directive {directive!r}") from err
        axis, ndmin, trans1d, matrix = params
        pieces = []
        for item in key:
            if isinstance(item, slice):
                piece, item_ndim = _grid_1d(item, self.name), 0
            elif isinstance(item, str):
                raise ValueError("string directive must be placed at the beginning")
            else:
                piece = array(item, copy=False)
                item_ndim = piece.ndim
            piece = array(piece, copy=False, ndmin=ndmin)
            if trans1d != -1 and ndmin - item_ndim > 0:
                order = tuple(range(ndmin))
                shifts = ndmin - abs(ndmin + trans1d + 1) % ndmin
                piece = transpose(piece, order[shifts:] + order[:shifts])
            pieces.append(piece)
        result = concatenate(tuple(pieces), axis=axis)
        if matrix != -1 and result.ndim == 1:
            result = expand_dims(result, matrix)
        return result

    def __len__(self) -> int:
        return 0


r_ = _Concatenator(axis=0, ndmin=1, trans1d=-1, name="r_")
c_ = _Concatenator(axis=-1, ndmin=2, trans1d=0, name="c_")
