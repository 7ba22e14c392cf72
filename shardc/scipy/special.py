"""``shardc.scipy.special``: special functions with ``jax.scipy.special``'s names, built on
``shardc.lax``'s special-function primitives and ``shardc.nn``.

>>> special.xlogy(0.0, 0.0)       # 0, where x * log(y) would be nan
"""
from __future__ import annotations

import numpy as np

from compiler.custom_ad import custom_jvp
import shardc.lax as lax
import shardc.nn as nn
import shardc.numpy as jnp

__all__ = ["logsumexp", "erf", "erfc", "erfinv", "expit", "logit", "xlogy", "xlog1py",
           "gammaln", "digamma", "polygamma", "entr", "softmax", "log_softmax", "ndtr", "ndtri"]

logsumexp = nn.logsumexp
softmax = nn.softmax
log_softmax = nn.log_softmax


def inexact_operands(*xs):
    """``xs`` as arrays of the floating dtype they promote to (``stats.norm`` shares it)."""
    xs = [jnp.asarray(x) if not hasattr(x, "dtype") else x for x in xs]
    dtype = jnp.result_type(*xs, 0.0)
    return [jnp.astype(x, dtype) for x in xs]


def erf(x):
    (x,) = inexact_operands(x)
    return lax.erf(x)


def erfc(x):
    (x,) = inexact_operands(x)
    return lax.erfc(x)


def erfinv(x):
    (x,) = inexact_operands(x)
    return lax.erf_inv(x)


def gammaln(x):
    """``log|Gamma(x)|``."""
    (x,) = inexact_operands(x)
    return lax.lgamma(x)


def digamma(x):
    (x,) = inexact_operands(x)
    return lax.digamma(x)


def polygamma(n, x):
    """The ``n``-th derivative of ``digamma``."""
    (x,) = inexact_operands(x)
    return lax.polygamma(n, x)


def expit(x):
    """The logistic sigmoid ``1 / (1 + exp(-x))``."""
    (x,) = inexact_operands(x)
    return lax.logistic(x)


def logit(x):
    """``log(x / (1 - x))``, the inverse of ``expit``."""
    (x,) = inexact_operands(x)
    return jnp.log(x) - jnp.log1p(-x)


def _x_times(log_fn, neutral, x, y):
    """``x * log_fn(y)``, 0 where ``x == 0`` (``y`` replaced by ``neutral`` there)."""
    zero = jnp.equal(x, 0)
    safe_y = jnp.where(zero, jnp.full_like(y, neutral), y)
    return jnp.where(zero, jnp.zeros_like(x * y), x * log_fn(safe_y))


@custom_jvp
def _xlogy(x, y):
    return _x_times(jnp.log, 1, x, y)


@_xlogy.defjvp
def _xlogy_jvp(primals, tangents):
    # d/dx = log y (also where x == 0), d/dy = x / y (0 where x == 0)
    (x, y), (tx, ty) = primals, tangents
    return _xlogy(x, y), tx * jnp.log(y) + ty * _x_times(lambda v: 1 / v, 1, x, y)


@custom_jvp
def _xlog1py(x, y):
    return _x_times(jnp.log1p, 0, x, y)


@_xlog1py.defjvp
def _xlog1py_jvp(primals, tangents):
    (x, y), (tx, ty) = primals, tangents
    return _xlog1py(x, y), tx * jnp.log1p(y) + ty * _x_times(lambda v: 1 / (1 + v), 0, x, y)


def xlogy(x, y):
    """``x * log(y)``, 0 where ``x == 0`` (whatever ``y``); its derivatives are ``log y`` and
    ``x / y`` (0 where ``x == 0``), as JAX's."""
    x, y = inexact_operands(x, y)
    x, y = jnp.broadcast_arrays(x, y)
    return _xlogy(x, y)


def xlog1py(x, y):
    """``x * log1p(y)``, 0 where ``x == 0``."""
    x, y = inexact_operands(x, y)
    x, y = jnp.broadcast_arrays(x, y)
    return _xlog1py(x, y)


def entr(x):
    """``-x log x`` for ``x > 0``, 0 at 0, ``-inf`` for ``x < 0``."""
    (x,) = inexact_operands(x)
    positive = x > 0
    safe = jnp.where(positive, x, jnp.ones_like(x))
    inner = jnp.where(positive, -(safe * jnp.log(safe)), jnp.zeros_like(x))
    return jnp.where(x < 0, -jnp.inf, inner)


def ndtr(x):
    """The standard normal CDF, ``erfc(-x / sqrt 2) / 2`` (accurate in the lower tail)."""
    (x,) = inexact_operands(x)
    return 0.5 * lax.erfc(-x * np.asarray(1 / np.sqrt(2), x.dtype))


def ndtri(p):
    """The standard normal quantile function, the inverse of ``ndtr``."""
    (p,) = inexact_operands(p)
    return np.asarray(np.sqrt(2), p.dtype) * lax.erf_inv(2 * p - 1)
