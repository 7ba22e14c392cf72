"""XLA's gather and scatter with dimension numbers (``lax.gather``, ``lax.scatter*``), as
JAX states them: the index vector is the last dimension of the indices, batching dimensions
pair operand and index dimensions, and ``mode`` says what an out-of-bounds window does.

Each is built from operations shardc already has: every element's position in the operand is
computed (a window's start, clamped or checked, plus its offset), and the flat operand is
read there (``take``) or updated there (``.at[]``), so gradients, vmap and sharding follow
from those operations'."""
from __future__ import annotations

import enum
from typing import NamedTuple, Sequence

import numpy as np

import shardc.numpy as jnp
from shardc.numpy._indexing import apply_per_count

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
                              clip=True, check=mode is GatherScatterMode.FILL_OR_DROP)
    shape = [0] * rank
    for p, n in zip(batch_at, batch_shape):
        shape[p] = n
    for p, d in zip(dn.offset_dims, kept):
        shape[p] = slice_sizes[d]
    flat = jnp.broadcast_to(flat, shape)
    out = jnp.reshape(x, (-1,))[flat] if x.size else jnp.zeros(shape, x.dtype)
    if inside is not None:
        fill = _default_fill(x.dtype) if fill_value is None else fill_value
        out = jnp.where(jnp.broadcast_to(inside, shape), out, jnp.asarray(fill, x.dtype))
    return out


def _scatter(how, operand, scatter_indices, updates, dimension_numbers, mode):
    dn = dimension_numbers
    x, idx = jnp.asarray(operand), jnp.asarray(scatter_indices)
    upd = jnp.asarray(updates).astype(x.dtype)
    mode = GatherScatterMode.from_any(mode)
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
    result = {"set": ref.set, "add": ref.add, "mul": ref.multiply, "min": ref.min,
              "max": ref.max}[how](values, mode="drop")
    return jnp.reshape(result, x.shape)


def _variant(how: str, name: str, doc: str, negate: bool = False):
    """One of the scatter family: ``how`` combines an update with what it lands on."""
    def fn(operand, scatter_indices, updates, dimension_numbers, *, indices_are_sorted=False,
           unique_indices=False, mode=None):
        if negate:
            updates = -jnp.asarray(updates)
        return _scatter(how, operand, scatter_indices, updates, dimension_numbers, mode)

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
