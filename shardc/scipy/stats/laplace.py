"""``shardc.scipy.stats.laplace``: the Laplace (double exponential) distribution."""
from __future__ import annotations

import shardc.lax as lax
import shardc.numpy as jnp
from shardc.scipy.stats._util import promote_args_inexact

__all__ = ["logpdf", "pdf", "cdf"]


def logpdf(x, loc=0, scale=1):
    """``-|x - loc| / scale - log(2 scale)``."""
    x, loc, scale = promote_args_inexact("laplace.logpdf", x, loc, scale)
    return -(jnp.abs(x - loc) / scale + jnp.log(2 * scale))


def pdf(x, loc=0, scale=1):
    """The Laplace density."""
    return jnp.exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
    """``P(X <= x)``: ``exp(z) / 2`` for ``z = (x - loc) / scale <= 0``, else
    ``1 - exp(-z) / 2``."""
    x, loc, scale = promote_args_inexact("laplace.cdf", x, loc, scale)
    z = (x - loc) / scale
    return lax.select(z <= 0, 0.5 * jnp.exp(z), 1 - 0.5 * jnp.exp(-z))
