"""``jax.experimental.shard_alike``: two values laid out alike."""
from __future__ import annotations

from compiler import tree
from compiler.tracing import aval_of, bind
from ir import primitives as prims

__all__ = ["shard_alike"]


def shard_alike(x, y):
    """``(x, y)`` unchanged, laid out alike: under jit on a mesh with Auto axes propagation
    gives each leaf of ``x`` and its leaf of ``y`` (and the results) one layout, the split one
    side has; eagerly the results come out laid out so. The pytrees must match, and each pair
    of leaves have one shape (JAX's ValueErrors).

    >>> x2, y2 = shard_alike(x, jnp.zeros_like(x))     # y2 split as x is
    """
    x_flat, x_tree = tree.tree_flatten(x)
    y_flat, y_tree = tree.tree_flatten(y)
    if x_tree != y_tree:
        raise ValueError(f"Trees should be equal. Got x_tree: {x_tree}, y_tree: {y_tree}")
    for a, b in zip(x_flat, y_flat):
        a_shape, b_shape = aval_of(a).shape, aval_of(b).shape
        if a_shape != b_shape:
            raise ValueError(
                f"The leaves shapes of `x` and `y` should match. Got `x` leaf shape: "
                f"{a_shape} and `y` leaf shape: {b_shape}. File an issue at "
                "https://github.com/jax-ml/jax/issues if you want this feature.")
    outs = [bind(prims.shard_alike_p, a, b) for a, b in zip(x_flat, y_flat)]
    return (tree.tree_unflatten(x_tree, [o[0] for o in outs]),
            tree.tree_unflatten(y_tree, [o[1] for o in outs]))
