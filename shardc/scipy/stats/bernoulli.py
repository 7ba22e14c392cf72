"""``shardc.scipy.stats.bernoulli``: one trial that succeeds (1) with probability ``p``."""
from __future__ import annotations

import numpy as np

import shardc.numpy as jnp
import shardc.scipy.special as special
from shardc.scipy.stats._util import promote_args_inexact

__all__ = ["logpmf", "pmf", "cdf", "ppf"]


def logpmf(k, p, loc=0):
    """``log P(X = k)``: ``k log p + (1 - k) log(1 - p)`` for ``0 <= k - loc <= 1``, -inf
    outside. As JAX's, ``k`` is not checked to be an integer (scipy gives -inf between)."""
    k, p, loc = promote_args_inexact("bernoulli.logpmf", k, p, loc)
    x = k - loc
    log_probs = special.xlogy(x, p) + special.xlog1py(1 - x, -p)
    return jnp.where((x < 0) | (x > 1), -np.inf, log_probs)


def pmf(k, p, loc=0):
    """``P(X = k)``."""
    return jnp.exp(logpmf(k, p, loc))


def cdf(k, p):
    """``P(X <= k)``: 0 below 0, ``1 - p`` on ``[0, 1)``, 1 from 1; NaN for ``p`` outside
    ``[0, 1]``."""
    k, p = promote_args_inexact("bernoulli.cdf", k, p)
    invalid = jnp.isnan(k) | jnp.isnan(p) | (p < 0) | (p > 1)
    return jnp.select([invalid, k < 0, k < 1], [jnp.nan, 0, 1 - p], 1)


def ppf(q, p):
    """The smallest ``k`` with ``cdf(k) >= q``: 0 for ``q <= 1 - p``, else 1; NaN for ``q``
    or ``p`` outside ``[0, 1]``."""
    q, p = promote_args_inexact("bernoulli.ppf", q, p)
    invalid = jnp.isnan(q) | jnp.isnan(p) | (p < 0) | (p > 1) | (q < 0) | (q > 1)
    quantile = jnp.where(q <= 1 - p, jnp.zeros_like(q), jnp.ones_like(q))
    return jnp.where(invalid, jnp.nan, quantile)
