"""The MPI backend: host equations on global values on every process, shard_map bodies on the
processes holding their devices."""
from __future__ import annotations

import os

from ir import primitives as prims
from ir.core import Aval
from ir.shapes import out_avals
from ir.sharding import (NamedSharding, canonical_spec, global_shape, replication_mismatch,
                         runtime_replication_error)
from runtime import reference
from runtime.array import Array
from runtime.devices import set_processes
from runtime.mpi.agreement import Agreement, agree, fingerprint
from runtime.mpi.arrays import Absent, MpiArray, gather_positions, is_absent
from runtime.mpi.faults import install_fault_handler
from runtime.mpi.schedule import LocalPlan, run_local_programs
from runtime.mpi.world import world
from runtime.vectorized import keyed_sharding


class MpiBackend(reference.ReferenceBackend):
    """Host equations on global values on every rank; shard_map bodies on the ranks holding
    their devices. ``SHARDC_MPI_REDUCTIONS=native`` uses MPI's reductions (not bit-exact)."""
    name = "mpi"

    def __init__(self, native: bool | None = None):
        if native is None:
            mode = os.environ.get("SHARDC_MPI_REDUCTIONS", "exact") or "exact"
            if mode not in ("exact", "native"):
                raise ValueError(f"SHARDC_MPI_REDUCTIONS must be 'exact' or 'native', "
                                 f"got {mode!r}")
            native = mode == "native"
        self.native = native
        self._checked: dict = {}
        self._shardings: dict = {}
        self._plans: dict = {}

    def eval_block(self, prim, blocks, params) -> list:
        if not any(is_absent(b) for b in blocks):
            return super().eval_block(prim, blocks, params)
        if prim is prims.debug_print_p:
            return []
        avals = out_avals(prim, [Aval(b.shape, b.dtype) for b in blocks], params)
        return [Absent(a.shape, a.dtype) for a in avals]

    def run_programs(self, mesh, programs, inputs) -> list:
        agree(self._fingerprint_of(programs, lambda: "\n".join(str(p) for p in programs[:1])),
              _DIFFERENT_PROGRAM)
        return run_local_programs(mesh, programs, inputs, self.native)

    def to_blocks(self, value, mesh, spec) -> list:
        """This rank's blocks of ``value``; the others ``Absent`` (a global value's other
        blocks are views, never copied)."""
        blocks = reference.to_blocks(value, mesh, spec)
        me = world().rank
        return [b if d.process_index == me or is_absent(b) else Absent(b.shape, b.dtype, d)
                for b, d in zip(blocks, mesh.devices.flat)]

    def from_blocks(self, blocks, mesh, spec):
        first = blocks[0]
        shape = global_shape(first.shape, spec, mesh.shape)
        return MpiArray(Aval(shape, first.dtype), self._sharding(mesh, spec), list(blocks))

    def _sharding(self, mesh, spec):
        """One sharding object per (mesh, spec): jit compares input shardings on every call,
        and the same object compares at once."""
        key = (id(mesh), tuple(spec))
        sharding = self._shardings.get(key)
        if sharding is None or sharding.mesh is not mesh:
            sharding = self._shardings[key] = keyed_sharding(mesh, canonical_spec(spec))
        return sharding

    def sharding_of(self, value):
        if not isinstance(value, Array):
            return None
        sharding = value.sharding
        if type(sharding) is NamedSharding:
            return self._sharding(sharding.mesh, sharding.spec)
        return sharding

    def execute(self, module, args) -> list:
        """Run a module once every process has agreed to run it (``Agreement``): otherwise one
        would wait at a collective the others never reach. A module that is one shard_map with
        straight-line communication overlaps the agreement with its first exchange."""
        entry = module.__dict__.get("_mpi_entry")
        if entry is None or entry[0] is not self:
            only = _only_shard_map(module)
            entry = module._mpi_entry = (
                self, fingerprint(str(module.program)), only,
                only is not None and self._plan(only).straight)
        _, header, only, overlapped = entry
        if overlapped:
            return self._run_shard_map(only, args, header)
        agree(header, _DIFFERENT_PROGRAM)
        if only is not None:
            return self._run_shard_map(only, args)
        return reference.execute_module(
            module, args, lambda index, values: self._run_shard_map(module.lowered(index),
                                                                    values))

    def _fingerprint_of(self, key_object, text) -> int:
        """The fingerprint of a module's (or programs') text, computed once per object."""
        key = id(key_object)
        entry = self._checked.get(key)
        if entry is None or entry[0] is not key_object:
            if len(self._checked) > 4096:
                self._checked.clear()
            entry = self._checked[key] = (key_object, fingerprint(text()))
        return entry[1]

    def every_block(self, blocks, mesh) -> list:
        """Every position's block on every rank (check_vma='runtime' of an eager shard_map)."""
        return gather_positions(blocks, mesh)

    def _run_shard_map(self, lowered, values, fingerprint=None) -> list:
        """Run one shard_map on this process's devices; with the module's ``fingerprint``, its
        agreement is posted here and overlaps the first exchange (straight programs)."""
        plan = self._plan(lowered)
        mesh = lowered.mesh
        inputs = {p: [] for p in plan.local}
        for value, spec, sharding in zip(values, lowered.in_shardings, plan.in_shardings):
            if type(value) is MpiArray and value.sharding is sharding and value._buffers:
                blocks = value._buffers       # laid out as the program wants it already
            else:
                blocks = self.to_blocks(value, mesh, spec)
            for p in plan.local:
                inputs[p].append(blocks[p])
        results = plan.run(inputs, None if fingerprint is None
                           else Agreement(fingerprint, _DIFFERENT_PROGRAM))
        outs = []
        for k, (aval, sharding) in enumerate(zip(plan.out_global_avals, plan.out_shardings)):
            column = [results[p][k] for p in range(mesh.size)]
            if lowered.runtime_check:
                _runtime_check(column, mesh, sharding.spec, k)
            outs.append(MpiArray(aval, sharding, column))
        return outs

    def _plan(self, lowered) -> LocalPlan:
        entry = self._plans.get(id(lowered))
        if entry is None or entry.lowered is not lowered:
            if len(self._plans) > 4096:
                self._plans.clear()
            entry = self._plans[id(lowered)] = LocalPlan(lowered, world().rank, self.native)
            mesh = lowered.mesh
            entry.in_shardings = [self._sharding(mesh, spec) for spec in lowered.in_shardings]
            entry.out_shardings = [self._sharding(mesh, spec) for spec in lowered.out_specs]
            entry.out_global_avals = [Aval(global_shape(a.shape, spec, mesh.shape), a.dtype)
                                      for a, spec in zip(entry.out_avals, lowered.out_specs)]
        return entry


_DIFFERENT_PROGRAM = ("are about to run a different program (every process must run the same "
                      "sequence of programs: no process-dependent Python control flow around "
                      "jit or shard_map)")


def _only_shard_map(module):
    """The lowered shard_map when the module is exactly one shard_map of its inputs, in order,
    giving its outputs (run without the host program's interpreter), else None."""
    program = module.program
    if len(program.eqns) != 1 or program.constvars or 0 not in module.shard_maps:
        return None
    (eqn,) = program.eqns
    if (len(eqn.invars) == len(program.invars) == len(set(map(id, eqn.invars)))
            and all(a is b for a, b in zip(eqn.invars, program.invars))
            and len(eqn.outvars) == len(program.outvars)
            and all(a is b for a, b in zip(eqn.outvars, program.outvars))):
        return module.lowered(0)
    return None


def _runtime_check(column, mesh, spec, k) -> None:
    """check_vma='runtime': every rank compares every position's block (all gathered)."""
    mismatch = replication_mismatch(gather_positions(column, mesh), mesh, spec)
    if mismatch:
        raise runtime_replication_error(k, spec, mesh, mismatch)


def install() -> "MpiBackend":
    """Join the MPI world: split the devices over its ranks, abort the job on any uncaught
    exception, and return the backend."""
    w = world()
    set_processes(w.rank, w.size)
    install_fault_handler()
    return MpiBackend()
