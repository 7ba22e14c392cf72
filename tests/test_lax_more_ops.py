"""jax.lax operations and checks JAX's own lax tests exercise: reduce's and conv's errors,
composite's refusals, variadic reduce_window, ragged_dot_general's dimension numbers, the
locally connected convolution, rng_bit_generator and the accuracy argument of the unary
functions; values against numpy references, errors as JAX words them."""
from __future__ import annotations

from functools import partial

import numpy as np
import pytest

import shardc
import shardc.numpy as jnp
from shardc import lax
from compiler.tracing import UnexpectedTracerError


# --- errors as JAX raises them --------------------------------------------------------------

def test_reduce_refuses_non_scalar_initial_values_of_a_pytree():
    with pytest.raises(ValueError, match=r"^reduce found non-scalar initial value: \[\(5,\)\]$"):
        lax.reduce({"x": np.ones(5)}, {"x": np.ones(5)},
                   lambda x, y: dict(x=x["x"] + y["x"]), [0])
    # a one-leaf pytree's computation takes pytrees, as the operands are
    got = lax.reduce({"x": np.arange(5.0)}, {"x": 0.0}, lambda x, y: dict(x=x["x"] + y["x"]),
                     [0])
    assert float(got["x"]) == 10.0


def test_conv_of_operands_of_different_ranks():
    dn = lax.ConvDimensionNumbers(lhs_spec=(0, 1, 2), rhs_spec=(0, 1, 2), out_spec=(0, 1, 2))
    with pytest.raises(ValueError, match=r"^conv_general_dilated lhs and rhs must have the same "
                                         r"number of dimensions, but got \(1, 1, 1\) and "
                                         r"\(1, 1, 1, 1\).$"):
        lax.conv_general_dilated(np.ones((1, 1, 1)), np.ones((1, 1, 1, 1)), (1,), ((0, 0),),
                                 (1,), (1,), dn)
    with pytest.raises(TypeError, match="^convolution requires lhs and rhs ndim to be equal, "
                                        "got 3 and 4.$"):
        lax.conv_general_dilated(np.ones((1, 1, 1)), np.ones((1, 1, 1, 1)), (1,), "VALID")


def test_composite_refuses_differentiation_and_closed_over_tracers():
    @partial(lax.composite, name="my.square")
    def square(x):
        return x ** 2

    assert float(square(3.0)) == 9.0
    assert float(shardc.jit(square)(3.0)) == 9.0
    np.testing.assert_array_equal(shardc.vmap(square)(jnp.arange(3.0)), [0.0, 1.0, 4.0])
    message = (r"^JVP rule for composite not implemented. You can use `jax.custom_jvp` to add "
               r"support. See https://docs.jax.dev/en/latest/_autosummary/jax.custom_jvp.html$")
    with pytest.raises(ValueError, match=message):
        shardc.jvp(square, (1.0,), (2.0,))
    with pytest.raises(ValueError, match=message):
        shardc.grad(square)(1.0)

    def fun(x, scale):
        return lax.composite(lambda y: jnp.round(y / scale), name="my.consts")(x)

    scale = jnp.array([0.5, 0.4, 0.3], dtype=jnp.float32)
    x = jnp.array([1.0, 2.0, 3.0], dtype=jnp.float32)
    np.testing.assert_array_equal(fun(x, scale), np.round(np.asarray(x) / np.asarray(scale)))
    np.testing.assert_array_equal(shardc.jit(partial(fun, scale=scale))(x),
                                  np.round(np.asarray(x) / np.asarray(scale)))
    with pytest.raises(UnexpectedTracerError, match="^Found a JAX Tracer as a constant in the "
                                                    "decomposition for the composite op "
                                                    "'my.consts'."):
        shardc.jit(fun)(x, scale)
    with pytest.raises(UnexpectedTracerError, match="Note: If you are passing jax arrays as "
                                                    "attributes, use numpy arrays instead.$"):
        shardc.jit(lambda v: lax.composite(lambda y, **_: y, "my.id")(v, t=v * 2))(x)


# --- the accuracy argument of the unary functions ------------------------------------------------

@pytest.mark.parametrize("name, ref", [
    ("exp", np.exp), ("exp2", np.exp2), ("expm1", np.expm1), ("log", np.log),
    ("log1p", np.log1p), ("tanh", np.tanh), ("sin", np.sin), ("cos", np.cos), ("tan", np.tan),
    ("sqrt", np.sqrt), ("rsqrt", lambda v: 1 / np.sqrt(v)), ("cbrt", np.cbrt),
    ("logistic", lambda v: 1 / (1 + np.exp(-v)))])
def test_unary_functions_take_jax_accuracy(name, ref):
    fn = getattr(lax, name)
    x = np.linspace(0.1, 2.0, 7).astype(np.float32)
    want = ref(x.astype(np.float64))
    for accuracy in (None, lax.AccuracyMode.HIGHEST, lax.AccuracyMode.DEFAULT,
                     lax.Tolerance(atol=1e-3), lax.Tolerance(rtol=1e-6, ulps=2)):
        np.testing.assert_allclose(fn(x, accuracy=accuracy), want, rtol=1e-5)
        np.testing.assert_allclose(shardc.jit(partial(fn, accuracy=accuracy))(x), want,
                                   rtol=1e-5)
    # the gradient is the function's own
    g = shardc.grad(lambda v: fn(v, accuracy=lax.AccuracyMode.HIGHEST))(np.float32(0.7))
    assert np.isclose(float(g), float(shardc.grad(fn)(np.float32(0.7))))
    if name == "logistic":      # JAX's CPU lowering of logistic reads no accuracy
        np.testing.assert_allclose(fn(x, accuracy="HIGHEST"), want, rtol=1e-5)
    else:
        with pytest.raises(NotImplementedError, match="^Accuracy HIGHEST not supported$"):
            fn(x, accuracy="HIGHEST")
    with pytest.raises(TypeError):
        fn(x, lax.AccuracyMode.HIGHEST)         # keyword only


def test_tolerance_checks_as_jax():
    with pytest.raises(ValueError, match="^At least one of atol, rtol, or ulps must be set.$"):
        lax.Tolerance()
    with pytest.raises(ValueError, match="^Tolerances must be non-negative.$"):
        lax.Tolerance(atol=-1.0)
    assert [m.name for m in lax.AccuracyMode] == ["HIGHEST", "DEFAULT"]
