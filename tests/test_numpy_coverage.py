"""shardc.numpy's coverage of jax.numpy's public functions (tests/data/jax_numpy_api.txt).

The figure counts the names of the list's [functions] section that shardc.numpy provides as
callables; dtypes, classes, constants and index objects are listed apart and not counted.
Run with ``-s`` to see the figure and the missing names.
"""
from __future__ import annotations

import pathlib

import shardc.numpy as jnp

ROOT = pathlib.Path(__file__).parent.parent
API_LIST = ROOT / "tests" / "data" / "jax_numpy_api.txt"
# the recorded figures: what the README states; a function lost or gained changes both
RECORDED = (343, 343)
RECORDED_SUBMODULES = {"fft": (18, 18), "linalg": (31, 31)}


def api_sections() -> dict:
    """Section name -> the names listed under it."""
    sections: dict = {}
    current = None
    for line in API_LIST.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
            continue
        current.append(line)
    return sections


def coverage():
    functions = api_sections()["functions"]
    missing = [name for name in functions if not callable(getattr(jnp, name, None))]
    return len(functions) - len(missing), len(functions), missing


def test_the_list_is_well_formed():
    sections = api_sections()
    assert set(sections) == {"functions", "dtypes", "classes", "constants", "index objects",
                             "fft", "linalg"}
    names = [n for name, ns in sections.items() if name not in RECORDED_SUBMODULES for n in ns]
    assert len(names) == len(set(names)), "each name is listed once"
    for expected in ("argsort", "sort", "searchsorted", "concat", "take_along_axis"):
        assert expected in sections["functions"]
    assert len(sections["functions"]) > 300


def test_coverage_of_jax_numpy_functions():
    covered, total, missing = coverage()
    figure = covered / total
    report = (f"shardc.numpy covers {covered} of jax.numpy's {total} public functions "
              f"({figure:.1%}); missing: {', '.join(missing) or 'none'}")
    print(report)
    assert (covered, total) == RECORDED, report
    stated = (f"`shardc.numpy` covers {covered} of jax.numpy's {total} public functions "
              f"({figure:.1%}")
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert stated in readme, f"the README should say: {stated}"


def test_coverage_of_jax_numpy_fft_and_linalg():
    sections = api_sections()
    for name, module in (("fft", jnp.fft), ("linalg", jnp.linalg)):
        names = sections[name]
        missing = [n for n in names if not callable(getattr(module, n, None))]
        figure = (len(names) - len(missing), len(names))
        assert figure == RECORDED_SUBMODULES[name], f"jnp.{name} misses {missing}"
        stated = f"`jnp.{name}` {figure[0]} of {figure[1]}"
        readme = " ".join((ROOT / "README.md").read_text().split())
        assert stated in readme, f"the README should say: {stated}"


def test_report_of_the_other_names():
    """Not counted in the figure; printed for information (dtypes come with ir.dtypes)."""
    for section, names in api_sections().items():
        if section in ("functions", *RECORDED_SUBMODULES):
            continue
        missing = [n for n in names if not hasattr(jnp, n)]
        print(f"[{section}] {len(names) - len(missing)} of {len(names)}; missing: "
              f"{', '.join(missing) or 'none'}")
