"""``shardc.nn.initializers``: functions ``init(key, shape, dtype=float32, out_sharding=None)``
that draw parameter arrays, with JAX's names and defaults. ``out_sharding`` (a NamedSharding,
or a PartitionSpec on the current mesh, of Explicit axes) lays the result out, as the
sampler's ``out_sharding`` does.

>>> w = nn.initializers.glorot_uniform()(random.key(0), (784, 256))
>>> w = nn.initializers.normal()(random.key(0), (8, 4), out_sharding=P("x"))   # rows split
"""
from __future__ import annotations

import numpy as np

from ir import dtypes as _dt
import shardc.numpy as jnp
import shardc.random as random
from shardc.numpy._core import check_out_sharding
from shardc.random._keys import sample_shape

__all__ = [
    "zeros", "ones", "constant", "normal", "uniform", "truncated_normal", "variance_scaling",
    "glorot_normal", "glorot_uniform", "xavier_normal", "xavier_uniform", "lecun_normal",
    "lecun_uniform", "he_normal", "he_uniform", "kaiming_normal", "kaiming_uniform",
    "orthogonal", "delta_orthogonal",
]

# The standard deviation of a standard normal truncated to (-2, 2): variance_scaling divides
# by it so the truncated draws have the variance asked for.
_TRUNCATED_STDDEV = 0.87962566103423978


def zeros(key, shape, dtype=jnp.float32, out_sharding=None):
    """An array of zeros (``key`` is unused)."""
    return jnp.zeros(sample_shape(shape), dtype, out_sharding=out_sharding)


def ones(key, shape, dtype=jnp.float32, out_sharding=None):
    """An array of ones (``key`` is unused)."""
    return jnp.ones(sample_shape(shape), dtype, out_sharding=out_sharding)


def constant(value, dtype=jnp.float32):
    """An initializer filling every entry with ``value``."""
    def init(key, shape, dtype=dtype, out_sharding=None):
        if out_sharding is not None:
            check_out_sharding(out_sharding, "nn.initializers.constant")
        return jnp.full(sample_shape(shape), value, dtype, out_sharding=out_sharding)
    return init


def normal(stddev=1e-2, dtype=jnp.float32):
    """Normal draws with mean 0 and standard deviation ``stddev``."""
    def init(key, shape, dtype=dtype, out_sharding=None):
        draws = random.normal(key, shape, dtype, out_sharding=out_sharding)
        return jnp.astype(draws * stddev, dtype)
    return init


def uniform(scale=1e-2, dtype=jnp.float32):
    """Uniform draws in ``[0, scale)``."""
    def init(key, shape, dtype=dtype, out_sharding=None):
        return random.uniform(key, shape, dtype, minval=0.0, maxval=scale,
                              out_sharding=out_sharding)
    return init


def truncated_normal(stddev=1e-2, dtype=jnp.float32, lower=-2.0, upper=2.0):
    """Normal draws truncated to ``[lower, upper]`` standard deviations, scaled by ``stddev``."""
    def init(key, shape, dtype=dtype, out_sharding=None):
        draws = random.truncated_normal(key, lower, upper, shape, dtype,
                                        out_sharding=out_sharding)
        return jnp.astype(draws * stddev, dtype)
    return init


def _fans(shape, in_axis, out_axis, batch_axis):
    """``(fan_in, fan_out)``: the in and out dimensions times the receptive field (every
    dimension that is none of in, out or batch)."""
    ndim = len(shape)
    if ndim < 2:
        raise ValueError(f"variance_scaling needs a shape of rank 2 or more, got {shape}")
    norm = lambda axes: {a % ndim for a in (axes if isinstance(axes, (tuple, list)) else (axes,))}
    ins, outs, batch = norm(in_axis), norm(out_axis), norm(batch_axis)
    receptive = np.prod([d for i, d in enumerate(shape) if i not in ins | outs | batch])
    fan_in = np.prod([shape[i] for i in ins]) * receptive
    fan_out = np.prod([shape[i] for i in outs]) * receptive
    return float(fan_in), float(fan_out)


def variance_scaling(scale, mode, distribution, in_axis=-2, out_axis=-1, batch_axis=(),
                     dtype=jnp.float32):
    """Draws with variance ``scale / n``, ``n`` the fan in, the fan out, their mean or their
    geometric mean (``mode``: ``"fan_in"``, ``"fan_out"``, ``"fan_avg"``, ``"fan_geo_avg"``),
    from ``distribution`` ``"truncated_normal"``, ``"normal"`` or ``"uniform"``."""
    if mode not in ("fan_in", "fan_out", "fan_avg", "fan_geo_avg"):
        raise ValueError(f"variance_scaling: invalid mode {mode!r}; use 'fan_in', "
                         "'fan_out', 'fan_avg' or 'fan_geo_avg'")
    if distribution not in ("truncated_normal", "normal", "uniform"):
        raise ValueError(f"variance_scaling: invalid distribution {distribution!r}; use "
                         "'truncated_normal', 'normal' or 'uniform'")

    def init(key, shape, dtype=dtype, out_sharding=None):
        shape = sample_shape(shape)
        fan_in, fan_out = _fans(shape, in_axis, out_axis, batch_axis)
        n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2,
             "fan_geo_avg": (fan_in * fan_out) ** 0.5}[mode]
        variance = scale / max(1.0, n)
        if distribution == "truncated_normal":
            stddev = np.sqrt(variance) / _TRUNCATED_STDDEV
            draws = random.truncated_normal(key, -2.0, 2.0, shape, dtype,
                                            out_sharding=out_sharding)
            return jnp.astype(draws * stddev, dtype)
        if distribution == "normal":
            draws = random.normal(key, shape, dtype, out_sharding=out_sharding)
            return jnp.astype(draws * np.sqrt(variance), dtype)
        limit = np.sqrt(3 * variance)
        return random.uniform(key, shape, dtype, minval=-limit, maxval=limit,
                              out_sharding=out_sharding)
    return init


def glorot_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=jnp.float32):
    return variance_scaling(1.0, "fan_avg", "uniform", in_axis, out_axis, batch_axis, dtype)


def glorot_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=jnp.float32):
    return variance_scaling(1.0, "fan_avg", "truncated_normal", in_axis, out_axis, batch_axis,
                            dtype)


def lecun_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=jnp.float32):
    return variance_scaling(1.0, "fan_in", "uniform", in_axis, out_axis, batch_axis, dtype)


def lecun_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=jnp.float32):
    return variance_scaling(1.0, "fan_in", "truncated_normal", in_axis, out_axis, batch_axis,
                            dtype)


def he_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=jnp.float32):
    return variance_scaling(2.0, "fan_in", "uniform", in_axis, out_axis, batch_axis, dtype)


def he_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=jnp.float32):
    return variance_scaling(2.0, "fan_in", "truncated_normal", in_axis, out_axis, batch_axis,
                            dtype)


xavier_uniform, xavier_normal = glorot_uniform, glorot_normal
kaiming_uniform, kaiming_normal = he_uniform, he_normal


def orthogonal(scale=1.0, column_axis=-1, dtype=jnp.float32):
    """A matrix (or a stack of them, along ``column_axis``) with orthonormal rows or columns,
    times ``scale``: the Q of a normal draw's QR decomposition, signs fixed by R's diagonal."""
    def init(key, shape, dtype=dtype, out_sharding=None):
        if out_sharding is not None:
            raise NotImplementedError("nn.initializers.orthogonal: out_sharding is not "
                                      "supported (as in JAX)")
        shape = sample_shape(shape)
        if len(shape) < 2:
            raise ValueError(f"orthogonal initializer needs a shape of rank 2 or more, "
                             f"got {shape}")
        n_cols = shape[column_axis]
        n_rows = int(np.prod(shape)) // n_cols
        draws = random.normal(key, (max(n_rows, n_cols), min(n_rows, n_cols)), dtype)
        q, r = jnp.linalg.qr(draws)
        q = q * jnp.sign(jnp.diagonal(r))
        if n_rows < n_cols:
            q = q.T
        q = jnp.reshape(q, (n_rows,) + (n_cols,))
        rest = tuple(d for i, d in enumerate(shape) if i != column_axis % len(shape))
        q = jnp.reshape(q, rest + (n_cols,))
        return jnp.astype(jnp.moveaxis(q, -1, column_axis) * scale, _dt.canonicalize(dtype))
    return init


def delta_orthogonal(scale=1.0, column_axis=-1, dtype=jnp.float32):
    """A convolution kernel (of rank 3, 4 or 5: spatial dimensions, then in and out) that is
    zero but at the centre of its window, which holds an ``orthogonal`` matrix: the kernel
    passes its input through an orthogonal map (Xiao et al., 2018)."""
    def init(key, shape, dtype=dtype, out_sharding=None):
        if out_sharding is not None:
            raise NotImplementedError("nn.initializers.delta_orthogonal: out_sharding is not "
                                      "supported (as in JAX)")
        shape = sample_shape(shape)
        if len(shape) not in (3, 4, 5):
            raise ValueError("Delta orthogonal initializer requires a 3D, 4D or 5D shape.")
        if shape[-1] < shape[-2]:
            raise ValueError("`fan_in` must be less or equal than `fan_out`. ")
        matrix = orthogonal(scale, column_axis, dtype)(key, shape[-2:])
        centre = tuple((k - 1) // 2 for k in shape[:-2])
        return jnp.zeros(shape, dtype).at[centre].set(matrix)
    return init
