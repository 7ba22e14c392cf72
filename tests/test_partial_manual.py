"""Partial-manual shard_map (``axis_names`` a strict subset of the mesh axes) and shard_map nested inside a body over the axes left automatic.

The reference is numpy on the global arrays: the outer body sees blocks split only over its
manual axes; an inner shard_map splits them over its own axes.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from shardc import lax
from shardc.experimental.shard_map import shard_map as old_shard_map
from shardc.sharding import AxisType, NamedSharding, PartitionSpec as P
from ir.sharding import ShardingTypeError

MESH = jax.make_mesh((4, 2), ("x", "y"))
MESH3 = jax.make_mesh((2, 2, 2), ("a", "b", "c"))
X = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)

WRAPS = {"eager": lambda f: f, "jit": jax.jit}


@pytest.mark.parametrize("wrap", sorted(WRAPS))
@pytest.mark.parametrize("check", [True, False], ids=["check-on", "check-off"])
def test_partial_manual_body_sees_blocks_split_over_its_manual_axes_only(wrap, check):
    shapes = []

    def body(b):
        shapes.append(b.shape)
        return lax.psum(b.sum(0, keepdims=True), "x")

    f = jax.shard_map(body, mesh=MESH, in_specs=P("x"), out_specs=P(), axis_names={"x"},
                      check_vma=check)
    got = WRAPS[wrap](f)(jnp.asarray(X))
    np.testing.assert_array_equal(np.asarray(got), X.sum(0, keepdims=True))
    assert shapes[-1] == (2, 6)


@pytest.mark.parametrize("wrap", sorted(WRAPS))
@pytest.mark.parametrize("check", [True, False], ids=["check-on", "check-off"])
def test_nested_shard_map_over_the_automatic_axis(wrap, check):
    def inner(c):                                    # c: (2, 3), split over y
        return c * (1 + lax.axis_index("y")) + lax.psum(c.sum(), "y")

    def outer(b):                                    # b: (2, 6), split over x
        g = jax.shard_map(inner, in_specs=P(None, "y"), out_specs=P(None, "y"),
                          axis_names={"y"}, check_vma=check)
        return g(b) + lax.axis_index("x")

    h = jax.shard_map(outer, mesh=MESH, in_specs=P("x"), out_specs=P("x"), axis_names={"x"},
                      check_vma=check)
    rows = X.reshape(4, 2, 6)
    want = (rows * np.repeat([1, 2], 3) + rows.sum((1, 2))[:, None, None]
            + np.arange(4)[:, None, None]).reshape(8, 6)
    np.testing.assert_array_equal(np.asarray(WRAPS[wrap](h)(jnp.asarray(X))), want)


@pytest.mark.parametrize("check", [True, False], ids=["check-on", "check-off"])
def test_nested_shard_map_gradient_equals_finite_differences(check):
    def outer(b):
        g = jax.shard_map(lambda c: jnp.sin(c) * lax.psum(c, "y"),
                          in_specs=P(None, "y"), out_specs=P(None, "y"), axis_names={"y"},
                          check_vma=check)
        return g(b)

    h = jax.shard_map(outer, mesh=MESH, in_specs=P("x"), out_specs=P("x"), axis_names={"x"},
                      check_vma=check)

    def reference(x):                                # x float64 (8, 6): the same numbers
        halves = x.reshape(8, 2, 3)
        return (np.sin(halves) * halves.sum(1, keepdims=True)).reshape(8, 6)

    x = np.random.default_rng(0).uniform(-1, 1, (8, 6)).astype(np.float32)
    got = jax.jit(jax.grad(lambda x: (h(x) ** 2).sum()))(jnp.asarray(x))
    eps, want = 1e-6, np.zeros_like(x, dtype=np.float64)
    base = x.astype(np.float64)
    for i in np.ndindex(x.shape):
        up, down = base.copy(), base.copy()
        up[i] += eps
        down[i] -= eps
        want[i] = ((reference(up) ** 2).sum() - (reference(down) ** 2).sum()) / (2 * eps)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)


def test_a_nested_shard_map_may_pass_the_abstract_mesh():
    def outer(b):
        mesh = jax.sharding.get_abstract_mesh()      # the axes the body is manual over, Manual
        assert (mesh.axis_names, mesh.axis_sizes) == (MESH.axis_names, MESH.axis_sizes)
        assert mesh.axis_types == (AxisType.Manual, MESH.axis_types[1])
        return jax.shard_map(lambda c: c * 2, mesh=mesh, in_specs=P(None, "y"),
                             out_specs=P(None, "y"), axis_names={"y"})(b)

    h = jax.shard_map(outer, mesh=MESH, in_specs=P("x"), out_specs=P("x"), axis_names={"x"})
    np.testing.assert_array_equal(np.asarray(h(jnp.asarray(X))), X * 2)
    assert jax.sharding.get_abstract_mesh().empty


def test_inner_output_replicated_over_its_axis():
    """An inner out_spec that does not name the inner axis: the value is invariant there
    (checked), and the outer body gets it as it is."""
    def outer(b):
        g = jax.shard_map(lambda c: lax.psum(c.sum(1, keepdims=True), "y"),
                          in_specs=P(None, "y"), out_specs=P(), axis_names={"y"})
        return g(b)

    h = jax.shard_map(outer, mesh=MESH, in_specs=P("x"), out_specs=P("x"), axis_names={"x"})
    np.testing.assert_array_equal(np.asarray(h(jnp.asarray(X))), X.sum(1, keepdims=True))


def test_inner_check_off_takes_the_coordinate_0_copy():
    def outer(b):
        g = jax.shard_map(lambda c: c + lax.axis_index("y"), in_specs=P(),
                          out_specs=P(), axis_names={"y"}, check_vma=False)
        return g(b)

    h = jax.shard_map(outer, mesh=MESH, in_specs=P("x"), out_specs=P("x"), axis_names={"x"})
    np.testing.assert_array_equal(np.asarray(h(jnp.asarray(X))), X)


def test_inner_replication_is_checked_over_its_own_axes():
    def outer(b):
        g = jax.shard_map(lambda c: c, in_specs=P(None, "y"), out_specs=P(),
                          axis_names={"y"})
        return g(b)

    h = jax.shard_map(outer, mesh=MESH, in_specs=P("x"), out_specs=P("x"), axis_names={"x"})
    with pytest.raises(ValueError, match="replicated across mesh axis 'y'"):
        h(jnp.asarray(X))


def test_three_axes_two_levels():
    """Manual over a, then b and c inside: each inner device gets its (1, 1, 2) block."""
    x = np.arange(2 * 2 * 8, dtype=np.float32).reshape(2, 2, 8)

    def inner(c):
        return lax.psum(c, ("b", "c")) * 0 + c * 2 + lax.axis_index(("b", "c"))

    def outer(v):
        return jax.shard_map(inner, in_specs=P(None, "b", "c"), out_specs=P(None, "b", "c"),
                             axis_names={"b", "c"})(v)

    h = jax.shard_map(outer, mesh=MESH3, in_specs=P("a"), out_specs=P("a"), axis_names={"a"})
    rank = np.repeat(np.arange(4).reshape(2, 2), 4, axis=1)[None]     # (b, c) rank per element
    np.testing.assert_array_equal(np.asarray(jax.jit(h)(jnp.asarray(x))), x * 2 + rank)


def test_the_old_form_has_no_auto_argument():
    # JAX 0.10 dropped it: the old form is manual over every axis; axis_names= says otherwise
    with pytest.raises(TypeError, match="unexpected keyword argument 'auto'"):
        old_shard_map(lambda b: lax.psum(b, "x"), MESH, in_specs=P("x"), out_specs=P(),
                      auto=frozenset({"y"}))
    f = jax.shard_map(lambda b: lax.psum(b, "x"), mesh=MESH, in_specs=P("x"), out_specs=P(),
                      axis_names={"x"})
    np.testing.assert_array_equal(np.asarray(f(jnp.asarray(X))), X.reshape(4, 2, 6).sum(0))


def test_errors_name_what_is_wrong():
    body_psum_y = jax.shard_map(lambda b: lax.psum(b, "y"), mesh=MESH, in_specs=P("x"),
                                out_specs=P("x"), axis_names={"x"})
    with pytest.raises(NameError, match="^Found an unbound axis name: y. To fix this, please "
                                        "call psum under `jax.shard_map`. .psum: mesh axis 'y' "
                                        ".* is not manual here"):
        body_psum_y(jnp.asarray(X))
    with pytest.raises(ValueError, match=r"must refer to an axis marked as manual \(frozenset\(\{'x'\}\)\)"
                                         r"(.|\n)*in_specs refers to 'y'"):
        jax.shard_map(lambda b: b, mesh=MESH, in_specs=P("y"), out_specs=P("y"),
                      axis_names={"x"})(jnp.asarray(X))
    with pytest.raises(ValueError, match="out_specs argument must refer to an axis marked as "
                                         "manual"):
        jax.shard_map(lambda b: b, mesh=MESH, in_specs=P("x"), out_specs=P("x", "y"),
                      axis_names={"x"})(jnp.asarray(X))
    with pytest.raises(ValueError, match=r"axis_names=\{'z'\} to be a subset of mesh.axis_names"):
        jax.shard_map(lambda b: b, mesh=MESH, in_specs=P(), out_specs=P(), axis_names={"z"})(
            jnp.asarray(X))
    with pytest.raises(TypeError, match="`axis_names` argument of shard_map should be of type"):
        jax.shard_map(lambda b: b, mesh=MESH, in_specs=P(), out_specs=P(), axis_names=("x",))(
            jnp.asarray(X))

    def again_over_x(b):
        return jax.shard_map(lambda c: c, in_specs=P("x"), out_specs=P("x"))(b)

    nested_x = jax.shard_map(again_over_x, mesh=MESH, in_specs=P("x"), out_specs=P("x"),
                             axis_names={"x"})
    with pytest.raises(ValueError, match="in_specs refers to 'x', which the enclosing "
                                         "shard_map is already manual over"):
        nested_x(jnp.asarray(X))


@pytest.mark.parametrize("given", ["mesh", "abstract"])
def test_a_nested_shard_map_given_another_mesh_is_jaxs_context_mesh_error(given):
    """Inside a body the context mesh types its manual axes Manual: a nested shard_map given
    the outer mesh (or its abstract mesh, typed otherwise) is JAX 0.10's ValueError."""
    def outer(b):
        mesh = MESH if given == "mesh" else MESH.abstract_mesh
        return jax.shard_map(lambda c: c, mesh=mesh, in_specs=P(None, "y"),
                             out_specs=P(None, "y"), axis_names={"y"})(b)

    h = jax.shard_map(outer, mesh=MESH, in_specs=P("x"), out_specs=P("x"), axis_names={"x"})
    passed = str(MESH if given == "mesh" else MESH.abstract_mesh)
    with pytest.raises(ValueError) as err:
        h(jnp.asarray(X))
    assert str(err.value) == (
        "The context mesh AbstractMesh('x': 4, 'y': 2, axis_types=(Manual, Explicit), "
        "device_kind=cpu, num_cores=None, platform=cpu) should match the mesh passed to "
        f"shard_map {passed}")


def test_a_shard_map_given_another_mesh_than_the_one_set_is_jaxs_error():
    """Outside any body, a mesh set by set_mesh must be the shard_map's (names, sizes and
    axis types), eagerly as under jit: JAX 0.10's _shmap_checks. It ran eagerly before."""
    other = jax.make_mesh((8,), ("k",))
    auto = jax.make_mesh((4, 2), ("i", "j"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    with jax.set_mesh(jax.make_mesh((4, 2), ("i", "j"))):
        for mesh, spec in ((other, P("k")), (auto, P("i"))):
            f = jax.shard_map(lambda b: b * 2, mesh=mesh, in_specs=spec, out_specs=spec)
            for run in (f, jax.jit(f)):
                with pytest.raises(ValueError, match=re.escape(
                        "The context mesh AbstractMesh('i': 4, 'j': 2, axis_types=(Explicit, "
                        "Explicit), device_kind=cpu, num_cores=None, platform=cpu) should match "
                        f"the mesh passed to shard_map {mesh}")):
                    run(jnp.arange(16.0))
    f = jax.shard_map(lambda b: b * 2, mesh=other, in_specs=P("k"), out_specs=P("k"))
    np.testing.assert_array_equal(np.asarray(f(jnp.arange(16.0))), np.arange(16.0) * 2)


def test_omitted_in_specs_name_the_manual_axes_only():
    """in_specs read from the arguments' types keep the axes the body is manual over (JAX's;
    before, a split over another Explicit axis was refused as not manual)."""
    mesh = jax.make_mesh((2, 2), ("i", "j"))
    with jax.set_mesh(mesh):
        v = jax.device_put(jnp.arange(32.).reshape(4, 8), P("i", "j"))
        f = jax.jit(lambda x: jax.shard_map(lambda b: b * b, out_specs=P("i", None),
                                                  axis_names=frozenset({"i"}))(x))
        np.testing.assert_array_equal(np.asarray(f(v)), np.arange(32.).reshape(4, 8) ** 2)


@pytest.mark.parametrize("wrap", sorted(WRAPS))
def test_explicit_axes_left_automatic_keep_their_split_in_the_body_and_the_result(wrap):
    """On an Explicit mesh, a shard_map manual over 'x' only: the body's blocks keep their
    split over 'y', its results too, and the shard_map's result is split over both (JAX
    0.10.2's types)."""
    mesh = jax.make_mesh((4, 2), ("x", "y"))
    data = np.arange(32, dtype=np.float32).reshape(8, 4)
    seen = []

    def body(v):
        seen.append(str(jax.typeof(v)))
        zeros = jnp.zeros((2, 4), out_sharding=P(None, "y"))
        rows = lax.psum(jnp.sum(v, axis=1), "x")
        seen.append(str(jax.typeof(zeros * v)))
        return v * 2 + zeros + rows[:, None]

    with jax.set_mesh(mesh):
        x = jax.device_put(data, P("x", "y"))
        f = WRAPS[wrap](jax.shard_map(body, in_specs=P("x"), out_specs=P("x"), axis_names={"x"}))
        got = f(x)
        assert seen[:2] == ["float32[2,4@y]{V:x}", "float32[2,4@y]{V:x}"]
        assert str(jax.typeof(got)) == "float32[8@x,4@y]"
        want = data * 2 + np.tile(data.reshape(4, 2, 4).sum(axis=(0, 2)), 4)[:, None]
        np.testing.assert_allclose(np.asarray(got), want)
        # the type errors JAX's give in such a body: a contraction over the split dimension
        with pytest.raises(ShardingTypeError, match="Contracting dimensions are sharded"):
            jax.jit(jax.shard_map(lambda v: v @ v.T, in_specs=P("x"), out_specs=P("x"),
                                  axis_names={"x"}))(x)


def test_explicit_split_kept_through_a_gradient():
    mesh = jax.make_mesh((4, 2), ("x", "y"))
    data = np.arange(32, dtype=np.float32).reshape(8, 4)
    with jax.set_mesh(mesh):
        x = jax.device_put(data, P("x", "y"))
        f = jax.shard_map(lambda v: jnp.sin(v) * 2, in_specs=P("x"), out_specs=P("x"),
                          axis_names={"x"})
        grad = jax.jit(jax.grad(lambda a: f(a).sum()))(x)
        assert str(jax.typeof(grad)) == "float32[8@x,4@y]"
        np.testing.assert_allclose(np.asarray(grad), 2 * np.cos(data), rtol=1e-6)


@pytest.mark.parametrize("wrap", sorted(WRAPS))
def test_a_dimension_split_over_a_manual_and_an_automatic_axis(wrap):
    """A dimension split over ('x', 'y') in a shard_map manual over 'x': the body's block keeps
    the 'y' part of the split (``int32[4@y,2]{V:x}``) and the result is split over both again,
    the manual axis major (JAX's ``P(('x', 'y'), None)``)."""
    mesh = jax.make_mesh((2, 2), ("x", "y"))
    data = np.arange(16).reshape(8, 2)
    seen = []

    def body(v):
        seen.append(str(jax.typeof(v)))
        seen.append(jax.typeof(v).sharding.spec)
        return v * 2

    with jax.set_mesh(mesh):
        x = jax.device_put(data, P(("x", "y"), None))
        got = WRAPS[wrap](jax.shard_map(body, out_specs=P("x"), axis_names={"x"}))(x)
        assert seen[:2] == ["int32[4@y,2]{V:x}", P("y", None)]
        assert got.sharding.spec == P(("x", "y"), None)
        np.testing.assert_array_equal(np.asarray(got), data * 2)
        # the manual axis minor to the automatic one: no block is one piece (JAX's error)
        y = jax.device_put(data, P(("y", "x"), None))
        with pytest.raises(ValueError, match=r"Invalid spec: P\(\('y', 'x'\), None\)"):
            WRAPS[wrap](jax.shard_map(body, out_specs=P("x"), axis_names={"x"}))(y)


@pytest.mark.parametrize("names", [{"x"}, {"x", "y"}])
def test_a_constraint_in_a_body_may_not_name_a_manual_axis(names):
    """JAX's error: a body holds one block along a manual axis, so a with_sharding_constraint
    there may name the axes left automatic only (eagerly and under jit)."""
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)

    def body(v):
        return jax.lax.with_sharding_constraint(v, NamedSharding(mesh, P("x", "y"))) * 2

    f = jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False,
                      axis_names=names)
    for run in (f, jax.jit(f)):
        with pytest.raises(ValueError, match=r"pspec P\('x', 'y'\) contains a manual axes"):
            run(X)


def test_a_bare_spec_in_a_body_resolves_on_the_body_mesh():
    # JAX's context in a shard_map body is the body's mesh: a PartitionSpec constraint over an
    # automatic axis needs no mesh set
    mesh = jax.make_mesh((2, 2), ("i", "j"), axis_types=(AxisType.Auto,) * 2)

    def body(x):
        x = lax.with_sharding_constraint(x, P(None, "j"))
        return x * x

    @jax.jit
    def f(x):
        return jax.shard_map(body, mesh=mesh, in_specs=P("i", None), out_specs=P("i", None),
                                axis_names=frozenset({"i"}))(x)

    v = jax.device_put(np.arange(32.0).reshape(4, 8), jax.NamedSharding(mesh, P("i", "j")))
    np.testing.assert_array_equal(np.asarray(f(v)), np.arange(32.0).reshape(4, 8) ** 2)


@pytest.mark.parametrize("wrap", sorted(WRAPS))
def test_collectives_over_the_manual_axis_keep_the_automatic_explicit_split(wrap):
    """In a shard_map manual over 'y' on an Explicit (2, 4) mesh, a collective over 'y' keeps
    its operand's split over 'x' (JAX's abstract evals update only the shape): psum's result
    is ``P('x', None)`` in the body and in the shard_map's result, not unsplit. An untiled
    all_gather inserts an unsplit dimension and an untiled all_to_all moves the split with
    the dimensions it keeps (JAX's expand_dims / squeeze around the tiled form)."""
    mesh = jax.make_mesh((2, 4), ("x", "y"))
    data = np.arange(64, dtype=np.float32).reshape(8, 8)
    cols = data.reshape(8, 4, 2)                       # [r, block k, c] = data[r, 2k + c]
    ring = [(i, (i + 1) % 4) for i in range(4)]
    cases = {
        "psum": (lambda v: lax.psum(v, "y"), P(None, "y"), P(),
                 "P('x', None)", "P('x', None)", cols.sum(axis=1)),
        "pmax": (lambda v: lax.pmax(v, "y"), P(None, "y"), P(),
                 "P('x', None)", "P('x', None)", cols.max(axis=1)),
        "ppermute": (lambda v: lax.ppermute(v, "y", ring), P(None, "y"), P(None, "y"),
                     "P('x', None)", "P('x', 'y')", np.roll(cols, 1, axis=1).reshape(8, 8)),
        "all_gather tiled": (lambda v: lax.all_gather(v, "y", axis=1, tiled=True),
                             P(None, "y"), P(None, "y"), "P('x', None)", "P('x', 'y')",
                             np.tile(data, (1, 4))),
        "all_gather at the end": (lambda v: lax.all_gather(v, "y", axis=2), P(None, "y"),
                                  P(None, None, "y"), "P('x', None, None)", "P('x', None, 'y')",
                                  np.tile(cols.transpose(0, 2, 1), (1, 1, 4))),
        "all_gather in front": (lambda v: lax.all_gather(v, "y", axis=0), P(None, "y"),
                                P(None, None, "y"), "P(None, 'x', None)", "P(None, 'x', 'y')",
                                np.tile(cols.transpose(1, 0, 2), (1, 1, 4))),
        "all_to_all untiled": (lambda v: lax.all_to_all(v.reshape(8, 4, 2), "y", 1, 0), P(),
                               P("y"), "P(None, 'x', None)", "P('y', 'x', None)",
                               np.repeat(cols.transpose(1, 0, 2), 4, axis=0)),
    }
    with jax.set_mesh(mesh):
        x = jax.device_put(data, P("x", "y"))
        for name, (f, in_spec, out_spec, body_type, out_type, want) in cases.items():
            seen = []

            def body(v, f=f):
                out = f(v)
                seen.append(str(jax.typeof(out).sharding.spec))
                return out

            got = WRAPS[wrap](jax.shard_map(body, in_specs=in_spec, out_specs=out_spec,
                                            axis_names={"y"}))(x)
            assert (name, seen[0]) == (name, body_type)
            assert (name, str(jax.typeof(got).sharding.spec)) == (name, out_type)
            np.testing.assert_array_equal(np.asarray(got), want, err_msg=name)


@pytest.mark.parametrize("check,layers", [(False, "one"), (False, "scan"), (True, "one"),
                                          (True, "scan")])
def test_residuals_keep_the_automatic_explicit_split_through_a_gradient(check, layers):
    """A relu in a shard_map manual over 'model' whose block stays split over an Explicit
    'data' axis: the relu's mask, a residual of the forward body, reaches the backward body
    still split over 'data' (it arrived unsplit and the mask's select refused the cases), and
    with the check off it leaves over the manual axes only, not over 'data' too."""
    mesh = jax.make_mesh((2, 4), ("data", "model"))
    data = np.arange(48, dtype=np.float32).reshape(8, 6) - 20
    weights = np.linspace(-1, 1, 3 * 6 * 6, dtype=np.float32).reshape(3, 6, 6)

    def body(v, w):
        if layers == "one":
            return jax.nn.relu(v @ w[0])
        return lax.scan(lambda h, a: (jax.nn.relu(h @ a), None), v, w)[0]

    def loss(w, v, f):
        return jnp.sum(f(v, w) ** 2)

    want = jax.grad(loss)(weights, data, body)
    with jax.set_mesh(mesh):
        x = jax.device_put(data, P("data", None))
        w = jax.device_put(weights, P())
        f = jax.shard_map(body, in_specs=(P(), P()), out_specs=P(), axis_names={"model"},
                          check_vma=check)
        got = jax.jit(jax.grad(loss), static_argnums=2)(w, x, f)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5)


@pytest.mark.parametrize("wrap", sorted(WRAPS))
def test_a_loop_in_the_body_may_close_over_the_bodys_split_values(wrap):
    """A fori_loop body inside a shard_map manual over 'm' closes over the shard_map body's
    block, split over the automatic Explicit 'd': a value of the same body, not one from
    outside the shard_map, so it is read (it raised JAX's closed-over-input error)."""
    mesh = jax.make_mesh((2, 4), ("d", "m"))
    data = np.arange(64, dtype=np.float32).reshape(8, 8)
    want = data.copy()
    for _ in range(3):
        want = want * 0.5 + data
    with jax.set_mesh(mesh):
        x = jax.device_put(data, P("d", None))
        f = jax.shard_map(lambda v: lax.fori_loop(0, 3, lambda i, c: c * 0.5 + v, v),
                          in_specs=P(), out_specs=P(), axis_names={"m"})
        got = WRAPS[wrap](f)(x)
        assert str(jax.typeof(got)) == "float32[8@d,8]"
        np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("wrap", sorted(WRAPS))
def test_the_lowered_body_reads_its_inputs_with_their_traced_types(wrap):
    """At the mesh level a partial-manual body holds its block whole along the automatic
    Explicit axes; its inputs are typed as the traced body's were (split over 'data'), so a
    select of the block against a value resharded in the body checks (the lowered program
    failed verification: one case typed ``P('data', None)``, the other unsplit). Run
    eagerly, the body's reshard and ``out_sharding=`` type their results too (they were
    left unsplit, and the select refused them)."""
    mesh = jax.make_mesh((2, 4), ("data", "model"))
    data = np.arange(48, dtype=np.float32).reshape(8, 6) - 20
    seen = []

    def body(v):
        zeros = jax.sharding.reshard(jnp.zeros((8, 6)), P("data", None))
        ones = jnp.ones((8, 6), out_sharding=P("data", None))
        seen.extend([str(jax.typeof(zeros)), str(jax.typeof(ones))])
        return jnp.where(v > 0, v, zeros) * ones

    with jax.set_mesh(mesh):
        x = jax.device_put(data, P("data", None))
        got = WRAPS[wrap](jax.shard_map(body, in_specs=P(), out_specs=P(),
                                        axis_names={"model"}))(x)
        assert str(jax.typeof(got)) == "float32[8@data,6]"
    assert seen[:2] == ["float32[8@data,6]"] * 2
    np.testing.assert_array_equal(np.asarray(got), np.maximum(data, 0))


@pytest.mark.parametrize("wrap", sorted(WRAPS))
def test_a_nested_shard_map_over_an_explicit_axis_types_its_blocks_and_results(wrap):
    """Inside a shard_map manual over 'm', a nested one over the Explicit 'd' the outer left
    automatic: its blocks are no longer typed split over 'd' (they are its manual blocks), and
    its results are split over 'd' where the out_spec names it, as JAX's (the block stayed
    typed ``4@d`` and a P('d') result came back unsplit)."""
    mesh = jax.make_mesh((2, 4), ("d", "m"))
    data = np.arange(64, dtype=np.float32).reshape(8, 8)
    cols = data.reshape(8, 4, 2)                            # [r, m block, c]
    cases = {
        "psum": (lambda u: lax.psum(u, "d"), P("d"), P(),
                 "float32[4,2]{V:(d,m)}", "float32[4,2]{V:m}", "float32[4,8@m]",
                 (data[:4] + data[4:])),
        "P('d')": (lambda u: u * 2, P("d"), P("d"),
                   "float32[4,2]{V:(d,m)}", "float32[8@d,2]{V:m}", "float32[8@d,8@m]", data * 2),
        "P(None, 'd')": (lambda u: u * 2, P("d"), P(None, "d"), "float32[4,2]{V:(d,m)}",
                         "float32[4,4@d]{V:m}", "float32[4,16@(m,d)]",
                         np.concatenate([cols[:4], cols[4:]], axis=2).reshape(4, 16) * 2),
        "replicated in": (lambda u: u * (1 + lax.axis_index("d")), P(), P("d"),
                          "float32[8,2]{V:m}", "float32[16@d,2]{V:m}", "float32[16@d,8@m]",
                          np.concatenate([data, data * 2])),
    }
    with jax.set_mesh(mesh):
        x = jax.device_put(data, P("d", None))
        for name, (f, in_spec, out_spec, block, inner_out, out, want) in cases.items():
            seen = []

            def outer(v, f=f, in_spec=in_spec, out_spec=out_spec):
                def inner(u):
                    seen.append(str(jax.typeof(u)))
                    return f(u)
                got = jax.shard_map(inner, in_specs=in_spec, out_specs=out_spec,
                                    axis_names={"d"})(v)
                seen.append(str(jax.typeof(got)))
                return got

            got = WRAPS[wrap](jax.shard_map(outer, in_specs=P(None, "m"),
                                            out_specs=P(None, "m"), axis_names={"m"}))(x)
            assert (name, seen[:2], str(jax.typeof(got))) == (name, [block, inner_out], out)
            np.testing.assert_array_equal(np.asarray(got), want, err_msg=name)


@pytest.mark.parametrize("wrap", sorted(WRAPS))
def test_a_constraint_in_a_body_on_an_explicit_mesh_names_auto_axes_only(wrap):
    """In a shard_map body the manual axes are Manual, so a with_sharding_constraint there is
    not the all-Explicit assert (JAX's): one naming no axis leaves the block as it is, typed
    split over 'd' (it raised the assert's AssertionError), and one naming the Explicit 'd'
    is JAX's ValueError, naming the body's mesh (it passed)."""
    mesh = jax.make_mesh((2, 4), ("d", "m"))
    data = np.arange(64, dtype=np.float32).reshape(8, 8)
    with jax.set_mesh(mesh):
        x = jax.device_put(data, P("d", None))
        kept = jax.shard_map(lambda v: lax.with_sharding_constraint(v * 2, P(None, None)),
                             in_specs=P(None, "m"), out_specs=P(None, "m"), axis_names={"m"})
        got = WRAPS[wrap](kept)(x)
        assert str(jax.typeof(got)) == "float32[8@d,8@m]"
        np.testing.assert_array_equal(np.asarray(got), data * 2)
        named = jax.shard_map(lambda v: lax.with_sharding_constraint(v, P("d", None)),
                              in_specs=P(None, "m"), out_specs=P(None, "m"), axis_names={"m"})
        with pytest.raises(ValueError, match=re.escape(
                "The spec of NamedSharding passed to with_sharding_constraint can only refer "
                "to Auto axes of the mesh. Got spec=P('d', None) and mesh=AbstractMesh('d': 2, "
                "'m': 4, axis_types=(Explicit, Manual)")):
            WRAPS[wrap](named)(x)


@pytest.mark.parametrize("kind", [AxisType.Auto, AxisType.Explicit])
@pytest.mark.parametrize("names", [{"m"}, {"d", "m"}])
def test_a_bare_spec_constraint_naming_a_manual_axis_is_jaxs_auto_axes_error(kind, names):
    """A PartitionSpec constraint in a body resolves on the body's mesh, where the manual
    axes are Manual: naming one is JAX's "can only refer to Auto axes" ValueError, naming
    that mesh (a NamedSharding on the concrete mesh keeps the lowering's wording, above)."""
    mesh = jax.make_mesh((2, 4), ("d", "m"), axis_types=(kind,) * 2)
    types = "Manual, Manual" if names == {"d", "m"} else f"{kind.name}, Manual"
    with jax.set_mesh(mesh):
        x = jax.device_put(np.ones((8, 8), np.float32), jax.NamedSharding(mesh, P(None, "m")))
        f = jax.shard_map(lambda v: lax.with_sharding_constraint(v, P("m", None)),
                          in_specs=P(None, "m"), out_specs=P(None, "m"), axis_names=names)
        with pytest.raises(ValueError, match=re.escape(
                "The spec of NamedSharding passed to with_sharding_constraint can only refer "
                "to Auto axes of the mesh. Got spec=P('m', None) and mesh=AbstractMesh('d': 2, "
                f"'m': 4, axis_types=({types})")):
            jax.jit(f)(x)


def test_eager_partial_manual_results_spell_their_specs_per_dimension():
    # as JAX's (and as under jit): P('x', None), not the out_specs entry as written
    mesh = jax.make_mesh((2, 4), ("x", "y"))
    a = jax.device_put(jnp.arange(64.0).reshape(8, 8), jax.NamedSharding(mesh, P("x")))
    f = jax.shard_map(lambda b: b * 2, mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                      axis_names={"x"})
    for run in (f, jax.jit(f)):
        got = run(a)
        assert got.sharding.spec == P("x", None) and got.sharding.spec != P("x")
        np.testing.assert_array_equal(got, np.arange(64.0).reshape(8, 8) * 2)
    whole = jax.shard_map(lambda b: b * 2, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    assert whole(jax.device_put(jnp.arange(8.0), jax.NamedSharding(mesh, P("x")))
                 ).sharding.spec == P("x")          # manual over every axis: as written


def test_partial_manual_body_closes_over_a_value_split_over_an_axis_it_leaves_explicit():
    # JAX refuses a closed-over split value only where the body's mesh has no Explicit axis
    # left (a body manual over every axis)
    mesh = jax.make_mesh((2, 4), ("dp", "tp"), axis_types=(AxisType.Explicit,) * 2)
    host_x = np.arange(32, dtype=np.float32).reshape(8, 4)
    with jax.set_mesh(mesh):
        x = jax.device_put(host_x, P("dp", None))
        w = jax.device_put(np.ones((4, 8), np.float32), P(None, "tp"))
        f = jax.shard_map(lambda w: lax.psum(jnp.sum(x @ w, axis=1), "tp"),
                          in_specs=P(None, "tp"), out_specs=P(), axis_names={"tp"})
        for run in (f, jax.jit(f)):
            got = run(w)
            assert str(jax.typeof(got)) == "float32[8@dp]"
            np.testing.assert_array_equal(got, host_x.sum(axis=1) * 8)
        grad = jax.jit(jax.grad(lambda w: jnp.sum(f(w))))(w)
        np.testing.assert_array_equal(grad, np.tile(host_x.sum(axis=0)[:, None], (1, 8)))
        whole = jax.shard_map(lambda w: w * jnp.sum(x), in_specs=P(None, "tp"),
                              out_specs=P(None, "tp"))
        with pytest.raises(NotImplementedError, match="Closing over inputs to shard_map"):
            whole(w)


def test_vmap_of_a_partial_manual_shard_map_over_a_split_batch():
    """The batch split over an Explicit axis the shard_map leaves automatic is named once in
    the result's type (it was named twice, and the spec refused), eagerly and under jit, with
    and without spmd_axis_name."""
    from shardc import lax
    m = jax.make_mesh((2, 2, 2), ("b", "x", "y"))
    host = np.arange(64.0).reshape(4, 4, 4)
    x = jax.device_put(jnp.asarray(host), NamedSharding(m, P("b", "x")))
    pm = jax.shard_map(lambda a: lax.psum(a, "x"), mesh=m, in_specs=P("x"), out_specs=P(),
                       axis_names={"x"})
    want = host[:, :2] + host[:, 2:]
    with jax.set_mesh(m):
        for run in (jax.vmap(pm), jax.jit(jax.vmap(pm)), jax.vmap(pm, spmd_axis_name="b"),
                    jax.jit(jax.vmap(pm, spmd_axis_name="b"))):
            out = run(x)
            assert str(jax.typeof(out)) == "float32[4@b,2,4]"
            np.testing.assert_array_equal(np.asarray(out), want)


@pytest.mark.parametrize("axis_types, out_spec, want", [
    # JAX runs a partial-manual shard_map as a jitted program: on an Auto mesh its results are
    # spelt as layouts read back from its compiler, on an Explicit one as their types
    ((AxisType.Auto,) * 2, P(), P()),
    ((AxisType.Auto,) * 2, P("i"), P("i")),
    ((AxisType.Auto,) * 2, P(None, None), P()),
    ((AxisType.Explicit,) * 2, P(), P(None, None)),
    ((AxisType.Explicit,) * 2, P("i"), P("i", None)),
])
def test_eager_partial_manual_results_are_spelt_as_jax(axis_types, out_spec, want):
    mesh = jax.make_mesh((4, 2), ("i", "j"), axis_types=axis_types)
    x = jax.device_put(jnp.arange(32.).reshape(8, 4), NamedSharding(mesh, P("i")))
    body = (lambda a: lax.psum(a, "i")) if out_spec != P("i") else (lambda a: a * 2)
    f = jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=out_spec, axis_names={"i"})
    eager, jitted = f(x), jax.jit(f)(x)
    assert str(eager.sharding.spec) == str(want) and str(jitted.sharding.spec) == str(want)
    np.testing.assert_array_equal(np.asarray(eager), np.asarray(jitted))
