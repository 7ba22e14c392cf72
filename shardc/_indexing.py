"""Indexing (``x[...]``) and indexed updates (``x.at[...].set/add``) in terms of primitives.

Static integers and slices lower to ``slice``/``rev``/``squeeze``; traced integers to
``dynamic_slice``; one integer-array index to ``gather`` (``scatter`` for updates).
"""
from __future__ import annotations

import numpy as np

from compiler.tracing import Tracer, aval_of, bind
from ir import dtypes as _dt
from ir import primitives as p


def _is_int_array(x) -> bool:
    if isinstance(x, (list, tuple)):
        return True
    if isinstance(x, (Tracer, np.ndarray)) or hasattr(x, "aval"):
        aval = aval_of(x)
        return aval.shape != () and (_dt.is_int(aval.dtype) or _dt.is_bool(aval.dtype))
    return False


def _is_dynamic_scalar(x) -> bool:
    if isinstance(x, (bool, np.bool_)):
        return False
    if isinstance(x, (Tracer,)) or hasattr(x, "aval"):
        aval = aval_of(x)
        return aval.shape == () and _dt.is_int(aval.dtype)
    return False


def _expand_index(index, ndim):
    """Normalise to a tuple with the Ellipsis expanded; None entries kept."""
    if not isinstance(index, tuple):
        index = (index,)
    n_real = sum(1 for i in index if i is not None and i is not Ellipsis)
    if any(i is Ellipsis for i in index):
        k = next(k for k, i in enumerate(index) if i is Ellipsis)
        index = index[:k] + (slice(None),) * (ndim - n_real) + index[k + 1:]
    else:
        index = index + (slice(None),) * (ndim - n_real)
    if n_real > ndim:
        raise IndexError(f"Too many indices: {ndim}-dimensional array indexed with {n_real}")
    return index


def getitem(x, index):
    """``x[index]`` for ints, slices, None, Ellipsis, traced ints and one integer array."""
    import shardc.numpy as jnp
    shape = aval_of(x).shape
    index = _expand_index(index, len(shape))
    arrays = [k for k, i in enumerate(index) if _is_int_array(i)]
    if len(arrays) > 1:
        raise NotImplementedError("indexing with more than one integer array")
    # Pass 1: slices and static ints (keep dims, squeeze later); traced ints; new axes.
    starts, limits, strides, flips = [], [], [], []
    squeeze_dims, dynamic = [], []
    dim = 0
    for entry in index:
        if entry is None:
            continue
        size = shape[dim]
        if isinstance(entry, slice):
            lo, hi, st = entry.indices(size)
            if st > 0:
                starts.append(lo)
                limits.append(max(lo, hi))
                strides.append(st)
                flips.append(False)
            else:
                # reverse then slice forward
                count = len(range(lo, hi, st))
                new_lo = size - 1 - lo
                starts.append(new_lo)
                limits.append(new_lo + (count - 1) * (-st) + 1 if count else new_lo)
                strides.append(-st)
                flips.append(True)
        elif _is_dynamic_scalar(entry):
            starts.append(0)
            limits.append(size)
            strides.append(1)
            flips.append(False)
            dynamic.append((dim, entry))
            squeeze_dims.append(dim)
        elif _is_int_array(entry):
            starts.append(0)
            limits.append(size)
            strides.append(1)
            flips.append(False)
        else:
            k = int(entry)
            if not -size <= k < size:
                raise IndexError(f"index {k} is out of bounds for axis {dim} with size {size}")
            k %= size
            starts.append(k)
            limits.append(k + 1)
            strides.append(1)
            flips.append(False)
            squeeze_dims.append(dim)
        dim += 1
    result = x
    flip_dims = tuple(d for d, f in enumerate(flips) if f)
    if flip_dims:
        result = bind(p.rev_p, result, dimensions=flip_dims)
    if (tuple(starts) != (0,) * len(shape) or tuple(limits) != tuple(shape)
            or any(s != 1 for s in strides)):
        result = bind(p.slice_p, result, start_indices=tuple(starts),
                      limit_indices=tuple(limits),
                      strides=None if all(s == 1 for s in strides) else tuple(strides))
    if dynamic:
        sliced = aval_of(result).shape
        begin = [np.int32(0)] * len(sliced)
        sizes = list(sliced)
        for d, entry in dynamic:
            begin[d] = _wrap_index(entry, sliced[d])
            sizes[d] = 1
        result = bind(p.dynamic_slice_p, result, *begin, slice_sizes=tuple(sizes))
    gather_dim = None
    if arrays:
        k = arrays[0]
        gather_dim = sum(1 for i in index[:k] if i is not None)
        indices = jnp.asarray(index[k])
        if _dt.is_bool(aval_of(indices).dtype):
            raise NotImplementedError("boolean mask indexing has a data-dependent shape")
        result = bind(p.gather_p, result, jnp.astype(indices, _dt.int_), axis=gather_dim)
    # Squeeze integer-indexed dims (shifted by a gathered index array's extra rank).
    if squeeze_dims:
        extra = (aval_of(result).ndim - len(shape)) if arrays else 0
        dims = tuple(d + extra if gather_dim is not None and d > gather_dim else d
                     for d in squeeze_dims)
        result = bind(p.squeeze_p, result, dimensions=dims)
    # New axes.
    if any(i is None for i in index):
        out_shape = list(aval_of(result).shape)
        pos = 0
        for entry in index:
            if entry is None:
                out_shape.insert(pos, 1)
                pos += 1
            elif isinstance(entry, slice) or _is_int_array(entry):
                pos += 1 if not _is_int_array(entry) else len(np.shape(entry)) or 1
        result = jnp.reshape(result, tuple(out_shape))
    return result


def _wrap_index(entry, size):
    """A traced index, negative values counted from the end, as int32."""
    import shardc.numpy as jnp
    entry = jnp.astype(entry, _dt.int_)
    return jnp.where(jnp.less(entry, 0), jnp.add(entry, size), entry)


class AtIndexer:
    """``x.at[index]``: functional updates returning a new array."""

    def __init__(self, x):
        self.x = x

    def __getitem__(self, index):
        return _IndexedRef(self.x, index)


class _IndexedRef:
    def __init__(self, x, index):
        self.x = x
        self.index = index

    def get(self):
        return getitem(self.x, self.index)

    def set(self, value):
        return _update(self.x, self.index, value, "set")

    def add(self, value):
        return _update(self.x, self.index, value, "add")

    def multiply(self, value):
        return _update(self.x, self.index, value, "mul")

    mul = multiply

    def min(self, value):
        return _update(self.x, self.index, value, "min")

    def max(self, value):
        return _update(self.x, self.index, value, "max")


_COMBINE = {"add": "add", "mul": "multiply", "min": "minimum", "max": "maximum"}


def _update(x, index, value, mode):
    """Update ``x[index]`` with ``value``: a window update (dynamic_update_slice) for ints and
    unit-stride slices, a scatter for one integer-array index."""
    import shardc.numpy as jnp
    shape = aval_of(x).shape
    full = _expand_index(index, len(shape))
    if any(i is None for i in full):
        raise NotImplementedError("x.at[...] with None in the index")
    value = jnp.astype(jnp.asarray(value) if not isinstance(value, Tracer) else value,
                       aval_of(x).dtype)
    arrays = [k for k, i in enumerate(full) if _is_int_array(i)]
    if arrays:
        return _scatter_update(x, full, arrays, value, mode)
    starts, window = [], []
    for dim, entry in enumerate(full):
        size = shape[dim]
        if isinstance(entry, slice):
            lo, hi, st = entry.indices(size)
            if st != 1:
                raise NotImplementedError("x.at[...] with a strided slice")
            starts.append(np.int32(lo))
            window.append(max(0, hi - lo))
        elif _is_dynamic_scalar(entry):
            starts.append(_wrap_index(entry, size))
            window.append(1)
        else:
            k = int(entry)
            if not -size <= k < size:
                # JAX drops out-of-bounds updates.
                return x
            starts.append(np.int32(k % size))
            window.append(1)
    kept = tuple(w for entry, w in zip(full, window) if isinstance(entry, slice))
    value = jnp.reshape(jnp.broadcast_to(value, kept), tuple(window))
    if mode != "set":
        current = bind(p.dynamic_slice_p, x, *starts, slice_sizes=tuple(window))
        value = getattr(jnp, _COMBINE[mode])(current, value)
    return bind(p.dynamic_update_slice_p, x, value, *starts)


def _scatter_update(x, full, arrays, value, mode):
    import shardc.numpy as jnp
    if len(arrays) > 1 or any(not (isinstance(i, slice) and i == slice(None))
                              for k, i in enumerate(full) if k not in arrays):
        raise NotImplementedError("x.at[...] with an integer array combined with other "
                                  "non-trivial indices")
    axis = arrays[0]
    indices = jnp.astype(jnp.asarray(full[axis]), _dt.int_)
    shape = aval_of(x).shape
    ishape = aval_of(indices).shape
    target = shape[:axis] + ishape + shape[axis + 1:]
    value = jnp.broadcast_to(value, target)
    return bind(p.scatter_p, x, indices, value, axis=axis, mode=mode)
