"""``shardc.scipy.stats.nbinom``: the negative binomial distribution, the number of failures
before the ``n``-th success in trials of probability ``p``."""
from __future__ import annotations

import numpy as np

import shardc.numpy as jnp
import shardc.scipy.special as special
from shardc.scipy.stats._util import promote_args_inexact

__all__ = ["logpmf", "pmf"]


def logpmf(k, n, p, loc=0):
    """``log P(X = k)`` = ``log Gamma(y + n) - log Gamma(n) - log y! + n log p +
    y log(1 - p)`` with ``y = k - loc``; -inf below ``loc``. As JAX's, ``k`` between integers
    gives the formula's value (scipy gives -inf)."""
    k, n, p, loc = promote_args_inexact("nbinom.logpmf", k, n, p, loc)
    y = k - loc
    log_comb = special.gammaln(y + n) - special.gammaln(n) - special.gammaln(y + 1)
    log_probs = log_comb + special.xlogy(n, p) + special.xlogy(y, 1 - p)
    return jnp.where(k < loc, -np.inf, log_probs)


def pmf(k, n, p, loc=0):
    """``P(X = k)``."""
    return jnp.exp(logpmf(k, n, p, loc))
