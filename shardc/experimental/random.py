"""``shardc.experimental.random`` (``jax.experimental.random``): a stateful generator over
JAX's functional keys, in the manner of ``numpy.random.default_rng``.

A ``StatefulPRNG`` holds a base key and a Ref counting the keys it has handed out. Each draw
folds the counter into the base key and adds one to the counter, so successive draws differ
without the caller threading keys, eagerly, under ``jit`` (the Ref is an input the call
writes back) and in ``scan`` bodies (the Ref becomes a carry of the loop). ``split`` gives one
generator of many keys and counters, to be mapped over by ``vmap``; ``spawn`` a list of
independent generators.

    >>> rng = stateful_rng(42)
    >>> rng.uniform()
    Array(0.5302608, dtype=float32)
    >>> rng.uniform()
    Array(0.72766423, dtype=float32)
"""
from __future__ import annotations

import dataclasses
import operator

import numpy as np

from compiler.tracing import Tracer, current_trace, eval_trace, values_known_now
from runtime.array import Array
import shardc.numpy as jnp
from shardc import random
from shardc.ref import Ref, addupdate, get, new_ref
from shardc.tree_util import register_dataclass

__all__ = ["StatefulPRNG", "stateful_rng"]


def _size_shape(size, *args) -> tuple:
    """The shape a draw of ``size`` takes: ``size`` itself (an int is one dimension), or, when
    it is None, the broadcast shape of the distribution's parameters ``args``."""
    if size is None:
        return np.broadcast_shapes(*(np.shape(arg) for arg in args))
    if isinstance(size, (int, np.integer)):
        return (operator.index(size),)
    return tuple(operator.index(d) for d in size)


def _is_counter(value) -> bool:
    """A Ref, as JAX asks; an array is let through too, as vmap rebuilds its arguments with
    the value each Ref holds in the Ref's place to read their structure."""
    return isinstance(value, (Ref, Array, Tracer))


@register_dataclass
@dataclasses.dataclass(frozen=True, slots=True)
class StatefulPRNG:
    """A random generator whose state is updated in place by every draw; make one with
    ``stateful_rng``.

    Fields: ``_base_key``, a typed key array (``random.key``); ``_counter``, a Ref of
    integers of the key array's shape, how many keys each generator has handed out. Both are
    pytree children, so a generator passes to ``jit`` and ``vmap`` as its key and its Ref.

        >>> rng = stateful_rng(0)
        >>> rng.key()
        Array((), dtype=key<fry>) overlaying:
        [1797259609 2579123966]
    """
    _base_key: random.PRNGKeyArray
    _counter: Ref

    def __post_init__(self):
        if not isinstance(self._base_key, random.PRNGKeyArray):   # a typed key array
            raise ValueError(f"Expected base_key to be a typed PRNG key; got {self._base_key}")
        if not _is_counter(self._counter):
            raise ValueError(f"Expected counter to be a scalar integer ref; got {self._counter}")

    def key(self, shape=()):
        """A fresh key (or a key array of ``shape``), counting one draw.

        Args:
          shape: the shape of the keys returned: an int or a sequence of ints; ``()`` gives
            one key.

        Returns:
          A key array of the base key's implementation: the counter folded into the base key,
          split into ``shape`` when it is not ``()``.

            >>> rng = stateful_rng(0)
            >>> rng.key(2).shape
            (2,)
        """
        if self._base_key.shape:
            raise ValueError("cannot operate on split stateful generator")
        drawn = random.fold_in(self._base_key, get(self._counter, ...))
        addupdate(self._counter, ..., 1)
        shape = _size_shape(shape)
        return random.split(drawn, shape) if shape else drawn

    def random(self, size=None, dtype=float):
        """Floats uniform in ``[0, 1)`` of shape ``size`` (``()`` when None).

            >>> stateful_rng(42).random()
            Array(0.5302608, dtype=float32)
        """
        return random.uniform(self.key(), shape=_size_shape(size), dtype=dtype)

    def uniform(self, low=0, high=1, size=None, *, dtype=float):
        """Floats uniform in ``[low, high)``; the shape is ``size``, or the broadcast shape of
        ``low`` and ``high`` when ``size`` is None.

            >>> stateful_rng(42).uniform(2.0, 3.0)
            Array(2.5302608, dtype=float32)
        """
        return random.uniform(self.key(), _size_shape(size, low, high), minval=low,
                              maxval=high, dtype=dtype)

    def normal(self, loc=0, scale=1, size=None, *, dtype=float):
        """Normal values of mean ``loc`` and standard deviation ``scale``; the shape is
        ``size``, or the broadcast shape of ``loc`` and ``scale`` when it is None.

            >>> stateful_rng(0).normal(size=3).shape
            (3,)
        """
        standard = random.normal(self.key(), _size_shape(size, loc, scale), dtype)
        return (jnp.asarray(loc) + jnp.asarray(scale) * standard).astype(dtype)

    def integers(self, low, high=None, size=None, *, dtype=int):
        """Integers in ``[low, high)`` (``[0, low)`` when ``high`` is None); the shape is
        ``size``, or the broadcast shape of ``low`` and ``high`` when it is None.

            >>> stateful_rng(123).integers(0, 10, 2)
            Array([3, 4], dtype=int32)
        """
        if high is None:
            low, high = 0, low
        return random.randint(self.key(), _size_shape(size, low, high), minval=low,
                              maxval=high, dtype=dtype)

    def split(self, num) -> StatefulPRNG:
        """One generator holding a key array of shape ``num`` and a counter per key, for
        ``vmap`` to map over (each member draws as a generator of its own). Counts one draw.

            >>> import shardc as jax
            >>> rng = stateful_rng(123)
            >>> jax.vmap(lambda r, x: x + r.uniform())(rng.split(3), jnp.zeros(3))
            Array([0.35525954, 0.21937883, 0.5336956 ], dtype=float32)
        """
        return StatefulPRNG(self.key(num), new_ref(jnp.zeros(num, dtype=int)))

    def spawn(self, n_children: int) -> list:
        """A list of ``n_children`` independent generators. Counts one draw.

            >>> [r.integers(0, 10, 2) for r in stateful_rng(123).spawn(2)]
            [Array([4, 5], dtype=int32), Array([2, 1], dtype=int32)]
        """
        return [type(self)(child, new_ref(0)) for child in self.key(n_children)]


def stateful_rng(seed=None, *, impl=None) -> StatefulPRNG:
    """A ``StatefulPRNG`` seeded with ``seed``.

    Args:
      seed: an integer (32 or 64 bits) the base key is made from (``random.key(seed)``). When
        None, the generator is seeded from the operating system's entropy, as
        ``numpy.random.default_rng()``; that is refused inside a transformation.
      impl: the key implementation, as ``random.key`` takes it (``'threefry2x32'`` ...).

    Returns:
      A generator whose counter starts at 0. It may be an argument of a jitted or vmapped
      function, or closed over by one, but not a result of one, nor a carry of a loop.

        >>> rng = stateful_rng(42)
        >>> rng.uniform(size=2).shape
        (2,)
    """
    if seed is None:
        if not (current_trace() is eval_trace and values_known_now()):   # not top level
            raise TypeError("When used within transformed code, "
                            "jax.experimental.random.stateful_rng() requires an explicit seed "
                            "to be set.")
        entropy = np.random.SeedSequence().entropy
        seed = np.int64(entropy & np.iinfo(np.int64).max)
    return StatefulPRNG(random.key(seed, impl=impl), new_ref(0))
