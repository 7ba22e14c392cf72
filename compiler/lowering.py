"""Lowering: from a traced program to one program per device.

Each ``shard_map`` equation becomes a list of ``DeviceProgram``s, one per mesh position, each
knowing its device id and mesh coordinates. Front-end collectives become the communication
nodes of the shard dialect (``all_reduce``, ``all_gather``, ``all_slice`` ...) carrying their
concrete ``device_groups``; ``axis_index`` becomes a constant; ``pvary`` disappears. Inputs
arriving with another sharding than their in_spec are resharded by inserted nodes.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ir import dtypes
from ir import primitives as prims
from ir.core import Aval, DeviceProgram, Eqn, Literal, Program, Var
from ir.primitives import RuleTable
from ir.sharding import (Mesh, NamedSharding, PartitionSpec, axes_rank, axes_size,
                         block_shape, device_groups, normal_spec, spec_names)
from ir.verify import verify

# How a front-end collective lowers: ``rule(params, mesh) -> (lowered primitive, params)``.
collective_lowerings = RuleTable("lowering")

_REDUCTION = {prims.psum_p: "sum", prims.pmax_p: "max", prims.pmin_p: "min",
              prims.pmean_p: "mean"}


def _reducing_lowering(prim, params, mesh):
    axes = tuple(params["mesh_axes"])
    return prims.all_reduce_p, dict(mesh_axes=axes, reduction=_REDUCTION[prim],
                                    device_groups=device_groups(mesh, axes))


def _all_gather_lowering(prim, params, mesh):
    return prims.all_gather_p, dict(params, device_groups=device_groups(mesh, params["mesh_axes"]))


for _p in prims.REDUCING_COLLECTIVES:
    collective_lowerings[_p] = _reducing_lowering
collective_lowerings[prims.all_gather_p] = _all_gather_lowering


def lower_collective(prim, params, mesh: Mesh):
    """The shard-dialect node for a front-end collective, with its device groups."""
    return collective_lowerings[prim](prim, params, mesh)


# --- per-device programs of one shard_map ------------------------------------------------------

@dataclasses.dataclass
class LoweredShardMap:
    """The per-device programs of one shard_map equation, and the layouts at its boundary."""
    mesh: Mesh
    in_shardings: tuple      # the spec each input arrives with
    out_specs: tuple
    device_programs: list    # one per mesh position

    def program_of(self, device_id: int) -> DeviceProgram:
        for dp in self.device_programs:
            if dp.device_id == device_id:
                return dp
        raise KeyError(f"device {device_id} is not in {self.mesh}")


@dataclasses.dataclass
class _DeviceContext:
    mesh: Mesh
    position: int

    @property
    def coords(self):
        return self.mesh.coords(self.position)


def lower_shard_map(eqn: Eqn, in_shardings) -> LoweredShardMap:
    """Per-device programs for a ``shard_map`` equation whose inputs arrive as ``in_shardings``
    (a PartitionSpec on the same mesh per input; ``P()`` for replicated or host values)."""
    mesh = eqn.params["mesh"]
    programs = []
    for position in range(mesh.size):
        ctx = _DeviceContext(mesh, position)
        program = _lower_body(ctx, eqn, in_shardings)
        verify(program)
        programs.append(DeviceProgram(int(mesh.devices.flat[position].id), position,
                                      mesh.axis_names, ctx.coords, program))
    return LoweredShardMap(mesh, tuple(in_shardings), eqn.params["out_specs"], programs)


def _lower_body(ctx: _DeviceContext, eqn: Eqn, in_shardings) -> Program:
    body = eqn.params["jaxpr"]
    env: dict = {}
    eqns: list = []
    invars = []
    for body_var, outer, arrived, wanted in zip(body.invars, eqn.invars, in_shardings,
                                                eqn.params["in_specs"]):
        arrived_aval = Aval(block_shape(outer.aval.shape, arrived, ctx.mesh.shape),
                            outer.aval.dtype)
        var = Var(arrived_aval)
        invars.append(var)
        env[id(body_var)] = _reshard(ctx, var, arrived, wanted, body_var, eqns)
    for body_eqn in body.eqns:
        _lower_equation(ctx, body_eqn, env, eqns)
    outvars = [_read(env, a) for a in body.outvars]
    return Program([], invars, eqns, outvars)


def _read(env, atom):
    return atom if isinstance(atom, Literal) else env[id(atom)]


def _lower_equation(ctx: _DeviceContext, eqn: Eqn, env: dict, out: list):
    invars = [_read(env, a) for a in eqn.invars]
    prim = eqn.primitive
    if prim is prims.pvary_p:
        env[id(eqn.outvars[0])] = invars[0]
        return
    if prim is prims.axis_index_p:
        rank = axes_rank(ctx.mesh.shape, ctx.mesh.axis_names, ctx.coords, eqn.params["mesh_axes"])
        env[id(eqn.outvars[0])] = Literal(np.int32(rank), Aval((), dtypes.int_))
        return
    if prim.kind == "collective":
        lowered, params = lower_collective(prim, eqn.params, ctx.mesh)
        new = Eqn(lowered, invars, list(eqn.outvars), params, eqn.source)
    else:
        new = Eqn(prim, invars, list(eqn.outvars), dict(eqn.params), eqn.source)
    for var in eqn.outvars:
        env[id(var)] = var
    out.append(new)


def _reshard(ctx: _DeviceContext, var: Var, arrived, wanted, body_var, out: list):
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
            value = _emit(out, prims.all_gather_p, value, mesh, axes,
                          dict(gather_axis=d, tiled=True, axis_size=axes_size(mesh.shape, axes)))
    for d in range(var.aval.ndim):
        axes = have[d] if d < len(have) else ()
        target = want[d] if d < len(want) else ()
        if target and axes != target:
            value = _emit(out, prims.all_slice_p, value, mesh, target,
                          dict(slice_axis=d, axis_size=axes_size(mesh.shape, target)))
    return value


def _emit(out: list, prim, value, mesh, axes, params):
    from ir.shapes import out_avals
    params = dict(params, mesh_axes=tuple(axes), device_groups=device_groups(mesh, axes))
    (aval,) = out_avals(prim, [value.aval], params)
    result = Var(aval)
    out.append(Eqn(prim, [value], [result], params, None))
    return result


# --- whole modules -----------------------------------------------------------------------------

@dataclasses.dataclass
class LoweredModule:
    """A traced program whose shard_map equations have their per-device programs.

    Equations outside shard_map run on global values (a later pass partitions them).
    """
    program: Program
    shard_maps: dict              # id(eqn) -> LoweredShardMap
    in_shardings: tuple

    def lowered(self, eqn) -> LoweredShardMap:
        return self.shard_maps[id(eqn)]

    def all_shard_maps(self) -> list:
        return [self.shard_maps[id(e)] for e in self.program.eqns if id(e) in self.shard_maps]


def lower_module(program: Program, in_shardings) -> LoweredModule:
    """Lower every shard_map equation, tracking each value's layout from the inputs on."""
    layout: dict = {}
    for var, sharding in zip(program.invars, in_shardings):
        layout[id(var)] = sharding
    lowered: dict = {}
    for eqn in program.eqns:
        if eqn.primitive is prims.shard_map_p:
            mesh = eqn.params["mesh"]
            arriving = [_spec_on(layout.get(id(a)), mesh) for a in eqn.invars]
            lowered[id(eqn)] = lower_shard_map(eqn, arriving)
            for var, spec in zip(eqn.outvars, eqn.params["out_specs"]):
                layout[id(var)] = NamedSharding(mesh, spec)
        elif eqn.primitive is prims.sharding_constraint_p:
            layout[id(eqn.outvars[0])] = eqn.params["sharding"]
    return LoweredModule(program, lowered, tuple(in_shardings))


def _spec_on(sharding, mesh: Mesh) -> PartitionSpec:
    """The spec a value arrives with on ``mesh``; replicated unless laid out on that mesh."""
    if isinstance(sharding, NamedSharding) and sharding.mesh == mesh:
        return sharding.spec
    return PartitionSpec()
