"""``shardc.random``: keys and random numbers, functional as in JAX.

``key(seed)`` gives a typed key array (dtype ``key<fry>``, shape ``()``); ``PRNGKey(seed)`` the
raw ``uint32[2]`` key data of older JAX code. Every sampler, ``split`` and ``fold_in`` take
either; ``split`` and ``fold_in`` return keys of the kind they were given. The bits come from
Philox keyed by the key, so they are reproducible but differ from JAX's threefry bits.
"""
from __future__ import annotations

import numpy as np

from compiler.tracing import Tracer, bind
from ir import dtypes as _dt
from ir import primitives as p
import shardc.numpy as jnp
from shardc._keys import IMPLS, KeyDtype, PRNGImpl, PRNGKeyArray, resolve_impl  # noqa: F401
from runtime.array import Array as _Array

# A key array is a jax.Array to isinstance, as in JAX.
_Array.register(PRNGKeyArray)


def PRNGKey(seed, *, impl=None) -> "jnp.ndarray":
    """The raw key data for an integer seed: ``uint32[2]`` (``uint32[4]`` for rbg keys)."""
    return _seed_data(seed, resolve_impl(impl))


def key(seed, *, impl=None) -> PRNGKeyArray:
    """A typed key (shape ``()``, dtype ``key<fry>``) from an integer seed.

    >>> k1, k2 = random.split(random.key(0))
    """
    impl = resolve_impl(impl)
    return PRNGKeyArray(impl, _seed_data(seed, impl))


def _seed_data(seed, impl: PRNGImpl):
    """As JAX with x64 off: a seed in int32's range fills the low word (the high word is 0);
    a wider Python integer fills both. rbg keys repeat the two words."""
    if isinstance(seed, PRNGKeyArray):
        raise TypeError("PRNGKey accepts a scalar seed, but was given a PRNG key.")
    if isinstance(seed, Tracer) or (hasattr(seed, "dtype") and not isinstance(seed, int)):
        seed = jnp.asarray(seed)
        if seed.shape != () or not _dt.is_int(seed.dtype):
            raise TypeError(f"PRNG key seed must be a scalar integer, got {seed.dtype.name}"
                            f"{list(seed.shape)}")
        low = jnp.astype(seed, np.uint32)
        words = jnp.stack([jnp.zeros((), np.uint32), low])
    else:
        seed = int(seed)
        high = 0 if -2 ** 31 <= seed < 2 ** 31 else (seed >> 32) & 0xFFFFFFFF
        words = jnp.asarray(np.array([high, seed & 0xFFFFFFFF], np.uint32))
    return words if impl.words == 2 else jnp.concatenate([words, words])


def key_data(keys):
    """The ``uint32[..., W]`` data of a key array (raw key data is returned as it is)."""
    return keys._base if isinstance(keys, PRNGKeyArray) else jnp.asarray(keys)


def wrap_key_data(key_bits, *, impl=None) -> PRNGKeyArray:
    """A key array around ``uint32[..., W]`` key data (``key_data``'s inverse)."""
    impl = resolve_impl(impl)
    data = jnp.asarray(key_bits)
    if data.dtype != np.uint32:
        raise TypeError(f"wrap_key_data requires uint32 key data, got {data.dtype.name}")
    if not data.shape or data.shape[-1] != impl.words:
        raise ValueError(f"wrap_key_data: {impl.name} key data has a trailing dimension of "
                         f"{impl.words}, got shape {tuple(data.shape)}")
    return PRNGKeyArray(impl, data)


def key_impl(keys) -> PRNGImpl:
    """The implementation of a typed key array (``str()`` gives its name)."""
    if not isinstance(keys, PRNGKeyArray):
        raise TypeError(f"key_impl accepts a typed key array, got {type(keys).__name__}")
    return keys._impl


def clone(keys):
    """The same keys (shardc never consumes a key in place)."""
    return keys


def _single_key(name: str, keys):
    """The ``uint32[2]`` words a sampler draws from; a key array must hold one key."""
    if isinstance(keys, PRNGKeyArray):
        if keys.shape != ():
            raise ValueError(f"{name} accepts a single key, but was given a key array of shape "
                             f"{keys.shape} != (). Use jax.vmap for batching.")
        data = keys._base
        # A 4-word key folds to the 2 words the bit generator takes; the second half crosses
        # over, so a key made from a seed ([0, s, 0, s], as JAX makes it) folds to [s, s].
        return data if keys._impl.words == 2 else jnp.bitwise_xor(data[:2], data[3:1:-1])
    data = jnp.asarray(keys)
    if data.ndim > 1 and data.shape[-1] == 2:
        raise ValueError(f"{name} accepts a single key, but was given a key array of shape "
                         f"{tuple(data.shape[:-1])} != (). Use jax.vmap for batching.")
    return data


def _bits(key, shape, name: str = "random_bits") -> "jnp.ndarray":
    return bind(p.random_bits_p, _single_key(name, key), shape=tuple(int(d) for d in shape))


def split(key, num=2):
    """``num`` new keys (an int or a shape): typed keys of shape ``(num,)`` for a typed key,
    ``uint32[num, 2]`` for raw key data."""
    shape = _shape(num)
    if isinstance(key, PRNGKeyArray):
        words = key._impl.words
        return PRNGKeyArray(key._impl, _bits(key, shape + (words,), "split"))
    return _bits(key, shape + (2,), "split")


def fold_in(key, data):
    """A new key from ``key`` and an integer."""
    words = key._impl.words if isinstance(key, PRNGKeyArray) else 2
    mixed = jnp.astype(jnp.asarray(data), np.uint32)
    salt = jnp.asarray(np.uint32(0x9E3779B9))
    bits = _bits(key, (words,), "fold_in")
    folded = jnp.bitwise_xor(bits, jnp.stack([mixed, salt] * (words // 2)))
    return PRNGKeyArray(key._impl, folded) if isinstance(key, PRNGKeyArray) else folded


def bits(key, shape=(), dtype=np.uint32):
    return jnp.astype(_bits(key, _shape(shape), "bits"), dtype)


def _shape(shape) -> tuple:
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(shape)


def uniform(key, shape=(), dtype=np.float32, minval=0.0, maxval=1.0):
    """Uniform floats in ``[minval, maxval)``."""
    dtype = _dt.canonicalize(dtype)
    raw = _bits(key, _shape(shape), "uniform")
    # the top 24 bits give a float32 in [0, 1) with every value exactly representable
    unit = jnp.multiply(jnp.astype(jnp.floor_divide(raw, np.uint32(256)), dtype), 2.0 ** -24)
    return jnp.astype(jnp.add(jnp.multiply(unit, maxval - minval), minval), dtype)


def normal(key, shape=(), dtype=np.float32):
    """Standard normal floats (Box-Muller over two uniform draws)."""
    _single_key("normal", key)
    dtype = _dt.canonicalize(dtype)
    shape = _shape(shape)
    both = uniform(key, (2,) + shape, dtype)
    u1 = jnp.subtract(1.0, both[0])          # in (0, 1]: log is finite
    u2 = both[1]
    return jnp.astype(jnp.multiply(jnp.sqrt(jnp.multiply(-2.0, jnp.log(u1))),
                                   jnp.cos(jnp.multiply(2 * np.pi, u2))), dtype)


def randint(key, shape, minval, maxval, dtype=np.int32):
    """Integers in ``[minval, maxval)``."""
    _single_key("randint", key)
    span = int(maxval) - int(minval)
    draws = uniform(key, shape)
    return jnp.astype(jnp.add(jnp.floor(jnp.multiply(draws, span)), int(minval)), dtype)


def bernoulli(key, p=0.5, shape=()):
    _single_key("bernoulli", key)
    return jnp.less(uniform(key, shape), p)


def permutation(key, x):
    """A random permutation of ``range(x)`` or of the rows of ``x``."""
    _single_key("permutation", key)
    n = int(x) if isinstance(x, (int, np.integer)) else jnp.asarray(x).shape[0]
    order = jnp.argsort(uniform(key, (n,))) if hasattr(jnp, "argsort") else None
    if order is None:
        raise NotImplementedError("random.permutation needs jnp.argsort")
    return order if isinstance(x, (int, np.integer)) else jnp.take(jnp.asarray(x), order, 0)
