"""``shardc.config`` (``jax.config``): the API and JAX's errors, 64-bit mode against numpy in
float64/int64, the device count, disable_jit, and the flags accepted without effect."""
from __future__ import annotations

import functools
import linecache
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import shardc
import shardc.numpy as jnp
from shardc import config, lax
from shardc.config import ACCEPTED, FLAGS
from shardc.experimental import enable_x64
from shardc.sharding import PartitionSpec as P

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def restore_flags():
    before = config.values
    yield
    for name in ("jax_enable_x64", "jax_disable_jit", "jax_default_matmul_precision",
                 "jax_platforms", "jax_debug_nans", "jax_debug_infs"):
        config.update(name, before[name])


# --- the API -----------------------------------------------------------------------------------

def test_config_is_jax_config():
    from shardc import config as imported
    assert imported is shardc.config is config
    assert config.jax_enable_x64 is False and config.read("jax_enable_x64") is False
    assert config.x64_enabled is False
    config.update("jax_platforms", "cpu")
    assert config.jax_platforms == "cpu" and config.values["jax_platforms"] == "cpu"


def test_unknown_names_raise_as_jax():
    with pytest.raises(AttributeError, match="^Unrecognized config option: jax_enable_x46$"):
        config.update("jax_enable_x46", True)
    with pytest.raises(AttributeError, match="^Unrecognized config option: jax_nope$"):
        config.read("jax_nope")
    with pytest.raises(AttributeError, match="has no attribute 'jax_nope'"):
        config.jax_nope
    with pytest.raises(AttributeError, match=r"use config.update\('jax_enable_x64', value\)"):
        config.jax_enable_x64 = True


def test_bad_values_raise_as_jax():
    with pytest.raises(ValueError, match="new int config value must be None or of type int, "
                                         "got four of type <class 'str'>"):
        config.update("jax_num_cpu_devices", "four")
    with pytest.raises(ValueError, match=r"new enum value must be None or in \['default', "):
        config.update("jax_default_matmul_precision", "fastest")
    with pytest.raises(ValueError, match="new string config value must be None or of type str"):
        config.update("jax_platforms", 3)
    config.update("jax_debug_nans", 1)                 # bool flags take truthiness, as JAX
    assert config.jax_debug_nans is True


def test_strict_dtype_promotion_promotes_nothing_implicitly():
    """JAX's strict lattice: typed values of different dtypes are a TypePromotionError; a
    Python scalar takes the dtype of a value of its kind (an int a float's too); the mode is
    part of what a trace depends on; standard mode comes back after the block."""
    ints, floats = jnp.ones(2, jnp.int32), jnp.ones(2, jnp.float32)
    add = shardc.jit(lambda a, b: a + b)
    assert add(ints, floats).dtype == jnp.float32
    with shardc.numpy_dtype_promotion("strict"):
        assert config.jax_numpy_dtype_promotion == "strict"
        message = re.escape("have no available implicit dtype promotion path when "
                            "jax_numpy_dtype_promotion=strict")
        for mixed in (lambda: ints + floats, lambda: add(ints, floats),
                      lambda: ints + 1.5, lambda: floats + jnp.ones(2, jnp.float16),
                      lambda: jnp.promote_types(jnp.int32, jnp.float32)):
            with pytest.raises(shardc.dtypes.TypePromotionError, match=message):
                mixed()
        assert (floats + 1).dtype == jnp.float32 and (floats * 2.5).dtype == jnp.float32
        assert (jnp.ones(2, jnp.int8) + 3).dtype == jnp.int8
        assert (jnp.ones(2, jnp.bfloat16) * 2.0).dtype == jnp.bfloat16
        assert jnp.result_type(1, 2.0) == jnp.float32
    assert add(ints, floats).dtype == jnp.float32
    config.update("jax_numpy_dtype_promotion", "standard")
    assert config.jax_numpy_dtype_promotion == "standard"


def test_accepted_flags_change_nothing():
    x = jnp.asarray(np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32))
    want = np.asarray(jnp.dot(x, x))
    assert set(ACCEPTED) >= {"jax_platforms", "jax_traceback_filtering",
                             "jax_compilation_cache_dir"}
    for name in ACCEPTED:
        config.update(name, FLAGS[name].default)
        assert config.read(name) == FLAGS[name].default
    for precision in ("highest", "bfloat16", "float32"):
        config.update("jax_default_matmul_precision", precision)
        np.testing.assert_array_equal(np.asarray(jnp.dot(x, x)), want)


# --- 64-bit mode -------------------------------------------------------------------------------

def test_x64_defaults_and_precision_match_numpy():
    config.update("jax_enable_x64", True)
    assert jnp.arange(3).dtype == np.int64 and jnp.asarray(1.5).dtype == np.float64
    assert jnp.ones(3).dtype == np.float64 and jnp.asarray([1, 2]).dtype == np.int64
    x = np.array([1.0, 1e-12, np.pi], np.float64)
    got = jnp.asarray(x) * 3.0 + 1.0
    assert got.dtype == np.float64
    np.testing.assert_array_equal(np.asarray(got), x * 3.0 + 1.0)           # bitwise
    big = jnp.asarray(np.array([2 ** 40, -(2 ** 50)], np.int64)) + 1
    assert big.dtype == np.int64
    np.testing.assert_array_equal(np.asarray(big), [2 ** 40 + 1, -(2 ** 50) + 1])
    assert (jnp.ones(2, jnp.float32) + 1.0).dtype == np.float32            # weak stays weak
    assert (jnp.ones(2, jnp.float32) + jnp.ones(2)).dtype == np.float64
    assert jnp.promote_types(jnp.uint32, jnp.int32) == np.int64
    config.update("jax_enable_x64", False)
    assert jnp.asarray(x).dtype == np.float32 and jnp.arange(3).dtype == np.int32
    assert jnp.promote_types(jnp.uint32, jnp.int32) == np.int32


def test_jit_cache_keys_on_x64():
    f = shardc.jit(lambda v: v + jnp.arange(3))
    x = jnp.zeros(3, jnp.int32)
    assert f(x).dtype == np.int32
    with enable_x64():
        assert config.jax_enable_x64 is True
        assert f(x).dtype == np.int64                   # int32 + an int64 arange: int64
        # an int64 arange times 0.5 is a weak float64, which a float32 array keeps float32
        # (JAX's)
        assert (jnp.zeros(3, jnp.float32) + jnp.arange(3) * 0.5).dtype == np.float32
    assert config.jax_enable_x64 is False
    assert f(x).dtype == np.int32
    assert f.trace_count == 2


@pytest.mark.parametrize("fn, want", [
    # JAX makes booleans and integers up to 32 bits float32 where it needs an inexact dtype,
    # x64 on or off; 64-bit integers float64 (JAX 0.10.2's dtypes)
    (jnp.mean, ("float32", "float64", "float32")),
    (jnp.var, ("float32", "float64", "float32")),
    (lambda x: jnp.asarray(x) / 2, ("float32", "float64", "float64")),
    (jnp.sin, ("float32", "float64", "float32")),
    (lambda x: jnp.arctan2(x, x), ("float32", "float64", "float32")),
    (lambda x: jnp.quantile(x, 0.5), ("float32", "float64", "float32")),
    (lambda x: jnp.fft.fft(x), ("complex64", "complex128", "complex64")),
    (jnp.linalg.norm, ("float32", "float64", "float32")),
    (shardc.nn.gelu, ("float32", "float64", "float32")),
    (shardc.scipy.special.erf, ("float32", "float64", "float32")),
    (lambda x: jnp.isclose(x, x), ("bool", "bool", "bool")),
    # sums of integers narrower than the default int are in the default int
    (jnp.sum, ("int64", "int64", "int64")),
    (jnp.cumsum, ("int32", "int64", "int64")),
    # angle's integers are the default float
    (jnp.angle, ("float64", "float64", "float64")),
])
def test_x64_inexact_and_accumulator_dtypes_are_jaxs(fn, want):
    config.update("jax_enable_x64", True)
    inputs = (np.arange(1, 5, dtype=np.int32), np.arange(1, 5, dtype=np.int64),
              np.array([True, False, True, True]))
    assert tuple(str(jnp.asarray(fn(x)).dtype) for x in inputs) == want


@pytest.mark.parametrize("fn, want", [
    # JAX 0.10.2's dtypes with x64 on: some fixed at 32 bits, some the default int
    (lambda: jnp.tri(3), "float32"),
    (lambda: jnp.triu_indices(3)[0], "int64"),
    (lambda: jnp.diag_indices_from(jnp.ones((3, 3)))[0], "int64"),
    (lambda: jnp.searchsorted(jnp.arange(6.0), 2.5), "int32"),
    (lambda: jnp.digitize(jnp.arange(6.0), jnp.array([1.0, 3.0])), "int32"),
    (lambda: jnp.argpartition(jnp.arange(6.0), 2), "int32"),
    (lambda: jnp.frexp(jnp.arange(6.0, dtype=jnp.float32))[1], "int32"),
    (lambda: jnp.histogram(jnp.arange(6, dtype=jnp.int32), 3)[0], "float32"),
    (lambda: jnp.histogram(jnp.arange(6.0, dtype=jnp.float32), 3, density=True)[0],
     "float32"),
    (lambda: jnp.histogram(jnp.arange(6.0, dtype=jnp.float16), 3)[0], "float16"),
    (lambda: jnp.polyder(jnp.array([3, -5, 2, 7], jnp.int32)), "float32"),
])
def test_x64_index_and_count_dtypes_are_jaxs(fn, want):
    config.update("jax_enable_x64", True)
    assert str(fn().dtype) == want


def test_x64_python_ints_past_int32_are_int64():
    config.update("jax_enable_x64", True)
    x = jnp.arange(3)
    for got, want in ((x + 2 ** 31, [2 ** 31, 2 ** 31 + 1, 2 ** 31 + 2]),
                      (jnp.full((2,), 2 ** 40), [2 ** 40] * 2),
                      (shardc.jit(lambda v: v * 2)(2 ** 40), 2 ** 41),
                      (lax.add(x, 2 ** 40), [2 ** 40, 2 ** 40 + 1, 2 ** 40 + 2]),
                      (x & 0xFFFFFFFF, [0, 1, 2])):
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, want)
    with pytest.raises(OverflowError, match="too large to convert to int64"):
        jnp.full((2,), 2 ** 64)
    config.update("jax_enable_x64", False)
    with pytest.raises(OverflowError, match="too large to convert to int32 .*x64 is off"):
        jnp.full((2,), 2 ** 40)


def test_x64_unsigned_division_past_the_signed_range():
    config.update("jax_enable_x64", True)
    a = jnp.array([2 ** 64 - 1, 2 ** 63 + 5, 7, 9], jnp.uint64)
    b = jnp.array([3, 2 ** 63 + 1, 2, 0], jnp.uint64)
    want = [(2 ** 64 - 1) // 3, 1, 3, 2 ** 64 - 1]      # x / 0 has all bits set (XLA's)
    for got in (a // b, lax.div(a, b), shardc.jit(lambda p, q: p // q)(a, b)):
        assert got.dtype == np.uint64
        np.testing.assert_array_equal(np.asarray(got), np.array(want, np.uint64))
    np.testing.assert_array_equal(np.asarray(a % b), np.array([0, 4, 1, 0], np.uint64))


def test_x64_pmean_of_integers_is_float32_up_to_32_bits():
    config.update("jax_enable_x64", True)
    mesh = shardc.sharding.Mesh(np.array(shardc.devices()[:2]), ("i",))
    f = shardc.shard_map(lambda v: lax.pmean(v, "i"), mesh=mesh, in_specs=P("i"),
                         out_specs=P())
    for dtype, want in ((np.int32, np.float32), (np.int64, np.float64), (np.bool_, np.float32)):
        x = np.arange(4).astype(dtype)
        assert f(x).dtype == want and shardc.jit(f)(x).dtype == want
        np.testing.assert_allclose(f(x), x.reshape(2, 2).astype(np.float64).mean(0))


def test_x64_shard_map_collectives_and_gradients_match_numpy():
    config.update("jax_enable_x64", True)
    mesh = shardc.make_mesh((4, 2), ("x", "y"))
    rng = np.random.default_rng(5)
    a = rng.standard_normal((8, 6))
    w = rng.standard_normal((6, 3))

    @functools.partial(shardc.shard_map, mesh=mesh, in_specs=(P("x", "y"), P("y", None)),
                       out_specs=(P("x", None), P(), P(), P(("x", "y")), P()))
    def body(a_block, w_block):
        partial_sum = jnp.dot(a_block, w_block)
        total = lax.psum(partial_sum, "y")
        index = lax.axis_index(("x", "y"))
        return (total, lax.psum(jnp.sum(total ** 2), "x"), lax.psum(index, ("x", "y")),
                index[None], lax.psum(a_block > 0, ("x", "y")))

    for run in (body, shardc.jit(body)):
        total, loss, index_sum, indices, positives = run(jnp.asarray(a), jnp.asarray(w))
        assert total.dtype == np.float64 and loss.dtype == np.float64
        np.testing.assert_allclose(np.asarray(total), a @ w, rtol=1e-13)
        np.testing.assert_allclose(float(loss), np.sum((a @ w) ** 2), rtol=1e-13)
        # axis_index and psum of bools are int32 in 64-bit mode too, as in JAX
        assert index_sum.dtype == np.int32 and int(index_sum) == sum(range(8))
        assert indices.dtype == np.int32
        np.testing.assert_array_equal(np.asarray(indices), np.arange(8, dtype=np.int32))
        assert positives.dtype == np.int32
        np.testing.assert_array_equal(
            np.asarray(positives), sum(b > 0 for b in [a[r:r + 2, c:c + 3]
                                                       for r in range(0, 8, 2)
                                                       for c in range(0, 6, 3)]))

    grad_a = shardc.grad(lambda a_, w_: body(a_, w_)[1])(jnp.asarray(a), jnp.asarray(w))
    assert grad_a.dtype == np.float64
    np.testing.assert_allclose(np.asarray(grad_a), 2 * (a @ w) @ w.T, rtol=1e-12)


def test_x64_loop_counters_and_indices():
    config.update("jax_enable_x64", True)
    counted = lax.fori_loop(np.int64(0), np.int64(4), lambda i, c: c + i, np.int64(0))
    assert counted.dtype == np.int64 and int(counted) == 6
    static = lax.fori_loop(0, 4, lambda i, c: c + i, jnp.zeros((), jnp.int32))
    assert static.dtype == np.int32 and int(static) == 6     # Python bounds: the carry's type
    traced = shardc.jit(lambda hi: lax.fori_loop(0, hi, lambda i, c: c + i, 0))(np.int64(5))
    assert traced.dtype == np.int64 and int(traced) == 10
    picked = lax.switch(np.int64(1), [lambda v: v, lambda v: v * 2.0], jnp.ones(2))
    assert picked.dtype == np.float64
    np.testing.assert_array_equal(np.asarray(picked), [2.0, 2.0])
    with pytest.raises(TypeError, match="lower and upper arguments to fori_loop must have "
                                        "equal types, got int32 and int64"):
        lax.fori_loop(np.int32(0), np.int64(3), lambda i, c: c, 0)


# --- devices and jit ---------------------------------------------------------------------------

def test_num_cpu_devices_after_first_use_is_an_error():
    count = shardc.device_count()
    config.update("jax_num_cpu_devices", count)                      # the same count: fine
    with pytest.raises(RuntimeError, match="jax_num_cpu_devices config should be updated "
                                           "before backends are initialized"):
        config.update("jax_num_cpu_devices", count + 1)
    assert shardc.device_count() == count


def _run_fresh(code: str, **env) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("SHARDC_NUM_DEVICES", "XLA_FLAGS") and not k.startswith("JAX_")}
    clean.update(env, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=clean,
                          capture_output=True, text=True, timeout=120)


def test_num_cpu_devices_and_environment_in_a_fresh_process():
    code = """
import shardc, shardc.numpy as jnp
from shardc import config
config.update('jax_num_cpu_devices', 4)            # before any operation, as in JAX
assert config.jax_enable_x64 is True and jnp.arange(2).dtype == 'int64'
assert config.jax_platforms == 'cpu'
mesh = shardc.make_mesh((4,), ('i',))
print(shardc.device_count(), len(mesh.devices.flat), jnp.asarray(0.5).dtype)
"""
    done = _run_fresh(code, JAX_ENABLE_X64="true", JAX_PLATFORMS="cpu")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["4", "4", "float64"]
    bad = _run_fresh("import shardc", JAX_ENABLE_X64="maybe")
    assert bad.returncode != 0
    assert "ValueError: invalid truth value 'maybe' for environment 'JAX_ENABLE_X64'" in bad.stderr


def test_disable_jit_runs_op_by_op():
    seen = []

    @shardc.jit
    def f(x):
        seen.append(type(x).__name__)
        return x * 2 if float(x[0]) > 0 else x         # concrete values only untraced

    x = jnp.ones(3)
    with shardc.disable_jit():
        assert config.jax_disable_jit is True
        np.testing.assert_array_equal(np.asarray(f(x)), [2.0, 2.0, 2.0])
        f(x)
    assert seen == ["Array", "Array"] and f.trace_count == 0
    assert config.jax_disable_jit is False
    with pytest.raises(shardc.ConcretizationTypeError):
        f(x)


def test_debug_nans_and_infs_name_the_operation():
    x = jnp.asarray([0.0, 1.0])
    sqrt_shifted = shardc.jit(lambda v: jnp.sqrt(v - 2.0) * 2)
    assert np.isnan(np.asarray(sqrt_shifted(x))).all()          # off: NaNs flow through
    config.update("jax_debug_nans", True)
    with pytest.raises(FloatingPointError, match=r"^invalid value \(nan\) encountered in div$"):
        x / x
    np.testing.assert_array_equal(np.asarray(jnp.log(x)), [-np.inf, 0.0])   # inf is no NaN
    for _ in range(2):                                          # traced, then cached
        with pytest.raises(FloatingPointError, match=r"\(nan\) encountered in sqrt$"):
            sqrt_shifted(x)
    with pytest.raises(FloatingPointError, match=r"\(nan\) encountered in jit\(<lambda>\)\. "
                                                 "Because .* the de-optimized function did "
                                                 "not produce invalid values"):
        shardc.jit(lambda v: v)(jnp.asarray([np.nan]))
    np.testing.assert_array_equal(np.asarray(sqrt_shifted(jnp.asarray([3.0]))), [2.0])
    mesh = shardc.make_mesh((4,), ("i",))
    body = shardc.shard_map(lambda b: lax.psum(b, "i") / b, mesh=mesh, in_specs=P("i"),
                            out_specs=P("i"))
    with pytest.raises(FloatingPointError, match=r"\(inf\) encountered in"):
        config.update("jax_debug_nans", False)
        config.update("jax_debug_infs", True)
        body(jnp.asarray([0.0, 1.0, 2.0, 3.0]))


def test_debug_nans_reruns_a_jitted_function_as_jax_does():
    """On a NaN out of a jitted function the function runs again as if not jitted: a cond is
    one operation there (its NaN constant is named as the cond's); a donated argument is
    gone, so the first error stands; a shard_map's NaN is JAX's sharded-computation error."""
    f = shardc.jit(lambda x: lax.cond(x == 1, lambda _: np.nan, lambda _: 2.0, operand=None))
    config.update("jax_debug_nans", True)
    try:
        assert float(f(2)) == 2.0
        with pytest.raises(FloatingPointError, match=r"^invalid value \(nan\) encountered in "
                                                     r"cond$"):
            f(1)
        donated = jnp.asarray(0.0)
        with pytest.raises(FloatingPointError, match=r"^invalid value \(nan\) encountered in "
                                                     r"jit\(<lambda>\)$"):
            shardc.jit(lambda x: 0.0 / x, donate_argnums=0)(donated)
        mesh = shardc.make_mesh((2,), ("i",))
        body = shardc.shard_map(lambda b: 0.0 / b, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
        with pytest.raises(FloatingPointError, match=r"^Invalid value \(nan\) encountered in "
                                                     r"sharded computation\.$"):
            body(jnp.asarray([0.0, 1.0]))
    finally:
        config.update("jax_debug_nans", False)


def test_debug_infs_leaves_a_reductions_python_initial_alone():
    # max(..., initial=-inf) of a narrower dtype (float32 under x64, bfloat16) makes no -inf
    # value of its own (JAX: the initial is a literal), so debug_infs has nothing to flag;
    # attention masks float64 logits this way
    with shardc.debug_infs(True):
        assert float(jnp.max(jnp.zeros(3, jnp.bfloat16), initial=-np.inf)) == 0.0
        with shardc.enable_x64():
            assert float(jnp.max(jnp.zeros(3, np.float32), initial=-np.inf)) == 0.0
            assert float(jnp.min(jnp.zeros(3, np.float32), initial=np.inf)) == 0.0
            out = shardc.nn.dot_product_attention(
                jnp.zeros((5, 6, 11), np.float64), jnp.zeros((7, 3, 11), np.float64),
                jnp.zeros((7, 3, 11), np.float64), mask=jnp.arange(7) <= 3)
            assert out.dtype == np.float64 and out.shape == (5, 6, 11)


def test_top_level_flag_context_managers():
    assert shardc.enable_x64.value is False
    with shardc.enable_x64(True):
        assert jnp.arange(2).dtype == np.int64 and shardc.enable_x64.value is True
        with shardc.enable_x64(False):
            assert jnp.arange(2).dtype == np.int32
        assert config.jax_enable_x64 is True
    assert jnp.arange(2).dtype == np.int32
    with shardc.debug_nans():                     # a bool flag's value defaults to True
        with pytest.raises(FloatingPointError, match="encountered in sqrt"):
            jnp.sqrt(jnp.asarray(-1.0))
    assert shardc.debug_nans.value is False
    with shardc.checking_leaks():                 # JAX's check_tracer_leaks(True)
        assert config.jax_check_tracer_leaks is True
    assert config.jax_check_tracer_leaks is False
    with shardc.default_matmul_precision("float32"):
        assert config.jax_default_matmul_precision == "float32"
    assert config.jax_default_matmul_precision is None
    with pytest.raises(TypeError, match=r"jax_default_matmul_precision\(\) needs the value"):
        shardc.default_matmul_precision()
    assert config.jax_numpy_dtype_promotion == "standard"


def test_device_and_thread_counts_take_ascii_digits_only(monkeypatch):
    from runtime.devices import environment_device_count
    from runtime.vectorized_rules import threads
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    monkeypatch.setenv("SHARDC_NUM_DEVICES", "\uff18")           # a full-width 8
    with pytest.raises(ValueError, match="SHARDC_NUM_DEVICES must ask for a positive number"):
        environment_device_count()
    monkeypatch.setenv("SHARDC_NUM_DEVICES", " 4 ")
    assert environment_device_count() == 4
    monkeypatch.delenv("SHARDC_NUM_DEVICES")
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=\uff18")
    assert environment_device_count() == 8                       # not read: the default
    monkeypatch.setenv("SHARDC_THREADS", "\uff12")
    with pytest.raises(ValueError, match="SHARDC_THREADS='\uff12': expected a positive number"):
        threads()
    monkeypatch.setenv("SHARDC_THREADS", "3")
    assert threads() == 3


def test_x64_arrays_with_python_numbers_stay_typed():
    """An int64 (float64) array times a Python number is a typed int64 (float64), as JAX's:
    it was weak, so adding an int32 array then computed in int32 and overflowed."""
    config.update("jax_enable_x64", True)
    x = jnp.array([10_000_000_000, 3])
    y = x * 1 + jnp.arange(2, dtype=jnp.int32)
    assert y.dtype == np.int64 and np.asarray(y).tolist() == [10_000_000_000, 4]
    f = jnp.array([1.0000000001, 2.0]) * 1.0 + jnp.zeros(2, jnp.float32)
    assert f.dtype == np.float64 and np.asarray(f)[0] == 1.0000000001
    assert str(shardc.typeof(jnp.arange(4) * 2)) == "int64[4]"
    assert str(shardc.typeof(jnp.float64(2) * 3.0)) == "float64[]"
    assert str(shardc.typeof(jnp.asarray(2.0) * 3.0)) == "~float64[]"


def test_key_reuse_checker_off_is_accepted_on_is_refused():
    """jax.debug_key_reuse(False) (JAX's tests turn its checker off) runs; asking for the
    checker, which shardc does not have, is refused rather than quietly not checking."""
    with shardc.debug_key_reuse(False):
        assert config.jax_debug_key_reuse is False
    with pytest.raises(NotImplementedError, match="no checker of PRNG keys used twice"):
        config.update("jax_debug_key_reuse", True)
    assert config.jax_debug_key_reuse is False


def _fake_absl():
    """A stand-in for absl (not a dependency): DEFINE_* record flags, FLAGS(argv) parses
    ``--name=value``, ``--name`` and ``--noname``, app.call_after_init keeps its callback."""
    import types as _types

    class _Flag:
        def __init__(self, kind, name, default):
            self.kind, self.name, self.value, self.present = kind, name, default, False

    class _Flags(dict):
        def __call__(self, argv, known_only=False):
            for arg in argv[1:]:
                name, _, text = arg[2:].partition("=")
                flag = self.get(name) or self.get(name[2:])
                if flag is None:
                    continue
                if flag.kind is bool:
                    flag.value = text.lower() in ("", "true", "1") and flag.name == name
                else:
                    flag.value = flag.kind(text)
                flag.present = True
            return argv

    flags = _types.ModuleType("absl.flags")
    flags.FLAGS = _Flags()
    for kind, suffix in ((bool, "bool"), (int, "integer"), (float, "float"), (str, "string")):
        def define(name, default, help, kind=kind):
            flags.FLAGS[name] = _Flag(kind, name, default)
        setattr(flags, f"DEFINE_{suffix}", define)
    app = _types.ModuleType("absl.app")
    app.after_init = []
    app.call_after_init = app.after_init.append
    absl = _types.ModuleType("absl")
    absl.flags, absl.app = flags, app
    return {"absl": absl, "absl.flags": flags, "absl.app": app}


def test_config_with_absl_defines_the_options_and_parse_flags_reads_the_command_line(
        monkeypatch):
    """JAX's config_with_absl / parse_flags_with_absl: each option is an absl flag of its
    type; parse_flags_with_absl takes the --jax arguments before '--', once."""
    import sys
    fake = _fake_absl()
    for name, module in fake.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(sys, "argv", ["prog", "--jax_enable_x64=true", "--other",
                                      "--jax_numpy_rank_promotion=raise", "--",
                                      "--jax_log_compiles"])
    config = shardc.config
    try:
        config.parse_flags_with_absl()
        flags = fake["absl.flags"].FLAGS
        assert flags["jax_enable_x64"].kind is bool and flags["jax_num_cpu_devices"].kind is int
        assert config.jax_enable_x64 is True and config.jax_numpy_rank_promotion == "raise"
        assert config.jax_log_compiles is False               # after '--': not JAX's
        assert shardc.numpy.arange(3.).dtype == np.float64
        config.parse_flags_with_absl()                       # once: nothing defined twice
    finally:
        config.__dict__.pop("_absl_configured", None)
        config.update("jax_enable_x64", False)
        config.update("jax_numpy_rank_promotion", "allow")


def test_config_with_absl_needs_absl(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "absl", None)
    with pytest.raises(ImportError):
        shardc.config.config_with_absl()


# --- jax_log_compiles ------------------------------------------------------------------------

def test_log_compiles_logs_each_trace_and_lowering_at_warning(caplog):
    """As JAX's: one record per tracing and per compilation of a signature, at WARNING while
    the flag is on (DEBUG otherwise); a cached call logs nothing."""
    f = shardc.jit(lambda x, y: x * y)
    with caplog.at_level("DEBUG"):
        f(jnp.ones(2), 2.0)
    assert caplog.records and all(r.levelname == "DEBUG" for r in caplog.records)
    caplog.clear()
    with shardc.log_compiles(), caplog.at_level("WARNING"):
        f(jnp.ones(3), 2.0)
        f(jnp.ones(3), 2.0)
    messages = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(messages) == 3, messages
    assert messages[0].startswith("Finished tracing <lambda> for jit in ")
    assert messages[1] == ("Compiling jit(<lambda>) with global shapes and types "
                           "(ShapedArray(float32[3]), ShapedArray(float32[], weak_type=True)). "
                           "Argument mapping: (UnspecifiedValue, UnspecifiedValue).")
    assert messages[2].startswith("Finished partitioning and lowering jit(<lambda>) in ")
    caplog.clear()
    with caplog.at_level("WARNING"):
        f(jnp.ones(5), 2.0)                 # the flag is off again
    assert not caplog.records


# --- jax_explain_cache_misses ------------------------------------------------------------------

def _misses(caplog, call) -> list:
    """The cache-miss explanations ``call()`` logs while the flag is on."""
    caplog.clear()
    with shardc.explain_cache_misses(True), caplog.at_level("WARNING"):
        call()
    return [r.getMessage() for r in caplog.records
            if r.levelname == "WARNING" and "TRACING CACHE MISS" in r.getMessage()]


def _closest(message: str) -> list:
    """The lines after the header and the function's line."""
    lines = message.split("\n")
    assert lines[2] == "  all previously seen cache keys differ. For the closest previous key:"
    return lines[3:]


def test_explain_cache_misses_first_miss_names_call_site_and_function(caplog):
    """As JAX's: one WARNING at the first trace, naming where the call is (file, line, the
    calling function) and where the function is defined; a cached call logs nothing, nor does
    a trace while the flag is off."""
    def double(x):
        return x * 2
    f = shardc.jit(double)
    defined = double.__code__.co_firstlineno
    line = sys._getframe().f_lineno + 1
    messages = _misses(caplog, lambda: (f(np.float32(1)), f(np.float32(1))))
    column = linecache.getline(__file__, line).index("f(np")     # where the first call starts
    assert messages == [
        f"TRACING CACHE MISS at {__file__}:{line}:{column} (<lambda>):\n"
        f"  never seen function:\n    double id={id(double)} defined at {__file__}:{defined}"]
    caplog.clear()
    with caplog.at_level("WARNING"):
        f(np.ones(3, np.float32))
    assert not caplog.records


def test_explain_cache_misses_different_types(caplog):
    f = shardc.jit(lambda x, y: x + y)
    f(np.float32(0), np.float32(1))
    (dtype,) = _misses(caplog, lambda: f(np.float32(0), np.int32(1)))
    assert _closest(dtype) == ["  different input types:", "  * at y, now i32[] and before f32[]"]
    (weak,) = _misses(caplog, lambda: f(0.0, np.float32(1)))
    assert _closest(weak) == [
        "  different input types:",
        "  * at x, now f32[]{weak_type=True} and before f32[]{weak_type=False}",
        "  see https://docs.jax.dev/en/latest/type_promotion.html#weak-types"]
    f(np.ones((10, 20, 30), np.float32), np.float32(1))
    f(np.ones((1, 2, 3), np.float32), np.float32(1))
    # of the keys differing in one argument's type, the closest shape explains
    (shape,) = _misses(caplog, lambda: f(np.ones((10, 2, 30), np.float32), np.float32(1)))
    assert _closest(shape) == ["  different input types:",
                               "  * at x, now f32[10,2,30] and before f32[10,20,30]"]


def test_explain_cache_misses_different_pytree_and_static_values(caplog):
    f = shardc.jit(lambda *args, **kwargs: args[0])
    f(0., 1., y=(2., 2.1))
    (tree,) = _misses(caplog, lambda: f(0., (1., 1.1), y=2.))
    assert _closest(tree) == [
        "  different input pytree:",
        "  * at input path [0][1], now <class 'tuple'> and before pytree leaf, so their "
        "Python types differ",
        "  * at input path [1]['y'], now pytree leaf and before <class 'tuple'>, so their "
        "Python types differ"]
    g = shardc.jit(lambda x, y, z, *, w: y, static_argnums=(0, 2), static_argnames="w")
    g(1., 2., "foo", w=3)
    (static,) = _misses(caplog, lambda: g(1., 2., "bar", w=4))
    assert _closest(static) == [
        "  different value of static args:", "  * now 1.0, 'bar' and before 1.0, 'foo'",
        "  different value of static kwargs:", "  * now {w: 4} and before {w: 3}"]


def test_explain_cache_misses_tracing_context(caplog):
    """Rank promotion and matmul precision are part of the tracing context, as in JAX: a
    trace made under other values is not reused (it would skip the rank check)."""
    traced = []
    f = shardc.jit(lambda x, y: traced.append(1) or x + y)
    f(np.ones(3, np.float32), np.float32(1))
    def call():
        with shardc.numpy_rank_promotion("warn"), shardc.default_matmul_precision("high"):
            f(np.ones(3, np.float32), np.float32(1))
    (message,) = _misses(caplog, call)
    assert len(traced) == 2
    assert _closest(message) == [
        "  Tracing context doesn't match, e.g. due to config or context manager.",
        "  * jax_default_matmul_precision differs: now high and before None",
        "  * jax_numpy_rank_promotion differs: now warn and before allow"]
    f(np.ones(3, np.float32), np.float32(1))        # back at the defaults: the first trace
    assert len(traced) == 2


def test_explain_cache_misses_function_redefined_on_one_line(caplog):
    messages = _misses(caplog, lambda: [shardc.jit(lambda x: 2 * x)(3) for _ in range(2)])
    assert len(messages) == 2
    assert "never seen function" in messages[0]
    assert "another function defined on the same line" not in messages[0]
    assert messages[1].endswith(
        "  but seen another function defined on the same line; maybe the function is\n"
        "  being re-defined repeatedly, preventing caching?")


def test_explain_cache_misses_skips_shardc_functions_and_needs_no_source(caplog):
    assert not _misses(caplog, lambda: [jnp.sin(jnp.arange(i + 1, dtype=np.float32))
                                        for i in range(2)])
    import operator
    (message,) = _misses(caplog, lambda: shardc.jit(operator.add)(42, 24))
    assert message.endswith(f"  never seen function:\n    add id={id(operator.add)}")


def test_explain_cache_misses_of_a_nested_jit(caplog):
    """A jitted function called while another is traced explains its miss at its call."""
    inner = shardc.jit(lambda x: x + 1)
    def outer(x):
        return inner(x) * 2
    inner(np.float32(1))
    line = outer.__code__.co_firstlineno + 1
    messages = _misses(caplog, lambda: shardc.jit(outer)(np.ones(2, np.float32)))
    assert len(messages) == 2
    column = linecache.getline(__file__, line).index("inner(x)")
    assert messages[1].startswith(f"TRACING CACHE MISS at {__file__}:{line}:{column} (outer):\n")
    assert _closest(messages[1]) == ["  different input types:",
                                     "  * at x, now f32[2] and before f32[]"]


def test_rank_promotion_is_warned_of_or_refused_in_the_users_operations():
    import warnings
    import shardc.numpy as jnp
    a, b = jnp.ones(2), jnp.ones((3, 2))
    message = "for {} on shapes (2,) (3, 2)"
    with shardc.numpy_rank_promotion("raise"):
        for op, name in [(lambda: a + b, "add"), (lambda: a * b, "multiply"),
                         (lambda: a // b, "floor_divide"), (lambda: a % b, "remainder"),
                         (lambda: jnp.maximum(a, b), "maximum"),
                         (lambda: shardc.jit(lambda u, v: u - v)(a, b), "subtract")]:
            with pytest.raises(ValueError, match=re.escape(
                    "Operands could not be broadcast together " + message.format(name)
                    + " and with the config option jax_numpy_rank_promotion='raise'.")):
                op()
        # scalars are no promotion; jnp.where broadcasts ranks as JAX's does; library
        # functions broadcast their own operands whatever the option says
        assert (a + 3).shape == (2,) and (b * jnp.float32(2)).shape == (3, 2)
        assert jnp.where(b > 0, a, b).shape == (3, 2)
        assert jnp.quantile(b, 0.5, axis=0).shape == (2,) and jnp.cov(b).shape == (3, 3)
    with shardc.numpy_rank_promotion("warn"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert (a + b).shape == (3, 2)
    assert [str(w.message).split(".")[0] for w in caught] == [
        "Following NumPy automatic rank promotion " + message.format("add")]
    assert (a + b).shape == (3, 2)            # 'allow', the default
