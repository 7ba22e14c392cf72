"""``shardc.lax``'s reductions: ``reduce_sum`` and friends, ``argmax``/``argmin``, ``reduce``
(any computation, over a pytree of operands), cumulative reductions (``cumsum`` ...
``cumlogsumexp``), and sorting (``sort``, ``sort_key_val``, ``top_k``)."""
from __future__ import annotations

import operator

import numpy as np

from compiler.jit import make_jaxpr
from compiler.tracing import aval_of, bind
from compiler.tree import tree_flatten, tree_unflatten
from ir.sharding import ShardingTypeError
from ir import dtypes as _dt
from ir import primitives as p
import shardc.numpy as jnp
from shardc.lax._elementwise import bitcast_convert_type
from shardc.lax._more import bitwise_and, bitwise_or, reduce_and, reduce_or
from shardc.lax._ops import add, max as lax_max, min as lax_min, mul
from shardc.numpy._core import canonical_axis, vary_like
from shardc.numpy._sorting import iota_along, sort_operands
from shardc.lax._control_flow import associative_scan, scan
from shardc.lax._shapes import array_operand, checked_axis, weak_as_operands

__all__ = [
    "cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp", "sort", "sort_key_val", "top_k",
    "reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "argmax", "argmin", "reduce",
]


# --- cumulative ------------------------------------------------------------------------------

def _number_operand(name, operand):
    """``operand`` as an array, refused (as JAX's lax refuses it) when it holds booleans."""
    operand = array_operand(operand)
    if operand.dtype == np.bool_:
        raise TypeError(f"{name} does not accept dtype bool. Accepted dtypes are subtypes "
                        "of number.")
    return operand


def _cumulative(prim, operand, axis, reverse):
    operand = _number_operand(prim.name, operand)
    return bind(prim, operand, axis=checked_axis(axis, operand.ndim), reverse=bool(reverse))


@weak_as_operands(0)
def cumsum(operand, axis=0, reverse=False):
    """Cumulative sum along ``axis`` (from the end when ``reverse``); keeps the dtype."""
    return _cumulative(p.cumsum_p, operand, axis, reverse)


@weak_as_operands(0)
def cumprod(operand, axis=0, reverse=False):
    """Cumulative product along ``axis``."""
    return _cumulative(p.cumprod_p, operand, axis, reverse)


@weak_as_operands(0)
def cummax(operand, axis=0, reverse=False):
    """Running maximum along ``axis``."""
    return _cumulative(p.cummax_p, operand, axis, reverse)


@weak_as_operands(0)
def cummin(operand, axis=0, reverse=False):
    """Running minimum along ``axis``."""
    return _cumulative(p.cummin_p, operand, axis, reverse)


@weak_as_operands(0)
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
    if _dt.kind(operand.dtype) == _dt.COMPLEX:
        raise ValueError("top_k is not compatible with complex inputs.")
    if k < 0:
        raise ValueError(f"k argument to top_k must be nonnegative, got {k}")
    axis = canonical_axis(axis, operand.ndim)
    if operand.shape[axis] > np.iinfo(np.int32).max + 1:
        raise ValueError(f"top_k returns int32 indices, which will overflow for array "
                         f"dimensions larger than the maximum int32 ({np.iinfo(np.int32).max}). "
                         f"Got operand.shape={tuple(operand.shape)}")
    if axis != operand.ndim - 1:
        values, order = top_k(jnp.moveaxis(operand, axis, -1), k)
        return [jnp.moveaxis(values, -1, axis), jnp.moveaxis(order, -1, axis)]
    if not 0 <= k <= operand.shape[-1]:
        raise ValueError(f"top_k: k={k} must be in [0, {operand.shape[-1]}] (the last axis)")
    split = aval_of(operand).type_sharding
    if split is not None and split.spec[-1]:
        raise ShardingTypeError(
            "The input should be unsharded over the axis along which to compute the top_k "
            f"values. Got input type={aval_of(operand).str_long()} and "
            f"axis={operand.ndim - 1}")
    # one stable ascending sort of a key that reverses XLA's order, the positions and the
    # values together: tied entries come in index order, and the sort's gradient takes each
    # value's tangent from the entry its index names (no gather, which a split leading
    # dimension would refuse)
    positions = iota_along(operand.shape, operand.ndim - 1, like=operand)
    _, order, values = sort_operands([_descending_key(operand), positions, operand],
                                     operand.ndim - 1)
    values, order = values[..., :k], order[..., :k]
    return [values, jnp.astype(order, np.int32)]     # a list, as JAX's


def _descending_key(operand):
    """Integers whose ascending order is ``operand``'s descending order in XLA's total order
    of floats, which top_k uses: ``-nan < -inf < ... < -0 < 0 < ... < inf < nan`` (NaNs by
    their bits); integers and booleans by value."""
    if _dt.is_float(operand.dtype):
        bits = bitcast_convert_type(operand, np.dtype(f"i{np.dtype(operand.dtype).itemsize}"))
        # negative floats order backwards in their bits: flip every bit but the sign
        most = np.iinfo(bits.dtype).max
        operand = jnp.where(bits < 0, jnp.bitwise_xor(bits, bits.dtype.type(most)), bits)
    return jnp.invert(operand)          # reverses the order of every integer dtype and of bool


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
    return [jnp.moveaxis(values, -1, dimension),
            jnp.moveaxis(jnp.astype(order, np.int32), -1, dimension)]


# --- reductions ------------------------------------------------------------------------------

@weak_as_operands(0)
def reduce_sum(operand, axes, *, out_sharding=None):
    """The sum over ``axes``; ``out_sharding`` (JAX's): the result's layout, which may leave
    it a partial sum over the mesh axes that split the summed dimensions (each device's sum
    of its block, ``P(unreduced={'x'})``)."""
    operand = _number_operand("reduce_sum", operand)
    if out_sharding is None:    # in the operand's dtype: lax does not widen narrow integers
        return jnp.sum(operand, axis=tuple(axes), dtype=operand.dtype)
    from shardc.sharding import resolve_sharding
    sharding = resolve_sharding(out_sharding, "reduce_sum(out_sharding=...)")
    axes = tuple(sorted(canonical_axis(a, jnp.ndim(operand)) for a in axes))
    return bind(p.reduce_sum_p, operand, axes=axes, out_sharding=sharding)


@weak_as_operands(0)
def reduce_max(operand, axes):
    return jnp.max(operand, axis=tuple(axes))


@weak_as_operands(0)
def reduce_min(operand, axes):
    return jnp.min(operand, axis=tuple(axes))


@weak_as_operands(0)
def reduce_prod(operand, axes):
    operand = _number_operand("reduce_prod", operand)
    return jnp.prod(operand, axis=tuple(axes), dtype=operand.dtype)


def _check_argminmax(operand, axis, index_dtype):
    """JAX's checks on ``lax.argmax``/``argmin``: ``axis`` one of the operand's dimensions
    (not counted from the end), that dimension not empty, and an integer ``index_dtype``."""
    shape = jnp.shape(operand)
    if not 0 <= axis < len(shape):
        raise ValueError(f"Invalid axis {axis} for operand shape {tuple(shape)}")
    if shape[axis] < 1:
        raise ValueError(f"argmin and argmax require non-empty reduced dimension. "
                         f"operand.shape={tuple(shape)} axis={axis}")
    if not _dt.is_int(np.dtype(index_dtype)):
        raise TypeError(f"index_dtype must be an integer type, but got "
                        f"{np.dtype(index_dtype).name}")


def argmax(operand, axis, index_dtype):
    """The index of the first maximum along ``axis``, as ``index_dtype``."""
    _check_argminmax(operand, axis, index_dtype)
    return jnp.astype(jnp.argmax(operand, axis=axis), index_dtype)


def argmin(operand, axis, index_dtype):
    """The index of the first minimum along ``axis``, as ``index_dtype``."""
    _check_argminmax(operand, axis, index_dtype)
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
    # bitwise on integers (logical on booleans), as lax's reduce_and / reduce_or
    p.and_p: lambda x, axis: reduce_and(x, tuple(axis)),
    p.or_p: lambda x, axis: reduce_or(x, tuple(axis)),
}


def _monoid_of(computation, dtype, in_tree):
    """The primitive ``computation`` applies to two scalars of ``dtype`` (each in the one-leaf
    pytree ``in_tree``, as the operand is) when it is exactly one of add/mul/max/min/and/or
    on its two arguments, else None."""
    scalar = np.zeros((), dtype)
    if in_tree.kind is not None and not _is_lax_monoid(computation):
        scalar = tree_unflatten(in_tree, [scalar])
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


def _is_lax_monoid(computation) -> bool:
    """Whether ``computation`` is one of the lax functions JAX takes for a monoid by name (it
    then reduces a one-leaf pytree without calling it on pytrees)."""
    return any(computation is f for f in (add, mul, lax_max, lax_min, bitwise_and, bitwise_or))


def _ids(values):
    return [id(v) for v in values]


def reduce(operands, init_values, computation, dimensions, out_sharding=None):
    """Reduce ``operands`` (an array, or a pytree of arrays of one shape) over ``dimensions``
    with ``computation``, starting from ``init_values`` (a matching pytree of scalars).
    ``computation(x, y)`` takes and returns pytrees like ``operands``, as JAX's does.

    As in JAX, a single operand whose computation is add, mul, max, min, and or or, with its
    identity as the initial value, becomes the matching reduction. Any other computation is
    folded in order, as XLA's CPU reduce folds it: the accumulator starts at the initial
    values and takes the elements one by one in row-major order of the reduced dimensions
    (a ``scan``), so a fold such as ``lambda acc, x: acc + x * x`` gives what it says.

    >>> lax.reduce(x, 0.0, lax.add, (0,))        # x.sum(0)
    """
    flat, in_tree = tree_flatten(operands)
    flat_init, init_tree = tree_flatten(init_values)
    if in_tree != init_tree:
        raise ValueError("Operands must have the same tree structure as init_values: "
                         f"{in_tree} vs. {init_tree}")
    if not flat:
        raise ValueError("reduce requires at least one operand")
    flat = [array_operand(x) for x in flat]
    shapes = {x.shape for x in flat}
    if len(shapes) != 1:
        raise TypeError(f"reduce operands must all have the same shape, got "
                        f"{[x.shape for x in flat]}")
    ndim = flat[0].ndim
    dimensions = tuple(operator.index(d) for d in dimensions)
    if len(set(dimensions)) != len(dimensions):
        raise ValueError(f"duplicate value in 'axes' of reduction: {dimensions}")
    if not all(0 <= d < ndim for d in dimensions):
        raise ValueError(f"reduction axes {dimensions} contains out-of-bounds indices for "
                         f"{aval_of(flat[0]).str_short()}.")
    init_shapes = [tuple(np.shape(v)) for v in flat_init]
    if any(init_shapes):
        raise ValueError(f"reduce found non-scalar initial value: {init_shapes}")
    if len(flat) == 1:
        prim = _monoid_of(computation, flat[0].dtype, in_tree)
        init = np.asarray(flat_init[0]) if not hasattr(flat_init[0], "aval") else None
        if prim is not None and init is not None and init.shape == () and np.array_equal(
                init.astype(flat[0].dtype), _identity(prim, flat[0].dtype)):
            if out_sharding is not None:
                # JAX's: a sum may be laid out as asked (reduce_sum's out_sharding); no
                # other reduction takes one
                if prim is not p.add_p:
                    raise NotImplementedError
                out = reduce_sum(flat[0], dimensions, out_sharding=out_sharding)
            else:
                out = _MONOID_REDUCERS[prim](flat[0], axis=dimensions)
            return tree_unflatten(in_tree, [jnp.astype(out, flat[0].dtype)])
    if not dimensions:          # nothing to reduce: XLA hands the operands back
        return tree_unflatten(in_tree, flat)
    return tree_unflatten(in_tree, _fold(flat, flat_init, in_tree, computation, dimensions))


def _fold(flat, flat_init, in_tree, computation, dimensions) -> list:
    """``computation`` folded over ``dimensions`` in row-major order, from the initial
    values: a scan over the reduced elements, each step one elementwise application over the
    kept dimensions."""
    shape = flat[0].shape
    reduced = sorted(dimensions)
    kept = [d for d in range(len(shape)) if d not in reduced]
    rest = tuple(shape[d] for d in kept)
    n = int(np.prod([shape[d] for d in reduced], dtype=np.int64))
    dtypes = [_dt.canonicalize(x.dtype) for x in flat]
    inits = [jnp.asarray(v, dtype) for v, dtype in zip(flat_init, dtypes)]
    if any(i.shape != () for i in inits):
        raise ValueError(f"reduce found non-scalar initial value: {[i.shape for i in inits]}")

    def step(acc, xs):
        out, out_tree = tree_flatten(computation(tree_unflatten(in_tree, acc),
                                                 tree_unflatten(in_tree, xs)))
        if out_tree != in_tree:
            raise TypeError(f"reduce computation returned {out_tree}, but the operands are "
                            f"{in_tree}")
        return [jnp.astype(o, dtype) for o, dtype in zip(out, dtypes)], None

    rows = [jnp.reshape(jnp.transpose(x, tuple(reduced) + tuple(kept)), (n,) + rest)
            for x in flat]
    # the accumulator varies as the operands do, all of them (in a shard_map body)
    start = [jnp.broadcast_to(i, rest) for i in inits]
    for r in rows:
        start = [vary_like(a, r) for a in start]
    folded, _ = scan(step, start, rows)
    return folded
