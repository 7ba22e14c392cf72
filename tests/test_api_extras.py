"""JAX's smaller top-level API: jax.tree, key paths, Partial and dataclasses as pytrees,
jacfwd/jacrev/hessian, eval_shape, device_get, named_scope/named_call, smap."""
from __future__ import annotations

import dataclasses
import functools
import re
import typing

import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from shardc import lax
from shardc import tree_util as tu
from shardc.sharding import AxisType, PartitionSpec as P


# --- jax.tree and key paths ---------------------------------------------------------------------

TREE = {"b": [1.0, (2.0, 3.0)], "a": 4.0}


def test_tree_module_short_names():
    assert jax.tree.leaves(TREE) == [4.0, 1.0, 2.0, 3.0]
    assert jax.tree.map(lambda x, y: x * y, TREE, TREE) == {"b": [1.0, (4.0, 9.0)], "a": 16.0}
    leaves, treedef = jax.tree.flatten(TREE)
    assert jax.tree.unflatten(treedef, leaves) == TREE
    assert jax.tree.structure(TREE) == treedef
    assert jax.tree.reduce(lambda x, y: x + y, TREE) == 10.0
    assert jax.tree.reduce(lambda x, y: x + y, TREE, 100.0) == 110.0
    assert jax.tree.all({"x": True, "y": [True]}) and not jax.tree.all([True, False])


def test_key_paths_name_each_leaf():
    pairs, _ = jax.tree.flatten_with_path(TREE)
    assert [tu.keystr(path) for path, _ in pairs] == ["['a']", "['b'][0]", "['b'][1][0]",
                                                      "['b'][1][1]"]
    path = pairs[2][0]
    assert path == (tu.DictKey("b"), tu.SequenceKey(1), tu.SequenceKey(0))
    assert tu.keystr(path, simple=True, separator="/") == "b/1/0"
    doubled = jax.tree.map_with_path(lambda p, x: x * 2 if p[0].key == "b" else x, TREE)
    assert doubled == {"b": [2.0, (4.0, 6.0)], "a": 4.0}


def test_dataclasses_and_classes_as_pytrees():
    @functools.partial(tu.register_dataclass, data_fields=["w", "b"], meta_fields=["name"])
    @dataclasses.dataclass
    class Layer:
        w: object
        b: object
        name: str

    layer = Layer(jnp.ones((2, 2)), jnp.zeros(2), "dense")
    leaves, treedef = tu.tree_flatten(layer)
    assert len(leaves) == 2
    back = tu.tree_unflatten(treedef, [x + 1 for x in leaves])
    assert back.name == "dense" and np.asarray(back.b).tolist() == [1.0, 1.0]
    paths = [tu.keystr(p) for p, _ in tu.tree_leaves_with_path(layer)]
    assert paths == [".w", ".b"]
    # through a transformation, as a parameter container
    grads = jax.grad(lambda l: (l.w.sum() + l.b.sum()) * 2)(layer)
    np.testing.assert_array_equal(np.asarray(grads.w), np.full((2, 2), 2.0))

    @tu.register_pytree_node_class
    class Pair:
        def __init__(self, x, y):
            self.x, self.y = x, y

        def tree_flatten(self):
            return (self.x, self.y), None

        @classmethod
        def tree_unflatten(cls, aux, children):
            return cls(*children)

    out = jax.jit(lambda p: Pair(p.y, p.x * 3))(Pair(jnp.ones(2), jnp.zeros(2)))
    np.testing.assert_array_equal(np.asarray(out.y), [3.0, 3.0])


def test_partial_passes_through_jit_as_a_pytree():
    scale = tu.Partial(lambda x, s: x * s, s=jnp.asarray(3.0))
    assert len(tu.tree_leaves(scale)) == 1
    apply = jax.jit(lambda fn, x: fn(x))
    np.testing.assert_array_equal(np.asarray(apply(scale, jnp.arange(3.0))), [0.0, 3.0, 6.0])


def test_tree_transpose():
    outer = jax.tree.structure([0, 0])
    inner = jax.tree.structure((0, 0))
    assert jax.tree.transpose(outer, inner, [(1, 2), (3, 4)]) == ([1, 3], [2, 4])


# --- Jacobians ----------------------------------------------------------------------------------

def _f(x, y):
    return {"u": jnp.sin(x) * y[0], "v": (x ** 2).sum() * y}


def _f_numpy_jacobian(x, y):
    """d/dx and d/dy of each output of _f, written out."""
    du_dx = np.diag(np.cos(x) * y[0])
    du_dy = np.zeros((x.size, y.size))
    du_dy[:, 0] = np.sin(x)
    dv_dx = np.outer(y, 2 * x)
    dv_dy = np.eye(y.size) * (x ** 2).sum()
    return {"u": (du_dx, du_dy), "v": (dv_dx, dv_dy)}


@pytest.mark.parametrize("mode", ["jacfwd", "jacrev"])
def test_jacobians_of_pytrees(mode):
    x = np.array([0.1, 0.7, -0.4], np.float32)
    y = np.array([1.5, -2.0], np.float32)
    jac = getattr(jax, mode)(_f, argnums=(0, 1))(jnp.asarray(x), jnp.asarray(y))
    want = _f_numpy_jacobian(x.astype(np.float64), y.astype(np.float64))
    for key in ("u", "v"):
        for got, ref in zip(jac[key], want[key]):
            np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-5, atol=1e-6)
    single = getattr(jax, mode)(lambda x: jnp.sin(x) * 2)(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(single), np.diag(2 * np.cos(x)), rtol=1e-6)


def test_hessian_against_the_written_out_one():
    x = np.array([0.3, -1.2, 0.8], np.float32)
    h = jax.hessian(lambda x: (jnp.sin(x) * x[0]).sum())(jnp.asarray(x))
    want = np.diag(-np.sin(x) * x[0])
    want[0, :] += np.cos(x)
    want[:, 0] += np.cos(x)
    np.testing.assert_allclose(np.asarray(h), want, rtol=1e-5, atol=1e-6)


def test_jacobian_of_a_shard_map_and_under_jit():
    mesh = jax.make_mesh((4,), ("i",))
    f = jax.shard_map(lambda b: jnp.tanh(b) * lax.psum(b.sum(), "i"), mesh=mesh,
                      in_specs=P("i"), out_specs=P("i"))
    x = np.linspace(-1, 1, 8).astype(np.float32)
    t = np.tanh(x.astype(np.float64))
    want = np.diag((1 - t ** 2) * x.sum()) + t[:, None]
    for mode in ("jacfwd", "jacrev"):
        got = jax.jit(getattr(jax, mode)(f))(jnp.asarray(x))
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_jacobians_reject_integer_inputs():
    with pytest.raises(TypeError, match="jacrev requires real- or complex-valued inputs"):
        jax.jacrev(lambda x: x * 2)(jnp.arange(3))


def test_jacrev_with_aux():
    jac, aux = jax.jacrev(lambda x: (x * 3, x.sum()), has_aux=True)(jnp.ones(2))
    np.testing.assert_array_equal(np.asarray(jac), 3 * np.eye(2))
    assert float(aux) == 2.0


# --- eval_shape, device_get, names ---------------------------------------------------------------

def test_eval_shape_of_a_jit_with_out_shardings_reports_them():
    """jax.eval_shape(jax.jit(init, out_shardings=...)) gives the layouts the results would
    have (JAX's: how a checkpoint's target layouts are found); it gave no sharding."""
    from shardc.sharding import AxisType, NamedSharding
    mesh = jax.make_mesh((2, 4), ("a", "b"), axis_types=(AxisType.Auto,) * 2)
    init = lambda k: {"w": jax.random.normal(k, (8, 16)), "b": jnp.zeros(16)}
    shardings = {"w": NamedSharding(mesh, jax.P("a", "b")), "b": NamedSharding(mesh, jax.P())}
    abstract = jax.eval_shape(jax.jit(init, out_shardings=shardings), jax.random.key(0))
    assert abstract["w"].shape == (8, 16) and abstract["w"].sharding == shardings["w"]
    assert abstract["b"].sharding == shardings["b"]


def test_eval_shape_runs_nothing():
    calls = []

    def f(x, y):
        calls.append(1)
        return {"s": x @ y, "n": x.sum().astype(jnp.int32)}

    out = jax.eval_shape(f, jax.ShapeDtypeStruct((4, 3), jnp.float32), jnp.ones((3, 2)))
    assert out["s"].shape == (4, 2) and out["s"].dtype == np.float32
    assert out["n"].shape == () and out["n"].dtype == np.int32
    assert len(calls) == 1                # traced once, never run


def test_device_get_and_names():
    got = jax.device_get({"a": jnp.arange(3), "b": 5})
    assert isinstance(got["a"], np.ndarray) and got["b"] == 5
    # numpy scalars become 0-d arrays (JAX calls __array__); Python scalars, None and other
    # objects stay as they are, a numpy array is itself
    host = np.arange(3)
    got = jax.device_get([np.float32(1), np.int8(3), np.bool_(True), 1.5, 2, None, "s", host])
    assert repr(got[:3]) == ("[array(1., dtype=float32), array(3, dtype=int8), "
                             "array(True)]")
    assert got[3:7] == [1.5, 2, None, "s"] and type(got[3]) is float and got[7] is host
    assert jax.jit(lambda x: jax.device_get(x) + 1)(np.float32(1)) == 2.0   # traced: as is
    with jax.named_scope("block"):
        y = jax.named_call(lambda x: x + 1, name="inc")(jnp.ones(2))
    np.testing.assert_array_equal(np.asarray(y), [2.0, 2.0])
    with pytest.raises(TypeError, match="named_scope name argument must be a string"):
        with jax.named_scope(3):
            pass
    assert jax.default_backend() == "cpu"


# --- smap ------------------------------------------------------------------------------------------

def test_smap_splits_the_named_dimension_over_one_axis():
    mesh = jax.make_mesh((4, 2), ("x", "y"))
    x = jnp.arange(16.0).reshape(2, 8)

    @functools.partial(jax.smap, in_axes=1, out_axes=1, axis_name="x")
    def f(b):
        assert b.shape == (2, 2)
        return b * lax.axis_index("x")

    with jax.set_mesh(mesh):
        got = f(x)
    want = np.arange(16.0).reshape(2, 8) * np.repeat(np.arange(4), 2)
    np.testing.assert_array_equal(np.asarray(got), want)
    with pytest.raises(TypeError, match="smap axis_name should be a `str`"):
        jax.smap(lambda b: b, out_axes=0, axis_name=("x",))


def test_smap_without_in_axes_reads_them_from_explicit_types():
    mesh = jax.make_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Explicit, AxisType.Auto))
    with jax.set_mesh(mesh):
        split = jax.device_put(np.arange(4.0), P("x"))
        whole = jnp.arange(4.0)

        def body(b):
            seen.append((b.shape, jax.typeof(b).vma))
            return b * 2

        for arg, want in ((split, ((2,), {"x"})), (whole, ((4,), set()))):
            seen = []
            out = jax.smap(body, out_axes=None if arg is whole else 0, axis_name="x")(arg)
            assert seen == [want]
            np.testing.assert_array_equal(np.asarray(out), np.arange(4.0) * 2)
        # on an Auto axis a type says nothing of the layout: in_axes must be given
        with pytest.raises(TypeError, match=r"in_axes was not specified when axis_name="
                                            r"frozenset\(\{'y'\}\) was of type AxisType.Auto"):
            jax.smap(body, out_axes=0, axis_name="y")(split)


# --- sharding constraints with bare specs, reshard ---------------------------------------------

def test_sharding_constraints_take_specs_on_the_current_mesh_and_prefixes():
    from shardc.sharding import NamedSharding
    # Auto axes: a constraint lays values out (on Explicit ones it asserts their types)
    mesh = jax.make_mesh((4, 2), ("X", "Y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    x = jnp.arange(32.0).reshape(8, 4)
    with jax.set_mesh(mesh):
        y = jax.jit(lambda x: lax.with_sharding_constraint(x * 2, P("X", None)))(x)
        assert y.sharding == NamedSharding(mesh, P("X", None))
        np.testing.assert_array_equal(np.asarray(y), np.arange(32.0).reshape(8, 4) * 2)
        pair = lax.with_sharding_constraint((x, x + 1), (P(None, "Y"), P("X")))
        assert [a.sharding.spec for a in pair] == [P(None, "Y"), P("X")]
        # reshard names Explicit axes only (JAX 0.10.2): an Auto axis is the compiler's
        with pytest.raises(ValueError) as info:
            jax.reshard(x, P(None, "Y"))
        assert str(info.value) == (
            "PartitionSpec passed to reshard cannot contain axis names that are of type Auto "
            "or Manual. Got PartitionSpec: P(None, 'Y') with axis name: Y of type: "
            "AxisType.Auto.")
    with pytest.raises(RuntimeError, match="with_sharding_constraint requires a non-empty mesh "
                                           "in context if you are passing `PartitionSpec`s"):
        lax.with_sharding_constraint(x, P("X"))
    assert isinstance(jax.devices()[0], jax.Device)


# --- the rest of tree_util, and the Sharding base class (each as JAX 0.10.2 gives it) -----------

def test_tree_util_helpers():
    from typing import NamedTuple
    tu = jax.tree_util
    assert tu.all_leaves([1, 2.0]) and not tu.all_leaves([[1], 2]) and not tu.all_leaves([None])
    assert [str(t) for t in tu.treedef_children(tu.tree_structure({"a": (1, 2), "b": 3}))] == [
        "PyTreeDef((*, *))", "PyTreeDef(*)"]
    assert str(tu.treedef_tuple([tu.tree_structure((1, 2)), tu.tree_structure(3)])) == \
        "PyTreeDef(((*, *), *))"
    assert tu.flatten_one_level({"a": (1, 2), "b": 3}) == (((1, 2), 3), ("a", "b"))
    assert tu.tree_broadcast((1, 2), ((3, 4), (5,))) == ((1, 1), (2,))
    assert tu.tree_broadcast({"a": 1, "b": [2]}, {"a": [0, 0], "b": [[9, 9]]}) == {
        "a": [1, 1], "b": [[2, 2]]}

    class Pair(NamedTuple):
        a: int
        b: int
    assert tu.is_tree_node(tuple) and tu.is_tree_node(Pair) and not tu.is_tree_node(int)
    assert tu.tree_reduce_associative(lambda a, b: a + b, [1, 2, 3, 4, 5]) == 15
    with pytest.raises(TypeError, match="Must specify identity"):
        tu.tree_reduce_associative(lambda a, b: a + b, [])


def test_register_static_and_keyed_classes():
    tu = jax.tree_util

    @tu.register_static
    class Config:
        def __init__(self, n):
            self.n = n

        def __eq__(self, other):
            return isinstance(other, Config) and other.n == self.n

        def __hash__(self):
            return hash(self.n)

    assert tu.tree_leaves((1, Config(3))) == [1]
    assert float(jax.jit(lambda t: t[0] * t[1].n)((2.0, Config(3)))) == 6.0

    @tu.register_pytree_with_keys_class
    class Box:
        def __init__(self, x):
            self.x = x

        def tree_flatten_with_keys(self):
            return ((tu.GetAttrKey("x"), self.x),), None

        @classmethod
        def tree_unflatten(cls, aux, children):
            return cls(*children)

    (path, leaf), = tu.tree_flatten_with_path(Box(3.0))[0]
    assert path == (tu.GetAttrKey("x"),) and leaf == 3.0
    assert tu.tree_map(lambda v: v + 1, Box(1.0)).x == 2.0


def test_every_sharding_is_a_sharding():
    from shardc.sharding import Sharding, make_single_device_sharding
    mesh = jax.make_mesh((8,), ("i",))
    x = jax.device_put(np.arange(8.0), jax.NamedSharding(mesh, jax.P("i")))
    assert isinstance(x.sharding, Sharding) and isinstance(jnp.ones(2).sharding, Sharding)
    one = make_single_device_sharding(jax.devices()[1])
    assert jax.device_put(jnp.ones(2), one).devices() == {jax.devices()[1]}


def test_sharding_methods_and_shard_indices_are_jaxs():
    """JAX writes a block's index with slice(None) along the dimensions it spans whole."""
    from shardc.sharding import Mesh, NamedSharding, PartitionSpec as P, SingleDeviceSharding
    mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("x", "y"))
    x = jax.device_put(np.zeros((8, 4)), NamedSharding(mesh, P("x")))
    assert x.addressable_shards[2].index == (slice(2, 4), slice(None))   # device 2: row 1
    sharding = x.sharding
    assert sharding.shard_shape((8, 4)) == (2, 4)
    assert sharding.devices_indices_map((8, 4))[jax.devices()[3]] == (slice(2, 4), slice(None))
    assert sharding.addressable_devices_indices_map((8, 4)) == sharding.devices_indices_map(
        (8, 4))
    assert sharding.is_fully_addressable and sharding.addressable_devices == set(jax.devices())
    assert sharding.memory_kind == "device"
    assert sharding.is_equivalent_to(NamedSharding(mesh, P("x", None)), 2)
    assert not sharding.is_equivalent_to(NamedSharding(mesh, P("y")), 2)
    from ir.sharding import IndivisibleError          # JAX's, a ValueError
    with pytest.raises(IndivisibleError, match=r"implies that array axis 0 is partitioned 4 "
                                               r"times, but the dimension size is 7"):
        sharding.shard_shape((7, 4))
    with pytest.raises(IndexError, match="splits 2 dimensions"):     # JAX's IndexError
        NamedSharding(mesh, P("x", "y")).shard_shape((8,))
    assert NamedSharding(mesh, P("x", None)).shard_shape((8,)) == (2,)
    one = SingleDeviceSharding(jax.devices()[0])
    assert one.shard_shape((3, 2)) == (3, 2)
    assert one.devices_indices_map((3, 2)) == {jax.devices()[0]: (slice(None), slice(None))}
    assert jnp.ones((3, 2)).addressable_shards[0].index == (slice(None), slice(None))


def test_pmap_is_a_shard_map_over_the_mapped_dimension():
    x = np.arange(8.0, dtype=np.float32).reshape(4, 2)
    out = jax.pmap(lambda a: a * 2)(x)
    assert out.sharding.spec == jax.P("_internal_pmap_axis_name")
    np.testing.assert_array_equal(np.asarray(out), x * 2)
    np.testing.assert_array_equal(np.asarray(jax.pmap(lambda a: jax.lax.psum(a, "i"),
                                                      axis_name="i")(x)),
                                  np.broadcast_to(x.sum(0), (4, 2)))
    np.testing.assert_array_equal(np.asarray(jax.pmap(lambda a, b: a + b,
                                                      in_axes=(0, None))(x, np.ones(2))), x + 1)
    rows, totals = jax.pmap(lambda a: (a, a.sum()), out_axes=(1, 0))(x)
    assert rows.shape == (2, 4) and totals.shape == (4,)
    np.testing.assert_array_equal(np.asarray(jax.pmap(lambda a, n: a * n,
                                                      static_broadcasted_argnums=1)(x, 3)), x * 3)
    np.testing.assert_array_equal(np.asarray(jax.pmap(lambda a: jax.lax.axis_index("i"),
                                                      axis_name="i")(x)), [0, 1, 2, 3])
    np.testing.assert_array_equal(np.asarray(jax.jit(jax.pmap(lambda a: a * 2))(x)), x * 2)
    # keyword arguments are mapped over their leading axis, as JAX's
    by_name = jax.jit(jax.pmap(lambda a, b: a * b))(a=x, b=x[:, :1])
    np.testing.assert_array_equal(np.asarray(by_name), x * x[:, :1])
    grad = jax.grad(lambda z: jax.pmap(lambda a: (a ** 2).sum())(z).sum())(x)
    np.testing.assert_array_equal(np.asarray(grad), 2 * x)
    # mapped over x.T's columns (the rows of x): each device holds one row, pmean averages them
    np.testing.assert_allclose(np.asarray(jax.pmap(lambda a: jax.lax.pmean(a, "b"), axis_name="b",
                                                   in_axes=1)(x.T)),
                               np.broadcast_to(x.mean(0), (4, 2)))


def test_pmap_over_more_slices_than_devices_is_an_error():
    # JAX: a mapped dimension longer than the devices leaves each device a block of several
    # slices, which pmap cannot squeeze to one; it never reads only the first of them
    n = 2 * jax.device_count()
    f = jax.pmap(lambda z: jax.lax.psum(jnp.sin(z), "i"), axis_name="i")
    with pytest.raises(ValueError, match="cannot select an axis to squeeze out which has "
                       r"size not equal to one, got shape=\(2,\) and dimensions=\(0,\)"):
        f(jnp.ones(n))
    with pytest.raises(ValueError, match="cannot select an axis to squeeze out"):
        jax.lax.fori_loop(0, 3, lambda i, x: f(x) + x, jnp.ones(n))
    np.testing.assert_allclose(np.asarray(f(jnp.ones(4))), np.full(4, 4 * np.sin(1.0)),
                               rtol=1e-6)


def test_pmap_argument_errors_are_jaxs():
    """A static broadcasted argument passed by keyword, and no mapped argument, are JAX's
    ValueErrors in its words."""
    g = jax.pmap(lambda a, b: a + b, static_broadcasted_argnums=(1,))
    with pytest.raises(ValueError, match=re.escape(
            "pmapped function has static_broadcasted_argnums=(1,) but was called with only 1 "
            "positional argument. All static broadcasted arguments must be passed "
            "positionally.")):
        g(jnp.ones((1, 1)), b=1)
    with pytest.raises(ValueError, match=re.escape(
            "pmap requires at least one argument with a mapped axis.")):
        jax.pmap(lambda x: x)({})


def test_pmap_errors_in_jaxs_words():
    with pytest.raises(ValueError, match="Non-hashable static arguments are not supported"):
        jax.pmap(lambda a, b: a + 3, static_broadcasted_argnums=(1,))(
            np.ones(2), np.asarray(1))
    with pytest.raises(ValueError, match="'devices' argument to pmap must be non-empty, or None."):
        jax.pmap(lambda a: a, devices=[])
    with pytest.raises(NameError, match="unbound axis name: batch"):
        jax.pmap(lambda a: jax.lax.psum(a, "batch"))(np.arange(4)[None])
    x = jnp.array([3.14])
    with pytest.raises(ValueError, match=re.escape("each argument passed by keyword is mapped")):
        jax.pmap(lambda a, b: a, in_axes=((0, 0), 0))(a=(x, x), b=x)
    with pytest.raises(ValueError, match="must be a tree prefix of that tuple"):
        jax.pmap(lambda a, b: a, in_axes=((0, 0), 0))(x, x)
    with pytest.raises(ValueError, match=re.escape(
            "`perm` does not represent a permutation: [1, 1]")):
        jax.pmap(lambda a: jax.lax.pshuffle(a, perm=[1, 1], axis_name="i"), "i")(np.arange(2))


def test_removed_device_put_variants_are_jaxs_attribute_errors():
    for name in ("device_put_sharded", "device_put_replicated"):
        with pytest.raises(AttributeError, match=f"jax.{name} is deprecated; use jax.device_put"):
            getattr(jax, name)
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        jax.no_such_name


def test_pmap_unmapped_results_are_replicated_over_its_devices():
    x = np.arange(16.0).reshape(8, 2)
    first, rows = jax.pmap(lambda a, b: (a, b), in_axes=(0, None), out_axes=(None, 0))(x, x)
    assert first.shape == (2,) and rows.shape == (8, 8, 2)
    assert len(first.addressable_shards) == len(rows.addressable_shards) == 8
    np.testing.assert_array_equal(np.asarray(first), x[0])
    for shard in first.addressable_shards:
        np.testing.assert_array_equal(shard.data, x[0])


def test_pmap_is_traced_once_per_signature_and_lowers_as_jit():
    """JAX 0.10's pmap is a jitted shard_map: the function's Python runs at the first call of
    each signature only, and ``lower`` gives jit's stages."""
    calls = []

    def f(a):
        calls.append(a.shape)
        return a - jax.lax.pmean(a, "i")

    g = jax.pmap(f, axis_name="i")
    x = np.arange(8.0, dtype=np.float32).reshape(2, 4)
    want = x - x.mean(0)
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(g(x)), want)
    assert calls == [(4,)]
    g(x[:, :2])
    assert calls == [(4,), (2,)]
    lowered = g.lower(x)
    compiled = lowered.compile()
    np.testing.assert_allclose(np.asarray(compiled(x)), want)
    ((aval,), kwargs) = lowered.in_avals
    assert kwargs == {} and aval.shape == (2, 4) and aval.dtype == np.float32
    with pytest.raises(TypeError, match="Function compiled with input pytree does not match"):
        compiled([x])


def test_tree_keys_one_level_and_the_manual_axis_type_name():
    import shardc.tree_util as tu
    from shardc.sharding import ManualAxisType
    pairs, aux = tu.flatten_one_level_with_keys({"a": 1, "b": (2, 3)})
    assert pairs == ((tu.DictKey("a"), 1), (tu.DictKey("b"), (2, 3))) and aux == ("a", "b")
    pairs, _ = tu.flatten_one_level_with_keys((1, [2]))
    assert pairs == ((tu.SequenceKey(0), 1), (tu.SequenceKey(1), [2]))
    with pytest.raises(ValueError, match="can't tree-flatten type: <class 'int'>"):
        tu.flatten_one_level_with_keys(3)
    assert str(tu.KeyPath) == "tuple[~KeyEntry, ...]"
    assert ManualAxisType(varying=frozenset({"x"})).varying == frozenset({"x"})


def test_hybrid_device_meshes_tile_granules_as_jax_does():
    from shardc.experimental import mesh_utils
    mesh = mesh_utils.create_hybrid_device_mesh((2, 4), (1, 1), process_is_granule=True)
    assert mesh.shape == (2, 4)
    assert [d.id for d in mesh.flat] == list(range(8))
    with pytest.raises(ValueError, match=r"Number of slices 1 must equal the product of "
                                         r"dcn_mesh_shape \(2, 1\)"):
        mesh_utils.create_hybrid_device_mesh((2, 2), (2, 1), process_is_granule=True)
    with pytest.raises(ValueError, match="does not have attribute slice_index"):
        mesh_utils.create_hybrid_device_mesh((2, 4), (1, 1))


def test_key_dtype_names_an_implementations_keys():
    import shardc
    assert str(shardc.random.key_dtype()) == "key<fry>"
    assert shardc.random.key(0).dtype == shardc.random.key_dtype()
    assert str(shardc.random.key_dtype("rbg")) == "key<rbg>"


def test_a_treedefs_methods_as_jax():
    t = tu.tree_structure({"a": [1, 2], "b": (3,), "c": None})
    assert (t.num_nodes, t.num_leaves) == (7, 3)
    assert [str(c) for c in t.children()] == ["PyTreeDef([*, *])", "PyTreeDef((*,))",
                                              "PyTreeDef(None)"]
    assert t.node_data() == (dict, ["a", "b", "c"])
    assert tu.tree_structure(1).node_data() is None
    assert t.unflatten([10, 20, 30]) == {"a": [10, 20], "b": (30,), "c": None}
    assert t.flatten_up_to({"a": [[1], 2], "b": ({"x": 1},), "c": None}) == [[1], 2, {"x": 1}]
    with pytest.raises(ValueError):
        t.flatten_up_to({"a": [1], "b": (3,), "c": None})
    pair = tu.tree_structure((1, 2))
    assert str(pair.compose(tu.tree_structure([1, 1]))) == \
        "PyTreeDef(([*, *], [*, *]))"


def test_ordered_and_default_dicts_are_pytree_nodes():
    import collections
    ordered = collections.OrderedDict([("b", np.ones(2, np.float32)), ("a", np.zeros(3, np.float32))])
    # an OrderedDict keeps its insertion order; a defaultdict sorts its keys as a dict
    assert [x.shape for x in jax.tree.leaves(ordered)] == [(2,), (3,)]
    doubled = jax.tree.map(lambda x: x * 2 + 1, ordered)
    assert type(doubled) is collections.OrderedDict and list(doubled) == ["b", "a"]
    np.testing.assert_array_equal(doubled["a"], np.ones(3))
    grads = jax.grad(lambda p: p["a"].sum() * 2 + p["b"].sum())(ordered)
    np.testing.assert_array_equal(grads["a"], np.full(3, 2.0))
    paths = [jax.tree_util.keystr(k) for k, _ in jax.tree_util.tree_flatten_with_path(ordered)[0]]
    assert paths == ["['b']", "['a']"]
    assert jax.tree.structure(ordered) != jax.tree.structure(
        collections.OrderedDict([("a", 0), ("b", 0)]))
    counts = collections.defaultdict(list, {"b": np.float32(1), "a": np.float32(2)})
    assert jax.tree.leaves(counts) == [2.0, 1.0]
    halved = jax.jit(lambda d: jax.tree.map(lambda x: x / 2, d))(counts)
    assert type(halved) is collections.defaultdict and halved.default_factory is list
    assert float(halved["b"]) == 0.5


def test_tree_module_broadcast_static_and_unflatten_counts():
    assert jax.tree.broadcast([1, 2], [(3, 4), (5, 6)]) == [(1, 1), (2, 2)]
    assert jax.tree.broadcast(1, {"a": 2, "b": (3, 4)}) == {"a": 1, "b": (1, 1)}
    assert jax.tree.reduce_associative(lambda a, b: a + b, [1, (2, 3)]) == 6

    @tu.register_dataclass
    @dataclasses.dataclass
    class Op:
        x: object
        kind: str = jax.tree.static(default="add")

    leaves, treedef = jax.tree.flatten(Op(x=np.ones(2)))
    assert len(leaves) == 1 and jax.tree.unflatten(treedef, leaves).kind == "add"
    structure = jax.tree.structure([0, 0])
    with pytest.raises(ValueError, match="Too few leaves for PyTreeDef; expected 2, got 1"):
        jax.tree.unflatten(structure, [1])
    with pytest.raises(ValueError, match=r"Too many leaves for PyTreeDef; expected 2\.$"):
        jax.tree.unflatten(structure, [1, 2, 3])
    with pytest.raises(ValueError, match="Too few leaves for PyTreeDef; expected 2, got 1$"):
        jax.tree.unflatten(structure, iter([1]))


def test_key_dtypes_file_under_prng_key_and_extended():
    key = jax.random.key(0)
    assert jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
    assert jnp.issubdtype(key.dtype, jax.dtypes.extended)
    assert not jnp.issubdtype(key.dtype, jnp.floating)
    assert not jnp.issubdtype(jnp.float32, jax.dtypes.prng_key)
    assert jnp.issubdtype(jnp.bfloat16, jnp.floating)


def test_categorical_without_replacement_draws_distinct_categories():
    key = jax.random.key(1)
    logits = jnp.log(jnp.array([[0.1, 0.2, 0.3, 0.4, 1e-9], [0.25, 0.25, 0.25, 0.25, 1e-9]]))
    draws = np.asarray(jax.random.categorical(key, logits, shape=(4, 2), replace=False))
    assert draws.shape == (4, 2) and draws.dtype == np.int32
    for column in draws.T:
        assert sorted(column.tolist()) == [0, 1, 2, 3]     # never the near-impossible 4
    with pytest.raises(ValueError, match=r"Number of samples without replacement \(6\) cannot "
                                         r"exceed number of categories \(5\)"):
        jax.random.categorical(key, logits[0], shape=(6,), replace=False)


def test_tree_all_takes_is_leaf():
    assert jax.tree_util.tree_all([1, (True, [2])]) and not jax.tree_util.tree_all([1, (0, 3)])
    assert jax.tree_util.tree_all([1, (0, 3)], is_leaf=lambda x: isinstance(x, tuple))


# --- pjit --------------------------------------------------------------------------------------

def test_pjit_reads_none_as_replicated_and_specs_on_the_context_mesh():
    from shardc.sharding import Mesh, NamedSharding
    with pytest.warns(DeprecationWarning, match="jax.experimental.pjit.pjit has been deprecated"):
        from shardc.experimental.pjit import pjit
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("x", "y"))
    x = np.arange(32.0).reshape(8, 4)
    with pytest.warns(DeprecationWarning):
        with mesh:
            a = pjit(lambda a: a * 2, in_shardings=P("x", "y"), out_shardings=P("x"))(x)
            b, c = pjit(lambda a, b: (a + b, a - b), in_shardings=(P("x"), None),
                        out_shardings=None)(x, x)
    assert a.sharding == NamedSharding(mesh, P("x"))
    # None: replicated over the context mesh (jit would leave the value as it is)
    assert b.sharding == c.sharding == NamedSharding(mesh, P())
    np.testing.assert_array_equal(np.asarray(a), x * 2)
    np.testing.assert_array_equal(np.asarray(c), np.zeros_like(x))
    # no mesh in context: None leaves values as they are, a bare spec is refused
    assert not isinstance(pjit(lambda a: a + 1, in_shardings=None)(x).sharding, NamedSharding)
    with pytest.raises(RuntimeError, match="pjit requires a non-empty mesh in context if you "
                                           "are passing `PartitionSpec`s to in_shardings"):
        pjit(lambda a: a, in_shardings=P("x"))(x)
    out = pjit(lambda a: a.sum(0), out_shardings=NamedSharding(mesh, P("y")))(x)
    assert out.sharding == NamedSharding(mesh, P("y"))
    np.testing.assert_array_equal(np.asarray(out), x.sum(0))


def test_pjit_in_a_mesh_block_runs_on_that_mesh():
    """Inside ``with mesh:`` pjit runs with the mesh as its context mesh (JAX's resource
    environment), as jit does under set_mesh: uncommitted values go to the mesh, results
    come out replicated there and committed; committed values elsewhere are JAX's error."""
    import warnings
    from shardc.sharding import Mesh, NamedSharding
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from shardc.experimental.pjit import pjit
        mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("x", "y"))
        other = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("x", "y"))
        x = jnp.arange(8.0)
        with mesh:
            out = pjit(jnp.sin)(x)
            const = pjit(lambda: 1)()
            pair = pjit(lambda a: (a, a + 1))(np.arange(8.0))
            split = pjit(lambda a, b: a * b)(
                jax.device_put(x, NamedSharding(mesh, P("x"))), x)
            lowered = pjit(lambda a: a * 2).lower(x)
            with pytest.raises(ValueError, match=r"Received incompatible devices for jitted "
                                                 r"computation.*device ids \[0\] .*jit's "
                                                 r"context mesh with device ids \[0, 1, 2"):
                pjit(lambda a: a * 2)(jax.device_put(x, jax.devices()[0]))
            with pytest.raises(ValueError, match=r"Received incompatible devices.*device ids "
                                                 r"\[0, 1, 2, 3\] on platform CPU and jit's "
                                                 r"context mesh"):
                pjit(lambda a: a * 2)(jax.device_put(x, NamedSharding(other, P("x"))))
    replicated = NamedSharding(mesh, P())
    assert out.sharding == const.sharding == replicated and out.committed
    assert len(out.devices()) == 8 and len(out.addressable_shards) == 8
    np.testing.assert_allclose(out, np.sin(np.arange(8.0)), rtol=1e-6)
    assert int(const) == 1
    assert [a.sharding for a in pair] == [replicated] * 2
    np.testing.assert_array_equal(pair[1], np.arange(8.0) + 1)
    assert split.sharding == NamedSharding(mesh, P("x"))
    np.testing.assert_array_equal(split, np.arange(8.0) ** 2)
    assert lowered.compile()(x).sharding == replicated
    # outside the block: as jit
    assert pjit(jnp.sin)(x).sharding == x.sharding


# --- pytrees and their structures as JAX 0.10.2 gives them -------------------------------------

class _Pair:
    """A registered node whose metadata is its third field (JAX's tree_util_test AnObject)."""

    def __init__(self, x, y, z):
        self.x, self.y, self.z = x, y, z

    def __repr__(self):
        return f"_Pair({self.x},{self.y},{self.z})"

    def __eq__(self, other):
        return (self.x, self.y, self.z) == (other.x, other.y, other.z)


tu.register_pytree_node(_Pair, lambda o: ((o.x, o.y), o.z), lambda z, xy: _Pair(*xy, z))


@tu.register_pytree_node_class
class _FlatCache:
    """A node whose children are the leaves of what it holds: its arity follows its leaves."""

    def __init__(self, structured, *, leaves=None, treedef=None):
        if treedef is None:
            leaves, treedef = tu.tree_flatten(structured)
        self.leaves, self.treedef = leaves, treedef

    def __eq__(self, other):
        return tu.tree_unflatten(self.treedef, self.leaves) == \
            tu.tree_unflatten(other.treedef, other.leaves)

    def tree_flatten(self):
        return self.leaves, self.treedef

    @classmethod
    def tree_unflatten(cls, treedef, leaves):
        if not tu.all_leaves(leaves):
            leaves, treedef = tu.tree_flatten(tu.tree_unflatten(treedef, leaves))
        return cls(None, leaves=leaves, treedef=treedef)


_NT = __import__("collections").namedtuple("_NT", ("foo", "bar"))


@tu.register_dataclass
@dataclasses.dataclass
class _Meta:
    x: object
    n: int = dataclasses.field(default=4, metadata={"static": True})


@pytest.mark.parametrize("tree, text", [
    ([_Pair(3, None, [4, "foo"])], "PyTreeDef([CustomNode(_Pair[[4, 'foo']], [*, None])])"),
    (_NT(1, _NT(2, None)), "PyTreeDef(CustomNode(namedtuple[_NT], [*, CustomNode(namedtuple[_NT], "
                           "[*, None])]))"),
    (_Meta((1, 2)), "PyTreeDef(CustomNode(_Meta[(4,)], [(*, *)]))"),
    (__import__("collections").OrderedDict(b=1, a=2),
     "PyTreeDef(CustomNode(OrderedDict[('b', 'a')], [*, *]))"),
    (__import__("collections").defaultdict(int, b=1, a=2),
     "PyTreeDef(CustomNode(defaultdict[(<class 'int'>, ('a', 'b'))], [*, *]))"),
    ({"a": (1,), "b": [None]}, "PyTreeDef({'a': (*,), 'b': [None]})"),
])
def test_treedef_text_names_custom_nodes_as_jax(tree, text):
    assert str(tu.tree_structure(tree)) == repr(tu.tree_structure(tree)) == text


@pytest.mark.parametrize("prefix, value, message", [
    ([1, 2], [7], "List arity mismatch: 1 != 2; list: [7]."),
    ((1,), (7, 8), "Tuple arity mismatch: 2 != 1; tuple: (7, 8)."),
    ({"a": 1}, {"b": 7}, "Dict key mismatch; expected keys: ['a']; present keys: ['b']."),
    ([1], (7,), "Expected list, got (7,)."),
    ((1,), {"b": 7}, "Expected tuple, got {'b': 7}."),
    ([{"a": 1}], [7], "Expected dict, got 7."),
    # the last of two mismatches is the one named, as JAX walks the children last first
    ({"a": [1], "b": (1,)}, {"a": 7, "b": 7}, "Expected tuple, got 7."),
    ([_NT(1, 2)], [(1, 2)], "Expected named tuple, got (1, 2)."),
    (_Pair(1, 2, 3), (1, 2), "Custom node type mismatch: expected type: <class "
                             "'test_api_extras._Pair'>, value: (1, 2)."),
    (_Pair(1, 2, 3), _Pair(1, 2, 4), "Mismatch custom node data: 3 != 4; value: _Pair(1,2,4)."),
    (_Meta(1), _Meta(1, 5), "Mismatch custom dataclass node data: (4,) != (5,); value: "
                            "_Meta(x=1, n=5)."),
    (None, [2], "Expected None, got [2].\n\nIn previous releases of JAX, flatten-up-to used to "
                "consider None to be a tree-prefix of non-None values."),
])
def test_flatten_up_to_errors_as_jax(prefix, value, message):
    with pytest.raises(ValueError) as info:
        tu.tree_structure(prefix).flatten_up_to(value)
    assert str(info.value).startswith(message)


def test_treedef_equality_and_hash_as_jax():
    @tu.register_static
    class StaticDict(dict):
        pass

    # metadata need not hash: structures hash by node types and arities alone
    one, same, other = (tu.tree_structure((1, StaticDict(a=k))) for k in (1, 1, 2))
    assert one == same and hash(one) == hash(same) and one != other
    traces = []

    @jax.jit
    def f(x, static):
        traces.append(1)
        return x + static["a"]

    assert [int(f(x, StaticDict(a=2))) for x in (1, 3)] == [3, 5] and len(traces) == 1

    @tu.register_dataclass
    @dataclasses.dataclass
    class Holder:
        x: object = dataclasses.field(metadata={"static": True})

    g = jax.jit(lambda t: 1)
    g(Holder(jnp.arange(4)))           # the first call compares no metadata
    with pytest.raises(ValueError, match="Exception raised while checking equality of metadata "
                                         "fields of pytree"):
        g(Holder(jnp.arange(4)))


def test_pytree_registration_checks_as_jax():
    class Twice:
        pass

    tu.register_pytree_node(Twice, lambda t: ((), None), lambda aux, _: Twice())
    with pytest.raises(ValueError, match="Duplicate custom PyTreeDef type registration for "
                                         "<class '.*Twice'>"):
        tu.register_pytree_node(Twice, lambda t: ((), None), lambda aux, _: Twice())
    for out, what in [("hello", r"tuple, got 'hello'"), ((2, 3, 4), r"tuple, got \(2, 3, 4\)"),
                      ((7, 7), r"tuple where 'children' is iterable, got \(7, 7\)")]:
        bad = type("Bad", (), {})
        tu.register_pytree_node(bad, lambda _, out=out: out, lambda aux, _: None)
        with pytest.raises(ValueError, match=r"The to_iterable function for a custom PyTree node "
                                             r"should return a \(children, aux_data\) " + what):
            tu.tree_flatten(bad())
    with pytest.raises(ValueError, match="Comparator raised exception while sorting pytree "
                                         "dictionary keys"):
        tu.tree_leaves({"a": 1, 2: "b"})
    # keys that compare sort by value, whatever their types (not grouped by type name)
    assert tu.tree_leaves({1: "a", 0.5: "b", 2: "c"}) == ["b", "a", "c"]


def test_register_dataclass_checks_its_fields_as_jax():
    @dataclasses.dataclass
    class Foo:
        x: int
        y: int
        z: float = dataclasses.field(init=False)

    with pytest.raises(ValueError, match="data_fields and meta_fields must include all dataclass "
                                         "fields.*Missing fields: {'y'}"):
        tu.register_dataclass(Foo, data_fields=["x"], meta_fields=[])
    with pytest.raises(ValueError, match="Unexpected fields: {'w'}"):
        tu.register_dataclass(Foo, data_fields=["x"], meta_fields=["y", "w"])
    with pytest.raises(ValueError, match="must not overlap. Overlapping fields: {'x'}"):
        tu.register_dataclass(Foo, data_fields=["x", "y"], meta_fields=["x"])
    with pytest.raises(TypeError, match=r"must both be specified when either is specified. Got "
                                        r"data_fields=\['x'\] meta_fields=None"):
        tu.register_dataclass(Foo, data_fields=["x"])
    with pytest.raises(TypeError, match="are required when nodetype is not a dataclass"):
        tu.register_dataclass(type("Plain", (), {}))
    tu.register_dataclass(Foo, data_fields=["x"], meta_fields=["y"])    # z is not in __init__
    assert jax.tree.static(metadata={"static": False}).metadata == {"static": False}
    assert jax.tree.static(metadata={"k": 1}).metadata == {"static": True, "k": 1}


def test_flatten_one_level_and_keys_as_jax():
    assert tu.flatten_one_level((1, [2]))[0] == (1, [2])
    assert tu.flatten_one_level({"b": 1, "a": 2}) == ((2, 1), ("a", "b"))
    assert tu.flatten_one_level(_NT((), [None])) == ([(), [None]], _NT)
    assert tu.flatten_one_level(_Meta(1)) == ([1], (4,))
    assert tu.flatten_one_level(None) == ((), None)
    for leaf in (1, jnp.arange(2), jax.random.key(0)):
        with pytest.raises(ValueError, match="can't tree-flatten type"):
            tu.flatten_one_level(leaf)
    assert tu.flatten_one_level_with_keys(_Meta(1)) == ([(tu.GetAttrKey("x"), 1)], (4,))
    assert tu.keystr((tu.SequenceKey(0), tu.DictKey("a")), separator="/") == "[0]/['a']"
    assert hash(tu.FlattenedIndexKey(1)) != hash(tu.SequenceKey(1))
    assert tu.FlattenedIndexKey(1) != tu.SequenceKey(1)


def test_partial_keeps_a_partial_it_is_given_whole():
    def f(a, b, c):
        return a + b + c
    inner = functools.partial(f, 2)
    p = tu.Partial(inner, 3)
    assert p.args == (3,) and p.func == inner and inner == p.func and p(4) == 9
    assert hash(p.func) == hash(tu.Partial(inner, 3).func)
    assert tu.tree_leaves(p) == [3]            # the inner partial's 2 is not a leaf


def test_tree_transpose_regroups_the_leaves_as_jax():
    outer = tu.tree_structure(_FlatCache({"a": 1, "b": 2}))
    inner = tu.tree_structure([1, 2])
    assert tu.tree_transpose(outer, inner, _FlatCache({"a": [3, 4], "b": [5, 6]})) == [
        _FlatCache({"a": 3, "b": 5}), _FlatCache({"a": 4, "b": 6})]
    with pytest.raises(TypeError, match=r"Mismatch\nPyTreeDef\(\{'a': \[\*, \*\], 'b': "
                                        r"\[\*, \*\]\}\)\n != \nPyTreeDef"):
        tu.tree_transpose(tu.tree_structure({"a": 1, "b": 2, "c": 3}), inner,
                          {"a": [1, 2], "b": [3, 4]})


def test_is_leaf_takes_path_and_walk():
    tree = ((1, 2), [3, {4: 4, 5: 5}])
    pairs, treedef = tu.tree_flatten_with_path(tree, lambda path, _: len(path) >= 2,
                                               is_leaf_takes_path=True)
    assert pairs[-1] == ((tu.SequenceKey(1), tu.SequenceKey(1)), {4: 4, 5: 5})
    assert treedef == tu.tree_structure(((1, 2), [3, 0]))
    out = jax.tree.map_with_path(lambda path, x: (len(path), x), [1, [2]],
                                 is_leaf=lambda path, x: isinstance(x, list) and len(path) > 0,
                                 is_leaf_takes_path=True)
    assert out == [(1, 1), (1, [2])]
    assert jax.tree.leaves_with_path([1, (2,)], is_leaf=lambda p, x: isinstance(x, tuple),
                                     is_leaf_takes_path=True)[1] == ((tu.SequenceKey(1),), (2,))
    nodes = []
    d = {"b": 2, "a": 1, "c": {"b": 2, "a": 1}}
    leaves, treedef = tu.tree_flatten(d)
    total = treedef.walk(lambda children, data: nodes.append(data) or sum(children),
                         lambda leaf: 10 * leaf, leaves)
    assert total == 60 and nodes == [["a", "b"], ["a", "b", "c"]]
    assert tu.treedef_is_leaf(tu.tree_structure(None)) and tu.treedef_is_leaf(tu.tree_structure(()))
    assert not tu.all_leaves([None]) and tu.all_leaves([None], is_leaf=lambda x: x is None)
    assert not tu.is_tree_node(type(jax.random.key(0)))


def test_tree_reduce_associative_halves_as_jax():
    assert tu.tree_reduce_associative(lambda a, b: f"({a}{b})", list("abcde")) == "((ab)(c(de)))"


def test_tree_map_and_broadcast_mismatches_as_jax():
    with pytest.raises(ValueError) as info:
        jax.tree.map(lambda x, y: y, _Pair(1, [2], 0), _Pair(3, 4, 0))
    assert str(info.value) == (
        "pytree structure error: different types at key path\n"
        "    tree_map tree[<flat index 1>]\n"
        "At that key path, the prefix pytree tree_map tree has a subtree of type\n"
        "    <class 'list'>\n"
        "but at the same key path the full pytree has a subtree of different type\n"
        "    <class 'int'>.")
    with pytest.raises(ValueError) as info:
        jax.tree.map_with_path(lambda p, x, y: y, (1, 2), (1, 2, 3))
    assert str(info.value) == (
        "pytree structure error: different lengths of tuple at key path\n"
        "    tree_map_with_path tree\n"
        "At that key path, the prefix pytree tree_map_with_path tree has a subtree of type tuple "
        "of length 2, but the full pytree has a subtree of the same type but of length 3.")
    with pytest.raises(ValueError, match=r"different numbers of pytree children at key path\n"
                                         r"    broadcast_prefix prefix_tree\['x'\]\n"):
        jax.tree.broadcast({"x": {}}, {"x": {"a": []}})


# --- jax.flatten_util.ravel_pytree ---------------------------------------------------------------

def _typed(x):
    return (np.dtype(x.dtype), bool(x.weak_type))


@pytest.mark.parametrize("tree, flat, dtype, weak, leaf_types", [
    # one dtype: no conversion, so a Python scalar's weak type survives the round trip
    (1.0, [1.0], np.float32, True, [(np.float32, True)]),
    ((3,), [3], np.int32, True, [(np.int32, True)]),
    # several: the promotion of the leaves' dtypes (Python scalars as their default dtypes,
    # not weakly), and each leaf gets its own dtype back, strongly typed
    ([1.0, 2], [1.0, 2.0], np.float32, False, [(np.float32, False), (np.int32, False)]),
    ([True, 1], [1, 1], np.int32, False, [(np.bool_, False), (np.int32, False)]),
    ({"a": np.arange(3), "b": 1.5}, [0.0, 1.0, 2.0, 1.5], np.float32, False,
     [(np.int32, False), (np.float32, False)]),
    ([jnp.ones(1, jnp.bfloat16), jnp.zeros(2, jnp.float16)], [1, 0, 0], np.float32, False,
     [(jnp.bfloat16, False), (np.float16, False)]),
    ([], [], np.float32, False, []),
])
def test_ravel_pytree_dtypes_as_jax(tree, flat, dtype, weak, leaf_types):
    from shardc.flatten_util import ravel_pytree
    raveled, unravel = ravel_pytree(tree)
    assert _typed(raveled) == (np.dtype(dtype), weak)
    np.testing.assert_array_equal(np.asarray(raveled), np.asarray(flat, np.float64))
    back = unravel(raveled)
    assert jax.tree.structure(back) == jax.tree.structure(tree)
    assert [_typed(x) for x in jax.tree.leaves(back)] == [(np.dtype(d), w) for d, w in leaf_types]
    for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(tree)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        assert np.shape(a) == np.shape(b)


def test_unravel_takes_any_dtype_only_when_the_leaves_share_one():
    from shardc.flatten_util import ravel_pytree
    flat, unravel = ravel_pytree(jnp.arange(4, dtype=jnp.float32).reshape(2, 2))
    assert unravel(flat < 1.5).dtype == np.bool_ and unravel(flat < 1.5).shape == (2, 2)
    flat, unravel = ravel_pytree((jnp.ones(2), jnp.ones(3, jnp.int32)))
    with pytest.raises(TypeError, match="unravel function given array of dtype bool, but "
                                        "expected dtype float32"):
        unravel(flat < 5.3)
    with pytest.raises(ValueError, match="Sum of sizes 5 must be equal to dimension 0"):
        unravel(jnp.zeros(4))


def test_ravel_pytree_under_transformations():
    from shardc.flatten_util import ravel_pytree
    params = {"a": 1.0, "b": jnp.ones(2)}
    np.testing.assert_array_equal(jax.jit(lambda p: ravel_pytree(p)[0])(params), np.ones(3))
    grads = jax.grad(lambda p: jnp.sum(ravel_pytree(p)[0] ** 2))(params)
    np.testing.assert_array_equal(grads["b"], [2.0, 2.0])
    assert float(grads["a"]) == 2.0
    batched = jax.vmap(lambda p: ravel_pytree(p)[0])({"a": jnp.ones(3), "b": jnp.ones((3, 2))})
    assert batched.shape == (3, 3)
    # alike trees give equal unravels: as a static argument, one trace serves both
    traces = []

    def step(flat, unravel):
        traces.append(1)
        return unravel(flat + 1)

    step = jax.jit(step, static_argnums=1)
    for _ in range(2):
        flat, unravel = ravel_pytree((jnp.array([1, 2]), jnp.array([3, 4])))
        out = step(flat, unravel)
    assert len(traces) == 1 and [x.tolist() for x in out] == [[2, 3], [4, 5]]


def test_itemsize_bits_counts_bits_not_bytes():
    from shardc import dtypes
    got = {name: dtypes.itemsize_bits(dt) for name, dt in (
        ("int4", dtypes.int4), ("uint2", dtypes.uint2), ("bool", np.bool_),
        ("bfloat16", dtypes.bfloat16), ("float4_e2m1fn", dtypes.float4_e2m1fn),
        ("float32", np.float32), ("complex64", np.complex64))}
    assert got == {"int4": 4, "uint2": 2, "bool": 8, "bfloat16": 16, "float4_e2m1fn": 4,
                   "float32": 32, "complex64": 64}
    with pytest.raises(ValueError, match="dtype cannot be None"):
        dtypes.itemsize_bits(None)


def test_dunder_jax_array_wrappers_convert_where_jax_converts():
    # JAX's protocol for array-like wrappers: jnp functions read the array; a wrapper that is
    # no pytree cannot be a jitted function's argument (JAX's ValueError)
    class Wrapped:
        def __init__(self, value):
            self.value = value

        def __jax_array__(self):
            return self.value

        dtype = property(lambda self: self.value.dtype)
        shape = property(lambda self: self.value.shape)

    w = Wrapped(jnp.array([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(np.asarray(jnp.sin(w)), np.sin([1.0, 2.0, 3.0]), rtol=1e-6)
    assert float(jnp.dot(w, jnp.ones(3))) == 6.0
    np.testing.assert_array_equal(np.asarray(jnp.asarray(w)), [1.0, 2.0, 3.0])
    one = Wrapped(jnp.array(1))
    assert jnp.isscalar(one) and jnp.shape(one) == () and jnp.result_type(one) == np.int32
    np.testing.assert_array_equal(np.asarray(jnp.array(((one, one), [one, one]))),
                                  np.ones((2, 2), np.int32))
    with pytest.raises(ValueError, match=r"Triggering __jax_array__\(\) during "
                                         r"abstractification is no longer supported"):
        jax.jit(lambda x: x)(w)


@pytest.mark.parametrize("copy_func", [jnp.array, jnp.copy, __import__("copy").copy,
                                       __import__("copy").deepcopy],
                         ids=["array", "copy", "copy.copy", "copy.deepcopy"])
def test_a_copy_of_a_one_device_array_holds_its_own_buffer(copy_func):
    """As JAX's: asarray hands the array back; a copy, and a jitted function's result that
    passes it through, hold buffers of their own (their addresses differ) and outlive it."""
    x = jnp.ones(10)
    ptr = lambda a: a.unsafe_buffer_pointer()
    view, view_jit = jnp.asarray(x), jax.jit(jnp.asarray)(x)
    copied, copied_jit = copy_func(x), jax.jit(copy_func)(x)
    assert ptr(view) == ptr(x)
    assert len({ptr(x), ptr(view_jit), ptr(copied), ptr(copied_jit)}) == 4
    with pytest.raises(ValueError, match="read-only"):
        np.from_dlpack(copied)[0] = 9.0          # its buffer is read-only, as every one
    x.delete()
    assert view.is_deleted()
    for kept in (view_jit, copied, copied_jit):
        assert not kept.is_deleted()
        np.testing.assert_array_equal(np.asarray(kept), np.ones(10))

def test_an_explicit_copy_of_a_traced_value_is_a_copy_equation():
    """As JAX's: jnp.copy, jnp.array and asarray/astype with copy=True of a traced value bind
    ``copy`` (linear: its tangent and cotangent are copied too), so jvp, vjp and vmap give new
    arrays; the values are the operand's, in shard_map bodies too."""
    x = jnp.arange(4.0)
    for f in (jnp.copy, jnp.array, lambda v: jnp.asarray(v, copy=True),
              lambda v: v.astype(jnp.float32, copy=True)):
        assert str(jax.make_jaxpr(f)(x)) == ("{ lambda ; a:f32[4]. let\n    b:f32[4] = copy a\n"
                                             "  in (b,) }")
        y, y_dot = jax.jvp(f, (x,), (jnp.ones(4),))
        assert y is not x and np.array_equal(np.asarray(y), np.asarray(x))
        out, pullback = jax.vjp(f, x)
        cotangent = jnp.full(4, 2.0)
        (back,) = pullback(cotangent)
        assert back is not cotangent and np.array_equal(np.asarray(back), np.full(4, 2.0))
        batched = jax.vmap(f)(x)
        assert batched is not x and np.array_equal(np.asarray(batched), np.asarray(x))
    assert "copy" not in str(jax.make_jaxpr(jnp.asarray)(x))
    mesh = jax.make_mesh((4,), ("i",))
    body = jax.shard_map(lambda b: jnp.copy(b) * 2, mesh=mesh, in_specs=jax.P("i"),
                         out_specs=jax.P("i"))
    for run in (body, jax.jit(body)):
        np.testing.assert_array_equal(np.asarray(run(x)), np.arange(4.0) * 2)
    assert float(jax.grad(lambda v: (jnp.copy(v) ** 2).sum())(jnp.float32(3.0))) == 6.0

def test_dce_sink_takes_a_pytree_of_arrays_and_changes_nothing():
    """JAX's lax.dce_sink keeps XLA from dropping a value's computation; shardc computes what
    results need, so it checks its operand and returns None, eagerly, under jit and vmap."""
    def f(x):
        assert lax.dce_sink({"y": x + 1}, prevent_mlir_dce=True) is None
        lax.dce_sink(x)
        return x * 2
    for run in (f, jax.jit(f), jax.vmap(f)):
        np.testing.assert_array_equal(np.asarray(run(jnp.arange(3.0))), [0.0, 2.0, 4.0])
    with pytest.raises(TypeError, match="dce_sink: val\\['k'\\] is 's' of type str"):
        lax.dce_sink({"k": "s"})

def test_small_api_pieces_jax_programs_call():
    x = jax.device_put(1.0)
    assert jax.copy_to_host_async(x) is x and float(x) == 1.0
    assert isinstance(x.unsafe_buffer_pointer(), int)
    text = jax.print_environment_info(return_string=True)
    assert f"jax:    {jax.__version__}" in text and f"numpy:  {np.__version__}" in text
    _, shapes = jax.make_jaxpr(lambda v: (v + 1, jnp.zeros(2, jnp.float32)),
                               return_shape=True)(jnp.int32(1))
    assert shapes == (jax.ShapeDtypeStruct((), jnp.int32),
                      jax.ShapeDtypeStruct((2,), jnp.float32))
    out = jax.jit(lambda v: v * 2).eval_shape(jnp.ones(3))
    assert (out.shape, out.dtype) == ((3,), np.float32)
    # XLA's compiler options are accepted and change nothing
    assert float(jax.jit(lambda v: v + 1, compiler_options={"x": 1})(1.0)) == 2.0
    compiled = jax.jit(lambda v: v + 1).lower(1.0).compile(compiler_options={})
    assert "add" in compiled.as_text(dialect="hlo")


def test_make_jaxpr_takes_stand_ins_for_its_arguments():
    import types
    closed = jax.make_jaxpr(lambda x: x + 2.0)(
        types.SimpleNamespace(shape=(), dtype=np.dtype(np.float32)))
    assert (closed.in_avals[0].shape, closed.in_avals[0].dtype) == ((), np.float32)
    closed = jax.make_jaxpr(lambda x, n: x * n, static_argnums=1)(
        jax.ShapeDtypeStruct((3,), jnp.int32), 2)
    assert str(closed) == ("{ lambda ; a:i32[3]. let\n    b:i32[3] = mul a 2:i32[]\n"
                           "  in (b,) }")
    closed = jax.make_jaxpr(lambda x, y: x @ y)(jax.ShapeDtypeStruct((3, 4), jnp.float32),
                                                y=jax.ShapeDtypeStruct((4,), jnp.float32))
    assert closed.out_avals[0].shape == (3,)



def test_make_jaxpr_inside_a_transformation_keeps_the_values_it_closes_over_as_constants():
    """JAX's: a function traced by make_jaxpr inside vmap, jit or grad may close over that
    transformation's values; they are the program's constants, and evaluating it there
    computes with them (it was an escaped-tracer error)."""
    programs = []

    def run(inp):
        closed = jax.make_jaxpr(lambda x: x + inp * 2)(1)
        programs.append(closed)
        return jax.core.eval_jaxpr(closed.jaxpr, closed.consts, 1)[0]

    np.testing.assert_array_equal(np.asarray(jax.vmap(run)(jnp.arange(3))), [1, 3, 5])
    assert len(programs[0].consts) == len(programs[0].jaxpr.constvars) == 1
    assert int(jax.jit(run)(jnp.int32(3))) == 7 and int(run(jnp.int32(3))) == 7
    assert float(jax.grad(lambda v: run(v))(3.0)) == 2.0

def test_eval_jaxpr_runs_a_traced_program_again_eagerly_or_traced():
    def f(x, y):
        return jnp.sin(x) * y + jnp.array([1., 2., 3.]), x.sum()

    closed = jax.make_jaxpr(f)(jnp.ones(3), 2.)
    assert len(closed.consts) == 1                     # the closed-over array
    x = np.arange(3, dtype=np.float32)
    want = [np.sin(x) * 3 + [1, 2, 3], x.sum()]
    run = lambda a, b: jax.core.eval_jaxpr(closed.jaxpr, closed.consts, a, b)
    for got in (run(x, 3.), jax.jit(run)(x, 3.)):
        assert isinstance(got, list) and len(got) == 2
        np.testing.assert_allclose(np.asarray(got[0]), want[0], rtol=1e-6)
        assert float(got[1]) == 3.0 and got[0].dtype == np.float32
    g = jax.grad(lambda a: run(a, 3.)[0].sum())(x)
    np.testing.assert_allclose(np.asarray(g), 3 * np.cos(x), rtol=1e-6)
    np.testing.assert_array_equal(jax.vmap(lambda a: run(a, 3.)[1])(x.reshape(1, 3) + [[0], ]),
                                  [3.0])
    ones = jax.make_jaxpr(lambda: jnp.zeros(4) + 1)()       # (a program of no arguments)
    with jax.core.ensure_compile_time_eval():
        (out,) = jax.core.eval_jaxpr(ones.jaxpr, ones.consts)
    np.testing.assert_array_equal(np.asarray(out), np.ones(4))
    with pytest.raises(TypeError, match="takes 1 constants and 2 arguments, given 0 and 2"):
        jax.core.eval_jaxpr(closed.jaxpr, [], x, 3.)


def test_pretty_print_takes_jax_options():
    closed = jax.make_jaxpr(lambda x: jnp.sin(x) * 2)(1.0)
    plain = ("{ lambda ; a:f32[]. let\n    b:f32[] = sin a\n    c:f32[] = mul b 2.0:f32[]\n"
             "  in (c,) }")
    assert closed.pretty_print(use_color=False) == plain == str(closed)
    assert closed.jaxpr.pretty_print(use_color=False) == plain      # the open program too
    with_source = closed.pretty_print(source_info=True)
    assert "b:f32[] = sin a  # test_api_extras.py:" in with_source
    with pytest.raises(NotImplementedError, match="print_shapes=False"):
        closed.pretty_print(print_shapes=False)
    assert closed.pretty_print(name_stack=False, print_effects=False) == plain
    with pytest.raises(NotImplementedError, match="name_stack=True.*no name stacks"):
        closed.jaxpr.pretty_print(name_stack=True)
    with pytest.raises(TypeError):
        closed.pretty_print(colour=True)


def test_arrays_and_traced_values_are_unhashable():
    # as JAX's: hash() raises "unhashable type", and neither is a collections.abc.Hashable
    import collections.abc

    a = jnp.ones((1,)) + 1.0
    assert not isinstance(a, collections.abc.Hashable)
    with pytest.raises(TypeError, match="unhashable type: 'Array'"):
        hash(a)

    def f(x):
        assert not isinstance(x, collections.abc.Hashable)
        with pytest.raises(TypeError, match="unhashable type"):
            hash(x)
        return x

    jax.jit(f)(1.0)
    jax.grad(f)(1.0)


def test_transformed_functions_carry_jax_docstrings():
    # JAX's texts: each transformation names the function it transforms (and vmap keeps the
    # original documentation), and keeps its name and signature
    def superfun(a):
        """Does things with stuff."""

    assert jax.grad(superfun, argnums=(0,)).__doc__ == (
        "Gradient of superfun with respect to positional argument(s) (0,). Takes the same "
        "arguments as superfun but returns the gradient, which has the same shape as the "
        "arguments at positions (0,).")
    assert jax.jacrev(superfun).__doc__.startswith(
        "Jacobian of superfun with respect to positional argument(s) 0.")
    assert jax.value_and_grad(superfun).__doc__.startswith("Value and gradient of superfun")
    assert jax.vmap(superfun).__doc__ == (
        "Vectorized version of superfun. Takes similar arguments as superfun but with "
        "additional array axes over which superfun is mapped.\n\nOriginal documentation:\n\n"
        "Does things with stuff.")
    for t in (jax.grad, jax.jacfwd, jax.vmap):
        assert t(superfun).__name__ == "superfun" and t(superfun).__wrapped__ is superfun


def test_live_arrays_lists_the_arrays_not_yet_freed_or_deleted():
    # JAX's jax.live_arrays: every array alive in the backend
    import gc
    x = jnp.arange(5.0) + 1
    y = jax.device_put(np.ones(3, np.float32))
    assert any(a is x for a in jax.live_arrays()) and any(a is y for a in jax.live_arrays())
    ident = id(x)
    del x
    gc.collect()
    assert not any(id(a) == ident for a in jax.live_arrays())
    y.delete()
    assert not any(a is y for a in jax.live_arrays())
    # a jitted cond closing over an array leaves nothing behind once the function is gone
    gc.collect()
    base = len(jax.live_arrays())

    def leak():
        data = jax.device_put(np.zeros(1024, np.float32) + 1)
        g = jax.jit(lambda: jax.lax.cond(True, jax.jit(lambda: data[0]), lambda: data[1]))
        assert float(g()) == 1.0
        g.clear_cache()

    leak()
    gc.collect()
    assert len(jax.live_arrays()) <= base


def test_array_value_is_a_read_only_numpy_view_of_the_global_value():
    """JAX's ``Array._value``: the global value as a numpy array that cannot be written,
    also for an array laid out on a mesh."""
    x = jnp.arange(8.0).reshape(4, 2)
    mesh = jax.make_mesh((4,), ("x",))
    for arr in (x, jax.device_put(x, jax.sharding.NamedSharding(mesh, P("x")))):
        value = arr._value
        assert type(value) is np.ndarray and not value.flags.writeable
        np.testing.assert_array_equal(value, np.arange(8.0).reshape(4, 2))


def test_a_named_tuple_with_its_own_len_and_iteration_is_a_pytree_node():
    """A named tuple whose ``__len__``, ``__iter__`` and ``__getitem__`` mean something else
    (jax.scipy's Rotation of one rotation has no length) flattens, matches and serves as a
    vmap prefix by its fields, as JAX's; matching called its ``__len__``."""
    class Rot(typing.NamedTuple):
        q: object

        def __len__(self):
            raise TypeError("Single rotation has no len().")

        def __iter__(self):
            raise TypeError("not iterable")

        def __getitem__(self, i):
            return Rot(self.q[i])

    r = Rot(jnp.ones(4))
    assert tu.tree_leaves(r)[0].shape == (4,)
    np.testing.assert_array_equal(tu.tree_map(lambda a, b: a + b, r, r).q, np.full(4, 2.0))
    out = jax.vmap(lambda v: v.q * 2, in_axes=(Rot(0),))(Rot(jnp.ones((2, 4))))
    np.testing.assert_array_equal(out, np.full((2, 4), 2.0))


def test_pmap_in_axes_tuple_covers_static_arguments_too():
    """A tuple of in_axes has an entry per positional argument, static ones included (JAX
    drops theirs); a list is no prefix of the arguments' tuple (JAX's error)."""
    x = np.arange(8.0, dtype=np.float32).reshape(4, 2)
    f = jax.pmap(lambda a, n, b: a * n + b, static_broadcasted_argnums=1, in_axes=(0, None, 0))
    np.testing.assert_array_equal(np.asarray(f(x, 3, x)), x * 3 + x)
    g = jax.pmap(lambda a, n, b: a * n + b, static_broadcasted_argnums=1,
                 in_axes=(0, None, None))
    np.testing.assert_array_equal(np.asarray(g(x, 2, x[0])), x * 2 + x[0])
    with pytest.raises(ValueError, match="different types"):
        jax.pmap(lambda a, b: a + b, in_axes=[0, None])(x, x[0])


def test_pmap_sizes_and_static_arguments_checked_at_the_call():
    x = np.ones((4, 2), np.float32)
    with pytest.raises(ValueError, match=re.escape(
            "pmap requires at least one argument with a mapped axis.")):
        jax.pmap(lambda a: a)(3.0)
    with pytest.raises(ValueError, match=re.escape(
            "pmap requires at least one argument with a mapped axis.")):
        jax.pmap(lambda a: a, in_axes=None, axis_size=4)(x)
    with pytest.raises(ValueError, match=re.escape(
            "Specified axis_size 3 doesn't match received axis_size 4.")):
        jax.pmap(lambda a: a, axis_size=3)(x)
    np.testing.assert_array_equal(np.asarray(jax.pmap(lambda a: a, axis_size=4)(x)), x)
    # a static argument beyond the function's parameters is found at the call, as JAX's
    short = jax.pmap(lambda a, b: a, static_broadcasted_argnums=2)
    with pytest.raises(ValueError, match=re.escape(
            "pmapped function has static_broadcasted_argnums=(2,) but was called with only 2 "
            "positional arguments.")):
        short(x, x)


def test_pmap_donates_its_donated_arguments():
    x = jax.pmap(lambda a: a + 1)(np.zeros((4, 3), np.float32))
    kept = jax.pmap(lambda a: a + 1)(np.zeros((4, 3), np.float32))
    out = jax.pmap(lambda a, b: a * 2 + b, donate_argnums=0)(x, kept)
    np.testing.assert_array_equal(np.asarray(out), np.full((4, 3), 3.0))
    assert x.is_deleted() and not kept.is_deleted()
    with pytest.raises(RuntimeError, match="Array has been deleted"):
        np.asarray(x)


@pytest.mark.parametrize("name", ["psum", "pmax", "all_gather", "psum_scatter"])
def test_axis_index_groups_over_a_vmapped_axis_are_jaxs_not_implemented(name):
    collective = {
        "psum": lambda v, g: jax.lax.psum(v, "b", axis_index_groups=g),
        "pmax": lambda v, g: jax.lax.pmax(v, "b", axis_index_groups=g),
        "all_gather": lambda v, g: jax.lax.all_gather(v, "b", axis_index_groups=g),
        "psum_scatter": lambda v, g: jax.lax.psum_scatter(v, "b", axis_index_groups=g),
    }[name]
    message = ("axis_index_groups not supported in vmap collectives. Please open a feature "
               "request!" if name in ("psum", "pmax") else "axis_index_groups not supported "
               "in vmap")
    with pytest.raises(NotImplementedError, match=re.escape(message)):
        jax.vmap(lambda v: collective(v, [[0, 1], [2, 3]]), axis_name="b")(np.ones((4, 2)))
    # over a shard_map's axis, inside the same vmap, groups are taken
    mesh = jax.make_mesh((4,), ("i",))
    body = jax.vmap(lambda v: jax.lax.psum(v, "i", axis_index_groups=[[0, 1], [2, 3]]),
                    axis_name="b")
    out = jax.shard_map(body, mesh=mesh, in_specs=P(None, "i"), out_specs=P(None, "i"),
                        check_vma=False)(np.arange(8.0).reshape(2, 4))
    np.testing.assert_array_equal(np.asarray(out), [[1, 1, 5, 5], [9, 9, 13, 13]])


def test_shards_are_jax_shards():
    mesh = jax.make_mesh((4,), ("x",))
    a = jax.device_put(np.arange(8.0), jax.NamedSharding(mesh, P("x")))
    shards = a.addressable_shards
    assert all(isinstance(s, jax.Shard) for s in shards)
    assert [s.index for s in shards] == [(slice(2 * k, 2 * k + 2),) for k in range(4)]
