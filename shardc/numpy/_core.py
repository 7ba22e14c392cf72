"""What every ``shardc.numpy`` module builds on: type and shape helpers, the conversion of
values to arrays (``asarray``, ``astype``, Python scalars as JAX converts them), dtype
promotion and broadcasting of operands, arrays filled with a value, and the shape operations
``asarray`` itself needs (``reshape``, ``concatenate``, ``stack``).

Broadcasting follows numpy; type promotion follows JAX with x64 off (float32 and int32
defaults, Python scalars weakly typed, so ``x * 2`` keeps ``x``'s dtype).
"""
from __future__ import annotations

import builtins
import functools
import math
import operator
import sys
import warnings

import numpy as np

from compiler.shard_map import current_shard_context
from compiler.tracing import (ConcretizationTypeError, Tracer, aval_of, bind,
                              check_jax_value, concrete_or_error, in_default_int_range,
                              is_python_scalar, masked_array_error, static_int,
                              value_if_known, values_known_now, weakened)
from ir import transfer_guard as _transfer_guard
from ir import dtypes as _dt
from ir import collectives as coll
from ir import primitives as p
from ir.core import Aval
from ir.shape_dtype import ShapeDtypeStruct
from ir.sharding import (AbstractMesh, Mesh, NamedSharding, PartitionSpec, current_mesh,
                         spec_per_dim)
from ir.sharding_rules import (broadcast_shardings_spec, check_broadcast_result, mesh_explicit,
                               named_sharding, partitions, type_sharding)
from runtime.array import Array, SingleDeviceSharding, detached
from runtime.reference import convert_element, device_put
from shardc.config import config
from shardc.dtypes import is_weakly_typed, issubdtype, prng_key, promotion, result_type
from shardc.sharding import check_context_mesh, check_explicit_axes, resolve_sharding

__all__ = [
    "broadcast_to", "broadcast_arrays", "asarray", "array", "full", "zeros", "ones", "empty",
    "full_like", "zeros_like", "ones_like", "empty_like", "astype", "reshape", "ravel",
    "expand_dims", "concatenate", "stack",
]


def is_array(x) -> bool:
    """Whether ``x`` is an array: a traced value, an Array, or a numpy array or scalar."""
    return isinstance(x, (Tracer, Array, np.ndarray, np.generic))


def dtype_of(x) -> np.dtype:
    """The dtype of an array, a traced value or a scalar."""
    return aval_of(x).dtype


def weakly_typed_like(result, *operands):
    """``result`` (or each of a tuple of results), marked weakly typed as JAX's promotion of
    ``operands`` makes it: when every operand is, or a weakly typed one lifts the kind above
    the typed ones' (an int32 array plus 2.5 is a weak float; a float32 array times 1.5 is
    float32)."""
    some = every = False
    for a in operands:                     # this runs at every operation: cheap tests first
        if type(a) in _NUMBER_KINDS or getattr(a, "weak", False) is True:
            some = True
        else:
            every = True                   # (a typed one: not every operand is weak)
    if not some or (every and not _mixed_promotes_weak(operands)):
        return result
    if isinstance(result, tuple):
        return tuple(weakened(r) for r in result)
    return weakened(result)


def _mixed_promotes_weak(operands) -> bool:
    """Whether weakly typed and typed ``operands`` promote to a weakly typed result: not where
    the weak ones are of no higher kind than a typed one (a float32 array times 1.5), else as
    JAX's lattice says."""
    weak_kind = typed_kind = -1
    for a in operands:
        found = _NUMBER_KINDS.get(type(a))
        if found is None:
            dtype = getattr(a, "dtype", None)
            found = _dt.kind(dtype if isinstance(dtype, np.dtype) else dtype_of(a))
            if getattr(a, "weak", False) is not True:
                typed_kind = found if found > typed_kind else typed_kind
                continue
        weak_kind = found if found > weak_kind else weak_kind
    return weak_kind > typed_kind and _dt.promotes_weak(
        [dtype_of(a) for a in operands], [is_weakly_typed(a) for a in operands])


# JAX's weakly typed Python numbers, by kind (a bool is typed)
_NUMBER_KINDS = {int: _dt.INT, float: _dt.FLOAT, complex: _dt.COMPLEX}


def keeps_weak(fn):
    """``fn``, an elementwise function built of several operations (conversions of its
    operands among them), whose results are weakly typed when its operands all are: as JAX's
    functions that promote their arguments, then apply lax operations, give them."""
    @functools.wraps(fn)
    def wrapped(*args):
        return weakly_typed_like(fn(*args), *args)
    return wrapped


def keeps_weak_scalars(fn=None, *, like=None):
    """``keeps_weak`` for a function that also computes with constants made like its operands
    (JAX's ``lax._const``: a Python number for a weak scalar, a typed array otherwise; ``like``:
    the positions of the operands they are made like, all by default): its results are weakly
    typed when its operands all are and those are scalars."""
    if fn is None:
        return functools.partial(keeps_weak_scalars, like=like)

    @functools.wraps(fn)
    def wrapped(*args):
        return weak_of_scalars(fn(*args), args, like)
    return wrapped


def weak_of_scalars(result, operands, like=None):
    """``result`` typed as ``keeps_weak_scalars`` says: weakly typed as ``operands`` promote
    where the ones its constants are made like (``like``: their positions; all by default)
    are scalars, else typed (typed constants met it)."""
    if all(ndim_of(a) == 0 for a in (operands if like is None else
                                     [operands[k] for k in like])):
        return weakly_typed_like(result, *operands)
    return tuple(map(typed, result)) if isinstance(result, tuple) else typed(result)


def convert(x, dtype):
    """``x`` as ``dtype``: Python scalars become typed numpy scalars (inline literals).

    Values convert as JAX's ``convert_element_type`` does (float to int saturates); a Python
    int must fit int32 and wraps into a narrower integer type (``int8_array + 300`` adds 44).
    """
    dtype = _dt.canonicalize(dtype)
    if is_python_scalar(x):
        return _python_scalar_as(x, dtype)
    if isinstance(x, np.generic):
        return convert_element(np.asarray(x), dtype)[()]
    if isinstance(x, np.ndarray):
        return asarray(convert_element(x, dtype))
    if isinstance(x, (list, tuple)):
        return asarray(x, dtype)
    if dtype_of(x) == dtype:
        return x
    return bind(p.convert_element_type_p, x, new_dtype=dtype)


def promote(*args):
    """``args`` converted to the dtype JAX promotes them to (``result_type``)."""
    return promoted(*args)[0]


def promoted(*args) -> tuple:
    """``(args converted to the dtype JAX promotes them to, whether an operation on them is
    weakly typed)`` (``dtypes.promotion``)."""
    for a in args:
        if getattr(type(a), "__jax_array__", None) is not None:     # an array-like wrapper
            args = [jax_array_of(v) for v in args]
            break
    for a in args:      # result_type reads a string as a dtype name; an operand is a value
                        # (lists are converted by asarray, which checks them)
        if not (isinstance(a, (Tracer, list, tuple)) or is_python_scalar(a)):
            check_jax_value(a, "an operand")
    dtype, weak = promotion(*args)
    return [a if isinstance(a, Tracer) and a.aval.dtype == dtype else convert(a, dtype)
            for a in args], weak


def shape_of(x) -> tuple:
    """The shape of an array, a traced value or a scalar (or an array-like wrapper's)."""
    aval = getattr(x, "aval", None)          # an array or a traced value: at once
    if aval is not None:
        return aval.shape
    if is_key_array(x):
        return tuple(x.shape)                   # (the keys', not their data's)
    return aval_of(jax_array_of(x)).shape


def as_array(x):
    """``x`` as an array: arrays and traced values as they are, anything else (a numpy array
    too: its caller may write into it later) by ``asarray``."""
    return x if isinstance(x, (Tracer, Array)) else asarray(x)


def ndim_of(x) -> int:
    """The number of dimensions of an array or traced value."""
    return len(shape_of(x))


def as_inexact(x):
    """``x`` as an array of a floating dtype (integers and booleans become float32, 64-bit
    integers float64: JAX's promotion to inexact)."""
    x = as_array(x)
    if _dt.is_inexact(dtype_of(x)):
        return x
    # a weak integer becomes a weak float, as JAX's promotion to inexact gives it
    return weakly_typed_like(astype(x, _dt.to_inexact(dtype_of(x))), x)


def broadcast_shapes_of(*shapes) -> tuple:
    """The shape ``shapes`` broadcast to; JAX's ValueError naming them if they do not."""
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ValueError("Incompatible shapes for broadcasting: shapes="
                         f"[{', '.join(str(tuple(s)) for s in shapes)}]") from None


def broadcast_to(x, shape, *, out_sharding=None):
    """Broadcast ``x`` to ``shape`` by numpy's rules; ``out_sharding``: the result's split
    (each dimension ``x`` has must be unsplit or split as asked, as JAX's)."""
    if (rule := key_array_rule("broadcast_to", x)) is not None:
        return rule(x, shape)
    if out_sharding is not None:
        return _broadcast_typed(x, shape, out_sharding)
    shape = shape_tuple(shape)
    x = as_array(x)
    old = shape_of(x)
    if old == shape:
        return x
    if len(old) > len(shape):
        raise ValueError(f"Cannot broadcast to shape with fewer dimensions: arr_shape={old} "
                         f"shape={shape}")
    if any(o not in (1, n) for o, n in zip(old[::-1], shape[::-1])):
        aval = aval_of(x)
        raise ValueError(f"Incompatible types for broadcasting: input type={aval.str_long()} "
                         f"and requested type={Aval(shape, aval.dtype).str_long()}")
    lead = len(shape) - len(old)
    keep = [k for k, d in enumerate(old) if d == shape[lead + k]]
    if len(keep) != len(old):
        x = reshape(x, tuple(old[k] for k in keep))
    return bind(p.broadcast_in_dim_p, x, shape=shape,
                broadcast_dimensions=tuple(lead + k for k in keep))


# the jnp functions the lax operations named in broadcasting errors are for
_JNP_NAMES = {"sub": "subtract", "mul": "multiply", "div": "true_divide", "rem": "remainder",
              "max": "maximum", "min": "minimum", "eq": "equal", "ne": "not_equal",
              "lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal",
              "pow": "power", "and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor",
              "atan2": "arctan2", "select_n": "where"}


# the modules an elementwise operation the user called passes through on its way here
_ELEMENTWISE_MODULES = frozenset({
    __name__, "shardc.numpy._arithmetic", "shardc.numpy._ufuncs", "shardc.numpy._methods",
    "shardc.numpy._arraylike", "shardc._compiled"})
_OWN_PACKAGES = frozenset({"shardc", "compiler", "ir", "runtime"})


def check_rank_promotion(fun_name: str, shapes) -> None:
    """JAX's ``jax_numpy_rank_promotion``: operands of differing ranks (scalars aside) are
    broadcast as numpy does ('allow'), with a warning ('warn'), or refused ('raise'). It
    holds for the user's own operations: shardc's library functions broadcast as JAX's
    (which broadcast explicitly) whatever the option says."""
    if len({len(s) for s in shapes if s}) < 2:
        return
    mode = config.read("jax_numpy_rank_promotion")
    if mode == "allow" or not _called_by_the_user():
        return
    listed = " ".join(str(tuple(s)) for s in shapes)
    if mode == "warn":
        warnings.warn(f"Following NumPy automatic rank promotion for {fun_name} on shapes "
                      f"{listed}. Set the jax_numpy_rank_promotion config option to 'allow' "
                      "to disable this warning; for more information, see "
                      "https://docs.jax.dev/en/latest/rank_promotion_warning.html.",
                      stacklevel=2)
        return
    raise ValueError(f"Operands could not be broadcast together for {fun_name} on shapes "
                     f"{listed} and with the config option jax_numpy_rank_promotion='raise'. "
                     "For more information, see "
                     "https://docs.jax.dev/en/latest/rank_promotion_warning.html.")


def _called_by_the_user() -> bool:
    """Whether the elementwise operation checking its operands was called from outside
    shardc (directly, or by an operator), not by one of its library functions."""
    frame = sys._getframe(2)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.split(".")[0] not in _OWN_PACKAGES:
            return True
        if module not in _ELEMENTWISE_MODULES:
            return False
        frame = frame.f_back
    return True


def broadcast_operands(*args, name=None, fun_name=None, check_ranks=True):
    """Broadcast array operands to one shape; rank-0 operands stay (primitives accept them).
    ``name``: the operation two operands are for, named in JAX's TypeError when their shapes
    do not broadcast (``mul got incompatible shapes for broadcasting: (3,), (2,).``)."""
    shapes = [shape_of(a) for a in args]
    if len(shapes) == 2 and (shapes[0] == shapes[1] or shapes[0] == () or shapes[1] == ()):
        return list(args)                       # the common case: nothing to broadcast
    if check_ranks:
        check_rank_promotion(fun_name or _JNP_NAMES.get(name, name or "broadcast_arrays"),
                             shapes)
    # JAX's two errors: operands of one rank reach lax's TypeError; of different ranks,
    # jnp's rank promotion raises the ValueError first
    if name is not None and len({len(s) for s in shapes if s != ()}) <= 1:
        try:
            np.broadcast_shapes(*shapes)
        except ValueError:
            raise TypeError(f"{name} got incompatible shapes for broadcasting: "
                            f"{', '.join(str(tuple(s)) for s in shapes)}.") from None
    target = broadcast_shapes_of(*shapes)
    if name is not None:
        check_broadcast_result(name, [aval_of(a) for a in args], target)
    return [a if s == target or s == () else broadcast_to(a, target)
            for a, s in zip(args, shapes)]


def broadcast_arrays(*args):
    """The arrays broadcast to one shape (a list); on Explicit axes, as JAX's, to the split
    they broadcast to together where their shapes differ."""
    if (rule := key_array_rule("broadcast_arrays", list(args))) is not None:
        return rule(*args)
    arrays = [as_array(a) for a in args]
    target = broadcast_shapes_of(*[shape_of(a) for a in arrays]) if arrays else ()
    sharding = _broadcast_sharding(arrays, "broadcast_arrays")
    if sharding is not None:
        return [_broadcast_typed(a, target, sharding) for a in arrays]
    return [broadcast_to(a, target) for a in arrays]


def broadcast_typed_operands(*args, name: str):
    """``broadcast_operands`` as JAX's ``_broadcast_arrays`` (``jnp.where``'s): on Explicit
    axes, where the shapes differ, every operand broadcast to the split the operands
    broadcast to together (an unsplit condition meets split cases; scalar cases take the
    condition's split)."""
    target = broadcast_shapes_of(*[shape_of(a) for a in args])    # (shapes checked first)
    sharding = _broadcast_sharding(args, name)
    if sharding is None:        # (JAX's where promotes ranks whatever the config says)
        return broadcast_operands(*args, check_ranks=False)
    return [_broadcast_typed(a, target, sharding) for a in args]


def _broadcast_sharding(arrays, name: str):
    """The NamedSharding ``arrays`` broadcast to together (JAX's ``broadcast_shardings``),
    where their shapes differ and Explicit axes split some of them; else None."""
    shapes = [shape_of(a) for a in arrays]
    if not shapes or all(s == shapes[0] for s in shapes):
        return None
    avals = [aval_of(a) for a in arrays]
    spec = broadcast_shardings_spec(name, avals)
    if spec is None:
        return None
    mesh = named_sharding(next(a for a in avals if a.type_sharding is not None)).mesh
    return NamedSharding(mesh, PartitionSpec(*partitions(spec)))


# --- creation --------------------------------------------------------------------------------

def takes_device(create):
    """Give a constructor JAX's ``device=`` and ``out_sharding=`` keywords: a Sharding, a
    Device, or a PartitionSpec on the current mesh. A concrete result is laid out there; a
    traced one gets a sharding constraint (a mesh layout; on Explicit axes, its type) or is
    left as it is (one device: where a jit's caller gets a value is the jit's business)."""
    @functools.wraps(create)
    def placed(*args, device=None, out_sharding=None, **kwargs):
        result = create(*args, **kwargs)
        if out_sharding is not None:
            # named in errors as JAX names it (jnp.zeros, jnp.arange; full)
            check_out_sharding(out_sharding, "full" if create.__name__ == "full"
                               else f"jnp.{create.__name__}")
            return _computed_on(result, out_sharding)
        if device is None:
            return result
        if isinstance(result, tuple):     # linspace(retstep=True): each part placed
            return tuple(put_on(part, device) for part in result)
        # laid out on a device, a made array is typed (JAX's full and *_like lay it out
        # through a typed broadcast); asarray/array and out_sharding keep a weak type
        placed = put_on(result, device)
        return placed if create.__name__ in ("asarray", "array") else typed(placed)

    return placed


def _broadcast_typed(x, shape, out_sharding):
    result = broadcast_to(x, shape)
    check_out_sharding(out_sharding, "jnp.broadcast_to")
    sharding = resolve_sharding(out_sharding, "broadcast_to(out_sharding=...)")
    have = aval_of(x).type_sharding
    target = type_sharding(sharding, len(shape_of(result)))
    if have is not None and target is not None:
        lead = len(shape_of(result)) - len(have.spec)
        if any(s and s != target.spec[lead + k] for k, s in enumerate(have.spec)):
            raise ValueError(
                "Incompatible types for broadcasting: input type="
                f"{aval_of(x).str_long()} and requested type="
                f"{aval_of(result).with_sharding(target).str_long()}")
    return constrain(result, sharding)


def takes_out_sharding(fn):
    """Give ``fn`` JAX's ``out_sharding=`` keyword (a NamedSharding, or a PartitionSpec on the
    current mesh): its result laid out so (typed so, on Explicit axes)."""
    @functools.wraps(fn)
    def laid_out(*args, out_sharding=None, **kwargs):
        result = fn(*args, **kwargs)
        if out_sharding is None:
            return result
        check_out_sharding(out_sharding, fn.__name__)
        return _computed_on(result, out_sharding)

    return laid_out


def constrain(value, sharding):
    """``value`` laid out by ``sharding`` (a NamedSharding): nothing to do when its type says
    so already, else a sharding constraint (its type, on Explicit axes)."""
    typed = type_sharding(sharding, ndim_of(value))
    aval = aval_of(value)
    spec = getattr(sharding, "spec", None)
    if typed is not None and aval.type_sharding == typed and (
            spec is None or (aval.unreduced == spec.unreduced and aval.reduced == spec.reduced)):
        return value
    return bind(p.sharding_constraint_p, value, sharding=sharding)


def check_out_sharding(out_sharding, name: str) -> None:
    """JAX's TypeError for an ``out_sharding`` that is neither a NamedSharding nor a
    PartitionSpec."""
    if not isinstance(out_sharding, (NamedSharding, PartitionSpec)):
        raise TypeError(f"`out_sharding` argument of {name} only supports instances of "
                        f"`NamedSharding` or `PartitionSpec`. Got {out_sharding!r} of type: "
                        f"{type(out_sharding)}")
    check_context_mesh(out_sharding, name)
    check_explicit_axes(out_sharding, name)


def put_on(value, device):
    """``value`` placed as ``device=`` places it: a concrete array as ``device_put`` lays it
    out, its spec as given (JAX's)."""
    sharding = resolve_sharding(device, "device=")
    if isinstance(value, Tracer):
        if not isinstance(sharding, NamedSharding):
            return value
        return bind(p.sharding_constraint_p, value, sharding=sharding)
    result = device_put(value, sharding)
    return weakened(result) if getattr(value, "weak", False) is True else result


def _computed_on(value, sharding):
    """``value`` laid out by ``sharding`` as a computation's result (``out_sharding=``, the
    layout a *_like copies): a concrete one reports one spec entry per dimension, as JAX's
    computed results do. Entries past the value's rank may be None (JAX types the result
    with them dropped)."""
    result = put_on(value, _trailing_nones_dropped(sharding, ndim_of(value)))
    if isinstance(result, Tracer) or not isinstance(result.sharding, NamedSharding):
        return result
    full = result.sharding.with_spec(spec_per_dim(result.sharding.spec, ndim_of(result)))
    return result if tuple(full.spec) == tuple(result.sharding.spec) else result.respelled(full)


def _trailing_nones_dropped(sharding, ndim: int):
    """``sharding`` (a NamedSharding or PartitionSpec) without the None entries its spec has
    past ``ndim``; as it is where an entry there names an axis (the rank error is JAX's)."""
    spec = sharding if isinstance(sharding, PartitionSpec) else sharding.spec
    if len(spec) <= ndim or any(entry is not None for entry in spec[ndim:]):
        return sharding
    cut = PartitionSpec(*spec[:ndim], unreduced=spec.unreduced, reduced=spec.reduced)
    return cut if isinstance(sharding, PartitionSpec) else sharding.with_spec(cut)


def copied(x):
    """A copy of ``x`` (an explicit one: ``jnp.copy``, ``jnp.array``, ``copy=True``): a
    traced value's is JAX's ``copy`` equation, a concrete array's a new array with a buffer of
    its own where it is on one device."""
    if isinstance(x, Tracer):
        return bind(p.copy_p, x)           # (weakly typed where x is: a copy keeps it)
    return x.own_copy() if isinstance(x, Array) else x


def fresh(x):
    """``x`` as a new array over the same data, where it is a concrete array (a traced value
    as it is): what a function JAX runs as a program of its own gives is an array of its own,
    so deleting or donating the operand leaves it alive (an explicit copy: ``copied``)."""
    return x.copy() if isinstance(x, Array) else x


@takes_device
def asarray(x, dtype=None, order=None, *, copy=None):
    """``x`` as an array of ``dtype`` (traced values pass through). ``order`` changes nothing
    (an array is never changed, and a host value is always copied in); ``copy=True`` gives a
    new array where ``x`` is one already."""
    result = _asarray(x, dtype, order)
    return copied(result) if copy and result is x else result


def _asarray(x, dtype, order):
    if order not in (None, "K"):
        raise NotImplementedError("Only implemented for order='K'")
    if (rule := key_array_rule("asarray", x)) is not None:
        return rule(x, dtype, False)
    x = jax_array_of(x)
    if isinstance(x, Tracer):
        return x if dtype is None else astype(x, dtype)
    if isinstance(x, np.ma.MaskedArray):
        raise masked_array_error()
    if isinstance(x, (list, tuple)) and builtins.any(map(_stays_on_devices, nested_values(x))):
        # traced values, or arrays laid out over a mesh, among the values: stacked where they
        # are, as JAX's (a list of arrays split over a mesh gives an array split so), not
        # fetched to the host; a list's array is typed
        return typed(stack([asarray(v, dtype) for v in x]))
    if isinstance(x, Array):
        if dtype is None:
            return x
        # a dtype asked for types the value (JAX's: jnp.float32(weak) is not weak)
        return typed(x) if np.dtype(dtype) == x.dtype else astype(x, dtype)
    # a Python number (not a bool, nor a list of them) is weakly typed, as in JAX
    weak = dtype is None and is_python_scalar(x) and not isinstance(x, bool)
    # (lists of empty lists hold no values: numpy's float, canonical float32, as JAX's)
    filled = isinstance(x, (list, tuple)) and builtins.any(True for _ in nested_values(x))
    if dtype is None and (is_python_scalar(x) or (filled and _all_python_scalars(x))):
        dtype = _dt.result_type([_dt.weak_scalar_dtype(v) for v in nested_values(x)],
                                [False] * len(list(nested_values(x))))
    elif dtype is None and filled:
        # typed values among Python numbers: JAX's promotion, the numbers weakly typed
        # ([jnp.int8(1), 2] is int8)
        leaves = list(nested_values(x))
        dtype = _dt.result_type(
            [_dt.weak_scalar_dtype(v) if is_python_scalar(v)
             else _dt.canonicalize(getattr(v, "dtype", None) or np.asarray(v).dtype)
             for v in leaves],
            [is_python_scalar(v) and not isinstance(v, bool) for v in leaves])
        x = _host_values(x)
    elif filled and not _all_python_scalars(x):
        x = _host_values(x)     # arrays among the values, a dtype given (bfloat16 too)
    array = detached(np.asarray(x, dtype=_dt.requested(dtype, "asarray") if dtype is not None
                                else None), x)
    if not _dt.is_valid(array.dtype):
        # name the value as given; a list is named by what numpy made of it
        check_jax_value(array if isinstance(x, (list, tuple)) else x, "asarray: x")
    # under a mesh set as the context, on its devices, replicated (as JAX's P()); in a
    # shard_map body, a constant of the body (JAX's context mesh there is the body's own)
    mesh = current_mesh() if current_shard_context() is None else None
    result = Array.from_global(array, NamedSharding(mesh, PartitionSpec()) if mesh else None)
    if _transfer_guard.active and values_known_now():
        # a host value goes to the devices, implicitly (a constant of a traced body does not)
        _transfer_guard.check("host_to_device", False, lambda: (
            f"aval={_transfer_guard.aval_text(result.shape, result.dtype, weak)}, "
            f"dst_sharding={result.sharding!r}"))
    if weak:
        result.weak = True
    return result


def _host_values(x):
    """A nested list of values with the arrays in it as numpy ones (so numpy converts every
    entry to one dtype, bfloat16 included)."""
    if isinstance(x, (list, tuple)):
        return [_host_values(v) for v in x]
    return x if is_python_scalar(x) else np.asarray(jax_array_of(x))


def jax_array_of(x):
    """``x``, or the array an object that is not one stands for (its ``__jax_array__``, JAX's
    protocol for array-like wrappers), in the functions that take arrays."""
    if getattr(type(x), "__jax_array__", None) is None:       # the common case, at once
        return x
    return x if isinstance(x, (Tracer, Array, np.ndarray)) else x.__jax_array__()


def _all_python_scalars(x) -> bool:
    return builtins.all(is_python_scalar(v) for v in nested_values(x))


def _stays_on_devices(value) -> bool:
    """Whether a value in a list given to ``asarray`` is stacked on the devices rather than
    read on the host: a traced value, or an array laid out over a mesh (one on one device
    gives the same array either way, and reading it is much cheaper than an eager stack)."""
    return isinstance(value, Tracer) or (
        isinstance(value, Array) and isinstance(value.sharding, NamedSharding))


def nested_values(x):
    """The leaves of a nested list or tuple, depth first."""
    if isinstance(x, (list, tuple)):
        for v in x:
            yield from nested_values(v)
    else:
        yield x


@takes_device
def array(x, dtype=None, copy=True, order="K", ndmin=0):
    """``x`` as a new array of ``dtype`` (see ``asarray``), with at least ``ndmin``
    dimensions (leading ones of size 1 added); an array given comes back as another array
    (``copy``), which lives on when the given one is deleted or donated."""
    if (rule := key_array_rule("asarray", x)) is not None:
        result = rule(x, dtype, copy)
        return result.reshape((1,) * (ndmin - result.ndim) + result.shape) \
            if ndmin > result.ndim else result
    if isinstance(x, np.ma.MaskedArray):
        x = np.array(x)         # its data, as JAX's array copies it through numpy
    result = asarray(x, asked_dtype(dtype, "array"), order)
    if copy and result is x:
        result = copied(result)
    missing = ndmin - ndim_of(result)
    return reshape(result, (1,) * missing + shape_of(result)) if missing > 0 else result


def _default_dtype(dtype, *values, function="zeros"):
    if is_key_dtype(dtype) or _is_float0(dtype):
        return dtype
    if dtype is not None:
        return _dt.requested(dtype, function)
    if builtins.any(isinstance(v, float) for v in values):
        return _dt.float_
    return _dt.float_


@takes_device
def full(shape, fill_value, dtype=None):
    """An array of ``shape`` filled with ``fill_value``."""
    if is_key_dtype(dtype) or is_key_array(fill_value):
        return KEY_ARRAY_RULES["full"](shape, fill_value, dtype)
    shape = shape_tuple(shape)
    if _is_float0(dtype):
        # float0 holds no values: JAX gives a host array of its zeros, whatever the fill
        return np.zeros(shape, _dt.FLOAT0)
    if builtins.any(d < 0 for d in shape):
        raise TypeError(f"broadcast_in_dim shape must have every element be nonnegative, got "
                        f"{shape}.")
    # weakly typed when the fill is and no dtype is asked for, as JAX's
    weak = dtype is None and is_weakly_typed(fill_value) and not isinstance(fill_value, bool)
    if dtype is None:
        dtype = dtype_of(fill_value) if not is_python_scalar(fill_value) else \
            _dt.weak_scalar_dtype(fill_value)
    else:
        dtype = _dt.requested(dtype, "full") if np.dtype(dtype) != _dt.canonicalize(
            dtype) else dtype
        if type(fill_value) is int and -2 ** 63 <= fill_value < 2 ** 63:
            # a dtype asked for takes an int fill as JAX's lax.full does: from its 64-bit
            # value, wrapped (full(s, 2**32 - 1, uint32) is all ones, not an OverflowError)
            fill_value = np.int64(fill_value)
    value = convert(fill_value, dtype)
    if shape_of(value) == shape:
        # a 0-d result is an array too (a numpy scalar would compute in numpy's types)
        result = value if isinstance(value, (Tracer, Array)) else asarray(value)
    else:
        result = broadcast_to(value, shape)
    return weakened(result) if weak else typed(result)


def asked_dtype(dtype, function: str):
    """``dtype`` as asked of ``function``, with JAX's warning (or error, by
    ``jax_explicit_x64_dtypes``) for a 64-bit dtype with x64 off, naming ``function``: a plain
    dtype comes back canonical; None, a key dtype or float0 as it is."""
    if dtype is None or is_key_dtype(dtype) or _is_float0(dtype):
        return dtype
    try:
        np.dtype(dtype)
    except TypeError:
        return dtype           # (not a dtype: the caller's own check names it)
    return _dt.requested(dtype, function)


def _is_float0(dtype) -> bool:
    """Whether ``dtype`` asks for float0, the dtype of the cotangent of an integer input."""
    if dtype is None or isinstance(dtype, str) and dtype != "float0":
        return False
    try:
        return np.dtype(dtype) == _dt.FLOAT0
    except TypeError:
        return False


def typed(value):
    """``value`` strongly typed: a weak array's copy, a weak traced value converted to its own
    dtype (a typed equation); others as they are."""
    if getattr(value, "weak", False) is not True:
        return value
    if isinstance(value, Tracer):
        return bind(p.convert_element_type_p, value, new_dtype=dtype_of(value))
    return value.with_weak(False)


def shape_tuple(shape) -> tuple:
    """A shape given as an int or a sequence, as a tuple of ints (a traced size, where it is
    known now); anything else is JAX's TypeError, a plain one for a traced size too (with
    its hint about static arguments), as JAX's canonicalize_shape raises."""
    entries = (shape,) if isinstance(shape, int) or getattr(shape, "shape", None) == () \
        else shape
    message = ("Shapes must be 1D sequences of concrete values of integer type, got "
               f"{tuple(entries) if isinstance(entries, (list, tuple)) else (shape,)}.")
    try:
        return tuple(static_int(d, "a shape") for d in entries)
    except ConcretizationTypeError:
        raise TypeError(
            f"{message}\nIf using `jit`, try using `static_argnums` or applying `jit` to "
            "smaller subfunctions.") from None
    except TypeError:
        raise TypeError(message) from None


@takes_device
def zeros(shape, dtype=None):
    """An array of ``shape`` filled with zeros (float32 unless ``dtype`` says)."""
    _check_forgot_shape_tuple("zeros", shape, dtype)
    return full(shape, 0, _default_dtype(dtype))


@takes_device
def ones(shape, dtype=None):
    """An array of ``shape`` filled with ones (float32 unless ``dtype`` says)."""
    _check_forgot_shape_tuple("ones", shape, dtype)
    return full(shape, 1, _default_dtype(dtype, function="ones"))


@takes_device
def empty(shape, dtype=None):
    """Like ``zeros`` (shardc has no uninitialised memory)."""
    _check_forgot_shape_tuple("empty", shape, dtype)
    return zeros(shape, dtype)


def _check_forgot_shape_tuple(name, shape, dtype) -> None:
    """JAX's hint for ``jnp.zeros(2, 3)``: an int as the dtype after an int shape."""
    if isinstance(dtype, int) and isinstance(shape, int):
        raise TypeError(f"Cannot interpret '{dtype}' as a data type.\n\nDid you accidentally "
                        f"write `jax.numpy.{name}({shape}, {dtype})` when you meant "
                        f"`jax.numpy.{name}(({shape}, {dtype}))`, i.e. with a single tuple "
                        "argument for the shape?")


@takes_device
def full_like(x, fill_value, dtype=None, shape=None):
    """An array shaped like ``x`` (its dtype unless ``dtype`` says) filled with ``fill_value``.

    In a shard_map body the result varies over the mesh axes ``x`` varies over (JAX 0.10.2).
    """
    if is_key_dtype(dtype) or is_key_array(x) or is_key_array(fill_value):
        return KEY_ARRAY_RULES["full_like"](x, fill_value, dtype, shape)
    dtype = asked_dtype(dtype, "full_like")
    if _dt.is_float0(x):
        # float0 zeros give their shape (and, unless asked otherwise, their dtype: JAX's
        # *_like of float0 zeros are float0 zeros)
        return full(x.shape if shape is None else shape, fill_value,
                    _dt.FLOAT0 if dtype is None else dtype)
    result = full(shape_of(x) if shape is None else shape, fill_value,
                  dtype if dtype is not None else dtype_of(x))
    if _dt.is_float0(result):
        return result
    layout = _like_layout(x, shape, dtype)
    if layout is None:
        result = vary_like(result, x)
    elif isinstance(layout, SingleDeviceSharding):
        result = result.committed_to(layout.device)
    else:
        result = put_on(result, _on_devices(layout, result))
    # of a weakly typed operand's dtype, weakly typed (JAX's)
    return weakened(result) if dtype is None and is_weakly_typed(x) else result


def _like_layout(x, shape, dtype):
    """The layout a ``*_like`` result copies from ``x``, as JAX's: a traced operand's type
    where the shape is its own; a concrete array's (or a stand-in's) sharding where it is
    committed, not weakly typed with no dtype asked for, and the shape is its own or it is
    whole on every device (one device's, or replicated). None: the default placement (a
    traced layout is propagation's to choose)."""
    if isinstance(x, Tracer):
        typed = aval_of(x).type_sharding
        return named_sharding(aval_of(x)) if typed is not None and shape is None else None
    sharding = getattr(x, "sharding", None)
    if (not isinstance(x, (Array, ShapeDtypeStruct)) or sharding is None
            or not getattr(x, "committed", True) or dtype is None and is_weakly_typed(x)):
        return None
    if shape is not None and shape_tuple(shape) != tuple(x.shape) and \
            not sharding.is_fully_replicated:
        return None
    if isinstance(sharding, NamedSharding) and isinstance(sharding.mesh, AbstractMesh) and \
            aval_of(x).type_sharding is None:
        return None         # a stand-in's layout on an abstract Auto mesh: JAX ignores it
    return sharding


def _on_devices(sharding, result):
    """The layout a concrete result of a ``*_like`` takes: ``sharding``, where it names an
    abstract mesh (a ShapeDtypeStruct's) on the devices of the mesh set whose names and
    sizes it has, as JAX's; JAX's ValueError where there is none."""
    if not isinstance(sharding.mesh, AbstractMesh) or isinstance(result, Tracer):
        return sharding
    mesh = current_mesh()
    if mesh is None or mesh.shape_tuple != sharding.mesh.shape_tuple:
        devices = 1 if mesh is None else mesh.size
        raise ValueError(f"Length of device assignment {devices} is not equal to the size of "
                         f"the mesh {sharding.mesh.size} of aval {aval_of(result).str_long()}"
                         ". Please enter your `jit` into a mesh context via `jax.set_mesh`.")
    return NamedSharding(mesh, sharding.spec)


def vary_like(result, x):
    """``result`` made to vary over the manual axes ``x`` varies over that it does not (in a
    shard_map body with the check on)."""
    shard = current_shard_context()
    vma = aval_of(x).vma
    if not vma or shard is None or not shard.check_vma:
        return result
    axes = tuple(a for a in shard.mesh.axis_names if a in vma and a not in aval_of(result).vma)
    return bind(coll.pvary_p, result, mesh_axes=axes) if axes else result


@takes_device
def zeros_like(x, dtype=None, shape=None):
    """Zeros shaped like ``x``, of its dtype unless ``dtype`` says."""
    return full_like(x, 0, asked_dtype(dtype, "zeros_like"), shape)


@takes_device
def ones_like(x, dtype=None, shape=None):
    """Ones shaped like ``x``, of its dtype unless ``dtype`` says."""
    return full_like(x, 1, asked_dtype(dtype, "ones_like"), shape)


@takes_device
def empty_like(x, dtype=None, shape=None):
    """Like ``zeros_like``."""
    return zeros_like(x, dtype, shape)


def _python_scalar_as(x, dtype: np.dtype):
    """A Python scalar as a numpy scalar of ``dtype``, converted as JAX converts weakly typed
    values: an int is an int32 first (OverflowError outside its range, as JAX with x64 off).
    A program repeats its constants: each (type, value, sign, dtype) is converted once."""
    kind = type(x)
    if kind is complex:
        return _python_scalar_converted(x, dtype)
    # 0.0 and -0.0 are equal keys: the sign keeps them apart (a NaN never matches, so is
    # converted each time)
    key = (kind, x, math.copysign(1.0, x) if kind is float else 1.0, dtype)
    found = _SCALARS.get(key)
    if found is None:
        found = _python_scalar_converted(x, dtype)
        if len(_SCALARS) > 4096:
            _SCALARS.clear()
        _SCALARS[key] = found
    return found


_SCALARS: dict = _dt.register_cache({})


def _python_scalar_converted(x, dtype: np.dtype):
    if isinstance(x, int) and not isinstance(x, bool):
        if not in_default_int_range(x):          # (int64's range with x64 on, as JAX's)
            default = _dt.int_
            raise OverflowError(f"Python int {x} is too large to convert to {default} (the "
                                "default integer type"
                                + ("; x64 is off)" if default.itemsize < 8 else ")"))
        x = np.int64(x)
    with np.errstate(over="ignore"):      # a float too large for float16 is inf, as in JAX
        return convert_element(np.asarray(x), dtype)[()]


def astype(x, dtype, /, *, copy=False, device=None):
    """``x`` converted to ``dtype`` (canonicalised, with JAX's warning: float64 -> float32,
    int64 -> int32); ``copy=True`` gives a new array where the conversion changes nothing;
    ``device`` places the result."""
    if device is not None:
        return put_on(astype(x, dtype, copy=copy), device)
    dtype = asked_dtype(dtype, "astype")
    x = as_array(x)
    # a dtype asked for types the value (JAX's astype is never weakly typed)
    result = typed(convert(x, dtype))
    return copied(result) if copy and result is x else result


# --- shapes ----------------------------------------------------------------------------------

def _resolve_shape(old: tuple, shape) -> tuple:
    """``shape`` with its one ``-1`` filled in; TypeError naming both shapes if sizes differ."""
    requested = shape_tuple(shape)
    size = math.prod(old)
    shape = list(requested)
    if shape.count(-1) > 1:
        raise TypeError("can only specify one unknown axis size with a `-1` value, got "
                        f"{requested}")
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        if known == 0 or size % known:
            raise TypeError(f"cannot reshape array of shape {old} (size {size}) into shape "
                            f"{requested} because the product of specified axis sizes "
                            f"({known}) does not evenly divide {size}")
        shape[shape.index(-1)] = size // known
    if builtins.any(d < 0 for d in shape) or math.prod(shape) != size:
        raise TypeError(f"cannot reshape array of shape {old} (size {size}) into shape "
                        f"{requested} (size {math.prod(shape)})")
    return tuple(shape)


def reshape(x, *shape, order="C", out_sharding=None, copy=None, **kwargs):
    """Reshape ``x`` to ``shape`` (given by position, or as ``shape=`` as JAX's signature names
    it), its elements read and placed in row-major order (``'C'``) or column-major (``'F'``:
    the reversed reshape of the transpose, transposed, as JAX's); one entry may be -1.
    ``out_sharding``: the result's split (on Explicit axes any reshape may name one; JAX's
    rule types the others). ``copy`` changes nothing: arrays are immutable.

    >>> jnp.arange(6).reshape(2, -1).shape
    (2, 3)
    """
    if "shape" in kwargs:
        if shape:
            raise TypeError("reshape() got multiple values for argument 'shape'")
        shape = (kwargs.pop("shape"),)
    if kwargs:
        raise TypeError(f"reshape() got an unexpected keyword argument {next(iter(kwargs))!r}")
    if order == "A":
        raise NotImplementedError("np.reshape order=A is not implemented.")
    if order not in ("C", "F"):
        raise ValueError(f"Unexpected value for 'order' argument: {order}.")
    if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
        shape = shape[0]
    if (rule := key_array_rule("reshape", x)) is not None:
        return rule(x, shape)
    x = as_array(x)
    new = _resolve_shape(shape_of(x), shape)
    if order == "F" and len(new) + ndim_of(x) > 2:
        backwards = bind(p.transpose_p, x, permutation=tuple(range(ndim_of(x)))[::-1])
        backwards = reshape(backwards, new[::-1])
        return reshape(bind(p.transpose_p, backwards, permutation=tuple(range(len(new)))[::-1]),
                       new, out_sharding=out_sharding)
    if out_sharding is not None:
        return typed_reshape(x, new, out_sharding, "reshape")
    if shape_of(x) == new:
        return x
    return bind(p.reshape_p, x, new_sizes=new)


def typed_reshape(x, new, out_sharding, name: str):
    """A reshape given ``out_sharding``: on Explicit axes the reshape takes it (any reshape
    is then typed), elsewhere its result is constrained to that layout."""
    check_out_sharding(out_sharding, name)
    sharding = resolve_sharding(out_sharding, f"{name}(out_sharding=...)")
    if isinstance(sharding, NamedSharding) and mesh_explicit(sharding.mesh):
        return bind(p.reshape_p, x, new_sizes=tuple(new), out_sharding=sharding)
    result = x if shape_of(x) == tuple(new) else bind(p.reshape_p, x, new_sizes=tuple(new))
    return constrain(result, sharding)


def ravel(x, order="C", *, out_sharding=None):
    """``x`` flattened to one dimension (row-major, or column-major with ``order='F'``): a
    new array, as JAX's jitted ravel gives, where ``x`` is one-dimensional already."""
    if order == "K":
        raise NotImplementedError("Ravel not implemented for order='K'.")
    result = reshape(x, (-1,), order=order, out_sharding=out_sharding)
    return fresh(result) if result is x else result


# what JAX's ConcretizationTypeError says of a traced ``axis``: the reductions' words, and
# those of the functions that take an axis or a sequence of them
STATIC_AXIS = "The axis argument must be known statically."
STATIC_INDICES = "expected a static index or sequence of indices."


def index_tuple(value, context: str = STATIC_INDICES) -> tuple:
    """``value`` (an index or a sequence of them) as a tuple of ints (JAX's
    ``_ensure_index_tuple``): a traced ``value`` is JAX's ConcretizationTypeError saying
    ``context``; a traced entry, its TracerIntegerConversionError."""
    value = concrete_or_error(value, context)
    try:
        return (operator.index(value),)
    except TypeError:
        return tuple(operator.index(v) for v in value)


def canonical_axis(axis, ndim) -> int:
    """``axis`` in ``[0, ndim)``; numpy's AxisError (a ValueError and an IndexError) if out of
    bounds."""
    axis = operator.index(axis)
    if not -ndim <= axis < ndim:
        raise np.exceptions.AxisError(axis, ndim)
    return axis % ndim


def expand_dims(x, axis):
    """``x`` with size-1 dimensions inserted at ``axis`` (an int or a sequence of distinct
    ones; 0-d integer arrays count as ints)."""
    if (rule := key_array_rule("expand_dims", x)) is not None:
        return rule(x, axis)
    axes = index_tuple(axis)
    shape = list(shape_of(x))
    ndim = len(shape) + len(axes)
    where = sorted(canonical_axis(a, ndim) for a in axes)
    if len(set(where)) != len(where):
        raise ValueError(f"repeated axis in expand_dims: {tuple(int(a) for a in axes)}")
    for a in where:
        shape.insert(a, 1)
    return reshape(x, tuple(shape))


# how the array functions that only move elements (where, concatenate, stack, take,
# broadcast_to, lax.select) act on typed PRNG key arrays: on their data, the key's word axis
# kept last. Filled by ``shardc.random``, which defines key arrays.
KEY_ARRAY_RULES: dict = {}


def key_array_rule(name: str, *values):
    """The rule for ``name`` on key arrays when one of ``values`` is a key array, else None."""
    for value in values:
        if is_key_array(value):
            return KEY_ARRAY_RULES[name]
    return None


def is_key_dtype(dtype) -> bool:
    """Whether ``dtype`` is a typed PRNG key's dtype (``key<fry>``)."""
    return dtype is not None and not isinstance(dtype, (np.dtype, str, type)) and \
        isinstance(getattr(dtype, "type", None), type) and issubclass(dtype.type, prng_key)


def is_key_array(value) -> bool:
    """Whether ``value`` (or an entry of a list or tuple) is an array of typed PRNG keys."""
    if isinstance(value, (list, tuple)):
        return any(is_key_array(v) for v in value)
    dtype = getattr(value, "dtype", None)
    return dtype is not None and not isinstance(dtype, np.dtype) and \
        issubdtype(dtype, prng_key)


def concatenate(arrays, axis=0, dtype=None):
    """Join ``arrays`` along an existing ``axis`` (flattened first when ``axis`` is None),
    each converted to ``dtype`` first when it is given (else to the dtype they promote to)."""
    if not len(arrays):
        raise ValueError("Need at least one array to concatenate.")
    if (rule := key_array_rule("concatenate", list(arrays))) is not None:
        return rule(arrays, axis)
    if dtype is not None:
        dtype = _dt.requested(dtype, "concatenate")
        arrays = [astype(a, dtype) for a in arrays]
    given = list(arrays)
    arrays = [as_array(a) for a in promote(*arrays)]
    if axis is None:
        return concatenate([ravel(a) for a in arrays], 0)
    shapes = [shape_of(a) for a in arrays]
    if shapes[0] == ():
        raise ValueError("Zero-dimensional arrays cannot be concatenated.")
    axis = canonical_axis(axis, len(shapes[0]))
    for s in shapes[1:]:
        if len(s) != len(shapes[0]) or s[:axis] + s[axis + 1:] != \
                shapes[0][:axis] + shapes[0][axis + 1:]:
            raise TypeError("Cannot concatenate arrays with shapes that differ in dimensions "
                            f"other than the one being concatenated (axis {axis}): got "
                            + ", ".join(str(t) for t in shapes))
    if len(arrays) == 1:
        return arrays[0]
    # weakly typed as JAX's promotion of the pieces says (a weak float beside ints is weak)
    return weakly_typed_like(bind(p.concatenate_p, *arrays, dimension=axis), *given)


def stack(arrays, axis=0, out=None, dtype=None):
    """Join ``arrays`` of one shape along a new ``axis``, each converted to ``dtype`` first
    when it is given."""
    if not len(arrays):
        raise ValueError("Need at least one array to stack.")
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.stack is not supported.")
    for k, a in enumerate(arrays):
        if isinstance(a, (list, tuple)):          # JAX's: entries are arrays or scalars
            raise TypeError(f"stack requires ndarray or scalar arguments, got {type(a)} at "
                            f"position {k}.")
    if (rule := key_array_rule("stack", list(arrays))) is not None:
        return rule(arrays, axis)
    if dtype is not None:
        dtype = _dt.requested(dtype, "stack")
        arrays = [astype(a, dtype) for a in arrays]
    arrays = [as_array(a) for a in arrays]
    if len({shape_of(a) for a in arrays}) > 1:
        raise ValueError("All input arrays must have the same shape, got "
                         + ", ".join(str(shape_of(a)) for a in arrays))
    ndim = len(shape_of(arrays[0])) + 1
    axis = canonical_axis(axis, ndim)
    return concatenate([expand_dims(a, axis) for a in arrays], axis)


def concrete_value(value, name, what):
    """``value`` as a numpy array; an error naming ``what`` when it is traced (and not known
    now)."""
    value = value_if_known(value)
    if isinstance(value, Tracer):
        raise ConcretizationTypeError(f"jnp.{name}: {what} must be concrete (it decides the "
                                      "shape of the result), but it is traced here")
    return np.asarray(value)
