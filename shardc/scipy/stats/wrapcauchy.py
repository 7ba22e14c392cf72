"""``shardc.scipy.stats.wrapcauchy``: the wrapped Cauchy distribution on ``[0, 2 pi]`` with
shape ``c``."""
from __future__ import annotations

import math

import numpy as np

import shardc.numpy as jnp
from shardc.scipy.stats._util import promote_args_inexact

__all__ = ["logpdf", "pdf"]


def logpdf(x, c):
    """``log((1 - c^2) / (2 pi (1 + c^2 - 2 c cos x)))`` on ``[0, 2 pi]``, -inf outside;
    NaN unless ``0 < c < 1``."""
    x, c = promote_args_inexact("wrapcauchy.logpdf", x, c)
    log_probs = (jnp.log(1 - c * c) - math.log(2 * math.pi)
                 - jnp.log(1 + c * c - 2 * c * jnp.cos(x)))
    log_probs = jnp.where((x >= 0) & (x <= 2 * math.pi), log_probs, -np.inf)
    return jnp.where((c > 0) & (c < 1), log_probs, np.nan)


def pdf(x, c):
    """The wrapped Cauchy density."""
    return jnp.exp(logpdf(x, c))
