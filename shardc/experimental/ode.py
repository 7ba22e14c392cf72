"""``shardc.experimental.ode`` (``jax.experimental.ode``): ``odeint``, adaptive-step
Dormand-Prince (RK45) integration of ``dy/dt = func(y, t, *args)``.

Each step takes the seven stages of the Dormand-Prince pair; the difference of its 5th and
4th order solutions is the local error, which accepts or rejects the step and sizes the next
one. Between accepted steps the solution is a 4th order polynomial fitted through the step's
ends, slopes and midpoint, evaluated at each requested time (dense output), so the requested
times do not constrain the steps. Steps, error control and interpolation follow JAX's
arithmetic so that results agree with JAX's to rounding.

Reverse-mode derivatives come from the adjoint method (Chen et al. 2018, appendix C): the
state, its cotangent and the cotangents of ``t`` and ``args`` are integrated backwards in
time between consecutive output times, by ``odeint`` itself, so they can be differentiated
again. Forward mode is not defined (``custom_vjp``'s error, as in JAX).

    >>> ts = jnp.linspace(0., 1., 3)
    >>> odeint(lambda y, t, k: -k * y, 1., ts, 2.)      # exp(-2 t)
    Array([1.        , 0.36787957, 0.13533507], dtype=float32)
"""
from __future__ import annotations

import functools
import operator

import numpy as np

import shardc
from compiler.tracing import is_jax_value
from shardc import lax
from shardc import numpy as jnp
from shardc.custom_derivatives import closure_convert, custom_vjp
from shardc.flatten_util import ravel_pytree
from shardc.tree_util import tree_leaves, tree_map

__all__ = ["odeint"]


# --- the Dormand-Prince pair -------------------------------------------------------------------

# Stage times (as fractions of the step) of stages 2..7, and the weights of the earlier
# stages' slopes in each stage's state (row i: stage i + 2).
_STAGE_TIMES = np.array([1 / 5, 3 / 10, 4 / 5, 8 / 9, 1., 1., 0])
_STAGE_WEIGHTS = np.array([
    [1 / 5, 0, 0, 0, 0, 0, 0],
    [3 / 40, 9 / 40, 0, 0, 0, 0, 0],
    [44 / 45, -56 / 15, 32 / 9, 0, 0, 0, 0],
    [19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729, 0, 0, 0],
    [9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656, 0, 0],
    [35 / 384, 0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0]])
# The 5th order solution's weights (stage 7 is evaluated at the new state, so its slope is
# the next step's first: "first same as last"), and those of 5th minus 4th order.
_SOLUTION_WEIGHTS = np.array([35 / 384, 0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0])
_ERROR_WEIGHTS = np.array([
    35 / 384 - 1951 / 21600, 0, 500 / 1113 - 22642 / 50085, 125 / 192 - 451 / 720,
    -2187 / 6784 - -12231 / 42400, 11 / 84 - 649 / 6300, -1. / 60.])
# Weights of the stages' slopes in the state at the step's middle (Shampine's dense output).
_MIDPOINT_WEIGHTS = np.array([
    6025192743 / 30085553152 / 2, 0, 51252292925 / 65400821598 / 2,
    -2691868925 / 45128329728 / 2, 187940372067 / 1594534317056 / 2,
    -1776094331 / 19743644256 / 2, 11237099 / 235043384 / 2])
_ORDER = 5.0


def _dopri_step(rhs, y, f, t, dt):
    """One Dormand-Prince step of size ``dt`` from ``(t, y)``, ``f = rhs(y, t)``:
    ``(y_next, f_next, y_error, slopes)``, ``slopes`` the seven stages' ``(7, n)``."""
    stage_times = jnp.asarray(_STAGE_TIMES, dt.dtype)
    stage_weights = jnp.asarray(_STAGE_WEIGHTS, f.dtype)
    dt_y = dt.astype(f.dtype)

    def stage(i, slopes):
        y_i = y + dt_y * jnp.dot(stage_weights[i - 1, :], slopes)
        return slopes.at[i, :].set(rhs(y_i, t + dt * stage_times[i - 1]))

    slopes = jnp.zeros((7, f.shape[0]), f.dtype).at[0, :].set(f)
    slopes = lax.fori_loop(1, 7, stage, slopes)
    y_next = dt_y * jnp.dot(jnp.asarray(_SOLUTION_WEIGHTS, f.dtype), slopes) + y
    y_error = dt_y * jnp.dot(jnp.asarray(_ERROR_WEIGHTS, f.dtype), slopes)
    return y_next, slopes[-1], y_error, slopes


def _dense_output(y, y_next, slopes, dt):
    """The coefficients ``(5, n)``, highest power first, of the quartic through the step
    ``y -> y_next`` in the step's fraction ``s``: its values at s = 0, 1/2, 1 and slopes at
    s = 0, 1 match the step's."""
    dt = dt.astype(y.dtype)
    y_mid = y + dt * jnp.dot(jnp.asarray(_MIDPOINT_WEIGHTS, y.dtype), slopes)
    dy, dy_next = dt * slopes[0], dt * slopes[-1]
    a = -2. * dy + 2. * dy_next - 8. * y - 8. * y_next + 16. * y_mid
    b = 5. * dy - 3. * dy_next + 18. * y + 14. * y_next - 32. * y_mid
    c = -4. * dy + dy_next - 11. * y - 5. * y_next + 16. * y_mid
    return jnp.asarray((a, b, c, dy, y))


# --- step size control -------------------------------------------------------------------------

def _promote_inexact(*xs):
    dtype = jnp.result_type(*xs)
    if not jnp.issubdtype(dtype, jnp.inexact):
        dtype = jnp.result_type(dtype, float)
    return [jnp.asarray(x, dtype) for x in xs]


def _first_step(rhs, t, y, f, rtol, atol):
    """The first step's size (Hairer, Norsett and Wanner, Solving ODEs I, II.4): one that a
    4th order method's error at the tolerances allows, judged from ``f`` and one trial
    Euler step."""
    y, f = _promote_inexact(y, f)
    scale = (atol + jnp.abs(y) * rtol).astype(y.dtype)
    d0 = jnp.linalg.norm(y / scale)
    d1 = jnp.linalg.norm(f / scale)
    h0 = jnp.where((d0 < 1e-5) | (d1 < 1e-5), 1e-6, 0.01 * d0 / d1)
    f1 = rhs(y + h0.astype(y.dtype) * f, t + h0)
    d2 = jnp.linalg.norm((f1 - f) / scale) / h0
    h1 = jnp.where((d1 <= 1e-15) & (d2 <= 1e-15), jnp.maximum(1e-6, h0 * 1e-3),
                   (0.01 / jnp.maximum(d1, d2)) ** (1. / 5.))
    return jnp.minimum(100. * h0, h1)


def _squared_magnitude(x):
    if jnp.iscomplexobj(x):
        return x.real ** 2 + x.imag ** 2
    return x ** 2


def _error_ratio(y_error, rtol, atol, y, y_next):
    """The root mean square of the local error over its tolerance: a step is accepted when
    it is at most 1."""
    tolerance = atol + rtol * jnp.maximum(jnp.abs(y), jnp.abs(y_next))
    return jnp.sqrt(jnp.mean(_squared_magnitude(y_error / tolerance.astype(y_error.dtype))))


def _next_step(dt, error_ratio, safety=0.9, max_growth=10.0, max_shrink=0.2):
    """The size after a step of ``dt`` with ``error_ratio``: the one the error predicts, with
    a safety factor, grown at most ten times and, after a rejection, shrunk at most five."""
    shrink = jnp.where(error_ratio < 1, 1.0, max_shrink)
    factor = jnp.minimum(max_growth,
                         jnp.maximum(error_ratio ** (-1.0 / _ORDER) * safety, shrink))
    return jnp.where(error_ratio == 0, dt * max_growth, dt * factor)


# --- the solver --------------------------------------------------------------------------------

def odeint(func, y0, t, *args, rtol=1.4e-8, atol=1.4e-8, mxstep=jnp.inf, hmax=jnp.inf):
    """Integrate ``dy/dt = func(y, t, *args)`` from ``y(t[0]) = y0``, reporting ``y`` at each
    time of ``t`` (JAX's ``jax.experimental.ode.odeint``).

    Args:
      func: the derivative, ``func(y, t, *args)``, of ``y0``'s structure.
      y0: the initial state, an array or a pytree of arrays.
      t: increasing floating-point times; ``t[0]`` is that of ``y0``.
      *args: extra arguments of ``func``: arrays or scalars, or pytrees of them.
      rtol, atol: relative and absolute local error tolerances.
      mxstep: the most steps, accepted or rejected, taken to reach each time of ``t``.
      hmax: the largest step.

    Returns:
      ``y0``'s structure with each leaf given a leading axis of ``len(t)``: the state at each
      time of ``t``.

    Example:
      >>> odeint(lambda y, t: -y, jnp.ones(2), jnp.array([0., 1.]))[1]
      Array([0.36787945, 0.36787945], dtype=float32)
    """
    for arg in tree_leaves(args):
        if not is_jax_value(arg):
            raise TypeError(
                f"The contents of odeint *args must be arrays or scalars, but got {arg}.")
    if not jnp.issubdtype(t.dtype, jnp.floating):
        raise TypeError(f"t must be an array of floats, but got {t}.")
    # The values func closes over that may carry derivatives become explicit arguments, so
    # the adjoint pass gives them cotangents.
    converted, consts = closure_convert(func, y0, t[0], *args)
    if not consts:
        # nothing to hoist: func itself, traced afresh where it runs, keeps the weak types
        # of Python-scalar arguments that the converted program has fixed
        converted = func
    return _odeint_pytree(converted, rtol, atol, mxstep, hmax, y0, t, *args, *consts)


def _flat_state(func, unravel):
    """``func`` on and to flat vectors: ``y`` cut into ``unravel``'s pytree, the result
    raveled."""
    def flat_func(y, *args):
        return ravel_pytree(func(unravel(y), *args))[0]
    return flat_func


@functools.partial(shardc.jit, static_argnums=(0, 1, 2, 3, 4))
def _odeint_pytree(func, rtol, atol, mxstep, hmax, y0, ts, *args):
    flat_y0, unravel = ravel_pytree(y0)
    ys = _odeint(_flat_state(func, unravel), rtol, atol, mxstep, hmax, flat_y0, ts, *args)
    return shardc.vmap(unravel)(ys)


@functools.partial(custom_vjp, nondiff_argnums=(0, 1, 2, 3, 4))
def _odeint(func, rtol, atol, mxstep, hmax, y0, ts, *args):
    """``odeint`` of a flat state ``y0`` (a vector)."""
    rhs = lambda y, t: func(y, t, *args)

    def advance(carry, target_t):
        # carry: (y, f, t, dt, t of the last accepted step's start, its dense output)
        def keep_stepping(state):
            steps, _, _, t, dt, _, _ = state
            return (t < target_t) & (steps < mxstep) & (dt > 0)

        def step(state):
            steps, y, f, t, dt, last_t, coeffs = state
            y_next, f_next, y_error, slopes = _dopri_step(rhs, y, f, t, dt)
            ratio = _error_ratio(y_error, rtol, atol, y, y_next)
            new_dt = jnp.clip(_next_step(dt, ratio), min=0., max=hmax)
            accepted = [steps + 1, y_next, f_next, t + dt, new_dt, t,
                        _dense_output(y, y_next, slopes, dt)]
            rejected = [steps + 1, y, f, t, new_dt, last_t, coeffs]
            return [jnp.where(ratio <= 1., a, r) for a, r in zip(accepted, rejected)]

        _, *carry = lax.while_loop(keep_stepping, step, [0] + carry)
        _, _, t, _, last_t, coeffs = carry
        fraction = (target_t - last_t) / (t - last_t)
        return carry, jnp.polyval(coeffs, fraction.astype(coeffs.dtype))

    f0 = rhs(y0, ts[0])
    dt = jnp.clip(_first_step(rhs, ts[0], y0, f0, rtol, atol), min=0., max=hmax)
    carry = [y0, f0, ts[0], dt, ts[0], jnp.array([y0] * 5)]
    _, ys = lax.scan(advance, carry, ts[1:])
    return jnp.concatenate((y0[None], ys))


def _odeint_fwd(func, rtol, atol, mxstep, hmax, y0, ts, *args):
    ys = _odeint(func, rtol, atol, mxstep, hmax, y0, ts, *args)
    return ys, (ys, ts, args)


def _odeint_bwd(func, rtol, atol, mxstep, hmax, residuals, ys_bar):
    """The adjoint pass: from the last output time back to the first, the state and its
    cotangent (with those of ``args`` and ``t[0]``) are integrated backwards in time, the
    output cotangents added in at each output time."""
    ys, ts, args = residuals
    # indexed below by the scan's traced index, so arrays even when given as numpy's
    ys, ts, ys_bar = jnp.asarray(ys), jnp.asarray(ts), jnp.asarray(ys_bar)

    def adjoint_dynamics(state, minus_t, *args):
        # integrated in -t, so that time increases as odeint requires
        y, y_bar = state[0], state[1]
        y_dot, vjp = shardc.vjp(func, y, -minus_t, *args)
        return (-y_dot, *vjp(y_bar))

    def back_one_interval(carry, i):
        y_bar, t0_bar, args_bar = carry
        # moving output time t[i] moves y[i] by its derivative
        t_bar = jnp.dot(func(ys[i], ts[i], *args), ys_bar[i]).real
        t0_bar = t0_bar - t_bar
        _, y_bar, t0_bar, args_bar = odeint(
            adjoint_dynamics, (ys[i], y_bar, t0_bar, args_bar),
            jnp.array([-ts[i], -ts[i - 1]]), *args,
            rtol=rtol, atol=atol, mxstep=mxstep, hmax=hmax)
        y_bar, t0_bar, args_bar = tree_map(operator.itemgetter(1), (y_bar, t0_bar, args_bar))
        return (y_bar + ys_bar[i - 1], t0_bar, args_bar), t_bar

    carry = (ys_bar[-1], 0., tree_map(jnp.zeros_like, args))
    (y0_bar, t0_bar, args_bar), ts_bar = lax.scan(
        back_one_interval, carry, jnp.arange(len(ts) - 1, 0, -1))
    return (y0_bar, jnp.concatenate([jnp.array([t0_bar]), ts_bar[::-1]]), *args_bar)


_odeint.defvjp(_odeint_fwd, _odeint_bwd)
