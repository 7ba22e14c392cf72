"""``shardc.lax``'s core operations: ``dot_general`` and the matrix products, conversions,
the elementwise arithmetic ``jax.lax`` shares with ``jax.numpy``, shapes, static and dynamic
slices, ``select`` and ``stop_gradient``."""
from __future__ import annotations

import functools

import builtins
import enum
import operator

import numpy as np

from compiler import tree
from compiler.tracing import aval_of, bind, check_jax_leaves, is_jax_value, is_python_scalar
from ir import dtypes as _dt
from ir import primitives as p
import shardc.numpy as jnp
from shardc.lax._shapes import array_operand, checked_axis, weak_as_operands
from shardc.numpy._arithmetic import add, binary_op, subtract as sub
from shardc.numpy._indexing import index_as_int32
from ir.sharding import NamedSharding
from ir.sharding_rules import mesh_explicit
from shardc.numpy._core import (asked_dtype, check_out_sharding, constrain, dtype_of, keeps_weak,
                                is_key_array, key_array_rule, promote, shape_of)
from shardc.sharding import resolve_sharding

__all__ = [
    "AccuracyMode", "Tolerance",
    "Precision", "DotAlgorithm", "DotAlgorithmPreset", "dot_general", "convert_element_type", "broadcast_in_dim", "reshape", "slice",
    "iota", "broadcasted_iota", "add", "mul", "sub", "div", "rem", "max", "min", "abs", "cos",
    "exp", "log", "neg",
    "sin", "sqrt", "tanh", "concatenate", "transpose", "rsqrt", "logistic", "select",
    "stop_gradient", "dot", "batch_matmul", "dynamic_slice", "dynamic_slice_in_dim",
    "dynamic_index_in_dim", "dynamic_update_slice", "dynamic_update_slice_in_dim",
    "dynamic_update_index_in_dim",
]


# --- precision -------------------------------------------------------------------------------

Precision = p.Precision
DotAlgorithm = p.DotAlgorithm
DotAlgorithmPreset = p.DotAlgorithmPreset


# --- lax operations --------------------------------------------------------------------------

def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None,
                out_sharding=None):
    """Contract ``lhs`` and ``rhs`` over ((lhs_contract, rhs_contract), (lhs_batch, rhs_batch)).
    ``out_sharding``: the result's split (on Explicit axes it settles a contraction split on
    both sides; elsewhere the result is laid out so)."""
    (lc, rc), (lb, rb) = dimension_numbers
    dims = ((tuple(lc), tuple(rc)), (tuple(lb), tuple(rb)))
    if (preferred_element_type is not None and dtype_of(lhs) != dtype_of(rhs)
            and all(_dt.is_float(dtype_of(x)) and np.dtype(dtype_of(x)).itemsize == 1
                    for x in (lhs, rhs))):
        # two float8 formats (JAX accepts the mix): each is exact in the result's dtype
        lhs, rhs = (jnp.astype(x, preferred_element_type) for x in (lhs, rhs))
    precision = p.canonical_precision(precision)
    if isinstance(precision, (p.DotAlgorithm, p.DotAlgorithmPreset)):
        return _dot_with_algorithm(lhs, rhs, dims, precision, preferred_element_type,
                                   out_sharding)
    lhs, rhs = promote(lhs, rhs)
    params = dict(dimension_numbers=dims,
                  preferred_element_type=(dtype_of(lhs) if preferred_element_type is None
                                          else _dt.canonicalize(preferred_element_type)))
    if precision is not None:       # carried (and printed) as JAX's is; numpy's is the highest
        params["precision"] = precision
    if out_sharding is None:
        return bind(p.dot_general_p, lhs, rhs, **params)
    check_out_sharding(out_sharding, "dot_general")
    sharding = resolve_sharding(out_sharding, "dot_general(out_sharding=...)")
    if isinstance(sharding, NamedSharding) and mesh_explicit(sharding.mesh):
        return bind(p.dot_general_p, lhs, rhs, out_sharding=sharding, **params)
    return constrain(bind(p.dot_general_p, lhs, rhs, **params), sharding)


def _dot_with_algorithm(lhs, rhs, dims, algorithm, preferred_element_type, out_sharding):
    """``dot_general`` with a dot algorithm as its precision, as JAX computes one on a CPU: the
    presets the CPU lacks raise; the operands are converted to the algorithm's precision dtypes,
    the product is summed in its accumulation dtype, and the result has the dtype it has
    without an algorithm (``preferred_element_type`` if given, else the operands')."""
    if algorithm not in p.CPU_DOT_ALGORITHMS:
        raise ValueError(f"The precision '{algorithm}' is not supported by dot_general on CPU")
    lhs, rhs = array_operand(lhs), array_operand(rhs)
    if dtype_of(lhs) != dtype_of(rhs) and not all(
            _dt.is_float(dtype_of(x)) and np.dtype(dtype_of(x)).itemsize == 1
            for x in (lhs, rhs)):
        lhs, rhs = promote(lhs, rhs)
    out_dtype = (np.result_type(dtype_of(lhs), dtype_of(rhs)) if preferred_element_type is None
                 else _dt.canonicalize(preferred_element_type))
    lhs_t, rhs_t, acc_t = p.algorithm_compute_types(algorithm, dtype_of(lhs), dtype_of(rhs),
                                                    out_dtype)
    lhs, rhs = convert_element_type(lhs, lhs_t), convert_element_type(rhs, rhs_t)
    if lhs_t != rhs_t:
        common = np.promote_types(lhs_t, rhs_t)
        lhs, rhs = convert_element_type(lhs, common), convert_element_type(rhs, common)
    acc_t = out_dtype if acc_t is None else acc_t
    out = dot_general(lhs, rhs, dims, precision=None, preferred_element_type=acc_t,
                      out_sharding=out_sharding)
    return convert_element_type(out, out_dtype)


def convert_element_type(x, new_dtype):
    """``x`` converted to ``new_dtype``; a Python int is converted as numpy would from its
    64-bit value (``2**32`` to int32 wraps to 0, as JAX's), not refused for not fitting the
    default int."""
    if type(x) is int:
        x = np.asarray(x).astype(_dt.canonicalize(new_dtype))
    return jnp.astype(x, asked_dtype(new_dtype, "convert_element_type"))


def _check_broadcast_in_dim(operand_shape, shape, dims):
    """JAX's checks on ``broadcast_in_dim``'s arguments, in its order and words."""
    ndim = len(operand_shape)
    if ndim != len(dims):
        raise TypeError(f"broadcast_in_dim broadcast_dimensions must have length equal to "
                        f"operand ndim; got broadcast_dimensions {dims} for operand ndim "
                        f"{ndim}.")
    if len(shape) < ndim:
        raise TypeError(f"broadcast_in_dim target broadcast shape must have equal or higher "
                        f"rank to the operand shape; got operand ndim {ndim} and target "
                        f"broadcast ndim {len(shape)}.")
    if not set(dims) <= set(range(len(shape))):
        raise TypeError(f"broadcast_in_dim broadcast_dimensions must be a subset of output "
                        f"dimensions, got {dims} for operand ndim {ndim} and shape {shape}.")
    if not all(operand_shape[i] in (1, shape[dims[i]]) for i in range(ndim)):
        raise TypeError(f"broadcast_in_dim operand dimension sizes must either be 1, or be "
                        f"equal to their corresponding dimensions in the target broadcast "
                        f"shape; got operand of shape {tuple(operand_shape)}, target broadcast "
                        f"shape {shape}, broadcast_dimensions {dims} ")
    if len(dims) != len(set(dims)):
        raise TypeError(f"broadcast_in_dim broadcast_dimensions must not contain duplicates, "
                        f"got broadcast_dimensions {dims}")


@weak_as_operands(0)
def broadcast_in_dim(x, shape, broadcast_dimensions, out_sharding=None):
    """``x`` broadcast to ``shape``, its dimensions at ``broadcast_dimensions``;
    ``out_sharding``: the result's split (lax accepts any)."""
    shape, dims = tuple(shape), tuple(broadcast_dimensions)
    if (rule := key_array_rule("broadcast_in_dim", x)) is not None and out_sharding is None:
        _check_broadcast_in_dim(x.shape, shape, dims)
        return rule(x, shape, dims)
    _check_broadcast_in_dim(aval_of(x).shape, shape, dims)
    result = bind(p.broadcast_in_dim_p, x, shape=shape, broadcast_dimensions=dims)
    if out_sharding is None:
        return result
    check_out_sharding(out_sharding, "broadcast_in_dim")
    return constrain(result, resolve_sharding(out_sharding,
                                                  "broadcast_in_dim(out_sharding=...)"))


def reshape(x, new_sizes, dimensions=None, *, out_sharding=None):
    if dimensions is not None and tuple(dimensions) != tuple(range(len(dimensions))):
        x = jnp.transpose(x, dimensions)
    return jnp.reshape(x, tuple(new_sizes), out_sharding=out_sharding)


def slice(x, start_indices, limit_indices, strides=None):
    if (rule := key_array_rule("slice", x)) is not None:
        return rule(x, start_indices, limit_indices, strides)
    return bind(p.slice_p, x, start_indices=tuple(start_indices),
                limit_indices=tuple(limit_indices),
                strides=None if strides is None else tuple(strides))


def iota(dtype, size, *, out_sharding=None):
    """``[0, 1, ..., size - 1]`` of ``dtype``."""
    return broadcasted_iota(dtype, (int(size),), 0, out_sharding=out_sharding)


def broadcasted_iota(dtype, shape, dimension, *, out_sharding=None):
    """An array of ``shape`` counting along ``dimension``; ``out_sharding``: its split (each
    device makes its own block)."""
    shape = tuple(int(d) for d in shape)
    if not 0 <= dimension < len(shape):
        raise ValueError(f"broadcasted_iota dimension must be in [0, {len(shape)}), got "
                         f"{dimension}")
    result = bind(p.iota_p, dtype=asked_dtype(dtype, "broadcasted_iota"), shape=shape,
                  dimension=int(dimension))
    if out_sharding is None:
        return result
    check_out_sharding(out_sharding, "iota")
    return constrain(result, resolve_sharding(out_sharding, "iota(out_sharding=...)"))


# The dtype kinds JAX's lax operations accept, by the names its messages give them.
_KIND_NAMES = {_dt.INT: "integer", _dt.FLOAT: "floating", _dt.COMPLEX: "complexfloating",
               _dt.BOOL: "bool_"}
NUMBERS = (_dt.INT, _dt.FLOAT, _dt.COMPLEX)
ANY = NUMBERS + (_dt.BOOL,)
ORDERED = (_dt.INT, _dt.FLOAT, _dt.BOOL)

# lax names whose jax.numpy counterpart (which promotes) JAX's message suggests: JAX's own
# table, whose comparisons are keyed by numpy's names (so lt, le, gt, ge and rem get none)
_JNP_EQUIVALENTS = {"add": "add", "sub": "subtract", "mul": "multiply", "div": "divide",
                    "max": "maximum", "min": "minimum", "eq": "equal", "ne": "not_equal",
                    "atan2": "arctan2", "nextafter": "nextafter", "pow": "float_power",
                    "bitwise_and": "bitwise_and", "bitwise_or": "bitwise_or",
                    "bitwise_xor": "bitwise_xor", "shift_left": "left_shift",
                    "shift_right_logical": "right_shift",
                    "shift_right_arithmetic": "right_shift"}


def check_operand_dtypes(name: str, accepted, *operands, same: bool = True) -> None:
    """JAX's check on a lax operation's operands, which lax never promotes: each dtype of a
    kind in ``accepted`` (INT, FLOAT, ...), and (``same``) all one dtype, a Python number
    counting as its default dtype (``lax.add(x_f32, 1)`` is int32 against float32)."""
    dtypes = [dtype_of(x) for x in operands]
    for i, dtype in enumerate(dtypes):
        if _dt.kind(dtype) not in accepted:
            raise TypeError(f"{name} does not accept dtype {np.dtype(dtype).name} at position "
                            f"{i}. Accepted dtypes at position {i} are subtypes of "
                            f"{', '.join(_KIND_NAMES[k] for k in accepted)}.")
    if same and any(d != dtypes[0] for d in dtypes[1:]):
        raise same_dtypes_error(name, dtypes)


def check_operand_values(name: str, *operands) -> None:
    """JAX's TypeError (its Primitive.bind's) for an operand that is no JAX value: a string,
    an array of strings or objects, any other object."""
    for i, x in enumerate(operands):
        if not is_jax_value(x) and not _dt.is_float0(x):     # (float0's is its own error)
            raise TypeError(f"Error interpreting argument to {name} as a JAX value. The "
                            f"problematic value is of type {type(x)} and was passed to {name} "
                            f"at position {i}.\n")


def check_operand_ranks(name: str, *operands) -> None:
    """JAX's check that a lax operation's operands of rank above 0 share one rank (lax
    broadcasts size-1 dimensions, never missing ones): TypeError naming the ranks. Each must
    be a JAX value first."""
    check_operand_values(name, *operands)
    ranks = {len(shape_of(x)) for x in operands} - {0}
    if len(ranks) > 1:
        raise TypeError(f"{name}: arrays must have the same number of dimensions, got "
                        f"{{{', '.join(str(r) for r in sorted(ranks))}}}")


def same_dtypes_error(name: str, dtypes) -> TypeError:
    """JAX's error for a lax operation given operands of different dtypes, with its tip where
    JAX names a promoting jax.numpy counterpart."""
    tip = (f" (Tip: jnp.{_JNP_EQUIVALENTS[name]} is a similar function that does automatic "
           f"type promotion on inputs)." if name in _JNP_EQUIVALENTS else "")
    return TypeError(f"lax.{name} requires arguments to have the same dtypes, got "
                     f"{', '.join(np.dtype(d).name for d in dtypes)}.{tip}")


def lax_binary(name: str, accepted, fn, doc: str, public: str | None = None):
    """``fn(x, y)`` (a jax.numpy function) behind JAX's lax operand check: ``name`` (the
    primitive's name, which errors give) takes operands of one dtype, of the kinds
    ``accepted``; ``public``: the function's own name where it differs."""
    def op(x, y):
        check_operand_ranks(name, x, y)
        check_operand_dtypes(name, accepted, x, y)
        return fn(x, y)
    op.__name__ = op.__qualname__ = public or name
    op.__doc__ = doc
    return op


def mul(x, y, *, out_dtype=None):
    """``x * y`` of operands of one dtype (lax does not promote); with ``out_dtype``, the
    operands (which may then differ in dtype) are cast to it first, as JAX's ``lax.mul`` does
    on backends without a mixed-dtype kernel."""
    if out_dtype is not None:
        dtype = _dt.canonicalize(out_dtype)
        x, y = (jnp.asarray(v).astype(dtype) for v in (x, y))
    else:
        check_operand_ranks("mul", x, y)
        check_operand_dtypes("mul", NUMBERS, x, y)
    return binary_op(p.mul_p, x, y)


def div(x, y):
    """``x / y``; integers divide rounding toward zero (``lax.div(-7, 2)`` is -3), and an
    integer division by zero gives -1, as XLA does."""
    check_operand_ranks("div", x, y)
    check_operand_dtypes("div", NUMBERS, x, y)
    return binary_op(p.div_p, x, y)


def rem(x, y):
    """The remainder of ``lax.div``: the sign of ``x`` (C's ``fmod``); ``rem(x, 0)`` is ``x``
    for integers, as XLA does."""
    check_operand_ranks("rem", x, y)
    check_operand_dtypes("rem", (_dt.INT, _dt.FLOAT), x, y)
    return binary_op(p.rem_p, x, y)


add = lax_binary("add", NUMBERS, add, "``x + y`` of operands of one dtype.")
sub = lax_binary("sub", NUMBERS, sub, "``x - y`` of operands of one dtype.")
max = lax_binary("max", ANY, jnp.maximum, "Elementwise maximum of operands of one dtype.")
min = lax_binary("min", ANY, jnp.minimum, "Elementwise minimum of operands of one dtype.")
neg = jnp.negative


class Tolerance:
    """The tolerances a unary function's result is asked to meet (JAX's ``lax.Tolerance``):
    ``atol`` and ``rtol``, or ``atol`` and ``ulps``."""

    def __init__(self, atol: float = 0.0, rtol: float = 0.0, ulps: int = 0):
        if atol < 0.0 or rtol < 0.0 or ulps < 0.0:
            raise ValueError("Tolerances must be non-negative.")
        if atol == 0.0 and rtol == 0.0 and ulps == 0:
            raise ValueError("At least one of atol, rtol, or ulps must be set.")
        self.atol = atol
        self.rtol = rtol
        self.ulps = ulps


class AccuracyMode(enum.Enum):
    """The accuracy a unary function's implementation is chosen for (JAX's
    ``lax.AccuracyMode``)."""
    HIGHEST = 1
    DEFAULT = 2


def check_accuracy(accuracy) -> None:
    """JAX's check of a unary function's ``accuracy``: None, an AccuracyMode or a Tolerance.
    shardc computes with numpy, whose one implementation serves every accuracy."""
    if accuracy is not None and not isinstance(accuracy, (AccuracyMode, Tolerance)):
        raise NotImplementedError(f"Accuracy {accuracy} not supported")


def check_unary_dtype(name: str, accepted, x) -> None:
    """JAX's TypeError for a lax operation of one operand given a dtype of another kind (lax
    converts nothing: ``lax.sin`` of an int32 is an error, not a float32)."""
    dtype = dtype_of(x)
    if _dt.kind(dtype) not in accepted:
        raise TypeError(f"{name} does not accept dtype {np.dtype(dtype).name}. Accepted "
                        f"dtypes are subtypes of "
                        f"{', '.join(_KIND_NAMES[k] for k in accepted)}.")


def with_accuracy(fn, name: str, checked: bool = True, accepted=(_dt.FLOAT, _dt.COMPLEX)):
    """``fn(x)`` taking JAX's keyword-only ``accuracy`` (checked as JAX does where
    ``checked``; JAX's CPU lowering of logistic reads none), on operands of the kinds
    ``accepted``. numpy has one implementation, so any accepted accuracy gives the same
    values."""
    def op(x, *, accuracy=None):
        if checked:
            check_accuracy(accuracy)
        check_operand_values(name, x)
        check_unary_dtype(name, accepted, x)
        return fn(x)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = (f"Elementwise {name} (JAX's lax.{name}); ``accuracy``: None, a "
                  "``lax.AccuracyMode`` or a ``lax.Tolerance``, which numpy meets with its one "
                  "implementation.")
    return op


exp, log, sin, cos, tanh, sqrt = (with_accuracy(fn, name) for fn, name in (
    (jnp.exp, "exp"), (jnp.log, "log"), (jnp.sin, "sin"), (jnp.cos, "cos"),
    (jnp.tanh, "tanh"), (jnp.sqrt, "sqrt")))


def abs(x):
    """``|x|`` of a signed, floating or complex operand (JAX's TypeError for booleans,
    unsigned and 4- or 2-bit integers, which jnp.abs passes through or refuses)."""
    return bind(p.abs_p, array_operand(x))


def concatenate(operands, dimension):
    """``operands`` joined along ``dimension`` (JAX's signature: the dimension is required)."""
    if len(operands) == 0:
        raise ValueError("concatenate requires a non-empty sequences of arrays")
    if (rule := key_array_rule("concatenate", list(operands))) is not None:
        if not 0 <= dimension < operands[0].ndim:
            raise TypeError(f"concatenate dimension out of bounds: dimension {dimension} for "
                            f"shapes {', '.join(str(tuple(x.shape)) for x in operands)}.")
        return rule(operands, dimension)
    dtypes = [dtype_of(x) for x in operands]
    if len(set(dtypes)) > 1:        # lax does not promote
        raise TypeError("lax.concatenate requires arguments to have the same dtypes, got "
                        f"{', '.join(np.dtype(d).name for d in dtypes)}. (Tip: jnp.concatenate "
                        "is a similar function that does automatic type promotion on inputs).")
    shapes = [np.shape(x) if not hasattr(x, "shape") else tuple(x.shape) for x in operands]
    if not 0 <= dimension < len(shapes[0]):
        raise TypeError(f"concatenate dimension out of bounds: dimension {dimension} for "
                        f"shapes {', '.join(str(s) for s in shapes)}.")
    return jnp.concatenate(operands, axis=dimension)
def transpose(operand, permutation):
    """``operand`` with dimension ``permutation[i]`` as its dimension ``i``. Unlike
    ``jnp.transpose``, negative axes are not read from the end: anything but a permutation of
    ``range(operand.ndim)`` is JAX's TypeError.

    >>> transpose(jnp.ones((2, 3)), (1, 0)).shape
    (3, 2)
    """
    permutation = tuple(operator.index(d) for d in permutation)
    if is_key_array(operand):
        if sorted(permutation) != list(range(operand.ndim)):
            raise TypeError(f"transpose permutation isn't a permutation of operand dimensions, "
                            f"got permutation {permutation} for operand shape "
                            f"{tuple(operand.shape)}.")
        return operand.transpose(permutation)      # the words' axis stays last
    operand = array_operand(operand)
    if permutation == tuple(range(np.ndim(operand))):
        return operand
    return bind(p.transpose_p, operand, permutation=permutation)


@keeps_weak
def _rsqrt(x):
    return bind(p.rsqrt_p, x)


@keeps_weak
def _logistic(x):
    return bind(p.logistic_p, x)


rsqrt = with_accuracy(_rsqrt, "rsqrt")
logistic = with_accuracy(_logistic, "logistic", checked=False)


@weak_as_operands(1, 2)
def select(pred, on_true, on_false):
    if (rule := key_array_rule("where", on_true, on_false)) is not None:
        return rule(pred, on_true, on_false)
    return bind(p.select_n_p, pred, on_false, on_true)


def stop_gradient(x):
    """``x``, with a zero derivative: gradients do not flow through it."""
    return tree.tree_map(lambda leaf: bind(p.stop_gradient_p, leaf), x)


def dce_sink(val, *, prevent_mlir_dce: bool = False) -> None:
    """JAX's ``dce_sink``: keeps XLA from removing the computation of ``val`` (a pytree of
    arrays) as dead code. shardc's programs compute what their results need, so it checks
    the leaves and does nothing else."""
    check_jax_leaves(tree.tree_leaves(val), val, lambda path: f"dce_sink: val{path}")


def dot(lhs, rhs, /, *, precision=None, preferred_element_type=None, out_sharding=None):
    """Vector or matrix product of operands of rank 1 or 2: ``lhs``'s last dimension with
    ``rhs``'s first."""
    lhs, rhs = array_operand(lhs), array_operand(rhs)
    if lhs.ndim not in (1, 2) or rhs.ndim not in (1, 2) or lhs.shape[-1] != rhs.shape[0]:
        raise TypeError(f"lax.dot: operands of rank 1 or 2 with lhs's last dimension equal to "
                        f"rhs's first, got {lhs.shape} and {rhs.shape}")
    return dot_general(lhs, rhs, (((lhs.ndim - 1,), (0,)), ((), ())), precision=precision,
                       preferred_element_type=preferred_element_type,
                       out_sharding=out_sharding)


def batch_matmul(lhs, rhs, precision=None):
    """Batched matrix product ``[..., m, k] @ [..., k, n]`` over equal leading dimensions."""
    lhs, rhs = array_operand(lhs), array_operand(rhs)
    if lhs.ndim < 2 or lhs.ndim != rhs.ndim or lhs.shape[:-2] != rhs.shape[:-2]:
        raise ValueError(f"batch_matmul: operands must have one rank (2 or more) and equal batch "
                         f"dimensions, got {lhs.shape} and {rhs.shape}")
    batch = tuple(range(lhs.ndim - 2))
    return dot_general(lhs, rhs, (((lhs.ndim - 1,), (rhs.ndim - 2,)), (batch, batch)),
                       precision=precision)


# --- dynamic slices --------------------------------------------------------------------------

def _start_indices(operand, start_indices, name: str = "dynamic_slice"):
    """int32 start indices, negative ones counted from the end of their dimension (as JAX);
    the primitives then clamp them so the window fits. JAX's TypeError for indices that are
    not integers of one type (Python ints take any integer type); JAX's ValueError for a
    number of indices other than the operand's rank."""
    shape = aval_of(operand).shape
    if len(start_indices) != len(shape):
        raise ValueError("Length of slice indices must match number of operand dimensions "
                         f"({len(start_indices)} vs {shape})")
    kinds = [None if type(s) is int else
             _dt.canonicalize(type(s)) if is_python_scalar(s) else aval_of(s).dtype
             for s in start_indices]
    typed = {k for k in kinds if k is not None}
    if len(typed) > 1 or any(not _dt.is_int(k) or k == _dt.bool_ for k in typed):
        listed = ", ".join((k or _dt.int_).name for k in kinds)
        raise TypeError(f"index arguments to {name} must be integers of the same type, "
                        f"got{':' if name == 'dynamic_slice' else ''} {listed}")
    starts = []
    for s, size in zip(start_indices, shape):
        if is_python_scalar(s) or isinstance(s, np.integer):
            # any value past the end (a large unsigned one too) clamps as the end does
            start = int(s)
            starts.append(np.int32(builtins.max(start + size, 0) if start < 0
                                   else builtins.min(start, size)))
            continue
        s = index_as_int32(s, size)
        starts.append(jnp.where(jnp.less(s, 0), jnp.add(s, np.int32(size)), s))
    return starts


def dynamic_slice(operand, start_indices, slice_sizes):
    """The window of ``slice_sizes`` at ``start_indices`` (traced starts allowed; negative ones
    count from the end; clamped so the window stays inside the operand)."""
    if (rule := key_array_rule("dynamic_slice", operand)) is not None:
        return rule(operand, start_indices, slice_sizes)
    starts = _start_indices(operand, start_indices)
    return bind(p.dynamic_slice_p, operand, *starts, slice_sizes=tuple(int(s) for s in slice_sizes))


def dynamic_slice_in_dim(operand, start_index, slice_size, axis=0):
    shape = jnp.shape(operand)
    axis = checked_axis(axis, len(shape))
    starts = [0] * len(shape)
    starts[axis] = start_index
    sizes = list(shape)
    sizes[axis] = slice_size
    return dynamic_slice(operand, starts, sizes)


def dynamic_index_in_dim(operand, index, axis=0, keepdims=True):
    out = dynamic_slice_in_dim(operand, index, 1, axis)
    return out if keepdims else jnp.squeeze(out, axis)


def dynamic_update_slice(operand, update, start_indices):
    """``operand`` with ``update`` written at ``start_indices`` (negative ones count from the
    end; clamped to fit)."""
    if (rule := key_array_rule("dynamic_update_slice", operand, update)) is not None:
        return rule(operand, update, start_indices)
    starts = _start_indices(operand, start_indices, "dynamic_update_slice")
    return bind(p.dynamic_update_slice_p, operand, update, *starts)


def dynamic_update_slice_in_dim(operand, update, start_index, axis):
    ndim = jnp.ndim(operand)
    axis = checked_axis(axis, ndim)
    starts = [0] * ndim
    starts[axis] = start_index
    return dynamic_update_slice(operand, update, starts)


def dynamic_update_index_in_dim(operand, update, index, axis):
    if np.ndim(update) == np.ndim(operand) - 1:          # (np.ndim: key arrays too)
        update = jnp.expand_dims(update, axis)
    return dynamic_update_slice_in_dim(operand, update, index, axis)
