"""Indexing (``x[...]``) and indexed updates (``x.at[...].set/add``) in terms of primitives.

Static integers and slices lower to ``slice``/``rev``/``squeeze``; traced integers to
``dynamic_slice``; one integer-array index to ``gather`` (``scatter`` for updates); several
integer arrays, traced or not, to one ``gather`` along their dimensions merged. Other updates
(several integer arrays, boolean masks, strided slices) scatter into the flat positions numpy's
own indexing selects, computed by numpy when the index is concrete and in the program when it
is traced.
"""
from __future__ import annotations

import collections.abc
import functools
import math

import numpy as np

from compiler.control_flow import while_loop
from compiler.tree import tree_leaves
from compiler.tracing import (NonConcreteBooleanIndexError, Tracer, aval_of, bind,
                              static_index_check_on,
                              errors_link, is_python_scalar, value_if_known)
from ir import dtypes as _dt
from ir.core import Aval, TypeSharding
from ir.sharding_rules import gather_error, partitions, scatter_error
from ir.shapes import check_scatter_combines
from ir import primitives as p
from shardc.dtypes import result_type
from ir.sharding import NamedSharding, PartitionSpec
from shardc.sharding import (auto_axes, explicit_axes_for, reshard,
                             with_sharding_constraint)
from shardc.numpy._arithmetic import (add, clip, divide, equal, greater_equal, less, logical_and,
                                      maximum, minimum, multiply, negative, power, remainder,
                                      where)
from shardc.numpy._core import (asarray, astype, broadcast_to, canonical_axis, convert, expand_dims,
                                is_key_array, key_array_rule,
                                nested_values, ones_like, ravel, reshape, weakly_typed_like,
                                zeros_like)

__all__ = ["take", "Slice", "ds"]


class Slice:
    """``jax.ds(start, size, stride)``: ``size`` elements from ``start`` on (every
    ``stride``-th), where ``start`` may be traced. Read and updated as a dynamic slice: a start
    that would run past the end is moved back so the window fits (JAX's)."""
    __slots__ = ("start", "size", "stride")

    def __init__(self, start, size, stride: int = 1):
        if stride < 0:
            raise ValueError("`stride` must be >= 0.")
        self.start, self.size, self.stride = start, size, stride

    def __repr__(self):
        return f"Slice(start={self.start!r}, size={self.size!r}, stride={self.stride!r})"

    def __eq__(self, other):
        return isinstance(other, Slice) and (self.start, self.size, self.stride) == (
            other.start, other.size, other.stride)

    __hash__ = None


def ds(start, size=None, stride=None):
    """``jax.ds``: as the builtin ``slice`` reads, ``ds(None)`` is ``:``, ``ds(j)`` is ``:j``,
    ``ds(i, n)`` is ``i:i+n`` and ``ds(i, n, s)`` is ``i:i+n:s`` (``n`` elements), with ``i``
    allowed to be traced.

    >>> x[ds(i, 2)]          # x[i:i+2] for a traced i
    """
    if start is None:
        return slice(None)
    if stride is None:
        stride = 1
    if not isinstance(stride, int):
        raise ValueError("Non-static stride in `dslice`")
    if size is None:
        start, size = 0, start
    return Slice(start, size, stride)


def _ellipsis_gap(index, ndim):
    """numpy's reading of an Ellipsis that stands for no dimension between two integer
    entries (arrays, or integers with arrays): it still separates them, so the broadcast
    dimensions go in front. Returns the index without it, where the adjacent entries'
    dimensions land (how many dimensions precede them), and how many there are; None where
    that is not the case."""
    if not isinstance(index, tuple):
        return None
    k = next((j for j, e in enumerate(index) if e is Ellipsis), None)
    if k is None:
        return None
    real = sum(_consumed(e) for e in index if e is not None and e is not Ellipsis)
    is_advanced = lambda e: (_is_int_array(e) or isinstance(e, (int, np.integer))
                             or _is_dynamic_scalar(e)) and not isinstance(e, (bool, np.bool_))
    if real != ndim or not any(_is_int_array(e) for e in index):
        return None
    before = [j for j in range(k) if is_advanced(index[j])]
    after = [j for j in range(k + 1, len(index)) if is_advanced(index[j])]
    if not before or not after:
        return None
    advanced = before + after
    if any(not is_advanced(index[j]) for j in range(advanced[0], advanced[-1] + 1) if j != k):
        return None                        # separated anyway: nothing to change
    rest = index[:k] + index[k + 1:]
    lead = sum(1 for e in index[:advanced[0]] if e is None or isinstance(e, slice))
    width = len(np.broadcast_shapes(*[np.shape(e) if not isinstance(e, Tracer)
                                      else aval_of(e).shape
                                      for e in index if is_advanced(e)]))
    return rest, lead, width


def _front(x, lead: int, width: int):
    """``x`` with its dimensions ``lead .. lead + width`` moved to the front."""
    moved = list(range(lead, lead + width))
    perm = moved + [d for d in range(aval_of(x).ndim) if d not in moved]
    return x if perm == sorted(perm) else bind(p.transpose_p, x, permutation=tuple(perm))


def _from_front(x, lead: int, width: int):
    """The inverse of ``_front``: the first ``width`` dimensions moved to ``lead``."""
    ndim = aval_of(x).ndim
    rest = list(range(width, ndim))
    perm = rest[:lead] + list(range(width)) + rest[lead:]
    return x if perm == sorted(perm) else bind(p.transpose_p, x, permutation=tuple(perm))


def _has_ds(index) -> bool:
    return any(isinstance(e, Slice) for e in (index if isinstance(index, tuple) else (index,)))


def _ds_window(x, index):
    """``x`` cut to the window the ``ds`` entries of ``index`` ask for (one dynamic_slice),
    the window's starts (per dimension), and the index with those entries taken whole
    (every ``stride``-th element)."""
    from shardc.lax._ops import dynamic_slice
    entries = index if isinstance(index, tuple) else (index,)
    shape = aval_of(x).shape
    used = sum(_consumed(e) for e in entries if e is not Ellipsis and e is not None)
    starts, sizes, rest, dim = [0] * len(shape), list(shape), [], 0
    for entry in entries:
        if entry is None:
            rest.append(entry)
        elif entry is Ellipsis:
            rest.append(entry)
            dim += len(shape) - used
        elif isinstance(entry, Slice):
            size = int(entry.size)
            starts[dim] = entry.start
            sizes[dim] = (size - 1) * entry.stride + 1 if size else 0
            rest.append(slice(None, None, entry.stride) if entry.stride != 1 else slice(None))
            dim += 1
        else:
            rest.append(entry)
            dim += _consumed(entry)
    return dynamic_slice(x, starts, sizes), starts, tuple(rest)


def apply_per_count(x, counts, func, most: int):
    """``x`` with the elementwise ``func`` applied ``counts`` times at each entry (at most
    ``most``): unrolled where that is a few applications (so it stays differentiable), else
    in a loop until the largest count."""
    if most <= 4:
        for k in range(most):
            x = where(counts > k, func(x), x)
        return x
    most_at_one = bind(p.reduce_max_p, counts, axes=tuple(range(np.ndim(counts))))
    _, x = while_loop(lambda state: state[0] < most_at_one,
                      lambda state: (state[0] + 1,
                                     where(counts > state[0], func(state[1]), state[1])),
                      (np.int32(0), x))
    return x


def _list_dtype(entry) -> np.dtype:
    """The dtype of a (nested) list index entry, which may hold traced scalars."""
    leaves = list(nested_values(entry))
    return result_type(*leaves) if leaves else _dt.int_


def _is_int_array(x) -> bool:
    """An integer array (or list) index entry; boolean masks are not."""
    if isinstance(x, (list, tuple)):
        return not _dt.is_bool(_list_dtype(x))
    if isinstance(x, (Tracer, np.ndarray)) or hasattr(x, "aval"):
        aval = aval_of(x)
        return aval.shape != () and _dt.is_int(aval.dtype)
    return False


def _is_dynamic_scalar(x) -> bool:
    if isinstance(x, (bool, np.bool_)):
        return False
    if isinstance(x, (Tracer,)) or hasattr(x, "aval"):
        aval = aval_of(x)
        return aval.shape == () and _dt.is_int(aval.dtype)
    return False


def _check_entry(entry, position: int = 0):
    """JAX's errors for an index entry that is not an integer, a slice with static bounds,
    None, ... or an integer or boolean array."""
    if entry is None or entry is Ellipsis:
        return
    if isinstance(entry, slice):
        if any(isinstance(value_if_known(b), Tracer)
               for b in (entry.start, entry.stop, entry.step)):
            raise IndexError(f"Slice entries must be static integers. Got {entry} at position "
                             f"{position}")
        return
    if isinstance(entry, (bool, int, np.bool_, np.integer)):
        return
    if isinstance(entry, (list, tuple, np.ndarray, Tracer)) or hasattr(entry, "aval"):
        dtype = _list_dtype(entry) if isinstance(entry, (list, tuple)) else aval_of(entry).dtype
        if _dt.is_int(dtype) or _dt.is_bool(dtype):
            return
        raise TypeError(f"Indexer must have integer or boolean type, got indexer with type "
                        f"{dtype}")
    if isinstance(entry, str):
        raise TypeError(f"JAX does not support string indexing; got idx={entry!r}")
    if isinstance(entry, (float, complex, np.generic)):
        raise TypeError("Indexer must have integer or boolean type, got indexer with type "
                        f"{np.dtype(type(entry))}")
    raise IndexError("only integers, slices (`:`), ellipsis (`...`), newaxis (`None`) and "
                     f"integer or boolean arrays are valid indices. Got {entry}")


def _expand_index(index, ndim, keep_scalar_bools=False):
    """Normalise to a tuple with the Ellipsis expanded; None entries kept.

    A scalar ``True`` adds an axis like None (numpy's rule; ``_scalar_bools_as_arrays`` has
    already rewritten those that take part in advanced indexing); ``False`` is left for the
    flat path.
    """
    if not isinstance(index, tuple):
        index = (index,)
    # a sequence holding traced integers is the integer array it spells (JAX's reading)
    index = tuple(asarray(i) if isinstance(i, (list, tuple))
                  and any(isinstance(leaf, Tracer) for leaf in tree_leaves(i)) else i
                  for i in index)
    for position, entry in enumerate(index):
        _check_entry(entry, position)
    if sum(1 for i in index if i is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if not keep_scalar_bools:
        index = tuple(None if (isinstance(i, (bool, np.bool_)) and i) else i for i in index)
    n_real = sum(_consumed(i) for i in index if i is not None and i is not Ellipsis)
    if any(i is Ellipsis for i in index):
        k = next(k for k, i in enumerate(index) if i is Ellipsis)
        index = index[:k] + (slice(None),) * (ndim - n_real) + index[k + 1:]
    else:
        index = index + (slice(None),) * (ndim - n_real)
    if n_real > ndim:
        raise IndexError(f"Too many indices: array is {ndim}-dimensional, but {n_real} were "
                         "indexed")
    return index


def _check_static_indices(index, shape) -> None:
    """JAX's ``jax_check_static_indices``: a static integer out of its dimension's bounds is
    an IndexError rather than clamped."""
    for k, dim in _integer_entries(index, shape):
        entry = index[k]
        if isinstance(entry, (int, np.integer)) and not isinstance(entry, (bool, np.bool_)):
            i, size = int(entry), shape[dim]
            if not 0 <= (i + size if i < 0 else i) < size:
                raise IndexError(f"index {i} out of bounds for axis {dim} with size {size} "
                                 "(normalize_indices=True)")


def _out_of_range_as_dynamic(index, shape) -> tuple:
    """``index`` with each static integer out of its dimension's range read as a traced one
    (a ``dynamic_slice``, which clamps), as JAX reads it: the value is the clamped position's
    either way, and the program says that the index was out of range (checkify finds it)."""
    static = [(k, dim) for k, dim in _integer_entries(index, shape)
              if isinstance(index[k], (int, np.integer))
              and not isinstance(index[k], (bool, np.bool_))]
    if not any(shape[dim] and not -shape[dim] <= int(index[k]) < shape[dim]
               for k, dim in static):
        return index
    # (every static integer then: the whole array is read from, as JAX's gather reads it)
    entries = list(index)
    for k, _ in static:
        value = int(index[k])
        entries[k] = asarray(np.int32(value) if -2**31 <= value < 2**31 else np.int64(value))
    return tuple(entries)


def _no_list_index(index) -> None:
    """JAX's TypeError for a list (any non-tuple sequence) given as the whole index: numpy
    reads some as a tuple and some as an array, JAX neither."""
    if isinstance(index, tuple) or not isinstance(index, collections.abc.Sequence) or \
            isinstance(index, (str, np.ndarray)) or hasattr(index, "aval"):
        return
    basic = any((isinstance(e, np.ndarray) or hasattr(e, "aval")) and np.ndim(e) != 0
                or isinstance(e, (collections.abc.Sequence, slice)) or e is Ellipsis or e is None
                for e in index)
    raise TypeError("Using a non-tuple sequence for multidimensional indexing is not allowed; "
                    f"use `arr[{'tuple' if basic else 'array'}(seq)]` instead of `arr[seq]`. "
                    "See https://github.com/jax-ml/jax/issues/4564 for more information.")


def _is_scalar_bool(entry) -> bool:
    """A Python or numpy boolean, or a concrete 0-d boolean array."""
    if isinstance(entry, (bool, np.bool_)):
        return True
    if isinstance(entry, Tracer) or not (isinstance(entry, np.ndarray) or hasattr(entry, "aval")):
        return False
    aval = aval_of(entry)
    return aval.shape == () and _dt.is_bool(aval.dtype)


def _scalar_bools_as_arrays(x, index):
    """(``x``, ``index``) rewritten so that scalar booleans index as numpy's: each is an
    advanced index over a new axis of length 1 (``[0]`` when True, ``[]`` when False), so it
    broadcasts with the other integer and array entries and counts in their adjacency rule
    (``x[0, :2, True]`` is ``(1, 2, ...)``). Also returns the new axes, which an update
    squeezes again. A lone ``True`` among slices stays a new axis (the same thing)."""
    raw = index if isinstance(index, tuple) else (index,)
    if not any(_is_scalar_bool(e) for e in raw):
        return x, index, ()
    full = _expand_index(raw, aval_of(x).ndim, keep_scalar_bools=True)
    flags = [_is_scalar_bool(e) for e in full]
    others = [e for e, flag in zip(full, flags)
              if not flag and e is not None and not isinstance(e, slice)]
    if not others and sum(flags) == 1 and bool(np.asarray(full[flags.index(True)])):
        return x, index, ()
    axes, dim = [], 0
    for entry, flag in zip(full, flags):
        if flag:
            axes.append(dim)
            dim += 1
        elif entry is not None:
            dim += _consumed(entry)
    rewritten = tuple(np.zeros(int(bool(np.asarray(e))), np.int32) if flag else e
                      for e, flag in zip(full, flags))
    return expand_dims(x, tuple(axes)), rewritten, tuple(axes)


def _consumed(entry) -> int:
    """How many dimensions of the array an index entry consumes (a mask: its rank)."""
    if isinstance(entry, (bool, np.bool_)):
        return 0
    if _is_bool_array(entry):
        return _index_ndim(entry)
    return 1


def _is_bool_array(entry) -> bool:
    if isinstance(entry, (list, tuple)):
        return _dt.is_bool(_list_dtype(entry)) and len(entry) > 0
    if isinstance(entry, (np.ndarray, Tracer)) or hasattr(entry, "aval"):
        aval = aval_of(entry)
        return aval.shape != () and _dt.is_bool(aval.dtype)
    return False


def _is_concrete(index) -> bool:
    return not any(isinstance(i, Tracer) for i in index)


def _needs_flat_path(index) -> bool:
    """Indices the slice/gather path does not cover: several integer arrays, masks, False."""
    arrays = [i for i in index if _is_int_array(i)]
    masks = [i for i in index if _is_bool_array(i) or (isinstance(i, (bool, np.bool_)))]
    return len(arrays) > 1 or bool(masks)


def _flat_positions(shape, index, drop=False) -> np.ndarray:
    """The flat positions numpy's indexing of an array of ``shape`` by ``index`` selects.

    Out-of-range entries of integer arrays are clamped, as JAX's gather does; with ``drop``
    (updates, as JAX's scatter) they select a negative position the scatter skips.
    """
    size_all = math.prod(shape)
    grid = np.arange(size_all, dtype=np.int64).reshape(shape)
    concrete, dim, padded = [], 0, []
    for entry in index:
        if entry is None or isinstance(entry, (slice, bool, np.bool_)):
            concrete.append(entry)
            dim += isinstance(entry, slice)
            continue
        if _is_bool_array(entry):
            concrete.append(np.asarray(entry))
            dim += np.ndim(entry)
            continue
        if _is_int_array(entry):
            size = shape[dim]
            values = np.asarray(entry, dtype=np.int64)
            if drop:
                # out-of-range entries point at a padding slot holding a skipped position
                values = np.where(values < 0, values + size, values)
                values = np.where((values < 0) | (values >= size), size, values)
                padded.append(dim)
            else:
                values = np.clip(values, -size, size - 1)
            concrete.append(values)
        else:
            concrete.append(int(entry))
        dim += 1
    if padded:
        grid = np.pad(grid, [(0, int(d in padded)) for d in range(len(shape))],
                      constant_values=-(size_all + 1))
    return grid[tuple(concrete)].astype(_dt.int_)


def _mask_as_integers(index, shape):
    """A lone one-dimensional concrete mask as the integer array of its true positions (JAX's
    ``expand_bool_indices``), so that it takes the one-array gather path, which keeps the
    other dimensions' splits, rather than the flat path."""
    masks = [k for k, e in enumerate(index) if _is_bool_array(e)]
    if (len(masks) != 1 or any(_is_int_array(e) for e in index)
            or isinstance(index[masks[0]], Tracer) or np.ndim(index[masks[0]]) != 1):
        return index
    k = masks[0]
    mask = np.asarray(index[k])
    dim = sum(_consumed(e) for e in index[:k] if e is not None)
    if mask.shape[0] not in (0, shape[dim]):      # an empty mask selects nothing (JAX's)
        raise IndexError(f"boolean index did not match shape of indexed array in index {dim}: "
                         f"got {mask.shape}, expected {[shape[dim]]}")
    positions = np.nonzero(mask)[0].astype(_dt.int_)
    return index[:k] + (positions,) + index[k + 1:]


def _check_masks_concrete(index) -> None:
    """JAX's error for a boolean mask that is traced: its count decides the shape."""
    traced_masks = [e for e in index if isinstance(e, Tracer) and _is_bool_array(e)]
    if traced_masks:
        raise NonConcreteBooleanIndexError(
            f"Array boolean indices must be concrete; got {aval_of(traced_masks[0]).str_long()}"
            f"\n{errors_link(NonConcreteBooleanIndexError)}")


def _flat_getitem(x, index):
    index = tuple(value_if_known(e) for e in index)
    _check_masks_concrete(index)
    if not _is_concrete(index):
        raise NotImplementedError("indexing with several integer arrays or a boolean mask "
                                  "needs concrete (not traced) indices; a traced boolean mask "
                                  "has a data-dependent shape (use jnp.where)")
    positions = _flat_positions(aval_of(x).shape, index)
    return bind(p.gather_p, ravel(x), positions, axis=0)


def cut_outside(values, inside):
    """``values`` read at clamped positions, those read out of bounds (``inside`` false;
    it broadcasts to ``values``) cut from differentiation: JAX's gather promises in-range
    indices, and its transpose, a scatter, drops the others' cotangents. (JAX's tangent of
    such a read is the clamped one; here it is zero.)"""
    known = value_if_known(inside)
    if not isinstance(known, Tracer) and np.all(known) or is_key_array(values):
        return values                      # (keys have no derivative to cut)
    return where(inside, values, bind(p.stop_gradient_p, values))


def _index_ndim(entry) -> int:
    if isinstance(entry, (list, tuple)):
        return 1 + (_index_ndim(entry[0]) if len(entry) else 0)
    return aval_of(entry).ndim


def _advanced_entries(index) -> tuple:
    """(positions of the integer entries of an expanded index, arrays and integers alike,
    whether they are adjacent): numpy puts their broadcast dimensions where the first of them
    is when they are adjacent, else in front."""
    advanced = [k for k, e in enumerate(index) if e is not None and not isinstance(e, slice)]
    return advanced, bool(advanced) and advanced[-1] - advanced[0] + 1 == len(advanced)


def _move_array_dims_first(result, index):
    """numpy puts the dimensions of an integer-array index first when the integer indices
    (arrays and scalars) are not adjacent in the index."""
    advanced, adjacent = _advanced_entries(index)
    if not advanced or adjacent:
        return result
    k = next(k for k, i in enumerate(index) if _is_int_array(i))
    start = sum(1 for i in index[:k] if i is None or isinstance(i, slice))
    ndim, width = aval_of(result).ndim, _index_ndim(index[k])
    moved = list(range(start, start + width))
    perm = moved + [d for d in range(ndim) if d not in moved]
    return bind(p.transpose_p, result, permutation=tuple(perm))


def _full_slice(entry, size: int) -> bool:
    """Whether a slice reads a whole dimension, in order or reversed."""
    lo, hi, step = entry.indices(size)
    return abs(step) == 1 and len(range(lo, hi, step)) == size


def _entry_aval(entry) -> Aval:
    """An integer-array index entry's type (a list's, from its nesting: it may hold traced
    scalars, which are not read)."""
    if isinstance(entry, (list, tuple)):
        shape, inner = [], entry
        while isinstance(inner, (list, tuple)):
            shape.append(len(inner))
            inner = inner[0] if inner else None
        return Aval(tuple(shape), np.dtype(np.int32))
    return aval_of(entry)


def _reads(aval, index, whole_only: bool):
    """How JAX's gather or scatter reads ``index`` of an array of type ``aval``: the dims it
    reads partially, and the shape of its index array (batch dims, then one column per dim
    read). ``whole_only``: every integer and partial slice is read by the gather (eagerly, and
    by every scatter); else only integer arrays are."""
    partial, batch, dim = [], [], 0
    for entry in index:
        if entry is None:
            continue
        if _is_int_array(entry):
            partial.append(dim)
            batch.append(_entry_aval(entry).shape)
        elif whole_only and isinstance(entry, slice):
            if not _full_slice(entry, aval.shape[dim]):
                partial.append(dim)
                if abs(entry.indices(aval.shape[dim])[2]) != 1:
                    batch.append((len(range(*entry.indices(aval.shape[dim]))),))
        elif whole_only and not _is_dynamic_scalar(entry):
            partial.append(dim)
        dim += _consumed(entry)
    shape = tuple(np.broadcast_shapes(*batch)) if batch else ()
    return partial, shape + (len(partial),)


def _index_aval(index, shape) -> Aval:
    """The index array's type, split as the integer-array index is."""
    indices = Aval(shape, np.dtype(np.int32))
    typed = [_entry_aval(e) for e in index if _is_int_array(e)
             and _entry_aval(e).type_sharding is not None]
    if typed and typed[0].ndim == len(shape) - 1:
        spec = typed[0].type_sharding.spec + ((),)
        indices = indices.with_sharding(TypeSharding.of(typed[0].type_sharding.mesh, spec))
    return indices


def _split_read(aval, index, partial, gather: bool = True) -> bool:
    """Whether a dimension read in part is split, or an integer-array index is. A gather
    reads a dimension of size 1 whole by any index into it (JAX's accepts it split); a
    scatter's integer-indexed dimensions must be unsplit whatever their size."""
    split = aval.type_sharding.spec if aval.type_sharding is not None else ((),) * aval.ndim
    return any(split[d] and (aval.shape[d] != 1 or not gather) for d in partial) or any(
        _entry_aval(e).type_sharding is not None for e in index if _is_int_array(e))


def _check_gather_layout(x, index, sliced: bool = False) -> None:
    """JAX's ShardingTypeError where its indexing is a gather the operand's split forbids.

    A gather reads dimensions whole or not split: integer arrays index through one, and so
    does, on an array already laid out over several devices (an eager operand), every integer
    or partial slice (JAX's indexing takes its slice paths only for traced operands and
    arrays on one device, so ``x[0]`` of a split dimension names the gather eagerly and the
    slice under jit).
    """
    aval = aval_of(x)
    if aval.type_sharding is None and not any(_is_int_array(e) for e in index):
        return
    partial, shape = _reads(aval, index, whole_only=not sliced and _on_several_devices(x))
    if _split_read(aval, index, partial):
        raise gather_error(aval, _index_aval(index, shape))


def _on_several_devices(x) -> bool:
    """Whether ``x`` is an array laid out over more than one device (JAX's ``is_sharded``):
    what sends its eager indexing to a gather."""
    if isinstance(x, Tracer):
        return False
    sharding = getattr(x, "sharding", None)
    return sharding is None or getattr(sharding, "num_devices", 2) > 1


def _check_scatter_layout(x, index, value) -> None:
    """JAX's ShardingTypeError where ``x.at[index]`` updates dimensions ``x``'s type splits
    (JAX's updates are one scatter, whose rule needs them whole or unsplit)."""
    aval = aval_of(x)
    if aval.type_sharding is None:
        return
    partial, shape = _reads(aval, index, whole_only=True)
    if _split_read(aval, index, partial, gather=False):
        raise scatter_error(aval, _index_aval(index, shape), _updates_aval(aval, index))


def _check_update_layout(x, index, value) -> None:
    """JAX's ValueError where the update's type splits a dimension that the updated part of
    ``x`` (``x[index]``, as its type is split) does not split so: JAX broadcasts the update
    to that type first."""
    given = aval_of(value)
    if given.type_sharding is None:
        return
    target = _updates_aval(aval_of(x), index, sliced_split=True)
    if given.ndim > target.ndim:
        return                     # (broadcasting's own error follows)
    wanted = (target.type_sharding.spec if target.type_sharding is not None
              else ((),) * target.ndim)[target.ndim - given.ndim:]
    if all(have in ((), want) for have, want in zip(given.type_sharding.spec, wanted)):
        return
    raise ValueError(f"Incompatible types for broadcasting: input type={given.str_long()} and "
                     f"requested type={target.str_long()}")


def _updates_aval(aval, index, sliced_split=False) -> Aval:
    """The type JAX broadcasts an update to: that of ``x[index]``, split where a dimension is
    kept whole (``sliced_split``: where any slice keeps it, as JAX's slice type says before
    its scatter rule refuses a part of a split dimension)."""
    dims, spec, dim, batch_at = [], [], 0, None
    for entry in index:
        if entry is None:
            dims.append(1), spec.append(())
            continue
        if _is_int_array(entry):
            if batch_at is None:
                batch_at = len(dims)
        elif isinstance(entry, slice):
            dims.append(len(range(*entry.indices(aval.shape[dim]))))
            whole = aval.type_sharding is not None and (
                sliced_split or _full_slice(entry, aval.shape[dim]))
            spec.append(aval.type_sharding.spec[dim] if whole else ())
        dim += _consumed(entry)
    if batch_at is not None:
        batch = np.broadcast_shapes(*[_entry_aval(e).shape for e in index
                                      if _is_int_array(e)])
        dims[batch_at:batch_at] = batch
        spec[batch_at:batch_at] = [()] * len(batch)
    typed = TypeSharding.of(aval.type_sharding.mesh, tuple(spec)) if any(spec) else None
    return Aval(tuple(dims), aval.dtype, type_sharding=typed)


def getitem(x, index, sliced: bool = False):
    """``x[index]`` for ints, slices, None, Ellipsis, traced ints, integer arrays and boolean
    masks (concrete).

    In turn: a static window (``rev`` for negative steps, one ``slice``), traced integers
    (``dynamic_slice``), one integer array (``gather``), then integer-indexed dimensions
    squeezed and new axes inserted. Several integer arrays: ``_advanced_getitem``.
    ``sliced``: laid out as JAX's slice paths lay out a traced operand's, even where ``x`` is
    an array over several devices (the data of a key array, which JAX indexes so).
    """
    _no_list_index(index)
    if _has_ds(index):
        window, _, rest = _ds_window(x, index)
        return getitem(window, rest, sliced)
    gap = _ellipsis_gap(index, aval_of(x).ndim)
    if gap is not None:
        rest, lead, width = gap
        return _front(getitem(x, rest, sliced), lead, width)
    x, index, _ = _scalar_bools_as_arrays(x, index)
    shape = aval_of(x).shape
    index = _mask_as_integers(_expand_index(index, len(shape)), shape)
    if static_index_check_on():
        _check_static_indices(index, shape)
    index = _out_of_range_as_dynamic(index, shape)
    _check_gather_layout(x, index, sliced)
    laid_out = (lambda result: result) if sliced else functools.partial(_eager_gather_layout,
                                                                        x, index)
    if _needs_flat_path(index):
        if sum(1 for e in index if _is_int_array(e)) > 1 and \
                not any(isinstance(e, (bool, np.bool_)) for e in index):
            return laid_out(_advanced_getitem(x, index))
        return _flat_getitem(x, index)
    real = [entry for entry in index if entry is not None]
    windows = [_window(entry, shape[d], d) for d, entry in enumerate(real)]
    result = _static_window(x, shape, windows)
    result = _dynamic_window(result, [(d, e) for d, e in enumerate(real)
                                      if _is_dynamic_scalar(e)])
    arrays = [k for k, entry in enumerate(index) if _is_int_array(entry)]
    gather_dim = None
    if arrays:
        gather_dim = sum(1 for entry in index[:arrays[0]] if entry is not None)
        result = _gather(result, index[arrays[0]], gather_dim)
    squeeze_dims = [d for d, entry in enumerate(real)
                    if not isinstance(entry, slice) and not _is_int_array(entry)]
    result = _squeeze(result, squeeze_dims, gather_dim, len(shape))
    if any(entry is None for entry in index):
        result = _insert_new_axes(result, index)
    result = _move_array_dims_first(result, index) if arrays else result
    return laid_out(result)


def _advanced_getitem(x, index):
    """``x[index]`` with several integer arrays (traced or not), as numpy reads it: the
    arrays broadcast to one shape B, which replaces the dimensions they index, in place when
    the integer entries are adjacent, else first.

    The indexed dimensions are brought together (a transpose where they are apart) and merged
    (a reshape); each array, negative entries counted from the end and then clamped into its
    dimension as JAX's gather clamps each coordinate, contributes its share of one position
    along the merged dimension, which one gather reads."""
    shape = aval_of(x).shape
    real = [entry for entry in index if entry is not None]
    windows = [_window(entry, shape[d], d) for d, entry in enumerate(real)]
    y = _static_window(x, shape, windows)
    y = _dynamic_window(y, [(d, e) for d, e in enumerate(real) if _is_dynamic_scalar(e)])
    scalars = [d for d, e in enumerate(real) if not isinstance(e, slice) and not _is_int_array(e)]
    if scalars:
        y = bind(p.squeeze_p, y, dimensions=tuple(scalars))
    kept = [e for e in real if isinstance(e, slice) or _is_int_array(e)]
    dims = [d for d, e in enumerate(kept) if _is_int_array(e)]
    sizes = [aval_of(y).shape[d] for d in dims]
    arrays = [asarray(kept[d]) for d in dims]
    batch = tuple(np.broadcast_shapes(*[aval_of(a).shape for a in arrays]))
    position = inside = None
    for a, size in zip(arrays, sizes):
        wrapped = _wrap_index(broadcast_to(a, batch), size)
        coordinate = clip(wrapped, 0, max(size - 1, 0))
        within = equal(wrapped, coordinate)
        inside = within if inside is None else logical_and(inside, within)
        position = coordinate if position is None else add(multiply(position, np.int32(size)),
                                                           coordinate)
    first, ndim = dims[0], aval_of(y).ndim
    order = list(range(first)) + dims + [d for d in range(first, ndim) if d not in dims]
    if order != list(range(ndim)):
        y = bind(p.transpose_p, y, permutation=tuple(order))
    merged = list(aval_of(y).shape)
    merged[first:first + len(dims)] = [math.prod(sizes)]
    y = reshape(y, tuple(merged))
    y = bind(p.gather_p, y, position, axis=first)
    lay = (1,) * first + batch + (1,) * (aval_of(y).ndim - first - len(batch))
    y = cut_outside(y, reshape(inside, lay))
    advanced, adjacent = _advanced_entries(index)
    if not adjacent and first:
        rest = list(range(aval_of(y).ndim))
        front = rest[first:first + len(batch)]
        y = bind(p.transpose_p, y, permutation=tuple(front + [d for d in rest if d not in front]))
    if any(e is None for e in index):
        left = list(aval_of(y).shape)
        out = [] if adjacent else [left.pop(0) for _ in batch]
        for k, e in enumerate(index):
            if e is None:
                out.append(1)
            elif isinstance(e, slice):
                out.append(left.pop(0))
            elif adjacent and k == advanced[0]:
                out.extend([left.pop(0) for _ in batch])
        y = reshape(y, tuple(out))
    return y


def _eager_gather_layout(x, index, result):
    """JAX indexes an array laid out over several devices eagerly by a gather whenever an
    entry reads a dimension partially (an integer, a partial or strided slice): the gather
    keeps the split of the dimensions read whole and leaves the rest unsplit. (Traced
    operands, and concrete ones read inside a trace, take JAX's slice paths, which keep every
    split.) On Explicit axes the type has
    already refused a split read (``_check_gather_layout``)."""
    sharding = getattr(x, "sharding", None)
    if (isinstance(x, Tracer) or isinstance(result, Tracer)
            or not isinstance(sharding, NamedSharding)
            or sharding.mesh.size == 1 or any(_is_int_array(e) for e in index)):
        return result
    shape, spec, dim = aval_of(x).shape, [], 0
    names = tuple(sharding.spec) + (None,) * (len(shape) - len(sharding.spec))
    if all(isinstance(e, slice) and _full_slice(e, shape[d]) for d, e in
           enumerate(e for e in index if e is not None)):
        return result
    for entry in index:
        if entry is None:
            spec.append(None)
            continue
        if isinstance(entry, slice):
            spec.append(names[dim] if _full_slice(entry, shape[dim]) else None)
        dim += _consumed(entry)
    while spec and spec[-1] is None:
        spec.pop()
    now = getattr(result.sharding, "spec", None)     # (a one-device result has none)
    if now is not None and tuple(spec) == tuple(now):
        return result
    # laid out anew as device_put lays it out: a mixed mesh's Explicit axes named too
    return bind(p.sharding_constraint_p, result,
                sharding=NamedSharding(sharding.mesh, PartitionSpec(*spec)))


def _window(entry, size: int, dim: int) -> tuple:
    """(start, limit, stride, reversed) of the static window one index entry selects."""
    if isinstance(entry, slice):
        lo, hi, st = entry.indices(size)
        if st > 0:
            return lo, max(lo, hi), st, False
        # a negative step: reverse the dimension, then slice forwards
        count = len(range(lo, hi, st))
        new_lo = size - 1 - lo
        return new_lo, (new_lo + (count - 1) * (-st) + 1 if count else new_lo), -st, True
    if _is_dynamic_scalar(entry) or _is_int_array(entry):
        return 0, size, 1, False
    k = int(entry)
    if size == 0:
        raise IndexError(f"index {k} is out of bounds for axis {dim} with size {size}")
    # a negative index counts from the end once; then out-of-range ones clamp, as JAX's
    k = min(max(k + size if k < 0 else k, 0), size - 1)
    return k, k + 1, 1, False


def _static_window(x, shape, windows):
    starts, limits, strides, flips = (tuple(w[k] for w in windows) for k in range(4))
    flip_dims = tuple(d for d, flipped in enumerate(flips) if flipped)
    if flip_dims:
        x = bind(p.rev_p, x, dimensions=flip_dims)
    if starts != (0,) * len(shape) or limits != tuple(shape) or any(s != 1 for s in strides):
        x = bind(p.slice_p, x, start_indices=starts, limit_indices=limits,
                 strides=None if all(s == 1 for s in strides) else strides)
    return x


def _dynamic_window(x, dynamic):
    """Traced integer indices: a one-wide dynamic_slice in each such dimension."""
    if not dynamic:
        return x
    shape = aval_of(x).shape
    begin = [np.int32(0)] * len(shape)
    sizes = list(shape)
    for d, entry in dynamic:
        if shape[d] == 0:
            raise IndexError(f"index is out of bounds for axis {d} with size 0")
        begin[d] = _wrap_index(entry, shape[d])
        sizes[d] = 1
    return bind(p.dynamic_slice_p, x, *begin, slice_sizes=tuple(sizes))


def _gather(x, entry, axis: int):
    indices = asarray(entry)
    if _dt.is_bool(aval_of(indices).dtype):
        raise NotImplementedError("boolean mask indexing has a data-dependent shape")
    return bind(p.gather_p, x, index_as_int32(indices, aval_of(x).shape[axis]), axis=axis)


def _squeeze(x, dims, gather_dim, original_ndim):
    """Drop integer-indexed dimensions (shifted past a gathered index array's extra rank)."""
    if not dims:
        return x
    extra = aval_of(x).ndim - original_ndim if gather_dim is not None else 0
    dims = tuple(d + extra if gather_dim is not None and d > gather_dim else d for d in dims)
    return bind(p.squeeze_p, x, dimensions=dims)


def _insert_new_axes(x, index):
    out_shape = list(aval_of(x).shape)
    pos = 0
    for entry in index:
        if entry is None:
            out_shape.insert(pos, 1)
            pos += 1
        elif isinstance(entry, slice) or _is_int_array(entry):
            pos += 1 if not _is_int_array(entry) else _index_ndim(entry)
    return reshape(x, tuple(out_shape))


def _wrap_index(entry, size):
    """A traced index, negative values counted from the end, as int32."""
    entry = index_as_int32(entry, size)
    return where(less(entry, 0), add(entry, size), entry)


def index_as_int32(entry, size):
    """An integer index as int32; uint32 values past ``size`` become ``size`` (still out of
    bounds) rather than wrapping to negative positions."""
    dtype = aval_of(entry).dtype
    if dtype.kind == "u" and dtype.itemsize >= 4:
        entry = minimum(entry, np.asarray(size, dtype))
    return astype(entry, _dt.int_)


# --- out-of-bounds modes (x.at[i].get(mode=...), jnp.take, x.at[i].set(mode=...)) ------------

_GATHER_MODES = (None, "clip", "fill", "drop", "promise_in_bounds")


def _check_mode(mode):
    if mode not in _GATHER_MODES:
        raise ValueError(f'Unknown gather mode "{mode}"')


def _integer_entries(index, shape):
    """(entry position, array dimension) of each integer entry (static, traced or array) of an
    expanded index: the entries that can point out of bounds."""
    dim, found = 0, []
    for k, entry in enumerate(index):
        if entry is None:
            continue
        if isinstance(entry, slice) or isinstance(entry, (bool, np.bool_)) \
                or _is_bool_array(entry):
            dim += _consumed(entry)
            continue
        found.append((k, dim))
        dim += 1
    return found


def _remap_integers(index, shape, remap):
    """``index`` with each integer entry ``i`` of dimension size ``n`` replaced by
    ``remap(i, n)``; concrete entries stay concrete (numpy), traced ones are computed."""
    entries = list(index)
    for k, dim in _integer_entries(index, shape):
        entries[k] = remap(entries[k], shape[dim])
    return tuple(entries)


def _as_index_values(entry):
    """An integer entry as numpy int64 values, or None when it is traced."""
    if isinstance(entry, Tracer):
        return None
    return np.asarray(entry, dtype=np.int64)


def _clipped(entry, size):
    """Negative indices counted from the end, then clamped into [0, size)."""
    values = _as_index_values(entry)
    if values is None:
        return clip(_wrap_index(entry, size), 0, size - 1)
    values = np.clip(np.where(values < 0, values + size, values), 0, size - 1)
    return int(values) if values.ndim == 0 else values.astype(_dt.int_)


def _unwrapped(clamps: bool):
    """The remap of ``wrap_negative_indices=False``: a negative index is not counted from the
    end but out of bounds below, so a mode that clamps reads index 0 and the others (fill,
    drop) see it out of range (``size``)."""
    def remap(entry, size):
        low = 0 if clamps else size
        values = _as_index_values(entry)
        if values is None:
            return where(less(entry, 0), low, entry)
        values = np.where(values < 0, low, values)
        return int(values) if values.ndim == 0 else values.astype(_dt.int_)
    return remap


def _to_padding(entry, size):
    """Negative indices counted from the end; those still out of [0, size) point at ``size``,
    the padding slot that holds the fill value."""
    values = _as_index_values(entry)
    if values is None:
        wrapped = _wrap_index(entry, size)
        inside = logical_and(greater_equal(wrapped, 0), less(wrapped, size))
        return where(inside, wrapped, size)
    values = np.where(values < 0, values + size, values)
    values = np.where((values >= 0) & (values < size), values, size)
    return int(values) if values.ndim == 0 else values.astype(_dt.int_)


def _fill_value(dtype, fill_value):
    """JAX's default fill for reads out of bounds: NaN, the most negative integer (the
    largest unsigned one), True; a given fill converts to ``dtype``."""
    if fill_value is not None:
        return astype(asarray(fill_value), dtype)
    if _dt.is_inexact(dtype):
        return np.asarray(np.nan, dtype)
    if _dt.is_bool(dtype):
        return np.asarray(True)
    info = np.iinfo(dtype)
    return np.asarray(info.min if info.min < 0 else info.max, dtype)


def getitem_with_mode(x, index, mode=None, fill_value=None):
    """``x[index]`` where out-of-bounds integer indices clamp (``mode`` None, 'clip',
    'promise_in_bounds') or read ``fill_value`` ('fill', 'drop'). Only 'clip' sends their
    cotangent to the element read; the others (JAX's gather promising in-range indices)
    drop it.

    >>> jnp.arange(4.).at[jnp.array([1, 9])].get(mode='fill')    # [1., nan]
    """
    _check_mode(mode)
    x, index, _ = _scalar_bools_as_arrays(x, index)
    _check_gather_layout(x, _expand_index(index, aval_of(x).ndim))
    if mode not in ("fill", "drop"):
        # (a fill_value is read only by mode='fill', as JAX's)
        shape = aval_of(x).shape
        if mode == "promise_in_bounds" and static_index_check_on():
            _check_static_indices(_expand_index(index, len(shape)), shape)
        if mode != "clip":      # as the default: read clamped, no cotangent out of bounds
            return getitem(x, index)
        return getitem(x, _remap_integers(_expand_index(index, len(shape)), shape, _clipped))
    aval = aval_of(x)
    full = _expand_index(index, len(aval.shape))
    filled = {dim for _, dim in _integer_entries(full, aval.shape)}
    if not filled:
        return getitem(x, full)
    # One padding slot past the end of each integer-indexed dimension holds the fill value;
    # out-of-bounds indices are sent there.
    config = tuple((0, int(d in filled), 0) for d in range(len(aval.shape)))
    padded = bind(p.pad_p, x, _fill_value(aval.dtype, fill_value), padding_config=config)
    return getitem(_unsplit(padded, filled), _remap_integers(full, aval.shape, _to_padding))


def _unsplit(x, dims):
    """``x`` with ``dims`` unsplit: a dimension padded with the fill slot that its type
    splits (one of size 1, which the layout check accepts split, over mesh axes of size 1:
    no data moves)."""
    aval = aval_of(x)
    if aval.type_sharding is None or not any(aval.type_sharding.spec[d] for d in dims):
        return x
    spec = [() if d in dims else names for d, names in enumerate(aval.type_sharding.spec)]
    return reshard(x, NamedSharding(aval.type_sharding.mesh, PartitionSpec(*partitions(spec))))


def _take(x, indices, axis=None, mode=None, fill_value=None):
    """``jnp.take``: elements of ``x`` at ``indices`` along ``axis`` (the flattened array if
    None). ``mode`` None or 'fill' reads ``fill_value`` (NaN, the most negative integer, True)
    out of bounds, 'clip' clamps into [0, n) (negative indices to 0, as numpy), 'wrap' takes
    indices modulo n.

    >>> jnp.take(jnp.arange(4.), jnp.array([1, -1, 9]))              # [1., 3., nan]
    """
    if mode == "raise":
        raise NotImplementedError("The 'raise' mode to jnp.take is not supported.")
    if mode not in (None, "fill", "clip", "wrap"):
        raise ValueError(f"Invalid mode '{mode}' for np.take")
    if axis is None:
        x, axis = ravel(x), 0
    axis = canonical_axis(axis, len(aval_of(x).shape))
    indices = asarray(indices)
    if not _dt.is_int(aval_of(indices).dtype):
        raise TypeError(f"take: indices must be of integer type, got {aval_of(indices).dtype}")
    size = aval_of(x).shape[axis]
    if size == 0 and aval_of(indices).size:
        raise IndexError("Cannot do a non-empty jnp.take() from an empty axis.")
    if mode == "clip":
        indices = clip(index_as_int32(indices, size), 0, size - 1)
    elif mode == "wrap":
        indices = remainder(astype(indices, _dt.int_), size)
    index = (slice(None),) * axis + (indices,)
    if mode in ("clip", "wrap"):
        return getitem(x, index)
    return getitem_with_mode(x, index, "fill", fill_value)


def take(a, indices, axis=None, out=None, mode=None, unique_indices=False,
         indices_are_sorted=False, fill_value=None):
    """Elements of ``a`` at ``indices`` along ``axis`` (of the flattened array if None);
    out-of-bounds indices read ``fill_value`` by default (NaN, the most negative integer,
    True), as JAX's ``mode='fill'``; ``mode='clip'`` or ``'wrap'`` as numpy.

    >>> take(arange(4.), array([1, -1, 9]))                          # [1., 3., nan]
    """
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.take is not supported.")
    if (rule := key_array_rule("take", a)) is not None:
        return rule(a, indices, axis, mode, fill_value)
    return _take(asarray(a), indices, axis, mode, fill_value)


class AtIndexer:
    """``x.at[index]``: functional updates returning a new array."""

    def __init__(self, x):
        self.x = x

    def __getitem__(self, index):
        _no_list_index(index)
        if _has_ds(index):
            return _WindowRef(self.x, index)
        gap = _ellipsis_gap(index, aval_of(self.x).ndim)
        if gap is not None:
            return _GapRef(self.x, *gap)
        return _IndexedRef(self.x, index)


class _GapRef:
    """``x.at[index]`` where an Ellipsis of no dimension separates the integer entries: the
    index without it, its values (given with the broadcast dimensions in front, as numpy
    lays ``x[index]`` out) moved to where that index has them."""

    def __init__(self, x, rest, lead, width):
        self.x, self.rest, self.lead, self.width = x, rest, lead, width

    def get(self, **kwargs):
        return _front(self.x.at[self.rest].get(**kwargs), self.lead, self.width)

    def __getattr__(self, name):
        update = getattr(self.x.at[self.rest], name)

        def updated(value, *args, **kwargs):
            value = asarray(value)
            target = _result_shape(aval_of(self.x).shape, self.rest)
            front = target[self.lead:self.lead + self.width] + target[:self.lead] + \
                target[self.lead + self.width:]
            moved = _from_front(broadcast_to(value, front), self.lead, self.width)
            return update(moved, *args, **kwargs)
        return updated


def _result_shape(shape, index) -> tuple:
    """The shape of ``x[index]`` for an ``x`` of ``shape`` (numpy's reading, on a stand-in
    that holds no data; traced entries by their shapes)."""
    stand_in = np.broadcast_to(np.zeros((), np.bool_), shape)
    entries = tuple(np.zeros(aval_of(e).shape, np.int32) if isinstance(e, Tracer)
                    else e for e in index)
    return stand_in[entries].shape


class _WindowRef:
    """``x.at[index]`` where ``index`` holds ``ds`` entries: the window they ask for updated
    as ``window.at[rest]`` is, then written back where it was read. A window that does not
    fit inside ``x`` (a negative start, or one too far on) updates nothing, as a scatter
    drops an update out of bounds (JAX's: reading counts a negative start from the end,
    updating does not); ``mode='clip'`` moves it inside instead."""

    def __init__(self, x, index):
        self.x = x
        self.window, self.starts, self.rest = _ds_window(x, index)

    def get(self, **kwargs):
        return self.window.at[self.rest].get(**kwargs)

    def __getattr__(self, name):
        from shardc.lax._ops import dynamic_update_slice
        update = getattr(self.window.at[self.rest], name)

        def updated(*args, **kwargs):
            written = dynamic_update_slice(self.x, update(*args, **kwargs), self.starts)
            if kwargs.get("mode") in ("clip", "promise_in_bounds"):
                return written
            fits = self._fits()
            if fits is True:
                return written
            return self.x if fits is False else where(fits, written, self.x)
        return updated

    def _fits(self):
        """Whether the window lies inside ``x``: a bool, or a traced one."""
        shape, window = aval_of(self.x).shape, aval_of(self.window).shape
        fits = True
        for start, size, dim in zip(self.starts, window, shape):
            known = value_if_known(start)
            if not isinstance(known, Tracer):
                start = int(known)
                if not 0 <= start <= dim - size:
                    return False
                continue
            inside = logical_and(greater_equal(start, 0), less(start, dim - size + 1))
            fits = inside if fits is True else logical_and(fits, inside)
        return fits


def _check_safe_cast(value, dtype) -> bool:
    """JAX's check of an update's values against the array's dtype: where the values' dtype
    does not promote to it (the array's taken as typed), a FutureWarning (in strict mode the
    promotion itself is the TypePromotionError). Whether the values promote ``dtype`` to
    another."""
    from shardc.lax import dtype as value_dtype
    try:
        given = value_dtype(value)
    except TypeError:
        return False           # not a numeric value: the update itself says what is wrong
    if given == dtype or not _dt.is_valid(dtype) or \
            result_type(value, np.zeros((), dtype)) == dtype:
        return False
    import warnings
    warnings.warn("scatter inputs have incompatible types: cannot safely cast value from "
                  f"dtype={given} to dtype={dtype} with jax_numpy_dtype_promotion="
                  f"{'strict' if _dt.strict_promotion() else 'standard'}. In future JAX "
                  "releases this will result in an error.", FutureWarning, stacklevel=4)
    return True


class _IndexedRef:
    def __init__(self, x, index):
        # scalar booleans index new axes of x, which an update's result loses again
        self.x, self.index, self._bool_axes = _scalar_bools_as_arrays(x, index)
        self._operand = x

    def _restore(self, result):
        """An update's result with the new axes scalar booleans indexed squeezed out."""
        return bind(p.squeeze_p, result, dimensions=self._bool_axes) if self._bool_axes \
            else result

    # indices_are_sorted and unique_indices are hints for XLA; they change no value here.

    def get(self, *, indices_are_sorted=False, unique_indices=False, mode=None,
            fill_value=None, out_sharding=None, wrap_negative_indices=True):
        """``x[index]``; ``out_sharding``: the result's split (as JAX's: the gather runs with
        the operands unsplit, its result then laid out as asked)."""
        index = self._unwrapped(wrap_negative_indices, mode not in ("fill", "drop"))
        if out_sharding is not None:
            return auto_axes(lambda x, index: getitem_with_mode(x, index, mode, fill_value),
                             axes=explicit_axes_for(out_sharding),
                             out_sharding=out_sharding)(self.x, index)
        return getitem_with_mode(self.x, index, mode, fill_value)

    def _apply(self, value, mode, how, out_sharding, wrap=True):
        dtype = aval_of(self.x).dtype
        promotes = _check_safe_cast(value, dtype)
        if not promotes:
            check_scatter_combines(how, dtype)    # (a scalar index updates in place, too)
        index = self._index(mode, wrap)
        update = lambda x, index, value: _update(x, index, value, how)
        if how != "set" and promotes:
            # JAX's scatter promotes the array and the values together, applies the update,
            # and casts back: an int array times 2.5 rounds the product, not the 2.5
            def update(x, index, value):
                wide = result_type(x, value)
                return astype(_update(astype(x, wide), index, value, how), dtype)
        if out_sharding is not None:
            result = auto_axes(update, axes=explicit_axes_for(out_sharding),
                               out_sharding=out_sharding)(self.x, index, value)
        else:
            result = update(self.x, index, value)
        # a scatter's weak type: the operand's, as JAX's
        return weakly_typed_like(self._restore(result), self._operand)

    def set(self, value, *, indices_are_sorted=False, unique_indices=False, mode=None,
            out_sharding=None, wrap_negative_indices=True):
        return self._apply(value, mode, "set", out_sharding, wrap_negative_indices)

    def add(self, value, *, indices_are_sorted=False, unique_indices=False, mode=None,
            out_sharding=None, wrap_negative_indices=True):
        return self._apply(value, mode, "add", out_sharding, wrap_negative_indices)

    def multiply(self, value, *, indices_are_sorted=False, unique_indices=False, mode=None,
                 out_sharding=None, wrap_negative_indices=True):
        if unique_indices and out_sharding is None:
            # each entry named once (the caller's promise, as JAX's): a product set in place,
            # which differentiates in the values too. The read clamps (no fill value: what
            # the set drops reads a finite value, so its values' cotangent is 0, not nan)
            ref = _IndexedRef(self.x, self._unwrapped(wrap_negative_indices, mode == "clip"))
            read = ref.get(mode="clip" if mode == "clip" else None)
            return self._restore(ref.set(multiply(read, value), mode=mode))
        return self._apply(value, mode, "mul", out_sharding, wrap_negative_indices)

    def subtract(self, value, *, indices_are_sorted=False, unique_indices=False, mode=None,
                 out_sharding=None, wrap_negative_indices=True):
        """``x`` less the values at the index (each time it names an entry)."""
        return self._apply(negative(asarray(value)), mode, "add", out_sharding,
                           wrap_negative_indices)

    mul = multiply

    def divide(self, value, *, indices_are_sorted=False, unique_indices=False, mode=None,
               out_sharding=None, wrap_negative_indices=True):
        """``x / d`` where ``d`` is 1 but at the index, the product of the values there;
        ``out_sharding``: how ``d`` (and so the result) is laid out, as JAX's."""
        return self._restore(divide(self.x, self._factors(value, mode, out_sharding,
                                                          wrap_negative_indices)))

    def power(self, value, *, indices_are_sorted=False, unique_indices=False, mode=None,
              out_sharding=None, wrap_negative_indices=True):
        """``x ** e`` where ``e`` is 1 but at the index, the product of the values there;
        ``out_sharding``: how ``e`` (and so the result) is laid out, as JAX's."""
        return self._restore(power(self.x, self._factors(value, mode, out_sharding,
                                                         wrap_negative_indices)))

    def _factors(self, value, mode, out_sharding, wrap):
        """Ones shaped as ``x``, times the values at the index (each time it names an entry):
        a scatter-multiply, laid out by ``out_sharding`` as ``_apply``'s are."""
        ones, index = ones_like(self.x), self._index(mode, wrap)
        if out_sharding is None:
            return _update(ones, index, value, "mul")
        return auto_axes(lambda o, index, value: _update(o, index, value, "mul"),
                         axes=explicit_axes_for(out_sharding),
                         out_sharding=out_sharding)(ones, index, value)

    def min(self, value, *, indices_are_sorted=False, unique_indices=False, mode=None,
            out_sharding=None, wrap_negative_indices=True):
        return self._apply(value, mode, "min", out_sharding, wrap_negative_indices)

    def max(self, value, *, indices_are_sorted=False, unique_indices=False, mode=None,
            out_sharding=None, wrap_negative_indices=True):
        return self._apply(value, mode, "max", out_sharding, wrap_negative_indices)

    def apply(self, func, *, indices_are_sorted=False, unique_indices=False, mode=None,
              wrap_negative_indices=True):
        """``x`` with ``func`` (elementwise, as a ufunc) applied at the index, once for each
        time the index names an entry (JAX's ``.at[].apply``)."""
        x = asarray(self.x)
        counts = _update(zeros_like(x, dtype=np.int32), self._index(mode, wrap_negative_indices),
                         np.int32(1), "add")
        named = aval_of(self.get(mode="clip" if mode == "clip" else "fill", fill_value=0,
                                 wrap_negative_indices=wrap_negative_indices)).size
        return self._restore(apply_per_count(x, counts, func, named))

    def _unwrapped(self, wrap: bool, clamps: bool):
        """The index, its negative integers out of bounds when ``wrap`` is False (JAX's
        ``wrap_negative_indices``)."""
        if wrap:
            return self.index
        shape = aval_of(self.x).shape
        return _remap_integers(_expand_index(self.index, len(shape)), shape,
                               _unwrapped(clamps))

    def _index(self, mode, wrap: bool = True):
        """The index of an update: out-of-bounds entries are dropped (``mode`` None, 'drop',
        'fill', 'promise_in_bounds') or, with 'clip', clamped into range."""
        _check_mode(mode)
        index = self._unwrapped(wrap, mode == "clip")
        if mode != "clip":
            return index
        shape = aval_of(self.x).shape
        return _remap_integers(_expand_index(index, len(shape)), shape, _clipped)


_COMBINE = {"add": add, "mul": multiply, "min": minimum, "max": maximum}


def _update(x, index, value, mode):
    """Update ``x[index]`` with ``value``: a window update (dynamic_update_slice) for ints and
    unit-stride slices, a scatter for one integer-array index."""
    shape, dtype = aval_of(x).shape, aval_of(x).dtype
    full = _expand_index(index, len(shape))
    # A Python int that x's integer dtype holds is taken in that dtype (JAX's: 2**32 - 1 into
    # uint32); another Python number stays an inline literal; anything else is cast.
    if (type(value) is int and _dt.is_int(dtype)
            and np.iinfo(dtype).min <= value <= np.iinfo(dtype).max):
        value = np.asarray(value, dtype)
    elif is_python_scalar(value) and not (type(value) is int and _dt.is_int(dtype)):
        value = convert(value, dtype)
    else:
        value = astype(asarray(value), dtype)
    # a traced mask is JAX's error before any layout's (its count decides the shape)
    known = tuple(value_if_known(i) for i in full)
    _check_masks_concrete(known)
    _check_update_layout(x, full, value)
    _check_scatter_layout(x, full, value)
    arrays = [k for k, i in enumerate(full) if _is_int_array(i)]
    if _needs_flat_path(full) or not _fits_window_or_scatter(full, arrays):
        return _flat_update(x, known, value, mode)
    if arrays:
        return _scatter_update(x, full, arrays, value, mode)
    starts, window, inside = [], [], []
    for dim, entry in enumerate(full):
        size = shape[dim]
        if isinstance(entry, slice):
            lo, hi, st = entry.indices(size)
            starts.append(np.int32(lo))
            window.append(max(0, hi - lo))
        elif _is_dynamic_scalar(entry):
            starts.append(_wrap_index(entry, size))
            window.append(1)
            # dynamic_update_slice would clamp; JAX drops an out-of-bounds update
            inside.append(logical_and(greater_equal(starts[-1], 0),
                                          less(starts[-1], size)))
        else:
            k = int(entry)
            if not -size <= k < size:
                # JAX drops out-of-bounds updates.
                return x
            starts.append(np.int32(k % size))
            window.append(1)
    kept = tuple(w for entry, w in zip(full, window) if isinstance(entry, slice))
    value = reshape(_broadcast_update(x, value, kept, [isinstance(e, slice) for e in full]),
                    tuple(window))
    if mode != "set":
        current = bind(p.dynamic_slice_p, x, *starts, slice_sizes=tuple(window))
        value = _COMBINE[mode](current, value)
    updated = bind(p.dynamic_update_slice_p, x, value, *starts)
    if not inside:
        return updated
    keep = inside[0]
    for flag in inside[1:]:
        keep = logical_and(keep, flag)
    return where(keep, updated, x)


def _broadcast_update(x, value, shape, kept_dims):
    """``value`` broadcast to the update's ``shape`` (the dimensions of ``x`` where
    ``kept_dims`` is true) and, as JAX's, laid out as ``x``'s type splits those dimensions
    (the type rule has already refused an update of part of a split dimension)."""
    aval = aval_of(x)
    if aval.type_sharding is None:
        return broadcast_to(value, shape)
    spec = [names for names, kept in zip(aval.type_sharding.spec, kept_dims) if kept]
    sharding = NamedSharding(aval.type_sharding.mesh, PartitionSpec(*partitions(spec)))
    return broadcast_to(value, shape, out_sharding=sharding)


def _fits_window_or_scatter(full, arrays) -> bool:
    """Ints and unit-stride slices (a window), or one integer array with full slices."""
    if any(i is None for i in full):
        return False
    if arrays:
        return len(arrays) == 1 and all(isinstance(i, slice) and i == slice(None)
                                        for k, i in enumerate(full) if k not in arrays)
    return all(not isinstance(i, slice) or i.step in (None, 1) for i in full)


def _flat_update(x, full, value, mode):
    """A scatter into the flat positions numpy's indexing selects (concrete indices only;
    ``full``: the expanded index, its entries known now as values, its masks checked)."""
    shape = aval_of(x).shape
    if not _is_concrete(full):
        if any(isinstance(e, (bool, np.bool_)) for e in full):
            raise NotImplementedError("x.at[...] with a traced index and a boolean scalar")
        positions = _traced_positions(shape, full)
    else:
        try:
            positions = _flat_positions(shape, full, drop=True)
        except IndexError:
            return x                # JAX drops updates at out-of-bounds static indices
    updates = broadcast_to(value, aval_of(positions).shape)
    flat = bind(p.scatter_p, ravel(x), positions, updates, axis=0, mode=mode)
    return reshape(flat, shape)


def _traced_positions(shape, full):
    """The flat positions numpy's indexing of an array of ``shape`` by ``full`` (expanded; some
    entries traced) selects, computed in the program, laid out as ``x[full]`` is (integer
    entries broadcast to one shape B, in place of the first when they are adjacent, else in
    front). Positions an out-of-range integer names are past the end, where the scatter drops
    its update, as JAX's does."""
    advanced, adjacent = _advanced_entries(full)
    batch = tuple(np.broadcast_shapes(*[aval_of(asarray(full[k])).shape for k in advanced]))
    axes, dim, at, first = [], 0, {}, 0    # result axes; a sliced dim's axis; where B starts
    if advanced and not adjacent:
        axes.extend(batch)
    for k, entry in enumerate(full):
        if entry is None:
            axes.append(1)
            continue
        if isinstance(entry, slice):
            at[dim] = len(axes)
            axes.append(len(range(*entry.indices(shape[dim]))))
        elif adjacent and k == advanced[0]:
            first = len(axes)
            axes.extend(batch)
        dim += 1
    position, inside, dim = np.zeros((1,) * len(axes), np.int32), None, 0
    as_batch = (1,) * first + batch + (1,) * (len(axes) - first - len(batch))
    for entry in full:
        if entry is None:
            continue
        size, stride = shape[dim], math.prod(shape[dim + 1:])
        if isinstance(entry, slice):
            coordinate = np.arange(*entry.indices(size), dtype=np.int32).reshape(
                [-1 if a == at[dim] else 1 for a in range(len(axes))])
        else:
            coordinate = _wrap_index(broadcast_to(asarray(entry), batch), size)
            ok = logical_and(greater_equal(coordinate, 0), less(coordinate, size))
            inside = ok if inside is None else logical_and(inside, ok)
            coordinate = reshape(coordinate, as_batch)
        position = add(position, multiply(coordinate, np.int32(stride)))
        dim += 1
    position = broadcast_to(position, tuple(axes))
    if inside is not None:
        position = where(reshape(inside, as_batch), position, np.int32(math.prod(shape)))
    return position


def _scatter_update(x, full, arrays, value, mode):
    if len(arrays) > 1 or any(not (isinstance(i, slice) and i == slice(None))
                              for k, i in enumerate(full) if k not in arrays):
        raise NotImplementedError("x.at[...] with an integer array combined with other "
                                  "non-trivial indices")
    axis = arrays[0]
    indices = astype(asarray(full[axis]), _dt.int_)
    shape = aval_of(x).shape
    ishape = aval_of(indices).shape
    target = shape[:axis] + ishape + shape[axis + 1:]
    value = broadcast_to(value, target)
    return bind(p.scatter_p, x, indices, value, axis=axis, mode=mode)
