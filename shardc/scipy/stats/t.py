"""``shardc.scipy.stats.t``: Student's t distribution with ``df`` degrees of freedom."""
from __future__ import annotations

import numpy as np

import shardc.lax as lax
import shardc.numpy as jnp
from shardc.scipy.stats._util import promote_args_inexact

__all__ = ["logpdf", "pdf"]


def logpdf(x, df, loc=0, scale=1):
    """``log Gamma((df + 1)/2) - log Gamma(df/2) - log(pi df scale^2) / 2
    - (df + 1)/2 log(1 + z^2 / df)``."""
    x, df, loc, scale = promote_args_inexact("t.logpdf", x, df, loc, scale)
    z = (x - loc) / scale
    half_df = df / 2
    half_df_plus_half = half_df + 0.5
    log_norm = (lax.lgamma(half_df) + jnp.log(scale * scale * np.pi * df) / 2
                - lax.lgamma(half_df_plus_half))
    return -(log_norm + half_df_plus_half * jnp.log1p(z * z / df))


def pdf(x, df, loc=0, scale=1):
    """The t density."""
    return jnp.exp(logpdf(x, df, loc, scale))
