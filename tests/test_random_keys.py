"""Typed PRNG keys: the structure JAX gives them (dtype, shape, key data, split, indexing,
reshaping) and their way through jit, vmap, scan and shard_map. Bits are shardc's own, so
values are held against the same draw made another way, never against JAX's numbers."""
import numpy as np
import pytest

import shardc
import shardc.numpy as jnp
from shardc import lax, random
from shardc.sharding import PartitionSpec as P


def _data(keys):
    return np.asarray(random.key_data(keys))


# --- structure ---------------------------------------------------------------------------------

def test_a_key_is_a_scalar_of_key_dtype_over_two_words():
    key = random.key(42)
    assert key.shape == () and key.ndim == 0 and key.size == 1
    assert str(key.dtype) == "key<fry>" and key.dtype.name == "key<fry>"
    assert isinstance(key, shardc.Array) and isinstance(key, jnp.ndarray)
    data = random.key_data(key)
    assert data.dtype == np.uint32 and data.shape == (2,)
    np.testing.assert_array_equal(np.asarray(data), random.PRNGKey(42))
    assert repr(key) == "Array((), dtype=key<fry>) overlaying:\n[ 0 42]"
    assert str(random.key_impl(key)) == "threefry2x32"


def test_raw_keys_stay_raw_and_seeds_fill_the_low_word_as_in_jax():
    raw = random.PRNGKey(7)
    assert isinstance(raw, shardc.Array) and raw.dtype == np.uint32 and raw.shape == (2,)
    np.testing.assert_array_equal(np.asarray(raw), [0, 7])
    np.testing.assert_array_equal(np.asarray(random.PRNGKey(-1)), [0, 2 ** 32 - 1])
    # JAX 0.10.2 takes the seed as a 32-bit integer with x64 off (the high word stays 0),
    # as a 64-bit one with it on
    np.testing.assert_array_equal(np.asarray(random.PRNGKey(2 ** 40 + 3)), [0, 3])
    np.testing.assert_array_equal(np.asarray(random.PRNGKey(-2 ** 31 - 1)), [0, 2 ** 31 - 1])
    with shardc.enable_x64(True):
        np.testing.assert_array_equal(np.asarray(random.PRNGKey(2 ** 40 + 3)), [2 ** 8, 3])
        np.testing.assert_array_equal(np.asarray(random.PRNGKey(-1)), [2 ** 32 - 1] * 2)
    with pytest.raises(OverflowError, match="too large to convert to int64"):
        random.PRNGKey(2 ** 64)


def test_rbg_keys_have_four_words():
    key = random.key(3, impl="rbg")
    assert str(key.dtype) == "key<rbg>" and _data(key).shape == (4,)
    assert random.PRNGKey(3, impl="unsafe_rbg").shape == (4,)
    keys = random.split(key, 5)
    assert keys.shape == (5,) and str(keys.dtype) == "key<rbg>" and _data(keys).shape == (5, 4)
    assert random.uniform(key, (3,)).shape == (3,)
    with pytest.raises(ValueError,
                       match='unrecognized PRNG implementation "philox". Did you mean one of'):
        random.key(0, impl="philox")


def test_split_gives_typed_keys_that_index_reshape_and_iterate():
    key = random.key(0)
    keys = random.split(key, 6)
    assert keys.shape == (6,) and str(keys.dtype) == "key<fry>"
    data = _data(keys)
    assert data.shape == (6, 2)
    assert len({tuple(row) for row in data}) == 6          # six different keys
    np.testing.assert_array_equal(data, np.asarray(random.split(random.PRNGKey(0), 6)))
    np.testing.assert_array_equal(_data(keys[2]), data[2])
    np.testing.assert_array_equal(_data(keys[1:4]), data[1:4])
    grid = keys.reshape(2, 3)
    assert grid.shape == (2, 3)
    np.testing.assert_array_equal(_data(grid), data.reshape(2, 3, 2))
    np.testing.assert_array_equal(_data(grid[..., 1]), data.reshape(2, 3, 2)[:, 1])
    np.testing.assert_array_equal(_data(grid.T), data.reshape(2, 3, 2).transpose(1, 0, 2))
    assert keys.reshape(-1, 2).shape == (3, 2) and grid.ravel().shape == (6,)
    first, *rest = keys
    assert first.shape == () and len(rest) == 5
    np.testing.assert_array_equal(np.asarray(keys == keys), [True] * 6)
    np.testing.assert_array_equal(np.asarray(keys[0] != keys[1]), True)
    assert random.split(key, (2, 3)).shape == (2, 3)
    with pytest.raises(ValueError, match="cannot reshape a key array of size 6"):
        keys.reshape(4)


def test_wrap_key_data_inverts_key_data():
    keys = random.split(random.key(1), 3)
    again = random.wrap_key_data(random.key_data(keys))
    np.testing.assert_array_equal(np.asarray(again == keys), [True] * 3)
    # JAX's TypeErrors for invalid key data, from wrap_key_data and from a raw key alike
    with pytest.raises(TypeError, match=r"invalid PRNG key data: expected key_data.dtype = "
                                        r"uint32; got dtype=int32"):
        random.wrap_key_data(np.zeros((3, 2), np.int32))
    with pytest.raises(TypeError, match=r"invalid PRNG key data: expected key_data.shape to "
                                        r"end with \(2,\); got shape=\(3, 4\)"):
        random.wrap_key_data(np.zeros((3, 4), np.uint32))
    with pytest.raises(TypeError, match=r"expected key_data.shape to end with \(2,\); got "
                                        r"shape=\(3,\)"):
        random.normal(np.zeros(3, np.uint32), (2,))
    with pytest.raises(TypeError, match=r"expected key_data.dtype = uint32; got dtype=int32"):
        random.normal(np.zeros(2, np.int32), (2,))
    # a size given as a concrete integer array, as JAX takes it
    assert random.split(random.key(0), jnp.int32(3)).shape == (3,)
    assert random.normal(random.key(0), (jnp.int32(3), 2)).shape == (3, 2)
    with pytest.raises(TypeError, match="key_data"):
        np.asarray(keys)


def test_samplers_take_either_kind_and_reject_a_batch_of_keys():
    key = random.key(5)
    for sample in (lambda k: random.normal(k, (4,)), lambda k: random.uniform(k, (2, 3)),
                   lambda k: random.randint(k, (5,), 0, 10), lambda k: random.bits(k, (3,)),
                   lambda k: random.bernoulli(k, 0.5, (4,))):
        typed, raw = sample(key), sample(random.key_data(key))
        assert typed.dtype == raw.dtype and typed.shape == raw.shape
        np.testing.assert_array_equal(np.asarray(typed), np.asarray(raw))
    with pytest.raises(ValueError, match=r"normal accepts a single key, but was given a key "
                                         r"array of shape \(3,\) != \(\)\. Use jax.vmap"):
        random.normal(random.split(key, 3), (2,))
    with pytest.raises(ValueError, match=r"uniform accepts a single key.*shape \(3,\)"):
        random.uniform(random.split(random.PRNGKey(0), 3))


def test_fold_in_keeps_the_kind_of_key():
    key = random.key(0)
    folded = random.fold_in(key, 3)
    assert folded.shape == () and str(folded.dtype) == "key<fry>"
    np.testing.assert_array_equal(_data(folded), np.asarray(random.fold_in(random.PRNGKey(0), 3)))
    assert not np.array_equal(_data(folded), _data(random.fold_in(key, 4)))


# --- through transformations -------------------------------------------------------------------

def test_keys_through_jit_in_and_out():
    key = random.key(9)
    split = shardc.jit(lambda k: random.split(k, 3))
    keys = split(key)
    assert keys.shape == (3,) and str(keys.dtype) == "key<fry>"
    np.testing.assert_array_equal(_data(keys), _data(random.split(key, 3)))
    draw = shardc.jit(lambda k, x: x + random.normal(k, x.shape))
    x = jnp.zeros((4,))
    np.testing.assert_array_equal(np.asarray(draw(key, x)), np.asarray(random.normal(key, (4,))))
    split(key)
    assert split.trace_count == 1


def test_keys_through_vmap_match_one_key_at_a_time():
    keys = random.split(random.key(2), 4)
    batched = shardc.vmap(lambda k: random.normal(k, (3,)))(keys)
    one_by_one = np.stack([np.asarray(random.normal(k, (3,))) for k in keys])
    np.testing.assert_array_equal(np.asarray(batched), one_by_one)
    resplit = shardc.vmap(random.split)(keys)
    assert resplit.shape == (4, 2) and str(resplit.dtype) == "key<fry>"


def test_keys_as_scan_inputs_and_carries():
    keys = random.split(random.key(4), 5)

    def step(carry, k):
        carry_key, total = carry
        carry_key, sub = random.split(carry_key)
        return (carry_key, total + random.uniform(k) + random.uniform(sub)), random.uniform(k)

    (last, total), ys = lax.scan(step, (random.key(1), 0.0), keys)
    assert last.shape == () and str(last.dtype) == "key<fry>"
    expected = np.array([np.asarray(random.uniform(k)) for k in keys])
    np.testing.assert_allclose(np.asarray(ys), expected)


@pytest.mark.parametrize("jit", [False, True])
def test_a_replicated_key_split_per_device_with_fold_in(jit):
    mesh = shardc.make_mesh((4,), ("i",))
    key = random.key(0)

    def body(k):
        mine = random.fold_in(k, lax.axis_index("i"))
        return random.normal(mine, (1, 3))

    f = shardc.shard_map(body, mesh=mesh, in_specs=P(), out_specs=P("i"))
    out = np.asarray((shardc.jit(f) if jit else f)(key))
    expected = np.concatenate([np.asarray(random.normal(random.fold_in(key, i), (1, 3)))
                               for i in range(4)])
    np.testing.assert_array_equal(out, expected)
    assert len({tuple(row) for row in out}) == 4


def test_keys_sharded_over_the_mesh():
    mesh = shardc.make_mesh((4,), ("i",))
    keys = random.split(random.key(8), 4)

    def body(k):                      # each device gets a key array of shape (1,)
        assert k.shape == (1,) and str(k.dtype) == "key<fry>"
        return random.uniform(k[0], (1, 2))

    out = shardc.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"))(keys)
    expected = np.stack([np.asarray(random.uniform(k, (2,))) for k in keys])
    np.testing.assert_array_equal(np.asarray(out), expected)


def test_a_key_arrays_sharding_is_over_the_keys_not_their_words():
    """As JAX's: a key array's spec has one entry per key dimension (its data's trailing
    dimension of words is not in it); ``key_data`` spells its data's spec in full."""
    mesh = shardc.make_mesh((2, 4), ("x", "y"))
    with shardc.set_mesh(mesh):
        key = random.key(0)
        rows = [(key, P()), (random.split(key, 8), P(None)),
                (random.split(key, (2, 4)), P(None, None)), (random.split(key, 8)[0], P()),
                (random.fold_in(key, 3), P()),
                (random.wrap_key_data(jnp.zeros((4, 2), jnp.uint32)), P(None)),
                (shardc.device_put(random.split(key, 8), P()), P(None)),
                (shardc.device_put(random.split(key, 8), P("x")), P("x")),
                (shardc.device_put(random.split(key, 8), P("x")).reshape(2, 4), P("x", None))]
        for keys, spec in rows:
            assert keys.sharding.spec == spec, (keys.shape, keys.sharding.spec)
        data = random.key_data(shardc.device_put(random.split(key, 8), P("x")))
        assert data.sharding.spec == P("x", None)
        np.testing.assert_array_equal(np.asarray(data),
                                      np.asarray(random.key_data(random.split(key, 8))))


def test_keys_laid_out_on_a_mesh_index_by_slices_and_iterate_to_one_device():
    """JAX indexes a key array's data by its slice paths, eagerly too: a slice that divides
    a split dimension keeps the split (an array of numbers, laid out so, is indexed eagerly
    by a gather its type refuses); iterating gives keys on one device each."""
    from shardc.sharding import AxisType, NamedSharding, ShardingTypeError
    keys = random.split(random.key(0), 8)
    want = np.asarray(random.key_data(keys))
    explicit = shardc.make_mesh((4, 2), ("x", "y"))
    laid = shardc.device_put(keys, NamedSharding(explicit, P("x")))
    for index, rows in ((slice(4, 8), slice(4, 8)), (slice(None, None, 2), slice(None, None, 2)),
                        (slice(None, 4), slice(None, 4))):
        part = laid[index]
        assert str(shardc.typeof(part)) == "key<fry>[4@x]"
        np.testing.assert_array_equal(np.asarray(random.key_data(part)), want[rows])
    with pytest.raises(ShardingTypeError):
        laid[3]                       # one key of a split dimension: JAX's slicing error
    with pytest.raises(ShardingTypeError):
        shardc.device_put(want, NamedSharding(explicit, P("x")))[4:8]
    auto = shardc.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    grid = shardc.device_put(random.split(random.key(1), (8, 2)), NamedSharding(auto, P("x", "y")))
    assert grid[::2].sharding.spec == P("x", "y")
    rows = list(laid)
    assert len(rows) == 8 and all(not isinstance(k.sharding, NamedSharding) for k in rows)
    np.testing.assert_array_equal(np.asarray(random.key_data(rows[5])), want[5])


def test_key_data_of_keys_laid_out_on_a_mesh_under_jit_and_their_types():
    """key_data of a key array laid out on a mesh, traced, is its data as it is (it used to
    respell a traced value and fail); a key array split over a tuple of axes prints them."""
    from shardc.sharding import NamedSharding
    for types in ("Auto", "Explicit"):
        axis_type = getattr(shardc.sharding.AxisType, types)
        mesh = shardc.make_mesh((2, 4), ("x", "y"), axis_types=(axis_type,) * 2)
        keys = random.split(random.key(5), 8)
        want = np.asarray(random.key_data(keys))
        for spec in (P(), P("x"), P(("x", "y"))):
            placed = shardc.device_put(keys, NamedSharding(mesh, spec))
            np.testing.assert_array_equal(np.asarray(shardc.jit(random.key_data)(placed)), want)
        one = shardc.device_put(random.key(0), NamedSharding(mesh, P()))
        np.testing.assert_array_equal(np.asarray(shardc.jit(random.key_data)(one)), [0, 0])
    mesh = shardc.make_mesh((2, 4), ("x", "y"))
    keys = shardc.device_put(random.split(random.key(1), 8), NamedSharding(mesh, P(("x", "y"))))
    assert str(shardc.typeof(keys)) == "key<fry>[8@(x,y)]"
    pairs = shardc.jit(shardc.vmap(lambda k: random.split(k, 2)))(keys)
    assert str(shardc.typeof(pairs)) == "key<fry>[8@(x,y),2]"
    grid = shardc.device_put(random.split(random.key(1), (8, 8)),
                             NamedSharding(mesh, P(("y", "x"), None)))
    assert str(shardc.typeof(grid)) == "key<fry>[8@(y,x),8]"


def test_a_key_arrays_cotangent_is_float0_of_the_keys_shape():
    """grad(allow_int=True) and vjp with respect to keys give float0 zeros shaped as the keys
    (JAX's), not keys over float0 words (which failed as soon as they were used)."""
    def loss(w, k):
        return jnp.sum(w * random.uniform(k.reshape(-1)[0], w.shape))

    w = jnp.ones(3)
    for keys in (random.key(0), random.split(random.key(0), 4)):
        grads = [shardc.grad(loss, argnums=1, allow_int=True)(w, keys),
                 shardc.jit(shardc.grad(loss, argnums=1, allow_int=True))(w, keys),
                 shardc.grad(loss, argnums=(0, 1), allow_int=True)(w, keys)[1],
                 shardc.vjp(loss, w, keys)[1](1.0)[1]]
        for g in grads:
            assert isinstance(g, np.ndarray) and g.dtype == shardc.dtypes.float0
            assert g.shape == keys.shape
            assert str(shardc.typeof(g)) == f"float0[{','.join(map(str, keys.shape))}]"


def test_key_from_a_traced_seed():
    make = shardc.jit(lambda seed: random.key_data(random.key(seed)))
    np.testing.assert_array_equal(np.asarray(make(jnp.int32(11))), [0, 11])


def test_key_arrays_are_leaves_of_user_pytrees():
    key = random.key(0)
    state = {"key": key, "keys": random.split(key, 3), "w": jnp.ones(2)}
    shapes = shardc.tree_util.tree_map(lambda x: x.shape, state)
    assert shapes == {"key": (), "keys": (3,), "w": (2,)}
    leaves, treedef = shardc.tree_util.tree_flatten(state)
    assert [type(leaf).__name__ for leaf in leaves] == ["PRNGKeyArray", "PRNGKeyArray", "Array"]
    rebuilt = shardc.tree_util.tree_unflatten(treedef, leaves)
    assert rebuilt["key"] is key
    resplit = shardc.tree_util.tree_map(lambda k: random.split(k, 2), {"a": key, "b": key})
    assert resplit["a"].shape == (2,) and str(resplit["b"].dtype) == "key<fry>"
    # through jit, the same tree comes back with its keys
    out = shardc.jit(lambda s: s)(state)
    assert out["keys"].shape == (3,) and str(out["key"].dtype) == "key<fry>"


def test_squeeze_transpose_and_keys_from_batched_seeds():
    keys = random.split(random.key(0), 4).reshape(1, 4, 1)
    data = _data(keys)
    assert keys.squeeze().shape == (4,) and keys.squeeze(0).shape == (4, 1)
    np.testing.assert_array_equal(_data(keys.transpose(1, 0, 2)), data.transpose(1, 0, 2, 3))
    with pytest.raises(ValueError, match="size not equal to one"):
        keys.squeeze(1)
    made = shardc.vmap(random.key)(jnp.arange(4))
    assert made.shape == (4,) and str(made.dtype) == "key<fry>"
    np.testing.assert_array_equal(_data(made), [[0, s] for s in range(4)])


def test_typeof_a_key_array():
    keys = random.split(random.key(0), 4)
    t = shardc.typeof(keys)
    assert str(t) == "key<fry>[4]" and t.shape == (4,) and str(t.dtype) == "key<fry>"
    seen = []

    def body(k):
        seen.append(shardc.typeof(k))
        return random.uniform(k[0], (1,))

    mesh = shardc.make_mesh((4,), ("i",))
    shardc.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"))(keys)
    assert str(seen[0]) == "key<fry>[1]{V:i}" and seen[0].vma == frozenset({"i"})


def test_legacy_prng_key_flag_takes_warns_or_refuses_raw_key_data():
    import warnings
    raw = random.PRNGKey(0)
    allowed = np.asarray(random.normal(raw, (2,)))
    text = ("Legacy uint32 key array passed as key to jax.random function. Please create keys "
            "using jax.random.key(). If use of a raw key array was intended, set "
            "jax_legacy_prng_key=\"allow\".")
    with shardc.legacy_prng_key("error"):
        with pytest.raises(ValueError) as info:
            random.normal(raw, (2,))
        assert str(info.value) == text
        random.normal(random.key(0), (2,))       # typed keys are fine
    with shardc.legacy_prng_key("warn"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        np.testing.assert_array_equal(np.asarray(random.normal(raw, (2,))), allowed)
    assert {str(w.message) for w in caught} == {text}

    @shardc.legacy_prng_key("allow")
    def sample():
        return random.uniform(raw)
    with shardc.legacy_prng_key("error"):
        sample()
    # key_data and key_impl read raw key data as the default implementation's keys, where
    # the flag allows raw keys (JAX's)
    assert str(random.key_impl(raw)) == "threefry2x32"
    np.testing.assert_array_equal(np.asarray(random.key_data(raw)), np.asarray(raw))
    with shardc.legacy_prng_key("error"):
        for read in (random.key_data, random.key_impl):
            with pytest.raises(ValueError, match="Legacy uint32 key array"):
                read(raw)
    for bad in (np.zeros(2, np.float32), np.zeros(3, np.uint32)):
        for read in (random.key_data, random.key_impl):
            with pytest.raises(TypeError, match="invalid PRNG key data"):
                read(bad)


def test_rejection_samplers_with_a_varying_key_in_a_body():
    """gamma, beta and poisson loop until every entry is accepted: with a key varying over a
    mesh axis their loop state varies from the start (it was typed invariant and refused)."""
    mesh = shardc.make_mesh((2,), ("dp",), axis_types=(shardc.sharding.AxisType.Auto,))
    draws = {
        "beta": lambda k, y: random.beta(k, y, y),
        "gamma": lambda k, y: random.gamma(k, y),
        "poisson": lambda k, y: random.poisson(k, y * 3).astype(jnp.float32),
    }
    for name, draw in draws.items():
        f = shardc.shard_map(lambda k, y: draw(lax.pcast(k, ("dp",), to="varying"), y),
                             mesh=mesh, in_specs=(P(), P("dp")), out_specs=P("dp"))
        out = np.asarray(f(random.key(42), jnp.ones((64, 1))))
        first, second = out.reshape(2, 32)
        # the same key on both devices: the same draws (JAX's), each a valid sample
        np.testing.assert_array_equal(first, second)
        assert np.isfinite(out).all() and (out >= 0).all(), name


def test_a_split_key_arrays_type_names_its_split():
    mesh = shardc.make_mesh((4, 2), ("X", "Y"))
    keys = shardc.device_put(random.split(random.key(0), 8),
                             shardc.NamedSharding(mesh, P("X")))
    assert str(shardc.typeof(keys)) == "key<fry>[8@X]"
    assert str(shardc.typeof(random.key(1))) == "key<fry>[]"


def test_functions_that_move_elements_take_key_arrays():
    """where, lax.select, concatenate, stack, take and broadcast_to act on key arrays as on
    any array (JAX's): the keys move whole, and each still draws what it drew."""
    keys = random.split(random.key(0), 4)
    data = _data(keys)
    pick = np.array([True, False, True, False])
    cases = {
        "where": (jnp.where(pick, keys, keys[::-1]), np.where(pick[:, None], data, data[::-1])),
        "select": (lax.select(pick, keys, keys[::-1]),
                   np.where(pick[:, None], data, data[::-1])),
        "concatenate": (jnp.concatenate([keys, keys[:1]]), np.concatenate([data, data[:1]])),
        "stack": (jnp.stack([keys[0], keys[3]], axis=-1), np.stack([data[0], data[3]])),
        "take": (jnp.take(keys, jnp.array([3, 0]), axis=0), data[[3, 0]]),
        "broadcast_to": (jnp.broadcast_to(keys[1], (3,)), np.broadcast_to(data[1], (3, 2))),
    }
    for name, (got, want) in cases.items():
        assert shardc.dtypes.issubdtype(got.dtype, shardc.dtypes.prng_key), name
        np.testing.assert_array_equal(_data(got), want, err_msg=name)
    # a key drawn from after moving draws as before
    moved = jnp.where(pick, keys, keys[::-1])
    np.testing.assert_array_equal(np.asarray(random.uniform(moved[0])),
                                  np.asarray(random.uniform(keys[0])))
    with pytest.raises(TypeError, match="key arrays can only be combined with key arrays"):
        jnp.where(pick, keys, np.zeros((4,), np.uint32))


def test_more_functions_that_move_elements_take_key_arrays():
    """reshape (shape= too), expand_dims, broadcast_arrays, tile, append, array/asarray,
    lax.slice, slice_in_dim, dynamic_slice(_in_dim) and dynamic_update_slice(_in_dim) act on
    key arrays as on any array (JAX's), under jit too."""
    keys = random.split(random.key(0), 4)
    key = random.key(7)
    data, one = _data(keys), _data(key)
    cases = {
        "reshape": (lambda: jnp.reshape(keys, shape=(2, 2)), data.reshape(2, 2, 2)),
        "ravel": (lambda: jnp.ravel(keys.reshape(2, 2)), data),
        "expand_dims": (lambda: jnp.expand_dims(keys, -1), data[:, None]),
        "broadcast_arrays": (lambda: jnp.broadcast_arrays(key, keys)[0],
                             np.broadcast_to(one, (4, 2))),
        "tile": (lambda: jnp.tile(key, 3), np.tile(one, (3, 1))),
        "append": (lambda: jnp.append(keys, key), np.concatenate([data, one[None]])),
        "array": (lambda: jnp.array(keys), data),
        "asarray": (lambda: jnp.asarray(keys, dtype=keys.dtype), data),
        "slice": (lambda: lax.slice(keys, (1,), (3,)), data[1:3]),
        "slice_in_dim": (lambda: lax.slice_in_dim(keys, 1, 3), data[1:3]),
        "dynamic_slice": (lambda: lax.dynamic_slice_in_dim(keys, np.int16(1), 2), data[1:3]),
        "dynamic_update_slice": (lambda: lax.dynamic_update_slice(keys, key[None], (2,)),
                                 np.concatenate([data[:2], one[None], data[3:]])),
        "dynamic_update_slice_in_dim": (
            lambda: lax.dynamic_update_slice_in_dim(keys, key[None], 0, axis=0),
            np.concatenate([one[None], data[1:]])),
    }
    for name, (make, want) in cases.items():
        for got in (make(), shardc.jit(make)()):
            assert got.dtype == keys.dtype, name
            np.testing.assert_array_equal(_data(got), want, err_msg=name)
    assert jnp.shape(keys) == (4,) and jnp.ndim(keys) == 1
    assert jnp.result_type(keys) == keys.dtype


def test_functions_that_transpose_flip_roll_and_split_take_key_arrays():
    """transpose, swapaxes, moveaxis, flip, roll, squeeze, split, array_split, unstack,
    hstack, vstack, atleast_2d, copy, size and array of a list of keys act on the keys, their
    words kept together (JAX's), under jit too."""
    keys = random.split(random.key(0), (2, 3))
    data = _data(keys)
    cases = {
        "transpose": (lambda: jnp.transpose(keys), data.transpose(1, 0, 2)),
        "swapaxes": (lambda: jnp.swapaxes(keys, 0, -1), data.transpose(1, 0, 2)),
        "moveaxis": (lambda: jnp.moveaxis(keys, 0, -1), data.transpose(1, 0, 2)),
        "flip": (lambda: jnp.flip(keys), data[::-1, ::-1]),
        "flip axis": (lambda: jnp.flip(keys, -1), data[:, ::-1]),
        "fliplr": (lambda: jnp.fliplr(keys), data[:, ::-1]),
        "roll": (lambda: jnp.roll(keys, 1), np.roll(data.reshape(6, 2), 1, 0).reshape(2, 3, 2)),
        "roll axis": (lambda: jnp.roll(keys, -1, axis=-1), np.roll(data, -1, 1)),
        "squeeze": (lambda: jnp.squeeze(keys[:1]), data[0]),
        "split": (lambda: jnp.split(keys, 3, axis=1)[1], data[:, 1:2]),
        "array_split": (lambda: jnp.array_split(keys, 2, axis=1)[0], data[:, :2]),
        "unstack": (lambda: jnp.unstack(keys, axis=1)[2], data[:, 2]),
        "hstack": (lambda: jnp.hstack([keys, keys]), np.concatenate([data, data], 1)),
        "vstack": (lambda: jnp.vstack([keys, keys]), np.concatenate([data, data], 0)),
        "atleast_2d": (lambda: jnp.atleast_2d(keys[0, 0]), data[0, 0][None, None]),
        "copy": (lambda: jnp.copy(keys), data),
        "array of keys": (lambda: jnp.array([keys[0, 0], keys[1, 1]]), data[[0, 1], [0, 1]]),
    }
    for name, (make, want) in cases.items():
        for got in (make(), shardc.jit(make)()):
            assert got.dtype == keys.dtype, name
            np.testing.assert_array_equal(_data(got), want, err_msg=name)
    assert jnp.size(keys) == 6 and jnp.size(keys, 1) == 3


def test_lax_functions_that_move_elements_take_key_arrays():
    """lax.concatenate, transpose, broadcast_in_dim, broadcast, select_n and jnp.repeat act on
    the keys, their words kept together (JAX's), under jit too; their shape checks still
    apply."""
    keys = random.split(random.key(0), (2, 3))
    data = _data(keys)
    which = np.array([[True, False, True], [False, False, True]])
    cases = {
        "concatenate": (lambda: lax.concatenate([keys, keys[:1]], 0),
                        np.concatenate([data, data[:1]], 0)),
        "transpose": (lambda: lax.transpose(keys, (1, 0)), data.transpose(1, 0, 2)),
        "broadcast_in_dim": (lambda: lax.broadcast_in_dim(keys, (4, 2, 3), (1, 2)),
                             np.broadcast_to(data, (4, 2, 3, 2))),
        "broadcast_in_dim size 1": (lambda: lax.broadcast_in_dim(keys[:1], (2, 3, 5), (0, 1)),
                                    np.broadcast_to(data[:1, :, None], (2, 3, 5, 2))),
        "broadcast": (lambda: lax.broadcast(keys, (5,)), np.broadcast_to(data, (5, 2, 3, 2))),
        "select_n": (lambda: lax.select_n(which, keys, keys[::-1]),
                     np.where(which[..., None], data[::-1], data)),
        "select_n scalar": (lambda: lax.select_n(True, keys, keys[::-1]), data[::-1]),
        "repeat": (lambda: jnp.repeat(keys, 2, axis=1), np.repeat(data, 2, 1)),
        "repeat flat": (lambda: jnp.repeat(keys, 2), np.repeat(data.reshape(6, 2), 2, 0)),
    }
    for name, (make, want) in cases.items():
        for got in (make(), shardc.jit(make)()):
            assert got.dtype == keys.dtype, name
            np.testing.assert_array_equal(_data(got), want, err_msg=name)
    with pytest.raises(TypeError, match="concatenate dimension out of bounds"):
        lax.concatenate([keys, keys], 2)
    with pytest.raises(TypeError, match="permutation"):
        lax.transpose(keys, (0, 0))
    with pytest.raises(TypeError, match="same implementation"):
        lax.select_n(True, keys, random.split(random.key(0, impl="rbg"), (2, 3)))


def test_take_of_keys_fills_out_of_bounds_by_default():
    """jnp.take of keys defaults to mode 'fill' (JAX's): a negative index in bounds wraps, one
    out of bounds gives a key whose words are all ones; 'clip' and 'wrap' as asked."""
    keys = random.split(random.key(1), (3, 4))
    data = _data(keys)
    fill = np.full((2,), 0xFFFFFFFF, np.uint32)
    got = _data(jnp.take(keys, jnp.array([-1, 7, 2]), axis=1))
    np.testing.assert_array_equal(got, np.stack([data[:, 3], np.broadcast_to(fill, (3, 2)),
                                                 data[:, 2]], 1))
    got = _data(shardc.jit(lambda k: jnp.take(k, jnp.array([-13, 0])))(keys))
    np.testing.assert_array_equal(got, np.stack([fill, data[0, 0]]))
    np.testing.assert_array_equal(_data(jnp.take(keys, jnp.array([9]), axis=0, mode="clip")),
                                  data[2:])
    np.testing.assert_array_equal(_data(keys.take(jnp.array([5]), axis=1, mode="wrap")),
                                  data[:, 1:2])


def test_take_along_axis_gather_and_index_updates_of_keys():
    """jnp.take_along_axis (whole keys per index, 'fill' and 'clip' as JAX's), lax.gather
    under jit and lax.dynamic_update_index_in_dim take key arrays."""
    keys = random.split(random.key(1), (3, 4))
    data = _data(keys)
    idx = np.array([[2, 0], [1, 1], [3, 9]])
    got = _data(jnp.take_along_axis(keys, jnp.asarray(idx), axis=1))
    want = np.take_along_axis(data, np.minimum(idx, 3)[..., None], axis=1)
    want[2, 1] = 0xFFFFFFFF                       # out of bounds: the fill key
    np.testing.assert_array_equal(got, want)
    got = _data(shardc.jit(lambda k: jnp.take_along_axis(k, jnp.array([[7], [0], [1]]), -1,
                                                         mode="clip"))(keys))
    np.testing.assert_array_equal(got, data[[0, 1, 2], [3, 0, 1]][:, None])
    dn = lax.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0,),
                                    start_index_map=(0,))
    flat = keys.ravel()
    got = shardc.jit(lambda k, i: lax.gather(k, i, dn, slice_sizes=(1,)))(
        flat, jnp.array([[3], [1]]))
    np.testing.assert_array_equal(_data(got), data.reshape(12, 2)[[3, 1]])
    row = random.split(random.key(5), 4)
    got = _data(lax.dynamic_update_index_in_dim(keys, row, 2, axis=0))
    np.testing.assert_array_equal(got, np.concatenate([data[:2], _data(row)[None]]))


def test_diagonal_triangles_compress_extract_and_array_equal_of_keys():
    """jnp.diagonal, triu, tril (a key of zero words below or above), compress, extract and
    array_equal take key arrays, as JAX's, under jit too."""
    keys = random.split(random.key(0), (3, 4))
    data = _data(keys)
    lower = np.tril(np.ones((3, 4), bool))[..., None]
    mask = np.array([True, False, True, True])
    cases = {
        "diagonal": (lambda: jnp.diagonal(keys, 1), np.stack([data[k, k + 1] for k in range(3)])),
        "triu": (lambda: jnp.triu(keys, -1),
                 np.where(np.triu(np.ones((3, 4), bool), -1)[..., None], data, 0)),
        "tril": (lambda: jnp.tril(keys), np.where(lower, data, 0)),
        "compress": (lambda: jnp.compress(jnp.asarray(mask), keys, axis=1), data[:, mask]),
        "extract": (lambda: jnp.extract(np.arange(12).reshape(3, 4) % 5 == 0, keys),
                    data.reshape(12, 2)[[0, 5, 10]]),
    }
    for name, (make, want) in cases.items():
        for got in (make(), shardc.jit(make)() if name != "extract" else make()):
            assert got.dtype == keys.dtype, name
            np.testing.assert_array_equal(_data(got), want.astype(np.uint32), err_msg=name)
    assert bool(jnp.array_equal(keys, keys)) and not bool(jnp.array_equal(keys, keys[::-1]))
    assert not bool(jnp.array_equal(keys[0], keys))


def test_key_array_shards_methods_and_the_methods_keys_lack():
    """A key array's shards hold keys (their index the data's); addressable_data,
    on_device_size_in_bytes and swapaxes as JAX's; the array methods keys lack (astype, sum,
    item ...) are JAX's NotImplementedError."""
    mesh = shardc.make_mesh((4, 2), ("x", "y"))
    keys = shardc.device_put(random.split(random.key(2), 8),
                             shardc.NamedSharding(mesh, P("x")))
    data = _data(keys)
    shards = keys.addressable_shards
    assert len(shards) == 8 and len(keys.global_shards) == 8
    for shard in shards:
        assert shard.data.dtype == keys.dtype and shard.data.shape == (2,)
        rows = shard.index[0]
        np.testing.assert_array_equal(_data(shard.data), data[rows])
        assert shard.index[1] == slice(None)
    assert [s.replica_id for s in shards] == [0, 1] * 4
    np.testing.assert_array_equal(_data(keys.addressable_data(3)), data[2:4])
    assert keys.on_device_size_in_bytes() == 8 * 2 * 2 * 4
    grid = random.split(random.key(0), (2, 3))
    np.testing.assert_array_equal(_data(grid.swapaxes(0, -1)), _data(grid).transpose(1, 0, 2))
    for name in ("astype", "sum", "item", "repeat", "sort", "clip", "view", "to_device"):
        with pytest.raises(NotImplementedError, match=f"Cannot call abstract method {name}"):
            getattr(keys, name)()
    with pytest.raises(NotImplementedError, match="Cannot call abstract method mT"):
        grid.mT


def test_full_and_full_like_make_keys():
    """jnp.full/zeros/ones/empty of a key dtype fill each key's data words with the value; a
    key fill is broadcast; full_like and the other *_like follow a key array's dtype (JAX's)."""
    keys = random.split(random.key(1), 2)
    key = random.key(42)
    for got, want in [
            (jnp.full((2,), 7, dtype=keys.dtype), np.full((2, 2), 7, np.uint32)),
            (jnp.zeros((3,), dtype=keys.dtype), np.zeros((3, 2), np.uint32)),
            (jnp.ones((2,), dtype=keys.dtype), np.ones((2, 2), np.uint32)),
            (jnp.full((2,), key), np.broadcast_to(_data(key), (2, 2))),
            (jnp.full((2,), key, dtype=keys.dtype), np.broadcast_to(_data(key), (2, 2))),
            (jnp.full_like(keys, 100), np.full((2, 2), 100, np.uint32)),
            (jnp.zeros_like(keys), np.zeros((2, 2), np.uint32)),
            (jnp.ones_like(keys), np.ones((2, 2), np.uint32)),
            (jnp.full_like(keys, key), np.broadcast_to(_data(key), (2, 2)))]:
        assert got.dtype == keys.dtype
        np.testing.assert_array_equal(_data(got), want)
    assert jnp.empty((2,), dtype=keys.dtype).shape == (2,)
    # a numeric dtype asked for makes numbers of the keys' shape
    np.testing.assert_array_equal(jnp.full_like(keys, 3, dtype=np.int32), np.full(2, 3))


def test_full_takes_an_int_fill_as_the_dtype_asked_for():
    """As JAX's lax.full: the fill converts from its 64-bit value, wrapping (no int32
    OverflowError for a uint32 fill of 2**32 - 1)."""
    np.testing.assert_array_equal(jnp.full((2,), 2 ** 32 - 1, dtype=np.uint32),
                                  np.full(2, 2 ** 32 - 1, np.uint32))
    np.testing.assert_array_equal(jnp.full_like(jnp.zeros(2, np.uint32), 2 ** 32 - 1),
                                  np.full(2, 2 ** 32 - 1, np.uint32))
    np.testing.assert_array_equal(jnp.full((2,), 300, dtype=np.int8), np.full(2, 44, np.int8))


def test_at_gets_and_sets_whole_keys():
    """keys.at[i].get() and .set(key) gather and scatter keys (JAX's); under mode='fill' an
    out-of-range key's words are all 2**32 - 1; arithmetic updates are refused."""
    keys = random.split(random.key(0), 3)
    key = random.key(5)
    data, one = _data(keys), _data(key)
    for idx in (0, slice(1), np.array([0, 2]), np.array([False, True, True])):
        np.testing.assert_array_equal(_data(keys.at[idx].get()), data[idx])
        want = data.copy()
        want[idx] = one
        np.testing.assert_array_equal(_data(keys.at[idx].set(key)), want)
        np.testing.assert_array_equal(_data(shardc.jit(lambda k, v: k.at[idx].set(v))(keys, key)),
                                      want)
    filled = shardc.jit(lambda k: k.at[100].get(mode="fill"))(keys)
    np.testing.assert_array_equal(_data(filled), np.full(2, 2 ** 32 - 1, np.uint32))
    np.testing.assert_array_equal(keys.at[1:].set(key) == key, [False, True, True])
    with pytest.raises(TypeError, match="key<fry>"):
        keys.at[0].add(key)


def test_key_arrays_storage_methods():
    """copy (copy.copy, deepcopy), nbytes, itemsize, delete/is_deleted and copy_to_host_async
    on key arrays, as JAX's."""
    import copy
    keys = random.split(random.key(0), 3)
    for c in (keys.copy(), copy.copy(keys), copy.deepcopy(keys),
              shardc.jit(lambda k: k.copy())(keys)):
        assert c.dtype == keys.dtype
        np.testing.assert_array_equal(_data(c), _data(keys))
    assert keys.itemsize == keys.dtype.itemsize == 8 and keys.nbytes == 24
    assert random.key(0, impl="rbg").nbytes == 16
    assert keys.copy_to_host_async() is None
    assert keys.block_until_ready() is keys
    assert not keys.is_deleted()
    keys.delete()
    assert keys.is_deleted()


def test_key_and_wrap_key_data_take_a_dtype():
    """random.key and wrap_key_data take dtype= (a key dtype or an implementation's name),
    not both it and impl=; key_impl of a built-in implementation equals its name (JAX's)."""
    for name in ("threefry2x32", "rbg", "unsafe_rbg"):
        k1 = random.key(42, impl=name)
        for dtype in (k1.dtype, name):
            k2 = random.key(42, dtype=dtype)
            assert k2.dtype == k1.dtype
            np.testing.assert_array_equal(_data(k2), _data(k1))
            k3 = random.wrap_key_data(random.key_data(k1), dtype=dtype)
            assert k3.dtype == k1.dtype
        assert random.key_impl(k1) == name and repr(random.key_impl(k1)) == repr(name)
        assert random.key_impl(k1).key_shape == _data(k1).shape
        assert random.wrap_key_data(random.key_data(k1), impl=k1.dtype).dtype == k1.dtype
    with pytest.raises(ValueError, match="Cannot specify both `impl` and `dtype` arguments "
                                         "to jax.random.key"):
        random.key(0, impl="rbg", dtype=random.key(0).dtype)
    with pytest.raises(ValueError, match="Cannot specify both `impl` and `dtype` arguments "
                                         "to jax.random.wrap_key_data"):
        random.wrap_key_data(np.zeros(2, np.uint32), impl="rbg", dtype="rbg")
    with pytest.raises(TypeError, match="unrecognized type .* for specifying PRNG"):
        random.key(0, impl=object())


def test_seed_errors_name_the_constructor_as_jax():
    """A key, an array or a non-integer as a seed: JAX's TypeErrors, naming key or PRNGKey."""
    key = random.key(0)
    for ctor in (random.key, random.PRNGKey):
        name = ctor.__name__
        with pytest.raises(TypeError, match=f"^{name} accepts a scalar seed, but was given a "
                                            "PRNG key"):
            ctor(key)
        with pytest.raises(TypeError, match=rf"^{name} accepts a scalar seed, but was given an "
                                            r"array of shape \(4,\) != \(\)"):
            ctor(np.arange(4))
        for seed in (np.pi, np.float32(1), jnp.float32(1)):
            with pytest.raises(TypeError, match="PRNG key seed must be an integer"):
                ctor(seed)
    np.testing.assert_array_equal(_data(random.key(np.int16(3))), [0, 3])


def test_enable_custom_prng_makes_prngkey_split_and_fold_in_give_typed_keys():
    """With ``jax_enable_custom_prng`` on, JAX's PRNGKey gives a typed key, and split and
    fold_in given raw key data give typed keys (with a FutureWarning about the raw data); off,
    everything stays raw uint32 data."""
    raw = random.PRNGKey(0)
    assert raw.dtype == np.uint32 and raw.shape == (2,)
    with shardc.enable_custom_prng():
        assert shardc.config.read("jax_enable_custom_prng") is True
        key = random.PRNGKey(0)
        assert str(key.dtype) == "key<fry>" and key.shape == ()
        np.testing.assert_array_equal(_data(key), raw)
        with pytest.warns(FutureWarning, match="Raw arrays as random keys"):
            keys = random.split(raw, 3)
        assert str(keys.dtype) == "key<fry>" and keys.shape == (3,)
        with pytest.warns(FutureWarning, match="Raw arrays as random keys"):
            folded = random.fold_in(raw, 5)
        assert str(folded.dtype) == "key<fry>" and folded.shape == ()
        np.testing.assert_array_equal(_data(random.split(key, 3)), _data(keys))
        np.testing.assert_array_equal(_data(random.fold_in(key, 5)), _data(folded))
    assert shardc.config.read("jax_enable_custom_prng") is False
    assert random.split(raw).dtype == np.uint32

    @shardc.enable_custom_prng()
    def make():
        return random.PRNGKey(1)
    assert str(make().dtype) == "key<fry>"


def test_indexing_past_a_key_arrays_dimensions_is_an_index_error():
    """The words' axis is not indexable: ``key[0]`` on one key is JAX's IndexError, not its
    first word."""
    key = random.key(0)
    assert key[None].shape == (1,)
    with pytest.raises(IndexError, match="Too many indices: array is 0-dimensional, but 1"):
        key[0]
    grid = random.split(key, (2, 3))
    assert grid[0, 1].shape == () and grid[None, 1, 2].shape == (1,)
    with pytest.raises(IndexError, match="array is 2-dimensional, but 3 were indexed"):
        grid[0, 1, 0]
    keys = random.split(key, 4)
    np.testing.assert_array_equal(_data(keys[np.array([True, False, True, False])]),
                                  _data(keys)[[0, 2]])


def test_keys_fetched_to_the_host_stay_keys_and_draw_the_same():
    """``device_get`` of keys gives keys over host data (JAX's rule for key dtypes): their data,
    splits and draws are the device keys'."""
    keys = random.split(random.key(3), 3)
    host = shardc.device_get(keys)
    assert str(host.dtype) == "key<fry>" and host.shape == (3,)
    np.testing.assert_array_equal(_data(host), _data(keys))
    np.testing.assert_array_equal(np.asarray(random.normal(host[1], (4,))),
                                  np.asarray(random.normal(keys[1], (4,))))
    np.testing.assert_array_equal(_data(random.split(host[0])), _data(random.split(keys[0])))


def test_random_seed_offset_is_added_to_every_seed():
    base = _data(random.key(17))
    shardc.config.update("jax_random_seed_offset", 3)
    try:
        np.testing.assert_array_equal(_data(random.key(17)), [0, 20])
        np.testing.assert_array_equal(np.asarray(random.PRNGKey(17)), [0, 20])
        np.testing.assert_array_equal(_data(shardc.jit(random.key)(17)), [0, 20])
    finally:
        shardc.config.update("jax_random_seed_offset", 0)
    np.testing.assert_array_equal(_data(random.key(17)), base)


def test_abstract_keys_are_structs_of_the_key_dtype():
    """eval_shape of a function that makes keys gives ``ShapeDtypeStruct``s of dtype
    ``key<fry>`` (not keys over structs of their words), and such a struct stands in for keys
    in eval_shape and lower, as JAX's extended dtypes do."""
    def init(k):
        return {"w": random.normal(k, (3, 4)), "k": random.split(k)}
    key = random.key(1701)
    abstract = shardc.eval_shape(init, key)
    assert abstract["k"] == shardc.ShapeDtypeStruct((2,), key.dtype)
    assert repr(abstract["k"]) == "ShapeDtypeStruct(shape=(2,), dtype=key<fry>)"
    struct = shardc.ShapeDtypeStruct.like(key)
    assert struct == shardc.ShapeDtypeStruct((), key.dtype) and struct.sharding is None
    assert shardc.eval_shape(lambda k: k, struct) == struct
    assert shardc.eval_shape(init, struct) == abstract
    lowered = shardc.jit(init).lower(struct)
    assert lowered.out_info == abstract
    np.testing.assert_array_equal(np.asarray(lowered.compile()(key)["w"]),
                                  np.asarray(init(key)["w"]))
    mesh = shardc.make_mesh((4,), ("x",))
    keys = shardc.device_put(random.split(key, 8), shardc.NamedSharding(mesh, P("x")))
    laid = shardc.ShapeDtypeStruct.like(keys)
    assert laid.shape == (8,) and laid.sharding.spec == P("x")
    split = shardc.eval_shape(shardc.vmap(random.split), laid)
    assert split.shape == (8, 2) and str(split.dtype) == "key<fry>"
    assert split.sharding.spec == P("x", None)


def test_a_keys_tangent_is_float0_of_the_keys_shape():
    """A key is one value to autodiff, as in JAX: custom rules see a float0 tangent (or
    cotangent, or SymbolicZero) of the keys' shape, symbolic-zeros fwd rules one
    CustomVJPPrimal, and jvp takes a float0 tangent for a key primal."""
    seen = []

    @shardc.custom_jvp
    def noisy(x, key):
        return x * random.normal(key, ())

    @noisy.defjvp
    def noisy_jvp(primals, tangents):
        (x, key), (x_dot, key_dot) = primals, tangents
        seen.append((key_dot.dtype, key_dot.shape))
        noise = random.normal(key, ())
        return x * noise, x_dot * noise

    key = random.key(0)
    plain = shardc.grad(lambda x, k: x * random.normal(k, ()))(0.0, key)
    assert float(shardc.grad(noisy)(0.0, key)) == float(plain)
    assert seen == [(shardc.dtypes.float0, ())]
    zero = jnp.zeros((), shardc.dtypes.float0)
    value, tangent = shardc.jvp(noisy, (1.0, key), (1.0, zero))
    assert float(tangent) == float(value) == float(plain)
    keys = random.split(key, 3)
    _, tangent = shardc.jvp(lambda x, k: x * random.normal(k[1], ()), (1.0, keys),
                            (1.0, jnp.zeros((3,), shardc.dtypes.float0)))
    assert float(tangent) == float(random.normal(keys[1], ()))

    @shardc.custom_vjp
    def carry(x, state):
        return state

    carry.defvjp(lambda x, state: (state, None), lambda _, ct: (ct[0], ct))
    # the state's cotangent reaches t through t * 8, the first slot's directly: 8 + 1
    assert float(shardc.grad(lambda t: carry(t, (t * 8.0, random.key(1)))[0])(3.0)) == 9.0

    @shardc.custom_vjp
    def sym(x, state):
        return state

    def sym_fwd(x, state):
        assert all(isinstance(s, shardc.custom_derivatives.CustomVJPPrimal) for s in state)
        return shardc.tree.map(lambda s: s.value, state), None

    def sym_bwd(_, ct):
        seen.append(ct[1])
        return ct[0], ct

    sym.defvjp(sym_fwd, sym_bwd, symbolic_zeros=True)
    seen.clear()
    assert float(shardc.grad(lambda t: sym(t, (t * 2.0, random.key(1)))[0])(3.0)) == 3.0
    assert seen[0].dtype == shardc.dtypes.float0 and seen[0].shape == ()


def test_reducing_collectives_of_typed_keys_are_jaxs_type_errors():
    """A psum, pmean, pmax or psum_scatter of typed keys is JAX's TypeError (their add or max
    takes numbers; it summed the key words); moving keys (all_gather, ppermute) is fine."""
    mesh = shardc.make_mesh((4,), ("x",))
    keys = random.split(random.key(0), 4)
    run = lambda f: shardc.shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                                     check_vma=False)(keys)
    for op, f in [("add", lambda k: lax.psum(k, "x")), ("add", lambda k: lax.pmean(k, "x")),
                  ("max", lambda k: lax.pmax(k, "x")), ("min", lambda k: lax.pmin(k, "x"))]:
        with pytest.raises(TypeError, match=rf"{op} does not accept dtype key<fry> at "
                                            "position 0"):
            run(f)
    moved = run(lambda k: lax.ppermute(k, "x", [(i, (i + 1) % 4) for i in range(4)]))
    np.testing.assert_array_equal(np.asarray(random.key_data(moved)),
                                  np.roll(np.asarray(random.key_data(keys)), 1, axis=0))
