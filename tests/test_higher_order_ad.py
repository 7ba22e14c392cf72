"""Higher-order derivatives through shard_map against finite differences.

Every composition of two differentiations (grad of grad, jvp of grad, grad of jvp, vjp of vjp),
under jit and under vmap, on replicated, sharded and mixed inputs, with the replication check
on and off, is a Hessian-vector product ``H v`` of the global function. The reference is a
central finite difference, in float64, of the single-device function's gradient written in
numpy: nothing of shardc's autodiff is in it.

A regression: with the check on, a second derivative through a replicated input came out
multiplied by the mesh size (residuals leaving the first derivative's forward shard_map were
typed as varying over every axis, so the backward pass looked varying and a second
differentiation summed equal copies).
"""
from __future__ import annotations

import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from shardc import lax
from shardc.sharding import PartitionSpec as P


# --- the functions: the shard_map version, and the single-device gradient in numpy -------------

def _replicated(mesh, check):
    """F(x) = sum(sin(x)), x in P()."""
    f = jax.shard_map(jnp.sin, mesh=mesh, in_specs=P(), out_specs=P(), check_vma=check)
    return (lambda x: f(x).sum()), (lambda x: np.cos(x))


def _sharded(mesh, check):
    """F(x) = sum(sin(x) * x), x in P('i')."""
    f = jax.shard_map(lambda b: jnp.sin(b) * b, mesh=mesh, in_specs=P("i"), out_specs=P("i"),
                      check_vma=check)
    return (lambda x: f(x).sum()), (lambda x: np.cos(x) * x + np.sin(x))


def _mixed(mesh, check):
    """F(x, w) = sum_k sum_j sin(x[k, j]) * w[j]**2, x in P('i') by rows, w in P()."""
    def body(xb, w):
        return lax.psum((jnp.sin(xb) * w ** 2).sum(), "i")

    f = jax.shard_map(body, mesh=mesh, in_specs=(P("i"), P()), out_specs=P(), check_vma=check)

    def loss(z):
        return f(z[:-3].reshape(-1, 3), z[-3:])

    def grad(z):
        x, w = z[:-3].reshape(-1, 3), z[-3:]
        return np.concatenate([(np.cos(x) * w ** 2).ravel(), 2 * w * np.sin(x).sum(0)])

    return loss, grad


CASES = {"replicated": _replicated, "sharded": _sharded, "mixed": _mixed}


def _point(case: str, n: int, seed: int = 0) -> np.ndarray:
    size = {"replicated": 3, "sharded": 2 * n, "mixed": 3 * n + 3}[case]
    return np.random.default_rng(seed).uniform(-1.5, 1.5, size).astype(np.float32)


def _hvp_reference(grad, z, v, eps=1e-4) -> np.ndarray:
    z, v = z.astype(np.float64), v.astype(np.float64)
    return (grad(z + eps * v) - grad(z - eps * v)) / (2 * eps)


# --- the compositions: each is H v ------------------------------------------------------------------

def grad_of_grad(loss, z, v):
    return jax.grad(lambda z: (jax.grad(loss)(z) * v).sum())(z)


def jvp_of_grad(loss, z, v):
    return jax.jvp(jax.grad(loss), (z,), (v,))[1]


def grad_of_jvp(loss, z, v):
    return jax.grad(lambda z: jax.jvp(loss, (z,), (v,))[1])(z)


def vjp_of_vjp(loss, z, v):
    def gradient(z):
        out, pullback = jax.vjp(loss, z)
        return pullback(jnp.ones_like(out))[0]
    _, pullback = jax.vjp(gradient, z)
    return pullback(v)[0]


COMPOSITIONS = {"grad.grad": grad_of_grad, "jvp.grad": jvp_of_grad, "grad.jvp": grad_of_jvp,
                "vjp.vjp": vjp_of_vjp}


def _check(got, want):
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("check", [True, False], ids=["check-on", "check-off"])
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("name", sorted(COMPOSITIONS))
def test_second_derivatives_equal_finite_differences(name, case, check):
    mesh = jax.make_mesh((4,), ("i",))
    loss, grad = CASES[case](mesh, check)
    z = _point(case, 4)
    v = _point(case, 4, seed=1)
    want = _hvp_reference(grad, z, v)
    compose = COMPOSITIONS[name]
    _check(compose(loss, jnp.asarray(z), jnp.asarray(v)), want)
    _check(jax.jit(lambda z, v: compose(loss, z, v))(jnp.asarray(z), jnp.asarray(v)), want)


@pytest.mark.parametrize("check", [True, False], ids=["check-on", "check-off"])
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("name", sorted(COMPOSITIONS))
def test_vmap_of_second_derivatives(name, case, check):
    mesh = jax.make_mesh((4,), ("i",))
    loss, grad = CASES[case](mesh, check)
    zs = np.stack([_point(case, 4, seed=s) for s in (2, 3)])
    vs = np.stack([_point(case, 4, seed=s) for s in (4, 5)])
    compose = COMPOSITIONS[name]
    got = jax.vmap(lambda z, v: compose(loss, z, v))(jnp.asarray(zs), jnp.asarray(vs))
    want = np.stack([_hvp_reference(grad, z, v) for z, v in zip(zs, vs)])
    _check(got, want)


@pytest.mark.parametrize("devices", [1, 2, 4, 8])
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_grad_of_grad_through_a_replicated_input_is_not_scaled_by_the_mesh(devices, jit):
    """The report: -sin(0.5) = -0.4794, not n times it, on every mesh size."""
    mesh = jax.make_mesh((devices,), ("i",))
    f = jax.shard_map(jnp.sin, mesh=mesh, in_specs=P(), out_specs=P())
    second = jax.grad(lambda y: jax.grad(lambda y: f(y).sum())(y).sum())
    second = jax.jit(second) if jit else second
    got = second(jnp.array([0.5]))
    np.testing.assert_allclose(np.asarray(got), [-np.sin(0.5)], rtol=1e-6)


def test_first_derivative_bodies_are_typed_as_their_specs_say():
    """The backward shard_map of a replicated input returns a value typed invariant, as its
    out_spec P() claims (the shard_map shape rule rejects a body output typed otherwise)."""
    mesh = jax.make_mesh((4,), ("i",))
    f = jax.shard_map(jnp.sin, mesh=mesh, in_specs=P(), out_specs=P())
    closed = jax.make_jaxpr(jax.grad(lambda y: f(y).sum()))(jnp.array([0.5]))
    maps = [e for e in closed.program.eqns if e.primitive.name == "shard_map"]
    assert len(maps) == 2
    for eqn in maps:
        body = eqn.params["jaxpr"]
        for aval, spec in zip(body.out_avals, eqn.params["out_specs"]):
            names = {a for entry in spec if entry is not None
                     for a in ((entry,) if isinstance(entry, str) else entry)}
            assert aval.vma <= names, (aval, spec)


def _identity_by_loop(kind):
    """The identity on a block, written as a one-step loop that adds a closed-over value to a
    zero carry (the carry's zeros are made varying by the body, as ring attention's are)."""
    def body(q):
        if kind == "scan":
            acc, _ = lax.scan(lambda acc, _: (acc + q, None), jnp.zeros_like(q), None, length=1)
            return acc
        return lax.fori_loop(0, 1, lambda i, acc: acc + q, jnp.zeros_like(q))
    return body


@pytest.mark.parametrize("kind", ["scan", "fori_loop"])
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_grad_of_grad_through_a_loop_in_a_body_sums_nothing_over_the_mesh(kind, jit):
    """The report: d/dq sum((2q)^2) = 8q per element; it came out as 8q summed over the mesh
    axis (288 on each of 8 devices), because a loop's zero cotangents were typed invariant and
    the carry was made varying inside the transposed loop, which the second derivative
    transposed into a psum. Zeros of a varying type are varying (JAX's pvary of zeros)."""
    mesh = jax.make_mesh((8,), ("sp",))
    f = jax.shard_map(_identity_by_loop(kind), mesh=mesh, in_specs=P("sp"), out_specs=P("sp"))
    first = jax.grad(lambda q: jnp.sum(f(q) ** 2))
    second = jax.grad(lambda q: jnp.sum(first(q) ** 2))
    second = jax.jit(second) if jit else second
    q = np.arange(1.0, 9.0, dtype=np.float32)
    np.testing.assert_allclose(np.asarray(first(q)), 2 * q)
    np.testing.assert_allclose(np.asarray(second(q)), 8 * q)


def test_zero_cotangents_of_a_varying_carry_are_typed_varying():
    """The transposed loop of the first derivative carries its cotangents with the carry's
    type ({sp}), so nothing inside it makes them varying."""
    mesh = jax.make_mesh((8,), ("sp",))
    f = jax.shard_map(_identity_by_loop("scan"), mesh=mesh, in_specs=P("sp"),
                      out_specs=P("sp"))
    closed = jax.make_jaxpr(jax.grad(lambda q: jnp.sum(f(q) ** 2)))(np.ones(8, np.float32))
    scans = [e for m in closed.program.eqns if m.primitive.name == "shard_map"
             for e in m.params["jaxpr"].eqns if e.primitive.name == "scan"]
    backward = [e for e in scans if e.params["reverse"]]
    assert backward
    for eqn in backward:
        body = eqn.params["jaxpr"]
        assert all(v.aval.vma == {"sp"} for v in body.invars), body.in_avals
        assert not any(e.primitive.name == "pvary" for e in body.eqns)
