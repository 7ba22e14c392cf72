"""``shardc.scipy.stats.pareto``: the Pareto distribution with shape ``b``, from
``loc + scale`` on."""
from __future__ import annotations

import numpy as np

import shardc.numpy as jnp
from shardc.scipy.stats._util import promote_args_inexact

__all__ = ["logpdf", "pdf", "cdf", "logcdf", "logsf", "sf", "ppf"]


def logpdf(x, b, loc=0, scale=1):
    """``log(b / scale) - (b + 1) log z`` with ``z = (x - loc) / scale``, -inf below
    ``loc + scale``."""
    x, b, loc, scale = promote_args_inexact("pareto.logpdf", x, b, loc, scale)
    z = (x - loc) / scale
    log_probs = -(jnp.log(scale / b) + (b + 1) * jnp.log(z))
    return jnp.where(x < loc + scale, -np.inf, log_probs)


def pdf(x, b, loc=0, scale=1):
    """The Pareto density."""
    return jnp.exp(logpdf(x, b, loc, scale))


def cdf(x, b, loc=0, scale=1):
    """``P(X <= x) = 1 - z^-b``, 0 below ``loc + scale``."""
    x, b, loc, scale = promote_args_inexact("pareto.cdf", x, b, loc, scale)
    z = (x - loc) / scale
    return jnp.where(x < loc + scale, jnp.zeros_like(z), 1 - z ** -b)


def logcdf(x, b, loc=0, scale=1):
    """``log P(X <= x) = log1p(-z^-b)``, -inf below ``loc + scale``."""
    x, b, loc, scale = promote_args_inexact("pareto.logcdf", x, b, loc, scale)
    z = (x - loc) / scale
    return jnp.where(x < loc + scale, -np.inf, jnp.log1p(-(z ** -b)))


def logsf(x, b, loc=0, scale=1):
    """``log P(X > x) = -b log z``, 0 below ``loc + scale``."""
    x, b, loc, scale = promote_args_inexact("pareto.logsf", x, b, loc, scale)
    z = (x - loc) / scale
    return jnp.where(x < loc + scale, jnp.zeros_like(z), -(b * jnp.log(z)))


def sf(x, b, loc=0, scale=1):
    """``P(X > x)``."""
    return jnp.exp(logsf(x, b, loc, scale))


def ppf(q, b, loc=0, scale=1):
    """The quantile function ``loc + scale (1 - q)^(-1/b)``; NaN for ``q`` outside
    ``[0, 1]``."""
    q, b, loc, scale = promote_args_inexact("pareto.ppf", q, b, loc, scale)
    quantile = loc + scale * (1 - q) ** -(1 / b)
    return jnp.where(jnp.isnan(q) | (q < 0) | (q > 1), np.nan, quantile)
