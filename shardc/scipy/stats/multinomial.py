"""``shardc.scipy.stats.multinomial``: the counts of ``n`` draws among the categories of
probabilities ``p`` (the last axis)."""
from __future__ import annotations

import numpy as np

import shardc.numpy as jnp
import shardc.scipy.special as special
from shardc.numpy._arraylike import check_arraylike
from shardc.scipy.stats._util import promote_args_inexact

__all__ = ["logpmf", "pmf"]


def _integer_counts(x, n):
    """``x`` and ``n`` promoted to their common numeric dtype (booleans count as integers),
    which must be an integer one."""
    for position, arg in enumerate((x, n)):
        check_arraylike("multinomial.logpmf", arg, position)
    dtype = jnp.result_type(x, n)
    if dtype == np.bool_:
        dtype = jnp.result_type(int)
    if not jnp.issubdtype(dtype, jnp.integer):
        raise ValueError(f"x and n must be of integer type; got x.dtype={dtype}, "
                         f"n.dtype={dtype}")
    return jnp.asarray(x, dtype), jnp.asarray(n, dtype)


def logpmf(x, n, p):
    """``log n! + sum(x log p - log x!)`` over the last axis; -inf unless the counts sum to
    ``n``. As JAX's, that sum is over every entry of ``x`` (so meant for one draw, not a
    batch)."""
    (p,) = promote_args_inexact("multinomial.logpmf", p)
    x, n = _integer_counts(x, n)
    x, n = x.astype(p.dtype), n.astype(p.dtype)
    log_probs = special.gammaln(n + 1) + jnp.sum(special.xlogy(x, p) - special.gammaln(x + 1),
                                                 axis=-1)
    return jnp.where(jnp.sum(x) == n, log_probs, -np.inf)


def pmf(x, n, p):
    """``P(X = x)``."""
    return jnp.exp(logpmf(x, n, p))
