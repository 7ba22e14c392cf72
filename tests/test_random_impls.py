"""JAX's newer key implementations: threefry4x32 (``key<fry4>``, 4 words), philox2x32
(``key<phx2>``, 1 word) and philox4x32 (``key<phx4>``, 2 words). Their hashes are held against
Random123's known answers (the vectors of JAX's tests/random_impl_test.py), and seeds, splits,
folds, bits and draws against JAX 0.10.2's values; then the keys' way through jit, vmap,
shard_map and a mesh, the default-implementation flag, and the errors."""
import re

import numpy as np
import pytest

import shardc
import shardc.numpy as jnp
from shardc import lax, random
from shardc.random._random123 import philox2x32_hash, philox4x32_hash, threefry4x32_hash
from shardc.sharding import NamedSharding, PartitionSpec as P

IMPLS = ["threefry4x32", "philox2x32", "philox4x32"]
TAGS = {"threefry4x32": "fry4", "philox2x32": "phx2", "philox4x32": "phx4"}
WORDS = {"threefry4x32": 4, "philox2x32": 1, "philox4x32": 2}


def _data(keys):
    return np.asarray(random.key_data(keys))


# --- the hashes: Random123's known answers -----------------------------------------------------

# (key, counter, expected), from random123/tests/kat_vectors as JAX 0.10.2's
# tests/random_impl_test.py gives them
_FF = 0xFFFFFFFF
PHILOX2x32_KAT = [
    ([0], [0, 0], [0xFF1DAE59, 0x6CD10DF2]),
    ([_FF], [_FF, _FF], [0x2C3F628B, 0xAB4FD7AD]),
    ([0x13198A2E], [0x243F6A88, 0x85A308D3], [0xDD7CE038, 0xF62A4C12]),
]
PHILOX4x32_KAT = [
    ([0, 0], [0, 0, 0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
    ([_FF, _FF], [_FF] * 4, [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
    ([0xA4093822, 0x299F31D0], [0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344],
     [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]),
]
THREEFRY4x32_KAT = [
    ([0] * 4, [0] * 4, [0x9C6CA96A, 0xE17EAE66, 0xFC10ECD4, 0x5256A7D8]),
    ([_FF] * 4, [_FF] * 4, [0x2A881696, 0x57012287, 0xF6C7446E, 0xA16A6732]),
    ([0xA4093822, 0x299F31D0, 0x082EFA98, 0xEC4E6C89],
     [0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344],
     [0x59CD1DBB, 0xB8879579, 0x86B5D00C, 0xAC8B6D84]),
]


@pytest.mark.parametrize("hash_fn, vectors", [(philox2x32_hash, PHILOX2x32_KAT),
                                              (philox4x32_hash, PHILOX4x32_KAT),
                                              (threefry4x32_hash, THREEFRY4x32_KAT)],
                         ids=["philox2x32", "philox4x32", "threefry4x32"])
def test_hashes_give_random123s_known_answers_eagerly_and_jitted(hash_fn, vectors):
    for key, counter, expected in vectors:
        words = [np.uint32(w) for w in key + counter]
        np.testing.assert_array_equal(np.asarray(hash_fn(*words), np.uint32), expected)
        jitted = shardc.jit(lambda *w: jnp.stack(hash_fn(*w)))(*words)
        np.testing.assert_array_equal(np.asarray(jitted), expected)


def test_hashes_broadcast_elementwise():
    counters = np.array([0, 0x243F6A88, _FF], np.uint32)
    outs = philox2x32_hash(np.uint32(7), counters, counters[::-1])
    for i in range(3):
        one = philox2x32_hash(np.uint32(7), counters[i], counters[::-1][i])
        assert [int(o[i]) for o in outs] == [int(w) for w in one]


# --- seeds, splits, folds, bits and draws: JAX 0.10.2's values ---------------------------------

# JAX 0.10.2's values (jax.random with impl=..., x64 off unless named), for key(42) unless
# named otherwise
JAX = {
    "threefry4x32": dict(
        key0=[2624366954, 3783175782, 4228967636, 1381410776],
        key42=[1605953687, 3689221460, 1722219033, 3178796034],
        key_neg1=[2535856969, 757880446, 1703251539, 2659320],
        split3=[[3188509147, 2083947553, 1469629592, 921930771],
                [361144456, 1418825268, 1547191614, 2559243763],
                [1650616655, 2909718409, 1895971994, 1205228181]],
        split2x2_last=[3638420798, 1056358023, 1845934114, 3863752555],
        fold7=[2445197787, 3874293641, 4221169969, 2984886860],
        fold_max=[3437258500, 3066825455, 3830011590, 3481965363],
        bits8=[113, 145, 86, 2, 176],
        bits16=[1393, 31377, 61782, 47106, 61104],
        bits32=[[2739996017, 3649338001, 3087855958], [731494402, 64614064, 2425576255]],
        uniform=[0.6379549503326416, 0.8496776819229126, 0.7189474105834961,
                 0.17031431198120117],
        normal=[0.35299789905548096, 1.0350520610809326, 0.5797175765037537],
        randint=[19, 22, 51, 31, 77, 75],
        key_x64=[3617711967, 3739764675, 2917855108, 609554591],
        bits64=[16831092290058782770, 15459856458627681051, 2723202120932536496],
        uniform64=[0.9124153413092877, 0.8380804979379093],
    ),
    "philox2x32": dict(
        key0=[4280135257],
        key42=[3991259024],
        key_neg1=[2246910722],
        split3=[[2171499443], [413155073], [2864015503]],
        split2x2_last=[2017172552],
        fold7=[684560128],
        fold_max=[520718382],
        bits8=[75, 107, 150, 87, 76],
        bits16=[65355, 8299, 37782, 25431, 2124],
        bits32=[[944504651, 856563819, 3743454102], [2331796311, 1668286540, 2308034990]],
        uniform=[0.21990954875946045, 0.1994342803955078, 0.8715907335281372,
                 0.542913556098938],
        normal=[-0.7724985480308533, -0.8436434864997864, 1.1339428424835205],
        randint=[84, 10, 62, 0, 62, 37],
        key_x64=[326457608],
        bits64=[9326519094073462008, 1774487527444324202, 12300852922594753305],
        uniform64=[0.5055916131760991, 0.09619516161517816],
    ),
    "philox4x32": dict(
        key0=[1713891541, 3781805453],
        key42=[3717705800, 533567081],
        key_neg1=[4130576541, 252180694],
        split3=[[2181901948, 3341115038], [969239790, 3857553174], [3980413867, 158073360]],
        split2x2_last=[2370221029, 1163415375],
        fold7=[41828760, 81464021],
        fold_max=[3417616313, 4023900599],
        bits8=[5, 207, 255, 79, 90],
        bits16=[12805, 58575, 44543, 35151, 8794],
        bits32=[[1373712901, 3223971023, 2207559167], [2345961807, 3130401370, 789166233]],
        uniform=[0.31984245777130127, 0.7506392002105713, 0.5139873027801514,
                 0.5462117195129395],
        normal=[-0.4681393802165985, 0.6765027046203613, 0.03506822511553764],
        randint=[61, 44, 58, 0, 10, 68],
        key_x64=[3070865155, 1409865214],
        bits64=[9371197513079807646, 6039109255449763556, 10865517904694927394],
        uniform64=[0.508013635123594, 0.32738076873179733],
    ),
}


@pytest.mark.parametrize("impl", IMPLS)
def test_seeds_give_jaxs_keys(impl):
    want = JAX[impl]
    np.testing.assert_array_equal(_data(random.key(0, impl=impl)), want["key0"])
    np.testing.assert_array_equal(_data(random.key(42, impl=impl)), want["key42"])
    np.testing.assert_array_equal(_data(random.key(-1, impl=impl)), want["key_neg1"])
    # the same from array seeds, jitted seeds, and PRNGKey's raw data
    np.testing.assert_array_equal(_data(random.key(np.int32(42), impl=impl)), want["key42"])
    np.testing.assert_array_equal(
        np.asarray(shardc.jit(lambda s: random.key_data(random.key(s, impl=impl)))(42)),
        want["key42"])
    raw = random.PRNGKey(42, impl=impl)
    assert raw.dtype == np.uint32 and raw.shape == (WORDS[impl],)
    np.testing.assert_array_equal(np.asarray(raw), want["key42"])
    # with x64 off JAX takes the seed's low 32 bits; with it on, its 64
    np.testing.assert_array_equal(_data(random.key(2 ** 40 + 42, impl=impl)), want["key42"])
    with shardc.enable_x64(True):
        np.testing.assert_array_equal(_data(random.key(2 ** 40 + 3, impl=impl)),
                                      want["key_x64"])


@pytest.mark.parametrize("impl", IMPLS)
def test_split_and_fold_in_give_jaxs_keys(impl):
    want, key = JAX[impl], random.key(42, impl=impl)
    keys = random.split(key, 3)
    assert keys.shape == (3,) and str(keys.dtype) == f"key<{TAGS[impl]}>"
    np.testing.assert_array_equal(_data(keys), want["split3"])
    grid = random.split(key, (2, 2))
    assert _data(grid).shape == (2, 2, WORDS[impl])
    # a key's counter is its row-major index: the shape's first keys are (3,)'s
    np.testing.assert_array_equal(_data(grid).reshape(4, -1)[:3], want["split3"])
    np.testing.assert_array_equal(_data(grid)[1, 1], want["split2x2_last"])
    assert _data(random.split(key, ())).shape == (WORDS[impl],)
    assert _data(random.split(key, 0)).shape == (0, WORDS[impl])
    np.testing.assert_array_equal(_data(random.fold_in(key, 7)), want["fold7"])
    np.testing.assert_array_equal(_data(random.fold_in(key, np.uint32(7))), want["fold7"])
    np.testing.assert_array_equal(_data(random.fold_in(key, 2 ** 32 - 1)), want["fold_max"])
    np.testing.assert_array_equal(_data(random.fold_in(key, np.int32(-1))), want["fold_max"])
    np.testing.assert_array_equal(_data(shardc.jit(random.fold_in)(key, 7)), want["fold7"])
    np.testing.assert_array_equal(
        _data(shardc.jit(lambda k: random.split(k, 3))(key)), want["split3"])


@pytest.mark.parametrize("impl", IMPLS)
def test_fold_in_is_split_at_the_index(impl):
    """As JAX's test_split_fold_in_equivalence: ``fold_in(key, i)`` is ``split(key, n)[i]``."""
    key = random.key(0, impl=impl)
    folded = shardc.vmap(lambda i: random.fold_in(key, i))(jnp.arange(5))
    np.testing.assert_array_equal(_data(folded), _data(random.split(key, 5)))


@pytest.mark.parametrize("impl", IMPLS)
def test_bits_and_draws_are_jaxs(impl):
    want, key = JAX[impl], random.key(42, impl=impl)
    for dtype, shape, name in [(np.uint8, (5,), "bits8"), (np.uint16, (5,), "bits16"),
                               (np.uint32, (2, 3), "bits32")]:
        got = random.bits(key, shape, dtype)
        assert got.dtype == dtype and got.shape == shape
        np.testing.assert_array_equal(np.asarray(got), want[name])
    # an element's bits depend on its index only: a longer draw starts with the same bits
    np.testing.assert_array_equal(np.asarray(random.bits(key, (9,), np.uint8))[:5],
                                  want["bits8"])
    np.testing.assert_array_equal(np.asarray(random.uniform(key, (4,))),
                                  np.float32(want["uniform"]))
    np.testing.assert_array_equal(np.asarray(random.normal(key, (3,))),
                                  np.float32(want["normal"]))
    np.testing.assert_array_equal(np.asarray(random.randint(key, (6,), 0, 100)), want["randint"])
    with shardc.enable_x64(True):
        got = random.bits(key, (3,), np.uint64)
        assert got.dtype == np.uint64
        np.testing.assert_array_equal(np.asarray(got), np.array(want["bits64"], np.uint64))
        np.testing.assert_array_equal(np.asarray(random.uniform(key, (2,), np.float64)),
                                      want["uniform64"])


@pytest.mark.parametrize("impl", IMPLS)
def test_draws_agree_eagerly_jitted_and_vmapped(impl):
    """As JAX's test_vmap_split and test_jit_compatible: the same keys draw the same values
    whichever way they are drawn."""
    keys = random.split(random.key(5, impl=impl), 4)
    eager = np.stack([np.asarray(random.uniform(k, (3,))) for k in keys])
    np.testing.assert_array_equal(
        np.asarray(shardc.vmap(lambda k: random.uniform(k, (3,)))(keys)), eager)
    np.testing.assert_array_equal(
        np.asarray(shardc.jit(shardc.vmap(lambda k: random.uniform(k, (3,))))(keys)), eager)
    seeded = shardc.jit(lambda s: random.normal(random.key(s, impl=impl), (4,)))
    np.testing.assert_array_equal(np.asarray(seeded(7)),
                                  np.asarray(random.normal(random.key(7, impl=impl), (4,))))
    # vmapped seeds and splits are each seed's and each key's
    seeds = shardc.vmap(lambda s: random.key_data(random.key(s, impl=impl)))(jnp.arange(3))
    np.testing.assert_array_equal(np.asarray(seeds),
                                  [_data(random.key(s, impl=impl)) for s in range(3)])
    splits = shardc.vmap(lambda k: random.split(k, 2))(keys)
    assert splits.shape == (4, 2) and str(splits.dtype) == f"key<{TAGS[impl]}>"
    np.testing.assert_array_equal(_data(splits)[2], _data(random.split(keys[2], 2)))


@pytest.mark.parametrize("impl", IMPLS)
def test_keys_split_per_device_and_sharded_over_a_mesh(impl):
    mesh = shardc.make_mesh((4,), ("i",))
    key = random.key(0, impl=impl)

    def per_device(k):
        return random.normal(random.fold_in(k, lax.axis_index("i")), (1, 3))

    out = shardc.jit(shardc.shard_map(per_device, mesh=mesh, in_specs=P(),
                                      out_specs=P("i")))(key)
    np.testing.assert_array_equal(np.asarray(out), np.concatenate(
        [np.asarray(random.normal(random.fold_in(key, i), (1, 3))) for i in range(4)]))

    keys = random.split(key, 4)

    def own_key(k):
        assert k.shape == (1,) and str(k.dtype) == f"key<{TAGS[impl]}>"
        return random.uniform(k[0], (1, 2))

    out = shardc.shard_map(own_key, mesh=mesh, in_specs=P("i"), out_specs=P("i"))(keys)
    expected = np.stack([np.asarray(random.uniform(k, (2,))) for k in keys])
    np.testing.assert_array_equal(np.asarray(out), expected)
    laid = shardc.device_put(keys, NamedSharding(mesh, P("i")))
    assert laid.sharding.spec == P("i")
    drawn = shardc.jit(shardc.vmap(lambda k: random.uniform(k, (2,))))(laid)
    np.testing.assert_array_equal(np.asarray(drawn), expected)


# --- naming, the default implementation, errors ------------------------------------------------

@pytest.mark.parametrize("impl", IMPLS)
def test_key_dtypes_reprs_and_impls_are_jaxs(impl):
    key = random.key(3, impl=impl)
    tag = TAGS[impl]
    assert key.dtype.name == str(key.dtype) == f"key<{tag}>"
    assert key.dtype.itemsize == 4 * WORDS[impl]
    assert random.key_dtype(impl) == key.dtype
    assert str(random.key_impl(key)) == impl and repr(random.key_impl(key)) == repr(impl)
    assert random.key_impl(key) == impl
    assert repr(key).startswith(f"Array((), dtype=key<{tag}>) overlaying:\n[")
    assert random.key(3, dtype=key.dtype).dtype == key.dtype
    wrapped = random.wrap_key_data(random.key_data(random.split(key, 2)), impl=impl)
    assert wrapped.shape == (2,) and wrapped.dtype == key.dtype
    assert random.key_impl(wrapped) == impl


@pytest.mark.parametrize("impl", IMPLS)
def test_the_default_implementation_flag_makes_these_keys_and_takes_raw_data_so(impl):
    try:
        shardc.config.update("jax_default_prng_impl", impl)
        assert str(random.key(42).dtype) == f"key<{TAGS[impl]}>"
        raw = random.PRNGKey(42)
        np.testing.assert_array_equal(np.asarray(raw), JAX[impl]["key42"])
        assert str(random.key_impl(raw)) == impl
        np.testing.assert_array_equal(np.asarray(random.uniform(raw, (4,))),
                                      np.float32(JAX[impl]["uniform"]))
        np.testing.assert_array_equal(np.asarray(random.split(raw, 3)), JAX[impl]["split3"])
        np.testing.assert_array_equal(np.asarray(random.fold_in(raw, 7)), JAX[impl]["fold7"])
    finally:
        shardc.config.update("jax_default_prng_impl", "threefry2x32")


def test_unknown_implementations_are_jaxs_errors():
    with pytest.raises(ValueError, match='unrecognized PRNG implementation "philox". Did you '
                       'mean one of: "philox2x32", "philox4x32", "threefry2x32", "rbg", '
                       '"unsafe_rbg", "threefry4x32"\\?'):
        random.key(0, impl="philox")
    with pytest.raises(ValueError, match="'threefry2x32', 'threefry4x32', 'rbg', 'unsafe_rbg', "
                                         "'philox2x32', 'philox4x32'"):
        shardc.config.update("jax_default_prng_impl", "philox")


@pytest.mark.parametrize("impl", IMPLS)
def test_bad_seeds_and_key_data_are_jaxs_errors(impl):
    with pytest.raises(TypeError, match="PRNG key seed must be an integer"):
        random.key(1.5, impl=impl)
    with pytest.raises(TypeError, match="key accepts a scalar seed, but was given an array of "
                                        "shape \\(3,\\)"):
        random.key(jnp.arange(3), impl=impl)
    words = WORDS[impl]
    for shape in [(3,), (2, 5)]:
        with pytest.raises(TypeError, match=re.escape(
                f"expected key_data.shape to end with ({words},); got shape={shape} for "
                f"impl={impl}")):
            random.wrap_key_data(jnp.zeros(shape, jnp.uint32), impl=impl)
    with pytest.raises(TypeError, match="expected key_data.ndim >= 1; got ndim=0"):
        random.wrap_key_data(jnp.zeros((), jnp.uint32), impl=impl)
    with pytest.raises(TypeError, match="expected key_data.dtype = uint32; got dtype=int32"):
        random.wrap_key_data(jnp.zeros((words,), jnp.int32), impl=impl)
    keys = random.split(random.key(0, impl=impl), 2)
    with pytest.raises(ValueError, match="split accepts a single key, but was given a key "
                                         "array of shape \\(2,\\)"):
        random.split(keys)
    with pytest.raises(ValueError, match="uniform accepts a single key"):
        random.uniform(keys)
    with pytest.raises(TypeError, match="key arrays can only be combined with key arrays of "
                                        "the same implementation"):
        jnp.concatenate([keys, random.split(random.key(0), 2)])
