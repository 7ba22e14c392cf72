"""A fault on one process, or on all: tests/test_mpi.py checks that the whole job ends, promptly,
with a non-zero exit and a message naming the process (and the device where there is one).

    mpiexec -n 2 python tests/mpi_programs/faults.py MODE
"""
import os
import signal
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

import shardc as jax  # noqa: E402
import shardc.numpy as jnp  # noqa: E402
from shardc import lax  # noqa: E402
from shardc.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

mesh = jax.make_mesh((8,), ("i",))
x = jnp.arange(16.)


def total(block):
    return lax.psum(block.sum(), "i")


def raise_in_body(block):
    if jax.process_index() == 1:
        raise RuntimeError("a Python error in the body, on process 1 only")
    return total(block)


def shape_error(block):
    return block @ jnp.ones((3, 3))       # f32[2] @ f32[3,3]: a shape error on every process


def kill(block):
    if jax.process_index() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return total(block)


def exit_early(block):
    if jax.process_index() == 1:
        sys.exit(3)          # leaves while process 0 waits for it in the psum
    return total(block)


def device_error(block):
    # the format fails when the program runs: on the devices of every process
    jax.debug.print("{x:d}", x=block.sum())
    return total(block)


def divergent():
    """Process 1 runs another program than process 0: the check before running stops both."""
    body = total if jax.process_index() == 0 else (lambda b: lax.pmax(b.sum(), "i"))
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P()))(x)


def divergent_sizes():
    """Process 1's program exchanges blocks of another size, in another kind of exchange: the
    agreement is found broken before any block is read."""
    if jax.process_index() == 0:
        body = lambda b: lax.psum(b, "i")
    else:
        body = lambda b: lax.all_to_all(jnp.tile(b, 64), "i", 0, 0, tiled=True)
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i")))(x)


def divergent_loop():
    """Process 0 runs a collective in a loop (exchanges with their own headers), process 1 a
    straight-line program (its agreement overlapping its first exchange)."""
    if jax.process_index() == 0:
        def body(b):
            return lax.fori_loop(0, 2, lambda k, c: lax.psum(c, "i") / 8 + 0 * c, b)
    else:
        body = lambda b: lax.psum(b, "i") / 8 + 0 * b
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i")))(x)


def divergent_gather():
    """Process 0 reads a global array (a gather) while process 1 runs a program."""
    y = jax.jit(jax.shard_map(lambda b: b * 2, mesh=mesh, in_specs=P("i"), out_specs=P("i")))(x)
    if jax.process_index() == 0:
        return print(y)
    return jax.jit(jax.shard_map(total, mesh=mesh, in_specs=P("i"), out_specs=P()))(y)


def impl_error():
    """An equation's implementation fails on process 1's devices while the program runs (a
    straight-line program: its devices stacked, not the interpreter, run it)."""
    from ir import primitives as prims
    from runtime import vectorized_rules
    if jax.process_index() == 1:
        def failing(*args, **params):
            raise ValueError("an implementation failing on process 1")
        vectorized_rules.stacked_rules[prims.sin_p] = lambda types: vectorized_rules.Kernel(
            failing, [types.in_leads[0]])
    f = jax.shard_map(lambda b: total(jnp.sin(b)), mesh=mesh, in_specs=P("i"), out_specs=P())
    return jax.jit(f)(x)


def divergent_caught():
    """The mismatch is caught: the exchange posted with the agreement may be in flight still,
    so nothing more may cross processes (the next operation raises at once)."""
    from runtime.mpi import CoherenceError
    try:
        divergent()
    except CoherenceError:
        print(f"process {jax.process_index()} caught the CoherenceError", flush=True)
    return jax.jit(jax.shard_map(total, mesh=mesh, in_specs=P("i"), out_specs=P()))(x)


# --- values that differ between processes ---------------------------------------------------

def eager_shapes():
    """A host input whose shape depends on the process, into an eager shard_map: the inputs'
    types differ (mixing the blocks would print a number neither process computes alone)."""
    data = jnp.arange(16.) if jax.process_index() == 0 else jnp.arange(32.)
    return print(jax.shard_map(total, mesh=mesh, in_specs=P("i"), out_specs=P())(data))


def eager_values():
    """Equal shapes, different contents: a value each process computed itself, device_put."""
    data = np.arange(16, dtype=np.float32) + jax.process_index()
    placed = jax.device_put(data, NamedSharding(mesh, P("i")))
    return print(jax.shard_map(total, mesh=mesh, in_specs=P("i"), out_specs=P())(placed))


def jit_values():
    """A host argument of a jitted shard_map whose contents differ between processes."""
    data = np.arange(16, dtype=np.float32) * (1 + jax.process_index())
    f = jax.jit(jax.shard_map(total, mesh=mesh, in_specs=P("i"), out_specs=P()))
    return print(f(data))


# --- a process that leaves while the others wait for it --------------------------------------

def exit_between():
    """Process 1 leaves between two shard_maps: the others wait in the second."""
    f = jax.jit(jax.shard_map(total, mesh=mesh, in_specs=P("i"), out_specs=P()))
    f(x)
    if jax.process_index() == 1:
        sys.exit(3)  # between two shard_maps
    return f(x)  # sys.exit


def os_exit_between():
    """As ``exit_between``, leaving with os._exit: no exit handlers, no word to the launcher."""
    f = jax.jit(jax.shard_map(total, mesh=mesh, in_specs=P("i"), out_specs=P()))
    f(x)
    if jax.process_index() == 1:
        os._exit(3)  # between two shard_maps
    return f(x)  # os._exit


def read_at_end():
    """Process 0 reads a global array at the end of its script; the others never do."""
    y = jax.jit(jax.shard_map(lambda b: b * 2, mesh=mesh, in_specs=P("i"), out_specs=P("i")))(x)
    if jax.process_index() == 0:
        return print(np.asarray(y))


def raise_between():
    """Process 1 fails in host code while the others go on to the next shard_map."""
    f = jax.jit(jax.shard_map(total, mesh=mesh, in_specs=P("i"), out_specs=P()))
    f(x)
    if jax.process_index() == 1:
        raise KeyError("a host error on process 1")
    return f(x)  # raise


def kill_between():
    """Process 1 is killed (SIGKILL) between two shard_maps."""
    f = jax.jit(jax.shard_map(total, mesh=mesh, in_specs=P("i"), out_specs=P()))
    f(x)
    if jax.process_index() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return f(x)


DIVERGENT = {"impl_error": impl_error, "divergent_caught": divergent_caught,
             "divergent": divergent, "divergent_sizes": divergent_sizes,
             "divergent_loop": divergent_loop, "divergent_gather": divergent_gather,
             "eager_shapes": eager_shapes, "eager_values": eager_values,
             "jit_values": jit_values, "exit_between": exit_between,
             "os_exit_between": os_exit_between, "read_at_end": read_at_end,
             "raise_between": raise_between, "kill_between": kill_between}

MODES = {"raise_in_body": raise_in_body, "shape_error": shape_error, "kill": kill,
         "device_error": device_error, "exit_early": exit_early}



def launch_segments():
    """The shared-memory files MPICH's processes on this machine met in at start."""
    with open("/proc/self/maps") as maps:
        return sorted({line.split(None, 5)[5].strip().removesuffix(" (deleted)")
                       for line in maps if "/dev/shm/mpich_shm_" in line})


if __name__ == "__main__":
    mode = sys.argv[1]
    if jax.process_index() == 0:
        print("launch segments:", *launch_segments(), flush=True)
    if mode in DIVERGENT:
        DIVERGENT[mode]()
    else:
        f = jax.shard_map(MODES[mode], mesh=mesh, in_specs=P("i"), out_specs=P())
        (jax.jit(f) if mode == "device_error" else f)(x)
    print(f"process {jax.process_index()} finished")
