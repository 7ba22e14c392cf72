"""jax.numpy's breadth: every function of ``shardc.numpy`` beyond the core, against numpy.

One row per function: the same expression runs on ``numpy`` and on ``shardc.numpy`` (the
module is the first argument), on several dtypes and shapes, eagerly and under ``jit``; each
row also runs inside a shard_map body on a 2-device mesh (its operands varying over the mesh
axis), and a representative set is differentiated against finite differences. The expected
dtype is numpy's made canonical for x64 off (float64 -> float32, int64 -> int32) unless a row
says otherwise (where JAX's rule differs from numpy's).
"""
from __future__ import annotations

import dataclasses
import re
from typing import Callable

import numpy as np
import pytest

import shardc
import shardc.numpy as jnp
from compiler.tracing import ConcretizationTypeError
from ir.sharding import ReplicationError
from shardc.sharding import PartitionSpec as P

F32, I32, BOOL, U8 = (np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.bool_),
                      np.dtype(np.uint8))
FLOATS, NUMBERS, ALL = (F32,), (F32, I32), (F32, I32, BOOL)
S0, S1, S2 = (), (7,), (3, 4)


@dataclasses.dataclass
class Row:
    """One function's cases: ``fn(module, *args)`` on operands of each shape tuple in
    ``shapes`` and each dtype in ``dtypes`` (drawn from ``[low, high]``)."""
    name: str
    fn: Callable
    shapes: list
    dtypes: tuple = FLOATS
    low: float = -5
    high: float = 5
    rtol: float = 1e-5
    atol: float = 1e-5
    dtype: Callable | None = None       # (input dtype) -> expected dtype, where JAX differs
    expect: Callable | None = None      # numpy reference, when ``fn(np, ...)`` is not one
    shard: bool = True                  # also run inside a shard_map body
    traced: bool = True                 # False: the result's size depends on the values


def _values(shape, dtype, seed, low, high):
    rng = np.random.default_rng(seed)
    if dtype == BOOL:
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        return rng.integers(int(low), int(high) + 1, size=shape).astype(dtype)
    return rng.uniform(low, high, size=shape).astype(dtype)


def _canonical(dtype) -> np.dtype:
    dtype = np.dtype(dtype)
    return {np.dtype(np.float64): F32, np.dtype(np.int64): I32,
            np.dtype(np.uint64): np.dtype(np.uint32),
            np.dtype(np.complex128): np.dtype(np.complex64)}.get(dtype, dtype)


def _leaves(x):
    if isinstance(x, (tuple, list)):
        return [leaf for v in x for leaf in _leaves(v)]
    return [x]


def _assert_same(got, want, row, dtype):
    got_leaves, want_leaves = _leaves(got), _leaves(want)
    assert len(got_leaves) == len(want_leaves), (row.name, len(got_leaves), len(want_leaves))
    for g, w in zip(got_leaves, want_leaves):
        g, w = np.asarray(g), np.asarray(w)
        expected = row.dtype(dtype) if row.dtype else _canonical(w.dtype)
        assert g.shape == w.shape, (row.name, g.shape, w.shape)
        assert g.dtype == expected, (row.name, g.dtype, expected)
        if np.issubdtype(g.dtype, np.inexact):
            np.testing.assert_allclose(g, w.astype(g.dtype), rtol=row.rtol, atol=row.atol,
                                       equal_nan=True, err_msg=row.name)
        else:
            np.testing.assert_array_equal(g, w.astype(g.dtype), err_msg=row.name)


def _reference(row, args):
    with np.errstate(all="ignore"):
        if row.expect is not None:
            return row.expect(*args)
        return row.fn(np, *args)


def _cases(row):
    for dtype in row.dtypes:
        for k, shapes in enumerate(row.shapes):
            args = [_values(s, dtype, seed=31 * k + j, low=row.low, high=row.high)
                    for j, s in enumerate(shapes)]
            yield dtype, args


def u(*shapes):
    """The shapes of one case (one per operand)."""
    return shapes


ONE = [u(S0), u(S1), u(S2)]          # a unary function on 0-d, 1-d and 2-d operands
ONE_ND = [u(S1), u(S2)]
TWO = [u(S1, S1), u(S2, S2), u(S2, (4,)), u(S0, S2)]


def _to_float(dtype):
    return F32 if dtype != np.dtype(np.float16) else dtype


ROWS = [
    # --- elementwise, one operand ------------------------------------------------------------
    Row("arcsin", lambda m, x: m.arcsin(x), ONE, low=-0.99, high=0.99),
    Row("asin", lambda m, x: m.asin(x), ONE, low=-0.99, high=0.99),
    Row("arccos", lambda m, x: m.arccos(x), ONE, low=-0.99, high=0.99),
    Row("acos", lambda m, x: m.acos(x), ONE, low=-0.99, high=0.99),
    Row("arctan", lambda m, x: m.arctan(x), ONE, NUMBERS),
    Row("atan", lambda m, x: m.atan(x), ONE),
    Row("sinh", lambda m, x: m.sinh(x), ONE, NUMBERS, rtol=2e-5),
    Row("cosh", lambda m, x: m.cosh(x), ONE, NUMBERS, rtol=2e-5),
    Row("arcsinh", lambda m, x: m.arcsinh(x), ONE, NUMBERS),
    Row("asinh", lambda m, x: m.asinh(x), ONE),
    Row("arccosh", lambda m, x: m.arccosh(x), ONE, low=1, high=6),
    Row("acosh", lambda m, x: m.acosh(x), ONE, low=1, high=6),
    Row("arctanh", lambda m, x: m.arctanh(x), ONE, low=-0.99, high=0.99),
    Row("atanh", lambda m, x: m.atanh(x), ONE, low=-0.99, high=0.99),
    Row("cbrt", lambda m, x: m.cbrt(x), ONE, NUMBERS),
    Row("exp2", lambda m, x: m.exp2(x), ONE, NUMBERS),
    Row("log2", lambda m, x: m.log2(x), ONE, NUMBERS, low=1, high=100),
    Row("log10", lambda m, x: m.log10(x), ONE, NUMBERS, low=1, high=100),
    Row("deg2rad", lambda m, x: m.deg2rad(x), ONE, NUMBERS),
    Row("radians", lambda m, x: m.radians(x), ONE),
    Row("rad2deg", lambda m, x: m.rad2deg(x), ONE, NUMBERS),
    Row("degrees", lambda m, x: m.degrees(x), ONE),
    Row("fabs", lambda m, x: m.fabs(x), ONE, NUMBERS),
    Row("positive", lambda m, x: m.positive(x), ONE, NUMBERS),
    Row("trunc", lambda m, x: m.trunc(x), ONE, NUMBERS),
    Row("rint", lambda m, x: m.rint(x * 2), ONE, NUMBERS,
        dtype=lambda d: F32),                       # JAX: integers round to float32
    Row("signbit", lambda m, x: m.signbit(x), ONE, NUMBERS),
    Row("sinc", lambda m, x: m.sinc(x), ONE + [u((5,))], NUMBERS, rtol=1e-4, atol=1e-6),
    Row("isneginf", lambda m, x: m.isneginf(m.where(x > 1, -np.inf, x)), ONE, FLOATS),
    Row("isposinf", lambda m, x: m.isposinf(m.where(x > 1, np.inf, x)), ONE, FLOATS),
    Row("invert", lambda m, x: m.invert(x), ONE, (I32, BOOL)),
    Row("bitwise_not", lambda m, x: m.bitwise_not(x), ONE, (I32, BOOL)),
    Row("bitwise_invert", lambda m, x: m.bitwise_invert(x), ONE, (I32,)),
    Row("bitwise_count", lambda m, x: m.bitwise_count(x), ONE, (I32,), low=-1000, high=1000),
    Row("nan_to_num", lambda m, x: m.nan_to_num(m.where(x > 2, np.float32(np.nan),
                                                         m.where(x < -2, np.float32(-np.inf),
                                                                 x))), ONE),
    Row("real", lambda m, x: m.real(x), ONE, NUMBERS),
    Row("imag", lambda m, x: m.imag(x), ONE, NUMBERS),
    Row("conj", lambda m, x: m.conj(x), ONE, NUMBERS),
    Row("conjugate", lambda m, x: m.conjugate(x), ONE, NUMBERS),
    Row("angle", lambda m, x: m.angle(x), ONE, NUMBERS),
    Row("iscomplex", lambda m, x: m.iscomplex(x), ONE, NUMBERS),
    Row("isreal", lambda m, x: m.isreal(x), ONE, NUMBERS),
    Row("modf", lambda m, x: m.modf(x), ONE),
    Row("frexp", lambda m, x: m.frexp(x * np.float32(1e3)), ONE),
    Row("spacing", lambda m, x: m.spacing(x), ONE, rtol=0, atol=0),
    # --- elementwise, two operands ------------------------------------------------------------
    Row("atan2", lambda m, x, y: m.atan2(x, y), TWO, NUMBERS),
    Row("pow", lambda m, x, y: m.pow(x, y), TWO, low=0.5, high=3, rtol=1e-5),
    Row("float_power", lambda m, x, y: m.float_power(x, y), TWO, NUMBERS, low=1, high=3,
        rtol=1e-5),
    Row("fmod", lambda m, x, y: m.fmod(x, m.where(y == 0, 1, y)), TWO, NUMBERS),
    Row("divmod", lambda m, x, y: m.divmod(x, m.where(y == 0, 3, y)), TWO, NUMBERS),
    Row("copysign", lambda m, x, y: m.copysign(x, y), TWO, NUMBERS),
    Row("heaviside", lambda m, x, y: m.heaviside(m.round(x), y), TWO, NUMBERS),
    Row("hypot", lambda m, x, y: m.hypot(x, y), TWO, NUMBERS),
    Row("logaddexp", lambda m, x, y: m.logaddexp(x, y), TWO, NUMBERS),
    Row("logaddexp2", lambda m, x, y: m.logaddexp2(x, y), TWO, NUMBERS),
    Row("left_shift", lambda m, x, y: m.left_shift(x, y), TWO, (I32,), low=0, high=12),
    Row("bitwise_left_shift", lambda m, x, y: m.bitwise_left_shift(x, y), TWO, (I32,), low=0,
        high=12),
    Row("right_shift", lambda m, x, y: m.right_shift(x * 1000, y), TWO, (I32,), low=-8,
        high=12, expect=lambda x, y: np.right_shift(x * 1000, y).astype(np.int32)),
    Row("bitwise_right_shift", lambda m, x, y: m.bitwise_right_shift(x, y), TWO, (I32,), low=0,
        high=12),
    Row("logical_xor", lambda m, x, y: m.logical_xor(x, y), TWO, ALL),
    Row("nextafter", lambda m, x, y: m.nextafter(x, y), TWO, rtol=0, atol=0),
    Row("ldexp", lambda m, x, y: m.ldexp(x, m.astype(y, np.int32)), TWO, low=-20, high=20),
    Row("gcd", lambda m, x, y: m.gcd(x, y), TWO, (I32,), low=-60, high=60),
    Row("lcm", lambda m, x, y: m.lcm(x, y), TWO, (I32,), low=-30, high=30),
    Row("fmax", lambda m, x, y: m.fmax(m.where(x > 3, np.nan, x), y), TWO, NUMBERS),
    Row("fmin", lambda m, x, y: m.fmin(x, m.where(y < -3, np.nan, y)), TWO, NUMBERS),
    # --- sorting and searching ----------------------------------------------------------------
    Row("sort", lambda m, x: (m.sort(x), m.sort(x, axis=0), m.sort(x, axis=None)), ONE_ND, ALL),
    Row("sort_descending", lambda m, x: m.sort(x, descending=True), ONE_ND, NUMBERS,
        expect=lambda x: np.flip(np.sort(x), -1)),
    Row("argsort", lambda m, x: (m.argsort(x), m.argsort(x, axis=0)), ONE_ND, ALL,
        expect=lambda x: (np.argsort(x, kind="stable"), np.argsort(x, axis=0, kind="stable")),
        low=-2, high=2),
    Row("argsort_descending", lambda m, x: m.argsort(x, descending=True), ONE_ND, NUMBERS,
        low=-2, high=2, expect=lambda x: np.argsort(-x, kind="stable")),
    Row("lexsort", lambda m, x, y: (m.lexsort((x, y)), m.lexsort([y, x], axis=0)),
        [u(S1, S1), u(S2, S2)], ALL, low=-2, high=2),
    Row("partition", lambda m, x: m.partition(x, 2), ONE_ND, NUMBERS,
        expect=lambda x: np.concatenate([np.sort(x)[..., :3], np.flip(np.sort(x)[..., 3:], -1)],
                                        -1)),
    Row("argpartition", lambda m, x: m.argpartition(x, 1), ONE_ND, NUMBERS, low=-50, high=50,
        expect=lambda x: _argpartition_as_jax(x, 1)),
    Row("searchsorted", lambda m, a, v: (m.searchsorted(m.sort(a), v),
                                         m.searchsorted(m.sort(a), v, side="right")),
        [u(S1, S2), u(S1, S0), u((5,), (9,))], NUMBERS, low=-3, high=3),
    Row("digitize", lambda m, x, b: (m.digitize(x, m.sort(b)), m.digitize(x, m.sort(b), True),
                                     m.digitize(x, m.sort(b)[::-1])),
        [u(S2, S1), u(S1, (4,))], NUMBERS, low=-3, high=3),
    Row("take_along_axis", lambda m, x, i: (m.take_along_axis(x, m.argsort(i, axis=0), 0),
                                            m.take_along_axis(x, m.argsort(i, 0)[:2], 0),
                                            m.take_along_axis(x, m.argsort(i, 1) - 4, 1),
                                            m.take_along_axis(x, m.argsort(i, 1)[:1] % 3, 0),
                                            m.take_along_axis(x, m.argsort(i, None), None)),
        [u(S2, S2)], ALL,
        expect=lambda x, i: (np.take_along_axis(x, np.argsort(i, 0, kind="stable"), 0),
                             np.take_along_axis(x, np.argsort(i, 0, kind="stable")[:2], 0),
                             np.take_along_axis(x, np.argsort(i, 1, kind="stable") - 4, 1),
                             np.take_along_axis(x, np.argsort(i, 1, kind="stable")[:1] % 3, 0),
                             np.take_along_axis(x, np.argsort(i, None, kind="stable"), None))),
    Row("put_along_axis", lambda m, x, i: m.put_along_axis(x, m.argmax(x, 1, keepdims=True),
                                                           -1, 1, inplace=False),
        [u(S2, S2)], NUMBERS, expect=lambda x, i: _np_put_along(x, np.argmax(x, 1)[:, None],
                                                                -1, 1)),
    Row("isin", lambda m, x, t: (m.isin(x, t), m.isin(x, t, invert=True)),
        [u(S2, S1), u(S1, S0), u(S0, S1)], NUMBERS, low=-3, high=3),
    Row("unique_sized", lambda m, x: m.unique(x, size=9, fill_value=0), [u((12,)), u(S2)],
        NUMBERS, low=-3, high=3, expect=lambda x: _padded(np.unique(x), 9, 0)),
    Row("unique_with_extras", lambda m, x: m.unique(x, return_index=True, return_inverse=True,
                                                    return_counts=True),
        [u((12,)), u(S2)], NUMBERS, low=-3, high=3, traced=False),
    Row("unique_axis", lambda m, x: (m.unique(x, axis=0, return_inverse=True),
                                     m.unique(x, axis=1, return_index=True, return_counts=True)),
        [u((6, 2)), u((2, 5))], NUMBERS, low=-1, high=1, traced=False),
    Row("unique_axis_sized", lambda m, x: m.unique(x, axis=0, size=8, fill_value=7),
        [u((6, 2))], NUMBERS, low=-1, high=1,
        expect=lambda x: np.concatenate([np.unique(x, axis=0),
                                         np.full((8 - len(np.unique(x, axis=0)), 2), 7,
                                                 x.dtype)])),
    Row("union1d", lambda m, x, y: m.union1d(x, y), [u(S1, (5,))], NUMBERS, low=-3, high=3,
        traced=False),
    Row("intersect1d", lambda m, x, y: m.intersect1d(x, y), [u(S1, (5,)), u(S2, S1)], NUMBERS,
        low=-3, high=3, traced=False),
    Row("intersect1d_indices", lambda m, x, y: (
        m.intersect1d(x, y, return_indices=True),
        m.intersect1d(m.unique(x), m.unique(y), assume_unique=True, return_indices=True)),
        [u((9,), (6,)), u(S2, S1)], NUMBERS, low=-4, high=4, traced=False),
    Row("intersect1d_sized", lambda m, x, y: m.intersect1d(x, y, return_indices=True, size=6,
                                                           fill_value=-9),
        [u((9,), (6,))], NUMBERS, low=-4, high=4,
        expect=lambda x, y: tuple(_padded(r, 6, f) for r, f in zip(      # (indices: JAX
            np.intersect1d(x, y, return_indices=True), (-9, x.size, y.size)))),  # pads so)
    Row("setdiff1d", lambda m, x, y: m.setdiff1d(x, y), [u(S1, (5,)), u(S2, S1)], NUMBERS,
        low=-3, high=3, traced=False),
    Row("setxor1d", lambda m, x, y: m.setxor1d(x, y), [u(S1, (5,)), u(S2, S1)], NUMBERS,
        low=-3, high=3, traced=False),
    Row("setops_sized", lambda m, x, y: (m.union1d(x, y, size=12, fill_value=-9),
                                         m.intersect1d(x, y, size=5, fill_value=-9),
                                         m.setdiff1d(x, y, size=5, fill_value=-9),
                                         m.setxor1d(x, y, size=8, fill_value=-9)),
        [u(S1, (5,))], NUMBERS, low=-3, high=3,
        expect=lambda x, y: (_padded(np.union1d(x, y), 12, -9),
                             _padded(np.intersect1d(x, y), 5, -9),
                             _padded(np.setdiff1d(x, y), 5, -9),
                             _padded(np.setxor1d(x, y), 8, -9))),
    Row("nonzero", lambda m, x: m.nonzero(x), ONE_ND, ALL, low=-1, high=1, traced=False),
    Row("nonzero_sized", lambda m, x: m.nonzero(x, size=14, fill_value=-1), ONE_ND, ALL, low=-1,
        high=1, expect=lambda x: tuple(_padded(i, 14, -1) for i in np.nonzero(x))),
    Row("flatnonzero", lambda m, x: m.flatnonzero(x, size=14), ONE_ND, ALL, low=-1, high=1,
        expect=lambda x: _padded(np.flatnonzero(x), 14, 0)),
    Row("argwhere", lambda m, x: m.argwhere(x), [u(S0), u(S1), u(S2)], ALL, low=-1, high=1,
        traced=False),
    Row("where_one_argument", lambda m, x: m.where(x), ONE_ND, NUMBERS, low=-1, high=1,
        traced=False),
    Row("extract", lambda m, x: m.extract(x > 0, x), ONE_ND, NUMBERS, traced=False),
    Row("compress", lambda m, x: (m.compress(m.array([True, False, True]), x, axis=0),
                                  m.compress(x[0] > 0, x, axis=None)),
        [u(S2)], NUMBERS, traced=False),
    Row("trim_zeros", lambda m, x: (m.trim_zeros(x), m.trim_zeros(x, "f"),
                                    m.trim_zeros(x, "b")), [u((9,))], NUMBERS, low=-1, high=1,
        traced=False),
    Row("bincount", lambda m, x: (m.bincount(m.abs(x)), m.bincount(m.abs(x), minlength=9)),
        [u(S1), u((12,))], (I32,), traced=False),
    Row("bincount_sized", lambda m, x, w: m.bincount(m.abs(x).astype(np.int32), w, length=6)
        if m is jnp else np.bincount(np.abs(x).astype(np.int32), w, minlength=6)[:6],
        [u((12,), (12,))], (F32,), low=0, high=5.9),
    Row("histogram", lambda m, x: m.histogram(x, bins=5), ONE_ND, NUMBERS,
        dtype=lambda d: F32, rtol=1e-5),
    Row("histogram_options", lambda m, x, w: (
        m.histogram(x, bins=m.array([-4, -1, 0, 2, 5]), weights=w),
        m.histogram(x, bins=4, range=(-2, 3), density=True)),
        [u((9,), (9,)), u(S2, S2)], NUMBERS, dtype=lambda d: F32, rtol=1e-5,
        expect=lambda x, w: (np.histogram(x, bins=np.array([-4, -1, 0, 2, 5]), weights=w),
                             np.histogram(x, bins=4, range=(-2, 3), density=True))),
    Row("histogram_bin_edges", lambda m, x: m.histogram_bin_edges(x, bins=6, range=(-4, 4)),
        ONE_ND, NUMBERS),
    # counts without weights are int32 (JAX's), the edges float32
    Row("histogram2d", lambda m, x, y: m.histogram2d(x, y, bins=4)[0], [u((11,), (11,))],
        NUMBERS, dtype=lambda d: I32),
    Row("histogram2d_edges", lambda m, x, y: m.histogram2d(x, y, bins=4)[1:],
        [u((11,), (11,))], NUMBERS, dtype=lambda d: F32),
    # (integer samples on bin edges: see test_histogramdd_bins_integers_by_float32_edges)
    Row("histogramdd", lambda m, x: m.histogramdd(x, bins=3)[0], [u((10, 3))], FLOATS,
        dtype=lambda d: I32),
    Row("histogramdd_edges", lambda m, x: m.histogramdd(x, bins=3)[1], [u((10, 3))], NUMBERS,
        dtype=lambda d: F32),
    Row("quantile", lambda m, x: (m.quantile(x, 0.3), m.quantile(x, m.asarray([0.1, 0.5, 1.0]),
                                                                  axis=-1)),
        ONE_ND, NUMBERS, expect=lambda x: (np.quantile(x, 0.3),
                                           np.quantile(x, np.array([0.1, 0.5, 1.0]), axis=-1))),
    Row("quantile_methods", lambda m, x: tuple(m.quantile(x, 0.4, axis=0, method=k)
                                               for k in ("lower", "higher", "midpoint",
                                                         "nearest")), ONE_ND, NUMBERS,
        dtype=lambda d: F32),                       # JAX computes quantiles in floats
    Row("percentile", lambda m, x: m.percentile(x, 75, axis=0, keepdims=True), ONE_ND, NUMBERS),
    Row("quantile_axes", lambda m, x: (m.quantile(x, 0.25, axis=(0, 2)),
                                       m.median(x, axis=(-1, 0), keepdims=True),
                                       m.nanpercentile(x, np.array([10, 90]), axis=(1,))),
        [u((2, 3, 4))], NUMBERS),
    Row("median", lambda m, x: (m.median(x), m.median(x, axis=-1)), ONE_ND, NUMBERS),
    Row("nanquantile", lambda m, x: m.nanquantile(m.where(x > 3, np.float32(np.nan), x), 0.3,
                                                  axis=-1), ONE_ND),
    Row("nanpercentile", lambda m, x: m.nanpercentile(m.where(x > 3, np.float32(np.nan), x),
                                                      40), ONE_ND),
    Row("nanmedian", lambda m, x: m.nanmedian(m.where(x > 3, np.float32(np.nan), x), axis=0),
        ONE_ND),
    # --- reductions --------------------------------------------------------------------------
    Row("cumprod", lambda m, x: (m.cumprod(x), m.cumprod(x, axis=0)), ONE_ND, ALL, low=-2,
        high=2),
    Row("cumulative_sum", lambda m, x: (m.cumulative_sum(x, axis=0),
                                        m.cumulative_sum(x, axis=-1, include_initial=True)),
        ONE_ND, ALL),
    Row("cumulative_prod", lambda m, x: m.cumulative_prod(x, axis=-1, include_initial=True),
        ONE_ND, NUMBERS, low=-2, high=2),
    Row("nancumsum", lambda m, x: m.nancumsum(m.where(x > 3, np.float32(np.nan), x), axis=0),
        ONE_ND),
    Row("nancumprod", lambda m, x: m.nancumprod(m.where(x > 1, np.float32(np.nan), x)),
        ONE_ND, low=-2, high=2),
    Row("nansum", lambda m, x: (m.nansum(m.where(x > 3, np.float32(np.nan), x)),
                                m.nansum(m.where(x > 3, np.float32(np.nan), x), axis=0)),
        ONE_ND),
    Row("nanprod", lambda m, x: m.nanprod(m.where(x > 1, np.float32(np.nan), x), axis=0),
        ONE_ND, low=-2, high=2),
    Row("nanmax", lambda m, x: m.nanmax(m.where(x > 3, np.float32(np.nan), x), axis=0), ONE_ND),
    Row("nanmin", lambda m, x: m.nanmin(m.where(x > 3, np.float32(np.nan), x)), ONE),
    Row("nanmean", lambda m, x: m.nanmean(m.where(x > 3, np.float32(np.nan), x), axis=0),
        ONE_ND),
    Row("nanvar", lambda m, x: m.nanvar(m.where(x > 3, np.float32(np.nan), x), ddof=1),
        ONE_ND, rtol=1e-4),
    Row("nanstd", lambda m, x: m.nanstd(m.where(x > 3, np.float32(np.nan), x), axis=-1,
                                        keepdims=True), ONE_ND, rtol=1e-4),
    Row("nanargmax", lambda m, x: m.nanargmax(m.where(x > 3, np.float32(np.nan), x), axis=0),
        ONE_ND),
    Row("nanargmin", lambda m, x: m.nanargmin(m.where(x < -3, np.float32(np.nan), x)),
        ONE_ND),
    Row("average", lambda m, x, w: (m.average(x), m.average(x, axis=-1, weights=w[0] + 6),
                                    m.average(x, weights=w + 6, returned=True)),
        [u(S2, S2)], NUMBERS, rtol=1e-5),
    Row("ptp", lambda m, x: (m.ptp(x), m.ptp(x, axis=0)), ONE_ND, NUMBERS),
    Row("count_nonzero", lambda m, x: (m.count_nonzero(x), m.count_nonzero(x, axis=0)),
        ONE_ND, ALL, low=-1, high=1),
    Row("cov", lambda m, x, y: (m.cov(x), m.cov(x, rowvar=False), m.cov(x, y, bias=True)),
        [u(S2, S2)], NUMBERS, rtol=1e-4),
    Row("cov_weights", lambda m, x, w: (
        m.cov(x, fweights=m.abs(w[0]).astype(np.int32) + 1),
        m.cov(x, aweights=m.abs(w[1]) + 0.5, ddof=0),
        m.cov(x, fweights=m.abs(w[0]).astype(np.int32) + 1, aweights=m.abs(w[2]) + 0.5)),
        [u(S2, S2)], NUMBERS, rtol=1e-4),
    Row("corrcoef", lambda m, x: m.corrcoef(x), [u(S2)], NUMBERS, rtol=1e-4),
    # --- array manipulation ------------------------------------------------------------------
    Row("append", lambda m, x, y: (m.append(x, y), m.append(x, y, axis=0)), [u(S2, S2)], ALL),
    Row("apply_along_axis", lambda m, x: (m.apply_along_axis(lambda r: r * r[0], 1, x),
                                          m.apply_along_axis(lambda r: r.sum(), 0, x)),
        [u(S2), u((2, 3, 4))], NUMBERS),
    Row("apply_over_axes", lambda m, x: m.apply_over_axes(m.sum, x, [0, 1]),
        [u(S2), u((2, 3, 4))], NUMBERS),
    Row("array_equiv", lambda m, x, y: (m.array_equiv(x, x[:1]), m.array_equiv(x, y),
                                        m.array_equiv(x, x), m.array_equiv(x, m.ones(5))),
        [u(S2, S2)], ALL, expect=lambda x, y: (np.array_equiv(x, x[:1]), np.array_equiv(x, y),
                                               True, False)),
    Row("atleast_3d", lambda m, x: m.atleast_3d(x), ONE + [u((2, 3, 4))], ALL),
    Row("block", lambda m, x, y: (m.block([[x, y], [y, x]]), m.block([x[0], y[1]])),
        [u(S2, S2)], ALL),
    Row("broadcast_arrays", lambda m, x, y: tuple(m.broadcast_arrays(x, y[:1], 2)),
        [u(S2, S2)], NUMBERS, expect=lambda x, y: tuple(
            np.broadcast_arrays(x, y[:1], np.int32(2)))),
    Row("choose", lambda m, x, y: (m.choose(m.abs(x).astype(np.int32) % 3, [x, y, x * y],
                                            mode="wrap"),
                                   m.choose(m.abs(x).astype(np.int32), [x, y], mode="clip")),
        [u(S2, S2), u(S1, S0)], NUMBERS),
    Row("column_stack", lambda m, x, y: (m.column_stack([x, y]), m.column_stack([x[0], y[0]])),
        [u(S2, S2)], ALL),
    Row("concat", lambda m, x, y: m.concat([x, y], axis=-1), [u(S2, S2)], ALL,
        expect=lambda x, y: np.concatenate([x, y], axis=-1)),
    Row("copy", lambda m, x: m.copy(x), ONE, ALL),
    Row("cross", lambda m, x, y: (m.cross(x[:, :3], y[:, :3]), m.cross(x[:, :2], y[:, :2]),
                                  m.cross(x[:, :3], y[:, :2]), m.cross(x[:3], y[:3], axis=0)),
        [u(S2, S2)], NUMBERS, expect=lambda x, y: (
            np.cross(x[:, :3], y[:, :3]), x[:, 0] * y[:, 1] - x[:, 1] * y[:, 0],
            np.cross(x[:, :3], np.pad(y[:, :2], ((0, 0), (0, 1)))),
            np.cross(x[:3], y[:3], axis=0))),
    Row("delete", lambda m, x: (m.delete(x, 1), m.delete(x, np.array([0, 2]), axis=1),
                                m.delete(x, slice(0, 3, 2), axis=0)), [u(S2)], ALL),
    Row("insert", lambda m, x, y: (m.insert(x, 2, y[0, 0]), m.insert(x, 1, y[0], axis=0),
                                   m.insert(x, np.array([0, 2]), y[:, :2], axis=1),
                                   m.insert(x, 1, 7, axis=1)), [u(S2, S2)], NUMBERS),
    Row("diag", lambda m, x, y: (m.diag(x), m.diag(x, 1), m.diag(x, -2), m.diag(y[0]),
                                 m.diag(y[0], 2), m.diag(y[0], -1)), [u(S2, S2)], ALL),
    Row("diagflat", lambda m, x: (m.diagflat(x), m.diagflat(x, -1)), [u((2, 2)), u((3,))],
        NUMBERS),
    Row("diagonal", lambda m, x: (m.diagonal(x), m.diagonal(x, 1, 2, 0), m.diagonal(x, -1, -1,
                                                                                    -2)),
        [u((2, 3, 4)), u((4, 3, 3))], ALL),
    Row("diag_indices_from", lambda m, x: x[m.diag_indices_from(x)], [u((4, 4))], NUMBERS),
    Row("fill_diagonal", lambda m, x: m.fill_diagonal(x, 9, inplace=False), [u(S2), u((4, 3)),
                                                                            u((3, 3, 3))],
        NUMBERS, expect=lambda x: _np_fill_diagonal(x, 9)),
    Row("dsplit", lambda m, x: m.dsplit(x, 2), [u((2, 3, 4))], ALL),
    Row("hsplit", lambda m, x: m.hsplit(x, [1, 3]), [u(S1), u(S2)], ALL),
    Row("vsplit", lambda m, x: m.vsplit(x, [1]), [u(S2)], ALL),
    Row("dstack", lambda m, x, y: m.dstack([x, y]), [u(S2, S2), u(S1, S1)], ALL),
    Row("fliplr", lambda m, x: m.fliplr(x), [u(S2), u((2, 3, 4))], ALL),
    Row("flipud", lambda m, x: m.flipud(x), ONE_ND, ALL),
    Row("rot90", lambda m, x: tuple(m.rot90(x, k) for k in range(-1, 5)) + (
        m.rot90(x, 1, axes=(1, 0)),), [u(S2), u((2, 3, 4))], NUMBERS),
    Row("rollaxis", lambda m, x: (m.rollaxis(x, 2), m.rollaxis(x, 0, 3), m.rollaxis(x, -1, 1)),
        [u((2, 3, 4))], NUMBERS),
    Row("permute_dims", lambda m, x: m.permute_dims(x, (2, 0, 1)), [u((2, 3, 4))], NUMBERS),
    Row("matrix_transpose", lambda m, x: m.matrix_transpose(x), [u(S2), u((2, 3, 4))], ALL),
    Row("matvec", lambda m, x, y: m.matvec(x, y), [u(S2, (4,)), u((2, 3, 4), (2, 4))], NUMBERS),
    Row("vecmat", lambda m, x, y: m.vecmat(x, y), [u((3,), S2), u((2, 3), (2, 3, 4))],
        NUMBERS),
    Row("vecdot", lambda m, x, y: (m.vecdot(x, y), m.vecdot(x, y, axis=0)), [u(S2, S2)],
        NUMBERS),
    Row("kron", lambda m, x, y: (m.kron(x, y), m.kron(x[0], y)), [u((2, 3), (2, 2)),
                                                                 u((2,), (3,))], NUMBERS),
    Row("resize", lambda m, x: (m.resize(x, (5, 3)), m.resize(x, 4)), ONE_ND, ALL),
    Row("unstack", lambda m, x: (m.unstack(x), m.unstack(x, axis=1)), [u(S2)], ALL,
        expect=lambda x: (tuple(x), tuple(np.moveaxis(x, 1, 0)))),
    Row("tril", lambda m, x: (m.tril(x), m.tril(x, 1), m.tril(x, -1)), [u(S2), u((2, 3, 4))],
        ALL),
    Row("triu", lambda m, x: (m.triu(x), m.triu(x, 2), m.triu(x, -1)), [u(S2), u((2, 3, 4))],
        ALL),
    Row("tril_indices_from", lambda m, x: x[m.tril_indices_from(x, 1)], [u(S2)], NUMBERS),
    Row("triu_indices_from", lambda m, x: x[m.triu_indices_from(x)], [u(S2)], NUMBERS),
    Row("ix_", lambda m, x, y: m.ix_(x[0], y[:, 1], x[1]), [u(S2, S2)], NUMBERS),
    Row("meshgrid", lambda m, x, y: tuple(m.meshgrid(x, y)) + tuple(
        m.meshgrid(x, y, x[:2], indexing="ij")) + tuple(m.meshgrid(x, y, sparse=True)),
        [u((3,), (4,))], NUMBERS),
    # (mode="raise" needs concrete coordinates: under jit it is JAX's ConcretizationTypeError)
    Row("ravel_multi_index", lambda m, x: (m.ravel_multi_index((m.abs(x[0]) % 3,
                                                                m.abs(x[1]) % 4), (3, 4),
                                                               mode="clip"),
                                           m.ravel_multi_index((x[0], x[1]), (3, 4),
                                                               mode="wrap"),
                                           m.ravel_multi_index((x[0], x[1]), (3, 4),
                                                               mode="clip", order="F")),
        [u((2, 5))], (I32,)),
    Row("unravel_index", lambda m, x: m.unravel_index(m.abs(x) % 12, (3, 4)), ONE, (I32,),
        low=-20, high=20),
    Row("piecewise", lambda m, x: m.piecewise(x, [x < 0, x > 2], [lambda v: -v, 7, 1]),
        ONE, NUMBERS),
    Row("place", lambda m, x, y: m.place(x, x > 0, y[:3], inplace=False), [u(S2, S2)], NUMBERS,
        expect=lambda x, y: _np_place(x, x > 0, y[:3])),
    Row("put", lambda m, x, y: (m.put(x, m.array([0, 5, -1]), y[:3], inplace=False),
                                m.put(x, m.array([1, 40]), y[0, :2], mode="clip",
                                      inplace=False)),
        [u(S2, S2)], NUMBERS,
        expect=lambda x, y: (_np_put(x, [0, 5, -1], y[:3].ravel()[:3], None),
                             _np_put(x, [1, 40], y[0, :2], "clip"))),
    Row("select", lambda m, x, y: (m.select([x > 1, x < -1], [x, y], 0),
                                   m.select([x > 0], [y], default=x)), [u(S2, S2)], NUMBERS),
    Row("vander", lambda m, x: (m.vander(x), m.vander(x, 3, increasing=True)), [u((4,))],
        NUMBERS, low=-3, high=3, rtol=1e-5),
    Row("packbits", lambda m, x: (m.packbits(x), m.packbits(x, axis=1),
                                  m.packbits(x, axis=0, bitorder="little")),
        [u((3, 10)), u((9, 2))], (I32, BOOL), low=-1, high=1),
    Row("unpackbits", lambda m, x: (m.unpackbits(m.abs(x).astype(np.uint8)),
                                    m.unpackbits(m.abs(x).astype(np.uint8), axis=1, count=5),
                                    m.unpackbits(m.abs(x).astype(np.uint8), axis=0,
                                                 bitorder="little")),
        [u((2, 3))], (I32,), low=0, high=255),
    Row("vectorize", lambda m, x, y: m.vectorize(lambda a, b: a * b + 1)(x, y), TWO, NUMBERS),
    Row("vectorize_signature", lambda m, x, y: (
        m.vectorize(lambda a, b: (a * b).sum(), signature="(n),(n)->()")(x, y),
        m.vectorize(lambda a: (a[::-1], a.max()), signature="(n)->(n),()")(x),
        m.vectorize(lambda a, s: a * s, signature="(n),()->(n)")(x, y[..., 0]),
        m.vectorize(lambda a, k: a[:k].sum(), excluded={1}, signature="(n)->()")(x, 2)),
        [u(S2, S2), u((2, 3, 4), (3, 4)), u(S1, S1)], NUMBERS),
    # --- calculus, signals, polynomials -----------------------------------------------------
    Row("diff", lambda m, x: (m.diff(x), m.diff(x, n=2, axis=0), m.diff(x, prepend=0),
                              m.diff(x, append=x[..., :1])), ONE_ND, ALL),
    Row("ediff1d", lambda m, x: (m.ediff1d(x), m.ediff1d(x, to_begin=[5, 6], to_end=7)),
        ONE_ND, NUMBERS),
    Row("gradient", lambda m, x: (m.gradient(x, axis=-1), m.gradient(x, 0.5, axis=0)),
        ONE_ND, NUMBERS),
    Row("gradient_coordinates", lambda m, x, c: (
        m.gradient(x, m.cumsum(m.abs(c[0]) + 0.5), axis=1),
        tuple(m.gradient(x, m.cumsum(m.abs(c[:, 0]) + 0.5), 2.0))),
        [u(S2, S2)], NUMBERS, rtol=1e-4, atol=1e-4),
    Row("gradient_all_axes", lambda m, x: tuple(m.gradient(x, 2.0, 3.0)), [u(S2)], NUMBERS,
        expect=lambda x: tuple(np.gradient(x, 2.0, 3.0))),
    Row("trapezoid", lambda m, x, y: (m.trapezoid(x), m.trapezoid(x, dx=0.5, axis=0),
                                      m.trapezoid(x, m.sort(y))), [u(S2, S2), u(S1, S1)],
        NUMBERS, rtol=1e-5),
    Row("interp", lambda m, x, xp, fp: (m.interp(x, m.sort(xp), fp),
                                        m.interp(x, m.sort(xp), fp, left=-9, right=9)),
        [u(S2, (6,), (6,)), u(S0, (5,), (5,))], NUMBERS, rtol=1e-5),
    Row("interp_period", lambda m, x, xp, fp: m.interp(x * 100, xp * 60, fp, period=360),
        [u(S2, (6,), (6,))], FLOATS, rtol=1e-4, atol=1e-4),
    Row("unwrap", lambda m, x: (m.unwrap(x), m.unwrap(x, axis=0, period=4.0),
                                m.unwrap(x, discont=4.0)), ONE_ND, FLOATS, low=-10, high=10,
        rtol=1e-5, atol=1e-4),
    Row("convolve", lambda m, x, y: (m.convolve(x, y), m.convolve(x, y, "same"),
                                     m.convolve(x, y, "valid")),
        [u((7,), (3,)), u((4,), (6,)), u((5,), (5,))], NUMBERS,
        dtype=lambda d: d if d.kind == "f" else F32),       # JAX: integers in float32
    Row("correlate", lambda m, x, y: (m.correlate(x, y), m.correlate(x, y, "same"),
                                      m.correlate(x, y, "full")),
        [u((7,), (3,)), u((4,), (6,))], NUMBERS, dtype=lambda d: d if d.kind == "f" else F32),
    Row("polyval", lambda m, p, x: m.polyval(p, x), [u((4,), S2), u((1,), S0)], NUMBERS,
        low=-3, high=3, rtol=1e-5),
    Row("polyadd", lambda m, a, b: m.polyadd(a, b), [u((4,), (2,)), u((2,), (3,))], NUMBERS),
    Row("polysub", lambda m, a, b: m.polysub(a, b), [u((4,), (2,)), u((2,), (3,))], NUMBERS),
    Row("polymul", lambda m, a, b: m.polymul(a, b), [u((4,), (2,))], NUMBERS,
        expect=lambda a, b: np.convolve(a, b),      # JAX keeps leading zeros
        dtype=lambda d: d if d.kind == "f" else F32),
    Row("polyder", lambda m, p: (m.polyder(p), m.polyder(p, 2), m.polyder(p, 0)), [u((5,))],
        NUMBERS, dtype=lambda d: d if d.kind == "f" else F32),    # JAX's is inexact
    Row("polyint", lambda m, p: (m.polyint(p), m.polyint(p, 2, k=[1, 2])), [u((4,))], NUMBERS,
        rtol=1e-5),
    Row("polydiv", lambda m, u_, v: m.polydiv(u_, m.concatenate([v[:1] * 0 + 2, v[1:]])),
        [u((5,), (2,)), u((4,), (3,))],
        FLOATS, rtol=1e-4, atol=1e-4, expect=lambda u_, v: _np_polydiv(u_, v)),
    Row("polyfit", lambda m, x, y, w: (m.polyfit(x, y, 2), m.polyfit(x, y, 0),
                                       m.polyfit(x, m.stack([y, 2 * y - x], 1), 3),
                                       m.polyfit(x, y, 1, w=m.abs(w) + 1)),
        [u((12,), (12,), (12,))], FLOATS, rtol=2e-3, atol=2e-3),
    Row("poly", lambda m, r: m.poly(r), [u((3,)), u((1,))], NUMBERS, rtol=1e-5),
    Row("i0", lambda m, x: m.i0(x), ONE + [u((9,))], NUMBERS, low=-12, high=12, rtol=1e-5),
    # --- the core functions not exercised elsewhere --------------------------------------------
    Row("absolute", lambda m, x: m.absolute(x), ONE, NUMBERS),
    Row("amax_amin", lambda m, x: (m.amax(x, axis=0), m.amin(x)), ONE_ND, ALL),
    Row("around", lambda m, x: (m.around(x), m.around(x, 1)), ONE, FLOATS, rtol=1e-5),
    Row("atleast_2d", lambda m, x: m.atleast_2d(x), ONE, ALL),
    Row("bitwise", lambda m, x, y: (m.bitwise_and(x, y), m.bitwise_or(x, y),
                                    m.bitwise_xor(x, y)), TWO, (I32, BOOL)),
    Row("logical", lambda m, x, y: (m.logical_and(x, y), m.logical_or(x, y),
                                    m.logical_not(x)), TWO, ALL),
    Row("empty_like", lambda m, x: m.empty_like(x) * 0, ONE, ALL,
        expect=lambda x: np.zeros_like(x) * 0),
    Row("identity", lambda m, x: m.identity(3) + x, [u(S0)], NUMBERS),
    Row("isclose", lambda m, x, y: m.isclose(x, x + y * np.float32(1e-6)), TWO, FLOATS),
    Row("mod_true_divide", lambda m, x, y: (m.mod(x, m.where(y == 0, 2, y)),
                                            m.true_divide(x, m.where(y == 0, 2, y))), TWO,
        NUMBERS),
    Row("trace", lambda m, x: (m.trace(x), m.trace(x, 1)), [u(S2), u((3, 3))], NUMBERS),
]


def _np_put_along(x, indices, value, axis):
    out = x.copy()
    np.put_along_axis(out, indices, value, axis)
    return out


def _np_fill_diagonal(x, value):
    out = x.copy()
    np.fill_diagonal(out, value)
    return out


def _np_place(x, mask, values):
    out = x.copy()
    np.place(out, mask, values)
    return out


def _np_put(x, indices, values, mode):
    out = x.copy()
    if mode is None:
        np.put(out, indices, values)
    else:
        np.put(out, indices, values, mode=mode)
    return out


def _np_polydiv(u_, v):
    v = np.concatenate([v[:1] * 0 + 2, v[1:]])
    q, r = np.polydiv(u_.astype(np.float64), v.astype(np.float64))
    full = np.concatenate([np.zeros(len(u_) - len(r)), r])    # JAX keeps u's length
    return q, full


def _padded(values, size, fill):
    values = np.asarray(values)[:size]
    return np.concatenate([values, np.full(size - values.size, fill, values.dtype)])


def _rows_by_name():
    names = [row.name for row in ROWS]
    assert len(names) == len(set(names)), "each function has one row"
    return {row.name: row for row in ROWS}


@pytest.mark.parametrize("name", sorted(_rows_by_name()))
def test_against_numpy(name):
    row = _rows_by_name()[name]
    fn = lambda *args: row.fn(jnp, *args)
    jitted = shardc.jit(fn)
    for dtype, args in _cases(row):
        want = _reference(row, args)
        _assert_same(fn(*[jnp.asarray(a) for a in args]), want, row, dtype)
        if row.traced:
            _assert_same(jitted(*[jnp.asarray(a) for a in args]), want, row, dtype)
            continue
        # JAX's rule: a result whose size depends on the values needs size= under tracing
        with pytest.raises(ConcretizationTypeError, match="traced"):
            jitted(*[jnp.asarray(a) for a in args])


@pytest.mark.parametrize("name", sorted(n for n, r in _rows_by_name().items()
                                         if r.shard and r.traced))
def test_in_a_shard_map_body(name):
    """Each device applies the function to its own operands (varying over the mesh axis)."""
    row = _rows_by_name()[name]
    dtype, args = next(iter(_cases(row)))
    others = [_values(np.shape(a), dtype, seed=97 + j, low=row.low, high=row.high)
              for j, a in enumerate(args)]
    want = [_reference(row, args), _reference(row, others)]
    mesh = shardc.make_mesh((2,), ("i",))

    def body(*blocks):
        out = row.fn(jnp, *[b[0] for b in blocks])
        return shardc.tree_util.tree_map(lambda r: jnp.expand_dims(r, 0), out)
    stacked = [jnp.asarray(np.stack([a, b])) for a, b in zip(args, others)]
    sm = shardc.shard_map(body, mesh=mesh, in_specs=(P("i"),) * len(args), out_specs=P("i"))
    for run in (sm, shardc.jit(sm)):
        got = run(*stacked)
        for k in range(2):
            member = shardc.tree_util.tree_map(lambda r: np.asarray(r)[k], got)
            _assert_same(member, want[k], row, dtype)


# --- functions of static arguments -------------------------------------------------------------

CREATION = [
    ("tri", lambda m: (m.tri(3), m.tri(3, 5, 1), m.tri(4, 2, -1, dtype=np.int32)), None),
    ("tril_indices", lambda m: m.tril_indices(4) + m.tril_indices(3, 1, 5), None),
    ("triu_indices", lambda m: m.triu_indices(4) + m.triu_indices(3, -1, 2), None),
    ("diag_indices", lambda m: m.diag_indices(3) + m.diag_indices(2, 3), None),
    ("mask_indices", lambda m: m.mask_indices(4, m.triu) + m.mask_indices(3, m.tril, -1)
     if m is np else m.mask_indices(4, m.triu, size=10) + m.mask_indices(3, m.tril, -1, size=3),
     None),
    ("indices", lambda m: (m.indices((2, 3)),) + m.indices((2, 3), sparse=True), None),
    ("fromfunction", lambda m: m.fromfunction(lambda i, j: i * 10 + j, (3, 4)), None),
    ("fromfunction_int", lambda m: m.fromfunction(lambda i, j: i - j, (2, 3), dtype=int), None),
    ("geomspace", lambda m: (m.geomspace(1, 1000, 4), m.geomspace(-2, -64, 6),
                             m.geomspace(3, 48, 5, endpoint=False)), None),
    ("logspace", lambda m: (m.logspace(0, 3, 4), m.logspace(1, 2, 5, base=2.0),
                            m.logspace(0, 1, 3, endpoint=False)), None),
    ("bartlett", lambda m: (m.bartlett(7), m.bartlett(1), m.bartlett(0), m.bartlett(6)), None),
    ("blackman", lambda m: (m.blackman(7), m.blackman(1), m.blackman(6)), None),
    ("hamming", lambda m: (m.hamming(7), m.hamming(1), m.hamming(6)), None),
    ("hanning", lambda m: (m.hanning(7), m.hanning(1), m.hanning(6)), None),
    ("kaiser", lambda m: (m.kaiser(7, 5.0), m.kaiser(1, 2.0), m.kaiser(6, 14.0)), None),
    ("sort_complex", lambda m: m.sort_complex(m.asarray(np.array([3.0, -1.0, 2.0], np.float32))),
     np.dtype(np.complex64)),
]


@pytest.mark.parametrize("name", [name for name, _, _ in CREATION])
def test_creation_against_numpy(name):
    _, fn, dtype = next(c for c in CREATION if c[0] == name)
    row = Row(name, lambda m: fn(m), [], rtol=2e-6, atol=2e-6,
              dtype=(lambda d: dtype) if dtype is not None else None)
    want = fn(np)
    _assert_same(fn(jnp), want, row, None)
    _assert_same(shardc.jit(lambda: fn(jnp))(), want, row, None)


def test_dtype_and_shape_queries():
    x = jnp.ones((2, 3), jnp.int32)
    assert (jnp.ndim(x), jnp.shape(x), jnp.size(x), jnp.size(x, 1)) == (2, (2, 3), 6, 3)
    assert (jnp.ndim(3.0), jnp.shape(3.0), jnp.size(3.0)) == (0, (), 1)
    assert jnp.broadcast_shapes((2, 1), (3,), ()) == (2, 3)
    with pytest.raises(ValueError, match="Incompatible shapes for broadcasting"):
        jnp.broadcast_shapes((2,), (3,))
    assert jnp.promote_types(jnp.int32, jnp.float32) == F32
    assert jnp.promote_types(jnp.uint8, jnp.int8) == np.dtype(np.int16)
    assert jnp.promote_types(jnp.int64, jnp.float64) == F32          # x64 off
    assert jnp.can_cast(jnp.int32, jnp.float32, "same_kind") and not jnp.can_cast(F32, I32)
    assert jnp.can_cast(x, jnp.int64)
    assert jnp.isdtype(F32, "real floating") and not jnp.isdtype(I32, "real floating")
    assert jnp.issubdtype(I32, np.integer) and not jnp.issubdtype(F32, np.integer)
    assert jnp.isscalar(3) and jnp.isscalar(np.float32(1)) and jnp.isscalar(jnp.asarray(2.0))
    assert not jnp.isscalar(x) and not jnp.isscalar([1])
    assert shardc.jit(lambda v: jnp.asarray(jnp.isscalar(v)))(jnp.asarray(1.0))
    assert jnp.isrealobj(x) and not jnp.iscomplexobj(x)
    assert jnp.iterable(x) and not jnp.iterable(3)


def test_host_io_round_trips(tmp_path):
    x = jnp.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert jnp.array_repr(x) == np.array_repr(np.asarray(x))
    assert jnp.array_str(x) == np.array_str(np.asarray(x))
    assert jnp.get_printoptions() == np.get_printoptions()
    before = np.get_printoptions()["precision"]
    jnp.set_printoptions(precision=3)
    try:
        assert np.get_printoptions()["precision"] == 3
    finally:
        jnp.set_printoptions(precision=before)
    with jnp.printoptions(precision=2):
        assert jnp.get_printoptions()["precision"] == 2
    jnp.save(tmp_path / "x.npy", x)
    loaded = jnp.load(tmp_path / "x.npy")
    assert isinstance(loaded, shardc.Array)
    np.testing.assert_array_equal(np.asarray(loaded), np.asarray(x))
    jnp.savez(tmp_path / "xs.npz", x, y=x * 2)
    with np.load(tmp_path / "xs.npz") as archive:
        np.testing.assert_array_equal(archive["y"], np.asarray(x) * 2)
    raw = np.arange(4, dtype=np.int32)
    assert_equal = np.testing.assert_array_equal
    assert_equal(np.asarray(jnp.frombuffer(raw.tobytes(), dtype=np.int32)), raw)
    assert_equal(np.asarray(jnp.fromstring("1 2 3", dtype=np.int32, sep=" ")), [1, 2, 3])
    assert_equal(np.asarray(jnp.fromiter(iter(range(3)), np.float32)), [0.0, 1.0, 2.0])
    raw.tofile(tmp_path / "raw.bin")
    assert_equal(np.asarray(jnp.fromfile(tmp_path / "raw.bin", dtype=np.int32)), raw)
    assert_equal(np.asarray(jnp.from_dlpack(raw)), raw)
    assert jnp.fromiter(iter(range(3)), np.float64).dtype == F32      # canonical dtype
    path, _ = jnp.einsum_path("ij,jk,kl->il", jnp.ones((2, 3)), jnp.ones((3, 4)),
                              jnp.ones((4, 5)))
    assert path[0] == "einsum_path" and len(path) == 3


def test_unique_family_against_numpy():
    data = np.array([[3, 1, 2], [3, -1, 1]], np.int32)
    x = jnp.asarray(data)
    values, counts = jnp.unique_counts(x)
    want = np.unique_counts(data)
    np.testing.assert_array_equal(np.asarray(values), want.values)
    np.testing.assert_array_equal(np.asarray(counts), want.counts)
    result = jnp.unique_all(x)
    want = np.unique_all(data)
    for field in ("values", "indices", "inverse_indices", "counts"):
        np.testing.assert_array_equal(np.asarray(getattr(result, field)), getattr(want, field))
    values, inverse = jnp.unique_inverse(x)
    assert np.asarray(inverse).shape == data.shape
    np.testing.assert_array_equal(np.asarray(values)[np.asarray(inverse)], data)
    np.testing.assert_array_equal(np.asarray(jnp.unique_values(x)), np.unique(data))
    sized = shardc.jit(lambda v: jnp.unique_values(v, size=6, fill_value=9))(x)
    np.testing.assert_array_equal(np.asarray(sized), [-1, 1, 2, 3, 9, 9])
    floats = jnp.asarray(np.array([np.nan, 1.0, np.nan, 0.0], np.float32))
    np.testing.assert_array_equal(np.asarray(jnp.unique(floats)), [0.0, 1.0, np.nan])
    assert np.asarray(jnp.unique(floats, equal_nan=False)).size == 4


def test_sorting_orders_floats_as_jax():
    """JAX's comparator (JAX 0.10.2's results): -0.0 equals 0.0 and every NaN is one value
    after infinity; ties keep their order."""
    data = np.array([0.0, -0.0, np.inf, np.nan, -np.inf, 1.0, -0.0], np.float32)
    out = np.asarray(jnp.sort(jnp.asarray(data)))
    assert list(np.signbit(out[1:4])) == [False, True, True]
    np.testing.assert_array_equal(out, [-np.inf, 0.0, -0.0, -0.0, 1.0, np.inf, np.nan])
    assert list(np.asarray(jnp.argsort(jnp.asarray(data)))) == [4, 0, 1, 6, 5, 2, 3]
    nans = np.array([np.nan, 1.0, -np.nan, 0.0, np.nan], np.float32)
    assert list(np.asarray(jnp.argsort(jnp.asarray(nans)))) == [3, 1, 0, 2, 4]
    # searchsorted reads the same order
    found = jnp.searchsorted(jnp.asarray(np.array([-0.0, 0.0, np.nan], np.float32)),
                             jnp.asarray(np.array([0.0, -0.0, np.nan], np.float32)))
    assert list(np.asarray(found)) == [0, 0, 2]


def test_float_bits_at_the_edges_of_the_range():
    tiny = np.finfo(np.float32).smallest_subnormal
    values = np.array([0.0, -0.0, 1.0, 0.5, -8.0, 3e-39, tiny, -tiny, 3.4e38, np.inf, -np.inf,
                       np.nan, 1e-30], np.float32)
    x = jnp.asarray(values)
    for run in (lambda v: jnp.frexp(v), shardc.jit(jnp.frexp)):
        mantissa, exponent = run(x)
        want_m, want_e = np.frexp(values)
        np.testing.assert_array_equal(np.asarray(mantissa), want_m)
        np.testing.assert_array_equal(np.asarray(exponent), want_e)
        assert np.asarray(exponent).dtype == I32
    finite = values[np.isfinite(values)]
    exponents = np.array([0, 5, -149, 150, -260, 127, 3, -3, 1, 0], np.int32)
    with np.errstate(over="ignore"):
        want = np.ldexp(finite, exponents)
    np.testing.assert_array_equal(np.asarray(jnp.ldexp(jnp.asarray(finite), exponents)), want)
    with np.errstate(over="ignore"):
        want = np.spacing(values)
    want[1] = -tiny                 # JAX: spacing(-0.0) has the sign of -0.0 (numpy: +tiny)
    np.testing.assert_array_equal(np.asarray(jnp.spacing(x)), want)
    np.testing.assert_array_equal(np.asarray(jnp.nextafter(x, jnp.float32(0))),
                                  np.nextafter(values, np.float32(0)))
    np.testing.assert_array_equal(np.asarray(jnp.signbit(x)), np.signbit(values))
    np.testing.assert_array_equal(np.asarray(jnp.copysign(jnp.float32(2), x)),
                                  np.copysign(np.float32(2), values))


def test_shifts_by_the_bit_width_or_more():
    x = jnp.asarray(np.array([1, -8, 5], np.int32))
    amounts = jnp.asarray(np.array([32, 40, -1], np.int32))
    assert list(np.asarray(jnp.left_shift(x, amounts))) == [0, 0, 0]
    assert list(np.asarray(jnp.right_shift(x, amounts))) == [0, -1, 0]
    unsigned = jnp.asarray(np.array([0xF0000000, 7], np.uint32))
    assert list(np.asarray(jnp.right_shift(unsigned, jnp.asarray(np.array([4, 33], np.uint32))))
                ) == [0x0F000000, 0]


@pytest.mark.parametrize("call, error, message", [
    (lambda: jnp.sort(jnp.ones(())), ValueError, "0-d array"),
    (lambda: jnp.searchsorted(jnp.ones((2, 2)), 1.0), ValueError, "1-dimensional"),
    (lambda: jnp.searchsorted(jnp.ones(2), 1.0, side="middle"), ValueError, "'middle'"),
    (lambda: jnp.partition(jnp.ones(3), 3), ValueError, "kth=3 is out of bounds"),
    (lambda: jnp.take_along_axis(jnp.ones((2, 2)), jnp.ones((2,), jnp.int32), 0), ValueError,
     "same number of dimensions"),
    (lambda: jnp.take_along_axis(jnp.ones(2), jnp.ones(2), 0), TypeError, "integer type"),
    (lambda: jnp.put_along_axis(jnp.ones(2), jnp.zeros(1, jnp.int32), 1.0, 0), ValueError,
     "inplace=False"),
    (lambda: jnp.nonzero(jnp.ones(())), ValueError, "0d arrays"),
    (lambda: shardc.jit(lambda x: jnp.unique(x))(jnp.ones(3)), ConcretizationTypeError,
     "pass size="),
    (lambda: shardc.jit(lambda x: jnp.bincount(x))(jnp.ones(3, jnp.int32)),
     ConcretizationTypeError, "bincount"),
    (lambda: jnp.bincount(jnp.ones(3)), TypeError, "integer type"),
    (lambda: jnp.quantile(jnp.ones(3), 0.5, method="cubic"), ValueError, "method='cubic'"),
    (lambda: jnp.left_shift(jnp.ones(2), 1), TypeError, "integer operands"),
    (lambda: jnp.invert(jnp.ones(2)), TypeError, "integer or boolean"),
    (lambda: jnp.bitwise_count(jnp.ones(2)), TypeError, "integer operands"),
    (lambda: jnp.fill_diagonal(jnp.ones((2, 2)), 1), NotImplementedError, "inplace=False"),
    (lambda: jnp.place(jnp.ones(2), jnp.ones(2, bool), 1), ValueError, "inplace=False"),
    (lambda: jnp.put(jnp.ones(2), 0, 1), ValueError, "inplace=False"),
    (lambda: shardc.jit(lambda i: jnp.delete(jnp.ones(3), i))(jnp.int32(1)),
     ConcretizationTypeError, "obj must be concrete"),
    (lambda: jnp.choose(jnp.asarray([0, 2]), [jnp.ones(2), jnp.ones(2)]), ValueError,
     "invalid entry"),
    (lambda: shardc.jit(lambda i: jnp.choose(i, [jnp.ones(2), jnp.ones(2)]))(
        jnp.asarray([0, 1])), ConcretizationTypeError, "mode='wrap' or mode='clip'"),
    (lambda: jnp.select([jnp.ones(2)], [jnp.ones(2)]), ValueError, "boolean"),
    (lambda: jnp.piecewise(jnp.ones(2), [jnp.ones(2, bool)], [1, 2, 3]), ValueError,
     "either 1 or 2 functions"),
    (lambda: jnp.cumulative_sum(jnp.ones((2, 2))), ValueError,
     "axis was not set to an explicit value"),
    (lambda: jnp.convolve(jnp.ones((2, 2)), jnp.ones(2)), ValueError, "1-dimensional"),
    (lambda: jnp.diff(jnp.ones(())), ValueError, "at least one dimensional"),
    (lambda: jnp.rot90(jnp.ones((2, 2)), axes=(1, 1)), ValueError, "axes must be different"),
    (lambda: jnp.ix_(jnp.ones(2, bool)), NotImplementedError, "Boolean"),
    (lambda: jnp.polyfit(jnp.ones(2), jnp.ones(2), 2), ValueError, "at least 3 points"),
    (lambda: jnp.polyfit(jnp.arange(3.0), jnp.ones(3), 2, cov=True), ValueError,
     "must exceed order"),
    (lambda: jnp.vsplit(jnp.ones(4), 2), ValueError, "2 or more dimensions"),
    (lambda: jnp.matrix_transpose(jnp.ones(3)), ValueError, "at least two-dimensional"),
    (lambda: jnp.unstack(jnp.ones(())), ValueError, "rank > 0"),
    (lambda: jnp.vectorize(lambda a, b: a, signature="(n),(n)->()")(jnp.ones(2), jnp.ones(3)),
     ValueError, "inconsistent size for core dimension 'n'"),
    (lambda: jnp.vectorize(lambda a: a, signature="(n)->()")(jnp.ones(2)), ValueError,
     r"^output shape \(2,\) does not match core dimensions \(\) on vectorized function "
     r"with excluded=frozenset\(\) and signature='\(n\)->\(\)'$"),
    (lambda: jnp.vectorize(lambda a: a, signature="(n->()"), ValueError, "not a valid gufunc"),
    (lambda: jnp.vectorize(lambda a: a, signature="(n)->()")(jnp.ones(())), ValueError,
     "not have enough dimensions"),
    (lambda: jnp.vectorize(lambda *a: a, signature="(),()->(),(),()")(1, 2), TypeError,
     r"^wrong number of output arguments: expected 3, got 2 on vectorized function"),
    (lambda: jnp.vectorize(lambda a, b: a, signature="(n),(n)->(),()")(jnp.ones(2),
                                                                     jnp.ones(2)),
     TypeError, "^output must be a tuple when multiple outputs are expected, got: "),
    (lambda: jnp.vectorize(lambda a: a, excluded={1.5}), TypeError,
     r"^jax.numpy.vectorize can only exclude integer or string arguments, but "
     r"excluded=\{1.5\}$"),
    (lambda: jnp.vectorize(lambda a: a, excluded={-1}), ValueError,
     r"^excluded=\{-1\} contains negative numbers$"),
    (lambda: jnp.vectorize(lambda a, b, c: a, signature="(k),(),(k)->(k)")(jnp.ones(2), None,
                                                                          None),
     ValueError, r"^Cannot pass None at locations \{1, 2\} with "
                 r"signature='\(k\),\(\),\(k\)->\(k\)'$"),
    (lambda: jnp.where(jnp.ones(2), 1.0), ValueError, "both or neither"),
])
def test_errors_name_the_problem(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_frompyfunc_ufunc_methods_against_numpy():
    np_add = np.frompyfunc(lambda a, b: a + 2 * b, 2, 1)
    add = jnp.frompyfunc(lambda a, b: a + 2 * b, 2, 1)
    data = np.arange(12, dtype=np.int32).reshape(3, 4) - 5
    x = jnp.asarray(data)
    as_int = lambda v: np.asarray(v, dtype=np.int64)
    cases = [
        (lambda u, v: u(v, v[::-1]), None),
        (lambda u, v: u.outer(v[0], v[:, 1]), None),
        (lambda u, v: u.reduce(v), None),
        (lambda u, v: u.reduce(v, axis=1, keepdims=True), None),
        (lambda u, v: u.reduce(v, axis=None) if u is add else u.reduce(v.ravel()), None),
        (lambda u, v: u.reduce(v, axis=0, initial=100), None),
        (lambda u, v: u.accumulate(v, axis=1), None),
        (lambda u, v: u.reduceat(v, [0, 2, 1], axis=1), None),
    ]
    for fn, _ in cases:
        want = as_int(fn(np_add, data))
        for run in (lambda v: fn(add, v), shardc.jit(lambda v: fn(add, v))):
            got = np.asarray(run(x))
            assert got.dtype == I32
            np.testing.assert_array_equal(got, want)
    at = lambda v: add.at(v[0], jnp.asarray([0, 2, 0]), jnp.asarray([1, 1, 5]), inplace=False)
    want = data[0].copy()
    np.add.at(want, [0, 2, 0], 2 * np.array([1, 1, 5]))
    for run in (at, shardc.jit(at)):
        np.testing.assert_array_equal(np.asarray(run(x)), want)
    assert isinstance(add, jnp.ufunc) and (add.nin, add.nout) == (2, 1)
    square = jnp.frompyfunc(lambda a: a * a, 1, 1)
    np.testing.assert_array_equal(np.asarray(square.at(x[0], jnp.asarray([1, 1]),
                                                       inplace=False)),
                                  [-5, 256, -3, -2])     # repeated indices compound
    with pytest.raises(ValueError, match="no identity"):
        add.reduce(jnp.zeros((0,), jnp.int32))
    with pytest.raises(ValueError, match="only supported for binary ufuncs"):
        square.reduce(x)
    with pytest.raises(TypeError, match="takes 2 positional"):
        add(x)


def test_take_along_axis_out_of_range_reads_fill_or_clips():
    x = jnp.asarray(np.array([[1.0, 2.0, 3.0]], np.float32))
    i = jnp.asarray(np.array([[0, 3, -1, -4]], np.int32))
    np.testing.assert_array_equal(np.asarray(jnp.take_along_axis(x, i, 1)),
                                  [[1.0, np.nan, 3.0, np.nan]])
    np.testing.assert_array_equal(np.asarray(jnp.take_along_axis(x, i, 1, fill_value=-1)),
                                  [[1.0, -1.0, 3.0, -1.0]])
    np.testing.assert_array_equal(np.asarray(jnp.take_along_axis(x, i, 1, mode="clip")),
                                  [[1.0, 3.0, 3.0, 1.0]])
    ints = jnp.asarray(np.array([[1, 2]], np.int32))
    out = jnp.take_along_axis(ints, jnp.asarray(np.array([[5]], np.int32)), 1)
    assert np.asarray(out).tolist() == [[np.iinfo(np.int32).min]]
    # unsigned: the largest value fills, of the array's dtype (a uint32 array was refused)
    for dtype in (np.uint32, np.uint8):
        out = jnp.take_along_axis(jnp.arange(4, dtype=dtype), jnp.array([0, 1, 9]), 0)
        assert out.dtype == dtype
        assert np.asarray(out).tolist() == [0, 1, np.iinfo(dtype).max]


def _argpartition_as_jax(x, kth):
    """JAX's argpartition along the last axis: the ``kth + 1`` smallest (stable argsort),
    then the other indices in increasing order."""
    head = np.argsort(x, axis=-1, kind="stable")[..., :kth + 1]
    in_head = np.zeros(x.shape, bool)
    np.put_along_axis(in_head, head, True, axis=-1)
    tail = np.argsort(in_head, axis=-1, kind="stable")[..., :x.shape[-1] - kth - 1]
    return np.concatenate([head, tail], -1)


def test_argpartition_ties_as_jax():
    """Among equal values the lower index comes first in both parts (JAX's top_k order)."""
    x = jnp.asarray(np.array([2.0, 1.0, 2.0, 0.0, 2.0], np.float32))
    assert np.asarray(jnp.argpartition(x, 1)).tolist() == [3, 1, 0, 2, 4]


def test_isin_ignores_nan_and_unique_size_pads():
    x = jnp.asarray(np.array([np.nan, 1.0, 2.0], np.float32))
    assert list(np.asarray(jnp.isin(x, x))) == [False, True, True]
    assert list(np.asarray(jnp.isin(x, jnp.zeros(0)))) == [False, False, False]


# --- gradients against finite differences ---------------------------------------------------------

def _numeric_grad(fn, x, eps=1e-5):
    """Central differences, in float64 on numpy, of ``sum(fn(np, x) * weights)``."""
    x = x.astype(np.float64)
    weights = _weights(fn(np, x))
    loss = lambda v: sum(float(np.sum(np.asarray(o, np.float64) * w))
                         for o, w in zip(_leaves(fn(np, v)), weights))
    grad = np.zeros_like(x)
    for index in np.ndindex(*x.shape):
        plus, minus = x.copy(), x.copy()
        plus[index] += eps
        minus[index] -= eps
        grad[index] = (loss(plus) - loss(minus)) / (2 * eps)
    return grad


def _weights(out):
    return [np.random.default_rng(5).standard_normal(np.shape(o)) for o in _leaves(out)]


def _weighted_loss(fn, weights):
    def loss(x):
        total = jnp.zeros((), jnp.float32)
        for o, w in zip(_leaves(fn(jnp, x)), weights):
            total = total + jnp.sum(o * jnp.asarray(w.astype(np.float32)))
        return total
    return loss


# (name, fn(module, x), x): away from ties, kinks and the ends of each domain
GRADIENTS = [
    ("arcsin", lambda m, x: m.arcsin(x), np.array([-0.7, 0.1, 0.5])),
    ("arccos", lambda m, x: m.arccos(x), np.array([-0.7, 0.1, 0.5])),
    ("arctan", lambda m, x: m.arctan(x), np.array([-2.0, 0.1, 3.0])),
    ("sinh_cosh", lambda m, x: (m.sinh(x), m.cosh(x)), np.array([-1.5, 0.2, 1.0])),
    ("arcsinh", lambda m, x: m.arcsinh(x), np.array([-2.0, 0.1, 3.0])),
    ("arccosh", lambda m, x: m.arccosh(x), np.array([1.5, 2.0, 4.0])),
    ("arctanh", lambda m, x: m.arctanh(x), np.array([-0.6, 0.1, 0.4])),
    ("cbrt", lambda m, x: m.cbrt(x), np.array([-2.0, 0.5, 3.0])),
    ("exp2_log2_log10", lambda m, x: (m.exp2(x), m.log2(x), m.log10(x)), np.array([0.5, 1.5])),
    ("hypot", lambda m, x: m.hypot(x, x[::-1] + 1), np.array([-2.0, 0.5, 3.0])),
    ("logaddexp", lambda m, x: (m.logaddexp(x, 1 - x), m.logaddexp2(x, 2 * x)),
     np.array([-2.0, 0.3, 3.0])),
    ("sinc", lambda m, x: m.sinc(x), np.array([-0.7, 0.3, 1.2])),
    ("ldexp", lambda m, x: m.ldexp(x, np.array([1, -2, 3], np.int32)), np.array([0.5, 1, 2.0])),
    ("sort", lambda m, x: (m.sort(x), m.sort(x, axis=0)), np.array([[3.0, -1, 2], [0.5, 4, 1]])),
    ("partition", lambda m, x: m.partition(x, 1) if m is jnp else np.concatenate(
        [np.sort(x)[:2], np.sort(x)[2:][::-1]]), np.array([3.0, -1, 2, 0.5, 4])),
    ("take_along_axis", lambda m, x: m.take_along_axis(x, np.array([[1, 0, 1]]), 0),
     np.array([[3.0, -1, 2], [0.5, 4, 1]])),
    ("cumprod", lambda m, x: (m.cumprod(x), m.cumprod(x, axis=0)),
     np.array([[1.5, -0.5, 2], [0.7, 1.2, -1.1]])),
    ("cumulative_prod", lambda m, x: m.cumulative_prod(x, include_initial=True),
     np.array([1.5, -0.5, 2, 0.7])),
    ("nan_reductions", lambda m, x: (m.nansum(x), m.nanmean(x, axis=0), m.nanvar(x),
                                     m.nanmax(x, axis=1), m.nancumsum(x)),
     np.array([[1.5, -0.5, 2], [0.7, 1.2, -1.1]])),
    ("quantile_median", lambda m, x: (m.quantile(x, 0.3), m.median(x, axis=0),
                                      m.percentile(x, 70, axis=1)),
     np.array([[1.5, -0.5, 2], [0.7, 1.2, -1.1]])),
    ("average_ptp", lambda m, x: (m.average(x, axis=0, weights=np.array([1.0, 3.0])),
                                  m.ptp(x, axis=1)), np.array([[1.5, -0.5, 2], [0.7, 1.2, -1.1]])),
    ("cov_corrcoef", lambda m, x: (m.cov(x), m.corrcoef(x)),
     np.array([[1.5, -0.5, 2, 0.1], [0.7, 1.2, -1.1, 2.0]])),
    ("diag_tril_kron", lambda m, x: (m.diag(x), m.diagonal(x, 1), m.tril(x), m.triu(x, 1),
                                     m.kron(x, x[:1])),
     np.array([[1.5, -0.5, 2], [0.7, 1.2, -1.1]])),
    ("cross", lambda m, x: m.cross(x[0], x[1]), np.array([[1.5, -0.5, 2], [0.7, 1.2, -1.1]])),
    ("diff_gradient", lambda m, x: (m.diff(x, 2), m.gradient(x), m.ediff1d(x)),
     np.array([1.5, -0.5, 2, 0.7, 1.2])),
    ("trapezoid_interp", lambda m, x: (m.trapezoid(x), m.interp(np.array([0.5, 2.5]),
                                                                np.arange(5.0), x)),
     np.array([1.5, -0.5, 2, 0.7, 1.2])),
    ("convolve_correlate", lambda m, x: (m.convolve(x, x[:2]), m.correlate(x, x[1:4], "same")),
     np.array([1.5, -0.5, 2, 0.7, 1.2])),
    ("polynomials", lambda m, x: (m.polyval(x, 0.7), m.polymul(x, x[:2]), m.polyder(x),
                                  m.polyint(x)), np.array([1.5, -0.5, 2, 0.7])),
    ("polyfit", lambda m, y: m.polyfit(np.array([-1.0, -0.2, 0.5, 1.1, 2.0]), y, 2),
     np.array([1.5, -0.5, 2, 0.7, 1.2])),
    ("i0", lambda m, x: m.i0(x), np.array([-3.0, 0.5, 9.0])),
    ("unwrap", lambda m, x: m.unwrap(x), np.array([0.1, 3.5, 7.0, 0.4])),
    ("vander", lambda m, x: m.vander(x, 4), np.array([1.5, -0.5, 2])),
    ("selection", lambda m, x: (m.select([x > 1, x < 0], [x * x, -x], 1.0),
                                m.piecewise(x, [x < 0], [lambda v: v * v, lambda v: 2 * v]),
                                m.where(x > 0, x, 0.0)), np.array([1.5, -0.5, 2, 0.7])),
    ("reshaping", lambda m, x: (m.rot90(x), m.block([[x, x]]), m.append(x, x[0]),
                                m.insert(x, 1, x[1], axis=0), m.delete(x, 0, axis=1),
                                m.resize(x, (4, 4))),
     np.array([[1.5, -0.5, 2], [0.7, 1.2, -1.1]])),
    ("products", lambda m, x: (m.matvec(x, x[0]), m.vecdot(x, x), m.vecmat(x[:, 0], x)),
     np.array([[1.5, -0.5, 2], [0.7, 1.2, -1.1], [0.2, 0.3, 0.4]])),
    ("fmax_copysign_fmod", lambda m, x: (m.fmax(x, 0.5), m.copysign(x, -1.0), m.fmod(x, 0.8),
                                         m.float_power(m.abs(x), 1.5)),
     np.array([1.5, -0.5, 2, 0.7])),
]


@pytest.mark.parametrize("name", [g[0] for g in GRADIENTS])
def test_gradients_against_finite_differences(name):
    _, fn, x = next(g for g in GRADIENTS if g[0] == name)
    want = _numeric_grad(fn, x)
    loss = _weighted_loss(fn, _weights(fn(np, x.astype(np.float64))))
    x32 = jnp.asarray(x.astype(np.float32))
    for grad in (shardc.grad(loss), shardc.jit(shardc.grad(loss))):
        got = np.asarray(grad(x32))
        assert got.dtype == F32 and got.shape == x.shape
        np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3, err_msg=name)


def test_gradients_inside_a_shard_map_body():
    """sort, cumprod and quantile differentiated through a shard_map: each device's block."""
    mesh = shardc.make_mesh((2,), ("i",))
    x = np.array([[3.0, -1, 2, 0.5], [0.7, 1.2, -1.1, 2.5]], np.float32)

    def body(block):
        row = block[0]
        value = jnp.sum(jnp.sort(row) * jnp.arange(4.0)) + jnp.sum(jnp.cumprod(row))
        return (value + jnp.quantile(row, 0.4))[None]

    def loss(v):
        return jnp.sum(shardc.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"))(v))

    def reference(v):
        return sum(np.sum(np.sort(r) * np.arange(4.0)) + np.sum(np.cumprod(r))
                   + np.quantile(r, 0.4) for r in v)
    x64, eps = x.astype(np.float64), 1e-5
    want = np.zeros_like(x64)
    for index in np.ndindex(*x.shape):
        plus, minus = x64.copy(), x64.copy()
        plus[index] += eps
        minus[index] -= eps
        want[index] = (reference(plus) - reference(minus)) / (2 * eps)
    for grad in (shardc.grad(loss), shardc.jit(shardc.grad(loss))):
        np.testing.assert_allclose(np.asarray(grad(jnp.asarray(x))), want, rtol=2e-3,
                                   atol=2e-3)


# --- the new primitives under vmap, and the cumulative extrema's gradients ----------------------

def test_sort_primitive_under_vmap_matches_a_loop():
    from compiler.tracing import bind
    from ir import primitives as prims
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 3, (5, 2, 4)).astype(np.int32)
    values = rng.standard_normal((5, 2, 4)).astype(np.float32)
    for params in ({"dimension": 1, "num_keys": 1}, {"dimension": 0, "num_keys": 2}):
        def fn(k, v):
            return bind(prims.sort_p, k, v, **params)
        want = [fn(jnp.asarray(k), jnp.asarray(v)) for k, v in zip(keys, values)]
        for in_axes in ((0, 0), (0, None), (2, 1)):
            k_in = np.moveaxis(keys, 0, in_axes[0])
            v_in = values[0] if in_axes[1] is None else np.moveaxis(values, 0, in_axes[1])
            if in_axes[1] is None:
                want_here = [fn(jnp.asarray(k), jnp.asarray(values[0])) for k in keys]
            else:
                want_here = want
            for run in (shardc.vmap(fn, in_axes=in_axes),
                        shardc.jit(shardc.vmap(fn, in_axes=in_axes))):
                got = run(jnp.asarray(k_in), jnp.asarray(v_in))
                for j in range(2):
                    np.testing.assert_array_equal(
                        np.asarray(got[j]), np.stack([np.asarray(w[j]) for w in want_here]))


@pytest.mark.parametrize("prim_name, accumulate", [("cummax", np.maximum.accumulate),
                                                    ("cummin", np.minimum.accumulate),
                                                    ("cumprod", np.multiply.accumulate)])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumulative_primitives_values_and_gradients(prim_name, accumulate, reverse):
    from compiler.tracing import bind
    from ir import primitives as prims
    prim = prims.lookup(prim_name)
    x = np.array([[0.3, -1.2, 2.0, 0.9, -0.4], [1.1, 0.2, -0.7, 1.9, 0.6]])

    def reference(v, axis):
        if reverse:
            return np.flip(accumulate(np.flip(v, axis), axis=axis), axis)
        return accumulate(v, axis=axis)
    for axis in (0, 1):
        fn = lambda m, v: (bind(prim, v, axis=axis, reverse=reverse) if m is jnp
                           else reference(v, axis))
        np.testing.assert_allclose(np.asarray(fn(jnp, jnp.asarray(x.astype(np.float32)))),
                                   reference(x, axis), rtol=1e-6)
        want = _numeric_grad(fn, x)
        loss = _weighted_loss(fn, _weights(reference(x, axis)))
        for grad in (shardc.grad(loss), shardc.jit(shardc.grad(loss))):
            np.testing.assert_allclose(np.asarray(grad(jnp.asarray(x.astype(np.float32)))),
                                       want, rtol=2e-3, atol=2e-3)


def test_replication_types_of_new_functions():
    """Invariant operands give invariant results (out_specs P() is accepted), varying ones
    varying (out_specs P() is refused, naming the axis)."""
    mesh = shardc.make_mesh((2,), ("i",))
    x = jnp.asarray(np.array([3.0, -1.0, 2.0, 0.5], np.float32))

    def body(v):
        return (jnp.sort(v), jnp.argsort(v), jnp.cumprod(v), jnp.searchsorted(jnp.sort(v), v),
                jnp.unique(v, size=4), jnp.quantile(v, 0.5), jnp.arcsinh(v))
    invariant = shardc.shard_map(body, mesh=mesh, in_specs=P(), out_specs=P())
    for got, want in zip(invariant(x), body(x)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    varying = shardc.shard_map(lambda v: jnp.sort(v + shardc.lax.axis_index("i")), mesh=mesh,
                               in_specs=P(), out_specs=P())
    with pytest.raises(ReplicationError, match="may vary over mesh axis 'i'"):
        varying(x)
    text = str(shardc.make_jaxpr(shardc.shard_map(lambda v: jnp.sort(v), mesh=mesh,
                                                  in_specs=P("i"), out_specs=P("i")))(x))
    assert "sort[dimension=0 num_keys=1]" in text and "f32[2]{i}" in text


def test_programs_with_the_new_primitives_print_and_parse_back():
    from ir.parser import parse_program
    from ir.printer import print_program
    from runtime.reference import eval_program

    def fn(x, i):
        return (jnp.sort(x, axis=0), jnp.lexsort((x[0], x[1])), jnp.searchsorted(
            jnp.sort(x[0]), x[1], side="right"), jnp.cumprod(x, axis=1), jnp.arcsinh(x),
            jnp.signbit(x), jnp.left_shift(i, 2), jnp.right_shift(i, 1),
            jnp.bitwise_count(i), jnp.nextafter(x, 0.0), jnp.exp2(jnp.cbrt(x)))
    args = (np.linspace(-2, 2, 12, dtype=np.float32).reshape(2, 6),
            np.arange(6, dtype=np.int32) - 3)
    closed = shardc.make_jaxpr(fn)(*args)
    text = closed.pretty_print(with_source=True)
    parsed = parse_program(text)
    assert print_program(parsed, with_source=True) == text
    for name in ("sort[", "searchsorted[", "cumprod[", "asinh", "signbit", "shift_left",
                 "shift_right_arithmetic", "population_count", "nextafter", "exp2", "cbrt"):
        assert name in text, name
    want = eval_program(closed.jaxpr, list(args), closed.consts)
    got = eval_program(parsed, list(args), closed.consts)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def test_array_methods_of_the_new_functions():
    data = np.array([[3.0, -1.0, 2.0], [0.5, 4.0, -2.0]], np.float32)

    def methods(x):
        return (x.sort(), x.argsort(axis=0), x[0].searchsorted(1.0), x.cumprod(axis=1),
                x.diagonal(), x.ptp(axis=0), x.trace(), x.real, x.imag, x.conj(),
                x.compress(np.array([False, True]), axis=0),
                (x > 0).astype(np.int32).choose([x, -x], mode="clip"))
    want = (np.sort(data), np.argsort(data, axis=0), np.searchsorted(np.sort(data[0]), 1.0),
            np.cumprod(data, axis=1), data.diagonal(), np.ptp(data, axis=0), data.trace(),
            data, np.zeros_like(data), data, data[1:], np.where(data > 0, -data, data))
    want = want[:2] + (np.searchsorted(data[0], 1.0),) + want[3:]
    got_eager = methods(jnp.asarray(data))
    got_jit = shardc.jit(methods)(jnp.asarray(data))
    for got in (got_eager, got_jit):
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g), w, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(jnp.asarray(data).copy()), data)
    # a condition given as host data decides the size, even under jit
    picked = shardc.jit(lambda x: jnp.compress(np.array([True, False, True]), x, axis=1))
    np.testing.assert_array_equal(np.asarray(picked(jnp.asarray(data))), data[:, [0, 2]])
    found = shardc.jit(lambda x: x[jnp.nonzero(np.array([0, 1, 1]))[0]])
    np.testing.assert_array_equal(np.asarray(found(jnp.asarray(data[0]))), data[0, 1:])


VMAPPED = {
    "unique_sized": (lambda r: jnp.unique(r, size=6, fill_value=9),
                     lambda r: _padded(np.unique(r), 6, 9)),
    "argsort": (jnp.argsort, lambda r: np.argsort(r, kind="stable")),
    "searchsorted": (lambda r: jnp.searchsorted(jnp.sort(r), r),
                     lambda r: np.searchsorted(np.sort(r), r)),
    "quantile": (lambda r: jnp.quantile(r, 0.3), lambda r: np.quantile(r, 0.3)),
    "isin": (lambda r: jnp.isin(r, r[:2]), lambda r: np.isin(r, r[:2])),
    "cumprod": (jnp.cumprod, np.cumprod),
    "nonzero_sized": (lambda r: jnp.nonzero(r, size=6)[0],
                      lambda r: _padded(np.nonzero(r)[0], 6, 0)),
    "take_along_axis": (lambda r: jnp.take_along_axis(r, jnp.argsort(r)[::-1], 0),
                        lambda r: np.sort(r)[::-1]),
}


@pytest.mark.parametrize("name", sorted(VMAPPED))
def test_new_functions_under_vmap(name):
    fn, reference = VMAPPED[name]
    x = np.random.default_rng(0).integers(-3, 3, (4, 6)).astype(np.float32)
    want = np.stack([reference(r) for r in x])
    for run in (shardc.vmap(fn), shardc.jit(shardc.vmap(fn))):
        got = np.asarray(run(jnp.asarray(x)))
        np.testing.assert_allclose(got, want.astype(got.dtype), rtol=1e-6)


def test_index_tricks_and_abstract_types():
    for got, want in ((jnp.mgrid[0:3, 1:5:2], np.mgrid[0:3, 1:5:2]),
                      (jnp.mgrid[0:1:5j], np.mgrid[0:1:5j]),
                      (jnp.mgrid[0:1:0.25], np.mgrid[0:1:0.25])):
        assert np.asarray(got).dtype == (I32 if want.dtype.kind == "i" else F32)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
    for got, want in zip(jnp.ogrid[0:2, 0:3], np.ogrid[0:2, 0:3]):
        np.testing.assert_array_equal(np.asarray(got), want)
    a, b = np.arange(3, dtype=np.float32), np.ones(3, np.float32)
    run = shardc.jit(lambda x, y: (jnp.r_[x, y, 7.0], jnp.c_[x, y], jnp.r_[0:3, x]))
    for got in (run(jnp.asarray(a), jnp.asarray(b)),
                (jnp.r_[a, b, 7.0], jnp.c_[a, b], jnp.r_[0:3, a])):
        for g, w in zip(got, (np.r_[a, b, 7.0], np.c_[a, b], np.r_[0:3, a])):
            np.testing.assert_array_equal(np.asarray(g), w)
    x = jnp.arange(10)
    np.testing.assert_array_equal(np.asarray(x[jnp.s_[2:8:3]]), [2, 5])
    assert jnp.index_exp[1:2] == (slice(1, 2),)
    assert jnp.issubdtype(jnp.float32, jnp.floating) and jnp.issubdtype(jnp.int32, jnp.integer)
    assert not jnp.issubdtype(jnp.uint8, jnp.signedinteger)
    assert jnp.euler_gamma == np.euler_gamma
    np.testing.assert_array_equal(np.asarray(jnp.mgrid[0:jnp.asarray(3)]), [0, 1, 2])
    with pytest.raises(shardc.errors.ConcretizationTypeError, match="slice start of jnp.mgrid"):
        shardc.jit(lambda lo, hi: jnp.mgrid[lo:hi])(0, 2)
    for got, want in ((jnp.r_["0,2", a, b], np.r_["0,2", a, b]),
                      (jnp.r_["1,2,0", a, b], np.r_["1,2,0", a, b]),
                      (jnp.r_["0,4,-2", a, b], np.r_["0,4,-2", a, b]),
                      (jnp.c_["0,2", a, b], np.c_["0,2", a, b]),
                      (jnp.r_[-1:1:6j, 5], np.r_[-1:1:6j, 5])):
        assert got.shape == want.shape
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-7)
    assert jnp.r_["r", a, b].shape == (1, 6) and jnp.c_["c", a, b].shape == (3, 2)
    with pytest.raises(ValueError, match="could not understand directive"):
        jnp.c_["asdfgh", [1, 2, 3]]


# --- reductions' initial=, where= and promote_integers= (JAX's checks and results) -----------

@pytest.mark.parametrize("name", ["sum", "prod", "max", "min", "all", "any", "mean", "var"])
def test_a_reduction_takes_only_a_boolean_where(name):
    kwargs = {"initial": 0.0} if name in ("max", "min") else {}
    with pytest.raises(ValueError, match=rf"jnp\.{name}: where must be None or a boolean "
                                         r"array; got where\.dtype=dtype\('int32'\)\."):
        getattr(jnp, name)(jnp.ones(4), where=np.ones(4, np.int32), **kwargs)


def test_a_reductions_initial_is_a_scalar():
    with pytest.raises(ValueError, match=r"initial value must be a scalar\. Got array of "
                                         r"shape \(1, 2\)"):
        jnp.sum(jnp.ones((2, 3)), axis=-1, initial=jnp.zeros((1, 2)))


@pytest.mark.parametrize("shape, axis, want_shape", [
    ((3, 0), None, ()), ((0, 3), 0, (3,)), ((3, 0, 2), (1, 2), (3,)), ((0, 3), 1, (0,))])
@pytest.mark.parametrize("name", ["max", "min", "nanmax", "nanmin"])
def test_an_extremum_of_nothing_is_its_initial(name, shape, axis, want_shape):
    got = getattr(jnp, name)(np.zeros(shape, np.float32), axis=axis, initial=1.0)
    np.testing.assert_array_equal(np.asarray(got), np.full(want_shape, 1.0, np.float32))


def test_a_masked_minimum_of_unsigned_integers_fills_with_their_largest():
    u = np.array([[3], [1], [2]], np.uint32)
    got = jnp.min(u, axis=-2, initial=1, keepdims=True, where=np.array([True]))
    assert got.dtype == np.uint32
    np.testing.assert_array_equal(np.asarray(got), [[1]])
    got = jnp.min(u, axis=0, where=np.array([[False], [True], [True]]), initial=5)
    np.testing.assert_array_equal(np.asarray(got), [1])
    got = jnp.min(np.zeros((0,), np.uint32), initial=5)      # nothing to compare
    assert got.dtype == np.uint32 and int(got) == 5


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.int32, np.bool_])
@pytest.mark.parametrize("name", ["sum", "prod"])
def test_sums_and_products_keep_the_input_dtype_unless_promoting(name, dtype):
    x = np.array([1, 1, 0, 1], dtype)
    promoted = getattr(jnp, name)(x)
    assert promoted.dtype == (np.uint32 if dtype == np.uint8 else np.int32)
    kept = getattr(jnp, name)(x, promote_integers=False)
    # booleans are counted in JAX's numeric dtype for them, int32, either way
    assert kept.dtype == (np.int32 if dtype == np.bool_ else dtype)
    assert np.asarray(kept) == getattr(np, name)(x.astype(np.int64))


@pytest.mark.filterwarnings("ignore:Degrees of freedom:RuntimeWarning")
def test_nanvar_and_nanstd_as_jax():
    x = np.array([[1.0, np.nan, 3.0, 4.0, 0.5], [np.nan] * 5], np.float32)
    for ddof in (0, 1):
        with np.errstate(all="ignore"):
            want = np.nanvar(x.astype(np.float64), axis=1, ddof=ddof)
        got = jnp.nanvar(x, axis=1, ddof=ddof)
        assert got.dtype == np.float32
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)      # the NaN row: NaN
        np.testing.assert_allclose(np.asarray(jnp.nanstd(x, axis=1, ddof=ddof)), np.sqrt(want),
                                   rtol=1e-6)
    assert jnp.nanvar(x, dtype=np.float16).dtype == np.float16
    assert jnp.nanvar(np.arange(5, dtype=np.int32)).dtype == np.float32
    complex_x = (x[0] + 1j * x[0]).astype(np.complex64)
    got = jnp.nanvar(complex_x)
    assert got.dtype == np.float32          # the variance of complex values is real
    np.testing.assert_allclose(float(got), np.nanvar(complex_x.astype(np.complex128)),
                               rtol=1e-6)
    with pytest.raises(ValueError, match="does not yet support real dtype parameters"):
        jnp.nanvar(complex_x, dtype=np.float32)
    # the gradient at the elements that count is finite (NaNs are zeroed after centring)
    z = jnp.arange(5.0).at[0].set(jnp.nan)
    np.testing.assert_allclose(np.asarray(shardc.grad(jnp.nanvar)(z)),
                               [0.0, -0.75, -0.25, 0.25, 0.75], atol=1e-6)


def test_average_weights_over_several_axes():
    rng = np.random.default_rng(11)
    a = rng.random((2, 3, 4, 5)).astype(np.float32)
    w = rng.random((5, 2)).astype(np.float32)       # over axes (3, 0), in that order
    want = (a * w.T[:, None, None, :]).sum((0, 3)) / w.sum()
    np.testing.assert_allclose(np.asarray(jnp.average(a, axis=(3, 0), weights=w)), want,
                               rtol=1e-5)
    got, total = jnp.average(a, axis=(3, 0), weights=w, returned=True, keepdims=True)
    assert got.shape == total.shape == (1, 3, 4, 1)
    np.testing.assert_allclose(np.asarray(total), np.full((1, 3, 4, 1), w.sum()), rtol=1e-5)
    with pytest.raises(ValueError, match="Axis must be specified when shapes of a and weights"):
        jnp.average(a, weights=w)
    with pytest.raises(ValueError, match="Shape of weights must be consistent"):
        jnp.average(a, axis=(0, 3), weights=w)
    with pytest.raises(ValueError, match=r"repeated axis: \(1, 1\)"):
        jnp.average(a, axis=(1, 1), weights=np.ones((3, 3), np.float32))


def _weighted_inverted_cdf(values, weights, q):
    """numpy's definition, one slice at a time: the first value, in sorted order, at which
    the cumulative weight reaches q of the total."""
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(weights[order])
    k = min(int(np.sum(cumulative < q * cumulative[-1])), len(values) - 1)
    return values[order][k]


def test_weighted_quantiles_by_inverted_cdf():
    rng = np.random.default_rng(12)
    a = rng.random((4, 6)).astype(np.float32)
    w = rng.integers(0, 4, (4, 6)).astype(np.float32)
    w[:, 0] += 1                        # no slice weighs nothing
    for q in (0.0, 0.3, 0.5, 1.0):
        want = [_weighted_inverted_cdf(a[k], w[k], q) for k in range(4)]
        got = jnp.quantile(a, q, axis=1, method="inverted_cdf", weights=w)
        np.testing.assert_array_equal(np.asarray(got), want)
    # weights along the axis only, percentiles, several q at once, keepdims
    got = jnp.percentile(a, np.array([25., 75.]), axis=1, method="inverted_cdf",
                         weights=w[0], keepdims=True)
    assert got.shape == (2, 4, 1)
    np.testing.assert_array_equal(np.asarray(got)[1, :, 0],
                                  [_weighted_inverted_cdf(a[k], w[0], .75) for k in range(4)])
    # unweighted inverted_cdf is numpy's
    np.testing.assert_array_equal(np.asarray(jnp.quantile(a, .7, axis=1, method="inverted_cdf")),
                                  np.quantile(a, .7, axis=1, method="inverted_cdf"))
    # a NaN value weighs nothing under nanquantile; a negative weight makes its slice NaN
    with_nan = a.copy()
    with_nan[0, 2] = np.nan
    got = jnp.nanquantile(with_nan, .5, axis=1, method="inverted_cdf", weights=w)
    keep = ~np.isnan(with_nan[0])
    assert float(got[0]) == _weighted_inverted_cdf(with_nan[0][keep], w[0][keep], .5)
    negative = w.copy()
    negative[1, 3] = -1
    got = np.asarray(jnp.quantile(a, .5, axis=1, method="inverted_cdf", weights=negative))
    assert np.isnan(got[1]) and not np.isnan(got[[0, 2, 3]]).any()
    with pytest.raises(NotImplementedError, match="Only method 'inverted_cdf' supports weights"):
        jnp.quantile(a, .5, axis=1, weights=w)
    with pytest.raises(ValueError, match="Weights cannot be complex"):
        jnp.quantile(a, .5, axis=1, method="inverted_cdf", weights=w.astype(np.complex64))
    with pytest.raises(ValueError, match=r"q must be have rank <= 1, got shape \(2, 1\)"):
        jnp.quantile(a, np.full((2, 1), .5), axis=1)


def test_reduction_errors_name_the_function_called():
    with pytest.raises(ValueError, match="non-scalar to take a cumulative sum"):
        jnp.cumulative_sum(np.float32(1))
    with pytest.raises(ValueError, match="rank 2, however axis was not set"):
        jnp.cumulative_prod(np.ones((2, 3), np.float32))
    mask = np.ones(3, np.int32)
    for fn in (jnp.nansum, jnp.nanprod, jnp.nanmax, jnp.nanmin, jnp.nanmean, jnp.nanvar,
               jnp.nanstd, jnp.std, jnp.var):
        with pytest.raises(ValueError, match=f"jnp.{fn.__name__}: where must be None or a "
                                             "boolean array"):
            fn(np.ones(3, np.float32), where=mask)


def test_mean_of_more_elements_than_int32_counts():
    # the element count divides as a float (JAX's pull 30769): 2**32 elements, shapes only
    out = shardc.eval_shape(jnp.mean, shardc.ShapeDtypeStruct((1 << 32,), np.float32))
    assert out.shape == () and out.dtype == np.float32


def test_quantile_nearest_halfway_takes_the_lower_value():
    assert float(jnp.quantile(np.arange(4.), 0.5, method="nearest")) == 1.0
    np.testing.assert_array_equal(
        np.asarray(jnp.quantile(np.arange(10.).reshape(2, 5), np.array([.125, .375, .625]),
                                axis=1, method="nearest")),
        [[0., 5.], [1., 6.], [2., 7.]])
    # weights over axes named in any order (as average's)
    x = np.arange(24.).reshape(2, 3, 4)
    w = np.arange(12.).reshape(4, 3)
    got = jnp.quantile(x, 0.5, axis=(2, 1), method="inverted_cdf", weights=w)
    want = [_weighted_inverted_cdf(x[k].ravel(), w.T.ravel(), 0.5) for k in range(2)]
    np.testing.assert_array_equal(np.asarray(got), want)


def test_sizes_given_as_rank_0_arrays():
    assert jnp.zeros(jnp.asarray(3)).shape == (3,)
    assert jnp.full(jnp.asarray(2), 1.5).shape == (2,)
    assert jnp.tile(jnp.arange(2), jnp.asarray(2)).shape == (4,)


def test_var_and_std_as_jax():
    x = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    # no more elements than ddof: NaN (JAX's issue 21330), not a negative or infinite value
    for size in (0, 1, 2):
        for extra in (0, 1, 2):
            assert np.isnan(float(jnp.var(np.arange(size), ddof=size + extra)))
            assert np.isnan(float(jnp.std(np.arange(size), ddof=size + extra)))
    np.testing.assert_allclose(np.asarray(jnp.var(x, axis=1, ddof=1, keepdims=True)),
                               np.var(x, axis=1, ddof=1, keepdims=True), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(jnp.var(x, axis=0, correction=1)),
                               np.var(x, axis=0, ddof=1), rtol=1e-6)
    mask = np.array([[True, False, True], [False, False, True]])
    got = np.asarray(jnp.var(x, axis=1, ddof=1, where=mask))
    np.testing.assert_allclose(got[0], np.var([0., 2.], ddof=1))
    assert np.isnan(got[1])                 # one element left, ddof 1
    c = np.array([1 + 2j, 3 - 1j, 0.5j], np.complex64)
    want = np.var(c.astype(np.complex128))
    assert jnp.var(c).dtype == np.float32   # the variance of complex values is real ...
    got = jnp.var(c, dtype=np.complex64)    # ... and complex where dtype asks for it
    assert got.dtype == np.complex64
    np.testing.assert_allclose(complex(got), want, rtol=1e-6)
    assert jnp.std(c, dtype=np.complex64).dtype == np.complex64
    assert jnp.var(np.arange(5, dtype=np.int8)).dtype == np.float32
    assert jnp.var(x, dtype=np.float16).dtype == np.float16
    with pytest.raises(ValueError, match="ddof and correction can't be provided"):
        jnp.var(x, ddof=1, correction=1)
    with pytest.raises(ValueError, match="dtype argument to jnp.std must be inexact; got int32"):
        jnp.std(x, dtype=np.int32)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_cov_edge_cases_as_numpy_and_jax():
    x = np.arange(3.0).reshape(1, 3)
    got = jnp.cov(x, rowvar=False)          # three variables of one observation each
    assert got.shape == (3, 3) and np.isnan(np.asarray(got)).all()
    assert np.isnan(float(jnp.cov(np.zeros((0,), np.float32))))          # no observations
    assert jnp.cov(np.zeros((3, 0), np.float32)).shape == (3, 3)
    assert jnp.cov(np.zeros((0, 3), np.float32)).shape == (0, 0)         # no variables
    rng = np.random.default_rng(9)
    m = rng.standard_normal((3, 6)).astype(np.float32)
    fw = np.array([1, 2, 1, 3, 1, 1])
    np.testing.assert_allclose(np.asarray(jnp.cov(m, fweights=fw)), np.cov(m, fweights=fw),
                               rtol=1e-5)
    with pytest.raises(TypeError, match="fweights must be integer"):
        jnp.cov(m, fweights=fw.astype(np.float32))
    assert jnp.cov(m, dtype=np.float16).dtype == np.float16
    for half in (np.float16, shardc.numpy.bfloat16):            # kept, as JAX's
        assert jnp.cov(m.astype(half)).dtype == half == jnp.corrcoef(m.astype(half)).dtype
    assert jnp.cov(np.arange(6).reshape(2, 3)).dtype == np.float32
    c = (m + 1j * m[::-1]).astype(np.complex64)
    np.testing.assert_allclose(np.asarray(jnp.cov(c)), np.cov(c), rtol=1e-5, atol=1e-6)


def test_numpy_functions_as_jax_at_their_edges():
    """Cases where shardc answered otherwise than JAX 0.10.2 (each against numpy's meaning)."""
    x = jnp.zeros(4)
    # put_along_axis drops out-of-range updates (clamps them with mode='clip'), as a scatter
    got = jnp.put_along_axis(x, jnp.array([1, 4, -5]), 9.0, axis=0, inplace=False)
    np.testing.assert_array_equal(got, [0, 9, 0, 0])
    got = jnp.put_along_axis(x, jnp.array([1, 4]), 9.0, axis=0, inplace=False, mode="clip")
    np.testing.assert_array_equal(got, [0, 9, 0, 9])
    # einsum: a boolean beside numbers sums as a number; counts in preferred_element_type
    assert float(jnp.einsum("ij,jk->", jnp.ones((2, 3)), jnp.ones((3, 4), bool))) == 24.0
    assert int(jnp.einsum("jk->", jnp.ones((3, 4), bool),
                          preferred_element_type=jnp.int32)) == 12
    # numpy arrays come back as arrays of the canonical dtype even where nothing moves
    host = np.arange(6.0).reshape(2, 3)
    for out in (jnp.roll(host, 3, axis=1), jnp.einsum("ij", host)):
        assert isinstance(out, shardc.Array) and out.dtype == np.float32
    # complex searchsorted orders by real part, then imaginary
    table = np.array([0j, 1, 1 + 1j, 1 + 2j, 2], np.complex64)
    queries = np.array([1 + 1j, 1 + 3j, 1 - 1j], np.complex64)
    for side in ("left", "right"):
        np.testing.assert_array_equal(jnp.searchsorted(table, queries, side=side),
                                      np.searchsorted(table, queries, side=side))
    # vecmat conjugates its vector; inner of a scalar multiplies
    np.testing.assert_array_equal(jnp.vecmat(jnp.array([1j, 1.0]), jnp.eye(2, dtype=np.complex64)),
                                  [-1j, 1])
    np.testing.assert_array_equal(jnp.inner(jnp.ones(2), 3.0), [3.0, 3.0])
    a, b = jnp.atleast_1d(1.0, jnp.ones((2, 2)))
    assert a.shape == (1,) and b.shape == (2, 2)
    assert [v.shape for v in jnp.atleast_2d(1.0, jnp.ones(3))] == [(1, 1), (1, 3)]
    # histogram of one value: numpy's unit-wide range around it
    counts, edges = jnp.histogram(jnp.ones(5), 4)
    want_counts, want_edges = np.histogram(np.ones(5), 4)
    np.testing.assert_array_equal(counts, want_counts)
    np.testing.assert_allclose(edges, want_edges)
    assert [p.tolist() for p in map(np.asarray, jnp.array_split(jnp.arange(6), [2, 5]))] == \
        [[0, 1], [2, 3, 4], [5]]
    np.testing.assert_array_equal(jnp.bincount(jnp.array([True, False, True]), length=3),
                                  [1, 2, 0])
    np.testing.assert_array_equal(jnp.delete(jnp.arange(3), np.array([True, False, True])), [1])
    # set operations: setxor1d pads with its smallest element; setdiff1d keeps ar1's dtype
    np.testing.assert_array_equal(jnp.setxor1d(jnp.array([5, 1, 3]), jnp.array([3, 4]),
                                               size=5), [1, 4, 5, 1, 1])
    assert jnp.setdiff1d(jnp.array([1, 2, 3]), jnp.array([2.0])).dtype == np.int32


def test_array_api_unique_functions_keep_nans_apart():
    """unique_values/counts/inverse/all are the array API's: NaNs are distinct (JAX's
    equal_nan=False), where jnp.unique's default merges them."""
    x = jnp.array([1.0, np.nan, np.nan, 1.0, 2.0])
    values = np.asarray(jnp.unique_values(x))
    assert values.shape == (4,) and np.isnan(values[2:]).all()
    np.testing.assert_array_equal(jnp.unique_counts(x).counts, [2, 1, 1, 1])
    assert jnp.unique(x).shape == (3,)


def test_argpartition_gives_each_index_once_when_values_tie_across_kth():
    a = np.array([[6, 255, 0, 4, 3, 1, 0, 7, 5, 2, 3]], np.uint8)
    got = np.asarray(jnp.argpartition(a, 4, axis=-1))
    np.testing.assert_array_equal(got, [[2, 6, 5, 9, 4, 0, 1, 3, 7, 8, 10]])   # JAX's
    assert sorted(got[0]) == list(range(11))
    b = np.arange(12.0).reshape(3, 4)[::-1] % 5
    got = np.asarray(jnp.argpartition(b, 1, axis=0))
    np.testing.assert_array_equal(np.sort(got, axis=0), np.tile(np.arange(3)[:, None], 4))
    np.testing.assert_array_equal(np.take_along_axis(b, got, 0)[:2].max(0),
                                  np.sort(b, axis=0)[1])


def test_ldexp_of_zero_with_a_huge_exponent_is_zero():
    assert float(jnp.ldexp(np.float32(0), np.int32(1000))) == 0.0
    assert float(jnp.ldexp(np.float16(0), np.int8(100))) == 0.0
    assert np.isinf(float(jnp.ldexp(np.float32(1.5), np.int32(1000))))
    assert float(jnp.ldexp(np.float32(1.5), np.int32(3))) == 12.0


def test_trapezoid_weighs_each_interval_by_an_array_dx():
    rng = np.random.RandomState(0)
    for y_shape, dx_shape, axis in [((3, 4, 5), (3, 5), 1), ((10,), (1,), -1), ((4, 6), (6,), 0)]:
        y = rng.rand(*y_shape).astype(np.float32)
        dx = rng.rand(*dx_shape).astype(np.float32)
        want = np.trapezoid(y, dx=dx, axis=axis)
        got = jnp.trapezoid(y, dx=dx, axis=axis)
        assert got.shape == want.shape
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5)


def test_array_copies_an_array():
    x = jnp.asarray([0, 1])
    c = jnp.array(x)
    assert c is not x
    shardc.jit(lambda a: a.at[0].set(77), donate_argnums=0)(x)
    assert x.is_deleted() and np.asarray(c).tolist() == [0, 1]


@pytest.mark.parametrize("axis,count", [(1, 20), (1, 40), (-1, 33), (None, 200), (0, 9),
                                        (1, 3), (1, -3), (None, -3), (-1, None)])
def test_unpackbits_pads_a_count_past_the_bits_with_zeros(axis, count):
    x = np.arange(24, dtype=np.uint8).reshape(1, 2, 3, 4) * 9
    for order in ("big", "little"):
        want = np.unpackbits(x, axis=axis, count=count, bitorder=order)
        got = jnp.unpackbits(jnp.asarray(x), axis=axis, count=count, bitorder=order)
        assert got.dtype == np.uint8 and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    # a negative count past the bits leaves none (JAX's; numpy raises)
    assert jnp.unpackbits(jnp.asarray(x), axis=1, count=-20).shape == (1, 0, 3, 4)


def test_view_counts_sub_byte_dtypes_in_bits():
    # values printed by JAX: nibbles low first; four int4 to an int16
    a = jnp.array([0x21, 0x43], jnp.uint8)
    assert np.asarray(a.view(jnp.uint4)).astype(int).tolist() == [1, 2, 3, 4]
    b = jnp.arange(8, dtype=jnp.int4)
    wide = b.view(jnp.int16)
    assert wide.shape == (2,) and np.asarray(wide).tolist() == [12816, 30292]
    np.testing.assert_array_equal(wide.view(jnp.int4), b)
    c = jnp.array([True, False] * 4)
    assert np.asarray(c.view(jnp.uint4)).astype(int).tolist() == [1, 0, 0, 0] * 4
    assert jnp.zeros((64,), jnp.int4).view(jnp.int16).shape == (16,)
    assert jnp.zeros((64,), bool).view(jnp.uint4).shape == (128,)


def test_array_of_nested_empty_lists_is_an_empty_float32_array():
    # no values to promote: numpy's float, canonically float32, as JAX's
    for value, shape in (([[], []], (2, 0)), ([[]], (1, 0)), ([[[]]], (1, 1, 0)),
                         (([], []), (2, 0))):
        got = jnp.array(value)
        assert got.shape == shape and got.dtype == np.float32
    assert jnp.asarray([[], []], dtype=jnp.int32).dtype == np.int32
    assert jnp.array([[], []], dtype=bool).shape == (2, 0)


def test_einsum_takes_numpys_interleaved_sublists():
    a = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    b = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(jnp.einsum(jnp.asarray(a), [0, 1], jnp.asarray(b), [1, 2], [0, 2]),
                               a @ b)
    np.testing.assert_array_equal(jnp.einsum(jnp.asarray(a), [0, 1], [1, 0]), a.T)
    np.testing.assert_array_equal(jnp.einsum(jnp.asarray(a), [Ellipsis, 1]), a)


def test_sign_keeps_the_sign_of_zero_and_positive_takes_booleans():
    got = np.asarray(jnp.sign(jnp.array([-0.0, 0.0, -2.0])))
    np.testing.assert_array_equal(np.signbit(got), [True, False, True])
    assert np.asarray(jnp.positive(jnp.array([True]))).tolist() == [True]


@pytest.mark.parametrize("fn, op", [(jnp.argmax, "gt"), (jnp.argmin, "lt")])
def test_arg_extrema_refuse_complex_as_jax(fn, op):
    with pytest.raises(TypeError, match=f"{op} does not accept dtype complex64 at position 0"):
        fn(jnp.array([1 + 1j, 2 + 0j]))


def test_complex_log10_and_log2_scale_each_part():
    z = jnp.array([0j, complex(np.inf, 1.0), complex(-0.0, 0.0)], jnp.complex64)
    for fn, base in ((jnp.log10, 10.0), (jnp.log2, 2.0)):
        got = np.asarray(fn(z))
        np.testing.assert_array_equal(got.real, [-np.inf, np.inf, -np.inf])
        np.testing.assert_allclose(got.imag, [0.0, 0.0, np.pi / np.log(base)], rtol=1e-6)


def test_histogram_counts_are_int32_without_weights_or_density():
    x, y = jnp.array([0.1, 0.5, 0.7, 0.2]), jnp.array([0.3, 0.9, 0.1, 0.4])
    counts, _, _ = jnp.histogram2d(x, y, bins=2)
    expected, _, _ = np.histogram2d(np.asarray(x), np.asarray(y), bins=2)
    assert counts.dtype == np.int32
    np.testing.assert_array_equal(counts, expected)
    assert jnp.histogramdd(jnp.stack([x, y], 1), bins=3)[0].dtype == np.int32
    assert jnp.histogram2d(x, y, bins=2, density=True)[0].dtype == np.float32
    assert jnp.histogram2d(x, y, bins=2, weights=jnp.ones(4))[0].dtype == np.float32
    assert jnp.histogram(x, bins=3)[0].dtype == np.float32


def test_histogramdd_bins_integers_by_float32_edges():
    # JAX's edges are float32 linspaces blended from the bounds: the first column's inner
    # edges are -1.9999998 and 1.0000002 (numpy's float64 ones are -2 and 1), so its -2 and
    # 1 fall in the bins above numpy's. Counts recorded from JAX 0.10.2.
    x = np.array([[4, 2, 0], [-3, -2, -5], [-5, -5, -4], [3, 2, 5], [0, 1, 5], [3, 1, 0],
                  [1, 5, -2], [3, 2, -5], [-1, 4, 1], [-5, 3, 3]], np.int32)
    counts, edges = jnp.histogramdd(x, bins=3)
    np.testing.assert_array_equal(counts, [
        [[2, 0, 0], [0, 0, 0], [0, 0, 1]], [[0, 0, 0], [0, 0, 1], [1, 1, 0]],
        [[0, 0, 0], [0, 1, 0], [1, 1, 1]]])
    edges = np.asarray(edges[0])
    assert edges.dtype == np.float32 and edges[1] > -2 and edges[2] > 1
    np.testing.assert_allclose(edges, [-5, -2, 1, 4], rtol=3e-7)


def test_unique_pads_its_indices_with_the_first_sorted_elements():
    # as JAX's (its nonzero pads the positions it picks with 0: perm[0])
    x = jnp.array([3, 1, 2, 1, 3])
    np.testing.assert_array_equal(jnp.unique(x, size=5, return_index=True)[1], [1, 2, 0, 1, 1])
    np.testing.assert_array_equal(jnp.unique_all(jnp.array([3, 1, 1]), size=3).indices,
                                  [1, 0, 1])
    got = jnp.intersect1d(jnp.array([5, 1, 3, 1]), jnp.array([3, 1, 7]), return_indices=True,
                          size=3)
    np.testing.assert_array_equal(got[1], [1, 2, 4])        # padded with len(ar1)
    np.testing.assert_array_equal(got[2], [1, 0, 3])        # padded with len(ar2)


def test_setxor1d_drops_every_value_found_twice_as_numpy_does():
    a, b = np.array([1, 1, 2, 5, 7], np.int32), np.array([2, 3, 3, 9], np.int32)
    for assume_unique in (False, True):
        # assumed unique, a value repeated within one array is dropped too (numpy's sort
        # and neighbour test, which JAX's follows)
        want = np.setxor1d(a, b, assume_unique)
        got = jnp.setxor1d(a, b, assume_unique=assume_unique)
        np.testing.assert_array_equal(np.asarray(got), want)
        sized = shardc.jit(lambda u, v: jnp.setxor1d(u, v, assume_unique=assume_unique,
                                                     size=6, fill_value=-1))(a, b)
        np.testing.assert_array_equal(np.asarray(sized)[:len(want)], want)
        assert list(np.asarray(sized)[len(want):]) == [-1] * (6 - len(want))
    assert list(np.asarray(jnp.setxor1d(a, b, assume_unique=True))) == [5, 7, 9]
    nan = np.float32(np.nan)        # NaN is unlike NaN: each array's one NaN is kept
    got = jnp.setxor1d(np.array([nan, 1, nan], np.float32), np.array([1, nan], np.float32))
    assert np.isnan(np.asarray(got)).sum() == 2 and np.asarray(got).size == 2


def test_unique_along_an_axis_of_empty_slices_and_with_a_slice_to_fill():
    # empty slices are all alike, as JAX's: one distinct slice, counted for every row
    values, inverse, counts = jnp.unique(np.zeros((3, 0), np.int32), axis=0,
                                         return_inverse=True, return_counts=True)
    assert np.asarray(values).shape == (1, 0)
    assert list(np.asarray(inverse)) == [0, 0, 0] and list(np.asarray(counts)) == [3]
    values, counts = jnp.unique(np.zeros((0, 4), np.int32), axis=0, return_counts=True)
    assert np.asarray(values).shape == (0, 4) and np.asarray(counts).shape == (0,)
    assert np.asarray(jnp.unique(np.zeros((3, 0), np.float32), axis=1)).shape == (3, 0)
    # fill_value: one slice (the array without the axis), padding each missing slice
    x = np.array([[[0, 1, 0, 2]], [[1, 1, 1, 2]]], np.float32)            # (2, 1, 4)
    fill = np.full((2, 1), 7, np.float32)
    got = np.asarray(jnp.unique(x, axis=2, size=5, fill_value=fill))
    want = np.unique(x, axis=2)                                          # 3 distinct
    np.testing.assert_array_equal(got[..., :3], want)
    np.testing.assert_array_equal(got[..., 3:], np.full((2, 1, 2), 7))


def test_unique_makes_a_complex_number_with_a_nan_part_one_nan():
    x = np.array([1 + 1j, complex(np.nan, 0), complex(0, np.nan), 1 + 1j, -1j], np.complex64)
    values, index, inverse, counts = jnp.unique(x, return_index=True, return_inverse=True,
                                                return_counts=True)
    got = np.asarray(values)
    np.testing.assert_array_equal(got[:2], [-1j, 1 + 1j])
    assert got.size == 3 and np.isnan(got[2].real) and got[2].imag == 0     # (JAX's nan+0j)
    assert list(np.asarray(index)) == [4, 0, 1] and list(np.asarray(counts)) == [1, 2, 2]
    assert list(np.asarray(inverse)) == [1, 2, 2, 1, 0]


def test_vectorize_passes_none_through():
    # as JAX's: None is no operand to loop over, the function gets it as it is
    add_unless_none = jnp.vectorize(lambda x, y: x if y is None else x + y)
    x = np.arange(6).reshape(2, 3)
    np.testing.assert_array_equal(np.asarray(add_unless_none(jnp.asarray(x), None)), x)
    np.testing.assert_array_equal(np.asarray(add_unless_none(jnp.asarray(x), x)), 2 * x)
    scaled = jnp.vectorize(lambda x, s, y: x * (1 if s is None else s) + y,
                           signature="(k),(),(k)->(k)")
    np.testing.assert_array_equal(np.asarray(scaled(x, None, x[0])), x + x[0])


@pytest.mark.parametrize("signature", [None, "(),()->()"])
def test_vectorize_follows_the_rank_promotion_flag(signature):
    add = jnp.vectorize(lambda a, b: a + b, signature=signature)
    message = (r"^operands with shapes \[\(4, 3\), \(3,\)\] require rank promotion for "
               rf"jnp.vectorize function with signature {re.escape(str(signature))}\. Set the "
               r"jax_numpy_rank_promotion config option to 'allow'")
    with shardc.numpy_rank_promotion("raise"):
        with pytest.raises(ValueError, match=message):
            add(jnp.ones((4, 3)), jnp.ones(3))
        assert add(jnp.ones((4, 3)), jnp.ones(())).shape == (4, 3)    # scalars promote freely
    with shardc.numpy_rank_promotion("warn"):
        with pytest.warns(UserWarning, match=message):
            got = add(jnp.ones((4, 3)), jnp.ones(3))
    np.testing.assert_array_equal(np.asarray(got), np.full((4, 3), 2.0))


def test_frompyfunc_outer_needs_no_rank_promotion():
    """``outer`` gives both operands the result's rank, so it runs where rank promotion is
    refused (as JAX's tests run), with numpy's values."""
    add = jnp.frompyfunc(lambda a, b: a + 2 * b, 2, 1)
    a, b = np.arange(12.).reshape(4, 3), np.arange(4.)
    with shardc.numpy_rank_promotion("raise"):
        got = add.outer(a, b)
    np.testing.assert_array_equal(np.asarray(got), np.add.outer(a, 2 * b))
    with shardc.numpy_rank_promotion("raise"), pytest.raises(ValueError,
                                                             match="require rank promotion"):
        add(a, np.arange(3.))
