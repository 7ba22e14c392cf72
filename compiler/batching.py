"""Batching: ``vmap`` as a trace whose values carry a batch dimension.

A ``BatchTracer`` holds a value of the enclosing (parent) trace and ``batch_dim``, the axis of
that value which is the batch (None for a value that is the same for every batch member). Its
aval is the per-member aval: the value's aval without the batch axis. Each primitive has a rule
``rule(values, dims, **params) -> (outs, out_dims)`` that applies the primitive to whole
batches; rules run with the parent as the current trace, so their own binds go there. That
makes ``vmap`` work eagerly, under ``jit``/``make_jaxpr`` and inside shard_map bodies alike.

    vmap(f)(xs):   xs f32[4,3] --BatchTracer(xs, 0): aval f32[3]--> f --> outs, out_dims
                   --> move each out's batch dim to its out_axis

A shard_map under vmap is one shard_map whose body runs under a BatchTrace of the same vmap
(``batch_shard_map``). ``vmap(axis_name=...)`` names the batch axis: collectives over it are
batched by ``named_axis_rules`` (collective_rules.py); loops, branches, remat and staged shard_maps
by ``control_rules`` (batching_control.py), on the whole batch at once.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import Callable, Hashable

import numpy as np

from compiler.tracing import (Trace, Tracer, aval_of, bind, current_trace, inner_concrete,
                              inner_independent, set_current_trace, values_known_now, weakened)
from ir import primitives as prims
from ir import collectives as coll
from ir.core import Aval, Program, TypeSharding
from ir.primitives import RuleTable
from ir.shapes import out_avals
from ir.sharding import NamedSharding, PartitionSpec, spec_axes
from ir.sharding_rules import partitions

batching_rules = RuleTable("batching")
# rule(trace, values, dims, **params): collectives naming the vmap's axis (collective_rules.py)
named_axis_rules = RuleTable("named-axis batching")
# rule(trace, values, dims, **params): scan, cond, while, remat and staged shard_maps on
# whole batches (batching_control.py)
control_rules = RuleTable("control-flow batching")


# --- the trace ---------------------------------------------------------------------------------

class BatchTracer(Tracer):
    """A batch of values: ``value`` (of the parent trace) with its batch axis at ``batch_dim``."""
    __slots__ = ("_trace", "value", "batch_dim")

    def __init__(self, trace, value, batch_dim):
        self._trace = trace
        self.value = value
        self.batch_dim = batch_dim

    @property
    def weak(self) -> bool:
        """Weakly typed (JAX's weak_type) as its batch of values is."""
        return getattr(self.value, "weak", False) is True

    @weak.setter
    def weak(self, weak: bool) -> None:
        if weak:
            self.value = weakened(self.value)

    def independent_of_inputs(self) -> bool:
        """Unbatched: JAX's vmap would have handed the value on untraced."""
        return self.batch_dim is None and inner_independent(self.value)

    def concrete_value(self, what: str, cls):
        """An unbatched value's, where it is known (a primal under ``jacfwd``, as in JAX)."""
        if self.batch_dim is not None or not values_known_now():
            raise self._concretization_error(what, cls)
        return inner_concrete(self.value, what, cls)

    @property
    def aval(self) -> Aval:
        full = aval_of(self.value)
        if self.batch_dim is None:
            return full
        d = self.batch_dim
        shape = full.shape[:d] + full.shape[d + 1:]
        # the batch dimension leaves the type with its split (JAX: it becomes the batch
        # axis's explicit mesh axis)
        sharding = full.type_sharding
        if sharding is not None:
            sharding = TypeSharding.of(sharding.mesh, sharding.spec[:d] + sharding.spec[d + 1:])
        return full.update(shape=shape, type_sharding=sharding)

    def _layout(self):
        """A batch of laid-out values: what layout each member has is not followed."""
        from compiler.layouts import UNKNOWN, layout_of, meaningful
        return UNKNOWN if meaningful(layout_of(self.value)) else None

    def _axis_order(self):
        value = self.value
        return value._axis_order() if isinstance(value, Tracer) else ()


class BatchTrace(Trace):
    """Runs a function on every member of a batch at once, by batching rules.

    ``tag`` names the vmap: a shard_map under vmap traces its body under a second BatchTrace
    with the same tag, which takes the vmap's tracers closed over by the body as its own
    (their values, of the enclosing trace, become the body's closed-over inputs). ``axis`` is
    the vmap's named axis (collectives over it act across the members), and ``spmd`` how a
    shard_map body's batch is split over mesh axes (``spmd_axis_name``): then this trace holds
    ``axis_size`` members of each device's block, a slice of the whole batch.
    """

    def __init__(self, parent, axis_size: int, *, tag=None, axis: "NamedAxis | None" = None,
                 spmd_axis_name: tuple | None = None, spmd: "SpmdSplit | None" = None):
        self.parent = parent
        self.axis_size = axis_size
        self.tag = tag if tag is not None else object()
        self.axis = axis
        self.spmd_axis_name = spmd_axis_name
        self.spmd = spmd
        # the Explicit mesh axes splitting the mapped dimension (JAX's explicit_mesh_axis):
        # batched results and layouts chosen inside are split so along it
        self.batch_spec: tuple = ()
        self._adopted: dict = {}     # id(closed-over tracer) -> this trace's tracer for it

    def same_level(self, other) -> bool:
        return isinstance(other, BatchTrace) and other.tag is self.tag

    def binds_axis_names(self) -> bool:
        return self.axis is not None or self.spmd is not None or bool(self.spmd_axis_name)

    def vmapped_mesh_axes(self) -> tuple:
        return tuple(self.batch_spec) + super().vmapped_mesh_axes()

    def to_tracer(self, value) -> BatchTracer:
        if (isinstance(value, BatchTracer) and value._trace is not self
                and value._trace.tag is self.tag):
            return self._adopt(value)
        return super().to_tracer(value)

    def _adopt(self, tracer: BatchTracer) -> BatchTracer:
        """A tracer of this vmap met inside a shard_map body under it: the same batch. In a
        body whose batch is split over mesh axes, each device keeps its own members."""
        known = self._adopted.get(id(tracer))
        if known is not None:
            return known[1]
        value, dim = tracer.value, tracer.batch_dim
        if dim is not None and self.spmd is not None:
            with set_current_trace(self.parent):
                value = self.spmd.local_members(value, dim, self.axis_size)
        adopted = BatchTracer(self, value, dim)
        self._adopted[id(tracer)] = (tracer, adopted)
        return adopted

    def lift(self, value) -> BatchTracer:
        """Values from outside the vmapped function are the same for every member."""
        return BatchTracer(self, value, None)

    def unwrap(self, value):
        """(value of the parent trace, batch dim) of anything the vmapped function produced."""
        tracer = self.to_tracer(value)
        return tracer.value, tracer.batch_dim

    def process_primitive(self, prim, tracers, params):
        values = [t.value for t in tracers]
        dims = [t.batch_dim for t in tracers]
        names = _named_axes(prim, params)
        if self.spmd is not None and any(d is not None for d in dims):
            # (on values the same for every member, a collective means what it says)
            self.spmd.check_collective(prim, names)
        # A loop or body with a collective over this vmap's axis must run the members in
        # lockstep, on the whole batch, even when no operand is batched.
        inner_collectives = (self.axis is not None and prim.kind == "higher"
                             and _names_axis_inside(self.axis.name, params))
        with set_current_trace(self.parent):
            if self.axis is not None and self.axis.name in names:
                outs, out_dims = named_axis_rules[prim](self, values, dims, **params)
            elif prim in control_rules and (inner_collectives or any(
                    d is not None for d in dims)):
                outs, out_dims = split_batching(values, dims, control_rules[prim], self,
                                                values, dims, sub_programs=True, **params)
            elif all(d is None for d in dims):
                outs = _bind_list(prim, values, params)
                out_dims = [None] * len(outs)
            else:
                if prim is prims.sharding_constraint_p:
                    params = dict(params, spmd_axis_name=self.spmd_axis_name
                                  or self.batch_spec or None)
                _batch_specs.append(self.batch_spec)
                try:
                    outs, out_dims = split_batching(values, dims, batching_rules[prim],
                                                    values, dims, **params)
                finally:
                    _batch_specs.pop()
        return [BatchTracer(self, o, d) for o, d in zip(outs, out_dims)]

    def process_shard_map(self, fun, args, params):
        """vmap of a shard_map: one shard_map whose body runs batched (see ``batch_shard_map``)."""
        pairs = [self.unwrap(a) if isinstance(a, Tracer) else (a, None) for a in args]
        values = [v for v, _ in pairs]
        dims = [d for _, d in pairs]
        return batch_shard_map(self, fun, values, dims, params)


def _named_axes(prim, params) -> tuple:
    """The axis names a collective acts over (none for other primitives)."""
    if prim.kind != "collective":
        return ()
    return tuple(params.get("mesh_axes", ()))


def _names_axis_inside(name, params) -> bool:
    """Whether a collective in a sub-program of ``params`` names the vmap axis ``name``."""
    return any(_program_names_axis(p, name) for p in _sub_programs(params))


def _sub_programs(params) -> list:
    found = []
    for value in params.values():
        items = value if isinstance(value, (tuple, list)) else (value,)
        found += [item for item in items if isinstance(item, Program)]
    return found


def _program_names_axis(program: Program, name) -> bool:
    for eqn in program.eqns:
        if eqn.primitive.kind == "collective" and name in eqn.params.get("mesh_axes", ()):
            return True
        if any(_program_names_axis(p, name) for p in _sub_programs(eqn.params)):
            return True
    return False


# --- named axes --------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class NamedAxis:
    """A vmap's ``axis_name`` and its size (the whole batch)."""
    name: Hashable
    size: int


# The named axes of the vmaps being run, innermost last: collectives find their sizes here.
_vmap_axes: list = []


def vmap_axis(name) -> NamedAxis | None:
    """The innermost vmap whose ``axis_name`` is ``name``, if any."""
    for axis in reversed(_vmap_axes):
        if axis.name == name:
            return axis
    return None


@contextlib.contextmanager
def named_axis(axis: NamedAxis | None):
    """Run a vmap whose batch axis is named ``axis`` (None: unnamed)."""
    if axis is not None:
        _vmap_axes.append(axis)
    try:
        yield
    finally:
        if axis is not None:
            _vmap_axes.pop()


@dataclasses.dataclass(frozen=True)
class SpmdSplit:
    """A shard_map body's batch split over mesh axes: device d holds members
    ``rank(d) * local .. rank(d) * local + local - 1``, ``rank`` over ``mesh_axes``."""
    mesh_axes: tuple
    size: int                    # the number of devices the batch is split over

    def local_members(self, value, dim: int, local: int):
        """This device's members of a whole batch ``value`` (batch axis ``dim``)."""
        rank = bind(coll.axis_index_p, mesh_axes=self.mesh_axes)
        start = bind(prims.mul_p, rank, np.int32(local))
        starts = [np.int32(0)] * ndim_of(value)
        starts[dim] = start
        sizes = list(shape_of(value))
        sizes[dim] = local
        return bind(prims.dynamic_slice_p, value, *starts, slice_sizes=tuple(sizes))

    def check_collective(self, prim, names):
        clash = [a for a in names if a in self.mesh_axes]
        if clash:
            raise ValueError(
                f"vmap spmd_axis_name {self.mesh_axes} splits the batch over mesh axis "
                f"{clash[0]!r}, so the shard_map body cannot also use it in {prim.name}")


def _bind_list(prim, values, params) -> list:
    outs = bind(prim, *values, **params)
    return list(outs) if prim.multiple_results else [outs]


# --- vmap of a shard_map -----------------------------------------------------------------------

def batch_shard_map(trace: BatchTrace, fun, values, dims, params) -> list:
    """vmap of a shard_map is one shard_map: each batched input's spec gains the batch axis
    (not split, or split over ``spmd_axis_name``), the body runs under a BatchTrace of the
    same vmap, and each batched output's spec gains the batch axis where the body left it.

        vmap(shard_map(f, in_specs=P('i')))(xs f32[B,8])
          == shard_map(vmap(f), in_specs=P(None, 'i'))(xs)       blocks f32[B,8/|i|]

    Values the body closes over that the vmap batched are taken by the body's BatchTrace as
    its own: they enter the shard_map as closed-over inputs (spec P()), batch axis whole.
    """
    mesh = params["mesh"]
    spmd = (spmd_split(trace, mesh, params["in_specs"], "in_specs")
            or explicit_split(trace, mesh, params["in_specs"], values, dims))
    local = trace.axis_size if spmd is None else trace.axis_size // spmd.size
    entry = None if spmd is None else spec_entry(spmd.mesh_axes)
    in_specs = tuple(spec if d is None else batch_spec(spec, d, entry)
                     for spec, d in zip(params["in_specs"], dims))
    member_store = params["out_store"]
    store: dict = {}

    def batched_body(*blocks):
        inner = BatchTrace(current_trace(), local, tag=trace.tag, axis=trace.axis,
                           spmd_axis_name=trace.spmd_axis_name, spmd=spmd)
        tracers = [b if d is None else BatchTracer(inner, b, d) for b, d in zip(blocks, dims)]
        with set_current_trace(inner):
            outs = [inner.unwrap(o) for o in fun(*tracers)]
        out_dims = [d for _, d in outs]
        if spmd is not None:
            check_spmd_unused(spmd, member_store["specs"], "out_specs")
        store.update(member_store, dims=out_dims)
        for key in ("specs", "user_specs"):
            store[key] = [spec if d is None else batch_spec(spec, d, entry)
                          for spec, d in zip(member_store[key], out_dims)]
        return [v for v, _ in outs]

    new_params = dict(params, in_specs=in_specs, out_store=store)
    with set_current_trace(trace.parent):
        outs = trace.parent.process_shard_map(batched_body, values, new_params)
    return [BatchTracer(trace, o, d) for o, d in zip(outs, store["dims"])]


def batch_spec(spec, dim: int, entry) -> PartitionSpec:
    """``spec`` of a per-member value, for the batched value whose batch axis is ``dim``."""
    entries = list(spec)
    if entry is None and dim >= len(entries):
        return PartitionSpec(*entries)         # dimensions past the end are not split anyway
    entries += [None] * (dim - len(entries))
    entries.insert(dim, entry)
    return PartitionSpec(*entries)


def spec_entry(mesh_axes: tuple):
    return mesh_axes[0] if len(mesh_axes) == 1 else tuple(mesh_axes)


def spmd_split(trace: BatchTrace, mesh, in_specs, which: str) -> SpmdSplit | None:
    """How ``spmd_axis_name`` splits the batch over ``mesh``, checked; None without it."""
    names = trace.spmd_axis_name
    if names is None:
        return None
    unknown = [a for a in names if a not in mesh.axis_names]
    if unknown:
        raise ValueError(f"vmap spmd_axis_name={names!r} names {unknown[0]!r}, which is not "
                         f"an axis of the shard_map's mesh {mesh.axis_names}")
    size = math.prod(mesh.shape[a] for a in names)
    split = SpmdSplit(tuple(names), size)
    check_spmd_unused(split, in_specs, which)
    if trace.axis_size % size:
        raise ValueError(f"vmap spmd_axis_name={names!r} splits the batch axis of size "
                         f"{trace.axis_size} over mesh axes of total size {size}, which does "
                         "not divide it")
    return split


# jax_disable_vmap_shmap_error: check_spmd_unused (below) lets the specs name the spmd axes
_vmap_shmap_error_disabled = [False]


def set_vmap_shmap_error_disabled(on: bool) -> None:
    _vmap_shmap_error_disabled[0] = bool(on)


def explicit_split(trace: BatchTrace, mesh, in_specs, values, dims) -> SpmdSplit | None:
    """Without ``spmd_axis_name``: how the batched operands' types split the batch axis over
    Explicit axes of ``mesh``, where they agree and the shard_map's specs leave those axes
    free. JAX's vmap keeps that split, the shard_map then manual over those axes too (as
    under spmd_axis_name); None where nothing splits it."""
    if trace.spmd_axis_name is not None:
        return None
    entries = set()
    for value, d in zip(values, dims):
        if d is not None:
            typed = aval_of(value).type_sharding
            entries.add(tuple(typed.spec[d]) if typed is not None else ())
    if len(entries) != 1:
        return None
    (axes,) = entries
    used = {a for spec in in_specs for a in spec_axes(spec)}
    if not axes or used & set(axes) or any(a not in mesh.axis_names for a in axes):
        return None
    size = math.prod(mesh.shape[a] for a in axes)
    return SpmdSplit(tuple(axes), size) if trace.axis_size % size == 0 else None


def check_spmd_unused(split: SpmdSplit, specs, which: str):
    if _vmap_shmap_error_disabled[0]:
        return
    used = {a for spec in specs for a in spec_axes(spec)}
    if used & set(split.mesh_axes):
        raise ValueError(f"vmap spmd_axis_name cannot appear in shard_map {which}")


# --- helpers on batched values (they bind in the current trace, the parent) --------------------

def shape_of(x) -> tuple:
    return aval_of(x).shape


def ndim_of(x) -> int:
    return len(aval_of(x).shape)


def batch_size(values, dims) -> int:
    """The batch size, read off the first batched operand."""
    for value, dim in zip(values, dims):
        if dim is not None:
            return shape_of(value)[dim]
    raise ValueError("batch_size: no operand is batched")


# the batch split (``BatchTrace.batch_spec``) of each vmap whose batching rule runs, innermost
# last: a result split a rule asks for gains the batch dimension split so
_batch_specs: list = []


def with_batch_dim(sharding, dim: int):
    """``sharding`` (a NamedSharding naming a result's split) with the batch dimension
    inserted at ``dim``, split as the vmap's batch is over Explicit mesh axes (JAX's
    explicit_mesh_axis), else unsplit."""
    batch = _batch_specs[-1] if _batch_specs else ()
    entry = spec_entry(batch) if batch and set(batch) <= set(sharding.mesh.axis_names) \
        else None
    entries = list(sharding.spec)
    if dim > len(entries):
        entries += [None] * (dim - len(entries))
    entries.insert(dim, entry)
    return NamedSharding(sharding.mesh, sharding.spec.update(partitions=entries))


def shift_axes(axes, dim) -> tuple:
    """Per-member axes as axes of the batched value whose batch axis is ``dim``."""
    return tuple(a + (a >= dim) for a in axes)


def moveaxis(x, src: int, dst: int):
    """``x`` with axis ``src`` moved to position ``dst`` (a transpose, or ``x`` itself)."""
    if src == dst:
        return x
    perm = [k for k in range(ndim_of(x)) if k != src]
    perm.insert(dst, src)
    return bind(prims.transpose_p, x, permutation=tuple(perm))


def broadcast_batch(x, size: int, dim: int = 0):
    """``x`` repeated ``size`` times along a new axis at ``dim``; split as the batched operands
    of the equation being batched split their batch axis (``_batch_split``), as JAX's
    batching broadcasts an unbatched operand."""
    shape = shape_of(x)
    out_shape = shape[:dim] + (size,) + shape[dim:]
    kept = tuple(k if k < dim else k + 1 for k in range(len(shape)))
    split = _batch_split[-1]
    if split is not None:
        mesh, axes = split
        sharding = aval_of(x).type_sharding
        spec = list(sharding.spec) if sharding is not None else [()] * len(shape)
        if not set(axes) & {a for names in spec for a in names}:
            spec.insert(dim, axes)
            out = bind(prims.broadcast_in_dim_p, x, shape=out_shape, broadcast_dimensions=kept)
            return bind(prims.sharding_constraint_p, out,
                        sharding=NamedSharding(mesh, PartitionSpec(*partitions(spec))))
    return bind(prims.broadcast_in_dim_p, x, shape=out_shape, broadcast_dimensions=kept)


# (mesh, axes) splitting the batch axis of the equation being batched, where an operand's
# Explicit type splits it and another operand is unbatched; else None
_batch_split: list = [None]


def current_batch_split():
    """(mesh, axes) splitting the batch axis of the equation being batched, or None."""
    return _batch_split[-1]


def batch_split_of(values, dims):
    """(mesh, axes) the type of the first batched value that splits its batch axis splits it
    over; None where none does."""
    for value, dim in zip(values, dims):
        sharding = aval_of(value).type_sharding if dim is not None else None
        if sharding is not None and sharding.spec[dim]:
            return sharding.mesh, sharding.spec[dim]
    return None


def split_batching(values, dims, rule, *args, sub_programs: bool = False, **params):
    """``rule(*args, **params)``, batching an equation of ``values`` (batch axes ``dims``)
    with ``_batch_split`` the split its batched operands' types give the batch axis, for the
    unbatched operands broadcast to it (and, with ``sub_programs``, for the batched inputs
    of the sub-programs a control-flow rule traces). Where that is the split already set
    (none, most often), the rule just runs."""
    split = batch_split_of(values, dims) if None in dims or sub_programs else None
    if split == _batch_split[-1]:
        return rule(*args, **params)
    _batch_split.append(split)
    try:
        return rule(*args, **params)
    finally:
        _batch_split.pop()


def batch_at(x, dim, size: int, where: int = 0):
    """``x`` with its batch axis at ``where``; an unbatched ``x`` is broadcast first."""
    if dim is None:
        return broadcast_batch(x, size, where)
    return moveaxis(x, dim, where)


def member(x, dim: int, k: int):
    """Batch member ``k`` of ``x`` (its batch axis removed)."""
    shape = shape_of(x)
    start = [0] * len(shape)
    limit = list(shape)
    start[dim], limit[dim] = k, k + 1
    sliced = bind(prims.slice_p, x, start_indices=tuple(start), limit_indices=tuple(limit),
                  strides=None)
    return bind(prims.squeeze_p, sliced, dimensions=(dim,))


def _member(values, dims, k: int) -> list:
    return [v if d is None else member(v, d, k) for v, d in zip(values, dims)]


def stack_members(members: list):
    """Stack per-member values along a new leading axis."""
    expanded = [bind(prims.reshape_p, m, new_sizes=(1,) + shape_of(m)) for m in members]
    if len(expanded) == 1:
        return expanded[0]
    return bind(prims.concatenate_p, *expanded, dimension=0)


def literal(value, dtype):
    """A typed numpy scalar: it becomes an inline literal in programs."""
    return np.asarray(value, dtype=np.dtype(dtype))[()]


def vectorize(fun: Callable, values, dims):
    """Batch a per-member composition of primitives: ``fun`` sees one member's values.

    Lets a rule be written as ordinary per-member code built from other primitives, whose
    own rules then batch it. Returns ([out], [out_dim]).
    """
    trace = BatchTrace(current_trace(), batch_size(values, dims))
    args = [BatchTracer(trace, v, d) for v, d in zip(values, dims)]
    with set_current_trace(trace):
        result = fun(*args)
    value, dim = trace.unwrap(result)
    return [value], [dim]


# --- generic rules -----------------------------------------------------------------------------

def loop_rule(prim, values, dims, **params):
    """Fallback: apply ``prim`` to each member and stack the results (batch axis 0)."""
    size = batch_size(values, dims)
    if size == 0:
        return _empty_results(prim, values, dims, params)
    per_member = [_bind_list(prim, _member(values, dims, k), params) for k in range(size)]
    outs = [stack_members(list(column)) for column in zip(*per_member)]
    return outs, [0] * len(outs)


def _empty_results(prim, values, dims, params):
    member_avals = [member_aval(v, d) for v, d in zip(values, dims)]
    avals = out_avals(prim, member_avals, params)
    outs = [bind(prims.broadcast_in_dim_p, literal(0, a.dtype), shape=(0,) + a.shape,
                 broadcast_dimensions=()) for a in avals]
    return outs, [0] * len(outs)


def member_aval(value, dim) -> Aval:
    aval = aval_of(value)
    if dim is None:
        return aval
    return aval.update(shape=aval.shape[:dim] + aval.shape[dim + 1:])


def unbatched_rule(prim, values, dims, **params):
    """Primitives without batched operands (``iota``, ``axis_index``): the same for all."""
    outs = _bind_list(prim, values, params)
    return outs, [None] * len(outs)


def keep_dim_rule(prim, values, dims, **params):
    """One operand, acted on element by element: the batch axis stays where it is."""
    (x,), (dim,) = values, dims
    return [bind(prim, x, **params)], [dim]


def elementwise_rule(prim, values, dims, **params):
    """Operands of one per-member shape, or rank 0 (which broadcasts)."""
    member_ranks = [ndim_of(v) - (d is not None) for v, d in zip(values, dims)]
    batched = {(d, r) for d, r in zip(dims, member_ranks) if d is not None}
    unbatched_scalars = all(r == 0 for d, r in zip(dims, member_ranks) if d is None)
    if len(batched) == 1 and unbatched_scalars:
        (dim, rank), = batched
        if rank == max(member_ranks):
            return [bind(prim, *values, **params)], [dim]
    size = batch_size(values, dims)
    common = max((member_aval(v, d).shape for v, d in zip(values, dims)), key=len)
    operands = [_elementwise_operand(v, d, size, common) for v, d in zip(values, dims)]
    # a member scalar spread to the members' shape is laid out as a full operand's type
    # says (JAX's select_n rule broadcasts its predicate to the cases' sharding)
    full = next((aval_of(o).type_sharding for o, r in zip(operands, member_ranks)
                 if r == len(common) and aval_of(o).type_sharding is not None), None)
    if full is not None and common:
        target = NamedSharding(full.mesh, PartitionSpec(*partitions(full.spec)))
        operands = [bind(prims.sharding_constraint_p, o, sharding=target)
                    if r == 0 and d is not None and aval_of(o).type_sharding != full else o
                    for o, r, d in zip(operands, member_ranks, dims)]
    return [bind(prim, *operands, **params)], [0]


def _elementwise_operand(value, dim, size, common):
    if dim is None:
        return value if ndim_of(value) == 0 else broadcast_batch(value, size, 0)
    value = moveaxis(value, dim, 0)
    if ndim_of(value) == 1 and common:
        value = bind(prims.broadcast_in_dim_p, value, shape=(size,) + common,
                     broadcast_dimensions=(0,))
    return value


def reduction_rule(prim, values, dims, *, axes, **params):
    """Reductions over per-member ``axes``: shift them past the batch axis."""
    (x,), (dim,) = values, dims
    full_axes = shift_axes(axes, dim)
    out_dim = dim - sum(1 for a in full_axes if a < dim)
    return [bind(prim, x, axes=full_axes, **params)], [out_dim]
