"""The rest of ``jax.lax`` that user code reaches for: cumulative ops, sorting, ``map``,
``associative_scan``, ``reduce``, special functions, shape helpers, ``pshuffle`` and
``pswapaxes``. Each is built from existing primitives where that is exact; the special
functions bind their own primitives. ``shardc.lax`` re-exports every name in ``__all__``.
"""
from __future__ import annotations

import enum

import numpy as np

from compiler import tree
from compiler.control_flow import scan
from compiler.tracing import bind
from ir import dtypes as _dt
from ir import primitives as p
import shardc.numpy as jnp

__all__ = [
    "map", "associative_scan", "cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp",
    "top_k", "sort", "sort_key_val", "clamp", "broadcast", "expand_dims", "index_in_dim",
    "slice_in_dim", "full", "full_like", "batch_matmul", "square", "Precision", "erf", "erfc",
    "erf_inv", "lgamma", "digamma", "polygamma", "reduce", "dot", "pshuffle", "pswapaxes", "integer_pow",
    "reciprocal", "exp2", "log1p", "expm1", "tan", "atan2", "pow", "sign", "floor", "ceil",
    "round", "is_finite", "cbrt", "reduce_sum", "reduce_max", "reduce_min",
    "reduce_prod", "argmax", "argmin", "squeeze", "rev", "pad", "bitcast_convert_type",
    "reduce_precision",
]


def _array(x):
    return jnp.asarray(x) if not hasattr(x, "dtype") else x


def _axis(axis, ndim):
    if not -ndim <= axis < max(ndim, 1):
        raise ValueError(f"axis {axis} is out of bounds for an array of rank {ndim}")
    return axis % max(ndim, 1)


# --- precision ----------------------------------------------------------------------------------

class Precision(enum.Enum):
    """Matmul precision (``DEFAULT``, ``HIGH``, ``HIGHEST``); accepted by ``dot``,
    ``dot_general`` and ``einsum``. shardc computes every matmul in its operands' dtype with
    numpy, which is what ``HIGHEST`` asks for, so the three give one result."""
    DEFAULT = 0
    HIGH = 1
    HIGHEST = 2

    @classmethod
    def _missing_(cls, value):
        names = {"default": cls.DEFAULT, "bfloat16": cls.DEFAULT, "fastest": cls.DEFAULT,
                 "high": cls.HIGH, "bfloat16_3x": cls.HIGH, "tensorfloat32": cls.HIGH,
                 "highest": cls.HIGHEST, "float32": cls.HIGHEST}
        if isinstance(value, str) and value.lower() in names:
            return names[value.lower()]
        return None


# --- cumulative ---------------------------------------------------------------------------------

def _cumulative(prim, operand, axis, reverse):
    operand = _array(operand)
    return bind(prim, operand, axis=_axis(axis, operand.ndim), reverse=bool(reverse))


def cumsum(operand, axis=0, reverse=False):
    """Cumulative sum along ``axis`` (from the end when ``reverse``); keeps the dtype."""
    return _cumulative(p.cumsum_p, operand, axis, reverse)


def cumprod(operand, axis=0, reverse=False):
    """Cumulative product along ``axis``."""
    return _cumulative(p.cumprod_p, operand, axis, reverse)


def cummax(operand, axis=0, reverse=False):
    """Running maximum along ``axis``."""
    return _cumulative(p.cummax_p, operand, axis, reverse)


def cummin(operand, axis=0, reverse=False):
    """Running minimum along ``axis``."""
    return _cumulative(p.cummin_p, operand, axis, reverse)


def cumlogsumexp(operand, axis=0, reverse=False):
    """Running ``log(sum(exp(x)))`` along ``axis``, stable at every step (each prefix is
    combined with ``logaddexp``, so no global shift can underflow small prefixes)."""
    operand = _array(operand)
    if not _dt.is_inexact(operand.dtype):
        raise TypeError(f"cumlogsumexp requires a floating-point operand, got {operand.dtype}")
    return associative_scan(jnp.logaddexp, operand, reverse=reverse,
                            axis=_axis(axis, operand.ndim))


# --- associative_scan ---------------------------------------------------------------------------

def _slice_axis(x, start, stop, step, axis):
    index = [slice(None)] * x.ndim
    index[axis] = slice(start, stop, step)
    return x[tuple(index)]


def _interleave(evens, odds, axis):
    """``[e0, o0, e1, o1, ...]`` along ``axis``; ``evens`` has as many items or one more."""
    n_even, n_odd = evens.shape[axis], odds.shape[axis]
    if n_even > n_odd:
        pad = [(0, 0, 0)] * odds.ndim
        pad[axis] = (0, 1, 0)
        odds = jnp.pad(odds, [(lo, hi) for lo, hi, _ in pad])
    pairs = jnp.stack([evens, odds], axis=axis + 1)
    shape = list(evens.shape)
    shape[axis] = 2 * n_even
    merged = jnp.reshape(pairs, tuple(shape))
    return _slice_axis(merged, 0, n_even + n_odd, 1, axis)


def associative_scan(fn, elems, reverse=False, axis=0):
    """Inclusive scan of ``elems`` (an array or a pytree of arrays of one length along ``axis``)
    with an associative ``fn``, in ``O(log n)`` steps of ``fn`` on whole slices.

    ``fn(a, b)`` takes and returns pytrees like ``elems`` and must act elementwise along
    ``axis`` (as JAX requires).

    >>> lax.associative_scan(jnp.add, jnp.arange(5))      # [0, 1, 3, 6, 10]
    """
    leaves, treedef = tree.tree_flatten(elems)
    leaves = [_array(x) for x in leaves]
    if not leaves:
        return elems
    axis = _axis(axis, leaves[0].ndim)
    lengths = {x.shape[axis] for x in leaves}
    if len(lengths) != 1:
        raise ValueError(f"associative_scan: every leaf must have one length along axis {axis}, "
                         f"got {sorted(lengths)}")
    if reverse:
        leaves = [jnp.flip(x, axis) for x in leaves]

    def combine(a, b):
        out = fn(tree.tree_unflatten(treedef, a), tree.tree_unflatten(treedef, b))
        return [_array(x) for x in tree.tree_leaves(out)]

    def scan_leaves(xs):
        n = xs[0].shape[axis]
        if n < 2:
            return xs
        # combine neighbours, scan the half-length result, then fill in the even positions
        pairs = combine([_slice_axis(x, 0, n - 1, 2, axis) for x in xs],
                        [_slice_axis(x, 1, n, 2, axis) for x in xs])
        odds = scan_leaves(pairs)
        if n % 2 == 0:
            evens = combine([_slice_axis(x, 0, -1, 1, axis) for x in odds],
                            [_slice_axis(x, 2, n, 2, axis) for x in xs])
        else:
            evens = combine(odds, [_slice_axis(x, 2, n, 2, axis) for x in xs])
        evens = [jnp.concatenate([_slice_axis(x, 0, 1, 1, axis), e], axis=axis)
                 for x, e in zip(xs, evens)]
        return [_interleave(e, o, axis) for e, o in zip(evens, odds)]

    out = scan_leaves(leaves)
    if reverse:
        out = [jnp.flip(x, axis) for x in out]
    return tree.tree_unflatten(treedef, out)


# --- map ----------------------------------------------------------------------------------------

def map(f, xs, *, batch_size=None):
    """``f`` applied to each slice of ``xs`` (a pytree) along its leading axis, one after the
    other (a ``scan``); with ``batch_size``, ``vmap`` over batches of that many slices, and
    the remainder after.

    >>> lax.map(lambda row: row.sum(), jnp.ones((3, 4)))      # [4, 4, 4]
    """
    if batch_size is None:
        return scan(lambda carry, x: (carry, f(x)), None, xs)[1]
    from shardc.batching_api import vmap
    leaves, treedef = tree.tree_flatten(xs)
    n = leaves[0].shape[0]
    batch_size = int(batch_size)
    if batch_size < 1:
        raise ValueError(f"lax.map: batch_size must be a positive int, got {batch_size}")
    full_batches, rest = divmod(n, batch_size)
    outs = []
    if full_batches:
        batched = [jnp.reshape(x[:full_batches * batch_size],
                               (full_batches, batch_size) + x.shape[1:]) for x in leaves]
        out = map(vmap(f), tree.tree_unflatten(treedef, batched))
        outs.append(tree.tree_map(lambda y: jnp.reshape(y, (-1,) + y.shape[2:]), out))
    if rest:
        outs.append(vmap(f)(tree.tree_unflatten(treedef,
                                                [x[full_batches * batch_size:] for x in leaves])))
    if len(outs) == 1:
        return outs[0]
    return tree.tree_map(lambda a, b: jnp.concatenate([a, b]), outs[0], outs[1])


# --- sorting ------------------------------------------------------------------------------------

def sort(operand, dimension=-1, is_stable=True, num_keys=1):
    """Sort ``operand`` (an array, or a sequence of arrays of one shape ordered together by the
    first ``num_keys``) along ``dimension``; floats are ordered ``-nan < -inf < ... < inf <
    nan``. The sort is always stable."""
    single = not isinstance(operand, (tuple, list))
    operands = [_array(operand)] if single else [_array(x) for x in operand]
    shapes = {x.shape for x in operands}
    if len(shapes) != 1:
        raise TypeError(f"lax.sort: operands must have one shape, got {sorted(shapes)}")
    if not 1 <= num_keys <= len(operands):
        raise ValueError(f"lax.sort: num_keys={num_keys} must be in [1, {len(operands)}]")
    dimension = _axis(dimension, operands[0].ndim)
    outs = list(bind(p.sort_p, *operands, dimension=dimension, num_keys=int(num_keys)))
    return outs[0] if single else tuple(outs)


def sort_key_val(keys, values, dimension=-1, is_stable=True):
    """``(keys, values)`` both reordered by the stable sort of ``keys`` along ``dimension``."""
    return sort((keys, values), dimension=dimension, num_keys=1)


def top_k(operand, k):
    """The ``k`` largest entries along the last axis, largest first, and their indices
    (int32); equal entries come in index order."""
    operand = _array(operand)
    k = int(k)
    if not 0 <= k <= operand.shape[-1]:
        raise ValueError(f"top_k: k={k} must be in [0, {operand.shape[-1]}] (the last axis)")
    order = jnp.argsort(operand, axis=-1, stable=True, descending=True)[..., :k]
    return jnp.take_along_axis(operand, order, axis=-1), jnp.astype(order, np.int32)


# --- elementwise --------------------------------------------------------------------------------

def _special(prim, x):
    x = _array(x)
    if not _dt.is_inexact(x.dtype):
        raise TypeError(f"lax.{prim.name} requires a floating-point operand, got {x.dtype}")
    return bind(prim, x)


def erf(x):
    """The error function ``2/sqrt(pi) * integral_0^x exp(-t^2) dt``."""
    return _special(p.erf_p, x)


def erfc(x):
    """``1 - erf(x)``, accurate where ``erf(x)`` is near 1."""
    return _special(p.erfc_p, x)


def erf_inv(x):
    """The inverse of ``erf`` on ``(-1, 1)`` (``+-inf`` at ``+-1``, nan outside)."""
    return _special(p.erf_inv_p, x)


def lgamma(x):
    """``log|Gamma(x)|`` (``inf`` at the poles ``0, -1, -2, ...``)."""
    return _special(p.lgamma_p, x)


def digamma(x):
    """``d/dx log Gamma(x)`` (nan at the poles)."""
    return _special(p.digamma_p, x)


def polygamma(m, x):
    """The ``m``-th derivative of ``digamma`` at ``x`` (``m`` a non-negative integer, as an
    array of ``x``'s dtype or a Python int); differentiable in ``x``."""
    x = _array(x)
    if not _dt.is_inexact(x.dtype):
        raise TypeError(f"lax.polygamma requires a floating-point x, got {x.dtype}")
    m = jnp.astype(_array(m), x.dtype)
    if jnp.shape(m) != x.shape:
        m = jnp.broadcast_to(m, x.shape)
    return bind(p.polygamma_p, m, x)


def clamp(min, x, max):
    """``x`` limited to ``[min, max]`` (``min`` and ``max`` are scalars or ``x``'s shape)."""
    x = _array(x)
    for name, bound in (("min", min), ("max", max)):
        shape = jnp.shape(bound)
        if shape not in ((), x.shape):
            raise TypeError(f"clamp: {name} must be a scalar or have x's shape {x.shape}, "
                            f"got {shape}")
    return jnp.minimum(jnp.maximum(x, jnp.astype(min, x.dtype)), jnp.astype(max, x.dtype))


def square(x):
    return jnp.multiply(x, x)


def integer_pow(x, y):
    """``x ** y`` for a Python int ``y`` (by repeated multiplication, as JAX)."""
    return jnp.power(x, int(y))


def reciprocal(x):
    return jnp.reciprocal(x)


exp2, log1p, expm1, tan, atan2, sign = (jnp.exp2, jnp.log1p, jnp.expm1, jnp.tan, jnp.arctan2,
                                        jnp.sign)
floor, ceil, is_finite, cbrt = jnp.floor, jnp.ceil, jnp.isfinite, jnp.cbrt   # rem: shardc.lax


def pow(x, y):
    return jnp.power(x, y)


def round(x, rounding_method=0):
    """Round to the nearest integer: halves away from zero (``rounding_method=0``, the
    default) or to even (``1``)."""
    if int(rounding_method) == 1:
        return jnp.round(x)
    return bind(p.round_p, _array(x))


# --- bits ---------------------------------------------------------------------------------------

def bitcast_convert_type(operand, new_dtype):
    """``operand``'s bits read as ``new_dtype``: a narrower dtype adds a last dimension of the
    width ratio, a wider one needs that last dimension and removes it.

    >>> lax.bitcast_convert_type(jnp.float32(1.0), jnp.uint32)      # 0x3f800000
    """
    return bind(p.bitcast_convert_type_p, _array(operand), new_dtype=_dt.canonicalize(new_dtype))


def reduce_precision(operand, exponent_bits, mantissa_bits):
    """``operand`` rounded to a float format with ``exponent_bits`` and ``mantissa_bits`` and
    back (round to nearest even; too large gives inf, below the format's smallest normal gives
    a signed zero, NaN stays NaN), as XLA's ReducePrecision. As in JAX it is linear to
    autodiff: tangents and cotangents are rounded the same way.

    >>> lax.reduce_precision(x, 8, 7)       # x rounded to bfloat16's precision
    """
    operand = _array(operand)
    if not _dt.is_inexact(operand.dtype):
        raise TypeError(f"reduce_precision requires a floating-point operand, got "
                        f"{operand.dtype}")
    exponent_bits, mantissa_bits = int(exponent_bits), int(mantissa_bits)
    if exponent_bits < 1 or mantissa_bits < 0:
        raise ValueError(f"reduce_precision: exponent_bits must be >= 1 and mantissa_bits >= 0, "
                         f"got {exponent_bits} and {mantissa_bits}")
    return bind(p.reduce_precision_p, operand, exponent_bits=exponent_bits,
                mantissa_bits=mantissa_bits)


# --- shapes -------------------------------------------------------------------------------------

def broadcast(operand, sizes):
    """``operand`` with new leading dimensions ``sizes``."""
    operand = _array(operand)
    sizes = tuple(int(s) for s in sizes)
    return bind(p.broadcast_in_dim_p, operand, shape=sizes + operand.shape,
                broadcast_dimensions=tuple(range(len(sizes), len(sizes) + operand.ndim)))


def expand_dims(array, dimensions):
    return jnp.expand_dims(array, tuple(dimensions))


def squeeze(array, dimensions):
    return jnp.squeeze(array, tuple(dimensions))


def rev(operand, dimensions):
    return jnp.flip(operand, tuple(dimensions))


def pad(operand, padding_value, padding_config):
    """``operand`` with ``(low, high, interior)`` padding per dimension (negative low or high
    trims)."""
    operand = _array(operand)
    config = tuple((int(lo), int(hi), int(interior)) for lo, hi, interior in padding_config)
    if any(interior < 0 for _, _, interior in config):
        raise ValueError(f"pad: interior padding must be non-negative, got {config}")
    trims = [(max(0, -lo), max(0, -hi)) for lo, hi, _ in config]
    grown = tuple((max(0, lo), max(0, hi), interior) for lo, hi, interior in config)
    out = bind(p.pad_p, operand, jnp.astype(padding_value, operand.dtype), padding_config=grown)
    if any(lo or hi for lo, hi in trims):
        out = out[tuple(slice(lo, d - hi) for (lo, hi), d in zip(trims, out.shape))]
    return out


def slice_in_dim(operand, start_index, limit_index, stride=1, axis=0):
    operand = _array(operand)
    axis = _axis(axis, operand.ndim)
    return _slice_axis(operand, start_index, limit_index, stride, axis)


def index_in_dim(operand, index, axis=0, keepdims=True):
    """The slice at the static ``index`` along ``axis`` (negative from the end)."""
    operand = _array(operand)
    axis = _axis(axis, operand.ndim)
    size = operand.shape[axis]
    if not -size <= index < size:
        raise IndexError(f"index_in_dim: index {index} is out of bounds for axis {axis} "
                         f"of size {size}")
    index = index % size
    out = _slice_axis(operand, index, index + 1, 1, axis)
    return out if keepdims else jnp.squeeze(out, axis)


def full(shape, fill_value, dtype=None):
    return jnp.full(tuple(shape) if not isinstance(shape, int) else (shape,), fill_value, dtype)


def full_like(x, fill_value, dtype=None, shape=None):
    return jnp.full_like(x, fill_value, dtype=dtype, shape=shape)


def dot(lhs, rhs, precision=None, preferred_element_type=None):
    """Vector or matrix product of operands of rank 1 or 2: ``lhs``'s last dimension with
    ``rhs``'s first."""
    lhs, rhs = _array(lhs), _array(rhs)
    if lhs.ndim not in (1, 2) or rhs.ndim not in (1, 2) or lhs.shape[-1] != rhs.shape[0]:
        raise TypeError(f"lax.dot: operands of rank 1 or 2 with lhs's last dimension equal to "
                        f"rhs's first, got {lhs.shape} and {rhs.shape}")
    from shardc.lax import dot_general
    return dot_general(lhs, rhs, (((lhs.ndim - 1,), (0,)), ((), ())), precision=precision,
                       preferred_element_type=preferred_element_type)


def batch_matmul(lhs, rhs, precision=None):
    """Batched matrix product ``[..., m, k] @ [..., k, n]`` over equal leading dimensions."""
    lhs, rhs = _array(lhs), _array(rhs)
    if lhs.ndim < 2 or lhs.ndim != rhs.ndim or lhs.shape[:-2] != rhs.shape[:-2]:
        raise ValueError(f"batch_matmul: operands must have one rank (2 or more) and equal batch "
                         f"dimensions, got {lhs.shape} and {rhs.shape}")
    batch = tuple(range(lhs.ndim - 2))
    from shardc.lax import dot_general
    return dot_general(lhs, rhs, (((lhs.ndim - 1,), (rhs.ndim - 2,)), (batch, batch)),
                       precision=precision)


# --- reductions ---------------------------------------------------------------------------------

def reduce_sum(operand, axes):
    return jnp.sum(operand, axis=tuple(axes))


def reduce_max(operand, axes):
    return jnp.max(operand, axis=tuple(axes))


def reduce_min(operand, axes):
    return jnp.min(operand, axis=tuple(axes))


def reduce_prod(operand, axes):
    return jnp.prod(operand, axis=tuple(axes))


def argmax(operand, axis, index_dtype):
    return jnp.astype(jnp.argmax(operand, axis=axis), index_dtype)


def argmin(operand, axis, index_dtype):
    return jnp.astype(jnp.argmin(operand, axis=axis), index_dtype)


def _identity(prim, dtype):
    """The identity of a monoid primitive in ``dtype``."""
    dtype = np.dtype(dtype)
    if prim in (p.add_p, p.or_p, p.xor_p):
        return np.zeros((), dtype)[()] if dtype != np.bool_ else np.False_
    if prim is p.mul_p:
        return np.ones((), dtype)[()]
    if prim is p.and_p:
        return np.True_ if dtype == np.bool_ else np.asarray(-1).astype(dtype)[()]
    lowest, highest = ((-np.inf, np.inf) if _dt.is_inexact(dtype) else
                       (False, True) if dtype == np.bool_ else
                       (np.iinfo(dtype).min, np.iinfo(dtype).max))
    return np.asarray(lowest if prim is p.max_p else highest, dtype)[()]


_MONOID_REDUCERS = {
    p.add_p: jnp.sum, p.mul_p: jnp.prod, p.max_p: jnp.max, p.min_p: jnp.min,
    p.and_p: jnp.all, p.or_p: jnp.any,
}


def _monoid_of(computation, dtype):
    """The primitive ``computation`` applies to two scalars of ``dtype`` when it is exactly one
    of add/mul/max/min/and/or on its two arguments, else None."""
    from compiler.jit import make_jaxpr
    scalar = np.zeros((), dtype)
    try:
        program = make_jaxpr(computation)(scalar, scalar).jaxpr
    except Exception as error:        # re-raised with the reason lax.reduce needs it
        raise TypeError(f"lax.reduce: computation could not be traced on two {dtype} scalars: "
                        f"{error}") from error
    if len(program.eqns) != 1 or len(program.outvars) != 1:
        return None
    (eqn,) = program.eqns
    if eqn.primitive not in _MONOID_REDUCERS or eqn.outvars[0] is not program.outvars[0]:
        return None
    if set(_ids(eqn.invars)) != set(_ids(program.invars)):
        return None
    return eqn.primitive


def _ids(values):
    return [id(v) for v in values]


def reduce(operands, init_values, computation, dimensions):
    """Reduce ``operands`` over ``dimensions`` with ``computation`` starting from
    ``init_values``. As in JAX, a computation that is add, mul, max, min, and or or, with its
    identity as the initial value, becomes the matching reduction; shardc supports exactly
    those (a single operand) and says so for anything else.

    >>> lax.reduce(x, 0.0, lax.add, (0,))        # x.sum(0)
    """
    single = not isinstance(operands, (tuple, list))
    if not single:
        if len(operands) != 1:
            raise NotImplementedError("lax.reduce: shardc supports one operand (a monoid "
                                      f"reduction); got {len(operands)} operands")
        operands, init_values = operands[0], init_values[0]
    operand = _array(operands)
    prim = _monoid_of(computation, operand.dtype)
    if prim is None:
        raise NotImplementedError(
            "lax.reduce: the computation is not one of add, mul, max, min, and, or on its two "
            "arguments; shardc reduces only those monoids (write the reduction with "
            "jnp.sum/prod/max/min or lax.associative_scan)")
    init = np.asarray(init_values) if not hasattr(init_values, "aval") else None
    identity = _identity(prim, operand.dtype)
    if init is None or init.shape != () or not np.array_equal(init.astype(operand.dtype),
                                                            identity):
        raise NotImplementedError(
            f"lax.reduce: with computation {prim.name}, init_values must be its identity "
            f"{identity!r} (a concrete scalar); got {init_values!r}")
    dimensions = tuple(_axis(d, operand.ndim) for d in dimensions)
    out = _MONOID_REDUCERS[prim](operand, axis=dimensions)
    out = jnp.astype(out, operand.dtype)
    return out if single else (out,)


# --- collectives built from others --------------------------------------------------------------

def pshuffle(x, axis_name, perm):
    """Device ``i`` along ``axis_name`` gets the block of device ``perm[i]`` (``perm`` a
    permutation of ``range(axis_size)``); a ``ppermute`` with pairs ``(perm[i], i)``.

        before: [a0 | a1 | a2]   perm=(2, 0, 1)   after: [a2 | a0 | a1]
    """
    from shardc.lax import axis_size, ppermute
    perm = [int(i) for i in perm]
    size = axis_size(axis_name)
    if sorted(perm) != list(range(size)):
        raise ValueError(f"pshuffle: perm {perm} must be a permutation of range({size}) "
                         f"(the size of axis {axis_name!r})")
    return ppermute(x, axis_name, [(src, dst) for dst, src in enumerate(perm)])


def pswapaxes(x, axis_name, axis, *, axis_index_groups=None):
    """Swap the mesh axis ``axis_name`` with array dimension ``axis`` (whose size must equal
    the mesh axis's): an ``all_to_all`` splitting and concatenating along ``axis``.

        before: device i holds x_i[j]       after: device j holds x_i[j] at position i
    """
    from shardc.lax import all_to_all
    return all_to_all(x, axis_name, axis, axis, axis_index_groups=axis_index_groups)
