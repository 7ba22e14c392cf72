"""Autodiff (SEMANTICS 4, STYLE "Gradients against finite differences, and vjp against jvp with
the dot-product test"): ``grad``, ``value_and_grad``, ``vjp`` and ``jvp`` outside shard_map.

1. Gradients of every differentiable primitive reachable from ``shardc.numpy``, ``lax`` and
   ``nn`` against central finite differences, eagerly and under ``jit``.
2. The dot-product test ``<t, vjp(ct)> == <jvp(t), ct>`` on random programs (hypothesis).
3. The API: argnums, has_aux, value_and_grad, pytrees, nested grad, jit and vmap of grad.
4. Errors, word for word against SEMANTICS 4.6 and JAX.
5. ``make_jaxpr(grad(f))`` is one program holding forward and backward equations; it verifies.

x64 is off, so every value is float32: finite differences are central differences in float32
with a step of 3e-3 on inputs of order one, held to rtol 3e-3 / atol 1e-3. Each differentiated
function is reduced to a scalar with fixed random weights, so every output element's
cotangent differs.
"""
from __future__ import annotations

import inspect
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardc
import shardc.numpy as jnp
from shardc import lax, nn

SETTINGS = dict(derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))

EPS = 3e-3
RTOL = 3e-3
ATOL = 1e-3


def rng(seed=0):
    return np.random.default_rng(seed)


def normal(shape, seed=0, scale=1.0):
    return (rng(seed).standard_normal(shape) * scale).astype(np.float32)


def uniform(shape, lo, hi, seed=0):
    return rng(seed).uniform(lo, hi, shape).astype(np.float32)


def away_from_zero(shape, seed=0, lo=0.3, hi=1.5):
    """Values of magnitude in [lo, hi] with random signs."""
    r = rng(seed)
    return (r.uniform(lo, hi, shape) * r.choice([-1.0, 1.0], shape)).astype(np.float32)


def weighted(fn, seed=1):
    """``fn`` reduced to a scalar: the sum of its output times fixed random weights."""
    cache: dict = {}

    def loss(*args):
        out = fn(*args)
        shape = tuple(np.shape(out))
        if shape not in cache:
            cache[shape] = normal(shape, seed) if shape else np.float32(1.0)
        return jnp.sum(out * cache[shape])

    return loss


def numeric_grad(f, args, argnums):
    """Central differences of scalar ``f`` with respect to each of ``argnums``, in float32."""
    args = [np.array(a, dtype=np.float32) if k in argnums else a for k, a in enumerate(args)]
    as_arrays = lambda values: [jnp.asarray(v) for v in values]
    grads = []
    for k in argnums:
        x = args[k]
        g = np.zeros(x.shape, np.float64)
        for index in np.ndindex(*x.shape):
            plus, minus = x.copy(), x.copy()
            plus[index] += EPS
            minus[index] -= EPS
            hi = float(f(*as_arrays(args[:k] + [plus] + args[k + 1:])))
            lo = float(f(*as_arrays(args[:k] + [minus] + args[k + 1:])))
            g[index] = (hi - lo) / (2 * EPS)
        grads.append(g)
    return grads


def float_argnums(args):
    return tuple(k for k, a in enumerate(args)
                 if np.issubdtype(np.asarray(a).dtype, np.floating))


def check_grads(fn, *args, mode="eager", seed=1, rtol=RTOL, atol=ATOL):
    """The gradient of ``weighted(fn)`` with respect to every float argument, against central
    differences; ``mode='jit'`` differentiates under ``shardc.jit``."""
    args = [np.asarray(a, np.float32) if isinstance(a, float) else a for a in args]
    loss = weighted(fn, seed)
    argnums = float_argnums(args)
    g = shardc.grad(loss, argnums=argnums)
    if mode == "jit":
        g = shardc.jit(g)
    got = g(*args)
    want = numeric_grad(loss, args, argnums)
    assert len(got) == len(want)
    for k, a, w in zip(argnums, got, want):
        assert np.shape(a) == w.shape, (k, np.shape(a), w.shape)
        assert np.asarray(a).dtype == np.float32
        np.testing.assert_allclose(np.asarray(a, np.float64), w, rtol=rtol, atol=atol,
                                   err_msg=f"gradient of argument {k}")


MODES = ["eager", "jit"]


# ================================================================================================
# 1. Every differentiable primitive against finite differences
# ================================================================================================

X = normal((3, 4), 10)
Y = normal((3, 4), 11)
POS = uniform((3, 4), 0.5, 2.0, 12)
POS2 = uniform((3, 4), 0.5, 2.0, 13)
SMALL = uniform((3, 4), -1.0, 1.0, 14)
NZ = away_from_zero((3, 4), 15)
S = np.float32(0.7)          # a rank-0 array


UNARY = [
    ("sin", jnp.sin, X), ("cos", jnp.cos, X), ("tan", jnp.tan, SMALL), ("tanh", jnp.tanh, X),
    ("exp", jnp.exp, X), ("log", jnp.log, POS), ("log1p", jnp.log1p, POS),
    ("expm1", jnp.expm1, X), ("sqrt", jnp.sqrt, POS), ("rsqrt", lax.rsqrt, POS),
    ("abs", jnp.abs, NZ), ("logistic", lax.logistic, X), ("sigmoid", nn.sigmoid, X),
    ("negative", jnp.negative, X), ("square", jnp.square, X),
    ("reciprocal", jnp.reciprocal, NZ), ("lax.exp", lax.exp, X), ("lax.log", lax.log, POS),
    ("lax.neg", lax.neg, X), ("lax.sqrt", lax.sqrt, POS), ("lax.abs", lax.abs, NZ),
    ("method_abs", lambda x: abs(x), NZ), ("neg_op", lambda x: -x, X),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,fn,x", UNARY, ids=[u[0] for u in UNARY])
def test_unary(name, fn, x, mode):
    check_grads(fn, x, mode=mode)


def _smooth_rem(x, y):
    q = x / y
    return bool((np.abs(q - np.round(q)) > 0.15).all())


def _no_tie(x, y):
    return bool((np.abs(x - y) > 0.1).all())


# name: (function, sampler of x, sampler of y, where the pair is smooth)
BINARY_FNS = {
    "add": (jnp.add, normal, normal, None),
    "sub": (jnp.subtract, normal, normal, None),
    "mul": (jnp.multiply, normal, normal, None),
    "div": (jnp.divide, normal, away_from_zero, None),
    "rem": (jnp.remainder, lambda s, k: away_from_zero(s, k, 0.2, 3.0),
            lambda s, k: uniform(s, 0.7, 1.6, k), _smooth_rem),
    "pow": (jnp.power, lambda s, k: uniform(s, 0.5, 2.0, k),
            lambda s, k: uniform(s, -1.5, 1.5, k), None),
    "max": (jnp.maximum, normal, normal, _no_tie),
    "min": (jnp.minimum, normal, normal, _no_tie),
    "atan2": (jnp.arctan2, away_from_zero, away_from_zero, None),
}

# rank-0 operands on either side, numpy broadcasting of a column against a row and of a row
BROADCASTS = {"same_shape": ((3, 4), (3, 4)), "rank0_right": ((3, 4), ()),
              "rank0_left": ((), (3, 4)), "col_row": ((3, 1), (1, 4)), "row": ((3, 4), (4,))}


def binary_operands(name, shapes):
    """Operands of the shapes, the first seed whose broadcast pair is smooth."""
    _, sample_x, sample_y, smooth = BINARY_FNS[name]
    for seed in range(100, 400):
        x = np.asarray(sample_x(shapes[0], seed), np.float32)
        y = np.asarray(sample_y(shapes[1], seed + 1000), np.float32)
        if smooth is None or smooth(*np.broadcast_arrays(x, y)):
            return x, y
    raise AssertionError(f"no smooth operands for {name} {shapes}")


BINARY = [pytest.param(name, b, id=f"{name}-{b}") for name in BINARY_FNS for b in BROADCASTS]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,broadcast", BINARY)
def test_binary(name, broadcast, mode):
    x, y = binary_operands(name, BROADCASTS[broadcast])
    check_grads(BINARY_FNS[name][0], x, y, mode=mode)


PY_SCALAR = [
    ("x+2", lambda x: x + 2.0, X), ("2+x", lambda x: 2.0 + x, X),
    ("x-2", lambda x: x - 2.0, X), ("2-x", lambda x: 2.0 - x, X),
    ("x*3", lambda x: x * 3.0, X), ("3*x", lambda x: 3 * x, X),
    ("x/3", lambda x: x / 3.0, X), ("3/x", lambda x: 3.0 / x, NZ),
    ("x%1.3", lambda x: x % 1.3, away_from_zero((3, 4), 20, 0.2, 1.1)),
    ("3%x", lambda x: 3.0 % x, uniform((3, 4), 1.05, 1.4, 20)),
    ("x**3", lambda x: x ** 3, X), ("x**2.5", lambda x: x ** 2.5, POS),
    ("x**0.5", lambda x: jnp.power(x, 0.5), POS), ("2**x", lambda x: 2.0 ** x, X),
    ("max0.1", lambda x: jnp.maximum(x, 0.1), NZ), ("min_left", lambda x: jnp.minimum(0.1, x), NZ),
    ("atan2_1", lambda x: jnp.arctan2(x, 1.5), X),
    ("atan2_left", lambda x: jnp.arctan2(1.5, x), NZ),
    ("x*int", lambda x: x * np.int32(2), X),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,fn,x", PY_SCALAR, ids=[c[0] for c in PY_SCALAR])
def test_python_scalar_operands(name, fn, x, mode):
    check_grads(fn, x, mode=mode)


def test_max_min_ties_split_evenly():
    """At a tie JAX gives each operand half the cotangent; reduce_max averages over ties."""
    x = np.array([1.0, 2.0, 3.0], np.float32)
    y = np.array([1.0, 5.0, 0.0], np.float32)
    gx, gy = shardc.grad(lambda a, b: jnp.sum(jnp.maximum(a, b)), argnums=(0, 1))(x, y)
    np.testing.assert_allclose(gx, [0.5, 0.0, 1.0])
    np.testing.assert_allclose(gy, [0.5, 1.0, 0.0])
    gx, gy = shardc.grad(lambda a, b: jnp.sum(jnp.minimum(a, b)), argnums=(0, 1))(x, y)
    np.testing.assert_allclose(gx, [0.5, 1.0, 0.0])
    np.testing.assert_allclose(gy, [0.5, 0.0, 1.0])
    z = np.array([1.0, 3.0, 3.0, 2.0], np.float32)
    np.testing.assert_allclose(shardc.grad(jnp.max)(z), [0.0, 0.5, 0.5, 0.0])
    np.testing.assert_allclose(shardc.grad(jnp.min)(-z), [0.0, 0.5, 0.5, 0.0])
    m = np.array([[1.0, 1.0, 0.0], [2.0, 5.0, 5.0]], np.float32)
    np.testing.assert_allclose(shardc.grad(lambda a: jnp.sum(jnp.max(a, axis=1)))(m),
                               [[0.5, 0.5, 0.0], [0.0, 0.5, 0.5]])
    # relu at exactly zero: JAX's relu defines its derivative there as 0 (not a maximum tie)
    np.testing.assert_allclose(shardc.grad(lambda a: jnp.sum(nn.relu(a)))(
        np.array([-1.0, 0.0, 2.0], np.float32)), [0.0, 0.0, 1.0])


SELECT = [
    ("where", lambda x, y: jnp.where(x > 0, x * x, jnp.sin(y)), (X, Y)),
    ("where_scalar_branch", lambda x: jnp.where(x > 0, x, 0.5), (X,)),
    ("where_broadcast", lambda x, s: jnp.where(x > 0, x, s), (X, S)),
    ("lax.select", lambda x, y: lax.select(x > y, x * 2.0, y * y), (X, Y)),
    ("clip", lambda x: jnp.clip(x, -0.5, 0.5), (away_from_zero((3, 4), 21, 0.05, 0.4),)),
    ("clip_outside", lambda x: jnp.clip(x, -0.2, 0.2) * x, (NZ,)),
    ("clip_method", lambda x: x.clip(-1.0, 1.0) + x, (NZ * 0.7,)),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,fn,args", SELECT, ids=[c[0] for c in SELECT])
def test_select_and_clip(name, fn, args, mode):
    check_grads(fn, *args, mode=mode)


def test_clip_gradient_is_zero_outside():
    x = np.array([-2.0, -0.3, 0.4, 3.0], np.float32)
    np.testing.assert_allclose(shardc.grad(lambda a: jnp.sum(jnp.clip(a, -1.0, 1.0)))(x),
                               [0.0, 1.0, 1.0, 0.0])


CONVERT = [
    ("float32", lambda x: x.astype(jnp.float32) * x),
    ("float16_roundtrip", lambda x: jnp.astype(x.astype(np.float16), jnp.float32) * 2.0),
    ("lax.convert", lambda x: lax.convert_element_type(x, np.float32) * x),
    ("through_int_is_constant", lambda x: x.astype(jnp.int32).astype(jnp.float32) + x),
    ("bool_mask", lambda x: (x > 0).astype(jnp.float32) * x),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,fn", CONVERT, ids=[c[0] for c in CONVERT])
def test_convert(name, fn, mode):
    x = uniform((3, 4), 0.1, 0.9, 22) + np.arange(12, dtype=np.float32).reshape(3, 4) - 6
    if name == "float16_roundtrip":
        # float16 rounding makes finite differences meaningless; the gradient is exactly 2
        g = shardc.grad(lambda a: jnp.sum(fn(a)))
        g = shardc.jit(g) if mode == "jit" else g
        out = g(x)
        np.testing.assert_allclose(out, np.full((3, 4), 2.0))
        assert np.asarray(out).dtype == np.float32
        return
    check_grads(fn, x, mode=mode)


X234 = normal((2, 3, 4), 23)
SHAPES = [
    ("reshape", lambda x: jnp.reshape(x, (4, 3)), (X,)),
    ("reshape_-1", lambda x: x.reshape(2, -1), (X,)),
    ("ravel", lambda x: jnp.ravel(x), (X,)),
    ("transpose", lambda x: jnp.transpose(x), (X,)),
    ("transpose_perm", lambda x: jnp.transpose(x, (2, 0, 1)), (X234,)),
    ("T", lambda x: x.T, (X,)),
    ("swapaxes", lambda x: jnp.swapaxes(x, 0, 2), (X234,)),
    ("moveaxis", lambda x: jnp.moveaxis(x, 0, -1), (X234,)),
    ("squeeze", lambda x: jnp.squeeze(x), (normal((3, 1, 4, 1), 24),)),
    ("squeeze_axis", lambda x: jnp.squeeze(x, axis=1), (normal((3, 1, 4), 24),)),
    ("expand_dims", lambda x: jnp.expand_dims(x, 1), (X,)),
    ("newaxis", lambda x: x[:, None, :], (X,)),
    ("broadcast_to", lambda x: jnp.broadcast_to(x, (2, 3, 4)), (X,)),
    ("broadcast_to_expand1", lambda x: jnp.broadcast_to(x, (3, 4)), (normal((3, 1), 25),)),
    ("broadcast_in_dim", lambda x: lax.broadcast_in_dim(x, (3, 2, 4), (0, 2)), (X,)),
    ("concatenate", lambda x, y: jnp.concatenate([x, y, x], axis=1), (X, Y)),
    ("concatenate0", lambda x, y: jnp.concatenate([x, y[:1]]), (X, Y)),
    ("stack", lambda x, y: jnp.stack([x, y], axis=1), (X, Y)),
    ("vstack", lambda x, y: jnp.vstack([x, y]), (X, Y)),
    ("hstack", lambda x, y: jnp.hstack([x, y]), (X, Y)),
    ("split", lambda x: (lambda a, b: a * 2.0 - jnp.sin(b))(*jnp.split(x, 2, axis=1)), (X,)),
    ("split_sections", lambda x: jnp.split(x, [1, 3], axis=1)[1] ** 2, (X,)),
    ("tile", lambda x: jnp.tile(x, (2, 3)), (X,)),
    ("repeat", lambda x: jnp.repeat(x, 2, axis=1), (X,)),
    ("flip", lambda x: jnp.flip(x, 1), (X,)),
    ("flip_all", lambda x: jnp.flip(x), (X,)),
    ("roll", lambda x: jnp.roll(x, 2, axis=1), (X,)),
    ("roll_flat", lambda x: jnp.roll(x, -5), (X,)),
    ("pad", lambda x: jnp.pad(x, ((1, 2), (0, 1))), (X,)),
    ("pad_value", lambda x: jnp.pad(x, 1, constant_values=2.0) * 1.5, (X,)),
    ("lax.reshape", lambda x: lax.reshape(x, (12,)), (X,)),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,fn,args", SHAPES, ids=[c[0] for c in SHAPES])
def test_shapes(name, fn, args, mode):
    check_grads(fn, *args, mode=mode)


X56 = normal((5, 6), 26)
SLICES = [
    ("basic", lambda x: x[1:4, 2:5]),
    ("step", lambda x: x[::2, 1::3]),
    ("negative_step", lambda x: x[::-1]),
    ("negative_step_range", lambda x: x[4:0:-2, ::-3]),
    ("negative_start", lambda x: x[-3:, :-2]),
    ("int_index", lambda x: x[2]),
    ("int_negative", lambda x: x[-1, 1:]),
    ("ellipsis", lambda x: x[..., 3]),
    ("lax.slice", lambda x: lax.slice(x, (1, 0), (5, 6), (2, 3))),
    ("int_array", lambda x: x[np.array([0, 2, 2, 4])]),
    ("int_array_axis1", lambda x: x[:, np.array([5, 0, 0, 3])]),
    ("int_array_negative", lambda x: x[np.array([-1, 1])]),
    ("two_int_arrays", lambda x: x[np.array([0, 1, 1]), np.array([2, 2, 5])]),
    ("int_list", lambda x: x[np.array([3, 3, 1])]),
    ("take", lambda x: jnp.take(x, np.array([1, 1, 5]), axis=1)),
    ("take_flat", lambda x: jnp.take(x, np.array([0, 29, 29, 7]))),
    ("bool_mask_static", lambda x: x[np.array([True, False, True, False, True])]),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,fn", SLICES, ids=[c[0] for c in SLICES])
def test_slicing(name, fn, mode):
    check_grads(fn, X56, mode=mode)


DYNAMIC = [
    ("getitem", lambda x, i: x[i]),
    ("getitem_col", lambda x, i: x[:, i]),
    ("getitem_pair", lambda x, i: x[i, i + 1]),
    ("dynamic_slice", lambda x, i: lax.dynamic_slice(x, (i, i), (2, 3))),
    ("dynamic_slice_clamped", lambda x, i: lax.dynamic_slice(x, (i + 3, 0), (3, 2))),
    ("dynamic_slice_in_dim", lambda x, i: lax.dynamic_slice_in_dim(x, i, 2, axis=1)),
    ("dynamic_index_in_dim", lambda x, i: lax.dynamic_index_in_dim(x, i, 0, keepdims=False)),
    ("dynamic_update_slice",
     lambda x, i: lax.dynamic_update_slice(x, jnp.sin(x[:2, :2]) * 3.0, (i, i + 1))),
    ("dynamic_update_slice_in_dim",
     lambda x, i: lax.dynamic_update_slice_in_dim(x, x[:1] * x[1:2], i, axis=0)),
    ("dynamic_update_index_in_dim",
     lambda x, i: lax.dynamic_update_index_in_dim(x, x[0] ** 2, i, 0)),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,fn", DYNAMIC, ids=[c[0] for c in DYNAMIC])
def test_dynamic_indexing(name, fn, mode):
    """The index is an int32 argument: concrete eagerly, traced under jit."""
    check_grads(fn, X56, np.int32(2), mode=mode)


def test_dynamic_update_slice_update_operand():
    """Gradients reach both the operand (outside the window) and the update (inside)."""
    for mode in MODES:
        check_grads(lambda x, u, i: lax.dynamic_update_slice(x, u, (i, 1)),
                    X56, normal((2, 3), 27), np.int32(3), mode=mode)


AT = [
    ("set", lambda x, y: x.at[1].set(y[0])),
    ("set_slice", lambda x, y: x.at[:, 1:3].set(y[:, :2] * 2.0)),
    ("set_scalar", lambda x, y: x.at[2, 3].set(y[0, 0])),
    ("set_python_scalar", lambda x, y: x.at[0].set(1.5) * y),
    ("add", lambda x, y: x.at[1].add(y[0])),
    ("add_repeated", lambda x, y: x.at[np.array([0, 2, 0])].add(y[:3])),
    ("set_int_array", lambda x, y: x.at[np.array([4, 1])].set(jnp.sin(y[:2]))),
    ("add_step", lambda x, y: x.at[::2].add(y[:3] * y[:3])),
    ("set_negative_step", lambda x, y: x.at[::-2, 1].set(y[:3, 0])),
    ("mul", lambda x, y: x.at[1].mul(y[2])),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,fn", AT, ids=[c[0] for c in AT])
def test_at_updates(name, fn, mode):
    check_grads(fn, X56, normal((5, 6), 28), mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_at_set_traced_index(mode):
    check_grads(lambda x, y, i: x.at[i].set(y[i] * 2.0), X56, normal((5, 6), 29),
                np.int32(3), mode=mode)
    check_grads(lambda x, y, i: x.at[i, 1:4].add(y[0, :3]), X56, normal((5, 6), 29),
                np.int32(1), mode=mode)


PROD_X = away_from_zero((3, 4), 30, 0.5, 1.5)
REDUCTIONS = [
    ("sum", lambda x: jnp.sum(x), X), ("sum_axis0", lambda x: jnp.sum(x, axis=0), X),
    ("sum_axis_neg", lambda x: x.sum(axis=-1, keepdims=True), X),
    ("sum_tuple", lambda x: jnp.sum(x, axis=(0, 2)), X234),
    ("mean", lambda x: jnp.mean(x), X), ("mean_axis1", lambda x: jnp.mean(x, axis=1), X),
    ("mean_keepdims", lambda x: x.mean(axis=(1, 2), keepdims=True), X234),
    ("max", lambda x: jnp.max(x), X), ("max_axis0", lambda x: jnp.max(x, axis=0), X),
    ("max_keepdims", lambda x: jnp.max(x, axis=1, keepdims=True), X),
    ("min", lambda x: jnp.min(x), X), ("min_axis", lambda x: x.min(axis=(0, 1)), X234),
    ("prod", lambda x: jnp.prod(x), PROD_X), ("prod_axis1", lambda x: jnp.prod(x, axis=1), PROD_X),
    ("prod_keepdims", lambda x: x.prod(axis=0, keepdims=True), PROD_X),
    ("var", lambda x: jnp.var(x, axis=1), X), ("std", lambda x: jnp.std(x), X),
    ("cumsum0", lambda x: jnp.cumsum(x, axis=0), X),
    ("cumsum1", lambda x: jnp.cumsum(x, axis=1), X),
    ("cumsum_flat", lambda x: jnp.cumsum(x), X),
    ("sum_of_squares", lambda x: jnp.sum(x * x, axis=0) ** 0.5, POS),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,fn,x", REDUCTIONS, ids=[c[0] for c in REDUCTIONS])
def test_reductions(name, fn, x, mode):
    check_grads(fn, x, mode=mode)


def test_prod_with_zero():
    """The gradient of a product with one zero factor is the product of the others."""
    x = np.array([2.0, 0.0, 3.0, 4.0], np.float32)
    np.testing.assert_allclose(shardc.grad(jnp.prod)(x), [0.0, 24.0, 0.0, 0.0])
    x = np.array([2.0, 0.0, 3.0, 0.0], np.float32)
    np.testing.assert_allclose(shardc.grad(jnp.prod)(x), [0.0, 0.0, 0.0, 0.0])


def test_scatter_set_duplicates_and_out_of_range_updates():
    """Of several 'set' updates to one place only the last is written and only it gets a
    cotangent; out-of-range updates are dropped and get none (as in JAX); jvp agrees."""
    y = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    w = np.array([1.0, 10.0, 100.0], np.float32)
    idx = np.array([0, 0, 5, 1])
    for mode in MODES:
        for update, want in (("set", [0.0, 1.0, 0.0, 10.0]), ("add", [1.0, 1.0, 0.0, 10.0])):
            def f(v, i):
                return jnp.sum(getattr(jnp.zeros(3).at[i], update)(v) * w)
            g = shardc.grad(f)
            g = shardc.jit(g) if mode == "jit" else g
            np.testing.assert_allclose(g(y, idx), want)
            _, t = shardc.jvp(lambda v: f(v, idx), (y,), (np.ones(4, np.float32),))
            np.testing.assert_allclose(t, sum(want))
    # two index arrays, duplicate pairs; the operand loses exactly the overwritten places
    both = shardc.grad(lambda x, v: jnp.sum(x.at[np.array([1, 1]), np.array([2, 2])].set(v)),
                       argnums=(0, 1))(np.ones((3, 3), np.float32), np.ones(2, np.float32))
    np.testing.assert_allclose(both[1], [0.0, 1.0])
    assert float(np.asarray(both[0]).sum()) == 8.0 and float(both[0][1, 2]) == 0.0


def test_gather_out_of_range_indices_read_clamped_and_get_no_cotangent():
    """An out-of-range index reads the clamped element, but its cotangent is dropped (JAX's
    gather promises in-range indices; its transpose, a scatter-add, skips the others); only
    mode='clip' sends it to the element read. Values as JAX 0.10.2 gives."""
    y = np.array([1.0, 2.0, 3.0], np.float32)
    i = np.array([5, -9, -1], np.int32)
    np.testing.assert_allclose(shardc.jit(lambda a, j: a[j])(y, i), [3.0, 1.0, 3.0])
    np.testing.assert_allclose(shardc.jit(shardc.grad(lambda a, j: jnp.sum(a[j])))(y, i),
                               [0.0, 0.0, 1.0])
    for mode, want in ((None, [0.0, 0.0, 1.0]), ("promise_in_bounds", [0.0, 0.0, 1.0]),
                       ("fill", [0.0, 0.0, 1.0]), ("clip", [1.0, 0.0, 2.0])):
        g = shardc.grad(lambda a: jnp.sum(a.at[i].get(mode=mode)))(y)
        np.testing.assert_allclose(g, want, err_msg=str(mode))
    # several index arrays: a pair with any coordinate out of range gets nothing
    m = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    rows, cols = np.array([0, 3, -4, 2]), np.array([5, 1, -1, 1])
    np.testing.assert_allclose(shardc.jit(lambda a: a[rows, cols])(m), [3.0, 9.0, 3.0, 9.0])
    want = np.zeros((3, 4), np.float32)
    want[2, 1] = 1.0
    for run in (shardc.grad, lambda f: shardc.jit(shardc.grad(f))):
        np.testing.assert_allclose(run(lambda a: jnp.sum(a[rows, cols]))(m), want)
    # jnp.take reads out-of-range indices as fill values (no cotangent goes back), and with
    # mode='clip' clamps as numpy does (negative indices to 0); values as JAX 0.10.2 gives.
    np.testing.assert_allclose(
        shardc.jit(shardc.grad(lambda a, j: jnp.sum(jnp.take(a, j) * np.arange(1.0, 4.0))))(y, i),
        [0.0, 0.0, 3.0])
    np.testing.assert_allclose(
        shardc.jit(shardc.grad(lambda a, j: jnp.sum(jnp.take(a, j, mode="clip")
                                                    * np.arange(1.0, 4.0))))(y, i),
        [5.0, 0.0, 1.0])


def test_pow_with_zero_exponent():
    """d/dx x ** y is y * x ** (y - 1) for an inexact exponent, nan at x == y == 0 (0 * 0 **
    -1, JAX's rule); an integer exponent's is 0 where it is 0, x == 0 included (JAX's rule
    for integer exponents); d/dy at x == 0 is 0 (log 0 is replaced)."""
    assert np.isnan(float(shardc.grad(lambda v: jnp.power(v, 0.0))(0.0)))
    for x in (2.0, -1.5):
        assert float(shardc.grad(lambda v: jnp.power(v, 0.0))(x)) == 0.0
    assert float(shardc.grad(lambda v: jnp.sum(v ** jnp.array([0, 1, 2])))(0.0)) == 1.0
    ints = np.array([0, 1, 0], np.int32)
    np.testing.assert_array_equal(
        shardc.grad(lambda v: jnp.sum(lax.pow(v, ints)))(np.array([0.0, 0.0, np.nan], np.float32)),
        [0.0, 1.0, 0.0])
    dv, de = shardc.grad(lambda v, e: jnp.sum(v ** e), argnums=(0, 1))(
        np.zeros(2, np.float32), np.array([0.0, 2.0], np.float32))
    np.testing.assert_array_equal(np.asarray(dv), [np.nan, 0.0])
    np.testing.assert_array_equal(np.asarray(de), [0.0, 0.0])
    np.testing.assert_allclose(shardc.grad(lambda v: v ** 1.0)(0.0), 1.0)
    assert float(shardc.grad(lambda v: v ** 0.5)(0.0)) == np.inf        # as JAX's


def test_pow_second_derivatives_at_a_zero_exponent():
    # JAX's issue 12033: d2/dx dy x ** y at (4, 0) is 1/x, not 0 (the float formula's own
    # derivative in y)
    from shardc import lax
    hessian = shardc.jacfwd(shardc.jacfwd(lax.pow, (0, 1)), (0, 1))(4.0, 0.0)
    np.testing.assert_allclose(np.asarray(hessian, dtype=np.float64),
                               [[0.0, 0.25], [0.25, np.log(4.0) ** 2]], rtol=1e-6)
    reverse = shardc.jacrev(shardc.jacrev(lax.pow, (0, 1)), (0, 1))(4.0, 0.0)
    np.testing.assert_allclose(np.asarray(reverse, dtype=np.float64),
                               [[0.0, 0.25], [0.25, np.log(4.0) ** 2]], rtol=1e-6)


A23 = normal((2, 3), 31)
B34 = normal((3, 4), 32)
V3 = normal((3,), 33)
W3 = normal((3,), 34)
BA = normal((2, 3, 4), 35)
BB = normal((2, 4, 5), 36)
LINALG = [
    ("dot_mat", jnp.dot, (A23, B34)), ("dot_vec", jnp.dot, (V3, W3)),
    ("dot_matvec", jnp.dot, (A23, V3)), ("matmul", jnp.matmul, (A23, B34)),
    ("matmul_op", lambda a, b: a @ b, (A23, B34)),
    ("matmul_vecmat", lambda v, b: v @ b, (V3, B34)),
    ("matmul_batched", jnp.matmul, (BA, BB)),
    ("matmul_broadcast_batch", jnp.matmul, (BA, normal((4, 2), 37))),
    ("method_dot", lambda a, b: a.dot(b), (A23, B34)),
    ("vdot", jnp.vdot, (V3, W3)), ("inner", jnp.inner, (V3, W3)),
    ("outer", jnp.outer, (V3, W3)),
    ("tensordot", lambda a, b: jnp.tensordot(a, b, axes=([1, 2], [0, 1])),
     (BA, normal((3, 4, 2), 38))),
    ("einsum_ij_jk", lambda a, b: jnp.einsum("ij,jk->ik", a, b), (A23, B34)),
    ("einsum_batch", lambda a, b: jnp.einsum("bij,bjk->bik", a, b), (BA, BB)),
    ("einsum_transposed_out", lambda a, b: jnp.einsum("bij,bjk->kib", a, b), (BA, BB)),
    ("einsum_trace_like", lambda a, b: jnp.einsum("ij,ij->i", a, b), (A23, normal((2, 3), 39))),
    ("einsum_outer", lambda a, b: jnp.einsum("i,j->ij", a, b), (V3, W3)),
    ("einsum_sum", lambda a: jnp.einsum("ijk->k", a), (BA,)),
    ("dot_general_batch", lambda a, b: lax.dot_general(a, b, (((2,), (1,)), ((0,), (0,)))),
     (BA, BB)),
    ("dot_general_batch_not_leading",
     lambda a, b: lax.dot_general(a, b, (((0,), (2,)), ((2,), (0,)))),
     (normal((3, 5, 4), 40), normal((4, 2, 3), 41))),
    ("dot_general_two_contracting",
     lambda a, b: lax.dot_general(a, b, (((1, 0), (0, 2)), ((), ()))),
     (normal((3, 2, 5), 42), normal((2, 4, 3), 43))),
    ("dot_general_batch2_contract2",
     lambda a, b: lax.dot_general(a, b, (((3, 1), (1, 2)), ((0, 2), (0, 3)))),
     (normal((2, 3, 4, 5), 44), normal((2, 5, 3, 4), 45))),
    ("dot_general_self", lambda a: lax.dot_general(a, a, (((1,), (1,)), ((), ()))), (A23,)),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,fn,args", LINALG, ids=[c[0] for c in LINALG])
def test_linear_algebra(name, fn, args, mode):
    check_grads(fn, *args, mode=mode)


NN = [
    ("relu", nn.relu, NZ), ("softmax", nn.softmax, X),
    ("softmax_axis0", lambda x: nn.softmax(x, axis=0), X),
    ("log_softmax", nn.log_softmax, X),
    ("log_softmax_axis0", lambda x: nn.log_softmax(x, axis=0), X),
    ("logsumexp", nn.logsumexp, X),
    ("logsumexp_axis", lambda x: nn.logsumexp(x, axis=1), X),
    ("logsumexp_keepdims", lambda x: nn.logsumexp(x, axis=0, keepdims=True), X),
    ("gelu", nn.gelu, X), ("silu", nn.silu, X),
    ("cross_entropy", lambda x: -jnp.sum(nn.log_softmax(x) * nn.one_hot(
        np.array([0, 3, 1]), 4)), X),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,fn,x", NN, ids=[c[0] for c in NN])
def test_nn(name, fn, x, mode):
    check_grads(fn, x, mode=mode)


def test_softmax_tie_in_max_is_harmless():
    """softmax subtracts the (tied) maximum; the gradient is still softmax's."""
    x = np.array([[1.0, 2.0, 2.0], [0.0, 0.0, 0.0]], np.float32)
    for mode in MODES:
        check_grads(nn.softmax, x, mode=mode)
        check_grads(nn.logsumexp, x, mode=mode)


# --- control flow --------------------------------------------------------------------------------

def _scan_fn(w, xs):
    def body(carry, x):
        h, total = carry
        h = jnp.tanh(h * w + x)
        total = total + jnp.sum(h)
        return (h, total), h * x
    (h, total), ys = lax.scan(body, (jnp.zeros_like(w), 0.0), xs)
    return total + jnp.sum(ys) + jnp.sum(h * h)


def _scan_reverse(w, xs):
    def body(c, x):
        c = jnp.sin(c * x) + w
        return c, c * w
    c, ys = lax.scan(body, w * 0.5, xs, reverse=True)
    return jnp.sum(ys) * 0.3 + jnp.sum(c)


def _scan_consts_only(w, xs):
    def body(c, _):
        return c * w + 1.0, jnp.sum(c)
    c, ys = lax.scan(body, w, None, length=4)
    return jnp.sum(c) + jnp.sum(ys)


def _fori(w, xs):
    def body(i, c):
        return jnp.sin(c) * w + xs[i]
    return lax.fori_loop(0, 3, body, w)


def _fori_tuple(w, xs):
    def body(i, carry):
        a, b = carry
        return a * jnp.cos(b), b + a * w
    a, b = lax.fori_loop(1, 4, body, (w, xs[0]))
    return a + b


def _cond(w, xs):
    return lax.cond(jnp.sum(xs) > 0, lambda a, b: jnp.sin(a) * b[0],
                    lambda a, b: a * a + b[1], w, xs)


def _cond_const_pred(pred):
    def f(w, xs):
        return lax.cond(pred, lambda a: jnp.exp(a) * xs[0], lambda a: jnp.tanh(a) - xs[1], w)
    return f


def _switch(w, xs):
    return lax.switch(1, [lambda a: a, lambda a: a * xs[0], lambda a: jnp.sin(a)], w)


CONTROL = [
    ("scan", _scan_fn, normal((3,), 46), normal((5, 3), 47)),
    ("scan_reverse", _scan_reverse, normal((3,), 48), normal((4, 3), 49)),
    ("scan_no_xs", _scan_consts_only, uniform((3,), 0.2, 0.9, 50), normal((2, 3), 51)),
    ("fori_static", _fori, normal((3,), 52), normal((4, 3), 53)),
    ("fori_tuple", _fori_tuple, normal((3,), 54), normal((4, 3), 55)),
    ("cond_true", _cond, normal((3,), 56), np.abs(normal((2, 3), 57))),
    ("cond_false", _cond, normal((3,), 56), -np.abs(normal((2, 3), 57))),
    ("cond_py_true", _cond_const_pred(True), normal((3,), 58), normal((2, 3), 59)),
    ("cond_py_false", _cond_const_pred(False), normal((3,), 58), normal((2, 3), 59)),
    ("switch", _switch, normal((3,), 60), normal((2, 3), 61)),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,fn,w,xs", CONTROL, ids=[c[0] for c in CONTROL])
def test_control_flow(name, fn, w, xs, mode):
    check_grads(fn, w, xs, mode=mode)


def test_cond_traced_predicate_both_branches_under_jit():
    """Under jit the predicate is traced: the same compiled gradient takes either branch."""
    loss = weighted(_cond)
    g = shardc.jit(shardc.grad(loss, argnums=(0, 1)))
    w = normal((3,), 62)
    for sign in (1.0, -1.0):
        xs = (sign * np.abs(normal((2, 3), 63))).astype(np.float32)
        got = g(w, xs)
        want = numeric_grad(loss, [w, xs], (0, 1))
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)


# ================================================================================================
# 2. The dot-product test on random programs: <t, vjp(ct)> == <jvp(t), ct>
# ================================================================================================

# Each op maps the running 2-D value ``h`` (and the inputs it introduces) to a new 2-D value.
# ``shape_of`` gives the new shape; ``new_inputs`` the shapes of the inputs the op reads.

def _op(name, fn, shape_of=lambda s, a: s, new_inputs=lambda s, a: []):
    return dict(name=name, fn=fn, shape_of=shape_of, new_inputs=new_inputs)


def _scan_rows(h):
    def body(c, row):
        c = jnp.tanh(c + row)
        return c, c * row
    last, ys = lax.scan(body, jnp.zeros_like(h[0]), h)
    return ys + last


def _cond_op(h):
    return lax.cond(jnp.sum(h) > 0, lambda v: jnp.sin(v) * 2.0, lambda v: v * v, h)


def _fori_op(h):
    return lax.fori_loop(0, 2, lambda i, v: jnp.tanh(v) * 1.5 + v * 0.1, h)


OPS = [
    # elementwise
    _op("sin", lambda h, ins, a: jnp.sin(h)),
    _op("tanh", lambda h, ins, a: jnp.tanh(h)),
    _op("logistic", lambda h, ins, a: lax.logistic(h)),
    _op("square", lambda h, ins, a: h * h * 0.5),
    _op("exp_bounded", lambda h, ins, a: jnp.exp(jnp.tanh(h))),
    _op("softplus", lambda h, ins, a: jnp.log1p(jnp.exp(-jnp.abs(h))) + jnp.maximum(h, 0.0)),
    _op("mul_input", lambda h, ins, a: h * ins[0], new_inputs=lambda s, a: [s]),
    _op("add_input", lambda h, ins, a: h + ins[0], new_inputs=lambda s, a: [s]),
    _op("div_input", lambda h, ins, a: h / (1.0 + ins[0] * ins[0]), new_inputs=lambda s, a: [s]),
    _op("scale_rank0", lambda h, ins, a: h * ins[0] - ins[0], new_inputs=lambda s, a: [()]),
    _op("where", lambda h, ins, a: jnp.where(h > 0, h, jnp.sin(h) * 0.3)),
    # reductions that keep the shape known
    _op("center", lambda h, ins, a: h - jnp.mean(h, axis=a % 2, keepdims=True)),
    _op("times_sum", lambda h, ins, a: h * jnp.sum(h, axis=a % 2, keepdims=True) * 0.3),
    _op("sum_axis", lambda h, ins, a: jnp.sum(h, axis=a % 2, keepdims=True),
        shape_of=lambda s, a: (1, s[1]) if a % 2 == 0 else (s[0], 1)),
    _op("softmax", lambda h, ins, a: nn.softmax(h, axis=a % 2)),
    _op("log_softmax", lambda h, ins, a: nn.log_softmax(h, axis=a % 2)),
    _op("max_plus", lambda h, ins, a: h + jnp.max(h, axis=a % 2, keepdims=True)),
    _op("prod_axis", lambda h, ins, a: jnp.prod(jnp.tanh(h) + 1.5, axis=a % 2, keepdims=True),
        shape_of=lambda s, a: (1, s[1]) if a % 2 == 0 else (s[0], 1)),
    _op("cumsum", lambda h, ins, a: jnp.cumsum(h, axis=a % 2)),
    # matmuls
    _op("matmul_right", lambda h, ins, a: h @ ins[0],
        shape_of=lambda s, a: (s[0], 1 + a % 4), new_inputs=lambda s, a: [(s[1], 1 + a % 4)]),
    _op("matmul_left", lambda h, ins, a: jnp.matmul(ins[0], h),
        shape_of=lambda s, a: (1 + a % 4, s[1]), new_inputs=lambda s, a: [(1 + a % 4, s[0])]),
    _op("einsum_t", lambda h, ins, a: jnp.einsum("ij,kj->ik", h, ins[0]),
        shape_of=lambda s, a: (s[0], 1 + a % 3), new_inputs=lambda s, a: [(1 + a % 3, s[1])]),
    _op("gram", lambda h, ins, a: h.T @ h * 0.2, shape_of=lambda s, a: (s[1], s[1])),
    # reshapes and data movement
    _op("transpose", lambda h, ins, a: h.T, shape_of=lambda s, a: (s[1], s[0])),
    _op("reshape", lambda h, ins, a: jnp.reshape(h, (h.shape[1], h.shape[0])),
        shape_of=lambda s, a: (s[1], s[0])),
    _op("flatten_row", lambda h, ins, a: jnp.reshape(h, (1, -1)),
        shape_of=lambda s, a: (1, s[0] * s[1])),
    _op("flip", lambda h, ins, a: jnp.flip(h, a % 2)),
    _op("concat_sin", lambda h, ins, a: jnp.concatenate([h, jnp.sin(h)], axis=a % 2),
        shape_of=lambda s, a: (2 * s[0], s[1]) if a % 2 == 0 else (s[0], 2 * s[1])),
    _op("step_slice", lambda h, ins, a: h[::-2] if h.shape[0] > 1 else h,
        shape_of=lambda s, a: ((s[0] + 1) // 2, s[1]) if s[0] > 1 else s),
    _op("gather_rows", lambda h, ins, a: h[np.array([a % h.shape[0], 0, a % h.shape[0]])],
        shape_of=lambda s, a: (3, s[1])),
    _op("pad", lambda h, ins, a: jnp.pad(h, ((1, 0), (0, a % 2))),
        shape_of=lambda s, a: (s[0] + 1, s[1] + a % 2)),
    _op("at_add", lambda h, ins, a: h.at[0].add(jnp.sin(h[-1]))),
    # duplicate and out-of-range scatter indices: the last 'set' wins, out-of-range is dropped
    _op("at_set_dup", lambda h, ins, a: h.at[np.array([0, 0, 9])].set(
        jnp.stack([h[-1], jnp.sin(h[0]), h[-1] * 3.0]))),
    # control flow
    _op("scan_rows", lambda h, ins, a: _scan_rows(h)),
    _op("cond", lambda h, ins, a: _cond_op(h)),
    _op("fori", lambda h, ins, a: _fori_op(h)),
]
OP_NAMES = [op["name"] for op in OPS]
_OP_BY_NAME = {op["name"]: op for op in OPS}


@st.composite
def random_programs(draw):
    """(steps, input shapes): steps are (op name, its integer parameter, input indices)."""
    shape = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    shapes = [shape]
    steps = []
    for _ in range(draw(st.integers(1, 6))):
        name = draw(st.sampled_from(OP_NAMES))
        a = draw(st.integers(0, 11))
        op = _OP_BY_NAME[name]
        new = op["new_inputs"](shape, a)
        indices = list(range(len(shapes), len(shapes) + len(new)))
        shapes.extend(new)
        steps.append((name, a, indices))
        shape = op["shape_of"](shape, a)
        if shape[0] * shape[1] > 64:       # keep programs small
            steps.append(("sum_axis", 0, []))
            shape = (1, shape[1])
    return steps, shapes


def build_program(steps):
    """The random program: a list of inputs -> (the final value, a scalar of it), a pytree."""
    def f(inputs):
        h = inputs[0]
        for name, a, indices in steps:
            h = _OP_BY_NAME[name]["fn"](h, [inputs[k] for k in indices], a)
        return {"h": h, "scalar": jnp.sum(jnp.sin(h))}
    return f


def _leaves(tree):
    return [np.asarray(v, np.float64) for v in shardc.tree_util.tree_leaves(tree)]


def _inner(a, b):
    return float(sum(np.sum(x * y) for x, y in zip(_leaves(a), _leaves(b))))


def _norm(a):
    return float(np.sqrt(sum(np.sum(x * x) for x in _leaves(a))))


def _random_like(tree, r):
    return shardc.tree_util.tree_map(
        lambda v: r.standard_normal(np.shape(v)).astype(np.float32), tree)


def dot_product_check(f, primals, r, jit=False):
    tangents = _random_like(primals, r)
    jvp = lambda p, t: shardc.jvp(f, (p,), (t,))
    vjp = lambda p, c: shardc.vjp(f, p)[1](c)
    if jit:
        jvp, vjp = shardc.jit(jvp), shardc.jit(vjp)
    out, out_tangent = jvp(primals, tangents)
    cts = _random_like(out, r)
    (in_cts,) = vjp(primals, cts)
    assert shardc.tree_util.tree_structure(in_cts) == shardc.tree_util.tree_structure(primals)
    for c, p in zip(shardc.tree_util.tree_leaves(in_cts), shardc.tree_util.tree_leaves(primals)):
        assert np.shape(c) == np.shape(p)
    lhs = _inner(tangents, in_cts)
    rhs = _inner(out_tangent, cts)
    # Cauchy-Schwarz bounds each side: the tolerance is relative to that bound
    scale = _norm(tangents) * _norm(in_cts) + _norm(out_tangent) * _norm(cts)
    assert abs(lhs - rhs) <= 1e-4 * scale + 1e-6, (lhs, rhs, scale)
    return out, tangents, out_tangent


@settings(max_examples=100, **SETTINGS)
@given(program=random_programs(), seed=st.integers(0, 2 ** 16), jit=st.booleans())
def test_dot_product_random_programs(program, seed, jit):
    steps, shapes = program
    r = rng(seed)
    primals = [r.standard_normal(s).astype(np.float32) * (1.0 if k == 0 else 0.7)
               for k, s in enumerate(shapes)]
    f = build_program(steps)
    dot_product_check(f, primals, r, jit=jit)


@settings(max_examples=30, **SETTINGS)
@given(program=random_programs(), seed=st.integers(0, 2 ** 16))
def test_jvp_of_random_programs_against_finite_differences(program, seed):
    """The tangent the dot-product test trusts is the directional derivative."""
    steps, shapes = program
    r = rng(seed)
    primals = [r.standard_normal(s).astype(np.float32) for s in shapes]
    f = build_program(steps)
    tangents = _random_like(primals, r)
    _, out_tangent = shardc.jvp(f, (primals,), (tangents,))
    eps = 1e-3
    shifted = lambda sign: f([jnp.asarray(p + sign * eps * t) for p, t in zip(primals, tangents)])
    plus, minus = _leaves(shifted(1.0)), _leaves(shifted(-1.0))
    for got, hi, lo in zip(_leaves(out_tangent), plus, minus):
        numeric = (hi - lo) / (2 * eps)
        scale = 1.0 + np.max(np.abs(hi)) + np.max(np.abs(numeric))
        np.testing.assert_allclose(got, numeric, atol=2e-2 * scale)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("name", OP_NAMES)
def test_dot_product_each_op(name, jit):
    """Every op of the menu, alone and between two others, whatever hypothesis draws."""
    r = rng(OP_NAMES.index(name))
    for shape, a in (((3, 4), 1), ((2, 1), 2), ((1, 3), 5)):
        for steps in ([(name, a, [])], [("tanh", 0, []), (name, a, []), ("sin", 0, [])]):
            shapes = [shape]
            s = shape
            fixed = []
            for step_name, step_a, _ in steps:
                op = _OP_BY_NAME[step_name]
                new = op["new_inputs"](s, step_a)
                fixed.append((step_name, step_a, list(range(len(shapes), len(shapes) + len(new)))))
                shapes.extend(new)
                s = op["shape_of"](s, step_a)
            primals = [r.standard_normal(sh).astype(np.float32) for sh in shapes]
            out, _, _ = dot_product_check(build_program(fixed), primals, r, jit=jit)
            assert np.shape(out["h"]) == s


# ================================================================================================
# 3. The API
# ================================================================================================

def _f2(x, y):
    return jnp.sum(jnp.sin(x) * y * y)


def test_grad_argnums_int_and_tuple():
    x, y = normal((3,), 70), normal((3,), 71)
    dx = np.cos(x) * y * y
    dy = 2 * np.sin(x) * y
    np.testing.assert_allclose(shardc.grad(_f2)(x, y), dx, rtol=1e-6)
    np.testing.assert_allclose(shardc.grad(_f2, argnums=1)(x, y), dy, rtol=1e-6)
    both = shardc.grad(_f2, argnums=(0, 1))(x, y)
    assert isinstance(both, tuple) and len(both) == 2
    np.testing.assert_allclose(both[0], dx, rtol=1e-6)
    np.testing.assert_allclose(both[1], dy, rtol=1e-6)
    swapped = shardc.grad(_f2, argnums=(1, 0))(x, y)
    np.testing.assert_allclose(swapped[0], dy, rtol=1e-6)
    np.testing.assert_allclose(swapped[1], dx, rtol=1e-6)
    single = shardc.grad(_f2, argnums=(1,))(x, y)
    assert isinstance(single, tuple) and len(single) == 1
    np.testing.assert_allclose(single[0], dy, rtol=1e-6)


def test_grad_non_differentiated_arguments_pass_through():
    """Integer, static and keyword arguments outside argnums are fine."""
    def f(x, n, scale=1.0):
        return jnp.sum(x ** 2) * n * scale
    x = normal((4,), 72)
    np.testing.assert_allclose(shardc.grad(f)(x, 3, scale=0.5), 3.0 * x, rtol=1e-6)
    np.testing.assert_allclose(shardc.grad(f)(x, np.int32(2)), 4.0 * x, rtol=1e-6)


def test_grad_python_scalar_and_rank0():
    g = shardc.grad(lambda x: x * x * x)
    np.testing.assert_allclose(g(2.0), 12.0)
    np.testing.assert_allclose(g(np.float32(-1.0)), 3.0)
    out = g(2.0)
    assert np.shape(out) == () and np.asarray(out).dtype == np.float32


def test_grad_pytree_argument():
    params = {"w": normal((3, 2), 73), "b": (normal((2,), 74), np.float32(0.5))}
    x = normal((4, 3), 75)

    def loss(p, x):
        h = jnp.tanh(x @ p["w"] + p["b"][0]) * p["b"][1]
        return jnp.sum(h * h)

    g = shardc.grad(loss)(params, x)
    assert shardc.tree_util.tree_structure(g) == shardc.tree_util.tree_structure(params)
    flat, unflatten = _flatten_params(params)
    numeric = numeric_grad(lambda v: loss(unflatten(v), x), [flat], (0,))[0]
    np.testing.assert_allclose(_flatten_params(g)[0], numeric, rtol=RTOL, atol=ATOL)


def _flatten_params(params):
    leaves, treedef = shardc.tree_util.tree_flatten(params)
    shapes = [np.shape(v) for v in leaves]
    flat = np.concatenate([np.ravel(np.asarray(v, np.float32)) for v in leaves])

    def unflatten(vec):
        out, k = [], 0
        for s in shapes:
            n = int(np.prod(s))
            out.append(jnp.reshape(vec[k:k + n], s))
            k += n
        return shardc.tree_util.tree_unflatten(treedef, out)

    return flat, unflatten


def test_has_aux():
    x = normal((3,), 76)

    def f(x):
        y = jnp.sin(x)
        return jnp.sum(y * y), {"y": y, "n": 3, "label": "aux"}

    g, aux = shardc.grad(f, has_aux=True)(x)
    np.testing.assert_allclose(g, 2 * np.sin(x) * np.cos(x), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(aux["y"], np.sin(x), rtol=1e-6)
    assert aux["n"] == 3 and aux["label"] == "aux"
    (value, aux2), g2 = shardc.value_and_grad(f, has_aux=True)(x)
    np.testing.assert_allclose(value, np.sum(np.sin(x) ** 2), rtol=1e-6)
    np.testing.assert_allclose(g2, g)
    np.testing.assert_allclose(aux2["y"], aux["y"])
    # with argnums and under jit
    gj, auxj = shardc.jit(shardc.grad(lambda a, b: (jnp.sum(a * b), a + b), argnums=(0, 1),
                                      has_aux=True))(x, 2 * x)
    np.testing.assert_allclose(gj[0], 2 * x)
    np.testing.assert_allclose(gj[1], x)
    np.testing.assert_allclose(auxj, 3 * x, rtol=1e-6)


def test_value_and_grad():
    x, y = normal((3,), 77), normal((3,), 78)
    value, g = shardc.value_and_grad(_f2)(x, y)
    np.testing.assert_allclose(value, np.sum(np.sin(x) * y * y), rtol=1e-5)
    np.testing.assert_allclose(g, np.cos(x) * y * y, rtol=1e-5)
    value, (gx, gy) = shardc.value_and_grad(_f2, argnums=(0, 1))(x, y)
    np.testing.assert_allclose(gy, 2 * np.sin(x) * y, rtol=1e-5)
    value_j, g_j = shardc.jit(shardc.value_and_grad(_f2))(x, y)
    np.testing.assert_array_equal(value_j, shardc.value_and_grad(_f2)(x, y)[0])
    np.testing.assert_array_equal(g_j, shardc.value_and_grad(_f2)(x, y)[1])


def test_vjp_pytrees():
    a, b, c = normal((2, 3), 79), normal((3,), 80), normal((), 81)

    def f(p):
        x, (y, s) = p["x"], p["ys"]
        return {"prod": x * y, "total": (jnp.sum(x) * s, jnp.sin(y))}

    primals = {"x": a, "ys": (b, c)}
    out, vjp_fun = shardc.vjp(f, primals)
    np.testing.assert_allclose(out["prod"], a * b, rtol=1e-6)
    ct = {"prod": normal((2, 3), 82), "total": (np.float32(1.5), normal((3,), 83))}
    (g,) = vjp_fun(ct)
    assert shardc.tree_util.tree_structure(g) == shardc.tree_util.tree_structure(primals)
    np.testing.assert_allclose(g["x"], ct["prod"] * b + 1.5 * c, rtol=1e-5)
    np.testing.assert_allclose(g["ys"][0], np.sum(ct["prod"] * a, 0) + ct["total"][1] * np.cos(b),
                               rtol=1e-5)
    np.testing.assert_allclose(g["ys"][1], 1.5 * np.sum(a), rtol=1e-5)
    # several positional primals
    out, vjp2 = shardc.vjp(lambda u, v: u * v, a, b)
    gu, gv = vjp2(np.ones((2, 3), np.float32))
    np.testing.assert_allclose(gu, np.broadcast_to(b, (2, 3)))
    np.testing.assert_allclose(gv, a.sum(0), rtol=1e-6)
    # the vjp function can be called repeatedly, and under jit
    g2 = vjp2(2 * np.ones((2, 3), np.float32))
    np.testing.assert_allclose(g2[1], 2 * a.sum(0), rtol=1e-6)


def test_vjp_cotangent_structure_mismatch():
    _, vjp_fun = shardc.vjp(lambda x: (x, x * 2), normal((3,), 84))
    with pytest.raises(ValueError, match="unexpected tree structure"):
        vjp_fun(np.ones(3, np.float32))


@pytest.mark.parametrize("ct, got", [
    (np.arange(4, dtype=np.float32), "float32[4]"), (np.float32(1), "float32[]"),
    (np.ones(3, np.float16), "float16[3]"), (np.ones(3, np.int32), "int32[3]")])
def test_vjp_cotangent_type_mismatch(ct, got):
    """JAX's check: a cotangent of another shape or dtype than its output is refused (it
    gave a gradient of the wrong shape)."""
    _, vjp_fun = shardc.vjp(lambda x: x * 2, np.ones(3, np.float32))
    with pytest.raises(ValueError, match=rf"got {re.escape(got)}, but expected float32\[3\] "
                                         r"because the corresponding output"):
        vjp_fun(ct)
    # a weak Python number is its output's type; an integer output takes any zeros
    _, scalar_vjp = shardc.vjp(lambda x: x.sum(), np.ones(3, np.float32))
    np.testing.assert_array_equal(scalar_vjp(1.0)[0], np.ones(3))
    _, int_vjp = shardc.vjp(lambda x: (x * 2, jnp.round(x).astype(jnp.int32)),
                            np.ones(3, np.float32))
    np.testing.assert_array_equal(int_vjp((np.ones(3, np.float32), np.zeros(3, np.int32)))[0],
                                  2 * np.ones(3))


def test_vjp_has_aux():
    x = normal((3,), 85)
    out, vjp_fun, aux = shardc.vjp(lambda v: (jnp.sin(v), jnp.cos(v)), x, has_aux=True)
    np.testing.assert_allclose(aux, np.cos(x), rtol=1e-6)
    (g,) = vjp_fun(np.ones(3, np.float32))
    np.testing.assert_allclose(g, np.cos(x), rtol=1e-6)


def test_jvp_pytrees():
    a, b = normal((2, 3), 86), normal((3,), 87)
    ta, tb = normal((2, 3), 88), normal((3,), 89)

    def f(p, q):
        return {"m": p["a"] * q, "s": (jnp.sum(jnp.exp(p["a"])),)}

    out, tangent = shardc.jvp(f, ({"a": a}, b), ({"a": ta}, tb))
    np.testing.assert_allclose(out["m"], a * b, rtol=1e-6)
    np.testing.assert_allclose(tangent["m"], ta * b + a * tb, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tangent["s"][0], np.sum(np.exp(a) * ta), rtol=1e-5)
    with pytest.raises(TypeError, match="must have the same tree structure"):
        shardc.jvp(f, ({"a": a}, b), ({"a": ta},))
    # has_aux
    out, tangent, aux = shardc.jvp(lambda v: (v * v, "aux"), (a,), (ta,), has_aux=True)
    np.testing.assert_allclose(tangent, 2 * a * ta, rtol=1e-5)
    assert aux == "aux"


def test_jvp_and_vjp_give_the_same_jacobian():
    """Column by column from jvp, row by row from vjp."""
    def f(x, y):
        return (jnp.tanh(x @ y), jnp.sum(x * x, axis=1))

    x, y = normal((2, 3), 90), normal((3, 2), 91)
    n_in = x.size + y.size
    out, vjp_fun = shardc.vjp(f, x, y)
    n_out = sum(np.size(o) for o in out)
    by_jvp = np.zeros((n_out, n_in))
    for k in range(n_in):
        e = np.zeros(n_in, np.float32)
        e[k] = 1
        _, t = shardc.jvp(f, (x, y), (e[:6].reshape(2, 3), e[6:].reshape(3, 2)))
        by_jvp[:, k] = np.concatenate([np.ravel(v) for v in t])
    by_vjp = np.zeros((n_out, n_in))
    for k in range(n_out):
        e = np.zeros(n_out, np.float32)
        e[k] = 1
        gx, gy = vjp_fun((e[:4].reshape(2, 2), e[4:]))
        by_vjp[k] = np.concatenate([np.ravel(gx), np.ravel(gy)])
    np.testing.assert_allclose(by_jvp, by_vjp, rtol=1e-5, atol=1e-6)


SECOND_DERIVATIVES = [
    ("sin", jnp.sin, lambda x: -np.sin(x), 0.3),
    ("cos", jnp.cos, lambda x: -np.cos(x), 0.3),
    ("tan", jnp.tan, lambda x: 2 * np.tan(x) / np.cos(x) ** 2, 0.3),
    ("tanh", jnp.tanh, lambda x: -2 * np.tanh(x) * (1 - np.tanh(x) ** 2), 0.3),
    ("exp", jnp.exp, np.exp, 0.3),
    ("log", jnp.log, lambda x: -1 / x ** 2, 0.3),
    ("log1p", jnp.log1p, lambda x: -1 / (1 + x) ** 2, 0.3),
    ("expm1", jnp.expm1, np.exp, 0.3),
    ("sqrt", jnp.sqrt, lambda x: -0.25 * x ** -1.5, 0.3),
    ("rsqrt", lax.rsqrt, lambda x: 0.75 * x ** -2.5, 0.3),
    ("logistic", lax.logistic,
     lambda x: (lambda s: s * (1 - s) * (1 - 2 * s))(1 / (1 + np.exp(-x))), 0.3),
    ("abs", lambda x: jnp.abs(x) * x, lambda x: 2 * np.sign(x), -0.3),
    ("pow", lambda x: x ** 3.0, lambda x: 6 * x, 0.3),
    ("pow_exponent", lambda x: 2.0 ** x, lambda x: np.log(2) ** 2 * 2 ** x, 0.3),
    ("pow_both", lambda x: x ** x, lambda x: x ** x * ((np.log(x) + 1) ** 2 + 1 / x), 0.7),
    ("div", lambda x: 1.0 / x, lambda x: 2 / x ** 3, 0.3),
    ("div_num_den", lambda x: jnp.sin(x) / (x + 2.0),
     lambda x: (-np.sin(x) * (x + 2) ** 2 - 2 * np.cos(x) * (x + 2) + 2 * np.sin(x)) / (x + 2) ** 3,
     0.3),
    ("atan2", lambda x: jnp.arctan2(x, 2.0), lambda x: -4 * x / (4 + x * x) ** 2, 0.3),
    ("max", lambda x: jnp.maximum(x, 0.1) * x, lambda x: 2.0, 0.3),
    ("rem", lambda x: (x * x) % 0.7, lambda x: 2.0, 0.3),
    ("prod", lambda x: jnp.prod(jnp.stack([x, x * x, x])), lambda x: 12 * x * x, 0.3),
    ("reduce_max", lambda x: jnp.max(jnp.stack([x * x, x])), lambda x: 0.0, 0.3),
    ("logsumexp", lambda x: nn.logsumexp(jnp.stack([x, 2 * x])),
     lambda x: (lambda s: 1 * s * (1 - s))(1 / (1 + np.exp(-x))), 0.3),
    ("where", lambda x: jnp.where(x > 0, x ** 3, x), lambda x: 6 * x, 0.3),
    ("scan", lambda x: lax.scan(lambda c, _: (c * x, None), 1.0, None, length=4)[0],
     lambda x: 12 * x * x, 0.3),
    ("fori", lambda x: lax.fori_loop(0, 3, lambda i, c: c * jnp.sin(x), 1.0),
     lambda x: 6 * np.sin(x) * np.cos(x) ** 2 - 3 * np.sin(x) ** 3, 0.3),
    ("cond", lambda x: lax.cond(x > 0, jnp.sin, jnp.cos, x), lambda x: -np.sin(x), 0.3),
    ("cond_false", lambda x: lax.cond(x > 0, jnp.sin, jnp.cos, x), lambda x: -np.cos(x), -0.3),
    ("dot", lambda x: jnp.dot(jnp.stack([x, x * x]), jnp.stack([x, 1.0])),
     lambda x: 2.0 + 2.0, 0.3),
    ("cumsum", lambda x: jnp.sum(jnp.cumsum(jnp.stack([x * x, x ** 3]))),
     lambda x: 2 * 2.0 + 6 * x, 0.3),
]


@pytest.mark.parametrize("name,fn,second,x", SECOND_DERIVATIVES,
                         ids=[c[0] for c in SECOND_DERIVATIVES])
def test_grad_of_grad(name, fn, second, x):
    """Every rule's JVP is itself differentiable: grad of grad against the analytic value."""
    x = np.float32(x)
    want = second(np.float64(x))
    got = shardc.grad(shardc.grad(fn))(x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(shardc.jit(shardc.grad(shardc.grad(fn)))(x), want,
                               rtol=1e-4, atol=1e-5)


def test_third_derivative_and_hessian_vector_products():
    x = np.float32(0.4)
    np.testing.assert_allclose(shardc.grad(shardc.grad(shardc.grad(jnp.sin)))(x), -np.cos(x),
                               rtol=1e-5)
    # Hessian-vector product: forward over reverse, and reverse over reverse
    v = normal((4,), 92)
    xs = normal((4,), 93)
    f = lambda a: jnp.sum(jnp.sin(a) * a) + jnp.sum(a) ** 2
    hess = np.diag(2 * np.cos(xs) - xs * np.sin(xs)) + 2.0
    _, hvp = shardc.jvp(shardc.grad(f), (xs,), (v,))
    np.testing.assert_allclose(hvp, hess @ v, rtol=1e-4, atol=1e-5)
    hvp2 = shardc.grad(lambda a: jnp.vdot(shardc.grad(f)(a), v))(xs)
    np.testing.assert_allclose(hvp2, hess @ v, rtol=1e-4, atol=1e-5)


JIT_EQUALS_EAGER = [
    ("mlp", lambda w, x: jnp.sum(jnp.tanh(x @ w) ** 2), (normal((3, 4), 94), normal((5, 3), 95))),
    ("softmax_xent", lambda w, x: -jnp.sum(nn.log_softmax(x @ w)[:, 0]),
     (normal((3, 4), 96), normal((5, 3), 97))),
    ("scan", lambda w, x: _scan_fn(w, x), (normal((3,), 98), normal((5, 3), 99))),
    ("cond", lambda w, x: jnp.sum(_cond(w, x)), (normal((3,), 100), normal((2, 3), 101))),
    ("indexing", lambda w, x: jnp.sum(w[::-1, 1:] * 2.0) + jnp.sum(w.at[0].set(x[0, :4])),
     (normal((3, 4), 102), normal((5, 4), 103))),
]


@pytest.mark.parametrize("name,fn,args", JIT_EQUALS_EAGER, ids=[c[0] for c in JIT_EQUALS_EAGER])
def test_jit_of_grad_equals_eager(name, fn, args):
    g = shardc.grad(fn, argnums=(0, 1))
    eager = g(*args)
    jitted = shardc.jit(g)(*args)
    for a, b in zip(eager, jitted):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # grad of a jitted function too
    inner = shardc.grad(shardc.jit(fn), argnums=(0, 1))(*args)
    for a, b in zip(eager, inner):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)


def _per_example_loss(w, x, y):
    return (jnp.tanh(jnp.dot(x, w)) - y) ** 2


def test_vmap_of_grad_per_example_gradients():
    w = normal((3,), 104)
    xs, ys = normal((6, 3), 105), normal((6,), 106)
    per_example = shardc.vmap(shardc.grad(_per_example_loss), in_axes=(None, 0, 0))(w, xs, ys)
    loop = np.stack([np.asarray(shardc.grad(_per_example_loss)(w, xs[k], ys[k]))
                     for k in range(6)])
    assert np.shape(per_example) == (6, 3)
    np.testing.assert_allclose(per_example, loop, rtol=1e-5, atol=1e-6)
    jitted = shardc.jit(shardc.vmap(shardc.grad(_per_example_loss), in_axes=(None, 0, 0)))
    np.testing.assert_allclose(jitted(w, xs, ys), loop, rtol=1e-5, atol=1e-6)
    # the per-example gradients sum to the batch gradient
    total = shardc.grad(lambda w: jnp.sum(shardc.vmap(
        lambda x, y: _per_example_loss(w, x, y))(xs, ys)))(w)
    np.testing.assert_allclose(total, loop.sum(0), rtol=1e-5, atol=1e-5)


def test_grad_inside_vmap_and_vmap_of_jvp():
    xs = normal((5, 3), 107)
    # grad inside the vmapped function, with a batched and an unbatched argument
    w = normal((3,), 108)
    got = shardc.vmap(lambda x: shardc.grad(lambda v: jnp.sum(jnp.sin(v * w)))(x))(xs)
    np.testing.assert_allclose(got, np.cos(xs * w) * w, rtol=1e-5, atol=1e-6)
    got_w = shardc.vmap(lambda x: shardc.grad(lambda v: jnp.sum(jnp.sin(x * v)))(w))(xs)
    np.testing.assert_allclose(got_w, np.cos(xs * w) * xs, rtol=1e-5, atol=1e-6)
    # vmap of jvp and of vjp
    ts = normal((5, 3), 109)
    _, tangents = shardc.vmap(lambda x, t: shardc.jvp(jnp.sin, (x,), (t,)))(xs, ts)
    np.testing.assert_allclose(tangents, np.cos(xs) * ts, rtol=1e-5, atol=1e-6)
    cts = shardc.vmap(lambda x, c: shardc.vjp(jnp.tanh, x)[1](c)[0])(xs, ts)
    np.testing.assert_allclose(cts, (1 - np.tanh(xs) ** 2) * ts, rtol=1e-5, atol=1e-6)
    # a batch of scans
    got = shardc.vmap(shardc.grad(lambda x: _scan_fn(x, xs)))(xs[:2])
    loop = np.stack([np.asarray(shardc.grad(lambda x: _scan_fn(x, xs))(xs[k])) for k in range(2)])
    np.testing.assert_allclose(got, loop, rtol=1e-5, atol=1e-6)


def test_stop_gradient_blocks_tangents():
    x = np.float32(3.0)
    np.testing.assert_allclose(shardc.grad(lambda v: v * lax.stop_gradient(v))(x), 3.0)
    np.testing.assert_allclose(shardc.jit(shardc.grad(lambda v: v * lax.stop_gradient(v)))(x),
                               3.0)
    _, t = shardc.jvp(lambda v: lax.stop_gradient(v * v) + v, (x,), (np.float32(1.0),))
    np.testing.assert_allclose(t, 1.0)
    # pytrees, and the value passes unchanged
    out = lax.stop_gradient({"a": normal((2,), 110)})
    np.testing.assert_allclose(out["a"], normal((2,), 110))
    np.testing.assert_allclose(
        shardc.grad(lambda v: jnp.sum(lax.stop_gradient({"a": v})["a"] * v))(normal((2,), 110)),
        normal((2,), 110))


# ================================================================================================
# 4. Errors (SEMANTICS 4.6; JAX's messages)
# ================================================================================================

WHILE_MESSAGE = ("Reverse-mode differentiation does not work for lax.while_loop or lax.fori_loop "
                 "with dynamic start/stop values. Try using lax.scan, or using fori_loop with "
                 "static start/stop.")
PMAX_MESSAGE = ("Differentiation rule for '{}' not implemented; apply lax.stop_gradient to its "
                "operand if its derivative is not needed.")


def _exact(message):
    import re
    return "^" + re.escape(message) + "$"


@pytest.mark.parametrize("mode", MODES)
def test_grad_of_non_scalar_output(mode):
    wrap = shardc.jit if mode == "jit" else (lambda f: f)
    with pytest.raises(TypeError, match=_exact(
            "Gradient only defined for scalar-output functions. Output had shape: (3,).")):
        wrap(shardc.grad(lambda x: x * 2.0))(normal((3,), 111))
    with pytest.raises(TypeError, match=_exact(
            "Gradient only defined for scalar-output functions. Output had shape: (1, 1).")):
        wrap(shardc.grad(lambda x: jnp.sum(x, keepdims=True)))(normal((1, 3), 111))
    with pytest.raises(TypeError, match="^Gradient only defined for scalar-output functions"):
        shardc.grad(lambda x: (x, x))(np.float32(1.0))
    with pytest.raises(TypeError, match="^Gradient only defined for scalar-output functions"):
        shardc.value_and_grad(lambda x: x * 2.0)(normal((3,), 111))


INT_MESSAGE = ("grad requires real- or complex-valued inputs (input dtype that is a sub-dtype of "
               "np.inexact), but got {}. If you want to use Boolean- or integer-valued inputs, "
               "use vjp or set allow_int to True.")


@pytest.mark.parametrize("value,dtype", [(3, "int32"), (np.arange(3), "int32"),
                                         (np.array([True, False]), "bool"),
                                         (np.int32(2), "int32")])
def test_grad_with_respect_to_integer_input(value, dtype):
    with pytest.raises(TypeError, match=_exact(INT_MESSAGE.format(dtype))):
        shardc.grad(lambda v: jnp.sum(v * 1.0))(value)
    with pytest.raises(TypeError, match=_exact(INT_MESSAGE.format(dtype))):
        shardc.grad(lambda x, v: jnp.sum(x * v), argnums=(0, 1))(np.float32(1.0), value)
    with pytest.raises(TypeError, match=_exact(INT_MESSAGE.format(dtype))):
        shardc.jit(shardc.value_and_grad(lambda v: jnp.sum(v * 1.0)))(value)
    # an integer leaf inside a pytree argument too
    with pytest.raises(TypeError, match=_exact(INT_MESSAGE.format(dtype))):
        shardc.grad(lambda p: jnp.sum(p[0] * p[1]))((np.float32(1.0), value))


def _while_fn(x):
    def body(c):
        v, k = c
        return jnp.sin(v) * 1.5 + 0.1, k + 1
    return lax.while_loop(lambda c: c[1] < 3, body, (x, 0))[0]


def _fori_traced(x, n):
    return lax.fori_loop(0, n, lambda i, v: jnp.sin(v) * 1.5 + 0.1, x)


def test_reverse_mode_through_while_loop_raises():
    x = np.float32(0.5)
    with pytest.raises(ValueError, match=_exact(WHILE_MESSAGE)):
        shardc.grad(_while_fn)(x)
    with pytest.raises(ValueError, match=_exact(WHILE_MESSAGE)):
        shardc.jit(shardc.grad(_while_fn))(x)
    # as JAX's: vjp linearizes (the loop runs forward); transposing it is the error
    value, pullback = shardc.vjp(_while_fn, x)
    np.testing.assert_allclose(float(value), float(_while_fn(x)), rtol=1e-6)
    with pytest.raises(ValueError, match=_exact(WHILE_MESSAGE)):
        pullback(np.float32(1.0))
    # fori_loop with a traced bound is a while loop
    with pytest.raises(ValueError, match=_exact(WHILE_MESSAGE)):
        shardc.jit(shardc.grad(_fori_traced))(x, 3)
    with pytest.raises(ValueError, match=_exact(WHILE_MESSAGE)):
        shardc.jit(lambda v, n: shardc.grad(_fori_traced)(v, n))(x, np.int32(3))


def test_while_loop_without_tangents_is_fine_in_reverse_mode():
    """A while loop that only touches non-differentiated values does not raise."""
    def f(x, n):
        k = lax.while_loop(lambda k: k < n, lambda k: k + 2, 0)
        return jnp.sum(x * x) * k
    np.testing.assert_allclose(shardc.jit(shardc.grad(f))(normal((3,), 112), 5),
                               2 * normal((3,), 112) * 6, rtol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_forward_mode_through_while_loop(mode):
    x, t = np.float32(0.5), np.float32(1.0)
    jvp = (lambda *a: shardc.jvp(_while_fn, *a))
    jvp = shardc.jit(jvp) if mode == "jit" else jvp
    out, tangent = jvp((x,), (t,))
    eps = 1e-3
    numeric = (float(_while_fn(jnp.asarray(x + eps))) - float(_while_fn(jnp.asarray(x - eps)))) \
        / (2 * eps)
    np.testing.assert_allclose(float(out), float(_while_fn(jnp.asarray(x))), rtol=1e-6)
    np.testing.assert_allclose(float(tangent), numeric, rtol=3e-3)
    # a tangent entering through a closed-over value, a vector carry, and a traced fori bound
    w = normal((3,), 113)
    tw = normal((3,), 114)

    def g(w):
        return lax.while_loop(lambda c: c[1] < 4, lambda c: (jnp.tanh(c[0] * w) + w, c[1] + 1),
                              (jnp.ones(3), 0))[0]

    _, tg = shardc.jvp(g, (w,), (tw,))
    hi, lo = g(jnp.asarray(w + eps * tw)), g(jnp.asarray(w - eps * tw))
    numeric = (np.asarray(hi) - np.asarray(lo)) / (2 * eps)
    np.testing.assert_allclose(tg, numeric, rtol=1e-2, atol=1e-3)
    _, tf = shardc.jit(lambda v, n: shardc.jvp(lambda u: _fori_traced(u, n), (v,), (t,)))(x, 3)
    np.testing.assert_allclose(tf, tangent, rtol=1e-6)
    # forward over forward: the second derivative, against differences of the first
    first = lambda v: shardc.jvp(_while_fn, (v,), (t,))[1]
    _, second = shardc.jvp(first, (x,), (t,))
    h = 1e-2
    numeric = (float(first(np.float32(x + h))) - float(first(np.float32(x - h)))) / (2 * h)
    np.testing.assert_allclose(float(second), numeric, rtol=1e-2)


def _mesh():
    return shardc.make_mesh((4,), ("x",))


def _reduce_max_shard_map(op, stop=False):
    from shardc.sharding import PartitionSpec as P

    def body(b):
        b_in = lax.stop_gradient(b) if stop else b
        return getattr(lax, op)(b_in, "x") * b
    return shardc.shard_map(body, mesh=_mesh(), in_specs=P("x"), out_specs=P("x"))


@pytest.mark.parametrize("op", ["pmax", "pmin"])
def test_differentiating_pmax_pmin_raises(op):
    f = _reduce_max_shard_map(op)
    x = np.arange(8, dtype=np.float32)
    message = _exact(PMAX_MESSAGE.format(op))
    with pytest.raises(NotImplementedError, match=message):
        shardc.grad(lambda v: jnp.sum(f(v)))(x)
    with pytest.raises(NotImplementedError, match=message):
        shardc.jit(shardc.grad(lambda v: jnp.sum(f(v))))(x)
    with pytest.raises(NotImplementedError, match=message):
        shardc.jvp(f, (x,), (np.ones(8, np.float32),))
    with pytest.raises(NotImplementedError, match=message):
        shardc.jit(lambda v: shardc.jvp(f, (v,), (v,)))(x)


@pytest.mark.parametrize("op", ["pmax", "pmin"])
def test_pmax_pmin_with_stopped_operand_differentiate(op):
    """Rules are skipped for symbolically zero tangents (4.6)."""
    f = _reduce_max_shard_map(op, stop=True)
    x = np.arange(8, dtype=np.float32)
    extreme = 7.0 if op == "pmax" else 0.0
    # per device: block [2k, 2k+1]; pmax over x gives [6, 7], pmin [0, 1]
    per_slot = np.tile([extreme - 1, extreme] if op == "pmax" else [extreme, extreme + 1], 4)
    np.testing.assert_allclose(f(x), per_slot * x)
    np.testing.assert_allclose(shardc.grad(lambda v: jnp.sum(f(v)))(x), per_slot)
    np.testing.assert_allclose(shardc.jit(shardc.grad(lambda v: jnp.sum(f(v))))(x), per_slot)
    _, t = shardc.jvp(f, (x,), (np.ones(8, np.float32),))
    np.testing.assert_allclose(t, per_slot)

    # an operand with no tangent at all (built from a closed-over constant) does not raise
    from shardc.sharding import PartitionSpec as P
    c = np.arange(8, dtype=np.float32)
    g = shardc.shard_map(lambda b, k: getattr(lax, op)(k * 2.0, "x") * b, mesh=_mesh(),
                         in_specs=(P("x"), P("x")), out_specs=P("x"))
    np.testing.assert_allclose(shardc.grad(lambda v: jnp.sum(g(v, c)))(x), 2 * per_slot)


# ================================================================================================
# 5. The gradient is one program
# ================================================================================================

def _primitives(program):
    return [str(e.primitive) for e in program.eqns]


def test_make_jaxpr_of_grad_is_one_program_with_forward_and_backward():
    from ir.verify import verify
    f = lambda x, w: jnp.sum(jnp.tanh(x @ w) * jnp.exp(w[0]))
    closed = shardc.make_jaxpr(shardc.grad(f, argnums=1))(normal((2, 3), 115), normal((3, 4), 116))
    program = closed.jaxpr
    verify(program)
    text = str(closed)
    assert text.count("lambda") == 1                 # one program, no nested calls
    prims = _primitives(program)
    # forward: the matmul, tanh, exp; backward: the transposed matmul and the broadcast seed
    assert "tanh" in prims and "exp" in prims
    assert prims.count("dot_general") >= 2
    assert "broadcast_in_dim" in prims
    # the backward equations follow the forward ones: the first tanh before the last dot_general
    assert prims.index("tanh") < len(prims) - 1 - prims[::-1].index("dot_general")
    assert [a.shape for a in program.out_avals] == [(3, 4)]
    # it runs and equals the eager gradient
    args = (normal((2, 3), 115), normal((3, 4), 116))
    np.testing.assert_array_equal(shardc.jit(shardc.grad(f, argnums=1))(*args),
                                  shardc.grad(f, argnums=1)(*args))


@pytest.mark.parametrize("name,fn,args", [
    ("scan", _scan_fn, (normal((3,), 117), normal((5, 3), 118))),
    ("cond", lambda w, x: jnp.sum(_cond(w, x)), (normal((3,), 119), normal((2, 3), 120))),
    ("fori", lambda w, x: jnp.sum(_fori(w, x)), (normal((3,), 121), normal((4, 3), 122))),
    ("indexing", lambda w, x: jnp.sum(w.at[1].add(x[0, 1]) * w[::-1]),
     (normal((3,), 123), normal((2, 3), 124))),
    ("softmax", lambda w, x: jnp.sum(nn.softmax(x * w) ** 2),
     (normal((3,), 125), normal((2, 3), 126))),
])
def test_make_jaxpr_of_grad_verifies(name, fn, args):
    from ir.verify import verify
    for transform in (shardc.grad(fn, argnums=(0, 1)),
                      shardc.grad(lambda w, x: jnp.sum(shardc.grad(fn)(w, x) ** 2)),
                      lambda w, x: shardc.jvp(fn, (w, x), (w, x)),
                      lambda w, x: shardc.vjp(fn, w, x)[1](np.float32(1.0))):
        closed = shardc.make_jaxpr(transform)(*args)
        verify(closed.jaxpr)
        assert str(closed).startswith("{ lambda")


def test_gradient_equations_name_the_line_of_the_forward_operation():
    """The equations a transformation makes for one equation carry that equation's line (as
    JAX keeps source information), not the line that asked for the gradient."""
    import inspect

    def loss(x):
        y = jnp.sin(x)
        return jnp.sum(y * y)
    first = inspect.getsourcelines(loss)[1]
    sin_line, sum_line, grad_line = first + 1, first + 2, first + 5
    program = shardc.make_jaxpr(shardc.grad(loss))(np.ones(3, np.float32)).jaxpr
    lines = {(e.primitive.name, e.source.line) for e in program.eqns if e.source is not None}
    assert ("cos", sin_line) in lines                 # the JVP of sin, on sin's line
    assert ("mul", sum_line) in lines
    # only the seed cotangent (1.0) belongs to the line asking for the gradient
    assert [e.primitive.name for e in program.eqns
            if e.source is not None and e.source.line == grad_line] == ["broadcast_in_dim"]
    assert {e.source.file for e in program.eqns if e.source is not None} == {"test_autodiff.py"}


def test_an_integer_inputs_gradient_is_float0():
    """JAX's float0 zeros (a numpy array: no values), eagerly and under jit; a float0
    cotangent given back to a vjp is a zero."""
    f = lambda x, y: (x * y).sum()
    for run in (shardc.grad(f, argnums=(0, 1), allow_int=True),
                shardc.jit(shardc.grad(f, argnums=(0, 1), allow_int=True))):
        dx, dy = run(jnp.ones(3), jnp.arange(3))
        assert dy.dtype == shardc.dtypes.float0 and dy.shape == (3,)
        np.testing.assert_array_equal(np.asarray(dx), [0., 1., 2.])
    _, pullback = shardc.vjp(lambda x, y: (x * 2, y), jnp.ones(2), jnp.arange(2))
    ct_x, ct_y = pullback((jnp.ones(2), np.zeros(2, shardc.dtypes.float0)))
    np.testing.assert_array_equal(np.asarray(ct_x), [2., 2.])
    assert ct_y.dtype == shardc.dtypes.float0


def test_jvp_lets_python_branch_on_a_concrete_primal():
    # as JAX's: the primal is a value, so `if` and `while` on it run in Python; under jit it
    # is traced, and the conversion is the usual error
    def f(x):
        if x < 3:
            return 2.0 * x
        return jnp.sin(x)

    def doubling(x):
        while x < 10.0:
            x = x * 2.0
        return x

    assert [float(v) for v in shardc.jvp(f, (1.0,), (1.0,))] == [2.0, 2.0]
    np.testing.assert_allclose([float(v) for v in shardc.jvp(f, (4.0,), (1.0,))],
                               [np.sin(4.0), np.cos(4.0)], rtol=1e-6)
    assert [float(v) for v in shardc.jvp(doubling, (1.0,), (1.0,))] == [16.0, 16.0]
    with pytest.raises(shardc.errors.TracerBoolConversionError):
        shardc.jit(lambda x: shardc.jvp(f, (x,), (1.0,)))(1.0)


def _piecewise(x):
    total = jnp.sum(x)
    if total > 3:
        return jnp.sum(x ** 2)
    if total > 0:
        return jnp.sum(jnp.exp(x))
    return jnp.sum(x)


@pytest.mark.parametrize("x, expected", [
    ([1., 2., 3.], lambda x: 2 * x),            # the first branch
    ([.1, .2, .3], np.exp),                       # the second
    ([-1., -2., .3], np.ones_like),               # the third
])
def test_reverse_mode_lets_python_branch_on_known_values(x, expected):
    # as JAX's: outside jit a gradient's inputs are values, so Python may branch on what
    # they compute; the program differentiated is the path taken
    x = np.asarray(x, np.float32)
    want = expected(x)
    np.testing.assert_allclose(np.asarray(shardc.grad(_piecewise)(x)), want, rtol=1e-6)
    value, g = shardc.value_and_grad(_piecewise)(x)
    np.testing.assert_allclose(float(value), float(_piecewise(x)), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(g), want, rtol=1e-6)
    _, pullback = shardc.vjp(_piecewise, x)
    np.testing.assert_allclose(np.asarray(pullback(np.float32(1.0))[0]), want, rtol=1e-6)
    _, linear = shardc.linearize(_piecewise, x)
    np.testing.assert_allclose(float(linear(np.ones(3, np.float32))), want.sum(), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(shardc.jacrev(_piecewise)(x)), want, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(shardc.jacfwd(_piecewise)(x)), want, rtol=1e-6)


def test_reverse_mode_lets_python_loop_on_known_values():
    def newton_sqrt2(x):            # a while loop on a value; its count depends on x
        y = x
        while jnp.abs(y * y - 2.0) > 1e-5:
            y = y - (y * y - 2.0) / (2 * y)
        return y * x

    def powers(x):                  # a loop count and an index from int() and __index__
        out = x
        for _ in range(int(jnp.argmax(x)) + 1):
            out = out * x
        k = jnp.argmax(x)
        return jnp.sum(out) + x[int(k) - 1]

    # y converges to sqrt(2) whatever x is, and Newton's steps are differentiated through
    # (their derivative in x vanishes at the fixed point): d(y * x)/dx is nearly sqrt(2)
    np.testing.assert_allclose(float(shardc.grad(newton_sqrt2)(1.0)), np.sqrt(2.0), rtol=1e-4)
    x = np.array([.5, 2., 1.], np.float32)
    # argmax is 1: out = x ** 3, plus x[0]
    np.testing.assert_allclose(np.asarray(shardc.grad(powers)(x)), 3 * x ** 2 + [1, 0, 0],
                               rtol=1e-6)
    # second order: each level's inputs are known too
    f = lambda x: jnp.sin(x) if x > 0 else x ** 3
    np.testing.assert_allclose(float(shardc.grad(shardc.grad(f))(0.5)), -np.sin(0.5),
                               rtol=1e-6)
    np.testing.assert_allclose(float(shardc.grad(shardc.grad(f))(-0.5)), -3.0, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(shardc.hessian(_piecewise)(
        np.array([1., 2., 3.], np.float32))), 2 * np.eye(3), rtol=1e-6)


def test_reverse_mode_sizes_from_known_values():
    # what decides a shape (a mask, a count, nonzero, arange's bound, repeats) may come from
    # the differentiated inputs outside jit, as in JAX: the values are known
    x = np.array([1., -2., 3.], np.float32)
    cases = [
        (lambda x: jnp.sum(x[x > 0] ** 2), 2 * x * (x > 0)),
        (lambda x: jnp.sum(x[jnp.nonzero(x > 0)[0]] * 2), 2. * (x > 0)),
        (lambda x: jnp.sum(x * jnp.arange(jnp.argmax(x) + 1.)), np.arange(3.)),
        (lambda x: jnp.sum(jnp.repeat(x, (x > 0).astype(int) + 1) ** 2),
         2 * x * ((x > 0) + 1)),
        (lambda x: jnp.sum(x.at[x > 1.5].set(0.) * 3), 3. * (x <= 1.5)),
        # argmax is 2: sizes 3 and 2 from it
        (lambda x: jnp.sum(jnp.eye(jnp.argmax(x) + 1) * x[0]), [3., 0., 0.]),
        (lambda x: jnp.sum(jnp.tri(jnp.argmax(x)) * x[0]), [3., 0., 0.]),
        (lambda x: jnp.sum(jnp.diag(x[:2], k=jnp.argmax(x))), [1., 1., 0.]),
        (lambda x: jnp.sum(jnp.zeros(jnp.argmax(x)) + x[0]), [2., 0., 0.]),
        (lambda x: jnp.sum(jnp.pad(x, (jnp.argmax(x), 1)) * 2), [2., 2., 2.]),
        (lambda x: jnp.sum(jnp.tile(x, jnp.argmax(x))), [2., 2., 2.]),
        (lambda x: jnp.sum(x[jnp.triu_indices(jnp.argmax(x))[0]]), [2., 1., 0.]),
    ]
    for f, want in cases:
        np.testing.assert_allclose(np.asarray(shardc.grad(f)(x)), want, rtol=1e-6)
    # under jit the mask is traced: JAX's error
    with pytest.raises(shardc.errors.NonConcreteBooleanIndexError):
        shardc.jit(shardc.grad(cases[0][0]))(x)
    with pytest.raises(shardc.errors.NonConcreteBooleanIndexError):
        shardc.jit(shardc.grad(cases[4][0]))(x)          # x.at[mask]
    # a traced size: JAX's plain TypeError for a shape
    with pytest.raises(TypeError, match="Shapes must be 1D sequences.*argument of 'N' jnp.eye"):
        shardc.jit(shardc.grad(cases[5][0]))(x)


def test_scatter_mul_differentiates_in_the_operand():
    x = np.array([1., 2., 3., 4.], np.float32)
    scale = np.array([3., 2., 5.], np.float32)
    at = np.array([0, 2, 0])

    def f(x):
        return jnp.sum(jnp.sin(x.at[at].multiply(scale)))

    factor = np.array([15., 1., 2., 1.], np.float32)     # index 0 is hit twice
    want = np.cos(x * factor) * factor
    for run in (shardc.grad(f), shardc.jit(shardc.grad(f))):
        np.testing.assert_allclose(np.asarray(run(x)), want, rtol=1e-5)
    _, tangent = shardc.jvp(f, (x,), (np.ones(4, np.float32),))
    np.testing.assert_allclose(float(tangent), want.sum(), rtol=1e-5)
    with pytest.raises(NotImplementedError, match="scatter_mul gradients"):
        shardc.grad(lambda s: jnp.sum(jnp.ones(4).at[at].multiply(s)))(scale)


def _scatter_max_grads(x, idx, u, weights):
    """numpy reference of JAX's rule for d sum(w * x.at[idx].max(u)): each place's
    cotangent goes to the values that won it, split evenly over ties (the operand's own value
    among them where it was kept); out-of-range updates win nothing."""
    out = x.copy()
    inside = (idx >= 0) & (idx < x.size)
    np.maximum.at(out, idx[inside], u[inside])
    gx, gu = np.zeros_like(x), np.zeros_like(u)
    for k in range(x.size):
        winners = [j for j in range(u.size) if inside[j] and idx[j] == k and u[j] == out[k]]
        kept = x[k] == out[k]
        share = weights[k] / (len(winners) + kept)
        gx[k] = share if kept else 0.
        for j in winners:
            gu[j] = share
    return gx, gu


def test_scatter_max_and_min_differentiate_as_jax():
    x = np.array([1., 5., 3., 4., 2.], np.float32)
    idx = np.array([0, 2, 2, 4, 1, 7])            # ties at 2, one update out of range
    u = np.array([2., 3., 3., 1., 5., 9.], np.float32)
    w = np.arange(1., 6., dtype=np.float32)
    f = lambda x, u: jnp.sum(x.at[idx].max(u) * w)
    want = _scatter_max_grads(x, idx, u, w)
    for run in (shardc.grad(f, argnums=(0, 1)), shardc.jit(shardc.grad(f, argnums=(0, 1)))):
        for got, ref in zip(run(x, u), want):
            np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-6)
    # min is max of the negations
    g = shardc.grad(lambda x, u: jnp.sum(x.at[idx].min(u) * w), argnums=(0, 1))(-x, -u)
    for got, ref in zip(g, want):
        np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-6)
    # jvp agrees with the transpose (the dot-product test)
    tx, tu = np.linspace(-1, 1, 5, dtype=np.float32), np.linspace(0, 2, 6, dtype=np.float32)
    _, tangent = shardc.jvp(f, (x, u), (tx, tu))
    np.testing.assert_allclose(float(tangent), want[0] @ tx + want[1] @ tu, rtol=1e-5)


def test_jacobians_of_bfloat16_inputs():
    import ml_dtypes
    x = np.ones(2, ml_dtypes.bfloat16)
    for jac in (shardc.jacfwd, shardc.jacrev):
        got = jac(lambda v: v * 2)(x)
        assert got.dtype == ml_dtypes.bfloat16
        np.testing.assert_array_equal(np.asarray(got, np.float32), 2 * np.eye(2))
    # a diagonal offset a gradient knows
    m = np.arange(12.).reshape(3, 4) - 3
    got = shardc.grad(lambda v: jnp.diag(v, k=(v > 0).sum() - 8).sum())(m)
    np.testing.assert_array_equal(np.asarray(got), np.eye(3, 4, k=0))


def test_dot_general_with_a_wider_preferred_type_transposes():
    # the cotangent is float32 where the operands are float16 (JAX's issue 10818)
    x = np.float16(1.5)
    f = lambda x: lax.dot_general(x, x, (((), ()), ((), ())), preferred_element_type=np.float32)
    jac = shardc.jacrev(f)(x)
    assert jac.dtype == np.float16 and float(jac) == 3.0
    a = np.arange(12, dtype=np.float16).reshape(3, 4) / 8
    b = np.ones((4, 2), np.float16)
    ga, gb = shardc.grad(lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ())),
                                                      preferred_element_type=np.float32).sum(),
                         argnums=(0, 1))(a, b)
    assert (ga.dtype, gb.dtype) == (np.float16, np.float16)
    np.testing.assert_array_equal(np.asarray(ga), np.full((3, 4), 2, np.float16))
    np.testing.assert_array_equal(np.asarray(gb), np.repeat(a.sum(0)[:, None], 2, 1))


def test_known_integer_values_convert_as_arrays_under_a_gradient():
    # a boolean or integer value has no derivative: JAX hands it to Python as an array, so
    # float(), complex(), numpy conversion, .item() and .tolist() take it; .item() takes a
    # known float too (JAX's concrete_or_error)
    x = np.array([1., -2., 3.], np.float32)
    cases = [
        (lambda z: z.sum() * float(jnp.max(z) > 0), 1.),
        (lambda z: z.sum() * np.asarray(jnp.argmax(z)).item(), 2.),
        (lambda z: z.sum() * len((z > 0).tolist()), 3.),
        (lambda z: z.sum() * complex(jnp.argmax(z)).real, 2.),
        (lambda z: z.sum() * jnp.max(z).item(), 3.),
    ]
    for f, scale in cases:
        np.testing.assert_allclose(np.asarray(shardc.grad(f)(x)), np.full(3, scale))
    np.testing.assert_allclose(np.asarray(shardc.grad(lambda z: z[np.asarray(z > 0)].sum())(x)),
                               [1., 0., 1.])
    # a float value, and anything under jit, stays JAX's error
    with pytest.raises(shardc.errors.ConcretizationTypeError, match="the `float` function"):
        shardc.grad(lambda z: float(z.sum()))(x)
    with pytest.raises(shardc.errors.TracerArrayConversionError):
        shardc.grad(lambda z: np.asarray(z).sum())(x)
    with pytest.raises(shardc.errors.ConcretizationTypeError, match="the `float` function"):
        shardc.jit(lambda z: float(jnp.max(z) > 0))(x)
    with pytest.raises(shardc.errors.ConcretizationTypeError, match="the `complex` function"):
        shardc.jit(lambda z: complex(jnp.argmax(z)))(x)
    with pytest.raises(shardc.errors.ConcretizationTypeError, match="item"):
        shardc.jit(lambda z: jnp.max(z).item())(x)


def test_values_of_constants_alone_convert_under_a_transformation():
    # computed from closed-over arrays only, a float is a plain value in JAX (no derivative,
    # no batch): float() and numpy conversion take it under grad, jvp, jacfwd and vmap
    c = jnp.arange(4.)
    assert float(shardc.grad(lambda x: x * float(c.sum()))(1.)) == 6.
    assert float(shardc.grad(lambda x: x * np.asarray(c[1:]).sum())(1.)) == 6.
    _, tangent = shardc.jvp(lambda x: x * float(c.max()), (1.,), (1.,))
    assert float(tangent) == 3.
    np.testing.assert_array_equal(np.asarray(shardc.jacfwd(lambda x: x * float(c.mean()))(
        jnp.ones(2))), 1.5 * np.eye(2))
    np.testing.assert_allclose(np.asarray(shardc.vmap(lambda x: x * float(jnp.sin(2.)))(
        jnp.ones(2))), np.full(2, np.sin(2.)), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(shardc.vmap(lambda x, k: x * float(k.sum()),
                                                         in_axes=(0, None))(jnp.ones(2), c)),
                                  [6., 6.])
    # what depends on the inputs, or is traced by jit, stays JAX's error
    with pytest.raises(shardc.errors.ConcretizationTypeError):
        shardc.grad(lambda x: x * float((x * c).sum()))(1.)
    with pytest.raises(shardc.errors.ConcretizationTypeError):
        shardc.vmap(lambda x: float(x.sum()))(jnp.ones((2, 2)))
    with pytest.raises(shardc.errors.ConcretizationTypeError):
        shardc.jit(lambda x: x * float(c.sum()))(1.)


def test_python_numbers_in_aux_come_back_as_they_are():
    g, aux = shardc.grad(lambda x: (x * 2, {"n": 3, "f": 1.5, "s": "tag"}), has_aux=True)(1.)
    assert float(g) == 2. and aux == {"n": 3, "f": 1.5, "s": "tag"}
    assert type(aux["n"]) is int and type(aux["f"]) is float
    assert type(shardc.vjp(lambda x: (x * 2, 7), 1., has_aux=True)[2]) is int
    assert type(shardc.linearize(lambda x: (x * 2, 5), 1., has_aux=True)[2]) is int


def test_reverse_mode_of_traced_values_still_refuses_python_branches():
    def f(x):
        if x > 0:
            return jnp.sin(x)
        return x
    # under jit the inputs are traced: JAX's error, naming the line that asked
    with pytest.raises(shardc.errors.TracerBoolConversionError,
                       match=r"boolean conversion of traced array with shape bool\[\]"):
        shardc.jit(shardc.grad(f))(1.0)
    # vmap batches the input: no single value to branch on
    with pytest.raises(shardc.errors.TracerBoolConversionError):
        shardc.vmap(shardc.grad(f))(jnp.array([1., -1.]))
    # a float conversion stays an error, known value or not, as JAX's
    with pytest.raises(shardc.errors.ConcretizationTypeError, match="the `float` function"):
        shardc.grad(lambda x: x * float(x))(1.0)
    # jit stages its body, inside a gradient or around it: its values are abstract, even
    # where they come from known inputs or closed-over constants
    c0 = jnp.array(1.0)
    g = lambda z: z * (2. if c0 > 0 else 3.)
    for run in (lambda: shardc.grad(lambda x: shardc.jit(f)(x))(1.0),
                lambda: shardc.jit(lambda x: shardc.grad(g)(x))(1.0),
                lambda: shardc.grad(shardc.jit(g))(1.0),
                lambda: shardc.jvp(shardc.jit(f), (1.0,), (1.0,))):
        with pytest.raises(shardc.errors.TracerBoolConversionError):
            run()
    assert float(shardc.grad(g)(1.0)) == 2.0          # outside jit the constant is a value


def test_scatter_max_of_a_window_out_of_range_differentiates_finitely():
    # an update window starting at 9 of 10 is dropped whole (JAX's FILL_OR_DROP): it moves no
    # tangent, and its clipped read (a place no update reaches) divides nothing
    dnums = lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(),
                                        scatter_dims_to_operand_dims=(0,))
    idx = np.array([[9], [0], [0]])
    x = np.arange(10, dtype=np.float32) / 10
    y = np.array([[3.0, 0.5], [0.1, 4.0], [2.0, 2.0]], np.float32)
    f = lambda a, b: lax.scatter_max(a, idx, b, dnums)
    gx, gy = shardc.vjp(f, x, y)[1](np.arange(10, dtype=np.float32))
    np.testing.assert_array_equal(gx, [0, 0, 2, 3, 4, 5, 6, 7, 8, 9])      # JAX 0.10.2's
    np.testing.assert_array_equal(gy, [[0, 0], [0, 1], [0, 0]])
    ones = (np.ones(10, np.float32), np.ones((3, 2), np.float32))
    second = shardc.grad(lambda a, b: (shardc.jvp(f, (a, b), ones)[1]
                                       * np.arange(10.0)).sum(), (0, 1))(x, y)
    for g in second:
        np.testing.assert_array_equal(g, np.zeros_like(g))


def test_top_k_sends_each_values_gradient_to_the_entry_its_index_names():
    # tied entries come in index order, and so do their gradients (JAX 0.10.2's)
    weights = jnp.array([1.0, 10.0])
    g = shardc.grad(lambda x: lax.top_k(x, 2)[0] @ weights)
    np.testing.assert_array_equal(g(jnp.array([2.0, 2.0, 2.0])), [1, 10, 0])
    np.testing.assert_array_equal(g(jnp.array([1.0, 3.0, 3.0, 2.0])), [0, 1, 10, 0])
    x = jnp.array([[5.0, 1, 5, 5], [0, 0, 1, 0]])
    values, indices = lax.top_k(x, 3)
    np.testing.assert_array_equal(indices, [[0, 2, 3], [2, 0, 1]])
    for run in (shardc.grad, lambda f: shardc.jit(shardc.grad(f))):
        got = run(lambda v: (lax.top_k(v, 3)[0] * jnp.arange(1.0, 4.0)).sum())(x)
        np.testing.assert_array_equal(got, [[1, 0, 2, 3], [2, 3, 1, 0]])


def test_a_max_pools_gradient_goes_to_the_first_maximum_of_each_window():
    # JAX's reduce_window max sends each window's cotangent to its first maximum (a ReLU's
    # zeros tie everywhere); max's own JVP would split it
    pool = lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (2,), (2,), "VALID")
    np.testing.assert_array_equal(shardc.grad(lambda x: pool(x).sum())(
        jnp.array([2.0, 2.0, 0.0, 0.0])), [1, 0, 1, 0])
    ones = shardc.grad(lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (2, 2), (1, 1),
                                                   "SAME").sum())(jnp.ones((3, 3)))
    np.testing.assert_array_equal(ones, [[1, 1, 1], [1, 1, 1], [1, 1, 1]])   # JAX 0.10.2's
    mins = shardc.jit(shardc.grad(lambda x: lax.reduce_window(
        x, jnp.inf, lax.min, (3,), (1,), "SAME").sum()))(jnp.array([1.0, 1.0, 1.0, 2.0]))
    np.testing.assert_array_equal(mins, [2, 1, 1, 0])
    # NaN still wins a window
    assert np.isnan(np.asarray(pool(jnp.array([np.nan, 1.0, 2.0, 3.0])))[0])


def test_jvp_tangents_are_checked_and_integers_take_float0_as_jax():
    float0 = shardc.dtypes.float0
    primal, tangent = shardc.jvp(lambda i, x: x * i, (3, 2.0), (np.zeros((), float0), 1.0))
    assert float(primal) == 6.0 and float(tangent) == 3.0
    # an integer result's tangent is float0 zeros
    index_tangent = shardc.jvp(lambda x: jnp.argmax(x), (jnp.ones(2),), (jnp.ones(2),))[1]
    assert index_tangent.dtype == float0 and index_tangent.shape == ()
    with pytest.raises(TypeError, match="the tangent dtype must be float0"):
        shardc.jvp(lambda x: x * 2, (jnp.arange(3),), (jnp.arange(3),))
    with pytest.raises(TypeError, match="expected tangent dtype float32, but got tangent dtype "
                                        "float16"):
        shardc.jvp(lambda x: x * 2, (jnp.ones(3),), (jnp.ones(3, jnp.float16),))
    with pytest.raises(ValueError, match=r"Got primal shape \(3,\) and tangent shape as \(2,\)"):
        shardc.jvp(lambda x: x * 2, (jnp.ones(3),), (jnp.ones(2),))


@pytest.mark.parametrize("fun, what", [
    (jnp.sin, "Transpose rule .* for 'sin' not implemented"),
    (lambda v: v * v, "'mul' of two values that depend on them"),
    (lambda v: 1.0 / v, "'div' of a divisor that depends on them")])
def test_linear_transpose_refuses_a_non_linear_function(fun, what):
    """JAX traces the function with its arguments unknown and fails at what it cannot
    transpose; shardc's transpose (the derivative at zero) would have answered quietly."""
    with pytest.raises(NotImplementedError, match=what):
        shardc.linear_transpose(fun, np.ones(3, np.float32))
    # linear functions built of the same operations are transposed
    t = shardc.linear_transpose(lambda v: v * 2 + v.sum() / 3, np.ones(3, np.float32))
    np.testing.assert_allclose(t(np.arange(3, dtype=np.float32))[0], np.arange(3) * 2 + 1)


def test_float0_results_through_vmap_and_jacobians():
    """vmap returns float0 zeros (an integer's tangent or cotangent) with the batch axis
    inserted; jacrev's block for an integer input and jacfwd's Jacobian of an integer output
    are zeros of that integer dtype, as JAX's."""
    x = np.array([1.2, 2.7, 3.0], np.float32)
    n = np.arange(3, dtype=np.int32)
    gx, gn = shardc.vmap(shardc.grad(lambda a, k: a * k, argnums=(0, 1), allow_int=True))(x, n)
    np.testing.assert_array_equal(gx, n)
    assert gn.dtype == shardc.dtypes.float0 and gn.shape == (3,)
    jx, jn = shardc.jacrev(lambda a, k: a * k, argnums=(0, 1), allow_int=True)(x, n)
    np.testing.assert_array_equal(jx, np.diag(n))
    assert jn.dtype == np.int32 and not np.asarray(jn).any() and jn.shape == (3, 3)
    jr = shardc.jacfwd(lambda a: jnp.round(a).astype(jnp.int32))(x)
    assert jr.dtype == np.int32 and jr.shape == (3, 3) and not np.asarray(jr).any()
    _, (t_bool, t_float) = shardc.vmap(
        lambda t: shardc.jvp(lambda a: (a > 2, a * 2), (x,), (t,)))(np.eye(3, dtype=np.float32))
    assert t_bool.dtype == shardc.dtypes.float0 and t_bool.shape == (3, 3)
    np.testing.assert_array_equal(t_float, 2 * np.eye(3))


@pytest.mark.parametrize("call, message", [
    (lambda x: shardc.jacrev(lambda a: a * (1 + 2j))(x), "jacrev requires real-valued outputs"),
    (lambda x: shardc.jacfwd(lambda z: jnp.real(z))(x.astype(np.complex64)),
     "jacfwd requires real-valued inputs"),
    (lambda x: shardc.jacfwd(lambda z: z * 2, holomorphic=True)(x),
     "jacfwd with holomorphic=True requires inputs with complex dtype"),
    (lambda x: shardc.jacrev(lambda z: jnp.real(z), holomorphic=True)(x.astype(np.complex64)),
     "jacrev with holomorphic=True requires outputs with complex dtype"),
    (lambda x: shardc.jacrev(lambda a: a > 0)(x), "jacrev requires real-valued outputs"),
])
def test_jacobians_check_dtypes_as_jax(call, message):
    """A complex output of jacrev without holomorphic=True was differentiated in its real part
    only; JAX refuses it, and the other mismatches, as TypeErrors."""
    with pytest.raises(TypeError, match=re.escape(message)):
        call(np.array([1.2, 2.7, 3.0], np.float32))


@pytest.mark.parametrize("transform", ["grad", "value_and_grad", "jacfwd", "jacrev",
                                       "hessian"])
def test_derivative_functions_keep_the_signature_for_static_argnames(transform):
    # as JAX's (functools.wraps): jit's static_argnames find the differentiated function's
    # parameters through the wrapper, so a Python flag stays static
    def f(x, flag):
        return x * x if flag else jnp.zeros_like(x)

    wrapped = getattr(shardc, transform)(f)
    assert wrapped.__name__ == "f"
    assert list(inspect.signature(wrapped).parameters) == ["x", "flag"]
    g = shardc.jit(wrapped, static_argnames=["flag"])
    on, off = g(3.0, True), g(3.0, False)
    want = {"grad": 6.0, "value_and_grad": (9.0, 6.0), "jacfwd": 6.0, "jacrev": 6.0,
            "hessian": 2.0}[transform]
    np.testing.assert_allclose(np.asarray(on), want)
    np.testing.assert_allclose(np.asarray(off), np.zeros_like(want))
    # and keywords reach the function
    np.testing.assert_allclose(np.asarray(wrapped(3.0, flag=True)), want)


def test_hessian_holomorphic():
    # hessian passes holomorphic to both its jacobians (JAX's api_test)
    a = np.random.RandomState(0).randn(4, 4).astype(np.float32)
    x = (np.arange(4.0) + 1).astype(np.complex64) * (1 + 2j)
    f = lambda v: jnp.dot(v, jnp.dot(a.astype(v.dtype), v))
    got = shardc.hessian(f, holomorphic=True)(x)
    assert got.dtype == np.complex64
    np.testing.assert_allclose(np.asarray(got), (a + a.T).astype(np.complex64), rtol=1e-5)
    with pytest.raises(TypeError, match="jacfwd requires real-valued inputs"):
        shardc.hessian(f)(x)


@pytest.mark.parametrize("bad", [lambda x: (1, 2, 3), lambda x: x, lambda x: (x,)])
def test_has_aux_requires_a_pair(bad):
    # JAX's TypeError, naming what the function returned
    with pytest.raises(TypeError, match="expected function with aux output to return a "
                                        "two-element tuple, but got type"):
        shardc.grad(bad, has_aux=True)(1.0)
    with pytest.raises(TypeError, match="two-element tuple"):
        shardc.vjp(bad, 1.0, has_aux=True)


@pytest.mark.parametrize("transform", ["grad", "jacfwd", "jacrev"])
def test_derivative_of_identity_at_a_python_number_is_a_weak_array(transform):
    # as JAX's: the derivative of a weakly typed input that comes back as it went in is a
    # weakly typed array (f32[] with weak_type=True), not a host numpy scalar
    out = getattr(shardc, transform)(lambda x: x)(1.0)
    assert isinstance(out, shardc.Array) and out.dtype == np.float32
    assert shardc.dtypes.is_weakly_typed(out) and float(out) == 1.0
    typed = getattr(shardc, transform)(lambda x: x)(np.float32(1.0))
    assert not shardc.dtypes.is_weakly_typed(typed)


def test_a_weakly_typed_arrays_gradient_is_weakly_typed_as_jaxs():
    # jnp.full(n, 0.3) is weakly typed: its gradient stays so where the seed is weak or the
    # array met a typed value (so an optimizer's bfloat16 state keeps its dtype); pulled
    # back from a typed cotangent it is typed (JAX 0.10.2's dtypes)
    b = jnp.full((3,), 0.3)
    W = jnp.arange(3.0, dtype=jnp.float32)
    half = jnp.ones(3, jnp.bfloat16)
    for g in (shardc.grad(lambda b: (b * b).sum())(b),
              shardc.jit(shardc.grad(lambda b: jnp.sin(b).sum()))(b),
              shardc.grad(lambda b: (W * b).sum())(b),
              shardc.grad(lambda p: (p["a"] * 2).mean())({"a": b})["a"],
              shardc.value_and_grad(lambda b: jnp.exp(b).sum())(b)[1]):
        assert shardc.dtypes.is_weakly_typed(g) and (g + half).dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(shardc.grad(lambda b: (b * b).sum())(b)), [0.6] * 3)
    typed = shardc.vjp(lambda b: b * 2, b)[1](jnp.ones(3))[0]
    assert not shardc.dtypes.is_weakly_typed(typed) and (typed + half).dtype == np.float32


def test_jvp_of_asarray_gives_arrays():
    # JAX's api_test (issue 15676): primal and tangent outputs are arrays, weakly typed
    p, t = shardc.jvp(jnp.asarray, (1.0,), (2.0,))
    assert isinstance(p, shardc.Array) and isinstance(t, shardc.Array)
    assert float(p) == 1.0 and float(t) == 2.0
    assert shardc.dtypes.is_weakly_typed(p) and shardc.dtypes.is_weakly_typed(t)
    p, t = shardc.jvp(lambda x: x, (np.float32(1.0),), (np.float32(2.0),))
    assert t.dtype == np.float32 and not shardc.dtypes.is_weakly_typed(t) and float(t) == 2.0


def test_linear_transpose_ignores_outputs_the_function_drops():
    # JAX removes what the output does not depend on before transposing (issue 15660): a
    # comparison computed alongside is no obstacle
    f = shardc.jit(lambda x: (2 * x, x > 0))
    (ct,) = shardc.linear_transpose(lambda x: f(x)[0], 1.0)(1.0)
    assert float(ct) == 2.0


def test_linear_transpose_checks_types_and_is_a_pytree():
    # JAX's TypeErrors, word for word where JAX's are
    with pytest.raises(TypeError, match=re.escape(
            "linear_transpose only supports [float or complex] -> [float or complex], and "
            "integer -> integer functions, but got ['int32'] -> ['float32'].")):
        shardc.linear_transpose(lambda x: 2.0 * x, 1)
    with pytest.raises(TypeError, match="cotangent tree does not match function output"):
        shardc.linear_transpose(lambda x: [x, x], 1.0)(1.0)
    for fun, ct in [(lambda x: jnp.stack([x, x]), 1.0), (lambda x: 1j * x, 1.0),
                    (lambda x: x, 1j)]:
        with pytest.raises(TypeError, match="cotangent type does not match function output"):
            shardc.linear_transpose(fun, 1.0)(ct)
    with pytest.raises(NotImplementedError, match="integer -> integer"):
        shardc.linear_transpose(lambda x: 2 * x, 1)
    # the transposed function passes in and out of jit, as JAX's Partial does
    transposed = shardc.jit(lambda x: shardc.linear_transpose(lambda y: 2.0 * y, x))(1.0)
    (ct,) = shardc.jit(lambda t, x: t(x))(transposed, 3.0)
    assert float(ct) == 6.0


def test_operations_on_float0_raise_jax_error():
    # JAX's TypeError: float0 (an integer's gradient) supports no operations
    f0 = shardc.grad(lambda x: x + 0.0, allow_int=True)(1)
    assert f0.dtype == shardc.dtypes.float0
    for op in (lambda: f0 + jnp.zeros(()), lambda: lax.add(f0, jnp.zeros(()))):
        with pytest.raises(TypeError, match="float0s do not support any operations by design"):
            op()


def test_float0_gradients_are_typed_as_their_primals():
    # JAX's TypedNdArray: an integer argument's gradient holds nothing but keeps the type
    # (shape and split) of the argument, under jit too; plain numpy float0 zeros are typed
    # by their shape
    from shardc.sharding import PartitionSpec as P
    with shardc.set_mesh(shardc.make_mesh((8,), ("i",))):
        idx = shardc.device_put(np.arange(16, dtype=np.int32), P("i"))
        x = jnp.ones(16, jnp.float32)
        grad = shardc.grad(lambda x, i: jnp.sum(x * i), argnums=(0, 1), allow_int=True)
        for gx, gi in (grad(x, idx), shardc.jit(grad)(x, idx)):
            np.testing.assert_array_equal(np.asarray(gx), np.arange(16, dtype=np.float32))
            assert type(gi).__name__ == "TypedNdArray" and gi.shape == (16,)
            assert gi.dtype == shardc.dtypes.float0
            assert str(shardc.typeof(gi)) == "float0[16@i]"
            assert shardc.typeof(gi).sharding.spec == P("i")
        _, pullback = shardc.vjp(lambda i: i * 2, idx)
        (ct,) = pullback(np.zeros(16, shardc.dtypes.float0))
        assert str(shardc.typeof(ct)) == "float0[16@i]"
        # passed through a jit, it keeps its type
        assert str(shardc.typeof(shardc.jit(lambda t: t)(gi))) == "float0[16@i]"
    assert str(shardc.typeof(np.zeros((2, 3), shardc.dtypes.float0))) == "float0[2,3]"
    with pytest.raises(TypeError, match="float0s do not support any operations by design"):
        jnp.sin(gi)


def test_linearized_function_checks_tangent_types():
    # JAX's ValueError: a tangent of the primal's dtype (float0 for an integer primal)
    f = lambda x: x
    _, f_jvp = shardc.linearize(f, 1.0)
    assert float(f_jvp(2.0)) == 2.0
    _, g_jvp = shardc.linearize(f, np.ones(2, np.int32))
    assert g_jvp(np.zeros(2, shardc.dtypes.float0)).dtype == shardc.dtypes.float0
    for fn, bad in [(f_jvp, 1), (g_jvp, np.ones(2, np.int32)),
                    (f_jvp, np.zeros((), shardc.dtypes.float0)), (f_jvp, np.ones(2, np.float32))]:
        with pytest.raises(ValueError, match="tangent values inconsistent"):
            fn(bad)


def test_array_constructors_make_float0_zeros_as_jax():
    """JAX's zeros, ones, full and empty (and their *_like) with dtype float0 give a host array
    of float0 zeros of the shape asked for, whatever the fill; *_like of float0 zeros keeps
    float0 unless another dtype is asked for. Such zeros are the tangent of an integer input."""
    float0 = shardc.dtypes.float0
    made = [jnp.zeros((2,), float0), jnp.ones((), float0), jnp.full((3,), 5, float0),
            jnp.empty((1,), dtype=float0), jnp.zeros_like(np.zeros(2), dtype=float0),
            jnp.ones_like(np.zeros((2, 2), float0))]
    for z, shape in zip(made, [(2,), (), (3,), (1,), (2,), (2, 2)]):
        assert isinstance(z, np.ndarray) and z.dtype == float0 and z.shape == shape
    np.testing.assert_array_equal(jnp.ones_like(np.zeros(2, float0), dtype=np.float32),
                                  np.ones(2, np.float32))

    @shardc.custom_jvp
    def f(x, y):
        return x, y

    @f.defjvp
    def f_jvp(primals, _):
        x, y = primals
        return (x, y), (2., shardc.custom_derivatives.zero_from_primal(y))

    (x, y), (tx, ty) = shardc.jvp(f, (2., 3), (np.ones(()), jnp.zeros((), dtype=float0)))
    assert (float(x), int(y), float(tx)) == (2., 3, 2.)
    assert ty.dtype == float0 and ty.shape == ()
