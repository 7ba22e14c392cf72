"""``shardc.lax``'s shape operations beyond ``reshape`` and ``slice``: ``broadcast``,
``expand_dims``, ``squeeze``, ``rev``, ``pad`` (with interior and negative padding),
``slice_in_dim``, ``index_in_dim``, ``full`` and ``full_like``; and the operand helpers the
other modules share."""
from __future__ import annotations

import functools

from compiler.tracing import Tracer, bind
from ir import primitives as p
from ir.sharding import AbstractMesh, NamedSharding
import shardc.numpy as jnp
from shardc.numpy._core import (constrain, dtype_of, key_array_rule, put_on, typed,
                                weakly_typed_like)

__all__ = [
    "broadcast", "expand_dims", "squeeze", "rev", "pad", "slice_in_dim", "index_in_dim", "full",
    "full_like",
]


def weak_as_operands(*argnums):
    """A lax function whose result is weakly typed as its operands at ``argnums`` make it
    (``weakly_typed_like``; JAX's lax rule: ``lax.reduce_sum`` of a weak array, ``lax.pad``
    of a Python number)."""
    def wrap(fn):
        @functools.wraps(fn)
        def op(*args, **kwargs):
            return weakly_typed_like(fn(*args, **kwargs),
                                     *[args[k] for k in argnums if k < len(args)])
        return op
    return wrap


def array_operand(x):
    """``x`` as an array: an array or a traced value as it is, anything else (numpy arrays
    included) by ``jnp.asarray``, which gives it the dtype JAX would (a numpy float64 is
    float32 with x64 off, as JAX canonicalizes every operand)."""
    return x if hasattr(x, "aval") else jnp.asarray(x)


def checked_axis(axis, ndim):
    """``axis`` in ``[0, ndim)``; a ValueError naming it when out of bounds."""
    if not -ndim <= axis < max(ndim, 1):
        raise ValueError(f"axis {axis} is out of bounds for an array of rank {ndim}")
    return axis % max(ndim, 1)


def slice_along(x, start, stop, step, axis):
    """``x[start:stop:step]`` along ``axis``: one ``slice`` for a positive step (as JAX's
    ``slice_in_dim``, not indexing, which takes a gather on an array laid out over several
    devices), else indexing."""
    if step is not None and step <= 0:
        index = [slice(None)] * x.ndim
        index[axis] = slice(start, stop, step)
        return x[tuple(index)]
    lo, hi, step = slice(start, stop, step).indices(x.shape[axis])
    starts, limits = [0] * x.ndim, list(x.shape)
    starts[axis], limits[axis] = lo, max(lo, hi)
    if step == 1 and (lo, limits[axis]) == (0, x.shape[axis]):
        return x
    if (rule := key_array_rule("slice", x)) is not None:
        return rule(x, starts, limits, None if step == 1 else tuple(
            step if d == axis else 1 for d in range(x.ndim)))
    return bind(p.slice_p, x, start_indices=tuple(starts), limit_indices=tuple(limits),
                strides=None if step == 1 else tuple(step if d == axis else 1
                                                      for d in range(x.ndim)))


# --- shapes ----------------------------------------------------------------------------------

def broadcast(operand, sizes, *, out_sharding=None):
    """``operand`` with new leading dimensions ``sizes``; ``out_sharding``: the result's
    split, as ``broadcast_in_dim`` takes it."""
    rule = key_array_rule("broadcast_in_dim", operand)
    if rule is None:
        operand = array_operand(operand)
    sizes = tuple(int(s) for s in sizes)
    dims = tuple(range(len(sizes), len(sizes) + operand.ndim))
    if rule is not None and out_sharding is None:
        return rule(operand, sizes + operand.shape, dims)
    if out_sharding is not None:
        from shardc.lax._ops import broadcast_in_dim   # (_ops imports this module)
        return broadcast_in_dim(operand, sizes + operand.shape, dims,
                                out_sharding=out_sharding)
    return bind(p.broadcast_in_dim_p, operand, shape=sizes + operand.shape,
                broadcast_dimensions=dims)


def expand_dims(array, dimensions):
    return jnp.expand_dims(array, tuple(dimensions))


def squeeze(array, dimensions):
    """``array`` without its size-1 ``dimensions`` (each named once, as JAX's lax requires)."""
    dimensions = tuple(dimensions)
    ndim = jnp.ndim(array)
    normalized = [d + ndim if isinstance(d, int) and d < 0 else d for d in dimensions]
    if len(set(normalized)) != len(normalized):
        raise ValueError(f"dimensions are not unique: {dimensions}")
    return jnp.squeeze(array, dimensions)


def rev(operand, dimensions):
    return jnp.flip(operand, tuple(dimensions))


@weak_as_operands(0, 1)
def pad(operand, padding_value, padding_config):
    """``operand`` with ``(low, high, interior)`` padding per dimension (negative low or high
    trims)."""
    operand = array_operand(operand)
    if jnp.ndim(padding_value) != 0:
        raise ValueError(f"padding_value must be a scalar; got "
                         f"np.shape(padding_value)={jnp.shape(padding_value)}")
    config = tuple((int(lo), int(hi), int(interior)) for lo, hi, interior in padding_config)
    if len(config) != operand.ndim:
        raise ValueError(f"length of padding_config must equal the number of axes of operand, "
                         f"got padding_config {config} for operand shape {operand.shape}")
    if any(interior < 0 for _, _, interior in config):
        raise ValueError(f"interior padding in padding_config must be nonnegative, got "
                         f"padding_config {config}")
    for d, (lo, hi, interior) in zip(operand.shape, config):
        if lo + d + hi + max(0, d - 1) * interior < 0:
            raise ValueError(f"Dimension size after padding is not at least 0, got result "
                             f"shape from padding config {config} on operand of shape "
                             f"{operand.shape}")
    if dtype_of(padding_value) != operand.dtype:
        raise TypeError(f"pad operand and padding_value must be same dtype: got "
                        f"{operand.dtype} and {dtype_of(padding_value)}.")
    # one pad, trims included (as JAX's: a split dimension keeps its split when the result
    # divides, whatever the padding on the way)
    return bind(p.pad_p, operand, jnp.asarray(padding_value, operand.dtype),
                padding_config=config)


def slice_in_dim(operand, start_index, limit_index, stride=1, axis=0):
    operand = array_operand(operand)
    axis = checked_axis(axis, operand.ndim)
    return slice_along(operand, start_index, limit_index, stride, axis)


def index_in_dim(operand, index, axis=0, keepdims=True):
    """The slice at the static ``index`` along ``axis`` (negative from the end)."""
    operand = array_operand(operand)
    axis = checked_axis(axis, operand.ndim)
    size = operand.shape[axis]
    if not -size <= index < size:
        raise IndexError(f"index_in_dim: index {index} is out of bounds for axis {axis} "
                         f"of size {size}")
    index = index % size
    out = slice_along(operand, index, index + 1, 1, axis)
    return out if keepdims else jnp.squeeze(out, axis)


def full(shape, fill_value, dtype=None, *, sharding=None):
    """An array of ``shape`` filled with ``fill_value``; ``sharding`` lays a concrete result
    out (JAX's ``lax.full``)."""
    result = jnp.full(tuple(shape) if not isinstance(shape, int) else (shape,), fill_value,
                      dtype)
    return result if sharding is None else _laid_out(result, sharding)


def full_like(x, fill_value, dtype=None, shape=None, sharding=None):
    """``jnp.full_like``; a ``sharding`` given lays the result out instead of ``x``'s."""
    result = jnp.full_like(x, fill_value, dtype=dtype, shape=shape)
    return result if sharding is None else _laid_out(result, sharding)


def _laid_out(result, sharding):
    """A made array laid out by ``sharding`` as JAX's ``lax.full`` lays it: a concrete one
    there, strongly typed (an array made from its blocks, its spec as given); a traced one
    only by a sharding on an abstract mesh (JAX ignores a concrete one under a trace)."""
    if not isinstance(result, Tracer):
        return typed(put_on(result, sharding))
    if isinstance(sharding, NamedSharding) and isinstance(sharding.mesh, AbstractMesh):
        return constrain(result, sharding)
    return result
