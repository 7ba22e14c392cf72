"""jax.example_libraries (optimizers, stax) and the lax shape helpers stax builds on, held
against numpy references, values recorded from JAX 0.10.2, and the layers' own outputs."""
import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from shardc import lax
from shardc.example_libraries import optimizers, stax

RNG = np.random.default_rng(0)


# ----- lax shape helpers -----

@pytest.mark.parametrize("lhs, rhs, strides, padding, dn", [
    ((8, 32, 32, 3), (3, 3, 3, 16), (2, 2), "SAME", ("NHWC", "HWIO", "NHWC")),
    ((8, 3, 9, 9), (16, 3, 3, 2), (2, 1), [(1, 0), (2, 2)], ("NCHW", "OIHW", "NCHW")),
    ((2, 7, 5), (4, 5, 3), (3,), "VALID", ("NHC", "HIO", "NHC")),
    ((2, 7, 5), (4, 5, 3), (2,), "SAME", ("NHC", "HIO", "NCH")),
])
def test_conv_general_shape_tuple_is_the_convolutions_shape(lhs, rhs, strides, padding, dn):
    x = np.zeros(lhs, np.float32)
    w = np.zeros(rhs, np.float32)
    out = lax.conv_general_dilated(x, w, strides, padding, dimension_numbers=dn)
    assert lax.conv_general_shape_tuple(lhs, rhs, strides, padding, dn) == out.shape


def test_conv_shape_tuples_by_hand():
    assert lax.conv_shape_tuple((8, 3, 32, 32), (16, 3, 3, 3), (1, 1), "SAME") == (8, 16, 32, 32)
    assert lax.conv_shape_tuple((8, 3, 10), (4, 3, 3), (2,), [(1, 1)]) == (8, 4, 5)
    # batch groups divide the batch
    assert lax.conv_shape_tuple((8, 3, 10), (4, 3, 3), (1,), "VALID", 2) == (4, 4, 8)
    with pytest.raises(TypeError, match="Wrong number of explicit pads for convolution: "
                                        "expected 2, got 1"):
        lax.conv_shape_tuple((8, 3, 9, 9), (4, 3, 3, 3), (1, 1), [(0, 0)])


@pytest.mark.parametrize("padding", ["SAME", "VALID", [(1, 2), (0, 1)]])
@pytest.mark.parametrize("strides", [(1, 1), (2, 2), (3, 1)])
def test_conv_transpose_shape_tuple_is_conv_transposes_shape(padding, strides):
    lhs, rhs, dn = (2, 5, 6, 3), (3, 2, 3, 4), ("NHWC", "HWIO", "NHWC")
    out = lax.conv_transpose(np.zeros(lhs, np.float32), np.zeros(rhs, np.float32), strides,
                             padding, dimension_numbers=dn)
    assert lax.conv_transpose_shape_tuple(lhs, rhs, strides, padding, dn) == out.shape


def test_conv_transpose_shape_tuple_by_hand():
    dn = ("NHWC", "HWIO", "NHWC")
    # (in - 1) * stride + window - 2 + 2 + pads: SAME gives in * stride
    assert lax.conv_transpose_shape_tuple((8, 5, 5, 3), (3, 3, 3, 16), (2, 2), "SAME",
                                          dn) == (8, 10, 10, 16)
    assert lax.conv_transpose_shape_tuple((8, 5, 5, 3), (3, 3, 3, 16), (2, 2), "VALID",
                                          dn) == (8, 11, 11, 16)


@pytest.mark.parametrize("shape, window, strides, pads, base, dilation", [
    ((8, 32, 32, 3), (1, 2, 2, 1), (1, 2, 2, 1), [(0, 0)] * 4, None, None),
    ((8, 9, 9, 3), (1, 3, 2, 1), (1, 2, 2, 1), [(0, 0), (1, 1), (0, 1), (0, 0)],
     (1, 2, 1, 1), (1, 1, 2, 1)),
    ((5,), (7,), (1,), [(0, 0)], None, None),
])
def test_reduce_window_shape_tuple_is_reduce_windows_shape(shape, window, strides, pads, base,
                                                           dilation):
    out = lax.reduce_window(np.zeros(shape, np.float32), 0., lax.add, window, strides, pads,
                            base, dilation)
    assert lax.reduce_window_shape_tuple(shape, window, strides, pads, base, dilation) \
        == out.shape


# ----- optimizers -----

def _params():
    return {"w": RNG.normal(size=(3, 4)).astype(np.float32),
            "b": [RNG.normal(size=(4,)).astype(np.float32)]}


def _grads(step):
    return {"w": np.float32(0.1 * (step + 1)) * np.arange(12, dtype=np.float32).reshape(3, 4),
            "b": [np.linspace(-1, 1, 4, dtype=np.float32) * (step - 1)]}


def _reference_adam(x, gs, lr, b1=0.9, b2=0.999, eps=1e-8):
    m = np.zeros_like(x)
    v = np.zeros_like(x)
    for i, g in enumerate(gs):
        m = (1 - b1) * g + b1 * m
        v = (1 - b2) * g * g + b2 * v
        x = x - lr * (m / (1 - b1 ** (i + 1))) / (np.sqrt(v / (1 - b2 ** (i + 1))) + eps)
    return x


def _reference_momentum(x, gs, lr, mass, nesterov):
    v = np.zeros_like(x)
    for g in gs:
        v = mass * v + g
        x = x - lr * ((mass * v + g) if nesterov else v)
    return x


def _reference_rmsprop(x, gs, lr, gamma=0.9, eps=1e-8):
    avg = np.zeros_like(x)
    for g in gs:
        avg = avg * gamma + g * g * (1 - gamma)
        x = x - lr * g / np.sqrt(avg + eps)
    return x


def _reference_adagrad(x, gs, lr, momentum=0.9):
    g_sq = np.zeros_like(x)
    m = np.zeros_like(x)
    for g in gs:
        g_sq = g_sq + g * g
        inv = np.where(g_sq > 0, 1 / np.sqrt(np.where(g_sq > 0, g_sq, 1)), 0)
        m = (1 - momentum) * g * inv + momentum * m
        x = x - lr * m
    return x


@pytest.mark.parametrize("name, make, reference", [
    ("sgd", lambda: optimizers.sgd(0.1),
     lambda x, gs: x - 0.1 * sum(gs)),
    ("momentum", lambda: optimizers.momentum(0.1, 0.9),
     lambda x, gs: _reference_momentum(x, gs, 0.1, 0.9, False)),
    ("nesterov", lambda: optimizers.nesterov(0.1, 0.9),
     lambda x, gs: _reference_momentum(x, gs, 0.1, 0.9, True)),
    ("adagrad", lambda: optimizers.adagrad(0.1),
     lambda x, gs: _reference_adagrad(x, gs, 0.1)),
    ("rmsprop", lambda: optimizers.rmsprop(0.01),
     lambda x, gs: _reference_rmsprop(x, gs, 0.01)),
    ("adam", lambda: optimizers.adam(1e-2),
     lambda x, gs: _reference_adam(x, gs, 1e-2)),
])
@pytest.mark.parametrize("jit", [False, True])
def test_optimizer_steps_match_numpy(name, make, reference, jit):
    opt_init, opt_update, get_params = make()
    params = _params()
    state = opt_init(params)
    update = jax.jit(opt_update) if jit else opt_update
    for i in range(3):
        state = update(i, _grads(i), state)
    got = get_params(state)
    assert jax.tree.structure(got) == jax.tree.structure(params)
    for key, leaf in (("w", got["w"]), ("b", got["b"][0])):
        x0 = params["w"] if key == "w" else params["b"][0]
        gs = [(_grads(i)["w"] if key == "w" else _grads(i)["b"][0]) for i in range(3)]
        np.testing.assert_allclose(np.asarray(leaf), reference(x0, gs), rtol=2e-5, atol=1e-6)
        assert leaf.dtype == np.float32


def test_adamax_rmsprop_momentum_and_sm3_take_a_step_as_their_formulas_say():
    x0 = np.array([[1.0, -2.0], [0.5, 3.0]], np.float32)
    g = np.array([[0.5, -1.0], [0.0, 2.0]], np.float32)
    # adamax, first step: m = 0.1 g, u = |g|, x - lr / 0.1 * m / (u + eps)
    init, update, get = optimizers.adamax(0.01)
    got = get(update(0, g, init(x0)))
    np.testing.assert_allclose(got, x0 - 0.01 * g / (np.abs(g) + 1e-8), rtol=1e-6)
    # rmsprop_momentum, first step: mom = lr * g / sqrt(0.1 g^2 + eps)
    init, update, get = optimizers.rmsprop_momentum(0.01)
    got = get(update(0, g, init(x0)))
    np.testing.assert_allclose(got, x0 - 0.01 * g / np.sqrt(0.1 * g * g + 1e-8), rtol=1e-5)
    # sm3, first step: accumulators are zero, so accum = g^2 and m = 0.1 * sign(g)
    init, update, get = optimizers.sm3(0.1)
    state = update(0, g, init(x0))
    np.testing.assert_allclose(get(state), x0 - 0.1 * 0.1 * np.sign(g), rtol=1e-6)
    # the state keeps one accumulator per axis: the row and column maxima of g^2
    leaves = state.packed_state[0]
    np.testing.assert_allclose(leaves[2], (g * g).max(1))
    np.testing.assert_allclose(leaves[3], (g * g).max(0))
    # a scalar parameter comes back a scalar
    init, update, get = optimizers.sm3(0.1)
    assert get(update(0, np.float32(2.0), init(np.float32(1.0)))).shape == ()


def test_schedules():
    np.testing.assert_allclose(optimizers.exponential_decay(1.0, 10, 0.5)(20), 0.25)
    np.testing.assert_allclose(optimizers.inverse_time_decay(1.0, 2, 1.0)(3), 1 / 2.5)
    np.testing.assert_allclose(optimizers.inverse_time_decay(1.0, 2, 1.0, staircase=True)(3),
                               0.5)
    poly = optimizers.polynomial_decay(1.0, 4, 0.2, power=2.0)
    np.testing.assert_allclose([poly(i) for i in (0, 2, 4, 9)],
                               [1.0, 0.25 * 0.8 + 0.2, 0.2, 0.2], rtol=1e-6)
    piecewise = optimizers.piecewise_constant([2, 4], [1.0, 0.5, 0.1])
    np.testing.assert_allclose([piecewise(i) for i in range(6)],
                               [1.0, 1.0, 1.0, 0.5, 0.5, 0.1])
    assert optimizers.make_schedule(0.3)(7) == 0.3
    with pytest.raises(TypeError), pytest.warns(DeprecationWarning):
        optimizers.make_schedule([0.1, 0.2])
    with pytest.raises(ValueError, match="boundaries length must be one shorter"):
        optimizers.piecewise_constant([1, 2], [1.0, 2.0])
    with pytest.raises(ValueError, match="boundaries and values must be sequences"):
        optimizers.piecewise_constant(1, [1.0, 2.0])


def test_clip_grads_and_l2_norm():
    tree = {"a": np.array([3.0, 0.0], np.float32), "b": np.array([[4.0]], np.float32)}
    np.testing.assert_allclose(optimizers.l2_norm(tree), 5.0)
    clipped = optimizers.clip_grads(tree, 1.0)
    np.testing.assert_allclose(clipped["a"], [0.6, 0.0], rtol=1e-6)
    np.testing.assert_allclose(clipped["b"], [[0.8]], rtol=1e-6)
    kept = optimizers.clip_grads(tree, 10.0)
    np.testing.assert_allclose(kept["a"], tree["a"])


def test_state_is_a_pytree_of_arrays_and_round_trips_through_unpack():
    opt_init, opt_update, get_params = optimizers.adam(1e-3)
    state = opt_init(_params())
    # three leaves (x, m, v) per parameter
    assert len(jax.tree.leaves(state)) == 6
    marked = optimizers.unpack_optimizer_state(state)
    assert isinstance(marked["w"], optimizers.JoinPoint)
    packed = optimizers.pack_optimizer_state(marked)
    assert jax.tree.structure(packed) == jax.tree.structure(state)
    for a, b in zip(jax.tree.leaves(packed), jax.tree.leaves(state)):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(TypeError, match="JoinPoint"):
        optimizers.pack_optimizer_state({"w": np.zeros(2)})


def test_update_refuses_a_gradient_tree_unlike_the_parameters():
    opt_init, opt_update, _ = optimizers.sgd(0.1)
    state = opt_init({"w": np.zeros(2, np.float32)})
    with pytest.raises(TypeError, match="did not match the parameter tree structure"):
        opt_update(0, {"v": np.zeros(2, np.float32)}, state)

    @optimizers.optimizer
    def shape_changing():
        return (lambda x: (x,)), (lambda i, g, s: (s[0], s[0])), (lambda s: s[0])
    opt_init, opt_update, _ = shape_changing()
    with pytest.raises(TypeError, match="produced an output structure that did not match"):
        opt_update(0, np.zeros(2, np.float32), opt_init(np.zeros(2, np.float32)))


# ----- stax -----

def test_serial_dense_initializes_as_jax_does():
    init_fun, apply_fun = stax.serial(stax.Dense(3), stax.Relu, stax.Dense(2))
    shape, params = init_fun(jax.random.PRNGKey(0), (-1, 4))
    assert shape == (-1, 2)
    # recorded from JAX 0.10.2 (the same key splits give the same parameters)
    np.testing.assert_allclose(params[0][0][0], [0.11530236, -0.4423771, -0.7077285],
                               rtol=1e-6)
    np.testing.assert_allclose(params[0][1], [-0.01335625, -0.00352563, 0.00309704],
                               rtol=1e-5)
    np.testing.assert_allclose(params[2][1], [-0.0006049, -0.02217776], rtol=1e-5)
    assert params[1] == ()
    x = RNG.normal(size=(5, 4)).astype(np.float32)
    (w1, b1), _, (w2, b2) = [tuple(np.asarray(a) for a in p) for p in params]
    want = np.maximum(x @ w1 + b1, 0) @ w2 + b2
    np.testing.assert_allclose(apply_fun(params, x), want, rtol=1e-5, atol=1e-6)


def _cnn():
    return stax.serial(
        stax.Conv(8, (3, 3), padding="SAME"), stax.BatchNorm(), stax.Relu,
        stax.MaxPool((2, 2), strides=(2, 2)), stax.Conv(4, (3, 3), strides=(2, 2)),
        stax.Tanh, stax.AvgPool((2, 2), padding="SAME"), stax.Flatten, stax.Dense(16),
        stax.FanOut(2), stax.parallel(stax.Dense(10), stax.Identity), stax.FanInConcat(),
        stax.Dense(5), stax.LogSoftmax)


def test_a_network_applies_with_the_shape_init_promised_and_trains():
    init_fun, apply_fun = _cnn()
    out_shape, params = init_fun(jax.random.PRNGKey(0), (4, 16, 16, 3))
    assert tuple(out_shape) == (4, 5)
    # as JAX's: a pooling window reads an unknown (-1) batch as empty
    assert init_fun(jax.random.PRNGKey(0), (-1, 16, 16, 3))[0] == (0, 5)
    x = RNG.normal(size=(4, 16, 16, 3)).astype(np.float32)
    logits = apply_fun(params, x)
    assert logits.shape == (4, 5) and logits.dtype == np.float32
    np.testing.assert_allclose(np.exp(np.asarray(logits)).sum(-1), 1.0, rtol=1e-5)
    y = np.eye(5, dtype=np.float32)[np.arange(4)]

    def loss(params):
        return -jnp.mean(jnp.sum(apply_fun(params, x) * y, axis=-1))
    opt_init, opt_update, get_params = optimizers.adam(1e-2)
    step = jax.jit(lambda i, s: opt_update(i, jax.grad(loss)(get_params(s)), s))
    state = opt_init(params)
    before = float(loss(params))
    for i in range(5):
        state = step(i, state)
    assert float(loss(get_params(state))) < before


def test_pooling_batchnorm_and_fan_layers_against_numpy():
    x = RNG.normal(size=(2, 4, 6, 3)).astype(np.float32)
    _, apply_max = stax.MaxPool((2, 3), strides=(2, 3))
    want = x.reshape(2, 2, 2, 2, 3, 3).max(axis=(2, 4))
    np.testing.assert_allclose(apply_max((), x), want)
    # SAME average pooling divides each window by its real (unpadded) element count
    init_avg, apply_avg = stax.AvgPool((3, 3), padding="SAME")
    got = np.asarray(apply_avg((), x))
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    counts = np.pad(np.ones((4, 6)), 1)
    sums = sum(padded[:, i:i + 4, j:j + 6] for i in range(3) for j in range(3))
    sizes = sum(counts[i:i + 4, j:j + 6] for i in range(3) for j in range(3))
    np.testing.assert_allclose(got, sums / sizes[None, :, :, None], rtol=1e-5, atol=1e-6)
    assert init_avg(None, x.shape)[0] == got.shape
    init_bn, apply_bn = stax.BatchNorm(axis=(0, 1, 2))
    shape, (beta, gamma) = init_bn(jax.random.PRNGKey(0), x.shape)
    assert beta.shape == gamma.shape == (3,)
    z = (x - x.mean((0, 1, 2))) / np.sqrt(x.var((0, 1, 2)) + 1e-5)
    np.testing.assert_allclose(apply_bn((beta + 1, gamma * 2), x), 2 * z + 1, rtol=1e-4,
                               atol=1e-5)
    _, (beta, gamma) = stax.BatchNorm(center=False)[0](jax.random.PRNGKey(0), x.shape)
    assert beta == ()
    init_cat, apply_cat = stax.FanInConcat(axis=1)
    assert init_cat(None, [(2, 3), (2, 5)])[0] == (2, 8)
    np.testing.assert_array_equal(apply_cat((), [np.ones((2, 3)), np.zeros((2, 5))]),
                                  np.concatenate([np.ones((2, 3)), np.zeros((2, 5))], 1))
    np.testing.assert_array_equal(stax.FanInSum[1]((), [x, x]), 2 * x)
    assert stax.Flatten[0](None, (7, 2, 3))[0] == (7, 6)


def test_conv_transpose_layer_shape_and_value():
    init_fun, apply_fun = stax.ConvTranspose(2, (3, 3), strides=(2, 2), padding="SAME")
    x = RNG.normal(size=(1, 3, 3, 4)).astype(np.float32)
    shape, (w, b) = init_fun(jax.random.PRNGKey(1), x.shape)
    assert shape == (1, 6, 6, 2) and w.shape == (3, 3, 4, 2) and b.shape == (1, 1, 1, 2)
    got = apply_fun((w, b), x)
    want = lax.conv_transpose(x, w, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO",
                                                                         "NHWC")) + b
    assert got.shape == shape
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_dropout_needs_a_key_and_keeps_at_rate():
    _, apply_fun = stax.Dropout(0.75)
    with pytest.raises(ValueError, match="Dropout layer requires apply_fun to be called with "
                                         "a PRNG key"):
        apply_fun((), np.ones((3,)))
    out = np.asarray(apply_fun((), np.ones((200, 50), np.float32), rng=jax.random.PRNGKey(0)))
    kept = out != 0
    np.testing.assert_allclose(out[kept], 1 / 0.75, rtol=1e-6)
    assert 0.7 < kept.mean() < 0.8
    _, apply_test = stax.Dropout(0.75, mode="test")
    np.testing.assert_array_equal(apply_test((), np.ones(3), rng=jax.random.PRNGKey(0)),
                                  np.ones(3))
    # serial hands each layer its own key
    _, apply_serial = stax.serial(stax.Dropout(0.5), stax.Dropout(0.5))
    assert apply_serial([(), ()], np.ones((8,), np.float32), rng=jax.random.PRNGKey(2)).shape \
        == (8,)


def test_shape_dependent_builds_the_layer_from_the_input_shape():
    init_fun, apply_fun = stax.shape_dependent(lambda shape: stax.Dense(shape[-1] * 2))
    shape, params = init_fun(jax.random.PRNGKey(0), (5, 3))
    assert shape == (5, 6)
    assert apply_fun(params, np.ones((5, 3), np.float32)).shape == (5, 6)
