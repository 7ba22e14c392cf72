"""MPI benchmarks: each collective under shardc against the raw mpi4py call on the same
buffers, and two whole programs (the seed matmul, a data-parallel training step).

    python -m benchmarks.mpi [--quick] [--out FOLDER]

launches ``mpiexec -n 2`` and ``-n 4`` (one device per process for the collectives, so every
byte crosses processes) and writes ``mpi.json`` and ``mpi.md`` under FOLDER
(benchmarks/results). A collective's time is the median over interleaved calls, each started
after a barrier, as measured on process 0; ``ratio`` is shardc over raw (target: 1.2 or less),
and ``ratio of fastest calls`` the same for each side's fastest call (steadier where other work
shares the cores: MPICH's processes poll while they wait).
shardc's exact reductions gather every member's block and reduce in the simulator's order, so
a psum is compared with the raw Allgather of the same blocks plus that sum (``raw`` for
``psum``), and its ``native`` mode with the raw Allreduce.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = (2 ** 16, 2 ** 20)
TARGET = 1.2
# blocks of 16 floats: what a call costs beyond moving the data (not held to the target)
FIXED_COST_SIZE = 2 ** 4


def _timed(call, comm, reps: int) -> list:
    """Seconds per call on this process, each call started together after a barrier."""
    out = []
    for _ in range(reps):
        comm.Barrier()
        start = time.perf_counter()
        call()
        out.append(time.perf_counter() - start)
    return out


def _interleaved(calls: dict, comm, reps: int) -> dict:
    for call in calls.values():       # warm: compile, make the sub-communicators
        call()
        call()
    samples = {name: [] for name in calls}
    for _ in range(reps):
        for name, call in calls.items():
            samples[name] += _timed(call, comm, 1)
    medians = {name: statistics.median(s) for name, s in samples.items()}
    medians.update({f"{name} min": min(s) for name, s in samples.items()})
    return medians


def _collectives(size: int):
    """(name, body, out_spec, raw(comm, block, out) -> None, raw output shape)."""
    import numpy as np
    from shardc import lax
    from shardc.sharding import PartitionSpec as P
    from mpi4py import MPI

    def ordered_allreduce(comm, block, _):
        gathered = np.empty((comm.size,) + block.shape, block.dtype)
        comm.Allgather(block, gathered)
        total = gathered[0].copy()
        for part in gathered[1:]:
            total += part
        return total

    def shift(comm, block, out):
        comm.Sendrecv(block, dest=(comm.rank + 1) % comm.size, recvbuf=out,
                      source=(comm.rank - 1) % comm.size)

    def n():
        return lax.axis_size("i")

    return [
        ("psum", lambda b: lax.psum(b, "i"), P(), ordered_allreduce, (size,)),
        ("psum native", lambda b: lax.psum(b, "i"), P(),
         lambda comm, b, out: comm.Allreduce(b, out, op=MPI.SUM), (size,)),
        ("all_gather", lambda b: lax.all_gather(b, "i", tiled=True, to="invarying"), P(),
         lambda comm, b, out: comm.Allgather(b, out), None),
        ("psum_scatter", lambda b: lax.psum_scatter(b, "i", tiled=True), P("i"),
         lambda comm, b, out: comm.Reduce_scatter_block(b, out, op=MPI.SUM), None),
        ("ppermute", lambda b: lax.ppermute(b, "i", [(k, (k + 1) % n()) for k in range(n())]),
         P("i"), shift, (size,)),
        ("all_to_all", lambda b: lax.all_to_all(b, "i", 0, 0, tiled=True), P("i"),
         lambda comm, b, out: comm.Alltoall(b, out), (size,)),
    ]


def worker(sizes, reps: int) -> dict:
    """Run under mpiexec with SHARDC_NUM_DEVICES = the process count."""
    import numpy as np
    import shardc as jax
    from shardc.sharding import NamedSharding, PartitionSpec as P
    from runtime.mpi import world
    comm = world().comm
    count = jax.process_count()
    mesh = jax.make_mesh((count,), ("i",))
    rows = []
    for size in sizes:
        block = np.random.default_rng(comm.rank).standard_normal(size).astype(np.float32)
        x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("i")), block)
        for name, body, out_spec, raw, out_shape in _collectives(size):
            native = name.endswith("native")
            os.environ["SHARDC_MPI_REDUCTIONS"] = "native" if native else "exact"
            jax.set_backend_name("mpi")
            f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=out_spec))
            shape = out_shape or {"all_gather": (size * count,),
                                  "psum_scatter": (size // count,)}[name]
            out = np.empty(shape, np.float32)
            times = _interleaved({"shardc": lambda: f(x), "raw": lambda: raw(comm, block, out)},
                                 comm, reps)
            rows.append({"kind": "collective", "name": name, "processes": count, "size": size,
                         "shardc_s": times["shardc"], "raw_s": times["raw"],
                         "ratio": times["shardc"] / times["raw"],
                         "ratio_of_fastest": times["shardc min"] / times["raw min"]})
    return {"rows": rows}


def programs_worker(reps: int, loop: bool = False) -> dict:
    """The seed matmul and a data-parallel training step on 8 devices over the processes;
    ``loop``: the step alone, many in a row, as a training script runs it (timed together)."""
    import numpy as np
    import shardc as jax
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import seed_tutorial as t
    from train_mlp import model
    from train_data_parallel import make_train_step, place
    comm = _comm()
    a = jax.numpy.arange(1024 * 1024, dtype=np.float32).reshape(1024, 1024) / 1e6
    matmul = jax.jit(t.matmul_basic)
    mesh = jax.make_mesh((8,), ("batch",))
    _, step = make_train_step(mesh, "batch")
    params, batch = place(mesh, "batch", *model())
    if loop:
        steps = 200
        for _ in range(10):
            step(params, batch)
        comm.Barrier()
        start = time.perf_counter()
        for _ in range(steps):
            jax.tree_util.tree_map(np.asarray, step(params, batch))
        return {"rows": [{"kind": "program", "name": f"data-parallel step, {steps} in a row, "
                          "no thread variables", "processes": jax.process_count(),
                          "shardc_s": (time.perf_counter() - start) / steps}]}
    times = _interleaved({"matmul_basic 1024^2": lambda: np.asarray(matmul(a, a)),
                          "data-parallel step": lambda: jax.tree_util.tree_map(
                              np.asarray, step(params, batch))}, comm, reps)
    return {"rows": [{"kind": "program", "name": name, "processes": jax.process_count(),
                      "shardc_s": s} for name, s in times.items() if not name.endswith(" min")]}


def _comm():
    import shardc as jax
    if jax.process_count() > 1:
        from runtime.mpi import world
        return world().comm
    return _NoComm()


class _NoComm:
    def Barrier(self):
        pass


_THREAD_VARIABLES = ("SHARDC_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                     "MKL_NUM_THREADS")


def _launch(args, n, devices, out, timeout, threads: bool = True) -> dict:
    # each process's BLAS gets its share of the cores: more threads than cores thrash;
    # ``threads=False``: none of these set, as a user launches a script (shardc's defaults)
    share = str(max(1, (os.cpu_count() or 1) // n))
    env = dict(os.environ, PYTHONPATH=ROOT, SHARDC_NUM_DEVICES=str(devices), SHARDC_THREADS="1",
               OMP_NUM_THREADS=share, OPENBLAS_NUM_THREADS=share, MKL_NUM_THREADS=share)
    if not threads:
        for name in _THREAD_VARIABLES:
            env.pop(name, None)
    env.pop("SHARDC_BACKEND", None)
    command = [sys.executable, "-m", "benchmarks.mpi", "--worker", out] + args
    if n > 1:
        command = [os.path.join(os.path.dirname(sys.executable), "mpiexec"), "-n", str(n)] + command
    subprocess.run(command, cwd=ROOT, env=env, check=True, timeout=timeout)
    with open(out) as f:
        return json.load(f)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mpi")
    parser.add_argument("--quick", action="store_true", help="few repetitions")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--programs", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--loop", action="store_true", help=argparse.SUPPRESS)
    args, _ = parser.parse_known_args(argv)
    reps = 5 if args.quick else 30
    if args.worker:
        # each program call is a few milliseconds: at least 10 of each, for a steady median
        result = (programs_worker(max(10, reps), args.loop) if args.programs
                  else worker((FIXED_COST_SIZE,) + SIZES, reps))
        import shardc as jax
        if jax.process_index() == 0:
            with open(args.worker, "w") as f:
                json.dump(result, f)
        return 0
    os.makedirs(args.out, exist_ok=True)
    scratch = os.path.join(args.out, "mpi_part.json")
    rows = []
    for n in (2, 4):
        rows += _launch([] + (["--quick"] if args.quick else []), n, n, scratch, 900)["rows"]
    for n in (1, 2, 4):
        rows += _launch(["--programs"] + (["--quick"] if args.quick else []), n, 8, scratch,
                        900)["rows"]
    for n in (1, 2):
        rows += _launch(["--programs", "--loop"], n, 8, scratch, 900, threads=False)["rows"]
    os.remove(scratch)
    with open(os.path.join(args.out, "mpi.json"), "w") as f:
        json.dump({"target_ratio": TARGET, "rows": rows}, f, indent=1)
    text = _report(rows)
    with open(os.path.join(args.out, "mpi.md"), "w") as f:
        f.write(text)
    print(text)
    return 0


def _report(rows) -> str:
    lines = ["## Collectives: shardc on MPI against raw mpi4py (median per call, process 0)", "",
             "| collective | processes | float32 per process | shardc | raw mpi4py | ratio "
             "| ratio of fastest calls |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["kind"] == "collective":
            flag = ("" if r["ratio"] <= TARGET or r["size"] == FIXED_COST_SIZE
                    else " (over target)")
            lines.append(f"| {r['name']} | {r['processes']} | 2^{r['size'].bit_length() - 1} "
                         f"| {r['shardc_s'] * 1e6:.0f} us | {r['raw_s'] * 1e6:.0f} us "
                         f"| {r['ratio']:.2f}{flag} | {r['ratio_of_fastest']:.2f} |")
    lines += ["", f"Rows of 2^{FIXED_COST_SIZE.bit_length() - 1} floats show the fixed cost of a "
              "call (not held to the target): shardc minus raw is what a jitted call costs "
              "beyond the data's movement.", "", "## Programs on 8 devices (median per call, each started together after a "
              "barrier; 1 process is the simulator)", "",
              "| program | processes | time |", "|---|---|---|"]
    for r in rows:
        if r["kind"] == "program":
            lines.append(f"| {r['name']} | {r['processes']} | {r['shardc_s'] * 1e3:.2f} ms |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
