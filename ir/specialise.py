"""Stage 2 of lowering: a mesh-level program seen from one device.

A pure IR-to-IR step, so that a module read from text derives its per-device programs from its
mesh-level program without the compiler: each communication node gets the concrete
``device_groups`` of its mesh axes and ``process_index`` becomes the device's constant rank.
Nothing else changes.
"""
from __future__ import annotations

import numpy as np

from ir import dtypes
from ir.collectives import process_index_node
from ir.core import Aval, DeviceProgram, Eqn, Literal, Program, Var, holds_programs
from ir.sharding import Mesh, axes_rank, device_groups
from ir.verify import check_coherence, verify_device_program

def specialise(mesh: Mesh, position: int, program: Program) -> Program:
    """The program the device at ``position`` runs for a mesh-level program."""
    coords = mesh.coords(position)
    return _specialise(mesh, coords, program)


def _specialise(mesh: Mesh, coords: tuple, program: Program) -> Program:
    """Not on the shared loop (``ir.interpreter``): it runs once per device over one program
    (65,536 times for a mesh of as many devices), sharing every equation that does not change,
    and needs none of the loop's bookkeeping of values (freeing, single assignment)."""
    env: dict = {}
    eqns = []
    for eqn in program.eqns:
        prim = eqn.primitive
        if prim is process_index_node:
            rank = axes_rank(mesh.shape, mesh.axis_names, coords, eqn.params["mesh_axes"])
            env[id(eqn.outvars[0])] = Literal(np.int32(rank), Aval((), dtypes.int32))
            continue
        invars = [env.get(id(a), a) if isinstance(a, Var) else a for a in eqn.invars]
        params = eqn.params
        record = prim.collective
        if record is not None and record.grouped:      # a communication node: its groups here
            params = dict(params, device_groups=device_groups(mesh, params["mesh_axes"]))
        elif prim.kind == "higher":
            params = {key: _specialise_param(mesh, coords, value)
                      for key, value in params.items()}
        if params is eqn.params and all(a is b for a, b in zip(invars, eqn.invars)):
            eqns.append(eqn)        # the same on every device: shared, not copied
        else:
            eqns.append(Eqn(prim, invars, eqn.outvars, params, eqn.source))
    outvars = [env.get(id(a), a) if isinstance(a, Var) else a for a in program.outvars]
    return Program(program.constvars, program.invars, eqns, outvars, program.consts)


def _specialise_param(mesh, coords, value):
    if isinstance(value, Program):
        return _specialise(mesh, coords, value)
    if holds_programs(value):
        return tuple(_specialise(mesh, coords, v) for v in value)
    return value


def device_programs(lowered, positions=None) -> list:
    """Stage 2 for every mesh position of a lowered shard_map (``ir.module.LoweredShardMap``),
    or for ``positions`` only (a process of several runs its own devices' programs): one
    DeviceProgram each, verified as lowered programs (each well formed, all coherent)."""
    mesh = lowered.mesh
    program = lowered.mesh_program
    programs = []
    for position in (range(mesh.size) if positions is None else positions):
        dp = DeviceProgram(mesh.flat_device_ids[position], position, mesh.axis_names,
                           mesh.coords(position), specialise(mesh, position, program),
                           show_vma=lowered.show_vma)
        verify_device_program(dp, mesh)
        programs.append(dp)
    check_coherence(mesh, programs)
    return programs
