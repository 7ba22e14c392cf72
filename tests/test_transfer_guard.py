"""Transfer guards (``jax.transfer_guard``, ``jax_transfer_guard*``) as JAX 0.10 has them: each
direction's levels, implicit against explicit transfers, nesting, the config options, thread
locality, and JAX's error type and messages (``JaxRuntimeError``, ``INVALID_ARGUMENT:
Disallowed host-to-device transfer: aval=..., dst_sharding=...``)."""
from __future__ import annotations

import logging
import pickle
import re
import threading

import numpy as np
import pytest

import shardc
import shardc.numpy as jnp
from shardc import config, random
from shardc.errors import JaxRuntimeError
from shardc.sharding import Mesh, NamedSharding
from shardc.sharding import PartitionSpec as P

D0 = "SingleDeviceSharding(device=CpuDevice(id=0), memory_kind=device)"
D1 = "SingleDeviceSharding(device=CpuDevice(id=1), memory_kind=device)"
H2D = "INVALID_ARGUMENT: Disallowed host-to-device transfer: "
D2D = "INVALID_ARGUMENT: Disallowed device-to-device transfer: "
GUARDS = ("jax_transfer_guard", "jax_transfer_guard_host_to_device",
          "jax_transfer_guard_device_to_device", "jax_transfer_guard_device_to_host")


@pytest.fixture(autouse=True)
def unset_guards():
    yield
    for name in GUARDS:
        config.update(name, None)


def refused(message):
    return pytest.raises(JaxRuntimeError, match=re.escape(message))


def fresh():
    """A device array not yet fetched to the host."""
    return jnp.arange(3.0)


# --- host to device -------------------------------------------------------------------------

def test_error_type_and_message_are_jaxs():
    assert issubclass(JaxRuntimeError, RuntimeError)
    with shardc.transfer_guard("disallow"):
        with refused(H2D + f"aval=ShapedArray(float32[3]), dst_sharding={D0}"):
            shardc.jit(lambda x: x)(np.ones(3, np.float32))
        with refused(H2D + f"aval=ShapedArray(float32[], weak_type=True), dst_sharding={D0}"):
            shardc.jit(lambda x: x)(1.0)
        with refused(H2D + f"aval=ShapedArray(int32[2]), dst_sharding={D0}"):
            jnp.array([1, 2])
        with refused(H2D + f"aval=ShapedArray(float32[3]), dst_sharding={D0}"):
            jnp.asarray(np.ones(3))        # float64 lands as float32, as it is named


@pytest.mark.parametrize("make", [
    lambda: jnp.ones(3), lambda: jnp.zeros((2, 2)), lambda: jnp.full((2,), 3.0),
    lambda: jnp.array(1.0), lambda: jnp.sin(1.0), lambda: jnp.sin(np.ones(2)),
    lambda: jnp.add(np.ones(3), 1), lambda: jnp.arange(1, 5), lambda: jnp.eye(3),
    lambda: fresh() + 1, lambda: fresh() * np.ones(3),
    lambda: shardc.jit(lambda x: x * 2)(np.ones(3)),
    lambda: random.key(0)])
def test_implicit_host_to_device_is_refused(make):
    with shardc.transfer_guard("disallow"):
        with pytest.raises(JaxRuntimeError, match="Disallowed host-to-device transfer"):
            make()


@pytest.mark.parametrize("make", [
    lambda: jnp.arange(5), lambda: jnp.arange(np.float32(5)),   # an iota: nothing moves
    lambda: jnp.iscomplexobj(1.0), lambda: jnp.iscomplexobj(np.float32(1)),
    lambda: jnp.iscomplexobj(np.arange(3)), lambda: jnp.iscomplexobj(None),
    # constants of a traced function are the program's
    lambda: shardc.jit(lambda: jnp.asarray(np.ones(3)) + 1.0)(),
    lambda: shardc.make_jaxpr(lambda x: x + np.ones(3))(np.ones(3)),
])
def test_no_transfer_is_not_refused(make):
    with shardc.transfer_guard("disallow"):
        make()


def test_shard_map_and_in_shardings_take_host_values_implicitly():
    mesh = Mesh(np.array(shardc.devices()[:2]), ("x",))
    split = NamedSharding(mesh, P("x"))
    mapped = shardc.shard_map(lambda a: a * 2, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    placed = shardc.jit(lambda a: a * 2, in_shardings=split)
    x = shardc.device_put(np.arange(8.0), split)
    with shardc.transfer_guard("disallow"):
        with refused(H2D + f"aval=ShapedArray(float32[8]), dst_sharding={split!r}"):
            mapped(np.ones(8))
        with pytest.raises(JaxRuntimeError, match="Disallowed host-to-device transfer"):
            placed(np.ones(8))
        y, z = mapped(x), placed(x)
    np.testing.assert_array_equal(y, np.arange(8.0) * 2)
    np.testing.assert_array_equal(z, np.arange(8.0) * 2)


@pytest.mark.parametrize("call", [
    lambda k, x: random.split(k), lambda k, x: random.split(k, 4),
    lambda k, x: random.normal(k, (3,)), lambda k, x: random.bits(k, (3,)),
    lambda k, x: random.permutation(k, 5), lambda k, x: random.categorical(k, x),
    lambda k, x: shardc.nn.relu(x), lambda k, x: shardc.nn.log_softmax(x, axis=0),
    lambda k, x: jnp.mean(x, axis=1), lambda k, x: jnp.round(x, 2), lambda k, x: jnp.tril(x),
    lambda k, x: jnp.linalg.pinv(x), lambda k, x: x.mean(), lambda k, x: x.round(1),
    lambda k, x: x // x, lambda k, x: x % x, lambda k, x: divmod(x, x)])
def test_functions_jax_jits_bind_their_constants_in_the_program(call):
    # JAX runs these as jitted programs: their constants move with the program, not as
    # transfers (shardc binds them at once, and does not count them)
    k, x = random.key(0), jnp.linspace(0.1, 0.9, 6).reshape(2, 3)
    with shardc.transfer_guard("disallow"):
        call(k, x)


def test_functions_jax_jits_check_their_arguments():
    k = random.key(0)
    with shardc.transfer_guard("disallow"):
        with refused(H2D + f"aval=ShapedArray(float32[2,3]), dst_sharding={D0}"):
            jnp.mean(np.ones((2, 3), np.float32), axis=1)    # axis: static, not moved
        with refused(H2D + f"aval=ShapedArray(int32[], weak_type=True), dst_sharding={D0}"):
            jnp.linspace(0, 1, 5)                             # start and stop move
        with refused(H2D):
            random.categorical(k, np.zeros(3, np.float32))
        with refused(H2D + f"aval=ShapedArray(int32[], weak_type=True), dst_sharding={D0}"):
            fresh() // 2


def test_seeding_from_a_device_array_transfers_nothing():
    seed = shardc.device_put(42)
    with shardc.transfer_guard("disallow"):
        key = random.key(seed)
        raw = random.PRNGKey(seed)
    np.testing.assert_array_equal(random.key_data(key), random.key_data(random.key(42)))
    np.testing.assert_array_equal(raw, random.PRNGKey(42))


def test_jit_fast_path_is_guarded_too():
    f = shardc.jit(lambda x: x + 1)
    f(np.ones(3))                        # cached: the next call takes the fast path
    x = jnp.ones(3)
    f(x)
    with shardc.transfer_guard_host_to_device("disallow"):
        with refused(H2D + f"aval=ShapedArray(float32[3]), dst_sharding={D0}"):
            f(np.ones(3))
        y = f(x)
    np.testing.assert_array_equal(y, np.full(3, 2.0))


def test_device_put_is_explicit():
    with shardc.transfer_guard("disallow"):
        x = shardc.device_put(np.ones(3))
        shardc.device_put(1.0)
    with shardc.transfer_guard("disallow_explicit"):
        with refused(H2D + f"aval=ShapedArray(float32[3]), dst_sharding={D0}"):
            shardc.device_put(np.ones(3))
        with refused(H2D + f"aval=ShapedArray(float32[], weak_type=True), dst_sharding={D0}"):
            shardc.device_put(1.0)
        assert shardc.device_put(x) is x             # already on the devices
    np.testing.assert_array_equal(x, np.ones(3))


# --- device to device -----------------------------------------------------------------------

def test_device_put_to_another_device():
    x = shardc.device_put(np.arange(4.0), shardc.devices()[0])
    with shardc.transfer_guard("disallow"):
        y = shardc.device_put(x, shardc.devices()[1])      # explicit: allowed
    assert y.devices() == {shardc.devices()[1]}
    with shardc.transfer_guard_device_to_device("disallow_explicit"):
        with refused(D2D + f"aval=ShapedArray(float32[4]), dst_sharding={D1}"):
            shardc.device_put(x, shardc.devices()[1])
        shardc.device_put(x, shardc.devices()[0])         # already there
        shardc.device_put(np.ones(2), shardc.devices()[1])  # host-to-device: not guarded


def test_device_put_between_layouts():
    devices = shardc.devices()
    mesh = Mesh(np.array(devices[:8]), ("x",))
    reversed_mesh = Mesh(np.array(devices[:8][::-1]), ("x",))
    split = shardc.device_put(np.arange(16.0), NamedSharding(mesh, P("x")))
    whole = shardc.device_put(np.arange(16.0), NamedSharding(mesh, P()))
    with shardc.transfer_guard("disallow_explicit"):
        # the same devices in another order: JAX reshards by a program, no transfer
        out = shardc.device_put(split, NamedSharding(reversed_mesh, P("x")))
        # every device holds what it needs already
        shardc.device_put(whole, devices[3])
        with pytest.raises(JaxRuntimeError, match="Disallowed device-to-device transfer"):
            shardc.device_put(split, NamedSharding(mesh, P()))
        with pytest.raises(JaxRuntimeError, match="Disallowed device-to-device transfer"):
            shardc.device_put(split, devices[0])
    np.testing.assert_array_equal(out, np.arange(16.0))
    assert out.sharding == NamedSharding(reversed_mesh, P("x"))


def test_device_put_to_other_devices_names_the_source_where_blocks_move_whole():
    devices = shardc.devices()
    a = NamedSharding(Mesh(np.array(devices[:2]), ("x",)), P("x"))
    b = NamedSharding(Mesh(np.array(devices[2:4]), ("x",)), P("x"))
    x = shardc.device_put(np.arange(8.0), a)
    with shardc.transfer_guard("disallow_explicit"):
        with refused(D2D + f"aval=ShapedArray(float32[8]), sharding={a!r}, "
                     f"dst_sharding={b!r}"):
            shardc.device_put(x, b)


def test_uncommitted_array_moved_to_a_committed_one_is_implicit():
    u = jnp.arange(4.0)                                   # uncommitted, on device 0
    c = shardc.device_put(jnp.arange(4.0), shardc.devices()[1])
    message = D2D + f"aval=ShapedArray(float32[4]), sharding={D0}, dst_sharding={D1}"
    with shardc.transfer_guard("disallow"):
        with refused(message):
            u * c
        with refused(message):
            shardc.jit(lambda a, b: a + b)(u, c)
        square = c * c
    with shardc.transfer_guard("log"):
        product = u * c
    np.testing.assert_array_equal(square, np.arange(4.0) ** 2)
    np.testing.assert_array_equal(product, np.arange(4.0) ** 2)


@pytest.mark.filterwarnings("ignore:backend and device argument")
def test_jit_on_a_device_moves_implicitly():
    x = shardc.device_put(jnp.arange(3.0), shardc.devices()[0])
    f = shardc.jit(lambda y: y, device=shardc.devices()[1])
    with shardc.transfer_guard("disallow"):
        with refused(D2D + f"aval=ShapedArray(float32[3]), sharding={D0}, "
                     f"dst_sharding={D1}"):
            f(x)


# --- device to host -------------------------------------------------------------------------

@pytest.mark.parametrize("fetch", [
    np.asarray, lambda x: x.tolist(), lambda x: float(x[0]), str, repr,
    lambda x: x.copy_to_host_async(), pickle.dumps, lambda x: x.item(1), shardc.device_get])
def test_fetches_from_cpu_devices_are_never_guarded(fetch, caplog):
    # JAX's CPU backend fetches always: its device-to-host guard neither refuses nor logs
    caplog.set_level(logging.WARNING, logger="shardc.transfer_guard")
    for level in ("disallow", "disallow_explicit", "log_explicit"):
        x = fresh()
        with shardc.transfer_guard_device_to_host(level):
            fetch(x)
        with shardc.transfer_guard(level):
            fetch(fresh())
    assert not caplog.records
    mesh = Mesh(np.array(shardc.devices()[:2]), ("x",))
    split = shardc.device_put(np.arange(8, dtype=np.int32), NamedSharding(mesh, P("x")))
    with shardc.transfer_guard("disallow_explicit"):
        assert np.asarray(split).tolist() == list(range(8))


# --- levels, logging, nesting, options ------------------------------------------------------

def test_log_levels(caplog):
    caplog.set_level(logging.WARNING, logger="shardc.transfer_guard")
    with shardc.transfer_guard("log"):
        jnp.array([1, 2])
        shardc.device_put(np.ones(2))                     # explicit: not logged
        np.asarray(fresh())                               # a fetch: never
    assert [r.getMessage() for r in caplog.records] == [
        f"host-to-device transfer: aval=ShapedArray(int32[2]), dst_sharding={D0}"]
    caplog.clear()
    with shardc.transfer_guard("log_explicit"):
        shardc.device_put(np.ones(2))
        shardc.device_get(fresh())
    assert [r.getMessage() for r in caplog.records] == [
        f"host-to-device transfer: aval=ShapedArray(float32[2]), dst_sharding={D0}"]
    caplog.clear()
    with shardc.transfer_guard("allow"):
        jnp.ones(2)
        np.asarray(fresh())
    assert not caplog.records


def pulled_across(there):
    """An uncommitted array pulled to a committed one's device: implicit device to device."""
    return there + jnp.arange(2.0)


def test_nesting_and_directions():
    there = shardc.device_put(jnp.arange(2.0), shardc.devices()[1])
    with shardc.transfer_guard("disallow"):
        with shardc.transfer_guard("allow"):
            jnp.ones(1)
        with pytest.raises(JaxRuntimeError):
            jnp.ones(1)
    with shardc.transfer_guard_host_to_device("disallow"):
        pulled_across(there)                               # another direction
        with shardc.transfer_guard("allow"):
            jnp.ones(1)
        with pytest.raises(JaxRuntimeError):
            jnp.ones(1)
    with shardc.transfer_guard("disallow"):
        with shardc.transfer_guard_host_to_device("allow"):
            jnp.ones(1)
            with pytest.raises(JaxRuntimeError):
                pulled_across(there)
    jnp.ones(1)


def test_config_options():
    there = shardc.device_put(jnp.arange(2.0), shardc.devices()[1])
    assert config.jax_transfer_guard is None
    assert config.jax_transfer_guard_host_to_device is None
    config.update("jax_transfer_guard", "disallow")
    assert [config.read(n) for n in GUARDS] == ["disallow"] * 4
    with pytest.raises(JaxRuntimeError):
        jnp.ones(2)
    with shardc.transfer_guard_host_to_device("allow"):
        assert config.jax_transfer_guard_host_to_device == "allow"
        assert shardc.transfer_guard_host_to_device.value == "allow"
        jnp.ones(2)
    config.update("jax_transfer_guard_host_to_device", "allow")
    jnp.ones(2)
    with pytest.raises(JaxRuntimeError):
        pulled_across(there)
    config.update("jax_transfer_guard", None)
    config.update("jax_transfer_guard_host_to_device", None)
    jnp.ones(2)
    pulled_across(there)
    with shardc.transfer_guard("log"):
        assert config.jax_transfer_guard == "log"
        assert config.jax_transfer_guard_device_to_device == "log"
    assert config.jax_transfer_guard is None


def test_bad_levels_are_jaxs_value_error():
    message = ("new enum value must be None or in ['allow', 'log', 'disallow', "
               "'log_explicit', 'disallow_explicit'], got bogus of type <class 'str'>.")
    with pytest.raises(ValueError, match=re.escape(message)):
        config.update("jax_transfer_guard", "bogus")
    with pytest.raises(ValueError, match=re.escape(message)):
        with shardc.transfer_guard("bogus"):
            pass
    with pytest.raises(ValueError, match=re.escape(message)):
        with shardc.transfer_guard_device_to_host("bogus"):
            pass


def test_context_is_thread_local():
    results = []

    def make():
        try:
            jnp.ones(2)
            results.append("allowed")
        except JaxRuntimeError:
            results.append("refused")

    with shardc.transfer_guard("disallow"):
        thread = threading.Thread(target=make)
        thread.start()
        thread.join()
    config.update("jax_transfer_guard", "disallow")
    thread = threading.Thread(target=make)
    thread.start()
    thread.join()
    assert results == ["allowed", "refused"]


def test_samplers_given_numbers_transfer_them_as_jaxs_jitted_samplers_do():
    # JAX's samplers are jitted functions of their numeric parameters: a Python number for
    # a bound or a probability is a host-to-device transfer (uniform's default bounds too);
    # samplers of a key and a shape alone transfer nothing
    key = shardc.random.key(0)
    transferring = [lambda: shardc.random.uniform(key, (3,), minval=0.0, maxval=2.0),
                    lambda: shardc.random.uniform(key, (3,)),
                    lambda: shardc.random.bernoulli(key, 0.3, (3,)),
                    lambda: shardc.random.randint(key, (3,), 0, 5),
                    lambda: shardc.random.truncated_normal(key, -1.0, 1.0, (3,))]
    for draw in transferring:
        with shardc.transfer_guard("disallow"):
            with pytest.raises(shardc.errors.JaxRuntimeError,
                               match="Disallowed host-to-device transfer"):
                draw()
    for draw in (lambda: shardc.random.normal(key, (3,)),
                 lambda: shardc.random.exponential(key, (3,)),
                 lambda: shardc.random.gumbel(key, (3,))):
        with shardc.transfer_guard("disallow"):
            assert draw().shape == (3,)
