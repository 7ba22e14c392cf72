"""``shardc.scipy.stats.cauchy``: the Cauchy distribution with ``loc`` and ``scale``."""
from __future__ import annotations

import numpy as np

import shardc.numpy as jnp
from shardc.scipy.stats._util import promote_args_inexact

__all__ = ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf", "isf", "ppf"]


def logpdf(x, loc=0, scale=1):
    """``-log(pi scale (1 + z^2))`` with ``z = (x - loc) / scale``."""
    x, loc, scale = promote_args_inexact("cauchy.logpdf", x, loc, scale)
    z = (x - loc) / scale
    return -(jnp.log(np.pi * scale) + jnp.log1p(z * z))


def pdf(x, loc=0, scale=1):
    """The Cauchy density."""
    return jnp.exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
    """``P(X <= x) = 1/2 + arctan(z) / pi``."""
    x, loc, scale = promote_args_inexact("cauchy.cdf", x, loc, scale)
    return 0.5 + jnp.arctan((x - loc) / scale) / np.pi


def logcdf(x, loc=0, scale=1):
    """``log P(X <= x)``."""
    return jnp.log(cdf(x, loc, scale))


def sf(x, loc=0, scale=1):
    """``P(X > x)``, the mirror image's ``cdf`` (accurate in the upper tail)."""
    x, loc, scale = promote_args_inexact("cauchy.sf", x, loc, scale)
    return cdf(-x, -loc, scale)


def logsf(x, loc=0, scale=1):
    """``log P(X > x)``."""
    x, loc, scale = promote_args_inexact("cauchy.logsf", x, loc, scale)
    return logcdf(-x, -loc, scale)


def isf(q, loc=0, scale=1):
    """The inverse of ``sf``: ``loc + scale tan(pi/2 - pi q)``."""
    q, loc, scale = promote_args_inexact("cauchy.isf", q, loc, scale)
    return jnp.tan(np.pi / 2 - np.pi * q) * scale + loc


def ppf(q, loc=0, scale=1):
    """The quantile function: ``loc + scale tan(pi q - pi/2)``."""
    q, loc, scale = promote_args_inexact("cauchy.ppf", q, loc, scale)
    return jnp.tan(np.pi * q - np.pi / 2) * scale + loc
