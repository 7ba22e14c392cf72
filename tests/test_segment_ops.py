"""``shardc.ops.segment_*`` against a numpy reference that loops over the rows: values, shapes,
dtypes and empty segments; out-of-range ids, ``mode``, ``bucket_size``; gradients, jit, vmap,
sharding; and JAX's errors."""
from __future__ import annotations

import numpy as np
import pytest

import shardc
import shardc.numpy as jnp
from shardc import ops
from shardc.sharding import AxisType, NamedSharding
from shardc.sharding import PartitionSpec as P

from breadth_checks import assert_close, check_grad

REDUCTIONS = {"segment_sum": np.add, "segment_prod": np.multiply,
              "segment_max": np.maximum, "segment_min": np.minimum}


def identity(name, dtype):
    """JAX's value of an empty segment."""
    dtype = np.dtype(dtype)
    if name in ("segment_sum", "segment_prod"):
        return np.array(0 if name == "segment_sum" else 1, dtype)
    low = name == "segment_max"
    if dtype == np.bool_:
        return np.array(not low)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return np.array(info.min if low else info.max, dtype)
    return np.array(-np.inf if low else np.inf, dtype)


def reference(name, data, ids, num_segments, clip=False):
    """Each row folded into its segment, in order; rows of ids out of range dropped (or, with
    ``clip``, clamped into range)."""
    data = np.asarray(data)
    out = np.empty((num_segments,) + data.shape[1:], data.dtype)
    out[...] = identity(name, data.dtype)
    for row, segment in zip(data, np.asarray(ids)):
        if clip:
            segment = min(max(int(segment), 0), num_segments - 1)
        if 0 <= segment < num_segments:
            out[segment] = REDUCTIONS[name](out[segment], row).astype(data.dtype)
    return out


RNG = np.random.default_rng(0)
DATA = {
    "float32": RNG.normal(size=(9, 3)).astype(np.float32),
    "int32": RNG.integers(-20, 20, size=(9,)).astype(np.int32),
    "int8": RNG.integers(-4, 5, size=(9, 2)).astype(np.int8),
    "uint8": RNG.integers(0, 250, size=(9,)).astype(np.uint8),
}
IDS = np.array([0, 3, 3, 1, 0, 3, 5, 1, 0], np.int32)
IDS_OUT = np.array([0, -1, 6, 2, 2, -4, 1, 9, 0], np.int32)


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@pytest.mark.parametrize("dtype", sorted(DATA))
@pytest.mark.parametrize("ids", [IDS, IDS_OUT], ids=["in_range", "out_of_range"])
def test_segment_reductions_equal_a_loop_over_the_rows(name, dtype, ids):
    data, fn = DATA[dtype], getattr(ops, name)
    got = fn(data, ids, num_segments=7)
    assert got.shape == (7,) + data.shape[1:] and got.dtype == data.dtype
    np.testing.assert_array_equal(np.asarray(got), reference(name, data, ids, 7))
    clipped = fn(data, ids, 7, mode="clip")
    np.testing.assert_allclose(np.asarray(clipped), reference(name, data, ids, 7, clip=True),
                               rtol=1e-6)
    enum_mode = fn(data, ids, 7, mode=shardc.lax.GatherScatterMode.CLIP)
    np.testing.assert_array_equal(np.asarray(enum_mode), np.asarray(clipped))


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_num_segments_defaults_to_the_largest_id_plus_one(name):
    data = DATA["float32"]
    got = getattr(ops, name)(data, IDS)
    assert got.shape == (6, 3)
    np.testing.assert_allclose(np.asarray(got), reference(name, data, IDS, 6), rtol=1e-6)


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_bucket_size_reduces_each_bucket_then_the_buckets(name):
    fn = getattr(ops, name)
    for dtype in ("float32", "int8"):
        data = DATA[dtype]
        for bucket_size in (1, 2, 4, 20):
            got = fn(data, IDS_OUT, 7, bucket_size=bucket_size)
            assert got.dtype == data.dtype
            np.testing.assert_allclose(np.asarray(got), reference(name, data, IDS_OUT, 7),
                                       rtol=1e-5)


def test_empty_segments_hold_the_scatter_identities():
    ids = np.array([1, 1], np.int32)
    for dtype in (np.float32, np.int32, np.int8, np.uint8, np.bool_):
        data = np.ones((2,), dtype)
        for name in ("segment_max", "segment_min"):
            got = np.asarray(getattr(ops, name)(data, ids, 3))
            assert got.dtype == dtype
            np.testing.assert_array_equal(got[[0, 2]], [identity(name, dtype)] * 2)
    np.testing.assert_array_equal(np.asarray(ops.segment_prod(np.ones(2, np.int32), ids, 3)),
                                  [1, 1, 1])
    bf16 = ops.segment_min(jnp.ones(2, jnp.bfloat16), ids, 3)
    assert bf16.dtype == jnp.bfloat16 and np.isposinf(np.asarray(bf16, np.float32)[0])


def test_narrow_ids_send_negative_ids_past_many_segments():
    """int8 ids with more segments than int8 holds: a negative id still drops its row."""
    ids = np.array([-1, 100, -128, 5], np.int8)
    got = ops.segment_sum(np.array([1., 2., 3., 4.], np.float32), ids, 300)
    want = np.zeros(300, np.float32)
    want[100], want[5] = 2.0, 4.0
    np.testing.assert_array_equal(np.asarray(got), want)


def test_zero_segments_and_scalar_rows():
    assert ops.segment_sum(DATA["float32"], IDS, 0).shape == (0, 3)
    np.testing.assert_array_equal(np.asarray(ops.segment_sum(np.float32(3), np.int32(0), 2)),
                                  [3.0, 0.0])


def test_segments_under_jit_need_a_static_count():
    data = DATA["float32"]
    got = shardc.jit(lambda d, i: ops.segment_sum(d, i, num_segments=7))(data, IDS_OUT)
    assert_close(got, reference("segment_sum", data, IDS_OUT, 7), 1e-6, 1e-6)
    static = shardc.jit(ops.segment_max, static_argnums=2)(data, IDS, 7)
    np.testing.assert_array_equal(np.asarray(static), reference("segment_max", data, IDS, 7))
    for name in sorted(REDUCTIONS):
        with pytest.raises(shardc.ConcretizationTypeError,
                           match=r"segment_sum\(\) `num_segments` argument"):
            shardc.jit(lambda d, i, fn=getattr(ops, name): fn(d, i))(data, IDS)


def test_segment_errors_are_jaxs():
    data = DATA["float32"]
    with pytest.raises(ValueError, match="num_segments must be non-negative."):
        ops.segment_sum(data, IDS, -1)
    with pytest.raises(TypeError, match="'float' object cannot be interpreted as an integer"):
        ops.segment_sum(data, IDS, 2.5)
    with pytest.raises(ValueError, match='Unknown gather mode "bogus"'):
        ops.segment_min(data, IDS, 3, mode="bogus")
    with pytest.raises(ValueError, match="zero-size array to reduction"):
        ops.segment_sum(data[:0], IDS[:0])
    with pytest.raises(NotImplementedError,
                       match="scatter_mul gradients .*unique_indices=True"):
        shardc.grad(lambda d: ops.segment_prod(d, IDS, 7).sum())(data)


def test_gradients_match_finite_differences_and_hand_derivations():
    data = DATA["float32"]
    weights = np.arange(1.0, 8.0, dtype=np.float32)[:, None]
    # a sum's cotangent is gathered back to each row (0 for dropped rows)
    grad = shardc.grad(lambda d: (ops.segment_sum(d, IDS_OUT, 7) * weights).sum())(data)
    in_range = (IDS_OUT >= 0) & (IDS_OUT < 7)
    want = np.where(in_range[:, None], weights[np.clip(IDS_OUT, 0, 6)], 0.0)
    assert_close(grad, np.broadcast_to(want, data.shape))
    check_grad(lambda d: (ops.segment_sum(d, IDS, 7, bucket_size=2) ** 2).sum(), data)
    for fn in (ops.segment_max, ops.segment_min):
        # empty segments hold infinities: squared where finite only
        finite_squares = lambda v: jnp.where(jnp.isfinite(v), v, 0.0) ** 2
        check_grad(lambda d, fn=fn: finite_squares(fn(d, IDS, 7)).sum(), data)
    # tied maxima share the cotangent evenly, as JAX's scatter-max does
    ties = shardc.grad(lambda d: ops.segment_max(d, np.array([0, 0, 1]), 2).sum())(
        np.array([1.0, 1.0, 2.0], np.float32))
    assert_close(ties, [0.5, 0.5, 1.0])
    # unique ids: a product with one row per segment is that row
    ids = np.array([3, 0, 1, 2, 5, 6, 4, 8, 7], np.int32)
    check_grad(lambda d: (ops.segment_prod(d, ids, 9, unique_indices=True) ** 3).sum(), data)


def test_vjp_against_jvp():
    data = DATA["float32"]
    tangent = RNG.normal(size=data.shape).astype(np.float32)
    cotangent = RNG.normal(size=(7, 3)).astype(np.float32)
    for name in ("segment_sum", "segment_max", "segment_min"):
        fn = lambda d, fn=getattr(ops, name): fn(d, IDS_OUT, 7)
        out, jvp_out = shardc.jvp(fn, (data,), (tangent,))
        _, pullback = shardc.vjp(fn, data)
        (vjp_out,) = pullback(cotangent)
        finite = np.isfinite(np.asarray(out))
        lhs = np.sum(np.where(finite, np.asarray(jvp_out) * cotangent, 0.0))
        rhs = np.sum(np.asarray(vjp_out) * tangent)
        assert np.isclose(lhs, rhs, rtol=1e-4, atol=1e-4), name


def test_vmap_over_data_and_over_ids():
    stacked = np.stack([DATA["float32"], 2 * DATA["float32"] - 1])
    both_ids = np.stack([IDS, IDS_OUT])
    for name in sorted(REDUCTIONS):
        fn = getattr(ops, name)
        over_data = shardc.vmap(lambda d, fn=fn: fn(d, IDS_OUT, 7))(stacked)
        over_ids = shardc.vmap(lambda i, fn=fn: fn(stacked[0], i, 7))(both_ids)
        for k in range(2):
            assert_close(over_data[k], reference(name, stacked[k], IDS_OUT, 7), 1e-5, 1e-5)
            assert_close(over_ids[k], reference(name, stacked[0], both_ids[k], 7), 1e-5, 1e-5)
        columns = shardc.vmap(lambda d, fn=fn: fn(d, IDS, 7), in_axes=1, out_axes=1)(stacked[0])
        assert_close(columns, reference(name, stacked[0], IDS, 7), 1e-6, 1e-6)


def test_out_sharding_lays_the_result_out():
    mesh = shardc.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
    data = RNG.normal(size=(10, 4)).astype(np.float32)
    ids = np.array([0, 1, 2, 3, 4, 5, 6, 7, 0, 1], np.int32)
    with shardc.set_mesh(mesh):
        got = ops.segment_sum(data, ids, 8, out_sharding=P("x", "y"))
        assert got.sharding.spec == P("x", "y")
        named = ops.segment_max(data, ids, 8, out_sharding=NamedSharding(mesh, P("x")))
        assert named.sharding.spec == P("x", None)
        jitted = shardc.jit(lambda d: ops.segment_min(d, ids, 8, out_sharding=P(None, "y")))(data)
        assert jitted.sharding.spec == P(None, "y")
        with pytest.raises(TypeError, match="`out_sharding` argument of segment_sum only "
                                            "supports instances of `NamedSharding` or "
                                            "`PartitionSpec`"):
            ops.segment_sum(data, ids, 8, out_sharding="x")
        with pytest.raises(NotImplementedError, match="bucket_size"):
            ops.segment_sum(data, ids, 8, bucket_size=2, out_sharding=P("x"))
    assert_close(got, reference("segment_sum", data, ids, 8), 1e-6, 1e-6)
    assert_close(named, reference("segment_max", data, ids, 8))
    assert_close(jitted, reference("segment_min", data, ids, 8))


def test_jax_ops_is_a_module_of_shardc():
    import importlib
    module = importlib.import_module("shardc.ops")
    assert shardc.ops is module
    assert sorted(module.__all__) == sorted(REDUCTIONS)
    assert all(callable(getattr(module, n)) for n in module.__all__)


def test_adding_or_multiplying_booleans_by_scatter_is_jaxs_type_error():
    """JAX's scatter-add and -mul take numbers: a boolean operand is its add's (mul's)
    TypeError, from .at[], segment_sum, bincount's weights and lax.scatter_add; max works."""
    b = jnp.array([True, False, True])
    ids = jnp.array([0, 1, 1])
    message = "{} does not accept dtype bool at position 0. Accepted dtypes at position 0 are"
    for how, f in [("add", lambda: b.at[0].add(True)), ("mul", lambda: b.at[0].mul(True)),
                   ("add", lambda: ops.segment_sum(b, ids, num_segments=2)),
                   ("add", lambda: jnp.bincount(ids, weights=b, length=3))]:
        with pytest.raises(TypeError, match=message.format(how)):
            f()
    np.testing.assert_array_equal(np.asarray(ops.segment_max(b, ids, num_segments=2)),
                                  [True, True])
