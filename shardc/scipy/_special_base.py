"""The helpers and the gamma function ``shardc.scipy.special`` and the functions of
``shardc.scipy._special_more`` both build on: operands promoted to an inexact dtype, Horner's
rule with constant coefficients, and Gamma on the reals (by its sign and ``lgamma``) and the
complex plane (by Stirling's series)."""
from __future__ import annotations

import numpy as np

from ir.dtypes import to_inexact
import shardc.lax as lax
import shardc.numpy as jnp
from shardc.numpy._core import weakly_typed_like

__all__ = ["complex_loggamma", "gamma", "gammasgn", "horner", "inexact_operands"]


def inexact_operands(*xs):
    """``xs`` as arrays of the floating dtype they promote to (``stats.norm`` shares it)."""
    arrays = [jnp.asarray(x) if not hasattr(x, "dtype") else x for x in xs]
    dtype = to_inexact(jnp.result_type(*xs))     # JAX's promote_args_inexact
    # weakly typed where every operand is (Python numbers), as JAX's promote_args_inexact
    return [weakly_typed_like(jnp.astype(x, dtype), *xs) for x in arrays]


def horner(coefficients, x):
    """``jnp.polyval`` with constant coefficients (highest power first), from 0 as its."""
    dtype = x.dtype.type
    out = jnp.zeros_like(x)
    for c in coefficients:
        out = out * x + dtype(c)
    return out


def gammasgn(x):
    """The sign of ``Gamma(x)``, by JAX's rule: NaN at the negative integers, -inf and NaN;
    -1 on the negative axis where ``floor(x)`` is odd and at ``-0.0``; else 1."""
    (x,) = inexact_operands(x)
    if jnp.iscomplexobj(x):
        raise ValueError("gammasgn does not support complex-valued inputs.")
    floor = jnp.floor(x)
    negative = x < 0
    return jnp.select(
        [(negative & (x == floor)) | jnp.isnan(x),
         (negative & (jnp.remainder(floor, 2) != 0)) | ((x == 0) & jnp.signbit(x))],
        [jnp.full_like(x, jnp.nan), jnp.full_like(x, -1.0)],
        jnp.ones_like(x)).astype(x.dtype)


def gamma(x):
    """``Gamma(x)``: ``gammasgn(x) * exp(gammaln(x))``; for complex ``x``
    ``exp(loggamma(x))``, ``nan+nanj`` at the poles."""
    (x,) = inexact_operands(x)
    if jnp.iscomplexobj(x):
        return _complex_gamma(x)
    return gammasgn(x) * jnp.exp(lax.lgamma(x))


def _complex_poles(z):
    """Where complex ``z`` is a pole of Gamma (0, -1, -2, ...) or NaN."""
    re = z.real
    return ((z.imag == 0) & (re == jnp.floor(re)) & (re <= 0)) | jnp.isnan(z)


def complex_loggamma(z):
    """The principal branch of ``log Gamma(z)`` (its one cut on the negative real axis):
    shifted right by ``log Gamma(z) = log Gamma(z + n) - sum_{k<n} log(z + k)`` until
    ``Re z >= 10``, where Stirling's series with five terms is below float64's precision."""
    bad = _complex_poles(z)
    z = jnp.where(bad, jnp.ones_like(z), z)
    shifts = jnp.maximum(jnp.ceil(10.0 - z.real), 0.0)

    def cond(carry):
        k, _ = carry
        return jnp.any(k < shifts)

    def body(carry):
        k, logs = carry
        term = jnp.log(jnp.where(k < shifts, z + k, jnp.ones_like(z)))
        return k + 1, logs + term

    _, logs = lax.while_loop(cond, body, (jnp.asarray(0.0, shifts.dtype), jnp.zeros_like(z)))
    w = z + shifts
    inv = 1 / w
    inv2 = inv * inv
    tail = inv * (1 / 12 + inv2 * (-1 / 360 + inv2 * (1 / 1260 + inv2 * (-1 / 1680
                                                                          + inv2 / 1188))))
    stirling = (w - 0.5) * jnp.log(w) - w + 0.5 * np.log(2 * np.pi) + tail
    return jnp.where(bad, jnp.asarray(complex(np.nan, np.nan), z.dtype), stirling - logs)


def _complex_gamma(z):
    return jnp.exp(complex_loggamma(z))
