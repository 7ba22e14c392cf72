"""Lowering, in two stages, both IR programs that print and parse back.

Stage 1, the **mesh-level program** of a shard_map: one program, the same for every device.
Each front-end collective becomes a communication node of the shard dialect naming its mesh
axes (``psum`` -> ``all_reduce[mesh_axes, reduction='sum']``, ``psum_scatter`` ->
``reduce_scatter``, ``pbroadcast`` -> ``broadcast[root]``, ``all_gather``, ``ppermute`` and
``all_to_all`` keep their names), ``pvary`` disappears, ``axis_index`` becomes
``process_index`` (the device's rank over its axes), and inputs arriving with another layout
than their in_spec are resharded by explicit ``all_gather``/``all_slice`` nodes. Every node
names the mesh axes it spans, so a program over a subset of the mesh's axes is expressible.

Stage 2, the **per-device programs**, specialised from it: each communication node gets the
concrete ``device_groups`` of its mesh axes, ``process_index`` becomes a constant. Nothing
else changes: a device's program is the mesh-level program seen from one device.

    body            psum[mesh_axes=('y',)] g
    mesh-level      all_reduce[mesh_axes=('y',) reduction='sum'] f
    device 3        all_reduce[device_groups=((0, 1), (2, 3), ...) mesh_axes=('y',) ...] f
"""
from __future__ import annotations

import dataclasses
import functools

from compiler.checks import without_checks
from compiler.inline_calls import inline_calls
from compiler.inspection import inspected, placement_of
from compiler.passes.reciprocal import reciprocal_divisions
from ir import collectives as coll
from ir import primitives as prims
from ir.core import Aval, Eqn, Program, Var, holds_programs, programs_in
from ir.interpreter import Interpreter
from ir.module import LoweredModule, LoweredShardMap
from ir.primitives import RuleTable
from ir.sharding import (Mesh, NamedSharding, PartitionSpec, axes_size, block_shape,
                         normal_spec, spec_axes, spec_names)
# Stage 2 is ir/specialise.py: a module read from text derives it without the compiler.
from ir.sharding_rules import named_sharding
from ir.specialise import device_programs, specialise  # noqa: F401
from ir.verify import CHECKS, verify_mesh_program

# Stage 1: how a front-end primitive lowers to the mesh level, ``rule(ctx, eqn, invars) ->
# out atoms``; rules may emit equations with ``ctx.emit``. Every front-end collective has
# exactly one rule (a test holds this); other primitives are copied unchanged.
lowering_rules = RuleTable("lowering")

@dataclasses.dataclass
class LoweringContext:
    """One program being lowered to the mesh level: its mesh, and the equations so far."""
    mesh: Mesh
    eqns: list = dataclasses.field(default_factory=list)

    def emit(self, prim, invars, params, source=None, outvars=None) -> list:
        """Append an equation; returns its output variables."""
        if outvars is None:
            from ir.shapes import out_avals
            outvars = [Var(a) for a in out_avals(prim, [v.aval for v in invars], params)]
        self.eqns.append(Eqn(prim, list(invars), list(outvars), params, source))
        return outvars


def _collective_rule(record):
    """A front-end collective: the communication node its record lowers it to, keeping its
    outputs; nothing for a collective that only changes a type (``pvary``)."""
    if record.lowering is None:
        return lambda ctx, eqn, invars: invars
    def rule(ctx, eqn, invars):
        node, params = record.lowering(eqn.params)
        return ctx.emit(node, invars, params, eqn.source, eqn.outvars)
    return rule


for _c in coll.FRONT_END:
    lowering_rules[_c.prim] = _collective_rule(_c)


def _sub_program_rule(ctx, eqn, invars):
    """Control flow: the same primitive, its sub-programs lowered."""
    params = {key: _lower_param(ctx, value) for key, value in eqn.params.items()}
    return ctx.emit(eqn.primitive, invars, params, eqn.source, eqn.outvars)


def _lower_param(ctx, value):
    if isinstance(value, Program):
        return lower_to_mesh(ctx.mesh, value)
    if holds_programs(value):
        return tuple(lower_to_mesh(ctx.mesh, v) for v in value)
    return value


for _p in prims.CONTROL_FLOW:
    lowering_rules[_p] = _sub_program_rule


def _inline_rule(ctx, eqn, invars):
    """remat only matters to autodiff: a device runs its body inline."""
    return _lower_into(ctx, eqn.params["jaxpr"], invars)


lowering_rules[prims.remat_p] = _inline_rule


def lower_to_mesh(mesh: Mesh, body: Program, invars=None) -> Program:
    """Stage 1: the mesh-level program of ``body`` (its inputs already blocks)."""
    ctx = LoweringContext(mesh)
    body = reciprocal_divisions(inline_calls(body))
    invars = list(body.invars) if invars is None else invars
    outvars = _lower_into(ctx, body, invars)
    return Program([], invars, ctx.eqns, outvars)


class _Lowering(Interpreter):
    """Stage 1 as a program walker: each value is the atom of the mesh-level program that
    stands for it; each equation is lowered by its rule, or copied (shared when its operands
    are the body's own)."""
    locates_errors = False

    def __init__(self, ctx: LoweringContext):
        self.ctx = ctx

    def read_literal(self, literal):
        return literal

    def eval_equation(self, eqn, invars):
        ctx = self.ctx
        rule = lowering_rules.get(eqn.primitive)
        if rule is not None:
            return rule(ctx, eqn, invars)
        if _same_atoms(invars, eqn.invars):
            ctx.eqns.append(eqn)        # unchanged by lowering: shared with the body
            return eqn.outvars
        return ctx.emit(eqn.primitive, invars, dict(eqn.params), eqn.source, eqn.outvars)


def _lower_into(ctx: LoweringContext, body: Program, args: list) -> list:
    """Lower ``body``'s equations into ``ctx``, its inputs standing for ``args``; the atoms of
    its outputs."""
    return _Lowering(ctx).run(body, args)


def _same_atoms(atoms, others) -> bool:
    if len(atoms) != len(others):
        return False
    for a, b in zip(atoms, others):
        if a is not b:
            return False
    return True


# --- one shard_map ------------------------------------------------------------------------------

def lower_shard_map(eqn: Eqn, in_shardings) -> LoweredShardMap:
    """The lowering of a ``shard_map`` equation whose inputs arrive as ``in_shardings`` (a
    PartitionSpec on the same mesh per input; ``P()`` for replicated or host values).

    The mesh-level program and the per-device programs are built when first read
    (``LoweredShardMap.mesh_program``, ``.device_programs``)."""
    in_shardings = tuple(in_shardings)
    mesh_level = functools.partial(mesh_program, eqn, in_shardings)
    return LoweredShardMap(eqn.params["mesh"], in_shardings, eqn.params["out_specs"],
                           runtime_check=eqn.params["check_vma"] == "runtime",
                           build=device_programs, build_mesh_program=mesh_level,
                           show_vma=eqn.params["check_vma"] is True)


def mesh_program(eqn: Eqn, in_shardings) -> Program:
    """Stage 1 for a shard_map equation: its body at the mesh level, with the reshards of
    inputs that arrive laid out otherwise than their in_specs. Its communication nodes are
    verified always; every equation's types under SHARDC_CHECKS (on in the tests), as for
    traced programs, whose equations it shares: both are typed by construction."""
    mesh = eqn.params["mesh"]
    ctx = LoweringContext(mesh)
    body = eqn.params["jaxpr"]
    typed = eqn.params["check_vma"] is True
    invars, arriving = [], []
    for outer, arrived, wanted, inner in zip(eqn.invars, in_shardings, eqn.params["in_specs"],
                                             body.invars):
        vma = frozenset(spec_axes(arrived)) if typed else frozenset()
        var = Var(Aval(block_shape(outer.aval.shape, arrived, mesh.shape), outer.aval.dtype,
                       vma))
        invars.append(var)
        arriving.append(_typed_as(ctx, _reshard(ctx, var, arrived, wanted, typed), inner.aval))
    outvars = _lower_into(ctx, body, arriving)
    program = Program([], invars, ctx.eqns, outvars)
    verify_mesh_program(program, mesh, full=CHECKS)
    return program


def _reshard(ctx: LoweringContext, var: Var, arrived, wanted, typed: bool):
    """Nodes turning a block laid out by ``arrived`` into one laid out by ``wanted``.

    Gather every dimension split differently (all_gather, tiled), then cut the wanted chunk
    of each dimension (all_slice, no communication). With ``typed``, each result's type
    varies over the axes that now split it.
    """
    if normal_spec(arrived) == normal_spec(wanted):
        return var
    for which in ("unreduced", "reduced"):
        if getattr(arrived, which, frozenset()) != getattr(wanted, which, frozenset()):
            # (the types say so before any program is lowered; never taken as a copy)
            raise NotImplementedError(
                f"a shard_map input laid out as {arrived} where its in_specs say {wanted}: "
                f"shardc does not change {which} axes when a value enters a shard_map")
    mesh = ctx.mesh
    have, want = spec_names(arrived), spec_names(wanted)
    value = var
    for d in range(var.aval.ndim):
        axes = have[d] if d < len(have) else ()
        target = want[d] if d < len(want) else ()
        if axes and axes != target:
            vma = value.aval.vma - set(axes)
            value = _emit(ctx, coll.all_gather_node, value, axes, vma,
                          dict(gather_axis=d, tiled=True, axis_size=axes_size(mesh.shape, axes)))
    for d in range(var.aval.ndim):
        axes = have[d] if d < len(have) else ()
        target = want[d] if d < len(want) else ()
        if target and axes != target:
            vma = value.aval.vma | set(target) if typed else value.aval.vma
            value = _emit(ctx, coll.all_slice_node, value, target, vma,
                          dict(slice_axis=d, axis_size=axes_size(mesh.shape, target)))
    return value


def _typed_as(ctx: LoweringContext, value: Var, body_aval):
    """``value`` with the type the body's input has where that type stays split over Explicit
    axes a partial-manual shard_map leaves automatic (the mesh level holds the block whole
    along them, as the gathers of ``_reshard`` left it): a layout constraint, as the body's
    own reshards, so the body's equations read the types they were traced with."""
    wanted = body_aval.type_sharding
    if wanted is None or value.aval.type_sharding == wanted:
        return value
    return ctx.emit(prims.sharding_constraint_p, [value],
                    dict(sharding=named_sharding(body_aval)),
                    outvars=[Var(value.aval.with_sharding(wanted))])[0]


def _emit(ctx: LoweringContext, prim, value, axes, vma, params):
    from ir.shapes import out_avals
    params = dict(params, mesh_axes=tuple(axes))
    (aval,) = out_avals(prim, [value.aval], params)
    return ctx.emit(prim, [value], params, outvars=[Var(aval.update(vma=vma))])[0]


# --- whole modules -----------------------------------------------------------------------------

def lower_module(program: Program, in_shardings) -> LoweredModule:
    """Lower every shard_map equation, tracking each value's layout from the inputs on
    (``in_shardings``: the constants' layouts, then the inputs', as the module is run)."""
    program = reciprocal_divisions(inline_calls(without_checks(program)))
    # (inspections of values a jitted program computes are done when it is partitioned; those
    # of programs lowered otherwise, an eager shard_map's, here)
    program = inspected(program, *placement_of(in_shardings))
    layout: dict = {}
    for var, sharding in zip(program.constvars + program.invars, in_shardings):
        layout[id(var)] = sharding
    lowered: dict = {}
    for index, eqn in enumerate(program.eqns):
        if eqn.primitive is prims.shard_map_p:
            mesh = eqn.params["mesh"]
            arriving = [_spec_on(layout.get(id(a)), mesh) for a in eqn.invars]
            lowered[index] = lower_shard_map(eqn, arriving)
            for var, spec in zip(eqn.outvars, eqn.params["out_specs"]):
                layout[id(var)] = NamedSharding(mesh, spec)
        elif eqn.primitive is prims.sharding_constraint_p:
            layout[id(eqn.outvars[0])] = eqn.params["sharding"]
    module = LoweredModule(program, lowered)
    for eqn in program.eqns:
        if eqn.primitive is not prims.shard_map_p:
            _lower_nested(eqn, module.nested)
    return module


def _lower_nested(eqn: Eqn, nested: dict) -> None:
    """Lower the shard_maps inside a host equation's loops and branches (``lax.scan`` over
    steps that call one): each runs on values the host loop holds whole, so its inputs arrive
    replicated. Keyed by the equation's id (the program keeps the equation)."""
    for value in eqn.params.values():
        for sub in programs_in(value):
            for inner in sub.eqns:
                if inner.primitive is prims.shard_map_p:
                    nested[id(inner)] = lower_shard_map(
                        inner, [PartitionSpec()] * len(inner.invars))
                else:
                    _lower_nested(inner, nested)


def _spec_on(sharding, mesh: Mesh) -> PartitionSpec:
    """The spec a value arrives with on ``mesh``; replicated unless laid out on that mesh."""
    if isinstance(sharding, NamedSharding) and sharding.mesh == mesh:
        return sharding.spec
    return PartitionSpec()


# --- per-device programs read from text, against their derivation -----------------------------

def check_derived(module: LoweredModule) -> None:
    """Raise ``VerifyError`` unless the mesh-level program and any per-device programs of
    ``module`` are the ones its shard_map equations lower to, naming the first equation that
    differs (and the device).

    A module's lowered programs are derived from its body; text that carries them (a module
    read back) must not say otherwise, or a run would compute what the body does not.
    """
    for index, lowered in sorted(module.shard_maps.items()):
        eqn = module.program.eqns[index]
        derived = lower_shard_map(eqn, lowered.in_shardings)
        if lowered.mesh_program is not None:
            axis_order = lowered.mesh.axis_names
            _check_same(lowered.mesh_program, derived.mesh_program, axis_order,
                        f"shard_map equation {index}: the mesh-level program", None)
        if lowered.derived:
            continue        # specialised from the mesh-level program just checked
        for given, want in zip(lowered.device_programs, derived.device_programs):
            _check_same(given.program, want.program, (),
                        f"shard_map equation {index}: the program of device {given.device_id}",
                        given.device_id)


def _check_same(given: Program, want: Program, axis_order, what: str, device) -> None:
    """Raise ``VerifyError`` at the first top-level equation where ``given`` prints otherwise
    than ``want``."""
    from ir.printer import print_program
    from ir.verify import VerifyError
    got_text = _equation_chunks(print_program(given, axis_order=axis_order))
    want_text = _equation_chunks(print_program(want, axis_order=axis_order))
    if got_text == want_text:
        return
    k = next((k for k, (a, b) in enumerate(zip(got_text, want_text)) if a != b),
             min(len(got_text), len(want_text)))
    eqns, invars = given.eqns, given.invars
    where = eqns[k - 1] if 1 <= k <= len(eqns) else None
    first_input = invars[0] if k == 0 and invars else None
    raise VerifyError(f"{what} is not the lowering of the body: {_chunk_text(got_text, k)} "
                      f"where the body lowers to {_chunk_text(want_text, k)}", eqn=where,
                      var=first_input, device=device)


def _equation_chunks(text: str) -> list:
    """A printed program cut into its header, one chunk per top-level equation, and its
    outputs (an equation holding sub-programs spans several lines)."""
    chunks: list = []
    for line in text.split("\n"):
        top = line.startswith("    ") and not line.startswith("     ")
        if not chunks or top or line.startswith("  in "):
            chunks.append(line)
        else:
            chunks[-1] += "\n" + line
    return chunks


def _chunk_text(chunks: list, k: int) -> str:
    if k >= len(chunks):
        return "nothing"
    return repr(chunks[k].strip().split("\n")[0])
