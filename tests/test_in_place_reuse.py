"""A compiled stacked body writes an elementwise result into an operand it made and reads for
the last time (``runtime.vectorized``: ``_reusable``, ``_dying_operand``), never into one that
another value may still view: a transpose, a reshape, a slice or a collective's result may be a
view of its operand, so an operand read by anything but a ufunc is no longer the body's to
overwrite. (Compiled runs once wrote ``y * 2`` into ``y`` while ``y.T`` still viewed it.)"""
from __future__ import annotations

import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from compiler.backend import get_backend, set_backend
from shardc import lax
from shardc.sharding import PartitionSpec as P

MESH = jax.make_mesh((8,), ("i",))
X = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)

VIEWS = {
    "transpose": (lambda y: y.T, lambda y: y.T, P(None, "i")),
    "reshape": (lambda y: y.reshape(-1), lambda y: y.reshape(8, -1).reshape(-1), P("i")),
    "slice": (lambda y: y[:, 1:5], lambda y: y[:, 1:5], P("i")),
    "expand_dims": (lambda y: y[None], lambda y: y.reshape(8, 1, 8, 64).reshape(8, 8, 64)
                    .reshape(1, 64, 64), P(None, "i")),
    "ppermute to itself": (lambda y: lax.ppermute(y, "i", [(k, k) for k in range(8)]),
                           lambda y: y, P("i")),
}


@pytest.mark.parametrize("name", list(VIEWS))
@pytest.mark.parametrize("backend", ["fast", "reference"])
def test_a_view_of_a_value_survives_its_last_elementwise_use(name, backend):
    view, expected, out_spec = VIEWS[name]

    def body(b):
        y = jnp.sin(b)
        viewed = view(y)
        return viewed, y * 2          # the last use of y: elementwise

    saved = get_backend()
    jax.set_backend_name(backend)
    try:
        f = jax.jit(jax.shard_map(body, mesh=MESH, in_specs=P("i"),
                                  out_specs=(out_spec, P("i"))))
        for _ in range(3):            # the first run interprets, later ones are compiled
            viewed, doubled = f(X)
            np.testing.assert_array_equal(np.asarray(viewed), expected(np.sin(X)))
            np.testing.assert_array_equal(np.asarray(doubled), np.sin(X) * 2)
    finally:
        set_backend(saved)


def test_a_contraction_makes_a_new_array_so_its_operand_may_still_be_reused():
    """A dot's result never views its operands: the elementwise use after it may still write
    into the operand (the memory the reuse saves), and both results stay right."""
    w = np.random.default_rng(1).standard_normal((64, 16)).astype(np.float32)

    def body(b, w):
        y = jnp.sin(b)
        return y @ w, y * 2

    f = jax.jit(jax.shard_map(body, mesh=MESH, in_specs=(P("i"), P()),
                              out_specs=(P("i"), P("i"))))
    for _ in range(3):
        product, doubled = f(X, w)
        np.testing.assert_allclose(np.asarray(product), np.sin(X) @ w, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(np.asarray(doubled), np.sin(X) * 2)
