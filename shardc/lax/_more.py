"""More of ``jax.lax``: the inverse and hyperbolic functions, comparisons and bit operations by
their lax names, ``select_n``, ``reduce_and``/``reduce_or``, ``reduce_window`` (pooling), and
the shape helpers ``split``, ``tile``, ``collapse``, ``broadcast_to_rank`` and
``optimization_barrier``. Each is built on primitives the rest of shardc has, so it
differentiates, batches and shards as they do."""
from __future__ import annotations

import itertools
import math

import numpy as np

from compiler import tree
from compiler.tracing import Tracer, aval_of, bind
from ir import dtypes as _dt
from ir import primitives as p
from ir.sharding import NamedSharding, PartitionSpec
from ir.sharding_rules import kept_if_divisible, named_sharding, partitions
import shardc.numpy as jnp
from shardc.numpy._core import key_array_rule
from shardc.lax._convolution import padtype_to_pads
from shardc.lax._ops import (ANY, ORDERED, add as lax_add, check_operand_ranks, lax_binary,
                             max as lax_max, min as lax_min, same_dtypes_error)
from shardc.lax._shapes import array_operand, pad
from shardc.sharding import reshard

__all__ = [
    "acos", "asin", "atan", "acosh", "asinh", "atanh", "sinh", "cosh", "nextafter",
    "eq", "ne", "lt", "le", "gt", "ge", "bitwise_and", "bitwise_or", "bitwise_xor",
    "bitwise_not", "mulhi", "shift_left", "shift_right_arithmetic", "shift_right_logical",
    "population_count", "select_n", "reduce_and", "reduce_or", "reduce_window",
    "reduce_window_shape_tuple", "split",
    "tile", "collapse", "broadcast_to_rank", "broadcast_like", "optimization_barrier",
]


def _inexact(name: str, prim):
    def fn(x):
        x = array_operand(x)
        if not _dt.is_inexact(x.dtype):
            raise TypeError(f"{name} does not accept dtype {x.dtype.name}. Accepted dtypes "
                            "are subtypes of floating, complexfloating.")
        return bind(prim, x)
    fn.__name__ = name
    fn.__doc__ = f"Elementwise {name} of a floating or complex operand (JAX's lax.{name})."
    return fn


acos = _inexact("acos", p.acos_p)
asin = _inexact("asin", p.asin_p)
atan = _inexact("atan", p.atan_p)
acosh = _inexact("acosh", p.acosh_p)
asinh = _inexact("asinh", p.asinh_p)
atanh = _inexact("atanh", p.atanh_p)
sinh = _inexact("sinh", p.sinh_p)
cosh = _inexact("cosh", p.cosh_p)
nextafter = lax_binary("nextafter", (_dt.FLOAT,), jnp.nextafter,
                       "The next float after ``x`` toward ``y``, of operands of one dtype.")

eq = lax_binary("eq", ANY, jnp.equal, "``x == y`` of operands of one dtype.")
ne = lax_binary("ne", ANY, jnp.not_equal, "``x != y`` of operands of one dtype.")
lt = lax_binary("lt", ORDERED, jnp.less, "``x < y`` of operands of one (real) dtype.")
le = lax_binary("le", ORDERED, jnp.less_equal, "``x <= y`` of operands of one (real) dtype.")
gt = lax_binary("gt", ORDERED, jnp.greater, "``x > y`` of operands of one (real) dtype.")
ge = lax_binary("ge", ORDERED, jnp.greater_equal, "``x >= y`` of operands of one (real) dtype.")
_BITS = (_dt.INT, _dt.BOOL)
bitwise_and = lax_binary("and", _BITS, jnp.bitwise_and, "``x & y`` of one integer or bool dtype.",
                         public="bitwise_and")
bitwise_or = lax_binary("or", _BITS, jnp.bitwise_or, "``x | y`` of one integer or bool dtype.",
                        public="bitwise_or")
bitwise_xor = lax_binary("xor", _BITS, jnp.bitwise_xor, "``x ^ y`` of one integer or bool dtype.",
                         public="bitwise_xor")
bitwise_not = jnp.bitwise_not


def _integer_pair(name: str, x, y):
    check_operand_ranks(name, x, y)
    x, y = array_operand(x), array_operand(y)
    if not (_dt.is_int(x.dtype) and _dt.is_int(y.dtype)):
        raise TypeError(f"{name} does not accept dtypes {x.dtype.name}, {y.dtype.name}. "
                        "Accepted dtypes are subtypes of integer.")
    if x.dtype != y.dtype:
        raise same_dtypes_error(name, (x.dtype, y.dtype))
    return jnp.broadcast_arrays(x, y) if x.shape != y.shape else (x, y)


def mulhi(x, y, /):
    """The high half of each product of two integers of one dtype: the upper N bits of the
    2N-bit ``x * y`` (signed for signed dtypes), as JAX's ``lax.mulhi``. Computed in N bits
    from the halves of the operands, so no wider type is needed."""
    x, y = _integer_pair("mulhi", x, y)
    dtype = np.dtype(x.dtype)
    bits = _dt.bit_width(dtype)
    if bits < 8:
        raise NotImplementedError(f"lax.mulhi of {dtype.name} is not supported by shardc")
    unsigned = np.dtype(f"uint{bits}")
    ux, uy = jnp.astype(x, unsigned), jnp.astype(y, unsigned)
    half = unsigned.type(bits // 2)
    mask = unsigned.type((1 << (bits // 2)) - 1)
    xl, xh = jnp.bitwise_and(ux, mask), jnp.right_shift(ux, half)
    yl, yh = jnp.bitwise_and(uy, mask), jnp.right_shift(uy, half)
    ll, lh, hl, hh = xl * yl, xl * yh, xh * yl, xh * yh
    mid = (jnp.right_shift(ll, half) + jnp.bitwise_and(lh, mask) + jnp.bitwise_and(hl, mask))
    high = hh + jnp.right_shift(lh, half) + jnp.right_shift(hl, half) + jnp.right_shift(mid, half)
    if np.issubdtype(dtype, np.signedinteger):
        # the signed product's high half: subtract y where x < 0 and x where y < 0 (mod 2^N)
        zero = unsigned.type(0)
        high = (high - jnp.where(x < 0, uy, zero)) - jnp.where(y < 0, ux, zero)
    return jnp.astype(high, dtype)


def shift_left(x, y):
    """``x << y`` elementwise (integers of one dtype)."""
    return bind(p.shift_left_p, *_integer_pair("shift_left", x, y))


def shift_right_arithmetic(x, y):
    """``x >> y`` keeping the sign (integers of one dtype)."""
    return bind(p.shift_right_arithmetic_p, *_integer_pair("shift_right_arithmetic", x, y))


def shift_right_logical(x, y):
    """``x >> y`` filling with zeros (integers of one dtype)."""
    return bind(p.shift_right_logical_p, *_integer_pair("shift_right_logical", x, y))


def population_count(x):
    """The number of set bits of each element (an integer operand)."""
    x = array_operand(x)
    if not _dt.is_int(x.dtype):
        raise TypeError(f"population_count does not accept dtype {x.dtype.name}. Accepted "
                        "dtypes are subtypes of integer.")
    return bind(p.population_count_p, x)


def select_n(which, *cases):
    """``cases[which]`` elementwise: ``which`` boolean (two cases) or int32 (any number)."""
    if not cases:
        raise ValueError("select_n() must have at least one case")
    if (rule := key_array_rule("select_n", list(cases))) is not None and len(cases) > 1:
        return rule(which, *cases)
    which = array_operand(which)
    cases = [array_operand(c) for c in cases]
    if len(cases) == 1:
        return cases[0]
    if any(c.shape != cases[0].shape or c.dtype != cases[0].dtype for c in cases[1:]):
        raise TypeError("select_n cases must have the same shapes and dtypes, got "
                        f"{[(c.dtype.name, c.shape) for c in cases]}.")
    if which.shape not in ((), cases[0].shape):
        raise TypeError("select_n which must be scalar or have the same shape as cases, got "
                        f"which shape {which.shape} but case shape {cases[0].shape}.")
    if len(cases) > 2 and _dt.is_bool(which.dtype):
        raise TypeError("select_n with more than two cases needs an integer which, got bool")
    if which.shape != cases[0].shape:
        which = jnp.broadcast_to(which, cases[0].shape)
    return bind(p.select_n_p, which, *cases)


def reduce_and(operand, axes):
    """Logical (or bitwise, for integers) and over ``axes``."""
    return bind(p.reduce_and_p, array_operand(operand), axes=tuple(axes))


def reduce_or(operand, axes):
    """Logical (or bitwise, for integers) or over ``axes``."""
    return bind(p.reduce_or_p, array_operand(operand), axes=tuple(axes))


def reduce_window(operand, init_value, computation, window_dimensions, window_strides=None,
                  padding="VALID", base_dilation=None, window_dilation=None):
    """``computation`` folded over each window of ``operand`` (JAX's ``lax.reduce_window``:
    pooling). Windows of ``window_dimensions`` step by ``window_strides``, spaced by
    ``window_dilation``, over ``operand`` padded with ``init_value`` by ``padding`` ('VALID',
    'SAME' or ``(low, high)`` pairs); each output is ``init_value`` combined with its window's
    elements in row-major order, ``computation(accumulated, element)``; ``base_dilation``
    spaces the operand's elements with ``init_value`` first.

    ``operand`` may be a pytree of arrays of one shape, ``init_value`` a matching pytree of
    scalars (JAX's variadic reduce_window): ``computation`` then takes and returns such
    pytrees, e.g. a sum of one operand and a max of another in one pass. Built of slices and
    ``computation`` itself, it differentiates as they do (JAX has no transpose for a general
    computation, so its gradient is an error there).

    >>> lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), 'VALID')
    """
    flat, flat_init, in_tree, window, strides, dilation, base = _window_arguments(
        operand, init_value, computation, window_dimensions, window_strides, base_dilation,
        window_dilation)
    shape = flat[0].shape
    inits = [jnp.asarray(v, dtype=x.dtype) for v, x in zip(flat_init, flat)]
    extent = tuple((w - 1) * d + 1 for w, d in zip(window, dilation))
    dilated = tuple((n - 1) * d + 1 if n else 0 for n, d in zip(shape, base))
    # a padding type is read on the operand's own shape, before base dilation (JAX's)
    pads = (padtype_to_pads(shape, extent, strides, padding)
            if isinstance(padding, str) else [tuple(int(v) for v in lh) for lh in padding])
    if len(pads) != len(shape):
        raise TypeError(f"reduce_window: padding needs one (low, high) pair per dimension "
                        f"(rank {len(shape)}), got {len(pads)}")
    out_shape = _window_counts(dilated, pads, extent, strides)
    laid = [_window_layouts(x, out_shape, base, pads) for x in flat]
    flat, real = _dilated_and_padded([x for x, _, _ in laid], inits, shape, base, pads)
    layouts = [layout for _, layout, _ in laid]
    results = _fold_windows(computation, in_tree, flat, inits, real, layouts, out_shape,
                            window, strides, dilation)
    results = [r if out_layout is None else reshard(r, out_layout)
               for r, (_, _, out_layout) in zip(results, laid)]
    return tree.tree_unflatten(in_tree, results)


def _window_counts(sizes, pads, extents, strides) -> tuple:
    """How many windows of ``extents`` fit, stepping by ``strides``, in ``sizes`` padded."""
    return tuple((n + lo + hi - e) // s + 1 if n + lo + hi >= e else 0
                 for n, (lo, hi), e, s in zip(sizes, pads, extents, strides))


def reduce_window_shape_tuple(operand_shape, window_dimensions, window_strides, padding,
                              base_dilation=None, window_dilation=None) -> tuple:
    """The result shape of ``reduce_window`` on an operand of ``operand_shape``, ``padding``
    as ``(low, high)`` pairs (``padtype_to_pads`` gives them for a padding type).

    >>> lax.reduce_window_shape_tuple((8, 32, 32, 3), (1, 2, 2, 1), (1, 2, 2, 1), [(0, 0)] * 4)
    (8, 16, 16, 3)
    """
    rank = len(operand_shape)
    base = tuple(base_dilation or (1,) * rank)
    dilation = tuple(window_dilation or (1,) * rank)
    sizes = tuple((int(n) - 1) * d + 1 if n else 0 for n, d in zip(operand_shape, base))
    extents = tuple((int(w) - 1) * d + 1 for w, d in zip(window_dimensions, dilation))
    pads = [(int(lo), int(hi)) for lo, hi in padding]
    return _window_counts(sizes, pads, extents, [int(s) for s in window_strides])


def _window_arguments(operand, init_value, computation, window_dimensions, window_strides,
                      base_dilation, window_dilation) -> tuple:
    """reduce_window's operands and window parameters, checked in JAX's order and with its
    errors: ``(flat operands, flat initial values, their tree, window, strides, window
    dilation, base dilation)``."""
    flat, in_tree = tree.tree_flatten(operand)
    flat_init, init_tree = tree.tree_flatten(init_value)
    if in_tree != init_tree:
        raise ValueError("Operands must have the same tree structure as init_values: "
                         f"{in_tree} vs. {init_tree}")
    if not flat:
        raise ValueError("reduce_window must have at least one operand.")
    flat = [array_operand(x) for x in flat]
    shape = flat[0].shape
    if any(x.shape != shape for x in flat[1:]):
        raise TypeError("reduce_window operands must all have the same shape, got "
                        f"{[x.shape for x in flat]}")
    window = tuple(int(w) for w in window_dimensions)
    strides = tuple(int(s) for s in (window_strides or (1,) * len(window)))
    dilation = tuple(int(d) for d in (window_dilation or (1,) * len(window)))
    base = tuple(int(d) for d in (base_dilation or (1,) * len(window)))
    # the computation's result must have the operands' structure (JAX's check)
    if any(np.ndim(v) == 0 for v in flat_init):
        probe_init = [jnp.asarray(v, dtype=x.dtype) for v, x in zip(flat_init, flat)]
        probe = tree.tree_unflatten(in_tree, probe_init)
        out_tree = tree.tree_structure(computation(probe, probe))
        if out_tree != in_tree:
            raise ValueError("reduce_window output must have the same tree structure as the "
                             f"operands {in_tree} vs. {out_tree}")
    # as JAX's: a general computation's initial values have the operands' dtypes (a Python
    # number its default dtype); add, max and min from their identities reduce any operand
    init_dtypes = [jnp.asarray(v).dtype for v in flat_init]
    dtypes = [np.dtype(_dt.canonicalize(x.dtype)) for x in flat]
    if (init_dtypes != dtypes
            and not (len(flat) == 1 and _is_window_monoid(computation, flat_init[0]))):
        raise TypeError("reduce_window got inconsistent dtypes for operands and init_values: "
                        f"got operand dtypes {dtypes} and init_value dtypes {init_dtypes}.")
    if any(np.ndim(v) != 0 for v in flat_init):
        raise TypeError("reduce_window expected init_values to be scalars but init_values "
                        f"have shapes {[tuple(np.shape(v)) for v in flat_init]}.")
    for name, values in (("window_dimensions", window), ("window_strides", strides),
                         ("base_dilation", base), ("window_dilation", dilation)):
        if any(v <= 0 for v in values):
            raise TypeError(f"reduce_window {name} must have every element be strictly "
                            f"positive, got {values}.")
    if len(shape) != len(window):
        raise TypeError("reduce_window got the wrong number of window_dimensions for operand: "
                        f"got operand shape {shape} with window_dimensions {window}.")
    for name, values in (("window_strides", strides), ("base_dilation", base),
                         ("window_dilation", dilation)):
        if len(values) != len(window):
            raise TypeError(f"reduce_window got inconsistent {name} and window_dimensions: "
                            f"got {name} {values} and window_dimensions {window}.")
    return flat, flat_init, in_tree, window, strides, dilation, base


def _dilated_and_padded(flat, inits, shape, base, pads) -> tuple:
    """The operands with ``base`` dilation's holes and ``pads`` filled with their initial
    values, and which places hold an operand's element: the holes and the padding take no
    part (the initial value counts once per window, as JAX's)."""
    dilated = any(d != 1 for d in base)
    real = np.ones(tuple((n - 1) * d + 1 if n else 0 for n, d in zip(shape, base))
                   if dilated else shape, bool)
    if dilated:
        # base dilation: d - 1 holes between elements
        flat = [pad(x, i, [(0, 0, d - 1) for d in base]) for x, i in zip(flat, inits)]
        real = np.zeros(real.shape, bool)
        real[tuple(slice(None, None, d) for d in base)] = True
    if any(lo or hi for lo, hi in pads):
        flat = [pad(x, i, [(lo, hi, 0) for lo, hi in pads]) for x, i in zip(flat, inits)]
        real = _padded_mask(real, pads)
    return flat, real


def _fold_windows(computation, in_tree, flat, inits, real, layouts, out_shape, window,
                  strides, dilation) -> list:
    """Each output, ``computation`` folded from its initial value over its window's elements
    in row-major order: one strided slice of every operand per window offset, combined where
    ``real`` says the offset reads an element (``layouts``: each result's layout, None
    where it has none)."""
    results = [jnp.broadcast_to(i, out_shape, out_sharding=layout)
               for i, layout in zip(inits, layouts)]
    choose = (next((c for f, c in _CHOOSERS if computation is f), None)
              if len(flat) == 1 and _dt.is_inexact(flat[0].dtype) else None)
    for offset in itertools.product(*[range(w) for w in window]):
        start = tuple(o * d for o, d in zip(offset, dilation))
        limit = tuple(b + (n - 1) * s + 1 for b, n, s in zip(start, out_shape, strides))
        taken = real[tuple(slice(b, e, s) for b, e, s in zip(start, limit, strides))]
        if not taken.any():
            continue
        parts = [bind(p.slice_p, x, start_indices=start, limit_indices=limit,
                      strides=None if all(s == 1 for s in strides) else strides)
                 for x in flat]
        if choose is not None:
            combined = [choose(results[0], parts[0])]
        else:
            combined, out_tree = tree.tree_flatten(computation(
                tree.tree_unflatten(in_tree, results), tree.tree_unflatten(in_tree, parts)))
            if out_tree != in_tree:
                raise ValueError("reduce_window output must have the same tree structure as "
                                 f"the operands {in_tree} vs. {out_tree}")
            combined = [c if c.dtype == r.dtype else jnp.astype(c, r.dtype)
                        for c, r in zip(combined, results)]
        if not taken.all():
            combined = [jnp.where(taken if layout is None else jnp.broadcast_to(
                jnp.asarray(taken), out_shape, out_sharding=layout), c, r)
                for c, r, layout in zip(combined, results, layouts)]
        results = combined
    return results


def _is_window_monoid(computation, init) -> bool:
    """Whether JAX reduces with ``computation`` from ``init`` as its own windowed sum, max or
    min: lax's add from a concrete 0, max from the lowest value, min from the highest."""
    if isinstance(init, Tracer) or np.ndim(init) != 0:
        return False
    value = np.asarray(init)
    if computation is lax_add:
        return bool(value == 0)
    if computation in (lax_max, lax_min):
        dtype = jnp.asarray(init).dtype
        if _dt.is_inexact(dtype):
            return bool(value == (-np.inf if computation is lax_max else np.inf))
        if dtype == np.bool_:
            return bool(value == (computation is lax_min))
        info = np.iinfo(dtype)
        return bool(value == (info.min if computation is lax_max else info.max))
    return False


def _first_max(acc, part):
    """The larger, the earlier of equal ones (NaN wins): a max-pool's gradient goes to the
    first maximum of each window, as JAX's reduce_window max sends it (max's own JVP would
    split it among ties)."""
    return jnp.where((part > acc) | jnp.isnan(part), part, acc)


def _first_min(acc, part):
    return jnp.where((part < acc) | jnp.isnan(part), part, acc)


_CHOOSERS = ((jnp.maximum, _first_max), (lax_max, _first_max), (jnp.minimum, _first_min),
             (lax_min, _first_min))


def _window_layouts(operand, out_shape, base, pads):
    """JAX's type rule for ``reduce_window`` on an ``operand`` whose type splits it: the
    result keeps the split where each changed dimension stays divisible (else JAX's
    ShardingTypeError). The windows are computed with the padded or dilated dimensions whole
    (the padding would leave them indivisible), the result then cut to its split. Returns
    the operand so laid out, that layout and the result's (None, None when unsplit)."""
    aval = aval_of(operand)
    if aval.type_sharding is None:
        return operand, None, None
    spec = kept_if_divisible("reduce_window", aval, out_shape)
    work = tuple(() if lo or hi or b != 1 else names
                 for names, (lo, hi), b in zip(spec, pads, base))
    mesh = aval.type_sharding.mesh
    layout = NamedSharding(mesh, PartitionSpec(*partitions(work)))
    if work == spec:
        return operand, layout, None
    return (reshard(operand, layout), layout,
            NamedSharding(mesh, PartitionSpec(*partitions(spec))))


def _padded_mask(mask, pads):
    """``mask`` padded with False by ``(low, high)`` pairs (negative: cut)."""
    grow = [(max(lo, 0), max(hi, 0)) for lo, hi in pads]
    mask = np.pad(mask, grow, constant_values=False)
    return mask[tuple(slice(max(-lo, 0), n - max(-hi, 0))
                      for (lo, hi), n in zip(pads, mask.shape))]


def split(operand, sizes, axis=0):
    """``operand`` cut along ``axis`` into pieces of ``sizes`` (a list)."""
    operand = array_operand(operand)
    sizes = [int(s) for s in sizes]
    if not -operand.ndim <= axis < operand.ndim:
        raise ValueError(f"axis {axis} is out of bounds for array of dimension {operand.ndim}")
    axis = axis % operand.ndim
    if any(s < 0 for s in sizes):
        raise ValueError(f"Sizes passed to split must be nonnegative, got {tuple(sizes)}")
    if sum(sizes) != operand.shape[axis]:
        raise ValueError(f"Sum of sizes {sum(sizes)} must be equal to dimension {axis} of "
                         f"the operand shape {operand.shape}")
    bounds = np.cumsum([0] + sizes)
    return [bind(p.slice_p, operand,
                 start_indices=tuple(int(lo) if d == axis else 0 for d in range(operand.ndim)),
                 limit_indices=tuple(int(hi) if d == axis else n
                                     for d, n in enumerate(operand.shape)), strides=None)
            for lo, hi in zip(bounds[:-1], bounds[1:])]


def tile(operand, reps):
    """``operand`` repeated ``reps[d]`` times along each dimension."""
    return jnp.tile(operand, tuple(int(r) for r in reps))


def collapse(operand, start_dimension, stop_dimension=None):
    """Dimensions ``start_dimension`` up to ``stop_dimension`` merged into one."""
    operand = array_operand(operand)
    stop = operand.ndim if stop_dimension is None else stop_dimension
    shape = operand.shape
    merged = math.prod(shape[start_dimension:stop])
    return jnp.reshape(operand, shape[:start_dimension] + (merged,) + shape[stop:])


def broadcast_to_rank(x, rank):
    """``x`` with leading dimensions of size 1 up to ``rank``."""
    x = array_operand(x)
    if x.ndim >= rank:
        return x
    return jnp.reshape(x, (1,) * (rank - x.ndim) + x.shape)


def broadcast_like(arr, like_arr):
    """``arr`` broadcast to the shape of ``like_arr``, split as ``like_arr``'s type splits it
    (JAX's ``lax.broadcast_like``).

    >>> lax.broadcast_like(jnp.array([1, 2, 3]), jnp.zeros((2, 3)))     # [[1, 2, 3]] * 2
    """
    like = aval_of(array_operand(like_arr))
    sharding = named_sharding(like)
    if sharding is None:
        return jnp.broadcast_to(arr, like.shape)
    return jnp.broadcast_to(arr, like.shape, out_sharding=sharding)


def optimization_barrier(operand):
    """``operand`` unchanged (XLA's barrier against moving work across it; shardc moves
    nothing)."""
    return tree.tree_map(lambda leaf: leaf, operand)
