"""``shardc.scipy.stats.expon``: the exponential distribution from ``loc`` with mean
``scale``."""
from __future__ import annotations

import numpy as np

import shardc.numpy as jnp
from shardc.scipy.stats._util import promote_args_inexact

__all__ = ["logpdf", "pdf", "cdf", "logcdf", "logsf", "sf", "ppf"]


def logpdf(x, loc=0, scale=1):
    """``-(x - loc) / scale - log scale``, -inf below ``loc``."""
    x, loc, scale = promote_args_inexact("expon.logpdf", x, loc, scale)
    log_probs = -((x - loc) / scale + jnp.log(scale))
    return jnp.where(x < loc, -np.inf, log_probs)


def pdf(x, loc=0, scale=1):
    """The exponential density."""
    return jnp.exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
    """``P(X <= x) = -expm1(-(x - loc) / scale)``, 0 below ``loc``."""
    x, loc, scale = promote_args_inexact("expon.cdf", x, loc, scale)
    neg_z = (loc - x) / scale
    return jnp.where(x < loc, jnp.zeros_like(neg_z), -jnp.expm1(neg_z))


def logcdf(x, loc=0, scale=1):
    """``log P(X <= x) = log1p(-sf)``."""
    return jnp.log1p(-sf(x, loc, scale))


def logsf(x, loc=0, scale=1):
    """``log P(X > x) = -(x - loc) / scale``, 0 below ``loc``."""
    x, loc, scale = promote_args_inexact("expon.sf", x, loc, scale)
    neg_z = (loc - x) / scale
    return jnp.where(x < loc, jnp.zeros_like(neg_z), neg_z)


def sf(x, loc=0, scale=1):
    """``P(X > x)``."""
    return jnp.exp(logsf(x, loc, scale))


def ppf(q, loc=0, scale=1):
    """The quantile function ``loc - scale log1p(-q)``; NaN for ``q`` outside ``[0, 1]``."""
    q, loc, scale = promote_args_inexact("expon.ppf", q, loc, scale)
    quantile = loc - scale * jnp.log1p(-q)
    return jnp.where(jnp.isnan(q) | (q < 0) | (q > 1), np.nan, quantile)
