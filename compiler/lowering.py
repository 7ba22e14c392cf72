"""Lowering: from a traced program to one program per device.

Each ``shard_map`` equation becomes a list of ``DeviceProgram``s, one per mesh position, each
knowing its device id and mesh coordinates. Front-end collectives become the communication
nodes of the shard dialect (``all_reduce``, ``all_gather``, ``all_slice`` ...) carrying their
concrete ``device_groups``; ``axis_index`` becomes a constant; ``pvary`` disappears. Inputs
arriving with another sharding than their in_spec are resharded by inserted nodes.
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from ir import dtypes
from ir import primitives as prims
from ir.core import Aval, DeviceProgram, Eqn, Literal, Program, Var, holds_programs
from ir.module import LoweredModule, LoweredShardMap
from ir.primitives import RuleTable
from ir.sharding import (Mesh, NamedSharding, PartitionSpec, axes_rank, axes_size,
                         block_shape, device_groups, normal_spec, spec_names)
from ir.verify import check_coherence, verify_device_program

# How a front-end primitive lowers on one device: ``rule(ctx, eqn, invars) -> out atoms``.
# Rules may emit equations with ``ctx.emit``; primitives without a rule are copied unchanged.
lowering_rules = RuleTable("lowering")

_REDUCTION = {prims.psum_p: "sum", prims.pmax_p: "max", prims.pmin_p: "min",
              prims.pmean_p: "mean"}


@dataclasses.dataclass
class LoweringContext:
    """One device being lowered: where it sits, and the equations emitted so far."""
    mesh: Mesh
    position: int
    eqns: list = dataclasses.field(default_factory=list)

    @property
    def coords(self) -> tuple:
        return self.mesh.coords(self.position)

    def rank(self, axes) -> int:
        return axes_rank(self.mesh.shape, self.mesh.axis_names, self.coords, axes)

    def emit(self, prim, invars, params, source=None, outvars=None) -> list:
        """Append an equation; returns its output variables."""
        if outvars is None:
            from ir.shapes import out_avals
            outvars = [Var(a) for a in out_avals(prim, [v.aval for v in invars], params)]
        self.eqns.append(Eqn(prim, list(invars), list(outvars), params, source))
        return outvars


def _communicate(lowered_prim, extra=None):
    """A collective that becomes one communication node with its device groups."""
    def rule(ctx, eqn, invars):
        params = dict(eqn.params, **(extra(eqn) if extra else {}))
        params["device_groups"] = device_groups(ctx.mesh, params["mesh_axes"])
        return ctx.emit(lowered_prim, invars, params, eqn.source, eqn.outvars)
    return rule


def _reducing_rule(ctx, eqn, invars):
    axes = tuple(eqn.params["mesh_axes"])
    params = dict(mesh_axes=axes, reduction=_REDUCTION[eqn.primitive],
                  device_groups=device_groups(ctx.mesh, axes))
    return ctx.emit(prims.all_reduce_p, invars, params, eqn.source, eqn.outvars)


def _pvary_rule(ctx, eqn, invars):
    return invars           # a type change only


def _axis_index_rule(ctx, eqn, invars):
    return [Literal(np.int32(ctx.rank(eqn.params["mesh_axes"])), Aval((), dtypes.int_))]


for _p in prims.REDUCING_COLLECTIVES:
    lowering_rules[_p] = _reducing_rule
def _pbroadcast_rule(ctx, eqn, invars):
    """Every member gets the source's block: an all_reduce to which only the source
    contributes its value (the others contribute zeros)."""
    axes = tuple(eqn.params["mesh_axes"])
    (x,) = invars
    if ctx.rank(axes) != eqn.params["source"]:
        zero = Literal(np.zeros((), x.aval.dtype), Aval((), x.aval.dtype))
        (x,) = ctx.emit(prims.broadcast_in_dim_p, [zero],
                        dict(shape=x.aval.shape, broadcast_dimensions=()), eqn.source)
    # a sum of bools would count them (psum's int32); "max" keeps bool, as pbroadcast must
    reduction = "max" if dtypes.is_bool(x.aval.dtype) else "sum"
    params = dict(mesh_axes=axes, reduction=reduction,
                  device_groups=device_groups(ctx.mesh, axes))
    return ctx.emit(prims.all_reduce_p, [x], params, eqn.source, eqn.outvars)


def _reduce_scatter_params(eqn):
    return dict(reduction="sum")


lowering_rules[prims.all_gather_p] = _communicate(prims.all_gather_p)
lowering_rules[prims.psum_scatter_p] = _communicate(prims.reduce_scatter_p,
                                                    _reduce_scatter_params)
lowering_rules[prims.ppermute_p] = _communicate(prims.ppermute_p)
lowering_rules[prims.all_to_all_p] = _communicate(prims.all_to_all_p)
lowering_rules[prims.pbroadcast_p] = _pbroadcast_rule


def _sub_program_rule(ctx, eqn, invars):
    """Control flow: the same primitive, its sub-programs lowered for this device."""
    params = {key: _lower_param(ctx, value) for key, value in eqn.params.items()}
    return ctx.emit(eqn.primitive, invars, params, eqn.source, eqn.outvars)


def _lower_param(ctx, value):
    if isinstance(value, Program):
        return lower_program(ctx.mesh, ctx.position, value)
    if holds_programs(value):
        return tuple(lower_program(ctx.mesh, ctx.position, v) for v in value)
    return value


for _p in prims.CONTROL_FLOW:
    lowering_rules[_p] = _sub_program_rule


def _inline_rule(ctx, eqn, invars):
    """remat only matters to autodiff: a device runs its body inline."""
    body = eqn.params["jaxpr"]
    env = {id(v): a for v, a in zip(body.invars, invars)}
    return _lower_into(ctx, body, env)


lowering_rules[prims.remat_p] = _inline_rule
lowering_rules[prims.pvary_p] = _pvary_rule
lowering_rules[prims.axis_index_p] = _axis_index_rule


def lower_program(mesh: Mesh, position: int, body: Program, invars=None) -> Program:
    """The program the device at ``position`` runs for ``body`` (its inputs already blocks)."""
    ctx = LoweringContext(mesh, position)
    invars = list(body.invars) if invars is None else invars
    env = {id(b): v for b, v in zip(body.invars, invars)}
    outvars = _lower_into(ctx, body, env)
    return Program([], invars, ctx.eqns, outvars)


def _lower_into(ctx: LoweringContext, body: Program, env: dict) -> list:
    for eqn in body.eqns:
        invars = [_read(env, a) for a in eqn.invars]
        if eqn.primitive in lowering_rules:
            outs = lowering_rules[eqn.primitive](ctx, eqn, invars)
        else:
            outs = ctx.emit(eqn.primitive, invars, dict(eqn.params), eqn.source, eqn.outvars)
        for var, atom in zip(eqn.outvars, outs):
            env[id(var)] = atom
    return [_read(env, a) for a in body.outvars]


# --- per-device programs of one shard_map ------------------------------------------------------

def lower_shard_map(eqn: Eqn, in_shardings) -> LoweredShardMap:
    """Per-device programs for a ``shard_map`` equation whose inputs arrive as ``in_shardings``
    (a PartitionSpec on the same mesh per input; ``P()`` for replicated or host values).

    The programs are built when first read (``LoweredShardMap.device_programs``)."""
    in_shardings = tuple(in_shardings)
    return LoweredShardMap(eqn.params["mesh"], in_shardings, eqn.params["out_specs"],
                           runtime_check=eqn.params["check_vma"] == "runtime",
                           build=functools.partial(device_programs, eqn, in_shardings))


def device_programs(eqn: Eqn, in_shardings) -> list:
    """One DeviceProgram per mesh position of a shard_map equation, verified as lowered
    programs (each well formed, all coherent)."""
    mesh = eqn.params["mesh"]
    programs = []
    for position in range(mesh.size):
        program = _lower_with_boundary(LoweringContext(mesh, position), eqn, in_shardings)
        dp = DeviceProgram(int(mesh.devices.flat[position].id), position, mesh.axis_names,
                           mesh.coords(position), program,
                           show_vma=eqn.params["check_vma"] is True)
        verify_device_program(dp, mesh)
        programs.append(dp)
    check_coherence(mesh, programs)
    return programs


def _lower_with_boundary(ctx: LoweringContext, eqn: Eqn, in_shardings) -> Program:
    body = eqn.params["jaxpr"]
    env: dict = {}
    invars = []
    for body_var, outer, arrived, wanted in zip(body.invars, eqn.invars, in_shardings,
                                                eqn.params["in_specs"]):
        arrived_aval = Aval(block_shape(outer.aval.shape, arrived, ctx.mesh.shape),
                            outer.aval.dtype)
        var = Var(arrived_aval)
        invars.append(var)
        env[id(body_var)] = _reshard(ctx, var, arrived, wanted)
    outvars = _lower_into(ctx, body, env)
    return Program([], invars, ctx.eqns, outvars)


def _read(env, atom):
    return atom if isinstance(atom, Literal) else env[id(atom)]


def _reshard(ctx: LoweringContext, var: Var, arrived, wanted):
    """Nodes turning a block laid out by ``arrived`` into one laid out by ``wanted``.

    Gather every dimension split differently (all_gather, tiled), then cut the wanted chunk
    of each dimension (all_slice, no communication).
    """
    if normal_spec(arrived) == normal_spec(wanted):
        return var
    mesh = ctx.mesh
    have, want = spec_names(arrived), spec_names(wanted)
    value = var
    for d in range(var.aval.ndim):
        axes = have[d] if d < len(have) else ()
        target = want[d] if d < len(want) else ()
        if axes and axes != target:
            value = _emit(ctx, prims.all_gather_p, value, axes,
                          dict(gather_axis=d, tiled=True, axis_size=axes_size(mesh.shape, axes)))
    for d in range(var.aval.ndim):
        axes = have[d] if d < len(have) else ()
        target = want[d] if d < len(want) else ()
        if target and axes != target:
            value = _emit(ctx, prims.all_slice_p, value, target,
                          dict(slice_axis=d, axis_size=axes_size(mesh.shape, target)))
    return value


def _emit(ctx: LoweringContext, prim, value, axes, params):
    params = dict(params, mesh_axes=tuple(axes), device_groups=device_groups(ctx.mesh, axes))
    return ctx.emit(prim, [value], params)[0]


# --- whole modules -----------------------------------------------------------------------------

def lower_module(program: Program, in_shardings) -> LoweredModule:
    """Lower every shard_map equation, tracking each value's layout from the inputs on."""
    layout: dict = {}
    for var, sharding in zip(program.invars, in_shardings):
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
    return LoweredModule(program, lowered)


def _spec_on(sharding, mesh: Mesh) -> PartitionSpec:
    """The spec a value arrives with on ``mesh``; replicated unless laid out on that mesh."""
    if isinstance(sharding, NamedSharding) and sharding.mesh == mesh:
        return sharding.spec
    return PartitionSpec()
