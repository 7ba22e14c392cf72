"""``jax.test_util``: derivatives checked against finite differences.

``check_grads(f, args, order)`` checks forward (``jvp``) and reverse (``vjp``) derivatives of
``f`` at ``args`` up to ``order``, each in one random direction (numpy's ``RandomState(0)``,
as JAX draws them): a JVP against the central difference ``(f(x + eps t) - f(x - eps t)) /
2 eps``, a VJP through the identity ``<t, vjp(c)> == <jvp(t), c>``. Tolerances default per
dtype to JAX's (float32 2e-3, float64 1e-5, ...); a failure is an AssertionError naming
which check failed.
"""
from __future__ import annotations

import functools

import numpy as np

from compiler import tree
from ir import dtypes as _dt
from compiler.autodiff import jvp, vjp

__all__ = ["check_grads", "check_jvp", "check_vjp"]

EPS = 1e-4

# the default tolerance of a derivative's comparison, by dtype (JAX's)
_GRADIENT_TOLERANCE = {
    np.dtype(_dt.bfloat16): 1e-1, np.dtype(np.float16): 1e-2, np.dtype(np.float32): 2e-3,
    np.dtype(np.float64): 1e-5, np.dtype(np.complex64): 1e-3, np.dtype(np.complex128): 1e-5,
}


def _dtype(x) -> np.dtype:
    if hasattr(x, "dtype"):
        return np.dtype(x.dtype)
    if isinstance(x, (bool, int, float, complex)):
        return _dt.canonicalize(type(x))
    return np.asarray(x).dtype


def _tolerance(given, dtype) -> float:
    if given is None:
        return _GRADIENT_TOLERANCE.get(np.dtype(dtype), 0)
    if isinstance(given, dict):
        merged = dict(_GRADIENT_TOLERANCE)
        merged.update({np.dtype(k): v for k, v in given.items()})
        return merged.get(np.dtype(dtype), 0)
    return given


def _check_close(xs, ys, atol, rtol, what: str) -> None:
    x_leaves, y_leaves = tree.tree_leaves(xs), tree.tree_leaves(ys)
    assert len(x_leaves) == len(y_leaves), f"{what}: {len(x_leaves)} != {len(y_leaves)} leaves"
    for x, y in zip(x_leaves, y_leaves):
        x, y = np.asarray(x), np.asarray(y)
        assert x.shape == y.shape, f"{what}: shapes {x.shape} and {y.shape} differ"
        dtype = np.promote_types(x.dtype, y.dtype)
        wide = np.complex128 if np.issubdtype(dtype, np.complexfloating) else np.float64
        np.testing.assert_allclose(
            x.astype(wide), y.astype(wide), err_msg=what,
            atol=_tolerance(atol, x.dtype) * max(x.size, 1),
            rtol=_tolerance(rtol, y.dtype) * max(y.size, 1))


def _random_like(rng, x):
    """A standard normal direction of ``x``'s shape and dtype (complex: both parts)."""
    dtype, shape = _dtype(x), np.shape(x)
    value = np.asarray(rng.randn(*shape), dtype)
    if np.issubdtype(dtype, np.complexfloating):
        value = value + dtype.type(1j) * np.asarray(rng.randn(*shape), dtype)
    return value.item() if isinstance(x, (int, float, complex)) else value


def _map(fn, *trees):
    return tree.tree_map(fn, *trees)


def _step(primals, tangents, sign: float, eps: float):
    def move(x, t):
        dtype = _dtype(x)
        moved = np.asarray(np.asarray(x, dtype) + sign * eps * np.asarray(t, dtype), dtype)
        return moved.item() if isinstance(x, (int, float, complex)) else moved
    return _map(move, primals, tangents)


def _numerical_jvp(f, primals, tangents, eps: float):
    ahead = f(*_step(primals, tangents, 1.0, eps))
    behind = f(*_step(primals, tangents, -1.0, eps))

    def difference(a, b):
        a, b = np.asarray(a), np.asarray(b)
        with np.errstate(invalid="ignore"):
            diff = np.where(np.equal(a, b), np.zeros_like(a), np.subtract(a, b, dtype=a.dtype))
        return np.asarray(diff * a.dtype.type(0.5 / eps), a.dtype)
    return _map(difference, ahead, behind)


def _inner(xs, ys) -> float:
    return sum(float(np.real(np.vdot(np.asarray(x).reshape(-1), np.asarray(y).reshape(-1))))
               for x, y in zip(tree.tree_leaves(xs), tree.tree_leaves(ys)))


def check_jvp(f, f_jvp, args, atol=None, rtol=None, eps=EPS, err_msg=""):
    """``f_jvp(primals, tangents) -> (out, tangent_out)`` (``functools.partial(jax.jvp, f)``)
    against ``f`` and its central difference, in one random direction."""
    rng = np.random.RandomState(0)
    tangents = _map(functools.partial(_random_like, rng), args)
    out, tangent_out = f_jvp(args, tangents)
    want_out = f(*args)
    want_tangent = _numerical_jvp(f, args, tangents, eps)
    _check_close(out, want_out, atol, rtol, f"{err_msg} primal" if err_msg else "primal")
    _check_close(tangent_out, want_tangent, atol, rtol,
                 f"{err_msg} tangent" if err_msg else "tangent")


def check_vjp(f, f_vjp, args, atol=None, rtol=None, eps=EPS, err_msg=""):
    """``f_vjp(*args) -> (out, vjp_fun)`` (``functools.partial(jax.vjp, f)``) against ``f``,
    by the inner products of a random tangent and cotangent."""
    rng = np.random.RandomState(0)
    out, vjp_fun = f_vjp(*args)
    _check_close(out, f(*args), atol, rtol, f"{err_msg} primal" if err_msg else "primal")
    tangents = _map(functools.partial(_random_like, rng), args)
    tangent_out = _numerical_jvp(f, args, tangents, eps)
    cotangents = _map(functools.partial(_random_like, rng), out)
    cotangent_out = _map(np.conj, vjp_fun(_map(np.conj, cotangents)))
    got = _inner(tangents, cotangent_out)
    want = _inner(tangent_out, cotangents)
    dtype = _dtype(tree.tree_leaves(out)[0]) if tree.tree_leaves(out) else np.float32
    _check_close(np.asarray(got, dtype), np.asarray(want, dtype), atol, rtol,
                 f"{err_msg} cotangent projection" if err_msg else "cotangent projection")


def check_grads(f, args, order, modes=("fwd", "rev"), atol=None, rtol=None, eps=None):
    """Check ``f``'s forward and/or reverse derivatives at ``args`` up to ``order`` against
    finite differences (AssertionError where they differ)."""
    args = tuple(args)
    eps = eps or EPS
    jvp_check = functools.partial(check_jvp, atol=atol, rtol=rtol, eps=eps)
    vjp_check = functools.partial(check_vjp, atol=atol, rtol=rtol, eps=eps)

    def check(f, args, order, err_msg=""):
        if "fwd" in modes:
            what = f"JVP of {err_msg}" if err_msg else "JVP"
            jvp_check(f, functools.partial(jvp, f), args, err_msg=what)
            if order > 1:
                check(functools.partial(jvp, f), (args, args), order - 1, what)
        if "rev" in modes:
            what = f"VJP of {err_msg}" if err_msg else "VJP"
            vjp_check(f, functools.partial(vjp, f), args, err_msg=what)
            if order > 1:
                def pulled_back(*args):
                    out, back = vjp(f, *args)
                    return back(out)
                check(pulled_back, args, order - 1, what)

    check(f, args, order)
