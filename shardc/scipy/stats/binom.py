"""``shardc.scipy.stats.binom``: the number of successes in ``n`` trials of probability
``p``."""
from __future__ import annotations

import numpy as np

import shardc.numpy as jnp
import shardc.scipy.special as special
from shardc.scipy.stats._util import promote_args_inexact

__all__ = ["logpmf", "pmf"]


def logpmf(k, n, p, loc=0):
    """``log P(X = k)`` = ``log C(n, y) + y log p + (n - y) log(1 - p)`` with ``y = k - loc``,
    -inf outside ``[loc, loc + n]``. As JAX's, ``k`` between integers gives the formula's
    (gamma-interpolated) value, where scipy gives -inf."""
    k, n, p, loc = promote_args_inexact("binom.logpmf", k, n, p, loc)
    y = k - loc
    log_comb = special.gammaln(n + 1) - (special.gammaln(y + 1) + special.gammaln(n - y + 1))
    log_kernel = special.xlogy(y, p) + special.xlog1py(n - y, -p)
    log_probs = log_comb + log_kernel
    # a certain outcome (no trials, or p at 0 or 1 on its side) is exactly log 1
    log_probs = jnp.where(((y == 0) & (n == 0)) | (log_kernel == 0), 0.0, log_probs)
    return jnp.where((k >= loc) & (k < loc + n + 1), log_probs, -np.inf)


def pmf(k, n, p, loc=0):
    """``P(X = k)``."""
    return jnp.exp(logpmf(k, n, p, loc))
