"""JAX's newer key implementations, from the Random123 family: ``threefry4x32`` (keys of 4
words, tag ``fry4``), ``philox2x32`` (1 word, ``phx2``) and ``philox4x32`` (2 words, ``phx4``),
as ``jax._src.random.{threefry4x32,philox2x32,philox4x32}`` of JAX 0.10.2 define them.

Each is a hash of counters keyed by a key's words, written in shardc's uint32 arithmetic (so it
traces, batches and shards as any elementwise program), and four operations over it that hash
the counters JAX's do, so the bits are JAX's:

    seed(words)                  the seed's (high, low) words as counters -> a key's data
    split(data, high, low)       each new key's row-major index (high, low words) -> their data
    fold_in(data, msg)           the message as the low counter word -> one key's data
    bits(data, high, low, w)     each element's index -> its w-bit value

Philox's counter words are (x0, x1[, x2, x3]); a 64-bit value puts the first output word
over the second (threefry4x32's: words 0^2 over 1^3); narrower ones xor the output words and
keep their low bits.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

import shardc.lax as lax
import shardc.numpy as jnp

__all__ = ["Random123Ops", "OPS", "threefry4x32_hash", "philox2x32_hash", "philox4x32_hash"]


# --- the hashes ---------------------------------------------------------------------------------

_PHILOX_M2x32 = np.uint32(0xD256D193)
_PHILOX_M4x32 = (np.uint32(0xD2511F53), np.uint32(0xCD9E8D57))
# the Weyl sequence that bumps a Philox key each round
_PHILOX_W32 = (np.uint32(0x9E3779B9), np.uint32(0xBB67AE85))
_PHILOX_ROUNDS = 10

_THREEFRY4x32_ROTATIONS = ((10, 26), (11, 21), (13, 27), (23, 5),
                           (6, 20), (17, 11), (25, 10), (18, 20))
_SKEIN_KS_PARITY32 = np.uint32(0x1BD11BDA)
_THREEFRY4x32_ROUNDS = 20


def _u32(x):
    return jnp.asarray(x, np.uint32)


def _mulhilo(multiplier, x):
    """The low and high words of the 64-bit product ``multiplier * x``."""
    return jnp.multiply(multiplier, x), lax.mulhi(_u32(multiplier), x)


def philox2x32_hash(k0, x0, x1) -> tuple:
    """Philox-2x32-10 of the counter ``(x0, x1)`` keyed by ``k0`` (uint32 arrays that
    broadcast): two uint32 arrays."""
    k0, x0, x1 = map(_u32, (k0, x0, x1))
    for round_ in range(_PHILOX_ROUNDS):
        if round_:
            k0 = jnp.add(k0, _PHILOX_W32[0])
        lo, hi = _mulhilo(_PHILOX_M2x32, x0)
        x0, x1 = jnp.bitwise_xor(jnp.bitwise_xor(hi, x1), k0), lo
    return x0, x1


def philox4x32_hash(k0, k1, x0, x1, x2, x3) -> tuple:
    """Philox-4x32-10 of the counter ``(x0, x1, x2, x3)`` keyed by ``(k0, k1)``: four uint32
    arrays."""
    k0, k1, x0, x1, x2, x3 = map(_u32, (k0, k1, x0, x1, x2, x3))
    for round_ in range(_PHILOX_ROUNDS):
        if round_:
            k0, k1 = jnp.add(k0, _PHILOX_W32[0]), jnp.add(k1, _PHILOX_W32[1])
        lo0, hi0 = _mulhilo(_PHILOX_M4x32[0], x0)
        lo1, hi1 = _mulhilo(_PHILOX_M4x32[1], x2)
        x0, x1, x2, x3 = (jnp.bitwise_xor(jnp.bitwise_xor(hi1, x1), k0), lo1,
                          jnp.bitwise_xor(jnp.bitwise_xor(hi0, x3), k1), lo0)
    return x0, x1, x2, x3


def _rotate_left(x, distance: int):
    return jnp.bitwise_or(lax.shift_left(x, np.uint32(distance)),
                          lax.shift_right_logical(x, np.uint32(32 - distance)))


def _mix(a, b, distance: int) -> tuple:
    """One Threefry mix: ``a += b``, then ``b`` rotated and xor-ed with the new ``a``."""
    a = jnp.add(a, b)
    return a, jnp.bitwise_xor(a, _rotate_left(b, distance))


def threefry4x32_hash(k0, k1, k2, k3, x0, x1, x2, x3) -> tuple:
    """Threefry-4x32-20 of the counter ``(x0, x1, x2, x3)`` keyed by ``(k0, k1, k2, k3)``:
    four uint32 arrays."""
    k0, k1, k2, k3, x0, x1, x2, x3 = map(_u32, (k0, k1, k2, k3, x0, x1, x2, x3))
    parity = jnp.bitwise_xor(jnp.bitwise_xor(jnp.bitwise_xor(k0, k1), jnp.bitwise_xor(k2, k3)),
                             _SKEIN_KS_PARITY32)
    schedule = (k0, k1, k2, k3, parity)
    x = [jnp.add(x0, k0), jnp.add(x1, k1), jnp.add(x2, k2), jnp.add(x3, k3)]
    for round_ in range(_THREEFRY4x32_ROUNDS):
        first, second = _THREEFRY4x32_ROTATIONS[round_ % 8]
        if round_ % 2 == 0:     # mix (0, 1) and (2, 3)
            x[0], x[1] = _mix(x[0], x[1], first)
            x[2], x[3] = _mix(x[2], x[3], second)
        else:                   # mix (0, 3) and (2, 1): the 4-word permutation
            x[0], x[3] = _mix(x[0], x[3], first)
            x[2], x[1] = _mix(x[2], x[1], second)
        if round_ % 4 == 3:     # inject the key every 4 rounds
            injection = round_ // 4 + 1
            x = [jnp.add(word, schedule[(i + injection) % 5]) for i, word in enumerate(x)]
            x[3] = jnp.add(x[3], np.uint32(injection))
    return tuple(x)


# --- the implementations' operations -----------------------------------------------------------

class Random123Ops(NamedTuple):
    """A key implementation's operations on its ``uint32[W]`` key data (see the module's
    docstring); ``_keys`` compiles and calls them."""
    seed: Callable
    split: Callable
    fold_in: Callable
    bits: Callable


def _stack_words(words):
    """Output words as a key's data: stacked on a new last axis."""
    return jnp.stack(words, axis=-1)


def _bits_of_outputs(high, low, mixed, bit_width: int):
    """A ``bit_width``-bit value per element: ``high`` over ``low`` for 64 bits, else
    ``mixed`` (the xor of the output words), cut to its low bits."""
    dtype = np.dtype(f"uint{bit_width}")
    if bit_width == 64:
        return jnp.bitwise_or(jnp.left_shift(jnp.astype(high, dtype), dtype.type(32)),
                              jnp.astype(low, dtype))
    return mixed if bit_width == 32 else jnp.astype(mixed, dtype)


def _xor(*words):
    out = words[0]
    for word in words[1:]:
        out = jnp.bitwise_xor(out, word)
    return out


_ZERO = np.uint32(0)


# threefry4x32: the seed's words are the first two of the key, under the counter 0; split and
# fold_in count in the counter's last two words, bits in its first two
def _threefry4x32_seed(words):
    return _stack_words(threefry4x32_hash(words[0], words[1], _ZERO, _ZERO,
                                          _ZERO, _ZERO, _ZERO, _ZERO))


def _threefry4x32_split(data, high, low):
    return _stack_words(threefry4x32_hash(data[0], data[1], data[2], data[3],
                                          _ZERO, _ZERO, high, low))


def _threefry4x32_fold_in(data, msg):
    return _stack_words(threefry4x32_hash(data[0], data[1], data[2], data[3],
                                          _ZERO, _ZERO, _ZERO, _u32(msg)))


def _threefry4x32_bits(data, high, low, bit_width):
    out = threefry4x32_hash(data[0], data[1], data[2], data[3], high, low, _ZERO, _ZERO)
    return _bits_of_outputs(_xor(out[0], out[2]), _xor(out[1], out[3]), _xor(*out), bit_width)


# philox2x32: the seed's words are the counter under the key 0; its one-word keys are the
# first output word
def _philox2x32_seed(words):
    return _stack_words(philox2x32_hash(_ZERO, words[0], words[1])[:1])


def _philox2x32_split(data, high, low):
    return _stack_words(philox2x32_hash(data[0], high, low)[:1])


def _philox2x32_fold_in(data, msg):
    return _stack_words(philox2x32_hash(data[0], _ZERO, _u32(msg))[:1])


def _philox2x32_bits(data, high, low, bit_width):
    out = philox2x32_hash(data[0], high, low)
    return _bits_of_outputs(out[0], out[1], _xor(*out), bit_width)


# philox4x32: the seed's words are the counter's first two under the key (0, 0); keys are
# the first two output words; split and fold_in count in the counter's last two words, bits
# in its first two
def _philox4x32_seed(words):
    return _stack_words(philox4x32_hash(_ZERO, _ZERO, words[0], words[1], _ZERO, _ZERO)[:2])


def _philox4x32_split(data, high, low):
    return _stack_words(philox4x32_hash(data[0], data[1], _ZERO, _ZERO, high, low)[:2])


def _philox4x32_fold_in(data, msg):
    return _stack_words(philox4x32_hash(data[0], data[1], _ZERO, _ZERO, _ZERO, _u32(msg))[:2])


def _philox4x32_bits(data, high, low, bit_width):
    out = philox4x32_hash(data[0], data[1], high, low, _ZERO, _ZERO)
    return _bits_of_outputs(out[0], out[1], _xor(*out), bit_width)


OPS = {
    "threefry4x32": Random123Ops(_threefry4x32_seed, _threefry4x32_split,
                                 _threefry4x32_fold_in, _threefry4x32_bits),
    "philox2x32": Random123Ops(_philox2x32_seed, _philox2x32_split,
                               _philox2x32_fold_in, _philox2x32_bits),
    "philox4x32": Random123Ops(_philox4x32_seed, _philox4x32_split,
                               _philox4x32_fold_in, _philox4x32_bits),
}
