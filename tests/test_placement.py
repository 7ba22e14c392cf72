"""Where results live, as JAX assigns devices: an array put on a device by name is committed
to it, and so is whatever is computed from it (eagerly or under jit); arrays made without a
device go to the default device (``jax.default_device``) and stay uncommitted; committed arrays
on different devices are JAX's ValueError. Expected values are JAX 0.10.2's."""
import re

import numpy as np
import pytest

import shardc
import shardc.numpy as jnp
from shardc import lax
from shardc.sharding import NamedSharding, PartitionSpec as P, SingleDeviceSharding

DEVICES = shardc.devices()
HOST = np.arange(8.0, dtype=np.float32)


def on(value) -> tuple:
    """(device ids, committed) of an array."""
    return sorted(d.id for d in value.devices()), value.committed


@pytest.fixture
def x3():
    return shardc.device_put(HOST, DEVICES[3])


def test_device_put_commits_and_default_placement_does_not(x3):
    assert on(x3) == ([3], True)
    assert on(shardc.device_put(HOST)) == ([0], False)
    assert on(jnp.arange(8.0)) == ([0], False)
    assert on(shardc.device_put(x3)) == ([3], True)           # stays where it is
    assert on(shardc.device_put(jnp.ones(3), DEVICES[0])) == ([0], True)
    assert on(shardc.device_put(HOST, SingleDeviceSharding(DEVICES[2]))) == ([2], True)
    assert on(shardc.device_put(x3, DEVICES[4])) == ([4], True)
    assert on(x3.addressable_shards[0].data) == ([3], True)


@pytest.mark.parametrize("compute", [
    lambda a: a + 1,
    lambda a: (a * 2).sum(),
    lambda a: a[2],
    lambda a: a.at[1].set(5.0),
    lambda a: a.astype(jnp.int32),
    lambda a: jnp.stack([a, a]),
    lambda a: a @ jnp.ones(8),                  # with an uncommitted operand
    lambda a: jnp.where(a > 2, a, 0.0),
    lambda a: shardc.jit(lambda v, w: v * w)(a, jnp.ones(8)),
    lambda a: shardc.grad(lambda v: (v ** 2).sum())(a),
    lambda a: shardc.vmap(lambda v: v * 2)(a),
    lambda a: lax.scan(lambda c, v: (c + v, v), 0.0, a)[1],
], ids=["add", "sum", "index", "at_set", "astype", "stack", "matmul", "where", "jit", "grad",
        "vmap", "scan"])
def test_results_of_a_committed_array_stay_on_its_device(x3, compute):
    out = compute(x3)
    assert on(out) == ([3], True)
    np.testing.assert_allclose(np.asarray(out), np.asarray(compute(jnp.asarray(HOST))))


def test_jit_results_follow_committed_arguments_on_every_call(x3):
    double = shardc.jit(lambda a: a * 2)
    assert on(double(jnp.ones(8))) == ([0], False)
    assert on(double(x3)) == ([3], True)
    assert on(double(shardc.device_put(HOST, DEVICES[5]))) == ([5], True)
    assert on(double(jnp.ones(8))) == ([0], False)


def test_committed_arrays_on_different_devices_are_refused(x3):
    x0 = shardc.device_put(HOST, DEVICES[0])
    with pytest.raises(ValueError, match=r"Received incompatible devices for jitted computation\. "
                       r"Got argument x of add with shape float32\[8\] and with device ids \[3\] "
                       r"on platform CPU and argument y of add with shape float32\[8\] and with "
                       r"device ids \[0\] on platform CPU"):
        x3 + x0

    def f(a, b):
        return a["k"] + b

    with pytest.raises(ValueError, match=r"Got argument a\['k'\] of .*f with shape float32\[8\] "
                                         r"and with device ids \[3\] .* argument b of .*f "):
        shardc.jit(f)({"k": x3}, x0)


def test_incompatible_devices_name_variadic_and_nested_arguments(x3):
    x0 = shardc.device_put(HOST, DEVICES[0])
    with pytest.raises(ValueError, match=r"argument x\[0\] of .* device ids \[3\] .* "
                                         r"argument x\[1\] of .* device ids \[0\]"):
        shardc.jit(lambda *x: x)(x3, x0)
    with pytest.raises(ValueError, match=r"argument t\[0\] of .* argument t\[1\]\[0\] of "):
        shardc.jit(lambda t: t)((x3, (x0, x3)))


def test_a_committed_array_and_a_mesh_array_are_refused(x3):
    mesh = shardc.make_mesh((8,), ("x",))
    split = shardc.device_put(HOST, NamedSharding(mesh, P("x")))
    with pytest.raises(ValueError, match=r"device ids \[3\] on platform CPU and argument y of add "
                                         r"with shape float32\[8@x\] and with device ids "
                                         r"\[0, 1, 2, 3, 4, 5, 6, 7\]"):
        x3 + split
    # an uncommitted array joins the mesh
    assert on(jnp.ones(8) + split) == (list(range(8)), True)


def test_a_committed_array_off_the_context_mesh_is_refused(x3):
    mesh = shardc.make_mesh((8,), ("x",))
    with shardc.sharding.set_mesh(mesh):
        with pytest.raises(ValueError, match=r"device ids \[3\] on platform CPU and jit's "
                                             r"context mesh with device ids \[0, 1, 2, 3, 4, 5, "
                                             r"6, 7\]"):
            x3 + 1
        with pytest.raises(ValueError, match="jit's context mesh"):
            shardc.jit(lambda a: a + 1)(x3)


def test_default_device_places_new_values_and_uncommitted_results(x3):
    made = jnp.ones(3)
    with shardc.default_device(DEVICES[5]):
        assert on(jnp.ones(3)) == ([5], False)
        assert on(made + 1) == ([5], False)
        assert on(shardc.device_put(HOST)) == ([5], False)
        assert on(shardc.jit(lambda: jnp.ones(3))()) == ([5], False)
        assert on(x3 + 1) == ([3], True)          # committed wins
    assert on(jnp.ones(3)) == ([0], False)
    shardc.config.update("jax_default_device", DEVICES[2])
    try:
        assert on(jnp.zeros(2)) == ([2], False)
    finally:
        shardc.config.update("jax_default_device", None)
    assert on(jnp.zeros(2)) == ([0], False)


def test_keys_put_on_a_device_draw_there():
    key = shardc.device_put(shardc.random.key(0), DEVICES[4])
    assert on(key) == ([4], True)
    assert on(shardc.random.normal(key, (3,))) == ([4], True)
    assert not shardc.random.key(0).committed


def test_like_constructors_and_device_keyword_place_where_asked(x3):
    for like in (jnp.zeros_like, jnp.ones_like, jnp.empty_like):
        assert on(like(x3)) == ([3], True)
    assert on(jnp.full_like(x3, 2.0)) == ([3], True)
    assert on(jnp.zeros_like(jnp.ones(3))) == ([0], False)
    values, step = jnp.linspace(5, 6, 7, retstep=True, device=DEVICES[6])
    assert on(values) == ([6], True) and float(step) == pytest.approx(1 / 6)
    assert on(jnp.arange(5, device=SingleDeviceSharding(DEVICES[2]))) == ([2], True)


def test_like_constructors_with_a_shape_keep_a_layout_whole_on_every_device(x3):
    # JAX's *_like copy the operand's layout where the shape is its own or the operand is
    # whole on each device (on one device, or replicated); a split one only at its shape
    for like in (lambda x, **k: lax.full_like(x, 1.0, **k), jnp.zeros_like, jnp.ones_like,
                 jnp.empty_like):
        assert on(like(x3, shape=())) == ([3], True)
        assert on(like(x3, shape=(2, 4))) == ([3], True)
    mesh = shardc.sharding.Mesh(DEVICES[:4], ("x",))
    split = shardc.device_put(HOST, NamedSharding(mesh, P("x")))
    whole = shardc.device_put(HOST, NamedSharding(mesh, P()))
    assert jnp.zeros_like(split, shape=(8,)).sharding == NamedSharding(mesh, P("x"))
    assert on(jnp.zeros_like(split, shape=(2, 8))) == ([0], False)
    made = jnp.ones_like(whole, shape=(2, 3))
    assert made.sharding == NamedSharding(mesh, P()) and tuple(made.sharding.spec) == ()
    np.testing.assert_array_equal(np.asarray(made), np.ones((2, 3), np.float32))
    # an uncommitted or weakly typed operand gives the default placement
    assert on(jnp.zeros_like(jnp.ones(3), shape=())) == ([0], False)
    weak = shardc.device_put(1.0, DEVICES[2])
    assert on(lax.full_like(weak, 2.0, shape=(3,))) == ([0], False)


def test_lax_full_lays_a_concrete_result_out_by_sharding():
    mesh = shardc.sharding.Mesh(DEVICES, ("i",))
    made = lax.full((8,), 1.0, sharding=NamedSharding(mesh, P("i")))
    assert made.sharding == NamedSharding(mesh, P("i")) and made.dtype == np.float32
    assert not made.weak_type
    np.testing.assert_array_equal(np.asarray(made), np.ones(8, np.float32))
    like = lax.full_like(np.zeros(4, np.int32), 3, shape=(16,),
                         sharding=NamedSharding(mesh, P()))
    assert like.sharding == NamedSharding(mesh, P()) and like.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(like), np.full(16, 3, np.int32))
    assert on(lax.full((2,), 0, np.int32, sharding=SingleDeviceSharding(DEVICES[3]))) == \
        ([3], True)
    # under jit a concrete sharding changes nothing, as in JAX
    traced = shardc.jit(lambda: lax.full((8,), 1.0, sharding=NamedSharding(mesh, P("i"))))()
    assert on(traced) == ([0], False)


def test_frequencies_are_placed_on_the_device_asked():
    for name in ("fftfreq", "rfftfreq"):
        made = getattr(jnp.fft, name)(8, d=0.5, device=DEVICES[7])
        assert on(made) == ([7], True)
        np.testing.assert_allclose(np.asarray(made), getattr(np.fft, name)(8, 0.5))
    made = jnp.fft.fftfreq(8, dtype=np.float16, device=SingleDeviceSharding(DEVICES[3]))
    assert on(made) == ([3], True) and made.dtype == np.float16
    assert on(shardc.jit(lambda: jnp.fft.fftfreq(8, device=DEVICES[7]))()) == ([7], True)


def test_device_assignment_names_the_devices_in_mesh_order():
    mesh = shardc.sharding.Mesh(np.array(DEVICES[:4])[::-1].reshape(2, 2), ("a", "b"))
    assert NamedSharding(mesh, P("a"))._device_assignment == tuple(DEVICES[k] for k in (3, 2, 1, 0))
    assert mesh._flat_devices_tuple == NamedSharding(mesh, P())._device_assignment
    assert SingleDeviceSharding(DEVICES[5])._device_assignment == (DEVICES[5],)
    assert NamedSharding(mesh, P(), memory_kind="device") == NamedSharding(mesh, P())
    with pytest.raises(NotImplementedError, match="one memory kind"):
        NamedSharding(mesh, P(), memory_kind="pinned_host")


def test_device_put_may_alias_and_donate_as_jax():
    arr = shardc.device_put(np.arange(8), shardc.devices()[0])
    one = SingleDeviceSharding(shardc.devices()[0])
    assert shardc.device_put(arr, may_alias=True, donate=False) is arr
    assert shardc.device_put(arr, one, may_alias=True) is arr
    assert shardc.device_put(arr) is arr                      # may alias by default
    for copied in (shardc.device_put(arr, may_alias=False), shardc.device_put(arr, one,
                                                                              may_alias=False),
                   shardc.device_put(arr, donate=True)):
        assert copied is not arr
        np.testing.assert_array_equal(np.asarray(copied), np.arange(8))
    assert not arr.is_deleted()              # donation is best effort: JAX's CPU keeps it
    with pytest.raises(ValueError, match="may_alias and donate cannot be True at the same"):
        shardc.device_put(arr, may_alias=True, donate=True)
    tree = shardc.device_put({"a": arr, "b": np.ones(2)}, may_alias={"a": False, "b": None})
    assert tree["a"] is not arr


def test_out_shardings_on_other_devices_than_the_computations_are_refused():
    """JAX's ValueError: an out_shardings entry on other devices than another entry, or than
    the arguments in_shardings lays out, at the call and at lower(); outputs on the devices
    of the arguments are fine."""
    from shardc.sharding import Mesh
    m8 = Mesh(np.array(DEVICES).reshape(4, 2), ("x", "y"))
    m4 = Mesh(np.array(DEVICES[:4]).reshape(2, 2), ("x", "y"))
    a = jnp.arange(16).reshape(8, 2)
    two_outs = shardc.jit(lambda x, y: (x, y), out_shardings=(
        NamedSharding(m8, P("x", "y")), NamedSharding(m4, P("x", "y"))))
    for call in (lambda: two_outs(a, a), lambda: two_outs.lower(a, a)):
        with pytest.raises(ValueError, match=re.escape(
                "Received incompatible devices for jitted computation. Got explicit output "
                "sharding with device ids [0, 1, 2, 3, 4, 5, 6, 7] on platform CPU and explicit "
                "output sharding with device ids [0, 1, 2, 3] on platform CPU")):
            call()
    in_out = shardc.jit(lambda x, y: (x, y), in_shardings=NamedSharding(m4, P("x", "y")),
                        out_shardings=NamedSharding(m8, P("x", "y")))
    with pytest.raises(ValueError, match=re.escape(
            "Received incompatible devices for jitted computation. Got ") + ".*" + re.escape(
            "with device ids [0, 1, 2, 3] on platform CPU and explicit output sharding with "
            "device ids [0, 1, 2, 3, 4, 5, 6, 7] on platform CPU")):
        in_out(a, a)
    same = shardc.jit(lambda x: x * 2, in_shardings=NamedSharding(m4, P("x")),
                      out_shardings=NamedSharding(m4, P(None, "y")))
    out = same(a)
    np.testing.assert_array_equal(out, np.arange(16).reshape(8, 2) * 2)
    assert out.sharding == NamedSharding(m4, P(None, "y"))


def test_a_constraint_on_an_abstract_mesh_lays_the_value_out_on_its_devices():
    # JAX's pjit test_wsc_abstract_mesh: the devices are the value's (or the mesh set's)
    mesh = shardc.sharding.Mesh(np.array(shardc.devices()[:4]).reshape(2, 2), ("x", "y"))
    arr = shardc.device_put(np.arange(16).reshape(8, 2), NamedSharding(mesh, P("x", "y")))
    abstract = NamedSharding(mesh.abstract_mesh, P("x"))
    f = lambda x: shardc.lax.with_sharding_constraint(x, abstract) * 2
    for g, spec in ((shardc.jit(f), P("x")), (shardc.jit(shardc.vmap(f)), P(None, "x")),
                    (shardc.jit(shardc.vmap(f, spmd_axis_name="y")), P("y", "x"))):
        out = g(arr)
        assert out.sharding == NamedSharding(mesh, spec)
        np.testing.assert_array_equal(np.asarray(out), np.arange(16).reshape(8, 2) * 2)


def test_a_committed_array_and_a_shard_map_on_other_devices_are_refused(x3):
    """JAX's ValueError: an argument committed to one device cannot be the input of a
    shard_map over a mesh of other devices, eagerly or under jit (nor of a jitted sharding
    constraint onto one); an uncommitted array is laid out on the mesh."""
    mesh = shardc.make_mesh((8,), ("x",), axis_types=(shardc.sharding.AxisType.Auto,))
    double = shardc.shard_map(lambda a: a * 2, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    prefix = r"^Received incompatible devices for jitted computation\. Got argument "
    with pytest.raises(ValueError, match=prefix + r"args\[0\] of shard_map of '<lambda>' with "
                       r"shape float32\[8\] and with device ids \[3\] on platform CPU and "
                       r"shard_map with device ids \[0, 1, 2, 3, 4, 5, 6, 7\]"):
        double(x3)
    with pytest.raises(ValueError, match=prefix + r"a of .*<lambda> with shape float32\[8\] and "
                       r"with device ids \[3\] on platform CPU and shard_map inside jit with "
                       r"device ids \[0, 1, 2, 3, 4, 5, 6, 7\] on platform CPU at "):
        shardc.jit(lambda a: double(a))(x3)
    with pytest.raises(ValueError, match=prefix):
        shardc.jit(lambda a: shardc.lax.with_sharding_constraint(
            a, NamedSharding(mesh, P("x"))))(x3)
    np.testing.assert_array_equal(np.asarray(double(jnp.ones(8))), np.full(8, 2.0))
    np.testing.assert_array_equal(np.asarray(shardc.jit(double)(jnp.ones(8))), np.full(8, 2.0))


def test_a_jitted_computation_constrains_values_onto_its_own_devices_only():
    """JAX's device assignment: committed arguments, out_shardings and the layouts a jitted
    program constrains values to (with_sharding_constraint, device_put) are on the same
    devices in the same order, else JAX's ValueError naming two of them; an eager constraint
    is a jitted identity, so it cannot move a committed array to other devices either."""
    from shardc.sharding import Mesh
    m1 = Mesh(np.array(DEVICES[:2]), ("x",))
    m2 = Mesh(np.array(DEVICES[2:4]), ("x",))
    flipped = Mesh(np.array([DEVICES[1], DEVICES[0]]), ("x",))
    x = shardc.device_put(HOST, NamedSharding(m1, P("x")))
    to_m2 = lambda v: lax.with_sharding_constraint(v * 2, NamedSharding(m2, P("x")))
    with pytest.raises(ValueError, match=re.escape(
            "Received incompatible devices for jitted computation. Got argument v of "
            "test_a_jitted_computation_constrains_values_onto_its_own_devices_only.<locals>."
            "<lambda> with shape float32[8] and with device ids [0, 1] on platform CPU and "
            "sharding_constraint inside jit with device ids [2, 3] on platform CPU at "
            "test_placement.py:")):
        shardc.jit(lambda v: to_m2(v))(x)
    with pytest.raises(ValueError, match=r"device ids \[0, 1\].*device ids \[2, 3\]"):
        shardc.jit(lambda v: shardc.device_put(v, NamedSharding(m2, P("x"))))(x)
    with pytest.raises(ValueError, match=re.escape(
            "Got explicit output sharding with device ids [0, 1] on platform CPU and "
            "sharding_constraint inside jit with device ids [2, 3]")):
        shardc.jit(to_m2, out_shardings=NamedSharding(m1, P()))(HOST)
    both = lambda v: (to_m2(v), lax.with_sharding_constraint(v, NamedSharding(m1, P("x"))))
    with pytest.raises(ValueError, match=r"Got sharding_constraint inside jit with device ids "
                                         r"\[2, 3\].* and sharding_constraint inside jit with "
                                         r"device ids \[0, 1\]"):
        shardc.jit(both)(HOST)
    # an uncommitted argument goes where the program asks
    out = shardc.jit(to_m2)(HOST)
    assert out.sharding == NamedSharding(m2, P("x"))
    np.testing.assert_array_equal(np.asarray(out), HOST * 2)
    for target in (m2, flipped):
        with pytest.raises(ValueError, match=re.escape(
                "Got argument x of _identity_fn with shape float32[8] and with device ids "
                f"[0, 1] on platform CPU and explicit output sharding with device ids "
                f"{list(target.flat_device_ids)} on platform CPU")):
            lax.with_sharding_constraint(x, NamedSharding(target, P("x")))
    moved = lax.with_sharding_constraint(jnp.asarray(HOST), NamedSharding(m2, P("x")))
    assert moved.sharding == NamedSharding(m2, P("x"))


# --- device_put under autodiff: the value moves, its cotangent goes back ------------------------

def _to_device_1(x):
    return shardc.device_put(x, DEVICES[1])


@pytest.mark.parametrize("x", [shardc.device_put(np.float32(2.0), DEVICES[0]),
                               jnp.float32(2.0)], ids=["committed", "uncommitted"])
def test_device_put_under_autodiff_places_the_value_and_sends_the_cotangent_back(x):
    y, g = shardc.value_and_grad(_to_device_1)(x)
    assert (float(y), on(y), float(g), on(g)) == (2.0, ([1], True), 1.0, ([0], True))
    y, t = shardc.jvp(_to_device_1, (x,), (jnp.float32(3.0),))
    assert (float(t), on(y), on(t)) == (3.0, ([1], True), ([1], True))
    y, pullback = shardc.vjp(_to_device_1, x)
    # a cotangent anywhere comes back to the source
    (g,) = pullback(shardc.device_put(np.float32(4.0), DEVICES[2]))
    assert (float(g), on(g)) == (4.0, ([0], True))
    # ``src`` names where the cotangent goes
    _, pullback = shardc.vjp(lambda x: shardc.device_put(x, DEVICES[1], src=DEVICES[3]), x)
    (g,) = pullback(jnp.float32(1.0))
    assert on(g) == ([3], True)
    g = shardc.grad(lambda x: shardc.device_put(x * 3, DEVICES[1]) * 2.0)(x)
    assert (float(g), on(g)) == (6.0, ([0], True))


def test_device_put_to_a_mesh_under_autodiff_sends_the_cotangent_to_the_operands_layout():
    first = NamedSharding(shardc.sharding.Mesh(DEVICES[:4], "x"), P("x"))
    last = NamedSharding(shardc.sharding.Mesh(DEVICES[4:8], "y"), P("y"))
    a = shardc.device_put(HOST, DEVICES[5])
    y, pullback = shardc.vjp(lambda a: shardc.device_put(a, first), a)
    (g,) = pullback(jnp.ones(8))
    assert y.sharding == first and on(g) == ([5], True)
    np.testing.assert_array_equal(g, np.ones(8))
    a = shardc.device_put(HOST, last)
    g = shardc.grad(lambda a: (shardc.device_put(a, first) * HOST).sum())(a)
    assert g.sharding == last and g.committed
    np.testing.assert_array_equal(g, HOST)


def test_grad_through_jit_then_device_put_onto_other_devices_then_jit():
    # JAX's test_device_put_grad: the cotangent goes back to the first mesh's devices
    first = NamedSharding(shardc.sharding.Mesh(DEVICES[:4], "x"), P("x"))
    last = NamedSharding(shardc.sharding.Mesh(DEVICES[4:8], "x"), P("x"))

    def fun(x):
        y = shardc.jit(lambda x: x ** 2)(x)
        y = shardc.device_put(y, last)
        return shardc.jit(lambda y: jnp.sum(y * 3))(y)

    g = shardc.grad(fun)(shardc.device_put(HOST, first))
    assert g.sharding == first
    np.testing.assert_allclose(g, 6 * HOST)
