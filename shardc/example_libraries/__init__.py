"""``shardc.example_libraries`` (``jax.example_libraries``): JAX's two small example libraries,
``optimizers`` (first-order optimizers as ``(init, update, get_params)`` triples) and ``stax``
(neural network layers as ``(init_fun, apply_fun)`` pairs), written on shardc's public API so
that programs built on them run unchanged.
"""
