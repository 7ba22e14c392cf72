"""``shardc.scipy.stats.beta``: the beta distribution on ``[loc, loc + scale]``."""
from __future__ import annotations

import numpy as np

import shardc.numpy as jnp
import shardc.scipy.special as special
from shardc.scipy.stats._util import clamped, promote_args_inexact

__all__ = ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"]


def logpdf(x, a, b, loc=0, scale=1):
    """``log`` of the beta density with shapes ``a``, ``b``: -inf outside
    ``[loc, loc + scale]``, NaN unless ``a``, ``b`` and ``scale`` are positive."""
    x, a, b, loc, scale = promote_args_inexact("beta.logpdf", x, a, b, loc, scale)
    y = (x - loc) / scale
    # xlogy and xlog1py: a = 1 or b = 1 gives a finite density at the ends of the interval
    log_kernel = special.xlogy(a - 1, y) + special.xlog1py(b - 1, -y)
    log_probs = log_kernel - special.betaln(a, b) - jnp.log(scale)
    log_probs = jnp.where((x > loc + scale) | (x < loc), -np.inf, log_probs)
    return jnp.where((a <= 0) | (b <= 0) | (scale <= 0), np.nan, log_probs)


def pdf(x, a, b, loc=0, scale=1):
    """The beta density."""
    return jnp.exp(logpdf(x, a, b, loc, scale))


def _unit(x, loc, scale):
    """``x`` mapped onto the unit interval and clamped to it."""
    return clamped(0, (x - loc) / scale, 1)


def cdf(x, a, b, loc=0, scale=1):
    """``P(X <= x)``, the regularized incomplete beta function."""
    x, a, b, loc, scale = promote_args_inexact("beta.cdf", x, a, b, loc, scale)
    return special.betainc(a, b, _unit(x, loc, scale))


def logcdf(x, a, b, loc=0, scale=1):
    """``log P(X <= x)``."""
    return jnp.log(cdf(x, a, b, loc, scale))


def sf(x, a, b, loc=0, scale=1):
    """``P(X > x)``, as the mirrored distribution's ``cdf`` (accurate in the upper tail)."""
    x, a, b, loc, scale = promote_args_inexact("beta.sf", x, a, b, loc, scale)
    return special.betainc(b, a, 1 - _unit(x, loc, scale))


def logsf(x, a, b, loc=0, scale=1):
    """``log P(X > x)``."""
    return jnp.log(sf(x, a, b, loc, scale))
