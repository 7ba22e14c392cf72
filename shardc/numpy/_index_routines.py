"""Indexing routines: ``take`` and ``take_along_axis``, ``put`` and ``put_along_axis``,
index arrays and grids (``indices``, ``meshgrid``, ``ix_``, ``ravel_multi_index``,
``unravel_index``) and selection (``choose``, ``select``, ``piecewise``, ``place``).

``x[...]`` and ``x.at[...]`` themselves are ``_indexing``'s.
"""
from __future__ import annotations

import builtins

import numpy as np

from compiler.tracing import ConcretizationTypeError, Tracer, aval_of, bind, value_if_known
from ir import dtypes as _dt
from ir import primitives as p
from ir.sharding_rules import gather_error, named_sharding, partitions
from shardc.dtypes import result_type
from shardc.numpy._arithmetic import (add, clip, equal, floor_divide, greater, greater_equal,
                                      less, logical_and, logical_or, multiply, remainder,
                                      subtract, where)
from shardc.numpy._core import (as_array, asarray, astype, broadcast_shapes_of, broadcast_to,
                                canonical_axis, constrain, convert, dtype_of, expand_dims,
                                is_array, key_array_rule,
                                ndim_of, promote, ravel, reshape, shape_of, shape_tuple, stack,
                                zeros, zeros_like)
from shardc.numpy._indexing import take
from shardc.numpy._manipulation import moveaxis
from shardc.numpy._reductions import any as reduce_any
from shardc.numpy._reductions import cumsum
from shardc.numpy._reductions import sum as reduce_sum
from shardc.numpy._sorting import iota_along, unravel_positions

__all__ = [
    "take_along_axis", "put_along_axis", "indices", "meshgrid", "ix_", "ravel_multi_index",
    "unravel_index", "fromfunction", "choose", "select", "piecewise", "place", "put",
]


def _along_axis_positions(arr_shape, indices, axis, drop=False, wrap=True):
    """Flat positions in an array of ``arr_shape`` (broadcast) of ``indices`` along ``axis``,
    with the result shape; negative indices count from the end (with ``wrap``; else they are
    out of range), others are clamped (with ``drop``, an out-of-range one is a position past
    the end, which a scatter skips)."""
    idx_shape = shape_of(indices)
    if len(idx_shape) != len(arr_shape):
        raise ValueError(f"indices and arr must have the same number of dimensions; got "
                         f"{len(idx_shape)} and {len(arr_shape)}")
    rest = np.broadcast_shapes(arr_shape[:axis] + (1,) + arr_shape[axis + 1:],
                               idx_shape[:axis] + (1,) + idx_shape[axis + 1:])
    out_shape = rest[:axis] + (idx_shape[axis],) + rest[axis + 1:]
    full_shape = rest[:axis] + (arr_shape[axis],) + rest[axis + 1:]
    n = arr_shape[axis]
    indices = broadcast_to(convert(indices, _dt.int_), out_shape)
    if wrap:
        indices = where(less(indices, 0), add(indices, n), indices)
    outside = logical_or(less(indices, 0), greater_equal(indices, n)) if drop else None
    indices = clip(indices, 0, max(n - 1, 0))
    strides = [int(np.prod(full_shape[d + 1:], dtype=np.int64)) for d in range(len(full_shape))]
    flat = multiply(indices, strides[axis])
    for d in range(len(full_shape)):
        if d != axis and out_shape[d] > 1:
            flat = add(flat, multiply(iota_along(out_shape, d), strides[d]))
    if outside is not None:
        flat = where(outside, np.int32(np.prod(full_shape, dtype=np.int64)), flat)
    return flat, out_shape, full_shape


def _invalid_value(dtype):
    """What JAX's 'fill' mode reads out of bounds: NaN, the most negative signed integer, the
    largest unsigned one, True; of ``dtype`` (a Python int would not fit a uint32 as int32)."""
    if _dt.is_inexact(dtype):
        return np.array(np.nan, dtype)
    if _dt.is_bool(dtype):
        return np.array(True)
    info = np.iinfo(dtype)
    return np.array(info.min if info.min < 0 else info.max, dtype)


def take_along_axis(arr, indices, axis=-1, mode=None, fill_value=None, *,
                    wrap_negative_indices=None):
    """Elements of ``arr`` at ``indices`` along ``axis`` (other axes broadcast), as numpy's.

    Negative indices count from the end unless ``wrap_negative_indices`` is False (its default
    is True except with ``mode='promise_in_bounds'``, as JAX's); then they are out of range.
    Out-of-range ones read ``fill_value`` (default: NaN, the most negative integer, True) in
    JAX's default ``mode='fill'``, the nearest element with ``mode='clip'`` (and with
    ``'promise_in_bounds'``, which leaves them undefined), and zero with ``mode='one_hot'``,
    which, as JAX's, takes each element as the dot product of the index's one-hot row with
    ``arr`` along ``axis`` (so an infinity or NaN anywhere along it makes the element NaN).

    >>> x = jnp.array([[3, 1], [0, 2]])
    >>> jnp.take_along_axis(x, jnp.argsort(x, axis=1), axis=1)      # [[1, 3], [0, 2]]
    """
    if mode not in (None, "fill", "clip", "one_hot", "promise_in_bounds"):
        raise ValueError(f'Unknown gather mode "{mode}"')
    wrap = mode != "promise_in_bounds" if wrap_negative_indices is None \
        else bool(wrap_negative_indices)
    if (rule := key_array_rule("take_along_axis", arr)) is not None:
        return rule(arr, indices, axis, lambda data, idx, axis: take_along_axis(
            data, idx, axis, mode, fill_value, wrap_negative_indices=wrap_negative_indices))
    arr = as_array(arr)
    indices = as_array(indices)
    if not _dt.is_int(dtype_of(indices)):
        raise TypeError(f"take_along_axis indices must be of integer type, got "
                        f"{dtype_of(indices)}")
    if axis is None:
        if len(shape_of(indices)) != 1:
            raise ValueError(f"take_along_axis indices must be 1D if axis=None, got shape "
                             f"{shape_of(indices)}")
        arr, axis = ravel(arr), 0
    axis = canonical_axis(axis, len(shape_of(arr)))
    if mode == "one_hot":
        return _one_hot_along_axis(arr, indices, axis, wrap)
    typed = _along_axis_sharding(arr, indices, axis)
    if typed is not None:
        # the operand gathered whole, the result split as JAX's batched gather splits it
        # (the values are the same, more bytes move)
        arr = constrain(arr, typed.with_spec(()))
        if aval_of(indices).type_sharding is not None:
            indices = constrain(indices, typed.with_spec(()))
    flat, out_shape, full_shape = _along_axis_positions(shape_of(arr), indices, axis,
                                                        wrap=wrap)
    source = ravel(broadcast_to(arr, full_shape))
    taken = bind(p.gather_p, source, flat, axis=0)
    if typed is not None:
        taken = constrain(taken, typed)
    if mode in ("clip", "promise_in_bounds"):
        return taken
    n = shape_of(arr)[axis]
    wanted = broadcast_to(convert(indices, _dt.int_), out_shape)
    inside = logical_and(greater_equal(wanted, -n if wrap else 0), less(wanted, n))
    if typed is not None:
        inside = constrain(inside, typed)
    fill = _invalid_value(dtype_of(arr)) if fill_value is None else fill_value
    return where(inside, taken, convert(fill, dtype_of(arr)))


def _along_axis_sharding(arr, indices, axis: int):
    """On Explicit axes, the split of ``take_along_axis``'s result, as JAX's batched gather
    types it: the operand's other dimensions keep their split, the one taken along is whole
    (split there, the operand is JAX's ShardingTypeError); None where nothing is typed."""
    aval = aval_of(arr)
    if aval.type_sharding is None or not any(aval.type_sharding.spec):
        return None
    spec = list(aval.type_sharding.spec)
    if spec[axis]:
        raise gather_error(aval, aval_of(indices).update(
            shape=aval_of(indices).shape + (1,)))
    return named_sharding(aval).with_spec(partitions(tuple(spec)))


def _one_hot_along_axis(arr, indices, axis: int, wrap: bool):
    """``take_along_axis(..., mode='one_hot')``: ``sum_z onehot(index)[z] * arr[z]`` along
    ``axis`` (negative indices wrapped once with ``wrap``; out of range, a row of zeros)."""
    n = shape_of(arr)[axis]
    if len(shape_of(indices)) != len(shape_of(arr)):
        raise ValueError("indices and arr must have the same number of dimensions; "
                         f"{len(shape_of(indices))} vs. {len(shape_of(arr))}")
    dtype = dtype_of(arr)
    wanted = convert(indices, _dt.int_)
    if wrap:
        wanted = where(less(wanted, 0), add(wanted, n), wanted)
    hot = convert(equal(expand_dims(wanted, -1),
                        iota_along(shape_of(wanted) + (n,), len(shape_of(wanted)))), dtype)
    along = expand_dims(moveaxis(arr, axis, -1), axis)     # [..., 1 (the index), ..., n]
    products = multiply(hot, along)
    if _dt.is_bool(dtype):
        return reduce_any(products, axis=-1)               # a dot product of booleans
    return reduce_sum(products, axis=-1, dtype=dtype)


def put_along_axis(arr, indices, values, axis, inplace=True, *, mode=None):
    """``arr`` with ``values`` written at ``indices`` along ``axis`` (needs ``inplace=False``:
    arrays are immutable)."""
    if inplace:
        raise ValueError("jax.numpy.put_along_axis cannot modify arrays in-place, because JAX "
                         "arrays are immutable. Pass inplace=False to instead return an "
                         "updated array.")
    arr = as_array(arr)
    if axis is None:
        flat = put_along_axis(ravel(arr), ravel(as_array(indices)),
                              ravel(as_array(values)), 0, inplace=False, mode=mode)
        return reshape(flat, shape_of(arr))
    axis = canonical_axis(axis, len(shape_of(arr)))
    if mode not in (None, "drop", "fill", "clip", "promise_in_bounds"):
        raise ValueError(f'Unknown gather mode "{mode}"')
    # out-of-range updates are dropped, as JAX's scatter drops them (clamped with 'clip')
    positions, out_shape, full_shape = _along_axis_positions(
        shape_of(arr), as_array(indices), axis, drop=mode != "clip")
    if tuple(full_shape) != shape_of(arr):
        raise ValueError(f"put_along_axis: indices of shape {shape_of(indices)} do not fit an "
                         f"array of shape {shape_of(arr)}")
    values = broadcast_to(convert(values, dtype_of(arr)), out_shape)
    flat = bind(p.scatter_p, ravel(arr), positions, values, axis=0, mode="set")
    return reshape(flat, shape_of(arr))


# --- index helpers ---------------------------------------------------------------------------

def indices(dimensions, dtype=None, sparse=False):
    """A grid of indices: one array per dimension, each varying along its own axis."""
    dimensions = tuple(int(d) for d in dimensions)
    dtype = _dt.int_ if dtype is None else _dt.requested(dtype, "indices")
    n = len(dimensions)
    out = []
    for d, size in enumerate(dimensions):
        shape = tuple(size if j == d else 1 for j in range(n)) if sparse else dimensions
        out.append(bind(p.iota_p, dtype=_dt.canonicalize(dtype), shape=shape, dimension=d))
    return tuple(out) if sparse else (stack(out) if out else zeros((0,), dtype))


def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    """Coordinate arrays from 1-D coordinate vectors (``'xy'``: the first two swapped)."""
    if indexing not in ("xy", "ij"):
        raise ValueError(f"Valid values for indexing are 'xy' and 'ij', got {indexing}")
    xi = [ravel(as_array(x)) for x in xi]
    n = len(xi)
    shapes = [shape_of(x)[0] for x in xi]
    if indexing == "xy" and n >= 2:
        shapes[0], shapes[1] = shapes[1], shapes[0]
    out = []
    for k, x in enumerate(xi):
        axis = k
        if indexing == "xy" and n >= 2 and k < 2:
            axis = 1 - k
        view = [1] * n
        view[axis] = shape_of(x)[0]
        x = reshape(x, tuple(view))
        out.append(x if sparse else broadcast_to(x, tuple(shapes)))
    return out


def ix_(*args):
    """Open-mesh index arrays: the ``k``-th 1-D argument shaped to vary along axis ``k``."""
    out = []
    n = len(args)
    for k, a in enumerate(args):
        a = as_array(a)
        if ndim_of(a) != 1:
            raise ValueError("Cross index must be 1 dimensional")
        if _dt.is_bool(dtype_of(a)):
            raise NotImplementedError("Boolean arguments to jax.numpy.ix_ are not implemented")
        shape = [1] * n
        shape[k] = shape_of(a)[0]
        out.append(reshape(a, tuple(shape)))
    return tuple(out)


def ravel_multi_index(multi_index, dims, mode="raise", order="C", *, dtype=None):
    """Flat positions of the coordinates ``multi_index`` in an array of ``dims``, of
    ``dtype`` when given, else of the dtype the coordinates promote to (int8 ones give int8,
    as in JAX), which must hold the largest flat position."""
    if order not in ("C", "F"):
        raise ValueError("only 'C' or 'F' order is permitted")
    dims = tuple(int(d) for d in dims)
    multi_index = [as_array(i) for i in multi_index]
    if len(multi_index) != len(dims):
        raise ValueError(f"parameter multi_index must be a sequence of length {len(dims)}")
    if dtype is None:
        dtype = _dt.canonicalize(result_type(int, *multi_index))
    else:
        dtype = _dt.requested(dtype, "ravel_multi_index")
    if not _dt.is_int(dtype):
        raise ValueError(f"dtype={dtype!r} is not an integer type.")
    if int(np.prod(dims, dtype=np.int64)) - 1 > np.iinfo(dtype).max:
        raise ValueError(
            f"jnp.ravel_multi_index: dtype={dtype!r} not large enough to hold flattened index "
            f"for dims={dims}. Use the dtype argument to pass a suitable dtype (e.g. "
            "dtype=np.min_scalar_type(prod(dims))).")
    for i in multi_index:
        if mode == "raise" and isinstance(value_if_known(i), Tracer):
            raise ConcretizationTypeError(
                "Abstract tracer value encountered where concrete value is expected: The "
                "error occurred because ravel_multi_index was jit-compiled with "
                "mode='raise'. Use mode='wrap' or mode='clip' instead.")
        if not _dt.is_int(dtype_of(i)):
            raise TypeError("only int indices permitted")
    if mode == "raise":
        for i, d in zip(multi_index, dims):
            values = np.asarray(value_if_known(i))
            if values.size and (values.min() < 0 or values.max() >= d):
                raise ValueError("invalid entry in coordinates array")
    elif mode not in ("wrap", "clip", "ignore"):
        raise ValueError(f"invalid mode={mode!r}. Expected 'raise', 'wrap', 'clip', or "
                         "'ignore'.")
    fixed = []
    for i, d in zip(multi_index, dims):
        if mode == "wrap":
            i = remainder(i, d)
        elif mode == "clip":
            i = clip(i, 0, d - 1)
        fixed.append(astype(i, dtype))
    axes = range(len(dims)) if order == "C" else reversed(range(len(dims)))
    result = zeros((), dtype)
    for k in axes:
        result = add(multiply(result, dims[k]), fixed[k])
    return result


def unravel_index(indices, shape):
    """Coordinates of flat ``indices`` in an array of ``shape`` (whose sizes may be traced),
    as JAX computes them: divided by each size in turn from the last, in the indices' dtype;
    negative indices count from the end, out-of-range ones are clamped."""
    indices = as_array(indices)
    if not _dt.is_int(dtype_of(indices)):
        raise TypeError("only int indices permitted")
    try:
        shape = list(shape)
    except TypeError:
        shape = [shape]
    if builtins.any(np.ndim(s) != 0 for s in shape):
        raise ValueError("unravel_index: shape should be a scalar or 1D sequence.")
    coordinates = [0] * len(shape)
    for k in reversed(range(len(shape))):
        indices, coordinates[k] = floor_divide(indices, shape[k]), remainder(indices, shape[k])
    past_end = greater(indices, 0)
    before_start = None if _dt.is_unsigned(dtype_of(indices)) else less(indices, -1)
    return tuple(where(past_end, subtract(s, 1),
                       c if before_start is None else where(before_start, 0, c))
                 for s, c in zip(shape, coordinates))


def fromfunction(function, shape, *, dtype=float, **kwargs):
    """``function`` called with one index grid per dimension."""
    grids = indices(shape, dtype=_dt.canonicalize(np.dtype(dtype)))
    return function(*[grids[k] for k in range(len(shape_tuple(shape)))], **kwargs)


# --- selection -------------------------------------------------------------------------------

def choose(a, choices, out=None, mode="raise"):
    """Elements of ``choices[a]``, chosen elementwise (``choices`` broadcast together)."""
    if out is not None:
        raise NotImplementedError("jnp.choose: out is not supported (arrays are immutable)")
    a = convert(as_array(a), _dt.int_)
    choices = [as_array(c) for c in choices]
    n = len(choices)
    if mode == "raise":
        if isinstance(a, Tracer):
            raise ConcretizationTypeError(
                "Abstract tracer value encountered where concrete value is expected: "
                "jnp.choose with mode='raise' needs concrete indices. The error occurred "
                "because jnp.choose was jit-compiled with mode='raise'. Use mode='wrap' or "
                "mode='clip' instead.")
        values = np.asarray(a)
        if values.size and (values.min() < 0 or values.max() >= n):
            raise ValueError("invalid entry in choice array")
    elif mode == "wrap":
        a = remainder(a, n)
    elif mode == "clip":
        a = clip(a, 0, n - 1)
    else:
        raise ValueError(f"mode={mode!r} not understood; use 'raise', 'wrap' or 'clip'")
    choices = promote(*choices)
    shape = broadcast_shapes_of(shape_of(a), *[shape_of(c) for c in choices])
    a = broadcast_to(a, shape)
    choices = [broadcast_to(c, shape) for c in choices]
    return bind(p.select_n_p, a, *choices)


def select(condlist, choicelist, default=0):
    """The first choice whose condition holds, elementwise; ``default`` where none does."""
    if len(condlist) != len(choicelist):
        raise ValueError(f"condlist must have length equal to choicelist ({len(condlist)} vs "
                         f"{len(choicelist)})")
    if not condlist:
        raise ValueError("condlist must be non-empty")
    result = default
    for condition, choice in reversed(list(zip(condlist, choicelist))):
        condition = as_array(condition)
        if not _dt.is_bool(dtype_of(condition)):
            raise ValueError(f"condlist must be boolean arrays, got {dtype_of(condition)}")
        result = where(condition, choice, result)
    return as_array(result)


def piecewise(x, condlist, funclist, *args, **kw):
    """``funclist[k](x)`` where ``condlist[k]`` holds (a constant may stand for a function); one
    extra function is the value where no condition holds."""
    x = as_array(x)
    if is_array(condlist) and ndim_of(as_array(condlist)) <= ndim_of(x):
        condlist = [condlist]
    condlist = [as_array(c) for c in condlist]
    n = len(condlist)
    if len(funclist) not in (n, n + 1):
        raise ValueError(f"with {n} condition(s), either {n} or {n + 1} functions are needed, "
                         f"got {len(funclist)}")

    def value(f):
        out = f(x, *args, **kw) if callable(f) else f
        return broadcast_to(convert(as_array(out), dtype_of(x)), shape_of(x))
    result = value(funclist[n]) if len(funclist) == n + 1 else zeros_like(x)
    for condition, f in zip(condlist, funclist[:n]):
        result = where(condition, value(f), result)
    return result


def place(arr, mask, vals, *, inplace=True):
    """``arr`` with the elements where ``mask`` holds replaced by ``vals`` (repeated as
    needed, in order); needs ``inplace=False``."""
    if inplace:
        raise ValueError("jax.numpy.place cannot modify arrays in-place, because JAX arrays "
                         "are immutable. Pass inplace=False to instead return an updated "
                         "array.")
    arr = as_array(arr)
    mask = broadcast_to(astype(as_array(mask), bool), shape_of(arr))
    vals = ravel(convert(as_array(vals), dtype_of(arr)))
    if shape_of(vals)[0] == 0:
        return arr
    positions = remainder(subtract(cumsum(ravel(mask)), 1), shape_of(vals)[0])
    chosen = reshape(take(vals, positions), shape_of(arr))
    return where(mask, chosen, arr)


def put(a, ind, v, mode=None, *, inplace=True):
    """``a`` (flattened positions ``ind``) set to ``v`` (repeated as needed); needs
    ``inplace=False``. Out-of-range positions are clipped into range ('clip'), wrapped
    ('wrap'), or by default as JAX's ``unravel_index`` reads them: a negative one counts from
    the end once, then clipped."""
    if inplace:
        raise ValueError("jax.numpy.put cannot modify arrays in-place, because JAX arrays are "
                         "immutable. Pass inplace=False to instead return an updated array.")
    a = as_array(a)
    ind = ravel(convert(as_array(ind), _dt.int_))
    size = int(np.prod(shape_of(a), dtype=np.int64))
    if mode is None:
        ind = clip(where(less(ind, 0), add(ind, size), ind), 0, size - 1)
    elif mode == "clip":
        ind = clip(ind, 0, size - 1)
    elif mode == "wrap":
        ind = remainder(ind, size)
    elif mode == "raise":
        raise NotImplementedError("The 'raise' mode to jnp.put is not supported.")
    else:
        raise ValueError(f"mode should be one of 'wrap' or 'clip'; got {mode=}")
    v = ravel(convert(as_array(v), dtype_of(a)))
    count = shape_of(ind)[0]
    if shape_of(v)[0] == 0 or count == 0:
        return a
    v = take(v, asarray(np.arange(count, dtype=np.int32) % shape_of(v)[0]))
    flat = bind(p.scatter_p, ravel(a), ind, v, axis=0, mode="set")
    return reshape(flat, shape_of(a))
