"""``shardc.scipy.stats.chi2``: the chi-squared distribution with ``df`` degrees of freedom."""
from __future__ import annotations

import math

import numpy as np

import shardc.lax as lax
import shardc.numpy as jnp
import shardc.scipy.special as special
from shardc.scipy.stats._util import clamped, promote_args_inexact

__all__ = ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"]


def logpdf(x, df, loc=0, scale=1):
    """``log`` of the chi-squared density, -inf below ``loc``. As JAX's, the kernel is
    ``(df/2 - 1) log y`` as written, so ``x == loc`` with ``df == 2`` is NaN (scipy: log 1/2)."""
    x, df, loc, scale = promote_args_inexact("chi2.logpdf", x, df, loc, scale)
    y = (x - loc) / scale
    half_df = df / 2
    kernel = (half_df - 1) * jnp.log(y) - y / 2
    log_norm = -(lax.lgamma(half_df) + math.log(2) * df / 2)
    return jnp.where(x < loc, -np.inf, log_norm - jnp.log(scale) + kernel)


def pdf(x, df, loc=0, scale=1):
    """The chi-squared density."""
    return jnp.exp(logpdf(x, df, loc, scale))


def _half_y(x, loc, scale):
    """``(x - loc) / (2 scale)``, clamped at 0 from below."""
    return clamped(0, (x - loc) / (scale * 2), np.inf)


def cdf(x, df, loc=0, scale=1):
    """``P(X <= x)``, the regularized lower incomplete gamma function of ``df / 2``."""
    x, df, loc, scale = promote_args_inexact("chi2.cdf", x, df, loc, scale)
    return special.gammainc(df / 2, _half_y(x, loc, scale))


def logcdf(x, df, loc=0, scale=1):
    """``log P(X <= x)``."""
    return jnp.log(cdf(x, df, loc, scale))


def sf(x, df, loc=0, scale=1):
    """``P(X > x)``, the regularized upper incomplete gamma function (accurate in the upper
    tail)."""
    x, df, loc, scale = promote_args_inexact("chi2.sf", x, df, loc, scale)
    return special.gammaincc(df / 2, _half_y(x, loc, scale))


def logsf(x, df, loc=0, scale=1):
    """``log P(X > x)``."""
    return jnp.log(sf(x, df, loc, scale))
