"""BFGS (Algorithm 6.1 of Nocedal and Wright, *Numerical Optimization*, 1999, pp. 136-143)
as one ``lax.while_loop`` keeping the dense inverse Hessian estimate, step for step as
JAX's ``jax._src.scipy.optimize.bfgs``."""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

import shardc.lax as lax
import shardc.numpy as jnp
from shardc.scipy.optimize._dot import highest_dot
from compiler.autodiff import value_and_grad
from shardc.scipy.optimize.line_search import line_search

__all__ = ["BFGSResults", "minimize_bfgs"]


def _matvec(H, g):
    """``H @ g`` as rounded products summed row by row. BLAS kernels fuse multiply-adds in
    an order that differs between rows, so that a symmetric ``H`` times one of its
    eigenvectors can turn off that direction by a rounding error, which BFGS then
    amplifies (the badly scaled isotropic quadratic of JAX's tests stalls in 64-bit mode
    otherwise). A ``g`` that is not 1-D (an ``x0`` that is not) goes through ``dot`` and
    meets JAX's errors."""
    if jnp.ndim(g) != 1:
        return highest_dot(H, g)
    return jnp.sum(H * g[None, :], axis=1)


class BFGSResults(NamedTuple):
    """The state of BFGS: ``converged`` (gradient norm below ``gtol``), ``failed`` (the
    last line search failed), ``k`` (iterations), ``nfev``/``ngev``/``nhev`` (evaluations
    of the function, gradient, Hessian), ``x_k``, ``f_k``, ``g_k`` (the iterate, value and
    gradient), ``H_k`` (inverse Hessian estimate), ``old_old_fval`` (the previous value),
    ``status`` (0 converged, 1 out of iterations, 2 + the line search's status where it
    failed, -1 otherwise) and ``line_search_status``."""
    converged: Any
    failed: Any
    k: Any
    nfev: Any
    ngev: Any
    nhev: Any
    x_k: Any
    f_k: Any
    g_k: Any
    H_k: Any
    old_old_fval: Any
    status: Any
    line_search_status: Any


def _inverse_hessian_update(H, s, y):
    """``(I - rho s y^T) H (I - rho y s^T) + rho s s^T`` with ``rho = 1 / (y . s)``; H
    unchanged where rho is not finite (no curvature measured)."""
    rho = jnp.reciprocal(highest_dot(y, s))
    w = jnp.eye(H.shape[0], dtype=rho.dtype) - rho * (s[:, None] * y[None, :])
    updated = highest_dot(highest_dot(w, H), w.T) + rho * (s[:, None] * s[None, :])
    return jnp.where(jnp.isfinite(rho), updated, H)


def minimize_bfgs(fun, x0, maxiter=None, norm=np.inf, gtol=1e-5, line_search_maxiter=10):
    """Minimize ``fun`` from ``x0`` by BFGS with a strong Wolfe line search.

    Args:
      fun: real scalar function of a 1-D array, differentiable.
      x0: the starting point, a 1-D array.
      maxiter: at most this many iterations (default ``200 * x0.size``).
      norm: the order of the gradient norm that ``gtol`` bounds (default max-abs).
      gtol: converged once ``norm(grad) < gtol``.
      line_search_maxiter: bracketing steps each line search may take.

    Returns:
      The final ``BFGSResults``.

    >>> import shardc.numpy as jnp
    >>> res = minimize_bfgs(lambda x: jnp.sum((x - 2.) ** 2), jnp.zeros(3))
    >>> [round(float(v), 4) for v in res.x_k], int(res.status)
    ([2.0, 2.0, 2.0], 0)
    """
    if maxiter is None:
        maxiter = np.size(x0) * 200
    d = x0.shape[0]
    f_0, g_0 = value_and_grad(fun)(x0)
    start = BFGSResults(
        converged=jnp.linalg.norm(g_0, ord=norm) < gtol, failed=False,
        k=0, nfev=1, ngev=1, nhev=0,
        x_k=x0, f_k=f_0, g_k=g_0, H_k=jnp.eye(d, dtype=x0.dtype),
        old_old_fval=f_0 + jnp.linalg.norm(g_0) / 2,
        status=0, line_search_status=0)

    def going(state: BFGSResults):
        return ~state.converged & ~state.failed & (state.k < maxiter)

    def step(state: BFGSResults) -> BFGSResults:
        p_k = -_matvec(state.H_k, state.g_k)
        found = line_search(fun, state.x_k, p_k, old_fval=state.f_k,
                            old_old_fval=state.old_old_fval, gfk=state.g_k,
                            maxiter=line_search_maxiter)
        s_k = found.a_k * p_k
        return state._replace(
            converged=jnp.linalg.norm(found.g_k, ord=norm) < gtol,
            failed=found.failed,
            k=state.k + 1,
            nfev=state.nfev + found.nfev,
            ngev=state.ngev + found.ngev,
            x_k=state.x_k + s_k,
            f_k=found.f_k,
            g_k=found.g_k,
            H_k=_inverse_hessian_update(state.H_k, s_k, found.g_k - state.g_k),
            old_old_fval=state.f_k,
            line_search_status=found.status)

    state = lax.while_loop(going, step, start)
    status = jnp.where(state.converged, 0,
                       jnp.where(state.k == maxiter, 1,
                                 jnp.where(state.failed, 2 + state.line_search_status, -1)))
    return state._replace(status=status)
