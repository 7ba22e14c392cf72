"""``minimize`` and its ``OptimizeResults``, JAX's ``jax.scipy.optimize`` front end."""
from __future__ import annotations

from typing import Any, NamedTuple

import shardc.numpy as jnp
from shardc.scipy.optimize._bfgs import minimize_bfgs
from shardc.scipy.optimize._lbfgs import minimize_lbfgs

__all__ = ["OptimizeResults", "minimize"]


class OptimizeResults(NamedTuple):
    """What ``minimize`` found.

    Fields: ``x`` (the solution), ``success`` (converged and the line search did not
    fail), ``status`` (the method's code; for BFGS 0 converged, 1 out of iterations, 3 zoom
    failed, 4 saddle point, 5 line search out of iterations, -1 otherwise), ``fun``
    (``fun(x)``), ``jac`` (its gradient), ``hess_inv`` (the inverse Hessian estimate, None
    for L-BFGS), ``nfev``, ``njev`` (function and gradient evaluations) and ``nit``
    (iterations).
    """
    x: Any
    success: Any
    status: Any
    fun: Any
    jac: Any
    hess_inv: Any
    nfev: Any
    njev: Any
    nit: Any


def minimize(fun, x0, args=(), *, method, tol=None, options=None):
    """Minimize ``fun(x, *args)`` over a 1-D array ``x`` from ``x0`` (JAX's
    ``jax.scipy.optimize.minimize``; gradients by autodiff, works under ``jit``).

    Args:
      fun: real scalar function ``fun(x, *args)``, differentiable.
      x0: the starting point, a 1-D array.
      args: a tuple of further arguments to ``fun``.
      method: ``'BFGS'`` or ``'l-bfgs-experimental-do-not-rely-on-this'`` (any case).
      tol: accepted for SciPy's signature and unused, as in JAX; use ``options``.
      options: the method's keyword options. BFGS: ``maxiter`` (default ``200 * size``),
        ``norm`` (``inf``), ``gtol`` (1e-5), ``line_search_maxiter`` (10). L-BFGS:
        ``maxiter``, ``norm``, ``maxcor`` (10), ``ftol`` (2.22e-9), ``gtol`` (1e-5),
        ``maxfun``, ``maxgrad``, ``maxls`` (20).

    Returns:
      An ``OptimizeResults``.

    >>> import shardc.numpy as jnp
    >>> res = minimize(lambda x, c: jnp.sum((x - c) ** 2), jnp.zeros(2), (3.,),
    ...                method='BFGS')
    >>> [round(float(v), 4) for v in res.x], bool(res.success)
    ([3.0, 3.0], True)
    """
    if options is None:
        options = {}
    if not isinstance(args, tuple):
        raise TypeError(f"args argument to jax.scipy.optimize.minimize must be a tuple, "
                        f"got {args}")

    def fun_of_x(x):
        return fun(x, *args)

    if method.lower() == "bfgs":
        found = minimize_bfgs(fun_of_x, x0, **options)
        hess_inv = found.H_k
    elif method.lower() == "l-bfgs-experimental-do-not-rely-on-this":
        found = minimize_lbfgs(fun_of_x, x0, **options)
        hess_inv = None
    else:
        raise ValueError(f"Method {method} not recognized")
    return OptimizeResults(x=found.x_k, success=found.converged & jnp.logical_not(found.failed),
                           status=found.status, fun=found.f_k, jac=found.g_k,
                           hess_inv=hess_inv, nfev=found.nfev, njev=found.ngev, nit=found.k)
