"""vmap and shard_map together: a shard_map body closing over a batched value,
``vmap(axis_name=...)`` with collectives across the members (alone, or with mesh axes), and
``spmd_axis_name``.

References are independent of the batching code: a Python loop of single calls, and numpy
versions of every collective over a list of members in rank order (first name major).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

try:
    import shardc
except ImportError:  # run from elsewhere than the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import shardc

import shardc as jax
import shardc.numpy as jnp
from shardc import lax
from shardc.sharding import AxisType, NamedSharding, PartitionSpec as P

RNG = np.random.default_rng(7)


def assert_matches(got, want, dtype=None):
    got_array = np.asarray(got)
    want = np.asarray(want)
    assert got_array.shape == want.shape, (got_array.shape, want.shape)
    assert got_array.dtype == np.dtype(dtype or want.dtype), (got_array.dtype, want.dtype)
    np.testing.assert_allclose(got_array, want, rtol=1e-5, atol=1e-5)


def normal(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# --- a shard_map body closing over a batched value -------------------------------------------------

MESH_I = jax.make_mesh((2,), ("i",))


def scaled_rows(w, y, c):
    """A shard_map whose body closes over ``w`` and ``c``; ``y`` is its argument."""
    body = lambda block: block * w.sum() + lax.psum(block.sum(), "i") * c
    return jax.shard_map(body, mesh=MESH_I, in_specs=P("i"), out_specs=P("i"))(y)


def scaled_rows_np(w, y, c):
    return y * w.sum() + y.sum() * c


W3, Y4, C = normal(5, 3), normal(5, 4), normal(5)


@pytest.mark.parametrize("in_axes", [0, (0, 0, None), (None, 0, 0), (0, None, 0)])
@pytest.mark.parametrize("jit", [False, True])
def test_body_closes_over_batched_values(in_axes, jit):
    args = [W3, Y4, C]
    axes = (in_axes,) * 3 if isinstance(in_axes, int) else in_axes
    call_args = [a if ax is not None else a[0] for a, ax in zip(args, axes)]
    f = jax.vmap(scaled_rows, in_axes=in_axes)
    f = jax.jit(f) if jit else f
    got = f(*[jnp.asarray(a) for a in call_args])
    want = np.stack([scaled_rows_np(*[a[k] if ax is not None else a for a, ax in
                                      zip(call_args, axes)]) for k in range(5)])
    assert_matches(got, want)
    # The reference loop of single calls agrees too.
    loop = np.stack([np.asarray(scaled_rows(*[jnp.asarray(a[k]) if ax is not None else
                                              jnp.asarray(a) for a, ax in zip(call_args, axes)]))
                     for k in range(5)])
    assert_matches(got, loop)


def test_batch_axis_in_other_positions_and_out_axes():
    w, y, c = np.moveaxis(W3, 0, 1), np.moveaxis(Y4, 0, 1), C
    got = jax.vmap(scaled_rows, in_axes=(1, 1, 0), out_axes=1)(jnp.asarray(w), jnp.asarray(y),
                                                              jnp.asarray(c))
    want = np.stack([scaled_rows_np(W3[k], Y4[k], C[k]) for k in range(5)], axis=1)
    assert_matches(got, want)
    got = jax.jit(jax.vmap(scaled_rows, in_axes=(1, 1, 0), out_axes=-1))(
        jnp.asarray(w), jnp.asarray(y), jnp.asarray(c))
    assert_matches(got, want)


def test_closed_over_pytree_and_several_outputs():
    mesh = jax.make_mesh((2, 2), ("i", "j"))

    def f(params, x):
        def body(block):
            h = block @ params["w"] + params["b"]
            return h, lax.psum(h.sum(0), "i")
        sm = jax.shard_map(body, mesh=mesh, in_specs=P("i", None),
                           out_specs=(P("i", None), P()))
        return sm(x)

    params = {"w": normal(3, 4, 2), "b": normal(3, 2)}
    xs = normal(3, 6, 4)
    for g in (jax.vmap(f), jax.jit(jax.vmap(f))):
        h, total = g(jax.tree_util.tree_map(jnp.asarray, params), jnp.asarray(xs))
        want_h = np.einsum("kni,kio->kno", xs, params["w"]) + params["b"][:, None]
        assert_matches(h, want_h)
        assert_matches(total, want_h.sum(1))


@pytest.mark.parametrize("jit", [False, True])
def test_nested_vmap_closures_batched_by_either_vmap(jit):
    a, b, y = normal(3), normal(4), normal(3, 4, 6)

    def f(a_k, b_l, y_kl):
        body = lambda block: block * a_k + b_l
        return jax.shard_map(body, mesh=MESH_I, in_specs=P("i"), out_specs=P("i"))(y_kl)

    inner = lambda a_k, y_k: jax.vmap(lambda b_l, y_kl: f(a_k, b_l, y_kl))(jnp.asarray(b), y_k)
    g = jax.vmap(inner)
    g = jax.jit(g) if jit else g
    got = g(jnp.asarray(a), jnp.asarray(y))
    assert_matches(got, y * a[:, None, None] + b[None, :, None])


def test_closure_used_in_control_flow_inside_the_body():
    def f(scale, y):
        def body(block):
            return lax.fori_loop(0, 3, lambda k, acc: acc * scale + 1.0, block)
        return jax.shard_map(body, mesh=MESH_I, in_specs=P("i"), out_specs=P("i"))(y)

    scales, ys = normal(4), normal(4, 6)
    want = ys
    for _ in range(3):
        want = want * scales[:, None] + 1.0
    assert_matches(jax.vmap(f)(jnp.asarray(scales), jnp.asarray(ys)), want)
    assert_matches(jax.jit(jax.vmap(f))(jnp.asarray(scales), jnp.asarray(ys)), want)


def test_unbatched_outputs_and_an_empty_batch():
    sm = jax.shard_map(lambda x, y: (x + y, y * 2), mesh=MESH_I, in_specs=(P("i"), P("i")),
                       out_specs=(P("i"), P("i")))
    y = np.arange(4, dtype=np.float32)
    first, second = jax.vmap(sm, in_axes=(0, None), out_axes=(0, None))(jnp.ones((3, 4)),
                                                                         jnp.asarray(y))
    assert_matches(first, np.ones((3, 4), np.float32) + y)
    assert_matches(second, y * 2)
    empty = jax.vmap(sm, in_axes=(0, None))(jnp.zeros((0, 4)), jnp.asarray(y))
    assert empty[0].shape == (0, 4) and empty[1].shape == (0, 4)


def test_gradients_of_and_under_a_vmapped_closing_shard_map():
    def f(w, y):
        body = lambda block: jnp.sin(block * w.sum())
        return jax.shard_map(body, mesh=MESH_I, in_specs=P("i"), out_specs=P("i"))(y)

    w, y = normal(3, 2), normal(3, 4)
    scale = w.sum(1, keepdims=True)
    want_w = np.broadcast_to((np.cos(y * scale) * y).sum(1, keepdims=True), w.shape)
    want_y = np.cos(y * scale) * scale
    loss = lambda w, y: jax.vmap(f)(w, y).sum()
    for grad in (jax.grad(loss, argnums=(0, 1)), jax.jit(jax.grad(loss, argnums=(0, 1))),
                 jax.vmap(jax.grad(lambda w, y: f(w, y).sum(), argnums=(0, 1)))):
        got_w, got_y = grad(jnp.asarray(w), jnp.asarray(y))
        assert_matches(got_w, want_w.astype(np.float32))
        assert_matches(got_y, want_y)


def test_make_jaxpr_shows_one_shard_map_with_the_batch_axis_in_its_specs():
    text = str(jax.make_jaxpr(jax.vmap(scaled_rows))(jnp.asarray(W3), jnp.asarray(Y4),
                                                      jnp.asarray(C)))
    assert text.count("shard_map[") == 1
    # w and c enter as closed-over inputs (P(), batch axis whole); y gains a leading None.
    assert "in_specs=(P(), P(), P(None, 'i'))" in text
    assert "out_specs=(P(None, 'i'),)" in text


# --- collectives over the vmapped axis ------------------------------------------------------------

def _split(x, n, axis):
    return np.split(x, n, axis=axis)


def ref_collective(name, xs: list) -> list:
    """The collective's result for each member, members given in rank order."""
    n = len(xs)
    stacked = np.stack(xs)
    if name == "psum":
        return [stacked.sum(0)] * n
    if name == "pmean":
        return [stacked.mean(0)] * n
    if name == "pmax":
        return [stacked.max(0)] * n
    if name == "pmin":
        return [stacked.min(0)] * n
    if name == "axis_index":
        return [np.int32(r) for r in range(n)]
    if name == "all_gather":
        return [stacked] * n
    if name == "all_gather_tiled_axis1":
        return [np.concatenate(xs, axis=1)] * n
    if name == "psum_scatter":
        return _split(stacked.sum(0), n, 0)
    if name == "psum_scatter_untiled":
        return list(stacked[:, :n].sum(0))
    if name in ("ppermute", "ppermute_partial"):
        out = [np.zeros_like(x) for x in xs]
        for source, dest in PERMS[name](n):
            out[dest] = xs[source]
        return out
    if name == "all_to_all":
        return [np.concatenate([_split(x, n, 0)[r] for x in xs], axis=1) for r in range(n)]
    if name == "all_to_all_untiled":
        return [np.stack([x[r] for x in xs], axis=1) for r in range(n)]
    if name == "pbroadcast":
        return [xs[1]] * n
    raise AssertionError(name)


PERMS = {
    "ppermute": lambda n: [(k, (k + 1) % n) for k in range(n)],
    "ppermute_partial": lambda n: [(0, n - 1), (n - 1, 1)],
}

# Each call takes the member's x (shape (2n, 3)), the axis names and n, their member count.
CALLS = {
    "psum": lambda x, a, n: lax.psum(x, a),
    "pmean": lambda x, a, n: lax.pmean(x, a),
    "pmax": lambda x, a, n: lax.pmax(x, a),
    "pmin": lambda x, a, n: lax.pmin(x, a),
    "axis_index": lambda x, a, n: lax.axis_index(a),
    "all_gather": lambda x, a, n: lax.all_gather(x, a),
    "all_gather_tiled_axis1": lambda x, a, n: lax.all_gather(x, a, axis=1, tiled=True),
    "psum_scatter": lambda x, a, n: lax.psum_scatter(x, a, tiled=True),
    "psum_scatter_untiled": lambda x, a, n: lax.psum_scatter(x[:n], a),
    "ppermute": lambda x, a, n: lax.ppermute(x, a, PERMS["ppermute"](n)),
    "ppermute_partial": lambda x, a, n: lax.ppermute(x, a, PERMS["ppermute_partial"](n)),
    "all_to_all": lambda x, a, n: lax.all_to_all(x, a, 0, 1, tiled=True),
    "all_to_all_untiled": lambda x, a, n: lax.all_to_all(x[:n], a, 0, 1),
    "pbroadcast": lambda x, a, n: lax.pbroadcast(x, a, 1),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_collective_over_the_vmapped_axis(name):
    n = 4
    xs = normal(n, 2 * n, 3)
    want = np.stack(ref_collective(name, list(xs)))
    call = lambda x: CALLS[name](x, "b", n)
    assert_matches(jax.vmap(call, axis_name="b")(jnp.asarray(xs)), want)
    assert_matches(jax.jit(jax.vmap(call, axis_name="b"))(jnp.asarray(xs)), want)
    # The batch axis elsewhere in the argument and in the result.
    moved = jax.vmap(call, axis_name="b", in_axes=2, out_axes=-1)(
        jnp.asarray(np.moveaxis(xs, 0, 2)))
    assert_matches(moved, np.moveaxis(want, 0, -1))


@pytest.mark.parametrize("name", sorted(CALLS))
def test_collective_over_the_vmapped_axis_of_an_unbatched_value(name):
    n = 4
    y = normal(2 * n, 3)
    want = np.stack(ref_collective(name, [y] * n))
    f = jax.vmap(lambda k, y: CALLS[name](y, "b", n), in_axes=(0, None), axis_name="b")
    assert_matches(f(jnp.arange(n), jnp.asarray(y)), want)
    assert_matches(jax.jit(f)(jnp.arange(n), jnp.asarray(y)), want)


def _rank(order, coords, sizes):
    rank = 0
    for name in order:
        rank = rank * sizes[name] + coords[name]
    return rank


MIXED = [({"i": 2}, ("i", "b")), ({"i": 2}, ("b", "i")),
         ({"i": 2, "j": 2}, ("i", "b", "j")), ({"i": 2, "j": 2}, ("j", "b", "i"))]


@pytest.mark.parametrize("name", sorted(CALLS))
@pytest.mark.parametrize("mesh_shape, order", MIXED, ids=["-".join(o) for _, o in MIXED])
@pytest.mark.parametrize("placement", ["vmap_of_shard_map", "vmap_in_body"])
def test_collective_over_mesh_and_vmapped_axes(name, mesh_shape, order, placement):
    batch = 3
    sizes = dict(mesh_shape, b=batch)
    devices = int(np.prod(list(mesh_shape.values())))
    n = batch * devices
    mesh = jax.make_mesh(tuple(mesh_shape.values()), tuple(mesh_shape))
    axes = tuple(mesh_shape)                  # split over every mesh axis, in mesh order
    data = normal(batch, devices * 2 * n, 3)  # member b on device d holds its d-th 2n rows
    per_member = lambda x: jnp.reshape(CALLS[name](x, order, n), (-1,))
    if placement == "vmap_of_shard_map":
        f = jax.vmap(jax.shard_map(per_member, mesh=mesh, in_specs=P(axes), out_specs=P(axes)),
                     axis_name="b")
    else:
        f = jax.shard_map(jax.vmap(per_member, axis_name="b"), mesh=mesh,
                          in_specs=P(None, axes), out_specs=P(None, axes))
    coords = [dict(zip(mesh_shape, np.unravel_index(d, tuple(mesh_shape.values()))))
              for d in range(devices)]
    members = [None] * n
    for b in range(batch):
        for d in range(devices):
            members[_rank(order, dict(coords[d], b=b), sizes)] = data[b, d * 2 * n:(d + 1) * 2 * n]
    outs = ref_collective(name, members)
    want = np.stack([np.concatenate([np.reshape(outs[_rank(order, dict(coords[d], b=b), sizes)],
                                                (-1,)) for d in range(devices)])
                     for b in range(batch)])
    assert_matches(f(jnp.asarray(data)), want)
    assert_matches(jax.jit(f)(jnp.asarray(data)), want)


def test_results_the_same_for_every_member_may_leave_the_batch_axis_out():
    f = jax.vmap(lambda x: (lax.psum(x, "b"), lax.axis_index("b")), axis_name="b",
                 out_axes=(None, 0))
    total, ranks = f(jnp.arange(4.0))
    assert_matches(total, np.float32(6.0))
    assert_matches(ranks, np.arange(4, dtype=np.int32))
    # No mapped argument: axis_size gives the member count.
    g = jax.vmap(lambda x: lax.axis_index("b") + x, in_axes=None, axis_size=3, axis_name="b")
    assert_matches(g(jnp.float32(1.0)), np.array([1.0, 2.0, 3.0], np.float32))


def test_every_collective_has_a_named_axis_rule():
    from compiler.batching import named_axis_rules
    from ir import primitives as prims
    missing = [name for name, prim in prims.registry.items()
               if prim.kind == "collective" and prim not in named_axis_rules]
    assert missing == []


# --- loops and branches under vmap run on whole batches -------------------------------------------

def _loop(f, *args):
    """The reference: one call per member, stacked (results may be pytrees)."""
    size = len(args[0])
    per_member = [f(*[jnp.asarray(a[k]) for a in args]) for k in range(size)]
    return jax.tree_util.tree_map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *per_member)


def _scan_fn(c, xs):
    def step(carry, x):
        carry = carry * 0.5 + x
        return carry, (carry.sum(), x * 2)
    return lax.scan(step, c, xs)


@pytest.mark.parametrize("in_axes", [(0, 0), (None, 0), (0, None), (0, 1)])
def test_scan_under_vmap(in_axes):
    c, xs = normal(3, 2), normal(3, 5, 2)
    args = [c if in_axes[0] is not None else c[0],
            xs if in_axes[1] == 0 else xs[0] if in_axes[1] is None else np.moveaxis(xs, 0, 1)]
    members = [c if in_axes[0] is not None else np.broadcast_to(c[0], c.shape),
               xs if in_axes[1] is not None else np.broadcast_to(xs[0], xs.shape)]
    want = _loop(_scan_fn, *members)
    for f in (jax.vmap(_scan_fn, in_axes=in_axes), jax.jit(jax.vmap(_scan_fn, in_axes=in_axes))):
        got = f(*[jnp.asarray(a) for a in args])
        jax.tree_util.tree_map(assert_matches, got, want)


def test_cond_and_switch_under_vmap():
    def f(p, i, x):
        y = lax.cond(p, lambda v: v * 2, lambda v: v - 1, x)
        return lax.switch(i, [lambda v: v, lambda v: v * 10, lambda v: -v], y)

    ps = np.array([True, False, True, False])
    idx = np.array([0, 1, 2, 7], np.int32)
    xs = normal(4, 3)
    want = _loop(f, ps, idx, xs)
    for g in (jax.vmap(f), jax.jit(jax.vmap(f))):
        assert_matches(g(jnp.asarray(ps), jnp.asarray(idx), jnp.asarray(xs)), want)
    # An unbatched predicate picks one branch for the whole batch.
    g = jax.vmap(f, in_axes=(None, None, 0))
    assert_matches(g(True, 2, jnp.asarray(xs)), -(xs * 2))


def test_collectives_over_the_vmapped_axis_inside_loops_and_branches():
    def f(x, p):
        x = lax.fori_loop(0, 3, lambda k, acc: acc + lax.pmean(acc, "b"), x)
        return lax.cond(p, lambda v: lax.psum(v, "b"), lambda v: v * 0, x)

    xs = normal(4, 2)
    want = xs
    for _ in range(3):
        want = want + want.mean(0)
    for p in (True, False):
        expected = np.broadcast_to(want.sum(0), xs.shape) if p else np.zeros_like(xs)
        for g in (jax.vmap(f, in_axes=(0, None), axis_name="b"),
                  jax.jit(jax.vmap(f, in_axes=(0, None), axis_name="b"))):
            assert_matches(g(jnp.asarray(xs), p), expected.astype(np.float32))

    # Inside a shard_map body, with a mesh axis among the names.
    def body(block):
        step = lambda k, a: a + lax.psum(a, ("i", "b"))
        return jax.vmap(lambda r: lax.fori_loop(0, 2, step, r), axis_name="b")(block)

    sm = jax.shard_map(body, mesh=MESH_I, in_specs=P(None, "i"), out_specs=P(None, "i"))
    data = normal(3, 4)
    want = data
    for _ in range(2):
        halves = want.reshape(3, 2, 2)
        want = (halves + halves.sum((0, 1))).reshape(3, 4)
    assert_matches(sm(jnp.asarray(data)), want)
    assert_matches(jax.jit(sm)(jnp.asarray(data)), want)


def test_while_loop_under_vmap():
    def f(x, limit):
        return lax.while_loop(lambda c: c[0] < limit, lambda c: (c[0] + 1, c[1] * 2.0 + 1.0),
                              (0, x))

    xs, limits = normal(4, 2), np.array([0, 3, 1, 5], np.int32)
    want = _loop(f, xs, limits)
    for g in (jax.vmap(f), jax.jit(jax.vmap(f))):          # a batched predicate
        jax.tree_util.tree_map(assert_matches, g(jnp.asarray(xs), jnp.asarray(limits)), want)
    g = jax.vmap(f, in_axes=(0, None))                      # the same predicate for all
    want = _loop(f, xs, np.full(4, 3, np.int32))
    jax.tree_util.tree_map(assert_matches, g(jnp.asarray(xs), 3), want)

    # Members in lockstep: the loop runs until no member's predicate holds.
    def h(x):
        return lax.while_loop(lambda a: a.sum() < 100.0, lambda a: lax.psum(a, "b") + 1.0, x)

    want = np.ones((3, 2), np.float32)
    while want[0].sum() < 100.0:
        want = np.broadcast_to(want.sum(0) + 1.0, want.shape)
    assert_matches(jax.vmap(h, axis_name="b")(jnp.ones((3, 2))), want)


def test_remat_and_staged_shard_maps_under_vmap():
    body = jax.checkpoint(lambda a: jnp.sin(lax.psum(a, "b")) * 2)
    xs = normal(3, 2)
    got = jax.vmap(jax.grad(lambda a: body(a).sum()), axis_name="b")(jnp.asarray(xs))
    # psum's transpose sums the members' cotangents: 3 members' cos(total) * 2.
    want = np.broadcast_to(np.cos(xs.sum(0)) * 2 * 3, xs.shape)
    assert_matches(got, want.astype(np.float32))
    # A gradient's shard_map, staged, under vmap: one shard_map on the whole batch.
    sm = jax.shard_map(lambda x: lax.psum((x * x).sum(), "i"), mesh=MESH_I, in_specs=P("i"),
                       out_specs=P())
    loss = lambda x: sm(jnp.sin(x))
    data = normal(3, 4)
    want = _loop(jax.grad(loss), data)
    assert_matches(jax.vmap(jax.grad(loss))(jnp.asarray(data)), want)
    assert_matches(jax.jit(jax.vmap(jax.grad(loss)))(jnp.asarray(data)), want)
    text = str(jax.make_jaxpr(jax.vmap(jax.grad(loss)))(jnp.asarray(data)))
    assert "in_specs=(P(None, 'i')" in text
    # With spmd_axis_name the staged shard_map's batch is split too.
    sm_xi = jax.shard_map(lambda x: lax.psum((x * x).sum(), "i"), mesh=MESH_XI,
                          in_specs=P("i"), out_specs=P())
    loss_xi = lambda x: sm_xi(jnp.sin(x))
    data = normal(4, 4)
    want = _loop(jax.grad(loss_xi), data)
    for f in (jax.vmap(jax.grad(loss_xi), spmd_axis_name="x"),
              jax.jit(jax.vmap(jax.grad(loss_xi), spmd_axis_name="x"))):
        assert_matches(f(jnp.asarray(data)), want)
    text = str(jax.make_jaxpr(jax.vmap(jax.grad(loss_xi), spmd_axis_name="x"))(
        jnp.asarray(data)))
    assert "in_specs=(P('x', 'i')" in text


def test_every_higher_order_primitive_has_a_batching_rule():
    """Loops, branches, remat and shard_map run the whole batch at once (control_rules); the
    custom-derivative calls batch their primal program through their own batching rules."""
    from compiler.batching import batching_rules, control_rules
    from ir import primitives as prims
    missing = [name for name, prim in prims.registry.items()
               if prim.kind == "higher" and prim not in control_rules
               and prim not in batching_rules]
    assert missing == []


def test_axis_size_and_psum_of_one():
    def f(x):
        return x * lax.axis_size("b") + lax.psum(1, "b")
    assert_matches(jax.vmap(f, axis_name="b")(jnp.ones(5)), np.full(5, 10.0, np.float32))

    def body(x):
        return x + lax.axis_size(("i", "b")) + lax.psum(1, ("b", "i")) * 100
    sm = jax.shard_map(body, mesh=MESH_I, in_specs=P("i"), out_specs=P("i"))
    got = jax.vmap(sm, axis_name="b")(jnp.zeros((3, 4)))
    assert_matches(got, np.full((3, 4), 606.0, np.float32))


def test_nested_vmaps_with_two_names():
    xs = normal(2, 3, 4)

    def f(x):
        return (lax.psum(x, "a"), lax.psum(x, ("a", "c")), lax.axis_index(("a", "c")),
                lax.all_gather(x, "c"))

    outs = jax.vmap(jax.vmap(f, axis_name="c"), axis_name="a")(jnp.asarray(xs))
    assert_matches(outs[0], np.broadcast_to(xs.sum(0), xs.shape))
    assert_matches(outs[1], np.broadcast_to(xs.sum((0, 1)), xs.shape))
    assert_matches(outs[2], np.arange(6, dtype=np.int32).reshape(2, 3))
    assert_matches(outs[3], np.broadcast_to(xs[:, None], (2, 3, 3, 4)))


def test_reduction_dtypes_follow_the_collectives():
    ints = jnp.arange(4, dtype=jnp.int32)
    assert_matches(jax.vmap(lambda x: lax.pmean(x, "b"), axis_name="b")(ints),
                   np.full(4, 1.5, np.float32))
    flags = jnp.asarray(np.array([True, False, True, True]))
    assert_matches(jax.vmap(lambda x: lax.psum(x, "b"), axis_name="b")(flags),
                   np.full(4, 3, np.int32))
    assert_matches(jax.vmap(lambda x: lax.pmax(x, "b"), axis_name="b")(ints),
                   np.full(4, 3, np.int32))


def test_per_example_gradients_with_a_mean_over_the_batch():
    xs = normal(4, 3)
    w = normal(3)

    def loss(w, x):
        return lax.pmean((x @ w) ** 2, "b")

    grads = jax.vmap(jax.grad(loss), in_axes=(None, 0), axis_name="b")(jnp.asarray(w),
                                                                      jnp.asarray(xs))
    # Member k's gradient is that of the members' total loss with respect to member k's own
    # copy of w (the transpose of a collective over the members sums their cotangents):
    # central differences of total(ws) = sum_k mean_j (x_j . ws_j)^2.
    total = lambda ws: sum(np.mean([(xs[j] @ ws[j]) ** 2 for j in range(4)]) for _ in range(4))
    ws = np.tile(w.astype(np.float64), (4, 1))
    want = np.zeros((4, 3))
    for k in range(4):
        for d in range(3):
            step = np.zeros_like(ws)
            step[k, d] = 1e-4
            want[k, d] = (total(ws + step) - total(ws - step)) / 2e-4
    np.testing.assert_allclose(np.asarray(grads), want, rtol=1e-3, atol=1e-4)
    assert grads.dtype == np.float32


def test_gradient_through_a_checked_body_with_the_vmapped_axis():
    sm = jax.shard_map(lambda x: lax.psum(x * x, ("i", "b")), mesh=MESH_I, in_specs=P("i"),
                       out_specs=P())
    data = normal(3, 4)
    got = jax.vmap(jax.grad(lambda x: sm(x).sum()), axis_name="b")(jnp.asarray(data))
    # psum's typed transpose (a pvary) sums nothing over the members: 2 x per member.
    assert_matches(got, 2 * data)


@settings(derandomize=True, deadline=None, max_examples=12)
@given(size=st.integers(1, 5), rank=st.integers(1, 3), data=st.data())
def test_generated_reductions_and_gathers(size, rank, data):
    shape = data.draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank))
    batch_axis = data.draw(st.integers(0, rank))
    gather_axis = data.draw(st.integers(0, rank))
    xs = np.random.default_rng(size * 10 + rank).standard_normal([size] + shape).astype(
        np.float32)

    def f(x):
        return (lax.psum(x, "b"), lax.pmax(x, "b"), lax.all_gather(x, "b", axis=gather_axis),
                lax.axis_index("b"))

    got = jax.vmap(f, axis_name="b", in_axes=batch_axis)(jnp.asarray(np.moveaxis(xs, 0,
                                                                                  batch_axis)))
    assert_matches(got[0], np.broadcast_to(xs.sum(0), xs.shape))
    assert_matches(got[1], np.broadcast_to(xs.max(0), xs.shape))
    gathered = np.moveaxis(xs, 0, gather_axis)
    assert_matches(got[2], np.broadcast_to(gathered, (size,) + gathered.shape))
    assert_matches(got[3], np.arange(size, dtype=np.int32))


# --- errors ----------------------------------------------------------------------------------------

def test_a_name_both_vmapped_and_a_mesh_axis_is_an_error():
    sm = jax.shard_map(lambda x: lax.psum(x, "i"), mesh=MESH_I, in_specs=P("i"),
                       out_specs=P())
    with pytest.raises(ValueError, match="axis name 'i' is both a vmap axis_name and an axis "
                                         "of the enclosing shard_map's mesh"):
        jax.vmap(sm, axis_name="i")(jnp.ones((3, 4)))


def test_unbound_name_after_the_vmap_returns():
    jax.vmap(lambda x: lax.psum(x, "b"), axis_name="b")(jnp.ones(3))
    with pytest.raises(NameError, match="Found an unbound axis name: b"):
        lax.psum(jnp.ones(3), "b")


# --- spmd_axis_name --------------------------------------------------------------------------------

MESH_XI = jax.make_mesh((2, 2), ("x", "i"))


def test_spmd_axis_name_splits_the_batch_of_a_shard_map():
    body = lambda block: block * 2 + lax.axis_index("i")
    sm = jax.shard_map(body, mesh=MESH_XI, in_specs=P("i"), out_specs=P("i"))
    data = normal(4, 8)
    want = (data * 2 + np.repeat([0, 1], 4)).astype(np.float32)
    for f in (jax.vmap(sm, spmd_axis_name="x"), jax.jit(jax.vmap(sm, spmd_axis_name="x"))):
        got = f(jnp.asarray(data))
        assert_matches(got, want)
        assert got.sharding == NamedSharding(MESH_XI, P("x", "i"))
    # Each device runs its 2 of the 4 members: blocks f32[2,4], varying over x and i.
    text = str(jax.make_jaxpr(jax.vmap(sm, spmd_axis_name="x"))(jnp.asarray(data)))
    assert "in_specs=(P('x', 'i'),)" in text and "out_specs=(P('x', 'i'),)" in text
    assert "c:f32[2,4]{x,i}" in text
    got = jax.vmap(sm, in_axes=1, out_axes=1, spmd_axis_name="x")(jnp.asarray(data.T.copy()))
    assert_matches(got, want.T)
    assert got.sharding == NamedSharding(MESH_XI, P("i", "x"))
    # Without it, the batch axis is not split.
    assert jax.vmap(sm)(jnp.asarray(data)).sharding == NamedSharding(MESH_XI, P(None, "i"))


def test_spmd_axis_name_with_collectives_and_closures_keeps_the_batch_semantics():
    data, scale = normal(4, 8), normal(4)

    def f(x, s):
        def body(block):
            total = lax.psum(block.sum(), ("i", "b"))
            return block * s + total + lax.axis_index("b") * 100
        return jax.shard_map(body, mesh=MESH_XI, in_specs=P("i"), out_specs=P("i"))(x)

    want = (data * scale[:, None] + data.sum() + np.arange(4)[:, None] * 100).astype(np.float32)
    for g in (jax.vmap(f, axis_name="b", spmd_axis_name="x"),
              jax.jit(jax.vmap(f, axis_name="b", spmd_axis_name="x"))):
        got = g(jnp.asarray(data), jnp.asarray(scale))
        assert_matches(got, want)
        assert got.sharding == NamedSharding(MESH_XI, P("x", "i"))


def test_spmd_axis_name_places_the_batch_axis_of_sharding_constraints():
    # Auto axes: the constraint lays out (on Explicit ones it asserts the type)
    mesh = jax.make_mesh((2, 2), ("x", "i"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    sharding = NamedSharding(mesh, P("i"))
    f = jax.vmap(lambda r: lax.with_sharding_constraint(r * 2, sharding), spmd_axis_name="x")
    data = normal(4, 6)
    for g in (f, jax.jit(f)):
        got = g(jnp.asarray(data))
        assert_matches(got, data * 2)
        assert got.sharding == NamedSharding(mesh, P("x", "i"))


def test_spmd_axis_name_of_a_gradient_through_an_unchecked_shard_map():
    """With the check off, the gradient's residuals and the cotangents' sums and scalings span
    every mesh axis but the one vmap splits its batch over (batching adds that one), as JAX's.
    Unchecked, each device's cotangent is the output's, divided by the devices the output is
    unmapped over (2 along i, then 2 along x summed again), so a half gets cos(its sum) / 2."""
    sm = jax.shard_map(lambda b: jnp.sin(jnp.sum(b)), mesh=MESH_XI, in_specs=P("i"),
                       out_specs=P(), check_vma=False)
    data = normal(4, 6).astype(np.float32)
    halves = data.reshape(4, 2, 3).sum(axis=2)
    want = np.repeat(np.cos(halves) / 2, 3, axis=1).astype(np.float32)
    g = jax.grad(sm)
    for f in (jax.vmap(g, spmd_axis_name="x"), jax.jit(jax.vmap(g, spmd_axis_name="x")),
              jax.vmap(jax.jit(g), spmd_axis_name="x"), jax.vmap(g)):
        assert_matches(f(jnp.asarray(data)), want)
    assert_matches(jax.jit(g)(jnp.asarray(data[0])), want[0])


@pytest.mark.parametrize("case, message", [
    ("in_specs", "vmap spmd_axis_name cannot appear in shard_map in_specs"),
    ("out_specs", "vmap spmd_axis_name cannot appear in shard_map out_specs"),
    ("indivisible", r"vmap spmd_axis_name=\('x',\) splits the batch axis of size 3 over "
                    "mesh axes of total size 2, which does not divide it"),
    ("unknown", r"vmap spmd_axis_name=\('z',\) names 'z', which is not an axis of the "
                r"shard_map's mesh \('x', 'i'\)"),
    ("collective", r"vmap spmd_axis_name \('x',\) splits the batch over mesh axis 'x', so "
                   "the shard_map body cannot also use it in psum"),
])
def test_spmd_axis_name_errors(case, message):
    spec_in = P("x") if case == "in_specs" else P("i")
    spec_out = P("x") if case == "out_specs" else P("i")
    body = (lambda b: b + lax.psum(b.sum(), "x")) if case == "collective" else (lambda b: b)
    sm = jax.shard_map(body, mesh=MESH_XI, in_specs=spec_in, out_specs=spec_out,
                       check_vma=case != "out_specs")
    name = "z" if case == "unknown" else "x"
    batch = 3 if case == "indivisible" else 4
    with pytest.raises(ValueError, match=message):
        jax.vmap(sm, spmd_axis_name=name)(jnp.zeros((batch, 8)))


def test_a_collective_over_the_spmd_axis_on_values_every_member_shares():
    """A shard_map body's collective over the axis vmap's spmd_axis_name splits the batch
    over acts as written on a value no member owns (unbatched); with JAX's switch
    jax_disable_vmap_shmap_error the specs may name that axis too. The values are the
    per-member computation's (JAX gives the same)."""
    mesh = jax.make_mesh((2,), ("i",), axis_types=(AxisType.Auto,))
    sm = jax.shard_map(lambda x, y: x + lax.all_gather(y, "i", tiled=True), mesh=mesh,
                       in_specs=(P(None), P("i")), out_specs=P(None), check_vma=False)
    xs, y = np.arange(32).reshape(4, 8), np.arange(8)
    run = jax.vmap(sm, in_axes=(0, None), spmd_axis_name="i")
    with pytest.raises(ValueError, match="vmap spmd_axis_name cannot appear in shard_map "
                                         "in_specs"):
        run(xs, y)
    jax.config.update("jax_disable_vmap_shmap_error", True)
    try:
        for f in (run, jax.jit(run)):
            np.testing.assert_array_equal(f(xs, y), xs + y)
    finally:
        jax.config.update("jax_disable_vmap_shmap_error", False)


def test_spmd_axis_name_must_be_names():
    with pytest.raises(ValueError, match="spmd_axis_name must be a mesh axis name"):
        jax.vmap(lambda x: x, spmd_axis_name=("x", "x"))
