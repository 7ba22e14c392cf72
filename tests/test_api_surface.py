"""The parts of JAX's API that real programs lean on: isinstance checks on traced values,
``typeof``, array and sharding properties, ``device=`` in constructors, ``unroll=`` in loops,
and collectives with ``axis_index_groups``; each held against numpy or the per-block
reference."""
import operator
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import shardc
import shardc.numpy as jnp
from shardc import lax
from shardc.sharding import NamedSharding, PartitionSpec as P, SingleDeviceSharding

MESH = shardc.make_mesh((4, 2), ("x", "y"))
MESH_I = shardc.make_mesh((4,), ("i",))


# --- isinstance(x, jax.Array) ------------------------------------------------------------------

def test_arrays_and_traced_values_are_arrays_to_isinstance():
    seen = []

    def record(x):
        seen.append((isinstance(x, shardc.Array), isinstance(x, jnp.ndarray),
                     type(x) is shardc.Array))
        return x * 2

    x = jnp.arange(8.)
    record(x)
    shardc.jit(record)(x)
    shardc.vmap(record)(x)
    shardc.grad(lambda v: record(v).sum())(x)
    shardc.shard_map(record, mesh=MESH_I, in_specs=P("i"), out_specs=P("i"))(x)
    assert seen[0] == (True, True, True)                 # a concrete array is one
    assert all(s[:2] == (True, True) for s in seen)       # every traced value too
    assert all(not s[2] for s in seen[1:])                # ... but type() stays what it is
    assert not isinstance(np.ones(3), shardc.Array) and not isinstance(3.0, jnp.ndarray)


# --- typeof ----------------------------------------------------------------------------------------

def test_typeof_reports_the_manual_axis_type_and_vma():
    types = []

    def body(a, b):
        types.append((shardc.typeof(a), shardc.typeof(b), shardc.typeof(a + b)))
        return a + b

    shardc.shard_map(body, mesh=MESH, in_specs=(P("x"), P()), out_specs=P("x"))(
        jnp.arange(8.), jnp.arange(2.))
    a, b, total = types[0]
    assert a.vma == frozenset({"x"}) and a.manual_axis_type.varying == frozenset({"x"})
    assert b.vma == frozenset() and b.manual_axis_type.varying == frozenset()
    assert total.mat.varying == frozenset({"x"})
    assert a.manual_axis_type.unreduced == frozenset() and a.manual_axis_type.reduced == frozenset()
    assert a.shape == (2,) and a.dtype == np.float32 and str(a) == "float32[2]{V:x}"


def test_types_are_shaped_arrays():
    t = shardc.typeof(jnp.ones(3))
    assert type(t).__name__ == "ShapedArray" and repr(t) == "ShapedArray(float32[3])"
    keys = shardc.random.split(shardc.random.key(0), 4)
    assert type(shardc.typeof(keys)).__name__ == "ShapedArray"


def test_typeof_of_a_concrete_array_has_its_sharding():
    placed = shardc.device_put(jnp.arange(8.), NamedSharding(MESH, P("x")))
    t = shardc.typeof(placed)
    # on Explicit axes: the type's sharding, on the abstract mesh (JAX's)
    assert t.sharding == NamedSharding(MESH.abstract_mesh, P("x")) and t.manual_axis_type.empty
    assert str(t) == "float32[8@x]" and placed.sharding == NamedSharding(MESH, P("x"))
    # an unsplit type reads P(None, ...) on the mesh in context, here none (JAX's)
    assert shardc.typeof(jnp.arange(3)).sharding == NamedSharding(
        shardc.sharding.get_abstract_mesh(), P(None))
    assert shardc.typeof(jnp.arange(3)).sharding.mesh.empty


@pytest.mark.parametrize("value", [(1, 2), [1.0]])
def test_typeof_of_a_container_is_a_type_error(value):
    with pytest.raises(TypeError, match=re.escape(
            f"Argument '{value}' of type '{type(value)}' is not a valid JAX type")):
        shardc.typeof(value)


def test_typeof_of_a_concrete_value_off_any_mesh_has_no_mesh():
    """Under a mesh, a concrete value on one device (or numpy's, Python's) types on the empty
    mesh, as JAX's; one made under the mesh is on it; a key's spec has one entry a key
    dimension (JAX's)."""
    mesh = shardc.make_mesh((2,), ("x",))
    with shardc.set_mesh(mesh):
        made = jnp.zeros(8)
        assert shardc.typeof(made).sharding == NamedSharding(mesh.abstract_mesh, P(None))
        one = shardc.device_put(made, shardc.sharding.SingleDeviceSharding(shardc.devices()[0]))
        for value in (one, np.zeros(3), 1.0):
            assert shardc.typeof(value).sharding.mesh.empty
        seen = []
        shardc.jit(lambda x: seen.append(shardc.typeof(x).sharding.mesh.empty) or x)(made)
        assert seen == [False]
        assert shardc.typeof(shardc.random.key(0)).sharding == NamedSharding(
            mesh.abstract_mesh, P())
        keys = shardc.random.split(shardc.random.key(0), 4)
        assert shardc.typeof(keys).sharding.spec == P(None)


def test_shaped_array_is_made_as_jax_core_makes_it():
    """``jax.core.ShapedArray(shape, dtype, weak_type, sharding=)``: typeof's class, made from a
    shape and dtype; a sharding on an abstract mesh keeps its Explicit axes (each dividing its
    dimension evenly, JAX's ValueError otherwise); it stands in for an argument as a
    ShapeDtypeStruct does."""
    from shardc.sharding import AbstractMesh, AxisType
    made = shardc.core.ShapedArray((3, 4), np.float32)
    assert repr(made) == "ShapedArray(float32[3,4])" and made.size == 12 and made.ndim == 2
    assert made == shardc.typeof(jnp.ones((3, 4), jnp.float32))
    assert isinstance(shardc.typeof(jnp.ones(3)), shardc.core.ShapedArray)
    assert made.sharding.mesh.empty and made.sharding.spec == P(None, None)
    assert repr(made.update(shape=(2,))) == "ShapedArray(float32[2])"
    assert repr(made.update(weak_type=True)) == "ShapedArray(float32[3,4], weak_type=True)"
    assert str(shardc.core.ShapedArray((2,), np.float64)) == "float64[2]"
    explicit = AbstractMesh((2,), ("x",), axis_types=(AxisType.Explicit,))
    split = shardc.core.ShapedArray((4, 2), np.int32, sharding=NamedSharding(explicit, P("x")))
    assert str(split) == "int32[4@x,2]" and split.sharding.spec == P("x", None)
    auto = AbstractMesh((2,), ("x",))
    assert shardc.core.ShapedArray((4, 2), np.int32, sharding=NamedSharding(
        auto, P("x"))).sharding.spec == P(None, None)       # Auto axes are not in types
    with pytest.raises(ValueError, match=re.escape(
            "Sharding spec ('x',) implies that array axis 0 is partitioned 2 times, but does "
            "not evenly divide the dimension size 5. Got shape: (5, 2)")):
        shardc.core.ShapedArray((5, 2), np.int32, sharding=NamedSharding(explicit, P("x")))
    with pytest.raises(ValueError, match="Mesh of an aval must be an AbstractMesh"):
        shardc.core.ShapedArray((4,), np.int32, sharding=NamedSharding(MESH, P("x")))
    # an array's abstract value compares with a ShapedArray of its shape, dtype and type
    placed = shardc.device_put(np.ones((8, 4), np.float32), NamedSharding(MESH, P("x")))
    typed = shardc.core.ShapedArray((8, 4), np.float32,
                                    sharding=NamedSharding(MESH.abstract_mesh, P("x")))
    assert placed.aval == typed and typed == placed.aval
    assert placed.aval != shardc.core.ShapedArray((8, 4), np.float32)     # unsplit
    assert shardc.numpy.ones((3, 4), np.float32).aval == made
    assert placed.aval != shardc.core.ShapedArray((8, 4), np.int32)
    assert shardc.eval_shape(lambda x: x.sum(0), made).shape == (4,)
    assert shardc.jit(lambda x: x * 2).lower(made).out_info.shape == (3, 4)
    doubled = shardc.pure_callback(lambda x: np.asarray(x) * 2,
                                   shardc.core.ShapedArray((3,), np.float32), jnp.ones(3))
    np.testing.assert_array_equal(np.asarray(doubled), [2.0, 2.0, 2.0])


def test_a_jaxprs_literals_read_as_jaxs():
    """``eqn.invars[k].val`` of a static argument traced into the program: its value."""
    def f(a, b, c):
        return (a + c) - (b * c)
    traced = shardc.make_jaxpr(f, static_argnums=(1, 0))(1, 2, 3)
    assert traced.eqns[0].invars[0].val == 1 and traced.eqns[1].invars[0].val == 2


def test_aval_sharding_reads_as_jax_public_type():
    """``x.aval.sharding`` (JAX's ShapedArray) is a NamedSharding on the abstract mesh with
    one spec entry per dimension, under jit, in a partial-manual body and eagerly; shardc's
    own code reads ``type_sharding`` and may not read the public view."""
    mesh = shardc.make_mesh((2, 2), ("x", "y"))
    abstract = mesh.abstract_mesh
    seen = {}
    with shardc.set_mesh(mesh):
        a = shardc.device_put(np.arange(16.0).reshape(4, 4), P("x", "y"))

        @shardc.jit
        def f(x):
            y = x * 2
            z = y.sum(axis=0)
            seen.update(y=y.aval.sharding, z=z.aval.sharding, typeof_z=shardc.typeof(z).sharding,
                        w=shardc.reshard(y, P("x", None)).aval.sharding.spec,
                        unsplit=jnp.ones(3).aval.sharding)
            return y

        f(a)

        def body(x):
            seen.update(body=x.aval.sharding, varying=x.aval.mat.varying)
            return x * 2

        shardc.jit(shardc.shard_map(body, out_specs=P("x"), axis_names={"x"}))(a)
    assert seen["y"] == NamedSharding(abstract, P("x", "y")) and seen["y"].spec == P("x", "y")
    assert seen["z"] == seen["typeof_z"] == NamedSharding(abstract, P("y"))
    assert seen["w"] == P("x", None)
    assert seen["unsplit"] == NamedSharding(abstract, P(None))
    body_mesh = seen["body"].mesh
    assert body_mesh.axis_types == (shardc.sharding.AxisType.Manual,
                                    shardc.sharding.AxisType.Explicit)
    assert seen["body"].spec == P(None, "y") and seen["varying"] == {"x"}
    assert a.aval.sharding == NamedSharding(abstract, P("x", "y"))
    assert jnp.ones(3).aval.sharding.mesh.empty
    from ir.core import Aval, TypeSharding
    typed = Aval((4,), np.dtype(np.float32), type_sharding=TypeSharding.of(mesh, (("x",),)))
    assert typed.type_sharding.spec == (("x",),)
    with pytest.raises(AssertionError, match="read Aval.sharding, JAX's public view"):
        exec("typed.sharding", {"__name__": "compiler.example", "typed": typed})


# --- Array and sharding properties -----------------------------------------------------------------

def test_addressable_data_shards_and_replication():
    host = np.arange(16.0, dtype=np.float32).reshape(8, 2)
    placed = shardc.device_put(host, NamedSharding(MESH, P("x")))
    assert placed.sharding.spec == P("x")
    assert not placed.is_fully_replicated and not placed.sharding.is_fully_replicated
    shards = placed.addressable_shards
    assert [s.device.id for s in shards] == list(range(8))
    assert [s.replica_id for s in shards] == [0, 1] * 4      # 'y' holds two copies of a block
    for k, shard in enumerate(shards):
        block = placed.addressable_data(k)
        assert block.sharding == SingleDeviceSharding(shard.device)
        # a shard's data is an array on its device (JAX's), its buffer the numpy block
        assert isinstance(shard.data, shardc.Array) and shard.data.devices() == {shard.device}
        np.testing.assert_array_equal(np.asarray(shard.data), shard.buffer)
        np.testing.assert_array_equal(np.asarray(block), host[shard.index])
    np.testing.assert_array_equal(np.asarray(placed.addressable_data(5)), host[4:6])
    replicated = shardc.device_put(host, NamedSharding(MESH, P()))
    assert replicated.is_fully_replicated and replicated.sharding.is_fully_replicated
    assert [s.replica_id for s in replicated.addressable_shards] == list(range(8))
    assert jnp.arange(3).is_fully_replicated
    assert placed.sharding.num_devices == 8


# --- device= ---------------------------------------------------------------------------------------

CONSTRUCTORS = {
    "arange": (lambda **kw: jnp.arange(8, **kw), np.arange(8, dtype=np.int32)),
    "zeros": (lambda **kw: jnp.zeros((8, 2), **kw), np.zeros((8, 2), np.float32)),
    "ones": (lambda **kw: jnp.ones(8, jnp.int32, **kw), np.ones(8, np.int32)),
    "full": (lambda **kw: jnp.full((8,), 2.5, **kw), np.full(8, 2.5, np.float32)),
    "array": (lambda **kw: jnp.array([[1, 2]] * 8, **kw), np.array([[1, 2]] * 8, np.int32)),
    "asarray": (lambda **kw: jnp.asarray(np.arange(8.0), **kw), np.arange(8.0, dtype=np.float32)),
    "zeros_like": (lambda **kw: jnp.zeros_like(np.ones(8, np.int32), **kw), np.zeros(8, np.int32)),
}


@pytest.mark.parametrize("name", sorted(CONSTRUCTORS))
def test_constructors_place_their_result_by_device(name):
    make, expected = CONSTRUCTORS[name]
    sharding = NamedSharding(MESH, P("x"))
    for target, wanted in ((sharding, sharding),
                           (shardc.devices()[5], SingleDeviceSharding(shardc.devices()[5]))):
        out = make(device=target)
        assert out.sharding == wanted and out.dtype == expected.dtype
        np.testing.assert_array_equal(np.asarray(out), expected)
    assert make().sharding == SingleDeviceSharding(shardc.devices()[0])


@pytest.mark.parametrize("make", [
    lambda **kw: jnp.zeros((8, 2), **kw), lambda **kw: jnp.ones((8, 2), **kw),
    lambda **kw: jnp.full((8, 2), 3.0, **kw), lambda **kw: jnp.empty((8, 2), **kw),
    lambda **kw: jnp.eye(8, 2, **kw), lambda **kw: jnp.zeros_like(np.ones((8, 2)), **kw)])
def test_device_keeps_the_spec_as_given_and_out_sharding_spells_every_dimension(make):
    # JAX: device= lays the result out as device_put does (P('x',) stays so);
    # out_sharding= gives a computed result's spec, one entry per dimension
    assert repr(make(device=NamedSharding(MESH, P("x"))).sharding.spec) == "P('x',)"
    assert repr(make(device=NamedSharding(MESH, P(("x", "y")))).sharding.spec) == "P(('x', 'y'),)"
    with shardc.set_mesh(MESH):
        assert repr(make(out_sharding=P("x")).sharding.spec) == "P('x', None)"


def test_device_under_jit_and_on_the_current_mesh():
    sharding = NamedSharding(MESH, P("x"))
    out = shardc.jit(lambda: jnp.zeros((8,), device=sharding) + 1)()
    np.testing.assert_array_equal(np.asarray(out), np.ones(8))
    inner = shardc.jit(lambda: jnp.zeros((8,), device=sharding))()
    assert inner.sharding == sharding
    with shardc.set_mesh(MESH):
        assert jnp.ones((8, 2), device=P(None, "y")).sharding == NamedSharding(MESH, P(None, "y"))
    with pytest.raises(ValueError, match=r"^Using PartitionSpec when you are not under a mesh "
                       r"context is not allowed\. .*Got P\('x',\)$"):
        jnp.ones(4, device=P("x"))
    with pytest.raises(ValueError, match="Using PartitionSpec when you are not under a mesh"):
        jnp.matmul(jnp.ones((2, 2)), jnp.ones((2, 2)), out_sharding=P("x"))


# --- unroll= ---------------------------------------------------------------------------------------

def _cumulative(carry, x):
    carry = carry * 0.5 + x
    return carry, carry * 2


@pytest.mark.parametrize("unroll", [1, 2, 3, 7, 0, True, False])
def test_scan_unroll_leaves_results_unchanged(unroll):
    xs = np.linspace(-1.0, 1.0, 7, dtype=np.float32)
    carry, ys = lax.scan(_cumulative, np.float32(0.0), xs, unroll=unroll)
    expected_carry, expected_ys = np.float32(0.0), []
    for x in xs:
        expected_carry = expected_carry * np.float32(0.5) + x
        expected_ys.append(expected_carry * 2)
    np.testing.assert_allclose(np.asarray(carry), expected_carry, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(ys), np.array(expected_ys), rtol=1e-6)
    jitted = shardc.jit(lambda v: lax.scan(_cumulative, 0.0, v, unroll=unroll))(xs)
    np.testing.assert_array_equal(np.asarray(jitted[1]), np.asarray(ys))


def test_unroll_is_checked_as_in_jax():
    with pytest.raises(ValueError, match="`unroll` must be a `bool` or a non-negative `int`."):
        lax.scan(_cumulative, 0.0, jnp.ones(3), unroll=-1)
    with pytest.raises(TypeError, match="expects a concrete `int` or `bool`"):
        shardc.jit(lambda u: lax.scan(_cumulative, 0.0, jnp.ones(3), unroll=u))(jnp.int32(2))
    with pytest.raises(ValueError, match="Can only use `unroll` in `fori_loop` if the loop "
                                         "bounds are statically known."):
        shardc.jit(lambda n: lax.fori_loop(0, n, lambda i, v: v + i, 0, unroll=2))(jnp.int32(3))


@pytest.mark.parametrize("unroll", [None, 1, 4, True])
def test_fori_loop_unroll(unroll):
    total = lax.fori_loop(0, 5, lambda i, v: v * 2 + i, 1, unroll=unroll)
    expected = 1
    for i in range(5):
        expected = expected * 2 + i
    assert int(total) == expected
    grad = shardc.grad(lambda x: lax.fori_loop(0, 3, lambda i, v: v * x, 1.0, unroll=unroll))
    np.testing.assert_allclose(float(grad(2.0)), 3 * 2.0 ** 2)


# --- pcast and pvary -------------------------------------------------------------------------------

def test_pcast_to_varying_and_its_alias_pvary_agree():
    def body(x, use_pcast):
        cast = lax.pcast(x, "i", to="varying") if use_pcast else lax.pvary(x, "i")
        assert shardc.typeof(cast).vma == frozenset({"i"})
        return cast * (lax.axis_index("i") + 1)

    x = jnp.arange(3.)
    outs = [shardc.shard_map(lambda v: body(v, flag), mesh=MESH_I, in_specs=P(),
                             out_specs=P("i"))(x) for flag in (True, False)]
    expected = np.concatenate([np.arange(3.) * (i + 1) for i in range(4)])
    for out in outs:
        np.testing.assert_array_equal(np.asarray(out), expected)


# --- axis_index_groups -----------------------------------------------------------------------------

NP_REDUCE = {"psum": np.sum, "pmean": np.mean, "pmax": np.max, "pmin": np.min}


def _grouped_reference(name, blocks, groups):
    """Each device's result: the reduction over the blocks of its group."""
    out = [None] * len(blocks)
    for g in groups:
        value = NP_REDUCE[name](np.stack([blocks[i] for i in g]), axis=0)
        for i in g:
            out[i] = value
    return np.concatenate(out)


GROUPINGS = [[[0, 1], [2, 3]], [[0, 2], [1, 3]], [[3, 0, 1], [2]], [[0], [1], [2], [3]],
             [[2, 1, 0, 3]]]


@pytest.mark.parametrize("name", sorted(NP_REDUCE))
@pytest.mark.parametrize("groups", GROUPINGS, ids=str)
@pytest.mark.parametrize("jit", [False, True])
def test_grouped_reductions_against_each_group(name, groups, jit):
    x = np.array([[1.0, -2.0], [3.0, np.inf], [-5.0, 0.5], [7.0, 4.0]], np.float32)
    collective = getattr(lax, name)
    f = shardc.shard_map(lambda b: collective(b, "i", axis_index_groups=groups), mesh=MESH_I,
                         in_specs=P("i"), out_specs=P("i"), check_vma=False)
    out = (shardc.jit(f) if jit else f)(x)
    expected = _grouped_reference(name, list(x[:, None]), groups)
    assert out.dtype == np.float32
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-6)


def test_grouped_pmax_keeps_the_axis_varying_with_the_check_on():
    groups = [[0, 1], [2, 3]]
    x = np.arange(8, dtype=np.int32)
    f = shardc.shard_map(lambda b: lax.pmax(b, "i", axis_index_groups=groups), mesh=MESH_I,
                         in_specs=P("i"), out_specs=P("i"))
    np.testing.assert_array_equal(np.asarray(f(x)), [2, 3, 2, 3, 6, 7, 6, 7])
    claims_replicated = shardc.shard_map(lambda b: lax.pmax(b, "i", axis_index_groups=groups),
                                         mesh=MESH_I, in_specs=P("i"), out_specs=P())
    with pytest.raises(shardc.ReplicationError):
        claims_replicated(x)


@pytest.mark.parametrize("tiled", [False, True])
@pytest.mark.parametrize("axis", [0, 1])
def test_grouped_all_gather_in_group_order(tiled, axis):
    groups = [[2, 0], [3, 1]]
    x = np.arange(16.0, dtype=np.float32).reshape(8, 2)
    f = shardc.shard_map(
        lambda b: lax.all_gather(b, "i", axis_index_groups=groups, axis=axis, tiled=tiled)[None],
        mesh=MESH_I, in_specs=P("i"), out_specs=P("i"))
    out = np.asarray(shardc.jit(f)(x))
    blocks = x.reshape(4, 2, 2)
    for device in range(4):
        group = next(g for g in groups if device in g)
        members = [blocks[i] for i in group]
        expected = (np.concatenate(members, axis) if tiled else np.stack(members, axis))
        np.testing.assert_array_equal(out[device], expected)


def test_grouped_psum_gradient_matches_finite_differences():
    groups = [[0, 3], [1, 2]]

    def loss(x):
        f = shardc.shard_map(lambda b: lax.psum(jnp.sin(b) * b, "i", axis_index_groups=groups),
                             mesh=MESH_I, in_specs=P("i"), out_specs=P("i"), check_vma=False)
        return (f(x) * jnp.arange(1.0, 9.0)).sum()

    x = np.linspace(-1.0, 1.0, 8).astype(np.float32)
    grad = np.asarray(shardc.grad(loss)(x))
    eps = 1e-3
    numeric = np.array([(float(loss(x + eps * e)) - float(loss(x - eps * e))) / (2 * eps)
                        for e in np.eye(8, dtype=np.float32)])
    np.testing.assert_allclose(grad, numeric, rtol=2e-2, atol=2e-2)


@settings(derandomize=True, deadline=None, max_examples=8)
@given(st.permutations(range(4)), st.sampled_from([1, 2, 4]),
       st.sampled_from(["psum", "pmax", "pmin"]))
def test_grouped_reductions_property(order, group_size, name):
    groups = [list(order[k:k + group_size]) for k in range(0, 4, group_size)]
    x = np.random.default_rng(len(groups)).integers(-9, 9, size=(4, 3)).astype(np.int32)
    f = shardc.shard_map(lambda b: getattr(lax, name)(b, "i", axis_index_groups=groups),
                         mesh=MESH_I, in_specs=P("i"), out_specs=P("i"), check_vma=False)
    out = f(x)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(out),
                                  _grouped_reference(name, list(x[:, None]), groups))


def test_bad_groups_are_rejected():
    def run(collective, groups):
        shardc.shard_map(lambda b: collective(b, "i", axis_index_groups=groups), mesh=MESH_I,
                         in_specs=P("i"), out_specs=P("i"), check_vma=False)(jnp.arange(4.))

    with pytest.raises(ValueError, match="axis_index_groups must cover all indices exactly once"):
        run(lax.pmax, [[0, 1], [1, 2]])
    with pytest.raises(ValueError, match="axis_index_groups must cover all indices exactly once"):
        run(lax.psum, [[0, 1]])
    with pytest.raises(ValueError, match="axis_index_groups must all be the same size"):
        run(lax.all_gather, [[0, 1, 2], [3]])
    with pytest.raises(NotImplementedError, match="to='invarying'"):
        run(lambda b, a, **kw: lax.all_gather(b, a, to="invarying", **kw), [[0, 1], [2, 3]])


# --- what the public modules export ----------------------------------------------------------------

def test_every_flag_context_manager_is_a_top_level_name():
    from shardc.config import STATES
    for name, state in STATES.items():
        assert getattr(shardc, name) is state and name in shardc.__all__


@pytest.mark.parametrize("name", [
    "shardc", "shardc.numpy", "shardc.numpy.linalg", "shardc.lax", "shardc.nn",
    "shardc.nn.initializers", "shardc.random", "shardc.sharding", "shardc.tree_util", "shardc.tree",
    "shardc.flatten_util",
    "shardc.dtypes", "shardc.config", "shardc.debug", "shardc.distributed", "shardc.ledger",
    "shardc.ad_checkpoint", "shardc.custom_derivatives", "shardc.scipy", "shardc.scipy.special",
    "shardc.scipy.stats", "shardc.scipy.stats.norm", "shardc.scipy.stats.multivariate_normal",
    "shardc.scipy.stats.gamma", "shardc.scipy.stats.truncnorm", "shardc.experimental",
    "shardc.experimental.shard_map", "shardc.experimental.mesh_utils",
    "shardc.experimental.multihost_utils", "shardc.experimental.layout", "shardc.ops",
    "shardc.image", "shardc.monitoring",
    "shardc.scipy.signal",
    "shardc.example_libraries.optimizers", "shardc.example_libraries.stax"])
def test_public_modules_list_their_exports(name):
    import importlib
    module = importlib.import_module(name)
    assert len(module.__all__) == len(set(module.__all__))
    missing = [n for n in module.__all__ if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names what it does not have: {missing}"


def test_the_old_shard_map_form_warns_that_it_is_deprecated():
    import shardc.experimental.shard_map as old
    with pytest.warns(DeprecationWarning, match="jax.experimental.shard_map is deprecated in "
                                                "v0.8.0. Used jax.shard_map instead."):
        form = old.shard_map
    assert form.__name__ == "shard_map"
    with pytest.raises(AttributeError):
        old.pbroadcast       # gone from JAX 0.10: lax.pcast(x, axes, to='varying')


def test_jaxs_other_names_of_types_and_functions():
    import shardc.numpy as jnp_
    assert jnp_.zeros(2, jnp_.bool).dtype == np.bool_
    assert np.dtype(jnp_.single) == np.float32 and np.dtype(jnp_.csingle) == np.complex64
    for name, dtype in (("double", np.float64), ("float_", np.float64), ("int_", np.int64),
                        ("uint", np.uint64), ("cdouble", np.complex128),
                        ("complex_", np.complex128)):
        assert np.dtype(getattr(jnp_, name)) == dtype, name
    assert shardc.jacobian is shardc.jacrev
    assert shardc.float0 == shardc.dtypes.float0
    assert (shardc.host_count(), shardc.host_id(), shardc.process_indices()) == (1, 0, [0])


def test_jax_errors_and_typing_names():
    """The classes programs catch by name, raised where JAX raises them."""
    from shardc.errors import (ConcretizationTypeError, TracerArrayConversionError,
                               TracerIntegerConversionError)
    from shardc.typing import ArrayLike, DTypeLike   # noqa: F401 (importable, as annotations)
    with pytest.raises(TracerIntegerConversionError):
        shardc.jit(lambda i: [1, 2, 3][i])(np.int32(1))
    with pytest.raises(ConcretizationTypeError):
        shardc.jit(lambda v: int(v))(np.float32(1))
    with pytest.raises(TracerArrayConversionError, match="__array__"):
        shardc.jit(lambda v: np.asarray(v))(np.float32(1))
    from shardc.errors import JAXTypeError, KeyReuseError
    assert issubclass(KeyReuseError, JAXTypeError)    # caught by name (nothing raises it)
    with pytest.raises(NotImplementedError, match="jax_debug_key_reuse"):
        shardc.config.update("jax_debug_key_reuse", True)


def test_jax_errors_class_hierarchy():
    """Each class of jax.errors has JAX 0.10.2's bases, so an ``except`` catches what it
    catches under JAX: the integer and array conversion errors are not
    ConcretizationTypeErrors, and a leaked tracer's use is a TypeError."""
    import shardc.errors as errors
    names = lambda cls: [c.__name__ for c in cls.__mro__]
    type_error = ["JAXTypeError", "TypeError", "Exception", "BaseException", "object"]
    index_error = ["JAXIndexError", "IndexError", "LookupError", "Exception", "BaseException",
                   "object"]
    expected = {
        "JAXTypeError": type_error,
        "JAXIndexError": index_error,
        "ConcretizationTypeError": ["ConcretizationTypeError"] + type_error,
        "TracerBoolConversionError": ["TracerBoolConversionError",
                                      "ConcretizationTypeError"] + type_error,
        "TracerIntegerConversionError": ["TracerIntegerConversionError"] + type_error,
        "TracerArrayConversionError": ["TracerArrayConversionError"] + type_error,
        "UnexpectedTracerError": ["UnexpectedTracerError"] + type_error,
        "KeyReuseError": ["KeyReuseError"] + type_error,
        "NonConcreteBooleanIndexError": ["NonConcreteBooleanIndexError"] + index_error,
        "InconclusiveDimensionOperation": ["InconclusiveDimensionOperation", "Exception",
                                           "BaseException", "object"],
        "JaxprTypeError": ["JaxprTypeError", "TypeError", "Exception", "BaseException",
                           "object"],
        "JaxRuntimeError": ["JaxRuntimeError", "RuntimeError", "Exception", "BaseException",
                            "object"],
    }
    assert sorted(errors.__all__) == sorted(expected)
    for name, mro in expected.items():
        assert names(getattr(errors, name)) == mro, name


def test_leaked_tracer_use_is_a_type_error():
    """A traced value used after its trace ended raises JAX's UnexpectedTracerError, which
    ``except TypeError`` catches."""
    leaked = []
    shardc.jit(lambda v: leaked.append(v) or v)(np.float32(1))
    with pytest.raises(TypeError, match="Encountered an unexpected tracer") as info:
        leaked[0] + 1
    assert type(info.value) is shardc.errors.UnexpectedTracerError


def test_integer_and_array_conversion_errors_are_not_concretization_errors():
    """``operator.index`` and ``np.asarray`` of a traced value raise JAX's classes, which an
    ``except ConcretizationTypeError`` does not catch (as in JAX)."""
    from shardc.errors import ConcretizationTypeError
    for convert in (operator.index, np.asarray):
        with pytest.raises(TypeError) as info:
            shardc.jit(lambda v, convert=convert: convert(v))(np.int32(1))
        assert not isinstance(info.value, ConcretizationTypeError)


# --- meshes by axis type, a body's types, ShapeDtypeStruct (JAX's names, as its tests use) -------

def test_meshes_name_their_axes_by_type():
    from shardc.sharding import AxisType
    mesh = shardc.make_mesh((2, 2, 2), ("a", "b", "c"),
                            axis_types=(AxisType.Explicit, AxisType.Auto, AxisType.Explicit))
    for m in (mesh, mesh.abstract_mesh):
        assert m.auto_axes == ("b",) and m.explicit_axes == ("a", "c") and m.manual_axes == ()
        assert not (m.are_all_axes_auto or m.are_all_axes_explicit or m.are_all_axes_manual)
        assert m.shape_tuple == (("a", 2), ("b", 2), ("c", 2))
    manual = mesh.abstract_mesh.update_axis_types({"a": AxisType.Manual, "c": AxisType.Manual})
    assert manual.manual_axes == ("a", "c") and manual.axis_sizes == (2, 2, 2)
    assert manual.update(axis_types=(AxisType.Manual,) * 3).are_all_axes_manual
    assert mesh.update(axis_types=(AxisType.Auto,) * 3).are_all_axes_auto


def test_a_bodys_mesh_and_types_show_its_manual_axes():
    """In a body over 'x' of an Explicit (2, 2) mesh: the context mesh has 'x' Manual, and a
    value's type varies over 'x' on that mesh (JAX 0.10.2's printouts)."""
    from shardc.sharding import AxisType
    mesh = shardc.make_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
    seen = {}

    def body(b):
        seen["manual"] = shardc.sharding.get_abstract_mesh().manual_axes
        seen["varying"] = shardc.typeof(b).mat.varying
        seen["types"] = shardc.typeof(b).sharding.mesh.axis_types
        return b

    with shardc.set_mesh(mesh):
        f = shardc.shard_map(body, in_specs=P("x"), out_specs=P("x"), axis_names={"x"})
        f(shardc.device_put(jnp.ones((4, 4)), P("x", "y")))
    assert seen == {"manual": ("x",), "varying": frozenset({"x"}),
                    "types": (AxisType.Manual, AxisType.Explicit)}


def test_shape_dtype_struct_as_jax():
    s = shardc.ShapeDtypeStruct((2, 3), jnp.float32)
    assert (s.ndim, s.size, len(s)) == (2, 6, 2)
    assert s.update(shape=(4, 3)).shape == (4, 3) and s.update(shape=(4, 3)).dtype == s.dtype
    assert s == shardc.ShapeDtypeStruct((2, 3), jnp.float32) and hash(s) == hash(s.update())
    like = shardc.ShapeDtypeStruct.like(jnp.asarray(2.0))
    assert like.shape == () and like.weak_type
    assert like.sharding is None            # an uncommitted array's layout is not kept (JAX's)
    placed = shardc.device_put(jnp.arange(8), shardc.devices()[1])
    assert shardc.ShapeDtypeStruct.like(placed).sharding == placed.sharding
    with pytest.raises(TypeError, match="unsized"):
        len(shardc.ShapeDtypeStruct((), jnp.float32))


def test_a_single_device_sharding_prints_as_jax():
    assert repr(jnp.ones(2).sharding) == ("SingleDeviceSharding(device=CpuDevice(id=0), "
                                          "memory_kind=device)")


def test_a_traced_values_aval_says_its_varying_axes():
    """``x.aval.mat.varying`` as JAX's tests read it (the same as typeof(x).mat)."""
    mesh = shardc.make_mesh((4,), ("x",))
    seen = []

    def body(b):
        out = b * 2
        seen.append((out.aval.mat.varying, shardc.typeof(out).mat.varying))
        return out
    shardc.jit(shardc.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x")))(
        jnp.arange(8.))
    assert seen == [(frozenset({"x"}), frozenset({"x"}))]


def test_a_types_invarying_axes_are_the_manual_axes_it_does_not_vary_over():
    mesh = shardc.make_mesh((2, 2), ("x", "y"))
    assert shardc.typeof(jnp.arange(8)).mat.invarying(mesh) == frozenset()    # none manual
    seen = []

    def body(b):
        here = shardc.sharding.get_abstract_mesh()
        seen.append([shardc.typeof(v).mat.invarying(here)
                     for v in (b, b * 2, lax.pvary(b, "y"), lax.psum(b, "x"))])
        seen.append(shardc.typeof(b).mat.vur)
        return b
    shardc.jit(shardc.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x")))(
        jnp.arange(8.))
    assert seen == [[{"y"}, {"y"}, set(), {"x", "y"}], {"x"}]


def test_device_queries_take_jaxs_backend_and_process_arguments():
    n = len(shardc.devices())
    assert len(shardc.devices("cpu")) == len(shardc.devices(backend="cpu")) == n
    assert shardc.device_count("cpu") == shardc.local_device_count("cpu") == n
    assert shardc.local_devices(0) == shardc.local_devices(process_index=0) == shardc.devices()
    assert shardc.local_devices(backend="cpu") == shardc.devices()
    assert shardc.process_count("cpu") == 1 and shardc.process_index("cpu") == 0
    assert shardc.local_devices(1) == []           # no process 1 without MPI
    with pytest.raises(RuntimeError, match="Unknown backend: 'gpu' requested"):
        shardc.devices("gpu")


def test_types_specs_and_reprs_as_jax():
    """typeof results compare by what they say; a ShapeDtypeStruct's PartitionSpec is read on
    the mesh set; a split over axes of one device is full replication; an array's repr spells
    out a weak type and an empty shape; specs concatenate to specs."""
    import shardc.numpy as jnp
    from shardc.sharding import NamedSharding, PartitionSpec as P
    assert shardc.typeof(jnp.ones(3)) == shardc.typeof(jnp.ones(3))
    assert shardc.typeof(jnp.ones(3)) != shardc.typeof(jnp.ones(3, jnp.int32))
    assert len({shardc.typeof(jnp.ones(3)), shardc.typeof(jnp.ones(3))}) == 1
    mesh = shardc.make_mesh((2, 4), ("a", "b"))
    with shardc.set_mesh(mesh):
        s = shardc.ShapeDtypeStruct((8,), jnp.float32, sharding=P("a"))
        assert s.sharding == NamedSharding(mesh, P("a")) and str(shardc.typeof(s)) == "float32[8@a]"
        assert str(shardc.typeof(shardc.eval_shape(lambda v: v * 2, s))) == "float32[8@a]"
    ones = shardc.make_mesh((1, 8), ("p", "q"))
    single = NamedSharding(ones, P("p"))
    assert single.is_fully_replicated and not NamedSharding(ones, P("q")).is_fully_replicated
    assert single.devices_indices_map((8,))[shardc.devices()[0]] == (slice(None),)
    assert repr(jnp.asarray(3.0)) == "Array(3., dtype=float32, weak_type=True)"
    assert repr(jnp.zeros((0, 3))) == "Array([], shape=(0, 3), dtype=float32)"
    assert P("a") + P("b") == P("a", "b") and isinstance(P("a") + ("b",), P)
    assert ("a",) + P("b") == P("a", "b")


def test_array_repr_places_the_dtype_as_jax_does():
    # printed by JAX 0.10.2: where the dtype would pass numpy's line width, it follows after
    # as many spaces as "Array(" has, on the same line
    x = jnp.asarray(np.array([0.0, 0.84147096, 0.9092974, 0.14112, -0.7568025], np.float32))
    assert repr(x) == ("Array([ 0.        ,  0.84147096,  0.9092974 ,  0.14112   , -0.7568025 ],"
                       "      dtype=float32)")
    assert repr(jnp.arange(3)) == "Array([0, 1, 2], dtype=int32)"
    assert repr(jnp.zeros((0, 2))) == "Array([], shape=(0, 2), dtype=float32)"
    assert repr(jnp.asarray(1.5)) == "Array(1.5, dtype=float32, weak_type=True)"
    assert repr(jnp.arange(30.).reshape(3, 10)).endswith("27., 28., 29.]], dtype=float32)")


def test_a_mesh_prints_and_reprs_as_jaxs():
    mesh = shardc.make_mesh((4, 2), ("x", "y"))
    assert repr(mesh) == ("Mesh(axis_sizes=(4, 2), axis_names=('x', 'y'), "
                          "axis_types=(Explicit, Explicit))")
    assert str(mesh) == "Mesh('x': 4, 'y': 2, axis_types=(Explicit, Explicit))"
    assert repr(NamedSharding(mesh, P("x"))) == (
        "NamedSharding(mesh=Mesh('x': 4, 'y': 2, axis_types=(Explicit, Explicit)), "
        "spec=P('x',), memory_kind=device)")
    assert repr([mesh]) == f"[{mesh!r}]"


def test_a_mesh_gives_its_device_ids_and_local_mesh_as_jaxs():
    mesh = shardc.make_mesh((2, 2), ("a", "b"), devices=shardc.devices()[4:])
    ids = mesh.device_ids
    assert isinstance(ids, np.ndarray) and ids.shape == (2, 2)
    assert ids.tolist() == [[4, 5], [6, 7]]
    assert mesh.flat_device_ids == (4, 5, 6, 7)
    assert not mesh.is_multi_process
    # one process holds the whole mesh: its local mesh is it, with Auto axes (JAX's)
    local = mesh.local_mesh
    assert str(local) == "Mesh('a': 2, 'b': 2, axis_types=(Auto, Auto), device_ids=(4, 5, 6, 7))"
    assert [d.id for d in local.devices.flat] == [4, 5, 6, 7] and local != mesh


def test_get_mesh_outside_any_mesh_is_the_empty_mesh():
    empty = shardc.sharding.get_mesh()
    assert isinstance(empty, shardc.sharding.Mesh) and empty.empty
    assert str(empty) == "Mesh()" and repr(empty) == "Mesh(axis_sizes=(), axis_names=())"
    assert empty.shape == {} and empty.size == 0 and empty.axis_names == ()
    assert empty.devices.shape == () and empty.axis_types == ()
    assert empty.abstract_mesh.empty and empty.local_mesh is empty
    with pytest.raises(AssertionError):
        empty.device_ids
    with shardc.set_mesh(MESH):
        assert shardc.sharding.get_mesh() == MESH
    assert shardc.sharding.get_mesh().empty


def test_sharding_memory_kind_and_addressability():
    s = NamedSharding(MESH, P("x"))
    assert s.with_memory_kind("device") == s and s.has_addressable_devices
    one = SingleDeviceSharding(shardc.devices()[1])
    assert one.with_memory_kind("device") == one and one.has_addressable_devices
    with pytest.raises(ValueError, match="Could not find memory addressable by device cpu. "
                       "Device cpu can address the following memory kinds: device, "
                       "pinned_host, unpinned_host. Got memory kind: bogus"):
        s.with_memory_kind("bogus")
    with pytest.raises(NotImplementedError, match="one memory kind"):
        s.with_memory_kind("pinned_host")
    # SingleDeviceSharding takes memory_kind as NamedSharding does (JAX's signature)
    assert SingleDeviceSharding(shardc.devices()[1], memory_kind="device") == one
    assert SingleDeviceSharding(shardc.devices()[1], memory_kind=None) == one
    with pytest.raises(NotImplementedError, match="one memory kind"):
        SingleDeviceSharding(shardc.devices()[1], memory_kind="pinned_host")


def test_abstract_devices_of_abstract_meshes():
    """jax.sharding.AbstractDevice: what an abstract mesh's devices are, given or taken from
    the mesh it abstracts (JAX's reprs)."""
    from shardc.sharding import AbstractDevice, AbstractMesh, AxisType
    cpu = AbstractDevice(device_kind="cpu", num_cores=None, platform="cpu")
    assert repr(cpu) == "AbstractDevice(device_kind=cpu, num_cores=None, platform=cpu)"
    mesh = AbstractMesh((2, 4), ("x", "y"), axis_types=(AxisType.Explicit,) * 2,
                        abstract_device=cpu)
    assert repr(mesh) == ("AbstractMesh('x': 2, 'y': 4, axis_types=(Explicit, Explicit), "
                          "device_kind=cpu, num_cores=None, platform=cpu)")
    assert shardc.make_mesh((8,), ("x",)).abstract_mesh.abstract_device == cpu
    assert AbstractMesh((8,), ("x",)).abstract_device is None


def test_the_array_api_namespace_and_its_inspection():
    """x.__array_namespace__() is shardc.numpy (JAX's ValueError for another version);
    __array_namespace_info__ describes it as JAX's does, 64-bit types with x64 only."""
    x = jnp.arange(3.0)
    assert x.__array_namespace__() is jnp
    assert x.__array_namespace__(api_version="2024.12") is jnp
    assert jnp.__array_api_version__ == "2024.12"
    with pytest.raises(ValueError, match="api_version='2021.12' is not available"):
        x.__array_namespace__(api_version="2021.12")
    info = jnp.__array_namespace_info__()
    assert info.capabilities() == {"boolean indexing": False, "data-dependent shapes": False,
                                   "max dimensions": 64}
    assert info.default_device() is None and info.devices() == [None] + shardc.devices()
    assert info.default_dtypes() == {"real floating": np.float32, "complex floating":
                                     np.complex64, "integral": np.int32, "indexing": np.int32}
    assert list(info.dtypes(kind="integral")) == ["int8", "int16", "int32", "uint8", "uint16",
                                                  "uint32"]
    assert set(info.dtypes()) == {"bool", "int8", "int16", "int32", "uint8", "uint16",
                                  "uint32", "float32", "complex64"}
    assert list(info.dtypes(kind=("bool", "complex floating"))) == ["bool", "complex64"]
    with shardc.enable_x64():
        assert info.default_dtypes()["integral"] == np.int64
        assert "float64" in info.dtypes(kind="real floating")


def test_device_attributes_on_one_process():
    device = shardc.devices()[5]
    assert device.memory_stats() is None       # JAX's CPU devices report none
    assert device.local_hardware_id == 5
    assert device.host_id == device.task_id == device.process_index == 0


def test_array_size_clone_platform_and_dlpack():
    x = shardc.device_put(np.arange(64, dtype=np.float32).reshape(8, 8),
                          NamedSharding(MESH, P("x", "y")))
    # one block's bytes times the devices: 8x8 float32 split 4x2 is 2*4*4 bytes a device
    assert x.on_device_size_in_bytes() == 8 * 32
    assert shardc.device_put(np.zeros((8, 8), np.float32),
                             NamedSharding(MESH, P())).on_device_size_in_bytes() == 8 * 256
    assert jnp.arange(3, dtype=jnp.int8).on_device_size_in_bytes() == 3
    c = x.clone()
    assert c is not x and c.sharding == x.sharding and c.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(c), np.arange(64).reshape(8, 8))
    assert jnp.asarray(2.0).clone().weak_type
    assert x.platform() == "cpu"
    one = shardc.device_put(np.arange(3.0), shardc.devices()[2])
    assert one.__dlpack_device__() == (1, 0)           # kDLCPU, device 0
    assert np.from_dlpack(one).tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(BufferError, match="to_dlpack can only pack a dlpack tensor from an "
                       "array on a singular device, but an array with a Sharding over 8 "
                       "devices was provided."):
        np.from_dlpack(x)
    with pytest.raises(BufferError, match="__dlpack__ only supported for unsharded arrays."):
        x.__dlpack_device__()


def test_a_named_sharding_updates_and_an_aval_prints_as_jaxs():
    mesh = shardc.make_mesh((4, 2), ("x", "y"))
    s = NamedSharding(mesh, P("x"))
    assert s.update(spec=P(None, "y")) == NamedSharding(mesh, P(None, "y"))
    assert s.update(spec=("y",)).spec == P("y")
    other = shardc.make_mesh((8,), ("i",))
    assert s.update(mesh=other, spec=P("i")) == NamedSharding(other, P("i"))
    with pytest.raises(TypeError, match="unexpected keyword"):
        s.update(spex=P())
    a = shardc.device_put(np.zeros((8, 4), np.float32), s)
    assert str(a.aval) == "float32[8@x,4]"


# --- devices and shards print as JAX prints them ------------------------------------------------

def test_devices_and_shards_print_as_jax():
    device = shardc.devices()[3]
    assert (str(device), repr(device), f"{device}") == ("cpu:3", "CpuDevice(id=3)", "cpu:3")
    x = shardc.device_put(jnp.arange(8), NamedSharding(MESH_I, P("i")))
    assert repr(x.addressable_shards[1]) == (
        "Shard(device=CpuDevice(id=1), index=(slice(2, 4, None),), replica_id=0, data=[2 3])")
    y = shardc.device_put(np.arange(4.), NamedSharding(MESH, P("y")))
    assert repr(y.addressable_shards[2]) == (
        "Shard(device=CpuDevice(id=2), index=(slice(0, 2, None),), replica_id=1, "
        "data=[0. 1.])")
