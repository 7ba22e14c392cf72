"""Run the scenarios side by side in one run: shardc's two backends and the numpy lower bound in
this process, JAX (when installed) in one child process per XLA device count, the shape-only
lowering in a child process of its own. Writes the table, JSON, markdown and plots.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time

COLUMNS = ("reference first", "reference steady", "reference eager",
           "fast first", "fast steady", "fast eager", "numpy",
           "jax first", "jax steady", "jax eager")
SHARDC_COLUMNS = ("first", "steady", "eager")


def parse(argv):
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="shardc's benchmark harness: reference and fast backends, the numpy lower "
                    "bound and JAX (when installed), medians and ratios from one run.")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: the small scenarios, short budgets (under a minute)")
    parser.add_argument("--out", default=os.path.join("benchmarks", "results"),
                        help="results folder (default benchmarks/results)")
    parser.add_argument("--only", action="append", default=[],
                        help="run the scenarios whose name contains this text (repeatable)")
    parser.add_argument("--no-jax", action="store_true", help="leave the JAX columns out")
    parser.add_argument("--shape-only-devices", type=int, default=None,
                        help="one mesh size for the shape-only lowering (default 4096, 16384 "
                             "and 65536; quick 64)")
    parser.add_argument("--jax-timeout", type=float, default=None,
                        help="seconds allowed to each JAX child process")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="cores each side may use (default: all of them): numpy's BLAS "
                             "and shardc's reduction threads, and with 1, XLA held to one "
                             "thread as well, so that "
                             "shardc and JAX always compute with the same cores")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    os.environ.setdefault("SHARDC_NUM_DEVICES", "512")   # before shardc is imported
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                 "SHARDC_THREADS"):
        os.environ[name] = str(args.threads)             # before numpy is imported
    if args.threads == 1:                                # JAX's children inherit it
        single = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + single).strip()
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn)
    from benchmarks import measure, report
    from benchmarks.scenarios import all_scenarios

    budget = measure.QUICK if args.quick else measure.FULL
    scenarios = [s for s in all_scenarios()
                 if (s.quick or not args.quick)
                 and (not args.only or any(text in s.name for text in args.only))]
    with_jax = not args.no_jax and importlib.util.find_spec("jax") is not None
    from benchmarks.shape_only import SHAPE_ONLY_TARGETS
    # the shape-only rows: every device's program built, on meshes this large
    shape_devices = ([args.shape_only_devices] if args.shape_only_devices else
                     [64] if args.quick else list(SHAPE_ONLY_TARGETS))
    console = Console(stderr=True, width=max(Console(stderr=True).width, 150))
    results = {s.name: {} for s in scenarios}
    notes: dict = {}
    started = time.time()
    steps = len(scenarios) * (7 + (3 if with_jax else 0)) + 1
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=True) as progress:
        task = progress.add_task("benchmarks", total=steps)
        for scenario in scenarios:
            _measure_shardc(scenario, budget, results[scenario.name], progress, task)
        extras = {"shape_only_lowering": [_shape_only(n, args.quick, progress, task)
                                          for n in shape_devices]}
        if with_jax:
            _measure_jax(scenarios, args, results, notes, progress, task)
    run = report.Run(scenarios=scenarios, results=results, notes=notes, extras=extras,
                     quick=args.quick, jax=with_jax, seconds=time.time() - started,
                     environment=report.environment())
    report.write_all(run, args.out, console)
    return 0


def _measure_shardc(scenario, budget, into, progress, task):
    from compiler.backend import get_backend, set_backend
    from benchmarks import measure
    from benchmarks.scenarios import shardc_api
    from runtime.reference import ReferenceBackend
    from runtime.vectorized import FastBackend
    api = shardc_api()
    previous = get_backend()
    try:
        for name, backend in (("reference", ReferenceBackend()), ("fast", FastBackend())):
            set_backend(backend)
            for column in SHARDC_COLUMNS:
                progress.update(task, description=f"{scenario.name}: shardc {name} {column}")
                if name == "fast" and column == "steady":
                    # the fast backend and the numpy lower bound in turns: their ratio is
                    # the one a target reads, so both see the same moments of the machine
                    both = measure.steady_and_bound(api, scenario, budget)
                    into["fast steady"], into["numpy"] = both["steady"], both["numpy"]
                    progress.advance(task)
                else:
                    into[f"{name} {column}"] = measure.MEASURES[column](api, scenario, budget)
                progress.advance(task)
    finally:
        set_backend(previous)


def _shape_only(devices, quick, progress, task) -> dict:
    progress.update(task, description=f"shape-only lowering, {devices} devices")
    timeout = 60 if quick else 600
    try:
        done = subprocess.run([sys.executable, "-m", "benchmarks.shape_only", "--devices",
                               str(devices)], capture_output=True, text=True, timeout=timeout,
                              env=_child_env())
        lines = [l for l in done.stdout.splitlines() if l.startswith("{")]
        record = json.loads(lines[-1]) if lines else {"devices": devices, "seconds": None,
                                                      "error": done.stderr[-300:]}
    except subprocess.TimeoutExpired:
        record = {"devices": devices, "seconds": None, "error": f"over {timeout} s"}
    progress.advance(task)
    return record


def _measure_jax(scenarios, args, results, notes, progress, task):
    by_devices: dict = {}
    for s in scenarios:
        by_devices.setdefault(s.devices, []).append(s.name)
    for devices, names in sorted(by_devices.items()):
        progress.update(task, description=f"JAX on {devices} CPU devices: starting")
        timeout = args.jax_timeout or (120 if args.quick else 1800)
        command = [sys.executable, "-m", "benchmarks.jax_side", "--devices", str(devices),
                   "--budget", "quick" if args.quick else "full"]
        if args.quick:      # JAX's eager shard_map takes seconds a call: the seed example only
            command += ["--eager-only", "matmul_basic 8x16@16x4"]
        command += names
        seen = 0
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=_child_env()) as child:
            watchdog = threading.Timer(timeout, child.kill)
            watchdog.start()
            try:
                for line in child.stdout:
                    if not line.startswith("{"):
                        continue
                    record = json.loads(line)
                    results[record["scenario"]][record["column"]] = record["samples"]
                    if record.get("error"):
                        notes[f"{record['scenario']}: {record['column']}"] = record["error"]
                    seen += 1
                    progress.update(task, description=f"JAX on {devices} CPU devices: "
                                                      f"{record['scenario']} {record['column']}")
                    progress.advance(task)
                child.wait()
            finally:
                watchdog.cancel()
            if child.returncode != 0 and seen < 3 * len(names):
                why = f"killed after {timeout:.0f} s" if child.returncode < 0 else \
                    (child.stderr.read() or "")[-300:]
                notes[f"JAX on {devices} devices"] = why
        progress.advance(task, 3 * len(names) - seen)


def _child_env() -> dict:
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env
