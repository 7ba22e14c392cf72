"""Every malformed ``shardc`` command line gets one clear line and exit code 2 (a usage error)
or 1 (a check that failed), never a traceback.

Most cases call ``shardc.cli.main`` in this process (the same code the command runs, without
starting Python each time); a few run the real command to see what a shell sees."""
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from shardc import cli

HERE = Path(__file__).parent
ROOT = HERE.parent
PROGRAMS = str(HERE / "cli_programs" / "programs.py")
MATMUL = f"{PROGRAMS}:matmul_basic"
MATMUL_ARGS = ["--args", "f32[8,16],f32[16,4]"]
PLAIN = ["--args", "f32[8]", "--mesh", "x=4,y=2", "--in-specs", "P('x')", "--out-specs", "P('x')"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Files the bad command lines point at: {name} in an argv is replaced by its path."""
    tmp = tmp_path_factory.mktemp("cli_errors")
    paths = {"tmp": tmp, "nodir": tmp / "missing" / "out.ir"}
    (tmp / "notes.txt").write_text("some notes\n")
    (tmp / "binary.py").write_bytes(b"\x00\x01\x02def f(): pass\n")
    (tmp / "syntax.py").write_text("def f(:\n")
    (tmp / "raises.py").write_text("raise RuntimeError('no import for you')\n")
    (tmp / "binary.ir").write_bytes(bytes(range(256)))
    (tmp / "utf16.ir").write_text("{ lambda ; . let\n  in () }\n", encoding="utf-16")
    (tmp / "empty.ir").write_text("")
    (tmp / "garbage.ir").write_text("this is not IR\n")
    (tmp / "junk.npy").write_text("junk\n")
    (tmp / "nul.ir").write_bytes(b"{ lambda ; . let\x00")
    (tmp / "truncated.npy").write_bytes(b"\x93NUMPY\x01\x00v\x00{'descr'")
    np.save(tmp / "objects.npy", np.array([1, "a"], dtype=object), allow_pickle=True)
    np.savez(tmp / "arrays.npz", a=np.zeros(3))
    np.save(tmp / "a.npy", np.zeros((8, 16), np.float32))
    np.save(tmp / "b.npy", np.zeros((16, 4), np.float32))
    np.save(tmp / "a_int.npy", np.zeros((8, 16), np.int32))
    assert cli.main(["lower", MATMUL, *MATMUL_ARGS, "-o", str(tmp / "m.ir")]) == 0
    for name in ("notes.txt", "binary.py", "syntax.py", "raises.py", "binary.ir", "utf16.ir",
                 "empty.ir", "garbage.ir", "junk.npy", "objects.npy", "arrays.npz", "a.npy",
                 "b.npy", "a_int.npy", "m.ir", "nul.ir", "truncated.npy"):
        paths[name] = tmp / name
    return {k: str(v) for k, v in paths.items()}


def fill(arg: str, files: dict) -> str:
    """``arg`` with each ``{name}`` replaced by the path of that file."""
    return re.sub(r"\{([\w.]+)\}", lambda m: files[m.group(1)], arg)


def run_main(argv, files, capsys):
    """(exit code, stdout, stderr) of ``shardc`` with ``argv``; any exception other than a
    clean exit fails the test (the command would have printed a traceback)."""
    argv = [fill(a, files) for a in argv]
    capsys.readouterr()
    try:
        code = cli.main(argv)
    except SystemExit as exit_:
        code = exit_.code
    out = capsys.readouterr()
    return code, out.out, out.err


def assert_usage_error(result, *fragments):
    code, out, err = result
    assert code == 2, (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("shardc") and "error: " in lines[0], err
    assert "Traceback" not in err and out == "", (out, err)
    for fragment in fragments:
        assert fragment in lines[0], (fragment, err)


# --- the cases of the issue, one by one --------------------------------------------------------------

@pytest.mark.parametrize("argv, fragments", [
    (["lower", "{notes.txt}:f"], ["notes.txt is not a Python file: expected FILE.py:FUNCTION"]),
    (["lower", f"{PROGRAMS}:double", "--args", "f32[8]", "--mesh", "x=0", "--in-specs", "P('x')",
      "--out-specs", "P('x')"], ["bad mesh 'x=0': Mesh needs at least one device"]),
    (["lower", f"{PROGRAMS}:double", "--args", "f32[8]", "--mesh", "x=4", "--in-specs",
      "P('z')", "--out-specs", "P('x')"], ["--in-specs names mesh axis 'z', but --mesh has "
                                           "axes x"]),
    (["lower", f"{PROGRAMS}:double", "--args", "f32[8]", "--mesh", "x=4", "--in-specs",
      "P('x')", "--out-specs", "P('z')"], ["--out-specs names mesh axis 'z'"]),
    (["comm", MATMUL, *MATMUL_ARGS, "--latency", "-1"],
     ["argument --latency: must be zero or more, got '-1'"]),
    (["comm", MATMUL, *MATMUL_ARGS, "--bandwidth", "0"],
     ["argument --bandwidth: must be more than zero, got '0'"]),
    (["comm", MATMUL, *MATMUL_ARGS, "--bandwidth", "nan"],
     ["argument --bandwidth: expected a finite number, got 'nan'"]),
    (["lower", MATMUL, *MATMUL_ARGS, "-o", "{nodir}"], ["-o ", "out.ir: no such directory"]),
    (["lower", MATMUL, *MATMUL_ARGS, "-o", "{tmp}"], ["is a directory; give a file name"]),
    (["run", "{binary.ir}"], ["binary.ir is not a module written by `shardc lower -o`: it is "
                              "not UTF-8 text (line ", "byte 0x80 cannot start a character"]),
    (["run", "{utf16.ir}"], ["utf16.ir is not a module written by `shardc lower -o`: it is not "
                             "UTF-8 text (line 1, column 1: ", "byte 0xff cannot start"]),
    (["run", "{m.ir}", "--inputs", "{arrays.npz},{b.npy}"],
     ["arrays.npz is an .npz archive; --inputs takes one .npy file per input"]),
    (["run", "{m.ir}", "--inputs", "{notes.txt},{b.npy}"],
     ["notes.txt is not a .npy file (it does not start with numpy's .npy header)"]),
    (["run", "{m.ir}", "--inputs", "{junk.npy},{b.npy}"], ["junk.npy is not a .npy file"]),
    (["run", "{m.ir}", "--inputs", "{objects.npy},{b.npy}"],
     ["objects.npy holds an object array (pickled Python objects), which shardc does not "
      "load"]),
    (["run", "{m.ir}", "--inputs", "{a.npy},{b.npy}", "-o", "{nodir}"],
     ["out.ir: no such directory"]),
    (["lower", MATMUL, *MATMUL_ARGS, "-o", "{tmp}/" + "x" * 300 + ".ir"],
     ["cannot write: File name too long"]),
    (["run", "{m.ir}", "--inputs", "{a.npy},{b.npy}", "-o", "{tmp}/" + "x" * 300 + ".npz"],
     ["cannot write: File name too long"]),
    (["lower", MATMUL, "--args", "f32[8,16]"],
     ["matmul_basic takes 2 arguments (a_block, b_block), but --args gives 1"]),
    (["lower", MATMUL, "--args", "f32[8,16],f32[16,4],f32[2]"],
     ["matmul_basic takes 2 arguments (a_block, b_block), but --args gives 3"]),
    (["lower", MATMUL, "--args", ""], ["matmul_basic takes 2 arguments (a_block, b_block), but "
                                       "--args gives none"]),
    (["lower", MATMUL], ["matmul_basic takes 2 arguments (a_block, b_block), but --args gives "
                         "none"]),
    (["lower", f"{PROGRAMS}:jitted", "--args", "f32[8,16]"],
     ["jitted takes 2 arguments (a, b), but --args gives 1"]),
    (["lower", f"{PROGRAMS}:double", "--args", "f32[8],f32[8]", "--mesh", "x=4", "--in-specs",
      "P('x')", "--out-specs", "P('x')"], ["double takes 1 argument (a), but --args gives 2"]),
    (["lower", f"{PROGRAMS}:double", "--args", "f32[8,x],f32[2]", "--mesh", "x=4",
      "--in-specs", "P('x')", "--out-specs", "P('x')"],
     ["bad shape 'f32[8,x]': dimension 'x' is not a non-negative integer"]),
    (["lower", MATMUL, *MATMUL_ARGS, "--mesh", "x=4", "--in-specs", "P('x'),P()",
      "--out-specs", "P('x')"], ["matmul_basic is a shard_map already (on Mesh('x': 4, "
                                 "'y': 2, axis_types=(Explicit, Explicit))); --mesh, --in-specs and --out-specs are for a plain "
                                 "body"]),
    (["check", MATMUL, *MATMUL_ARGS, "--in-specs", "P()"], ["is a shard_map already"]),
    (["lower", f"{PROGRAMS}:scaled", "--args", "f32[8]"],
     ["scaled takes keyword-only argument(s) scale, which --args cannot give"]),
    (["lower", f"{PROGRAMS}:optional_bias", "--args", "f32[8],f32[8],f32[8]"],
     ["optional_bias takes 1 to 2 arguments (a, bias), but --args gives 3"]),
    (["lower", f"{PROGRAMS}:summed"],
     ["summed takes at least 1 argument(s) (first, ...), but --args gives none"]),
    (["run", "{nul.ir}"], ["nul.ir is not a module written by `shardc lower -o`: it holds NUL "
                           "bytes"]),
    (["run", "{m.ir}", "--inputs", "{truncated.npy},{b.npy}"],
     ["truncated.npy is not a readable .npy file"]),
])
def test_issue_cases(argv, fragments, files, capsys):
    assert_usage_error(run_main(argv, files, capsys), *fragments)


DOUBLE_SPECS = ["--in-specs", "P('x')", "--out-specs", "P('x')"]


@pytest.mark.parametrize("command", ["lower", "check", "comm"])
@pytest.mark.parametrize("argv, fragments", [
    # a digit must be 0-9: str.isdigit and int() would read these as 8 and 4
    ([f"{PROGRAMS}:double", "--args", "f32[\uff18]", "--mesh", "x=4", *DOUBLE_SPECS],
     ["bad shape 'f32[\uff18]': dimension '\uff18' is not a non-negative integer (digits 0-9)"]),
    ([f"{PROGRAMS}:double", "--args", "f32[8,\u00b2]", "--mesh", "x=4", *DOUBLE_SPECS],
     ["dimension '\u00b2' is not a non-negative integer"]),
    ([f"{PROGRAMS}:double", "--args", "f32[8]", "--mesh", "x=\uff14", *DOUBLE_SPECS],
     ["bad mesh 'x=\uff14': expected axis=size pairs like x=4,y=2 (sizes in digits 0-9)"]),
    # an empty --mesh is a bad mesh, not a missing one
    ([f"{PROGRAMS}:double", "--args", "f32[8]", "--mesh", "", *DOUBLE_SPECS],
     ["bad mesh '': the mesh text is empty; expected axis=size pairs like x=4,y=2"]),
    ([f"{PROGRAMS}:double", "--args", "f32[8]", "--mesh", "  "],
     ["bad mesh '  ': the mesh text is empty"]),
    # a plain body given without its mesh: say to pass --mesh, not that an axis is unbound
    ([f"{PROGRAMS}:total", "--args", "f32[8]"],
     ["total uses mesh axis 'x' outside any shard_map; to lower it as a shard_map body, pass "
      "--mesh (e.g. --mesh x=4) with --in-specs and --out-specs"]),
    ([f"{PROGRAMS}:ring", "--args", "f32[8]"], ["ring uses mesh axis 'x' outside any shard_map",
                                                "pass --mesh"]),
])
def test_digits_empty_meshes_and_missing_meshes(command, argv, fragments, files, capsys):
    assert_usage_error(run_main([command, *argv], files, capsys), *fragments)


@pytest.mark.parametrize("argv, fragment", [
    (["lower", MATMUL, *MATMUL_ARGS, "--device", "\uff13"],
     "argument --device: expected a device number (digits 0-9), got '\uff13'"),
    (["comm", MATMUL, *MATMUL_ARGS, "--latency", "\uff11"],
     "argument --latency: expected a number, got '\uff11'"),
    (["comm", MATMUL, *MATMUL_ARGS, "--bandwidth", "\uff11e9"],
     "argument --bandwidth: expected a number, got '\uff11e9'"),
])
def test_numeric_options_take_ascii_digits(argv, fragment, files, capsys):
    assert_usage_error(run_main(argv, files, capsys), fragment)


def test_an_unknown_axis_under_a_given_mesh_keeps_its_own_message(files, capsys):
    # with --mesh given the body is inside a shard_map: the axis is missing from that mesh
    result = run_main(["lower", f"{PROGRAMS}:total", "--args", "f32[8]", "--mesh", "y=4",
                       "--in-specs", "P('y')", "--out-specs", "P()"], files, capsys)
    assert_usage_error(result, "UnknownAxisError: Found an unbound axis name: x")


def test_inputs_parsed_before_a_count_mismatch(files, capsys):
    """The argument count is checked against the function, not only against in_specs."""
    result = run_main(["lower", f"{PROGRAMS}:double", *PLAIN[:2], "--mesh", "x=4",
                       "--in-specs", "P('x'),P()", "--out-specs", "P('x')"], files, capsys)
    assert_usage_error(result, "--in-specs gives 2 spec(s) for 1 argument(s)")


def test_check_on_a_function_built_with_the_check_off_says_why_it_checks(files, capsys):
    code, out, err = run_main(["check", f"{PROGRAMS}:unchecked_bad", "--args", "f32[8]"],
                              files, capsys)
    assert code == 1 and err == ""
    first, rest = out.split("\n", 1)
    assert first == ("note: unchecked_bad is built with check_vma=False, so the static "
                     "replication check does not run when it is called; shardc check runs it "
                     "anyway")
    assert rest.startswith("replication check failed:")
    assert "and not {x}, but it was inferred to be possibly varying over {x}" in rest
    assert "consider disabling the check" not in rest
    assert ("If so, unchecked_bad turns the check off already (check_vma=False), and this "
            "report is what the check would reject.") in rest


def test_check_on_a_checked_function_keeps_the_usual_hint(files, capsys):
    code, out, _ = run_main(["check", f"{PROGRAMS}:double", "--args", "f32[8]", "--mesh",
                             "x=4,y=2", "--in-specs", "P('x')", "--out-specs", "P()"],
                            files, capsys)
    assert code == 1 and not out.startswith("note:")
    assert "consider disabling the check by passing the check_vma=False argument" in out


def test_valid_commands_still_work(files, capsys):
    code, out, _ = run_main(["comm", MATMUL, *MATMUL_ARGS, "--latency", "0", "--bandwidth",
                             "1e9"], files, capsys)
    assert code == 0 and "bandwidth: x=1e+09 B/s" in out
    out_file = os.path.join(files["tmp"], "out.npz")
    code, _, err = run_main(["run", "{m.ir}", "--inputs", "{a.npy},{b.npy}", "-o", out_file],
                            files, capsys)
    assert code == 0, err
    np.testing.assert_array_equal(np.load(out_file)["arr_0"], np.zeros((8, 4), np.float32))


@pytest.mark.parametrize("name, value, fragment", [
    ("SHARDC_BACKEND", "bogus", "SHARDC_BACKEND='bogus' is not a backend; expected one of "
                                "reference, fast, check"),
    ("SHARDC_NUM_DEVICES", "0", "SHARDC_NUM_DEVICES must ask for a positive number of devices"),
    ("SHARDC_THREADS", "many", "SHARDC_THREADS='many': expected a positive number of threads"),
    # digits are 0-9 only, as everywhere on the command line
    ("SHARDC_NUM_DEVICES", "\uff18", "SHARDC_NUM_DEVICES must ask for a positive number of "
                                      "devices, got '\uff18'"),
    ("SHARDC_THREADS", "\uff12", "SHARDC_THREADS='\uff12': expected a positive number of threads"),
])
def test_bad_environment(name, value, fragment, files, capsys, monkeypatch):
    monkeypatch.setenv(name, value)
    assert_usage_error(run_main(["lower", MATMUL, *MATMUL_ARGS], files, capsys), fragment)


# --- the real command, as a shell runs it --------------------------------------------------------------

def shardc_process(*argv, env=None):
    environment = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run([sys.executable, "-m", "shardc.cli", *argv], capture_output=True,
                          text=True, env=environment, timeout=120)


@pytest.mark.parametrize("argv, env, fragment", [
    (["lower", MATMUL, *MATMUL_ARGS], {"SHARDC_BACKEND": "bogus"},
     "SHARDC_BACKEND='bogus' is not a backend"),
    (["run", "{binary.ir}"], None, "is not UTF-8 text"),
])
def test_the_process_prints_one_line(argv, env, fragment, files):
    result = shardc_process(*[fill(a, files) for a in argv], env=env)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and fragment in result.stderr
    assert "Traceback" not in result.stderr


def test_importing_with_a_bad_backend_defers_the_error_to_first_use():
    code = ("import shardc.numpy as jnp\n"
            "try:\n    jnp.ones(3) + 1\nexcept ValueError as err:\n    print('raised:', err)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT), SHARDC_BACKEND="nope"),
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("raised: unknown shardc backend 'nope'; expected one of")


# --- generated: malformed invocations of every subcommand and option ----------------------------

def _generated() -> list:
    cases = []
    targets = ["nope.py:f", PROGRAMS, f"{PROGRAMS}:missing", f"{PROGRAMS}:mesh", f"{PROGRAMS}:",
               ":f", "{notes.txt}:f", "{binary.py}:f", "{syntax.py}:f", "{raises.py}:f",
               "{tmp}:f"]
    for command in ("lower", "check", "comm"):
        for target in targets:
            cases.append([command, target, *MATMUL_ARGS])
    bad_args = ["f32[8", "q8[8]", "f32[8,x]", "f32[8],", ",", "f32[-1]", "f32", "[8]",
                "f32[8]]", "F32[8]", "f32[8.5]", "f32[8],f32[8]", "f32[8];f32[8]", "f32[]x"]
    for command in ("lower", "check", "comm"):
        for args in bad_args:
            cases.append([command, f"{PROGRAMS}:double", "--args", args, *PLAIN[2:]])
    for args in ("f32[8,16]", "f32[8,16],f32[16,4],f32[1]", "f32[8,15],f32[16,4]",
                 "f32[8],f32[16,4]"):
        cases.append(["lower", MATMUL, "--args", args])
    bad_mesh = ["x4", "x=0", "x=16", "x=", "=4", "x=4,x=2", "x=-1", "x=4,,y=2", "1x=4", "x=a",
                "x=4;y=2", ""]
    for mesh in bad_mesh:
        cases.append(["lower", f"{PROGRAMS}:double", "--args", "f32[8]", "--mesh", mesh,
                      "--in-specs", "P('x')", "--out-specs", "P('x')"])
    bad_specs = ["P(x)", "P('z')", "__import__('os')", "P('x'", "P('x','x')", "P(1)",
                 "P(('x', 1))", "[P()]", "P(axis='x')", "lambda: 0", "", "P('x'),P()",
                 "P(('x','y'),'x')", "Q('x')"]
    for command in ("lower", "check", "comm"):
        for option in ("--in-specs", "--out-specs"):
            for spec in bad_specs:
                other = "--out-specs" if option == "--in-specs" else "--in-specs"
                cases.append([command, f"{PROGRAMS}:double", "--args", "f32[8]", "--mesh",
                              "x=4,y=2", option, spec, other, "P('x')"])
    for partial_options in (["--mesh", "x=4"], ["--in-specs", "P('x')"],
                            ["--out-specs", "P()"], ["--mesh", "x=4", "--out-specs", "P()"]):
        cases.append(["check", f"{PROGRAMS}:double", "--args", "f32[8]", *partial_options])
    for device in ("9", "-1", "x", "1.5", ""):
        cases.append(["lower", MATMUL, *MATMUL_ARGS, "--device", device])
    for fmt in ("yaml", "", "JSON"):
        cases.append(["lower", MATMUL, *MATMUL_ARGS, "--format", fmt])
    cases.append(["comm", MATMUL, *MATMUL_ARGS, "--format", "dot"])
    for output in ("{nodir}", "{tmp}"):
        cases.append(["lower", MATMUL, *MATMUL_ARGS, "-o", output])
    for option, values in (("--latency", ["-1", "nan", "inf", "-inf", "abc", ""]),
                           ("--bandwidth", ["0", "-5", "nan", "inf", "x", "", "0.0"])):
        for value in values:
            cases.append(["comm", MATMUL, *MATMUL_ARGS, option, value])
    for program in ("{tmp}/nope.ir", "{binary.ir}", "{utf16.ir}", "{garbage.ir}", "{a.npy}",
                    "{tmp}", "{notes.txt}"):
        cases.append(["run", program, "--inputs", "{a.npy},{b.npy}"])
    for inputs in ("", "{a.npy}", "{a.npy},{b.npy},{b.npy}", "{b.npy},{a.npy}",
                   "{a_int.npy},{b.npy}", "{arrays.npz},{b.npy}", "{junk.npy},{b.npy}",
                   "{objects.npy},{b.npy}", "{notes.txt},{b.npy}", "{a.npy},,{b.npy}",
                   "{tmp}/c.npy,{b.npy}", "{tmp},{b.npy}"):
        cases.append(["run", "{m.ir}", "--inputs", inputs])
    for output in ("{nodir}", "{tmp}"):
        cases.append(["run", "{m.ir}", "--inputs", "{a.npy},{b.npy}", "-o", output])
    cases += [[], ["frobnicate"], ["lower"], ["run"], ["lower", MATMUL, "--bogus"],
              ["run", "{m.ir}", "--latency", "1"], ["check", MATMUL, "--device", "1"],
              ["comm", MATMUL, "--all-devices"]]
    return cases


GENERATED = _generated()


def test_the_generated_set_is_large_and_covers_every_command_and_option():
    assert len(GENERATED) >= 100
    used = {a for argv in GENERATED for a in argv if a.startswith("-")}
    assert {"--args", "--mesh", "--in-specs", "--out-specs", "--device", "--format", "-o",
            "--latency", "--bandwidth", "--inputs"} <= used
    assert {argv[0] for argv in GENERATED if argv} == {"lower", "check", "comm", "run",
                                                       "frobnicate"}


@pytest.mark.parametrize("argv", GENERATED, ids=[" ".join(a)[-60:] for a in GENERATED])
def test_generated_malformed_invocation(argv, files, capsys):
    assert_usage_error(run_main(argv, files, capsys))


def test_check_passing_a_function_built_with_the_check_off(files, capsys):
    code, out, err = run_main(["check", f"{PROGRAMS}:unchecked_good", "--args", "f32[8]"],
                              files, capsys)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].startswith("note: unchecked_good is built with check_vma=False")
    assert lines[1] == "replication check passed: 1 shard_map(s), out_specs verified"


def test_check_note_is_not_printed_for_a_usage_error(files, capsys):
    result = run_main(["check", f"{PROGRAMS}:unchecked_bad", "--args", "f32[8],f32[8]"],
                      files, capsys)
    assert_usage_error(result, "unchecked_bad takes 1 argument (a), but --args gives 2")


def test_check_on_an_old_api_function_with_check_rep_false(files, capsys):
    code, out, _ = run_main(["check", f"{PROGRAMS}:old_unchecked", "--args", "f32[8]"],
                            files, capsys)
    assert code == 1
    assert out.startswith("note: _old_unchecked is built with check_rep=False")
    assert "passing the check_rep=False argument" not in out
    assert "(check_rep=False), and this report is what the check would reject." in out
