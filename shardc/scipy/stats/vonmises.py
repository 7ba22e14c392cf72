"""``shardc.scipy.stats.vonmises``: the von Mises distribution of angles, concentration
``kappa``, centred at 0."""
from __future__ import annotations

import math

import numpy as np

import shardc.lax as lax
import shardc.numpy as jnp
from shardc.scipy.stats._util import promote_args_inexact

__all__ = ["logpdf", "pdf"]


def logpdf(x, kappa):
    """``kappa (cos x - 1) - log(2 pi i0e(kappa))`` (``i0e`` keeps large ``kappa`` finite);
    NaN unless ``kappa > 0``. As JAX's, the density is periodic in ``x`` (scipy's is 0
    outside ``[-pi, pi]``)."""
    x, kappa = promote_args_inexact("vonmises.logpdf", x, kappa)
    log_probs = kappa * (jnp.cos(x) - 1) - jnp.log(2 * math.pi * lax.bessel_i0e(kappa))
    return jnp.where(kappa > 0, log_probs, np.nan)


def pdf(x, kappa):
    """The von Mises density."""
    return jnp.exp(logpdf(x, kappa))
