"""``jax.scipy.linalg``: scipy's conventions (``cholesky`` upper by default, ``qr`` full by
default and returning tuples, ``eigh(lower=)``) over ``shardc.numpy.linalg``'s decompositions,
with the triangular and Cholesky solves, ``block_diag``, ``toeplitz`` and ``expm``. Built on
the same primitives, so they differentiate, batch and shard as those do."""
from __future__ import annotations

import functools
import math
import warnings

import numpy as np

import shardc.numpy as jnp
from compiler.autodiff import jvp as _jvp
import shardc.lax as lax
from shardc.lax import linalg as _lax_linalg
from shardc.numpy import linalg as _np_linalg

__all__ = [
    "block_diag", "cho_factor", "cho_solve", "cholesky", "det", "eigh", "eigh_tridiagonal",
    "expm", "expm_frechet",
    "funm", "hessenberg", "inv", "lu", "lu_factor", "lu_solve", "qr", "rsf2csf", "schur",
    "solve", "solve_sylvester", "solve_triangular", "sqrtm", "svd", "toeplitz",
]


def _matrix(a):
    a = jnp.asarray(a)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"expected a square matrix (or a batch of them), got shape {a.shape}")
    return a


def cholesky(a, lower=False, overwrite_a=False, check_finite=True):
    """The Cholesky factor of a Hermitian positive definite ``a``: upper (``U^H U = a``)
    unless ``lower``. Only that triangle of ``a`` is read, as JAX's (its gradient is the
    symmetric one, as ``jnp.linalg.cholesky``'s)."""
    a = _matrix(a)
    tri = jnp.tril(a) if lower else jnp.triu(a)
    a = tri + jnp.conj(jnp.swapaxes(tri, -1, -2)) - jnp.tril(jnp.triu(a))
    return _np_linalg.cholesky(a, upper=not lower)


def cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    """``(c, lower)`` for ``cho_solve``: ``c`` the Cholesky factor (zeros off its triangle)."""
    return cholesky(a, lower=lower), lower


def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    """``x`` with ``a x = b``, from ``a``'s ``cho_factor``."""
    c, lower = c_and_lower
    c = _matrix(c)
    b = jnp.asarray(b)
    if not _one_vector_each(c, b, "cho_solve"):      # (a matrix: kept so by both solves)
        first = solve_triangular(c, b, trans=0 if lower else 2, lower=lower)
        return solve_triangular(c, first, trans=2 if lower else 0, lower=lower)
    first = solve_triangular(c, b[..., None], trans=0 if lower else 2, lower=lower)
    return solve_triangular(c, first, trans=2 if lower else 0, lower=lower)[..., 0]


def _one_vector_each(a, b, name):
    """Whether ``b`` holds one vector per matrix of ``a``, as JAX reads it: ``b`` of one
    dimension, or of one fewer than ``a`` ending in ``a``'s size (deprecated in JAX, with a
    FutureWarning); else ``b`` is a (batch of) matrices, its batch broadcast with ``a``'s."""
    if b.ndim == 1:
        return True
    if a.ndim == b.ndim + 1 and a.shape[-1] == b.shape[-1]:
        warnings.warn(f"jax.scipy.linalg.{name}: batched 1D solves with b.ndim > 1 are "
                      f"deprecated, and in the future will be treated as a batched 2D solve. "
                      f"Use {name}(a, b[..., None]).squeeze(-1) to avoid this warning.",
                      category=FutureWarning, stacklevel=3)
        return True
    return False


def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False,
                     debug=None, check_finite=True):
    """``x`` with ``op(a) x = b`` for the triangle of ``a`` that ``lower`` names (the other is
    ignored): ``trans`` 0/'N' (``a``), 1/'T' (``a^T``), 2/'C' (``a^H``); ``unit_diagonal``
    takes ``a``'s diagonal as ones."""
    a = _matrix(a)
    n = a.shape[-1]
    tri = jnp.tril(a) if lower else jnp.triu(a)
    if unit_diagonal:
        eye = jnp.eye(n, dtype=a.dtype)
        tri = tri * (1 - eye) + eye
    kind = {0: 0, "N": 0, 1: 1, "T": 1, 2: 2, "C": 2}.get(trans)
    if kind is None:
        raise ValueError(f"Invalid 'trans' value {trans!r}: expected 0, 1, 2, 'N', 'T' or 'C'")
    if kind:
        tri = jnp.swapaxes(tri, -1, -2)
        if kind == 2:
            tri = jnp.conj(tri)
    b = jnp.asarray(b)
    return _np_linalg.lax_solve(tri, b, vector=_one_vector_each(a, b, "solve_triangular"))


def solve(a, b, lower=False, overwrite_a=False, overwrite_b=False, debug=False,
          check_finite=True, assume_a="gen"):
    """``x`` with ``a x = b``; ``assume_a`` 'gen', 'sym', 'her' or 'pos'. As in JAX, only
    'pos' reads one triangle (the one ``lower`` names: a Cholesky solve); the others solve
    with the whole of ``a``."""
    if assume_a not in ("gen", "sym", "her", "pos"):
        raise ValueError(f"Expected assume_a to be one of 'gen', 'sym', 'her', 'pos'; got "
                         f"{assume_a!r}")
    a = _matrix(a)
    if assume_a == "pos":
        return cho_solve(cho_factor(a, lower=lower), b)
    return _np_linalg.lax_solve(a, b)


def inv(a, overwrite_a=False, check_finite=True):
    return _np_linalg.inv(_matrix(a))


def det(a, overwrite_a=False, check_finite=True):
    return _np_linalg.det(_matrix(a))


def eigh(a, b=None, lower=True, eigvals_only=False, overwrite_a=False, overwrite_b=False,
         turbo=True, eigvals=None, type=1, check_finite=True):
    """Eigenvalues (ascending) and eigenvectors of a Hermitian ``a`` from the triangle
    ``lower`` names; only the eigenvalues with ``eigvals_only``. The generalised problem
    (``b``) is not supported, as in JAX."""
    if b is not None:
        raise NotImplementedError("Only the b=None case of eigh is implemented")
    if eigvals is not None:
        raise NotImplementedError("Only the eigvals=None case of eigh is implemented.")
    w, v = _np_linalg.eigh(_matrix(a), UPLO="L" if lower else "U")
    return w if eigvals_only else (w, v)


def eigh_tridiagonal(d, e, *, eigvals_only=False, select="a", select_range=None, tol=None,
                     key=None):
    """Eigenvalues (ascending) and, unless ``eigvals_only``, eigenvectors (columns) of the
    Hermitian tridiagonal matrix of diagonal ``d`` and superdiagonal ``e`` (its
    subdiagonal ``conj(e)``): all (``select='a'``) or those of indices ``select_range[0]``
    to ``select_range[1]`` (``'i'``), as JAX's; ``'v'`` is not supported, as in JAX. They
    are the dense matrix's, to working precision (JAX bisects and iterates inversely, with
    ``tol`` and ``key``: both are taken and change nothing here)."""
    alpha, beta = jnp.asarray(d), jnp.asarray(e)
    if alpha.dtype != beta.dtype:
        raise TypeError("diagonal and off-diagonal values must have same dtype, got "
                        f"{alpha.dtype} and {beta.dtype}")
    if alpha.dtype not in (np.float32, np.float64, np.complex64, np.complex128):
        raise TypeError("Only float32 and float64 inputs are supported as inputs to "
                        f"jax.scipy.linalg.eigh_tridiagonal, got {alpha.dtype} and "
                        f"{beta.dtype}")
    n = alpha.shape[0]
    if n <= 1:
        values = jnp.real(alpha)
        return values if eigvals_only else (values, jnp.eye(n, dtype=alpha.dtype))
    if select == "a":
        picked = None
    elif select == "i":
        if select_range is None:
            raise ValueError("for select='i', select_range must be specified.")
        if select_range[0] > select_range[1]:
            raise ValueError("Got empty index range in select_range.")
        picked = slice(int(select_range[0]), int(select_range[1]) + 1)
    elif select == "v":
        raise NotImplementedError("eigh_tridiagonal(..., select='v') is not implemented")
    else:
        raise ValueError("'select must have a value in {'a', 'i', 'v'}.")
    matrix = (jnp.diag(jnp.real(alpha).astype(alpha.dtype)) + jnp.diag(beta, 1)
              + jnp.diag(jnp.conj(beta), -1))
    values, vectors = _np_linalg.eigh(matrix)
    if picked is not None:
        values, vectors = values[picked], vectors[:, picked]
    return values if eigvals_only else (values, vectors)


def svd(a, full_matrices=True, compute_uv=True, overwrite_a=False, check_finite=True,
        lapack_driver="gesdd"):
    return _np_linalg.svd(a, full_matrices=full_matrices, compute_uv=compute_uv)


def qr(a, overwrite_a=False, lwork=None, mode="full", pivoting=False, check_finite=True):
    """scipy's QR: ``mode`` 'full' (default), 'economic', 'r' (``(r,)``) or 'raw' (not
    supported); ``pivoting``: the column pivots ``p`` (``a[:, p] = q r``) come last, as
    ``(q, r, p)`` or ``(r, p)``."""
    if mode not in ("full", "economic", "r"):
        raise ValueError(f"Unsupported QR decomposition mode '{mode}'")
    if pivoting:
        a = jnp.asarray(a)
        a = a.astype(jnp.result_type(a, float))
        q, r, p = _lax_linalg.qr(a, pivoting=True, full_matrices=mode != "economic")
        return (r, p) if mode == "r" else (q, r, p)
    q, r = _np_linalg.qr(a, mode="reduced" if mode == "economic" else "complete")
    return (r,) if mode == "r" else (q, r)


def polar(a, side="right", *, method="qdwh", eps=None, max_iterations=None):
    """The polar decomposition: ``(u, p)`` with ``a = u @ p`` (``side='right'``; ``p`` is
    ``n x n``) or ``a = p @ u`` (``'left'``; ``p`` is ``m x m``), ``u`` with orthonormal
    columns (rows when ``m < n``) and ``p`` positive semidefinite; batched over leading axes.

    Both methods compute it from the SVD (``u = U V^H``, ``p = V S V^H`` or ``U S U^H``), the
    factors JAX's QR-based Halley iteration (``'qdwh'``) converges to; ``'qdwh'`` keeps JAX's
    restriction on shapes, and ``eps``/``max_iterations`` (its stopping rule) change nothing.
    """
    arr = jnp.asarray(a)
    if arr.ndim < 2:
        raise ValueError("The input `a` must be at least a 2-D array.")
    if side not in ("right", "left"):
        raise ValueError("The argument `side` must be either 'right' or 'left'.")
    if method not in ("qdwh", "svd"):
        raise ValueError(f"Unknown polar decomposition method {method}.")
    m, n = arr.shape[-2:]
    if method == "qdwh" and not ((m >= n and side == "right") or (m < n and side == "left")):
        raise NotImplementedError("method='qdwh' only supports mxn matrices where m < n where "
                                  "side='right' and m >= n side='left', got "
                                  f"{arr.shape[-2:]} with side={side!r}")
    if jnp.dtype(arr.dtype).itemsize < 4 and jnp.issubdtype(arr.dtype, jnp.floating):
        raise NotImplementedError(f"polar of {jnp.dtype(arr.dtype).name} matrices: half "
                                  "precision linear algebra is not supported")
    arr = arr.astype(jnp.promote_types(arr.dtype, jnp.float32))
    u, s, vh = _np_linalg.svd(arr, full_matrices=False)
    s = s.astype(u.dtype)
    unitary = u @ vh
    if side == "right":
        v = jnp.conj(jnp.swapaxes(vh, -1, -2))
        posdef = (v * s[..., None, :]) @ vh
    else:
        posdef = (u * s[..., None, :]) @ jnp.conj(jnp.swapaxes(u, -1, -2))
    return unitary, posdef


def block_diag(*arrs):
    """The matrices (scalars and vectors count as one row) along the diagonal, zeros around."""
    if not arrs:
        return jnp.zeros((1, 0))
    mats = [jnp.atleast_2d(jnp.asarray(x)) for x in arrs]
    if any(m.ndim != 2 for m in mats):
        raise ValueError("Arguments to jax.scipy.linalg.block_diag must have at most 2 "
                         "dimensions")
    dtype = jnp.result_type(*mats)
    cols = sum(m.shape[1] for m in mats)
    rows, left = [], 0
    for m in mats:
        right = cols - left - m.shape[1]
        rows.append(jnp.pad(m.astype(dtype), ((0, 0), (left, right))))
        left += m.shape[1]
    return jnp.concatenate(rows, axis=0)


def toeplitz(c, r=None):
    """The Toeplitz matrix with first column ``c`` and first row ``r`` (``conj(c)`` when
    omitted; ``r[0]`` is ignored). Leading dimensions of ``c`` and ``r`` are batch dimensions,
    broadcast against each other (JAX's; scipy's flattens them)."""
    c = jnp.atleast_1d(jnp.asarray(c))
    r = jnp.conj(c) if r is None else jnp.atleast_1d(jnp.asarray(r))
    return jnp.vectorize(_toeplitz, signature="(m),(n)->(m,n)")(c, r)


def _toeplitz(c, r):
    n, m = c.shape[0], r.shape[0]
    if n == 0 or m == 0:
        return jnp.zeros((n, m), jnp.promote_types(c.dtype, r.dtype))
    values = jnp.concatenate([jnp.flip(c), r[1:]])
    index = (n - 1) - np.arange(n)[:, None] + np.arange(m)[None, :]
    return values[index]


# Higham's scaling-and-squaring with the degree-13 Pade approximant (its coefficients and the
# 1-norm below which it is accurate in double precision)
_PADE13 = (64764752532480000.0, 32382376266240000.0, 7771770303897600.0, 1187353796428800.0,
           129060195264000.0, 10559470521600.0, 670442572800.0, 33522128640.0, 1323241920.0,
           40840800.0, 960960.0, 16380.0, 182.0, 1.0)
_THETA13 = 5.371920351148152


def expm(A, *, upper_triangular=False, max_squarings=16):
    """``exp(A)`` of a square matrix (or a batch): scaled by a power of two until its 1-norm
    is small, the degree-13 Pade approximant, then squared back (at most ``max_squarings``
    times; a larger norm gives NaN, as JAX's)."""
    A = _matrix(A)
    if not jnp.issubdtype(A.dtype, jnp.inexact):
        A = A.astype(jnp.float32)
    n = A.shape[-1]
    norm = jnp.max(jnp.sum(jnp.abs(A), axis=-2), axis=-1)
    squarings = jnp.maximum(0.0, jnp.ceil(jnp.log2(norm / _THETA13)))
    scale = jnp.exp2(-squarings)[..., None, None].astype(A.dtype)
    a = A * scale
    eye = jnp.broadcast_to(jnp.eye(n, dtype=A.dtype), a.shape)
    b = _PADE13
    a2 = a @ a
    a4 = a2 @ a2
    a6 = a4 @ a2
    u = a @ (a6 @ (b[13] * a6 + b[11] * a4 + b[9] * a2) + b[7] * a6 + b[5] * a4 + b[3] * a2
             + b[1] * eye)
    v = a6 @ (b[12] * a6 + b[10] * a4 + b[8] * a2) + b[6] * a6 + b[4] * a4 + b[2] * a2 \
        + b[0] * eye
    result = _np_linalg.lax_solve(v - u, v + u)
    for k in range(max_squarings):
        result = jnp.where((k < squarings)[..., None, None], result @ result, result)
    too_large = (squarings > max_squarings) | ~jnp.isfinite(norm)
    return jnp.where(too_large[..., None, None], jnp.nan, result)


def lu(a, permute_l=False, overwrite_a=False, check_finite=True):
    """``(p, l, u)`` with ``a = p @ l @ u`` (``permute_l``: ``(p @ l, u)``): ``p`` a permutation
    matrix, ``l`` unit lower trapezoidal ``[m, k]``, ``u`` upper ``[k, n]``, ``k = min(m, n)``."""
    a = jnp.asarray(a)
    a = a.astype(jnp.result_type(a, 0.0))
    factors, _, permutation = _lax_linalg.lu(a)
    m, n = a.shape[-2:]
    k = min(m, n)
    p = jnp.real((permutation[..., None, :] == jnp.arange(m)[:, None]).astype(a.dtype))
    lower = jnp.tril(factors, -1)[..., :, :k] + jnp.eye(m, k, dtype=a.dtype)
    upper = jnp.triu(factors)[..., :k, :]
    if permute_l:
        return jnp.matmul(p, lower), upper
    return p, lower, upper


def lu_factor(a, overwrite_a=False, check_finite=True):
    """``(lu, piv)``: LAPACK's compact LU factors and row swaps (``lu_solve`` reads them)."""
    a = jnp.asarray(a)
    factors, pivots, _ = _lax_linalg.lu(a.astype(jnp.result_type(a, 0.0)))
    return factors, pivots


def lu_solve(lu_and_piv, b, trans=0, overwrite_b=False, check_finite=True):
    """``x`` with ``a x = b`` (``trans`` 1: ``a^T x = b``; 2: ``a^H x = b``) from ``lu_factor``'s
    factors; ``b`` one vector ``[n]`` or ``[n, k]`` per matrix."""
    factors, pivots = lu_and_piv
    factors, b = jnp.asarray(factors), jnp.asarray(b)
    if trans not in (0, 1, 2):
        raise ValueError(f"'trans' value must be 0, 1, or 2, got {trans}")
    m = factors.shape[-1]
    permutation = _lax_linalg.lu_pivots_to_permutation(pivots, m)
    vector = b.ndim == factors.ndim - 1
    x = b[..., None] if vector else b
    if trans == 0:
        x = jnp.take_along_axis(x, permutation[..., :, None], axis=-2)
        x = _lax_linalg.triangular_solve(factors, x, left_side=True, lower=True,
                                         unit_diagonal=True)
        x = _lax_linalg.triangular_solve(factors, x, left_side=True, lower=False)
    else:
        conj = trans == 2
        x = _lax_linalg.triangular_solve(factors, x, left_side=True, lower=False,
                                         transpose_a=True, conjugate_a=conj)
        x = _lax_linalg.triangular_solve(factors, x, left_side=True, lower=True,
                                         unit_diagonal=True, transpose_a=True, conjugate_a=conj)
        x = jnp.take_along_axis(x, jnp.argsort(permutation, axis=-1)[..., :, None], axis=-2)
    return x[..., 0] if vector else x


def qr_multiply(a, c, mode="right", pivoting=False, conjugate=False, overwrite_a=False,
                overwrite_c=False):
    """``(Q @ c, R)`` (``mode='left'``) or ``(c @ Q, R)`` (``'right'``, the default) with the
    economic QR of ``a`` (``Q`` of ``min(m, n)`` columns, ``conjugate``: conjugated), as
    scipy's; a vector ``c`` gives a vector. With ``pivoting`` the QR is column-pivoted and
    its pivots come last: ``(out, R, p)``."""
    if mode not in ("right", "left"):
        raise ValueError(f"mode must be 'right' or 'left', got {mode!r}")
    a, c = jnp.asarray(a), jnp.asarray(c)
    dtype = jnp.result_type(a, c, float)
    a, c = a.astype(dtype), c.astype(dtype)
    onedim = c.ndim == 1
    if onedim:
        c = c[:, None] if mode == "left" else c[None, :]
    m, n = a.shape[-2:]
    k = min(m, n)
    if mode == "left" and c.shape[-2] != k:
        raise ValueError(f"Array shapes are not compatible for Q @ c operation: a has shape "
                         f"{tuple(a.shape)} so Q has {k} columns, but c has {c.shape[-2]} rows "
                         f"(expected {k}).")
    if mode == "right" and c.shape[-1] != m:
        raise ValueError(f"Array shapes are not compatible for c @ Q operation: a has shape "
                         f"{tuple(a.shape)} so Q has {m} rows, but c has {c.shape[-1]} columns "
                         f"(expected {m}).")
    if pivoting:
        q, r, p = _lax_linalg.qr(a, pivoting=True, full_matrices=False)
    else:
        q, r = _np_linalg.qr(a, mode="reduced")
    if conjugate:
        q = jnp.conj(q)
    out = q @ c if mode == "left" else c @ q
    if onedim:
        out = out[..., :, 0] if mode == "left" else out[..., 0, :]
    return (out, r, p) if pivoting else (out, r)


# --- special matrices (scipy.linalg's constructors, as JAX builds them) ----------------------

def hankel(c, r=None):
    """The Hankel matrix with first column ``c`` and last row ``r`` (zeros when omitted;
    ``r[0]`` is ignored). Leading dimensions are batch dimensions, broadcast together."""
    c = jnp.asarray(c)
    r = jnp.zeros_like(c) if r is None else jnp.asarray(r)
    if c.ndim == 0:
        raise ValueError("hankel: c must be at least 1-dimensional, got a scalar.")
    if r.ndim == 0:
        raise ValueError("hankel: r must be at least 1-dimensional, got a scalar.")
    # batch ranks aligned here, so vectorizing promotes no rank (jax_numpy_rank_promotion)
    c = jnp.expand_dims(c, tuple(range(r.ndim - c.ndim))) if c.ndim < r.ndim else c
    r = jnp.expand_dims(r, tuple(range(c.ndim - r.ndim))) if r.ndim < c.ndim else r
    return jnp.vectorize(_hankel, signature="(m),(n)->(m,n)")(c, r)


def _hankel(c, r):
    m, n = c.shape[0], r.shape[0]
    if m == 0 or n == 0:
        return jnp.zeros((m, n), jnp.result_type(c, r))
    values = jnp.concatenate([c, r[1:]])
    return values[np.arange(m)[:, None] + np.arange(n)[None, :]]


def circulant(c):
    """The circulant matrix whose first column is ``c`` (each column the one before rolled
    down by one); leading dimensions are batch dimensions."""
    c = jnp.atleast_1d(jnp.asarray(c))
    n = c.shape[-1]
    index = (np.arange(n)[:, None] - np.arange(n)[None, :]) % max(n, 1)
    return c[..., index]


def leslie(f, s):
    """The Leslie matrix: fecundities ``f`` on its first row, survival rates ``s`` on its
    first subdiagonal."""
    f, s = jnp.atleast_1d(jnp.asarray(f)), jnp.atleast_1d(jnp.asarray(s))
    if f.shape[-1] < 2:
        raise ValueError(f"The length of f along the last axis must be at least 2; got shape "
                         f"{f.shape}.")
    if s.shape[-1] != f.shape[-1] - 1:
        raise ValueError(f"Incorrect lengths for f and s. The length of s along the last axis "
                         f"must be one less than the length of f; got f shape {f.shape} and s "
                         f"shape {s.shape}.")
    dtype = jnp.result_type(f, s)

    def one(fv, sv):
        return jnp.diag(sv.astype(dtype), k=-1).at[0].set(fv.astype(dtype))
    return jnp.vectorize(one, signature="(n),(m)->(n,n)")(f, s)


def _inexact(x):
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        x = x.astype(jnp.result_type(float))
    return x


def companion(a):
    """The companion matrix of the polynomial with coefficients ``a`` (highest first): first
    row ``-a[1:] / a[0]``, ones on the first subdiagonal."""
    a = jnp.atleast_1d(_inexact(a))
    if a.shape[-1] < 2:
        raise ValueError(f"The length of `a` along the last axis must be at least 2; got shape "
                         f"{a.shape}.")

    def one(v):
        m = v.shape[0] - 1
        return jnp.eye(m, m, k=-1, dtype=v.dtype).at[0].set(-v[1:] / v[0])
    return jnp.vectorize(one, signature="(n)->(m,m)")(a)


def fiedler(a):
    """The symmetric Fiedler matrix ``|a_i - a_j|``."""
    a = jnp.atleast_1d(jnp.asarray(a))
    return jnp.abs(a[..., :, None] - a[..., None, :])


def fiedler_companion(a):
    """The Fiedler companion matrix (pentadiagonal) of the polynomial with coefficients
    ``a`` (highest first), as scipy's and JAX's."""
    a = jnp.atleast_1d(_inexact(a))
    if a.shape[-1] == 0:
        raise ValueError(f"fiedler_companion requires the last axis of 'a' to have nonzero "
                         f"length, but got an array of shape {a.shape}.")
    return jnp.vectorize(_fiedler_companion, signature="(n)->(m,m)")(a)


def _fiedler_companion(a):
    n = a.shape[0] - 1
    if n == 0:
        return jnp.zeros((0, 0), a.dtype)
    a = a / a[0]
    if n == 1:
        return -jnp.reshape(a[1:], (1, 1))
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    super_val = -a[np.minimum(i + 2, n)]
    sub_val = -a[np.minimum(i + 1, n)]
    even, odd = i % 2 == 0, i % 2 == 1
    one, zero = jnp.ones((), a.dtype), jnp.zeros((), a.dtype)
    conditions = [(i == 0) & (j == 0), (i == 1) & (j == 0), (j == i + 1) & even,
                  (j == i + 2) & even, (j == i - 1) & even & (i >= 2),
                  (j == i - 2) & odd & (i >= 3)]
    choices = [-a[1], one, super_val, one, sub_val, one]
    return jnp.select([jnp.asarray(c) for c in conditions],
                      [jnp.broadcast_to(c, (n, n)) for c in choices], zero)


def convolution_matrix(a, n, mode="full"):
    """The Toeplitz matrix ``A`` with ``A @ v`` the convolution of ``a`` with a length-``n``
    ``v`` (``mode`` 'full', 'valid' or 'same', as ``np.convolve``)."""
    n = int(n)
    if n <= 0:
        raise ValueError(f"n must be a positive integer; got {n}.")
    a = jnp.asarray(a)
    if a.ndim == 0:
        raise ValueError("convolution_matrix: a must be at least 1-dimensional, got a scalar.")
    m = a.shape[-1]
    if m < 1:
        raise ValueError(f"len(a) must be at least 1; got shape {a.shape}.")
    if mode not in ("full", "valid", "same"):
        raise ValueError(f"mode must be one of 'full', 'valid', 'same'; got {mode!r}.")
    widths = [(0, 0)] * (a.ndim - 1) + [(0, n - 1)]
    az, raz = jnp.pad(a, widths), jnp.pad(jnp.flip(a, axis=-1), widths)
    total = m + n - 1
    if mode == "same":
        trim = min(n, m) - 1
        tb, te = trim // 2, trim - trim // 2
    elif mode == "valid":
        tb = te = min(n, m) - 1
    else:
        tb = te = 0
    return toeplitz(az[..., tb:total - te], raz[..., total - n - tb:total - tb])


def _default_float():
    return jnp.result_type(float)


def hilbert(n):
    """The Hilbert matrix ``1 / (i + j + 1)`` of order ``n``."""
    a = np.arange(n, dtype=np.float64)[:, None]
    return jnp.asarray(1 / (a + a.T + 1), dtype=_default_float())


def invhilbert(n):
    """The inverse of the Hilbert matrix of order ``n`` (its integer entries computed
    exactly, then rounded to the default float dtype)."""
    from math import comb
    values = [[(-1) ** (i + j) * (i + j + 1) * comb(n + i, n - j - 1) * comb(n + j, n - i - 1)
               * comb(i + j, i) ** 2 for j in range(n)] for i in range(n)]
    return jnp.asarray(np.array(values, dtype=np.float64).reshape(n, n),
                       dtype=_default_float())


def _pascal_lower(n, inverse):
    from math import comb
    values = [[(-1) ** (i - j) * comb(i, j) if inverse else comb(i, j) for j in range(n)]
              for i in range(n)]
    return np.array(values, dtype=np.float64).reshape(n, n)


def _pascal_kind(kind):
    kind = "symmetric" if kind is None else kind
    if kind not in ("symmetric", "lower", "upper"):
        raise ValueError(f"Expected kind to be one of: ['symmetric', 'lower', 'upper']; got "
                         f"{kind}")
    return kind


def pascal(n, kind=None):
    """The Pascal matrix of order ``n``: binomial coefficients, ``kind`` 'symmetric' (the
    default), 'lower' or 'upper'; float32 as JAX's."""
    kind = _pascal_kind(kind)
    lower = _pascal_lower(n, inverse=False)
    out = lower if kind == "lower" else lower.T if kind == "upper" else lower @ lower.T
    return jnp.asarray(out, dtype=np.float32)


def invpascal(n, kind=None):
    """The inverse of ``pascal(n, kind)``."""
    kind = _pascal_kind(kind)
    lower = _pascal_lower(n, inverse=True)
    out = lower if kind == "lower" else lower.T if kind == "upper" else lower.T @ lower
    return jnp.asarray(out, dtype=_default_float())


def helmert(n, full=False):
    """The Helmert matrix of order ``n``: its last ``n - 1`` rows (all ``n`` with ``full``,
    the first being ``1 / sqrt(n)``), orthonormal rows orthogonal to the ones vector."""
    n = int(n)
    if n < 1:
        raise ValueError(f"n must be a positive integer; got {n}.")
    i, j = np.arange(n - 1)[:, None], np.arange(n)[None, :]
    k = (i + 1).astype(np.float64)
    denom = np.sqrt(k * (k + 1))
    h = np.where(j <= i, 1.0 / denom, np.where(j == i + 1, -k / denom, 0.0))
    if full:
        h = np.concatenate([np.full((1, n), 1.0 / np.sqrt(n)), h], axis=0)
    return jnp.asarray(h, dtype=_default_float())


def hadamard(n, dtype=int):
    """The Hadamard matrix of order ``n`` (a power of 2), Sylvester's construction."""
    n = int(n)
    if n < 1 or not math.log2(n).is_integer():
        raise ValueError(f"n must be a positive power of 2; got {n}.")
    h = np.ones((1, 1), np.int64)
    for _ in range(int(math.log2(n))):
        h = np.block([[h, h], [h, -h]])
    return jnp.asarray(h).astype(dtype)


def dft(n, scale=None, *, dtype=None):
    """The discrete Fourier transform matrix ``exp(-2 pi i j k / n)``, divided by ``sqrt(n)``
    or ``n`` for ``scale`` 'sqrtn' or 'n'."""
    if scale is not None and scale not in ("sqrtn", "n"):
        raise ValueError(f"scale must be None, 'sqrtn', or 'n'; got {scale!r}.")
    dtype = jnp.result_type(complex) if dtype is None else np.dtype(dtype)
    if not jnp.issubdtype(dtype, jnp.complexfloating):
        raise ValueError(f"dtype must be a complex floating-point type; got {dtype}.")
    a = np.arange(n)
    omegas = np.exp(-2j * np.pi * ((a[:, None] * a[None, :]) % max(n, 1)) / max(n, 1))
    if scale == "sqrtn":
        omegas = omegas / np.sqrt(n)
    elif scale == "n":
        omegas = omegas / n
    return jnp.asarray(omegas).astype(dtype)


__all__ += ["qr_multiply", "circulant", "companion", "convolution_matrix", "dft", "fiedler",
            "fiedler_companion", "hadamard", "hankel", "helmert", "hilbert", "invhilbert",
            "invpascal", "leslie", "pascal"]


# --- Schur decomposition and the functions built on it ---------------------------------------

def _complex_dtype(x):
    """The complex dtype a value of ``x``'s dtype converts to (the default one for integers)."""
    return jnp.result_type(x, 1j)


def schur(a, output="real"):
    """``(T, Z)`` with ``a = Z T Z^H``: ``T`` quasi-triangular (``output='real'``: a 2x2
    block on the diagonal for each complex conjugate pair of eigenvalues of a real ``a``) or
    triangular (``'complex'``, ``a`` converted to complex first), as LAPACK's gees."""
    if output not in ("real", "complex"):
        raise ValueError(
            f"Expected 'output' to be either 'real' or 'complex', got {output=}.")
    a = jnp.asarray(a)
    if output == "complex":
        a = a.astype(_complex_dtype(a))
    return _lax_linalg.schur(a)


def _rsf2csf_2d(T, Z):
    """scipy's rsf2csf on one matrix: each 2x2 block of the real Schur form (bottom up) is
    made triangular by a Givens rotation built from its first eigenvalue."""
    dtype = jnp.result_type(_complex_dtype(T), _complex_dtype(Z))
    T, Z = T.astype(dtype), Z.astype(dtype)
    eps = jnp.finfo(dtype).eps
    n = T.shape[0]
    if n == 1:
        return T, Z
    columns = jnp.arange(n)

    def update(m, T, Z):
        block = lax.dynamic_slice(T, (m - 1, m - 1), (2, 2))
        mu = _np_linalg.eigvals(block) - T[m, m]
        r = _np_linalg.norm(jnp.stack([mu[0], T[m, m - 1]])).astype(dtype)
        c = mu[0] / r
        s = T[m, m - 1] / r
        G = jnp.stack([jnp.stack([jnp.conj(c), s]), jnp.stack([-s, c])]).astype(dtype)
        rows = lax.dynamic_slice_in_dim(T, m - 1, 2, axis=0)
        keep = columns < m - 1
        rows = jnp.where(keep, rows, G @ jnp.where(keep, 0, rows))
        T = lax.dynamic_update_slice_in_dim(T, rows, m - 1, axis=0)
        cols = lax.dynamic_slice_in_dim(T, m - 1, 2, axis=1)
        upper = columns[:, None] < m + 1
        GH = jnp.conj(G).T
        cols = jnp.where(upper, jnp.where(upper, cols, 0) @ GH, cols)
        T = lax.dynamic_update_slice_in_dim(T, cols, m - 1, axis=1)
        zc = lax.dynamic_slice_in_dim(Z, m - 1, 2, axis=1)
        Z = lax.dynamic_update_slice_in_dim(Z, zc @ GH, m - 1, axis=1)
        return T, Z

    def step(i, TZ):
        m = n - i
        T, Z = TZ
        big = jnp.abs(T[m, m - 1]) > eps * (jnp.abs(T[m - 1, m - 1]) + jnp.abs(T[m, m]))
        T, Z = lax.cond(big, update, lambda m, T, Z: (T, Z), m, T, Z)
        T = T.at[m, m - 1].set(0)
        return T, Z

    return lax.fori_loop(1, n, step, (T, Z))


def rsf2csf(T, Z, check_finite=True):
    """The complex Schur form ``(T, Z)`` of a real Schur form ``T`` with Schur vectors ``Z``
    (leading dimensions broadcast), as scipy's rsf2csf."""
    T, Z = jnp.asarray(T), jnp.asarray(Z)
    if T.ndim < 2 or T.shape[-1] != T.shape[-2]:
        raise ValueError("Input 'T' must be square.")
    if Z.ndim < 2 or Z.shape[-1] != Z.shape[-2]:
        raise ValueError("Input 'Z' must be square.")
    if T.shape[-1] != Z.shape[-1]:
        raise ValueError(f"Input array shapes must match: Z: {Z.shape} vs. T: {T.shape}")
    return jnp.vectorize(_rsf2csf_2d, signature="(n,n),(n,n)->(n,n),(n,n)")(T, Z)


def _superdiagonals(n):
    """The masks of the upper triangle's superdiagonals 1 .. n-1 (numpy, static)."""
    rows, cols = np.indices((n, n))
    return [cols - rows == p for p in range(1, n)]


def _sqrtm_triu(T):
    """The upper triangular square root ``U`` of the triangular ``T`` (Bjorck and
    Hammarling's recurrence, one superdiagonal at a time: ``U[i, j]`` needs only entries of
    lower superdiagonals); an entry whose numerator is zero is zero (so a singular ``T`` with
    zeros above its zero eigenvalues has a root)."""
    diag = jnp.sqrt(jnp.diagonal(T))
    n = diag.shape[0]
    U = jnp.diag(diag)
    denominator = diag[:, None] + diag[None, :]
    for mask in _superdiagonals(n):
        s = U @ U             # the entries of this superdiagonal are the sums over i < k < j
        value = jnp.where(T == s, 0, (T - s) / jnp.where(mask, denominator, 1))
        U = jnp.where(mask, value, U)
    return U


def sqrtm(A, blocksize=1):
    """The principal square root of a square matrix, complex, from its complex Schur form
    (``Z sqrt(T) Z^H``), as JAX's; ``blocksize`` > 1 is not supported, as JAX's."""
    if blocksize > 1:
        raise NotImplementedError("Blocked version is not implemented yet.")
    A = jnp.asarray(A)
    if A.ndim != 2:
        raise ValueError("diag input must be 1d or 2d")
    T, Z = schur(A, output="complex")
    root = _sqrtm_triu(T)
    return Z @ root @ jnp.conj(Z.T)


def _parlett(F, T):
    """Golub and Van Loan's algorithm 11.1.1 (Parlett's recurrence): ``f(T)`` of the upper
    triangular ``T`` from its diagonal ``F``, one superdiagonal at a time, with the smallest
    distance between two of its eigenvalues (and ``|T[0, 0]|``)."""
    n = T.shape[0]
    diag = jnp.diagonal(T)
    den = diag[None, :] - diag[:, None]
    minden = jnp.abs(T[0, 0])
    for mask in _superdiagonals(n):
        s = T @ F - F @ T     # this superdiagonal of F is still zero: s is its numerator
        d = jnp.where(mask, den, 1)
        F = jnp.where(mask, jnp.where(den != 0, s / d, s), F)
        minden = jnp.minimum(minden, jnp.min(jnp.where(mask, jnp.abs(den), jnp.inf)))
    return F, minden


def funm(A, func, disp=True):
    """``func`` of a square matrix: ``func`` applied to the eigenvalues on the diagonal of
    ``A``'s complex Schur form, extended above it by Parlett's recurrence (complex result);
    without ``disp`` also the error estimate, as JAX's."""
    A = jnp.asarray(A)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError("expected square array_like input")
    T, Z = schur(A)
    T, Z = rsf2csf(T, Z)
    F = jnp.diag(func(jnp.diagonal(T))).astype(T.dtype)
    F, minden = _parlett(F, T)
    F = Z @ F @ jnp.conj(Z.T)
    if disp:
        return F
    single = F.dtype == np.complex64
    tol = np.finfo(np.float32 if single else np.float64).eps
    minden = jnp.where(minden == 0.0, tol, minden)
    err = jnp.where(jnp.any(jnp.isinf(F)), np.inf, jnp.minimum(1, jnp.maximum(
        tol, (tol / minden) * _np_linalg.norm(jnp.triu(T, 1), 1))))
    return F, err


def _sylvester_triangular(R, L, F):
    """``Y`` with ``R Y + Y L = F``, ``R`` upper and ``L`` lower triangular (Bartels and
    Stewart): the columns from the last, each a triangular solve."""
    m, n = F.shape
    eye = jnp.eye(m, dtype=F.dtype)

    def column(t, Y):
        j = n - 1 - t
        rhs = F[:, j] - Y @ L[:, j]         # Y's columns up to j are still zero
        y = _lax_linalg.triangular_solve(R + L[j, j] * eye, rhs[:, None], left_side=True,
                                         lower=False)
        return Y.at[:, j].set(y[:, 0])

    return lax.fori_loop(0, n, column, jnp.zeros((m, n), F.dtype))


def _solve_sylvester_2d(A, B, C, *, method, tol):
    if method == "schur":
        R, U = schur(A, output="complex")
        S, V = schur(jnp.conj(B).T, output="complex")
        F = jnp.conj(U).T @ C.astype(R.dtype) @ V
        Y = _sylvester_triangular(R, jnp.conj(S).T, F)
        X = U @ Y @ jnp.conj(V).T
    elif method == "eigen":
        RA, UA = _np_linalg.eig(A)
        RB, UB = _np_linalg.eig(B)
        F = solve(UA, C.astype(RA.dtype) @ UB)
        Y = F / (RA[:, None] + RB[None, :])
        X = UA @ Y @ inv(UB)
    else:
        raise ValueError(f"Unrecognized method {method}. The two valid methods are either "
                         "\"schur\" or \"eigen\".")
    if not jnp.issubdtype(C.dtype, jnp.complexfloating):
        X = jnp.real(X)
    close = jnp.abs(_np_linalg.eigvals(A)[:, None] + _np_linalg.eigvals(B)[None, :]) < tol
    return jnp.where(jnp.any(close), jnp.nan, X).astype(X.dtype)


def solve_sylvester(A, B, C, *, method="schur", tol=1e-8):
    """``X`` with ``A X + X B = C`` (leading dimensions broadcast): Bartels and Stewart's
    method on the complex Schur forms (``'schur'``) or the eigendecompositions
    (``'eigen'``); NaNs where an eigenvalue of ``A`` and one of ``B`` sum to less than
    ``tol`` in magnitude (no unique solution), as JAX's."""
    A, B, C = jnp.asarray(A), jnp.asarray(B), jnp.asarray(C)
    dtype = jnp.result_type(A, B, C, float)
    A, B, C = A.astype(dtype), B.astype(dtype), C.astype(dtype)
    m, n = C.shape[-2:]
    if A.shape[-2:] != (m, m) or B.shape[-2:] != (n, n):
        raise ValueError(f"Incompatible shapes for Sylvester equation:\nA: {A.shape}\n"
                         f"B: {B.shape}\nC: {C.shape}")
    def solve_one(a, b, c):
        return _solve_sylvester_2d(a, b, c, method=method, tol=tol)
    return jnp.vectorize(solve_one, signature="(m,m),(n,n),(m,n)->(m,n)")(A, B, C)


def hessenberg(a, *, calc_q=False, overwrite_a=False, check_finite=True):
    """The Hessenberg form ``H`` of a square matrix (``(H, Q)`` with ``a = Q H Q^H`` when
    ``calc_q``), from LAPACK's gehrd reflectors, as JAX's."""
    a = jnp.asarray(a)
    n = a.shape[-1]
    if n == 0:
        return (jnp.zeros_like(a), jnp.zeros_like(a)) if calc_q else jnp.zeros_like(a)
    a_out, taus = _lax_linalg.hessenberg(a)
    h = jnp.triu(a_out, -1)
    if not calc_q:
        return h
    q = _lax_linalg.householder_product(a_out[..., 1:, :-1], taus)
    batch = a_out.shape[:-2]
    top = jnp.concatenate([jnp.ones(batch + (1, 1), a_out.dtype),
                           jnp.zeros(batch + (1, n - 1), a_out.dtype)], axis=-1)
    bottom = jnp.concatenate([jnp.zeros(batch + (n - 1, 1), a_out.dtype), q], axis=-1)
    return h, jnp.concatenate([top, bottom], axis=-2)


def expm_frechet(A, E, *, method=None, compute_expm=True):
    """The Frechet derivative of ``expm`` at ``A`` in the direction ``E`` (the JVP of
    ``expm``), with ``expm(A)`` first unless ``compute_expm`` is False; ``method`` is
    ignored, as JAX's."""
    A, E = jnp.asarray(A), jnp.asarray(E)
    if A.ndim < 2 or A.shape[-2] != A.shape[-1]:
        raise ValueError(f"expected A to be a (batched) square matrix, got A.shape={A.shape}")
    if E.ndim < 2 or E.shape[-2] != E.shape[-1]:
        raise ValueError(f"expected E to be a (batched) square matrix, got E.shape={E.shape}")
    if A.shape != E.shape:
        raise ValueError("expected A and E to be the same shape, got "
                         f"A.shape={A.shape} E.shape={E.shape}")
    fn = functools.partial(expm, upper_triangular=False, max_squarings=16)
    expm_A, frechet = _jvp(fn, (A,), (E,))
    return (expm_A, frechet) if compute_expm else frechet
