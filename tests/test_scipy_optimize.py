"""shardc.scipy.optimize (jax.scipy.optimize): minimize by BFGS and L-BFGS against
scipy.optimize, the strong Wolfe line search, the results' fields and JAX's errors."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize

import shardc
import shardc.numpy as jnp
import shardc.scipy.optimize
from shardc.scipy.optimize import OptimizeResults, minimize
from shardc.scipy.optimize.line_search import LineSearchResults, line_search

LBFGS = "l-bfgs-experimental-do-not-rely-on-this"


# --- objectives, written once for numpy and once for shardc.numpy ---------------------------------

def chained_quadratic(np_):
    """JAX's tests' 'rosenbrock': a chain of squared differences, minimum 0 at all ones."""
    return lambda x: np_.sum(100. * np_.diff(x) ** 2 + (1. - x[:-1]) ** 2)


def rosenbrock(np_):
    return lambda x: np_.sum(100. * (x[1:] - x[:-1] ** 2) ** 2 + (1. - x[:-1]) ** 2)


def himmelblau(np_):
    def f(p):
        x, y = p[0], p[1]
        return (x ** 2 + y - 11.) ** 2 + (x + y ** 2 - 7.) ** 2
    return f


_RNG = np.random.default_rng(0)
_M = _RNG.normal(size=(5, 5))
_Q = _M @ _M.T + 5 * np.eye(5)          # symmetric positive definite
_C = _RNG.normal(size=5)


def quadratic_form(np_):
    return lambda x: 0.5 * x @ np_.asarray(_Q) @ x - np_.asarray(_C) @ x


_FEATURES = _RNG.normal(size=(40, 3))
_LABELS = (_FEATURES @ np.array([1.5, -2., 0.5]) + 0.5 * _RNG.normal(size=40) > 0) * 1.


def logistic_loss(np_):
    def f(w):
        z = np_.asarray(_FEATURES) @ w
        return np_.mean(np_.log1p(np_.exp(-np_.abs(z))) + np_.maximum(z, 0)
                        - np_.asarray(_LABELS) * z) + 0.01 * np_.sum(w ** 2)
    return f


def _scipy_bfgs(f, x0, gtol=1e-5):
    return scipy.optimize.minimize(f(np), np.asarray(x0, np.float64), method="BFGS",
                                   options=dict(gtol=gtol))


CASES = [
    ("chained_quadratic", chained_quadratic, [0., 0., 0.]),
    ("quadratic_form", quadratic_form, [1., -1., 2., 0., 3.]),
    ("himmelblau_1", himmelblau, [1., 1.]),
    ("himmelblau_2", himmelblau, [-1., 2.]),
    ("himmelblau_3", himmelblau, [4., -3.]),
    ("logistic", logistic_loss, [0., 0., 0.]),
]


# --- BFGS against scipy -----------------------------------------------------------------------

@pytest.mark.parametrize("name,objective,x0", CASES, ids=[c[0] for c in CASES])
def test_bfgs_matches_scipy_x64(name, objective, x0):
    expected = _scipy_bfgs(objective, x0, gtol=1e-9)
    with shardc.enable_x64():
        res = minimize(objective(jnp), jnp.asarray(x0), method="BFGS",
                       options=dict(gtol=1e-8))
        assert res.x.dtype == np.float64
        assert bool(res.success) and int(res.status) == 0
        np.testing.assert_allclose(res.x, expected.x, atol=1e-6, rtol=1e-6)
        np.testing.assert_allclose(res.fun, expected.fun, atol=1e-10, rtol=1e-10)
        assert float(jnp.max(jnp.abs(res.jac))) < 1e-8          # gtol bounds the inf-norm


@pytest.mark.parametrize("name,objective,x0", CASES, ids=[c[0] for c in CASES])
def test_bfgs_matches_scipy_float32(name, objective, x0):
    expected = _scipy_bfgs(objective, x0)
    res = minimize(objective(jnp), jnp.asarray(x0, jnp.float32), method="BFGS",
                   options=dict(gtol=1e-4))
    assert res.x.dtype == np.float32 and res.fun.dtype == np.float32
    np.testing.assert_allclose(res.x, expected.x, atol=2e-3, rtol=2e-3)
    np.testing.assert_allclose(res.fun, expected.fun, atol=1e-4, rtol=1e-4)


def test_bfgs_quadratic_inverse_hessian():
    """On a quadratic the inverse Hessian estimate approaches the exact inverse."""
    with shardc.enable_x64():
        res = minimize(quadratic_form(jnp), jnp.zeros(5), method="BFGS",
                       options=dict(gtol=1e-10))
    np.testing.assert_allclose(res.x, np.linalg.solve(_Q, _C), rtol=1e-9)
    np.testing.assert_allclose(res.hess_inv, np.linalg.inv(_Q), atol=1e-3)


# --- JAX's own iteration counts and failures ----------------------------------------------------

@pytest.mark.parametrize("x64", [False, True])
@pytest.mark.parametrize("x0,nit,fun", [([0., 0.], 1, 0.77657), ([-1.2, 1.], 8, 1.74729)])
def test_bfgs_rosenbrock_fails_as_jax_does(x64, x0, nit, fun):
    """JAX's zoom compares the signed bracket width to its threshold, so a reversed bracket
    counts as collapsed: on Rosenbrock JAX's BFGS stops with status 3 (zoom failed) where
    scipy converges. The counts and values are the ones JAX reports."""
    with shardc.enable_x64(x64):
        res = minimize(rosenbrock(jnp), jnp.asarray(x0), method="BFGS")
    assert int(res.status) == 3 and not bool(res.success)
    assert int(res.nit) == nit
    np.testing.assert_allclose(res.fun, fun, rtol=1e-5)


def test_bfgs_maxiter_status():
    res = minimize(rosenbrock(jnp), jnp.asarray([2., 2.]), method="bfgs",
                   options=dict(maxiter=2))
    assert int(res.nit) == 2 and int(res.status) == 1 and not bool(res.success)


def test_bfgs_converged_at_start():
    res = minimize(lambda x: jnp.sum(x ** 2), jnp.zeros(3), method="BFGS")
    assert (int(res.nit), int(res.nfev), int(res.njev), int(res.status)) == (0, 1, 1, 0)
    assert bool(res.success)
    np.testing.assert_array_equal(res.hess_inv, np.eye(3))


def test_badly_scaled_isotropic_quadratic_x64():
    """JAX's test for its issue 4594, in 64-bit mode: rounding in ``H @ g`` must not turn
    the search off the gradient's direction."""
    A = jnp.eye(2) * 1e4
    with shardc.enable_x64():
        res = minimize(lambda x: jnp.mean((A @ x) ** 2), jnp.ones(2), method="BFGS")
    assert int(res.status) == 0
    np.testing.assert_allclose(res.x, np.zeros(2), atol=1e-6)


# --- the results ------------------------------------------------------------------------------

def test_optimize_results_fields():
    assert OptimizeResults._fields == ("x", "success", "status", "fun", "jac", "hess_inv",
                                       "nfev", "njev", "nit")
    res = minimize(himmelblau(jnp), jnp.ones(2), method="BFGS")
    assert isinstance(res, OptimizeResults)
    assert res.x.shape == (2,) and res.jac.shape == (2,) and res.hess_inv.shape == (2, 2)
    assert res.fun.shape == () and res.success.dtype == np.bool_
    for count in (res.status, res.nfev, res.njev, res.nit):
        assert np.issubdtype(count.dtype, np.integer) and count.shape == ()
    assert int(res.nfev) == int(res.njev) > int(res.nit) > 0
    np.testing.assert_allclose(res.fun, himmelblau(np)(np.asarray(res.x)), rtol=1e-5,
                               atol=1e-6)


def test_public_names():
    assert sorted(shardc.scipy.optimize.__all__) == ["OptimizeResults", "minimize"]


def test_args_are_passed():
    def f(x, Q, c):
        return 0.5 * x @ Q @ x - c @ x
    with shardc.enable_x64():
        res = minimize(f, jnp.zeros(5), args=(jnp.asarray(_Q), jnp.asarray(_C)),
                       method="BFGS", tol=1e-3)        # tol is unused, as in JAX
    np.testing.assert_allclose(res.x, np.linalg.solve(_Q, _C), rtol=1e-6)


def test_jit_matches_eager():
    f = himmelblau(jnp)
    eager = minimize(f, jnp.asarray([-1., 2.]), method="BFGS")
    jitted = shardc.jit(lambda x0: minimize(f, x0, method="BFGS"))(jnp.asarray([-1., 2.]))
    for field in OptimizeResults._fields:
        np.testing.assert_allclose(getattr(jitted, field), getattr(eager, field), rtol=1e-6)


def test_jit_with_traced_args():
    @shardc.jit
    def solve(x0, c):
        return minimize(lambda x, c: jnp.sum((x - c) ** 2), x0, (c,), method="BFGS").x
    np.testing.assert_allclose(solve(jnp.zeros(3), jnp.asarray([1., 2., 3.])),
                               [1., 2., 3.], rtol=1e-5)


@pytest.mark.parametrize("method", ["BFGS", LBFGS])
def test_vmap_over_x0(method):
    starts = jnp.asarray([[1., 1.], [-1., 2.], [4., -3.]])
    batched = shardc.vmap(lambda x0: minimize(himmelblau(jnp), x0, method=method))(starts)
    for k in range(3):
        one = minimize(himmelblau(jnp), starts[k], method=method)
        assert int(batched.nit[k]) == int(one.nit)
        assert int(batched.status[k]) == int(one.status)
        np.testing.assert_allclose(batched.x[k], one.x, rtol=1e-5)


# --- L-BFGS -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name,objective,x0", CASES, ids=[c[0] for c in CASES])
def test_lbfgs_matches_scipy_x64(name, objective, x0):
    expected = scipy.optimize.minimize(objective(np), np.asarray(x0), method="L-BFGS-B",
                                       options=dict(gtol=1e-9, ftol=1e-15))
    with shardc.enable_x64():
        res = minimize(objective(jnp), jnp.asarray(x0), method=LBFGS,
                       options=dict(gtol=1e-7))
    assert res.hess_inv is None
    assert int(res.status) in (0, 4)      # converged, or stopped by ftol right beside it
    np.testing.assert_allclose(res.x, expected.x, atol=2e-5, rtol=2e-5)
    np.testing.assert_allclose(res.fun, expected.fun, atol=1e-9, rtol=1e-7)


def test_lbfgs_method_name_any_case():
    res = minimize(himmelblau(jnp), jnp.ones(2), method="L-BFGS-Experimental-Do-Not-Rely-On-This")
    assert bool(res.success) and int(res.status) == 0
    np.testing.assert_allclose(res.x, [3., 2.], atol=1e-4)


def test_lbfgs_limits():
    f = rosenbrock(jnp)
    x0 = jnp.asarray([-1.2, 1.])
    # the limits are checked against the state before each step: maxiter=2 takes 3 steps
    res = minimize(f, x0, method=LBFGS, options=dict(maxiter=2))
    assert (bool(res.success), int(res.status), int(res.nit)) == (False, 1, 3)
    assert int(minimize(f, x0, method=LBFGS, options=dict(maxfun=5)).status) == 2
    assert int(minimize(f, x0, method=LBFGS, options=dict(maxgrad=5)).status) == 3


def test_lbfgs_complex():
    z0 = jnp.asarray([1., 2. - 3.j, 4., -5.j])
    res = minimize(lambda z: jnp.real(jnp.vdot(z - z0, z - z0)), jnp.zeros_like(z0),
                   method=LBFGS, options=dict(gtol=1e-6))
    assert res.x.dtype == np.complex64 and bool(res.success)
    np.testing.assert_allclose(res.x, z0, atol=1e-5)


# --- line search ------------------------------------------------------------------------------

def test_line_search_quadratic_exact_step():
    res = line_search(lambda x: jnp.sum(x ** 2), jnp.ones(2), -jnp.ones(2))
    assert isinstance(res, LineSearchResults)
    assert LineSearchResults._fields == ("failed", "nit", "nfev", "ngev", "k", "a_k", "f_k",
                                         "g_k", "status")
    assert not bool(res.failed) and int(res.status) == 0
    # the first trial step (1) is accepted; the start was evaluated too
    assert (int(res.nit), int(res.k), int(res.nfev), int(res.ngev)) == (1, 2, 2, 2)
    assert float(res.a_k) == 1.0 and float(res.f_k) == 0.0
    np.testing.assert_array_equal(res.g_k, [0., 0.])


def test_line_search_strong_wolfe():
    f = rosenbrock(jnp)
    with shardc.enable_x64():
        xk = jnp.asarray([-1.2, 1.])
        gk = shardc.grad(f)(xk)
        pk = -gk
        res = line_search(f, xk, pk, old_fval=f(xk), gfk=gk, c1=1e-4, c2=0.9)
        a = float(res.a_k)
        assert not bool(res.failed) and a > 0
        slope0 = float(gk @ pk)
        np.testing.assert_allclose(res.f_k, f(xk + a * pk), rtol=1e-12)
        np.testing.assert_allclose(res.g_k, shardc.grad(f)(xk + a * pk), rtol=1e-12)
        assert float(res.f_k) <= float(f(xk)) + 1e-4 * a * slope0
        assert abs(float(res.g_k @ pk)) <= -0.9 * slope0
        # old_fval and gfk given: no evaluation at the start
        assert int(res.nfev) == int(res.ngev) >= int(res.nit)


def test_line_search_out_of_iterations():
    """A direction along which the function keeps falling: the step doubles until maxiter
    (status 3, failed), and no step was accepted, so the result is the start's."""
    res = line_search(lambda x: -jnp.sum(x), jnp.zeros(2), jnp.ones(2), maxiter=4)
    assert bool(res.failed) and int(res.status) == 3
    assert (int(res.nit), int(res.nfev)) == (4, 5)
    assert float(res.a_k) == 0.0 and float(res.f_k) == 0.0
    np.testing.assert_array_equal(res.g_k, [-1., -1.])


# --- errors -----------------------------------------------------------------------------------

def _sphere(x):
    return jnp.sum(x ** 2)


def test_unknown_method():
    with pytest.raises(ValueError, match="^Method nelder-mead not recognized$"):
        minimize(_sphere, jnp.ones(2), method="nelder-mead")


def test_method_is_required():
    with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'method'"):
        minimize(_sphere, jnp.ones(2))


def test_args_must_be_a_tuple():
    with pytest.raises(TypeError, match=r"^args argument to jax\.scipy\.optimize\.minimize "
                                        r"must be a tuple, got 45$"):
        minimize(_sphere, jnp.ones(2), args=45, method="BFGS")


@pytest.mark.parametrize("method,function,option", [
    ("BFGS", "minimize_bfgs", "maxcor"),
    (LBFGS, "minimize_lbfgs", "line_search_maxiter"),
])
def test_unknown_option(method, function, option):
    with pytest.raises(TypeError, match=f"{function}\\(\\) got an unexpected keyword "
                                        f"argument '{option}'"):
        minimize(_sphere, jnp.ones(2), method=method, options={option: 3})


def test_x0_not_1d():
    """JAX checks no shape; a 2-D x0 meets the zoom loop's predicate check (BFGS) or a
    history update (L-BFGS), as in JAX."""
    with pytest.raises(TypeError, match=r"cond_fun must return a boolean scalar, but got "
                                        r"output type\(s\) \[ShapedArray\(bool\[2,2\]\)\]"):
        minimize(_sphere, jnp.ones((2, 2)), method="BFGS")
    with pytest.raises(ValueError, match="Cannot broadcast to shape with fewer dimensions"):
        minimize(_sphere, jnp.ones((2, 2)), method=LBFGS)
    with pytest.raises(IndexError):
        minimize(_sphere, jnp.asarray(1.), method="BFGS")
    with pytest.raises(TypeError, match="len\\(\\) of unsized object"):
        minimize(_sphere, jnp.asarray(1.), method=LBFGS)


def test_fun_must_be_scalar():
    with pytest.raises(TypeError, match="Gradient only defined for scalar-output functions"):
        minimize(lambda x: x ** 2, jnp.ones(2), method="BFGS")
