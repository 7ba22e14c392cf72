"""``shardc.nn``: activation and normalisation functions built from ``shardc.numpy``."""
from __future__ import annotations

import shardc.numpy as jnp
from ir import primitives as p
from compiler.tracing import bind


def relu(x):
    """``max(x, 0)``; its derivative at 0 is 0, as JAX's (NaN stays NaN)."""
    x = jnp.asarray(x) if not hasattr(x, "dtype") else x
    return jnp.where(jnp.logical_or(jnp.greater(x, 0), jnp.isnan(x)), x, 0)


def sigmoid(x):
    x = jnp.asarray(x) if not hasattr(x, "dtype") else x
    return bind(p.logistic_p, jnp.astype(x, jnp.result_type(x, 0.0)))


def gelu(x, approximate=True):
    return 0.5 * x * (1 + jnp.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


def silu(x):
    return x * sigmoid(x)


def _inexact(x):
    """``x`` as an array of a floating dtype (integers and booleans become float32)."""
    x = jnp.asarray(x) if not hasattr(x, "dtype") else x
    return jnp.astype(x, jnp.result_type(x, 0.0))


def logsumexp(x, axis=None, keepdims=False):
    """``log(sum(exp(x), axis))``, computed stably by shifting by the maximum.

    ``axis`` is None (every axis), an int or a tuple of ints, negative ones counted from the
    end; ``keepdims`` keeps the reduced axes with size 1. A slice that is all ``-inf`` gives
    ``-inf``.

    >>> nn.logsumexp(jnp.zeros((2, 3)), axis=1)      # [log 3, log 3]
    """
    x = _inexact(x)
    axes = jnp._reduce_axes(x, axis)
    top = jnp.max(x, axis=axes, keepdims=True)
    # An infinite maximum (an all -inf slice, or +inf) would give inf - inf = nan: shift by 0.
    top = jnp.where(jnp.isfinite(top), top, jnp.zeros_like(top))
    out = jnp.log(jnp.sum(jnp.exp(x - top), axis=axes, keepdims=True)) + top
    return out if keepdims else jnp.squeeze(out, axes)


def log_softmax(x, axis=-1):
    """``x - logsumexp(x)`` along ``axis`` (an int, a tuple, or None for every axis)."""
    x = _inexact(x)
    shifted = x - jnp.max(x, axis=axis, keepdims=True)
    return shifted - jnp.log(jnp.sum(jnp.exp(shifted), axis=axis, keepdims=True))


def softmax(x, axis=-1):
    """``exp(x) / sum(exp(x))`` along ``axis`` (an int, a tuple, or None), computed stably."""
    x = _inexact(x)
    unnormalized = jnp.exp(x - jnp.max(x, axis=axis, keepdims=True))
    return unnormalized / jnp.sum(unnormalized, axis=axis, keepdims=True)


def one_hot(x, num_classes, dtype=jnp.float32):
    classes = jnp.arange(num_classes)
    return jnp.astype(jnp.equal(jnp.expand_dims(x, -1), classes), dtype)
