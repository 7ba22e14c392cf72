"""Regression tests for places where numpy's behaviour and JAX's differ and shardc must follow
JAX: each expected value is JAX's documented behaviour, derived with numpy where that can be
done independently, else hard-coded from a run of JAX 0.10.2 on CPU (said so beside it)."""
from functools import partial

import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from shardc.experimental.shard_map import shard_map
from shardc.sharding import Mesh, PartitionSpec as P

SPECIAL_FLOATS = np.array([np.nan, -np.inf, np.inf, -3.7, -0.5, 0.5, 127.5, 128.0, 255.9,
                           256.0, 300.5, -129.0, 65535.5, 1e10, -1e10, 2147483520.0,
                           4294967296.0], np.float32)
INT_TYPES = ["int8", "uint8", "int16", "uint16", "int32", "uint32"]


def _saturated(x, dtype):
    """JAX's float -> int conversion: truncate toward zero, clip to the range, NaN -> 0."""
    info = np.iinfo(dtype)
    wide = np.trunc(np.nan_to_num(x.astype(np.float64), nan=0.0, posinf=np.inf, neginf=-np.inf))
    return np.array([info.min if v < info.min else info.max if v > info.max else int(v)
                     for v in wide], dtype)


# --- float -> int conversion saturates ---------------------------------------------------------

@pytest.mark.parametrize("dtype", INT_TYPES)
def test_float_to_int_astype_saturates(dtype):
    got = jnp.asarray(SPECIAL_FLOATS).astype(dtype)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(np.asarray(got), _saturated(SPECIAL_FLOATS, dtype))


def test_float_to_int_saturates_jax_values():
    # JAX 0.10.2: jnp.array([nan, -3.7, 300.5, inf, -inf]).astype(uint8 / int8 / int32).
    x = jnp.array([np.nan, -3.7, 300.5, np.inf, -np.inf])
    assert np.asarray(x.astype(jnp.uint8)).tolist() == [0, 0, 255, 255, 0]
    assert np.asarray(x.astype(jnp.int8)).tolist() == [0, -3, 127, 127, -128]
    assert np.asarray(jnp.array([1e10]).astype(jnp.int32)).tolist() == [2147483647]


def test_float_to_int_saturates_under_jit_and_shard_map():
    mesh = Mesh(np.array(jax.devices()[:4]), axis_names=("x",))
    x = np.resize(SPECIAL_FLOATS, 16)

    @partial(shard_map, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    def body(block):
        return block.astype(jnp.uint8), jax.lax.convert_element_type(block, jnp.int16)

    for fn in (jax.jit(body), body):
        u8, i16 = fn(x)
        np.testing.assert_array_equal(np.asarray(u8), _saturated(x, "uint8"))
        np.testing.assert_array_equal(np.asarray(i16), _saturated(x, "int16"))


def test_complex_to_real_drops_imaginary_part():
    z = jnp.asarray(np.array([1 + 2j, 300.7 + 1j, np.nan + 1j], np.complex64))
    np.testing.assert_array_equal(np.asarray(z.astype(jnp.float32)),
                                  np.array([1.0, 300.7, np.nan], np.float32))
    np.testing.assert_array_equal(np.asarray(z.astype(jnp.uint8)), [1, 255, 0])
