"""``shardc.lax``'s reductions: ``reduce_sum`` and friends, ``argmax``/``argmin``, ``reduce``
(the monoids add, mul, max, min, and, or), cumulative reductions (``cumsum`` ...
``cumlogsumexp``), and sorting (``sort``, ``sort_key_val``, ``top_k``)."""
from __future__ import annotations

import numpy as np

from compiler.jit import make_jaxpr
from compiler.tracing import aval_of, bind
from ir.sharding import ShardingTypeError
from ir import dtypes as _dt
from ir import primitives as p
import shardc.numpy as jnp
from shardc.numpy._core import canonical_axis
from shardc.lax._control_flow import associative_scan
from shardc.lax._shapes import array_operand, checked_axis

__all__ = [
    "cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp", "sort", "sort_key_val", "top_k",
    "reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "argmax", "argmin", "reduce",
]


# --- cumulative ------------------------------------------------------------------------------

def _cumulative(prim, operand, axis, reverse):
    operand = array_operand(operand)
    return bind(prim, operand, axis=checked_axis(axis, operand.ndim), reverse=bool(reverse))


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
    operand = array_operand(operand)
    if not _dt.is_inexact(operand.dtype):
        raise TypeError(f"cumlogsumexp requires a floating-point operand, got {operand.dtype}")
    return associative_scan(jnp.logaddexp, operand, reverse=reverse,
                            axis=checked_axis(axis, operand.ndim))


# --- sorting ---------------------------------------------------------------------------------

def sort(operand, dimension=-1, is_stable=True, num_keys=1):
    """Sort ``operand`` (an array, or a sequence of arrays of one shape ordered together by the
    first ``num_keys``) along ``dimension``; floats are ordered ``-nan < -inf < ... < inf <
    nan``. The sort is always stable."""
    single = not isinstance(operand, (tuple, list))
    operands = [array_operand(operand)] if single else [array_operand(x) for x in operand]
    shapes = {x.shape for x in operands}
    if len(shapes) != 1:
        raise TypeError(f"lax.sort: operands must have one shape, got {sorted(shapes)}")
    if not 1 <= num_keys <= len(operands):
        raise ValueError(f"lax.sort: num_keys={num_keys} must be in [1, {len(operands)}]")
    dimension = checked_axis(dimension, operands[0].ndim)
    outs = list(bind(p.sort_p, *operands, dimension=dimension, num_keys=int(num_keys)))
    return outs[0] if single else tuple(outs)


def sort_key_val(keys, values, dimension=-1, is_stable=True):
    """``(keys, values)`` both reordered by the stable sort of ``keys`` along ``dimension``."""
    return sort((keys, values), dimension=dimension, num_keys=1)


def top_k(operand, k, *, axis=-1):
    """The ``k`` largest entries along ``axis`` (the last by default), largest first, and
    their indices (int32); equal entries come in index order."""
    operand = array_operand(operand)
    k = int(k)
    if k < 0:
        raise ValueError(f"k argument to top_k must be nonnegative, got {k}")
    axis = canonical_axis(axis, operand.ndim)
    if axis != operand.ndim - 1:
        values, order = top_k(jnp.moveaxis(operand, axis, -1), k)
        return jnp.moveaxis(values, -1, axis), jnp.moveaxis(order, -1, axis)
    if not 0 <= k <= operand.shape[-1]:
        raise ValueError(f"top_k: k={k} must be in [0, {operand.shape[-1]}] (the last axis)")
    split = aval_of(operand).sharding
    if split is not None and split.spec[-1]:
        raise ShardingTypeError(
            "The input should be unsharded over the axis along which to compute the top_k "
            f"values. Got input type={aval_of(operand).str_long()} and "
            f"axis={operand.ndim - 1}")
    order = jnp.argsort(operand, axis=-1, stable=True, descending=True)[..., :k]
    # the values sorted the same way (ties are equal values): no gather, which a split
    # leading dimension would refuse
    values = jnp.flip(jnp.sort(operand, axis=-1), -1)[..., :k]
    return values, jnp.astype(order, np.int32)


def approx_max_k(operand, k, reduction_dimension=-1, recall_target=0.95,
                 reduction_input_size_override=-1, aggregate_to_topk=True):
    """The ``k`` largest entries along ``reduction_dimension`` and their indices; exact here
    (JAX's CPU result is exact too; ``recall_target`` only allows less)."""
    return _approx_k(operand, k, reduction_dimension, largest=True)


def approx_min_k(operand, k, reduction_dimension=-1, recall_target=0.95,
                 reduction_input_size_override=-1, aggregate_to_topk=True):
    """The ``k`` smallest entries along ``reduction_dimension``, smallest first, and their
    indices (exact)."""
    return _approx_k(operand, k, reduction_dimension, largest=False)


def _approx_k(operand, k, dimension, largest):
    operand = array_operand(operand)
    dimension = dimension % operand.ndim if operand.ndim else 0
    moved = jnp.moveaxis(operand, dimension, -1)
    order = jnp.argsort(moved, axis=-1, stable=True, descending=largest)[..., :int(k)]
    values = jnp.take_along_axis(moved, order, axis=-1)
    return (jnp.moveaxis(values, -1, dimension),
            jnp.moveaxis(jnp.astype(order, np.int32), -1, dimension))


# --- reductions ------------------------------------------------------------------------------

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
    operand = array_operand(operands)
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
    dimensions = tuple(checked_axis(d, operand.ndim) for d in dimensions)
    out = _MONOID_REDUCERS[prim](operand, axis=dimensions)
    out = jnp.astype(out, operand.dtype)
    return out if single else (out,)
