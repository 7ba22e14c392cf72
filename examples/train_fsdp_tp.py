"""FSDP + tensor parallelism (SEMANTICS T25), trained, with shard_map at the top level: a 2-D
mesh ``batch`` x ``feats``; the batch is split over both (examples over ``batch``, features over
``feats``), every parameter over both (``P(('feats', 'batch'))``: gathering over ``batch``
then yields exactly the rows of this device's feature shard). Each layer gathers its weights
over ``batch``, multiplies, and ``psum_scatter``s the partial products over ``feats``.

In the gradient, the gathers over ``batch`` become ``reduce_scatter``s of the parameter
gradients and the scatters over ``feats`` become ``all_gather``s of the cotangents.

    .venv/bin/python examples/train_fsdp_tp.py

trains on the (4,2) and (2,4) meshes, and on (8,1) (all eight devices on ``batch``, one on
``feats``), and checks each against single-device training.
"""
from __future__ import annotations

import sys
from functools import partial

import shardc as jax
import shardc.numpy as jnp
from shardc.sharding import NamedSharding, PartitionSpec as P

from train_mlp import STEPS, model, report, sgd, train, train_single_device

MESHES = [(4, 2), (2, 4), (8, 1)]


# mostly same as the FSDP example's predict_fsdp, except we call gemm_tp
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


def make_train_step(mesh):
    """(loss_fsdp_tp, train_step) on a mesh with axes ``batch`` and ``feats``."""

    @partial(jax.shard_map, mesh=mesh,
             in_specs=(P(('feats', 'batch')), P('batch', 'feats')),
             out_specs=P())
    def loss_fsdp_tp(local_params, local_batch):
      inputs, targets = local_batch
      predictions = predict_fsdp_tp(local_params, inputs)
      sq_err = jax.lax.psum(jnp.sum((predictions - targets)**2, axis=-1), 'feats')
      return jax.lax.pmean(jnp.mean(sq_err), 'batch')

    @jax.jit
    def train_step(params, batch):
      return sgd(params, jax.grad(loss_fsdp_tp)(params, batch))

    return jax.jit(loss_fsdp_tp), train_step


def place(mesh, params, batch):
    return (jax.device_put(params, NamedSharding(mesh, P(('feats', 'batch')))),
            jax.device_put(batch, NamedSharding(mesh, P('batch', 'feats'))))


def train_fsdp_tp(mesh_shape, params, batch, steps=STEPS, verbose=False):
    mesh = jax.make_mesh(mesh_shape, ('batch', 'feats'))
    loss_fsdp_tp, train_step = make_train_step(mesh)
    params, batch = place(mesh, params, batch)
    return train(train_step, loss_fsdp_tp, params, batch, steps, verbose)


def main(meshes=tuple(MESHES)):
    params, batch = model()
    reference, reference_losses = train_single_device(params, batch)
    ok = True
    for shape in meshes:
        print(f"FSDP + TP on mesh {shape} ('batch', 'feats')")
        trained, losses = train_fsdp_tp(shape, params, batch, verbose=True)
        ok &= report(f"FSDP + TP {shape}", trained, reference, losses, reference_losses)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
