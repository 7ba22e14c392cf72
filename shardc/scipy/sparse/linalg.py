"""``shardc.scipy.sparse.linalg`` (``jax.scipy.sparse.linalg``): the Krylov solvers ``cg``,
``bicgstab`` and ``gmres`` for ``A x = b``.

``A`` (and the preconditioner ``M``) is a function computing the matrix-vector product, a
square 2-D array, or anything with ``@``; ``b`` and ``x0`` are arrays or pytrees of arrays
(the vector is the concatenation of the leaves). Each solver is one ``lax.while_loop``
wrapped in ``lax.custom_linear_solve``, so its derivative is that of the exact solution,
computed by solving again (with the same solver on the transposed system), as JAX does. The
iterations follow JAX's, step for step, so that results agree to rounding.

``cg`` and ``bicgstab`` return ``(x, None)``; ``gmres`` returns ``(x, info)`` with ``info``
-1 where the solution is NaN and 0 otherwise (JAX's).
"""
from __future__ import annotations

import functools
import operator

import numpy as np

import shardc.numpy as jnp
from compiler.tracing import weakened
import shardc.lax as lax
from runtime.array import Array
import shardc.dtypes as dtypes
import shardc.scipy.linalg as _linalg
from shardc.tree_util import Partial, tree_leaves, tree_map, tree_reduce, tree_structure

__all__ = ["bicgstab", "cg", "gmres"]


# --- vectors as pytrees -------------------------------------------------------------------------

def _real_dot(x, y):
    """The real part of ``vdot(x, y)`` leaving out the real-imaginary cross terms: a real
    scalar (what the solvers compare against tolerances)."""
    out = jnp.vdot(x.real, y.real)
    if jnp.iscomplexobj(x) or jnp.iscomplexobj(y):
        out = out + jnp.vdot(x.imag, y.imag)
    return out


def _real_dot_tree(x, y):
    return sum(tree_leaves(tree_map(_real_dot, x, y)))


def _dot_tree(x, y):
    return sum(tree_leaves(tree_map(jnp.vdot, x, y)))


def _norm(x):
    leaves = tree_leaves(x)
    return jnp.sqrt(sum(_real_dot(v, v) for v in leaves))


def _scale(scalar, x):
    return tree_map(lambda v: scalar * v, x)


def _add(x, y):
    return tree_map(operator.add, x, y)


def _sub(x, y):
    return tree_map(operator.sub, x, y)


def _where(pred, x, y):
    return tree_map(lambda a, b: jnp.where(pred, a, b), x, y)


def _same(x):
    return x


_IDENTITY = Partial(_same)


def _as_operator(f):
    """A function for ``A`` given as a function, a square 2-D array or a ``@`` operand (JAX's
    errors for other shapes and types)."""
    if callable(f):
        return f
    if isinstance(f, (np.ndarray, Array)):
        if f.ndim != 2 or f.shape[0] != f.shape[1]:
            raise ValueError(f"linear operator must be a square matrix, but has shape: "
                             f"{f.shape}")
        return functools.partial(jnp.dot, f)
    if hasattr(f, "__matmul__"):
        if hasattr(f, "shape") and len(f.shape) != 2 or f.shape[0] != f.shape[1]:
            raise ValueError(f"linear operator must be a square matrix, but has shape: "
                             f"{f.shape}")
        return functools.partial(operator.matmul, f)
    raise TypeError(f"linear operator must be either a function or ndarray: {f}")


def _shapes(x):
    return [np.shape(v) for v in tree_leaves(x)]


def _check_guess(x0, b, shapes=True):
    if tree_structure(x0) != tree_structure(b):
        raise ValueError(f"x0 and b must have matching tree structure: "
                         f"{tree_structure(x0)} vs {tree_structure(b)}")
    if shapes and _shapes(x0) != _shapes(b):
        raise ValueError(f"arrays in x0 and b must have matching shapes: "
                         f"{_shapes(x0)} vs {_shapes(b)}")


# --- cg and bicgstab ----------------------------------------------------------------------------

def _cg_loop(A, b, x0, *, maxiter, tol, atol, M):
    """Conjugate gradients from ``x0`` until ``|r|^2 <= max(tol^2 |b|^2, atol^2)`` (measured
    as ``r . M r`` without a preconditioner) or ``maxiter`` steps."""
    bound = jnp.maximum(jnp.square(tol) * _real_dot_tree(b, b), jnp.square(atol))
    r0 = _sub(b, A(x0))
    z0 = M(r0)
    dtype = dtypes.result_type(*tree_leaves(z0))
    gamma0 = _real_dot_tree(r0, z0).astype(dtype)

    def going(state):
        _, r, gamma, _, k = state
        rs = gamma.real if M is _IDENTITY else _real_dot_tree(r, r)
        return (rs > bound) & (k < maxiter)

    def step(state):
        x, r, gamma, p, k = state
        ap = A(p)
        alpha = gamma / _real_dot_tree(p, ap).astype(dtype)
        x = _add(x, _scale(alpha, p))
        r = _sub(r, _scale(alpha, ap))
        z = M(r)
        gamma_next = _real_dot_tree(r, z).astype(dtype)
        p = _add(z, _scale(gamma_next / gamma, p))
        return x, r, gamma_next, p, k + 1

    return lax.while_loop(going, step, (x0, r0, gamma0, z0, 0))[0]


def _bicgstab_loop(A, b, x0, *, maxiter, tol, atol, M):
    """BiCGSTAB from ``x0`` until the residual meets the tolerance, ``maxiter`` steps, or a
    breakdown (``rho``, ``omega`` or ``alpha`` zero: the step counter goes negative)."""
    bound = jnp.maximum(jnp.square(tol) * _real_dot_tree(b, b), jnp.square(atol))
    r0 = _sub(b, A(x0))
    dtype, weak = dtypes.promotion(*tree_leaves(b))
    one = jnp.asarray(1, dtype)
    one = weakened(one) if weak else one        # weakly typed where b is, as in JAX

    def going(state):
        r, k = state[1], state[-1]
        return (_real_dot_tree(r, r) > bound) & (k < maxiter) & (k >= 0)

    def step(state):
        x, r, rhat, alpha, omega, rho, p, q, k = state
        rho_next = _dot_tree(rhat, r)
        beta = rho_next / rho * alpha / omega
        p = _add(r, _scale(beta, _sub(p, _scale(omega, q))))
        phat = M(p)
        q = A(phat)
        alpha = rho_next / _dot_tree(rhat, q)
        s = _sub(r, _scale(alpha, q))
        done = _real_dot_tree(s, s) < bound
        shat = M(s)
        t = A(shat)
        omega = _dot_tree(t, s) / _dot_tree(t, t)
        x = _where(done, _add(x, _scale(alpha, phat)),
                   _add(x, _add(_scale(alpha, phat), _scale(omega, shat))))
        r = _where(done, s, _sub(s, _scale(omega, t)))
        k = jnp.where((omega == 0) | (alpha == 0), -11, k + 1)
        k = jnp.where(rho_next == 0, -10, k)
        return x, r, rhat, alpha, omega, rho_next, p, q, k

    start = (x0, r0, r0, one, one, one, r0, r0, 0)
    return lax.while_loop(going, step, start)[0]


def _krylov(loop, A, b, x0, tol, atol, maxiter, M, symmetric_when_real):
    """``loop`` as a ``custom_linear_solve``, transposed by itself (symmetric for real ``b``
    where the method assumes a hermitian ``A``)."""
    if x0 is None:
        x0 = tree_map(jnp.zeros_like, b)
    b, x0 = tree_map(jnp.asarray, b), tree_map(jnp.asarray, x0)
    if maxiter is None:
        maxiter = 10 * sum(np.size(v) for v in tree_leaves(b))
    A = _as_operator(A)
    M = _IDENTITY if M is None else _as_operator(M)
    _check_guess(x0, b)
    solve = functools.partial(loop, x0=x0, tol=tol, atol=atol, maxiter=maxiter, M=M)
    symmetric = symmetric_when_real and not any(
        jnp.iscomplexobj(v) for v in tree_leaves(b))
    x = lax.custom_linear_solve(A, b, solve=solve, transpose_solve=solve,
                                symmetric=symmetric)
    return x, None


def cg(A, b, x0=None, *, tol=1e-5, atol=0.0, maxiter=None, M=None):
    """Solve ``A x = b`` for hermitian positive definite ``A`` by conjugate gradients (JAX's
    ``jax.scipy.sparse.linalg.cg``): stops when ``norm(r) <= max(tol * norm(b), atol)`` or
    after ``maxiter`` steps (default ten times b's size); ``M`` preconditions. Returns
    ``(x, None)``; derivatives solve again with ``cg``."""
    return _krylov(_cg_loop, A, b, x0, tol, atol, maxiter, M, True)


def bicgstab(A, b, x0=None, *, tol=1e-5, atol=0.0, maxiter=None, M=None):
    """Solve ``A x = b`` for general ``A`` by BiCGSTAB (JAX's
    ``jax.scipy.sparse.linalg.bicgstab``); arguments as ``cg``'s. Returns ``(x, None)``."""
    return _krylov(_bicgstab_loop, A, b, x0, tol, atol, maxiter, M, False)


# --- gmres --------------------------------------------------------------------------------------

def _normalized(x, thresh=None):
    """``(x / norm(x), norm(x))``, both zero where the norm is at most ``thresh`` (default
    the machine epsilon of x's dtype)."""
    norm = _norm(x)
    dtype, weak = dtypes.promotion(*tree_leaves(x))
    if thresh is None:
        thresh = jnp.asarray(np.finfo(norm.dtype).eps)
    thresh = jnp.asarray(thresh).astype(dtype).real
    big = norm > thresh
    divisor = norm.astype(dtype)
    divisor = weakened(divisor) if weak else divisor    # keeps x's weak type, as JAX's
    out = tree_map(lambda v: jnp.where(big, v / divisor, 0.0), x)
    return out, jnp.where(big, norm, 0.0)


def _overlaps(Q, v):
    """``Q^H v``: v's overlap with each column of the basis ``Q`` (leaves ``[..., n]``)."""
    return tree_reduce(operator.add,
                       tree_map(lambda X, y: jnp.einsum("...n,...->n", X.conj(), y), Q, v))


def _gram_schmidt(Q, x, xnorm, max_iterations=2):
    """``x`` orthogonalized against the columns of ``Q`` by classical Gram-Schmidt, repeated
    (up to ``max_iterations`` times) while the overlaps' norm stays below
    ``norm(q) / sqrt(2)``: ``(q, r)``, r the overlaps."""
    first = tree_leaves(Q)[0]
    r = jnp.zeros(first.shape[-1], dtype=first.dtype)

    def sweep(state):
        k, q, r, qnorm_scaled = state
        h = _overlaps(Q, q)
        q = _sub(q, tree_map(lambda X: jnp.dot(X, h), Q))
        r = _add(r, h)

        def again(inner):
            k, pending, _, _ = inner
            return jnp.logical_and(pending, k < (max_iterations - 1))

        def renorm(inner):
            k, _, q, _ = inner
            _, qnorm = _normalized(q)
            return k, False, q, qnorm / jnp.sqrt(2.0)

        _, _, q, qnorm_scaled = lax.while_loop(again, renorm, (k, True, q, qnorm_scaled))
        return k + 1, q, r, qnorm_scaled

    def going(state):
        k, _, r, qnorm_scaled = state
        _, rnorm = _normalized(r)
        return jnp.logical_and(k < (max_iterations - 1), rnorm < qnorm_scaled)

    state = sweep((0, x, r, xnorm / jnp.sqrt(2.0)))
    _, q, r, _ = lax.while_loop(going, sweep, state)
    return q, r


def _arnoldi_step(k, A, M, V, H):
    """The k-th Arnoldi step: ``M(A(V[:, k]))`` orthonormalized against V into ``V[:, k+1]``,
    its overlaps into row k of H; ``breakdown`` where it vanishes (an invariant subspace)."""
    dtype = dtypes.result_type(*tree_leaves(V))
    eps = np.finfo(dtype).eps
    v = M(A(tree_map(lambda X: X[..., k], V)))
    _, norm0 = _normalized(v)
    v, h = _gram_schmidt(V, v, norm0, max_iterations=2)
    unit, norm1 = _normalized(v, thresh=eps * norm0)
    V = tree_map(lambda X, y: X.at[..., k + 1].set(y), V, unit)
    h = h.at[k + 1].set(norm1.astype(dtype))
    return V, H.at[k, :].set(h), norm1 == 0.0


def _rotate(H, i, cs, sn):
    x, y = H[i], H[i + 1]
    H = H.at[i].set(cs.conj() * x - sn.conj() * y)
    return H.at[i + 1].set(sn * x + cs * y)


def _givens(a, b):
    """The rotation ``(cs, sn)`` that zeroes ``b`` against ``a``."""
    b_zero = abs(b) == 0
    a_smaller = abs(a) < abs(b)
    t = -jnp.where(a_smaller, a, b) / jnp.where(a_smaller, b, a)
    r = lax.rsqrt(1 + abs(t) ** 2).astype(t.dtype)
    cs = jnp.where(b_zero, 1, jnp.where(a_smaller, r * t, r))
    sn = jnp.where(b_zero, 0, jnp.where(a_smaller, r, r * t))
    return cs, sn


def _basis(unit_residual, restart):
    return tree_map(lambda x: jnp.pad(x[..., None], ((0, 0),) * x.ndim + ((0, restart),)),
                    unit_residual)


def _restart_incremental(A, b, x0, unit_residual, residual_norm, ptol, restart, M):
    """One restart building R (Q R of the Hessenberg matrix) by Givens rotations as the
    Krylov basis grows, stopping early once the rotated residual is within ``ptol``."""
    V = _basis(unit_residual, restart)
    dtype = dtypes.result_type(*tree_leaves(b))
    R = jnp.eye(restart, restart + 1, dtype=dtype)
    rotations = jnp.zeros((restart, 2), dtype=dtype)
    beta = jnp.zeros(restart + 1, dtype=dtype).at[0].set(residual_norm.astype(dtype))

    def going(state):
        k, err = state[0], state[1]
        return jnp.logical_and(k < restart, err > ptol)

    def step(state):
        k, _, V, R, beta, rotations = state
        V, H, _ = _arnoldi_step(k, A, M, V, R)
        row = lax.fori_loop(0, k, lambda i, row: _rotate(row, i, *rotations[i, :]), H[k, :])
        new = _givens(row[k], row[k + 1])
        rotations = rotations.at[k, :].set(new)
        R = R.at[k, :].set(_rotate(row, k, *new))
        beta = _rotate(beta, k, *rotations[k, :])
        return k + 1, abs(beta[k + 1]), V, R, beta, rotations

    _, _, V, R, beta, _ = lax.while_loop(going, step,
                                         (0, residual_norm, V, R, beta, rotations))
    y = _linalg.solve_triangular(R[:, :-1].T, beta[:-1])
    x = _add(x0, tree_map(lambda X: jnp.dot(X[..., :-1], y), V))
    unit, norm = _normalized(M(_sub(b, A(x))))
    return x, unit, norm


def _restart_batched(A, b, x0, unit_residual, residual_norm, ptol, restart, M):
    """One restart building the whole Krylov basis (up to a breakdown), then solving the
    least-squares problem for its coefficients at once (normal equations)."""
    V = _basis(unit_residual, restart)
    dtype, weak = dtypes.promotion(*tree_leaves(b))
    H = jnp.eye(restart, restart + 1, dtype=dtype)
    H = weakened(H) if weak else H

    def going(state):
        _, _, breakdown, k = state
        return jnp.logical_and(k < restart, jnp.logical_not(breakdown))

    def step(state):
        V, H, _, k = state
        V, H, breakdown = _arnoldi_step(k, A, M, V, H)
        return V, H, breakdown, k + 1

    V, H, _, _ = lax.while_loop(going, step, (V, H, False, 0))
    beta = jnp.zeros_like(H, shape=(restart + 1,)).at[0].set(residual_norm.astype(dtype))
    a = H.T
    y = _linalg.solve(jnp.dot(a.T.conj(), a), jnp.dot(a.T.conj(), beta), assume_a="pos")
    x = _add(x0, tree_map(lambda X: jnp.dot(X[..., :-1], y), V))
    unit, norm = _normalized(M(_sub(b, A(x))))
    return x, unit, norm


def _gmres_loop(A, b, x0, atol, ptol, restart, maxiter, M, one_restart):
    """Restarts from the last solution until the preconditioned residual is within ``atol``
    or ``maxiter`` restarts."""
    unit, norm = _normalized(M(_sub(b, A(x0))))

    def going(state):
        _, k, _, norm = state
        return jnp.logical_and(k < maxiter, norm > atol)

    def step(state):
        x, k, unit, norm = state
        x, unit, norm = one_restart(A, b, x, unit, norm, ptol, restart, M)
        return x, k + 1, unit, norm

    return lax.while_loop(going, step, (x0, 0, unit, norm))[0]


def gmres(A, b, x0=None, *, tol=1e-5, atol=0.0, restart=20, maxiter=None, M=None,
          solve_method="batched"):
    """Solve ``A x = b`` for general ``A`` by restarted GMRES (JAX's
    ``jax.scipy.sparse.linalg.gmres``): Krylov spaces of dimension ``restart`` (at most b's
    size), rebuilt up to ``maxiter`` times (default ten times b's size) until
    ``norm(r) <= max(tol * norm(b), atol)``. ``solve_method`` 'batched' solves each
    restart's least-squares problem at its end; 'incremental' keeps a QR factorization by
    Givens rotations and may stop a restart early. Returns ``(x, info)``, ``info`` -1 where x
    is NaN, else 0."""
    if x0 is None:
        x0 = tree_map(jnp.zeros_like, b)
    M = _IDENTITY if M is None else _as_operator(M)
    A = _as_operator(A)
    b, x0 = tree_map(jnp.asarray, b), tree_map(jnp.asarray, x0)
    size = sum(np.size(v) for v in tree_leaves(b))
    if maxiter is None:
        maxiter = 10 * size
    restart = min(restart, size)
    _check_guess(x0, b, shapes=False)
    b_norm = _norm(b)
    atol = jnp.maximum(tol * b_norm, atol)
    ptol = _norm(M(b)) * jnp.minimum(1.0, atol / b_norm)
    if solve_method == "incremental":
        one_restart = _restart_incremental
    elif solve_method == "batched":
        one_restart = _restart_batched
    else:
        raise ValueError(f"invalid solve_method {solve_method}, must be either "
                         "'incremental' or 'batched'")

    def solve(A, b):
        return _gmres_loop(A, b, x0, atol, ptol, restart, maxiter, M, one_restart)

    x = lax.custom_linear_solve(A, b, solve=solve, transpose_solve=solve)
    info = jnp.where(jnp.isnan(_norm(x)), -1, 0)
    return x, info
