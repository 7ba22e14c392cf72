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


def test_astype_of_numpy_values_saturates():
    # jnp.astype converts a numpy array as a JAX array: saturating, unlike numpy's own cast.
    np.testing.assert_array_equal(np.asarray(jnp.astype(np.array([300.5, -1.0]), jnp.uint8)),
                                  [255, 0])
    assert int(jnp.astype(np.float32(300.5), jnp.uint8)) == 255


# --- Python scalars in expressions: int32 first, then the array's dtype ------------------------

@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16"])
@pytest.mark.parametrize("scalar", [300, -1, 70000, -129])
def test_python_int_wraps_into_narrow_int(dtype, scalar):
    x = np.array([1, 2, 100], dtype)
    wrapped = np.int64(scalar).astype(dtype)           # two's complement wrap, well defined
    for got, want in [(jnp.asarray(x) + scalar, x + wrapped),
                      (scalar * jnp.asarray(x), x * wrapped),
                      (jnp.asarray(x) < scalar, x < wrapped),
                      (jnp.maximum(jnp.asarray(x), scalar), np.maximum(x, wrapped)),
                      (jnp.asarray(x).at[0].set(scalar), np.array([wrapped, 2, 100], dtype))]:
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(np.asarray(got), want)


def test_python_int_wraps_jax_values():
    # JAX 0.10.2: int8 [1, 2] + 300 -> [45, 46]; uint8 [1, 2] * -1 -> [255, 254].
    assert np.asarray(jnp.array([1, 2], jnp.int8) + 300).tolist() == [45, 46]
    assert np.asarray(jnp.array([1, 2], jnp.uint8) * -1).tolist() == [255, 254]
    assert np.asarray(jnp.full(2, 300, jnp.int8)).tolist() == [44, 44]


@pytest.mark.parametrize("dtype", ["int8", "uint32", "float32", "bool"])
def test_python_int_outside_int32_is_an_overflow(dtype):
    with pytest.raises(OverflowError, match="Python int 2147483648 is too large to convert to "
                                            "int32"):
        jnp.ones(2, dtype) + 2 ** 31


def test_python_float_saturates_into_int_arrays():
    x = jnp.array([1, 2], jnp.int32)
    assert np.asarray(x.at[0].set(1e10)).tolist() == [2 ** 31 - 1, 2]
    assert np.asarray(x.at[0].set(float("nan"))).tolist() == [0, 2]
    assert np.asarray(jnp.array([1, 2], jnp.int8).at[0].set(-1e10)).tolist() == [-128, 2]
    half = jnp.array([1.0], jnp.float16) * 70000
    assert half.dtype == np.float16 and np.isinf(np.asarray(half)).all()
