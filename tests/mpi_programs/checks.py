"""Programs people run on one process, run unchanged: every collective on 1-, 2- and 3-D
meshes (eager and jit), control flow with collectives, grad, the seed tutorial, the training
examples and the multi-process API. Each result is saved under its name to
``OUT/rank{process_index}.npz``; tests/test_mpi.py runs this file in one process and under
``mpiexec -n 2`` and ``-n 4`` and compares the files bit for bit.

    python tests/mpi_programs/checks.py OUT [GROUP ...]
"""
import os
import sys
from functools import partial

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [ROOT, os.path.join(ROOT, "examples")]

import shardc as jax  # noqa: E402
import shardc.numpy as jnp  # noqa: E402
from shardc import lax  # noqa: E402
from shardc.experimental import multihost_utils  # noqa: E402
from shardc.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

results: dict = {}


def record(name, value):
    """Keep a result (a pytree of arrays) under ``name``: gathered, as a script would read it."""
    leaves = jax.tree_util.tree_leaves(value)
    for k, leaf in enumerate(leaves):
        leaf = np.asarray(leaf)
        if leaf.dtype.name == "bfloat16":       # npz has no bfloat16; float32 holds it exactly
            leaf = leaf.astype(np.float32)
        results[f"{name}/{k}"] = leaf


def data(shape, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape).astype(dtype)


# --- every collective, on 1-, 2- and 3-D meshes, eager and jit ----------------------------------

MESHES = {"1d": ((8,), ("a",)), "2d": ((4, 2), ("x", "y")), "3d": ((2, 2, 2), ("x", "y", "z"))}


def collective_bodies(names):
    """(name, body, in_spec, out_spec) for each collective over the mesh's axes."""
    last, every = names[-1], tuple(names)
    first = names[0]
    n_last = None

    def shift(x):
        n = lax.axis_size(last)
        return lax.ppermute(x, last, [(k, (k + 1) % n) for k in range(n)])

    def partial_perm(x):
        return lax.ppermute(x, last, [(0, 1)])

    def ragged(x):
        # member m sends (m + k) % 3 rows (at most 2) to member k, into slot m of k's output
        n, m = lax.axis_size(last), lax.axis_index(last)
        k = jnp.arange(n, dtype=jnp.int32)
        sizes = jnp.minimum((m + k) % 3, 2).astype(jnp.int32)
        recv = jnp.minimum((k + m) % 3, 2).astype(jnp.int32)
        operand = jnp.concatenate([x[:2]] * n)
        return lax.ragged_all_to_all(operand, jnp.zeros_like(operand), 2 * k, sizes,
                                     jnp.full((n,), 2 * m, jnp.int32), recv, axis_name=last)

    def mixed(x):
        # all-reduces over one chain in a row, then an exchange of another kind, then more:
        # bools counted, ints, a transposed block, bfloat16
        counts = lax.psum(x > 0, every)
        peaks = lax.pmax((x * 10).astype(jnp.int32), every)
        means = lax.pmean(jnp.sin(x).T, every).T
        gathered = lax.all_gather(x, every, tiled=True, to="invarying")
        halves = lax.psum(x.astype(jnp.bfloat16), every)
        low = lax.pmin(jnp.cos(x), every)
        return (counts + peaks + means + halves.astype(jnp.float32) + low * gathered.sum()
                + lax.psum(means * 2, every))

    return [
        ("psum_all", lambda x: lax.psum(x, every), P(every), P()),
        ("psums_mixed", mixed, P(every), P()),
        ("psum_last", lambda x: lax.psum(x, last), P(every), P(names[:-1] or None)),
        ("pmean", lambda x: lax.pmean(x, every), P(every), P()),
        ("pmax", lambda x: lax.pmax(x, first), P(every), P(names[1:] or None)),
        ("pmin", lambda x: lax.pmin(x, every), P(every), P()),
        ("all_gather", lambda x: lax.all_gather(x, last, axis=1, tiled=True),
         P(every), P(every)),
        ("all_gather_stacked", lambda x: lax.all_gather(x, every), P(every), P(every)),
        ("psum_scatter", lambda x: lax.psum_scatter(x, last, scatter_dimension=1, tiled=True),
         P(names[:-1] or None), P(names[:-1] or None, last)),
        ("ppermute", shift, P(every), P(every)),
        ("ppermute_partial", partial_perm, P(every), P(every)),
        ("ragged_all_to_all", ragged, P(every), P(every)),
        ("all_to_all", lambda x: lax.all_to_all(x, last, 1, 0, tiled=True), P(every), P(every)),
        ("axis_index", lambda x: x * lax.axis_index(every).astype(x.dtype), P(every), P(every)),
        ("int_psum", lambda x: lax.psum((x > 0).astype(jnp.int32), every), P(every), P()),
        ("pbroadcast", lambda x: lax.pbroadcast(x, every, source=1), P(every), P(every)),
        ("int_pmax", lambda x: lax.pmax((x * 10).astype(jnp.int32), last), P(every),
         P(names[:-1] or None)),
        ("bool_psum", lambda x: lax.psum(x > 0, first), P(every), P(names[1:] or None)),
        ("bool_pmean", lambda x: lax.pmean(x > 0, every), P(every), P()),
        ("bf16_psum", lambda x: lax.psum(x.astype(jnp.bfloat16), every), P(every), P()),
        ("scalar_psum", lambda x: lax.psum(x.sum(), every), P(every), P()),
        ("psum_reversed", lambda x: lax.psum(x, every[::-1]), P(every), P()),
        # a transposed block crosses processes column-major
        ("psum_transposed", lambda x: lax.psum(x.T, every), P(every), P()),
        # the first result is read only after the second all-reduce starts (deferred waits)
        ("psums_overlapped",
         lambda x: lax.psum(jnp.sin(x), every) * 3 + lax.psum(jnp.cos(x).T, every).T,
         P(every), P()),
        ("psum_of_psum", lambda x: lax.psum(x * lax.psum(x.sum(), last), every), P(every),
         P()),
        # signed zeros, infinities and NaN: a float sum is as from +0.0, however the
        # processes split the walk
        ("psum_signed_zeros", lambda x: lax.psum(jnp.where(x > 0, -0.0, x * 0), every),
         P(every), P()),
        ("pmean_specials", lambda x: lax.pmean(jnp.where(
            x > 1.5, jnp.inf, jnp.where(x < -1.5, jnp.nan, jnp.where(x > 0, -0.0, x))), last),
         P(every), P(names[:-1] or None)),
        ("psum_scatter_untiled",
         lambda x: lax.psum_scatter(x[:lax.axis_size(last)], last, scatter_dimension=0),
         P(None, every), P(every)),
        ("all_to_all_untiled",
         lambda x: lax.all_to_all(x[:lax.axis_size(last)], last, 0, 1), P(None, every),
         P(None, every)),
    ]


def check_collectives():
    for mesh_name, (shape, names) in MESHES.items():
        mesh = jax.make_mesh(shape, names)
        x = jnp.asarray(data((16, 16), seed=len(shape)))
        for name, body, in_spec, out_spec in collective_bodies(names):
            f = jax.shard_map(body, mesh=mesh, in_specs=in_spec, out_specs=out_spec)
            record(f"collective/{mesh_name}/{name}/eager", f(x))
            record(f"collective/{mesh_name}/{name}/jit", jax.jit(f)(x))


def check_large_reductions():
    """Blocks of 64 KiB and more: on three or more processes all_reduce reduces one chunk per
    process, then gathers the chunks (bitwise the whole-block reduction)."""
    for mesh_name in ("1d", "3d"):
        shape, names = MESHES[mesh_name]
        mesh = jax.make_mesh(shape, names)
        x = jnp.asarray(data((8 * 4, 4099), seed=11))        # odd sizes: uneven chunks
        for name, body in (("psum", lambda b: lax.psum(b, names)),
                           ("pmean", lambda b: lax.pmean(b, names)),
                           ("pmax", lambda b: lax.pmax(b, names)),
                           ("psum_ints", lambda b: lax.psum((b * 100).astype(jnp.int32), names)),
                           # six large all-reduces in a row, each read only at the end
                           ("psums_in_a_row", lambda b: sum(
                               lax.psum(jnp.sin(b * k), names) * k for k in range(1, 7)))):
            f = jax.shard_map(body, mesh=mesh, in_specs=P(names), out_specs=P())
            record(f"large/{mesh_name}/{name}", jax.jit(f)(x))


def check_shared_reductions():
    """All-reduces that two processes of one machine pass through shared memory (under -n 2:
    the first adds its members into a shared block, the second adds its own there): every
    dtype they take, transposed blocks, one-element blocks, calls repeated (the blocks
    reused), a mean, and a pool too full to take more (messages again)."""
    from runtime.mpi import shared
    mesh = jax.make_mesh((8,), ("a",))
    x = jnp.asarray(data((8 * 6, 40), seed=21))
    bodies = {
        "psum_f16": lambda b: lax.psum(b.astype(jnp.float16), "a"),
        "psum_i32": lambda b: lax.psum((b * 1000).astype(jnp.int32), "a"),
        "pmax_u8": lambda b: lax.pmax((jnp.abs(b) * 40).astype(jnp.uint8), "a"),
        "pmin": lambda b: lax.pmin(b, "a"),
        "pmean": lambda b: lax.pmean(jnp.exp(b), "a"),
        "psum_transposed": lambda b: lax.psum(jnp.sin(b).T, "a"),
        "psum_one_element": lambda b: lax.psum(b[:1, :1] * 3, "a"),
        "psum_of_zeros": lambda b: lax.psum(-jnp.zeros_like(b), "a"),
    }
    for name, body in bodies.items():
        f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("a"), out_specs=P()))
        for call in range(3):
            record(f"shared/{name}/{call}", f(x * (call + 1)))
    # a mesh in the other device order walks the two processes the other way: calls on the
    # two meshes alternate, each body reading its totals only at its end
    from shardc.sharding import Mesh
    backwards = Mesh(np.array(jax.devices()[::-1]), ("a",))
    both = [jax.jit(jax.shard_map(
        lambda b: sum(lax.psum(jnp.sin(b * k), "a") for k in range(1, 4)), mesh=m,
        in_specs=P("a"), out_specs=P())) for m in (mesh, backwards)]
    for call in range(4):
        record(f"shared/alternating/{call}", both[call % 2](x * (call + 1)))
    # no new shared block (a full pool; a machine without room on one process only, which
    # the processes agree on): the reduction goes as messages on every process alike
    from runtime.mpi import chain
    for name, setting, value, cols in (
            ("pool_full", "CAPACITY", 0, 400),
            ("no_room", "_room_for", lambda nbytes: jax.process_index() != 1, 2000)):
        kept = getattr(shared, setting)
        setattr(shared, setting, value)
        try:
            f = jax.jit(jax.shard_map(lambda b: lax.psum(jnp.cos(b) * 7, "a"), mesh=mesh,
                                      in_specs=P("a"), out_specs=P()))
            before = chain.runs["shared"]
            record(f"shared/{name}", f(jnp.asarray(data((8 * 6, cols), seed=22))))
            assert chain.runs["shared"] == before, f"{name}: a shared block was made"
        finally:
            setattr(shared, setting, kept)
    # a mesh of the first half of the devices: under -n 2, process 1 holds none of them, and
    # reads the replicated result as every process does
    half = Mesh(np.array(jax.devices()[:4]), ("a",))
    f = jax.jit(jax.shard_map(lambda b: lax.psum(b * 2, "a"), mesh=half, in_specs=P("a"),
                              out_specs=P()))
    record("shared/half_mesh", f(jnp.asarray(data((4 * 6, 40), seed=24))))
    record("shared/after_half_mesh", jax.jit(lambda v: v + 1)(jnp.arange(3.0)))


def check_one_device_per_process():
    """Collectives over an axis whose groups hold one device on each of their processes (the
    mesh's first axis: under -n 2 on (2, 4), under -n 4 on (4, 2)), along axis 0, in every
    dtype: MPI's own calls, straight into the result."""
    import ml_dtypes
    for shape in ((2, 4), (4, 2)):
        mesh = jax.make_mesh(shape, ("x", "y"))
        n = shape[0]
        shift = [(k, (k + 1) % n) for k in range(n)]
        bodies = [
            ("psum", lambda b: lax.psum(b, "x"), P(None, "x", "y"), P(None, None, "y")),
            ("pmean", lambda b: lax.pmean(b, "x"), P(None, "x", "y"), P(None, None, "y")),
            ("pmax", lambda b: lax.pmax(b, "x"), P(None, "x", "y"), P(None, None, "y")),
            ("pmin", lambda b: lax.pmin(b, "x"), P(None, "x", "y"), P(None, None, "y")),
            ("all_gather", lambda b: lax.all_gather(b, "x", tiled=True, to="invarying"),
             P("x", "y"), P(None, "y")),
            ("all_gather_stacked", lambda b: lax.all_gather(b, "x", to="invarying"),
             P("x", "y"), P(None, None, "y")),
            ("all_to_all", lambda b: lax.all_to_all(b, "x", 0, 0, tiled=True),
             P("x", "y"), P("x", "y")),
            ("all_to_all_untiled", lambda b: lax.all_to_all(b[:n], "x", 0, 0),
             P("x", "y"), P("x", "y")),
            ("psum_scatter", lambda b: lax.psum_scatter(b, "x", tiled=True),
             P(None, "y"), P("x", "y")),
            ("psum_scatter_untiled", lambda b: lax.psum_scatter(b[:n], "x"),
             P(None, "y"), P("x", "y")),
            ("ppermute", lambda b: lax.ppermute(b, "x", shift), P("x", "y"), P("x", "y")),
            ("ppermute_partial", lambda b: lax.ppermute(b, "x", [(0, 1)]),
             P("x", "y"), P("x", "y")),
            ("ppermute_self", lambda b: lax.ppermute(b, "x", [(0, 0), (1, 1)] + [
                (k, k) for k in range(2, n)]), P("x", "y"), P("x", "y")),
            # a collective's operand read again by an elementwise operation: no result that
            # may still view it (a message in flight, a permutation to itself) is overwritten
            ("psum_then_reuse",
             lambda b: (lambda y: lax.psum(y, "x") + 3 * lax.psum(y * y, "x"))(jnp.sin(b)),
             P(None, "x", "y"), P(None, None, "y")),
            ("ppermute_self_then_reuse",
             lambda b: (lambda y: lax.ppermute(y, "x", [(k, k) for k in range(n)]) + y * 2)(
                 jnp.sin(b)), P("x", "y"), P("x", "y")),
        ]
        for dtype in (np.float32, ml_dtypes.bfloat16, np.float16, np.int32, np.bool_):
            x = jnp.asarray((data((8 * n, 8, 4), seed=13) * 4).astype(dtype))
            for name, body, in_spec, out_spec in bodies:
                if dtype == np.bool_ and name in ("pmean", "psum_scatter",
                                                  "psum_scatter_untiled"):
                    continue
                f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=in_spec,
                                          out_specs=out_spec))
                f(x)             # the first run interprets the body; later ones compile it
                record(f"direct/{shape}/{np.dtype(dtype).name}/{name}", f(x))
        # per-device literals (axis_index) and 0-d blocks as operands of the direct calls
        f = jax.jit(jax.shard_map(
            lambda b: jnp.stack([lax.psum(b.sum(), "x"), lax.psum(lax.axis_index("x"), "x"),
                                 lax.psum_scatter(b[:n, 0, 0], "x"), b.sum()])[None],
            mesh=mesh, in_specs=P("x"), out_specs=P("x")))
        record(f"direct/{shape}/zero_d", f(jnp.asarray(data((8 * n, 8, 4), seed=15))))
        # an input laid out otherwise than in_specs, resharded (the partitioner gathers, then
        # slices) before the shard_map reads it
        placed = jax.device_put(data((16, 8), seed=14), NamedSharding(mesh, P("y", "x")))
        g = jax.shard_map(lambda b: lax.psum(b * 2 + 1, "x"), mesh=mesh, in_specs=P("x", "y"),
                          out_specs=P(None, "y"))
        f = jax.jit(lambda a: g(jax.sharding.reshard(a, NamedSharding(mesh, P("x", "y")))))
        record(f"direct/{shape}/resharded", f(placed))


def check_uneven_groups():
    """A mesh in another device order: a group's members are spread unevenly over the
    processes (three on one, one on another), large blocks and small, straight and in a
    loop."""
    from shardc.sharding import Mesh
    order = [0, 1, 2, 4, 3, 5, 6, 7]
    mesh = Mesh(np.array(jax.devices())[order].reshape(4, 2), ("x", "y"))
    for name, cols in (("large", 4099), ("small", 3)):
        x = jnp.asarray(data((4 * 8, 2 * cols), seed=16))
        straight = jax.jit(jax.shard_map(lambda b: lax.psum(b, "x"), mesh=mesh,
                                         in_specs=P("x", "y"), out_specs=P(None, "y")))
        looped = jax.jit(jax.shard_map(
            lambda b: lax.fori_loop(0, 2, lambda k, c: lax.psum(c, "x") * 0.5 + 0 * b, b),
            mesh=mesh, in_specs=P("x", "y"), out_specs=P("x", "y")))
        gathered = jax.jit(jax.shard_map(lambda b: lax.all_gather(b, "x", tiled=True),
                                         mesh=mesh, in_specs=P("x", "y"), out_specs=P("x", "y")))
        for kind, f in (("psum", straight), ("loop", looped), ("all_gather", gathered)):
            record(f"uneven/{name}/{kind}", f(x))
    # a mesh of 7 of the 8 devices: the processes hold different numbers of its devices
    # (4 and 3 under -n 2), and collectives in loops meet in rounds
    seven = Mesh(np.array(jax.devices()[:7]), ("i",))

    def rounds(a, b):
        c, _ = lax.scan(lambda c, _: (c + lax.psum(c * 0.5, "i"), None), a, None, length=3)
        return c, lax.fori_loop(0, 3, lambda k, v: lax.pmax(v + k, "i"), b)

    f = jax.jit(jax.shard_map(rounds, mesh=seven, in_specs=(P("i"), P("i")),
                              out_specs=P("i"), check_vma=False))
    record("uneven/seven_devices/rounds", f(jnp.asarray(data((7 * 3, 5), seed=17)),
                                            jnp.asarray(data((14,), seed=18))))


# --- control flow with collectives, grad ------------------------------------------------------

def check_control_flow():
    mesh = jax.make_mesh((4, 2), ("x", "y"))
    x = jnp.asarray(data((8, 4), seed=3))

    @partial(jax.shard_map, mesh=mesh, in_specs=P("x", "y"), out_specs=P("x", "y"))
    def ring(block):
        def step(k, carry):
            return lax.ppermute(carry, "x", [(i, (i + 1) % 4) for i in range(4)]) * 0.5 + k
        return lax.fori_loop(0, 3, step, block)

    @partial(jax.shard_map, mesh=mesh, in_specs=P("x", "y"), out_specs=P(None, "y"))
    def branches(block):
        total = lax.psum(block.sum(), ("x", "y"))
        return lax.cond(total > 0, lambda b: lax.psum(b, "x"), lambda b: lax.pmax(b, "x") * 2.,
                        block)

    @partial(jax.shard_map, mesh=mesh, in_specs=P("x", "y"), out_specs=P("x", "y"))
    def scanned(block):
        def step(carry, row):
            mixed = lax.psum(row, "y") + carry
            return mixed, lax.pmean(mixed, "x")
        carry, ys = lax.scan(step, lax.pvary(jnp.zeros(block.shape[1:], block.dtype), "x"), block)
        return ys + carry

    @partial(jax.shard_map, mesh=mesh, in_specs=P("x", "y"), out_specs=P())
    def until(block):
        def cond(state):
            k, _ = state
            return k < 4
        def body(state):
            k, acc = state
            return k + 1, lax.psum(acc, ("x", "y")) * 0.125
        return lax.while_loop(cond, body, (0, lax.psum(block.sum(), ("x", "y"))))[1]

    @partial(jax.shard_map, mesh=mesh, in_specs=P("x", "y"), out_specs=P("x", None))
    def paired_later(block):
        # the predicate varies over 'y': devices with y=0 first complete a psum over 'x' that
        # the others never join, then all meet in the psum over 'y'
        taken = lax.cond(lax.axis_index("y") == 0, lambda b: lax.pvary(lax.psum(b, "x"), "x"),
                         lambda b: b * 2., block)
        return lax.psum(taken, "y")

    for name, f in (("ring", ring), ("branches", branches), ("scanned", scanned),
                    ("until", until), ("paired_later", paired_later)):
        record(f"control/{name}/eager", f(x))
        record(f"control/{name}/jit", jax.jit(f)(x))
        record(f"control/{name}/neg", jax.jit(f)(-x))

    # shard_maps inside host loops and branches: each step runs the shard_map on the mesh
    steps = jnp.stack([x, -x, x * 2])
    host_loops = {
        "map": lambda s: lax.map(branches, s),
        "scan": lambda s: lax.scan(lambda c, b: (c + until(b), ring(b)), 0., s),
        "fori": lambda s: lax.fori_loop(0, 3, lambda i, c: c + scanned(s[i]),
                                        scanned(s[0]) * 0.),
        "cond": lambda s: lax.cond(s[0, 0, 0] > 0, lambda: branches(s[1]),
                                   lambda: branches(s[2])),
    }
    for name, f in host_loops.items():
        record(f"host_loop/{name}/eager", f(steps))
        record(f"host_loop/{name}/jit", jax.jit(f)(steps))


def check_grad():
    mesh = jax.make_mesh((4, 2), ("x", "y"))
    w = jnp.asarray(data((4, 6), seed=5))
    xs = jnp.asarray(data((8, 4), seed=6))

    @partial(jax.shard_map, mesh=mesh, in_specs=(P(), P(("x", "y"))), out_specs=P())
    def loss(w, xs):
        h = jnp.tanh(xs @ w)
        return lax.pmean((h ** 2).sum(), ("x", "y"))

    record("grad/eager", jax.grad(loss)(w, xs))
    record("grad/jit", jax.jit(jax.grad(loss, argnums=(0, 1)))(w, xs))
    record("grad/value", jax.value_and_grad(loss)(w, xs))


# --- the seed tutorial and the training examples -------------------------------------------------

def check_tutorial():
    import seed_tutorial as t
    a = jnp.arange(8 * 16.).reshape(8, 16)
    b = jnp.arange(16 * 4.).reshape(16, 4)
    record("tutorial/matmul_basic", t.matmul_basic(a, b))
    record("tutorial/matmul_basic_jit", jax.jit(t.matmul_basic)(a, b))
    record("tutorial/matmul_reference", t.matmul_reference(a, b))
    x = jnp.arange(4 * 4.).reshape(4, 4)
    for name in ("f1", "f2", "f3", "f4", "f5"):
        f = getattr(t, name)
        record(f"tutorial/{name}", f(jnp.arange(8 * 2.).reshape(8, 2) if name == "f1" else x))
    record("tutorial/psum_f1", t.psum_f1(jnp.arange(16.)))
    y = jnp.arange(8 * 4.).reshape(8, 4)
    record("tutorial/psum_f2", t.psum_f2(y))
    record("tutorial/psum_f3", t.psum_f3(y))


def check_training():
    from train_mlp import model
    from train_data_parallel import train_data_parallel
    from train_fsdp import train_fsdp
    from train_tensor_parallel import train_tensor_parallel
    from train_collective_matmul import train_collective_matmul
    params, batch = model()
    for name, train in (("data_parallel", train_data_parallel), ("fsdp", train_fsdp),
                        ("tensor_parallel", train_tensor_parallel),
                        ("collective_matmul", train_collective_matmul)):
        for shape in ((8,), (4, 2)):
            trained, losses = train(shape, params, batch, steps=2)
            record(f"train/{name}/{shape}", (trained, np.asarray(losses, np.float64)))
    from train_fsdp_tp import train_fsdp_tp         # remat keeping all_gather's result
    trained, losses = train_fsdp_tp((4, 2), params, batch, steps=2)
    record("train/fsdp_tp/(4, 2)", (trained, np.asarray(losses, np.float64)))


def check_explicit():
    """The explicit-mode MLP (examples/train_explicit.py): the jitted step is one program of
    per-device blocks, so the training loop gathers nothing on any process."""
    from train_mlp import model
    from train_explicit import loss, place, train_step
    params, batch = model()
    for shape in ((2, 4), (4, 2)):
        with jax.set_mesh(jax.make_mesh(shape, ("x", "y"))):
            placed, data_ = place(params, batch)
            before = jax.distributed.gather_costs()
            for _ in range(3):
                placed = train_step(placed, data_)
            assert jax.distributed.gather_costs() == before, jax.distributed.gather_costs()
            types = [str(jax.typeof(v)) for v in jax.tree_util.tree_leaves(placed)]
            assert types[:2] == ["float32[784,128@y]", "float32[128@y]"], types
            record(f"explicit/{shape}", (placed, jax.jit(loss)(placed, data_)))
            # the same steps in one program: a loop on blocks, still nothing gathered
            looped = jax.jit(lambda p, b: lax.fori_loop(0, 3, lambda i, q: train_step(q, b), p))
            start, _ = place(params, batch)
            before = jax.distributed.gather_costs()
            trained = looped(start, data_)
            assert jax.distributed.gather_costs() == before, jax.distributed.gather_costs()
            record(f"explicit/{shape}/loop", trained)
            # the row: an update under jit, in a loop, after a shard_map
            mesh = jax.sharding.get_mesh()
            w = jax.device_put(data((8, 4), seed=21), P("x", None))
            centre = jax.shard_map(lambda b: b - lax.pmean(b, "x"), mesh=mesh,
                                   in_specs=P("x", None), out_specs=P("x", None))
            update = jax.jit(lambda w: w * 2)
            before = jax.distributed.gather_costs()
            for _ in range(3):
                w = update(centre(w) * 0.25)
            assert jax.distributed.gather_costs() == before, jax.distributed.gather_costs()
            assert w.sharding.spec == P("x", None) and str(jax.typeof(w)) == "float32[8@x,4]"
            record(f"explicit/{shape}/update", w)
    # the same row on Auto axes (Mesh(...), the tutorial's way): the jitted update runs on the
    # blocks its argument's layout gives (propagation), nothing gathered
    from shardc.sharding import Mesh
    mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"))
    w = jax.device_put(data((8, 4), seed=22), NamedSharding(mesh, P("x", None)))
    centre = jax.shard_map(lambda b: b - lax.pmean(b, "x"), mesh=mesh, in_specs=P("x", None),
                           out_specs=P("x", None))
    update = jax.jit(lambda w: w * 2 * 0.25 + w.sum(0))
    before = jax.distributed.gather_costs()
    for _ in range(3):
        w = update(centre(w))
    assert jax.distributed.gather_costs() == before, jax.distributed.gather_costs()
    assert w.sharding == NamedSharding(mesh, P("x", None)), w.sharding
    record("auto/update", w)
    # data parallelism: the replicated parameters' update reads replicated gradients, which
    # every process holds whole: nothing is sent across the steps
    import train_data_parallel
    names, axes = train_data_parallel.MESHES[(4, 2)]
    mesh = jax.make_mesh((4, 2), names)
    _, step = train_data_parallel.make_train_step(mesh, axes)
    placed, data_ = train_data_parallel.place(mesh, axes, params, batch)
    before = jax.distributed.gather_costs()
    for _ in range(2):
        placed = step(placed, data_)
    assert jax.distributed.gather_costs() == before, jax.distributed.gather_costs()
    record("auto/data_parallel", placed)
    # the same training on Auto axes (Mesh(...), the tutorial's way): the shard_map step, and
    # the plain-jnp step that propagation partitions (the batch split, each gradient summed
    # over it); neither gathers anything across the steps
    import train_mlp
    auto = Mesh(np.array(jax.devices()).reshape(4, 2), names)
    _, step = train_data_parallel.make_train_step(auto, axes)
    for name, step in (("auto/data_parallel_mesh", step),
                       ("auto/data_parallel_jnp", train_mlp.single_device_step)):
        placed, data_ = train_data_parallel.place(auto, axes, params, batch)
        before = jax.distributed.gather_costs()
        for _ in range(2):
            placed = step(placed, data_)
        assert jax.distributed.gather_costs() == before, jax.distributed.gather_costs()
        record(name, placed)
    # an intermediate constrained to uneven blocks (10 rows over 4 devices): padded blocks,
    # masked where reduced or contracted, cut where gathered
    x = jax.device_put(data((8, 6), seed=23), NamedSharding(auto, P()))

    def uneven(a):
        b = lax.with_sharding_constraint(jnp.concatenate([a, a[:2]]) * 2,
                                         NamedSharding(auto, P("x", "y")))
        return b.sum(0), b.max(1), jnp.exp(b) @ b.T, b.T @ jnp.sin(b)

    for k, result in enumerate(jax.jit(uneven)(x)):
        record(f"auto/uneven/{k}", result)


# --- the multi-process API ---------------------------------------------------------------------

def check_multihost():
    mesh = jax.make_mesh((4, 2), ("x", "y"))
    whole = data((8, 6), seed=9)
    sharding = NamedSharding(mesh, P("x"))
    from_callback = jax.make_array_from_callback(whole.shape, sharding, lambda i: whole[i])
    record("multihost/callback", from_callback)
    record("multihost/callback_sum", jnp.sum(from_callback, axis=0))
    # each process passes the rows of its own devices' blocks
    rows = sorted({s.index[0].start for s in from_callback.addressable_shards})
    local = np.concatenate([whole[r:r + 2] for r in rows])
    made = jax.make_array_from_process_local_data(sharding, local)
    record("multihost/process_local", made)
    record("multihost/process_local_sum", jax.jit(lambda v: (v * 2).sum(axis=1))(made))
    # its global value, tiled: where it spans processes, and on one process (JAX's); one
    # spanning processes is JAX's ValueError untiled
    gathered = multihost_utils.process_allgather(made, tiled=True)
    assert gathered.shape == made.shape, gathered.shape
    record("multihost/allgather_global", gathered)
    if jax.process_count() > 1:
        try:
            multihost_utils.process_allgather(made)
            raise AssertionError("process_allgather of a global array, untiled, ran")
        except ValueError as err:
            assert "only supports tiled=True" in str(err), err
    counts = multihost_utils.process_allgather(np.int32(len(from_callback.addressable_shards)))
    assert counts.sum() == mesh.size, counts
    assert len(jax.local_devices()) * jax.process_count() == len(jax.devices())
    assert all(d.process_index == jax.process_index() for d in jax.local_devices())
    assert all(s.device in jax.local_devices() for s in made.addressable_shards)
    multihost_utils.sync_global_devices("checks")


def check_every_device_alone():
    """Collectives over a 1-D mesh of every device: under ``mpiexec -n N`` with N devices each
    process holds one, and its node goes straight to MPI's own call (small all-reduces
    gathered in one Allgather, large ones walked through the processes)."""
    import ml_dtypes
    mesh = jax.make_mesh((jax.device_count(),), ("i",))
    n = jax.device_count()
    shift = [(k, (k + 1) % n) for k in range(n)]
    bodies = [
        ("psum", lambda b: lax.psum(b, "i"), P()),
        ("pmean", lambda b: lax.pmean(b, "i"), P()),
        ("pmax", lambda b: lax.pmax(b, "i"), P()),
        ("all_gather", lambda b: lax.all_gather(b, "i", tiled=True, to="invarying"), P()),
        ("all_gather_stacked", lambda b: lax.all_gather(b, "i", to="invarying"), P()),
        ("psum_scatter", lambda b: lax.psum_scatter(b, "i", tiled=True), P("i")),
        ("all_to_all", lambda b: lax.all_to_all(b, "i", 0, 0, tiled=True), P("i")),
        ("ppermute", lambda b: lax.ppermute(b, "i", shift), P("i")),
        ("ppermute_partial", lambda b: lax.ppermute(b, "i", [(0, n - 1)]), P("i")),
        ("ppermute_self", lambda b: lax.ppermute(b, "i", [(k, k) for k in range(n)]), P("i")),
        ("ppermute_then_psum", lambda b: lax.psum(lax.ppermute(b, "i", shift) * b, "i"), P()),
    ]
    # 8 x 4 rows a device: small; 8 x 4096: over the size that walks the processes
    for rows, cols in ((8, 4), (8, 4096)):
        for dtype in (np.float32, ml_dtypes.bfloat16, np.int32, np.complex64, np.bool_):
            x = jnp.asarray((data((n * rows, cols), seed=16) * 4).astype(dtype))
            for name, body, out_spec in bodies:
                if (dtype in (np.int32, np.bool_) and name == "pmean"
                        or dtype in (np.complex64, np.bool_) and name == "pmax"
                        or dtype == np.bool_ and name in ("psum_scatter", "ppermute_then_psum")):
                    continue
                f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("i"),
                                          out_specs=out_spec))
                f(x)
                record(f"alone/{rows}x{cols}/{np.dtype(dtype).name}/{name}", f(x))


GROUPS = {"collectives": check_collectives, "large": check_large_reductions,
          "shared": check_shared_reductions,
          "direct": check_one_device_per_process, "alone": check_every_device_alone,
          "uneven": check_uneven_groups,
          "control": check_control_flow,
          "grad": check_grad, "tutorial": check_tutorial, "training": check_training,
          "explicit": check_explicit, "multihost": check_multihost}


def main(out_dir, groups):
    for name in groups or GROUPS:
        GROUPS[name]()
    os.makedirs(out_dir, exist_ok=True)
    np.savez(os.path.join(out_dir, f"rank{jax.process_index()}.npz"), **results)
    print(f"process {jax.process_index()} of {jax.process_count()}: {len(results)} results")
    if jax.process_count() > 1:
        from runtime.mpi import chain, stacked
        print(f"process {jax.process_index()} ran shard_maps {stacked.paths}")
        print(f"process {jax.process_index()} chained {chain.runs['all_reduce']} all-reduces, "
              f"{chain.runs['shared']} through shared memory")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
