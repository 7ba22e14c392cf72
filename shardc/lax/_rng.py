"""``jax.lax.rng_bit_generator``: XLA's stateless bit generator, from a key that carries its own
counter. The bits are shardc's (a Threefry-2x32 hash of the counter), not XLA's, which no
numpy program can reproduce; the shapes, dtypes, the key's update and the checks are JAX's."""
from __future__ import annotations

import enum
import math
import operator

import numpy as np

from compiler.custom_ad import custom_vmap
from compiler.tracing import bind
from ir import dtypes as _dt
from ir import primitives as p
import shardc.numpy as jnp
from shardc.lax._ops import broadcasted_iota
from shardc.sharding import reshard

__all__ = ["RandomAlgorithm", "rng_bit_generator"]


class RandomAlgorithm(enum.IntEnum):
    """Which PRNG algorithm ``rng_bit_generator`` names (JAX's ``lax.RandomAlgorithm``)."""
    RNG_DEFAULT = 0
    RNG_THREE_FRY = 1
    RNG_PHILOX = 2

    def __str__(self):
        return self.name


_BITS_DTYPES = frozenset(np.dtype(d) for d in (np.uint8, np.uint16, np.uint32, np.uint64))
# a second key for the other half of a 128-bit block (any fixed words unlike the key's do)
_SECOND = (np.uint32(0x9E3779B9), np.uint32(0x7F4A7C15))


def rng_bit_generator(key, shape, dtype=np.uint32, algorithm=RandomAlgorithm.RNG_DEFAULT, *,
                      out_sharding=None):
    """``(new_key, bits)``: uniformly distributed ``bits`` of ``shape`` and ``dtype`` (uint8,
    uint16, uint32 or uint64) drawn from ``key``, a ``uint32[4]`` (or, with x64, ``uint64[2]``)
    holding a 64-bit key and a 64-bit counter (JAX's ``lax.rng_bit_generator``).

    As XLA's, ``new_key`` is ``key`` with its counter advanced by the blocks the bits used: one
    per 128 bits for Philox (the CPU default, ``RNG_DEFAULT``), one per 64 bits for ThreeFry
    (XLA's ThreeFry may skip further for some shapes), so chaining keys never reuses a
    counter, and an empty draw hands the key back unchanged. The same key gives the same bits,
    eagerly and under jit; under vmap, as JAX's batching rule, the first key draws the whole
    batch's bits and alone advances. The bits themselves are not XLA's: each block is a
    Threefry-2x32 hash of its counter under the key (two hashes, the second under fixed
    other words, for a 128-bit block), so programs that depend on XLA's exact bits differ.
    """
    shape = _shape(shape)
    dtype = _dt.requested(dtype, "rng_bit_generator")
    if dtype not in _BITS_DTYPES:
        raise TypeError(f"rng_bit_generator: unsupported dtype {dtype}")
    if algorithm not in tuple(RandomAlgorithm):
        raise ValueError(f"rng_bit_generator: algorithm must be a lax.RandomAlgorithm "
                         f"(RNG_DEFAULT, RNG_THREE_FRY or RNG_PHILOX), got {algorithm!r}")
    key = jnp.asarray(key)
    if not ((key.shape == (2,) and key.dtype == np.uint64)
            or (key.shape == (4,) and key.dtype == np.uint32)):
        raise TypeError("rng_bit_generator: the key must be uint32[4] (or uint64[2] with "
                        f"x64), got {key.dtype.name}{list(key.shape)}")
    new_key, bits = _generator(shape, dtype, RandomAlgorithm(algorithm))(key)
    if out_sharding is not None:
        bits = reshard(bits, out_sharding)
    return new_key, bits


def _generator(shape, dtype, algorithm):
    """The draw of ``shape`` from a key, batched as JAX's rule batches it: a batch of keys
    draws all its bits from the first key, ``(batch, *shape)`` at once, and only that key
    advances (the others come back as they were)."""
    @custom_vmap
    def draw(key):
        return _draw_from(key, shape, dtype, algorithm)

    @draw.def_vmap
    def _batched(axis_size, in_batched, keys):
        if not in_batched[0]:
            return draw(keys), (False, False)
        new_key, bits = _generator((axis_size,) + shape, dtype, algorithm)(keys[0])
        return (jnp.asarray(keys).at[0].set(new_key), bits), (True, True)

    return draw


def _draw_from(key, shape, dtype, algorithm):
    """``(new_key, bits)`` for one key (``uint32[4]`` or ``uint64[2]``)."""
    wide = key.dtype == np.uint64
    words = _words(key) if wide else [key[i] for i in range(4)]
    per_element = 2 if dtype == np.uint64 else 1          # uint32 words per element
    needed = math.prod(shape) * per_element
    block = 2 if algorithm == RandomAlgorithm.RNG_THREE_FRY else 4       # words per block
    blocks = -(-needed // block)
    if blocks >= 2 ** 32:
        raise NotImplementedError(f"rng_bit_generator: {needed} words of bits; shardc counts "
                                  "blocks up to 2**32")
    bits = _draw(words, blocks, block, needed, shape, dtype)
    low, high = _advance(words[2], words[3], np.uint32(blocks))
    new_words = [words[0], words[1], low, high]
    return (_wide(new_words) if wide else jnp.stack(new_words)).astype(key.dtype), bits


def _shape(shape) -> tuple:
    """``shape`` as a tuple of non-negative ints (an int is a rank-1 shape), as JAX's."""
    dims = (shape,) if np.ndim(shape) == 0 else tuple(shape)
    try:
        dims = tuple(operator.index(d) for d in dims)
    except TypeError as error:
        raise TypeError("Shapes must be 1D sequences of concrete values of integer type, got "
                        f"{shape}.") from error
    if any(d < 0 for d in dims):
        raise TypeError(f"rng_bit_generator: shape must have non-negative sizes, got {shape}")
    return dims


def _words(key) -> list:
    """A ``uint64[2]`` key as four uint32 words, low word first (little-endian, as XLA reads a
    ``uint32[4]`` key)."""
    out = []
    for i in range(2):
        out += [(key[i] & np.uint64(0xFFFFFFFF)).astype(np.uint32),
                (key[i] >> np.uint64(32)).astype(np.uint32)]
    return out


def _wide(words):
    """Four uint32 words as a ``uint64[2]`` key."""
    pairs = [words[i].astype(np.uint64) | (words[i + 1].astype(np.uint64) << np.uint64(32))
             for i in (0, 2)]
    return jnp.stack(pairs)


def _advance(low, high, count):
    """The 64-bit counter ``(low, high)`` plus ``count`` (uint32 words, wrapping)."""
    new_low = low + count
    carry = (new_low < low).astype(np.uint32)
    return new_low, high + carry


def _draw(words, blocks, block, needed, shape, dtype):
    """``needed`` uint32 words from ``blocks`` blocks of ``block`` words each, block ``j``
    the hash of the counter plus ``j``, as bits of ``shape`` and ``dtype``."""
    if needed == 0:
        return jnp.zeros(shape, dtype)
    index = broadcasted_iota(np.uint32, (blocks,), 0)
    low, high = _advance(words[2], words[3], index)
    halves = list(bind(p.threefry2x32_p, words[0], words[1], high, low))
    if block == 4:
        halves += bind(p.threefry2x32_p, words[0] ^ _SECOND[0], words[1] ^ _SECOND[1], high,
                       low)
    flat = jnp.reshape(jnp.stack(halves, axis=1), (-1,))[:needed]
    if dtype == np.uint64:
        pairs = jnp.reshape(flat, (-1, 2)).astype(np.uint64)
        return jnp.reshape(pairs[:, 0] | (pairs[:, 1] << np.uint64(32)), shape)
    return jnp.reshape(flat.astype(dtype), shape)
