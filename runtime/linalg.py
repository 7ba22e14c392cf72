"""Kernels of the matrix primitives (``cholesky``, ``qr``, ``solve``, ``slogdet``) on numpy
arrays whose last two dimensions are matrices (leading dimensions are a batch).

As JAX's, a failed factorisation is not an exception: a matrix that is not positive definite
gets a Cholesky factor of NaNs, and a singular system a solution of NaNs/infs, so a jitted
program's result says which matrices failed.
"""
from __future__ import annotations

import numpy as np

from ir.dtypes import complex_dtype, real_dtype


def _per_matrix(fn, a: np.ndarray, out_shape) -> np.ndarray:
    out = np.empty(out_shape, a.dtype)
    for index in np.ndindex(*a.shape[:-2]):
        out[index] = fn(a[index])
    return out


def _cholesky_one(a: np.ndarray) -> np.ndarray:
    try:
        return np.linalg.cholesky(a)
    except np.linalg.LinAlgError:         # not positive definite: NaN below, as JAX's
        return np.tril(np.full(a.shape, np.nan, a.dtype))


def _hermitian_part(a):
    """``(a + a^H) / 2``: what JAX's symmetrize_input reads (the conjugate for complex)."""
    return (a + np.conj(np.swapaxes(a, -1, -2))) / 2


def cholesky(a):
    # numpy reads the lower triangle; JAX symmetrises first: (a + a^H) / 2
    a = np.asarray(a)
    symmetric = _hermitian_part(a)
    return [_per_matrix(_cholesky_one, symmetric, a.shape).astype(a.dtype)]


def qr(a, *, full_matrices):
    a = np.asarray(a)
    q, r = np.linalg.qr(a, mode="complete" if full_matrices else "reduced")
    return [q.astype(a.dtype), r.astype(a.dtype)]


def _solve_one(pair):
    a, b = pair
    try:
        return np.linalg.solve(a, b)
    except np.linalg.LinAlgError:
        return _pivoted_lu_solve(a, b)


def _pivoted_lu_solve(a, b):
    """``a x = b`` by LU with partial pivoting and two triangular solves, IEEE arithmetic
    throughout: for a singular ``a`` the zero pivot's divisions give the infinities (and
    NaNs) XLA's LU solve gives, where LAPACK's solver refuses."""
    n = a.shape[0]
    lu = np.array(a, dtype=np.result_type(a, b))
    x = np.array(b, dtype=lu.dtype).reshape(n, -1)
    with np.errstate(all="ignore"):
        for k in range(n):
            pivot = k + int(np.argmax(np.abs(lu[k:, k])))
            lu[[k, pivot]], x[[k, pivot]] = lu[[pivot, k]], x[[pivot, k]]
            if lu[k, k] != 0:                   # a zero column is left as it is (getrf's)
                lu[k + 1:, k] /= lu[k, k]
                lu[k + 1:, k + 1:] -= np.outer(lu[k + 1:, k], lu[k, k + 1:])
        for k in range(n):                      # L y = P b (unit diagonal)
            x[k] -= lu[k, :k] @ x[:k]
        for k in reversed(range(n)):            # U x = y
            x[k] = (x[k] - lu[k, k + 1:] @ x[k + 1:]) / lu[k, k]
    return x.reshape(b.shape).astype(b.dtype)


def solve(a, b):
    a, b = np.asarray(a), np.asarray(b)
    out = np.empty(b.shape, b.dtype)
    for index in np.ndindex(*a.shape[:-2]):
        out[index] = _solve_one((a[index], b[index]))
    return [out]


def eigh(a):
    # the symmetric part, as JAX's symmetrize_input=True
    a = np.asarray(a)
    values, vectors = np.linalg.eigh(_hermitian_part(a))
    return [vectors.astype(a.dtype), values.astype(real_dtype(a.dtype))]


def slogdet(a):
    a = np.asarray(a)
    sign, logabsdet = np.linalg.slogdet(a)
    return [np.asarray(sign, a.dtype), np.asarray(logabsdet, real_dtype(a.dtype))]


def svd(a, *, full_matrices):
    a = np.asarray(a)
    u, s, vt = np.linalg.svd(a, full_matrices=full_matrices)
    return [s.astype(real_dtype(a.dtype)), u.astype(a.dtype), vt.astype(a.dtype)]


def eig(a, *, compute_vectors, enable_eigvec_derivs=False):
    """Eigenvalues (and right eigenvectors) of each matrix; a matrix holding an infinity or a
    NaN gives NaNs (LAPACK's geev fails on it; JAX returns NaNs for that batch element)."""
    del enable_eigvec_derivs    # a matter of differentiation only
    a = np.asarray(a)
    dtype = complex_dtype(a.dtype)
    finite = np.isfinite(a).all(axis=(-2, -1))
    if not finite.all():
        values, vectors = np.linalg.eig(np.where(finite[..., None, None], a, 0))
        values = np.where(finite[..., None], values, np.nan)
        vectors = np.where(finite[..., None, None], vectors, np.nan)
    else:
        values, vectors = np.linalg.eig(a)
    values = values.astype(dtype)
    return [values, vectors.astype(dtype)] if compute_vectors else [values]
