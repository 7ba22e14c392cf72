"""The strong Wolfe line search behind ``shardc.scipy.optimize``'s BFGS and L-BFGS.

Algorithms 3.5 (bracketing) and 3.6 (zoom) of Nocedal and Wright, *Numerical Optimization*
(1999), pp. 59-61, written as JAX writes them: each is a ``lax.while_loop`` whose body picks
between outcomes with ``jnp.where`` rather than branching, so that it traces once, runs under
``jit`` and batches under ``vmap``. Step choices, counters and failure flags follow JAX's
``jax._src.scipy.optimize.line_search`` step for step.

Along the ray ``x + a p`` the search works with ``phi(a) = f(x + a p)`` and its slope
``dphi(a) = Re <grad f(x + a p), p>``; a step ``a`` is accepted when

    phi(a) <= phi(0) + c1 a dphi(0)       (sufficient decrease)
    |dphi(a)| <= -c2 dphi(0)              (curvature)
"""
from __future__ import annotations

from typing import Any, NamedTuple

import shardc.dtypes as dtypes
import shardc.lax as lax
import shardc.numpy as jnp
from shardc.scipy.optimize._dot import highest_dot
from compiler.autodiff import value_and_grad
from ir.dtypes import to_inexact

__all__ = ["LineSearchResults", "line_search"]

# zoom's safeguards: a cubic step must land this far (times the bracket) inside the bracket,
# a quadratic one ``_QUAD_MARGIN``; otherwise the bracket is bisected
_CUBIC_MARGIN = 0.2
_QUAD_MARGIN = 0.1
_MAX_ZOOM_STEPS = 30


def _where(pred, state, **new):
    """``state`` with the named fields replaced by ``new``'s where ``pred`` holds."""
    return state._replace(**{name: jnp.where(pred, value, getattr(state, name))
                             for name, value in new.items()})


# --- interpolation ------------------------------------------------------------------------------

def _cubicmin(a, fa, fpa, b, fb, c, fc):
    """The minimizer of the cubic through ``(a, fa)``, ``(b, fb)``, ``(c, fc)`` with slope
    ``fpa`` at ``a`` (NaN where it has none)."""
    dtype = dtypes.result_type(a, fa, fpa, b, fb, c, fc)
    db, dc = b - a, c - a
    rise_b = fb - fa - fpa * db
    rise_c = fc - fa - fpa * dc
    # the cubic's two upper coefficients from a 2x2 solve, written out
    system = jnp.array([[dc ** 2, -db ** 2], [-dc ** 3, db ** 3]], dtype=dtype)
    rises = jnp.array([rise_b, rise_c], dtype=dtype)
    cubic, square = highest_dot(system, rises) / ((db * dc) ** 2 * (db - dc))
    radical = square * square - 3. * cubic * fpa
    return a + (-square + jnp.sqrt(radical)) / (3. * cubic)


def _quadmin(a, fa, fpa, b, fb):
    """The minimizer of the parabola through ``(a, fa)`` and ``(b, fb)`` with slope ``fpa``
    at ``a``."""
    db = b - a
    square = (fb - fa - fpa * db) / (db ** 2)
    return a - fpa / (2. * square)


# --- zoom (Algorithm 3.6) -----------------------------------------------------------------------

class _ZoomState(NamedTuple):
    done: Any
    failed: Any
    j: Any
    a_lo: Any
    phi_lo: Any
    dphi_lo: Any
    a_hi: Any
    phi_hi: Any
    dphi_hi: Any
    a_rec: Any          # the previous end of the bracket (the cubic's third point)
    phi_rec: Any
    a_star: Any
    phi_star: Any
    dphi_star: Any
    g_star: Any
    nfev: Any
    ngev: Any


def _zoom_trial_step(state: _ZoomState):
    """The next trial step inside the bracket: the cubic's minimizer (from the second step
    on), else the parabola's, each only well inside the bracket, else the midpoint."""
    width = state.a_hi - state.a_lo
    low = jnp.minimum(state.a_hi, state.a_lo)
    high = jnp.maximum(state.a_hi, state.a_lo)
    cubic = _cubicmin(state.a_lo, state.phi_lo, state.dphi_lo, state.a_hi, state.phi_hi,
                      state.a_rec, state.phi_rec)
    cubic_margin = _CUBIC_MARGIN * width
    use_cubic = (state.j > 0) & (cubic > low + cubic_margin) & (cubic < high - cubic_margin)
    quad = _quadmin(state.a_lo, state.phi_lo, state.dphi_lo, state.a_hi, state.phi_hi)
    quad_margin = _QUAD_MARGIN * width
    use_quad = ~use_cubic & (quad > low + quad_margin) & (quad < high - quad_margin)
    midpoint = (state.a_lo + state.a_hi) / 2.
    return jnp.where(use_cubic, cubic, jnp.where(use_quad, quad, midpoint))


def _zoom(phi_and_slope, too_high, flat_enough, a_lo, phi_lo, dphi_lo, a_hi, phi_hi,
          dphi_hi, g_0, pass_through):
    """Shrink the bracket between ``a_lo`` (the end with the lower ``phi``) and ``a_hi``
    until a step meets both Wolfe conditions; does nothing where ``pass_through``. Fails
    after 30 trials, or once ``a_hi - a_lo`` is at most 1e-5 (1e-10 for 64-bit steps):
    the width is signed, as in JAX, so a bracket with ``a_hi < a_lo`` fails on its first
    trial."""
    start = _ZoomState(
        done=False, failed=False, j=0,
        a_lo=a_lo, phi_lo=phi_lo, dphi_lo=dphi_lo,
        a_hi=a_hi, phi_hi=phi_hi, dphi_hi=dphi_hi,
        a_rec=(a_lo + a_hi) / 2., phi_rec=(phi_lo + phi_hi) / 2.,
        a_star=1., phi_star=phi_lo, dphi_star=dphi_lo, g_star=g_0,
        nfev=0, ngev=0)

    def step(state: _ZoomState) -> _ZoomState:
        width = state.a_hi - state.a_lo
        narrowest = 1e-5 if dtypes.finfo(width.dtype).bits < 64 else 1e-10
        state = state._replace(failed=state.failed | (width <= narrowest))
        a_j = _zoom_trial_step(state)
        phi_j, dphi_j, g_j = phi_and_slope(a_j)
        phi_j = phi_j.astype(state.phi_lo.dtype)
        dphi_j = dphi_j.astype(state.dphi_lo.dtype)
        g_j = g_j.astype(state.g_star.dtype)
        state = _zoom_narrow(state, too_high, flat_enough, a_j, phi_j, dphi_j, g_j)
        j = state.j + 1
        return state._replace(j=j, nfev=state.nfev + 1, ngev=state.ngev + 1,
                              failed=state.failed | (j >= _MAX_ZOOM_STEPS))

    def going(state: _ZoomState):
        return ~state.done & ~pass_through & ~state.failed

    return lax.while_loop(going, step, start)


def _zoom_narrow(state: _ZoomState, too_high, flat_enough, a_j, phi_j, dphi_j, g_j):
    """Move one end of the bracket to the trial step ``a_j`` (or stop there). Exactly one
    of four cases holds:

    - ``a_j`` is too high: it becomes the high end;
    - it meets the curvature condition: it is the answer;
    - the slope at ``a_j`` points back past ``a_lo``: the low end moves to the high end and
      ``a_j`` becomes the low end;
    - otherwise ``a_j`` becomes the low end.
    """
    j_to_hi = too_high(a_j, phi_j) | (phi_j >= state.phi_lo)
    j_is_star = flat_enough(dphi_j) & ~j_to_hi
    j_to_lo = ~j_to_hi & ~j_is_star
    lo_to_hi = (dphi_j * (state.a_hi - state.a_lo) >= 0.) & j_to_lo
    # the end that is dropped (or was the high end) is remembered for the cubic
    rec_from_hi = j_to_hi | lo_to_hi
    state = _where(rec_from_hi, state, a_rec=state.a_hi, phi_rec=state.phi_hi)
    state = _where(j_to_lo & ~lo_to_hi, state, a_rec=state.a_lo, phi_rec=state.phi_lo)
    state = _where(j_to_hi, state, a_hi=a_j, phi_hi=phi_j, dphi_hi=dphi_j)
    state = _where(lo_to_hi, state, a_hi=state.a_lo, phi_hi=state.phi_lo,
                   dphi_hi=state.dphi_lo)
    state = _where(j_to_lo, state, a_lo=a_j, phi_lo=phi_j, dphi_lo=dphi_j)
    state = _where(j_is_star, state, a_star=a_j, phi_star=phi_j, dphi_star=dphi_j,
                   g_star=g_j)
    return state._replace(done=state.done | j_is_star)


# --- bracketing (Algorithm 3.5) -----------------------------------------------------------------

class _LineSearchState(NamedTuple):
    done: Any
    failed: Any
    i: Any
    a_i1: Any           # the previous trial step
    phi_i1: Any
    dphi_i1: Any
    nfev: Any
    ngev: Any
    a_star: Any
    phi_star: Any
    dphi_star: Any
    g_star: Any


class LineSearchResults(NamedTuple):
    """What ``line_search`` found.

    Fields: ``failed`` (no step met the strong Wolfe conditions), ``nit`` (bracketing
    iterations), ``nfev`` and ``ngev`` (function and gradient evaluations), ``k``
    (``nit + 1``), ``a_k`` (the step), ``f_k`` and ``g_k`` (value and gradient there) and
    ``status`` (0 passed, 1 zoom failed, 3 out of iterations).
    """
    failed: Any
    nit: Any
    nfev: Any
    ngev: Any
    k: Any
    a_k: Any
    f_k: Any
    g_k: Any
    status: Any


def _take_star(pred, state: _LineSearchState, a, phi, dphi, g) -> _LineSearchState:
    return _where(pred, state, a_star=a, phi_star=phi, dphi_star=dphi, g_star=g)


def _bracket_step(state: _LineSearchState, phi_and_slope, too_high, flat_enough, first_step,
                  g_0) -> _LineSearchState:
    """One bracketing trial: the first step, else twice the last. Where it rises too high
    (or above the last), zoom back between the two; where it meets the curvature condition,
    it is the answer; where the slope turns up, zoom ahead; else go on."""
    a_i = jnp.where(state.i == 1, first_step, state.a_i1 * 2.)
    phi_i, dphi_i, g_i = phi_and_slope(a_i)
    zoom_back = too_high(a_i, phi_i) | ((phi_i >= state.phi_i1) & (state.i > 1))
    i_is_star = flat_enough(dphi_i) & ~zoom_back
    zoom_ahead = (dphi_i >= 0.) & ~zoom_back & ~i_is_star
    back = _zoom(phi_and_slope, too_high, flat_enough, state.a_i1, state.phi_i1,
                 state.dphi_i1, a_i, phi_i, dphi_i, g_0, ~zoom_back)
    ahead = _zoom(phi_and_slope, too_high, flat_enough, a_i, phi_i, dphi_i,
                  state.a_i1, state.phi_i1, state.dphi_i1, g_0, ~zoom_ahead)
    state = state._replace(
        nfev=state.nfev + 1 + back.nfev + ahead.nfev,
        ngev=state.ngev + 1 + back.ngev + ahead.ngev,
        done=state.done | zoom_back | i_is_star | zoom_ahead,
        failed=state.failed | (zoom_back & back.failed) | (zoom_ahead & ahead.failed))
    state = _take_star(zoom_back, state, back.a_star, back.phi_star, back.dphi_star,
                       back.g_star)
    state = _take_star(i_is_star, state, a_i, phi_i, dphi_i, g_i)
    state = _take_star(zoom_ahead, state, ahead.a_star, ahead.phi_star, ahead.dphi_star,
                       ahead.g_star)
    return state._replace(i=state.i + 1, a_i1=a_i, phi_i1=phi_i, dphi_i1=dphi_i)


def line_search(f, xk, pk, old_fval=None, old_old_fval=None, gfk=None, c1=1e-4, c2=0.9,
                maxiter=20):
    """A step along ``pk`` from ``xk`` meeting the strong Wolfe conditions for ``f`` (JAX's
    ``jax._src.scipy.optimize.line_search.line_search``).

    Args:
      f: real scalar function of a 1-D array, differentiable.
      xk: the starting point.
      pk: the search direction (assumed a descent direction).
      old_fval, gfk: ``f(xk)`` and its gradient, when already known (saves an evaluation).
      old_old_fval: ``f`` at the previous iterate; it picks the first trial step
        (``min(1, 2.02 (f(xk) - old_old_fval) / slope)``), else the first trial is 1.
      c1, c2: the sufficient decrease and curvature constants.
      maxiter: at most this many bracketing steps (the trial step doubles each time).

    Returns:
      A ``LineSearchResults``.

    >>> import shardc.numpy as jnp
    >>> res = line_search(lambda x: jnp.sum(x ** 2), jnp.ones(2), -jnp.ones(2))
    >>> float(res.a_k), bool(res.failed)
    (1.0, False)
    """
    dtype = to_inexact(jnp.result_type(xk, pk))
    xk, pk = jnp.asarray(xk).astype(dtype), jnp.asarray(pk).astype(dtype)
    value_and_gradient = value_and_grad(f)

    def phi_and_slope(t):
        t = jnp.array(t, dtype=pk.dtype)
        phi, g = value_and_gradient(xk + t * pk)
        return phi, jnp.real(highest_dot(g, pk)), g

    evaluated = old_fval is None or gfk is None
    if evaluated:
        phi_0, dphi_0, gfk = phi_and_slope(0)
    else:
        phi_0, dphi_0 = old_fval, jnp.real(highest_dot(gfk, pk))
    if old_old_fval is None:
        first_step = 1
    else:
        guess = 1.01 * 2 * (phi_0 - old_old_fval) / dphi_0
        first_step = jnp.where(guess > 1, 1.0, guess)

    def too_high(a, phi):       # sufficient decrease fails
        return phi > phi_0 + c1 * a * dphi_0

    def flat_enough(dphi):      # the curvature condition holds
        return jnp.abs(dphi) <= -c2 * dphi_0

    def step(state: _LineSearchState) -> _LineSearchState:
        return _bracket_step(state, phi_and_slope, too_high, flat_enough, first_step, gfk)

    def going(state: _LineSearchState):
        return ~state.done & (state.i <= maxiter) & ~state.failed

    start = _LineSearchState(
        done=jnp.array(False, dtype=bool), failed=jnp.array(False, dtype=bool),
        i=1,        # Nocedal and Wright count from 1
        a_i1=0., phi_i1=phi_0, dphi_i1=dphi_0,
        nfev=1 if evaluated else 0, ngev=1 if evaluated else 0,
        a_star=0., phi_star=phi_0, dphi_star=dphi_0, g_star=gfk)
    state = lax.while_loop(going, step, start)
    return _line_search_results(state, maxiter)


def _line_search_results(state: _LineSearchState, maxiter) -> LineSearchResults:
    status = jnp.where(state.failed, jnp.array(1),
                       jnp.where(state.i > maxiter, jnp.array(3), jnp.array(0)))
    # below 64 bits a vanishing step would stall the minimizer: keep it at least 1e-8
    a_k = jnp.asarray(state.a_star)
    if dtypes.finfo(a_k.dtype).bits != 64:
        a_k = jnp.where(jnp.abs(a_k) < 1e-8, jnp.sign(a_k) * 1e-8, a_k)
    return LineSearchResults(
        failed=state.failed | ~state.done, nit=state.i - 1, nfev=state.nfev,
        ngev=state.ngev, k=state.i, a_k=a_k, f_k=state.phi_star, g_k=state.g_star,
        status=status)
