"""Unreduced and reduced types (JAX 0.10's ``P(unreduced=..., reduced=...)``), held against
JAX 0.10.2's behaviour: a value unreduced over ``x`` is a partial sum (each device along ``x``
holds a term, the value is their sum), one reduced over ``x`` is replicated with its copies
known equal. Values are checked against numpy (the sum over the devices); errors by type and
message, as JAX raises them. A partial sum is never read as if it were the value.
"""
from __future__ import annotations

import pickle

import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from shardc.sharding import AxisType, NamedSharding, PartitionSpec as P

ShardingTypeError = jax.sharding.ShardingTypeError
UNREDUCED_INDICES = "device_indices_map doesn't work with unreduced"


@pytest.fixture
def mesh():
    mesh = jax.make_mesh((2,), ("x",), axis_types=(AxisType.Explicit,))
    with jax.set_mesh(mesh):
        yield mesh


# --- the spec ------------------------------------------------------------------------------------

def test_spec_repr_equality_and_pickle():
    assert repr(P(unreduced={"x"})) == "P(unreduced={'x'})"
    assert repr(P("x", reduced={"y"})) == "P('x', reduced={'y'})"
    assert repr(P(None, unreduced={"x"})) == "P(None, unreduced={'x'})"
    assert repr(P("x", unreduced={"y"}).update(reduced={"z"})) == \
        "P('x', unreduced={'y'}, reduced={'z'})"
    assert P(unreduced={"x"}) != P() and P(unreduced={"x"}) == P(unreduced=frozenset({"x"}))
    assert P(reduced={"x"}) != P(unreduced={"x"})
    assert P("a", unreduced={"x"}).to_ct_spec() == P("a", reduced={"x"})
    spec = P("a", unreduced={"x"}, reduced={"y"})
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert P("a", unreduced={"x"}) + P("b", reduced={"y"}) == P("a", "b", unreduced={"x"},
                                                               reduced={"y"})


@pytest.mark.parametrize("make, error, message", [
    (lambda: P("x", unreduced={"x"}), ValueError,
     "partitions cannot overlap with unreduced axes passed to PartitionSpec"),
    (lambda: P(unreduced={"x"}, reduced={"x"}), ValueError,
     "`unreduced` and `reduced` argument to PartitionSpec cannot overlap"),
    (lambda: P(unreduced=["x"]), TypeError,
     "unreduced argument of PartitionSpec should of type `frozenset` or `set`"),
    (lambda: P(reduced={None}), ValueError, "reduced cannot contain None"),
    (lambda: P("a", unreduced={"x"}) + ("b",), TypeError, "cannot be of instance `tuple`"),
])
def test_spec_errors(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_named_sharding_checks_axes():
    explicit = jax.make_mesh((2,), ("x",), axis_types=(AxisType.Explicit,))
    auto = jax.make_mesh((2,), ("x",), axis_types=(AxisType.Auto,))
    with pytest.raises(ValueError, match=r"Unreduced axes z is not found in mesh.axis_names"):
        NamedSharding(explicit, P(unreduced={"z"}))
    with pytest.raises(ValueError, match="Reduced axes can only refer to mesh axes that is of "
                                         "type `Explicit`"):
        NamedSharding(auto, P(reduced={"x"}))
    unreduced = NamedSharding(explicit, P(unreduced={"x"}))
    assert not unreduced.is_fully_replicated
    assert NamedSharding(explicit, P(reduced={"x"})).is_fully_replicated
    assert unreduced != NamedSharding(explicit, P())
    with pytest.raises(NotImplementedError, match=UNREDUCED_INDICES):
        unreduced.devices_indices_map((4,))


# --- arrays: reduced copies, partial sums, and the reshards between them -------------------------

def test_reduced_array_and_elementwise(mesh):
    a = jax.device_put(np.arange(4.0), P(reduced={"x"}))
    assert str(jax.typeof(a)) == "float32[4]{R:x}"
    assert a.sharding == NamedSharding(mesh, P(reduced={"x"}))
    np.testing.assert_array_equal(np.asarray(a), np.arange(4.0))
    b = a + 1
    assert str(jax.typeof(b)) == "float32[4]{R:x}"
    assert b.sharding == NamedSharding(mesh, P(None, reduced={"x"}))
    np.testing.assert_array_equal(np.asarray(b), np.arange(4.0) + 1)
    assert jnp.sin(a).sharding == NamedSharding(mesh, P(None, reduced={"x"}))


def test_unreduced_array_holds_partial_sums(mesh):
    a = jax.device_put(np.arange(4.0), P(reduced={"x"}))
    u = jax.reshard(a, P(unreduced={"x"}))
    assert str(jax.typeof(u)) == "float32[4]{U:x}"
    assert u.sharding == NamedSharding(mesh, P(None, unreduced={"x"}))
    assert not u.is_fully_replicated
    # the partial sums add up to the value: one device holds it, the other zeros
    shards = [np.asarray(s.data) for s in u.addressable_shards]
    np.testing.assert_array_equal(sum(shards), np.arange(4.0))
    # reading one as the value is JAX's NotImplementedError, never a term of the sum
    with pytest.raises(NotImplementedError, match=UNREDUCED_INDICES):
        np.asarray(u)
    assert repr(u).startswith("Array(shape=(4,), dtype=float32, sharding=NamedSharding(")
    for target in (P(), P("x"), P(reduced={"x"})):
        np.testing.assert_array_equal(np.asarray(jax.reshard(u, target)), np.arange(4.0))
    np.testing.assert_array_equal(np.asarray(jax.jit(lambda v: jax.reshard(v, P()))(u)),
                                  np.arange(4.0))


def test_split_to_unreduced_and_back(mesh):
    b = jax.device_put(np.arange(8.0), P("x"))
    u = jax.reshard(b, P(unreduced={"x"}))
    assert str(jax.typeof(u)) == "float32[8]{U:x}"
    np.testing.assert_array_equal(sum(np.asarray(s.data) for s in u.addressable_shards),
                                  np.arange(8.0))
    np.testing.assert_array_equal(np.asarray(jax.reshard(u, P("x"))), np.arange(8.0))
    r = jax.reshard(b, P(reduced={"x"}))
    assert r.sharding == NamedSharding(mesh, P(None, reduced={"x"}))
    for s in r.addressable_shards:
        np.testing.assert_array_equal(np.asarray(s.data), np.arange(8.0))


def test_operations_on_unreduced(mesh):
    """What JAX allows on a partial sum (the linear operations) and what it refuses."""
    u = jax.reshard(jax.device_put(np.arange(4.0), P(reduced={"x"})), P(unreduced={"x"}))
    with pytest.raises(NotImplementedError, match="unreduced rule for sin is not implemented"):
        jnp.sin(u)
    with pytest.raises(ShardingTypeError, match="RHS should be reduced along the same axes LHS "
                                                "is unreduced on"):
        u * 2
    plain = jax.device_put(np.ones(4, np.float32), P())
    with pytest.raises(ShardingTypeError, match="lhs is unreduced while rhs is not. `add` "
                                                "operation does not allow this"):
        jax.jit(lambda a, b: a + b)(u, plain)
    with pytest.raises(ShardingTypeError, match="cannot be unreduced since mul is bilinear"):
        jax.jit(lambda a: a * a)(u)
    # two partial sums added device by device, eagerly and under jit (as JAX's)
    for f in (lambda a: a + a, jax.jit(lambda a: a + a)):
        twice = f(u)
        assert str(jax.typeof(twice)) == "float32[4]{U:x}"
        np.testing.assert_array_equal(sum(_blocks(twice)), 2 * np.arange(4.0))
    total = jax.jit(lambda a: jax.reshard((a + a).T.sum(), P()))(u)
    np.testing.assert_array_equal(np.asarray(total), 12.0)
    r = jax.device_put(np.full(4, 2.0, np.float32), P(reduced={"x"}))
    scaled = jax.jit(lambda a, b: jax.reshard(a * b, P()))(u, r)
    np.testing.assert_array_equal(np.asarray(scaled), 2 * np.arange(4.0))


# --- shard_map: partial sums in and out of bodies ------------------------------------------------

def _blocks(x):
    return [np.asarray(s.data) for s in x.addressable_shards]


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_shard_map_returns_partial_sums(mesh, jit):
    """A body's varying value returned as a partial sum (no psum): the devices' blocks are
    its terms, and reshard adds them."""
    arr = jax.device_put(np.arange(8.0), P("x"))
    f = jax.shard_map(lambda x: jax.lax.pcast(x, "x", to="unreduced"),
                      out_specs=P(unreduced={"x"}))
    f = jax.jit(f) if jit else f
    out = f(arr)
    assert out.sharding == NamedSharding(mesh, P(unreduced={"x"}))
    assert str(jax.typeof(out)) == "float32[4]{U:x}"
    np.testing.assert_array_equal(_blocks(out), [np.arange(4.0), np.arange(4.0, 8.0)])
    np.testing.assert_array_equal(np.asarray(jax.reshard(out, P())),
                                  np.arange(4.0) + np.arange(4.0, 8.0))
    # d(sum of the total)/dx = 1 for every element, each device's gradient its own block
    grad = jax.grad(lambda x: f(x).sum())(arr)
    assert grad.sharding == NamedSharding(mesh, P("x"))
    np.testing.assert_array_equal(np.asarray(grad), np.ones(8))
    np.testing.assert_array_equal(np.asarray(jax.jit(jax.grad(lambda x: f(x).sum()))(arr)),
                                  np.ones(8))


def test_varying_value_returned_as_partial_sums_implicitly(mesh):
    """out_specs unreduced over an axis the value varies over casts it (JAX's implicit
    vary_unreduced_cast); psum of such an input adds the terms."""
    arr = jax.device_put(np.arange(4), P("x"))
    f = jax.jit(jax.shard_map(lambda x: x, in_specs=P("x"), out_specs=P(unreduced={"x"})))
    out = f(arr)
    assert out.sharding == NamedSharding(mesh, P(None, unreduced={"x"}))
    np.testing.assert_array_equal(_blocks(out), [[0, 1], [2, 3]])
    for fast in (True, False):
        g = jax.shard_map(lambda x: jax.lax.psum(x, "x"), in_specs=P(unreduced={"x"}),
                          out_specs=P())
        total = (jax.jit(g) if fast else g)(out)
        assert total.sharding == NamedSharding(mesh, P(None))
        for block in _blocks(total):
            np.testing.assert_array_equal(block, [2, 4])


def test_partial_sums_in_scattered(mesh):
    arr = jax.reshard(jnp.arange(8.0), P(unreduced={"x"}))
    f = jax.shard_map(lambda x: jax.lax.psum_scatter(x, "x", tiled=True), out_specs=P("x"))
    out = f(arr)
    assert out.sharding == NamedSharding(mesh, P("x"))
    np.testing.assert_array_equal(np.asarray(out), np.arange(8.0))
    grad = jax.grad(lambda x: f(x).sum())(arr)
    assert grad.sharding == NamedSharding(mesh, P(None, reduced={"x"}))
    np.testing.assert_array_equal(np.asarray(grad), np.ones(8))


def test_gathered_reduced_out(mesh):
    arr = jax.device_put(np.arange(8.0), P("x"))
    f = jax.shard_map(lambda x: jax.lax.all_gather(x, "x", tiled=True, to="reduced"),
                      out_specs=P(reduced={"x"}))
    out = f(arr)
    assert out.sharding == NamedSharding(mesh, P(reduced={"x"}))
    np.testing.assert_array_equal(np.asarray(out), np.arange(8.0))
    # its cotangent is a partial sum: added once, not once per device
    grad = jax.grad(lambda x: f(x).sum())(arr)
    assert grad.sharding == NamedSharding(mesh, P("x"))
    np.testing.assert_array_equal(np.asarray(grad), np.ones(8))


def test_shard_map_errors_on_partial_sums(mesh):
    arr = jax.device_put(np.arange(8.0), P("x"))

    def sin_of_partial_sums(x):
        return jnp.sin(jax.lax.pcast(x, "x", to="unreduced"))

    with pytest.raises(NotImplementedError, match="unreduced rule for sin is not implemented"):
        jax.shard_map(sin_of_partial_sums, out_specs=P(unreduced={"x"}))(arr)
    partial = jax.reshard(jnp.arange(8.0), P(unreduced={"x"}))
    with pytest.raises(ValueError, match="in_specs containing unreduced P"):
        jax.shard_map(lambda x: x, in_specs=P(), out_specs=P())(partial)
    with pytest.raises(ValueError, match="out_specs passed to shard_map should be equal to the "
                                         "reduced present on the out_aval"):
        jax.shard_map(lambda x: x, in_specs=P(), out_specs=P(reduced={"x"}))(np.ones(4))
    auto = jax.make_mesh((2,), ("x",), axis_types=(AxisType.Auto,))
    with jax.set_mesh(auto), pytest.raises(
            ValueError, match="can only be used when the mesh passed to shard_map contains axis "
                              "names all of type `Explicit`"):
        jax.shard_map(lambda x: x, mesh=auto, in_specs=P(), out_specs=P(unreduced={"x"}))(
            np.ones(4))
    # under the Explicit mesh set, the Auto one is first the wrong mesh (JAX's order)
    with pytest.raises(ValueError, match="should match the mesh passed to shard_map"):
        jax.shard_map(lambda x: x, mesh=auto, in_specs=P(), out_specs=P(unreduced={"x"}))(
            np.ones(4))


# --- under jit on an Explicit mesh: products left as partial sums, reshards between layouts ------

def test_einsum_out_sharding_unreduced(mesh):
    a, b = np.arange(8.0).reshape(4, 2), np.arange(12.0).reshape(2, 6)
    x, y = jax.device_put(a, P(None, "x")), jax.device_put(b, P("x", None))
    f = jax.jit(lambda x, y: jnp.einsum("ab,bc->ac", x, y, out_sharding=P(unreduced={"x"})))
    z = f(x, y)
    assert str(jax.typeof(z)) == "float32[4,6]{U:x}"
    np.testing.assert_allclose(sum(_blocks(z)), a @ b)
    np.testing.assert_allclose(np.asarray(jax.reshard(z, P())), a @ b)
    loss = lambda x, y: jax.reshard(f(x, y), P()).sum()
    gx, gy = jax.jit(jax.grad(loss, argnums=(0, 1)))(x, y)
    np.testing.assert_allclose(np.asarray(gx), np.ones((4, 6)) @ b.T)
    np.testing.assert_allclose(np.asarray(gy), a.T @ np.ones((4, 6)))
    with pytest.raises(ShardingTypeError, match="lhs and rhs contracting dims should be sharded "
                                                "identically when out_sharding"):
        jax.jit(lambda x, y: jax.lax.dot_general(
            x, jax.reshard(y, P()), (((1,), (0,)), ((), ())),
            out_sharding=NamedSharding(mesh, P(unreduced={"x"}))))(x, jax.reshard(x.T, P()))


@pytest.mark.parametrize("target", [P(unreduced={"x"}), P(unreduced={"y"}),
                                    P("x", reduced={"y"}), P(reduced={"x", "y"})],
                         ids=["Ux", "Uy", "Sx-Ry", "Rxy"])
def test_reshard_round_trips_under_jit(target):
    mesh = jax.make_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
    with jax.set_mesh(mesh):
        v = jax.device_put(np.arange(8.0), P("x"))
        there = jax.jit(lambda v: jax.reshard(v, target))(v)
        assert there.sharding == NamedSharding(mesh, target)
        f = lambda v: jax.reshard(jax.reshard(v, target), P())
        np.testing.assert_array_equal(np.asarray(jax.jit(f)(v)), np.arange(8.0))
        np.testing.assert_array_equal(np.asarray(f(v)), np.arange(8.0))
        grad = jax.jit(jax.grad(lambda v: (f(v) * np.arange(8.0)).sum()))(v)
        np.testing.assert_array_equal(np.asarray(grad), np.arange(8.0))


def test_reduced_operand_is_cast_to_varying(mesh):
    """A reduced operand of an operation with a varying one becomes varying by
    reduced_vary_cast (not pvary), whose transpose leaves the cotangent a partial sum."""
    w = jax.device_put(np.arange(8.0), P(reduced={"x"}))
    x = jax.device_put(np.ones(16), P("x"))

    @jax.shard_map(in_specs=(P(reduced={"x"}), P("x")), out_specs=P("x"))
    def f(w, x):
        return w * x

    for g in (f, jax.jit(f)):
        np.testing.assert_array_equal(np.asarray(g(w, x)), np.tile(np.arange(8.0), 2))
    text = str(jax.make_jaxpr(f)(w, x))
    assert "reduced_vary_cast" in text and "pvary" not in text
    gw = jax.jit(jax.grad(lambda w, x: f(w, x).sum()))(w, x)
    assert gw.sharding == NamedSharding(mesh, P(None, unreduced={"x"}))
    np.testing.assert_array_equal(np.asarray(jax.reshard(gw, P())), 2 * np.ones(8))


def test_gradient_of_a_partial_sum_output(mesh):
    """grad of a function returning a partial sum: the seed is reduced, so x's cotangent is
    reduced (y, the same everywhere) and y's a partial sum (x's terms), as JAX's."""
    x = jax.device_put(jnp.arange(8.0), P(unreduced={"x"}))
    y = jax.device_put(jnp.arange(8.0), P(reduced={"x"}))
    f = jax.jit(jax.shard_map(lambda a, b: (a * b).sum(), out_specs=P(unreduced={"x"})))
    gx, gy = jax.jit(jax.grad(f, argnums=(0, 1)))(x, y)
    assert gx.sharding == NamedSharding(mesh, P(None, reduced={"x"}))
    assert gy.sharding == NamedSharding(mesh, P(None, unreduced={"x"}))
    np.testing.assert_array_equal(np.asarray(gx), np.arange(8.0))
    np.testing.assert_array_equal(np.asarray(jax.reshard(gy, P())), np.arange(8.0))


def test_reduced_reshape_and_its_partial_sum_cotangent(mesh):
    arr = jax.device_put(np.arange(8.0), P(reduced={"x"}))
    f = jax.jit(jax.shard_map(lambda x: jnp.reshape(x, (4, 2)), out_specs=P(reduced={"x"})))
    out = f(arr)
    assert out.sharding == NamedSharding(mesh, P(None, None, reduced={"x"}))
    np.testing.assert_array_equal(np.asarray(out), np.arange(8.0).reshape(4, 2))
    grad = jax.jit(jax.grad(lambda x: f(x).sum()))(arr)
    assert grad.sharding == NamedSharding(mesh, P(None, unreduced={"x"}))
    # one device's term is the gradient, the other's zero (their sum, not twice it)
    np.testing.assert_array_equal(_blocks(grad), [np.ones(8), np.zeros(8)])


def test_split_value_made_partial_sums_keeps_each_block(mesh):
    """A value split over an axis made unreduced over it: each device's term is its own
    block in zeros (JAX's; nothing moves), eagerly and under jit."""
    shd = jax.device_put(np.arange(4), P("x"))
    for out in (jax.device_put(shd, P(unreduced={"x"})),
                jax.jit(lambda v: v, out_shardings=P(unreduced={"x"}))(shd),
                jax.jit(lambda v: jax.reshard(v, P(unreduced={"x"})))(shd)):
        assert out.sharding == NamedSharding(mesh, P(unreduced={"x"}))
        np.testing.assert_array_equal(_blocks(out), [[0, 1, 0, 0], [0, 0, 2, 3]])
    rep = jax.device_put(np.arange(4), P())
    out = jax.jit(lambda v: v, out_shardings=P(unreduced={"x"}))(rep)
    np.testing.assert_array_equal(_blocks(out), [[0, 1, 2, 3], [0, 0, 0, 0]])


def test_einsum_partial_products_per_device(mesh):
    a = np.arange(4.0).reshape(2, 2)
    x, y = jax.device_put(a, P(None, "x")), jax.device_put(a, P("x", None))
    out = jax.jit(lambda x, y: jnp.einsum("ab,bc->ac", x, y,
                                          out_sharding=P(None, None, unreduced={"x"})))(x, y)
    # each device's product of its column of x and row of y (no sum before)
    np.testing.assert_array_equal(_blocks(out), [np.outer(a[:, 0], a[0]),
                                                 np.outer(a[:, 1], a[1])])


def test_control_flow_carries_reduced_values(mesh):
    w = jax.device_put(np.arange(4.0), P(reduced={"x"}))

    @jax.jit
    def f(w):
        def body(carry, _):
            return carry + w, None
        zero = jax.reshard(jnp.zeros(4), P(reduced={"x"}))   # (a plain carry: JAX's error)
        total, _ = jax.lax.scan(body, zero, None, length=3)
        return jax.lax.cond(total.sum() > 0, lambda t: t * 2, lambda t: t, total)

    out = f(w)
    assert str(jax.typeof(out)) == "float32[4]{R:x}"
    np.testing.assert_array_equal(np.asarray(out), 6 * np.arange(4.0))


def test_reduce_sum_left_as_partial_sums():
    mesh = jax.make_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
    with jax.set_mesh(mesh):
        host = np.arange(16.0).reshape(4, 2, 2)
        arr = jax.device_put(host, P("x", "y", None))
        f = jax.jit(lambda v: jax.lax.reduce_sum(v, axes=(0, 1),
                                                 out_sharding=P(None, unreduced={"x"})))
        out = f(arr)
        assert out.sharding == NamedSharding(mesh, P(None, unreduced={"x"}))
        np.testing.assert_array_equal(np.asarray(jax.reshard(out, P())), host.sum((0, 1)))
        with pytest.raises(ShardingTypeError, match="out_sharding's unreduced axes should be "
                                                    "in operand's specs that were summed"):
            jax.jit(lambda v: jax.lax.reduce_sum(
                v, axes=(2,), out_sharding=P(None, None, unreduced={"x"})))(arr)


def test_vjp_zero_cotangent_of_reduced_is_unreduced(mesh):
    a = jax.reshard(np.arange(8.0), P(reduced={"x"}))
    ct = jax.reshard(jnp.arange(8.0), P(unreduced={"x"}))
    _, f_vjp = jax.vjp(jax.jit(lambda x, y: y), a, a)
    x_bar, y_bar = f_vjp(ct)
    assert jax.typeof(x_bar).sharding.spec == P(None, unreduced={"x"})
    assert jax.typeof(y_bar).sharding.spec == P(None, unreduced={"x"})
    np.testing.assert_array_equal(np.asarray(jax.reshard(x_bar, P())), np.zeros(8))
    np.testing.assert_array_equal(np.asarray(jax.reshard(y_bar, P())), np.arange(8.0))


def test_custom_vjp_of_a_reduced_value(mesh):
    """A custom_vjp inside a body returning a reduced value: its tangent is reduced, and a
    bwd giving no cotangent leaves the input's a zero partial sum (JAX's zero of the
    cotangent type)."""
    @jax.custom_vjp
    def inner(x):
        return x

    inner.defvjp(lambda x: (x, None), lambda _, g: (None,))
    f = jax.shard_map(lambda x: inner(x), out_specs=P(reduced={"x"}))
    arr = jax.device_put(jnp.arange(8.0), P(reduced={"x"}))
    np.testing.assert_array_equal(np.asarray(f(arr)), np.arange(8.0))
    grad = jax.jit(jax.grad(lambda x: f(x).sum()))(arr)
    assert grad.sharding == NamedSharding(mesh, P(None, unreduced={"x"}))
    np.testing.assert_array_equal(np.asarray(jax.reshard(grad, P())), np.zeros(8))


def test_custom_vjp_bwd_gets_its_cotangent_split_as_the_output():
    """JAX's shard_map test_shmap_unreduced_fsdp_custom_vjp_bwd: the cotangent a custom_vjp's
    bwd rule gets is typed as the primal output (split over data and seq), so the rule can
    contract it with a split residual into a partial sum over both axes, then
    reduce-scatter and all-reduce it by hand. (It came unsplit, and the contraction of a
    split operand with an unsplit one into an unreduced result was refused.)"""
    mesh = jax.make_mesh((2, 2), ("data", "seq"), axis_types=(AxisType.Explicit,) * 2)
    xh, yh = np.arange(64.).reshape(8, 4, 2) / 64, np.arange(12.).reshape(2, 6) / 12
    seen = []

    @jax.custom_vjp
    def f(x, y):
        gathered = jax.shard_map(
            lambda a: jax.lax.all_gather(a, "seq", tiled=True, to="reduced"),
            in_specs=P("seq", None), out_specs=P(None, None, reduced={"seq"}))(y)
        return jnp.einsum("btd,df->btf", x, gathered)

    def f_bwd(res, g):
        x, y = res
        seen.append(str(jax.typeof(g)))
        scatter = jax.shard_map(lambda a: jax.lax.psum_scatter(a, "seq", tiled=True),
                                in_specs=P(unreduced={"data", "seq"}),
                                out_specs=P("seq", None, unreduced={"data"}))
        reduce = jax.shard_map(lambda a: jax.lax.psum(a, "data"),
                               in_specs=P("seq", None, unreduced={"data"}),
                               out_specs=P("seq", None))
        x_bar = jnp.einsum("btf,df->btd", g, y, out_sharding=P("data", "seq", None))
        y_bar = jnp.einsum("btd,btf->df", x, g,
                           out_sharding=P(None, None, unreduced={"data", "seq"}))
        return x_bar, reduce(scatter(y_bar))

    f.defvjp(lambda x, y: (f(x, y), (x, y)), f_bwd)
    with jax.set_mesh(mesh):
        x = jax.device_put(xh, P("data", "seq", None))
        y = jax.device_put(yh, P("seq", None))
        gx, gy = jax.jit(jax.grad(lambda x, y: jnp.sin(jax.jit(f)(x, y).sum()),
                                  argnums=(0, 1)))(x, y)
    assert seen == ["float32[8@data,4@seq,6]"]
    scale = np.cos((xh @ yh).sum())
    np.testing.assert_allclose(np.asarray(gx), scale * np.ones((8, 4, 6)) @ yh.T, rtol=2e-4)
    np.testing.assert_allclose(np.asarray(gy), scale * xh.reshape(32, 2).T @ np.ones((32, 6)),
                               rtol=2e-4)
    assert str(jax.typeof(gx)) == "float32[8@data,4@seq,2]"
    assert str(jax.typeof(gy)) == "float32[2@seq,6]"


def test_reduced_residual_keeps_its_type(mesh):
    """A reduced value a body's backward pass reads (cos x for sin) stays reduced between the
    forward and backward bodies: x's cotangent is a partial sum, added once."""
    arr = jax.device_put(jnp.arange(8.0), P(reduced={"x"}))
    g = jax.jit(jax.shard_map(lambda x: jax.lax.sin(x).sum(), out_specs=P(reduced={"x"})))
    grad = jax.jit(jax.grad(g))(arr)
    assert grad.sharding == NamedSharding(mesh, P(None, unreduced={"x"}))
    np.testing.assert_allclose(np.asarray(jax.reshard(grad, P())), np.cos(np.arange(8.0)),
                               rtol=1e-6)
    # a body value's .mat is its type's (JAX's)
    jax.shard_map(lambda x: (assert_reduced(x), x)[1], out_specs=P(reduced={"x"}))(arr)


def assert_reduced(x):
    assert x.mat.reduced == {"x"} and x.mat.varying == frozenset()
    assert jax.typeof(x).mat.reduced == {"x"}


def test_typeof_names_partial_sums_in_the_manual_type_in_a_body_only(mesh):
    """``typeof(t).mat`` of a body's partial sum names its unreduced axes; outside the body
    the type's sharding spec names them and ``.mat`` is empty (JAX's)."""
    seen = {}

    @jax.shard_map(in_specs=P("x"), out_specs=P(unreduced={"x"}))
    def partial(block):
        t = jax.lax.pcast(block.sum(), "x", to="unreduced")
        seen["body"] = jax.typeof(t)
        return t

    @jax.jit
    def total(v):
        u = partial(v)
        seen["outside"] = jax.typeof(u)
        return jax.reshard(u, P())

    assert float(total(jax.device_put(np.arange(8.0), P("x")))) == 28.0
    assert str(seen["body"]) == str(seen["outside"]) == "float32[]{U:x}"
    assert seen["body"].mat.unreduced == {"x"} and seen["outside"].mat.unreduced == frozenset()
    assert seen["outside"].sharding.spec == P(unreduced={"x"})


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_partial_sums_split_over_another_axis_enter_a_body(jit):
    """Blocks split over y and partial sums over x: each device's term kept apart (not one
    copy per y taken for all), eagerly and under jit."""
    mesh = jax.make_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
    with jax.set_mesh(mesh):
        u = jax.reshard(jax.device_put(np.arange(8.0), P("y")), P("y", unreduced={"x"}))
        f = jax.shard_map(lambda b: jax.lax.psum(b + b, "x"),
                          in_specs=P("y", unreduced={"x"}), out_specs=P("y"))
        out = (jax.jit(f) if jit else f)(u)
        np.testing.assert_array_equal(np.asarray(out), 2 * np.arange(8.0))


_LAYOUTS = [P("x"), P("y"), P(), P(unreduced={"x"}), P(unreduced={"y"}), P(reduced={"x"}),
            P("x", unreduced={"y"}), P(unreduced={"x", "y"}), P("y", reduced={"x"})]


@pytest.mark.parametrize("first", _LAYOUTS, ids=repr)
def test_reshard_between_any_two_layouts(first):
    """A value through two layouts (plain, split, partial sums, known-equal copies) and back:
    the same value, and the same gradient, eagerly and under jit (as JAX gives them)."""
    mesh = jax.make_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
    weights = np.arange(8.0) + 1
    with jax.set_mesh(mesh):
        v = jax.device_put(np.arange(8.0), P())
        for second in _LAYOUTS:
            f = lambda v: jax.reshard(jax.reshard(jax.reshard(v, first), second), P())
            np.testing.assert_array_equal(np.asarray(jax.jit(f)(v)), np.arange(8.0))
            np.testing.assert_array_equal(np.asarray(f(v)), np.arange(8.0))
            grad = jax.jit(jax.grad(lambda v: (f(v) * weights).sum()))(v)
            np.testing.assert_array_equal(np.asarray(jax.reshard(grad, P())), weights)


def test_reduced_times_a_scalar_and_its_gradient(mesh):
    arr = jax.device_put(np.arange(4.0), P(reduced={"x"}))
    f = jax.jit(lambda x: x * 2)
    assert f(arr).sharding == NamedSharding(mesh, P(None, reduced={"x"}))
    grad = jax.jit(jax.grad(lambda x: f(x).sum()))(arr)
    assert grad.sharding == NamedSharding(mesh, P(None, unreduced={"x"}))
    np.testing.assert_array_equal(np.asarray(jax.reshard(grad, P())), np.full(4, 2.0))
    partial = jax.reshard(jnp.arange(4.0), P(unreduced={"x"}))
    with pytest.raises(ShardingTypeError, match="RHS should be reduced along the same axes"):
        jax.jit(lambda x: x * 2)(partial)


def test_reshape_out_sharding_must_keep_unreduced_and_reduced(mesh):
    with pytest.raises(ValueError, match="cannot contain unreduced"):
        jnp.reshape(np.arange(8), (4, 2), out_sharding=P(unreduced={"x"}))
    with pytest.raises(ValueError, match="cannot contain reduced"):
        jnp.reshape(np.arange(8), (4, 2), out_sharding=P(reduced={"x"}))
    for which in ("unreduced", "reduced"):
        arr = jax.reshard(jnp.arange(8), P(**{which: {"x"}}))
        with pytest.raises(ValueError, match=f"must be {which} over the same mesh axes"):
            jnp.reshape(arr, (4, 2), out_sharding=P("x"))
    partial = jax.reshard(jnp.arange(8.0), P(unreduced={"x"}))
    out = jax.jit(lambda a: jnp.reshape(a, (4, 2), out_sharding=P(unreduced={"x"})))(partial)
    np.testing.assert_array_equal(np.asarray(jax.reshard(out, P())),
                                  np.arange(8.0).reshape(4, 2))


def test_gradient_of_a_reduced_weight_through_a_product(mesh):
    """A reduced weight's gradient is a partial sum, whether the product's sides split the
    contraction alike (each device's product its term) or not (the product whole, then made
    a partial sum): its sum is numpy's gradient either way."""
    xh, wh = np.arange(32.0).reshape(8, 4), np.arange(12.0).reshape(4, 3)
    scale = np.arange(24.0).reshape(8, 3)
    x = jax.device_put(xh, P("x", None))
    w = jax.device_put(wh, P(reduced={"x"}))
    for loss in (lambda x, w: (jnp.dot(x, w) * scale).sum(),
                 lambda x, w: (jax.reshard(jnp.dot(x, w), P()) * scale).sum()):
        gw = jax.jit(jax.grad(loss, argnums=1))(x, w)
        assert gw.sharding == NamedSharding(mesh, P(None, None, unreduced={"x"}))
        np.testing.assert_allclose(np.asarray(jax.reshard(gw, P())), xh.T @ scale)


def test_per_example_gradients_of_a_reduced_weight_stay_partial_sums(mesh):
    """vmap of the gradient of a reduced weight: each member's gradient is a partial sum, so
    the batched one is unreduced too (an out_sharding given the batch dimension keeps its
    unreduced axes), with and without a scan over layers."""
    xh = np.arange(4 * 8 * 16, dtype=np.float32).reshape(4, 8, 16) % 5 / 4
    wh = np.arange(16 * 16, dtype=np.float32).reshape(16, 16) % 3 / 8
    x = jax.device_put(xh, P(None, "x"))
    w = jax.device_put(wh, P(reduced={"x"}))
    ws = jax.device_put(np.stack([wh, wh.T]), P(reduced={"x"}))
    dot = lambda c, w: jnp.dot(c, w, out_sharding=P("x"))
    once = lambda w, x: jnp.sum(jnp.sin(dot(x, w)))
    layers = lambda ws, x: jnp.sum(jax.lax.scan(lambda c, w: (dot(c, w), None), x, ws)[0])
    total, gw = jax.jit(jax.vmap(jax.value_and_grad(once), in_axes=(None, 0)))(w, x)
    assert str(jax.typeof(gw)) == "float32[4,16,16]{U:x}"
    np.testing.assert_allclose(np.asarray(total), np.sin(xh @ wh).sum((1, 2)), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(jax.reshard(gw, P())),
                               np.swapaxes(xh, 1, 2) @ np.cos(xh @ wh), rtol=1e-5)
    _, gws = jax.jit(jax.vmap(jax.value_and_grad(layers), in_axes=(None, 0)))(ws, x)
    assert str(jax.typeof(gws)) == "float32[4,2,16,16]{U:x}"
    ones = np.ones((4, 8, 16), np.float32)
    want = np.stack([np.swapaxes(xh, 1, 2) @ (ones @ wh), np.swapaxes(xh @ wh, 1, 2) @ ones],
                    axis=1)
    np.testing.assert_allclose(np.asarray(jax.reshard(gws, P())), want, rtol=1e-5)


def test_segment_ops_into_partial_sums():
    mesh = jax.make_mesh((4,), ("x",), axis_types=(AxisType.Explicit,))
    with jax.set_mesh(mesh):
        a = jax.device_put(jnp.arange(8, dtype=jnp.int32), P("x"))
        b = jax.device_put(jnp.array([0, 0, 1, 1, 1, 2, 2, 3]), P("x"))
        total = jax.jit(lambda x, y: jax.ops.segment_sum(
            x, y, num_segments=4, out_sharding=P(unreduced={"x"})))(a, b)
        np.testing.assert_array_equal(np.asarray(jax.reshard(total, P())), [1, 9, 11, 7])
        # a max or product of partial sums is none: JAX's NotImplementedError
        for op in (jax.ops.segment_max, jax.ops.segment_prod):
            with pytest.raises(NotImplementedError, match="unreduced/reduced rule"):
                jax.jit(lambda x, y: op(x, y, num_segments=4,
                                        out_sharding=P(unreduced={"x"})))(a, b)
