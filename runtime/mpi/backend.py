"""The MPI backend: host equations on global values on every process, shard_map bodies on the
processes holding their devices."""
from __future__ import annotations

import os

import numpy as np

from ir import collectives as coll
from ir import primitives as prims
from ir.core import Aval
from ir.graph import holds_equation
from ir.shapes import out_avals
from ir.specialise import specialise
from ir.sharding import (Mesh, NamedSharding, canonical_spec, global_shape, replication_mismatch,
                         runtime_replication_error)
from runtime import reference
from runtime.array import Array, typed_as_laid_out
from runtime.devices import set_processes
from runtime.mpi.agreement import (Agreement, agree, combine, fingerprint, is_open,
                                   value_fingerprint, value_text, where_called)
from runtime.mpi.arrays import Absent, MpiArray, gather_positions, is_absent, local_positions
from runtime.mpi.faults import install_fault_handler
from runtime.mpi.schedule import LocalPlan, run_local_programs
from runtime.mpi.stacked import LocalStack
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
        super().__init__()
        self.native = native
        # host values entering the mesh are held against the other processes' (a hash)
        self.check_host_values = _host_values_mode() == "check"
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

    def run_mesh_program(self, mesh, program, inputs) -> list:
        """An eager collective: agreed on (the operation and its operand types) first, then
        run on this process's devices (their programs specialised once per program)."""
        text = lambda: str(program)
        agree(self._fingerprint_of(program, text), _DIFFERENT_OPERATION,
              detail=lambda: [("operation", f"{text()}\ncalled{where_called()}")],
              doing=lambda: f"in {_operation_name(program)}{where_called()}")
        local = local_positions(mesh, world().rank)
        programs = self._local_programs(mesh, program, local)
        results = run_local_programs(mesh, programs,
                                     {p: [blocks[p] for blocks in inputs] for p in local},
                                     [v.aval for v in program.outvars], self.native)
        return [[results[p][k] for p in range(mesh.size)]
                for k in range(len(program.outvars))]

    def _local_programs(self, mesh, program, local) -> dict:
        cache = self._device_programs
        entry = cache.get(id(program))
        if entry is None or entry[0] is not program or entry[1] is not mesh:
            if len(cache) > 4096:
                cache.clear()
            entry = cache[id(program)] = (program, mesh, {
                p: specialise(mesh, p, program) for p in local})
        return entry[2]

    def place_inputs(self, values, mesh, specs) -> list:
        """An eager shard_map's inputs: agreed on (their types, layouts, and the fingerprints
        of host values) first, then this process's blocks of each."""
        header, detail = self._entering(
            [fingerprint(f"shard_map {mesh} {[tuple(s) for s in specs]}")], values,
            [f"argument {k}" for k in range(len(values))], specs)
        agree(header, _different_values("a shard_map"), detail=detail,
              doing=lambda: f"to enter the shard_map called{where_called()}")
        return [self.to_blocks(v, mesh, s) for v, s in zip(values, specs)]

    def put(self, values, shardings, labels=None) -> list:
        """``device_put``: host values laid out on a mesh are agreed on first."""
        entering = [k for k, s in enumerate(shardings) if isinstance(s, NamedSharding)
                    and not isinstance(values[k], MpiArray)]
        if entering:
            labels = labels() if callable(labels) else labels
            labels = labels or [f"leaf {k}" for k in range(len(values))]
            header, detail = self._entering(
                [fingerprint("device_put")], [values[k] for k in entering],
                [labels[k] for k in entering], [shardings[k].spec for k in entering])
            agree(header, _different_values("device_put"), detail=detail,
                  doing=lambda: f"in device_put{where_called()}")
        # what was laid out on a mesh was agreed on (a value put on one device was not)
        return [self._held_alike(v) if isinstance(s, NamedSharding) else v
                for v, s in zip(super().put(values, shardings, labels), shardings)]

    def _held_alike(self, value):
        """``value`` as this world's array where every process holds it whole and alike: put
        by all of them after agreeing on it, or computed by all of them from such values. A
        jitted call then takes it as it takes a shard_map's result, without holding its bytes
        against the other processes' again."""
        if type(value) is not Array or value._global is None:
            return value
        sharding = value.sharding
        if type(sharding) is NamedSharding:
            sharding = self._sharding(sharding.mesh, sharding.spec)
        out = MpiArray(value.aval, sharding, value._buffers)
        out._global, out.weak, out.fingerprint = value._global, value.weak, value.fingerprint
        return out

    def _entering(self, heads: list, values, labels, specs) -> tuple:
        """The fingerprint of an operation (``heads``) whose ``values`` enter the mesh: their
        types and layouts, and each host value's bytes (unless SHARDC_MPI_HOST_VALUES=trust);
        and the function giving its details."""
        prints = list(heads)
        for value, spec in zip(values, specs):
            if isinstance(value, MpiArray):
                prints.append(fingerprint(f"{value.aval} {spec}"))
            elif self.check_host_values:
                prints.append(_host_fingerprint(value) ^ _spec_fingerprint(spec))
            else:
                prints.append(fingerprint(f"{np.shape(value)} {_dtype_of(value)} {spec}"))
        entered = list(zip(values, specs, prints[len(heads):]))

        def details() -> list:       # worked out only when the processes disagree
            texts = []
            for value, spec, print_ in entered:
                layout = f"placed {spec!r}" if spec is not None else ""
                if isinstance(value, MpiArray):
                    texts.append(f"{value.aval.str_short()} global {layout}")
                elif self.check_host_values:
                    texts.append(f"{value_text(value, print_)} {layout}")
                else:
                    texts.append(f"{_dtype_of(value)}{list(np.shape(value))} {layout}")
            return list(zip(labels, (t.strip() for t in texts)))
        return combine(prints), details

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
        key = (id(mesh), tuple(spec), getattr(spec, "unreduced", frozenset()),
               getattr(spec, "reduced", frozenset()))
        sharding = self._shardings.get(key)
        if sharding is None or sharding.mesh is not mesh:
            sharding = self._shardings[key] = keyed_sharding(mesh, canonical_spec(spec))
        return sharding

    def sharding_of(self, value):
        if type(value) is not MpiArray and not isinstance(value, Array):
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
            entry = module._mpi_entry = (self, fingerprint(str(module.program)), only,
                                         lambda: [("program", str(module.program))],
                                         not _calls_back(module.program),
                                         _runs_on_no_mesh(module))
        _, header, only, detail, alike, local = entry
        if local and all(type(a) is not MpiArray or a.is_fully_addressable for a in args):
            # this process's own computation on its default device, as JAX runs it: no other
            # process takes part, and its values are its own
            return reference.execute_module(module, args)
        if self.check_host_values:
            for arg in args:
                if type(arg) is not MpiArray:
                    header, detail = self._with_host_values(module, header, detail, args)
                    break
        # posted now, settled by the first exchange (whose data is read only after it) or by
        # the next operation that crosses processes, or at the end: the processes' arrival
        # skew overlaps the work before that
        opening = Agreement(header, _module_mismatch, detail, _running)
        try:
            if only is not None:
                return self._run_shard_map(only, args, opening)
            outs = reference.execute_module(
                module, args, lambda index, values: self._run_shard_map(
                    module.lowered(index), values, opening),
                lambda eqn, values: self._run_shard_map(module.nested_lowered(eqn), values,
                                                        opening))
            # host results of agreed inputs are alike on every process, unless a Python
            # function the program called back gave each process its own
            return [self._held_alike(v) for v in outs] if alike else outs
        finally:
            if is_open(opening):
                opening.settle()

    def _with_host_values(self, module, header: int, detail, args) -> tuple:
        """A module's agreement with the fingerprints of the host values among its arguments
        (constants first) folded in."""
        host = [k for k, a in enumerate(args) if type(a) is not MpiArray]
        consts = len(module.program.constvars)
        labels = [f"constant {k}" if k < consts else f"argument {k - consts}" for k in host]
        combined, values_detail = self._entering([header], [args[k] for k in host], labels,
                                                 [None] * len(host))
        return combined, lambda: detail() + values_detail()

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

    def _run_shard_map(self, lowered, values, opening=None) -> list:
        """Run one shard_map on this process's devices; the module's agreement (``opening``),
        while still open, settles before its first exchange's data is read (straight
        programs), or before it runs."""
        plan = self._plan(lowered)
        mesh = lowered.mesh
        if not is_open(opening):
            opening = None
        elif not plan.straight:
            opening.settle()
            opening = None

        def column(j) -> list:
            """This process's blocks of input j, by position."""
            value, sharding = values[j], plan.in_shardings[j]
            if type(value) is MpiArray and value.sharding is sharding:
                return value.buffers          # laid out as the program wants it already
            return self.to_blocks(value, mesh, lowered.in_shardings[j])
        results = plan.run(values, column, opening)
        outs = []
        for k, (aval, sharding, result) in enumerate(zip(plan.out_global_avals,
                                                         plan.out_shardings, results)):
            if type(result) is LocalStack:
                out = MpiArray.typed(aval, sharding, None)
                out._local = result
            else:
                out = MpiArray.typed(aval, sharding, result)
            if lowered.runtime_check:
                _runtime_check(out.buffers, mesh, sharding.spec, k)
            outs.append(out)
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
            # typed as their layouts split them, once: an array made with its type as is
            entry.out_global_avals = [
                typed_as_laid_out(Aval(global_shape(a.shape, spec, mesh.shape), a.dtype),
                                  sharding)
                for a, spec, sharding in zip(entry.out_avals, lowered.out_specs,
                                             entry.out_shardings)]
        return entry


_DIFFERENT_PROGRAM = ("are about to run a different program (every process must run the same "
                      "sequence of programs: no process-dependent Python control flow around "
                      "jit or shard_map)")
_DIFFERENT_OPERATION = ("are about to run a different collective (every process must run the "
                        "same sequence of operations: no process-dependent Python control flow "
                        "around a collective in an eager shard_map body)")


def _different_values(operation: str):
    """The ``what`` of an agreement on values entering the mesh."""
    def what(labels) -> str:
        return (f"pass different values to {operation} (every process must pass the same: "
                "each keeps its own devices' blocks of its own copy of a host value, so values "
                "that differ would mix; build per-process data with "
                "make_array_from_process_local_data, or set SHARDC_MPI_HOST_VALUES=trust to "
                "skip this check)")
    return what


def _module_mismatch(labels) -> str:
    if "program" in labels or not labels:
        return _DIFFERENT_PROGRAM
    return _different_values("the program")(labels)


def _running() -> str:
    return f"to run the program called{where_called()}"


def _operation_name(program) -> str:
    """The communication node of an eager collective's program, by name and axes."""
    for eqn in program.eqns:
        if coll.grouped(eqn.primitive):
            return f"{eqn.primitive}[mesh_axes={eqn.params.get('mesh_axes')}]"
    return "a collective"


def _host_values_mode() -> str:
    mode = os.environ.get("SHARDC_MPI_HOST_VALUES", "check") or "check"
    if mode not in ("check", "trust"):
        raise ValueError(f"SHARDC_MPI_HOST_VALUES must be 'check' or 'trust', got {mode!r}")
    return mode


def _dtype_of(value):
    return getattr(value, "dtype", None) or np.asarray(value).dtype


def _spec_fingerprint(spec) -> int:
    text = str(spec)
    found = _SPEC_PRINTS.get(text)
    if found is None:
        if len(_SPEC_PRINTS) > 4096:
            _SPEC_PRINTS.clear()
        found = _SPEC_PRINTS[text] = fingerprint(text)
    return found


_SPEC_PRINTS: dict = {}


def _host_fingerprint(value) -> int:
    """A host value's fingerprint; an Array's (immutable) is computed once."""
    if isinstance(value, Array):
        if value.fingerprint is None:
            value.fingerprint = value_fingerprint(np.asarray(value))
        return value.fingerprint
    return value_fingerprint(value)


def _calls_back(program) -> bool:
    """Whether a program calls a Python function (a callback), whose results may differ
    between processes, anywhere: in a shard_map body too, whose results the host program
    may compute from."""
    return holds_equation(program, lambda eqn: eqn.primitive is prims.callback_p)


def _runs_on_no_mesh(module) -> bool:
    """Whether the module runs on no mesh (no shard_map, no propagated layouts) and names no
    device of another process: given values of this process's devices only, it is this
    process's own computation (on its default device), whatever the others do."""
    return (not module.shard_maps and not module.nested and module.propagated is None
            and not _names_other_devices(module.program))


def _names_other_devices(program) -> bool:
    """Whether an equation's parameters (a constraint's, a reshard's sharding) name a mesh or
    device of another process, anywhere in ``program``."""
    def other(value) -> bool:
        devices = getattr(value, "device_set", None)
        if devices is None and isinstance(value, Mesh):
            devices = value.devices.flat
        if devices is None and isinstance(value, (tuple, list)):
            return any(other(v) for v in value)
        return devices is not None and not all(d.is_local for d in devices)
    return holds_equation(program, lambda eqn: any(map(other, eqn.params.values())))


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
