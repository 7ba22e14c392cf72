"""``shardc.scipy.stats.geom``: the number of trials up to the first success, each of
probability ``p``."""
from __future__ import annotations

import numpy as np

import shardc.numpy as jnp
import shardc.scipy.special as special
from shardc.scipy.stats._util import promote_args_inexact

__all__ = ["logpmf", "pmf"]


def logpmf(k, p, loc=0):
    """``log P(X = k) = (k - loc - 1) log(1 - p) + log p``, -inf for ``k - loc <= 0``. As
    JAX's, ``k`` is not checked to be an integer (scipy gives -inf between)."""
    k, p, loc = promote_args_inexact("geom.logpmf", k, p, loc)
    x = k - loc
    log_probs = special.xlog1py(x - 1, -p) + jnp.log(p)
    return jnp.where(x <= 0, -np.inf, log_probs)


def pmf(k, p, loc=0):
    """``P(X = k)``."""
    return jnp.exp(logpmf(k, p, loc))
