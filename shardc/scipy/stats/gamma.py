"""``shardc.scipy.stats.gamma``: the gamma distribution with shape ``a``."""
from __future__ import annotations

import numpy as np

import shardc.numpy as jnp
import shardc.scipy.special as special
from shardc.scipy.stats._util import clamped, promote_args_inexact

__all__ = ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"]


def logpdf(x, a, loc=0, scale=1):
    """``(a - 1) log y - y - log Gamma(a) - log scale`` with ``y = (x - loc) / scale``, -inf
    below ``loc``."""
    x, a, loc, scale = promote_args_inexact("gamma.logpdf", x, a, loc, scale)
    inside = x >= loc
    # below loc y is replaced, so no NaN is computed there (even in the branch not taken)
    y = jnp.where(inside, (x - loc) / scale, jnp.ones_like(x))
    log_probs = special.xlogy(a - 1, y) - y - (special.gammaln(a) + jnp.log(scale))
    return jnp.where(inside, log_probs, -np.inf)


def pdf(x, a, loc=0, scale=1):
    """The gamma density."""
    return jnp.exp(logpdf(x, a, loc, scale))


def cdf(x, a, loc=0, scale=1):
    """``P(X <= x)``, the regularized lower incomplete gamma function."""
    x, a, loc, scale = promote_args_inexact("gamma.cdf", x, a, loc, scale)
    y = clamped(0, (x - loc) / scale, np.inf)
    return special.gammainc(a, y)


def logcdf(x, a, loc=0, scale=1):
    """``log P(X <= x)``."""
    return jnp.log(cdf(x, a, loc, scale))


def sf(x, a, loc=0, scale=1):
    """``P(X > x)``, the regularized upper incomplete gamma function; 1 below ``loc``."""
    x, a, loc, scale = promote_args_inexact("gamma.sf", x, a, loc, scale)
    y = (x - loc) / scale
    return jnp.where(y < 0, 1, special.gammaincc(a, y))


def logsf(x, a, loc=0, scale=1):
    """``log P(X > x)``."""
    return jnp.log(sf(x, a, loc, scale))
