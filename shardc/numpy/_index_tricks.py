"""numpy's index objects under ``shardc.numpy``.

``mgrid`` and ``ogrid`` build grids from static slices; ``r_`` and ``c_`` join arrays (and
slices, read as ranges) along the first and the last axis; ``s_`` and ``index_exp`` are
numpy's own (they only build index tuples).
"""
from __future__ import annotations

import numpy as np

from shardc.numpy._core import as_array, asarray, concatenate, is_array, reshape, shape_of
from shardc.numpy._manipulation import atleast_1d

__all__ = ["index_exp", "s_", "mgrid", "ogrid", "r_", "c_"]


s_, index_exp = np.s_, np.index_exp


def _static_slices(key, name):
    """``key`` itself (one slice or a tuple of them), once each slice is checked static."""
    for k in (key if isinstance(key, tuple) else (key,)):
        if not isinstance(k, slice) or any(is_array(v) for v in (k.start, k.stop, k.step)):
            raise TypeError(f"jnp.{name} takes slices of Python numbers, got {k!r}")
    return key


class _Grid:
    """``mgrid[...]`` / ``ogrid[...]``: numpy's grids of static slices, as arrays of the
    canonical dtypes (int32, float32)."""

    def __init__(self, sparse: bool, name: str):
        self.sparse, self.name = sparse, name

    def __getitem__(self, key):
        grid = np.ogrid if self.sparse else np.mgrid
        values = grid[_static_slices(key, self.name)]
        if isinstance(values, (list, tuple)):
            return [asarray(v) for v in values]
        return asarray(values)


mgrid = _Grid(False, "mgrid")
ogrid = _Grid(True, "ogrid")


def _as_piece(item):
    if isinstance(item, str):
        raise NotImplementedError("jnp.r_/jnp.c_: directive strings are not supported by "
                                  "shardc; use jnp.concatenate")
    if isinstance(item, slice):
        return asarray(np.r_[item])
    return atleast_1d(as_array(item))


class _Concatenator:
    """``r_[...]`` joins along the first axis; ``c_[...]`` makes 1-D pieces columns and joins
    along the last axis."""

    def __init__(self, columns: bool):
        self.columns = columns

    def __getitem__(self, key):
        pieces = [_as_piece(k) for k in (key if isinstance(key, tuple) else (key,))]
        if not self.columns:
            return concatenate(pieces, axis=0)
        pieces = [reshape(p, (-1, 1)) if len(shape_of(p)) == 1 else p for p in pieces]
        return concatenate(pieces, axis=-1)


r_ = _Concatenator(columns=False)
c_ = _Concatenator(columns=True)
