"""``shardc.numpy``, ``shardc.nn`` and ``shardc.lax.dot_general`` against numpy.

Every case runs eagerly and under ``shardc.jit`` and is held against numpy on the same
float32/int32 inputs; dtypes are the ones JAX gives with x64 off (float32/int32 defaults,
Python scalars weakly typed), shapes are numpy's.
"""
from __future__ import annotations

import operator
import re
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import shardc
import shardc.numpy as jnp
from shardc import lax, nn

F32, I32, BOOL = np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.bool_)
HYPOTHESIS = settings(derandomize=True, deadline=None, max_examples=40)


def _values(shape, dtype, seed=0, low=-5, high=5):
    """Deterministic test data: floats in [low, high), ints in [low, high], with some zeros."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype) == BOOL:
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        return rng.integers(low, high + 1, size=shape).astype(dtype)
    return rng.uniform(low, high, size=shape).astype(dtype)


def assert_matches(got, want, dtype, rtol=1e-5, atol=1e-5):
    """``got`` has ``want``'s shape, exactly ``dtype``, and ``want``'s values."""
    got = np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == np.dtype(dtype), (got.dtype, dtype)
    want = want.astype(dtype)
    if np.issubdtype(got.dtype, np.inexact):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)


def check(fn, args, want, dtype, **tol):
    """``fn(*args)`` eagerly and under ``jit`` both match ``want`` (shape, dtype, values)."""
    args = [jnp.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
    assert_matches(fn(*args), want, dtype, **tol)
    assert_matches(shardc.jit(fn)(*args), want, dtype, **tol)


# --- creation ---------------------------------------------------------------------------------

@pytest.mark.parametrize("make, want, dtype", [
    (lambda: jnp.array([1, 2, 3]), [1, 2, 3], I32),
    (lambda: jnp.array([1, 2.5]), [1, 2.5], F32),
    (lambda: jnp.array([True, False]), [True, False], BOOL),
    (lambda: jnp.array(np.arange(4.0)), np.arange(4.0), F32),           # float64 -> float32
    (lambda: jnp.asarray(np.arange(4)), np.arange(4), I32),             # int64 -> int32
    (lambda: jnp.asarray([[1, 2], [3, 4]], dtype=jnp.float32), [[1, 2], [3, 4]], F32),
    (lambda: jnp.asarray(3), 3, I32),
    (lambda: jnp.asarray(3.0), 3.0, F32),
    (lambda: jnp.arange(5), np.arange(5), I32),
    (lambda: jnp.arange(8 * 16.), np.arange(8 * 16.), F32),
    (lambda: jnp.arange(2, 11, 3), np.arange(2, 11, 3), I32),
    (lambda: jnp.arange(5, 0, -2), np.arange(5, 0, -2), I32),
    (lambda: jnp.arange(0, 1, 0.25), np.arange(0, 1, 0.25), F32),
    (lambda: jnp.arange(3, dtype=jnp.float32), np.arange(3), F32),
    (lambda: jnp.arange(0), np.arange(0), I32),
    (lambda: jnp.zeros((2, 3)), np.zeros((2, 3)), F32),
    (lambda: jnp.zeros(4, dtype=jnp.int32), np.zeros(4), I32),
    (lambda: jnp.ones((2,), jnp.bool_), np.ones(2, bool), BOOL),
    (lambda: jnp.full((2, 2), 7), np.full((2, 2), 7), I32),
    (lambda: jnp.full((2, 2), 7.5), np.full((2, 2), 7.5), F32),
    (lambda: jnp.full(3, 2, dtype=jnp.float32), np.full(3, 2.0), F32),
    (lambda: jnp.eye(3), np.eye(3), F32),
    (lambda: jnp.eye(3, 4, k=1), np.eye(3, 4, k=1), F32),
    (lambda: jnp.eye(3, k=-1, dtype=jnp.int32), np.eye(3, k=-1), I32),
    (lambda: jnp.linspace(0, 1, 5), np.linspace(0, 1, 5), F32),
    (lambda: jnp.linspace(-1, 1, 7), np.linspace(-1, 1, 7), F32),
    (lambda: jnp.linspace(0, 1, 4, endpoint=False), np.linspace(0, 1, 4, endpoint=False), F32),
    (lambda: jnp.linspace(2, 3, 1), np.linspace(2, 3, 1), F32),
    (lambda: jnp.linspace(-10, 0, 4, dtype=jnp.int32), np.linspace(-10, 0, 4, dtype=np.int32),
     I32),
])
def test_creation(make, want, dtype):
    assert_matches(make(), want, dtype)
    assert_matches(shardc.jit(make)(), want, dtype)


def test_linspace_endpoint_is_exact():
    out = np.asarray(jnp.linspace(0.1, 0.7, 13))
    assert out[-1] == np.float32(0.7) and out[0] == np.float32(0.1)


def test_linspace_blends_the_bounds_in_the_working_dtype_as_jax():
    # start * (1 - t) + stop * t with t = k / div rounded to bfloat16 first: values recorded
    # from JAX 0.10.2 (start + k * step gives 0.200195, 0.400391, ... here)
    out = np.asarray(jnp.linspace(0, 3, 16, dtype=jnp.bfloat16)).astype(np.float32)
    np.testing.assert_array_equal(out[[1, 2, 4, 8, 13]],
                                  [0.201171875, 0.40234375, 0.8046875, 1.609375, 2.59375])
    # t = k / 6 divides by a broadcast scalar: by its reciprocal, as XLA does
    t = np.arange(7, dtype=np.float32) * (np.float32(1) / np.float32(6))
    want = np.float32(0.1) * (1 - t) + np.float32(0.7) * t
    np.testing.assert_array_equal(np.asarray(jnp.linspace(0.1, 0.7, 7))[:6], want[:6])


@pytest.mark.parametrize("like, fill, dtype", [
    (lambda x: jnp.zeros_like(x), 0, I32),
    (lambda x: jnp.ones_like(x), 1, I32),
    (lambda x: jnp.full_like(x, 7), 7, I32),
    (lambda x: jnp.full_like(x, 2.5, dtype=jnp.float32), 2.5, F32),
    (lambda x: jnp.zeros_like(x, dtype=jnp.float32), 0, F32),
    (lambda x: jnp.ones_like(x, dtype=bool), True, BOOL),
])
def test_like_constructors(like, fill, dtype):
    check(like, [_values((2, 3), I32)], np.full((2, 3), fill), dtype)
    check(like, [_values((4,), F32)], np.full((4,), fill), F32 if dtype == I32 else dtype)


# --- type promotion (JAX, x64 off) ------------------------------------------------------------

i32 = np.arange(1, 7, dtype=np.int32).reshape(2, 3)
f32 = np.linspace(-2, 3, 6, dtype=np.float32).reshape(2, 3)
b8 = np.array([[True, False, True], [False, False, True]])


@pytest.mark.parametrize("fn, args, dtype", [
    (lambda x: x * 2.0, [i32], F32),                   # weak float lifts int to float32
    (lambda x: x * 2, [f32], F32),                     # weak int keeps float32
    (lambda x: x + 1, [i32], I32),
    (lambda x, y: x + y, [i32, f32], F32),
    (lambda x, y: x * y, [b8, b8], BOOL),              # bool * bool stays bool
    (lambda x, y: x + y, [b8, b8], BOOL),
    (lambda x, y: x + y, [b8, i32], I32),
    (lambda x: x + 1, [b8], I32),                      # weak int lifts bool to int32
    (lambda x: x * 1.5, [b8], F32),
    (lambda x: x / 2, [i32], F32),                     # true division of ints is float32
    (lambda x, y: x / y, [i32, i32], F32),
    (lambda x: x // 2, [i32], I32),
    (lambda x: x % 2.0, [i32], F32),
    (lambda x: x * np.float32(2), [i32], F32),         # numpy scalars are strongly typed
    (lambda x: x + jnp.ones(3, jnp.float16), [i32], np.dtype(np.float16)),
    (lambda x: x + jnp.ones(3, jnp.int8), [i32], I32),
    (lambda x: jnp.ones(3, jnp.int8) + 3, [i32], np.dtype(np.int8)),
    (lambda x: jnp.ones(3, jnp.uint8) + jnp.ones(3, jnp.int8), [i32], np.dtype(np.int16)),
    (lambda x: jnp.ones(3, jnp.float16) * 2.5, [i32], np.dtype(np.float16)),
    (lambda x: x > 1, [f32], BOOL),
    (lambda x: jnp.where(x > 2, x, 0.5), [i32], F32),
    (lambda x: jnp.maximum(x, 2.5), [i32], F32),
])
def test_promotion(fn, args, dtype):
    out = fn(*[jnp.asarray(a) for a in args])
    assert out.dtype == dtype
    assert shardc.jit(fn)(*[jnp.asarray(a) for a in args]).dtype == dtype


def test_result_type():
    assert jnp.result_type(jnp.int32, 2.0) == F32
    assert jnp.result_type(jnp.float32, 2) == F32
    assert jnp.result_type(jnp.int32, jnp.float32) == F32
    assert jnp.result_type(jnp.bool_, 1) == I32
    assert jnp.result_type(np.float64) == F32
    assert jnp.result_type("int64") == I32
    assert jnp.result_type(jnp.int8, jnp.uint8) == np.dtype(np.int16)


# --- elementwise arithmetic and comparisons ---------------------------------------------------

BINARY = [
    ("add", jnp.add, np.add), ("subtract", jnp.subtract, np.subtract),
    ("multiply", jnp.multiply, np.multiply), ("maximum", jnp.maximum, np.maximum),
    ("minimum", jnp.minimum, np.minimum), ("equal", jnp.equal, np.equal),
    ("not_equal", jnp.not_equal, np.not_equal), ("less", jnp.less, np.less),
    ("less_equal", jnp.less_equal, np.less_equal), ("greater", jnp.greater, np.greater),
    ("greater_equal", jnp.greater_equal, np.greater_equal),
]


@pytest.mark.parametrize("name, fn, ref", BINARY, ids=[b[0] for b in BINARY])
@pytest.mark.parametrize("dtype", [F32, I32])
def test_binary(name, fn, ref, dtype):
    x, y = _values((2, 3), dtype, 1), _values((3,), dtype, 2)
    out_dtype = BOOL if ref(np.ones(1), np.ones(1)).dtype == BOOL else dtype
    check(fn, [x, y], ref(x, y), out_dtype)


@pytest.mark.parametrize("dtype", [F32, I32])
def test_floor_divide_and_remainder_with_negatives(dtype):
    x = np.array([-7, -6, -5, -1, 0, 1, 5, 6, 7], dtype)[:, None]
    y = np.array([-3, -2, 2, 3], dtype)[None, :]
    check(jnp.floor_divide, [x, y], np.floor_divide(x, y), dtype)
    check(jnp.remainder, [x, y], np.remainder(x, y), dtype)
    check(lambda a, b: a // b, [x, y], x // y, dtype)
    check(lambda a, b: a % b, [x, y], x % y, dtype)
    check(lambda a: a % -4, [x], x % dtype.type(-4), dtype)
    check(lambda a: 7 // a, [y], dtype.type(7) // y, dtype)
    check(lambda a: -7 % a, [y], dtype.type(-7) % y, dtype)


def test_float_floor_divide_is_numpys():
    # floor(1 / 0.1) is 10, but numpy (and JAX) give 9: the quotient is computed exactly.
    x = np.array([1.0, -1.0, 2.5, -2.5, 0.3], F32)
    y = np.array([0.1, 0.1, -0.5, 0.7, 0.1], F32)
    check(jnp.floor_divide, [x, y], np.floor_divide(x, y), F32, rtol=0, atol=0)
    check(jnp.remainder, [x, y], np.remainder(x, y), F32)


def test_true_divide():
    x, y = _values((4,), I32, 3), np.array([1, -2, 3, 4], I32)
    check(jnp.divide, [x, y], x / y, F32)
    check(lambda a: 1 / a, [y], 1 / y, F32)


@pytest.mark.parametrize("fn, ref, dtype", [
    (lambda x: x ** 2, lambda x: x ** 2, F32),
    (lambda x: x ** 3, lambda x: x ** 3, I32),
    (lambda x: x ** 0, lambda x: x ** 0, I32),
    (lambda x: x ** 2.5, lambda x: x ** 2.5, F32),
    (lambda x: 2 ** x, lambda x: 2 ** x, I32),
    (lambda x: jnp.power(x, 7), lambda x: x ** 7, F32),
    (lambda x: x ** -1, lambda x: x ** -1.0, F32),
])
def test_power(fn, ref, dtype):
    x = np.array([1, 2, 3, 4], dtype)
    check(fn, [x], ref(x), dtype)


def test_integer_negative_power_raises():
    # JAX 0.10.2: TypeError: Integers cannot be raised to negative powers, got
    # integer_pow(int32[3], -1)
    with pytest.raises(TypeError, match=r"Integers cannot be raised to negative powers, got "
                                        r"integer_pow\(int32\[3\], -1\)"):
        jnp.arange(3) ** -1


UNARY = [
    ("exp", jnp.exp, np.exp), ("log", jnp.log, np.log), ("tanh", jnp.tanh, np.tanh),
    ("sin", jnp.sin, np.sin), ("cos", jnp.cos, np.cos), ("sqrt", jnp.sqrt, np.sqrt),
    ("abs", jnp.abs, np.abs), ("sign", jnp.sign, np.sign), ("negative", jnp.negative, np.negative),
    ("floor", jnp.floor, np.floor), ("ceil", jnp.ceil, np.ceil), ("square", jnp.square, np.square),
]
_POSITIVE_ONLY = {"log", "sqrt"}


@pytest.mark.parametrize("name, fn, ref", UNARY, ids=[u[0] for u in UNARY])
def test_unary_float(name, fn, ref):
    x = _values((3, 4), F32, 4, *((0.1, 5) if name in _POSITIVE_ONLY else (-3, 3)))
    check(fn, [x], ref(x), F32)


@pytest.mark.parametrize("name, fn, ref, dtype", [
    ("exp", jnp.exp, np.exp, F32), ("sqrt", jnp.sqrt, np.sqrt, F32),
    ("tanh", jnp.tanh, np.tanh, F32), ("abs", jnp.abs, np.abs, I32),
    ("sign", jnp.sign, np.sign, I32), ("negative", jnp.negative, np.negative, I32),
    ("floor", jnp.floor, lambda x: x, I32),
])
def test_unary_int(name, fn, ref, dtype):
    x = np.array([0, 1, 2, 3] if name == "sqrt" else [-3, -1, 0, 2], I32)
    check(fn, [x], ref(x), dtype)


def test_where_and_clip():
    x = _values((3, 4), F32, 5)
    check(lambda a: jnp.where(a > 0, a, 0), [x], np.where(x > 0, x, 0), F32)
    check(lambda a: jnp.where(a > 0, 1, -1), [x], np.where(x > 0, 1, -1), I32)
    check(lambda a, b: jnp.where(a[0] > 0, a, b), [x, x[:, :1]],
          np.where(x[0] > 0, x, x[:, :1]), F32)
    check(lambda a: jnp.clip(a, -1, 2), [x], np.clip(x, -1, 2), F32)
    check(lambda a: jnp.clip(a, max=1), [x], np.minimum(x, 1), F32)
    check(lambda a: jnp.clip(a, min=0.5), [x], np.maximum(x, 0.5), F32)
    n = np.arange(-3, 4, dtype=I32)
    check(lambda a: jnp.clip(a, -1, 2), [n], np.clip(n, -1, 2), I32)
    check(lambda a: a.clip(-1, 2), [n], np.clip(n, -1, 2), I32)


# --- reductions -------------------------------------------------------------------------------

REDUCTIONS = [
    ("sum", jnp.sum, np.sum), ("mean", jnp.mean, np.mean), ("max", jnp.max, np.max),
    ("min", jnp.min, np.min), ("prod", jnp.prod, np.prod),
]
AXES = [None, 0, 1, -1, -3, (0, 2), (-1, 0), (0, 1, 2), ()]


@pytest.mark.parametrize("name, fn, ref", REDUCTIONS, ids=[r[0] for r in REDUCTIONS])
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions(name, fn, ref, axis, keepdims):
    for dtype in (F32, I32):
        x = _values((2, 3, 4), dtype, 6, -2, 2)
        if name == "prod" and dtype == F32:
            x = _values((2, 3, 4), dtype, 6, 0.5, 1.5)
        want_dtype = F32 if name == "mean" else dtype
        check(lambda a: fn(a, axis=axis, keepdims=keepdims), [x],
              ref(x.astype(np.float64), axis=axis, keepdims=keepdims), want_dtype, rtol=1e-4)


@pytest.mark.parametrize("axis", [None, 0, 1, -1], ids=str)
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_arg_reductions(name, axis, keepdims):
    x = _values((3, 5), F32, 7)
    check(lambda a: getattr(jnp, name)(a, axis=axis, keepdims=keepdims), [x],
          getattr(np, name)(x, axis=axis, keepdims=keepdims), I32)


def test_reduction_dtypes():
    b = np.array([[True, False, True], [True, True, False]])
    check(lambda a: jnp.sum(a, axis=0), [b], b.sum(axis=0), I32)
    check(jnp.mean, [b], b.mean(), F32)
    check(jnp.sum, [np.ones(3, np.int8)], 3, I32)          # narrow ints sum in int32
    check(lambda a: jnp.sum(a, dtype=jnp.float32), [i32], i32.sum(), F32)
    check(lambda a: jnp.mean(a, axis=1), [i32], i32.mean(axis=1), F32)
    check(lambda a: jnp.cumsum(a), [b], np.cumsum(b), I32)
    check(lambda a: jnp.any(a, axis=1), [b], b.any(axis=1), BOOL)
    check(lambda a: jnp.all(a), [b], b.all(), BOOL)


# --- linear algebra ---------------------------------------------------------------------------

@pytest.mark.parametrize("xs, ys", [
    ((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)), ((2, 2, 3), (3, 4)),
    ((2, 3, 4), (5, 4, 6)), ((), (3,)),
])
def test_dot(xs, ys):
    x, y = _values(xs, F32, 8), _values(ys, F32, 9)
    check(jnp.dot, [x, y], np.dot(x, y), F32, rtol=1e-4)


@pytest.mark.parametrize("xs, ys", [
    ((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)), ((5, 2, 3), (3, 4)),
    ((3,), (5, 3, 4)), ((5, 2, 3), (3,)), ((5, 1, 2, 3), (4, 3, 2)),
])
def test_matmul(xs, ys):
    x, y = _values(xs, F32, 10), _values(ys, F32, 11)
    check(jnp.matmul, [x, y], np.matmul(x, y), F32, rtol=1e-4)
    check(operator.matmul, [x, y], x @ y, F32, rtol=1e-4)


def test_matmul_mixed_dtypes_and_ints():
    a, b = _values((2, 3), I32, 12), _values((3, 2), I32, 13)
    check(operator.matmul, [a, b], a @ b, I32)
    check(operator.matmul, [a, b.astype(F32)], a @ b, F32)
    check(lambda x: x @ np.ones((3, 1), np.float32), [a], a @ np.ones((3, 1)), F32)


def test_outer():
    x, y = _values((3,), F32, 14), _values((2, 2), I32, 15)
    check(jnp.outer, [x, y], np.outer(x, y), F32)


@pytest.mark.parametrize("subscripts, shapes", [
    ("ij,jk->ik", [(2, 3), (3, 4)]), ("ij,jk", [(2, 3), (3, 4)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("i,i->", [(3,), (3,)]),
    ("i,j->ij", [(2,), (3,)]), ("ijk->kij", [(2, 3, 4)]), ("ij->", [(2, 3)]),
    ("ij->j", [(2, 3)]), ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]), ("ii->i", [(3, 3)]),
    ("ii", [(3, 3)]), ("bij,kj->bik", [(2, 3, 4), (5, 4)]), ("ij,ij->ij", [(2, 3), (2, 3)]),
])
def test_einsum(subscripts, shapes):
    xs = [_values(s, F32, 16 + k) for k, s in enumerate(shapes)]
    check(lambda *a: jnp.einsum(subscripts, *a), xs, np.einsum(subscripts, *xs), F32,
          rtol=1e-4)


def test_einsum_ints_promote():
    a, b = _values((2, 3), I32, 20), _values((3,), F32, 21)
    check(lambda x, y: jnp.einsum("ij,j->i", x, y), [a, b], a @ b, F32, rtol=1e-4)
    check(lambda x: jnp.einsum("ij,kj->ik", x, x), [a], a @ a.T, I32)


@pytest.mark.parametrize("xs, ys, dims", [
    ((2, 3), (3, 4), (((1,), (0,)), ((), ()))),
    ((2, 3), (4, 3), (((1,), (1,)), ((), ()))),
    ((5, 2, 3), (5, 3, 4), (((2,), (1,)), ((0,), (0,)))),
    ((3, 5, 2), (5, 4, 3), (((0,), (2,)), ((1,), (0,)))),
    ((2, 3, 4), (3, 4, 5), (((1, 2), (0, 1)), ((), ()))),
    ((2, 3), (4, 5), (((), ()), ((), ()))),
])
def test_lax_dot_general(xs, ys, dims):
    x, y = _values(xs, F32, 22), _values(ys, F32, 23)
    (lc, rc), (lb, rb) = dims
    # reference: move batch dims first, contract with tensordot per batch element
    xt = np.moveaxis(x, lb, range(len(lb))) if lb else x
    yt = np.moveaxis(y, rb, range(len(rb))) if rb else y
    shift_l = [c + sum(b > c for b in lb) for c in lc]
    shift_r = [c + sum(b > c for b in rb) for c in rc]
    if lb:
        want = np.stack([np.tensordot(xt[k], yt[k], axes=([c - 1 for c in shift_l],
                                                          [c - 1 for c in shift_r]))
                         for k in range(xt.shape[0])])
    else:
        want = np.tensordot(x, y, axes=(list(lc), list(rc)))
    check(lambda a, b: lax.dot_general(a, b, dims), [x, y], want, F32, rtol=1e-4)


def test_lax_dot_general_preferred_element_type_and_ints():
    a, b = _values((2, 3), I32, 24), _values((3, 2), I32, 25)
    dims = (((1,), (0,)), ((), ()))
    check(lambda x, y: lax.dot_general(x, y, dims), [a, b], a @ b, I32)
    check(lambda x, y: lax.dot_general(x, y, dims, preferred_element_type=jnp.float32),
          [a, b], a @ b, F32)


def test_dot_general_mismatched_sizes_raise_naming_shapes():
    x, y = jnp.ones((5, 2, 3)), jnp.ones((2, 3, 4))
    # sizes (2, 3) against (3, 2): equal products, so a reshape-based kernel would not notice
    dims = (((1, 2), (1, 0)), ((), ()))
    with pytest.raises(TypeError, match=r"contracting dimensions .* \(2, 3\) and \(3, 2\)"):
        lax.dot_general(x, y, dims)
    with pytest.raises(TypeError, match="contracting"):
        shardc.jit(lambda a, b: lax.dot_general(a, b, dims))(x, y)
    with pytest.raises(TypeError, match=r"\(2, 3\) and \(4, 5\)"):
        jnp.ones((2, 3)) @ jnp.ones((4, 5))
    with pytest.raises(TypeError, match=r"\(2, 3\) and \(4, 5\)"):
        shardc.jit(jnp.matmul)(jnp.ones((2, 3)), jnp.ones((4, 5)))


# --- shape operations -------------------------------------------------------------------------

x234 = np.arange(24, dtype=np.float32).reshape(2, 3, 4)


@pytest.mark.parametrize("fn, ref", [
    (lambda x: jnp.reshape(x, (6, 4)), lambda x: x.reshape(6, 4)),
    (lambda x: jnp.reshape(x, (-1, 2)), lambda x: x.reshape(-1, 2)),
    (lambda x: x.reshape(4, -1), lambda x: x.reshape(4, -1)),
    (lambda x: x.reshape((24,)), lambda x: x.reshape(24)),
    (lambda x: jnp.ravel(x), np.ravel),
    (lambda x: jnp.transpose(x), np.transpose),
    (lambda x: jnp.transpose(x, (1, 0, 2)), lambda x: np.transpose(x, (1, 0, 2))),
    (lambda x: x.transpose(2, 0, 1), lambda x: x.transpose(2, 0, 1)),
    (lambda x: x.transpose((-1, 0, 1)), lambda x: x.transpose((-1, 0, 1))),
    (lambda x: x.T, lambda x: x.T),
    (lambda x: jnp.swapaxes(x, 0, -1), lambda x: np.swapaxes(x, 0, -1)),
    (lambda x: x.swapaxes(1, 2), lambda x: x.swapaxes(1, 2)),
    (lambda x: jnp.moveaxis(x, 0, -1), lambda x: np.moveaxis(x, 0, -1)),
    (lambda x: jnp.concatenate([x, x], axis=1), lambda x: np.concatenate([x, x], axis=1)),
    (lambda x: jnp.concatenate([x, x[:, :1]], axis=-2),
     lambda x: np.concatenate([x, x[:, :1]], axis=-2)),
    (lambda x: jnp.concatenate([x, x], axis=None), lambda x: np.concatenate([x, x], axis=None)),
    (lambda x: jnp.stack([x, x + 1]), lambda x: np.stack([x, x + 1])),
    (lambda x: jnp.stack([x, x + 1], axis=-1), lambda x: np.stack([x, x + 1], axis=-1)),
    (lambda x: jnp.stack([x, x], axis=2), lambda x: np.stack([x, x], axis=2)),
    (lambda x: jnp.tile(x, 2), lambda x: np.tile(x, 2)),
    (lambda x: jnp.tile(x, (2, 1, 1, 3)), lambda x: np.tile(x, (2, 1, 1, 3))),
    (lambda x: jnp.tile(x[0, 0], (2, 2)), lambda x: np.tile(x[0, 0], (2, 2))),
    (lambda x: jnp.broadcast_to(x[0], (5, 3, 4)), lambda x: np.broadcast_to(x[0], (5, 3, 4))),
    (lambda x: jnp.broadcast_to(x[:, :1], (2, 3, 4)),
     lambda x: np.broadcast_to(x[:, :1], (2, 3, 4))),
    (lambda x: jnp.expand_dims(x, 0), lambda x: np.expand_dims(x, 0)),
    (lambda x: jnp.expand_dims(x, -1), lambda x: np.expand_dims(x, -1)),
    (lambda x: jnp.expand_dims(x, (0, 2)), lambda x: np.expand_dims(x, (0, 2))),
    (lambda x: jnp.squeeze(x[:, :1, None]), lambda x: np.squeeze(x[:, :1, None])),
    (lambda x: jnp.squeeze(x[:, :1], 1), lambda x: np.squeeze(x[:, :1], 1)),
    (lambda x: jnp.squeeze(x[:1, :, :1], (0, -1)), lambda x: np.squeeze(x[:1, :, :1], (0, -1))),
    (lambda x: x[:1].squeeze(), lambda x: x[:1].squeeze()),
])
def test_shape_ops(fn, ref):
    check(fn, [x234], ref(x234), F32)


@pytest.mark.parametrize("args", [(3,), (2, 1), ([1, 3],), ([2, 2, 5],), (2, -1), ([0],)])
def test_split(args):
    x = np.arange(24, dtype=np.float32).reshape(6, 4) if args[0] != 2 else \
        np.arange(24, dtype=np.float32).reshape(4, 6)
    want = np.split(x, *args)
    for fn in (lambda a: jnp.split(a, *args), shardc.jit(lambda a: jnp.split(a, *args))):
        got = fn(jnp.asarray(x))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_matches(g, w, F32)


def test_concatenate_promotes():
    check(lambda a, b: jnp.concatenate([a, b]), [i32, f32], np.concatenate([i32, f32]), F32)


# --- indexing ---------------------------------------------------------------------------------

INDICES = [
    1, -1, (1, 2), (-1, -2, -3), slice(1, None), slice(None, None, -1), (slice(None), 0),
    (Ellipsis, 1), (Ellipsis, slice(None, None, 2)), (None,), (None, 1), (1, None, 2),
    (slice(None), None, slice(None, 2)), (0, slice(3, 0, -2), slice(None, None, -3)),
    (slice(-10, 10), slice(2, 1)), (slice(None, None, 2), slice(None, None, -2), 1),
    (Ellipsis, None), (None, Ellipsis, None, -1),
    # one integer array
    np.array([1, 0, 1]), (slice(None), np.array([2, 0])), (Ellipsis, np.array([-1, 0, 3])),
    (1, np.array([[0, 2], [1, 1]])), (np.array([1, 0]), 2), (slice(None), 1, np.array([3, 0])),
    np.array([1, 0]), (None, slice(None), np.array([2, 1])),
    # integer indices around a slice: numpy moves the array's dimensions first
    (1, slice(None), np.array([0, 3])), (np.array([0, 1]), slice(None), 1),
    (slice(None), np.array([0, 1]), None, 1),
    # concrete indices through the flat path: several arrays, masks, scalar bools
    (np.array([0, 1]), np.array([1, 2])), (np.array([[0], [1]]), np.array([0, 2]), 3),
    x234 > 10, (slice(None), np.array([True, False, True])), True, False, (1, True),
]


@pytest.mark.parametrize("index", INDICES, ids=repr)
def test_getitem_static(index):
    want = x234[index]
    x = jnp.asarray(x234)
    assert_matches(x[index], want, F32)
    assert_matches(shardc.jit(lambda a: a[index])(x), want, F32)


@pytest.mark.parametrize("make_index", [
    lambda k: k, lambda k: (k, 1), lambda k: (slice(None), k), lambda k: (Ellipsis, k),
    lambda k: (k, slice(None, None, -1), None), lambda k: (k, k, k),
])
@pytest.mark.parametrize("k", [0, 1, -1, -2])
def test_getitem_traced_integer(make_index, k):
    x = jnp.asarray(x234)
    static_index = make_index(k)
    want = x234[static_index]
    f = shardc.jit(lambda a, i: a[make_index(i)])
    assert_matches(f(x, jnp.int32(k)), want, F32)
    assert_matches(x[make_index(jnp.asarray(k))], want, F32)


@pytest.mark.parametrize("make_index", [
    lambda a: a, lambda a: (slice(None), a), lambda a: (1, slice(None), a), lambda a: (a, 2),
    lambda a: (Ellipsis, a), lambda a: (None, a),
])
def test_getitem_traced_integer_array(make_index):
    x = jnp.asarray(x234)
    idx = np.array([[1, 0], [0, -1]], np.int32)
    want = x234[make_index(idx)]
    f = shardc.jit(lambda a, i: a[make_index(i)])
    assert_matches(f(x, jnp.asarray(idx)), want, F32)


SEVERAL_ARRAYS = [
    lambda i, j: (i, j), lambda i, j: (slice(None), i, j), lambda i, j: (i, slice(None), j),
    lambda i, j: (i, 1, j), lambda i, j: (None, i, j), lambda i, j: (i, None, j),
    lambda i, j: (i, j, None, 2), lambda i, j: (Ellipsis, i, j),
    lambda i, j: (slice(None, None, -1), i, j), lambda i, j: (i[:, None], j[None, :]),
    lambda i, j: (j, j, j),
]


def _clamped(index, shape):
    """numpy's reading of JAX's gather: each integer array's entries counted from the end
    when negative, then clamped into its dimension."""
    if Ellipsis in [e for e in index if not isinstance(e, np.ndarray)]:
        k = next(k for k, e in enumerate(index) if e is Ellipsis)
        used = sum(1 for e in index if e is not None and e is not Ellipsis)
        index = index[:k] + (slice(None),) * (len(shape) - used) + index[k + 1:]
    out, dim = [], 0
    for entry in index:
        if isinstance(entry, np.ndarray):
            entry = np.clip(np.where(entry < 0, entry + shape[dim], entry), 0, shape[dim] - 1)
        out.append(entry)
        dim += entry is not None
    return tuple(out)


@pytest.mark.parametrize("make_index", SEVERAL_ARRAYS)
def test_getitem_several_traced_integer_arrays(make_index):
    """Several integer arrays under jit (a cross-entropy's ``logits[arange(n), labels]``):
    numpy's placement of their broadcast dimensions, JAX's clamping of each coordinate."""
    i = np.array([[1, 0], [-1, 7]], np.int32)
    j = np.array([2, -9], np.int32)
    want = x234[_clamped(make_index(i, j), x234.shape)]
    f = shardc.jit(lambda a, p, q: a[make_index(p, q)])
    assert_matches(f(jnp.asarray(x234), jnp.asarray(i), jnp.asarray(j)), want, F32)
    assert_matches(jnp.asarray(x234)[make_index(i, j)], want, F32)


def test_cross_entropy_pick_and_its_gradient():
    logits = np.arange(12, dtype=np.float32).reshape(4, 3) / 7
    labels = np.array([2, 0, 1, 1])

    def loss(l, y):
        return -jnp.mean(shardc.nn.log_softmax(l)[jnp.arange(4), y])

    z = logits - logits.max(1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    np.testing.assert_allclose(shardc.jit(loss)(logits, labels),
                               -logp[np.arange(4), labels].mean(), rtol=1e-6)
    grad = shardc.jit(shardc.grad(loss))(logits, labels)
    want = (np.exp(logp) - np.eye(3)[labels]) / 4
    np.testing.assert_allclose(grad, want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("make_index", SEVERAL_ARRAYS[:-1] + [
    lambda i, j: (slice(None, None, 2), j), lambda i, j: (j, slice(1, None))])
@pytest.mark.parametrize("mode", ["set", "add"])
def test_at_several_traced_integer_arrays(make_index, mode):
    """Updates at traced integer arrays: the concrete index's result (out-of-range entries
    dropped, as JAX's scatter), and numpy's where every entry is in range."""
    i = np.array([[1, 0], [-1, 7]], np.int32)
    j = np.array([2, -9], np.int32)
    x = jnp.asarray(x234)
    value = np.float32(2.5)
    want = getattr(x.at[make_index(i, j)], mode)(value)
    f = shardc.jit(lambda a, p, q: getattr(a.at[make_index(p, q)], mode)(value))
    assert_matches(f(x, jnp.asarray(i), jnp.asarray(j)), np.asarray(want), F32)
    ii, jj = np.array([[1, 0], [0, 1]], np.int32), np.array([1, 0], np.int32)
    index = make_index(ii, jj)
    want = x234.copy()
    if mode == "set":
        want[index] = value
    else:
        np.add.at(want, index, value)
    assert_matches(f(x, jnp.asarray(ii), jnp.asarray(jj)), want, F32)


def test_getitem_list_of_traced_integers():
    x = jnp.asarray(x234)
    f = shardc.jit(lambda a, i, j: a[[i, j], 1])
    assert_matches(f(x, jnp.int32(1), jnp.int32(-2)), x234[[1, -2], 1], F32)
    f = shardc.jit(lambda a, i: a.at[jnp.array([i, 0])].add(1.0))
    want = x234.copy()
    np.add.at(want, [1, 0], 1.0)
    assert_matches(f(x, jnp.int32(1)), want, F32)


def test_a_list_as_the_whole_index_is_refused_as_jax_refuses_it():
    """numpy reads ``x[[1, 0]]`` as an array and ``x[[0, slice(None)]]`` as a tuple; JAX
    neither, with a TypeError naming the spelling to use. Inside a tuple a list is an array."""
    x = jnp.asarray(x234)
    for index, spelling in (([1, 0], "array"), ([[0, 0]], "tuple"), ([0, None], "tuple"),
                            ([0, slice(None)], "tuple"), ([0, np.arange(2)], "tuple")):
        for read in (lambda: x[index], lambda: x.at[index].set(0.0)):
            with pytest.raises(TypeError, match=r"Using a non-tuple sequence for "
                               r"multidimensional indexing is not allowed; use "
                               rf"`arr\[{spelling}\(seq\)\]` instead of `arr\[seq\]`"):
                read()
    assert_matches(x[:, [2, 0]], x234[:, [2, 0]], F32)
    assert_matches(x[tuple([0, slice(None)])], x234[0, :], F32)


def test_traced_index_program():
    program = str(shardc.make_jaxpr(lambda a, i: a[i])(jnp.ones((4, 3)), jnp.int32(1)))
    assert "dynamic_slice" in program and "squeeze" in program
    program = str(shardc.make_jaxpr(lambda a, i: a[:, i])(jnp.ones((4, 3)),
                                                          jnp.zeros(5, jnp.int32)))
    assert "gather" in program


UPDATES = [
    0, (1, 2), slice(1, 3), (slice(None), 2), (Ellipsis, -1), -1, (0, slice(None, None, 2)),
    slice(None, None, -1), (slice(None), slice(1, None), slice(None, None, -3)),
    np.array([1, 0]), (slice(None), np.array([2, 0, 2])), (1, np.array([2, 0])),
    (np.array([0, 1]), np.array([1, 1])), x234 > 15, (None, 1),
]


@pytest.mark.parametrize("index", UPDATES, ids=repr)
@pytest.mark.parametrize("mode", ["set", "add"])
def test_at_static(index, mode):
    x = jnp.asarray(x234)
    target_shape = x234[index].shape
    value = _values(target_shape[-1:], F32, 30)
    want = x234.copy()
    if mode == "set":
        want[index] = value
    else:
        np.add.at(want, index, value)
    fn = lambda a, v: getattr(a.at[index], mode)(v)     # noqa: E731
    check(fn, [x234, value], want, F32)
    # a Python scalar update
    want = x234.copy()
    if mode == "set":
        want[index] = 7
    else:
        np.add.at(want, index, 7)
    check(lambda a: getattr(a.at[index], mode)(7), [x234], want, F32)


@pytest.mark.parametrize("k", [0, 1, -1])
def test_at_traced_index(k):
    x = jnp.asarray(x234)
    want = x234.copy()
    want[k, 1:] += 10
    f = shardc.jit(lambda a, i: a.at[i, 1:].add(10.0))
    assert_matches(f(x, jnp.int32(k)), want, F32)
    want = x234.copy()
    want[:, k] = -1
    f = shardc.jit(lambda a, i: a.at[:, i].set(-1))
    assert_matches(f(x, jnp.int32(k)), want, F32)


def test_at_traced_integer_array_and_duplicates():
    x = jnp.asarray(x234)
    idx = np.array([1, 0, 1], np.int32)
    want = x234.copy()
    np.add.at(want, (slice(None), idx), 1.0)
    f = shardc.jit(lambda a, i: a.at[:, i].add(1.0))
    assert_matches(f(x, jnp.asarray(idx)), want, F32)
    want = x234.copy()
    want[idx] = 0.0
    assert_matches(shardc.jit(lambda a, i: a.at[i].set(0.0))(x, jnp.asarray(idx)), want, F32)


def test_at_casts_to_the_array_dtype_and_drops_out_of_bounds():
    """Values are cast to the array's dtype; where their dtype does not promote to it (a
    float into an int array), JAX's FutureWarning; out-of-bounds updates are dropped."""
    n = jnp.arange(6)
    with pytest.warns(FutureWarning, match="scatter inputs have incompatible types: cannot "
                                           "safely cast value from dtype=float32 to "
                                           "dtype=int32 with jax_numpy_dtype_promotion="
                                           "standard"):
        out = n.at[1].set(2.7)
    assert out.dtype == I32 and np.asarray(out).tolist() == [0, 2, 2, 3, 4, 5]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jnp.arange(6.0).at[1].set(2)             # an int into a float array: safe
        jnp.arange(6, dtype=jnp.int8).at[1].set(300)     # a weak int into int8: no warning
    with shardc.numpy_dtype_promotion("strict"), pytest.raises(
            shardc.dtypes.TypePromotionError, match="jax_numpy_dtype_promotion=strict"):
        n.at[1].set(jnp.ones((), jnp.int16))
    assert np.asarray(n.at[9].set(1)).tolist() == list(range(6))          # JAX drops it
    assert np.asarray(n.at[np.array([0, 9])].set(-1)).tolist() == [-1, 1, 2, 3, 4, 5]
    assert np.asarray(n.at[2].get()) == 2


@pytest.mark.parametrize("call, name, position", [
    (lambda: jnp.sum([1, 2, 3]), "sum", 0),
    (lambda: jnp.sin((1.0, 2.0)), "sin", 0),
    (lambda: jnp.add(jnp.ones(2), [1.0, 2.0]), "add", 1),
    (lambda: jnp.abs([-1]), "absolute", 0),
    (lambda: jnp.clip(jnp.ones(2), [0.0], 1.0), "minimum", 0),
    (lambda: jnp.take(jnp.ones(3), [0, 1]), "take", 1),
    (lambda: jnp.quantile(jnp.ones(3), [0.5]), "quantile", 1),
    (lambda: jnp.where([True], 1, 2), "where", 0),
    (lambda: jnp.reshape([1, 2], (2, 1)), "reshape", 0),
])
def test_lists_where_arrays_are_taken_are_refused(call, name, position):
    """jax.numpy takes arrays and scalars, not lists or tuples: JAX's TypeError names the
    function and the argument's position (the function it delegates to, for some)."""
    with pytest.raises(TypeError, match=re.escape(
            f"{name} requires ndarray or scalar arguments, got <class ") + r"'(list|tuple)'"
            + re.escape(f"> at position {position}.")):
        call()


def test_lists_are_taken_where_jax_takes_them():
    """Constructors, joins and shapes take sequences, as in JAX."""
    assert np.asarray(jnp.array([1, 2])).tolist() == [1, 2]
    assert np.asarray(jnp.asarray((1, 2))).tolist() == [1, 2]
    assert np.asarray(jnp.concatenate([jnp.ones(1), jnp.zeros(1)])).tolist() == [1, 0]
    assert np.asarray(jnp.stack([jnp.ones(1), jnp.zeros(1)])).shape == (2, 1)
    assert jnp.zeros([2, 3]).shape == (2, 3)
    assert np.asarray(jnp.tile(jnp.ones(2), [1, 2])).shape == (1, 4)
    assert np.asarray(jnp.sum(jnp.array([1, 2, 3]))) == 6


def test_item_assignment_is_refused_pointing_to_at():
    """``x[idx] = y`` on an array, or on a traced value, is JAX's TypeError naming ``.at``;
    the array is unchanged."""
    message = ("JAX arrays are immutable and do not support in-place item assignment. "
               "Instead of x[idx] = y, use x = x.at[idx].set(y) or another .at[] method")
    x = jnp.arange(3)
    with pytest.raises(TypeError, match=re.escape(message)):
        x[0] = 5

    def f(y):
        y[1] = 0.0
        return y

    with pytest.raises(TypeError, match=re.escape(message)):
        shardc.jit(f)(jnp.ones(2))
    assert np.asarray(x).tolist() == [0, 1, 2]


# --- astype, comparisons of whole arrays ------------------------------------------------------

@pytest.mark.parametrize("dtype, want", [
    (jnp.int32, I32), (jnp.float32, F32), (bool, BOOL), (float, F32), (int, I32),
    (jnp.float16, np.dtype(np.float16)), (np.int8, np.dtype(np.int8)),
])
def test_astype(dtype, want):
    x = _values((2, 3), F32, 31)
    check(lambda a: a.astype(dtype), [x], x.astype(want), want)
    check(lambda a: jnp.astype(a, dtype), [x], x.astype(want), want)


def test_allclose_and_array_equal():
    x = _values((3, 4), F32, 32)
    for fn, args, want in [
        (jnp.allclose, [x, x + 1e-7], True), (jnp.allclose, [x, x + 1e-2], False),
        (lambda a, b: jnp.allclose(a, b, atol=0.1), [x, x + 1e-2], True),
        (jnp.array_equal, [x, x], True), (jnp.array_equal, [x, x + 1], False),
        (jnp.array_equal, [x, x.T], False), (jnp.array_equal, [i32, i32.astype(F32)], True),
        (jnp.allclose, [np.array([np.inf, 1.0], F32), np.array([np.inf, 1.0], F32)], True),
        (jnp.allclose, [np.array([np.nan], F32), np.array([np.nan], F32)], False),
        (lambda a, b: jnp.allclose(a, b, equal_nan=True),
         [np.array([np.nan], F32), np.array([np.nan], F32)], True),
    ]:
        check(fn, args, want, BOOL)
        assert bool(fn(*[jnp.asarray(a) for a in args])) is want


# --- nn ---------------------------------------------------------------------------------------

def _np_logsumexp(x, axis=None, keepdims=False):
    x = x.astype(np.float64)
    top = np.max(x, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0)
    out = np.log(np.sum(np.exp(x - top), axis=axis, keepdims=True)) + top
    return out if keepdims else np.squeeze(out, axis=axis)


@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 2), (-1, -3), (0, 1, 2), ()], ids=str)
@pytest.mark.parametrize("keepdims", [False, True])
def test_logsumexp(axis, keepdims):
    x = _values((2, 3, 4), F32, 33, -20, 20)
    check(lambda a: nn.logsumexp(a, axis=axis, keepdims=keepdims), [x],
          _np_logsumexp(x, axis, keepdims), F32)


def test_logsumexp_edge_cases():
    x = np.array([[-np.inf, -np.inf], [0.0, -np.inf], [1000.0, 1000.0]], F32)
    check(lambda a: nn.logsumexp(a, axis=1), [x], [-np.inf, 0.0, 1000.0 + np.log(2)], F32)
    check(nn.logsumexp, [np.array([1, 2, 3], I32)], np.log(np.exp([1, 2, 3]).sum()), F32)


@pytest.mark.parametrize("axis", [-1, 0, (0, 1), None], ids=str)
def test_softmax_and_log_softmax(axis):
    x = _values((3, 4), F32, 34, -10, 10)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=axis, keepdims=True))
    want = e / e.sum(axis=axis, keepdims=True)
    check(lambda a: nn.softmax(a, axis=axis), [x], want, F32)
    check(lambda a: nn.log_softmax(a, axis=axis), [x], np.log(want), F32, rtol=1e-4)
    check(lambda a: nn.softmax(a, axis=axis), [np.arange(12, dtype=I32).reshape(3, 4)],
          nn_softmax_ref(np.arange(12.0).reshape(3, 4), axis), F32)


def nn_softmax_ref(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def test_relu():
    x = _values((3, 4), F32, 35)
    check(nn.relu, [x], np.maximum(x, 0), F32)
    n = np.arange(-3, 3, dtype=I32)
    check(nn.relu, [n], np.maximum(n, 0), I32)


# --- methods and operators of Arrays and tracers ----------------------------------------------

METHODS = [
    ("x.T", lambda a: a.T, lambda a: a.T),
    ("x.reshape(6, 4)", lambda a: a.reshape(6, 4), lambda a: a.reshape(6, 4)),
    ("x.sum(axis=0)", lambda a: a.sum(axis=0), lambda a: a.sum(axis=0)),
    ("x.mean(-1, keepdims)", lambda a: a.mean(-1, keepdims=True),
     lambda a: a.mean(-1, keepdims=True)),
    ("x.max()", lambda a: a.max(), lambda a: a.max()),
    ("x.min(axis=(0, 2))", lambda a: a.min(axis=(0, 2)), lambda a: a.min(axis=(0, 2))),
    ("x.argmax(axis=1)", lambda a: a.argmax(axis=1), lambda a: a.argmax(axis=1).astype(I32)),
    ("x.ravel()", lambda a: a.ravel(), lambda a: a.ravel()),
    ("-x", lambda a: -a, lambda a: -a),
    ("+x", lambda a: +a, lambda a: +a),
    ("abs(x)", lambda a: abs(a), np.abs),
    ("x ** 2", lambda a: a ** 2, lambda a: a ** 2),
    ("2 - x", lambda a: 2 - a, lambda a: 2 - a),
    ("3 * x", lambda a: 3 * a, lambda a: 3 * a),
    ("1 / (x + 0.5)", lambda a: 1 / (a + 0.5), lambda a: 1 / (a + 0.5)),
    ("x @ x.mT", lambda a: a @ a.mT, lambda a: a @ a.swapaxes(-1, -2)),
    ("x[0, 0] @ x[0].T", lambda a: a[0, 0] @ a[0].T, lambda a: a[0, 0] @ a[0].T),
    ("x // 3", lambda a: a // 3, lambda a: a // 3),
    ("x % -3", lambda a: a % -3, lambda a: a % -3),
    ("x < 3", lambda a: a < 3, lambda a: a < 3),
    ("3 <= x", lambda a: 3 <= a, lambda a: 3 <= a),
    ("x == x.T.T", lambda a: a == a.T.T, lambda a: a == a),
    ("x != 2", lambda a: a != 2, lambda a: a != 2),
    ("x >= 1", lambda a: a >= 1, lambda a: a >= 1),
    ("(x > 1) & (x < 4)", lambda a: (a > 1) & (a < 4), lambda a: (a > 1) & (a < 4)),
    ("~(x > 1) | (x > 4)", lambda a: ~(a > 1) | (a > 4), lambda a: ~(a > 1) | (a > 4)),
]


@pytest.mark.parametrize("name, fn, ref", METHODS, ids=[m[0] for m in METHODS])
def test_methods_and_operators(name, fn, ref):
    x = _values((2, 3, 4), F32, 36, -6, 6)
    want = np.asarray(ref(x))
    check(fn, [x], want, want.dtype, rtol=1e-4)


def test_integer_operators_with_negatives():
    n = np.arange(-6, 6, dtype=I32).reshape(3, 4)
    for fn in (lambda a: a // 4, lambda a: a % 4, lambda a: a // -4, lambda a: a % -4,
               lambda a: -a, lambda a: a ** 2, lambda a: 2 * a - 1, lambda a: 10 - a,
               lambda a: 7 // (a + 7), lambda a: -7 % (a + 7), lambda a: ~a, lambda a: a.T):
        check(fn, [n], fn(n), I32)


def test_reflected_operators_with_numpy_operands():
    x = _values((2, 3), F32, 37)
    out = np.ones((2, 3), np.float32) + jnp.asarray(x)
    assert isinstance(out, shardc.Array) and out.dtype == F32
    np.testing.assert_allclose(np.asarray(out), x + 1)
    out = np.float32(2) * jnp.asarray(x)
    assert isinstance(out, shardc.Array)
    np.testing.assert_allclose(np.asarray(out), 2 * x)


# --- programs ---------------------------------------------------------------------------------

def test_make_jaxpr_arange_is_an_f32_iota():
    program = str(shardc.make_jaxpr(lambda: jnp.arange(8 * 16.))())
    assert "iota" in program and "dtype=float32" in program and "f32[128]" in program
    assert len(shardc.make_jaxpr(lambda: jnp.arange(8 * 16.))().jaxpr.eqns) == 1


def test_make_jaxpr_weak_scalars_are_literals():
    program = str(shardc.make_jaxpr(lambda a: a * 2.0)(jnp.ones((2, 3), jnp.int32)))
    assert "convert_element_type[new_dtype=float32]" in program
    assert "mul" in program and "2.0:f32[]" in program
    program = str(shardc.make_jaxpr(lambda a: jnp.sum(a * 2, axis=0))(jnp.ones((2, 3))))
    assert "convert_element_type" not in program
    assert "reduce_sum[axes=(0,)]" in program and "f32[3]" in program


def test_make_jaxpr_primitive_sequences():
    def prims(f, *args):
        return [str(e.primitive) for e in shardc.make_jaxpr(f)(*args).jaxpr.eqns]
    assert prims(lambda a, b: a @ b, jnp.ones((4, 3)), jnp.ones(3)) == ["dot_general"]
    assert prims(lambda a: a[::-2, 1], jnp.ones((4, 3))) == ["rev", "slice", "squeeze"]
    assert prims(lambda a: a + jnp.ones(3), jnp.ones((4, 3)))[-1] == "add"
    assert "broadcast_in_dim" in prims(lambda a, b: a + b, jnp.ones((4, 3)), jnp.ones(3))
    assert prims(lambda a: a.at[1].set(2.0), jnp.ones((4, 3)))[-1] == "dynamic_update_slice"
    assert prims(lambda a: a ** 3, jnp.ones(3)) == ["integer_pow"]
    assert prims(lambda a: jnp.sum(a, axis=1, keepdims=True),
                 jnp.ones((4, 3))) == ["reduce_sum", "reshape"]


def test_jit_caches_per_shape():
    f = shardc.jit(lambda a: jnp.sum(a * 2, axis=-1))
    f(jnp.ones((2, 3)))
    f(jnp.zeros((2, 3)))
    assert f.trace_count == 1
    assert_matches(f(jnp.ones((4, 3))), np.full(4, 6.0), F32)
    assert f.trace_count == 2


# --- property tests ---------------------------------------------------------------------------

@st.composite
def broadcastable_shapes(draw):
    """Two shapes numpy can broadcast: a base shape, each side dropping leading dims and
    setting some dims to 1."""
    base = draw(st.lists(st.integers(1, 4), min_size=0, max_size=4))
    shapes = []
    for _ in range(2):
        drop = draw(st.integers(0, len(base)))
        shape = [1 if draw(st.booleans()) else d for d in base[drop:]]
        shapes.append(tuple(shape))
    return shapes


PROPERTY_BINARY = [
    (jnp.add, np.add), (jnp.subtract, np.subtract), (jnp.multiply, np.multiply),
    (jnp.maximum, np.maximum), (jnp.less, np.less), (jnp.equal, np.equal),
    (jnp.floor_divide, np.floor_divide), (jnp.remainder, np.remainder),
]


@HYPOTHESIS
@given(shapes=broadcastable_shapes(), op=st.sampled_from(PROPERTY_BINARY),
       dtypes=st.sampled_from([(F32, F32), (I32, I32), (I32, F32), (F32, I32)]),
       seed=st.integers(0, 1000))
def test_property_broadcasting_binary(shapes, op, dtypes, seed):
    fn, ref = op
    x = _values(shapes[0], dtypes[0], seed)
    y = _values(shapes[1], dtypes[1], seed + 1)
    if fn in (jnp.floor_divide, jnp.remainder):
        y = np.where(y == 0, dtypes[1].type(3), y)
    out_dtype = F32 if F32 in dtypes else I32
    want = ref(x.astype(out_dtype), y.astype(out_dtype))
    if want.dtype == BOOL:
        out_dtype = BOOL
    check(fn, [x, y], want, out_dtype)


@HYPOTHESIS
@given(shape=st.lists(st.integers(1, 4), min_size=0, max_size=4), data=st.data(),
       red=st.sampled_from(REDUCTIONS + [("argmax", jnp.argmax, np.argmax)]),
       keepdims=st.booleans(), dtype=st.sampled_from([F32, I32]))
def test_property_reductions(shape, data, red, keepdims, dtype):
    name, fn, ref = red
    ndim = len(shape)
    if name == "argmax":
        axis = data.draw(st.one_of(st.none(), st.integers(-ndim, ndim - 1))) if ndim else None
    else:
        axes = data.draw(st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim)
                         if ndim else st.just([]))
        signs = data.draw(st.lists(st.booleans(), min_size=len(axes), max_size=len(axes)))
        axes = tuple(a - ndim if neg else a for a, neg in zip(axes, signs))
        axis = data.draw(st.sampled_from([None, axes] + ([axes[0]] if axes else [])))
    x = _values(tuple(shape), dtype, len(shape), -3, 3)
    if name == "prod" and dtype == F32:
        x = _values(tuple(shape), dtype, 1, 0.5, 1.5)
    want = ref(x.astype(np.float64), axis=axis, keepdims=keepdims)
    want_dtype = F32 if name == "mean" else I32 if name == "argmax" else dtype
    check(lambda a: fn(a, axis=axis, keepdims=keepdims), [x], want, want_dtype, rtol=1e-4)


# --- errors -----------------------------------------------------------------------------------

def test_incompatible_broadcast_names_shapes():
    """JAX's errors: a binary operation on operands of one rank is a TypeError naming its lax
    primitive; of different ranks (rank promotion first), or a broadcast of several operands,
    a ValueError listing their shapes; broadcast_to names both types."""
    for fn in (lambda: jnp.ones((2, 3)) + jnp.ones(4),
               lambda: shardc.jit(jnp.add)(jnp.ones((2, 3)), jnp.ones(4))):
        with pytest.raises(ValueError) as err:
            fn()
        assert str(err.value) == "Incompatible shapes for broadcasting: shapes=[(2, 3), (4,)]"
    with pytest.raises(TypeError, match=r"^add got incompatible shapes for broadcasting: "
                                        r"\(2, 3\), \(4, 3\)\.$"):
        jnp.ones((2, 3)) + jnp.ones((4, 3))
    for fn, name in ((lambda: jnp.ones(3) * jnp.ones(2), "mul"),
                     (lambda: jnp.ones(3) / jnp.ones(2), "div"),
                     (lambda: jnp.ones(3) % jnp.ones(2), "rem"),
                     (lambda: jnp.ones(3) // jnp.ones(2), "rem"),
                     (lambda: jnp.ones(3) ** jnp.ones(2), "pow"),
                     (lambda: jnp.maximum(jnp.ones(3), jnp.ones(2)), "max"),
                     (lambda: jnp.ones(3) == jnp.ones(2), "eq")):
        with pytest.raises(TypeError, match=rf"^{name} got incompatible shapes for "
                                            r"broadcasting: \(3,\), \(2,\)\.$"):
            fn()
    with pytest.raises(ValueError) as err:
        jnp.where(jnp.ones(2) > 0, jnp.ones((2, 3)), 0.0)
    assert str(err.value) == ("Incompatible shapes for broadcasting: "
                              "shapes=[(2,), (2, 3), ()]")
    with pytest.raises(ValueError) as err:
        jnp.broadcast_to(jnp.ones(3), (2, 4))
    assert str(err.value) == ("Incompatible types for broadcasting: input type=float32[3] and "
                              "requested type=float32[2,4]")


@pytest.mark.parametrize("fn", [
    lambda x: jnp.sum(x, axis=2), lambda x: jnp.max(x, axis=-3), lambda x: jnp.mean(x, (0, 5)),
    lambda x: jnp.argmax(x, axis=2), lambda x: jnp.expand_dims(x, 4),
    lambda x: jnp.squeeze(x, 2), lambda x: jnp.swapaxes(x, 0, 2),
    lambda x: jnp.concatenate([x, x], axis=2), lambda x: jnp.stack([x, x], axis=-4),
    lambda x: nn.logsumexp(x, axis=(0, 2)), lambda x: nn.softmax(x, axis=3),
    lambda x: x.sum(axis=-3),
])
def test_out_of_bounds_axis(fn):
    x = jnp.ones((2, 3))
    for run in (fn, shardc.jit(fn)):
        with pytest.raises(np.exceptions.AxisError, match="out of bounds for array of "
                                                          "dimension"):
            run(x)
    with pytest.raises(ValueError):                     # AxisError is a ValueError
        fn(x)


def test_duplicate_axes():
    with pytest.raises(ValueError, match="duplicate value in 'axis'"):
        jnp.sum(jnp.ones((2, 3)), axis=(0, -2))


@pytest.mark.parametrize("shape", [(4, 2), (-1, 4), (7,), (-1, -1)])
def test_reshape_wrong_size(shape):
    x = jnp.ones((2, 3))
    for run in (lambda a: a.reshape(shape), shardc.jit(lambda a: jnp.reshape(a, shape))):
        with pytest.raises((TypeError, ValueError), match=r"\(2, 3\)|one unknown"):
            run(x)
    if shape != (-1, -1):
        with pytest.raises(TypeError, match=r"shape \(2, 3\) \(size 6\) into shape "
                                            + repr(shape).replace("(", r"\(").replace(")", r"\)")):
            x.reshape(shape)


@pytest.mark.parametrize("index, clamped", [(2, 1), (-3, 0), ((0, 3), (0, 2)),
                                            ((slice(None), -4), (slice(None), 0)),
                                            ((Ellipsis, 5), (Ellipsis, 2))], ids=repr)
def test_out_of_bounds_static_index_clamps_as_jax(index, clamped):
    # JAX 0.10.2 clamps a static integer index (a negative one counted from the end first)
    data = np.arange(6.0).reshape(2, 3)
    x = jnp.asarray(data)
    np.testing.assert_array_equal(np.asarray(x[index]), data[clamped])
    np.testing.assert_array_equal(np.asarray(shardc.jit(lambda a: a[index])(x)), data[clamped])
    assert float(x.at[(1, 9)].get(fill_value=-1.0)) == 5.0      # fill_value needs mode='fill'
    with pytest.raises(IndexError, match="out of bounds"):
        jnp.ones((0, 3))[0]


def test_bad_indices():
    x = jnp.ones((2, 3))
    with pytest.raises(IndexError, match="Too many indices"):
        x[0, 0, 0]
    with pytest.raises(IndexError, match="single ellipsis"):
        x[..., 0, ...]
    with pytest.raises(TypeError, match="Indexer"):
        x[1.5]
    with pytest.raises(TypeError, match="integer or boolean type"):
        x[jnp.array([0.0, 1.0])]
    with pytest.raises(shardc.errors.NonConcreteBooleanIndexError,
                       match=r"Array boolean indices must be concrete; got bool\["):
        shardc.jit(lambda a, m: a[m])(x, x > 0)
    with pytest.raises(IndexError):                   # JAX's class is an IndexError
        shardc.jit(lambda a: a[a > 0])(x)


def test_other_shape_errors():
    with pytest.raises(TypeError) as info:
        jnp.transpose(jnp.ones((2, 3, 4)), (0, 0, 1))
    assert str(info.value) == ("transpose permutation isn't a permutation of operand "
                               "dimensions, got permutation (0, 0, 1) for operand shape "
                               "(2, 3, 4).")
    with pytest.raises(ValueError, match="size not equal to one"):
        jnp.squeeze(jnp.ones((1, 3)), 1)
    with pytest.raises(TypeError, match=r"\(2, 3\), \(3, 3\)"):
        jnp.concatenate([jnp.ones((2, 3)), jnp.ones((3, 3))], axis=1)
    with pytest.raises(ValueError, match="same shape"):
        jnp.stack([jnp.ones(2), jnp.ones(3)])
    with pytest.raises(ValueError, match="equal division"):
        jnp.split(jnp.ones(5), 2)
    with pytest.raises(ValueError, match="at least 1-dimensional"):
        jnp.matmul(jnp.ones(3), 2.0)
    with pytest.raises(ValueError, match="zero-size array"):
        jnp.max(jnp.ones((0, 3)), axis=0)
    with pytest.raises(ValueError, match="einsum"):
        jnp.einsum("ij,jk->ik", jnp.ones((2, 3)))


@pytest.mark.parametrize("sections", [1, 3, 4])
def test_array_split_under_jit_matches_numpy(sections):
    # section sizes are Python ints worked out at trace time (a traced divmod would make
    # them arrays, which no shape can take)
    x = np.arange(20.0).reshape(10, 2)
    split = lambda v: jnp.array_split(v, sections)
    for f in (split, shardc.jit(split)):
        got = f(x)
        want = np.array_split(x, sections)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(np.asarray(g), w)


def test_einsum_labels_of_different_sizes_are_jaxs_value_error():
    with pytest.raises(ValueError) as err:
        jnp.einsum("ij,jk->ik", jnp.ones((2, 3)), jnp.ones((4, 2)))
    assert str(err.value) == ("Size of label 'j' for operand 1 (3) does not match previous "
                              "terms (4).")


def test_einsum_refuses_a_path_contracting_three_operands_at_once():
    a, b, c = np.ones((2, 3)), np.arange(8.0).reshape(2, 4), np.ones((2, 5))
    for path in ([(0, 1, 2)], ["einsum_path", (0, 1, 2)]):
        with pytest.raises(NotImplementedError, match="^jax.numpy.einsum does not support "
                                                      "simultaneous contraction of 3 or more "
                                                      "operands. Typically this means"):
            jnp.einsum("ij,ik,il->jkl", a, b, c, optimize=path)
    # a path of pairs is followed to the same values
    got = jnp.einsum("ij,ik,il->jkl", a, b, c, optimize=[(0, 1), (0, 1)])
    np.testing.assert_allclose(np.asarray(got), np.einsum("ij,ik,il->jkl", a, b, c))


# --- where= and initial= of the reductions, the pad modes, einsum's ellipsis (against numpy) ---

_R = (np.arange(24, dtype=np.float32).reshape(2, 3, 4) % 7) - 3
_MASK = _R > 0


@pytest.mark.parametrize("name, kwargs", [
    ("sum", dict(axis=1, where=_MASK)), ("sum", dict(axis=1, where=_MASK, initial=10.0)),
    ("prod", dict(axis=2, where=_MASK)), ("max", dict(axis=0, initial=1.5)),
    ("max", dict(axis=1, where=_MASK, initial=-9.0)), ("min", dict(axis=2, where=_MASK,
                                                                  initial=10.0)),
    ("mean", dict(axis=(0, 2), where=_MASK)), ("var", dict(axis=1, where=_MASK, ddof=1)),
    ("std", dict(where=_MASK)), ("all", dict(axis=0, where=_MASK)),
    ("any", dict(axis=2, where=_MASK)), ("nansum", dict(axis=1, where=_MASK)),
])
def test_reductions_take_where_and_initial(name, kwargs):
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # numpy's empty slices, as NaN
        want = getattr(np, name)(_R, **kwargs)
    np.testing.assert_allclose(np.asarray(getattr(jnp, name)(_R, **kwargs)), want, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(shardc.jit(lambda a: getattr(jnp, name)(a, **kwargs))(
        _R)), want, rtol=1e-5)


def test_reduction_where_without_initial_and_empty_reductions():
    with pytest.raises(ValueError, match="reduction operation max does not have an identity, "
                                         "so to use a where mask one has to specify 'initial'"):
        jnp.max(_R, where=_MASK)
    assert float(jnp.max(jnp.zeros((0,)), initial=3.0)) == 3.0
    np.testing.assert_array_equal(jnp.min(jnp.zeros((0, 3)), axis=0, initial=-1.0), [-1.0] * 3)
    np.testing.assert_allclose(jnp.var(_R, correction=1), np.var(_R, ddof=1), rtol=1e-5)
    np.testing.assert_allclose(jnp.var(_R, axis=0, mean=np.ones((1, 3, 4))),
                               ((_R - 1) ** 2).mean(0), rtol=1e-5)
    # positional arguments in numpy's (and JAX's) order: out comes before keepdims
    assert jnp.sum(_R, 1, None, None, True).shape == (2, 1, 4)


@pytest.mark.parametrize("mode, kwargs", [
    ("reflect", {}), ("symmetric", {}), ("edge", {}), ("wrap", {}), ("maximum", {}),
    ("minimum", {}), ("mean", {}), ("linear_ramp", {"end_values": ((1, 2), (3, 4))}),
    ("constant", {"constant_values": ((1, 2), (3, 4))}),
])
@pytest.mark.parametrize("widths", [((1, 2), (0, 3)), 2, ((5, 6), (7, 1)), ((13, 2), (0, 9))])
def test_pad_modes_equal_numpys(mode, kwargs, widths):
    x = _R[0]
    np.testing.assert_allclose(np.asarray(jnp.pad(x, widths, mode=mode, **kwargs)),
                               np.pad(x, widths, mode=mode, **kwargs), rtol=1e-5, atol=1e-6)
    got = shardc.jit(lambda a: jnp.pad(a, widths, mode=mode, **kwargs))(x)
    np.testing.assert_allclose(np.asarray(got), np.pad(x, widths, mode=mode, **kwargs),
                               rtol=1e-5, atol=1e-6)


def test_pad_modes_differentiate_and_refuse_what_they_lack():
    grad = shardc.grad(lambda a: (jnp.pad(a, ((1, 2), (2, 1)), mode="reflect") ** 2).sum())(
        _R[0])
    eps, want = 1e-3, np.zeros_like(_R[0], np.float64)
    base = _R[0].astype(np.float64)
    for index in np.ndindex(*base.shape):
        up, down = base.copy(), base.copy()
        up[index] += eps
        down[index] -= eps
        want[index] = ((np.pad(up, ((1, 2), (2, 1)), mode="reflect") ** 2).sum()
                       - (np.pad(down, ((1, 2), (2, 1)), mode="reflect") ** 2).sum()) / (2 * eps)
    np.testing.assert_allclose(np.asarray(grad), want, rtol=1e-3)
    with pytest.raises(NotImplementedError, match="Unimplemented padding mode 'foo'"):
        jnp.pad(_R[0], 1, mode="foo")
    with pytest.raises(ValueError, match="unsupported keyword arguments for mode 'edge'"):
        jnp.pad(_R[0], 1, mode="edge", end_values=3)


@pytest.mark.parametrize("subscripts, shapes", [
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]), ("...ij,...jk", [(2, 3, 4), (2, 4, 5)]),
    ("i...->...", [(2, 3, 4)]),
    ("...ii->...i", [(2, 3, 3)]), ("ij...,jk...->ik...", [(3, 4, 2), (4, 5, 2)]),
    ("...j,j->...", [(2, 3, 4), (4,)]), ("a...,a...", [(2, 3), (2, 3)]),
])
def test_einsum_with_ellipsis(subscripts, shapes):
    rng = np.random.default_rng(0)
    ops = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    np.testing.assert_allclose(np.asarray(jnp.einsum(subscripts, *ops)),
                               np.einsum(subscripts, *ops), rtol=1e-5, atol=1e-5)


def test_einsum_sums_ellipsis_dimensions_its_output_omits():
    """As JAX (numpy refuses it): the dimensions under '...' are summed when the output
    leaves them out."""
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 4, 5))
    np.testing.assert_allclose(np.asarray(jnp.einsum("bij,...jk->bik", a, b)),
                               np.einsum("bij,ljk->bik", a, b), rtol=1e-5, atol=1e-5)


def test_asarray_and_array_take_numpys_keywords():
    """``copy`` and ``order='K'`` change nothing (a host value is always copied in; another
    order is JAX's NotImplementedError); ``ndmin`` adds leading dimensions."""
    host = np.arange(3.0, dtype=np.float32)
    assert jnp.asarray(host, copy=True, order="K").shape == (3,)
    assert jnp.array([1, 2], ndmin=3).shape == (1, 1, 2)
    assert str(shardc.typeof(jnp.array(2.0, ndmin=1))) == "~float32[1]"
    with pytest.raises(NotImplementedError, match="Only implemented for order='K'"):
        jnp.asarray(host, order="C")


@pytest.mark.parametrize("subscripts, shapes", [
    ("aa->a", [(3, 3)]), ("ba,b->", [(2, 3), (2,)]), ("ab,bc->ac", [(2, 3), (3, 2)]),
    ("iij->ij", [(2, 2, 3)])])
def test_einsum_of_booleans_is_boolean(subscripts, shapes):
    rng = np.random.default_rng(7)
    operands = [rng.random(s) > 0.5 for s in shapes]
    got = jnp.einsum(subscripts, *operands)
    want = np.einsum(subscripts, *operands)
    assert got.dtype == np.bool_ == want.dtype
    np.testing.assert_array_equal(np.asarray(got), want)


def test_einsum_takes_a_diagonal_without_touching_what_is_off_it():
    x = np.array([[[np.inf, np.inf], [1.0, 1.0]]], np.float32)
    np.testing.assert_array_equal(np.asarray(jnp.einsum("baa->ba", x)), [[np.inf, 1.0]])


@pytest.mark.parametrize("subscripts, shapes", [
    ("ijk,ikl->ijl", [(1, 4, 5), (3, 5, 6)]),        # a batch index of size 1 broadcasts
    ("ij,jk->ik", [(2, 1), (3, 4)]),                  # a contracted one too
    ("ij,ij->ij", [(1, 3), (2, 3)])])
def test_einsum_broadcasts_indices_of_size_one_as_numpy(subscripts, shapes):
    rng = np.random.default_rng(8)
    operands = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    got = jnp.einsum(subscripts, *operands)
    np.testing.assert_allclose(np.asarray(got), np.einsum(subscripts, *operands), rtol=1e-5)


def test_array_arguments_and_methods_as_jax():
    # typed values among Python numbers promote as JAX's (the numbers weakly typed)
    assert jnp.array([jnp.int8(1), 2]).dtype == np.int8
    assert jnp.array([np.float16(1), 2.0]).dtype == np.float16
    assert jnp.asarray([jnp.bfloat16(1), 2.5]).dtype == jnp.bfloat16
    assert jnp.array([jnp.int8(1), 2.5]).dtype == np.float32
    with pytest.raises(OverflowError):
        jnp.array([[np.uint8(1)], [300]])
    # an integer matrix power stays integer (and wraps as its products do)
    power = jnp.linalg.matrix_power(np.array([[1, 1], [1, 0]], np.int8), 3)
    assert power.dtype == np.int8 and np.asarray(power).tolist() == [[3, 2], [2, 1]]
    # linspace's step, axis and array bounds
    values, step = jnp.linspace(0.0, 1.0, 5, retstep=True)
    assert float(step) == 0.25 and np.asarray(values).tolist() == [0, 0.25, 0.5, 0.75, 1.0]
    grid = jnp.linspace(np.zeros(2), np.array([1.0, 3.0]), 4, axis=1)
    np.testing.assert_allclose(np.asarray(grid), [[0, 1 / 3, 2 / 3, 1], [0, 1, 2, 3]],
                               rtol=1e-6)
    assert jnp.linspace(np.zeros((2, 3)), 1.0, 5, axis=-1).shape == (2, 3, 5)
    # keywords and methods JAX's have
    assert jnp.astype(jnp.ones(2), jnp.int32, copy=True).dtype == np.int32
    assert jnp.trace(jnp.ones((2, 2), jnp.int8), dtype=jnp.float32).dtype == np.float32
    np.testing.assert_array_equal(np.asarray(jnp.arange(4).at[1].subtract(3)), [0, -2, 2, 3])
    assert float(jnp.linalg.slogdet(jnp.eye(2), method="qr")[1]) == 0.0
    with pytest.raises(ValueError, match="invalid value for keyword 'method'"):
        jnp.digitize(np.array([0.5]), np.array([0.0, 1.0]), method="compare")
    bits = jnp.arange(4, dtype=jnp.float32).view(jnp.int32)
    np.testing.assert_array_equal(np.asarray(bits), np.arange(4, dtype=np.float32).view(np.int32))
    assert jnp.arange(8, dtype=jnp.uint8).reshape(2, 4).view(jnp.int32).shape == (2, 1)
    assert jnp.arange(4, dtype=jnp.float32).view(jnp.uint16).shape == (8,)


def test_arange_takes_its_bounds_dtype_and_rounds_low_precision_steps_once():
    assert jnp.arange(jnp.int8(3)).dtype == np.int8
    assert jnp.arange(np.int16(2), 7).dtype == np.int16
    assert jnp.arange(np.uint8(5)).dtype == np.uint8
    assert jnp.arange(5).dtype == np.int32 and jnp.arange(2.5).dtype == np.float32
    # float16 steps in float32, rounded once: 0.3 is float16(0.3), not 3 float16 steps
    values = np.asarray(jnp.arange(0, 1, 0.1, dtype=jnp.float16))
    np.testing.assert_array_equal(values, (np.arange(10, dtype=np.float32)
                                           * np.float32(0.1)).astype(np.float16))
    with pytest.raises(ValueError, match="complex start/stop/step"):
        jnp.arange(1j)


X2345 = np.arange(120, dtype=np.int32).reshape(2, 3, 4, 5)


@pytest.mark.parametrize("index", [
    np.index_exp[0, :2, True], np.index_exp[:2, np.array([0, 2]), True],
    np.index_exp[np.array([1, 0]), :, True], np.index_exp[True, :, True, :, np.array(True)],
    np.index_exp[True], np.index_exp[False], np.index_exp[:, False], np.index_exp[..., True],
    np.index_exp[0, True, 1], np.index_exp[np.array([0, 1]), True, np.array([1, 2])],
    np.index_exp[1, False, :, 2]], ids=str)
def test_scalar_booleans_index_as_advanced_entries_as_numpy(index):
    """A scalar boolean is an advanced index over a new axis: it broadcasts with the integer
    and array entries and counts in numpy's adjacency rule (``x[0, :2, True]`` puts its
    length-1 axis first)."""
    want = X2345[index]
    assert_matches(jnp.asarray(X2345)[index], want, np.int32)
    assert_matches(shardc.jit(lambda a: a[index])(X2345), want, np.int32)
    updated = X2345.copy()
    updated[index] = -np.arange(want.shape[-1], dtype=np.int32) if want.ndim else -1
    value = -np.arange(want.shape[-1], dtype=np.int32) if want.ndim else -1
    assert_matches(jnp.asarray(X2345).at[index].set(value), updated, np.int32)
    added = X2345.copy()
    added[index] += 100
    assert_matches(shardc.jit(lambda a: a.at[index].add(100))(X2345), added, np.int32)


def test_wrap_negative_indices_false_reads_negative_indices_as_out_of_bounds():
    x = jnp.arange(5.0)
    # clamping modes read index 0; fill reads the fill value; updates drop or clamp to 0
    assert float(x.at[-1].get(wrap_negative_indices=False)) == 0.0
    assert np.isnan(float(x.at[-1].get(wrap_negative_indices=False, mode="fill")))
    assert_matches(x.at[jnp.array([-1, 2, -7])].get(wrap_negative_indices=False, mode="fill",
                                                     fill_value=-9), [-9.0, 2.0, -9.0], F32)
    assert_matches(x.at[-1].set(99, wrap_negative_indices=False, mode="drop"),
                   np.arange(5.0), F32)
    assert_matches(x.at[-1].set(99, wrap_negative_indices=False, mode="clip"),
                   [99.0, 1, 2, 3, 4], F32)
    assert_matches(x.at[jnp.array([-1, 1])].add(10, wrap_negative_indices=False),
                   [0.0, 11, 2, 3, 4], F32)
    traced = shardc.jit(lambda x, i: x.at[i].get(wrap_negative_indices=False, mode="fill"))
    assert_matches(traced(x, jnp.array([-2, 3])), [np.nan, 3.0], F32)
    assert_matches(x.at[-2].divide(2.0, wrap_negative_indices=False), np.arange(5.0), F32)
    assert float(x.at[-1].get(wrap_negative_indices=True)) == 4.0


def test_empty_masks_scalar_updates_and_static_index_checks():
    assert jnp.ones(3, jnp.int32)[np.empty((0,), bool)].shape == (0,)
    assert jnp.ones((3, 4), jnp.int32)[np.empty((0,), bool)].shape == (0, 4)
    # a Python int the dtype holds is taken in that dtype, not first as int32
    assert_matches(jnp.zeros(1, jnp.uint32).at[0].set(2**32 - 1), [2**32 - 1], np.uint32)
    with pytest.raises(IndexError, match=r"Too many indices: array is 2-dimensional, but 3 "
                                         r"were indexed"):
        jnp.zeros((2, 3))[1, 2, 3]
    x = jnp.zeros((2, 3, 5))
    assert float(x[0, 0, 9]) == 0.0                       # clamped by default
    shardc.config.update("jax_check_static_indices", True)
    try:
        for index, message in ((np.index_exp[3, :, 0], "index 3 out of bounds for axis 0 "
                                "with size 2"),
                               (np.index_exp[:, [1, 2], 6], "index 6 out of bounds for axis 2 "
                                "with size 5"),
                               (np.index_exp[..., -6], "index -6 out of bounds for axis 2 "
                                "with size 5")):
            for read in (lambda: x[index], lambda: shardc.jit(lambda a: a[index])(x),
                         lambda: x.at[index].get()):
                with pytest.raises(IndexError, match=re.escape(message)):
                    read()
        assert float(x.at[0, 0, 9].get(mode="clip")) == 0.0     # only where it would clamp
    finally:
        shardc.config.update("jax_check_static_indices", False)


def test_bad_index_entries_raise_jax_errors():
    for index, error, message in (
            (0.0, TypeError, "Indexer must have integer or boolean type, got indexer with type "
                             "float64"),
            ((np.arange(2), 1 + 1j), TypeError, "got indexer with type complex128"),
            ("abc", TypeError, "JAX does not support string indexing; got idx='abc'"),
            ((slice(None), "abc"), TypeError, "JAX does not support string indexing"),
            (object(), IndexError, "only integers, slices (`:`), ellipsis (`...`), newaxis "
                                   "(`None`) and integer or boolean arrays are valid indices")):
        with pytest.raises(error, match=re.escape(message)):
            jnp.zeros((2, 2))[index]
    # slice bounds must be static: a traced bound would decide the shape
    with pytest.raises(IndexError, match=r"Slice entries must be static integers. Got "
                                         r"slice\(None, .*\) at position 1"):
        shardc.jit(lambda x, i: x[:, :i])(jnp.zeros((2, 5)), 2)


def test_lcm_wraps_and_float16_spacing_steps_up_as_numpy():
    x = np.array([-60, -24, -118, 84, 0, 7], np.int8)
    y = np.array([-44, -34, 47, 22, 5, 0], np.int8)
    assert_matches(jnp.lcm(x, y), np.lcm(x, y), np.int8)       # 660 wraps to -108
    h = np.array([-1.0, -3.0, -0.5, 1.0, 0.25, 0.0], np.float16)
    assert_matches(jnp.spacing(h), np.spacing(h), np.float16)
    f = np.array([-1.0, 0.5], np.float32)
    assert_matches(jnp.spacing(f), np.spacing(f), np.float32)


def test_polyval_of_coefficient_columns_broadcasts_with_x():
    p = np.arange(6, dtype=np.float32).reshape(3, 2)
    for x in (np.array([1.5, 2.0], np.float32), np.float32(2.0)):
        assert_matches(jnp.polyval(p, x), np.polyval(p, x), np.float32)
    with pytest.raises(ValueError, match="rank 1 or more"):
        jnp.polyval(np.float32(3.0), np.ones(2, np.float32))


def test_i0_derivative_is_i1_and_narrow_floats_compute_in_float32():
    assert float(shardc.grad(jnp.i0)(0.0)) == 0.0
    xs = np.array([-3.0, -0.5, 0.5, 2.0, 9.0], np.float32)
    grads = np.asarray(shardc.vmap(shardc.grad(jnp.i0))(xs))
    eps = 1e-3
    numeric = (np.i0(xs.astype(np.float64) + eps) - np.i0(xs.astype(np.float64) - eps)) / (2 * eps)
    np.testing.assert_allclose(grads, numeric, rtol=1e-4)
    narrow = np.array([6.5, 6.53, 6.6], dtype=jnp.bfloat16)
    got = jnp.i0(narrow)
    assert got.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(got, np.float32),
                                  np.i0(narrow.astype(np.float32)).astype(jnp.bfloat16)
                                  .astype(np.float32))


def test_joining_functions_take_a_result_dtype():
    a = np.array([[1.5, -2.7], [3.2, 4.9]], np.float32)
    b = np.array([[7, 8]], np.int32)
    for f in (lambda x, y: jnp.concatenate([x, y], dtype=jnp.int32),
              shardc.jit(lambda x, y: jnp.concatenate([x, y], dtype=jnp.int32))):
        got = f(a, b)
        assert got.dtype == I32 and not got.weak_type
        assert np.asarray(got).tolist() == [[1, -2], [3, 4], [7, 8]]
    assert jnp.concatenate([a, b], axis=None, dtype=np.float16).dtype == np.float16
    assert np.asarray(jnp.stack([a, a], axis=1, dtype=jnp.int32)).tolist() == \
        [[[1, -2], [1, -2]], [[3, 4], [3, 4]]]
    assert np.asarray(jnp.stack(np.ones((2, 3), np.float32), 1, dtype=jnp.int32)).shape == (3, 2)
    assert np.asarray(jnp.vstack([np.float32(1.5), np.int32(2)], dtype=I32)).tolist() == [[1], [2]]
    got = jnp.hstack([np.array([1.5, 2.5], np.float32), np.array([3], np.int32)], dtype=np.float16)
    assert got.dtype == np.float16 and np.asarray(got).tolist() == [1.5, 2.5, 3.0]
    assert jnp.dstack([a, a], dtype=jnp.int32).dtype == I32


def test_argsort_corrcoef_and_ravel_multi_index_take_a_dtype():
    x = jnp.array([3., 1., 2., 1.])
    got = jnp.argsort(x, dtype=np.int16)
    assert got.dtype == np.int16 and np.asarray(got).tolist() == [1, 3, 2, 0]
    got = jnp.argsort(x, descending=True, dtype=np.uint32)
    assert got.dtype == np.uint32 and np.asarray(got).tolist() == [0, 2, 1, 3]
    got = jnp.corrcoef(jnp.arange(5), jnp.arange(5)[::-1], dtype="bfloat16")
    assert got.dtype == jnp.bfloat16 and np.asarray(got, np.float32).tolist() == [[1, -1], [-1, 1]]
    with pytest.raises(ValueError, match="corrcoef: dtype must be a subclass of float"):
        jnp.corrcoef(jnp.arange(5), dtype=int)
    # with no dtype, the coordinates' promoted dtype (int8 stays int8, as in JAX)
    i8, u8 = jnp.array([0, 1], jnp.int8), jnp.array([1, 2], jnp.uint8)
    got = jnp.ravel_multi_index((i8, i8), (2, 3), mode="ignore")
    assert got.dtype == np.int8 and not got.weak_type and np.asarray(got).tolist() == [0, 4]
    got = shardc.jit(lambda i, j: jnp.ravel_multi_index((i, j), (2, 3), mode="clip"))(i8, u8)
    assert got.dtype == np.int16 and np.asarray(got).tolist() == [1, 5]
    got = jnp.ravel_multi_index((i8, u8), (2, 3), mode="wrap", order="F", dtype=jnp.int16)
    assert got.dtype == np.int16 and np.asarray(got).tolist() == [2, 5]
    with pytest.raises(ValueError, match="not large enough to hold flattened index"):
        jnp.ravel_multi_index((i8, i8), (20, 20), mode="clip")
    with pytest.raises(ValueError, match="is not an integer type"):
        jnp.ravel_multi_index((i8, i8), (2, 3), mode="clip", dtype=float)
    with pytest.raises(shardc.errors.ConcretizationTypeError, match="mode='raise'"):
        shardc.jit(lambda i: jnp.ravel_multi_index((i, i), (2, 3)))(np.array([0, 1]))


def test_python_number_types_as_dtypes_ask_for_the_default_types_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert jnp.zeros(2, dtype=float).dtype == F32
        assert jnp.zeros(2, dtype=int).dtype == I32
    with pytest.warns(UserWarning, match="Explicitly requested dtype float64"):
        jnp.zeros(2, dtype="float64")


_ASKING_FOR_64_BITS = [
    ("array", lambda: jnp.array([1.0], dtype=np.float64)),
    ("asarray", lambda: jnp.asarray([1.0], dtype=np.float64)),
    ("astype", lambda: jnp.ones(2).astype(np.float64)),
    ("astype", lambda: shardc.jit(lambda x: x.astype(np.float64))(jnp.ones(2))),
    ("convert_element_type", lambda: lax.convert_element_type(jnp.ones(2), np.float64)),
    ("arange", lambda: jnp.arange(3, dtype=np.int64)),
    ("full", lambda: jnp.full(2, 1, np.int64)),
    ("zeros", lambda: jnp.zeros(2, np.int64)),
    ("zeros_like", lambda: jnp.zeros_like(jnp.ones(2), dtype=np.float64)),
    ("ones_like", lambda: jnp.ones_like(jnp.ones(2), dtype=np.complex128)),
    ("full_like", lambda: jnp.full_like(jnp.ones(2), 3, dtype=np.uint64)),
    # (these truncated silently)
    ("eye", lambda: jnp.eye(2, dtype=np.float64)),
    ("identity", lambda: jnp.identity(2, dtype=np.float64)),
    ("linspace", lambda: jnp.linspace(0, 1, 3, dtype=np.float64)),
    ("tri", lambda: jnp.tri(2, dtype=np.float64)),
    ("indices", lambda: jnp.indices((2, 2), dtype=np.int64)),
    ("arange", lambda: jnp.fft.fftfreq(4, dtype=np.float64)),     # (JAX's computes with it)
    ("sum", lambda: jnp.sum(jnp.ones(3), dtype=np.float64)),
    ("prod", lambda: jnp.prod(jnp.ones(3), dtype=np.float64)),
    ("mean", lambda: jnp.mean(jnp.ones(3), dtype=np.float64)),
    ("var", lambda: jnp.var(jnp.ones(3), dtype=np.float64)),
    ("std", lambda: jnp.std(jnp.ones(3), dtype=np.float64)),
    ("cumsum", lambda: jnp.cumsum(jnp.ones(3), dtype=np.float64)),
    ("cumprod", lambda: jnp.cumprod(jnp.ones(3), dtype=np.float64)),
    ("broadcasted_iota", lambda: lax.iota(np.int64, 3)),
]


@pytest.mark.parametrize("function, call", _ASKING_FOR_64_BITS)
def test_a_64_bit_dtype_asked_for_with_x64_off_warns_naming_the_function(function, call):
    """JAX's UserWarning, naming the function asked, for each way of asking for a 64-bit
    dtype with x64 off (astype, convert_element_type, arange and the *_like functions gave
    none; array named asarray), and the result truncated to 32 bits."""
    with pytest.warns(UserWarning) as record:
        result = call()
    assert len(record) == 1
    assert re.match(rf"Explicitly requested dtype \w+ requested in {function} is not "
                    r"available, and will be truncated to dtype \w+", str(record[0].message))
    assert np.dtype(result.dtype).itemsize <= 8 and result.dtype != np.float64


@pytest.mark.parametrize("function, call", _ASKING_FOR_64_BITS)
def test_jax_explicit_x64_dtypes_error_refuses_a_64_bit_dtype(function, call):
    """``jax_explicit_x64_dtypes='error'``: JAX's ValueError naming the function instead of
    the warning; Python's number types still ask for the default types. Under 'allow' JAX
    keeps the 64-bit dtype; shardc refuses it rather than truncate it quietly, and takes
    other dtypes as ever."""
    shardc.config.update("jax_explicit_x64_dtypes", "error")
    try:
        with pytest.raises(ValueError, match=rf"Explicitly requested dtype \w+ requested in "
                                             rf"{function} is not available\. To enable"):
            call()
        assert jnp.zeros(2, dtype=float).dtype == np.float32
    finally:
        shardc.config.update("jax_explicit_x64_dtypes", "warn")
    assert shardc.config.jax_explicit_x64_dtypes == "warn"
    shardc.config.update("jax_explicit_x64_dtypes", "allow")
    try:
        with pytest.raises(NotImplementedError, match=rf"requested in {function} under "
                                                      "jax_explicit_x64_dtypes='allow'"):
            call()
        assert jnp.zeros(2, dtype=np.float32).dtype == np.float32
    finally:
        shardc.config.update("jax_explicit_x64_dtypes", "warn")
    with pytest.raises(ValueError, match="new enum value must be in"):
        shardc.config.update("jax_explicit_x64_dtypes", "sometimes")


def test_byteswap_reverses_each_elements_bytes():
    for dt in (np.int32, np.float32, np.int16, np.uint8, np.bool_, np.complex64, jnp.bfloat16,
               np.float16):
        x = np.array([[1, 2, 3], [250, 7, 0]]).astype(dt)
        for f in (lambda a: jnp.asarray(a).byteswap(), shardc.jit(lambda a: a.byteswap())):
            got = f(x)
            assert got.dtype == x.dtype
            np.testing.assert_array_equal(np.asarray(got).view(np.uint8),
                                          x.byteswap().view(np.uint8))
    scalar = np.float16(2.69)             # a 0-d array's bytes too
    assert np.asarray(jnp.asarray(scalar).byteswap()).tobytes() == scalar.byteswap().tobytes()


def test_item_tobytes_nbytes_itemsize_and_argpartition_as_methods():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    a = jnp.asarray(x)
    assert (a.item(5), a.item((1, 2, 3)), a.item(1, 2, 3)) == (5.0, 23.0, 23.0)
    with pytest.raises(ValueError):
        a.item()
    assert a.tobytes() == x.tobytes() and a.tobytes("F") == x.tobytes("F")
    got = shardc.jit(lambda v: v * 0 + v.nbytes + v[0].itemsize)(np.zeros((2, 3), np.int16))
    assert np.asarray(got).tolist() == [[14] * 3] * 2
    idx = np.asarray(a.argpartition(1, axis=1))
    assert idx.shape == x.shape and (np.sort(idx, axis=1) == np.arange(3)[:, None]).all()
    for method in ("tobytes", "tolist"):
        with pytest.raises(shardc.errors.ConcretizationTypeError,
                           match=rf"The {method}\(\) method was called on traced array"):
            shardc.jit(lambda v: getattr(v, method)())(x)


def test_insert_at_traced_or_out_of_range_positions_as_jax():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    cases = [  # (obj, values, axis, expected as JAX gives it)
        (1, 9.0, None, np.insert(x, 1, 9.0)),
        (-2, 9.0, 1, np.insert(x, -2, 9.0, axis=1)),
        (np.array([0, 2, 2]), np.array([7.0, 8.0, 9.0]), 1,
         np.insert(x, [0, 2, 2], [7.0, 8.0, 9.0], axis=1)),
        (np.array([3, 0, 1]), np.array([[7.0], [8.0], [9.0]]), 0,
         np.insert(x, [3, 0, 1], [[7.0], [8.0], [9.0]], axis=0)),
        (1, np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), 1,
         np.insert(x, 1, [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], axis=1)),
        (20, 5.0, None, np.append(x, 5.0)),                    # clipped to the end (JAX's)
        (-10, 5.0, 0, np.insert(x, 0, 5.0, axis=0)),            # clipped to the start
    ]
    for obj, values, axis, want in cases:
        assert_matches(jnp.insert(x, obj, values, axis=axis), want, F32)
        traced = shardc.jit(lambda a, o, v: jnp.insert(a, o, v, axis=axis))(x, obj, values)
        assert_matches(traced, want, F32)
    got = jnp.insert(x.astype(np.int32), 2, 7.9, axis=0)    # values take arr's dtype
    assert_matches(got, np.insert(x.astype(np.int32), 2, 7, axis=0), I32)
    with pytest.raises(ValueError, match="one-dimensional array, or a scalar"):
        jnp.insert(x, np.array([[1]]), 1.0)
    with pytest.raises(ValueError, match="must be integer typed"):
        jnp.insert(x, np.array([1.0]), 1.0)


def test_delete_of_traced_unique_indices():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    delete = shardc.jit(lambda a, o, axis: jnp.delete(a, o, axis=axis, assume_unique_indices=True),
                        static_argnums=2)
    for obj, axis in [(np.array([0, 2]), 1), (np.array([-1, 0]), None), (np.array([[2], [0]]), 0),
                      (np.array([3, 1]), 1), (np.array(1), 1)]:
        want = np.delete(x, obj.ravel(), axis=axis)
        assert_matches(delete(x, obj, axis), want, F32)
        assert_matches(jnp.delete(x, obj, axis=axis, assume_unique_indices=True), want, F32)
    with pytest.raises(shardc.errors.ConcretizationTypeError):
        shardc.jit(lambda a, o: jnp.delete(a, o))(x, np.array([1]))


def test_logspace_and_geomspace_along_any_axis_of_array_bounds():
    s = np.array([1.0, -2.0], np.float32)
    t = np.array([[8.0, -32.0], [3.0, -5.0]], np.float32)
    for kw in [dict(num=4, axis=0), dict(num=4, axis=1), dict(num=3, axis=-1, endpoint=False),
               dict(num=1, axis=2), dict(num=0, axis=-2)]:
        assert_matches(jnp.geomspace(s, t, **kw), np.geomspace(s, t, **kw), F32, rtol=1e-5)
        assert_matches(jnp.logspace(s, t, base=2, **kw), np.logspace(s, t, base=2, **kw), F32,
                       rtol=1e-5)
    traced = shardc.jit(lambda a, b: jnp.geomspace(a, b, 3, axis=1))(s, t)
    assert_matches(traced, np.geomspace(s, t, 3, axis=1), F32, rtol=1e-5)
    got = jnp.geomspace(np.complex64(1 + 1j), np.complex64(-4 + 4j), 3)
    assert_matches(got, np.geomspace(np.complex64(1 + 1j), np.complex64(-4 + 4j), 3),
                   np.complex64, rtol=1e-5)
    assert_matches(jnp.logspace(0, 3, 4, dtype=jnp.int32), [1, 10, 100, 1000], I32)
    with pytest.raises(ValueError, match="cannot include zero"):
        jnp.geomspace(np.array([1.0, 0.0]), 4.0, 3)


def test_trim_zeros_of_n_dimensional_arrays_along_chosen_axes():
    x = np.array([[0, 0, 0, 0], [0, 1, 2, 0], [0, 3, 0, 0], [0, 0, 0, 0]], np.float32)
    for kw in [{}, dict(trim="f"), dict(trim="b", axis=0), dict(axis=-1)]:
        assert_matches(jnp.trim_zeros(x, **kw), np.trim_zeros(x, **kw), F32)
    assert_matches(jnp.trim_zeros(x, axis=(0, 1)), [[1, 2], [3, 0]], F32)
    assert jnp.trim_zeros(np.zeros((2, 3))).shape == (0, 0)
    assert jnp.trim_zeros(np.float32(0)).shape == ()
    with pytest.raises(shardc.errors.ConcretizationTypeError):
        shardc.jit(jnp.trim_zeros)(x)


def test_size_along_a_tuple_of_axes():
    x = jnp.zeros((2, 3, 4))
    assert (jnp.size(x, (0, 2)), jnp.size(x, ()), jnp.size(x, [-1]), jnp.size(x, 1)) == (8, 1, 4, 3)
    with pytest.raises(ValueError, match="repeated axis"):
        jnp.size(x, (1, -2))


def test_take_along_axis_wrap_negative_indices_and_promise_in_bounds():
    x = jnp.array([[10, 20, 30], [40, 50, 60]])
    idx = jnp.array([[-1, -2, 3], [0, 2, -4]])
    low = np.iinfo(np.int32).min
    take = jnp.take_along_axis
    assert take(x, idx, axis=1).tolist() == [[30, 20, low], [40, 60, low]]
    assert take(x, idx, axis=1, wrap_negative_indices=False).tolist() == \
        [[low, low, low], [40, 60, low]]
    assert take(x, idx, axis=1, mode="clip", wrap_negative_indices=False).tolist() == \
        [[10, 10, 30], [40, 60, 40]]
    assert take(x, idx, axis=1, mode="one_hot", wrap_negative_indices=False).tolist() == \
        [[0, 0, 0], [40, 60, 0]]
    # promise_in_bounds: no wrapping unless asked; in-range indices read their elements
    assert take(x, idx, axis=1, mode="promise_in_bounds",
                wrap_negative_indices=True)[:, :2].tolist() == [[30, 20], [40, 60]]
    assert take(x, jnp.array([[2], [0]]), mode="promise_in_bounds").tolist() == [[30], [40]]
    assert take(x, jnp.array([[2], [0]])).tolist() == [[30], [40]]        # axis=-1 by default
    with pytest.raises(ValueError, match="must be 1D if axis=None"):
        take(x, idx, axis=None)


def test_reshape_and_ravel_in_column_major_order():
    x = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    for shape in [(6, 4), (4, 6), (24,), (2, 2, 6), (-1, 2)]:
        assert_matches(jnp.reshape(x, shape, order="F"), np.reshape(x, shape, order="F"), I32)
    assert_matches(jnp.ravel(x, order="F"), np.ravel(x, order="F"), I32)
    traced = shardc.jit(lambda a: a.reshape(4, 6, order="F"))(x)
    assert_matches(traced, x.reshape(4, 6, order="F"), I32)
    with pytest.raises(NotImplementedError, match="order=A"):
        jnp.reshape(jnp.asarray(x), (24,), order="A")
    with pytest.raises(ValueError, match="Unexpected value for 'order'"):
        jnp.reshape(jnp.asarray(x), (24,), order="Q")
    with pytest.raises(NotImplementedError, match="order='K'"):
        jnp.ravel(x, order="K")


def test_roll_by_traced_shifts_along_several_axes():
    x = np.arange(60, dtype=np.int32).reshape(3, 4, 5)
    cases = [(3, None), ((1, 2), (0, -1)), ((4, 2, 5, 5, 2, 4), None), (2, (0, 1, 2)),
             ((1, -1), 2), (-7, -1)]
    for shift, axis in cases:
        want = np.roll(x, shift, axis=axis)
        assert_matches(jnp.roll(x, shift, axis=axis), want, I32)
        traced = shardc.jit(lambda v, s: jnp.roll(v, s, axis=axis))(x, np.array(shift))
        assert_matches(traced, want, I32)
    empty = shardc.jit(lambda v, s: jnp.roll(v, s, (0, 2)))(np.zeros((7, 4, 0)), np.array((1, 2)))
    assert empty.shape == (7, 4, 0)
    with pytest.raises(ValueError, match="must be scalars or 1D arrays"):
        shardc.jit(lambda v, s: jnp.roll(v, s, (0, 1)))(x, np.ones((2, 2), np.int32))


def test_rollaxis_with_a_negative_start_counts_from_the_end():
    x = np.zeros((1, 2, 3, 4))
    for axis in (-3, 0, 2, 3):
        for start in (-4, -1, 2, 4):
            assert jnp.rollaxis(x, axis, start).shape == np.rollaxis(x, axis, start).shape


def test_pad_statistics_over_stat_length_and_the_median():
    x = np.array([[3., 1., 4., 1.], [5., 9., 2., 6.], [5., 3., 5., 8.]], np.float32)
    xi = (x * 3).astype(np.int32)           # integer means and medians round halves to even
    for mode in ("maximum", "minimum", "mean", "median"):
        for stat_length in (None, 2, (1, 3), ((1, 2), (3, 1)), 10):
            for a, dtype in ((x, F32), (xi, I32)):
                want = np.pad(a, ((2, 1), (1, 3)), mode=mode, stat_length=stat_length)
                got = jnp.pad(a, ((2, 1), (1, 3)), mode=mode, stat_length=stat_length)
                assert_matches(got, want, dtype)
    with pytest.raises(ValueError, match="stat_length of 0"):
        jnp.pad(x, 1, "mean", stat_length=0)
    assert jnp.pad(jnp.array(1.0)[None], 0, mode="median").weak_type


def test_pad_odd_reflections_and_a_function_as_the_mode():
    x = np.array([[3., 1., 4., 1.], [5., 9., 2., 6.], [5., 3., 5., 8.]], np.float32)
    for mode in ("reflect", "symmetric"):
        for width in (1, (2, 3), 7, ((0, 5), (9, 2))):
            for a in (x, (x * 3).astype(np.int32), x[:1], x[:, :1]):
                want = np.pad(a, width, mode=mode, reflect_type="odd")
                assert_matches(jnp.pad(a, width, mode=mode, reflect_type="odd"), want, want.dtype)
                traced = shardc.jit(lambda v: jnp.pad(v, width, mode=mode, reflect_type="odd"))
                assert_matches(traced(a), want, want.dtype)

    def fill(vector, width, axis, kwargs):
        value = kwargs.get("padder", 10)
        vector = vector.at[:width[0]].set(value)
        return vector.at[vector.shape[0] - width[1]:].set(value)

    def np_fill(vector, width, axis, kwargs):
        vector[:width[0]] = kwargs.get("padder", 10)
        vector[vector.shape[0] - width[1]:] = kwargs.get("padder", 10)

    a = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    widths = ((1, 0), (0, 2), (1, 1))
    assert_matches(jnp.pad(a, widths, fill, padder=100), np.pad(a, widths, np_fill, padder=100),
                   I32)
    assert_matches(shardc.jit(lambda v: jnp.pad(v, 2, fill))(a), np.pad(a, 2, np_fill), I32)
    for mode in (1, None, "foo"):
        with pytest.raises(NotImplementedError, match=f"Unimplemented padding mode '{mode}'"):
            jnp.pad(np.arange(3), 1, mode)


def test_polyfit_full_and_covariance_results():
    rng = np.random.RandomState(0)
    x, y = rng.randn(12).astype(np.float32), rng.randn(12).astype(np.float32)
    ys, w = rng.randn(12, 3).astype(np.float32), np.abs(rng.randn(12)).astype(np.float32)
    for target in (y, ys):
        for kw in (dict(full=True), dict(full=True, w=w, rcond=1e-3)):
            coefficients, _, rank, singular, rcond = jnp.polyfit(x, target, 2, **kw)
            want = np.polyfit(x, target, 2, **kw)
            np.testing.assert_allclose(np.asarray(coefficients), want[0], rtol=1e-3, atol=1e-4)
            assert int(rank) == want[2]
            np.testing.assert_allclose(np.asarray(singular), want[3], rtol=1e-4)
            assert float(rcond) == pytest.approx(want[4])
        for kw in (dict(cov=True), dict(cov="unscaled"), dict(cov=True, w=w)):
            coefficients, covariance = jnp.polyfit(x, target, 2, **kw)
            want = np.polyfit(x, target, 2, **kw)
            assert covariance.shape == want[1].shape
            np.testing.assert_allclose(np.asarray(covariance), want[1], rtol=1e-3, atol=1e-5)
    traced = shardc.jit(lambda a, b: jnp.polyfit(a, b, 2, cov=True))(x, y)
    np.testing.assert_allclose(np.asarray(traced[1]), np.polyfit(x, y, 2, cov=True)[1],
                               rtol=1e-3, atol=1e-5)
    with pytest.raises(ValueError, match="must exceed order"):
        jnp.polyfit(x[:3], y[:3], 2, cov=True)


def test_unravel_index_keeps_the_indices_dtype_and_takes_a_traced_shape():
    for dtype in (np.int8, np.int16, np.int32, np.uint8):
        flat = np.array([0, 5, 11, 12, 40] if dtype == np.uint8 else
                        [-13, -12, -1, 0, 5, 11, 12, 40]).astype(dtype)
        clamped = np.clip(flat.astype(np.int64), -12, 11)
        want = np.unravel_index(np.where(clamped < 0, clamped + 12, clamped), (3, 4))
        for f in (jnp.unravel_index, shardc.jit(jnp.unravel_index)):  # (3, 4) traced under jit
            got = f(flat, (3, 4))
            for g, w in zip(got, want):
                assert_matches(g, w, dtype)
    assert jnp.unravel_index(np.array([1]), ()) == ()
    with pytest.raises(ValueError, match="scalar or 1D sequence"):
        jnp.unravel_index(np.array([1]), [[2]])


def test_interp_extrapolates_and_keeps_complex_values_apart_from_real_points():
    xp, fp = jnp.array([1.0, 2.0, 3.0]), jnp.array([10.0, 20.0, 30.0])
    x = np.array([0.5, 1.5, 3.5, 3.9], np.float32)
    for kw, want in [(dict(left="extrapolate"), [5, 15, 30, 30]),
                     (dict(right="extrapolate"), [10, 15, 35, 39]),
                     (dict(left=jnp.array(-1.0), right=np.float32(99)), [-1, 15, 99, 99])]:
        assert_matches(jnp.interp(x, xp, fp, **kw), want, F32)
        assert_matches(shardc.jit(lambda a: jnp.interp(a, xp, fp, **kw))(x), want, F32)
    values = np.array([1 + 1j, 2, 3j], np.complex64)
    got = jnp.interp(np.arange(4), np.array([0, 2, 5]), values, period=2.5)
    want = np.interp(np.arange(4), np.array([0, 2, 5]), values, period=2.5)
    assert_matches(got, want, np.complex64)
    with pytest.raises(ValueError, match="the only valid string value of `left`"):
        jnp.interp(0.0, jnp.arange(3.0), jnp.arange(3.0), left="interpolate")
    with pytest.raises(ValueError, match="complex x values not supported"):
        jnp.interp(1j, 1j * np.arange(3.0), np.arange(3.0))
    with pytest.raises(ValueError, match="period must be a scalar"):
        jnp.interp(0.0, jnp.arange(3.0), jnp.arange(3.0), period=np.array([1.0]))


def test_diff_of_order_zero_and_trapezoid_at_several_dimensional_x():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert_matches(jnp.diff(a, n=0, prepend=1, append=np.zeros((3, 4), np.float32)), a, F32)
    rng = np.random.RandomState(0)
    y, x = rng.rand(2, 3, 10).astype(np.float32), rng.rand(3, 10).astype(np.float32)
    for axis in (-2, -1):
        want = np.trapezoid(y, x, axis=axis)
        assert_matches(jnp.trapezoid(y, x, axis=axis), want, F32, rtol=1e-5)


def test_unwrap_of_integers_with_an_integer_period_stays_integer():
    x = np.array([[8, 11, 10, 13, 9, 14], [0, 3, -2, 5, 1, 2]], np.int16)
    # JAX's: half the period rounded down; numpy agrees where the period is even
    assert_matches(jnp.unwrap(x, period=4), np.unwrap(x, period=4), np.int16)
    assert_matches(jnp.unwrap(x, period=4, axis=0, discont=2),
                   np.unwrap(x, period=4, axis=0, discont=2), np.int16)
    got = jnp.unwrap(x)                              # a float period promotes to float
    assert_matches(got, np.unwrap(x.astype(np.float32)), F32, rtol=1e-5)
    with pytest.raises(ValueError, match="does not support complex"):
        jnp.unwrap(np.ones(3, np.complex64))


def test_small_argument_checks_and_forms_as_jax():
    a = np.ones((3, 2, 2), np.float32)
    with pytest.raises(TypeError, match="Number of tensordot axes.*exceeds input ranks"):
        jnp.tensordot(a, np.ones(2), axes=2)
    with pytest.raises(TypeError, match="axes lists to have equal length"):
        jnp.tensordot(a, np.ones(2), axes=([0], [0, 1]))
    with pytest.raises(TypeError, match="either ints, tuples or lists"):
        jnp.tensordot(a, np.ones(2), axes=("bad", "axes"))
    with pytest.raises(TypeError, match="must be an int, a pair of ints"):
        jnp.tensordot(a, np.ones(2), axes="badaxes")
    with pytest.raises(ValueError, match="axis1 and axis2 can not be same"):
        jnp.trace(np.ones((2, 3, 2)), axis1=1, axis2=-2)
    with pytest.raises(ValueError, match="rot90 requires its first argument to have ndim"):
        jnp.rot90(jnp.ones(2))
    for axes in ([1, 1], [3, -1]):
        with pytest.raises(ValueError, match="repeated axis"):
            jnp.expand_dims(np.ones((2, 3)), axes)
    assert jnp.expand_dims(np.ones(()), np.array(0)).shape == (1,)
    assert jnp.expand_dims(np.ones(3), [np.array(-1)]).shape == (3, 1)
    assert int(jnp.lexsort((np.float32(1), np.float32(0)))) == 0     # 0-d keys
    assert jnp.asarray(np.ones((2, 3))).transpose(np.int64(1), 0).shape == (3, 2)
    assert jnp.asarray(np.ones(3)).transpose(np.int64(0)).shape == (3,)
    assert jnp.isdtype(jnp.bfloat16, "real floating") and jnp.isdtype(jnp.bfloat16, "numeric")
    assert not jnp.isdtype(jnp.bfloat16, "integral")
    assert jnp.isdtype(jnp.bfloat16, ("bool", jnp.bfloat16))


def test_a_traced_size_is_a_plain_type_error_but_arange_a_concretization_error():
    """JAX's canonicalize_shape raises a plain TypeError for a traced size (zeros, full,
    broadcast_to, reshape, eye), not ConcretizationTypeError; arange's traced bound is a
    ConcretizationTypeError (a TypeError too)."""
    from shardc.errors import ConcretizationTypeError
    for make in (jnp.zeros, lambda n: jnp.full((n, 2), 1.0),
                 lambda n: jnp.broadcast_to(1.0, (n,)), jnp.eye,
                 lambda n: jnp.reshape(jnp.ones(4), (n, 2))):
        with pytest.raises(TypeError, match="Shapes must be 1D sequences of concrete") as info:
            shardc.jit(make)(2)
        assert type(info.value) is TypeError
    with pytest.raises(ConcretizationTypeError, match="jnp.arange argument 'stop'"):
        shardc.jit(jnp.arange)(3)
    assert jnp.broadcast_to(1.0, 3).shape == (3,)


def test_jax_errors_for_shapes_complex_clips_and_empty_takes():
    with pytest.raises(TypeError, match=r"Did you accidentally write `jax\.numpy\.ones\(2, 3\)`"):
        jnp.ones(2, 3)
    with pytest.raises(TypeError, match="Shapes must be 1D sequences of concrete values"):
        jnp.zeros(1.0)
    with pytest.raises(TypeError, match=r"(?s)Shapes must be 1D.*try using `static_argnums`"):
        shardc.jit(jnp.zeros)(2)
    with pytest.raises(TypeError, match="Shapes must be 1D sequences"):
        shardc.jit(jnp.tri)(3, M=3, k=0)
    with pytest.raises(TypeError, match="must have every element be nonnegative"):
        jnp.ones((-1, 1))
    with pytest.raises(ValueError, match="Cannot broadcast to shape with fewer dimensions"):
        jnp.broadcast_to(jnp.zeros((3, 4, 5)), (4, 5))
    z = jnp.ones(2, jnp.complex64)
    for f in (lambda: jnp.clip(z), lambda: jnp.clip(jnp.ones(2), min=-1 + 5j),
              lambda: jnp.clip(jnp.ones(2), max=z)):
        with pytest.raises(ValueError, match="Complex values have no ordering"):
            f()
    with pytest.raises(ValueError, match="jnp.hypot is not well defined for complex"):
        jnp.hypot(z, 1.0)
    with pytest.raises(IndexError, match="non-empty jnp.take"):
        jnp.take(jnp.ones((2, 0, 4)), jnp.array([0]), axis=1)
    assert jnp.take(jnp.ones((2, 0, 4)), jnp.array([], jnp.int32), axis=1).shape == (2, 0, 4)
    # a complex correlation matrix clips each part
    c = jnp.corrcoef(np.array([[1 + 1j, 2, 3 - 1j], [2, 1j, 0]], np.complex64))
    assert c.dtype == np.complex64 and c.shape == (2, 2)


def test_split_and_choose_name_a_traced_argument_as_jax():
    assert len(jnp.split(jnp.zeros(3), jnp.array([1, 2]))) == 3
    message = "Abstract tracer value encountered where concrete value is expected"
    with pytest.raises(shardc.errors.ConcretizationTypeError, match=message):
        shardc.jit(lambda idx: jnp.split(jnp.zeros((12, 2)), idx))(2.0)
    with pytest.raises(shardc.errors.ConcretizationTypeError, match=message):
        shardc.jit(lambda idx: jnp.split(jnp.zeros((12, 2)), [2, idx]))(2.0)
    pieces = shardc.jvp(lambda idx: jnp.split(jnp.zeros((12, 2)), idx), (2.0,), (1.0,))[0]
    assert [p.shape for p in pieces] == [(6, 2), (6, 2)]
    with pytest.raises(shardc.errors.ConcretizationTypeError,
                       match="jnp.choose was jit-compiled with mode='raise'"):
        shardc.jit(lambda a: jnp.choose(a, [np.ones(2), np.zeros(2)]))(np.array([0, 1]))


def test_ndim_shape_and_size_of_a_list_warn_as_jax():
    for op, want in ((jnp.ndim, 1), (jnp.shape, (3,)), (jnp.size, 3)):
        with pytest.warns(DeprecationWarning, match=f"{op.__name__} requires ndarray or scalar"):
            assert op([1, 2, 3]) == want
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert (jnp.ndim(2.0), jnp.shape(np.ones((2, 3))), jnp.size(jnp.ones(4))) == (0, (2, 3), 4)


def test_eye_with_a_diagonal_far_past_the_ends_is_zeros():
    for n, m, k in [(4, None, 2**100), (4, 3, -2**100), (4, 4, 3), (0, 3, 2**100), (4, 1, -4)]:
        assert_matches(jnp.eye(n, m, k), np.eye(n, m, k), F32)


def test_bincount_of_nothing_has_minlength_entries():
    for minlength in (0, 3):
        got = jnp.bincount(np.array([], np.int8), minlength=minlength)
        assert_matches(got, np.bincount(np.array([], np.int8), minlength=minlength), I32)
    assert jnp.bincount(np.array([1, 4]), minlength=7).shape == (7,)


def test_polymul_trims_leading_zeros_when_asked_and_computes_inexact():
    a, b = np.array([0, 0, 1, 2]), np.array([3])
    assert_matches(jnp.polymul(a, b, trim_leading_zeros=True), np.polymul(a, b), F32)
    assert_matches(jnp.polymul(a, b), [0, 0, 3, 6], F32)
    assert_matches(jnp.polymul(np.array([0, 0]), np.array([0, 5]), trim_leading_zeros=True),
                   [0], F32)
    assert_matches(jnp.polymul(np.array([], np.float32), np.array([2.0])), [0], F32)


@pytest.mark.parametrize("call, context", [
    (lambda a, ax: a.sum(axis=ax), "The axis argument must be known statically."),
    (lambda a, ax: jnp.mean(a, axis=ax), "The axis argument must be known statically."),
    (lambda a, ax: jnp.max(a, axis=ax), "The axis argument must be known statically."),
    (lambda a, ax: jnp.var(a, axis=ax), "The axis argument must be known statically."),
    (lambda a, ax: jnp.flip(a, ax), "The axis argument must be known statically."),
    (lambda a, ax: jnp.expand_dims(a, ax), "expected a static index or sequence of indices."),
    (lambda a, ax: jnp.moveaxis(a, ax, 0), "expected a static index or sequence of indices."),
    (lambda a, ax: jnp.squeeze(a, ax), "expected a static index or sequence of indices."),
])
def test_a_traced_axis_is_a_concretization_error(call, context):
    """JAX's ConcretizationTypeError for a traced ``axis``, saying what must be static."""
    with pytest.raises(shardc.errors.ConcretizationTypeError) as info:
        shardc.jit(call)(jnp.ones((1, 3)), 0)
    assert str(info.value).startswith(
        "Abstract tracer value encountered where concrete value is expected: traced array "
        f"with shape int32[]\n{context}\n")


@pytest.mark.parametrize("call", [
    lambda a, ax: jnp.argmax(a, axis=ax),
    lambda a, ax: jnp.sum(a, axis=(ax,)),
    lambda a, ax: jnp.take(a, jnp.array([0]), axis=ax),
    lambda a, ax: jnp.concatenate([a, a], axis=ax),
    lambda a, ax: jnp.stack([a, a], axis=ax),
])
def test_a_traced_axis_entry_is_an_integer_conversion_error(call):
    """Where JAX converts a traced axis with ``operator.index`` (an int axis of argmax, take,
    concatenate, stack; an entry of a tuple), its TracerIntegerConversionError."""
    with pytest.raises(shardc.errors.TracerIntegerConversionError,
                       match=r"^The __index__\(\) method was called on traced array with shape "
                             r"int32\[\]"):
        shardc.jit(call)(jnp.ones((1, 3)), 0)


def test_an_axis_known_while_tracing_is_static():
    x = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(np.asarray(jnp.sum(x, axis=np.int32(1))), x.sum(1))
    np.testing.assert_array_equal(np.asarray(jnp.expand_dims(x, np.array(0))), x[None])
    np.testing.assert_array_equal(np.asarray(jnp.flip(x, [0, 1])), x[::-1, ::-1])


def test_bincount_out_sharding_is_replicated_or_a_sharding_type_error():
    from shardc.sharding import NamedSharding, PartitionSpec as P
    mesh = shardc.make_mesh((8,), ("i",))                    # Explicit axes
    x = shardc.device_put(np.arange(16, dtype=np.int32) % 5, NamedSharding(mesh, P("i")))
    expected = np.bincount(np.arange(16) % 5, minlength=5)   # [4, 3, 3, 3, 3]
    with shardc.sharding.set_mesh(mesh):
        counts = jnp.bincount(x, length=5, out_sharding=P())
        traced = shardc.jit(lambda x: jnp.bincount(x, length=5, out_sharding=P()))(x)
        with pytest.raises(shardc.sharding.ShardingTypeError,
                           match=r"^out_sharding passed to `jnp.bincount` can only be fully "
                                 r"replicated or fully unreduced along all mesh axes$"):
            jnp.bincount(x, length=8, out_sharding=P("i"))
    for result in (counts, traced):
        np.testing.assert_array_equal(np.asarray(result), expected)
        assert result.sharding == NamedSharding(mesh, P(None))
    given = jnp.bincount(x, length=5, out_sharding=NamedSharding(mesh, P()))
    np.testing.assert_array_equal(np.asarray(given), expected)


def test_an_ellipsis_of_no_dimension_still_separates_integer_indices():
    """numpy (and JAX) read an Ellipsis between integer-array entries as a separator even
    where it stands for no dimension: the broadcast dimensions go in front, for reading and
    for .at updates (whose values are given in that layout); it was read as adjacent."""
    x = np.arange(60).reshape(3, 4, 5)
    a, b = np.array([0, 1]), np.array([[1], [2]])
    for index in [(slice(None), a, ..., a), (slice(None), 0, ..., a), (slice(None), b, ..., a),
                  (None, slice(None), a, ..., b), (slice(None), a, ..., slice(None))]:
        np.testing.assert_array_equal(np.asarray(jnp.asarray(x)[index]), x[index])
        want = x.copy()
        want[index] = -np.arange(np.size(x[index])).reshape(x[index].shape)
        got = jnp.asarray(x).at[index].set(-jnp.arange(np.size(x[index])).reshape(
            x[index].shape))
        np.testing.assert_array_equal(np.asarray(got), want)
    np.testing.assert_array_equal(
        np.asarray(shardc.jit(lambda v, i: v[:, i, ..., i])(jnp.asarray(x), a)), x[:, a, ..., a])


def test_ds_reads_and_updates_a_dynamic_window_as_jax():
    """jax.ds(start, size, stride): a dynamic slice (its start moved back so the window fits
    when read; negative starts count from the end); .at updates of a window that does not fit
    update nothing (JAX's scatter drops them), mode='clip' moves it inside."""
    x = jnp.arange(10.0)
    np.testing.assert_array_equal(np.asarray(x[shardc.ds(1, 3)]), [1, 2, 3])
    np.testing.assert_array_equal(np.asarray(x[shardc.ds(8, 4)]), [6, 7, 8, 9])
    np.testing.assert_array_equal(np.asarray(x[shardc.ds(-3, 2)]), [7, 8])
    np.testing.assert_array_equal(np.asarray(x[shardc.ds(1, 3, 2)]), [1, 3, 5])
    read = shardc.jit(lambda v, i: v[shardc.ds(i, 3)])
    np.testing.assert_array_equal(np.asarray(read(x, 8)), [7, 8, 9])
    y = jnp.arange(24.0).reshape(2, 3, 4)
    np.testing.assert_array_equal(np.asarray(y[1, shardc.ds(0, 2), 1:3]),
                                  np.arange(24.0).reshape(2, 3, 4)[1, 0:2, 1:3])
    np.testing.assert_array_equal(np.asarray(y[..., shardc.ds(2, 2)]),
                                  np.arange(24.0).reshape(2, 3, 4)[..., 2:4])
    np.testing.assert_array_equal(np.asarray(x.at[shardc.ds(2, 3)].set(0.0)),
                                  [0, 1, 0, 0, 0, 5, 6, 7, 8, 9])
    add = shardc.jit(lambda v, i: v.at[shardc.ds(i, 3)].add(1.0))
    np.testing.assert_array_equal(np.asarray(add(x, 7)), np.arange(10.0) + (np.arange(10) >= 7))
    for start in (8, 9, -3):                  # the window does not fit: nothing is updated
        np.testing.assert_array_equal(np.asarray(add(x, start)), np.arange(10.0))
        np.testing.assert_array_equal(np.asarray(x.at[shardc.ds(start, 3)].set(5.0)),
                                      np.arange(10.0))
    np.testing.assert_array_equal(np.asarray(x.at[shardc.ds(1, 3, 3)].set(-1.0)),
                                  [0, -1, 2, 3, -1, 5, 6, -1, 8, 9])
    grad = shardc.grad(lambda v, i: (v[shardc.ds(i, 3)] ** 2).sum())(x, 2)
    np.testing.assert_array_equal(np.asarray(grad), [0, 0, 4, 6, 8, 0, 0, 0, 0, 0])
    assert shardc.ds(None) == slice(None) and shardc.ds(3) == shardc.ds(0, 3)
    ref = shardc.new_ref(jnp.arange(6.0))
    ref[shardc.ds(2, 2)] = jnp.zeros(2)
    np.testing.assert_array_equal(np.asarray(ref[...]), [0, 1, 0, 0, 4, 5])
    with pytest.raises(ValueError, match="`stride` must be >= 0"):
        shardc.ds(0, 2, -1)


def test_lax_dtype_and_an_index_into_an_empty_dimension():
    """lax.dtype as JAX's (Python and numpy types canonicalized, an array's own dtype kept);
    a traced index into a dimension of size 0 is JAX's IndexError."""
    assert shardc.lax.dtype(float) == np.float32 and shardc.lax.dtype(3) == np.int32
    assert shardc.lax.dtype(np.int16) == np.int16 and shardc.lax.dtype(True) == np.bool_
    assert shardc.lax.dtype(np.ones(2)) == np.float32
    assert shardc.lax.dtype(jnp.ones(2, jnp.bfloat16)) == jnp.bfloat16
    with pytest.raises(ValueError, match="Invalid argument to dtype"):
        shardc.lax.dtype(None)
    x = jnp.ones((2, 0))
    with pytest.raises(IndexError, match="index is out of bounds for axis 1 with size 0"):
        shardc.jit(lambda i: x[0, i])(0)
    assert (x[0, :] + x[0, 1:]).shape == (0,)


def test_an_update_whose_values_promote_the_array_applies_in_the_wider_dtype():
    """JAX's scatter promotes the array and the values together, applies the update and casts
    back: int [3, 5] times 2.5 is [7, 5] (the update was cast to 2 first, giving 6)."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)      # JAX's unsafe-cast warning
        cases = [(jnp.array([3, 5]).at[0].mul(2.5), [7, 5]),
                 (jnp.array([3, 5]).at[0].mul(-1.5), [-4, 5]),
                 (jnp.array([3, 5]).at[0].add(-1.5), [1, 5]),
                 (jnp.array([3, 5], jnp.uint8).at[0].add(-1.5), [1, 5]),
                 (jnp.array([3, 5], jnp.int8).at[0].set(2.7), [2, 5]),
                 (shardc.jit(lambda a: a.at[0].mul(2.5))(jnp.array([3, 5])), [7, 5])]
    for got, want in cases:
        assert got.dtype in (jnp.int32, jnp.uint8, jnp.int8)
        np.testing.assert_array_equal(np.asarray(got), want)


def test_mean_in_an_integer_dtype_sums_and_divides_in_it():
    """As JAX's: the sum wraps around in the dtype asked for and lax divides it toward zero."""
    cases = [(jnp.mean(jnp.array([100, 100, -3, 7], jnp.int8), dtype=jnp.int8), -13),
             (jnp.mean(jnp.array([200, 100, 3, 7], jnp.uint8), dtype=jnp.uint8), 13),
             (jnp.mean(jnp.array([-7, 2]), dtype=jnp.int32), -2)]
    for got, want in cases:
        assert int(got) == want
    rows = shardc.jit(lambda a: jnp.mean(a, 1, dtype=jnp.int16))(jnp.arange(12).reshape(3, 4))
    assert rows.dtype == jnp.int16
    np.testing.assert_array_equal(np.asarray(rows), [1, 5, 9])


def test_a_list_of_arrays_and_numbers_given_a_dtype_and_result_types_weak_flag():
    bf = jnp.asarray([jnp.int8(1), 2], dtype=jnp.bfloat16)       # it raised a TypeError
    assert bf.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(bf, np.float32), [1, 2])
    half = jnp.array([jnp.asarray(1.0), 2.0], dtype=jnp.float16)
    assert half.dtype == jnp.float16
    assert shardc.dtypes.result_type(2, 2.0, return_weak_type_flag=True) == (jnp.float32, True)
    assert shardc.dtypes.result_type(jnp.int8(2), 2, return_weak_type_flag=True) == (
        jnp.int8, False)


def test_round_of_booleans_and_stack_of_lists_are_jaxs_errors():
    for call in (lambda: jnp.round(jnp.array([True, False])), lambda: round(jnp.array(True), 1)):
        with pytest.raises(ValueError, match="data type <class 'numpy.bool'> not inexact"):
            call()
    with pytest.raises(TypeError, match=re.escape(
            "stack requires ndarray or scalar arguments, got <class 'list'> at position 0.")):
        jnp.stack([[1, 2], [3, 4]])
    np.testing.assert_array_equal(np.asarray(jnp.stack([jnp.ones(2), np.zeros(2)])),
                                  [[1, 1], [0, 0]])


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32])
def test_float_functions_of_unsigned_and_a_negative_int_take_it_as_a_float(dtype):
    # each operand converted from its own value (JAX's promote_dtypes_inexact): -1 is -1.0,
    # not the unsigned dtype's wrapped maximum
    x = np.arange(1, 4, dtype=dtype)
    got = jnp.copysign(x, -1)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, [-1.0, -2.0, -3.0])
    np.testing.assert_allclose(jnp.arctan2(x, -1), np.arctan2(x.astype(np.float32), -1),
                               rtol=1e-6)
    np.testing.assert_allclose(jnp.hypot(x, -2), np.hypot(x.astype(np.float32), -2),
                               rtol=1e-6)


def test_in_searches_a_one_dimensional_array_for_a_scalar_as_jax():
    assert 1 in jnp.arange(4) and 100 not in jnp.arange(4)
    assert np.int32(2) in jnp.arange(4) and jnp.array(3) in jnp.arange(4) and 2.0 in jnp.arange(4.)
    with pytest.raises(ValueError, match=re.escape(
            "Array.__contains__: search array must be one-dimensional, got arr.shape=().")):
        _ = 1 in jnp.array(1)
    with pytest.raises(ValueError, match=re.escape(
            "Array.__contains__: query value must be a scalar, got query.shape=(2,)")):
        _ = jnp.arange(2) in jnp.arange(2)
    for other in ("abc", None):
        with pytest.raises(TypeError, match="Array.__contains__: unsupported operand type"):
            _ = other in jnp.arange(2)
    with pytest.raises(TypeError, match="Array.__contains__ requires ndarray or scalar"):
        _ = [1] in jnp.arange(4)
    with pytest.raises(shardc.errors.TracerBoolConversionError):
        shardc.jit(lambda x: 1 in x)(jnp.arange(3))     # (a traced answer is no bool)
