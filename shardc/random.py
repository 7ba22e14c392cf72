"""``shardc.random``: keys and random numbers, functional as in JAX.

A key is a ``uint32[2]`` array; ``split`` and ``fold_in`` derive new keys. The bits come from
Philox keyed by the key, so they are reproducible but differ from JAX's threefry bits.
"""
from __future__ import annotations

import numpy as np

from compiler.tracing import bind
from ir import dtypes as _dt
from ir import primitives as p
import shardc.numpy as jnp


def PRNGKey(seed) -> "jnp.ndarray":
    """A key from an integer seed."""
    seed = int(seed)
    return jnp.asarray(np.array([(seed >> 32) & 0xFFFFFFFF, seed & 0xFFFFFFFF], np.uint32))


key = PRNGKey


def _bits(key, shape) -> "jnp.ndarray":
    return bind(p.random_bits_p, jnp.asarray(key), shape=tuple(int(d) for d in shape))


def split(key, num: int = 2):
    """``num`` new keys, as a ``uint32[num, 2]`` array."""
    return _bits(key, (int(num), 2))


def fold_in(key, data):
    """A new key from ``key`` and an integer."""
    mixed = jnp.astype(jnp.asarray(data), np.uint32)
    bits = _bits(key, (2,))
    return jnp.bitwise_xor(bits, jnp.stack([mixed, jnp.astype(jnp.asarray(0x9E3779B9), np.uint32)]))


def bits(key, shape=(), dtype=np.uint32):
    return jnp.astype(_bits(key, _shape(shape)), dtype)


def _shape(shape) -> tuple:
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(shape)


def uniform(key, shape=(), dtype=np.float32, minval=0.0, maxval=1.0):
    """Uniform floats in ``[minval, maxval)``."""
    dtype = _dt.canonicalize(dtype)
    raw = _bits(key, _shape(shape))
    # the top 24 bits give a float32 in [0, 1) with every value exactly representable
    unit = jnp.multiply(jnp.astype(jnp.floor_divide(raw, np.uint32(256)), dtype), 2.0 ** -24)
    return jnp.astype(jnp.add(jnp.multiply(unit, maxval - minval), minval), dtype)


def normal(key, shape=(), dtype=np.float32):
    """Standard normal floats (Box-Muller over two uniform draws)."""
    dtype = _dt.canonicalize(dtype)
    shape = _shape(shape)
    both = uniform(key, (2,) + shape, dtype)
    u1 = jnp.subtract(1.0, both[0])          # in (0, 1]: log is finite
    u2 = both[1]
    return jnp.astype(jnp.multiply(jnp.sqrt(jnp.multiply(-2.0, jnp.log(u1))),
                                   jnp.cos(jnp.multiply(2 * np.pi, u2))), dtype)


def randint(key, shape, minval, maxval, dtype=np.int32):
    """Integers in ``[minval, maxval)``."""
    span = int(maxval) - int(minval)
    draws = uniform(key, shape)
    return jnp.astype(jnp.add(jnp.floor(jnp.multiply(draws, span)), int(minval)), dtype)


def bernoulli(key, p=0.5, shape=()):
    return jnp.less(uniform(key, shape), p)


def permutation(key, x):
    """A random permutation of ``range(x)`` or of the rows of ``x``."""
    n = int(x) if isinstance(x, (int, np.integer)) else jnp.asarray(x).shape[0]
    order = jnp.argsort(uniform(key, (n,))) if hasattr(jnp, "argsort") else None
    if order is None:
        raise NotImplementedError("random.permutation needs jnp.argsort")
    return order if isinstance(x, (int, np.integer)) else jnp.take(jnp.asarray(x), order, 0)
