"""jit: trace once per signature, lower, cache; errors for Python control flow on traced values."""
from functools import partial
import operator

import numpy as np
import pytest

import shardc
import shardc.numpy as jnp
from shardc import lax
from shardc.sharding import Mesh, NamedSharding, PartitionSpec as P


def test_second_call_does_not_retrace():
    calls = []

    @shardc.jit
    def f(x, y):
        calls.append(1)
        return x * y + 1

    x = jnp.arange(6.).reshape(2, 3)
    np.testing.assert_array_equal(np.asarray(f(x, x)), np.arange(6.).reshape(2, 3) ** 2 + 1)
    f(x, x)
    assert calls == [1] and f.trace_count == 1
    f(jnp.ones((4,)), jnp.ones((4,)))        # a new shape traces again
    assert f.trace_count == 2
    f(x.astype(jnp.int32), x.astype(jnp.int32))   # so does a new dtype
    assert f.trace_count == 3


def test_static_arguments_key_the_cache():
    @partial(shardc.jit, static_argnums=(1,))
    def power(x, n):
        result = x
        for _ in range(n - 1):
            result = result * x
        return result

    x = jnp.arange(4.)
    np.testing.assert_array_equal(np.asarray(power(x, 3)), np.arange(4.) ** 3)
    np.testing.assert_array_equal(np.asarray(power(x, 2)), np.arange(4.) ** 2)
    power(x, 3)
    assert power.trace_count == 2


def test_jitted_method_binds_its_instance():
    # as in JAX, a jitted function in a class body binds like a plain function: the instance
    # is argument 0, which static_argnums counts (it is hashed, by identity by default)
    class A:
        def __init__(self, k):
            self.k = k

        @partial(shardc.jit, static_argnums=0)
        def add(self, x):
            return x + self.k

    a, b = A(2), A(5)
    assert int(a.add(3)) == 5 and int(b.add(3)) == 8
    assert int(A.add(a, 4)) == 6           # through the class: the unbound function
    assert a.add.__self__ is a and a.add.__func__ is A.add
    assert A.add.trace_count == 2          # one trace per instance


def test_jit_refuses_static_and_class_method_objects_and_generators():
    # JAX's messages: these cannot be wrapped (jit them below the decorator instead)
    with pytest.raises(TypeError, match="staticmethod arguments are not supported"):
        shardc.jit(staticmethod(lambda x: x))
    with pytest.raises(TypeError, match="Expected a callable value"):
        shardc.jit(classmethod(lambda cls, x: x), static_argnums=0)

    def gen(x):
        yield x

    with pytest.raises(TypeError, match="Expected a function, got a generator function"):
        shardc.jit(gen)


def test_input_shardings_key_the_cache():
    mesh = shardc.make_mesh((4, 2), ("x", "y"))
    f = shardc.jit(shardc.shard_map(lambda v: v * 2, mesh=mesh, in_specs=P("x"),
                                    out_specs=P("x")))
    host = jnp.arange(8.)
    placed = shardc.device_put(host, NamedSharding(mesh, P("x")))
    np.testing.assert_array_equal(np.asarray(f(host)), np.arange(8.) * 2)
    np.testing.assert_array_equal(np.asarray(f(placed)), np.arange(8.) * 2)
    assert f.trace_count == 2


def test_pytrees_in_and_out():
    @shardc.jit
    def f(params, x):
        return {"y": params["w"] * x + params["b"], "n": (x.sum(),)}

    out = f({"w": jnp.full((3,), 2.), "b": jnp.ones(3)}, jnp.arange(3.))
    np.testing.assert_array_equal(np.asarray(out["y"]), [1., 3., 5.])
    assert float(out["n"][0]) == 3.0


def test_python_control_flow_on_a_traced_value_names_the_line():
    def f(x):
        if x.sum() > 0:   # the offending line
            return x
        return -x

    line = f.__code__.co_firstlineno + 1
    with pytest.raises(shardc.TracerBoolConversionError) as err:
        shardc.jit(f)(jnp.ones(3))
    assert "Attempted boolean conversion of traced array with shape bool[]" in str(err.value)
    assert f"test_jit.py:{line}" in str(err.value)
    assert isinstance(err.value, TypeError)


def test_jit_of_shard_map_equals_eager_and_reshards_at_the_boundary():
    mesh = shardc.make_mesh((4, 2), ("x", "y"), axis_types=(shardc.sharding.AxisType.Auto,) * 2)

    @partial(shardc.shard_map, mesh=mesh, in_specs=(P("x", "y"), P("y", None)),
             out_specs=P("x", None))
    def matmul(a, b):
        return lax.psum(jnp.dot(a, b), "y")

    a = jnp.arange(128.).reshape(8, 16)
    b = jnp.arange(64.).reshape(16, 4)
    expected = np.arange(128.).reshape(8, 16) @ np.arange(64.).reshape(16, 4)
    jitted = shardc.jit(matmul)
    for a_spec in (P("x", "y"), P("y", "x"), P(None, "x"), P()):
        a_placed = shardc.device_put(a, NamedSharding(mesh, a_spec))
        out = jitted(a_placed, b)
        np.testing.assert_allclose(np.asarray(out), expected)
        assert out.sharding == NamedSharding(mesh, P("x", None))
    np.testing.assert_allclose(np.asarray(matmul(shardc.device_put(
        a, NamedSharding(mesh, P("y", "x"))), b)), expected)


def test_boundary_reshard_nodes_show_in_the_device_program():
    # Auto axes: an argument laid out otherwise is resharded at the boundary (on Explicit
    # ones its type must match the in_specs, as in JAX)
    mesh = shardc.make_mesh((4, 2), ("x", "y"), axis_types=(shardc.sharding.AxisType.Auto,) * 2)
    f = shardc.shard_map(lambda v: v, mesh=mesh, in_specs=P("x", "y"), out_specs=P("x", "y"))
    a = shardc.device_put(jnp.zeros((8, 16)), NamedSharding(mesh, P("y", "x")))
    (lowered,) = shardc.jit(f).lower(a).module.all_shard_maps()
    text = str(lowered.program_of(0))
    assert text.splitlines()[1:] == [
        "{ lambda ; a:f32[4,4]{x,y}. let",
        "    b:f32[8,4]{x} = all_gather[axis_size=2 device_groups=((0, 1), (2, 3), (4, 5), (6, 7)) "
        "gather_axis=0 mesh_axes=('y',) tiled=True] a  # sends 64 B, receives 64 B",
        "    c:f32[8,16] = all_gather[axis_size=4 device_groups=((0, 2, 4, 6), (1, 3, 5, 7)) "
        "gather_axis=1 mesh_axes=('x',) tiled=True] b  # sends 384 B, receives 384 B",
        "    d:f32[2,16]{x} = all_slice[axis_size=4 device_groups=((0, 2, 4, 6), (1, 3, 5, 7)) "
        "mesh_axes=('x',) slice_axis=0] c  # sends 0 B, receives 0 B",
        "    e:f32[2,8]{x,y} = all_slice[axis_size=2 device_groups=((0, 1), (2, 3), (4, 5), (6, 7)) "
        "mesh_axes=('y',) slice_axis=1] d  # sends 0 B, receives 0 B",
        "  in (e,) }"]
    np.testing.assert_array_equal(np.asarray(shardc.jit(f)(a)), np.zeros((8, 16)))


def test_with_sharding_constraint_lays_out_the_result():
    # Auto axes: the constraint lays out; on Explicit ones it asserts the type (reshard lays
    # out there)
    mesh = shardc.make_mesh((4, 2), ("x", "y"), axis_types=(shardc.sharding.AxisType.Auto,) * 2)

    @shardc.jit
    def f(a):
        return lax.with_sharding_constraint(a * 2, NamedSharding(mesh, P("x", None)))

    out = f(jnp.arange(32.).reshape(8, 4))
    assert out.sharding == NamedSharding(mesh, P("x", None))
    assert [s.data.shape for s in out.addressable_shards] == [(2, 4)] * 8
    np.testing.assert_array_equal(np.asarray(out), np.arange(32.).reshape(8, 4) * 2)


def test_print_inside_a_jitted_body_shows_the_type(capsys):
    mesh = shardc.make_mesh((4,), ("i",))

    @shardc.jit
    @partial(shardc.shard_map, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
    def f(x):
        print(x)
        return x

    f(jnp.arange(8.))
    assert capsys.readouterr().out == "Traced<f32[2]{i}>\n"


def test_jit_inside_a_body_is_inlined():
    mesh = shardc.make_mesh((4,), ("i",))
    double = shardc.jit(lambda v: v * 2)
    f = shardc.shard_map(lambda v: lax.psum(double(v), "i"), mesh=mesh, in_specs=P("i"),
                         out_specs=P())
    np.testing.assert_array_equal(np.asarray(f(jnp.arange(8.))), [24., 32.])
    np.testing.assert_array_equal(np.asarray(shardc.jit(f)(jnp.arange(8.))), [24., 32.])


def test_escaped_tracer_is_an_error():
    leaked = []

    @shardc.jit
    def f(x):
        leaked.append(x)
        return x

    f(jnp.ones(2))
    want = (r"^Encountered an unexpected tracer. A function transformed by JAX had a side "
            r"effect, allowing for a reference to an intermediate value with type float32\[2\] "
            r"wrapped in a DynamicJaxprTracer to escape the scope of the transformation.\n"
            r"JAX transformations require that functions explicitly return their outputs, and "
            r"disallow saving intermediate values to global state.\n")
    with pytest.raises(shardc.errors.UnexpectedTracerError, match=want):
        shardc.jit(lambda y: y + leaked[0])(jnp.ones(2))
    with pytest.raises(shardc.errors.UnexpectedTracerError, match=want):
        leaked[0] + 1
    # passed to a jitted function as an argument (it was run as if it were an array)
    with pytest.raises(shardc.errors.UnexpectedTracerError, match=want):
        shardc.jit(jnp.sin)(leaked[0])
    # a value made inside the function names the line that made it
    made = []

    @shardc.jit
    def g(x):
        made.append(x * 2)
        return x
    g(jnp.ones(3))
    with pytest.raises(shardc.errors.UnexpectedTracerError,
                       match=r"was created on line .*test_jit.py:\d+ \(g\)"):
        made[0] + 1


def test_the_cycle_collector_is_back_after_compiling_even_when_tracing_fails():
    import gc
    import shardc

    def broken(x):
        raise RuntimeError("user error while tracing")
    assert gc.isenabled()
    shardc.jit(lambda x: x * 2)(np.ones(3, np.float32))
    assert gc.isenabled()
    with pytest.raises(RuntimeError, match="user error while tracing"):
        shardc.jit(broken)(np.ones(3, np.float32))
    assert gc.isenabled()
    gc.disable()
    try:
        shardc.jit(lambda x: x + 1)(np.ones(3, np.float32))
        assert not gc.isenabled()          # left as the caller had it
    finally:
        gc.enable()


def test_clear_caches_makes_every_jitted_function_trace_again():
    f = shardc.jit(lambda x: x * 2)
    g = shardc.jit(lambda x: x + 1)
    x = jnp.arange(4.)
    f(x), g(x), f(x)
    assert (f.trace_count, g.trace_count) == (1, 1)
    shardc.clear_caches()
    np.testing.assert_array_equal(np.asarray(f(x)), np.arange(4.) * 2)
    g(x)
    assert (f.trace_count, g.trace_count) == (2, 2)


def test_cache_size_counts_signatures_across_jits_of_one_function():
    """JAX's ``_cache_size``: one entry per signature (a host array and a Python scalar are
    signatures of their own), shared by every jit of the function with the same options,
    emptied by clear_caches."""
    def f(x):
        return x * 2
    jf = shardc.jit(f)
    assert jf._cache_size() == 0
    sizes = []
    for x in (jnp.ones(4), jnp.ones(4), jnp.ones(5), np.ones(4, np.float32), 1.0):
        jf(x)
        sizes.append(jf._cache_size())
    assert sizes == [1, 1, 2, 3, 4]
    again = shardc.jit(f)
    assert again._cache_size() == 4
    again(jnp.ones(3))
    assert jf._cache_size() == 5
    scaled = shardc.jit(lambda x, n: x * n, static_argnums=1)
    scaled(jnp.ones(2), 2), scaled(jnp.ones(2), 3)
    assert scaled._cache_size() == 2
    shardc.clear_caches()
    assert (jf._cache_size(), scaled._cache_size()) == (0, 0)


def test_a_closed_over_constant_does_not_take_an_arguments_layout():
    """The lowered module reads its constants' layouts before its arguments': a shard_map
    closing over a host array, given an argument split over the mesh, runs under jit as
    eagerly (the constant once took the argument's layout and could not be split)."""
    mesh = Mesh(np.array(shardc.devices()).reshape(4, 2), ("x", "y"))
    offset = np.array([-1.0], np.float32)
    f = shardc.shard_map(lambda a: a + offset, mesh=mesh, in_specs=P(("x", "y")),
                         out_specs=P(("x", "y")))
    a = shardc.device_put(np.arange(8, dtype=np.float32), NamedSharding(mesh, P(("x", "y"))))
    np.testing.assert_array_equal(np.asarray(shardc.jit(f)(a)), np.arange(8) - 1.0)


def test_numpy_arguments_take_the_cached_call_and_retrace_on_a_new_shape_or_dtype():
    """Host arrays passed at every call (a loop over batches) hit the compiled program by
    their shape and dtype; another shape, dtype or x64 setting traces again."""
    f = shardc.jit(lambda x: x * 2)
    for _ in range(3):
        out = f(np.ones(3, np.float32))
    assert f.trace_count == 1 and out.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(f(np.arange(3, dtype=np.float32))), [0, 2, 4])
    assert f.trace_count == 1
    assert f(np.ones(4, np.float32)).shape == (4,) and f.trace_count == 2
    assert f(np.ones(3, np.int32)).dtype == np.int32 and f.trace_count == 3
    # float64 with x64 off is float32: the program traced for float32 runs it
    assert f(np.ones(3, np.float64)).dtype == np.float32 and f.trace_count == 3
    shardc.config.update("jax_enable_x64", True)
    try:
        assert f(np.ones(3, np.float64)).dtype == np.float64 and f.trace_count == 4
    finally:
        shardc.config.update("jax_enable_x64", False)
    assert f(np.ones(3, np.float64)).dtype == np.float32


def test_trace_gives_the_traced_program_and_lowers_without_tracing_again():
    # JAX's jit(f).trace(*args): .jaxpr, .fun_name, .lower()
    traced_calls = []

    def scaled(x):
        traced_calls.append(1)
        return lax.psum(x, "i") * 2

    mesh = shardc.make_mesh((4,), ("i",))
    f = shardc.jit(shardc.shard_map(scaled, mesh=mesh, in_specs=P("i"), out_specs=P()))
    traced = f.trace(jnp.arange(8.0))
    assert traced.fun_name == "scaled"
    text = str(traced.jaxpr)
    assert "shard_map[" in text and "psum[mesh_axes=('i',)]" in text
    assert traced.jaxpr.out_avals[0].shape == (2,)
    assert len(traced_calls) == 1
    lowered = traced.lower()
    assert lowered.compile().module is lowered.module and "psum" in lowered.as_text()
    assert len(traced_calls) == 1
    np.testing.assert_array_equal(np.asarray(f(jnp.arange(8.0))), [24.0, 32.0])


def test_a_compiled_program_is_called_with_its_dynamic_arguments():
    # JAX's jit(f).lower(*args).compile()(*args): static arguments were fixed by lower
    g = shardc.jit(lambda x, n: x * n, static_argnums=1)
    compiled = g.lower(jnp.arange(3.0), 2).compile()
    np.testing.assert_array_equal(np.asarray(compiled(jnp.arange(3.0) + 1)), [2.0, 4.0, 6.0])
    assert g.trace_count == 1
    h = shardc.jit(lambda a, b: a + b)
    by_name = h.lower(jnp.ones(2), b=jnp.float32(3)).compile()
    np.testing.assert_array_equal(np.asarray(by_name(jnp.ones(2), b=jnp.float32(5))), [6, 6])
    with pytest.raises(TypeError, match=r"(?s)Argument types differ from the types for which "
                                        r"this computation was compiled.*The mismatches are:\n"
                                        r"Argument 'x' compiled with float32\[3\] and called "
                                        r"with float32\[4\]$"):
        compiled(jnp.arange(4.0))
    with pytest.raises(TypeError, match=r"does not match the input pytree it was called with. "
                                        r"There are 1 mismatches, including:\n    \* at args, "
                                        r"seen tuple of length 1 but now given tuple of length 2, "
                                        r"so the lengths do not match$"):
        compiled(jnp.arange(3.0), jnp.arange(3.0))
    d = shardc.jit(lambda d: d["a"]).lower({"a": jnp.ones(2)}).compile()
    with pytest.raises(TypeError, match=r"\* at args\[0\], seen <class 'dict'> with pytree "
                                        r"metadata \('a',\) but now given <class 'dict'> with "
                                        r"pytree metadata \('b',\), so the pytree node"):
        d({"b": jnp.ones(2)})
    with pytest.raises(TypeError, match=r"Argument 'd\['a'\]' compiled with float32\[2\]"):
        d({"a": jnp.ones(3)})


def test_numpy_arguments_take_their_types_dtype_before_the_program_runs():
    # with x64 off an int64 wraps to int32 and a float64 rounds to float32 first, as JAX
    # puts them on the device: the program computes in the dtypes its types say
    big = np.array([2**31 + 5], np.int64)
    assert np.asarray(shardc.jit(lambda i: i // 2)(big)).tolist() == [-1073741822]
    x = np.random.RandomState(0).uniform(0.0, 1.0, 1000).astype(np.float32)
    delta = np.float64(np.random.RandomState(1).uniform(-0.5, 0.5))
    got = np.asarray(shardc.jit(lambda a, d: a + d)(x, delta))
    np.testing.assert_array_equal(got, x + np.float32(delta))


def test_copy_and_deepcopy_of_traced_values():
    # as in JAX, copy.copy and copy.deepcopy of a traced value work under every transform
    import copy

    def f(x):
        return copy.copy(x) + copy.deepcopy({"v": x})["v"]

    assert int(shardc.jit(f)(1)) == 2
    assert float(shardc.grad(f)(1.0)) == 2.0
    np.testing.assert_array_equal(np.asarray(shardc.vmap(f)(jnp.arange(3.0))),
                                  [0.0, 2.0, 4.0])
    a = jnp.arange(3.0)
    for b in (copy.copy(a), copy.deepcopy(a)):
        assert b is not a
        np.testing.assert_array_equal(np.asarray(b), np.asarray(a))


def test_float0_arguments_pass_through_jit():
    # as in JAX: a vjp function of integer primals takes float0 cotangents under jit, and a
    # float0 argument reaches the function as float0 zeros of its shape
    primal, pullback = shardc.vjp(lambda x, y: x + y, 2, 1)
    tx, ty = shardc.jit(pullback)(np.zeros((), shardc.dtypes.float0))
    assert int(primal) == 3
    assert tx.dtype == shardc.dtypes.float0 and ty.dtype == shardc.dtypes.float0

    seen = []

    @shardc.jit
    def f(x, z):
        seen.append(z.shape)
        assert z.dtype == shardc.dtypes.float0
        return x * 2

    z = np.zeros((2, 3), shardc.dtypes.float0)
    assert float(f(1.5, z)) == 3.0 and float(f(2.5, z)) == 5.0
    assert seen == [(2, 3)]               # traced once for the same float0 shape
    f(1.5, np.zeros((4,), shardc.dtypes.float0))
    assert seen == [(2, 3), (4,)]


def test_shape_dtype_structs_are_no_values_to_call_with_or_close_over():
    """JAX's TypeErrors: a ShapeDtypeStruct stands in for an argument to lower() only; passed
    to a call it is named by its path, closed over it has no value. lower() takes it."""
    import re
    sds = shardc.ShapeDtypeStruct((4, 2), np.int32)
    inp = np.arange(8).reshape(4, 2)
    ident = shardc.jit(lambda x: x)
    for _ in range(2):          # also where the call has been seen before
        with pytest.raises(TypeError, match=re.escape("Argument 'x['b']['c']' of shape "
                                                      "int32[4,2] of type ") +
                           ".*ShapeDtypeStruct.*is not a valid JAX type."):
            ident({"a": inp, "b": {"c": sds}})
        np.testing.assert_array_equal(ident({"a": inp, "b": {"c": inp}})["b"]["c"], inp)
    with pytest.raises(TypeError, match="A ShapeDtypeStruct does not have a value and cannot "
                                        "be used as a constant in a JAX function."):
        shardc.jit(lambda x: (x, sds))(inp)
    out = ident.lower({"a": inp, "b": {"c": sds}}).out_info
    assert out["b"]["c"].shape == (4, 2) and out["b"]["c"].dtype == np.int32


def test_a_fresh_jit_of_the_same_function_reuses_its_trace():
    """JAX's tracing cache is keyed by the function: ``jit(f)`` made again and called with a
    signature seen before does not run ``f``'s Python again, so it keeps a global's old
    value (JAX's "pure functions" gotcha). Other options, a new signature or clear_caches
    trace anew; a bound method (a new object each time) traces anew as in JAX."""
    calls = []
    offset = 0.

    def f(x):
        calls.append(1)
        return x + offset

    assert float(shardc.jit(f)(4.)) == 4.
    offset = 10.
    assert float(shardc.jit(f)(5.)) == 5. and calls == [1]        # the stale trace
    assert float(shardc.jit(f, static_argnums=0)(5.)) == 15.      # other options
    np.testing.assert_array_equal(np.asarray(shardc.jit(f)(jnp.ones(2))), [11., 11.])
    shardc.clear_caches()
    assert float(shardc.jit(f)(5.)) == 15. and len(calls) == 4

    class Model:
        def apply(self, x):
            calls.append(2)
            return x

    model = Model()
    shardc.jit(model.apply)(1.)
    shardc.jit(model.apply)(1.)
    assert calls.count(2) == 2


def test_conversions_of_traced_values_raise_jaxs_errors():
    cases = [
        (operator.index, shardc.errors.TracerIntegerConversionError,
         r"^The __index__\(\) method was called on traced array with shape int32\[\]\n"),
        (lambda x: [1, 2, 3][x], shardc.errors.TracerIntegerConversionError,
         r"^The __index__\(\) method was called on traced array with shape int32\[\]\n"),
        (int, shardc.errors.ConcretizationTypeError,
         r"^Abstract tracer value encountered where concrete value is expected: traced array "
         r"with shape int32\[\]\nThe problem arose with the `int` function. If trying to "
         r"convert the data type of a value, try using `x.astype\(int\)` or "
         r"`jnp.array\(x, int\)` instead.\nThe error occurred while tracing at test_jit.py:"),
        (float, shardc.errors.ConcretizationTypeError, r"the `float` function"),
        (lambda x: x.item(), shardc.errors.ConcretizationTypeError,
         r"^Abstract tracer value encountered where concrete value is expected: traced array "
         r"with shape int32\[\]\nIt arose in conversion in item\(\)\."),
        (lambda x: bool(x > 0), shardc.errors.TracerBoolConversionError,
         r"^Attempted boolean conversion of traced array with shape bool\[\]\.\n"),
        (np.asarray, shardc.errors.TracerArrayConversionError,
         r"^The numpy.ndarray conversion method __array__\(\) was called on traced array with "
         r"shape int32\[\]\n"),
    ]
    for convert, cls, message in cases:
        with pytest.raises(cls, match=message):
            shardc.jit(convert)(jnp.int32(1))


def test_pytree_arguments_take_the_cached_call_keyed_by_their_structure():
    """A dict of parameters or a key array at every call (a training loop) hits the compiled
    program by the arguments' structure and leaf types; another structure traces again."""
    f = shardc.jit(lambda p, x: (p["w"] * x + p["b"], {"sum": x.sum()}))
    two, one = jnp.asarray(np.full(3, 2, np.float32)), jnp.ones(3)
    p = {"w": two, "b": one}
    x = np.arange(3, dtype=np.float32)
    for _ in range(3):
        y, extra = f(p, x)
    np.testing.assert_array_equal(np.asarray(y), np.arange(3) * 2 + 1)
    assert float(extra["sum"]) == 3.0 and f.trace_count == 1 and len(f.array_calls) == 1
    # same leaves, another structure: traced again, and its own answer
    q = {"w": two, "b": one, "unused": jnp.zeros(2)}
    np.testing.assert_array_equal(np.asarray(f(q, x)[0]), np.arange(3) * 2 + 1)
    assert f.trace_count == 2 and len(f.array_calls) == 2
    swapped = {"w": one, "b": two}
    np.testing.assert_array_equal(np.asarray(f(swapped, x)[0]), np.arange(3) + 2)
    assert f.trace_count == 2
    # keyword arguments too, by name
    h = shardc.jit(lambda x, scale=None, shift=None: x * scale + shift)
    for s in (1.0, 2.0):
        got = h(x, shift=jnp.ones(3), scale=jnp.asarray(np.full(3, s, np.float32)))
        np.testing.assert_array_equal(np.asarray(got), np.arange(3) * s + 1)
    assert h.trace_count == 1 and len(h.array_calls) == 1
    np.testing.assert_array_equal(np.asarray(h(x, scale=jnp.ones(3), shift=jnp.zeros(3))),
                                  np.arange(3))
    # a key array is a pytree of its data: draws from it follow the key passed
    g = shardc.jit(lambda key: shardc.random.uniform(key, (2,)))
    keys = [shardc.random.key(s) for s in (0, 1, 0)]
    draws = [np.asarray(g(k)) for k in keys]
    np.testing.assert_array_equal(draws[0], draws[2])
    assert not np.array_equal(draws[0], draws[1]) and g.trace_count == 1
    np.testing.assert_array_equal(draws[1], np.asarray(shardc.random.uniform(keys[1], (2,))))


def test_a_pytree_whose_metadata_does_not_compare_takes_the_full_path():
    @shardc.tree_util.register_pytree_node_class
    class Box:
        def __init__(self, value, meta):
            self.value, self.meta = value, meta

        def tree_flatten(self):
            return (self.value,), self.meta

        @classmethod
        def tree_unflatten(cls, meta, children):
            return cls(children[0], meta)

    class Meta:
        def __eq__(self, other):
            raise RuntimeError("metadata that does not compare")

        def __hash__(self):
            return 0

    f = shardc.jit(lambda b: b.value + 1)
    meta = Meta()
    np.testing.assert_array_equal(np.asarray(f(Box(jnp.ones(2), meta))), [2, 2])
    np.testing.assert_array_equal(np.asarray(f(Box(jnp.ones(2), meta))), [2, 2])


def test_static_arguments_take_the_cached_call_by_value_and_type():
    f = shardc.jit(lambda x, n, scale=1.0: x * n * scale, static_argnums=1,
                   static_argnames="scale")
    x = jnp.arange(3.0)
    for _ in range(2):
        np.testing.assert_array_equal(np.asarray(f(x, 2)), [0, 2, 4])
        np.testing.assert_array_equal(np.asarray(f(x, 2, scale=0.5)), [0, 1, 2])
    assert f.trace_count == 2 and len(f.array_calls) == 2
    np.testing.assert_array_equal(np.asarray(f(x, 3)), [0, 3, 6])
    assert f(x, 2.0).dtype == np.float32 and f.trace_count == 4     # 2.0 traces apart from 2
    with pytest.raises(ValueError, match="Non-hashable static arguments"):
        f(x, [2])


def test_a_jitted_function_called_under_transformations_is_traced_once_per_signature():
    """As JAX binds a nested jit's traced program: under grad, jvp, vmap, scan and another
    jit, the function's Python runs at its first signature only, and the values are those of
    the function traced in place."""
    count = [0]

    def body(x):
        count[0] += 1
        return jnp.sin(x) * 2
    inner = shardc.jit(body)
    x = jnp.arange(3.)
    want_grad = 2 * np.cos(np.arange(3.))
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(shardc.grad(lambda v: inner(v).sum())(x)),
                                   want_grad, rtol=1e-6)
    assert count[0] == 1
    np.testing.assert_allclose(np.asarray(shardc.jit(lambda v: inner(v) + inner(v))(x)),
                               4 * np.sin(np.arange(3.)), rtol=1e-6)
    ones = jnp.ones((2, 3))
    np.testing.assert_allclose(np.asarray(shardc.vmap(inner)(ones)),
                               np.full((2, 3), 2 * np.sin(1.0)), rtol=1e-6)
    total = lax.scan(lambda c, xi: (c + inner(xi), None), 0., x)[0]
    np.testing.assert_allclose(float(total), 2 * np.sin(np.arange(3.)).sum(), rtol=1e-6)
    primal, tangent = shardc.jvp(inner, (x,), (jnp.ones(3),))
    np.testing.assert_allclose(np.asarray(tangent), want_grad, rtol=1e-6)
    assert count[0] == 2            # the scan's scalar elements: one more signature
    np.testing.assert_allclose(np.asarray(inner(x)), 2 * np.sin(np.arange(3.)), rtol=1e-6)
    assert count[0] == 2            # a top-level call compiles the program traced before
    shardc.clear_caches()
    shardc.grad(lambda v: inner(v).sum())(x)
    assert count[0] == 3


def test_a_nested_jit_returning_none_runs_its_effects_once(capsys):
    """A jitted function with no results (a loop body that only prints) binds its traced
    program once: its Python and its effects are not run a second time in place."""
    count = [0]

    def show(i, _=None):
        count[0] += 1
        shardc.debug.print("{}", i)
    inner = shardc.jit(show)
    traced = shardc.make_jaxpr(lambda x: inner(x))(1)
    assert str(traced).count("debug_print") == 1 and count[0] == 1
    for unroll in (1, 2):
        shardc.jit(lambda: lax.fori_loop(0, 4, inner, None, unroll=unroll))()
        shardc.effects_barrier()
        assert capsys.readouterr().out.split() == ["0", "1", "2", "3"]


def test_a_trace_is_shared_by_host_and_device_arguments_of_one_type():
    """JAX keys its traces by the arguments' types: a numpy array after an array of its
    shape and dtype, or a Python float after a weak float32 array, compiles again but runs
    the function's Python once."""
    count = [0]

    def f(x):
        count[0] += 1
        return x * 2
    jf = shardc.jit(f)
    np.testing.assert_array_equal(np.asarray(jf(jnp.ones(3))), np.full(3, 2.0))
    np.testing.assert_array_equal(np.asarray(jf(np.ones(3, np.float32))), np.full(3, 2.0))
    assert count[0] == 1
    assert float(jf(7.0)) == 14.0 and float(jf(jnp.asarray(7.0))) == 14.0
    assert count[0] == 2


def test_a_nested_jit_closing_over_a_traced_value_is_traced_at_each_call():
    """Its program holds the enclosing trace's value, which is gone after the call: it is
    traced again at each, with the value of the time."""
    def outer(x):
        scaled = shardc.jit(lambda y: y * x)
        return scaled(x).sum()
    for start in (1.0, 2.0):
        x = jnp.arange(3.) + start
        np.testing.assert_allclose(np.asarray(shardc.grad(outer)(x)), 2 * np.asarray(x))


def test_a_nested_jit_under_named_axes_is_traced_in_place():
    """A collective over a shard_map's or vmap's named axis needs the axis: such calls are
    traced where they are, with the right values."""
    summed = shardc.jit(lambda b: lax.psum(b, "i"))
    mesh = shardc.make_mesh((4,), ("i",))
    f = shardc.shard_map(lambda b: summed(b), mesh=mesh, in_specs=P("i"), out_specs=P())
    np.testing.assert_array_equal(np.asarray(f(jnp.arange(8.))),
                                  np.arange(8.).reshape(4, 2).sum(0))
    np.testing.assert_array_equal(
        np.asarray(shardc.vmap(summed, axis_name="i")(jnp.arange(4.))), np.full(4, 6.0))


def test_a_pytree_node_whose_attribute_lookup_raises_is_an_argument_as_any_other():
    """JAX's training cookbook passes a dict whose ``__getattr__`` is ``__getitem__``: asking
    it for an attribute it lacks raises KeyError, which must not reach the caller."""
    @shardc.tree_util.register_pytree_with_keys_class
    class DotDict(dict):
        __getattr__ = dict.__getitem__

        def tree_flatten_with_keys(self):
            keys = tuple(sorted(self))
            return tuple((shardc.tree_util.DictKey(k), self[k]) for k in keys), keys

        @classmethod
        def tree_unflatten(cls, keys, values):
            return cls(zip(keys, values))
    d = DotDict(w=jnp.arange(3.))
    for _ in range(2):          # the first call and the cached one
        np.testing.assert_array_equal(np.asarray(shardc.jit(lambda p: p.w * 2)(d)),
                                      [0., 2., 4.])
