"""The benchmark harness measures like against like: each scenario's numpy lower bound computes
what shardc's program computes (on the same inputs), and the report's derived figures and
target checks read the samples as documented. No timing is asserted."""
import numpy as np
import pytest

from benchmarks import measure, report
from benchmarks.scenarios import all_scenarios, by_name, shardc_api

CHECKED = ["matmul_basic 8x16@16x4", "psum 2^16", "pmax 2^16", "all_gather 2^16",
           "psum_scatter 2^16", "ppermute 2^16", "all_to_all 2^16", "mlp_step 256x512-512-10",
           "program_size 200 reps", "mesh_scaling 8 devices"]


def _blocks_to_global(blocks):
    return np.concatenate([np.asarray(b) for b in blocks])


def _bound_as_result(name, bound_out):
    """The lower bound's output in the shape of shardc's global result."""
    if name.startswith("matmul_basic"):
        return np.concatenate([bound_out[i, 0] for i in range(4)])
    if name.startswith(("psum ", "pmax ", "mesh_scaling")):
        assert all(np.array_equal(b, bound_out[0]) for b in bound_out)
        return bound_out[0]
    if name.startswith("mlp_step"):
        value, (w1, b1, w2, b2) = bound_out
        return [value, w1, b1, w2, b2]
    return _blocks_to_global(bound_out)


def _result_as_list(name, result):
    if name.startswith("mlp_step"):
        value, params = result
        return [value] + [leaf for pair in params for leaf in pair]
    return result


@pytest.mark.parametrize("name", CHECKED)
def test_lower_bound_computes_what_the_program_computes(name):
    import shardc
    scenario = by_name(name)
    fn, args = scenario.build(shardc_api())
    got = _result_as_list(name, shardc.jit(fn)(*args))
    want = _bound_as_result(name, scenario.lower_bound()())
    if isinstance(want, list):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g), w, rtol=2e-4, atol=2e-5)
    else:
        assert np.asarray(got).shape == np.shape(want)
        np.testing.assert_allclose(np.asarray(got), want, rtol=2e-4, atol=2e-5)


def test_scenario_names_are_unique_and_quick_ones_exist():
    names = [s.name for s in all_scenarios()]
    assert len(names) == len(set(names))
    assert {s.name for s in all_scenarios() if s.quick} <= set(names)
    with pytest.raises(KeyError):
        by_name("no such scenario")


def test_interleaved_sampling_takes_turns_within_the_budget():
    order = []
    budget = measure.Budget(seconds=0.0, min_reps=3, max_reps=5, first_reps=1, eager_reps=1)
    found = measure.interleaved({"a": lambda: order.append("a"),
                                 "b": lambda: order.append("b")}, budget=budget, warmup=1)
    assert order == ["a", "b"] + ["a", "b"] * 3          # warm-up, then turns
    assert [len(found["a"]), len(found["b"])] == [3, 3]
    assert all(t >= 0 for t in found["a"] + found["b"])


def _run(results, scenarios):
    return report.Run(scenarios=scenarios, results=results, notes={}, extras={}, quick=True,
                      jax=True, seconds=1.0, environment={})


def test_compile_column_is_first_less_steady_and_targets_read_medians():
    s = by_name("matmul_basic 8x16@16x4")
    run = _run({s.name: {"fast first": [3.0, 1.0, 2.0], "fast steady": [0.5, 0.5, 0.5],
                         "jax first": [40.0], "jax steady": [4.0]}}, [s])
    assert run.median(s.name, "fast compile") == pytest.approx(1.5)
    assert run.median(s.name, "jax compile") == pytest.approx(36.0)
    assert run.ratio(s.name, "jax compile", "fast compile") == pytest.approx(24.0)
    assert run.ratio(s.name, "jax steady", "fast steady") == pytest.approx(8.0)
    rows = {target: (value, met) for target, value, met in report.targets(run)}
    assert rows["first call >= 20x faster than JAX's first jit call on every scenario"] == (
        "worst 20x", True)
    assert rows["steady state no slower than JAX jit on any scenario"] == ("worst 8x", True)
    # a compile column is absent, not negative, when the first call was not the slower one
    run = _run({s.name: {"fast first": [1.0], "fast steady": [2.0]}}, [s])
    assert run.median(s.name, "fast compile") is None
    markdown = report.markdown(dataclass_with_env(run))
    assert "| matmul_basic 8x16@16x4 |" in markdown


def dataclass_with_env(run):
    run.environment = {"cpus": 2, "date": "today", "python": "3", "numpy": "2", "jax": None,
                       "blas_threads": "1"}
    return run


def test_mpi_python_cost_runs_every_collective_over_its_loopback_world():
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {k: v for k, v in os.environ.items() if k != "SHARDC_BACKEND"}
    env["PYTHONPATH"] = root
    done = subprocess.run([sys.executable, "-m", "benchmarks.mpi_python_cost", "--calls", "5"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    names = [line.split()[0] for line in done.stdout.splitlines()]
    assert names == ["psum", "all_gather", "psum_scatter", "ppermute", "all_to_all"]


def test_shape_only_rows_hold_each_mesh_to_its_target():
    run = _run({}, [])
    run.extras = {"shape_only_lowering": [{"devices": 4096, "seconds": 0.2},
                                          {"devices": 16384, "seconds": 2.5},
                                          {"devices": 65536, "seconds": None,
                                           "error": "over 600 s"}]}
    rows = {target: (value, met) for target, value, met in report.targets(run)}
    assert rows["shape-only lowering of a 4,096-device mesh under 1 s"] == ("200 ms", True)
    assert rows["shape-only lowering of a 16,384-device mesh under 2 s"][1] is False
    assert rows["shape-only lowering of a 65,536-device mesh under 10 s"] == ("over 600 s",
                                                                              False)
    run.extras = {"shape_only_lowering": [{"devices": 64, "seconds": 0.004}]}   # a quick run
    rows = {target: (value, met) for target, value, met in report.targets(run)}
    assert rows["shape-only lowering of 4,096, 16,384 and 65,536-device meshes under 1, 2 and "
                "10 s"] == ("4 ms (64 devices)", None)


def test_memory_rows_hold_steady_calls_to_outputs_plus_a_block_per_device_and_to_jax():
    from benchmarks import memory
    mib, block = 1 << 20, memory.MIB // 4
    rows = [{"case": "psum", "side": "shardc", "first": 2 * mib, "steady": mib},
            {"case": "psum", "side": "jax", "first": 30 * mib, "steady": 8 * mib},
            {"case": "20-step chain in shard_map", "side": "shardc", "first": 8 * mib,
             "steady": 17 * mib},
            {"case": "20-step chain in shard_map", "side": "jax", "first": 9 * mib,
             "steady": 8 * mib},
            {"case": "data-parallel training step", "side": "shardc", "error": "boom"}]
    lines = {line.split(" | ")[0].strip("| "): line.split(" | ")
             for line in memory.report(rows, block).splitlines() if line.startswith("| ")}
    # psum: outputs one block (1 MiB) + 8 blocks of temporaries = 9 MiB
    assert lines["psum"][1:] == ["2.0 MiB", "1.0 MiB", "30 MiB", "8.0 MiB", "9.0 MiB", "yes",
                                 "yes |"]
    # the chain returns 8 MiB: its target is 16 MiB, and it was above JAX's
    assert lines["20-step chain in shard_map"][5:] == ["16 MiB", "no", "no |"]
    assert "- data-parallel training step (shardc): boom" in memory.report(rows, block)


def test_memory_benchmark_measures_a_case_in_a_process_of_its_own(tmp_path):
    import json
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {k: v for k, v in os.environ.items() if k != "SHARDC_BACKEND"}
    done = subprocess.run([sys.executable, "-m", "benchmarks.memory", "--quick", "--no-jax",
                           "--only", "psum", "--out", str(tmp_path)],
                          cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads((tmp_path / "memory.json").read_text())["rows"]
    assert row["case"] == "psum" and row["side"] == "shardc", row
    assert row["first"] >= 0 and row["steady"] >= 0
    assert "| psum |" in (tmp_path / "memory.md").read_text()


def test_dispatch_benchmark_times_each_row_and_reports_ratios_to_targets(tmp_path):
    import json
    import os
    import subprocess
    import sys
    from benchmarks import dispatch
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {k: v for k, v in os.environ.items() if k != "SHARDC_BACKEND"}
    env["PYTHONPATH"] = root
    done = subprocess.run([sys.executable, "-m", "benchmarks.dispatch", "--quick", "--no-jax",
                           "--out", str(tmp_path)], cwd=root, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    samples = json.loads((tmp_path / "dispatch.json").read_text())["shardc"]
    assert len(samples["first"]) == 3 and len(samples["steady"]) == 150
    assert all(s > 0 for row in samples.values() for s in row)
    table = dispatch.report({"shardc": {"steady": [1e-5], "first": [1e-3], "eager": [1e-4]},
                             "jax": {"steady": [2e-4], "first": [4e-2], "eager": [6e-2]}})
    assert "| steady | 10.0 us | 200.0 us | 20.0x | 10x |" in table
    assert "| first | 1.00 ms | 40.00 ms | 40.0x | 50x |" in table
    assert "| eager | 100.0 us | 60.00 ms | 600.0x | 500x |" in table
