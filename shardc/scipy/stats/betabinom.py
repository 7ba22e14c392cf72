"""``shardc.scipy.stats.betabinom``: the beta-binomial distribution, ``n`` trials whose
success probability is beta(``a``, ``b``) distributed."""
from __future__ import annotations

import numpy as np

import shardc.numpy as jnp
import shardc.scipy.special as special
from shardc._transforms import jit
from shardc.scipy.stats._util import promote_args_inexact

__all__ = ["logpmf", "pmf"]


@jit
def logpmf(k, n, a, b, loc=0):
    """``log P(X = k)`` = ``log C(n, y) + log B(y + a, n - y + b) - log B(a, b)`` with
    ``y = floor(k) - loc``: -inf outside ``[0, n]``, NaN for negative ``n`` or non-positive
    ``a``, ``b``. As JAX's, ``k`` is floored (scipy gives -inf between integers)."""
    k, n, a, b, loc = promote_args_inexact("betabinom.logpmf", k, n, a, b, loc)
    y = jnp.floor(k) - loc
    log_comb = -(jnp.log1p(n) + special.betaln(n - y + 1, y + 1))
    log_probs = log_comb + special.betaln(y + a, n - y + b) - special.betaln(a, b)
    log_probs = jnp.where((y == 0) & (n == 0), 0.0, log_probs)
    # JAX's bounds: y below -loc (floor(k) below 0), above n, or y + a <= 0
    outside = (y < -loc) | (y > n) | (y + a <= 0)
    log_probs = jnp.where(outside, -np.inf, log_probs)
    return jnp.where((n < 0) | (a <= 0) | (b <= 0), np.nan, log_probs)


def pmf(k, n, a, b, loc=0):
    """``P(X = k)``."""
    return jnp.exp(logpmf(k, n, a, b, loc))
