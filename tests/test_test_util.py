"""jax.test_util's check_grads, check_jvp and check_vjp: finite differences as JAX's."""
import functools

import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from shardc.test_util import check_grads, check_jvp, check_vjp


def test_correct_derivatives_pass_to_several_orders():
    def f(x, y):
        return jnp.sum(jnp.tanh(x) * y ** 2)
    x, y = jnp.arange(3.) / 4, jnp.ones(3) * 0.5
    check_grads(f, (x, y), order=2)
    check_grads(jnp.sin, (1.0,), order=3, modes=["fwd"])
    check_grads(lambda z: jnp.abs(z) ** 2, (np.complex64(1 + 2j),), order=1, modes=["fwd"])
    with jax.enable_x64(True):
        check_grads(lambda a: jnp.exp(a).sum(), (np.linspace(0, 1, 4),), order=2)


def test_a_wrong_rule_fails_naming_the_check():
    @jax.custom_jvp
    def g(x):
        return jnp.sin(x)
    g.defjvp(lambda p, t: (jnp.sin(p[0]), 2 * t[0]))
    with pytest.raises(AssertionError, match="JVP tangent"):
        check_grads(g, (1.0,), order=1)
    with pytest.raises(AssertionError, match="VJP cotangent projection"):
        check_grads(g, (1.0,), order=1, modes=["rev"])
    # the same checks one at a time
    with pytest.raises(AssertionError, match="tangent"):
        check_jvp(g, functools.partial(jax.jvp, g), (1.0,))
    check_vjp(jnp.cos, functools.partial(jax.vjp, jnp.cos), (0.3,))
    # tolerances as wide as the error let it pass
    check_grads(g, (1.0,), order=1, atol=2.0, rtol=2.0)
