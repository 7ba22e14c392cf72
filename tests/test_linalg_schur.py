"""lax.linalg's Schur decomposition, Hessenberg and tridiagonal reductions and
column-pivoted QR decomposition, checked against their defining identities (reconstruction,
triangularity, orthogonality), numpy's eigenvalues and decompositions, and JAX's errors; real
and complex, single and double precision, eagerly, under jit and vmap."""
from __future__ import annotations

import numpy as np
import pytest

import shardc
import shardc.numpy as jnp
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


def test_lax_hessenberg_layout_and_errors():
    a = _matrix((4, 4), np.float32)
    out, taus = lax.linalg.hessenberg(a)
    assert out.shape == (4, 4) and taus.shape == (3,)
    with pytest.raises(ValueError, match="Argument to Hessenberg reduction must have shape"):
        lax.linalg.hessenberg(jnp.ones((2, 3)))
    with pytest.raises(TypeError, match="hessenberg does not accept dtype int32"):
        lax.linalg.hessenberg(jnp.ones((2, 2), jnp.int32))


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
