"""Random bits are JAX's: the Threefry-2x32 hash, keys split and folded as JAX does, and the
samplers built on them. Expected values were printed by JAX 0.10.2 (CPU) for the same calls."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import shardc as jax
import shardc.numpy as jnp
from shardc import lax, random
from shardc.random._keys import threefry
from shardc.sharding import NamedSharding, PartitionSpec as P
from runtime.reference import threefry2x32


# Random123's known answers for Threefry-2x32 with 20 rounds: (key, counter) -> result
KNOWN_ANSWERS = [
    ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
]


@pytest.mark.parametrize("key,count,want", KNOWN_ANSWERS)
def test_threefry_known_answers(key, count, want):
    got = threefry2x32(*(np.uint32(v) for v in key + count))
    assert [int(v) for v in got] == list(want)
    # the primitive, eagerly and under jit, on arrays of them
    words = jnp.asarray(np.array(key, np.uint32))
    for run in (threefry, jax.jit(threefry)):
        first, second = run(words, jnp.full((3,), count[0], np.uint32),
                            jnp.full((3,), count[1], np.uint32))
        assert first.dtype == np.uint32 and first.shape == (3,)
        assert np.asarray(first).tolist() == [want[0]] * 3
        assert np.asarray(second).tolist() == [want[1]] * 3


def _data(keys):
    return np.asarray(random.key_data(keys)).tolist()


def test_keys_splits_and_folds_are_jaxs():
    k = random.key(42)
    assert _data(random.split(k, (2, 2))) == [
        [[1832780943, 270669613], [64467757, 2916123636]],
        [[2465931498, 255383827], [3134548294, 894150801]]]
    assert _data(random.fold_in(k, 7)) == [2547012911, 1371500959]
    assert _data(random.fold_in(k, 2 ** 32 - 1)) == [2398536845, 3890976714]
    assert np.asarray(random.split(random.PRNGKey(0), 3)).tolist() == [
        [1797259609, 2579123966], [928981903, 3453687069], [4146024105, 2718843009]]
    # rbg keys split and fold each half as a threefry key
    rbg = random.key(5, impl="rbg")
    assert _data(random.split(rbg, 2)) == [
        [2724472204, 3573582090, 2724472204, 3573582090],
        [202567368, 3886822060, 202567368, 3886822060]]
    assert _data(random.fold_in(rbg, 3)) == [2939540675, 3076691462, 2939540675, 3076691462]


def test_bits_and_uniforms_are_jaxs():
    k = random.key(42)
    bits = random.bits(k, (2, 3))
    assert bits.dtype == np.uint32
    assert np.asarray(bits).tolist() == [[2098992034, 2919706841, 2646866425],
                                         [2409546199, 1935504149, 2516274904]]
    assert np.asarray(random.bits(k, (4,), jnp.uint8)).tolist() == [162, 217, 249, 215]
    assert np.asarray(random.bits(k, (4,), jnp.uint16)).tolist() == [5026, 12505, 63993, 49623]
    np.testing.assert_array_equal(random.uniform(k, (4,)), np.array(
        [0.48870956897735596, 0.6797971725463867, 0.6162714958190918, 0.5610160827636719],
        np.float32))
    half = random.uniform(k, (4,), jnp.float16)
    assert half.dtype == np.float16
    assert np.asarray(half).astype(float).tolist() == [
        0.076171875, 0.1904296875, 0.9755859375, 0.7568359375]
    assert np.asarray(random.uniform(k, (4,), jnp.bfloat16)).astype(float).tolist() == [
        0.6328125, 0.84375, 0.96875, 0.8359375]
    np.testing.assert_allclose(random.normal(k, (4,)), [
        -0.02830461598932743, 0.4671318531036377, 0.2957029640674591, 0.15354591608047485],
        rtol=3e-7)
    with pytest.raises(ValueError, match="must be an unsigned int dtype"):
        random.bits(k, (2,), np.int32)


def test_sixty_four_bit_draws_are_jaxs():
    with jax.enable_x64(True):
        k = random.key(42)
        assert np.asarray(random.bits(k, (3,), jnp.uint64)).tolist() == [
            7871734211187709741, 276886910877598708, 10591095138341673235]
        np.testing.assert_array_equal(random.uniform(k, (3,), jnp.float64), [
            0.4267275666499091, 0.015010069515314584, 0.5741444178995352])
        seed = 2 ** 40 + 5
        assert _data(random.key(seed)) == [256, 5]
        assert _data(jax.jit(random.key)(jnp.int64(seed))) == [256, 5]


def test_the_original_scheme_when_not_partitionable():
    k = random.key(42)
    f = jax.jit(lambda key: random.bits(key, (5,)))
    partitionable = np.asarray(f(k))
    with jax.threefry_partitionable(False):
        assert _data(random.split(k, 3)) == [
            [3134548294, 3733159049], [3746501087, 894150801], [801545058, 2363201431]]
        assert np.asarray(random.bits(k, (5,))).tolist() == [
            3134548294, 3733159049, 843694964, 894150801, 801545058]
        # the jitted function is traced again under the other scheme
        assert np.asarray(f(k)).tolist() == [
            3134548294, 3733159049, 843694964, 894150801, 801545058]
        assert np.asarray(random.bits(k, (3,), jnp.uint8)).tolist() == [143, 4, 62]
        assert np.asarray(random.bits(k, (3,), jnp.uint16)).tolist() == [45869, 983, 33780]
        np.testing.assert_array_equal(random.uniform(k, (2, 3)), np.array(
            [[0.7298188209533691, 0.8691937923431396, 0.8723001480102539],
             [0.20818567276000977, 0.1866241693496704, 0.5502256155014038]], np.float32))
        assert _data(random.fold_in(k, 7)) == [2547012911, 1371500959]
    np.testing.assert_array_equal(f(k), partitionable)


def test_the_default_implementation_is_the_configured_one():
    with jax.default_prng_impl("rbg"):
        assert random.key_impl(random.key(0)) == "rbg"
        assert random.key_data(random.key(0)).shape == (4,)
    assert random.key_impl(random.key(0)) == "threefry2x32"


@settings(max_examples=25, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2 ** 31 - 1), count=st.integers(1, 9))
def test_fold_in_gives_the_keys_of_split(seed, count):
    key = random.key(seed)
    split = _data(random.split(key, count))
    assert [_data(random.fold_in(key, i)) for i in range(count)] == split


@settings(max_examples=15, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2 ** 31 - 1),
       shape=st.lists(st.integers(1, 5), min_size=0, max_size=3).map(tuple))
def test_an_elements_bits_depend_only_on_its_index(seed, shape):
    key = random.key(seed)
    bits = np.asarray(random.bits(key, shape))
    flat = np.asarray(random.bits(key, (int(np.prod(shape)),)))
    np.testing.assert_array_equal(bits.reshape(-1), flat)
    # a longer draw starts with the same bits
    np.testing.assert_array_equal(np.asarray(random.bits(key, (flat.size + 3,)))[:flat.size],
                                  flat)


def test_draws_agree_eagerly_jitted_vmapped_and_sharded():
    keys = random.split(random.key(3), 8)
    want = np.stack([np.asarray(random.normal(k, (4,))) for k in keys])
    draw = jax.vmap(lambda k: random.normal(k, (4,)))
    np.testing.assert_array_equal(draw(keys), want)
    np.testing.assert_array_equal(jax.jit(draw)(keys), want)
    mesh = jax.make_mesh((4, 2), ("X", "Y"))
    key = random.key(11)
    whole = np.asarray(random.uniform(key, (8, 6)))
    laid = random.uniform(key, (8, 6), out_sharding=NamedSharding(mesh, P("X", "Y")))
    assert str(jax.typeof(laid)) == "float32[8@X,6@Y]"
    np.testing.assert_array_equal(laid, whole)
    with jax.set_mesh(mesh):
        jitted = jax.jit(lambda k: random.uniform(k, (8, 6), out_sharding=P("X", None)))
        np.testing.assert_array_equal(jitted(key), whole)


def test_a_shard_map_body_draws_from_its_folded_key():
    mesh = jax.make_mesh((4,), ("i",))
    key = random.key(9)

    def body(k):
        mine = random.fold_in(k, lax.axis_index("i"))
        return random.normal(mine, (1, 3))
    got = jax.shard_map(body, mesh=mesh, in_specs=P(), out_specs=P("i"))(key)
    want = np.concatenate([np.asarray(random.normal(random.fold_in(key, i), (1, 3)))
                           for i in range(4)])
    np.testing.assert_array_equal(got, want)


def test_erf_inv_in_float32_is_xlas():
    x = np.array([-0.999, -0.5, -0.1, 0.0, 0.3, 0.75, 0.9999, 1.0], np.float32)
    got = lax.erf_inv(x)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, np.array(
        [-2.3267576694488525, -0.4769362807273865, -0.08885598927736282, 0.0,
         0.27246275544166565, 0.8134198188781738, 2.7510268688201904, np.inf], np.float32))
    # within a few ulps of the exact inverse everywhere
    u = np.linspace(-0.99999, 0.99999, 2001, dtype=np.float32)
    with jax.enable_x64(True):
        exact = np.asarray(lax.erf_inv(u.astype(np.float64)))
    np.testing.assert_allclose(np.asarray(lax.erf_inv(u), np.float64), exact, rtol=5e-7,
                               atol=1e-7)


def test_a_bitcast_of_a_split_array_stays_split():
    mesh = jax.make_mesh((4, 2), ("X", "Y"))
    x = jax.device_put(np.arange(32, dtype=np.float32).reshape(8, 4),
                       NamedSharding(mesh, P("X", "Y")))
    for new, shape in ((np.uint32, (8, 4)), (np.uint16, (8, 4, 2))):
        f = jax.jit(lambda a, new=new: lax.bitcast_convert_type(a, new))
        got = f(x)
        assert got.shape == shape
        np.testing.assert_array_equal(got, np.asarray(x).view(new).reshape(shape))
        assert "all_gather" not in f.lower(x).as_text()
    halves = jax.jit(lambda a: lax.bitcast_convert_type(a, np.uint16))(x)
    back = jax.jit(lambda h: lax.bitcast_convert_type(h, np.float32))(halves)
    np.testing.assert_array_equal(back, x)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(key=st.tuples(st.integers(0, 2 ** 32 - 1), st.integers(0, 2 ** 32 - 1)),
       start=st.integers(0, 2 ** 32 - 16), size=st.integers(1, 12))
def test_the_kernel_gives_the_same_bits_for_few_elements_and_many(key, start, size):
    # a few elements are hashed in Python integers, more in numpy: the same bits
    k1, k2 = (np.uint32(k) for k in key)
    counts = np.arange(start, start + size, dtype=np.uint64).astype(np.uint32)
    whole = threefry2x32(k1, k2, np.zeros(size, np.uint32), counts)
    for i in range(size):
        one = threefry2x32(k1, k2, np.uint32(0), counts[i])
        assert (int(one[0]), int(one[1])) == (int(whole[0][i]), int(whole[1][i]))
