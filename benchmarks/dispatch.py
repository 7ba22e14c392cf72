"""Dispatch: the tutorial's matmul called with numpy inputs at every call (a loop over host
batches), JAX and shardc in one process, sampled in turns, as issue 21's acceptance measures it.

    python -m benchmarks.dispatch [--quick] [--no-jax] [--out DIR]

Three rows, each the median of its samples (seconds per call):

- *steady*: a jitted call, the numpy inputs placed on the mesh by the call itself;
- *first*: a fresh jit of a freshly built shard_map: traced, compiled and run once (JAX's
  caches cleared before each sample, outside the timing; shardc keeps no compiled program
  across a fresh function);
- *eager*: the shard_map called without jit.

The mesh is ``Mesh(devices, ('x', 'y'))`` (Auto axes on both sides), which accepts numpy
inputs. Targets (issue 21): shardc faster than JAX by 10x steady, 50x first, 500x eager.
Writes ``dispatch.json`` and ``dispatch.md`` under ``--out`` (default ``benchmarks/results``).
"""
from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import statistics
import sys
import time

DEVICES = 8
TARGETS = {"steady": 10.0, "first": 50.0, "eager": 500.0}


def _apis(with_jax: bool) -> dict:
    """name -> Api; JAX's device count set before it is imported."""
    flag = f"--xla_force_host_platform_device_count={DEVICES}"
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flag).strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("SHARDC_NUM_DEVICES", str(DEVICES))
    from benchmarks.scenarios import jax_api, shardc_api
    apis = {"shardc": shardc_api()}
    if with_jax:
        apis["jax"] = jax_api()
    return apis


def _timed(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def _one_round(api, samples: dict, steady_calls: int, eager_calls: int) -> None:
    """Add one round of each row's samples for ``api``."""
    from benchmarks.scenarios import seed_matmul
    fn, (a, b) = seed_matmul(api)
    jitted = api.jit(fn)
    api.block(jitted(a, b))
    samples["steady"] += [_timed(lambda: api.block(jitted(a, b))) for _ in range(steady_calls)]
    api.block(fn(a, b))
    samples["eager"] += [_timed(lambda: api.block(fn(a, b))) for _ in range(eager_calls)]
    fresh, _ = seed_matmul(api)
    api.clear()
    gc.collect()
    samples["first"].append(_timed(lambda: api.block(api.jit(fresh)(a, b))))


def measure(rounds: int, with_jax: bool) -> dict:
    """side -> row -> samples, the sides taking turns round by round (a noisy machine's
    moments shared between them)."""
    apis = _apis(with_jax)
    results = {side: {"steady": [], "first": [], "eager": []} for side in apis}
    for _ in range(rounds):
        for side, api in apis.items():
            eager_calls = 1 if side == "jax" else 20        # JAX's eager call takes ~0.1 s
            _one_round(api, results[side], steady_calls=50, eager_calls=eager_calls)
    return results


def report(results: dict) -> str:
    """A markdown table: medians per side and row, and JAX over shardc against the targets."""
    medians = {side: {row: statistics.median(s) for row, s in rows.items()}
               for side, rows in results.items()}
    lines = ["| row | shardc | JAX | JAX / shardc | target |", "|---|---|---|---|---|"]
    for row, target in TARGETS.items():
        ours = medians["shardc"][row]
        theirs = medians.get("jax", {}).get(row)
        ratio = f"{theirs / ours:.1f}x" if theirs else "-"
        lines.append(f"| {row} | {_us(ours)} | {_us(theirs)} | {ratio} | {target:g}x |")
    return "\n".join(lines)


def _us(seconds) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.1f} us"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dispatch")
    parser.add_argument("--quick", action="store_true", help="3 rounds, not 15")
    parser.add_argument("--no-jax", action="store_true", help="leave JAX out")
    parser.add_argument("--out", default=os.path.join("benchmarks", "results"))
    args = parser.parse_args(argv)
    with_jax = not args.no_jax and importlib.util.find_spec("jax") is not None
    results = measure(3 if args.quick else 15, with_jax)
    table = report(results)
    print(table)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "dispatch.json"), "w") as f:
        json.dump(results, f)
    with open(os.path.join(args.out, "dispatch.md"), "w") as f:
        f.write("# Dispatch: the seed matmul with numpy inputs at every call\n\n" + table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
