"""L-BFGS (Algorithm 7.5 of Nocedal and Wright, *Numerical Optimization*, 1999, pp. 176-185),
also for complex variables (Sorber, Van Barel and De Lathauwer, SIAM J. Optim. 22(3), 2012),
as one ``lax.while_loop``, step for step as JAX's ``jax._src.scipy.optimize._lbfgs``."""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

import shardc.lax as lax
import shardc.numpy as jnp
from shardc.scipy.optimize._dot import highest_dot
from compiler.autodiff import value_and_grad
from shardc.scipy.optimize.line_search import line_search

__all__ = ["LBFGSResults"]


class LBFGSResults(NamedTuple):
    """The state of L-BFGS: ``converged`` (gradient norm below ``gtol``), ``failed`` (a
    stopping status other than convergence), ``k`` (iterations), ``nfev``/``ngev``
    (function and gradient evaluations), ``x_k``, ``f_k``, ``g_k`` (the iterate, value and
    gradient), the last ``maxcor`` steps, gradient changes and their ``1 / (y . s)``
    (oldest first), ``gamma`` (the initial Hessian scale), ``status`` (0 converged, 1 out
    of iterations, 2 out of function evaluations, 3 out of gradient evaluations, 4 less
    progress than ``ftol``, 5 line search failed) and ``ls_status`` (the last line
    search's)."""
    converged: Any
    failed: Any
    k: Any
    nfev: Any
    ngev: Any
    x_k: Any
    f_k: Any
    g_k: Any
    s_history: Any
    y_history: Any
    rho_history: Any
    gamma: Any
    status: Any
    ls_status: Any


def minimize_lbfgs(fun, x0, maxiter=None, norm=np.inf, maxcor=10, ftol=2.220446049250313e-09,
                    gtol=1e-05, maxfun=None, maxgrad=None, maxls=20):
    """Minimize ``fun`` from ``x0`` by L-BFGS with a strong Wolfe line search.

    Args:
      fun: real scalar function of a 1-D (real or complex) array, differentiable.
      x0: the starting point.
      maxiter, maxfun, maxgrad: limits on iterations, function and gradient evaluations
        (with none given, ``maxiter`` is ``200 * len(x0)``).
      norm: the order of the gradient norm that ``gtol`` bounds (default max-abs).
      maxcor: how many past steps the Hessian estimate keeps.
      ftol: stop once an iteration lowers ``fun`` by less than this.
      gtol: converged once ``norm(grad) < gtol``.
      maxls: bracketing steps each line search may take.

    Returns:
      The final ``LBFGSResults``.

    >>> import shardc.numpy as jnp
    >>> res = minimize_lbfgs(lambda x: jnp.sum((x - 2.) ** 2), jnp.zeros(3))
    >>> [round(float(v), 4) for v in res.x_k], int(res.status)
    ([2.0, 2.0, 2.0], 0)
    """
    d = len(x0)
    dtype = jnp.result_type(x0)
    if maxiter is None and maxfun is None and maxgrad is None:
        maxiter = d * 200
    maxiter, maxfun, maxgrad = (np.inf if limit is None else limit
                                for limit in (maxiter, maxfun, maxgrad))
    f_0, g_0 = value_and_grad(fun)(x0)
    start = LBFGSResults(
        converged=jnp.array(False, dtype=bool), failed=jnp.array(False, dtype=bool),
        k=0, nfev=1, ngev=1, x_k=x0, f_k=f_0, g_k=g_0,
        s_history=jnp.zeros((maxcor, d), dtype=dtype),
        y_history=jnp.zeros((maxcor, d), dtype=dtype),
        rho_history=jnp.zeros((maxcor,), dtype=dtype),
        gamma=1., status=0, ls_status=0)

    def going(state: LBFGSResults):
        return ~state.converged & ~state.failed

    def step(state: LBFGSResults) -> LBFGSResults:
        p_k = _two_loop_recursion(state)
        found = line_search(f=fun, xk=state.x_k, pk=p_k, old_fval=state.f_k,
                            gfk=state.g_k, maxiter=maxls)
        s_k = jnp.asarray(found.a_k).astype(p_k.dtype) * p_k
        y_k = found.g_k - state.g_k
        curvature = jnp.real(highest_dot(y_k, s_k))
        # the checks are of the state before this step; later ones take precedence
        status = jnp.array(0)
        status = jnp.where(state.f_k - found.f_k < ftol, 4, status)
        status = jnp.where(state.ngev >= maxgrad, 3, status)
        status = jnp.where(state.nfev >= maxfun, 2, status)
        status = jnp.where(state.k >= maxiter, 1, status)
        status = jnp.where(found.failed, 5, status)
        converged = jnp.linalg.norm(found.g_k, ord=norm) < gtol
        gamma = curvature / jnp.real(highest_dot(jnp.conj(y_k), y_k))
        return state._replace(
            converged=converged,
            failed=(status > 0) & ~converged,
            k=state.k + 1,
            nfev=state.nfev + found.nfev,
            ngev=state.ngev + found.ngev,
            x_k=(state.x_k + s_k).astype(state.x_k.dtype),
            f_k=found.f_k.astype(state.f_k.dtype),
            g_k=found.g_k.astype(state.g_k.dtype),
            s_history=_pushed(state.s_history, s_k),
            y_history=_pushed(state.y_history, y_k),
            rho_history=_pushed(state.rho_history,
                                jnp.reciprocal(curvature).astype(y_k.dtype)),
            gamma=gamma.astype(state.g_k.dtype),
            status=jnp.where(converged, 0, status),
            ls_status=found.status)

    return lax.while_loop(going, step, start)


def _pushed(history, new):
    """``history`` (oldest first) with its oldest entry dropped and ``new`` appended."""
    return jnp.roll(history, -1, axis=0).at[-1].set(new)


def _two_loop_recursion(state: LBFGSResults):
    """The search direction ``-H grad`` for the L-BFGS inverse Hessian estimate: ``gamma``
    times the identity, corrected by the stored pairs (newest first, then back)."""
    dtype = state.rho_history.dtype
    size = len(state.rho_history)
    stored = jnp.where(state.k < size, state.k, size)

    def newest_first(j, carry):
        q, alphas = carry
        i = size - 1 - j
        alpha = (state.rho_history[i]
                 * highest_dot(jnp.conj(state.s_history[i]), q).real.astype(dtype))
        return q - alpha * jnp.conj(state.y_history[i]), alphas.at[i].set(alpha)

    def oldest_first(j, q):
        i = size - stored + j
        beta = state.rho_history[i] * highest_dot(state.y_history[i], q).real.astype(dtype)
        return q + (alphas[i] - beta) * state.s_history[i]

    start = (-jnp.conj(state.g_k), jnp.zeros_like(state.rho_history))
    q, alphas = lax.fori_loop(0, stored, newest_first, start)
    return lax.fori_loop(0, stored, oldest_first, state.gamma * q)
