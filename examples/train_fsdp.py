"""Fully sharded data parallelism (SEMANTICS T23), trained: the batch *and every parameter*
are split over the mesh; each layer ``all_gather``s its weights just before using them, under
a ``remat`` whose policy saves everything but ``all_gather`` (so the backward pass may gather
them again instead of keeping them).

The transpose of ``all_gather`` is ``psum_scatter``: the gradient of each parameter shard is
reduced and scattered in one ``reduce_scatter`` and comes out split like the parameter, so the
SGD update runs on shards (tests/golden/grad_fsdp_*.txt).

    .venv/bin/python examples/train_fsdp.py

trains on the 8-device mesh ``batch`` and on (4,2) and (2,4) meshes whose two axes together
split the batch and the parameters (``P(('x', 'y'))``), and checks each against single-device
training.
"""
from __future__ import annotations

import sys
from functools import partial

import shardc as jax
import shardc.numpy as jnp
from shardc.sharding import NamedSharding, PartitionSpec as P

from train_mlp import STEPS, model, report, sgd, train, train_single_device

MESHES = {
    (8,): (("batch",), "batch"),
    (4, 2): (("x", "y"), ("x", "y")),
    (2, 4): (("x", "y"), ("x", "y")),
}


def make_predict_fsdp(axes):
  # adapt the prediction function to gather weights just before their use,
  # and to re-gather them on the backward pass (rather than saving them)
  @partial(jax.remat, policy=lambda op, *_, **__: str(op) != 'all_gather')
  def predict_fsdp(params_frag, inputs):
    for W_frag, b_frag in params_frag:
      W = jax.lax.all_gather(W_frag, axes, tiled=True)
      b = jax.lax.all_gather(b_frag, axes, tiled=True)
      outputs = jnp.dot(inputs, W) + b
      inputs = jax.nn.relu(outputs)
    return outputs
  return predict_fsdp


def make_train_step(mesh, axes):
    """(loss_fsdp, train_step): the FSDP loss and one jitted SGD step on sharded params."""
    predict_fsdp = make_predict_fsdp(axes)

    @partial(jax.shard_map, mesh=mesh, in_specs=P(axes), out_specs=P())
    def loss_fsdp(local_params, local_batch):
      inputs, targets = local_batch
      predictions = predict_fsdp(local_params, inputs)
      local_loss = jnp.mean(jnp.sum((predictions - targets)**2, axis=-1))
      return jax.lax.pmean(local_loss, axes)

    @jax.jit
    def train_step(params, batch):
      return sgd(params, jax.grad(loss_fsdp)(params, batch))

    return jax.jit(loss_fsdp), train_step


def place(mesh, axes, params, batch):
    """Shard the batch and the parameters (each along its first dimension)."""
    sharding = NamedSharding(mesh, P(axes))
    return jax.device_put(params, sharding), jax.device_put(batch, sharding)


def train_fsdp(mesh_shape, params, batch, steps=STEPS, verbose=False):
    names, axes = MESHES[mesh_shape]
    mesh = jax.make_mesh(mesh_shape, names)
    loss_fsdp, train_step = make_train_step(mesh, axes)
    params, batch = place(mesh, axes, params, batch)
    return train(train_step, loss_fsdp, params, batch, steps, verbose)


def main(meshes=tuple(MESHES)):
    params, batch = model()
    reference, reference_losses = train_single_device(params, batch)
    ok = True
    for shape in meshes:
        print(f"FSDP on mesh {shape} {MESHES[shape][0]}, batch and parameters split over "
              f"{MESHES[shape][1]!r}")
        trained, losses = train_fsdp(shape, params, batch, verbose=True)
        ok &= report(f"FSDP {shape}", trained, reference, losses, reference_losses)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
