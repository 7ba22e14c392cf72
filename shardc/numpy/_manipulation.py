"""Array manipulation: transposes and axes, dimensions added and removed, joining and
splitting, tiling, padding and repeating, flips and rolls, elements added and removed, and the
shapes of arrays and their broadcasting.

Index arguments that decide a result's shape (``delete``'s and ``insert``'s positions) must be
concrete, as in JAX.
"""
from __future__ import annotations

import builtins
import warnings

import numpy as np

from compiler.tracing import (ConcretizationTypeError, Tracer, aval_of, bind, is_python_scalar,
                              known_nested, value_if_known)
from ir import dtypes as _dt
from ir import primitives as p
from ir.sharding import ShardingTypeError
from ir.sharding_rules import kept_if_divisible, named_sharding, partitions
from runtime.array import Array
from shardc.numpy._arithmetic import (add, clip, equal, greater_equal, less, less_equal,
                                      logical_and, logical_or, multiply, remainder, subtract,
                                      where)
from shardc.numpy._core import (as_array, asarray, astype, broadcast_shapes_of, broadcast_to,
                                canonical_axis, concatenate, concrete_value, convert, copied,
                                dtype_of, expand_dims, fresh, full, index_tuple, is_key_array,
                                key_array_rule, ndim_of, ravel, reshape, shape_of, shape_tuple,
                                STATIC_AXIS, weakly_typed_like, zeros)
from shardc.numpy._indexing import take
from shardc.numpy._reductions import max as reduce_max, mean as reduce_mean, min as reduce_min
from shardc.numpy._reductions import sum as reduce_sum
from shardc.sharding import auto_axes, explicit_axes_for

__all__ = [
    "transpose", "swapaxes", "moveaxis", "squeeze", "vstack", "hstack", "atleast_1d", "atleast_2d",
    "split", "array_split", "tile", "pad", "repeat", "flip", "roll", "concat", "atleast_3d",
    "column_stack", "dstack", "hsplit", "vsplit", "dsplit", "unstack", "block", "append", "copy",
    "resize", "delete", "insert", "fliplr", "flipud", "rot90", "rollaxis", "permute_dims",
    "matrix_transpose", "ndim", "shape", "size", "broadcast_shapes",
]


def transpose(x, axes=None):
    """Permute the dimensions of ``x`` (reverse them when ``axes`` is None)."""
    if is_key_array(x):         # a key array's data moves with it, its words' axis last
        return x.transpose(*(() if axes is None else (tuple(axes),)))
    x = as_array(x)
    ndim = len(shape_of(x))
    perm = tuple(reversed(range(ndim))) if axes is None else tuple(
        canonical_axis(a, ndim) for a in axes)
    if perm == tuple(range(ndim)):
        return x
    return bind(p.transpose_p, x, permutation=perm)


def swapaxes(x, axis1, axis2):
    """``x`` with dimensions ``axis1`` and ``axis2`` exchanged."""
    ndim = len(shape_of(x))
    perm = list(range(ndim))
    a, b = canonical_axis(axis1, ndim), canonical_axis(axis2, ndim)
    perm[a], perm[b] = perm[b], perm[a]
    return transpose(x, perm)


def moveaxis(x, source, destination):
    """``x`` with dimensions ``source`` (an axis or a sequence) moved to the positions
    ``destination``, the others kept in order."""
    ndim = len(shape_of(x))
    source = [canonical_axis(a, ndim) for a in index_tuple(source)]
    destination = [canonical_axis(a, ndim) for a in index_tuple(destination)]
    if len(source) != len(destination):
        raise ValueError("Inconsistent number of elements: "
                         f"{len(source)} vs {len(destination)}")
    perm = [d for d in range(ndim) if d not in source]
    for dest, src in sorted(zip(destination, source)):
        perm.insert(dest, src)
    moved = transpose(x, perm)
    return moved if is_key_array(moved) else fresh(moved)   # new, as JAX's jitted moveaxis


def squeeze(x, axis=None):
    """``x`` without its size-1 dimensions (all of them, or those in ``axis``)."""
    if is_key_array(x):
        return x.squeeze(axis)
    shape = shape_of(x)
    if axis is None:
        dims = tuple(k for k, d in enumerate(shape) if d == 1)
    else:
        dims = tuple(canonical_axis(a, len(shape)) for a in index_tuple(axis))
        if builtins.any(shape[d] != 1 for d in dims):
            raise ValueError("cannot select an axis to squeeze out which has size not equal to "
                             f"one, got shape={shape} and dimensions={dims}")
    if not dims:
        return fresh(as_array(x))             # a new array, as JAX's jitted squeeze
    return bind(p.squeeze_p, x, dimensions=dims)


def vstack(arrays, dtype=None):
    """Stack arrays as rows (at least 2-D), along axis 0 (converted to ``dtype`` if given)."""
    return concatenate([atleast_2d(a) for a in arrays], 0, dtype=dtype)


def hstack(arrays, dtype=None):
    """Stack arrays along their second axis (the first for 1-D arrays), converted to
    ``dtype`` if given."""
    arrays = [atleast_1d(a) for a in arrays]
    return concatenate(arrays, 0 if len(shape_of(arrays[0])) == 1 else 1, dtype=dtype)


def atleast_1d(*arys):
    """Each array with at least one dimension (a list of them for several)."""
    out = [reshape(x, (1,)) if shape_of(x) == () else x if is_key_array(x)
           else fresh(as_array(x)) for x in arys]
    return out[0] if len(out) == 1 else out


def atleast_2d(*arys):
    """Each array with at least two dimensions (a list of them for several)."""
    out = []
    for x in arys:
        x = atleast_1d(x)
        out.append(reshape(x, (1,) + shape_of(x)) if len(shape_of(x)) == 1 else x)
    return out[0] if len(out) == 1 else out


def split(x, indices_or_sections, axis=0):
    """Split into equal sections, or at the given indices."""
    shape = shape_of(x)
    axis = canonical_axis(axis, len(shape))
    n = shape[axis]
    if isinstance(indices_or_sections, (list, tuple)) or np.ndim(indices_or_sections) > 0:
        bounds = [0] + [int(_split_point(i)) for i in indices_or_sections] + [n]
    else:
        sections = int(_split_point(indices_or_sections))
        if n % sections:
            raise ValueError("array split does not result in an equal division")
        bounds = [k * (n // sections) for k in range(sections + 1)]
    cuts = [slice(lo, hi).indices(n)[:2] for lo, hi in zip(bounds[:-1], bounds[1:])]
    if not is_key_array(x) and aval_of(x).type_sharding is not None:
        for lo, hi in cuts:       # JAX's split keeps the split where each piece divides
            kept_if_divisible("split", aval_of(x),
                              shape[:axis] + (builtins.max(0, hi - lo),) + shape[axis + 1:])
    return [slice_axis(x, axis, lo, builtins.max(lo, hi)) for lo, hi in cuts]


def _split_point(value):
    """A split index or section count as the value it must be known as (JAX's error where it
    is traced)."""
    known = value_if_known(value)
    if isinstance(known, Tracer):
        raise ConcretizationTypeError(
            "Abstract tracer value encountered where concrete value is expected: in "
            "jax.numpy.split argument 1 (the indices or sections decide the pieces' shapes).")
    return np.asarray(known) if not isinstance(known, (int, float)) else known


def array_split(x, sections, axis=0):
    """Split into ``sections`` nearly equal parts along ``axis``, or at the indices given."""
    if not isinstance(sections, (int, np.integer)):
        return split(x, sections, axis)
    shape = shape_of(x)
    axis = canonical_axis(axis, len(shape))
    n = shape[axis]
    base, extra = builtins.divmod(n, int(sections))
    sizes = [base + (1 if k < extra else 0) for k in range(sections)]
    bounds = np.cumsum([0] + sizes).tolist()
    return [slice_axis(x, axis, lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]


def slice_axis(x, axis, lo, hi):
    """``x`` sliced to ``[lo, hi)`` along ``axis``."""
    shape = shape_of(x)
    start = [0] * len(shape)
    limit = list(shape)
    start[axis], limit[axis] = lo, hi
    if (rule := key_array_rule("slice", x)) is not None:
        return rule(x, tuple(start), tuple(limit), None)
    return bind(p.slice_p, x, start_indices=tuple(start), limit_indices=tuple(limit),
                strides=None)


def tile(x, reps):
    """``x`` repeated ``reps`` times along each dimension, as numpy's tile."""
    if (rule := key_array_rule("tile", x)) is not None:
        return rule(x, reps)
    x = as_array(x)
    reps = shape_tuple(reps)
    shape = shape_of(x)
    ndim = builtins.max(len(shape), len(reps))
    shape = (1,) * (ndim - len(shape)) + shape
    reps = (1,) * (ndim - len(reps)) + reps
    x = reshape(x, shape)
    split = aval_of(x).type_sharding
    if split is not None and any(r != 1 and split.spec[d] for d, r in enumerate(reps)):
        d = next(d for d, r in enumerate(reps) if r != 1 and split.spec[d])
        raise ShardingTypeError(
            f"Operand cannot be sharded on dimension {d} when the tiling is non-trivial. "
            f"Got input type: {aval_of(x).str_long()} with reps: {reps}")
    # (r0, s0, r1, s1, ...) then merge pairs
    expanded = []
    for r, s in zip(reps, shape):
        expanded += [r, s]
    x = bind(p.broadcast_in_dim_p, x, shape=tuple(expanded),
             broadcast_dimensions=tuple(2 * k + 1 for k in range(ndim)))
    tiled = tuple(r * s for r, s in zip(reps, shape))
    if split is not None and any(split.spec):
        # split as the operand (JAX's tile rule): each merged pair's only split part is its
        # operand's dimension, repeated once
        return reshape(x, tiled, out_sharding=named_sharding(aval_of(x)).with_spec(
            partitions(split.spec)))
    return reshape(x, tiled)


def pad(array, pad_width, mode="constant", **kwargs):
    """``array`` with ``(before, after)`` elements added along each axis; ``pad_width`` is
    numpy's (an int, one pair, or one pair per axis) and so are the modes:

    - ``'constant'`` (``constant_values``: one value, or one per side of each axis);
    - ``'edge'``, ``'reflect'``, ``'symmetric'``, ``'wrap'``: copies of the array's own
      elements (axes in turn, so corners are numpy's); ``reflect_type='odd'`` reflects
      about the edge element (``2 * edge - x``);
    - ``'linear_ramp'`` (``end_values``), ``'maximum'``, ``'minimum'``, ``'mean'`` and
      ``'median'`` (over the whole axis, or ``stat_length`` elements at each end),
      ``'empty'`` (zeros);
    - a function ``mode(vector, pad_width, axis, kwargs)``: as JAX's, it is given each 1-D
      slice along each axis in turn, zero-padded, and returns it filled.

    ``jnp.pad(jnp.ones(2), (1, 0))`` is ``[0., 1., 1.]``.
    """
    x = as_array(array)
    shape = shape_of(x)
    widths = np.broadcast_to(np.asarray(known_nested(pad_width), dtype=np.int64),
                             (len(shape), 2))
    if (widths < 0).any():
        raise ValueError(f"jnp.pad: pad_width must be non-negative, got {pad_width}")
    if callable(mode):
        return _pad_function(x, widths, mode, kwargs)
    allowed = {"constant": {"constant_values"}, "linear_ramp": {"end_values"},
               "reflect": {"reflect_type"}, "symmetric": {"reflect_type"}}
    if not isinstance(mode, str) or mode not in _PAD_MODES:
        raise NotImplementedError(f"Unimplemented padding mode '{mode}' for np.pad.")
    unknown = set(kwargs) - allowed.get(mode, {"stat_length"} if mode in _STATS else set())
    if unknown:
        raise ValueError(f"unsupported keyword arguments for mode '{mode}': {unknown}")
    if kwargs.get("reflect_type", "even") not in ("even", "odd"):
        raise ValueError(f"jnp.pad: reflect_type must be 'even' or 'odd', got "
                         f"{kwargs['reflect_type']!r}")
    if not shape:
        return x
    if mode in ("constant", "empty"):
        return _pad_constant(x, widths, kwargs.get("constant_values", 0))
    if mode in _STATS and kwargs.get("stat_length") is not None:
        kwargs = dict(kwargs, stat_length=np.broadcast_to(
            np.asarray(known_nested(kwargs["stat_length"]), dtype=np.int64), (len(shape), 2)))
    for axis, (before, after) in enumerate(widths.tolist()):
        if before or after:
            if mode in ("reflect", "symmetric") and kwargs.get("reflect_type") == "odd":
                x = _reflect_odd(x, axis, before, after, mode)
            else:
                x = _PAD_MODES[mode](x, axis, before, after, kwargs)
    return x


def _pad_function(x, widths, function, kwargs):
    """``pad`` with a function as the mode (JAX's): zero-padded, then each axis's 1-D slices
    handed to ``function(vector, (before, after), axis, kwargs)`` in turn."""
    from shardc.numpy._functional import apply_along_axis
    padded = _pad_constant(x, widths, 0)
    for axis in range(ndim_of(padded)):
        padded = apply_along_axis(function, axis, padded, tuple(widths[axis].tolist()), axis,
                                  kwargs)
    return padded


def _reflect_odd(x, axis, before, after, mode):
    """``x`` padded along ``axis`` by reflection with ``reflect_type='odd'``: each reflected
    piece (at most the axis's length at a time, as numpy's) is ``2 * edge - x`` about the
    element at the end it grows from (JAX's loop)."""
    n = shape_of(x)[axis]
    if n == 0:
        raise ValueError("can't extend empty axis using modes other than 'constant' or "
                         "'empty'")
    offset = 1 if mode == "reflect" and n > 1 else 0
    for width, at_start in ((before, True), (after, False)):
        edge = slice_axis(x, axis, 0, 1) if at_start else \
            slice_axis(x, axis, shape_of(x)[axis] - 1, shape_of(x)[axis])
        while width > 0:
            size = shape_of(x)[axis]
            piece = min(width, n - offset)
            width -= piece
            if at_start:
                chunk = slice_axis(x, axis, offset, offset + piece)
            else:
                stop = size if mode == "symmetric" or n == 1 else size - 1
                chunk = slice_axis(x, axis, stop - piece, stop)
            chunk = subtract(multiply(2, edge), flip(chunk, axis))
            if n > 1:
                edge = slice_axis(chunk, axis, 0, 1) if at_start else \
                    slice_axis(chunk, axis, piece - 1, piece)
            x = concatenate([chunk, x] if at_start else [x, chunk], axis)
    return x


def _pad_constant(x, widths, constant_values):
    dtype = dtype_of(x)
    if np.ndim(constant_values) == 0 and not isinstance(constant_values, Tracer):
        # one value everywhere: one lax.pad, which keeps a split operand split (JAX's rule);
        # the value takes the operand's type, so the result is weak where the operand is
        value = convert(asarray(constant_values), dtype)
        padded = bind(p.pad_p, x, value,
                      padding_config=tuple((int(lo), int(hi), 0) for lo, hi in widths.tolist()))
        return weakly_typed_like(padded, x)
    values = broadcast_to(convert(asarray(constant_values), dtype), (len(widths), 2))
    for axis, (before, after) in enumerate(widths.tolist()):
        x = _with_sides(x, axis, before, after,
                        lambda width, side: broadcast_to(values[axis, side], _side(x, axis,
                                                                                   width)))
    return x


def _side(x, axis, width) -> tuple:
    shape = shape_of(x)
    return shape[:axis] + (width,) + shape[axis + 1:]


def _with_sides(x, axis, before, after, make):
    """``x`` with ``make(width, 0)`` before and ``make(width, 1)`` after it along ``axis``."""
    pieces = ([make(before, 0)] if before else []) + [x] + ([make(after, 1)] if after else [])
    return concatenate(pieces, axis) if len(pieces) > 1 else x


def _pad_by_index(index_of):
    """A mode that copies elements: ``index_of(j, n)`` is the element padded position ``j``
    (counted from the array's first element, negative before it) takes. Each side is built
    of slices, reversed slices and broadcast edges, joined to the array (as JAX builds them:
    slices keep a split dimension split where a gather would not)."""
    def pad_axis(x, axis, before, after, _):
        n = shape_of(x)[axis]
        if n == 0:
            raise ValueError("can't extend empty axis using modes other than 'constant' or "
                             "'empty'")

        def side(width, which):
            positions = np.arange(-width, 0) if which == 0 else np.arange(n, n + width)
            return _copied_runs(x, axis, index_of(positions, n))
        return _with_sides(x, axis, before, after, side)
    return pad_axis


def _copied_runs(x, axis, indices):
    """The elements ``indices`` (static) of ``x`` along ``axis``, taken run by run: a run of
    consecutive indices is a slice (reversed where they fall), a run of one index repeated
    is that element broadcast."""
    pieces, start = [], 0
    while start < len(indices):
        first = int(indices[start])
        step = int(indices[start + 1]) - first if start + 1 < len(indices) else 0
        if step not in (-1, 0, 1):
            step = 0
        end = start + 1
        while end < len(indices) and int(indices[end]) - int(indices[end - 1]) == step:
            end += 1
        count = end - start
        if step == 1:
            pieces.append(slice_axis(x, axis, first, first + count))
        elif step == -1:
            pieces.append(bind(p.rev_p, slice_axis(x, axis, first - count + 1, first + 1),
                               dimensions=(axis,)))
        else:
            pieces.append(broadcast_to(slice_axis(x, axis, first, first + 1),
                                       _side(x, axis, count)))
        start = end
    return concatenate(pieces, axis) if len(pieces) > 1 else pieces[0]


def _pad_wrap(x, axis, before, after, _):
    """Wrap mode as JAX builds it: the tail's last elements, whole copies, the head's first
    ones, concatenated (slices keep a split dimension split where a gather would not)."""
    n = shape_of(x)[axis]
    if n == 0:
        raise ValueError("can't extend empty axis using modes other than 'constant' or "
                         "'empty'")
    left_copies, left = divmod(before, n)
    right_copies, right = divmod(after, n)
    parts = (([slice_axis(x, axis, n - left, n)] if left else [])
             + [x] * (left_copies + right_copies + 1)
             + ([slice_axis(x, axis, 0, right)] if right else []))
    return concatenate(parts, axis) if len(parts) > 1 else x


def _reflect_index(j, n):
    if n == 1:
        return np.zeros_like(j)
    m = np.mod(j, 2 * (n - 1))
    return np.where(m < n, m, 2 * (n - 1) - m)


def _symmetric_index(j, n):
    m = np.mod(j, 2 * n)
    return np.where(m < n, m, 2 * n - 1 - m)


def _linear_ramp(x, axis, before, after, kwargs):
    ends = np.broadcast_to(np.asarray(kwargs.get("end_values", 0)), (len(shape_of(x)), 2))
    n = shape_of(x)[axis]
    dtype = dtype_of(x)

    def ramp(width, side):
        edge = take(x, asarray(np.array([0 if side == 0 else n - 1], np.int32)), axis=axis)
        end = float(ends[axis][side])
        # numpy's linspace from the end value towards the edge (excluded), then reversed after
        steps = np.arange(width, dtype=np.float64) / width
        if side == 1:
            steps = steps[::-1]
        shape = [1] * len(shape_of(x))
        shape[axis] = width
        weights = asarray(steps.reshape(shape).astype(np.float32))
        edge = convert(edge, np.float32) if not _dt.is_inexact(dtype) else edge
        values = end + (edge - end) * convert(weights, dtype_of(edge))
        if not _dt.is_inexact(dtype):
            values = bind(p.floor_p, values)     # integer ramps round down, as JAX's
        return convert(values, dtype)
    return _with_sides(x, axis, before, after, ramp)


def _statistic(reduce):
    """A mode padding each side with a statistic (``reduce``) of the whole axis, or of the
    ``stat_length`` elements at that side's end (numpy's)."""
    def pad_axis(x, axis, before, after, kwargs):
        n = shape_of(x)[axis]
        lengths = kwargs.get("stat_length")
        if lengths is None:
            stats = [reduce(x, axis=axis, keepdims=True)] * 2
        else:
            first, last = (int(k) for k in lengths[axis])
            if first == 0 or last == 0:
                raise ValueError("stat_length of 0 yields no value for padding")
            first, last = builtins.min(first, n), builtins.min(last, n)
            stats = [reduce(slice_axis(x, axis, 0, first), axis=axis, keepdims=True),
                     reduce(slice_axis(x, axis, n - last, n), axis=axis, keepdims=True)]
        stats = [_as_padding(stat, dtype_of(x)) for stat in stats]
        return _with_sides(x, axis, before, after,
                           lambda width, side: broadcast_to(stats[side],
                                                            _side(x, axis, width)))
    return pad_axis


def _as_padding(stat, dtype):
    """A statistic as padding of ``dtype``: an integer array's mean or median rounded, halves
    to even (numpy's and JAX's ``round``)."""
    from shardc.numpy._ufuncs import round as round_even
    if _dt.is_int(dtype) and _dt.is_inexact(dtype_of(stat)):
        stat = round_even(stat)
    return convert(stat, dtype)


def _median(x, axis, keepdims):
    from shardc.numpy._statistics import median
    return median(x, axis=axis, keepdims=keepdims)


_STATS = ("maximum", "minimum", "mean", "median")
_PAD_MODES = {
    "constant": None, "empty": None,
    "edge": _pad_by_index(lambda j, n: np.clip(j, 0, n - 1)),
    "wrap": _pad_wrap,
    "reflect": _pad_by_index(_reflect_index),
    "symmetric": _pad_by_index(_symmetric_index),
    "linear_ramp": _linear_ramp,
    "maximum": _statistic(reduce_max),
    "minimum": _statistic(reduce_min),
    "mean": _statistic(reduce_mean),
    "median": _statistic(_median),
}


def repeat(x, repeats, axis=None, *, total_repeat_length=None, out_sharding=None):
    """Each element of ``x`` repeated ``repeats`` times along ``axis`` (an int, or one count
    per element). ``total_repeat_length``: the result's length along ``axis``, which lets
    the counts be traced (the result is cut there, or filled with the last element, as
    JAX's). Where ``x``'s type splits that axis (or ``axis`` is None and any), JAX asks for
    ``out_sharding=``; with it the repeat runs whole along the mesh's axes and is then laid
    out so."""
    if (rule := key_array_rule("repeat", x)) is not None and out_sharding is None:
        return rule(x, repeats, axis, total_repeat_length)
    if out_sharding is not None:
        return auto_axes(lambda v: repeat(v, repeats, axis,
                                          total_repeat_length=total_repeat_length),
                         axes=explicit_axes_for(out_sharding), out_sharding=out_sharding)(x)
    if total_repeat_length is not None or isinstance(repeats, Tracer) or np.ndim(repeats) > 0:
        return _repeat_counts(x, repeats, axis, total_repeat_length)
    split = aval_of(x).type_sharding
    if split is not None and (axis is None and any(split.spec)
                              or axis is not None and split.spec[canonical_axis(
                                  axis, ndim_of(x))]):
        raise ValueError("Please pass sharding to `jnp.repeat` via `out_sharding` parameter.")
    if axis is None:
        x, axis = ravel(x), 0
    shape = shape_of(x)
    axis = canonical_axis(axis, len(shape))
    x = expand_dims(x, axis + 1)
    target = shape[:axis + 1] + (repeats,) + shape[axis + 1:]
    x = broadcast_to(x, target)
    return reshape(x, shape[:axis] + (shape[axis] * repeats,) + shape[axis + 1:])


def _repeat_counts(x, repeats, axis, total):
    """JAX's general repeat: each element's block starts at the exclusive running sum of
    the counts; marking the starts and summing them again gives each output position's
    source (a count of zero skips its element)."""
    from shardc.numpy._reductions import cumsum
    x = asarray(x)
    if axis is None:
        x, axis = ravel(x), 0
    axis = canonical_axis(axis, ndim_of(x)) if ndim_of(x) else 0
    if total is None:
        repeats = value_if_known(repeats)
        if isinstance(repeats, Tracer):
            raise ConcretizationTypeError(
                "jnp.repeat with traced repeats needs total_repeat_length (the result's "
                "length must be known)")
        counts = np.ravel(np.asarray(repeats))
        if ndim_of(x):
            counts = np.broadcast_to(counts, (shape_of(x)[axis],))
        total = int(counts.sum())
        repeats = counts
    counts = ravel(asarray(repeats)).astype(np.int32)
    if not ndim_of(x):
        if shape_of(counts) != (1,):
            raise ValueError("jnp.repeat with a scalar parameter must have a single repeat, "
                             f"got {repeats}")
        return broadcast_to(x, (total,))
    counts = broadcast_to(counts, (shape_of(x)[axis],))
    if total == 0 or shape_of(x)[axis] == 0:
        return take(x, zeros((total,), np.int32), axis=axis) if total else \
            reshape(x, shape_of(x)[:axis] + (0,) + shape_of(x)[axis + 1:])
    starts = cumsum(counts) - counts
    marks = zeros((total,), np.int32).at[starts].add(1, mode="drop")
    return take(x, cumsum(marks) - 1, axis=axis)


def flip(x, axis=None):
    """``x`` reversed along ``axis`` (all axes when None)."""
    ndim = len(shape_of(x))
    dims = tuple(range(ndim)) if axis is None else tuple(
        canonical_axis(a, ndim) for a in index_tuple(axis, STATIC_AXIS))
    if (rule := key_array_rule("rev", x)) is not None:
        return rule(x, dims)
    return bind(p.rev_p, x, dimensions=dims)


def roll(x, shift, axis=None):
    """``x`` rotated by ``shift`` positions along ``axis`` (flattened when None); a sequence
    of shifts or of axes rolls each along its own (broadcast against each other, as JAX's;
    shifts of one axis add up). Shifts may be traced: then each roll is a dynamic slice of
    the axis doubled."""
    if (rule := key_array_rule("roll", x)) is not None:
        return rule(x, shift, axis)
    x = as_array(x)                     # an array even where nothing moves (as JAX's)
    if axis is None:
        return reshape(roll(ravel(x), shift, 0), shape_of(x))
    shape = shape_of(x)
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    axes = tuple(canonical_axis(a, len(shape)) for a in axes)
    known = value_if_known(shift)
    if isinstance(known, (list, tuple)) and \
            builtins.any(isinstance(value_if_known(k), Tracer) for k in known):
        known = as_array(shift)
    if isinstance(known, Tracer):
        shifts = as_array(shift)
        both = broadcast_shapes_of(shape_of(shifts), (len(axes),))
        if len(both) != 1:
            raise ValueError("'shift' and 'axis' arguments to roll must be scalars or 1D "
                             "arrays")
        shifts = broadcast_to(shifts, both)
        for k, a in zip(range(both[0]), np.broadcast_to(np.asarray(axes), both)):
            x = _roll_traced(x, shifts[k], int(a))
        return x
    shifts = np.asarray(known)
    if shifts.ndim > 1:
        raise TypeError(f"roll: shift must be an integer or a sequence of them, got shape "
                        f"{shifts.shape}")
    for a, k in zip(*np.broadcast_arrays(np.asarray(axes), shifts.astype(np.int64))):
        n = shape[a]
        k = int(k) % n if n else 0
        if k:
            x = concatenate([slice_axis(x, a, n - k, n), slice_axis(x, a, 0, n - k)], a)
    return x


def _roll_traced(x, shift, axis):
    """``x`` rolled by a traced ``shift`` along ``axis``: the axis doubled, sliced from
    ``n - shift mod n``."""
    n = shape_of(x)[axis]
    if n == 0:
        return x
    doubled = concatenate([x, x], axis)
    start = remainder(subtract(n, remainder(convert(shift, _dt.int_), n)), n)
    return _dynamic_slice_axis(doubled, axis, start, n)


def _dynamic_slice_axis(x, axis, start, size):
    shape = shape_of(x)
    starts = [np.int32(0)] * len(shape)
    starts[axis] = convert(start, _dt.int_)
    sizes = list(shape)
    sizes[axis] = size
    return bind(p.dynamic_slice_p, x, *starts, slice_sizes=tuple(sizes))


# --- stacking and splitting ------------------------------------------------------------------

def concat(arrays, /, *, axis=0):
    """The array API's ``concatenate``.

    >>> jnp.concat([jnp.zeros((1, 2)), jnp.ones((1, 2))], axis=0).shape      # (2, 2)
    """
    return concatenate(arrays, axis)


def atleast_3d(*arys):
    """Each array with at least three dimensions (1-D ``(n,)`` becomes ``(1, n, 1)``)."""
    out = []
    for x in arys:
        x = as_array(x)
        if ndim_of(x) == 0:
            x = reshape(x, (1, 1, 1))
        elif ndim_of(x) == 1:
            x = reshape(x, (1, shape_of(x)[0], 1))
        elif ndim_of(x) == 2:
            x = reshape(x, shape_of(x) + (1,))
        out.append(x)
    return out[0] if len(out) == 1 else out


def column_stack(tup):
    """1-D arrays as columns of a 2-D array (2-D arrays stack as they are)."""
    arrays = [as_array(x) for x in tup]
    arrays = [reshape(x, (-1, 1)) if ndim_of(x) < 2 else x for x in arrays]
    return concatenate(arrays, 1)


def dstack(tup, dtype=None):
    """Stack along the third axis (arrays made at least 3-D first), converted to ``dtype``
    if given."""
    arrays = [atleast_3d(x) for x in tup]
    return concatenate(arrays, 2, dtype=dtype)


def hsplit(ary, indices_or_sections):
    """Split along the second axis (the first for 1-D arrays)."""
    ary = as_array(ary)
    return split(ary, indices_or_sections, 1 if ndim_of(ary) > 1 else 0)


def vsplit(ary, indices_or_sections):
    """Split along the first axis of an array of at least two dimensions."""
    ary = as_array(ary)
    if ndim_of(ary) < 2:
        raise ValueError("vsplit only works on arrays of 2 or more dimensions")
    return split(ary, indices_or_sections, 0)


def dsplit(ary, indices_or_sections):
    """Split along the third axis of an array of at least three dimensions."""
    ary = as_array(ary)
    if ndim_of(ary) < 3:
        raise ValueError("dsplit only works on arrays of 3 or more dimensions")
    return split(ary, indices_or_sections, 2)


def unstack(x, /, *, axis=0):
    """The slices of ``x`` along ``axis``, as a tuple."""
    if is_key_array(x):
        moved = moveaxis(x, axis, 0)
        return tuple(moved[k] for k in range(moved.shape[0]))
    x = as_array(x)
    if ndim_of(x) == 0:
        raise ValueError("Unstack requires arrays with rank > 0, however a scalar array was "
                         "passed.")
    axis = canonical_axis(axis, ndim_of(x))
    split = aval_of(x).type_sharding
    if split is not None and split.spec[axis]:
        raise ShardingTypeError(
            f"unstack operand cannot be sharded on the unstacking axis {axis}. Got operand "
            f"type={aval_of(x).str_short()}")
    moved = moveaxis(x, axis, 0)
    return tuple(moved[k] for k in range(shape_of(x)[axis]))


def block(arrays):
    """An array assembled from nested lists of blocks (innermost lists join along the last
    axis, the next level along the second to last, ...)."""
    def depth(x):
        return 1 + depth(x[0]) if isinstance(x, list) and x else (1 if isinstance(x, list)
                                                                   else 0)
    levels = depth(arrays)
    if levels == 0:
        return as_array(arrays)

    def max_ndim(x):
        return builtins.max(max_ndim(v) for v in x) if isinstance(x, list) else ndim_of(as_array(x))
    ndim = builtins.max(levels, max_ndim(arrays))

    def assemble(x, level):
        if not isinstance(x, list):
            x = as_array(x)
            return reshape(x, (1,) * (ndim - ndim_of(x)) + shape_of(x))
        if not x:
            raise ValueError("Lists cannot be empty")
        parts = [assemble(v, level + 1) for v in x]
        return concatenate(parts, axis=-(levels - level))
    return assemble(arrays, 0)


def append(arr, values, axis=None):
    """``values`` appended to ``arr`` along ``axis`` (both flattened when None)."""
    if key_array_rule("concatenate", arr, values) is None:
        arr, values = as_array(arr), as_array(values)
    if axis is None:
        return concatenate([ravel(arr), ravel(values)])
    return concatenate([arr, values], axis)


def copy(a, order=None):
    """A copy of ``a``: a new array with a buffer of its own (traced: JAX's ``copy``)."""
    if is_key_array(a):
        return a.copy()
    result = asarray(as_array(a))
    return copied(result) if result is a else result     # (a host value is copied in)


def resize(a, new_shape):
    """``a`` flattened and repeated (or cut) to fill ``new_shape``."""
    a = ravel(as_array(a))
    new_shape = shape_tuple(new_shape)
    total = int(np.prod(new_shape, dtype=np.int64))
    n = shape_of(a)[0]
    if n == 0 or total == 0:
        return zeros(new_shape, dtype_of(a))
    repeats = -(-total // n)
    # a slice, not indexing: JAX's resize is jitted, where a static slice is one
    return reshape(slice_axis(tile(a, repeats), 0, 0, total), new_shape)


def delete(arr, obj, axis=None, *, assume_unique_indices=False):
    """``arr`` without the entries ``obj`` (an int, slice, indices or a boolean mask of the
    axis's length) along ``axis``. Indices must be concrete (they decide the result's length)
    unless ``assume_unique_indices`` promises no index comes twice: then, as in JAX, traced
    ones are taken too (negative ones count from the end, out-of-range ones are clipped)."""
    arr = as_array(arr)
    if axis is None:
        arr, axis = ravel(arr), 0
    axis = canonical_axis(axis, ndim_of(arr))
    n = shape_of(arr)[axis]
    if assume_unique_indices and not isinstance(obj, (slice, int, np.integer)) and \
            _dt.is_int(dtype_of(obj)) and (ndim_of(obj) or
                                           isinstance(value_if_known(obj), Tracer)):
        return _delete_unique(arr, ravel(as_array(obj)), axis, n)
    if not isinstance(obj, slice):
        obj = concrete_value(obj, "delete", "obj")
    keep = np.delete(np.arange(n), obj)
    return take(arr, asarray(keep.astype(np.int32)), axis=axis)


def _delete_unique(arr, indices, axis, n):
    """``delete`` of distinct (possibly traced) ``indices``: the kept entry ``t`` of the
    result is the original ``t`` moved past each deleted index at or before it (JAX's)."""
    from shardc.numpy._sorting import sort
    indices = astype(indices, _dt.int_)
    indices = clip(where(less(indices, 0), add(indices, n), indices), 0, n)
    count = shape_of(indices)[0]
    indices = subtract(sort(indices), _positions(count))
    kept = _positions(n - count)
    kept = add(kept, reduce_sum(greater_equal(kept[None, :], indices[:, None]), axis=0,
                                dtype=_dt.int_))
    return take(arr, kept, axis=axis)


def _positions(count):
    """0, 1, ... count - 1 (int32)."""
    return asarray(np.arange(count, dtype=np.int32))


def insert(arr, obj, values, axis=None):
    """``arr`` with ``values`` inserted before the positions ``obj`` (a slice, an index or
    one-dimensional indices, traced ones too) along ``axis``. As in JAX, negative positions
    count from the end and out-of-range ones are clipped into the axis; one scalar position
    takes the values' leading axis as the entries inserted."""
    arr = as_array(arr)
    if axis is None:
        arr, axis = ravel(arr), 0
    axis = canonical_axis(axis, ndim_of(arr))
    n = shape_of(arr)[axis]
    if isinstance(obj, slice):
        indices = asarray(np.arange(*obj.indices(n), dtype=np.int32))
    else:
        indices = as_array(obj)
    if ndim_of(indices) > 1:
        raise ValueError("jnp.insert(): obj must be a slice, a one-dimensional array, or a "
                         f"scalar; got {obj}")
    if not _dt.is_int(dtype_of(indices)):
        if aval_of(indices).size == 0 and not isinstance(obj, (Array, Tracer)):
            indices = astype(indices, _dt.int_)
        else:
            raise ValueError(f"jnp.insert(): index array must be integer typed; got {obj}")
    indices = astype(indices, _dt.int_)
    values = convert(as_array(values), dtype_of(arr))
    if ndim_of(values) < ndim_of(arr):
        values = reshape(values, (1,) * (ndim_of(arr) - ndim_of(values)) + shape_of(values))
    if aval_of(indices).size == 1:
        if ndim_of(indices) == 0:
            values = moveaxis(values, 0, axis)
        indices = broadcast_to(reshape(indices, ()), (shape_of(values)[axis],))
    count = broadcast_shapes_of(shape_of(indices), (shape_of(values)[axis],))[0]
    indices = broadcast_to(indices, (count,))
    indices = clip(where(less(indices, 0), add(indices, n), indices), 0, n)
    # an inserted value's place: its index, after the values placed before it (those with
    # smaller indices, and those of equal ones given earlier); an entry of arr's: its own,
    # after the values inserted at or before it
    order = _positions(count)
    earlier = logical_or(less(indices[None, :], indices[:, None]),
                         logical_and(equal(indices[None, :], indices[:, None]),
                                     less(order[None, :], order[:, None])))
    value_places = add(indices, reduce_sum(earlier, axis=1, dtype=_dt.int_))
    own = _positions(n)
    arr_places = add(own, reduce_sum(less_equal(indices[None, :], own[:, None]), axis=1,
                                     dtype=_dt.int_))
    out_shape = shape_of(arr)[:axis] + (n + count,) + shape_of(arr)[axis + 1:]
    values = broadcast_to(values, shape_of(arr)[:axis] + (count,) + shape_of(arr)[axis + 1:])
    out = zeros(out_shape, dtype_of(arr))
    head = (slice(None),) * axis
    out = out.at[head + (value_places,)].set(values)
    return out.at[head + (arr_places,)].set(arr)


# --- flips, rotations, axes ------------------------------------------------------------------

def fliplr(m):
    """``m`` reversed along its second axis."""
    m = as_array(m)
    if ndim_of(m) < 2:
        raise ValueError("fliplr requires an array of at least 2 dimensions")
    return flip(m, 1)


def flipud(m):
    """``m`` reversed along its first axis."""
    m = as_array(m)
    if ndim_of(m) < 1:
        raise ValueError("flipud requires an array of at least 1 dimension")
    return flip(m, 0)


def rot90(m, k=1, axes=(0, 1)):
    """``m`` rotated by 90 degrees ``k`` times in the plane of ``axes``."""
    m = as_array(m)
    if ndim_of(m) < 2:
        raise ValueError("rot90 requires its first argument to have ndim at least two, but got "
                         f"first argument of shape {shape_of(m)}, which has ndim {ndim_of(m)}")
    a, b = (canonical_axis(x, ndim_of(m)) for x in axes)
    if a == b:
        raise ValueError(f"rot90: axes must be different, got {axes}")
    k = int(k) % 4
    if k == 0:
        return m
    if k == 2:
        return flip(flip(m, a), b)
    if k == 1:
        return swapaxes(flip(m, b), a, b)
    return flip(swapaxes(m, a, b), b)


def rollaxis(a, axis, start=0):
    """``a`` with ``axis`` moved to come before ``start`` (numpy's older ``moveaxis``)."""
    a = as_array(a)
    n = ndim_of(a)
    axis = canonical_axis(axis, n)
    if not -n <= start <= n:
        raise np.exceptions.AxisError(f"start={start} is out of bounds for an array of "
                                      f"dimension {n}")
    start = start + n if start < 0 else start
    if axis < start:
        start -= 1
    if axis == start:
        return a
    return moveaxis(a, axis, start)


def permute_dims(a, /, axes):
    """The array API's ``transpose``."""
    return transpose(a, axes)


def matrix_transpose(x, /):
    """``x`` with its last two axes swapped."""
    x = as_array(x)
    if ndim_of(x) < 2:
        raise ValueError(f"x must be at least two-dimensional for matrix_transpose; got "
                         f"ndim={ndim_of(x)}")
    return swapaxes(x, -1, -2)


# --- shapes ----------------------------------------------------------------------------------

def ndim(a) -> int:
    """Number of dimensions of ``a``."""
    if key_array_rule("reshape", a) is not None:
        return a.ndim
    return len(_shape_of_arraylike(a, "ndim"))


def shape(a) -> tuple:
    """The shape of ``a``."""
    if key_array_rule("reshape", a) is not None:
        return a.shape
    return _shape_of_arraylike(a, "shape")


def _shape_of_arraylike(a, name: str) -> tuple:
    """``a``'s shape; a list or tuple, which JAX takes for now with a DeprecationWarning, is
    read as numpy reads it."""
    if is_python_scalar(a):
        return ()
    if isinstance(a, (list, tuple)):
        warnings.warn(f"{name} requires ndarray or scalar arguments, got {type(a)} at position "
                      "0. In a future JAX release this will be an error.", DeprecationWarning,
                      stacklevel=3)
        return tuple(np.shape(a))
    return tuple(a.shape) if is_key_array(a) else shape_of(as_array(a))


def size(a, axis=None) -> int:
    """Number of elements of ``a`` (along ``axis``, an int or a sequence of distinct axes, when
    given)."""
    s = _shape_of_arraylike(a, "size")
    if axis is None:
        return int(np.prod(s, dtype=np.int64))
    if isinstance(axis, (tuple, list)):
        axes = tuple(canonical_axis(ax, len(s)) for ax in axis)
        if len(set(axes)) != len(axes):
            raise ValueError(f"repeated axis: {axes}")
        return int(np.prod([s[ax] for ax in axes], dtype=np.int64))
    return s[canonical_axis(axis, len(s))]


def broadcast_shapes(*shapes) -> tuple:
    """The shape that arrays of ``shapes`` broadcast to."""
    return broadcast_shapes_of(*[shape_tuple(s) for s in shapes])
