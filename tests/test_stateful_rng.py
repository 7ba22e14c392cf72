"""``jax.experimental.random``'s stateful generator: its draws follow JAX's sequence (the
counter folded into the base key, one step per draw), eagerly, under jit (as an argument or
closed over), in loops and under vmap of ``split``; ``spawn``; its fields and pytree
structure; and JAX's errors. Expected values were printed by JAX 0.10.2 (CPU) for the same
calls."""
import dataclasses

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import shardc as jax
import shardc.numpy as jnp
from shardc import random
from shardc.experimental import enable_x64
from shardc.experimental import random as exp_random
from shardc.experimental.random import StatefulPRNG, stateful_rng


def key_words(keys) -> list:
    return np.asarray(random.key_data(keys)).tolist()


def counter(rng) -> int:
    return np.asarray(rng._counter[...]).tolist()


def assert_values(got, want, dtype):
    """``got`` is of ``dtype`` and equals ``want`` rounded to it."""
    assert got.dtype == np.dtype(dtype)
    assert_array_equal(np.asarray(got), np.asarray(want).astype(dtype))


# -- the sequence of draws -----------------------------------------------------------------------

def test_draws_follow_jaxs_sequence_eagerly_and_under_jit():
    rng = stateful_rng(42)
    assert float(rng.uniform()) == np.float32(0.5302608)
    assert float(rng.uniform()) == np.float32(0.72766423)
    draw = jax.jit(rng.uniform)                   # the Ref closed over: written after each call
    assert float(draw()) == np.float32(0.6672406)
    assert float(draw()) == np.float32(0.3890121)
    assert key_words(rng.key()) == [2954079971, 3276725750]
    assert key_words(rng.key()) == [2765691542, 824333390]
    assert counter(rng) == 6
    assert key_words(rng._base_key) == [0, 42]    # the base key never changes


def test_keys_of_a_shape():
    rng = stateful_rng(0)
    assert key_words(rng.key()) == [1797259609, 2579123966]
    assert key_words(rng.key()) == [928981903, 3453687069]
    pair = rng.key(2)
    assert pair.shape == (2,) and jax.dtypes.issubdtype(pair.dtype, jax.dtypes.prng_key)
    assert key_words(pair) == [[2799984767, 1105366846], [3777617834, 145086855]]
    assert key_words(rng.key((1, 2))) == [[[3223668805, 2222728495],
                                            [2060067018, 3241019684]]]
    assert counter(rng) == 4                      # a key array is one draw


def test_samplers_are_jaxs():
    rng = stateful_rng(5)
    assert_values(rng.random(), 0.6610324382781982, np.float32)
    assert_values(rng.random(3), [0.08381330966949463, 0.22921323776245117,
                                  0.11234712600708008], np.float32)
    assert_values(rng.random((2, 2), jnp.float16), [[0.8369140625, 0.0439453125],
                                                    [0.8466796875, 0.205078125]], np.float16)
    assert_values(rng.random(2, jnp.bfloat16), [0.4375, 0.203125], jnp.bfloat16)
    assert_values(rng.uniform(2., 5., 3), [4.449440956115723, 3.9601032733917236,
                                           2.524582862854004], np.float32)
    assert_values(rng.uniform(np.array([0., 1.]), 3.), [0.5464156866073608, 1.414696216583252],
                  np.float32)
    assert_values(rng.uniform(-1, 1, (2,), dtype=jnp.float16), [0.96484375, 0.859375],
                  np.float16)
    assert_values(rng.normal(), 0.5893588662147522, np.float32)
    assert_allclose(np.asarray(rng.normal(1., 2., 3)),
                    [-0.15575265884399414, 5.027072429656982, 0.07345598936080933], rtol=1e-6)
    assert_allclose(np.asarray(rng.normal(np.array([0., 10.]), 3.)),
                    [-1.2632580995559692, 7.8456130027771], rtol=1e-6)
    assert_values(rng.normal(size=2, dtype=jnp.bfloat16), [-1.21875, 0.283203125], jnp.bfloat16)
    assert_values(rng.integers(10), 7, np.int32)
    assert_values(rng.integers(10, size=5), [4, 0, 1, 7, 0], np.int32)
    assert_values(rng.integers(3, 9, (2, 3)), [[6, 5, 8], [6, 5, 6]], np.int32)
    assert_values(rng.integers(0, 200, 4, dtype=jnp.uint8), [29, 158, 106, 44], np.uint8)
    assert_values(rng.integers(np.array([0, 5]), 10), [7, 5], np.int32)
    assert_values(rng.integers(-5, 5, 3, dtype=jnp.int16), [-4, 4, 3], np.int16)
    assert counter(rng) == 17


def test_64_bit_dtypes_under_x64():
    with enable_x64():
        rng = stateful_rng(5)
        assert_values(rng.random(2), [0.34387082395664414, 0.8108025577817566], np.float64)
        assert_values(rng.integers(100, size=2), [39, 51], np.int64)
        normal = rng.normal(size=2)
        assert normal.dtype == np.float64
        assert_allclose(np.asarray(normal), [-1.2557684840953955, 0.8055703352019262],
                        rtol=1e-14)
        assert rng.split(2)._counter.dtype == np.int64
        assert rng._counter.dtype == np.int64 and counter(rng) == 4


def test_seeds():
    assert_values(stateful_rng(np.int64(2**62 + 12345)).uniform(size=2),
                  [0.932488203048706, 0.4480193853378296], np.float32)
    assert_values(stateful_rng(-3).uniform(size=2), [0.6019413471221924, 0.9665842056274414],
                  np.float32)
    rbg = stateful_rng(3, impl="rbg")
    assert key_words(rbg.key()) == [3716834203, 3481239269, 3716834203, 3481239269]
    assert key_words(rbg.key(2)) == [[1727807664, 1616631547, 1727807664, 1616631547],
                                     [1749293149, 3807081006, 1749293149, 3807081006]]


def test_default_seed_draws_from_entropy():
    first, second = stateful_rng(), stateful_rng()
    x = first.uniform(size=10)
    assert x.shape == (10,) and x.dtype == np.float32
    assert not np.array_equal(np.asarray(x), np.asarray(second.uniform(size=10)))


@pytest.mark.parametrize("size, params, shape", [
    (None, (), ()), (2, (), (2,)), ((5, 2), (), (5, 2)),
    (None, (np.array([0., 1.]), 3.), (2,)), (None, (np.zeros((3, 1)), np.ones(2) + 1), (3, 2)),
    ((4, 2), (np.array([0., 1.]), 3.), (4, 2)),
])
def test_shapes_follow_size_or_the_parameters(size, params, shape):
    rng = stateful_rng(1)
    assert rng.uniform(*params, size=size).shape == shape
    assert rng.normal(*params, size=size).shape == shape
    ints = tuple(np.asarray(p).astype(int) + 5 * k for k, p in enumerate(params))
    assert rng.integers(*(ints or (10,)), size=size).shape == shape
    if not params:
        assert rng.random(size).shape == shape


# -- jit, loops and vmap -------------------------------------------------------------------------

def test_a_generator_as_an_argument_of_jit():
    @jax.jit
    def draw(rng):
        return rng.uniform(size=2), rng.integers(5, size=2)

    rng = stateful_rng(11)
    first, second = draw(rng), draw(rng)
    assert_values(first[0], [0.37832772731781006, 0.2833268642425537], np.float32)
    assert_values(first[1], [0, 3], np.int32)
    assert_values(second[0], [0.6409925222396851, 0.3672332763671875], np.float32)
    assert_values(second[1], [0, 0], np.int32)
    assert counter(rng) == 4


def test_a_generator_made_under_jit():
    draw = jax.jit(lambda seed: stateful_rng(seed).uniform(size=2))
    assert_array_equal(np.asarray(draw(9)), np.asarray(stateful_rng(9).uniform(size=2)))
    assert_values(draw(9), [0.5417689085006714, 0.8428997993469238], np.float32)


SEVEN = [0.8673704862594604, 0.6751335859298706, 0.20599794387817383, 0.23133409023284912]


def test_loops_draw_the_eager_sequence():
    rng = stateful_rng(7)
    assert_values(jnp.stack([rng.uniform() for _ in range(4)]), SEVEN, np.float32)

    def scanned(seed):
        rng = stateful_rng(seed)
        return jax.lax.scan(lambda carry, _: (carry, rng.uniform()), None, length=4)[1]

    assert_values(scanned(7), SEVEN, np.float32)
    assert_values(jax.jit(scanned)(7), SEVEN, np.float32)
    rng = stateful_rng(7)
    total = jax.lax.fori_loop(0, 3, lambda i, acc: acc + rng.uniform(), 0.0)
    assert float(total) == np.float32(1.7485020160675049) and counter(rng) == 3
    mapped = jax.lax.map(lambda x: x + rng.uniform(), jnp.arange(3.))
    assert_values(mapped, [0.23133409023284912, 1.2984516620635986, 2.7387399673461914],
                  np.float32)
    assert counter(rng) == 6


def test_split_for_vmap():
    rng = stateful_rng(123)
    got = jax.vmap(lambda r, x: x + r.uniform())(rng.split(3), jnp.zeros(3))
    assert_values(got, [0.35525954, 0.21937883, 0.5336956], np.float32)
    assert counter(rng) == 1
    rng = stateful_rng(123)
    grid = rng.split((2, 3))
    assert grid._base_key.shape == (2, 3) and grid._base_key.dtype == rng._base_key.dtype
    assert key_words(grid._base_key) == [
        [[2765991052, 3943716735], [1188447079, 1832623004], [2948281090, 2785986219]],
        [[4283950245, 2665519608], [1978187330, 4041390182], [1663137049, 785596073]]]
    assert isinstance(grid._counter, jax.Ref) and grid._counter.shape == (2, 3)
    assert grid._counter.dtype == np.int32 and not grid._counter[...].weak_type
    drawn = jax.vmap(jax.vmap(lambda r: r.normal(size=2)))(grid)
    assert drawn.shape == (2, 3, 2)
    assert_allclose(np.asarray(drawn)[:, :, 0], [
        [-0.37115901708602905, -0.7742927074432373, 0.08456303179264069],
        [1.598196029663086, -2.49932861328125, 1.1108204126358032]], rtol=1e-6)
    assert counter(grid) == [[1, 1, 1], [1, 1, 1]]


def test_split_members_draw_as_spawned_generators():
    """Each member of a split generator draws what the spawned generator of the same key
    draws (JAX's testVmapMapped)."""
    x = np.arange(4, dtype=np.float32)
    spawned = x + jnp.array([r.uniform() for r in stateful_rng(758943).spawn(4)])
    mapped = jax.vmap(lambda r, v: v + r.uniform())(stateful_rng(758943).split(4), x)
    assert_array_equal(np.asarray(mapped), np.asarray(spawned))


def test_vmap_over_split_inside_jit_and_of_keys():
    base = stateful_rng(1)
    inner = jax.jit(lambda r, x: jax.vmap(lambda r, x: x + r.uniform())(r.split(3), x))
    assert_allclose(np.asarray(inner(base, jnp.arange(3.))),
                    [0.23025572, 1.2097399, 2.670608], rtol=1e-6)
    keys = jax.vmap(lambda r: r.key(2))(stateful_rng(1).split(3))
    assert keys.shape == (3, 2)
    assert key_words(keys)[0] == [[2783477504, 2669311029], [837736323, 3074072278]]


def test_spawn():
    rng = stateful_rng(123)
    children = rng.spawn(3)
    assert [key_words(c._base_key) for c in children] == [
        [2765991052, 3943716735], [1188447079, 1832623004], [2948281090, 2785986219]]
    assert all(isinstance(c, StatefulPRNG) and counter(c) == 0 for c in children)
    assert children[0]._counter[...].weak_type
    assert [np.asarray(c.integers(0, 10, 2)).tolist() for c in children] == [[4, 5], [2, 1],
                                                                              [6, 8]]
    assert counter(rng) == 1 and rng.spawn(0) == []


# -- the object ----------------------------------------------------------------------------------

def test_fields_and_repr():
    rng = stateful_rng(42)
    assert [f.name for f in dataclasses.fields(StatefulPRNG)] == ["_base_key", "_counter"]
    assert StatefulPRNG.__slots__ == ("_base_key", "_counter")
    assert repr(rng) == ("StatefulPRNG(_base_key=Array((), dtype=key<fry>) overlaying:\n"
                         "[ 0 42], _counter=Ref(0, dtype=int32, weak_type=True))")
    assert repr(stateful_rng(0).split(2)) == (
        "StatefulPRNG(_base_key=Array((2,), dtype=key<fry>) overlaying:\n"
        "[[4165894930  804218099]\n [1353695780 2116000888]], _counter=Ref([0, 0], dtype=int32))")
    assert isinstance(rng._counter, jax.Ref) and rng._counter.shape == ()
    assert rng._base_key == random.key(42)
    with pytest.raises(dataclasses.FrozenInstanceError):
        rng._counter = jax.new_ref(0)
    assert exp_random.__all__ == ["StatefulPRNG", "stateful_rng"]


def test_a_pytree_of_a_key_and_a_ref():
    rng = stateful_rng(3)
    leaves, treedef = jax.tree.flatten(rng)
    assert len(leaves) == 2 and leaves[1] is rng._counter
    rebuilt = jax.tree.unflatten(treedef, leaves)
    assert float(rebuilt.uniform()) == np.float32(0.008695364)
    assert counter(rng) == 1                       # the same Ref counted the draw
    fresh = stateful_rng(3)
    fresh.uniform()
    copied = jax.tree.map(lambda x: x, rng)
    assert float(copied.uniform()) == float(fresh.uniform()) and counter(rng) == 2


# -- errors --------------------------------------------------------------------------------------

def test_invalid_fields():
    with pytest.raises(ValueError, match=r"^Expected base_key to be a typed PRNG key; got "
                                         r"\[0 1\]$"):
        StatefulPRNG(jnp.array([0, 1], "uint32"), jax.new_ref(0))
    with pytest.raises(ValueError, match="Expected base_key to be a typed PRNG key; got"):
        StatefulPRNG(random.PRNGKey(0), jax.new_ref(0))
    with pytest.raises(ValueError, match=r"^Expected counter to be a scalar integer ref; got "
                                         r"0$"):
        StatefulPRNG(random.key(0), 0)


def test_a_split_generator_does_not_draw():
    grid = stateful_rng(0).split(3)
    for draw in (grid.key, grid.uniform, lambda: grid.spawn(2)):
        with pytest.raises(ValueError, match="^cannot operate on split stateful generator$"):
            draw()


@pytest.mark.parametrize("transform", [
    lambda f: jax.jit(f)(1.0), lambda f: jax.grad(f)(1.0), lambda f: jax.vmap(f)(jnp.ones(3)),
])
def test_default_seed_is_refused_in_transformed_code(transform):
    with pytest.raises(TypeError, match=r"^When used within transformed code, "
                                        r"jax\.experimental\.random\.stateful_rng\(\) requires "
                                        r"an explicit seed to be set\.$"):
        transform(lambda x: x + stateful_rng().uniform())


def test_sampler_errors_are_jaxs():
    rng = stateful_rng(0)
    with pytest.raises(TypeError, match="^randint only accepts integer dtypes, got float32$"):
        rng.integers(0, 10, dtype=jnp.float32)
    with pytest.raises(ValueError, match="dtype argument to `uniform` must be a float dtype, "
                                         "got int32"):
        rng.uniform(dtype=jnp.int32)
    with pytest.raises(TypeError, match="'float' object is not iterable"):
        rng.uniform(size=2.5)


def test_a_generator_is_not_a_result_of_jit():
    with pytest.raises(ValueError, match="mutable array references cannot be returned"):
        jax.jit(lambda r: r)(stateful_rng(0))
