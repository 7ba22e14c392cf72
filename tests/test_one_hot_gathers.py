"""``jnp.take_along_axis(..., mode='one_hot')`` gathers as JAX's does: each element is the
dot product of its index's one-hot row with ``arr`` along the axis (negative indices wrapped
once, an out-of-range one a row of zeros), so an infinity or NaN anywhere along the axis
makes the element NaN. ``lax.gather`` takes no ``ONE_HOT`` mode (JAX's rejects it too)."""
from __future__ import annotations

import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from shardc import lax


def one_hot_reference(arr, indices, axis):
    """Element by element: ``sum_z [index == z] * arr[..., z, ...]``, in float64 where
    ``arr`` is float (its products with 0 and 1 are exact)."""
    arr, indices = np.asarray(arr), np.asarray(indices)
    n = arr.shape[axis]
    wrapped = np.where(indices < 0, indices + n, indices)
    out_shape = np.broadcast_shapes(indices.shape, arr.shape[:axis] + (1,) + arr.shape[axis + 1:])
    out = np.zeros(out_shape, np.float64 if arr.dtype.kind == "f" else np.int64)
    moved = np.moveaxis(arr, axis, -1)
    for position in np.ndindex(*out_shape):
        k = np.broadcast_to(wrapped, out_shape)[position]
        row = moved[tuple(c if s > 1 else 0 for c, s in zip(position[:axis] + position[axis + 1:],
                                                             moved.shape[:-1]))]
        out[position] = sum(float(v) * (z == k) if arr.dtype.kind == "f" else int(v) * (z == k)
                            for z, v in enumerate(row))
    return out.astype(arr.dtype)


CASES = [((3, 4, 5), (3, 2, 5), 1, np.float32), ((3, 4, 5), (1, 4, 2), 2, np.int32),
         ((3, 4, 5), (6, 1, 5), 0, np.float32), ((4,), (7,), 0, np.float32),
         ((2, 3, 4), (2, 3, 1), -1, np.float32)]


@pytest.mark.parametrize("shape, index_shape, axis, dtype", CASES)
def test_each_element_is_the_one_hot_dot_product(shape, index_shape, axis, dtype):
    rng = np.random.default_rng(len(shape) + axis)
    arr = (rng.standard_normal(shape) * 5).astype(dtype)
    indices = rng.integers(-8, 8, index_shape).astype(np.int32)    # some out of range
    got = jnp.take_along_axis(jnp.asarray(arr), jnp.asarray(indices), axis=axis, mode="one_hot")
    want = one_hot_reference(arr, indices, axis % len(shape))
    assert got.dtype == np.dtype(dtype) and got.shape == want.shape
    np.testing.assert_array_equal(np.asarray(got), want)


def test_an_infinity_along_the_axis_makes_the_row_nan_and_booleans_stay_boolean():
    a = jnp.arange(12.0).reshape(3, 4).at[1, 2].set(jnp.inf)
    i = jnp.array([[0, 3], [5, -1], [2, -7]])
    got = jnp.take_along_axis(a, i, axis=1, mode="one_hot")
    np.testing.assert_array_equal(np.asarray(got), [[0, 3], [np.nan, np.nan], [10, 0]])
    flags = jnp.asarray(np.array([[True, False, True], [False, False, True]]))
    picked = jnp.take_along_axis(flags, jnp.array([[0, 1], [2, 9]]), axis=1, mode="one_hot")
    assert picked.dtype == np.bool_
    np.testing.assert_array_equal(np.asarray(picked), [[True, False], [True, False]])


def test_its_gradient_is_the_one_hot_rows():
    g = jax.grad(lambda a: jnp.take_along_axis(a, jnp.array([[1, 9], [0, -1]]), axis=1,
                                               mode="one_hot").sum())(jnp.arange(6.).reshape(2, 3))
    np.testing.assert_array_equal(np.asarray(g), [[0, 1, 0], [1, 0, 1]])


def test_modes_and_ranks_are_checked():
    with pytest.raises(ValueError, match='Unknown gather mode "bogus"'):
        jnp.take_along_axis(jnp.ones((3, 4)), jnp.ones((3, 4), jnp.int32), axis=1, mode="bogus")
    with pytest.raises(ValueError, match="same number of dimensions; 1 vs. 2"):
        jnp.take_along_axis(jnp.ones((3, 4)), jnp.ones((3,), jnp.int32), axis=1, mode="one_hot")
    dn = lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,),
                                    start_index_map=(0,))
    with pytest.raises(NotImplementedError, match="GatherScatterMode.ONE_HOT"):
        lax.gather(jnp.ones((3, 4)), jnp.array([[0]]), dn, (1, 4),
                   mode=lax.GatherScatterMode.ONE_HOT)
