"""Tensor parallelism (SEMANTICS T24), trained: every layer is a shard_map ``gemm_tp`` whose
weight rows (the contracting dimension) and input features are split over the mesh; the
partial products are summed and scattered over the output features with ``psum_scatter``,
so each layer's output comes out split over features like the next layer's input. The loss
is plain code outside the shard_maps.

In the gradient, ``psum_scatter`` transposes to ``all_gather``: each layer's backward pass
gathers the output cotangent, and the weight and bias gradients come out split like the
parameters.

    .venv/bin/python examples/train_tensor_parallel.py

trains on the 8-device mesh ``feats`` and on (4,2) and (2,4) meshes whose two axes together
split the features (``P(None, ('x', 'y'))``), and checks each against single-device training.
"""
from __future__ import annotations

import sys
from functools import partial

import shardc as jax
import shardc.numpy as jnp
from shardc.sharding import NamedSharding, PartitionSpec as P

from train_mlp import STEPS, model, report, sgd, train, train_single_device

MESHES = {
    (8,): (("feats",), "feats"),
    (4, 2): (("x", "y"), ("x", "y")),
    (2, 4): (("x", "y"), ("x", "y")),
}


def make_train_step(mesh, feats):
    """(loss_tp, train_step): the tensor-parallel loss and one jitted SGD step."""

    def predict_tp(params, inputs):
      for W, b in params:
        outputs = gemm_tp(inputs, W, b)
        inputs = jax.nn.relu(outputs)
      return outputs

    @partial(jax.shard_map, mesh=mesh,
             in_specs=(P(None, feats), P(feats, None), P(feats)),
             out_specs=P(None, feats))
    def gemm_tp(inputs, W, b):
      block_result = jnp.dot(inputs, W)
      return jax.lax.psum_scatter(block_result, feats,
                                  scatter_dimension=1, tiled=True) + b

    def loss_tp(params, batch):
      inputs, targets = batch
      predictions = predict_tp(params, inputs)
      return jnp.mean(jnp.sum((predictions - targets) ** 2, axis=-1))  # NOTE psum!

    @jax.jit
    def train_step(params, batch):
      return sgd(params, jax.grad(loss_tp)(params, batch))

    return jax.jit(loss_tp), train_step


def place(mesh, feats, params, batch):
    """Split the batch's features and the parameters' first dimension."""
    return (jax.device_put(params, NamedSharding(mesh, P(feats))),
            jax.device_put(batch, NamedSharding(mesh, P(None, feats))))


def train_tensor_parallel(mesh_shape, params, batch, steps=STEPS, verbose=False):
    names, feats = MESHES[mesh_shape]
    mesh = jax.make_mesh(mesh_shape, names)
    loss_tp, train_step = make_train_step(mesh, feats)
    params, batch = place(mesh, feats, params, batch)
    return train(train_step, loss_tp, params, batch, steps, verbose)


def main(meshes=tuple(MESHES)):
    params, batch = model()
    reference, reference_losses = train_single_device(params, batch)
    ok = True
    for shape in meshes:
        print(f"tensor parallel on mesh {shape} {MESHES[shape][0]}, features split over "
              f"{MESHES[shape][1]!r}")
        trained, losses = train_tensor_parallel(shape, params, batch, verbose=True)
        ok &= report(f"tensor parallel {shape}", trained, reference, losses, reference_losses)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
