"""XLA's gather and scatter with dimension numbers (``lax.gather``, ``lax.scatter*``), as
JAX states them: the index vector is the last dimension of the indices, batching dimensions
pair operand and index dimensions, and ``mode`` says what an out-of-bounds window does.

Each is built from operations shardc already has: every element's position in the operand is
computed (a window's start, clamped or checked, plus its offset), and the flat operand is
read there (``take``) or updated there (``.at[]``), so gradients, vmap and sharding follow
from those operations'."""
from __future__ import annotations

import enum
import math
from typing import NamedTuple, Sequence

import numpy as np

from ir import dtypes as _dt
import shardc.numpy as jnp
from shardc.lax._ops import same_dtypes_error
from shardc.numpy._indexing import apply_per_count, cut_outside

__all__ = ["GatherDimensionNumbers", "GatherScatterMode", "ScatterDimensionNumbers", "gather",
           "scatter", "scatter_add", "scatter_apply", "scatter_max", "scatter_min",
           "scatter_mul", "scatter_sub"]


class GatherDimensionNumbers(NamedTuple):
    """How the dimensions of a gather's operand, indices and output relate (JAX's):
    ``offset_dims`` (output dimensions that index into a slice), ``collapsed_slice_dims``
    (operand dimensions of slice size 1 the output drops), ``start_index_map`` (the operand
    dimension each index component starts), and paired batching dimensions."""
    offset_dims: tuple
    collapsed_slice_dims: tuple
    start_index_map: tuple
    operand_batching_dims: tuple = ()
    start_indices_batching_dims: tuple = ()


class ScatterDimensionNumbers(NamedTuple):
    """How the dimensions of a scatter's operand, indices and updates relate (JAX's):
    ``update_window_dims`` (update dimensions inside a window), ``inserted_window_dims``
    (operand dimensions of window size 1 the updates leave out),
    ``scatter_dims_to_operand_dims`` (the operand dimension each index component starts), and
    paired batching dimensions."""
    update_window_dims: Sequence[int]
    inserted_window_dims: Sequence[int]
    scatter_dims_to_operand_dims: Sequence[int]
    operand_batching_dims: Sequence[int] = ()
    scatter_indices_batching_dims: Sequence[int] = ()


class GatherScatterMode(enum.Enum):
    """What an out-of-bounds index does: ``CLIP`` clamps the window into range;
    ``FILL_OR_DROP`` fills a gathered window (drops a scattered one) that is not wholly in
    range; ``PROMISE_IN_BOUNDS`` promises it never happens (a gather clamps, a scatter
    drops, as XLA does)."""
    CLIP = enum.auto()
    FILL_OR_DROP = enum.auto()
    PROMISE_IN_BOUNDS = enum.auto()
    ONE_HOT = enum.auto()

    @staticmethod
    def from_any(s) -> "GatherScatterMode":
        if isinstance(s, GatherScatterMode):
            return s
        if s == "clip":
            return GatherScatterMode.CLIP
        if s is None or s == "fill" or s == "drop":
            return GatherScatterMode.FILL_OR_DROP
        if s == "promise_in_bounds":
            return GatherScatterMode.PROMISE_IN_BOUNDS
        if s == "one_hot":
            return GatherScatterMode.ONE_HOT
        raise ValueError(f'Unknown gather mode "{s}"')


def _default_fill(dtype):
    """JAX's fill for an out-of-bounds gathered window: NaN, the most negative (signed) or
    largest (unsigned) integer, True."""
    if np.issubdtype(dtype, np.inexact):
        return np.nan
    if np.issubdtype(dtype, np.signedinteger):
        return np.iinfo(dtype).min
    if np.issubdtype(dtype, np.unsignedinteger):
        return np.iinfo(dtype).max
    return True


def _positions(shape, windows, starts, batching, offsets, rank, batch_at, batch_shape, *,
               clip, check):
    """Each result (or update) element's flat position in an operand of ``shape``, and
    whether its window is in range (None when not ``check``ed). ``windows``: the window size
    along each operand dimension; ``starts``: operand dimension -> the start (an array of
    ``batch_shape``, the indices' batch dimensions), clamped into range where ``clip``;
    ``batching``: operand dimension -> the index batch dimension it pairs with; ``offsets``:
    operand dimension -> the result dimension its window offset runs along; ``batch_at``:
    the result dimensions the index batch dimensions lie along."""

    def at_batch(a):
        lay = [1] * rank
        for p, n in zip(batch_at, batch_shape):
            lay[p] = n
        return jnp.reshape(a, lay)

    strides = [int(np.prod(shape[d + 1:])) for d in range(len(shape))]
    flat = jnp.zeros([1] * rank, np.int32)
    inside = None
    for d in range(len(shape)):
        hi = shape[d] - windows[d]
        if d in starts:
            start = starts[d]
            if check:
                ok = (start >= 0) & (start <= hi)
                inside = ok if inside is None else inside & ok
            if clip:
                start = jnp.clip(start, 0, max(hi, 0))
            flat = flat + at_batch(start) * strides[d]
        elif d in batching:
            along = jnp.arange(batch_shape[batching[d]], dtype=np.int32)
            lay = [1] * len(batch_shape)
            lay[batching[d]] = batch_shape[batching[d]]
            flat = flat + at_batch(jnp.broadcast_to(jnp.reshape(along, lay), batch_shape)) \
                * strides[d]
        if d in offsets:
            lay = [1] * rank
            lay[offsets[d]] = windows[d]
            flat = flat + jnp.reshape(jnp.arange(windows[d], dtype=np.int32), lay) * strides[d]
    return flat, (None if inside is None else at_batch(inside))


def _is_sorted(dims, op, name):
    if any(b < a for a, b in zip(dims, dims[1:])):
        raise TypeError(f"{name} in {op} op must be sorted; got {dims}")


def _dims_in_range(dims, rank, op, name):
    for d in dims:
        if d < 0 or d >= rank:
            raise TypeError(f"Invalid {name} set in {op} op; valid range is [0, {rank}); "
                            f"got: {d}.")


def _sorted_dims_in_range(dims, rank, op, name):
    if dims:
        bad = dims[0] if dims[0] < 0 else dims[-1] if dims[-1] >= rank else None
        if bad:
            raise TypeError(f"Invalid {name} set in {op} op; valid range is [0, {rank}); "
                            f"got: {bad}.")


def _no_duplicates(dims, op, name):
    if len(set(dims)) != len(dims):
        raise TypeError(f"{name} in {op} op must not repeat; got: {dims}.")


def _disjoint(dims1, dims2, op, name1, name2):
    if not set(dims1).isdisjoint(dims2):
        raise TypeError(f"{name1} and {name2} in {op} op must be disjoint; got: {dims1} and "
                        f"{dims2}.")


def _check_gather(shape, idx_shape, dn, slice_sizes):
    """XLA's checks on a gather's dimension numbers and slice sizes, in JAX's order and with
    its messages (``jax.lax.gather``'s shape rule)."""
    rank, idx_rank = len(shape), len(idx_shape)
    offset_dims, collapsed = tuple(dn.offset_dims), tuple(dn.collapsed_slice_dims)
    operand_batching = tuple(dn.operand_batching_dims)
    indices_batching = tuple(dn.start_indices_batching_dims)
    start_index_map = tuple(dn.start_index_map)
    vector_dim = idx_rank - 1
    if vector_dim < 0:
        raise TypeError(f"Gather index leaf dimension must be within [0, rank(indices) + 1). "
                        f"rank(indices) is {idx_rank} and gather index leaf dimension is "
                        f"{vector_dim}.")
    _is_sorted(offset_dims, "gather", "offset_dims")
    _no_duplicates(offset_dims, "gather", "offset_dims")
    out_rank = len(offset_dims) + idx_rank - 1
    for i, d in enumerate(offset_dims):
        if d < 0 or d >= out_rank:
            raise TypeError(f"Offset dimension {i} in gather op is out of bounds; got {d}, but "
                            f"should have been in [0, {out_rank})")
    if len(start_index_map) != idx_shape[vector_dim]:
        raise TypeError(f"Gather op has {len(start_index_map)} elements in start_index_map and "
                        f"the bound of dimension index_vector_dim={vector_dim} of indices is "
                        f"{idx_shape[vector_dim]}. These two numbers must be equal.")
    for i, d in enumerate(start_index_map):
        if d < 0 or d >= rank:
            raise TypeError(f"Invalid start_index_map; domain is [0, {rank}), got: {i}->{d}.")
    _no_duplicates(start_index_map, "gather", "start_index_map")
    _is_sorted(collapsed, "gather", "collapsed_slice_dims")
    _sorted_dims_in_range(collapsed, rank, "gather", "collapsed_slice_dims")
    _no_duplicates(collapsed, "gather", "collapsed_slice_dims")
    _no_duplicates(operand_batching, "gather", "operand_batching_dims")
    _is_sorted(operand_batching, "gather", "operand_batching_dims")
    _sorted_dims_in_range(operand_batching, rank, "gather", "operand_batching_dims")
    _disjoint(collapsed, operand_batching, "gather", "collapsed_slice_dims",
              "operand_batching_dims")
    _disjoint(start_index_map, operand_batching, "gather", "start_index_map",
              "operand_batching_dims")
    _check_batching("Gather", "start_indices_batching_dims", shape, idx_shape,
                    operand_batching, indices_batching, vector_dim, " and")
    if rank != len(slice_sizes):
        raise TypeError(f"Gather op must have one slice size for every input dimension; got: "
                        f"len(slice_sizes)={len(slice_sizes)}, input_shape.rank={rank}")
    if len(slice_sizes) != len(offset_dims) + len(collapsed) + len(operand_batching):
        raise TypeError(f"All components of the offset index in a gather op must either be a "
                        f"offset dimension or explicitly collapsed/batching; got "
                        f"len(slice_sizes)={len(slice_sizes)}, output_slice_sizes="
                        f"{offset_dims}, collapsed_slice_dims={collapsed}, "
                        f"operand_batching_dims={operand_batching}.")
    if math.prod(idx_shape):
        for d, n in enumerate(slice_sizes):
            if not 0 <= n <= shape[d]:
                raise TypeError(f"Slice size at index {d} in gather op is out of range, must be "
                                f"within [0, {shape[d]} + 1), got {n}.")
    for i, d in enumerate(collapsed):
        if slice_sizes[d] != 1:
            raise TypeError(f"Gather op can only collapse slice dims with bound 1, but bound "
                            f"is {slice_sizes[d]} for index {d} at position {i}.")
    for i, d in enumerate(operand_batching):
        if slice_sizes[d] > 1:
            raise TypeError(f"Gather op can only have operand batching dims with bound 0/1, "
                            f"but bound is {slice_sizes[d]} for index {d} at position {i}.")


def _check_batching(op: str, indices_name: str, shape, idx_shape, operand_batching,
                    indices_batching, vector_dim: int, joint: str) -> tuple:
    """The checks a gather and a scatter share on their batching dimensions, in JAX's order
    and words (``joint``: how JAX's two messages join the dimension lists); the operand's
    batch shape."""
    name = op.lower()
    _no_duplicates(indices_batching, name, indices_name)
    _dims_in_range(indices_batching, len(idx_shape), name, indices_name)
    if vector_dim in indices_batching:
        raise TypeError(f"{op} op cannot have the index vector dimension as a batching "
                        f"dimension; got {indices_batching}.")
    if len(operand_batching) != len(indices_batching):
        raise TypeError(f"{op} op requires equal numbers of operand_batching_dims and "
                        f"{indices_name}, got {operand_batching}{joint}{indices_batching}.")
    operand_batch = tuple(shape[d] for d in operand_batching)
    indices_batch = tuple(idx_shape[d] for d in indices_batching)
    if operand_batch != indices_batch:
        raise TypeError(f"{op} op requires operand batching dimensions and indices batching "
                        f"dimensions to have the same shape, got {operand_batch} and "
                        f"{indices_batch}.")
    return operand_batch


def _check_scatter(shape, idx_shape, upd_shape, dn):
    """XLA's checks on a scatter's dimension numbers and shapes, in JAX's order and with its
    messages (``jax.lax.scatter``'s shape rule)."""
    rank, idx_rank, upd_rank = len(shape), len(idx_shape), len(upd_shape)
    window_dims, inserted = tuple(dn.update_window_dims), tuple(dn.inserted_window_dims)
    operand_batching = tuple(dn.operand_batching_dims)
    indices_batching = tuple(dn.scatter_indices_batching_dims)
    to_operand = tuple(dn.scatter_dims_to_operand_dims)
    vector_dim = idx_rank - 1
    if vector_dim < 0:
        raise TypeError(f"Scatter index leaf dimension must be within [0, rank(indices) + 1). "
                        f"rank(indices) is {idx_rank} and scatter index leaf dimension is "
                        f"{vector_dim}.")
    expected_rank = idx_rank - 1 + len(window_dims)
    if upd_rank != expected_rank:
        raise TypeError(f"Updates tensor must be of rank {expected_rank}; got {upd_rank}.")
    _is_sorted(window_dims, "scatter", "update_window_dims")
    _no_duplicates(window_dims, "scatter", "update_window_dims")
    _sorted_dims_in_range(window_dims, upd_rank, "scatter", "update_window_dims")
    _is_sorted(inserted, "scatter", "inserted_window_dims")
    _no_duplicates(inserted, "scatter", "inserted_window_dims")
    _sorted_dims_in_range(inserted, rank, "scatter", "inserted_window_dims")
    _is_sorted(operand_batching, "scatter", "operand_batching_dims")
    _no_duplicates(operand_batching, "scatter", "operand_batching_dims")
    _sorted_dims_in_range(operand_batching, rank, "scatter", "operand_batching_dims")
    _disjoint(inserted, operand_batching, "scatter", "inserted_window_dims",
              "operand_batching_dims")
    _disjoint(to_operand, operand_batching, "scatter", "scatter_dims_to_operand_dims",
              "operand_batching_dims")
    operand_batch = _check_batching("Scatter", "scatter_indices_batching_dims", shape,
                                    idx_shape, operand_batching, indices_batching, vector_dim,
                                    " and ")
    in_updates = list(range(vector_dim))
    for d in window_dims:
        in_updates.insert(d, None)
    updates_batch = tuple(upd_shape[in_updates.index(d)] for d in indices_batching)
    if operand_batch != updates_batch:
        raise TypeError(f"Scatter op requires operand batching dimensions and updates batching "
                        f"dimensions to have the same shape, got {operand_batch} and "
                        f"{updates_batch}.")
    window_size = len(window_dims) + len(inserted) + len(operand_batching)
    if rank != window_size:
        raise TypeError(f"Scatter op has window of size {window_size}; doesn't match operand "
                        f"of rank {rank}.")
    if len(to_operand) != idx_shape[vector_dim]:
        raise TypeError(f"Scatter op has {len(to_operand)} elements in "
                        f"scatter_dims_to_operand_dims and the bound of dimension "
                        f"index_vector_dim={vector_dim} of indices is {idx_shape[vector_dim]}. "
                        f"These two numbers must be equal")
    for i, d in enumerate(to_operand):
        if d < 0 or d >= rank:
            raise TypeError(f"Invalid scatter_dims_to_operand_dims mapping; domain is "
                            f"[0, {rank}), got: {i}->{d}.")
    _no_duplicates(to_operand, "scatter", "scatter_dims_to_operand_dims")
    max_sizes = [shape[d] for d in range(rank)
                 if d not in inserted and d not in operand_batching]
    for i, d in enumerate(window_dims):
        if max_sizes[i] < upd_shape[d]:
            raise TypeError(f"Bounds of the window dimensions of updates must not exceed the "
                            f"bounds of the corresponding dimensions of operand. For dimension "
                            f"{d}, updates bound is {upd_shape[d]}, operand bound is "
                            f"{max_sizes[i]}.")
    seen = 0
    for d in (d for d in range(upd_rank) if d not in window_dims):
        if seen == vector_dim:
            seen += 1
        if upd_shape[d] != idx_shape[seen]:
            raise TypeError(f"Bounds of the scatter dimensions of updates must be the same as "
                            f"the bounds of the corresponding dimensions of scatter indices. "
                            f"For scatter dimension {d}, updates bound is {upd_shape[d]}, "
                            f"indices bound is {idx_shape[seen]}.")
        seen += 1


def _check_index_dtype(idx):
    if not _dt.is_int(idx.dtype):
        raise ValueError("indices must have an integer type")


def gather(operand, start_indices, dimension_numbers, slice_sizes, *,
           unique_indices=False, indices_are_sorted=False, mode=None, fill_value=None):
    """XLA's gather (JAX's ``lax.gather``): for each index vector (the last dimension of
    ``start_indices``), the slice of ``slice_sizes`` of ``operand`` starting there. ``mode``
    None is ``PROMISE_IN_BOUNDS`` (windows clamped into range, as XLA does)."""
    dn = dimension_numbers
    x, idx = jnp.asarray(operand), jnp.asarray(start_indices)
    mode = GatherScatterMode.PROMISE_IN_BOUNDS if mode is None else \
        GatherScatterMode.from_any(mode)
    if mode is GatherScatterMode.ONE_HOT:
        # JAX's lax.gather rejects it too (an internal assertion); only take_along_axis
        # gathers by one-hot products
        raise NotImplementedError("lax.gather does not take GatherScatterMode.ONE_HOT; "
                                  "jnp.take_along_axis(..., mode='one_hot') gathers that way")
    slice_sizes = tuple(int(s) for s in slice_sizes)
    _check_index_dtype(idx)
    _check_gather(tuple(x.shape), tuple(idx.shape), dn, slice_sizes)
    if idx.ndim < 1 or idx.shape[-1] != len(dn.start_index_map):
        raise TypeError("Gather op has index vector of size "
                        f"{idx.shape[-1] if idx.ndim else 0} but start_index_map has size "
                        f"{len(dn.start_index_map)}")
    if len(slice_sizes) != x.ndim:
        raise TypeError(f"Gather op must have one slice size for every input dimension; got: "
                        f"len(slice_sizes)={len(slice_sizes)}, input_shape.rank={x.ndim}")
    for d in tuple(dn.collapsed_slice_dims) + tuple(dn.operand_batching_dims):
        if slice_sizes[d] != 1:
            raise TypeError(f"Gather op can only collapse slice dims with bound 1, but bound "
                            f"is {slice_sizes[d]} for index {d} at position 0.")
    for d, n in enumerate(slice_sizes):
        if not 0 <= n <= x.shape[d]:
            raise TypeError(f"Slice size at index {d} in gather op is out of range, must be "
                            f"within [0, {x.shape[d]} + 1), got {n}.")
    idx = idx.astype(np.int32)
    batch_shape = idx.shape[:-1]
    kept = [d for d in range(x.ndim)
            if d not in dn.collapsed_slice_dims and d not in dn.operand_batching_dims]
    rank = len(batch_shape) + len(dn.offset_dims)
    batch_at = [p for p in range(rank) if p not in dn.offset_dims]
    starts = {d: idx[..., k] for k, d in enumerate(dn.start_index_map)}
    batching = dict(zip(dn.operand_batching_dims, dn.start_indices_batching_dims))
    # every window is read clamped into range; a filled one is then masked
    flat, inside = _positions(x.shape, slice_sizes, starts, batching,
                              dict(zip(kept, dn.offset_dims)), rank, batch_at, batch_shape,
                              clip=True, check=mode is not GatherScatterMode.CLIP)
    shape = [0] * rank
    for p, n in zip(batch_at, batch_shape):
        shape[p] = n
    for p, d in zip(dn.offset_dims, kept):
        shape[p] = slice_sizes[d]
    flat = jnp.broadcast_to(flat, shape)
    out = jnp.reshape(x, (-1,))[flat] if x.size else jnp.zeros(shape, x.dtype)
    if inside is not None and mode is GatherScatterMode.PROMISE_IN_BOUNDS:
        return cut_outside(out, inside)
    if inside is not None:
        fill = _default_fill(x.dtype) if fill_value is None else fill_value
        out = jnp.where(jnp.broadcast_to(inside, shape), out, jnp.asarray(fill, x.dtype))
    return out


def _scatter(how, operand, scatter_indices, updates, dimension_numbers, mode,
             unique_indices=False):
    dn = dimension_numbers
    x, idx = jnp.asarray(operand), jnp.asarray(scatter_indices)
    upd = jnp.asarray(updates)
    mode = GatherScatterMode.from_any(mode)
    _check_index_dtype(idx)
    _check_scatter(tuple(x.shape), tuple(idx.shape), tuple(upd.shape), dn)
    if upd.dtype != x.dtype:                            # lax does not promote (JAX's)
        raise same_dtypes_error("scatter", [x.dtype, upd.dtype])
    if idx.ndim < 1 or idx.shape[-1] != len(dn.scatter_dims_to_operand_dims):
        raise TypeError("Scatter op has index vector of size "
                        f"{idx.shape[-1] if idx.ndim else 0} but scatter_dims_to_operand_dims "
                        f"has size {len(dn.scatter_dims_to_operand_dims)}")
    idx = idx.astype(np.int32)
    batch_shape = idx.shape[:-1]
    windowed = [d for d in range(x.ndim)
                if d not in dn.inserted_window_dims and d not in dn.operand_batching_dims]
    if len(windowed) != len(dn.update_window_dims):
        raise TypeError(f"Scatter op has window of size {len(dn.update_window_dims)}; doesn't "
                        f"match operand of rank {x.ndim}.")
    windows = [1] * x.ndim
    for d, u in zip(windowed, dn.update_window_dims):
        windows[d] = upd.shape[u]
    batch_at = [p for p in range(upd.ndim) if p not in dn.update_window_dims]
    if tuple(upd.shape[p] for p in batch_at) != tuple(batch_shape):
        raise TypeError(f"Scatter op updates shape {upd.shape} does not match the indices' "
                        f"batch shape {tuple(batch_shape)}")
    starts = {d: idx[..., k] for k, d in enumerate(dn.scatter_dims_to_operand_dims)}
    batching = dict(zip(dn.operand_batching_dims, dn.scatter_indices_batching_dims))
    clip = mode is GatherScatterMode.CLIP
    flat, inside = _positions(x.shape, windows, starts, batching,
                              dict(zip(windowed, dn.update_window_dims)), upd.ndim, batch_at,
                              batch_shape, clip=clip, check=not clip)
    flat = jnp.broadcast_to(flat, upd.shape)
    if inside is not None:        # a window not wholly in range is dropped
        flat = jnp.where(jnp.broadcast_to(inside, upd.shape), flat, x.size)
    ref = jnp.reshape(x, (-1,)).at[jnp.reshape(flat, (-1,))]
    values = jnp.reshape(upd, (-1,))
    if how == "mul":
        # unique indices (the caller's promise) multiply in place, which differentiates in
        # the updates too (JAX's rule needs that promise)
        result = ref.multiply(values, mode="drop", unique_indices=bool(unique_indices))
    else:
        result = {"set": ref.set, "add": ref.add, "min": ref.min,
                  "max": ref.max}[how](values, mode="drop")
    return jnp.reshape(result, x.shape)


def _variant(how: str, name: str, doc: str, negate: bool = False):
    """One of the scatter family: ``how`` combines an update with what it lands on."""
    def fn(operand, scatter_indices, updates, dimension_numbers, *, indices_are_sorted=False,
           unique_indices=False, mode=None):
        if negate:
            updates = -jnp.asarray(updates)
        return _scatter(how, operand, scatter_indices, updates, dimension_numbers, mode,
                        unique_indices)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return fn


scatter = _variant("set", "scatter", "``operand`` with each window of ``updates`` written "
                   "where its index vector says (JAX's ``lax.scatter``; where windows overlap, "
                   "one of them is kept).")
scatter_add = _variant("add", "scatter_add", "``operand`` with ``updates`` added at the "
                       "windows (JAX's ``lax.scatter_add``).")
scatter_sub = _variant("add", "scatter_sub", "``operand`` with ``updates`` subtracted at the "
                       "windows (JAX's ``lax.scatter_sub``).", negate=True)
scatter_mul = _variant("mul", "scatter_mul", "``operand`` multiplied by ``updates`` at the "
                       "windows (JAX's ``lax.scatter_mul``).")
scatter_min = _variant("min", "scatter_min", "The least of ``operand`` and ``updates`` at the "
                       "windows (JAX's ``lax.scatter_min``).")
scatter_max = _variant("max", "scatter_max", "The greatest of ``operand`` and ``updates`` at "
                       "the windows (JAX's ``lax.scatter_max``).")


def scatter_apply(operand, scatter_indices, func, dimension_numbers, *, update_shape=(),
                  indices_are_sorted=False, unique_indices=False, mode=None):
    """``operand`` with ``func`` applied to each element the windows (of ``update_shape``)
    cover, once per window that covers it (JAX's ``lax.scatter_apply``)."""
    x = jnp.asarray(operand)
    counts = _scatter("add", jnp.zeros(x.shape, np.int32), scatter_indices,
                      jnp.ones(update_shape, np.int32), dimension_numbers, mode)
    windows = int(np.prod(jnp.asarray(scatter_indices).shape[:-1]))
    return apply_per_count(x, counts, func, windows)
