"""jax.nn beyond the core: activations, gelu's two forms, standardize, one_hot, softmax and
logsumexp options, dot_product_attention and the initializers, against numpy references,
eagerly, under jit, in shard_map bodies, with gradients against finite differences."""
from __future__ import annotations

import math

import numpy as np
import pytest

import shardc
import shardc.numpy as jnp
from shardc import nn, random

from breadth_checks import assert_close, check_grad, everywhere

_erf = np.vectorize(math.erf)
_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772, 1.0507009873554805


def _softplus(x):
    return np.logaddexp(x, 0)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


ACTIVATIONS = [
    ("gelu_exact", lambda x: nn.gelu(x, approximate=False),
     lambda x: x / 2 * (1 + _erf(x / np.sqrt(2)))),
    ("gelu_tanh", nn.gelu,
     lambda x: x / 2 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))),
    ("swish", nn.swish, lambda x: x * _sigmoid(x)),
    ("softplus", nn.softplus, _softplus),
    ("soft_sign", nn.soft_sign, lambda x: x / (np.abs(x) + 1)),
    ("tanh", nn.tanh, np.tanh),
    ("leaky_relu", nn.leaky_relu, lambda x: np.where(x >= 0, x, 0.01 * x)),
    ("leaky_relu_0.2", lambda x: nn.leaky_relu(x, 0.2), lambda x: np.where(x >= 0, x, 0.2 * x)),
    ("elu", nn.elu, lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0)))),
    ("elu_2", lambda x: nn.elu(x, 2.0),
     lambda x: np.where(x > 0, x, 2 * np.expm1(np.minimum(x, 0)))),
    ("celu_half", lambda x: nn.celu(x, 0.5),
     lambda x: np.maximum(x, 0) + 0.5 * np.minimum(np.expm1(x / 0.5), 0)),
    ("selu", nn.selu,
     lambda x: _SELU_SCALE * np.where(x > 0, x, _SELU_ALPHA * np.expm1(np.minimum(x, 0)))),
    ("hard_tanh", nn.hard_tanh, lambda x: np.clip(x, -1, 1)),
    ("relu6", nn.relu6, lambda x: np.clip(x, 0, 6)),
    ("hard_sigmoid", nn.hard_sigmoid, lambda x: np.clip(x + 3, 0, 6) / 6),
    ("hard_silu", nn.hard_silu, lambda x: x * np.clip(x + 3, 0, 6) / 6),
    ("log_sigmoid", nn.log_sigmoid, lambda x: -_softplus(-x)),
]


@pytest.mark.parametrize("name,fn,ref", ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
def test_activation_values_everywhere_and_gradient(name, fn, ref):
    rng = np.random.default_rng(0)
    # keep clear of kinks (0, +-1, -3, 3, 6) so finite differences are meaningful
    x = rng.uniform(-7, 7, (4, 5)).astype(np.float32)
    x = np.where(np.min(np.abs(x[..., None] - np.array([0, 1, -1, 3, -3, 6])), -1) < 0.05,
                 0.5, x).astype(np.float32)
    everywhere(fn, x, ref(x.astype(np.float64)), rtol=1e-5, atol=1e-6, dtype=np.float32)
    check_grad(lambda v: fn(v).sum(), x[0])
    # integer operands become float32 (hard_tanh's two selects keep them integers, as JAX's;
    # swish is lax.logistic's, which takes no integers)
    if name == "swish":
        with pytest.raises(TypeError, match="logistic does not accept dtype int32"):
            fn(np.arange(-2, 3))
        return
    assert np.asarray(fn(np.arange(-2, 3))).dtype == (np.int32 if name == "hard_tanh"
                                                      else np.float32)


def test_gelu_exact_differs_from_the_tanh_form():
    x = np.float32(-2.5)
    exact = float(nn.gelu(x, approximate=False))
    assert exact == pytest.approx(-2.5 / 2 * (1 + math.erf(-2.5 / math.sqrt(2))), rel=1e-6)
    assert abs(exact - float(nn.gelu(x))) > 1e-4


def test_glu_and_standardize():
    x = np.random.default_rng(1).normal(size=(4, 6)).astype(np.float32)
    a, b = x[:, :3], x[:, 3:]
    everywhere(nn.glu, x, a * _sigmoid(b), 1e-6, 1e-6, np.float32)
    assert_close(nn.glu(x, axis=0), x[:2] * _sigmoid(x[2:]), 1e-6, 1e-6)
    with pytest.raises(AssertionError, match="axis size must be divisible by 2"):   # JAX's
        nn.glu(np.ones((2, 3), np.float32))
    want = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    everywhere(nn.standardize, x, want, 1e-5, 1e-5, np.float32)
    assert_close(nn.standardize(x, axis=0, epsilon=0.0),
                 (x - x.mean(0)) / x.std(0), 1e-5, 1e-5)
    mask = np.arange(6) < 4
    sub = x[:, :4]
    masked = (x - sub.mean(-1, keepdims=True)) / np.sqrt(sub.var(-1, keepdims=True) + 1e-5)
    assert_close(nn.standardize(x, where=mask), masked, 1e-5, 1e-5)
    check_grad(lambda v: (nn.standardize(v) * np.arange(6)).sum(), x[:1], rtol=3e-2, atol=3e-3)


def test_activations_take_the_dtypes_jaxs_take():
    ints, bools = np.arange(-2, 3, dtype=np.int32), np.array([True, False])
    # sigmoid is lax.logistic: floating or complex only, and silu, swish and glu with it
    from shardc import lax
    for fn in (lax.logistic, nn.sigmoid, nn.silu, nn.swish, lambda v: nn.glu(v[:4])):
        with pytest.raises(TypeError, match="logistic does not accept dtype int32. Accepted "
                                            "dtypes are subtypes of floating, complexfloating."):
            fn(ints)
    with pytest.raises(TypeError, match="logistic does not accept dtype int32"):
        nn.sigmoid(2)
    assert nn.sigmoid(2.0).dtype == np.float32
    # booleans do not negate or subtract (log_sigmoid, log1mexp, softmax); integers do
    for fn in (nn.log_sigmoid, nn.log1mexp, nn.softmax, nn.log_softmax):
        with pytest.raises(TypeError):
            fn(bools)
    assert_close(nn.softmax(ints), np.exp(ints) / np.exp(ints).sum(), 1e-6, 1e-7,
                 dtype=np.float32)
    assert_close(nn.log_sigmoid(ints), -np.logaddexp(0, -ints), 1e-6, 1e-6, dtype=np.float32)
    # squareplus promotes x and b together: an integer x with a float16 b is float16
    assert_close(nn.squareplus(ints, np.float16(1)), (ints + np.sqrt(ints ** 2 + 1)) / 2,
                 1e-3, 1e-3, dtype=np.float16)
    # log1mexp's derivative is JAX's 1 / expm1(x): infinite at 0, not NaN
    assert np.asarray(shardc.grad(nn.log1mexp)(0.0)) == np.inf
    check_grad(lambda v: nn.log1mexp(v).sum(), np.array([0.01, 0.5, 3.0], np.float32))


def test_one_hot_axis_dtype_and_out_of_range():
    labels = np.array([[0, 2], [3, -1]], np.int32)
    eye = np.eye(3, dtype=np.float32)
    want = np.stack([np.stack([eye[0], eye[2]]), np.zeros((2, 3), np.float32)])
    got = nn.one_hot(labels, 3)
    assert_close(got, want, dtype=np.float32)
    assert_close(nn.one_hot(labels, 3, axis=0), np.moveaxis(want, -1, 0))
    assert_close(nn.one_hot(labels, 3, axis=1), np.moveaxis(want, -1, 1))
    assert nn.one_hot(labels, 3, dtype=jnp.int32).dtype == np.int32
    with pytest.raises(ValueError, match="axis 3 is out of bounds for array of dimension 3"):
        nn.one_hot(labels, 3, axis=3)
    everywhere(lambda v: nn.one_hot(v, 3), labels, want)


def test_one_hot_num_classes_and_input_dtype_as_jaxs():
    labels = np.array([0, 2], np.int32)
    # num_classes must be known when tracing: JAX's ConcretizationTypeError, naming it
    with pytest.raises(shardc.errors.ConcretizationTypeError,
                       match=r"(?s)Abstract tracer value encountered where concrete value is "
                             r"expected: traced array with shape int32\[\]\nThe error arose "
                             r"in jax.nn.one_hot argument `num_classes`."):
        shardc.jit(nn.one_hot)(3, 5)
    with pytest.raises(TypeError, match="'float' object cannot be interpreted as an integer"):
        nn.one_hot(labels, 3.0)
    assert nn.one_hot(labels, np.int64(3)).shape == (2, 3)
    with pytest.raises(TypeError, match=r"iota shape must have every element be nonnegative, "
                                        r"got \(1, -1\)."):
        nn.one_hot(labels, -1)
    # a float input is deprecated (it still compares with an iota of its dtype); a bool one
    # has no iota
    with pytest.warns(DeprecationWarning, match="jax.nn.one_hot input should be "
                                                "integer-typed; got dtype=float32"):
        assert_close(nn.one_hot(np.array([1.0, 1.5], np.float32), 3),
                     np.array([[0, 1, 0], [0, 0, 0]], np.float32))
    with pytest.warns(DeprecationWarning), \
            pytest.raises(TypeError, match="iota does not accept dtype bool. Accepted dtypes "
                                           "are subtypes of integer, floating, complexfloating."):
        nn.one_hot(np.array([True]), 3)
    with shardc.enable_x64():
        assert nn.one_hot(labels, 3).dtype == np.float64


def test_softmax_logsumexp_with_where_b_and_return_sign():
    x = np.random.default_rng(2).normal(size=(4, 5)).astype(np.float32)
    mask = np.array([True, False, True, True, False])
    e = np.where(mask, np.exp(x - x.max(-1, keepdims=True)), 0)
    assert_close(nn.softmax(x, where=mask), e / e.sum(-1, keepdims=True), 1e-6, 1e-7)
    assert_close(nn.log_softmax(x, where=mask)[:, mask],
                 np.log((e / e.sum(-1, keepdims=True))[:, mask]), 1e-5, 1e-6)
    assert np.all(np.asarray(nn.log_softmax(x, where=mask))[:, ~mask] == -np.inf)
    x64 = x.astype(np.float64)
    b = np.array([1.0, -2.0, 0.5, 0.0, 3.0], np.float32)
    total = (b * np.exp(x64)).sum(-1)
    out, sign = nn.logsumexp(x, axis=-1, b=b, return_sign=True)
    assert_close(out, np.log(np.abs(total)), 1e-5, 1e-6, np.float32)
    assert_close(sign, np.sign(total))
    plain = np.asarray(nn.logsumexp(x, axis=-1, b=b))
    assert np.all(np.isnan(plain[total < 0]))
    assert_close(nn.logsumexp(x, axis=1, where=mask, keepdims=True),
                 np.log(np.exp(x64[:, mask]).sum(1, keepdims=True)), 1e-5, 1e-6)
    assert_close(nn.logsumexp(np.full(3, -np.inf, np.float32)), -np.inf)
    check_grad(lambda v: nn.logsumexp(v, b=np.abs(b) + 0.5), x[0])


def _attention_reference(q, k, v, bias=None, mask=None, scale=None, causal=False):
    q, k, v = (t.astype(np.float64) for t in (q, k, v))
    groups = q.shape[2] // k.shape[2]
    k, v = np.repeat(k, groups, axis=2), np.repeat(v, groups, axis=2)
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    logits = np.einsum("btnh,bsnh->bnts", q, k) * scale
    if bias is not None:
        logits = logits + bias
    allowed = np.ones(logits.shape, bool)
    if mask is not None:
        allowed &= np.broadcast_to(mask, logits.shape)
    if causal:
        allowed &= np.tril(np.ones(logits.shape[-2:], bool))
    logits = np.where(allowed, logits, -np.inf)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)
    return np.einsum("bnts,bsnh->btnh", w, v)


def test_dot_product_attention_against_reference():
    rng = np.random.default_rng(3)
    q = rng.normal(size=(2, 4, 4, 8)).astype(np.float32)
    k = rng.normal(size=(2, 6, 2, 8)).astype(np.float32)      # grouped: 2 key heads
    v = rng.normal(size=(2, 6, 2, 8)).astype(np.float32)
    bias = rng.normal(size=(1, 4, 4, 6)).astype(np.float32)
    mask = rng.random((2, 1, 4, 6)) < 0.7
    mask[..., 0] = True                                        # no row fully masked
    assert_close(nn.dot_product_attention(q, k, v), _attention_reference(q, k, v), 1e-5, 1e-5)
    assert_close(nn.dot_product_attention(q, k, v, bias, mask, scale=0.3),
                 _attention_reference(q, k, v, bias, mask, 0.3), 1e-5, 1e-5)
    kq = rng.normal(size=(2, 4, 2, 8)).astype(np.float32)
    assert_close(nn.dot_product_attention(q, kq, kq, is_causal=True),
                 _attention_reference(q, kq, kq, causal=True), 1e-5, 1e-5)
    assert_close(nn.dot_product_attention(q[0], k[0], v[0]),
                 _attention_reference(q, k, v)[0], 1e-5, 1e-5)
    everywhere(lambda t: nn.dot_product_attention(t, t, t, is_causal=True), q,
               _attention_reference(q, q, q, causal=True), 1e-5, 1e-5)
    with pytest.raises(ValueError, match="The number of query heads must be a multiple of "
                                         "key/value heads, but got 3 vs 2"):
        nn.dot_product_attention(q[:, :, :3], k, v)


def test_dot_product_attention_residual_ranks_and_operand_checks():
    # return_residual: the logsumexp of each query's (masked, scaled) logits, [B, T, N] (JAX's
    # FlashAttention residual), with no gradient through it
    rng = np.random.default_rng(4)
    q = rng.normal(size=(2, 4, 4, 8)).astype(np.float32)
    k = rng.normal(size=(2, 6, 2, 8)).astype(np.float32)
    v = rng.normal(size=(2, 6, 2, 8)).astype(np.float32)
    mask = rng.random((2, 1, 4, 6)) < 0.7
    mask[..., 0] = True
    logits = np.einsum("btnh,bsnh->bnts", q.astype(np.float64),
                       np.repeat(k, 2, axis=2).astype(np.float64)) / np.sqrt(8)
    logits = np.where(mask, logits, np.finfo(np.float32).min * 0.7)
    lse = np.log(np.exp(logits).sum(-1)).transpose(0, 2, 1)
    out, residual = nn.dot_product_attention(q, k, v, mask=mask, return_residual=True)
    assert_close(out, _attention_reference(q, k, v, mask=mask), 1e-5, 1e-5)
    assert residual.shape == (2, 4, 4) and residual.dtype == np.float32
    assert_close(residual, lse, 1e-5, 1e-5)
    out3, residual3 = nn.dot_product_attention(q[0], k[0], v[0], return_residual=True)
    assert out3.shape == (4, 4, 8) and residual3.shape == (4, 4)
    g = shardc.grad(lambda t: nn.dot_product_attention(t, k, v, return_residual=True)[1].sum())
    assert not np.asarray(g(q)).any()
    # bias and mask of lower rank gain leading dimensions, as the operands do
    bias = rng.normal(size=(4, 6)).astype(np.float32)
    assert_close(nn.dot_product_attention(q, k, v, bias),
                 _attention_reference(q, k, v, bias=bias), 1e-5, 1e-5)
    with pytest.raises(ValueError, match="mask dtype should be bool, but got int32"):
        nn.dot_product_attention(q, k, v, mask=mask.astype(np.int32))
    with pytest.raises(ValueError, match="query dtype should be float32, but got bfloat16"):
        nn.dot_product_attention(jnp.astype(q, jnp.bfloat16), k, v)
    with pytest.raises(ValueError, match=r"value shape should be \[2, 6, 2, 8\]"):
        nn.dot_product_attention(q, k, v[:, :3])
    with pytest.raises(ValueError, match="query_seq_lengths dtype should be int32"):
        nn.dot_product_attention(q, k, v, query_seq_lengths=np.array([3.0, 4.0], np.float32))
    with pytest.raises(ValueError, match="mask ndim should be 4, but got 5"):
        nn.dot_product_attention(q, k, v, mask=mask[None])
    with pytest.raises(ValueError, match="Unsupported implementation option: flash"):
        nn.dot_product_attention(q, k, v, implementation="flash")


def test_dot_product_attention_gradient():
    rng = np.random.default_rng(5)
    k = rng.normal(size=(1, 3, 1, 4)).astype(np.float32)
    v = rng.normal(size=(1, 3, 1, 4)).astype(np.float32)
    q = rng.normal(size=(1, 2, 1, 4)).astype(np.float32)
    check_grad(lambda t: (nn.dot_product_attention(t, k, v) ** 2).sum(), q)


INITIALIZERS = [
    ("glorot_uniform", nn.initializers.glorot_uniform(), "uniform", 1.0, "fan_avg"),
    ("xavier_normal", nn.initializers.xavier_normal(), "truncated", 1.0, "fan_avg"),
    ("lecun_uniform", nn.initializers.lecun_uniform(), "uniform", 1.0, "fan_in"),
    ("lecun_normal", nn.initializers.lecun_normal(), "truncated", 1.0, "fan_in"),
    ("he_uniform", nn.initializers.he_uniform(), "uniform", 2.0, "fan_in"),
    ("kaiming_normal", nn.initializers.kaiming_normal(), "truncated", 2.0, "fan_in"),
    ("fan_out_normal", nn.initializers.variance_scaling(3.0, "fan_out", "normal"), "normal",
     3.0, "fan_out"),
]


@pytest.mark.parametrize("name,init,kind,scale,mode", INITIALIZERS,
                         ids=[i[0] for i in INITIALIZERS])
def test_variance_scaling_initializers(name, init, kind, scale, mode):
    shape = (3, 3, 40, 60)                     # a conv kernel: receptive field 9
    fan_in, fan_out = 40 * 9, 60 * 9
    n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2}[mode]
    w = np.asarray(init(random.key(0), shape))
    assert w.shape == shape and w.dtype == np.float32
    assert abs(w.mean()) < 0.05 * np.sqrt(scale / n)
    assert w.var() == pytest.approx(scale / n, rel=0.05)
    if kind == "uniform":
        assert np.abs(w).max() <= np.sqrt(3 * scale / n)
    if kind == "truncated":
        assert np.abs(w).max() <= 2 * np.sqrt(scale / n) / 0.87962566103423978 * (1 + 1e-6)


def test_simple_initializers():
    key = random.key(1)
    assert_close(nn.initializers.zeros(key, (2, 3)), np.zeros((2, 3)), dtype=np.float32)
    assert_close(nn.initializers.ones(key, (2,), jnp.int32), np.ones(2), dtype=np.int32)
    assert_close(nn.initializers.constant(-0.5)(key, (3,)), np.full(3, -0.5))
    n = np.asarray(nn.initializers.normal(0.1)(key, (20000,)))
    assert n.std() == pytest.approx(0.1, rel=0.03) and abs(n.mean()) < 3e-3
    u = np.asarray(nn.initializers.uniform(2.0)(key, (20000,)))
    assert u.min() >= 0 and u.max() < 2 and u.mean() == pytest.approx(1.0, rel=0.03)
    t = np.asarray(nn.initializers.truncated_normal(0.5)(key, (20000,)))
    assert np.abs(t).max() <= 1.0
    assert t.std() == pytest.approx(0.5 * 0.87962566103423978, rel=0.03)
    # as JAX's, a bad mode or distribution is refused when the initializer is called
    sideways = nn.initializers.variance_scaling(1.0, "fan_sideways", "normal")
    with pytest.raises(ValueError, match="invalid mode for variance scaling initializer: "
                                         "fan_sideways"):
        sideways(key, (2, 3))
    with pytest.raises(ValueError, match="invalid distribution for variance scaling "
                                         "initializer: cauchy"):
        nn.initializers.variance_scaling(1.0, "fan_in", "cauchy")(key, (2, 3))


@pytest.mark.parametrize("distribution", ["truncated_normal", "normal", "uniform"])
def test_variance_scaling_draws_complex_values(distribution):
    # JAX: a complex normal truncated at modulus 2 (its std 0.9531...), a complex normal, and a
    # uniform disk, each scaled to E|z|**2 = scale / n with its parts sharing the variance
    init = nn.initializers.variance_scaling(2.0, "fan_in", distribution)
    w = init(random.key(4), (200, 300), jnp.complex64)
    assert w.shape == (200, 300) and w.dtype == np.complex64
    w = np.asarray(w, np.complex128)
    variance = 2.0 / 200
    assert abs(w.mean()) < 5 * np.sqrt(variance / w.size)
    assert np.mean(np.abs(w) ** 2) == pytest.approx(variance, rel=0.05)
    assert w.real.var() == pytest.approx(variance / 2, rel=0.05)
    assert w.imag.var() == pytest.approx(variance / 2, rel=0.05)
    if distribution == "truncated_normal":
        assert np.abs(w).max() <= 2 * np.sqrt(variance) / 0.95311164380491208 * (1 + 1e-6)
    if distribution == "uniform":
        assert np.abs(w).max() <= np.sqrt(2 * variance) * (1 + 1e-6)
    for name in ("he_normal", "glorot_normal", "lecun_uniform"):
        assert getattr(nn.initializers, name)()(random.key(0), (3, 4), jnp.complex64).dtype \
            == np.complex64


def test_variance_scaling_fans_follow_the_axes_given():
    # JAX's formula: receptive field = size / in / out / batch; given axes may be empty (size
    # 1), so a rank-1 or rank-0 shape has fans; overlapping in and out axes divide twice
    key = random.key(5)
    init = lambda **axes: nn.initializers.variance_scaling(1.0, "fan_in", "normal", **axes)
    w = np.asarray(init(in_axis=[], out_axis=[])(key, (20000,)), np.float64)
    assert w.var() == pytest.approx(1 / 20000, rel=0.05)   # the whole size is the field
    w = np.asarray(init(in_axis=[0], out_axis=[])(key, (20000,)), np.float64)
    assert w.var() == pytest.approx(1 / 20000, rel=0.05)
    w = np.asarray(init(in_axis=[], out_axis=[0])(key, (20000,)), np.float64)
    assert w.var() == pytest.approx(1.0, rel=0.05)         # fan_in 1
    assert init(in_axis=[], out_axis=[])(key, ()).shape == ()
    w = np.asarray(init(in_axis=0, out_axis=0)(key, (5000, 4)), np.float64)
    assert w.var() == pytest.approx(1 / 4, rel=0.05)       # fan_in = 5000 * 20000 / 5000**2
    w = np.asarray(init(in_axis=0, out_axis=(2, 3), batch_axis=1)(key, (20, 30, 4, 5)))
    assert w.var() == pytest.approx(1 / 20, rel=0.05)
    with pytest.raises(ValueError, match="Can't compute input and output sizes of a "
                                         "1-dimensional weights tensor with default in_axis. "
                                         "Must be at least 2D or specify in_axis explicitly."):
        init()(key, (5,))
    with pytest.raises(ZeroDivisionError):                 # as JAX's: a zero fan
        init()(key, (2, 0))


def test_initializers_low_precision_default_dtype_and_protocol():
    key = random.key(6)
    for dtype in (jnp.float16, jnp.bfloat16):
        for init in (nn.initializers.he_normal(), nn.initializers.glorot_uniform(),
                     nn.initializers.normal(0.1)):
            w = init(key, (200, 300), dtype)
            assert w.dtype == dtype
            w = np.asarray(w, np.float64)
            assert np.isfinite(w).all() and w.std() > 0
    assert nn.initializers.uniform(3.0)(key, (20000,), jnp.bfloat16).astype(np.float32).max() < 3
    # dtype None is JAX's default float: float64 under x64
    with shardc.enable_x64():
        for init in (nn.initializers.he_normal(), nn.initializers.orthogonal(),
                     nn.initializers.constant(2), nn.initializers.zeros):
            assert init(key, (3, 3)).dtype == np.float64
    assert nn.initializers.normal()(key, (2,)).dtype == np.float32
    assert isinstance(nn.initializers.he_normal(), nn.initializers.Initializer)
    assert isinstance(nn.initializers.zeros, nn.initializers.Initializer)
    with pytest.raises(ValueError, match="dtype argument to `normal` must be a float or "
                                         "complex dtype, got int32"):
        nn.initializers.normal()(key, (2,), jnp.int32)


@pytest.mark.parametrize("shape,column_axis", [((6, 4), -1), ((3, 8), -1), ((2, 3, 5), 0)])
def test_orthogonal_initializer(shape, column_axis):
    w = np.asarray(nn.initializers.orthogonal(scale=2.0, column_axis=column_axis)(
        random.key(3), shape), np.float64)
    assert w.shape == shape and w.dtype == np.float64
    cols = np.moveaxis(w, column_axis, -1).reshape(-1, shape[column_axis])
    small = min(cols.shape)
    gram = cols.T @ cols if cols.shape[0] >= cols.shape[1] else cols @ cols.T
    np.testing.assert_allclose(gram, 4.0 * np.eye(small), atol=1e-5)


def test_orthogonal_initializer_zero_size_rank_and_complex():
    init = nn.initializers.orthogonal()
    for shape in ((2, 0), (0, 0), (0, 3)):
        w = init(random.key(0), shape, jnp.float16)
        assert w.shape == shape and w.dtype == np.float16
    with pytest.raises(ValueError, match="orthogonal initializer requires at least a 2D shape"):
        init(random.key(0), (3,))
    w = np.asarray(init(random.key(1), (3, 5), jnp.complex64), np.complex128)
    assert np.abs(w.imag).max() > 0.1
    np.testing.assert_allclose(w @ w.conj().T, np.eye(3), atol=1e-5)


# --- the smaller activations of jax.nn, against their formulas in float64 ------------------------

_X = np.linspace(-2.5, 3.0, 23)


@pytest.mark.parametrize("name, ref", [
    ("identity", lambda x: x),
    ("mish", lambda x: x * np.tanh(np.logaddexp(x, 0))),
    ("squareplus", lambda x: (x + np.sqrt(x * x + 4)) / 2),
    ("sparse_plus", lambda x: np.where(x <= -1, 0, np.where(x >= 1, x, (x + 1) ** 2 / 4))),
    ("sparse_sigmoid", lambda x: np.clip(x + 1, 0, 2) / 2),
])
def test_more_activations(name, ref):
    fn = getattr(nn, name)
    np.testing.assert_allclose(np.asarray(fn(_X.astype(np.float32))), ref(_X), rtol=1e-5,
                               atol=1e-6)
    away = _X[np.abs(np.abs(_X) - 1) > 0.05]          # off sparse_*'s kinks
    check_grad(lambda a: fn(a).sum(), away)


def test_log1mexp_and_logmeanexp():
    y = np.array([0.001, 0.5, 1.0, 5.0, 30.0])
    np.testing.assert_allclose(np.asarray(nn.log1mexp(y.astype(np.float32))),
                               np.log1p(-np.exp(-y)), rtol=1e-5)
    m = np.arange(6.0).reshape(2, 3)
    np.testing.assert_allclose(np.asarray(nn.logmeanexp(m)), np.log(np.exp(m).mean()),
                               rtol=1e-6)
    np.testing.assert_allclose(np.asarray(nn.logmeanexp(m, axis=1, where=m > 1)),
                               [2.0, np.log(np.exp(m[1]).mean())], rtol=1e-6)
    assert nn.logmeanexp(m, axis=1, keepdims=True).shape == (2, 1)


def test_standardize_fast_and_stable_variances():
    """JAX's default ``algorithm='fast'`` takes the variance as ``mean(x**2) - mean**2``
    (clipped at 0), with the mean given or not; ``'stable'`` as ``mean((x - mean)**2)``."""
    x = np.array([[1.0, 2.0, 4.0, 7.0]], np.float32)
    fast = np.clip(np.mean(x * x, -1, keepdims=True) - 1.0, 0, None)
    assert_close(nn.standardize(x, mean=1.0), (x - 1.0) / np.sqrt(fast + 1e-5), 1e-6, 1e-6)
    centred = x - x.mean(-1, keepdims=True)
    stable = (centred * centred).mean(-1, keepdims=True)
    assert_close(nn.standardize(x, algorithm="stable"), centred / np.sqrt(stable + 1e-5),
                 1e-6, 1e-6)
    with pytest.raises(ValueError, match="Unknown algorithm 'exact'"):
        nn.standardize(x, algorithm="exact")


def test_gelu_exact_keeps_its_negative_tail():
    """``x/2 erfc(-x/sqrt 2)``: no cancellation where ``1 + erf`` loses every digit."""
    x = np.array([-3.0, -5.0, -7.0], np.float32)
    want = [0.5 * v * math.erfc(-v / math.sqrt(2)) for v in x.astype(np.float64)]
    assert_close(nn.gelu(x, approximate=False), np.array(want), 2e-6, 0.0)


def test_complex_logsumexp_and_logaddexp():
    """Complex entries: shifted by the largest real part and the log of the complex sum kept
    (the principal branch), as JAX's; only ``return_sign`` takes its modulus."""
    z = np.array([1 + 1j, 2 - 0.5j, 0.3 + 2j], np.complex64)
    want = np.log(np.exp(z.astype(np.complex128)).sum())
    close = np.testing.assert_allclose          # complex values, both parts compared
    close(np.asarray(nn.logsumexp(z)), want, rtol=1e-5)
    out, sign = nn.logsumexp(z, return_sign=True)
    assert out.dtype == np.float32
    assert_close(out, np.log(abs(np.exp(z.astype(np.complex128)).sum())), 1e-5, 1e-6)
    b = np.array([1.0, -2.0, 1.0], np.float32)
    close(np.asarray(nn.logsumexp(z, b=b)), np.log((b * np.exp(z.astype(np.complex128))).sum()),
          rtol=1e-5)
    w = z[::-1] * 3
    close(np.asarray(jnp.logaddexp(z, w)), np.log(np.exp(z.astype(np.complex128)) + np.exp(w)),
          rtol=1e-5)


def test_one_hot_over_a_mesh_axis():
    """``axis`` a mesh axis name in a shard_map body: device k of the axis holds ``x == k``
    (the result's class dimension is the axis itself)."""
    import shardc
    from shardc.sharding import PartitionSpec as P
    mesh = shardc.make_mesh((2, 4), ("x", "y"))
    labels = (np.arange(16).reshape(8, 2) % 4).astype(np.int32)
    f = shardc.shard_map(lambda a: nn.one_hot(a, 4, axis="y"), mesh=mesh,
                         in_specs=P("x", None), out_specs=P("x", "y"))
    want = np.concatenate([(labels == k) for k in range(4)], axis=1).astype(np.float32)
    assert_close(f(labels), want, 0, 0)
    bad = shardc.shard_map(lambda a: nn.one_hot(a, 3, axis="y"), mesh=mesh,
                           in_specs=P("x", None), out_specs=P("x", "y"))
    with pytest.raises(ValueError, match="num_classes to match the size of axis y, but 3 != 4"):
        bad(labels)


def test_attention_logits_accumulate_in_float32_from_bfloat16():
    """bfloat16 queries and keys: the logits are one float32 contraction of the bfloat16
    values (JAX's preferred_element_type), not rounded to bfloat16 first."""
    import ml_dtypes
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 4, 2, 8)).astype(ml_dtypes.bfloat16) for _ in range(3))
    qf, kf, vf = (a.astype(np.float32) for a in (q, k, v))
    logits = np.einsum("btnh,bsnh->bnts", qf, kf) / np.sqrt(8)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights = (weights / weights.sum(-1, keepdims=True)).astype(ml_dtypes.bfloat16)
    want = np.einsum("bnts,bsnh->btnh", weights.astype(np.float32), vf)
    got = np.asarray(nn.dot_product_attention(q, k, v)).astype(np.float32)
    assert_close(got, want, 8e-3, 8e-3)


def test_attention_sequence_lengths_and_local_windows():
    """query_seq_lengths/key_value_seq_lengths mask the padding (padding queries' outputs are
    zeros) and local_window_size (an int: both sides) keeps keys near each query, against a
    numpy reference with the equivalent explicit mask."""
    rng = np.random.default_rng(1)
    q = rng.standard_normal((2, 5, 2, 4)).astype(np.float32)
    k = rng.standard_normal((2, 6, 2, 4)).astype(np.float32)
    v = rng.standard_normal((2, 6, 2, 4)).astype(np.float32)

    def reference(allowed):
        logits = np.einsum("btnh,bsnh->bnts", q, k) / 2.0
        logits = np.where(allowed, logits, np.finfo(np.float32).min * 0.7)
        w = np.exp(logits - logits.max(-1, keepdims=True))
        return np.einsum("bnts,bsnh->btnh", w / w.sum(-1, keepdims=True), v)

    t, s = np.arange(5)[:, None], np.arange(6)[None, :]
    lengths_q, lengths_kv = np.array([3, 5]), np.array([4, 6])
    padding = (t[None] < lengths_q[:, None, None]) & (s[None] < lengths_kv[:, None, None])
    want = reference(padding[:, None]) * (np.arange(5)[None, :] < lengths_q[:, None])[
        :, :, None, None]
    got = nn.dot_product_attention(q, k, v, query_seq_lengths=lengths_q,
                                   key_value_seq_lengths=lengths_kv)
    assert_close(got, want, 1e-5, 1e-6)
    window = (t <= s + 1) & (t >= s - 1)
    assert_close(nn.dot_product_attention(q, k, v, local_window_size=1),
                 reference(window[None, None]), 1e-5, 1e-6)


@pytest.mark.parametrize("name", ["gelu", "leaky_relu", "hard_sigmoid", "hard_silu",
                                  "sparse_plus", "sparse_sigmoid"])
def test_activations_of_a_numpy_bfloat16_array_stay_bfloat16(name):
    """The report: numpy's own arithmetic with Python floats widened a numpy bfloat16 array
    to float32; JAX's activations keep its dtype (and round as bfloat16)."""
    x = np.array([-2.0, -0.5, 0.25, 1.5], dtype=jnp.bfloat16)
    f = getattr(nn, name)
    got = f(x)
    assert got.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(got), np.asarray(f(jnp.asarray(x))))
