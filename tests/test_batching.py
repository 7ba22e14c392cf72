"""vmap: held against the reference semantics ``stack([f(x) for x in xs])`` computed with numpy.

Most cases are written once over a module ``m`` (``shardc.numpy`` or ``numpy``), so the same
code gives the batched result and the plain-numpy per-member reference. Primitive rules are
also checked one by one against a per-member loop, with the batch axis in every position.
"""
from __future__ import annotations

import functools
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

try:
    import shardc
except ImportError:  # run from elsewhere than the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import shardc

import shardc as jax
import shardc.numpy as jnp
from shardc import lax
from shardc.sharding import NamedSharding, PartitionSpec as P
from compiler import batching
from compiler.tracing import bind
from ir import primitives as prims
from ir import collectives as coll

RNG = np.random.default_rng(0)
XS = RNG.standard_normal((5, 3, 4)).astype(np.float32)      # 5 members of shape (3, 4)
YS = RNG.standard_normal((5, 4, 2)).astype(np.float32)
W = RNG.standard_normal((4, 6)).astype(np.float32)


def stacked(f, *member_args):
    """The reference: numpy applied to each member, stacked."""
    return np.stack([np.asarray(f(*args)) for args in zip(*member_args)])


def assert_matches(got, want, dtype=None):
    got = np.asarray(got)
    assert got.shape == want.shape
    if dtype is not None:
        assert got.dtype == np.dtype(dtype)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# --- the tutorial --------------------------------------------------------------------------------

def test_tutorial_check_vmap(capsys):
    def check_vmap(f, xs):
        ans = jax.vmap(f, in_axes=(0,), out_axes=0)(xs)
        expected = jnp.stack([f(x) for x in xs])  # vmap reference semantics
        print(jnp.allclose(ans, expected))

    check_vmap(lambda x: x @ x, jnp.arange(12).reshape(4, 3))
    assert capsys.readouterr().out.strip() == "True"


def test_tutorial_values():
    xs = np.arange(12).reshape(4, 3)
    out = jax.vmap(lambda x: x @ x)(jnp.asarray(xs))
    assert out.shape == (4,)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(out), (xs * xs).sum(1))


# --- one-argument functions of shardc.numpy -------------------------------------------------------

ONE_ARG = {
    "sin": lambda m, x: m.sin(x),
    "affine": lambda m, x: x * 2 + 1,
    "centered": lambda m, x: x - x.mean(),
    "abs_sqrt": lambda m, x: m.sqrt(m.abs(x)),
    "maximum_scalar": lambda m, x: m.maximum(x, 0.25),
    "where": lambda m, x: m.where(x > 0, x, -x),
    "where_scalar_branch": lambda m, x: m.where(x > 0, x, 0.0),
    "pow": lambda m, x: x ** 2,
    "floor_divide": lambda m, x: x // 0.5,
    "compare_to_member": lambda m, x: x > x[0],
    "exp_tanh": lambda m, x: m.exp(m.tanh(x)),
    "clip": lambda m, x: m.clip(x, -0.5, 0.5),
    "astype_int": lambda m, x: (x * 4).astype(m.int32),
    "sum_all": lambda m, x: x.sum(),
    "sum_axis0": lambda m, x: x.sum(axis=0),
    "sum_keepdims": lambda m, x: m.sum(x, axis=1, keepdims=True),
    "max_last": lambda m, x: x.max(axis=-1),
    "min_all": lambda m, x: m.min(x),
    "prod": lambda m, x: m.prod(x, axis=0),
    "mean_keepdims": lambda m, x: m.mean(x, axis=(0, 1), keepdims=True),
    "var": lambda m, x: m.var(x, axis=1),
    "std": lambda m, x: m.std(x),
    "argmax": lambda m, x: m.argmax(x, axis=1),
    "argmin_flat": lambda m, x: m.argmin(x),
    "cumsum": lambda m, x: m.cumsum(x, axis=1),
    "all": lambda m, x: m.all(x > -1.5, axis=0),
    "any": lambda m, x: m.any(x > 1.0),
    "gram": lambda m, x: x @ x.T,
    "dot_const": lambda m, x: m.dot(x, W),
    "const_dot": lambda m, x: m.dot(W.T, x.T),
    "matmul_vec": lambda m, x: x @ x[0],
    "einsum": lambda m, x: m.einsum("ij,kj->ik", x, x),
    "einsum_const": lambda m, x: m.einsum("ij,jk->ki", x, W),
    "tensordot": lambda m, x: m.tensordot(x, W, axes=1),
    "reshape": lambda m, x: x.reshape(2, 6),
    "ravel": lambda m, x: m.ravel(x),
    "transpose": lambda m, x: x.T,
    "swapaxes_3d": lambda m, x: m.swapaxes(x.reshape(3, 2, 2), 0, 2),
    "concatenate": lambda m, x: m.concatenate([x, x * 2], axis=1),
    "concatenate_const": lambda m, x: m.concatenate([W[:3], x], axis=1),
    "stack": lambda m, x: m.stack([x, -x], axis=1),
    "expand_squeeze": lambda m, x: m.squeeze(m.expand_dims(x, 1), 1) + 1,
    "flip": lambda m, x: m.flip(x, axis=1),
    "roll": lambda m, x: m.roll(x, 1, axis=1),
    "tile": lambda m, x: m.tile(x, (2, 1)),
    "repeat": lambda m, x: m.repeat(x, 2, axis=0),
    "broadcast_to": lambda m, x: m.broadcast_to(x[0], (2, 4)),
    "ones_like": lambda m, x: m.ones_like(x) + x,
    "index_int": lambda m, x: x[1],
    "index_slices": lambda m, x: x[:, 1:3],
    "index_reverse": lambda m, x: x[::-1],
    "index_strided": lambda m, x: x[:, ::2],
    "index_point": lambda m, x: x[1, 2],
    "index_int_array": lambda m, x: x[:, np.array([0, 2, 2])],
    "index_newaxis": lambda m, x: x[None, 1],
    "index_ellipsis": lambda m, x: x[..., 0],
    "take": lambda m, x: m.take(x, np.array([2, 0]), axis=1),
    "constant_output": lambda m, x: m.arange(3) * 2,
}


@pytest.mark.parametrize("name", sorted(ONE_ARG))
def test_one_argument_functions(name):
    f = ONE_ARG[name]
    got = jax.vmap(functools.partial(f, jnp))(jnp.asarray(XS))
    want = stacked(functools.partial(f, np), XS)
    member_dtype = np.asarray(f(jnp, jnp.asarray(XS[0]))).dtype
    assert_matches(got, want.astype(member_dtype, copy=False), member_dtype)


# --- traced indices and updates -------------------------------------------------------------------

def at_set_static(m, x):
    return x.at[0].set(5.0) if m is jnp else _np_set(x, 0, 5.0)


def _np_set(x, index, value, mode="set"):
    x = np.array(x, copy=True)
    if mode == "set":
        x[index] = value
    else:
        x[index] += value
    return x


TWO_ARG = {
    # (function over (m, x, i), numpy reference over (x, i)); i is a batched int scalar.
    "dynamic_index": (lambda x, i: x[i], lambda x, i: x[i]),
    "dynamic_index_last_axis": (lambda x, i: x[:, i], lambda x, i: x[:, i]),
    "dynamic_negative": (lambda x, i: x[i - 3], lambda x, i: x[i - 3]),
    "dynamic_set": (lambda x, i: x.at[i].set(7.0), lambda x, i: _np_set(x, i, 7.0)),
    "dynamic_set_point": (lambda x, i: x.at[i, 1].set(-1.0),
                          lambda x, i: _np_set(x, (i, 1), -1.0)),
    "dynamic_add_column": (lambda x, i: x.at[:, i].add(1.0),
                           lambda x, i: _np_set(x, (slice(None), i), 1.0, "add")),
    "roll_traced": (lambda x, i: jnp.roll(x, i, axis=1), lambda x, i: np.roll(x, i, axis=1)),
}


@pytest.mark.parametrize("name", sorted(TWO_ARG))
def test_traced_scalar_index(name):
    f, reference = TWO_ARG[name]
    idx = np.array([0, 2, 1, 2, 0], dtype=np.int32)
    got = jax.vmap(f)(jnp.asarray(XS), jnp.asarray(idx))
    assert_matches(got, stacked(reference, XS, idx))


def test_traced_index_from_the_member():
    f = lambda x: x[jnp.argmax(x[:, 0])]
    got = jax.vmap(f)(jnp.asarray(XS))
    assert_matches(got, stacked(lambda x: x[np.argmax(x[:, 0])], XS))


def test_batched_index_arrays_gather_and_scatter():
    idx = RNG.integers(-3, 3, size=(5, 4)).astype(np.int32)
    xs = jnp.asarray(XS)
    got = jax.vmap(lambda x, i: x[i])(xs, jnp.asarray(idx))
    assert_matches(got, stacked(lambda x, i: x[i], XS, idx))
    got = jax.vmap(lambda x, i: jnp.take(x, i, axis=1))(xs, jnp.asarray(idx))
    assert_matches(got, stacked(lambda x, i: np.take(x, i, axis=1), XS, idx))
    rows = np.array([[0, 2], [1, 1], [2, 0], [0, 0], [1, 2]], dtype=np.int32)
    got = jax.vmap(lambda x, i: x.at[i].set(9.0))(xs, jnp.asarray(rows))
    assert_matches(got, stacked(lambda x, i: _np_set(x, i, 9.0), XS, rows))
    got = jax.vmap(lambda x, i: x.at[:, i].add(1.0))(xs, jnp.asarray(rows))

    def np_add(x, i):
        x = x.copy()
        np.add.at(x, (slice(None), i), 1.0)
        return x
    assert_matches(got, stacked(np_add, XS, rows))


def test_unbatched_operand_with_batched_indices():
    rows = np.array([[0, 2], [1, 1], [2, 0], [0, 0], [1, 2]], dtype=np.int32)
    table = jnp.asarray(W)
    got = jax.vmap(lambda i: table[i], in_axes=0)(jnp.asarray(rows))
    assert_matches(got, np.stack([W[i] for i in rows]))
    got = jax.vmap(lambda i: table.at[i].set(0.0))(jnp.asarray(rows))
    assert_matches(got, np.stack([_np_set(W, i, 0.0) for i in rows]))


def test_static_updates():
    xs = jnp.asarray(XS)
    got = jax.vmap(lambda x: x.at[0].set(5.0))(xs)
    assert_matches(got, stacked(lambda x: _np_set(x, 0, 5.0), XS))
    got = jax.vmap(lambda x: x.at[:, 1].add(1.0))(xs)
    assert_matches(got, stacked(lambda x: _np_set(x, (slice(None), 1), 1.0, "add"), XS))
    got = jax.vmap(lambda x: x.at[np.array([0, 2])].set(0.0))(xs)
    assert_matches(got, stacked(lambda x: _np_set(x, [0, 2], 0.0), XS))
    got = jax.vmap(lambda x, v: x.at[1].set(v))(xs, jnp.asarray(XS[:, 0, :]))
    assert_matches(got, stacked(lambda x, v: _np_set(x, 1, v), XS, XS[:, 0, :]))


# --- in_axes and out_axes -----------------------------------------------------------------------

def test_in_axes_variations():
    xs, ys = jnp.asarray(XS), jnp.asarray(YS)
    f = lambda x, y: x @ y
    assert_matches(jax.vmap(f)(xs, ys), stacked(f, XS, YS))
    assert_matches(jax.vmap(f, in_axes=(0, None))(xs, jnp.asarray(YS[0])),
                   stacked(lambda x: x @ YS[0], XS))
    assert_matches(jax.vmap(f, in_axes=[None, 0])(jnp.asarray(XS[0]), ys),
                   stacked(lambda y: XS[0] @ y, YS))
    moved = np.moveaxis(XS, 0, 1)                                # (3, 5, 4): batch on axis 1
    assert_matches(jax.vmap(f, in_axes=(1, 0))(jnp.asarray(moved), ys), stacked(f, XS, YS))
    last = np.moveaxis(XS, 0, -1)                                # (3, 4, 5)
    assert_matches(jax.vmap(jnp.sum, in_axes=-1)(jnp.asarray(last)),
                   XS.sum(axis=(1, 2)))


def test_pytree_in_axes_and_outputs():
    params = {"w": jnp.asarray(W), "b": jnp.asarray(np.arange(6, dtype=np.float32))}

    def layer(p, x):
        return {"out": x @ p["w"] + p["b"], "norm": (x * x).sum()}

    got = jax.vmap(layer, in_axes=({"w": None, "b": None}, 0))(params, jnp.asarray(XS))
    assert_matches(got["out"], stacked(lambda x: x @ W + np.arange(6), XS))
    assert_matches(got["norm"], stacked(lambda x: (x * x).sum(), XS))
    got = jax.vmap(layer, in_axes=(None, 1))(params, jnp.asarray(np.moveaxis(XS, 0, 1)))
    assert_matches(got["out"], stacked(lambda x: x @ W + np.arange(6), XS))

    pairs = (jnp.asarray(XS), [jnp.asarray(YS), 3.0])
    got = jax.vmap(lambda t: t[0] @ t[1][0] * t[1][1], in_axes=((0, [0, None]),))(pairs)
    assert_matches(got, stacked(lambda x, y: x @ y * 3.0, XS, YS))


def test_keyword_arguments_are_mapped_over_axis_0():
    got = jax.vmap(lambda x, scale: x * scale)(jnp.asarray(XS), scale=jnp.arange(5.0))
    assert_matches(got, XS * np.arange(5.0)[:, None, None])


def test_out_axes_variations():
    xs = jnp.asarray(XS)
    assert_matches(jax.vmap(lambda x: x * 2, out_axes=1)(xs), np.moveaxis(XS * 2, 0, 1))
    assert_matches(jax.vmap(lambda x: x * 2, out_axes=-1)(xs), np.moveaxis(XS * 2, 0, -1))
    a, b = jax.vmap(lambda x: (x.sum(0), x.T), out_axes=(0, 2))(xs)
    assert_matches(a, XS.sum(1))
    assert_matches(b, np.moveaxis(np.swapaxes(XS, 1, 2), 0, 2))
    w, s = jax.vmap(lambda x: (jnp.asarray(W), x.sum()), out_axes=(None, 0))(xs)
    assert_matches(w, W)
    assert_matches(s, XS.sum(axis=(1, 2)))
    # An unbatched output with a mapped out_axis is broadcast over the batch.
    assert_matches(jax.vmap(lambda x: jnp.asarray(W), out_axes=1)(xs),
                   np.broadcast_to(W[:, None], (4, 5, 6)))


def test_axis_size_without_mapped_inputs():
    got = jax.vmap(lambda: jnp.arange(3.0), in_axes=(), axis_size=4)()
    assert_matches(got, np.tile(np.arange(3.0), (4, 1)))
    got = jax.vmap(lambda x: x + 1, in_axes=None, axis_size=2)(jnp.asarray(W))
    assert_matches(got, np.stack([W + 1, W + 1]))


# --- composition --------------------------------------------------------------------------------

def test_nested_vmap():
    xs = jnp.asarray(XS)
    got = jax.vmap(jax.vmap(lambda row: row @ W))(xs)
    assert_matches(got, XS @ W)
    outer = jax.vmap(jax.vmap(lambda a, b: a * b, in_axes=(None, 0)), in_axes=(0, None))
    a, b = np.arange(3.0), np.arange(4.0)
    assert_matches(outer(jnp.asarray(a), jnp.asarray(b)), np.outer(a, b))
    # The inner function closes over the outer batched value.
    got = jax.vmap(lambda x: jax.vmap(lambda r: r - x.mean())(x))(xs)
    assert_matches(got, XS - XS.mean(axis=(1, 2), keepdims=True))
    got = jax.vmap(jax.vmap(lambda x: x.sum(), in_axes=1), in_axes=2)(xs)
    assert_matches(got, XS.sum(axis=0).T)


def test_vmap_under_jit_and_jit_under_vmap():
    f = jax.jit(jax.vmap(lambda x, y: jnp.tanh(x @ y).sum(0)))
    assert_matches(f(jnp.asarray(XS), jnp.asarray(YS)),
                   stacked(lambda x, y: np.tanh(x @ y).sum(0), XS, YS))
    g = jax.vmap(jax.jit(lambda x: x[1] * 3))
    assert_matches(g(jnp.asarray(XS)), XS[:, 1] * 3)
    i = np.array([2, 0, 1, 1, 0], dtype=np.int32)
    h = jax.jit(jax.vmap(lambda x, k: x.at[k].set(0.0)[k - 1]))
    assert_matches(h(jnp.asarray(XS), jnp.asarray(i)),
                   stacked(lambda x, k: _np_set(x, k, 0.0)[k - 1], XS, i))


def test_make_jaxpr_shows_the_batched_primitives():
    text = str(jax.make_jaxpr(jax.vmap(lambda x: x @ x))(jnp.asarray(XS[:, 0])))
    assert "dot_general[dimension_numbers=(((1,), (1,)), ((0,), (0,)))" in text
    assert "f32[5]" in text
    text = str(jax.make_jaxpr(jax.vmap(lambda x: x.sum(0), in_axes=1))(jnp.asarray(XS)))
    # Batch axis 1 of (5, 3, 4): the member's axis 0 stays axis 0, the result is (3, 4).
    assert "f32[3,4] = reduce_sum[axes=(0,)] a" in text


def test_vmap_inside_shard_map_with_collectives():
    mesh = jax.make_mesh((4,), ("i",))
    data = RNG.standard_normal((8, 3, 2)).astype(np.float32)

    def body(block):                         # block (2, 3, 2); vmap over its rows
        return jax.vmap(lambda x: lax.psum(x.sum(0), "i") + lax.axis_index("i"))(block)

    sm = jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
    blocks = data.reshape(4, 2, 3, 2)
    total = blocks.sum(axis=(0, 2))                                # (2, 2): psum over devices
    want = np.concatenate([total + k for k in range(4)])
    assert_matches(sm(jnp.asarray(data)), want)
    assert_matches(jax.jit(sm)(jnp.asarray(data)), want)


def test_vmap_of_shard_map_stacks_members():
    mesh = jax.make_mesh((4,), ("i",))

    def body(x):
        return lax.psum(x * 2, "i")

    sm = jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P())
    data = RNG.standard_normal((3, 8)).astype(np.float32)
    want = np.stack([(row * 2).reshape(4, 2).sum(0) for row in data])
    assert_matches(jax.vmap(sm)(jnp.asarray(data)), want)
    assert_matches(jax.jit(jax.vmap(sm))(jnp.asarray(data)), want)
    assert_matches(jax.vmap(sm, in_axes=1)(jnp.asarray(data.T)), want)


def test_vmap_of_shard_map_with_unbatched_argument():
    mesh = jax.make_mesh((2,), ("i",))
    sm = jax.shard_map(lambda x, y: x + y, mesh=mesh, in_specs=(P("i"), P("i")),
                       out_specs=P("i"))
    xs = RNG.standard_normal((3, 4)).astype(np.float32)
    y = np.arange(4, dtype=np.float32)
    assert_matches(jax.vmap(sm, in_axes=(0, None))(jnp.asarray(xs), jnp.asarray(y)), xs + y)


def test_vmap_of_shard_map_closing_over_a_batched_value():
    mesh = jax.make_mesh((2,), ("i",))

    def f(x, y):
        sm = jax.shard_map(lambda b: b + x.sum(), mesh=mesh, in_specs=P("i"), out_specs=P("i"))
        return sm(y)

    xs = RNG.standard_normal((3, 2)).astype(np.float32)
    ys = RNG.standard_normal((3, 4)).astype(np.float32)
    want = ys + xs.sum(1, keepdims=True)
    assert_matches(jax.vmap(f)(jnp.asarray(xs), jnp.asarray(ys)), want)
    assert_matches(jax.jit(jax.vmap(f))(jnp.asarray(xs), jnp.asarray(ys)), want)
    # Closing over an unbatched value.
    got = jax.vmap(f, in_axes=(None, 0))(jnp.ones(2), jnp.zeros((3, 4)))
    assert_matches(got, np.full((3, 4), 2.0))


# --- errors -------------------------------------------------------------------------------------

def test_inconsistent_sizes():
    def f(x, y):
        return x + y

    with pytest.raises(ValueError) as info:
        jax.vmap(f)(jnp.zeros((3,)), jnp.zeros((4, 5)))
    assert str(info.value) == (
        "vmap got inconsistent sizes for array axes to be mapped:\n"
        "  * one axis had size 3: axis 0 of argument x of type float32[3];\n"
        "  * one axis had size 4: axis 0 of argument y of type float32[4,5]")


def test_inconsistent_sizes_most_common_first():
    with pytest.raises(ValueError) as info:
        jax.vmap(lambda a, b, c: a)(jnp.zeros((2,)), jnp.zeros((3,)), jnp.zeros((3,)))
    assert str(info.value) == (
        "vmap got inconsistent sizes for array axes to be mapped:\n"
        "  * most axes (2 of them) had size 3, e.g. axis 0 of argument b of type float32[3];\n"
        "  * one axis had size 2: axis 0 of argument a of type float32[2]")


def test_inconsistent_with_axis_size():
    with pytest.raises(ValueError, match="inconsistent sizes.*\n  \\* the `axis_size` argument "
                                         "was 2;\n  \\* one axis had size 3: axis 0 of "
                                         "argument x of type float32\\[3\\]$"):
        jax.vmap(lambda x: x, axis_size=2)(jnp.zeros((3,)))


def test_no_mapped_inputs():
    with pytest.raises(ValueError, match="^vmap must have at least one non-None value in "
                                         "in_axes or axis_size must be specified$"):
        jax.vmap(lambda x: x, in_axes=None)(jnp.zeros(3))
    with pytest.raises(ValueError, match=r"must be passed at least one argument containing an "
                                         r"array or axis_size must be specified, got empty "
                                         r"\*args=\(\) and \*\*kwargs=\{\}$"):
        jax.vmap(lambda: 1.0)()


def test_axis_out_of_range():
    with pytest.raises(ValueError) as info:
        jax.vmap(lambda x: x, in_axes=2)(jnp.zeros((3, 4)))
    assert str(info.value) == (
        "vmap was requested to map its argument along axis 2, which implies that its rank "
        "should be at least 3, but is only 2 (its shape is (3, 4))")
    with pytest.raises(ValueError, match="rank should be at least 1, but is only 0"):
        jax.vmap(lambda x: x)(2.0)


def test_in_axes_structure_errors():
    with pytest.raises(ValueError, match=r"but got len\(in_axes\)=2, len\(args\)=1$"):
        jax.vmap(lambda x: x, in_axes=(0, 0))(jnp.zeros(3))
    with pytest.raises(ValueError, match="vmap in_axes specification must be a tree prefix"):
        jax.vmap(lambda d: d["a"], in_axes=({"b": 0},))({"a": jnp.zeros(3)})
    with pytest.raises(TypeError, match="vmap in_axes must be an int, None, or \\(nested\\) "
                                        "container with those types as leaves, but got \\('x',\\)\\."):
        jax.vmap(lambda x: x, in_axes=("x",))
    for bad in ("x", False, 1.0):        # no int, None or tuple: JAX's first check
        with pytest.raises(TypeError, match="vmap in_axes must be an int, None, or a tuple of "
                                            f"entries .* but got {bad}\\."):
            jax.vmap(lambda x: x, in_axes=bad)
    with pytest.raises(TypeError, match="vmap out_axes must be an int, None, or \\(nested\\) "
                                        "container with those types as leaves, but got True\\."):
        jax.vmap(lambda x: x, out_axes=True)
    for which in ("in_axes", "out_axes"):
        for bad in (False, 1.0, ("x",)):
            with pytest.raises(TypeError, match=f"pmap {which} must be an int, None, or "
                                                "\\(nested\\) container with those types as leaves"):
                jax.pmap(lambda x: x, **{which: bad})(jnp.zeros(1))
    with pytest.raises(TypeError, match="vmap in_axes must be an int, None, or a tuple"):
        jax.vmap(lambda x: x, in_axes={"x": 0})      # JAX 0.10's type: TypeError
    with pytest.raises(TypeError, match="Expected a callable value"):
        jax.vmap(3)


def test_out_axes_errors():
    xs = jnp.zeros((3, 2))
    with pytest.raises(ValueError, match=r"^at vmap out_axes, got axis spec None but output "
                                         r"was batched on axis 0$"):
        jax.vmap(lambda x: x, out_axes=None)(xs)
    with pytest.raises(ValueError, match=r"^at vmap out_axes\[0\], got axis spec None but "
                                         r"output was batched on axis 0$"):
        jax.vmap(lambda x: (x[0], x), out_axes=(None, None))(xs)
    with pytest.raises(ValueError, match=r"^vmap has mapped output \(axis_name=i\) but out_axes "
                                         r"is None$"):
        jax.vmap(lambda x: x, out_axes=None, axis_name="i")(xs)
    with pytest.raises(ValueError, match="out_axes specification must be a tree prefix"):
        jax.vmap(lambda x: (x, x), out_axes=(0, 0, 0))(xs)
    with pytest.raises(ValueError, match="axis 3 is out of bounds for array of dimension 2"):
        jax.vmap(lambda x: x, out_axes=3)(xs)
    with pytest.raises(TypeError, match="^Output from batched function 'hello' with type "
                                        "<class 'str'> is not a valid JAX type$"):
        jax.vmap(lambda x: "hello")(xs)


# --- every primitive's rule against a per-member loop ------------------------------------------

# (primitive, per-member operands, params); integer operands are indices.
F = np.float32
PRIMITIVE_CASES = [
    (prims.neg_p, [RNG.standard_normal((3, 4)).astype(F)], {}),
    (prims.is_finite_p, [np.array([1.0, np.inf, np.nan], F)], {}),
    (prims.convert_element_type_p, [np.arange(4, dtype=F) * 1.5], {"new_dtype": np.int32}),
    (prims.add_p, [np.ones((2, 3), F), np.arange(6, dtype=F).reshape(2, 3)], {}),
    (prims.mul_p, [np.float32(3.0), np.arange(6, dtype=F).reshape(2, 3)], {}),
    (prims.lt_p, [np.arange(6, dtype=F).reshape(2, 3), np.float32(2.5)], {}),
    (prims.select_n_p, [np.array([True, False, True]), np.zeros(3, F), np.ones(3, F)], {}),
    (prims.select_n_p, [np.array(True), np.zeros(3, F), np.ones(3, F)], {}),
    (prims.reduce_sum_p, [np.arange(24, dtype=F).reshape(2, 3, 4)], {"axes": (0, 2)}),
    (prims.reduce_max_p, [np.arange(24, dtype=F).reshape(2, 3, 4)], {"axes": (1,)}),
    (prims.argmax_p, [RNG.standard_normal((3, 4)).astype(F)],
     {"axes": (1,), "index_dtype": np.dtype(np.int32)}),
    (prims.cumsum_p, [np.arange(12, dtype=F).reshape(3, 4)], {"axis": 1, "reverse": True}),
    (prims.reshape_p, [np.arange(12, dtype=F).reshape(3, 4)], {"new_sizes": (2, 6)}),
    (prims.transpose_p, [np.arange(24, dtype=F).reshape(2, 3, 4)], {"permutation": (2, 0, 1)}),
    (prims.squeeze_p, [np.arange(6, dtype=F).reshape(2, 1, 3, 1)], {"dimensions": (1, 3)}),
    (prims.broadcast_in_dim_p, [np.arange(3, dtype=F)],
     {"shape": (2, 3, 4), "broadcast_dimensions": (1,)}),
    (prims.concatenate_p, [np.ones((2, 3), F), np.zeros((2, 1), F)], {"dimension": 1}),
    (prims.slice_p, [np.arange(24, dtype=F).reshape(4, 6)],
     {"start_indices": (1, 0), "limit_indices": (4, 5), "strides": (2, 2)}),
    (prims.rev_p, [np.arange(12, dtype=F).reshape(3, 4)], {"dimensions": (0, 1)}),
    (prims.pad_p, [np.arange(6, dtype=F).reshape(2, 3), np.float32(-1)],
     {"padding_config": ((1, 0, 0), (0, 2, 1))}),
    (prims.dynamic_slice_p, [np.arange(24, dtype=F).reshape(4, 6), np.int32(3), np.int32(-1)],
     {"slice_sizes": (2, 3)}),
    (prims.dynamic_update_slice_p,
     [np.arange(24, dtype=F).reshape(4, 6), -np.ones((2, 3), F), np.int32(1), np.int32(5)], {}),
    (prims.gather_p, [np.arange(12, dtype=F).reshape(3, 4), np.array([[3, -1], [9, 0]], np.int32)],
     {"axis": 1}),
    (prims.scatter_p, [np.arange(12, dtype=F).reshape(3, 4), np.array([2, -1, 7], np.int32),
                       np.full((3, 3), 10, F)], {"axis": 1, "mode": "add"}),
    (prims.scatter_p, [np.arange(12, dtype=F).reshape(3, 4), np.array([0, 0], np.int32),
                       np.full((2, 4), 10, F)], {"axis": 0, "mode": "set"}),
    (prims.dot_general_p, [np.arange(24, dtype=F).reshape(2, 3, 4),
                           np.arange(8, dtype=F).reshape(2, 4)],
     {"dimension_numbers": (((2,), (1,)), ((0,), (0,))), "preferred_element_type": None}),
    (prims.dot_general_p, [np.arange(12, dtype=F).reshape(3, 4), np.arange(4, dtype=F)],
     {"dimension_numbers": (((1,), (0,)), ((), ())), "preferred_element_type": None}),
    # jax.numpy breadth
    (prims.asin_p, [np.linspace(-0.9, 0.9, 6, dtype=F).reshape(2, 3)], {}),
    (prims.signbit_p, [np.array([-0.0, 1.0, -2.0], F)], {}),
    (prims.population_count_p, [np.array([7, -1, 12], np.int32)], {}),
    (prims.shift_left_p, [np.array([1, 3, -2], np.int32), np.array([2, 33, 1], np.int32)], {}),
    (prims.nextafter_p, [np.arange(3, dtype=F), np.float32(10.0)], {}),
    (prims.cumprod_p, [RNG.standard_normal((3, 4)).astype(F)], {"axis": 1, "reverse": False}),
    (prims.cummax_p, [RNG.standard_normal((3, 4)).astype(F)], {"axis": 0, "reverse": True}),
    (prims.searchsorted_p, [np.array([-1.0, 0.5, 2.0], F), RNG.standard_normal((2, 3)).astype(F)],
     {"side": "right"}),
]


def _member_values(operand, dim, size, seed):
    """``size`` members that differ (integers stay valid indices), and their batched array."""
    rng = np.random.default_rng(seed)
    operand = np.asarray(operand)
    if operand.dtype.kind == "f":
        members = [operand + rng.standard_normal(operand.shape).astype(operand.dtype)
                   for _ in range(size)]
    elif operand.dtype.kind == "i":
        members = [operand + rng.integers(-1, 2, operand.shape).astype(operand.dtype)
                   for _ in range(size)]
    else:
        members = [operand ^ rng.integers(0, 2, operand.shape).astype(bool)
                   for _ in range(size)]
    return members, np.stack(members, axis=dim)


@pytest.mark.parametrize("case", range(len(PRIMITIVE_CASES)))
def test_primitive_rules_against_loop(case):
    prim, operands, params = PRIMITIVE_CASES[case]
    size = 3
    bind_prim = lambda *xs: bind(prim, *xs, **params)
    # Every operand batched at each possible axis, then each operand alone unbatched.
    patterns = [[min(k, np.ndim(o)) for o in operands] for k in range(3)]
    patterns += [[None if j == skip else 0 for j in range(len(operands))]
                 for skip in range(len(operands)) if len(operands) > 1]
    for n, axes in enumerate(patterns):
        members, batched = [], []
        for j, (operand, axis) in enumerate(zip(operands, axes)):
            if axis is None:
                members.append([operand] * size)
                batched.append(operand)
            else:
                per_member, whole = _member_values(operand, axis, size, seed=7 * n + j)
                members.append(per_member)
                batched.append(whole)
        want = np.stack([np.asarray(bind_prim(*[jnp.asarray(m) for m in ms]))
                         for ms in zip(*members)])
        got = jax.vmap(bind_prim, in_axes=tuple(axes))(*[jnp.asarray(b) for b in batched])
        assert_matches(got, want, want.dtype)
        traced = jax.jit(jax.vmap(bind_prim, in_axes=tuple(axes)))(
            *[jnp.asarray(b) for b in batched])
        assert_matches(traced, want, want.dtype)


def test_debug_print_runs_per_member(capsys):
    xs = jnp.asarray(np.arange(3, dtype=np.int32))
    jax.vmap(lambda x: bind(prims.debug_print_p, x, fmt="member {}"))(xs)
    assert capsys.readouterr().out.splitlines() == ["member 0", "member 1", "member 2"]


def test_sharding_constraint_and_all_gather():
    # an Auto mesh: a constraint lays out (on Explicit axes it asserts the type)
    mesh = jax.sharding.Mesh(jax.devices()[:2], ("i",))
    sharding = NamedSharding(mesh, P("i"))
    data = RNG.standard_normal((3, 4)).astype(np.float32)
    got = jax.vmap(lambda x: lax.with_sharding_constraint(x * 2, sharding))(jnp.asarray(data))
    assert_matches(got, data * 2)
    assert got.sharding == NamedSharding(mesh, P(None, "i"))

    def body(block):                              # (3, 2): gather each row's halves
        return jax.vmap(lambda r: bind(coll.all_gather_p, r, mesh_axes=("i",), gather_axis=0,
                                       tiled=True, axis_size=2))(block)

    sm = jax.shard_map(body, mesh=mesh, in_specs=P(None, "i"), out_specs=P(None, "i"),
                       check_vma=False)
    # Each device holds the full rows; out P(None,'i') concatenates the two copies.
    assert_matches(sm(jnp.asarray(data)), np.concatenate([data, data], axis=1))


COLLECTIVE_BODIES = {
    # per-member block (4,) on mesh ('i': 4) -> per-member block out, out spec P('i')
    "all_gather": lambda b: lax.all_gather(b, "i", tiled=True)[:4] * 2,
    "all_gather_stacked": lambda b: lax.all_gather(b, "i", axis=1)[:, 0],
    "psum_scatter": lambda b: lax.psum_scatter(b, "i", tiled=True).repeat(4),
    "all_to_all": lambda b: lax.all_to_all(b, "i", 0, 0, tiled=True),
    "ppermute": lambda b: lax.ppermute(b, "i", [(k, (k + 1) % 4) for k in range(4)]),
    "pbroadcast": lambda b: lax.pbroadcast(b, "i", 2) + b,
    "pmax_pmin": lambda b: lax.pmax(b, "i") - lax.pmin(b, "i") + lax.pmean(b, "i"),
}


@pytest.mark.parametrize("name", sorted(COLLECTIVE_BODIES))
def test_collectives_under_vmap_in_a_body(name):
    body = COLLECTIVE_BODIES[name]
    mesh = jax.make_mesh((4,), ("i",))
    data = jnp.asarray(RNG.standard_normal((3, 16)).astype(np.float32))
    per_member = jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"),
                               check_vma=False)
    want = np.stack([np.asarray(per_member(row)) for row in data])
    # Members along axis 0 of each block (global (3, 16) split by columns) ...
    rows = jax.shard_map(jax.vmap(body), mesh=mesh, in_specs=P(None, "i"),
                         out_specs=P(None, "i"), check_vma=False)
    # ... or along axis 1 (global (16, 3) split by rows).
    columns = jax.shard_map(jax.vmap(body, in_axes=1, out_axes=1), mesh=mesh,
                            in_specs=P("i"), out_specs=P("i"), check_vma=False)
    assert_matches(rows(data), want)
    assert_matches(jax.jit(rows)(data), want)
    assert_matches(columns(data.T), want.T)
    assert_matches(jax.jit(columns)(data.T), want.T)


# Higher-order and lowered primitives are batched elsewhere (process_shard_map) or never seen.
EXEMPT_FROM_BATCHING = ()


def test_every_primitive_has_a_batching_rule():
    missing = [name for name, prim in prims.registry.items()
               if prim.kind in ("op", "collective") and prim not in batching.batching_rules
               and prim not in EXEMPT_FROM_BATCHING]
    assert missing == []


def test_missing_rule_error_names_the_table():
    with pytest.raises(prims.MissingRuleError, match="no batching rule for primitive "
                                                     "'all_reduce'"):
        batching.batching_rules[coll.all_reduce_node]


# --- generated shapes and batch axes ---------------------------------------------------------

ELEMENTWISE = [
    lambda m, x: m.sin(x) * 3 - x,
    lambda m, x: m.maximum(x, x[..., :1]) if x.ndim else m.maximum(x, 0.0),
    lambda m, x: m.where(x > 0, m.exp(-x), x * x),
]
REDUCTIONS = ["sum", "max", "min", "mean"]


@settings(derandomize=True, deadline=None, max_examples=40)
@given(shape=st.lists(st.integers(1, 4), min_size=0, max_size=3),
       size=st.integers(1, 4), data=st.data())
def test_generated_elementwise_and_reductions(shape, size, data):
    batch_axis = data.draw(st.integers(0, len(shape)))
    out_axis = data.draw(st.integers(-(len(shape) + 1), len(shape)))
    rng = np.random.default_rng(len(shape) * 7 + size)
    xs = rng.standard_normal([size] + shape).astype(np.float32)
    moved = np.moveaxis(xs, 0, batch_axis)
    f = data.draw(st.sampled_from(ELEMENTWISE))
    got = jax.vmap(functools.partial(f, jnp), in_axes=batch_axis, out_axes=out_axis)(
        jnp.asarray(moved))
    want = np.moveaxis(stacked(functools.partial(f, np), xs), 0, out_axis)
    assert_matches(got, want.astype(np.float32))
    name = data.draw(st.sampled_from(REDUCTIONS))
    axis = data.draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1))
                     if shape else st.none())
    keepdims = data.draw(st.booleans())
    reduce = lambda m, x: getattr(m, name)(x, axis=axis, keepdims=keepdims)
    got = jax.vmap(functools.partial(reduce, jnp), in_axes=batch_axis)(jnp.asarray(moved))
    assert_matches(got, stacked(functools.partial(reduce, np), xs).astype(np.float32))


def test_the_gradient_of_a_batched_cond_takes_nothing_from_branches_not_taken():
    # as JAX's: where a member takes the constant branch, sqrt's infinite slope at 0 (times a
    # zero cotangent) does not reach its operand
    eps = 1e-3

    def safe_sqrt(x):
        return lax.cond(x < eps, lambda _: eps, lambda _: jnp.sqrt(x), ())

    grads = shardc.grad(lambda x: shardc.vmap(safe_sqrt)(x).sum())(
        np.array([0.0, 0.0, 4.0], np.float32))
    np.testing.assert_allclose(np.asarray(grads), [0.0, 0.0, 0.25])
    values = shardc.vmap(safe_sqrt)(np.array([0.0, 4.0, 9.0], np.float32))
    np.testing.assert_allclose(np.asarray(values), [eps, 2.0, 3.0])


def test_eager_vmap_of_a_constraint_on_a_dimension_its_axes_do_not_divide():
    """Eagerly, JAX compiles the batched constraint: a size-1 dimension asked to be split
    comes out unsplit, as under jit (it was refused as indivisible)."""
    from shardc.sharding import AxisType, NamedSharding
    mesh = jax.make_mesh((2, 4), ("dp", "tp"), axis_types=(AxisType.Auto,) * 2)
    s = NamedSharding(mesh, jax.P("dp", "tp"))
    f = lambda v: jax.lax.with_sharding_constraint(v[None] * 2, s)
    for run in (jax.vmap(f), jax.jit(jax.vmap(f))):
        out = run(jnp.ones((8, 32)))
        assert out.shape == (8, 1, 32) and out.sharding.spec == jax.P(None, None, "tp")
        np.testing.assert_array_equal(np.asarray(out), np.full((8, 1, 32), 2.0))
    split = jax.vmap(lambda v: jax.lax.with_sharding_constraint(v * 2, s))(jnp.ones((8, 2, 32)))
    assert split.sharding.spec == jax.P(None, "dp", "tp")
