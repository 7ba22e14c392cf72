"""``shardc.scipy.special``: special functions with ``jax.scipy.special``'s names, built on
``shardc.lax``'s special-function primitives and ``shardc.nn``.

>>> special.xlogy(0.0, 0.0)       # 0, where x * log(y) would be nan
"""
from __future__ import annotations

import numpy as np

from compiler.custom_ad import SymbolicZero, custom_jvp
import shardc.lax as lax
import shardc.nn as nn
import shardc.numpy as jnp
from shardc.numpy._core import weakly_typed_like
from shardc.scipy._special_base import (complex_loggamma, gamma, gammasgn, horner,
                                        inexact_operands)
from shardc.scipy._special_more import (
    bernoulli, dawsn, exp1, expi, expn, fresnel, hyp1f1, hyp2f1, lpmn, lpmn_values, owens_t,
    sici, wofz)

__all__ = ["logsumexp", "erf", "erfc", "erfinv", "expit", "logit", "xlogy", "xlog1py",
           "gammaln", "digamma", "polygamma", "entr", "softmax", "log_softmax", "ndtr", "ndtri"]

logsumexp = nn.logsumexp


def softmax(x, /, *, axis=None):
    """``exp(x) / sum(exp(x))`` over ``axis`` (scipy's default: all axes)."""
    return nn.softmax(x, axis=axis)


def log_softmax(x, /, *, axis=None):
    """``x - logsumexp(x)`` over ``axis`` (scipy's default: all axes)."""
    return nn.log_softmax(x, axis=axis)


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
    """The ``n``-th derivative of ``digamma`` (``n`` and ``x`` broadcast together)."""
    n, x = inexact_operands(n, x)
    if jnp.iscomplexobj(x):
        raise ValueError("polygamma does not support complex-valued inputs.")
    return lax.polygamma(*jnp.broadcast_arrays(n, x))


def expit(x):
    """The logistic sigmoid ``1 / (1 + exp(-x))``."""
    (x,) = inexact_operands(x)
    return lax.logistic(x)


def logit(x):
    """``log(x / (1 - x))``, the inverse of ``expit``."""
    (x,) = inexact_operands(x)
    return jnp.log(x) - jnp.log1p(-x)


def _x_times(log_fn, x, y):
    """``x * log_fn(y)``, 0 where ``x == 0`` unless ``y`` is NaN (NaN in ``y`` propagates, as
    scipy's and JAX's)."""
    keep = jnp.not_equal(x, 0) | jnp.isnan(y)
    return jnp.where(keep, x * log_fn(y), jnp.zeros_like(x * y))


@custom_jvp
def _xlogy(x, y):
    return _x_times(jnp.log, x, y)


@_xlogy.defjvp
def _xlogy_jvp(primals, tangents):
    # JAX's rule: d/dx = log y, d/dy = x / y (NaN at x == y == 0, as JAX's)
    (x, y), (tx, ty) = primals, tangents
    return _xlogy(x, y), tx * jnp.log(y) + ty * x / y


@custom_jvp
def _xlog1py(x, y):
    return _x_times(jnp.log1p, x, y)


@_xlog1py.defjvp
def _xlog1py_jvp(primals, tangents):
    (x, y), (tx, ty) = primals, tangents
    return _xlog1py(x, y), tx * jnp.log1p(y) + ty * x / (1 + y)


def xlogy(x, y):
    """``x * log(y)``, 0 where ``x == 0`` (unless ``y`` is NaN); its derivatives are ``log y``
    and ``x / y``, as JAX's."""
    x, y = inexact_operands(x, y)
    x, y = jnp.broadcast_arrays(x, y)
    return _xlogy(x, y)


def xlog1py(x, y):
    """``x * log1p(y)``, 0 where ``x == 0`` (unless ``y`` is NaN)."""
    x, y = inexact_operands(x, y)
    x, y = jnp.broadcast_arrays(x, y)
    return _xlog1py(x, y)


@custom_jvp
def _xlogx(x):
    return _xlogy(x, x)


@_xlogx.defjvp
def _xlogx_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return _xlogx(x), t * (jnp.log(x) + 1)


def entr(x):
    """``-x log x`` for ``x >= 0`` (0 at 0), ``-inf`` for ``x < 0``; its derivative is
    ``-(log x + 1)`` (inf at 0), as JAX's."""
    (x,) = inexact_operands(x)
    if jnp.iscomplexobj(x):
        raise ValueError("entr does not support complex-valued inputs.")
    return jnp.where(x < 0, jnp.full_like(x, -jnp.inf), -_xlogx(x))


def _float32_or_64(x, message: str):
    """``x`` as an array, which must be float32 or float64 (JAX's TypeError, ``message``
    naming the dtype, for integers and half precision: these functions do not promote)."""
    x = jnp.asarray(x)
    if x.dtype not in (np.float32, np.float64):
        raise TypeError(message.format(x.dtype))
    return x


def ndtr(x):
    """The standard normal CDF, ``erfc(-x / sqrt 2) / 2`` (accurate in the lower tail).
    float32 and float64 only, as JAX's."""
    x = _float32_or_64(x, "x.dtype={} is not supported, see docstring for supported types.")
    return 0.5 * lax.erfc(-x * np.asarray(1 / np.sqrt(2), x.dtype))


def ndtri(p):
    """The standard normal quantile function, the inverse of ``ndtr``, by Cephes' rational
    approximations as JAX's: accurate far into the tails, where ``sqrt(2) erfinv(2p - 1)``
    would round ``2p - 1`` to -1 (and give -inf at ``p = 1e-10``). float32 and float64 only."""
    p = _float32_or_64(p, "x.dtype={} is not supported, see docstring for supported types.")
    dtype = p.dtype.type
    # the lower tail: the upper one by symmetry, the centre around 1/2
    q = jnp.where(p > dtype(-np.expm1(-2.0)), dtype(1) - p, p)
    q = jnp.where(q == 0, dtype(0.5), q)          # (its result is replaced below)
    w = q - dtype(0.5)
    ww = w * w
    centre = w + w * ww * (horner(_NDTRI_P0, ww) / horner(_NDTRI_Q0, ww))
    centre = centre * -dtype(np.sqrt(2.0 * np.pi))
    z = jnp.sqrt(dtype(-2) * jnp.log(q))
    head, inv_z = z - jnp.log(z) / z, 1 / z
    far = head - horner(_NDTRI_P2, inv_z) / horner(_NDTRI_Q2, inv_z) / z
    near = head - horner(_NDTRI_P1, inv_z) / horner(_NDTRI_Q1, inv_z) / z
    x = jnp.where(q > dtype(np.exp(-2.0)), centre, jnp.where(z >= dtype(8), far, near))
    x = jnp.where(p > dtype(1.0 - np.exp(-2.0)), x, -x)
    return jnp.where(p == 0, dtype(-np.inf), jnp.where(p == 1, dtype(np.inf), x))


# Cephes' ndtri: P0/Q0 for the centre (|p - 1/2| < 1/2 - exp(-2)), P1/Q1 for the tails with
# z = sqrt(-2 log p) < 8, P2/Q2 beyond
_NDTRI_P0 = (-5.99633501014107895267e1, 9.80010754185999661536e1, -5.66762857469070293439e1,
             1.39312609387279679503e1, -1.23916583867381258016e0)
_NDTRI_Q0 = (1.0, 1.95448858338141759834e0, 4.67627912898881538453e0, 8.63602421390890590575e1,
             -2.25462687854119370527e2, 2.00260212380060660359e2, -8.20372256168333339912e1,
             1.59056225126211695515e1, -1.18331621121330003142e0)
_NDTRI_P1 = (4.05544892305962419923e0, 3.15251094599893866154e1, 5.71628192246421288162e1,
             4.40805073893200834700e1, 1.46849561928858024014e1, 2.18663306850790267539e0,
             -1.40256079171354495875e-1, -3.50424626827848203418e-2, -8.57456785154685413611e-4)
_NDTRI_Q1 = (1.0, 1.57799883256466749731e1, 4.53907635128879210584e1, 4.13172038254672030440e1,
             1.50425385692907503408e1, 2.50464946208309415979e0, -1.42182922854787788574e-1,
             -3.80806407691578277194e-2, -9.33259480895457427372e-4)
_NDTRI_P2 = (3.23774891776946035970e0, 6.91522889068984211695e0, 3.93881025292474443415e0,
             1.33303460815807542389e0, 2.01485389549179081538e-1, 1.23716634817820021358e-2,
             3.01581553508235416007e-4, 2.65806974686737550832e-6, 6.23974539184983293730e-9)
_NDTRI_Q2 = (1.0, 6.02427039364742014255e0, 3.67983563856160859403e0, 1.37702099489081330271e0,
             2.16236993594496635890e-1, 1.34204006088543189037e-2, 3.28014464682127739104e-4,
             2.89247864745380683936e-6, 6.79019408009981274425e-9)


# --- the gamma family and friends, from gammaln --------------------------------------------------

def _stirling_tail(x):
    """``log Gamma(x) - ((x - 1/2) log x - x + log(2 pi) / 2)``, by its asymptotic series
    (for ``x >= 8``: its terms fall below float32's precision by the fourth)."""
    inv = 1.0 / x
    inv2 = inv * inv
    return inv * (1 / 12 + inv2 * (-1 / 360 + inv2 * (1 / 1260 + inv2 * (-1 / 1680))))


def betaln(a, b):
    """``log|B(a, b)|``. With ``b`` the larger, from ``b >= 8`` on the difference
    ``log Gamma(b) - log Gamma(a + b)`` is taken from Stirling's series, not as the
    difference of two large logarithms (which loses all of float32's digits)."""
    a, b = inexact_operands(a, b)
    a, b = jnp.minimum(a, b), jnp.maximum(a, b)
    direct = lax.lgamma(a) + lax.lgamma(b) - lax.lgamma(a + b)
    big = jnp.where(b >= 8, b, 8.0)
    ratio = a / big
    difference = (-a * jnp.log(big) - (a + big - 0.5) * jnp.log1p(ratio) + a
                  + _stirling_tail(big) - _stirling_tail(a + big))
    return jnp.where(b >= 8, lax.lgamma(a) + difference, direct)


def beta(a, b):
    """``B(a, b) = Gamma(a) Gamma(b) / Gamma(a + b)``."""
    a, b = inexact_operands(a, b)
    return gammasgn(a) * gammasgn(b) * gammasgn(a + b) * jnp.exp(betaln(a, b))


def factorial(n, exact=False):
    """``n!`` as ``Gamma(n + 1)`` (0 for negative ``n``); ``exact=True`` is not supported."""
    if exact:
        raise NotImplementedError("factorial with exact=True")
    (m,) = inexact_operands(n)
    return weakly_typed_like(
        jnp.where(m < 0, 0.0, jnp.exp(lax.lgamma(m + 1))).astype(m.dtype), n)


def comb(N, k, exact=False, repetition=False):
    """The number of ways to choose ``k`` of ``N`` (0 where ``k > N`` or either is negative);
    ``repetition``: with repetition."""
    if exact:
        raise NotImplementedError("comb with exact=True")
    given = (N, k)
    N, k = inexact_operands(N, k)
    if repetition:
        result = comb(N + k - 1, k)
        return weakly_typed_like(jnp.where((k == 0) & (N >= 0), 1.0, result).astype(N.dtype),
                                 *given)
    chosen = (k <= N) & (N >= 0) & (k >= 0)
    # where no choice is possible the lgammas' poles are not read (no NaN in the gradient)
    safe_n, safe_k = jnp.where(chosen, N, 0.0), jnp.where(chosen, k, 0.0)
    value = jnp.exp(lax.lgamma(safe_n + 1) - lax.lgamma(safe_k + 1)
                    - lax.lgamma(safe_n + 1 - safe_k))
    return weakly_typed_like(jnp.where(chosen, value, 0.0).astype(N.dtype), *given)


def poch(z, m):
    """The rising factorial ``Gamma(z + m) / Gamma(z)``."""
    z, m = inexact_operands(z, m)
    sign = gammasgn(z + m) * gammasgn(z)
    return jnp.where(m == 0, 1.0, sign * jnp.exp(lax.lgamma(z + m) - lax.lgamma(z)))


def multigammaln(a, d):
    """The log of the multivariate gamma function of dimension ``d``."""
    (a,) = inexact_operands(a)
    a = jnp.astype(a, a.dtype)              # strongly typed, as JAX's result
    # in a's dtype throughout, as JAX's (a bfloat16 argument gives a bfloat16 result)
    constant = (jnp.asarray(d * (d - 1) * 0.25, a.dtype)
                * jnp.log(jnp.asarray(np.pi, a.dtype)))
    halves = jnp.arange(d, dtype=a.dtype) / jnp.asarray(2, a.dtype)
    terms = lax.lgamma(jnp.expand_dims(a, -1) - halves)
    return jnp.sum(terms, axis=-1) + constant


def log_ndtr(x):
    """``log(ndtr(x))``, accurate far into both tails: ``-ndtr(-x)`` above 5, the asymptotic
    series of Mills' ratio below -10 (-20 in double precision), ``log(ndtr(x))`` between.
    float32 and float64 only, as JAX's."""
    return _log_ndtr(_float32_or_64(x, "x.dtype={} is not supported."))


@custom_jvp
def _log_ndtr(x):
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


@_log_ndtr.defjvp
def _log_ndtr_jvp(primals, tangents):
    """JAX's rule: the density over the distribution function, ``exp(log pdf - log ndtr)``,
    which stays finite where both underflow (so do the derivatives of this one)."""
    (x,), (t,) = primals, tangents
    out = _log_ndtr(x)
    log_pdf = -0.5 * x * x - np.asarray(0.5 * np.log(2 * np.pi), x.dtype)
    return out, t * jnp.exp(log_pdf - out)


def rel_entr(p, q):
    """``p log(p / q)`` for positive ``p`` and ``q``, 0 where ``p == 0 <= q``, else inf;
    JAX's formula ``xlogx(p) - xlogy(p, q)`` on the positive entries (so its derivatives)."""
    p, q = inexact_operands(p, q)
    if jnp.iscomplexobj(p):
        raise ValueError("rel_entr does not support complex-valued inputs.")
    p, q = jnp.broadcast_arrays(p, q)
    both = (p > 0) & (q > 0)
    one_zero = (p == 0) & (q >= 0)
    safe_p = jnp.where(both, p, jnp.ones_like(p))
    safe_q = jnp.where(both, q, jnp.ones_like(q))
    value = _xlogx(safe_p) - _xlogy(safe_p, safe_q)
    return jnp.where(both, value, jnp.where(one_zero, jnp.zeros_like(p),
                                            jnp.full_like(p, jnp.inf)))


def kl_div(p, q):
    """``rel_entr(p, q) - p + q``, JAX's definition (so NaN in gives NaN, and the derivative
    at ``p == 0`` is -1)."""
    p, q = inexact_operands(p, q)
    if jnp.iscomplexobj(p):
        raise ValueError("kl_div does not support complex-valued inputs.")
    return rel_entr(p, q) - p + q


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


# --- incomplete gamma and beta, Hurwitz zeta, modified Bessel functions -----------------------

def gammainc(a, x):
    """The regularized lower incomplete gamma function ``P(a, x)``; differentiable in both."""
    a, x = inexact_operands(a, x)
    return lax.igamma(a, x)


def gammaincc(a, x):
    """The regularized upper incomplete gamma function ``Q(a, x) = 1 - P(a, x)``."""
    a, x = inexact_operands(a, x)
    return lax.igammac(a, x)


def zeta(x, q=None):
    """The Hurwitz zeta function ``sum_k (q + k)^-x`` (``x > 1``); as in JAX, ``q`` is
    required."""
    if q is None:
        raise NotImplementedError("Riemann zeta function not implemented; pass q != None to "
                                  "compute the Hurwitz Zeta function.")
    x, q = inexact_operands(x, q)
    return lax.zeta(x, q)


def i0e(x):
    """``exp(-|x|) I0(x)``."""
    (x,) = inexact_operands(x)
    return lax.bessel_i0e(x)


def i1e(x):
    """``exp(-|x|) I1(x)``."""
    (x,) = inexact_operands(x)
    return lax.bessel_i1e(x)


def i0(x):
    """The modified Bessel function of the first kind of order 0."""
    (x,) = inexact_operands(x)
    return jnp.exp(jnp.abs(x)) * lax.bessel_i0e(x)


def i1(x):
    """The modified Bessel function of the first kind of order 1."""
    (x,) = inexact_operands(x)
    return jnp.exp(jnp.abs(x)) * lax.bessel_i1e(x)


def loggamma(x):
    """``log Gamma(x)`` on the positive reals (nan for ``x <= 0``, as JAX's real branch);
    for complex ``x`` the principal branch, cut along the negative real axis (as scipy's)."""
    (x,) = inexact_operands(x)
    if jnp.iscomplexobj(x):
        return complex_loggamma(x)
    return jnp.where(x > 0, lax.lgamma(x), jnp.nan)


def erfcx(x):
    """The scaled complementary error function ``exp(x^2) erfc(x)``: directly where that
    does not underflow, by its asymptotic series beyond. Complex ``x``: ``wofz(ix)``."""
    (x,) = inexact_operands(x)
    if jnp.iscomplexobj(x):
        return wofz(1j * x)
    big = x > 8
    safe = jnp.where(big, 0.0, x)
    direct = jnp.exp(safe * safe) * lax.erfc(safe)
    inv = 1.0 / jnp.where(big, x * x, 1.0)
    series = 1 + inv * (-0.5 + inv * (0.75 + inv * (-1.875 + inv * (6.5625 - 29.53125 * inv))))
    tail = series / (jnp.where(big, x, 1.0) * np.sqrt(np.pi))
    return jnp.where(big, tail, direct).astype(x.dtype)


_BETA_STEPS = 300


def _betainc_fraction(a, b, x):
    """``I_x(a, b)`` by its continued fraction (modified Lentz), for ``x`` below the mean
    ``(a + 1) / (a + b + 2)`` where it converges fast."""
    tiny = jnp.asarray(np.finfo(np.float32).tiny, x.dtype)
    fix = lambda v: jnp.where(jnp.abs(v) < tiny, tiny, v)
    qab, qap, qam = a + b, a + 1, a - 1
    d = 1.0 / fix(1 - qab * x / qap)

    def step(m, state):
        c, d, h = state
        m = m.astype(x.dtype) + 1
        m2 = 2 * m
        even = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 / fix(1 + even * d)
        c = fix(1 + even / c)
        h = h * d * c
        odd = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 / fix(1 + odd * d)
        c = fix(1 + odd / c)
        return c, d, h * d * c

    _, _, h = lax.fori_loop(0, _BETA_STEPS, step, (jnp.ones_like(x), d, d))
    front = jnp.exp(a * jnp.log(x) + b * jnp.log1p(-x) - betaln(a, b)) / a
    return front * h


@custom_jvp
def _betainc(a, b, x):
    flip = x > (a + 1) / (a + b + 2)
    inside = (x > 0) & (x < 1)
    xs = jnp.where(inside, jnp.where(flip, 1 - x, x), 0.5)
    aa, bb = jnp.where(flip, b, a), jnp.where(flip, a, b)
    value = _betainc_fraction(aa, bb, xs)
    value = jnp.where(flip, 1 - value, value)
    value = jnp.where(x <= 0, 0.0, jnp.where(x >= 1, 1.0, value))
    # JAX's limits: a -> 0 (or b -> inf) puts all the mass at 0, b -> 0 (or a -> inf) at 1
    a_zero = (a == 0) | (b == jnp.inf)
    b_zero = (b == 0) | (a == jnp.inf)
    value = jnp.where((b_zero & (x != 1)) | (a_zero & (x == 0)), 0.0, value)
    value = jnp.where((a_zero & (x != 0)) | (b_zero & (x == 1)), 1.0, value)
    bad = (a < 0) | (b < 0) | (x < 0) | (x > 1) | (a_zero & b_zero) \
        | jnp.isnan(a) | jnp.isnan(b) | jnp.isnan(x)
    return jnp.where(bad, jnp.nan, value)


def _betainc_jvp(primals, tangents):
    a, b, x = primals
    ta, tb, tx = tangents
    if not (isinstance(ta, SymbolicZero) and isinstance(tb, SymbolicZero)):
        raise ValueError("Betainc gradient with respect to a and b not supported.")
    out = _betainc(a, b, x)
    if isinstance(tx, SymbolicZero):
        return out, jnp.zeros_like(out)
    density = jnp.exp((a - 1) * jnp.log(x) + (b - 1) * jnp.log1p(-x) - betaln(a, b))
    return out, density * tx


_betainc.defjvp(_betainc_jvp, symbolic_zeros=True)


def betainc(a, b, x):
    """The regularized incomplete beta function ``I_x(a, b)``; differentiable in ``x``.
    float16 and bfloat16 operands are computed in float32 and rounded back, as JAX does (the
    continued fraction's tiny guard values underflow in float16)."""
    given = (a, b, x)
    a, b, x = inexact_operands(a, b, x)
    shape = jnp.broadcast_shapes(a.shape, b.shape, x.shape)
    dtype = a.dtype
    if np.dtype(dtype).itemsize < 4:
        a, b, x = (jnp.astype(v, np.float32) for v in (a, b, x))
    value = _betainc(*(jnp.broadcast_to(v, shape) for v in (a, b, x)))
    return weakly_typed_like(jnp.astype(value, dtype), *given)


__all__ += ["gammainc", "gammaincc", "zeta", "i0e", "i1e", "i0", "i1", "loggamma", "erfcx",
            "betainc"]


# --- Spence's function and Bessel functions of the first kind -----------------------------------

# The rational approximation of the dilogarithm near 1 (Cephes' ``spence``): -w P(w) / Q(w) for
# w = x - 1 in [-1/2, 1/2]
_SPENCE_P = (4.65128586073990045278e-5, 7.31589045238094711071e-3, 1.33847639578309018650e-1,
             8.79691311754530315341e-1, 2.71149851196553469920e0, 4.25697156008121755724e0,
             3.29771340985225106936e0, 1.00000000000000000126e0)
_SPENCE_Q = (6.90990488912553276999e-4, 2.54043763932544379113e-2, 2.82974860602568089943e-1,
             1.41172597751831069617e0, 3.63800533345137075418e0, 5.03278880143316990390e0,
             3.54771340985225096217e0, 9.99999999999999998740e-1)


def spence(x):
    """Spence's function (the dilogarithm of real arguments): the integral of
    ``log(t) / (1 - t)`` from 1 to ``x``; NaN for ``x < 0``. float32 and float64 only."""
    x = jnp.asarray(x)
    if x.dtype not in (np.float32, np.float64):
        raise TypeError(f"x.dtype={x.dtype} is not supported, see docstring for supported "
                        "types.")
    # fold x onto [1/2, 3/2] around 1: x -> 1/x above 2 (and above 3/2 w = 1/x - 1), and the
    # reflection x -> 1 - x below 1/2; each fold adds its closed-form term back
    safe = jnp.where(x > 0, x, 1.0)
    inverted = safe > 2.0
    z = jnp.where(inverted, 1.0 / safe, safe)
    above = z > 1.5
    below = z < 0.5
    w = jnp.where(above, 1.0 / z - 1.0, jnp.where(below, -z, z - 1.0))
    y = -w * horner(_SPENCE_P, w) / horner(_SPENCE_Q, w)
    y = jnp.where(below, np.pi ** 2 / 6.0 - jnp.log(z) * jnp.log1p(-z) - y, y)
    y = jnp.where(inverted | above, -0.5 * jnp.log(z) ** 2 - y, y)
    y = jnp.where(x == 1.0, 0.0, jnp.where(x == 0.0, np.pi ** 2 / 6.0, y))
    return jnp.where(x < 0, np.nan, y).astype(x.dtype)


def bessel_jn(z, *, v: int, n_iter: int = 50):
    """Bessel functions of the first kind of orders ``0 .. v`` at real ``z``: an array of shape
    ``(v + 1, *z.shape)``, by Miller's backward recurrence from order ``n_iter`` (Zhang and
    Jin), normalised by ``J0 + 2 (J2 + J4 + ...) = 1``."""
    z = jnp.asarray(z)
    if not jnp.issubdtype(z.dtype, jnp.inexact):
        z = z.astype(jnp.result_type(z, 0.0))
    if jnp.issubdtype(z.dtype, jnp.complexfloating):
        raise ValueError("complex input not supported.")
    v, n_iter = int(v), int(n_iter)

    def down(carry, k):
        above, here, total = carry             # f(k + 2), f(k + 1), the even-order sum
        value = 2.0 * (k + 1.0) * here / z - above
        total = jnp.where(k % 2 == 0, total + 2.0 * value, total)
        return (here, value, total), value

    start = (jnp.zeros_like(z), jnp.full_like(z, 1e-16), jnp.zeros_like(z))
    (_, _, total), values = lax.scan(down, start, jnp.arange(n_iter + 1).astype(z.dtype),
                                     reverse=True)
    return values[:v + 1] / (total - values[0])


__all__ += ["spence", "bessel_jn"]


def sph_harm_y(n, m, theta, phi, diff_n=None, n_max=None):
    """Spherical harmonics ``Y_n^m(theta, phi)`` (scipy's convention: ``theta`` the polar
    angle, ``phi`` the azimuth, the Condon-Shortley phase included), orthonormal on the sphere.
    ``n_max`` (static) bounds the degrees computed: larger ``n`` are clipped to it, as JAX's;
    by default the largest ``n`` given, which must then be known."""
    if diff_n is not None:
        raise NotImplementedError(
            "The 'diff_n' argument to jax.scipy.special.sph_harm_y is not supported.")
    if n_max is None:
        n_max = np.max(np.asarray(n))
    n_max = int(n_max)
    theta = jnp.asarray(theta)
    if theta.ndim == 0:
        theta = theta[None]
    theta, phi = inexact_operands(theta, phi)
    n, m, theta, phi = jnp.broadcast_arrays(jnp.asarray(n), jnp.asarray(m), theta, phi)
    n = jnp.clip(n, 0, n_max)
    order = jnp.abs(m)
    x = jnp.cos(theta)
    s = jnp.sqrt(jnp.maximum(1.0 - x * x, 0.0))     # sin(theta) >= 0 (theta read mod pi)
    # the normalised associated Legendre functions by their three-term recurrences: along the
    # diagonal P(k, k) from P(0, 0), then up each order k in degree l
    result = jnp.zeros_like(x)
    diagonal = jnp.full_like(x, 1.0 / np.sqrt(4.0 * np.pi))
    for k in range(n_max + 1):
        if k > 0:
            diagonal = -np.sqrt((2.0 * k + 1.0) / (2.0 * k)) * s * diagonal
        before, here = jnp.zeros_like(x), diagonal
        for l in range(k, n_max + 1):
            if l > k:
                a = np.sqrt((4.0 * l * l - 1.0) / (l * l - k * k))
                b = np.sqrt(((l - 1.0) ** 2 - k * k) / (4.0 * (l - 1.0) ** 2 - 1.0))
                before, here = here, a * (x * here - b * before)
            result = jnp.where((order == k) & (n == l), here, result)
    # Y_n^{-m} = (-1)^m conj(Y_n^m): the sign, then the phase exp(i m phi)
    sign = jnp.where((m < 0) & (order % 2 == 1), -1.0, 1.0).astype(result.dtype)
    complex_dtype = jnp.result_type(result.dtype, np.complex64)
    phase = jnp.exp(1j * (m.astype(phi.dtype) * phi)).astype(complex_dtype)
    return (sign * result).astype(complex_dtype) * phase


__all__ += ["sph_harm_y"]


__all__ += ["bernoulli", "dawsn", "exp1", "expi", "expn", "fresnel", "hyp1f1", "hyp2f1",
            "lpmn", "lpmn_values", "owens_t", "sici", "wofz"]
