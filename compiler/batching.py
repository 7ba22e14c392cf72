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
batched by ``named_axis_rules`` (batching_axes.py); loops, branches, remat and staged shard_maps
by ``control_rules`` (batching_control.py), on the whole batch at once.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import math
from typing import Callable, Hashable

import numpy as np

from compiler import tree
from compiler.shard_map import function_name
from compiler.tracing import (Trace, Tracer, UnexpectedTracerError, aval_of, bind,
                              check_jax_value, current_trace, is_jax_value, set_current_trace)
from ir import primitives as prims
from ir import collectives as coll
from ir.core import Aval, Program
from ir.primitives import RuleTable
from ir.shapes import out_avals
from ir.sharding import NamedSharding, PartitionSpec, spec_axes

batching_rules = RuleTable("batching")
# rule(trace, values, dims, **params): collectives naming the vmap's axis (batching_axes.py)
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
    def aval(self) -> Aval:
        full = aval_of(self.value)
        if self.batch_dim is None:
            return full
        shape = full.shape[:self.batch_dim] + full.shape[self.batch_dim + 1:]
        return full.update(shape=shape)

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
        self._adopted: dict = {}     # id(closed-over tracer) -> this trace's tracer for it

    def same_level(self, other) -> bool:
        return isinstance(other, BatchTrace) and other.tag is self.tag

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
        if self.spmd is not None:
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
                outs, out_dims = control_rules[prim](self, values, dims, **params)
            elif all(d is None for d in dims):
                outs = _bind_list(prim, values, params)
                out_dims = [None] * len(outs)
            else:
                if prim is prims.sharding_constraint_p:
                    params = dict(params, spmd_axis_name=self.spmd_axis_name)
                outs, out_dims = batching_rules[prim](values, dims, **params)
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
        starts = [np.int32(0)] * _ndim(value)
        starts[dim] = start
        sizes = list(_shape(value))
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
    spmd = _spmd_split(trace, mesh, params["in_specs"], "in_specs")
    local = trace.axis_size if spmd is None else trace.axis_size // spmd.size
    entry = None if spmd is None else _spec_entry(spmd.mesh_axes)
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
            _check_spmd_unused(spmd, member_store["specs"], "out_specs")
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


def _spec_entry(mesh_axes: tuple):
    return mesh_axes[0] if len(mesh_axes) == 1 else tuple(mesh_axes)


def _spmd_split(trace: BatchTrace, mesh, in_specs, which: str) -> SpmdSplit | None:
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
    _check_spmd_unused(split, in_specs, which)
    if trace.axis_size % size:
        raise ValueError(f"vmap spmd_axis_name={names!r} splits the batch axis of size "
                         f"{trace.axis_size} over mesh axes of total size {size}, which does "
                         "not divide it")
    return split


def _check_spmd_unused(split: SpmdSplit, specs, which: str):
    used = {a for spec in specs for a in spec_axes(spec)}
    if used & set(split.mesh_axes):
        raise ValueError(f"vmap spmd_axis_name cannot appear in shard_map {which}")


# --- helpers on batched values (they bind in the current trace, the parent) --------------------

def _shape(x) -> tuple:
    return aval_of(x).shape


def _ndim(x) -> int:
    return len(aval_of(x).shape)


def batch_size(values, dims) -> int:
    """The batch size, read off the first batched operand."""
    for value, dim in zip(values, dims):
        if dim is not None:
            return _shape(value)[dim]
    raise ValueError("batch_size: no operand is batched")


def shift_axes(axes, dim) -> tuple:
    """Per-member axes as axes of the batched value whose batch axis is ``dim``."""
    return tuple(a + (a >= dim) for a in axes)


def moveaxis(x, src: int, dst: int):
    """``x`` with axis ``src`` moved to position ``dst`` (a transpose, or ``x`` itself)."""
    if src == dst:
        return x
    perm = [k for k in range(_ndim(x)) if k != src]
    perm.insert(dst, src)
    return bind(prims.transpose_p, x, permutation=tuple(perm))


def broadcast_batch(x, size: int, dim: int = 0):
    """``x`` repeated ``size`` times along a new axis at ``dim``."""
    shape = _shape(x)
    out_shape = shape[:dim] + (size,) + shape[dim:]
    kept = tuple(k if k < dim else k + 1 for k in range(len(shape)))
    return bind(prims.broadcast_in_dim_p, x, shape=out_shape, broadcast_dimensions=kept)


def batch_at(x, dim, size: int, where: int = 0):
    """``x`` with its batch axis at ``where``; an unbatched ``x`` is broadcast first."""
    if dim is None:
        return broadcast_batch(x, size, where)
    return moveaxis(x, dim, where)


def member(x, dim: int, k: int):
    """Batch member ``k`` of ``x`` (its batch axis removed)."""
    shape = _shape(x)
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
    expanded = [bind(prims.reshape_p, m, new_sizes=(1,) + _shape(m)) for m in members]
    if len(expanded) == 1:
        return expanded[0]
    return bind(prims.concatenate_p, *expanded, dimension=0)


def _literal(value, dtype):
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
    member_avals = [_member_aval(v, d) for v, d in zip(values, dims)]
    avals = out_avals(prim, member_avals, params)
    outs = [bind(prims.broadcast_in_dim_p, _literal(0, a.dtype), shape=(0,) + a.shape,
                 broadcast_dimensions=()) for a in avals]
    return outs, [0] * len(outs)


def _member_aval(value, dim) -> Aval:
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
    member_ranks = [_ndim(v) - (d is not None) for v, d in zip(values, dims)]
    batched = {(d, r) for d, r in zip(dims, member_ranks) if d is not None}
    unbatched_scalars = all(r == 0 for d, r in zip(dims, member_ranks) if d is None)
    if len(batched) == 1 and unbatched_scalars:
        (dim, rank), = batched
        if rank == max(member_ranks):
            return [bind(prim, *values, **params)], [dim]
    size = batch_size(values, dims)
    common = max((_member_aval(v, d).shape for v, d in zip(values, dims)), key=len)
    operands = [_elementwise_operand(v, d, size, common) for v, d in zip(values, dims)]
    return [bind(prim, *operands, **params)], [0]


def _elementwise_operand(value, dim, size, common):
    if dim is None:
        return value if _ndim(value) == 0 else broadcast_batch(value, size, 0)
    value = moveaxis(value, dim, 0)
    if _ndim(value) == 1 and common:
        value = bind(prims.broadcast_in_dim_p, value, shape=(size,) + common,
                     broadcast_dimensions=(0,))
    return value


def reduction_rule(prim, values, dims, *, axes, **params):
    """Reductions over per-member ``axes``: shift them past the batch axis."""
    (x,), (dim,) = values, dims
    full_axes = shift_axes(axes, dim)
    out_dim = dim - sum(1 for a in full_axes if a < dim)
    return [bind(prim, x, axes=full_axes, **params)], [out_dim]


for _p in prims.UNARY + prims.PREDICATES + (prims.convert_element_type_p,
                                            prims.stop_gradient_p, prims.reduce_precision_p):
    batching_rules[_p] = functools.partial(keep_dim_rule, _p)
for _p in prims.ARITHMETIC + prims.COMPARISON + (prims.select_n_p,):
    batching_rules[_p] = functools.partial(elementwise_rule, _p)
for _p in prims.REDUCTIONS + (prims.argmax_p, prims.argmin_p):
    batching_rules[_p] = functools.partial(reduction_rule, _p)
batching_rules[prims.iota_p] = functools.partial(unbatched_rule, prims.iota_p)
batching_rules[prims.debug_print_p] = functools.partial(loop_rule, prims.debug_print_p)
# One key per member: generate per member (the bits differ by key, as they must).
batching_rules[prims.random_bits_p] = functools.partial(loop_rule, prims.random_bits_p)


# --- shapes ------------------------------------------------------------------------------------

def _cumulative_rule(prim, values, dims, *, axis, reverse):
    (x,), (dim,) = values, dims
    (full_axis,) = shift_axes((axis,), dim)
    return [bind(prim, x, axis=full_axis, reverse=reverse)], [dim]


def _sort_rule(values, dims, *, dimension, num_keys):
    """Every operand batched at axis 0 (unbatched ones broadcast), the sort one axis later."""
    size = batch_size(values, dims)
    operands = [batch_at(v, d, size) for v, d in zip(values, dims)]
    outs = bind(prims.sort_p, *operands, dimension=dimension + 1, num_keys=num_keys)
    return list(outs), [0] * len(outs)


def _searchsorted_rule(values, dims, *, side):
    (sorted_values, query), (sorted_dim, query_dim) = values, dims
    if sorted_dim is not None:
        # One sorted array per member: search each member's own.
        return loop_rule(prims.searchsorted_p, values, dims, side=side)
    return [bind(prims.searchsorted_p, sorted_values, query, side=side)], [query_dim]


def _reshape_rule(values, dims, *, new_sizes):
    (x,), (dim,) = values, dims
    size = _shape(x)[dim]
    x = moveaxis(x, dim, 0)
    return [bind(prims.reshape_p, x, new_sizes=(size,) + tuple(new_sizes))], [0]


def _transpose_rule(values, dims, *, permutation):
    (x,), (dim,) = values, dims
    perm = (dim,) + shift_axes(permutation, dim)
    return [bind(prims.transpose_p, x, permutation=perm)], [0]


def _squeeze_rule(values, dims, *, dimensions):
    (x,), (dim,) = values, dims
    full = shift_axes(dimensions, dim)
    out_dim = dim - sum(1 for a in full if a < dim)
    return [bind(prims.squeeze_p, x, dimensions=full)], [out_dim]


def _broadcast_in_dim_rule(values, dims, *, shape, broadcast_dimensions):
    (x,), (dim,) = values, dims
    size = _shape(x)[dim]
    x = moveaxis(x, dim, 0)
    return [bind(prims.broadcast_in_dim_p, x, shape=(size,) + tuple(shape),
                 broadcast_dimensions=(0,) + tuple(d + 1 for d in broadcast_dimensions))], [0]


def _concatenate_rule(values, dims, *, dimension):
    size = batch_size(values, dims)
    operands = [batch_at(v, d, size) for v, d in zip(values, dims)]
    return [bind(prims.concatenate_p, *operands, dimension=dimension + 1)], [0]


def _slice_rule(values, dims, *, start_indices, limit_indices, strides):
    (x,), (dim,) = values, dims
    size = _shape(x)[dim]
    starts = _insert(start_indices, dim, 0)
    limits = _insert(limit_indices, dim, size)
    strides = None if strides is None else _insert(strides, dim, 1)
    return [bind(prims.slice_p, x, start_indices=starts, limit_indices=limits,
                 strides=strides)], [dim]


def _insert(entries, position, entry) -> tuple:
    entries = list(entries)
    entries.insert(position, entry)
    return tuple(entries)


def _rev_rule(values, dims, *, dimensions):
    (x,), (dim,) = values, dims
    return [bind(prims.rev_p, x, dimensions=shift_axes(dimensions, dim))], [dim]


def _pad_rule(values, dims, *, padding_config):
    (x, value), (dim, value_dim) = values, dims
    if value_dim is not None or dim is None:
        # A padding value that differs per member: pad each member on its own.
        return loop_rule(prims.pad_p, values, dims, padding_config=padding_config)
    config = _insert(padding_config, dim, (0, 0, 0))
    return [bind(prims.pad_p, x, value, padding_config=config)], [dim]


for _p in prims.CUMULATIVE:
    batching_rules[_p] = functools.partial(_cumulative_rule, _p)
batching_rules[prims.sort_p] = _sort_rule


def _matrix_rule(prim, values, dims, **params):
    """Matrix primitives act on the last two dimensions: every operand batched at axis 0."""
    size = batch_size(values, dims)
    operands = [batch_at(v, d, size) for v, d in zip(values, dims)]
    outs = bind(prim, *operands, **params)
    outs = list(outs) if prim.multiple_results else [outs]
    return outs, [0] * len(outs)


for _p in prims.LINALG + (prims.bitcast_convert_type_p,):
    # (bitcast changes the last dimension only: batch at 0 keeps it clear of that)
    batching_rules[_p] = functools.partial(_matrix_rule, _p)
batching_rules[prims.searchsorted_p] = _searchsorted_rule
batching_rules[prims.reshape_p] = _reshape_rule
batching_rules[prims.transpose_p] = _transpose_rule
batching_rules[prims.squeeze_p] = _squeeze_rule
batching_rules[prims.broadcast_in_dim_p] = _broadcast_in_dim_rule
batching_rules[prims.concatenate_p] = _concatenate_rule
batching_rules[prims.slice_p] = _slice_rule
batching_rules[prims.rev_p] = _rev_rule
batching_rules[prims.pad_p] = _pad_rule


# --- indexing ----------------------------------------------------------------------------------

def _normalized_index(indices, size: int, *, drop: bool):
    """Indices with negatives counted from the end; out-of-range ones clamped into range, or
    (``drop``) marked invalid. Returns (indices, valid mask or None)."""
    dtype = aval_of(indices).dtype
    negative = bind(prims.lt_p, indices, _literal(0, dtype))
    wrapped = bind(prims.add_p, indices, _literal(size, dtype))
    indices = bind(prims.select_n_p, negative, indices, wrapped)
    if not drop:
        indices = bind(prims.max_p, indices, _literal(0, dtype))
        return bind(prims.min_p, indices, _literal(max(size - 1, 0), dtype)), None
    low = bind(prims.ge_p, indices, _literal(0, dtype))
    high = bind(prims.lt_p, indices, _literal(size, dtype))
    return indices, bind(prims.and_p, low, high)


def _member_offsets(indices, size: int):
    """Per-member offsets ``k * size`` with the shape of leading-batch ``indices``."""
    aval = aval_of(indices)
    ramp = bind(prims.iota_p, dtype=aval.dtype, shape=aval.shape, dimension=0)
    return bind(prims.mul_p, ramp, _literal(size, aval.dtype))


def _merge_batch_into(x, dim, size, axis):
    """Batched ``x`` with the batch merged into per-member ``axis``: pre + (B*N,) + post."""
    x = batch_at(x, dim, size, axis)
    shape = _shape(x)
    merged = shape[:axis] + (shape[axis] * shape[axis + 1],) + shape[axis + 2:]
    return bind(prims.reshape_p, x, new_sizes=merged)


def _gather_rule(values, dims, *, axis):
    (x, indices), (x_dim, index_dim) = values, dims
    if index_dim is None:
        x = moveaxis(x, x_dim, 0)
        return [bind(prims.gather_p, x, indices, axis=axis + 1)], [0]
    if x_dim is None:
        return [bind(prims.gather_p, x, indices, axis=axis)], [axis + index_dim]
    # Both batched: gather from the members laid end to end along ``axis``.
    size = batch_size(values, dims)
    length = _shape(x)[axis + (x_dim <= axis)]
    flat = _merge_batch_into(x, x_dim, size, axis)
    indices = moveaxis(indices, index_dim, 0)
    indices, _ = _normalized_index(indices, length, drop=False)
    indices = bind(prims.add_p, indices, _member_offsets(indices, length))
    return [bind(prims.gather_p, flat, indices, axis=axis)], [axis]


def _scatter_rule(values, dims, *, axis, mode):
    (x, indices, updates), (x_dim, index_dim, update_dim) = values, dims
    size = batch_size(values, dims)
    if index_dim is None:
        x = batch_at(x, x_dim, size)
        updates = batch_at(updates, update_dim, size)
        return [bind(prims.scatter_p, x, indices, updates, axis=axis + 1, mode=mode)], [0]
    # Batched indices: scatter into the members laid end to end along ``axis``.
    length = _member_aval(x, x_dim).shape[axis]
    flat = _merge_batch_into(x, x_dim, size, axis)
    updates = batch_at(updates, update_dim, size, axis)
    indices = moveaxis(indices, index_dim, 0)
    indices, valid = _normalized_index(indices, length, drop=True)
    shifted = bind(prims.add_p, indices, _member_offsets(indices, length))
    # An out-of-range index must not land in a neighbouring member: point it past the end.
    past_end = _literal(size * length, aval_of(indices).dtype)
    indices = bind(prims.select_n_p, valid, bind(prims.broadcast_in_dim_p, past_end,
                                                 shape=_shape(shifted),
                                                 broadcast_dimensions=()), shifted)
    indices, updates = _flatten_scatter_indices(indices, updates, axis)
    out = bind(prims.scatter_p, flat, indices, updates, axis=axis, mode=mode)
    shape = _shape(out)
    unmerged = shape[:axis] + (size, length) + shape[axis + 1:]
    return [bind(prims.reshape_p, out, new_sizes=unmerged)], [axis]


def _flatten_scatter_indices(indices, updates, axis):
    """One index axis: the (batch, index...) axes of indices and updates merged into one."""
    count = aval_of(indices).size
    shape = _shape(updates)
    rank = _ndim(indices)
    indices = bind(prims.reshape_p, indices, new_sizes=(count,))
    merged = shape[:axis] + (count,) + shape[axis + rank:]
    return indices, bind(prims.reshape_p, updates, new_sizes=merged)


def _dynamic_slice_rule(values, dims, *, slice_sizes):
    x, starts = values[0], values[1:]
    x_dim, start_dims = dims[0], dims[1:]
    if all(d is None for d in start_dims):
        size = _shape(x)[x_dim]
        starts = _insert(starts, x_dim, _literal(0, aval_of(starts[0]).dtype) if starts
                         else np.int32(0))
        sizes = _insert(slice_sizes, x_dim, size)
        return [bind(prims.dynamic_slice_p, x, *starts, slice_sizes=sizes)], [x_dim]
    batched = tuple(d is not None for d in start_dims)
    return vectorize(functools.partial(_dynamic_slice_by_gather, slice_sizes, batched),
                     values, dims)


def _dynamic_slice_by_gather(slice_sizes, batched, x, *starts):
    """One member's dynamic_slice: unbatched starts slice at once, batched ones by gather."""
    fixed = [_literal(0, aval_of(s).dtype) if b else s for s, b in zip(starts, batched)]
    sizes = [n if b else s for s, n, b in zip(slice_sizes, _shape(x), batched)]
    x = bind(prims.dynamic_slice_p, x, *fixed, slice_sizes=tuple(sizes))
    for axis, (start, size, is_batched) in enumerate(zip(starts, slice_sizes, batched)):
        if is_batched:
            x = bind(prims.gather_p, x, _window(start, _shape(x)[axis], size), axis=axis)
    return x


def _window(start, length: int, size: int):
    """The indices ``start .. start+size-1``, start clamped so the window fits in ``length``."""
    dtype = aval_of(start).dtype
    start = bind(prims.max_p, start, _literal(0, dtype))
    start = bind(prims.min_p, start, _literal(max(length - size, 0), dtype))
    ramp = bind(prims.iota_p, dtype=dtype, shape=(size,), dimension=0)
    return bind(prims.add_p, ramp, start)


def _dynamic_update_slice_rule(values, dims):
    x, update, starts = values[0], values[1], values[2:]
    x_dim, update_dim, start_dims = dims[0], dims[1], dims[2:]
    if all(d is None for d in start_dims):
        size = batch_size(values, dims)
        x = batch_at(x, x_dim, size)
        update = batch_at(update, update_dim, size)
        zero = _literal(0, aval_of(starts[0]).dtype) if starts else np.int32(0)
        return [bind(prims.dynamic_update_slice_p, x, update, zero, *starts)], [0]
    return vectorize(_dynamic_update_slice_by_mask, values, dims)


def _dynamic_update_slice_by_mask(x, update, *starts):
    """One member's dynamic_update_slice as a select between ``x`` and the spread update."""
    shape = _shape(x)
    if any(n == 0 for n in _shape(update)):
        return x
    inside = None
    for axis, (start, length, size) in enumerate(zip(starts, shape, _shape(update))):
        dtype = aval_of(start).dtype
        start = bind(prims.max_p, start, _literal(0, dtype))
        start = bind(prims.min_p, start, _literal(length - size, dtype))
        offsets = bind(prims.sub_p, bind(prims.iota_p, dtype=dtype, shape=(length,),
                                         dimension=0), start)
        hit = bind(prims.and_p, bind(prims.ge_p, offsets, _literal(0, dtype)),
                   bind(prims.lt_p, offsets, _literal(size, dtype)))
        hit = bind(prims.broadcast_in_dim_p, hit, shape=shape, broadcast_dimensions=(axis,))
        inside = hit if inside is None else bind(prims.and_p, inside, hit)
        offsets = bind(prims.min_p, bind(prims.max_p, offsets, _literal(0, dtype)),
                       _literal(size - 1, dtype))
        update = bind(prims.gather_p, update, offsets, axis=axis)
    if inside is None:
        return update
    return bind(prims.select_n_p, inside, x, update)


batching_rules[prims.gather_p] = _gather_rule
batching_rules[prims.scatter_p] = _scatter_rule
batching_rules[prims.dynamic_slice_p] = _dynamic_slice_rule
batching_rules[prims.dynamic_update_slice_p] = _dynamic_update_slice_rule


# --- linear algebra ----------------------------------------------------------------------------

def _dot_general_rule(values, dims, *, dimension_numbers, preferred_element_type=None):
    """Both batched: a new dot batch dimension. One batched: its batch axis is a free axis."""
    (x, y), (x_dim, y_dim) = values, dims
    (lc, rc), (lb, rb) = dimension_numbers
    params = dict(preferred_element_type=preferred_element_type)
    if x_dim is not None and y_dim is not None:
        x, y = moveaxis(x, x_dim, 0), moveaxis(y, y_dim, 0)
        numbers = ((shift_axes(lc, 0), shift_axes(rc, 0)),
                   ((0,) + shift_axes(lb, 0), (0,) + shift_axes(rb, 0)))
        return [bind(prims.dot_general_p, x, y, dimension_numbers=numbers, **params)], [0]
    if x_dim is not None:
        lc, lb = shift_axes(lc, x_dim), shift_axes(lb, x_dim)
        free = [a for a in range(_ndim(x)) if a not in lc and a not in lb]
        out_dim = len(lb) + free.index(x_dim)
    else:
        rc, rb = shift_axes(rc, y_dim), shift_axes(rb, y_dim)
        x_free = _ndim(x) - len(lc) - len(lb)
        free = [a for a in range(_ndim(y)) if a not in rc and a not in rb]
        out_dim = len(rb) + x_free + free.index(y_dim)
    numbers = ((lc, rc), (lb, rb))
    return [bind(prims.dot_general_p, x, y, dimension_numbers=numbers, **params)], [out_dim]


batching_rules[prims.dot_general_p] = _dot_general_rule


# --- sharding and collectives ------------------------------------------------------------------

def _sharding_constraint_rule(values, dims, *, sharding, spmd_axis_name=None):
    """The batch axis leads, split over ``spmd_axis_name`` (not split without it)."""
    (x,), (dim,) = values, dims
    x = moveaxis(x, dim, 0)
    if isinstance(sharding, NamedSharding):
        sharding = NamedSharding(sharding.mesh, _constraint_spec(sharding, spmd_axis_name))
    return [bind(prims.sharding_constraint_p, x, sharding=sharding)], [0]


def _constraint_spec(sharding: NamedSharding, spmd_axis_name) -> PartitionSpec:
    if spmd_axis_name is None:
        return PartitionSpec(None, *sharding.spec)
    for name in spmd_axis_name:
        if name not in sharding.mesh.axis_names:
            raise ValueError(f"vmap spmd_axis_name {name!r} is not an axis of the mesh "
                             f"{sharding.mesh.axis_names} of with_sharding_constraint's "
                             "sharding")
        if name in spec_axes(sharding.spec):
            raise ValueError(f"vmap spmd_axis_name {name!r} already appears in the sharding "
                             f"constraint's spec {sharding.spec!r}")
    return PartitionSpec(_spec_entry(spmd_axis_name), *sharding.spec)


def leading_batch_rule(prim, axis_params, values, dims, **params):
    """Collectives that name array axes (``gather_axis`` ...): the batch axis leads, and the
    named axes move up by one. Results keep the batch axis in front."""
    (x,), (dim,) = values, dims
    x = moveaxis(x, dim, 0)
    params = {name: value + 1 if name in axis_params else value
              for name, value in params.items()}
    return [bind(prim, x, **params)], [0]


batching_rules[prims.sharding_constraint_p] = _sharding_constraint_rule
# Collectives act on each device's whole block, so the batch axis rides along.
for _p in coll.REDUCING + (coll.pvary_p, coll.ppermute_p, coll.pbroadcast_p):
    batching_rules[_p] = functools.partial(keep_dim_rule, _p)
batching_rules[coll.all_gather_p] = functools.partial(
    leading_batch_rule, coll.all_gather_p, ("gather_axis",))
batching_rules[coll.psum_scatter_p] = functools.partial(
    leading_batch_rule, coll.psum_scatter_p, ("scatter_axis",))
batching_rules[coll.all_to_all_p] = functools.partial(
    leading_batch_rule, coll.all_to_all_p, ("split_axis", "concat_axis"))
batching_rules[coll.axis_index_p] = functools.partial(unbatched_rule, coll.axis_index_p)


# --- vmap --------------------------------------------------------------------------------------

def _is_axis_leaf(x) -> bool:
    return x is None or type(x) is int


def vmap(fun: Callable, in_axes=0, out_axes=0, *, axis_name=None, axis_size=None,
         spmd_axis_name=None) -> Callable:
    """Vectorize ``fun`` over an axis of its arguments.

    Args:
      fun: the per-member function.
      in_axes: an int, None, or a tuple (one entry per positional argument) of pytree
        prefixes with int/None leaves: which axis of each argument is mapped (None: not
        mapped, the same value for every member). Keyword arguments are mapped over axis 0.
      out_axes: the same for the outputs: where the batch axis goes.
      axis_size: the batch size, needed when no argument is mapped.
      axis_name: a name for the batch axis: collectives over it (``lax.psum(x, 'b')``,
        ``all_gather``, ``axis_index`` ...) act across the members, alone or together with
        mesh axes inside a shard_map body (``lax.psum(x, ('i', 'b'))``).
      spmd_axis_name: a mesh axis name, or a tuple of them, to split the batch axis over:
        a shard_map under this vmap gets the batch axis of its inputs and outputs split over
        those axes (each device runs its slice of the members), and sharding constraints
        place the batch axis on them.

    Returns:
      A function whose results stack ``fun``'s per-member results.

    >>> vmap(lambda x: x @ x)(jnp.arange(12.).reshape(4, 3)).shape
    (4,)
    """
    if not callable(fun):
        raise TypeError(f"Expected a callable value, got {fun!r}")
    spmd_axis_name = _check_spmd_axis_name(spmd_axis_name)
    if axis_name is not None:
        hash(axis_name)         # an unhashable name fails here, as in JAX
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)
    _check_axis_spec(in_axes, "in_axes")
    _check_axis_spec(out_axes, "out_axes")
    if not (in_axes is None or type(in_axes) in (int, tuple)):
        raise ValueError("vmap in_axes must be an int, None, or a tuple of entries "
                         "corresponding to the positional arguments passed to the function, "
                         f"but got {in_axes}.")

    @functools.wraps(fun)
    def batched(*args, **kwargs):
        return _batched_call(fun, args, kwargs, in_axes, out_axes, axis_size, axis_name,
                             spmd_axis_name)

    return batched


def _check_axis_spec(spec, which: str):
    leaves = tree.tree_leaves(spec, is_leaf=_is_axis_leaf)
    if not all(_is_axis_leaf(leaf) for leaf in leaves):
        raise TypeError(f"vmap {which} must be an int, None, or (nested) container with those "
                        f"types as leaves, but got {spec}.")


def _check_spmd_axis_name(spmd_axis_name) -> tuple | None:
    if spmd_axis_name is None:
        return None
    names = tuple(spmd_axis_name) if isinstance(spmd_axis_name, (tuple, list)) else (
        spmd_axis_name,)
    if not all(isinstance(a, str) for a in names) or len(set(names)) != len(names):
        raise ValueError("vmap spmd_axis_name must be a mesh axis name or a tuple of distinct "
                         f"names, got {spmd_axis_name!r}")
    return names


def _batched_call(fun, args, kwargs, in_axes, out_axes, axis_size, axis_name=None,
                  spmd_axis_name=None):
    if isinstance(in_axes, tuple) and len(in_axes) != len(args):
        raise ValueError("vmap in_axes must be an int, None, or a tuple of entries "
                         "corresponding to the positional arguments passed to the function, "
                         f"but got len(in_axes)={len(in_axes)}, len(args)={len(args)}")
    leaves, in_tree = tree.tree_flatten((args, kwargs))
    axes = _flat_in_axes(in_axes, args, kwargs)
    _check_mapped_values(fun, (args, kwargs), leaves, axes)
    axes = [_canonical_in_axis(x, a) for x, a in zip(leaves, axes)]
    size = _mapped_size(fun, args, kwargs, leaves, axes, axis_size)
    axis = None if axis_name is None else NamedAxis(axis_name, size)
    trace = BatchTrace(current_trace(), size, axis=axis, spmd_axis_name=spmd_axis_name)
    tracers = [x if a is None else BatchTracer(trace, x, a) for x, a in zip(leaves, axes)]
    call_args, call_kwargs = tree.tree_unflatten(in_tree, tracers)
    if axis is not None:
        _vmap_axes.append(axis)
    try:
        with set_current_trace(trace):
            result = fun(*call_args, **call_kwargs)
            outs, out_tree = tree.tree_flatten(result)
            unwrapped = [trace.unwrap(o) for o in outs]
    finally:
        if axis is not None:
            _vmap_axes.pop()
    out_specs = _flat_out_axes(out_axes, result)
    moved = [_place_batch_axis(v, d, a, size) for (v, d), a in zip(unwrapped, out_specs)]
    return tree.tree_unflatten(out_tree, moved)


def _check_mapped_values(fun, args_and_kwargs, leaves, axes):
    """Mapped arguments must be JAX values; unmapped ones (in_axes None) pass as they are."""
    mapped = [leaf for leaf, axis in zip(leaves, axes) if axis is not None]
    if all(is_jax_value(leaf) for leaf in mapped):
        return
    for leaf, axis, path in zip(leaves, axes, tree.leaf_paths(args_and_kwargs)):
        if axis is not None:
            where = "args" + path[3:] if path.startswith("[0]") else "kwargs" + path[3:]
            check_jax_value(leaf, f"vmap of '{function_name(fun)}': argument {where}")


def _flat_in_axes(in_axes, args, kwargs) -> list:
    try:
        flat = tree.broadcast_prefix(in_axes, args, is_leaf=_is_axis_leaf, name="in_axes")
    except tree.PrefixError:
        raise ValueError("vmap in_axes specification must be a tree prefix of the corresponding "
                         f"value, got specification {in_axes} for value tree "
                         f"{tree.tree_structure(args)}.") from None
    return flat + [0] * len(tree.tree_leaves(kwargs))


def _flat_out_axes(out_axes, result) -> list:
    try:
        return tree.broadcast_prefix(out_axes, result, is_leaf=_is_axis_leaf, name="out_axes")
    except tree.PrefixError:
        raise ValueError("vmap out_axes specification must be a tree prefix of the "
                         f"corresponding value, got specification {out_axes} for value tree "
                         f"{tree.tree_structure(result)}.") from None


def _canonical_in_axis(x, axis):
    if axis is None:
        return None
    shape = aval_of(x).shape
    if not -len(shape) <= axis < len(shape):
        min_rank = axis + 1 if axis >= 0 else -axis
        raise ValueError(f"vmap was requested to map its argument along axis {axis}, which "
                         f"implies that its rank should be at least {min_rank}, but is only "
                         f"{len(shape)} (its shape is {shape})")
    return axis % len(shape)


def _mapped_size(fun, args, kwargs, leaves, axes, axis_size) -> int:
    sizes = [None if a is None else aval_of(x).shape[a] for x, a in zip(leaves, axes)]
    mapped = {s for s in sizes if s is not None}
    if axis_size is not None:
        mapped.add(int(axis_size))
    if len(mapped) == 1:
        return mapped.pop()
    if not mapped:
        if not leaves:
            raise ValueError("vmap wrapped function must be passed at least one argument "
                             f"containing an array, got empty *args={args} and "
                             f"**kwargs={kwargs}")
        raise ValueError("vmap must have at least one non-None value in in_axes")
    raise ValueError(_inconsistent_sizes_text(fun, args, kwargs, leaves, axes, sizes,
                                              axis_size))


def _inconsistent_sizes_text(fun, args, kwargs, leaves, axes, sizes, axis_size) -> str:
    """JAX's message: the most common size first, one example axis per size."""
    descriptions = _leaf_descriptions(fun, args, kwargs, leaves)
    counts: dict = {}
    for s in sizes:
        if s is not None:
            counts[s] = counts.get(s, 0) + 1
    ranked = sorted(counts.items(), key=lambda item: -item[1])   # stable: first seen first
    lines = ["vmap got inconsistent sizes for array axes to be mapped:"]
    if axis_size is not None:
        lines.append(f"  * axis_size was given as {axis_size};")
    for rank, (size, count) in enumerate(ranked):
        k = sizes.index(size)
        example = f"axis {axes[k]} of {descriptions[k]}"
        if count == 1:
            lines.append(f"  * one axis had size {size}: {example};")
        elif rank == 0 and axis_size is None:
            lines.append(f"  * most axes ({count} of them) had size {size}, e.g. {example};")
        else:
            lines.append(f"  * some axes ({count} of them) had size {size}, e.g. {example};")
    return "\n".join(lines)[:-1]


def _leaf_descriptions(fun, args, kwargs, leaves) -> list:
    """``argument x['w'] of type float32[3]`` for each leaf of (args, kwargs)."""
    try:
        names = list(inspect.signature(fun).bind(*args, **kwargs).signature.parameters)
    except (TypeError, ValueError):
        names = None
    texts = []
    for path in tree.leaf_paths(args):
        index = int(path[1:path.index("]")])
        rest = path[path.index("]") + 1:]
        if names is not None and index < len(names):
            texts.append(f"argument {names[index]}{rest}")
        else:
            texts.append(f"args{path}")
    texts += [f"kwargs{path}" for path in tree.leaf_paths(kwargs)]
    return [f"{text} of type {_type_text(x)}" for text, x in zip(texts, leaves)]


def _type_text(x) -> str:
    try:
        return aval_of(x).str_long()
    except (TypeError, ValueError):
        return "unknown"


def _place_batch_axis(value, dim, out_axis, size):
    """Move (or broadcast) the batch axis of an output to ``out_axis``."""
    if out_axis is None:
        if dim is not None:
            raise ValueError("vmap has mapped output but out_axes is None")
        return value
    rank = _ndim(value) + (dim is None)
    if not -rank <= out_axis < rank:
        raise ValueError(f"vmap out_axes={out_axis} is out of bounds for an output of rank "
                         f"{rank} (its per-member shape is {_member_aval(value, dim).shape})")
    return batch_at(value, dim, size, out_axis % rank)


# Rules that need the BatchTrace itself (its named axis, its size) are registered by their
# own modules, which build on the helpers above: imported last.
from compiler import batching_axes, batching_control  # noqa: E402,F401
