"""The README as a new user reads it: its command-line walk-through runs as written, in order,
in an empty directory, and its sample output is what the command prints."""
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from shardc import cli

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text()


def _section(title: str) -> str:
    start = README.index(f"## {title}")
    end = README.find("\n## ", start + 1)
    return README[start:end if end >= 0 else None]


def _code_blocks(text: str) -> list:
    return re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S)


COMMANDS, SAMPLE = _code_blocks(_section("The command line"))[:2]


def test_the_readme_links_only_what_a_clone_has():
    assert "../shared" not in README and "SEMANTICS.md" not in README
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        assert (ROOT / target).exists(), target
    assert "## Errors" in (ROOT / "docs" / "semantics.md").read_text()


def test_make_test_lists_what_it_installs():
    pyproject = (ROOT / "pyproject.toml").read_text()
    extras = re.search(r'^test = \[(.*)\]$', pyproject, flags=re.M).group(1)
    names = re.findall(r'"([A-Za-z0-9_-]+)', extras)
    assert names and "pytest-xdist" in names
    line = next(l for l in README.splitlines() if l.startswith("make test"))
    for name in names:
        assert name in line, name


def test_the_command_line_walk_through_runs_in_order(tmp_path, monkeypatch, capsys):
    """Each line, in an empty directory: the shardc commands through ``shardc.cli.main``, the
    python line that writes the inputs with ``exec``; the placeholder line is skipped."""
    monkeypatch.chdir(tmp_path)
    ran = []
    for line in COMMANDS.strip().splitlines():
        argv = shlex.split(line.replace("examples/", f"{ROOT}/examples/"))
        if "YOUR_FILE.py:body" in line:
            continue
        if argv[0] == ".venv/bin/python":
            assert argv[1] == "-c"
            exec(argv[2], {})
        else:
            assert argv[0] == ".venv/bin/shardc"
            assert cli.main(argv[1:]) == 0, capsys.readouterr().err
        ran.append(argv[1])
    assert ran == ["lower", "lower", "-c", "run", "comm"]
    out = capsys.readouterr().out
    ones = np.ones((8, 16), np.float32) @ np.ones((16, 4), np.float32)
    assert f"output 0: float32[8, 4]\n{ones}" in out
    written = (tmp_path / "matmul.ir").read_text()     # the body and its mesh-level program
    assert written.count("mesh-level program:") == 1 and "\ndevice " not in written


def test_the_sample_output_is_what_lower_prints(capsys):
    assert cli.main(["lower", f"{ROOT}/examples/seed_tutorial.py:matmul_basic", "--args",
                     "f32[8,16],f32[16,4]", "--device", "3"]) == 0
    # run in this process, the top-level equation's source line is this test's call
    printed = [re.sub(r"  # test_readme\.py:\d+$", "", line)
               for line in capsys.readouterr().out.splitlines()]
    shown = [line for line in SAMPLE.strip().splitlines() if line.strip() != "..."]
    assert shown[0] == printed[0]                # the traced program comes first
    position = 0
    for line in shown:                            # every line shown, in the printed order
        position = printed.index(line, position) + 1


@pytest.mark.parametrize("placeholder", ["YOUR_FILE.py"])
def test_placeholders_are_marked(placeholder):
    assert f"`{placeholder}:body` stands for a file and function of your own" in README


def test_the_python_the_readme_asks_for_is_the_one_the_package_requires():
    # errors carry notes (PEP 678, Python 3.11) naming the equation, the device and the process
    required = re.search(r'requires-python = ">=(\d+\.\d+)"',
                         (ROOT / "pyproject.toml").read_text()).group(1)
    assert required == "3.11"
    assert f"`python3` ({required} or newer)" in README


def test_the_explicit_sharding_example_prints_what_the_readme_says(capsys):
    section = README[README.index("## Explicit sharding"):]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    shown = section.split("prints\n\n```\n", 1)[1].split("```", 1)[0]
    exec(compile(code, "README.md", "exec"), {})
    assert capsys.readouterr().out == shown
