"""lax.conv_general_dilated and lax.conv against a direct numpy convolution (a loop over
output positions): layouts, strides, SAME/VALID/explicit padding, lhs and rhs dilation,
feature groups; under jit, vmap and shard_map; gradients against finite differences; a small
CNN layer trained for a few steps."""
from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import shardc
import shardc.numpy as jnp
from shardc import lax
from shardc.sharding import PartitionSpec as P

from breadth_checks import assert_close, check_grad, mesh2


def _dilate(a, dilation, first_spatial=2):
    for axis, d in enumerate(dilation, start=first_spatial):
        if d == 1:
            continue
        shape = list(a.shape)
        shape[axis] = (shape[axis] - 1) * d + 1
        out = np.zeros(shape, a.dtype)
        index = [slice(None)] * a.ndim
        index[axis] = slice(None, None, d)
        out[tuple(index)] = a
        a = out
    return a


def _pad(a, pads):
    grow = [(0, 0)] * 2 + [(max(lo, 0), max(hi, 0)) for lo, hi in pads]
    a = np.pad(a, grow)
    index = [slice(None)] * 2 + [slice(max(-lo, 0), a.shape[2 + k] - max(-hi, 0))
                                 for k, (lo, hi) in enumerate(pads)]
    return a[tuple(index)]


def reference_conv(x, w, strides, pads, lhs_dilation, rhs_dilation, groups):
    """``x`` [N, C, *S], ``w`` [O, I, *K], float64, by the definition."""
    x = _pad(_dilate(x.astype(np.float64), lhs_dilation), pads)
    w = _dilate(w.astype(np.float64), rhs_dilation)
    n, c = x.shape[:2]
    o, i = w.shape[:2]
    windows = w.shape[2:]
    out_sizes = [(s - k) // st + 1 for s, k, st in zip(x.shape[2:], windows, strides)]
    out = np.zeros((n, o) + tuple(out_sizes))
    per_group = o // groups
    for position in itertools.product(*[range(s) for s in out_sizes]):
        window = tuple(slice(p * st, p * st + k) for p, st, k in zip(position, strides, windows))
        for out_feature in range(o):
            g = out_feature // per_group
            patch = x[(slice(None), slice(g * i, (g + 1) * i)) + window]
            out[(slice(None), out_feature) + position] = np.tensordot(
                patch, w[out_feature], axes=w.ndim - 1)
    return out


def _same_pads(in_sizes, windows, strides, lower=False):
    pads = []
    for s, k, st in zip(in_sizes, windows, strides):
        total = max((math.ceil(s / st) - 1) * st + k - s, 0)
        lo = total // 2 if not lower else total - total // 2
        pads.append((lo, total - lo))
    return pads


CASES = [
    # (lhs shape NC..., rhs shape OI..., strides, padding, lhs_dil, rhs_dil, groups)
    ((2, 3, 7, 6), (4, 3, 3, 2), (1, 1), "VALID", (1, 1), (1, 1), 1),
    ((2, 3, 7, 6), (4, 3, 3, 3), (2, 1), "SAME", (1, 1), (1, 1), 1),
    ((1, 2, 8, 5), (2, 2, 2, 3), (2, 2), "SAME_LOWER", (1, 1), (1, 1), 1),
    ((1, 2, 6, 6), (3, 2, 3, 3), (1, 2), [(2, -1), (0, 1)], (1, 1), (2, 1), 1),
    ((2, 4, 5, 5), (6, 2, 2, 2), (1, 1), [(0, 0), (1, 0)], (2, 1), (1, 2), 2),
    ((2, 4, 6, 6), (4, 1, 3, 3), (1, 1), "SAME", (1, 1), (1, 1), 4),     # depthwise
    ((2, 3, 9), (2, 3, 4), (3,), [(1, 2)], (1,), (2,), 1),                 # 1-d
    ((1, 2, 4, 3, 3), (2, 2, 2, 2, 1), (1, 1, 1), "SAME", (1, 1, 1), (1, 1, 1), 1),   # 3-d
]


@pytest.mark.parametrize("case", CASES, ids=[f"case{k}" for k in range(len(CASES))])
def test_conv_general_dilated_against_the_definition(case):
    lhs_shape, rhs_shape, strides, padding, lhs_dil, rhs_dil, groups = case
    rng = np.random.default_rng(len(lhs_shape) + sum(rhs_shape))
    x = rng.normal(size=lhs_shape).astype(np.float32)
    w = rng.normal(size=rhs_shape).astype(np.float32)
    dilated = [(s - 1) * d + 1 for s, d in zip(lhs_shape[2:], lhs_dil)]
    windows = [(k - 1) * d + 1 for k, d in zip(rhs_shape[2:], rhs_dil)]
    pads = (padding if not isinstance(padding, str) else
            [(0, 0)] * len(strides) if padding == "VALID" else
            _same_pads(dilated, windows, strides, padding == "SAME_LOWER"))
    want = reference_conv(x, w, strides, pads, lhs_dil, rhs_dil, groups)
    got = lax.conv_general_dilated(x, w, strides, padding, lhs_dil, rhs_dil,
                                   feature_group_count=groups)
    assert_close(got, want, 1e-5, 1e-5, np.float32)
    jitted = shardc.jit(lambda a, b: lax.conv_general_dilated(
        a, b, strides, padding, lhs_dil, rhs_dil, feature_group_count=groups))
    assert_close(jitted(x, w), want, 1e-5, 1e-5)


def test_batch_group_count_against_the_definition():
    # batch chunk g (consecutive rows) is convolved with the g-th chunk of output features
    rng = np.random.default_rng(21)
    x = rng.normal(size=(4, 3, 6, 5)).astype(np.float32)
    w = rng.normal(size=(6, 3, 2, 2)).astype(np.float32)
    want = np.concatenate([reference_conv(x[2 * g:2 * g + 2], w[3 * g:3 * g + 3], (1, 1),
                                          [(0, 0), (1, 0)], (1, 1), (1, 1), 1)
                           for g in range(2)], axis=1)
    for run in (lax.conv_general_dilated, shardc.jit(lax.conv_general_dilated,
                                                      static_argnums=(2, 3),
                                                      static_argnames=("batch_group_count",))):
        got = run(x, w, (1, 1), ((0, 0), (1, 0)), batch_group_count=2)
        assert_close(got, want, 1e-5, 1e-5, np.float32)
    # the same in NHWC / HWIO layouts
    got = lax.conv_general_dilated(np.transpose(x, (0, 2, 3, 1)), np.transpose(w, (2, 3, 1, 0)),
                                   (1, 1), [(0, 0), (1, 0)], batch_group_count=2,
                                   dimension_numbers=("NHWC", "HWIO", "NHWC"))
    assert_close(np.transpose(np.asarray(got), (0, 3, 1, 2)), want, 1e-5, 1e-5)
    with pytest.raises(ValueError, match="batch_group_count must divide lhs batch dimension "
                                         "size, but 3 does not divide 4"):
        lax.conv_general_dilated(x, w, (1, 1), "VALID", batch_group_count=3)
    with pytest.raises(ValueError, match="At most one of batch_group_count and "
                                         "feature_group_count may be > 1"):
        lax.conv_general_dilated(x, w[:, :1], (1, 1), "VALID", batch_group_count=2,
                                 feature_group_count=3)


def test_layout_strings_and_dimension_numbers():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(2, 6, 5, 3)).astype(np.float32)       # NHWC
    w = rng.normal(size=(3, 2, 3, 4)).astype(np.float32)       # HWIO
    want = reference_conv(np.transpose(x, (0, 3, 1, 2)), np.transpose(w, (3, 2, 0, 1)),
                          (1, 1), _same_pads((6, 5), (3, 2), (1, 1)), (1, 1), (1, 1), 1)
    got = lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                   dimension_numbers=("NHWC", "HWIO", "NHWC"))
    assert_close(got, np.transpose(want, (0, 2, 3, 1)), 1e-5, 1e-5)
    dn = lax.conv_dimension_numbers(x.shape, w.shape, ("NHWC", "HWIO", "NCHW"))
    assert dn == lax.ConvDimensionNumbers((0, 3, 1, 2), (3, 2, 0, 1), (0, 1, 2, 3))
    assert_close(lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=dn), want,
                 1e-5, 1e-5)
    plain = lax.conv(np.transpose(x, (0, 3, 1, 2)), np.transpose(w, (3, 2, 0, 1)), (1, 1),
                     "SAME")
    assert_close(plain, want, 1e-5, 1e-5)


def test_conv_errors_name_the_problem():
    x = np.ones((1, 4, 5, 5), np.float32)
    with pytest.raises(ValueError, match="feature_group_count=3"):
        lax.conv_general_dilated(x, np.ones((3, 1, 2, 2), np.float32), (1, 1), "VALID",
                                 feature_group_count=3)
    with pytest.raises(ValueError, match="kernel's input features \\(3\\)"):
        lax.conv(x, np.ones((2, 3, 2, 2), np.float32), (1, 1), "VALID")
    with pytest.raises(ValueError, match="unknown padding 'FULL'"):
        lax.conv(x, np.ones((2, 4, 2, 2), np.float32), (1, 1), "FULL")
    # a window larger than the input has no position: an empty result, as XLA's
    empty = lax.conv(x, np.ones((2, 4, 6, 6), np.float32), (1, 1), "VALID")
    assert empty.shape == (1, 2, 0, 0) and empty.dtype == np.float32
    grads = shardc.grad(lambda a, b: lax.conv(a, b, (1, 1), "VALID").sum(), argnums=(0, 1))(
        x, np.ones((2, 4, 6, 6), np.float32))
    assert all(np.asarray(g).shape == s and not np.asarray(g).any()
               for g, s in zip(grads, [(1, 4, 5, 5), (2, 4, 6, 6)]))
    assert lax.conv(np.ones((1, 4, 0, 4), np.float32), np.ones((2, 4, 1, 2), np.float32),
                    (2, 1), "VALID").shape == (1, 2, 0, 3)
    with pytest.raises(ValueError, match="string padding is not supported with lhs_dilation"):
        lax.conv_general_dilated(x, np.ones((2, 4, 2, 2), np.float32), (1, 1), "VALID",
                                 lhs_dilation=(2, 2))
    with pytest.raises(TypeError, match="layout 'NHW'"):
        lax.conv_general_dilated(x, np.ones((2, 4, 2, 2), np.float32), (1, 1), "VALID",
                                 dimension_numbers=("NHW", "OIHW", "NCHW"))


def test_conv_gradients_against_finite_differences():
    rng = np.random.default_rng(8)
    x = rng.normal(size=(1, 2, 5, 4)).astype(np.float32)
    w = rng.normal(size=(3, 1, 2, 3)).astype(np.float32)

    def loss(a, b):
        y = lax.conv_general_dilated(a, b, (2, 1), [(1, 0), (1, 1)], (1, 1), (1, 2),
                                     feature_group_count=2 if b.shape[1] == 1 else 1)
        return (jnp.tanh(y) * np.arange(y.size, dtype=np.float32).reshape(y.shape)).sum()

    w2 = rng.normal(size=(2, 1, 2, 3)).astype(np.float32)
    check_grad(lambda b: loss(x, b), w2)
    check_grad(lambda a: loss(a, w2), x)


def test_conv_under_vmap_and_in_a_shard_map_body():
    rng = np.random.default_rng(9)
    x = rng.normal(size=(4, 3, 6, 6)).astype(np.float32)
    w = rng.normal(size=(2, 3, 3, 3)).astype(np.float32)
    want = reference_conv(x, w, (1, 1), _same_pads((6, 6), (3, 3), (1, 1)), (1, 1), (1, 1), 1)
    per_image = shardc.vmap(lambda img: lax.conv(img[None], w, (1, 1), "SAME")[0])(x)
    assert_close(per_image, want, 1e-5, 1e-5)
    body = shardc.shard_map(lambda a, b: lax.conv(a, b, (1, 1), "SAME"), mesh=mesh2(),
                            in_specs=(P("x"), P()), out_specs=P("x"))
    assert_close(body(x, w), want, 1e-5, 1e-5)


def test_a_cnn_layer_trains():
    rng = np.random.default_rng(10)
    images = rng.normal(size=(8, 6, 6, 1)).astype(np.float32)
    target = np.roll(images, 1, axis=1)                         # learn a shift
    params = {"w": (rng.normal(size=(3, 3, 1, 1)) * 0.1).astype(np.float32),
              "b": np.zeros((1,), np.float32)}

    def loss(p, x, y):
        out = lax.conv_general_dilated(x, p["w"], (1, 1), "SAME",
                                       dimension_numbers=("NHWC", "HWIO", "NHWC")) + p["b"]
        return jnp.mean((out - y) ** 2)

    step = shardc.jit(lambda p, x, y: shardc.tree_util.tree_map(
        lambda v, g: v - 0.5 * g, p, shardc.grad(loss)(p, x, y)))
    first = float(loss(params, images, target))
    for _ in range(30):
        params = step(params, images, target)
    assert float(loss(params, images, target)) < 0.3 * first
    assert np.argmax(np.asarray(params["w"])[:, 1, 0, 0]) == 0   # the tap above the centre


def test_data_parallel_conv_gradients_equal_the_single_device_ones():
    rng = np.random.default_rng(11)
    images = rng.normal(size=(4, 5, 5, 2)).astype(np.float32)
    kernel = rng.normal(size=(3, 3, 2, 3)).astype(np.float32)

    def loss(w, x, count):
        y = lax.conv_general_dilated(x, w, (2, 2), "SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jnp.sum(shardc.nn.gelu(y, approximate=False) ** 2) / count

    # the kernel is replicated (P()), so the body's gradient for it is summed over the
    # devices (the transpose of its implicit pvary), as in JAX: each device's share of the
    # global loss gives the global gradient
    body = shardc.shard_map(lambda w, x: shardc.grad(loss)(w, x, images.size),
                            mesh=mesh2(), in_specs=(P(), P("x")), out_specs=P())
    assert_close(body(kernel, images), shardc.grad(loss)(kernel, images, images.size),
                 1e-5, 1e-6)


@pytest.mark.parametrize("size,stride,padding", [(7, 2, "VALID"), (6, 2, "SAME"),
                                                 (5, 1, "SAME"), (9, 3, "SAME")])
def test_conv_transpose_is_the_gradient_of_conv(size, stride, padding):
    rng = np.random.default_rng(size + stride)
    x = rng.normal(size=(2, size, size, 3)).astype(np.float32)       # NHWC
    w = rng.normal(size=(3, 3, 3, 4)).astype(np.float32)             # HWIO

    def forward(v):
        return lax.conv_general_dilated(v, w, (stride, stride), padding,
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))
    y, pullback = shardc.vjp(forward, x)
    cotangent = rng.normal(size=y.shape).astype(np.float32)
    (want,) = pullback(cotangent)
    got = lax.conv_transpose(cotangent, w, (stride, stride), padding, transpose_kernel=True)
    assert got.shape == x.shape
    assert_close(got, want, 1e-4, 1e-5)


def test_conv_transpose_upsamples_with_explicit_layout_and_pads():
    x = np.arange(6, dtype=np.float32).reshape(1, 1, 6)                # NCW
    w = np.ones((1, 1, 2), np.float32)                                 # OIW
    dn = ("NCH", "OIH", "NCH")
    got = lax.conv_transpose(x, w, (2,), [(1, 1)], dimension_numbers=dn)
    # stride-2 dilation puts zeros between the samples; a width-2 box kernel repeats each one
    dilated = np.zeros(11, np.float32)
    dilated[::2] = x[0, 0]
    padded = np.pad(dilated, 1)
    assert_close(got[0, 0], padded[:-1] + padded[1:])
    with pytest.raises(ValueError, match="padding must be 'SAME', 'VALID'"):
        lax.conv_transpose(x, w, (2,), "FULL", dimension_numbers=dn)


@st.composite
def _conv_configs(draw):
    spatial = draw(st.integers(1, 2))
    groups = draw(st.sampled_from([1, 2]))
    in_features, out_features = groups * draw(st.integers(1, 2)), groups * draw(st.integers(1, 2))
    kernel = tuple(draw(st.integers(1, 3)) for _ in range(spatial))
    rhs_dil = tuple(draw(st.integers(1, 2)) for _ in range(spatial))
    lhs_dil = tuple(draw(st.integers(1, 2)) for _ in range(spatial))
    strides = tuple(draw(st.integers(1, 3)) for _ in range(spatial))
    pads = [(draw(st.integers(-1, 2)), draw(st.integers(-1, 2))) for _ in range(spatial)]
    windows = [(k - 1) * d + 1 for k, d in zip(kernel, rhs_dil)]
    sizes = []
    for window, d, (lo, hi) in zip(windows, lhs_dil, pads):
        low = max(1, -(-(window - lo - hi - 1) // d) + 1)      # at least one output
        sizes.append(draw(st.integers(low, low + 4)))
    return (2, in_features) + tuple(sizes), (out_features, in_features // groups) + kernel, \
        strides, pads, lhs_dil, rhs_dil, groups


@settings(max_examples=15, derandomize=True, deadline=None)
@given(_conv_configs())
def test_conv_property_against_the_definition(config):
    lhs_shape, rhs_shape, strides, pads, lhs_dil, rhs_dil, groups = config
    rng = np.random.default_rng(0)
    x = rng.normal(size=lhs_shape).astype(np.float32)
    w = rng.normal(size=rhs_shape).astype(np.float32)
    want = reference_conv(x, w, strides, pads, lhs_dil, rhs_dil, groups)
    got = lax.conv_general_dilated(x, w, strides, pads, lhs_dil, rhs_dil,
                                   feature_group_count=groups)
    assert_close(got, want, 1e-5, 1e-5, np.float32)


def test_conv_general_dilated_takes_out_sharding_under_vmap():
    """JAX's vmap of a convolution with out_sharding over a batch split on an Explicit mesh:
    the result keeps the batch's split (values as the unsplit convolution's)."""
    mesh = shardc.make_mesh((2, 2), ("x", "y"))
    dn = lax.ConvDimensionNumbers((0, 2, 1), (2, 1, 0), (0, 2, 1))

    def model(kernel, inputs, **kw):
        padded = jnp.pad(inputs, ((0, 0), (2, 0), (0, 0)))
        return lax.conv_general_dilated(padded, kernel, window_strides=(1,), padding="VALID",
                                        dimension_numbers=dn, **kw)

    rng = np.random.default_rng(0)
    kernel = rng.standard_normal((3, 1, 16)).astype(np.float32)
    inputs = rng.standard_normal((8, 4, 32, 1)).astype(np.float32)
    want = shardc.vmap(model, in_axes=(None, 0), out_axes=1)(kernel, inputs)
    with shardc.set_mesh(mesh):
        k = shardc.device_put(kernel, P(None, None, None))
        x = shardc.device_put(inputs, P("x", None, None, None))
        f = shardc.jit(shardc.vmap(functools.partial(model, out_sharding=P(None, None, None)),
                                   in_axes=(None, 0), out_axes=1))
        out = f(k, x)
    assert out.shape == (4, 8, 32, 16) and out.sharding.spec == P(None, "x", None, None)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_conv_transpose_with_consistent_padding_is_the_forward_convolutions_gradient():
    """``use_consistent_padding=True``: (low, high) pairs are the forward convolution's pads
    (PyTorch's convention), so with ``transpose_kernel`` the result is that convolution's
    input gradient; without it the pairs pad the transposed convolution itself."""
    import shardc
    rng = np.random.default_rng(0)
    k = rng.normal(size=(3, 2, 2, 4)).astype(np.float32)
    pads, strides = ((1, 1), (0, 2)), (2, 1)
    fwd = lambda v: lax.conv_general_dilated(v, k, strides, pads,
                                            dimension_numbers=("NHWC", "HWIO", "NHWC"))
    x = rng.normal(size=(1, 7, 6, 2)).astype(np.float32)
    y, pullback = shardc.vjp(fwd, x)
    ct = rng.normal(size=y.shape).astype(np.float32)
    (want,) = pullback(ct)
    got = lax.conv_transpose(ct, k, strides, pads, transpose_kernel=True,
                             use_consistent_padding=True)
    assert got.shape == want.shape == (1, 7, 6, 2)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
    # the same pairs read as the transposed convolution's own pads (window 3 and 2: 2-p, 1-p)
    own = lax.conv_transpose(ct, k, strides, ((1, 1), (1, -1)), transpose_kernel=True)
    np.testing.assert_allclose(np.asarray(own), np.asarray(want), rtol=1e-5, atol=1e-5)


def test_conv_general_dilated_patches_lays_out_each_window_as_channels():
    """conv_general_dilated_patches: each output position's window of each input channel,
    flattened row-major, channel-major along the output's feature dimension (JAX's)."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 3, 5, 4)).astype(np.float32)           # NCHW
    got = np.asarray(lax.conv_general_dilated_patches(x, (2, 3), (1, 1), "VALID"))
    assert got.shape == (2, 3 * 6, 4, 2)
    for i, j in ((0, 0), (3, 1), (2, 0)):
        window = x[:, :, i:i + 2, j:j + 3].reshape(2, 18)
        np.testing.assert_allclose(got[:, :, i, j], window, rtol=1e-6)
    strided = np.asarray(lax.conv_general_dilated_patches(x, (2, 2), (2, 2), "VALID"))
    np.testing.assert_allclose(strided[:, :, 1, 1], x[:, :, 2:4, 2:4].reshape(2, 12), rtol=1e-6)


def test_conv_padding_that_is_not_pairs_is_a_value_error():
    x = np.ones((1, 2, 6, 6), np.float32)
    with pytest.raises(ValueError, match=r"padding argument.*, got \(3, 3\)"):
        lax.conv_general_dilated_patches(x, (3, 3), (1, 1), padding=(3, 3))
    with pytest.raises(ValueError, match="sequence of \\(low, high\\) pairs"):
        lax.conv_general_dilated(x, np.ones((1, 2, 3, 3), np.float32), (1, 1), [(1.5, 1), (0, 0)])


def test_padtype_to_pads_gives_python_ints_for_numpy_shapes():
    pads = lax.padtype_to_pads(np.array([10, 8]), np.array([5, 3]), np.array([1, 2]), "SAME")
    assert pads == [(2, 2), (0, 1)]
    assert all(type(v) is int for pair in pads for v in pair)


def test_conv_on_an_explicit_mesh_follows_jaxs_sharding_rule():
    """On Explicit axes a convolution infers its layout as JAX's does: with a replicated
    kernel and unsplit input features the result keeps the input's split (a split spatial
    dimension too, while the result's size divides); otherwise ``out_sharding`` is asked
    for, and given it lays the result out however the operands are split. Values are the
    unsplit convolution's."""
    mesh = shardc.make_mesh((4, 2), ("x", "y"))
    dn = ("NCHW", "OIHW", "NCHW")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 4, 16, 16)).astype(np.float32)
    w = rng.standard_normal((6, 4, 3, 3)).astype(np.float32)

    def conv(a, b, strides=(1, 1), padding="SAME", **kw):
        return lax.conv_general_dilated(a, b, strides, padding, dimension_numbers=dn, **kw)

    with shardc.set_mesh(mesh):
        for spec_x, strides, want_spec in [(P(None, None, None, "x"), (1, 1),
                                            P(None, None, None, "x")),
                                           (P(None, None, None, "x"), (1, 2),
                                            P(None, None, None, "x")),
                                           (P("x"), (1, 1), P("x", None, None, None)),
                                           (P("x", None, "y"), (2, 2), P("x", None, "y", None))]:
            a, b = shardc.device_put(x, spec_x), shardc.device_put(w, P())
            for f in (conv, shardc.jit(conv, static_argnums=2)):
                out = f(a, b, strides)
                assert out.sharding.spec == want_spec
                assert_close(out, conv(x, w, strides), 1e-5, 1e-5, np.float32)
        with pytest.raises(shardc.sharding.ShardingTypeError,
                           match=r"conv_general_dilated on sharded dims where out dim \(14\)"):
            conv(shardc.device_put(x, P(None, None, None, "x")), shardc.device_put(w, P()),
                 padding="VALID")
        for spec_x, spec_w in [(P("x"), P("y")), (P("x", "y"), P())]:
            a, b = shardc.device_put(x, spec_x), shardc.device_put(w, spec_w)
            with pytest.raises(shardc.sharding.ShardingTypeError,
                               match="Please specify the output sharding via `out_sharding`"):
                conv(a, b)
            out = conv(a, b, out_sharding=P("x", None, None, None))
            assert out.sharding.spec == P("x", None, None, None)
            assert_close(out, conv(x, w), 1e-5, 1e-5, np.float32)
        kernel_grad = shardc.grad(lambda a, b: conv(a, b).sum(), argnums=1)(
            shardc.device_put(x, P("x")), shardc.device_put(w, P()))
        assert_close(kernel_grad, shardc.grad(lambda b: conv(x, b).sum())(w), 1e-4, 1e-4,
                     np.float32)
