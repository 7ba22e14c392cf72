"""Eager shard_map: the body runs once, and every value holds the block of every device.

Each primitive acts on all blocks at once (collectives over the blocks of each device group;
ordinary ops block by block, or, on a backend that runs eager equations as programs, as one
stacked call over every device), so ``print`` inside the body shows each device's block with
its mesh coordinates, as in the tutorial. Replication types are tracked as in a traced
body, so the same checks apply.
"""
from __future__ import annotations

import numpy as np

from compiler.backend import get_backend
from compiler.lowering import lower_to_mesh
from compiler.replication import (check_vmas_match, infer_types, input_origins, lift_operand,
                                  merge_origins, origin_sources, per_output, pvary_error_check)
from compiler.shard_map import ShardContext, block_avals, check_replication, in_body
from compiler.tracing import (Trace, Tracer, aval_of, bind, check_closed_over,
                              concretization_head, eager_rules, errors_link, is_python_scalar,
                              set_current_trace, user_source, values_known_now)
from ir.core import Eqn, Program, Var
from ir import primitives as prims
from ir.graph import ORDERED_EFFECTS_ERROR, is_ordered_effect
from ir import collectives as coll
from ir import transfer_guard as _transfer_guard
from ir.shapes import out_avals
from ir.sharding import (NamedSharding, PartitionSpec, read_back_entries, replication_mismatch,
                         runtime_replication_error)
from ir.sharding_rules import partitions, shard_map_result_split, typed_avals


class ShardTracer(Tracer):
    """A body value in eager mode: one numpy block per mesh position (``blocks``: a list, or
    a sequence the backend holds them in, such as the fast backend's stacked form)."""
    __slots__ = ("_trace", "_aval", "blocks", "origins", "weak")

    def __init__(self, trace, blocks: list, aval, origins=None):
        self._trace = trace
        self.blocks = blocks
        self._aval = aval
        self.origins = origins or {}
        self.weak = False       # weakly typed, as ProgramTracer's

    @property
    def aval(self):
        return self._aval

    def _axis_order(self):
        return self._trace.mesh.axis_names if self._trace.shard.check_vma else None

    def __str__(self):
        mesh = self._trace.mesh
        names = "(" + ", ".join(mesh.axis_names) + ",)"
        entries = []
        for position, block in enumerate(self.blocks):
            if getattr(block, "absent", False):
                continue      # held by another process (MPI): that process prints it
            device = mesh.devices.flat[position]
            coords = mesh.coords(position)
            # the device spelt as the tutorial prints it (JAX 0.10 prints ``str(device)``,
            # ``cpu:0``, here)
            entries.append(f"On TFRT_CPU_{device.id} at mesh coordinates {names} = {coords}:"
                           f"\n{block}\n")
        return "\n".join(entries)

    def concrete_value(self, what: str, cls):
        """Python needs one value (``bool``, ``int``, ``operator.index``; ``float`` of an
        integer): given where the replication check proves it the same on every device, as
        JAX's eager bodies give it, and not in a body jit traces, where values are abstract;
        else JAX's error ``cls`` (``float`` of a floating value always is one: the base
        class's rule)."""
        if (not self._trace.shard.check_vma or self.aval.vma or self.aval.size != 1
                or not values_known_now()):
            raise self._concretization_error(what, cls)
        # invariant, so any block will do: the first this process holds (under MPI, some)
        block = next((b for b in self.blocks if not getattr(b, "absent", False)), None)
        if block is None:
            raise RuntimeError(f"{what} of a body value needs a block, but this process holds "
                               "no device of the mesh")
        return np.asarray(block).reshape(())      # one element: a scalar to Python

    def _concretization_error(self, what: str, cls):
        """JAX's error of an eager body, in its words: the value is there, but differs
        between devices (its type shows over which axes), so there is no one to give. (In a
        body jit traces, the tracer's error naming the user's line.)"""
        if not values_known_now():
            return super()._concretization_error(what, cls)
        traced = (f"traced array with shape "
                  f"{self.aval.str_long(self._trace.mesh.axis_names)}")
        return cls(concretization_head(what, cls, traced) + errors_link(cls))


class ShardTrace(Trace):
    def __init__(self, parent, shard: ShardContext):
        self.parent = parent
        self.shard = shard
        # values may be typed split only over Explicit axes the body leaves automatic
        self.typed = any(a not in shard.manual for a in shard.mesh.explicit_axes)
        self.mesh = shard.mesh
        self.steps = 0          # primitives run so far: orders the origins of varying axes

    def binds_axis_names(self) -> bool:
        return True

    def lift(self, value) -> ShardTracer:
        check_closed_over(aval_of(value), self.shard, value)
        aval = aval_of(value).strip_vma()
        # a numpy array the body closes over is the caller's, who may write into it later
        # (a body returning it would change): a copy of it is the body's
        array = np.array(value, aval.dtype) if isinstance(value, np.ndarray) else \
            np.asarray(value).astype(aval.dtype, copy=False)
        return ShardTracer(self, [array] * self.mesh.size, aval)

    def process_primitive(self, prim, tracers, params):
        rule = eager_rules.get(prim)
        if rule is not None:
            return rule(*tracers, **params)
        if self.mesh.size > 1 and is_ordered_effect(prim, params):
            # an eager body runs as a compiled one does, on every device (JAX's error)
            raise ValueError(ORDERED_EFFECTS_ERROR)
        in_vmas = [t.aval.vma for t in tracers]
        if prim is coll.pvary_p and self.shard.check_vma:
            pvary_error_check(in_vmas[0], params["mesh_axes"], tracers[0].aval,
                              self.mesh.axis_names)
        required, out_vma = infer_types(prim, in_vmas, params)
        if self.shard.check_vma:
            check_vmas_match(prim, in_vmas)
        if self.shard.check_vma and any(t.aval.reduced for t in tracers):
            # an operand reduced over axes the operation needs varying: cast as under jit
            tracers = [lift_operand(self, t, want - t.aval.vma)
                       if t.aval.reduced & (want - t.aval.vma) else t
                       for t, want in zip(tracers, required)]
            in_vmas = [t.aval.vma for t in tracers]
        in_avals = [t.aval for t in tracers]
        if self.typed:
            # typed where a partial-manual body's values are split over Explicit axes it left
            # automatic (an operand so split, an out_sharding= or a reshard onto them); the
            # blocks are whole along those, and computed untyped
            avals = typed_avals(prim, in_avals, params)
            blocks = self._apply(prim, tracers, params, [_untyped(a) for a in avals])
        else:
            avals = out_avals(prim, in_avals, params)
            blocks = self._apply(prim, tracers, params, avals)
        self.steps += 1
        return [ShardTracer(self, b, a.update(vma=vma),
                            _merge_origins(tracers, vma, in_vmas, self.steps))
                for a, b, vma in zip(avals, blocks, per_output(out_vma, len(avals)))]

    def _apply(self, prim, tracers, params, avals) -> list:
        """The blocks of every position (a list, or what the backend holds them in) of each
        result."""
        backend = get_backend()
        by_program = getattr(backend, "eager_by_program", False)
        if by_program or prim.kind in ("collective", "higher"):
            return self._run_on_every_device(prim, tracers, params, avals)
        per_position = [backend.eval_block(prim, [t.blocks[p] for t in tracers], params)
                        for p in range(self.mesh.size)]
        return [list(col) for col in zip(*per_position)] if avals else []

    def _run_on_every_device(self, prim, tracers, params, avals) -> list:
        """Lower a one-equation program to the mesh level and run it on every device, on the
        selected backend: the equation behaves exactly as in a jitted program."""
        program = _lowered_equation(self.mesh, prim, [_untyped(t.aval) for t in tracers], avals,
                                    params)
        return get_backend().run_mesh_program(self.mesh, program, [t.blocks for t in tracers])


_LOWERED: dict = {}
_LOWERED_LIMIT = 4096


def _untyped(aval):
    return aval if aval.type_sharding is None else aval.update(type_sharding=None)


def _lowered_equation(mesh, prim, in_avals, out_avals_, params):
    """The mesh-level program of one equation, cached when its params are hashable
    (collectives; not control flow, whose params hold programs), so eager bodies do not lower
    again (and backends find their plans for it again)."""
    try:
        key = (mesh, prim, tuple(in_avals), tuple(sorted(params.items())))
        hash(key)
    except TypeError:
        key = None
    if key is not None and key in _LOWERED:
        return _LOWERED[key]
    invars = [Var(a) for a in in_avals]
    outvars = [Var(a) for a in out_avals_]
    body = Program([], invars, [Eqn(prim, invars, outvars, dict(params), user_source())],
                   outvars)
    mesh_level = lower_to_mesh(mesh, body)
    if key is not None:
        if len(_LOWERED) >= _LOWERED_LIMIT:
            _LOWERED.clear()
        _LOWERED[key] = mesh_level
    return mesh_level


def _merge_origins(tracers, out_vma, in_vmas, order: int) -> dict:
    new = out_vma - frozenset().union(*in_vmas) if in_vmas else out_vma
    source = user_source() if new else None
    return merge_origins([t.origins for t in tracers], in_vmas, out_vma, order, source)


def run_shard_map_eagerly(parent: Trace, fun, args, params):
    """Run the body once over every device's block and assemble the outputs."""
    backend = get_backend()
    mesh = params["mesh"]
    in_specs = params["in_specs"]
    shard = ShardContext(mesh, params["check_vma"] is True,
                         frozenset(params["config"].manual_axes))
    trace = ShardTrace(parent, shard)
    avals = block_avals(mesh, in_specs, [aval_of(a) for a in args],
                        params["config"].manual_axes, params["check_vma"] is True)
    if _transfer_guard.active:
        for arg, spec in zip(args, in_specs):
            if isinstance(arg, _transfer_guard.HOST_TYPES):     # an implicit transfer
                _transfer_guard.check("host_to_device", False, lambda: (
                    f"aval={_transfer_guard.host_aval_text(arg)}, "
                    f"dst_sharding={NamedSharding(mesh, spec)!r}"))
    tracers = [ShardTracer(trace, blocks, aval, input_origins(aval.vma))
               for blocks, aval in zip(backend.place_inputs(args, mesh, in_specs), avals)]
    for tracer, arg in zip(tracers, args):
        # a Python scalar argument stays weakly typed in the body, as under jit
        tracer.weak = is_python_scalar(arg) or getattr(arg, "weak", False)
    with in_body(shard), set_current_trace(trace):
        outs = [trace.to_tracer(o) for o in fun(*tracers)]
    check_replication(params, [o.aval.vma for o in outs],
                      [origin_sources(o.origins) for o in outs])
    specs = params["out_store"]["specs"]
    if params["check_vma"] == "runtime":
        # a backend whose processes hold some blocks each (MPI) brings every block here
        every_block = getattr(backend, "every_block", lambda blocks, mesh: blocks)
        for k, (o, spec) in enumerate(zip(outs, specs)):
            mismatch = replication_mismatch(every_block(o.blocks, mesh), mesh, spec)
            if mismatch:
                raise runtime_replication_error(k, spec, mesh, mismatch)
    if set(params["config"].manual_axes) != set(mesh.axis_names):
        # JAX runs a shard_map manual over some axes as a jitted program: its results' specs
        # are spelt as its types say (one entry per dimension) on a mesh with Explicit axes,
        # as its compiler's layouts read back on an Auto one
        specs = [_padded(spec, o.aval.ndim) if mesh.explicit_axes
                 else _read_back(spec, mesh) for o, spec in zip(outs, specs)]
    results = [backend.from_blocks(o.blocks, mesh, spec) for o, spec in zip(outs, specs)]
    if trace.typed and any(o.aval.type_sharding is not None for o in outs):
        # a body result split over Explicit axes the shard_map left automatic keeps that split
        results = [_keeping_split(r, o.aval, spec, mesh)
                   for r, o, spec in zip(results, outs, specs)]
    return results


def _padded(spec, ndim: int):
    """``spec`` with None entries up to ``ndim``."""
    if not isinstance(spec, PartitionSpec) or len(spec) >= ndim:
        return spec
    return PartitionSpec(*spec, *(None,) * (ndim - len(spec)), unreduced=spec.unreduced,
                         reduced=spec.reduced)


def _read_back(spec, mesh):
    if not isinstance(spec, PartitionSpec) or spec.unreduced or spec.reduced:
        return spec
    return PartitionSpec(*read_back_entries(spec, mesh))


def _keeping_split(result, body_aval, spec, mesh):
    if body_aval.type_sharding is None:
        return result
    split = shard_map_result_split(mesh, spec, body_aval)
    return bind(prims.sharding_constraint_p, result,
                sharding=NamedSharding(mesh, PartitionSpec(*partitions(split))))
