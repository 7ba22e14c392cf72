"""``shardc.scipy.stats.multivariate_normal``: the normal distribution of vectors (the last
axis) with ``mean`` and covariance ``cov``."""
from __future__ import annotations

import math

import shardc.lax as lax
import shardc.numpy as jnp
import shardc.scipy.special as special

__all__ = ["logpdf", "pdf"]

_LOG_2PI = math.log(2 * math.pi)


def _whitened(cov_factor, centred):
    """``L^-1 (x - mean)`` for each vector and lower Cholesky factor, batch axes broadcast."""
    solve = jnp.vectorize(
        lambda lower, b: lax.linalg.triangular_solve(lower, b, lower=True, transpose_a=True),
        signature="(n,n),(n)->(n)")
    return solve(cov_factor, centred)


def logpdf(x, mean, cov, allow_singular=None):
    """``log`` of the normal density at ``x``. A scalar ``mean`` is a one-dimensional normal
    of variance ``cov``; a scalar ``cov`` with a vector ``mean`` is ``cov`` times the
    identity; else ``cov`` is ``(..., n, n)`` and positive definite (NaN where it is not).
    ``allow_singular`` is not supported (JAX's)."""
    if allow_singular is not None:
        raise NotImplementedError("allow_singular argument of multivariate_normal.logpdf")
    x, mean, cov = special.inexact_operands(x, mean, cov)
    if not mean.shape:
        return -0.5 * jnp.square(x - mean) / cov - 0.5 * (_LOG_2PI + jnp.log(cov))
    n = mean.shape[-1]
    if not cov.shape:
        centred = x - mean
        return (-0.5 * jnp.einsum("...i,...i->...", centred, centred) / cov
                - n / 2 * (_LOG_2PI + jnp.log(cov)))
    if cov.ndim < 2 or cov.shape[-2:] != (n, n):
        raise ValueError("multivariate_normal.logpdf got incompatible shapes")
    factor = lax.linalg.cholesky(cov)
    y = _whitened(factor, x - mean)
    log_det_half = jnp.sum(jnp.log(jnp.diagonal(factor, axis1=-1, axis2=-2)), axis=-1)
    return -0.5 * jnp.einsum("...i,...i->...", y, y) - n / 2 * _LOG_2PI - log_det_half


def pdf(x, mean, cov):
    """The normal density at ``x``."""
    return jnp.exp(logpdf(x, mean, cov))
