"""``shardc.numpy``'s array manipulation beyond the core in ``numpy.py``: stacking and splitting,
diagonals and triangles, index helpers, selection, bit packing, dtype queries and host I/O.

All of it composes existing primitives. Index arguments that decide a result's shape
(``delete``'s and ``insert``'s positions) must be concrete, as in JAX.
"""
from __future__ import annotations

import builtins
import functools

import numpy as np

from compiler.tracing import ConcretizationTypeError, Tracer, bind, is_python_scalar
from ir import dtypes as _dt
from ir import primitives as p
from shardc.numpy._core import (_axis, _broadcast_shapes, _convert, _dtype_of, _is_array, _promote,
                                _shape, _shape_tuple, asarray)
import shardc.numpy as jnp

__all__ = [
    "append", "apply_along_axis", "apply_over_axes", "array_equiv", "array_repr", "array_str",
    "atleast_3d", "block", "broadcast_arrays", "broadcast_shapes", "choose",
    "column_stack", "concat", "copy", "cross", "delete", "diag", "diag_indices",
    "diag_indices_from", "diagflat", "diagonal", "dsplit", "dstack", "einsum_path",
    "fill_diagonal", "fliplr", "flipud", "from_dlpack", "frombuffer", "fromfile", "fromfunction",
    "fromiter", "fromstring", "geomspace", "get_printoptions", "hsplit", "indices", "insert",
    "isdtype", "isscalar", "iterable", "ix_", "kron", "load", "logspace",
    "mask_indices", "matrix_transpose", "matvec", "vecmat", "vecdot", "meshgrid", "ndim",
    "shape", "size", "permute_dims", "piecewise", "place", "printoptions",
    "put", "ravel_multi_index", "resize", "rollaxis", "rot90", "save", "savez", "select",
    "set_printoptions", "tri", "tril", "triu", "tril_indices", "triu_indices",
    "tril_indices_from", "triu_indices_from", "unravel_index", "unstack", "vander", "vsplit",
    "vectorize", "packbits", "unpackbits",
]


def _array(x):
    return asarray(x) if not _is_array(x) else x


def _ndim(x) -> int:
    return len(_shape(x))


def _concrete(value, name, what):
    """``value`` as a numpy array; an error naming ``what`` when it is traced."""
    if isinstance(value, Tracer):
        raise ConcretizationTypeError(f"jnp.{name}: {what} must be concrete (it decides the "
                                      "shape of the result), but it is traced here")
    return np.asarray(value)


# --- stacking and splitting ------------------------------------------------------------------

def concat(arrays, /, *, axis=0):
    """The array API's ``concatenate``.

    >>> jnp.concat([jnp.zeros((1, 2)), jnp.ones((1, 2))], axis=0).shape      # (2, 2)
    """
    return jnp.concatenate(arrays, axis)


def atleast_3d(*arys):
    """Each array with at least three dimensions (1-D ``(n,)`` becomes ``(1, n, 1)``)."""
    out = []
    for x in arys:
        x = _array(x)
        if _ndim(x) == 0:
            x = jnp.reshape(x, (1, 1, 1))
        elif _ndim(x) == 1:
            x = jnp.reshape(x, (1, _shape(x)[0], 1))
        elif _ndim(x) == 2:
            x = jnp.reshape(x, _shape(x) + (1,))
        out.append(x)
    return out[0] if len(out) == 1 else out


def column_stack(tup):
    """1-D arrays as columns of a 2-D array (2-D arrays stack as they are)."""
    arrays = [_array(x) for x in tup]
    arrays = [jnp.reshape(x, (-1, 1)) if _ndim(x) < 2 else x for x in arrays]
    return jnp.concatenate(arrays, 1)


def dstack(tup):
    """Stack along the third axis (arrays made at least 3-D first)."""
    arrays = [atleast_3d(x) for x in tup]
    return jnp.concatenate(arrays, 2)


def hsplit(ary, indices_or_sections):
    """Split along the second axis (the first for 1-D arrays)."""
    ary = _array(ary)
    return jnp.split(ary, indices_or_sections, 1 if _ndim(ary) > 1 else 0)


def vsplit(ary, indices_or_sections):
    """Split along the first axis of an array of at least two dimensions."""
    ary = _array(ary)
    if _ndim(ary) < 2:
        raise ValueError("vsplit only works on arrays of 2 or more dimensions")
    return jnp.split(ary, indices_or_sections, 0)


def dsplit(ary, indices_or_sections):
    """Split along the third axis of an array of at least three dimensions."""
    ary = _array(ary)
    if _ndim(ary) < 3:
        raise ValueError("dsplit only works on arrays of 3 or more dimensions")
    return jnp.split(ary, indices_or_sections, 2)


def unstack(x, /, *, axis=0):
    """The slices of ``x`` along ``axis``, as a tuple."""
    x = _array(x)
    if _ndim(x) == 0:
        raise ValueError("Unstack requires arrays with rank > 0, however a scalar array was "
                         "passed.")
    axis = _axis(axis, _ndim(x))
    moved = jnp.moveaxis(x, axis, 0)
    return tuple(moved[k] for k in range(_shape(x)[axis]))


def block(arrays):
    """An array assembled from nested lists of blocks (innermost lists join along the last
    axis, the next level along the second to last, ...)."""
    def depth(x):
        return 1 + depth(x[0]) if isinstance(x, list) and x else (1 if isinstance(x, list)
                                                                   else 0)
    levels = depth(arrays)
    if levels == 0:
        return _array(arrays)

    def max_ndim(x):
        return builtins.max(max_ndim(v) for v in x) if isinstance(x, list) else _ndim(_array(x))
    ndim = builtins.max(levels, max_ndim(arrays))

    def assemble(x, level):
        if not isinstance(x, list):
            x = _array(x)
            return jnp.reshape(x, (1,) * (ndim - _ndim(x)) + _shape(x))
        if not x:
            raise ValueError("Lists cannot be empty")
        parts = [assemble(v, level + 1) for v in x]
        return jnp.concatenate(parts, axis=-(levels - level))
    return assemble(arrays, 0)


def append(arr, values, axis=None):
    """``values`` appended to ``arr`` along ``axis`` (both flattened when None)."""
    arr, values = _array(arr), _array(values)
    if axis is None:
        return jnp.concatenate([jnp.ravel(arr), jnp.ravel(values)])
    return jnp.concatenate([arr, values], axis)


def copy(a, order=None):
    """A copy of ``a`` (arrays are immutable, so ``a``'s value itself)."""
    return jnp.asarray(_array(a))


def resize(a, new_shape):
    """``a`` flattened and repeated (or cut) to fill ``new_shape``."""
    a = jnp.ravel(_array(a))
    new_shape = _shape_tuple(new_shape)
    total = int(np.prod(new_shape, dtype=np.int64))
    n = _shape(a)[0]
    if n == 0 or total == 0:
        return jnp.zeros(new_shape, _dtype_of(a))
    repeats = -(-total // n)
    return jnp.reshape(jnp.tile(a, repeats)[:total], new_shape)


def delete(arr, obj, axis=None, *, assume_unique_indices=False):
    """``arr`` without the entries ``obj`` (an int, slice or indices) along ``axis``."""
    arr = _array(arr)
    if axis is None:
        arr, axis = jnp.ravel(arr), 0
    axis = _axis(axis, _ndim(arr))
    n = _shape(arr)[axis]
    if not isinstance(obj, slice):
        obj = _concrete(obj, "delete", "obj")
        if obj.dtype == np.bool_:
            raise ValueError("jnp.delete(arr, obj): boolean obj is not supported; use "
                             "jnp.compress or arr[~obj]")
    keep = np.delete(np.arange(n), obj)
    return jnp.take(arr, jnp.asarray(keep.astype(np.int32)), axis=axis)


def insert(arr, obj, values, axis=None):
    """``arr`` with ``values`` inserted before the positions ``obj`` along ``axis``."""
    arr = _array(arr)
    if axis is None:
        arr, axis = jnp.ravel(arr), 0
    axis = _axis(axis, _ndim(arr))
    n = _shape(arr)[axis]
    if not isinstance(obj, slice):
        obj = _concrete(obj, "insert", "obj")
    values = _convert(_array(values), _dtype_of(arr))
    if isinstance(obj, slice) or np.ndim(obj):
        count = len(np.arange(n + 1)[obj]) if isinstance(obj, slice) else np.size(obj)
    else:
        # one position: values' leading axis is the number of entries inserted
        values = jnp.reshape(values, (1,) * (_ndim(arr) - _ndim(values)) + _shape(values)) \
            if _ndim(values) < _ndim(arr) else values
        values = jnp.moveaxis(values, 0, axis) if _ndim(values) else values
        count = _shape(values)[axis] if _ndim(values) else 1
    block_shape = _shape(arr)[:axis] + (count,) + _shape(arr)[axis + 1:]
    values = jnp.broadcast_to(values, block_shape)
    order = np.insert(np.arange(n), obj, np.arange(n, n + count))
    joined = jnp.concatenate([arr, values], axis)
    return jnp.take(joined, jnp.asarray(order.astype(np.int32)), axis=axis)


# --- flips, rotations, axes ------------------------------------------------------------------

def fliplr(m):
    """``m`` reversed along its second axis."""
    m = _array(m)
    if _ndim(m) < 2:
        raise ValueError("fliplr requires an array of at least 2 dimensions")
    return jnp.flip(m, 1)


def flipud(m):
    """``m`` reversed along its first axis."""
    m = _array(m)
    if _ndim(m) < 1:
        raise ValueError("flipud requires an array of at least 1 dimension")
    return jnp.flip(m, 0)


def rot90(m, k=1, axes=(0, 1)):
    """``m`` rotated by 90 degrees ``k`` times in the plane of ``axes``."""
    m = _array(m)
    a, b = (_axis(x, _ndim(m)) for x in axes)
    if a == b:
        raise ValueError(f"rot90: axes must be different, got {axes}")
    k = int(k) % 4
    if k == 0:
        return m
    if k == 2:
        return jnp.flip(jnp.flip(m, a), b)
    if k == 1:
        return jnp.swapaxes(jnp.flip(m, b), a, b)
    return jnp.flip(jnp.swapaxes(m, a, b), b)


def rollaxis(a, axis, start=0):
    """``a`` with ``axis`` moved to come before ``start`` (numpy's older ``moveaxis``)."""
    a = _array(a)
    n = _ndim(a)
    axis = _axis(axis, n)
    if not -n <= start <= n:
        raise np.exceptions.AxisError(f"start={start} is out of bounds for an array of "
                                      f"dimension {n}")
    start = start % (n + 1) if start < 0 else start
    if axis < start:
        start -= 1
    if axis == start:
        return a
    return jnp.moveaxis(a, axis, start)


def permute_dims(a, /, axes):
    """The array API's ``transpose``."""
    return jnp.transpose(a, axes)


def matrix_transpose(x, /):
    """``x`` with its last two axes swapped."""
    x = _array(x)
    if _ndim(x) < 2:
        raise ValueError(f"x must be at least two-dimensional for matrix_transpose; got "
                         f"ndim={_ndim(x)}")
    return jnp.swapaxes(x, -1, -2)


# --- products --------------------------------------------------------------------------------

def matvec(x1, x2, /):
    """Matrix-vector products over the last axes: ``(..., m, n) x (..., n) -> (..., m)``."""
    x1, x2 = _array(x1), _array(x2)
    return jnp.matmul(x1, x2[..., None])[..., 0]


def vecmat(x1, x2, /):
    """Vector-matrix products over the last axes: ``(..., n) x (..., n, m) -> (..., m)``."""
    x1, x2 = _array(x1), _array(x2)
    return jnp.matmul(x1[..., None, :], x2)[..., 0, :]


def vecdot(x1, x2, /, *, axis=-1):
    """Dot products of vectors along ``axis`` (other axes broadcast)."""
    x1, x2 = _promote(_array(x1), _array(x2))
    if _shape(x1)[axis] != _shape(x2)[axis]:
        raise ValueError(f"vecdot: axes of size {_shape(x1)[axis]} and {_shape(x2)[axis]} "
                         "differ")
    return jnp.sum(jnp.multiply(x1, x2), axis=axis)


def kron(a, b):
    """The Kronecker product: ``b`` scaled by each element of ``a``, tiled."""
    a, b = _promote(_array(a), _array(b))
    ndim = builtins.max(_ndim(a), _ndim(b))
    a = jnp.reshape(a, (1,) * (ndim - _ndim(a)) + _shape(a))
    b = jnp.reshape(b, (1,) * (ndim - _ndim(b)) + _shape(b))
    a_wide = jnp.reshape(a, tuple(d for s in _shape(a) for d in (s, 1)))
    b_wide = jnp.reshape(b, tuple(d for s in _shape(b) for d in (1, s)))
    out = jnp.multiply(a_wide, b_wide)
    return jnp.reshape(out, tuple(x * y for x, y in zip(_shape(a), _shape(b))))


def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """Cross products of 3-vectors (or 2-vectors, whose result is the z component)."""
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = _promote(_array(a), _array(b))
    a, b = jnp.moveaxis(a, axisa, -1), jnp.moveaxis(b, axisb, -1)
    if _shape(a)[-1] not in (2, 3) or _shape(b)[-1] not in (2, 3):
        raise ValueError("Dimension must be either 2 or 3 for cross product")
    if _shape(a)[-1] == 2 and _shape(b)[-1] == 2:
        return jnp.subtract(jnp.multiply(a[..., 0], b[..., 1]),
                            jnp.multiply(a[..., 1], b[..., 0]))
    a0, a1 = a[..., 0], a[..., 1]
    a2 = a[..., 2] if _shape(a)[-1] == 3 else jnp.zeros_like(a0)
    b0, b1 = b[..., 0], b[..., 1]
    b2 = b[..., 2] if _shape(b)[-1] == 3 else jnp.zeros_like(b0)
    c = jnp.stack(jnp.broadcast_arrays(
        jnp.subtract(jnp.multiply(a1, b2), jnp.multiply(a2, b1)),
        jnp.subtract(jnp.multiply(a2, b0), jnp.multiply(a0, b2)),
        jnp.subtract(jnp.multiply(a0, b1), jnp.multiply(a1, b0))), -1)
    return jnp.moveaxis(c, -1, axisc)


# --- diagonals and triangles -----------------------------------------------------------------

def diagonal(a, offset=0, axis1=0, axis2=1):
    """The diagonal ``offset`` of the planes ``(axis1, axis2)``, as a last axis."""
    a = _array(a)
    n = _ndim(a)
    a1, a2 = _axis(axis1, n), _axis(axis2, n)
    if a1 == a2:
        raise ValueError("axis1 and axis2 must not be equal")
    moved = jnp.moveaxis(jnp.moveaxis(a, a1, -1), a2 - (a2 > a1), -1)
    rows, cols = _shape(moved)[-2:]
    start_row, start_col = builtins.max(-offset, 0), builtins.max(offset, 0)
    length = builtins.max(0, builtins.min(rows - start_row, cols - start_col))
    positions = np.arange(length) * (cols + 1) + start_row * cols + start_col
    flat = jnp.reshape(moved, _shape(moved)[:-2] + (rows * cols,))
    return bind(p.gather_p, flat, jnp.asarray(positions.astype(np.int32)), axis=_ndim(flat) - 1)


def diag(v, k=0):
    """The ``k``-th diagonal of a 2-D ``v``, or a 2-D array with 1-D ``v`` on diagonal ``k``."""
    v = _array(v)
    if _ndim(v) == 2:
        return diagonal(v, k)
    if _ndim(v) != 1:
        raise ValueError("diag input must be 1d or 2d")
    n = _shape(v)[0] + builtins.abs(k)
    rows = jnp.arange(n)[:, None]
    along = rows if k >= 0 else jnp.arange(n)[None, :]
    values = jnp.take(v, jnp.clip(jnp.broadcast_to(along, (n, n)), 0, _shape(v)[0] - 1))
    mask = jnp.eye(n, n, k=k, dtype=bool)
    return jnp.where(mask, values, jnp.zeros((), _dtype_of(v)))


def diagflat(v, k=0):
    """A 2-D array with the flattened ``v`` on diagonal ``k``."""
    return diag(jnp.ravel(_array(v)), k)


def tri(N, M=None, k=0, dtype=None):
    """``N x M`` ones at and below diagonal ``k`` (float32 unless ``dtype`` says)."""
    M = N if M is None else M
    rows = bind(p.iota_p, dtype=_dt.int_, shape=(N, M), dimension=0)
    cols = bind(p.iota_p, dtype=_dt.int_, shape=(N, M), dimension=1)
    return jnp.astype(jnp.less_equal(cols, jnp.add(rows, k)), dtype or _dt.float_)


def tril(m, k=0):
    """``m`` with the elements above diagonal ``k`` (of its last two axes) zeroed."""
    m = _array(m)
    if _ndim(m) < 2:
        raise ValueError("Argument to jax.numpy.tril must be at least 2D")
    mask = tri(*_shape(m)[-2:], k=k, dtype=bool)
    return jnp.where(mask, m, jnp.zeros((), _dtype_of(m)))


def triu(m, k=0):
    """``m`` with the elements below diagonal ``k`` (of its last two axes) zeroed."""
    m = _array(m)
    if _ndim(m) < 2:
        raise ValueError("Argument to jax.numpy.triu must be at least 2D")
    mask = tri(*_shape(m)[-2:], k=k - 1, dtype=bool)
    return jnp.where(mask, jnp.zeros((), _dtype_of(m)), m)


def _index_arrays(arrays):
    return tuple(jnp.asarray(np.asarray(a).astype(np.int32)) for a in arrays)


def tril_indices(n, k=0, m=None):
    """Row and column indices (int32) of the lower triangle of an ``n x m`` array."""
    return _index_arrays(np.tril_indices(n, k, m))


def triu_indices(n, k=0, m=None):
    """Row and column indices (int32) of the upper triangle of an ``n x m`` array."""
    return _index_arrays(np.triu_indices(n, k, m))


def tril_indices_from(arr, k=0):
    """``tril_indices`` for the shape of the 2-D ``arr``."""
    shape = _shape(_array(arr))
    if len(shape) != 2:
        raise ValueError("input array must be 2-d")
    return tril_indices(shape[0], k, shape[1])


def triu_indices_from(arr, k=0):
    """``triu_indices`` for the shape of the 2-D ``arr``."""
    shape = _shape(_array(arr))
    if len(shape) != 2:
        raise ValueError("input array must be 2-d")
    return triu_indices(shape[0], k, shape[1])


def diag_indices(n, ndim=2):
    """Indices (int32) of the main diagonal of an ``n``-sided ``ndim``-dimensional array."""
    if n < 0:
        raise ValueError(f"n argument to diag_indices must be nonnegative, got {n}")
    if ndim < 0:
        raise ValueError(f"ndim argument to diag_indices must be nonnegative, got {ndim}")
    return _index_arrays((np.arange(n),) * ndim)


def diag_indices_from(arr):
    """``diag_indices`` for ``arr``, whose sides must all be equal."""
    shape = _shape(_array(arr))
    if len(shape) < 2:
        raise ValueError("input array must be at least 2-d")
    if len(set(shape)) != 1:
        raise ValueError("All dimensions of input must be of equal length")
    return diag_indices(shape[0], len(shape))


def mask_indices(n, mask_func, k=0, *, size=None):
    """Indices where ``mask_func(ones((n, n)), k)`` is non-zero (``size=`` as for
    ``nonzero``)."""
    from shardc.numpy._sorting import nonzero
    return nonzero(mask_func(jnp.ones((n, n), _dt.int_), k), size=size)


def fill_diagonal(a, val, wrap=False, *, inplace=True):
    """``a`` with its main diagonal set to ``val`` (needs ``inplace=False``)."""
    if inplace:
        raise NotImplementedError("JAX arrays are immutable, must use inplace=False")
    a = _array(a)
    shape = _shape(a)
    if len(shape) < 2:
        raise ValueError("array must be at least 2-d")
    if len(shape) > 2 and len(set(shape)) != 1:
        raise ValueError("All dimensions of input must be of equal length")
    if len(shape) == 2:
        rows, cols = shape
        step = cols + 1
        end = cols * cols if not wrap else rows * cols
        positions = np.arange(0, builtins.min(end, rows * cols), step)
    else:
        positions = np.arange(shape[0]) * int(sum(np.prod(shape[d + 1:]) for d in
                                                 range(len(shape))))
    count = len(positions)
    values = jnp.ravel(_convert(_array(val), _dtype_of(a)))
    if _shape(values)[0] == 0:
        return a
    values = jnp.take(values, jnp.asarray(np.arange(count, dtype=np.int32) % _shape(values)[0]))
    flat = bind(p.scatter_p, jnp.ravel(a), jnp.asarray(positions.astype(np.int32)), values,
                axis=0, mode="set")
    return jnp.reshape(flat, shape)


# --- index helpers ---------------------------------------------------------------------------

def indices(dimensions, dtype=None, sparse=False):
    """A grid of indices: one array per dimension, each varying along its own axis."""
    dimensions = tuple(int(d) for d in dimensions)
    dtype = dtype or _dt.int_
    n = len(dimensions)
    out = []
    for d, size in enumerate(dimensions):
        shape = tuple(size if j == d else 1 for j in range(n)) if sparse else dimensions
        out.append(bind(p.iota_p, dtype=_dt.canonicalize(dtype), shape=shape, dimension=d))
    return tuple(out) if sparse else (jnp.stack(out) if out else jnp.zeros((0,), dtype))


def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    """Coordinate arrays from 1-D coordinate vectors (``'xy'``: the first two swapped)."""
    if indexing not in ("xy", "ij"):
        raise ValueError(f"Valid values for indexing are 'xy' and 'ij', got {indexing}")
    xi = [jnp.ravel(_array(x)) for x in xi]
    n = len(xi)
    shapes = [_shape(x)[0] for x in xi]
    if indexing == "xy" and n >= 2:
        shapes[0], shapes[1] = shapes[1], shapes[0]
    out = []
    for k, x in enumerate(xi):
        axis = k
        if indexing == "xy" and n >= 2 and k < 2:
            axis = 1 - k
        view = [1] * n
        view[axis] = _shape(x)[0]
        x = jnp.reshape(x, tuple(view))
        out.append(x if sparse else jnp.broadcast_to(x, tuple(shapes)))
    return out


def ix_(*args):
    """Open-mesh index arrays: the ``k``-th 1-D argument shaped to vary along axis ``k``."""
    out = []
    n = len(args)
    for k, a in enumerate(args):
        a = _array(a)
        if _ndim(a) != 1:
            raise ValueError("Cross index must be 1 dimensional")
        if _dt.is_bool(_dtype_of(a)):
            raise NotImplementedError("Boolean arguments to jax.numpy.ix_ are not implemented")
        shape = [1] * n
        shape[k] = _shape(a)[0]
        out.append(jnp.reshape(a, tuple(shape)))
    return tuple(out)


def ravel_multi_index(multi_index, dims, mode="raise", order="C"):
    """Flat positions (int32) of the coordinates ``multi_index`` in an array of ``dims``."""
    if order not in ("C", "F"):
        raise ValueError("only 'C' or 'F' order is permitted")
    dims = tuple(int(d) for d in dims)
    multi_index = [_array(i) for i in multi_index]
    if len(multi_index) != len(dims):
        raise ValueError(f"parameter multi_index must be a sequence of length {len(dims)}")
    for i in multi_index:
        if not _dt.is_int(_dtype_of(i)):
            raise TypeError("only int indices permitted")
    if mode == "raise":
        for i, d in zip(multi_index, dims):
            if not isinstance(i, Tracer):
                values = np.asarray(i)
                if values.size and (values.min() < 0 or values.max() >= d):
                    raise ValueError("invalid entry in coordinates array")
    fixed = []
    for i, d in zip(multi_index, dims):
        if mode == "wrap":
            i = jnp.remainder(i, d)
        elif mode in ("clip", "raise"):
            i = jnp.clip(i, 0, d - 1)
        fixed.append(jnp.astype(i, _dt.int_))
    axes = range(len(dims)) if order == "C" else reversed(range(len(dims)))
    result = jnp.zeros((), _dt.int_)
    for k in axes:
        result = jnp.add(jnp.multiply(result, dims[k]), fixed[k])
    return result


def unravel_index(indices, shape):
    """Coordinates (a tuple of int32 arrays) of flat ``indices`` in an array of ``shape``;
    negative indices count from the end, out-of-range ones are clamped."""
    shape = _shape_tuple(shape)
    indices = _array(indices)
    if not _dt.is_int(_dtype_of(indices)):
        raise TypeError("only int indices permitted")
    total = int(np.prod(shape, dtype=np.int64))
    indices = jnp.astype(indices, _dt.int_)
    indices = jnp.where(jnp.less(indices, 0), jnp.add(indices, total), indices)
    indices = jnp.clip(indices, 0, builtins.max(total - 1, 0))
    from shardc.numpy._sorting import unravel_positions
    return unravel_positions(indices, shape)


# --- selection -------------------------------------------------------------------------------

def choose(a, choices, out=None, mode="raise"):
    """Elements of ``choices[a]``, chosen elementwise (``choices`` broadcast together)."""
    if out is not None:
        raise NotImplementedError("jnp.choose: out is not supported (arrays are immutable)")
    a = _convert(_array(a), _dt.int_)
    choices = [_array(c) for c in choices]
    n = len(choices)
    if mode == "raise":
        if isinstance(a, Tracer):
            raise ConcretizationTypeError("jnp.choose: mode='raise' needs concrete indices, "
                                          "but they are traced here; use mode='wrap' or "
                                          "mode='clip' instead")
        values = np.asarray(a)
        if values.size and (values.min() < 0 or values.max() >= n):
            raise ValueError("invalid entry in choice array")
    elif mode == "wrap":
        a = jnp.remainder(a, n)
    elif mode == "clip":
        a = jnp.clip(a, 0, n - 1)
    else:
        raise ValueError(f"mode={mode!r} not understood; use 'raise', 'wrap' or 'clip'")
    choices = _promote(*choices)
    shape = _broadcast_shapes(_shape(a), *[_shape(c) for c in choices])
    a = jnp.broadcast_to(a, shape)
    choices = [jnp.broadcast_to(c, shape) for c in choices]
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
        condition = _array(condition)
        if not _dt.is_bool(_dtype_of(condition)):
            raise ValueError(f"condlist must be boolean arrays, got {_dtype_of(condition)}")
        result = jnp.where(condition, choice, result)
    return _array(result)


def piecewise(x, condlist, funclist, *args, **kw):
    """``funclist[k](x)`` where ``condlist[k]`` holds (a constant may stand for a function); one
    extra function is the value where no condition holds."""
    x = _array(x)
    if _is_array(condlist) and _ndim(_array(condlist)) <= _ndim(x):
        condlist = [condlist]
    condlist = [_array(c) for c in condlist]
    n = len(condlist)
    if len(funclist) not in (n, n + 1):
        raise ValueError(f"with {n} condition(s), either {n} or {n + 1} functions are needed, "
                         f"got {len(funclist)}")

    def value(f):
        out = f(x, *args, **kw) if callable(f) else f
        return jnp.broadcast_to(_convert(_array(out), _dtype_of(x)), _shape(x))
    result = value(funclist[n]) if len(funclist) == n + 1 else jnp.zeros_like(x)
    for condition, f in zip(condlist, funclist[:n]):
        result = jnp.where(condition, value(f), result)
    return result


def place(arr, mask, vals, *, inplace=True):
    """``arr`` with the elements where ``mask`` holds replaced by ``vals`` (repeated as
    needed, in order); needs ``inplace=False``."""
    if inplace:
        raise ValueError("jax.numpy.place cannot modify arrays in-place, because JAX arrays "
                         "are immutable. Pass inplace=False to instead return an updated "
                         "array.")
    arr = _array(arr)
    mask = jnp.broadcast_to(jnp.astype(_array(mask), bool), _shape(arr))
    vals = jnp.ravel(_convert(_array(vals), _dtype_of(arr)))
    if _shape(vals)[0] == 0:
        return arr
    positions = jnp.remainder(jnp.subtract(jnp.cumsum(jnp.ravel(mask)), 1), _shape(vals)[0])
    chosen = jnp.reshape(jnp.take(vals, positions), _shape(arr))
    return jnp.where(mask, chosen, arr)


def put(a, ind, v, mode=None, *, inplace=True):
    """``a`` (flattened positions ``ind``) set to ``v`` (repeated as needed); needs
    ``inplace=False``. Out-of-range positions are dropped unless ``mode`` is 'clip' or
    'wrap'."""
    if inplace:
        raise ValueError("jax.numpy.put cannot modify arrays in-place, because JAX arrays are "
                         "immutable. Pass inplace=False to instead return an updated array.")
    a = _array(a)
    ind = jnp.ravel(_convert(_array(ind), _dt.int_))
    size = int(np.prod(_shape(a), dtype=np.int64))
    if mode == "clip":
        ind = jnp.clip(ind, 0, size - 1)
    elif mode == "wrap":
        ind = jnp.remainder(ind, size)
    elif mode not in (None, "fill", "drop"):
        raise ValueError(f"jnp.put: mode={mode!r} is not supported")
    v = jnp.ravel(_convert(_array(v), _dtype_of(a)))
    count = _shape(ind)[0]
    if _shape(v)[0] == 0 or count == 0:
        return a
    v = jnp.take(v, jnp.asarray(np.arange(count, dtype=np.int32) % _shape(v)[0]))
    flat = bind(p.scatter_p, jnp.ravel(a), ind, v, axis=0, mode="set")
    return jnp.reshape(flat, _shape(a))


# --- functions applied over axes -------------------------------------------------------------

def apply_along_axis(func1d, axis, arr, *args, **kwargs):
    """``func1d`` applied to every 1-D slice of ``arr`` along ``axis`` (by ``vmap``)."""
    from compiler.batching import vmap
    arr = _array(arr)
    n = _ndim(arr)
    axis = _axis(axis, n)
    fn = lambda x: func1d(x, *args, **kwargs)
    # vmap over the axes after ``axis``, then those before it
    for _ in range(n - axis - 1):
        fn = vmap(fn, in_axes=-1, out_axes=-1)
    for _ in range(axis):
        fn = vmap(fn, in_axes=0, out_axes=0)
    return fn(arr)


def apply_over_axes(func, a, axes):
    """``func(a, axis)`` for each axis in turn (the reduced axis kept, size 1)."""
    a = _array(a)
    for axis in ([axes] if isinstance(axes, int) else axes):
        result = func(a, axis)
        if _ndim(result) == _ndim(a) - 1:
            result = jnp.expand_dims(result, axis)
        if _ndim(result) != _ndim(a):
            raise ValueError("function is not returning an array of the correct shape")
        a = result
    return a


def _parse_signature(signature):
    """A generalised ufunc signature ``'(m,n),(n)->(m)'`` as (input core dims, output core
    dims): tuples of dimension names per argument."""
    import re
    pattern = r"\s*\(\s*\w*(?:\s*,\s*\w+)*\s*\)\s*"
    arguments = rf"(?:{pattern}(?:,{pattern})*)?"
    if not re.fullmatch(rf"{arguments}->{arguments}", signature):
        raise ValueError(f"not a valid gufunc signature: {signature}")
    inputs, outputs = signature.split("->")

    def dims(group):
        return [tuple(d.strip() for d in g.split(",") if d.strip())
                for g in re.findall(r"\(([^()]*)\)", group)]
    return dims(inputs), dims(outputs)


def _loop_operand(x, core, sizes, name):
    """The loop shape of ``x`` (its dims before the ``core`` ones); records each core size."""
    shape = _shape(x)
    if len(shape) < len(core):
        raise ValueError(f"{name}: input with shape {shape} does not have enough dimensions "
                         f"for its core dimensions {core}")
    for dim, size in zip(core, shape[len(shape) - len(core):]):
        if sizes.setdefault(dim, size) != size:
            raise ValueError(f"{name}: inconsistent size for core dimension {dim!r}: "
                             f"{size} vs {sizes[dim]}")
    return shape[:len(shape) - len(core)]


def vectorize(pyfunc, *, excluded=frozenset(), signature=None):
    """``pyfunc`` made to loop (by ``vmap``) over the broadcast leading dimensions of its
    arguments; each argument's last dimensions named in ``signature`` (``'(n),(n)->()'``) go
    to ``pyfunc`` whole, the others are scalars. ``excluded`` names positions or keywords
    passed through unchanged."""
    from compiler.batching import vmap
    in_cores, out_cores = _parse_signature(signature) if signature else (None, None)

    @functools.wraps(pyfunc)
    def wrapped(*args, **kwargs):
        positions = [k for k in range(len(args)) if k not in excluded]
        names = [k for k in kwargs if k not in excluded]
        if in_cores is not None and (names or len(in_cores) != len(positions)):
            raise TypeError(f"wrong number of positional arguments: expected "
                            f"{len(in_cores)}, got {len(positions)}")
        arrays = [_array(args[k]) for k in positions] + [_array(kwargs[k]) for k in names]
        if not arrays:
            return pyfunc(*args, **kwargs)
        cores = in_cores or [()] * len(arrays)
        sizes: dict = {}
        loops = [_loop_operand(x, c, sizes, pyfunc.__name__) for x, c in zip(arrays, cores)]
        loop_shape = _broadcast_shapes(*loops)
        flat = [jnp.reshape(jnp.broadcast_to(x, loop_shape + _shape(x)[len(l):]),
                            (-1,) + _shape(x)[len(l):]) for x, l in zip(arrays, loops)]

        def member_call(*values):
            call_args = list(args)
            for k, v in zip(positions, values):
                call_args[k] = v
            call_kwargs = dict(kwargs)
            call_kwargs.update(zip(names, values[len(positions):]))
            return pyfunc(*call_args, **call_kwargs)
        out = vmap(member_call)(*flat)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        if out_cores is not None:
            _check_outputs(outs, out_cores, sizes)
        shaped = [jnp.reshape(o, loop_shape + _shape(o)[1:]) for o in outs]
        return type(out)(shaped) if isinstance(out, (tuple, list)) else shaped[0]
    return wrapped


def _check_outputs(outs, out_cores, sizes):
    """ValueError unless each result has its signature's core dimensions (per member)."""
    if len(outs) != len(out_cores):
        raise ValueError(f"wrong number of outputs from the function: expected "
                         f"{len(out_cores)}, got {len(outs)}")
    for out, core in zip(outs, out_cores):
        member_shape = _shape(out)[1:]
        if len(member_shape) != len(core):
            raise ValueError(f"output of shape {member_shape} does not match the core "
                             f"dimensions {core} of the signature")
        for dim, size in zip(core, member_shape):
            if sizes.setdefault(dim, size) != size:
                raise ValueError(f"inconsistent size for core dimension {dim!r}: {size} vs "
                                 f"{sizes[dim]}")


# --- creation --------------------------------------------------------------------------------

def fromfunction(function, shape, *, dtype=float, **kwargs):
    """``function`` called with one index grid per dimension."""
    grids = indices(shape, dtype=_dt.canonicalize(np.dtype(dtype)))
    return function(*[grids[k] for k in range(len(_shape_tuple(shape)))], **kwargs)


def logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0):
    """``base ** linspace(start, stop, num)``."""
    if axis != 0:
        raise NotImplementedError("jnp.logspace: only axis=0 is supported by shardc")
    exponents = jnp.linspace(start, stop, num, endpoint=endpoint)
    result = jnp.power(_convert(base, _dt.float_), exponents)
    return jnp.astype(result, dtype) if dtype is not None else result


def geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0):
    """``num`` values from ``start`` to ``stop`` spaced evenly on a log scale; the ends are
    exact."""
    if axis != 0:
        raise NotImplementedError("jnp.geomspace: only axis=0 is supported by shardc")
    start, stop = _convert(start, _dt.float_), _convert(stop, _dt.float_)
    if not isinstance(start, Tracer) and (float(start) == 0 or float(stop) == 0):
        raise ValueError("Geometric sequence cannot include zero")
    sign = jnp.where(jnp.less(start, 0), -1.0, 1.0)
    log_start = jnp.log10(jnp.abs(start))
    log_stop = jnp.log10(jnp.abs(stop))
    result = jnp.multiply(sign, logspace(log_start, log_stop, num, endpoint=endpoint))
    if num > 0:
        first = jnp.concatenate([jnp.reshape(start, (1,)), result[1:]])
        result = first
        if endpoint and num > 1:
            result = jnp.concatenate([result[:-1], jnp.reshape(stop, (1,))])
    return jnp.astype(result, dtype) if dtype is not None else result


def vander(x, N=None, increasing=False):
    """The Vandermonde matrix of the 1-D ``x``: columns ``x ** (N - 1)`` down to ``x ** 0``."""
    x = _array(x)
    if _ndim(x) != 1:
        raise ValueError("x must be a one-dimensional array")
    n = _shape(x)[0]
    N = n if N is None else int(N)
    if N < 0:
        raise ValueError("N must be nonnegative")
    if N == 0:
        return jnp.zeros((n, 0), _dtype_of(x))
    columns = jnp.concatenate([jnp.ones((n, 1), _dtype_of(x)),
                               jnp.broadcast_to(x[:, None], (n, N - 1))], axis=1)
    from shardc.numpy._reductions import cumprod
    powers = cumprod(columns, axis=1, dtype=_dtype_of(x))
    return powers if increasing else jnp.flip(powers, 1)


# --- bits ------------------------------------------------------------------------------------

def packbits(a, axis=None, bitorder="big"):
    """Booleans (non-zero elements) packed eight to a uint8, along ``axis``."""
    if bitorder not in ("big", "little"):
        raise ValueError("'order' must be either 'little' or 'big'")
    a = _array(a)
    if not (_dt.is_int(_dtype_of(a)) or _dt.is_bool(_dtype_of(a))):
        raise TypeError("Expected an input array of integer or boolean data type")
    if axis is None:
        a, axis = jnp.ravel(a), 0
    axis = _axis(axis, _ndim(a))
    bits = jnp.astype(jnp.not_equal(a, 0), np.uint8)
    n = _shape(bits)[axis]
    pad = (-n) % 8
    widths = [(0, 0)] * _ndim(bits)
    widths[axis] = (0, pad)
    bits = jnp.pad(bits, widths)
    bits = jnp.moveaxis(bits, axis, -1)
    bits = jnp.reshape(bits, _shape(bits)[:-1] + ((n + pad) // 8, 8))
    shifts = np.arange(7, -1, -1) if bitorder == "big" else np.arange(8)
    weights = jnp.asarray((1 << shifts).astype(np.uint8))
    packed = jnp.sum(jnp.multiply(bits, weights), axis=-1, dtype=np.uint8)
    return jnp.moveaxis(packed, -1, axis)


def unpackbits(a, axis=None, count=None, bitorder="big"):
    """The bits of each uint8 as eight 0/1 uint8 values along ``axis`` (``count`` kept)."""
    if bitorder not in ("big", "little"):
        raise ValueError("'order' must be either 'little' or 'big'")
    a = _array(a)
    if _dtype_of(a) != np.uint8:
        raise TypeError("Expected an input array of unsigned byte data type")
    if axis is None:
        a, axis = jnp.ravel(a), 0
    axis = _axis(axis, _ndim(a))
    shifts = np.arange(7, -1, -1) if bitorder == "big" else np.arange(8)
    from shardc.numpy._ufuncs import right_shift
    bits = jnp.bitwise_and(right_shift(a[..., None], jnp.asarray(shifts.astype(np.uint8))),
                           np.uint8(1))
    bits = jnp.moveaxis(bits, _ndim(a), axis + 1)
    shape = list(_shape(a))
    shape[axis] *= 8
    bits = jnp.reshape(bits, tuple(shape))
    if count is not None:
        bits = jnp.take(bits, jnp.arange(builtins.min(int(count), shape[axis])), axis=axis) \
            if count >= 0 else jnp.take(bits, jnp.arange(shape[axis] + int(count)), axis=axis)
    return bits


# --- shapes and dtypes -----------------------------------------------------------------------

def ndim(a) -> int:
    """Number of dimensions of ``a``."""
    return _ndim(_array(a)) if not is_python_scalar(a) else 0


def shape(a) -> tuple:
    """The shape of ``a``."""
    return _shape(_array(a)) if not is_python_scalar(a) else ()


def size(a, axis=None) -> int:
    """Number of elements of ``a`` (along ``axis`` when given)."""
    s = shape(a)
    if axis is None:
        return int(np.prod(s, dtype=np.int64))
    return s[_axis(axis, len(s))]


def broadcast_shapes(*shapes) -> tuple:
    """The shape that arrays of ``shapes`` broadcast to."""
    return _broadcast_shapes(*[_shape_tuple(s) for s in shapes])


def broadcast_arrays(*args):
    """The arrays broadcast to one shape (a list)."""
    arrays = [_array(a) for a in args]
    target = _broadcast_shapes(*[_shape(a) for a in arrays]) if arrays else ()
    return [jnp.broadcast_to(a, target) for a in arrays]


def array_equiv(a1, a2) -> object:
    """True when ``a1`` and ``a2`` broadcast to one shape and are equal everywhere."""
    a1, a2 = _array(a1), _array(a2)
    try:
        _broadcast_shapes(_shape(a1), _shape(a2))
    except ValueError:
        return jnp.asarray(False)
    return jnp.all(jnp.equal(a1, a2))


def isdtype(dtype, kind) -> bool:
    """The array API's dtype test (``'real floating'``, ``'integral'``, a dtype, ...)."""
    return bool(np.isdtype(np.dtype(dtype), kind))


def isscalar(element) -> bool:
    """True for Python and numpy scalars and for 0-d arrays (JAX's rule: a traced scalar is a
    scalar too)."""
    if isinstance(element, (Tracer,)) or _is_array(element):
        return _shape(element) == ()
    return bool(np.isscalar(element))


iterable = np.iterable


# --- host I/O and printing (numpy's, on concrete values) -------------------------------------

def _host(a):
    return np.asarray(a)


def array_repr(arr, max_line_width=None, precision=None, suppress_small=None):
    """numpy's repr of the array's value."""
    return np.array_repr(_host(arr), max_line_width, precision, suppress_small)


def array_str(a, max_line_width=None, precision=None, suppress_small=None):
    """numpy's str of the array's value."""
    return np.array_str(_host(a), max_line_width, precision, suppress_small)


get_printoptions = np.get_printoptions
set_printoptions = np.set_printoptions
printoptions = np.printoptions


def save(file, arr, allow_pickle=True):
    """Save the array's value to a ``.npy`` file."""
    np.save(file, _host(arr), allow_pickle=allow_pickle)


def savez(file, *args, **kwds):
    """Save several arrays' values to an uncompressed ``.npz`` file."""
    np.savez(file, *[_host(a) for a in args], **{k: _host(v) for k, v in kwds.items()})


def load(file, *args, **kwargs):
    """numpy's ``load``; an array read from a ``.npy`` file comes back as a shardc array."""
    value = np.load(file, *args, **kwargs)
    return asarray(value) if isinstance(value, np.ndarray) else value


def frombuffer(buffer, dtype=float, count=-1, offset=0):
    """An array of the values in ``buffer``."""
    return asarray(np.frombuffer(buffer, dtype=dtype, count=count, offset=offset))


def fromstring(string, dtype=float, count=-1, *, sep):
    """An array of the values in a text ``string`` separated by ``sep``."""
    return asarray(np.fromstring(string, dtype=dtype, count=count, sep=sep))


def fromfile(*args, **kwargs):
    """An array of the values in a file (numpy's ``fromfile``)."""
    return asarray(np.fromfile(*args, **kwargs))


def fromiter(iterable, dtype, count=-1):
    """An array of the values of ``iterable``."""
    return asarray(np.fromiter(iterable, dtype=dtype, count=count))


def from_dlpack(x, /, *, device=None, copy=None):
    """An array sharing the value of a DLPack-exporting object (copied to the host)."""
    return asarray(np.from_dlpack(x))


def einsum_path(subscripts, *operands, optimize="greedy"):
    """numpy's contraction order for ``einsum`` with operands of these shapes."""
    shapes = [np.zeros(_shape(_array(o)), np.float32) for o in operands]
    return np.einsum_path(subscripts, *shapes, optimize=optimize)
