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


def _cholesky_jvp(primals, tangents):
    # dL = L phi(L^-1 sym(dA) L^-T), phi keeping the strict lower triangle and half the diagonal
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
jvp_rules[p.solve_p] = _solve_jvp
transpose_rules[p.solve_p] = _solve_transpose
jvp_rules[p.cholesky_p] = _cholesky_jvp
jvp_rules[p.qr_p] = _qr_jvp
jvp_rules[p.slogdet_p] = _slogdet_jvp
