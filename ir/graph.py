"""Graph views of programs (networkx), what equations must never be moved past or dropped,
and Graphviz DOT text for drawing a program.

A program's equations form a DAG: an edge runs from the equation defining a variable to each
equation using it. Sub-programs (``shard_map`` bodies, loop bodies, branches) are closed: they
see only their own inputs, so the outer graph carries every dependency.

    >>> graph = dependency_graph(body)      # matmul_basic's body: pvary, dot_general, psum
    >>> graph.nodes[1]["primitive"], list(graph.successors(1))
    ('dot_general', [2])
    >>> print(to_dot(body))                 # digraph "program" { ... }
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Callable, Sequence

if TYPE_CHECKING:
    import networkx as nx

from ir import primitives as prims
from ir.comm import device_traffic
from ir.core import (DeviceProgram, Eqn, Literal, Program, Var, format_literal,
                     holds_programs)
from ir.printer import format_param, var_name


# --- sub-programs -------------------------------------------------------------------------------

def sub_programs(eqn: Eqn) -> list:
    """``(param name, index or None, program)`` for each sub-program an equation carries, in
    the order the printer shows them (params sorted by name, tuples in order)."""
    if not eqn.params:
        return []
    found = []
    for key, value in sorted(eqn.params.items()):
        if isinstance(value, Program):
            found.append((key, None, value))
        elif holds_programs(value):
            found.extend((key, k, prog) for k, prog in enumerate(value))
    return found


# Prints and debug callbacks: a program may ask them to run on each device's blocks
# (``partitioned``) or in one order across devices (``ordered``: one device only, as JAX).
DEBUG_EFFECTS = (prims.debug_print_p, prims.callback_p)
ORDERED_EFFECTS_ERROR = ("The following ordered effects are not supported for more than 1 "
                         "device: ['OrderedDebugEffect']")


def holds_equation(program: Program, test: Callable[[Eqn], bool]) -> bool:
    """Whether an equation of ``program``, or of a sub-program at any depth, passes
    ``test``."""
    return any(test(eqn) or any(holds_equation(sub, test) for _, _, sub in sub_programs(eqn))
               for eqn in program.eqns)


def io_effects(program: Program) -> list:
    """JAX's names of the IO effects of ``program``'s io_callbacks, at any depth:
    'IOEffect' for unordered ones, 'OrderedIOEffect' for ordered ones (in that order)."""
    found = set()

    def io(eqn) -> bool:
        if eqn.primitive is prims.callback_p and eqn.params["effect"] == "io":
            found.add("OrderedIOEffect" if eqn.params["vmap_method"] is None else "IOEffect")
        return False

    holds_equation(program, io)
    return sorted(found, key=len)


def runs_per_device(prim, params) -> bool:
    """A ``partitioned`` print or debug callback: each device runs it on its blocks."""
    return prim in DEBUG_EFFECTS and bool(params.get("partitioned"))


def is_ordered_effect(prim, params) -> bool:
    """An ``ordered`` print or debug callback."""
    return prim in DEBUG_EFFECTS and bool(params.get("ordered"))


def replace_sub_programs(eqn: Eqn, rewrite: Callable[[Program], Program]) -> Eqn:
    """An equation whose sub-programs are ``rewrite(sub)`` (``eqn`` itself when every rewrite
    returns its program); the input is left unchanged."""
    if not eqn.params or not any(holds_programs(v) for v in eqn.params.values()):
        return eqn
    params = {}
    changed = False
    for key, value in eqn.params.items():
        if isinstance(value, Program):
            new = rewrite(value)
        elif holds_programs(value):
            new = tuple(rewrite(prog) for prog in value)
            if all(a is b for a, b in zip(new, value)):
                new = value
        else:
            new = value
        changed |= new is not value
        params[key] = new
    return dataclasses.replace(eqn, params=params) if changed else eqn


# --- what an equation does beyond computing its results -----------------------------------------

def is_communication_node(eqn: Eqn) -> bool:
    """A communication node of a lowered program (``ir.collectives``). Every device of a
    group must meet at it, so no pass may drop, merge or reorder it."""
    return eqn.primitive.kind == "lowered"


def is_collective(eqn: Eqn) -> bool:
    """A front-end collective (psum, all_gather, axis_index, pvary ...) or a communication
    node."""
    return eqn.primitive.kind == "collective" or is_communication_node(eqn)


def communicates(eqn: Eqn) -> bool:
    """A collective, or a higher-order equation with one inside its sub-programs."""
    return is_collective(eqn) or any(
        communicates(inner) for _, _, sub in sub_programs(eqn) for inner in sub.eqns)


def has_side_effect(eqn: Eqn) -> bool:
    """Whether the equation must run even when its results are unused: ``debug_print``, an
    io or debug callback, a per-device communication node, or a higher-order equation with
    one of those inside."""
    if eqn.primitive in (prims.debug_print_p, prims.inspect_sharding_p, prims.check_p) or \
            is_communication_node(eqn):
        return True
    if eqn.primitive is prims.callback_p:
        return eqn.params["effect"] != "pure"
    if not eqn.params:
        return False                # no sub-programs
    return any(has_side_effect(inner) for _, _, sub in sub_programs(eqn) for inner in sub.eqns)


def is_per_device(program: Program) -> bool:
    """Whether the program was lowered for one device (it holds communication nodes)."""
    for eqn in program.eqns:
        if is_communication_node(eqn) or any(is_per_device(s) for _, _, s in sub_programs(eqn)):
            return True
    return False


# --- the dependency graph -----------------------------------------------------------------------

def dependency_graph(program: Program, *, with_io: bool = False) -> nx.DiGraph:
    """One node per equation (its index), an edge from the equation defining each operand to
    the equation using it.

    Node attributes: ``kind="eqn"``, ``eqn``, ``primitive`` (its name), ``primitive_kind``
    (op, collective, lowered, higher), ``communicates`` and ``side_effect``. Edge attribute
    ``vars``: the variables flowing along the edge, in operand order. With ``with_io``,
    string nodes ``const<k>``, ``in<k>`` (``kind="const"``/``"input"``, ``var``) and
    ``out<k>`` (``kind="output"``, ``atom``) are added, with edges from inputs to their users
    and from producers to outputs.

    >>> g = dependency_graph(make_jaxpr(lambda x: jnp.sin(x) * 2)(x).jaxpr)
    >>> list(g.edges(data="vars"))
    [(0, 1, (Var(f32[3]),))]
    """
    import networkx as nx   # on first use: it takes longer to load than the rest of shardc
    graph = nx.DiGraph()
    producer = _add_io_sources(graph, program) if with_io else {}
    for index, eqn in enumerate(program.eqns):
        graph.add_node(index, kind="eqn", eqn=eqn, primitive=eqn.primitive.name,
                       primitive_kind=eqn.primitive.kind, communicates=communicates(eqn),
                       side_effect=has_side_effect(eqn))
        for var in _used_vars(eqn.invars):
            if id(var) in producer:
                _add_var_edge(graph, producer[id(var)], index, var)
        for var in eqn.outvars:
            producer[id(var)] = index
    if with_io:
        for k, atom in enumerate(program.outvars):
            graph.add_node(f"out{k}", kind="output", atom=atom)
            if isinstance(atom, Var) and id(atom) in producer:
                _add_var_edge(graph, producer[id(atom)], f"out{k}", atom)
    return graph


def _add_io_sources(graph: nx.DiGraph, program: Program) -> dict:
    producer = {}
    for prefix, kind, variables in (("const", "const", program.constvars),
                                    ("in", "input", program.invars)):
        for k, var in enumerate(variables):
            graph.add_node(f"{prefix}{k}", kind=kind, var=var)
            producer[id(var)] = f"{prefix}{k}"
    return producer


def _used_vars(atoms) -> list:
    """The distinct variables among ``atoms``, in order."""
    seen, found = set(), []
    for atom in atoms:
        if isinstance(atom, Var) and id(atom) not in seen:
            seen.add(id(atom))
            found.append(atom)
    return found


def _add_var_edge(graph: nx.DiGraph, source, target, var: Var):
    if graph.has_edge(source, target):
        graph.edges[source, target]["vars"] += (var,)
    else:
        graph.add_edge(source, target, vars=(var,))


def reachable_from_outputs(program: Program, roots: Sequence[int] = ()) -> set:
    """The indices of the equations the outputs depend on (transitively), together with
    ``roots`` (equation indices that must stay) and everything those depend on."""
    graph = dependency_graph(program, with_io=True)
    pending = [f"out{k}" for k in range(len(program.outvars))] + list(roots)
    live: set = set()
    while pending:                   # one walk up the graph from every output and root
        node = pending.pop()
        if node not in live:
            live.add(node)
            pending.extend(graph.predecessors(node))
    return {node for node in live if isinstance(node, int)}


# --- Graphviz DOT ---------------------------------------------------------------------------------

def to_dot(program: Program | DeviceProgram, *, name: str | None = None) -> str:
    """Graphviz DOT text of a program, a deterministic function of the program.

    Inputs are ``invhouse`` nodes, outputs ``house`` nodes, equations boxes labelled with their
    printed line (``c:f32[2,4]{x} = psum[mesh_axes=('y',)] b``); communication nodes are
    filled hexagons (per-device nodes also show their traffic), debug prints notes. Each data
    edge is labelled with the variable's printed name. Sub-programs are clusters
    (``cluster_e0_jaxpr``) joined to their equation by dashed edges. A ``DeviceProgram`` is
    drawn with its device and mesh coordinates as the graph label.

    >>> print(to_dot(make_jaxpr(f)(x).jaxpr))
    digraph "program" { ... }
    """
    device_id, axis_order, title = None, (), name or "program"
    if isinstance(program, DeviceProgram):
        device_id = program.device_id
        axis_order = program.mesh_axes if program.show_vma else None
        coords = ", ".join(str(c) for c in program.coords)
        title = name or (f"device {program.device_id} at mesh coordinates "
                         f"({', '.join(program.mesh_axes)}) = ({coords})")
        program = program.program
    names = _assign_names(program, {})
    writer = _DotWriter(names, device_id)
    lines = [f"digraph {_quote(title)} {{",
             f"  graph [label={_quote(title)}, labelloc=t, fontname=\"monospace\"];",
             "  node [shape=box, fontname=\"monospace\"];",
             "  edge [fontname=\"monospace\"];"]
    lines += writer.program(program, "", axis_order, "  ")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _assign_names(program: Program, names: dict) -> dict:
    """``id(var) -> name`` as the printer assigns them: constants, inputs, then each
    equation's outputs before its sub-programs' variables."""
    def define(var):
        names[id(var)] = var_name(len(names))

    for var in list(program.constvars) + list(program.invars):
        define(var)
    for eqn in program.eqns:
        for var in eqn.outvars:
            define(var)
        for _, _, sub in sub_programs(eqn):
            _assign_names(sub, names)
    return names


def _quote(text: str) -> str:
    """A DOT double-quoted string: backslashes, quotes and newlines escaped."""
    escaped = text.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")
    return f"\"{escaped}\""


def _attrs(**attrs) -> str:
    return "[" + ", ".join(f"{key}={_quote(str(value))}" for key, value in attrs.items()) + "]"


class _DotWriter:
    """Writes one program's nodes and edges; sub-programs recurse as clusters."""

    def __init__(self, names: dict, device_id: int | None):
        self.names = names
        self.device_id = device_id

    def use(self, atom) -> str:
        return format_literal(atom) if isinstance(atom, Literal) else self.names[id(atom)]

    def binder(self, var: Var, axis_order) -> str:
        return f"{self.names[id(var)]}:{var.aval.str_short(axis_order)}"

    def program(self, program: Program, prefix: str, axis_order, pad: str) -> list:
        """Node lines, then data edge lines, then the sub-program clusters."""
        lines, edges, clusters, producer = [], [], [], {}
        sources = [(f"{prefix}const{k}", var, "dashed") for k, var in enumerate(program.constvars)]
        sources += [(f"{prefix}in{k}", var, "solid") for k, var in enumerate(program.invars)]
        for node, var, style in sources:
            producer[id(var)] = node
            label = self.binder(var, axis_order)
            lines.append(f"{pad}{node} {_attrs(label=label, shape='invhouse', style=style)};")
        for index, eqn in enumerate(program.eqns):
            node = f"{prefix}e{index}"
            lines.append(f"{pad}{node} {self.eqn_attrs(eqn, node, axis_order)};")
            edges += self.data_edges(eqn.invars, producer, node, pad)
            producer.update((id(var), node) for var in eqn.outvars)
            clusters += self.clusters(eqn, node, axis_order, pad)
        for k, atom in enumerate(program.outvars):
            node = f"{prefix}out{k}"
            label = f"out {k}: {self.use(atom)}"
            lines.append(f"{pad}{node} {_attrs(label=label, shape='house')};")
            edges += self.data_edges([atom], producer, node, pad)
        return lines + edges + clusters

    def data_edges(self, atoms, producer: dict, node: str, pad: str) -> list:
        return [f"{pad}{producer[id(var)]} -> {node} {_attrs(label=self.names[id(var)])};"
                for var in _used_vars(atoms) if id(var) in producer]

    def eqn_attrs(self, eqn: Eqn, node: str, axis_order) -> str:
        label = self.eqn_label(eqn, node, axis_order)
        if is_collective(eqn):
            traffic = device_traffic(eqn, self.device_id) if self.device_id is not None else None
            if traffic is not None:
                label += f"\n{traffic}"
            return _attrs(label=label, shape="hexagon", style="filled", fillcolor="#f4b183")
        if eqn.primitive is prims.debug_print_p:
            return _attrs(label=label, shape="note", style="filled", fillcolor="#fff2cc")
        if sub_programs(eqn):
            return _attrs(label=label, shape="box3d")
        return _attrs(label=label)

    def eqn_label(self, eqn: Eqn, node: str, axis_order) -> str:
        """The printed line of the equation; sub-programs named by their cluster."""
        outs = " ".join(self.binder(v, axis_order) for v in eqn.outvars)
        args = " ".join(self.use(a) for a in eqn.invars)
        params = " ".join(f"{key}={self.param_text(value, node, key)}"
                          for key, value in sorted(eqn.params.items()))
        text = eqn.primitive.name + (f"[{params}]" if params else "")
        text = f"{outs} = {text}" if outs else text
        return f"{text} {args}".rstrip()

    def param_text(self, value, node: str, key: str) -> str:
        if isinstance(value, Program):
            return f"<{node}.{key}>"
        if holds_programs(value):
            return "(" + ", ".join(f"<{node}.{key}[{k}]>" for k in range(len(value))) + ")"
        return format_param(value)

    def clusters(self, eqn: Eqn, node: str, axis_order, pad: str) -> list:
        """Each sub-program as ``subgraph cluster_...``, with dashed edges from the equation
        to the sub-program's inputs and from its outputs back to the equation."""
        mesh = eqn.params.get("mesh")
        if mesh is not None:   # a shard_map body: types show the mesh's axes, as printed
            axis_order = mesh.axis_names if eqn.params.get("check_vma", True) is True else None
        lines = []
        for key, index, sub in sub_programs(eqn):
            tag = key if index is None else f"{key}{index}"
            prefix = f"{node}_{tag}_"
            title = f"{node}.{key}" + ("" if index is None else f"[{index}]")
            lines.append(f"{pad}subgraph cluster_{node}_{tag} {{")
            lines.append(f"{pad}  graph {_attrs(label=title, style='rounded')};")
            lines += self.program(sub, prefix, axis_order, pad + "  ")
            lines.append(f"{pad}}}")
            nesting = _attrs(style="dashed", arrowhead="empty")
            lines += [f"{pad}{node} -> {prefix}in{k} {nesting};" for k in range(len(sub.invars))]
            lines += [f"{pad}{prefix}out{k} -> {node} {nesting};"
                      for k in range(len(sub.outvars))]
        return lines
