"""``shardc.lax.linalg``: JAX's lax-level linear algebra, with JAX's signatures and result
orders, over the decompositions ``shardc.numpy.linalg`` computes (batched over leading
dimensions, differentiable as those are).

>>> v, w = lax.linalg.eigh(a)          # eigenvectors first, as JAX's lax.linalg.eigh
"""
from __future__ import annotations

import enum

import numpy as np

from compiler.control_flow import fori_loop
from compiler.tracing import bind
from compiler.vmap import vmap
from ir import primitives as _p
import shardc.numpy as jnp
from shardc.numpy import linalg as _np_linalg
from shardc.numpy._core import vary_like

__all__ = ["EigImplementation", "EighImplementation", "SvdAlgorithm", "cholesky",
           "cholesky_update", "eig", "eigh",
           "geqp3", "geqrf", "hessenberg", "householder_product", "lu", "ormqr",
           "lu_pivots_to_permutation", "qr", "schur", "svd", "symmetric_product",
           "triangular_solve", "tridiagonal", "tridiagonal_solve"]


class SvdAlgorithm(enum.Enum):
    """JAX's ``lax.linalg.SvdAlgorithm``. On a CPU, as here, ``DEFAULT`` and
    ``DIVIDE_AND_CONQUER`` are LAPACK's gesdd and ``QR`` its gesvd; all three give the same
    decomposition (up to the signs of singular vectors). ``JACOBI`` and ``POLAR`` are GPU and
    TPU algorithms, refused as JAX refuses them on a CPU."""
    DEFAULT = "default"
    QR = "QR"
    JACOBI = "Jacobi"
    POLAR = "polar"
    DIVIDE_AND_CONQUER = "divide_and_conquer"


class EigImplementation(enum.Enum):
    """JAX's ``lax.linalg.EigImplementation``; only ``LAPACK`` exists on a CPU."""
    CUSOLVER = "cusolver"
    MAGMA = "magma"
    LAPACK = "lapack"


class EighImplementation(enum.Enum):
    """JAX's ``lax.linalg.EighImplementation``; on a CPU only ``QR`` (LAPACK's) exists."""
    QR = "qr"
    JACOBI = "jacobi"
    QDWH = "qdwh"


def _symmetrized(x):
    return (x + jnp.conj(jnp.swapaxes(x, -1, -2))) / 2


def _from_triangle(x, lower: bool):
    """The Hermitian matrix whose triangle ``lower`` names (with the diagonal's real part) is
    ``x``'s: what LAPACK reads of an input it is told is Hermitian."""
    tri = jnp.tril(x) if lower else jnp.triu(x)
    diagonal = jnp.real(jnp.diagonal(x, axis1=-2, axis2=-1))
    return (tri + jnp.conj(jnp.swapaxes(tri, -1, -2))
            - jnp.eye(x.shape[-1], dtype=x.dtype) * diagonal[..., None, :])


def cholesky(x, *, symmetrize_input: bool = True):
    """The lower Cholesky factor of each (Hermitian positive definite) matrix of ``x``; NaNs
    where one is not positive definite. Without ``symmetrize_input`` only the lower triangle
    is read."""
    x = jnp.asarray(x)
    return _np_linalg.cholesky(_symmetrized(x) if symmetrize_input else
                               _from_triangle(x, lower=True))


def cholesky_update(r_matrix, w_vector):
    """The upper Cholesky factor of ``A + w w^T`` from that of ``A = R^T R`` (``r_matrix``),
    in ``O(N^2)``: a Givens rotation per row folds ``w`` into ``R`` (LINPACK's ``dchud``);
    the diagonal stays positive."""
    r, w = jnp.asarray(r_matrix), jnp.asarray(w_vector)
    dtype = jnp.result_type(r, w)
    r, w = r.astype(dtype), w.astype(dtype)
    n = r.shape[-1]
    positions = jnp.arange(n)

    def row(k, carry):
        r, w = carry
        current, wk = r[k], w[k]
        rkk = current[k]
        radius = jnp.sqrt(rkk * rkk + wk * wk)
        cos, sin = radius / rkk, wk / rkk
        after = positions > k
        updated = jnp.where(after, (current + sin * w) / cos, current)
        updated = jnp.where(positions == k, radius, updated)
        w = jnp.where(after, cos * w - sin * updated, w)
        return r.at[k].set(updated), w

    return fori_loop(0, n, row, (r, w))[0]


def eig(x, *, compute_left_eigenvectors: bool = True, compute_right_eigenvectors: bool = True,
        enable_eigvec_derivs: bool = False, implementation=None, use_magma=None):
    """``[w, vl, vr]`` of general square matrices (the vectors asked for): eigenvalues, left
    eigenvectors (``vl[:, j]^H x = w[j] vl[:, j]^H``) and right ones, each vector of unit norm
    with its largest component real, as LAPACK's geev gives them (a left vector's sign, which
    LAPACK leaves to its algorithm, is chosen to make that component positive). Only LAPACK's
    implementation exists on a CPU, as JAX's."""
    if implementation is not None and implementation != EigImplementation.LAPACK:
        raise ValueError("Only the lapack implementation is supported on CPU.")
    x = jnp.asarray(x)
    if not (compute_left_eigenvectors or compute_right_eigenvectors):
        return [_np_linalg.eigvals(x)]
    w, vr = _np_linalg._eig(x, enable_eigvec_derivs=enable_eigvec_derivs)
    out = [w]
    if compute_left_eigenvectors:
        # the rows of vr's inverse are the left eigenvectors (conjugated), in w's order
        vl = jnp.conj(jnp.swapaxes(_np_linalg.inv(vr), -1, -2))
        if x.shape[-1]:
            # real divisors cast to the vectors' complex dtype first (the same quotients),
            # so that this runs under jax_numpy_dtype_promotion='strict' as JAX's does
            vl = vl / jnp.linalg.norm(vl, axis=-2, keepdims=True).astype(vl.dtype)
            top = jnp.take_along_axis(vl, jnp.argmax(jnp.abs(vl), axis=-2)[..., None, :],
                                      axis=-2)
            vl = vl * (jnp.conj(top) / jnp.abs(top).astype(top.dtype))
        out.append(vl)
    if compute_right_eigenvectors:
        out.append(vr)
    return out


def eigh(x, *, lower: bool = True, symmetrize_input: bool = True,
         sort_eigenvalues: bool = True, subset_by_index=None, implementation=None):
    """``(v, w)``: eigenvectors (columns) and ascending eigenvalues of Hermitian matrices.
    Without ``symmetrize_input`` only the triangle ``lower`` names is read, as LAPACK's.
    ``implementation``: ``EighImplementation.QR`` or None (JAX's CPU refuses the others)."""
    x = jnp.asarray(x)
    if subset_by_index is not None and tuple(subset_by_index) != (0, x.shape[-1]):
        raise NotImplementedError("lax.linalg.eigh: subset_by_index is not supported")
    if implementation == EighImplementation.QDWH:
        raise NotImplementedError("QDWH implementation is only supported on TPU")
    if implementation == EighImplementation.JACOBI:
        raise NotImplementedError("Jacobi implementation is not supported on CPU")
    if not symmetrize_input:
        x = _from_triangle(x, lower)
    w, v = _np_linalg.eigh(x)
    return v, w


def qr(x, *, pivoting: bool = False, full_matrices: bool = True, use_magma=None):
    """``(q, r)`` with ``x = q r`` (``full_matrices``: ``q`` square); with ``pivoting``,
    ``(q, r, p)`` with ``x[..., :, p] = q r``, the columns chosen as LAPACK's geqp3 chooses
    them (largest remaining norm first, so ``|diag(r)|`` does not increase). The pivots are
    fixed under differentiation; ``q`` and ``r`` differentiate as the QR decomposition of the
    permuted matrix."""
    if not pivoting:
        return _np_linalg.qr(x, mode="complete" if full_matrices else "reduced")
    x = jnp.asarray(x)
    _lapack_dtype("qr", x)
    *batch, m, n = x.shape
    if m == 0 or n == 0:
        q, r = _np_linalg.qr(x, mode="complete" if full_matrices else "reduced")
        return q, r, jnp.zeros((*batch, n), np.int32)
    jpvt = jnp.zeros((*batch, n), np.int32)
    _, p, _ = geqp3(_stop_gradient(x), jpvt)
    p = p - 1
    permuted = jnp.take_along_axis(x, jnp.broadcast_to(p[..., None, :], x.shape), axis=-1)
    q, r = _np_linalg.qr(permuted, mode="complete" if full_matrices else "reduced")
    return q, r, p


def _stop_gradient(x):
    return bind(_p.stop_gradient_p, x)


def _lapack_dtype(name, x, position=0):
    """JAX's TypeError for an operand LAPACK cannot take (neither real nor complex floats)."""
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        raise TypeError(f"{name} does not accept dtype {x.dtype.name} at position {position}. "
                        f"Accepted dtypes at position {position} are subtypes of floating, "
                        "complexfloating.")


def geqp3(a, jpvt, *, use_magma=None):
    """``(a, jpvt, taus)``: LAPACK's column-pivoted QR of each ``[..., m, n]`` matrix:
    ``r`` in the upper triangle, the Householder reflectors below it with their ``taus``
    (as ``geqrf``'s), and ``jpvt`` the 1-based column pivots (``a[..., jpvt - 1] = q r``);
    columns whose ``jpvt`` entry is nonzero on input are moved to the front and not
    pivoted."""
    a, jpvt = jnp.asarray(a), jnp.asarray(jpvt)
    _lapack_dtype("geqp3", a)
    if not jnp.issubdtype(jpvt.dtype, jnp.integer):
        raise TypeError(f"geqp3 does not accept dtype {jpvt.dtype.name} at position 1. "
                        "Accepted dtypes at position 1 are subtypes of integer.")
    return tuple(bind(_p.geqp3_p, a, jpvt))


def schur(x, *, compute_schur_vectors: bool = True, sort_eig_vals: bool = False,
          select_callable=None):
    """``(t, q)`` with ``x = q t q^H`` (``t`` alone, in a tuple, without
    ``compute_schur_vectors``), as LAPACK's gees: a real ``x`` gets the real Schur form
    (quasi-triangular: a standardised 2x2 block on the diagonal for each complex conjugate
    pair of eigenvalues) and a complex one the triangular complex form. NaNs for a matrix
    holding a NaN or infinity. Not differentiable (as JAX's)."""
    if sort_eig_vals:
        raise NotImplementedError(
            "The sort feature of LAPACK's gees routine is not implemented.")
    x = jnp.asarray(x)
    _lapack_dtype("schur", x)
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(f"The input to schur must be a square matrix. Got shape "
                         f"{x.shape[-2:]}.")
    outs = bind(_p.schur_p, x, compute_vectors=compute_schur_vectors)
    return tuple(outs) if compute_schur_vectors else (outs[0],)


def hessenberg(a):
    """``(a, taus)``: the upper Hessenberg form of each square matrix on and above its first
    subdiagonal, the reflectors that reduce it below (LAPACK's gehrd layout: ``Q`` is
    ``householder_product(a[..., 1:, :-1], taus)`` bordered by a one)."""
    a = jnp.asarray(a)
    _lapack_dtype("hessenberg", a)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"Argument to Hessenberg reduction must have shape [..., n, n], got "
                         f"shape {a.shape}")
    return tuple(bind(_p.hessenberg_p, a))


def tridiagonal(a, *, lower: bool = True):
    """``(a, d, e, taus)``: the reduction of each Hermitian matrix (the triangle ``lower``
    names; the other is not read and is returned as given) to real symmetric tridiagonal
    form, as LAPACK's sytrd/hetrd: the diagonal ``d`` and off-diagonal ``e``, the
    reflectors in that triangle of ``a`` below (above) the off-diagonal, and their ``taus``."""
    a = jnp.asarray(a)
    _lapack_dtype("tridiagonal", a)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2] or a.shape[-1] == 0:
        raise ValueError(f"The input to tridiagonal must be a square matrix. Got shape "
                         f"{a.shape[-2:]}.")
    return tuple(bind(_p.tridiagonal_p, a, lower=lower))


def svd(x, *, full_matrices: bool = True, compute_uv: bool = True, subset_by_index=None,
        algorithm=None):
    """``(u, s, vh)`` with ``x = u diag(s) vh`` (``s`` alone without ``compute_uv``).
    ``algorithm``: a ``SvdAlgorithm`` a CPU has (``DEFAULT``, ``QR``, ``DIVIDE_AND_CONQUER``:
    one decomposition) or None."""
    x = jnp.asarray(x)
    if (subset_by_index is not None
            and tuple(subset_by_index) != (0, min(x.shape[-2], x.shape[-1]))):
        raise NotImplementedError("lax.linalg.svd: subset_by_index is not supported")
    if algorithm in (SvdAlgorithm.JACOBI, SvdAlgorithm.POLAR):
        raise NotImplementedError(
            "The SVD Jacobi and Polar algorithms are not implemented on CPU.")
    return _np_linalg.svd(x, full_matrices=full_matrices, compute_uv=compute_uv)


def symmetric_product(a_matrix, c_matrix, *, alpha: float = 1., beta: float = 0.,
                      symmetrize_output: bool = False):
    """``alpha * A A^T + beta * C`` for batches of ``A`` (``[..., m, n]``) and symmetric ``C``
    (``[..., m, m]``), as JAX's CPU computes it (a batched matmul); with ``symmetrize_output``
    the upper triangle is the lower one's transpose (JAX promises only the lower triangle
    otherwise; here the whole product is computed)."""
    a, c = jnp.asarray(a_matrix), jnp.asarray(c_matrix)
    for name, x in (("a_matrix", a), ("c_matrix", c)):
        if x.ndim < 2:
            raise ValueError(f"symmetric_product: {name} must have at least 2 dimensions, "
                             f"got shape {x.shape}")
        if not jnp.issubdtype(x.dtype, jnp.floating):
            raise TypeError(f"symmetric_product does not accept dtype {x.dtype}. Accepted "
                            "dtypes are subtypes of floating.")
    if a.shape[-2] != c.shape[-1] or c.shape[-2] != c.shape[-1]:
        raise ValueError("symmetric_update expects a rectangular matrix of shape (m, n) and a "
                         f"square matrix of shape (n, n). Got shapes {a.shape[-2:]} and "
                         f"{c.shape[-2:]}.")
    result = alpha * jnp.matmul(a, jnp.swapaxes(a, -1, -2),
                                precision="highest") + beta * c
    if symmetrize_output:
        result = jnp.tril(result) + jnp.swapaxes(jnp.tril(result, -1), -1, -2)
    return result


def triangular_solve(a, b, *, left_side: bool = False, lower: bool = False,
                     transpose_a: bool = False, conjugate_a: bool = False,
                     unit_diagonal: bool = False):
    """``x`` with ``op(a) x = b`` (``left_side``) or ``x op(a) = b`` (the default, as JAX's),
    ``op`` transposing and/or conjugating the triangle of ``a`` that ``lower`` names
    (``unit_diagonal``: its diagonal read as ones)."""
    a, b = jnp.asarray(a), jnp.asarray(b)
    tri = jnp.tril(a) if lower else jnp.triu(a)
    if unit_diagonal:       # the diagonal is not read (a NaN there changes nothing)
        tri = jnp.where(jnp.eye(a.shape[-1], dtype=bool), jnp.ones((), a.dtype), tri)
    if conjugate_a:
        tri = jnp.conj(tri)
    if transpose_a:
        tri = jnp.swapaxes(tri, -1, -2)
    if left_side:
        return _np_linalg.lax_solve(tri, b)
    # x op(a) = b  <=>  op(a)^T x^T = b^T; a b of one dimension fewer than a is a batch of
    # (row) vectors, as JAX's
    if b.ndim == a.ndim - 1:
        return _np_linalg.lax_solve(jnp.swapaxes(tri, -1, -2), b, vector=True)
    solved = _np_linalg.lax_solve(jnp.swapaxes(tri, -1, -2), jnp.swapaxes(b, -1, -2))
    return jnp.swapaxes(solved, -1, -2)


def tridiagonal_solve(dl, d, du, b, *, perturb_singular: bool = False):
    """``x`` with ``A x = b`` for the tridiagonal ``A`` whose sub-, main and super-diagonals
    are ``dl``, ``d`` and ``du`` (``dl[..., 0]`` and ``du[..., -1]`` are ignored), ``b`` of
    shape ``[..., m, n]``. ``perturb_singular``: pivots of the partially pivoted LU smaller
    than ``eps * max|U|`` (at least the smallest normal number) are raised to that size, so a
    singular system gives a large finite solution rather than infinities or NaNs, as JAX's
    CPU solve does (inverse iteration relies on it)."""
    dl, d, du, b = (jnp.asarray(v) for v in (dl, d, du, b))
    for position, v in enumerate((dl, d, du, b)):
        if not jnp.issubdtype(v.dtype, jnp.inexact):
            raise TypeError(f"tridiagonal_solve does not accept dtype {v.dtype.name} at "
                            f"position {position}. Accepted dtypes at position {position} are "
                            "subtypes of floating, complexfloating.")
    m = d.shape[-1]
    if dl.shape != d.shape or du.shape != d.shape or b.shape[:-1] != d.shape:
        raise ValueError("tridiagonal_solve: dl, d and du must have one shape [..., m] and b "
                         f"[..., m, n]; got {dl.shape}, {d.shape}, {du.shape} and {b.shape}")
    rows = jnp.arange(m)
    # dl[0] and du[-1] lie outside the matrix: not read (a NaN there changes nothing)
    dl = jnp.where(rows == 0, jnp.zeros((), dl.dtype), dl)
    du = jnp.where(rows == m - 1, jnp.zeros((), du.dtype), du)
    eye = jnp.eye(m, dtype=bool)
    below, above = jnp.eye(m, k=-1, dtype=bool), jnp.eye(m, k=1, dtype=bool)
    # row i holds dl[i] left of the diagonal, d[i] on it and du[i] right of it
    zero = jnp.zeros((), d.dtype)
    matrix = (jnp.where(eye, d[..., :, None], zero) + jnp.where(below, dl[..., :, None], zero)
              + jnp.where(above, du[..., :, None], zero))
    if perturb_singular:
        return _perturbed_solve(matrix, b)
    return _np_linalg.lax_solve(matrix, b)


def _perturbed_solve(matrix, b):
    """``matrix^-1 b`` through the partially pivoted LU, its tiny pivots perturbed (see
    ``tridiagonal_solve``)."""
    factors, _, permutation = lu(matrix)
    m = matrix.shape[-1]
    upper = jnp.triu(factors)
    real = jnp.finfo(jnp.real(upper).dtype)
    biggest = jnp.max(jnp.abs(upper), axis=(-2, -1), keepdims=True)[..., 0]
    tol = jnp.maximum(real.eps * biggest, real.tiny)
    pivots = jnp.diagonal(upper, axis1=-2, axis2=-1)
    size = jnp.abs(pivots)
    direction = jnp.where(size > 0, pivots / jnp.where(size > 0, size, 1), 1)
    pivots = jnp.where(size < tol, (direction * tol).astype(pivots.dtype), pivots)
    upper = jnp.where(jnp.eye(m, dtype=bool), pivots[..., None, :], upper)
    rows = jnp.take_along_axis(b, permutation[..., :, None].astype(np.int32), axis=-2)
    y = triangular_solve(factors, rows, left_side=True, lower=True, unit_diagonal=True)
    return triangular_solve(upper, y, left_side=True, lower=False)


def householder_product(a, taus):
    """The ``[..., m, n]`` matrix of the first ``n`` columns of ``H_1 ... H_k`` (LAPACK's
    orgqr/ungqr): ``H_i = I - taus[i] v_i v_i^H``, ``v_i`` zero above row ``i``, one at it and
    ``a``'s column ``i`` below it (the reflectors geqrf leaves in ``a``)."""
    a, taus = jnp.asarray(a), jnp.asarray(taus)
    m, n = a.shape[-2:]
    k = taus.shape[-1]
    if m < n or k > n or a.shape[:-2] != taus.shape[:-1]:
        raise ValueError(f"householder_product: a must be [..., m, n] with m >= n and taus "
                         f"[..., k] with k <= n, of the same batch; got {a.shape} and "
                         f"{taus.shape}")
    dtype = jnp.result_type(a, taus)
    a, taus = a.astype(dtype), taus.astype(dtype)
    rows = np.arange(m)
    q = jnp.broadcast_to(jnp.eye(m, dtype=dtype), a.shape[:-2] + (m, m))
    for i in range(k):
        v = jnp.where(rows < i, jnp.zeros((), dtype),
                      jnp.where(rows == i, jnp.ones((), dtype), a[..., :, i]))
        qv = jnp.sum(q * v[..., None, :], axis=-1)
        q = q - taus[..., i, None, None] * qv[..., :, None] * jnp.conj(v)[..., None, :]
    return q[..., :, :n]


def geqrf(a):
    """``(r_and_reflectors, taus)``: LAPACK's geqrf form of the QR decomposition of each
    ``[..., m, n]`` matrix: ``r`` on and above the diagonal, the Householder vectors below it
    (each with an implicit unit at the diagonal) and their ``taus`` (``[..., min(m, n)]``),
    with ``Q = H_1 ... H_k``, ``H_i = I - taus[i] v_i v_i^H`` (dlarfg's choice of reflector:
    the diagonal becomes ``-sign(Re a_ii) * |column|``, real)."""
    a = jnp.asarray(a)
    if not jnp.issubdtype(a.dtype, jnp.inexact):
        a = a.astype(jnp.result_type(float))
    m, n = a.shape[-2:]
    k = min(m, n)
    zero = jnp.zeros((), a.dtype)
    taus = []
    for i in range(k):
        alpha = a[..., i, i]
        tail = a[..., i + 1:, i]
        tail_norm = jnp.sqrt(jnp.sum(jnp.abs(tail) ** 2, axis=-1))
        keep = (tail_norm == 0) & (jnp.imag(alpha) == 0)
        size = jnp.sqrt(jnp.abs(alpha) ** 2 + tail_norm ** 2)
        beta = jnp.where(jnp.real(alpha) >= 0, -size, size).astype(a.dtype)
        safe_beta = jnp.where(keep, jnp.ones((), a.dtype), beta)
        tau = jnp.where(keep, zero, (beta - alpha) / safe_beta)
        scale = jnp.where(keep, jnp.ones((), a.dtype), alpha - beta)
        v_tail = jnp.where(keep[..., None], tail, tail / scale[..., None])
        v = jnp.concatenate([jnp.ones(a.shape[:-2] + (1,), a.dtype), v_tail], axis=-1)
        rest = a[..., i:, i + 1:]
        if rest.shape[-1]:
            project = jnp.sum(jnp.conj(v)[..., :, None] * rest, axis=-2)
            rest = rest - jnp.conj(tau)[..., None, None] * v[..., :, None] * project[..., None, :]
            a = a.at[..., i:, i + 1:].set(rest)
        a = a.at[..., i, i].set(jnp.where(keep, alpha, beta))
        a = a.at[..., i + 1:, i].set(v_tail)
        taus.append(tau)
    taus = jnp.stack(taus, axis=-1) if taus else jnp.zeros(a.shape[:-2] + (0,), a.dtype)
    return a, taus


def ormqr(a, taus, c, *, left: bool = True, transpose: bool = False):
    """``Q @ c`` (``left``) or ``c @ Q``, ``Q`` (``transpose``: ``Q^H``) the product of the
    reflectors ``geqrf`` left in ``a`` and ``taus``, as LAPACK's ormqr/unmqr."""
    a, taus, c = jnp.asarray(a), jnp.asarray(taus), jnp.asarray(c)
    m, k = a.shape[-2], taus.shape[-1]
    square = a[..., :, :k]
    if m > k:
        square = jnp.pad(square, [(0, 0)] * (square.ndim - 1) + [(0, m - k)])
    q = householder_product(square, taus)
    if transpose:
        q = jnp.conj(jnp.swapaxes(q, -1, -2))
    return q @ c if left else c @ q


def lu(x):
    """``(lu, pivots, permutation)``: the LU decomposition with partial pivoting of each
    matrix of ``x`` (``[..., m, n]``), as LAPACK's getrf and JAX's: ``lu`` holds the unit lower
    factor below its diagonal and the upper factor on and above it; row ``i`` was swapped with
    row ``pivots[i]`` at step ``i``; ``x[..., permutation, :] = L @ U``. Differentiable (the
    elimination, for the pivots it chose)."""
    return _np_linalg.lu_factors(x)


def lu_pivots_to_permutation(pivots, permutation_size: int):
    """The permutation the row swaps ``pivots`` make of ``range(permutation_size)``."""
    pivots = jnp.asarray(pivots)
    if not permutation_size >= pivots.shape[-1]:
        raise ValueError(f"Output permutation size {permutation_size} has to exceed the "
                         f"trailing dimension of the pivots. Got pivots size "
                         f"{pivots.shape[-1]}")
    batch = pivots.shape[:-1]
    flat = jnp.reshape(pivots, (-1, pivots.shape[-1]))

    def one(piv):
        def swap(j, perm):
            at_j, at_p = perm[j], perm[piv[j]]
            return perm.at[j].set(at_p).at[piv[j]].set(at_j)
        start = vary_like(jnp.arange(permutation_size, dtype=np.int32), piv)
        return fori_loop(0, piv.shape[0], swap, start)

    return jnp.reshape(vmap(one)(flat), batch + (permutation_size,))
