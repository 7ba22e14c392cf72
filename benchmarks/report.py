"""The harness's outputs: a rich table on the terminal, ``results.json``, ``report.md`` and
matplotlib plots (time against size, time against mesh size) when matplotlib is installed.

Every figure is a median over the samples of one run; ratios are taken between medians of the
same run, so they compare systems measured side by side.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform

from benchmarks.measure import median
from benchmarks.shape_only import SHAPE_ONLY_TARGETS

TIMES = ("reference first", "reference steady", "reference eager", "fast first",
         "fast steady", "fast eager", "numpy", "jax first", "jax steady", "jax eager")

# (label, numerator column, denominator column): "how many times faster" reads num / den.
RATIOS = (
    ("fast vs JAX, steady", "jax steady", "fast steady"),
    ("fast vs JAX, first call", "jax first", "fast first"),
    ("fast vs JAX, compile", "jax compile", "fast compile"),
    ("fast vs JAX, eager", "jax eager", "fast eager"),
    ("fast / numpy, steady", "fast steady", "numpy"),
    ("fast vs reference, steady", "reference steady", "fast steady"),
)


@dataclasses.dataclass
class Run:
    scenarios: list
    results: dict            # scenario name -> column -> samples (seconds) or None
    notes: dict
    extras: dict
    quick: bool
    jax: bool
    seconds: float
    environment: dict

    def median(self, scenario: str, column: str):
        """The median of a column; ``<system> compile`` is derived: first call less steady
        call, the cost of tracing, checking and lowering (compiling) alone."""
        if column.endswith(" compile"):
            system = column[:-len(" compile")]
            first = self.median(scenario, f"{system} first")
            steady = self.median(scenario, f"{system} steady")
            if first is None or steady is None or first <= steady:
                return None
            return first - steady
        return median(self.results.get(scenario, {}).get(column) or [])

    def ratio(self, scenario: str, num: str, den: str):
        a, b = self.median(scenario, num), self.median(scenario, den)
        return a / b if a is not None and b else None


def environment() -> dict:
    import numpy as np
    info = {"python": platform.python_version(), "numpy": np.__version__,
            "machine": platform.machine(), "cpus": os.cpu_count(),
            "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    try:
        import jax
        info["jax"] = jax.__version__
    except ImportError:
        info["jax"] = None
    return info


def fmt_time(seconds) -> str:
    if seconds is None:
        return "-"
    for unit, scale in (("s", 1), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


def fmt_ratio(value) -> str:
    return "-" if value is None else f"{value:.3g}x"


# --- targets (issue 6) ------------------------------------------------------------------------

SMALL = ("matmul_basic 8x16@16x4", "program_size 200 reps")


def targets(run: Run) -> list:
    """(target, measured, met: True/False/None when not measured) for each of issue 6."""
    out = []
    names = [s.name for s in run.scenarios]
    steady = [run.ratio(n, "jax steady", "fast steady") for n in names]
    measured = [r for r in steady if r is not None]
    out.append(("steady state no slower than JAX jit on any scenario",
                f"worst {min(measured):.3g}x" if measured else "-",
                (min(measured) >= 1) if measured else None))
    small = [n for n in names if n in SMALL or n.endswith("2^16")]
    small_ratios = [run.ratio(n, "jax steady", "fast steady") for n in small]
    small_ratios = [r for r in small_ratios if r is not None]
    out.append(("steady state >= 5x faster than JAX on the seed matmul, 200 reps, "
                "collectives at 2^16", f"worst {min(small_ratios):.3g}x" if small_ratios else "-",
                (min(small_ratios) >= 5) if small_ratios else None))
    big = [s.name for s in run.scenarios if s.big_blocks]
    bound = [run.ratio(n, "fast steady", "numpy") for n in big]
    bound = [r for r in bound if r is not None]
    out.append(("within 1.3x of the numpy lower bound with blocks of 1 MiB or more",
                f"worst {max(bound):.3g}x" if bound else "-",
                (max(bound) <= 1.3) if bound else None))
    first = [run.ratio(n, "jax first", "fast first") for n in names]
    first = [r for r in first if r is not None]
    out.append(("first call >= 20x faster than JAX's first jit call on every scenario",
                f"worst {min(first):.3g}x" if first else "-",
                (min(first) >= 20) if first else None))
    compile_ = [run.ratio(n, "jax compile", "fast compile") for n in names]
    compile_ = [r for r in compile_ if r is not None]
    out.append(("(not a target: compile cost alone, first call less steady call, vs JAX's)",
                f"worst {min(compile_):.3g}x" if compile_ else "-", None))
    a = run.median("program_size 1000 reps", "fast first")
    b = run.median("program_size 200 reps", "fast first")
    linear = a / b if a and b else None
    out.append(("tracing and lowering linear: 1000 reps within 6x of 200 (first call)",
                fmt_ratio(linear), (linear <= 6) if linear else None))
    eager = run.ratio("matmul_basic 8x16@16x4", "jax eager", "fast eager")
    out.append(("eager shard_map >= 100x faster than JAX's eager on the seed example",
                fmt_ratio(eager), (eager >= 100) if eager else None))
    scaled = run.median("mesh_scaling 512 devices", "fast steady")
    out.append(("512 simulated devices run the scaling scenario", fmt_time(scaled),
                True if scaled else None))
    records = run.extras.get("shape_only_lowering", [])
    records = [records] if isinstance(records, dict) else records
    measured = {r.get("devices"): r for r in records}
    if not any(devices in measured for devices in SHAPE_ONLY_TARGETS):
        small = next((r for r in records if r.get("seconds")), None)   # a quick run's mesh
        out.append(("shape-only lowering of 4,096, 16,384 and 65,536-device meshes under 1, 2 "
                    "and 10 s", fmt_time(small["seconds"]) + f" ({small['devices']} devices)"
                    if small else "-", None))
    for devices, limit in SHAPE_ONLY_TARGETS.items():
        record = measured.get(devices)
        if record is not None:
            seconds = record.get("seconds")
            out.append((f"shape-only lowering of a {devices:,}-device mesh under {limit:g} s",
                        fmt_time(seconds) if seconds else record.get("error", "-"),
                        bool(seconds and seconds < limit)))
    return out


def _met_word(target: str, met, no: str) -> str:
    if target.startswith("(not a target"):
        return "-"
    return {True: "yes", False: no, None: "not measured"}[met]


# --- outputs ----------------------------------------------------------------------------------

def write_all(run: Run, folder: str, console) -> None:
    os.makedirs(folder, exist_ok=True)
    console.print(rich_tables(run))
    with open(os.path.join(folder, "results.json"), "w") as out:
        json.dump(as_json(run), out, indent=1)
    with open(os.path.join(folder, "report.md"), "w") as out:
        out.write(markdown(run))
    plots = write_plots(run, folder)
    console.print(f"wrote {folder}/results.json, {folder}/report.md"
                  + (", " + ", ".join(plots) if plots else " (no plots: matplotlib missing)"))


def rich_tables(run: Run):
    from rich.console import Group
    from rich.table import Table
    times = Table(title="median time per call (one run, side by side)", title_justify="left")
    times.add_column("scenario", no_wrap=True)
    columns = [c for c in TIMES if run.jax or not c.startswith("jax")]
    for c in columns:
        times.add_column(c, justify="right")
    ratios = Table(title="ratios of medians (x: how many times faster; fast/numpy: slowdown)",
                   title_justify="left")
    ratios.add_column("scenario", no_wrap=True)
    for label, *_ in RATIOS:
        ratios.add_column(label, justify="right")
    for s in run.scenarios:
        times.add_row(s.name, *[fmt_time(run.median(s.name, c)) for c in columns])
        ratios.add_row(s.name, *[fmt_ratio(run.ratio(s.name, a, b)) for _, a, b in RATIOS])
    goals = Table(title="issue 6 targets", title_justify="left")
    for c in ("target", "measured", "met"):
        goals.add_column(c)
    for target, value, met in targets(run):
        goals.add_row(target, value, _met_word(target, met, "NO"))
    return Group(times, ratios, goals)


def as_json(run: Run) -> dict:
    scenarios = []
    for s in run.scenarios:
        cols = run.results.get(s.name, {})
        scenarios.append({
            "name": s.name, "group": s.group, "size": s.size, "size_label": s.size_label,
            "devices": s.devices, "big_blocks": s.big_blocks,
            "median_seconds": {c: run.median(s.name, c) for c in TIMES if c in cols},
            "samples": {c: cols[c] for c in TIMES if c in cols},
            "ratios": {label: run.ratio(s.name, a, b) for label, a, b in RATIOS}})
    return {"quick": run.quick, "seconds": run.seconds, "environment": run.environment,
            "scenarios": scenarios, "extras": run.extras, "notes": run.notes,
            "targets": [{"target": t, "measured": v, "met": m} for t, v, m in targets(run)]}


def markdown(run: Run) -> str:
    env = run.environment
    lines = ["# shardc benchmarks", "",
             f"{'Quick' if run.quick else 'Full'} run of {run.seconds:.0f} s on {env['cpus']} "
             f"CPUs, {env['date']}: Python {env['python']}, numpy {env['numpy']}, "
             f"JAX {env.get('jax') or 'not installed'}; numpy's BLAS on "
             f"{env.get('blas_threads') or 'its default number of'} thread(s), XLA on "
             f"{'one' if env.get('blas_threads') == '1' else 'its default number of'} "
             "thread(s). Medians of one run, side by side; ratios between medians of this run.",
             ""]
    columns = [c for c in TIMES if run.jax or not c.startswith("jax")]
    lines += ["## Median time per call", "",
              "| scenario | " + " | ".join(columns) + " |",
              "|---|" + "---:|" * len(columns)]
    for s in run.scenarios:
        lines.append(f"| {s.name} | " + " | ".join(fmt_time(run.median(s.name, c))
                                                  for c in columns) + " |")
    lines += ["", "## Ratios", "",
              "| scenario | " + " | ".join(label for label, *_ in RATIOS) + " |",
              "|---|" + "---:|" * len(RATIOS)]
    for s in run.scenarios:
        lines.append(f"| {s.name} | " + " | ".join(fmt_ratio(run.ratio(s.name, a, b))
                                                  for _, a, b in RATIOS) + " |")
    lines += ["", "## Targets (issue 6)", "", "| target | measured | met |", "|---|---|---|"]
    for target, value, met in targets(run):
        lines.append(f"| {target} | {value} | {_met_word(target, met, '**no**')} |")
    if run.notes:
        lines += ["", "## Notes", ""] + [f"- {k}: {v}" for k, v in sorted(run.notes.items())]
    lines += ["", "Columns: *first* = trace + lower (compile) + first run of a fresh jit; "
              "*steady* = a call of the compiled program with placed inputs; *compile* = first "
              "less steady; *eager* = the "
              "shard_map without jit; *numpy* = the same per-device block computations and "
              "the collective's data movement written directly in numpy.", ""]
    return "\n".join(lines)


def write_plots(run: Run, folder: str) -> list:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    lines = [("reference steady", "reference"), ("fast steady", "shardc fast"),
             ("numpy", "numpy lower bound"), ("jax steady", "JAX jit")]
    written = []
    groups = [("time_vs_size.png", "time against size",
               [g for g in ("matmul_basic", "collective", "program_size")]),
              ("time_vs_mesh_size.png", "time against mesh size", ["mesh_scaling"])]
    for filename, title, group_names in groups:
        panels = _panels(run, group_names)
        if not panels:
            continue
        cols = min(4, len(panels))
        rows = -(-len(panels) // cols)
        fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
        for ax in axes.flat[len(panels):]:
            ax.set_visible(False)
        for ax, (panel, scenarios) in zip(axes.flat, panels):
            for column, label in lines:
                points = [(s.size, run.median(s.name, column)) for s in scenarios]
                points = [(x, y) for x, y in points if y is not None]
                if points:
                    ax.plot(*zip(*points), marker="o", label=label)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(panel, fontsize=9)
            ax.set_xlabel({"collective": "block bytes", "matmul_basic": "n",
                           "program_size": "repetitions",
                           "mesh_scaling": "devices"}.get(scenarios[0].group, "size"))
            ax.set_ylabel("median seconds per call")
            ax.grid(True, which="both", alpha=0.3)
        axes[0][0].legend(fontsize=7)
        fig.suptitle(f"shardc: {title} (steady state)")
        fig.tight_layout()
        path = os.path.join(folder, filename)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def _panels(run: Run, groups) -> list:
    panels = []
    for group in groups:
        members = [s for s in run.scenarios if s.group == group]
        if group == "collective":
            for name in dict.fromkeys(s.name.split()[0] for s in members):
                panels.append((name, [s for s in members if s.name.split()[0] == name]))
        elif members:
            panels.append((group, members))
    return [(p, m) for p, m in panels if len(m) >= 1]
