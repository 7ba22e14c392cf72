"""More of ``jax.random``'s samplers, each a transform of the basic draws (uniform, normal,
exponential, gamma) with JAX's signature and parameter conventions: ``lognormal``, ``cauchy``,
``chisquare``, ``t``, ``f``, ``pareto``, ``weibull_min``, ``rayleigh``, ``maxwell``,
``double_sided_maxwell``, ``geometric``, ``triangular``, ``wald``, ``loggamma``,
``generalized_normal``, ``ball``, ``orthogonal``, ``binomial`` and ``multinomial``. Each
follows JAX's own steps (its key splits in their order, its formulas and loops), so for one
key the draws are JAX's: bit for bit where only exact float operations act on the bits, within
a few ulp where a transcendental function rounds on the way."""
from __future__ import annotations

import numpy as np

from ir import dtypes as _dt
import shardc.numpy as jnp
import shardc.lax as lax
from shardc.lax import while_loop
from shardc.numpy._core import takes_out_sharding
from shardc.random._distributions import (check_safe_to_cast, exponential, fused_multiply_add,
                                          gamma_draws, gamma_dtype, normal, rademacher,
                                          typed_key, uniform, varying_start)
from shardc.random._keys import sample_shape, single_key, split

__all__ = [
    "lognormal", "cauchy", "chisquare", "t", "f", "pareto", "weibull_min", "rayleigh",
    "maxwell", "double_sided_maxwell", "geometric", "triangular", "wald", "loggamma",
    "generalized_normal", "ball", "orthogonal", "binomial", "multinomial",
]


def _float_dtype(name, dtype, kind="a float"):
    """``dtype`` (None: the default float) as a dtype; JAX's ValueError for a dtype not
    of ``kind`` ('a float', 'a float or complex')."""
    dtype = _dt.requested(float if dtype is None else dtype, "")
    ok = _dt.is_inexact(dtype) if "complex" in kind else _dt.is_float(dtype)
    if not ok:
        raise ValueError(f"dtype argument to `{name}` must be {kind} dtype, got {dtype}")
    return dtype


def _shape_of(name, shape, *params) -> tuple:
    """``shape``, or the broadcast shape of the parameters when it is None; a given shape
    must be what it broadcasts to with theirs (JAX's ValueError)."""
    param_shapes = [jnp.shape(q) for q in params]
    if shape is None:
        return tuple(jnp.broadcast_shapes(*param_shapes)) if params else ()
    shape = sample_shape(shape)
    if params:
        try:
            broadcast = tuple(np.broadcast_shapes(shape, *param_shapes))
        except ValueError:
            broadcast = None
        if broadcast != shape:
            raise ValueError(f"{name} parameter shapes must be broadcast-compatible with shape "
                             f"argument, and the result of broadcasting the shapes must equal "
                             f"the shape argument, but got result {broadcast} for shape "
                             f"argument {shape}.")
    return shape


def _as(value, dtype):
    return jnp.astype(jnp.asarray(value), dtype)


@takes_out_sharding
def lognormal(key, sigma=np.float32(1.0), shape=None, dtype=None):
    """``exp(N(0, 1) * sigma)`` (JAX's; a complex ``dtype`` takes complex normals)."""
    single_key("lognormal", key)
    dtype = _float_dtype("lognormal", dtype, "a float or complex")
    shape = _shape_of("lognormal", shape, sigma)
    check_safe_to_cast("lognormal", dtype, sigma)
    return jnp.exp(normal(key, shape, dtype) * _as(sigma, dtype))


@takes_out_sharding
def cauchy(key, shape=(), dtype=None):
    """Standard Cauchy floats: ``tan(pi (u - 1/2))``, ``u`` uniform in ``[eps, 1)`` (JAX's)."""
    single_key("cauchy", key)
    dtype = _float_dtype("cauchy", dtype)
    u = uniform(key, sample_shape(shape), dtype, minval=_dt.finfo(dtype).eps, maxval=1.0)
    return jnp.tan(dtype.type(np.pi) * (u - dtype.type(0.5)))


@takes_out_sharding
def chisquare(key, df, shape=None, dtype=None):
    """Chi-square floats with ``df`` degrees of freedom: ``2 exp(loggamma(df / 2))`` (JAX's)."""
    single_key("chisquare", key)
    dtype = _float_dtype("chisquare", dtype)
    shape = _shape_of("chisquare", shape, df)
    check_safe_to_cast("chisquare", dtype, df)
    half_df = _as(df, dtype) / dtype.type(2)
    return jnp.exp(gamma_draws(key, half_df, shape, dtype, log_space=True)) * dtype.type(2)


@takes_out_sharding
def t(key, df, shape=None, dtype=None):
    """Student's t floats: ``N(0, 1) sqrt((df/2) / Gamma(df/2))``, the normal from the first
    key of a split, the gamma from the second (JAX's)."""
    single_key("t", key)
    dtype = _float_dtype("t", dtype)
    shape = _shape_of("t", shape, df)
    check_safe_to_cast("t", dtype, df)
    key_n, key_g = split(key)
    n = normal(key_n, shape, dtype)
    half_df = _as(df, dtype) / dtype.type(2)
    return n * jnp.sqrt(half_df / gamma_draws(key_g, half_df, shape, dtype, log_space=False))


@takes_out_sharding
def f(key, dfnum, dfden, shape=None, dtype=None):
    """F floats: the ratio of two chi-squares, each over its degrees of freedom; the
    denominator's from the first key of a split (JAX's)."""
    single_key("f", key)
    dtype = _float_dtype("f", dtype)
    shape = _shape_of("f", shape, dfnum, dfden)
    check_safe_to_cast("f", dtype, dfnum, dfden)
    dfnum, dfden = _as(dfnum, dtype), _as(dfden, dtype)
    key_dfd, key_dfn = split(key)
    num = chisquare(key_dfn, dfnum, shape, dtype) / dfnum
    den = chisquare(key_dfd, dfden, shape, dtype) / dfden
    return num / den


@takes_out_sharding
def pareto(key, b, shape=None, dtype=None):
    """Pareto floats with shape ``b`` (minimum 1): ``exp(E / b)``, E exponential."""
    single_key("pareto", key)
    dtype = _float_dtype("pareto", dtype)
    shape = _shape_of("pareto", shape, b)
    check_safe_to_cast("pareto", dtype, b)
    return jnp.exp(exponential(key, shape, dtype) / _as(b, dtype))


def weibull_min(key, scale, concentration, shape=(), dtype=None):
    """Weibull floats by the inverse CDF: ``(-log(1 - u)) ** (1 / concentration) * scale``."""
    single_key("weibull_min", key)
    dtype = _float_dtype("weibull_min", dtype)
    u = uniform(key, sample_shape(shape), dtype, minval=0, maxval=1)
    return jnp.power(-jnp.log1p(-u), 1.0 / concentration) * scale


@takes_out_sharding
def rayleigh(key, scale, shape=None, dtype=None):
    """Rayleigh floats: ``scale * sqrt(log(u) * -2)``."""
    single_key("rayleigh", key)
    dtype = _float_dtype("rayleigh", dtype)
    shape = _shape_of("rayleigh", shape, scale)
    check_safe_to_cast("rayleigh", dtype, scale)
    u = uniform(key, shape, dtype)
    scale = jnp.broadcast_to(_as(scale, dtype), shape)
    return scale * jnp.sqrt(jnp.log(u) * dtype.type(-2))


@takes_out_sharding
def maxwell(key, shape=(), dtype=None):
    """Maxwell floats: the length of a standard normal 3-vector."""
    single_key("maxwell", key)
    dtype = _float_dtype("maxwell", dtype)
    return jnp.linalg.norm(normal(key, sample_shape(shape) + (3,), dtype), axis=-1)


def double_sided_maxwell(key, loc, scale, shape=(), dtype=None):
    """``sign * M * scale + loc``: M Maxwell (the first key of a split), the sign Rademacher
    (the second). As JAX's, the result's shape is ``shape`` followed by the parameters'
    broadcast shape (that shape alone, twice, when ``shape`` is empty)."""
    single_key("double_sided_maxwell", key)
    dtype = _float_dtype("double_sided_maxwell", dtype)
    params_shape = tuple(jnp.broadcast_shapes(jnp.shape(loc), jnp.shape(scale)))
    shape = sample_shape(shape) or params_shape
    shape = shape + params_shape
    maxwell_key, rademacher_key = split(key)
    magnitude = maxwell(maxwell_key, shape, dtype)
    sign = rademacher(rademacher_key, shape, dtype)
    return sign * magnitude * scale + loc


@takes_out_sharding
def geometric(key, p, shape=None, dtype=None):
    """The number of Bernoulli(``p``) trials up to the first success (1, 2, ...), JAX's:
    ``floor(log(u) / log1p(-p)) + 1`` with ``u`` uniform in ``p``'s float dtype (``u == 0``
    taken as 1)."""
    single_key("geometric", key)
    dtype = _dt.requested(int if dtype is None else dtype, "")
    if not _dt.is_int(dtype) or dtype == np.bool_:
        raise ValueError(f"dtype argument to `geometric` must be an int dtype, got {dtype}")
    shape = _shape_of("geometric", shape, p)
    p = jnp.asarray(p)
    if not _dt.is_inexact(p.dtype):
        p = jnp.astype(p, _dt.canonicalize(float))
    u = uniform(key, shape, p.dtype)
    u = jnp.where(u == 0, jnp.ones_like(u), u)
    log_one_minus_p = jnp.broadcast_to(jnp.log1p(-p), shape)
    return jnp.astype(jnp.floor(jnp.log(u) / log_one_minus_p) + 1, dtype)


@takes_out_sharding
def triangular(key, left, mode, right, shape=None, dtype=None):
    """Triangular floats on ``[left, right]`` peaking at ``mode`` (by the inverse CDF)."""
    single_key("triangular", key)
    dtype = _float_dtype("triangular", dtype)
    shape = _shape_of("triangular", shape, left, mode, right)
    check_safe_to_cast("triangular", dtype, left, mode, right)
    left, mode, right = (jnp.broadcast_to(_as(v, dtype), shape) for v in (left, mode, right))
    cut = (mode - left) / (right - left)
    u = uniform(key, shape, dtype)
    low = left + jnp.sqrt(u * (right - left) * (mode - left))
    high = right - jnp.sqrt((1 - u) * (right - left) * (right - mode))
    return jnp.where(u < cut, low, high)


@takes_out_sharding
def wald(key, mean, shape=None, dtype=None):
    """Wald (inverse Gaussian) floats with ``mean`` and scale 1 (Michael, Schucany and Haas):
    the normal from the first key of a split, the uniform choosing a root from the second."""
    single_key("wald", key)
    dtype = _float_dtype("wald", dtype)
    shape = _shape_of("wald", shape, mean)
    check_safe_to_cast("wald", dtype, mean)
    k1, k2 = split(key)
    mean = jnp.broadcast_to(_as(mean, dtype), shape)
    v = normal(k1, shape, dtype)
    z = uniform(k2, shape, dtype)
    y = lax.integer_pow(v, 2)
    y_sq = lax.integer_pow(y, 2)
    mean_sq = lax.integer_pow(mean, 2)
    # XLA fuses each product into the sum it feeds (one rounding): as it does
    sqrt_term = jnp.sqrt(fused_multiply_add(4 * mean, y, mean_sq * y_sq))
    x = fused_multiply_add(-(mean / 2), sqrt_term, mean + mean_sq * y / 2)
    return jnp.where(z <= mean / (mean + x), x, mean_sq / x)


@takes_out_sharding
def loggamma(key, a, shape=None, dtype=None):
    """``log`` of Gamma(``a``) floats, accurate for small ``a`` (where the draws themselves
    underflow): ``log Gamma(a + 1) + log(u) / a``, the same draw as ``gamma``'s."""
    single_key("loggamma", key)
    return gamma_draws(key, a, shape, gamma_dtype(dtype), log_space=True)


@takes_out_sharding
def generalized_normal(key, p, shape=(), dtype=None):
    """Generalised normal floats with density proportional to ``exp(-|x| ** p)``: a random
    sign (the second key of a split) times ``Gamma(1/p) ** (1/p)`` (the first)."""
    single_key("generalized_normal", key)
    dtype = _dt.requested(float if dtype is None else dtype, "")
    shape = sample_shape(shape)
    key_g, key_s = split(key)
    g = gamma_draws(key_g, 1 / p, shape, gamma_dtype(dtype), log_space=False)
    r = rademacher(key_s, shape, dtype)
    return r * g ** (1 / p)


@takes_out_sharding
def ball(key, d, p=2, shape=(), dtype=None):
    """Points uniform in the unit ``p``-norm ball of dimension ``d``: generalised normals
    (the first key of a split) over the ``p``-th root of their ``p``-norm plus an exponential
    (the second)."""
    single_key("ball", key)
    dtype = _dt.requested(float if dtype is None else dtype, "")
    shape = sample_shape(shape)
    d = int(d)
    k1, k2 = split(key)
    g = generalized_normal(k1, p, shape + (d,), dtype)
    e = exponential(k2, shape, dtype)
    return g / ((jnp.sum(jnp.abs(g) ** p, axis=-1) + e) ** (1 / p))[..., None]


@takes_out_sharding
def orthogonal(key, n, shape=(), dtype=None, m=None):
    """Haar-random ``n x m`` matrices with orthonormal columns (rows, when ``n < m``): the Q
    of a standard normal ``max(n, m) x min(n, m)`` matrix's QR, its columns' signs fixed by
    R's diagonal (transposed when ``n < m``)."""
    single_key("orthogonal", key)
    dtype = _dt.requested(float if dtype is None else dtype, "")
    n = int(n)
    m = n if m is None else int(m)
    shape = sample_shape(shape)
    z = normal(key, shape + (max(n, m), min(n, m)), dtype)
    q, r = jnp.linalg.qr(z)
    x = q * jnp.expand_dims(jnp.sign(jnp.diagonal(r, 0, -2, -1)), -2)
    return jnp.swapaxes(x, -1, -2) if n < m else x


_STIRLING_TAIL = [0.0810614667953272, 0.0413406959554092, 0.0276779256849983,
                  0.02079067210376509, 0.0166446911898211, 0.0138761288230707,
                  0.0118967099458917, 0.0104112652619720, 0.00925546218271273,
                  0.00833056343336287]


def _stirling_approx_tail(k):
    """``log k! - (k + 1/2) log(k + 1) + (k + 1) - log(2 pi) / 2``, tabulated up to 9 and
    by its series above (JAX's, for BTRS)."""
    table = jnp.asarray(np.array(_STIRLING_TAIL, k.dtype))
    use_table = k <= 9
    k = jnp.clip(k, k.dtype.type(0.0), k.dtype.type(9.0))
    kp1sq = (k + 1) * (k + 1)
    approx = (1.0 / 12 - (1.0 / 360 - 1.0 / 1260 / kp1sq) / kp1sq) / (k + 1)
    index = jnp.astype(jnp.floor(k), np.int32)
    return jnp.where(use_table, table[index], approx)


def _binomial_inversion(key, count, prob, dtype, max_iters):
    """Counts of geometric waiting times (each from the key split off the last round's) up
    to ``count`` trials, JAX's inversion for ``count * prob <= 10``."""
    log1minusprob = jnp.log1p(-prob)

    def body(state):
        rounds, num_geom, geom_sum, round_key = state
        subkey, round_key = split(round_key)
        num_geom_out = jnp.where(geom_sum <= count, num_geom + 1, num_geom)
        u = uniform(subkey, prob.shape, prob.dtype)
        geom = jnp.ceil(jnp.log(u) / log1minusprob)
        return rounds + 1, num_geom_out, geom_sum + geom, round_key

    def cond(state):
        rounds, _, geom_sum, _ = state
        return jnp.any(geom_sum <= count) & (rounds < max_iters)

    zeros = jnp.zeros(prob.shape, prob.dtype)
    start = varying_start((jnp.asarray(0, np.int32), zeros, zeros), key, count, prob) + (key,)
    k = while_loop(cond, body, start)[1]
    return jnp.astype(k - 1, dtype)


def _btrs(key, count, prob, dtype, max_iters):
    """Hormann's transformed rejection with squeeze (BTRS), JAX's for ``count * prob > 10``:
    each round splits its key in three (the next round's and two uniforms')."""
    stddev = jnp.sqrt(count * prob * (1 - prob))
    b = 1.15 + 2.53 * stddev
    a = -0.0873 + 0.0248 * b + 0.01 * prob
    c = count * prob + 0.5
    v_r = 0.92 - 4.2 / b
    r = prob / (1 - prob)
    alpha = (2.83 + 5.1 / b) * stddev
    m = jnp.floor((count + 1) * prob)

    def body(state):
        rounds, k_out, accepted, round_key = state
        round_key, subkey_0, subkey_1 = split(round_key, 3)
        u = uniform(subkey_0, prob.shape, prob.dtype)
        v = uniform(subkey_1, prob.shape, prob.dtype)
        u = u - 0.5
        us = 0.5 - jnp.abs(u)
        accept1 = (us >= 0.07) & (v <= v_r)
        k = jnp.floor((2 * a / us + b) * u + c)
        reject = (k < 0) | (k > count)
        v = jnp.log(v * alpha / (a / (us * us) + b))
        ub = ((m + 0.5) * jnp.log((m + 1) / (r * (count - m + 1)))
              + (count + 1) * jnp.log((count - m + 1) / (count - k + 1))
              + (k + 0.5) * jnp.log(r * (count - k + 1) / (k + 1))
              + _stirling_approx_tail(m)
              + _stirling_approx_tail(count - m)
              - _stirling_approx_tail(k)
              - _stirling_approx_tail(count - k))
        accept = accept1 | (~reject & (v <= ub))
        return rounds + 1, jnp.where(accept, k, k_out), accepted | accept, round_key

    def cond(state):
        rounds, _, accepted, _ = state
        return jnp.any(~accepted) & (rounds < max_iters)

    start = varying_start((jnp.asarray(0, np.int32), jnp.full(prob.shape, -1, prob.dtype),
                      jnp.zeros(prob.shape, jnp.bool_)), key, count, prob) + (key,)
    return jnp.astype(while_loop(cond, body, start)[1], dtype)


def binomial(key, n, p, shape=None, dtype=None):
    """The number of successes in ``n`` Bernoulli(``p``) trials, as floats (JAX's dtype),
    JAX's: with ``q = min(p, 1 - p)``, counting geometric waiting times while ``n q <= 10``
    and Hormann's BTRS rejection above, both from the same key (``n - draw`` for
    ``p >= 1/2``). NaN for a NaN or negative ``p`` or ``n``, inf for an infinite ``n``."""
    single_key("binomial", key)
    dtype = _float_dtype("binomial", dtype)
    shape = _shape_of("binomial", shape, n, p)
    prob = jnp.asarray(p)
    if not _dt.is_inexact(prob.dtype):
        prob = jnp.astype(prob, _dt.canonicalize(float))
    count = jnp.broadcast_to(jnp.astype(jnp.asarray(n), prob.dtype), shape)
    prob = jnp.broadcast_to(prob, shape)
    key = typed_key(key)
    p_lt_half = prob < 0.5
    q = jnp.where(p_lt_half, prob, 1.0 - prob)
    count_nan_or_neg = jnp.isnan(count) | (count < 0.0)
    count_inf = jnp.isinf(count)
    q_is_nan = jnp.isnan(q)
    q_l_0 = q < 0.0
    q = jnp.where(q_is_nan | q_l_0, jnp.full_like(q, 0.01), q)
    use_inversion = count_nan_or_neg | (count * q <= 10.0)
    count = jnp.floor(count)         # numpy's, for a float count
    count_inv = jnp.where(use_inversion, count, jnp.zeros_like(count))
    count_btrs = jnp.where(use_inversion, jnp.full_like(count, 1e4), count)
    q_btrs = jnp.where(use_inversion, jnp.full_like(q, 0.5), q)
    max_iters = dtype.type(_dt.finfo(dtype).max)
    samples = jnp.where(use_inversion,
                        _binomial_inversion(key, count_inv, q, dtype, max_iters),
                        _btrs(key, count_btrs, q_btrs, dtype, max_iters))
    invalid = q_l_0 | q_is_nan | count_nan_or_neg
    samples = jnp.where(invalid, jnp.full_like(samples, np.nan), samples)
    samples = jnp.where(count_inf & ~invalid, jnp.full_like(samples, np.inf), samples)
    return jnp.where(p_lt_half | count_nan_or_neg | q_is_nan | count_inf, samples,
                     jnp.astype(count, dtype) - samples)


def multinomial(key, n, p, *, shape=None, dtype=None, unroll=1):
    """Counts of ``n`` draws over the categories of ``p``'s last dimension, JAX's: a scan
    over the categories, each drawing a binomial of what is left with its share of the
    probability left (one key of a split per category). ``shape`` ends with the number of
    categories."""
    single_key("multinomial", key)
    n, p = jnp.asarray(n), jnp.asarray(p)
    common = jnp.result_type(n, p)
    if not _dt.is_inexact(common):
        common = _dt.canonicalize(float)
    n, p = jnp.astype(n, common), jnp.astype(p, common)
    shape = tuple(p.shape) if shape is None else sample_shape(shape)
    n = jnp.broadcast_to(n, shape[:-1])
    p = jnp.moveaxis(jnp.broadcast_to(p, shape), -1, 0)
    remaining = lax.cumsum(p, 0, reverse=True)
    ratios = p / jnp.where(remaining == 0, jnp.ones_like(remaining), remaining)
    keys = split(key, ratios.shape[0])

    def step(remainder, ratio_key):
        ratio, category_key = ratio_key
        count = binomial(category_key, remainder, jnp.clip(ratio, 0, 1),
                         dtype=remainder.dtype)
        return remainder - count, count

    _, counts = lax.scan(step, n, (ratios, keys), unroll=unroll)
    counts = jnp.moveaxis(counts, 0, -1)
    return counts if dtype is None else jnp.astype(counts, dtype)
