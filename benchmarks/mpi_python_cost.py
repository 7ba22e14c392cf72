"""What a jitted collective costs in Python on the MPI backend, with MPI's own time taken out.

    python -m benchmarks.mpi_python_cost [--size N] [--calls N]

One process plays rank 0 of two: a loopback world stands in for MPI, and its calls complete
at once by copying this process's block where the other's would land (the values are not the
other process's, the work and the shapes are). What remains is everything shardc does around
the MPI calls: jit's dispatch, the agreement, the plan, the direct rule, the result. The MPI
benchmark (``benchmarks/mpi.py``) shows the same cost, with MPI's latency added, in its rows of
16 floats.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np


class _Done:
    def Wait(self):
        pass

    def Test(self):
        return True


class _Requests:
    @staticmethod
    def Waitall(requests):
        pass

    @staticmethod
    def Testall(requests):
        return True


class _LoopbackMPI:
    Request = _Requests
    BYTE = None


def _bytes(message) -> np.ndarray:
    """The bytes of an MPI message: a buffer, or ``[buffer, datatype]``."""
    buffer = message[0] if isinstance(message, list) else message
    return buffer.reshape(-1).view(np.uint8)


class _LoopbackComm:
    """A communicator of two whose other member sends what this one sends."""
    size = 2

    def Iallgather(self, send, recv):
        data, out = _bytes(send), _bytes(recv)
        out[:data.size] = data
        out[data.size:2 * data.size] = data
        return _Done()

    def Ialltoall(self, send, recv):
        _bytes(recv)[...] = _bytes(send)
        return _Done()

    def Irecv(self, buf, source, tag):
        return _Done()

    def Isend(self, buf, dest, tag):
        return _Done()


class _LoopbackWorld:
    """``runtime.mpi.World`` for rank 0 of two, over loopback communicators."""
    MPI = _LoopbackMPI
    rank, size = 0, 2

    def __init__(self):
        self.comm = _LoopbackComm()
        self.check_comm = self       # agreements: every rank brings the same fingerprint

    def Iallgather(self, send, recv):
        recv[:] = send[0]
        return _Done()

    def comm_of(self, ranks):
        return self.comm

    existing_comm = comm_of


def measure(size: int, calls: int) -> dict:
    os.environ["SHARDC_NUM_DEVICES"] = "2"
    import shardc as jax
    from compiler.backend import set_backend
    from runtime import mpi
    from runtime.devices import set_processes
    from shardc import lax
    from shardc.sharding import NamedSharding, PartitionSpec as P

    mpi.set_world(_LoopbackWorld())
    set_processes(0, 2)
    set_backend(mpi.MpiBackend())
    mesh = jax.make_mesh((2,), ("i",))
    x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("i")),
                                               np.ones(size, np.float32))
    bodies = {
        "psum": (lambda b: lax.psum(b, "i"), P()),
        "all_gather": (lambda b: lax.all_gather(b, "i", tiled=True, to="invarying"), P()),
        "psum_scatter": (lambda b: lax.psum_scatter(b, "i", tiled=True), P("i")),
        "ppermute": (lambda b: lax.ppermute(b, "i", [(0, 1), (1, 0)]), P("i")),
        "all_to_all": (lambda b: lax.all_to_all(b, "i", 0, 0, tiled=True), P("i")),
    }
    costs = {}
    for name, (body, out_spec) in bodies.items():
        f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=out_spec))
        for _ in range(100):
            f(x)
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(calls):
                f(x)
            best = min(best, (time.perf_counter() - start) / calls)
        costs[name] = best
    return costs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mpi_python_cost")
    parser.add_argument("--size", type=int, default=16, help="float32 per process")
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args(argv)
    for name, seconds in measure(args.size, args.calls).items():
        print(f"{name:13} {seconds * 1e6:6.2f} us per call (fastest of 5 rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
