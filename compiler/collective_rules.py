"""The compiler's rules for collectives, in one place: their derivatives (JVP and transpose,
SEMANTICS 2.9 and 4) and their batching (vmap over an unnamed axis, and over a vmap's named
axis). What the IR knows of each collective (its parameters, shape and replication rules,
lowering) is declared with it in ``ir.collectives``.

**Autodiff.** Collectives are linear: their tangent is the collective of the tangent. With
the replication check on, ``psum`` and ``pvary`` transpose to each other with no rescaling;
with it off, ``psum`` transposes to itself and the shard_map boundary rescales (4.3). Under a
cond whose predicate varies, cotangents along the predicate's axes are per-device
contributions (``compiler.ad_shard_map.per_device_cotangents``).

**vmap over an unnamed axis.** A collective acts on each device's whole block, so the batch
axis rides along (leading, where the collective names array axes).

**vmap over a named axis:** ``vmap(f, axis_name='b')`` with ``lax.psum(x, 'b')``. A collective
that names a vmap's axis acts across the batch members, as if each member were a device along
an axis 'b'. The vmap's BatchTrace applies one of these rules instead of its ordinary batching
rule; the rule does the members' part with array operations and hands what is left (the mesh
axes, or other vmaps' axes, named with 'b') to the enclosing trace.

Ranks over a tuple of names follow SEMANTICS 2.0 (first name major). For a tuple
``(major..., 'b', minor...)`` a member's rank is ``(rank(major) * B + member) * |minor| +
rank(minor)``. In a shard_map body whose batch is split over mesh axes by ``spmd_axis_name``,
each device holds ``B / |spmd|`` members and those axes count as the last major names:

    vmap(axis_name='b') of 4 members, inside shard_map over 'i' (2 devices):
        psum(x, ('i', 'b')):  each device sums its 4 members, then psum over 'i'
        axis_index(('i', 'b')):  device i, member m  ->  i * 4 + m
"""
from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from compiler.ad_core import Linear, instantiate, jvp_rules, transpose_rules, zeros_like_aval
from compiler.ad_rules import linear_jvp
from compiler.ad_shard_map import check_on, per_device_axes
from compiler.batching import (BatchTrace, batch_at, batching_rules, keep_dim_rule, literal,
                               member, moveaxis, named_axis_rules, shape_of, unbatched_rule,
                               vmap_axis)
from compiler.shard_map import current_shard_context
from compiler.tracing import aval_of, bind
from ir import collectives as coll
from ir import dtypes
from ir import primitives as prims


def _group_size(axes) -> int:
    shard = current_shard_context()
    sizes = [vmap_axis(a).size if vmap_axis(a) is not None else
             shard.mesh.shape[a] if shard is not None else 1 for a in axes]
    return math.prod(sizes)


# --- collectives: JVP -----------------------------------------------------------------------------

for _p in (coll.psum_p, coll.pmean_p, coll.pvary_p, coll.all_gather_p, coll.psum_scatter_p, coll.ppermute_p,
           coll.all_to_all_p, coll.pbroadcast_p) + coll.UNREDUCED_COLLECTIVES:
    jvp_rules[_p] = functools.partial(linear_jvp, _p)


def _not_differentiable(name, primals, tangents, **params):
    raise NotImplementedError(f"Differentiation rule for '{name}' not implemented; apply "
                              "lax.stop_gradient to its operand if its derivative is not needed.")


jvp_rules[coll.pmax_p] = functools.partial(_not_differentiable, "pmax")
jvp_rules[coll.pmin_p] = functools.partial(_not_differentiable, "pmin")


# --- collectives: transposes ----------------------------------------------------------------------

def _psum_transpose(ct, x, *, mesh_axes):
    if not check_on():
        return [bind(coll.psum_p, ct, mesh_axes=mesh_axes)]
    # along per-device axes the cotangent is summed, as the all-reduce's own transpose; along
    # the others it is the total already, and the operand's copies each get it (a pvary)
    summed = _per_device(mesh_axes)
    if summed:
        ct = bind(coll.psum_p, ct, mesh_axes=summed)
    missing = _missing(ct, mesh_axes)
    return [bind(coll.pvary_p, ct, mesh_axes=missing) if missing else ct]


def _per_device(mesh_axes) -> tuple:
    """The axes of ``mesh_axes`` along which cotangents are per-device contributions."""
    per_device = per_device_axes()
    return tuple(a for a in mesh_axes if a in per_device)


def _missing(value, mesh_axes) -> tuple:
    """The axes of ``mesh_axes`` a value does not vary over yet (pvary's operand rule)."""
    vma = aval_of(value).vma
    return tuple(a for a in mesh_axes if a not in vma)


def _pmean_transpose(ct, x, *, mesh_axes):
    scaled = bind(prims.div_p, ct, np.asarray(_group_size(mesh_axes), aval_of(ct).dtype)[()])
    return _psum_transpose(scaled, x, mesh_axes=mesh_axes)


def _pvary_transpose(ct, x, *, mesh_axes):
    if not check_on():
        return [ct]
    # per-device axes keep the contributions apart: the enclosing cond's transpose sums them
    summed = tuple(a for a in mesh_axes if a not in per_device_axes())
    return [bind(coll.psum_p, ct, mesh_axes=summed) if summed else ct]


def _all_gather_transpose(ct, x, *, mesh_axes, gather_axis, tiled, axis_size, to="varying"):
    # With the check off the boundary divided the cotangent by the group size, as for psum,
    # so the per-device transpose (psum_scatter) restores it; own chunk needs the check on.
    if to == "invarying" and check_on():
        summed = _per_device(mesh_axes)
        if summed:
            ct = bind(coll.psum_p, ct, mesh_axes=summed)
        return [_own_chunk(ct, mesh_axes, gather_axis, tiled, x.aval)]
    return [bind(coll.psum_scatter_p, ct, mesh_axes=mesh_axes, scatter_axis=gather_axis,
                 tiled=tiled, axis_size=axis_size)]


def _own_chunk(ct, mesh_axes, axis, tiled, aval):
    """This device's chunk of a gathered cotangent: no communication."""
    rank = bind(coll.axis_index_p, mesh_axes=mesh_axes)
    shape = aval_of(ct).shape
    starts = [np.int32(0)] * len(shape)
    sizes = list(shape)
    if tiled:
        starts[axis] = bind(prims.mul_p, rank, np.int32(aval.shape[axis]))
        sizes[axis] = aval.shape[axis]
        return bind(prims.dynamic_slice_p, ct, *starts, slice_sizes=tuple(sizes))
    starts[axis] = rank
    sizes[axis] = 1
    chunk = bind(prims.dynamic_slice_p, ct, *starts, slice_sizes=tuple(sizes))
    return bind(prims.squeeze_p, chunk, dimensions=(axis,))


def _psum_scatter_transpose(ct, x, *, mesh_axes, scatter_axis, tiled, axis_size):
    return [bind(coll.all_gather_p, ct, mesh_axes=mesh_axes, gather_axis=scatter_axis,
                 tiled=tiled, axis_size=axis_size)]


def _ppermute_transpose(ct, x, *, mesh_axes, perm):
    inverse = tuple((dest, source) for source, dest in perm)
    return [bind(coll.ppermute_p, ct, mesh_axes=mesh_axes, perm=inverse)]


def _all_to_all_transpose(ct, x, *, mesh_axes, split_axis, concat_axis, tiled, axis_size):
    return [bind(coll.all_to_all_p, ct, mesh_axes=mesh_axes, split_axis=concat_axis,
                 concat_axis=split_axis, tiled=tiled, axis_size=axis_size)]


def _pbroadcast_transpose(ct, x, *, mesh_axes, source):
    total = bind(coll.psum_p, ct, mesh_axes=mesh_axes)
    rank = bind(coll.axis_index_p, mesh_axes=mesh_axes)
    is_source = bind(prims.eq_p, rank, np.int32(source))
    zeros = bind(prims.broadcast_in_dim_p, np.zeros((), aval_of(ct).dtype),
                 shape=aval_of(ct).shape, broadcast_dimensions=())
    return [bind(prims.select_n_p, is_source, zeros, total)]


transpose_rules[coll.psum_p] = _psum_transpose
transpose_rules[coll.pmean_p] = _pmean_transpose
transpose_rules[coll.pvary_p] = _pvary_transpose
transpose_rules[coll.all_gather_p] = _all_gather_transpose
transpose_rules[coll.psum_scatter_p] = _psum_scatter_transpose
transpose_rules[coll.ppermute_p] = _ppermute_transpose
transpose_rules[coll.all_to_all_p] = _all_to_all_transpose
transpose_rules[coll.pbroadcast_p] = _pbroadcast_transpose


# Unreduced and reduced values (JAX 0.10.2's pairs): a reduced value's cotangent is a partial
# sum, so each cast or collective transposes to its mirror, and nothing is added twice.
def _mirror(prim, keep=()):
    def rule(ct, x, *, mesh_axes, **params):
        return [bind(prim, ct, mesh_axes=mesh_axes, **{k: params[k] for k in keep})]
    return rule


_CHUNKS = ("tiled", "axis_size")
transpose_rules[coll.vary_unreduced_cast_p] = _mirror(coll.reduced_vary_cast_p)
transpose_rules[coll.reduced_vary_cast_p] = _mirror(coll.vary_unreduced_cast_p)
transpose_rules[coll.preduced_p] = _mirror(coll.unreduced_psum_p)
transpose_rules[coll.unreduced_psum_p] = _mirror(coll.preduced_p)


def _unreduced_psum_scatter_transpose(ct, x, *, mesh_axes, scatter_axis, tiled, axis_size):
    return [bind(coll.all_gather_reduced_p, ct, mesh_axes=mesh_axes, gather_axis=scatter_axis,
                 tiled=tiled, axis_size=axis_size)]


def _all_gather_reduced_transpose(ct, x, *, mesh_axes, gather_axis, tiled, axis_size):
    return [bind(coll.unreduced_psum_scatter_p, ct, mesh_axes=mesh_axes,
                 scatter_axis=gather_axis, tiled=tiled, axis_size=axis_size)]


transpose_rules[coll.unreduced_psum_scatter_p] = _unreduced_psum_scatter_transpose
transpose_rules[coll.all_gather_reduced_p] = _all_gather_reduced_transpose


# --- ragged_all_to_all: linear in the operand and the output; the offsets and sizes are data ----

def _ragged_all_to_all_jvp(primals, tangents, **params):
    out = bind(coll.ragged_all_to_all_p, *primals, **params)
    if tangents[0] is None and tangents[1] is None:
        return [out], [None]
    filled = [instantiate(t, aval_of(x)) for t, x in zip(tangents[:2], primals[:2])]
    return [out], [bind(coll.ragged_all_to_all_p, *filled, *primals[2:], **params)]


def _ragged_all_to_all_transpose(ct, operand, output, input_offsets, send_sizes,
                                 output_offsets, recv_sizes, *, mesh_axes, axis_size):
    """As JAX: the operand's cotangent is the ragged all_to_all back (each member learns where
    its received rows sit and where they came from by an all_to_all of the offsets); the
    output's is the cotangent with the received rows zeroed."""
    def exchanged(offsets):
        return bind(coll.all_to_all_p, offsets, mesh_axes=mesh_axes, split_axis=0,
                    concat_axis=0, tiled=True, axis_size=axis_size)

    received_at = exchanged(output_offsets)
    ct_operand = ct_output = None
    if isinstance(operand, Linear):
        ct_operand = bind(coll.ragged_all_to_all_p, ct, zeros_like_aval(operand.aval),
                          received_at, recv_sizes, exchanged(input_offsets), send_sizes,
                          mesh_axes=mesh_axes, axis_size=axis_size)
    if isinstance(output, Linear):
        written = _rows_written(received_at, recv_sizes, aval_of(ct))
        ct_output = bind(prims.select_n_p, written, ct, zeros_like_aval(aval_of(ct)))
    return [ct_operand, ct_output, None, None, None, None]


def _rows_written(starts, sizes, aval):
    """A mask of ``aval``'s shape: the leading-axis rows any slice ``starts[i]`` onwards,
    ``sizes[i]`` long, covers."""
    k, rows = aval_of(starts).shape[0], aval.shape[0]
    dtype = aval_of(starts).dtype
    row = bind(prims.iota_p, dtype=dtype, shape=(k, rows), dimension=1)
    low = bind(prims.broadcast_in_dim_p, starts, shape=(k, rows), broadcast_dimensions=(0,))
    count = bind(prims.broadcast_in_dim_p, bind(prims.convert_element_type_p, sizes,
                                                 new_dtype=dtype),
                 shape=(k, rows), broadcast_dimensions=(0,))
    inside = bind(prims.and_p, bind(prims.ge_p, row, low),
                  bind(prims.lt_p, row, bind(prims.add_p, low, count)))
    written = bind(prims.reduce_or_p, inside, axes=(0,))
    return bind(prims.broadcast_in_dim_p, written, shape=aval.shape, broadcast_dimensions=(0,))


jvp_rules[coll.ragged_all_to_all_p] = _ragged_all_to_all_jvp
transpose_rules[coll.ragged_all_to_all_p] = _ragged_all_to_all_transpose


# --- vmap over an unnamed axis -------------------------------------------------------------------

def leading_batch_rule(prim, axis_params, values, dims, **params):
    """Collectives that name array axes (``gather_axis`` ...): the batch axis leads, and the
    named axes move up by one. Results keep the batch axis in front."""
    (x,), (dim,) = values, dims
    x = moveaxis(x, dim, 0)
    params = {name: value + 1 if name in axis_params else value
              for name, value in params.items()}
    return [bind(prim, x, **params)], [0]



# Collectives act on each device's whole block, so the batch axis rides along.
for _p in coll.REDUCING + (coll.pvary_p, coll.ppermute_p, coll.pbroadcast_p,
                          coll.vary_unreduced_cast_p, coll.reduced_vary_cast_p, coll.preduced_p,
                          coll.unreduced_psum_p):
    batching_rules[_p] = functools.partial(keep_dim_rule, _p)
batching_rules[coll.all_gather_reduced_p] = functools.partial(
    leading_batch_rule, coll.all_gather_reduced_p, ("gather_axis",))
batching_rules[coll.unreduced_psum_scatter_p] = functools.partial(
    leading_batch_rule, coll.unreduced_psum_scatter_p, ("scatter_axis",))
batching_rules[coll.all_gather_p] = functools.partial(
    leading_batch_rule, coll.all_gather_p, ("gather_axis",))
batching_rules[coll.psum_scatter_p] = functools.partial(
    leading_batch_rule, coll.psum_scatter_p, ("scatter_axis",))
batching_rules[coll.all_to_all_p] = functools.partial(
    leading_batch_rule, coll.all_to_all_p, ("split_axis", "concat_axis"))
batching_rules[coll.axis_index_p] = functools.partial(unbatched_rule, coll.axis_index_p)


def _ragged_all_to_all_batch_rule(values, dims, **params):
    """As JAX: the members' operands and outputs stacked into one of each (the batch axis
    merged into the leading one), every member's offsets moved into its own rows, one
    ragged all_to_all, the result split again."""
    size = next(shape_of(v)[d] for v, d in zip(values, dims) if d is not None)
    operand, output = (batch_at(v, d, size, 0) for v, d in zip(values[:2], dims[:2]))
    rows = (shape_of(operand)[1], shape_of(output)[1])
    offsets = [batch_at(v, d, size, 1) for v, d in zip(values[2:], dims[2:])]   # (K, batch)

    def shifted(x, step):
        dtype = aval_of(x).dtype
        member = bind(prims.iota_p, dtype=dtype, shape=shape_of(x), dimension=1)
        return bind(prims.add_p, x, bind(prims.mul_p, member, literal(step, dtype)))

    offsets[0] = shifted(offsets[0], rows[0])
    offsets[2] = shifted(offsets[2], rows[1])
    merged = [bind(prims.reshape_p, operand, new_sizes=(size * rows[0],) + shape_of(operand)[2:]),
              bind(prims.reshape_p, output, new_sizes=(size * rows[1],) + shape_of(output)[2:])]
    merged += [bind(prims.reshape_p, x, new_sizes=(shape_of(x)[0] * size,)) for x in offsets]
    out = bind(coll.ragged_all_to_all_p, *merged, **params)
    return [bind(prims.reshape_p, out, new_sizes=(size,) + shape_of(output)[1:])], [0]


batching_rules[coll.ragged_all_to_all_p] = _ragged_all_to_all_batch_rule


# --- vmap over a named axis ----------------------------------------------------------------------


def named_axes_size(axes) -> int:
    """The number of members (devices, batch members) along ``axes``: vmap axes by their
    batch size, mesh axes by the enclosing shard_map's mesh."""
    sizes = []
    for name in axes:
        axis = vmap_axis(name)
        sizes.append(axis.size if axis is not None else current_shard_context().mesh.shape[name])
    return math.prod(sizes)


@dataclasses.dataclass(frozen=True)
class _Group:
    """A collective's names split around the vmap's axis: ``major``, the members here,
    ``minor``."""
    major: tuple
    local: int
    minor: tuple
    major_size: int
    minor_size: int

    @property
    def size(self) -> int:
        return self.major_size * self.local * self.minor_size


def _group(trace: BatchTrace, mesh_axes) -> _Group:
    position = tuple(mesh_axes).index(trace.axis.name)
    spmd = trace.spmd.mesh_axes if trace.spmd is not None else ()
    major = tuple(mesh_axes[:position]) + spmd
    minor = tuple(mesh_axes[position + 1:])
    return _Group(major, trace.axis_size, minor, named_axes_size(major),
                  named_axes_size(minor))


# --- reductions --------------------------------------------------------------------------------

_LOCAL_REDUCTION = {coll.psum_p: prims.reduce_sum_p, coll.pmean_p: prims.reduce_sum_p,
                    coll.pmax_p: prims.reduce_max_p, coll.pmin_p: prims.reduce_min_p}


def _reducing_rule(prim, trace, values, dims, *, mesh_axes):
    """Reduce over the members here, then over the other names; the result is the same for
    every member. Unbatched: psum multiplies by the member count, the others keep ``x``."""
    (x,), (dim,) = values, dims
    group = _group(trace, mesh_axes)
    x = _reduction_operand(prim, x)
    dtype = aval_of(x).dtype
    if dim is None:
        if prim is coll.psum_p:
            x = bind(prims.mul_p, x, literal(group.local, dtype))
    else:
        x = bind(_LOCAL_REDUCTION[prim], x, axes=(dim,))
        if prim is coll.pmean_p:
            x = bind(prims.div_p, x, literal(group.local, dtype))
    rest = group.major + group.minor
    if rest:
        x = bind(prim, x, mesh_axes=rest)
    return [x], [None]


def _reduction_operand(prim, x):
    """``x`` in the dtype the reduction computes in (``coll.reduced_dtype``)."""
    dtype = aval_of(x).dtype
    want = coll.reduced_dtype(dtype, prim.collective.reduction)
    return x if want == dtype else bind(prims.convert_element_type_p, x, new_dtype=want)


for _p in coll.REDUCING:
    named_axis_rules[_p] = functools.partial(_reducing_rule, _p)


# --- ranks -------------------------------------------------------------------------------------

def _ranks(group: _Group):
    """Each member's rank over the collective's names: int32 of shape (members,)."""
    rank = bind(prims.iota_p, dtype=dtypes.int_, shape=(group.local,), dimension=0)
    if group.major:
        offset = bind(prims.mul_p, bind(coll.axis_index_p, mesh_axes=group.major),
                      np.int32(group.local))
        rank = bind(prims.add_p, rank, offset)
    if group.minor:
        rank = bind(prims.mul_p, rank, np.int32(group.minor_size))
        rank = bind(prims.add_p, rank, bind(coll.axis_index_p, mesh_axes=group.minor))
    return rank


def _axis_index_rule(trace, values, dims, *, mesh_axes):
    return [_ranks(_group(trace, mesh_axes))], [0]


def _pvary_rule(trace, values, dims, *, mesh_axes):
    """Members are always distinct values: only the other names are cast."""
    (x,), (dim,) = values, dims
    rest = tuple(a for a in mesh_axes if a != trace.axis.name)
    if rest:
        x = bind(coll.pvary_p, x, mesh_axes=rest)
    return [x], [dim]


named_axis_rules[coll.axis_index_p] = _axis_index_rule
named_axis_rules[coll.pvary_p] = _pvary_rule


# --- gathering ---------------------------------------------------------------------------------

def _gather_all(x, dim, group: _Group, **params):
    """Every member's ``x`` stacked in rank order along a new leading axis: (size, *member).
    The same for every member (unbatched)."""
    x = batch_at(x, dim, group.local, 0)                       # (local, *member)
    shape = shape_of(x)[1:]
    if group.minor:
        x = bind(coll.all_gather_p, x, mesh_axes=group.minor, gather_axis=1, tiled=False,
                 axis_size=group.minor_size, **params)          # (local, minor, *member)
    if group.major:
        x = bind(coll.all_gather_p, x, mesh_axes=group.major, gather_axis=0, tiled=False,
                 axis_size=group.major_size, **params)          # (major, local, minor, ...)
    return bind(prims.reshape_p, x, new_sizes=(group.size,) + shape)


def _merge_axes(x, axis: int):
    """``x`` with axes ``axis`` and ``axis + 1`` merged into one (the first major)."""
    shape = shape_of(x)
    merged = shape[:axis] + (shape[axis] * shape[axis + 1],) + shape[axis + 2:]
    return bind(prims.reshape_p, x, new_sizes=merged)


def _all_gather_rule(trace, values, dims, *, mesh_axes, gather_axis, tiled, axis_size,
                     **params):
    (x,), (dim,) = values, dims
    everyone = _gather_all(x, dim, _group(trace, mesh_axes), **params)
    y = moveaxis(everyone, 0, gather_axis)
    return [_merge_axes(y, gather_axis) if tiled else y], [None]


def _psum_scatter_rule(trace, values, dims, *, mesh_axes, scatter_axis, tiled, axis_size):
    """Sum over the members here, then each name's part of the scatter: the scatter axis is
    split (major, members, minor, chunk) and the members' part becomes the batch axis."""
    (x,), (dim,) = values, dims
    group = _group(trace, mesh_axes)
    x = _reduction_operand(coll.psum_p, x)
    if dim is None:
        total = bind(prims.mul_p, x, literal(group.local, aval_of(x).dtype))
    else:
        total = bind(prims.reduce_sum_p, x, axes=(dim,))
    shape = shape_of(total)
    chunk = shape[scatter_axis] // group.size
    parts = (group.major_size, group.local, group.minor_size, chunk)
    y = bind(prims.reshape_p, total,
             new_sizes=shape[:scatter_axis] + parts + shape[scatter_axis + 1:])
    y = _scatter_part(y, group.major, group.major_size, scatter_axis)
    y = _scatter_part(y, group.minor, group.minor_size, scatter_axis + 1)
    if not tiled:
        y = bind(prims.squeeze_p, y, dimensions=(scatter_axis + 1,))
    return [y], [scatter_axis]


def _scatter_part(x, axes, size, axis):
    if axes:
        return bind(coll.psum_scatter_p, x, mesh_axes=axes, scatter_axis=axis, tiled=False,
                    axis_size=size)
    return bind(prims.squeeze_p, x, dimensions=(axis,))


named_axis_rules[coll.all_gather_p] = _all_gather_rule
named_axis_rules[coll.psum_scatter_p] = _psum_scatter_rule


# --- sending between members -------------------------------------------------------------------
# ppermute, pbroadcast and all_to_all with mesh axes among the names gather every member's
# value first and pick: the answer of the collective, at the cost of an all_gather's traffic.

def _ppermute_rule(trace, values, dims, *, mesh_axes, perm):
    (x,), (dim,) = values, dims
    group = _group(trace, mesh_axes)
    sources = np.zeros(group.size, np.int32)
    received = np.zeros(group.size, np.bool_)
    for source, dest in perm:
        sources[dest], received[dest] = source, True
    if dim is None and not group.major and not group.minor and received.all():
        return [x], [None]                  # every member gets some member's equal value
    everyone = _gather_all(x, dim, group)
    ranks = _ranks(group)
    y = bind(prims.gather_p, everyone, bind(prims.gather_p, sources, ranks, axis=0), axis=0)
    if not received.all():
        keep = bind(prims.gather_p, received, ranks, axis=0)
        keep = bind(prims.broadcast_in_dim_p, keep, shape=shape_of(y), broadcast_dimensions=(0,))
        zeros = bind(prims.broadcast_in_dim_p, literal(0, aval_of(y).dtype), shape=shape_of(y),
                     broadcast_dimensions=())
        y = bind(prims.select_n_p, keep, zeros, y)
    return [y], [0]


def _pbroadcast_rule(trace, values, dims, *, mesh_axes, source):
    (x,), (dim,) = values, dims
    group = _group(trace, mesh_axes)
    if dim is None and not group.major and not group.minor:
        return [x], [None]
    return [member(_gather_all(x, dim, group), 0, source)], [None]


def _all_to_all_rule(trace, values, dims, *, mesh_axes, split_axis, concat_axis, tiled,
                     axis_size):
    """Member r takes chunk r of every member's split axis, joined along the concat axis in
    rank order (untiled: the split axis goes, a new concat axis of the sources comes)."""
    (x,), (dim,) = values, dims
    group = _group(trace, mesh_axes)
    everyone = _gather_all(x, dim, group)                    # (sources, *member)
    shape = shape_of(everyone)
    split = 1 + split_axis
    chunks = shape[:split] + (group.size, shape[split] // group.size) + shape[split + 1:]
    y = bind(prims.reshape_p, everyone, new_sizes=chunks)
    y = bind(prims.gather_p, y, _ranks(group), axis=split)    # the chunk for each member
    y = moveaxis(y, split, 0)                                 # (members, sources, ...)
    if not tiled:
        y = bind(prims.squeeze_p, y, dimensions=(split + 1,))
        return [moveaxis(y, 1, 1 + concat_axis)], [0]
    y = moveaxis(y, 1, 1 + concat_axis)
    return [_merge_axes(y, 1 + concat_axis)], [0]


named_axis_rules[coll.ppermute_p] = _ppermute_rule
named_axis_rules[coll.pbroadcast_p] = _pbroadcast_rule
named_axis_rules[coll.all_to_all_p] = _all_to_all_rule


def _ragged_all_to_all_named_rule(trace, values, dims, **params):
    raise NotImplementedError("ragged_all_to_all over a vmap's axis_name is not supported "
                              "(nor by JAX): name mesh axes only")


named_axis_rules[coll.ragged_all_to_all_p] = _ragged_all_to_all_named_rule


def _unreduced_named_rule(name, trace, values, dims, **params):
    raise NotImplementedError(f"{name} over a vmap's axis_name is not supported: values are "
                              "unreduced or reduced over Explicit mesh axes only (as JAX's)")


for _p in coll.UNREDUCED_COLLECTIVES:
    named_axis_rules[_p] = functools.partial(_unreduced_named_rule, _p.name)
