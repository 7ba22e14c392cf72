"""The Schur decomposition and what is built on it (``rsf2csf``, ``sqrtm``, ``funm``,
``solve_sylvester``), the Hessenberg and tridiagonal reductions, ``expm_frechet`` and the
column-pivoted QR decomposition, checked against their defining identities (reconstruction,
triangularity, orthogonality), numpy's eigenvalues and decompositions, and JAX's errors; real
and complex, single and double precision, eagerly, under jit and vmap."""
from __future__ import annotations

import numpy as np
import pytest

import shardc
import shardc.numpy as jnp
import shardc.scipy.linalg as sl
from shardc import lax
from shardc.experimental import enable_x64

RNG = np.random.default_rng(0)

DTYPES = [np.float32, np.complex64, np.float64, np.complex128]


def _matrix(shape, dtype, rng=RNG):
    a = rng.standard_normal(shape) * 2
    if np.issubdtype(dtype, np.complexfloating):
        a = a + 1j * rng.standard_normal(shape) * 2
    return a.astype(dtype)


def _tol(dtype, n=1):
    """An absolute tolerance for entries of size about one, ``n`` times looser."""
    return (2e-5 if np.finfo(dtype).eps > 1e-10 else 1e-12) * max(n, 1)


def _x64(dtype):
    return enable_x64() if np.finfo(dtype).eps < 1e-10 else _nothing()


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _h(x):
    return np.conj(np.swapaxes(x, -1, -2))


def _eigvals_sorted(w):
    w = np.asarray(w, np.complex128)
    return w[np.lexsort((np.round(w.imag, 6), np.round(w.real, 6)))]


def _check_real_schur_form(t, tol):
    """Quasi-triangular with standardised 2x2 blocks (equal diagonal, off-diagonals of
    opposite signs) and never two consecutive nonzero subdiagonal entries."""
    n = t.shape[-1]
    assert np.abs(np.tril(t, -2)).max(initial=0) == 0
    sub = np.diagonal(t, -1)
    for k in range(n - 1):
        if sub[k] != 0:
            assert k == n - 2 or sub[k + 1] == 0
            assert abs(t[k, k] - t[k + 1, k + 1]) <= tol * max(1, abs(t[k, k]))
            assert t[k, k + 1] * sub[k] < 0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 2, 5, 12, 30])
def test_lax_schur_reconstructs_and_is_quasi_triangular(dtype, n):
    with _x64(dtype):
        a = _matrix((n, n), dtype)
        t, z = lax.linalg.schur(a)
        t, z = np.asarray(t), np.asarray(z)
        assert t.dtype == dtype and z.dtype == dtype
        tol = _tol(dtype, n)
        np.testing.assert_allclose(z @ t @ _h(z), a, atol=tol * 10)
        np.testing.assert_allclose(z @ _h(z), np.eye(n), atol=tol)
        if np.issubdtype(dtype, np.complexfloating):
            assert np.abs(np.tril(t, -1)).max(initial=0) == 0
            w = np.diagonal(t)
        else:
            _check_real_schur_form(t, tol)
            w = np.linalg.eigvals(t.astype(np.float64))
        np.testing.assert_allclose(_eigvals_sorted(w),
                                   _eigvals_sorted(np.linalg.eigvals(a.astype(np.complex128))),
                                   atol=tol * 10)


def test_schur_matches_lapack_on_a_small_real_matrix():
    # a 2x2 block's standardised form (LAPACK's lanv2): equal diagonal entries sqrt-product
    a = np.array([[1., 2.], [-3., 1.]])
    with enable_x64():
        t, z = lax.linalg.schur(a)
    np.testing.assert_allclose(np.asarray(t), [[1., 2.], [-3., 1.]])
    np.testing.assert_allclose(np.asarray(z), np.eye(2))
    # a triangular matrix is its own Schur form
    u = np.triu(RNG.standard_normal((4, 4))).astype(np.float32)
    t, z = lax.linalg.schur(u)
    np.testing.assert_allclose(np.asarray(t), u, atol=1e-6)
    np.testing.assert_allclose(np.abs(np.asarray(z)), np.eye(4), atol=1e-6)


def test_schur_batches_jits_and_vmaps():
    a = _matrix((3, 6, 6), np.float32)
    t, z = lax.linalg.schur(a)
    t2, z2 = shardc.jit(shardc.vmap(lax.linalg.schur))(a)
    np.testing.assert_allclose(np.asarray(t2), np.asarray(t), atol=1e-5)
    np.testing.assert_allclose(np.asarray(z2), np.asarray(z), atol=1e-5)
    np.testing.assert_allclose(np.asarray(z) @ np.asarray(t) @ _h(np.asarray(z)), a, atol=1e-4)
    (only,) = lax.linalg.schur(a, compute_schur_vectors=False)
    np.testing.assert_allclose(np.asarray(only), np.asarray(t), atol=1e-6)


def test_schur_non_finite_matrix_gives_nans_for_that_matrix_only():
    a = _matrix((2, 3, 3), np.float32)
    a[1, 0, 0] = np.nan
    t, z = lax.linalg.schur(a)
    assert np.isnan(np.asarray(t)[1]).all() and np.isnan(np.asarray(z)[1]).all()
    assert np.isfinite(np.asarray(t)[0]).all()


def test_schur_errors_as_jax():
    with pytest.raises(TypeError, match="schur does not accept dtype int32 at position 0"):
        lax.linalg.schur(jnp.ones((2, 2), jnp.int32))
    with pytest.raises(ValueError, match=r"The input to schur must be a square matrix. Got "
                                         r"shape \(2, 3\)"):
        lax.linalg.schur(jnp.ones((2, 3)))
    with pytest.raises(NotImplementedError, match="sort feature of LAPACK's gees"):
        lax.linalg.schur(jnp.eye(2), sort_eig_vals=True)
    with pytest.raises(NotImplementedError, match="Differentiation rule for 'schur' not "
                                                  "implemented"):
        shardc.grad(lambda x: lax.linalg.schur(x)[0].sum())(jnp.eye(2))
    with pytest.raises(ValueError, match="Expected 'output' to be either 'real' or 'complex'"):
        sl.schur(jnp.eye(2), output="x")


@pytest.mark.parametrize("dtype", DTYPES)
def test_scipy_schur_complex_output_is_triangular(dtype):
    with _x64(dtype):
        a = _matrix((6, 6), dtype)
        t, z = sl.schur(a, output="complex")
        t, z = np.asarray(t), np.asarray(z)
        assert np.iscomplexobj(t) and np.finfo(t.dtype).eps == np.finfo(dtype).eps
        assert np.abs(np.tril(t, -1)).max() == 0
        np.testing.assert_allclose(z @ t @ _h(z), a, atol=_tol(dtype, 60))
    # integers: a complex Schur form of the default complex dtype
    t, _ = sl.schur(np.eye(2, dtype=np.int32), output="complex")
    assert t.dtype == np.complex64


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 4, 9])
def test_rsf2csf_makes_the_real_schur_form_triangular(dtype, n):
    with _x64(dtype):
        a = _matrix((n, n), dtype).real.astype(np.finfo(dtype).dtype)
        t, z = sl.schur(a)
        tc, zc = sl.rsf2csf(t, z)
        tc, zc = np.asarray(tc), np.asarray(zc)
        assert np.iscomplexobj(tc)
        assert np.abs(np.tril(tc, -1)).max(initial=0) == 0
        np.testing.assert_allclose(zc @ tc @ _h(zc), a, atol=_tol(dtype, 10 * n))
        np.testing.assert_allclose(zc @ _h(zc), np.eye(n), atol=_tol(dtype, n))


def test_rsf2csf_broadcasts_and_checks_shapes():
    a = _matrix((3, 4, 4), np.float32)
    t, z = sl.schur(a)
    tc, zc = sl.rsf2csf(t, z)
    tc1, zc1 = sl.rsf2csf(t[1], z[1])
    np.testing.assert_allclose(np.asarray(tc)[1], np.asarray(tc1), atol=1e-5)
    tb, zb = sl.rsf2csf(t, z[0])
    assert tb.shape == (3, 4, 4) and zb.shape == (3, 4, 4)
    with pytest.raises(ValueError, match="Input 'T' must be square."):
        sl.rsf2csf(jnp.ones((2, 3)), jnp.ones((2, 2)))
    with pytest.raises(ValueError, match="Input array shapes must match"):
        sl.rsf2csf(jnp.ones((2, 2)), jnp.ones((3, 3)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 4, 15])
def test_sqrtm_squares_back(dtype, n):
    with _x64(dtype):
        a = _matrix((n, n), dtype)
        r = np.asarray(sl.sqrtm(a))
        assert np.iscomplexobj(r)
        np.testing.assert_allclose(r @ r, a, atol=_tol(dtype, 20 * n))
        # a positive definite matrix: the symmetric positive root, as from its eigenvectors
        psd = (a @ _h(a) + np.eye(n)).astype(dtype)
        w, v = np.linalg.eigh(psd.astype(np.complex128))
        expected = (v * np.sqrt(w)) @ _h(v)
        np.testing.assert_allclose(np.asarray(sl.sqrtm(psd)), expected, atol=_tol(dtype, 20 * n))
        np.testing.assert_allclose(np.asarray(shardc.jit(sl.sqrtm)(psd)), expected,
                                   atol=_tol(dtype, 20 * n))


@pytest.mark.parametrize("diag,expected", [([1, 0, 0], [1, 0, 0]), ([0, 4, 0], [0, 2, 0]),
                                           ([0, 0, 9, 0, 0, 4], [0, 0, 3, 0, 0, 2])])
@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_sqrtm_of_singular_diagonal_matrices(diag, expected, dtype):
    root = sl.sqrtm(jnp.diag(jnp.array(diag)).astype(dtype))
    np.testing.assert_allclose(np.asarray(root), np.diag(expected), atol=1e-6)


def test_sqrtm_errors_as_jax():
    with pytest.raises(NotImplementedError, match="Blocked version"):
        sl.sqrtm(jnp.eye(2), blocksize=2)
    with pytest.raises(ValueError, match="diag input must be 1d or 2d"):
        sl.sqrtm(jnp.ones((2, 2, 2)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("method", ["schur", "eigen"])
@pytest.mark.parametrize("m,n", [(2, 3), (5, 4), (12, 7)])
def test_solve_sylvester_residual(dtype, method, m, n):
    with _x64(dtype):
        rng = np.random.default_rng(m * n)
        a = _matrix((m, m), dtype, rng) + 4 * np.eye(m, dtype=dtype)
        b = _matrix((n, n), dtype, rng) + 4 * np.eye(n, dtype=dtype)
        x_true = _matrix((m, n), dtype, rng)
        c = a @ x_true + x_true @ b
        x = np.asarray(sl.solve_sylvester(a, b, c, method=method))
        assert x.dtype == dtype
        np.testing.assert_allclose(x, x_true, atol=_tol(dtype, 50))


def test_solve_sylvester_without_a_unique_solution_gives_nans():
    rng = np.random.default_rng(1)
    p = rng.standard_normal((4, 4)) + 4 * np.eye(4)
    w = rng.standard_normal(4)
    a = (p @ np.diag(w) @ np.linalg.inv(p)).astype(np.float32)
    b = (p @ np.diag(-w) @ np.linalg.inv(p)).astype(np.float32)
    c = rng.standard_normal((4, 4)).astype(np.float32)
    for method in ("schur", "eigen"):
        x = sl.solve_sylvester(a, b, c, method=method, tol=1e-5)
        assert np.isnan(np.asarray(x)).all()


def test_solve_sylvester_broadcasts_jits_and_checks():
    a = _matrix((2, 3, 3), np.float32) + 4 * np.eye(3, dtype=np.float32)
    b = _matrix((4, 4), np.float32) + 4 * np.eye(4, dtype=np.float32)
    c = _matrix((3, 4), np.float32)
    x = np.asarray(shardc.jit(sl.solve_sylvester)(a, b, c))
    assert x.shape == (2, 3, 4)
    np.testing.assert_allclose(a @ x + x @ b, np.broadcast_to(c, x.shape), atol=1e-4)
    with pytest.raises(ValueError, match="Incompatible shapes for Sylvester equation"):
        sl.solve_sylvester(jnp.eye(2), jnp.eye(3), jnp.ones((3, 3)))
    with pytest.raises(ValueError, match="Unrecognized method"):
        sl.solve_sylvester(jnp.eye(2), jnp.eye(2), jnp.ones((2, 2)), method="x")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (5, 5), (2, 6, 6), (0, 4, 4)])
def test_hessenberg(dtype, shape):
    with _x64(dtype):
        a = _matrix(shape, dtype)
        h, q = sl.hessenberg(a, calc_q=True)
        h, q = np.asarray(h), np.asarray(q)
        assert h.dtype == dtype and q.dtype == dtype
        assert np.abs(np.tril(h, -2)).max(initial=0) == 0
        n = shape[-1]
        tol = _tol(dtype, 10 * n)
        np.testing.assert_allclose(q @ h @ _h(q), a, atol=tol)
        np.testing.assert_allclose(q @ _h(q), np.broadcast_to(np.eye(n), q.shape), atol=tol)
        np.testing.assert_allclose(np.asarray(sl.hessenberg(a)), h)
        if len(shape) == 3:
            np.testing.assert_allclose(np.asarray(shardc.vmap(sl.hessenberg)(a)), h, atol=tol)
        # the eigenvalues survive the reduction
        if n and shape[0]:
            m = a.reshape((-1, n, n))[0]
            np.testing.assert_allclose(
                _eigvals_sorted(np.linalg.eigvals(h.reshape((-1, n, n))[0].astype(
                    np.complex128))),
                _eigvals_sorted(np.linalg.eigvals(m.astype(np.complex128))), atol=tol * 10)


def test_lax_hessenberg_layout_and_errors():
    a = _matrix((4, 4), np.float32)
    out, taus = lax.linalg.hessenberg(a)
    assert out.shape == (4, 4) and taus.shape == (3,)
    empty, no_taus = lax.linalg.hessenberg(jnp.zeros((2, 0, 0)))
    assert empty.shape == (2, 0, 0) and no_taus.shape == (2, 0)
    with pytest.raises(ValueError, match="Argument to Hessenberg reduction must have shape"):
        lax.linalg.hessenberg(jnp.ones((2, 3)))
    with pytest.raises(TypeError, match="hessenberg does not accept dtype int32"):
        lax.linalg.hessenberg(jnp.ones((2, 2), jnp.int32))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 4, 9])
def test_funm(dtype, n):
    with _x64(dtype):
        a = _matrix((n, n), dtype) / 2
        f = np.asarray(sl.funm(a, lambda x: x * x))
        np.testing.assert_allclose(f, a @ a, atol=_tol(dtype, 20 * n))
        e = np.asarray(sl.funm(a, jnp.exp))
        np.testing.assert_allclose(e, np.asarray(sl.expm(a)), atol=_tol(dtype, 50 * n),
                                   rtol=_tol(dtype, 50))
        f2, err = sl.funm(a, lambda x: x * x, disp=False)
        np.testing.assert_allclose(np.asarray(f2), f)
        assert 0 < float(err) <= 1


def test_funm_needs_a_square_matrix():
    with pytest.raises(ValueError, match="expected square array_like input"):
        sl.funm(jnp.ones((2, 3)), jnp.exp)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 4, 10])
def test_expm_frechet_is_the_block_exponential_corner(dtype, n):
    with _x64(dtype):
        a = _matrix((n, n), dtype) / (2 * n)
        e = _matrix((n, n), dtype)
        expm_a, frechet = sl.expm_frechet(a, e)
        big = np.block([[a, e], [np.zeros_like(a), a]])
        full = np.asarray(sl.expm(big))
        tol = _tol(dtype, 20)
        np.testing.assert_allclose(np.asarray(expm_a), full[:n, :n], atol=tol, rtol=tol)
        np.testing.assert_allclose(np.asarray(frechet), full[:n, n:], atol=tol, rtol=tol)
        only = sl.expm_frechet(a, e, compute_expm=False)
        np.testing.assert_allclose(np.asarray(only), np.asarray(frechet))


def test_expm_frechet_checks_shapes():
    with pytest.raises(ValueError, match="expected A to be a"):
        sl.expm_frechet(jnp.ones((2, 3)), jnp.ones((2, 3)))
    with pytest.raises(ValueError, match="expected A and E to be the same shape"):
        sl.expm_frechet(jnp.eye(2), jnp.eye(3))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (4, 4), (2, 5, 5)])
@pytest.mark.parametrize("lower", [True, False])
def test_tridiagonal(dtype, shape, lower):
    with _x64(dtype):
        a = _matrix(shape, dtype)
        out, d, e, taus = (np.asarray(x) for x in lax.linalg.tridiagonal(a, lower=lower))
        n = shape[-1]
        real = np.finfo(dtype).dtype
        assert out.dtype == dtype and taus.dtype == dtype
        assert d.dtype == real and e.dtype == real
        assert d.shape == shape[:-1] and e.shape == shape[:-1][:-1] + (n - 1,)
        tol = _tol(dtype, 10 * n)
        for idx in np.ndindex(*shape[:-2]):
            m = a[idx]
            tri = np.tril(m, -1) if lower else np.triu(m, 1)
            herm = tri + _h(tri) + np.diag(np.diagonal(m).real)
            # the other triangle is returned as given
            other = np.triu(m, 1) if lower else np.tril(m, -1)
            kept = np.triu(out[idx], 1) if lower else np.tril(out[idx], -1)
            np.testing.assert_array_equal(kept, other)
            np.testing.assert_allclose(np.diagonal(out[idx]), d[idx])
            t = np.diag(d[idx]) + np.diag(e[idx], -1) + np.diag(e[idx], 1)
            np.testing.assert_allclose(np.linalg.eigvalsh(t), np.linalg.eigvalsh(herm),
                                       atol=tol)
            # the reflectors rebuild the similarity: Q^H A Q = T
            q = np.eye(n, dtype=dtype)
            for i in (range(n - 1) if lower else reversed(range(n - 1))):
                v = np.zeros(n, dtype)
                if lower:
                    v[i + 1] = 1
                    v[i + 2:] = out[idx][i + 2:, i]
                else:
                    v[i] = 1
                    v[:i] = out[idx][:i, i + 1]
                q = q @ (np.eye(n) - taus[idx][i] * np.outer(v, np.conj(v)))
            np.testing.assert_allclose(_h(q) @ herm @ q, t, atol=tol)
        vm = shardc.vmap(lambda x: lax.linalg.tridiagonal(x, lower=lower))(
            a.reshape((-1, n, n)))
        np.testing.assert_allclose(np.asarray(vm[1]).reshape(d.shape), d, atol=tol)


def test_tridiagonal_errors():
    with pytest.raises(ValueError, match="The input to tridiagonal must be a square matrix"):
        lax.linalg.tridiagonal(jnp.ones((0, 0)))
    with pytest.raises(TypeError, match="tridiagonal does not accept dtype int32"):
        lax.linalg.tridiagonal(jnp.ones((2, 2), jnp.int32))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 4), (4, 4), (6, 4), (2, 5, 3)])
def test_pivoted_qr(dtype, shape):
    with _x64(dtype):
        a = _matrix(shape, dtype)
        tol = _tol(dtype, 20)
        for mode in ("full", "economic"):
            q, r, p = (np.asarray(x) for x in sl.qr(a, mode=mode, pivoting=True))
            assert p.dtype == np.int32
            permuted = np.take_along_axis(a, np.broadcast_to(p[..., None, :], a.shape), -1)
            np.testing.assert_allclose(q @ r, permuted, atol=tol)
            assert np.abs(np.tril(r, -1)).max() == 0
            diag = np.abs(np.diagonal(r, axis1=-2, axis2=-1))
            assert (np.diff(diag, axis=-1) <= tol).all()
            np.testing.assert_array_equal(np.sort(p, axis=-1),
                                          np.broadcast_to(np.arange(shape[-1]), p.shape))
        r2, p2 = sl.qr(a, mode="r", pivoting=True)
        np.testing.assert_array_equal(np.asarray(p2), p)
        # the first pivot is the column of largest norm
        norms = np.linalg.norm(a, axis=-2)
        np.testing.assert_array_equal(p[..., 0], np.argmax(norms, axis=-1))


def test_pivoted_qr_matches_lapack_geqp3_layout():
    a = np.array([[1., 5., 2.], [0., 1., 7.], [2., 0., 1.]], np.float32)
    out, jpvt, taus = lax.linalg.geqp3(a, jnp.zeros(3, jnp.int32))
    # column 2 has the largest norm, then the remaining norms decide
    assert list(np.asarray(jpvt)) == [3, 2, 1]
    q = np.asarray(lax.linalg.householder_product(out, taus))
    np.testing.assert_allclose(q @ np.triu(np.asarray(out)), a[:, np.asarray(jpvt) - 1],
                               atol=1e-5)
    # a nonzero jpvt entry fixes the column in front
    _, fixed, _ = lax.linalg.geqp3(a, jnp.array([0, 1, 0], jnp.int32))
    assert int(np.asarray(fixed)[0]) == 2


def test_pivoted_qr_multiply_and_derivative():
    a = _matrix((5, 3), np.float32)
    c = _matrix((2, 5), np.float32)
    out, r, p = sl.qr_multiply(a, c, pivoting=True)
    q, r_full, p_full = sl.qr(a, pivoting=True)
    np.testing.assert_array_equal(np.asarray(p), np.asarray(p_full))
    np.testing.assert_allclose(np.asarray(out), c @ np.asarray(q)[:, :3], atol=1e-5)
    np.testing.assert_allclose(np.asarray(r), np.asarray(r_full)[:3], atol=1e-5)
    lq, lr, lp = lax.linalg.qr(a, pivoting=True, full_matrices=False)
    np.testing.assert_array_equal(np.asarray(lp), np.asarray(p))

    def identity(x):
        q, r, p = sl.qr(x, mode="economic", pivoting=True)
        return (q @ r)[:, jnp.argsort(p)]

    t = _matrix((5, 3), np.float32)
    _, tangent = shardc.jvp(identity, (a,), (t,))
    np.testing.assert_allclose(np.asarray(tangent), t, atol=1e-4)
    # empty matrices: zero pivots, as JAX's
    q0, r0, p0 = lax.linalg.qr(jnp.ones((0, 3)), pivoting=True)
    assert p0.shape == (3,) and not np.asarray(p0).any()
