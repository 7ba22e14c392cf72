"""Functions with their own batching rules (JAX's ``jax.custom_batching``)."""
from compiler.custom_ad import custom_vmap, sequential_vmap

__all__ = ["custom_vmap", "sequential_vmap"]
