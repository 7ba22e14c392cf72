"""The tutorial's MLP trained in explicit sharding mode (JAX 0.10's sharding in types): no
shard_map, no collective written by hand. The batch is split over ``x`` (``P('x', None)``),
each weight's output columns and each bias over ``y`` (``P(None, 'y')``, ``P('y')``); the
types say so (``float32[32@x,784]``, ``float32[784,128@y]``) and every operation's rule types
its result.

One layer: the activations are gathered along ``y`` (``reshard(h, P('x', None))``), then
``jnp.dot`` of ``[32@x,n]`` and ``[n,128@y]`` is ``[32@x,128@y]``, each device's block from its
own blocks. The loss's mean over the split batch is an all_reduce the partitioner inserts.
``grad`` gives each parameter's gradient its parameter's type, so the SGD update is
elementwise on blocks: under jit the whole step is one program of per-device blocks, and
under ``mpiexec`` a process computes only its own devices' blocks, nothing gathered.

    .venv/bin/python examples/train_explicit.py

trains on (2, 4) and (4, 2) meshes and checks each against single-device training.
"""
from __future__ import annotations

import sys

import shardc as jax
import shardc.numpy as jnp
from shardc.sharding import PartitionSpec as P

from train_mlp import STEPS, model, report, sgd, train, train_single_device

MESHES = ((2, 4), (4, 2))


def predict(params, inputs):
    h = inputs
    for W, b in params:
        h = jax.sharding.reshard(h, P("x", None))    # each device: its rows, every column
        outputs = jnp.dot(h, W) + b                   # [batch@x, n@y]
        h = jax.nn.relu(outputs)
    return outputs


def loss(params, batch):
    inputs, targets = batch
    predictions = predict(params, inputs)
    return jnp.mean(jnp.sum((predictions - targets) ** 2, axis=-1))


@jax.jit
def train_step(params, batch):
    return sgd(params, jax.grad(loss)(params, batch))


def place(params, batch):
    """Weights split by output column, the batch by row (on the current mesh)."""
    params = [(jax.device_put(W, P(None, "y")), jax.device_put(b, P("y"))) for W, b in params]
    return params, tuple(jax.device_put(v, P("x", None)) for v in batch)


def train_explicit(mesh_shape, params, batch, steps=STEPS, verbose=False):
    mesh = jax.make_mesh(mesh_shape, ("x", "y"))      # Explicit axes, as JAX 0.10's
    with jax.set_mesh(mesh):
        params, batch = place(params, batch)
        return train(train_step, jax.jit(loss), params, batch, steps, verbose)


def main(meshes=MESHES):
    params, batch = model()
    reference, reference_losses = train_single_device(params, batch)
    ok = True
    for shape in meshes:
        print(f"explicit sharding on mesh {shape} ('x', 'y'): batch over x, weights over y")
        trained, losses = train_explicit(shape, params, batch, verbose=True)
        W, b = trained[0]
        print(f"  first layer after training: {jax.typeof(W)}, {jax.typeof(b)}")
        ok &= report(f"explicit {shape}", trained, reference, losses, reference_losses)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
