"""Products of arrays: ``dot``, ``matmul``, ``vdot``, ``inner``, ``outer``, ``tensordot``,
``trace``, the array API's ``matvec``/``vecmat``/``vecdot``, ``kron`` and ``cross``.

The matrix products take JAX's ``out_sharding`` (and ``precision``) keywords.
"""
from __future__ import annotations

import builtins
import contextlib
import functools

import numpy as np

from compiler.tracing import aval_of, bind
from ir import dtypes
from ir import primitives as p
from shardc.numpy._arithmetic import multiply, subtract
from shardc.numpy._core import (as_array, astype, broadcast_arrays, broadcast_shapes_of,
                                broadcast_to, canonical_axis, check_out_sharding, constrain,
                                dtype_of, expand_dims, ndim_of, promote, ravel, reshape,
                                shape_of, stack, zeros_like)
from shardc.numpy._diagonals import diagonal
from shardc.numpy._manipulation import moveaxis, squeeze, transpose
from shardc.numpy._reductions import sum
from ir.sharding import NamedSharding, PartitionSpec
from ir.sharding_rules import mesh_explicit, spec_of
from shardc.sharding import resolve_sharding

__all__ = [
    "dot", "matmul", "vdot", "inner", "outer", "tensordot", "trace", "matvec", "vecmat", "vecdot",
    "kron", "cross",
]


def _check_dot_dims(xs, ys, contract, batch):
    """TypeError naming the shapes when contracting or batch dimensions disagree in size."""
    for kind, (left, right) in (("contracting", contract), ("batch", batch)):
        lsizes = tuple(xs[d] for d in left)
        rsizes = tuple(ys[d] for d in right)
        if lsizes != rsizes:
            raise TypeError(f"dot_general requires {kind} dimensions to have the same shape, "
                            f"got {lsizes} and {rsizes} (operand shapes {xs} and {ys})")


_OUT_SHARDING: list = []     # the out_sharding of the product being computed (innermost last)
_PREFERRED: list = []        # the preferred_element_type of the products being computed


def promoted_dot_general(x, y, contract, batch=((), ()), result_positions=None):
    """``dot_general`` of ``x`` and ``y`` promoted to one dtype (contracting and batch
    dimensions checked). Under a product given ``out_sharding`` on Explicit axes, the dot
    takes it, as JAX's does: as it stands, or, where ``result_positions`` says which
    dimension of the product's result each of the dot's becomes (einsum's transposed
    result), each dot dimension takes its result dimension's entry."""
    x, y = promote(x, y)
    _check_dot_dims(shape_of(x), shape_of(y), contract, batch)
    extra = {}
    if _OUT_SHARDING and _OUT_SHARDING[-1] is not None:
        target = _OUT_SHARDING[-1]
        entries = list(target.spec) + [None] * (_dot_rank(x, y, contract, batch)
                                               - len(target.spec))
        if result_positions is not None:
            entries = [entries[k] for k in result_positions]
        extra["out_sharding"] = NamedSharding(target.mesh, PartitionSpec(
            *entries, unreduced=target.spec.unreduced, reduced=target.spec.reduced))
        _OUT_SHARDING[-1] = None          # taken: one product per call
    preferred = _PREFERRED[-1] if _PREFERRED and _PREFERRED[-1] is not None else dtype_of(x)
    return bind(p.dot_general_p, x, y, dimension_numbers=(contract, batch),
                preferred_element_type=preferred, **extra)


def preferred_dtype():
    """The accumulation dtype asked for around the current product (None: the operands')."""
    return _PREFERRED[-1] if _PREFERRED else None


@contextlib.contextmanager
def preferring(dtype):
    """Products computed inside accumulate in (and return) ``dtype`` (None: the operands')."""
    _PREFERRED.append(None if dtype is None else dtypes.canonicalize(dtype))
    try:
        yield
    finally:
        _PREFERRED.pop()


def _dot_rank(x, y, contract, batch) -> int:
    return ndim_of(x) + ndim_of(y) - 2 * len(contract[0]) - len(batch[0])


def accepts_out_sharding(fn):
    """Let ``fn`` take ``out_sharding`` (a NamedSharding, or a PartitionSpec on the mesh of
    ``set_mesh``), ``precision`` and ``preferred_element_type`` (the products accumulate in,
    and return, that dtype: bfloat16 operands, float32 sums), as JAX's do. On Explicit axes
    the dot takes it, as JAX's does (so a contraction split on both sides is not ambiguous),
    in the order of the dot's dimensions, which matmul then moves with them. Only Explicit axes may be named (JAX's ValueError otherwise); a spec naming none, on
    another mesh, constrains the result to that layout."""

    @functools.wraps(fn)
    def wrapper(*args, out_sharding=None, precision=None, preferred_element_type=None,
                **kwargs):
        if preferred_element_type is not None:
            with preferring(preferred_element_type):
                result = wrapper(*args, out_sharding=out_sharding, **kwargs)
            return astype(result, dtypes.canonicalize(preferred_element_type))
        if out_sharding is None:
            return fn(*args, **kwargs)
        check_out_sharding(out_sharding, "einsum" if fn.__name__ == "einsum" else "dot_general")
        sharding = resolve_sharding(out_sharding, f"{fn.__name__}(out_sharding=...)")
        if not mesh_explicit(sharding.mesh):
            return constrain(fn(*args, **kwargs), sharding)
        _OUT_SHARDING.append(sharding)
        try:
            result = fn(*args, **kwargs)
            taken = _OUT_SHARDING[-1] is None
        finally:
            _OUT_SHARDING.pop()
        # as JAX's: a dot took the sharding, and what follows it (matmul's transpose) moves
        # it with the dimensions; a product that took none is laid out as asked
        return result if taken else constrain(result, sharding)
    return wrapper


@accepts_out_sharding
def dot(x, y):
    """numpy's dot: matrix product on the last axis of ``x`` and second-to-last of ``y``."""
    xs, ys = shape_of(x), shape_of(y)
    if xs == () or ys == ():
        return multiply(x, y)
    y_axis = 0 if len(ys) == 1 else len(ys) - 2
    return promoted_dot_general(x, y, ((len(xs) - 1,), (y_axis,)))


@accepts_out_sharding
def matmul(x, y):
    """``x @ y`` with numpy's batching rules, as JAX's builds it: batch dimensions of equal
    size and split are the dot's batch dimensions; one that only one operand has (by rank,
    or as an unsplit 1 the other broadcasts) is a free dimension of that operand, so it is
    never broadcast and keeps its split. Batch dimensions split unalike are JAX's
    ValueError."""
    xs, ys = shape_of(x), shape_of(y)
    if xs == () or ys == ():
        raise ValueError(f"matmul: operands must be at least 1-dimensional, got shapes {xs} "
                         f"and {ys}")
    if len(xs) <= 2 and len(ys) <= 2:
        return dot(x, y)
    x_mat, y_mat = len(xs) > 1, len(ys) > 1
    plan = _MatmulPlan(_batch_dims(x, x_mat), _batch_dims(y, y_mat),
                       lambda: ValueError(f"Incompatible types for matmul arguments: "
                                          f"{aval_of(x).str_long()} and "
                                          f"{aval_of(y).str_long()}"))
    x, y = squeeze(x, tuple(plan.x_squeeze)), squeeze(y, tuple(plan.y_squeeze))
    # the dot's results come batch, x's free, y's free; ``perm`` puts them in numpy's order
    order = plan.batch + plan.x_free + ([plan.nb] if x_mat else []) + plan.y_free + (
        [plan.nb + x_mat] if y_mat else [])
    perm = tuple(int(k) for k in np.argsort(order))
    out = promoted_dot_general(
        x, y, ((ndim_of(x) - 1,), (ndim_of(y) - 1 - y_mat,)), (plan.x_batch, plan.y_batch))
    out = transpose(out, perm)
    return expand_dims(out, tuple(plan.both_squeeze)) if plan.both_squeeze else out


def _batch_dims(x, is_matrix: bool) -> list:
    """(size, split) of each batch dimension of a matmul operand (none for a vector)."""
    if not is_matrix:
        return []
    aval = aval_of(x)
    return list(zip(aval.shape[:-2], spec_of(aval)[:-2]))


class _MatmulPlan:
    """How matmul's batch dimensions reach the dot (JAX's plan): by output position, the
    dot's batch dimensions (``batch``) and each operand's free ones (``x_free``, ``y_free``);
    the operands' dimensions squeezed first and the output dimensions both squeezed."""

    def __init__(self, x_dims: list, y_dims: list, incompatible):
        self.nb = nb = max(len(x_dims), len(y_dims))
        x_dims = [None] * (nb - len(x_dims)) + x_dims
        y_dims = [None] * (nb - len(y_dims)) + y_dims
        self.batch, self.x_free, self.y_free = [], [], []
        self.x_batch, self.y_batch, self.x_squeeze, self.y_squeeze = [], [], [], []
        self.both_squeeze = []
        for i, (a, b) in enumerate(zip(x_dims, y_dims)):
            x_at = len(self.batch) + len(self.x_free) + len(self.x_squeeze)
            y_at = len(self.batch) + len(self.y_free) + len(self.y_squeeze)
            if a is None:
                self.y_free.append(i)
            elif b is None:
                self.x_free.append(i)
            elif a == (1, ()) and b == (1, ()):
                self.x_squeeze.append(x_at)
                self.y_squeeze.append(y_at)
                self.both_squeeze.append(i)
            elif a == (1, ()):
                self.y_free.append(i)
                self.x_squeeze.append(x_at)
            elif b == (1, ()):
                self.x_free.append(i)
                self.y_squeeze.append(y_at)
            elif a == b:
                self.x_batch.append(len(self.batch) + len(self.x_free))
                self.y_batch.append(len(self.batch) + len(self.y_free))
                self.batch.append(i)
            else:
                raise incompatible()


@accepts_out_sharding
def vdot(x, y):
    """Dot product of the flattened operands, the first conjugated."""
    from shardc.numpy._ufuncs import conj
    return dot(ravel(conj(x)), ravel(y))


@accepts_out_sharding
def inner(x, y):
    """Inner product over the last axes of ``x`` and ``y`` (a scalar operand multiplies)."""
    if ndim_of(x) == 0 or ndim_of(y) == 0:
        return multiply(x, y)
    return promoted_dot_general(x, y, ((len(shape_of(x)) - 1,), (len(shape_of(y)) - 1,)))


def outer(x, y):
    """Outer product of the flattened operands: ``out[i, j] = x[i] * y[j]``."""
    x, y = ravel(x), ravel(y)
    return multiply(reshape(x, (-1, 1)), reshape(y, (1, -1)))


@accepts_out_sharding
def tensordot(x, y, axes=2):
    """Contract ``axes`` of ``x`` with ``axes`` of ``y`` (an int: the last/first ``axes``)."""
    xs, ys = shape_of(x), shape_of(y)
    if isinstance(axes, (int, np.integer)) and not isinstance(axes, bool):
        if axes > min(len(xs), len(ys)):
            raise TypeError(f"Number of tensordot axes (axes {axes}) exceeds input ranks "
                            f"({xs} and {ys})")
        left = tuple(range(len(xs) - axes, len(xs)))
        right = tuple(range(axes))
    elif isinstance(axes, (tuple, list)) and len(axes) == 2:
        left, right = axes
        if isinstance(left, int) and isinstance(right, int):
            left, right = (left,), (right,)
        elif isinstance(left, (tuple, list)) and isinstance(right, (tuple, list)):
            if len(left) != len(right):
                raise TypeError(f"tensordot requires axes lists to have equal length, got "
                                f"{left} and {right}.")
        else:
            raise TypeError(f"tensordot requires both axes lists to be either ints, tuples or "
                            f"lists, got {left} and {right}")
    else:
        raise TypeError("tensordot axes argument must be an int, a pair of ints, or a pair of "
                        "lists/tuples of ints.")
    return promoted_dot_general(x, y, (tuple(canonical_axis(a, len(xs)) for a in left),
                               tuple(canonical_axis(a, len(ys)) for a in right)))


def trace(x, offset=0, axis1=0, axis2=1, dtype=None):
    """Sum of diagonal ``offset`` over ``axis1`` and ``axis2`` (in ``dtype`` if given)."""
    ndim = len(shape_of(x))
    if canonical_axis(axis1, ndim) == canonical_axis(axis2, ndim):
        raise ValueError(f"axis1 and axis2 can not be same. axis1={axis1} and axis2={axis2}")
    return sum(diagonal(x, offset, axis1, axis2), axis=-1, dtype=dtype)


def matvec(x1, x2, /):
    """Matrix-vector products over the last axes: ``(..., m, n) x (..., n) -> (..., m)``."""
    x1, x2 = as_array(x1), as_array(x2)
    return matmul(x1, x2[..., None])[..., 0]


def vecmat(x1, x2, /):
    """Vector-matrix products over the last axes: ``(..., n) x (..., n, m) -> (..., m)``, the
    vector conjugated (the array API's and JAX's)."""
    x1, x2 = as_array(x1), as_array(x2)
    if dtype_of(x1).kind == "c":
        x1 = bind(p.conj_p, x1)
    return matmul(x1[..., None, :], x2)[..., 0, :]


def vecdot(x1, x2, /, *, axis=-1):
    """Dot products of vectors along ``axis`` (other axes broadcast), the first conjugated
    (as the array API's and JAX's)."""
    x1, x2 = promote(as_array(x1), as_array(x2))
    if dtype_of(x1).kind == "c":
        x1 = bind(p.conj_p, x1)
    if shape_of(x1)[axis] != shape_of(x2)[axis]:
        raise ValueError(f"vecdot: axes of size {shape_of(x1)[axis]} and {shape_of(x2)[axis]} "
                         "differ")
    # ``axis`` of each operand is its own vector axis; the others broadcast (numpy's gufunc
    # rule); the result keeps the operands' dtype, as a dot does
    x1, x2 = moveaxis(x1, axis, -1), moveaxis(x2, axis, -1)
    return sum(multiply(x1, x2), axis=-1, dtype=dtype_of(x1))


def kron(a, b):
    """The Kronecker product: ``b`` scaled by each element of ``a``, tiled."""
    a, b = promote(as_array(a), as_array(b))
    ndim = builtins.max(ndim_of(a), ndim_of(b))
    a = reshape(a, (1,) * (ndim - ndim_of(a)) + shape_of(a))
    b = reshape(b, (1,) * (ndim - ndim_of(b)) + shape_of(b))
    a_wide = reshape(a, tuple(d for s in shape_of(a) for d in (s, 1)))
    b_wide = reshape(b, tuple(d for s in shape_of(b) for d in (1, s)))
    out = multiply(a_wide, b_wide)
    return reshape(out, tuple(x * y for x, y in zip(shape_of(a), shape_of(b))))


def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """Cross products of 3-vectors (or 2-vectors, whose result is the z component)."""
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = promote(as_array(a), as_array(b))
    a, b = moveaxis(a, axisa, -1), moveaxis(b, axisb, -1)
    if shape_of(a)[-1] not in (2, 3) or shape_of(b)[-1] not in (2, 3):
        raise ValueError("Dimension must be either 2 or 3 for cross product")
    if shape_of(a)[-1] == 2 and shape_of(b)[-1] == 2:
        return subtract(multiply(a[..., 0], b[..., 1]),
                            multiply(a[..., 1], b[..., 0]))
    a0, a1 = a[..., 0], a[..., 1]
    a2 = a[..., 2] if shape_of(a)[-1] == 3 else zeros_like(a0)
    b0, b1 = b[..., 0], b[..., 1]
    b2 = b[..., 2] if shape_of(b)[-1] == 3 else zeros_like(b0)
    c = stack(broadcast_arrays(
        subtract(multiply(a1, b2), multiply(a2, b1)),
        subtract(multiply(a2, b0), multiply(a0, b2)),
        subtract(multiply(a0, b1), multiply(a1, b0))), -1)
    return moveaxis(c, -1, axisc)
