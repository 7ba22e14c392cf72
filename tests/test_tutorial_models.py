"""The tutorial's neural-network examples, forward passes and losses only (SEMANTICS 6: T21-T26),
with only the imports swapped.

Each parallel loss (data parallel, FSDP, tensor parallel, FSDP+TP, pipeline) must equal the
tutorial's single-device ``loss`` on the same parameters and batch: plain ``jnp`` code, no
shard_map, to 1e-5 relative. The parameters are random (``shardc.random``, whose bits are not
JAX's, SEMANTICS T21), so the tests compare against the single-device computation and never
against numbers printed by JAX. Gradients (the tutorial's ``jax.grad`` checks, T27) are left to
the autodiff issue: ``shardc.grad`` does not exist yet.
"""
from functools import partial

import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from shardc.experimental import mesh_utils
from shardc.experimental.shard_map import shard_map
from shardc.sharding import Mesh, NamedSharding, PartitionSpec as P
from shardc.tree_util import tree_all, tree_leaves, tree_map, tree_structure

try:
    import shardc.random  # noqa: F401  (jax.random)
    HAVE_RANDOM = hasattr(jax, "random") and hasattr(jax.random, "normal")
except ImportError:  # pragma: no cover - the fallback keeps the models testable without it
    HAVE_RANDOM = False

RTOL = 1e-5


def eager(f):
    return f


WRAPS = [pytest.param(eager, id="eager"), pytest.param(jax.jit, id="jit")]


def allclose(a, b):
    return tree_all(tree_map(partial(jnp.allclose, atol=1e-2, rtol=1e-2), a, b))


def assert_close(got, want, rtol=RTOL):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=rtol, atol=rtol)


# --- T21: the model and its data -----------------------------------------------------------------

def predict(params, inputs):
  for W, b in params:
    outputs = jnp.dot(inputs, W) + b
    inputs = jax.nn.relu(outputs)
  return outputs

def loss(params, batch):
  inputs, targets = batch
  predictions = predict(params, inputs)
  return jnp.mean(jnp.sum((predictions - targets) ** 2, axis=-1))


def init_layer(key, n_in, n_out):
  k1, k2 = jax.random.split(key)
  W = jax.random.normal(k1, (n_in, n_out)) / jnp.sqrt(n_in)
  b = jax.random.normal(k2, (n_out,))
  return W, b

def init(key, layer_sizes, batch_size):
  key, *keys = jax.random.split(key, len(layer_sizes))
  params = list(map(init_layer, keys, layer_sizes[:-1], layer_sizes[1:]))

  key, *keys = jax.random.split(key, 3)
  inputs = jax.random.normal(keys[0], (batch_size, layer_sizes[0]))
  targets = jax.random.normal(keys[1], (batch_size, layer_sizes[-1]))

  return params, (inputs, targets)


def init_numpy(seed, layer_sizes, batch_size):
    """The same shapes and scales from numpy's generator (when shardc.random is missing)."""
    rng = np.random.default_rng(seed)
    normal = lambda *shape: rng.standard_normal(shape).astype(np.float32)
    params = [(jnp.array(normal(n_in, n_out) / np.sqrt(n_in)), jnp.array(normal(n_out)))
              for n_in, n_out in zip(layer_sizes[:-1], layer_sizes[1:])]
    return params, (jnp.array(normal(batch_size, layer_sizes[0])),
                    jnp.array(normal(batch_size, layer_sizes[-1])))


layer_sizes = [784, 128, 128, 128, 128, 128, 8]
batch_size = 32


def _model():
    if HAVE_RANDOM:
        return init(jax.random.key(0), layer_sizes, batch_size)
    return init_numpy(0, layer_sizes, batch_size)


@pytest.fixture(scope="module")
def model():
    return _model()


def reference(params, batch):
    """The single-device loss and predictions, in float64 numpy: an independent check of
    ``loss`` itself."""
    inputs, targets = (np.asarray(a, np.float64) for a in batch)
    for W, b in params:
        outputs = inputs @ np.asarray(W, np.float64) + np.asarray(b, np.float64)
        inputs = np.maximum(outputs, 0)
    return np.mean(np.sum((outputs - targets) ** 2, axis=-1)), outputs


def test_t21_model_shapes_and_single_device_loss(model):
    params, batch = model
    assert [(W.shape, b.shape) for W, b in params] == [
        ((784, 128), (128,)), ((128, 128), (128,)), ((128, 128), (128,)), ((128, 128), (128,)),
        ((128, 128), (128,)), ((128, 8), (8,))]
    assert [a.shape for a in batch] == [(32, 784), (32, 8)]
    assert all(a.dtype == np.float32 for a in tree_leaves((params, batch)))
    # random, not degenerate: the weights are scaled by 1/sqrt(n_in)
    W0 = np.asarray(params[0][0])
    assert 0.5 < W0.std() * np.sqrt(784) < 1.5 and abs(W0.mean()) < 0.01
    want, want_predictions = reference(params, batch)
    assert_close(predict(params, batch[0]), want_predictions)
    assert_close(loss(params, batch), want)
    assert_close(jax.jit(loss)(params, batch), want)
    assert np.isfinite(want) and want > 1.0


@pytest.mark.skipif(not HAVE_RANDOM, reason="shardc.random is missing")
def test_t21_init_is_deterministic_and_keys_differ():
    (p1, b1), (p2, b2) = _model(), _model()
    for a, c in zip(tree_leaves((p1, b1)), tree_leaves((p2, b2))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(c))
    # every layer draws its own key: no two weight matrices of one shape are equal
    inner = [np.asarray(W) for W, _ in p1[1:5]]
    assert all(not np.array_equal(inner[i], inner[j]) for i in range(4) for j in range(i))


def test_device_put_of_a_pytree(model):
    # The tutorial's `batch = jax.device_put(batch, NamedSharding(mesh, P('batch')))`.
    params, batch = model
    mesh = Mesh(mesh_utils.create_device_mesh((8,)), ('batch',))
    placed = jax.device_put(batch, NamedSharding(mesh, P('batch')))
    assert tree_structure(placed) == tree_structure(batch)
    assert placed[0].sharding == NamedSharding(mesh, P('batch'))


# --- T22: 8-way batch data parallelism -----------------------------------------------------------

@pytest.mark.parametrize("wrap", WRAPS)
def test_t22_data_parallel_2024(model, wrap, capsys):
    params, batch = model
    devices = mesh_utils.create_device_mesh((8,))

    # replicate initial params on all devices, shard data batch over devices
    mesh = Mesh(devices, ('batch',))
    batch = jax.device_put(batch, NamedSharding(mesh, P('batch')))
    params = jax.device_put(params, NamedSharding(mesh, P()))

    # adapt the loss function to sum the losses across devices
    def loss_dp(params, batch):
      @partial(shard_map, mesh=mesh, in_specs=P('batch', None), out_specs=P())
      def loss_spmd(local_batch):
        inputs, targets = local_batch
        predictions = predict(params, inputs)  # use reference 'predict`
        local_loss = jnp.mean(jnp.sum((predictions - targets)**2, axis=-1))
        return jax.lax.pmean(local_loss, 'batch')
      return loss_spmd(batch)

    print(jax.jit(loss)(params, batch))
    print(wrap(loss_dp)(params, batch))
    first, second = capsys.readouterr().out.splitlines()
    assert_close(float(second), float(first))
    value = wrap(loss_dp)(params, batch)
    assert value.shape == () and value.dtype == np.float32
    assert value.sharding == NamedSharding(mesh, P())
    assert_close(value, reference(params, batch)[0])
    assert batch[0].sharding == NamedSharding(mesh, P('batch'))
    assert [s.data.shape for s in batch[0].addressable_shards] == [(4, 784)] * 8


@pytest.mark.parametrize("wrap", WRAPS)
def test_t22_data_parallel_2025(model, wrap):
    # The 2025 tutorial passes the params in, replicated: in_specs (P(), P('batch')).
    params, batch = model
    mesh = jax.make_mesh((8,), ('batch',))
    batch = jax.device_put(batch, NamedSharding(mesh, P('batch')))
    params = jax.device_put(params, NamedSharding(mesh, P()))

    @partial(jax.shard_map, mesh=mesh, in_specs=(P(), P('batch')), out_specs=P())
    def loss_dp(params, local_batch):
      inputs, targets = local_batch
      predictions = predict(params, inputs)  # use reference 'predict`
      local_loss = jnp.mean(jnp.sum((predictions - targets)**2, axis=-1))
      return jax.lax.pmean(local_loss, 'batch')

    assert_close(wrap(loss_dp)(params, batch), jax.jit(loss)(params, batch))
    assert_close(wrap(loss_dp)(params, batch), reference(params, batch)[0])


# --- T23: fully sharded data parallelism ---------------------------------------------------------

# adapt the prediction function to gather weights just before their use,
# and to re-gather them on the backward pass (rather than saving them)
@partial(jax.remat, policy=lambda op, *_, **__: str(op) != 'all_gather')
def predict_fsdp(params_frag, inputs):
  for W_frag, b_frag in params_frag:
    W = jax.lax.all_gather(W_frag, 'batch', tiled=True)
    b = jax.lax.all_gather(b_frag, 'batch', tiled=True)
    outputs = jnp.dot(inputs, W) + b
    inputs = jax.nn.relu(outputs)
  return outputs


def test_t23_remat_keeps_the_forward_pass():
    # jax.remat (alias jax.checkpoint) with the tutorial's policy changes only what the backward
    # pass saves; the forward values are the function's.
    f = lambda x: jnp.sin(x) * 2
    x = jnp.arange(4.)
    for remat in (jax.remat, jax.checkpoint):
        g = partial(remat, policy=lambda op, *_, **__: str(op) != 'all_gather')(f)
        np.testing.assert_array_equal(np.asarray(g(x)), np.asarray(f(x)))
        np.testing.assert_array_equal(np.asarray(jax.jit(remat(f))(x)), np.asarray(f(x)))


@pytest.mark.parametrize("n", [8, 4], ids=["8-way (2024)", "4-way (current)"])
@pytest.mark.parametrize("wrap", WRAPS)
def test_t23_fsdp(model, wrap, n):
    params, batch = model
    devices = mesh_utils.create_device_mesh((8,))[:n]

    # shard data batch *and params* over devices
    mesh = Mesh(devices, ('batch',))
    batch = jax.device_put(batch, NamedSharding(mesh, P('batch')))
    params = jax.device_put(params, NamedSharding(mesh, P('batch')))

    def loss_fsdp(params, batch):
      @partial(shard_map, mesh=mesh, in_specs=P('batch'), out_specs=P())
      def loss_spmd(local_params, local_batch):
        inputs, targets = local_batch
        predictions = predict_fsdp(local_params, inputs)
        local_loss = jnp.mean(jnp.sum((predictions - targets)**2, axis=-1))
        return jax.lax.pmean(local_loss, 'batch')
      return loss_spmd(params, batch)

    repl_params = jax.device_put(params, NamedSharding(mesh, P()))
    repl_batch = jax.device_put(batch, NamedSharding(mesh, P()))
    assert params[0][0].sharding == NamedSharding(mesh, P('batch'))
    assert [s.data.shape for s in params[0][0].addressable_shards] == [(784 // n, 128)] * n
    want = jax.jit(loss)(repl_params, repl_batch)
    got = wrap(loss_fsdp)(params, batch)
    assert got.shape == () and got.sharding == NamedSharding(mesh, P())
    assert_close(got, want)
    assert_close(got, reference(params, batch)[0])


@pytest.mark.parametrize("wrap", WRAPS)
def test_t23_fsdp_predictions_are_the_single_device_ones(model, wrap):
    # The gathered forward pass itself, rows of the batch split over 'batch'.
    params, batch = model
    mesh = jax.make_mesh((4,), ('batch',))
    f = shard_map(predict_fsdp, mesh=mesh, in_specs=P('batch'), out_specs=P('batch'))
    got = wrap(f)(params, batch[0])
    assert got.shape == (32, 8)
    assert_close(got, predict(params, batch[0]))
    assert_close(got, reference(params, batch)[1])


# --- T24: 8-way tensor parallelism ---------------------------------------------------------------

def _tp_example():
    devices = mesh_utils.create_device_mesh((8,))
    mesh = Mesh(devices, ('feats',))

    def predict_tp(params, inputs):
      for W, b in params:
        outputs = gemm_tp(inputs, W, b)
        inputs = jax.nn.relu(outputs)
      return outputs

    @partial(shard_map, mesh=mesh,
             in_specs=(P(None, 'feats'), P('feats', None), P('feats')),
             out_specs=P(None, 'feats'))
    def gemm_tp(inputs, W, b):
      block_result = jnp.dot(inputs, W)
      return jax.lax.psum_scatter(block_result, 'feats',
                                  scatter_dimension=1, tiled=True) + b

    def loss_tp(params, batch):
      inputs, targets = batch
      predictions = predict_tp(params, inputs)
      return jnp.mean(jnp.sum((predictions - targets) ** 2, axis=-1))  # NOTE psum!

    return mesh, predict_tp, gemm_tp, loss_tp


@pytest.mark.parametrize("wrap", WRAPS)
def test_t24_tensor_parallel(model, wrap):
    params, batch = model
    mesh, predict_tp, gemm_tp, loss_tp = _tp_example()
    batch = jax.device_put(batch, NamedSharding(mesh, P(None, 'feats')))
    params = jax.device_put(params, NamedSharding(mesh, P('feats')))

    predictions = wrap(predict_tp)(params, batch[0])
    assert predictions.shape == (32, 8)
    assert predictions.sharding == NamedSharding(mesh, P(None, 'feats'))
    assert_close(predictions, predict(params, batch[0]))
    assert_close(predictions, reference(params, batch)[1])
    assert allclose(predictions, predict(params, batch[0])) is True
    assert_close(wrap(loss_tp)(params, batch), loss(params, batch))
    assert_close(wrap(loss_tp)(params, batch), reference(params, batch)[0])


def test_t24_gemm_tp_is_one_layer(model):
    params, batch = model
    _, _, gemm_tp, _ = _tp_example()
    W, b = params[1]
    x = jax.nn.relu(predict(params[:1], batch[0]))
    out = gemm_tp(x, W, b)
    assert out.shape == (32, 128) and out.sharding.spec == P(None, 'feats')
    assert_close(out, jnp.dot(x, W) + b)


# --- T25: FSDP + TP, shard_map at the top level --------------------------------------------------

# mostly same as previous predict_fsdp definition, except we call gemm_tp
@partial(jax.remat, policy=lambda op, *_, **__: str(op) != 'all_gather')
def predict_fsdp_tp(params_frag, inputs):
  for W_frag, b_frag in params_frag:
    W = jax.lax.all_gather(W_frag, 'batch', tiled=True)
    b = jax.lax.all_gather(b_frag, 'batch', tiled=True)
    block_result = jnp.dot(inputs, W)
    outputs = jax.lax.psum_scatter(block_result, 'feats',
                                   scatter_dimension=1, tiled=True) + b
    inputs = jax.nn.relu(outputs)
  return outputs


@pytest.mark.parametrize("placed", [P(('feats', 'batch')), P(('batch', 'feats'))],
                         ids=["placed-feats-batch (current)", "placed-batch-feats (2024)"])
@pytest.mark.parametrize("wrap", WRAPS)
def test_t25_fsdp_tp(model, wrap, placed):
    params, batch = model
    devices = mesh_utils.create_device_mesh((4, 2))
    mesh = Mesh(devices.reshape(4, 2), ('batch', 'feats'))

    batch_ = jax.device_put(batch, NamedSharding(mesh, P('batch', 'feats')))
    # The 2024 tutorial placed the params P(('batch', 'feats')), which the shard_map boundary
    # reshards to its in_specs; the current one places them as the in_specs say.
    params_ = jax.device_put(params, NamedSharding(mesh, placed))

    @partial(shard_map, mesh=mesh,
             in_specs=(P(('feats', 'batch')), P('batch', 'feats')),
             out_specs=P())
    def loss_fsdp_tp(local_params, local_batch):
      inputs, targets = local_batch
      predictions = predict_fsdp_tp(local_params, inputs)
      sq_err = jax.lax.psum(jnp.sum((predictions - targets)**2, axis=-1), 'feats')
      return jax.lax.pmean(jnp.mean(sq_err), 'batch')

    repl_params = jax.device_put(params, NamedSharding(mesh, P()))
    repl_batch = jax.device_put(batch, NamedSharding(mesh, P()))
    want = jax.jit(loss)(repl_params, repl_batch)
    got = wrap(loss_fsdp_tp)(params_, batch_)
    assert got.shape == () and got.dtype == np.float32
    assert_close(got, want)
    assert_close(got, reference(params, batch)[0])


@pytest.mark.parametrize("wrap", WRAPS)
def test_t25_fsdp_tp_predictions(model, wrap):
    params, batch = model
    mesh = jax.make_mesh((4, 2), ('batch', 'feats'))
    f = shard_map(predict_fsdp_tp, mesh=mesh, in_specs=(P(('feats', 'batch')), P('batch', 'feats')),
                  out_specs=P('batch', 'feats'))
    got = wrap(f)(params, batch[0])
    assert got.shape == (32, 8)
    assert_close(got, predict(params, batch[0]))


# --- T26: SPMD pipeline parallelism (forward) ----------------------------------------------------

PIPELINE_CONFIG = ("2 stages, 2 layer(s) per stage, 4 pipelined layers total\n"
                   "8 examples per microbatch, 4 microbatches total\n")


def _pipeline(params, capsys):
    """The tutorial's pipeline section, top to bottom; returns what its last cell evaluates."""
    L = len(params) - 2        # num layers, excluding first and last
    N = batch_size             # batch size
    F = params[0][0].shape[1]  # num features

    # choose some pipeline parameters
    S = 2      # number of stages
    B = 8      # size of each microbatch
    assert L % S == 0, "S (number of stages) must divide L (number of inner layers)"

    # compute some useful quantities
    M, ragged = divmod(N, B)  # M is number of microbatches
    assert not ragged, "B (size of each microbatch) must divide total batch size"
    K, ragged = divmod(M, S)  # K is microbatches per stage
    assert not ragged, "S (number of stages) must divide number of microbatches"
    print(f'{S} stages, {L // S} layer(s) per stage, {L} pipelined layers total')
    print(f'{B} examples per microbatch, {M} microbatches total')
    assert capsys.readouterr().out == PIPELINE_CONFIG

    mesh = Mesh(jax.devices()[:S], ('stages',))

    def predict_pp(params, inputs):
      (W_first, b_first), inner_params, (W_last, b_last) = params
      inputs = jax.nn.relu(jnp.dot(inputs, W_first) + b_first)
      inputs = spmd_pipeline(lambda Wb, x: jax.nn.relu(x @ Wb[0] + Wb[1]),
                            inner_params, inputs)
      outputs = jnp.dot(inputs, W_last) + b_last
      return outputs

    @partial(shard_map, mesh=mesh, in_specs=((P(), P('stages'), P()), P('stages')),
             out_specs=P())
    def loss_pp(params, batch):
      inputs, targets = batch
      predictions = predict_pp(params, inputs.reshape(K, B, -1)).reshape(K * B, -1)
      local_loss = jnp.mean(jnp.sum((predictions - targets)**2, axis=-1))
      return jax.lax.pmean(local_loss, 'stages')

    def spmd_pipeline(fn, stage_params, inputs):
      stage = jax.lax.axis_index('stages')
      outputs = jnp.zeros_like(inputs) * jnp.nan
      state = jnp.zeros((L // S, B, F)) * jnp.nan
      for i in range(M+L-1):
        state = state.at[0].set(jnp.where(stage == 0, inputs[i % K], state[0]))
        state = jax.vmap(fn)(stage_params, state)
        outputs = outputs.at[(i-L+1) % K].set(jnp.where(stage == S-1, state[-1], outputs[(i-L+1) % K]))
        state, inputs, outputs = shift(i, state, inputs, outputs)
      outputs = jax.lax.ppermute(outputs, 'stages', [(i, (i+1) % S) for i in range(S)])
      return outputs

    def shift(i, state, inputs, outputs):
      sh = lambda x, d: jax.lax.ppermute(x, 'stages', [(i, (i+d) % S) for i in range(S)])
      state = jnp.roll(state, +1, axis=0).at[0].set(sh(state[-1], +1))
      if (i % K) == (-1 % K):
        inputs = sh(inputs, +1)
      if ((i-L+1) % K) == (-1 % K):
        outputs = sh(outputs, +1)
      return state, inputs, outputs

    first_params, *inner_params, last_params = params
    Ws, bs = zip(*inner_params)
    params_stacked = jnp.stack(Ws), jnp.stack(bs)
    first_params = jax.device_put(first_params, NamedSharding(mesh, P()))
    params_stacked = jax.device_put(params_stacked, NamedSharding(mesh, P('stages')))
    last_params = jax.device_put(last_params, NamedSharding(mesh, P()))
    params_ = first_params, params_stacked, last_params
    return mesh, loss_pp, params_, (M + L - 1, K)


def test_t26_pipeline_configuration(model, capsys):
    params, _ = model
    mesh, _, params_, (steps, K) = _pipeline(params, capsys)
    assert steps == 7 and K == 2
    (W_first, _), (Ws, bs), (W_last, _) = params_
    assert Ws.shape == (4, 128, 128) and bs.shape == (4, 128)
    assert Ws.sharding == NamedSharding(mesh, P('stages'))
    assert [s.data.shape for s in Ws.addressable_shards] == [(2, 128, 128)] * 2
    assert W_first.shape == (784, 128) and W_last.shape == (128, 8)


@pytest.mark.parametrize("wrap", WRAPS)
def test_t26_pipeline_loss(model, wrap, capsys):
    params, batch = model
    mesh, loss_pp, params_, _ = _pipeline(params, capsys)
    batch_ = jax.device_put(batch, NamedSharding(mesh, P('stages')))

    print(jax.jit(loss)(params, batch))
    print(wrap(loss_pp)(params_, batch_))
    first, second = capsys.readouterr().out.splitlines()
    assert np.isfinite(float(second)), "NaN from the pipeline's initial state reached the loss"
    assert_close(float(second), float(first))
    got = wrap(loss_pp)(params_, batch_)
    assert got.shape == () and got.sharding == NamedSharding(mesh, P())
    assert_close(got, reference(params, batch)[0])
