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
    # (a float into an int array is JAX's FutureWarning: it cannot be cast safely)
    with pytest.warns(FutureWarning, match="scatter inputs have incompatible types"):
        assert np.asarray(x.at[0].set(1e10)).tolist() == [2 ** 31 - 1, 2]
        assert np.asarray(x.at[0].set(float("nan"))).tolist() == [0, 2]
        assert np.asarray(jnp.array([1, 2], jnp.int8).at[0].set(-1e10)).tolist() == [-128, 2]
    half = jnp.array([1.0], jnp.float16) * 70000
    assert half.dtype == np.float16 and np.isinf(np.asarray(half)).all()


# --- out-of-bounds indices: take fills, x[i] and .at[].get clamp, updates drop -----------------

def _numpy_take_fill(a, idx, fill):
    """numpy's take with JAX's default mode: in-range indices (negative from the end) read,
    the rest read ``fill``."""
    n = a.shape[0]
    inside = (idx >= -n) & (idx < n)
    return np.where(inside, np.take(a, np.where(inside, idx, 0)), np.asarray(fill, a.dtype))


TAKE_INDICES = np.array([0, 3, 12, -1, -11, -10], np.int32)


@pytest.mark.parametrize("dtype, fill", [("float32", np.nan), ("float16", np.nan),
                                         ("int32", -2 ** 31), ("int8", -128), ("uint8", 255),
                                         ("uint32", 2 ** 32 - 1), ("bool", True)])
def test_take_default_mode_fills(dtype, fill):
    a = (np.arange(10) % 3 == 0) if dtype == "bool" else np.arange(10).astype(dtype)
    want = _numpy_take_fill(a, TAKE_INDICES, fill)
    for run in (jnp.take, jax.jit(jnp.take)):
        got = run(a, TAKE_INDICES)
        assert got.dtype == a.dtype
        np.testing.assert_array_equal(np.asarray(got), want)


def test_take_modes_follow_numpy():
    a = np.arange(10.0, dtype=np.float32)
    for mode in ("clip", "wrap"):
        np.testing.assert_array_equal(np.asarray(jnp.take(a, TAKE_INDICES, mode=mode)),
                                      np.take(a, TAKE_INDICES, mode=mode))
    np.testing.assert_array_equal(np.asarray(jnp.take(a, TAKE_INDICES, mode="fill",
                                                      fill_value=-7)),
                                  _numpy_take_fill(a, TAKE_INDICES, -7))
    b = a.reshape(2, 5)
    np.testing.assert_array_equal(np.asarray(jnp.take(b, np.array([1, 7]), axis=1)),
                                  [[1.0, np.nan], [6.0, np.nan]])
    np.testing.assert_array_equal(np.asarray(jnp.take(b, np.array([1, 17]))), [1.0, np.nan])
    assert np.isnan(float(jnp.take(a, 20)))
    # small and unsigned index dtypes: 127 and 200 are out of range, not wrapped
    np.testing.assert_array_equal(np.asarray(jnp.take(a, np.array([5, 127], np.int8))),
                                  [5.0, np.nan])
    np.testing.assert_array_equal(
        np.asarray(jnp.take(a, np.array([5, 2 ** 32 - 1], np.uint32))), [5.0, np.nan])


def test_take_bad_modes():
    a = jnp.arange(4.0)
    with pytest.raises(NotImplementedError, match="The 'raise' mode to jnp.take is not "
                                                  "supported"):
        jnp.take(a, np.array([1]), mode="raise")
    with pytest.raises(ValueError, match="Invalid mode 'bogus' for np.take"):
        jnp.take(a, np.array([1]), mode="bogus")
    with pytest.raises(TypeError, match="indices must be of integer type"):
        jnp.take(a, np.array([1.0]))


def test_take_fill_under_vmap_and_grad():
    # grad: fill reads send no cotangent back (JAX 0.10.2 gives [0, 0, 3] here)
    y = np.array([1.0, 2.0, 3.0], np.float32)
    i = np.array([5, -9, -1], np.int32)
    g = jax.grad(lambda a: jnp.sum(jnp.take(a, i) * np.arange(1.0, 4.0)))(y)
    np.testing.assert_array_equal(np.asarray(g), [0.0, 0.0, 3.0])
    x = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    idx = np.array([[0, 3], [-1, -4]])
    got = jax.vmap(jnp.take)(x, idx)
    want = np.stack([_numpy_take_fill(x[k], idx[k], np.nan) for k in range(2)])
    np.testing.assert_array_equal(np.asarray(got), want)


def test_getitem_and_at_get_clamp_array_indices():
    a = np.arange(10.0, dtype=np.float32)
    clamped = np.clip(np.where(TAKE_INDICES < 0, TAKE_INDICES + 10, TAKE_INDICES), 0, 9)
    for got in (jnp.asarray(a)[TAKE_INDICES], jnp.asarray(a).at[TAKE_INDICES].get(),
                jnp.asarray(a).at[TAKE_INDICES].get(mode="clip"),
                jax.jit(lambda v, i: v[i])(a, TAKE_INDICES)):
        np.testing.assert_array_equal(np.asarray(got), a[clamped])
    assert float(jnp.asarray(a).at[12].get(mode="clip")) == 9.0


def test_at_get_fill_mixed_indices():
    # Values from JAX 0.10.2 (jnp.arange(12.).reshape(3, 4).at[...].get(mode='fill', ...)).
    b = jnp.arange(12.0).reshape(3, 4)
    nan = np.nan
    cases = [
        ((np.array([0, 5, -1]), slice(1, None)), -1.0,
         [[1.0, 2.0, 3.0], [-1.0, -1.0, -1.0], [9.0, 10.0, 11.0]]),
        ((slice(None), np.array([0, 4, -5])), None,
         [[0.0, nan, nan], [4.0, nan, nan], [8.0, nan, nan]]),
        ((np.array([0, 3]), np.array([1, 2])), None, [1.0, nan]),
        ((np.array([[0, 3]]), slice(None, None, 2)), None, [[[0.0, 2.0], [nan, nan]]]),
        ((1, np.array([3, 4])), None, [7.0, nan]),
        ((None, np.array([3, 2]), Ellipsis, None), None,
         [[[[nan], [nan], [nan], [nan]], [[8.0], [9.0], [10.0], [11.0]]]]),
        ((np.array([0, 3]), None, np.array([1, 2])), None, [[1.0], [nan]]),
        ((np.array([True, False, True]),), None,
         [[0.0, 1.0, 2.0, 3.0], [8.0, 9.0, 10.0, 11.0]]),
        ((12,), None, nan),
        ((-11,), None, nan),
    ]
    for index, fill, want in cases:
        got = b.at[index].get(mode="fill", fill_value=fill)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want, np.float32),
                                      err_msg=repr(index))
        assert got.dtype == np.float32
    assert np.isnan(float(jax.jit(lambda i: b.at[i, 1].get(mode="fill"))(5)))
    np.testing.assert_array_equal(
        np.asarray(jax.jit(lambda i: b.at[i].get(mode="fill", fill_value=7))(-4)), [7.0] * 4)
    np.testing.assert_array_equal(
        np.asarray(jnp.arange(4).at[np.array([5])].get(mode="fill", fill_value=2.7)), [2])
    with pytest.raises(ValueError, match='Unknown gather mode "bogus"'):
        b.at[1].get(mode="bogus")


def test_at_get_fill_in_shard_map():
    mesh = Mesh(np.array(jax.devices()[:4]), axis_names=("x",))
    idx = np.array([0, 2, 5, -1, -3, 7, 1, -4], np.int32)

    @partial(shard_map, mesh=mesh, in_specs=(P(), P("x")), out_specs=P("x"))
    def body(table, i):
        return table.at[i].get(mode="fill", fill_value=-1.0)

    table = np.arange(3.0, dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(body(table, idx)),
                                  _numpy_take_fill(table, idx, -1.0))


def test_updates_drop_or_clip_out_of_bounds():
    a = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    idx = np.array([5, -7])
    dropped = jnp.asarray(a).at[idx, 1].set(100.0)
    np.testing.assert_array_equal(np.asarray(dropped), a)
    clipped = np.array(a)
    clipped[[2, 0], 1] = 100.0          # 5 -> 2; -7 -> -4 -> 0
    np.testing.assert_array_equal(np.asarray(jnp.asarray(a).at[idx, 1].set(100.0, mode="clip")),
                                  clipped)
    corner = np.array(a)
    corner[2, 3] += 100.0
    np.testing.assert_array_equal(np.asarray(jnp.asarray(a).at[7, 9].add(100.0, mode="clip")),
                                  corner)
    traced = jax.jit(lambda v, i: v.at[i].add(1.0, mode="clip"))(a[0], np.array([9, -9]))
    np.testing.assert_array_equal(np.asarray(traced), a[0] + [1.0, 0, 0, 1.0])
    with pytest.raises(ValueError, match='Unknown gather mode "raise"'):
        jnp.asarray(a).at[1].set(1.0, mode="raise")


def test_at_divide_and_power():
    a = np.arange(10.0, dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(jnp.asarray(a).at[np.array([1, 1, 2])].divide(2.0)),
                                  a / np.array([1, 4, 2, 1, 1, 1, 1, 1, 1, 1]))
    np.testing.assert_array_equal(np.asarray(jnp.asarray(a).at[np.array([2, 2, 3])].power(2.0)),
                                  a ** np.array([1, 1, 4, 2, 1, 1, 1, 1, 1, 1]))
    # JAX 0.10.2: divide of an int array is float32; power keeps int32
    halves = jnp.arange(5).at[1].divide(2)
    assert halves.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(halves), [0.0, 0.5, 2.0, 3.0, 4.0])
    squared = jnp.arange(5).at[3].power(2)
    assert squared.dtype == np.int32 and np.asarray(squared).tolist() == [0, 1, 2, 9, 4]


# --- dtypes of reductions and cumulative operations -------------------------------------------

NARROW = {"int8": np.array([100, 100, -3, 7], np.int8),
          "uint8": np.array([200, 100, 3, 7], np.uint8),
          "int16": np.array([30000, 30000, 1, 2], np.int16),
          "uint16": np.array([60000, 10000, 1, 2], np.uint16)}


@pytest.mark.parametrize("name", NARROW)
def test_cumulative_ops_keep_narrow_int_dtypes(name):
    # JAX: cumsum/cumprod (and nancumsum/nancumprod/cumulative_prod) keep the dtype and wrap;
    # sum, prod and cumulative_sum accumulate in 32 bits.
    x = NARROW[name]
    for fn, ref in [(jnp.cumsum, np.cumsum), (jnp.cumprod, np.cumprod),
                    (jnp.nancumsum, np.cumsum), (jnp.nancumprod, np.cumprod),
                    (jnp.cumulative_prod, np.cumprod)]:
        got = fn(x)
        assert got.dtype == x.dtype, fn.__name__
        np.testing.assert_array_equal(np.asarray(got), ref(x, dtype=x.dtype), fn.__name__)
    wide = np.dtype("uint32" if name.startswith("u") else "int32")
    for fn, ref in [(jnp.sum, np.sum), (jnp.prod, np.prod), (jnp.cumulative_sum, np.cumsum)]:
        got = fn(x)
        assert got.dtype == wide, fn.__name__
        np.testing.assert_array_equal(np.asarray(got), ref(x.astype(wide), dtype=wide))


def test_cumulative_ops_jax_values():
    # JAX 0.10.2: jnp.cumsum(int8 [100, 100, -3, 7]) and cumprod; bool counts in int32.
    x = jnp.array([100, 100, -3, 7], jnp.int8)
    assert np.asarray(jnp.cumsum(x)).tolist() == [100, -56, -59, -52]
    assert np.asarray(jnp.cumprod(x)).tolist() == [100, 16, -48, -80]
    b = jnp.array([True, False, True, True])
    for fn, want in [(jnp.cumsum, [1, 1, 2, 3]), (jnp.cumprod, [1, 0, 0, 0])]:
        got = fn(b)
        assert got.dtype == np.int32 and np.asarray(got).tolist() == want
    assert jax.jit(jnp.cumsum)(x).dtype == np.int8


def test_float16_sum_and_mean_accumulate_in_float32():
    # JAX sums, multiplies, averages and takes variances of float16 in float32, then rounds
    # once: 60000 + 10000 - 20000 does not overflow float16 on the way.
    x = np.array([60000, 10000, -20000, 0.1], np.float16)
    wide = x.astype(np.float32)
    for fn, ref in [(jnp.sum, np.sum), (jnp.mean, np.mean), (jnp.nansum, np.sum),
                    (jnp.average, np.mean), (jnp.var, np.var)]:
        got = fn(x)
        assert got.dtype == np.float16, fn.__name__
        with np.errstate(over="ignore"):
            want = ref(wide).astype(np.float16)
        np.testing.assert_array_equal(np.asarray(got), want, fn.__name__)
    assert jnp.prod(x).dtype == np.float16
    # std is the square root of the float16 variance, which overflows (JAX 0.10.2: inf too)
    assert np.isinf(np.asarray(jnp.std(x)))
    np.testing.assert_array_equal(np.asarray(jnp.sum(x.reshape(2, 2), axis=0)),
                                  wide.reshape(2, 2).sum(0).astype(np.float16))


# --- jnp scalar types: dtypes and constructors of 0-d Arrays ------------------------------------

def test_scalar_constructors_make_strongly_typed_arrays():
    # JAX 0.10.2: jnp.float32(3) / jnp.int32(2) is a float32 Array 1.5 (numpy scalars would
    # divide in float64).
    q = jnp.float32(3) / jnp.int32(2)
    assert isinstance(q, jax.Array) and q.dtype == np.float32 and float(q) == 1.5
    assert (3 / jnp.int32(2)).dtype == np.float32
    assert (jnp.int8(3) * 100).dtype == np.int8 and int(jnp.int8(3) * 100) == 44
    assert jnp.float64(1).dtype == np.float32          # x64 off
    assert jnp.bool_(2).dtype == np.bool_ and bool(jnp.bool_(2))
    np.testing.assert_array_equal(np.asarray(jnp.float32([1, 2])), np.array([1, 2], np.float32))
    traced = jax.jit(lambda v: jnp.int32(v))(np.array([1.5, -2.5], np.float32))
    assert traced.dtype == np.int32 and np.asarray(traced).tolist() == [1, -2]


def test_scalar_types_are_dtypes():
    assert np.dtype(jnp.float32) == np.float32 and jnp.float32 == np.float32
    assert jnp.zeros(2).dtype == jnp.float32 and jnp.zeros(2, jnp.int8).dtype == np.int8
    assert np.zeros(2, jnp.uint8).dtype == np.uint8
    assert {np.float32: "f"}[jnp.float32] == "f"
    assert np.issubdtype(jnp.float16, np.floating) and not np.issubdtype(jnp.int8, np.floating)
    assert isinstance(np.float32(1), jnp.float32) and not isinstance(jnp.float32(1), jnp.float32)
    assert jnp.asarray([1, 2]).astype(jnp.float16).dtype == np.float16


# --- operators: every dunder, JAX's integer division, powers and boolean promotion -------------

import operator  # noqa: E402

BINARY_DUNDERS = [
    (operator.add, jnp.add), (operator.sub, jnp.subtract), (operator.mul, jnp.multiply),
    (operator.truediv, jnp.true_divide), (operator.floordiv, jnp.floor_divide),
    (operator.mod, jnp.remainder), (operator.pow, jnp.power), (operator.lshift, jnp.left_shift),
    (operator.rshift, jnp.right_shift), (operator.and_, jnp.bitwise_and),
    (operator.or_, jnp.bitwise_or), (operator.xor, jnp.bitwise_xor),
    (lambda a, b: divmod(a, b)[0], jnp.floor_divide), (lambda a, b: divmod(a, b)[1], jnp.remainder),
]


@pytest.mark.parametrize("op, fn", BINARY_DUNDERS)
def test_binary_dunders_in_both_orders(op, fn):
    x = jnp.array([-7, -3, 1, 3, 7], jnp.int32)
    for a, b in [(x, 2), (2, x), (x, np.int64(3)), (np.int64(3), x), (x, x), (x, np.uint8(2))]:
        got, want = op(a, b), fn(a, b)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    traced = jax.jit(lambda v: op(v, 2))(x)
    np.testing.assert_array_equal(np.asarray(traced), np.asarray(fn(x, 2)))


def test_shifts_match_numpy_in_range():
    x = np.array([-128, -3, 0, 3, 127], np.int8)
    u = np.array([0, 3, 7, 200, 255], np.uint8)
    np.testing.assert_array_equal(np.asarray(jnp.asarray(x) >> 1), x >> 1)
    np.testing.assert_array_equal(np.asarray(jnp.asarray(u) >> 1), u >> 1)
    np.testing.assert_array_equal(np.asarray(jnp.asarray(u) << 1), u << 1)
    np.testing.assert_array_equal(np.asarray(1 << jnp.asarray(np.array([0, 3, 5], np.int32))),
                                  [1, 8, 32])


def test_integer_division_by_zero_follows_jax():
    # JAX 0.10.2 (XLA divides x / 0 to -1, all bits set; jnp's floor rule then subtracts one
    # where x != 0; x % 0 is 0): int32 [-7, -3, 0, 3, 7] // 0 and % 0, uint8 [0, 3, 255] // 0.
    x = jnp.array([-7, -3, 0, 3, 7], jnp.int32)
    assert np.asarray(x // 0).tolist() == [-2, -2, -1, -2, -2]
    assert np.asarray(x % 0).tolist() == [0, 0, 0, 0, 0]
    assert np.asarray(jnp.fmod(x, 0)).tolist() == [0, 0, 0, 0, 0]
    assert np.asarray(jnp.array([0, 3, 255], jnp.uint8) // 0).tolist() == [255, 255, 255]
    assert np.asarray(jax.jit(lambda a, b: a // b)(x, jnp.zeros(5, jnp.int32))).tolist() \
        == [-2, -2, -1, -2, -2]
    # away from zero divisors floor division and remainder are numpy's
    y = np.array([2, -2, 3, -5, 1], np.int32)
    np.testing.assert_array_equal(np.asarray(x // y), np.asarray(x) // y)
    np.testing.assert_array_equal(np.asarray(x % y), np.asarray(x) % y)
    big = np.array([-2 ** 31, -2 ** 31, 2 ** 31 - 1], np.int32)
    np.testing.assert_array_equal(np.asarray(jnp.asarray(big) // np.array([2, 3, -2], np.int32)),
                                  big.astype(np.int64) // np.array([2, 3, -2]))


def test_float_floor_division_keeps_the_sign_of_zero():
    got = np.asarray(jnp.array([-2.0, 2.0, -0.3]) // jnp.array([-3.0, 3.0, 1.0]))
    np.testing.assert_array_equal(got, [0.0, 0.0, -1.0])
    assert np.signbit(got[0]) and not np.signbit(got[1])       # -2 // -3 is -0.0, as numpy


def _jax_int_power(x, y):
    """JAX's integer ** integer: binary exponentiation over the exponent's low 6 bits, wrapping
    in the operands' type; 0 ** y is 0 for y != 0."""
    return np.where((x == 0) & (y != 0), 0, np.power(x, y & 63)).astype(x.dtype)


def test_integer_power_arrays_follow_jax():
    x = np.array([-7, -3, -1, 0, 1, 2, 3, 7], np.int32)
    y = np.array([-7, -3, 0, 3, 7, 64, 65, -1], np.int32)
    got = jnp.asarray(x) ** jnp.asarray(y)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(got), _jax_int_power(x, y))
    # JAX 0.10.2: jnp.array([-7, -3, -1, 0, 1, 2, 3, 7]) ** itself
    assert np.asarray(jnp.asarray(x) ** jnp.asarray(x)).tolist() == \
        [-1626598087, 1197088493, -1, 1, 1, 4, 27, 823543]
    assert np.asarray(jnp.array([0]) ** jnp.array([-1])).tolist() == [0]


def test_power_with_concrete_integer_exponent_keeps_the_base_dtype():
    u = np.array([0, 1, 2, 3, 7, 200, 255], np.uint8)
    want = np.power(u, 3, dtype=np.uint8)           # wraps in uint8: 7 ** 3 = 87
    for exponent in (3, np.int64(3), np.array(3), jnp.int32(3)):
        got = jnp.asarray(u) ** exponent
        assert got.dtype == np.uint8, type(exponent)
        np.testing.assert_array_equal(np.asarray(got), want)
    assert (jnp.array([True, False]) ** 2).dtype == np.int32
    with pytest.raises(TypeError, match="Integers cannot be raised to negative powers"):
        jnp.asarray(u) ** -1
    np.testing.assert_array_equal(np.asarray(jnp.array([2.0, -4.0]) ** -2), [0.25, 0.0625])


def _squared(x):
    return x * x


# XLA's integer powers written out: repeated squaring in the operand's dtype, the odd bits'
# factors multiplied in from the lowest, then one over the product for a negative exponent
_BY_SQUARING = {
    0: lambda x: np.ones_like(x), 1: lambda x: x, 2: _squared,
    3: lambda x: x * _squared(x), 5: lambda x: x * _squared(_squared(x)),
    9: lambda x: x * _squared(_squared(_squared(x))),
    16: lambda x: _squared(_squared(_squared(_squared(x)))),
    -1: lambda x: np.float32(1) / x, -2: lambda x: np.float32(1) / _squared(x),
    -7: lambda x: np.float32(1) / (x * _squared(x) * _squared(_squared(x))),
}


@pytest.mark.parametrize("n", sorted(_BY_SQUARING))
def test_a_concrete_integer_power_is_jaxs_integer_pow(n):
    """``x ** n``, ``jnp.power`` and ``lax.integer_pow`` are one ``integer_pow`` equation,
    with XLA's bits: ``x ** 3`` is ``x * (x * x)``, not the correctly rounded power (JAX
    0.10.2 gives these bits); eagerly, under jit and on blocks of a shard_map alike."""
    x = np.linspace(0.3, 3.1, 16, dtype=np.float32)
    want = _BY_SQUARING[n](x)
    np.testing.assert_allclose(want, x.astype(np.float64) ** n, rtol=1e-6)   # a few ulps
    mesh = jax.make_mesh((4,), ("i",))
    for got in (jnp.asarray(x) ** n, jnp.power(jnp.asarray(x), n), jax.lax.integer_pow(x, n),
                jax.jit(lambda v: v ** n)(x),
                jax.shard_map(lambda v: v ** n, mesh=mesh, in_specs=P("i"), out_specs=P("i"))(
                    jnp.asarray(x))):
        assert got.dtype == np.float32
        np.testing.assert_array_equal(np.asarray(got), want)
    text = str(jax.make_jaxpr(lambda v: v ** n)(x))
    assert f"integer_pow[y={n}]" in text and " pow " not in text
    assert str(jax.make_jaxpr(jnp.reciprocal)(x)).count("integer_pow[y=-1]") == 1


def test_high_order_derivatives_of_a_quotient_stay_finite():
    """``div``'s derivative in its divisor is ``-t x y ** -2`` with an integer power whose own
    derivative is ``-2 y ** -3``: the sixth derivative of ``1 / x`` at 4 is 720 / 4 ** 7
    (squaring the square at each order overflowed float32 there and gave -1.956)."""
    for inv in (lambda v: 1 / v, jnp.reciprocal, lambda v: v ** -1):
        f = inv
        for _ in range(6):
            f = jax.grad(f)
        for x in (1.0, 4.0, 8.0, 100.0):
            np.testing.assert_allclose(float(f(np.float32(x))), 720 * x ** -7, rtol=1e-5)
    d3 = jax.grad(jax.grad(jax.grad(lambda v: v ** 5)))
    assert float(d3(np.float32(2.0))) == 240.0
    assert str(jax.make_jaxpr(jax.grad(lambda v: v ** 5))(1.0)).count("integer_pow[y=4]") == 1


def test_booleans_promote_to_int32_in_arithmetic():
    b = jnp.array([True, False, True])
    for got, want in [(b // True, [1, 0, 1]), (True // b, [1, -2, 1]), (b % True, [0, 0, 0]),
                      (b << True, [2, 0, 2]), (True >> b, [0, 1, 0]), (b ** b, [1, 1, 1])]:
        # values from JAX 0.10.2 (True // False divides by zero: -2 as above)
        assert got.dtype == np.int32
        assert np.asarray(got).tolist() == want


def test_true_divide_converts_python_ints_straight_to_float():
    # JAX 0.10.2: uint8 [3, 200] / -3 -> [-1.0, -66.666...] (no wrap of -3 into uint8)
    got = jnp.array([3, 200], jnp.uint8) / -3
    assert got.dtype == np.float32
    np.testing.assert_allclose(np.asarray(got), np.array([3, 200]) / -3, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(-3 / jnp.array([3, 200], jnp.uint8)),
                               -3 / np.array([3, 200]), rtol=1e-6)


def test_round_and_index_of_arrays():
    assert round(jnp.float32(2.5)).dtype == np.int32 and int(round(jnp.float32(2.5))) == 2
    assert float(round(jnp.float32(2.46), 1)) == pytest.approx(2.5)
    assert [10, 20, 30][jnp.int32(1)] == 20
    for bad in (jnp.float32(1.0), jnp.bool_(True), jnp.array([1])):
        with pytest.raises(TypeError, match="Only integer scalar arrays can be converted"):
            operator.index(bad)
    # traced too, as JAX's: the check comes before the value is asked for; an integer
    # scalar's value is what is unknown
    for bad in (jnp.float32(1.0), jnp.bool_(True), jnp.array([1]), jnp.arange(0)):
        for func in (operator.index, hex, oct):
            with pytest.raises(TypeError) as info:
                jax.jit(func)(bad)
            assert str(info.value) == ("Only integer scalar arrays can be converted to a "
                                       "scalar index.")
    with pytest.raises(jax.errors.TracerIntegerConversionError):
        jax.jit(operator.index)(jnp.int32(1))



def test_python_scalars_and_truth_values_only_of_arrays_of_one_value():
    """JAX's TypeError for int, float and complex of an array of rank above 0 (even of one
    element, which numpy converts), and numpy's ValueError for the truth value of an empty
    array or of several elements: eagerly, traced (before the value is asked for) and in an
    eager shard_map body."""
    mesh = jax.make_mesh((2,), ("i",))
    for func in (int, float, complex):
        for bad in (jnp.arange(10), jnp.arange(1.0)):
            for run in (func, jax.jit(func)):
                with pytest.raises(TypeError, match=r"^Only scalar arrays can be converted to "
                                                    r"Python scalars; got arr.ndim=1$"):
                    run(bad)
        assert func(jnp.int32(3)) == 3
        with pytest.raises(jax.errors.ConcretizationTypeError):
            jax.jit(func)(jnp.int32(3))
    for bad, message in ((jnp.arange(0), "The truth value of an empty array is ambiguous"),
                         (jnp.arange(3), "The truth value of an array with more than one "
                                         "element is ambiguous")):
        for run in (bool, jax.jit(bool)):
            with pytest.raises(ValueError, match=message):
                run(bad)
    with pytest.raises(ValueError, match="more than one element"):
        shard_map(lambda b: b * bool(b), mesh, P("i"), P("i"))(jnp.arange(4.0))
    assert bool(jnp.arange(1, 2)) and not bool(jnp.zeros(()))

# --- lax: integer division, negative dynamic_slice starts --------------------------------------

def test_lax_div_and_rem_of_integers_truncate():
    x = np.array([-7, 7, 3, -3], np.int32)
    y = np.array([2, -2, 0, 5], np.int32)
    q = jax.lax.div(x, y)
    assert q.dtype == np.int32
    # toward zero (numpy: trunc of the true quotient); XLA: x / 0 is -1
    assert np.asarray(q).tolist() == [-3, -3, -1, 0]
    assert np.asarray(jax.lax.rem(x, y)).tolist() == [-1, 1, 3, -3]     # x % 0 is x (XLA)
    np.testing.assert_array_equal(np.asarray(jax.lax.div(np.float32(7), np.float32(2))), 3.5)


def test_dynamic_slice_negative_starts_count_from_the_end():
    # JAX 0.10.2: lax.dynamic_slice(arange(10.), (-3,), (2,)) is [7, 8]; starts then clamp.
    v = np.arange(10.0, dtype=np.float32)
    a = np.arange(24.0, dtype=np.float32).reshape(2, 3, 4)
    for run in (lambda f, *args: f(*args), lambda f, *args: jax.jit(f)(*args)):
        np.testing.assert_array_equal(
            np.asarray(run(lambda s: jax.lax.dynamic_slice(v, (s,), (2,)), -3)), v[7:9])
        np.testing.assert_array_equal(
            np.asarray(run(lambda s: jax.lax.dynamic_slice(a, (1, 2, s), (1, 2, 2)), -1)),
            a[1:2, 1:3, 2:4])
        np.testing.assert_array_equal(
            np.asarray(run(lambda s: jax.lax.dynamic_update_slice(v, np.ones(3, np.float32),
                                                                  (s,)), -2)),
            np.concatenate([v[:7], np.ones(3)]))
    np.testing.assert_array_equal(
        np.asarray(jax.lax.dynamic_slice_in_dim(v, -4, 2)), v[6:8])


def test_round_keeps_the_sign_of_zero_and_square_of_bool():
    got = np.asarray(jnp.round(jnp.array([0.5, 1.5, 2.5, -0.5, -0.4, -1.5])))
    np.testing.assert_array_equal(got, np.round(np.array([0.5, 1.5, 2.5, -0.5, -0.4, -1.5])))
    assert list(np.signbit(got)) == list(np.signbit(np.round([0.5, 1.5, 2.5, -0.5, -0.4, -1.5])))
    sq = jnp.square(jnp.array([True, False]))
    assert sq.dtype == np.int32 and np.asarray(sq).tolist() == [1, 0]


# --- derivatives at special points; traced out-of-bounds updates -------------------------------

def test_abs_and_relu_derivatives_at_zero():
    # JAX 0.10.2: grad(abs)(0.) is 1, grad(relu)(0.) is 0
    assert float(jax.grad(jnp.abs)(0.0)) == 1.0
    assert float(jax.grad(jnp.abs)(-2.0)) == -1.0
    assert float(jax.grad(jax.nn.relu)(0.0)) == 0.0
    assert float(jax.grad(jax.nn.relu)(2.0)) == 1.0
    np.testing.assert_array_equal(np.asarray(jax.nn.relu(jnp.array([-1.0, 0.0, np.nan, 2.0]))),
                                  [0.0, 0.0, np.nan, 2.0])
    assert jax.nn.relu(jnp.array([-2, 3])).dtype == np.int32


def test_traced_out_of_bounds_scalar_updates_are_dropped():
    x = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    got = jax.vmap(lambda row, i: row.at[i].add(10.0))(x, np.array([2, 7]))
    np.testing.assert_array_equal(np.asarray(got), [[0.0, 1.0, 12.0], [3.0, 4.0, 5.0]])
    set_at = jax.jit(lambda v, i: v.at[i].set(10.0))
    np.testing.assert_array_equal(np.asarray(set_at(x[0], 7)), x[0])
    np.testing.assert_array_equal(np.asarray(set_at(x[0], -4)), x[0])
    np.testing.assert_array_equal(np.asarray(set_at(x[0], -3)), [10.0, 1.0, 2.0])
    clipped = jax.jit(lambda v, i: v.at[i].set(10.0, mode="clip"))(x[0], 7)
    np.testing.assert_array_equal(np.asarray(clipped), [0.0, 1.0, 10.0])


def test_pmean_and_psum_of_booleans_count():
    mesh = Mesh(np.array(jax.devices()[:4]), axis_names=("i",))
    x = np.array([False, False, False, True, True, True, True, False])
    blocks = x.reshape(4, 2)
    mean = shard_map(lambda b: jax.lax.pmean(b, "i"), mesh=mesh, in_specs=P("i"),
                     out_specs=P())(x)
    total = shard_map(lambda b: jax.lax.psum(b, "i"), mesh=mesh, in_specs=P("i"),
                      out_specs=P())(x)
    assert mean.dtype == np.float32 and total.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(total), blocks.sum(0))
    np.testing.assert_array_equal(np.asarray(mean), blocks.mean(0))       # [0.5, 0.5]


def test_fmax_fmin_ignore_nan_and_pick_y_at_ties():
    a = np.array([1.0, np.nan, 3.0, np.nan, 0.0], np.float32)
    b = np.array([2.0, 1.0, np.nan, np.nan, 0.0], np.float32)
    np.testing.assert_array_equal(np.asarray(jnp.fmax(a, b)), np.fmax(a, b))
    np.testing.assert_array_equal(np.asarray(jnp.fmin(a, b)), np.fmin(a, b))
    assert jnp.fmax(jnp.arange(3), 1).dtype == np.int32
    # JAX 0.10.2: at a tie the derivative goes to the second operand
    assert float(jax.grad(lambda x: jnp.fmax(x, 1.0))(1.0)) == 0.0
    assert float(jax.grad(lambda y: jnp.fmax(1.0, y))(1.0)) == 1.0
    assert float(jax.grad(lambda x: jnp.fmin(x, 1.0))(1.0)) == 0.0


# --- Python scalars given to jit stay weakly typed ---------------------------------------------

BF16 = jnp.bfloat16


@pytest.mark.parametrize("fun, args, dtype", [
    # JAX 0.10.2: a Python scalar argument only lifts the kind, as inside the function
    (lambda p, lr: p - lr * p, (jnp.ones(4, BF16), 0.1), BF16),
    (lambda p, lr: p - lr * 2 * p, (jnp.ones(4, BF16), 0.1), BF16),      # weak * weak: weak
    (lambda p, lr: p * jnp.sqrt(lr), (jnp.ones(4, BF16), 0.25), BF16),   # unary of weak: weak
    (lambda p, k: p + k, (jnp.ones(3, jnp.int8), 7), jnp.int8),
    (lambda x: x + jnp.int8(1), (3,), jnp.int8),
    (lambda x, y: x * y, (2.0, jnp.float16(3)), jnp.float16),
    (lambda p, n: p / n, (jnp.ones(3, jnp.int16), 2), jnp.float32),
    (lambda a, b: a * b, (2, 3.5), jnp.float32),
    (lambda p, lr: p - lr * jnp.float32(1), (jnp.ones(4, BF16), 0.1), jnp.float32),  # strong
    (lambda p, lr: p - lr, (jnp.ones(4, BF16), np.float32(0.1)), jnp.float32),   # numpy: strong
])
def test_python_scalar_arguments_to_jit_are_weakly_typed(fun, args, dtype):
    jitted = jax.jit(fun)(*args)
    assert jitted.dtype == np.dtype(dtype)
    wide = fun(*[np.asarray(a, np.float64) if not isinstance(a, (int, float)) else a
                 for a in args])
    np.testing.assert_allclose(np.asarray(jitted, np.float64), np.asarray(wide, np.float64),
                               rtol=1e-2)


def test_jit_traces_a_python_scalar_and_an_array_of_its_dtype_apart():
    f = jax.jit(lambda p, k: p + k)
    p = jnp.ones(3, jnp.int8)
    assert f(p, 7).dtype == np.int8 and f(p, 8).dtype == np.int8
    assert f(p, jnp.int32(7)).dtype == np.int32
    assert f(p, 9).dtype == np.int8
    assert f.trace_count == 2          # one trace for Python ints (any value), one for int32


def test_python_scalar_arguments_stay_weak_in_shard_map_and_control_flow():
    # JAX 0.10.2 gives bfloat16 for each (a Python scalar only lifts the kind)
    mesh = jax.make_mesh((4,), ("i",))
    x = jnp.ones((8,), BF16)
    scale = shard_map(lambda b, s: b * s, mesh=mesh, in_specs=(P("i"), P()), out_specs=P("i"))
    closed = jax.jit(lambda b, s: shard_map(lambda c: c * s, mesh=mesh, in_specs=P("i"),
                                            out_specs=P("i"))(b))
    results = {
        "shard_map, eager": scale(x, 2.0),
        "shard_map, jit": jax.jit(scale)(x, 2.0),
        "closed over in a shard_map": closed(x, 2.0),
        "fori_loop": jax.jit(lambda p, n: jax.lax.fori_loop(0, 3, lambda k, c: c * n, p))(
            x, 2.0),
        "cond": jax.jit(lambda p, lr: jax.lax.cond(lr > 0, lambda: p * lr, lambda: p))(x, 0.5),
        "grad": jax.jit(jax.grad(lambda w, lr: (w * lr).sum()))(x, 0.5),
        "vmap": jax.jit(jax.vmap(lambda a, s: a * s, in_axes=(0, None)))(x.reshape(2, 4), 0.5),
    }
    for where, value in results.items():
        assert value.dtype == np.dtype(BF16), where
    np.testing.assert_array_equal(np.asarray(results["shard_map, jit"], np.float32),
                                  np.full(8, 2.0, np.float32))


def test_division_by_a_broadcast_value_is_a_product_with_its_reciprocal_as_in_xla():
    from shardc import lax
    # XLA (JAX on CPU) computes a / b, b broadcast (a scalar, a row, a keepdims column), as
    # a * (1 / b) in float16/32/64: up to an ulp off a true division on a third of values.
    # Same-shape operands, bfloat16 and complex numbers divide as written.
    rng = np.random.default_rng(0)
    x = rng.uniform(0.5, 100, (30, 40)).astype(np.float32)
    row = rng.uniform(0.5, 100, (40,)).astype(np.float32)
    col = rng.uniform(0.5, 100, (30, 1)).astype(np.float32)
    same = rng.uniform(0.5, 100, (30, 40)).astype(np.float32)
    recip = lambda a, b: a * (np.ones((), b.dtype) / b)
    cases = [(lambda a: a / 3.0, recip(x, np.float32(3))),
             (lambda a: jnp.divide(a, row), recip(x, row)),
             (lambda a: a / col, recip(x, col)),
             (lambda a: lax.div(a, jnp.float32(7)), recip(x, np.float32(7))),
             (lambda a: jnp.mean(a, axis=1), recip(np.asarray(jnp.sum(x, axis=1)),
                                                  np.float32(40))),
             (lambda a: a / same, x / same)]
    for fn, want in cases:
        for run in (fn, jax.jit(fn)):
            got = np.asarray(run(jnp.asarray(x)))
            np.testing.assert_array_equal(got, want)
    assert (recip(x, np.float32(3)) != x / np.float32(3)).any()    # the cases tell them apart
    x64 = x.astype(np.float64)
    with jax.enable_x64():
        np.testing.assert_array_equal(np.asarray(jax.jit(lambda a: a / 3.0)(x64)),
                                      recip(x64, np.float64(3)))
    half = x.astype(np.float16)
    np.testing.assert_array_equal(np.asarray(jnp.asarray(half) / np.float16(3)),
                                  (half.astype(np.float32) * np.float32(np.float16(1) /
                                   np.float16(3))).astype(np.float16))
    z = np.array([1 + 2j, 3 - 1j], np.complex64)
    np.testing.assert_array_equal(np.asarray(jnp.asarray(z) / (3 + 1j)),
                                  z / np.complex64(3 + 1j))


def test_a_scalar_divided_by_a_constant_under_jit_is_a_product_with_its_reciprocal():
    """XLA takes a constant divisor's reciprocal into a scalar too (JAX's jit of v / 3 on a
    scalar); eagerly, and by a computed divisor, a scalar divides as written. A shard_map's
    per-device scalars divide alike on every backend (stacked, the per-device ones gave the
    reciprocal's bits while the per-device reference divided as written)."""
    from compiler.backend import get_backend, set_backend
    from runtime.reference import ReferenceBackend
    xs = np.random.default_rng(6).standard_normal(64).astype(np.float32)
    true = xs / np.float32(3)
    recip = xs * (np.float32(1) / np.float32(3))
    assert (true != recip).any()
    bits = lambda f: np.array([np.asarray(f(x)) for x in xs])
    np.testing.assert_array_equal(bits(lambda x: jnp.asarray(x) / 3), true)
    np.testing.assert_array_equal(bits(lambda x: jax.jit(lambda v: v / 3)(jnp.asarray(x))), recip)
    np.testing.assert_array_equal(
        bits(lambda x: jax.jit(lambda v, d: v / d)(jnp.asarray(x), jnp.float32(3))), true)
    mesh = Mesh(np.array(jax.devices()[:8]), ("d",))
    blocks = xs[:24].reshape(8, 3)
    want_jit = blocks.sum(1) * (np.float32(1) / np.float32(3))
    body = lambda b: (b.sum() / 3).reshape(1)
    previous = get_backend()
    for backend in (previous, ReferenceBackend()):
        set_backend(backend)
        try:
            f = shard_map(body, mesh=mesh, in_specs=P("d"), out_specs=P("d"))
            got = np.asarray(jax.jit(f)(blocks))
            np.testing.assert_array_equal(got, want_jit.astype(np.float32))
            eager = np.asarray(f(blocks))
            np.testing.assert_array_equal(eager, np.array([np.float32(b.sum()) / np.float32(3)
                                                           for b in blocks]))
        finally:
            set_backend(previous)


def test_pmean_divides_as_jaxs_psum_then_division():
    # JAX's pmean is psum(x) / n: a block of rank >= 1 is divided by a broadcast n, which
    # XLA computes as a product with 1 / n; a rank-0 block divides as written. Integers are
    # summed, converted to float32, then divided.
    from compiler.backend import get_backend, set_backend
    mesh = Mesh(np.array(jax.devices()[:6]), ("i",))
    x = np.random.default_rng(1).uniform(0.5, 100, (6, 50)).astype(np.float32)
    ints = np.arange(6 * 50, dtype=np.int32).reshape(6, 50) * 7
    sixth = np.float32(1) / np.float32(6)

    def both(fn):
        return [jax.jit(shard_map(lambda b, f=f: f(fn(b), "i"), mesh=mesh, in_specs=P("i"),
                                  out_specs=P())) for f in (jax.lax.pmean, jax.lax.psum)]
    saved = get_backend()
    try:
        for backend in ("fast", "reference"):
            jax.set_backend_name(backend)
            mean, total = both(lambda b: b)
            np.testing.assert_array_equal(np.asarray(mean(x))[0],
                                          np.asarray(total(x))[0] * sixth)
            mean0, total0 = both(lambda b: b[0, 0])
            assert np.asarray(mean0(x)) == np.asarray(total0(x)) / np.float32(6)
            got = np.asarray(mean(ints))[0]
            assert got.dtype == np.float32
            np.testing.assert_array_equal(got, ints.sum(0).astype(np.float32) * sixth)
    finally:
        set_backend(saved)


def test_a_traced_value_has_no_sharding_attribute():
    """As JAX's: ``x.sharding`` of a traced value (jit, vmap, grad) is an AttributeError
    naming ``jax.typeof``, so ``hasattr`` is False and ``getattr`` falls back; the type says
    how the value is split."""
    seen = []

    def f(x):
        with pytest.raises(AttributeError) as info:
            x.sharding
        seen.append((str(info.value), hasattr(x, "sharding"), getattr(x, "sharding", "none"),
                     jax.typeof(x).sharding is not None))
        return x * 2

    jax.jit(f)(jnp.arange(2.0))
    jax.vmap(f)(jnp.arange(2.0))
    jax.grad(lambda x: f(x).sum())(jnp.arange(2.0))
    assert seen[0][0] == ("The 'sharding' attribute is not available on traced array with "
                          "shape float32[2]. To query sharding information on tracers, use "
                          "`jax.typeof(x)`.")
    assert [s[1:] for s in seen] == [(False, "none", True)] * 3
    assert hasattr(jnp.arange(2.0), "sharding")
