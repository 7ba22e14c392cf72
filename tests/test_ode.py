"""shardc.experimental.ode (jax.experimental.ode): odeint against closed-form solutions and
scipy's integrators, JAX's own results, pytree states and args, adjoint gradients against
finite differences, jit and vmap, and JAX's errors."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.integrate

import shardc
import shardc.numpy as jnp
from shardc.experimental import ode
from shardc.experimental.ode import odeint

TIGHT = dict(rtol=1e-11, atol=1e-11)


@pytest.fixture
def x64():
    with shardc.enable_x64():
        yield


def pendulum(np_):
    def f(y, t, damping, gravity):
        return np_.stack([y[1], -damping * y[1] - gravity * np_.sin(y[0])])
    return f


PEND_Y0 = np.array([np.pi - 0.1, 0.])


# --- closed-form solutions ---------------------------------------------------------------------

def test_exponential_decay(x64):
    ts = jnp.linspace(0., 3., 13)
    ys = odeint(lambda y, t, k: -k * y, jnp.array([1., -2.]), ts, 1.7, **TIGHT)
    exact = np.exp(-1.7 * np.asarray(ts))[:, None] * np.array([1., -2.])
    np.testing.assert_allclose(ys, exact, rtol=1e-9, atol=1e-12)


def test_harmonic_oscillator_pytree_state(x64):
    def oscillator(state, t, omega):
        return {"x": state["v"], "v": -omega ** 2 * state["x"]}

    ts = jnp.linspace(0., 10., 21)
    ys = odeint(oscillator, {"x": jnp.array(1.), "v": jnp.array(0.)}, ts, 1.3, **TIGHT)
    assert set(ys) == {"x", "v"} and ys["x"].shape == (21,)
    np.testing.assert_allclose(ys["x"], np.cos(1.3 * np.asarray(ts)), atol=1e-9)
    np.testing.assert_allclose(ys["v"], -1.3 * np.sin(1.3 * np.asarray(ts)), atol=1e-9)


def test_logistic_growth(x64):
    rate, capacity, y0 = 2., 10., 0.5
    ts = jnp.linspace(0., 5., 11)
    ys = odeint(lambda y, t: rate * y * (1 - y / capacity), y0, ts, **TIGHT)
    exact = capacity / (1 + (capacity / y0 - 1) * np.exp(-rate * np.asarray(ts)))
    np.testing.assert_allclose(ys, exact, rtol=1e-9)


def test_float32_default_tolerances():
    ys = odeint(lambda y, t: -y, jnp.ones(3), jnp.linspace(0., 2., 5))
    assert ys.dtype == jnp.float32 and ys.shape == (5, 3)
    np.testing.assert_allclose(ys[:, 0], np.exp(-np.linspace(0., 2., 5)), rtol=2e-6)


def test_complex_state(x64):
    ts = jnp.linspace(0., 1., 6)
    ys = odeint(lambda y, t, a: a * y, 1 + 2j, ts, -1 + 3j, **TIGHT)
    assert ys.dtype == jnp.complex128
    np.testing.assert_allclose(ys, (1 + 2j) * np.exp((-1 + 3j) * np.asarray(ts)), rtol=1e-9)


# --- scipy's integrators -----------------------------------------------------------------------

def test_pendulum_matches_scipy_odeint(x64):
    ts = np.linspace(0., 3., 16)
    expected = scipy.integrate.odeint(pendulum(np), PEND_Y0, ts, (0.25, 9.8),
                                      rtol=1e-12, atol=1e-12)
    ys = odeint(pendulum(jnp), jnp.asarray(PEND_Y0), jnp.asarray(ts), 0.25, 9.8, **TIGHT)
    np.testing.assert_allclose(ys, expected, atol=1e-8)


def test_time_dependent_matches_solve_ivp(x64):
    def rhs(np_):
        return lambda y, t, a: np_.array([y[1] * -t, -a * y[1] - np_.cos(t) * y[0]])

    ts = np.linspace(0.5, 4., 8)
    y0 = np.array([1., -0.5])
    sol = scipy.integrate.solve_ivp(lambda t, y: rhs(np)(y, t, 0.3), (ts[0], ts[-1]), y0,
                                    method="DOP853", t_eval=ts, rtol=1e-13, atol=1e-13)
    ys = odeint(rhs(jnp), jnp.asarray(y0), jnp.asarray(ts), 0.3, **TIGHT)
    np.testing.assert_allclose(ys, sol.y.T, atol=1e-8)


# --- JAX's own results (JAX 0.10.2, x64): same steps, same interpolation ------------------------

JAX_PENDULUM = np.array([
    [3.041592653589793, 0.],
    [2.8986886347877885, -0.6695129588966138],
    [2.1134020033469354, -2.9375810790569554],
    [-0.27683977340678306, -5.628275657531638],
    [-2.0086962161603314, -1.006661816368811]])
JAX_PENDULUM_LOOSE = np.array([
    [3.041592653589793, 0.],
    [2.898694348485367, -0.6695220121094557],
    [2.113478364820339, -2.93711910366228],
    [-0.27796256271848063, -5.630418918370404],
    [-2.009234316606151, -1.004635348377041]])
JAX_PENDULUM_HMAX = np.array([
    [3.041592653589793, 0.],
    [2.8986884357915392, -0.6695134609761804],
    [2.1134013344411104, -2.9375812949324245],
    [-0.2768447688100196, -5.628266327878335],
    [-2.008692143432638, -1.0066423649224325]])


@pytest.mark.parametrize("options, expected", [
    ({}, JAX_PENDULUM),
    (dict(rtol=1e-4, atol=1e-4), JAX_PENDULUM_LOOSE),
    (dict(rtol=1e-4, atol=1e-4, hmax=0.1), JAX_PENDULUM_HMAX)])
def test_matches_jax(x64, options, expected):
    ys = odeint(pendulum(jnp), jnp.asarray(PEND_Y0), jnp.linspace(0., 2., 5), 0.25, 9.8,
                **options)
    # loose tolerances are far from the true solution, so agreeing to rounding means the
    # same steps were taken and interpolated
    np.testing.assert_allclose(ys, expected, rtol=1e-12, atol=1e-12)


def test_gradients_match_jax(x64):
    def loss(y0, ts, damping, gravity):
        return jnp.sum(odeint(pendulum(jnp), y0, ts, damping, gravity,
                              rtol=1e-6, atol=1e-6) ** 2)

    grads = shardc.grad(loss, argnums=(0, 1, 2, 3))(
        jnp.asarray(PEND_Y0), jnp.linspace(0., 2., 5), 0.25, 9.8)
    expected = [[95.47639849378581, 26.144078321754517],
                [25.578689514429527, -0.9492952645573274, 32.57552940233406,
                 -42.87373636257197, -14.331187289634293],
                -32.52218015301298, 1.571194739880045]
    for grad, want in zip(grads, expected):
        np.testing.assert_allclose(grad, want, rtol=1e-11)


def test_step_limits(x64):
    ts = jnp.linspace(0., 2., 5)
    converged = odeint(pendulum(jnp), jnp.asarray(PEND_Y0), ts, 0.25, 9.8)
    stopped = odeint(pendulum(jnp), jnp.asarray(PEND_Y0), ts, 0.25, 9.8, mxstep=2)
    assert np.all(np.isfinite(stopped)) and not np.allclose(stopped, converged, atol=1e-3)

    def ramp(y, t):      # zero except on [0, 2] and [5, 7]: steps must not jump over them
        return jnp.piecewise(t, [t <= 2., (t >= 5.) & (t <= 7.)],
                             [lambda s: jnp.array(1.), lambda s: jnp.array(-1.),
                              lambda s: jnp.array(0.)])
    ys = odeint(ramp, jnp.array(0.), jnp.array([0., 5., 10.]), hmax=1.)
    np.testing.assert_allclose(ys, [0., 2., 0.], atol=1e-4)


# --- pytrees and args ----------------------------------------------------------------------------

def test_pytree_state_and_args():
    def rhs(state, t, params, scale):
        return (-params["rate"] * state[0], {"w": -scale * state[1]["w"]})

    y0 = (jnp.ones((2, 3)), {"w": jnp.arange(4.)})
    params = {"rate": jnp.array([[1.], [2.]]), "unused": [None, jnp.zeros(1)]}
    ts = jnp.array([0., 0.5, 1.])
    ys = odeint(rhs, y0, ts, params, 1.5, rtol=1e-6, atol=1e-6)
    assert ys[0].shape == (3, 2, 3) and ys[1]["w"].shape == (3, 4)
    np.testing.assert_allclose(ys[0][:, :, 0], np.exp(-np.outer([0., 0.5, 1.], [1., 2.])),
                               rtol=1e-5)
    np.testing.assert_allclose(ys[1]["w"], np.exp(-1.5 * np.array([0., 0.5, 1.]))[:, None]
                               * np.arange(4.), rtol=1e-5)


def test_single_time_returns_initial_state():
    ys = odeint(lambda y, t: -y, jnp.array([1., 2.]), jnp.array([0.5]))
    np.testing.assert_array_equal(ys, [[1., 2.]])


def test_numpy_times_and_python_scalar_state():
    ys = odeint(lambda y, t: -y, 1., np.array([0., 1.]))
    assert ys.shape == (2,) and ys.dtype == jnp.float32


# --- gradients by the adjoint method -----------------------------------------------------------

def central_difference(f, x, eps=1e-6):
    x = np.asarray(x, np.float64)
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[i] = eps
        grad[i] = (f(x + step) - f(x - step)) / (2 * eps)
    return grad


def decay_loss(y0, ts, shift, rate):
    def rhs(y, t, shift, rate):
        return -rate * y + shift * jnp.sin(t) - 0.1 * y ** 2
    ys = odeint(rhs, y0, ts, shift, rate, **TIGHT)
    return jnp.sum(ys ** 2 * jnp.arange(1., 1. + len(ts))[:, None])


DECAY_ARGS = (np.array([0.7, -0.3]), np.array([0.1, 0.4, 0.9, 1.3]), np.array([0.5, 1.]), 1.2)


@pytest.mark.parametrize("argnum", [0, 1, 2, 3])
def test_gradient_against_finite_differences(x64, argnum):
    grad = shardc.grad(decay_loss, argnums=argnum)(*map(jnp.asarray, DECAY_ARGS))

    def along(x):
        args = list(DECAY_ARGS)
        args[argnum] = x
        return float(decay_loss(*map(jnp.asarray, args)))
    np.testing.assert_allclose(grad, central_difference(along, DECAY_ARGS[argnum]),
                               rtol=1e-6, atol=1e-8)


def test_vjp_against_jvp_of_finite_differences(x64):
    """<vjp(ct), v> equals the directional derivative of <odeint, ct> along v."""
    y0, ts, shift, rate = map(jnp.asarray, DECAY_ARGS)

    def solve(y0, shift):
        return odeint(lambda y, t, s: -rate * y + s * jnp.sin(t), y0, ts, shift, **TIGHT)
    ys, vjp = shardc.vjp(solve, y0, shift)
    rng = np.random.default_rng(1)
    ct, v_y0, v_shift = rng.normal(size=ys.shape), rng.normal(size=2), rng.normal(size=2)
    y0_bar, shift_bar = vjp(jnp.asarray(ct))
    eps = 1e-6
    derivative = (np.sum(ct * solve(y0 + eps * v_y0, shift + eps * v_shift))
                  - np.sum(ct * solve(y0 - eps * v_y0, shift - eps * v_shift))) / (2 * eps)
    np.testing.assert_allclose(np.dot(y0_bar, v_y0) + np.dot(shift_bar, v_shift),
                               derivative, rtol=1e-7)


def test_gradient_of_closed_over_value(x64):
    def final(rate):
        return odeint(lambda y, t: -rate * y, 1., jnp.linspace(0., 2., 5), **TIGHT)[-1]
    np.testing.assert_allclose(shardc.grad(final)(0.8), -2. * np.exp(-1.6), rtol=1e-8)
    np.testing.assert_allclose(shardc.jit(shardc.grad(final))(0.8), -2. * np.exp(-1.6),
                               rtol=1e-8)


def test_second_order_gradient(x64):
    def final(rate):
        return odeint(lambda y, t, r: -r * y, 1., jnp.array([0., 2.]), rate, **TIGHT)[-1]
    np.testing.assert_allclose(shardc.grad(shardc.grad(final))(0.8), 4. * np.exp(-1.6),
                               rtol=1e-7)


def test_pytree_state_gradient(x64):
    def loss(y0):
        ys = odeint(lambda y, t: {"a": -y["a"], "b": y["a"] - y["b"]}, y0,
                    jnp.array([0., 1.]), **TIGHT)
        return ys["b"][-1].sum()
    grad = shardc.grad(loss)({"a": jnp.array(1.), "b": jnp.ones(2)})
    # b(1) = (b0 + a0) e^-1 per component, a0 shared by both
    np.testing.assert_allclose(grad["a"], 2 * np.exp(-1.), rtol=1e-9)
    np.testing.assert_allclose(grad["b"], np.full(2, np.exp(-1.)), rtol=1e-9)


# --- transformations -----------------------------------------------------------------------------

def test_jit_matches_eager():
    args = (jnp.asarray(PEND_Y0, jnp.float32), jnp.linspace(0., 2., 5), 0.25, 9.8)
    solve = lambda *a: odeint(pendulum(jnp), *a, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(shardc.jit(solve)(*args), solve(*args), rtol=1e-6, atol=1e-6)


def test_vmap_over_initial_states_and_args(x64):
    ts = jnp.linspace(0., 1., 4)
    y0s = jnp.array([[1., 2.], [3., -1.], [0.5, 0.]])
    rates = jnp.array([0.5, 1., 2.])
    solve = lambda y0, rate: odeint(lambda y, t, r: -r * y, y0, ts, rate, **TIGHT)
    ys = shardc.vmap(solve)(y0s, rates)
    assert ys.shape == (3, 4, 2)
    for y0, rate, y in zip(y0s, rates, ys):
        np.testing.assert_allclose(y, solve(y0, rate), rtol=1e-10, atol=1e-12)


def test_vmap_of_grad(x64):
    final = lambda rate: odeint(lambda y, t: -rate * y, 1., jnp.array([0., 1.]), **TIGHT)[-1]
    rates = jnp.array([0.1, 0.5, 1.])
    np.testing.assert_allclose(shardc.vmap(shardc.grad(final))(rates),
                               -np.exp(-np.asarray(rates)), rtol=1e-8)


# --- errors --------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad_arg", ["abc", print])
def test_non_array_args(bad_arg):
    with pytest.raises(TypeError, match=r"^The contents of odeint \*args must be arrays or "
                                         r"scalars, but got " + repr(str(bad_arg))[1:-1]):
        odeint(lambda y, t, a: -y, 1., jnp.array([0., 1.]), bad_arg)


def test_integer_times():
    with pytest.raises(TypeError, match=r"^t must be an array of floats, but got \[0 1 2\]\.$"):
        odeint(lambda y, t: -y, 1., jnp.arange(3))


def test_forward_mode_is_an_error():
    def total(rate):
        return odeint(lambda y, t: -rate * y, 1., jnp.linspace(0., 1., 5)).sum()
    with pytest.raises(TypeError, match="can't apply forward-mode"):
        shardc.jacfwd(total)(3.)


def test_integer_state_fails_in_the_loop():
    with pytest.raises(TypeError, match="carry input and carry output must have equal types"):
        odeint(lambda y, t: -y, jnp.ones(2, jnp.int32), jnp.array([0., 1.]))


def test_module_surface():
    assert ode.__all__ == ["odeint"]
    assert ode.odeint is odeint
