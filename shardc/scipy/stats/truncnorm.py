"""``shardc.scipy.stats.truncnorm``: the normal distribution truncated to
``[a, b]`` (in standard units: ``loc + scale * [a, b]``). Every function is NaN unless
``a < b``."""
from __future__ import annotations

import numpy as np

import shardc.numpy as jnp
import shardc.scipy.special as special
import shardc.scipy.stats.norm as norm
from shardc._transforms import jit
from shardc.scipy.stats._util import promote_args_inexact

__all__ = ["logpdf", "pdf", "logsf", "sf", "logcdf", "cdf"]


def _log_difference(log_x, log_y):
    """``log(exp(log_x) - exp(log_y))`` (NaN where it is negative)."""
    terms = jnp.stack([log_x, log_y])
    signs = jnp.stack([jnp.ones_like(log_x), -jnp.ones_like(log_y)])
    return special.logsumexp(terms, b=signs, axis=0)


def _log_gauss_mass(a, b):
    """``log(ndtr(b) - ndtr(a))``, computed in the left tail (the right one mirrored onto it)
    where the interval lies in one half, and as ``log1p(-ndtr(a) - ndtr(-b))`` where it
    straddles 0 (no cancellation as the mass nears 1)."""
    a, b = jnp.broadcast_arrays(jnp.asarray(a), jnp.asarray(b))
    right = a > 0
    central = ~((b <= 0) | right)
    a_tail = jnp.where(right, -b, a)
    b_tail = jnp.where(right, -a, b)
    tail = _log_difference(special.log_ndtr(b_tail), special.log_ndtr(a_tail))
    middle = jnp.log1p(-special.ndtr(a) - special.ndtr(-b))
    return jnp.where(central, middle, tail)


@jit
def logpdf(x, a, b, loc=0, scale=1):
    """``log`` of the density: the normal one over its mass in ``[a, b]``, -inf outside."""
    x, a, b, loc, scale = promote_args_inexact("truncnorm.logpdf", x, a, b, loc, scale)
    value = norm.logpdf(x, loc, scale) - _log_gauss_mass(a, b)
    z = (x - loc) / scale
    value = jnp.where((z < a) | (z > b), -np.inf, value)
    return jnp.where(a >= b, np.nan, value)


def pdf(x, a, b, loc=0, scale=1):
    """The truncated normal density."""
    return jnp.exp(logpdf(x, a, b, loc, scale))


@jit
def logsf(x, a, b, loc=0, scale=1):
    """``log P(X > x)``: the mirror image's ``logcdf``."""
    x, a, b, loc, scale = promote_args_inexact("truncnorm.logsf", x, a, b, loc, scale)
    return logcdf(-x, -b, -a, -loc, scale)


@jit
def sf(x, a, b, loc=0, scale=1):
    """``P(X > x)``."""
    return jnp.exp(logsf(x, a, b, loc, scale))


@jit
def logcdf(x, a, b, loc=0, scale=1):
    """``log P(X <= x)``: 0 from ``b`` on, -inf up to ``a``; near 1 from the upper mass,
    ``log1p(-P(X > x))`` (as scipy, against cancellation)."""
    x, a, b, loc, scale = promote_args_inexact("truncnorm.logcdf", x, a, b, loc, scale)
    x, a, b = jnp.broadcast_arrays(x, a, b)
    z = (x - loc) / scale
    log_mass = _log_gauss_mass(a, b)
    log_below = _log_gauss_mass(a, z) - log_mass
    log_above = _log_gauss_mass(z, b) - log_mass
    value = jnp.select([z >= b, z <= a, log_below > -0.1, z > a],
                       [0, -np.inf, jnp.log1p(-jnp.exp(log_above)), log_below])
    return jnp.where(a >= b, np.nan, value)


@jit
def cdf(x, a, b, loc=0, scale=1):
    """``P(X <= x)``."""
    return jnp.exp(logcdf(x, a, b, loc, scale))
