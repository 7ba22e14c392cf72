"""``shardc.nn``: activations and layers' functions, and ``initializers``."""
from shardc.nn._functions import *  # noqa: F401,F403
from shardc.nn import initializers  # noqa: F401  (jax.nn.initializers)
