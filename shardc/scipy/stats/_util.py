"""What the distributions share: JAX's promotion of their arguments, and constants typed like
an operand (``lax`` operations take no mixed dtypes)."""
from __future__ import annotations

import shardc.lax as lax
import shardc.numpy as jnp
import shardc.scipy.special as special
from shardc.numpy._arraylike import check_arraylike
from shardc.numpy._core import weakly_typed_like

__all__ = ["promote_args_inexact", "const", "clamped"]


def promote_args_inexact(name, *args):
    """``args`` as arrays of the floating dtype they promote to (integers and booleans
    float32, 64-bit integers float64 with x64 on), weakly typed where every one is; a list or
    tuple among them is JAX's TypeError naming ``name``."""
    for position, arg in enumerate(args):
        check_arraylike(name, arg, position)
    return special.inexact_operands(*args)


def const(x, value):
    """``value`` as a scalar of ``x``'s dtype."""
    return jnp.asarray(value, x.dtype)


def clamped(low, x, high):
    """``x`` clamped to ``[low, high]`` (NaN stays NaN), weakly typed where ``x`` is."""
    return weakly_typed_like(lax.clamp(const(x, low), x, const(x, high)), x)
