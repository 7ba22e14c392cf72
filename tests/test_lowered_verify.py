"""Lowered programs are proven well formed before they run.

Edited module text (the same edit on every device, or an edit that makes devices disagree),
binary files and UTF-16 files: each is a ParseError or a VerifyError with a line and column,
through ``parse_module`` and through ``shardc run`` (exit 2, one line, no traceback, nothing
run). The fast backend hands a shard_map to the reference backend only for a declared reason.
"""
from __future__ import annotations

import re
from functools import partial
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shardc
import shardc.numpy as jnp
from ir import primitives as prims
from ir import collectives as coll
from ir.core import Aval, DeviceProgram, Eqn, Program, Var
from ir.parser import ParseError, decode_text, parse_module
from ir.printer import print_module
from ir.verify import VerifyError, check_coherence, verify_device_program
from shardc import lax
from shardc.cli import main
from shardc.sharding import PartitionSpec as P

SETTINGS = dict(derandomize=True, deadline=None)

# Auto axes: the modules reshard at shard_map boundaries (on Explicit axes types must match)
MESH = shardc.make_mesh((4, 2), ("x", "y"), axis_types=(shardc.sharding.AxisType.Auto,) * 2)


@partial(shardc.shard_map, mesh=MESH, in_specs=(P("x", "y"), P("y", None)),
         out_specs=(P("x", None), P("x", "y"), P(None, "y")))
def collectives(a, b):
    total = lax.psum(jnp.dot(a, b), "y")
    ring = lax.ppermute(a, "x", [(k, (k + 1) % 4) for k in range(4)])
    low = lax.pmin(ring, "x")
    gathered = lax.all_gather(b, "y", axis=0, tiled=True)
    scattered = lax.psum_scatter(gathered, "y", scatter_dimension=0, tiled=True)
    return total, low, scattered


A = np.arange(8 * 16, dtype=np.float32).reshape(8, 16)
B = np.arange(16 * 4, dtype=np.float32).reshape(16, 4) / 7


def _compiled():
    placed_a = shardc.device_put(A, shardc.NamedSharding(MESH, P("x")))
    return shardc.jit(collectives).lower(placed_a, B)


@pytest.fixture(scope="module")
def text():
    """The module as ``shardc lower -o`` writes it: the body and its mesh-level program."""
    return print_module(_compiled().module, with_source=True)


@pytest.fixture(scope="module")
def device_text():
    """The module with every device's program after its mesh-level program."""
    return print_module(_compiled().module, with_source=True, devices=True)


def _device_part(text, device):
    """The (start, end) of one device's program in module text."""
    start = text.index(f"\ndevice {device} at mesh")
    end = text.find("\ndevice ", start + 1)
    return start, len(text) if end < 0 else end


def _on_device(text, device, old, new):
    start, end = _device_part(text, device)
    part = text[start:end]
    assert old in part, old
    return text[:start] + part.replace(old, new, 1) + text[end:]


def _everywhere(old, new):
    def edit(text):
        assert old in text, old
        return text.replace(old, new)
    return edit


def _device_groups_of(text, axes):
    """The printed ``device_groups=...`` of nodes over ``axes``."""
    match = re.search(r"device_groups=(\(\(.*?\)\)) mesh_axes=" + re.escape(axes), text)
    return match.group(1)


# name -> (the text edited, edit, error type, words of the message); "mesh" is the text
# ``lower -o`` writes, "devices" the one with every device's program too.
EDITS = {
    "unknown reduction": ("mesh", _everywhere("reduction='sum'", "reduction='prod'"),
                          VerifyError, "unknown reduction='prod'"),
    "unknown reduction on devices": (
        "devices", _everywhere("reduction='sum'", "reduction='prod'"), VerifyError,
        "unknown reduction='prod'"),
    "unknown parameter": ("mesh", _everywhere("reduction='min'", "reduction='min' colour=3"),
                          VerifyError, "unknown parameter 'colour'"),
    "groups not matching axes": (
        "devices",
        _everywhere("all_reduce[device_groups=((0, 1), (2, 3), (4, 5), (6, 7)) "
                    "mesh_axes=('y',)",
                    "all_reduce[device_groups=((0, 1), (2, 3), (4, 5), (6, 7)) "
                    "mesh_axes=('x',)"),
        VerifyError, "do not match mesh_axes=('x',)"),
    "groups not a partition": ("devices", _everywhere("((0, 1), (2, 3), (4, 5), (6, 7))",
                                                      "((0, 1), (2, 3), (4, 5), (6, 6))"),
                               VerifyError, "do not match"),
    "device id out of range": ("devices", _everywhere("((0, 1), (2, 3), (4, 5), (6, 7))",
                                                      "((0, 1), (2, 3), (4, 5), (6, 70))"),
                               VerifyError, "names device 70, which is not on the mesh"),
    "groups in the mesh-level program": (
        "mesh", _everywhere("all_reduce[mesh_axes=('y',)",
                            "all_reduce[device_groups=((0, 1), (2, 3), (4, 5), (6, 7)) "
                            "mesh_axes=('y',)"),
        VerifyError, "device_groups"),
    "unknown mesh axis": ("mesh", _everywhere("mesh_axes=('y',)", "mesh_axes=('z',)"),
                          VerifyError, "names 'z', which is not an axis of the mesh"),
    "unknown axis in a type": ("mesh", _everywhere("{x,y}", "{x,q}"), VerifyError,
                               "varies over 'q', which is not an axis of the mesh"),
    "axis size": ("mesh", _everywhere("axis_size=2", "axis_size=4"), VerifyError,
                  "axis_size=4"),
    "permutation out of range": ("mesh", _everywhere("perm=((0, 1),", "perm=((0, 9),"),
                                 VerifyError, "out of range for a group of 4"),
    "permutation repeats a destination": (
        "mesh", _everywhere("perm=((0, 1),", "perm=((0, 2),"), VerifyError,
        "names a destination twice"),
    "front-end collective left": (
        "mesh", _everywhere("all_reduce[mesh_axes=('y',) reduction='sum']",
                            "psum[mesh_axes=('y',)]"),
        VerifyError, "front-end collective psum"),
    "front-end collective left on a device": (
        "devices",
        lambda text: _on_device(text, 5, "all_reduce[device_groups=((0, 1), (2, 3), (4, 5), "
                                         "(6, 7)) mesh_axes=('y',) reduction='sum']",
                                "psum[mesh_axes=('y',)]"),
        VerifyError, "front-end collective psum"),
    "one device reduces otherwise": (
        "devices", lambda text: _on_device(text, 3, "reduction='sum'", "reduction='max'"),
        VerifyError, "reach different communication nodes"),
    "one device permutes otherwise": (
        "devices", lambda text: _on_device(text, 6, "perm=((0, 1), (1, 2), (2, 3), (3, 0))",
                                           "perm=((0, 3), (1, 2), (2, 1), (3, 0))"),
        VerifyError, "reach different communication nodes"),
    "one device names another axis": (
        "devices", lambda text: _on_device(text, 2, "mesh_axes=('x',) perm",
                                           "mesh_axes=('y',) perm"),
        VerifyError, "do not match"),
    "device header out of range": ("devices", _everywhere("device 7 at", "device 70 at"),
                                   ParseError, "the device at mesh coordinates (3, 1) is 7"),
    "unknown primitive": ("mesh", _everywhere("all_slice[", "all_slices["), ParseError,
                          "unknown primitive 'all_slices'"),
    "a second mesh-level program": (
        "mesh", lambda text: text + "\n" + text[text.index("mesh-level program:"):],
        ParseError, "has one mesh-level program"),
    "mesh-level program after device programs": (
        "devices", lambda text: text + "\n" + text[text.index("mesh-level program:"):
                                                   text.index("\ndevice 0 at")] + "\n",
        ParseError, "has one mesh-level program"),
}


def _located(err, text):
    """The line the error points at, checked to be in ``text``."""
    assert err.line is not None and err.column is not None, err
    lines = text.split("\n")
    assert 1 <= err.line <= len(lines), err
    assert 1 <= err.column <= len(lines[err.line - 1]) + 1, err
    assert str(err).startswith(f"line {err.line}, column {err.column}: "), err
    # the message ends with the line and a caret under the column
    shown, caret = str(err).split("\n")[-2:]
    assert shown == "  " + lines[err.line - 1] and caret == "  " + " " * (err.column - 1) + "^"
    return lines[err.line - 1]


def test_the_module_text_runs_as_written(text):
    module = parse_module(text)
    assert print_module(module, with_source=True) == text
    got = shardc.jit(collectives)(shardc.device_put(A, shardc.NamedSharding(MESH, P("x"))), B)
    from runtime.reference import execute_module
    for out, want in zip(execute_module(module, [A, B]), got):
        np.testing.assert_array_equal(np.asarray(out), np.asarray(want))


def _edited(request, name) -> tuple:
    """The text an edit applies to, and the edited text."""
    which, edit, _, _ = EDITS[name]
    text = request.getfixturevalue("text" if which == "mesh" else "device_text")
    return text, edit(text)


@pytest.mark.parametrize("name", sorted(EDITS))
def test_edited_text_is_rejected_at_its_position(request, name):
    _, _, error, words = EDITS[name]
    text, edited = _edited(request, name)
    assert edited != text
    with pytest.raises(error) as info:
        parse_module(edited)
    assert words in str(info.value)
    line = _located(info.value, edited)
    if error is VerifyError and info.value.device is not None:
        assert f"device {info.value.device}: " in str(info.value)
    # the position is that of an edited line, or of the equation a disagreeing device reaches
    assert line not in text.split("\n") or name.startswith("one device") or \
        name == "device header out of range" or "mesh-level program" in name, line


def test_a_disagreeing_device_is_named(device_text):
    edited = _on_device(device_text, 3, "reduction='sum'", "reduction='max'")
    with pytest.raises(VerifyError) as info:
        parse_module(edited)
    err = info.value
    assert err.device in (2, 3) and "group (2, 3)" in str(err)
    assert "reduction='max'" in str(err) and "reduction='sum'" in str(err)
    start, end = _device_part(edited, err.device)
    offset = sum(len(l) + 1 for l in edited.split("\n")[:err.line - 1])
    assert start < offset < end         # the line is in the named device's program


def _run(tmp_path, data: bytes, capsys):
    (tmp_path / "a.npy").write_bytes(b"")
    np.save(tmp_path / "a.npy", A)
    np.save(tmp_path / "b.npy", B)
    path = tmp_path / "module.ir"
    path.write_bytes(data)
    code = main(["run", str(path), "--inputs", f"{tmp_path / 'a.npy'},{tmp_path / 'b.npy'}"])
    return code, capsys.readouterr()


@pytest.fixture
def nothing_runs(monkeypatch):
    import runtime.reference

    def refuse(*args, **kwargs):
        raise AssertionError("a rejected module ran")
    monkeypatch.setattr(runtime.reference, "execute_module", refuse)


@pytest.mark.parametrize("name", ["unknown reduction", "device id out of range",
                                  "one device reduces otherwise", "unknown parameter",
                                  "groups in the mesh-level program"])
def test_shardc_run_rejects_edited_text(request, tmp_path, capsys, nothing_runs, name):
    words = EDITS[name][3]
    code, out = _run(tmp_path, _edited(request, name)[1].encode(), capsys)
    assert code == 2, out
    assert "Traceback" not in out.err and words in out.err
    assert re.search(r"line [0-9]+, column [0-9]+: ", out.err), out.err
    assert out.err.count("\n") == 1


def test_shardc_run_runs_the_text(text, tmp_path, capsys):
    code, out = _run(tmp_path, text.encode(), capsys)
    assert code == 0, out.err
    assert "output 0: float32[8, 4]" in out.out


def test_utf16_text_is_rejected_at_its_first_byte(text, tmp_path, capsys, nothing_runs):
    with pytest.raises(ParseError) as info:
        decode_text(text.encode("utf-16"))
    assert (info.value.line, info.value.column) == (1, 1)
    code, out = _run(tmp_path, text.encode("utf-16"), capsys)
    assert code == 2 and "line 1, column 1: the text is not UTF-8" in out.err


def test_a_bad_byte_is_placed_by_line_and_column():
    with pytest.raises(ParseError) as info:
        decode_text("{ lambda ;\n  é. let\x00 \xff".encode("utf-8")[:-2] + b"\xc3(")
    assert (info.value.line, info.value.column) == (2, 11)


@settings(max_examples=40, **SETTINGS)
@given(st.binary(max_size=300))
def test_binary_files_are_rejected_with_a_position(data):
    with pytest.raises((ParseError, VerifyError)) as info:
        parse_module(decode_text(data))
    assert info.value.line is not None and info.value.column is not None


@settings(max_examples=40, **SETTINGS)
@given(st.data())
def test_truncated_text_is_rejected_with_a_position(text, data):
    # every cut but the last newline leaves a module missing a part
    cut = data.draw(st.integers(0, len(text.rstrip()) - 1))
    with pytest.raises((ParseError, VerifyError)) as info:
        parse_module(text[:cut])
    _located(info.value, text[:cut])


@settings(max_examples=30, **SETTINGS)
@given(st.data())
def test_truncated_text_with_device_programs_is_rejected_with_a_position(device_text, data):
    # cut inside the per-device programs: a device program or the count of them is short
    start = device_text.index("\ndevice 0 at") + 2        # the text says "device"
    cut = data.draw(st.integers(start, len(device_text.rstrip()) - 1))
    with pytest.raises((ParseError, VerifyError)) as info:
        parse_module(device_text[:cut])
    _located(info.value, device_text[:cut])


# --- the verifier on programs built in memory ----------------------------------------------------

def _device_program(device, eqns_of):
    x = Var(Aval((4,), np.dtype("float32"), frozenset({"x"})))
    out = Var(x.aval)
    program = Program([], [x], [Eqn(coll.all_reduce_node, [x], [out], eqns_of(device))], [out])
    return DeviceProgram(device, device, MESH.axis_names, MESH.coords(device), program)


def _reduce(axes):
    from ir.sharding import device_groups
    return lambda device: dict(mesh_axes=axes, reduction="sum",
                               device_groups=device_groups(MESH, axes))


def test_device_programs_from_the_lowering_verify():
    programs = [_device_program(d, _reduce(("y",))) for d in range(8)]
    for dp in programs:
        verify_device_program(dp, MESH)
    check_coherence(MESH, programs)


def test_a_device_missing_a_node_is_named():
    programs = [_device_program(d, _reduce(("y",))) for d in range(8)]
    x = programs[5].program.invars[0]
    programs[5] = DeviceProgram(5, 5, MESH.axis_names, MESH.coords(5),
                                Program([], [x], [], [x]))
    with pytest.raises(VerifyError, match="device 4 reaches all_reduce.*over group \\(4, 5\\), "
                                          "which device 5 never reaches") as info:
        check_coherence(MESH, programs)
    assert info.value.device == 4


def test_a_device_at_another_position_is_rejected():
    dp = _device_program(3, _reduce(("y",)))
    moved = DeviceProgram(3, 4, dp.mesh_axes, dp.coords, dp.program)
    with pytest.raises(VerifyError, match="device 3 is not at mesh position 4"):
        verify_device_program(moved, MESH)


# --- no silent fallback -----------------------------------------------------------------------

def _fast():
    from runtime.vectorized import FastBackend
    return FastBackend()


def _installed(backend):
    import contextlib
    from compiler.backend import get_backend, set_backend

    @contextlib.contextmanager
    def scope():
        before = get_backend()
        set_backend(backend)
        try:
            yield backend
        finally:
            set_backend(before)
    return scope()


def test_an_exception_of_a_stacked_run_propagates(monkeypatch):
    from runtime.vectorized import stacked_rules

    class Broken(Exception):
        pass

    def broken(types):
        raise Broken("a bug in a stacked rule")
    monkeypatch.setitem(stacked_rules, prims.sin_p, broken)
    f = shardc.jit(shardc.shard_map(lambda a: jnp.sin(a), mesh=MESH, in_specs=P("x"),
                                    out_specs=P("x")))
    with _installed(_fast()) as fast:
        with pytest.raises(Broken):
            f(np.ones(8, np.float32))
        assert fast.counts == {"stacked": 0, "reference": 0}


def test_a_declared_fallback_is_counted_and_explained(monkeypatch, capsys):
    from runtime import vectorized
    monkeypatch.setattr(vectorized, "EXPLAIN", True)

    def body(a):
        shardc.debug.print("block {}", a)
        return a * 2
    f = shardc.jit(shardc.shard_map(body, mesh=MESH, in_specs=P("x"), out_specs=P("x")))
    with _installed(_fast()) as fast:
        out = f(np.arange(8, dtype=np.float32))
    np.testing.assert_array_equal(np.asarray(out), np.arange(8) * 2)
    assert fast.counts == {"stacked": 0, "reference": 1}
    assert fast.fallbacks["debug_print"] == 1
    err = capsys.readouterr().err
    assert "runs on the reference backend: the body prints (debug.print)" in err
    assert "test_lowered_verify.py" in err


def test_no_runtime_module_swallows_exceptions():
    root = Path(__file__).resolve().parent.parent / "runtime"
    for path in sorted(root.glob("*.py")):
        source = path.read_text()
        assert not re.search(r"except\s+(Exception|BaseException)?\s*:", source), path.name


def test_every_primitive_has_a_signature():
    from ir.params import signature_of
    missing = sorted(prim.name for prim in prims.all_primitives() if signature_of(prim) is None)
    assert not missing, f"primitives without a signature (ir/params.py): {missing}"


# --- lowered programs against the body's lowering ------------------------------------------------

def _mesh_part(text):
    """The (start, end) of the mesh-level program in module text."""
    start = text.index("\nmesh-level program:")
    end = text.find("\ndevice ", start + 1)
    return start, len(text) if end < 0 else end


def test_the_written_module_holds_no_per_device_programs(text, device_text):
    assert "mesh-level program:" in text and "\ndevice " not in text
    assert "device_groups" not in text and "process_index" not in device_text.split("device 0")[1]
    derived = parse_module(text).all_shard_maps()[0]
    assert derived.mesh_program is not None and len(derived.device_programs) == 8
    assert derived.derived and not parse_module(device_text).all_shard_maps()[0].derived
    assert print_module(parse_module(text), with_source=True, devices=True) == device_text


def test_a_mesh_level_program_that_is_not_the_bodys_lowering_does_not_run(text, tmp_path,
                                                                          capsys, nothing_runs):
    from compiler.lowering import check_derived
    # well formed, but not what the body says (pmin)
    edited = text.replace("reduction='min'", "reduction='max'")
    parse_module(edited)                                    # verifies
    with pytest.raises(VerifyError) as info:
        parse_module(edited, check=check_derived)
    err = info.value
    assert err.device is None
    assert str(err).split("\n")[0].endswith(
        "shard_map equation 0: the mesh-level program is not the lowering of the body: "
        "\"h:f32[2,8]{y} = all_reduce[mesh_axes=('x',) reduction='max'] g\" where the body "
        "lowers to \"h:f32[2,8]{y} = all_reduce[mesh_axes=('x',) reduction='min'] g\""), str(err)
    line = _located(err, edited)
    assert "all_reduce[" in line and "reduction='max'" in line
    start, end = _mesh_part(edited)
    assert start < edited.index(line) < end
    code, out = _run(tmp_path, edited.encode(), capsys)
    assert code == 2 and "the mesh-level program is not the lowering of the body" in out.err


def test_per_device_programs_that_are_not_the_bodys_lowering_do_not_run(device_text, tmp_path,
                                                                         capsys, nothing_runs):
    from compiler.lowering import check_derived
    # consistent on every device, well formed and coherent, but not what the body says (pmin),
    # and not what the mesh-level program says either
    start, _ = _device_part(device_text, 0)
    edited = device_text[:start] + device_text[start:].replace("reduction='min'",
                                                               "reduction='max'")
    parse_module(edited)                                    # verifies
    with pytest.raises(VerifyError) as info:
        parse_module(edited, check=check_derived)
    err = info.value
    assert err.device == 0 and "the program of device 0 is not the lowering of the body" \
        in str(err)
    assert "reduction='max'" in str(err) and "reduction='min'" in str(err)
    line = _located(err, edited)
    assert "all_reduce[" in line and "reduction='max'" in line
    start, end = _device_part(edited, 0)
    assert edited.index(line, start) < end                  # device 0's program
    code, out = _run(tmp_path, edited.encode(), capsys)
    assert code == 2 and "is not the lowering of the body" in out.err


def test_per_device_programs_that_match_are_accepted_and_run_the_same(text, device_text):
    from compiler.lowering import check_derived
    from runtime.reference import execute_module
    with_devices = parse_module(device_text, check=check_derived)
    assert print_module(with_devices, with_source=True, devices=True) == device_text
    derived = parse_module(text, check=check_derived)
    for got, want in zip(execute_module(with_devices, [A, B]), execute_module(derived, [A, B])):
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes()


def test_an_older_text_without_a_mesh_level_program_is_checked(text, device_text, tmp_path,
                                                               capsys):
    from compiler.lowering import check_derived
    start, end = _mesh_part(device_text)
    older = device_text[:start] + device_text[end:]
    from runtime.reference import execute_module
    module = parse_module(older, check=check_derived)
    assert module.all_shard_maps()[0].mesh_program is None
    assert print_module(module, with_source=True) == older
    # what the older text runs, the mesh-level text runs, bit for bit
    for got, want in zip(execute_module(parse_module(text), [A, B]),
                         execute_module(module, [A, B])):
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes()
    start, _ = _device_part(older, 4)
    edited = older[:start] + older[start:].replace("reduction='min'", "reduction='max'", 1)
    with pytest.raises(VerifyError) as info:
        parse_module(edited, check=check_derived)
    assert info.value.device in (4, 5)                      # the coherence check pairs them
    code, out = _run(tmp_path, older.encode(), capsys)
    assert code == 0 and "output 0: float32[8, 4]" in out.out


def test_the_printed_module_is_its_own_derivation(text, device_text):
    from compiler.lowering import check_derived
    check_derived(parse_module(text))
    check_derived(parse_module(device_text))
