"""custom_jvp and custom_vjp: JAX's classic examples, inside and around shard_map, under jit,
grad, jvp, vjp and vmap.

Oracles: hand-derived derivatives evaluated with numpy in float64, central finite differences
of the primal function in numpy, and the plain (uncustomized) gradient where the rule is the
true derivative. Every rule here is written so that it differs from what autodiff of the primal
would give wherever that matters (a scaled or clipped cotangent), so a test passes only if the
user's rule was used.
"""
from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import shardc as jax
import shardc.numpy as jnp
from compiler import autodiff  # noqa: F401  (loads every rule module)
from compiler.ad_core import eval_program, jvp_eval
from compiler.tracing import UnexpectedTracerError
from ir.parser import parse_program
from ir.printer import print_program
from shardc.custom_derivatives import CustomVJPException, CustomVJPPrimal, SymbolicZero
from shardc.sharding import PartitionSpec as P

MESH = jax.make_mesh((4,), ("i",))
X8 = jnp.arange(8.) / 4 - 1


def close(got, want, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=rtol, atol=atol)


def finite_difference(f, x, eps=1e-6):
    """Central differences of a numpy function of one float64 array (elementwise f)."""
    x = np.asarray(x, np.float64)
    return (f(x + eps) - f(x - eps)) / (2 * eps)


def sigmoid(x):
    return 1 / (1 + np.exp(-np.asarray(x, np.float64)))


# --- the classic examples -----------------------------------------------------------------------

@jax.custom_jvp
def log1pexp(x):
    return jnp.log(1. + jnp.exp(x))


@log1pexp.defjvp
def log1pexp_jvp(primals, tangents):
    (x,), (x_dot,) = primals, tangents
    return log1pexp(x), (1 - 1 / (1 + jnp.exp(x))) * x_dot


@jax.custom_vjp
def clip_gradient(lo, hi, x):
    return x


def clip_gradient_fwd(lo, hi, x):
    return x, (lo, hi)


def clip_gradient_bwd(res, g):
    lo, hi = res
    return (None, None, jnp.clip(g, lo, hi))


clip_gradient.defvjp(clip_gradient_fwd, clip_gradient_bwd)


@jax.custom_vjp
def sin_scaled_ct(x):
    """sin, whose cotangent is scaled by 3: the gradient is 3 cos(x)."""
    return jnp.sin(x)


sin_scaled_ct.defvjp(lambda x: (jnp.sin(x), jnp.cos(x)), lambda cos_x, g: (3. * cos_x * g,))


def test_log1pexp_gradient_is_stable_where_autodiff_of_the_primal_is_not():
    assert float(log1pexp(3.)) == pytest.approx(np.log1p(np.exp(3.)), rel=1e-6)
    assert np.isnan(float(jax.grad(lambda x: jnp.log(1. + jnp.exp(x)))(100.)))
    for grad in (jax.grad(log1pexp), jax.jit(jax.grad(log1pexp))):
        assert float(grad(100.)) == 1.0
        assert float(grad(2.)) == pytest.approx(sigmoid(2.), rel=1e-6)
    xs = np.linspace(-3., 3., 7)
    want = finite_difference(lambda x: np.log1p(np.exp(x)), xs)
    close(jax.vmap(jax.grad(log1pexp))(jnp.asarray(xs, jnp.float32)), want, rtol=1e-5)
    close(jax.grad(lambda x: jax.vmap(log1pexp)(x).sum())(jnp.asarray(xs, jnp.float32)), want)


def test_log1pexp_under_jvp_vjp_value_and_grad_and_linearize():
    y, t = jax.jvp(log1pexp, (2.,), (3.,))
    assert float(y) == pytest.approx(np.log1p(np.exp(2.)), rel=1e-6)
    assert float(t) == pytest.approx(3 * sigmoid(2.), rel=1e-6)
    out, f_vjp = jax.vjp(log1pexp, jnp.float32(100.))
    assert float(f_vjp(jnp.float32(2.))[0]) == 2.0
    value, g = jax.value_and_grad(log1pexp)(1.)
    assert (float(value), float(g)) == pytest.approx((np.log1p(np.e), sigmoid(1.)), rel=1e-6)
    _, f_jvp = jax.linearize(log1pexp, jnp.float32(100.))
    assert float(f_jvp(jnp.float32(5.))) == 5.0


def test_clip_gradient_clips_the_cotangent():
    t = jnp.linspace(0., 10., 5)
    loss = lambda x: clip_gradient(-0.75, 0.75, jnp.sin(x)).sum()
    want = 0.75 * np.cos(np.asarray(t, np.float64))      # d/dx = clip(1, lo, hi) cos(x)
    close(jax.grad(loss)(t), want)
    close(jax.jit(jax.grad(loss))(t), want)
    close(jax.vmap(jax.grad(lambda x: clip_gradient(-0.75, 0.75, jnp.sin(x))))(t), want)
    close(jax.grad(lambda x: jax.vmap(partial(clip_gradient, -0.75, 0.75))(jnp.sin(x)).sum())(t),
          want)
    close(clip_gradient(-0.75, 0.75, t), t)      # the primal is the identity


def test_custom_vjp_scaling_the_cotangent():
    x = jnp.linspace(-2., 2., 6)
    want = 3 * np.cos(np.asarray(x, np.float64))
    for grad in (jax.grad(lambda x: sin_scaled_ct(x).sum()),
                 jax.jit(jax.grad(lambda x: sin_scaled_ct(x).sum()))):
        close(grad(x), want)
    _, f_vjp = jax.vjp(sin_scaled_ct, x)
    close(f_vjp(jnp.ones(6))[0], want)
    close(jax.jit(sin_scaled_ct)(x), np.sin(np.asarray(x)))


def test_second_order_gradient_differentiates_the_rules():
    @jax.custom_vjp
    def cube(x):
        return x ** 3
    cube.defvjp(lambda x: (x ** 3, x), lambda x, g: (6. * x * x * g,))   # twice the true VJP
    # d/dx (6 x^2) = 12 x; through a custom_jvp: d/dx sigmoid(x) = s (1 - s)
    assert float(jax.grad(jax.grad(cube))(2.)) == pytest.approx(24.)
    s = sigmoid(1.5)
    assert float(jax.grad(jax.grad(log1pexp))(1.5)) == pytest.approx(s * (1 - s), rel=1e-5)


# --- nondiff_argnums, pytrees, closures, defjvps -------------------------------------------------

def test_nondiff_argnums_with_a_function_argument():
    @partial(jax.custom_vjp, nondiff_argnums=(0,))
    def app(f, x):
        return f(x)
    app.defvjp(lambda f, x: (app(f, x), x), lambda f, x, g: (5. * g,))
    assert float(jax.grad(lambda x: app(lambda y: y ** 2, x))(4.)) == 5.
    assert float(jax.jit(jax.grad(lambda x: app(jnp.sin, x)))(4.)) == 5.

    @partial(jax.custom_jvp, nondiff_argnums=(0,))
    def apply_jvp(f, x):
        return f(x)

    @apply_jvp.defjvp
    def _(f, primals, tangents):
        (x,), (t,) = primals, tangents
        return apply_jvp(f, x), 7. * t
    assert float(jax.grad(lambda x: apply_jvp(jnp.exp, x))(1.)) == 7.
    assert float(jax.vmap(jax.grad(partial(apply_jvp, jnp.exp)))(jnp.ones(3))[1]) == 7.


def test_custom_vjp_rejects_traced_nondiff_arguments():
    @partial(jax.custom_vjp, nondiff_argnums=(1,))
    def scale(x, k):
        return x * k
    scale.defvjp(lambda x, k: (x * k, None), lambda k, r, g: (g * k,))
    with pytest.raises(UnexpectedTracerError, match="nondiff_argnums as non-differentiable"):
        jax.jit(lambda x, k: jax.grad(scale)(x, k))(1., 2.)


def test_pytrees_in_and_out():
    @jax.custom_jvp
    def f(params):
        return {"prod": params["a"] * params["b"], "sin": jnp.sin(params["a"])}

    @f.defjvp
    def f_jvp(primals, tangents):
        (p,), (t,) = primals, tangents
        out = f(p)
        return out, {"prod": 2 * (t["a"] * p["b"] + p["a"] * t["b"]),
                     "sin": jnp.cos(p["a"]) * t["a"]}

    params = {"a": jnp.float32(0.5), "b": jnp.float32(3.)}
    g = jax.grad(lambda p: f(p)["prod"] + f(p)["sin"])(params)
    assert float(g["a"]) == pytest.approx(2 * 3. + np.cos(0.5), rel=1e-6)
    assert float(g["b"]) == pytest.approx(2 * 0.5, rel=1e-6)
    out, tangent = jax.jvp(f, (params,), ({"a": jnp.float32(1.), "b": jnp.float32(0.)},))
    assert float(tangent["sin"]) == pytest.approx(np.cos(0.5), rel=1e-6)
    assert float(out["prod"]) == 1.5

    @jax.custom_vjp
    def g_fn(x, pair):
        return x * pair[0] + pair[1]
    g_fn.defvjp(lambda x, pair: (g_fn(x, pair), (x, pair[0])),
                lambda res, ct: (res[1] * ct, (res[0] * ct, None)))
    gx, (g0, g1) = jax.grad(g_fn, argnums=(0, 1))(2., (3., 4.))
    assert (float(gx), float(g0), float(g1)) == (3., 2., 0.)


def test_defjvps_sums_the_partial_rules():
    @jax.custom_jvp
    def f(x, y):
        return jnp.sin(x) * y
    f.defjvps(lambda x_dot, out, x, y: jnp.cos(x) * x_dot * y,
              lambda y_dot, out, x, y: jnp.sin(x) * y_dot)
    value, grads = jax.value_and_grad(f, argnums=(0, 1))(1., 2.)
    assert float(value) == pytest.approx(np.sin(1.) * 2, rel=1e-6)
    assert [float(g) for g in grads] == pytest.approx([np.cos(1.) * 2, np.sin(1.)], rel=1e-6)


def test_closed_over_constants_and_differentiated_closures():
    c = jnp.asarray([1., 2., 3.])

    @jax.custom_jvp
    def scaled(x):
        return c * jnp.sin(x)

    @scaled.defjvp
    def _(primals, tangents):
        (x,), (t,) = primals, tangents
        return scaled(x), 10. * c * t
    close(jax.grad(lambda x: scaled(x).sum())(jnp.zeros(3)), 10 * np.asarray(c))
    close(jax.jit(jax.grad(lambda x: scaled(x).sum()))(jnp.zeros(3)), 10 * np.asarray(c))

    def closing_over_x(x):
        @jax.custom_vjp
        def g(y):
            return x * y
        g.defvjp(lambda y: (x * y, None), lambda r, ct: (ct,))
        return g(1.)
    with pytest.raises(CustomVJPException, match="closed-over value"):
        jax.grad(closing_over_x)(2.)


def test_keyword_arguments_and_defaults_are_resolved():
    @jax.custom_vjp
    def f(x, y=2.):
        return x * y
    f.defvjp(lambda x, y=2.: (x * y, (x, y)), lambda r, g: (r[1] * g * 10, r[0] * g))
    assert float(jax.grad(lambda x: f(x))(3.)) == 20.
    assert float(jax.grad(lambda y: f(3., y=y))(5.)) == 3.


# --- symbolic zeros ------------------------------------------------------------------------------

def test_symbolic_zeros_reach_the_rules():
    seen = []

    @jax.custom_jvp
    def f(x, y):
        return x * y

    def f_jvp(primals, tangents):
        (x, y), (tx, ty) = primals, tangents
        seen.append((type(tx) is SymbolicZero, type(ty) is SymbolicZero))
        parts = [t * other for t, other in ((tx, y), (ty, x)) if type(t) is not SymbolicZero]
        return f(x, y), sum(parts[1:], parts[0])
    f.defjvp(f_jvp, symbolic_zeros=True)
    assert float(jax.grad(f)(2., 5.)) == 5.
    assert seen[-1] == (False, True)
    batched = jax.grad(lambda x: jax.vmap(f, in_axes=(0, None))(x, 5.).sum())(jnp.ones(3))
    close(batched, np.full(3, 5.))
    assert seen[-1] == (False, True)

    @jax.custom_vjp
    def h(x, y):
        return x * y

    def h_fwd(x, y):
        seen.append((type(x) is CustomVJPPrimal, x.perturbed, y.perturbed))
        return h(x.value, y.value), (x.value, y.value)
    h.defvjp(h_fwd, lambda r, g: (r[1] * g, None), symbolic_zeros=True)
    assert float(jax.grad(h)(2., 5.)) == 5.
    assert seen[-1] == (True, True, False)


# --- errors --------------------------------------------------------------------------------------

def test_custom_vjp_under_forward_mode_raises_as_in_jax():
    message = "can't apply forward-mode autodiff \\(jvp\\) to a custom_vjp function."
    with pytest.raises(TypeError, match=message):
        jax.jvp(sin_scaled_ct, (1.,), (1.,))
    with pytest.raises(TypeError, match=message):
        jax.jit(lambda x, t: jax.jvp(sin_scaled_ct, (x,), (t,)))(1., 1.)
    _, f_jvp = jax.linearize(sin_scaled_ct, 1.)
    with pytest.raises(TypeError, match=message):
        f_jvp(1.)


def test_rule_errors_name_what_is_wrong():
    @jax.custom_jvp
    def no_rule(x):
        return x
    with pytest.raises(AttributeError, match="No JVP defined for custom_jvp function no_rule"):
        no_rule(1.)

    @jax.custom_jvp
    def f(x):
        return jnp.sin(x)
    f.defjvp(lambda p, t: f(p[0]))
    with pytest.raises(TypeError, match="must produce a pair"):
        jax.grad(f)(1.)
    f.defjvp(lambda p, t: (f(p[0]), jnp.ones(3)))
    with pytest.raises(TypeError, match=r"Expected float32\[\] \(tangent type of float32\[\]\) "
                                        r"but got float32\[3\]"):
        jax.jvp(f, (1.,), (1.,))

    @jax.custom_vjp
    def g(x, y):
        return x * y
    g.defvjp(lambda x, y: (g(x, y), None), lambda r, ct: (ct,))
    with pytest.raises(TypeError, match="same container \\(pytree\\) structure as the args"):
        jax.grad(g)(1., 2.)
    g.defvjp(lambda x, y: (g(x, y), None), lambda r, ct: (jnp.ones(2), None))
    with pytest.raises(ValueError, match=r"at output\[0\] the bwd rule produced an output of "
                                         r"type float32\[2\] corresponding to an input of type "
                                         r"float32\[\], so the shapes do not match"):
        jax.grad(g)(1., 2.)
    g.defvjp(lambda x, y: (x[0], None), lambda r, ct: (ct, ct))
    with pytest.raises(TypeError, match=r"fwd rule output's first element had shapes/dtypes "
                                        r"of:\n    float32\[\]\nwhile the custom_vjp-decorated "
                                        r"function g had output shapes/dtypes of:\n    "
                                        r"float32\[2\]"):
        jax.vjp(g, jnp.ones(2), 2.)


# --- inside and around shard_map ----------------------------------------------------------------

@pytest.mark.parametrize("check_vma", [True, False])
def test_custom_rules_apply_per_device_inside_a_body(check_vma):
    def body(x):
        return jax.lax.psum((sin_scaled_ct(x) + log1pexp(x)).sum(), "i")
    loss = jax.shard_map(body, mesh=MESH, in_specs=P("i"), out_specs=P(), check_vma=check_vma)
    x64 = np.asarray(X8, np.float64)
    assert float(loss(X8)) == pytest.approx(np.sum(np.sin(x64) + np.log1p(np.exp(x64))),
                                            rel=1e-5)
    want = 3 * np.cos(x64) + sigmoid(x64)
    close(jax.grad(loss)(X8), want)
    close(jax.jit(jax.grad(loss))(X8), want)
    inner = jax.shard_map(jax.grad(lambda x: sin_scaled_ct(x).sum()), mesh=MESH,
                          in_specs=P("i"), out_specs=P("i"), check_vma=check_vma)
    close(inner(X8), 3 * np.cos(x64))
    close(jax.jit(inner)(X8), 3 * np.cos(x64))


def test_bwd_cotangents_must_keep_the_varying_axes_of_the_inputs():
    @jax.custom_vjp
    def h(x):
        return 2 * x
    h.defvjp(lambda x: (2 * x, None), lambda r, g: (jax.lax.psum(g, "i"),))
    loss = jax.shard_map(lambda x: jax.lax.psum(h(x).sum(), "i"), mesh=MESH, in_specs=P("i"),
                         out_specs=P())
    message = ("Custom VJP bwd rule must produce an output with the same type as the args tuple "
               "of the primal function, but at output[0] the bwd rule produced an output of "
               "type float32[2] corresponding to an input of type float32[2]{V:i}, so the manual "
               "axis types do not match")
    for grad in (jax.grad(loss), jax.jit(jax.grad(loss))):
        with pytest.raises(ValueError) as err:
            grad(X8)
        assert str(err.value) == message
    unchecked = jax.shard_map(lambda x: jax.lax.psum(h(x).sum(), "i"), mesh=MESH,
                              in_specs=P("i"), out_specs=P(), check_vma=False)
    # with the check off nothing is typed (SEMANTICS 4.3): each device's output cotangent is
    # 1, and the bwd rule's psum over the 4 devices makes it 4
    close(jax.grad(unchecked)(X8), np.full(8, 4.))


def test_custom_vjp_whose_rules_call_shard_maps():
    sharded = partial(jax.shard_map, mesh=MESH, in_specs=P("i"), out_specs=P("i"))

    @jax.custom_vjp
    def f(x):
        return sharded(jnp.sin)(x)

    def f_fwd(x):
        return f(x), sharded(jnp.cos)(x)

    def f_bwd(cos_x, g):
        scale = jax.shard_map(lambda c, g: 2. * c * g, mesh=MESH, in_specs=(P("i"), P("i")),
                              out_specs=P("i"))
        return (scale(cos_x, g),)
    f.defvjp(f_fwd, f_bwd)
    x64 = np.asarray(X8, np.float64)
    close(f(X8), np.sin(x64))
    close(jax.jit(f)(X8), np.sin(x64))
    for grad in (jax.grad(lambda x: f(x).sum()), jax.jit(jax.grad(lambda x: f(x).sum()))):
        close(grad(X8), 2 * np.cos(x64))
    close(jax.vmap(jax.grad(lambda x: f(x).sum()))(jnp.stack([X8, 2 * X8])),
          np.stack([2 * np.cos(x64), 2 * np.cos(2 * x64)]))


def test_custom_jvp_around_a_shard_map():
    total = jax.shard_map(lambda x: jax.lax.psum(jnp.exp(x).sum(), "i"), mesh=MESH,
                          in_specs=P("i"), out_specs=P())

    @jax.custom_jvp
    def f(x):
        return total(x)

    @f.defjvp
    def _(primals, tangents):
        (x,), (t,) = primals, tangents
        return f(x), 0.5 * jnp.vdot(jnp.exp(x), t)
    want = 0.5 * np.exp(np.asarray(X8, np.float64))
    close(jax.grad(f)(X8), want)
    close(jax.jit(jax.grad(f))(X8), want)


# --- printing ------------------------------------------------------------------------------------

def test_programs_print_the_call_and_read_back():
    loss = jax.shard_map(lambda x: jax.lax.psum(log1pexp(sin_scaled_ct(x)).sum(), "i"),
                         mesh=MESH, in_specs=P("i"), out_specs=P())
    traced = jax.make_jaxpr(loss)(X8).jaxpr
    text = print_program(traced)
    assert "custom_jvp_call[" in text and "jvp='log1pexp_jvp'" in text
    assert "custom_vjp_call[" in text and "name='sin_scaled_ct'" in text
    tangents = jax.make_jaxpr(lambda x, t: jax.jvp(sin_scaled_ct, (x,), (t,)))(X8, X8).jaxpr
    assert "custom_lin[" in print_program(tangents)
    for program in (traced, tangents, jax.make_jaxpr(jax.grad(loss))(X8).jaxpr):
        text = print_program(program)
        assert print_program(parse_program(text)) == text
    # the lowered program runs the primal function: no custom call reaches a device
    module = jax.jit(jax.grad(loss)).lower(X8).module
    names = {e.primitive.name for sm in module.all_shard_maps()
             for e in sm.device_programs[0].program.eqns}
    assert not names & {"custom_jvp_call", "custom_vjp_call", "custom_lin"}


@settings(derandomize=True, deadline=None, max_examples=8)
@given(st.lists(st.floats(-30., 30., width=32), min_size=8, max_size=8))
def test_custom_gradients_in_a_body_match_hand_derived_values(values):
    x = jnp.asarray(values, jnp.float32)
    loss = jax.shard_map(lambda x: jax.lax.psum((log1pexp(x) + sin_scaled_ct(x)).sum(), "i"),
                         mesh=MESH, in_specs=P("i"), out_specs=P())
    x64 = np.asarray(x, np.float64)
    close(jax.jit(jax.grad(loss))(x), sigmoid(x64) + 3 * np.cos(x64), rtol=1e-5, atol=1e-6)


def _pair_rule(structure):
    """A custom_jvp function of two outputs whose rule returns ``structure(primals)``."""
    @jax.custom_jvp
    def f(x):
        return x, 2 * x
    f.defjvp(lambda p, t: structure(p[0], t[0]))
    return f


def _fwd_rule(fwd):
    @jax.custom_vjp
    def f(x):
        return x * 2
    f.defvjp(fwd, lambda r, g: (g,))
    return f


@pytest.mark.parametrize("call, error, message", [
    (lambda: jax.grad(_pair_rule(lambda x, t: ((x, 2 * x), [t, t])))(1.), TypeError,
     "must produce primal and tangent outputs with equal container"),
    (lambda: jax.grad(lambda x: _pair_rule(lambda x, t: ([x, 2 * x], [t, t]))(x)[0])(1.),
     TypeError,
     "first element had container/pytree structure:\n    \\[float32\\[\\], float32\\[\\]\\]"),
    (lambda: jax.jvp(_pair_rule(lambda x, t: ((x, 2 * x), (jnp.ones(2), t))), (1.,), (1.,)),
     TypeError, "corresponding shapes and dtypes, but got:\n  primal float32\\[\\] with tangent "
                "float32\\[2\\], expecting tangent float32\\[\\]"),
    (lambda: jax.grad(_fwd_rule(lambda x: x * 2))(1.), TypeError,
     "instead of a pair the fwd rule <lambda> produced"),
    (lambda: jax.grad(_fwd_rule(lambda x: ((x * 2,), None)))(1.), TypeError,
     "first element had container/pytree structure"),
    (lambda: jax.grad(_fwd_rule(lambda x: (x * 2, "saved")))(1.), TypeError,
     "residuals must be arrays"),
    (lambda: jax.vmap(lambda x: jax.jvp(sin_scaled_ct, (x,), (x,)))(jnp.ones(2)), TypeError,
     "can't apply forward-mode autodiff"),
])
def test_rule_output_errors(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_argument_and_definition_errors():
    @jax.custom_vjp
    def f(x, *, k):
        return x * k
    with pytest.raises(AttributeError, match="No VJP defined for custom_vjp function f"):
        f(1., k=2.)
    f.defvjp(lambda x, k: (x, None), lambda r, g: (g,))
    with pytest.raises(TypeError, match="could not be resolved to positional-only arguments"):
        jax.grad(lambda x: f(x, k=2.))(1.)
    with pytest.raises(TypeError, match="is not an array; pass arguments that are not arrays"):
        jax.grad(lambda x: sin_scaled_ct((x, "text")))(1.)

    @partial(jax.custom_jvp, nondiff_argnums=(0,))
    def g(f, x):
        return f(x)
    with pytest.raises(TypeError, match="Can't use ``defjvps`` with ``nondiff_argnums``."):
        g.defjvps(None)

    def closing_over_x(x):
        @jax.custom_jvp
        def h(y):
            return x * y
        h.defjvp(lambda p, t: (h(p[0]), t[0]))
        return h(1.)
    with pytest.raises(CustomVJPException, match="differentiation of a custom_jvp function "
                                                 "with respect to a closed-over value"):
        jax.grad(closing_over_x)(2.)
    # JAX's type for it: an UnexpectedTracerError (the closed-over tangent escapes the rule)
    for call in (lambda: jax.grad(closing_over_x)(2.),
                 lambda: jax.jvp(closing_over_x, (2.,), (1.,))):
        with pytest.raises(jax.errors.UnexpectedTracerError):
            call()

    @jax.custom_vjp
    def z(x):
        return x
    z.defvjp(lambda x: (x, None), lambda r, g: (SymbolicZero(jnp.ones(3).aval),))
    with pytest.raises(ValueError, match="produced a SymbolicZero with a shape/dtype that does "
                                         "not match"):
        jax.grad(z)(1.)
    _, f_jvp = jax.linearize(jnp.sin, 1.)
    with pytest.raises(TypeError, match="linearized function called with tangents of "
                                        "structure"):
        f_jvp(1., 2.)


def test_rules_closing_over_arrays_inside_a_body():
    """A rule's closed-over array enters the differentiated body as an input every device
    holds whole (it was refused, asking for an argument)."""
    table = jnp.asarray([1., 2.])

    @jax.custom_jvp
    def f(x):
        return x * 2

    @f.defjvp
    def _(p, t):
        return f(p[0]), t[0] * table
    loss = jax.shard_map(lambda x: jax.lax.psum(f(x).sum(), "i"), mesh=MESH, in_specs=P("i"),
                         out_specs=P())
    close(jax.grad(loss)(X8), np.tile([1., 2.], 4))
    close(jax.jit(jax.grad(loss))(X8), np.tile([1., 2.], 4))

    # a table the function uses as well is one of its call's operands: the rule reads that
    @jax.custom_jvp
    def g(x):
        return x * table

    @g.defjvp
    def _(p, t):
        return g(p[0]), 10. * t[0] * table
    body = jax.shard_map(lambda x: jax.lax.psum(g(x).sum(), "i"), mesh=MESH, in_specs=P("i"),
                         out_specs=P())
    close(jax.grad(body)(X8), np.tile([10., 20.], 4))
    close(jax.jit(jax.grad(body))(X8), np.tile([10., 20.], 4))


def test_a_program_read_from_text_runs_but_its_rules_are_names():
    text = print_program(jax.make_jaxpr(log1pexp)(1.).jaxpr)
    program = parse_program(text)
    assert float(eval_program(program, [np.float32(2.)])[0]) == pytest.approx(np.log1p(np.e ** 2),
                                                                             rel=1e-6)
    with pytest.raises(NotImplementedError, match="rule 'log1pexp_jvp' is only a name here"):
        jvp_eval(program, [np.float32(2.)], [np.float32(1.)])


def test_zero_tangents_and_cotangents_keep_the_varying_axes_in_a_body():
    @jax.custom_jvp
    def second(x, y):
        return x * 0 + y

    @second.defjvp
    def _(primals, tangents):
        return second(*primals), tangents[1]       # the zero tangent of y passes through

    @jax.custom_vjp
    def pair(x):
        return x, 2 * x
    pair.defvjp(lambda x: (pair(x), None), lambda r, cts: (cts[1],))   # a zero cotangent

    def body(x):
        y = jnp.sin(x)
        dx = jax.grad(lambda x: second(x, y).sum())(x)
        dpair = jax.grad(lambda x: pair(x)[0].sum())(x)
        return dx + dpair + jax.jvp(lambda x: second(x, y), (x,), (jnp.ones_like(x),))[1]
    sharded = jax.shard_map(body, mesh=MESH, in_specs=P("i"), out_specs=P("i"))
    close(sharded(X8), np.zeros(8))
    close(jax.jit(sharded)(X8), np.zeros(8))


def test_custom_functions_in_loops_branches_and_remat():
    def scanned(x, init=0.):
        def step(carry, xi):
            return carry + sin_scaled_ct(xi) * log1pexp(xi), None
        return jax.lax.scan(step, init, x)[0]

    def want(x):
        x64 = np.asarray(x, np.float64)
        return 3 * np.cos(x64) * np.log1p(np.exp(x64)) + np.sin(x64) * sigmoid(x64)
    x = jnp.linspace(-1., 1., 4)
    close(scanned(x), float(np.sum(np.sin(np.asarray(x)) * np.log1p(np.exp(np.asarray(x))))))
    close(jax.grad(scanned)(x), want(x))
    close(jax.jit(jax.grad(scanned))(x), want(x))
    product = lambda x: (sin_scaled_ct(x) * log1pexp(x)).sum()
    close(jax.grad(jax.remat(product))(x), want(x))
    close(jax.jit(jax.grad(jax.remat(product)))(x), want(x))
    branch = lambda x: jax.lax.cond(x.sum() > 0, sin_scaled_ct, log1pexp, x).sum()
    close(jax.grad(branch)(x + 1), 3 * np.cos(np.asarray(x + 1, np.float64)))
    close(jax.grad(branch)(x - 1), sigmoid(np.asarray(x - 1)))
    body = jax.shard_map(lambda x: jax.lax.psum(scanned(x, jax.lax.pvary(0., "i")), "i"),
                         mesh=MESH, in_specs=P("i"), out_specs=P())
    close(jax.jit(jax.grad(body))(X8), want(X8))
    close(jax.grad(body)(X8), want(X8))


def test_rules_read_what_the_function_closed_over_in_the_trace_now_running():
    # an array nondiff argument of a custom_jvp function (stop_gradient'ed, as in JAX)
    @partial(jax.custom_jvp, nondiff_argnums=(1,))
    def scale(x, k):
        return x * k

    @scale.defjvp
    def _(k, primals, tangents):
        return scale(primals[0], k), 10. * k * tangents[0]
    assert float(jax.jit(jax.grad(scale))(1., 3.)) == 30.
    assert float(jax.grad(scale, argnums=1)(1., 3.)) == 0.
    close(jax.vmap(jax.grad(scale))(jnp.ones(3), jnp.arange(3.)), [0., 10., 20.])
    close(jax.grad(lambda x, k: jax.vmap(scale)(x, k).sum())(jnp.ones(3), jnp.arange(3.)),
          [0., 10., 20.])

    # a custom function in a body closing over a body value that is not differentiated
    def body(x, labels):
        @jax.custom_vjp
        def sq_error(y):
            return ((y - labels) ** 2).sum()
        sq_error.defvjp(lambda y: (sq_error(y), y - labels), lambda r, g: (10. * r * g,))

        @jax.custom_jvp
        def shifted(y):
            return y + labels

        @shifted.defjvp
        def _(primals, tangents):
            return shifted(primals[0]), labels * tangents[0]
        return jax.lax.psum(sq_error(x) + shifted(x).sum(), "i")
    loss = jax.shard_map(body, mesh=MESH, in_specs=(P("i"), P("i")), out_specs=P())
    labels = jnp.linspace(0., 1., 8)
    want = 10. * (np.asarray(X8) - np.asarray(labels)) + np.asarray(labels)
    close(jax.grad(loss)(X8, labels), want)
    close(jax.jit(jax.grad(loss))(X8, labels), want)

    # a custom function closing over a batched value
    def member(x, c):
        @jax.custom_vjp
        def g(y):
            return y * c
        g.defvjp(lambda y: (y * c, None), lambda r, ct: (10. * c * ct,))
        return g(x)
    c = jnp.arange(3.)
    close(jax.grad(lambda x: jax.vmap(member)(x, c).sum())(jnp.ones(3)), 10. * np.arange(3.))
    close(jax.vmap(jax.grad(member))(jnp.ones(3), c), 10. * np.arange(3.))


# --- custom rules branch in Python on values known now --------------------------------------------

@jax.custom_jvp
def _piecewise(x):
    return jnp.sin(x) if x > 0 else x * 1.0


@_piecewise.defjvp
def _piecewise_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return _piecewise(x), (jnp.cos(x) * t if x > 0 else t * 2.0)


@jax.custom_vjp
def _scaled(x, y):
    return x * y if x > 0 else x + y


def _scaled_fwd(x, y):
    return _scaled(x, y), (x, y)


def _scaled_bwd(res, g):
    x, y = res
    return (g * y * 3, g * x) if x > 0 else (g, g * 5)


_scaled.defvjp(_scaled_fwd, _scaled_bwd)


@pytest.mark.parametrize("x", [0.7, -0.4])
def test_custom_rules_branch_on_the_values_a_gradient_is_taken_at(x):
    # JAX runs the primal and the rules on the values outside jit, so Python may branch there
    pos = x > 0
    expected = np.cos(x) if pos else 2.0
    assert np.isclose(float(jax.grad(_piecewise)(x)), expected)
    assert np.isclose(float(jax.jacfwd(_piecewise)(x)), expected)
    y, lin = jax.linearize(_piecewise, x)
    assert np.isclose(float(y), np.sin(x) if pos else x)
    assert np.isclose(float(lin(1.0)), expected)
    # second order: the rule's own branch is differentiated again
    assert np.isclose(float(jax.grad(jax.grad(_piecewise))(x)), -np.sin(x) if pos else 0.0)
    want = [6.0, x] if pos else [1.0, 5.0]
    np.testing.assert_allclose(jax.grad(_scaled, argnums=(0, 1))(x, 2.0), want, rtol=1e-6)
    _, pullback = jax.vjp(_scaled, x, 2.0)
    np.testing.assert_allclose(pullback(1.0), want, rtol=1e-6)


def test_custom_rules_under_jit_or_vmap_still_refuse_python_branches():
    with pytest.raises(jax.errors.TracerBoolConversionError):
        jax.jit(jax.grad(_piecewise))(0.7)
    with pytest.raises(jax.errors.TracerBoolConversionError):
        jax.grad(lambda x: jax.jit(_piecewise)(x))(0.7)
    with pytest.raises(jax.errors.TracerBoolConversionError):
        jax.vmap(jax.grad(_piecewise))(jnp.ones(3))


def test_a_jitted_custom_function_keeps_its_rules():
    # jit copies the wrapped object's attributes (functools.update_wrapper); a custom_vjp's
    # own ``fun`` (its primal alone) once replaced the jitted function's, dropping the rules
    @jax.custom_vjp
    def f(x):
        return x * 2.0
    f.defvjp(lambda x: (f(x), None), lambda _, g: (g * 3.0,))

    @jax.custom_jvp
    def h(x):
        return x * 2.0
    h.defjvp(lambda p, t: (h(p[0]), t[0] * 5.0))

    @partial(jax.custom_vjp, nondiff_argnums=(1,))
    def k(x, n):
        return x * n
    k.defvjp(lambda x, n: (k(x, n), None), lambda n, _, g: (g * 7.0,))

    assert float(jax.grad(jax.jit(f))(1.0)) == 3.0
    assert float(jax.grad(jax.jit(h))(1.0)) == 5.0
    assert float(jax.grad(jax.jit(k, static_argnums=1))(1.0, 2)) == 7.0
    assert float(jax.value_and_grad(jax.jit(jax.jit(f)))(1.0)[1]) == 3.0
    assert float(jax.jit(f)(1.5)) == 3.0
    # and a jit of a jit keeps its own cache
    inner = jax.jit(lambda x: x + 1)
    outer = jax.jit(inner)
    assert outer.cache is not inner.cache and float(outer(1.0)) == 2.0


def test_a_jitted_shard_map_of_a_custom_function_using_axis_names_differentiates():
    mesh = jax.make_mesh((4,), ("i",))
    x = jax.device_put(np.arange(4.0), jax.NamedSharding(mesh, P("i")))

    @jax.custom_jvp
    def k(v):
        return v * jax.lax.axis_index("i")
    k.defjvp(lambda p, t: (k(p[0]), t[0]))
    g = jax.jit(jax.shard_map(k, mesh=mesh, in_specs=P("i"), out_specs=P("i")))
    np.testing.assert_array_equal(g(x), [0.0, 1.0, 4.0, 9.0])
    np.testing.assert_array_equal(jax.grad(lambda v: g(v).sum())(x), np.ones(4))


def test_custom_rules_with_collectives_over_a_vmap_axis():
    """The batch-norm pattern: custom_jvp/custom_vjp functions whose primal and rules take
    psum/pmean over the enclosing vmap's axis name, forward, under grad both ways and jit.
    Reference: numpy over the whole batch (the axis's members are the rows)."""
    from shardc import lax
    x = np.arange(1.0, 7.0, dtype=np.float32).reshape(3, 2)

    @jax.custom_jvp
    def share(v):
        return v / lax.psum(v, "i")

    share.defjvp(lambda p, t: (share(p[0]), t[0] / lax.psum(p[0], "i")))

    @jax.custom_vjp
    def centre(v):
        return v - lax.pmean(v, "i")

    centre.defvjp(lambda v: (centre(v), None), lambda _, ct: (ct - lax.pmean(ct, "i"),))
    np.testing.assert_allclose(jax.vmap(share, axis_name="i")(x), x / x.sum(0), rtol=1e-6)
    np.testing.assert_allclose(jax.jit(jax.vmap(share, axis_name="i"))(x),
                               x / x.sum(0), rtol=1e-6)
    np.testing.assert_allclose(jax.vmap(centre, axis_name="i")(x), x - x.mean(0), rtol=1e-6)
    # per member, the bwd rule gives e0 minus the members' mean of e0: every member's
    # cotangent is e0, so nothing is left (a bwd run outside the vmap would give e0)
    grads = jax.vmap(jax.grad(lambda a: centre(a)[0]), axis_name="i")(x)
    np.testing.assert_allclose(grads, np.zeros_like(x), atol=0)
    weighted = jax.vmap(jax.grad(lambda a, w: (centre(a) * w).sum()), axis_name="i")(
        x, np.arange(6, dtype=np.float32).reshape(3, 2))
    w = np.arange(6, dtype=np.float32).reshape(3, 2)
    np.testing.assert_allclose(weighted, w - w.mean(0), rtol=1e-6)
    # the tangent rule's own (custom) derivative: t / psum(x) for the first entry
    got = jax.grad(lambda a: jax.vmap(share, axis_name="i")(a)[0, 0])(x)
    want = np.zeros_like(x)
    want[0, 0] = 1 / x[:, 0].sum()
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_custom_rules_with_a_collective_over_a_vmap_axis_that_maps_none_of_their_operands():
    """A custom_jvp/custom_vjp call whose operand every member shares, with a psum over the
    vmap's axis inside: one value per member all the same (each member's psum adds the
    batch's copies), its rules too (JAX's values)."""
    from shardc import lax

    @jax.custom_jvp
    def total(v):
        return lax.psum(v, "foo")

    total.defjvp(lambda p, t: (lax.psum(p[0], "foo"), t[0] * 3))

    @jax.custom_vjp
    def doubled(v):
        return lax.psum(v, "foo") * 2

    doubled.defvjp(lambda v: (doubled(v), None), lambda _, g: (g * 5,))
    members = jnp.arange(4.0)
    run = lambda f: jax.vmap(lambda _, v: f(v), axis_name="foo", in_axes=(0, None))(
        members, 2.0)
    np.testing.assert_array_equal(run(total), np.full(4, 8.0))
    np.testing.assert_array_equal(run(doubled), np.full(4, 16.0))
    np.testing.assert_array_equal(run(lambda v: jax.jvp(total, (v,), (1.0,))[1]), np.full(4, 3.0))
    np.testing.assert_array_equal(run(jax.grad(doubled)), np.full(4, 5.0))


def test_custom_rules_of_a_functools_partial_take_its_arguments_as_given():
    """A functools.partial's signature is opaque to custom_jvp/custom_vjp (JAX's): its bound
    keywords stay its own, and keywords at the call cannot be placed."""
    rule = partial(lambda x, y, a: x + y * a, a=0.1)
    f = jax.custom_jvp(rule)
    f.defjvp(lambda primals, tangents: jax.jvp(rule, primals, tangents))
    gx, gy = jax.grad(lambda args: f(*args))((1.0, 2.0))
    assert (float(gx), float(gy)) == (1.0, np.float32(0.1))
    g = jax.custom_vjp(partial(lambda x, k: x * k, k=3.0))
    g.defvjp(lambda x: (x * 3.0, None), lambda _, ct: (ct * 3.0,))
    assert float(jax.grad(g)(2.0)) == 3.0
    with pytest.raises(TypeError, match="The following keyword arguments could not be "
                                        "resolved to positions: y"):
        f(1.0, y=2.0)


def test_bwd_cotangent_of_another_float_dtype_is_kept():
    # JAX accepts a bwd rule's float cotangent of another float dtype than its input's and
    # keeps it (a bfloat16 input may get a float32 cotangent): no rounding to the input's
    # dtype on the way (JAX's api_test test_excess_precision_hell)
    @jax.custom_vjp
    def up(x):
        return x.astype(jnp.float32)

    up.defvjp(lambda x: (up(x), x), lambda x, g: (x.astype(jnp.float32) * g,))
    x = (1 + jnp.finfo(jnp.bfloat16).eps) * jnp.ones(2, jnp.bfloat16)
    for fun in (lambda v: up(v).sum(), jax.jit(lambda v: up(v).sum())):
        g = jax.grad(fun)(x)
        assert g.dtype == np.float32
        np.testing.assert_array_equal(np.asarray(g), np.float32(1 + 2 ** -7))


def test_custom_jvp_rule_closing_over_an_array_inside_cond():
    # JAX differentiates a cond whose branch calls a custom_jvp function whose rule closes
    # over a numpy array (the array becomes an operand of every branch)
    @jax.custom_jvp
    def f(x):
        return x

    @f.defjvp
    def f_jvp(primals, tangents):
        (x,), (xdot,) = primals, tangents
        const = np.arange(3, dtype=x.dtype)
        return x * const, xdot * const

    x = np.arange(3, dtype=np.float32)
    t = x + 1
    c = np.arange(3, dtype=np.float32)
    g = lambda x, pred: jax.lax.cond(pred, f, lambda y: y * 2, x)
    h = lambda x, pred: jax.lax.cond(pred, f, f, x)
    for pred in (True, False):
        scale = c if pred else 2.0
        want = (scale * x, scale * t)       # the rule's primal output, as JAX's
        for got in (jax.jvp(lambda x: g(x, pred), (x,), (t,)),
                    jax.jit(lambda x, t, p: jax.jvp(lambda x: g(x, p), (x,), (t,)))(x, t, pred)):
            np.testing.assert_allclose(np.asarray(got[0]), want[0])
            np.testing.assert_allclose(np.asarray(got[1]), want[1])
        np.testing.assert_allclose(
            np.asarray(jax.jit(jax.grad(lambda x, p: g(x, p).sum()))(x, pred)),
            np.broadcast_to(scale, (3,)))
        np.testing.assert_allclose(
            np.asarray(jax.vmap(lambda x: jax.jvp(lambda x: g(x, pred), (x,), (x,))[1])(
                np.ones((2, 3), np.float32))), np.broadcast_to(scale, (2, 3)))
        # the same rule in both branches: each branch reads its own copy of the array
        np.testing.assert_allclose(np.asarray(jax.jit(
            lambda x, p: jax.jvp(lambda x: h(x, p), (x,), (t,))[1])(x, pred)), c * t)


def test_keyword_only_arguments_resolve_as_jax():
    """A keyword-only argument left at its default is dropped (the function sees its default);
    one passed by the caller has no position: JAX's TypeError naming it. Likewise for
    custom_vjp and custom_vmap."""
    @jax.custom_jvp
    def f(x, y, *, z=None):
        return jnp.sin(x) + jnp.cos(y) + (0. if z is None else 100.)

    f.defjvp(lambda p, t: (f(*p), t[0] * jnp.cos(p[0]) - t[1] * jnp.sin(p[1])))
    np.testing.assert_allclose(f(0.5, 1.0), np.sin(0.5) + np.cos(1.0), rtol=1e-6)
    np.testing.assert_allclose(jax.grad(f)(0.5, 1.0), np.cos(0.5), rtol=1e-6)
    with pytest.raises(TypeError, match=r"custom_jvp-decorated function f could not be resolved"
                       r" to positional-only arguments. Binding failed with the error:\n"
                       r"missing a required argument: 'y'"):
        f(0.5)
    with pytest.raises(TypeError, match=r"custom_jvp-decorated function f(.*)\nThe following "
                       r"keyword arguments could not be resolved to positions: z"):
        f(0.5, 0.1, z=0.1)

    @jax.custom_vjp
    def g(x, *, z=None):
        return x * 3.

    g.defvjp(lambda x: (x * 3., None), lambda r, c: (c * 3.,))
    assert float(jax.grad(g)(2.)) == 3.
    with pytest.raises(TypeError, match=r"custom_vjp-decorated function g(.*)\nThe following "
                       r"keyword arguments could not be resolved to positions: z"):
        g(2., z=1.)

    @jax.custom_batching.custom_vmap
    def h(x, *, z=None):
        return x + 1.

    h.def_vmap(lambda size, in_batched, x: (x + 1., in_batched[0]))
    np.testing.assert_allclose(jax.vmap(h)(jnp.arange(3.)), np.arange(3.) + 1.)
    with pytest.raises(TypeError, match=r"custom_vmap-decorated function h(.*)\nThe following "
                       r"keyword arguments could not be resolved to positions: z"):
        h(2., z=1.)


def test_vjp_rules_may_return_a_batched_value_they_close_over():
    """JAX's issue 8783: a custom_vjp function defined inside vmap whose fwd rule returns the
    batched value it closes over as a residual; its gradient, as JAX's: d/dz sum(x * z) is
    sum(x)."""
    def h(z):
        def f(x):
            @jax.custom_vjp
            def g(y):
                return x * y
            g.defvjp(lambda y: (x * y, (x, x * y, y)), lambda res, w: (res[0] * w,))
            return g(z)
        return jax.vmap(f)(jnp.arange(3., dtype="float32")).sum()

    assert float(h(jnp.float32(3.14))) == pytest.approx(9.42, rel=1e-6)
    assert float(jax.grad(h)(jnp.float32(3.14))) == 3.0
    assert float(jax.jit(jax.grad(h))(jnp.float32(3.14))) == 3.0
    assert float(jax.vjp(h, jnp.float32(3.14))[1](jnp.float32(1.0))[0]) == 3.0


def test_integer_arguments_and_outputs_get_float0_zeros_in_rules():
    """A rule sees JAX's tangent type for an integer argument (float0 zeros, a SymbolicZero of
    float0 with symbolic_zeros) and a bwd rule the same for an integer output's cotangent."""
    seen = []

    @jax.custom_jvp
    def scale(x, n):
        return x * n

    @scale.defjvp
    def scale_jvp(primals, tangents):
        (x, n), (x_dot, n_dot) = primals, tangents
        seen.append((n_dot.dtype, np.shape(n_dot)))
        return x * n, x_dot * n

    assert float(jax.grad(scale)(1.0, 3)) == 3.0
    assert float(jax.jit(jax.grad(scale))(1.0, jnp.int32(4))) == 4.0
    assert seen == [(jax.dtypes.float0, ())] * 2

    @jax.custom_vjp
    def passthrough(x, state):
        return x * 2.0, state

    def fwd(x, state):
        return (x * 2.0, state), None

    def bwd(_, cts):
        x_bar, state_bar = cts
        seen.append((state_bar.dtype, state_bar.shape))
        return x_bar * 2.0, state_bar

    passthrough.defvjp(fwd, bwd)
    seen.clear()
    assert float(jax.grad(lambda x: passthrough(x, jnp.arange(3))[0])(1.0)) == 2.0
    assert seen == [(jax.dtypes.float0, (3,))]

    @jax.custom_vjp
    def sym(x, state):
        return x, state

    def sym_fwd(x, state):
        assert isinstance(state, CustomVJPPrimal) and not state.perturbed
        return (x.value, state.value), None

    def sym_bwd(_, cts):
        seen.append(cts[1])
        return cts

    sym.defvjp(sym_fwd, sym_bwd, symbolic_zeros=True)
    seen.clear()
    assert float(jax.grad(lambda x: sym(x, 5)[0])(1.0)) == 1.0
    assert isinstance(seen[0], SymbolicZero) and seen[0].dtype == jax.dtypes.float0


def test_zero_from_primal_gives_jaxs_tangent_types():
    """``zero_from_primal``: zeros of a float value's type, float0 zeros of an integer's (a
    SymbolicZero of that type with symbolic_zeros), as JAX's."""
    from shardc.custom_derivatives import zero_from_primal
    for value, dtype, shape in [(jnp.arange(3), jax.dtypes.float0, (3,)),
                                (2, jax.dtypes.float0, ()),
                                (jnp.ones(2), np.float32, (2,))]:
        zero = zero_from_primal(value)
        symbolic = zero_from_primal(value, symbolic_zeros=True)
        assert (zero.dtype, np.shape(zero)) == (dtype, shape)
        assert isinstance(symbolic, SymbolicZero)
        assert (symbolic.dtype, symbolic.shape) == (dtype, shape)
    np.testing.assert_array_equal(zero_from_primal(jnp.ones(2)), [0.0, 0.0])
