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
from typing import Callable

import numpy as np
import pytest

import shardc
import shardc.numpy as jnp
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
]


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
        _assert_same(jitted(*[jnp.asarray(a) for a in args]), want, row, dtype)


@pytest.mark.parametrize("name", sorted(n for n, r in _rows_by_name().items() if r.shard))
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
