"""``shardc.nn``: activation and normalisation functions built from ``shardc.numpy``."""
from __future__ import annotations

import shardc.numpy as jnp
from ir import primitives as p
from compiler.tracing import bind


def relu(x):
    """``max(x, 0)``."""
    return jnp.maximum(x, 0)


def sigmoid(x):
    x = jnp.asarray(x) if not hasattr(x, "dtype") else x
    return bind(p.logistic_p, jnp.astype(x, jnp.result_type(x, 0.0)))


def gelu(x, approximate=True):
    return 0.5 * x * (1 + jnp.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


def silu(x):
    return x * sigmoid(x)


def logsumexp(x, axis=None, keepdims=False):
    """``log(sum(exp(x)))``, computed stably."""
    top = jnp.max(x, axis=axis, keepdims=True)
    top = jnp.where(jnp.isfinite(top), top, 0)
    total = jnp.sum(jnp.exp(x - top), axis=axis, keepdims=True)
    out = jnp.log(total) + top
    return out if keepdims else jnp.squeeze(out, axis=axis if axis is not None else None) \
        if axis is not None else jnp.reshape(out, ())


def log_softmax(x, axis=-1):
    """``x - logsumexp(x)`` along ``axis``."""
    shifted = x - jnp.max(x, axis=axis, keepdims=True)
    return shifted - jnp.log(jnp.sum(jnp.exp(shifted), axis=axis, keepdims=True))


def softmax(x, axis=-1):
    """``exp(x) / sum(exp(x))`` along ``axis``, computed stably."""
    unnormalized = jnp.exp(x - jnp.max(x, axis=axis, keepdims=True))
    return unnormalized / jnp.sum(unnormalized, axis=axis, keepdims=True)


def one_hot(x, num_classes, dtype=jnp.float32):
    classes = jnp.arange(num_classes)
    return jnp.astype(jnp.equal(jnp.expand_dims(x, -1), classes), dtype)
