"""``shardc.scipy.stats.dirichlet``: the Dirichlet distribution on the simplex."""
from __future__ import annotations

import numpy as np

import shardc.numpy as jnp
import shardc.scipy.special as special

__all__ = ["logpdf", "pdf"]


def _on_simplex(x):
    """Whether each column of ``x`` (components along axis 0) is strictly positive and sums
    to 1 within JAX's tolerance of 1e-6."""
    return jnp.all(x > 0, axis=0) & (jnp.abs(jnp.sum(x, axis=0) - 1) < 1e-6)


def logpdf(x, alpha):
    """``log`` of the Dirichlet density with concentrations ``alpha`` (one-dimensional, ``K``
    entries) at ``x``, whose axis 0 holds ``K`` components, or ``K - 1`` (the last is then
    ``1 - sum``); -inf off the open simplex."""
    x, alpha = special.inexact_operands(x, alpha)
    if alpha.ndim != 1:
        raise ValueError(f"`alpha` must be one-dimensional; got alpha.shape={alpha.shape}")
    if x.shape[0] not in (alpha.shape[0], alpha.shape[0] - 1):
        raise ValueError("`x` must have either the same number of entries as `alpha` or one "
                         f"entry fewer; got x.shape={x.shape}, alpha.shape={alpha.shape}")
    if x.shape[0] != alpha.shape[0]:
        x = jnp.concatenate([x, 1 - jnp.sum(x, axis=0, keepdims=True)], axis=0)
    log_norm = jnp.sum(special.gammaln(alpha)) - special.gammaln(jnp.sum(alpha))
    alpha = jnp.reshape(alpha, alpha.shape + (1,) * (x.ndim - 1))
    log_probs = jnp.sum(special.xlogy(alpha - 1, x), axis=0) - log_norm
    return jnp.where(_on_simplex(x), log_probs, -np.inf)


def pdf(x, alpha):
    """The Dirichlet density."""
    return jnp.exp(logpdf(x, alpha))
