"""The product the optimizers and their line search compute in: ``jnp.dot`` at the highest
precision, as JAX's do."""
from __future__ import annotations

import shardc.lax as lax
import shardc.numpy as jnp

__all__ = ["highest_dot"]


def highest_dot(x, y):
    return jnp.dot(x, y, precision=lax.Precision.HIGHEST)
