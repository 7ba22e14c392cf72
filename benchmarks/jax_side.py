"""The JAX columns, measured in a child process whose XLA device count is set before JAX is
imported (``--xla_force_host_platform_device_count=N``): one process per device count.

    python -m benchmarks.jax_side --devices 8 --budget quick 'psum 2^16' 'program_size 200 reps'

prints one JSON line per measurement: {"scenario", "column", "samples"} (or "error").
"""
from __future__ import annotations

import argparse
import json
import os
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.jax_side")
    parser.add_argument("--devices", type=int, required=True)
    parser.add_argument("--budget", choices=["full", "quick"], default="full")
    parser.add_argument("--columns", default="first,steady,eager")
    parser.add_argument("--no-eager-from", type=int, default=64,
                        help="skip eager calls on meshes of at least this many devices")
    parser.add_argument("--eager-only", action="append", default=None,
                        help="measure eager calls of these scenarios only (repeatable)")
    parser.add_argument("scenarios", nargs="+")
    args = parser.parse_args(argv)
    flag = f"--xla_force_host_platform_device_count={args.devices}"
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flag).strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

    from benchmarks import measure
    from benchmarks.scenarios import by_name, jax_api
    api = jax_api()
    budget = measure.QUICK if args.budget == "quick" else measure.FULL
    for name in args.scenarios:
        scenario = by_name(name)
        for column in args.columns.split(","):
            if column == "eager" and (not scenario.eager or scenario.devices >= args.no_eager_from
                                      or (args.eager_only and name not in args.eager_only)):
                emit(name, column, None, "skipped: eager JAX (slow) not measured here")
                continue
            try:
                emit(name, column, measure.MEASURES[column](api, scenario, budget))
            except Exception as err:          # a scenario JAX cannot run is reported, not fatal
                emit(name, column, None, f"{type(err).__name__}: {err}"[:300])
    return 0


def emit(scenario, column, samples, error=None):
    record = {"scenario": scenario, "column": f"jax {column}", "samples": samples}
    if error:
        record["error"] = error
    print(json.dumps(record), flush=True)


if __name__ == "__main__":
    sys.exit(main())
