"""jax.lax operations and checks JAX's own lax tests exercise: reduce's and conv's errors,
composite's refusals, variadic reduce_window, ragged_dot_general's dimension numbers, the
locally connected convolution, rng_bit_generator and the accuracy argument of the unary
functions; values against numpy references, errors as JAX words them."""
from __future__ import annotations

import math
from functools import partial

import numpy as np
import pytest

import shardc
import shardc.numpy as jnp
from shardc import lax
from compiler.tracing import UnexpectedTracerError


# --- errors as JAX raises them --------------------------------------------------------------

def test_reduce_refuses_non_scalar_initial_values_of_a_pytree():
    with pytest.raises(ValueError, match=r"^reduce found non-scalar initial value: \[\(5,\)\]$"):
        lax.reduce({"x": np.ones(5)}, {"x": np.ones(5)},
                   lambda x, y: dict(x=x["x"] + y["x"]), [0])
    # a one-leaf pytree's computation takes pytrees, as the operands are
    got = lax.reduce({"x": np.arange(5.0)}, {"x": 0.0}, lambda x, y: dict(x=x["x"] + y["x"]),
                     [0])
    assert float(got["x"]) == 10.0


def test_conv_of_operands_of_different_ranks():
    dn = lax.ConvDimensionNumbers(lhs_spec=(0, 1, 2), rhs_spec=(0, 1, 2), out_spec=(0, 1, 2))
    with pytest.raises(ValueError, match=r"^conv_general_dilated lhs and rhs must have the same "
                                         r"number of dimensions, but got \(1, 1, 1\) and "
                                         r"\(1, 1, 1, 1\).$"):
        lax.conv_general_dilated(np.ones((1, 1, 1)), np.ones((1, 1, 1, 1)), (1,), ((0, 0),),
                                 (1,), (1,), dn)
    with pytest.raises(TypeError, match="^convolution requires lhs and rhs ndim to be equal, "
                                        "got 3 and 4.$"):
        lax.conv_general_dilated(np.ones((1, 1, 1)), np.ones((1, 1, 1, 1)), (1,), "VALID")


def test_composite_refuses_differentiation_and_closed_over_tracers():
    @partial(lax.composite, name="my.square")
    def square(x):
        return x ** 2

    assert float(square(3.0)) == 9.0
    assert float(shardc.jit(square)(3.0)) == 9.0
    np.testing.assert_array_equal(shardc.vmap(square)(jnp.arange(3.0)), [0.0, 1.0, 4.0])
    message = (r"^JVP rule for composite not implemented. You can use `jax.custom_jvp` to add "
               r"support. See https://docs.jax.dev/en/latest/_autosummary/jax.custom_jvp.html$")
    with pytest.raises(ValueError, match=message):
        shardc.jvp(square, (1.0,), (2.0,))
    with pytest.raises(ValueError, match=message):
        shardc.grad(square)(1.0)

    def fun(x, scale):
        return lax.composite(lambda y: jnp.round(y / scale), name="my.consts")(x)

    scale = jnp.array([0.5, 0.4, 0.3], dtype=jnp.float32)
    x = jnp.array([1.0, 2.0, 3.0], dtype=jnp.float32)
    np.testing.assert_array_equal(fun(x, scale), np.round(np.asarray(x) / np.asarray(scale)))
    np.testing.assert_array_equal(shardc.jit(partial(fun, scale=scale))(x),
                                  np.round(np.asarray(x) / np.asarray(scale)))
    with pytest.raises(UnexpectedTracerError, match="^Found a JAX Tracer as a constant in the "
                                                    "decomposition for the composite op "
                                                    "'my.consts'."):
        shardc.jit(fun)(x, scale)
    with pytest.raises(UnexpectedTracerError, match="Note: If you are passing jax arrays as "
                                                    "attributes, use numpy arrays instead.$"):
        shardc.jit(lambda v: lax.composite(lambda y, **_: y, "my.id")(v, t=v * 2))(x)


# --- the accuracy argument of the unary functions ------------------------------------------------

@pytest.mark.parametrize("name, ref", [
    ("exp", np.exp), ("exp2", np.exp2), ("expm1", np.expm1), ("log", np.log),
    ("log1p", np.log1p), ("tanh", np.tanh), ("sin", np.sin), ("cos", np.cos), ("tan", np.tan),
    ("sqrt", np.sqrt), ("rsqrt", lambda v: 1 / np.sqrt(v)), ("cbrt", np.cbrt),
    ("logistic", lambda v: 1 / (1 + np.exp(-v)))])
def test_unary_functions_take_jax_accuracy(name, ref):
    fn = getattr(lax, name)
    x = np.linspace(0.1, 2.0, 7).astype(np.float32)
    want = ref(x.astype(np.float64))
    for accuracy in (None, lax.AccuracyMode.HIGHEST, lax.AccuracyMode.DEFAULT,
                     lax.Tolerance(atol=1e-3), lax.Tolerance(rtol=1e-6, ulps=2)):
        np.testing.assert_allclose(fn(x, accuracy=accuracy), want, rtol=1e-5)
        np.testing.assert_allclose(shardc.jit(partial(fn, accuracy=accuracy))(x), want,
                                   rtol=1e-5)
    # the gradient is the function's own
    g = shardc.grad(lambda v: fn(v, accuracy=lax.AccuracyMode.HIGHEST))(np.float32(0.7))
    assert np.isclose(float(g), float(shardc.grad(fn)(np.float32(0.7))))
    if name == "logistic":      # JAX's CPU lowering of logistic reads no accuracy
        np.testing.assert_allclose(fn(x, accuracy="HIGHEST"), want, rtol=1e-5)
    else:
        with pytest.raises(NotImplementedError, match="^Accuracy HIGHEST not supported$"):
            fn(x, accuracy="HIGHEST")
    with pytest.raises(TypeError):
        fn(x, lax.AccuracyMode.HIGHEST)         # keyword only


def test_tolerance_checks_as_jax():
    with pytest.raises(ValueError, match="^At least one of atol, rtol, or ulps must be set.$"):
        lax.Tolerance()
    with pytest.raises(ValueError, match="^Tolerances must be non-negative.$"):
        lax.Tolerance(atol=-1.0)
    assert [m.name for m in lax.AccuracyMode] == ["HIGHEST", "DEFAULT"]


# --- reduce_window over a pytree of operands (JAX's variadic reduce_window) --------------------

def _window_fold(x, init, fn, window, strides, pads, base, dilation):
    """Each window of ``x`` (spaced by ``base``, padded by ``pads``; holes and padding take no
    part) folded by ``fn`` from ``init`` in row-major order: XLA's reduce_window."""
    real = np.zeros([(n - 1) * b + 1 for n, b in zip(x.shape, base)], bool)
    spaced = np.zeros(real.shape, x.dtype)
    real[tuple(slice(None, None, b) for b in base)] = True
    spaced[tuple(slice(None, None, b) for b in base)] = x
    real = np.pad(real, pads, constant_values=False)
    spaced = np.pad(spaced, pads)
    extent = [(w - 1) * d + 1 for w, d in zip(window, dilation)]
    out_shape = [(n - e) // s + 1 for n, e, s in zip(spaced.shape, extent, strides)]
    out = np.empty(out_shape, x.dtype)
    for index in np.ndindex(*out_shape):
        acc = init
        for offset in np.ndindex(*window):
            at = tuple(i * s + o * d for i, s, o, d in zip(index, strides, offset, dilation))
            if real[at]:
                acc = fn(acc, spaced[at])
        out[index] = acc
    return out


@pytest.mark.parametrize("window, strides, padding, base, dilation", [
    ((2, 1), (1, 1), "VALID", (1, 1), (1, 1)),
    ((1, 2), (2, 1), "SAME", (2, 3), (1, 1)),
    ((2, 2), (1, 2), ((0, 3), (1, 2)), (1, 1), (1, 2)),
    ((2, 2), (1, 1), ((1, 0), (2, 1)), (2, 3), (1, 2)),
])
def test_reduce_window_folds_a_pytree_of_operands_together(window, strides, padding, base,
                                                           dilation):
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((4, 6)).astype(np.float32) for _ in range(2))

    def reducer(xs, ys):
        return {"sum": xs["sum"] + ys["sum"], "max": lax.max(xs["max"], ys["max"])}

    def pool(a, b):
        return lax.reduce_window({"sum": a, "max": b}, {"sum": 0.0, "max": -np.inf}, reducer,
                                 window, strides, padding, base, dilation)

    extent = [(w - 1) * d + 1 for w, d in zip(window, dilation)]
    pads = (lax.padtype_to_pads(a.shape, extent, strides, padding) if isinstance(padding, str)
            else padding)
    want_sum = _window_fold(a, np.float32(0), np.add, window, strides, pads, base, dilation)
    want_max = _window_fold(b, np.float32(-np.inf), np.maximum, window, strides, pads, base,
                            dilation)
    for fn in (pool, shardc.jit(pool)):
        got = fn(a, b)
        np.testing.assert_allclose(got["sum"], want_sum, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(got["max"], want_max)
    # batched: each slice on its own
    got = shardc.vmap(pool)(np.stack([a, 2 * a]), np.stack([b, b]))
    np.testing.assert_allclose(got["sum"][1], 2 * want_sum, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got["max"][0], want_max)


def test_reduce_window_of_a_pytree_folds_in_order_and_differentiates():
    # an arg-max by a pair fold: (value, index) of the first largest element of each window
    x = np.array([3.0, 1.0, 4.0, 4.0, 5.0, 2.0], np.float32)
    idx = np.arange(6, dtype=np.int32)

    def argmax_pair(acc, new):
        take = new[0] > acc[0]
        return (jnp.where(take, new[0], acc[0]), jnp.where(take, new[1], acc[1]))

    value, where = lax.reduce_window((x, idx), (-np.inf, np.int32(-1)), argmax_pair, (3,), (1,),
                                     "VALID")
    np.testing.assert_array_equal(value, [4, 4, 5, 5])
    np.testing.assert_array_equal(where, [2, 2, 4, 4])
    # the JVP folds the tangents along, as JAX's reduce_window JVP does
    a = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    b = a[::-1].copy()

    def red(u, v):
        return (u[0] + v[0], lax.max(u[1], v[1]))

    f = lambda a, b: lax.reduce_window((a, b), (0.0, -np.inf), red, (2, 2), (1, 1), "VALID")
    _, (t_sum, t_max) = shardc.jvp(f, (a, b), (np.ones_like(a), 2 * np.ones_like(b)))
    np.testing.assert_array_equal(t_sum, np.full((2, 3), 4.0))
    np.testing.assert_array_equal(t_max, np.full((2, 3), 2.0))


def test_reduce_window_of_a_pytree_checks_as_jax():
    a = np.ones((3, 4), np.float32)
    red = lambda u, v: (u[0] + v[0], u[1] + v[1])
    with pytest.raises(ValueError, match=r"^Operands must have the same tree structure as "
                                         r"init_values: PyTreeDef\(\(\*, \*\)\) vs. "
                                         r"PyTreeDef\(\[\*, \*\]\)$"):
        lax.reduce_window((a, a), [0.0, 0.0], red, (2, 2))
    with pytest.raises(ValueError, match="^reduce_window must have at least one operand.$"):
        lax.reduce_window((), (), red, (2, 2))
    with pytest.raises(ValueError, match=r"^reduce_window output must have the same tree "
                                         r"structure as the operands PyTreeDef\(\(\*, \*\)\) "
                                         r"vs. PyTreeDef\(\(\*,\)\)$"):
        lax.reduce_window((a, a), (0.0, 0.0), lambda u, v: (u[0] + v[0],), (2, 2))
    with pytest.raises(TypeError, match=r"^reduce_window got inconsistent dtypes for operands "
                                        r"and init_values: got operand dtypes "
                                        r"\[dtype\('float32'\), dtype\('int32'\)\] and "
                                        r"init_value dtypes \[dtype\('float32'\), "
                                        r"dtype\('float32'\)\].$"):
        lax.reduce_window((a, a.astype(np.int32)), (0.0, 0.0), red, (2, 2))
    with pytest.raises(TypeError, match=r"^reduce_window got inconsistent window_strides and "
                                        r"window_dimensions: got window_strides \(1,\) and "
                                        r"window_dimensions \(2, 2\).$"):
        lax.reduce_window((a, a), (0.0, 0.0), red, (2, 2), (1,))
    with pytest.raises(TypeError, match=r"^reduce_window got the wrong number of "
                                        r"window_dimensions for operand: got operand shape "
                                        r"\(3, 4\) with window_dimensions \(2,\).$"):
        lax.reduce_window((a, a), (0.0, 0.0), red, (2,), (1,))
    # lax's add from its identity reduces any operand, as JAX's windowed sum; a general
    # computation wants the operand's dtype
    np.testing.assert_array_equal(lax.reduce_window(a, 0, lax.add, (2, 2)), np.full((2, 3), 4))
    with pytest.raises(TypeError, match="inconsistent dtypes"):
        lax.reduce_window(a, 0, lambda u, v: u * v, (2, 2))


# --- ragged_dot_general's three modes, against products of numpy group slices ------------------

RDN = lax.RaggedDotDimensionNumbers


def _groups(sizes):
    """(group, start, end) of each group laid end to end."""
    ends = np.cumsum(sizes)
    return [(g, int(e - s), int(e)) for g, (s, e) in enumerate(zip(sizes, ends))]


def _check_ragged(lhs, rhs, sizes, dn, want):
    f = lambda a, b: lax.ragged_dot_general(a, b, jnp.asarray(sizes), dn)
    np.testing.assert_allclose(f(lhs, rhs), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(shardc.jit(f)(lhs, rhs), want, rtol=1e-5, atol=1e-5)
    # bilinear: its JVP is the product of each tangent with the other operand
    dl, dr = np.ones_like(lhs), np.full_like(rhs, 0.5)
    _, tangent = shardc.jvp(f, (lhs, rhs), (dl, dr))
    np.testing.assert_allclose(tangent, np.asarray(f(dl, rhs)) + np.asarray(f(lhs, dr)),
                               rtol=1e-5, atol=1e-5)
    # vmap over a new leading axis of lhs: each slice on its own
    batched = shardc.vmap(f, in_axes=(0, None))(np.stack([lhs, 2 * lhs]), rhs)
    np.testing.assert_allclose(batched[1], 2 * want, rtol=1e-5, atol=1e-5)


def test_ragged_non_contracting_dimension_takes_each_group_by_its_rhs_slice():
    rng = np.random.default_rng(1)
    # batch 0, ragged rows 1; rhs [g, b, k, n]; group sizes per batch element (the last
    # rows of batch 0 in no group: zeros)
    lhs = rng.standard_normal((2, 11, 5)).astype(np.float32)
    rhs = rng.standard_normal((3, 2, 5, 7)).astype(np.float32)
    sizes = np.array([[3, 2, 4], [1, 9, 1]], np.int32)
    want = np.zeros((2, 11, 7), np.float32)
    for b in range(2):
        for g, s, e in _groups(sizes[b]):
            want[b, s:e] = lhs[b, s:e] @ rhs[g, b]
    _check_ragged(lhs, rhs, sizes, RDN((([2], [2]), ([0], [1])), [1], [0]), want)
    # a free dimension outer to the ragged one has its own groups; rhs's group dimension
    # sits between its contracting and free ones
    lhs = rng.standard_normal((4, 11, 5)).astype(np.float32)
    rhs = rng.standard_normal((5, 3, 7)).astype(np.float32)
    sizes = np.array([[3, 2, 6], [1, 9, 0], [0, 0, 11], [5, 5, 1]], np.int32)
    want = np.zeros((4, 11, 7), np.float32)
    for x in range(4):
        for g, s, e in _groups(sizes[x]):
            want[x, s:e] = lhs[x, s:e] @ rhs[:, g]
    _check_ragged(lhs, rhs, sizes, RDN((([2], [0]), ([], [])), [1], [1]), want)
    # ragged_dot is the basic form
    lhs = rng.standard_normal((11, 5)).astype(np.float32)
    rhs = rng.standard_normal((3, 5, 7)).astype(np.float32)
    sizes = np.array([3, 0, 6], np.int32)
    want = np.zeros((11, 7), np.float32)
    for g, s, e in _groups(sizes):
        want[s:e] = lhs[s:e] @ rhs[g]
    np.testing.assert_allclose(lax.ragged_dot(lhs, rhs, sizes), want, rtol=1e-5, atol=1e-5)
    _check_ragged(lhs, rhs, sizes, RDN((([1], [1]), ([], [])), [0], [0]), want)


def test_ragged_contracting_dimension_gives_one_product_per_group():
    rng = np.random.default_rng(2)
    lhs = rng.standard_normal((11, 5)).astype(np.float32)
    rhs = rng.standard_normal((5, 7)).astype(np.float32)
    sizes = np.array([2, 0, 2], np.int32)          # the last column in no group
    want = np.zeros((3, 11, 7), np.float32)
    for g, s, e in _groups(sizes):
        want[g] = lhs[:, s:e] @ rhs[s:e]
    _check_ragged(lhs, rhs, sizes, RDN((([1], [0]), ([], [])), [1], []), want)
    # with a batch dimension and two contracting ones, the ragged one the inner: its groups
    # run separately at each batch element and each index of the outer contracting one
    lhs = rng.standard_normal((2, 11, 3, 5)).astype(np.float32)
    rhs = rng.standard_normal((2, 5, 3, 7)).astype(np.float32)
    sizes = np.array([[[1, 1], [2, 0], [0, 3]], [[1, 2], [4, 0], [3, 1]]], np.int32)
    want = np.zeros((2, 2, 11, 7), np.float32)
    for b in range(2):
        for c in range(3):
            for g, s, e in _groups(sizes[b, c]):
                want[g, b] += lhs[b, :, c, s:e] @ rhs[b, s:e, c]
    _check_ragged(lhs, rhs, sizes, RDN((([2, 3], [2, 1]), ([0], [0])), [3], []), want)


def test_ragged_batch_dimension_is_dot_general():
    rng = np.random.default_rng(3)
    lhs = rng.standard_normal((2, 11, 5)).astype(np.float32)
    rhs = rng.standard_normal((2, 5, 7)).astype(np.float32)
    want = np.einsum("bmk,bkn->bmn", lhs, rhs)
    _check_ragged(lhs, rhs, np.array([1, 1], np.int32), RDN((([2], [1]), ([0], [0])), [0], []),
                  want)


@pytest.mark.parametrize("lhs_shape, rhs_shape, sizes_shape, dn, message", [
    ((11, 5), (3, 5, 7), (3,), RDN((([1], [1]), ([], [])), [0, 1], [0]),
     "^ragged_dot_general expects exactly one lhs ragged dimension.$"),
    ((11, 5), (3, 5, 7), (3,), RDN((([1], [1]), ([], [])), [2], [0]),
     "^ragged_dot_general requires lhs ragged dimension numbers to be nonnegative and less "
     "than the number of axes of the lhs value, got 2 for lhs of rank 2.$"),
    ((11, 5), (3, 5, 7), (2, 3), RDN((([1], [1]), ([], [])), [0], [0]),
     r"^expected group_sizes to have shape \(3,\), got \(2, 3\).$"),
    ((19, 17, 11, 5), (3, 19, 5, 7), (19, 11, 3), RDN((([3], [2]), ([0], [1])), [2], [0]),
     r"^expected group_sizes to have shape \(19, 17, 3\), got \(19, 11, 3\).$"),
    ((19, 11, 5), (19, 5, 7), (19, 3), RDN((([2], [1]), ([0], [0])), [1], [0]),
     "^ragged_dot_general requires rhs group dimension numbers to be distinct from "
     "contracting and batch dimensions.$"),
    ((11, 5), (3, 5, 7), (2,), RDN((([1], [1]), ([], [])), [0], [0]),
     "^expected rhs group dimension size to be 2, got 3.$"),
    ((11, 5), (3, 5, 7), (3,), RDN((([1], [1]), ([], [])), [1], [0]),
     "^ragged_dot_general requires zero group dimensions in the rhs when lhs ragged dimension "
     "is contracting or batch.$"),
    ((11, 5), (5, 7), (3,), RDN((([1], [0]), ([], [])), [0], []),
     "^ragged_dot_general requires exactly one rhs group dimension when lhs ragged dimension "
     "is noncontracting.$"),
    ((11, 5), (3, 5, 7), (), RDN((([1], [1]), ([], [])), [0], [0]),
     "^expected rank of group_sizes to be >=1.$"),
])
def test_ragged_dot_general_checks_as_jax(lhs_shape, rhs_shape, sizes_shape, dn, message):
    with pytest.raises(TypeError, match=message):
        lax.ragged_dot_general(jnp.ones(lhs_shape), jnp.ones(rhs_shape),
                               jnp.ones(sizes_shape, jnp.int32), dn)


def test_ragged_dot_general_refusals():
    dn = RDN((([1], [1]), ([], [])), [0], [0])
    with pytest.raises(TypeError, match="^ragged_dot_general requires that group_sizes.dtype "
                                        "is subtype of np.integer.$"):
        lax.ragged_dot_general(jnp.ones((4, 5)), jnp.ones((2, 5, 3)), jnp.ones(2), dn)
    with pytest.raises(NotImplementedError, match="^Unimplemented group_offset support.$"):
        lax.ragged_dot_general(jnp.ones((4, 5)), jnp.ones((2, 5, 3)), jnp.ones(2, jnp.int32),
                               dn, group_offset=jnp.zeros(1, jnp.int32))


# --- the locally connected (unshared) convolution -------------------------------------------

def _local_conv_reference(x, w, window, strides, pads, dilation):
    """x [N, C, *S], w [O, C * prod(window), *out]: each output place's own kernel, the input
    channel outer and the window row-major inside ``I``."""
    x = np.pad(x, [(0, 0), (0, 0)] + list(pads))
    n, c = x.shape[:2]
    out_shape = w.shape[2:]
    out = np.zeros((n, w.shape[0]) + out_shape, np.float64)
    for place in np.ndindex(*out_shape):
        taps = []
        for ch in range(c):
            for offset in np.ndindex(*window):
                at = tuple(i * s + o * d for i, s, o, d in zip(place, strides, offset, dilation))
                taps.append(x[(slice(None), ch) + at])
        patch = np.stack(taps, axis=1)                     # [N, I]
        out[(slice(None), slice(None)) + place] = patch @ w[(slice(None), slice(None)) + place].T
    return out


def test_conv_general_dilated_local_uses_each_places_own_kernel():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)       # NCHW
    window, strides, pads, dilation = (3, 2), (2, 1), ((2, 1), (1, 0)), (2, 1)
    out_shape = [(n + lo + hi - (k - 1) * d - 1) // s + 1
                 for n, (lo, hi), k, d, s in zip(x.shape[2:], pads, window, dilation, strides)]
    w = rng.standard_normal([4, 3 * 6] + out_shape).astype(np.float32)     # OIHW
    want = _local_conv_reference(x, w, window, strides, pads, dilation)
    local = partial(lax.conv_general_dilated_local, window_strides=strides, padding=pads,
                    filter_shape=window, rhs_dilation=dilation,
                    dimension_numbers=("NCHW", "OIHW", "NCHW"))
    np.testing.assert_allclose(local(x, w), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(shardc.jit(local)(x, w), want, rtol=1e-5, atol=1e-5)
    # other layouts: the window and the places in the order rhs_spec names its spatial
    # dimensions (here W before H)
    xt = np.transpose(x, (0, 3, 2, 1))                          # N W H C -> read as 'NHWC'
    wt = np.transpose(w, (2, 3, 1, 0))                          # H W I O -> read as 'WHIO'
    got = lax.conv_general_dilated_local(xt, wt, strides, pads, window, rhs_dilation=dilation,
                                         dimension_numbers=("NHWC", "WHIO", "NHWC"))
    np.testing.assert_allclose(got, np.transpose(want, (0, 3, 2, 1)), rtol=1e-5, atol=1e-5)
    # 'SAME' padding and a gradient in the kernel: the patches it met
    w_same = rng.standard_normal((4, 3 * 6, 5, 6)).astype(np.float32)
    same = lambda w: lax.conv_general_dilated_local(x, w, (1, 1), "SAME", (3, 2)).sum()
    pads_same = lax.padtype_to_pads(x.shape[2:], (3, 2), (1, 1), "SAME")
    grad = shardc.grad(same)(w_same)
    patches = lax.conv_general_dilated_patches(x, (3, 2), (1, 1), "SAME")   # [N, I, H, W]
    np.testing.assert_allclose(grad, np.broadcast_to(np.asarray(patches).sum(0)[None],
                                                     w_same.shape), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        lax.conv_general_dilated_local(x, w_same, (1, 1), "SAME", (3, 2)),
        _local_conv_reference(x, w_same, (3, 2), (1, 1), pads_same, (1, 1)), rtol=1e-5,
        atol=1e-5)
    with pytest.raises(ValueError, match="^Unsupported precision for conv_general_dilated_local"):
        lax.conv_general_dilated_local(x, w, strides, pads, window, rhs_dilation=dilation,
                                       precision=lax.DotAlgorithmPreset.DEFAULT)


# --- rng_bit_generator: shapes, dtypes, the key's update and determinism (the bits are
# shardc's own, not XLA's) ------------------------------------------------------------------

def _counter(key):
    key = np.asarray(key)
    return int(key[2]) | int(key[3]) << 32


@pytest.mark.parametrize("algorithm, block", [(lax.RandomAlgorithm.RNG_DEFAULT, 4),
                                              (lax.RandomAlgorithm.RNG_PHILOX, 4),
                                              (lax.RandomAlgorithm.RNG_THREE_FRY, 2)])
def test_rng_bit_generator_advances_the_counter_by_the_blocks_it_used(algorithm, block):
    key = np.array([3, 1, 4, 2], np.uint32)
    # XLA's counts (JAX 0.10.2 on CPU): Philox one per 4 uint32 words, ThreeFry one per 2
    for shape in [(0,), (1,), (4,), (5,), (9,), (2, 7), (2, 3, 5), (6, 0)]:
        for dtype in (np.uint8, np.uint16, np.uint32):
            new_key, bits = lax.rng_bit_generator(key, shape, dtype, algorithm)
            assert bits.shape == shape and bits.dtype == dtype
            assert new_key.dtype == np.uint32 and new_key.shape == (4,)
            np.testing.assert_array_equal(np.asarray(new_key)[:2], key[:2])
            assert _counter(new_key) - _counter(key) == -(-math.prod(shape) // block)
    # the 64-bit counter carries and wraps as XLA's
    new_key, _ = lax.rng_bit_generator(np.array([0, 0, 0xFFFFFFFF, 0], np.uint32), (5,),
                                       algorithm=algorithm)
    assert _counter(new_key) == 0xFFFFFFFF + -(-5 // block)
    new_key, _ = lax.rng_bit_generator(np.array([0, 0, 0xFFFFFFFF, 0xFFFFFFFF], np.uint32),
                                       (5,), algorithm=algorithm)
    assert _counter(new_key) == -(-5 // block) - 1


def test_rng_bit_generator_is_deterministic_and_chains():
    key = np.array([1, 2, 3, 4], np.uint32)
    f = lambda k: lax.rng_bit_generator(k, shape=(5, 7))
    k1, b1 = f(key)
    k2, b2 = shardc.jit(f)(key)
    np.testing.assert_array_equal(k1, k2)
    np.testing.assert_array_equal(b1, b2)
    assert b1.dtype == np.uint32 and b1.shape == (5, 7)
    # the next key draws other bits, and so does another key
    _, b3 = f(k1)
    _, b4 = f(np.array([1, 2, 3, 5], np.uint32))
    _, b5 = f(np.array([9, 2, 3, 4], np.uint32))
    for other in (b3, b4, b5):
        assert not np.any(np.asarray(other) == np.asarray(b1))
    # uniform-looking bits: each of the 32 bits set about half the time
    _, many = lax.rng_bit_generator(key, (4096,))
    ones = (np.asarray(many)[:, None] >> np.arange(32, dtype=np.uint32)) & 1
    assert np.all(np.abs(ones.mean(0) - 0.5) < 0.05)
    # an empty draw hands the key back
    same, empty = lax.rng_bit_generator(key, (0,))
    np.testing.assert_array_equal(same, key)
    assert empty.shape == (0,)


def test_rng_bit_generator_batches_as_jax():
    # JAX's batching rule: the first key draws the whole batch's bits, and alone advances
    f = lambda k: lax.rng_bit_generator(k, shape=(5, 7))
    keys = np.arange(3 * 4).reshape(3, 4).astype(np.uint32)
    out_keys, bits = shardc.vmap(f)(keys)
    assert out_keys.shape == (3, 4) and bits.shape == (3, 5, 7)
    first_key, first_bits = lax.rng_bit_generator(keys[0], (3, 5, 7))
    np.testing.assert_array_equal(bits, first_bits)
    np.testing.assert_array_equal(out_keys[0], first_key)
    np.testing.assert_array_equal(out_keys[1:], keys[1:])
    keys = np.arange(2 * 3 * 4).reshape(2, 3, 4).astype(np.uint32)
    out_keys, bits = shardc.vmap(shardc.vmap(f))(keys)
    assert out_keys.shape == (2, 3, 4) and bits.shape == (2, 3, 5, 7)


def test_rng_bit_generator_wide_dtypes_and_keys():
    with shardc.enable_x64():
        key = np.array([7, 9], np.uint64)
        new_key, bits = lax.rng_bit_generator(key, (5,), np.uint64,
                                              lax.RandomAlgorithm.RNG_PHILOX)
        assert bits.dtype == np.uint64 and new_key.dtype == np.uint64
        # two uint32 words an element: 10 words, 3 Philox blocks
        np.testing.assert_array_equal(new_key, [7, 12])
        # a uint64[2] key is the uint32[4] key of its little-endian words
        narrow = np.array([7, 0, 9, 0], np.uint32)
        _, narrow_bits = lax.rng_bit_generator(narrow, (5,), np.uint64,
                                               lax.RandomAlgorithm.RNG_PHILOX)
        np.testing.assert_array_equal(bits, narrow_bits)
    # without x64 a uint64 request is uint32 bits
    with pytest.warns(UserWarning, match="Explicitly requested dtype uint64"):
        _, bits = lax.rng_bit_generator(np.zeros(4, np.uint32), (3,), np.uint64)
    assert bits.dtype == np.uint32


def test_rng_bit_generator_checks():
    key = np.zeros(4, np.uint32)
    for dtype in (np.int32, np.float32, "uint4"):
        with pytest.raises(TypeError, match=f"^rng_bit_generator: unsupported dtype "
                                            f"{np.dtype(dtype).name}$"):
            lax.rng_bit_generator(key, (3,), dtype)
    for algorithm in (7, "RNG_PHILOX"):
        with pytest.raises(ValueError, match="algorithm must be a lax.RandomAlgorithm"):
            lax.rng_bit_generator(key, (3,), algorithm=algorithm)
    assert lax.rng_bit_generator(key, (3,), algorithm=2)[1].shape == (3,)     # an IntEnum
    for bad in (np.zeros(3, np.uint32), np.zeros(4, np.int32), np.zeros((2, 4), np.uint32)):
        with pytest.raises(TypeError, match="the key must be uint32"):
            lax.rng_bit_generator(bad, (3,))
    assert lax.rng_bit_generator(key, 3)[1].shape == (3,)
    assert str(lax.RandomAlgorithm.RNG_THREE_FRY) == "RNG_THREE_FRY"


# --- cumulative sums and products round as XLA's CPU backend does -----------------------------

def _xla_window_scan(values, op, identity, reverse):
    """A plain model of XLA's blocked reduce-window scan, one element at a time: blocks of 16
    folded in index order, each block offset by the (recursive) exclusive scan of the
    totals of the blocks before it (after it, when ``reverse``)."""
    values = list(values)
    n = len(values)

    def fold(window):
        acc = identity
        for v in window:
            acc = op(acc, v)
        return acc
    if n <= 16:
        return [fold(values[i:] if reverse else values[:i + 1]) for i in range(n)]
    padded = values + [identity] * (-n % 16)
    blocks = [padded[i:i + 16] for i in range(0, len(padded), 16)]
    inner = [[fold(b[j:] if reverse else b[:j + 1]) for j in range(16)] for b in blocks]
    totals = [b[0] if reverse else b[-1] for b in inner]
    if len(totals) <= 16:
        ext = totals + [identity] if reverse else [identity] + totals
        offsets = [fold(ext[i + 1:] if reverse else ext[:i + 1]) for i in range(len(totals))]
    else:
        scanned = _xla_window_scan(totals, op, identity, reverse)
        offsets = scanned[1:] + [identity] if reverse else [identity] + scanned[:-1]
    out = [op(v, offset) for b, offset in zip(inner, offsets) for v in b]
    return out[:n]


@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16, np.float16])
@pytest.mark.parametrize("n", [1, 3, 17, 300])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumulative_sums_and_products_round_as_xla(dtype, n, reverse):
    rng = np.random.default_rng(n)
    x = rng.standard_normal((2, n)).astype(dtype)
    y = (1 + 0.01 * rng.standard_normal((2, n))).astype(dtype)
    for fn, values, op, identity in ((lax.cumsum, x, np.add, 0), (lax.cumprod, y, np.multiply, 1)):
        expected = np.array([_xla_window_scan(list(row), lambda a, b: op(a, b).astype(dtype),
                                              dtype(identity), reverse) for row in values], dtype)
        for run in (fn, shardc.jit(fn, static_argnames=("axis", "reverse"))):
            got = np.asarray(run(jnp.asarray(values), axis=1, reverse=reverse))
            np.testing.assert_array_equal(got.view(np.uint8), expected.view(np.uint8))
        moved = np.asarray(fn(jnp.asarray(values.T), axis=0, reverse=reverse))
        np.testing.assert_array_equal(np.ascontiguousarray(moved.T).view(np.uint8),
                                      expected.view(np.uint8))


def test_long_low_precision_cumulative_sums_stay_close():
    # blocks keep each rounding step small: 1000 bfloat16 ones sum to 1000 (not 256)
    assert float(jnp.cumsum(jnp.ones(1000, jnp.bfloat16))[-1]) == 1000
    assert float(lax.cumsum(jnp.ones(3000, jnp.float16), reverse=True)[0]) == 3000


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16])
def test_lax_sums_and_products_keep_narrow_integer_dtypes(dtype):
    x = np.array([100, 100, 3], dtype)
    for fn, expected in ((lax.reduce_sum, x.sum(dtype=dtype)), (lax.reduce_prod, x.prod(dtype=dtype))):
        for run in (fn, shardc.jit(fn, static_argnums=1)):
            got = run(jnp.asarray(x), (0,))
            assert got.dtype == dtype and int(got) == int(expected)


@pytest.mark.parametrize("fn", [lambda x: lax.reduce_sum(x, (0,)), lambda x: lax.reduce_prod(x, (0,)),
                                lambda x: lax.cumsum(x), lambda x: lax.cummax(x),
                                lambda x: lax.cumprod(x), lambda x: lax.cummin(x)])
def test_lax_sums_and_scans_refuse_booleans(fn):
    with pytest.raises(TypeError, match="does not accept dtype bool. Accepted dtypes are "
                                        "subtypes of number"):
        fn(jnp.array([True, False]))


# --- numpy operands take the dtype JAX gives them ---------------------------------------------

_F32 = np.arange(12.0, dtype=np.float32).reshape(3, 4)
_F64 = np.linspace(-1.0, 1.0, 12).reshape(3, 4)          # float64: float32 with x64 off
_NUMPY_OPERAND_CASES = {
    "conv_general_dilated": (
        lambda x: lax.conv_general_dilated(x[None], np.ones((2, 4, 5)), (1,), "SAME",
                                           dimension_numbers=("NWC", "WIO", "NWC")),
        lambda x: np.stack([x[:2].sum(), x[1:].sum(), x[2:].sum()])[None, :, None]   # SAME pads
        * np.ones(5)),                                                            # one high
    "conv": (lambda x: lax.conv(x[None, None], np.ones((1, 1, 2, 2)), (1, 1), "VALID"),
             lambda x: (x[:-1, :-1] + x[1:, :-1] + x[:-1, 1:] + x[1:, 1:])[None, None]),
    "pad": (lambda x: lax.pad(_F64, np.float32(7), [(1, 0, 0), (0, 0, 0)]),
            lambda x: np.concatenate([np.full((1, 4), 7.0), _F64])),
    "select_n": (lambda x: lax.select_n(_F64 > 0, x, _F64),
                 lambda x: np.where(_F64 > 0, _F64, x)),
    "top_k": (lambda x: lax.top_k(_F64, 2)[0], lambda x: -np.sort(-_F64, axis=-1)[:, :2]),
    "shift_left": (lambda x: lax.shift_left(x.astype(np.int32), np.full((3, 4), 2, np.int64)),
                   lambda x: x * 4),
}


@pytest.mark.parametrize("name", sorted(_NUMPY_OPERAND_CASES))
@pytest.mark.parametrize("jit", [False, True])
def test_lax_takes_64_bit_numpy_operands_as_their_32_bit_dtypes(name, jit):
    # JAX canonicalizes every operand's dtype, so with x64 off a numpy float64 (int64) array
    # meets a float32 (int32) one as float32 (int32) rather than as a different dtype
    fn, reference = _NUMPY_OPERAND_CASES[name]
    got = (shardc.jit(fn) if jit else fn)(jnp.asarray(_F32))
    expected = reference(_F32.astype(np.float64))
    assert got.dtype == (np.int32 if name == "shift_left" else np.float32)
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-6)
