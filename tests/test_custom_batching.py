"""custom_vmap and sequential_vmap (JAX's jax.custom_batching): under vmap the user's rule runs
in the function's place, elsewhere the function does; the rule is differentiated with it.
Rules here compute something other than the function (cos for sin) so that which one ran shows
in the values."""
from __future__ import annotations

import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from shardc.custom_batching import custom_vmap, sequential_vmap

XS = np.arange(3.0, dtype=np.float32)


def _sin_with_cos_rule(seen):
    @custom_vmap
    def f(x):
        return jnp.sin(x)

    @f.def_vmap
    def rule(axis_size, in_batched, xs):
        seen.append((axis_size, list(in_batched)))
        return jnp.cos(xs), in_batched[0]

    return f


def test_the_rule_runs_under_vmap_and_the_function_elsewhere():
    seen = []
    f = _sin_with_cos_rule(seen)
    np.testing.assert_allclose(np.asarray(f(np.float32(0.5))), np.sin(0.5), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(jax.vmap(f)(XS)), np.cos(XS), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(jax.jit(jax.vmap(f))(XS)), np.cos(XS), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(jax.vmap(jax.jit(f))(XS)), np.cos(XS), rtol=1e-6)
    assert seen[0] == (3, [True])


def test_mixed_batching_and_pytrees():
    @custom_vmap
    def f(pair, scale):
        return {"sum": pair[0] + pair[1] * scale}

    @f.def_vmap
    def rule(axis_size, in_batched, pair, scale):
        (a_batched, b_batched), scale_batched = in_batched
        assert (a_batched, b_batched, scale_batched) == (True, False, False)
        return {"sum": 2 * pair[0] + pair[1] * scale}, {"sum": True}

    got = jax.vmap(f, in_axes=((0, None), None))((XS, np.float32(10.0)), np.float32(2.0))
    np.testing.assert_allclose(np.asarray(got["sum"]), 2 * XS + 20.0)


def test_jvp_and_its_batching_run_the_rule_differentiated():
    seen = []
    f = _sin_with_cos_rule(seen)
    x, t = np.float32(0.5), np.float32(1.0)
    y, ty = jax.jvp(f, [x], [t])
    np.testing.assert_allclose([float(y), float(ty)], [np.sin(0.5), np.cos(0.5)], rtol=1e-6)
    ones = np.ones(3, np.float32)
    for ys, tys in (jax.vmap(lambda x, t: jax.jvp(f, [x], [t]))(XS, ones),
                    jax.jvp(jax.vmap(f), [XS], [ones])):
        np.testing.assert_allclose(np.asarray(ys), np.cos(XS), rtol=1e-6)
        np.testing.assert_allclose(np.asarray(tys), -np.sin(XS), rtol=1e-6, atol=1e-7)
    # a tangent batched where its primal is not: the rule sees it unbatched, a vmap batches
    # around it (JAX's), and the primal output stays unbatched
    seen.clear()
    y, tys = jax.vmap(lambda x, t: jax.jvp(f, [x], [t]), in_axes=(None, 0),
                      out_axes=(None, 0))(x, XS)
    assert seen[0][1] == [False]
    np.testing.assert_allclose(np.asarray(tys), -np.sin(0.5) * XS, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(jax.jacfwd(f)(XS)), np.diag(-np.sin(XS)), atol=1e-7)


def test_sequential_vmap_maps_member_by_member():
    @sequential_vmap
    def f(x, y):
        assert jnp.ndim(x) == 0          # one member at a time
        return x * y.sum()

    got = jax.vmap(f, in_axes=(0, None))(XS, np.ones(4, np.float32))
    np.testing.assert_allclose(np.asarray(got), XS * 4)


def test_errors_name_what_is_wrong():
    @custom_vmap
    def f(x):
        return x

    with pytest.raises(AttributeError, match="No batching rule defined for custom_vmap "
                                             "function f using def_vmap"):
        f(1.0)
    f.def_vmap(lambda axis_size, in_batched, xs: ((xs, xs), (True,)))
    with pytest.raises(ValueError, match="structure of output value and output batching "
                                         "specification returned by custom vmap rule"):
        jax.vmap(f)(XS)
    f.def_vmap(lambda axis_size, in_batched, xs: ((xs, xs), (True, True)))
    with pytest.raises(ValueError, match="does not match that of original custom-vmapped "
                                         "function"):
        jax.vmap(f)(XS)
    # not differentiable in reverse mode (JAX's error)
    g = _sin_with_cos_rule([])
    with pytest.raises(ValueError, match="Linearization failed to produce known values for "
                                         "all output primals"):
        jax.grad(g)(0.5)


def test_a_custom_vmap_around_a_custom_jvp_takes_its_rules():
    @custom_vmap
    @jax.custom_jvp
    def f(x):
        return jnp.sin(x)

    f.defjvp(lambda primals, tangents: (jnp.sin(primals[0]), 3.0 * tangents[0]))
    f.def_vmap(lambda axis_size, in_batched, xs: (jnp.sin(xs), in_batched[0]))
    assert float(jax.jvp(f, [0.5], [1.0])[1]) == 3.0
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        f.nothing
