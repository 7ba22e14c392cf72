"""``shardc.scipy.stats.logistic``: the logistic distribution, ``cdf = expit(z)`` with
``z = (x - loc) / scale``."""
from __future__ import annotations

import shardc.numpy as jnp
import shardc.scipy.special as special
from shardc.scipy.stats._util import promote_args_inexact

__all__ = ["logpdf", "pdf", "ppf", "sf", "isf", "cdf"]


def logpdf(x, loc=0, scale=1):
    """``-2 logaddexp(z/2, -z/2) - log scale`` (no overflow for large ``|z|``)."""
    x, loc, scale = promote_args_inexact("logistic.logpdf", x, loc, scale)
    half_z = (x - loc) / scale / 2
    return -2 * jnp.logaddexp(half_z, -half_z) - jnp.log(scale)


def pdf(x, loc=0, scale=1):
    """The logistic density."""
    return jnp.exp(logpdf(x, loc, scale))


def ppf(x, loc=0, scale=1):
    """The quantile function ``loc + scale logit(q)`` (``x`` is the probability, JAX's
    name)."""
    x, loc, scale = promote_args_inexact("logistic.ppf", x, loc, scale)
    return special.logit(x) * scale + loc


def sf(x, loc=0, scale=1):
    """``P(X > x) = expit(-z)``."""
    x, loc, scale = promote_args_inexact("logistic.sf", x, loc, scale)
    return special.expit(-((x - loc) / scale))


def isf(x, loc=0, scale=1):
    """The inverse of ``sf``: ``loc - scale logit(q)``."""
    x, loc, scale = promote_args_inexact("logistic.isf", x, loc, scale)
    return -special.logit(x) * scale + loc


def cdf(x, loc=0, scale=1):
    """``P(X <= x) = expit(z)``."""
    x, loc, scale = promote_args_inexact("logistic.cdf", x, loc, scale)
    return special.expit((x - loc) / scale)
