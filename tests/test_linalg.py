"""jax.numpy.linalg: norm, det, slogdet, inv, solve, cholesky, qr, matrix_power against
numpy.linalg, batched, under jit, vmap and shard_map, with gradients against finite
differences."""
from __future__ import annotations

import numpy as np
import pytest

import shardc
import shardc.numpy as jnp
import shardc.numpy.linalg as la
from shardc.sharding import PartitionSpec as P

from breadth_checks import assert_close, check_grad, mesh2

RNG = np.random.default_rng(0)
A = RNG.normal(size=(4, 3, 3)).astype(np.float32) + 2 * np.eye(3, dtype=np.float32)
SPD = (A @ np.swapaxes(A, -1, -2) + np.eye(3)).astype(np.float32)
B = RNG.normal(size=(4, 3, 2)).astype(np.float32)
TALL = RNG.normal(size=(4, 5, 3)).astype(np.float32)


def _batched_and_sharded(fn, x, want, rtol=1e-5, atol=1e-5):
    assert_close(fn(x), want, rtol, atol)
    assert_close(shardc.jit(fn)(x), want, rtol, atol)
    assert_close(shardc.vmap(fn)(x), want, rtol, atol)
    body = shardc.shard_map(fn, mesh=mesh2(), in_specs=P("x"), out_specs=P("x"))
    assert_close(body(x), want, rtol, atol)


def test_det_slogdet_inv_everywhere():
    _batched_and_sharded(la.det, A, np.linalg.det(A.astype(np.float64)), 1e-5, 1e-5)
    sign, logdet = np.linalg.slogdet(A.astype(np.float64))
    _batched_and_sharded(lambda m: la.slogdet(m)[1], A, logdet)
    assert_close(la.slogdet(A)[0], sign, dtype=np.float32)
    _batched_and_sharded(la.inv, A, np.linalg.inv(A.astype(np.float64)), 1e-4, 1e-5)
    assert la.det(np.eye(2, dtype=np.int32)).dtype == np.float32


def test_solve_vector_and_matrix_right_hand_sides():
    want = np.linalg.solve(A.astype(np.float64), B.astype(np.float64))
    assert_close(la.solve(A, B), want, 1e-4, 1e-5, np.float32)
    vector = B[..., 0]
    # a batch of vectors is written as matrices of one column (JAX since 0.5)
    assert_close(la.solve(A, vector[..., None])[..., 0],
                 np.linalg.solve(A, vector[..., None])[..., 0], 1e-4, 1e-5)
    assert_close(la.solve(A[0], B[0, :, 0]), np.linalg.solve(A[0], B[0, :, 0]), 1e-4, 1e-5)
    body = shardc.shard_map(la.solve, mesh=mesh2(), in_specs=(P("x"), P("x")), out_specs=P("x"))
    assert_close(body(A, B), want, 1e-4, 1e-5)
    with pytest.raises(ValueError, match="square"):
        la.solve(B, B)


def test_cholesky_and_qr_reconstruct():
    lower = np.asarray(la.cholesky(SPD))
    assert_close(lower, np.linalg.cholesky(SPD.astype(np.float64)), 1e-4, 1e-5)
    assert_close(la.cholesky(SPD, upper=True), np.swapaxes(lower, -1, -2))
    bad = np.asarray(la.cholesky(-np.eye(2, dtype=np.float32)))
    # NaN below the diagonal, zeros above, as JAX's (its factor is the lower triangle)
    assert np.isnan(np.tril(bad)[np.tril_indices(bad.shape[-1])]).all()
    assert not np.triu(bad, 1).any()
    q, r = la.qr(TALL)
    assert q.shape == (4, 5, 3) and r.shape == (4, 3, 3)
    assert_close(np.asarray(q) @ np.asarray(r), TALL, 1e-5, 1e-5)
    assert_close(np.swapaxes(np.asarray(q), -1, -2) @ np.asarray(q),
                 np.broadcast_to(np.eye(3), (4, 3, 3)), 1e-5, 1e-5)
    assert_close(np.tril(np.asarray(r), -1), np.zeros((4, 3, 3)))
    qc, rc = la.qr(TALL, mode="complete")
    assert qc.shape == (4, 5, 5) and rc.shape == (4, 5, 3)
    assert_close(np.asarray(qc) @ np.asarray(rc), TALL, 1e-5, 1e-5)
    assert la.qr(TALL, mode="r").shape == (4, 3, 3)
    _batched_and_sharded(lambda m: la.qr(m)[1], TALL, np.asarray(r))


@pytest.mark.parametrize("ord,axis", [(None, None), (2, 1), (1, 1), (np.inf, 1), (-np.inf, 1),
                                      (0, 1), (3, 1), ("fro", (1, 2)), (1, (1, 2)),
                                      (np.inf, (2, 1)), (-1, (1, 2)), (None, (1, 2))])
def test_norm_matches_numpy(ord, axis):
    x = RNG.normal(size=(2, 3, 4)).astype(np.float32)
    x[0, 0, 0] = 0.0
    want = np.linalg.norm(x.astype(np.float64), ord=ord, axis=axis)
    assert_close(la.norm(x, ord=ord, axis=axis), want, 1e-5, 1e-6, np.float32)
    kept = la.norm(x, ord=ord, axis=axis, keepdims=True)
    assert kept.shape == np.linalg.norm(x, ord=ord, axis=axis, keepdims=True).shape


def test_norm_rank_rules_and_unsupported_orders():
    v = np.array([3.0, 4.0], np.float32)
    assert_close(la.norm(v), 5.0)
    assert_close(la.norm(v, 1), 7.0)
    m = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert_close(la.norm(m, np.inf), np.linalg.norm(m, np.inf))
    for order in (2, -2, "nuc"):
        assert_close(la.norm(m, order), np.linalg.norm(m, order), 1e-5, 1e-5)
    with pytest.raises(ValueError, match="rank 1 or 2"):
        la.norm(np.ones((2, 2, 2), np.float32), 1)
    # a string is no vector order ('inf' is not np.inf): JAX's ValueError, not a norm
    with pytest.raises(ValueError, match="Invalid order 'inf' for vector norm."):
        la.norm(np.array([1.0, 2.0, 3.0], np.float32), ord="inf")


def test_matrix_power_and_helpers():
    m = A[0]
    for n in (0, 1, 2, 5, -1, -3):
        assert_close(la.matrix_power(m, n), np.linalg.matrix_power(m.astype(np.float64), n),
                     1e-4, 1e-4)
    assert_close(la.multi_dot([A[0], A[1], B[0]]), A[0] @ A[1] @ B[0], 1e-5, 1e-5)
    assert_close(la.trace(A), np.trace(A, axis1=-2, axis2=-1), 1e-6, 1e-6)
    assert_close(la.matrix_transpose(B), np.swapaxes(B, -1, -2))


def test_gradients_against_finite_differences():
    m = A[0]
    check_grad(lambda x: la.det(x), m)
    check_grad(lambda x: la.slogdet(x)[1], m)
    check_grad(lambda x: (la.inv(x) * np.arange(9).reshape(3, 3)).sum(), m)
    check_grad(lambda x: (la.solve(x, B[0]) ** 2).sum(), m)
    check_grad(lambda b: (la.solve(m, b) ** 2).sum(), B[0])
    check_grad(lambda x: la.norm(x), m)
    check_grad(lambda x: la.norm(x, 3, axis=1).sum(), m)
    # cholesky reads the symmetric part: differentiate through a symmetric parametrisation
    check_grad(lambda x: (la.cholesky(x @ x.T + 3 * jnp.eye(3)) * np.arange(9).reshape(3, 3)).sum(),
               m)
    check_grad(lambda x: (la.qr(x)[0] * np.arange(15).reshape(5, 3)).sum()
               + (la.qr(x)[1] ** 2).sum(), TALL[0])
    # batched gradients equal the per-matrix ones
    batched = shardc.grad(lambda x: la.slogdet(x)[1].sum())(A)
    assert_close(batched, np.swapaxes(np.linalg.inv(A.astype(np.float64)), -1, -2), 1e-4, 1e-5)


def test_qr_derivative_of_wide_and_complete_matrices():
    # JAX's rules: the square block by the thin rule for wide matrices, and the extra columns
    # of a complete Q (tall matrices) from the thin tangent
    wide = RNG.normal(size=(2, 4)).astype(np.float32)
    weights = np.arange(8, dtype=np.float32)
    check_grad(lambda x: (la.qr(x)[0] * weights[:4].reshape(2, 2)).sum()
               + (la.qr(x)[1] ** 2 * weights.reshape(2, 4)).sum(), wide)
    check_grad(lambda x: (la.qr(x, mode="complete")[0] * np.arange(25).reshape(5, 5)).sum()
               + (la.qr(x, mode="complete")[1] ** 2).sum(), TALL[0])


def test_matrix_primitives_round_trip_through_ir_text():
    from ir.parser import parse_program
    from ir.printer import print_program

    def program(a, b):
        q, r = la.qr(a, mode="complete")
        sign, logdet = la.slogdet(a)
        values, vectors = la.eigh(a)
        return la.cholesky(a) + la.solve(a, b) + q + r + vectors, sign * logdet + values.sum()
    closed = shardc.make_jaxpr(program)(SPD[0], SPD[1])
    text = print_program(closed.jaxpr)
    for name in ("cholesky", "qr[", "solve", "slogdet", "eigh", "full_matrices=True"):
        assert name in text
    assert print_program(parse_program(text)) == text


def test_eigh_decomposes_symmetric_matrices_and_differentiates():
    w, v = la.eigh(SPD)
    want = np.linalg.eigvalsh(SPD.astype(np.float64))
    assert_close(w, want, 1e-5, 1e-5, np.float32)
    w, v = np.asarray(w, np.float64), np.asarray(v, np.float64)
    assert_close(v @ (w[..., None] * np.swapaxes(v, -1, -2)), SPD, 1e-4, 1e-4)
    assert_close(np.swapaxes(v, -1, -2) @ v, np.broadcast_to(np.eye(3), (4, 3, 3)), 1e-5, 1e-5)
    _batched_and_sharded(la.eigvalsh, SPD, want, 1e-5, 1e-5)
    # through a symmetric parametrisation; eigenvector signs are arbitrary: use their squares
    weights = np.arange(9, dtype=np.float32).reshape(3, 3)
    check_grad(lambda x: (la.eigh(x + x.T)[0] * np.array([1.0, 2.0, 3.0])).sum(), A[0])
    check_grad(lambda x: (la.eigh(x + x.T)[1] ** 2 * weights).sum(), A[0])
    # the gradient of the largest eigenvalue is v v^T
    grad = np.asarray(shardc.grad(lambda x: la.eigh(x)[0][-1])(SPD[0]), np.float64)
    top = v[0][:, -1]
    assert_close(grad, np.outer(top, top), 1e-4, 1e-5)


# --- the singular value decomposition, eigenvalues of general matrices, and what is built on
# them (values against numpy; gradients against finite differences and JAX's) ----------------

def test_svd_reconstructs_and_matches_numpy():
    for x in (A, TALL, np.swapaxes(TALL, -1, -2)):
        u, s, vh = la.svd(x, full_matrices=False)
        assert_close(s, np.linalg.svd(x.astype(np.float64), compute_uv=False), 1e-5, 1e-5)
        assert_close(np.asarray(u) * np.asarray(s)[..., None, :] @ np.asarray(vh), x, 1e-4, 1e-4)
    full = la.svd(TALL)
    assert [a.shape for a in full] == [(4, 5, 5), (4, 3), (4, 3, 3)]
    assert isinstance(full, la.SVDResult) and full.S is full[1]
    _batched_and_sharded(la.svdvals, A, np.linalg.svd(A.astype(np.float64), compute_uv=False))


@pytest.mark.parametrize("name, fn", [
    ("singular values", lambda m: la.svdvals(m).sum()),
    ("u", lambda m: (la.svd(m, full_matrices=False)[0] ** 3).sum()),
    ("vh, wide", lambda m: (la.svd(m.T, full_matrices=False)[2] ** 3).sum()),
    ("pinv", lambda m: (la.pinv(m) * jnp.arange(15.).reshape(3, 5)).sum()),
    ("spectral norm", lambda m: la.norm(m, 2)),
    ("nuclear norm", lambda m: la.norm(m, "nuc")),
])
def test_svd_gradients_equal_finite_differences(name, fn):
    check_grad(fn, TALL[0])


def test_pinv_lstsq_rank_and_cond():
    assert_close(la.pinv(TALL), np.linalg.pinv(TALL.astype(np.float64)), 1e-4, 1e-4)
    b = RNG.normal(size=5).astype(np.float32)
    x, resid, rank, s = la.lstsq(TALL[0], b)
    want = np.linalg.lstsq(TALL[0].astype(np.float64), b.astype(np.float64), rcond=None)
    assert_close(x, want[0], 1e-4, 1e-4)
    assert_close(resid, want[1], 1e-3, 1e-4)
    assert int(rank) == 3
    assert int(la.matrix_rank(np.ones((3, 3), np.float32))) == 1
    assert int(shardc.jit(la.matrix_rank)(TALL[0])) == 3
    assert_close(la.cond(A), np.linalg.cond(A.astype(np.float64)), 1e-4, 1e-4)
    assert_close(la.cond(A, 1), np.linalg.cond(A.astype(np.float64), 1), 1e-4, 1e-4)


def test_eig_and_eigvals_of_general_matrices():
    m = RNG.normal(size=(4, 4)).astype(np.float32)
    w, v = la.eig(m)
    assert w.dtype == np.complex64 and v.dtype == np.complex64
    close = lambda got, want: np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4,
                                                         atol=1e-4)
    close(m.astype(np.complex64) @ np.asarray(v), np.asarray(v) * np.asarray(w))
    close(jnp.sort_complex(la.eigvals(m)), np.sort_complex(np.linalg.eigvals(m)))
    # the eigenvalues' gradient (JAX's rule), against finite differences
    check_grad(lambda a: jnp.real(la.eigvals(a) ** 2).sum() + jnp.imag(la.eigvals(a)).sum(),
               A[0])
    with pytest.raises(NotImplementedError, match="Derivatives of non-symmetric eigenvectors"):
        shardc.grad(lambda a: jnp.abs(la.eig(a)[1]).sum())(A[0])
    close(jnp.sort_complex(jnp.roots(np.array([1., -6., 11., -6.], np.float32))), [1, 2, 3])
    close(jnp.roots(np.array([0., 0., 1., -2.], np.float32)), [2])
    close(jnp.poly(np.diag(np.array([1., 2.], np.float32))), [1, -3, 2])
    close(jnp.sort_complex(jnp.roots(np.array([1., 2., 2.], np.float32))), [-1 - 1j, -1 + 1j])


def test_helpers_and_tensor_solves():
    v3 = RNG.normal(size=(4, 3)).astype(np.float32)
    assert_close(la.cross(v3, v3[::-1]), np.cross(v3, v3[::-1]), 1e-5, 1e-5)
    with pytest.raises(ValueError, match="3-dimensional vectors"):
        la.cross(np.ones(2), np.ones(2))
    assert_close(la.diagonal(A), np.diagonal(A, axis1=-2, axis2=-1))
    assert_close(la.vecdot(v3, v3), (v3 * v3).sum(-1), 1e-5, 1e-5)
    assert_close(la.tensordot(A[0], A[1], axes=1), A[0] @ A[1], 1e-5, 1e-5)
    t = RNG.normal(size=(4, 2, 2)).astype(np.float32) + np.eye(4).reshape(4, 2, 2) * 3
    assert_close(la.tensorinv(t, ind=1), np.linalg.tensorinv(t.astype(np.float64), ind=1),
                 1e-4, 1e-4)
    q = RNG.normal(size=(2, 3, 6)).astype(np.float32) + np.eye(6).reshape(2, 3, 6) * 3
    rhs = RNG.normal(size=(2, 3)).astype(np.float32)
    assert_close(la.tensorsolve(q, rhs), np.linalg.tensorsolve(q.astype(np.float64), rhs),
                 1e-4, 1e-4)


def test_entries_the_factorisations_do_not_read_change_nothing():
    from shardc import lax
    # cholesky without symmetrize_input reads the lower triangle only
    got = lax.linalg.cholesky(np.array([[4., 99.], [2., 5.]], np.float32),
                              symmetrize_input=False)
    assert_close(got, [[2., 0.], [1., 2.]], 1e-6, 1e-6)
    # a unit diagonal is not read, nor dl[0] and du[-1] of a tridiagonal system
    nan = np.float32(np.nan)
    got = lax.linalg.triangular_solve(np.array([[nan, 0.], [1., nan]], np.float32),
                                      np.ones((2, 1), np.float32), left_side=True, lower=True,
                                      unit_diagonal=True)
    assert_close(got, [[1.], [0.]], 1e-6, 1e-6)
    got = lax.linalg.tridiagonal_solve(np.array([nan, 1.], np.float32),
                                       np.full(2, 2., np.float32),
                                       np.array([1., np.inf], np.float32),
                                       np.ones((2, 1), np.float32))
    assert_close(got, [[1 / 3], [1 / 3]], 1e-6, 1e-6)


# --- lax.linalg: JAX's signatures and result orders --------------------------------------------

def test_lax_linalg_matches_numpy_with_jax_signatures():
    from shardc import lax
    assert_close(lax.linalg.cholesky(SPD), np.linalg.cholesky(SPD), 1e-5, 1e-5)
    assert_close(shardc.vmap(lax.linalg.cholesky, in_axes=1, out_axes=0)(
        np.swapaxes(SPD, 0, 1)), np.linalg.cholesky(SPD), 1e-5, 1e-5)
    v, w = lax.linalg.eigh(SPD)                     # eigenvectors first
    assert_close(w, np.linalg.eigvalsh(SPD), 1e-4, 1e-4)
    assert_close(np.asarray(v) @ (np.asarray(w)[..., None] * np.swapaxes(np.asarray(v), -1, -2)),
                 SPD, 1e-4, 1e-4)
    # the default solves x op(a) = b (right side), as JAX's
    upper = np.triu(A)
    rows = RNG.normal(size=(4, 2, 3)).astype(np.float32)
    assert_close(lax.linalg.triangular_solve(upper, rows), rows @ np.linalg.inv(upper),
                 1e-4, 1e-4)
    assert_close(lax.linalg.triangular_solve(upper, B, left_side=True), np.linalg.solve(upper, B),
                 1e-4, 1e-4)
    assert_close(lax.linalg.triangular_solve(upper, B, left_side=True, transpose_a=True),
                 np.linalg.solve(np.swapaxes(upper, -1, -2), B), 1e-4, 1e-4)
    complex_upper = (upper + 1j * np.triu(A[::-1])).astype(np.complex64)
    cb = (B + 2j * B).astype(np.complex64)
    np.testing.assert_allclose(
        np.asarray(lax.linalg.triangular_solve(complex_upper, cb, left_side=True,
                                               conjugate_a=True)),
        np.linalg.solve(np.conj(complex_upper), cb), rtol=1e-4, atol=1e-4)
    dl, d, du = (RNG.normal(size=(4, 3)).astype(np.float32) for _ in range(3))
    d = d + 4
    dense = (np.eye(3) * d[:, None, :] + np.eye(3, k=-1) * dl[:, :, None]
             + np.eye(3, k=1) * du[:, :, None])
    assert_close(lax.linalg.tridiagonal_solve(dl, d, du, B), np.linalg.solve(dense, B),
                 1e-4, 1e-4)
    with pytest.raises(TypeError, match="tridiagonal_solve does not accept dtype int32 at "
                                        "position 0"):
        lax.linalg.tridiagonal_solve(*(np.ones(3, np.int32),) * 3, np.ones((3, 1), np.int32))
    q, r = lax.linalg.qr(TALL, full_matrices=False)
    assert q.shape == (4, 5, 3) and r.shape == (4, 3, 3)
    assert_close(np.asarray(q) @ np.asarray(r), TALL, 1e-4, 1e-4)
    assert_close(lax.linalg.svd(TALL, compute_uv=False),
                 np.linalg.svd(TALL, compute_uv=False), 1e-4, 1e-4)


def test_results_are_jaxs_named_tuples_and_powers_keep_a_split_batch():
    a = np.random.default_rng(0).normal(size=(2, 4, 4)).astype(np.float32)
    q = jnp.linalg.qr(a[0])
    assert type(q).__name__ == "QRResult" and q.Q.shape == (4, 4) and q.R.shape == (4, 4)
    sign, logabsdet = jnp.linalg.slogdet(a[0])
    assert type(jnp.linalg.slogdet(a[0])).__name__ == "SlogdetResult"
    np.testing.assert_allclose(float(jnp.linalg.slogdet(a[0]).logabsdet), float(logabsdet))
    assert type(jnp.linalg.eigh(a[0] + a[0].T)).__name__ == "EighResult"
    for n in (0, 1, 2, 3, 5, 10, -2):
        want = np.linalg.matrix_power(a.astype(np.float64), n)
        np.testing.assert_allclose(np.asarray(jnp.linalg.matrix_power(a, n)), want,
                                   rtol=2e-3, atol=1e-4)
    mesh = shardc.make_mesh((2, 4), ("x", "y"))
    with shardc.set_mesh(mesh):
        split = shardc.device_put(a, P("x"))
        assert str(shardc.typeof(jnp.linalg.matrix_power(split, 3))) == "float32[2@x,4,4]"


def test_solve_reads_a_two_dimensional_b_as_a_matrix():
    """JAX since 0.5: a 2-D ``b`` beside a stack of matrices is one matrix for each of them
    (numpy 2's rule), not a batch of vectors; a shape that was one is refused, naming the
    old reading's fix."""
    a = A + 4 * np.eye(3, dtype=np.float32)
    b = RNG.normal(size=(3, 3)).astype(np.float32)
    got = la.solve(a, b)
    assert got.shape == (4, 3, 3)
    assert_close(got, np.linalg.solve(a, np.broadcast_to(b, a.shape)), rtol=1e-4)
    assert_close(la.solve(a, b[:, 0]), np.linalg.solve(a, b[:, 0]), rtol=1e-4)
    with pytest.raises(ValueError, match=r"Invalid shapes for solve: \(4, 3, 3\), \(4, 3\)"):
        la.solve(a, np.ones((4, 3), np.float32))
    # lax and scipy keep the batch of vectors (their rule)
    vectors = RNG.normal(size=(4, 3)).astype(np.float32)
    want = np.linalg.solve(a, vectors[..., None])[..., 0]
    assert_close(shardc.scipy.linalg.solve(a[0], vectors[0]), want[0], rtol=1e-4)


def test_hermitian_svd_and_eigh_of_one_triangle():
    """``svd(hermitian=True)`` reads the Hermitian part through its eigenvalues (their
    magnitudes, descending, the signs in vh); ``eigh(symmetrize_input=False)`` reads the
    triangle UPLO names."""
    h = np.array([[1.0, 2.0], [0.0, -3.0]], np.float32)
    sym = (h + h.T) / 2
    assert_close(la.svd(h, hermitian=True, compute_uv=False),
                 np.linalg.svd(sym, compute_uv=False), rtol=1e-5)
    u, s, vh = la.svd(SPD[0] - 3 * np.eye(3, dtype=np.float32), hermitian=True)
    assert_close((np.asarray(u) * np.asarray(s)) @ np.asarray(vh),
                 SPD[0] - 3 * np.eye(3), rtol=1e-4, atol=1e-4)
    assert np.all(np.diff(np.asarray(s)) <= 0)
    lower = np.tril(h) + np.tril(h, -1).T
    upper = np.triu(h) + np.triu(h, 1).T
    assert_close(la.eigh(h, symmetrize_input=False)[0], np.linalg.eigvalsh(lower), rtol=1e-5)
    assert_close(la.eigh(h, UPLO="U", symmetrize_input=False)[0], np.linalg.eigvalsh(upper),
                 rtol=1e-5)


def test_older_threshold_names():
    m = np.diag([3.0, 1e-4, 0.0]).astype(np.float32)
    assert_close(la.pinv(m, rcond=1e-3), np.diag([1 / 3, 0, 0]), rtol=1e-6)
    assert int(la.matrix_rank(m, tol=1e-5)) == 2
    assert int(la.matrix_rank(m, hermitian=True)) == 2
    with pytest.raises(ValueError, match="only one of rtol and rcond"):
        la.pinv(m, 0.1, rcond=0.1)
    with pytest.raises(ValueError, match="only one of tol or rtol"):
        la.matrix_rank(m, 0.1, tol=0.1)
    assert la.norm(np.array([1 + 1j, 0, 2j], np.complex64), ord=0).dtype == np.float32


def test_lu_factorisation_and_solves():
    """jax.lax.linalg.lu (LAPACK's partial pivoting: the largest magnitude, the first of
    equals), jax.scipy.linalg.lu/lu_factor/lu_solve: reconstruction, numpy's solve, the
    permutation from the pivots, and the gradient against finite differences."""
    rng = np.random.default_rng(5)
    for shape in [(4, 4), (3, 4, 4), (5, 3), (3, 5)]:
        a = rng.standard_normal(shape).astype(np.float32)
        factors, pivots, perm = shardc.lax.linalg.lu(a)
        m, n = shape[-2:]
        k = min(m, n)
        lower = np.tril(np.asarray(factors), -1)[..., :, :k] + np.eye(m, k)
        upper = np.triu(np.asarray(factors))[..., :k, :]
        assert_close(lower @ upper, np.take_along_axis(a, np.asarray(perm)[..., :, None], -2),
                     1e-5, 1e-5)
        assert np.all(np.abs(np.tril(np.asarray(factors), -1)) <= 1 + 1e-6)  # pivoting
        np.testing.assert_array_equal(
            shardc.lax.linalg.lu_pivots_to_permutation(pivots, m), perm)
    a = rng.standard_normal((4, 4)).astype(np.float32)
    p, l, u = shardc.scipy.linalg.lu(a)
    assert_close(np.asarray(p) @ np.asarray(l) @ np.asarray(u), a, 1e-5, 1e-5)
    lu_piv = shardc.scipy.linalg.lu_factor(a)
    b = rng.standard_normal((4, 2)).astype(np.float32)
    assert_close(shardc.scipy.linalg.lu_solve(lu_piv, b), np.linalg.solve(a, b), 1e-4, 1e-5)
    assert_close(shardc.scipy.linalg.lu_solve(lu_piv, b[:, 0], trans=1),
                 np.linalg.solve(a.T, b[:, 0]), 1e-4, 1e-5)
    check_grad(lambda v: shardc.scipy.linalg.lu(v)[2].sum(), a)


def test_det_gradient_at_singular_matrices_is_the_adjugate():
    """d det(a)/da is the adjugate's transpose, finite where a is singular (rank n-1), zero
    below that: 2x2 and 3x3 by their products of entries, larger ones by the LU-based
    cofactor solve; it was NaN."""
    def adjugate_t(a):
        n = a.shape[0]
        return np.array([[(-1) ** (i + j) * np.linalg.det(np.delete(np.delete(a, i, 0), j, 1))
                          for j in range(n)] for i in range(n)])

    rng = np.random.default_rng(6)
    s4 = rng.standard_normal((4, 4))
    s4[3] = s4[0] + s4[1]
    for a in [np.array([[1.0, 2.0], [2.0, 4.0]]), np.array([[1.0, 2, 3], [2, 4, 6], [1, 0, 1]]),
              s4, rng.standard_normal((5, 5))]:
        got = shardc.grad(la.det)(a.astype(np.float32))
        assert_close(got, adjugate_t(a), 1e-3, 1e-4)
    low_rank = np.zeros((4, 4), np.float32)
    low_rank[0, 0] = 1
    np.testing.assert_array_equal(shardc.grad(la.det)(low_rank), np.zeros((4, 4)))


def _hermitian_pd(n=4, seed=0):
    rng = np.random.default_rng(seed)
    a = (rng.normal(size=(n, n)) + 1j * rng.normal(size=(n, n))).astype(np.complex64)
    return a @ a.conj().T + n * np.eye(n, dtype=np.complex64)


def test_complex_upper_cholesky_is_the_conjugate_transpose():
    a = _hermitian_pd()
    lower, upper = np.asarray(la.cholesky(a)), np.asarray(la.cholesky(a, upper=True))
    np.testing.assert_allclose(upper, lower.conj().T, atol=1e-6)
    np.testing.assert_allclose(upper.conj().T @ upper, a, atol=1e-4)


def test_vecdot_takes_each_operands_axis_then_broadcasts():
    """``axis`` is each operand's own vector axis; the other axes broadcast (numpy's gufunc
    rule, where broadcasting first would pair other entries)."""
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(2, 3, 2)).astype(np.float32), rng.normal(size=(2, 2)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(la.vecdot(a, b, axis=0)),
                               np.linalg.vecdot(a, b, axis=0), rtol=1e-5)
    small = np.arange(8, dtype=np.int8).reshape(2, 4)
    assert la.vecdot(small, small).dtype == np.int8
    c = (rng.normal(size=(3, 4)) + 1j * rng.normal(size=(3, 4))).astype(np.complex64)
    np.testing.assert_allclose(np.asarray(jnp.vecdot(c.T, c.T, axis=0)),
                               np.sum(np.conj(c) * c, axis=1), rtol=1e-5)


def test_lstsq_of_zero_and_empty_matrices():
    x = la.lstsq(np.zeros((1, 1), np.float32), np.ones((1, 1), np.float32), numpy_resid=True)[0]
    np.testing.assert_array_equal(np.asarray(x), [[0.0]])
    for a, b, n in ((np.zeros((0, 3), np.float32), np.zeros((0,), np.float32), 3),
                    (np.zeros((3, 0), np.float32), np.ones((3,), np.float32), 0)):
        x, _, rank, s = la.lstsq(a, b)
        assert x.shape == (n,) and int(rank) == 0 and s.shape == (0,)
        np.testing.assert_array_equal(np.asarray(x), np.zeros(n))


def test_pinv_derivative_holds_where_singular_values_repeat():
    """Golub and Pereyra's formula (JAX's): at the identity the SVD's own derivative divides
    by s_i^2 - s_j^2 = 0 and gave NaN."""
    jac = np.asarray(shardc.jacobian(la.pinv)(jnp.eye(2)))
    # at an invertible A, d pinv = -A^-1 dA A^-1: at the identity, -dA
    np.testing.assert_allclose(jac, -np.einsum("ik,jl->ijkl", np.eye(2), np.eye(2)), atol=1e-6)
    rng = np.random.default_rng(1)
    a = rng.normal(size=(4, 3)).astype(np.float64)
    eps, d = 1e-4, rng.normal(size=(4, 3))
    numeric = (np.linalg.pinv(a + eps * d) - np.linalg.pinv(a - eps * d)) / (2 * eps)
    _, tangent = shardc.jvp(la.pinv, (a.astype(np.float32),), (d.astype(np.float32),))
    np.testing.assert_allclose(np.asarray(tangent), numeric, rtol=2e-3, atol=2e-3)


def test_lax_linalg_algorithm_enums_as_a_cpu_has_them():
    """``SvdAlgorithm``'s CPU algorithms give the decomposition; Jacobi and Polar, and eigh's
    Jacobi and QDWH implementations, raise NotImplementedError as JAX's on a CPU."""
    from shardc.lax import linalg as lla
    a = np.random.default_rng(0).normal(size=(2, 4, 3)).astype(np.float32)
    want = np.linalg.svd(a, compute_uv=False)
    for alg in (None, lla.SvdAlgorithm.DEFAULT, lla.SvdAlgorithm.QR,
                lla.SvdAlgorithm.DIVIDE_AND_CONQUER):
        u, s, vh = lla.svd(a, full_matrices=False, algorithm=alg)
        np.testing.assert_allclose(np.asarray(s), want, rtol=1e-5)
        np.testing.assert_allclose(np.asarray(u * s[..., None, :] @ vh), a, atol=1e-5)
        s_only = lla.svd(a, compute_uv=False, algorithm=alg, subset_by_index=(0, 3))
        np.testing.assert_allclose(np.asarray(s_only), want, rtol=1e-5)
    for alg in (lla.SvdAlgorithm.JACOBI, lla.SvdAlgorithm.POLAR):
        with pytest.raises(NotImplementedError, match="Jacobi and Polar"):
            lla.svd(a, algorithm=alg)
    sym = a[0].T @ a[0]
    v, w = lla.eigh(sym, implementation=lla.EighImplementation.QR, subset_by_index=(0, 3))
    np.testing.assert_allclose(np.asarray(w), np.linalg.eigvalsh(sym), rtol=1e-5, atol=1e-5)
    with pytest.raises(NotImplementedError, match="Jacobi"):
        lla.eigh(sym, implementation=lla.EighImplementation.JACOBI)
    with pytest.raises(NotImplementedError, match="QDWH"):
        lla.eigh(sym, implementation=lla.EighImplementation.QDWH)
    assert lla.EigImplementation.LAPACK.value == "lapack"


def test_lax_linalg_eig_left_and_right_eigenvectors():
    """lax.linalg.eig: ``[w, vl, vr]`` with the vectors asked for; left ones satisfy
    ``vl^H a = w vl^H``, each of unit norm with its largest component real."""
    from shardc.lax import linalg as lla
    a = np.array([[2.0, 1.0, 0.5], [0.3, -1.0, 2.0], [1.0, 0.0, 3.0]], np.float32)
    w, vl, vr = (np.asarray(v, np.complex128) for v in lla.eig(a))
    np.testing.assert_allclose(np.sort(w.real), np.sort(np.linalg.eigvals(a).real), rtol=1e-5)
    np.testing.assert_allclose(a @ vr, vr * w, atol=1e-5)
    np.testing.assert_allclose(vl.conj().T @ a, w[:, None] * vl.conj().T, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(vl, axis=0), 1, rtol=1e-5)
    top = vl[np.argmax(np.abs(vl), axis=0), np.arange(3)]
    np.testing.assert_allclose(top.imag, 0, atol=1e-6)
    assert len(lla.eig(a, compute_left_eigenvectors=False)) == 2
    assert len(lla.eig(a, compute_left_eigenvectors=False,
                       compute_right_eigenvectors=False)) == 1
    with pytest.raises(ValueError, match="Only the lapack implementation"):
        lla.eig(a, implementation=lla.EigImplementation.CUSOLVER)
    # under strict promotion too (JAX's own tests run so), with the same values
    with shardc.numpy_dtype_promotion("strict"):
        strict = [np.asarray(v, np.complex128) for v in lla.eig(a)]
    for got, want in zip(strict, (w, vl, vr)):
        np.testing.assert_array_equal(got, want)


def test_tridiagonal_solve_perturbs_singular_pivots_when_asked():
    """perturb_singular=True: a singular system's tiny pivots are raised to eps * max|U| (at
    least the smallest normal float), giving a large finite solution (values as JAX 0.10 on
    CPU); a regular system is solved as without it."""
    from shardc.lax import linalg as lla
    dl, d, du = (np.array(v, np.float32) for v in ([0.0, 1.0], [1.0, 3.0], [3.0, 0.0]))
    b = np.array([[1.0], [4.0]], np.float32)
    got = np.asarray(lla.tridiagonal_solve(dl, d, du, b, perturb_singular=True)).ravel()
    np.testing.assert_allclose(got, [-2.51658e+07, 8.38861e+06], rtol=1e-5)
    assert not np.isfinite(np.asarray(lla.tridiagonal_solve(dl, d, du, b))).all()
    zeros = np.zeros(3, np.float32)
    got = np.asarray(lla.tridiagonal_solve(zeros, zeros, zeros, np.ones((3, 1), np.float32),
                                           perturb_singular=True)).ravel()
    np.testing.assert_allclose(got, 1 / np.finfo(np.float32).tiny, rtol=1e-6)
    dl, d, du = (np.array(v, np.float32) for v in ([0.0, 2.0, -2.0, 3.0], [1.0, 4.0, 1.0, -1.0],
                                                   [2.0, -1.0, 1.0, 0.0]))
    rhs = np.arange(4.0, dtype=np.float32)[:, None]
    for perturb in (False, True):
        np.testing.assert_allclose(
            np.asarray(lla.tridiagonal_solve(dl, d, du, rhs, perturb_singular=perturb)).ravel(),
            [9.0, -4.5, -1.0, -6.0], rtol=1e-5, atol=1e-6)


def test_cholesky_without_symmetrizing_reads_the_lower_triangle():
    """jnp.linalg.cholesky(symmetrize_input=False) reads only the lower triangle (values as
    JAX 0.10); multi_dot takes a precision."""
    a = np.array([[4.0, 100.0, 7.0], [2.0, 5.0, -50.0], [1.0, 0.5, 6.0]], np.float32)
    lower = np.tril(a) + np.tril(a, -1).T
    got = np.asarray(jnp.linalg.cholesky(a, symmetrize_input=False))
    np.testing.assert_allclose(got, np.linalg.cholesky(lower), rtol=1e-5)
    np.testing.assert_allclose(got, [[2, 0, 0], [1, 2, 0], [0.5, 0, 2.3979]], rtol=1e-4)
    c = (a + 1j * np.tril(a, -1)).astype(np.complex64)
    herm = np.tril(c) + np.conj(np.tril(c, -1)).T
    upper = np.asarray(jnp.linalg.cholesky(c, symmetrize_input=False, upper=True))
    np.testing.assert_allclose(upper, np.conj(np.linalg.cholesky(herm)).T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        np.asarray(la.multi_dot([a, a, a[:, 0]], precision=shardc.lax.Precision.HIGHEST)),
        a @ a @ a[:, 0], rtol=1e-5)


def test_householder_product_multiplies_the_reflectors_as_orgqr():
    """householder_product(a, taus): the first n columns of H_1 ... H_k, H_i = I - tau_i v_i
    v_i^H with v_i read from a's column i below the diagonal (a unit at i), as LAPACK's orgqr;
    reflectors with tau = 2 / |v|^2 give orthonormal columns."""
    from shardc.lax import linalg as lla
    rng = np.random.default_rng(3)
    for dtype in (np.float32, np.complex64):
        a = rng.normal(size=(2, 5, 3)).astype(dtype)
        if dtype == np.complex64:
            a = (a + 1j * rng.normal(size=a.shape)).astype(dtype)
        taus = rng.normal(size=(2, 2)).astype(dtype)
        want = []
        for b in range(2):
            q = np.eye(5, dtype=np.complex128)
            for i in range(2):
                v = np.concatenate([np.zeros(i), [1.0], a[b, i + 1:, i]])
                q = q @ (np.eye(5) - taus[b, i] * np.outer(v, v.conj()))
            want.append(q[:, :3])
        got = np.asarray(lla.householder_product(a, taus))
        assert got.dtype == dtype
        np.testing.assert_allclose(got, np.array(want), rtol=1e-4, atol=1e-5)
    a = rng.normal(size=(4, 4)).astype(np.float32)
    v = np.concatenate([[1.0], a[1:, 0]])
    q = np.asarray(lla.householder_product(a, np.array([2 / (v @ v)], np.float32)))
    np.testing.assert_allclose(q.T @ q, np.eye(4), atol=1e-5)


def test_geqrf_and_ormqr_in_lapacks_form():
    """geqrf leaves R on and above the diagonal and dlarfg's reflectors below it (values as
    JAX 0.10's LAPACK call); ormqr applies their Q, which with R rebuilds the matrix."""
    from shardc.lax import linalg as lla
    a = np.array([[2.0, 1.0, 0.5], [0.3, -1.0, 2.0], [1.0, 0.0, 3.0], [-1.0, 2.0, 1.0]],
                 np.float32)
    r, taus = lla.geqrf(a)
    np.testing.assert_allclose(np.asarray(r), [[-2.4678, 0.1216, -1.4588],
                                               [0.0671, 2.4465, 0.2769],
                                               [0.2238, 0.0561, -3.4706],
                                               [-0.2238, -0.6266, 0.4099]], atol=1e-4)
    upper = np.triu(np.asarray(r))[:3]
    rebuilt = lla.ormqr(r, taus, np.vstack([upper, np.zeros((1, 3), np.float32)]))
    np.testing.assert_allclose(np.asarray(rebuilt), a, atol=1e-5)
    c = (a + 1j * a[::-1]).astype(np.complex64)
    r, taus = lla.geqrf(c)
    assert taus.shape == (3,) and np.allclose(np.imag(np.diag(np.asarray(r))), 0, atol=1e-6)
    q = np.asarray(lla.ormqr(r, taus, np.eye(4, dtype=np.complex64)))
    np.testing.assert_allclose(q.conj().T @ q, np.eye(4), atol=1e-5)
    np.testing.assert_allclose(q[:, :3] @ np.triu(np.asarray(r))[:3], c, atol=1e-5)


def test_eig_of_a_matrix_with_nans_or_infinities_gives_nans():
    """A batch element holding a NaN or an infinity gives NaN eigenvalues and vectors (JAX's
    CPU eig), the others their decomposition; it raised LinAlgError."""
    a = np.stack([np.diag([1.0, 2.0]), np.full((2, 2), np.nan), [[np.inf, 0], [0, 1]]])
    a = a.astype(np.float32)
    w, v = jnp.linalg.eig(a)
    np.testing.assert_allclose(np.sort(np.asarray(w[0]).real), [1, 2])
    assert np.isnan(np.asarray(w[1:])).all() and np.isnan(np.asarray(v[1:])).all()
    assert np.isnan(np.asarray(jnp.linalg.eigvals(a[1]))).all()


def test_qr_raw_and_full_modes():
    """jnp.linalg.qr: 'raw' gives numpy's (h, tau) (geqrf's reflectors transposed), 'full' is
    'reduced' (JAX's), an unknown mode is JAX's ValueError."""
    a = np.array([[2.0, 1.0, 0.5], [0.3, -1.0, 2.0], [1.0, 0.0, 3.0], [-1.0, 2.0, 1.0]],
                 np.float32)
    h, tau = la.qr(a, mode="raw")
    assert h.shape == (3, 4) and tau.shape == (3,)
    np.testing.assert_allclose(np.abs(np.diag(np.asarray(h).T)),
                               np.abs(np.diag(np.linalg.qr(a, mode="r"))), rtol=1e-5)
    q, r = la.qr(a, mode="full")
    assert q.shape == (4, 3) and r.shape == (3, 3)
    with pytest.raises(ValueError, match="Unsupported QR decomposition mode 'economic'"):
        la.qr(a, mode="economic")


def test_triangular_solve_of_a_row_vector_on_the_right():
    """lax.linalg.triangular_solve(left_side=False) with b of one dimension fewer than a: x
    a = b for row vectors (values as JAX 0.10); it failed swapping b's axes."""
    from shardc.lax import linalg as lla
    a = np.tril(np.arange(1.0, 17.0).reshape(4, 4)).astype(np.float32)
    b = np.arange(4.0, dtype=np.float32)
    got = np.asarray(lla.triangular_solve(a, b, left_side=False, lower=True))
    np.testing.assert_allclose(got, [-1.0340909, -0.14772728, -0.07386364, 0.1875], rtol=1e-5)
    np.testing.assert_allclose(got @ a, b, atol=1e-5)
    batch = np.stack([b, b + 1])
    got = np.asarray(lla.triangular_solve(np.stack([a, a]), batch, left_side=False,
                                          lower=True))
    np.testing.assert_allclose(np.einsum("bi,bij->bj", got, np.stack([a, a])), batch, atol=1e-5)


def test_slogdet_by_qr_refuses_complex_matrices_as_jax():
    z = (A[0] + 1j * A[1]).astype(np.complex64)
    with pytest.raises(NotImplementedError,
                       match="slogdet method='qr' not implemented for complex inputs"):
        la.slogdet(z, method="qr")
    sign, logdet = la.slogdet(A[0], method="qr")
    assert_close(np.asarray([sign, logdet]), np.linalg.slogdet(A[0].astype(np.float64)),
                 1e-5, 1e-5)


def test_a_singular_system_gives_xlas_infinities():
    # LU with partial pivoting and IEEE division, as XLA's solve: the zero pivot gives
    # infinities (LAPACK's solver refuses the matrix); recorded from JAX 0.10.2
    a = np.array([[1.0, 2.0], [2.0, 4.0]], np.float32)
    np.testing.assert_array_equal(la.inv(a), [[-np.inf, np.inf], [np.inf, -np.inf]])
    np.testing.assert_array_equal(la.solve(a, np.ones(2, np.float32)), [-np.inf, np.inf])
    got = np.asarray(la.solve(np.zeros((2, 2), np.float32), np.ones(2, np.float32)))
    assert np.isnan(got[0]) and got[1] == np.inf
    batch = la.solve(np.stack([a, np.eye(2, dtype=np.float32)]), np.ones((2, 2), np.float32))
    np.testing.assert_array_equal(batch[1], np.ones((2, 2)))          # the other matrix


def test_cholesky_update_is_the_factor_of_the_rank_one_update():
    """lax.linalg.cholesky_update(R, w): the upper Cholesky factor of R^T R + w w^T (positive
    diagonal, so the one numpy's cholesky gives), eagerly, under jit and vmap. It was
    missing."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((6, 6)).astype(np.float32)
    a = a @ a.T + 6 * np.eye(6, dtype=np.float32)
    w = rng.standard_normal(6).astype(np.float32)
    r = np.linalg.cholesky(a).T
    want = np.linalg.cholesky(a + np.outer(w, w)).T
    from shardc.lax import linalg as lax_linalg
    got = lax_linalg.cholesky_update(r, w)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.triu(np.asarray(got)), np.asarray(got), atol=0)
    np.testing.assert_allclose(shardc.jit(lax_linalg.cholesky_update)(r, w), want, rtol=1e-4,
                               atol=1e-4)
    batched = shardc.vmap(lax_linalg.cholesky_update)(np.stack([r, r]), np.stack([w, 2 * w]))
    want2 = np.linalg.cholesky(a + 4 * np.outer(w, w)).T
    np.testing.assert_allclose(batched[1], want2, rtol=1e-4, atol=1e-4)


def test_lu_and_schur_conversions_run_in_a_shard_map_body():
    """The report: lax.linalg.lu, lu_pivots_to_permutation, rsf2csf and funm raised type
    errors in a body (their loops started from values every device shares and then mixed in
    each device's matrix); each device's result is the one computed outside."""
    import shardc.scipy.linalg as sl
    from shardc import lax
    mesh = shardc.make_mesh((4,), ("x",))
    a = np.random.default_rng(0).standard_normal((4, 3, 3)).astype(np.float32)

    def per_device(f):
        body = lambda blk: f(blk[0])[None]
        return np.asarray(shardc.shard_map(body, mesh=mesh, in_specs=P("x"),
                                           out_specs=P("x"))(a))

    lu = lambda m: lax.linalg.lu(m)[0]
    np.testing.assert_allclose(per_device(lu), np.stack([np.asarray(lu(m)) for m in a]),
                               rtol=1e-6)
    perm = lambda m: lax.linalg.lu_pivots_to_permutation(lax.linalg.lu(m)[1], 3)
    np.testing.assert_array_equal(per_device(perm), np.stack([np.asarray(perm(m)) for m in a]))
    csf = lambda m: sl.rsf2csf(*sl.schur(m))[0]
    np.testing.assert_allclose(per_device(csf), np.stack([np.asarray(csf(m)) for m in a]),
                               rtol=1e-5, atol=1e-5)
    expm = lambda m: sl.funm(m, jnp.exp)
    np.testing.assert_allclose(per_device(expm), np.stack([np.asarray(expm(m)) for m in a]),
                               rtol=1e-4, atol=1e-4)
