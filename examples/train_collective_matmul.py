"""A collective-matmul layer (SEMANTICS T19, "all-gather matmul, overlapped"), trained: the
batch rows and every weight's rows are split over the mesh; instead of gathering a weight
before multiplying (FSDP), each device multiplies by the weight block it holds and passes the
block around a ``ppermute`` ring, multiplying each arriving block by the matching column slice
of its activations, so communication overlaps computation. Biases are replicated.

In the gradient each ``ppermute`` transposes to the reverse ring and each ``dynamic_slice``
of the activations to an update of its cotangent: the weight gradients come out split by rows
like the weights, the bias gradients are summed over the mesh.

    .venv/bin/python examples/train_collective_matmul.py

trains on the 8-device mesh ``i`` and on (4,2) and (2,4) meshes whose two axes together form
the ring (``('x', 'y')``), and checks each against single-device training.
"""
from __future__ import annotations

import sys
from functools import partial

import shardc as jax
import shardc.numpy as jnp
from shardc.sharding import NamedSharding, PartitionSpec as P

from train_mlp import STEPS, model, report, sgd, train, train_single_device

MESHES = {
    (8,): (("i",), "i"),
    (4, 2): (("x", "y"), ("x", "y")),
    (2, 4): (("x", "y"), ("x", "y")),
}


def make_matmul(axes):
  def matmul_allgather_overlapped(lhs_block, rhs_block):
    size = jax.lax.axis_size(axes)
    idx = jax.lax.axis_index(axes)
    shift = partial(jax.lax.ppermute, axis_name=axes,
                    perm=[(i, (i + 1) % size) for i in range(size)])

    B = lhs_block.shape[1] // size
    lhs_blocks = lambda i: jax.lax.dynamic_slice_in_dim(lhs_block, i * B, B, 1)

    out_block = lhs_blocks(idx) @ rhs_block
    for i in range(1, size):
      rhs_block = shift(rhs_block)
      out_block += lhs_blocks((idx - i) % size) @ rhs_block
    return out_block
  return matmul_allgather_overlapped


def make_train_step(mesh, axes, num_layers):
    """(loss_cm, train_step): the loss of the MLP built of collective-matmul layers."""
    matmul = make_matmul(axes)
    param_specs = [(P(axes, None), P())] * num_layers

    @partial(jax.shard_map, mesh=mesh, in_specs=(param_specs, P(axes)), out_specs=P())
    def loss_cm(local_params, local_batch):
      inputs, targets = local_batch
      for W_block, b in local_params:
        outputs = matmul(inputs, W_block) + b
        inputs = jax.nn.relu(outputs)
      local_loss = jnp.mean(jnp.sum((outputs - targets)**2, axis=-1))
      return jax.lax.pmean(local_loss, axes)

    @jax.jit
    def train_step(params, batch):
      return sgd(params, jax.grad(loss_cm)(params, batch))

    return jax.jit(loss_cm), train_step


def place(mesh, axes, params, batch):
    """Weights split by rows, biases replicated, batch split by examples."""
    params = [(jax.device_put(W, NamedSharding(mesh, P(axes, None))),
               jax.device_put(b, NamedSharding(mesh, P()))) for W, b in params]
    return params, jax.device_put(batch, NamedSharding(mesh, P(axes)))


def train_collective_matmul(mesh_shape, params, batch, steps=STEPS, verbose=False):
    names, axes = MESHES[mesh_shape]
    mesh = jax.make_mesh(mesh_shape, names)
    loss_cm, train_step = make_train_step(mesh, axes, len(params))
    params, batch = place(mesh, axes, params, batch)
    return train(train_step, loss_cm, params, batch, steps, verbose)


def main(meshes=tuple(MESHES)):
    params, batch = model()
    reference, reference_losses = train_single_device(params, batch)
    ok = True
    for shape in meshes:
        print(f"collective matmul on mesh {shape} {MESHES[shape][0]}, ring over "
              f"{MESHES[shape][1]!r}")
        trained, losses = train_collective_matmul(shape, params, batch, verbose=True)
        ok &= report(f"collective matmul {shape}", trained, reference, losses,
                     reference_losses)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
