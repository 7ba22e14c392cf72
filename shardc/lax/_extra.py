"""More of ``jax.lax``: shapes and stacking (``broadcast_shapes``, ``stack``, ``unstack``,
``index_take``, ``empty``, ``shape_as_value``), bits (``clz``, ``reduce_xor``), grouped
matrix products (``ragged_dot``), ``composite`` and ``platform_dependent``, and the enums and
names JAX's signatures use."""
from __future__ import annotations

import dataclasses
import enum
import functools
from typing import Sequence

import numpy as np

import shardc.numpy as jnp
from compiler.custom_ad import custom_jvp
from compiler.tracing import Tracer, UnexpectedTracerError, aval_of, trace_to_program
from compiler.tree import tree_flatten, tree_unflatten
from ir import dtypes as _dt
from runtime.array import Array
from shardc.lax._convolution import ConvDimensionNumbers
from shardc.lax._gather import GatherDimensionNumbers, gather
from shardc.lax._more import bitwise_or, population_count, shift_right_logical
from shardc.lax._ops import dot_general
from shardc.lax._shapes import array_operand
from shardc.numpy._core import weakly_typed_like
from shardc.sharding import reshard

__all__ = [
    "ConvGeneralDilatedDimensionNumbers", "DotDimensionNumbers", "RaggedDotDimensionNumbers",
    "RoundingMethod", "broadcast_shapes", "clz", "composite", "empty", "index_take",
    "platform_dependent", "ragged_dot", "ragged_dot_general", "reduce_xor", "shape_as_value",
    "stack", "unstack",
]

ConvGeneralDilatedDimensionNumbers = ConvDimensionNumbers
DotDimensionNumbers = tuple        # ((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))


class RoundingMethod(enum.IntEnum):
    """How ``lax.round`` rounds halves: away from zero, or to the nearest even integer."""
    AWAY_FROM_ZERO = 0
    TO_NEAREST_EVEN = 1


def broadcast_shapes(*shapes):
    """The shape numpy broadcasting gives ``shapes``; ValueError where they do not
    broadcast."""
    shapes = [tuple(int(d) for d in s) for s in shapes]
    rank = max((len(s) for s in shapes), default=0)
    result = []
    for dims in zip(*[(1,) * (rank - len(s)) + s for s in shapes]):
        sizes = {d for d in dims if d != 1}
        if len(sizes) > 1:
            raise ValueError(f"Incompatible shapes for broadcasting: shapes={shapes}")
        result.append(sizes.pop() if sizes else 1)
    return tuple(result)


def stack(operands: Sequence, axis: int = 0):
    """``operands`` (of one shape) joined along a new ``axis``."""
    return jnp.stack([array_operand(o) for o in operands], axis=axis)


def unstack(x, axis: int = 0) -> tuple:
    """The slices of ``x`` along ``axis``, as a tuple."""
    x = array_operand(x)
    axis = axis + x.ndim if axis < 0 else axis
    return tuple(jnp.take(x, k, axis=axis) for k in range(x.shape[axis]))


def index_take(src, idxs, axes):
    """``src`` indexed by one integer array per axis of ``axes`` (taken modulo the axis'
    size), the other axes kept: JAX's ``lax.index_take``."""
    src = array_operand(src)
    indices = jnp.stack([jnp.asarray(i) % src.shape[a] for i, a in zip(idxs, axes)], axis=1)
    sizes = list(src.shape)
    for a in axes:
        sizes[a] = 1
    offset_dims = tuple(range(1, src.ndim - indices.shape[1] + 1))
    return gather(src, indices, GatherDimensionNumbers(offset_dims, tuple(axes), tuple(axes)),
                  tuple(sizes))


def empty(shape, dtype, *, out_sharding=None):
    """An array of ``shape`` and ``dtype`` whose values do not matter (zeros here)."""
    return jnp.zeros(shape, dtype, out_sharding=out_sharding) if out_sharding is not None \
        else jnp.zeros(shape, dtype)


def dtype(x) -> np.dtype:
    """JAX's ``lax.dtype``: the dtype of a value or type. Python scalars and their types,
    numpy scalar types, dtype names and numpy arrays are canonicalized (float64 is float32
    with x64 off); an array's (or a traced value's) own dtype is kept."""
    if x is None:
        raise ValueError(f"Invalid argument to dtype: {x}.")
    if isinstance(x, type):
        if x in (bool, int, float, complex):
            return _dt.canonicalize({bool: np.bool_, int: np.int64, float: np.float64,
                                     complex: np.complex128}[x])
        if issubclass(x, np.generic):
            return _dt.requested(x, "dtype")
    elif type(x) in (bool, int, float, complex):
        return dtype(type(x))
    elif isinstance(x, (Array, Tracer)):
        return x.dtype
    if isinstance(x, (str, np.dtype)):
        given = np.dtype(x)
        if _dt.is_valid(given):
            return _dt.requested(given, "dtype")
    else:
        given = getattr(x, "dtype", None)
        if not isinstance(given, np.dtype):
            try:
                given = np.result_type(x)
            except TypeError as err:
                raise TypeError(f"Cannot determine dtype of {x}") from err
    if not _dt.is_valid(given):
        raise TypeError(f"Value '{x}' with dtype {given} is not a valid JAX array type. Only "
                        "arrays of numeric types are supported by JAX.")
    return _dt.canonicalize(given)


def shape_as_value(shape):
    """A shape as an int32 array."""
    return jnp.asarray(np.array([int(d) for d in shape], np.int32))


def clz(x):
    """The number of leading zero bits of each element (an integer operand), weakly typed
    where the operand is (a Python int), as JAX's."""
    operand, x = x, array_operand(x)
    if not _dt.is_int(x.dtype):
        raise TypeError(f"clz does not accept dtype {x.dtype.name}. Accepted dtypes are "
                        "subtypes of integer.")
    bits = _dt.bit_width(x.dtype)          # int4's are 4
    smeared, shift = x, 1
    while shift < bits:        # every bit below the highest set one set too
        smeared = bitwise_or(smeared, shift_right_logical(smeared, np.asarray(shift, x.dtype)))
        shift *= 2
    return weakly_typed_like((bits - population_count(smeared)).astype(x.dtype), operand)


def reduce_xor(operand, axes):
    """The exclusive or of ``operand`` (integers or booleans) over ``axes``."""
    x = array_operand(operand)
    axes = tuple(a + x.ndim if a < 0 else a for a in axes)
    if x.dtype == np.bool_:
        return jnp.sum(x, axis=axes) % 2 == 1
    kept = [d for d in range(x.ndim) if d not in axes]
    x = jnp.transpose(x, kept + list(axes))
    rest = x.shape[:len(kept)]
    x = jnp.reshape(x, rest + (-1,))
    while x.shape[-1] > 1:         # halves combined, a zero making an odd count even
        if x.shape[-1] % 2:
            x = jnp.concatenate([x, jnp.zeros(rest + (1,), x.dtype)], axis=-1)
        half = x.shape[-1] // 2
        x = x[..., :half] ^ x[..., half:]
    return jnp.reshape(x, rest) if x.shape[-1] == 1 else jnp.zeros(rest, x.dtype)


@dataclasses.dataclass(frozen=True)
class RaggedDotDimensionNumbers:
    """The dimensions of a ragged dot: a dot_general's, the ragged ones of ``lhs`` and the
    group ones of ``rhs``."""
    dot_dimension_numbers: tuple
    lhs_ragged_dimensions: Sequence[int]
    rhs_group_dimensions: Sequence[int]

    def __post_init__(self):
        object.__setattr__(self, "dot_dimension_numbers",
                           tuple(tuple(map(tuple, t)) for t in self.dot_dimension_numbers))
        object.__setattr__(self, "lhs_ragged_dimensions", tuple(self.lhs_ragged_dimensions))
        object.__setattr__(self, "rhs_group_dimensions", tuple(self.rhs_group_dimensions))


_BASIC = RaggedDotDimensionNumbers((((1,), (1,)), ((), ())), (0,), (0,))


def ragged_dot(lhs, rhs, group_sizes, precision=None, preferred_element_type=None,
               group_offset=None, out_sharding=None):
    """``lhs`` (m, k) times one of the ``rhs`` matrices (g, k, n) per run of rows: the first
    ``group_sizes[0]`` rows by ``rhs[0]``, the next ``group_sizes[1]`` by ``rhs[1]``, ...;
    rows past the groups give zeros (JAX's ``lax.ragged_dot``, as a mixture of experts
    uses it)."""
    return ragged_dot_general(lhs, rhs, group_sizes, _BASIC, precision=precision,
                              preferred_element_type=preferred_element_type,
                              group_offset=group_offset, out_sharding=out_sharding)


_NONCONTRACTING, _CONTRACTING, _BATCH = "noncontracting", "contracting", "batch"


def ragged_dot_general(lhs, rhs, group_sizes, ragged_dot_dimension_numbers, precision=None,
                       preferred_element_type=None, group_offset=None, out_sharding=None):
    """A ``dot_general`` one of whose ``lhs`` dimensions (the ragged one) runs in groups of
    ``group_sizes`` (JAX's ``lax.ragged_dot_general``). By the kind of that dimension:

    1. non-contracting (``m``): ``[b..., m..., k...] x [g, b..., k..., n...] -> [b..., m...,
       n...]``, each group of ``m`` times its slice of ``rhs``'s group dimension (rows past
       the groups give zeros);
    2. contracting (``k``): ``[b..., m..., k...] x [b..., k..., n...] -> [g, b..., m...,
       n...]``, one product per group over its part of ``k``;
    3. batch (``b``): ``dot_general`` itself (every batch element is in some group).

    ``group_sizes`` is ``[b..., x..., g]``, ``x...`` the ``lhs`` dimensions of the ragged
    one's kind outer to it (batch mode: the batch dimensions outer to it), or ``[g]`` for the
    same sizes everywhere. Each group is cut out by a mask and multiplied whole, as JAX's own
    reference does, so it differentiates, batches and splits as ``dot_general`` does."""
    if group_offset is not None:
        raise NotImplementedError("Unimplemented group_offset support.")
    lhs, rhs = array_operand(lhs), array_operand(rhs)
    sizes = jnp.asarray(group_sizes)
    dn = ragged_dot_dimension_numbers
    (l_contract, r_contract), (l_batch, r_batch) = dn.dot_dimension_numbers
    l_contract, r_contract, l_batch, r_batch = map(list, (l_contract, r_contract, l_batch,
                                                          r_batch))
    if len(dn.lhs_ragged_dimensions) != 1:
        raise TypeError("ragged_dot_general expects exactly one lhs ragged dimension.")
    (ragged,) = dn.lhs_ragged_dimensions
    _check_ragged_dim(ragged, lhs.ndim, "lhs ragged dimension", "lhs")
    l_free = [d for d in range(lhs.ndim) if d not in l_contract and d not in l_batch]
    mode = (_NONCONTRACTING if ragged in l_free else
            _CONTRACTING if ragged in l_contract else _BATCH)
    l_prefix = _ragged_prefix(mode, ragged, l_batch, l_contract, l_free)
    if sizes.ndim == 0:
        raise TypeError("expected rank of group_sizes to be >=1.")
    if sizes.ndim != 1:
        expected = tuple(lhs.shape[d] for d in l_prefix) + (sizes.shape[-1],)
        if tuple(sizes.shape) != expected:
            raise TypeError(f"expected group_sizes to have shape {expected}, got "
                            f"{tuple(sizes.shape)}.")
    groups = sizes.shape[-1]
    group_dims = list(dn.rhs_group_dimensions)
    if mode != _NONCONTRACTING and group_dims:
        raise TypeError("ragged_dot_general requires zero group dimensions in the rhs when lhs "
                        "ragged dimension is contracting or batch.")
    if mode == _NONCONTRACTING:
        if len(group_dims) != 1:
            raise TypeError("ragged_dot_general requires exactly one rhs group dimension when "
                            "lhs ragged dimension is noncontracting.")
        _check_ragged_dim(group_dims[0], rhs.ndim, "rhs group dimension", "rhs")
        if group_dims[0] in r_batch or group_dims[0] in r_contract:
            raise TypeError("ragged_dot_general requires rhs group dimension numbers to be "
                            "distinct from contracting and batch dimensions.")
        if rhs.shape[group_dims[0]] != groups:
            raise TypeError(f"expected rhs group dimension size to be {groups}, got "
                            f"{rhs.shape[group_dims[0]]}.")
    if not _dt.is_int(sizes.dtype):
        raise TypeError("ragged_dot_general requires that group_sizes.dtype is subtype of "
                        "np.integer.")
    if sizes.ndim == 1:
        sizes = jnp.broadcast_to(sizes, tuple(lhs.shape[d] for d in l_prefix) + (groups,))
    incr = lambda dims: [d + 1 for d in dims]
    product = functools.partial(dot_general, precision=precision,
                                preferred_element_type=preferred_element_type)
    if mode == _NONCONTRACTING:
        out = product(_by_group(lhs, ragged, sizes, l_prefix), rhs,
                      ((incr(l_contract) + [0], r_contract + group_dims),
                       (incr(l_batch), r_batch)))
    elif mode == _CONTRACTING:
        r_ragged = r_contract[l_contract.index(ragged)]
        r_prefix = r_batch + r_contract[:r_contract.index(r_ragged)]
        out = product(_by_group(lhs, ragged, sizes, l_prefix),
                      _by_group(rhs, r_ragged, sizes, r_prefix),
                      ((incr(l_contract), incr(r_contract)),
                       ([0] + incr(l_batch), [0] + incr(r_batch))))
    else:
        out = product(lhs, rhs, dn.dot_dimension_numbers)
    if out_sharding is not None:
        out = reshard(out, out_sharding)
    return out


def _check_ragged_dim(dim, rank, dim_name, arg_name):
    if dim < 0 or dim >= rank:
        raise TypeError(f"ragged_dot_general requires {dim_name} numbers to be nonnegative and "
                        f"less than the number of axes of the {arg_name} value, got {dim} for "
                        f"{arg_name} of rank {rank}.")


def _ragged_prefix(mode, ragged, batch, contract, free) -> list:
    """The dimensions ``group_sizes`` runs over before its groups, as JAX's: the batch
    dimensions and those of the ragged one's kind outer to it."""
    if mode == _NONCONTRACTING:
        return batch + free[:free.index(ragged)]
    if mode == _CONTRACTING:
        return batch + contract[:contract.index(ragged)]
    return batch[:batch.index(ragged)]


def _by_group(x, dim, sizes, prefix):
    """``x`` with a leading group axis: slice ``i`` keeps the elements of group ``i`` along
    ``dim`` (zeros elsewhere). ``sizes`` is ``[*prefix sizes, g]``, its groups laid end to end
    along ``dim`` separately at each index of the ``prefix`` dimensions of ``x``."""
    ends = jnp.cumsum(sizes, axis=-1)
    starts = ends - sizes
    at = jnp.arange(x.shape[dim], dtype=sizes.dtype)
    mask = (starts[..., None] <= at) & (at < ends[..., None])   # [*prefix, g, n]
    # the mask's axes at their places among the result's [g, *x.shape]
    places = [1 + d for d in prefix] + [0, 1 + dim]
    mask = jnp.transpose(mask, np.argsort(places))
    shape = [1] * (x.ndim + 1)
    for place in places:
        shape[place] = (sizes.shape[-1] if place == 0 else x.shape[place - 1])
    mask = jnp.reshape(mask, shape)
    return jnp.where(mask, x[None], jnp.zeros((), x.dtype))


def composite(decomposition, name: str, version: int = 0):
    """``decomposition`` as a named operation (JAX's ``lax.composite``): here it runs as its
    decomposition. Positional arguments are its inputs, keyword arguments its attributes,
    which may not be traced values; nor may the decomposition close over traced values (JAX's
    UnexpectedTracerError). As JAX's composite primitive has none, it has no JVP rule:
    differentiating it is JAX's ValueError (``jax.custom_jvp`` gives it one)."""
    @functools.wraps(decomposition)
    def composed(*args, **kwargs):
        if any(isinstance(v, Tracer) for v in kwargs.values()):
            raise UnexpectedTracerError(
                "Found a JAX Tracer as an attribute in the decomposition for the composite op "
                f"'{name}'. This means that the decomposition function closes over a value "
                "that is involved in a JAX transformation. Any values that aren't explicitly "
                "known at compile time must be explicitly passed as arguments to the "
                "composite.\n\nNote: If you are passing jax arrays as attributes, use numpy "
                "arrays instead.")

        def decomposed(*inputs):
            return decomposition(*inputs, **kwargs)

        flat, in_tree = tree_flatten(args)
        # traced under the current trace, a traced value it closes over is a constant
        _, consts, _ = trace_to_program(
            lambda *leaves: tree_flatten(decomposed(*tree_unflatten(in_tree, leaves)))[0],
            [aval_of(x) for x in flat])
        if any(isinstance(c, Tracer) for c in consts):
            raise UnexpectedTracerError(
                "Found a JAX Tracer as a constant in the decomposition for the composite op "
                f"'{name}'. This means that the decomposition function closes over a value "
                "that is involved in a JAX transformation. Any values that aren't explicitly "
                "known at compile time must be explicitly passed as arguments to the "
                "composite.")
        return _without_jvp(decomposed)(*args)

    return composed


def _without_jvp(fun):
    """``fun`` whose JVP (so its gradient) is JAX's error for a composite."""
    wrapped = custom_jvp(fun)

    @wrapped.defjvp
    def _no_rule(primals, tangents):
        raise ValueError(
            "JVP rule for composite not implemented. You can use `jax.custom_jvp` to add "
            "support. See https://docs.jax.dev/en/latest/_autosummary/jax.custom_jvp.html")

    return wrapped


def platform_dependent(*args, default=None, **per_platform):
    """The branch for this platform (``cpu``; shardc runs on numpy), else ``default``. With
    neither, JAX's error: its platform-index primitive has no lowering for cpu."""
    branch = per_platform.get("cpu", default)
    if branch is None:
        platforms = tuple((name,) for name in per_platform)
        raise NotImplementedError(
            f"MLIR translation rule for primitive 'platform_index(platforms={platforms!r})' "
            "not found for platform cpu")
    return branch(*args)
