"""Structured control flow (SEMANTICS 3.4, 5.2, 6 V9-V10, T17, T19): ``scan``, ``fori_loop``,
``while_loop``, ``cond``, ``switch`` and the dynamic slices, eager and under ``jit``.

Values are held against plain Python/numpy loops written here. Inside shard_map bodies the
reference loops over the per-device blocks: each device runs the body's arithmetic on its own
block, and a collective inside a loop or a branch is applied across the blocks of every
device at the same step. Errors are checked word for word against the templates of 3.4.
"""
from __future__ import annotations

import functools
import os
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardc
import shardc.numpy as jnp
from shardc import lax
from shardc.sharding import PartitionSpec as P

SETTINGS = dict(derandomize=True, deadline=None, max_examples=25,
                suppress_health_check=[HealthCheck.too_slow])


def eager(f):
    return f


WRAPS = [pytest.param(eager, id="eager"), pytest.param(shardc.jit, id="jit")]

FILE = os.path.basename(__file__)


def line_of(marker: str) -> int:
    """The line of this file holding ``marker`` (a comment at the end of a call)."""
    with open(__file__) as source:
        hits = [k for k, text in enumerate(source, start=1) if text.rstrip().endswith(marker)]
    assert len(hits) == 1, marker
    return hits[0]


def first_line(fn) -> str:
    return f"{fn.__name__} at {fn.__code__.co_filename}:{fn.__code__.co_firstlineno}"


def mesh_of(shape, names):
    return shardc.make_mesh(shape, names)


def blocks_of(x, n):
    """Per-device blocks of ``x`` split along dimension 0 (a 1-D mesh, in_spec P('i'))."""
    return np.split(np.asarray(x), n)


# ================================================================================================
# 1. Outside shard_map: against plain Python loops
# ================================================================================================

def py_scan(f, init, xs, length, reverse=False):
    """lax.scan's definition over numpy leaves (xs a dict of arrays or None)."""
    carry, ys = init, []
    steps = range(length - 1, -1, -1) if reverse else range(length)
    for k in steps:
        x = None if xs is None else {key: v[k] for key, v in xs.items()}
        carry, y = f(carry, x)
        ys.append(y)
    if reverse:
        ys.reverse()
    return carry, ys


def scan_body(carry, x):
    total, count = carry
    new = (total + x["u"] * 2.0, count + 1)
    return new, {"seen": total, "v3": x["v"] * 3}


@pytest.mark.parametrize("wrap", WRAPS)
@pytest.mark.parametrize("reverse", [False, True])
def test_scan_pytree_carry_and_xs(wrap, reverse):
    xs = {"u": np.arange(5, dtype=np.float32) + 1, "v": np.arange(10, dtype=np.int32).reshape(5, 2)}
    init = (np.float32(0.5), np.int32(0))
    (total, count), ys = wrap(lambda c, xs: lax.scan(scan_body, c, xs, reverse=reverse))(init, xs)

    (want_total, want_count), want_ys = py_scan(scan_body, init, xs, 5, reverse)
    assert float(total) == pytest.approx(float(want_total))
    assert int(count) == 5 == want_count
    assert total.dtype == np.float32 and count.dtype == np.int32
    # ys are stacked along a new leading axis, in xs order even when reversed
    np.testing.assert_allclose(np.asarray(ys["seen"]), [y["seen"] for y in want_ys])
    np.testing.assert_array_equal(np.asarray(ys["v3"]), np.stack([y["v3"] for y in want_ys]))
    assert ys["v3"].shape == (5, 2) and ys["v3"].dtype == np.int32


@settings(**SETTINGS)
@given(st.lists(st.floats(-4, 4, width=32), min_size=0, max_size=6), st.booleans())
def test_scan_running_max_matches_loop(values, reverse):
    xs = np.asarray(values, np.float32)

    def step(c, x):
        m = jnp.maximum(c, x)
        return m, m - x

    init = np.float32(-1.0)
    c, ys = shardc.jit(lambda xs: lax.scan(step, init, xs, reverse=reverse))(xs)
    want_c, want_ys = init, []
    for x in (xs[::-1] if reverse else xs):
        want_c = max(want_c, x)
        want_ys.append(want_c - x)
    if reverse:
        want_ys.reverse()
    assert float(c) == float(np.float32(want_c))
    assert ys.shape == (len(values),)
    np.testing.assert_array_equal(np.asarray(ys), np.asarray(want_ys, np.float32))


@pytest.mark.parametrize("wrap", WRAPS)
def test_scan_length_without_xs(wrap):
    c, ys = wrap(lambda c0: lax.scan(lambda c, _: (c * 2, (c, c + 1)), c0, None, length=4))(
        np.int32(3))
    assert int(c) == 48
    np.testing.assert_array_equal(np.asarray(ys[0]), [3, 6, 12, 24])
    np.testing.assert_array_equal(np.asarray(ys[1]), [4, 7, 13, 25])


@pytest.mark.parametrize("wrap", WRAPS)
def test_scan_gives_its_results_in_the_pair_the_body_returns(wrap):
    """Any pytree node of two children is the body's pair (JAX's): the scan's result is that
    node, holding the final carry and the stacked outputs."""
    import collections
    Pair = collections.namedtuple("Pair", "c ys")
    xs = np.arange(3, dtype=np.float32)
    bodies = {list: lambda c, x: [c + x, c], dict: lambda c, x: {"carry": c + x, "ys": c},
              Pair: lambda c, x: Pair(c + x, c), tuple: lambda c, x: (c + x, c)}
    for kind, body in bodies.items():
        out = wrap(lambda xs: lax.scan(body, np.float32(0), xs))(xs)
        assert type(out) is kind, kind
        carry, ys = out.values() if kind is dict else out
        assert float(carry) == 3.0
        np.testing.assert_array_equal(np.asarray(ys), [0.0, 0.0, 1.0])


@pytest.mark.parametrize("wrap", WRAPS)
def test_scan_zero_length(wrap):
    xs = np.zeros((0, 3), np.float32)
    c, ys = wrap(lambda xs: lax.scan(lambda c, x: (c + x.sum(), (x * c, c)), np.float32(7), xs))(xs)
    assert float(c) == 7.0
    assert ys[0].shape == (0, 3) and ys[0].dtype == np.float32
    assert ys[1].shape == (0,) and ys[1].dtype == np.float32


def test_scan_length_disagreeing_with_xs_is_an_error():
    with pytest.raises(ValueError, match="disagrees with leading axis sizes"):
        lax.scan(lambda c, x: (c, x), 0.0, np.zeros(3, np.float32), length=4)


@pytest.mark.parametrize("wrap", WRAPS)
@pytest.mark.parametrize("lower,upper", [(0, 5), (2, 7), (4, 4), (5, 2)])
def test_fori_loop_static_bounds(wrap, lower, upper):
    body = lambda i, v: (v[0] * 2 + i, v[1] + i.astype(jnp.float32))
    got = wrap(lambda v: lax.fori_loop(lower, upper, body, v))((np.int32(1), np.float32(0.5)))
    want = (1, 0.5)
    for i in range(lower, upper):
        want = (want[0] * 2 + i, want[1] + i)
    assert int(got[0]) == want[0] and float(got[1]) == want[1]


def test_fori_loop_bounds_of_different_types_are_jax_type_errors():
    body = lambda i, c: c + 1
    # a Python int takes the other bound's signed integer dtype; anything else must agree
    assert int(lax.fori_loop(0, np.int16(3), body, 0)) == 3
    assert int(lax.fori_loop(0., 3., body, 0)) == 3
    for lower, upper, names in ((0, 3.9, "int32 and float32"),
                                (0, np.uint32(3), "int32 and uint32"),
                                (np.int16(0), np.int32(2), "int16 and int32")):
        with pytest.raises(TypeError, match=f"must have equal types, got {names}"):
            lax.fori_loop(lower, upper, body, 0)


def test_fori_loop_bounds_known_now_give_a_scan():
    # JAX's test is int() of a concrete value: float bounds truncate, and a gradient's input
    # outside jit is known, so its loop is a scan and differentiates in reverse mode
    body = lambda i, c: c * 1.5 + i
    assert float(lax.fori_loop(np.float32(0.), np.float32(2.5), lambda i, c: c + i, 0.)) == 1.
    f = lambda x: lax.fori_loop(x, x + 2., body, x)
    # from 1: c = 1 -> 1.5 + 1 -> 1.5 * 2.5 + 2; d/dx = 1.5 * 1.5 (the counter starts at
    # int(x), which does not differentiate)
    assert float(shardc.grad(f)(1.)) == pytest.approx(2.25)
    _, linear = shardc.linearize(f, 1.)
    assert float(linear(1.)) == pytest.approx(2.25)
    assert "scan[" in str(shardc.make_jaxpr(
        lambda v: lax.fori_loop(0., 3., lambda i, acc: acc * 3 + i, v))(1.))


@pytest.mark.parametrize("lower,upper", [(0, 5), (3, 9), (6, 2)])
def test_fori_loop_traced_bounds_under_jit(lower, upper):
    f = shardc.jit(lambda lo, hi, v: lax.fori_loop(lo, hi, lambda i, acc: acc * 3 + i, v))
    got = f(np.int32(lower), np.int32(upper), np.int32(1))
    want = 1
    for i in range(lower, upper):
        want = want * 3 + i
    assert int(got) == want
    # traced bounds give a while loop in the program, static ones a scan
    text = str(shardc.make_jaxpr(f)(np.int32(lower), np.int32(upper), np.int32(1)))
    assert "while[" in text and "scan[" not in text
    assert "scan[" in str(shardc.make_jaxpr(
        lambda v: lax.fori_loop(lower, upper, lambda i, acc: acc * 3 + i, v))(np.int32(1)))


@pytest.mark.parametrize("wrap", WRAPS)
def test_while_loop_collatz(wrap):
    def cond_fun(c):
        n, steps = c
        return n != 1

    def body_fun(c):
        n, steps = c
        return jnp.where(n % 2 == 0, n // 2, 3 * n + 1), steps + 1

    for start in (1, 6, 27):
        n, steps = wrap(lambda n0: lax.while_loop(cond_fun, body_fun, (n0, np.int32(0))))(
            np.int32(start))
        want, count = start, 0
        while want != 1:
            want, count = (want // 2 if want % 2 == 0 else 3 * want + 1), count + 1
        assert (int(n), int(steps)) == (1, count)


@pytest.mark.parametrize("wrap", WRAPS)
@pytest.mark.parametrize("pred", [True, False])
def test_cond_traced_predicate_with_pytree_operands(wrap, pred):
    ops = ({"a": np.arange(3, dtype=np.float32)}, np.int32(4))

    def true_fun(d, k):
        return {"out": d["a"] * k, "k": k + 1}

    def false_fun(d, k):
        return {"out": d["a"] - k, "k": k - 1}

    got = wrap(lambda p, d, k: lax.cond(p, true_fun, false_fun, d, k))(np.bool_(pred), *ops)
    want = (true_fun if pred else false_fun)(*ops)
    np.testing.assert_array_equal(np.asarray(got["out"]), want["out"])
    assert int(got["k"]) == int(want["k"])


@pytest.mark.parametrize("wrap", WRAPS)
def test_cond_python_bool_predicate(wrap):
    f = wrap(lambda x: (lax.cond(True, lambda v: v + 1, lambda v: v - 1, x),
                        lax.cond(False, lambda v: v + 1, lambda v: v - 1, x)))
    a, b = f(np.float32(10))
    assert (float(a), float(b)) == (11.0, 9.0)


@pytest.mark.parametrize("wrap", WRAPS)
def test_switch_clamps_the_index(wrap):
    branches = [lambda v: v + 100, lambda v: v * 2, lambda v: -v]
    f = wrap(lambda k, v: lax.switch(k, branches, v))
    for k in range(-3, 6):
        want = branches[min(max(k, 0), 2)](np.float32(5))
        assert float(f(np.int32(k), np.float32(5))) == want, k
    # a Python index is clamped too
    assert float(lax.switch(9, branches, np.float32(5))) == -5.0
    # after its conversion to int32, which wraps (JAX's): 2**32 is 0, 2**31 is negative
    for k, want in ((2 ** 32, 105.0), (2 ** 31, 105.0), (np.int64(2 ** 40 + 1), 10.0)):
        assert float(lax.switch(k, branches, np.float32(5))) == want, k


def clamp(start, size, extent):
    # as JAX: a negative start counts from the end (lax.dynamic_slice(arange(10), (-3,), (2,))
    # is [7, 8]), then the window is clamped inside the operand
    start = start + extent if start < 0 else start
    return min(max(start, 0), extent - size)


@settings(**SETTINGS)
@given(st.integers(-6, 9), st.integers(-6, 9), st.integers(1, 4), st.integers(1, 5))
def test_dynamic_slice_clamps_traced_starts(s0, s1, n0, n1):
    x = np.arange(4 * 5, dtype=np.int32).reshape(4, 5)
    got = shardc.jit(lambda a, b, c: lax.dynamic_slice(c, (a, b), (n0, n1)))(
        np.int32(s0), np.int32(s1), x)
    c0, c1 = clamp(s0, n0, 4), clamp(s1, n1, 5)
    np.testing.assert_array_equal(np.asarray(got), x[c0:c0 + n0, c1:c1 + n1])
    # the in_dim forms
    got = shardc.jit(lambda a, c: lax.dynamic_slice_in_dim(c, a, n1, axis=1))(np.int32(s1), x)
    np.testing.assert_array_equal(np.asarray(got), x[:, c1:c1 + n1])
    got = shardc.jit(lambda a, c: lax.dynamic_index_in_dim(c, a, axis=0, keepdims=False))(
        np.int32(s0), x)
    np.testing.assert_array_equal(np.asarray(got), x[clamp(s0, 1, 4)])


@settings(**SETTINGS)
@given(st.integers(-6, 9), st.integers(-6, 9), st.integers(1, 4), st.integers(1, 5))
def test_dynamic_update_slice_clamps_traced_starts(s0, s1, n0, n1):
    x = np.zeros((4, 5), np.float32)
    update = np.arange(n0 * n1, dtype=np.float32).reshape(n0, n1) + 1
    got = shardc.jit(lambda a, b, c, u: lax.dynamic_update_slice(c, u, (a, b)))(
        np.int32(s0), np.int32(s1), x, update)
    want = x.copy()
    c0, c1 = clamp(s0, n0, 4), clamp(s1, n1, 5)
    want[c0:c0 + n0, c1:c1 + n1] = update
    np.testing.assert_array_equal(np.asarray(got), want)
    got = shardc.jit(lambda a, c, u: lax.dynamic_update_slice_in_dim(c, u, a, axis=0))(
        np.int32(s0), x, np.ones((n0, 5), np.float32))
    want = x.copy()
    want[c0:c0 + n0] = 1
    np.testing.assert_array_equal(np.asarray(got), want)
    got = shardc.jit(lambda a, c, u: lax.dynamic_update_index_in_dim(c, u, a, axis=1))(
        np.int32(s1), x, np.full(4, 7, np.float32))
    want = x.copy()
    want[:, clamp(s1, 1, 5)] = 7
    np.testing.assert_array_equal(np.asarray(got), want)


def test_dynamic_slice_eager_python_starts():
    x = np.arange(10, dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(lax.dynamic_slice(x, (8,), (4,))), x[6:10])
    # -2 counts from the end (8), then the window is clamped to fit: x[7:10], as in JAX
    np.testing.assert_array_equal(np.asarray(lax.dynamic_slice(x, (-2,), (3,))), x[7:10])


# ================================================================================================
# 2. Inside shard_map bodies: collectives in sub-programs, against per-device numpy loops
# ================================================================================================

MESH4 = ((4,), ("i",))


@pytest.mark.parametrize("wrap", WRAPS)
def test_scan_with_psum_and_all_gather_in_the_body(wrap):
    mesh = mesh_of(*MESH4)
    x = (np.arange(24, dtype=np.float32).reshape(8, 3) % 7) - 2

    def body(x_block):                            # (2, 3) per device
        def step(c, row):
            s = lax.psum(row, "i")
            return c + s * row, lax.all_gather(row, "i")
        c, ys = lax.scan(step, jnp.zeros_like(x_block[0]), x_block)
        return c, ys

    f = shardc.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=(P("i"), P("i")))
    c, ys = wrap(f)(x)

    blocks = blocks_of(x, 4)
    want_c, want_ys = [], []
    carries = [np.zeros(3, np.float32) for _ in blocks]
    per_device_ys = [[] for _ in blocks]
    for k in range(2):                            # every device at step k meets at the psum
        rows = [b[k] for b in blocks]
        s = sum(rows)
        gathered = np.stack(rows)
        for d in range(4):
            carries[d] = carries[d] + s * rows[d]
            per_device_ys[d].append(gathered)
    want_c = np.concatenate(carries)
    want_ys = np.concatenate([np.stack(y) for y in per_device_ys])
    np.testing.assert_allclose(np.asarray(c), want_c)
    assert ys.shape == (8, 4, 3)
    np.testing.assert_allclose(np.asarray(ys), want_ys)


@settings(**dict(SETTINGS, max_examples=10))
@given(st.integers(1, 3), st.integers(-3, 3), st.integers(0, 3),
       st.lists(st.integers(-5, 5), min_size=4 * 3 * 2, max_size=4 * 3 * 2))
def test_generated_scan_with_psum_and_ppermute(rows, factor, shift, values):
    """Random blocks, length, factor and ring shift, eager and jit against the block loop."""
    mesh = mesh_of(*MESH4)
    x = np.asarray(values[:4 * rows * 2], np.int32).reshape(4 * rows, 2)
    perm = [(k, (k + shift) % 4) for k in range(4)]

    def body(x_block):
        def step(c, row):
            c = c * factor + lax.psum(row, "i")
            return c, lax.ppermute(row, "i", perm) - c
        return lax.scan(step, x_block[0], x_block)

    f = shardc.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=(P("i"), P("i")))
    blocks = blocks_of(x, 4)
    carries = [b[0] for b in blocks]
    ys = [[] for _ in blocks]
    for k in range(rows):
        rows_k = [b[k] for b in blocks]
        total = sum(rows_k)
        carries = [c * factor + total for c in carries]
        moved = [rows_k[(d - shift) % 4] for d in range(4)]
        for d in range(4):
            ys[d].append(moved[d] - carries[d])
    for wrap in (eager, shardc.jit):
        c, y = wrap(f)(x)
        np.testing.assert_array_equal(np.asarray(c), np.concatenate(carries))
        np.testing.assert_array_equal(np.asarray(y), np.concatenate([np.stack(v) for v in ys]))


@pytest.mark.parametrize("wrap", WRAPS)
def test_nested_cond_in_scan_and_closures_over_varying_and_invariant_values(wrap):
    mesh = mesh_of(*MESH4)
    x = np.arange(8, dtype=np.float32)

    def body(x_block):
        scale = x_block * 10                      # closed over, varying
        total = lax.psum(x_block, "i")            # closed over, invariant

        def step(c, row):
            def big(v):                           # typed as small's result, as JAX asks
                return lax.pcast(lax.psum(v + scale[0], "i") + total[0], "i", to="varying")

            def small(v):
                return lax.psum(v * 2, "i") - scale[1]

            c = lax.cond(row > 2, big, small, c)  # varying predicate, paired psums
            return c, c.sum()

        c, ys = lax.scan(step, jnp.zeros(2, jnp.float32) + x_block[0], x_block)
        steps = lax.while_loop(lambda k: k < total[0], lambda k: k + scale[0] + 1, x_block[0] * 0)
        return c, ys, steps.reshape(1)

    f = shardc.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=(P("i"), P("i"), P("i")))
    c, ys, steps = wrap(f)(x)

    blocks = blocks_of(x, 4)
    total = sum(blocks)
    scale = [b * 10 for b in blocks]
    carries = [np.zeros(2, np.float32) + b[0] for b in blocks]
    want_ys = [[] for _ in blocks]
    for k in range(2):
        big = [b[k] > 2 for b in blocks]
        paired = sum(carries[d] + scale[d][0] if big[d] else carries[d] * 2 for d in range(4))
        carries = [paired + total[0] if big[d] else paired - scale[d][1] for d in range(4)]
        for d in range(4):
            want_ys[d].append(carries[d].sum())
    want_steps = []
    for d in range(4):
        k = 0.0
        while k < total[0]:
            k += scale[d][0] + 1
        want_steps.append(k)
    np.testing.assert_allclose(np.asarray(c), np.concatenate(carries))
    np.testing.assert_allclose(np.asarray(ys), np.concatenate(want_ys))
    np.testing.assert_allclose(np.asarray(steps), want_steps)


@pytest.mark.parametrize("wrap", WRAPS)
def test_reverse_scan_with_ppermute_over_one_axis_of_a_2d_mesh(wrap):
    mesh = mesh_of((2, 2), ("i", "j"))
    x = np.arange(2 * 2 * 3, dtype=np.int32).reshape(4, 3)

    def body(x_block):                            # (1, 3) per device: x[position]
        def step(c, v):
            c = lax.ppermute(c, "j", [(0, 1), (1, 0)]) + v
            return c, c
        return lax.scan(step, x_block[0], x_block[0] * 10, reverse=True)

    f = shardc.shard_map(body, mesh=mesh, in_specs=P(("i", "j")), out_specs=P(("i", "j")))
    c, ys = wrap(f)(x)
    blocks = list(x)                              # position p holds row p
    carries = list(blocks)
    ys_want = [[None] * 3 for _ in range(4)]
    for k in (2, 1, 0):
        # groups over 'j': positions (0,1) and (2,3) swap
        swapped = [carries[1], carries[0], carries[3], carries[2]]
        carries = [swapped[p] + blocks[p][k] * 10 for p in range(4)]
        for p in range(4):
            ys_want[p][k] = carries[p]
    np.testing.assert_array_equal(np.asarray(c), np.concatenate(carries))
    np.testing.assert_array_equal(np.asarray(ys), np.concatenate(
        [np.stack(y) for y in ys_want]))


@pytest.mark.parametrize("wrap", WRAPS)
@pytest.mark.parametrize("traced", [False, True], ids=["static", "traced"])
def test_fori_loop_ring_of_ppermutes(wrap, traced):
    mesh = mesh_of(*MESH4)
    x = np.arange(8, dtype=np.int32)

    def body(x_block):
        # psum of an invariant count keeps the bound invariant: the loop may hold collectives
        steps = lax.psum(np.int32(3), "i") // 4 if traced else 3
        ring = [(k, (k + 1) % 4) for k in range(4)]
        return lax.fori_loop(0, steps, lambda i, v: lax.ppermute(v, "i", ring) + i, x_block)

    f = shardc.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
    got = wrap(f)(x)
    blocks = blocks_of(x, 4)
    for i in range(3):
        blocks = [blocks[(d - 1) % 4] + i for d in range(4)]
    np.testing.assert_array_equal(np.asarray(got), np.concatenate(blocks))
    text = str(shardc.make_jaxpr(f)(x))
    assert ("while[" in text) == traced and ("scan[" in text) != traced


@pytest.mark.parametrize("wrap", WRAPS)
def test_while_loop_with_invariant_predicate_and_psum_in_the_body(wrap):
    mesh = mesh_of(*MESH4)
    x = np.array([1, 0, 2, 1], np.float32)

    def body(x_block):
        def cond_fun(c):
            v, total = c
            return total < 50                     # total is a psum: invariant
        def body_fun(c):
            v, total = c
            v = v * 2
            return v, lax.psum(v.sum(), "i")
        v, total = lax.while_loop(cond_fun, body_fun, (x_block, lax.psum(x_block.sum(), "i")))
        return v, total.reshape(1)

    v, total = wrap(shardc.shard_map(body, mesh=mesh, in_specs=P("i"),
                                     out_specs=(P("i"), P())))(x)
    want_v, want_total = x.copy(), x.sum()
    while want_total < 50:
        want_v = want_v * 2
        want_total = want_v.sum()
    np.testing.assert_array_equal(np.asarray(v), want_v)
    np.testing.assert_array_equal(np.asarray(total), [want_total])


@pytest.mark.parametrize("wrap", WRAPS)
@pytest.mark.parametrize("scale", [1.0, -1.0])
def test_cond_invariant_predicate_different_collectives_per_branch(wrap, scale):
    mesh = mesh_of(*MESH4)
    x = scale * np.array([3, 1, 4, 1, 5, 9, 2, 6], np.float32)

    def body(x_block):
        positive = lax.psum(x_block.sum(), "i") > 0      # invariant over 'i'
        return lax.cond(positive,
                        lambda v: lax.psum(v, "i"),
                        lambda v: (lax.pmax(v * 10, "i")
                                   + lax.all_gather(v, "i", tiled=True, to="invarying")[:2]),
                        x_block)

    got = wrap(shardc.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i")))(x)
    blocks = blocks_of(x, 4)
    if x.sum() > 0:
        want = [sum(blocks)] * 4
    else:
        want = [np.maximum.reduce([b * 10 for b in blocks]) + np.concatenate(blocks)[:2]] * 4
    np.testing.assert_allclose(np.asarray(got), np.concatenate(want))


@pytest.mark.parametrize("wrap", WRAPS)
def test_cond_varying_predicate_with_identical_collective_sequences(wrap):
    mesh = mesh_of(*MESH4)
    x = np.arange(8, dtype=np.float32)

    def body(x_block):
        big = x_block[0] > 2                      # varies over 'i'
        out = lax.cond(big,
                       lambda v: lax.psum(v, "i") + 1,
                       lambda v: lax.psum(v * 2, "i"),
                       x_block)
        assert shardc.typeof(out).vma == frozenset({"i"})
        return out

    got = wrap(shardc.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i")))(x)
    blocks = blocks_of(x, 4)
    chose_true = [b[0] > 2 for b in blocks]
    # the k-th psum of every device pairs up, whichever branch issued it
    total = sum(b if t else b * 2 for b, t in zip(blocks, chose_true))
    want = [total + 1 if t else total for t in chose_true]
    np.testing.assert_allclose(np.asarray(got), np.concatenate(want))


@pytest.mark.parametrize("wrap", WRAPS)
def test_switch_on_axis_index_with_identical_collectives(wrap):
    mesh = mesh_of(*MESH4)
    x = np.arange(8, dtype=np.int32)
    branches = [lambda v, k=k: lax.psum(v * (k + 1), "i") - k for k in range(3)]

    def body(x_block):
        return lax.switch(lax.axis_index("i"), branches, x_block)  # device 3 clamps to 2

    got = wrap(shardc.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i")))(x)
    blocks = blocks_of(x, 4)
    chosen = [min(d, 2) for d in range(4)]
    total = sum(b * (k + 1) for b, k in zip(blocks, chosen))
    np.testing.assert_array_equal(np.asarray(got), np.concatenate([total - k for k in chosen]))


@pytest.mark.parametrize("jit", [False, True])
def test_cond_varying_predicate_paired_collectives_of_different_shapes_fail(jit):
    mesh = mesh_of(*MESH4)
    x = np.arange(8, dtype=np.float32)

    def body(x_block):
        return lax.cond(x_block[0] > 2,
                        lambda v: lax.psum(v, "i"),
                        lambda v: lax.psum(v.sum(), "i") + jnp.zeros(2, jnp.float32),
                        x_block)

    f = shardc.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
    with pytest.raises(TypeError, match=r"cond at test_control_flow\.py:\d+: the predicate may "
                                         r"vary over mesh axes \{i\} and true_fun issues psum "
                                         r"over \('i',\)"):
        (shardc.jit(f) if jit else f)(x)


# --- T17: a ring psum_scatter -------------------------------------------------------------------

X16 = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2], np.int32)


def psum_scatter_ring_python(x_block):
    """The tutorial's f8: a Python loop of ppermutes shifting (k, k-1 mod 4)."""
    axis_size = lax.axis_size("i")
    axis_index = lax.axis_index("i")
    shift = functools.partial(lax.ppermute, axis_name="i",
                              perm=[(k, (k - 1) % axis_size) for k in range(axis_size)])
    chunks = x_block.reshape(axis_size, -1)
    accum = jnp.zeros_like(chunks[0])
    for k in range(1, axis_size):
        accum = shift(accum + chunks[(axis_index + k) % axis_size])
    return accum + chunks[axis_index]


def psum_scatter_ring_fori(x_block):
    """The same ring as a fori_loop with dynamic indexing by a traced step."""
    axis_size = lax.axis_size("i")
    axis_index = lax.axis_index("i")
    shift = functools.partial(lax.ppermute, axis_name="i",
                              perm=[(k, (k - 1) % axis_size) for k in range(axis_size)])
    chunks = x_block.reshape(axis_size, -1)

    def step(k, accum):
        chunk = lax.dynamic_index_in_dim(chunks, (axis_index + k) % axis_size, keepdims=False)
        return shift(accum + chunk)

    accum = lax.fori_loop(1, axis_size, step, jnp.zeros_like(chunks[0]))
    return accum + lax.dynamic_index_in_dim(chunks, axis_index, keepdims=False)


@pytest.mark.parametrize("wrap", WRAPS)
@pytest.mark.parametrize("ring", [psum_scatter_ring_python, psum_scatter_ring_fori])
def test_t17_ring_psum_scatter(wrap, ring):
    mesh = mesh_of(*MESH4)
    f = shardc.shard_map(ring, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
    got = wrap(f)(X16)
    np.testing.assert_array_equal(np.asarray(got), [22, 20, 12, 17])
    np.testing.assert_array_equal(np.asarray(got), X16.reshape(4, 4).sum(0))


# --- T19: a collective matmul, all-gathering rhs with a fori_loop ring of ppermutes -------------

def matmul_ring_slices(lhs_block, rhs_block):
    """Overlapped all-gather matmul: multiply the lhs columns matching the rhs block in hand."""
    size = lax.axis_size("i")
    idx = lax.axis_index("i")
    shift = functools.partial(lax.ppermute, axis_name="i",
                              perm=[(k, (k + 1) % size) for k in range(size)])
    b = rhs_block.shape[0]
    lhs_cols = lambda k: lax.dynamic_slice_in_dim(lhs_block, k * b, b, axis=1)

    def step(i, carry):
        out_block, rhs_block = carry
        rhs_block = shift(rhs_block)
        return out_block + lhs_cols((idx - i) % size) @ rhs_block, rhs_block

    out_block = lhs_cols(idx) @ rhs_block
    out_block, _ = lax.fori_loop(1, size, step, (out_block, rhs_block))
    return out_block


def matmul_ring_gather(lhs_block, rhs_block):
    """All-gather rhs by ppermute steps written into place, then one matmul."""
    size = lax.axis_size("i")
    idx = lax.axis_index("i")
    shift = functools.partial(lax.ppermute, axis_name="i",
                              perm=[(k, (k + 1) % size) for k in range(size)])
    b = rhs_block.shape[0]
    full = jnp.zeros((b * size,) + rhs_block.shape[1:], rhs_block.dtype)
    full = lax.dynamic_update_slice_in_dim(full, rhs_block, idx * b, 0)

    def step(i, carry):
        full, piece = carry
        piece = shift(piece)
        return lax.dynamic_update_slice_in_dim(full, piece, ((idx - i) % size) * b, 0), piece

    full, _ = lax.fori_loop(1, size, step, (full, rhs_block))
    return lhs_block @ full


@pytest.mark.parametrize("wrap", WRAPS)
@pytest.mark.parametrize("matmul", [matmul_ring_slices, matmul_ring_gather])
def test_t19_collective_matmul_fori_ring(wrap, matmul):
    mesh = mesh_of(*MESH4)
    rng = np.random.default_rng(19)
    lhs = rng.standard_normal((8, 8)).astype(np.float32)
    rhs = rng.standard_normal((8, 4)).astype(np.float32)
    f = shardc.shard_map(matmul, mesh=mesh, in_specs=(P("i", None), P("i", None)),
                         out_specs=P("i", None))
    out = wrap(f)(lhs, rhs)
    assert out.shape == (8, 4)
    np.testing.assert_allclose(np.asarray(out), lhs @ rhs, atol=1e-3)


# ================================================================================================
# 3. Replication types (SEMANTICS 3.4) and their errors
# ================================================================================================

MESH2 = ((2,), ("i",))
# JAX 0.10.2's hints (with the link to its documentation), and shardc's own for a carry the
# body returns varying over fewer axes than it came in (SEMANTICS 3.4: JAX gives none)
HINT_RETURNED = ("applying `jax.lax.pcast(..., ('i',), to='varying')` to the output carry "
                 "component {c} that the body returns")
SEE_VMA = ("See https://docs.jax.dev/en/latest/notebooks/shard_map.html#scan-vma for more "
           "information.\n\n")
HINT_INITIAL = ("This might be fixed by applying `jax.lax.pcast(..., ('i',), to='varying')`, to "
                "the initial carry value corresponding to the input carry {c}.\n" + SEE_VMA)


def swap_twice(x, y):
    """The tutorial's V9 body: a scan of length 2 swapping its two carries."""
    def body(carry, _):
        c1, c2 = carry
        return (c2, c1), None
    (x_, y_), _ = lax.scan(body, (x, y), None, length=2)
    return x_, y_


V9_MESSAGE = (
    "scan body function carry input and carry output must have equal types, but they differ:\n"
    "\n"
    "  * the input carry component carry[0] has type float32[3]{V:i} but the corresponding output "
    "carry component has type float32[3], so the manual axis types do not match;\n"
    "  * the input carry component carry[1] has type float32[3] but the corresponding output "
    "carry component has type float32[3]{V:i}, so the manual axis types do not match.\n"
    "\n"
    + HINT_INITIAL.format(c="component carry[1]") +
    "Revise the function so that all output types match the corresponding input types.")


@pytest.mark.parametrize("wrap", WRAPS)
def test_v9_scan_swapping_carries_of_different_types(wrap):
    mesh = mesh_of(*MESH2)
    f = shardc.shard_map(swap_twice, mesh=mesh, in_specs=(P("i"), P()), out_specs=P("i"))
    with pytest.raises(TypeError) as err:
        wrap(f)(np.arange(6.0, dtype=np.float32), np.arange(3.0, dtype=np.float32))
    assert str(err.value) == V9_MESSAGE


@pytest.mark.parametrize("wrap", WRAPS)
def test_v10_pvary_the_invariant_carry_first(wrap):
    mesh = mesh_of(*MESH2)

    def f(x, y):
        return swap_twice(x, lax.pvary(y, "i"))

    g = shardc.shard_map(f, mesh=mesh, in_specs=(P("i"), P()), out_specs=P("i"))
    x_, y_ = wrap(g)(np.arange(6.), np.arange(3.))     # the tutorial's float64 numpy inputs
    np.testing.assert_array_equal(np.asarray(x_), [0, 1, 2, 3, 4, 5])
    np.testing.assert_array_equal(np.asarray(y_), [0, 1, 2, 0, 1, 2])
    assert x_.dtype == y_.dtype == np.float32           # canonicalized, eager and jit alike


@pytest.mark.parametrize("wrap", WRAPS)
def test_v9_with_the_check_off_runs(wrap):
    mesh = mesh_of(*MESH2)
    f = shardc.shard_map(swap_twice, mesh=mesh, in_specs=(P("i"), P()), out_specs=P("i"),
                         check_vma=False)
    x_, y_ = wrap(f)(np.arange(6.0, dtype=np.float32), np.arange(3.0, dtype=np.float32))
    np.testing.assert_array_equal(np.asarray(x_), [0, 1, 2, 3, 4, 5])
    np.testing.assert_array_equal(np.asarray(y_), [0, 1, 2, 0, 1, 2])


def test_lone_mismatch_is_one_unbulleted_sentence():
    mesh = mesh_of(*MESH2)

    def f(x, y):
        def body(carry, _):
            a, b = carry
            return (a, b + a.sum()), None        # b picks up 'i'
        (a, b), _ = lax.scan(body, (x, y), None, length=3)
        return b

    g = shardc.shard_map(f, mesh=mesh, in_specs=(P("i"), P()), out_specs=P("i"))
    with pytest.raises(TypeError) as err:
        g(np.arange(6.0, dtype=np.float32), np.float32(1))
    assert str(err.value) == (
        "scan body function carry input and carry output must have equal types, but they "
        "differ:\n\n"
        "The input carry component carry[1] has type float32[] but the corresponding output "
        "carry component has type float32[]{V:i}, so the manual axis types do not match.\n\n"
        + HINT_INITIAL.format(c="component carry[1]") +
        "Revise the function so that all output types match the corresponding input types.")


def test_non_tuple_carry_reads_the_input_carry():
    mesh = mesh_of(*MESH2)

    def f(x):
        def body(total, row):
            return total + row, None             # total picks up 'i'
        total, _ = lax.scan(body, jnp.zeros(3, jnp.float32), x)
        return total

    g = shardc.shard_map(f, mesh=mesh, in_specs=P("i"), out_specs=P())
    with pytest.raises(TypeError) as err:
        g(np.arange(12.0, dtype=np.float32).reshape(4, 3))
    assert str(err.value) == (
        "scan body function carry input and carry output must have equal types, but they "
        "differ:\n\n"
        "The input carry total has type float32[3] but the corresponding output carry "
        "component has type float32[3]{V:i}, so the manual axis types do not match.\n\n"
        + HINT_INITIAL.format(c="total") +
        "Revise the function so that all output types match the corresponding input types.")


@pytest.mark.parametrize("wrap", WRAPS)
def test_fori_loop_carry_names_loop_carry(wrap):
    mesh = mesh_of(*MESH2)

    def static(x):
        # the accumulator starts invariant and picks up 'i' from x
        return lax.fori_loop(0, 2, lambda i, acc: (acc[0] + x, acc[1]),
                             (jnp.zeros(3, jnp.float32), x))[0]

    def traced(x):
        # an invariant bound: known in an eager body (a scan, as JAX's), traced under jit
        # (a while loop)
        stop = lax.psum(np.int32(1), "i")
        return lax.fori_loop(0, stop, lambda i, acc: acc + x, jnp.zeros(3, jnp.float32))

    known = wrap is not shardc.jit
    for f, construct, component, in_type in (
            (static, "scan", "component loop_carry[1][0]", "float32[3]"),
            (traced, "scan" if known else "while_loop",
             "component loop_carry[1]" if known else "component loop_carry[2]",
             "float32[3]")):
        g = shardc.shard_map(f, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
        with pytest.raises(TypeError) as err:
            wrap(g)(np.arange(6.0, dtype=np.float32))
        assert str(err.value) == (
            f"{construct} body function carry input and carry output must have equal types, "
            "but they differ:\n\n"
            f"The input carry {component} has type {in_type} but the corresponding output "
            f"carry component has type {in_type}{{V:i}}, so the manual axis types do not "
            "match.\n\n"
            + HINT_INITIAL.format(c=component) +
            "Revise the function so that all output types match the corresponding input types.")


def test_while_loop_carry_that_loses_its_axes():
    mesh = mesh_of(*MESH2)

    def f(x):
        return lax.while_loop(lambda c: c[1] < 3,
                              lambda c: (lax.psum(c[0], "i"), c[1] + 1), (x, 0))[0]

    g = shardc.shard_map(f, mesh=mesh, in_specs=P("i"), out_specs=P())
    with pytest.raises(TypeError) as err:
        g(np.arange(6.0, dtype=np.float32))
    assert str(err.value) == (
        "while_loop body function carry input and carry output must have equal types, but "
        "they differ:\n\n"
        "The input carry component c[0] has type float32[3]{V:i} but the corresponding output "
        "carry component has type float32[3], so the manual axis types do not match.\n\n"
        "This might be fixed by " + HINT_RETURNED.format(c="c[0]") + ".\n" + SEE_VMA +
        "Revise the function so that all output types match the corresponding input types.")


def test_carry_shape_and_dtype_mismatch_outside_shard_map():
    with pytest.raises(TypeError) as err:
        lax.scan(lambda c, _: (c.astype(jnp.int32).reshape(1), None), np.float32(0), None,
                 length=2)
    assert str(err.value) == (
        "scan body function carry input and carry output must have equal types, but they "
        "differ:\n\n"
        "The input carry c has type float32[] but the corresponding output carry component "
        "has type int32[1], so the dtypes do not match, and the shapes do not match.\n\n"
        "Revise the function so that all output types match the corresponding input types.")


@pytest.mark.parametrize("wrap", WRAPS)
def test_cond_branch_types_differ_under_an_invariant_predicate(wrap):
    mesh = mesh_of(*MESH2)

    def keep(v):
        return v * 2

    def reset(v):
        return jnp.zeros(3, jnp.float32)

    def f(x):
        positive = lax.psum(x.sum(), "i") > 0
        return lax.cond(positive, keep, reset, x)

    g = shardc.shard_map(f, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
    with pytest.raises(TypeError) as err:
        wrap(g)(np.arange(6.0, dtype=np.float32))
    assert str(err.value) == (
        "cond branches must have equal output types but they differ.\n\n"
        f"true_fun is {first_line(keep)}\n"
        f"false_fun is {first_line(reset)}\n\n"
        "The output of true_fun has type float32[3]{V:i} but the corresponding output of "
        "false_fun has type float32[3], so the manual axis types do not match.\n\n"
        "This might be fixed by applying `jax.lax.pcast(..., ('i',), to='varying')` to the output "
        "of false_fun.\n" + SEE_VMA +
        "Revise true_fun and/or false_fun so that all output types match.")


def test_switch_branch_types_differ():
    mesh = mesh_of(*MESH2)

    def first(v):
        return jnp.ones(3, jnp.float32)

    def second(v):
        return v + 1

    def f(x):
        return lax.switch(lax.psum(np.int32(1), "i") - 2, [first, second], x)

    g = shardc.shard_map(f, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
    with pytest.raises(TypeError) as err:
        g(np.arange(6.0, dtype=np.float32))
    assert str(err.value) == (
        "switch branches must have equal output types but they differ.\n\n"
        f"branch 0 is {first_line(first)}\n"
        f"branch1 is {first_line(second)}\n\n"
        "The output of branch 0 has type float32[3] but the corresponding output of "
        "branch1 has type float32[3]{V:i}, so the manual axis types do not match.\n\n"
        "This might be fixed by applying `jax.lax.pcast(..., ('i',), to='varying')` to the output "
        "of branch 0.\n" + SEE_VMA +
        "Revise branch 0 and/or branch1 so that all output types match.")


def predicate_error(construct, marker, where, prim):
    return (f"{construct} at {FILE}:{line_of(marker)}: the predicate may vary over mesh axes "
            f"{{i}} and {where} issues {prim} over ('i',), so devices of one group could "
            "disagree and never complete it; make the predicate invariant over ('i',) or move "
            "the collective out.")


def cond_with_unpaired_psum(x):
    return lax.cond(x[0] > 2, lambda v: lax.psum(v, "i"), lambda v: v * 2, x)  # <cond-unpaired>


def while_with_psum_in_body(x):
    return lax.while_loop(lambda c: c[0] < 20,  # <while-body>
                          lambda c: c + lax.psum(c, "i"), x)


def while_with_psum_in_cond(x):
    return lax.while_loop(lambda c: (c + lax.psum(c, "i"))[0] < 20,  # <while-cond>
                          lambda c: c * 2, x)


def switch_with_unpaired_all_gather(x):
    branches = [lambda v: v, lambda v: lax.all_gather(v, "i", tiled=True)[:3]]
    return lax.switch(lax.axis_index("i"), branches, x)  # <switch-unpaired>


@pytest.mark.parametrize("wrap", WRAPS)
@pytest.mark.parametrize("check_vma", [True, False])
@pytest.mark.parametrize("body,expected", [
    (cond_with_unpaired_psum, ("cond", "<cond-unpaired>", "true_fun", "psum")),
    (while_with_psum_in_body, ("while_loop", "<while-body>", "body_fun", "psum")),
    (while_with_psum_in_cond, ("while_loop", "<while-cond>", "cond_fun", "psum")),
    (switch_with_unpaired_all_gather, ("switch", "<switch-unpaired>", "branch1", "all_gather")),
], ids=["cond", "while-body", "while-cond", "switch"])
def test_collectives_under_a_varying_predicate(wrap, check_vma, body, expected):
    mesh = mesh_of(*MESH2)
    g = shardc.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"),
                         check_vma=check_vma)
    with pytest.raises(TypeError) as err:    # JAX's class for such a cond (it hangs on a loop)
        wrap(g)(np.arange(6.0, dtype=np.float32))
    # the rule uses inferred vma, so it holds with the check off too
    assert str(err.value) == predicate_error(*expected)


def test_varying_traced_fori_bound_rejects_a_collective():
    mesh = mesh_of(*MESH2)

    def f(x):
        return lax.fori_loop(0, lax.axis_index("i") + 1,  # <fori-varying>
                             lambda i, v: v + lax.psum(v, "i"), x)

    g = shardc.shard_map(f, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
    with pytest.raises(TypeError) as err:
        g(np.arange(6.0, dtype=np.float32))
    assert str(err.value) == predicate_error("while_loop", "<fori-varying>", "body_fun", "psum")


@pytest.mark.parametrize("wrap", WRAPS)
def test_typeof_control_flow_results(wrap):
    mesh = mesh_of((4,), ("i",))
    seen = {}

    def f(x):
        invariant = lax.psum(x[0], "i") > 0
        seen["fori"] = lax.fori_loop(0, 2, lambda i, v: v + lax.psum(v, "i"), x)
        c, ys = lax.scan(lambda c, row: (c, row * c), jnp.float32(2), x)
        seen["scan carry"], seen["scan ys"] = c, ys
        seen["cond invariant"] = lax.cond(invariant, lambda v: v, lambda v: v + 1, jnp.ones(2))
        seen["cond varying"] = lax.cond(x[0] > 0, lambda v: v, lambda v: v + 1, jnp.ones(2))
        seen["while varying"] = lax.while_loop(lambda c: c < x[0], lambda c: c + 1, 0.0)
        seen["while invariant"] = lax.while_loop(lambda c: c < 3, lambda c: c + 1, 0.0)
        seen["switch varying"] = lax.switch(lax.axis_index("i"), [lambda v: v, lambda v: v * 2],
                                            jnp.ones(2))
        return seen["fori"], seen["while varying"].reshape(1)

    fori, stops = wrap(shardc.shard_map(f, mesh=mesh, in_specs=P("i"),
                                        out_specs=(P("i"), P("i"))))(np.arange(8.0, dtype=np.float32))
    assert {k: str(shardc.typeof(v)) for k, v in seen.items()} == {
        "fori": "float32[2]{V:i}",
        "scan carry": "float32[]", "scan ys": "float32[2]{V:i}",
        "cond invariant": "float32[2]",
        "cond varying": "float32[2]{V:i}",          # the predicate's axes reach the result
                                                  # (JAX: float32[2], one device's value)
        # iteration counts may differ; a loop from 0.0 adding 1 is weakly typed (JAX's ~)
        "while varying": "~float32[]{V:i}",
        "while invariant": "~float32[]",
        "switch varying": "float32[2]{V:i}",
    }
    np.testing.assert_array_equal(np.asarray(fori), [72, 97, 74, 99, 76, 101, 78, 103])
    # each device counts up to its own x[0]: 0, 2, 4, 6
    np.testing.assert_array_equal(np.asarray(stops), [0, 2, 4, 6])


# --- cond and switch under a varying predicate: branches typed as in JAX --------------------------

MESH24 = ((2, 4), ("x", "y"))


def y_is_zero():
    return lax.axis_index("y") == 0


@pytest.mark.parametrize("wrap", WRAPS)
@pytest.mark.parametrize("construct", ["cond", "switch"])
def test_branches_see_their_operands_types_under_a_varying_predicate(wrap, construct):
    # JAX 0.10.2 runs this: the operand keeps its type f32[2]{x} inside the branches, so a
    # pcast over the predicate's axis is legal there (shardc used to lift the operand first)
    mesh = mesh_of(*MESH24)
    seen = {}

    def double(v):
        seen["operand"] = str(shardc.typeof(v))
        return lax.pcast(v, "y", to="varying") * 2

    def body(a):
        if construct == "cond":
            out = lax.cond(y_is_zero(), double, double, a)
        else:
            out = lax.switch(lax.axis_index("y"), [double] * 3, a)
        seen["result"] = str(shardc.typeof(out))
        return out

    f = shardc.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P(("x", "y")))
    a = np.arange(4, dtype=np.float32)
    got = wrap(f)(a)
    want = np.concatenate([blocks_of(a, 2)[i] * 2 for i in range(2) for _ in range(4)])
    np.testing.assert_array_equal(np.asarray(got), want)
    assert seen == {"operand": "float32[2]{V:x}", "result": "float32[2]{V:(x,y)}"}
    # the operand enters the cond untouched; each branch holds the pvary its pcast made
    text = str(shardc.make_jaxpr(f)(a))
    branch = re.compile(r"\{ lambda ; (\w+):f32\[2\]\{x\}\. let\n\s+\w+:f32\[2\]\{x,y\} = "
                        r"pvary\[mesh_axes=\('y',\)\] \1\n")
    assert len(branch.findall(text)) == (2 if construct == "cond" else 3)
    assert re.search(r"\] \w+ c\n", text)          # cond[...] index c: the body's own input


@pytest.mark.parametrize("wrap", WRAPS)
def test_branch_types_differing_by_the_predicates_axes_are_an_error(wrap):
    # JAX raises this TypeError too; shardc used to lift both results to {x,y}
    mesh = mesh_of(*MESH24)

    def varied(v):
        return lax.pcast(v, "y", to="varying")

    def kept(v):
        return v

    f = shardc.shard_map(lambda a: lax.cond(y_is_zero(), varied, kept, a), mesh=mesh,
                         in_specs=P("x"), out_specs=P(("x", "y")))
    with pytest.raises(TypeError) as err:
        wrap(f)(np.arange(4, dtype=np.float32))
    assert str(err.value) == (
        "cond branches must have equal output types but they differ.\n\n"
        f"true_fun is {first_line(varied)}\n"
        f"false_fun is {first_line(kept)}\n\n"
        "The output of true_fun has type float32[2]{V:(x,y)} but the corresponding output of "
        "false_fun has type float32[2]{V:x}, so the manual axis types do not match.\n\n"
        "This might be fixed by applying `jax.lax.pcast(..., ('y',), to='varying')` to the "
        "output of false_fun.\n" + SEE_VMA +
        "Revise true_fun and/or false_fun so that all output types match.")


@pytest.mark.parametrize("wrap", WRAPS)
def test_an_operand_every_branch_returns_is_forwarded_with_its_type(wrap):
    # as in JAX, an output every branch returns as the same operand is that operand: it keeps
    # its type, so it may be returned replicated although the predicate varies
    mesh = mesh_of(*MESH24)
    seen = {}

    def body(a, w):
        scaled, same = lax.cond(y_is_zero(), lambda v, u: (v * 2, u), lambda v, u: (v + 1, u),
                                a, w)
        seen.update(scaled=str(shardc.typeof(scaled)), same=str(shardc.typeof(same)))
        return scaled, same

    f = shardc.shard_map(body, mesh=mesh, in_specs=(P("x"), P()),
                         out_specs=(P(("x", "y")), P()))
    a, w = np.arange(4, dtype=np.float32), np.float32([5, 6, 7])
    scaled, same = wrap(f)(a, w)
    assert seen == {"scaled": "float32[2]{V:(x,y)}", "same": "float32[3]"}
    blocks = blocks_of(a, 2)
    want = [blocks[i] * 2 if j == 0 else blocks[i] + 1 for i in range(2) for j in range(4)]
    np.testing.assert_array_equal(np.asarray(scaled), np.concatenate(want))
    np.testing.assert_array_equal(np.asarray(same), w)
    # the cond computes the first result only
    text = str(shardc.make_jaxpr(f)(a, w))
    assert re.search(r"\n\s+\w+:f32\[2\]\{x,y\} = cond\[", text)


@pytest.mark.parametrize("wrap", WRAPS)
def test_a_switch_with_one_branch_calls_it(wrap):
    # as in JAX: no cond, so the index's axes do not reach the result, which may be returned
    # replicated over them
    mesh = mesh_of(*MESH24)
    f = shardc.shard_map(lambda a: lax.switch(lax.axis_index("y"), [lambda v: v * 3], a),
                         mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    a = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(wrap(f)(a)), a * 3)
    assert "cond[" not in str(shardc.make_jaxpr(f)(a))


@pytest.mark.parametrize("wrap", WRAPS)
def test_a_result_chosen_by_a_varying_predicate_is_not_replicated(wrap):
    # shardc decision: JAX types this result f32[2]{x} and returns device y=0's value for every
    # y; devices along 'y' took different branches, so shardc types it {x,y} and rejects
    mesh = mesh_of(*MESH24)
    f = shardc.shard_map(lambda a: lax.cond(y_is_zero(), lambda v: v * 2, lambda v: v + 1, a),
                         mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    with pytest.raises(shardc.sharding.ReplicationError) as err:
        wrap(f)(np.arange(4, dtype=np.float32))
    assert ("out_specs is P('x',) which implies that the corresponding output value "
            "is replicated across mesh axis 'y', but it may vary over mesh axis 'y'"
            in str(err.value))


# ================================================================================================
# 4. The IR: sub-programs print, verify, and lower their collectives per device
# ================================================================================================

def body_with_scan_and_cond(x_block):
    def step(c, row):
        return c + lax.psum(row, "i"), row * 2
    c, ys = lax.scan(step, jnp.zeros_like(x_block[0]), x_block)
    out = lax.cond(lax.psum(c.sum(), "i") > 0, lambda v: v + 1, lambda v: lax.pmax(v, "i") + v, c)
    return out, ys


def test_make_jaxpr_prints_and_verifies_sub_programs():
    from ir.verify import verify
    mesh = mesh_of((2,), ("i",))
    f = shardc.shard_map(body_with_scan_and_cond, mesh=mesh, in_specs=P("i"),
                         out_specs=(P("i"), P("i")))
    closed = shardc.make_jaxpr(f)(np.zeros((4, 3), np.float32))
    verify(closed.jaxpr)
    text = str(closed)
    assert "shard_map[" in text
    scan_at, cond_at = text.index("scan["), text.index("cond[")
    assert scan_at < cond_at
    # the scan's body is printed inside it, with its psum and typed carry
    scan_text = text[scan_at:cond_at]
    assert "jaxpr={ lambda" in scan_text
    assert re.search(r"= psum\[mesh_axes=\('i',\)\]", scan_text)
    assert "length=2" in scan_text and "num_carry=1" in scan_text
    assert re.search(r"\w+:f32\[3\]\{i\} \w+:f32\[3\]\{i\}\. let", scan_text)
    # the cond prints both branches, false first (index 0), the pmax in the second entry
    cond_text = text[cond_at:]
    assert "branches=(" in cond_text
    assert cond_text.count("{ lambda") == 2
    assert "pmax[mesh_axes=('i',)]" in cond_text.split("{ lambda")[1]
    assert "pmax" not in cond_text.split("{ lambda")[2]


def _eqns_named(program, name):
    return [e for e in program.eqns if e.primitive.name == name]


def test_lowered_program_has_collectives_inside_sub_programs():
    mesh = mesh_of((2, 2), ("i", "j"))

    def body(x_block):
        def step(c, row):
            return c + lax.psum(row, "j"), None
        c, _ = lax.scan(step, jnp.zeros_like(x_block[0]), x_block)
        return c

    f = shardc.jit(shardc.shard_map(body, mesh=mesh, in_specs=P(("i", "j")),
                                    out_specs=P(("i", "j"))))
    x = np.arange(24, dtype=np.float32).reshape(8, 3)
    lowered = f.lower(x)
    shard = lowered.module.all_shard_maps()[0]
    for position, groups in ((0, ((0, 1), (2, 3))), (3, ((0, 1), (2, 3)))):
        program = shard.program_of(position).program
        (scan,) = _eqns_named(program, "scan")
        inner = scan.params["jaxpr"]
        (reduce,) = _eqns_named(inner, "all_reduce")
        assert reduce.params["mesh_axes"] == ("j",)
        assert reduce.params["reduction"] == "sum"
        assert tuple(map(tuple, reduce.params["device_groups"])) == groups
        assert not _eqns_named(inner, "psum")
        assert not _eqns_named(program, "all_reduce")     # nothing hoisted out of the loop
    # and the lowered program runs: every row pair summed over 'j'
    got = np.asarray(f(x)).reshape(4, 3)
    blocks = np.split(x, 4)
    want = [blocks[p].sum(0) + blocks[p ^ 1].sum(0) for p in range(4)]
    np.testing.assert_allclose(got, np.stack(want))


# ================================================================================================
# 5. The runtime: deadlock detection and debug.print order
# ================================================================================================

def test_hand_built_deadlock_names_the_devices():
    from ir import primitives as prims
    from ir import collectives as coll
    from ir.core import Aval, Eqn, Program, Var
    from runtime.reference import DeadlockError, run_device_programs

    mesh = mesh_of((2,), ("i",))
    aval = Aval((2,), np.float32)
    a, b = Var(aval), Var(aval)
    reducing = Program([], [a], [Eqn(coll.all_reduce_node, [a], [b],
                                     dict(mesh_axes=("i",), reduction="sum",
                                          device_groups=((0, 1),)))], [b])
    c = Var(aval)
    idle = Program([], [c], [], [c])
    ones = [[np.ones(2, np.float32)], [np.ones(2, np.float32)]]
    with pytest.raises(DeadlockError) as err:
        run_device_programs(mesh, [reducing, idle], ones)
    message = str(err.value)
    assert "device 0 at all_reduce[mesh_axes=('i',)]" in message
    assert "devices [1] had already finished" in message
    # both reaching it completes
    results = run_device_programs(mesh, [reducing, reducing], ones)
    np.testing.assert_array_equal(results[1][0], [2, 2])


def test_hand_built_mismatched_nodes_are_a_deadlock():
    from ir import primitives as prims
    from ir import collectives as coll
    from ir.core import Aval, Eqn, Program, Var
    from runtime.reference import DeadlockError, run_device_programs

    mesh = mesh_of((2,), ("i",))
    aval = Aval((2,), np.float32)
    programs = []
    for reduction in ("sum", "max"):
        a, b = Var(aval), Var(aval)
        programs.append(Program([], [a], [Eqn(coll.all_reduce_node, [a], [b],
                                              dict(mesh_axes=("i",), reduction=reduction,
                                                   device_groups=((0, 1),)))], [b]))
    with pytest.raises(DeadlockError, match="different communication nodes"):
        run_device_programs(mesh, programs, [[np.ones(2, np.float32)]] * 2)


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_a_group_waits_while_a_member_finishes_another_groups_collective(backend):
    # devices with odd y first psum over 'x' in their branch, the others go straight to the
    # psum over 'y': device (0,0) waits there for (0,1), which is still in its 'x' group's
    # psum. Groups do not wait for each other, so this completes (it used to be reported as
    # a deadlock, depending on which device the scheduler looked at first)
    mesh = mesh_of((2, 4), ("x", "y"))
    x = np.arange(8, dtype=np.float32)

    def body(v):
        r = lax.cond(lax.axis_index("y") % 2 == 1,
                     lambda u: lax.pcast(lax.psum(u, "x"), "x", to="varying"),
                     lambda u: u * 2, v)
        return lax.psum(r, "y")

    from compiler.backend import get_backend, set_backend
    f = shardc.jit(shardc.shard_map(body, mesh=mesh, in_specs=P(("x", "y")), out_specs=P("x")))
    saved = get_backend()
    try:
        shardc.set_backend_name(backend)
        got = np.asarray(f(x))
    finally:
        set_backend(saved)
    grid = x.reshape(2, 4)                         # device (i, j) holds x[4i + j]
    rows = [sum(grid[:, j].sum() if j % 2 else 2 * grid[i, j] for j in range(4))
            for i in range(2)]
    np.testing.assert_array_equal(got, rows)


@pytest.mark.parametrize("wrap", WRAPS)
def test_debug_print_once_per_device_in_position_order(wrap, capsys):
    mesh = mesh_of(*MESH4)

    def body(x_block):
        shardc.debug.print("first {}", x_block)
        total = lax.psum(x_block, "i")
        shardc.debug.print("second {} {}", x_block, total)
        return total

    f = shardc.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P())
    wrap(f)(np.arange(4, dtype=np.int32))
    assert capsys.readouterr().out == (
        "first [0]\nfirst [1]\nfirst [2]\nfirst [3]\n"
        "second [0] [6]\nsecond [1] [6]\nsecond [2] [6]\nsecond [3] [6]\n")


@pytest.mark.parametrize("wrap", WRAPS)
def test_debug_print_inside_a_scan_with_a_collective(wrap, capsys):
    mesh = mesh_of(*MESH4)

    def body(x_block):
        def step(c, _):
            shardc.debug.print("step {}", c)
            return c + lax.psum(c, "i"), None
        c, _ = lax.scan(step, x_block, None, length=2)
        return c

    f = shardc.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
    got = wrap(f)(np.arange(4, dtype=np.int32))
    np.testing.assert_array_equal(np.asarray(got), [36, 37, 38, 39])
    assert capsys.readouterr().out == "".join(
        f"step [{v}]\n" for v in (0, 1, 2, 3, 6, 7, 8, 9))


# --- shard_maps inside host loops and branches (a loop over steps that calls one) ---------------

def test_shard_maps_run_inside_host_loops_and_branches():
    """lax.map, scan, fori_loop, while_loop and cond outside any shard_map, whose bodies call
    one: eagerly and under jit, each step runs the shard_map on the mesh (before, no backend
    could run a shard_map there: MissingRuleError)."""
    mesh = shardc.make_mesh((4,), ("x",), axis_types=(shardc.sharding.AxisType.Auto,))
    f = shardc.shard_map(lambda b: lax.psum(b.sum(), "x"), mesh=mesh, in_specs=P("x"),
                      out_specs=P())
    g = shardc.shard_map(lambda b: lax.ppermute(b, "x", [(k, (k + 1) % 4) for k in range(4)]),
                      mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    host = np.arange(32., dtype=np.float32).reshape(4, 8)
    xs = jnp.asarray(host)
    sums = host.sum(1)
    shifted = lambda row: np.roll(row.reshape(4, 2), 1, axis=0).reshape(8)
    cases = {
        "map": (lambda s: lax.map(f, s), sums),
        "scan": (lambda s: lax.scan(lambda c, x: (c + f(x), g(x)), 0., s),
                 (sums.sum(), np.stack([shifted(r) for r in host]))),
        "fori": (lambda s: lax.fori_loop(0, 3, lambda i, c: c + f(s[i]), 0.), sums[:3].sum()),
        "while": (lambda s: lax.while_loop(lambda c: c[0] < 2, lambda c: (c[0] + 1, g(c[1])),
                                           (0, s[0]))[1], shifted(shifted(host[0]))),
        "cond": (lambda s: lax.cond(s[0, 0] > 0, lambda: f(s[0]), lambda: f(s[1])), sums[1]),
    }
    for name, (run, want) in cases.items():
        for how in (run, shardc.jit(run)):
            got = how(xs)
            for a, b in zip(shardc.tree_util.tree_leaves(got), shardc.tree_util.tree_leaves(want)):
                np.testing.assert_allclose(np.asarray(a), b, err_msg=name)


def test_branch_outputs_of_swapped_types_list_every_output_and_every_fix():
    # JAX 0.10.2's text: a bullet per output that differs, and per output the axes each
    # branch lacks
    mesh = mesh_of((1, 1), ("x", "y"))

    def swapped(a, b):
        return b, a

    def kept(a, b):
        return a, b

    f = shardc.shard_map(lambda a, b: lax.cond(True, kept, swapped, a, b), mesh=mesh,
                         in_specs=(P("x"), P("y")), out_specs=P(("x", "y")))
    with pytest.raises(TypeError) as err:
        f(np.arange(4.0, dtype=np.float32), np.arange(4.0, dtype=np.float32))
    fix = "  * applying `jax.lax.pcast(..., ('{}',), to='varying')` to the output of {} at path [{}]"
    assert str(err.value) == (
        "cond branches must have equal output types but they differ.\n\n"
        f"true_fun is {first_line(kept)}\n"
        f"false_fun is {first_line(swapped)}\n\n"
        "  * the output of true_fun at path [0] has type float32[4]{V:x} but the corresponding "
        "output of false_fun has type float32[4]{V:y}, so the manual axis types do not match;\n"
        "  * the output of true_fun at path [1] has type float32[4]{V:y} but the corresponding "
        "output of false_fun has type float32[4]{V:x}, so the manual axis types do not "
        "match.\n\n"
        "This might be fixed by:\n"
        + fix.format("y", "true_fun", 0) + ";\n" + fix.format("x", "false_fun", 0) + ";\n"
        + fix.format("x", "true_fun", 1) + ";\n" + fix.format("y", "false_fun", 1) + ".\n"
        + SEE_VMA + "Revise true_fun and/or false_fun so that all output types match.")


# --- JAX 0.10.2's argument checks and error texts --------------------------------------------

NOT_CALLABLE = 42


@pytest.mark.parametrize("call, text", [
    (lambda: lax.fori_loop(0, 1, NOT_CALLABLE, 0),
     "lax.fori_loop: body_fun argument should be callable."),
    (lambda: lax.while_loop(NOT_CALLABLE, NOT_CALLABLE, 0),
     "lax.while_loop: body_fun and cond_fun arguments should be callable."),
    (lambda: lax.while_loop(lambda c: True, NOT_CALLABLE, 0),
     "lax.while_loop: body_fun and cond_fun arguments should be callable."),
    (lambda: lax.switch(0, [NOT_CALLABLE]),
     "lax.switch: branches argument should be a sequence of callables."),
    (lambda: lax.cond(0, NOT_CALLABLE, NOT_CALLABLE),
     "lax.cond: true_fun and false_fun arguments should be callable."),
    (lambda: lax.scan(NOT_CALLABLE, 0, 1), "lax.scan: f argument should be a callable."),
    (lambda: lax.associative_scan(NOT_CALLABLE, 0),
     "lax.associative_scan: fn argument should be callable."),
], ids=["fori_loop", "while_loop", "while_loop_body", "switch", "cond", "scan",
        "associative_scan"])
def test_functions_must_be_callable(call, text):
    with pytest.raises(TypeError) as err:
        call()
    assert str(err.value) == text


def test_cond_takes_its_deprecated_five_argument_form():
    # cond(pred, true_operand, true_fun, false_operand, false_fun), as JAX still does
    assert lax.cond(True, 1.0, lambda x: x + 1, 5.0, lambda x: x - 1) == 2.0
    assert lax.cond(False, 1.0, lambda x: x + 1, 5.0, lambda x: x - 1) == 4.0


@pytest.mark.parametrize("wrap", WRAPS)
def test_cond_predicate_none(wrap):
    f = wrap(lambda pred, x: lax.cond(pred, lambda x: x + 1, lambda x: x + 2, x))
    with pytest.raises(TypeError) as err:
        f(None, 1.0)
    assert str(err.value) == "cond predicate is None"


def test_cond_predicate_types():
    def branches(pred):
        return lax.cond(pred, lambda t: 2.0, lambda f: 3.0, 1.0)

    def pred_function(x):
        return True

    with pytest.raises(TypeError) as err:
        lax.cond(pred_function, lambda t: 2.0, lambda f: 3.0, 1.0)
    assert str(err.value) == f"Pred type must be either boolean or number, got {pred_function}."
    for pred, text in [
            ("foo", "Pred must be a scalar, got foo of type <class 'str'>"),
            ((1.0, 1.0), "Pred must be a scalar, got (1.0, 1.0) of type <class 'tuple'>"),
            ([True], "Pred must be a scalar, got [True] of type <class 'list'>"),
            (np.ones(2, np.float32), "Pred must be a scalar, got [1. 1.] of shape (2,)."),
            (1j, "Pred type must be either boolean or number, got complex64."),
            (np.complex64(1j), "Pred type must be either boolean or number, got complex64.")]:
        with pytest.raises(TypeError) as err:
            branches(pred)
        assert str(err.value) == text


@pytest.mark.parametrize("wrap", WRAPS)
def test_cond_number_predicate_is_true_where_nonzero(wrap):
    # JAX's rule: pred != 0 (0.5 is true, as it is in Python)
    f = wrap(lambda pred: lax.cond(pred, lambda: 1, lambda: 0))
    assert [int(f(p)) for p in (np.float32(0.5), np.float32(0.0), np.int32(-3),
                                jnp.float32(0.25), 0.5)] == [1, 0, 1, 1, 1]


def test_switch_index_types():
    def pick(index):
        return lax.switch(index, [lambda _: 2.0, lambda _: 3.0], 1.0)

    def index_function(x):
        return True

    for index, text in [
            (index_function, f"Index type must be an integer, got {index_function}."),
            ("foo", "Index type must be an integer, got foo."),
            ((1.0, 1.0), "Branch index must be scalar, got (1.0, 1.0) of shape (2,)."),
            (np.arange(2), "Branch index must be scalar, got [0 1] of shape (2,)."),
            (1.0, "Index type must be an integer, got 1.0 as float32"),
            (np.float32(1.0), "Index type must be an integer, got 1.0 as float32"),
            (True, "Index type must be an integer, got True as bool"),
            (None, "Index type must be an integer, got None as float32")]:
        with pytest.raises(TypeError) as err:
            pick(index)
        assert str(err.value) == text
    with pytest.raises(ValueError) as err:
        lax.switch(0, [], 1.0)
    assert str(err.value) == "Empty branch sequence"


def test_switch_traced_float_index_is_refused():
    with pytest.raises(TypeError, match=re.escape("Index type must be an integer, got ")):
        shardc.jit(lambda i: lax.switch(i, [lambda: 1, lambda: 2]))(np.float32(1))


@pytest.mark.parametrize("true_out, false_out, differences", [
    (dict(a=2.0), dict(a=(3.0, 3.0)),
     "true_fun output at path ['a'] is a pytree leaf but false_fun output at path ['a'] is "
     "a <class 'tuple'>, so their Python types differ.\n"),
    ((1.0, 2.0), [1.0, 2.0],
     "true_fun output is a <class 'tuple'> but false_fun output is a <class 'list'>, so their "
     "Python types differ.\n"),
    ((1.0, 2.0), (1.0, 2.0, 3.0),
     "true_fun output is a tuple of length 2 but false_fun output is a tuple of length 3, so "
     "the lengths do not match.\n"),
    ({"a": 1.0}, {"b": 1.0},
     "true_fun output is a <class 'dict'> with pytree metadata ('a',) but false_fun output is "
     "a <class 'dict'> with pytree metadata ('b',), so the pytree node metadata does not "
     "match.\n"),
    (1.0, None,
     "true_fun output is a pytree leaf but false_fun output is a <class 'NoneType'>, so their "
     "Python types differ.\n"),
    ((1.0, [1.0]), ((1.0,), [1.0, 2.0]),
     "  * true_fun output at path [0] is a pytree leaf but false_fun output at path [0] is a "
     "<class 'tuple'>, so their Python types differ;\n"
     "  * true_fun output at path [1] is a list of length 1 but false_fun output at path [1] "
     "is a list of length 2, so the lengths do not match.\n"),
], ids=["path", "types", "lengths", "metadata", "none", "two"])
def test_branch_structure_differences(true_out, false_out, differences):
    def true_fun(_):
        return true_out

    def false_fun(_):
        return false_out

    with pytest.raises(TypeError) as err:
        lax.cond(True, true_fun, false_fun, 1.0)
    assert str(err.value) == (
        "cond branch outputs must have the same pytree structure, but they differ:\n\n"
        f"true_fun is {first_line(true_fun)}\n"
        f"false_fun is {first_line(false_fun)}\n\n"
        f"{differences}\n"
        "Revise true_fun and/or false_fun so that they have the same pytree structure.")


def test_switch_branch_outputs_of_other_structures_and_types():
    def first(_):
        return dict(a=2.0)

    def second(_):
        return dict(a=(3.0, 3.0))

    with pytest.raises(TypeError) as err:
        lax.switch(1, [first, second], 1.0)
    assert str(err.value) == (
        "switch branch outputs must have the same pytree structure, but they differ:\n\n"
        f"branch 0 is {first_line(first)}\n"
        f"branch1 is {first_line(second)}\n\n"
        "branch 0 output at path ['a'] is a pytree leaf but branch1 output at path ['a'] is a "
        "<class 'tuple'>, so their Python types differ.\n\n"
        "Revise branch 0 and/or branch1 so that they have the same pytree structure.")

    def vector(_):
        return dict(a=jnp.array([1.0], jnp.float32))

    def scalar(_):
        return dict(a=jnp.float32(1.0))

    with pytest.raises(TypeError) as err:
        lax.switch(1, [vector, scalar], 1.0)
    assert str(err.value) == (
        "switch branches must have equal output types but they differ.\n\n"
        f"branch 0 is {first_line(vector)}\n"
        f"branch1 is {first_line(scalar)}\n\n"
        "The output of branch 0 at path ['a'] has type float32[1] but the corresponding output "
        "of branch1 has type float32[], so the shapes do not match.\n\n"
        "Revise branch 0 and/or branch1 so that all output types match.")


def test_branch_types_list_every_output_that_differs():
    def true_fun(_):
        return jnp.array([1.0], jnp.float32), jnp.int32(1), jnp.array([1], jnp.int32)

    def false_fun(_):
        return jnp.float32(1.0), jnp.float32(1.0), jnp.array([1], jnp.int32)

    with pytest.raises(TypeError) as err:
        lax.cond(True, true_fun, false_fun, 1.0)
    assert str(err.value) == (
        "cond branches must have equal output types but they differ.\n\n"
        f"true_fun is {first_line(true_fun)}\n"
        f"false_fun is {first_line(false_fun)}\n\n"
        "  * the output of true_fun at path [0] has type float32[1] but the corresponding "
        "output of false_fun has type float32[], so the shapes do not match;\n"
        "  * the output of true_fun at path [1] has type int32[] but the corresponding output "
        "of false_fun has type float32[], so the dtypes do not match.\n\n"
        "Revise true_fun and/or false_fun so that all output types match.")

    def vector(_):
        return jnp.array([1], jnp.int32)

    def scalar(_):
        return jnp.float32(1.0)

    with pytest.raises(TypeError) as err:
        lax.cond(True, vector, scalar, 1.0)
    assert ("The output of true_fun has type int32[1] but the corresponding output of false_fun "
            "has type float32[], so the dtypes do not match, and the shapes do not match.\n\n"
            in str(err.value))


@pytest.mark.parametrize("cond_fun, text", [
    (lambda c: (1.0, 1.0), "pytree PyTreeDef((*, *))."),
    (lambda c: None, "pytree PyTreeDef(None)."),
    (lambda c: np.float32(1.0), "output type(s) [ShapedArray(float32[])]."),
    (lambda c: 1.0, "output type(s) [ShapedArray(float32[], weak_type=True)]."),
    (lambda c: jnp.ones(2) > 0, "output type(s) [ShapedArray(bool[2])]."),
], ids=["tuple", "none", "float32", "weak", "vector"])
def test_while_cond_fun_must_return_a_boolean_scalar(cond_fun, text):
    with pytest.raises(TypeError) as err:
        lax.while_loop(cond_fun, lambda c: c, np.float32(0.0))
    assert str(err.value) == f"cond_fun must return a boolean scalar, but got {text}"


STRUCTURE = ("{} body function carry input and carry output must have the same pytree "
             "structure, but they differ:\n\n{}\n"
             "Revise the function so that the carry output has the same pytree structure as "
             "the carry input.")


@pytest.mark.parametrize("body, init, differences", [
    (lambda c, x: ((0, 0, 0), x), (1, (2, 3)),
     "The input carry c is a tuple of length 2 but the corresponding component of the carry "
     "output is a tuple of length 3, so the lengths do not match.\n"),
    (lambda x, _: ((x[0].astype("float32"),), None), (np.int32(0),) * 2,
     "The input carry x is a tuple of length 2 but the corresponding component of the carry "
     "output is a tuple of length 1, so the lengths do not match.\n"),
    (lambda x, _: ([x[0].astype("float32")] * 2, None), (np.int32(0),) * 2,
     "The input carry x is a <class 'tuple'> but the corresponding component of the carry "
     "output is a <class 'list'>, so their Python types differ.\n"),
    (lambda x, _: ({"a": x["a"], "b": x["a"]}, None), {"a": np.int32(0)},
     "The input carry x is a <class 'dict'> with 1 child but the corresponding component of "
     "the carry output is a <class 'dict'> with 2 children, so the numbers of children do not "
     "match, with the symmetric difference of key sets: {'b'}.\n"),
    (lambda x, _: (({"a": x[0]["a"], "b": x[0]["a"]},) * 2, None), ({"a": np.int32(0)},) * 2,
     "  * the input carry component x[0] is a <class 'dict'> with 1 child but the "
     "corresponding component of the carry output is a <class 'dict'> with 2 children, so the "
     "numbers of children do not match, with the symmetric difference of key sets: {'b'};\n"
     "  * the input carry component x[1] is a <class 'dict'> with 1 child but the "
     "corresponding component of the carry output is a <class 'dict'> with 2 children, so the "
     "numbers of children do not match, with the symmetric difference of key sets: {'b'}.\n"),
    (lambda x, _: (None, None), (np.float32(0),),
     "The input carry x is a <class 'tuple'> but the corresponding component of the carry "
     "output is a <class 'NoneType'>, so their Python types differ.\n"),
], ids=["lengths", "shorter", "types", "children", "two", "none"])
def test_scan_carry_structure_differences(body, init, differences):
    with pytest.raises(TypeError) as err:
        lax.scan(body, init, None, length=1)
    assert str(err.value) == STRUCTURE.format("scan", differences)


def test_carry_leaf_against_a_container_names_the_leaf_class():
    from ir.core import Aval
    with pytest.raises(TypeError) as err:
        lax.while_loop(lambda c: True, lambda c: (1.0, 1.0), 0.0)
    assert str(err.value) == STRUCTURE.format(
        "while_loop", f"The input carry c is a {Aval} but the corresponding component of the "
        "carry output is a <class 'tuple'>, so their Python types differ.\n")


@pytest.mark.parametrize("wrap", WRAPS)
def test_fori_loop_carry_metadata_differs(wrap):
    # static bounds: a scan; traced bounds (under jit): a while loop with the bound carried
    def f(n):
        return lax.fori_loop(0, n, lambda i, x: {"T": jnp.array([0.5])}, {"t": jnp.array([1.0])})

    construct, where = ("scan", "loop_carry[1]") if wrap is eager else ("while_loop",
                                                                         "loop_carry[2]")
    with pytest.raises(TypeError) as err:
        wrap(f)(1)
    assert str(err.value) == STRUCTURE.format(
        construct, f"The input carry component {where} is a <class 'dict'> with pytree "
        "metadata ('t',) but the corresponding component of the carry output is a <class "
        "'dict'> with pytree metadata ('T',), so the pytree node metadata does not match.\n")


def test_carry_of_a_body_without_named_parameters_is_named_by_path():
    with pytest.raises(TypeError) as err:
        lax.scan(lambda *a: ((a[0][0],), None), (np.float32(0), np.float32(0)), None, length=1)
    assert "The input carry a is a tuple of length 2" in str(err.value)
    body = functools.partial(lambda c, x: ((c[0].astype(np.int32),), None))
    with pytest.raises(TypeError) as err:
        lax.scan(body, (np.float32(0),), None, length=1)
    assert "The input carry component c[0] has type float32[]" in str(err.value)


def test_carry_type_differences_list_every_component():
    with pytest.raises(TypeError) as err:
        lax.scan(lambda x, _: ((x[0].astype("float32"), x[1].astype("float32").reshape(1, 1),
                                x[2]), None), (np.int32(0),) * 3, None, length=1)
    assert str(err.value) == (
        "scan body function carry input and carry output must have equal types, but they "
        "differ:\n\n"
        "  * the input carry component x[0] has type int32[] but the corresponding output "
        "carry component has type float32[], so the dtypes do not match;\n"
        "  * the input carry component x[1] has type int32[] but the corresponding output "
        "carry component has type float32[1,1], so the dtypes do not match, and the shapes do "
        "not match.\n\n"
        "Revise the function so that all output types match the corresponding input types.")


@pytest.mark.parametrize("body, text", [
    (lambda c, x: np.float32(0.0), "float32[]"),
    (lambda c, x: 0.0, "~float32[]"),
    (lambda c, x: (c, x, x),
     "(ShapedArray(int32[], weak_type=True), ShapedArray(float32[]), ShapedArray(float32[]))"),
    (lambda c, x: None, "None"),
], ids=["array", "weak", "triple", "none"])
def test_scan_body_output_must_be_a_pair(body, text):
    with pytest.raises(TypeError) as err:
        lax.scan(body, 0, jnp.arange(5.0))
    assert str(err.value) == f"scan body output must be a pair, got {text}."


def test_scan_body_output_pair_may_be_any_two_child_node():
    # as JAX: the pair is the output's two children (a list here)
    carry, ys = lax.scan(lambda c, x: [c + x, x * 2], 0.0, jnp.arange(3.0))
    assert float(carry) == 3.0 and ys.tolist() == [0.0, 2.0, 4.0]


def test_scan_length_and_unroll_must_be_concrete():
    f = shardc.jit(lambda n, x: lax.scan(lambda c, z: (c, z), x, (), n))
    with pytest.raises(shardc.errors.ConcretizationTypeError) as err:
        f(3, 1.0)
    assert str(err.value).startswith(
        "Abstract tracer value encountered where concrete value is expected: traced array with "
        "shape int32[]\n"
        "The `length` argument to `scan` expects a concrete `int` value. For scan-like "
        "iteration with a dynamic length, use `while_loop` or `fori_loop`.\n"
        "See https://docs.jax.dev/en/latest/errors.html#jax.errors.ConcretizationTypeError")
    g = shardc.jit(lambda n, x: lax.scan(lambda c, z: (c, z), x, (), 10, unroll=n))
    for unroll in (3, True):
        with pytest.raises(shardc.errors.ConcretizationTypeError) as err:
            g(unroll, 1.0)
        assert ("\nThe `unroll` argument to `scan` expects a concrete `int` or `bool` value.\n"
                in str(err.value))


def test_fori_loop_traced_weak_bound_takes_the_other_bounds_dtype():
    # JAX's rule: an upper bound jit was given as a Python int is weakly typed, so it takes
    # the int16 lower bound's dtype; the bounds are traced, so `unroll` is refused
    body = lambda i, c: c + i
    f = shardc.jit(lambda upper: lax.fori_loop(np.int16(0), upper, body, jnp.float32(10)))
    assert float(f(4)) == 16.0
    with pytest.raises(ValueError) as err:
        shardc.jit(lambda upper: lax.fori_loop(np.int16(0), upper, body, jnp.float32(10),
                                               unroll=3))(10)
    assert str(err.value) == ("Can only use `unroll` in `fori_loop` if the loop bounds are "
                              "statically known.")
    with pytest.raises(TypeError) as err:
        shardc.jit(lambda upper: lax.fori_loop(np.int16(0), upper, body, 0.0))(np.int32(4))
    assert str(err.value) == ("lower and upper arguments to fori_loop must have equal types, "
                              "got int16 and int32")


def test_read_only_carries_are_forwarded_as_jax_forwards_them():
    # a carry the body returns unchanged leaves the loop as its initial value, so under vmap an
    # unbatched one stays unbatched (out_axes=None works, as in JAX's tests of flax's case)
    def through_scan_in_cond(x, y):
        def branch(_, y):
            y, _ = lax.scan(lambda y, _: (y, None), y, None, length=1)
            return y
        return lax.cond(x < 0, branch, branch, x, y)

    out = shardc.vmap(through_scan_in_cond, (0, None), None)(jnp.arange(3.0), 3.0)
    assert float(out) == 3.0

    def power_loop(w, x, limit):
        step = lambda v: (v[0] + 1, v[1] @ v[2], v[2])
        _, x, w = lax.while_loop(lambda v: v[0] < limit, step, (0, x, w))
        return w, x

    w = np.eye(2, dtype=np.float32) * 2
    w_out, x_out = shardc.vmap(power_loop, (None, 0, 0), (None, 0))(w, np.ones((4, 2), np.float32),
                                                                 jnp.arange(4))
    np.testing.assert_array_equal(np.asarray(w_out), w)
    np.testing.assert_array_equal(np.asarray(x_out), np.repeat([[1], [2], [4], [8]], 2, axis=1))
    # values and derivatives through a loop with a read-only carry
    loop = lambda s: lax.fori_loop(0, 3, lambda i, c: (c[0] * c[1], c[1]), (1.0, s))[0]
    assert float(shardc.jit(loop)(2.0)) == 8.0
    assert float(shardc.grad(loop)(2.0)) == 12.0
    assert float(shardc.jacfwd(loop)(2.0)) == 12.0


def test_eager_results_of_forwarded_operands_and_carries_as_jax():
    """Eagerly a cond returning its operand runs and gives an array (weakly typed for a
    Python number); a loop's read-only carry given as a Python number comes back as it."""
    for y in (lax.cond(True, lambda v: v, lambda v: v, 1.0),
              lax.switch(0, [lambda v: v, lambda v: v], 1.0)):
        assert isinstance(y, shardc.Array) and str(shardc.typeof(y)) == "~float32[]"
    for y in (lax.fori_loop(0, 0, lambda i, v: v, 1.0),
              lax.fori_loop(0, 3, lambda i, v: v, 1.0),
              lax.while_loop(lambda v: False, lambda v: v, 1.0),
              lax.scan(lambda c, x: (c, x), 1.0, None, length=2)[0]):
        assert type(y) is float and y == 1.0
    assert float(lax.fori_loop(0, 3, lambda i, v: v * 2, 1.0)) == 8.0
    assert isinstance(lax.fori_loop(0, 3, lambda i, v: v, jnp.float32(1.0)), shardc.Array)


def test_loops_and_branches_run_in_python_with_jit_disabled():
    # JAX: under disable_jit a scan calls its body once per step, op by op, and stacks the
    # ys; a zero-length scan is an error; a while loop runs in Python where its predicate is
    # known; a cond or switch with a known predicate calls the branch it picks
    calls = []

    def body(c, x):
        calls.append(x.shape)
        return c + x, (c * 2, x.sum())

    xs = np.arange(12.0, dtype=np.float32).reshape(4, 3)
    for reverse in (False, True):
        want_c, want_ys = py_scan(lambda c, x: (c + x["a"], (c * 2, x["a"].sum())),
                                  np.zeros(3, np.float32), {"a": xs}, 4, reverse)
        calls.clear()
        with shardc.disable_jit():
            c, (ys, sums) = lax.scan(body, jnp.zeros(3), jnp.asarray(xs), reverse=reverse)
        assert calls == [(3,)] * 4
        np.testing.assert_allclose(np.asarray(c), want_c)
        np.testing.assert_allclose(np.asarray(ys), np.stack([y[0] for y in want_ys]))
        np.testing.assert_allclose(np.asarray(sums), xs.sum(1))
    with shardc.disable_jit():
        with pytest.raises(ValueError, match="^zero-length scan is not supported in "
                           r"disable_jit\(\) mode because the output type is unknown\.$"):
            lax.scan(lambda c, x: (c + x, x), 0.0, np.array([]))
        assert lax.fori_loop(0, 0, lambda i, x: x + i, 1.0) == 1.0
        assert float(lax.fori_loop(0, 5, lambda i, x: x + i, 1.0)) == 11.0
        assert int(lax.while_loop(lambda x: x < 10, lambda x: x * 2, 1)) == 16
        # a predicate traced by vmap: the loop is traced after all
        np.testing.assert_array_equal(np.asarray(shardc.vmap(
            lambda a: lax.while_loop(lambda x: x < 10, lambda x: x * 2, a))(
                jnp.array([1, 3, 20]))), [16, 12, 20])
        seen = []
        assert float(lax.cond(jnp.array(False), lambda x: seen.append("t") or x + 1,
                              lambda x: seen.append("f") or x - 1, 5.0)) == 4.0
        assert seen == ["f"]          # the other branch is never traced
        assert float(lax.switch(7, [lambda x: x, lambda x: x * 10], 2.0)) == 20.0
        np.testing.assert_array_equal(np.asarray(shardc.vmap(
            lambda p: lax.cond(p, lambda x: x + 1, lambda x: x - 1, 5.0))(
                jnp.array([True, False]))), [6.0, 4.0])
        # derivatives through the Python loops: d/dx x*1*2*3 = 6, d/dx x*2*2 (x=3) = 4
        assert float(shardc.grad(lambda x: lax.scan(lambda c, a: (c * a, c), x,
                                                     jnp.arange(1.0, 4.0))[0])(2.0)) == 6.0
        assert float(shardc.grad(lambda x: lax.while_loop(lambda c: c < 10.0,
                                                          lambda c: c * 2.0, x))(3.0)) == 4.0


def test_while_loop_with_jit_disabled_copies_numpy_carries():
    # JAX's issue 27019: the loop takes its carries as arrays, so a body adding in place to
    # a numpy carry (x += 1) does not change another carry given the same numpy array
    def body_fun(carry):
        x, y = carry
        x += 1
        return x, y + x

    def f():
        val = np.array(1.0)
        return lax.while_loop(lambda c: c[0] < 10, body_fun, (val, val))[1]

    want = 1.0 + sum(range(2, 11))          # y gains x = 2, 3, ..., 10
    assert float(f()) == want
    with shardc.disable_jit():
        out = f()
    assert float(out) == want and out.dtype == np.float32


def test_fori_loop_counter_is_weakly_typed_when_the_lower_bound_is():
    # JAX: the counter starts as the lower bound; a Python int lower bound of the counter's
    # dtype leaves it weakly typed, so an int8 carry plus the counter stays int8
    f = shardc.jit(lambda n: lax.fori_loop(0, n, lambda i, c: c + i, jnp.int8(0)))
    out = f(3)
    assert out.dtype == np.int8 and not out.weak_type and int(out) == 3
    c, i = shardc.jit(lambda n: lax.fori_loop(0, n, lambda i, c: (c[0] + i, i), (0.0, n)))(3)
    assert c.weak_type and float(c) == 3.0 and i.weak_type and i.dtype == np.int32
    assert int(i) == 2
    # a typed bound of another dtype sets the counter's dtype (typed)
    c, i = shardc.jit(lambda n: lax.fori_loop(n, 5, lambda i, c: (c[0] + i, i), (0, n)))(
        jnp.int8(3))
    assert (c.dtype, i.dtype, int(c), int(i)) == (np.int8, np.int8, 7, 4)
    assert not c.weak_type and not i.weak_type
    out = shardc.vmap(lambda n: lax.fori_loop(0, n, lambda i, c: c + i, 0))(jnp.arange(4))
    assert out.weak_type
    # a weakly typed float counter (traced float bounds) counts in floats
    c, i = shardc.jit(lambda x: lax.fori_loop(x, x + 2.0, lambda i, c: (c[0] + i, i),
                                              (jnp.float16(0), x)))(1.0)
    assert (c.dtype, float(c), i.dtype, i.weak_type, float(i)) == (
        np.float16, 3.0, np.float32, True, 2.0)
    np.testing.assert_array_equal(np.asarray(out), [0, 0, 1, 3])


def test_loops_with_jit_disabled_keep_python_numbers_and_weak_types():
    # JAX: with jit disabled a fori_loop of known bounds counts with a Python int (so a
    # Python carry stays Python), a while loop takes Python numbers as weakly typed arrays,
    # and stacked Python-number ys are weakly typed
    with shardc.disable_jit():
        out = lax.fori_loop(0, 3, lambda i, c: (c[0] + i, i), (0, 0))
        assert out == (3, 2) and all(type(v) is int for v in out)
        k, v = lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] + 0.5),
                              (0, np.float32(1.0)))
        assert k.weak_type and k.dtype == np.int32 and int(k) == 3
        assert not v.weak_type and v.dtype == np.float32 and float(v) == 2.5
        c, ys = lax.scan(lambda c, x: (c + 1.0, c), 0.0, None, length=3)
        assert c == 3.0 and ys.weak_type and ys.dtype == np.float32
        np.testing.assert_array_equal(np.asarray(ys), [0.0, 1.0, 2.0])


def test_cond_and_switch_take_a_single_operand_by_keyword():
    assert float(lax.cond(True, lambda x: x + 1, lambda x: x, operand=1.0)) == 2.0
    np.testing.assert_array_equal(
        lax.switch(1, [lambda x: x, lambda x: x * 3], operand=jnp.ones(2)), [3.0, 3.0])
    got = shardc.jit(lambda p: lax.cond(p, lambda x: x + 1, lambda x: x,
                                        operand=jnp.ones(3)))(False)
    np.testing.assert_array_equal(got, np.ones(3))
    with pytest.raises(TypeError, match="if 'operand' keyword is passed then no positional "
                                        r"operands can be passed, got operand=2.0 and "
                                        r"positional operands \(1.0,\)"):
        lax.cond(True, lambda x, y: x, lambda x, y: y, 1.0, operand=2.0)


@pytest.mark.parametrize("batch_size", [1, 2, 5])
def test_map_in_batches_of_no_slices_is_empty(batch_size):
    got = lax.map(lambda x: {"a": x["b"] * 2}, {"b": jnp.zeros((0, 2, 3))},
                  batch_size=batch_size)
    assert got["a"].shape == (0, 2, 3) and got["a"].dtype == np.float32
    got = shardc.jit(lambda v: lax.map(lambda x: x.sum(), v, batch_size=batch_size))(
        jnp.zeros((0, 4)))
    assert got.shape == (0,)


def test_loop_bodies_and_branches_are_traced_once_per_signature():
    """As JAX keeps a loop body's traced program: calling scan, while_loop, fori_loop, cond
    or switch again with the same functions and argument types runs their Python once."""
    calls = {"scan": 0, "cond_fun": 0, "body_fun": 0, "fori": 0, "true": 0, "false": 0}

    def step(c, x):
        calls["scan"] += 1
        return c + x, c * 2

    def cond_fun(x):
        calls["cond_fun"] += 1
        return x < 5

    def body_fun(x):
        calls["body_fun"] += 1
        return x + 2

    def fori_body(i, v):
        calls["fori"] += 1
        return v + i

    def on_true(x):
        calls["true"] += 1
        return x + 1

    def on_false(x):
        calls["false"] += 1
        return x - 1
    for _ in range(3):
        carry, ys = lax.scan(step, 0.0, jnp.ones(4))
        np.testing.assert_array_equal(np.asarray(ys), [0., 2., 4., 6.])
        assert float(carry) == 4.0
        assert int(lax.while_loop(cond_fun, body_fun, 0)) == 6
        assert float(lax.fori_loop(0, 5, fori_body, 0.0)) == 10.0
        assert float(lax.cond(True, on_true, on_false, 1.0)) == 2.0
    assert calls == {"scan": 1, "cond_fun": 1, "body_fun": 1, "fori": 1, "true": 1,
                     "false": 1}
    lax.scan(step, 0, jnp.arange(4))            # another signature: traced again
    assert calls["scan"] == 2
    shardc.clear_caches()
    lax.scan(step, 0.0, jnp.ones(4))
    assert calls["scan"] == 3


def test_a_loop_body_under_a_named_axis_is_traced_at_each_call():
    """The axis a vmap names is part of what the body computes (JAX's caches depend on it)."""
    def counted(_, __):
        return lax.axis_size("i"), None

    def g():
        return lax.scan(counted, 0, None, length=1)[0]
    assert int(shardc.vmap(g, axis_name="i", axis_size=2, out_axes=None)()) == 2
    assert int(shardc.vmap(g, axis_name="i", axis_size=3, out_axes=None)()) == 3
