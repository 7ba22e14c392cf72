"""``shardc.nn.initializers``: functions ``init(key, shape, dtype=float32, out_sharding=None)``
that draw parameter arrays, with JAX's names and defaults. ``out_sharding`` (a NamedSharding,
or a PartitionSpec on the current mesh, of Explicit axes) lays the result out, as the
sampler's ``out_sharding`` does.

>>> w = nn.initializers.glorot_uniform()(random.key(0), (784, 256))
>>> w = nn.initializers.normal()(random.key(0), (8, 4), out_sharding=P("x"))   # rows split
"""
from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

import numpy as np

from ir import dtypes as _dt
import shardc.numpy as jnp
import shardc.random as random
from shardc.numpy._core import check_out_sharding
from shardc.random._keys import sample_shape

__all__ = [
    "Initializer", "zeros", "ones", "constant", "normal", "uniform", "truncated_normal",
    "variance_scaling", "glorot_normal", "glorot_uniform", "xavier_normal", "xavier_uniform",
    "lecun_normal", "lecun_uniform", "he_normal", "he_uniform", "kaiming_normal",
    "kaiming_uniform", "orthogonal", "delta_orthogonal",
]

# The standard deviation of a standard normal truncated to (-2, 2): variance_scaling divides
# by it so the truncated draws have the variance asked for.
_TRUNCATED_STDDEV = 0.87962566103423978
# The same for a complex standard normal whose modulus is truncated to 2.
_COMPLEX_TRUNCATED_STDDEV = 0.95311164380491208


@runtime_checkable
class Initializer(Protocol):
    """What every initializer is: ``init(key, shape, dtype=None, out_sharding=None)``."""
    def __call__(self, key, shape, dtype=None, out_sharding=None):
        raise NotImplementedError


def _dtype_or_default(dtype):
    """``dtype``, or JAX's default float (float64 under x64, else float32) for None."""
    return _dt.canonicalize(float if dtype is None else dtype)


def zeros(key, shape, dtype=None, out_sharding=None):
    """An array of zeros (``key`` is unused)."""
    return jnp.zeros(sample_shape(shape), _dtype_or_default(dtype), out_sharding=out_sharding)


def ones(key, shape, dtype=None, out_sharding=None):
    """An array of ones (``key`` is unused)."""
    return jnp.ones(sample_shape(shape), _dtype_or_default(dtype), out_sharding=out_sharding)


def constant(value, dtype=None):
    """An initializer filling every entry with ``value``."""
    def init(key, shape, dtype=dtype, out_sharding=None):
        if out_sharding is not None:
            check_out_sharding(out_sharding, "nn.initializers.constant")
        return jnp.full(sample_shape(shape), value, _dtype_or_default(dtype),
                        out_sharding=out_sharding)
    return init


def normal(stddev=1e-2, dtype=None):
    """Normal draws with mean 0 and standard deviation ``stddev`` (complex ones for a complex
    dtype, as ``random.normal``'s)."""
    def init(key, shape, dtype=dtype, out_sharding=None):
        dtype = _dtype_or_default(dtype)
        draws = random.normal(key, shape, dtype, out_sharding=out_sharding)
        return draws * jnp.array(stddev, dtype)
    return init


def uniform(scale=1e-2, dtype=None):
    """Uniform draws in ``[0, scale)``."""
    def init(key, shape, dtype=dtype, out_sharding=None):
        dtype = _dtype_or_default(dtype)
        draws = random.uniform(key, shape, dtype, out_sharding=out_sharding)
        return draws * jnp.array(scale, dtype)
    return init


def truncated_normal(stddev=1e-2, dtype=None, lower=-2.0, upper=2.0):
    """Normal draws truncated to ``[lower, upper]`` standard deviations, scaled by ``stddev``."""
    def init(key, shape, dtype=dtype, out_sharding=None):
        dtype = _dtype_or_default(dtype)
        draws = random.truncated_normal(key, lower, upper, shape, dtype,
                                        out_sharding=out_sharding)
        return draws * jnp.array(stddev, dtype)
    return init


def _compute_fans(shape, in_axis=-2, out_axis=-1, batch_axis=()):
    """``(fan_in, fan_out)``: the in and out sizes times the receptive field, JAX's formula:
    the field is the whole size divided by the in, out and batch sizes (each axis an int or
    a sequence of them; an empty sequence has size 1), so a rank-1 or rank-0 shape has fans
    when the axes are given."""
    if isinstance(in_axis, int) and in_axis == -2 and len(shape) <= 1:
        raise ValueError(f"Can't compute input and output sizes of a {len(shape)}-dimensional"
                         " weights tensor with default in_axis. Must be at least 2D or specify"
                         " in_axis explicitly.")
    size = lambda axes: (shape[axes] if isinstance(axes, int)
                         else math.prod(shape[i] for i in axes))
    in_size, out_size = size(in_axis), size(out_axis)
    receptive_field_size = math.prod(shape) / in_size / out_size / size(batch_axis)
    return in_size * receptive_field_size, out_size * receptive_field_size


def _complex_uniform(key, shape, dtype, out_sharding=None):
    """Complex draws uniform on the disk of radius sqrt 2 (mean 0, ``E|z|**2 == 1``)."""
    key_r, key_theta = random.split(key)
    real_dtype = _dt.real_dtype(dtype)
    dtype = _dt.complex_dtype(real_dtype)
    u_r = random.uniform(key_r, shape, real_dtype, out_sharding=out_sharding)
    u_theta = random.uniform(key_theta, shape, real_dtype, out_sharding=out_sharding)
    r = jnp.astype(jnp.sqrt(2 * u_r), dtype)
    theta = 2 * np.pi * jnp.astype(u_theta, dtype)
    return r * jnp.exp(1j * theta)


def _complex_truncated_normal(key, upper, shape, dtype, out_sharding=None):
    """Complex normal draws (variance 1 before truncation) whose modulus is below ``upper``:
    ``|z|**2`` is exponential, so its truncation is an inverted CDF of a uniform draw."""
    key_r, key_theta = random.split(key)
    real_dtype = _dt.real_dtype(dtype)
    dtype = _dt.complex_dtype(real_dtype)
    u_r = random.uniform(key_r, shape, real_dtype, out_sharding=out_sharding)
    u_theta = random.uniform(key_theta, shape, real_dtype, out_sharding=out_sharding)
    t = (1 - jnp.exp(jnp.array(-(upper ** 2), dtype))) * jnp.astype(u_r, dtype)
    r = jnp.sqrt(-jnp.log(1 - t))
    theta = 2 * np.pi * jnp.astype(u_theta, dtype)
    return r * jnp.exp(1j * theta)


def variance_scaling(scale, mode, distribution, in_axis=-2, out_axis=-1, batch_axis=(),
                     dtype=None):
    """Draws with variance ``scale / n``, ``n`` the fan in, the fan out, their mean or their
    geometric mean (``mode``: ``"fan_in"``, ``"fan_out"``, ``"fan_avg"``, ``"fan_geo_avg"``),
    from ``distribution`` ``"truncated_normal"`` (cut at two standard deviations, or for a
    complex dtype at modulus two), ``"normal"`` or ``"uniform"`` (on an interval, or a disk
    for a complex dtype). The axes are ints or sequences of ints; every other axis is the
    receptive field. As JAX's, a bad ``mode`` or ``distribution`` is refused when the
    initializer is called.

    >>> w = nn.initializers.variance_scaling(2.0, "fan_in", "normal")(random.key(0), (64, 32))
    """
    def init(key, shape, dtype=dtype, out_sharding=None):
        shape = sample_shape(shape)
        dtype = _dtype_or_default(dtype)
        fan_in, fan_out = _compute_fans(shape, in_axis, out_axis, batch_axis)
        if mode == "fan_in":
            denominator = fan_in
        elif mode == "fan_out":
            denominator = fan_out
        elif mode == "fan_avg":
            denominator = (fan_in + fan_out) / 2
        elif mode == "fan_geo_avg":
            denominator = (fan_in * fan_out) ** 0.5
        else:
            raise ValueError(f"invalid mode for variance scaling initializer: {mode}")
        variance = jnp.array(scale / denominator, dtype=dtype)
        floating = _dt.is_float(dtype)
        if distribution == "truncated_normal":
            if floating:
                stddev = jnp.sqrt(variance) / jnp.array(_TRUNCATED_STDDEV, dtype)
                return random.truncated_normal(key, -2, 2, shape, dtype,
                                               out_sharding=out_sharding) * stddev
            stddev = jnp.sqrt(variance) / jnp.array(_COMPLEX_TRUNCATED_STDDEV, dtype)
            return _complex_truncated_normal(key, 2, shape, dtype, out_sharding) * stddev
        if distribution == "normal":
            return random.normal(key, shape, dtype, out_sharding=out_sharding) * jnp.sqrt(variance)
        if distribution == "uniform":
            if floating:
                return random.uniform(key, shape, dtype, -1, out_sharding=out_sharding) \
                    * jnp.sqrt(3 * variance)
            return _complex_uniform(key, shape, dtype, out_sharding) * jnp.sqrt(variance)
        raise ValueError(f"invalid distribution for variance scaling initializer: "
                         f"{distribution}")
    return init


def glorot_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
    return variance_scaling(1.0, "fan_avg", "uniform", in_axis, out_axis, batch_axis, dtype)


def glorot_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
    return variance_scaling(1.0, "fan_avg", "truncated_normal", in_axis, out_axis, batch_axis,
                            dtype)


def lecun_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
    return variance_scaling(1.0, "fan_in", "uniform", in_axis, out_axis, batch_axis, dtype)


def lecun_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
    return variance_scaling(1.0, "fan_in", "truncated_normal", in_axis, out_axis, batch_axis,
                            dtype)


def he_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
    return variance_scaling(2.0, "fan_in", "uniform", in_axis, out_axis, batch_axis, dtype)


def he_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
    return variance_scaling(2.0, "fan_in", "truncated_normal", in_axis, out_axis, batch_axis,
                            dtype)


xavier_uniform, xavier_normal = glorot_uniform, glorot_normal
kaiming_uniform, kaiming_normal = he_uniform, he_normal


def orthogonal(scale=1.0, column_axis=-1, dtype=None):
    """A matrix (or a stack of them, along ``column_axis``) with orthonormal rows or columns,
    times ``scale``: ``random.orthogonal``'s draw (unitary for a complex dtype). A shape with
    a zero dimension gives zeros."""
    def init(key, shape, dtype=dtype, out_sharding=None):
        if out_sharding is not None:
            raise NotImplementedError("nn.initializers.orthogonal: out_sharding is not "
                                      "supported (as in JAX)")
        shape = sample_shape(shape)
        dtype = _dtype_or_default(dtype)
        if len(shape) < 2:
            raise ValueError("orthogonal initializer requires at least a 2D shape")
        if 0 in shape:
            return jnp.zeros(shape, dtype)
        n_rows, n_cols = math.prod(shape) // shape[column_axis], shape[column_axis]
        q = random.orthogonal(key, n_rows, (), dtype, n_cols)
        q = jnp.reshape(q, tuple(np.delete(shape, column_axis)) + (n_cols,))
        return jnp.array(scale, dtype) * jnp.moveaxis(q, -1, column_axis)
    return init


def delta_orthogonal(scale=1.0, column_axis=-1, dtype=None):
    """A convolution kernel (of rank 3, 4 or 5: spatial dimensions, then in and out) that is
    zero but at the centre of its window, which holds an ``orthogonal`` matrix: the kernel
    passes its input through an orthogonal map (Xiao et al., 2018)."""
    def init(key, shape, dtype=dtype, out_sharding=None):
        if out_sharding is not None:
            raise NotImplementedError("nn.initializers.delta_orthogonal: out_sharding is not "
                                      "supported (as in JAX)")
        shape = sample_shape(shape)
        dtype = _dtype_or_default(dtype)
        if len(shape) not in (3, 4, 5):
            raise ValueError("Delta orthogonal initializer requires a 3D, 4D or 5D shape.")
        if shape[-1] < shape[-2]:
            raise ValueError("`fan_in` must be less or equal than `fan_out`. ")
        matrix = orthogonal(scale, column_axis, dtype)(key, shape[-2:])
        centre = tuple((k - 1) // 2 for k in shape[:-2])
        return jnp.zeros(shape, dtype).at[centre].set(matrix)
    return init
