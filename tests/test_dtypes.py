"""ML dtypes (bfloat16, float16, the float8 family, int4): promotion on JAX's lattice, dtype
queries, IR text, every collective and gradients.

References: JAX's promotion table written out by hand (jax.numpy type promotion docs), numpy
on ml_dtypes for values (a collective's result is the numpy reduction of the member blocks in
rank order, in the operands' dtype), and the float64 function with finite differences for
gradients.
"""
from __future__ import annotations

import functools
import os

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shardc
import shardc.numpy as jnp
from shardc import lax
from shardc.sharding import PartitionSpec as P
from ir.parser import parse_module, parse_program
from ir.printer import print_module, print_program

BF16 = np.dtype(ml_dtypes.bfloat16)
F8 = np.dtype(ml_dtypes.float8_e4m3fn)
F8_E5 = np.dtype(ml_dtypes.float8_e5m2)
I4 = np.dtype(ml_dtypes.int4)
F16, F32, I8, I32, U8, U32, C64 = (np.dtype(n) for n in (
    "float16", "float32", "int8", "int32", "uint8", "uint32", "complex64"))


# --- promotion ---------------------------------------------------------------------------------

# (a, b, JAX's result with x64 off); Python's int/float/complex are weak.
JAX_TABLE = [
    (BF16, F32, F32), (BF16, F16, F32), (BF16, BF16, BF16), (BF16, I8, BF16),
    (BF16, U8, BF16), (BF16, I32, BF16), (BF16, np.dtype(bool), BF16), (BF16, int, BF16),
    (BF16, float, BF16), (BF16, complex, C64), (BF16, C64, C64), (F16, F32, F32),
    (F16, I32, F16), (F16, float, F16), (F8, float, F8), (F8, int, F8), (F8, I32, F8),
    (F8, F8, F8), (U8, int, U8), (I8, U8, np.dtype("int16")), (U32, I32, I32),
    (I32, F32, F32), (I32, float, F32), (int, float, F32), (I4, int, I4), (I4, I4, I4),
    (np.dtype("float64"), BF16, F32),
]


@pytest.mark.parametrize("a,b,want", JAX_TABLE, ids=lambda v: getattr(v, "__name__", str(v)))
def test_promote_types_follows_jax_table(a, b, want):
    assert jnp.promote_types(a, b) == want
    assert jnp.promote_types(b, a) == want


@pytest.mark.parametrize("a,b", [(F8, F32), (F8, F8_E5), (F8, BF16), (F8, F16),
                                 (I4, I8), (I4, F32)])
def test_small_types_have_no_implicit_promotion(a, b):
    with pytest.raises(shardc.dtypes.TypePromotionError,
                       match=r"Input dtypes \(.*\) have no available implicit dtype promotion "
                             r"path\. To avoid unintended promotion, (8-bit floats|2- and "
                             r"4-bit integers) do not support implicit promotion"):
        jnp.promote_types(a, b)
    x = jnp.zeros(3, a)
    with pytest.raises(ValueError, match="no available implicit dtype promotion path"):
        x + jnp.zeros(3, b)


STRONG = [np.dtype(n) for n in ("bool", "int8", "int16", "int32", "uint8", "uint16",
                                "uint32", "float16", "float32", "complex64")] + [BF16]


@settings(derandomize=True, deadline=None, max_examples=60)
@given(st.sampled_from(STRONG), st.sampled_from(STRONG), st.sampled_from(STRONG))
def test_promotion_is_a_join(a, b, c):
    """Commutative, associative, idempotent, and an upper bound of both sides."""
    ab = jnp.promote_types(a, b)
    assert ab == jnp.promote_types(b, a)
    assert jnp.promote_types(a, a) == a
    assert jnp.promote_types(ab, c) == jnp.promote_types(a, jnp.promote_types(b, c))
    assert jnp.promote_types(ab, a) == ab and jnp.promote_types(ab, b) == ab


def test_operations_promote_as_jax():
    x = jnp.ones(4, jnp.bfloat16)
    assert (x + 1.5).dtype == BF16                      # weak float keeps bfloat16
    assert (x * 2).dtype == BF16
    assert (x + jnp.ones(4)).dtype == F32               # float32 array wins
    assert (x + jnp.ones(4, jnp.float16)).dtype == F32  # bf16 and f16 meet at f32
    assert (x + jnp.arange(4)).dtype == BF16            # int32 array: the float type
    assert jnp.result_type(x, 2.0) == BF16
    assert jnp.result_type(jnp.int8, int) == I8 and jnp.result_type(float) == F32
    np.testing.assert_array_equal(np.asarray(x + 1.5), np.full(4, 2.5, BF16))


# --- dtype queries -----------------------------------------------------------------------------

def test_dtype_names_are_ml_dtypes_types():
    for name in ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
                 "float8_e5m2fnuz", "float8_e4m3b11fnuz", "float8_e3m4", "float8_e4m3",
                 "float8_e8m0fnu", "float4_e2m1fn", "int4", "uint4"):
        # jnp's names are JAX's scalar types: usable as dtypes, and called, 0-d arrays
        assert np.dtype(getattr(jnp, name)) == np.dtype(getattr(ml_dtypes, name))
        assert getattr(jnp, name) == getattr(ml_dtypes, name)
    assert shardc.dtypes.bfloat16 is ml_dtypes.bfloat16
    assert jnp.dtype(jnp.bfloat16) == BF16 and jnp.float16 == np.float16
    assert jnp.bfloat16(1.5).dtype == BF16 and jnp.bfloat16(1.5).shape == ()


def test_finfo_and_iinfo():
    assert jnp.finfo(jnp.bfloat16).eps == 2.0 ** -7
    assert jnp.finfo(jnp.bfloat16).bits == 16
    assert float(jnp.finfo(jnp.float8_e4m3fn).max) == 448.0
    assert float(jnp.finfo(jnp.float8_e5m2).max) == 57344.0
    assert jnp.finfo(jnp.ones(2, jnp.bfloat16)).dtype == BF16      # an array's dtype
    assert jnp.finfo(jnp.float32).eps == np.finfo(np.float32).eps
    assert (jnp.iinfo(jnp.int4).min, jnp.iinfo(jnp.int4).max) == (-8, 7)
    assert jnp.iinfo(jnp.int32).max == 2 ** 31 - 1


@pytest.mark.parametrize("t,parent,want", [
    (jnp.bfloat16, jnp.floating, True), (jnp.bfloat16, jnp.inexact, True),
    (jnp.float8_e4m3fn, jnp.floating, True), (jnp.bfloat16, jnp.integer, False),
    (jnp.int4, jnp.signedinteger, True), (jnp.uint4, jnp.unsignedinteger, True),
    (jnp.uint4, jnp.signedinteger, False), (jnp.float32, jnp.floating, True),
    (jnp.int32, jnp.floating, False), (BF16, jnp.bfloat16, True), (jnp.bfloat16, jnp.float16,
                                                                     False),
])
def test_issubdtype_files_ml_types_as_jax(t, parent, want):
    assert jnp.issubdtype(t, parent) is want


@pytest.mark.parametrize("t,parent,want", [
    # an abstract type has no dtype: numpy's hierarchy answers (JAX's)
    (np.generic, jnp.bfloat16, False), (np.generic, np.float32, False),
    (np.floating, np.inexact, True), (np.generic, np.generic, True),
])
def test_issubdtype_of_abstract_types(t, parent, want):
    assert shardc.dtypes.issubdtype(t, parent) is want


def test_result_type_reads_none_as_the_default_float():
    assert shardc.dtypes.result_type(None) == np.float32 == jnp.result_type(None)
    assert shardc.dtypes.result_type(None, return_weak_type_flag=True) == (np.float32, False)
    assert jnp.result_type(None, jnp.int8) == np.float32


def test_astype_round_trips_through_ml_types():
    values = np.array([0.5, -1.25, 3.0, 448.0], np.float32)
    for dtype in (BF16, F8, F8_E5, F16):
        x = jnp.asarray(values).astype(dtype)
        assert x.dtype == dtype
        np.testing.assert_array_equal(np.asarray(x), values.astype(dtype))
        back = shardc.jit(lambda v: v.astype(jnp.float32))(x)
        np.testing.assert_array_equal(np.asarray(back), values.astype(dtype).astype(np.float32))


def test_reductions_of_half_floats_compute_in_float32():
    """jnp.sum/mean/var of bfloat16 accumulate in float32 and round once, as JAX's do."""
    values = np.full(1000, 0.1, np.float32).astype(BF16)
    x = jnp.asarray(values)
    total = jnp.sum(x)
    assert total.dtype == BF16
    assert np.asarray(total) == np.float32(values.astype(np.float32).sum()).astype(BF16)
    assert np.asarray(total) != np.add.reduce(values)     # a bf16 running sum stalls at 32
    assert jnp.mean(x).dtype == BF16 and jnp.var(x).dtype == BF16
    np.testing.assert_allclose(float(jnp.mean(x)), 0.1, rtol=1e-2)
    text = str(shardc.make_jaxpr(jnp.sum)(x))
    assert "convert_element_type[new_dtype=float32]" in text and "c:f32[] = reduce_sum" in text
    stepwise = shardc.make_jaxpr(lambda v: jnp.sum(v, dtype=jnp.bfloat16))(x)   # as asked
    assert "b:bf16[] = reduce_sum" in str(stepwise) and "float32" not in str(stepwise)


def test_bf16_matmul_accumulates_in_float32():
    """A bf16 dot rounds once, like an f32-accumulated product (XLA's on CPU), not per step."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 512)).astype(BF16)
    b = rng.standard_normal((512, 3)).astype(BF16)
    want = (a.astype(np.float32) @ b.astype(np.float32)).astype(BF16).astype(np.float32)
    stepwise = np.array([[functools.reduce(lambda s, t: (s + t).astype(BF16), a[i] * b[:, j])
                          for j in range(3)] for i in range(4)], np.float32)
    assert np.abs(stepwise - want).max() > 0.05            # per-step rounding is visibly off
    einsum = functools.partial(jnp.einsum, "ij,jk->ik")
    batched = lambda x, y: jnp.matmul(x[None], y[None])[0]
    for run in (jnp.dot, shardc.jit(jnp.dot), einsum, shardc.jit(batched)):
        got = run(jnp.asarray(a), jnp.asarray(b))
        assert got.dtype == BF16
        np.testing.assert_allclose(np.asarray(got, np.float32), want, rtol=2 ** -7)


# --- IR text -----------------------------------------------------------------------------------

def test_types_print_short_and_parse_back():
    def f(x, y):
        z = (x * 2).astype(jnp.float8_e4m3fn)
        return z.astype(jnp.bfloat16) + y, jnp.asarray(3, jnp.int4)

    x = jnp.ones(4, jnp.bfloat16)
    y = jnp.ones(4, jnp.bfloat16)
    program = shardc.make_jaxpr(f)(x, y)
    text = str(program)
    # the int4 scalar made while tracing is inlined, as JAX's jaxprs inline it
    assert "{ lambda ; a:bf16[4] b:bf16[4]. let" in text and "in (f, 3:i4[]) }" in text
    assert "d:f8_e4m3fn[4] = convert_element_type[new_dtype=float8_e4m3fn] c" in text
    assert "mul a 2.0:bf16[]" in text
    assert print_program(parse_program(text)) == text


def test_lowered_bf16_module_round_trips():
    mesh = shardc.make_mesh((4, 2), ("x", "y"))
    f = shardc.shard_map(lambda a: lax.psum(a * 0.5, "x"), mesh=mesh, in_specs=P("x", "y"),
                         out_specs=P(None, "y"))
    compiled = shardc.jit(f).lower(jnp.ones((8, 4), jnp.bfloat16))
    text = print_module(compiled.module)
    assert "bf16[2,2]{x,y}" in text and "all_reduce" in text
    assert print_module(parse_module(text)) == text


# --- collectives -------------------------------------------------------------------------------

MESH = (4, 2)
NAMES = ("x", "y")


def positions():
    return [(i, j) for i in range(MESH[0]) for j in range(MESH[1])]


def groups(axis):
    """Member positions (row-major ids) of each group over ``axis``, in rank order."""
    if axis == "x":
        return [[i * MESH[1] + j for i in range(MESH[0])] for j in range(MESH[1])]
    return [[i * MESH[1] + j for j in range(MESH[1])] for i in range(MESH[0])]


def ref_collective(blocks, axis, rule):
    out = [None] * len(blocks)
    for group in groups(axis):
        results = rule([blocks[p] for p in group])
        for p, r in zip(group, results):
            out[p] = r
    return out


def rank_order(fn, xs):
    return functools.reduce(fn, xs)


def summed(xs):
    """The rank-order sum as XLA's CPU all-reduce gives it: bfloat16 added in float32 and
    rounded once, other dtypes added in their own."""
    if xs[0].dtype == BF16:
        return rank_order(np.add, [x.astype(np.float32) for x in xs]).astype(BF16)
    return rank_order(np.add, xs)


def mean(xs):
    if xs[0].dtype == BF16:
        wide = rank_order(np.add, [x.astype(np.float32) for x in xs])
        return (wide / np.float32(len(xs))).astype(BF16)
    return rank_order(np.add, xs) / xs[0].dtype.type(len(xs))


REFS = {
    "psum": (lambda a: lax.psum(a, "x"), "x", lambda xs: [summed(xs)] * len(xs)),
    "pmean": (lambda a: lax.pmean(a, "y"), "y", lambda xs: [mean(xs)] * len(xs)),
    "pmax": (lambda a: lax.pmax(a, "x"), "x",
             lambda xs: [rank_order(np.maximum, xs)] * len(xs)),
    "pmin": (lambda a: lax.pmin(a, "y"), "y",
             lambda xs: [rank_order(np.minimum, xs)] * len(xs)),
    "all_gather": (lambda a: lax.all_gather(a, "x", axis=1, tiled=True), "x",
                   lambda xs: [np.concatenate(xs, 1)] * len(xs)),
    "psum_scatter": (lambda a: lax.psum_scatter(a, "x", scatter_dimension=1, tiled=True), "x",
                     lambda xs: np.split(summed(xs), len(xs), 1)),
    "ppermute": (lambda a: lax.ppermute(a, "x", [(0, 2), (2, 1), (1, 3), (3, 0)]), "x",
                 lambda xs: [xs[3], xs[2], xs[0], xs[1]]),
    "all_to_all": (lambda a: lax.all_to_all(a, "x", 1, 0, tiled=True), "x",
                   lambda xs: [np.concatenate([np.split(x, 4, 1)[d] for x in xs], 0)
                               for d in range(4)]),
    "pbroadcast": (lambda a: lax.pbroadcast(a, "y", source=1), "y",
                   lambda xs: [xs[1]] * len(xs)),
}


@pytest.mark.parametrize("dtype", [BF16, F16, F8], ids=lambda d: d.name)
@pytest.mark.parametrize("name", sorted(REFS))
def test_collectives_reduce_in_the_dtype(name, dtype):
    """Each device's block equals numpy's rank-order result on the member blocks in the
    operands' dtype (no widening; bfloat16 sums in float32, rounded once, as XLA's CPU
    all-reduce), bit for bit, eagerly and under jit."""
    collective, axis, rule = REFS[name]
    rng = np.random.default_rng(7)
    blocks = [(rng.standard_normal((2, 4)) * 3).astype(dtype) for _ in positions()]
    expected = ref_collective(blocks, axis, rule)
    mesh = shardc.make_mesh(MESH, NAMES)
    spec = P(("x", "y"))

    def body(a):
        out = collective(a)
        return jnp.reshape(out, (1,) + tuple(out.shape))

    f = shardc.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False)
    x = jnp.asarray(np.concatenate(blocks, 0))
    for run in (f, shardc.jit(f)):
        got = run(x)
        assert got.dtype == dtype
        want = np.stack(expected)
        assert want.dtype == dtype
        np.testing.assert_array_equal(np.asarray(got).view(np.uint8), want.view(np.uint8))


# --- gradients ---------------------------------------------------------------------------------

def _sharded_loss(dtype):
    mesh = shardc.make_mesh(MESH, NAMES)

    @functools.partial(shardc.shard_map, mesh=mesh, in_specs=(P("x", "y"), P("y", None)),
                       out_specs=P())
    def loss_blocks(a, w):
        h = jnp.tanh(lax.psum(jnp.dot(a, w), "y"))                  # (2, 3) on each x
        g = lax.all_gather(h, "x", tiled=True)                       # (8, 3)
        return lax.pmean(jnp.sum(g * g).astype(dtype), ("x", "y"))

    return loss_blocks


def test_gradients_of_bf16_programs_are_bf16():
    rng = np.random.default_rng(3)
    a64 = rng.standard_normal((8, 4)) * 0.5
    w64 = rng.standard_normal((4, 3)) * 0.5
    a, w = (jnp.asarray(v.astype(BF16)) for v in (a64, w64))
    loss = _sharded_loss(BF16)
    ga, gw = shardc.grad(loss, argnums=(0, 1))(a, w)
    assert ga.dtype == BF16 and gw.dtype == BF16
    assert ga.shape == (8, 4) and gw.shape == (4, 3)
    gja, gjw = shardc.jit(shardc.grad(loss, argnums=(0, 1)))(a, w)
    assert gja.dtype == BF16 and gjw.dtype == BF16

    # the float64 function at the same (bf16-rounded) point, by central differences
    a_r, w_r = a64.astype(BF16).astype(np.float64), w64.astype(BF16).astype(np.float64)

    def ref_loss(av, wv):
        return np.sum(np.tanh(av @ wv) ** 2)

    def numeric(fn, v, eps=1e-5):
        out = np.zeros_like(v)
        for k in np.ndindex(v.shape):
            up, down = v.copy(), v.copy()
            up[k] += eps
            down[k] -= eps
            out[k] = (fn(up) - fn(down)) / (2 * eps)
        return out

    want_a = numeric(lambda v: ref_loss(v, w_r), a_r)
    want_w = numeric(lambda v: ref_loss(a_r, v), w_r)
    for got in (ga, gja):
        np.testing.assert_allclose(np.asarray(got, np.float64), want_a, rtol=0.08, atol=0.08)
    for got in (gw, gjw):
        np.testing.assert_allclose(np.asarray(got, np.float64), want_w, rtol=0.08, atol=0.15)


def test_vjp_cotangent_dtypes_follow_primals():
    x = jnp.ones(4, jnp.bfloat16)
    y = jnp.ones(4, jnp.float32)
    out, vjp = shardc.vjp(lambda a, b: a.astype(jnp.float32) * b, x, y)
    assert out.dtype == F32
    ca, cb = vjp(jnp.ones(4, jnp.float32))
    assert ca.dtype == BF16 and cb.dtype == F32
    _, tangent = shardc.jvp(lambda a: a * a, (x,), (jnp.ones(4, jnp.bfloat16),))
    assert tangent.dtype == BF16
    np.testing.assert_array_equal(np.asarray(tangent), np.full(4, 2, BF16))


@pytest.mark.parametrize("name", sorted(set(REFS) - {"pmax", "pmin", "pbroadcast"}))
def test_gradients_through_each_collective_keep_bf16(name):
    """The cotangent of a bf16 input is bf16 and matches the same program's float32 gradient
    to bf16 precision."""
    collective = REFS[name][0]
    mesh = shardc.make_mesh(MESH, NAMES)
    spec = P(("x", "y"))
    rng = np.random.default_rng(11)
    x32 = rng.standard_normal((16, 4)).astype(np.float32)

    def loss(x):
        f = shardc.shard_map(lambda a: jnp.reshape(collective(a * a), (1, -1)), mesh=mesh,
                             in_specs=spec, out_specs=spec, check_vma=False)
        out = f(x)
        weights = (jnp.arange(out.size).reshape(out.shape) % 7 + 1).astype(x.dtype) * 0.25
        return jnp.sum(out * weights)

    g16 = shardc.grad(loss)(jnp.asarray(x32.astype(BF16)))
    g32 = shardc.grad(loss)(jnp.asarray(x32.astype(BF16).astype(np.float32)))
    assert g16.dtype == BF16 and g32.dtype == F32 and g16.shape == (16, 4)
    scale = float(np.abs(np.asarray(g32)).max())
    np.testing.assert_allclose(np.asarray(g16, np.float32), np.asarray(g32),
                               rtol=2 ** -6, atol=scale * 2 ** -7)


def test_command_line_reads_ml_types(capsys):
    from shardc.cli import main, parse_arg_types
    structs = parse_arg_types("bf16[8,16],f8_e4m3fn[4],i4[2]")
    assert [(s.shape, s.dtype) for s in structs] == [((8, 16), BF16), ((4,), F8), ((2,), I4)]
    programs = os.path.join(os.path.dirname(__file__), "cli_programs", "programs.py")
    assert main(["lower", f"{programs}:matmul_basic", "--args", "bf16[8,16],bf16[16,4]",
                 "--device", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("types on Mesh('x': 4, 'y': 2, axis_types=(Explicit, Explicit)):\n"
                          "{ lambda ; a:bf16[8,16] b:bf16[16,4]. let")
    assert "bf16[2,4]{x} = all_reduce[device_groups=((0, 1), (2, 3), (4, 5), (6, 7))" in out


def test_canonicalize_dtype_keeps_float0():
    """float0 (an integer input's tangent dtype) is its own canonical dtype in JAX."""
    assert shardc.dtypes.canonicalize_dtype(shardc.dtypes.float0) == shardc.dtypes.float0
    assert shardc.dtypes.canonicalize_dtype(np.float64) == np.float32
    with pytest.raises(TypeError, match="not a valid JAX type"):
        shardc.dtypes.canonicalize_dtype(np.dtype("U3"))


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16])
def test_rsqrt_of_narrow_floats_rounds_once(dtype):
    # XLA computes a narrow float's rsqrt in float32 and rounds once; a square root rounded to
    # bfloat16 and then divided rounds twice (6.65625 -> 0.388672 instead of 0.386719)
    x = (np.abs(np.random.default_rng(0).standard_normal(400)) * 30 + 0.01).astype(dtype)
    x[:2] = [6.65625, 0.30078125]
    want = (1 / np.sqrt(x.astype(np.float64))).astype(dtype)
    for run in (lax.rsqrt, shardc.jit(lax.rsqrt)):
        got = np.asarray(run(jnp.asarray(x)))
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got, want)
    if dtype is ml_dtypes.bfloat16:
        np.testing.assert_array_equal(np.asarray(lax.rsqrt(jnp.asarray(x[:2]))).astype(np.float32),
                                      np.array([0.38671875, 1.8203125], np.float32))
