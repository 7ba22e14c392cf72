"""jax.scipy.linalg: scipy's conventions over the decompositions, against numpy (and scipy's
definitions written out), eagerly and under jit, with gradients by finite differences."""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

import shardc
import shardc.numpy as jnp
import shardc.scipy.linalg as sl

from breadth_checks import assert_close, check_grad

RNG = np.random.default_rng(0)
M = RNG.standard_normal((4, 4)).astype(np.float32)
S = (M @ M.T + 4 * np.eye(4)).astype(np.float32)
B = RNG.standard_normal((4, 2)).astype(np.float32)


def test_cholesky_is_upper_by_default_and_reads_one_triangle():
    upper = np.linalg.cholesky(S.astype(np.float64)).T
    assert_close(sl.cholesky(S), upper, rtol=1e-5, atol=1e-5)
    assert_close(sl.cholesky(S, lower=True), upper.T, rtol=1e-5, atol=1e-5)
    junk = np.triu(S) + 7 * np.tril(np.ones((4, 4), np.float32), -1)   # the lower part unread
    assert_close(sl.cholesky(junk), upper, rtol=1e-5, atol=1e-5)
    assert_close(sl.cholesky(junk.T, lower=True), upper.T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("lower", [False, True])
def test_cho_solve_and_solve_assuming_positive_definite(lower):
    want = np.linalg.solve(S.astype(np.float64), B)
    assert_close(sl.cho_solve(sl.cho_factor(S, lower=lower), B), want, rtol=1e-4, atol=1e-5)
    assert_close(shardc.jit(lambda a, b: sl.solve(a, b, assume_a="pos", lower=lower))(S, B),
                 want, rtol=1e-4, atol=1e-5)
    check_grad(lambda b: sl.cho_solve(sl.cho_factor(S, lower=lower), b).sum(), B)


@pytest.mark.parametrize("trans", [0, 1, 2, "N", "T", "C"])
@pytest.mark.parametrize("lower", [False, True])
def test_solve_triangular_reads_its_triangle(trans, lower):
    a = (M + 4 * np.eye(4)).astype(np.float32)
    tri = np.tril(a) if lower else np.triu(a)
    op = tri if trans in (0, "N") else tri.T
    assert_close(sl.solve_triangular(a, B, trans=trans, lower=lower), np.linalg.solve(op, B),
                 rtol=1e-4, atol=1e-5)
    unit = np.tril(a, -1) + np.eye(4) if lower else np.triu(a, 1) + np.eye(4)
    op = unit if trans in (0, "N") else unit.T
    assert_close(sl.solve_triangular(a, B, trans=trans, lower=lower, unit_diagonal=True),
                 np.linalg.solve(op, B), rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="Invalid 'trans' value 'X'"):
        sl.solve_triangular(a, B, trans="X")


def test_general_functions_follow_numpy():
    assert_close(sl.solve(M, B), np.linalg.solve(M, B), rtol=1e-4, atol=1e-5)
    assert_close(sl.solve(M, B, assume_a="sym"), np.linalg.solve(M, B), rtol=1e-4, atol=1e-5)
    assert_close(sl.inv(M), np.linalg.inv(M), rtol=1e-4, atol=1e-5)
    assert_close(sl.det(M), np.linalg.det(M), rtol=1e-5)
    w, v = sl.eigh(S)
    assert_close(w, np.linalg.eigvalsh(S), rtol=1e-5)
    assert_close(sl.eigh(S, eigvals_only=True), np.linalg.eigvalsh(S), rtol=1e-5)
    assert_close(sl.svd(M, compute_uv=False), np.linalg.svd(M, compute_uv=False), rtol=1e-5)
    tall = RNG.standard_normal((5, 3)).astype(np.float32)
    q, r = sl.qr(tall)
    assert q.shape == (5, 5) and r.shape == (5, 3)
    assert_close(q @ r, tall, rtol=1e-5, atol=1e-5)
    (r_only,) = sl.qr(tall, mode="r")
    q, r = sl.qr(tall, mode="economic")
    assert q.shape == (5, 3) and r.shape == (3, 3) and r_only.shape == (5, 3)
    with pytest.raises(NotImplementedError, match="b=None"):
        sl.eigh(S, S)


def test_block_diag_and_toeplitz():
    got = sl.block_diag(np.ones((2, 2)), 3.0, np.arange(3.0))
    want = np.zeros((4, 6))
    want[:2, :2], want[2, 2], want[3, 3:] = 1, 3, np.arange(3.0)
    assert_close(got, want)
    c, r = np.arange(1.0, 4.0), np.arange(1.0, 6.0) * 2
    assert_close(sl.toeplitz(c, r), [[c[i - j] if i >= j else r[j - i] for j in range(5)]
                                     for i in range(3)])
    assert_close(sl.toeplitz(c), [[c[abs(i - j)] for j in range(3)] for i in range(3)])


def _expm_reference(a):
    """exp(a) by its Taylor series in float64, scaled and squared."""
    a = np.asarray(a, np.float64)
    s = max(0, int(np.ceil(np.log2(max(np.abs(a).sum(0).max(), 1e-300)))) + 1)
    x = a / 2 ** s
    term, total = np.eye(len(a)), np.eye(len(a))
    for k in range(1, 30):
        term = term @ x / k
        total = total + term
    for _ in range(s):
        total = total @ total
    return total


@pytest.mark.parametrize("scale", [0.0, 0.05, 0.5, 3.0])
def test_expm_equals_its_series(scale):
    a = (M * scale).astype(np.float32)
    want = _expm_reference(a)
    assert_close(sl.expm(a), want, rtol=2e-4, atol=1e-5 * np.abs(want).max())
    assert_close(shardc.jit(sl.expm)(a), want, rtol=2e-4, atol=1e-5 * np.abs(want).max())


def test_expm_of_a_batch_its_gradient_and_a_norm_beyond_its_squarings():
    a = np.stack([M, -M]).astype(np.float32) * 0.3
    for k in range(2):
        assert_close(sl.expm(a)[k], _expm_reference(a[k]), rtol=2e-4, atol=1e-5)
    check_grad(lambda x: sl.expm(x).sum(), M * 0.3)
    assert np.isnan(np.asarray(sl.expm(M * 1e6, max_squarings=2))).all()


def test_positive_definite_solve_from_the_upper_triangle_of_a_complex_matrix():
    rng = np.random.default_rng(0)
    a = (rng.normal(size=(4, 4)) + 1j * rng.normal(size=(4, 4))).astype(np.complex64)
    a = a @ a.conj().T + 4 * np.eye(4, dtype=np.complex64)
    b = (rng.normal(size=4) + 1j * rng.normal(size=4)).astype(np.complex64)
    want = np.linalg.solve(a.astype(np.complex128), b)
    for tri, lower in ((np.triu(a), False), (np.tril(a), True)):
        got = np.asarray(sl.solve(tri, b, assume_a="pos", lower=lower))
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_toeplitz_keeps_batch_dimensions():
    assert sl.toeplitz(np.ones(8, np.float32), np.ones((2, 4, 0), np.float32)).shape == (2, 4, 8, 0)
    rows = np.arange(16.0).reshape(4, 4)
    batched = np.asarray(sl.toeplitz(np.arange(4.0), rows))
    assert batched.shape == (4, 4, 4)
    for k in range(4):       # each row with the one column
        np.testing.assert_array_equal(batched[k], np.asarray(sl.toeplitz(np.arange(4.0), rows[k])))


@pytest.mark.parametrize("side,shape,method", [("right", (5, 3), "qdwh"), ("left", (3, 5), "qdwh"),
                                              ("right", (3, 5), "svd"), ("left", (2, 4, 4), "svd")])
def test_polar_factors(side, shape, method):
    a = np.random.RandomState(0).randn(*shape).astype(np.float32)
    u, p = sl.polar(a, side=side, method=method)
    u, p = np.asarray(u), np.asarray(p)
    m, n = shape[-2:]
    assert u.shape == shape and p.shape == shape[:-2] + ((n, n) if side == "right" else (m, m))
    recon = u @ p if side == "right" else p @ u
    np.testing.assert_allclose(recon, a, atol=1e-5)
    np.testing.assert_allclose(p, np.swapaxes(p, -1, -2), atol=1e-5)          # Hermitian
    assert (np.linalg.eigvalsh(p) > -1e-5).all()                               # PSD
    gram = np.swapaxes(u, -1, -2) @ u if m >= n else u @ np.swapaxes(u, -1, -2)
    np.testing.assert_allclose(gram, np.broadcast_to(np.eye(min(m, n)), gram.shape), atol=1e-5)


def test_polar_refuses_what_jax_refuses():
    with pytest.raises(NotImplementedError, match="method='qdwh' only supports"):
        sl.polar(np.ones((3, 5), np.float32))
    with pytest.raises(ValueError, match="at least a 2-D array"):
        sl.polar(np.ones(3, np.float32))
    with pytest.raises(NotImplementedError):
        sl.polar(np.ones((3, 3), np.float16))


@contextlib.contextmanager
def shardc_config_rank_promotion(mode):
    before = shardc.config.read("jax_numpy_rank_promotion")
    shardc.config.update("jax_numpy_rank_promotion", mode)
    try:
        yield
    finally:
        shardc.config.update("jax_numpy_rank_promotion", before)


def test_special_matrix_constructors_as_scipy_defines_them():
    """scipy.linalg's special matrices, checked by what defines each (numpy references)."""
    import shardc.scipy.linalg as sl
    np.testing.assert_array_equal(np.asarray(sl.hankel([1, 2, 3], [3, 4, 5, 6])),
                                  [[1, 2, 3, 4], [2, 3, 4, 5], [3, 4, 5, 6]])
    np.testing.assert_array_equal(np.asarray(sl.hankel([1, 2])), [[1, 2], [2, 0]])
    # batch ranks aligned before vectorizing: no rank promotion to refuse
    with shardc_config_rank_promotion("raise"):
        batched = sl.hankel(np.ones((1, 2, 3), np.float32), np.ones((2, 4), np.float32))
    assert batched.shape == (1, 2, 3, 4)
    np.testing.assert_array_equal(np.asarray(sl.circulant([1, 2, 3])),
                                  [[1, 3, 2], [2, 1, 3], [3, 2, 1]])
    np.testing.assert_array_equal(np.asarray(sl.leslie([0.1, 2.0, 1.0], [0.5, 0.25])),
                                  np.array([[0.1, 2, 1], [0.5, 0, 0], [0, 0.25, 0]],
                                           np.float32))
    poly = np.array([1.0, -10.0, 31.0, -30.0])
    for build in (sl.companion, sl.fiedler_companion):
        roots = np.sort(np.linalg.eigvals(np.asarray(build(poly), np.float64)).real)
        np.testing.assert_allclose(roots, [2, 3, 5], rtol=1e-4)
    np.testing.assert_array_equal(np.asarray(sl.fiedler([1, 4, 12])),
                                  [[0, 3, 11], [3, 0, 8], [11, 8, 0]])
    a, v = np.array([1.0, 2.0, -1.0]), np.array([0.5, 3.0, 1.0, 2.0])
    for mode in ("full", "same", "valid"):
        np.testing.assert_allclose(np.asarray(sl.convolution_matrix(a, 4, mode)) @ v,
                                   np.convolve(a, v, mode), rtol=1e-6)
    h = np.asarray(sl.hilbert(4), np.float64)
    np.testing.assert_allclose(h[1, 2], 1 / 4)
    np.testing.assert_allclose(np.asarray(sl.invhilbert(4), np.float64) @ h, np.eye(4),
                               atol=1e-3)
    for kind in (None, "lower", "upper"):
        pas = np.asarray(sl.pascal(5, kind), np.float64)
        np.testing.assert_allclose(np.asarray(sl.invpascal(5, kind)) @ pas, np.eye(5),
                                   atol=1e-6)
    assert sl.pascal(4).dtype == np.float32 and float(sl.pascal(4)[3, 3]) == 20
    hel = np.asarray(sl.helmert(5, full=True), np.float64)
    np.testing.assert_allclose(hel @ hel.T, np.eye(5), atol=1e-6)
    assert sl.helmert(5).shape == (4, 5)
    had = np.asarray(sl.hadamard(8))
    np.testing.assert_array_equal(had @ had.T, 8 * np.eye(8))
    x = np.arange(6.0)
    np.testing.assert_allclose(np.asarray(sl.dft(6)) @ x, np.fft.fft(x), atol=1e-4)
    np.testing.assert_allclose(np.asarray(sl.dft(6, scale="n")) @ x, np.fft.fft(x) / 6,
                               atol=1e-5)
    with pytest.raises(ValueError, match="n must be a positive power of 2"):
        sl.hadamard(6)
    with pytest.raises(ValueError, match="dtype must be a complex"):
        sl.dft(4, dtype=np.float32)


def test_qr_multiply_applies_the_economic_q():
    """qr_multiply: ``c @ Q`` (right) or ``Q @ c`` (left) with the economic Q of ``a``, and R
    of min(m, n) rows, as scipy's; with pivoting, the pivots third."""
    rng = np.random.default_rng(2)
    a = rng.normal(size=(6, 4)).astype(np.float32)
    q, r = np.linalg.qr(a.astype(np.float64))
    c_right, c_left = rng.normal(size=(2, 6)), rng.normal(size=(4, 3))
    got, got_r = sl.qr_multiply(a, c_right.astype(np.float32))
    np.testing.assert_allclose(np.abs(np.asarray(got_r)), np.abs(r), atol=1e-4)
    signs = np.sign(np.diag(r)) * np.sign(np.diag(np.asarray(got_r)))   # columns' signs
    np.testing.assert_allclose(np.asarray(got), c_right @ (q * signs), atol=1e-4)
    got, _ = sl.qr_multiply(a, c_left.astype(np.float32), mode="left")
    np.testing.assert_allclose(np.asarray(got), (q * signs) @ c_left, atol=1e-4)
    vec, _ = sl.qr_multiply(a, c_left[:, 0].astype(np.float32), mode="left")
    assert vec.shape == (6,)
    with pytest.raises(ValueError, match="not compatible for c @ Q"):
        sl.qr_multiply(a, np.ones((2, 4), np.float32))
    got, got_r, p = sl.qr_multiply(a, c_right.astype(np.float32), pivoting=True)
    _, r_piv = np.linalg.qr(a[:, np.asarray(p)].astype(np.float64))
    np.testing.assert_allclose(np.abs(np.asarray(got_r)), np.abs(r_piv), atol=1e-4)


def test_triangular_and_cholesky_solves_broadcast_a_matrix_right_hand_side():
    """solve_triangular/cho_solve: a b with one dimension fewer than a is a matrix (its batch
    broadcast) unless its last dimension is a's size (JAX's deprecated batched-vector reading,
    with a FutureWarning); it was read as vectors and failed to broadcast."""
    rng = np.random.default_rng(5)
    low = np.tril(rng.normal(size=(3, 4, 4))) + 4 * np.eye(4)
    low = low.astype(np.float32)
    b = rng.normal(size=(4, 2)).astype(np.float32)
    got = np.asarray(sl.solve_triangular(low, b, lower=True))
    np.testing.assert_allclose(got, np.linalg.solve(low, b), rtol=1e-4, atol=1e-5)
    spd = low @ np.swapaxes(low, -1, -2)
    got = np.asarray(sl.cho_solve((low, True), b))
    np.testing.assert_allclose(got, np.linalg.solve(spd, b), rtol=1e-3, atol=1e-4)
    vectors = rng.normal(size=(3, 4)).astype(np.float32)
    with pytest.warns(FutureWarning, match="batched 1D solves"):
        got = np.asarray(sl.solve_triangular(low, vectors, lower=True))
    np.testing.assert_allclose(got, np.linalg.solve(low, vectors[..., None])[..., 0],
                               rtol=1e-4, atol=1e-5)


@pytest.fixture
def x64_if(request):
    """jax_enable_x64 on for the test's float64 case, restored after."""
    on = request.node.callspec.params.get("dtype") == np.float64
    shardc.config.update("jax_enable_x64", on)
    yield
    shardc.config.update("jax_enable_x64", False)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
def test_eigh_tridiagonal_is_the_dense_matrixs_eigensystem(dtype, x64_if):
    """jax.scipy.linalg.eigh_tridiagonal: the eigenvalues (ascending) and eigenvectors of the
    Hermitian tridiagonal matrix (superdiagonal e, subdiagonal conj(e)), all or a range of
    indices, against numpy's eigvalsh of the dense matrix and scipy's (real); JAX's
    errors. It was missing."""
    rng = np.random.default_rng(1)
    d = rng.standard_normal(9)
    e = rng.standard_normal(8) + (1j * rng.standard_normal(8) if dtype == np.complex64 else 0)
    d, e = d.astype(dtype), e.astype(dtype)
    dense = np.diag(d.real.astype(np.float64)) + np.diag(e, 1) + np.diag(np.conj(e), -1)
    want = np.linalg.eigvalsh(dense)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    values = sl.eigh_tridiagonal(d, e, eigvals_only=True)
    assert values.dtype == np.dtype(dtype).type(0).real.dtype
    np.testing.assert_allclose(values, want, atol=tol * 10)
    some = sl.eigh_tridiagonal(d, e, eigvals_only=True, select="i", select_range=(2, 5))
    np.testing.assert_allclose(some, want[2:6], atol=tol * 10)
    w, v = shardc.jit(sl.eigh_tridiagonal)(d, e)
    np.testing.assert_allclose(dense @ np.asarray(v), np.asarray(v) * np.asarray(w)[None, :],
                               atol=tol * 100)
    np.testing.assert_allclose(np.conj(np.asarray(v)).T @ np.asarray(v), np.eye(9),
                               atol=tol * 100)
    if dtype != np.complex64:
        scipy_linalg = pytest.importorskip("scipy.linalg")
        np.testing.assert_allclose(values, scipy_linalg.eigh_tridiagonal(d, e, eigvals_only=True),
                                   atol=tol * 10)
    with pytest.raises(TypeError, match="must have same dtype"):
        sl.eigh_tridiagonal(d, e.astype(np.complex64) if dtype != np.complex64 else e.real,
                            eigvals_only=True)
    with pytest.raises(NotImplementedError, match="select='v'"):
        sl.eigh_tridiagonal(d, e, eigvals_only=True, select="v", select_range=(0.0, 1.0))
    with pytest.raises(ValueError, match="Got empty index range"):
        sl.eigh_tridiagonal(d, e, eigvals_only=True, select="i", select_range=(3, 2))
