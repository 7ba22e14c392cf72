"""``shardc.scipy.stats.uniform``: the uniform distribution on ``[loc, loc + scale]``."""
from __future__ import annotations

import numpy as np

import shardc.numpy as jnp
from shardc.scipy.stats._util import promote_args_inexact

__all__ = ["logpdf", "pdf", "cdf", "ppf"]


def logpdf(x, loc=0, scale=1):
    """``-log scale`` on ``[loc, loc + scale]``, -inf outside."""
    x, loc, scale = promote_args_inexact("uniform.logpdf", x, loc, scale)
    log_probs = -jnp.log(scale)
    return jnp.where((x > loc + scale) | (x < loc), -np.inf, log_probs)


def pdf(x, loc=0, scale=1):
    """The uniform density."""
    return jnp.exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
    """``P(X <= x)``: 0 below ``loc``, 1 above ``loc + scale``, linear between. As JAX's, a
    NaN ``x`` (in none of the three cases) gives 0."""
    x, loc, scale = promote_args_inexact("uniform.cdf", x, loc, scale)
    zero, one = jnp.zeros((), x.dtype), jnp.ones((), x.dtype)
    upper = loc + scale
    return jnp.select([x < loc, x > upper, (x >= loc) & (x <= upper)],
                      [zero, one, (x - loc) / scale])


def ppf(q, loc=0, scale=1):
    """The quantile function ``loc + scale q``; NaN for ``q`` outside ``[0, 1]``."""
    q, loc, scale = promote_args_inexact("uniform.ppf", q, loc, scale)
    return jnp.where(jnp.isnan(q) | (q < 0) | (q > 1), np.nan, loc + scale * q)
