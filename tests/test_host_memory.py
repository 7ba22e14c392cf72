"""An array never changes: no numpy array its caller can write into is shared with one.

A host value entering shardc (``device_put``, ``asarray``, a jitted or eager call's numpy
argument) is copied where the result would share its memory, as JAX copies it onto a device:
writing into the caller's numpy array afterwards leaves every array made from it as it was.
Reading an array back, ``np.asarray`` gives a read-only view and ``np.array`` a copy of the
caller's own, as JAX gives them."""
from __future__ import annotations

import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from shardc import lax
from shardc.sharding import NamedSharding, PartitionSpec as P

MESH = jax.make_mesh((8,), ("i",))
ROWS = NamedSharding(MESH, P("i"))

MAKERS = {
    "device_put laid out": lambda h: jax.device_put(h, ROWS),
    "device_put": lambda h: jax.device_put(h),
    "device_put of a tree": lambda h: jax.device_put({"a": h})["a"],
    "asarray": lambda h: jnp.asarray(h),
    "array": lambda h: jnp.array(h),
    "copy": lambda h: jnp.copy(h),
    "jit identity": lambda h: jax.jit(lambda x: x)(h),
    "jit reshape": lambda h: jax.jit(lambda x: x.reshape(4, 4))(h),
    "jit identity, cached call": lambda h: _cached_identity(h),
    "eager reshape": lambda h: jnp.reshape(h, (4, 4)),
    "eager stop_gradient": lambda h: lax.stop_gradient(h),
    "eager shard_map": lambda h: jax.shard_map(lambda x: x, mesh=MESH, in_specs=P("i"),
                                               out_specs=P("i"))(h),
    "jit shard_map": lambda h: jax.jit(jax.shard_map(lambda x: x, mesh=MESH, in_specs=P("i"),
                                                     out_specs=P("i")))(h),
    "make_array_from_callback": lambda h: jax.make_array_from_callback(
        (16,), ROWS, lambda index: h[index]),
    # a numpy array the function closes over and returns
    "eager shard_map, closed over": lambda h: jax.shard_map(
        lambda x: h, mesh=MESH, in_specs=P("i"), out_specs=P())(np.zeros(8, np.float32)),
    "jit shard_map, closed over": lambda h: jax.jit(jax.shard_map(
        lambda x: h, mesh=MESH, in_specs=P("i"), out_specs=P()))(np.zeros(8, np.float32)),
    "jit, closed over": lambda h: jax.jit(lambda: h)(),
}

_IDENTITY = jax.jit(lambda x: x)


def _cached_identity(h):
    _IDENTITY(np.zeros_like(h))         # the same shape seen before: the cached path
    return _IDENTITY(h)


@pytest.mark.parametrize("name", list(MAKERS))
def test_writing_into_the_host_array_later_changes_no_array(name):
    host = np.arange(16.0, dtype=np.float32)
    made = MAKERS[name](host)
    host[:] = -1.0
    np.testing.assert_array_equal(np.asarray(made).reshape(-1), np.arange(16.0))


def test_a_jitted_function_keeps_the_constants_it_closed_over_as_traced():
    # as JAX's: a later call (of the program compiled then) sees them as they were
    host = np.arange(4.0, dtype=np.float32)
    f = jax.jit(lambda x: x + host)
    np.testing.assert_array_equal(np.asarray(f(np.zeros(4, np.float32))), np.arange(4.0))
    host[:] = 10.0
    np.testing.assert_array_equal(np.asarray(f(np.zeros(4, np.float32))), np.arange(4.0))


def test_asarray_of_an_array_is_a_read_only_view_and_array_a_copy():
    x = jax.device_put(np.arange(16.0, dtype=np.float32), ROWS)
    view = np.asarray(x)
    assert not view.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        view[0] = 5.0
    mine = np.array(x)
    assert mine.flags.writeable
    mine[0] = 5.0
    np.testing.assert_array_equal(np.asarray(x), np.arange(16.0))
    converted = np.asarray(x, dtype=np.float64)          # a conversion is a copy
    assert converted.dtype == np.float64 and converted.flags.writeable
    with pytest.raises(ValueError, match="float32 to float64 needs a copy"):
        np.asarray(x, dtype=np.float64, copy=False)


def test_a_shards_data_is_read_only():
    x = jax.device_put(np.arange(16.0, dtype=np.float32), ROWS)
    for shard in x.addressable_shards:
        with pytest.raises(ValueError, match="read-only"):
            np.asarray(shard.data)[0] = 42.0
    np.testing.assert_array_equal(np.asarray(x), np.arange(16.0))


NUMPY_FUNCTIONS = {
    "squeeze": jnp.squeeze, "atleast_1d": jnp.atleast_1d, "atleast_2d": jnp.atleast_2d,
    "clip without bounds": jnp.clip, "real": jnp.real, "conj": jnp.conj,
    "positive": jnp.positive, "broadcast_arrays": lambda h: jnp.broadcast_arrays(h)[0],
    "unstack": lambda h: jnp.unstack(h)[0], "block": jnp.block,
    "broadcast_to its shape": lambda h: jnp.broadcast_to(h, h.shape),
    "reshape to its shape": lambda h: jnp.reshape(h, h.shape),
    "transpose by the identity": lambda h: jnp.transpose(h, (0, 1)),
    "expand_dims of no axes": lambda h: jnp.expand_dims(h, ()),
    "moveaxis to itself": lambda h: jnp.moveaxis(h, 0, 0),
    "swapaxes of one axis": lambda h: jnp.swapaxes(h, 1, 1),
    "ravel of a row": lambda h: jnp.ravel(h[0]),
}


@pytest.mark.parametrize("name", list(NUMPY_FUNCTIONS))
def test_a_function_that_changes_nothing_returns_an_array_not_the_callers(name):
    host = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    made = NUMPY_FUNCTIONS[name](host)
    assert isinstance(made, jax.Array), type(made)
    before = np.array(made)
    host[:] = -1.0
    np.testing.assert_array_equal(np.asarray(made), before)

