"""The shardc command, run as a subprocess: output, files and exit codes."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).parent
PROGRAMS = str(HERE / "cli_programs" / "programs.py")
ROOT = HERE.parent
MATMUL_ARGS = ["--args", "f32[8,16],f32[16,4]"]


def shardc(*argv, cwd=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "shardc.cli", *argv], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=120)


def test_help_everywhere():
    for argv in ([], ["lower"], ["check"], ["comm"], ["run"]):
        result = shardc(*argv, "--help")
        assert result.returncode == 0 and "usage: shardc" in result.stdout


def test_lower_prints_the_traced_and_one_device_program():
    result = shardc("lower", f"{PROGRAMS}:matmul_basic", *MATMUL_ARGS, "--device", "3")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("types on Mesh('x': 4, 'y': 2, axis_types=(Explicit, Explicit)):\n"
                          "{ lambda ; a:f32[8,16] b:f32[16,4]. let\n    c:f32[8@x,4] = shard_map[")
    assert "device 3 at mesh coordinates (x, y) = (1, 1):" in out
    assert ("all_reduce[device_groups=((0, 1), (2, 3), (4, 5), (6, 7)) mesh_axes=('y',) "
            "reduction='sum'] f  # sends 32 B, receives 32 B; programs.py:15") in out
    assert out.count("device ") == 1


def test_lower_all_devices_and_a_jitted_function():
    result = shardc("lower", f"{PROGRAMS}:jitted", *MATMUL_ARGS, "--all-devices")
    assert result.returncode == 0, result.stderr
    # two shard_maps: matmul_basic's, and the doubling of its split result (the partitioner's)
    assert [line for line in result.stdout.splitlines() if line.startswith("device ")] == [
        f"device {k} at mesh coordinates (x, y) = ({k // 2}, {k % 2}):" for k in range(8)] * 2
    assert "mul" in result.stdout


def test_lower_a_plain_body_with_mesh_and_specs():
    result = shardc("lower", f"{PROGRAMS}:double", "--args", "f32[8,4]", "--mesh", "x=4,y=2",
                    "--in-specs", "P('x','y')", "--out-specs", "P('x','y')", "--no-source")
    assert result.returncode == 0, result.stderr
    assert "in_specs=(P('x', 'y'),)" in result.stdout
    assert "      jaxpr={ lambda ; c:f32[2,2]{x,y}. let\n" in result.stdout
    assert "programs.py" not in result.stdout   # no source lines; traffic notes stay


def test_lower_json():
    result = shardc("lower", f"{PROGRAMS}:matmul_basic", *MATMUL_ARGS, "--format", "json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    (eqn,) = data["program"]["eqns"]
    assert eqn["primitive"] == "shard_map"
    body = eqn["params"]["jaxpr"]
    assert [e["primitive"] for e in body["eqns"]] == ["pvary", "dot_general", "psum"]
    assert data["devices"][0]["device_id"] == 0
    assert [e["primitive"] for e in data["devices"][0]["program"]["eqns"]][-1] == "all_reduce"


def test_check_passes_and_fails_with_exit_codes():
    ok = shardc("check", f"{PROGRAMS}:total", "--args", "f32[8]", "--mesh", "x=4,y=2",
                "--in-specs", "P('x')", "--out-specs", "P()")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("replication check passed: 1 shard_map(s)")
    assert "outputs f32[2] with out_specs P()" in ok.stdout
    bad = shardc("check", f"{PROGRAMS}:double", "--args", "f32[8]", "--mesh", "x=4,y=2",
                 "--in-specs", "P('x')", "--out-specs", "P()")
    assert bad.returncode == 1
    assert "and not {x}, but it was inferred to be possibly varying over {x}" in bad.stdout


def test_check_turns_the_check_on_for_a_function_that_had_it_off():
    result = shardc("check", f"{PROGRAMS}:unchecked_bad", "--args", "f32[8]")
    assert result.returncode == 1
    assert "shard_map applied to the function 'unchecked_bad'" in result.stdout


@pytest.mark.parametrize("argv, message", [
    (["lower", "nope.py:f"], "no such file: nope.py"),
    (["lower", f"{PROGRAMS}"], "expected FILE.py:FUNCTION"),
    (["lower", f"{PROGRAMS}:missing"], "has no function 'missing'"),
    (["lower", f"{PROGRAMS}:double", "--args", "f32[8", "--mesh", "x=4", "--in-specs", "P('x')",
      "--out-specs", "P('x')"], "bad shape 'f32[8': expected a type like f32[8,16]"),
    (["lower", f"{PROGRAMS}:double", "--args", "q8[8]", "--mesh", "x=4", "--in-specs", "P('x')",
      "--out-specs", "P('x')"], "unknown dtype 'q8'"),
    (["lower", f"{PROGRAMS}:double", "--args", "f32[8]", "--mesh", "x4", "--in-specs", "P('x')",
      "--out-specs", "P('x')"], "bad mesh 'x4': expected axis=size pairs like x=4,y=2"),
    (["lower", f"{PROGRAMS}:double", "--args", "f32[8]", "--mesh", "x=16", "--in-specs",
      "P('x')", "--out-specs", "P('x')"], "needs 16 devices, but only 8 are available"),
    (["lower", f"{PROGRAMS}:double", "--args", "f32[8]", "--mesh", "x=4", "--in-specs",
      "P(x)", "--out-specs", "P('x')"], "bad --in-specs 'P(x)'"),
    (["lower", f"{PROGRAMS}:double", "--args", "f32[8]", "--mesh", "x=4", "--in-specs",
      "__import__('os')", "--out-specs", "P('x')"], "each entry must be P(...)"),
    (["lower", f"{PROGRAMS}:double", "--args", "f32[8]", "--mesh", "x=4"],
     "a plain body needs --mesh, --in-specs and --out-specs together"),
    (["lower", f"{PROGRAMS}:matmul_basic", "--args", "f32[8,15],f32[16,4]"],
     "the passed args[0] of shape float32[8,15], where args[0] is bound to matmul_basic's parameter 'a_block', "
     "corresponds to in_specs[0] of value P('x', 'y'), which maps array axis 1 "
     "(of size 15) to mesh axis 'y' (of size 2), but 2 does not evenly divide 15"),
    (["lower", f"{PROGRAMS}:matmul_basic", *MATMUL_ARGS, "--device", "9"],
     "--device 9 is not in the mesh"),
    (["lower", f"{PROGRAMS}:matmul_basic", "--format", "yaml"], "invalid choice: 'yaml'"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
])
def test_bad_arguments_give_one_line_and_exit_2(argv, message):
    result = shardc(*argv)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 2   # argparse adds a usage line


def test_lower_to_a_file_then_run_it(tmp_path):
    module = tmp_path / "matmul.ir"
    lowered = shardc("lower", f"{PROGRAMS}:matmul_basic", *MATMUL_ARGS, "-o", str(module))
    assert lowered.returncode == 0, lowered.stderr
    text = module.read_text()
    # the body and its mesh-level program; every device's program is derived when read
    assert "shard_map equation 0 on Mesh('x': 4, 'y': 2, axis_types=(Explicit, Explicit))" in text
    assert text.count("mesh-level program:") == 1 and "\ndevice " not in text
    assert "device_groups" not in text
    a = np.arange(128, dtype=np.float32).reshape(8, 16)
    b = np.arange(64, dtype=np.float32).reshape(16, 4)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    inputs = f"{tmp_path / 'a.npy'},{tmp_path / 'b.npy'}"
    printed = shardc("run", str(module), "--inputs", inputs)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.startswith("output 0: float32[8, 4]\n[[ 4960.  5080.  5200.  5320.]")
    saved = shardc("run", str(module), "--inputs", inputs, "-o", str(tmp_path / "out.npz"))
    assert saved.returncode == 0, saved.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "out.npz")["arr_0"], a @ b)


def test_run_executes_an_edited_module(tmp_path):
    """The text is the program: editing it changes what runs (psum becomes pmax), when the
    body and the mesh-level program say the same; a mesh-level program the body does not
    lower to is rejected."""
    module = tmp_path / "m.ir"
    shardc("lower", f"{PROGRAMS}:total", "--args", "f32[8]", "--mesh", "x=4,y=2",
           "--in-specs", "P('x')", "--out-specs", "P()", "-o", str(module))
    lowered_only = module.read_text().replace("reduction='sum'", "reduction='max'")
    np.save(tmp_path / "x.npy", np.arange(8, dtype=np.float32))
    module.write_text(lowered_only)
    result = shardc("run", str(module), "--inputs", str(tmp_path / "x.npy"))
    assert result.returncode == 2 and "the mesh-level program is not the lowering of the " \
                                      "body" in result.stderr
    module.write_text(lowered_only.replace("psum[", "pmax["))
    result = shardc("run", str(module), "--inputs", str(tmp_path / "x.npy"))
    assert result.returncode == 0, result.stderr
    assert "[6. 7.]" in result.stdout


@pytest.mark.parametrize("setup, message", [
    ("missing", "no such file"),
    ("garbage", "line 1, column 1: unexpected"),
    ("few inputs", "takes 2 inputs, got 1"),
    ("wrong shape", "input 0 has type float32[16, 4] but the program takes f32[8,16]"),
    ("missing input", "no such input file"),
])
def test_run_bad_arguments(tmp_path, setup, message):
    module = tmp_path / "m.ir"
    shardc("lower", f"{PROGRAMS}:matmul_basic", *MATMUL_ARGS, "-o", str(module))
    np.save(tmp_path / "a.npy", np.zeros((8, 16), np.float32))
    np.save(tmp_path / "b.npy", np.zeros((16, 4), np.float32))
    a, b = str(tmp_path / "a.npy"), str(tmp_path / "b.npy")
    argv = {"missing": [str(tmp_path / "nope.ir"), "--inputs", a],
            "garbage": [str(tmp_path / "a.npy"), "--inputs", a],
            "few inputs": [str(module), "--inputs", a],
            "wrong shape": [str(module), "--inputs", f"{b},{a}"],
            "missing input": [str(module), "--inputs", str(tmp_path / "c.npy")]}[setup]
    if setup == "garbage":
        (tmp_path / "g.ir").write_text("this is not IR\n")
        argv = [str(tmp_path / "g.ir"), "--inputs", a]
    result = shardc("run", *argv)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_comm_table_and_json():
    table = shardc("comm", f"{PROGRAMS}:matmul_basic", *MATMUL_ARGS)
    assert table.returncode == 0, table.stderr
    assert "all_reduce" in table.stdout and "programs.py:15" in table.stdout
    data = json.loads(shardc("comm", f"{PROGRAMS}:matmul_basic", *MATMUL_ARGS, "--format",
                             "json", "--latency", "2e-6").stdout)
    reduces = [e for e in data["entries"] if e["kind"] == "all_reduce"]
    assert len(reduces) == 1 and reduces[0]["group_size"] == 2


def test_lower_dot():
    result = shardc("lower", f"{PROGRAMS}:ring", "--args", "f32[8]", "--mesh", "x=4",
                    "--in-specs", "P('x')", "--out-specs", "P('x')", "--format", "dot")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("digraph") == 2 and "ppermute" in result.stdout


def test_lower_takes_argument_types_split_over_the_mesh(tmp_path):
    """Explicit sharding: ``--args 'f32[8@x,4@y]'`` is an argument split over the file's mesh
    (or --mesh): the whole jitted program lowers to per-device blocks, and the reduction over
    the split dimension is an all_reduce under the line that asked for it."""
    result = shardc("lower", f"{PROGRAMS}:centered", "--args", "f32[8@x,4@y]")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("types on Mesh('x': 4, 'y': 2, axis_types=(Explicit, Explicit)):\n"
                          "{ lambda ; a:f32[8@x,4@y]. let\n")
    device = out[out.index("device 0 at mesh coordinates"):]
    assert "{ lambda ; a:f32[2,2]{x,y}. let" in device        # arrives as its block
    assert "mesh_axes=('x',) reduction='sum'] b  # sends 8 B, receives 12 B; programs.py:71" in \
        device
    assert "all_gather" not in device and "all_slice" not in device
    other = shardc("lower", f"{PROGRAMS}:centered", "--mesh", "x=2,y=4", "--args",
                   "f32[8@(x,y)]")
    assert other.returncode == 0, other.stderr
    assert "{ lambda ; a:f32[8@(x,y)]. let" in other.stdout
    bad = shardc("lower", f"{PROGRAMS}:centered", "--args", "f32[8@x,4@z]")
    assert bad.returncode == 2
    assert "bad shape 'f32[8@x,4@z]': mesh axis 'z' is not an axis of the mesh (x, y)" in \
        bad.stderr
    meshless = tmp_path / "meshless.py"
    meshless.write_text("import shardc\n\ndef double(a):\n    return a * 2\n")
    bad = shardc("lower", f"{meshless}:double", "--args", "f32[8@x]")
    assert bad.returncode == 2 and "a type split over mesh axes needs a mesh: pass --mesh" \
        in bad.stderr
