"""The multi-process API on one process (the simulator): what a script written for several
processes gets when it runs alone. tests/test_mpi.py runs the same API under mpiexec."""
import re

import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from shardc.experimental import multihost_utils
from shardc.sharding import AxisType, NamedSharding, PartitionSpec as P, SingleDeviceSharding
from ir.sharding import IndivisibleError
from runtime import devices as device_table


def test_one_process_holds_every_device():
    assert jax.process_index() == 0 and jax.process_count() == 1
    assert jax.local_devices() == jax.devices()
    assert jax.local_device_count() == jax.device_count() == 8
    assert {d.process_index for d in jax.devices()} == {0}


def test_devices_that_do_not_split_evenly_are_an_error():
    with pytest.raises(ValueError, match="8 devices cannot be split evenly over 3 processes"):
        device_table.set_processes(0, 3)
    assert jax.process_count() == 1


def test_device_process_follows_an_even_split_in_id_order():
    try:
        device_table.set_processes(1, 4)
        assert [d.process_index for d in jax.devices()] == [0, 0, 1, 1, 2, 2, 3, 3]
        assert [d.id for d in jax.local_devices()] == [2, 3]
    finally:
        device_table.set_processes(0, 1)


@pytest.mark.parametrize("spec", [P("x"), P("x", "y"), P(None, "y"), P()])
def test_make_array_from_callback(spec):
    mesh = jax.make_mesh((4, 2), ("x", "y"))
    whole = np.arange(48, dtype=np.float32).reshape(8, 6)
    calls = []

    def block(index):
        calls.append(index)
        return whole[index]

    x = jax.make_array_from_callback(whole.shape, NamedSharding(mesh, spec), block)
    assert x.shape == whole.shape and x.dtype == np.float32
    assert x.sharding == NamedSharding(mesh, spec)
    np.testing.assert_array_equal(np.asarray(x), whole)
    # once per device, or once in all where every device holds the whole array (JAX's)
    assert len(calls) == (1 if spec == P() else 8)
    for shard in x.addressable_shards:
        np.testing.assert_array_equal(shard.data, whole[shard.index])


ALL = slice(None)


@pytest.mark.parametrize("spec, calls", [
    (P("x"), [(slice(0, 2), ALL)] * 2 + [(slice(2, 4), ALL)] * 2 + [(slice(4, 6), ALL)] * 2
     + [(slice(6, 8), ALL)] * 2),
    (P(None, "y"), [(ALL, slice(0, 3)), (ALL, slice(3, 6))] * 4),
    (P(("y", "x")), [(slice(k, k + 1), ALL) for k in (0, 4, 1, 5, 2, 6, 3, 7)]),
    (P(), [(ALL, ALL)]),
])
def test_make_array_from_callback_indices_and_calls_are_jaxs(spec, calls):
    # unsplit dimensions are slice(None); one call per device in mesh order, one in all when
    # the array is replicated
    mesh = jax.make_mesh((4, 2), ("x", "y"))
    seen = []
    jax.make_array_from_callback((8, 6), NamedSharding(mesh, spec),
                                 lambda index: seen.append(index) or np.zeros((8, 6))[index])
    assert seen == calls


def test_make_array_from_callback_on_one_device_and_with_dtype():
    device = jax.devices()[3]
    seen = []
    x = jax.make_array_from_callback((4,), SingleDeviceSharding(device),
                                     lambda index: seen.append(index) or np.arange(4.))
    assert seen == [(slice(None),)]
    assert x.sharding == SingleDeviceSharding(device) and x.committed
    np.testing.assert_array_equal(np.asarray(x), [0., 1., 2., 3.])
    mesh = jax.make_mesh((4, 2), ("x", "y"))
    y = jax.make_array_from_callback((8,), NamedSharding(mesh, P("x")),
                                     lambda index: np.ones(2, np.int32), dtype=jnp.int32)
    assert y.dtype == np.int32
    with pytest.raises(ValueError, match=r"If `dtype` is provided to "
                       r"`jax.make_array_from_callback`, it must match the dtype of the "
                       r"addressable shards. Got dtype=float32 and shard dtype=int32"):
        jax.make_array_from_callback((8,), NamedSharding(mesh, P("x")),
                                     lambda index: np.ones(2, np.int32), dtype=jnp.float32)
    with pytest.raises(ValueError, match=r"Expected shard shape \(4,\) doesn't match the "
                       r"single device array shape \(2,\). Shape of Array is float32\[4\]"):
        jax.make_array_from_callback((4,), SingleDeviceSharding(device),
                                     lambda index: np.ones(2, np.float32))


def test_make_array_from_callback_checks_block_shapes():
    mesh = jax.make_mesh((4, 2), ("x", "y"))
    with pytest.raises(ValueError, match=r"Expected shard shape \(2, 6\) doesn't match the single "
                       r"device array shape \(8, 6\). Shape of Array is float32\[8@x,6\] "
                       r"with sharding NamedSharding.*given the index"):
        jax.make_array_from_callback((8, 6), NamedSharding(mesh, P("x")),
                                     lambda index: np.zeros((8, 6), np.float32))
    # blocks of different dtypes (JAX's error; no array of a guessed dtype)
    with pytest.raises(ValueError, match="Input buffers to `Array` must have matching dtypes. "
                                         "Got int32, expected float32"):
        jax.make_array_from_callback((8, 6), NamedSharding(mesh, P("x")), lambda index: np.zeros(
            (2, 6), np.int32 if index[0].start else np.float32))
    with pytest.raises(TypeError, match=r"sharding should be an instance of `jax.sharding`. "
                                        r"Got P\('x',\) of type"):
        jax.make_array_from_callback((8, 6), P("x"), lambda index: None)


def test_make_array_from_process_local_data_on_one_process_is_the_global_array():
    mesh = jax.make_mesh((4, 2), ("x", "y"))
    whole = np.arange(32, dtype=np.int32).reshape(8, 4)
    x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("x", "y")), whole)
    assert x.shape == (8, 4) and x.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(x), whole)
    total = jax.jit(jax.shard_map(lambda b: jax.lax.psum(b.sum(), ("x", "y")), mesh=mesh,
                                  in_specs=P("x", "y"), out_specs=P()))(x)
    assert int(total) == whole.sum()
    with pytest.raises(ValueError, match=r"global_shape=\(16, 4\) and local_data.shape=\(8, 4\)"):
        jax.make_array_from_process_local_data(NamedSharding(mesh, P("x")), whole, (16, 4))
    # a pytree of data under one sharding (a prefix), a spec on the current mesh, a device
    with jax.set_mesh(mesh):
        batch = jax.make_array_from_process_local_data(
            P("x"), {"a": whole, "b": whole[:, 0]})
        assert {k: str(jax.typeof(v)) for k, v in batch.items()} == {
            "a": "int32[8@x,4]", "b": "int32[8@x]"}
        np.testing.assert_array_equal(np.asarray(batch["b"]), whole[:, 0])
    on_one = jax.make_array_from_process_local_data(jax.devices()[0], whole)
    assert on_one.sharding == SingleDeviceSharding(jax.devices()[0])


def test_process_allgather_and_broadcast_on_one_process():
    stacked = multihost_utils.process_allgather(np.arange(3.))
    assert stacked.shape == (1, 3)
    tiled = multihost_utils.process_allgather(np.arange(3.), tiled=True)
    np.testing.assert_array_equal(tiled, np.arange(3.))
    # an array on this process's devices only is its part, stacked as a host value (JAX's)
    x = jax.device_put(jnp.arange(8.), NamedSharding(jax.make_mesh((8,), ("i",)), P("i")))
    np.testing.assert_array_equal(multihost_utils.process_allgather(x), np.arange(8.)[None])
    np.testing.assert_array_equal(multihost_utils.process_allgather(x, tiled=True),
                                  np.arange(8.))
    # a scalar stays a scalar tiled, and is stacked untiled (JAX's)
    assert multihost_utils.process_allgather(np.float32(7), tiled=True).shape == ()
    assert multihost_utils.process_allgather(7, tiled=False).shape == (1,)
    assert multihost_utils.broadcast_one_to_all({"a": np.float32(2)})["a"] == 2
    multihost_utils.sync_global_devices("alone")


def test_initialize_validates_and_runs_once():
    try:
        with pytest.raises(ValueError, match="num_processes=2, but the job has 1 process"):
            jax.distributed.initialize(num_processes=2)
        with pytest.raises(ValueError, match="local_device_ids=\\[0\\], but process 0 holds"):
            jax.distributed.initialize(local_device_ids=[0])
        jax.distributed.initialize("localhost:1234", num_processes=1, process_id=0)
        assert jax.distributed.is_initialized()
        with pytest.raises(RuntimeError, match="should only be called once"):
            jax.distributed.initialize()
    finally:
        jax.distributed.shutdown()


def test_one_process_gathers_nothing():
    before = jax.distributed.gather_costs()
    mesh = jax.make_mesh((8,), ("i",))
    y = jax.jit(jax.shard_map(lambda b: b * 2, mesh=mesh, in_specs=P("i"),
                              out_specs=P("i")))(jnp.arange(16.))
    np.testing.assert_array_equal(np.asarray(y), np.arange(16.) * 2)
    assert jax.distributed.gather_costs() == before == {"gathers": 0, "bytes_sent": 0,
                                                        "bytes_received": 0}


def test_mpi_is_chosen_by_the_launch_or_by_name(monkeypatch):
    from runtime import mpi
    for name in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS",
                 "SHARDC_BACKEND"):
        monkeypatch.delenv(name, raising=False)
    assert mpi.launched_size() == 1 and not mpi.wanted()
    monkeypatch.setenv("PMI_SIZE", "4")
    assert mpi.launched_size() == 4 and mpi.wanted()
    monkeypatch.setenv("SHARDC_BACKEND", "fast")      # a named simulator backend wins
    assert not mpi.wanted()
    monkeypatch.setenv("SHARDC_BACKEND", "mpi")
    monkeypatch.setenv("PMI_SIZE", "1")
    assert mpi.wanted()


def test_host_local_and_global_arrays_on_one_process():
    mesh = jax.make_mesh((4, 2), ("x", "y"))
    tree = {"a": np.arange(16, dtype=np.float32).reshape(8, 2), "b": np.ones(3, np.int32)}
    glob = multihost_utils.host_local_array_to_global_array(tree, mesh, {"a": P("x"), "b": P()})
    assert glob["a"].sharding == NamedSharding(mesh, P("x")) and glob["a"].is_fully_addressable
    assert glob["b"].sharding == NamedSharding(mesh, P())
    back = multihost_utils.global_array_to_host_local_array(glob, mesh, {"a": P("x"), "b": P()})
    for k in tree:
        np.testing.assert_array_equal(back[k], tree[k])
        assert back[k].dtype == tree[k].dtype
    # an array this process holds whole is its own local array (JAX's: the same object)
    assert back["a"] is glob["a"] and back["b"] is glob["b"]
    # a host value is laid out on the local mesh (Auto axes), its spec as given
    host = multihost_utils.global_array_to_host_local_array(tree["a"], mesh, P("x"))
    assert isinstance(host, jax.Array) and repr(host.sharding.spec) == "P('x',)"
    assert host.sharding.mesh.axis_types == (AxisType.Auto, AxisType.Auto)
    assert host.sharding.mesh.devices.shape == (4, 2)
    np.testing.assert_array_equal(np.asarray(host), np.arange(16).reshape(8, 2))


def test_host_local_arrays_take_no_none_pspecs_and_check_divisibility():
    """pspecs of None are JAX's ValueError, both ways; a split that does not divide the
    global shape is JAX's IndivisibleError (a ValueError), as from make_array_from_callback,
    devices_indices_map and jit's in_shardings; a spec longer than the data's rank is
    JAX's ValueError."""
    mesh = jax.make_mesh((8,), ("d",))
    for convert in (multihost_utils.host_local_array_to_global_array,
                    multihost_utils.global_array_to_host_local_array):
        with pytest.raises(ValueError, match="`None` is not a valid input to the pspecs"):
            convert((np.ones(8), np.ones(8)), mesh, (P("d"), None))
    split = NamedSharding(mesh, P("d"))
    calls = [lambda: multihost_utils.host_local_array_to_global_array(np.ones(7), mesh, P("d")),
             lambda: jax.make_array_from_callback((7,), split, lambda i: np.ones(7)[i]),
             lambda: split.devices_indices_map((7,)),
             lambda: jax.jit(lambda u: u, in_shardings=split)(np.ones(7)),
             lambda: jax.make_array_from_process_local_data(split, np.ones(7))]
    for call in calls:
        with pytest.raises(IndivisibleError, match="implies that array axis 0 is partitioned "
                                                   "8 times, but the dimension size is 7"):
            call()
    with pytest.raises(ValueError, match="only valid for values of rank at least 2"):
        jax.make_array_from_process_local_data(NamedSharding(mesh, P("d", None)), np.ones(8))
    x = jax.device_put(jnp.arange(8.), split)
    with pytest.raises(ValueError, match="only valid for values of rank at least 2"):
        jax.device_put(x, NamedSharding(mesh, P("d", None)))


def test_assert_equal_on_one_process():
    assert multihost_utils.assert_equal(np.arange(3), "msg") is None
    assert multihost_utils.assert_equal({"a": 1, "b": [jnp.ones(2)]}) is None


# --- what processes agree on (runtime/mpi/agreement.py), on one process ------------------------

def test_a_value_fingerprint_sees_every_word_and_the_type():
    from runtime.mpi.agreement import value_fingerprint
    rng = np.random.default_rng(0)
    value = rng.standard_normal(3 * 4096 + 5).astype(np.float64)   # whole rows and a tail
    base = value_fingerprint(value)
    assert value_fingerprint(value.copy()) == base
    for k in (0, 4095, 4096, 2 * 4096 + 7, value.size - 1):
        changed = value.copy()
        changed[k] = np.nextafter(changed[k], np.inf)           # one bit of one word
        assert value_fingerprint(changed) != base, k
    swapped = value.copy()
    swapped[:4096], swapped[4096:8192] = value[4096:8192], value[:4096]
    assert value_fingerprint(swapped) != base                    # rows are not interchangeable
    assert value_fingerprint(value.reshape(-1, 1)) != base        # the shape counts
    assert value_fingerprint(value.view(np.int64)) != base        # so does the dtype
    assert value_fingerprint(np.float32(2.0)) == value_fingerprint(np.array(2.0, np.float32))
    assert value_fingerprint(value[::2]) == value_fingerprint(np.ascontiguousarray(value[::2]))


def test_a_coherence_error_names_what_differs_and_each_process_side():
    from runtime.mpi.agreement import coherence_error
    program = "{ lambda ; a:f32[16]. let\n    b:f32[] = psum a\n  in (b,) }"
    details = [[("program", program), ("argument 0", "f32[16], values 01")],
               [("program", program), ("argument 0", "f32[32], values 02")],
               [("program", program.replace("psum", "pmax")), ("argument 0", "f32[16], values 01")]]
    err = coherence_error([5, 6, 7], lambda labels: f"differ in {labels}", details)
    lines = str(err).splitlines()
    assert lines[0] == "processes [1, 2] and process 0 differ in ['program', 'argument 0']"
    assert lines[1] == ("  program: line 2: process 0: b:f32[] = psum a; process 1: b:f32[] = "
                        "psum a; process 2: b:f32[] = pmax a")
    assert lines[2] == ("  argument 0: process 0: f32[16], values 01; process 1: f32[32], values "
                        "02; process 2: f32[16], values 01")
    # a plain text, and sides that only one process has
    err = coherence_error([1, 2], "read different arrays", ["f32[4] at a.py:3", None])
    assert str(err).splitlines() == ["processes [1] and process 0 read different arrays",
                                     "  process 0: f32[4] at a.py:3; process 1: (none)"]


def test_host_values_check_is_on_unless_trusted(monkeypatch):
    from runtime.mpi.backend import MpiBackend
    monkeypatch.delenv("SHARDC_MPI_HOST_VALUES", raising=False)
    assert MpiBackend().check_host_values
    monkeypatch.setenv("SHARDC_MPI_HOST_VALUES", "trust")
    assert not MpiBackend().check_host_values
    monkeypatch.setenv("SHARDC_MPI_HOST_VALUES", "maybe")
    with pytest.raises(ValueError, match="SHARDC_MPI_HOST_VALUES must be 'check' or 'trust', "
                                         "got 'maybe'"):
        MpiBackend()


def test_make_array_from_single_device_arrays_takes_any_sharding_and_checks_as_jax():
    device = jax.devices()[0]
    one = jax.sharding.SingleDeviceSharding(device)
    block = jax.device_put(np.arange(16).reshape(8, 2), one)
    out = jax.make_array_from_single_device_arrays((8, 2), one, [block])
    assert out.sharding == one and out._committed
    np.testing.assert_array_equal(np.asarray(out), np.arange(16).reshape(8, 2))
    with pytest.raises(ValueError, match="must match the dtype of the addressable shards"):
        jax.make_array_from_single_device_arrays((8, 2), one, [block], dtype=jnp.float32)
    with pytest.raises(TypeError, match="`arrays` argument must be a list or tuple"):
        jax.make_array_from_single_device_arrays((8, 2), one, block)
    with pytest.raises(ValueError, match="requires a list of concrete arrays"):
        jax.jit(lambda v: jax.make_array_from_single_device_arrays(v.shape, one, [v]))(block)
    mesh = jax.make_mesh((2,), ("x",))
    with pytest.raises(ValueError, match="`dtype` must be provided"):
        jax.make_array_from_single_device_arrays((8,), NamedSharding(mesh, P("x")), [])
    split = jax.device_put(np.arange(8), NamedSharding(mesh, P("x")))
    with pytest.raises(ValueError, match=re.escape(
            "When making an array from single-device arrays the input arrays must have one "
            "shard each. An argument array had 2 shard(s).")):
        jax.make_array_from_single_device_arrays((8,), NamedSharding(mesh, P("x")),
                                                 [split, split])


def test_a_shards_data_is_committed_as_its_array():
    x = jnp.array([1, 2, 3])
    assert [s.data._committed for s in x.addressable_shards] == [False]
    y = jax.device_put(x, jax.devices()[1])
    assert [s.data._committed for s in y.addressable_shards] == [True]
    assert y.addressable_shards[0].data.sharding.device == jax.devices()[1]


def test_make_array_from_process_local_data_on_one_process_wants_the_whole_shape():
    """On one process the local data is the whole array: a global_shape other than its
    shape is JAX's ValueError, for a leaf of a pytree too."""
    mesh = jax.make_mesh((4, 2), ("r", "c"))
    sharding = NamedSharding(mesh, P("r"))
    with pytest.raises(ValueError) as info:
        jax.make_array_from_process_local_data(sharding, np.zeros((8, 3)), (16, 3))
    assert str(info.value) == (
        "When calling `make_array_from_process_local_data` on a single process, global_shape "
        "should be None or equal to local_data.shape.Got global_shape=(16, 3) and "
        "local_data.shape=(8, 3).")
    with pytest.raises(ValueError, match=r"global_shape=\(4,\) and local_data.shape=\(8,\)"):
        jax.make_array_from_process_local_data(sharding, [np.zeros(8)], [(4,)])
    out = jax.make_array_from_process_local_data(sharding, np.arange(24.).reshape(8, 3), (8, 3))
    np.testing.assert_array_equal(np.asarray(out), np.arange(24.).reshape(8, 3))
    # on one device: committed there, as JAX's (so meeting another device's array is an error)
    one = jax.make_array_from_process_local_data(SingleDeviceSharding(jax.devices()[2]),
                                                 np.ones(3))
    assert one.committed and one.devices() == {jax.devices()[2]}
    with pytest.raises(ValueError):
        one + jax.device_put(np.ones(3), jax.devices()[4])


def test_no_preemption_sync_point_is_ever_reached():
    # a training loop's checkpoint test: shardc's processes get no preemption notices
    assert [multihost_utils.reached_preemption_sync_point(step) for step in range(3)] == \
        [False] * 3
