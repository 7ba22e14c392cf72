"""Shared checks of the lax/nn/random/scipy breadth tests: a function runs eagerly, under
``jit`` and per block inside a shard_map body, and each result is held against a reference."""
from __future__ import annotations

import numpy as np

import shardc
from shardc.sharding import PartitionSpec as P


def mesh2():
    return shardc.make_mesh((2,), ("x",))


def assert_close(got, want, rtol=1e-6, atol=1e-6, dtype=None):
    got = np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    if dtype is not None:
        assert got.dtype == np.dtype(dtype), (got.dtype, dtype)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol,
                               atol=atol, equal_nan=True)


def everywhere(fn, x, want, rtol=1e-6, atol=1e-6, dtype=None, shard=True):
    """``fn(x)`` eagerly, under jit, and (``shard``) per block of ``x``'s leading axis on a
    2-device mesh: every result equals ``want`` (per-block reference: ``fn`` is per-row)."""
    assert_close(fn(x), want, rtol, atol, dtype)
    assert_close(shardc.jit(fn)(x), want, rtol, atol, dtype)
    if shard:
        body = shardc.shard_map(fn, mesh=mesh2(), in_specs=P("x"), out_specs=P("x"))
        assert_close(body(x), want, rtol, atol, dtype)


def finite_difference_grad(f, x, eps=1e-3):
    """Central differences of a scalar ``f`` at float64 ``x``."""
    x = np.asarray(x, np.float64)
    grad = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[index] += eps
        down[index] -= eps
        rise = float(f(up.astype(np.float32))) - float(f(down.astype(np.float32)))
        grad[index] = rise / (2 * eps)
    return grad


def check_grad(f, x, rtol=2e-2, atol=2e-3, eps=1e-3):
    """``grad(f)`` at ``x`` against central finite differences."""
    got = shardc.grad(f)(np.asarray(x, np.float32))
    want = finite_difference_grad(f, x, eps)
    assert_close(got, want, rtol, atol)
