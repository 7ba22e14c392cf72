"""The multi-process API under ``mpiexec -n 2`` (8 devices): each check asserts against numpy;
the script exits non-zero on the first failure. tests/test_mpi.py launches it.

    mpiexec -n 2 python tests/mpi_programs/api.py
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

import shardc as jax  # noqa: E402
import shardc.numpy as jnp  # noqa: E402
from shardc import lax  # noqa: E402
from shardc.experimental import multihost_utils  # noqa: E402
from shardc.sharding import PartitionSpec as P  # noqa: E402


def raises(kind, text, f, *args, **kwargs):
    try:
        f(*args, **kwargs)
    except kind as err:
        assert text in str(err), (text, str(err))
        return
    raise AssertionError(f"{f.__name__} did not raise {kind.__name__}")


me, count = jax.process_index(), jax.process_count()
assert count == 2 and jax.device_count() == 8 and jax.local_device_count() == 4
assert [d.id for d in jax.local_devices()] == list(range(4 * me, 4 * me + 4))

# distributed.initialize validates the launch
raises(ValueError, "num_processes=3, but the job has 2", jax.distributed.initialize,
       num_processes=3)
raises(ValueError, f"process_id={1 - me}, but this is process {me}",
       jax.distributed.initialize, process_id=1 - me)
jax.distributed.initialize(num_processes=2, process_id=me,
                           local_device_ids=[d.id for d in jax.local_devices()])
assert jax.distributed.is_initialized()
raises(RuntimeError, "only be called once", jax.distributed.initialize)

# host values gathered across processes
stacked = multihost_utils.process_allgather(np.full((2,), me, np.int32))
assert stacked.shape == (2, 2) and stacked.tolist() == [[0, 0], [1, 1]], stacked
tiled = multihost_utils.process_allgather({"a": np.arange(3.) + 10 * me}, tiled=True)
assert tiled["a"].tolist() == [0., 1., 2., 10., 11., 12.], tiled
assert multihost_utils.broadcast_one_to_all(np.float32(me + 5)) == 5.0

# values made without a device are on this process's first device, and computations on them
# are this process's own, as JAX's: no other process takes part, and values may differ
mine = jnp.ones(3) * (me + 1)
assert mine.devices() == {jax.local_devices()[0]} and mine.is_fully_addressable
twice = jax.jit(lambda v: v * 2)(mine)
assert twice.devices() == {jax.local_devices()[0]}
assert np.asarray(twice).tolist() == [2. * (me + 1)] * 3, twice
own = jax.jit(lambda v: jnp.cumsum(v) + me)(np.arange(4.) * (me + 1))
assert np.asarray(own).tolist() == (np.cumsum(np.arange(4.) * (me + 1)) + me).tolist(), own
every = multihost_utils.process_allgather(twice)
assert every.tolist() == [[2., 2., 2.], [4., 4., 4.]], every
if me == 1:       # a computation one process does alone needs no partner
    assert float(jax.jit(jnp.sum)(jnp.arange(5.))) == 10.0

# a global array's shards are this process's; reading it gathers it on every process
mesh = jax.make_mesh((4, 2), ("x", "y"))
x = jnp.arange(64.).reshape(8, 8)
f = jax.jit(jax.shard_map(lambda b: lax.psum(b, "y") * 2, mesh=mesh, in_specs=P("x", "y"),
                          out_specs=P("x")))
y = f(x)
expected = 2 * np.asarray(x).reshape(8, 2, 4).sum(axis=1)
assert y.shape == (8, 4)
shards = y.addressable_shards
assert len(shards) == 4 and {s.device.process_index for s in shards} == {me}
for s in shards:
    np.testing.assert_array_equal(s.data, expected[s.index])
before = jax.distributed.gather_costs()
np.testing.assert_array_equal(np.asarray(y), expected)
after = jax.distributed.gather_costs()
# y is f32[8,4] split by 'x' over devices 0-7 by pairs: each process holds half of its rows
assert after["gathers"] == before["gathers"] + 1, (before, after)
assert after["bytes_received"] - before["bytes_received"] == 64, (before, after)
assert after["bytes_sent"] - before["bytes_sent"] == 64, (before, after)
np.testing.assert_array_equal(np.asarray(y), expected)
assert jax.distributed.gather_costs() == after       # gathered once, kept
# y's type splits its rows over x: a slice of whole blocks keeps the split (JAX's rule)
np.testing.assert_array_equal(np.asarray(jax.jit(lambda v: v[4:8] + 1)(y)), expected[4:8] + 1)

# visualize_array_sharding draws every device's block, not only this process's
import contextlib, io  # noqa: E401,E402
drawn = io.StringIO()
with contextlib.redirect_stdout(drawn):
    jax.debug.visualize_array_sharding(y, use_color=False)
assert all(f"CPU {a},{b}" in drawn.getvalue() for a, b in ((0, 1), (6, 7))), drawn.getvalue()

# check_vma='runtime' compares blocks held by different processes
bad = jax.jit(jax.shard_map(lambda b: b * lax.axis_index("x"), mesh=mesh, in_specs=P(),
                            out_specs=P(), check_vma="runtime"))
raises(jax.ReplicationError, "hold different blocks", bad, jnp.ones(3))
eager_bad = jax.shard_map(lambda b: b * lax.axis_index("x"), mesh=mesh, in_specs=P(),
                          out_specs=P(), check_vma="runtime")
raises(jax.ReplicationError, "device 0 (mesh coordinates (0, 0)) and device 2", eager_bad,
       jnp.ones(3))
good = jax.shard_map(lambda b: lax.psum(b, "x"), mesh=mesh, in_specs=P("x"), out_specs=P(),
                     check_vma="runtime")
np.testing.assert_array_equal(np.asarray(good(jnp.arange(8.))), np.arange(8.).reshape(4, 2).sum(0))

# large blocks (one per process in each group) take the exchange without a copy
wide = jax.make_mesh((2, 4), ("x", "y"))
big = np.random.default_rng(1).standard_normal((2, 4 * 2 ** 15)).astype(np.float32)
summed = jax.jit(jax.shard_map(lambda b: lax.psum(b, "x"), mesh=wide, in_specs=P("x", "y"),
                               out_specs=P(None, "y")))(jnp.asarray(big))
np.testing.assert_array_equal(np.asarray(summed), big[:1] + big[1:])
gathered = jax.jit(jax.shard_map(lambda b: lax.all_gather(b, "x", tiled=True, to="invarying"),
                                 mesh=wide, in_specs=P("x", "y"),
                                 out_specs=P(None, "y")))(jnp.asarray(big))
np.testing.assert_array_equal(np.asarray(gathered), big)
stacked = jax.jit(jax.shard_map(lambda b: lax.all_gather(b, "x", to="invarying"), mesh=wide,
                                in_specs=P("x", "y"), out_specs=P(None, None, "y")))(big)
np.testing.assert_array_equal(np.asarray(stacked), big.reshape(2, 1, -1))
shifted = jax.jit(jax.shard_map(lambda b: lax.ppermute(b, "x", [(0, 1)]), mesh=wide,
                                in_specs=P("x", "y"), out_specs=P("x", "y")))(big)
np.testing.assert_array_equal(np.asarray(shifted), np.stack([np.zeros_like(big[0]), big[0]]))

# native reductions: MPI's own Allreduce, close to (not necessarily bitwise) the exact one
exact = jax.jit(jax.shard_map(lambda b: lax.psum(b, ("x", "y")), mesh=mesh,
                              in_specs=P(("x", "y")), out_specs=P()))
values = jnp.asarray(np.random.default_rng(0).standard_normal((16, 5)).astype(np.float32))
want = np.asarray(exact(values))
os.environ["SHARDC_MPI_REDUCTIONS"] = "native"
jax.set_backend_name("mpi")
got = np.asarray(exact(values))
np.testing.assert_allclose(got, np.asarray(values).reshape(8, 2, 5).sum(0), rtol=1e-5, atol=1e-5)
np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
# one member on each process: MPI reduces the blocks as they are; a sum of -0.0s is +0.0
across = jax.make_mesh((2, 4), ("p", "q"))
zeros = np.zeros((2, 4, 3), np.float32)
zeros[:, 0] = -0.0
zeros[0, 1, 0], zeros[1, 1, 0] = 1.5, -0.0
for reduce, scale in ((lax.psum, 1.0), (lax.pmean, 0.5)):
    summed = np.asarray(jax.jit(jax.shard_map(lambda b: reduce(b, "p"), mesh=across,
                                              in_specs=P("p", "q"), out_specs=P(None, "q")))(
        jnp.asarray(zeros.reshape(2, 12))))
    expected = (zeros.sum(0) * scale).reshape(1, 12)
    np.testing.assert_array_equal(summed, expected)
    assert not np.signbit(summed).any(), summed
ints = np.arange(24, dtype=np.int32).reshape(2, 12) - 5
for reduce, expected in ((lax.pmax, ints.max(0)), (lax.pmin, ints.min(0)),
                         (lax.psum, ints.sum(0, dtype=np.int32)),
                         (lax.pmean, ints.mean(0, dtype=np.float32))):
    got = np.asarray(jax.jit(jax.shard_map(lambda b: reduce(b, "p"), mesh=across,
                                           in_specs=P("p", "q"), out_specs=P(None, "q")))(
        jnp.asarray(ints)))
    np.testing.assert_array_equal(got, expected.reshape(1, 12))
    assert got.dtype == expected.dtype, (reduce, got.dtype)
means = jax.jit(jax.shard_map(lambda b: lax.pmean(b, "x"), mesh=mesh, in_specs=P("x"),
                              out_specs=P()))(values)
np.testing.assert_allclose(np.asarray(means), np.asarray(values).reshape(4, 4, 5).mean(0),
                           rtol=1e-5, atol=1e-6)

# per-process parts and global arrays, both ways; reading the local part gathers nothing
rows = np.arange(8 * 3, dtype=np.float32).reshape(8, 3)
local = rows[4 * me:4 * me + 4]
glob = multihost_utils.host_local_array_to_global_array({"r": local}, mesh, P("x"))
assert glob["r"].shape == (8, 3) and not glob["r"].is_fully_addressable
np.testing.assert_array_equal(np.asarray(glob["r"]), rows)
before = jax.distributed.gather_costs()
back = multihost_utils.global_array_to_host_local_array(glob, mesh, P("x"))
np.testing.assert_array_equal(back["r"], local)
doubled = jax.jit(jax.shard_map(lambda b: b * 2, mesh=mesh, in_specs=P("x"),
                                out_specs=P("x")))(glob["r"])
np.testing.assert_array_equal(
    multihost_utils.global_array_to_host_local_array(doubled, mesh, P("x")), local * 2)
assert jax.distributed.gather_costs() == before

multihost_utils.sync_global_devices("api done")
print(f"process {me}: api ok")
