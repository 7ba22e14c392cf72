"""IR passes (dce, cse, schedule) and graph views (dependency graph, DOT export).

Every pass is held to the same contract on traced and per-device programs: the result
verifies, computes the same values (eval_program for programs without collectives, the whole
lowered module otherwise), leaves its input unchanged, is idempotent, and drops, merges or
moves exactly what it should, never a debug_print or a per-device communication node.
"""
import lark
import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardc
import shardc.numpy as jnp
from compiler.lowering import lower_module
from compiler.passes import PASSES, cse, dce, run_passes, run_passes_on_module, schedule
from ir import primitives as prims
from ir.core import Aval, Eqn, Literal, Program, Var
from ir.graph import (dependency_graph, has_side_effect, is_communication_node, is_per_device,
                      reachable_from_outputs, to_dot)
from ir.printer import print_program
from ir.verify import verify
from runtime.reference import eval_program, execute_module
from shardc import lax
from shardc.sharding import NamedSharding, PartitionSpec as P

MESH = shardc.make_mesh((4, 2), ("x", "y"))
f32 = np.dtype("float32")
ALL_PIPELINES = [["dce"], ["cse"], ["schedule"], ["cse", "dce"], ["dce", "cse", "schedule"],
                 ["schedule", "cse", "dce", "schedule"]]


# --- helpers --------------------------------------------------------------------------------------

def _trace(fn, *args):
    closed = shardc.make_jaxpr(fn)(*args)
    verify(closed.jaxpr)
    return closed


def _prims(program) -> list:
    return [eqn.primitive.name for eqn in program.eqns]


def _apply(names, program):
    """Run the passes, checking the contract every pass owes: a verified result, the input
    unchanged (a pass with nothing to do may return it), and nothing more to do on a second
    run."""
    before = print_program(program)
    eqns_before = list(program.eqns)
    result = run_passes(program, names)
    verify(result)
    assert print_program(program) == before, "a pass changed its input"
    assert program.eqns == eqns_before and all(a is b for a, b in zip(program.eqns, eqns_before))
    again = run_passes(result, names)
    assert print_program(again) == print_program(result), f"{names} is not idempotent"
    return result


def _assert_same_values(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def _check_eval(closed, args, names):
    """Same results under the reference interpreter before and after the passes."""
    result = _apply(names, closed.jaxpr)
    want = eval_program(closed.jaxpr, args, closed.consts)
    _assert_same_values(eval_program(result, args, closed.consts), want)
    return result


def _comm_sequence(program) -> list:
    """The communication nodes with their params, in program order: what devices meet
    at, which no pass may change."""
    return [(eqn.primitive.name, tuple(sorted((k, repr(v)) for k, v in eqn.params.items())))
            for eqn in program.eqns if is_communication_node(eqn)]


def _device_programs(module):
    return [dp for lowered in module.all_shard_maps() for dp in lowered.device_programs]


def _placed(x, spec):
    return shardc.device_put(x, NamedSharding(MESH, spec))


def _check_module(fn, args, names):
    """Both ways of optimising a shard_map program give the original results: passes on every
    per-device program, and passes on the traced program lowered afresh."""
    # lower the traced program as it is (jit would already drop dead code before lowering)
    closed = shardc.make_jaxpr(fn)(*args)
    flat = list(closed.consts) + list(args)
    module = lower_module(closed.jaxpr, [getattr(a, "sharding", None) for a in flat])
    want = execute_module(module, flat)
    text = str(module)
    per_device = run_passes_on_module(module, names)
    assert str(module) == text and per_device.program is module.program
    for old, new in zip(_device_programs(module), _device_programs(per_device)):
        assert (new.device_id, new.coords) == (old.device_id, old.coords)
        assert str(_apply(names, old.program)) == str(new.program)
        assert _comm_sequence(new.program) == _comm_sequence(old.program)
    _assert_same_values(execute_module(per_device, flat), want)
    traced = _apply(names, closed.jaxpr)
    shardings = [getattr(a, "sharding", None) for a in flat]
    relowered = lower_module(traced, shardings)
    _assert_same_values(execute_module(relowered, flat), want)
    return module, per_device, traced


def matmul_basic(a_block, b_block):
    c_partialsum = jnp.dot(a_block, b_block)
    return lax.psum(c_partialsum, "y")


def _matmul():
    return shardc.shard_map(matmul_basic, mesh=MESH, in_specs=(P("x", "y"), P("y", None)),
                            out_specs=P("x", None))


def _matmul_args():
    return jnp.arange(8 * 16.).reshape(8, 16), jnp.arange(16 * 4.).reshape(16, 4)


X = np.linspace(-1.0, 1.0, 12, dtype=f32).reshape(3, 4)
Y = np.cos(np.arange(12, dtype=f32)).reshape(3, 4)


# --- the registry ---------------------------------------------------------------------------------

def test_registry_names_every_pass():
    assert PASSES == {"dce": dce, "cse": cse, "schedule": schedule}


def test_run_passes_rejects_unknown_names():
    program = _trace(jnp.sin, X).jaxpr
    with pytest.raises(ValueError, match="unknown pass 'fold'.*dce, cse, schedule"):
        run_passes(program, ["dce", "fold"])
    with pytest.raises(TypeError, match="sequence of pass names"):
        run_passes(program, "dce")


# --- the dependency graph -------------------------------------------------------------------------

def test_dependency_graph_of_a_traced_program():
    closed = _trace(lambda x, y: (jnp.sin(x) * y, jnp.cos(y)), X, Y)
    graph = dependency_graph(closed.jaxpr)
    assert sorted(graph.nodes) == [0, 1, 2]
    assert [graph.nodes[k]["primitive"] for k in range(3)] == ["sin", "mul", "cos"]
    assert list(graph.edges) == [(0, 1)]
    (var,) = graph.edges[0, 1]["vars"]
    assert var is closed.jaxpr.eqns[0].outvars[0]
    io = dependency_graph(closed.jaxpr, with_io=True)
    assert sorted(io.edges, key=str) == sorted(
        [("in0", 0), ("in1", 1), ("in1", 2), (0, 1), (1, "out0"), (2, "out1")], key=str)
    assert io.nodes["in0"]["kind"] == "input" and io.nodes["out1"]["kind"] == "output"
    assert nx.is_directed_acyclic_graph(io)


def test_dependency_graph_marks_communication_and_effects():
    (lowered,) = shardc.jit(_matmul()).lower(*_matmul_args()).module.all_shard_maps()
    graph = dependency_graph(lowered.program_of(3).program)
    kinds = {graph.nodes[k]["primitive"]: graph.nodes[k] for k in graph.nodes}
    assert kinds["all_reduce"]["communicates"] and kinds["all_reduce"]["side_effect"]
    assert not kinds["dot_general"]["communicates"]
    assert is_per_device(lowered.program_of(3).program)
    assert not is_per_device(_trace(_matmul(), *_matmul_args()).jaxpr)


def test_reachable_from_outputs():
    def f(x):
        dead = jnp.exp(x)
        live = jnp.sin(x)
        return live * 2.0, jnp.tanh(dead)[0]
    program = _trace(f, X).jaxpr
    trimmed = Program(program.constvars, program.invars, program.eqns, program.outvars[:1])
    assert {program.eqns[k].primitive.name for k in reachable_from_outputs(trimmed)} == {
        "sin", "mul"}
    assert len(reachable_from_outputs(trimmed, roots=[3])) == 4   # exp, sin, mul, tanh


# --- dce ------------------------------------------------------------------------------------------

def test_dce_drops_dead_code_transitively():
    def f(x, y):
        dead = jnp.exp(jnp.cos(y) + x)
        return jnp.sin(x) * 2.0
    result = _check_eval(_trace(f, X, Y), [X, Y], ["dce"])
    assert str(result) == (
        "{ lambda ; a:f32[3,4] b:f32[3,4]. let\n"
        "    c:f32[3,4] = sin a\n"
        "    d:f32[3,4] = mul c 2.0:f32[]\n"
        "  in (d,) }")


def test_dce_keeps_debug_print_and_what_it_reads(capsys):
    def f(x):
        shown = jnp.cos(x) + 1.0
        shardc.debug.print("shown {}", shown)
        unused = jnp.exp(shown)
        return jnp.sin(x)
    result = _check_eval(_trace(f, X), [X], ["dce"])
    assert _prims(result) == ["cos", "add", "debug_print", "sin"]
    assert capsys.readouterr().out.count("shown") == 2     # before and after


def test_dce_cleans_control_flow_bodies_and_keeps_their_signature():
    def f(x, y):
        def body(carry, row):
            wasted = jnp.exp(row) * 3.0
            return carry + row, carry * 2.0
        unused_carry, ys = lax.scan(body, x[0], x)
        count = lax.while_loop(lambda i: i < 3, lambda i: i + 1, 0)     # unused: dropped
        branch = lax.cond(y[0, 0] > 0, lambda u: jnp.sin(u) + 0 * jnp.cos(u),
                          lambda u: u - 1.0, y)
        return ys, branch
    closed = _trace(f, X, Y)
    result = _check_eval(closed, [X, Y], ["dce"])
    assert "while" not in _prims(result)
    (scan,) = [e for e in result.eqns if e.primitive is prims.scan_p]
    assert _prims(scan.params["jaxpr"]) == ["add", "mul"]
    assert len(scan.outvars) == 2 and scan.params["num_carry"] == 1   # the carry stays
    (cond,) = [e for e in result.eqns if e.primitive is prims.cond_p]
    assert [_prims(b) for b in cond.params["branches"]] == [["sub"], ["sin", "cos", "mul", "add"]]


def test_dce_keeps_loops_that_print():
    def f(x):
        def body(carry, row):
            shardc.debug.print("row {}", row)
            return carry, row
        lax.scan(body, x[0], x)
        return jnp.sin(x)
    result = _check_eval(_trace(f, X), [X], ["dce"])
    assert _prims(result) == ["slice", "squeeze", "scan", "sin"]


def _unused_psum_body(a, b):
    c = jnp.dot(a, b)
    unused = lax.psum(c, "x")
    also_unused = jnp.sin(c) * 2.0
    return lax.psum(c, "y")


def _unused_psum():
    return shardc.shard_map(_unused_psum_body, mesh=MESH, in_specs=(P("x", "y"), P("y", None)),
                            out_specs=P("x", None))


def test_dce_drops_unused_collectives_of_a_traced_body_only():
    args = _matmul_args()
    module, per_device, traced = _check_module(_unused_psum(), args, ["dce"])
    body = traced.eqns[0].params["jaxpr"]
    assert _prims(body) == ["pvary", "dot_general", "psum"]
    assert "psum[mesh_axes=('x',)]" not in str(traced)
    for old, new in zip(_device_programs(module), _device_programs(per_device)):
        # the unused all_reduce over x stays on every device: its group must still meet
        assert _prims(old.program).count("all_reduce") == 2
        assert _prims(new.program) == [p for p in _prims(old.program) if p not in ("sin", "mul")]


def test_dce_keeps_all_slice_nodes_of_host_inputs():
    module, per_device, _ = _check_module(_unused_psum(), _matmul_args(), ["dce"])
    for new in _device_programs(per_device):
        assert _prims(new.program).count("all_slice") == 3


def test_dce_never_drops_unused_communication_nodes():
    def body(x):
        lax.all_gather(x, "x", tiled=True)
        lax.ppermute(x, "y", [(0, 1), (1, 0)])
        lax.psum_scatter(jnp.tile(x, (2, 1)), "y", tiled=True)
        return x * 2.0
    fn = shardc.shard_map(body, mesh=MESH, in_specs=P("x", "y"), out_specs=P("x", "y"))
    x = _placed(jnp.arange(64.).reshape(8, 8), P("x", "y"))
    module, per_device, traced = _check_module(fn, (x,), ["dce"])
    assert _prims(traced.eqns[0].params["jaxpr"]) == ["mul"]
    for old, new in zip(_device_programs(module), _device_programs(per_device)):
        # everything feeds a communication node but the result, which is used
        assert _prims(new.program) == _prims(old.program)
        assert {"all_gather", "ppermute", "reduce_scatter"} <= set(_prims(new.program))
        assert all(has_side_effect(e) for e in new.program.eqns if e.primitive.kind != "op")


# --- cse ------------------------------------------------------------------------------------------

def test_cse_merges_repeated_expressions_and_rewires_uses():
    def f(x):
        a = jnp.sin(x) * 2.0
        b = jnp.sin(x) * 2.0
        c = jnp.sin(x) * 3.0         # another literal: kept apart
        return a + b, c, b
    result = _check_eval(_trace(f, X), [X], ["cse"])
    assert str(result) == (
        "{ lambda ; a:f32[3,4]. let\n"
        "    b:f32[3,4] = sin a\n"
        "    c:f32[3,4] = mul b 2.0:f32[]\n"
        "    d:f32[3,4] = mul b 3.0:f32[]\n"
        "    e:f32[3,4] = add c c\n"
        "  in (e, d, c) }")


def test_cse_compares_params_and_literal_types():
    def f(x):
        rows, cols = jnp.sum(x, axis=0), jnp.sum(x, axis=1)
        again = jnp.sum(x, axis=0)
        n = jnp.arange(4)
        return rows + again, cols, n + 1, n + 1.0
    result = _check_eval(_trace(f, X), [X], ["cse"])
    assert _prims(result).count("reduce_sum") == 2
    assert _prims(result).count("add") == 3     # n + 1 (i32) and n + 1.0 (f32) stay apart


def test_cse_keeps_every_debug_print(capsys):
    def f(x):
        shardc.debug.print("x {}", x)
        shardc.debug.print("x {}", x)
        return jnp.sin(x) + jnp.sin(x)
    result = _check_eval(_trace(f, X), [X], ["cse"])
    assert _prims(result) == ["debug_print", "debug_print", "sin", "add"]
    assert capsys.readouterr().out.count("x [[") == 4


def test_cse_merges_equal_sub_programs_and_inside_them():
    def f(x):
        def body(carry, row):
            return carry + jnp.exp(row) + jnp.exp(row), carry
        first = lax.scan(body, x[0], x)
        second = lax.scan(body, x[0], x)     # traced again: equal, not identical, bodies
        return first[0] + second[0], second[1]
    closed = _trace(f, X)
    assert _prims(closed.jaxpr).count("scan") == 2
    result = _check_eval(closed, [X], ["cse"])
    assert _prims(result).count("scan") == 1
    (scan,) = [e for e in result.eqns if e.primitive is prims.scan_p]
    assert _prims(scan.params["jaxpr"]) == ["exp", "add", "add"]


def test_cse_merges_front_end_collectives_but_not_communication_nodes():
    def body(x):
        return lax.psum(jnp.sin(x), "y") + lax.psum(jnp.sin(x), "y")
    fn = shardc.shard_map(body, mesh=MESH, in_specs=P("x", "y"), out_specs=P("x"))
    x = _placed(jnp.arange(64.).reshape(8, 8), P("x", "y"))
    module, per_device, traced = _check_module(fn, (x,), ["cse"])
    assert _prims(traced.eqns[0].params["jaxpr"]) == ["sin", "psum", "add"]
    for new in _device_programs(per_device):
        assert _prims(new.program) == ["sin", "all_reduce", "all_reduce", "add"]


def test_cse_is_safe_where_device_programs_differ():
    """axis_index lowers to each device's own literal, so ordinary equations merge on some
    devices and not on others; communication must stay the same on all of them."""
    def body(x):
        shifted = lax.psum(x + lax.axis_index("y"), "y")     # x + 0 where y == 0
        plain = lax.psum(x + 0, "y")
        return shifted + plain + lax.pbroadcast(x, "y", 1)
    fn = shardc.shard_map(body, mesh=MESH, in_specs=P("x", "y"), out_specs=P("x", "y"),
                          check_vma=False)
    x = _placed(jnp.arange(64).reshape(8, 8), P("x", "y"))
    for names in (["cse"], ["cse", "dce", "schedule"]):
        _, per_device, _ = _check_module(fn, (x,), names)
        adds = {dp.coords[1]: _prims(dp.program).count("add")
                for dp in _device_programs(per_device)}
        assert adds == {0: 3, 1: 4}     # one "add a 0" fewer where y == 0
        for dp in _device_programs(per_device):
            assert _prims(dp.program).count("all_reduce") == 2
            assert _prims(dp.program).count("broadcast") == 1


# --- schedule -------------------------------------------------------------------------------------

def test_schedule_issues_communication_as_soon_as_its_operands_exist():
    def body(x):
        y = jnp.dot(x, x.T)
        busy = jnp.tanh(jnp.sin(x) * 3.0)
        total = lax.psum(y, "y")
        return total.sum() + busy
    fn = shardc.shard_map(body, mesh=MESH, in_specs=P("x", "y"), out_specs=P("x", "y"),
                          check_vma=False)
    x = _placed(jnp.arange(64.).reshape(8, 8), P("x", "y"))
    module, per_device, traced = _check_module(fn, (x,), ["schedule"])
    assert _prims(traced.eqns[0].params["jaxpr"]) == [
        "transpose", "dot_general", "psum", "sin", "mul", "tanh", "reduce_sum", "add"]
    for new in _device_programs(per_device):
        assert _prims(new.program) == [
            "transpose", "dot_general", "all_reduce", "sin", "mul", "tanh", "reduce_sum", "add"]


def test_schedule_keeps_communication_order_and_other_order():
    def body(x):
        late = lax.psum(jnp.exp(jnp.sin(x)), "x")    # needs two equations first
        early = lax.psum(x, "y")                     # ready at once, but comes second
        return late + early
    fn = shardc.shard_map(body, mesh=MESH, in_specs=P("x", "y"), out_specs=P("x", "y"),
                          check_vma=False)
    x = _placed(jnp.arange(64.).reshape(8, 8), P("x", "y"))
    _, per_device, traced = _check_module(fn, (x,), ["schedule"])
    assert _prims(traced.eqns[0].params["jaxpr"]) == ["sin", "exp", "psum", "psum", "add"]
    for new in _device_programs(per_device):
        assert [e.params["mesh_axes"] for e in new.program.eqns
                if is_communication_node(e)] == [("x",), ("y",)]


def test_schedule_is_a_deterministic_permutation():
    def f(x, y):
        shardc.debug.print("first {}", x)
        a = jnp.sin(x)
        shardc.debug.print("second {}", y)
        return a + jnp.cos(y)
    closed = _trace(f, X, Y)
    result = _check_eval(closed, [X, Y], ["schedule"])
    assert sorted(map(id, result.eqns)) == sorted(map(id, closed.jaxpr.eqns))
    assert str(schedule(closed.jaxpr)) == str(result)
    prints = [e.params["fmt"] for e in result.eqns if e.primitive is prims.debug_print_p]
    assert prints == ["first {}", "second {}"]


def test_schedule_recurses_into_sub_programs():
    def body(x):
        def step(carry, _):
            busy = jnp.sin(carry) * 2.0
            return busy + lax.psum(carry, "y"), None
        out, _ = lax.scan(step, x, None, length=2)
        return out
    fn = shardc.shard_map(body, mesh=MESH, in_specs=P("x", "y"), out_specs=P("x", "y"),
                          check_vma=False)
    x = _placed(jnp.arange(64.).reshape(8, 8), P("x", "y"))
    _, per_device, traced = _check_module(fn, (x,), ["schedule"])
    (scan,) = traced.eqns[0].params["jaxpr"].eqns
    assert _prims(scan.params["jaxpr"]) == ["psum", "sin", "mul", "add"]
    for new in _device_programs(per_device):
        (scan,) = new.program.eqns
        assert _prims(scan.params["jaxpr"]) == ["all_reduce", "sin", "mul", "add"]


# --- all passes on the tutorial programs ----------------------------------------------------------

@pytest.mark.parametrize("names", ALL_PIPELINES, ids="+".join)
@pytest.mark.parametrize("placed", [False, True], ids=["host", "placed"])
def test_every_pipeline_keeps_matmul_basic(names, placed):
    a, b = _matmul_args()
    if placed:
        a, b = _placed(a, P("x", "y")), _placed(b, P("y", None))
    module, per_device, _ = _check_module(_matmul(), (a, b), names)
    for old, new in zip(_device_programs(module), _device_programs(per_device)):
        assert _prims(new.program) == _prims(old.program)   # nothing to remove or move


@pytest.mark.parametrize("names", ALL_PIPELINES, ids="+".join)
def test_every_pipeline_keeps_a_program_with_everything(names, capsys):
    def body(x):
        def step(carry, row):
            shardc.debug.print("step {}", row)
            return carry + lax.psum(row, "y"), jnp.exp(row)
        carry, ys = lax.scan(step, x[0], x)
        dead = lax.psum(jnp.cos(x), "x")
        branch = lax.cond(carry[0] > 0, lambda v: v * 2.0, lambda v: v - 1.0, x)
        return branch + ys + jnp.exp(x)
    fn = shardc.shard_map(body, mesh=MESH, in_specs=P("x", "y"), out_specs=P("x", "y"),
                          check_vma=False)
    x = _placed(jnp.arange(64.).reshape(8, 8) / 64.0, P("x", "y"))
    _check_module(fn, (x,), names)
    out = capsys.readouterr().out
    # three runs (the original and two optimised modules) x 8 devices x 2 rows
    assert out.count("step") == 3 * 8 * 2


# --- DOT ------------------------------------------------------------------------------------------

DOT_GRAMMAR = r"""
    start: "digraph" ID "{" stmt* "}"
    ?stmt: (attr_stmt | edge_stmt | node_stmt | subgraph) ";"?
    subgraph: "subgraph" ID "{" stmt* "}"
    attr_stmt: KIND attrs
    edge_stmt: ID "->" ID attrs?
    node_stmt: ID attrs?
    attrs: "[" [attr ("," attr)*] "]"
    attr: ID "=" ID
    KIND.2: "graph" | "node" | "edge"
    ID: /[A-Za-z_][A-Za-z_0-9]*/ | /"(?:[^"\\]|\\.)*"/ | /-?[0-9.]+/
    %import common.WS
    %ignore WS
"""
_DOT_PARSER = lark.Lark(DOT_GRAMMAR, parser="lalr")


def _unquote(token) -> str:
    text = str(token)
    if not text.startswith('"'):
        return text
    out, chars = [], iter(text[1:-1])
    for ch in chars:
        if ch == "\\":
            nxt = next(chars)
            out.append("\n" if nxt == "n" else nxt)
        else:
            out.append(ch)
    return "".join(out)


def _parse_dot(text: str) -> tuple[dict, list, dict]:
    """Nodes (id -> attrs), edges ((source, target, attrs)) and clusters (id -> node ids)."""
    tree = _DOT_PARSER.parse(text)
    nodes, edges, clusters = {}, [], {}

    def attrs_of(tree_or_none):
        if tree_or_none is None:
            return {}
        return {_unquote(a.children[0]): _unquote(a.children[1])
                for a in tree_or_none.children if a is not None}

    def walk(stmts, cluster):
        for stmt in stmts:
            if stmt.data == "subgraph":
                name = _unquote(stmt.children[0])
                clusters[name] = []
                walk(stmt.children[1:], name)
            elif stmt.data == "node_stmt":
                node = _unquote(stmt.children[0])
                assert node not in nodes, f"node {node} declared twice"
                nodes[node] = attrs_of(stmt.children[1] if len(stmt.children) > 1 else None)
                if cluster:
                    clusters[cluster].append(node)
            elif stmt.data == "edge_stmt":
                attrs = attrs_of(stmt.children[2] if len(stmt.children) > 2 else None)
                edges.append((_unquote(stmt.children[0]), _unquote(stmt.children[1]), attrs))

    walk(tree.children[1:], None)
    for source, target, _ in edges:
        assert source in nodes and target in nodes, f"edge {source} -> {target} to nowhere"
    return nodes, edges, clusters


def _dot_graph_matches(program, nodes, edges, prefix=""):
    """The solid edges among a program's own nodes (ids ``<prefix>e3``, ``<prefix>in0``, with
    no further ``_``) are exactly its dependency graph's edges."""
    def own(node):
        return node.startswith(prefix) and "_" not in node[len(prefix):]

    graph = dependency_graph(program, with_io=True)
    ids = {n: f"{prefix}e{n}" if isinstance(n, int) else f"{prefix}{n}" for n in graph.nodes}
    assert {node for node in nodes if own(node)} == set(ids.values())
    drawn = {(s, t) for s, t, attrs in edges
             if attrs.get("style") != "dashed" and own(s) and own(t)}
    assert drawn == {(ids[s], ids[t]) for s, t in graph.edges}


def test_dot_of_matmul_basic_traced():
    program = _trace(_matmul(), *_matmul_args()).jaxpr
    text = to_dot(program)
    assert text == to_dot(program)      # deterministic
    nodes, edges, clusters = _parse_dot(text)
    _dot_graph_matches(program, nodes, edges)
    assert nodes["in0"]["label"] == "a:f32[8,16]" and nodes["out0"]["label"] == "out 0: c"
    assert nodes["e0"]["label"].startswith("c:f32[8@x,4] = shard_map[check_vma=True ")
    assert "jaxpr=<e0.jaxpr>" in nodes["e0"]["label"]
    assert clusters == {"cluster_e0_jaxpr": [
        "e0_jaxpr_in0", "e0_jaxpr_in1", "e0_jaxpr_e0", "e0_jaxpr_e1", "e0_jaxpr_e2",
        "e0_jaxpr_out0"]}
    body = program.eqns[0].params["jaxpr"]
    psum = nodes["e0_jaxpr_e2"]
    assert psum["label"] == "h:f32[2,4]{x} = psum[mesh_axes=('y',)] g"
    assert psum["shape"] == "hexagon" and nodes["e0_jaxpr_e1"].get("shape") is None
    assert nodes["e0_jaxpr_e1"]["label"].startswith("g:f32[2,4]{x,y} = dot_general[")
    inner = {(s, t, a.get("label")) for s, t, a in edges if s.startswith("e0_jaxpr_")
             and t.startswith("e0_jaxpr_")}
    assert inner == {("e0_jaxpr_in1", "e0_jaxpr_e0", "e"), ("e0_jaxpr_in0", "e0_jaxpr_e1", "d"),
                     ("e0_jaxpr_e0", "e0_jaxpr_e1", "f"), ("e0_jaxpr_e1", "e0_jaxpr_e2", "g"),
                     ("e0_jaxpr_e2", "e0_jaxpr_out0", "h")}
    assert len(body.eqns) == 3
    dashed = {(s, t) for s, t, a in edges if a.get("style") == "dashed"}
    assert dashed == {("e0", "e0_jaxpr_in0"), ("e0", "e0_jaxpr_in1"), ("e0_jaxpr_out0", "e0")}
    assert ("in0", "e0", "a") in {(s, t, a["label"]) for s, t, a in edges if "label" in a}


@pytest.mark.parametrize("placed", [False, True], ids=["host", "placed"])
def test_dot_of_matmul_basic_per_device(placed):
    a, b = _matmul_args()
    if placed:
        a, b = _placed(a, P("x", "y")), _placed(b, P("y", None))
    (lowered,) = shardc.jit(_matmul()).lower(a, b).module.all_shard_maps()
    dp = lowered.program_of(3)
    text = to_dot(dp)
    nodes, edges, clusters = _parse_dot(text)
    assert not clusters
    _dot_graph_matches(dp.program, nodes, edges)
    assert text.startswith('digraph "device 3 at mesh coordinates (x, y) = (1, 1)" {')
    comm = {n: attrs for n, attrs in nodes.items() if attrs.get("shape") == "hexagon"}
    names = [attrs["label"].split(" = ")[1].split("[")[0] for attrs in comm.values()]
    assert names == (["all_reduce"] if placed else ["all_slice"] * 3 + ["all_reduce"])
    (reduce,) = [attrs["label"] for attrs in comm.values() if "all_reduce" in attrs["label"]]
    assert reduce.endswith("reduction='sum'] " + ("c" if placed else "f") +
                           "\nsends 32 B, receives 32 B")
    assert reduce.startswith(("d" if placed else "g") + ":f32[2,4]{x} = all_reduce[")


def test_dot_escapes_quotes_backslashes_and_newlines():
    def f(x):
        shardc.debug.print('say "hi" \\ then\nbye {}', x)
        return x
    program = _trace(f, X).jaxpr
    text = to_dot(program, name='a "quoted" name')
    nodes, _, _ = _parse_dot(text)
    assert nodes["e0"]["label"] == "debug_print[arg_names=() fmt='say \"hi\" \\\\ then\\nbye {}'] a"
    assert nodes["e0"]["shape"] == "note"
    assert text.startswith('digraph "a \\"quoted\\" name" {')
    assert "\n" not in nodes["e0"]["label"]


# --- random programs ------------------------------------------------------------------------------

_UNARY = [jnp.sin, jnp.cos, jnp.tanh, jnp.abs, lambda v: -v, lambda v: v * 0.5,
          lambda v: v + 1.0, lambda v: jnp.sum(v, axis=0) + v, lambda v: jnp.dot(v, v.T) @ v]
_BINARY = [jnp.add, jnp.multiply, jnp.subtract, jnp.maximum, lambda u, v: jnp.where(u > v, u, v)]


@st.composite
def random_programs(draw):
    """Steps of a straight-line function of two f32[3,4] inputs (repeats are likely, so cse
    has work) and the values it returns (some steps go unused, so dce has work)."""
    steps = []
    for k in range(draw(st.integers(1, 12))):
        pool = k + 2
        if draw(st.booleans()):
            steps.append(("unary", draw(st.integers(0, len(_UNARY) - 1)),
                          draw(st.integers(0, pool - 1))))
        else:
            steps.append(("binary", draw(st.integers(0, len(_BINARY) - 1)),
                          draw(st.integers(0, pool - 1)), draw(st.integers(0, pool - 1))))
        if draw(st.integers(0, 3)) == 0:
            steps.append(steps[draw(st.integers(0, len(steps) - 1))])
    outs = draw(st.lists(st.integers(0, len(steps) + 1), min_size=1, max_size=3))
    return steps, outs


def _build(steps, outs):
    def f(x, y):
        values = [x, y]
        for step in steps:
            if step[0] == "unary":
                values.append(_UNARY[step[1]](values[step[2] % len(values)]))
            else:
                values.append(_BINARY[step[1]](values[step[2] % len(values)],
                                               values[step[3] % len(values)]))
        return [values[k] for k in outs]
    return f


@settings(max_examples=60, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(random_programs(), st.sampled_from(ALL_PIPELINES))
def test_passes_keep_results_of_random_programs(case, names):
    steps, outs = case
    closed = _trace(_build(steps, outs), X, Y)
    result = _check_eval(closed, [X, Y], names)
    assert len(result.eqns) <= len(closed.jaxpr.eqns)
    if "dce" in names:
        assert len(reachable_from_outputs(result)) == len(result.eqns)


def test_hand_built_program_with_duplicate_literals():
    a = Var(Aval((3,), f32))
    two, two_again = Literal(2.0, Aval((), f32)), Literal(2.0, Aval((), f32))
    b, c, d = Var(Aval((3,), f32)), Var(Aval((3,), f32)), Var(Aval((3,), f32))
    program = Program([], [a], [Eqn(prims.mul_p, [a, two], [b], {}),
                                Eqn(prims.mul_p, [a, two_again], [c], {}),
                                Eqn(prims.add_p, [b, c], [d], {})], [d])
    verify(program)
    result = _apply(["cse"], program)
    assert str(result) == ("{ lambda ; a:f32[3]. let\n"
                           "    b:f32[3] = mul a 2.0:f32[]\n"
                           "    c:f32[3] = add b b\n"
                           "  in (c,) }")
    x = np.arange(3, dtype=f32)
    _assert_same_values(eval_program(result, [x]), eval_program(program, [x]))
