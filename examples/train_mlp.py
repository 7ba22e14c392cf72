"""The tutorial's MLP (SEMANTICS T21) and its single-device SGD training: the reference every
parallel training example (``examples/train_*.py``) must reproduce.

    .venv/bin/python examples/train_mlp.py            # train on one device, print the losses

The parallel examples import ``init``, ``predict``, ``loss``, ``train_single_device`` and
``compare`` from here; each trains the same model from the same initialisation on the same
data and checks that its parameters after N steps equal the ones trained here to 1e-5.
"""
from __future__ import annotations

import sys

import numpy as np

import shardc as jax
import shardc.numpy as jnp

LAYER_SIZES = [784, 128, 128, 128, 128, 128, 8]
BATCH_SIZE = 32
STEPS = 3
LEARNING_RATE = 0.002
TOLERANCE = 1e-5


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


def model(layer_sizes=None, batch_size=BATCH_SIZE, seed=0):
    """The initial parameters and the batch every example trains on."""
    return init(jax.random.key(seed), list(layer_sizes or LAYER_SIZES), batch_size)


def sgd(params, grads, lr=LEARNING_RATE):
    return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)


@jax.jit
def single_device_step(params, batch):
    """One SGD step of plain ``jnp`` code: no mesh, no shard_map."""
    return sgd(params, jax.grad(loss)(params, batch))


def train(step, loss_fn, params, batch, steps=STEPS, verbose=False):
    """Run ``params = step(params, batch)`` ``steps`` times; the losses before each step.

    The updated parameters are placed as the initial ones were (a jitted step's outputs
    outside any shard_map come back unplaced), so every step starts from sharded parameters.
    """
    shardings = jax.tree_util.tree_map(lambda p: p.sharding, params)
    losses = []
    for k in range(steps):
        losses.append(float(loss_fn(params, batch)))
        if verbose:
            print(f"step {k}: loss {losses[-1]:.6f}")
        params = jax.tree_util.tree_map(jax.device_put, step(params, batch), shardings)
    return params, losses


def train_single_device(params, batch, steps=STEPS, verbose=False):
    return train(single_device_step, jax.jit(loss), params, batch, steps, verbose)


def max_difference(a, b) -> float:
    """The largest elementwise |a - b| over two parameter pytrees (global arrays)."""
    leaves_a = jax.tree_util.tree_leaves(a)
    leaves_b = jax.tree_util.tree_leaves(b)
    assert len(leaves_a) == len(leaves_b)
    return max(float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64))))
               for x, y in zip(leaves_a, leaves_b))


def compare(params, reference, tolerance=TOLERANCE) -> bool:
    """Whether two parameter pytrees agree to ``tolerance`` (absolute and relative)."""
    return all(np.allclose(np.asarray(x), np.asarray(y), rtol=tolerance, atol=tolerance)
               for x, y in zip(jax.tree_util.tree_leaves(params),
                               jax.tree_util.tree_leaves(reference)))


def report(name, params, reference, losses, reference_losses) -> bool:
    """Print the final check line; True when the parameters match."""
    ok = compare(params, reference)
    print(f"check: {name}: parameters after {len(losses)} steps "
          f"{'equal' if ok else 'DIFFER FROM'} single-device training "
          f"(max |diff| {max_difference(params, reference):.2e}, tolerance {TOLERANCE:g}); "
          f"losses {'match' if np.allclose(losses, reference_losses, rtol=TOLERANCE) else 'differ'}")
    return ok


def main():
    params, batch = model()
    print(f"single device: MLP {LAYER_SIZES}, batch {BATCH_SIZE}, {STEPS} SGD steps, "
          f"lr {LEARNING_RATE}")
    trained, losses = train_single_device(params, batch, verbose=True)
    print(f"final loss {float(jax.jit(loss)(trained, batch)):.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
