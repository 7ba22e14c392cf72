"""Memory: how much a call's peak resident memory grows, shardc and JAX side by side, each
case in a process of its own (a fresh interpreter: nothing left from another case).

    python -m benchmarks.memory [--quick] [--no-jax] [--jax-python PYTHON] [--only TEXT]

For each case a child process places the inputs, then measures the growth of the peak
resident set (Linux's VmHWM, reset before each call through ``/proc/self/clear_refs``) over
the resident set just before the call, keeping the call's outputs alive. Both sides run with
glibc mapping each allocation of 128 KiB or more on its own, so that freed buffers leave the
resident set rather than being reused unseen by the next call.

- *first*: the first call of a fresh ``jit`` (tracing, lowering, compiling and running);
- *steady*: a later call (the median of three), the previous outputs released.

The target of a steady call is its floor, the outputs it returns, plus one block-sized
temporary per device a backend holds stacked (the fast backend runs a process's devices'
blocks as one array): ``outputs + devices x block``. JAX's growth is shown beside shardc's.
Writes ``memory.json`` and ``memory.md`` under ``--out`` (default ``benchmarks/results``).
"""
from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys

import numpy as np

DEVICES = 8
MIB = 1 << 20


def _cases(block_floats: int) -> dict:
    """name -> (build(api) -> (fn, args), outputs' bytes, block bytes, has a target)."""
    block = block_floats * 4

    def mesh_and_input(api):
        mesh = api.mesh((DEVICES,), ("i",))
        x = api.place(np.ones(DEVICES * block_floats, np.float32) * 0.5, mesh, api.P("i"))
        return mesh, x

    def psum(api):
        mesh, x = mesh_and_input(api)
        return api.jit(api.shard_map(lambda b: api.lax.psum(b, "i"), mesh=mesh,
                                     in_specs=api.P("i"), out_specs=api.P())), (x,)

    def chain_in_shard_map(api):
        mesh, x = mesh_and_input(api)

        def body(b):
            for _ in range(20):
                b = api.jnp.sin(b) * 1.0001 + 0.1
            return b
        return api.jit(api.shard_map(body, mesh=mesh, in_specs=api.P("i"),
                                     out_specs=api.P("i"))), (x,)

    def chain_outside(api):
        _, x = mesh_and_input(api)
        return api.jit(lambda a: api.jnp.tanh(a) * 2 + 1), (x,)

    def training_step(api):
        mesh = api.mesh((DEVICES,), ("batch",))
        width = 1024
        rng = np.random.default_rng(0)
        params = [(rng.standard_normal((width, width)).astype(np.float32) * 0.03,
                   np.zeros(width, np.float32)) for _ in range(3)]
        batch = rng.standard_normal((DEVICES * 64, width)).astype(np.float32)
        replicated = api.NamedSharding(mesh, api.P())
        params = [(api.device_put(w, replicated), api.device_put(b, replicated))
                  for w, b in params]
        batch = api.place(batch, mesh, api.P("batch"))
        jnp, lax = api.jnp, api.lax

        def loss(params, x):
            for w, b in params:
                x = jnp.tanh(x @ w + b)
            return lax.pmean(jnp.mean(x * x), "batch")

        grad = api.shard_map(api.value_and_grad(loss), mesh=mesh,
                             in_specs=(api.P(), api.P("batch")), out_specs=(api.P(), api.P()))

        def step(params, x):
            value, grads = grad(params, x)
            return value, [(w - 0.01 * gw, b - 0.01 * gb)
                           for (w, b), (gw, gb) in zip(params, grads)]
        return api.jit(step), (params, batch)

    param_bytes = 3 * (1024 * 1024 + 1024) * 4 + 4
    return {
        "psum": (psum, block, block, True),
        "20-step chain in shard_map": (chain_in_shard_map, DEVICES * block, block, True),
        "tanh(a) * 2 + 1, no shard_map": (chain_outside, DEVICES * block, block, True),
        "data-parallel training step": (training_step, param_bytes, None, False),
    }


# --- the child: one case, one side -------------------------------------------------------------

def _peak_kib() -> int:
    return _status("VmHWM")


def _resident_kib() -> int:
    return _status("VmRSS")


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        return int(re.search(rf"{field}:\s+(\d+)", f.read()).group(1))


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _growth(call) -> tuple:
    """(peak growth in bytes, the call's result) of one call."""
    gc.collect()
    if not _reset_peak():
        raise RuntimeError("the peak resident set cannot be reset here (Linux only)")
    before = _resident_kib()
    result = call()
    return (_peak_kib() - before) * 1024, result


def child(side: str, name: str, block_floats: int) -> dict:
    from benchmarks.scenarios import jax_api, shardc_api
    api = shardc_api() if side == "shardc" else jax_api()
    build = _cases(block_floats)[name][0]
    fn, args = build(api)
    api.block(args)
    call = lambda: api.block(fn(*args))
    first, out = _growth(call)
    steady = []
    for _ in range(3):
        del out
        growth, out = _growth(call)
        steady.append(growth)
    return {"case": name, "side": side, "first": first, "steady": statistics.median(steady)}


# --- the parent: every case on both sides, each in its own process -----------------------------

def _run_child(python: str, side: str, name: str, block_floats: int, timeout: float) -> dict:
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["SHARDC_NUM_DEVICES"] = str(DEVICES)
    flag = f"--xla_force_host_platform_device_count={DEVICES}"
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + flag).strip()
    env.setdefault("JAX_PLATFORMS", "cpu")
    # large allocations mapped and unmapped each time on both sides: a freed buffer leaves the
    # resident set, so the next call's growth is its own (glibc would otherwise keep freed
    # buffers up to 32 MiB in its heap, and the next call reuse them unseen)
    env["MALLOC_MMAP_THRESHOLD_"] = str(1 << 17)
    command = [python, "-m", "benchmarks.memory", "--child", side, "--case", name,
               "--block-floats", str(block_floats)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              env=env, cwd=root)
    except subprocess.TimeoutExpired:
        return {"case": name, "side": side, "error": f"over {timeout:.0f} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        return {"case": name, "side": side, "error": (done.stderr or done.stdout)[-300:]}
    return json.loads(lines[-1])


def _mib(n) -> str:
    return "-" if n is None else f"{n / MIB:.0f} MiB" if n >= 10 * MIB else f"{n / MIB:.1f} MiB"


def report(rows: list, block_floats: int) -> str:
    lines = [f"## Peak memory growth of a call, {DEVICES} devices, blocks of "
             f"{_mib(block_floats * 4)} (float32)", "",
             "| case | shardc first | shardc steady | JAX first | JAX steady | steady target "
             "| within target | not above JAX |", "|---|---|---|---|---|---|---|---|"]
    for name, (_, outputs, block, has_target) in _cases(block_floats).items():
        got = {r["side"]: r for r in rows if r["case"] == name}
        shardc, jax = got.get("shardc", {}), got.get("jax", {})
        target = outputs + DEVICES * block if has_target else None
        steady = shardc.get("steady")
        within = "-" if target is None or steady is None else ("yes" if steady <= target
                                                                else "no")
        below = ("-" if steady is None or jax.get("steady") is None
                 else "yes" if steady <= jax["steady"] else "no")
        lines.append(f"| {name} | {_mib(shardc.get('first'))} | {_mib(steady)} | "
                     f"{_mib(jax.get('first'))} | {_mib(jax.get('steady'))} | "
                     f"{_mib(target) if target else 'outputs ' + _mib(outputs)} | {within} | "
                     f"{below} |")
    errors = [f"- {r['case']} ({r['side']}): {r['error']}" for r in rows if r.get("error")]
    return "\n".join(lines + ([""] + errors if errors else [])) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.memory")
    parser.add_argument("--quick", action="store_true", help="blocks of 1 MiB, not 16 MiB")
    parser.add_argument("--no-jax", action="store_true", help="leave JAX out")
    parser.add_argument("--jax-python", default=None,
                        help="the Python that runs the JAX side (default: this one, when it "
                             "has JAX)")
    parser.add_argument("--only", action="append", default=[],
                        help="the cases whose name contains this text (repeatable)")
    parser.add_argument("--out", default=os.path.join("benchmarks", "results"))
    parser.add_argument("--child", choices=["shardc", "jax"], help=argparse.SUPPRESS)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--block-floats", type=int, default=None, help=argparse.SUPPRESS)
    # ``make bench`` passes its BENCH_ARGS to every benchmark: the harness's own are not ours
    args, _ = parser.parse_known_args(argv)
    block_floats = args.block_floats or (MIB // 4 if args.quick else 4 * MIB)
    if args.child:
        print(json.dumps(child(args.child, args.case, block_floats)), flush=True)
        return 0
    sides = [("shardc", sys.executable)]
    if not args.no_jax:
        if args.jax_python:
            sides.append(("jax", args.jax_python))
        elif importlib.util.find_spec("jax") is not None:
            sides.append(("jax", sys.executable))
    timeout = 120 if args.quick else 600
    rows = [_run_child(python, side, name, block_floats, timeout)
            for name in _cases(block_floats)
            if not args.only or any(text in name for text in args.only)
            for side, python in sides]
    text = report(rows, block_floats)
    print(text)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "memory.json"), "w") as f:
        json.dump({"block_floats": block_floats, "devices": DEVICES, "rows": rows}, f, indent=1)
    with open(os.path.join(args.out, "memory.md"), "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
