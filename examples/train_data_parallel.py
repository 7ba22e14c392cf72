"""Data parallelism (SEMANTICS T22), trained: the batch is split over the mesh, the parameters
are replicated, each device computes the loss of its share and ``pmean`` averages them.

``grad`` of that loss is a shard_map whose backward pass sums each parameter's gradient over
the batch axes: the replicated parameters were lifted (``pvary``) where they met the split
batch, and ``pvary`` transposes to ``psum`` -- one ``all_reduce`` per parameter gradient and no
other collective (tests/golden/grad_data_parallel_*.txt).

    .venv/bin/python examples/train_data_parallel.py

trains on the 8-device mesh ``batch`` and on (4,2) and (2,4) meshes whose two axes together
split the batch (``P(('x', 'y'))``), and checks each against single-device training.
"""
from __future__ import annotations

import sys
from functools import partial

import shardc as jax
import shardc.numpy as jnp
from shardc.sharding import NamedSharding, PartitionSpec as P

from train_mlp import STEPS, model, predict, report, sgd, train, train_single_device

# mesh shape -> (axis names, the axes the batch is split over)
MESHES = {
    (8,): (("batch",), "batch"),
    (4, 2): (("x", "y"), ("x", "y")),
    (2, 4): (("x", "y"), ("x", "y")),
}


def make_train_step(mesh, batch_axes):
    """(loss_dp, train_step): the data-parallel loss and one jitted SGD step."""

    @partial(jax.shard_map, mesh=mesh, in_specs=(P(), P(batch_axes)), out_specs=P())
    def loss_dp(params, local_batch):
      inputs, targets = local_batch
      predictions = predict(params, inputs)  # use reference 'predict`
      local_loss = jnp.mean(jnp.sum((predictions - targets)**2, axis=-1))
      return jax.lax.pmean(local_loss, batch_axes)

    @jax.jit
    def train_step(params, batch):
      return sgd(params, jax.grad(loss_dp)(params, batch))

    return jax.jit(loss_dp), train_step


def place(mesh, batch_axes, params, batch):
    """Replicate the parameters, split the batch."""
    return (jax.device_put(params, NamedSharding(mesh, P())),
            jax.device_put(batch, NamedSharding(mesh, P(batch_axes))))


def train_data_parallel(mesh_shape, params, batch, steps=STEPS, verbose=False):
    names, batch_axes = MESHES[mesh_shape]
    mesh = jax.make_mesh(mesh_shape, names)
    loss_dp, train_step = make_train_step(mesh, batch_axes)
    params, batch = place(mesh, batch_axes, params, batch)
    return train(train_step, loss_dp, params, batch, steps, verbose)


def main(meshes=tuple(MESHES)):
    params, batch = model()
    reference, reference_losses = train_single_device(params, batch)
    ok = True
    for shape in meshes:
        print(f"data parallel on mesh {shape} {MESHES[shape][0]}, batch split over "
              f"{MESHES[shape][1]!r}")
        trained, losses = train_data_parallel(shape, params, batch, verbose=True)
        ok &= report(f"data parallel {shape}", trained, reference, losses, reference_losses)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
