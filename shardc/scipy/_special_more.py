"""More of ``jax.scipy.special``: the Faddeeva function and what follows from it (``wofz``,
``dawsn``, ``fresnel``), exponential and trigonometric integrals (``expi``, ``exp1``,
``expn``, ``sici``), hypergeometric functions (``hyp1f1``, ``hyp2f1``), Owen's T, Bernoulli
numbers and associated Legendre functions (``lpmn``, ``lpmn_values``).

Series and continued fractions run as masked loops over whole arrays (each element stops
contributing once its terms fall below its dtype's precision), so every function works under
``jit`` and ``vmap``; derivatives come from ``custom_jvp`` rules, as JAX's.

>>> special.expi(1.0)            # 1.8951...
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from compiler.custom_ad import custom_jvp
from ir.dtypes import complex_dtype, to_inexact
import shardc.lax as lax
import shardc.numpy as jnp
from shardc.scipy._special_base import gamma, horner, inexact_operands

__all__ = ["wofz", "dawsn", "fresnel", "expi", "exp1", "expn", "sici", "hyp1f1", "hyp2f1",
           "owens_t", "bernoulli", "lpmn", "lpmn_values"]

_EULER = 0.57721566490153286061


def _real_operand(name: str, x):
    """``x`` promoted to its inexact dtype, JAX's ValueError if that is complex."""
    (x,) = inexact_operands(x)
    if jnp.iscomplexobj(x):
        raise ValueError(f"{name} does not support complex-valued inputs.")
    return x


def _at_least_float32(compute, x):
    """``compute(x)``, in float32 for half-precision ``x`` and rounded back (as JAX)."""
    if np.dtype(x.dtype).itemsize >= 4:
        return compute(x)
    return jnp.astype(compute(jnp.astype(x, np.float32)), x.dtype)


def _eps(x):
    return float(np.finfo(np.dtype(x.dtype)).eps)


def _masked_series(step, state, total, done, max_terms: int, *, finite: bool = False):
    """Adds ``step``'s terms to ``total`` until every element's last term is below its
    precision (or ``max_terms``): ``step(k, state) -> (state, term)``; finished elements
    keep their state and total, as do those whose total turns NaN (or, with ``finite``,
    infinite). Returns the total and the final state."""
    eps = _eps(total)

    def cond(carry):
        k, _, _, done = carry
        return (k < max_terms) & jnp.any(~done)

    def body(carry):
        k, state, total, done = carry
        new_state, term = step(k, state)
        state = tuple(jnp.where(done, old, new) for old, new in zip(state, new_state))
        total = jnp.where(done, total, total + term)
        gone = ~jnp.isfinite(total) if finite else jnp.isnan(total)
        done = done | (jnp.abs(term) <= eps * jnp.abs(total)) | gone
        return k + 1, state, total, done

    start = (jnp.asarray(0, total.real.dtype), tuple(state), total, done)
    _, state, total, _ = lax.while_loop(cond, body, start)
    return total, state


# --- the Faddeeva function w(z) = exp(-z^2) erfc(-iz) -------------------------------------------

def _weideman_coefficients(n: int = 32):
    """Weideman's (1994) rational approximation of ``w``: the scale ``L`` and the ``n``
    polynomial coefficients (highest power first), the Fourier coefficients of
    ``exp(-t^2) (L^2 + t^2)`` on the nodes ``t = L tan(theta / 2)``."""
    m = 2 * n
    scale = np.sqrt(n / np.sqrt(2.0))
    t = scale * np.tan(np.arange(-m + 1, m) * np.pi / (2 * m))
    samples = np.concatenate([[0.0], np.exp(-t * t) * (scale * scale + t * t)])
    fourier = np.real(np.fft.fft(np.fft.fftshift(samples))) / (2 * m)
    return scale, tuple(fourier[1:n + 1][::-1])


_WOFZ_L, _WOFZ_C = _weideman_coefficients()


def _wofz_upper(z):
    """``w(z)`` for ``Im z >= 0``: ``2 p(Z) / (L - iz)^2 + 1 / (sqrt(pi) (L - iz))`` with
    ``Z = (L + iz) / (L - iz)``."""
    iz = 1j * z
    below = _WOFZ_L - iz
    p = horner(_WOFZ_C, (_WOFZ_L + iz) / below)
    return 2 * p / (below * below) + (1 / np.sqrt(np.pi)) / below


@custom_jvp
def _wofz(z):
    upper = z.imag >= 0
    mirrored = _wofz_upper(jnp.where(upper, z, -z))
    # the lower half plane by w(-z) = 2 exp(-z^2) - w(z)
    return jnp.where(upper, mirrored, 2 * jnp.exp(-z * z) - mirrored)


@_wofz.defjvp
def _wofz_jvp(primals, tangents):
    (z,), (t,) = primals, tangents
    w = _wofz(z)
    return w, t * (-2 * z * w + 2j / np.sqrt(np.pi))


def wofz(z):
    """The Faddeeva function ``w(z) = exp(-z^2) erfc(-iz)``, complex for any input (by
    Weideman's rational approximation with 32 terms, as JAX's; the lower half plane by
    reflection). Its derivative is ``-2 z w(z) + 2i / sqrt(pi)``.

    >>> wofz(1j)        # erfcx(1) = 0.4275...
    """
    z = jnp.asarray(z)
    return _wofz(jnp.astype(z, complex_dtype(to_inexact(z.dtype))))


def _as_complex(x):
    return lax.complex(x, jnp.zeros_like(x))


def _dawsn_value(x):
    # near 0 the Taylor series sum_k (-2)^k x^(2k+1) / (2k+1)!!, else sqrt(pi)/2 Im w(x);
    # far out 1 / (2x) (its next term is relatively 1 / (2 x^2))
    small = jnp.abs(x) < 0.25
    far = jnp.abs(x) > 1e6
    safe = jnp.where(small | far, jnp.ones_like(x), x)
    via_w = (np.sqrt(np.pi) / 2) * _wofz(_as_complex(safe)).imag
    x2 = x * x
    term, series = x, x
    for k in range(1, 12):
        term = term * (-2 * x2) / (2 * k + 1)
        series = series + term
    asymptotic = 0.5 / jnp.where(far, x, jnp.ones_like(x))
    return jnp.where(small, series, jnp.where(far, asymptotic, via_w)).astype(x.dtype)


@custom_jvp
def _dawsn(x):
    return _at_least_float32(_dawsn_value, x)


@_dawsn.defjvp
def _dawsn_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    value = _dawsn(x)
    return value, t * (1 - 2 * x * value)


def dawsn(x):
    """Dawson's integral ``exp(-x^2) int_0^x exp(t^2) dt`` (real ``x``); its derivative is
    ``1 - 2 x dawsn(x)``.

    >>> dawsn(1.0)      # 0.5380...
    """
    return _dawsn(_real_operand("dawsn", x))


def _cos_sin_half_pi_square(x):
    """``cos`` and ``sin`` of ``pi x^2 / 2``, exact in ``x^2``'s period 4: ``x`` split
    into halves whose products are exact (Dekker), each reduced mod 4 before scaling."""
    split = 4097.0 if np.dtype(x.dtype).itemsize <= 4 else 134217729.0
    scaled = x * split
    high = scaled - (scaled - x)
    low = x - high
    t = (jnp.remainder(high * high, 4.0) + jnp.remainder(2 * high * low, 4.0)
         + jnp.remainder(low * low, 4.0))
    angle = (np.pi / 2) * jnp.remainder(t, 4.0)
    return jnp.cos(angle), jnp.sin(angle)


def _fresnel_value(x):
    ax = jnp.abs(x)
    u = (np.pi / 2) * ax * ax
    # |x| < 1.6: the power series in u = pi x^2 / 2, terms u^k / k!
    term = jnp.ones_like(u)
    cos_sum, sin_sum = jnp.ones_like(u), jnp.zeros_like(u)
    for k in range(1, 36):
        term = term * u / k
        sign = 1.0 if (k // 2) % 2 == 0 else -1.0
        if k % 2:
            sin_sum = sin_sum + sign * term / (2 * k + 1)
        else:
            cos_sum = cos_sum + sign * term / (2 * k + 1)
    series_c, series_s = ax * cos_sum, ax * sin_sum
    # beyond: C + iS = (1 + i)/2 (1 - exp(i u) w((1 + i) sqrt(pi) x / 2))
    far = ax > 1e8
    far_ax = jnp.where((ax < 1.6) | far, jnp.full_like(ax, 2.0), ax)
    z = _as_complex(far_ax * (np.sqrt(np.pi) / 2)) * (1 + 1j)
    phase = lax.complex(*_cos_sin_half_pi_square(far_ax))
    both = (1 + 1j) / 2 * (1 - phase * _wofz(z))
    small = ax < 1.6
    c = jnp.where(small, series_c, jnp.where(far, 0.5, both.real))
    s = jnp.where(small, series_s, jnp.where(far, 0.5, both.imag))
    sign = jnp.sign(x)
    return (sign * s).astype(x.dtype), (sign * c).astype(x.dtype)


@custom_jvp
def _fresnel(x):
    if np.dtype(x.dtype).itemsize >= 4:
        return _fresnel_value(x)
    s, c = _fresnel_value(jnp.astype(x, np.float32))
    return jnp.astype(s, x.dtype), jnp.astype(c, x.dtype)


@_fresnel.defjvp
def _fresnel_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    cos, sin = _cos_sin_half_pi_square(x)
    return _fresnel(x), (t * sin, t * cos)


def fresnel(x):
    """The Fresnel integrals ``(S(x), C(x))``: the integrals of ``sin(pi t^2 / 2)`` and
    ``cos(pi t^2 / 2)`` from 0 to ``x`` (real ``x``; complex raises NotImplementedError, as
    JAX's).

    >>> fresnel(1.0)     # (0.4382..., 0.7798...)
    """
    (x,) = inexact_operands(x)
    if jnp.iscomplexobj(x):
        raise NotImplementedError("Support for complex-valued inputs is not implemented yet.")
    return _fresnel(x)


# --- exponential integrals ----------------------------------------------------------------------

def _expn_series(n, x):
    """``E_n(x)`` for ``0 < x <= 1`` and integer ``n >= 1``:
    ``(-x)^(n-1) / (n-1)! (psi(n) - log x) - sum_{k != n-1} (-x)^k / ((k - n + 1) k!)``."""
    def step(k, carry):
        power, total = carry                   # (-x)^k / k!
        kk = jnp.asarray(k, x.dtype)
        skip = kk == n - 1
        term = -power / jnp.where(skip, jnp.ones_like(n), kk - n + 1)
        total = total + jnp.where(skip, jnp.zeros_like(x), term)
        return power * -x / (kk + 1), total

    # x <= 1: 30 terms reach 1/30! (below float64's precision)
    _, total = lax.fori_loop(0, 30, step, (jnp.ones_like(x), jnp.zeros_like(x)))
    sign = jnp.where(jnp.remainder(n - 1, 2) == 0, 1.0, -1.0).astype(x.dtype)
    lead = sign * jnp.exp((n - 1) * jnp.log(x) - lax.lgamma(n))
    return lead * (lax.digamma(n) - jnp.log(x)) + total


def _expn_fraction(n, x, steps: int = 80):
    """``E_n(x)`` for ``x > 1`` by its continued fraction
    ``exp(-x) / (x + n - 1 n / (x + n + 2 - 2 (n + 1) / (x + n + 4 - ...)))``, modified
    Lentz."""
    tiny = jnp.asarray(np.finfo(np.dtype(x.dtype)).tiny, x.dtype) * 1e4

    def step(i, carry):
        b, c, d, h = carry
        i = jnp.asarray(i, x.dtype) + 1
        a = -i * (n - 1 + i)
        b = b + 2
        d = a * d + b
        d = 1 / jnp.where(jnp.abs(d) < tiny, tiny, d)
        c = b + a / c
        c = jnp.where(jnp.abs(c) < tiny, tiny, c)
        return b, c, d, h * c * d

    b = x + n
    start = (b, jnp.full_like(x, 1 / tiny), 1 / b, 1 / b)
    h = lax.fori_loop(0, steps, step, start)[3]
    return h * jnp.exp(-x)


def _expn_value(n, x):
    negative = (n < 0) | (x < 0)
    at_zero = x == 0
    finite = ~negative & ~at_zero & (n > 0) & (x < jnp.inf)
    safe_n = jnp.where(finite, n, jnp.ones_like(n))
    big = finite & (x > 1)
    near = finite & (x <= 1)
    series = _expn_series(safe_n, jnp.where(near, x, jnp.ones_like(x)))
    fraction = _expn_fraction(safe_n, jnp.where(big, x, jnp.full_like(x, 2.0)))
    safe_x = jnp.where(at_zero, jnp.ones_like(x), x)
    n_one = jnp.where(n == 1, jnp.full_like(n, 2.0), n)
    return jnp.select(
        [negative | jnp.isnan(x) | jnp.isnan(n), at_zero & (n < 2), at_zero, n == 0,
         x == jnp.inf, big],
        [jnp.full_like(x, jnp.nan), jnp.full_like(x, jnp.inf), 1 / (n_one - 1),
         jnp.exp(-safe_x) / safe_x, jnp.zeros_like(x), fraction],
        series).astype(x.dtype)


@custom_jvp
def _expn(n, x):
    return _expn_value(n, x)


@_expn.defjvp
def _expn_jvp(primals, tangents):
    # JAX's rule: d/dx E_n(x) = -E_{n-1}(x); n is not differentiated
    (n, x), (_, t) = primals, tangents
    return _expn(n, x), -t * _expn(n - 1, x)


def expn(n, x):
    """The generalized exponential integral ``E_n(x) = int_1^inf exp(-x t) / t^n dt`` for
    integer ``n >= 0`` and ``x >= 0`` (NaN for negative ``n`` or ``x``, inf at ``x = 0`` for
    ``n < 2``); differentiable in ``x`` (``-E_{n-1}(x)``).

    >>> expn(2, 1.0)     # 0.1485...
    """
    n, x = inexact_operands(n, x)
    if jnp.iscomplexobj(x):
        raise ValueError("expn does not support complex-valued inputs.")
    n, x = jnp.broadcast_arrays(n, x)
    return _expn(n, x)


def exp1(x):
    """The exponential integral ``E_1(x) = int_x^inf exp(-t) / t dt``: ``expn(1, x)``.

    >>> exp1(1.0)        # 0.2193...
    """
    x = _real_operand("exp1", x)
    return _expn(jnp.ones_like(x), x)


def _expi_positive(x):
    """``Ei(x)`` for ``x > 0``: ``gamma + log x + sum x^k / (k k!)`` up to 40 (every term
    positive: no cancellation), ``exp(x) / x sum k! / x^k`` beyond."""
    low = x <= 40
    xs = jnp.where(low, x, jnp.ones_like(x))

    def series_step(k, carry):
        (power,) = carry                       # x^k / k!
        kk = jnp.asarray(k, x.dtype) + 1
        power = power * xs / kk
        return (power,), power / kk

    series, _ = _masked_series(series_step, (jnp.ones_like(x),), jnp.zeros_like(x),
                               jnp.zeros(x.shape, bool), 200)
    series = _EULER + jnp.log(xs) + series
    xl = jnp.where(low, jnp.full_like(x, 50.0), x)
    term, tail = jnp.ones_like(x), jnp.ones_like(x)
    for k in range(1, 41):
        term = term * k / xl
        tail = tail + term
    asymptotic = jnp.exp(xl) / xl * tail
    return jnp.where(low, series, jnp.where(x == jnp.inf, jnp.inf, asymptotic))


@custom_jvp
def _expi(x):
    positive = x > 0
    ei = _expi_positive(jnp.where(positive, x, jnp.ones_like(x)))
    e1 = _expn_value(jnp.ones_like(x), jnp.where(positive, jnp.ones_like(x), -x))
    # at 0 NaN, as JAX's (scipy's limit is -inf)
    return jnp.where(positive, ei, jnp.where(x == 0, jnp.nan, -e1)).astype(x.dtype)


@_expi.defjvp
def _expi_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return _expi(x), jnp.exp(x) / x * t


def expi(x):
    """The exponential integral ``Ei(x)``, the principal value of
    ``int_{-inf}^x exp(t) / t dt`` (``-E_1(-x)`` for negative ``x``); its
    derivative is ``exp(x) / x``. NaN at 0, as JAX's (scipy gives the limit -inf).

    >>> expi(1.0)        # 1.8951...
    """
    return _expi(_real_operand("expi", x))


def _sici_series(x):
    """``Si`` and ``Ci - gamma - log x`` for ``0 <= x <= 4`` by their power series."""
    term = jnp.ones_like(x)                    # x^j / j!, j = 0 .. 39
    si, ci = jnp.zeros_like(x), jnp.zeros_like(x)
    for j in range(1, 40):
        term = term * x / j
        sign = 1.0 if ((j - 1) // 2) % 2 == 0 else -1.0
        if j % 2:
            si = si + sign * term / j
        else:
            ci = ci - sign * term / j
    return si, ci


def _sici_fraction(x, steps: int = 80):
    """``E_1(ix) = -Ci(x) + i (Si(x) - pi/2)`` for ``x > 4`` by ``E_1``'s continued fraction
    at the imaginary argument."""
    z = _as_complex(jnp.zeros_like(x)) + 1j * x
    tiny = np.finfo(np.dtype(x.dtype)).tiny * 1e4

    def fix(v):
        return jnp.where(jnp.abs(v) < tiny, tiny + 0j, v)

    def step(i, carry):
        b, c, d, h = carry
        i = jnp.asarray(i, x.dtype) + 1
        a = -i * i
        b = b + 2
        d = 1 / fix(a * d + b)
        c = fix(b + a / c)
        return b, c, d, h * c * d

    b = z + 1
    start = (b, jnp.full_like(z, 1 / tiny), 1 / b, 1 / b)
    h = lax.fori_loop(0, steps, step, start)[3]
    return h * lax.complex(jnp.cos(x), -jnp.sin(x))


@custom_jvp
def _sici(x):
    ax = jnp.abs(x)
    near = ax <= 4
    inf = ax == jnp.inf
    xn = jnp.where(near, ax, jnp.ones_like(ax))
    si_near, ci_near = _sici_series(xn)
    ci_near = ci_near + _EULER + jnp.log(jnp.where(near, ax, jnp.ones_like(ax)))
    ci_near = jnp.where(ax == 0, -jnp.inf, ci_near)
    e1 = _sici_fraction(jnp.where(near | inf, jnp.full_like(ax, 8.0), ax))
    si = jnp.where(near, si_near, jnp.where(inf, np.pi / 2, np.pi / 2 + e1.imag))
    ci = jnp.where(near, ci_near, jnp.where(inf, 0.0, -e1.real))
    si = jnp.sign(x) * si
    ci = jnp.where(x == -jnp.inf, jnp.nan, ci)
    return si.astype(x.dtype), ci.astype(x.dtype)


@_sici.defjvp
def _sici_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return _sici(x), (t * jnp.sinc(x / np.pi), t * jnp.cos(x) / x)


def sici(x):
    """The sine and cosine integrals ``(Si(x), Ci(x))``: ``int_0^x sin t / t dt`` and
    ``gamma + log|x| + int_0^x (cos t - 1) / t dt`` (``Ci`` even, as JAX's and scipy's real
    branch; NaN at -inf). Derivatives ``sin x / x`` and ``cos x / x``.

    >>> sici(1.0)        # (0.9460..., 0.3374...)
    """
    (x,) = inexact_operands(x)
    if jnp.iscomplexobj(x):
        raise ValueError(f"Argument `x` to sici must be real-valued. Got dtype {x.dtype}.")
    return _sici(x)


# --- hypergeometric functions --------------------------------------------------------------------

_MAX_TERMS = 5000


def _hyp1f1_series(a, b, x):
    """``1F1(a; b; x)`` and its ``a`` and ``b`` derivatives by the Taylor series: term ``k``
    is ``(a)_k / (b)_k x^k / k!``, its derivatives that times ``sum_{j<k} 1/(a+j)`` and
    ``-sum_{j<k} 1/(b+j)``."""
    def step(k, carry):
        term, da_sum, db_sum, da, db = carry
        kk = jnp.asarray(k, x.dtype)
        da_sum, db_sum = da_sum + 1 / (a + kk), db_sum - 1 / (b + kk)
        term = term * (a + kk) / (b + kk) * x / (kk + 1)
        return (term, da_sum, db_sum, da + term * da_sum, db + term * db_sum), term

    return _series_with_parts(step, x, 5)


def _series_with_parts(step, x, width: int):
    """Sums ``step``'s terms from 1 (masked), returning the total and the carried parts."""
    zeros, ones = jnp.zeros_like(x), jnp.ones_like(x)
    state = (ones,) + (zeros,) * (width - 1)
    return _masked_series(step, state, ones, jnp.zeros(x.shape, bool), _MAX_TERMS,
                          finite=True)


def _hyp1f1_asymptotic(a, b, x):
    """``1F1(a; b; x)`` for large ``|x|``: ``Gamma(b)/Gamma(a) e^x x^(a-b)
    sum (b-a)_k (1-a)_k / (k! x^k)`` for ``x > 0``, through Kummer's
    ``e^x 1F1(b-a; b; -x)`` for ``x < 0``."""
    positive = x > 0
    p, q = jnp.where(positive, b - a, a), jnp.where(positive, 1 - a, 1 + a - b)
    y = jnp.abs(x)
    term, total = jnp.ones_like(x), jnp.ones_like(x)
    for k in range(40):
        nxt = term * (p + k) * (q + k) / ((k + 1) * y)
        grows = jnp.abs(nxt) > jnp.abs(term)
        term = jnp.where(grows, jnp.zeros_like(term), nxt)
        total = total + term
    above = gamma(b) / gamma(a) * jnp.exp(x) * y ** (a - b)
    below = gamma(b) / gamma(b - a) * y ** (-a)
    return jnp.where(positive, above, below) * total


def _hyp1f1_value(a, b, x):
    far = jnp.abs(x) >= 100
    series = _hyp1f1_series(a, b, jnp.where(far, jnp.zeros_like(x), x))[0]
    asymptotic = _hyp1f1_asymptotic(a, b, jnp.where(far, x, jnp.full_like(x, 100.0)))
    value = jnp.where(far, asymptotic, series)
    return jnp.select([a == 0, a == b, b == 0],
                      [jnp.ones_like(x), jnp.exp(x), jnp.full_like(x, jnp.inf)], value)


@custom_jvp
def _hyp1f1(a, b, x):
    return _hyp1f1_value(a, b, x)


@_hyp1f1.defjvp
def _hyp1f1_jvp(primals, tangents):
    (a, b, x), (ta, tb, tx) = primals, tangents
    _, (_, _, _, da, db) = _hyp1f1_series(a, b, x)
    dx = a / b * _hyp1f1(a + 1, b + 1, x)
    return _hyp1f1(a, b, x), da * ta + db * tb + dx * tx


def hyp1f1(a, b, x):
    """Kummer's confluent hypergeometric function ``1F1(a; b; x) = sum (a)_k / (b)_k
    x^k / k!`` (real inputs; by the series for ``|x| < 100``, the asymptotic expansion
    beyond; 1 at ``a = 0``, ``exp(x)`` at ``a = b``, inf at ``b = 0``); differentiable in
    all three, as JAX's.

    >>> hyp1f1(1.0, 2.0, 1.0)    # e - 1 = 1.7182...
    """
    a, b, x = inexact_operands(a, b, x)
    if jnp.iscomplexobj(x):
        raise ValueError("hyp1f1 does not support complex-valued inputs.")
    return _hyp1f1(*jnp.broadcast_arrays(a, b, x))


def _hyp2f1_series(a, b, c, x):
    """``2F1(a, b; c; x)`` and its ``a``, ``b``, ``c`` derivatives by the Taylor series
    (which ends by itself where ``a`` or ``b`` is a non-positive integer)."""
    def step(k, carry):
        term, sa, sb, sc, da, db, dc = carry
        kk = jnp.asarray(k, x.dtype)
        sa, sb, sc = sa + 1 / (a + kk), sb + 1 / (b + kk), sc - 1 / (c + kk)
        term = term * (a + kk) * (b + kk) / ((c + kk) * (kk + 1)) * x
        return (term, sa, sb, sc, da + term * sa, db + term * sb, dc + term * sc), term

    return _series_with_parts(step, x, 7)


def _hyp2f1_near_one(a, b, c, x):
    """``2F1`` for ``x`` near 1 and non-integer ``d = c - a - b`` by the transformation to
    ``1 - x``: ``G(c)G(d)/(G(c-a)G(c-b)) F(a, b; 1-d; 1-x)
    + (1-x)^d G(c)G(-d)/(G(a)G(b)) F(c-a, c-b; 1+d; 1-x)``."""
    d, s = c - a - b, 1 - x
    first = gamma(c) * gamma(d) / (gamma(c - a) * gamma(c - b))
    second = gamma(c) * gamma(-d) / (gamma(a) * gamma(b))
    return (first * _hyp2f1_series(a, b, 1 - d, s)[0]
            + s ** d * second * _hyp2f1_series(c - a, c - b, 1 + d, s)[0])


def _hyp2f1_general(a, b, c, x):
    """``2F1`` for ``0 <= x < 1``: the series, or near 1 (where it converges slowly) the
    ``1 - x`` transformation unless ``d`` is an integer or the series ends."""
    tolerance = 50 * _eps(x)
    d = c - a - b
    ends = ((a <= 0) & (jnp.abs(a - jnp.round(a)) < tolerance)) \
        | ((b <= 0) & (jnp.abs(b - jnp.round(b)) < tolerance))
    transform = (x > 0.9) & ~ends & (jnp.abs(d - jnp.round(d)) >= tolerance)
    series = _hyp2f1_series(a, b, c, jnp.where(transform, jnp.zeros_like(x), x))[0]
    near = _hyp2f1_near_one(a, b, c, jnp.where(transform, x, jnp.ones_like(x)))
    return jnp.where(transform, near, series)


def _hyp2f1_value(a, b, c, x):
    tolerance = 50 * _eps(x)
    d, s = c - a - b, 1 - x
    pole = (c == 0) | ((c < 0) & (jnp.remainder(c, 1) == 0))
    euler = (d <= -1) & ~((jnp.abs(d - jnp.round(d)) >= tolerance) & (s < 0))
    conditions = [(x == 0) | (((a == 0) | (b == 0)) & (c != 0)), pole, euler,
                  (d <= 0) & (x == 1), (x < 1) & (b == c), (x < 1) & (a == c), x > 1,
                  x == 1]
    earlier = conditions[0] | pole
    uses_euler = euler & ~earlier
    uses_series = ~jnp.any(jnp.stack(conditions), axis=0)
    # each series sees x only where its result is kept (elsewhere 0, which ends it at once)
    zeros = jnp.zeros_like(x)
    # Euler's transformation (1-x)^d F(c-a, c-b; c; x) where d <= -1
    euler_value = s ** d * _hyp2f1_general(c - a, c - b, c, jnp.where(uses_euler, x, zeros))
    gauss = gamma(c) * gamma(d) / (gamma(c - a) * gamma(c - b))
    choices = [jnp.ones_like(x), jnp.full_like(x, jnp.inf), euler_value,
               jnp.full_like(x, jnp.inf), s ** (-a), s ** (-b), jnp.full_like(x, jnp.inf),
               gauss]
    return jnp.select(conditions, choices,
                      _hyp2f1_general(a, b, c, jnp.where(uses_series, x, zeros)))


@custom_jvp
def _hyp2f1(a, b, c, x):
    return _hyp2f1_value(a, b, c, x)


@_hyp2f1.defjvp
def _hyp2f1_jvp(primals, tangents):
    (a, b, c, x), (ta, tb, tc, tx) = primals, tangents
    _, (_, _, _, _, da, db, dc) = _hyp2f1_series(a, b, c, x)
    dx = a * b / c * _hyp2f1(a + 1, b + 1, c + 1, x)
    return _hyp2f1(a, b, c, x), da * ta + db * tb + dc * tc + dx * tx


def hyp2f1(a, b, c, x):
    """Gauss' hypergeometric function ``2F1(a, b; c; x) = sum (a)_k (b)_k / (c)_k
    x^k / k!`` for real arguments and ``x <= 1`` (inf for ``x > 1`` and at the poles in
    ``c``, as JAX's); differentiable in all four (by the series, as JAX's).

    >>> hyp2f1(1.0, 1.0, 2.0, 0.5)   # -log(1 - x) / x = 1.3862...
    """
    a, b, c, x = inexact_operands(a, b, c, x)
    return _hyp2f1(*jnp.broadcast_arrays(a, b, c, x))


# --- Owen's T ----------------------------------------------------------------------------------

def _gauss_legendre_unit(n: int):
    """Gauss-Legendre nodes and weights on [0, 1]."""
    nodes, weights = np.polynomial.legendre.leggauss(n)
    return (nodes + 1) / 2, weights / 2


_OWENS_NODES, _OWENS_WEIGHTS = _gauss_legendre_unit(24)


def _owens_t_integral(h, a):
    """``a / (2 pi) int_0^1 exp(-h^2 (1 + a^2 t^2) / 2) / (1 + a^2 t^2) dt``, ``|a| <= 1``."""
    total = jnp.zeros_like(h)
    for node, weight in zip(_OWENS_NODES, _OWENS_WEIGHTS):
        r = 1 + a * a * node * node
        total = total + weight * jnp.exp(-0.5 * h * h * r) / r
    return a * total / (2 * np.pi)


@custom_jvp
def _owens_t(h, a):
    h, abs_a = jnp.abs(h), jnp.abs(a)
    small = abs_a <= 1
    # |a| > 1: T(h, a) = (p + q)/2 - p q - T(a h, 1/a) with p, q the upper tails at h, a h
    inner_a = jnp.where(small, abs_a, 1 / jnp.where(small, jnp.ones_like(a), abs_a))
    inner_h = jnp.where(small, h, abs_a * h)
    inner = _owens_t_integral(jnp.where(jnp.isfinite(inner_h), inner_h, 0.0), inner_a)
    inner = jnp.where(inner_h == jnp.inf, 0.0, inner)
    tail_h, tail_ah = 0.5 * lax.erfc(h / np.sqrt(2)), 0.5 * lax.erfc(abs_a * h / np.sqrt(2))
    flipped = 0.5 * (tail_h + tail_ah) - tail_h * tail_ah - inner
    value = jnp.where(small, inner, flipped)
    value = jnp.where(h == 0, jnp.arctan(abs_a) / (2 * np.pi), value)
    value = jnp.sign(a) * value
    return jnp.where(jnp.isnan(a) | jnp.isnan(h), jnp.nan, value).astype(h.dtype)


@_owens_t.defjvp
def _owens_t_jvp(primals, tangents):
    (h, a), (th, ta) = primals, tangents
    dh = -jnp.exp(-0.5 * h * h) * lax.erf(a * h / np.sqrt(2)) / (2 * np.sqrt(2 * np.pi))
    da = jnp.exp(-0.5 * (a * a + 1) * h * h) / (2 * np.pi * (a * a + 1))
    return _owens_t(h, a), (dh * th + da * ta).astype(h.dtype)


def owens_t(h, a):
    """Owen's T function ``T(h, a) = 1/(2 pi) int_0^a exp(-h^2 (1 + x^2) / 2) / (1 + x^2)
    dx`` (by 24-point Gauss-Legendre quadrature, ``|a| > 1`` folded onto ``1/|a|``);
    derivatives as JAX's.

    >>> owens_t(0.0, 1.0)    # 1/8
    """
    h, a = inexact_operands(h, a)
    return _owens_t(*jnp.broadcast_arrays(h, a))


# --- Bernoulli numbers and associated Legendre functions ----------------------------------------

def _bernoulli_exact(count: int):
    """``B_0 .. B_{count-1}`` as fractions (``B_1 = -1/2``), by the recurrence
    ``sum_{j<=m} C(m+1, j) B_j = 0``."""
    values = [Fraction(1)]
    for m in range(1, count):
        values.append(-sum(math.comb(m + 1, j) * values[j] for j in range(m)) / (m + 1))
    return values


def bernoulli(n: int):
    """The Bernoulli numbers ``B_0 .. B_n`` (``B_1 = -1/2``) in the default float dtype:
    exact up to ``B_20``, beyond by ``B_2k = (-1)^(k+1) 2 (2k)! zeta(2k) / (2 pi)^(2k)``.
    ``n`` must be a concrete non-negative integer.

    >>> bernoulli(4)     # [1, -1/2, 1/6, 0, -1/30]
    """
    n = int(np.asarray(n).__index__()) if not isinstance(n, int) else n
    if n < 0:
        raise ValueError("n must be a non-negative integer.")
    values = np.zeros(n + 1)
    exact = _bernoulli_exact(min(n + 1, 21))
    values[:len(exact)] = [float(v) for v in exact]
    powers = np.arange(1, 60, dtype=np.float64)
    with np.errstate(over="ignore"):
        for m in range(22, n + 1, 2):
            zeta = np.sum(powers ** -float(m))
            log_size = math.lgamma(m + 1) - m * math.log(2 * math.pi)
            sign = 1.0 if (m // 2) % 2 == 1 else -1.0
            values[m] = sign * 2 * zeta * np.exp(log_size)
    dtype = jnp.zeros(0).dtype
    with np.errstate(over="ignore"):
        return jnp.asarray(values.astype(dtype))


def _legendre_rows(l_max: int, x, normalized: bool):
    """``P_l^m(x)`` for ``0 <= m <= l <= l_max`` (Condon-Shortley phase), as a list of rows
    (one per order ``m``) of lists (one per degree): up the diagonal from ``P_0^0``, then up
    each order in degree by the three-term recurrence."""
    s = jnp.sqrt(jnp.maximum(1 - x * x, 0.0))
    diagonal = jnp.full_like(x, 0.5 / np.sqrt(np.pi) if normalized else 1.0)
    zeros = jnp.zeros_like(x)
    rows = []
    for m in range(l_max + 1):
        if m > 0:
            factor = np.sqrt(1 + 0.5 / m) if normalized else 2 * m - 1
            diagonal = -factor * s * diagonal
        row = [zeros] * m + [diagonal]
        before, here = zeros, diagonal
        for l in range(m + 1, l_max + 1):
            if normalized:
                a = np.sqrt((4.0 * l * l - 1) / (l * l - m * m))
                b = np.sqrt(((l - 1.0) ** 2 - m * m) / (4.0 * (l - 1.0) ** 2 - 1))
                before, here = here, a * (x * here - b * before)
            else:
                before, here = here, ((2 * l - 1) * x * here - (l + m - 1) * before) / (l - m)
            row.append(here)
        rows.append(row)
    return rows


def _legendre_operand(m, n, z):
    z = jnp.asarray(z)
    if z.dtype not in (np.float32, np.float64):
        raise TypeError(f"z.dtype={z.dtype} is not supported, see docstring for supported "
                        "types.")
    if z.ndim != 1:
        raise ValueError("z must be a 1D array.")
    m, n = int(m), int(n)
    if m != n:
        raise NotImplementedError("Computations for m!=n are not yet supported.")
    return n, z


def lpmn_values(m: int, n: int, z, is_normalized: bool):
    """The associated Legendre functions of the first kind ``P_l^k(z)`` (Condon-Shortley
    phase; with ``is_normalized`` scaled to be orthonormal on the sphere) for orders and
    degrees ``0 .. n``: an array of shape ``(m + 1, n + 1, len(z))`` indexed
    ``[order, degree, point]``. ``z`` is a 1-D float32 or float64 array; only ``m == n``.

    >>> lpmn_values(1, 1, jnp.array([0.5]), False)[1, 1]    # -sqrt(3)/2
    """
    l_max, z = _legendre_operand(m, n, z)
    rows = _legendre_rows(l_max, z, bool(is_normalized))
    return jnp.stack([jnp.stack(row) for row in rows])


def lpmn(m: int, n: int, z):
    """``lpmn_values(m, n, z, False)`` and the derivatives in ``z``,
    ``(l z P_l^k - (l + k) P_{l-1}^k) / (z^2 - 1)`` (so inf or NaN at ``|z| = 1``).

    >>> lpmn(1, 1, jnp.array([0.5]))[1][0, 1]     # d/dz z = 1
    """
    l_max, z = _legendre_operand(m, n, z)
    rows = _legendre_rows(l_max, z, False)
    zeros = jnp.zeros_like(z)
    derivative_rows = []
    for order, row in enumerate(rows):
        derivatives = []
        for l, value in enumerate(row):
            below = row[l - 1] if l >= 1 else zeros
            derivatives.append((l * z * value - (l + order) * below) / (z * z - 1))
        derivative_rows.append(derivatives)
    return (jnp.stack([jnp.stack(r) for r in rows]),
            jnp.stack([jnp.stack(r) for r in derivative_rows]))
