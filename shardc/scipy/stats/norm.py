"""``shardc.scipy.stats.norm``: the normal distribution with ``loc`` and ``scale``."""
from __future__ import annotations

import numpy as np

import shardc.numpy as jnp
import shardc.scipy.special as special
from shardc.scipy.stats._util import promote_args_inexact

__all__ = ["logpdf", "pdf", "cdf", "logcdf", "ppf", "logsf", "sf", "isf"]


def logpdf(x, loc=0, scale=1):
    """``log`` of the normal density at ``x``. The scale enters squared, so a negative
    ``scale`` acts as its magnitude (JAX's; scipy gives NaN)."""
    x, loc, scale = promote_args_inexact("norm.logpdf", x, loc, scale)
    variance = scale * scale
    return -0.5 * (jnp.log(variance * (2 * np.pi)) + jnp.square(x - loc) / variance)


def pdf(x, loc=0, scale=1):
    """The normal density at ``x``."""
    return jnp.exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
    """``P(X <= x)``."""
    x, loc, scale = promote_args_inexact("norm.cdf", x, loc, scale)
    return special.ndtr((x - loc) / scale)


def logcdf(x, loc=0, scale=1):
    """``log P(X <= x)`` by ``log_ndtr``: finite far into the lower tail, where
    ``log(cdf)`` underflows to -inf."""
    x, loc, scale = promote_args_inexact("norm.logcdf", x, loc, scale)
    return special.log_ndtr((x - loc) / scale)


def ppf(q, loc=0, scale=1):
    """The quantile function: ``x`` with ``cdf(x) = q``, in the default floating dtype (as
    JAX's)."""
    return jnp.asarray(special.ndtri(q) * scale + loc, float)


def logsf(x, loc=0, scale=1):
    """``log P(X > x)``, accurate in the upper tail (the lower tail of the mirror image)."""
    x, loc, scale = promote_args_inexact("norm.logsf", x, loc, scale)
    return logcdf(-x, -loc, scale)


def sf(x, loc=0, scale=1):
    """``P(X > x)``, accurate in the upper tail."""
    x, loc, scale = promote_args_inexact("norm.sf", x, loc, scale)
    return cdf(-x, -loc, scale)


def isf(q, loc=0, scale=1):
    """The inverse of ``sf``: ``ppf(1 - q)``."""
    return ppf(1 - jnp.asarray(q), loc, scale)
