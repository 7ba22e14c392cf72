"""``shardc.ops`` (JAX's ``jax.ops``): the rows of an array reduced into segments named by an
integer id per row, ``segment_sum``, ``segment_prod``, ``segment_max`` and ``segment_min``.

Each is an indexed update of an array that holds the reduction's identity: ``segment_sum`` is
``full((num_segments, ...), 0).at[segment_ids].add(data)``, so jit, grad, vmap and shardings
are those of ``.at[]``. As JAX's, ids out of ``[0, num_segments)`` (negative ones included:
they count from no end) drop their rows, and a segment no row names holds the identity.

    data         [a, b, c, d, e]
    segment_ids  [0, 0, 2, 1, 2]
    segment_sum  [a + b, d, c + e]
"""
from __future__ import annotations

import math
import operator

import numpy as np

from compiler.tracing import CONCRETIZATION_ERRORS, ConcretizationTypeError
from ir import dtypes as _dt
import shardc.numpy as jnp
from shardc.lax._gather import GatherScatterMode
from shardc.numpy._core import check_out_sharding

__all__ = ["segment_sum", "segment_prod", "segment_max", "segment_min"]

# the name of each GatherScatterMode in ``.at[]``'s words
_AT_MODES = {GatherScatterMode.CLIP: "clip", GatherScatterMode.FILL_OR_DROP: "drop",
             GatherScatterMode.PROMISE_IN_BOUNDS: "promise_in_bounds"}


def _identity(how: str, dtype):
    """The value an empty segment holds: JAX's scatter identities (the lowest value for a
    maximum, the highest for a minimum)."""
    if how in ("add", "mul"):
        return 0 if how == "add" else 1
    low = how == "max"
    if _dt.is_bool(dtype):
        return not low
    if _dt.is_int(dtype):
        info = _dt.iinfo(dtype)
        return info.min if low else info.max
    return -np.inf if low else np.inf


def _segment_count(num_segments, segment_ids) -> int:
    """``num_segments`` as a Python int (by default the largest id plus one), which it must be
    known as while tracing: it is the result's length."""
    if num_segments is None:
        num_segments = jnp.max(segment_ids) + 1
    try:
        num_segments = operator.index(num_segments)
    except CONCRETIZATION_ERRORS as error:
        # JAX names segment_sum whichever segment reduction it is
        raise ConcretizationTypeError(
            f"{error}\nsegment_sum() `num_segments` argument.") from None
    if num_segments < 0:
        raise ValueError("num_segments must be non-negative.")
    return num_segments


def _in_range_ids(segment_ids, num_segments: int, mode):
    """The ids as ``.at[]`` reads them: a negative id counts from no end, as JAX's segment
    reductions read it (``.at[]`` would count it from the last segment), so it becomes an id
    past the last one (dropped) or, with 'clip', the first segment."""
    dtype = segment_ids.dtype
    if not _dt.is_int(dtype) or _dt.is_unsigned(dtype):
        return segment_ids
    if dtype.itemsize < 4:
        segment_ids = jnp.astype(segment_ids, np.int32)     # room for num_segments
    past_end = 0 if mode is GatherScatterMode.CLIP else num_segments
    return jnp.where(segment_ids < 0, past_end, segment_ids)


def _segment_update(name, how, reducer, data, segment_ids, num_segments, indices_are_sorted,
                    unique_indices, bucket_size, mode, out_sharding):
    data, segment_ids = jnp.asarray(data), jnp.asarray(segment_ids)
    at_mode = GatherScatterMode.from_any(mode)
    if at_mode not in _AT_MODES:
        raise NotImplementedError(f"{name}: mode={mode!r} is not supported")
    if out_sharding is not None:
        check_out_sharding(out_sharding, name)
        spec = getattr(out_sharding, "spec", out_sharding)
        if how != "add" and (spec.unreduced or spec.reduced):
            # a max, min or product of partial sums is none (JAX's scatter rules refuse it)
            raise NotImplementedError(f"unreduced/reduced rule for scatter-{how} is not "
                                      "implemented. Please file an issue at "
                                      "https://github.com/jax-ml/jax/issues")
    num_segments = _segment_count(num_segments, segment_ids)
    ids = _in_range_ids(segment_ids, num_segments, at_mode)
    hints = dict(indices_are_sorted=indices_are_sorted, unique_indices=unique_indices,
                 mode=_AT_MODES[at_mode])
    fill = _identity(how, data.dtype)
    if bucket_size is None:
        out = jnp.full((num_segments,) + data.shape[1:], fill, data.dtype)
        if how == "mul" and unique_indices:
            # one row at most per segment: a product with the identity 1 is the row itself,
            # set as JAX's scatter_mul differentiates it under unique_indices
            return out.at[ids].set(data, **hints, out_sharding=out_sharding)
        return getattr(out.at[ids], how)(data, **hints, out_sharding=out_sharding)
    # One row of segments per bucket of consecutive rows, reduced over the buckets after:
    # fewer terms in each sum (JAX's numerical-stability option).
    if out_sharding is not None:
        raise NotImplementedError(f"{name}: out_sharding with bucket_size is not supported")
    num_buckets = math.ceil(segment_ids.size / bucket_size)
    out = jnp.full((num_buckets, num_segments) + data.shape[1:], fill, data.dtype)
    bucket = jnp.arange(segment_ids.shape[0]) // bucket_size
    out = getattr(out.at[bucket, ids[None, :]], how)(data, **hints)
    return jnp.astype(reducer(out, axis=0), data.dtype)


def segment_sum(data, segment_ids, num_segments=None, indices_are_sorted=False,
                unique_indices=False, bucket_size=None, mode=None, out_sharding=None):
    """The sum of the rows of ``data`` (along its first axis) in each segment: row ``k`` goes
    to segment ``segment_ids[k]``. Ids out of ``[0, num_segments)`` drop their rows (``mode``
    'clip' clamps them instead); an empty segment sums to 0.

    Args:
      data: the rows to add.
      segment_ids: an integer id per row of ``data``, in any order, repeated or not.
      num_segments: the result's length; by default the largest id plus one, which is only
        known outside jit (under jit it must be given).
      indices_are_sorted, unique_indices: promises about ``segment_ids`` (hints, as JAX's).
      bucket_size: sum the rows in buckets of this many first, then the buckets.
      mode: a ``lax.GatherScatterMode`` (or its name) for out-of-range ids.
      out_sharding: the result's layout (a NamedSharding, or a PartitionSpec on the mesh).

    Returns:
      an array of shape ``(num_segments,) + data.shape[1:]`` and ``data``'s dtype.

    >>> ops.segment_sum(jnp.arange(5), jnp.array([0, 0, 1, 1, 2]), 3)     # [1, 5, 4]
    """
    return _segment_update("segment_sum", "add", jnp.sum, data, segment_ids, num_segments,
                           indices_are_sorted, unique_indices, bucket_size, mode, out_sharding)


def segment_prod(data, segment_ids, num_segments=None, indices_are_sorted=False,
                 unique_indices=False, bucket_size=None, mode=None, out_sharding=None):
    """The product of the rows of ``data`` in each segment (1 for an empty one); arguments
    as ``segment_sum``'s. Its gradient with respect to ``data`` needs
    ``unique_indices=True``, as JAX's.

    >>> ops.segment_prod(jnp.arange(5), jnp.array([0, 0, 1, 1, 2]), 3)    # [0, 6, 4]
    """
    return _segment_update("segment_prod", "mul", jnp.prod, data, segment_ids, num_segments,
                           indices_are_sorted, unique_indices, bucket_size, mode, out_sharding)


def segment_max(data, segment_ids, num_segments=None, indices_are_sorted=False,
                unique_indices=False, bucket_size=None, mode=None, out_sharding=None):
    """The maximum of the rows of ``data`` in each segment (-inf, or the dtype's lowest
    value, for an empty one); arguments as ``segment_sum``'s.

    >>> ops.segment_max(jnp.arange(5), jnp.array([0, 0, 1, 1, 2]), 3)     # [1, 3, 4]
    """
    return _segment_update("segment_max", "max", jnp.max, data, segment_ids, num_segments,
                           indices_are_sorted, unique_indices, bucket_size, mode, out_sharding)


def segment_min(data, segment_ids, num_segments=None, indices_are_sorted=False,
                unique_indices=False, bucket_size=None, mode=None, out_sharding=None):
    """The minimum of the rows of ``data`` in each segment (inf, or the dtype's highest
    value, for an empty one); arguments as ``segment_sum``'s.

    >>> ops.segment_min(jnp.arange(5), jnp.array([0, 0, 1, 1, 2]), 3)     # [0, 2, 4]
    """
    return _segment_update("segment_min", "min", jnp.min, data, segment_ids, num_segments,
                           indices_are_sorted, unique_indices, bucket_size, mode, out_sharding)
