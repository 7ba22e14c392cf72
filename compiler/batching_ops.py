"""Batching rules of the array primitives (``compiler.batching``'s tables): elementwise
operations and reductions by the generic rules, and one rule each for shapes, indexing, linear
algebra and sharding constraints.
"""
from __future__ import annotations

import functools

import numpy as np

from compiler.batching import (batch_at, batch_size, batch_split_of, batching_rules,
                              broadcast_batch, elementwise_rule, keep_dim_rule, literal,
                              loop_rule, member_aval, moveaxis, ndim_of, reduction_rule,
                              shape_of, shift_axes, spec_entry, unbatched_rule, vectorize,
                              with_batch_dim)
from compiler.layouts import layout_of
from compiler.tracing import Tracer, aval_of, bind
from ir import primitives as prims
from ir.sharding import NamedSharding, PartitionSpec, axes_size, entry_names, spec_axes
from ir.sharding_rules import named_sharding


for _p in prims.UNARY + prims.PREDICATES + (prims.convert_element_type_p,
                                            prims.stop_gradient_p, prims.reduce_precision_p,
                                            prims.copy_p):
    batching_rules[_p] = functools.partial(keep_dim_rule, _p)
for _p in prims.ARITHMETIC + prims.COMPARISON + (prims.select_n_p,):
    batching_rules[_p] = functools.partial(elementwise_rule, _p)
for _p in prims.REDUCTIONS + (prims.argmax_p, prims.argmin_p):
    batching_rules[_p] = functools.partial(reduction_rule, _p)
batching_rules[prims.iota_p] = functools.partial(unbatched_rule, prims.iota_p)
batching_rules[prims.debug_print_p] = functools.partial(loop_rule, prims.debug_print_p)


def _check_rule(values, dims, **params):
    """A check of batched error leaves: the error batched at the front (every leaf), checked
    as one (it fails where any member does)."""
    size = batch_size(values, dims)
    bind(prims.check_p, *[batch_at(v, d, size) for v, d in zip(values, dims)], **params)
    return [], []


batching_rules[prims.check_p] = _check_rule
# (the callback sees the batched value's layout, as JAX's rule gives it)
batching_rules[prims.inspect_sharding_p] = functools.partial(unbatched_rule,
                                                             prims.inspect_sharding_p)


def _threefry2x32_rule(values, dims):
    """Elementwise, with two results."""
    (outs,), (dim,) = elementwise_rule(prims.threefry2x32_p, values, dims)
    return list(outs), [dim, dim]


batching_rules[prims.threefry2x32_p] = _threefry2x32_rule


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


def _reshape_rule(values, dims, *, new_sizes, out_sharding=None):
    (x,), (dim,) = values, dims
    size = shape_of(x)[dim]
    x = moveaxis(x, dim, 0)
    params = {} if out_sharding is None else {"out_sharding": with_batch_dim(out_sharding, 0)}
    return [bind(prims.reshape_p, x, new_sizes=(size,) + tuple(new_sizes), **params)], [0]


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
    size = shape_of(x)[dim]
    x = moveaxis(x, dim, 0)
    return [bind(prims.broadcast_in_dim_p, x, shape=(size,) + tuple(shape),
                 broadcast_dimensions=(0,) + tuple(d + 1 for d in broadcast_dimensions))], [0]


def _concatenate_rule(values, dims, *, dimension):
    size = batch_size(values, dims)
    operands = [batch_at(v, d, size) for v, d in zip(values, dims)]
    return [bind(prims.concatenate_p, *operands, dimension=dimension + 1)], [0]


def _slice_rule(values, dims, *, start_indices, limit_indices, strides):
    (x,), (dim,) = values, dims
    size = shape_of(x)[dim]
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


def _fft_rule(values, dims, *, fft_type, fft_lengths):
    """The transform acts on the last dimensions: the batch at axis 0 stays clear of them."""
    (x,), (dim,) = values, dims
    x = batch_at(x, dim, batch_size(values, dims))
    return [bind(prims.fft_p, x, fft_type=fft_type, fft_lengths=fft_lengths)], [0]


batching_rules[prims.fft_p] = _fft_rule


def _callback_rule(values, dims, *, callback, result_avals, effect, vmap_method, **flag):
    """JAX's rule for callbacks: 'sequential' calls once per member (a loop), 'expand_dims'
    and 'broadcast_all' once with the batch leading (unbatched operands given a size-1 or a
    full batch axis), 'legacy_vectorized' so too, unbatched operands left as they are; an
    ordered io_callback cannot be mapped."""
    size = batch_size(values, dims)
    params = dict(callback=callback, result_avals=result_avals, effect=effect,
                  vmap_method=vmap_method, **flag)       # (``partitioned``, a debug one's)
    if effect == "debug":
        return loop_rule(prims.callback_p, values, dims, **params)
    if effect == "io" and vmap_method is None:         # an ordered io_callback
        raise ValueError("Cannot `vmap` ordered IO callback.")
    if vmap_method in ("sequential", "sequential_unrolled"):
        return loop_rule(prims.callback_p, values, dims, **params)
    if vmap_method in ("expand_dims", "broadcast_all", "legacy_vectorized"):
        lead = size if vmap_method == "broadcast_all" else 1
        operands = []
        for v, d in zip(values, dims):
            if d is None and vmap_method == "legacy_vectorized":
                pass                # (the old ``vectorized=True``: unbatched ones as they are)
            elif d is None:
                shape = aval_of(v).shape
                v = bind(prims.broadcast_in_dim_p, v, shape=(lead,) + shape,
                         broadcast_dimensions=tuple(range(1, len(shape) + 1)))
            else:
                v = batch_at(v, d, size)
            operands.append(v)
        batched = tuple(((size,) + tuple(shape), dtype) for shape, dtype in result_avals)
        outs = bind(prims.callback_p, *operands, **dict(params, result_avals=batched))
        return list(outs), [0] * len(outs)
    name = {"pure": "pure_callback", "io": "io_callback"}[effect]
    raise NotImplementedError(
        f"vmap is only supported for the {name} primitive when vmap_method is one of "
        "'sequential', 'sequential_unrolled', 'expand_dims', 'broadcast_all', or "
        f"'legacy_vectorized'. Got vmap_method={vmap_method!r}.")


batching_rules[prims.callback_p] = _callback_rule
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
    negative = bind(prims.lt_p, indices, literal(0, dtype))
    wrapped = bind(prims.add_p, indices, literal(size, dtype))
    indices = bind(prims.select_n_p, negative, indices, wrapped)
    if not drop:
        indices = bind(prims.max_p, indices, literal(0, dtype))
        return bind(prims.min_p, indices, literal(max(size - 1, 0), dtype)), None
    low = bind(prims.ge_p, indices, literal(0, dtype))
    high = bind(prims.lt_p, indices, literal(size, dtype))
    return indices, bind(prims.and_p, low, high)


def _member_offsets(indices, size: int):
    """Per-member offsets ``k * size`` with the shape of leading-batch ``indices``."""
    aval = aval_of(indices)
    ramp = bind(prims.iota_p, dtype=aval.dtype, shape=aval.shape, dimension=0)
    return bind(prims.mul_p, ramp, literal(size, aval.dtype))


def _merge_batch_into(x, dim, size, axis):
    """Batched ``x`` with the batch merged into per-member ``axis``: pre + (B*N,) + post."""
    x = batch_at(x, dim, size, axis)
    shape = shape_of(x)
    merged = shape[:axis] + (shape[axis] * shape[axis + 1],) + shape[axis + 2:]
    return bind(prims.reshape_p, x, new_sizes=merged)


def _gather_rule(values, dims, *, axis):
    (x, indices), (x_dim, index_dim) = values, dims
    if index_dim is None:
        x = moveaxis(x, x_dim, 0)
        return [bind(prims.gather_p, x, indices, axis=axis + 1)], [0]
    if x_dim is None:
        split = batch_split_of([indices], [index_dim])
        if split is not None:       # gathered from unsplit indices, the result split again
            out = bind(prims.gather_p, x, _unsplit(indices, split[0]), axis=axis)
            return [_split_batch_at(out, axis + index_dim, split)], [axis + index_dim]
        return [bind(prims.gather_p, x, indices, axis=axis)], [axis + index_dim]
    # Both batched: gather from the members laid end to end along ``axis``.
    split = batch_split_of([x, indices], [x_dim, index_dim])
    if split is not None:
        # a batch split by its type: the members laid end to end would merge it into the
        # gathered axis; gathered whole instead, the result split along the batch again
        # (the values are the same, more bytes move: as take_along_axis of split arrays)
        x, indices = _unsplit(x, split[0]), _unsplit(indices, split[0])
    size = batch_size(values, dims)
    length = shape_of(x)[axis + (x_dim <= axis)]
    flat = _merge_batch_into(x, x_dim, size, axis)
    indices = moveaxis(indices, index_dim, 0)
    indices, _ = _normalized_index(indices, length, drop=False)
    indices = bind(prims.add_p, indices, _member_offsets(indices, length))
    return [_split_batch_at(bind(prims.gather_p, flat, indices, axis=axis), axis, split)], [axis]


def _unsplit(value, mesh):
    if aval_of(value).type_sharding is None:
        return value
    return bind(prims.sharding_constraint_p, value,
                sharding=NamedSharding(mesh, PartitionSpec(*[None] * len(shape_of(value)))))


def _scatter_rule(values, dims, *, axis, mode):
    (x, indices, updates), (x_dim, index_dim, update_dim) = values, dims
    size = batch_size(values, dims)
    if index_dim is None:
        x = batch_at(x, x_dim, size)
        updates = batch_at(updates, update_dim, size)
        return [bind(prims.scatter_p, x, indices, updates, axis=axis + 1, mode=mode)], [0]
    # Batched indices: scatter into the members laid end to end along ``axis`` (a batch split
    # by its type is gathered whole first and split again after, as the gather rule does;
    # after the broadcast of an unbatched operand, which takes the batch's split).
    split = batch_split_of([x, indices, updates], [x_dim, index_dim, update_dim])
    length = member_aval(x, x_dim).shape[axis]
    x, updates = batch_at(x, x_dim, size, axis), batch_at(updates, update_dim, size, axis)
    if split is not None:
        x, indices, updates = (_unsplit(v, split[0]) for v in (x, indices, updates))
    flat = _merge_batch_into(x, axis, size, axis)
    indices = moveaxis(indices, index_dim, 0)
    indices, valid = _normalized_index(indices, length, drop=True)
    shifted = bind(prims.add_p, indices, _member_offsets(indices, length))
    # An out-of-range index must not land in a neighbouring member: point it past the end.
    past_end = literal(size * length, aval_of(indices).dtype)
    indices = bind(prims.select_n_p, valid, bind(prims.broadcast_in_dim_p, past_end,
                                                 shape=shape_of(shifted),
                                                 broadcast_dimensions=()), shifted)
    indices, updates = _flatten_scatter_indices(indices, updates, axis)
    out = bind(prims.scatter_p, flat, indices, updates, axis=axis, mode=mode)
    shape = shape_of(out)
    unmerged = shape[:axis] + (size, length) + shape[axis + 1:]
    return [_split_batch_at(bind(prims.reshape_p, out, new_sizes=unmerged), axis, split)], [axis]


def _split_batch_at(value, dim: int, split):
    """``value`` with its batch axis ``dim`` split again as ``split`` says (None: as it is)."""
    if split is None:
        return value
    mesh, names = split
    spec = [None] * len(shape_of(value))
    spec[dim] = names if len(names) > 1 else names[0]
    return bind(prims.sharding_constraint_p, value,
                sharding=NamedSharding(mesh, PartitionSpec(*spec)))


def _flatten_scatter_indices(indices, updates, axis):
    """One index axis: the (batch, index...) axes of indices and updates merged into one."""
    count = aval_of(indices).size
    shape = shape_of(updates)
    rank = ndim_of(indices)
    indices = bind(prims.reshape_p, indices, new_sizes=(count,))
    merged = shape[:axis] + (count,) + shape[axis + rank:]
    return indices, bind(prims.reshape_p, updates, new_sizes=merged)


def _dynamic_slice_rule(values, dims, *, slice_sizes):
    x, starts = values[0], values[1:]
    x_dim, start_dims = dims[0], dims[1:]
    if all(d is None for d in start_dims):
        size = shape_of(x)[x_dim]
        starts = _insert(starts, x_dim, literal(0, aval_of(starts[0]).dtype) if starts
                         else np.int32(0))
        sizes = _insert(slice_sizes, x_dim, size)
        return [bind(prims.dynamic_slice_p, x, *starts, slice_sizes=sizes)], [x_dim]
    batched = tuple(d is not None for d in start_dims)
    return vectorize(functools.partial(_dynamic_slice_by_gather, slice_sizes, batched),
                     values, dims)


def _dynamic_slice_by_gather(slice_sizes, batched, x, *starts):
    """One member's dynamic_slice: unbatched starts slice at once, batched ones by gather."""
    fixed = [literal(0, aval_of(s).dtype) if b else s for s, b in zip(starts, batched)]
    sizes = [n if b else s for s, n, b in zip(slice_sizes, shape_of(x), batched)]
    x = bind(prims.dynamic_slice_p, x, *fixed, slice_sizes=tuple(sizes))
    for axis, (start, size, is_batched) in enumerate(zip(starts, slice_sizes, batched)):
        if is_batched:
            x = bind(prims.gather_p, x, _window(start, shape_of(x)[axis], size), axis=axis)
    return x


def _window(start, length: int, size: int):
    """The indices ``start .. start+size-1``, start clamped so the window fits in ``length``."""
    dtype = aval_of(start).dtype
    start = bind(prims.max_p, start, literal(0, dtype))
    start = bind(prims.min_p, start, literal(max(length - size, 0), dtype))
    ramp = bind(prims.iota_p, dtype=dtype, shape=(size,), dimension=0)
    return bind(prims.add_p, ramp, start)


def _dynamic_update_slice_rule(values, dims):
    x, update, starts = values[0], values[1], values[2:]
    x_dim, update_dim, start_dims = dims[0], dims[1], dims[2:]
    if all(d is None for d in start_dims):
        size = batch_size(values, dims)
        x = batch_at(x, x_dim, size)
        update = batch_at(update, update_dim, size)
        zero = literal(0, aval_of(starts[0]).dtype) if starts else np.int32(0)
        return [bind(prims.dynamic_update_slice_p, x, update, zero, *starts)], [0]
    return vectorize(_dynamic_update_slice_by_mask, values, dims)


def _dynamic_update_slice_by_mask(x, update, *starts):
    """One member's dynamic_update_slice as a select between ``x`` and the spread update."""
    shape = shape_of(x)
    if any(n == 0 for n in shape_of(update)):
        return x
    inside = None
    for axis, (start, length, size) in enumerate(zip(starts, shape, shape_of(update))):
        dtype = aval_of(start).dtype
        start = bind(prims.max_p, start, literal(0, dtype))
        start = bind(prims.min_p, start, literal(length - size, dtype))
        offsets = bind(prims.sub_p, bind(prims.iota_p, dtype=dtype, shape=(length,),
                                         dimension=0), start)
        hit = bind(prims.and_p, bind(prims.ge_p, offsets, literal(0, dtype)),
                   bind(prims.lt_p, offsets, literal(size, dtype)))
        hit = bind(prims.broadcast_in_dim_p, hit, shape=shape, broadcast_dimensions=(axis,))
        inside = hit if inside is None else bind(prims.and_p, inside, hit)
        offsets = bind(prims.min_p, bind(prims.max_p, offsets, literal(0, dtype)),
                       literal(size - 1, dtype))
        update = bind(prims.gather_p, update, offsets, axis=axis)
    if inside is None:
        return update
    typed = aval_of(x).type_sharding
    if typed is not None:
        # the result is laid out as the operand is (JAX's rule for an update of a slice):
        # the mask and the spread update are resharded to it before the select
        inside, update = [
            v if aval_of(v).type_sharding == typed else
            bind(prims.sharding_constraint_p, v, sharding=named_sharding(aval_of(x)))
            for v in (inside, update)]
    return bind(prims.select_n_p, inside, x, update)


batching_rules[prims.gather_p] = _gather_rule
batching_rules[prims.scatter_p] = _scatter_rule
batching_rules[prims.dynamic_slice_p] = _dynamic_slice_rule
batching_rules[prims.dynamic_update_slice_p] = _dynamic_update_slice_rule


# --- linear algebra ----------------------------------------------------------------------------

def _dot_general_rule(values, dims, *, dimension_numbers, preferred_element_type=None,
                      out_sharding=None, precision=None):
    """Both batched: a new dot batch dimension. One batched: its batch axis is a free axis.
    An ``out_sharding`` gains the batch dimension, unsplit."""
    (x, y), (x_dim, y_dim) = values, dims
    (lc, rc), (lb, rb) = dimension_numbers
    if x_dim is not None and y_dim is not None:
        x, y = moveaxis(x, x_dim, 0), moveaxis(y, y_dim, 0)
        numbers = ((shift_axes(lc, 0), shift_axes(rc, 0)),
                   ((0,) + shift_axes(lb, 0), (0,) + shift_axes(rb, 0)))
        out_dim = 0
    else:
        if x_dim is not None:
            lc, lb = shift_axes(lc, x_dim), shift_axes(lb, x_dim)
            free = [a for a in range(ndim_of(x)) if a not in lc and a not in lb]
            out_dim = len(lb) + free.index(x_dim)
        else:
            rc, rb = shift_axes(rc, y_dim), shift_axes(rb, y_dim)
            x_free = ndim_of(x) - len(lc) - len(lb)
            free = [a for a in range(ndim_of(y)) if a not in rc and a not in rb]
            out_dim = len(rb) + x_free + free.index(y_dim)
        numbers = ((lc, rc), (lb, rb))
    params = dict(preferred_element_type=preferred_element_type)
    if precision is not None:
        params["precision"] = precision
    if out_sharding is not None:
        params["out_sharding"] = with_batch_dim(out_sharding, out_dim)
    return [bind(prims.dot_general_p, x, y, dimension_numbers=numbers, **params)], [out_dim]


batching_rules[prims.dot_general_p] = _dot_general_rule


# --- sharding constraints ---------------------------------------------------------------------

def _sharding_constraint_rule(values, dims, *, sharding, spmd_axis_name=None):
    """The batch axis leads, split over ``spmd_axis_name``; without it, as the operand's type
    splits it over Explicit axes the constraint leaves free (JAX's vmap keeps that split of
    the batch), else left to propagation on Auto axes, not split on Explicit ones."""
    (x,), (dim,) = values, dims
    x = moveaxis(x, dim, 0)
    if isinstance(sharding, NamedSharding):
        spec = _constraint_spec(sharding, spmd_axis_name)
        typed = aval_of(x).type_sharding
        if spmd_axis_name is None and typed is not None and typed.spec[0]:
            batch_axes = tuple(typed.spec[0])
            if not set(batch_axes) & set(spec_axes(sharding.spec)):
                spec = PartitionSpec(spec_entry(batch_axes), *sharding.spec)
        if not isinstance(x, Tracer) and not sharding.mesh.explicit_axes:
            # run eagerly, JAX compiles the batched constraint: a dimension its axes do not
            # divide (a size-1 one, say) comes out unsplit, where a placement would refuse it,
            # and an unconstrained one keeps the operand's split (propagation's)
            spec = _dividing(_kept_where_unconstrained(spec, layout_of(x), sharding.mesh),
                             aval_of(x).shape, sharding.mesh)
        sharding = NamedSharding(sharding.mesh, spec)
    return [bind(prims.sharding_constraint_p, x, sharding=sharding)], [0]


def _kept_where_unconstrained(spec: PartitionSpec, layout, mesh) -> PartitionSpec:
    """``spec`` with each ``UNCONSTRAINED`` entry the split ``layout`` (an operand's, on
    ``mesh``) gives that dimension, where its axes are free; else unsplit."""
    if PartitionSpec.UNCONSTRAINED not in tuple(spec):
        return spec
    have = tuple(layout.spec) if isinstance(layout, NamedSharding) and layout.mesh == mesh \
        else ()
    used = set(spec_axes(spec.update(partitions=tuple(
        None if e is PartitionSpec.UNCONSTRAINED else e for e in spec))))
    entries = []
    for d, entry in enumerate(spec):
        if entry is PartitionSpec.UNCONSTRAINED:
            kept = have[d] if d < len(have) else None
            names = entry_names(kept)
            entry = kept if names and not set(names) & used else None
            used.update(names if entry is not None else ())
        entries.append(entry)
    return spec.update(partitions=tuple(entries))


def _dividing(spec: PartitionSpec, shape, mesh) -> PartitionSpec:
    """``spec`` without the entries whose axes do not divide their dimension."""
    return spec.update(partitions=tuple(
        None if size % axes_size(mesh.shape, entry_names(entry)) else entry
        for size, entry in zip(shape, tuple(spec))))


def _constraint_spec(sharding: NamedSharding, spmd_axis_name) -> PartitionSpec:
    if spmd_axis_name is None:
        # on Auto axes the batch dimension is left to propagation (JAX's rule adds it to the
        # unconstrained dimensions); on Explicit ones the type says it (unsplit here)
        batch = None if sharding.mesh.explicit_axes else PartitionSpec.UNCONSTRAINED
        return PartitionSpec(batch, *sharding.spec)
    for name in spmd_axis_name:
        if name not in sharding.mesh.axis_names:
            raise ValueError(f"vmap spmd_axis_name {name!r} is not an axis of the mesh "
                             f"{sharding.mesh.axis_names} of with_sharding_constraint's "
                             "sharding")
        if name in spec_axes(sharding.spec):
            raise ValueError(f"vmap spmd_axis_name {name!r} already appears in the sharding "
                             f"constraint's spec {sharding.spec!r}")
    return PartitionSpec(spec_entry(spmd_axis_name), *sharding.spec)


batching_rules[prims.sharding_constraint_p] = _sharding_constraint_rule


def _device_put_rule(values, dims, *, device, src):
    """To a device: the batch axis stays where it is; to a sharding (or back from one): the
    batch axis leads, not split."""
    (x,), (dim,) = values, dims
    if isinstance(device, NamedSharding) or isinstance(src, NamedSharding):
        x, dim = moveaxis(x, dim, 0), 0
    return [bind(prims.device_put_p, x, device=_batched_target(device),
                 src=_batched_target(src))], [dim]


def _batched_target(target):
    if not isinstance(target, NamedSharding):
        return target
    return NamedSharding(target.mesh, _constraint_spec(target, None))


batching_rules[prims.device_put_p] = _device_put_rule


def _shard_alike_rule(values, dims):
    """Both batched at one position (an unbatched operand broadcast there), as JAX's."""
    (x, y), (xd, yd) = values, dims
    if xd is None and yd is None:
        return bind(prims.shard_alike_p, x, y), [None, None]
    if xd is None:
        x, xd = broadcast_batch(x, aval_of(y).shape[yd], yd), yd
    elif yd is None:
        y = broadcast_batch(y, aval_of(x).shape[xd], xd)
    elif yd != xd:
        y = moveaxis(y, yd, xd)
    return bind(prims.shard_alike_p, x, y), [xd, xd]


batching_rules[prims.shard_alike_p] = _shard_alike_rule
