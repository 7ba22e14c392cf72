"""Old API paths of JAX's ``jax.experimental``."""
