"""Host callbacks (pure_callback, io_callback, debug.callback) outside and inside shard_map,
under jit, vmap and grad; ensure_compile_time_eval; arrays from per-device arrays; JAX's
warning for a 64-bit dtype with x64 off."""
from __future__ import annotations

import os
import re
import warnings

import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from shardc import lax
from shardc.errors import JaxRuntimeError
from shardc.experimental import io_callback
from shardc.sharding import NamedSharding, PartitionSpec as P

MESH = jax.make_mesh((4,), ("i",))
X = np.arange(8, dtype=np.float32)
# the check backend runs a program on two backends: a callback may run on both
RUNS = (1, 2) if os.environ.get("SHARDC_BACKEND") == "check" else (1,)


def assert_ran(got, once):
    """``got`` is the calls of ``once``, made once (per backend the program ran on)."""
    assert any(got == once * k for k in RUNS), (got, once)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_pure_callback_calls_the_host_once_on_whole_values(jit):
    calls = []

    def host(v, scale=1):
        calls.append(np.asarray(v).shape)
        return np.sin(v) * scale

    f = lambda v: jax.pure_callback(host, jax.ShapeDtypeStruct(v.shape, v.dtype), v,
                                    scale=2) + 1
    out = (jax.jit(f) if jit else f)(jnp.asarray(X))
    np.testing.assert_allclose(np.asarray(out), np.sin(X) * 2 + 1, rtol=1e-6)
    assert_ran(calls, [(8,)])
    pair = jax.pure_callback(lambda v: (v, v.sum()),
                             (jax.ShapeDtypeStruct((8,), np.float32),
                              jax.ShapeDtypeStruct((), np.float32)), X)
    assert float(pair[1]) == 28.0


def test_callbacks_run_once_per_device_inside_shard_map():
    seen = []

    def body(b):
        jax.debug.callback(lambda v: seen.append(np.asarray(v).tolist()), b)
        y = jax.pure_callback(lambda v: np.asarray(v) * 10,
                              jax.ShapeDtypeStruct(b.shape, b.dtype), b)
        return lax.psum(y, "i")

    f = jax.shard_map(body, mesh=MESH, in_specs=P("i"), out_specs=P())
    x = jax.device_put(X, NamedSharding(MESH, P("i")))
    for g in (f, jax.jit(f)):
        seen.clear()
        np.testing.assert_array_equal(np.asarray(g(x)), X.reshape(4, 2).sum(0) * 10)
        assert_ran(seen, [[0, 1], [2, 3], [4, 5], [6, 7]])       # in device order


def test_callbacks_in_an_eager_shard_map_body_compute_on_their_blocks():
    # the host function runs outside every trace, so its own array operations give arrays
    # (the eager body is the current trace while the devices run)
    def body(b):
        return jax.pure_callback(lambda v, k: jnp.sin(v) * 2 + k,
                                 jax.ShapeDtypeStruct(b.shape, b.dtype), b, 3.0)

    f = jax.shard_map(body, mesh=MESH, in_specs=P("i"), out_specs=P("i"))
    for g in (f, jax.jit(f)):
        out = g(X)
        np.testing.assert_allclose(np.asarray(out), np.sin(X) * 2 + 3, rtol=1e-6)
        assert out.dtype == np.float32 and out.sharding.spec == P("i")


def test_vmap_methods_and_grad():
    host = lambda v: np.asarray(v) * 2
    batch = jnp.arange(6.).reshape(2, 3)
    counts = []

    def counted(v):
        counts.append(np.shape(v))
        return host(v)

    for method, calls in (("sequential", [(3,), (3,)]), ("expand_dims", [(2, 3)])):
        counts.clear()
        out = jax.vmap(lambda v: jax.pure_callback(
            counted, jax.ShapeDtypeStruct(v.shape, v.dtype), v, vmap_method=method))(batch)
        np.testing.assert_array_equal(np.asarray(out), np.asarray(batch) * 2)
        assert_ran(counts, calls)
    with pytest.raises(NotImplementedError, match="vmap is only supported for the "
                                                  "pure_callback primitive when vmap_method"):
        jax.vmap(lambda v: jax.pure_callback(host, jax.ShapeDtypeStruct(v.shape, v.dtype),
                                             v))(batch)
    with pytest.raises(ValueError, match="vmap_method must be on of the allowed methods"):
        jax.pure_callback(host, jax.ShapeDtypeStruct((3,), np.float32), batch[0],
                          vmap_method="parallel")
    with pytest.raises(ValueError, match="Pure callbacks do not support JVP. Please use "
                                         "`jax.custom_jvp`"):
        jax.grad(lambda v: jax.pure_callback(host, jax.ShapeDtypeStruct((), np.float32),
                                             v))(2.)
    seen = []
    g = jax.grad(lambda v: (jax.debug.callback(lambda a: seen.append(float(a)), v), v * 3)[1])
    assert float(g(2.)) == 3.0
    assert_ran(seen, [2.0])                    # debug callbacks see the primal


def test_io_callback_runs_even_unused_and_checks_its_declaration():
    log = []

    @jax.jit
    def f(v):
        io_callback(lambda a: log.append(float(a.sum())) or np.float32(0),
                    jax.ShapeDtypeStruct((), np.float32), v)
        return v + 1

    f(jnp.asarray(X))
    assert_ran(log, [28.0])
    with pytest.raises(JaxRuntimeError, match=re.escape(
            "Incorrect output shape for return value #0: Expected: (3,), Actual: (2,)")):
        jax.pure_callback(lambda v: np.zeros(2, np.float32),
                          jax.ShapeDtypeStruct((3,), np.float32), X)


def test_an_ordered_io_callback_cannot_be_vmapped():
    calls = []

    def numpy_random_like(x):
        calls.append(x.shape)
        return np.full(x.shape, 0.5, x.dtype)

    def f(x, ordered):
        return io_callback(numpy_random_like, x, x, ordered=ordered)

    with pytest.raises(ValueError, match="^Cannot `vmap` ordered IO callback.$"):
        jax.vmap(lambda x: f(x, True))(jnp.zeros(5))
    assert calls == []
    # unordered: once per member; ordered outside vmap: once
    np.testing.assert_array_equal(jax.vmap(lambda x: f(x, False))(jnp.zeros(5)), np.full(5, 0.5))
    assert calls == [()] * 5
    np.testing.assert_array_equal(jax.jit(lambda x: f(x, True))(jnp.zeros(3)), np.full(3, 0.5))


def test_ensure_compile_time_eval_computes_constants_while_tracing():
    kinds = []

    @jax.jit
    def f(x):
        with jax.ensure_compile_time_eval():
            y = jnp.arange(4.).sum()
            kinds.append(isinstance(y, jax.core.Tracer))
        return x + y

    assert float(f(1.)) == 7.0 and kinds == [False]


def test_arrays_from_single_device_arrays():
    sharding = NamedSharding(MESH, P("i"))
    devices = list(MESH.devices.flat)
    blocks = [jax.device_put(X[2 * k:2 * k + 2], devices[k]) for k in range(4)]
    out = jax.make_array_from_single_device_arrays((8,), sharding, blocks)
    np.testing.assert_array_equal(np.asarray(out), X)
    assert out.sharding == sharding
    with pytest.raises(ValueError, match="has shape \\(3,\\), but its block of \\(8,\\) is "
                                         "\\(2,\\)"):
        jax.make_array_from_single_device_arrays(
            (8,), sharding, [jax.device_put(X[:3], d) for d in devices])
    # numpy arrays are no device arrays (JAX's TypeError)
    with pytest.raises(TypeError, match="Unsupported type for elements in `arrays`: "
                                        "<class 'numpy.ndarray'>"):
        jax.make_array_from_single_device_arrays((8,), sharding, [X[2 * k:2 * k + 2]
                                                                  for k in range(4)])


def test_a_64_bit_dtype_with_x64_off_warns_as_jax():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert jnp.zeros(2, dtype=jnp.float64).dtype == np.float32
        assert jnp.asarray([1], dtype=np.int64).dtype == np.int32
    texts = [str(w.message) for w in caught]
    assert texts[0].startswith("Explicitly requested dtype float64 requested in zeros is not "
                               "available, and will be truncated to dtype float32.")
    assert "requested in asarray" in texts[1]


def test_a_64_bit_result_type_with_x64_off_is_jaxs_error():
    """ShapeDtypeStruct keeps the dtype asked for (float64 here, as JAX's does), so
    pure_callback sees it and refuses it; traced, the stand-in is float32."""
    spec = jax.ShapeDtypeStruct((3,), np.float64)
    assert spec.dtype == np.float64 and spec.aval.dtype == np.float32
    for call in (lambda x: jax.pure_callback(lambda v: np.asarray(v) * 2, spec, x),
                 jax.jit(lambda x: jax.pure_callback(lambda v: np.asarray(v) * 2, spec, x))):
        with pytest.raises(ValueError, match="result_shape_dtypes cannot specify 64-bit types "
                                             "when `jax_enable_x64` is disabled"):
            call(jnp.ones(3))
    lowered = jax.jit(lambda x: x * 2).lower(spec)
    assert "f32[3]" in lowered.as_text()


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_debug_print_formats_pytrees_objects_and_print_options_as_jax(jit, capsys):
    """debug.print takes pytrees of arrays (printed as Arrays inside them), Python objects
    such as a dtype (formatted as they are), and prints under numpy's print options as they
    were when it was called; JAX's output in each case."""
    def f(x):
        jax.debug.print("arr {a}, dtype: {d}", a=x, d=x.dtype)
        jax.debug.print("x: {}", dict(foo=x[0].astype(jnp.int32)), ordered=True)
        with np.printoptions(precision=2, suppress=True):
            jax.debug.print("{}", x * 1.2345)
        jax.debug.print("{}", jax.random.key(0))
    (jax.jit(f) if jit else f)(jnp.array([1.0, 2.0, 3.0], np.float32))
    jax.effects_barrier()
    lines = capsys.readouterr().out.splitlines()
    assert lines[:3] == ["arr [1. 2. 3.], dtype: float32",
                         "x: {'foo': Array(1, dtype=int32)}", "[1.23 2.47 3.7 ]"]
    # a key prints its data (JAX's jit prints only that; eagerly, its repr around it)
    assert lines[-1] == "[0 0]"


def test_debug_print_and_callback_two_call_forms_and_format_checks(capsys):
    """The two-call forms (options first, then the format or callback and its arguments), and
    JAX's errors: arguments in the first call, unused arguments, an f-string."""
    jax.debug.print(ordered=True)("x: {x}", x=42)
    got = []
    jax.debug.callback(ordered=True)(lambda v, d: got.append((int(v), d)), 100, np.float32)
    jax.effects_barrier()
    assert capsys.readouterr().out == "x: 42\n" and got == [(100, np.float32)]
    with pytest.raises(TypeError, match="debug_print received unexpected arguments in the "
                                        "two-call form"):
        jax.debug.print(ordered=True, a=42)
    with pytest.raises(TypeError, match="debug_callback received unexpected arguments in the "
                                        "two-call form"):
        jax.debug.callback(None, 42, ordered=True)
    with pytest.raises(ValueError, match=r"Unused keyword arguments to `jax.debug.print`: "
                                         r"\['partitioned'\]"):
        jax.debug.print(ordered=True)("hello {a}", a=42, partitioned=True)
    with pytest.raises(ValueError, match="Unused positional arguments"):
        jax.jit(lambda x: jax.debug.print("hello", x))(jnp.arange(2))
    with pytest.raises(ValueError, match="You may be passing an f-string"):
        jax.jit(lambda x: jax.debug.print("hello: {x}x", x=x, y=x))(jnp.arange(2))
    jax.debug.print("hello", 3, skip_format_check=True)
    jax.effects_barrier()
    assert capsys.readouterr().out == "hello 3\n"


def test_callbacks_receive_arrays_python_numbers_weakly_typed_when_eager():
    # as JAX's, which puts the values on its CPU device before calling; under jit they come
    # back from the compiled program typed
    seen = []
    jax.jit(lambda a: jax.debug.callback(lambda v, t: seen.append((v, t)), a,
                                         {"n": 1, "x": 2.0}))(jnp.arange(2.0))
    jax.debug.callback(lambda t: seen.append(t), (3, jnp.ones(2)))
    (v, t), (n, o) = seen
    assert isinstance(v, jax.Array) and repr(v) == "Array([0., 1.], dtype=float32)"
    assert repr(t["n"]) == "Array(1, dtype=int32)"
    assert repr(t["x"]) == "Array(2., dtype=float32)"
    assert repr(n) == "Array(3, dtype=int32, weak_type=True)"
    assert not o.weak and isinstance(o, jax.Array)

    def double(v):
        assert isinstance(v, jax.Array)
        return np.asarray(jnp.sum(v) * 2 + v)       # jnp works on them inside the callback
    got = jax.jit(lambda a: jax.pure_callback(
        double, jax.ShapeDtypeStruct((3,), np.float32), a))(jnp.arange(3.0))
    np.testing.assert_array_equal(got, [6.0, 7.0, 8.0])


def test_debug_print_of_python_numbers_in_a_pytree_shows_weak_types_when_eager(capsys):
    jax.debug.print("{t}", t={"b": (1, 2.0)})
    jax.jit(lambda x: jax.debug.print("{t}", t={"b": (1, x)}))(2.0)
    jax.effects_barrier()
    assert capsys.readouterr().out.splitlines() == [
        "{'b': (Array(1, dtype=int32, weak_type=True), "
        "Array(2., dtype=float32, weak_type=True))}",
        "{'b': (Array(1, dtype=int32), Array(2., dtype=float32))}"]


def test_partitioned_print_under_jit_prints_each_devices_block(capsys):
    """``partitioned=True`` under jit: each device prints its blocks of the values the
    program splits (on Auto axes as propagation lays them out, on Explicit ones as their
    types), in mesh-position order; under vmap once per element and device; run eagerly,
    the whole value (JAX's). The lowered program's text holds the print in its shard_map and
    parses back."""
    from ir.parser import parse_program
    auto = jax.make_mesh((2,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    x = jax.device_put(np.arange(8), NamedSharding(auto, P("x")))

    def show(v):
        jax.debug.print("v: {}", v, partitioned=True)

    jax.jit(show)(x)
    show(x)
    jax.jit(lambda v: show(v.sum()))(x)           # a replicated value: every device prints
    jax.effects_barrier()
    assert capsys.readouterr().out.splitlines() == [
        "v: [0 1 2 3]", "v: [4 5 6 7]", "v: [0 1 2 3 4 5 6 7]", "v: 28", "v: 28"]
    explicit = jax.make_mesh((2, 2), ("a", "b"))
    y = jax.device_put(np.arange(8).reshape(4, 2), NamedSharding(explicit, P("a", "b")))
    jax.jit(show)(y * 10)
    jax.effects_barrier()
    assert capsys.readouterr().out.splitlines() == [
        "v: [[ 0]", " [20]]", "v: [[10]", " [30]]", "v: [[40]", " [60]]", "v: [[50]", " [70]]"]
    rows = jax.device_put(np.arange(4).reshape(2, 2), NamedSharding(auto, P("x")))
    cols = jax.device_put(np.arange(4).reshape(2, 2) + 6, NamedSharding(auto, P("x")))
    jax.jit(jax.vmap(lambda r, c: jax.debug.print("{} {}", r, c, partitioned=True),
                     in_axes=(0, 1)))(rows, cols)
    jax.effects_barrier()
    assert sorted(capsys.readouterr().out.splitlines()) == [
        "[0 1] [6]", "[0 1] [8]", "[2 3] [7]", "[2 3] [9]"]
    lowered = jax.jit(show).lower(x).as_text()
    assert "shard_map" in lowered and "debug_print" in lowered
    traced = jax.make_jaxpr(show)(x)
    assert "partitioned=True" in str(traced)
    assert str(parse_program(str(traced.program))) == str(traced.program)


def test_partitioned_debug_callback_under_jit_gets_each_devices_block():
    """``debug.callback(partitioned=True)`` under jit: once per device with its block (a
    replicated value: the whole value, on every device); eagerly once with the whole value;
    under vmap once per element and device (JAX's)."""
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    x = np.arange(128, dtype=np.float32).reshape(8, 16)
    split = jax.device_put(x, NamedSharding(mesh, P("x", "y")))
    seen = []

    def record(v):
        seen.append(np.asarray(v).copy())
    jax.jit(lambda a: jax.debug.callback(record, a, partitioned=True))(split)
    jax.effects_barrier()
    assert len(seen) == 8 and all(b.shape == (2, 8) for b in seen)
    np.testing.assert_array_equal(np.sort(np.concatenate([b.ravel() for b in seen])), x.ravel())
    seen.clear()
    jax.debug.callback(record, split, partitioned=True)
    assert len(seen) == 1 and seen[0].shape == (8, 16)
    seen.clear()
    jax.jit(lambda a: jax.debug.callback(record, a.sum(), partitioned=True))(split)
    jax.effects_barrier()
    assert [float(v) for v in seen] == [float(x.sum())] * 8
    seen.clear()
    jax.jit(jax.vmap(lambda r: jax.debug.callback(record, r, partitioned=True)))(split)
    jax.effects_barrier()
    assert len(seen) == 64 and all(b.shape == (8,) for b in seen)


def test_ordered_debug_effects_in_a_jitted_program_on_several_devices_are_refused():
    """JAX's ValueError: a jitted program that runs on more than one device cannot print or
    call back with ``ordered=True``; on one device (or eagerly) it runs."""
    mesh = jax.make_mesh((4, 2), ("x", "y"))
    split = jax.device_put(np.ones((8, 2), np.float32), NamedSharding(mesh, P("x")))
    message = "The following ordered effects are not supported for more than 1 device"
    with pytest.raises(ValueError, match=message):
        jax.jit(lambda a: jax.debug.print("a={}", a, ordered=True))(split)
    with pytest.raises(ValueError, match=message):
        jax.jit(lambda a: jax.debug.callback(print, a, ordered=True))(split)
    with pytest.raises(ValueError, match=message):
        jax.jit(lambda a: lax.fori_loop(0, 2, lambda i, c: (
            jax.debug.print("{}", c, ordered=True), c)[1], a))(split)
    shown = lambda v: (jax.debug.print("{}", v, ordered=True), v)[1]
    with pytest.raises(ValueError, match=message):
        jax.pmap(shown)(jnp.arange(2.0))
    with pytest.raises(ValueError, match=message):
        jax.shard_map(shown, mesh=mesh, in_specs=P("x"), out_specs=P("x"))(split)
    got = []
    jax.jit(lambda a: jax.debug.callback(got.append, a.sum(), ordered=True))(np.ones(3))
    jax.debug.callback(got.append, split, ordered=True)
    jax.jit(lambda a: jax.debug.callback(got.append, a, ordered=False))(split)
    jax.effects_barrier()
    assert [np.shape(g) for g in got] == [(), (8, 2), (8, 2)]


def test_breakpoint_reads_commands_with_the_computed_locals():
    """jax.debug.breakpoint under jit: JAX's jdb prompt, where the traced function's locals
    hold the values the program computed (p, an expression, w, u, c); one in a branch the
    program does not take never stops; under vmap it stops once per member; with a token it
    returns the token."""
    import io

    def session(commands):
        return io.StringIO("".join(c + "\n" for c in commands)), io.StringIO()

    stdin, stdout = session(["p z", "z.sum() + 1", "nope", "c"])

    def f(x):
        z = x * 2
        jax.debug.breakpoint(stdin=stdin, stdout=stdout)
        return z + 1
    np.testing.assert_array_equal(np.asarray(jax.jit(f)(jnp.arange(3.0))), [1.0, 3.0, 5.0])
    jax.effects_barrier()
    assert stdout.getvalue() == (
        "Entering jdb:\n(jdb) Array([0., 2., 4.], dtype=float32)\n"
        "(jdb) Array(7., dtype=float32)\n"
        "(jdb) *** NameError: name 'nope' is not defined\n(jdb) ")
    stdin, stdout = session(["w", "u", "c"])

    def inner():
        jax.debug.breakpoint(stdin=stdin, stdout=stdout, num_frames=2)

    def outer(x):
        inner()
        return x
    jax.jit(outer)(1.0)
    jax.effects_barrier()
    shown = stdout.getvalue()
    assert "Traceback:" in shown and re.search(r"\n->\s+inner\(\)\n", shown)
    stdin, stdout = session([])
    jax.jit(lambda x: lax.cond(x > 0, lambda v: v, lambda v: (
        jax.debug.breakpoint(stdin=stdin, stdout=stdout), v)[1], x))(1.0)
    jax.effects_barrier()
    assert stdout.getvalue() == ""
    stdin, stdout = session(["p x", "c", "p x", "c"])
    jax.vmap(lambda x: (jax.debug.breakpoint(stdin=stdin, stdout=stdout), x)[1])(
        jnp.arange(2.0))
    assert stdout.getvalue().count("Entering jdb:") == 2
    stdin, stdout = session(["c"])
    token = jax.jit(lambda x: jax.debug.breakpoint(token=x, stdin=stdin, stdout=stdout) * 3)(
        jnp.ones(2))
    np.testing.assert_array_equal(np.asarray(token), [3.0, 3.0])
    with pytest.raises(ValueError, match="`ordered` and `token` are mutually exclusive"):
        jax.debug.breakpoint(token=jnp.ones(2), ordered=True)


# --- a host function that fails, or returns what it did not declare ---------------------------

def _fails(v):
    raise ValueError("Ooops")


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("api", ["pure_callback", "io_callback"])
def test_a_failing_host_function_is_the_programs_runtime_error_and_is_logged(jit, api, caplog):
    call = jax.pure_callback if api == "pure_callback" else io_callback
    f = lambda v: call(_fails, jax.ShapeDtypeStruct((), np.float32), v)
    with pytest.raises(JaxRuntimeError) as info:
        (jax.jit(f) if jit else f)(jnp.float32(1.))
    # JAX's (XLA's) error: a RuntimeError whose message holds the host's traceback
    assert isinstance(info.value, RuntimeError)
    message = str(info.value)
    assert message.startswith("INTERNAL: CpuCallback error calling callback: Traceback")
    assert "\nValueError: Ooops" in message
    assert type(info.value.__cause__) is ValueError
    failed = [r for r in caplog.records if r.levelname == "ERROR"]
    assert [r.getMessage() for r in failed] == [f"jax.{api} failed"]
    assert failed[0].exc_info[0] is ValueError          # logged with its traceback


def test_a_failing_debug_callback_raises_as_it_is_only_when_called_eagerly(caplog):
    with pytest.raises(ValueError, match="^Ooops$"):
        jax.debug.callback(_fails, jnp.float32(1.))
    with pytest.raises(JaxRuntimeError, match="\nValueError: Ooops"):
        jax.jit(lambda v: jax.debug.callback(_fails, v))(jnp.float32(1.))
    # (a jitted program's error also names the equation that was running)
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == [
        "jax.debug.callback failed"] * 2


@pytest.mark.parametrize("result, declared, why", [
    (lambda: (np.float32(1), np.float32(2)), jax.ShapeDtypeStruct((), np.float32),
     "Mismatched number of outputs from callback. Expected: 1, Actual: 2"),
    (lambda: [1., 2.], jax.ShapeDtypeStruct((2,), np.float32),      # a list is a tree
     "Mismatched number of outputs from callback. Expected: 1, Actual: 2"),
    (lambda: None, (jax.ShapeDtypeStruct((1,), np.float32),),
     "Mismatched number of outputs from callback. Expected: 1, Actual: 0"),
    (lambda: np.float32(1), jax.ShapeDtypeStruct((1,), np.float32),
     "Incorrect output shape for return value #0: Expected: (1,), Actual: ()"),
    (lambda: np.array([1], np.int32), jax.ShapeDtypeStruct((1,), np.float32),
     "Incorrect output dtype for return value #0: Expected: float32, Actual: int32"),
    (lambda: 1, jax.ShapeDtypeStruct((), np.float32),         # a Python int is an int32
     "Incorrect output dtype for return value #0: Expected: float32, Actual: int32"),
    (lambda: np.float32(3), jax.ShapeDtypeStruct((), jnp.bfloat16),
     "Incorrect output dtype for return value #0: Expected: bfloat16, Actual: float32"),
])
def test_results_unlike_their_declaration_are_jaxs_runtime_errors(result, declared, why):
    f = jax.jit(lambda: jax.pure_callback(result, declared))
    with pytest.raises(JaxRuntimeError, match=re.escape("\nRuntimeError: " + why)):
        f()


@pytest.mark.skipif(jax.config.jax_enable_x64, reason="canonical dtypes with x64 off")
def test_results_are_checked_in_their_canonical_dtypes():
    # with x64 off a float64 stands for a float32 and an int64 for an int32, as in JAX
    f = jax.jit(lambda: jax.pure_callback(
        lambda: (np.array([1.5], np.float64), np.int64(3), 2.5, True),
        (jax.ShapeDtypeStruct((1,), np.float32), jax.ShapeDtypeStruct((), np.int32),
         jax.ShapeDtypeStruct((), np.float32), jax.ShapeDtypeStruct((), np.bool_))))
    a, b, c, d = f()
    assert (a.dtype, b.dtype, c.dtype, d.dtype) == (np.float32, np.int32, np.float32, np.bool_)
    assert (float(a[0]), int(b), float(c), bool(d)) == (1.5, 3, 2.5, True)


def test_legacy_vectorized_gives_unbatched_operands_as_they_are():
    seen = []

    def host(x, y):
        seen.append((x.shape, y.shape))
        return np.sin(x) + y

    f = jax.vmap(lambda x, y: jax.pure_callback(host, x, x, y, vmap_method="legacy_vectorized"),
                 in_axes=(1, None), out_axes=1)
    x, y = np.arange(12, dtype=np.float32).reshape(4, 3), np.float32(4)
    out = jax.jit(f)(x, y)
    np.testing.assert_allclose(np.asarray(out), np.sin(x) + y, rtol=1e-6)
    # the batch leads (moved from axis 1); the unbatched y is not given a batch axis
    assert seen[0] == ((3, 4), ())


def test_transposing_a_callback_is_jaxs_error():
    io = lambda x: io_callback(lambda v: v, jax.ShapeDtypeStruct((), np.float32), x)
    with pytest.raises(ValueError, match="^IO callbacks do not support transpose.$"):
        jax.linear_transpose(io, jnp.float32(1.))(jnp.float32(1.))
    pure = lambda x: jax.pure_callback(lambda v: v, jax.ShapeDtypeStruct((), np.float32), x)
    with pytest.raises(NotImplementedError, match="for 'pure_callback' not implemented"):
        jax.linear_transpose(pure, jnp.float32(1.))(jnp.float32(1.))


def test_an_io_callback_cannot_be_recomputed_by_checkpoint_under_grad():
    def f(x, y):
        io_callback(lambda v: v, y, y)          # (not even on what is differentiated)
        return x * 2

    with pytest.raises(NotImplementedError, match=re.escape(
            "Effects not supported in partial-eval of `checkpoint`/`remat`: [IOEffect]")):
        jax.grad(jax.checkpoint(f))(2., 3.)
    assert float(jax.jit(jax.checkpoint(f))(2., 3.)) == 4.0       # run, it is called once


def test_io_callbacks_in_a_vmapped_cond_or_a_batched_loop_are_jaxs_errors():
    def in_cond(pred, x):
        return lax.cond(pred, lambda v: io_callback(lambda a: a, v, v), lambda v: v, x)

    for preds in (jnp.array([True, False]), jnp.bool_(True)):      # batched index or not
        with pytest.raises(NotImplementedError,
                           match="^IO effect not supported in vmap-of-cond.$"):
            jax.vmap(in_cond, in_axes=(0 if preds.ndim else None, 0))(preds, jnp.ones(2))

    def loop(i):
        def body(i):
            io_callback(lambda v: None, None, i)
            return i + 1
        return lax.while_loop(lambda i: i < 5, body, i)

    with pytest.raises(Exception, match="^Unordered IO effects not supported in while_loop "
                                        "with batched predicate$"):
        jax.vmap(loop)(jnp.array([0, 4]))
    # a predicate all members share runs the loop as it is
    np.testing.assert_array_equal(
        jax.vmap(loop, in_axes=None, axis_size=2)(jnp.int32(1)), [5, 5])
    # pure callbacks may be mapped in both
    pure = lambda i: lax.while_loop(lambda i: i < 5, lambda i: jax.pure_callback(
        lambda v: v + 1, i, i, vmap_method="sequential"), i)
    np.testing.assert_array_equal(jax.vmap(pure)(jnp.array([0, 4])), [5, 5])
