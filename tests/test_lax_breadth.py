"""jax.lax beyond the core: special functions, cumulative ops, associative_scan, map, sorting,
reduce, shape helpers, Precision and the collectives built from others (pshuffle, pswapaxes),
against numpy/math references, eagerly, under jit, in shard_map bodies, with gradients."""
from __future__ import annotations

import math
from functools import partial

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import shardc
import shardc.numpy as jnp
from shardc import lax
from shardc.sharding import PartitionSpec as P

from breadth_checks import assert_close, check_grad, everywhere, mesh2

_erf = np.vectorize(math.erf)
_erfc = np.vectorize(math.erfc)
_lgamma = np.vectorize(math.lgamma)


def _ulp_close(got, want, dtype, ulps=4):
    """``got`` (of ``dtype``) within ``ulps`` units in the last place of float64 ``want``."""
    got = np.asarray(got)
    assert got.dtype == dtype
    spacing = np.spacing(np.abs(want).astype(dtype)).astype(np.float64)
    err = np.abs(got.astype(np.float64) - want)
    assert np.all(err <= ulps * spacing), (err / spacing).max()


# --- special functions ------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_erf_family_within_a_few_ulp_of_float64(dtype):
    x = np.concatenate([np.linspace(-6, 6, 301), [0.0, 1e-8, -1e-30]]).astype(dtype)
    if dtype == np.float32:
        _ulp_close(lax.erf(x), _erf(x.astype(np.float64)), np.dtype(dtype))
        _ulp_close(lax.erfc(x), _erfc(x.astype(np.float64)), np.dtype(dtype))
        # lgamma away from its zeros at 1 and 2 (relative error is unbounded at a zero)
        g = np.linspace(0.05, 30, 200).astype(dtype)
        g = g[(np.abs(g - 1) > 0.05) & (np.abs(g - 2) > 0.05)]
        _ulp_close(lax.lgamma(g), _lgamma(g.astype(np.float64)), np.dtype(dtype))
    else:
        with pytest.raises(TypeError, match="floating-point"):
            lax.erf(np.arange(3))


@pytest.mark.parametrize("size", [7, 70_000])
def test_float32_exp_is_correctly_rounded(size):
    # numpy's float32 exp is a unit in the last place off on many inputs (2.0 among them);
    # shardc's is the float64 value rounded once, everywhere exp is computed: eagerly, under
    # jit, in a shard_map's body, and in the logistic function
    x = np.random.default_rng(5).uniform(-30, 30, size).astype(np.float32)
    x[:3] = [2.0, -0.0, 88.5]
    want = np.exp(x.astype(np.float64)).astype(np.float32)
    assert (np.exp(x) != want).any()          # the case at hand: numpy's own differs
    mesh = shardc.make_mesh((7 if size == 7 else 8,), ("i",))
    in_body = shardc.shard_map(jnp.exp, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
    for got in (jnp.exp(x), lax.exp(x), shardc.jit(jnp.exp)(x), in_body(x),
                shardc.jit(in_body)(x)):
        assert np.asarray(got).dtype == np.float32
        np.testing.assert_array_equal(np.asarray(got), want)
    logistic = 1 / (1 + np.exp(-x.astype(np.float64)).astype(np.float32))
    np.testing.assert_array_equal(np.asarray(shardc.nn.sigmoid(x)), logistic.astype(np.float32))


def test_erf_inv_inverts_erf():
    y = np.concatenate([np.linspace(-0.999999, 0.999999, 401), [0.0, 1e-6, 0.5]])
    y = y.astype(np.float32)
    got = lax.erf_inv(y)
    assert got.dtype == np.float32
    x = np.asarray(got, np.float64)
    # erf(x) of the float32 result is within float32 rounding of y (the tails by erfc)
    assert_close(_erf(x), y.astype(np.float64), rtol=0, atol=2e-7)
    tail = y > 0.9
    assert_close(_erfc(x[tail]), 1 - y[tail].astype(np.float64), rtol=1e-5, atol=0)
    edges = np.asarray(lax.erf_inv(np.array([-1.0, 1.0, 1.5, np.nan], np.float32)))
    assert edges[0] == -np.inf and edges[1] == np.inf and np.isnan(edges[2:]).all()


def test_digamma_known_values_and_lgamma_slope():
    gamma = 0.57721566490153286
    x = np.array([1.0, 0.5, 2.0, 10.0, -0.5, -2.5, 0.01], np.float32)
    harmonic_9 = sum(1 / k for k in range(1, 10))
    want = np.array([-gamma, -gamma - 2 * math.log(2), 1 - gamma, harmonic_9 - gamma,
                     0.03648997397857652, 1.1031566406452432, -100.56088545786867])
    assert_close(lax.digamma(x), want, rtol=2e-6, atol=1e-6, dtype=np.float32)
    # digamma is lgamma's derivative: against float64 central differences of math.lgamma
    g = np.linspace(0.3, 20, 50)
    slope = (_lgamma(g + 1e-6) - _lgamma(g - 1e-6)) / 2e-6
    assert_close(lax.digamma(g.astype(np.float32)), slope, rtol=1e-5, atol=1e-5)
    assert np.isnan(np.asarray(lax.digamma(np.float32(-3.0))))
    assert np.asarray(lax.lgamma(np.float32(0.0))) == np.inf


@pytest.mark.parametrize("name,fn,ref,low,high", [
    ("erf", lax.erf, _erf, -3, 3), ("erfc", lax.erfc, _erfc, -3, 3),
    ("erf_inv", lax.erf_inv, None, -0.9, 0.9), ("lgamma", lax.lgamma, _lgamma, 0.5, 6),
])
def test_special_functions_everywhere_and_gradients(name, fn, ref, low, high):
    x = np.random.default_rng(0).uniform(low, high, (4, 3)).astype(np.float32)
    want = ref(x.astype(np.float64)) if ref is not None else np.asarray(fn(x))
    everywhere(fn, x, want, rtol=1e-6, atol=1e-7, dtype=np.float32)
    check_grad(lambda v: fn(v).sum(), x[0])
    # the vmap of each is the function itself
    assert_close(shardc.vmap(fn)(x), want, rtol=1e-6, atol=1e-7)


def _trigamma_reference(x):
    # sum_k 1/(x + k)^2, the tail by its integral and Euler-Maclaurin terms
    k = np.arange(200.0)
    head = (1 / (x[:, None] + k) ** 2).sum(1)
    t = x + 200
    return head + 1 / t + 1 / (2 * t ** 2) + 1 / (6 * t ** 3)


def test_polygamma_and_the_derivatives_of_digamma_and_lgamma():
    x = np.array([0.3, 0.5, 1.0, 2.0, 4.5, 12.0], np.float32)
    trigamma = _trigamma_reference(x.astype(np.float64))
    assert_close(lax.polygamma(1, x), trigamma, 2e-6, 1e-6, np.float32)
    assert_close(lax.polygamma(0, x), lax.digamma(x), 1e-7, 1e-7)
    zeta3 = 1.2020569031595942
    assert_close(lax.polygamma(2, np.float32(1.0)), -2 * zeta3, 1e-6)
    assert_close(lax.polygamma(3, np.float32(0.5)), np.pi ** 4, 1e-6)
    assert_close(lax.polygamma(1, np.float32(-0.5)), np.pi ** 2 / 2 + 4, 1e-6)
    assert np.isnan(np.asarray(lax.polygamma(1.5, np.float32(1.0))))
    assert_close(shardc.vmap(shardc.grad(lax.digamma))(x), trigamma, 2e-6, 1e-6)
    second = shardc.vmap(shardc.grad(shardc.grad(lax.lgamma)))(x)
    assert_close(second, trigamma, 2e-6, 1e-6)
    check_grad(lambda v: lax.polygamma(1, v).sum(), x[2:5])
    everywhere(lambda v: lax.polygamma(2, v), x.reshape(2, 3),
               np.asarray(lax.polygamma(2, x)).reshape(2, 3))


def test_special_functions_round_trip_through_ir_text():
    from ir.parser import parse_program
    from ir.printer import print_program
    closed = shardc.make_jaxpr(lambda v: lax.erf(v) + lax.erfc(v) + lax.erf_inv(v * 0.1)
                               + lax.lgamma(v + 2) + lax.digamma(v + 2)
                               + lax.polygamma(1, v + 2))(np.ones(3, np.float32))
    text = print_program(closed.jaxpr)
    assert "erf_inv" in text and "digamma" in text and "polygamma" in text
    assert print_program(parse_program(text)) == text


# --- cumulative, associative_scan, map --------------------------------------------------------

@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cumulative_ops(reverse, axis):
    x = np.random.default_rng(1).uniform(-2, 2, (4, 5)).astype(np.float32)
    flip = (lambda a: np.flip(a, axis)) if reverse else (lambda a: a)
    refs = {lax.cumsum: np.cumsum, lax.cumprod: np.cumprod, lax.cummax: np.maximum.accumulate,
            lax.cummin: np.minimum.accumulate,
            lax.cumlogsumexp: np.logaddexp.accumulate}
    for fn, ref in refs.items():
        want = flip(ref(flip(x.astype(np.float64)), axis=axis))
        got = fn(x, axis=axis, reverse=reverse)
        assert_close(got, want, rtol=1e-5, atol=1e-5, dtype=np.float32)
    ints = np.arange(12, dtype=np.int32).reshape(3, 4)
    assert_close(lax.cumsum(ints, axis=1), np.cumsum(ints, 1), dtype=np.int32)
    body = shardc.shard_map(partial(lax.cumsum, axis=1, reverse=reverse), mesh=mesh2(),
                            in_specs=P("x"), out_specs=P("x"))
    flip1 = (lambda a: np.flip(a, 1)) if reverse else (lambda a: a)
    assert_close(body(x), flip1(np.cumsum(flip1(x.astype(np.float64)), axis=1)), 1e-5, 1e-5)


def _tree_scan_jvp(combine, x, t):
    """JAX's associative_scan recursion over (value, tangent) in numpy: pairs combined, their
    scan, each pair's scan combined with the next element, interleaved."""
    n = len(x)
    if n < 2:
        return x, t
    odd_x, odd_t = _tree_scan_jvp(combine, *combine((x[0:-1:2], t[0:-1:2]), (x[1::2], t[1::2])))
    m = len(x[2::2])
    even_x, even_t = combine((odd_x[:m], odd_t[:m]), (x[2::2], t[2::2]))
    out_x, out_t = np.zeros_like(x), np.zeros_like(t)
    out_x[0::2], out_t[0::2] = np.r_[x[:1], even_x] + 0, np.r_[t[:1], even_t] + 0
    out_x[1::2], out_t[1::2] = odd_x, odd_t
    return out_x, out_t


def _numpy_extremum(pick):
    def combine(earlier, later):
        (a, ta), (b, tb) = earlier, later
        out = pick(a, b)
        weight_a = (a == out) / np.where(b == out, 2, 1).astype(a.dtype)
        weight_b = (b == out) / np.where(a == out, 2, 1).astype(a.dtype)
        return out, ta * weight_a.astype(a.dtype) + tb * weight_b.astype(a.dtype)
    return combine


@pytest.mark.parametrize("n", [1, 2, 5, 6, 13, 16])
def test_cumulative_extrema_derivatives_split_ties_along_jaxs_scan_tree(n):
    """JAX differentiates cummax/cummin as its associative_scan of max/min, whose rule gives
    each of two tied operands half: the tangents follow that tree exactly."""
    rng = np.random.default_rng(n)
    x = rng.integers(0, 3, n).astype(np.float32)
    t = rng.standard_normal(n).astype(np.float32)
    for fn, pick in ((lax.cummax, np.maximum), (lax.cummin, np.minimum)):
        for reverse in (False, True):
            flip = (lambda a: a[::-1]) if reverse else (lambda a: a)
            want = flip(_tree_scan_jvp(_numpy_extremum(pick), flip(x), flip(t))[1])
            _, got = shardc.jvp(partial(fn, reverse=reverse), (x,), (t,))
            np.testing.assert_array_equal(np.asarray(got), want)
    ones = np.ones(5, np.float32)
    assert_close(shardc.grad(lambda a: jnp.sum(lax.cummax(a)))(ones),
                 [2.125, 1.125, 0.875, 0.375, 0.5], dtype=np.float32)
    mixed = np.array([1.0, 0.0, 0.0, 2.0, 0.0, 5.0], np.float32)
    assert_close(shardc.grad(lambda a: jnp.sum(lax.cummin(a, reverse=True)))(mixed),
                 [0, 1, 1, 0, 3, 1], dtype=np.float32)


def test_cumlogsumexp_keeps_small_prefixes():
    x = np.array([-1000.0, -1000.0, 0.0], np.float32)
    assert_close(lax.cumlogsumexp(x), [-1000.0, -1000.0 + math.log(2), 0.0], 1e-6, 1e-4)


@pytest.mark.parametrize("n", [1, 2, 5, 8, 13])
def test_associative_scan_matches_sequential_scan(n):
    rng = np.random.default_rng(n)
    x = rng.uniform(-1, 1, (n, 3)).astype(np.float32)
    assert_close(lax.associative_scan(jnp.add, x), np.cumsum(x, 0), 1e-5, 1e-5)
    assert_close(lax.associative_scan(jnp.maximum, x, reverse=True, axis=0),
                 np.flip(np.maximum.accumulate(np.flip(x, 0), 0), 0))
    # a non-commutative operator on a pytree: composing affine maps x -> a x + b
    a, b = rng.uniform(0.5, 1.5, n).astype(np.float32), rng.uniform(-1, 1, n).astype(np.float32)

    def compose(first, second):
        (a1, b1), (a2, b2) = first, second
        return a2 * a1, a2 * b1 + b2
    got_a, got_b = lax.associative_scan(compose, (a, b))
    want_a, want_b, acc_a, acc_b = [], [], 1.0, 0.0
    for ai, bi in zip(a.astype(np.float64), b.astype(np.float64)):
        acc_a, acc_b = ai * acc_a, ai * acc_b + bi
        want_a.append(acc_a)
        want_b.append(acc_b)
    assert_close(got_a, want_a, 1e-5, 1e-5)
    assert_close(got_b, want_b, 1e-5, 1e-5)


@pytest.mark.parametrize("n", [2, 5, 6])
def test_associative_scan_interleaves_by_padding_and_adding_as_jax(n):
    """JAX spreads each half with zero padding and adds them, so every element but those
    combined by fn itself passes through ``x + 0``: -0 comes out +0 (one element is
    returned as it is)."""
    zeros = -np.zeros(n, np.float32)
    for reverse in (False, True):
        got = np.asarray(lax.associative_scan(jnp.minimum, zeros, reverse=reverse))
        assert not np.signbit(got).any(), (reverse, got)
    got = np.asarray(shardc.jit(lambda v: lax.associative_scan(jnp.maximum, v, axis=1))(
        -np.zeros((2, n), np.float32)))
    assert not np.signbit(got).any()
    got = np.asarray(lax.associative_scan(jnp.logical_or, np.arange(n) == n // 2))
    np.testing.assert_array_equal(got, np.arange(n) >= n // 2)
    assert got.dtype == np.bool_


def test_associative_scan_under_jit_shard_map_and_grad():
    x = np.random.default_rng(3).uniform(-1, 1, (4, 6)).astype(np.float32)
    everywhere(lambda v: lax.associative_scan(jnp.add, v, axis=1), x, np.cumsum(x, 1),
               1e-5, 1e-5)
    check_grad(lambda v: (lax.associative_scan(jnp.multiply, v) ** 2).sum(), x[0] + 2)


def test_lax_map_with_and_without_batches():
    x = np.arange(14.0, dtype=np.float32).reshape(7, 2)
    want = (x ** 2).sum(1)
    for batch_size in (None, 0, 1, 3, 7, 10):     # 0: one batch of everything
        got = lax.map(lambda row: (row ** 2).sum(), x, batch_size=batch_size)
        assert_close(got, want, dtype=np.float32)
    pair = lax.map(lambda t: {"s": t[0] + t[1], "d": t[0] - t[1]}, (x[:, 0], x[:, 1]))
    assert_close(pair["s"], x.sum(1))
    assert_close(pair["d"], x[:, 0] - x[:, 1])
    everywhere(lambda v: lax.map(jnp.sum, v), x[:6], x[:6].sum(1), dtype=np.float32)


# --- sorting -----------------------------------------------------------------------------------

def test_sort_with_num_keys_and_sort_key_val():
    keys = np.array([3, 1, 3, 2, 1], np.int32)
    second = np.array([5, 9, 4, 0, 2], np.int32)
    vals = np.arange(5, dtype=np.float32)
    order = np.lexsort((second, keys))
    got = lax.sort((keys, second, vals), num_keys=2)
    for g, w in zip(got, (keys[order], second[order], vals[order])):
        assert_close(g, w)
    stable = np.argsort(keys, kind="stable")
    k, v = lax.sort_key_val(keys, vals)
    assert_close(k, keys[stable], dtype=np.int32)
    assert_close(v, vals[stable], dtype=np.float32)
    x = np.random.default_rng(0).normal(size=(4, 6)).astype(np.float32)
    everywhere(lambda a: lax.sort(a, dimension=1), x, np.sort(x, 1))
    assert_close(lax.sort(x, dimension=0), np.sort(x, 0))
    with pytest.raises(ValueError, match="num_keys"):
        lax.sort((keys, vals), num_keys=3)


def test_top_k_values_indices_and_ties():
    x = np.array([[1, 5, 3, 5, 0], [2, 2, 2, 2, 2]], np.float32)
    values, indices = lax.top_k(x, 3)
    assert_close(values, [[5, 5, 3], [2, 2, 2]], dtype=np.float32)
    assert_close(indices, [[1, 3, 2], [0, 1, 2]], dtype=np.int32)
    y = np.random.default_rng(1).normal(size=(4, 9)).astype(np.float32)
    want = -np.sort(-y, axis=1)[:, :4]
    everywhere(lambda a: lax.top_k(a, 4)[0], y, want)
    with pytest.raises(ValueError, match="k=10"):
        lax.top_k(y, 10)
    with pytest.raises(ValueError, match="k argument to top_k must be nonnegative, got -1"):
        lax.top_k(y, -1)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, jnp.bfloat16])
def test_top_k_orders_floats_by_xlas_total_order(dtype):
    """+0 above -0, +NaN first and -NaN last (below -inf), ties in index order (XLA's TopK);
    the gradient reaches the entries the indices name."""
    nan = np.float32(np.nan)
    x = np.array([nan, -np.inf, -0.0, 1, -nan, 0.0, nan, -0.0], np.float32).astype(dtype)
    signed, unsigned = (np.int16, np.uint16) if x.itemsize == 2 else (np.int32, np.uint32)
    bits = x.view(signed).astype(np.int64)
    key = np.where(bits < 0, -(bits & 0x7fffffff) - 1, bits)     # the total order by hand
    want = np.argsort(-key, kind="stable")
    values, indices = lax.top_k(x, 8)
    assert_close(indices, want, dtype=np.int32)
    np.testing.assert_array_equal(np.asarray(values).view(unsigned), x[want].view(unsigned))
    assert list(want) == [0, 6, 3, 5, 2, 7, 1, 4]
    z = np.array([-0.0, 0.0, -0.0, 0.0, 1.0], np.float32)
    values, indices = lax.top_k(z, 3)
    assert_close(indices, [4, 1, 3], dtype=np.int32)
    assert list(np.signbit(np.asarray(values))) == [False, False, False]
    grad = shardc.grad(lambda v: lax.top_k(v, 3)[0] @ jnp.array([1.0, 2.0, 3.0]))(z)
    assert_close(grad, [0, 2, 0, 3, 1], dtype=np.float32)
    with pytest.raises(ValueError, match="top_k is not compatible with complex inputs."):
        lax.top_k(np.ones(3, np.complex64), 2)


@pytest.mark.parametrize("axis", [0, 1, -3])
def test_top_k_along_any_axis(axis):
    y = np.random.default_rng(4).normal(size=(5, 6, 3)).astype(np.float32)
    values, indices = lax.top_k(y, 2, axis=axis)
    order = np.argsort(-y, axis=axis, kind="stable")
    want_indices = np.take(order, [0, 1], axis=axis)
    assert_close(indices, want_indices, dtype=np.int32)
    assert_close(values, np.take_along_axis(y, want_indices, axis=axis), dtype=np.float32)


# --- reduce -----------------------------------------------------------------------------------

def test_reduce_recognises_monoids_on_their_identities():
    x = np.random.default_rng(2).uniform(-3, 3, (3, 4)).astype(np.float32)
    assert_close(lax.reduce(x, 0.0, lax.add, (0,)), x.sum(0), 1e-6, 1e-6, np.float32)
    assert_close(lax.reduce(x, 1.0, lambda a, b: a * b, (1,)), x.prod(1), 1e-5, 1e-6)
    assert_close(lax.reduce(x, -np.inf, lax.max, (0, 1)), x.max())
    assert_close(lax.reduce(x, np.inf, jnp.minimum, (1,)), x.min(1))
    i = np.arange(12, dtype=np.int32).reshape(3, 4)
    assert_close(lax.reduce(i, np.iinfo(np.int32).min, lax.max, (0,)), i.max(0), dtype=np.int32)
    (out,) = lax.reduce((x,), (0.0,), lax.add, (1,))
    assert_close(out, x.sum(1), 1e-6, 1e-6)
    everywhere(lambda v: lax.reduce(v, 0.0, lax.add, (1,)), x.T, x.T.sum(1), 1e-6, 1e-6)


def _fold_rows(rows, init, fn):
    """The fold a reduce over ``rows`` (the reduced elements first) should give."""
    acc = np.full(rows.shape[1:], init, rows.dtype)
    for row in rows:
        acc = fn(acc, row)
    return acc


def test_reduce_folds_any_computation_over_pytrees():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(5, 7, 3)).astype(np.float32)
    position = np.broadcast_to(np.arange(7, dtype=np.int32)[None, :, None], x.shape)

    def argmax_pair(a, b):          # (value, index): the larger, the first among equals
        (va, ia), (vb, ib) = a, b
        pick = (va > vb) | ((va == vb) & (ia < ib))
        return lax.select(pick, va, vb), lax.select(pick, ia, ib)

    values, where = lax.reduce((x, position), (-np.inf, 0), argmax_pair, (1,))
    assert_close(values, x.max(1), dtype=np.float32)
    assert_close(where, x.argmax(1), dtype=np.int32)
    # folds in row-major order from the initial value, as XLA's CPU reduce: a fold that is
    # neither associative nor commutative gives what it says
    assert float(lax.reduce(np.arange(4.), 10.0, lambda a, b: a - b, (0,))) == 4.0
    assert float(lax.reduce(np.array([1., 2., 3., 4.]), 0.0, lambda a, b: a + b * b,
                            (0,))) == 30.0
    assert_close(lax.reduce(x, 0.0, lambda a, b: a * 0.5 + b, (2, 0)),
                 _fold_rows(np.transpose(x, (0, 2, 1)).reshape(15, 7), 0.0,
                            lambda a, b: a * 0.5 + b), 1e-5, 1e-5)
    # not an identity: the initial value takes part once
    assert_close(lax.reduce(x, 1.0, lax.add, (0, 2)), x.sum((0, 2)) + 1, 1e-5, 1e-5)
    assert_close(lax.reduce(x, 0.5, jnp.maximum, (1,)), np.maximum(x.max(1), 0.5))
    # a dict of operands, an odd length, and no dimension at all
    out = lax.reduce({"a": x, "b": 2 * x}, {"a": 0.0, "b": -np.inf},
                     lambda p, q: {"a": p["a"] + q["a"], "b": jnp.maximum(p["b"], q["b"])}, (1,))
    assert_close(out["a"], x.sum(1), 1e-5, 1e-5)
    assert_close(out["b"], 2 * x.max(1))
    assert_close(lax.reduce(x, 0.0, lambda a, b: a + 2 * b, ()), x)
    everywhere(lambda v: lax.reduce((v, v), (0.0, 1.0),
                                    lambda a, b: (a[0] + b[0], a[1] * b[1]), (1,))[1],
               x[:4, :, 0], x[:4, :, 0].prod(1), 1e-5, 1e-6)


def test_reduce_errors_name_what_is_wrong():
    x = np.ones((2, 3), np.float32)
    with pytest.raises(ValueError, match="same tree structure as init_values"):
        lax.reduce((x, x), (0.0,), lambda a, b: a, (0,))
    with pytest.raises(TypeError, match="same shape"):
        lax.reduce((x, x[0]), (0.0, 0.0), lambda a, b: a, (0,))
    with pytest.raises(TypeError, match="computation returned"):
        lax.reduce((x, x), (0.0, 0.0), lambda a, b: a[0] + b[0], (0,))
    with pytest.raises(ValueError, match=r"reduction axes \(-1,\) contains out-of-bounds"):
        lax.reduce(x, 0.0, lambda a, b: a - b, (-1,))
    with pytest.raises(ValueError, match="non-scalar initial value"):
        lax.reduce(x, np.zeros(3), lambda a, b: a - b, (0,))


# --- elementwise and shapes -------------------------------------------------------------------

def test_lax_concatenate_takes_no_promotion_and_a_dimension_in_range():
    a = np.ones((2, 2), np.float32)
    np.testing.assert_array_equal(np.asarray(lax.concatenate([a, a], 1)), np.ones((2, 4)))
    with pytest.raises(TypeError, match="lax.concatenate requires arguments to have the same "
                                        "dtypes, got float32, int32"):
        lax.concatenate([a, a.astype(np.int32)], 0)
    with pytest.raises(TypeError, match=r"concatenate dimension out of bounds: dimension -1"):
        lax.concatenate([a, a], -1)


def test_mul_out_dtype_casts_mixed_operands():
    x = np.array([1.5, 2.0], np.float16)
    y = np.array([3.0, 0.5], np.float32)
    out = lax.mul(x, y, out_dtype=np.float32)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(out), [4.5, 1.0])
    assert lax.mul(x, y, out_dtype=np.float16).dtype == np.float16
    gx, gy = shardc.grad(lambda x, y: lax.mul(x, y, out_dtype=np.float32).sum(),
                      argnums=(0, 1))(x, y)
    assert (gx.dtype, gy.dtype) == (np.float16, np.float32)
    np.testing.assert_array_equal(np.asarray(gx), y.astype(np.float16))
    np.testing.assert_array_equal(np.asarray(gy), x.astype(np.float32))


def test_clamp_square_and_rounding():
    x = np.linspace(-3, 3, 13).astype(np.float32)
    assert_close(lax.clamp(-1.0, x, 2.0), np.clip(x, -1, 2), dtype=np.float32)
    assert_close(lax.clamp(np.full(13, -0.5, np.float32), x, 1.0), np.clip(x, -0.5, 1))
    with pytest.raises(TypeError, match="clamp: min"):
        lax.clamp(np.zeros(2, np.float32), x, 1.0)
    assert_close(lax.square(x), x * x)
    halves = np.array([-2.5, -0.5, 0.5, 1.5, 2.5], np.float32)
    assert_close(lax.round(halves), [-3, -1, 1, 2, 3])
    assert_close(lax.round(halves, 1), [-2, -0, 0, 2, 2])
    check_grad(lambda v: lax.clamp(-1.0, v, 2.0).sum() + lax.square(v).sum(), x[1:-1:2])


def test_shape_helpers():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert_close(lax.broadcast(x, (4,)), np.broadcast_to(x, (4, 2, 3)))
    assert lax.expand_dims(x, (0, 3)).shape == (1, 2, 3, 1)
    assert_close(lax.index_in_dim(x, -1, axis=1), x[:, 2:3])
    assert_close(lax.index_in_dim(x, 0, keepdims=False), x[0])
    with pytest.raises(IndexError, match="index 3"):
        lax.index_in_dim(x, 3, axis=1)
    assert_close(lax.full((2, 2), 7, np.int32), np.full((2, 2), 7), dtype=np.int32)
    assert_close(lax.full_like(x, 1.5), np.full_like(x, 1.5), dtype=np.float32)
    assert_close(lax.pad(x, 0.0, [(1, -1, 0), (0, 1, 1)]), _pad_reference(x))
    assert_close(lax.slice_in_dim(x, 0, 3, 2, axis=1), x[:, 0:3:2])
    # JAX's iota rules: numbers only, no negative dimension
    assert_close(lax.broadcasted_iota(jnp.float16, (2, 3), 1), np.tile(np.arange(3), (2, 1)),
                 dtype=np.float16)
    with pytest.raises(TypeError, match="iota does not accept dtype bool. Accepted dtypes are "
                                        "subtypes of integer, floating, complexfloating."):
        lax.iota(jnp.bool_, 2)
    with pytest.raises(TypeError, match=r"iota shape must have every element be nonnegative, "
                                        r"got \(2, -1\)."):
        lax.broadcasted_iota(jnp.int32, (2, -1), 0)


def _pad_reference(x):
    # rows: one in front, drop the last; columns: a zero between each, one at the end
    cols = np.zeros((2, 6), np.float32)
    cols[:, 0:5:2] = x
    return np.concatenate([np.zeros((1, 6), np.float32), cols])[:2]


def test_lax_names_the_primitives_of_a_program():
    # as JAX users inspect jaxprs: eqn.primitive is lax.reduce_sum_p
    x = np.ones(10, np.float16)
    prims = [e.primitive for e in shardc.make_jaxpr(jnp.mean)(x).eqns]
    assert prims == [lax.convert_element_type_p, lax.reduce_sum_p, lax.div_p,
                     lax.convert_element_type_p]
    mesh = shardc.make_mesh((2,), ("i",))
    f = shardc.shard_map(lambda a: lax.psum(a, "i"), mesh=mesh, in_specs=P("i"), out_specs=P())
    (smap,) = shardc.make_jaxpr(f)(np.ones(4, np.float32)).eqns
    assert [e.primitive for e in smap.params["jaxpr"].eqns] == [lax.psum_p]


def test_a_wider_preferred_type_is_what_products_accumulate_in():
    # int8 products summed in int32 do not wrap; float16 ones summed in float32 keep the
    # low bits, on every backend (XLA's behaviour)
    a, b = np.full((1, 40), 100, np.int8), np.full((40, 1), 100, np.int8)
    dims = (((1,), (0,)), ((), ()))
    for run in (lax.dot_general, shardc.jit(lax.dot_general, static_argnums=(2,),
                                            static_argnames=("preferred_element_type",))):
        assert int(run(a, b, dims, preferred_element_type=np.int32)[0, 0]) == 400000
        x, y = np.array([[1, 2 ** -11]], np.float16), np.ones((2, 1), np.float16)
        got = run(x, y, dims, preferred_element_type=np.float32)
        assert got.dtype == np.float32 and float(got[0, 0]) == 1 + 2 ** -11
    conv = lax.conv_general_dilated(np.ones((1, 1, 1, 2), np.float16),
                                    np.array([[[[1, 2 ** -11]]]], np.float16), (1, 1), "VALID",
                                    preferred_element_type=np.float32)
    assert float(conv[0, 0, 0, 0]) == 1 + 2 ** -11


def test_dot_general_carries_its_precision_through_transformations():
    from ir.parser import parse_program, parse_module
    from ir.printer import print_module, print_program
    a, b = np.ones((2, 3), np.float32), np.ones((3, 4), np.float32)
    pair = (lax.Precision.HIGHEST, lax.Precision.DEFAULT)
    f = lambda x, y: lax.dot(x, y, precision=pair)
    text = str(shardc.make_jaxpr(f)(a, b))
    assert "precision=(Precision.HIGHEST, Precision.DEFAULT)" in text
    program = shardc.make_jaxpr(f)(a, b).jaxpr
    assert parse_program(print_program(program)).eqns[0].params["precision"] == pair
    module = print_module(shardc.jit(f).lower(a, b).module, devices=True)
    assert print_module(parse_module(module), devices=True) == module
    # a single value is one per operand; the pullback's and a batch's products keep it
    one = lambda x, y: lax.dot(x, y, precision="highest")
    _, pullback = shardc.vjp(one, a, b)
    assert str(shardc.make_jaxpr(pullback)(np.ones((2, 4), np.float32))).count(
        "precision=(Precision.HIGHEST, Precision.HIGHEST)") == 2
    assert "Precision.HIGHEST" in str(shardc.make_jaxpr(shardc.vmap(one))(
        np.ones((5, 2, 3), np.float32), np.ones((5, 3, 4), np.float32)))
    assert "precision" not in str(shardc.make_jaxpr(lax.dot)(a, b))
    with pytest.raises(ValueError, match="Precision argument must be"):
        lax.dot(a, b, precision=(1, 2, 3))


def test_batch_matmul_and_precision():
    rng = np.random.default_rng(4)
    a = rng.normal(size=(3, 2, 4)).astype(np.float32)
    b = rng.normal(size=(3, 4, 5)).astype(np.float32)
    assert_close(lax.batch_matmul(a, b), a @ b, 1e-5, 1e-5, np.float32)
    for precision in (None, lax.Precision.HIGHEST, "highest", lax.Precision("default"),
                      (lax.Precision.HIGH, lax.Precision.HIGH)):
        assert_close(jnp.dot(a[0], b[0], precision=precision), a[0] @ b[0], 1e-5, 1e-5)
        assert_close(lax.dot_general(a[0], b[0], (((1,), (0,)), ((), ())),
                                     precision=precision), a[0] @ b[0], 1e-5, 1e-5)
        assert_close(jnp.einsum("ij,jk->ik", a[0], b[0], precision=precision), a[0] @ b[0],
                     1e-5, 1e-5)
    for fn in (jnp.inner, jnp.vdot, jnp.matmul, lambda u, v, **kw: jnp.tensordot(u, v, 1, **kw)):
        assert_close(fn(a[0, 0], a[1, 0], precision=lax.Precision.HIGHEST),
                     np.tensordot(a[0, 0], a[1, 0], 1), 1e-5, 1e-5)
    assert_close(lax.dot(a[0], b[0], precision="highest"), a[0] @ b[0], 1e-5, 1e-5)
    assert_close(lax.dot(a[0], b[0, :, 0]), a[0] @ b[0, :, 0], 1e-5, 1e-5)
    with pytest.raises(TypeError, match="lax.dot"):
        lax.dot(a, b)
    assert lax.Precision("bfloat16") is lax.Precision.DEFAULT
    with pytest.raises(ValueError):
        lax.Precision("best")
    with pytest.raises(ValueError, match="batch dimensions"):
        lax.batch_matmul(a, b[:2])


# --- collectives from others -----------------------------------------------------------------

def test_pshuffle_and_pswapaxes_against_block_reference():
    mesh = shardc.make_mesh((4,), ("x",))
    x = np.arange(4 * 3, dtype=np.float32).reshape(4, 3)
    perm = (2, 0, 3, 1)
    shuffled = shardc.shard_map(lambda b: lax.pshuffle(b, "x", perm), mesh=mesh,
                                in_specs=P("x"), out_specs=P("x"))(x)
    assert_close(shuffled, x[list(perm)])
    with pytest.raises(ValueError, match="permutation of range\\(4\\)"):
        shardc.shard_map(lambda b: lax.pshuffle(b, "x", (0, 0, 1, 2)), mesh=mesh,
                         in_specs=P("x"), out_specs=P("x"))(x)
    # each device holds a [4, 2] block; after the swap device j holds row j of every block
    y = np.arange(4 * 4 * 2, dtype=np.float32).reshape(16, 2)
    swapped = shardc.shard_map(lambda b: lax.pswapaxes(b, "x", 0), mesh=mesh,
                               in_specs=P("x"), out_specs=P("x"))(y)
    blocks = y.reshape(4, 4, 2)                       # [device i, row j]
    assert_close(swapped, np.transpose(blocks, (1, 0, 2)).reshape(16, 2))


# --- bits -------------------------------------------------------------------------------------

def test_bitcast_convert_type_widths():
    x = np.array([1.0, -2.5, np.inf], np.float32)
    assert_close(lax.bitcast_convert_type(x, np.uint32), x.view(np.uint32), dtype=np.uint32)
    as_bytes = lax.bitcast_convert_type(x, np.uint8)
    assert as_bytes.shape == (3, 4)
    assert_close(as_bytes, x.view(np.uint8).reshape(3, 4), dtype=np.uint8)
    assert_close(lax.bitcast_convert_type(as_bytes, np.float32), x, dtype=np.float32)
    halves = np.array([[1, 2], [3, 4]], np.int16)
    assert_close(lax.bitcast_convert_type(halves, np.int32), halves.view(np.int32)[:, 0])
    everywhere(lambda v: lax.bitcast_convert_type(v, np.int32), np.arange(8.0, dtype=np.float32
                                                                          ).reshape(4, 2),
               np.arange(8.0, dtype=np.float32).reshape(4, 2).view(np.int32), dtype=np.int32)
    assert_close(shardc.vmap(lambda v: lax.bitcast_convert_type(v, np.uint16))(x),
                 x.view(np.uint16).reshape(3, 2))
    with pytest.raises(Exception, match="last dimension of 2"):
        lax.bitcast_convert_type(np.ones(3, np.int16), np.int32)
    assert shardc.grad(lambda v: lax.bitcast_convert_type(v, np.int32).astype(np.float32).sum()
                       + v.sum())(np.float32(1.0)) == 1.0



def test_bitcast_convert_type_counts_sub_byte_widths_in_bits():
    """int4, uint4 and float4 are 4 bits wide for bitcasting, as in JAX: a float32 is eight
    nibbles, least significant first (values as JAX 0.10 on CPU), not four bytes."""
    import ml_dtypes
    x = np.array([1.5, -2.25], np.float32)
    nibbles = lax.bitcast_convert_type(x, ml_dtypes.uint4)
    assert nibbles.shape == (2, 8) and nibbles.dtype == np.dtype(ml_dtypes.uint4)
    assert np.asarray(nibbles).astype(int).tolist() == [[0, 0, 0, 0, 0, 12, 15, 3],
                                                        [0, 0, 0, 0, 0, 1, 0, 12]]
    signed = lax.bitcast_convert_type(x, ml_dtypes.int4)
    assert np.asarray(signed).astype(int).tolist()[0] == [0, 0, 0, 0, 0, -4, -1, 3]
    assert_close(lax.bitcast_convert_type(nibbles, np.float32), x, dtype=np.float32)
    split = lax.bitcast_convert_type(np.array([0x7f, -0x12, 3], np.int8), ml_dtypes.int4)
    assert np.asarray(split).astype(int).tolist() == [[-1, 7], [-2, -2], [3, 0]]
    pairs = np.array([[1, 2], [15, 7], [8, 0]], ml_dtypes.uint4)
    assert np.asarray(lax.bitcast_convert_type(pairs, np.uint8)).tolist() == [33, 127, 8]
    assert int(lax.bitcast_convert_type(np.arange(8).astype(ml_dtypes.uint4), np.int32)) \
        == 0x76543210
    same = lax.bitcast_convert_type(np.array([3, -2], ml_dtypes.int4), ml_dtypes.uint4)
    assert np.asarray(same).astype(int).tolist() == [3, 14]
    fp4 = lax.bitcast_convert_type(np.array([0.5, -6.0], ml_dtypes.float4_e2m1fn),
                                   ml_dtypes.uint4)
    assert np.asarray(fp4).astype(int).tolist() == [1, 15]
    with pytest.raises(Exception, match="last dimension of 2"):
        lax.bitcast_convert_type(np.zeros(4, ml_dtypes.int4), np.int8)

def test_reduce_precision_matches_narrower_formats():
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.normal(size=4000) * 100, rng.normal(size=1000) * 1e-3,
                        [0.0, -0.0, 65504.0, 65520.0, 1e5, -1e5, np.inf, -np.inf]])
    x = x.astype(np.float32)
    normal16 = (np.abs(x) >= np.finfo(np.float16).tiny) | (x == 0) | ~np.isfinite(x)
    got = np.asarray(lax.reduce_precision(x, 5, 10))
    with np.errstate(over="ignore"):                     # numpy's cast overflows to inf too
        want = x[normal16].astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(got[normal16], want)
    # below float16's smallest normal: flushed to a signed zero, as XLA does
    flushed = got[~normal16]
    assert (flushed == 0).all() and (np.signbit(flushed) == np.signbit(x[~normal16])).all()
    assert np.isnan(np.asarray(lax.reduce_precision(np.float32(np.nan), 5, 10)))
    # a NaN stays NaN where only the exponent narrows (the mantissa kept whole, or wider)
    kept = lax.reduce_precision(np.array([np.nan, 1e30, 1.0], np.float32), 5, 23)
    np.testing.assert_array_equal(np.asarray(kept), [np.nan, np.inf, 1.0])
    ml_dtypes = pytest.importorskip("ml_dtypes")
    np.testing.assert_array_equal(np.asarray(lax.reduce_precision(x, 8, 7)),
                                  x.astype(ml_dtypes.bfloat16).astype(np.float32))
    everywhere(lambda v: lax.reduce_precision(v, 8, 7), x[:4000].reshape(8, 500),
               x[:4000].reshape(8, 500).astype(ml_dtypes.bfloat16).astype(np.float32))
    # linear to autodiff, as JAX's: the cotangent is rounded the same way
    g = shardc.grad(lambda v: (lax.reduce_precision(v, 5, 2) * 1.3).sum())(np.ones(2, np.float32))
    assert_close(g, np.full(2, np.float32(lax.reduce_precision(np.float32(1.3), 5, 2))))
    with pytest.raises(TypeError, match="floating-point"):
        lax.reduce_precision(np.arange(3), 5, 10)


def test_bit_primitives_round_trip_through_ir_text():
    from ir.parser import parse_program
    from ir.printer import print_program
    closed = shardc.make_jaxpr(lambda v: lax.bitcast_convert_type(
        lax.reduce_precision(v, 5, 10), np.uint8))(np.ones(3, np.float32))
    text = print_program(closed.jaxpr)
    assert "reduce_precision[exponent_bits=5 mantissa_bits=10]" in text.replace("\n", " ") \
        or ("exponent_bits=5" in text and "mantissa_bits=10" in text)
    assert "bitcast_convert_type" in text and "u8[3,4]" in text
    assert print_program(parse_program(text)) == text


# --- the names real programs reach for --------------------------------------------------------

NAMES = {
    "lax": "map associative_scan cummax cummin cumsum cumprod cumlogsumexp top_k sort "
           "sort_key_val clamp broadcast expand_dims index_in_dim full full_like batch_matmul "
           "square Precision erf erfc erf_inv lgamma digamma reduce reduce_precision "
           "bitcast_convert_type conv_general_dilated conv conv_transpose conv_with_general_padding "
           "conv_dimension_numbers pshuffle pswapaxes",
    "nn": "swish softplus soft_sign tanh leaky_relu elu celu selu glu hard_tanh relu6 "
          "hard_sigmoid hard_silu log_sigmoid standardize gelu dot_product_attention one_hot "
          "logsumexp softmax log_softmax initializers",
    "nn.initializers": "zeros ones constant normal uniform truncated_normal glorot_normal "
                       "glorot_uniform xavier_normal xavier_uniform lecun_normal lecun_uniform "
                       "he_normal he_uniform kaiming_normal kaiming_uniform orthogonal "
                       "variance_scaling",
    "random": "categorical choice permutation truncated_normal gumbel exponential laplace "
              "logistic bernoulli rademacher multivariate_normal gamma beta dirichlet poisson",
    "scipy.special": "logsumexp erf erfc erfinv expit logit xlogy xlog1py gammaln digamma polygamma "
                     "entr softmax log_softmax ndtr ndtri",
    "scipy.stats.norm": "pdf logpdf cdf logcdf sf ppf",
    "numpy.linalg": "norm det inv solve cholesky qr slogdet matrix_power eigh eigvalsh",
}


@pytest.mark.parametrize("module", sorted(NAMES))
def test_the_names_real_programs_reach_for_exist(module):
    namespace = shardc
    for part in module.split("."):
        namespace = getattr(namespace, part)
    missing = [name for name in NAMES[module].split() if not hasattr(namespace, name)]
    assert missing == []


@settings(max_examples=15, derandomize=True, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=3), st.data())
def test_associative_scan_property(shape, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    reverse = data.draw(st.booleans())
    x = np.random.default_rng(len(shape)).uniform(-1, 1, shape).astype(np.float32)
    flip = (lambda a: np.flip(a, axis)) if reverse else (lambda a: a)
    assert_close(lax.associative_scan(jnp.add, x, reverse=reverse, axis=axis),
                 flip(np.cumsum(flip(x.astype(np.float64)), axis=axis)), 1e-5, 1e-5)
    assert_close(lax.associative_scan(jnp.maximum, x, reverse=reverse, axis=axis),
                 flip(np.maximum.accumulate(flip(x), axis=axis)))


# --- reduce_window (pooling), against a numpy loop over the windows ------------------------------

def _windows_reference(x, init, fn, window, strides, pads, dilation):
    x = np.pad(x, pads, constant_values=init)
    extent = [(w - 1) * d + 1 for w, d in zip(window, dilation)]
    out_shape = [(n - e) // s + 1 for n, e, s in zip(x.shape, extent, strides)]
    out = np.full(out_shape, init, dtype=x.dtype)
    for index in np.ndindex(*out_shape):
        box = tuple(slice(i * s, i * s + e, d)
                    for i, s, e, d in zip(index, strides, extent, dilation))
        out[index] = fn.reduce(np.concatenate([[init], x[box].ravel()]))
    return out


@pytest.mark.parametrize("fn, lax_fn, init", [(np.maximum, lax.max, -np.inf),
                                              (np.add, lax.add, 0.0),
                                              (np.minimum, lax.min, np.inf)])
@pytest.mark.parametrize("window, strides, padding, dilation", [
    ((1, 2, 2, 1), (1, 2, 2, 1), "VALID", None),
    ((1, 3, 3, 1), (1, 1, 1, 1), "SAME", None),
    ((1, 2, 3, 1), (1, 1, 2, 1), ((0, 0), (1, 0), (1, 1), (0, 0)), None),
    ((1, 2, 2, 1), (1, 1, 1, 1), "VALID", (1, 2, 2, 1)),
])
def test_reduce_window_equals_a_loop_over_its_windows(fn, lax_fn, init, window, strides,
                                                      padding, dilation):
    x = (np.arange(2 * 6 * 8 * 3, dtype=np.float32).reshape(2, 6, 8, 3) % 11) / 7
    dil = dilation or (1,) * 4
    extent = [(w - 1) * d + 1 for w, d in zip(window, dil)]
    pads = (lax.padtype_to_pads(x.shape, extent, strides, padding) if isinstance(padding, str)
            else padding)
    want = _windows_reference(x, np.float32(init), fn, window, strides, pads, dil)
    pool = lambda a: lax.reduce_window(a, init, lax_fn, window, strides, padding,
                                       window_dilation=dilation)
    everywhere(pool, x, want)


def test_reduce_window_base_dilation_spaces_the_operand_with_the_initial_value():
    x = (np.arange(2 * 5 * 4, dtype=np.float32).reshape(2, 5, 4) % 7) / 3
    for init, lax_fn, fn in ((-np.inf, lax.max, np.maximum), (0.0, lax.add, np.add)):
        for base, padding in (((1, 2, 1), "VALID"), ((1, 2, 3), "SAME")):
            spaced = np.full([(n - 1) * d + 1 for n, d in zip(x.shape, base)], init, np.float32)
            spaced[tuple(slice(None, None, d) for d in base)] = x
            window, strides = (1, 3, 2), (1, 2, 1)
            pads = (lax.padtype_to_pads(spaced.shape, window, strides, padding)
                    if isinstance(padding, str) else padding)
            want = _windows_reference(spaced, np.float32(init), fn, window, strides, pads,
                                      (1, 1, 1))
            pool = lambda a: lax.reduce_window(a, init, lax_fn, window, strides, padding,
                                               base_dilation=base)
            everywhere(pool, x, want)


def test_reduce_window_counts_its_initial_value_once_per_window():
    # padding and base-dilation holes take no part, as JAX's: with a non-identity initial
    # value each window is init combined with its elements only
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(lax.reduce_window(
        x, 10., lax.add, (2,), (1,), "VALID", base_dilation=(2,))), [10, 11, 11, 12])
    np.testing.assert_array_equal(np.asarray(lax.reduce_window(
        x, 10., lax.add, (2,), (1,), ((1, 1),))), [10, 11, 13, 12])
    np.testing.assert_array_equal(np.asarray(lax.reduce_window(
        x + 1, 3., lax.mul, (2,), (1,), ((1, 1),), base_dilation=(2,))),
        [3, 3, 6, 6, 9, 9])


def test_reduce_window_gradients_are_finite_differences():
    x = np.random.default_rng(0).standard_normal((1, 4, 6, 1))
    check_grad(lambda a: lax.reduce_window(a, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1),
                                           "VALID").sum(), x)
    check_grad(lambda a: (lax.reduce_window(a, 0.0, lax.add, (1, 3, 3, 1), (1, 1, 1, 1),
                                            "SAME") ** 2).sum(), x)


def test_lax_names_of_bit_and_comparison_operations():
    a, b = np.array([-8, 8, 3], np.int32), np.array([1, 2, 1], np.int32)
    np.testing.assert_array_equal(lax.shift_left(a, b), a << b)
    np.testing.assert_array_equal(lax.shift_right_arithmetic(a, b), a >> b)
    np.testing.assert_array_equal(lax.shift_right_logical(a, b),
                                  (a.view(np.uint32) >> b.view(np.uint32)).view(np.int32))
    np.testing.assert_array_equal(lax.population_count(np.array([7, 8, 255], np.uint8)),
                                  [3, 1, 8])
    np.testing.assert_array_equal(lax.select_n(np.array([0, 2, 1], np.int32), np.zeros(3),
                                               np.ones(3), np.full(3, 2.0)), [0, 2, 1])
    np.testing.assert_array_equal(lax.reduce_and(np.array([[True, False], [True, True]]), (1,)),
                                  [False, True])
    np.testing.assert_array_equal(lax.eq(np.arange(3), np.array([0, 5, 2])), [True, False, True])
    with pytest.raises(TypeError, match="lax.shift_left requires arguments to have the same "
                                        "dtypes, got int32, int8"):
        lax.shift_left(a, b.astype(np.int8))
    with pytest.raises(TypeError, match="acos does not accept dtype int32"):
        lax.acos(np.array([0, 1], np.int32))


@pytest.mark.parametrize("name, ref", [("acos", np.arccos), ("asin", np.arcsin),
                                       ("atan", np.arctan), ("asinh", np.arcsinh),
                                       ("atanh", np.arctanh), ("sinh", np.sinh),
                                       ("cosh", np.cosh)])
def test_inverse_and_hyperbolic_functions(name, ref):
    x = np.linspace(-0.9, 0.9, 16).reshape(4, 4).astype(np.float32)
    everywhere(getattr(lax, name), x, ref(x.astype(np.float64)), rtol=1e-5, atol=1e-6)
    check_grad(lambda a: getattr(lax, name)(a).sum(), x)


def test_acosh_above_one():
    x = np.linspace(1.1, 3.0, 16).reshape(4, 4).astype(np.float32)
    everywhere(lax.acosh, x, np.arccosh(x.astype(np.float64)), rtol=1e-5)
    check_grad(lambda a: lax.acosh(a).sum(), x)


def test_split_tile_collapse_and_rank():
    pieces = lax.split(jnp.arange(10.0), (3, 7))
    assert [p.shape for p in pieces] == [(3,), (7,)]
    np.testing.assert_array_equal(pieces[1], np.arange(3.0, 10.0))
    assert lax.collapse(jnp.ones((2, 3, 4)), 1).shape == (2, 12)
    assert lax.broadcast_to_rank(jnp.ones(3), 3).shape == (1, 1, 3)
    np.testing.assert_array_equal(lax.tile(jnp.arange(3.0), (2,)), np.tile(np.arange(3.0), 2))
    with pytest.raises(ValueError, match="Sum of sizes 9 must be equal to dimension 0"):
        lax.split(jnp.arange(10.0), (3, 6))


# --- shapes, bits, grouped products, composites (held to numpy; each ran under JAX too) -------

def test_broadcast_shapes_stack_and_unstack():
    from shardc import lax as L
    assert L.broadcast_shapes((1, 3), (4, 1)) == (4, 3)
    assert L.broadcast_shapes((2,), (3, 1)) == (3, 2)
    with pytest.raises(ValueError, match=r"Incompatible shapes for broadcasting: shapes=\[\(2,\), \(3,\)\]"):
        L.broadcast_shapes((2,), (3,))
    x = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(np.asarray(L.stack([x, 2 * x], axis=1)),
                                  np.stack([x, 2 * x], axis=1))
    parts = L.unstack(x, axis=1)
    assert isinstance(parts, tuple) and len(parts) == 3
    np.testing.assert_array_equal(np.asarray(parts[2]), x[:, 2])


def test_clz_and_reduce_xor_count_bits():
    from shardc import lax as L
    v = np.array([0, 1, 2, 255, -1, 2 ** 30], np.int32)
    want = [32 - int(n).bit_length() if n >= 0 else 0 for n in v]
    np.testing.assert_array_equal(np.asarray(L.clz(jnp.asarray(v))), want)
    np.testing.assert_array_equal(np.asarray(L.clz(jnp.array([1, 128], jnp.uint8))), [7, 0])
    m = np.random.default_rng(0).integers(-1000, 1000, (5, 7)).astype(np.int32)
    np.testing.assert_array_equal(np.asarray(L.reduce_xor(jnp.asarray(m), (0,))),
                                  np.bitwise_xor.reduce(m, axis=0))
    np.testing.assert_array_equal(np.asarray(L.reduce_xor(jnp.asarray(m), (0, 1))),
                                  np.bitwise_xor.reduce(m.reshape(-1)))
    assert not bool(L.reduce_xor(jnp.array([True, True, False]), (0,)))


def test_index_take_wraps_indices_and_keeps_other_axes():
    from shardc import lax as L
    src = np.arange(24.0, dtype=np.float32).reshape(3, 4, 2)
    i, j = np.array([0, 2, 5]), np.array([1, 3, -1])
    got = L.index_take(jnp.asarray(src), (jnp.asarray(i), jnp.asarray(j)), (0, 1))
    np.testing.assert_array_equal(np.asarray(got), src[i % 3, j % 4])


def test_ragged_dot_multiplies_each_run_of_rows_by_its_group():
    from shardc import lax as L
    rng = np.random.default_rng(0)
    lhs = rng.standard_normal((7, 4)).astype(np.float32)
    rhs = rng.standard_normal((3, 4, 5)).astype(np.float32)
    sizes = np.array([2, 0, 3], np.int32)          # rows 5 and 6 are in no group: zeros
    want = np.zeros((7, 5), np.float32)
    want[:2], want[2:5] = lhs[:2] @ rhs[0], lhs[2:5] @ rhs[2]
    got = L.ragged_dot(jnp.asarray(lhs), jnp.asarray(rhs), jnp.asarray(sizes))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
    grad = shardc.grad(lambda r: L.ragged_dot(jnp.asarray(lhs), r, jnp.asarray(sizes)).sum())(
        jnp.asarray(rhs))
    np.testing.assert_allclose(np.asarray(grad)[0], np.outer(lhs[:2].sum(0), np.ones(5)),
                               rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(grad)[1], 0)


def test_composite_runs_its_decomposition_and_platform_dependent_takes_cpu():
    from functools import partial
    from shardc import lax as L
    tangent = L.composite(lambda x: L.sin(x) / L.cos(x), name="my.tangent")
    np.testing.assert_allclose(np.asarray(tangent(jnp.array([0.0, 0.5]))), np.tan([0, 0.5]),
                               rtol=1e-6)

    @partial(L.composite, name="my.scale")
    def scale(x, /, *, by):
        return x * by

    assert float(scale(jnp.float32(2.0), by=3.0)) == 6.0
    assert float(L.platform_dependent(jnp.float32(2.0), cpu=lambda v: v * 3,
                                      default=lambda v: v)) == 6.0
    assert float(L.platform_dependent(jnp.float32(2.0), default=lambda v: v + 1)) == 3.0
    # no branch for cpu and no default: JAX's missing-lowering error
    with pytest.raises(NotImplementedError, match=r"^MLIR translation rule for primitive "
                       r"'platform_index\(platforms=\(\('tpu',\),\)\)' not found for "
                       "platform cpu$"):
        L.platform_dependent(3.0, tpu=lambda v: v + 2.0)
    np.testing.assert_array_equal(
        np.asarray(L.round(jnp.array([0.5, 1.5, 2.5]), L.RoundingMethod.TO_NEAREST_EVEN)),
        [0.0, 2.0, 2.0])


def test_lax_reductions_and_selects_at_their_edges_as_jax():
    """reduce_or/reduce_and are bitwise on integers (logical on booleans); a padding type of
    reduce_window is read on the operand before base dilation; select_n clamps an index out
    of range; reduce_precision takes bfloat16; complex log1p keeps its digits near 0."""
    ints = np.array([[1, -2], [3, 0]], np.int32)
    np.testing.assert_array_equal(np.asarray(lax.reduce_or(ints, (1,))), [-1, 3])
    np.testing.assert_array_equal(np.asarray(lax.reduce_and(np.array([[7, 6], [3, 0]]), (1,))),
                                  [6, 0])
    bits = np.array([3, 4, 64], np.uint8)
    assert int(lax.reduce(bits, np.uint8(0), jnp.bitwise_or, (0,))) == 71
    assert int(lax.reduce(np.array([6, 3], np.int32), np.int32(-1), jnp.bitwise_and, (0,))) == 2
    np.testing.assert_array_equal(
        np.asarray(lax.reduce_or(np.array([[True, False], [False, False]]), (1,))), [True, False])
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    assert lax.reduce_window(x, np.float32(np.inf), lax.min, (2, 1), (2, 1), "SAME",
                             base_dilation=(2, 3)).shape == (3, 16)
    a, b = np.array([1, 2, 3], np.int32), np.array([4, 5, 6], np.int32)
    np.testing.assert_array_equal(np.asarray(lax.select_n(np.int32(3), a, b)), b)
    np.testing.assert_array_equal(np.asarray(lax.select_n(np.int32(-1), a, b)), a)
    info = jnp.finfo(np.float16)
    rounded = lax.reduce_precision(jnp.array([1.5, 3.140625], jnp.bfloat16), info.nexp,
                                   info.nmant)
    assert rounded.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(rounded, np.float32), [1.5, 3.140625])
    z = np.array([1e-5, 1e-5 + 1e-6j, -1e-7j, 2 + 3j], np.complex64)
    # (numpy's complex128 log(1 + z) keeps 11 digits of these)
    np.testing.assert_allclose(np.asarray(lax.log1p(z)), np.log1p(z.astype(np.complex128)),
                               rtol=2e-7)


def test_dot_general_of_two_float8_formats_with_a_preferred_type():
    rng = np.random.default_rng(0)
    a = jnp.asarray(rng.normal(size=(2, 3)), jnp.float8_e4m3fn)
    b = jnp.asarray(rng.normal(size=(3, 2)), jnp.float8_e5m2)
    got = lax.dot_general(a, b, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)
    assert got.dtype == np.float32
    np.testing.assert_allclose(np.asarray(got),
                               np.asarray(a, np.float32) @ np.asarray(b, np.float32), rtol=1e-6)


def test_convert_element_type_of_python_ints_wraps_as_numpy():
    assert int(lax.convert_element_type(2**32, "int32")) == 0
    assert int(lax.convert_element_type(2**31, jnp.int32)) == -2**31
    assert int(lax.convert_element_type(-1, jnp.uint8)) == 255
    assert str(shardc.typeof(lax.convert_element_type(3, jnp.float32))) == "float32[]"


def test_dot_algorithms_compute_as_a_cpu_does():
    """A dot algorithm (preset, preset name or DotAlgorithm) as ``precision``: the operands are
    rounded to its precision dtypes and summed in its accumulation dtype, and the result keeps
    the dtype it has without one; the presets a CPU lacks raise ValueError, as JAX's do."""
    x = (np.arange(12, dtype=np.float32).reshape(3, 4) / 7).astype(np.float32)
    y = (np.arange(12, dtype=np.float32).reshape(4, 3) / 3).astype(np.float32)
    exact = x.astype(np.float64) @ y.astype(np.float64)
    for alg in (lax.DotAlgorithmPreset.F32_F32_F32, "F32_F32_F32", "DEFAULT",
                lax.DotAlgorithmPreset.BF16_BF16_F32_X3):
        got = lax.dot(x, y, precision=alg)
        assert got.dtype == np.float32
        np.testing.assert_allclose(np.asarray(got), exact, rtol=1e-6)
    # F32_F32_F32 on float16 operands: computed in float32, returned as float16
    h, k = x.astype(np.float16), y.astype(np.float16)
    got = lax.dot(h, k, precision="F32_F32_F32")
    assert got.dtype == np.float16
    np.testing.assert_array_equal(
        np.asarray(got), (h.astype(np.float32) @ k.astype(np.float32)).astype(np.float16))
    # BF16_BF16_F32 rounds float16 operands to bfloat16 first
    bf = lax.dot(h, k, precision=lax.DotAlgorithmPreset.BF16_BF16_F32)
    want = (h.astype(jnp.bfloat16).astype(np.float32)
            @ k.astype(jnp.bfloat16).astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(np.asarray(bf), want)
    assert float(bf[0, 0]) != float(got[0, 0])
    got = lax.dot_general(x, y, (((1,), (0,)), ((), ())), precision="F64_F64_F64")
    assert got.dtype == np.float32
    np.testing.assert_allclose(np.asarray(got), exact, rtol=1e-6)
    grad = shardc.grad(lambda a: lax.dot(a, y, precision="F32_F32_F32").sum())(x)
    np.testing.assert_allclose(np.asarray(grad), np.broadcast_to(y.sum(1), (3, 4)), rtol=1e-6)
    for alg in ("F16_F16_F32", lax.DotAlgorithmPreset.TF32_TF32_F32,
                lax.DotAlgorithm(np.float16, np.float16, np.float32)):
        with pytest.raises(ValueError, match="is not supported by dot_general on CPU"):
            lax.dot(h, k, precision=alg)
    assert repr(lax.DotAlgorithmPreset.F16_F16_F32) == "DotAlgorithmPreset.F16_F16_F32"
    assert str(lax.DotAlgorithmPreset.F16_F16_F32) == "F16_F16_F32"
    assert lax.DotAlgorithm(np.float16, np.float16, np.float32).num_primitive_operations == 1


def test_lax_binary_operations_do_not_promote():
    """lax's binary operations take operands of one dtype (a Python int is an int32, a float a
    float32) and raise TypeError otherwise, as JAX's do; jax.numpy's promote."""
    f32, i32 = np.ones(2, np.float32), np.ones(2, np.int32)
    for op in (lax.add, lax.sub, lax.mul, lax.div, lax.rem, lax.max, lax.min, lax.eq, lax.ne,
               lax.lt, lax.le, lax.gt, lax.ge, lax.atan2, lax.nextafter):
        if op not in (lax.atan2, lax.nextafter):        # (these refuse the int first)
            with pytest.raises(TypeError, match="requires arguments to have the same dtypes"):
                op(0, 0.0)
            with pytest.raises(TypeError, match="same dtypes, got float32, int32"):
                op(f32, i32)
        with pytest.raises(TypeError, match="same dtypes, got float32, float16"):
            op(f32, np.ones(2, np.float16))
        assert np.asarray(op(f32, 1.0)).shape == (2,)       # a float is a float32
    with pytest.raises(TypeError, match=r"\(Tip: jnp.add is a similar function"):
        lax.add(f32, 1)
    assert lax.add(i32, np.int64(2)).dtype == np.int32     # numpy's int64 is canonically int32
    assert_close(lax.add(f32, np.ones(2)), f32 + 1, dtype=np.float32)
    for op in (lax.rem, lax.lt, lax.le, lax.gt, lax.ge):
        with pytest.raises(TypeError, match="does not accept dtype complex64 at position 0"):
            op(2 + 3j, 4 + 5j)
    with pytest.raises(TypeError, match="atan2 does not accept dtype int32"):
        lax.atan2(i32, i32)
    with pytest.raises(TypeError, match="lax.and requires arguments to have the same dtypes"):
        lax.bitwise_and(i32, np.ones(2, np.int8))
    with pytest.raises(TypeError, match="complex does not accept dtype int32 at position 1. "
                                        ".* float32, float64"):
        lax.complex(f32, 1)
    assert lax.complex(f32, 1.0).dtype == np.complex64
    assert lax.pow(f32, i32).dtype == np.float32 and lax.pow(f32, 1).dtype == np.float32
    with pytest.raises(TypeError, match="two inexact dtypes must match"):
        lax.pow(f32, np.ones(2, np.float16))
    with pytest.raises(TypeError, match="pow does not accept dtype int32"):
        lax.pow(i32, i32)
    assert lax.mul(i32, f32, out_dtype=np.float32).dtype == np.float32
    # jax.numpy's functions still promote
    assert jnp.add(f32, i32).dtype == np.float32


def test_lax_binary_operations_broadcast_size_one_dimensions_never_missing_ones():
    """lax's binary operations take operands of one rank (or rank 0) and broadcast their
    size-1 dimensions; operands of different ranks are JAX's TypeError naming the ranks."""
    col, row = np.arange(3.0, dtype=np.float32)[:, None], np.arange(4.0, dtype=np.float32)[None]
    np.testing.assert_array_equal(lax.mul(col, row), col * row)
    np.testing.assert_array_equal(lax.add(col, 2.0), col + 2)
    i32 = np.ones((2, 3), np.int32)
    for op, x, y in ((lax.add, np.ones(3), np.ones((3, 4))), (lax.mul, col, row[0]),
                     (lax.div, col, row[0]), (lax.rem, col, row[0]), (lax.pow, col, row[0]),
                     (lax.complex, col, row[0]), (lax.eq, col, row[0]),
                     (lax.bitwise_and, i32, i32[0]), (lax.shift_left, i32, i32[0])):
        name = {"bitwise_and": "and"}.get(op.__name__, op.__name__)
        with pytest.raises(TypeError, match=rf"^{name}: arrays must have the same number of "
                                            r"dimensions, got \{1, 2\}$"):
            op(x, y)
    assert lax.bitwise_and.__name__ == "bitwise_and"


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.uint8, np.uint16, np.uint32])
def test_mulhi_is_the_high_half_of_the_double_width_product(dtype):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(1)
    x = rng.integers(info.min, info.max, 500, endpoint=True).astype(dtype)
    y = rng.integers(info.min, info.max, 500, endpoint=True).astype(dtype)
    x[:4] = [info.min, info.max, info.min, 0]
    y[:4] = [info.min, info.min, info.max, info.max]
    want = np.array([(int(a) * int(b)) >> info.bits for a, b in zip(x, y)]).astype(dtype)
    got = lax.mulhi(x, y)
    assert got.dtype == dtype
    np.testing.assert_array_equal(np.asarray(got), want)
    np.testing.assert_array_equal(np.asarray(shardc.jit(lax.mulhi)(x, y)), want)


def test_lax_betainc_and_argminmax_checks():
    """lax.betainc is scipy's regularized incomplete beta (float operands of one dtype);
    lax.argmax/argmin refuse a negative axis, an empty dimension and a non-integer index
    dtype, as JAX's do."""
    x = np.array([0.1, 0.5, 0.9], np.float32)
    x64 = x.astype(np.float64)       # I_x(2, 3): the binomial tail of 4 trials, 2 or more
    want = 6 * x64**2 * (1 - x64)**2 + 4 * x64**3 * (1 - x64) + x64**4
    assert_close(lax.betainc(np.float32(2), np.float32(3), x), want, 1e-5, 1e-6, np.float32)
    with pytest.raises(TypeError, match="does not accept dtype int32"):
        lax.betainc(1.0, 2, 0.5)
    a = np.array([[1, 5, 5], [7, 0, 7]], np.float32)
    np.testing.assert_array_equal(np.asarray(lax.argmax(a, 1, np.int32)), [1, 0])
    np.testing.assert_array_equal(np.asarray(lax.argmin(a, 0, np.int32)), [0, 1, 0])
    with pytest.raises(TypeError, match="index_dtype must be an integer type"):
        lax.argmax(a, 0, np.float32)
    with pytest.raises(ValueError, match="require non-empty reduced dimension"):
        lax.argmin(np.ones((0, 2)), axis=0, index_dtype=np.int32)
    with pytest.raises(ValueError, match="Invalid axis -1 for operand"):
        lax.argmax(a, axis=-1, index_dtype=np.int32)


def test_broadcast_in_dim_checks_its_arguments_as_jax_does():
    x = np.ones((2, 3), np.float32)
    cases = [((2, 3), (0,), "must have length equal to operand ndim"),
             ((3,), (0, 1), "must have equal or higher rank"),
             ((2, 3), (0, 2), "must be a subset of output dimensions"),
             ((2, 4), (0, 1), "must either be 1, or be equal"),
             ((3, 3, 3), (1, 1), "must not contain duplicates")]
    for shape, dims, message in cases[:4]:
        with pytest.raises(TypeError, match=message):
            lax.broadcast_in_dim(x, shape, dims)
    with pytest.raises(TypeError, match=cases[4][2]):
        lax.broadcast_in_dim(np.ones((3, 3), np.float32), (3, 3, 3), (1, 1))
    assert lax.broadcast_in_dim(x, (4, 2, 3), (1, 2)).shape == (4, 2, 3)


def test_split_refuses_an_axis_out_of_range_and_negative_sizes():
    """lax.split(x, sizes, axis=1) of a vector raised nothing (the axis wrapped to 0); JAX
    refuses it, and negative sizes, with ValueError."""
    x = np.arange(5)
    with pytest.raises(ValueError, match="axis 1 is out of bounds"):
        lax.split(x, sizes=(), axis=1)
    with pytest.raises(ValueError, match="Sizes passed to split must be nonnegative"):
        lax.split(x, [-1, 6])
    with pytest.raises(ValueError, match="Sum of sizes 6 must be equal"):
        lax.split(x, [6])
    parts = lax.split(np.arange(6).reshape(2, 3), [1, 2], axis=-1)
    assert [p.shape for p in parts] == [(2, 1), (2, 2)]


def test_lax_squeeze_refuses_a_repeated_dimension():
    x = np.ones((1, 2, 1), np.float32)
    with pytest.raises(ValueError, match="dimensions are not unique"):
        lax.squeeze(x, (0, 0))
    with pytest.raises(ValueError, match="dimensions are not unique"):
        lax.squeeze(x, (2, -1))
    assert lax.squeeze(x, (0, -1)).shape == (2,)


def test_top_k_refuses_a_dimension_its_int32_indices_cannot_count():
    x = shardc.ShapeDtypeStruct((2 ** 31 + 1,), np.float32)
    with pytest.raises(ValueError, match="top_k returns int32 indices, which will overflow"):
        shardc.eval_shape(lambda v: lax.top_k(v, 3), x)


def test_lax_dot_takes_its_precision_by_keyword_only():
    a = np.arange(5.0, dtype=np.float32)
    with pytest.raises(TypeError, match=r"dot\(\) takes 2 positional arguments"):
        lax.dot(a, a, lax.Precision.DEFAULT)
    assert float(lax.dot(a, a, precision=lax.Precision.HIGHEST)) == 30.0


def test_lax_pad_checks_its_arguments_as_jax_does():
    x = np.zeros(2, np.float32)
    with pytest.raises(ValueError, match="padding_value must be a scalar"):
        lax.pad(x, np.zeros(2, np.float32), [(0, 0, 0)])
    with pytest.raises(ValueError, match="length of padding_config must equal"):
        lax.pad(x, 0.0, [(0, 1, 0), (0, 1, 0)])
    with pytest.raises(ValueError, match="interior padding in padding_config must be nonneg"):
        lax.pad(x, 0.0, [(0, 1, -1)])
    with pytest.raises(ValueError, match="Dimension size after padding is not at least 0"):
        lax.pad(x, 0.0, [(-4, 0, 1)])
    np.testing.assert_array_equal(np.asarray(lax.pad(x + 1, 0.0, [(1, -1, 1)])), [0, 1, 0])


def test_mixed_dtype_errors_carry_jaxs_tip_only_where_jax_gives_one():
    # JAX's table of promoting counterparts: comparisons and rem get no tip, shifts do
    x, i, u = jnp.ones(3), jnp.ones(3, jnp.int32), jnp.ones(3, jnp.uint32)
    for call, tip in ((lambda: lax.lt(x, i), None), (lambda: lax.rem(x, i), None),
                      (lambda: lax.shift_left(i, u), "left_shift"),
                      (lambda: lax.shift_right_logical(i, u), "right_shift"),
                      (lambda: lax.bitwise_and(i, u), None), (lambda: lax.add(x, i), "add")):
        with pytest.raises(TypeError, match="requires arguments to have the same dtypes") as err:
            call()
        assert ("Tip" in str(err.value)) == (tip is not None)
        if tip:
            assert f"jnp.{tip} is a similar function" in str(err.value)


def test_dynamic_slice_indices_must_be_integers_of_one_type():
    x = np.ones((3, 4), np.float32)
    with pytest.raises(TypeError, match="^index arguments to dynamic_slice must be integers of "
                                        "the same type, got: int32, int16$"):
        lax.dynamic_slice(x, (np.int32(1), np.int16(2)), (2, 2))
    with pytest.raises(TypeError, match="^index arguments to dynamic_update_slice must be "
                                        "integers of the same type, got int32, int16$"):
        lax.dynamic_update_slice(x, np.zeros((2, 2), np.float32), (np.int32(1), np.int16(2)))
    # a float index was truncated to an int
    with pytest.raises(TypeError, match="got: float32, int32$"):
        lax.dynamic_slice(x, (1.0, 2), (2, 2))
    with pytest.raises(TypeError, match="got: int32, float32$"):
        shardc.jit(lambda i: lax.dynamic_slice(x, (1, i), (2, 2)))(1.5)
    # Python ints take the other indices' type
    np.testing.assert_array_equal(lax.dynamic_slice(x, (np.int16(1), 2), (2, 2)), x[1:3, 2:4])


@pytest.mark.parametrize("start", [np.uint32(4294967295), np.uint32(2**31 + 5),
                                   np.uint8(255), np.uint16(65535), np.int8(-1)])
def test_dynamic_slice_starts_past_the_end_clamp_whatever_their_type(start):
    """Large unsigned starts (and -1, counted from the end) clamp to the last window, eager
    and traced, as JAX's."""
    x = np.arange(24.0, dtype=np.float32).reshape(4, 3, 2)
    zero = start.dtype.type(0)
    one = np.ones((1, 1, 1), np.float32)
    want_update = x.copy()
    want_update[3, 0, 0] = 1.0
    np.testing.assert_array_equal(lax.dynamic_slice(x, (start, zero, zero), (1, 1, 1)),
                                  [[[18.0]]])
    np.testing.assert_array_equal(lax.dynamic_update_slice(x, one, (start, zero, zero)),
                                  want_update)
    np.testing.assert_array_equal(
        shardc.jit(lambda s: lax.dynamic_slice(x, (s, s, s), (1, 1, 1)))(start), [[[23.0]]])
    want_update = x.copy()
    want_update[3, 2, 1] = 1.0
    np.testing.assert_array_equal(
        shardc.jit(lambda s: lax.dynamic_update_slice(x, one, (s, s, s)))(start), want_update)


def test_conv_window_strides_of_the_wrong_length():
    with pytest.raises(ValueError, match="^conv_general_dilated window and window_strides must "
                                         "have the same number of dimensions, but got 2 and 1$"):
        lax.conv_general_dilated(np.ones((1, 1, 4, 4), np.float32),
                                 np.ones((1, 1, 2, 2), np.float32), (1,), "VALID")


def test_reduce_window_checks_as_jax():
    add = lambda a, b: a + b
    with pytest.raises(TypeError, match=r"^reduce_window window_dimensions must have every "
                                        r"element be strictly positive, got \(0,\).$"):
        lax.reduce_window(np.ones((1,)), 0., add, (0,), (1,), "VALID")
    with pytest.raises(TypeError, match=r"window_strides must have every element be strictly "
                                        r"positive, got \(0,\).$"):
        lax.reduce_window(np.ones((1,)), 0., add, (1,), (0,), "VALID")
    with pytest.raises(TypeError, match=r"^reduce_window expected init_values to be scalars but "
                                        r"init_values have shapes \[\(1,\)\].$"):
        lax.reduce_window(np.ones((4, 4), np.int32), np.zeros((1,), np.int32), lax.max,
                          (2, 2), (2, 2), "VALID")
    with pytest.raises(ValueError, match="^reduce_window output must have the same tree "
                                         "structure as the operands"):
        lax.reduce_window(np.ones((1,)), 0., lambda x, y: [x + y], (1,), (1,), "VALID")


def test_narrow_integers_clz_and_abs_as_jax():
    # clz counts a 4-bit integer's 4 bits (it counted 8)
    assert np.asarray(shardc.lax.clz(lax.iota("uint4", 3))).tolist() == [4, 3, 2]
    assert np.asarray(shardc.lax.clz(lax.iota("int4", 3))).tolist() == [4, 3, 2]
    for dtype in ("int4", "int2"):
        with pytest.raises(TypeError, match=f"^abs does not accept dtype {dtype}. Support for "
                                            "narrow-width integers is platform-dependent"):
            lax.abs(lax.iota(dtype, 3))
    for dtype in ("uint4", "uint8", "uint32"):
        with pytest.raises(TypeError, match=f"^abs does not accept dtype {dtype}. Accepted "
                                            "dtypes are subtypes of floating, complexfloating, "
                                            "signedinteger.$"):
            lax.abs(lax.iota(dtype, 3))
        # jnp.abs hands unsigned values back as they are
        assert np.asarray(jnp.abs(lax.iota(dtype, 3))).tolist() == [0, 1, 2]
    assert np.asarray(jnp.abs(jnp.array([True, False]))).tolist() == [True, False]
    assert np.asarray(lax.abs(jnp.array([-3, 2], np.int8))).tolist() == [3, 2]


def test_symmetric_product_as_jax():
    from shardc.lax import linalg as lax_linalg
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 4, 5)).astype(np.float32)
    c = rng.standard_normal((3, 4, 4)).astype(np.float32)
    c = c + np.swapaxes(c, -1, -2)
    want = 0.5 * np.einsum("bij,bkj->bik", a, a) + 2.0 * c
    got = lax_linalg.symmetric_product(a, c, alpha=0.5, beta=2.0, symmetrize_output=True)
    assert got.dtype == np.float32 and got.shape == (3, 4, 4)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    batched = shardc.vmap(lambda x, y: lax_linalg.symmetric_product(x, y))(a, c * 0)
    np.testing.assert_allclose(np.tril(batched), np.tril(np.einsum("bij,bkj->bik", a, a)),
                               rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"symmetric_update expects a rectangular matrix of "
                                         r"shape \(m, n\) and a square matrix of shape \(n, n\). "
                                         r"Got shapes \(4, 5\) and \(5, 5\)."):
        lax_linalg.symmetric_product(a, np.zeros((3, 5, 5), np.float32))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, jnp.bfloat16])
def test_lax_round_rounds_half_away_from_zero_without_rounding_the_sum(dtype):
    # floor(|x| + 0.5) rounds the sum first: 0.49999997 gave 1 and 8388609 gave 8388610
    with np.errstate(over="ignore"):                  # (float16 holds no 15000001: inf)
        x = np.array([0.49999997, 8388609.0, -0.49999997, 15000001.0, 0.5, -0.5, 1.5, 2.5,
                      -2.5, -0.3, 0.0, np.inf, -np.inf], np.float32).astype(dtype)
    wide = x.astype(np.float64)
    want = (np.sign(wide) * np.floor(np.abs(wide) + 0.5)).astype(dtype)   # exact in float64
    for run in (lax.round, shardc.jit(lax.round)):
        got = np.asarray(run(jnp.asarray(x)))
        np.testing.assert_array_equal(got, want)
        assert np.signbit(got[9])                               # round(-0.3) is -0.0


_f32, _f16, _i32 = np.ones(2, np.float32), np.ones(2, np.float16), np.ones(2, np.int32)
_SD = lax.ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0,),
                                  scatter_dims_to_operand_dims=(0,))


@pytest.mark.parametrize("call, error, message", [
    (lambda: lax.conv_general_dilated(np.ones((1, 2, 5, 5), np.float32),
                                      np.ones((4, 2, 3, 3), np.float16), (1, 1), "SAME"),
     TypeError, "lax.conv_general_dilated requires arguments to have the same dtypes, got "
                "float32, float16."),
    (lambda: lax.scatter_add(_f32, np.zeros((2, 1), np.int32), _i32, _SD),
     TypeError, "lax.scatter requires arguments to have the same dtypes, got float32, int32."),
    (lambda: lax.pad(_f32, np.int32(0), [(1, 0, 0)]),
     TypeError, "pad operand and padding_value must be same dtype: got float32 and int32."),
    (lambda: lax.pad(_f16, 0.0, [(1, 0, 0)]),
     TypeError, "pad operand and padding_value must be same dtype: got float16 and float32."),
    (lambda: lax.clamp(np.int32(0), _f32, np.float32(1)),
     TypeError, "lax.clamp requires arguments to have the same dtypes, got int32, float32, "
                "float32."),
    (lambda: lax.igamma(_f32, _f16),
     TypeError, "lax.igamma requires arguments to have the same dtypes, got float32, float16."),
    (lambda: lax.zeta(_i32, _i32),
     TypeError, "zeta does not accept dtype int32 at position 0. Accepted dtypes at position 0 "
                "are subtypes of floating."),
    (lambda: lax.bitcast_convert_type(_f32, np.complex64),
     TypeError, "lax.bitcast_convert_type does not support bool or complex values unless the "
                "operand and destination types match. Got operand dtype=float32, "
                "new_dtype=dtype('complex64'). Consider using the arr.view() method instead."),
    (lambda: lax.round(_i32), TypeError,
     "round does not accept dtype int32. Accepted dtypes are subtypes of floating."),
    (lambda: lax.round(_i32, lax.RoundingMethod.TO_NEAREST_EVEN), TypeError,
     "round does not accept dtype int32. Accepted dtypes are subtypes of floating."),
    (lambda: lax.linalg.lu_pivots_to_permutation(np.zeros(4, np.int32), 3), ValueError,
     "Output permutation size 3 has to exceed the trailing dimension of the pivots. Got "
     "pivots size 4"),
    (lambda: lax.reduce_precision(_f32, exponent_bits=0, mantissa_bits=2), ValueError,
     "reduce_precision: exponent_bits must be positive; got 0"),
    (lambda: lax.reduce_precision(_f32, exponent_bits=5, mantissa_bits=-1), ValueError,
     "reduce_precision: mantissa_bits must be non-negative; got -1"),
])
def test_lax_refuses_operands_as_jax_does(call, error, message):
    """lax never promotes: mixed dtypes, wrong kinds and bad sizes raise JAX's errors (its
    types and texts, JAX 0.10.2)."""
    with pytest.raises(error) as caught:
        call()
    assert str(caught.value) == message


@pytest.mark.parametrize("call, permutation", [
    (lambda x: x.transpose((0, 0)), (0, 0)),
    (lambda x: jnp.transpose(x, (1,)), (1,)),
    (lambda x: lax.transpose(x, (0, 0)), (0, 0)),
    (lambda x: lax.transpose(x, [0, 2]), (0, 2)),       # lax reads no axis from the end
    (lambda x: lax.transpose(x, (-1, 0)), (-1, 0)),
])
def test_transpose_of_no_permutation_is_jaxs_type_error(call, permutation):
    with pytest.raises(TypeError) as info:
        call(jnp.ones((2, 3)))
    assert str(info.value) == ("transpose permutation isn't a permutation of operand "
                               f"dimensions, got permutation {permutation} for operand shape "
                               "(2, 3).")


def test_transpose_axes_jnp_reads_from_the_end_and_bounds():
    x = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(np.asarray(jnp.transpose(x, (-1, 0))), x.T)
    np.testing.assert_array_equal(np.asarray(lax.transpose(x, (1, 0))), x.T)
    with pytest.raises(ValueError, match="axis 2 is out of bounds for array of dimension 2"):
        jnp.transpose(x, (0, 2))


_A4 = np.arange(4.0, dtype=np.float32)


@pytest.mark.parametrize("call, error, message", [
    (lambda a: lax.dynamic_slice(a, (0, 0), (1, 1)), ValueError,
     "Length of slice indices must match number of operand dimensions (2 vs (4,))"),
    (lambda a: lax.dynamic_update_slice(a, jnp.ones(1), (0, 0)), ValueError,
     "Length of slice indices must match number of operand dimensions (2 vs (4,))"),
    (lambda a: lax.dynamic_update_slice(a, jnp.ones(1), ()), ValueError,
     "Length of slice indices must match number of operand dimensions (0 vs (4,))"),
    (lambda a: lax.dynamic_slice(a, (0,), (5,)), TypeError,
     "slice slice_sizes must be less than or equal to operand shape, got slice_sizes (5,) "
     "for operand shape (4,)."),
    (lambda a: lax.dynamic_slice_in_dim(a, 0, 5), TypeError,
     "slice slice_sizes must be less than or equal to operand shape, got slice_sizes (5,) "
     "for operand shape (4,)."),
    (lambda a: lax.dynamic_slice(a, (0,), (-1,)), TypeError,
     "slice slice_sizes must be greater than or equal to zero, got slice_sizes of (-1,)."),
    (lambda a: lax.dynamic_update_slice(a, jnp.ones((1, 1)), (0,)), TypeError,
     "dynamic_update_slice update must have the same rank as operand, got update shape "
     "(1, 1) for operand shape (4,)."),
    (lambda a: lax.dynamic_update_slice(a, jnp.ones(5), (0,)), TypeError,
     "dynamic_update_slice update shape must be smaller than operand shape, got update shape "
     "(5,) for operand shape (4,)."),
    (lambda a: lax.dynamic_update_slice(a, jnp.ones(1, jnp.int32), (0,)), TypeError,
     "lax.dynamic_update_slice requires arguments to have the same dtypes, got float32, "
     "int32."),
    (lambda a: lax.slice(a, (0, 0), (1, 1)), TypeError,
     "slice start_indices must have length equal to the number of dimensions of the operand, "
     "got indices (0, 0) for operand shape (4,)."),
    (lambda a: lax.slice(a, (0,), (1, 1)), TypeError,
     "slice limit_indices must have the same length as start_indices, got start_indices (0,) "
     "and limit_indices (1, 1)."),
    (lambda a: lax.slice(a, (0,), (5,)), TypeError,
     "slice limit_indices must be less than or equal to operand shape, got limit_indices (5,) "
     "for operand shape (4,)."),
    (lambda a: lax.slice(a, (-1,), (2,)), TypeError,
     "slice start_indices must have every element be nonnegative, got (-1,)."),
    (lambda a: lax.slice(a, (3,), (2,)), TypeError,
     "slice limit_indices must be greater than or equal to start_indices, got start_indices "
     "(3,) and limit_indices (2,)."),
    (lambda a: lax.slice(a, (0,), (1,), (1, 1)), TypeError,
     "slice strides must have length equal to the number of dimensions of the operand, got "
     "strides (1, 1) for operand shape (4,)."),
    (lambda a: lax.slice(a, (0,), (2,), (-1,)), TypeError,
     "slice strides must have every element be nonnegative, got (-1,)."),
    (lambda a: lax.dynamic_index_in_dim(a, 0, axis=1), ValueError,
     "axis 1 is out of bounds for an array of rank 1"),
])
@pytest.mark.parametrize("jit", [False, True])
def test_slice_errors_as_jax(call, error, message, jit):
    """The static and dynamic slices' checks: JAX 0.10.2's classes and words (its shape
    rules', which jit shows), eager and under jit alike."""
    with pytest.raises(error) as info:
        (shardc.jit(call) if jit else call)(_A4)
    assert str(info.value) == message


def test_broadcast_like_takes_the_shape_and_the_split_of_the_other_array():
    np.testing.assert_array_equal(
        np.asarray(lax.broadcast_like(jnp.array([1, 2, 3]), jnp.zeros((2, 3)))),
        [[1, 2, 3], [1, 2, 3]])
    mesh = shardc.make_mesh((4, 2), ("x", "y"))
    with shardc.set_mesh(mesh):
        like = shardc.device_put(np.zeros((8, 3), np.float32), P("x"))
        for out in (lax.broadcast_like(jnp.arange(3.), like),
                    shardc.jit(lax.broadcast_like)(jnp.arange(3.), like)):
            assert str(shardc.typeof(out)) == "float32[8@x,3]"
            np.testing.assert_array_equal(np.asarray(out), np.tile(np.arange(3.), (8, 1)))
        assert str(shardc.typeof(lax.broadcast_like(2.0, like))) == "~float32[8@x,3]"
    with pytest.raises(ValueError, match="Incompatible types for broadcasting"):
        lax.broadcast_like(jnp.arange(4.), jnp.zeros((2, 3)))
