"""Bad inputs to the API get the error JAX gives (TypeError, ValueError, OverflowError) with a
message that names the value and where it was given; nothing runs on them.

A generated part feeds every kind of non-array and wrongly-typed value to every place a value
first enters: shard_map (arguments, outputs), the collectives, jit, make_jaxpr, grad, vjp, jvp,
vmap and jnp.asarray."""
import re
from functools import partial

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import shardc
import shardc.numpy as jnp
from shardc import lax
from shardc.sharding import Mesh, PartitionSpec as P

MESH = shardc.make_mesh((4, 2), ("x", "y"))
NOT_JAX = "which is not a valid JAX type"


def smap(body, in_specs=P(), out_specs=P(), check=True):
    return shardc.shard_map(body, mesh=MESH, in_specs=in_specs, out_specs=out_specs,
                            check_vma=check)


# --- the cases of the issue ------------------------------------------------------------------------

@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("value, shown", [
    ("abc", "'abc' of type str"),
    ("hello", "'hello' of type str"),
    (object(), "of type object"),
    (np.array(["a", "b"]), "an array of shape (2,) of dtype str32"),
    (np.array([1, object()], dtype=object), "an array of shape (2,) of dtype object"),
])
def test_shard_map_rejects_values_that_are_not_arrays(value, shown, jit):
    def body(a):
        raise AssertionError("the body must not run on a bad value")

    f = smap(body)
    with pytest.raises(TypeError) as err:
        (shardc.jit(f) if jit else f)(value)
    text = str(err.value)
    if jit:                     # jit sees it first, and says what JAX's jit says
        assert text.startswith(f"Error interpreting argument to {f} as an abstract array. "
                               f"The problematic value is of type {type(value)} and was "
                               "passed to the function at path a.\n")
    else:
        assert shown in text and NOT_JAX in text
        assert "shard_map of 'body': args[0]" in text


def test_shard_map_names_the_argument_path():
    f = smap(lambda p: p["w"], in_specs=(P(),))
    with pytest.raises(TypeError, match=re.escape(
            "shard_map of '<lambda>': args[0]['b'] is 'bias' of type str, " + NOT_JAX)):
        f({"w": jnp.ones(4), "b": "bias"})


def test_static_arguments_of_a_shard_map_may_be_anything():
    f = smap(lambda a, label: a * len(label), in_specs=(P("x"), None), out_specs=P("x"))
    np.testing.assert_array_equal(np.asarray(f(jnp.arange(8.), "abc")), np.arange(8.) * 3)


@pytest.mark.parametrize("jit", [False, True])
def test_psum_of_a_string(jit):
    f = smap(lambda a: lax.psum("abc", "x"))
    with pytest.raises(TypeError, match=re.escape("psum: operand x is 'abc' of type str, "
                                                  + NOT_JAX)):
        (shardc.jit(f) if jit else f)(1.0)


@pytest.mark.parametrize("jit", [False, True])
def test_a_body_that_returns_a_string(jit):
    def body(a):
        return "abc"

    f = smap(body)
    with pytest.raises(TypeError, match=re.escape(
            "shard_map of 'body': its output body(*args) is 'abc' of type str, " + NOT_JAX)):
        (shardc.jit(f) if jit else f)(1.0)


def test_a_string_never_reaches_the_printer():
    """'hello' used to trace into an array of dtype str160 and fail in the printer."""
    f = smap(lambda a: a)
    with pytest.raises(TypeError, match="as an abstract array"):
        shardc.make_jaxpr(f)("hello")
    with pytest.raises(TypeError, match="of type <class 'str'> and was passed to the function "
                                         "at path a"):
        shardc.make_jaxpr(lambda a: a)("hello")


@pytest.mark.parametrize("make", [
    lambda: Mesh(np.array([], dtype=object), ("x",)),
    lambda: Mesh(np.empty((0, 2), dtype=object), ("x", "y")),
    lambda: shardc.make_mesh((0,), ("x",)),
    lambda: shardc.make_mesh((4, 0), ("x", "y")),
])
def test_a_mesh_needs_devices(make):
    with pytest.raises(ValueError, match=r"Mesh needs at least one device, but its devices "
                                         r"array has shape \((0,|4, 0|0, 2)\)"):
        make()


def test_mesh_entries_must_be_devices():
    with pytest.raises(TypeError, match="Mesh devices must be devices .* got 'a' of type str"):
        Mesh(np.array(["a", "b"], dtype=object), ("x",))


def test_a_python_int_too_large_for_int32_is_an_overflow_not_a_wrap():
    """It used to wrap around silently: jit(lambda a: a + 1)(2**40) gave 1."""
    with pytest.raises(OverflowError, match=r"whose argument path is a\. Got <class 'int'> with "
                                            r"value 1099511627776"):
        shardc.jit(lambda a: a + 1)(2 ** 40)
    assert int(shardc.jit(lambda a: a + 1)(2 ** 31 - 2)) == 2 ** 31 - 1


def test_dtype_arguments_must_be_numeric():
    for make in (lambda: jnp.zeros(3, dtype=str), lambda: jnp.ones(3).astype(object),
                 lambda: shardc.ShapeDtypeStruct((3,), "U2")):
        with pytest.raises(TypeError, match=r"dtype (str|object|str64) is not a valid JAX type"):
            make()


def test_jnp_operations_reject_strings_instead_of_reading_them_as_dtypes():
    with pytest.raises(TypeError, match=re.escape("an operand is 'abc' of type str, " + NOT_JAX)):
        jnp.add("abc", 1)
    # a list is not read either: JAX's TypeError asks for an array (jnp.array([1, 2]))
    with pytest.raises(TypeError, match=re.escape(
            "add requires ndarray or scalar arguments, got <class 'list'> at position 0.")):
        jnp.add([1, 2], 1)


def test_aux_outputs_stay_python_values():
    """has_aux output is returned as is (as in JAX), strings included."""
    g, aux = shardc.grad(lambda v: (jnp.sum(v * v), {"name": "loss", "v": v}), has_aux=True)(
        jnp.arange(3.))
    np.testing.assert_allclose(np.asarray(g), [0., 2., 4.])
    assert aux["name"] == "loss"
    np.testing.assert_array_equal(np.asarray(aux["v"]), [0., 1., 2.])
    out, tangent, aux = shardc.jvp(lambda v: (v * 3, object), (2.,), (1.,), has_aux=True)
    assert float(out) == 6. and float(tangent) == 3. and aux is object


def test_valid_values_still_pass():
    f = smap(lambda a: lax.psum(a, ("x", "y")))
    for value, dtype in [(1.5, np.float32), (2, np.int32), (True, np.int32),
                         (np.float16(1.0), np.float16), (1 + 2j, np.complex64),
                         (np.uint8(3), np.uint8)]:
        out = f(value)
        assert out.dtype == dtype
        np.testing.assert_allclose(np.asarray(out), np.asarray(value).astype(dtype) * 8)


# --- generated: every kind of bad value at every place a value enters --------------------------

class _Opaque:
    def __repr__(self):
        return "<opaque>"


BAD_VALUES = {
    "str": "abc",
    "bytes": b"ab",
    "object": _Opaque(),
    "set": {1, 2},
    "function": len,
    "ellipsis": ...,
    "str array": np.array(["a", "bc"]),
    "object array": np.array([1.0, _Opaque()], dtype=object),
    "bytes array": np.array([b"x"]),
    "datetime": np.datetime64("2020-01-01"),
    "timedelta array": np.array([1, 2], dtype="timedelta64[s]"),
    "record array": np.zeros(2, dtype=[("a", "f4"), ("b", "i4")]),
    "str scalar": np.str_("abc"),
}
if np.dtype(np.longdouble).itemsize > 8:
    BAD_VALUES["long double array"] = np.ones(2, dtype=np.longdouble)


def _in_body(collective):
    return lambda v: smap(lambda a: collective(v))(jnp.ones(8))


ENTRIES = {
    # name: (call with the bad value, text the message must name)
    "shard_map argument": (lambda v: smap(lambda a: a)(v), "args[0]"),
    "shard_map nested argument": (lambda v: smap(lambda a: a)((1.0, [v])), "args[0][1][0]"),
    "shard_map output": (lambda v: smap(lambda a: (a, v))(1.0),
                         "its output <lambda>(*args)[1]"),
    "psum": (_in_body(lambda v: lax.psum(v, "x")), "psum: operand x"),
    "pmean": (_in_body(lambda v: lax.pmean(v, "y")), "pmean: operand x"),
    "pmax": (_in_body(lambda v: lax.pmax([1.0, v], "x")), "pmax: operand x[1]"),
    "pmin": (_in_body(lambda v: lax.pmin(v, "x")), "pmin: operand x"),
    "all_gather": (_in_body(lambda v: lax.all_gather(v, "x")), "all_gather: operand x"),
    "psum_scatter": (_in_body(lambda v: lax.psum_scatter(v, "x")), "psum_scatter: operand x"),
    "ppermute": (_in_body(lambda v: lax.ppermute(v, "x", [(0, 1)])), "ppermute: operand x"),
    "all_to_all": (_in_body(lambda v: lax.all_to_all(v, "x", 0, 0)), "all_to_all: operand x"),
    "pvary": (_in_body(lambda v: lax.pvary(v, "x")), "pvary: operand x"),
    "pbroadcast": (_in_body(lambda v: lax.pbroadcast(v, "x", 0)), "pbroadcast: operand x"),
    "jit output": (lambda v: shardc.jit(lambda a: v)(1.0),
                   "traced for jit returned a value of type"),
    "scan output": (lambda v: lax.scan(lambda c, x: (c, [x, v]), 0.0, jnp.ones(2)),
                    "traced for scan returned a value of type"),
    "grad argument": (lambda v: shardc.grad(lambda a: a)(v),
                      "differentiated argument args[0] of '<lambda>'"),
    "grad argnums": (lambda v: shardc.grad(lambda a, b: b, argnums=1)(1.0, {"k": v}),
                     "differentiated argument args[1]['k']"),
    "value_and_grad": (lambda v: shardc.value_and_grad(lambda a: a)(v),
                       "differentiated argument args[0]"),
    "vjp primal": (lambda v: shardc.vjp(lambda a: a, v), "differentiated argument primals[0]"),
    "jvp primal": (lambda v: shardc.jvp(lambda a: a, (v,), (1.0,)),
                   "differentiated argument primals[0]"),
    "jvp tangent": (lambda v: shardc.jvp(lambda a: a, (1.0,), (v,)),
                    "differentiated argument tangents[0]"),
    "vmap argument": (lambda v: shardc.vmap(lambda a: a)(v),
                      "vmap of '<lambda>': argument args[0]"),
    "jnp.asarray": (lambda v: jnp.asarray(v), "asarray: x"),
    "device_put": (lambda v: shardc.device_put({"w": v}, P("x")), "device_put: x['w']"),
    "jnp operand": (lambda v: jnp.multiply(jnp.ones(3), v), "an operand"),
}


@pytest.mark.parametrize("entry", sorted(ENTRIES))
@pytest.mark.parametrize("kind", sorted(BAD_VALUES))
def test_generated_bad_value_is_a_type_error_naming_it(entry, kind):
    call, where = ENTRIES[entry]
    with pytest.raises(TypeError) as err:
        call(BAD_VALUES[kind])
    text = str(err.value)
    assert NOT_JAX in text, text
    assert where in text, text
    assert "\n" not in text


# jit, its lower and make_jaxpr word a bad argument as JAX's jit does, naming its path
JIT_ENTRIES = {
    "jit argument": (lambda f, v: shardc.jit(f)(v), "a"),
    "jit keyword argument": (lambda f, v: shardc.jit(f)(a=v), "a"),
    "jit nested argument": (lambda f, v: shardc.jit(f)({"k": [1.0, v]}), "a['k'][1]"),
    "jit static argnum before": (
        lambda f, v: shardc.jit(lambda n, a: a, static_argnums=0)(3, v), "a"),
    "lower argument": (lambda f, v: shardc.jit(f).lower(v), "a"),
    "shard_map under jit": (lambda f, v: shardc.jit(smap(f))(v), "a"),
    "make_jaxpr argument": (lambda f, v: shardc.make_jaxpr(f)(v), "a"),
}


@pytest.mark.parametrize("entry", sorted(JIT_ENTRIES))
@pytest.mark.parametrize("kind", ["str", "object", "str array", "function"])
def test_jit_bad_argument_is_jax_type_error(entry, kind):
    def f(a):
        raise AssertionError("the function must not be traced on a bad value")

    call, path = JIT_ENTRIES[entry]
    value = BAD_VALUES[kind]
    with pytest.raises(TypeError) as err:
        call(f, value)
    text = str(err.value)
    assert re.match(r"Error interpreting argument to .* as an abstract array\. The problematic "
                    rf"value is of type {re.escape(str(type(value)))} and was passed to the "
                    rf"function at path {re.escape(path)}\.\n", text), text
    assert "static_argnums or static_argnames" in text


@pytest.mark.parametrize("entry", sorted(JIT_ENTRIES))
def test_jit_int_argument_out_of_range_is_jax_overflow_error(entry):
    call, path = JIT_ENTRIES[entry]
    for value in (2 ** 31, -2 ** 31 - 1, 10 ** 20):
        with pytest.raises(OverflowError, match=re.escape(
                "An overflow was encountered while parsing an argument to a jitted computation, "
                f"whose argument path is {path}. Got <class 'int'> with value {value}")):
            call(lambda a: a, value)


@pytest.mark.parametrize("call, name, position, value", [
    (lambda v: lax.add(jnp.array(7), v), "add", 1, np.array("hello")),
    (lambda v: lax.mul(1.0, v), "mul", 1, object()),
    (lambda v: lax.sub(v, 1.0), "sub", 0, "abc"),
    (lambda v: lax.sin(v), "sin", 0, "x"),
])
def test_lax_operand_that_is_no_jax_value_is_jaxs_bind_error(call, name, position, value):
    with pytest.raises(TypeError, match=re.escape(
            f"Error interpreting argument to {name} as a JAX value. The problematic value is of "
            f"type {type(value)} and was passed to {name} at position {position}.")):
        call(value)


def test_operators_leave_other_operands_to_their_own_operators():
    """``array * v`` with ``v`` no JAX type is left to ``v``'s reflected operator (JAX's):
    a class defining one is used, anything else is Python's TypeError naming both types."""
    class Scaled:
        def __rmul__(self, other):
            return "Scaled.__rmul__"

    assert jnp.ones(3) * Scaled() == "Scaled.__rmul__"
    for value in ({1, 2}, [1.0, 2.0, 3.0], {"a": 1}, object()):
        with pytest.raises(TypeError, match=r"unsupported operand type\(s\) for \+: 'Array' "
                                            rf"and '{type(value).__name__}'"):
            jnp.ones(3) + value
    assert (jnp.ones(3) == None) is False     # noqa: E711  (Python's identity fallback)


@pytest.mark.parametrize("entry", ["shard_map argument", "grad argument", "vmap argument"])
def test_generated_out_of_range_int_is_an_overflow(entry):
    call, where = ENTRIES[entry]
    for value in (2 ** 31, -2 ** 31 - 1, 10 ** 20):
        with pytest.raises(OverflowError) as err:
            call(value)
        text = str(err.value)
        assert where in text and f"is the Python int {value}, too large to convert to int32" \
            in text, text


@pytest.mark.parametrize("call, error, message", [
    (lambda: smap(lambda a: lax.psum(a, {"x"}))(1.0), TypeError, "must be a tuple or a str"),
    (lambda: smap(lambda a: lax.psum(a, 3))(1.0), ValueError, "unknown mesh axis '3'"),
    (lambda: smap(lambda a: lax.psum(a, "z"))(1.0), ValueError, "unknown mesh axis 'z'"),
    (lambda: smap(lambda a: lax.all_gather(a, "x", axis="0"))(jnp.ones(4)), TypeError,
     "all_gather: axis must be an int, got '0' of type str"),
    (lambda: smap(lambda a: lax.all_gather(a, "x", axis=0.0))(jnp.ones(4)), TypeError,
     "all_gather: axis must be an int, got 0.0 of type float"),
    (lambda: smap(lambda a: lax.psum_scatter(a, "x", scatter_dimension=None))(jnp.ones(4)),
     TypeError, "psum_scatter: scatter_dimension must be an int, got None"),
    (lambda: smap(lambda a: lax.all_to_all(a, "x", "0", 0))(jnp.ones(4)), TypeError,
     "all_to_all: split_axis must be an int"),
    (lambda: smap(lambda a: lax.ppermute(a, "x", [("a", 1)]))(1.0), TypeError,
     "ppermute: each perm source must be an int, got 'a' of type str"),
    (lambda: smap(lambda a: lax.ppermute(a, "x", [(0, 1.5)]))(1.0), TypeError,
     "ppermute: each perm destination must be an int, got 1.5 of type float"),
    (lambda: smap(lambda a: lax.ppermute(a, "x", "01"))(1.0), TypeError,
     "perm must be a list or a tuple of (source, destination) pairs"),
    (lambda: smap(lambda a: lax.pbroadcast(a, "x", "0"))(1.0), TypeError,
     "pbroadcast: source must be an int, got '0' of type str"),
    (lambda: smap(lambda a: lax.pbroadcast(a, "x", 9))(1.0), ValueError,
     "pbroadcast: source=9 is out of range"),
    # JAX 0.10 checks a shard_map's mesh and specs when it is called
    (lambda: shardc.shard_map(lambda a: a, mesh="mesh", in_specs=P(), out_specs=P())(1.0),
     TypeError,
     "shard_map requires a Mesh instance for its second argument, but got mesh of type"),
    (lambda: shardc.shard_map("f", mesh=MESH, in_specs=P(), out_specs=P()), TypeError,
     "shard_map requires a callable for its first argument"),
    (lambda: shardc.shard_map(lambda a: a, mesh=MESH, in_specs="x", out_specs=P())(1.0),
     TypeError,
     "in_specs argument must be a pytree of PartitionSpec instances"),
    (lambda: shardc.vmap("f"), TypeError, "Expected a callable value"),
    (lambda: shardc.vmap(lambda a: a, in_axes="0")(jnp.ones(3)), (TypeError, ValueError),
     "in_axes"),
    (lambda: shardc.grad(lambda a: a, argnums=2)(1.0), TypeError,
     "differentiating with respect to argnums=2 requires at least 3 positional arguments to "
     "be passed by the caller, but got only 1 positional arguments."),
    # JAX's jvp and vjp messages
    (lambda: shardc.jvp(lambda a, b: a + b, 0.0, (1.0,)), TypeError,
     "primal and tangent arguments to jax.jvp must be tuples or lists; found float and tuple."),
    (lambda: shardc.jvp(lambda a: a, (np.float32(2),), [np.float32(2)]), TypeError,
     "primal and tangent arguments to jax.jvp must have the same tree structure; primals have "
     "tree structure PyTreeDef((*,)) whereas tangents have tree structure PyTreeDef([*])."),
    (lambda: shardc.vjp(lambda a: (a, a), 1.0)[1](1.0, 1.0), TypeError,
     "The function returned by `jax.vjp` applied to <lambda> was called with 2 arguments,"),
])
def test_wrongly_typed_parameters(call, error, message):
    with pytest.raises(error) as err:
        call()
    assert message in str(err.value)


# --- property: the first bad leaf of any pytree is named by its key path ------------------------

PYTREES = st.recursive(
    st.just(1.0),
    lambda children: (st.lists(children, min_size=1, max_size=3)
                      | st.tuples(children, children)
                      | st.dictionaries(st.sampled_from("abc"), children, min_size=1,
                                        max_size=2)),
    max_leaves=6)


def _with_bad_leaf(tree, index, bad, path=""):
    """``tree`` with its ``index``-th leaf (flattening order: dict keys sorted) replaced by
    ``bad``; returns (new tree, that leaf's key path, leaves left to skip)."""
    if isinstance(tree, dict):
        items, found = {}, None
        for key in sorted(tree):
            items[key], sub, index = _with_bad_leaf(tree[key], index, bad, f"{path}[{key!r}]")
            found = found or sub
        return items, found, index
    if isinstance(tree, (list, tuple)):
        items, found = [], None
        for k, child in enumerate(tree):
            item, sub, index = _with_bad_leaf(child, index, bad, f"{path}[{k}]")
            items.append(item)
            found = found or sub
        return type(tree)(items), found, index
    if index == 0:
        return bad, path, -1
    return tree, None, index - 1


def _leaf_count(tree) -> int:
    if isinstance(tree, dict):
        return sum(_leaf_count(v) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return sum(_leaf_count(v) for v in tree)
    return 1


@settings(derandomize=True, deadline=None, max_examples=25)
@given(PYTREES, st.integers(0, 5), st.sampled_from(["abc", _Opaque(), b"x"]))
def test_property_the_bad_leaf_is_named_by_its_path(tree, pick, bad):
    index = pick % _leaf_count(tree)
    broken, path, _ = _with_bad_leaf(tree, index, bad)
    calls = {
        f"shard_map of 'ident': args[0]{path} is ": lambda: smap(ident)(broken),
        f"differentiated argument args[0]{path} of 'total' is ":
            lambda: shardc.grad(total)(broken),
        f"psum: operand x{path} is ": lambda: smap(lambda a: lax.psum(broken, "x"))(1.0),
    }
    for expected, call in calls.items():
        with pytest.raises(TypeError) as err:
            call()
        assert expected in str(err.value) and NOT_JAX in str(err.value)
    with pytest.raises(TypeError, match=re.escape(f"passed to the function at path tree{path}.")):
        shardc.jit(ident)(broken)


def ident(tree):
    return tree


def total(tree):
    return sum(shardc.tree_util.tree_leaves(tree))


# device_put inside a shard_map body, as JAX 0.10.2 takes it (probed side by side)
AUTO4 = shardc.make_mesh((4,), ("i",), axis_types=(shardc.sharding.AxisType.Auto,),
                         devices=shardc.devices()[:4])
EXPLICIT_DEVICE = ("device_put with explicit device not allowed within shard_map-decorated "
                   "functions, but got device ")


@pytest.mark.parametrize("target, eager, jitted", [
    (lambda: shardc.devices()[6], EXPLICIT_DEVICE + "cpu:6", None),   # outside the mesh
    (lambda: shardc.devices()[1], EXPLICIT_DEVICE + "cpu:1", None),
    (lambda: None, None, None),
    (lambda: shardc.NamedSharding(AUTO4, P()),
     "Axes mentioned in `manual_axis_type` field of ShapedArray should be of type `Manual`. "
     "Got manual_axis_type=ManualAxisType(varying=frozenset({'i'}), unreduced=frozenset(), "
     "reduced=frozenset()) with axis: i of type AxisType.Auto", "same"),
    (lambda: P(), "Please set a mesh via `jax.set_mesh` if a PartitionSpec is passed to "
                  "device_put", "same"),
])
def test_device_put_inside_a_body(target, eager, jitted):
    """An eager body refuses any target; under jit a device is a no-op, and a sharding cannot
    hold a value varying over the body's axes."""
    f = shardc.shard_map(lambda b: shardc.device_put(b, target()) * 2, mesh=AUTO4,
                         in_specs=P("i"), out_specs=P("i"))
    x = np.arange(8.0, dtype=np.float32)
    for call, want in ((f, eager), (shardc.jit(f), eager if jitted == "same" else jitted)):
        if want is None:
            np.testing.assert_array_equal(np.asarray(call(x)), x * 2)
        else:
            with pytest.raises(ValueError) as err:
                call(x)
            assert str(err.value) == want


def test_device_put_inside_a_jitted_body_of_an_invariant_value_to_a_sharding_changes_nothing():
    f = shardc.shard_map(lambda b: b + shardc.device_put(jnp.ones(2), shardc.NamedSharding(
        AUTO4, P())), mesh=AUTO4, in_specs=P("i"), out_specs=P("i"))
    x = np.arange(8.0, dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(shardc.jit(f)(x)), x + 1)
    with pytest.raises(ValueError, match="device_put with explicit device not allowed"):
        f(x)


@pytest.mark.parametrize("shape, message", [
    ((-1, 2), "cannot reshape array of shape (3, 3) (size 9) into shape (-1, 2) because the "
              "product of specified axis sizes (2) does not evenly divide 9"),
    ((2, 5), "cannot reshape array of shape (3, 3) (size 9) into shape (2, 5) (size 10)"),
    ((-1, -1), "can only specify one unknown axis size with a `-1` value, got (-1, -1)"),
])
def test_a_bad_reshape_is_jaxs_type_error(shape, message):
    with pytest.raises(TypeError, match=re.escape(message)):
        jnp.ones((3, 3)).reshape(shape)


def _generator(x):
    yield x


@pytest.mark.parametrize("transform", [
    shardc.jit, shardc.grad, shardc.value_and_grad, shardc.jacfwd, shardc.jacrev,
    shardc.hessian, shardc.vmap, shardc.pmap,
    lambda f: shardc.vjp(f, 1.0),
    lambda f: shardc.jvp(f, (1.0,), (1.0,)),
    lambda f: shardc.linearize(f, 1.0),
    lambda f: shardc.eval_shape(f, 1.0),
], ids=["jit", "grad", "value_and_grad", "jacfwd", "jacrev", "hessian", "vmap", "pmap", "vjp",
        "jvp", "linearize", "eval_shape"])
def test_transformations_check_the_function_when_given_it(transform):
    """JAX checks the function a transformation is given at once, not when the result is
    called: anything not callable, a staticmethod object and a generator function."""
    with pytest.raises(TypeError) as info:
        transform(3)
    assert str(info.value) == "Expected a callable value, got 3"
    method = staticmethod(lambda x: x)
    with pytest.raises(TypeError) as info:
        transform(method)
    assert str(info.value) == f"staticmethod arguments are not supported, got {method}"
    with pytest.raises(TypeError) as info:
        transform(_generator)
    assert str(info.value) == f"Expected a function, got a generator function: {_generator}"


def test_a_registered_classes_fields_name_a_bad_jit_argument():
    """A registered dataclass's leaves are named by their fields in the path (JAX's key
    paths: t.b), a class registered without keys by flat indices; they were named by
    position."""
    import dataclasses

    @dataclasses.dataclass
    class Lin:
        w: object
        b: object
        act: str

    shardc.tree_util.register_dataclass(Lin, data_fields=["w", "b"], meta_fields=["act"])

    class Box:
        def __init__(self, x, meta):
            self.x, self.meta = x, meta

    shardc.tree_util.register_pytree_node(Box, lambda b: ((b.x,), b.meta),
                                          lambda meta, ch: Box(ch[0], meta))
    for value, path in ((Lin(jnp.ones(2), object(), "r"), "t.b"),
                        (Box(object(), 1), "t[<flat index 0>]")):
        with pytest.raises(TypeError, match=re.escape(f"passed to the function at path {path}.")):
            shardc.jit(lambda t: t)(value)


@pytest.mark.parametrize("name, kinds", [
    ("sin", "floating, complexfloating"), ("exp", "floating, complexfloating"),
    ("log1p", "floating, complexfloating"), ("rsqrt", "floating, complexfloating"),
    ("logistic", "floating, complexfloating"), ("cbrt", "floating"), ("floor", "floating"),
    ("ceil", "floating"), ("is_finite", "floating")])
def test_a_lax_operation_of_one_operand_refuses_an_integer(name, kinds):
    """lax converts nothing: lax.sin of an int32 is JAX's TypeError (it gave a float32, and
    lax.rsqrt(3) the integer 0)."""
    with pytest.raises(TypeError, match=re.escape(
            f"{name} does not accept dtype int32. Accepted dtypes are subtypes of {kinds}.")):
        getattr(lax, name)(jnp.int32(3))
    assert getattr(lax, name)(jnp.float32(0.5)).shape == ()


def test_grad_of_a_function_whose_output_is_a_container_shows_it():
    """JAX's error shows the output (it described a tuple as one array, and a registered
    class's value as no JAX type)."""
    with pytest.raises(TypeError, match=re.escape(
            "Gradient only defined for scalar-output functions. Output was (")):
        shardc.grad(lambda x: (x, x))(1.0)
    with pytest.raises(TypeError, match="Output was \\{'a'"):
        shardc.grad(lambda x: {"a": x})(1.0)
    with pytest.raises(TypeError, match=re.escape("Output had shape: (2,).")):
        shardc.grad(lambda x: jnp.ones(2) * x)(1.0)
