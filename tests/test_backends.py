"""The fast backend against the reference backend, the oracle (DESIGN: runtime/vectorized.py).

Every program runs under ``jit`` on both backends, each jitted afresh, and every output must
agree: type, sharding and the buffer of every device, integers and booleans bit for bit,
floats within a tight tolerance (group reductions add members in the reference's order, so
most floats agree bit for bit too). The programs: every collective on 1-D, 2-D and 3-D meshes
over one axis and over tuples of axes in both orders, with inputs that vary over some axes and
are replicated over others; the tutorial's examples and the suites' bodies; random programs
mixing ordinary primitives and collectives; the boundary (reshards, host values, results fed
back in, arrays made by the other backend). Programs the fast backend must run stacked are
checked to have run stacked, not on its reference fallback.

Nothing here times anything.
"""
from __future__ import annotations

import contextlib
import functools
import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardc
import shardc.numpy as jnp
from compiler import tree
from compiler.backend import get_backend, set_backend
from ir import primitives as prims
from ir.sharding import ReplicationError
from ir import collectives as coll
from ir import dtypes
from shardc import lax
from shardc.sharding import NamedSharding, PartitionSpec as P
from runtime.collectives import group_rules
from runtime.reference import ReferenceBackend
from runtime.vectorized import FastBackend, backend_named
from runtime.vectorized_check import BackendMismatch, CheckingBackend, arrays_agree
from runtime.vectorized_rules import PER_DEVICE, stacked_rules

SETTINGS = dict(derandomize=True, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

MESHES = [((8,), ("i",)), ((4,), ("i",)), ((4, 2), ("x", "y")), ((2, 4), ("x", "y")),
          ((2, 2, 2), ("x", "y", "z"))]


# --- running a program on both backends ---------------------------------------------------------

@contextlib.contextmanager
def installed(backend):
    previous = get_backend()
    set_backend(backend)
    try:
        yield backend
    finally:
        set_backend(previous)


def assert_agree(expected, got):
    ref_leaves, ref_tree = tree.tree_flatten(expected)
    fast_leaves, fast_tree = tree.tree_flatten(got)
    assert ref_tree == fast_tree
    for k, (ref, fast) in enumerate(zip(ref_leaves, fast_leaves)):
        why = arrays_agree(ref, fast)
        assert not why, f"output {k}: {why}"


def run_both(make, *args, stacked=True, calls=2):
    """``shardc.jit(make())(*args)`` on the reference backend and on the fast one (``calls``
    times, so the cached plan and the arrays' cached stacked forms run too); all must agree.
    ``stacked``: the fast backend ran every shard_map stacked (False: on its fallback)."""
    with installed(ReferenceBackend()):
        expected = shardc.jit(make())(*args)
    fast = FastBackend()
    with installed(fast):
        f = shardc.jit(make())
        for _ in range(calls):
            got = f(*args)
            assert_agree(expected, got)
    if stacked is not None:
        ran = fast.counts
        if stacked:
            assert ran["reference"] == 0 and ran["stacked"] >= calls, ran
        else:
            assert ran["stacked"] == 0 and ran["reference"] >= calls, ran
    return got


def make_blocks(rng, n, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, (n,) + tuple(shape)).astype(bool)
    if dtype.kind == "f" or dtype == dtypes.bfloat16:
        return rng.standard_normal((n,) + tuple(shape)).astype(dtype)
    return rng.integers(-9, 10, (n,) + tuple(shape)).astype(dtype)


# --- every collective, inputs varying over some axes and replicated over others -----------------

@st.composite
def collective_setups(draw):
    """A mesh, the collective's axes (one, or a tuple in any order), and the input's spec:
    the mesh axes it is split over on dimension 0 (any subset, any order)."""
    shape, names = draw(st.sampled_from(MESHES))
    order = draw(st.permutations(names))
    k = draw(st.integers(1, len(names)))
    axes = tuple(order[:k])
    axis_name = axes[0] if k == 1 and draw(st.booleans()) else axes
    split = tuple(draw(st.permutations(names))[:draw(st.integers(0, len(names)))])
    return shardc.make_mesh(shape, names), axes, axis_name, split


def run_collective(mesh, split, block, dtype, collective, seed):
    """The collective applied to blocks split by ``split`` (replicated over the other axes);
    every device's result block is an output (check_vma off, out_specs over all axes)."""
    n = math.prod(mesh.shape[a] for a in split)
    x = make_blocks(np.random.default_rng(seed), n, block, dtype)
    x = x.reshape((n * block[0],) + tuple(block[1:]))
    everywhere = P(tuple(mesh.axis_names))

    def make():
        def body(x):
            y = collective(x)
            return jnp.reshape(y, (1,) + tuple(y.shape))
        return shardc.shard_map(body, mesh=mesh, in_specs=P(split or None),
                                out_specs=everywhere, check_vma=False)
    return run_both(make, x)


def group_size(mesh, axes):
    return math.prod(mesh.shape[a] for a in axes)


@pytest.mark.parametrize("name", ["psum", "pmean", "pmax", "pmin"])
@settings(max_examples=30, **SETTINGS)
@given(data=st.data())
def test_reductions(name, data):
    mesh, axes, axis_name, split = data.draw(collective_setups())
    dtype = data.draw(st.sampled_from(["float32", "int32", dtypes.bfloat16, "float16"]
                                      + ["bool"] * (name == "psum")))
    block = [data.draw(st.integers(1, 3)) for _ in range(data.draw(st.integers(1, 3)))]
    op = getattr(lax, name)
    run_collective(mesh, split, block, dtype, lambda x: op(x, axis_name),
                   data.draw(st.integers(0, 2**16)))


@settings(max_examples=60, **SETTINGS)
@given(data=st.data())
def test_all_gather(data):
    mesh, axes, axis_name, split = data.draw(collective_setups())
    dtype = data.draw(st.sampled_from(["float32", "int32", "bool"]))
    block = [data.draw(st.integers(1, 3)) for _ in range(data.draw(st.integers(1, 3)))]
    tiled = data.draw(st.booleans())
    rank = len(block) if tiled else len(block) + 1
    axis = data.draw(st.integers(-rank, rank - 1))
    run_collective(mesh, split, block, dtype,
                   lambda x: lax.all_gather(x, axis_name, axis=axis, tiled=tiled),
                   data.draw(st.integers(0, 2**16)))


@settings(max_examples=60, **SETTINGS)
@given(data=st.data())
def test_psum_scatter(data):
    mesh, axes, axis_name, split = data.draw(collective_setups())
    n = group_size(mesh, axes)
    dtype = data.draw(st.sampled_from(["float32", "int32", dtypes.bfloat16]))
    block = [data.draw(st.integers(1, 3)) for _ in range(data.draw(st.integers(1, 3)))]
    tiled = data.draw(st.booleans())
    dim = data.draw(st.integers(0, len(block) - 1))
    block[dim] = n * data.draw(st.integers(1, 2)) if tiled else n
    run_collective(mesh, split, block, dtype,
                   lambda x: lax.psum_scatter(x, axis_name, scatter_dimension=dim, tiled=tiled),
                   data.draw(st.integers(0, 2**16)))


@settings(max_examples=60, **SETTINGS)
@given(data=st.data())
def test_ppermute(data):
    mesh, axes, axis_name, split = data.draw(collective_setups())
    n = group_size(mesh, axes)
    dtype = data.draw(st.sampled_from(["float32", "int32", "bool"]))
    block = [data.draw(st.integers(1, 3)) for _ in range(data.draw(st.integers(1, 3)))]
    targets = data.draw(st.permutations(range(n)))
    sources = data.draw(st.lists(st.integers(0, n - 1), unique=True, max_size=n))
    perm = [(s, targets[s]) for s in sources]
    run_collective(mesh, split, block, dtype, lambda x: lax.ppermute(x, axis_name, perm),
                   data.draw(st.integers(0, 2**16)))


@settings(max_examples=60, **SETTINGS)
@given(data=st.data())
def test_all_to_all(data):
    mesh, axes, axis_name, split = data.draw(collective_setups())
    n = group_size(mesh, axes)
    dtype = data.draw(st.sampled_from(["float32", "int32", "bool"]))
    block = [data.draw(st.integers(1, 3)) for _ in range(data.draw(st.integers(1, 3)))]
    tiled = data.draw(st.booleans())
    r = len(block)
    split_axis = data.draw(st.integers(0, r - 1))
    concat_axis = data.draw(st.integers(0, r - 1))
    block[split_axis] = n * data.draw(st.integers(1, 2)) if tiled else n
    run_collective(mesh, split, block, dtype,
                   lambda x: lax.all_to_all(x, axis_name, split_axis, concat_axis, tiled=tiled),
                   data.draw(st.integers(0, 2**16)))


@settings(max_examples=40, **SETTINGS)
@given(data=st.data())
def test_pbroadcast_and_axis_index(data):
    mesh, axes, axis_name, split = data.draw(collective_setups())
    n = group_size(mesh, axes)
    dtype = data.draw(st.sampled_from(["float32", "int32", "bool"]))
    block = [data.draw(st.integers(1, 3)) for _ in range(data.draw(st.integers(1, 3)))]
    source = data.draw(st.integers(0, n - 1))

    def collective(x):
        y = lax.pbroadcast(x, axis_name, source)
        rank = lax.axis_index(axis_name)
        return y, (y.astype(np.int32) if dtype == "bool" else y) + rank.astype(
            np.int32 if dtype == "bool" else dtype)

    mesh_axes = P(tuple(mesh.axis_names))
    count = math.prod(mesh.shape[a] for a in split)
    x = make_blocks(np.random.default_rng(data.draw(st.integers(0, 2**16))), count, block, dtype)
    x = x.reshape((count * block[0],) + tuple(block[1:]))

    def make():
        def body(x):
            return tuple(jnp.reshape(y, (1,) + tuple(y.shape)) for y in collective(x))
        return shardc.shard_map(body, mesh=mesh, in_specs=P(split or None),
                                out_specs=(mesh_axes, mesh_axes), check_vma=False)
    run_both(make, x)


@settings(max_examples=40, **SETTINGS)
@given(data=st.data())
def test_ppermute_results_returned_as_they_are(data):
    # A ppermute whose result is only returned is a relabelling: each device's buffer is a
    # view of its source's block; fed to another shard_map it is gathered then.
    mesh, axes, axis_name, split = data.draw(collective_setups())
    n = group_size(mesh, axes)
    targets = data.draw(st.permutations(range(n)))
    sources = data.draw(st.lists(st.integers(0, n - 1), unique=True, max_size=n))
    perm = [(s, targets[s]) for s in sources]
    count = math.prod(mesh.shape[a] for a in split)
    x = make_blocks(np.random.default_rng(data.draw(st.integers(0, 2**16))), count, (2, 3),
                    "float32").reshape(count * 2, 3)
    spec = P(split or None)
    make = lambda: shardc.shard_map(lambda b: lax.ppermute(b, axis_name, perm), mesh=mesh,
                                    in_specs=spec, out_specs=P(tuple(mesh.axis_names)),
                                    check_vma=False)
    out = run_both(make, x)
    again = lambda: shardc.shard_map(lambda b: b * 2.0, mesh=mesh,
                                     in_specs=P(tuple(mesh.axis_names)),
                                     out_specs=P(tuple(mesh.axis_names)))
    run_both(again, out)


def test_pbroadcast_copies_the_source_block_bitwise():
    # A collective broadcast copies the root's block: -0.0 stays -0.0 on both backends.
    mesh = shardc.make_mesh((4,), ("i",))
    x = np.array([-0.0, 1.0, -0.0, 2.0], np.float32)
    make = lambda: shardc.shard_map(lambda b: lax.pbroadcast(b, "i", 2), mesh=mesh,
                                    in_specs=P("i"), out_specs=P(), check_vma=False)
    got = run_both(make, x)
    assert np.signbit(np.asarray(got)).tolist() == [True]


# --- the tutorial and the suites' programs ------------------------------------------------------

def _matmul_basic(mesh):
    @functools.partial(shardc.shard_map, mesh=mesh, in_specs=(P("x", "y"), P("y", None)),
                       out_specs=P("x", None))
    def matmul_basic(a_block, b_block):
        return lax.psum(jnp.dot(a_block, b_block), "y")
    return matmul_basic


def test_matmul_basic_seed_and_placed_inputs():
    mesh = shardc.make_mesh((4, 2), ("x", "y"))
    a = jnp.arange(8 * 16.).reshape(8, 16)
    b = jnp.arange(16 * 4.).reshape(16, 4)
    c = run_both(lambda: _matmul_basic(mesh), a, b)
    np.testing.assert_array_equal(np.asarray(c), np.asarray(a) @ np.asarray(b))
    a = shardc.device_put(a, NamedSharding(mesh, P("x", "y")))
    b = shardc.device_put(b, NamedSharding(mesh, P("y", None)))
    run_both(lambda: _matmul_basic(mesh), a, b)


def test_matmul_with_sharding_constraint_outside_shard_map():
    # Auto axes: a constraint lays the value out (with no mesh set, one naming Explicit
    # axes is JAX's ValueError)
    mesh = shardc.make_mesh((4, 2), ("x", "y"), axis_types=(shardc.sharding.AxisType.Auto,) * 2)
    rng = np.random.default_rng(2)
    a = rng.standard_normal((8, 16)).astype(np.float32)
    b = rng.standard_normal((16, 4)).astype(np.float32)

    def make():
        def f(a, b):
            c = _matmul_basic(mesh)(a * 2.0, b)
            c = lax.with_sharding_constraint(c, NamedSharding(mesh, P("x", None)))
            return jnp.tanh(c) + 1.0, c.sum()
        return f
    run_both(make, a, b)


def test_tutorial_psum_examples_on_1d_and_2d_meshes():
    mesh = shardc.make_mesh((4,), ("i",))
    x = jnp.arange(16.)
    run_both(lambda: shardc.shard_map(lambda b: lax.psum(b, "i"), mesh=mesh,
                                      in_specs=P("i"), out_specs=P(None)), x)
    mesh2 = shardc.make_mesh((4, 2), ("i", "j"))
    y = jnp.arange(32.).reshape(4, 8)
    for axes, out in [("i", P(None, "j")), ("j", P("i", None)), (("i", "j"), P()),
                      (("j", "i"), P())]:
        run_both(lambda: shardc.shard_map(lambda b: lax.psum(b, axes), mesh=mesh2,
                                          in_specs=P("i", "j"), out_specs=out), y)


def _mlp(seed=0, sizes=(784, 32, 16, 10), batch=64):
    rng = np.random.default_rng(seed)
    params = [(rng.standard_normal((m, n)).astype(np.float32) / np.sqrt(m),
               rng.standard_normal(n).astype(np.float32) * 0.1)
              for m, n in zip(sizes[:-1], sizes[1:])]
    inputs = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    targets = rng.standard_normal((batch, sizes[-1])).astype(np.float32)
    return params, (inputs, targets)


def predict(params, inputs):
    for W, b in params:
        outputs = jnp.dot(inputs, W) + b
        inputs = jnp.maximum(outputs, 0)
    return outputs


def test_data_parallel_loss_and_gradient_step():
    params, batch = _mlp()
    mesh = shardc.make_mesh((8,), ("batch",))
    batch = shardc.device_put(batch, NamedSharding(mesh, P("batch")))
    params = shardc.device_put(params, NamedSharding(mesh, P()))

    def make():
        @functools.partial(shardc.shard_map, mesh=mesh, in_specs=(P(), P("batch")),
                           out_specs=P())
        def loss_dp(params, local_batch):
            inputs, targets = local_batch
            predictions = predict(params, inputs)
            local_loss = jnp.mean(jnp.sum((predictions - targets) ** 2, axis=-1))
            return lax.pmean(local_loss, "batch")
        return loss_dp
    run_both(make, params, batch)

    def make_step():
        def step(params, batch):
            @functools.partial(shardc.shard_map, mesh=mesh, in_specs=(P(), P("batch")),
                               out_specs=(P(), P()))
            def grads(params, local_batch):
                def local_loss(params):
                    inputs, targets = local_batch
                    return jnp.mean(jnp.sum((predict(params, inputs) - targets) ** 2, -1))
                value, g = shardc.value_and_grad(local_loss)(params)
                return lax.pmean(value, "batch"), lax.pmean(g, "batch")
            value, g = grads(params, batch)
            return value, [(W - 0.1 * dW, b - 0.1 * db) for (W, b), (dW, db) in zip(params, g)]
        return step
    run_both(make_step, params, batch)


def test_fsdp_all_gathers_weights():
    params, batch = _mlp(sizes=(16, 16, 8), batch=16)
    mesh = shardc.make_mesh((8,), ("batch",))

    def make():
        @functools.partial(shardc.shard_map, mesh=mesh, in_specs=(P("batch"), P("batch")),
                           out_specs=P("batch"))
        def predict_fsdp(params_frag, inputs):
            for W_frag, b_frag in params_frag:
                W = lax.all_gather(W_frag, "batch", tiled=True)
                b = lax.all_gather(b_frag, "batch", tiled=True)
                inputs = jnp.maximum(jnp.dot(inputs, W) + b, 0)
            return inputs
        return predict_fsdp
    run_both(make, params, batch[0])


def test_suite_ring_bodies_run_stacked():
    # The tutorial's rings (T17, T19): fori_loops of ppermutes, indexed by axis_index.
    from test_control_flow import (matmul_ring_gather, matmul_ring_slices,
                                   psum_scatter_ring_fori, psum_scatter_ring_python)
    mesh = shardc.make_mesh((4,), ("i",))
    x16 = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2], np.int32)
    for ring in (psum_scatter_ring_python, psum_scatter_ring_fori):
        run_both(lambda: shardc.shard_map(ring, mesh=mesh, in_specs=P("i"), out_specs=P("i")),
                 x16)
    rng = np.random.default_rng(19)
    lhs = rng.standard_normal((8, 8)).astype(np.float32)
    rhs = rng.standard_normal((8, 4)).astype(np.float32)
    for body in (matmul_ring_slices, matmul_ring_gather):
        run_both(lambda: shardc.shard_map(body, mesh=mesh, in_specs=(P("i", None), P("i", None)),
                                          out_specs=P("i", None)), lhs, rhs)


def test_loops_and_branches_with_collectives():
    mesh = shardc.make_mesh((4, 2), ("x", "y"))
    rng = np.random.default_rng(23)
    x = rng.standard_normal((8, 6)).astype(np.float32)

    def make_while():
        def body(b):
            def cond(carry):
                k, total = carry
                return k < 3                         # the same on every device
            def step(carry):
                k, total = carry
                return k + 1, lax.psum(total, "y") * 0.5 + b
            return lax.while_loop(cond, step, (np.int32(0), b))[1]
        return shardc.shard_map(body, mesh=mesh, in_specs=P("x", "y"), out_specs=P("x", "y"))
    run_both(make_while, x)

    def make_scan():
        def body(b):
            def step(carry, row):
                carry = lax.ppermute(carry, "x", [(0, 1), (1, 2), (2, 3), (3, 0)]) + row
                return carry, lax.pmax(carry, ("y", "x"))
            return lax.scan(step, jnp.zeros_like(b[0]), b, reverse=True)
        return shardc.shard_map(body, mesh=mesh, in_specs=P("x", "y"),
                                out_specs=(P(("x", "y")), P(None, ("x", "y"))), check_vma=False)
    run_both(make_scan, x)

    def make_cond(scale):
        def body(b):
            return lax.cond(scale > 1.0, lambda v: lax.psum(v, "x"),
                            lambda v: lax.all_gather(v, "y", tiled=True)[2:] * 2.0, b)
        return shardc.shard_map(body, mesh=mesh, in_specs=P("x", "y"), out_specs=P("x", "y"),
                                check_vma=False)
    for scale in (0.5, 2.0):
        run_both(lambda: make_cond(scale), x)


def test_varying_predicates_around_collectives_fall_back_to_the_reference():
    mesh = shardc.make_mesh((4,), ("i",))
    x = np.arange(8, dtype=np.float32)

    def make():
        def body(b):
            return lax.cond(lax.axis_index("i") % 2 == 0, lambda v: lax.psum(v, "i") * 2.0,
                            lambda v: lax.psum(v, "i") + 1.0, b)
        return shardc.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
    run_both(make, x, stacked=False)


def test_control_flow_without_collectives_runs_per_device_inside_a_stacked_body():
    mesh = shardc.make_mesh((4, 2), ("x", "y"))
    x = np.arange(32, dtype=np.float32).reshape(8, 4)

    def make():
        def body(b):
            total = lax.fori_loop(0, 3, lambda k, c: c * 1.5 + k, b)
            picked = lax.cond(b.sum() > 20.0, lambda v: v - 1.0, lambda v: v + 1.0, total)
            return lax.psum(picked, "y")
        return shardc.shard_map(body, mesh=mesh, in_specs=P("x", "y"), out_specs=P("x"))
    run_both(make, x)


def test_debug_print_falls_back_and_prints_in_the_reference_order(capsys):
    mesh = shardc.make_mesh((4,), ("i",))
    x = np.arange(8, dtype=np.float32)

    def make():
        def body(b):
            shardc.debug.print("block {}", b)
            return lax.psum(b, "i")
        return shardc.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P())
    with installed(ReferenceBackend()):
        shardc.jit(make())(x)
    expected = capsys.readouterr().out
    run_both(make, x, stacked=False, calls=1)
    assert capsys.readouterr().out == expected * 2


def test_runtime_replication_check_raises_the_same_error():
    mesh = shardc.make_mesh((4,), ("i",))
    x = np.arange(8, dtype=np.float32)
    make = lambda: shardc.shard_map(lambda b: b * 2.0, mesh=mesh, in_specs=P("i"),
                                    out_specs=P(), check_vma="runtime")
    messages = []
    for backend in (ReferenceBackend(), FastBackend()):
        with installed(backend), pytest.raises(ReplicationError) as err:
            shardc.jit(make())(x.reshape(4, 2))
        messages.append(str(err.value))
    assert messages[0] == messages[1]
    ok = lambda: shardc.shard_map(lambda b: lax.psum(b, "i"), mesh=mesh, in_specs=P("i"),
                                  out_specs=P(), check_vma="runtime")
    run_both(ok, x)


# --- ordinary primitives, stacked: shapes, reductions, contractions, indexing -------------------

def _ops_body(x, w):
    y = jnp.sin(x) * 1.0001 + 0.1
    z = jnp.transpose(y) @ w                       # dot_general on transposed blocks
    z = z - jnp.mean(z, axis=0, keepdims=True)
    s = jnp.concatenate([z, jnp.flip(z, 1)], axis=1)[:, 1:5]
    r = jnp.reshape(s, (-1,))
    r = jnp.where(r > 0, r, -r * 0.5) + jnp.cumsum(r)
    q = jnp.argmax(jnp.reshape(r, (4, -1)), axis=1).astype(np.float32)
    m = jnp.max(x) + jnp.min(y) + jnp.prod(jnp.tanh(x[:2, :2]))
    i = jnp.arange(4, dtype=np.int32) * 3 // 2 % 5
    e = jnp.einsum("ij,jk->ik", x, jnp.transpose(x))
    return (lax.psum(r, "i"), q + m, i, lax.pmax(e, "i"), jnp.any(x > 1.5)[None],
            jnp.pad(x, 1))


def test_ordinary_primitives_over_stacked_blocks():
    mesh = shardc.make_mesh((4,), ("i",))
    rng = np.random.default_rng(5)
    x = rng.standard_normal((16, 4)).astype(np.float32)
    w = rng.standard_normal((4, 4)).astype(np.float32)

    def make():
        return shardc.shard_map(_ops_body, mesh=mesh, in_specs=(P("i"), P()),
                                out_specs=(P(), P("i"), P(), P(), P("i"), P("i")),
                                check_vma=False)
    run_both(make, x, w)


def test_integer_and_boolean_programs_are_bitwise():
    mesh = shardc.make_mesh((2, 4), ("x", "y"))
    rng = np.random.default_rng(7)
    a = rng.integers(-50, 50, (8, 8)).astype(np.int32)

    def make():
        def body(b):
            c = (b * 3 - 7) // 2 + jnp.remainder(b, 5) + jnp.abs(b) % 3
            m = lax.psum(jnp.maximum(c, -c), "y")
            flags = lax.pmax((c > 0).astype(np.int32), ("y", "x"))
            return m, flags, lax.psum(b > 0, "x")
        return shardc.shard_map(body, mesh=mesh, in_specs=P("x", "y"),
                                out_specs=(P("x"), P(), P(None, "y")))
    run_both(make, a)


@pytest.mark.parametrize("mesh_shape,names,axes", [
    ((8,), ("i",), "i"), ((4, 2), ("x", "y"), "y"), ((4, 2), ("x", "y"), "x"),
    ((2, 4), ("x", "y"), ("y", "x")), ((2, 2, 2), ("x", "y", "z"), ("x", "z"))])
@pytest.mark.parametrize("block", [(1,), (2,), (3, 5), (1, 1), (7, 1)])
def test_float_reductions_are_bitwise_the_references(mesh_shape, names, axes, block):
    """psum, pmean, pmax and pmin of floats add (compare) members in rank order on both
    backends, whatever the block's shape and the group's place in memory: the results are
    equal bit for bit, not only close."""
    mesh = shardc.make_mesh(mesh_shape, names)
    rng = np.random.default_rng(sum(mesh_shape) * 31 + len(block))
    n = math.prod(mesh_shape)
    x = (rng.standard_normal((n * block[0],) + block[1:])
         * 10.0 ** rng.integers(-4, 5, (n * block[0],) + block[1:])).astype(np.float32)

    def make():
        def body(b):
            return (lax.psum(b, axes), lax.pmean(b, axes), lax.pmax(b, axes),
                    lax.pmin(b, axes))
        return shardc.shard_map(body, mesh=mesh, in_specs=P(names), out_specs=P(
            tuple(a for a in names if a not in ((axes,) if isinstance(axes, str) else axes))))
    with installed(ReferenceBackend()):
        expected = shardc.jit(make())(x)
    with installed(FastBackend()):
        got = shardc.jit(make())(x)
    for want, have in zip(expected, got):
        for a, b in zip(want.buffers, have.buffers):
            np.testing.assert_array_equal(np.asarray(b), np.asarray(a))


def test_large_reductions_split_across_threads_are_bitwise_the_same(monkeypatch):
    """A reduction split by column ranges over threads combines each column's members in the
    same order: equal bit for bit to one thread and to the reference."""
    import runtime.vectorized_rules as rules
    mesh = shardc.make_mesh((8,), ("i",))
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((8 * 4, 61)) * 10.0 ** rng.integers(-4, 5, (32, 61))
         ).astype(np.float32)

    def make():
        return shardc.shard_map(lambda b: (lax.psum(b, "i"), lax.pmax(b, "i"),
                                           lax.pmean(b, "i")),
                                mesh=mesh, in_specs=P("i"), out_specs=P())
    with installed(ReferenceBackend()):
        expected = shardc.jit(make())(x)
    monkeypatch.setattr(rules, "PARALLEL_BYTES", 0)
    calls = []
    real = rules.reduce_rows

    def counting(fn, flat, initial=None):
        calls.append(flat.shape)
        return real(fn, flat, initial)
    monkeypatch.setattr(rules, "reduce_rows", counting)
    for count in ("1", "3"):
        monkeypatch.setenv("SHARDC_THREADS", count)
        with installed(FastBackend()):
            got = shardc.jit(make())(x)
        for want, have in zip(expected, got):
            np.testing.assert_array_equal(np.asarray(have), np.asarray(want))
    assert calls, "the stacked reductions did not go through reduce_rows"


def test_dynamic_slices_invariant_and_varying_starts():
    mesh = shardc.make_mesh((4,), ("i",))
    x = np.arange(64, dtype=np.float32).reshape(16, 4)

    def make():
        def body(b):
            k = lax.axis_index("i")
            fixed = lax.dynamic_slice_in_dim(b, 1, 2, axis=0)
            moving = lax.dynamic_slice_in_dim(b, k, 2, axis=0)
            put = lax.dynamic_update_slice_in_dim(b, moving * 0.0, k, axis=0)
            same = lax.dynamic_update_slice_in_dim(b, fixed + 1.0, 2, axis=0)
            taken = jnp.take(b, jnp.array([3, 0, 1]), axis=0)
            return fixed, moving, put, same, taken
        return shardc.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
    run_both(make, x)


def test_random_bits_run_per_device():
    mesh = shardc.make_mesh((4,), ("i",))
    keys = np.arange(8, dtype=np.uint32).reshape(4, 2)

    def make():
        def body(key):
            return shardc.random.normal(key[0], (3,))[None]
        return shardc.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
    run_both(make, keys)


def test_every_primitive_has_a_stacked_rule_or_runs_per_device():
    # Front-end primitives a body can hold; control flow, prints and nested shard_maps are
    # decided per program (collectives inside, or not).
    decided = set(prims.CONTROL_FLOW) | {prims.debug_print_p, prims.callback_p,
                                         prims.shard_map_p, prims.remat_p}
    # inlined before a backend meets them (compiler/inline_calls.py); custom_lin raises first
    decided |= {*prims.CUSTOM_CALLS, prims.custom_lin_p, prims.name_p, prims.linear_solve_p}
    # done and removed when the program is compiled (compiler/inspection.py); checks are
    # refused or dropped then (compiler/checks.py)
    decided |= {prims.inspect_sharding_p, prims.check_p}
    # the fast backend runs the mesh-level program: no front-end-only collective reaches it
    front_end = {c.prim for c in coll.FRONT_END}
    # a node whose slices are data (ragged_all_to_all) runs its reference rule group by group
    by_group = {c.prim.name for c in coll.NODES
                if c.prim not in stacked_rules and c.prim in group_rules}
    assert by_group == {"ragged_all_to_all"}
    missing = [p.name for p in prims.all_primitives()
               if p not in stacked_rules and p not in PER_DEVICE and p not in decided
               and p not in front_end and p.name not in by_group]
    assert missing == []
    assert not [p.name for p in front_end if p in stacked_rules]


def test_runtime_names_no_front_end_collective():
    root = Path(__file__).resolve().parent.parent / "runtime"
    names = sorted(f"{c.name}_p" for c in coll.FRONT_END)
    for path in sorted(root.glob("*.py")):
        source = path.read_text()
        named = [n for n in names if re.search(rf"\b{n}\b", source)]
        assert not named, f"runtime/{path.name} names {named}"


# --- random programs mixing ordinary primitives and collectives ---------------------------------

OPS = ["sin", "tanh", "scale", "add_input", "mul_input", "psum", "pmean", "pmax", "pmin",
       "ppermute", "pbroadcast", "axis_index", "gather_back", "scatter_back", "all_to_all",
       "transpose", "center", "matmul"]


@st.composite
def random_programs(draw):
    shape, names = draw(st.sampled_from(MESHES))
    mesh = shardc.make_mesh(shape, names)
    specs = [P(tuple(draw(st.permutations(names))[:draw(st.integers(0, len(names)))]) or None)
             for _ in range(2)]
    steps = []
    for _ in range(draw(st.integers(1, 8))):
        op = draw(st.sampled_from(OPS))
        order = draw(st.permutations(names))
        axes = tuple(order[:draw(st.integers(1, len(names)))])
        n = math.prod(mesh.shape[a] for a in axes)
        extra = {"perm": [(s, t) for s, t in zip(range(n), draw(st.permutations(range(n))))
                          if draw(st.booleans())],
                 "source": draw(st.integers(0, n - 1)), "input": draw(st.integers(0, 1))}
        steps.append((op, axes, extra))
    out_axes = tuple(draw(st.permutations(names))[:draw(st.integers(0, len(names)))])
    return mesh, specs, steps, out_axes


def _apply(op, axes, extra, x, inputs):
    if op == "sin":
        return jnp.sin(x)
    if op == "tanh":
        return jnp.tanh(x) * 2.0
    if op == "scale":
        return x * 0.75 + 0.25
    if op == "add_input":
        return x + inputs[extra["input"]]
    if op == "mul_input":
        return x * jnp.cos(inputs[extra["input"]])
    if op in ("psum", "pmean", "pmax", "pmin"):
        return getattr(lax, op)(x, axes) * (0.5 if op == "psum" else 1.0)
    if op == "ppermute":
        return lax.ppermute(x, axes, extra["perm"])
    if op == "pbroadcast":
        return lax.pbroadcast(x, axes, extra["source"])
    if op == "axis_index":
        return x + lax.axis_index(axes).astype(np.float32)
    if op == "gather_back":        # all_gather, then keep a chunk: the block shape stays
        g = lax.all_gather(x, axes, axis=1, tiled=True)
        return g[:, :x.shape[1]] + g[:, -x.shape[1]:]
    if op == "scatter_back":
        return lax.all_gather(lax.psum_scatter(x, axes, scatter_dimension=0, tiled=True),
                              axes, axis=0, tiled=True)
    if op == "all_to_all":
        return lax.all_to_all(x, axes, 1, 1, tiled=True)
    if op == "transpose":
        return jnp.transpose(x)
    if op == "center":
        return x - jnp.mean(x, axis=1, keepdims=True)
    return jnp.dot(x, jnp.transpose(inputs[extra["input"]])) * 0.125


@settings(max_examples=120, **SETTINGS)
@given(program=random_programs(), seed=st.integers(0, 2**16))
def test_random_programs(program, seed):
    mesh, specs, steps, out_axes = program
    rng = np.random.default_rng(seed)
    arrays = []
    for spec in specs:     # blocks of 8x8: every group size of these meshes divides 8
        rows = 8 * math.prod(mesh.shape[a] for a in (spec[0] or ()) if spec)
        arrays.append(rng.standard_normal((rows, 8)).astype(np.float32))

    def make():
        def body(x, w):
            inputs = (x, w)
            for op, axes, extra in steps:
                x = _apply(op, axes, extra, x, inputs)
            return x, x[None]
        return shardc.shard_map(body, mesh=mesh, in_specs=tuple(specs),
                                out_specs=(P(out_axes or None), P(tuple(mesh.axis_names))),
                                check_vma=False)
    run_both(make, *arrays)


# --- the boundary ---------------------------------------------------------------------------------

def test_reshards_host_values_and_results_fed_back():
    # Auto axes: values laid out otherwise are resharded at the boundary
    mesh = shardc.make_mesh((4, 2), ("x", "y"), axis_types=(shardc.sharding.AxisType.Auto,) * 2)
    rng = np.random.default_rng(11)
    a = rng.standard_normal((8, 16)).astype(np.float32)
    placed = {spec: shardc.device_put(a, NamedSharding(mesh, spec))
              for spec in (P(), P("x"), P("y", "x"), P(None, ("x", "y")))}

    def make():
        return shardc.shard_map(lambda b: jnp.sin(b) * 2.0, mesh=mesh, in_specs=P("x", "y"),
                                out_specs=P("x", "y"))
    for value in [a, a.astype(np.float64)] + list(placed.values()):
        run_both(make, value)

    # A result fed back: its stacked form is the next call's input, resharded or not.
    with installed(FastBackend()):
        first = shardc.jit(make())(a)
    for spec in (P("x", "y"), P("y"), P(("y", "x")), P(None, "x")):
        run_both(lambda: shardc.shard_map(lambda b: lax.psum(b * 1.5, "x"), mesh=mesh,
                                          in_specs=spec, out_specs=spec, check_vma=False),
                 first)


def test_outputs_claimed_replicated_but_different_feed_the_reference():
    # check_vma off and out_specs P() over values that differ: each device keeps its own block
    # (as the reference keeps it), and a later shard_map must see those very blocks.
    mesh = shardc.make_mesh((4,), ("i",))
    x = np.arange(8, dtype=np.float32)
    differ = lambda: shardc.shard_map(lambda b: b * 2.0, mesh=mesh, in_specs=P("i"),
                                      out_specs=P(), check_vma=False)
    run_both(differ, x)
    per_device = lambda: shardc.shard_map(lambda b: b[None] + 0.0, mesh=mesh, in_specs=P(),
                                          out_specs=P("i"), check_vma=False)
    with installed(ReferenceBackend()):
        ref_made = shardc.jit(differ())(x)
    with installed(FastBackend()):
        fast_made = shardc.jit(differ())(x)
    assert_agree(ref_made, fast_made)
    run_both(per_device, ref_made, stacked=False)
    run_both(per_device, fast_made)


def test_arrays_from_the_other_backend_and_host_views():
    mesh = shardc.make_mesh((4, 2), ("x", "y"), axis_types=(shardc.sharding.AxisType.Auto,) * 2)
    x = np.arange(64, dtype=np.float32).reshape(8, 8)
    make = lambda: shardc.shard_map(lambda b: lax.psum(b, "y"), mesh=mesh,
                                    in_specs=P("x", "y"), out_specs=P("x"))
    with installed(ReferenceBackend()):
        ref = shardc.jit(make())(x)
    fast_out = run_both(make, ref)
    shards = fast_out.addressable_shards
    assert [s.device.id for s in shards] == list(range(8))
    for s in shards:
        np.testing.assert_array_equal(np.asarray(s.data), np.asarray(fast_out)[s.index])
    before = [np.array(b) for b in fast_out.buffers]
    with pytest.raises(ValueError, match="read-only"):
        np.asarray(fast_out)[0] += 1     # a view of the array, read-only as JAX's
    host = np.array(fast_out)
    host += 1          # np.array: the caller's own copy, not the devices' buffers
    for b, kept in zip(fast_out.buffers, before):
        np.testing.assert_array_equal(b, kept)
    np.testing.assert_array_equal(np.asarray(fast_out) + 1, host)


def test_a_mesh_of_64_devices_in_3d_with_tuples_of_axes():
    from ir.sharding import Mesh
    from runtime.devices import Device
    devices = np.array([Device(k) for k in range(64)], dtype=object).reshape(4, 4, 4)
    mesh = Mesh(devices, ("a", "b", "c"))
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 4)).astype(np.float32)
    w = rng.standard_normal((4, 4)).astype(np.float32)

    def make():
        def body(x, w):
            y = lax.psum(x @ w, ("c", "a"))
            return lax.all_gather(y, ("b",), tiled=True), lax.psum_scatter(y, "c", tiled=True)
        return shardc.shard_map(body, mesh=mesh, in_specs=(P(("a", "b")), P()),
                                out_specs=(P(None), P(None)), check_vma=False)
    run_both(make, x, w)


# --- backend selection and the differential backend ----------------------------------------------

def test_backend_names():
    assert isinstance(backend_named("reference"), ReferenceBackend)
    assert isinstance(backend_named("fast"), FastBackend)
    assert isinstance(backend_named("check"), CheckingBackend)
    with pytest.raises(ValueError, match="unknown shardc backend 'gpu'"):
        backend_named("gpu")
    previous = get_backend()
    try:
        shardc.set_backend_name("check")
        assert isinstance(get_backend(), CheckingBackend)
    finally:
        set_backend(previous)


def test_the_default_is_fast_and_the_environment_chooses(tmp_path):
    import subprocess
    import sys
    script = "import shardc; from compiler.backend import get_backend; print(get_backend().name)"
    names = []
    for env in ({}, {"SHARDC_BACKEND": "reference"}, {"SHARDC_BACKEND": "check"}):
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              env={**__import__("os").environ, "SHARDC_BACKEND": "", **env})
        names.append(done.stdout.strip())
    assert names == ["fast", "reference", "check"]


def test_checking_backend_reports_a_mismatch():
    mesh = shardc.make_mesh((4,), ("i",))
    x = np.arange(8, dtype=np.float32)
    make = lambda: shardc.shard_map(lambda b: lax.psum(b, "i"), mesh=mesh, in_specs=P("i"),
                                    out_specs=P())
    with installed(CheckingBackend()):
        np.testing.assert_array_equal(np.asarray(shardc.jit(make())(x)), x.reshape(4, 2).sum(0))
    broken = CheckingBackend()
    broken.fast.execute = lambda module, args: [shardc.numpy.zeros((2,))]
    with installed(broken), pytest.raises(BackendMismatch, match="output 0 of the fast"):
        shardc.jit(make())(x)


def test_checking_backend_prints_once_and_compares_what_was_printed(capsys):
    mesh = shardc.make_mesh((4,), ("i",))
    x = np.arange(8, dtype=np.float32)

    def body(b):
        shardc.debug.print("block {}", b)
        return b * 2

    make = lambda: shardc.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
    with installed(ReferenceBackend()):
        shardc.jit(make())(x)
    alone = capsys.readouterr().out
    assert alone.count("block") == 4
    with installed(CheckingBackend()):
        shardc.jit(make())(x)
    assert capsys.readouterr().out == alone          # once, not once per backend
    broken = CheckingBackend()
    real = broken.fast.execute

    def chatty(module, args):
        print("an extra line")
        return real(module, args)
    broken.fast.execute = chatty
    with installed(broken), pytest.raises(BackendMismatch, match="the fast backend printed"):
        shardc.jit(make())(x)


def test_checking_tolerance_is_relative_to_the_arrays_scale():
    """Matmuls may differ in their last bits; a sum with cancellation lifts that above a
    tolerance relative to each element. The check allows rtol of the array's largest
    magnitude, and no more."""
    from runtime.vectorized_check import blocks_agree
    ref = np.array([40.0, 0.0377], np.float32)
    assert blocks_agree(ref, ref + np.array([0.0, 3e-6], np.float32)) == ""
    why = blocks_agree(ref, ref + np.array([0.0, 3e-3], np.float32))
    assert "values differ at 1 elements, first at (1,)" in why
    # small elements badly wrong beside a large one are still caught
    assert blocks_agree(np.array([1e4, 1e-3], np.float32),
                        np.array([1e4, 0.1], np.float32)) != ""
    assert blocks_agree(np.array([1e6, 1.0], np.float32),
                        np.array([1e6, 9.0], np.float32)) != ""
    assert blocks_agree(np.array([1, 2]), np.array([1, 3])).startswith("values differ")


def test_per_device_programs_are_built_only_when_read():
    """The fast backend runs a body stacked: jit builds no per-device program until one is
    read, and then builds every device's, as lowering always did."""
    from compiler.lowering import lower_shard_map
    mesh = shardc.make_mesh((4, 2), ("x", "y"))
    a = np.arange(64, dtype=np.float32).reshape(8, 8)
    f = shardc.jit(shardc.shard_map(lambda b: lax.psum(b, "y"), mesh=mesh,
                                    in_specs=P("x", "y"), out_specs=P("x")))
    with installed(FastBackend()):
        np.testing.assert_array_equal(np.asarray(f(a)),
                                      a.reshape(8, 2, 4).sum(1))
    (lowered,) = f.lower(a).module.all_shard_maps()
    assert not lowered.built
    programs = lowered.device_programs
    assert lowered.built and len(programs) == 8
    assert [dp.position for dp in programs] == list(range(8))
    eqn = f.lower(a).module.program.eqns[0]
    again = lower_shard_map(eqn, lowered.in_shardings).device_programs
    assert [str(dp) for dp in again] == [str(dp) for dp in programs]
    assert "all_reduce" in str(programs[3])


def test_threaded_reductions_keep_the_callers_error_settings(monkeypatch):
    """np.errstate does not cross threads: the reduction threads take the caller's."""
    import runtime.vectorized_rules as rules
    monkeypatch.setattr(rules, "PARALLEL_BYTES", 0)
    monkeypatch.setenv("SHARDC_THREADS", "2")
    big = np.full((4, 64), 2e38, np.float32)
    with np.errstate(over="raise"):
        with pytest.raises(FloatingPointError):
            rules.reduce_rows(np.add, big)
    with np.errstate(over="ignore"):
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert np.isinf(rules.reduce_rows(np.add, big)).all()


def test_reduction_threads_are_remade_in_a_forked_child(monkeypatch):
    import os
    import runtime.vectorized_rules as rules
    if not hasattr(os, "fork"):
        pytest.skip("no fork here")
    monkeypatch.setattr(rules, "PARALLEL_BYTES", 0)
    monkeypatch.setenv("SHARDC_THREADS", "2")
    flat = np.arange(4 * 4096, dtype=np.float32).reshape(4, 4096)
    want = flat.sum(0)
    np.testing.assert_array_equal(rules.reduce_rows(np.add, flat), want)
    import time
    time.sleep(0.2)                               # the parent's threads wait idle
    pid = os.fork()
    if pid == 0:                                  # the child: exit 0 only if it finishes
        try:
            ok = np.array_equal(rules.reduce_rows(np.add, flat), want)
        finally:
            os._exit(0 if ok else 1)
    import time
    deadline = time.time() + 20
    while time.time() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail("the forked child's reduction did not finish")


# --- eager collectives run on the selected backend -----------------------------------------------

def _eager_psum_and_index(mesh):
    return shardc.shard_map(lambda b: lax.psum(b, "x") * lax.axis_index("y"), mesh=mesh,
                            in_specs=P("x", "y"), out_specs=P(None, "y"))


def test_eager_bodies_run_stacked_on_the_fast_backend():
    mesh = shardc.make_mesh((4, 2), ("x", "y"))
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    blocks = x.reshape(4, 2, 2, 2).sum(0)         # [row, y, column]: the psum over 'x'
    want = (blocks * np.array([0, 1])[None, :, None]).reshape(2, 4)
    fast = FastBackend()
    with installed(fast):
        got = _eager_psum_and_index(mesh)(x)
    np.testing.assert_array_equal(np.asarray(got), want)
    # every equation (the psum, the axis_index, its conversion to float32 and the product):
    # each one stacked program over the eight devices
    assert fast.counts == {"stacked": 4, "reference": 0}
    with installed(ReferenceBackend()):
        np.testing.assert_array_equal(np.asarray(_eager_psum_and_index(mesh)(x)), want)


def _eager_chain(a, b):
    c = a * 2.0
    d = jnp.sin(c) + b                  # b: one block for every device of 'x'
    e = lax.psum(d, "x")
    f = jnp.dot(c, b.T)
    print(c.shape)                      # a print of the body's own (Python's), not a debug one
    return c, d, e, f, a


def test_an_eager_body_on_the_fast_backend_gives_the_reference_blocks():
    # the values a body reuses after later equations are as computed (no equation writes into
    # another's result), the inputs are left as they came, and every device's block is the
    # reference's, bit for bit
    mesh = shardc.make_mesh((4, 2), ("x", "y"))
    rng = np.random.default_rng(3)
    a = rng.standard_normal((8, 6)).astype(np.float32)
    b = rng.standard_normal((2, 6)).astype(np.float32)
    f = shardc.shard_map(_eager_chain, mesh=mesh, in_specs=(P("x", "y"), P(None, "y")),
                         out_specs=(P("x", "y"), P("x", "y"), P(None, "y"), P("x", "y"),
                                    P("x", "y")))
    fast = FastBackend()
    with installed(fast):
        got = f(a, shardc.device_put(b, shardc.NamedSharding(mesh, P(None, "y"))))
    assert fast.counts["reference"] == 0 and fast.counts["stacked"] >= 6
    with installed(ReferenceBackend()):
        want = f(a, b)
    for g, w in zip(got, want):
        assert g.sharding == w.sharding and g.dtype == w.dtype
        for gb, wb in zip(g.buffers, w.buffers):
            np.testing.assert_array_equal(gb, wb)
    np.testing.assert_array_equal(np.asarray(got[4]), a)


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
@pytest.mark.parametrize("spec", [P(), P("x")])
def test_an_eager_body_takes_a_numpy_matrix_as_an_array(spec):
    # np.matrix stays 2-d under reshapes: the stacked form is made of a plain array
    mesh = shardc.make_mesh((4, 2), ("x", "y"))
    f = shardc.shard_map(lambda m: m * 2, mesh=mesh, in_specs=spec, out_specs=spec)
    m = np.matrix(np.arange(32, dtype=np.float32).reshape(8, 4))
    for backend in (FastBackend(), ReferenceBackend()):
        with installed(backend):
            got = f(m)
        assert type(np.asarray(got)) is np.ndarray and got.shape == (8, 4)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(m) * 2)


def test_an_eager_collective_with_a_print_runs_on_the_reference_as_declared(capsys):
    mesh = shardc.make_mesh((4,), ("i",))

    def body(b):
        def step(c, _):
            shardc.debug.print("c {}", c)
            return c + lax.psum(c, "i"), None
        return lax.scan(step, b, None, length=1)[0]

    fast = FastBackend()
    with installed(fast):
        shardc.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"))(np.ones(4, np.int32))
    assert fast.counts["reference"] == 1 and fast.fallbacks["debug_print"] == 1
    assert capsys.readouterr().out.count("c [1]") == 4


def test_checking_backend_compares_eager_collectives():
    mesh = shardc.make_mesh((4, 2), ("x", "y"))
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    broken = CheckingBackend()
    real = broken.fast.run_mesh_program

    def off_by_one(mesh, program, inputs):
        outs = real(mesh, program, inputs)
        return [[block + 1 for block in blocks] for blocks in outs]

    broken.fast.run_mesh_program = off_by_one
    with installed(broken), pytest.raises(BackendMismatch,
                                          match="output 0 of the fast backend differs from the "
                                                "reference backend's at mesh position 0"):
        _eager_psum_and_index(mesh)(x)


def test_per_device_runs_are_counted_by_their_declared_reason():
    from runtime.vectorized_rules import per_device_runs
    mesh = shardc.make_mesh((4,), ("i",))
    before = dict(per_device_runs)

    def body(b):
        key = shardc.random.fold_in(shardc.random.key(0), lax.axis_index("i"))
        return b + shardc.random.uniform(key, b.shape)         # random bits: per device

    with installed(FastBackend()):
        shardc.jit(shardc.shard_map(body, mesh=mesh, in_specs=P("i"),
                                    out_specs=P("i")))(np.zeros(8, np.float32))
    assert per_device_runs["per_device_operands"] > before["per_device_operands"]

    def loop(b):    # a trip count that differs between devices, no collective inside
        n = lax.axis_index("i")
        return lax.fori_loop(0, n, lambda k, c: c + 1.0, b)

    with installed(FastBackend()):
        got = shardc.jit(shardc.shard_map(loop, mesh=mesh, in_specs=P("i"),
                                          out_specs=P("i")))(np.zeros(8, np.float32))
    np.testing.assert_array_equal(np.asarray(got), np.repeat(np.arange(4.0), 2))
    assert per_device_runs["divergent_control"] > before["divergent_control"]


@pytest.mark.parametrize("node", ["broadcast", "all_to_all", "reduce_scatter"])
def test_a_node_without_a_stacked_rule_runs_its_group_rule(node, monkeypatch):
    # a new communication node needs only its group rule (runtime/collectives.py): the fast
    # backend then runs it group by group, counted, with the reference's results
    from ir import collectives as coll
    from runtime import vectorized_rules
    prim = {"broadcast": coll.broadcast_node, "all_to_all": coll.all_to_all_node,
            "reduce_scatter": coll.reduce_scatter_node}[node]
    mesh = shardc.make_mesh((4, 2), ("x", "y"))
    x = np.arange(64, dtype=np.float32).reshape(8, 8)
    body = {"broadcast": lambda b: lax.pbroadcast(b, "x", source=2),
            "all_to_all": lambda b: lax.all_to_all(b, "x", 1, 0, tiled=True),
            "reduce_scatter": lambda b: lax.psum_scatter(b, "x", scatter_dimension=1,
                                                         tiled=True)}[node]
    out = {"broadcast": P("x", "y"), "all_to_all": P("x", "y"),
           "reduce_scatter": P(None, ("y", "x"))}[node]
    make = lambda: shardc.jit(shardc.shard_map(body, mesh=mesh, in_specs=P("x", "y"),
                                               out_specs=out))
    with installed(ReferenceBackend()):
        want = np.asarray(make()(x))
    monkeypatch.delitem(vectorized_rules.stacked_rules, prim)
    before = vectorized_rules.per_device_runs["node_without_stacked_rule"]
    with installed(FastBackend()):
        got = np.asarray(make()(x))
    np.testing.assert_array_equal(got, want)
    assert vectorized_rules.per_device_runs["node_without_stacked_rule"] > before


# --- rounding that does not depend on layout ----------------------------------------------------

def test_contractions_and_sums_round_alike_whatever_the_operands_layout():
    """BLAS rounds a transposed matrix differently, and numpy adds in memory order: a block's
    layout depends on how it was made (a view of its global value, a slice of a stack, an
    in-place result), so both backends present contractions and float sums in one layout."""
    from runtime.reference import impl_rules
    rng = np.random.default_rng(0)
    dims = (((1,), (0,)), ((), ()))
    for m, k, n in ((1, 50, 7), (4, 784, 32), (3, 5, 1)):
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        (want,) = impl_rules[prims.dot_general_p](a, b, dimension_numbers=dims)
        for x, y in ((np.asfortranarray(a), b), (a, np.asfortranarray(b)),
                     (np.repeat(a, 2, axis=1)[:, ::2], np.repeat(b, 2, axis=1)[:, ::2])):
            (got,) = impl_rules[prims.dot_general_p](x, y, dimension_numbers=dims)
            assert got.tobytes() == want.tobytes(), (m, k, n)
    x = rng.standard_normal((33, 17)).astype(np.float32)
    (want,) = impl_rules[prims.reduce_sum_p](x, axes=(0, 1))
    (got,) = impl_rules[prims.reduce_sum_p](np.asfortranarray(x), axes=(0, 1))
    assert got.tobytes() == want.tobytes()


def test_fast_backend_gives_the_same_bits_on_every_run():
    """A jitted training step from the same start: the first run interprets its steps, later
    ones run compiled, whose in-place results may lie in another layout; the next step's
    inputs are those results. Every run gives the same bits (once, the step's matmuls
    rounded by their operands' layout)."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
    from train_mlp import model
    from train_explicit import place, train_step
    params, batch = model()
    with installed(FastBackend()), shardc.set_mesh(shardc.make_mesh((2, 4), ("x", "y"))):
        runs = []
        for _ in range(2):
            placed, data = place(params, batch)
            steps = []
            for _ in range(3):
                placed = train_step(placed, data)
                steps.append([np.asarray(leaf).tobytes()
                              for leaf in shardc.tree_util.tree_leaves(placed)])
            runs.append(steps)
    assert runs[0] == runs[1]


def test_the_check_backend_calls_host_callbacks_once_and_replays_them(capsys):
    """A callback's effects happen once (the reference run's); the fast run gets its recorded
    results and prints, its arguments held to the reference's."""
    from shardc.experimental import io_callback
    seen, counter = [], [0]

    def stateful(v):
        counter[0] += 1
        print(f"call {counter[0]}")
        seen.append(np.asarray(v).copy())
        return np.asarray(v) + counter[0]

    mesh = shardc.make_mesh((4,), ("i",), devices=shardc.devices()[:4])
    f = shardc.jit(shardc.shard_map(
        lambda b: io_callback(stateful, shardc.ShapeDtypeStruct((2,), np.float32), b),
        mesh=mesh, in_specs=P("i"), out_specs=P("i")))
    with installed(CheckingBackend()):
        out = f(np.arange(8.0, dtype=np.float32))
    assert counter == [4] and len(seen) == 4          # once per device, not twice
    np.testing.assert_array_equal(np.asarray(out), np.arange(8.0) + np.repeat([1, 2, 3, 4], 2))
    assert capsys.readouterr().out == "call 1\ncall 2\ncall 3\ncall 4\n"


def test_the_check_backend_flags_a_callback_called_with_other_arguments():
    from runtime.reference import CallbackLog
    from runtime.vectorized_check import blocks_agree
    log = CallbackLog(blocks_agree)
    fn = lambda v: [v * 2]
    from runtime.reference import callback_log
    with callback_log(log, replay=False):
        log.call(fn, [np.ones(3, np.float32)])
    with callback_log(log, replay=True):
        with pytest.raises(AssertionError, match="with argument 0 unlike the first run's"):
            log.call(fn, [np.zeros(3, np.float32)])


@pytest.mark.parametrize("backend", ["fast", "reference", "check"])
def test_bfloat16_sums_add_in_float32_and_round_once(backend):
    # XLA's CPU all-reduce adds bfloat16 in float32: [256, 1, 1, 1] sums to 259, which rounds
    # to 260 (bfloat16 holds 256 and 258 here); added in bfloat16 each + 1 would round away.
    # float16 adds in float16, as there
    mesh = shardc.make_mesh((4,), ("i",))
    bf16 = dtypes.bfloat16
    x = np.array([256.0, 1.0, 1.0, 1.0], bf16)
    rows = np.tile(np.array([[256.0, 1.0, 3.0, 5.0]], bf16), (4, 1))

    def run(op, value, out_specs=P()):
        return np.asarray(shardc.jit(shardc.shard_map(op, mesh=mesh, in_specs=P("i"),
                                                      out_specs=out_specs))(value))
    with installed(backend_named(backend)):
        assert run(lambda b: lax.psum(b, "i"), x).tolist() == [260.0]
        assert run(lambda b: lax.pmean(b, "i"), x).tolist() == [65.0]
        scattered = run(lambda b: lax.psum_scatter(b, "i", scatter_dimension=1, tiled=True),
                        rows, P(None, "i"))
        np.testing.assert_array_equal(scattered, (4 * rows[:1].astype(np.float32)).astype(bf16))
        assert run(lambda b: lax.psum(b, "i"), x).dtype == bf16
        h = np.array([2048.0, 1.0, 1.0, 1.0], np.float16)
        assert run(lambda b: lax.psum(b, "i"), h).tolist() == [2048.0]
        # a random sum: the float32 sum in rank order, rounded once
        z = np.random.default_rng(0).standard_normal((8, 16)).astype(bf16)
        want = z[:2].astype(np.float32)
        for k in range(2, 8, 2):
            want = want + z[k:k + 2].astype(np.float32)
        np.testing.assert_array_equal(run(lambda b: lax.psum(b, "i"), z, P()),
                                      (want + np.float32(0)).astype(bf16))


# --- a reduction bound once for its members' type gives the simulator's bits ---------------------

@settings(max_examples=60, **SETTINGS)
@given(dtype=st.sampled_from(["float32", "float64", "float16", "bfloat16", "int32", "uint8",
                              "bool", "complex64"]),
       reduction=st.sampled_from(["sum", "max", "min", "mean"]),
       members=st.integers(1, 5), shape=st.sampled_from([(), (3,), (2, 4)]),
       seed=st.integers(0, 2 ** 16))
def test_a_bound_reduction_is_bitwise_the_all_reduce(dtype, reduction, members, shape, seed):
    from runtime.collectives import all_reduce, in_order_reducer
    dtype = np.dtype(dtypes.bfloat16 if dtype == "bfloat16" else dtype)
    if dtype.kind == "c" and reduction in ("max", "min"):
        return
    rng = np.random.default_rng(seed)
    values = rng.standard_normal((members,) + shape) * 100
    if dtype.kind in "fc":
        # signed zeros and a NaN: a sum of -0.0s is +0.0, a NaN propagates
        rows = values.reshape(members, -1)
        rows[:, 0] = -0.0             # every member's first element
        if rows.shape[1] > 2:
            rows[0, 2] = np.nan
    stacked = np.asarray(values).astype(dtype)
    expected = all_reduce(list(stacked), reduction=reduction)[0]
    got = in_order_reducer(dtype, reduction, shape)(stacked)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(np.asarray(got).reshape(-1).view(np.uint8),
                                  np.asarray(expected).reshape(-1).view(np.uint8))
