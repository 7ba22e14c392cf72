"""``shardc.scipy.stats.poisson``: the Poisson distribution with mean ``mu``."""
from __future__ import annotations

import math

import numpy as np

import shardc.numpy as jnp
import shardc.scipy.special as special
from shardc._transforms import jit
from shardc.numpy._arraylike import check_arraylike
from shardc.scipy.stats._util import promote_args_inexact

__all__ = ["logpmf", "pmf", "cdf", "entropy"]


def logpmf(k, mu, loc=0):
    """``log P(X = k) = y log mu - log y! - mu`` with ``y = k - loc``; -inf for ``y < 0`` and
    for ``k`` not an integer."""
    k, mu, loc = promote_args_inexact("poisson.logpmf", k, mu, loc)
    x = k - loc
    log_probs = special.xlogy(x, mu) - special.gammaln(x + 1) - mu
    return jnp.where((x < 0) | (jnp.round(k) != k), -np.inf, log_probs)


def pmf(k, mu, loc=0):
    """``P(X = k)``."""
    return jnp.exp(logpmf(k, mu, loc))


def cdf(k, mu, loc=0):
    """``P(X <= k)``, the regularized upper incomplete gamma function ``Q(floor(k - loc) + 1,
    mu)``; 0 below ``loc``."""
    k, mu, loc = promote_args_inexact("poisson.logpmf", k, mu, loc)
    x = k - loc
    return jnp.where(x < 0, jnp.zeros_like(x), special.gammaincc(jnp.floor(1 + x), mu))


def _summed_entropy(mu, k_max, upper):
    """``-sum p log p`` over ``k < min(k_max, upper)`` (``upper`` per entry of the flat
    ``mu``): the terms beyond are below the floating precision."""
    k = jnp.arange(k_max, dtype=mu.dtype)[:, None]
    probs = jnp.where(k < jnp.ceil(upper)[None, :], pmf(k, mu, 0), 0.0)
    return jnp.sum(special.entr(probs), axis=0)


@jit
def entropy(mu, loc=0):
    """The entropy of the distribution (``loc`` moves it and changes nothing; the result
    has the broadcast shape of both). Summed over the probabilities below ``mu = 100`` (up to
    ``mu + 20`` below 10, ``mu + 10 sqrt(mu) + 20`` below 100), by Stirling's series
    ``log(2 pi e mu) / 2 - 1 / (12 mu)`` above; 0 at ``mu = 0``."""
    for position, arg in enumerate((mu, loc)):
        check_arraylike("poisson.entropy", arg, position)
    mu, loc = special.inexact_operands(mu, loc)
    shape = jnp.broadcast_shapes(mu.shape, loc.shape)
    flat = jnp.ravel(mu)
    small = _summed_entropy(flat, 35, flat + 20)
    medium = _summed_entropy(flat, 250, flat + 10 * jnp.sqrt(flat) + 20)
    large = 0.5 * jnp.log(2 * math.pi * math.e * flat) - 1.0 / (12 * flat)
    result = jnp.where(flat == 0, jnp.zeros_like(flat),
                       jnp.where(flat < 10, small, jnp.where(flat < 100, medium, large)))
    return jnp.broadcast_to(jnp.reshape(result, mu.shape), shape)
