"""``shardc.scipy.stats.gennorm``: the generalized normal distribution, density
``beta / (2 Gamma(1/beta)) exp(-|x|^beta)`` (standard form: no ``loc`` or ``scale``, as
JAX's)."""
from __future__ import annotations

import shardc.lax as lax
import shardc.numpy as jnp
from shardc.scipy.stats._util import promote_args_inexact

__all__ = ["logpdf", "cdf", "pdf"]


def logpdf(x, beta):
    """``log(beta / 2) - log Gamma(1/beta) - |x|^beta``."""
    x, beta = promote_args_inexact("gennorm.logpdf", x, beta)
    return jnp.log(0.5 * beta) - lax.lgamma(1 / beta) - jnp.abs(x) ** beta


def cdf(x, beta):
    """``P(X <= x) = (1 + sign(x) P(1/beta, |x|^beta)) / 2``, ``P`` the regularized lower
    incomplete gamma function."""
    x, beta = promote_args_inexact("gennorm.cdf", x, beta)
    return 0.5 * (1 + jnp.sign(x) * lax.igamma(1 / beta, jnp.abs(x) ** beta))


def pdf(x, beta):
    """The generalized normal density."""
    return jnp.exp(logpdf(x, beta))
