"""Derivatives of svd, qr, eigh, slogdet, cholesky and eig of complex matrices (JAX's rules),
of wide and full-matrices qr, and of eig's eigenvectors where ``enable_eigvec_derivs`` opts
in: JVPs against central finite differences taken in double precision (perturbing real and
imaginary parts), VJPs through the identity Re<ct, J t> = Re<J^T ct, t>, under jit and vmap.
Eigenvectors and singular vectors are compared through quantities that do not depend on
their phases (projectors, reconstructions), as JAX's own tests do."""
from __future__ import annotations

import numpy as np
import pytest

import shardc
import shardc.numpy as jnp
from shardc import lax
from shardc.experimental import enable_x64

RNG = np.random.default_rng(7)


def _sample(shape, complex_):
    x = RNG.standard_normal(shape)
    return x + 1j * RNG.standard_normal(shape) if complex_ else x


def _weighted_projector(v):
    """``V diag(1, 2, ..) V^H``: unchanged by a phase on any column of V."""
    weights = jnp.arange(1, v.shape[-1] + 1).astype(v.dtype)
    return (v * weights[..., None, :]) @ jnp.conj(jnp.swapaxes(v, -1, -2))


def _hermitian(x):
    return x + np.conj(np.swapaxes(x, -1, -2))


# (name, function, input maker(complex_) giving a float64/complex128 array)
CASES = [
    ("svd values", lambda a: jnp.linalg.svd(a, compute_uv=False), lambda c: _sample((4, 3), c)),
    ("svd reconstruction",
     lambda a: (lambda u, s, vt: (u * s[..., None, :].astype(u.dtype)) @ vt)(
         *jnp.linalg.svd(a, full_matrices=False)), lambda c: _sample((3, 5), c)),
    ("svd left vectors (tall)",
     lambda a: _weighted_projector(jnp.linalg.svd(a, full_matrices=False)[0]),
     lambda c: _sample((5, 3), c)),
    ("svd right vectors (wide)",
     lambda a: _weighted_projector(jnp.conj(jnp.swapaxes(
         jnp.linalg.svd(a, full_matrices=False)[2], -1, -2))), lambda c: _sample((3, 5), c)),
    ("svd square, batched",
     lambda a: _weighted_projector(jnp.linalg.svd(a)[0]), lambda c: _sample((2, 3, 3), c)),
    ("eigh values", lambda a: jnp.linalg.eigvalsh(a), lambda c: _hermitian(_sample((4, 4), c))),
    ("eigh vectors", lambda a: _weighted_projector(jnp.linalg.eigh(a)[1]),
     lambda c: _hermitian(_sample((2, 4, 4), c))),
    ("qr tall", lambda a: jnp.linalg.qr(a), lambda c: _sample((5, 3), c)),
    ("qr square, batched", lambda a: jnp.linalg.qr(a), lambda c: _sample((2, 3, 3), c)),
    ("qr wide", lambda a: jnp.linalg.qr(a), lambda c: _sample((3, 5), c)),
    ("qr wide, complete", lambda a: jnp.linalg.qr(a, mode="complete"),
     lambda c: _sample((2, 3, 4), c)),
    ("qr tall, complete", lambda a: jnp.linalg.qr(a, mode="complete"),
     lambda c: _sample((5, 3), c)),
    ("slogdet", lambda a: jnp.linalg.slogdet(a), lambda c: _sample((2, 4, 4), c)),
    ("cholesky", lambda a: jnp.linalg.cholesky(a),
     lambda c: (lambda x: x @ np.conj(np.swapaxes(x, -1, -2)) + 3 * np.eye(4))(
         _sample((4, 4), c))),
    ("eig right vectors",
     lambda a: lax.linalg.eig(a, compute_left_eigenvectors=False,
                              enable_eigvec_derivs=True), lambda c: _sample((4, 4), True)),
    ("eig left and right vectors",
     lambda a: lax.linalg.eig(a, enable_eigvec_derivs=True), lambda c: _sample((4, 4), True)),
    ("eig of real matrices (v * v)",
     lambda a: [x * x for x in lax.linalg.eig(a, compute_left_eigenvectors=False,
                                              enable_eigvec_derivs=True)[1:]],
     lambda c: _sample((5, 5), False)),
]


def _leaves(tree):
    return [np.asarray(x) for x in shardc.tree_util.tree_leaves(tree)]


def _finite_difference(fn, a, t, eps=1e-6):
    """The directional derivative of ``fn`` at ``a`` along ``t``, in double precision."""
    with enable_x64():
        plus, minus = _leaves(fn(jnp.asarray(a + eps * t))), _leaves(fn(jnp.asarray(a - eps * t)))
    return [(p - m) / (2 * eps) for p, m in zip(plus, minus)]


def _check(fn, a, dtype, tol):
    """The JVP of ``fn`` at ``a`` (cast to ``dtype``) along a random direction against finite
    differences, and its VJP against the JVP through the inner-product identity."""
    t = _sample(a.shape, np.iscomplexobj(a))
    want = _finite_difference(fn, a, t)
    x, dx = jnp.asarray(a.astype(dtype)), jnp.asarray(t.astype(dtype))
    _, tangents = shardc.jvp(fn, (x,), (dx,))
    tangents = _leaves(tangents)
    assert len(tangents) == len(want)
    for got, ref in zip(tangents, want):
        scale = max(1.0, float(np.max(np.abs(ref), initial=0)))
        np.testing.assert_allclose(got, ref, rtol=0, atol=tol * scale)
    outputs, vjp = shardc.vjp(fn, x)
    cts = [_sample(o.shape, np.iscomplexobj(o)).astype(o.dtype) for o in _leaves(outputs)]
    (back,) = vjp(shardc.tree_util.tree_unflatten(
        shardc.tree_util.tree_structure(outputs), [jnp.asarray(c) for c in cts]))
    lhs = sum(np.real(np.sum(c * g)) for c, g in zip(cts, tangents))
    rhs = np.real(np.sum(np.asarray(back) * np.asarray(dx)))
    np.testing.assert_allclose(rhs, lhs, rtol=tol * 10, atol=tol * 10)


@pytest.mark.parametrize("name,fn,make", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("precision", ["single", "double"])
def test_derivatives_against_finite_differences(name, fn, make, precision):
    complex_ = not name.startswith("eig of real")
    a = make(complex_)
    if precision == "single":
        _check(fn, a, np.complex64 if np.iscomplexobj(a) else np.float32, 2e-2)
    else:
        with enable_x64():
            _check(fn, a, a.dtype, 1e-6)


@pytest.mark.parametrize("name,fn,make", [c for c in CASES if c[0] in (
    "svd left vectors (tall)", "eigh vectors", "qr wide", "qr tall, complete", "slogdet",
    "cholesky")], ids=lambda c: c if isinstance(c, str) else "")
def test_real_cases_of_the_rules_still_match(name, fn, make):
    """The same rules on real matrices."""
    with enable_x64():
        _check(fn, make(False), np.float64, 1e-6)


def test_under_jit_and_vmap():
    a = _sample((3, 4, 4), True).astype(np.complex64)
    h = jnp.asarray(_hermitian(a))
    loss = lambda x: (jnp.abs(jnp.linalg.svd(x, compute_uv=False)) ** 2).sum() + jnp.real(
        _weighted_projector(jnp.linalg.eigh(x)[1])).sum() + jnp.linalg.slogdet(x)[1].sum()
    grad = shardc.grad(loss)(h)
    np.testing.assert_allclose(np.asarray(shardc.jit(shardc.grad(loss))(h)), np.asarray(grad),
                               rtol=1e-4, atol=1e-4)
    per_matrix = np.stack([np.asarray(shardc.grad(loss)(h[i])) for i in range(3)])
    np.testing.assert_allclose(np.asarray(shardc.vmap(shardc.grad(loss))(h)), per_matrix,
                               rtol=1e-4, atol=1e-4)
    eig = lambda x, t: shardc.jvp(
        lambda y: lax.linalg.eig(y, compute_left_eigenvectors=False,
                                 enable_eigvec_derivs=True), (x,), (t,))[1]
    t = jnp.asarray(_sample(a.shape, True).astype(np.complex64))
    batched = _leaves(shardc.jit(shardc.vmap(eig))(jnp.asarray(a), t))
    for i in range(3):
        for got, want in zip(batched, _leaves(eig(jnp.asarray(a[i]), t[i]))):
            np.testing.assert_allclose(got[i], want, rtol=1e-4, atol=1e-4)


def test_complex_gradient_follows_jax_convention():
    """For a real loss, jax.grad gives d/dRe - i d/dIm (the conjugate of the steepest ascent)."""
    with enable_x64():
        h = _hermitian(_sample((3, 3), True))
        loss = lambda x: (jnp.linalg.eigvalsh(x) ** 2).sum()
        grad = np.asarray(shardc.grad(loss)(jnp.asarray(h)))
        e = np.zeros((3, 3), complex)
        e[0, 1] = 1
        d_re = (float(loss(jnp.asarray(h + 1e-6 * e))) - float(loss(jnp.asarray(h - 1e-6 * e))))
        d_im = (float(loss(jnp.asarray(h + 1e-6j * e)))
                - float(loss(jnp.asarray(h - 1e-6j * e))))
        np.testing.assert_allclose(grad[0, 1], (d_re - 1j * d_im) / 2e-6, rtol=1e-6)


def test_eigenvector_derivatives_need_the_opt_in():
    a = jnp.asarray(_sample((3, 3), True).astype(np.complex64))
    message = "Pass enable_eigvec_derivs=True to jax.lax.linalg.eig to opt in"
    with pytest.raises(NotImplementedError, match=message):
        shardc.jvp(lambda x: lax.linalg.eig(x)[2], (a,), (a,))
    with pytest.raises(NotImplementedError, match=message):
        shardc.grad(lambda x: jnp.abs(jnp.linalg.eig(x)[1]).sum())(a)
    # the eigenvalues alone need none
    shardc.grad(lambda x: jnp.abs(jnp.linalg.eigvals(x)).sum())(a)


def test_svd_of_non_square_full_matrices_has_no_derivative():
    a = jnp.asarray(_sample((3, 4), True).astype(np.complex64))
    with pytest.raises(NotImplementedError,
                       match="Singular value decomposition JVP not implemented for full"):
        shardc.jvp(lambda x: jnp.linalg.svd(x, full_matrices=True), (a,), (a,))


def test_qr_of_empty_matrices_has_zero_tangents():
    for shape, mode in (((0, 2), "complete"), ((2, 0), "complete"), ((0, 0), "reduced")):
        a = jnp.zeros(shape, jnp.complex64)
        (q, r), (dq, dr) = shardc.jvp(lambda x: jnp.linalg.qr(x, mode=mode), (a,), (a,))
        assert dq.shape == q.shape and dr.shape == r.shape
        assert not np.asarray(dq).any() and not np.asarray(dr).any()


def test_hermitian_svd_and_sorting_derivatives_under_x64():
    """svd(hermitian=True) sorts |eigenvalues|: the sort's tangent gathers with 64-bit
    positions under x64 (it multiplied them by a 32-bit stride and failed)."""
    with enable_x64():
        _check(lambda a: jnp.linalg.svd(a, hermitian=True, compute_uv=False),
               _hermitian(_sample((2, 4, 4), True)), np.complex128, 1e-6)
        x = _sample((3, 4), False)
        _, tangent = shardc.jvp(lambda y: jnp.sort(y, axis=0), (jnp.asarray(x),),
                                (jnp.asarray(2 * x),))
        np.testing.assert_allclose(np.asarray(tangent), 2 * np.sort(x, axis=0))
