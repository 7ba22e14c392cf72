"""Spec, mesh and shape errors (SEMANTICS 1.1, 1.6, 1.7, 1.8) and collective axis errors (2.0).

Messages are compared whole where the template fixes them. Each shard_map error is raised the
same way eagerly and under ``jit`` (SEMANTICS 1.7), which the ``wrap`` parameter checks.
"""
import functools
import re

import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from shardc import lax
from shardc.experimental import mesh_utils
from shardc.experimental.shard_map import shard_map
from shardc.sharding import Mesh, NamedSharding, PartitionSpec as P
from ir.sharding import DuplicateSpecError, IndivisibleError
from compiler.shard_map import DuplicateSpecError, ShardingSpecError, UnknownAxisError


def eager(f):
    return f


WRAPS = [pytest.param(eager, id="eager"), pytest.param(jax.jit, id="jit")]


@pytest.fixture
def mesh():
    return jax.make_mesh((4, 2), ('x', 'y'))


def raises(cls, fn, *args):
    """The error ``fn(*args)`` raises, checked to be exactly ``cls``."""
    with pytest.raises(cls) as info:
        fn(*args)
    assert type(info.value) is cls, type(info.value)
    return str(info.value)


def test_error_classes_are_value_errors():
    from compiler.replication import ReplicationError
    for cls in (ShardingSpecError, DuplicateSpecError, UnknownAxisError, ReplicationError):
        assert issubclass(cls, ValueError)
    assert issubclass(UnknownAxisError, NameError)
    assert issubclass(jax.TracerBoolConversionError, TypeError)


# --- 1.1 Mesh ------------------------------------------------------------------------------------

def test_mesh_ndim_mismatch():
    devices = np.array(jax.devices()).reshape(4, 2)
    assert raises(ValueError, Mesh, devices, ('x',)) == (
        "Mesh requires the ndim of its first argument (`devices`) to equal the length of its "
        "second argument (`axis_names`), but got devices.ndim == 2 and len(axis_names) == 1.")


def test_mesh_repeated_axis_name():
    # JAX 0.10.2 builds this mesh and raises DuplicateSpecError once a shard_map's spec names
    # 'x' (or crashes); shardc refuses the mesh with that class, still a ValueError
    devices = np.array(jax.devices()).reshape(4, 2)
    message = "Mesh axis names must be unique, but axis_names=('x', 'x') names 'x' more than once."
    assert raises(DuplicateSpecError, Mesh, devices, ('x', 'x')) == message
    assert raises(DuplicateSpecError, jax.make_mesh, (2, 2), ('x', 'x')) == message
    assert issubclass(DuplicateSpecError, ValueError)
    assert raises(ValueError, Mesh, jax.devices(), (None, 'x')) == "Mesh axis names cannot be None."


def test_make_mesh_names_one_axis_by_a_string_and_checks_its_shape():
    # ``make_mesh((8,), ('x'))``, as JAX's docs write it, is the string 'x': one axis
    mesh = jax.make_mesh((2,), "dp")
    assert mesh.axis_names == ("dp",) and mesh.shape == {"dp": 2}
    assert mesh.axis_types == (jax.sharding.AxisType.Explicit,)
    assert raises(ValueError, jax.make_mesh, 2, ("x",)) == (
        "`axis_shapes` passed to `make_mesh` should be a sequence of ints. Got 2")
    assert jax.make_mesh((np.int64(2), 4), ("a", "b")).shape == {"a": 2, "b": 4}


def test_mesh_repeated_device():
    d = jax.devices()
    assert raises(ValueError, Mesh, np.array([d[0], d[1], d[0]]), ('x',)) == (
        "Mesh devices must be distinct, but cpu:0 appears more than once.")


def test_mesh_nested_list_and_repr():
    d = jax.devices()
    mesh = Mesh([[d[0], d[1]], [d[2], d[3]]], ('i', 'j'))
    assert str(mesh) == "Mesh('i': 2, 'j': 2, axis_types=(Auto, Auto))"
    assert repr(mesh) == "Mesh(axis_sizes=(2, 2), axis_names=('i', 'j'), axis_types=(Auto, Auto))"
    assert dict(mesh.shape) == {'i': 2, 'j': 2} and mesh.size == 4


def test_create_device_mesh_needs_every_device():
    assert raises(ValueError, mesh_utils.create_device_mesh, (3, 2)) == (
        "Number of devices 8 must equal the product of mesh_shape (3, 2)")
    assert mesh_utils.create_device_mesh((4, 2)).shape == (4, 2)


# --- 1.6 keyword arguments -----------------------------------------------------------------------

@pytest.mark.parametrize("wrap", WRAPS)
def test_keyword_arguments_are_rejected(mesh, wrap):
    def body(a, b):
        return a
    f = shard_map(body, mesh, in_specs=(P('x'), P('x')), out_specs=P('x'))
    x = jnp.arange(8.)
    with pytest.raises(TypeError) as info:
        wrap(f)(x, b=x)
    assert str(info.value) == ("shard_map-wrapped function 'body' takes positional arguments "
                               "only, got ['b']")
    g = jax.shard_map(functools.partial(body), mesh=mesh, in_specs=P('x'), out_specs=P('x'))
    with pytest.raises(TypeError) as info:
        wrap(g)(a=x, b=x)
    assert str(info.value) == ("shard_map-wrapped function 'body' takes positional arguments "
                               "only, got ['a', 'b']")


# --- 1.8 argument types --------------------------------------------------------------------------

def test_f_not_callable(mesh):
    assert raises(TypeError, shard_map, 3, mesh, P(), P()) == (
        "shard_map requires a callable for its first argument, but got 3 of type <class 'int'>.")
    assert raises(TypeError, lambda: jax.shard_map("f", mesh=mesh, in_specs=P(),
                                                   out_specs=P())) == (
        "shard_map requires a callable for its first argument, but got 'f' of type "
        "<class 'str'>.")


def test_mesh_not_a_mesh():
    assert raises(TypeError, shard_map, lambda x: x, "mesh", P(), P()) == (
        "shard_map requires a Mesh instance for its second argument, but got mesh of type "
        "<class 'str'>.")
    devices = np.array(jax.devices())
    assert raises(TypeError, shard_map, lambda x: x, devices, P(), P()) == (
        "shard_map requires a Mesh instance for its second argument, but got mesh of type "
        "<class 'numpy.ndarray'>.")


def test_spec_leaf_not_a_partition_spec(mesh):
    x = jnp.arange(8.)
    text = raises(TypeError, lambda: shard_map(lambda x: x, mesh, 'x', P('x'))(x))
    assert text == ("shard_map in_specs argument must be a pytree of PartitionSpec instances, "
                    "but:\n\n  in_specs is x of type str, \n\nCheck the in_specs values passed "
                    "to shard_map.")
    text = raises(TypeError, lambda: shard_map(lambda a, b: a, mesh,
                                               (P('x'), {'w': ('y',)}), P())(x, {'w': x}))
    assert text == ("shard_map in_specs argument must be a pytree of PartitionSpec instances, "
                    "but:\n\n  in_specs[1]['w'][0] is y of type str, \n\nCheck the in_specs "
                    "values passed to shard_map.")
    text = raises(TypeError, lambda: shard_map(lambda a: a, mesh, P('x'), [P(), 3]))
    assert text == ("shard_map out_specs argument must be a pytree of PartitionSpec instances, "
                    "but:\n\n  out_specs[1] is 3 of type int, \n\nCheck the out_specs values "
                    "passed to shard_map.")


def test_old_api_in_specs_none(mesh):
    expected = ("shard_map in_specs argument must be a pytree of PartitionSpec instances, but "
                "it was None. Instead of in_specs=None, did you mean in_specs=P()?")
    assert raises(TypeError, shard_map, lambda x: x, mesh, None, P()) == expected


# --- 1.8 axis names ------------------------------------------------------------------------------

@pytest.mark.parametrize("wrap", WRAPS)
def test_unknown_axis(mesh, wrap):
    x = jnp.arange(8.)
    with pytest.raises(ValueError) as info:
        wrap(shard_map(lambda x: x, mesh, P('z'), P()))(x)
    assert type(info.value) is UnknownAxisError
    assert isinstance(info.value, ShardingSpecError) and isinstance(info.value, NameError)
    assert str(info.value) == (
        "shard_map in_specs argument must refer to an axis marked as manual (frozenset({'x', 'y'})), "
        "but:\n\n  in_specs refers to 'z'\n\nCheck the in_specs values passed to shard_map.")


def test_unknown_axes_are_all_listed(mesh):
    text = raises(UnknownAxisError, shard_map, lambda a, b: a, mesh,
                  (P('z'), P(None, ('x', 'w'))), P())
    assert text == (
        "shard_map in_specs argument must refer to an axis marked as manual (frozenset({'x', 'y'})), "
        "but:\n\n  in_specs[0] refers to 'z'\n\n  in_specs[1] refers to 'w'\n\n"
        "Check the in_specs values passed to shard_map.")


@pytest.mark.parametrize("wrap", WRAPS)
def test_unknown_axis_in_out_specs(mesh, wrap):
    x = jnp.arange(8.)
    with pytest.raises(UnknownAxisError) as info:
        wrap(shard_map(lambda x: x, mesh, P('x'), (P('q'),)))(x)
    assert str(info.value) == (
        "shard_map out_specs argument must refer to an axis marked as manual (frozenset({'x', 'y'})), "
        "but:\n\n  out_specs[0] refers to 'q'\n\nCheck the out_specs values passed to "
        "shard_map.")


DUP = ("A single NamedSharding spec specification can map every mesh axis to at most one "
       "positional dimension, but {spec} has duplicate entries for `{a}` ({where})")


def test_repeated_axis_inside_one_dimension(mesh):
    text = raises(DuplicateSpecError, shard_map, lambda x: x, mesh, P(('x', 'x')), P())
    assert text == DUP.format(spec="P(('x', 'x'),)", a="x", where="in_specs")


def test_repeated_axis_across_dimensions(mesh):
    f = lambda a, b: a  # noqa: E731
    text = raises(DuplicateSpecError, shard_map, f, mesh, (P('x'), P('y', ('x', 'y'))), P())
    assert text == DUP.format(spec="P('y', ('x', 'y'))", a="y", where="in_specs[1]")
    assert issubclass(DuplicateSpecError, ShardingSpecError)
    assert issubclass(DuplicateSpecError, ValueError)


@pytest.mark.parametrize("wrap", WRAPS)
def test_repeated_axis_in_out_specs(mesh, wrap):
    x = jnp.arange(8.)
    with pytest.raises(DuplicateSpecError) as info:
        wrap(shard_map(lambda x: x, mesh, P('x'), {'o': P('x', 'x')}))({'o': x}['o'])
    assert "P('x', 'x') has duplicate entries for `x`" in str(info.value)


# --- 1.8 pytree prefix ---------------------------------------------------------------------------

@pytest.mark.parametrize("wrap", WRAPS)
def test_prefix_length_mismatch(mesh, wrap):
    x = jnp.arange(8.)
    f = shard_map(lambda a, b: a, mesh, in_specs=(P('x'),), out_specs=P('x'))
    with pytest.raises(ValueError) as info:
        wrap(f)(x, x)
    assert str(info.value) == (
        "pytree structure error: different lengths of tuple at key path\n"
        "    shard_map in_specs\n"
        "At that key path, the prefix pytree shard_map in_specs has a subtree of type tuple of "
        "length 1, but the full pytree has a subtree of the same type but of length 2.")


def test_prefix_nested_length_mismatch(mesh):
    x = jnp.arange(8.)
    f = shard_map(lambda a: a[0], mesh, in_specs=([P('x'), P()],), out_specs=P('x'))
    text = raises(ShardingSpecError, f, [x, x, x])
    assert text == (
        "pytree structure error: different lengths of list at key path\n"
        "    shard_map in_specs[0]\n"
        "At that key path, the prefix pytree shard_map in_specs has a subtree of type list of "
        "length 2, but the full pytree has a subtree of the same type but of length 3.")


def test_prefix_type_mismatch(mesh):
    x = jnp.arange(8.)
    f = shard_map(lambda a: a[0], mesh, in_specs=([P('x')],), out_specs=P('x'))
    text = raises(ShardingSpecError, f, (x,))
    assert text == (
        "pytree structure error: different types at key path\n"
        "    shard_map in_specs[0]\n"
        "At that key path, the prefix pytree shard_map in_specs has a subtree of type\n"
        "    <class 'list'>\n"
        "but at the same key path the full pytree has a subtree of different type\n"
        "    <class 'tuple'>.")


def test_prefix_dict_keys_mismatch(mesh):
    x = jnp.arange(8.)
    f = shard_map(lambda a: a['b'], mesh, in_specs=({'a': P('x')},), out_specs=P('x'))
    text = raises(ShardingSpecError, f, {'b': x})
    assert text == (
        "pytree structure error: different pytree metadata at key path\n"
        "    shard_map in_specs[0]\n"
        "At that key path, the prefix pytree shard_map in_specs has a subtree of type\n"
        "    <class 'dict'>\n"
        "with metadata\n"
        "    ('a',)\n"
        "but at the same key path the full pytree has a subtree of the same type but with "
        "metadata\n"
        "    ('b',)\n"
        "so the diff in the metadata at these pytree nodes is\n"
        "    - ('a',)\n"
        "    ?   ^\n"
        "\n"
        "    + ('b',)\n"
        "    ?   ^\n")


def test_prefix_dict_with_more_keys(mesh):
    # a dict of other keys than its prefix's is JAX's "numbers of pytree children" error, not
    # a length error (those are for lists and tuples)
    x = jnp.arange(8.)
    f = shard_map(lambda a: a['b'], mesh, in_specs=({'a': P('x')},), out_specs=P('x'))
    text = raises(ShardingSpecError, f, {'a': x, 'b': x})
    assert text == (
        "pytree structure error: different numbers of pytree children at key path\n"
        "    shard_map in_specs[0]\n"
        "At that key path, the prefix pytree shard_map in_specs has a subtree of type\n"
        "    <class 'dict'>\n"
        "with 1 child keys\n"
        "    a\n"
        "but at the same key path the full pytree has a subtree of the same type but with 2 "
        "child keys\n"
        "    a b\n"
        "so the symmetric difference on key sets is\n"
        "    b")


@pytest.mark.parametrize("wrap", WRAPS)
def test_out_specs_prefix_mismatch(mesh, wrap):
    x = jnp.arange(8.)
    f = shard_map(lambda a: (a, a), mesh, in_specs=P('x'), out_specs=(P('x'), P('x'), P()))
    with pytest.raises(ShardingSpecError) as info:
        wrap(f)(x)
    assert str(info.value) == (
        "pytree structure error: different lengths of tuple at key path\n"
        "    shard_map out_specs\n"
        "At that key path, the prefix pytree shard_map out_specs has a subtree of type tuple of "
        "length 3, but the full pytree has a subtree of the same type but of length 2.")


# --- 1.8 ranks -----------------------------------------------------------------------------------

RANK_TAIL = ("\n\nEntries in in_specs must be of length no greater than the number of axes in "
             "the corresponding input value.\n\nEither revise the spec to be shorter, or modify "
             "'{fn}' so that its inputs have sufficient rank.")
RANK_HEAD = ("shard_map applied to the function '{fn}' was given an in_specs entry which is too "
             "long to be compatible with the corresponding input value from the function:\n\n")


@pytest.mark.parametrize("wrap", WRAPS)
def test_in_spec_too_long(mesh, wrap):
    def matmul(a_block, b_block):
        return a_block
    f = shard_map(matmul, mesh, in_specs=(P('x'), P('y', 'x')), out_specs=P('x'))
    with pytest.raises(ShardingSpecError) as info:
        wrap(f)(jnp.ones((8, 4)), jnp.arange(8.))
    assert str(info.value) == (
        RANK_HEAD.format(fn="matmul") +
        "in_specs[1] is P('y', 'x') which has length 2, but args[1], where args[1] "
        "is bound to matmul's parameter 'b_block', has shape f32[8], which has rank 1 (and 1 < 2)"
        + RANK_TAIL.format(fn="matmul"))


def test_in_spec_too_long_for_a_scalar_adds_the_hint(mesh):
    f = shard_map(lambda x: x, mesh, in_specs=P('x'), out_specs=P())
    text = raises(ShardingSpecError, f, jnp.float32(3.))
    assert text == (
        RANK_HEAD.format(fn="<lambda>") +
        "in_specs is P('x',) which has length 1, but args[0], where args[0] is bound "
        "to <lambda>'s parameter 'x', has shape f32[], which has rank 0 (and 0 < 1)"
        + RANK_TAIL.format(fn="<lambda>") +
        "\n\nFor scalar values (rank 0), consider using an in_specs entry of `P()`, "
        "where `P = jax.sharding.PartitionSpec`.")
    # A Python scalar is rank 0 too.
    text = raises(ShardingSpecError, f, 2.0)
    assert "has shape f32[], which has rank 0 (and 0 < 1)" in text
    assert text.endswith("For scalar values (rank 0), consider using an in_specs entry of "
                         "`P()`, where `P = jax.sharding.PartitionSpec`.")


def test_in_spec_too_long_paths_and_varargs(mesh):
    def body(first, *rest):
        return first
    f = shard_map(body, mesh, in_specs=(P(), {'w': P('x', 'y')}, P('x', None, 'y')),
                  out_specs=P())
    x = jnp.arange(8.)
    text = raises(ShardingSpecError, f, x, {'w': x}, jnp.ones((8, 2)))
    assert text == (
        RANK_HEAD.format(fn="body") +
        "* in_specs[1]['w'] is P('x', 'y') which has length 2, but "
        "args[1]['w'], where args[1] is bound to the index 0 component of body's varargs "
        "parameter 'rest', has shape f32[8], which has rank 1 (and 1 < 2)\n\n"
        "* in_specs[2] is P('x', None, 'y') which has length 3, but args[2], "
        "where args[2] is bound to the index 1 component of body's varargs parameter 'rest', "
        "has shape f32[8,2], which has rank 2 (and 2 < 3)" + RANK_TAIL.format(fn="body"))


def test_one_spec_leaf_covering_a_subtree_names_the_spec_path(mesh):
    f = shard_map(lambda a: a['k'], mesh, in_specs=(P('x', 'y'),), out_specs=P())
    text = raises(ShardingSpecError, f, {'k': jnp.arange(8.)})
    assert ("in_specs[0] is P('x', 'y') which has length 2, but args[0]['k'], "
            "where args[0] is bound to <lambda>'s parameter 'a', has shape f32[8]") in text


def test_function_names(mesh):
    class Body:
        def __call__(self, x):
            return x

    def named(x, scale):
        return x

    x = jnp.float32(1.)
    for fn, name in ((Body(), "Body"), (functools.partial(named, scale=2), "named")):
        f = shard_map(fn, mesh, in_specs=P('x'), out_specs=P())
        text = raises(ShardingSpecError, f, x)
        assert text.startswith(f"shard_map applied to the function '{name}' was given")
        assert f"Either revise the spec to be shorter, or modify '{name}'" in text


@pytest.mark.parametrize("wrap", WRAPS)
def test_out_spec_too_long(mesh, wrap):
    def body(x):
        return {'s': x.sum(), 'v': x}
    f = shard_map(body, mesh, in_specs=P('x'), out_specs={'s': P('x'), 'v': P('x', None)})
    with pytest.raises(ShardingSpecError) as info:
        wrap(f)(jnp.arange(8.))
    assert str(info.value) == (
        "shard_map applied to the function 'body' was given an out_specs entry which is too "
        "long to be compatible with the corresponding output value from the function:\n\n"
        "* out_specs['s'] is P('x',) which has length 1, but body(*args)['s'] has "
        "shape f32[], which has rank 0 (and 0 < 1)\n\n"
        "* out_specs['v'] is P('x', None) which has length 2, but body(*args)['v'] "
        "has shape f32[2], which has rank 1 (and 1 < 2)\n\n"
        "Entries in out_specs must be of length no greater than the number of axes in the "
        "corresponding output value.\n\nEither revise the spec to be shorter, or modify 'body' "
        "so that its outputs have sufficient rank.\n\nFor scalar values (rank 0), consider "
        "using an out_specs entry of `P()`, where `P = jax.sharding.PartitionSpec`. In "
        "particular, for rank 0 outputs which are not "
        "constant over the mesh, add at least one (singleton) axis to them so that they can be "
        "concatenated using out_specs.")


def test_out_spec_too_long_without_scalars_has_no_hint(mesh):
    f = shard_map(lambda x: x, mesh, in_specs=P('x'), out_specs=P('x', 'y'))
    text = raises(ShardingSpecError, f, jnp.arange(8.))
    assert "out_specs is P('x', 'y') which has length 2, but <lambda>(*args) has " \
           "shape f32[2], which has rank 1 (and 1 < 2)" in text
    assert text.endswith("so that its outputs have sufficient rank.")


# --- 1.8 divisibility ----------------------------------------------------------------------------

DIV_HEAD = ("shard_map applied to the function '{fn}' was given argument arrays with axis sizes "
            "that are not evenly divisible by the corresponding mesh axis sizes:\n\n"
            "The mesh given has shape (4, 2) with corresponding axis names ('x', 'y').\n\n")
DIV_TAIL = ("\n\nArray arguments' axis sizes must be evenly divisible by the mesh axis or axes "
            "indicated by the corresponding elements of the argument's in_specs entry. Consider "
            "checking that in_specs are correct, and if so consider changing the mesh axis sizes "
            "or else padding the input and adapting '{fn}' appropriately.")


@pytest.mark.parametrize("wrap", WRAPS)
def test_not_divisible(mesh, wrap):
    def f(x_block):
        return x_block
    g = shard_map(f, mesh, in_specs=P('x'), out_specs=P('x'))
    with pytest.raises(ShardingSpecError) as info:
        wrap(g)(jnp.arange(6.))
    assert str(info.value) == (
        DIV_HEAD.format(fn="f") +
        "the passed args[0] of shape float32[6], where args[0] is bound to f's parameter 'x_block', corresponds "
        "to in_specs of value P('x',), which maps array axis 0 (of size 6) to mesh "
        "axis 'x' (of size 4), but 4 does not evenly divide 6" + DIV_TAIL.format(fn="f"))


def test_not_divisible_by_a_tuple_of_axes(mesh):
    def f(x_block):
        return x_block
    g = shard_map(f, mesh, in_specs=(P(None, ('x', 'y')),), out_specs=P())
    text = raises(ShardingSpecError, g, jnp.ones((3, 12)))
    assert text == (
        DIV_HEAD.format(fn="f") +
        "the passed args[0] of shape float32[3,12], where args[0] is bound to f's parameter 'x_block', "
        "corresponds to in_specs[0] of value P(None, ('x', 'y')), which maps array "
        "axis 1 (of size 12) to mesh axes ('x', 'y') (of total size 8), but 8 does not evenly "
        "divide 12" + DIV_TAIL.format(fn="f"))


def test_not_divisible_several_failures_are_bullets(mesh):
    def f(a, b):
        return a
    g = shard_map(f, mesh, in_specs=(P('x'), P('y', 'x')), out_specs=P())
    text = raises(ShardingSpecError, g, jnp.arange(6.), jnp.ones((3, 6), jnp.int32))
    assert text == (
        DIV_HEAD.format(fn="f") +
        "* the passed args[0] of shape float32[6], where args[0] is bound to f's parameter 'a', corresponds to "
        "in_specs[0] of value P('x',), which maps array axis 0 (of size 6) to mesh "
        "axis 'x' (of size 4), but 4 does not evenly divide 6\n\n"
        "* the passed args[1] of shape int32[3,6], where args[1] is bound to f's parameter 'b', corresponds "
        "to in_specs[1] of value P('y', 'x'), which maps array axis 0 (of size 3) "
        "to mesh axis 'y' (of size 2), but 2 does not evenly divide 3\n\n"
        "* the passed args[1] of shape int32[3,6], where args[1] is bound to f's parameter 'b', corresponds "
        "to in_specs[1] of value P('y', 'x'), which maps array axis 1 (of size 6) "
        "to mesh axis 'x' (of size 4), but 4 does not evenly divide 6" + DIV_TAIL.format(fn="f"))


def test_device_put_divisibility(mesh):
    # on Explicit axes the type names the split: JAX's check of types and its message
    text = raises(ValueError, jax.device_put, jnp.arange(6.), NamedSharding(mesh, P('x')))
    assert text == (
        "Sharding spec ('x',) implies that array axis 0 is partitioned 4 times, but does not "
        "evenly divide the dimension size 6. Got shape: (6,) and sharding NamedSharding("
        "mesh=AbstractMesh('x': 4, 'y': 2, axis_types=(Explicit, Explicit), device_kind=cpu, "
        "num_cores=None, platform=cpu), spec=P('x',))")
    # on Auto axes, the layout's: JAX 0.10's IndivisibleError (a ValueError)
    mesh = jax.make_mesh((4, 2), ('x', 'y'), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    sharding = NamedSharding(mesh, P('x'))
    text = raises(IndivisibleError, jax.device_put, jnp.arange(6.), sharding)
    assert text == (
        f"Sharding {sharding!r} implies that array axis 0 is partitioned 4 times, but the "
        "dimension size is 6 (full shape: (6,), per-dimension tiling factors: [4] should evenly "
        "divide the shape)")
    sharding = NamedSharding(mesh, P(None, ('x', 'y')))
    text = raises(IndivisibleError, jax.device_put, np.ones((2, 12), np.float32), sharding)
    assert issubclass(IndivisibleError, ValueError) and text == (
        f"Sharding {sharding!r} implies that array axis 1 is partitioned 8 times, but the "
        "dimension size is 12 (full shape: (2, 12), per-dimension tiling factors: [1, 8] should "
        "evenly divide the shape)")
    assert "NamedSharding" in text and "Mesh('x': 4, 'y': 2, axis_types=(Auto, Auto))" in text
    # jit's in_shardings and out_shardings check as device_put does; a constraint on an
    # intermediate inside jit may leave blocks uneven (JAX accepts it there)
    x = np.arange(6, dtype=np.float32)
    raises(IndivisibleError, jax.jit(lambda a: a * 2, in_shardings=sharding_1d(mesh)), x)
    raises(IndivisibleError, jax.jit(lambda a: a * 2, out_shardings=sharding_1d(mesh)), x)
    inside = jax.jit(lambda a: jax.lax.with_sharding_constraint(a * 2, sharding_1d(mesh)).sum())
    assert float(inside(x)) == 30.0


def sharding_1d(mesh):
    return NamedSharding(mesh, P('x'))


# --- 1.7 order of checks: two problems, the earlier check wins -----------------------------------

def test_order_callable_before_mesh():
    assert raises(TypeError, shard_map, 3, "mesh", P(), P()).startswith(
        "shard_map requires a callable")


def test_order_mesh_before_spec_leaves():
    assert raises(TypeError, shard_map, lambda x: x, "mesh", 'x', P()).startswith(
        "shard_map requires a Mesh instance")


def test_order_spec_leaves_before_axis_names(mesh):
    text = raises(TypeError, shard_map, lambda a, b: a, mesh, (P('z'), 'x'), P())
    assert text.startswith("shard_map in_specs argument must be a pytree of PartitionSpec")


def test_order_unknown_before_repeated(mesh):
    text = raises(UnknownAxisError, shard_map, lambda a, b: a, mesh,
                  (P('x', 'x'), P('z')), P())
    assert "in_specs[1] refers to 'z'" in text


@pytest.mark.parametrize("wrap", WRAPS)
def test_order_repeated_before_prefix(mesh, wrap):
    with pytest.raises(DuplicateSpecError):
        wrap(shard_map(lambda a, b: a, mesh, (P('x', 'x'),), P()))(jnp.ones((8, 8)), 1.)


@pytest.mark.parametrize("wrap", WRAPS)
def test_order_prefix_before_rank(mesh, wrap):
    f = shard_map(lambda a, b: a, mesh, [P('x', 'y'), P()], P())
    with pytest.raises(ShardingSpecError) as info:
        wrap(f)(jnp.arange(8.), 1.)      # rank problem on a, prefix problem on the whole
    assert str(info.value).startswith("pytree structure error: different types")


@pytest.mark.parametrize("wrap", WRAPS)
def test_order_rank_before_divisibility(mesh, wrap):
    f = shard_map(lambda a, b: a, mesh, (P('x'), P('x', 'y')), P())
    with pytest.raises(ShardingSpecError) as info:
        wrap(f)(jnp.arange(6.), jnp.arange(8.))   # a not divisible, b rank too small
    assert "was given an in_specs entry which is too long" in str(info.value)
    assert "args[1]" in str(info.value) and "args[0]" not in str(info.value)


@pytest.mark.parametrize("wrap", WRAPS)
def test_order_divisibility_before_tracing(mesh, wrap):
    f = shard_map(lambda a: lax.psum(a, 'q'), mesh, P('x'), P())
    with pytest.raises(ShardingSpecError) as info:
        wrap(f)(jnp.arange(6.))
    assert "not evenly divisible" in str(info.value)


@pytest.mark.parametrize("wrap", WRAPS)
def test_order_tracing_before_out_specs(mesh, wrap):
    f = shard_map(lambda a: (lax.psum(a, 'q'),), mesh, P('x'), (P('x'), P()))
    with pytest.raises(UnknownAxisError) as info:
        wrap(f)(jnp.arange(8.))
    assert str(info.value).startswith("Found an unbound axis name: q. To fix this, please call "
                                      "psum under `jax.shard_map`. (psum: unknown mesh axis 'q'")


@pytest.mark.parametrize("wrap", WRAPS)
def test_order_out_prefix_before_out_rank(mesh, wrap):
    f = shard_map(lambda a: [a.sum(), a], mesh, P('x'), (P('x'), P('x')))
    with pytest.raises(ShardingSpecError) as info:
        wrap(f)(jnp.arange(8.))
    assert str(info.value).startswith("pytree structure error: different types")


@pytest.mark.parametrize("wrap", WRAPS)
def test_order_out_rank_before_replication(mesh, wrap):
    f = shard_map(lambda a: (a.sum(), a), mesh, P('x'), (P('x'), P()))
    with pytest.raises(ShardingSpecError) as info:
        wrap(f)(jnp.arange(8.))
    assert "was given an out_specs entry which is too long" in str(info.value)


# --- 2.0 collective axis errors ------------------------------------------------------------------

@pytest.mark.parametrize("wrap", WRAPS)
@pytest.mark.parametrize("name, call", [
    ("psum", lambda x, a: lax.psum(x, a)),
    ("pmean", lambda x, a: lax.pmean(x, a)),
    ("pmax", lambda x, a: lax.pmax(x, a)),
    ("pmin", lambda x, a: lax.pmin(x, a)),
    ("axis_index", lambda x, a: x + lax.axis_index(a)),
    ("pvary", lambda x, a: lax.pvary(x, a)),
])
def test_unknown_axis_inside_a_body(mesh, wrap, name, call):
    f = shard_map(lambda x: call(x, ('x', 'z')), mesh, P(), P(), check_rep=False)
    with pytest.raises(UnknownAxisError) as info:
        wrap(f)(jnp.arange(8.))
    assert isinstance(info.value, ValueError) and isinstance(info.value, NameError)
    assert str(info.value) == (
        f"Found an unbound axis name: z. To fix this, please call {name} under `jax.shard_map`. "
        f"({name}: unknown mesh axis 'z' in axis_name=('x', 'z'); the enclosing shard_map's "
        "mesh has axes ('x', 'y').)")


def test_unknown_single_axis_text(mesh):
    f = shard_map(lambda x: lax.psum(x, 'i'), mesh, P('x'), P())
    assert raises(UnknownAxisError, f, jnp.arange(8.)) == (
        "Found an unbound axis name: i. To fix this, please call psum under `jax.shard_map`. "
        "(psum: unknown mesh axis 'i' in axis_name='i'; the enclosing shard_map's mesh has axes "
        "('x', 'y').)")


@pytest.mark.parametrize("wrap", WRAPS)
def test_unbound_axis_outside_shard_map(wrap):
    x = jnp.arange(8.)
    with pytest.raises(UnknownAxisError) as info:
        wrap(lambda x: lax.psum(x, 'i'))(x)
    assert isinstance(info.value, ValueError) and isinstance(info.value, NameError)
    assert str(info.value) == ("Found an unbound axis name: i. To fix this, please call psum "
                               "under `jax.shard_map`.")
    with pytest.raises(NameError) as info:
        wrap(lambda x: x + lax.axis_index('i'))(x)
    assert str(info.value) == ("Found an unbound axis name: i. To fix this, please call "
                               "axis_index under `jax.shard_map`.")


def test_unbound_axis_python_scalar():
    with pytest.raises(UnknownAxisError) as info:
        lax.psum(1, 'i')
    assert str(info.value).startswith("Found an unbound axis name: i.")


@pytest.mark.parametrize("wrap", WRAPS)
def test_repeated_collective_axis(mesh, wrap):
    f = shard_map(lambda x: lax.psum(x, ('x', 'y', 'x')), mesh, P('x'), P())
    with pytest.raises(ValueError) as info:
        wrap(f)(jnp.arange(8.))
    assert str(info.value) == ("psum: axis_name=('x', 'y', 'x') names mesh axis 'x' more than "
                               "once.")
    f = shard_map(lambda x: x + lax.axis_index(['y', 'y']), mesh, P('x'), P('x'))
    with pytest.raises(ValueError) as info:
        wrap(f)(jnp.arange(8.))
    assert str(info.value) == ("axis_index: axis_name=['y', 'y'] names mesh axis 'y' more "
                               "than once.")


@pytest.mark.parametrize("wrap", WRAPS)
def test_set_as_axis_name(mesh, wrap):
    f = shard_map(lambda x: lax.psum(x, {'x'}), mesh, P('x'), P())
    with pytest.raises(TypeError) as info:
        wrap(f)(jnp.arange(8.))
    assert str(info.value) == "axis_name={'x'} must be a tuple or a str. Got {'x'}"


@pytest.mark.parametrize("wrap", WRAPS)
@pytest.mark.parametrize("name", ["psum", "pmean"])
def test_axis_index_groups_need_the_check_off(mesh, wrap, name):
    collective = getattr(lax, name)
    f = shard_map(lambda x: collective(x, 'x', axis_index_groups=[[0, 1], [2, 3]]), mesh,
                  P('x'), P())
    with pytest.raises(NotImplementedError) as info:
        wrap(f)(jnp.arange(8.))
    assert str(info.value) == (f"{name}: axis_index_groups is not supported with the "
                               "replication check on (as in JAX); pass check_vma=False to "
                               "shard_map")


def test_a_shard_map_with_a_bad_spec_is_refused_when_called_not_when_defined():
    """JAX 0.10 checks specs, mesh and flags at the call: a program may define a shard_map it
    never calls."""
    mesh = jax.make_mesh((2, 4), ("x", "y"))
    for in_specs, out_specs, error in ((P(None, ("x", "y", "x")), P(), DuplicateSpecError),
                                       (P("z"), P(), ValueError),
                                       (P(), P("x", "x"), ValueError),
                                       (3, P(), TypeError)):
        f = jax.shard_map(lambda b: b, mesh=mesh, in_specs=in_specs, out_specs=out_specs)
        with pytest.raises(error):
            f(jnp.ones((8, 8)))


def test_a_named_sharding_refuses_unknown_and_repeated_axes():
    """At construction, as JAX's NamedSharding (before, both were accepted and failed later,
    or not at all)."""
    mesh = jax.make_mesh((2, 4), ("X", "Y"))
    with pytest.raises(ValueError) as info:
        NamedSharding(mesh, P("Z"))
    assert str(info.value) == "Resource axis: Z of P('Z',) is not found in mesh: ('X', 'Y')."
    with pytest.raises(DuplicateSpecError) as info:
        NamedSharding(mesh, P("X", "X"))
    assert str(info.value) == (
        "A single NamedSharding spec specification can map every mesh axis to at most one "
        "positional dimension, but P('X', 'X') has duplicate entries for `X`")
    with pytest.raises(DuplicateSpecError, match="duplicate entries for `Y`"):
        NamedSharding(mesh.abstract_mesh, P(("X", "Y"), "Y"))


def test_abstract_and_empty_meshes_name_what_is_wrong():
    from shardc.sharding import AbstractMesh
    mesh = jax.make_mesh((2,), ("x",))
    arr = jax.device_put(np.arange(8), NamedSharding(mesh, P("x")))
    other = jax.make_mesh((2,), ("y",)).abstract_mesh
    with pytest.raises(ValueError, match=r"Mesh shape of the input \(\('x', 2\),\) does not "
                                         r"match the mesh shape passed to shard_map  "
                                         r"\(\('y', 2\),\)"):
        jax.shard_map(lambda x: x, mesh=other, in_specs=P("y"), out_specs=P("y"))(arr)
    with pytest.raises(ValueError, match="Please pass `jax.Array`s with a `NamedSharding`"):
        jax.shard_map(lambda x: x, mesh=mesh.abstract_mesh, in_specs=P("x"),
                      out_specs=P("x"))(jnp.arange(8))
    # every argument is checked, not only the first
    arr_y = jax.device_put(np.arange(8), NamedSharding(jax.make_mesh((2,), ("y",)), P("y")))
    with pytest.raises(ValueError, match=r"Mesh shape of the input \(\('y', 2\),\) does not "
                                         r"match the mesh shape passed to shard_map  "
                                         r"\(\('x', 2\),\) for shape int32\[8@y\]"):
        jax.shard_map(lambda x, y: (x, y), mesh=mesh.abstract_mesh, in_specs=P("x"),
                      out_specs=P("x"))(arr, arr_y)
    # the abstract mesh of the argument's own mesh finds its devices
    np.testing.assert_array_equal(np.asarray(jax.shard_map(
        lambda x: x, mesh=mesh.abstract_mesh, in_specs=P("x"), out_specs=P("x"))(arr)),
        np.arange(8))
    with pytest.raises(ValueError, match="shard_map requires a non-empty mesh"):
        jax.shard_map(lambda x: x, mesh=AbstractMesh((), ()), in_specs=P("x"),
                      out_specs=P("x"))(jnp.arange(8))


def test_spec_and_mesh_construction_errors_are_jaxs():
    from shardc.sharding import AbstractMesh, AxisType
    for spec in (("x", "y", ("z", ("a",))), ((("a", "b"), "c"),)):
        with pytest.raises(ValueError, match="cannot contain a nested tuple"):
            P(*spec)
    with pytest.raises(TypeError, match="Subclassing `jax.P` is prohibited"):
        type("MyP", (P,), {})
    # one AxisType is a mesh of one axis, never repeated over several
    with pytest.raises(ValueError, match="should match the number of axis_types"):
        AbstractMesh((2, 1), ("x", "y"), axis_types=AxisType.Auto)
    with pytest.raises(ValueError, match="should match the number of axis_types"):
        jax.make_mesh((2, 1), ("x", "y"), axis_types=AxisType.Auto)
    for names in (("explicit",), "explicit"):
        with pytest.raises(TypeError, match="axis_types.*must be of type"):
            AbstractMesh((2,), ("x",), axis_types=names)
    assert AbstractMesh((2,), "x", axis_types=AxisType.Explicit).axis_types == (
        AxisType.Explicit,)


def test_shardings_on_an_abstract_mesh_compare_by_their_splits():
    mesh = jax.make_mesh((2,), ("x",))
    split = NamedSharding(mesh.abstract_mesh, P("x"))
    assert split == NamedSharding(mesh.abstract_mesh, P("x"))
    assert split.is_equivalent_to(NamedSharding(mesh.abstract_mesh, P("x", None)), 2)
    assert not split.is_equivalent_to(NamedSharding(mesh.abstract_mesh, P()), 2)


# --- prefix errors of vmap, device_put, jit and with_sharding_constraint, in JAX's words -------

def test_flatten_axes_errors_list_every_mismatch():
    x = {"a": jnp.arange(2), "b": jnp.arange(3)}
    with pytest.raises(ValueError) as info:
        jax.device_put(x, {"a": [None, None], "b": (None, None)})
    text = str(info.value)
    assert text.startswith("device_put device specification must be a tree prefix of the "
                           "corresponding value; \n  Mismatch details (2 found):\n  pytree "
                           "structure error: different types at key path\n    "
                           "device_put device['a']\n")
    assert "device_put device['b']" in text
    with pytest.raises(ValueError) as info:
        jax.vmap(lambda x: x, in_axes=([0],))(jnp.ones(3))
    assert str(info.value) == (
        "vmap in_axes specification must be a tree prefix of the corresponding value; \n"
        "  Mismatch details (1 found):\n"
        "  pytree structure error: different types at key path\n"
        "    vmap in_axes[0]\n"
        "At that key path, the prefix pytree vmap in_axes has a subtree of type\n"
        "    <class 'list'>\n"
        "but at the same key path the full pytree has a subtree of different type\n"
        "    <class 'compiler.tree.PytreeLeaf'>.")
    mesh = jax.make_mesh((4, 2), ("x", "y"))
    s = NamedSharding(mesh, P())
    with pytest.raises(ValueError, match=r"^with_sharding_constraint shardings specification "
                                         r"must be a tree prefix .*\n  Mismatch details \(1 "):
        lax.with_sharding_constraint({"a": jnp.ones(4), "b": jnp.ones(4)}, [s, s])


def test_jit_sharding_prefix_errors_as_jax():
    from collections import namedtuple
    x = jnp.ones([])
    p = [None, None, None]
    assert len(jax.jit(lambda x: x, in_shardings=(p,), out_shardings=p)([x, x, x])) == 3
    with pytest.raises(ValueError, match=re.escape(
            "pjit in_shardings specification must be a tree prefix of the positional arguments "
            "tuple. In particular, pjit in_shardings must either be a Sharding, a PartitionSpec, "
            "or a tuple of length equal to the number of positional arguments. But pjit "
            "in_shardings is the wrong length: got a tuple or list of length 3 for an args "
            "tuple of length 2.")):
        jax.jit(lambda x, y: x, in_shardings=p, out_shardings=p)(x, x)
    Foo = namedtuple("Foo", ["x"])
    with pytest.raises(ValueError, match="in_shardings is not a tuple: got <class .*Foo'> "
                                         "instead. .*might need to be wrapped in a singleton"):
        jax.jit(lambda x: x, in_shardings=Foo(None), out_shardings=Foo(None))(Foo(x))
    assert jax.jit(lambda x: x, in_shardings=(Foo(None),), out_shardings=Foo(None))(Foo(x)).x == 1
    with pytest.raises(ValueError, match=r"^Mismatch details \(1 found\):\npytree structure "
                                         r"error: different pytree metadata at key path\n    "
                                         r"pjit out_shardings\n"):
        jax.jit(lambda x: {"a": x, "b": x}, out_shardings={"a": None, "c": None})(1.)
