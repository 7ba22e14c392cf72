"""The IR text parser: print(parse(text)) == text, parsed programs run the same, and errors
name the line, the column and the offending token."""
import functools
import math
import re
from functools import partial
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardc
import shardc.numpy as jnp
from shardc import lax
from shardc.sharding import Mesh, NamedSharding, PartitionSpec as P
from compiler import tree
from ir import primitives as prims
from ir import collectives as coll
from ir.core import Aval, DeviceProgram, Eqn, Literal, Program, SourceInfo, Var
from ir.module import LoweredModule
from ir.parser import (DeviceRef, ParseError, parse_device_program, parse_module,
                       parse_program)
from ir.printer import print_device_program, print_module, print_program
from ir.verify import VerifyError, verify
from runtime.reference import eval_program, execute_module

GOLDEN = Path(__file__).parent / "golden"
GOLDEN_FILES = sorted(GOLDEN.glob("*.txt"))
SETTINGS = dict(derandomize=True, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Auto axes: the modules reshard at shard_map boundaries (on Explicit axes types must match)
MESH = shardc.make_mesh((4, 2), ("x", "y"), axis_types=(shardc.sharding.AxisType.Auto,) * 2)
SUB_1D = Mesh(np.array(shardc.devices()[2:6]), ("i",))
SUB_2D = Mesh(np.array(shardc.devices()[4:8]).reshape(2, 2), ("i", "j"))


def _runtime_device(device_id):
    return shardc.devices()[device_id]


def _parse_any(text, **kwargs):
    """The right parser for a golden file: a device program, a module, or a program."""
    if text.startswith("device "):
        return parse_device_program(text, **kwargs)
    if "\nshard_map equation " in text:
        return parse_module(text, **kwargs)
    return parse_program(text, **kwargs)


def _print_any(parsed, with_source=True):
    if isinstance(parsed, DeviceProgram):
        return print_device_program(parsed, with_source=with_source)
    if isinstance(parsed, LoweredModule):
        return print_module(parsed, with_source=with_source).rstrip("\n")
    return print_program(parsed, with_source=with_source)


# --- the golden corpus --------------------------------------------------------------------------

def test_the_golden_corpus_is_there():
    assert len(GOLDEN_FILES) >= 10


@pytest.mark.parametrize("path", GOLDEN_FILES, ids=lambda p: p.stem)
def test_golden_texts_round_trip(path):
    text = path.read_text()     # the printed text and a newline, as test_golden writes it
    parsed = _parse_any(text)
    assert _print_any(parsed) + "\n" == text
    # Without their comments they parse to the same program, less the source lines.
    bare = re.sub(r"(  # sends [^;\n]*); [^\n]*", r"\1", text)
    bare = re.sub(r"  # (?!sends )[^\n]*", "", bare)
    assert _print_any(_parse_any(bare), with_source=False) + "\n" == bare


@pytest.mark.parametrize("path", GOLDEN_FILES, ids=lambda p: p.stem)
def test_golden_source_comments_become_source_info(path):
    text = path.read_text()
    parsed = _parse_any(text)
    program = parsed.program if isinstance(parsed, (DeviceProgram, LoweredModule)) else parsed
    sources = [e.source for e in _all_eqns(program) if e.source is not None]
    assert sources and all((s.file == "test_golden.py" or s.file.startswith("train_"))
                           and s.line > 0
                           for s in sources)


def _all_eqns(program):
    for eqn in program.eqns:
        yield eqn
        for value in eqn.params.values():
            for sub in (value if isinstance(value, tuple) else (value,)):
                if isinstance(sub, Program):
                    yield from _all_eqns(sub)


# --- lowered modules ----------------------------------------------------------------------------

def _matmul(a, b):
    return shardc.shard_map(lambda x, y: lax.psum(jnp.dot(x, y), "y"), mesh=MESH,
                            in_specs=(P("x", "y"), P("y", None)), out_specs=P("x", None))(a, b)


def _one_collective(body, out_specs=P("x", "y")):
    return shardc.shard_map(body, mesh=MESH, in_specs=P("x", "y"), out_specs=out_specs,
                            check_vma=False)


def _all_collectives(x):
    """Every front-end collective over the (4, 2) mesh, with the replication check off."""
    return [
        _one_collective(lambda v: lax.all_gather(v, "x", axis=0, tiled=True))(x),
        _one_collective(lambda v: lax.all_gather(v, ("y", "x"), axis=1),
                        P("x", None, "y"))(x),
        _one_collective(lambda v: lax.psum_scatter(v, "y", scatter_dimension=0,
                                                   tiled=True))(x),
        _one_collective(lambda v: lax.ppermute(v, "x", [(k, (k + 1) % 4) for k in range(4)]))(x),
        _one_collective(lambda v: lax.all_to_all(v, "x", 1, 0, tiled=True))(x),
        _one_collective(lambda v: lax.pbroadcast(v, ("x", "y"), 5))(x),
        _one_collective(lambda v: lax.psum(v, ("x", "y")))(x),
    ]


def _checked_collectives(x):
    """Reductions, axis_index and the lifts the checker inserts, on a sub-mesh of devices 4-7."""
    def body(v):
        total = lax.psum(v, ("i", "j"))
        mean = lax.pmean(v, "i")
        top = lax.pmax(v, "j")
        low = lax.pmin(v, ("j", "i"))
        rank = lax.axis_index(("j", "i"))
        return total + mean + top + low + rank
    return shardc.shard_map(body, mesh=SUB_2D, in_specs=P("i", "j"), out_specs=P("i", "j"))(x)


def _control_flow(x):
    """scan, cond, fori_loop, while_loop, switch and debug_print on devices 2-5, checked at
    run time."""
    @partial(shardc.shard_map, mesh=SUB_1D, in_specs=P("i"), out_specs=P("i"),
             check_vma="runtime")
    def body(v):
        def step(carry, row):
            carry = carry + lax.psum(row, "i")
            return carry, carry * 2
        carry, ys = lax.scan(step, jnp.zeros(()), v)
        ys = lax.cond(carry > 0, lambda a: a + 1.0, lambda a: a - 1.0, ys)
        ring = [(k, (k + 1) % 4) for k in range(4)]
        ys = lax.fori_loop(0, 3, lambda k, a: lax.ppermute(a, "i", ring), ys)
        count = lax.while_loop(lambda c: c < 5, lambda c: c + 2, 0)
        ys = lax.switch(count, [lambda a: a * 3.0, lambda a: -a], ys)
        shardc.debug.print("carry={c} ys={}", ys, c=carry)
        return ys
    return body(jnp.sin(x) * -1.5 + 0.25)


WEIGHTS = jnp.arange(16.0).reshape(8, 2)


def _constraint_then_shard_map(x):
    """A sharding constraint on the host, a closed-over constant, two shard_maps in a row."""
    x = lax.with_sharding_constraint(x * 2, NamedSharding(MESH, P("x")))
    y = shardc.shard_map(lambda a, w: a @ w, mesh=MESH, in_specs=(P("x"), P()),
                         out_specs=P("x"))(x, WEIGHTS * 1.0)
    z = shardc.shard_map(lambda b: lax.psum(b, "x"), mesh=MESH, in_specs=P("x", "y"),
                         out_specs=P(None, "y"), check_vma=False)(y)
    return jnp.exp(-z)


AUTO = Mesh(np.array(shardc.devices()).reshape(4, 2), ("x", "y"))


def _placed(value, spec):
    return shardc.device_put(value, NamedSharding(MESH, spec))


MODULE_CASES = {
    "matmul_host_inputs": (_matmul, lambda: (jnp.arange(128.0).reshape(8, 16),
                                             jnp.arange(64.0).reshape(16, 4))),
    "matmul_placed": (_matmul, lambda: (_placed(jnp.arange(128.0).reshape(8, 16), P("x", "y")),
                                        _placed(jnp.arange(64.0).reshape(16, 4), P("y", None)))),
    "all_collectives_check_off": (_all_collectives, lambda: (
        _placed(jnp.arange(64.0).reshape(8, 8), P("x", "y")),)),
    "checked_collectives_sub_mesh": (_checked_collectives, lambda: (
        jnp.arange(16.0).reshape(4, 4),)),
    "control_flow_runtime_check": (_control_flow, lambda: (jnp.arange(8.0),)),
    "constraint_constant_two_shard_maps": (_constraint_then_shard_map, lambda: (
        jnp.arange(64.0).reshape(8, 8),)),
    "unconstrained_dimension_on_auto_axes": (
        lambda x: lax.with_sharding_constraint(x * 2, NamedSharding(AUTO, P("x", P.UNCONSTRAINED))),
        lambda: (shardc.device_put(jnp.arange(64.0).reshape(8, 8),
                                   NamedSharding(AUTO, P(None, "y"))),)),
}


def _lowered(case):
    fn, make_args = MODULE_CASES[case]
    args = make_args()
    compiled = shardc.jit(fn).lower(*args)
    return fn, args, compiled


@pytest.mark.parametrize("case", sorted(MODULE_CASES))
@pytest.mark.parametrize("with_source", [False, True])
def test_lowered_modules_round_trip(case, with_source):
    _, _, compiled = _lowered(case)
    text = print_module(compiled.module, with_source=with_source)
    parsed = parse_module(text)
    assert print_module(parsed, with_source=with_source) == text
    if with_source:
        _assert_same_module(parsed, compiled.module)


@pytest.mark.parametrize("case", sorted(MODULE_CASES))
def test_parsed_modules_run_like_jit(case, capsys):
    fn, args, compiled = _lowered(case)
    want = tree.tree_leaves(shardc.jit(fn)(*args))
    parsed = parse_module(print_module(compiled.module), device=_runtime_device)
    inputs = list(compiled.closed.consts) + tree.tree_leaves(args)
    got = execute_module(parsed, inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    printed = capsys.readouterr().out
    # Parsed or not, the program prints the same lines (debug_print in the control flow case).
    assert printed.count("carry=") == (8 if case == "control_flow_runtime_check" else 0)


def test_module_devices_come_from_the_factory():
    _, _, compiled = _lowered("control_flow_runtime_check")
    text = print_module(compiled.module)
    default = parse_module(text).all_shard_maps()[0]
    assert [type(d) for d in default.mesh.devices.flat] == [DeviceRef] * 4
    assert [str(d) for d in default.mesh.devices.flat] == [f"cpu:{k}" for k in range(2, 6)]
    # (the first shard_map computes the elementwise prelude on blocks: propagation lays it
    # out as the checked one's in_specs ask)
    runtime = parse_module(text, device=_runtime_device).all_shard_maps()[-1]
    assert list(runtime.mesh.devices.flat) == shardc.devices()[2:6]
    assert runtime.runtime_check and not any(dp.show_vma for dp in runtime.device_programs)
    assert [dp.position for dp in runtime.device_programs] == [0, 1, 2, 3]
    assert [dp.device_id for dp in runtime.device_programs] == [2, 3, 4, 5]


def test_module_device_factory_errors_pass_through():
    _, _, compiled = _lowered("matmul_host_inputs")

    class NoSuchDevice(Exception):
        pass

    def device(device_id):
        raise NoSuchDevice(device_id)

    with pytest.raises(NoSuchDevice):
        parse_module(print_module(compiled.module), device=device)


def _assert_same_module(parsed, original):
    assert sorted(parsed.shard_maps) == sorted(original.shard_maps)
    _assert_same_program(parsed.program, original.program)
    for index in original.shard_maps:
        got, want = parsed.shard_maps[index], original.shard_maps[index]
        assert got.mesh == want.mesh
        assert got.in_shardings == want.in_shardings and got.out_specs == want.out_specs
        assert got.runtime_check == want.runtime_check
        assert len(got.device_programs) == len(want.device_programs)
        for g, w in zip(got.device_programs, want.device_programs):
            assert (g.device_id, g.position, g.mesh_axes, g.coords, g.show_vma) == (
                w.device_id, w.position, w.mesh_axes, w.coords, w.show_vma)
            _assert_same_program(g.program, w.program)


def _assert_same_program(got, want):
    """Same structure, and every parameter of the same Python type and value."""
    assert len(got.constvars) == len(want.constvars) and got.consts == []
    assert _types(got.invars) == _types(want.invars)
    assert len(got.eqns) == len(want.eqns)
    for g, w in zip(got.eqns, want.eqns):
        assert g.primitive is w.primitive and str(g.source) == str(w.source)
        assert _types(g.invars) == _types(w.invars) and _types(g.outvars) == _types(w.outvars)
        assert sorted(g.params) == sorted(w.params)
        for key in w.params:
            _assert_same_value(g.params[key], w.params[key])


def _types(atoms):
    """Kinds and types of atoms, and the values of literals (by repr, so that nan == nan)."""
    return [(type(a), a.aval.shape, a.aval.dtype,
             repr(a.value.item()) if isinstance(a, Literal) else None) for a in atoms]


def _assert_same_value(got, want):
    if isinstance(want, Program):
        assert isinstance(got, Program)
        _assert_same_program(got, want)
    elif isinstance(want, (np.dtype, type)):
        assert isinstance(got, np.dtype) and got == np.dtype(want)
    elif isinstance(want, tuple):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want):
            _assert_same_value(g, w)
    elif isinstance(want, float) and math.isnan(want):
        assert isinstance(got, float) and math.isnan(got)
    elif isinstance(want, NamedSharding):
        assert got == want and tuple(got.spec) == tuple(want.spec)
    else:
        assert type(got) is type(want) and got == want


# --- parsed programs run like the traced ones -------------------------------------------------

def _numerics(x, y, k):
    z = jnp.sin(x) @ y.T + jnp.inf * 0 - 1
    z = jnp.where(z > 0, z, -z) / 3
    idx = jnp.argmax(z, axis=1)
    w = z.at[:, 1].set(jnp.cumsum(z, axis=0)[:, 0]).reshape(-1)[::2]
    total = lax.fori_loop(0, 3, lambda i, acc: acc + jnp.sum(w) * i, 0.0)
    picked = lax.cond(total > 1, lambda a: a[1:], lambda a: a[:-1], w)
    bits = shardc.random.uniform(k, (3,))
    gathered = w[jnp.array([3, 0, 3])].at[jnp.array([1, 1])].add(2.5)
    return (picked, idx.astype(jnp.float32) + jnp.arange(4), bits, jnp.concatenate([w, w]),
            gathered)


NUMERIC_ARGS = (np.linspace(-2, 2, 24, dtype=np.float32).reshape(4, 6),
                np.arange(30, dtype=np.float32).reshape(5, 6) / 7,
                np.array([1, 2], dtype=np.uint32))


def _closure(x):
    return x * WEIGHTS[:, :1].reshape(-1) + jnp.float32(np.nan)


@pytest.mark.parametrize("fn, args", [
    (_numerics, NUMERIC_ARGS),
    (_closure, (np.arange(8, dtype=np.float32),)),
    (lambda a, b: (a & b, ~a, a < b, jnp.where(a, 1, 2)),
     (np.array([True, False, True]), np.array([False, False, True]))),
    (lambda a: lax.scan(lambda c, r: (c * r, c + r), jnp.ones(3, jnp.int32), a, reverse=True),
     (np.arange(12, dtype=np.int32).reshape(4, 3),)),
], ids=["numerics", "closure_constant", "booleans", "reverse_scan"])
def test_parsed_programs_evaluate_like_the_traced_ones(fn, args):
    closed = shardc.make_jaxpr(fn)(*args)
    text = closed.pretty_print(with_source=True)
    parsed = parse_program(text)
    assert parsed.consts == [] and len(parsed.constvars) == len(closed.jaxpr.constvars)
    assert print_program(parsed, with_source=True) == text
    _assert_same_program(parsed, closed.jaxpr)
    want = eval_program(closed.jaxpr, list(args), closed.consts)
    # A parsed program has no constant values: the caller supplies them.
    got = eval_program(parsed, list(args), closed.consts)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
        assert np.asarray(g).dtype == np.asarray(w).dtype


# --- names, types and literals the grammar must not confuse -----------------------------------

def test_variables_may_be_called_like_keywords_and_floats():
    text = ("{ lambda in:f32[]; let:f32[] lambda:f32[]. let\n"
            "    inf:f32[] = add in let\n"
            "    nan:f32[] = mul inf inf:f32[]\n"
            "    True:f32[] = sub nan -inf:f32[]\n"
            "    debug_print[fmt='{} {}'] nan in\n"
            "  in (inf, nan:f32[], True, lambda) }")
    prog = parse_program(text)
    inf, nan, true = (e.outvars[0] for e in prog.eqns[:3])
    assert prog.eqns[0].invars == [prog.constvars[0], prog.invars[0]]
    assert prog.eqns[1].invars[0] is inf and np.isposinf(prog.eqns[1].invars[1].value)
    assert np.isneginf(prog.eqns[2].invars[1].value)
    assert prog.outvars[0] is inf and np.isnan(prog.outvars[1].value)
    assert prog.outvars[2] is true and prog.outvars[3] is prog.invars[1]
    assert prog.eqns[3].invars == [nan, prog.constvars[0]] and prog.eqns[3].outvars == []


def test_the_printer_names_a_variable_in_and_it_reads_back():
    x = Var(Aval((2,), np.dtype("float32")))
    chain = [x]
    eqns = []
    for _ in range(230):
        out = Var(x.aval)
        eqns.append(Eqn(prims.neg_p, [chain[-1]], [out], {}))
        chain.append(out)
    prog = Program([], [x], eqns, [chain[221], chain[-1]])
    text = print_program(prog)
    assert "\n    in:f32[2] = neg im\n" in text and text.endswith("  in (in, iw) }")
    assert print_program(parse_program(text)) == text


@pytest.mark.parametrize("literal, dtype, value", [
    ("2.0:f32[]", "float32", 2.0), ("-1:i32[]", "int32", -1), ("True:bool[]", "bool", True),
    ("False:bool[]", "bool", False), ("inf:f32[]", "float32", np.inf),
    ("-inf:f16[]", "float16", -np.inf), ("1e-05:f32[]", "float32", np.float32(1e-05)),
    ("255:u8[]", "uint8", 255), ("-0.0:f64[]", "float64", -0.0),
    ("(1+2j):c64[]", "complex64", 1 + 2j), ("-3j:c128[]", "complex128", complex(0, -3)),
    ("7:f32[]", "float32", 7.0), ("2.5:f32[]{x,y}", "float32", 2.5),
])
def test_literals(literal, dtype, value):
    text = "{ lambda ; . let\n  in (" + literal + ",) }"
    (lit,) = parse_program(text).outvars
    assert isinstance(lit, Literal) and lit.aval.dtype == np.dtype(dtype)
    assert repr(lit.value.item()) == repr(np.asarray(value, dtype).item())
    if literal.endswith("{x,y}"):
        assert lit.aval.vma == frozenset({"x", "y"})


def test_nan_literal():
    (lit,) = parse_program("{ lambda ; . let\n  in (nan:f32[],) }").outvars
    assert np.isnan(lit.value) and lit.aval.dtype == np.float32


def test_param_values():
    text = ("{ lambda ; a:f32[4]. let\n"
            "    b:f32[4] = neg[d=float32 e=-inf f=inf g=None h=(\"it's\", 'a\\'\"', '\\n') "
            "i=((0, 1), (2,), ()) j=P('x', None, ('y', 'z'), 'w', None) k=1.5e+20 "
            "l=Mesh('i': 4, axis_types=(Auto,), device_ids=(2, 3, 4, 5)) "
            "m=NamedSharding(Mesh('x': 2, axis_types=(Auto,)), P('x')) "
            "n=Mesh(axis_types=()) o=-12 p=Mesh(axis_types=(), device_ids=(3,))] a\n"
            "  in (b,) }")
    # neg takes none of these parameters: read the text without the verifier, which would
    # reject them (test_unknown_parameters_are_rejected)
    from ir.parser import _Builder, _parse
    program = _Builder(text).program(_parse(text, "program_text").children[0])
    params = program.eqns[0].params
    assert params["d"] == np.dtype("float32") and isinstance(params["d"], np.dtype)
    assert params["e"] == -math.inf and params["f"] == math.inf and params["g"] is None
    assert params["h"] == ("it's", "a'\"", "\n")
    assert params["i"] == ((0, 1), (2,), ())
    assert params["j"] == P("x", None, ("y", "z"), ("w",), ())
    assert params["k"] == 1.5e20 and params["o"] == -12
    assert params["l"].flat_device_ids == (2, 3, 4, 5) and params["l"].shape == {"i": 4}
    assert params["m"] == NamedSharding(Mesh(np.array([DeviceRef(0), DeviceRef(1)]), ("x",)),
                                        P("x"))
    assert params["n"].shape == {} and params["n"].flat_device_ids == (0,)
    assert params["p"].shape == {} and params["p"].flat_device_ids == (3,)
    assert print_program(program) == text


def test_unknown_parameters_are_rejected():
    text = ("{ lambda ; a:f32[4]. let\n"
            "    b:f32[4] = neg[colour=1] a\n"
            "  in (b,) }")
    with pytest.raises(VerifyError) as info:
        parse_program(text)
    assert (info.value.line, info.value.column) == (2, 20)
    assert "unknown parameter 'colour' (neg takes no parameters)" in str(info.value)


def test_strings_are_decoded_not_evaluated():
    text = ("{ lambda ; . let\n"
            "    debug_print[fmt='__import__(\"os\").system(\"false\")'] \n"
            "  in () }")
    (eqn,) = parse_program(text).eqns
    assert eqn.params["fmt"] == '__import__("os").system("false")'


def test_device_programs_show_vma_when_some_type_does():
    text = (GOLDEN / "matmul_basic_device3_placed.txt").read_text()
    assert parse_device_program(text).show_vma
    text = (GOLDEN / "collective_psum_xy.txt").read_text()
    assert not parse_device_program(text).show_vma


def test_device_program_header_and_position():
    text = (GOLDEN / "matmul_basic_device5_host_inputs.txt").read_text()
    dp = parse_device_program(text)
    assert (dp.device_id, dp.position, dp.mesh_axes, dp.coords) == (5, 5, ("x", "y"), (2, 1))
    # On a mesh of other devices the position comes from the coordinates.
    mesh = Mesh(np.array([DeviceRef(k) for k in (9, 8, 7, 6, 5, 4, 3, 2)]).reshape(4, 2),
                ("x", "y"))
    assert parse_device_program(text.replace("device 5", "device 4"), mesh=mesh).position == 5
    with pytest.raises(ParseError, match="the device at mesh coordinates .* is 4") as err:
        parse_device_program(text, mesh=mesh)
    assert (err.value.line, err.value.column, err.value.token) == (1, 8, "5")


def test_traffic_notes_are_skipped_and_sources_kept():
    text = (GOLDEN / "matmul_basic_device5_host_inputs.txt").read_text()
    eqns = parse_device_program(text).program.eqns
    assert [e.source for e in eqns[:3]] == [None, None, None]
    assert eqns[3].source == SourceInfo("test_golden.py", 28)
    assert eqns[4].source == SourceInfo("test_golden.py", 29)


def test_text_with_carriage_returns_and_blank_lines():
    text = (GOLDEN / "matmul_basic_traced.txt").read_text()
    windows = "\r\n" + text.replace("\n", "\r\n") + "\r\n"
    assert print_program(parse_program(windows), with_source=True) + "\n" == text


# --- random programs: print -> parse -> print ---------------------------------------------------

DTYPES = [np.dtype(n) for n in ("float32", "float16", "float64", "int32", "int8", "uint8",
                                "uint32", "bool", "complex64")]
AXES = ("x", "y", "z")
IDENTIFIERS = st.from_regex(r"[a-z][a-z0-9_]{0,4}", fullmatch=True)


@st.composite
def avals(draw, scalar=False):
    dtype = draw(st.sampled_from(DTYPES))
    shape = () if scalar else tuple(draw(st.lists(st.integers(0, 4), max_size=3)))
    vma = draw(st.frozensets(st.sampled_from(AXES)))
    return Aval(shape, dtype, vma)


def scalars(dtype):
    if dtype == np.bool_:
        return st.booleans()
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return st.integers(int(info.min), int(info.max))
    if np.issubdtype(dtype, np.complexfloating):
        return st.complex_numbers(width=dtype.itemsize * 8)
    return st.floats(width=dtype.itemsize * 8)


@st.composite
def literals(draw, dtype=None):
    aval = draw(avals(scalar=True))
    if dtype is not None:
        aval = aval.update(dtype=dtype)
    if draw(st.booleans()):
        aval = aval.strip_vma()
    return Literal(draw(scalars(aval.dtype)), aval)


@st.composite
def meshes(draw):
    names = draw(st.lists(IDENTIFIERS, min_size=0, max_size=3, unique=True))
    sizes = [draw(st.integers(1, 3)) for _ in names]
    size = math.prod(sizes)
    ids = draw(st.sampled_from([list(range(size)), list(range(3, 3 + size)),
                                list(range(size))[::-1]]))
    devices = np.empty(size, dtype=object)
    devices[:] = [DeviceRef(k) for k in ids]
    return Mesh(devices.reshape(sizes), names)


@st.composite
def specs(draw, unconstrained=True):
    """A spec; ``unconstrained``: its entries may be P.UNCONSTRAINED (which only a mesh with
    Auto axes accepts in a NamedSharding)."""
    entries = [st.none(), IDENTIFIERS, st.lists(IDENTIFIERS, max_size=3).map(tuple)]
    entry = st.one_of(*entries, *([st.just(P.UNCONSTRAINED)] if unconstrained else []))
    return P(*draw(st.lists(entry, max_size=3)))


@st.composite
def named_shardings(draw, unconstrained=True):
    """A NamedSharding: a mesh and a spec naming some of its axes, each at most once (JAX's
    NamedSharding refuses others); ``unconstrained``: P.UNCONSTRAINED may end it (where the
    mesh has axes: they are Auto)."""
    mesh = draw(meshes())
    axes = draw(st.permutations(mesh.axis_names))
    entries: list = []
    for a in axes[:draw(st.integers(0, len(axes)))]:
        if entries and isinstance(entries[-1], tuple) and draw(st.booleans()):
            entries[-1] = entries[-1] + (a,)
        else:
            entries.append(draw(st.sampled_from([a, (a,)])))
        if draw(st.booleans()):
            entries.append(None)
    if unconstrained and mesh.axis_names and draw(st.booleans()):
        entries.append(P.UNCONSTRAINED)
    return NamedSharding(mesh, P(*entries))


def param_values():
    leaf = st.one_of(
        st.integers(-10 ** 20, 10 ** 20), st.floats(), st.text(max_size=8), st.booleans(),
        st.none(), st.sampled_from(DTYPES), specs(), meshes(),
        named_shardings(unconstrained=False))
    return st.recursive(leaf, lambda kids: st.lists(kids, max_size=3).map(tuple), max_leaves=6)


FILES = st.text(st.characters(blacklist_characters="\n\r", blacklist_categories=("Cs",)),
                max_size=12)


@st.composite
def sources(draw):
    if draw(st.booleans()):
        return None
    return SourceInfo(draw(FILES), draw(st.integers(0, 10 ** 6)))


@st.composite
def equations(draw, env, depth):
    """One equation over the variables in ``env``; its params are checked by the shape rule."""
    kind = draw(st.sampled_from(["unary", "binary", "compare", "convert", "reshape",
                                 "transpose", "reduce", "iota", "print", "constraint", "cond",
                                 "scan"]))
    x = draw(st.sampled_from(env)) if env else None
    if x is None or kind == "iota":
        shape = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)))
        # iota counts in numbers only (JAX's rule): no bool
        params = dict(dtype=draw(st.sampled_from([d for d in DTYPES if d != np.bool_])),
                      shape=shape,
                      dimension=draw(st.integers(0, len(shape) - 1)))
        return _eqn(prims.iota_p, [], params, draw)
    if kind == "unary":
        # abs takes signed and inexact values only (JAX's rule)
        signed = x.aval.dtype != np.bool_ and not np.issubdtype(x.aval.dtype, np.unsignedinteger)
        unary = [prims.neg_p, prims.sin_p] + ([prims.abs_p] if signed else [])
        return _eqn(draw(st.sampled_from(unary)), [x], {}, draw, keep_vma=x)
    if kind in ("binary", "compare"):
        same = [v for v in env if v.aval.dtype == x.aval.dtype and v.aval.shape == x.aval.shape]
        y = draw(st.one_of(st.sampled_from(same), literals(x.aval.dtype)))
        prim = draw(st.sampled_from([prims.add_p, prims.max_p] if kind == "binary"
                                    else [prims.lt_p, prims.eq_p]))
        return _eqn(prim, [x, y] if draw(st.booleans()) else [y, x], {}, draw, keep_vma=x)
    if kind == "convert":
        return _eqn(prims.convert_element_type_p, [x],
                    dict(new_dtype=draw(st.sampled_from(DTYPES))), draw)
    if kind == "reshape":
        return _eqn(prims.reshape_p, [x], dict(new_sizes=(x.aval.size,)), draw)
    if kind == "transpose":
        perm = tuple(draw(st.permutations(range(x.aval.ndim))))
        return _eqn(prims.transpose_p, [x], dict(permutation=perm), draw)
    if kind == "reduce":
        axes = tuple(sorted(draw(st.sets(st.integers(0, max(x.aval.ndim - 1, 0)))))) \
            if x.aval.ndim else ()
        return _eqn(prims.reduce_sum_p, [x], dict(axes=axes), draw)
    if kind == "print":
        args = draw(st.lists(st.sampled_from(env), max_size=3))
        names = tuple(draw(st.lists(IDENTIFIERS, max_size=len(args), unique=True)))
        return _eqn(prims.debug_print_p, args, dict(fmt=draw(st.text()), arg_names=names),
                    draw)
    if kind == "constraint":
        sharding = draw(named_shardings())
        return _eqn(prims.sharding_constraint_p, [x], dict(sharding=sharding), draw)
    if depth >= 2:
        return _eqn(prims.neg_p, [x], {}, draw)
    operands = draw(st.lists(st.sampled_from(env), max_size=2))
    if kind == "cond":
        index = draw(st.one_of(literals(np.dtype("int32")),
                               st.sampled_from([v for v in env if v.aval.dtype == np.int32]
                                               or [Literal(0, Aval((), np.int32))])))
        index = index if index.aval.shape == () else Literal(1, Aval((), np.int32))
        branches = tuple(draw(st.lists(sub_programs([v.aval for v in operands], depth + 1),
                                       min_size=1, max_size=3)))
        return _eqn(prims.cond_p, [index] + operands, dict(branches=branches), draw)
    body = draw(sub_programs([v.aval for v in operands], depth + 1))
    params = dict(jaxpr=body, length=draw(st.integers(0, 3)), reverse=draw(st.booleans()),
                  num_consts=0, num_carry=draw(st.integers(0, len(body.outvars))))
    return _eqn(prims.scan_p, operands, params, draw)


def _eqn(prim, invars, params, draw, keep_vma=None):
    from ir.shapes import out_avals
    outs = out_avals(prim, [a.aval for a in invars], params)
    vma = keep_vma.aval.vma if keep_vma is not None else frozenset()
    outvars = [Var(a.update(vma=vma | draw(st.frozensets(st.sampled_from(AXES)))))
               for a in outs]
    return Eqn(prim, invars, outvars, params, draw(sources()))


@st.composite
def sub_programs(draw, in_avals, depth):
    return draw(programs(depth, in_avals=in_avals, with_consts=False))


@st.composite
def programs(draw, depth=0, in_avals=None, with_consts=True):
    constvars = [Var(draw(avals())) for _ in range(draw(st.integers(0, 2)))] \
        if with_consts else []
    if in_avals is None:
        in_avals = draw(st.lists(avals(), max_size=3))
    invars = [Var(a) for a in in_avals]
    env = constvars + invars
    eqns = []
    for _ in range(draw(st.integers(0, 6 if depth == 0 else 2))):
        eqn = draw(equations(env, depth))
        eqns.append(eqn)
        env = env + eqn.outvars
    atoms = st.one_of(st.sampled_from(env), literals()) if env else literals()
    outvars = draw(st.lists(atoms, max_size=3))
    return Program(constvars, invars, eqns, outvars)


@settings(max_examples=120, **SETTINGS)
@given(programs(), st.booleans())
def test_random_programs_round_trip(program, with_source):
    verify(program)
    text = print_program(program, with_source=with_source)
    parsed = parse_program(text)
    verify(parsed)
    assert print_program(parsed, with_source=with_source) == text


@settings(max_examples=60, **SETTINGS)
@given(programs(), st.integers(0, 7), st.booleans(), st.booleans())
def test_random_device_programs_round_trip(program, device_id, show_vma, with_source):
    # A lowered communication node, so that traffic notes come before the source.
    x = Var(Aval((4,), np.dtype("float32")))
    out = Var(x.aval)
    groups = ((device_id, 8 + device_id),)
    program.invars.append(x)
    program.eqns.append(Eqn(coll.all_reduce_node, [x], [out], dict(
        mesh_axes=("x",), reduction="sum", device_groups=groups), SourceInfo("f.py", 3)))
    dp = DeviceProgram(device_id, device_id, ("x", "y"), (device_id // 2, device_id % 2),
                       program, show_vma=show_vma)
    text = print_device_program(dp, with_source=with_source)
    parsed = parse_device_program(text)
    assert print_device_program(parsed, with_source=with_source) == text
    assert (parsed.device_id, parsed.mesh_axes, parsed.coords) == (
        dp.device_id, dp.mesh_axes, dp.coords)


@settings(max_examples=60, **SETTINGS)
@given(st.dictionaries(IDENTIFIERS, param_values(), max_size=3))
def test_random_param_values_round_trip(params):
    # Values of every kind, on an equation read without the verifier (neg takes no
    # parameters: parse_program rejects them, test_unknown_parameters_are_rejected).
    from ir.parser import _Builder, _parse
    x = Var(Aval((2,), np.dtype("float32")))
    program = Program([], [x], [Eqn(prims.neg_p, [x], [Var(x.aval)], params)], [])
    text = print_program(program)
    parsed = _Builder(text).program(_parse(text, "program_text").children[0])
    assert print_program(parsed) == text


# --- malformed texts ----------------------------------------------------------------------------

BASE = ("{ lambda ; a:f32[2,8] b:f32[8,4]. let\n"
        "    c:f32[2,4] = dot_general[dimension_numbers=(((1,), (0,)), ((), ())) "
        "preferred_element_type=float32] a b  # f.py:3\n"
        "    d:f32[2,4] = mul c 2.0:f32[]\n"
        "  in (d,) }")


def _with(old, new, text=BASE):
    assert text.count(old) == 1, old
    return text.replace(old, new)


def _sharded(value):
    return ("{ lambda ; a:f32[8]. let\n"
            f"    b:f32[8] = sharding_constraint[sharding={value}] a\n"
            "  in (b,) }")


MALFORMED = {
    # name: (text, line, column, token, part of the message)
    "missing let": (_with(". let", "."), 1, 34, "\n", "expected one of: 'let'"),
    "missing lambda": (_with("{ lambda ;", "{ ;"), 1, 3, ";", "expected one of: 'lambda'"),
    "bad type": (_with("a:f32[2,8]", "a:f33[2,8]"), 1, 14, "f33", "unknown dtype 'f33'"),
    "unclosed type bracket": (_with("f32[8,4].", "f32[8,4."), 1, 32, ".",
                              "expected one of: ',', '@', ']'"),
    # `a` reads as the next parameter's name, so the error is at `b`.
    "unclosed param bracket": (_with("=float32]", "=float32"), 2, 106, "b",
                               "unexpected 'b'; expected one of: '='"),
    "unknown primitive": (_with("dot_general", "dot_generl"), 2, 18, "dot_generl",
                          "unknown primitive 'dot_generl'"),
    "undefined variable": (_with("mul c", "mul q"), 3, 22, "q",
                           "variable 'q' is used before it is defined"),
    "use before definition": (_with("] a b", "] a d"), 2, 107, "d",
                              "variable 'd' is used before it is defined"),
    "duplicate binder": (_with("b:f32[8,4]", "a:f32[8,4]"), 1, 23, "a",
                         "variable 'a' is defined twice (first at line 1, column 12)"),
    "bad literal": (_with("2.0:f32[]", "2.5:i32[]"), 3, 24, "2.5",
                    "the literal '2.5' is not a value of type i32[]"),
    "literal out of range": (_with("2.0:f32[]", "256:u8[]"), 3, 24, "256",
                             "the literal '256' is not a value of type u8[]"),
    "literal too big for f16": (_with("2.0:f32[]", "1e+300:f16[]"), 3, 24, "1e+300",
                                "is not a value of type f16[]"),
    "literal with a shape": (_with("2.0:f32[]", "2.0:f32[3]"), 3, 28, "f32[3]",
                             "a literal is a scalar, not f32[3]"),
    "malformed number": (_with("2.0:f32[]", "2.0.0:f32[]"), 3, 27, ".",
                         "unexpected '.'; expected one of: ':'"),
    "trailing garbage": (BASE + " junk", 4, 13, "junk", "expected one of: end of input"),
    "unexpected end": (BASE[:-2], 4, 10, "", "unexpected end of input; expected one of: '}'"),
    "bad character": (_with("] a b", "] a @b"), 2, 107, "@", "unexpected '@'"),
    "one output without comma": (_with("in (d,)", "in (d)"), 4, 8, ")",
                                 "unexpected ')'; expected one of: ','"),
    "negative dimension": (_with("b:f32[8,4]", "b:f32[-8,4]"), 1, 29, "-8",
                           "a dimension is a non-negative integer"),
    "unknown dtype param": (_with("=float32", "=float33"), 2, 96, "float33",
                            "unknown name 'float33'"),
    "duplicate param": (_with("preferred_element_type", "dimension_numbers"), 2, 73,
                        "dimension_numbers", "parameter 'dimension_numbers' is given twice"),
    "bad comment": (_with("# f.py:3", "# f.py"), 2, 110, "# f.py",
                    "a comment holds the source location as file:line"),
    "bad string": (_with("=float32", "='\\N'"), 2, 96, "'\\N'", "bad string"),
    "bad mesh axes": (_sharded("NamedSharding(Mesh('x': 4, 'x': 2), P('x'))"), 2, 59,
                      "Mesh('x': 4, 'x': 2)", "bad mesh: Mesh axis names must be unique"),
    "bad mesh device ids": (_sharded("NamedSharding(Mesh('x': 4, device_ids=(1, 2)), P())"),
                            2, 59, "Mesh('x': 4, device_ids=(1, 2))",
                            "the mesh has 4 positions but names 2 device ids"),
    "repeated mesh device": (_sharded("NamedSharding(Mesh('x': 2, device_ids=(1, 1)), P())"),
                             2, 59, "Mesh('x': 2, device_ids=(1, 1))", "must be distinct"),
    "empty mesh axis": (_sharded("NamedSharding(Mesh('x': 0), P())"), 2, 69, "0",
                        "a mesh axis has a positive size"),
    "huge mesh": (_sharded("NamedSharding(Mesh('x': 1000, 'y': 1000), P())"), 2, 59,
                  "Mesh('x': 1000, 'y': 1000)", "a mesh of 1000000 devices is too large"),
    "bad spec": (_sharded("NamedSharding(Mesh('x': 4), P(x))"), 2, 75, "x",
                 "expected one of: '(', ')', 'None', 'UNCONSTRAINED', a string"),
    "mesh axis name unquoted": (_sharded("NamedSharding(Mesh(x: 4), P())"), 2, 64, "x",
                                "expected one of: ')', ',', 'axis_types', 'device_ids', a string"),
    "closure over the enclosing program": (
        "{ lambda ; a:i32[] b:f32[2]. let\n"
        "    c:f32[2] = cond[\n"
        "      branches=(\n"
        "        { lambda ; d:f32[2]. let\n"
        "            e:f32[2] = add d b\n"
        "          in (e,) }\n"
        "      )\n"
        "    ] a b\n"
        "  in (c,) }", 5, 30, "b", "variable 'b' is used before it is defined"),
    "program tuple closed on the program's line": (
        "{ lambda ; a:i32[] b:f32[2]. let\n"
        "    c:f32[2] = cond[\n"
        "      branches=(\n"
        "        { lambda ; d:f32[2]. let\n"
        "            e:f32[2] = neg d\n"
        "          in (e,) })\n"
        "    ] a b\n"
        "  in (c,) }", 6, 20, ")", "unexpected ')'; expected one of: end of line"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_texts_name_line_column_and_token(name):
    text, line, column, token, message = MALFORMED[name]
    with pytest.raises(ParseError) as err:
        parse_program(text)
    assert (err.value.line, err.value.column, err.value.token) == (line, column, token)
    assert str(err.value).startswith(f"line {line}, column {column}: ")
    assert message in str(err.value)
    assert isinstance(err.value, ValueError)


def test_syntax_errors_list_what_was_expected():
    with pytest.raises(ParseError) as err:
        parse_program(_with("(d,)", "(d,"))
    assert str(err.value) == ("line 4, column 10: unexpected '}'; expected one of: ')', "
                              "a complex literal, a float, a literal, a name, an integer\n"
                              "    in (d, }\n"
                              "           ^")
    assert err.value.expected == (
        "')'", "a complex literal", "a float", "a literal", "a name", "an integer")
    with pytest.raises(ParseError) as err:
        parse_program(_with("a:f32[2,8]", "a:f33[2,8]"))
    assert "f32" in err.value.expected and err.value.expected == tuple(sorted(err.value.expected))


@pytest.mark.parametrize("text, message", [
    (_with("] a b", "] a"), r"equation 0 \(dot_general\)"),
    (_with("d:f32[2,4] = mul", "d:f32[4,2] = mul"),
     r"equation 1 \(mul\): output has type f32\[4,2\] but its shape rule gives f32\[2,4\]"),
    (_with("d:f32[2,4] = mul", "d:f32[2,4] e:f32[] = mul"),
     r"equation 1 \(mul\): expected 1 outputs, got 2"),
    (_with("mul c 2.0:f32[]", "mul c 2:i32[]"), r"equation 1 \(mul\): mul requires operands"),
])
def test_ill_typed_programs_raise_verify_errors_naming_the_equation(text, message):
    with pytest.raises(VerifyError, match=message):
        parse_program(text)


def _device_text():
    return (GOLDEN / "psum_f2_device2.txt").read_text()


@pytest.mark.parametrize("text, line, column, token, message", [
    (_device_text().replace("(1, 0):", "(1):"), 1, 39, "(1)",
     "1 coordinates for 2 mesh axes"),
    (_device_text().replace("(i, j)", "(i, i)"), 1, 30, "(i, i)", "a mesh axis is named twice"),
    (_device_text().replace("device 2 at", "device two at"), 1, 8, "two",
     "expected one of: an integer"),
])
def test_malformed_device_headers(text, line, column, token, message):
    with pytest.raises(ParseError) as err:
        parse_device_program(text)
    assert (err.value.line, err.value.column, err.value.token) == (line, column, token)
    assert message in str(err.value)


@functools.lru_cache(maxsize=None)
def _module_text(devices=False):
    _, _, compiled = _lowered("matmul_host_inputs")
    return print_module(compiled.module, devices=devices)


def _module_error(text):
    with pytest.raises(ParseError) as err:
        parse_module(text)
    return err.value


def test_malformed_modules():
    text = _module_text()
    lines = text.split("\n")
    header = next(k for k, line in enumerate(lines) if line.startswith("shard_map equation"))
    err = _module_error(text.replace("shard_map equation 0", "shard_map equation 3"))
    assert (err.line, err.column, err.token) == (header + 1, 20, "3")
    assert "equation 3 of the program is not a shard_map" in str(err)
    err = _module_error(text.replace("Mesh('x': 4, 'y': 2, axis_types=(Auto, Auto)):",
                                     "Mesh('x': 2, 'y': 4, axis_types=(Auto, Auto)):"))
    assert (err.line, err.column) == (header + 1, 25) and "the mesh differs" in str(err)
    err = _module_error(text.replace("inputs arrive as (P(), P())", "inputs arrive as (P(),)"))
    assert "lists 1 specs for 2 values" in str(err) and err.token == "(P(),)"
    # The mesh-level program is checked against the equation it lowers.
    err = _module_error(text.replace("mesh-level program:\n{ lambda ; a:f32[8,16] b:f32[16,4].",
                                     "mesh-level program:\n{ lambda ; a:f32[8,16] b:f32[16,4] "
                                     "z:f32[2]."))
    assert "the mesh-level program takes 3 inputs and gives 1 outputs, but shard_map " \
           "equation 0 has 2 and 1" in str(err)
    assert err.line == text[:text.index("mesh-level program:")].count("\n") + 1
    err = _module_error(text + "\n" + text[text.index("mesh-level program:"):])
    assert "shard_map equation 0 has one mesh-level program, right after its 'shard_map " \
           "equation' line" in str(err)
    # Per-device programs, where the text carries them, are counted and placed.
    text = _module_text(devices=True)
    # The program of device 3 is dropped: the next one comes where position 3 belongs.
    start = text.index("device 3 at")
    dropped = text[:start] + text[text.index("device 4 at"):]
    err = _module_error(dropped)
    assert err.line == dropped[:dropped.index("device 4 at")].count("\n") + 1
    assert "expected the program of mesh position 3 (device 3), got position 4" in str(err)
    err = _module_error(text[:text.index("\n\ndevice 7 at")])
    assert (err.line, err.column) == (header + 1, 1)
    assert "has 7 device programs, but its mesh has 8 devices" in str(err)
    err = _module_error(text[:text.index("shard_map equation")])
    assert "missing the mesh-level program of shard_map equation 0" in str(err)
    program = text[:text.index("\n\nshard_map equation")]
    err = _module_error(program + "\n\n" + text[text.index("device 0 at"):])
    assert "a device program comes before any 'shard_map equation' line" in str(err)
    err = _module_error(program + "\n\n" + text[text.index("mesh-level program:"):])
    assert "a mesh-level program comes before any 'shard_map equation' line" in str(err)


# --- fuzzing: mutated golden texts fail with ParseError or VerifyError, nothing else ---------

MUTATION_PIECES = list("(){}[],:;.=#'\"\\ \n-+0123456789aeijxyzPT_") + [
    "in", "let", "lambda", "inf", "nan", "True", "None", "P(", "Mesh(", "{x}", "f32", "bool",
    "device", "shard_map", "  # f.py:1", "'x': 4", "device_ids=(", ")\n"]


@st.composite
def mutated_golden_texts(draw):
    text = GOLDEN_FILES[draw(st.integers(0, len(GOLDEN_FILES) - 1))].read_text()
    for _ in range(draw(st.integers(1, 4))):
        words = re.findall(r"\w+|\s+|.", text)
        op = draw(st.sampled_from(["delete char", "insert", "replace char", "delete word",
                                   "repeat word", "swap words"]))
        k = draw(st.integers(0, len(text)))
        w = draw(st.integers(0, len(words) - 1))
        if op == "delete char":
            text = text[:k] + text[k + 1:]
        elif op == "insert":
            text = text[:k] + draw(st.sampled_from(MUTATION_PIECES)) + text[k:]
        elif op == "replace char":
            text = text[:k] + draw(st.sampled_from(MUTATION_PIECES)) + text[k + 1:]
        elif op == "delete word":
            text = "".join(words[:w] + words[w + 1:])
        elif op == "repeat word":
            text = "".join(words[:w + 1] + words[w:])
        else:
            v = draw(st.integers(0, len(words) - 1))
            words[w], words[v] = words[v], words[w]
            text = "".join(words)
    return text


@settings(max_examples=400, **SETTINGS)
@given(mutated_golden_texts(), st.sampled_from(["auto", "program", "module"]))
def test_mutated_golden_texts_raise_only_parse_or_verify_errors(text, how):
    parse = {"auto": _parse_any, "program": parse_program, "module": parse_module}[how]
    try:
        parse(text)
    except (ParseError, VerifyError):
        pass


@settings(max_examples=60, **SETTINGS)
@given(st.data())
def test_mutated_module_texts_raise_only_parse_or_verify_errors(data):
    text = _module_text()
    for _ in range(data.draw(st.integers(1, 3))):
        k = data.draw(st.integers(0, len(text)))
        piece = data.draw(st.sampled_from(MUTATION_PIECES + [""]))
        text = text[:k] + piece + text[k + data.draw(st.integers(0, 2)):]
    try:
        parse_module(text)
    except (ParseError, VerifyError):
        pass
