"""More of ``jax.random``'s samplers, each a transform of the basic draws (uniform, normal,
exponential, gamma) with JAX's signature and parameter conventions: ``lognormal``, ``cauchy``,
``chisquare``, ``t``, ``f``, ``pareto``, ``weibull_min``, ``rayleigh``, ``maxwell``,
``double_sided_maxwell``, ``geometric``, ``triangular``, ``wald``, ``loggamma``,
``generalized_normal``, ``ball``, ``orthogonal``, ``binomial`` and ``multinomial``. As every
shardc sampler, their bits differ from JAX's (Philox, not threefry); their distributions are
JAX's."""
from __future__ import annotations

import numpy as np

from ir import dtypes as _dt
import shardc.numpy as jnp
from shardc.lax import while_loop
from shardc.numpy._core import takes_out_sharding
from shardc.random._distributions import (exponential, gamma, gamma_draws, normal, rademacher,
                                          uniform)
from shardc.random._keys import fold_in, sample_shape, single_key, split

__all__ = [
    "lognormal", "cauchy", "chisquare", "t", "f", "pareto", "weibull_min", "rayleigh",
    "maxwell", "double_sided_maxwell", "geometric", "triangular", "wald", "loggamma",
    "generalized_normal", "ball", "orthogonal",
]


def _float_dtype(dtype):
    return _dt.canonicalize(float if dtype is None else dtype)


def _shape_of(shape, *params) -> tuple:
    """``shape``, or the broadcast shape of the parameters when it is None."""
    if shape is not None:
        return sample_shape(shape)
    return tuple(jnp.broadcast_shapes(*[jnp.shape(q) for q in params]))


def _open_unit(key, shape, dtype):
    """Uniform floats in (0, 1)."""
    return uniform(key, shape, dtype, minval=_dt.finfo(dtype).tiny, maxval=1.0)


@takes_out_sharding
def lognormal(key, sigma=np.float32(1.0), shape=None, dtype=None):
    """``exp(sigma * N(0, 1))``."""
    single_key("lognormal", key)
    dtype = _float_dtype(dtype)
    shape = _shape_of(shape, sigma)
    return jnp.exp(jnp.asarray(sigma, dtype) * normal(key, shape, dtype)).astype(dtype)


@takes_out_sharding
def cauchy(key, shape=(), dtype=None):
    """Standard Cauchy floats: ``tan(pi (u - 1/2))``."""
    single_key("cauchy", key)
    dtype = _float_dtype(dtype)
    u = _open_unit(key, sample_shape(shape), dtype)
    return jnp.tan(np.pi * (u - 0.5)).astype(dtype)


@takes_out_sharding
def chisquare(key, df, shape=None, dtype=None):
    """Chi-square floats with ``df`` degrees of freedom: ``2 Gamma(df / 2)``."""
    single_key("chisquare", key)
    dtype = _float_dtype(dtype)
    shape = _shape_of(shape, df)
    half = jnp.broadcast_to(jnp.asarray(df, dtype) / 2, shape)
    return (2 * gamma(key, half, dtype=dtype)).astype(dtype)


@takes_out_sharding
def t(key, df, shape=None, dtype=None):
    """Student's t floats: ``N(0, 1) sqrt((df/2) / Gamma(df/2))``."""
    single_key("t", key)
    dtype = _float_dtype(dtype)
    shape = _shape_of(shape, df)
    key_n, key_g = split(key)
    half = jnp.broadcast_to(jnp.asarray(df, dtype) / 2, shape)
    return (normal(key_n, shape, dtype) * jnp.sqrt(half / gamma(key_g, half, dtype=dtype))
            ).astype(dtype)


@takes_out_sharding
def f(key, dfnum, dfden, shape=None, dtype=None):
    """F floats: the ratio of two chi-squares, each over its degrees of freedom."""
    single_key("f", key)
    dtype = _float_dtype(dtype)
    shape = _shape_of(shape, dfnum, dfden)
    key_num, key_den = split(key)
    num = chisquare(key_num, jnp.broadcast_to(jnp.asarray(dfnum, dtype), shape), dtype=dtype)
    den = chisquare(key_den, jnp.broadcast_to(jnp.asarray(dfden, dtype), shape), dtype=dtype)
    return ((num / jnp.asarray(dfnum, dtype)) / (den / jnp.asarray(dfden, dtype))).astype(dtype)


@takes_out_sharding
def pareto(key, b, shape=None, dtype=None):
    """Pareto floats with shape ``b`` (minimum 1): ``exp(E / b)``, E exponential."""
    single_key("pareto", key)
    dtype = _float_dtype(dtype)
    shape = _shape_of(shape, b)
    return jnp.exp(exponential(key, shape, dtype) / jnp.asarray(b, dtype)).astype(dtype)


def weibull_min(key, scale, concentration, shape=(), dtype=None):
    """Weibull floats: ``scale * E ** (1 / concentration)``, E exponential."""
    single_key("weibull_min", key)
    dtype = _float_dtype(dtype)
    e = exponential(key, sample_shape(shape), dtype)
    return (jnp.asarray(scale, dtype) * e ** (1 / jnp.asarray(concentration, dtype))
            ).astype(dtype)


@takes_out_sharding
def rayleigh(key, scale, shape=None, dtype=None):
    """Rayleigh floats: ``scale * sqrt(-2 log u)``."""
    single_key("rayleigh", key)
    dtype = _float_dtype(dtype)
    shape = _shape_of(shape, scale)
    u = _open_unit(key, shape, dtype)
    return (jnp.asarray(scale, dtype) * jnp.sqrt(-2 * jnp.log(u))).astype(dtype)


@takes_out_sharding
def maxwell(key, shape=(), dtype=None):
    """Maxwell floats: the length of a standard normal 3-vector."""
    single_key("maxwell", key)
    dtype = _float_dtype(dtype)
    z = normal(key, sample_shape(shape) + (3,), dtype)
    return jnp.linalg.norm(z, axis=-1).astype(dtype)


def double_sided_maxwell(key, loc, scale, shape=(), dtype=None):
    """``loc + scale * s * M``: M Maxwell, s a random sign."""
    single_key("double_sided_maxwell", key)
    dtype = _float_dtype(dtype)
    shape = sample_shape(shape)
    key_m, key_s = split(key)
    sign = rademacher(key_s, shape, dtype=dtype)
    return (jnp.asarray(loc, dtype) + jnp.asarray(scale, dtype) * sign * maxwell(key_m, shape,
                                                                                 dtype)
            ).astype(dtype)


@takes_out_sharding
def geometric(key, p, shape=None, dtype=None):
    """The number of Bernoulli(``p``) trials up to the first success (1, 2, ...)."""
    single_key("geometric", key)
    dtype = _dt.canonicalize(int if dtype is None else dtype)
    shape = _shape_of(shape, p)
    u = _open_unit(key, shape, np.float32)
    p = jnp.asarray(p, np.float32)
    return (jnp.floor(jnp.log1p(-u) / jnp.log1p(-p)) + 1).astype(dtype)


@takes_out_sharding
def triangular(key, left, mode, right, shape=None, dtype=None):
    """Triangular floats on ``[left, right]`` peaking at ``mode`` (by the inverse CDF)."""
    single_key("triangular", key)
    dtype = _float_dtype(dtype)
    shape = _shape_of(shape, left, mode, right)
    left, mode, right = (jnp.asarray(v, dtype) for v in (left, mode, right))
    u = uniform(key, shape, dtype)
    cut = (mode - left) / (right - left)
    low = left + jnp.sqrt(u * (right - left) * (mode - left))
    high = right - jnp.sqrt((1 - u) * (right - left) * (right - mode))
    return jnp.where(u < cut, low, high).astype(dtype)


@takes_out_sharding
def wald(key, mean, shape=None, dtype=None):
    """Wald (inverse Gaussian) floats with ``mean`` and scale 1 (Michael, Schucany and Haas)."""
    single_key("wald", key)
    dtype = _float_dtype(dtype)
    shape = _shape_of(shape, mean)
    key_n, key_u = split(key)
    mean = jnp.asarray(mean, dtype)
    y = normal(key_n, shape, dtype) ** 2
    x = mean + mean ** 2 * y / 2 - mean / 2 * jnp.sqrt(4 * mean * y + (mean * y) ** 2)
    u = uniform(key_u, shape, dtype)
    return jnp.where(u <= mean / (mean + x), x, mean ** 2 / x).astype(dtype)


@takes_out_sharding
def loggamma(key, a, shape=None, dtype=None):
    """``log`` of Gamma(``a``) floats, accurate for small ``a`` (where the draws themselves
    underflow): ``log Gamma(a + 1) + log(u) / a``."""
    single_key("loggamma", key)
    dtype = _float_dtype(dtype)
    shape = _shape_of(shape, a)
    return gamma_draws(key, jnp.broadcast_to(jnp.asarray(a, dtype), shape), None, dtype,
                       log_space=True)


@takes_out_sharding
def generalized_normal(key, p, shape=(), dtype=None):
    """Generalised normal floats with density proportional to ``exp(-|x| ** p)``."""
    single_key("generalized_normal", key)
    dtype = _float_dtype(dtype)
    shape = sample_shape(shape)
    key_g, key_s = split(key)
    g = gamma(key_g, jnp.full(shape, 1 / p, dtype), dtype=dtype)
    return (rademacher(key_s, shape, dtype=dtype) * g ** (1 / p)).astype(dtype)


@takes_out_sharding
def ball(key, d, p=2, shape=(), dtype=None):
    """Points uniform in the unit ``p``-norm ball of dimension ``d``."""
    single_key("ball", key)
    dtype = _float_dtype(dtype)
    shape = sample_shape(shape)
    key_g, key_e = split(key)
    g = generalized_normal(key_g, p, shape + (d,), dtype)
    e = exponential(key_e, shape, dtype)
    return (g / (jnp.sum(jnp.abs(g) ** p, axis=-1) + e)[..., None] ** (1 / p)).astype(dtype)


@takes_out_sharding
def orthogonal(key, n, shape=(), dtype=None, m=None):
    """Haar-random ``n x m`` matrices with orthonormal columns (rows, when ``n < m``): the Q
    of a standard normal matrix's QR, its columns' signs fixed by R's diagonal."""
    single_key("orthogonal", key)
    dtype = _float_dtype(dtype)
    m = n if m is None else m
    shape = sample_shape(shape)
    tall = n >= m
    z = normal(key, shape + ((n, m) if tall else (m, n)), dtype)
    q, r = jnp.linalg.qr(z)
    q = q * jnp.expand_dims(jnp.sign(jnp.diagonal(r, 0, -2, -1)), -2)
    return (q if tall else jnp.swapaxes(q, -1, -2)).astype(dtype)


def binomial(key, n, p, shape=None, dtype=None):
    """The number of successes in ``n`` Bernoulli(``p``) trials, as floats (JAX's dtype):
    geometric waiting times summed until they pass ``n`` (a ``while_loop`` of about
    ``n * p`` rounds)."""
    single_key("binomial", key)
    dtype = _float_dtype(dtype)
    shape = _shape_of(shape, n, p)
    n = jnp.broadcast_to(jnp.asarray(n, np.float32), shape)
    p = jnp.broadcast_to(jnp.asarray(p, np.float32), shape)
    log_q = jnp.log1p(-p)

    def round_(state):
        k, count, elapsed = state
        u = _open_unit(fold_in(key, k), shape, np.float32)
        elapsed = elapsed + jnp.floor(jnp.log1p(-u) / log_q) + 1     # the next success's trial
        return k + 1, jnp.where(elapsed <= n, count + 1, count), elapsed

    start = (jnp.asarray(0, np.int32), jnp.zeros(shape, np.float32),
             jnp.zeros(shape, np.float32))
    _, count, _ = while_loop(lambda state: jnp.any(state[2] <= n), round_, start)
    return count.astype(dtype)


def multinomial(key, n, p, *, shape=None, dtype=None, unroll=1):
    """Counts of ``n`` draws over the categories of ``p``'s last dimension: one conditional
    binomial per category. ``shape`` ends with the number of categories."""
    single_key("multinomial", key)
    dtype = _float_dtype(dtype)
    p = jnp.asarray(p, np.float32)
    shape = tuple(p.shape) if shape is None else sample_shape(shape)
    k = p.shape[-1]
    n = jnp.broadcast_to(jnp.asarray(n, np.float32), shape[:-1])
    p = jnp.broadcast_to(p, shape)
    left, rest = n, jnp.ones(shape[:-1], np.float32)
    counts = []
    for i, category in enumerate(split(key, k)):
        if i == k - 1:
            counts.append(left)
            break
        share = jnp.clip(p[..., i] / jnp.maximum(rest, np.finfo(np.float32).tiny), 0.0, 1.0)
        drawn = binomial(category, left, share, shape[:-1])
        counts.append(drawn)
        left, rest = left - drawn, rest - p[..., i]
    return jnp.stack(counts, axis=-1).astype(dtype)


__all__ += ["binomial", "multinomial"]
