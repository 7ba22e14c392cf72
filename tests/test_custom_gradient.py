"""``custom_gradient`` and ``closure_convert``, held to finite differences and to the rules
they state (each case also ran under JAX 0.10.2 with the same results)."""
import re
from functools import partial

import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from shardc.sharding import PartitionSpec as P

X = np.array([0.0, 0.5, 1.0, 2.0], np.float32)


@jax.custom_gradient
def doubled_sin(x):
    """sin, whose gradient is twice cos (so the rule, not the function, is what grad sees)."""
    y = jnp.sin(x)
    return y, lambda g: (g * jnp.cos(x) * 2,)


@pytest.mark.parametrize("wrap", [lambda f: f, jax.jit])
def test_the_rule_gives_the_gradient(wrap):
    got = wrap(jax.grad(lambda x: doubled_sin(x).sum()))(X)
    np.testing.assert_allclose(np.asarray(got), 2 * np.cos(X), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(doubled_sin(X)), np.sin(X), rtol=1e-6)


def test_under_vmap_and_value_and_grad():
    got = jax.vmap(jax.grad(doubled_sin))(X)
    np.testing.assert_allclose(np.asarray(got), 2 * np.cos(X), rtol=1e-6)
    value, grad = jax.value_and_grad(lambda x: doubled_sin(x).sum())(X)
    np.testing.assert_allclose(float(value), np.sin(X).sum(), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(grad), 2 * np.cos(X), rtol=1e-6)


def test_none_cotangents_and_closures_over_outer_values():
    @jax.custom_gradient
    def clip_gradient(x, lo, hi):
        return x, lambda g: (jnp.clip(g, lo, hi), None, None)

    got = jax.grad(lambda x: clip_gradient(x, -0.5, 0.5).sum() * 3)(jnp.ones(3))
    np.testing.assert_array_equal(np.asarray(got), [0.5, 0.5, 0.5])

    def scaled(w):
        @jax.custom_gradient
        def h(x):
            return x * w, lambda g: (g * w * 10,)
        return h

    got = jax.grad(lambda x, w: scaled(w)(x).sum())(jnp.ones(2), 3.0)
    np.testing.assert_array_equal(np.asarray(got), [30.0, 30.0])


def test_a_rule_inside_shard_map():
    mesh = jax.make_mesh((4,), ("i",))
    f = jax.shard_map(lambda x: jax.lax.psum(doubled_sin(x).sum(), "i"), mesh=mesh,
                      in_specs=P("i"), out_specs=P())
    got = jax.jit(jax.grad(f))(X)
    np.testing.assert_allclose(np.asarray(got), 2 * np.cos(X), rtol=1e-6)


def test_closure_convert_lifts_floating_closed_values():
    def outer(x, w, n):
        fn = lambda y: jnp.sin(y) * w + n
        converted, consts = jax.closure_convert(fn, x)
        return converted, consts

    w = jnp.float32(2.0)
    got = jax.jit(lambda x: (lambda fn, consts: fn(x, *consts))(*outer(x, w, 3)))(X)
    np.testing.assert_allclose(np.asarray(got), np.sin(X) * 2 + 3, rtol=1e-6)
    # a concrete w cannot carry a derivative: it stays in the closure, as in JAX
    fn, lifted = outer(jnp.asarray(X), w, 3)
    assert lifted == []
    np.testing.assert_allclose(np.asarray(fn(jnp.asarray(X))), np.sin(X) * 2 + 3, rtol=1e-6)
    # a traced one is lifted (the integer stays inside), and the converted function is
    # differentiable in it (what custom_vjp rules built with it need)
    def lifted_count(w):
        fn, lifted = outer(jnp.asarray(X), w, 3)
        counts.append(len(lifted))
        return fn(jnp.asarray(X), *lifted).sum()
    counts = []
    got = jax.grad(lifted_count)(jnp.float32(2.0))
    assert counts == [1]
    np.testing.assert_allclose(float(got), np.sin(X).sum(), rtol=1e-6)
    with pytest.raises(TypeError, match="The inputs to the closure produced by closure_convert "
                       "must have the same Pytree structure as the example arguments"):
        fn((jnp.asarray(X),))


def test_closure_convert_lifts_only_what_is_differentiated():
    """JAX's test of closed-over values that take part in AD beside ones that do not: only
    the differentiated c is lifted; the rule's cotangents reach c and x."""
    counts = []

    def cos_after(fn, x):
        converted, aux = jax.closure_convert(fn, x)
        counts.append(len(aux))
        return _cos_after(converted, x, *aux)

    @partial(jax.custom_vjp, nondiff_argnums=(0,))
    def _cos_after(fn, x, *args):
        return jnp.cos(fn(x, *args))

    _cos_after.defvjp(lambda fn, x, *args: (_cos_after(fn, x, *args), (x, args)),
                      lambda fn, res, g: (17. * res[0], *[42. * a for a in res[1]]))

    def solve(c, s, x):
        return cos_after(lambda x: jnp.sum(s * (x - c) ** 2.), x)

    c, s, x = 2. * jnp.ones(2), 3. * jnp.ones(2), jnp.ones(2)
    np.testing.assert_allclose(solve(c, s, x), np.cos(6.), rtol=1e-6)
    g_c, g_x = jax.grad(solve, argnums=(0, 2))(c, s, x)
    np.testing.assert_allclose(g_c, [84., 84.])
    np.testing.assert_allclose(g_x, [17., 17.])
    assert counts == [0, 1]


def test_closure_convert_in_a_fixed_point_solver():
    # the JAX documentation's use: a custom_vjp solver whose function closes over a tracer
    from functools import partial

    @partial(jax.custom_vjp, nondiff_argnums=(0,))
    def fixed_point(f, x0, *consts):
        x = x0
        for _ in range(60):
            x = f(x, *consts)
        return x

    def fwd(f, x0, *consts):
        x = fixed_point(f, x0, *consts)
        return x, (x, consts)

    def bwd(f, res, g):
        x, consts = res
        _, vjp_consts = jax.vjp(lambda *c: f(x, *c), *consts)
        _, vjp_x = jax.vjp(lambda v: f(v, *consts), x)
        u = g
        for _ in range(60):
            u = g + vjp_x(u)[0]
        return (jnp.zeros_like(x),) + vjp_consts(u)

    fixed_point.defvjp(fwd, bwd)

    def solve(a):
        f = lambda x: 0.5 * jnp.cos(x) * a
        converted, consts = jax.closure_convert(f, jnp.float32(0.0))
        return fixed_point(converted, jnp.float32(0.0), *consts)

    a = np.float32(1.3)
    got = float(jax.grad(solve)(a))
    eps = 1e-3
    want = (float(solve(a + eps)) - float(solve(a - eps))) / (2 * eps)
    assert abs(got - want) < 1e-3


def _newton(f, x0):
    x = x0
    for _ in range(30):
        x = x - f(x) / jax.grad(f)(x)
    return x


def _scalar_solve(g, y):
    return y / g(1.0)


def test_custom_root_differentiates_by_the_implicit_function_theorem():
    def sqrt_cubed(x):
        return jax.lax.custom_root(lambda y: y ** 2 - x ** 3, 1.0, _newton, _scalar_solve)

    assert abs(float(sqrt_cubed(4.0)) - 8.0) < 1e-5
    for fn in (jax.grad(sqrt_cubed), jax.jit(jax.grad(sqrt_cubed))):
        assert abs(float(fn(4.0)) - 1.5 * 4.0 ** 0.5) < 1e-5     # d x^1.5 / dx
    _, tangent = jax.jvp(sqrt_cubed, (4.0,), (1.0,))
    assert abs(float(tangent) - 3.0) < 1e-5


def test_custom_root_with_closures_in_solve_and_tangent_solve_and_aux():
    def scaled(a):
        f = lambda y: y * a - jnp.array([2.0, 6.0])
        return jax.lax.custom_root(f, jnp.zeros(2), lambda f, x0: jnp.array([2.0, 6.0]) / a,
                                   lambda g, y: y / a)

    np.testing.assert_allclose(np.asarray(jax.jacobian(scaled)(jnp.array([1.0, 3.0]))),
                               [[-2.0, 0.0], [0.0, -6.0 / 9.0]], rtol=1e-6)

    def with_aux(x):
        return jax.lax.custom_root(lambda y: y ** 2 - x, 1.0,
                                   lambda f, x0: (_newton(f, x0), jnp.int32(7)), _scalar_solve,
                                   has_aux=True)

    value, aux = with_aux(9.0)
    assert abs(float(value) - 3.0) < 1e-6 and int(aux) == 7
    assert abs(float(jax.grad(lambda x: with_aux(x)[0])(9.0)) - 1 / 6) < 1e-6


def test_custom_root_checks_the_structures_of_what_its_functions_return():
    # JAX's errors: f, solve and tangent_solve must return the guess's structure
    with pytest.raises(TypeError, match=re.escape(
            "f() output pytree structure must match initial_guess, got PyTreeDef((*, *)) and "
            "PyTreeDef(*).")):
        jax.lax.custom_root(lambda x: (x, x), 0.0, lambda f, x: x, lambda f, x: x)
    with pytest.raises(TypeError, match=re.escape(
            "solve() output pytree structure must match initial_guess, got PyTreeDef((*, *)) "
            "and PyTreeDef(*).")):
        jax.lax.custom_root(lambda x: x, 0.0, lambda f, x: (x, x), lambda f, x: x)

    def root_of(x, tangent_solve):
        return jax.lax.custom_root(lambda y: x - y, 0.0, lambda f, g: g + 1.0, tangent_solve)

    with pytest.raises(TypeError, match=re.escape(
            "tangent_solve() output pytree structure must match x, got PyTreeDef((*, *)) "
            "and PyTreeDef(*).")):
        jax.jvp(lambda x: root_of(x, lambda g, y: (y, y)), (0.0,), (1.0,))
    with pytest.raises(ValueError, match=re.escape(
            "solve() produced a pytree with structure PyTreeDef(*), but a pytree tuple with "
            "auxiliary output was expected because has_aux was set to True.")):
        jax.lax.custom_root(lambda x: x, 0.0, lambda f, x: x, lambda f, x: x, has_aux=True)
    # well formed: d/dx of the root of x - y is 1 (tangent_solve y / g(1))
    primal, tangent = jax.jvp(lambda x: root_of(x, lambda g, y: y / g(1.0)), (0.0,), (1.0,))
    assert (float(primal), float(tangent)) == (1.0, 1.0)


def test_closure_convert_keeps_a_python_numbers_weak_type():
    """Example arguments that are Python numbers are traced weakly typed, as JAX's: the
    converted ``-g * y`` of a float16 ``y`` and a Python ``g`` is float16 (it was float32),
    with or without values closed over."""
    y = jnp.ones(3, jnp.float16)
    converted, consts = jax.closure_convert(lambda y, t, g: -g * y, y, 0.0, 2.0)
    assert consts == [] and converted(y, 0.0, 2.0).dtype == np.float16

    def outer(k):
        fn, closed = jax.closure_convert(lambda y, t, g: -g * y * k, y, 0.0, 2.0)
        return fn(y, 0.0, 2.0, *closed)

    out = jax.jit(outer)(3.0)
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out, np.full(3, -6.0, np.float16))
