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


# --- the gamma family and friends, from gammaln --------------------------------------------------

def gammasgn(x):
    """The sign of ``Gamma(x)``: 1 for ``x > 0``, alternating on the negative axis, NaN at the
    negative integers (the poles)."""
    (x,) = inexact_operands(x)
    floor = jnp.floor(x)
    odd = jnp.remainder(floor, 2) == 1
    negative = jnp.where(x == floor, jnp.where(x == 0, 1.0, jnp.nan), jnp.where(odd, -1.0, 1.0))
    return jnp.where(x > 0, 1.0, negative).astype(x.dtype)


def gamma(x):
    """``Gamma(x)``: ``gammasgn(x) * exp(gammaln(x))``."""
    (x,) = inexact_operands(x)
    return gammasgn(x) * jnp.exp(lax.lgamma(x))


def betaln(a, b):
    """``log|B(a, b)|``."""
    a, b = inexact_operands(a, b)
    return lax.lgamma(a) + lax.lgamma(b) - lax.lgamma(a + b)


def beta(a, b):
    """``B(a, b) = Gamma(a) Gamma(b) / Gamma(a + b)``."""
    a, b = inexact_operands(a, b)
    return gammasgn(a) * gammasgn(b) * gammasgn(a + b) * jnp.exp(betaln(a, b))


def factorial(n, exact=False):
    """``n!`` as ``Gamma(n + 1)`` (0 for negative ``n``); ``exact=True`` is not supported."""
    if exact:
        raise NotImplementedError("factorial with exact=True")
    (n,) = inexact_operands(n)
    return jnp.where(n < 0, 0.0, jnp.exp(lax.lgamma(n + 1))).astype(n.dtype)


def comb(N, k, exact=False, repetition=False):
    """The number of ways to choose ``k`` of ``N`` (0 where ``k > N`` or either is negative);
    ``repetition``: with repetition."""
    if exact:
        raise NotImplementedError("comb with exact=True")
    N, k = inexact_operands(N, k)
    if repetition:
        N = N + k - 1
    value = jnp.exp(lax.lgamma(N + 1) - lax.lgamma(k + 1) - lax.lgamma(N - k + 1))
    return jnp.where((k > N) | (k < 0) | (N < 0), 0.0, value).astype(N.dtype)


def poch(z, m):
    """The rising factorial ``Gamma(z + m) / Gamma(z)``."""
    z, m = inexact_operands(z, m)
    sign = gammasgn(z + m) * gammasgn(z)
    return jnp.where(m == 0, 1.0, sign * jnp.exp(lax.lgamma(z + m) - lax.lgamma(z)))


def multigammaln(a, d):
    """The log of the multivariate gamma function of dimension ``d``."""
    (a,) = inexact_operands(a)
    terms = [lax.lgamma(a + (1 - j) / 2) for j in range(1, d + 1)]
    return d * (d - 1) / 4 * np.log(np.pi) + sum(terms[1:], terms[0])


def log_ndtr(x):
    """``log(ndtr(x))``, accurate far into both tails: ``-ndtr(-x)`` above 5, the asymptotic
    series of Mills' ratio below -10 (-20 in double precision), ``log(ndtr(x))`` between."""
    (x,) = inexact_operands(x)
    low = -20.0 if x.dtype == np.float64 else -10.0
    upper = x > 5.0
    lower = x < low
    middle_x = jnp.where(upper | lower, jnp.zeros_like(x), x)
    middle = jnp.log(ndtr(middle_x))
    upper_x = jnp.where(upper, x, jnp.full_like(x, 6.0))
    above = -ndtr(-upper_x)
    lower_x = jnp.where(lower, x, jnp.full_like(x, low - 1))
    z2 = 1 / (lower_x * lower_x)
    series = 1 - z2 * (1 - 3 * z2 * (1 - 5 * z2 * (1 - 7 * z2)))
    below = (-0.5 * lower_x * lower_x - jnp.log(-lower_x) - 0.5 * np.log(2 * np.pi)
             + jnp.log(series))
    return jnp.where(upper, above, jnp.where(lower, below, middle)).astype(x.dtype)


def rel_entr(p, q):
    """``p log(p / q)`` for positive ``p`` and ``q``, 0 where ``p == 0 <= q``, else inf."""
    p, q = inexact_operands(p, q)
    both = (p > 0) & (q > 0)
    safe_p = jnp.where(both, p, jnp.ones_like(p))
    safe_q = jnp.where(both, q, jnp.ones_like(q))
    value = safe_p * jnp.log(safe_p / safe_q)
    return jnp.where(both, value, jnp.where((p == 0) & (q >= 0), 0.0, jnp.inf)).astype(p.dtype)


def kl_div(p, q):
    """``p log(p / q) - p + q`` for positive ``p`` and ``q``, ``q`` where ``p == 0 <= q``, else
    inf."""
    p, q = inexact_operands(p, q)
    both = (p > 0) & (q > 0)
    inner = rel_entr(p, q) - p + q
    return jnp.where(both, inner, jnp.where((p == 0) & (q >= 0), q, jnp.inf)).astype(p.dtype)


def boxcox(x, lmbda):
    """The Box-Cox transform: ``(x ** lmbda - 1) / lmbda``, ``log x`` at ``lmbda == 0``."""
    x, lmbda = inexact_operands(x, lmbda)
    zero = lmbda == 0
    safe = jnp.where(zero, jnp.ones_like(lmbda), lmbda)
    return jnp.where(zero, jnp.log(x), jnp.expm1(safe * jnp.log(x)) / safe)


def boxcox1p(x, lmbda):
    """The Box-Cox transform of ``1 + x``, accurate for small ``x``."""
    x, lmbda = inexact_operands(x, lmbda)
    zero = lmbda == 0
    safe = jnp.where(zero, jnp.ones_like(lmbda), lmbda)
    return jnp.where(zero, jnp.log1p(x), jnp.expm1(safe * jnp.log1p(x)) / safe)


__all__ += ["gammasgn", "gamma", "betaln", "beta", "factorial", "comb", "poch", "multigammaln",
            "log_ndtr", "rel_entr", "kl_div", "boxcox", "boxcox1p"]
