"""Derivative rules of the matrix primitives (``cholesky``, ``qr``, ``solve``, ``slogdet``).

Each tangent is written with ``solve`` (linear in its right-hand side), ``dot_general`` and
masks, so reverse mode transposes it with the existing rules; ``solve``'s own transpose is a
solve with the transposed matrix.
"""
from __future__ import annotations

import numpy as np

from compiler.ad_core import Linear, jvp_rules, transpose_rules
from compiler.tracing import aval_of, bind
from ir import primitives as p


def _aval(x):
    return x.aval if isinstance(x, Linear) else aval_of(x)


def _mT(x):
    ndim = _aval(x).ndim
    return bind(p.transpose_p, x, permutation=tuple(range(ndim - 2)) + (ndim - 1, ndim - 2))


def _matmul(a, b):
    ndim = _aval(a).ndim
    batch = tuple(range(ndim - 2))
    return bind(p.dot_general_p, a, b, dimension_numbers=(((ndim - 1,), (ndim - 2,)),
                                                          (batch, batch)),
                preferred_element_type=_aval(a).dtype)


def _masked(x, mask: np.ndarray):
    """``x * mask`` with a constant ``[n, m]`` mask broadcast over the batch dimensions."""
    aval = _aval(x)
    mask = bind(p.broadcast_in_dim_p, mask.astype(aval.dtype), shape=aval.shape,
                broadcast_dimensions=(aval.ndim - 2, aval.ndim - 1))
    return bind(p.mul_p, x, mask)


def _solve_right(x, r):
    """``x r^-1`` as ``(r^-T x^T)^T``."""
    return _mT(bind(p.solve_p, _mT(r), _mT(x)))


def _solve_jvp(primals, tangents):
    (a, b), (ta, tb) = primals, tangents
    x = bind(p.solve_p, a, b)
    rhs = tb
    if ta is not None:
        correction = bind(p.neg_p, _matmul(ta, x))
        rhs = correction if tb is None else bind(p.add_p, tb, correction)
    return [x], [None if rhs is None else bind(p.solve_p, a, rhs)]


def _solve_transpose(ct, a, b):
    if isinstance(a, Linear):
        raise ValueError("solve is linear in its right-hand side only, not in the matrix")
    return [None, bind(p.solve_p, _mT(a), ct)]


def _real_only(name, a) -> None:
    """These rules are written for real matrices (transposes, not conjugate transposes):
    complex ones are refused rather than differentiated wrongly."""
    if np.issubdtype(_aval(a).dtype, np.complexfloating):
        raise NotImplementedError(f"shardc differentiates {name} of real matrices only, got "
                                  f"{_aval(a).str_short()}")


def _cholesky_jvp(primals, tangents):
    # dL = L phi(L^-1 sym(dA) L^-T), phi keeping the strict lower triangle and half the diagonal
    _real_only("cholesky", primals[0])
    (a,), (ta,) = primals, tangents
    lower = bind(p.cholesky_p, a)
    if ta is None:
        return [lower], [None]
    sym = bind(p.mul_p, bind(p.add_p, ta, _mT(ta)), np.asarray(0.5, _aval(a).dtype)[()])
    left = bind(p.solve_p, lower, sym)                      # L^-1 S
    inner = _mT(bind(p.solve_p, lower, _mT(left)))           # L^-1 S L^-T (S symmetric)
    n = _aval(a).shape[-1]
    phi = np.tril(np.ones((n, n)), -1) + 0.5 * np.eye(n)
    return [lower], [_matmul(lower, _masked(inner, phi))]


def _qr_jvp(primals, tangents, *, full_matrices):
    _real_only("qr", primals[0])
    (a,), (ta,) = primals, tangents
    q, r = bind(p.qr_p, a, full_matrices=full_matrices)
    if ta is None:
        return [q, r], [None, None]
    m, n = _aval(a).shape[-2:]
    if m < n or (full_matrices and m != n):
        raise NotImplementedError(
            f"the derivative of qr is implemented for m >= n (reduced) matrices; got a "
            f"{m}x{n} matrix with full_matrices={full_matrices}")
    qt_dx_rinv = _solve_right(_matmul(_mT(q), ta), r)
    strict_lower = _masked(qt_dx_rinv, np.tril(np.ones((n, n)), -1))
    omega = bind(p.sub_p, strict_lower, _mT(strict_lower))  # antisymmetric
    dq = bind(p.add_p, _matmul(q, bind(p.sub_p, omega, qt_dx_rinv)), _solve_right(ta, r))
    dr = _matmul(bind(p.sub_p, qt_dx_rinv, omega), r)
    return [q, r], [dq, dr]


def _slogdet_jvp(primals, tangents):
    # d log|det a| = trace(a^-1 da); the sign is piecewise constant
    _real_only("slogdet", primals[0])
    (a,), (ta,) = primals, tangents
    sign, logabsdet = bind(p.slogdet_p, a)
    if ta is None:
        return [sign, logabsdet], [None, None]
    aval = _aval(a)
    diagonal = _masked(bind(p.solve_p, a, ta), np.eye(aval.shape[-1]))
    trace = bind(p.reduce_sum_p, diagonal, axes=(aval.ndim - 2, aval.ndim - 1))
    return [sign, logabsdet], [None, trace]


def _eigh_jvp(primals, tangents):
    # with S = V^T sym(dA) V: dw = diag(S), dV = V (F * S), F_ij = 1 / (w_j - w_i) off the
    # diagonal and 0 on it (distinct eigenvalues assumed, as JAX's)
    _real_only("eigh", primals[0])
    (a,), (ta,) = primals, tangents
    vectors, values = bind(p.eigh_p, a)
    if ta is None:
        return [vectors, values], [None, None]
    aval = _aval(a)
    n, dtype = aval.shape[-1], aval.dtype
    sym = bind(p.mul_p, bind(p.add_p, ta, _mT(ta)), np.asarray(0.5, dtype)[()])
    rotated = _matmul(_mT(vectors), _matmul(sym, vectors))
    eye = np.eye(n)
    diagonal = bind(p.reduce_sum_p, _masked(rotated, eye), axes=(aval.ndim - 1,))
    batch = tuple(range(aval.ndim - 2))
    columns = bind(p.broadcast_in_dim_p, values, shape=aval.shape,
                   broadcast_dimensions=batch + (aval.ndim - 1,))
    rows = bind(p.broadcast_in_dim_p, values, shape=aval.shape,
                broadcast_dimensions=batch + (aval.ndim - 2,))
    gaps = bind(p.add_p, bind(p.sub_p, columns, rows),
                bind(p.broadcast_in_dim_p, eye.astype(dtype), shape=aval.shape,
                     broadcast_dimensions=(aval.ndim - 2, aval.ndim - 1)))
    weights = _masked(bind(p.div_p, np.asarray(1, dtype)[()], gaps), 1 - eye)
    return [vectors, values], [_matmul(vectors, bind(p.mul_p, weights, rotated)), diagonal]


jvp_rules[p.eigh_p] = _eigh_jvp


def _broadcast_last(x, aval, dim):
    """``x`` (the batch and one matrix dimension of ``aval``) broadcast along the other."""
    batch = tuple(range(aval.ndim - 2))
    return bind(p.broadcast_in_dim_p, x, shape=aval.shape, broadcast_dimensions=batch + (dim,))


def _svd_jvp(primals, tangents, *, full_matrices):
    """JAX's rule (real matrices; the full-matrices form has none, as in JAX): with
    dS = U^T dA V, ds = diag(dS); dU and dV from dS weighted by 1/(s_j^2 - s_i^2), and the
    parts of dA outside the span of U (m > n) or V (n > m)."""
    _real_only("svd", primals[0])
    (a,), (ta,) = primals, tangents
    s, u, vt = bind(p.svd_p, a, full_matrices=False)
    if ta is None:
        return [s, u, vt], [None, None, None]
    aval = _aval(a)
    m, n = aval.shape[-2:]
    if full_matrices and min(m, n) != max(m, n):
        raise NotImplementedError(
            "Singular value decomposition JVP not implemented for full matrices")
    k = min(m, n)
    dtype = aval.dtype
    v = _mT(vt)
    ds_full = _matmul(_mT(u), _matmul(ta, v))                      # [..., k, k]
    square = _aval(ds_full)
    eye = np.eye(k)
    ds = bind(p.reduce_sum_p, _masked(ds_full, eye), axes=(square.ndim - 1,))
    cols = _broadcast_last(s, square, square.ndim - 1)             # s_j
    rows = _broadcast_last(s, square, square.ndim - 2)             # s_i
    diffs = bind(p.mul_p, bind(p.add_p, cols, rows), bind(p.sub_p, cols, rows))
    ones = bind(p.broadcast_in_dim_p, eye.astype(dtype), shape=square.shape,
                broadcast_dimensions=(square.ndim - 2, square.ndim - 1))
    f = _masked(bind(p.div_p, np.asarray(1, dtype)[()], bind(p.add_p, diffs, ones)), 1 - eye)
    dss = bind(p.mul_p, cols, ds_full)                             # dS diag(s)
    sds = bind(p.mul_p, rows, ds_full)                             # diag(s) dS
    zero = bind(p.eq_p, s, np.asarray(0, dtype)[()])
    safe = bind(p.select_n_p, zero, s, bind(p.broadcast_in_dim_p, np.asarray(1, dtype)[()],
                                             shape=_aval(s).shape, broadcast_dimensions=()))
    s_inv = bind(p.select_n_p, zero, bind(p.div_p, np.asarray(1, dtype)[()], safe),
                 bind(p.broadcast_in_dim_p, np.asarray(0, dtype)[()], shape=_aval(s).shape,
                      broadcast_dimensions=()))
    s_inv_diag = _masked(_broadcast_last(s_inv, square, square.ndim - 1), eye)
    half = np.asarray(0.5, dtype)[()]
    du_dv_diag = bind(p.mul_p, bind(p.mul_p, bind(p.sub_p, ds_full, _mT(ds_full)), half),
                      s_inv_diag)
    du = _matmul(u, bind(p.add_p, bind(p.mul_p, f, bind(p.add_p, dss, _mT(dss))), du_dv_diag))
    dv = _matmul(v, bind(p.mul_p, f, bind(p.add_p, sds, _mT(sds))))
    if m > n:
        dav = _matmul(ta, v)
        rest = bind(p.sub_p, dav, _matmul(u, _matmul(_mT(u), dav)))
        du = bind(p.add_p, du, bind(p.div_p, rest, _broadcast_last(s, _aval(rest),
                                                                    _aval(rest).ndim - 1)))
    if n > m:
        dau = _matmul(_mT(ta), u)
        rest = bind(p.sub_p, dau, _matmul(v, _matmul(vt, dau)))
        dv = bind(p.add_p, dv, bind(p.div_p, rest, _broadcast_last(s, _aval(rest),
                                                                    _aval(rest).ndim - 1)))
    return [s, u, vt], [ds, du, _mT(dv)]


jvp_rules[p.svd_p] = _svd_jvp
jvp_rules[p.solve_p] = _solve_jvp
transpose_rules[p.solve_p] = _solve_transpose
jvp_rules[p.cholesky_p] = _cholesky_jvp
jvp_rules[p.qr_p] = _qr_jvp
jvp_rules[p.slogdet_p] = _slogdet_jvp


def _eig_jvp(primals, tangents, *, compute_vectors):
    """The eigenvalues' tangent, diag(V^-1 dA V) (JAX's; eigenvectors have none here)."""
    if compute_vectors:
        raise NotImplementedError(
            "Derivatives of non-symmetric eigenvectors are only valid under assumptions on "
            "the input that JAX cannot check (see the enable_eigvec_derivs argument to "
            "jax.lax.linalg.eig). Pass enable_eigvec_derivs=True to jax.lax.linalg.eig to opt "
            "in. See https://github.com/jax-ml/jax/issues/2748 for discussion.")
    (a,), (ta,) = primals, tangents
    values, vectors = bind(p.eig_p, a, compute_vectors=True)
    if ta is None:
        return [values], [None]
    dtype = _aval(vectors).dtype
    rotated = _matmul(bind(p.solve_p, vectors, bind(p.convert_element_type_p, ta,
                                                    new_dtype=dtype)), vectors)
    n = _aval(a).shape[-1]
    diagonal = bind(p.reduce_sum_p, _masked(rotated, np.eye(n)), axes=(_aval(a).ndim - 1,))
    return [values], [diagonal]


jvp_rules[p.eig_p] = _eig_jvp
