"""shard_map's data model: pytrees, closures, static arguments, block transpose, untiling,
sub-meshes, and eager == jit."""
import re
from collections import namedtuple
from functools import partial

import numpy as np
import pytest

import shardc
import shardc.numpy as jnp
from shardc import lax
from shardc.experimental.shard_map import shard_map as old_shard_map
from shardc.sharding import Mesh, NamedSharding, PartitionSpec as P
from ir.sharding import ShardingSpecError

MESH = shardc.make_mesh((4, 2), ("x", "y"))
Pair = namedtuple("Pair", ["left", "right"])


def both_ways(f, *args):
    """Run eagerly and under jit; both must agree. Returns the eager result."""
    eager = f(*args)
    jitted = shardc.jit(f)(*args)
    shardc.tree_util.tree_map(
        lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), eager, jitted)
    return eager


def test_nested_pytrees_of_inputs_and_outputs():
    @partial(shardc.shard_map, mesh=MESH,
             in_specs=({"w": P("x"), "b": P()}, Pair(P("x", "y"), P(None, "y"))),
             out_specs=(P("x"), {"sum": P()}))
    def f(params, pair):
        scaled = params["w"] * 2 + params["b"]
        total = lax.psum(pair.left.sum() + pair.right.sum(), ("x", "y"))
        return scaled, {"sum": total}

    w = jnp.arange(8.)
    left = jnp.arange(32.).reshape(8, 4)
    right = jnp.ones((3, 4))
    scaled, extra = both_ways(f, {"w": w, "b": jnp.float32(1.)}, Pair(left, right))
    np.testing.assert_array_equal(np.asarray(scaled), np.arange(8.) * 2 + 1)
    # each device holds a (2,2) block of left and a (3,2) block of right; all 8 sum once
    assert float(extra["sum"]) == pytest.approx(np.arange(32.).sum() + 3 * 4 * 4)


class _Tagged:
    """A pytree node whose metadata (a list) cannot be hashed."""

    def __init__(self, value, tags):
        self.value, self.tags = value, tags


shardc.tree_util.register_pytree_node(_Tagged, lambda t: ((t.value,), t.tags),
                                      lambda tags, children: _Tagged(children[0], tags))


def test_calls_of_one_structure_share_its_layout_and_checks():
    # a shard_map remembers how its specs cover arguments and results of each structure, and
    # the argument types it has checked: later calls get the same answers, new structures and
    # types are checked anew, and metadata that cannot be hashed is covered each time
    f = shardc.shard_map(lambda t: _Tagged(t.value * 2, t.tags + ["out"]), mesh=MESH,
                         in_specs=P("x"), out_specs=P("x"))
    for _ in range(2):
        out = f(_Tagged(jnp.arange(8.), ["in"]))
        assert out.tags == ["in", "out"]
        np.testing.assert_array_equal(np.asarray(out.value), np.arange(8.) * 2)
    g = shardc.shard_map(
        lambda a, b: (shardc.tree_util.tree_map(lambda v: v + 1, a), {"b": b}), mesh=MESH,
        in_specs=(P("x"), P("x")), out_specs=P("x"))
    for _ in range(2):
        a, rest = g(jnp.arange(8.), jnp.ones(4))
        np.testing.assert_array_equal(np.asarray(rest["b"]), np.ones(4))
    with pytest.raises(ShardingSpecError, match="evenly divisible"):
        g(jnp.arange(8.), jnp.ones(6))          # a new type: checked, 6 rows over 4 devices
    # a new structure of arguments and results: covered anew
    (a0, a1), rest = g((jnp.arange(8.), jnp.zeros(4)), jnp.ones(4))
    np.testing.assert_array_equal(np.asarray(a1), np.ones(4))
    with pytest.raises(ShardingSpecError, match="in_specs"):
        g(jnp.arange(8.), {"b": jnp.ones(4)}, jnp.ones(4))


def test_a_bare_spec_covers_every_argument():
    f = shardc.shard_map(lambda a, b: a + b, mesh=MESH, in_specs=P("x"), out_specs=P("x"))
    out = both_ways(f, jnp.arange(8.), jnp.ones(8))
    np.testing.assert_array_equal(np.asarray(out), np.arange(8.) + 1)


def test_none_in_specs_leaves_make_static_arguments():
    f = old_shard_map(lambda x, scale: x * scale["k"], MESH, in_specs=(P("x"), None),
                      out_specs=P("x"))
    out = f(jnp.arange(8.), {"k": 3})
    np.testing.assert_array_equal(np.asarray(out), np.arange(8.) * 3)


def test_closures_over_arrays_act_as_replicated_inputs():
    w = jnp.arange(4.)

    @shardc.jit
    def outer(x, y):
        # y is a traced value of the enclosing jit, closed over by the body
        body = shardc.shard_map(lambda v: v * w + y, mesh=MESH, in_specs=P(None, "y"),
                                out_specs=P(None, "y"))
        return body(x)

    x = jnp.ones((3, 8))
    y = jnp.float32(5.)
    out = outer(x, y)
    np.testing.assert_array_equal(np.asarray(out), np.tile(np.arange(4.), 2)[None, :] + 5
                                  + np.zeros((3, 8)))
    assert "shard_map" in str(shardc.make_jaxpr(outer.fun)(x, y))


def test_block_transpose_in_out_specs():
    mesh = shardc.make_mesh((4, 2), ("x", "y"))
    f = shardc.shard_map(lambda v: v, mesh=mesh, in_specs=P(("x", "y")),
                         out_specs=P(("y", "x")))
    out = both_ways(f, jnp.arange(8))
    np.testing.assert_array_equal(np.asarray(out), [0, 2, 4, 6, 1, 3, 5, 7])


def test_untiling_with_the_check_off_takes_coordinate_zero_blocks():
    f = old_shard_map(lambda v: v, MESH, in_specs=P("x", "y"), out_specs=P(), check_rep=False)
    x = jnp.arange(128.).reshape(8, 16)
    out = both_ways(f, x)
    np.testing.assert_array_equal(np.asarray(out), np.arange(128.).reshape(8, 16)[0:2, 0:8])


def test_sub_mesh_of_other_devices():
    devices = np.array(shardc.devices()[2:6])
    mesh = Mesh(devices, ("i",))
    f = shardc.shard_map(lambda v: lax.psum(v, "i"), mesh=mesh, in_specs=P("i"),
                         out_specs=P())
    out = both_ways(f, jnp.arange(8))
    np.testing.assert_array_equal(np.asarray(out), [12, 16])
    assert out.sharding.mesh.flat_device_ids == (2, 3, 4, 5)
    assert [s.device.id for s in out.addressable_shards] == [2, 3, 4, 5]
    lowered = shardc.jit(f).lower(jnp.arange(8)).module.all_shard_maps()[0]
    assert [dp.device_id for dp in lowered.device_programs] == [2, 3, 4, 5]
    assert lowered.device_programs[0].program.eqns[-1].params["device_groups"] == ((2, 3, 4, 5),)


def test_output_sharding_and_shards():
    f = shardc.shard_map(lambda v: v, mesh=MESH, in_specs=P("x", "y"), out_specs=P("x", "y"))
    out = both_ways(f, jnp.arange(128.).reshape(8, 16))
    assert out.sharding == NamedSharding(MESH, P("x", "y"))
    assert out.sharding.spec == P("x", "y")
    assert [s.device.id for s in out.addressable_shards] == list(range(8))
    np.testing.assert_array_equal(out.addressable_shards[3].data,
                                  np.arange(128.).reshape(8, 16)[2:4, 8:16])


def test_out_specs_none_with_a_body_returning_none():
    f = shardc.shard_map(lambda v: None, mesh=MESH, in_specs=P("x"), out_specs=None)
    assert f(jnp.arange(8.)) is None


def test_python_scalar_inputs_are_rank_zero():
    f = shardc.shard_map(lambda s, v: v * s, mesh=MESH, in_specs=(P(), P("x")),
                         out_specs=P("x"))
    np.testing.assert_array_equal(np.asarray(f(2.0, jnp.arange(8.))), np.arange(8.) * 2)


def test_psum_of_a_python_number_is_the_axis_size():
    f = shardc.shard_map(lambda v: v * 0 + lax.psum(1, ("x", "y")), mesh=MESH,
                         in_specs=P("x"), out_specs=P("x"))
    np.testing.assert_array_equal(np.asarray(both_ways(f, jnp.arange(8))), [8] * 8)


def test_typeof_shows_varying_axes():
    seen = []

    def body(v):
        seen.append(str(shardc.typeof(v)))
        s = lax.psum(v, "y")
        seen.append(str(shardc.typeof(s)))
        return s

    f = shardc.shard_map(body, mesh=MESH, in_specs=P("x", "y"), out_specs=P("x"))
    f(jnp.arange(32.).reshape(8, 4))
    assert seen == ["float32[2,2]{V:(x,y)}", "float32[2,2]{V:x}"]


def test_eager_body_values_print_per_device(capsys):
    mesh = shardc.make_mesh((2,), ("i",))
    f = shardc.shard_map(lambda v: print(v) or v, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
    f(jnp.arange(4))
    assert capsys.readouterr().out == (
        "On TFRT_CPU_0 at mesh coordinates (i,) = (0,):\n[0 1]\n\n"
        "On TFRT_CPU_1 at mesh coordinates (i,) = (1,):\n[2 3]\n\n")


def test_eager_python_control_flow_on_invariant_values():
    def body(v):
        total = lax.psum(v.sum(), "x")
        if total > 0:          # invariant over x: allowed
            return v
        return -v

    f = shardc.shard_map(body, mesh=shardc.make_mesh((4,), ("x",)), in_specs=P("x"),
                         out_specs=P("x"))
    np.testing.assert_array_equal(np.asarray(f(jnp.arange(8.))), np.arange(8.))


# --- the 2025/2026 call forms (SEMANTICS 7) --------------------------------------------------

def test_set_mesh_supplies_the_mesh_and_bare_specs():
    mesh = shardc.make_mesh((4,), ("i",), (shardc.sharding.AxisType.Explicit,))
    assert mesh.axis_types == (shardc.sharding.AxisType.Explicit,)
    with shardc.set_mesh(mesh):
        x = shardc.device_put(jnp.arange(8.), shardc.P("i"))
        assert x.sharding == NamedSharding(mesh, P("i"))
        f = shardc.shard_map(lambda v: lax.psum(v, "i"), in_specs=P("i"), out_specs=P())
        np.testing.assert_array_equal(np.asarray(f(x)), [12., 16.])
    assert shardc.sharding.get_mesh().empty
    g = shardc.shard_map(lambda v: v, in_specs=P(), out_specs=P())   # no mesh needed to define
    with pytest.raises(ValueError, match="The context mesh cannot be empty. Use "
                                         "`jax.set_mesh"):
        g(jnp.ones(4))


def test_omitted_in_specs_take_each_arguments_sharding():
    placed = shardc.device_put(jnp.arange(8.), NamedSharding(MESH, P("x")))
    f = shardc.shard_map(lambda a, b: (a * 0 + lax.axis_index("x").astype(jnp.float32), b),
                         mesh=MESH, out_specs=(P("x"), P()))
    ranks, host = f(placed, jnp.ones(3))
    np.testing.assert_array_equal(np.asarray(ranks), [0, 0, 1, 1, 2, 2, 3, 3])
    np.testing.assert_array_equal(np.asarray(host), np.ones(3))   # not laid out: P()


def test_in_specs_none_makes_every_argument_static():
    f = shardc.shard_map(lambda n, v: lax.psum(v, "x") * 0 + n, mesh=MESH, in_specs=None,
                         out_specs=P())
    assert float(f(3, 1.0)) == 3.0


def test_device_put_of_pytrees_and_bad_targets():
    tree = {"w": jnp.ones((8, 2)), "b": (jnp.zeros(8),)}
    placed = shardc.device_put(tree, NamedSharding(MESH, P("x")))
    assert placed["w"].sharding.spec == P("x") and placed["b"][0].sharding.spec == P("x")
    prefix = shardc.device_put(tree, {"w": NamedSharding(MESH, P("x", "y")),
                                      "b": NamedSharding(MESH, P())})
    assert prefix["w"].sharding.spec == P("x", "y") and prefix["b"][0].sharding.spec == P()
    assert shardc.device_put(jnp.ones(2), shardc.devices()[3]).sharding.device.id == 3
    # a None target leaves its leaf as device=None does: a host value on the default
    # device, uncommitted (JAX's)
    a, b = shardc.device_put((np.ones(2), np.zeros(2)), (shardc.devices()[3], None))
    assert a.devices() == {shardc.devices()[3]} and a.committed
    assert b.devices() == {shardc.devices()[0]} and not b.committed
    kept = shardc.device_put({"u": a, "v": np.ones(3)}, {"u": None, "v": shardc.devices()[1]})
    assert kept["u"] is a and kept["v"].devices() == {shardc.devices()[1]}
    with pytest.raises(ValueError, match=re.escape(
            "`jax.device_put` only accepts `None`, `jax.sharding.Sharding`, `jax.Device`, "
            "`Format`, `jax.memory.Space` or a pytree of these values. Received invalid "
            "value: garbage")):
        shardc.device_put(jnp.ones(2), "garbage")
    with pytest.raises(ValueError, match="Please set a mesh via `jax.set_mesh` if a PartitionSpec is passed to device_put"):
        shardc.device_put(jnp.ones(2), P("x"))


def test_out_sharding_of_dot():
    with shardc.set_mesh(MESH):
        c = jnp.dot(jnp.ones((8, 4)), jnp.ones((4, 2)), out_sharding=P("x", None))
    assert c.sharding == NamedSharding(MESH, P("x", None))
    np.testing.assert_array_equal(np.asarray(c), np.full((8, 2), 4.))


# --- JAX 0.10.2 behaviours its own tests hold (each once refused or wrong here) ----------------

def test_a_shard_map_given_an_abstract_mesh_takes_its_arguments_mesh():
    mesh = shardc.make_mesh((2, 2), ("x", "y"), axis_types=(shardc.sharding.AxisType.Auto,) * 2)
    arr = shardc.device_put(np.arange(16).reshape(8, 2), NamedSharding(mesh, P("x", "y")))
    f = lambda x: shardc.shard_map(lambda b: b, mesh=mesh.abstract_mesh, in_specs=P("x"),
                                out_specs=P("x"))(x)
    out = shardc.jit(f)(arr)
    assert out.sharding.spec == P("x",)
    np.testing.assert_array_equal(np.asarray(out), np.arange(16).reshape(8, 2))


def test_a_jitted_abstract_mesh_shard_map_runs_on_each_call_s_devices():
    # replicated arguments split nothing, yet their mesh says where the program runs: a
    # program traced for one device set is not reused for another
    m_a = shardc.sharding.Mesh(shardc.devices()[:2], "i")
    m_b = shardc.sharding.Mesh(shardc.devices()[2:4], "i")
    f = shardc.jit(shardc.shard_map(lambda b: b * 2, mesh=m_a.abstract_mesh, in_specs=P("i"),
                                    out_specs=P("i")))
    for mesh in (m_a, m_b, m_a):
        out = f(shardc.device_put(np.arange(8.), NamedSharding(mesh, P())))
        assert out.sharding == NamedSharding(mesh, P("i"))
        np.testing.assert_array_equal(np.asarray(out), np.arange(8.) * 2)


def test_arguments_committed_to_other_devices_than_the_mesh_s_are_jaxs_error():
    # JAX 0.10.2: a shard_map computes on its mesh's devices, in its order; an argument laid
    # out on others (another mesh's, the same in another order, more, or one device) is a
    # ValueError, eagerly and under jit, not a silent move
    devices = shardc.devices()
    m_a = shardc.sharding.Mesh(devices[:2], "i")
    f = shardc.shard_map(lambda b: b + 1, mesh=m_a, in_specs=P("i"), out_specs=P("i"))
    others = {
        "[2, 3]": NamedSharding(shardc.sharding.Mesh(devices[2:4], "i"), P("i")),
        "[1, 0]": NamedSharding(shardc.sharding.Mesh(devices[1::-1], "i"), P("i")),
        "[0, 1, 2, 3]": NamedSharding(shardc.sharding.Mesh(devices[:4], "i"), P("i")),
        "[3]": devices[3],
    }
    for ids, where in others.items():
        x = shardc.device_put(np.arange(4.), where)
        for call, what in ((f, "shard_map"), (shardc.jit(f), "shard_map inside jit")):
            with pytest.raises(ValueError, match=(
                    r"^Received incompatible devices for jitted computation\. Got argument "
                    rf".* with device ids {re.escape(ids)} on platform CPU and {what} with "
                    r"device ids \[0, 1\] on platform CPU")):
                call(x)
    x = shardc.device_put(np.arange(4.), NamedSharding(m_a, P("i")))
    for call in (f, shardc.jit(f)):
        np.testing.assert_array_equal(np.asarray(call(x)), np.arange(4.) + 1)
        np.testing.assert_array_equal(np.asarray(call(np.arange(4.))), np.arange(4.) + 1)


def test_python_control_flow_on_a_one_element_invariant_value_in_an_eager_body():
    mesh = shardc.make_mesh((2, 2), ("x", "y"), axis_types=(shardc.sharding.AxisType.Auto,) * 2)

    def f(x):
        total = shardc.lax.psum(x, ("x", "y"))      # invariant, of shape (1, 1)
        return x if total < 0 else -x
    out = shardc.shard_map(f, mesh=mesh, in_specs=P("x", "y"), out_specs=P("x", "y"))(
        jnp.arange(4.).reshape(2, 2))
    np.testing.assert_array_equal(np.asarray(out), -np.arange(4.).reshape(2, 2))


def test_eval_shape_in_a_body_reports_the_varying_axes():
    mesh = shardc.make_mesh((2,), ("x",))
    seen = {}

    @partial(shardc.shard_map, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    def g(b):
        y = shardc.eval_shape(lambda a: a * 2, b)
        seen["shape"], seen["varying"] = y.shape, shardc.typeof(y).mat.varying
        return b
    with shardc.set_mesh(mesh):
        shardc.jit(g)(shardc.device_put(jnp.ones((8, 5)), P("x")))
    assert seen == {"shape": (4, 5), "varying": frozenset({"x"})}


def test_vmap_keeps_an_explicitly_split_batch_axis_of_a_shard_map():
    """The batch axis split over Explicit axes stays split: the shard_map is manual over them
    too, as under spmd_axis_name (JAX 0.10.2; before, the result was replicated)."""
    mesh = shardc.make_mesh((1, 2, 2), ("z", "x", "y"))
    f = shardc.shard_map(lambda b: b, mesh=mesh, in_specs=P("y"), out_specs=P("y"))
    s = NamedSharding(mesh, P(("z", "x"), "y"))
    x = shardc.device_put(jnp.arange(16).reshape(4, 4), s)
    out = shardc.jit(shardc.vmap(f))(x)
    assert out.sharding == s and str(shardc.typeof(out)) == "int32[4@(z,x),4@y]"
    mesh2 = shardc.make_mesh((2, 2), ("data", "model"))
    with shardc.set_mesh(mesh2):
        x2 = shardc.device_put(jnp.arange(16).reshape(4, 4), P("data", "model"))
        g = shardc.shard_map(lambda b: lax.psum(b, "model"), in_specs=P("model"),
                             out_specs=P(None))
        for run in (shardc.vmap(g), shardc.jit(shardc.vmap(g))):
            out = run(x2)
            assert str(shardc.typeof(out)) == "int32[4@data,2]"
            np.testing.assert_array_equal(np.asarray(out),
                                          np.arange(16).reshape(4, 2, 2).sum(1))


def test_out_specs_is_a_required_keyword():
    with pytest.raises(TypeError) as info:
        shardc.shard_map(lambda b: b, mesh=shardc.make_mesh((8,), ("x",)), in_specs=P("x"))
    assert str(info.value) == "shard_map() missing 1 required keyword-only argument: 'out_specs'"
    with pytest.raises(TypeError, match="out_specs"):
        shardc.shard_map(in_specs=P("x"))


def test_a_body_closing_over_a_value_split_on_explicit_axes_is_jax_error():
    mesh = shardc.make_mesh((4, 2), ("x", "y"))
    x = shardc.device_put(jnp.arange(8.), NamedSharding(mesh, P("x")))
    for run in (lambda f: f(x), lambda f: shardc.jit(f)(x)):
        with pytest.raises(NotImplementedError) as info:
            run(shardc.shard_map(lambda b: b, mesh=mesh, in_specs=None, out_specs=P("x")))
        assert str(info.value) == (
            "Closing over inputs to shard_map where the input is sharded on `Explicit` axes is "
            "not implemented. As a workaround, please pass those inputs as an argument to "
            "shard_map. Got input with shape f32[8@x]({Explicit: ('x', 'y')})")
    # passed as an argument, it is taken
    out = shardc.shard_map(lambda b: b * 2, mesh=mesh, in_specs=P("x"), out_specs=P("x"))(x)
    np.testing.assert_array_equal(np.asarray(out), np.arange(8.) * 2)


def test_a_body_closing_over_an_array_replicated_on_an_explicit_mesh_is_jax_error():
    """JAX reads the mesh in a closed-over array's type: replicated on a mesh with Explicit
    axes, it is refused too. A numpy array, or an array made on no mesh, is a constant of
    the body, also when the body converts it (its context mesh is the body's own)."""
    mesh = shardc.make_mesh((2,), ("x",))
    made_outside = jnp.ones((2, 4))
    with shardc.set_mesh(mesh):
        on_mesh = jnp.ones((2, 4))
        x = shardc.device_put(jnp.ones((4, 4)), P("x"))
        for w in (on_mesh, shardc.device_put(np.ones((2, 4), np.float32), P())):
            f = shardc.shard_map(lambda b, w=w: w * b, in_specs=P("x"), out_specs=P("x"))
            for run in (f, shardc.jit(f)):
                with pytest.raises(NotImplementedError) as info:
                    run(x)
                assert str(info.value).endswith(
                    "Got input with shape f32[2,4]({Explicit: ('x',)})")
        for w, want in ((np.full((2, 4), 2, np.float32), 2.0), (made_outside, 1.0)):
            f = shardc.shard_map(lambda b, w=w: w * b, in_specs=P("x"), out_specs=P("x"))
            for run in (f, shardc.jit(f)):
                np.testing.assert_array_equal(np.asarray(run(x)), np.full((4, 4), want))
