"""Typed PRNG key arrays: ``shardc.random.key`` returns one, as ``jax.random.key`` does.

A key array of shape ``S`` holds its key data, a ``uint32[*S, W]`` array (``W`` words per key:
2 for threefry2x32, 4 for rbg), concrete or traced. It indexes, reshapes and iterates over
``S`` like an array, prints like JAX's (``key<fry>``), and is a pytree node whose one child is
its data, so it passes through ``jit``, ``vmap``, ``shard_map``, ``scan`` and ``grad`` unchanged:
every transformation sees the data, and the key is rebuilt around what it returns.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from compiler import tree
from compiler.tracing import Tracer


@dataclasses.dataclass(frozen=True)
class PRNGImpl:
    """A key implementation: its name, its short tag (printed in the dtype) and the number of
    uint32 words of one key. ``str(impl)`` is its name, as JAX's ``key_impl`` gives."""
    name: str
    tag: str
    words: int

    def __str__(self):
        return self.name


IMPLS = {impl.name: impl for impl in (PRNGImpl("threefry2x32", "fry", 2),
                                      PRNGImpl("rbg", "rbg", 4),
                                      PRNGImpl("unsafe_rbg", "urbg", 4))}
DEFAULT_IMPL = IMPLS["threefry2x32"]


def resolve_impl(impl) -> PRNGImpl:
    """An implementation from None (the default), its name, or itself."""
    if impl is None:
        return DEFAULT_IMPL
    if isinstance(impl, PRNGImpl):
        return impl
    if isinstance(impl, str) and impl in IMPLS:
        return IMPLS[impl]
    raise ValueError(f"unrecognized PRNG implementation {impl!r}; expected one of "
                     f"{sorted(IMPLS)}")


@dataclasses.dataclass(frozen=True)
class KeyDtype:
    """The dtype of a key array: ``key<fry>`` for threefry2x32 keys."""
    impl: PRNGImpl

    @property
    def name(self) -> str:
        return f"key<{self.impl.tag}>"

    @property
    def itemsize(self) -> int:
        return 4 * self.impl.words

    def __str__(self):
        return self.name

    __repr__ = __str__


class PRNGKeyArray:
    """An array of typed PRNG keys. ``key_data(keys)`` is its ``uint32[..., W]`` data."""
    __array_priority__ = 1001

    def __init__(self, impl: PRNGImpl, data):
        self._impl = impl
        self._base = data

    # -- the array's view ------------------------------------------------------------------------

    @property
    def dtype(self) -> KeyDtype:
        return KeyDtype(self._impl)

    @property
    def shape(self) -> tuple:
        return tuple(self._base.shape[:-1])

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def sharding(self):
        return self._base.sharding

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d key array")
        return (self[k] for k in range(self.shape[0]))

    def __getitem__(self, index):
        index = index if isinstance(index, tuple) else (index,)
        if any(i is Ellipsis for i in index):
            # the key's own word axis stays whole: it is after everything the user indexes
            index = index + (slice(None),)
        return PRNGKeyArray(self._impl, self._base[index])

    def reshape(self, *shape, order="C"):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        shape = _resolve_shape(tuple(int(d) for d in shape), self.size)
        return PRNGKeyArray(self._impl, self._base.reshape(shape + (self._impl.words,)))

    def ravel(self):
        return self.reshape(-1)

    flatten = ravel

    def squeeze(self, axis=None):
        axes = range(self.ndim) if axis is None else \
            ((axis,) if isinstance(axis, int) else tuple(axis))
        axes = {a % self.ndim for a in axes}
        kept = tuple(d for k, d in enumerate(self.shape)
                     if not (k in axes and d == 1))
        if axis is not None and any(self.shape[a] != 1 for a in axes):
            raise ValueError(f"cannot select an axis to squeeze out which has size not equal "
                             f"to one, key array of shape {self.shape}")
        return self.reshape(kept)

    def transpose(self, *axes):
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        axes = tuple(range(self.ndim))[::-1] if not axes else tuple(a % self.ndim for a in axes)
        return PRNGKeyArray(self._impl, self._base.transpose(axes + (self.ndim,)))

    @property
    def T(self):
        return self.transpose()

    def __eq__(self, other):
        if not isinstance(other, PRNGKeyArray) or other._impl != self._impl:
            return NotImplemented
        return (self._base == other._base).all(axis=-1)

    def __ne__(self, other):
        if not isinstance(other, PRNGKeyArray) or other._impl != self._impl:
            return NotImplemented
        return (self._base != other._base).any(axis=-1)

    __hash__ = None

    def block_until_ready(self):
        return self

    def __repr__(self):
        if isinstance(self._base, Tracer):
            return f"Traced<key<{self._impl.tag}>[{','.join(map(str, self.shape))}]>"
        return (f"Array({self.shape}, dtype={self.dtype.name}) overlaying:\n"
                f"{np.asarray(self._base)}")

    __str__ = __repr__

    def __array__(self, dtype=None, copy=None):
        raise TypeError("JAX array with PRNGKey dtype cannot be converted to a NumPy array. "
                        "Use jax.random.key_data(arr) if you wish to extract the underlying "
                        "integer array.")


def _resolve_shape(shape: tuple, size: int) -> tuple:
    if shape.count(-1) > 1:
        raise ValueError("can only specify one unknown dimension")
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        if known == 0 or size % known:
            raise ValueError(f"cannot reshape a key array of size {size} into shape {shape}")
        shape = tuple(size // known if d == -1 else d for d in shape)
    if math.prod(shape) != size:
        raise ValueError(f"cannot reshape a key array of size {size} into shape {shape}")
    return shape


def _flatten_keys(keys: PRNGKeyArray):
    return (keys._base,), keys._impl


def _unflatten_keys(impl: PRNGImpl, children):
    return PRNGKeyArray(impl, children[0])


tree.register_pytree_node(PRNGKeyArray, _flatten_keys, _unflatten_keys)
