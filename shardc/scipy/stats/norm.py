"""``shardc.scipy.stats.norm``: the normal distribution with ``loc`` and ``scale``."""
from __future__ import annotations

import numpy as np

import shardc.numpy as jnp
import shardc.scipy.special as special

__all__ = ["pdf", "logpdf", "cdf", "logcdf", "sf", "ppf"]

_LOG_SQRT_2PI = 0.5 * np.log(2 * np.pi)


def _standardized(x, loc, scale):
    x, loc, scale = special.inexact_operands(x, loc, scale)
    return (x - loc) / scale, scale


def logpdf(x, loc=0, scale=1):
    """``log`` of the normal density at ``x``."""
    z, scale = _standardized(x, loc, scale)
    return -0.5 * z * z - _LOG_SQRT_2PI - jnp.log(scale)


def pdf(x, loc=0, scale=1):
    return jnp.exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
    """``P(X <= x)``."""
    z, _ = _standardized(x, loc, scale)
    return special.ndtr(z)


def logcdf(x, loc=0, scale=1):
    return jnp.log(cdf(x, loc, scale))


def sf(x, loc=0, scale=1):
    """``P(X > x) = cdf(-x)``, accurate in the upper tail."""
    z, _ = _standardized(x, loc, scale)
    return special.ndtr(-z)


def ppf(q, loc=0, scale=1):
    """The quantile function: ``x`` with ``cdf(x) = q``."""
    q, loc, scale = special.inexact_operands(q, loc, scale)
    return loc + scale * special.ndtri(q)
