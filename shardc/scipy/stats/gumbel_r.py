"""``shardc.scipy.stats.gumbel_r``: the right-skewed Gumbel distribution (of the maximum),
``cdf = exp(-exp(-z))`` with ``z = (x - loc) / scale``. Every function but ``ppf`` is NaN
unless ``scale > 0``."""
from __future__ import annotations

import numpy as np

import shardc.nn as nn
import shardc.numpy as jnp
import shardc.scipy.special as special
from shardc.scipy.stats._util import promote_args_inexact

__all__ = ["logpdf", "pdf", "logcdf", "cdf", "ppf", "sf", "logsf"]


def _valid(value, scale):
    return jnp.where(scale > 0, value, np.nan)


def logpdf(x, loc=0, scale=1):
    """``-(z + exp(-z)) - log scale``."""
    x, loc, scale = promote_args_inexact("gumbel_r.logpdf", x, loc, scale)
    z = (x - loc) / scale
    return _valid(special.xlogy(-1, scale) - (z + jnp.exp(-z)), scale)


def pdf(x, loc=0, scale=1):
    """The density."""
    return jnp.exp(logpdf(x, loc, scale))


def logcdf(x, loc=0, scale=1):
    """``log P(X <= x) = -exp(-z)``."""
    x, loc, scale = promote_args_inexact("gumbel_r.logcdf", x, loc, scale)
    z = (x - loc) / scale
    return _valid(-jnp.exp(-z), scale)


def cdf(x, loc=0, scale=1):
    """``P(X <= x)``."""
    return jnp.exp(logcdf(x, loc, scale))


def ppf(p, loc=0, scale=1):
    """The quantile function ``loc - scale log(-log p)``; NaN outside ``0 < p < 1``."""
    p, loc, scale = promote_args_inexact("gumbel_r.ppf", p, loc, scale)
    quantile = loc - scale * jnp.log(special.xlogy(-1, p))
    return jnp.where((p > 0) & (p < 1), quantile, np.nan)


def sf(x, loc=0, scale=1):
    """``P(X > x) = 1 - exp(-exp(-z))``."""
    x, loc, scale = promote_args_inexact("gumbel_r.sf", x, loc, scale)
    neg_z = (loc - x) / scale
    return _valid(1 - jnp.exp(-jnp.exp(neg_z)), scale)


def logsf(x, loc=0, scale=1):
    """``log(1 - exp(-exp(-z)))``, by ``log1mexp`` (accurate in both tails)."""
    x, loc, scale = promote_args_inexact("gumbel_r.logsf", x, loc, scale)
    neg_z = (loc - x) / scale
    return _valid(nn.log1mexp(jnp.exp(neg_z)), scale)
