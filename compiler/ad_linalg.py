"""Derivative rules of the matrix primitives (``cholesky``, ``qr``, ``solve``, ``slogdet``,
``eigh``, ``svd``, ``eig``), JAX's, for real and complex matrices (conjugate transposes where
JAX's rules have them, which are transposes for real matrices).

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


def _is_complex(x) -> bool:
    return np.issubdtype(_aval(x).dtype, np.complexfloating)


def _mH(x):
    """The conjugate transpose of complex matrices; the transpose of real ones."""
    return bind(p.conj_p, _mT(x)) if _is_complex(x) else _mT(x)


def _real_part(x):
    return bind(p.real_p, x) if _is_complex(x) else x


def _as_dtype(x, dtype):
    return x if _aval(x).dtype == dtype else bind(p.convert_element_type_p, x, new_dtype=dtype)


def _slice(x, rows=(None, None), cols=(None, None)):
    """``x[..., r0:r1, c0:c1]``."""
    shape = _aval(x).shape
    start = [0] * len(shape)
    limit = list(shape)
    for dim, (lo, hi) in ((len(shape) - 2, rows), (len(shape) - 1, cols)):
        start[dim] = 0 if lo is None else lo
        limit[dim] = shape[dim] if hi is None else hi
    return bind(p.slice_p, x, start_indices=tuple(start), limit_indices=tuple(limit),
                strides=None)


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


def _cholesky_jvp(primals, tangents):
    # dL = L phi(L^-1 herm(dA) L^-H), phi keeping the strict lower triangle and half the
    # diagonal (JAX's; for real matrices the conjugate transposes are transposes)
    (a,), (ta,) = primals, tangents
    lower = bind(p.cholesky_p, a)
    if ta is None:
        return [lower], [None]
    sym = bind(p.mul_p, bind(p.add_p, ta, _mH(ta)), np.asarray(0.5, _aval(a).dtype)[()])
    left = bind(p.solve_p, lower, sym)                      # L^-1 S
    inner = _mH(bind(p.solve_p, lower, _mH(left)))           # L^-1 S L^-H (S Hermitian)
    n = _aval(a).shape[-1]
    phi = np.tril(np.ones((n, n)), -1) + 0.5 * np.eye(n)
    return [lower], [_matmul(lower, _masked(inner, phi))]


def _thin_qr_jvp(q, r, ta):
    """JAX's tangents of ``q, r`` for ``a = q r`` with ``r`` square ([..., m, n], m >= n):
    with C = Q^H dA R^-1 and its strict lower part L, the anti-Hermitian
    Omega = L - L^H (plus C's imaginary diagonal, for complex matrices), dQ = Q (Omega - C)
    + dA R^-1 and dR = (C - Omega) R."""
    n = _aval(r).shape[-1]
    qt_dx_rinv = _solve_right(_matmul(_mH(q), ta), r)
    strict_lower = _masked(qt_dx_rinv, np.tril(np.ones((n, n)), -1))
    omega = bind(p.sub_p, strict_lower, _mH(strict_lower))  # anti-Hermitian
    if _is_complex(qt_dx_rinv):
        imaginary = bind(p.sub_p, qt_dx_rinv,
                         _as_dtype(bind(p.real_p, qt_dx_rinv), _aval(qt_dx_rinv).dtype))
        omega = bind(p.add_p, omega, _masked(imaginary, np.eye(n)))
    dq = bind(p.add_p, _matmul(q, bind(p.sub_p, omega, qt_dx_rinv)), _solve_right(ta, r))
    dr = _matmul(bind(p.sub_p, qt_dx_rinv, omega), r)
    return dq, dr


def _qr_jvp(primals, tangents, *, full_matrices):
    """JAX's rule: the thin rule for m >= n; for wide matrices (m < n) the square block
    ``a1 = q r1`` by the thin rule and ``dR2 = dQ^H a2 + Q^H dA2``; for full matrices with
    m > n the extra columns of Q from the thin tangent (Roberts and Roberts, arXiv
    2409.13374, eqs. 32-33; undefined where the top n x n block of Q has an eigenvalue 1)."""
    (a,), (ta,) = primals, tangents
    q, r = bind(p.qr_p, a, full_matrices=full_matrices)
    m, n = _aval(a).shape[-2:]
    if ta is None or m == 0 or n == 0:
        return [q, r], [None, None]
    if m < n:
        dq, dr1 = _thin_qr_jvp(q, _slice(r, cols=(0, m)), _slice(ta, cols=(0, m)))
        dr2 = bind(p.add_p, _matmul(_mH(dq), _slice(a, cols=(m, n))),
                   _matmul(_mH(q), _slice(ta, cols=(m, n))))
        return [q, r], [dq, bind(p.concatenate_p, dr1, dr2, dimension=_aval(a).ndim - 1)]
    if not full_matrices or m == n:
        dq, dr = _thin_qr_jvp(q, r, ta)
        return [q, r], [dq, dr]
    q_mn, q_mp = _slice(q, cols=(0, n)), _slice(q, cols=(n, m))
    dq_mn, dr_nn = _thin_qr_jvp(q_mn, _slice(r, rows=(0, n)), ta)
    q_nn, q_pn = _slice(q_mn, rows=(0, n)), _slice(q_mn, rows=(n, m))
    aval = _aval(q_nn)
    eye = bind(p.broadcast_in_dim_p, np.eye(n, dtype=aval.dtype), shape=aval.shape,
               broadcast_dimensions=(aval.ndim - 2, aval.ndim - 1))
    z_pn_h = bind(p.solve_p, _mH(bind(p.sub_p, q_nn, eye)), _mH(q_pn))   # Z = Q_pn (Q_nn-I)^-1
    z_pn = _mH(z_pn_h)
    dq_nn, dq_pn = _slice(dq_mn, rows=(0, n)), _slice(dq_mn, rows=(n, m))
    dq_mp = bind(p.sub_p, _matmul(dq_mn, z_pn_h),
                 _matmul(bind(p.add_p, q_mn, _matmul(q_mp, z_pn)),
                         _mH(bind(p.sub_p, dq_pn, _matmul(z_pn, dq_nn)))))
    dq = bind(p.concatenate_p, dq_mn, dq_mp, dimension=aval.ndim - 1)
    config = ((0, 0, 0),) * (aval.ndim - 2) + ((0, m - n, 0), (0, 0, 0))
    dr = bind(p.pad_p, dr_nn, np.zeros((), aval.dtype)[()], padding_config=config)
    return [q, r], [dq, dr]


def _slogdet_jvp(primals, tangents):
    # t = trace(a^-1 da): d log|det a| = Re t; the sign of a real matrix is piecewise constant,
    # that of a complex one turns by i Im t (JAX's)
    (a,), (ta,) = primals, tangents
    sign, logabsdet = bind(p.slogdet_p, a)
    if ta is None:
        return [sign, logabsdet], [None, None]
    aval = _aval(a)
    diagonal = _masked(bind(p.solve_p, a, ta), np.eye(aval.shape[-1]))
    trace = bind(p.reduce_sum_p, diagonal, axes=(aval.ndim - 2, aval.ndim - 1))
    if not _is_complex(a):
        return [sign, logabsdet], [None, trace]
    real = bind(p.real_p, trace)
    turn = bind(p.mul_p, bind(p.sub_p, trace, _as_dtype(real, aval.dtype)), sign)
    return [sign, logabsdet], [turn, real]


def _eigh_jvp(primals, tangents):
    # with S = V^H herm(dA) V: dw = Re diag(S), dV = V (F * S), F_ij = 1 / (w_j - w_i) off the
    # diagonal and 0 on it (distinct eigenvalues assumed, as JAX's)
    (a,), (ta,) = primals, tangents
    vectors, values = bind(p.eigh_p, a)
    if ta is None:
        return [vectors, values], [None, None]
    aval = _aval(a)
    n, dtype = aval.shape[-1], aval.dtype
    sym = bind(p.mul_p, bind(p.add_p, ta, _mH(ta)), np.asarray(0.5, dtype)[()])
    rotated = _matmul(_mH(vectors), _matmul(sym, vectors))
    eye = np.eye(n)
    diagonal = _real_part(bind(p.reduce_sum_p, _masked(rotated, eye), axes=(aval.ndim - 1,)))
    batch = tuple(range(aval.ndim - 2))
    spread = _as_dtype(values, dtype)
    columns = bind(p.broadcast_in_dim_p, spread, shape=aval.shape,
                   broadcast_dimensions=batch + (aval.ndim - 1,))
    rows = bind(p.broadcast_in_dim_p, spread, shape=aval.shape,
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
    """JAX's rule (the full-matrices form has none, as in JAX): with dS = U^H dA V,
    ds = Re diag(dS); dU and dV from dS weighted by 1/(s_j^2 - s_i^2), dU's diagonal from the
    anti-Hermitian part of dS (zero for real matrices), and the parts of dA outside the span
    of U (m > n) or V (n > m)."""
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
    real = _aval(s).dtype
    v = _mH(vt)
    ds_full = _matmul(_mH(u), _matmul(ta, v))                      # [..., k, k]
    square = _aval(ds_full)
    eye = np.eye(k)
    ds = _real_part(bind(p.reduce_sum_p, _masked(ds_full, eye), axes=(square.ndim - 1,)))
    cols = _broadcast_last(s, square, square.ndim - 1)             # s_j
    rows = _broadcast_last(s, square, square.ndim - 2)             # s_i
    diffs = bind(p.mul_p, bind(p.add_p, cols, rows), bind(p.sub_p, cols, rows))
    ones = bind(p.broadcast_in_dim_p, eye.astype(real), shape=square.shape,
                broadcast_dimensions=(square.ndim - 2, square.ndim - 1))
    f = _masked(bind(p.div_p, np.asarray(1, real)[()], bind(p.add_p, diffs, ones)), 1 - eye)
    f, cols, rows = (_as_dtype(x, dtype) for x in (f, cols, rows))
    dss = bind(p.mul_p, cols, ds_full)                             # dS diag(s)
    sds = bind(p.mul_p, rows, ds_full)                             # diag(s) dS
    zero = bind(p.eq_p, s, np.asarray(0, real)[()])
    safe = bind(p.select_n_p, zero, s, bind(p.broadcast_in_dim_p, np.asarray(1, real)[()],
                                             shape=_aval(s).shape, broadcast_dimensions=()))
    s_inv = bind(p.select_n_p, zero, bind(p.div_p, np.asarray(1, real)[()], safe),
                 bind(p.broadcast_in_dim_p, np.asarray(0, real)[()], shape=_aval(s).shape,
                      broadcast_dimensions=()))
    s_inv_diag = _as_dtype(_masked(_broadcast_last(s_inv, square, square.ndim - 1), eye),
                           dtype)
    half = np.asarray(0.5, dtype)[()]
    du_dv_diag = bind(p.mul_p, bind(p.mul_p, bind(p.sub_p, ds_full, _mH(ds_full)), half),
                      s_inv_diag)
    du = _matmul(u, bind(p.add_p, bind(p.mul_p, f, bind(p.add_p, dss, _mH(dss))), du_dv_diag))
    dv = _matmul(v, bind(p.mul_p, f, bind(p.add_p, sds, _mH(sds))))
    s_c = _as_dtype(s, dtype)
    if m > n:
        dav = _matmul(ta, v)
        rest = bind(p.sub_p, dav, _matmul(u, _matmul(_mH(u), dav)))
        du = bind(p.add_p, du, bind(p.div_p, rest, _broadcast_last(s_c, _aval(rest),
                                                                    _aval(rest).ndim - 1)))
    if n > m:
        dau = _matmul(_mH(ta), u)
        rest = bind(p.sub_p, dau, _matmul(v, _matmul(vt, dau)))
        dv = bind(p.add_p, dv, bind(p.div_p, rest, _broadcast_last(s_c, _aval(rest),
                                                                    _aval(rest).ndim - 1)))
    return [s, u, vt], [ds, du, _mH(dv)]


jvp_rules[p.svd_p] = _svd_jvp
jvp_rules[p.solve_p] = _solve_jvp
transpose_rules[p.solve_p] = _solve_transpose
jvp_rules[p.cholesky_p] = _cholesky_jvp
jvp_rules[p.qr_p] = _qr_jvp
jvp_rules[p.slogdet_p] = _slogdet_jvp


def _eig_vector_jvp(values, vectors, ta):
    """JAX's tangents of the eigenvalues and right eigenvectors (nondegenerate perturbation
    theory): with P = V^-1 dA V, dw = diag(P) and U = V (F * P), F_ij = 1 / (w_j - w_i) off
    the diagonal; dv_j = u_j + c_j v_j with c_j fixed by LAPACK's normalisation (unit norm,
    largest-magnitude component k_j real): c_j = -Re(v_j^H u_j) - i Im(u_kj) / v_kj."""
    aval = _aval(vectors)
    n, dtype = aval.shape[-1], aval.dtype
    eye = np.eye(n)
    rotated = _matmul(bind(p.solve_p, vectors, ta), vectors)                 # P
    diagonal = bind(p.reduce_sum_p, _masked(rotated, eye), axes=(aval.ndim - 1,))
    columns = _broadcast_last(values, aval, aval.ndim - 1)                  # w_j
    rows = _broadcast_last(values, aval, aval.ndim - 2)                     # w_i
    gaps = bind(p.add_p, bind(p.sub_p, columns, rows),
                bind(p.broadcast_in_dim_p, eye.astype(dtype), shape=aval.shape,
                     broadcast_dimensions=(aval.ndim - 2, aval.ndim - 1)))
    weights = _masked(bind(p.div_p, np.asarray(1, dtype)[()], gaps), 1 - eye)
    u = _matmul(vectors, bind(p.mul_p, weights, rotated))
    top = bind(p.argmax_p, bind(p.abs_p, vectors), axes=(aval.ndim - 2,),
               index_dtype=np.dtype(np.int32))
    positions = bind(p.iota_p, dtype=np.dtype(np.int32), shape=aval.shape,
                     dimension=aval.ndim - 2)
    mask = _as_dtype(bind(p.eq_p, positions, _broadcast_last(top, aval, aval.ndim - 1)),
                     dtype)
    column_sum = lambda x: bind(p.reduce_sum_p, x, axes=(aval.ndim - 2,))
    along = bind(p.real_p, column_sum(bind(p.mul_p, bind(p.conj_p, vectors), u)))
    turn = bind(p.div_p, bind(p.imag_p, column_sum(bind(p.mul_p, mask, u))),
                bind(p.real_p, column_sum(bind(p.mul_p, mask, vectors))))
    c = bind(p.complex_p, bind(p.neg_p, along), bind(p.neg_p, turn))
    return diagonal, bind(p.add_p, u, bind(p.mul_p, vectors, _broadcast_last(c, aval,
                                                                               aval.ndim - 1)))


def _eig_jvp(primals, tangents, *, compute_vectors, enable_eigvec_derivs=False):
    """The eigenvalues' tangent, diag(V^-1 dA V), and the eigenvectors' where
    ``enable_eigvec_derivs`` opts in (JAX's: they are valid only for distinct eigenvalues and
    eigenvectors whose largest component is unique, which cannot be checked)."""
    if compute_vectors and not enable_eigvec_derivs:
        raise NotImplementedError(
            "Derivatives of non-symmetric eigenvectors are only valid under assumptions on "
            "the input that JAX cannot check (see the enable_eigvec_derivs argument to "
            "jax.lax.linalg.eig). Pass enable_eigvec_derivs=True to jax.lax.linalg.eig to opt "
            "in. See https://github.com/jax-ml/jax/issues/2748 for discussion.")
    (a,), (ta,) = primals, tangents
    values, vectors = bind(p.eig_p, a, compute_vectors=True,
                           enable_eigvec_derivs=enable_eigvec_derivs)
    primals_out = [values, vectors] if compute_vectors else [values]
    if ta is None:
        return primals_out, [None] * len(primals_out)
    dtype = _aval(vectors).dtype
    ta = _as_dtype(ta, dtype)
    if compute_vectors:
        return primals_out, list(_eig_vector_jvp(values, vectors, ta))
    rotated = _matmul(bind(p.solve_p, vectors, ta), vectors)
    n = _aval(a).shape[-1]
    diagonal = bind(p.reduce_sum_p, _masked(rotated, np.eye(n)), axes=(_aval(a).ndim - 1,))
    return [values], [diagonal]


jvp_rules[p.eig_p] = _eig_jvp


def _not_differentiable(name):
    def rule(primals, tangents, **params):
        raise NotImplementedError(f"Differentiation rule for '{name}' not implemented")
    return rule


# JAX defines no derivatives for these reductions
for _p in (p.schur_p, p.hessenberg_p, p.tridiagonal_p, p.geqp3_p):
    jvp_rules[_p] = _not_differentiable(_p.name)
