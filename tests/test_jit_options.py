"""``jit``'s options as JAX has them: static arguments by position and by name, donation,
``in_shardings`` and ``out_shardings``; every result held against numpy."""
import re
from functools import partial

import numpy as np
import pytest

import shardc
import shardc.numpy as jnp
from shardc import lax
from shardc.sharding import NamedSharding, PartitionSpec as P, SingleDeviceSharding

MESH = shardc.make_mesh((4, 2), ("x", "y"))
HOST = np.arange(16.0, dtype=np.float32).reshape(8, 2)


# --- static arguments ------------------------------------------------------------------------------

def test_static_argnames_and_argnums_complete_each_other():
    @partial(shardc.jit, static_argnames="n")
    def power(x, n):
        return x ** n

    assert power.static_argnums == (1,)
    np.testing.assert_array_equal(np.asarray(power(HOST, n=3)), HOST ** 3)
    np.testing.assert_array_equal(np.asarray(power(HOST, 3)), HOST ** 3)   # by position too
    np.testing.assert_array_equal(np.asarray(power(HOST, n=2)), HOST ** 2)
    assert power.trace_count == 3            # keyword and positional calls trace apart

    by_number = shardc.jit(lambda x, n: x * n, static_argnums=1)
    assert by_number.static_argnames == ("n",)


def test_negative_static_argnums_count_from_the_end():
    scale = shardc.jit(lambda x, n: x * n, static_argnums=-1)
    np.testing.assert_array_equal(np.asarray(scale(HOST, 3)), HOST * 3)
    scale(HOST, 3)
    assert scale.trace_count == 1


def test_static_arguments_of_another_type_trace_again():
    calls = []

    @partial(shardc.jit, static_argnums=1)
    def f(x, n):
        calls.append(type(n))
        return x * n

    out_int, out_float = f(HOST, 2), f(HOST, 2.0)     # 2 == 2.0, but not the same static
    assert calls == [int, float]
    assert out_int.dtype == np.float32 and out_float.dtype == np.float32


def test_unhashable_static_arguments_are_rejected_naming_them():
    """JAX 0.10.2's ValueError names the value's type, its text and the hash's TypeError,
    for a static argument by position or by name, at top level and under a transformation."""
    def message(text):
        return ("Non-hashable static arguments are not supported. An error occurred while "
                f"trying to hash an object of type <class 'list'>, {text}. The error was:\n"
                "TypeError: unhashable type: 'list'\n")
    f = shardc.jit(lambda x, axes: x.sum(axes), static_argnums=1)
    with pytest.raises(ValueError) as info:
        f(HOST, [0])
    assert str(info.value) == message("[0]")
    np.testing.assert_array_equal(np.asarray(f(HOST, (0,))), HOST.sum(0))
    g = shardc.jit(lambda x, axes: x.sum(tuple(axes)), static_argnames="axes")
    with pytest.raises(ValueError) as info:
        g(HOST, axes=[0, 1])
    assert str(info.value) == message("[0, 1]")
    with pytest.raises(ValueError) as info:
        shardc.grad(lambda x: g(x, axes=[0, 1]))(HOST)
    assert str(info.value) == message("[0, 1]")
    with shardc.disable_jit():       # not hashed when not staged (as in JAX)
        np.testing.assert_array_equal(np.asarray(g(HOST, axes=[0, 1])), HOST.sum((0, 1)))


def test_static_argument_whose_eq_raises_is_a_value_error():
    # JAX's ValueError when a cache lookup compares static arguments and __eq__ raises
    class HashableWithoutEq:
        def __hash__(self):
            return 1

        def __eq__(self, other):
            raise NotImplementedError("no comparison")

    f = shardc.jit(lambda x, y: x + 3, static_argnums=1)
    f(1, HashableWithoutEq())
    with pytest.raises(ValueError, match=re.escape(
            "static arguments should be comparable using __eq__")) as err:
        f(1, HashableWithoutEq())
    assert "NotImplementedError: no comparison" in str(err.value)
    # a call under another trace compares the keys of its shared traces the same way
    g = shardc.jit(lambda x, y: x * 3, static_argnums=1)
    shardc.grad(lambda x: g(x, HashableWithoutEq()))(1.0)
    with pytest.raises(ValueError, match="NotImplementedError: no comparison"):
        shardc.grad(lambda x: g(x, HashableWithoutEq()))(1.0)


def test_argnums_and_argnames_checked_against_the_signature():
    with pytest.raises(ValueError, match=r"static_argnums=\(2,\), but only accepts 2 positional"):
        shardc.jit(lambda x, n: x, static_argnums=2)
    with pytest.raises(ValueError, match=r"invalid argnames \{'m'\} in static_argnames"):
        shardc.jit(lambda x, n: x, static_argnames="m")
    with pytest.raises(ValueError, match="static_argnames and donate_argnames cannot intersect"):
        shardc.jit(lambda x, n: x, static_argnames="n", donate_argnames="n")
    shardc.jit(lambda *args: args[0], static_argnums=5)      # *args takes any position


# --- donation --------------------------------------------------------------------------------------

def test_donated_arguments_are_given_to_the_call():
    @partial(shardc.jit, donate_argnums=0)
    def step(params, grads):
        return params - 0.1 * grads

    params, grads = jnp.asarray(HOST), jnp.ones(HOST.shape)
    out = step(params, grads)
    np.testing.assert_allclose(np.asarray(out), HOST - 0.1)
    assert params.is_deleted() and not grads.is_deleted()    # its memory is the result's
    assert step.donate_argnames == ("params",)
    named = shardc.jit(lambda params, grads: params + grads, donate_argnames="grads")
    assert named.donate_argnums == (1,)


# --- shardings -------------------------------------------------------------------------------------

def test_out_shardings_lay_results_out_as_asked():
    by_rows, by_cols = NamedSharding(MESH, P("x")), NamedSharding(MESH, P(None, "y"))
    f = shardc.jit(lambda a, b: (a * 2, {"s": a + b}), out_shardings=(by_rows, by_cols))
    doubled, summed = f(HOST, HOST)
    assert doubled.sharding == by_rows and summed["s"].sharding == by_cols
    np.testing.assert_array_equal(np.asarray(doubled), HOST * 2)
    np.testing.assert_array_equal(np.asarray(summed["s"]), HOST + HOST)
    # each device holds the block its sharding says
    for shard in summed["s"].addressable_shards:
        np.testing.assert_array_equal(shard.data, (HOST + HOST)[shard.index])
    # the outputs' types say so, and each device computes its own block (no gather: the
    # host values arrive whole and each device keeps its part)
    compiled = f.lower(HOST, HOST)
    assert "c:f32[8@x,2]" in str(compiled.closed) and "f32[8,2@y]" in str(compiled.closed)
    (region,) = compiled.module.all_shard_maps()
    names = [e.primitive.name for e in region.mesh_program.eqns]
    assert "all_gather" not in names and "dynamic_slice" in names


def test_out_shardings_on_one_device():
    device = shardc.devices()[3]
    out = shardc.jit(lambda a: a + 1, out_shardings=SingleDeviceSharding(device))(HOST)
    assert out.sharding == SingleDeviceSharding(device)
    np.testing.assert_array_equal(np.asarray(out), HOST + 1)
    # a device itself is no sharding there (JAX's TypeError), in or out
    for option in ("in_shardings", "out_shardings"):
        with pytest.raises(TypeError, match=f"{option} leaf specifications are expected to be "
                                            "PartitionSpec instances or None, but got cpu:3"):
            shardc.jit(lambda a: a + 1, **{option: device})(HOST)


def test_in_shardings_place_arguments_and_none_leaves_them():
    by_rows = NamedSharding(MESH, P("x"))
    jitted = shardc.jit(lambda a, b: a * b, in_shardings=(by_rows, None))
    out = jitted(HOST, jnp.asarray(HOST))
    np.testing.assert_array_equal(np.asarray(out), HOST * HOST)
    # the argument arrives laid out by rows: a shard_map with P('x') needs no reshard
    body = shardc.shard_map(lambda v: v * 2, mesh=MESH, in_specs=P("x"), out_specs=P("x"))
    traced = shardc.jit(body, in_shardings=by_rows).lower(HOST)
    printed = str(traced.module.lowered(0).device_programs[0].program)
    assert "all_slice" not in printed
    unplaced = shardc.jit(body).lower(HOST)
    assert "all_slice" in str(unplaced.module.lowered(0).device_programs[0].program)


def test_partition_specs_use_the_current_mesh():
    with shardc.set_mesh(MESH):
        f = shardc.jit(lambda x: x * 1, in_shardings=P("x"), out_shardings=P(None, "y"))
        out = f(HOST)
    assert out.sharding == NamedSharding(MESH, P(None, "y"))
    np.testing.assert_array_equal(np.asarray(out), HOST)


def test_in_shardings_with_keyword_arguments_is_an_error():
    f = shardc.jit(lambda x, y: x + y, in_shardings=NamedSharding(MESH, P("x")))
    with pytest.raises(ValueError, match=r"^pjit does not support kwargs when in_shardings is "
                                         r"specified. \(jit of .* got the keyword arguments "
                                         r"\['y'\]; pass them by position\)$"):
        f(HOST, y=HOST)


def test_shardings_prefix_must_match_the_arguments():
    f = shardc.jit(lambda x, y: x + y, in_shardings=(NamedSharding(MESH, P("x")),))
    with pytest.raises(ValueError, match="jit in_shardings"):
        f(HOST, HOST)


def test_nested_jit_with_shardings_under_grad():
    by_rows = NamedSharding(MESH, P("x"))
    inner = shardc.jit(lambda a: (a * a).sum(), in_shardings=by_rows)
    grad = shardc.jit(shardc.grad(inner))(HOST)
    np.testing.assert_allclose(np.asarray(grad), 2 * HOST)


# --- donation: a donated argument's memory is the call's (JAX's, where a result can reuse it) ----

def test_a_donated_argument_is_deleted_when_a_result_can_take_its_place():
    import warnings
    x = jnp.ones(4)
    y = shardc.jit(lambda a: a * 2, donate_argnums=0)(x)
    assert x.is_deleted() and np.asarray(y).tolist() == [2.0] * 4
    for use in (lambda: x + 1, lambda: np.asarray(x)):
        with pytest.raises(RuntimeError,
                           match=r"^Array has been deleted with shape=float32\[4\]\.$"):
            use()
    z = jnp.ones(4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        shardc.jit(lambda a: a.sum(), donate_argnums=0)(z)
    assert not z.is_deleted()                 # no result of its shape: not usable, JAX warns
    assert [str(w.message) for w in caught] == [
        "Some donated buffers were not usable: float32[4]."]
    v = jnp.ones(4)
    u = shardc.jit(lambda a: a, donate_argnums=0)(v)
    assert v.is_deleted() and np.asarray(u).tolist() == [1.0] * 4
    tree = {"a": jnp.ones(2), "b": jnp.ones(3)}
    out = shardc.jit(lambda t: {"a": t["a"] + 1, "b": t["b"] * 2}, donate_argnums=0)(tree)
    assert tree["a"].is_deleted() and tree["b"].is_deleted()
    assert np.asarray(out["b"]).tolist() == [2.0] * 3
    host = np.ones(4, np.float32)             # copied in: nothing of the caller's is deleted
    shardc.jit(lambda a: a * 2, donate_argnums=0)(host)
    assert host.tolist() == [1.0] * 4


def test_array_lifetime_and_placement_attributes():
    a = jnp.ones(4)
    assert (a.committed, a.itemsize, a.is_ready(), len(a.global_shards)) == (False, 4, True, 1)
    assert a.device == shardc.devices()[0]
    moved = a.to_device(shardc.devices()[2])
    assert moved.device == shardc.devices()[2] and np.asarray(moved).tolist() == [1.0] * 4
    mesh = shardc.make_mesh((8,), ("i",))
    b = shardc.device_put(np.ones(8, np.float32), shardc.sharding.NamedSharding(
        mesh, shardc.sharding.PartitionSpec("i")))
    assert b.committed and b.device == b.sharding
    b.delete()
    assert b.is_deleted()
    with pytest.raises(RuntimeError, match="Array has been deleted"):
        np.asarray(b)


def test_out_shardings_are_spelt_as_given_on_explicit_meshes():
    mesh = shardc.make_mesh((4, 2), ("a", "b"))
    x = np.ones((8, 4), np.float32)
    u, v = shardc.jit(lambda x: (x + 1, x - 1),
                      out_shardings=(NamedSharding(mesh, P()), NamedSharding(mesh, P("b"))))(x)
    assert (u.sharding.spec, v.sharding.spec) == (P(), P("b",))
    assert tuple(u.sharding.spec) == () and tuple(v.sharding.spec) == ("b",)
    with shardc.set_mesh(mesh):
        w = shardc.jit(lambda x: x.sum(0), in_shardings=P("a"), out_shardings=P())(x)
    assert tuple(w.sharding.spec) == ()


def test_donation_holds_at_every_call():
    f = shardc.jit(lambda a: a * 2, donate_argnums=0)
    for _ in range(3):
        x = jnp.ones(4)
        f(x)
        assert x.is_deleted()
    # a training step's parameters, donated by name at each step (the cached call too)
    step = shardc.jit(lambda params, lr: {k: v - lr * 2 * v for k, v in params.items()},
                      donate_argnames="params")
    params = {"w": jnp.ones(3), "b": jnp.asarray(np.full(2, 4, np.float32))}
    lr = jnp.asarray(np.float32(0.25))
    for k in range(1, 4):
        new = step(params=params, lr=lr)
        assert all(v.is_deleted() for v in params.values()) and not lr.is_deleted()
        np.testing.assert_array_equal(np.asarray(new["w"]), [0.5 ** k] * 3)
        params = new
    assert step.trace_count == 1
    with pytest.raises(RuntimeError, match=r"Array has been deleted with shape=float32\[2\]"):
        step(params={"w": jnp.ones(3), "b": _deleted(jnp.ones(2))}, lr=lr)


def _deleted(array):
    array.delete()
    return array


def test_a_deleted_array_is_an_error_wherever_its_buffer_is_used():
    """As JAX's: jit of the identity, copies, devices and jnp.asarray(copy=True) raise
    'Array has been deleted'; block_until_ready (the method and jax's function) and
    on_device_size_in_bytes raise JAX's runtime error on the buffer."""
    x = jnp.ones(4)
    x.delete()
    deleted = r"^Array has been deleted with shape=float32\[4\]\.$"
    for use in (lambda: shardc.jit(lambda a: a)(x), lambda: x.copy(), lambda: x.devices(),
                lambda: jnp.asarray(x, copy=True)):
        with pytest.raises(RuntimeError, match=deleted):
            use()
    for use, call in ((lambda: shardc.block_until_ready([x]), "BlockHostUntilReady"),
                      (x.block_until_ready, "BlockHostUntilReady"),
                      (x.on_device_size_in_bytes, "GetOnDeviceSizeInBytes")):
        with pytest.raises(shardc.errors.JaxRuntimeError, match=re.escape(
                f"INVALID_ARGUMENT: {call}() called on deleted or donated buffer")):
            use()
    assert x.shape == (4,) and x.is_deleted()


def test_donated_keyword_arguments_are_deleted_too():
    q = jnp.arange(16.)
    shardc.jit(lambda a, b: a + b, donate_argnames="b")(jnp.arange(16.), b=q)
    a = jnp.arange(16.)
    shardc.jit(lambda a: a * 3, donate_argnums=0)(a=a)
    assert q.is_deleted() and a.is_deleted()



def test_a_donated_array_taken_twice_by_one_call_is_an_error():
    """XLA's error (a JaxRuntimeError, a RuntimeError) for an array the call donates and also
    takes as another argument, by position or by name, on the first call and the cached one
    alike; nothing is deleted. A donated array is gone for device_put too, even to where it
    lies."""
    message = (r"INVALID_ARGUMENT: Attempt to use a buffer that was previously donated in the "
               r"same call to Execute\(\) \(flattened argument 1, replica 0, partition 0, first "
               r"use: 0\)\. Toy example for this bug: `f\(donate\(a\), a\)`\.")
    add = shardc.jit(lambda a, b: a + b, donate_argnums=0)
    x = jnp.zeros(10)
    for _ in range(2):
        with pytest.raises(shardc.errors.JaxRuntimeError, match=message):
            add(x, x)
        assert not x.is_deleted()
    with pytest.raises(RuntimeError, match=message):
        shardc.jit(lambda a, b: a + b, donate_argnames="a")(a=x, b=x)
    with pytest.raises(RuntimeError, match=message):          # donated twice
        shardc.jit(lambda a, b: a + b, donate_argnums=(0, 1))(x, x)
    np.testing.assert_array_equal(np.asarray(add(x, jnp.ones(10))), np.ones(10))
    assert x.is_deleted()
    for where in (shardc.devices()[0], shardc.devices()[-1], None):
        with pytest.raises(RuntimeError, match=r"Array has been deleted with shape=float32\[10\]"):
            shardc.device_put(x, where)

def test_python_numbers_stay_weakly_typed_through_in_shardings_and_vmap():
    mesh = shardc.make_mesh((2, 4), ("x", "y"))
    with shardc.set_mesh(mesh):
        halves = shardc.device_put(np.ones((8, 4), jnp.bfloat16), P("x"))
        scaled = shardc.jit(lambda t, s: t * s, in_shardings=(P("x"), P()))(halves, 2.0)
        assert scaled.dtype == jnp.bfloat16
        assert str(shardc.typeof(shardc.jit(lambda s: s * 2, in_shardings=P())(3.0))) == \
            "~float32[]"
    x = np.ones(3, np.float32)
    assert str(shardc.typeof(shardc.vmap(lambda a: 3.0)(x))) == "~float32[3]"
    assert str(shardc.typeof(shardc.vmap(lambda a, b: b, in_axes=(0, None))(x, 2))) == \
        "~int32[3]"
    assert str(shardc.typeof(shardc.vmap(lambda a: a * 2.0)(x))) == "float32[3]"


@pytest.mark.parametrize("axis_type", ["Auto", "Explicit"])
def test_in_shardings_lay_out_an_unmapped_or_closed_over_array_under_a_trace(axis_type):
    # an array on no mesh, laid out by in_shardings inside vmap or an enclosing jit, is
    # traced there: typed by its layout (as JAX's results show), not retyped as a value
    mesh = shardc.make_mesh((2,), ("x",), axis_types=(getattr(shardc.sharding.AxisType,
                                                              axis_type),))
    s = NamedSharding(mesh, P("x"))
    f = shardc.jit(lambda a, b: (a + b, a), in_shardings=s, out_shardings=s)
    a, b = jnp.arange(4), jnp.arange(20).reshape(5, 4)
    split = "@x" if axis_type == "Explicit" else ""
    for mapped in (shardc.vmap(f, in_axes=(None, 0)), shardc.jit(shardc.vmap(f, (None, 0)))):
        total, same = mapped(a, b)
        np.testing.assert_array_equal(np.asarray(total), np.arange(20).reshape(5, 4)
                                      + np.arange(4))
        np.testing.assert_array_equal(np.asarray(same), np.tile(np.arange(4), (5, 1)))
        assert total.sharding.spec == same.sharding.spec == P(None, "x")
        assert str(shardc.typeof(total)) == f"int32[5,4{split}]"
    total, same = shardc.jit(lambda c: f(a, c))(jnp.arange(4) + 1)
    np.testing.assert_array_equal(np.asarray(total), 2 * np.arange(4) + 1)
    assert total.sharding.spec == P("x") and str(shardc.typeof(same)) == f"int32[4{split}]"


def test_a_nested_jits_shardings_retype_no_split_value():
    """JAX types a nested jit's results as its body does (its shardings lay out only the
    values a call itself takes and gives): called inside another jit on a value split over
    Explicit axes, ``in_shardings``/``out_shardings`` leave its type as it is. Called at
    the top, they lay the call's result out."""
    mesh = shardc.make_mesh((2, 4), ("x", "y"))
    host = np.arange(128, dtype=np.float32).reshape(8, 16)
    with shardc.set_mesh(mesh):
        a = shardc.device_put(host, P("x", "y"))
        out_sharded = shardc.jit(lambda v: v * 2, out_shardings=NamedSharding(mesh, P(None, "x")))
        in_sharded = shardc.jit(lambda v: v * 2, in_shardings=NamedSharding(mesh, P("y", None)))
        assert str(shardc.typeof(out_sharded(a))) == "float32[8,16@x]"
        seen = []

        def outer(v):
            inner = out_sharded(v)
            seen.append(str(shardc.typeof(inner)))
            return inner

        for result in (shardc.jit(outer)(a), shardc.jit(lambda v: in_sharded(v))(a)):
            assert str(shardc.typeof(result)) == "float32[8@x,16@y]"
            np.testing.assert_array_equal(np.asarray(result), host * 2)
        assert seen == ["float32[8@x,16@y]"]


# --- ahead of time: what a lowered or compiled function takes and gives --------------------------

def test_arguments_the_program_never_reads_are_pruned():
    """As JAX's (keep_unused=False): an argument the program never reads decides no device,
    so a program of constants (an optimizer's zeros) is on the default device, uncommitted,
    and a later step taking it by in_shardings moves it; a donated one is not donated."""
    mesh = shardc.make_mesh((2, 4), ("a", "b"), axis_types=(shardc.sharding.AxisType.Auto,) * 2)
    sh = NamedSharding(mesh, P("a", "b"))
    params = shardc.device_put(jnp.ones((8, 16)), sh)
    moments = shardc.jit(jnp.zeros_like)(params)
    assert type(moments.sharding).__name__ == "SingleDeviceSharding" and not moments.committed
    step = shardc.jit(lambda p, m: (p - 0.1 * m, m * 0.9 + p), in_shardings=(sh, sh),
                      out_shardings=(sh, sh))
    new_params, new_moments = step(params, moments)
    assert new_moments.sharding == sh
    np.testing.assert_array_equal(np.asarray(new_moments), np.ones((8, 16)))
    make = lambda: shardc.device_put(jnp.arange(128.0).reshape(8, 16), sh)
    x = make()
    for keep, deleted in ((False, False), (True, True)):
        y = make()
        shardc.jit(lambda v, w: v * 2, donate_argnums=1, keep_unused=keep)(x, y)
        assert y.is_deleted() is deleted
    y = make()
    shardc.jit(lambda v, w: v * 2 + w * 0, donate_argnums=1)(x, y)
    assert y.is_deleted()


def test_a_compiled_call_types_its_results_as_compiled():
    """Weak types come from the signature compiled for, not from the call's arguments (JAX's:
    a Python int passed where an int32 was compiled for gives an int32 result)."""
    struct = shardc.ShapeDtypeStruct((), jnp.int32)
    compiled = shardc.jit(lambda x, y: 2 * x + y).trace(struct, struct).lower().compile()
    out = compiled(3, 4)
    assert int(out) == 10 and not out.weak_type
    assert (out + jnp.int8(1)).dtype == jnp.int32
    weak = shardc.jit(lambda x: x * 2).lower(3.0).compile()(jnp.float32(4.0))
    assert float(weak) == 8.0 and weak.weak_type
    pair = shardc.jit(lambda x: (x, x * 2.0)).lower(jnp.float32(1)).compile()(2.0)
    assert [p.weak_type for p in pair] == [False, False]


def test_lowered_and_compiled_give_their_trees():
    lowered = shardc.jit(lambda x, y: {"a": x + y, "b": (x,)}).lower(jnp.ones(2), 1.0)
    for stage in (lowered, lowered.compile()):
        assert stage.in_tree == shardc.tree.flatten(((1, 1), {}))[1]
        assert stage.out_tree == shardc.tree.flatten({"a": 1, "b": (1,)})[1]


def test_aot_views_of_arguments_and_results():
    auto = shardc.make_mesh((2,), ("x",), axis_types=(shardc.sharding.AxisType.Auto,))
    arr = shardc.device_put(np.arange(8, dtype=np.int32), NamedSharding(auto, P("x")))
    host = np.ones((2, 3), np.float32)
    lowered = shardc.jit(lambda x, y: (x * 2, y.T)).lower(arr, host)
    compiled = lowered.compile()
    # lowered: shapes and dtypes; no layout where none was asked for (JAX's)
    assert [(o.shape, o.dtype, o.sharding) for o in lowered.out_info] == [
        ((8,), np.int32, None), ((3, 2), np.float32, None)]
    # compiled: the layouts the results have when it runs
    assert [o.sharding for o in compiled.out_info] == [
        NamedSharding(auto, P("x")), NamedSharding(auto, P())]
    assert compiled.output_shardings == (NamedSharding(auto, P("x")), NamedSharding(auto, P()))
    assert compiled.input_shardings == ((NamedSharding(auto, P("x")),
                                         NamedSharding(auto, P())), {})
    (x_type, y_type), kw = lowered.in_avals
    assert (x_type.shape, y_type.shape, kw) == ((8,), (2, 3), {})


def test_aot_views_on_one_device_and_on_an_explicit_mesh():
    lowered = shardc.jit(lambda x: x + 1).lower(np.ones(3, np.float32))
    one = SingleDeviceSharding(shardc.devices()[0])
    assert lowered.out_info.sharding is None
    assert lowered.compile().out_info.sharding == one
    assert lowered.compile().input_shardings == ((one,), {})
    explicit = shardc.make_mesh((2,), ("x",))
    with shardc.sharding.set_mesh(explicit):
        a = shardc.device_put(np.arange(8.0, dtype=np.float32), P("x"))
        lowered = shardc.jit(lambda x: x.sum(0)).lower(a)
    # on an Explicit mesh the type names the layout, lowered or compiled
    assert lowered.out_info.sharding == NamedSharding(explicit, P())
    assert lowered.compile().out_info.sharding == NamedSharding(explicit, P())
    traced = shardc.jit(lambda x, *, y: x + y).trace(jnp.ones(2), y=jnp.ones(2))
    assert len(traced.in_avals) == 2 and list(traced.in_avals[1]) == ["y"]
    assert traced.out_info.shape == (2,)


def test_a_donated_argument_laid_out_anew_by_in_shardings_is_deleted():
    # JAX deletes the caller's array even where in_shardings moved it onto the mesh first
    mesh = shardc.make_mesh((4, 2), ("x", "y"))
    replicated = NamedSharding(mesh, P())
    for fun in (lambda x: x * 2, lambda x: x):
        arr = jnp.arange(16)
        want = np.asarray(fun(np.arange(16)))
        out = shardc.jit(fun, in_shardings=replicated, donate_argnums=0)(arr)
        assert arr.is_deleted() and out.sharding.is_fully_replicated
        np.testing.assert_array_equal(np.asarray(out), want)


def test_a_donated_array_split_anew_by_in_shardings_lives_on():
    """Laid out in blocks from one device, the blocks are copies: the call donates them and
    the caller's array lives on (JAX's); where its device keeps the whole array (replicated,
    above) its buffer is used and deleted."""
    mesh = shardc.make_mesh((8,), ("i",), axis_types=(shardc.sharding.AxisType.Auto,))
    arr = jnp.arange(16.).reshape(8, 2)
    out = shardc.jit(lambda x: x + 1, in_shardings=NamedSharding(mesh, P("i")),
                     donate_argnums=0)(arr)
    assert not arr.is_deleted()
    np.testing.assert_array_equal(np.asarray(arr), np.arange(16.).reshape(8, 2))
    np.testing.assert_array_equal(np.asarray(out), np.arange(16.).reshape(8, 2) + 1)


def test_an_argument_laid_out_equivalently_is_taken_as_it_is():
    """in_shardings on another mesh that puts the same blocks on the same devices (a 4x2
    mesh's P(('a', 'b')) and an 8-device P('i')) is the argument's layout: no ValueError, the
    array is used (and donated) as it is, as JAX compares them; a different split is JAX's
    ValueError."""
    auto = shardc.sharding.AxisType.Auto
    mesh8 = shardc.make_mesh((8,), ("i",), axis_types=(auto,))
    mesh42 = shardc.make_mesh((4, 2), ("a", "b"), axis_types=(auto, auto))
    x = shardc.device_put(jnp.arange(16.).reshape(8, 2), NamedSharding(mesh8, P("i")))
    out = shardc.jit(lambda v: v * 2, in_shardings=NamedSharding(mesh42, P(("a", "b"))),
                     donate_argnums=0)(x)
    assert x.is_deleted()
    np.testing.assert_array_equal(np.asarray(out), np.arange(16.).reshape(8, 2) * 2)
    y = shardc.device_put(jnp.ones((8, 2)), NamedSharding(mesh8, P("i")))
    with pytest.raises(ValueError, match="Sharding passed to jit does not match the sharding "
                                         "on the respective arg"):
        shardc.jit(lambda v: v, in_shardings=NamedSharding(mesh42, P("a")))(y)


def test_no_tracing_and_no_execution_refuse_what_they_name():
    @shardc.jit
    def f(x):
        return x

    f(jnp.arange(3))
    with pytest.raises(RuntimeError, match="re-tracing function f for `jit`, but "
                                           "'no_tracing' is set"):
        with shardc.no_tracing():
            f(jnp.arange(4))
    with shardc.no_tracing():
        np.testing.assert_array_equal(np.asarray(f(jnp.arange(3))), np.arange(3))

    @shardc.jit
    def g():
        return jnp.ones(3)

    g()
    with pytest.raises(RuntimeError, match="tried to execute function g, but the "
                                           "no_execution config option is set"):
        with shardc.no_execution():
            g()
    np.testing.assert_array_equal(np.asarray(g()), np.ones(3))
    assert shardc.config.jax_no_tracing is False and shardc.config.jax_no_execution is False


def test_unconstrained_dims_in_jit_shardings_are_refused():
    """JAX's ValueError when jit is made: ``P.UNCONSTRAINED`` belongs to sharding constraints
    inside a function, not to in_shardings or out_shardings; specs without it are fine."""
    auto = shardc.make_mesh((2, 2), ("x", "y"), axis_types=(shardc.sharding.AxisType.Auto,) * 2)
    unc = P.UNCONSTRAINED
    cases = [("in_shardings", NamedSharding(auto, P(unc, "x"))),
             ("out_shardings", NamedSharding(auto, P(unc, unc))),
             ("out_shardings", (None, P(unc)))]
    for name, shardings in cases:
        shown = shardings[1] if isinstance(shardings, tuple) else shardings
        with pytest.raises(ValueError, match=re.escape(
                f"Unconstrained dims are not allowed when passed to {name}: {shown}")):
            shardc.jit(lambda x: x, **{name: shardings})
    with pytest.raises(ValueError, match="Unconstrained dims are not allowed"):
        @shardc.jit(out_shardings=NamedSharding(auto, P(unc, "y")))
        def g(x):
            return x * 3
    f = shardc.jit(lambda x: x * 2, out_shardings=NamedSharding(auto, P(None, "y")))
    np.testing.assert_array_equal(f(jnp.ones((4, 4))), np.full((4, 4), 2.0))


@pytest.mark.parametrize("name", ["in_shardings", "out_shardings"])
def test_a_sharding_on_an_empty_mesh_is_refused_by_jit(name):
    """JAX's ValueError when jit is made with a NamedSharding on the empty mesh (it lays
    nothing out), naming the option; shardc had run the function."""
    empty = NamedSharding(shardc.sharding.Mesh(np.empty((), dtype=object), ()), P())
    with pytest.raises(ValueError, match=re.escape(
            f"One of {name} leaf specifications got an empty NamedSharding: {empty!r} which "
            "is not allowed.")):
        shardc.jit(lambda x: x, **{name: empty})(jnp.ones(32))


def test_shardings_naming_more_dimensions_than_a_value_has_are_refused():
    """JAX's ValueError, worded as JAX's, naming the value by its pytree key path: for
    device_put, jit's in_shardings and out_shardings, and with_sharding_constraint (eager or
    traced); a spec as long as the rank is fine."""
    mesh = shardc.make_mesh((2, 1), ("x", "y"), axis_types=(shardc.sharding.AxisType.Auto,) * 2)
    s = NamedSharding(mesh, P("x", "y"))
    wsc = shardc.lax.with_sharding_constraint

    def message(what, rank, sharding=s):
        extra = " For scalars the PartitionSpec should be P()" if rank == 0 else ""
        return re.escape(
            f"One of {what} is incompatible with its sharding annotation {sharding!r}: Sharding "
            f"{sharding!r} is only valid for values of rank at least {len(sharding.spec)}, but "
            f"was applied to a value of rank {rank}.{extra}")

    cases = [
        (lambda: shardc.device_put(np.arange(2), s), message("device_put args", 1)),
        (lambda: shardc.jit(lambda x: x.sum(), in_shardings=s)(np.arange(2)),
         message("pjit arguments with pytree key path x", 1)),
        (lambda: shardc.jit(lambda a, b: a, in_shardings=(None, s))(np.arange(2),
                                                                    {"k": np.arange(2)}),
         message("pjit arguments with pytree key path b['k']", 1)),
        (lambda: shardc.jit(lambda x: {"o": x.sum()}, out_shardings=s)(np.arange(2)),
         message("pjit outputs with pytree key path result['o']", 0)),
        (lambda: shardc.jit(lambda x: wsc(x, s))(np.arange(2)),
         message("with_sharding_constraint arguments", 1)),
        (lambda: wsc(np.arange(2), s), message("with_sharding_constraint arguments", 1)),
        (lambda: wsc(np.float32(2), NamedSharding(mesh, P("x"))),
         message("with_sharding_constraint arguments", 0, NamedSharding(mesh, P("x")))),
    ]
    for call, want in cases:
        with pytest.raises(ValueError, match=want):
            call()
    f = shardc.jit(lambda x: x * 2, in_shardings=NamedSharding(mesh, P("x", None)),
                   out_shardings=NamedSharding(mesh, P(None, "x")))
    np.testing.assert_array_equal(f(np.ones((2, 2))), np.full((2, 2), 2.0))


def test_lower_takes_shape_dtype_structs_laid_out_by_in_shardings():
    """JAX's ``jit(f, in_shardings=...).lower(ShapeDtypeStruct(...))``: the stand-in takes the
    layout asked for, and the compiled function runs on arrays laid out so."""
    mesh = shardc.make_mesh((2,), ("x",), axis_types=(shardc.sharding.AxisType.Auto,))
    s = NamedSharding(mesh, P("x"))
    stand_in = shardc.ShapeDtypeStruct((2, 2), jnp.float32)
    compiled = shardc.jit(lambda x: x + 4, in_shardings=s, out_shardings=s).lower(
        stand_in).compile()
    assert compiled.input_shardings == ((s,), {}) and compiled.output_shardings == s
    out = compiled(shardc.device_put(jnp.ones((2, 2)), s))
    np.testing.assert_array_equal(out, np.full((2, 2), 5.0))
    assert out.sharding == s


def test_shape_dtype_struct_refuses_a_sharding_longer_than_its_rank():
    mesh = shardc.make_mesh((2,), ("x",))
    for sharding, kind in ((NamedSharding(mesh, P(None, "x", None)), "Sharding"),
                           (P(None, "x", None), "PartitionSpec")):
        with pytest.raises(ValueError, match=re.escape(
                f"{kind} {sharding!r} is only valid for values of rank at least 3, but was "
                "applied to a value of rank 2.")):
            shardc.ShapeDtypeStruct((128, 128), jnp.float32, sharding=sharding)


def test_jit_partition_specs_naming_an_axis_twice_are_refused_naming_the_option():
    """JAX's DuplicateSpecError when jit is made, worded with the option the spec was given
    to; a NamedSharding's spec names itself so."""
    from ir.sharding import DuplicateSpecError
    for name in ("in_shardings", "out_shardings"):
        for spec in (P("x", "x"), P("x", ("y", "x"))):
            with pytest.raises(DuplicateSpecError, match=re.escape(
                    f"A single {name} specification can map every mesh axis to at most one "
                    f"positional dimension, but {spec!r} has duplicate entries for `x`")):
                shardc.jit(lambda x: x, **{name: spec})
    with pytest.raises(DuplicateSpecError, match="A single NamedSharding spec specification"):
        NamedSharding(MESH, P("x", "x"))


def test_a_partition_spec_for_jit_without_a_mesh_is_jaxs_runtime_error():
    x = jnp.arange(4.)
    for option, kwargs in (("out_shardings", {"out_shardings": P("x")}),
                           ("in_shardings", {"in_shardings": P("x")})):
        with pytest.raises(RuntimeError, match=f"jit requires a non-empty mesh in context if "
                                               f"you are passing `PartitionSpec`s to {option}"):
            shardc.jit(lambda v: v * 2, **kwargs)(x)


def test_args_info_says_which_arguments_are_donated():
    # JAX's ahead-of-time view: lowered.args_info mirrors the call's (args, kwargs)
    def fn(x, y):
        return shardc.tree.map(lambda i: i * 2, x), y * 2

    x = {"A": jnp.ones(()), "B": jnp.ones(())}
    y = jnp.ones(3)
    for donate, want in ((1, (False, False, True)), (0, (True, True, False))):
        args, kwargs = shardc.jit(fn, donate_argnums=donate).lower(x, y).args_info
        assert (args[0]["A"].donated, args[0]["B"].donated, args[1].donated) == want
        assert args[1].shape == (3,) and args[1].dtype == np.float32 and kwargs == {}
    f = shardc.jit(lambda x, y, z: (x, y, z), donate_argnames=("z", "y"))
    args, kwargs = f.lower(jnp.ones(2), y=jnp.ones(2), z=jnp.ones(2)).args_info
    assert (args[0].donated, kwargs["y"].donated, kwargs["z"].donated) == (False, True, True)
    g = shardc.jit(lambda n, v: v * n, static_argnums=0, donate_argnums=1)
    assert g.trace(2, jnp.ones(2)).args_info[0][0].donated


def test_donate_argnums_of_a_lowering_counts_argument_leaves():
    # JAX's Lowered/Compiled.donate_argnums: positions among the leaves of (args, kwargs)
    g = shardc.jit(lambda a, b: (a, b), donate_argnames=("b",))
    tree = {"x": jnp.ones(2), "y": jnp.ones(2)}
    assert g.lower(1.0, tree).donate_argnums == (1, 2)
    assert g.lower(1.0, b=tree).compile().donate_argnums == (1, 2)
    assert g.trace(1.0, b=tree).donate_argnums == (1, 2)
    f = shardc.jit(lambda n, v, w: v * n + w, static_argnums=0, donate_argnums=2)
    lowered = f.lower(2, jnp.ones(2), jnp.ones(2))
    assert lowered.donate_argnums == lowered.compile().donate_argnums == (1,)
    assert shardc.jit(lambda v: v).lower(jnp.ones(2)).donate_argnums == ()


def test_memory_analysis_estimates_bytes_per_device():
    f = shardc.jit(lambda x, y: x @ y + 1, donate_argnums=0)
    x = jnp.ones((8, 8))
    stats = f.lower(x, x).compile().memory_analysis()
    # two f32[8,8] arguments, one result that reuses the donated one, the product a temporary
    assert (stats.argument_size_in_bytes, stats.output_size_in_bytes,
            stats.alias_size_in_bytes, stats.temp_size_in_bytes) == (512, 256, 256, 256)
    assert stats.generated_code_size_in_bytes == stats.host_temp_size_in_bytes == 0
    assert stats.peak_memory_in_bytes == 512 + 256 - 256 + 256
    split = NamedSharding(MESH, P(("x", "y")))
    g = shardc.jit(lambda a, b: a * b, in_shardings=split, out_shardings=split)
    stats = g.lower(HOST, HOST).compile().memory_analysis()
    # each of the 8 devices holds a row of each argument (8 bytes) and of the result
    assert (stats.argument_size_in_bytes, stats.output_size_in_bytes) == (16, 8)
    # a chain of elementwise operations: each intermediate lives until the next one is made
    h = shardc.jit(lambda a: jnp.sin(jnp.cos(a) * 2) + a)
    assert h.lower(jnp.ones(1000)).memory_analysis().temp_size_in_bytes == 8000


def test_cost_analysis_counts_as_xlas_does():
    """JAX's dict of flops, transcendentals and bytes accessed per device (the figures are
    XLA CPU's for the same programs); a count of 0 is left out, as in JAX's."""
    x, y = jnp.ones((16, 16)), jnp.ones((16, 32))
    cost = lambda f, *args: shardc.jit(f).lower(*args).compile().cost_analysis()
    assert cost(lambda a, b: a @ b, x, y) == {"flops": 16384.0, "bytes accessed": 5120.0}
    assert cost(lambda a: a + a, x) == {"flops": 256.0, "bytes accessed": 2048.0}
    assert cost(jnp.exp, x) == {"transcendentals": 256.0, "bytes accessed": 2048.0}
    assert cost(lambda a: jnp.tanh(a) * 2 + 1, x) == {
        "flops": 512.0, "transcendentals": 256.0, "bytes accessed": 2048.0}
    assert cost(lambda a: a.sum(), x)["flops"] == 255.0
    assert cost(lambda a: a.max(axis=0), x)["flops"] == 240.0
    assert cost(lambda a: a ** 3, x)["flops"] == 512.0           # x * (x * x)
    assert cost(lambda a: jnp.where(a > 0, a, 2.0), x)["flops"] == 512.0
    assert cost(lambda a: jnp.cumsum(a, axis=0), x)["flops"] == 3840.0
    assert cost(lambda a: jnp.einsum("bij,bjk->bik", a, a), jnp.ones((4, 8, 8)))["flops"] == 4096
    # a shard_map body counts on one device's blocks (a 16x8 by 8x16 product, a psum of 256)
    mesh = shardc.make_mesh((8,), ("x",))
    body = shardc.shard_map(lambda a: lax.psum(a @ a.T, "x"), mesh=mesh, in_specs=P(None, "x"),
                            out_specs=P())
    assert cost(body, jnp.ones((16, 64)))["flops"] == 4352.0
    # a scan's body once per iteration
    loop = lambda a: lax.scan(lambda c, _: (c * 2.0, None), a, None, length=5)[0]
    assert cost(loop, x)["flops"] == 5 * 256


class _Abstract:
    """An object with only a shape and a dtype (as JAX's ShapedArray is to lower)."""

    def __init__(self, shape, dtype, weak_type=False):
        self.shape, self.dtype, self.weak_type = shape, np.dtype(dtype), weak_type


def test_lower_and_eval_shape_take_anything_with_a_shape_and_a_dtype():
    f = shardc.jit(lambda x, y: x @ y + 1)
    lowered = f.lower(_Abstract((3, 4), "float32"), _Abstract((4, 2), "float32"))
    assert lowered.out_info == shardc.ShapeDtypeStruct((3, 2), np.float32)
    a, b = np.ones((3, 4), np.float32), np.ones((4, 2), np.float32)
    np.testing.assert_array_equal(np.asarray(lowered.compile()(a, b)), a @ b + 1)
    traced = f.trace(_Abstract((3, 4), "int32"), y=_Abstract((4, 2), "int32"))
    assert traced.out_info.dtype == np.int32
    out = shardc.eval_shape(lambda x: x * 2, _Abstract((3,), "float16"))
    assert (out.shape, out.dtype) == ((3,), np.float16)
    # its weak type is read too: a weak int32 plus a Python int stays int32
    g = shardc.jit(lambda a, b: a + b)
    assert g.lower(_Abstract((2,), np.int32, weak_type=True), 1).out_info.dtype == np.int32
    # shardc's own types (typeof) stand in with their sharding
    split = shardc.device_put(HOST, NamedSharding(MESH, P("x")))
    typed = shardc.jit(lambda v: v * 2).lower(shardc.typeof(split)).out_info
    assert typed.shape == (8, 2)
    # static arguments are left as they are; calling with a stand-in is JAX's TypeError
    h = shardc.jit(lambda n, v: v * n, static_argnums=0)
    assert h.lower(3, _Abstract((2,), "float32")).out_info.shape == (2,)
    with pytest.raises(TypeError, match="not a valid JAX type"):
        f(_Abstract((3, 4), "float32"), b)


def test_stages_types_tell_the_stages_apart():
    from shardc import stages
    f = shardc.jit(lambda v: v * 2)
    lowered = f.lower(HOST)
    compiled = lowered.compile()
    assert isinstance(f, stages.Wrapped) and not isinstance(lambda v: v, stages.Wrapped)
    assert isinstance(lowered, stages.Lowered) and not isinstance(lowered, stages.Compiled)
    assert isinstance(compiled, stages.Compiled) and not isinstance(compiled, stages.Lowered)
    assert isinstance(f.trace(HOST), stages.Traced)
    assert isinstance(lowered.args_info[0][0], stages.ArgInfo)


def test_a_compiled_function_runs_under_the_mesh_it_was_lowered_under():
    # JAX's executable keeps its devices: called outside the set_mesh block it was lowered
    # in, its results still come out replicated on that mesh, as output_shardings says
    auto = shardc.make_mesh((4, 2), ("x", "y"), axis_types=(shardc.sharding.AxisType.Auto,) * 2)
    x = jnp.arange(8.0)
    with shardc.set_mesh(auto):
        compiled = shardc.jit(lambda a: a * 2).lower(x).compile()
        inside = compiled(x)
    outside = compiled(x)
    replicated = NamedSharding(auto, P())
    assert inside.sharding == outside.sharding == compiled.output_shardings == replicated
    np.testing.assert_array_equal(np.asarray(outside), np.arange(8.0) * 2)
    assert compiled.memory_analysis().output_size_in_bytes == 32


def test_a_compiled_call_takes_arguments_laid_out_as_it_was_compiled_for():
    # JAX's executable: a committed array laid out otherwise is a ValueError naming it; an
    # uncommitted array or a host value is moved to the layout compiled for
    split = NamedSharding(MESH, P("x", "y"))
    a1 = shardc.device_put(HOST, split)
    compiled = shardc.jit(lambda x: x * 2).lower(a1).compile()
    for given in (a1, HOST, jnp.asarray(HOST)):
        out = compiled(given)
        assert out.sharding == split
        np.testing.assert_array_equal(np.asarray(out), HOST * 2)
    rows = shardc.device_put(HOST, NamedSharding(MESH, P("x")))
    message = ("Computation was compiled for input shardings that disagree with the shardings "
               "of arguments passed to it. Here are the 1 mismatches:\nArgument x with shape "
               f"float32[8@x,2]:\n  Passed sharding: {rows.sharding}\n  Required sharding: "
               f"{split}")
    with pytest.raises(ValueError, match=re.escape(message)):
        compiled(rows)
    single = shardc.jit(lambda x, y: x + y).lower(jnp.ones(3), jnp.ones(3)).compile()
    on1 = shardc.device_put(jnp.ones(3), shardc.devices()[1])
    with pytest.raises(ValueError, match=r"Argument x with shape float32\[3\]:\n  Passed "
                                         r"sharding: SingleDeviceSharding\(device=CpuDevice"
                                         r"\(id=1\)"):
        single(on1, jnp.ones(3))
    on0 = shardc.device_put(jnp.ones(3), shardc.devices()[0])
    np.testing.assert_array_equal(np.asarray(single(on0, jnp.ones(3))), np.full(3, 2.0))


def test_compile_checks_the_device_assignment_it_is_given():
    d = shardc.devices()
    mesh = shardc.make_mesh((2,), ("x",), devices=d[:2])
    x = shardc.device_put(np.arange(8.0), NamedSharding(mesh, P("x")))
    f = shardc.jit(lambda a: a * 2)
    compiled = f.lower(x).compile(device_assignment=(d[0], d[1]))
    np.testing.assert_array_equal(np.asarray(compiled(x)), np.arange(8.0) * 2)
    message = ("device_assignment passed to `.compile` must match the device_assignment "
               "calculated from array shardings and out_shardings. Got device ids passed to "
               "compile [1, 0] on platform CPU and devices ids calculated from array shardings "
               "and out_shardings [0, 1] on platform CPU")
    with pytest.raises(ValueError, match=re.escape(message)):
        f.lower(x).compile(device_assignment=(d[1], d[0]))
    f.lower(np.arange(8.0)).compile(device_assignment=(d[0],))     # host values: device 0
    with pytest.raises(ValueError, match=re.escape("compile [3] on platform CPU and devices "
                                                   "ids calculated from array shardings and "
                                                   "out_shardings [0]")):
        f.lower(np.arange(8.0)).compile(device_assignment=(d[3],))
    on2 = shardc.device_put(np.arange(8.0), d[2])
    f.lower(on2).compile(device_assignment=(d[2],))
    with pytest.raises(ValueError, match=re.escape("[3] on platform CPU and devices ids "
                                                   "calculated from array shardings and "
                                                   "out_shardings [2]")):
        f.lower(on2).compile(device_assignment=(d[3],))


def test_jit_device_and_backend_as_jax_deprecated_options():
    d1 = shardc.devices()[1]
    x = shardc.device_put(np.arange(3.), shardc.devices()[0])      # committed elsewhere
    with pytest.warns(DeprecationWarning, match="backend and device argument on jit"):
        f = shardc.jit(lambda a, b: a + b, device=d1)
    out = f(x, 2.0)
    assert out.sharding == SingleDeviceSharding(d1) and out._committed
    np.testing.assert_array_equal(np.asarray(out), np.arange(3.) + 2)
    with pytest.warns(DeprecationWarning):
        out = shardc.jit(lambda a: a * 2, backend="cpu")(np.arange(3.))
    assert out._committed and out.sharding == SingleDeviceSharding(shardc.devices()[0])
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="can't specify both"):
        shardc.jit(lambda a: a, device=d1, backend="cpu")
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="then out_shardings "
                                                                         "should not be"):
        shardc.jit(lambda a: a, device=d1, out_shardings=SingleDeviceSharding(d1))
    with pytest.warns(DeprecationWarning), pytest.raises(RuntimeError, match="Unknown backend"):
        shardc.jit(lambda a: a, backend="gpu")


def test_a_result_passed_straight_through_is_an_array_of_its_own():
    # JAX's results are the call's own: deleting the argument (or a constant's result)
    # leaves the result alive, and the result is a new array
    x = jnp.ones(3)
    f = shardc.jit(lambda a: (a, a * 2))
    for _ in range(2):                  # the first call and the cached one
        y, _ = f(x)
        assert y is not x
    x.delete()
    np.testing.assert_array_equal(np.asarray(y), [1, 1, 1])
    c = jnp.arange(3.0)
    g = shardc.jit(lambda: c)
    first = g()
    first.delete()
    np.testing.assert_array_equal(np.asarray(g()), [0, 1, 2])
    np.testing.assert_array_equal(np.asarray(c), [0, 1, 2])


def test_functions_jax_runs_as_programs_give_arrays_of_their_own():
    # deleting (or donating) the operand leaves the result alive, as in JAX, where these
    # run as jitted functions; an explicit copy is one too. reshape to the same shape,
    # asarray and a same-dtype astype hand the array itself back, as JAX's do.
    ints = lambda: jnp.arange(4, dtype=jnp.int32)
    floats = lambda: jnp.arange(4.0)
    own = [(floats, jnp.copy), (floats, jnp.squeeze), (floats, jnp.ravel),
           (floats, lambda x: x.flatten()), (floats, jnp.atleast_1d), (floats, jnp.real),
           (floats, jnp.conj), (floats, jnp.positive), (floats, lambda x: jnp.moveaxis(x, 0, 0)),
           (floats, jnp.clip), (floats, lambda x: jnp.asarray(x, copy=True)),
           (floats, lambda x: x.astype(jnp.float32, copy=True)),
           (lambda: jnp.arange(4, dtype=jnp.uint32), jnp.abs), (ints, jnp.round),
           (ints, jnp.floor), (ints, jnp.ceil), (ints, jnp.trunc), (ints, jnp.nan_to_num)]
    for make, fn in own:
        x = make()
        y = fn(x)
        assert y is not x, fn
        x.delete()
        np.testing.assert_array_equal(np.asarray(y), np.arange(4))
    for fn in (jnp.asarray, lambda x: x.reshape(4), lambda x: x.astype(jnp.float32)):
        x = floats()
        assert fn(x) is x


def test_donation_matches_results_by_their_blocks_on_a_device():
    """JAX reuses a donated argument's memory for a result whose block on each device has the
    argument's block shape and dtype (or, failing that, as many elements): a replicated
    (16,) argument of a shard_map whose result is split into (2,) blocks is not usable and
    lives on; one split as the result is deleted. An uncommitted array
    that the call moves onto the mesh in blocks lives on: the copy was donated."""
    import warnings
    mesh = shardc.make_mesh((8,), ("dp",), axis_types=(shardc.sharding.AxisType.Auto,))
    double = shardc.jit(shardc.shard_map(lambda a: a * 2, mesh=mesh, in_specs=P("dp"),
                                         out_specs=P("dp")), donate_argnums=0)
    split = shardc.device_put(jnp.arange(16.), NamedSharding(mesh, P("dp")))
    out = double(split)
    assert split.is_deleted()
    np.testing.assert_array_equal(np.asarray(out), np.arange(16.) * 2)
    replicated = shardc.device_put(jnp.arange(16.), NamedSharding(mesh, P()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        double(replicated)
    assert not replicated.is_deleted()
    np.testing.assert_array_equal(np.asarray(replicated), np.arange(16.))
    fresh = jnp.arange(16.)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        double(fresh)
    assert not fresh.is_deleted() and caught == []
    np.testing.assert_array_equal(np.asarray(fresh), np.arange(16.))
    # so too where another result would be whole on a device as the array is
    both = shardc.jit(shardc.shard_map(lambda a, b: (a * 2, b), mesh=mesh,
                                       in_specs=(P("dp"), P()), out_specs=(P("dp"), P())),
                      donate_argnums=0)
    fresh = jnp.arange(16.)
    both(fresh, np.ones(16, np.float32))
    assert not fresh.is_deleted()
    # the same number of elements in another shape: XLA's donation takes it
    flat = shardc.jit(shardc.shard_map(lambda a: a.reshape(2), mesh=mesh, in_specs=P("dp"),
                                       out_specs=P("dp")), donate_argnums=0)
    pairs = shardc.device_put(jnp.arange(16.).reshape(8, 2), NamedSharding(mesh, P("dp")))
    flat(pairs)
    assert pairs.is_deleted()


def test_a_lowering_of_jit_with_a_device_runs_there():
    # JAX's AOT of the deprecated jit(device=): lowered for that device, a call moves its
    # arguments there (from a mesh too) and leaves the results there, committed
    d1 = shardc.devices()[1]
    with pytest.warns(DeprecationWarning):
        f = shardc.jit(lambda a: a @ a.T, device=d1)
    split = shardc.device_put(HOST, NamedSharding(MESH, P("x", "y")))
    compiled = f.lower(shardc.ShapeDtypeStruct(HOST.shape, HOST.dtype)).compile()
    for given in (split, HOST):
        out = compiled(given)
        assert out.sharding == SingleDeviceSharding(d1) and out.committed
        np.testing.assert_array_equal(np.asarray(out), HOST @ HOST.T)
    assert f.trace(HOST).lower().compile()(split).sharding == SingleDeviceSharding(d1)


def test_pjit_takes_jax_deprecated_device_and_backend():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from shardc.experimental.pjit import pjit
        d1 = shardc.devices()[1]
        out = pjit(lambda a: a * 3, device=d1)(HOST)
        assert out.sharding == SingleDeviceSharding(d1) and out.committed
        np.testing.assert_array_equal(np.asarray(out), HOST * 3)
        with pytest.raises(ValueError, match="can't specify both a device and a backend"):
            pjit(lambda a: a, device=d1, backend="cpu")
        with pytest.raises(ValueError, match="If backend or device is specified on jit, then "
                                             "in_shardings should not be specified."):
            pjit(lambda a: a, in_shardings=SingleDeviceSharding(d1), backend="cpu")
        with MESH, pytest.raises(ValueError, match="Mesh context manager should not be used "
                                                   "with jit when backend or device is also "
                                                   "specified as an argument to jit."):
            pjit(lambda a: a, device=d1)(HOST)


def test_shardings_on_an_abstract_mesh_take_the_computations_devices():
    # JAX lays a sharding on an AbstractMesh on the devices of the computation: the mesh
    # its arguments are on, or the mesh set, when that mesh is the one abstracted
    auto = shardc.make_mesh((2,), ("x",), axis_types=(shardc.sharding.AxisType.Auto,))
    abstract = NamedSharding(auto.abstract_mesh, P("x"))
    arr = shardc.device_put(np.arange(8.0), NamedSharding(auto, P()))
    split = NamedSharding(auto, P("x"))
    twice = lambda v: v * 2
    results = [shardc.jit(twice, out_shardings=abstract)(arr),
               shardc.jit(lambda v: lax.with_sharding_constraint(v * 2, abstract))(arr)]
    with shardc.set_mesh(auto):
        results += [shardc.jit(twice, out_shardings=abstract)(np.arange(8.0)),
                    shardc.jit(twice, in_shardings=abstract)(np.arange(8.0))]
    for out in results:
        assert out.sharding == split
        np.testing.assert_array_equal(np.asarray(out), np.arange(8.0) * 2)


def test_a_shape_dtype_struct_reads_a_partition_spec_on_the_mesh_set_when_used():
    # JAX's: the spec is kept and read on the mesh set whenever the sharding is asked for,
    # so a stand-in made before set_mesh lowers split inside it
    sds = shardc.ShapeDtypeStruct((8, 2), np.float32, sharding=P("x"))
    mesh = shardc.make_mesh((2,), ("x",))
    with shardc.set_mesh(mesh):
        assert sds.sharding == NamedSharding(mesh, P("x"))
        assert sds.aval.str_short() == "f32[8@x,2]"        # split in its type (Explicit)
        out = shardc.jit(lambda v: v * 2).lower(sds).out_info
        assert out.sharding == NamedSharding(mesh, P("x", None))
    with pytest.raises(TypeError, match="When specifying PartitionSpec to `ShapeDtypeStruct`, "
                                        "the context mesh cannot be empty"):
        sds.sharding
    with shardc.set_mesh(shardc.make_mesh((2,), ("y",))):
        with pytest.raises(ValueError, match=r"Resource axis: x of P\('x',\) is not found"):
            sds.sharding


def test_jax_refusals_at_the_edges_of_a_call():
    # a compiled function's signature is fixed: no transformation applies to it (JAX's)
    compiled = shardc.jit(lambda v: v + 4).lower(1.0).compile()
    for transformed in (shardc.vmap(lambda v: compiled(v) + 2), shardc.jit(compiled)):
        with pytest.raises(TypeError, match="Cannot apply JAX transformations to a function "
                                            "lowered and compiled for a particular signature. "
                                            "Detected argument of Tracer type"):
            transformed(jnp.ones(3))
    assert float(compiled(2.0)) == 6.0
    with pytest.raises(ValueError, match="ShapeDtypeStruct: dtype must be specified."):
        shardc.ShapeDtypeStruct((), None)
    # a numpy masked array would lose its mask: JAX refuses it (jnp.array copies its data)
    masked = np.ma.array([1, 2, 3], mask=[True, False, True])
    message = ("numpy masked arrays are not supported as direct inputs to JAX functions. "
               "Use arr.filled() to convert the value to a standard numpy array.")
    for call in (lambda: shardc.jit(lambda v: v)(masked), lambda: jnp.sin(masked),
                 lambda: jnp.asarray(masked), lambda: shardc.device_put(masked),
                 lambda: jnp.ones(3) + masked):
        with pytest.raises(ValueError, match=re.escape(message)):
            call()
    np.testing.assert_array_equal(np.asarray(jnp.array(masked)), [1, 2, 3])


def test_donated_names_need_the_functions_signature():
    class NoSignature:
        @property
        def __signature__(self):
            raise TypeError("no signature")

        def __call__(self, *args):
            return args[0]

    with pytest.raises(ValueError, match="Getting the signature of function .* failed. Pass "
                                         "donate_argnums instead of donate_argnames."):
        shardc.jit(NoSignature(), donate_argnames="a")
    out = shardc.jit(NoSignature(), donate_argnums=1)(HOST, jnp.ones(2))
    np.testing.assert_array_equal(np.asarray(out), HOST)


def test_shardings_that_are_not_shardings_are_refused_when_jitting():
    for option in ("in_shardings", "out_shardings"):
        with pytest.raises(TypeError, match=f"{option} leaf specifications are expected to be "
                                            "PartitionSpec instances or None, but got x"):
            shardc.jit(lambda v: v, **{option: ("x", None)})
    assert shardc.jit(lambda v: v, in_shardings=None)(HOST).shape == HOST.shape


def test_compiler_options_belong_to_top_level_jits():
    inner = shardc.jit(lambda v: v * 2, compiler_options={"some_option": "value"})
    np.testing.assert_array_equal(np.asarray(inner(jnp.arange(4))), np.arange(4) * 2)
    np.testing.assert_array_equal(np.asarray(shardc.vmap(inner)(jnp.arange(4))),
                                  np.arange(4) * 2)
    message = ("`compiler_options` can only be passed to top-level `jax.jit`. Got "
               "compiler_options={'some_option': 'value'} specified on a nested jit")
    with pytest.raises(ValueError, match=re.escape(message)):
        shardc.jit(lambda v: inner(v + 2))(jnp.arange(4))
    with pytest.raises(ValueError, match=re.escape(message)):
        shardc.make_jaxpr(inner)(1.0)


def test_a_program_traced_on_an_abstract_mesh_is_lowered_on_the_devices_compile_gets():
    d = shardc.devices()
    types = (shardc.sharding.AxisType.Explicit,)
    mesh = shardc.make_mesh((4,), ("x",), axis_types=types, devices=d[:4])
    on_abstract = NamedSharding(mesh.abstract_mesh, P("x"))
    f = shardc.jit(lambda a: a * 2, in_shardings=on_abstract, out_shardings=on_abstract)
    lowered = f.trace(shardc.ShapeDtypeStruct((8,), np.float32, sharding=on_abstract)).lower(
        lowering_platforms=("cpu",))
    with pytest.raises(RuntimeError, match=re.escape(
            "device_assignment cannot be `None` during compilation. Please pass a tuple of "
            "devices to `.compile(device_assignment=)`")):
        lowered.compile()
    with pytest.raises(ValueError, match=re.escape("The size of abstract mesh 4 in "
                                                   "AbstractMesh('x': 4") + ".* must match the "
                                         "length of device assignment: 1"):
        lowered.compile(device_assignment=(d[0],))
    compiled = lowered.compile(device_assignment=tuple(mesh.devices.flat))
    x = shardc.device_put(np.arange(8.0, dtype=np.float32), NamedSharding(mesh, P("x")))
    out = compiled(x)
    np.testing.assert_array_equal(np.asarray(out), np.arange(0.0, 16.0, 2.0))
    assert out.sharding == NamedSharding(mesh, P("x"))
    with pytest.raises(ValueError, match=re.escape(
            "jit(f).trace(*args).lower(lowering_platforms=...) is required when only "
            "AbstractMesh exists in a jitted computation. Got context mesh: Mesh()")):
        f.lower(shardc.ShapeDtypeStruct((8,), np.float32, sharding=on_abstract))


def test_an_abstract_mesh_takes_the_devices_of_the_concrete_one_beside_it():
    d = shardc.devices()
    types = (shardc.sharding.AxisType.Explicit,)
    mesh = shardc.make_mesh((4,), ("x",), axis_types=types, devices=d[:4])
    on_abstract = NamedSharding(mesh.abstract_mesh, P("x"))
    f = shardc.jit(lambda a: a + 1, out_shardings=on_abstract)
    x = shardc.device_put(np.arange(8.0, dtype=np.float32), NamedSharding(mesh, P("x")))
    out = f.lower(x).compile()(x)
    np.testing.assert_array_equal(np.asarray(out), np.arange(1.0, 9.0))
    assert out.sharding == NamedSharding(mesh, P("x"))
    small = shardc.make_mesh((1,), ("x",), axis_types=types, devices=d[:1])
    g = shardc.jit(lambda a, b: (a, b))
    with pytest.raises(ValueError, match=re.escape(
            "AbstractMesh size: 1 does not match the device assignment size: 4")):
        g.lower(shardc.ShapeDtypeStruct((8, 2), np.float32,
                                        sharding=NamedSharding(small.abstract_mesh, P("x"))), x)
    # closed over on the abstract mesh of the mesh set: its type as traced
    with shardc.sharding.use_abstract_mesh(mesh.abstract_mesh):
        held = shardc.ShapeDtypeStruct((8,), np.float32, sharding=on_abstract)
        info = shardc.jit(lambda: jnp.zeros_like(held)).trace().out_info
    assert info.sharding == on_abstract


def test_pjit_refuses_the_removed_axis_resources_arguments_by_its_name():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from shardc.experimental.pjit import pjit
    with pytest.raises(TypeError, match=r"^pjit\(\) got an unexpected keyword argument "
                                        "'in_axis_resources'"):
        pjit(lambda x: x, in_axis_resources=None)


def test_lower_takes_a_shaped_array_laid_out_by_in_shardings():
    """``jax.core.ShapedArray(shape, dtype)`` (a type on no mesh) given to ``lower`` beside an
    array arrives as in_shardings lays it out, as JAX's; it was taken for a value committed
    to a layout and refused."""
    mesh = shardc.make_mesh((4, 2), ("x", "y"),
                            axis_types=(shardc.sharding.AxisType.Auto,) * 2)
    f = shardc.jit(lambda x, y: x @ y.T, in_shardings=NamedSharding(mesh, P(("x", "y"))))
    x = jnp.arange(64).reshape(8, 8)
    compiled = f.lower(shardc.core.ShapedArray((8, 8), np.int32), x).compile()
    out = compiled(x, x)
    assert out.sharding.spec == P(("x", "y"))
    np.testing.assert_array_equal(out, np.asarray(x) @ np.asarray(x).T)
