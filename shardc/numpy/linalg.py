"""``shardc.numpy.linalg``: norms, determinants, inverses, solves and the Cholesky and QR
decompositions, differentiable, on the last two dimensions (leading ones are a batch).

>>> x = jnp.linalg.solve(a, b)          # a @ x == b
"""
from __future__ import annotations

import builtins
import functools
from typing import Any, NamedTuple

import numpy as np

from compiler.control_flow import fori_loop
from compiler.custom_ad import custom_jvp
from compiler.tracing import bind, weakened, weakly_typed
from compiler.vmap import vmap
from ir import dtypes as _dt
from ir import primitives as p
from ir.dtypes import real_dtype as _real_dtype
from shardc._compiled import LINALG as _COMPILED, mark_compiled as _mark_compiled
from shardc.dtypes import result_type
from shardc.numpy._arithmetic import abs, abs2, exp, isinf, isnan, power, sign, sqrt, where
from shardc.numpy._core import (asarray, astype, broadcast_to, concatenate, ones, ravel,
                                reshape, vary_like, zeros, zeros_like)
from shardc.numpy._creation import arange, eye
from shardc.numpy._diagonals import diagonal as numpy_diagonal, tril, triu
from shardc.numpy._index_routines import take_along_axis
from shardc.numpy._sorting import argsort
from shardc.numpy._manipulation import (broadcast_shapes, expand_dims, moveaxis, squeeze,
                                        swapaxes)
from shardc.numpy._products import (cross as numpy_cross, matmul, outer as numpy_outer,
                                    tensordot as numpy_tensordot, trace as numpy_trace,
                                    vecdot as numpy_vecdot)
from shardc.numpy._reductions import any as any_, argmax, cumprod, max, min, sum
from shardc.numpy._ufuncs import conj

builtins_max = builtins.max

__all__ = [
    "norm", "vector_norm", "matrix_norm", "det", "slogdet", "inv", "solve", "cholesky", "qr",
    "eigh", "eigvalsh", "matrix_power", "matrix_transpose", "trace", "outer", "multi_dot",
    "svd", "svdvals", "pinv", "lstsq", "matrix_rank", "cond", "eig", "eigvals", "cross",
    "diagonal", "tensordot", "vecdot", "tensorinv", "tensorsolve", "SVDResult", "EigResult",
    "EighResult", "QRResult", "SlogdetResult",
]


def _float(x):
    x = asarray(x) if not hasattr(x, "dtype") else x
    return astype(x, _dt.to_inexact(result_type(x)))     # JAX's promote_dtypes_inexact


def _weak_where_all(result, *operands):
    """``result`` weakly typed where every operand is (JAX's rule for its linear-algebra
    primitives: a weakly typed matrix gives a weakly typed factor or solution)."""
    return weakened(result) if all(weakly_typed(x) for x in operands) else result


def _square(name, a):
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"linalg.{name}: expected square matrices (shape [..., n, n]), got "
                         f"shape {a.shape}")


def cholesky(a, *, upper=False, symmetrize_input=True):
    """The lower factor ``L`` with ``a = L L^H`` (``upper=True``: ``U = L^H``, so that
    ``a = U^H U``). Only the Hermitian part of ``a`` is read (``symmetrize_input=False``: only
    its lower triangle and the real part of its diagonal, as LAPACK's potrf); a matrix that is
    not positive definite gives NaNs."""
    weak_a, a = a, _float(a)
    _square("cholesky", a)
    if not symmetrize_input:
        # the lower triangle, mirrored (the solver reads the Hermitian part, which is it)
        a = tril(a) + conj(swapaxes(tril(a, -1), -1, -2))
    lower = _weak_where_all(bind(p.cholesky_p, a), weak_a)
    return conj(swapaxes(lower, -1, -2)) if upper else lower


def qr(a, mode="reduced"):
    """``q, r`` with ``a = q r``, ``q`` orthonormal columns, ``r`` upper triangular;
    ``mode`` ``'reduced'`` (or ``'full'``, its old name, as JAX's), ``'complete'``, ``'r'``
    (only ``r``) or ``'raw'`` (LAPACK's geqrf reflectors, transposed as numpy's, and taus)."""
    if mode not in ("reduced", "complete", "r", "full", "raw"):
        raise ValueError(f"Unsupported QR decomposition mode '{mode}'")
    a = _float(a)
    if a.ndim < 2:
        raise ValueError(f"linalg.qr: expected matrices (shape [..., m, n]), got {a.shape}")
    if mode == "raw":
        from shardc.lax.linalg import geqrf
        factors, taus = geqrf(a)
        return QRResult(swapaxes(factors, -1, -2), taus)
    q, r = bind(p.qr_p, a, full_matrices=mode == "complete")
    return r if mode == "r" else QRResult(q, r)


def eigh(a, UPLO=None, symmetrize_input=True):
    """``(eigenvalues, eigenvectors)`` of symmetric (Hermitian) matrices: values ascending,
    vectors as columns. The Hermitian part ``(a + a^H)/2`` is read, or with
    ``symmetrize_input=False`` the triangle ``UPLO`` names (the lower one by default), as
    JAX's."""
    if UPLO not in (None, "L", "U"):
        raise ValueError(f"linalg.eigh: UPLO must be 'L' or 'U', got {UPLO!r}")
    a = _float(a)
    _square("eigh", a)
    if not symmetrize_input:
        # the named triangle, mirrored (the solver reads the Hermitian part, which is it)
        part = triu(a) if UPLO == "U" else tril(a)
        off = triu(a, 1) if UPLO == "U" else tril(a, -1)
        a = part + conj(swapaxes(off, -1, -2))
    vectors, values = bind(p.eigh_p, a)
    return EighResult(values, vectors)


def eigvalsh(a, UPLO="L"):
    """The eigenvalues of symmetric matrices, ascending."""
    return eigh(a, UPLO)[0]


def solve(a, b):
    """``x`` with ``a @ x == b``: ``b`` is one vector ``[n]`` (for every matrix) or matrices
    ``[..., n, k]``, batch dimensions broadcast (JAX since 0.5: a 2-D ``b`` is a matrix,
    never a batch of vectors)."""
    weak_ab, (a, b) = (a, b), (_float(a), _float(b))
    if a.ndim < 2:
        raise ValueError(f"left hand array must be at least two dimensional; got "
                         f"a.shape={a.shape}")
    _square("solve", a)
    if (b.ndim > 1 and a.ndim == b.ndim + 1 and a.shape[-1] == b.shape[-1]
            and a.shape[-1] != b.shape[-2]):
        raise ValueError(
            f"Invalid shapes for solve: {a.shape}, {b.shape}. Prior to JAX v0.5.0, this would "
            "have been treated as a batched 1-dimensional solve. To recover this behavior, use "
            "solve(a, b[..., None]).squeeze(-1).")
    return _weak_where_all(lax_solve(a, b, vector=b.ndim == 1), *weak_ab)


def lax_solve(a, b, vector=None):
    """``x`` with ``a @ x == b`` as ``jax.lax.linalg`` and ``jax.scipy.linalg`` solve: ``b``
    is ``[..., n]`` (one vector per matrix) when it has one dimension fewer than ``a``
    (``vector`` None), else ``[..., n, k]``; batch dimensions broadcast."""
    weak_ab, (a, b) = (a, b), (_float(a), _float(b))
    dtype = result_type(a, b)
    a, b = astype(a, dtype), astype(b, dtype)
    _square("solve", a)
    if vector is None:
        vector = b.ndim == 1 or b.ndim == a.ndim - 1
    if vector:
        b = b[..., None]
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = broadcast_to(a, batch + a.shape[-2:])
    b = broadcast_to(b, batch + b.shape[-2:])
    if b.shape[-2] != a.shape[-1]:
        raise ValueError(f"linalg.solve: b's rows ({b.shape[-2]}) must match a's size "
                         f"({a.shape[-1]})")
    x = _weak_where_all(bind(p.solve_p, a, b), *weak_ab)
    return x[..., 0] if vector else x


def inv(a):
    """The inverse of each square matrix (NaNs or infs for a singular one)."""
    a = _float(a)
    _square("inv", a)
    identities = broadcast_to(eye(a.shape[-1], dtype=a.dtype), a.shape)
    return bind(p.solve_p, a, identities)


def slogdet(a, *, method=None):
    """``(sign, log|det a|)`` per matrix, without overflow. ``method`` ('lu' or 'qr', JAX's
    choice of factorisation) changes nothing here, except that JAX's 'qr' refuses complex
    matrices."""
    if method not in (None, "lu", "qr"):
        raise ValueError(f"Unknown slogdet method '{method}'. Supported methods are 'lu' "
                         "(`None`), and 'qr'.")
    a = _float(a)
    if method == "qr" and np.issubdtype(a.dtype, np.complexfloating):
        raise NotImplementedError("slogdet method='qr' not implemented for complex inputs")
    _square("slogdet", a)
    sign, logabsdet = bind(p.slogdet_p, a)
    return SlogdetResult(sign, logabsdet)


def det(a):
    """The determinant: for 2x2 and 3x3 matrices their products of entries, else
    ``sign * exp(log|det|)`` whose derivative is the adjugate's, from an LU factorisation
    that a singular matrix does not break (JAX's ``_cofactor_solve``): the gradient at a
    singular matrix is its adjugate, not NaN."""
    a = _float(a)
    _square("det", a)
    if a.shape[-1] == 2:
        return a[..., 0, 0] * a[..., 1, 1] - a[..., 0, 1] * a[..., 1, 0]
    if a.shape[-1] == 3:
        return (a[..., 0, 0] * a[..., 1, 1] * a[..., 2, 2]
                + a[..., 0, 1] * a[..., 1, 2] * a[..., 2, 0]
                + a[..., 0, 2] * a[..., 1, 0] * a[..., 2, 1]
                - a[..., 0, 2] * a[..., 1, 1] * a[..., 2, 0]
                - a[..., 0, 0] * a[..., 1, 2] * a[..., 2, 1]
                - a[..., 0, 1] * a[..., 1, 0] * a[..., 2, 2])
    return _det(a)


@custom_jvp
def _det(a):
    sign, logabsdet = slogdet(a)
    return sign * exp(logabsdet).astype(sign.dtype)


@_det.defjvp
def _det_jvp(primals, tangents):
    (a,), (da,) = primals, tangents
    value, adjugate_da = _cofactor_solve(a, da)
    return value, numpy_trace(adjugate_da, axis1=-1, axis2=-2)


def _cofactor_solve(a, b):
    """``(det(a), adjugate(a) @ b)`` for square ``a``, singular or not (JAX's construction):
    solve with the LU factors whose last pivot is replaced by ``1 / det`` of the rest, so a
    matrix of rank n-1 still gives its adjugate; a rank below that gives zeros."""
    n = a.shape[-1]
    if n == 1:
        return a[..., 0, 0], b
    factors, pivots, permutation = lu_factors(a)
    diag = numpy_diagonal(factors, axis1=-2, axis2=-1)
    parity = sum(astype(pivots != np.arange(n, dtype=np.int32), np.int32), axis=-1)
    sign = astype(1 - 2 * (parity % 2), a.dtype)
    partial_det = cumprod(diag, axis=-1) * sign[..., None]
    factors = factors.at[..., -1, -1].set(1.0 / partial_det[..., -2])
    upper = triu(factors)
    unit_lower = tril(factors, -1) + eye(n, dtype=a.dtype)
    # a rank below n-1: solving with U gives infinities or NaN, and the adjugate is zero
    probe = lax_solve(upper, ones(a.shape[:-1], a.dtype))
    deficient = any_(isnan(probe) | isinf(probe), axis=-1)[..., None, None]
    x = where(deficient, zeros_like(b), b)
    x = take_along_axis(x, permutation[..., :, None], axis=-2)
    x = lax_solve(unit_lower, x)
    x = concatenate([x[..., :-1, :] * partial_det[..., -1, None, None], x[..., -1:, :]],
                    axis=-2)
    x = lax_solve(upper, x)
    return partial_det[..., -1], where(deficient, zeros_like(x), x)


def lu_factors(x):
    """``(lu, pivots, permutation)`` of each matrix of ``x``: ``jax.lax.linalg.lu``."""
    x = asarray(x)
    if x.ndim < 2:
        raise ValueError(f"Argument to LU decomposition must have ndims >= 2, got {x.shape}")
    if not _dt.is_inexact(x.dtype):
        raise TypeError(f"lu does not accept dtype {x.dtype.name}: floating or complex only")
    batch = x.shape[:-2]
    flat = reshape(x, (-1,) + x.shape[-2:])
    factors, pivots, permutation = vmap(_lu_one)(flat)
    return (reshape(factors, x.shape), reshape(pivots, batch + pivots.shape[-1:]),
            reshape(permutation, batch + permutation.shape[-1:]))


def _lu_one(a):
    """One matrix's elimination (LAPACK's getrf): at step j, the row with the largest
    magnitude in column j (on or below the diagonal; the first of equals) is swapped up, its
    multipliers stored below the diagonal and the trailing block updated (a zero pivot
    column is left alone)."""
    m, n = a.shape
    rows, cols = arange(m), arange(n)

    def step(j, state):
        a, pivots, permutation = state
        magnitude = where(rows >= j, abs(a[:, j]), -1)
        p = astype(argmax(magnitude), np.int32)
        pivots = pivots.at[j].set(p)
        row_j, row_p = a[j], a[p]
        a = a.at[j].set(row_p).at[p].set(row_j)
        at_j, at_p = permutation[j], permutation[p]
        permutation = permutation.at[j].set(at_p).at[p].set(at_j)
        pivot = a[j, j]
        below = rows > j
        multipliers = where(below, a[:, j] / where(pivot == 0, 1, pivot), 0)
        trailing = below[:, None] & (cols > j)[None, :]
        a = where(trailing, a - multipliers[:, None] * a[j][None, :], a)
        a = where(below[:, None] & (cols == j)[None, :], multipliers[:, None], a)
        return a, pivots, permutation

    k = builtins.min(m, n)
    # the pivots vary over a shard_map body's axes as the matrix does (the loop mixes them)
    start = (a, vary_like(zeros((k,), np.int32), a), vary_like(arange(m, dtype=np.int32), a))
    return fori_loop(0, k, step, start) if k else start


def matrix_power(a, n):
    """``a`` multiplied by itself ``n`` times (an int; negative: powers of the inverse). An
    integer matrix keeps its dtype (wrapping as its products do), as JAX's."""
    a = asarray(a)
    n = int(n)
    if n < 0 or a.dtype.kind not in "iub":
        a = _float(a)
    _square("matrix_power", a)
    if n == 0:
        return broadcast_to(eye(a.shape[-1], dtype=a.dtype), a.shape)
    if n < 0:
        a, n = inv(a), -n
    if n <= 3:          # the products in JAX's order (so a split batch stays split too)
        return a if n == 1 else matmul(a, a) if n == 2 else matmul(matmul(a, a), a)
    square = result = None
    while n:            # binary powering from the lowest bit, as JAX's
        square = a if square is None else matmul(square, square)
        n, bit = divmod(n, 2)
        if bit:
            result = square if result is None else matmul(result, square)
    return result


def matrix_transpose(x):
    return swapaxes(x, -1, -2)


def trace(x, offset=0, dtype=None):
    out = numpy_trace(x, offset=offset, axis1=-2, axis2=-1)
    return out if dtype is None else astype(out, dtype)


def outer(x1, x2):
    return numpy_outer(x1, x2)


def multi_dot(arrays, *, precision=None):
    """The product of a chain of matrices (the first and last may be vectors), left to right.
    ``precision`` is checked as a dot's; shardc computes every product at the highest."""
    p.canonical_precision(precision)
    arrays = list(arrays)
    if len(arrays) < 2:
        raise ValueError("linalg.multi_dot: expected at least two arrays")
    out = arrays[0]
    for array in arrays[1:]:
        out = matmul(out, array)
    return out


def vector_norm(x, axis=None, keepdims=False, ord=2):
    """The ``ord``-norm of vectors along ``axis`` (None: the flattened array): ``ord`` a
    number, ``inf`` or ``-inf`` (0 counts non-zeros)."""
    x = _float(x)
    if axis is None:
        out = vector_norm(ravel(x), 0, False, ord)
        return reshape(out, (1,) * x.ndim) if keepdims else out
    magnitude = abs(x)
    if ord == np.inf:       # (from an initial 0, as JAX's: at 0 it shares the derivative)
        return max(magnitude, axis=axis, keepdims=keepdims, initial=0)
    if ord == -np.inf:
        return min(magnitude, axis=axis, keepdims=keepdims)
    if ord == 0:
        return sum(astype(x != 0, magnitude.dtype), axis=axis, keepdims=keepdims)
    if ord == 1:
        return sum(magnitude, axis=axis, keepdims=keepdims)
    if ord == 2:
        return sqrt(sum(abs2(x), axis=axis, keepdims=keepdims))
    if isinstance(ord, str):            # ('inf' is no order: np.inf is)
        raise ValueError(f"Invalid order '{ord}' for vector norm.")
    ord = float(ord)
    return power(sum(power(magnitude, ord), axis=axis, keepdims=keepdims), 1 / ord)


def matrix_norm(x, ord="fro", keepdims=False, axis=(-2, -1)):
    """``'fro'``, ``1``, ``-1``, ``inf``, ``-inf``, and the singular values' ``2`` (largest),
    ``-2`` (smallest) and ``'nuc'`` (sum) norms of the matrices on ``axis``."""
    x = _float(x)
    rows, cols = (a % x.ndim for a in axis)
    if rows == cols:
        raise ValueError(f"linalg.norm: a matrix norm needs two distinct axes, got {axis}")
    if ord in ("fro", None):
        out = sqrt(sum(abs2(x), axis=(rows, cols), keepdims=True))
    elif ord in (1, -1, np.inf, -np.inf):
        summed_axis, extreme_axis = (rows, cols) if ord in (1, -1) else (cols, rows)
        sums = sum(abs(x), axis=summed_axis, keepdims=True)
        out = (max(sums, axis=extreme_axis, keepdims=True, initial=0) if ord in (1, np.inf)
               else min(sums, axis=extreme_axis, keepdims=True))
    elif ord in (2, -2, "nuc"):
        moved = moveaxis(x, (rows, cols), (-2, -1))
        values = svdvals(moved)
        out = (max(values, axis=-1, initial=0) if ord == 2 else min(values, axis=-1) if ord == -2
               else sum(values, axis=-1))
        for a in sorted((rows, cols)):
            out = expand_dims(out, a)
    else:
        raise ValueError(f"linalg.norm: invalid matrix norm ord={ord!r}")
    return out if keepdims else squeeze(out, (rows, cols))


def norm(x, ord=None, axis=None, keepdims=False):
    """A vector or matrix norm, as numpy's: with ``axis`` None, the 2-norm of the flattened
    array when ``ord`` is None, else a vector norm (rank 1) or matrix norm (rank 2); an int
    ``axis`` gives vector norms, a pair matrix norms.

    >>> jnp.linalg.norm(jnp.array([3.0, 4.0]))        # 5
    """
    x = _float(x)
    if axis is None:
        if ord is None:
            return vector_norm(x, None, keepdims, 2)
        if x.ndim == 1:
            return vector_norm(x, 0, keepdims, ord)
        if x.ndim == 2:
            return matrix_norm(x, ord, keepdims, (0, 1))
        raise ValueError(f"linalg.norm: with ord={ord!r} and axis=None the array must have "
                         f"rank 1 or 2, got rank {x.ndim}")
    if isinstance(axis, (tuple, list)):
        if len(axis) == 1:
            return vector_norm(x, axis[0], keepdims, 2 if ord is None else ord)
        if len(axis) == 2:
            return matrix_norm(x, "fro" if ord is None else ord, keepdims, tuple(axis))
        raise ValueError(f"linalg.norm: axis must be an int or a pair, got {axis}")
    return vector_norm(x, int(axis), keepdims, 2 if ord is None else ord)


# --- the singular value decomposition and what is built on it --------------------------------

class SVDResult(NamedTuple):
    U: Any
    S: Any
    Vh: Any


class EigResult(NamedTuple):
    eigenvalues: Any
    eigenvectors: Any


class EighResult(NamedTuple):
    eigenvalues: Any
    eigenvectors: Any


class QRResult(NamedTuple):
    Q: Any
    R: Any


class SlogdetResult(NamedTuple):
    sign: Any
    logabsdet: Any


def svd(a, full_matrices=True, compute_uv=True, hermitian=False, subset_by_index=None):
    """``U, S, Vh`` with ``a = U diag(S) Vh``, singular values descending; ``compute_uv=False``:
    ``S`` only. Differentiable (not with ``full_matrices`` on non-square matrices, as JAX)."""
    if subset_by_index is not None:
        raise NotImplementedError("linalg.svd: subset_by_index is not supported by shardc")
    a = _float(a)
    if a.ndim < 2:
        raise ValueError(f"linalg.svd: expected matrices (shape [..., m, n]), got {a.shape}")
    if hermitian:
        # from the eigendecomposition of a's Hermitian part, as JAX's: the magnitudes of the
        # eigenvalues, descending (ties in reverse order), their signs moved into vh
        values, vectors = eigh(a)
        s = abs(values)
        order = argsort(s, axis=-1)[..., ::-1]
        s = take_along_axis(s, order, axis=-1)
        if not compute_uv:
            return s
        u = take_along_axis(vectors, order[..., None, :], axis=-1)
        signs = take_along_axis(sign(values), order, axis=-1)
        vh = conj(swapaxes(u * astype(signs[..., None, :], u.dtype), -1, -2))
        return SVDResult(u, s, vh)
    s, u, vt = bind(p.svd_p, a, full_matrices=bool(full_matrices) and bool(compute_uv))
    return SVDResult(u, s, vt) if compute_uv else s


def svdvals(x):
    """The singular values, descending."""
    return svd(x, compute_uv=False)


def pinv(a, rtol=None, hermitian=False, *, rcond=None):
    """The Moore-Penrose pseudo-inverse: singular values up to ``rtol`` (or its older name
    ``rcond``) times the largest (default ``10 max(m, n) eps``) are dropped."""
    if rcond is not None:
        if rtol is not None:
            raise ValueError("pinv: only one of rtol and rcond may be specified.")
        rtol = rcond
    arr = _float(a)
    m, n = arr.shape[-2:]
    if rtol is None:
        rtol = 10.0 * builtins_max(m, n) * float(np.finfo(_real_dtype(arr.dtype)).eps)
    return _pinv(arr, rtol)


@functools.partial(custom_jvp, nondiff_argnums=(1,))
def _pinv(a, rtol):
    u, s, vh = svd(conj(a), full_matrices=False)
    cutoff = asarray(rtol, s.dtype)[..., None] * s[..., 0:1]
    s = where(s > cutoff, s, np.inf).astype(u.dtype)
    return matmul(swapaxes(vh, -1, -2), swapaxes(u, -1, -2) / s[..., None])


@_pinv.defjvp
def _pinv_jvp(rtol, primals, tangents):
    """Golub and Pereyra's derivative of the pseudo-inverse (as JAX's): it holds where
    singular values repeat, which the SVD's own derivative does not (its 1/(s_i^2 - s_j^2)
    made NaN at the identity)."""
    (a,), (a_dot,) = primals, tangents
    p = _pinv(a, rtol)
    h = lambda x: conj(swapaxes(x, -1, -2))
    m, n = a.shape[-2:]
    if m >= n:
        s = matmul(matmul(p, h(p)), h(a_dot))
        t = matmul(matmul(h(a_dot), h(p)), p)
        p_dot = (-matmul(matmul(p, a_dot), p) + s - matmul(matmul(s, a), p) + t
                 - matmul(matmul(p, a), t))
    else:
        s = matmul(p, matmul(h(p), h(a_dot)))
        t = matmul(h(a_dot), matmul(h(p), p))
        p_dot = (-matmul(p, matmul(a_dot, p)) + s - matmul(s, matmul(a, p)) + t
                 - matmul(p, matmul(a, t)))
    return p, p_dot


def lstsq(a, b, rcond=None, *, numpy_resid=False):
    """The least-squares solution ``x`` of ``a x = b``, the residuals, the rank of ``a`` and
    its singular values (as JAX: residuals always computed unless ``numpy_resid``)."""
    a, b = _float(a), _float(b)
    if a.ndim != 2:
        raise TypeError(f"{a.ndim}-dimensional array given. Array must be two-dimensional")
    if b.ndim not in (1, 2):
        raise TypeError(f"{b.ndim}-dimensional array given. Array must be one or "
                        "two-dimensional")
    m, n = a.shape
    if b.shape[0] != m:
        raise TypeError("Leading dimensions of input arrays must match")
    b_orig_ndim = b.ndim
    if b_orig_ndim == 1:
        b = b[:, None]
    if a.size == 0:
        # nothing to fit: x is zeros (JAX's), no singular value, rank 0
        s = asarray(np.zeros((0,), _real_dtype(a.dtype)))
        rank = asarray(np.int32(0))
        x = asarray(np.zeros((n,) + b.shape[1:], a.dtype))
    else:
        eps = float(np.finfo(_real_dtype(a.dtype)).eps)
        rcond = eps * builtins_max(n, m) if rcond is None else (eps if rcond < 0 else rcond)
        u, s, vt = svd(a, full_matrices=False)
        # a zero singular value is no direction, whatever rcond is (a zero matrix fits by 0)
        mask = (s > 0) & (s >= asarray(rcond, s.dtype) * s[0])
        rank = sum(astype(mask, np.int32))
        safe_s = where(mask, s, 1).astype(a.dtype)
        s_inv = where(mask, 1 / safe_s, 0)[:, None]
        utb = matmul(swapaxes(conj(u), 0, 1), b)
        x = matmul(swapaxes(conj(vt), 0, 1), s_inv * utb)
    if numpy_resid and (int(rank) < n or m <= n):
        resid = asarray(np.array([], _real_dtype(a.dtype)))
    else:
        resid = norm(b - matmul(a, x), axis=0) ** 2
    if b_orig_ndim == 1:
        x = ravel(x)
    return x, resid, rank, s


def matrix_rank(M, rtol=None, *, hermitian=False, tol=None):
    """The number of singular values above ``rtol`` (or its older name ``tol``), an absolute
    threshold (default the largest times ``max(m, n) eps``)."""
    if tol is not None:
        if rtol is not None:
            raise ValueError("matrix_rank: only one of tol or rtol may be specified.")
        rtol = tol
    M = _float(M)
    if M.ndim < 2:
        return astype(any_(M != 0), np.int32)
    S = svd(M, full_matrices=False, compute_uv=False, hermitian=hermitian)
    if rtol is None:
        rtol = max(S, axis=-1) * float(builtins_max(M.shape[-2:])) * float(
            np.finfo(S.dtype).eps)
    rtol = expand_dims(asarray(rtol), np.ndim(rtol))
    return sum(astype(S > rtol, np.int32), axis=-1)


def cond(x, p=None):
    """The condition number in norm ``p`` (default: the ratio of extreme singular values);
    infinite where it overflows to NaN from a finite matrix."""
    x = _float(x)
    if x.ndim < 2:
        raise ValueError(f"jnp.linalg.cond: input array must be at least 2D; got {x.shape=}")
    if p is None or p == 2:
        s = svdvals(x)
        r = s[..., 0] / s[..., -1]
    elif p == -2:
        s = svdvals(x)
        r = s[..., -1] / s[..., 0]
    else:
        if x.shape[-2] != x.shape[-1]:
            raise ValueError(f"jnp.linalg.cond: for {p=}, array must be square; got "
                             f"{x.shape=}")
        r = norm(x, ord=p, axis=(-2, -1)) * norm(inv(x), ord=p, axis=(-2, -1))
    return where(isnan(r) & ~any_(isnan(x), axis=(-2, -1)), np.inf, r)


def eig(a):
    """Eigenvalues and right eigenvectors of a general square matrix (complex); not
    differentiable (JAX differentiates the eigenvalues only: see ``eigvals``)."""
    return _eig(a, enable_eigvec_derivs=False)


def _eig(a, *, enable_eigvec_derivs: bool):
    """``eig``, its eigenvectors differentiable where ``enable_eigvec_derivs`` (as
    ``lax.linalg.eig``'s)."""
    a = _float(a)
    _square("eig", a)
    values, vectors = bind(p.eig_p, a, compute_vectors=True,
                           enable_eigvec_derivs=bool(enable_eigvec_derivs))
    return EigResult(values, vectors)


def eigvals(a):
    """The eigenvalues of a general square matrix (complex), differentiable."""
    a = _float(a)
    _square("eigvals", a)
    (values,) = bind(p.eig_p, a, compute_vectors=False)
    return values


def cross(x1, x2, /, *, axis=-1):
    """The cross product of 3-vectors along ``axis``."""
    x1, x2 = asarray(x1), asarray(x2)
    if x1.shape[axis] != 3 or x2.shape[axis] != 3:
        raise ValueError("Both input arrays must be (arrays of) 3-dimensional vectors, but "
                         f"they have {x1.shape[axis]=} and {x2.shape[axis]=}")
    return numpy_cross(x1, x2, axis=axis)


def diagonal(x, /, *, offset=0):
    """The diagonals of the matrices on the last two dimensions."""
    return numpy_diagonal(x, offset=offset, axis1=-2, axis2=-1)


def tensordot(x1, x2, /, *, axes=2, precision=None, preferred_element_type=None):
    return numpy_tensordot(x1, x2, axes=axes)


def vecdot(x1, x2, /, *, axis=-1, precision=None, preferred_element_type=None):
    return numpy_vecdot(x1, x2, axis=axis)


def tensorinv(a, ind=2):
    """The inverse of ``a`` as a linear map from its last dimensions to its first ``ind``."""
    import operator
    arr = asarray(a)
    ind = operator.index(ind)
    if ind <= 0:
        raise ValueError(f"ind must be a positive integer; got {ind=}")
    contracting, batch = arr.shape[:ind], arr.shape[ind:]
    flat = (int(np.prod(contracting)), int(np.prod(batch)))
    if flat[0] != flat[1]:
        raise ValueError("tensorinv is only possible when the product of the first `ind` "
                         "dimensions equals that of the remaining dimensions. got "
                         f"{arr.shape=} with {ind=}.")
    return reshape(inv(reshape(arr, flat)), batch + contracting)


def tensorsolve(a, b, axes=None):
    """``x`` with ``tensordot(a, x, x.ndim) == b``."""
    a, b = asarray(a), asarray(b)
    if axes is not None:
        a = moveaxis(a, axes, len(axes) * (a.ndim - 1,))
    out_shape = a.shape[b.ndim:]
    if a.shape[:b.ndim] != b.shape:
        raise ValueError(f"b.shape must match a.shape[:b.ndim]; got {b.shape=}, {a.shape=}")
    if int(np.prod(out_shape)) != int(np.prod(b.shape)):
        raise ValueError("tensorsolve requires a.shape[b.ndim:] to have the same number of "
                         f"elements as b; got {a.shape=}, {b.shape=}")
    result = solve(reshape(a, (int(np.prod(b.shape)), int(np.prod(out_shape)))), ravel(b))
    return reshape(result, out_shape)


# the functions JAX jits, as such for the transfer guards
_mark_compiled(globals(), _COMPILED)
