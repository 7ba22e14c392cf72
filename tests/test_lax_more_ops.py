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
