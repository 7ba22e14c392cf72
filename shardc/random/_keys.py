"""Keys: typed PRNG key arrays (``shardc.random.key`` returns one, as ``jax.random.key``
does), raw key data (``PRNGKey``), and the functions that make, split and fold them.

A key array of shape ``S`` holds its key data, a ``uint32[*S, W]`` array (``W`` words per key:
2 for threefry2x32, 4 for rbg and threefry4x32, 1 for philox2x32, 2 for philox4x32), concrete
or traced. It indexes, reshapes and iterates over ``S`` like an array, prints like JAX's
(``key<fry>``), and is a pytree node whose one child is its data, so it passes through ``jit``,
``vmap``, ``shard_map``, ``scan`` and ``grad`` unchanged: every transformation sees the data,
and the key is rebuilt around what it returns.

A threefry key's bits, splits and folds are JAX's: the Threefry-2x32 hash of each element's
index keyed by the key. A 4-word (rbg) key splits and folds as JAX's does (each half as a
threefry key); its bits are the threefry bits of its two halves xor-ed, where JAX's come from
XLA's RngBitGenerator. JAX's newer implementations (threefry4x32, philox2x32, philox4x32)
seed, split, fold and draw by their own hashes (``_random123``), JAX's bits too.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import operator
import warnings

import numpy as np

from compiler import tree
from compiler.custom_ad import CustomVJPPrimal, SymbolicZero
from compiler.jit import jit as _jit
from compiler.tracing import Tracer, bind
from ir import dtypes as _dt
from ir import primitives as p
from ir.core import Aval, TypeSharding
from ir.float0 import float0_zeros
from ir.shape_dtype import ShapeDtypeStruct
from ir.sharding import NamedSharding
from runtime.array import Array as _Array
import shardc.numpy as jnp
import shardc.lax as lax
from shardc.config import config
from shardc.dtypes import prng_key
from shardc.numpy._core import KEY_ARRAY_RULES, canonical_axis, takes_out_sharding
from shardc.numpy._indexing import getitem
from shardc.random._random123 import OPS as RANDOM123_OPS, Random123Ops

__all__ = [
    "PRNGImpl", "IMPLS", "resolve_impl", "KeyDtype", "PRNGKeyArray", "PRNGKey", "key", "key_data",
    "wrap_key_data", "key_impl", "clone", "split", "fold_in", "bits",
]


@dataclasses.dataclass(frozen=True, eq=False)
class PRNGImpl:
    """A key implementation: its name, its short tag (printed in the dtype) and the number of
    uint32 words of one key. It stands for its name, as what JAX's ``key_impl`` gives for a
    built-in implementation does: ``str()`` and ``repr()`` give it, and it equals it.
    ``ops`` are the seed, split, fold_in and bits of JAX's newer implementations
    (``_random123``); None for threefry2x32 and rbg, whose are this module's."""
    name: str
    tag: str
    words: int
    ops: Random123Ops | None = None

    @property
    def key_shape(self) -> tuple:
        """The shape of one key's data: ``(words,)``."""
        return (self.words,)

    def __eq__(self, other):
        if isinstance(other, PRNGImpl):
            return self.name == other.name
        if isinstance(other, str):
            return self.name == other
        return NotImplemented

    def __hash__(self):
        return hash(self.name)

    def __str__(self):
        return self.name

    def __repr__(self):
        return repr(self.name)


# in JAX 0.10.2's order of registration (its error for an unknown name lists them so)
IMPLS = {impl.name: impl for impl in (
    PRNGImpl("philox2x32", "phx2", 1, RANDOM123_OPS["philox2x32"]),
    PRNGImpl("philox4x32", "phx4", 2, RANDOM123_OPS["philox4x32"]),
    PRNGImpl("threefry2x32", "fry", 2),
    PRNGImpl("rbg", "rbg", 4),
    PRNGImpl("unsafe_rbg", "urbg", 4),
    PRNGImpl("threefry4x32", "fry4", 4, RANDOM123_OPS["threefry4x32"]))}


def resolve_impl(impl) -> PRNGImpl:
    """An implementation from None (the default: ``jax_default_prng_impl``), its name, its key
    dtype, or itself."""
    if impl is None:
        return IMPLS[config.read("jax_default_prng_impl")]
    if isinstance(impl, PRNGImpl):
        return impl
    if isinstance(impl, KeyDtype):
        return impl.impl
    if isinstance(impl, str):
        if impl in IMPLS:
            return IMPLS[impl]
        names = ", ".join(f'"{name}"' for name in IMPLS)
        raise ValueError(f'unrecognized PRNG implementation "{impl}". Did you mean one of: '
                         f"{names}?")
    raise TypeError(f"unrecognized type {type(impl)} for specifying PRNG implementation.")


def _impl_or_dtype(impl, dtype, function: str) -> PRNGImpl:
    """The implementation ``impl`` or ``dtype`` names (JAX's ValueError when both do)."""
    if dtype is not None:
        if impl is not None:
            raise ValueError("Cannot specify both `impl` and `dtype` arguments to "
                             f"jax.random.{function}")
        impl = dtype
    return resolve_impl(impl)


def key_dtype(impl_spec=None) -> "KeyDtype":
    """The dtype of keys of an implementation (None: the default): ``key<fry>``."""
    return KeyDtype(resolve_impl(impl_spec))


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

    @property
    def type(self):
        """JAX's abstract scalar type of key dtypes."""
        return prng_key

    def __str__(self):
        return self.name

    __repr__ = __str__

    def stand_in(self, struct: ShapeDtypeStruct) -> "PRNGKeyArray":
        """What a ``ShapeDtypeStruct`` of this dtype traces as: keys over the stand-in of their
        ``uint32`` data (one more dimension, of the key's words, never split)."""
        shape = struct.shape + (self.impl.words,)
        return PRNGKeyArray(self.impl, ShapeDtypeStruct(
            shape, np.uint32, _data_sharding(struct.sharding, len(shape))))


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
        """JAX's logical sharding of the keys: their data's, its spec without the entry of
        the trailing dimension of key words (which is never split)."""
        return _keys_sharding(self._base.sharding, self._base.ndim)

    # where the keys live: their data's devices
    @property
    def committed(self) -> bool:
        return getattr(self._base, "committed", False)

    @property
    def device(self):
        return self._base.device

    def devices(self) -> set:
        return self._base.devices()

    @property
    def is_fully_addressable(self) -> bool:
        return self._base.is_fully_addressable

    @property
    def is_fully_replicated(self) -> bool:
        return self._base.is_fully_replicated

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d key array")
        # the keys of the data's rows, as its iteration gives them (JAX's): an array over
        # several devices gives rows on one device each
        return (PRNGKeyArray(self._impl, row) for row in self._base)

    def __getitem__(self, index):
        index = index if isinstance(index, tuple) else (index,)
        consumed = sum(np.ndim(i) if getattr(i, "dtype", None) == np.bool_ else 1
                       for i in index if i is not None and i is not Ellipsis
                       and not isinstance(i, (bool, np.bool_)))
        if consumed > self.ndim:
            # the words' axis is not the user's to index (JAX's message)
            raise IndexError(f"Too many indices: array is {self.ndim}-dimensional, but "
                             f"{consumed} were indexed")
        if any(i is Ellipsis for i in index):
            # the key's own word axis stays whole: it is after everything the user indexes
            index = index + (slice(None),)
        # the data indexed as JAX indexes key arrays: by its slice paths (a split kept where
        # the slice divides it), never the gather of an eager array over several devices
        return PRNGKeyArray(self._impl, getitem(self._base, index, sliced=True))

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

    def swapaxes(self, axis1, axis2):
        axes = list(range(self.ndim))
        a, b = canonical_axis(axis1, self.ndim), canonical_axis(axis2, self.ndim)
        axes[a], axes[b] = axes[b], axes[a]
        return self.transpose(tuple(axes))

    def take(self, indices, axis=None, out=None, mode=None, unique_indices=False,
             indices_are_sorted=False, fill_value=None):
        return jnp.take(self, indices, axis=axis, out=out, mode=mode, fill_value=fill_value)

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

    # -- the array's storage: its data's ----------------------------------------------------

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def _base_array(self):
        return self._base

    def copy(self):
        """Another key array with a copy of these keys' data."""
        return PRNGKeyArray(self._impl, jnp.array(self._base))

    __copy__ = copy

    def __deepcopy__(self, memo):
        return self.copy()

    def delete(self) -> None:
        self._base.delete()

    def is_deleted(self) -> bool:
        return self._base.is_deleted()

    def copy_to_host_async(self) -> None:
        self._base.copy_to_host_async()

    def on_device_size_in_bytes(self) -> int:
        return self._base.on_device_size_in_bytes()

    def unsafe_buffer_pointer(self) -> int:
        return self._base.unsafe_buffer_pointer()

    def addressable_data(self, index: int) -> "PRNGKeyArray":
        return PRNGKeyArray(self._impl, self._base.addressable_data(index))

    @property
    def addressable_shards(self) -> list:
        """The data's shards, each holding keys (its index the data's, the words' axis
        whole: JAX's)."""
        return [_KeyShard(s, self._impl) for s in self._base.addressable_shards]

    @property
    def global_shards(self) -> list:
        return [_KeyShard(s, self._impl) for s in self._base.global_shards]

    @property
    def at(self):
        """``keys.at[index]``: ``get`` and ``set`` (keys only move: no arithmetic update)."""
        return _KeyIndexer(self)

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


# the array methods key arrays lack: as JAX's, each is the abstract method of jax.Array
_ABSTRACT_METHODS = (
    "all", "any", "argmax", "argmin", "argpartition", "argsort", "astype", "byteswap",
    "choose", "clip", "compress", "conj", "conjugate", "cumprod", "cumsum", "diagonal", "dot",
    "item", "max", "mean", "min", "nonzero", "prod", "ptp", "repeat", "round", "searchsorted",
    "sort", "std", "sum", "to_device", "tobytes", "tolist", "trace", "var", "view")
_ABSTRACT_PROPERTIES = ("flat", "imag", "mT", "real")


def _abstract(name: str):
    def method(self, *args, **kwargs):
        raise NotImplementedError(f"Cannot call abstract method {name}")
    method.__name__ = name
    return method


for _name in _ABSTRACT_METHODS:
    setattr(PRNGKeyArray, _name, _abstract(_name))
for _name in _ABSTRACT_PROPERTIES:
    setattr(PRNGKeyArray, _name, property(_abstract(_name)))


class _KeyShard:
    """A shard of a key array: its data's shard, whose ``data`` is keys."""
    __slots__ = ("_shard", "_impl")

    def __init__(self, shard, impl):
        self._shard, self._impl = shard, impl

    device = property(lambda self: self._shard.device)
    index = property(lambda self: self._shard.index)
    replica_id = property(lambda self: self._shard.replica_id)
    data = property(lambda self: PRNGKeyArray(self._impl, self._shard.data))

    def __repr__(self) -> str:
        return (f"Shard(device={self.device!r}, index={self.index}, "
                f"replica_id={self.replica_id}, data={self.data})")


def _data_index(index) -> tuple:
    """An index into key arrays as an index into their data: the word axis stays whole."""
    index = index if isinstance(index, tuple) else (index,)
    return index + (slice(None),) if any(i is Ellipsis for i in index) else index


class _KeyIndexer:
    def __init__(self, keys: PRNGKeyArray):
        self._keys = keys

    def __getitem__(self, index):
        return _KeyIndexedRef(self._keys, index)


class _KeyIndexedRef:
    """``keys.at[index]``: a gather or a scatter of whole keys, run on their data. Out of
    range under ``mode='fill'``, a key's words are all ``2**32 - 1``, as JAX fills them."""

    def __init__(self, keys: PRNGKeyArray, index):
        self._keys, self._index = keys, _data_index(index)

    def get(self, *, indices_are_sorted=False, unique_indices=False, mode=None,
            fill_value=None, out_sharding=None, wrap_negative_indices=True):
        if fill_value is not None:
            raise NotImplementedError("keys.at[...].get: a fill_value for key arrays")
        if mode == "fill":
            fill_value = np.uint32(0xFFFFFFFF)
        data = self._keys._base.at[self._index].get(
            mode=mode, fill_value=fill_value, out_sharding=out_sharding,
            wrap_negative_indices=wrap_negative_indices)
        return PRNGKeyArray(self._keys._impl, data)

    def set(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None,
            out_sharding=None, wrap_negative_indices=True):
        impl = _common_impl((self._keys, values), "at[...].set")
        data = self._keys._base.at[self._index].set(
            values._base, mode=mode, out_sharding=out_sharding,
            wrap_negative_indices=wrap_negative_indices)
        return PRNGKeyArray(impl, data)

    def _no_arithmetic(self, *args, **kwargs):
        raise TypeError(f"scatter does not accept dtype {self._keys.dtype}: keys can only be "
                        "set")

    add = multiply = mul = divide = power = min = max = apply = _no_arithmetic


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
    (data,) = children
    if isinstance(data, CustomVJPPrimal):
        # a symbolic-zeros fwd rule's argument: the keys are the one primal, as in JAX
        return CustomVJPPrimal(PRNGKeyArray(impl, data.value), data.perturbed)
    if isinstance(data, SymbolicZero):
        # a zero tangent or cotangent given to a symbolic-zeros rule: of the keys' own shape
        return SymbolicZero(data.aval.update(shape=data.shape[:-1]))
    if isinstance(data, ShapeDtypeStruct):
        # keys' abstract value (eval_shape, out_info): a struct of the key dtype, as JAX's
        return ShapeDtypeStruct(data.shape[:-1], KeyDtype(impl),
                                _keys_sharding(data.sharding, data.ndim),
                                manual_axis_type=data.manual_axis_type)
    if _dt.is_float0(data):
        # a key array's cotangent (grad with allow_int, vjp): float0 zeros of the keys' own
        # shape, as JAX's, not keys over float0 words
        typed = getattr(data, "_float0_aval", None)
        typed = None if typed is None else typed.type_sharding
        if typed is not None:
            typed = TypeSharding.of(typed.mesh, tuple(typed.spec)[:-1])
        return float0_zeros(Aval(data.shape[:-1], _dt.FLOAT0, type_sharding=typed))
    return PRNGKeyArray(impl, data)


tree.register_pytree_node(PRNGKeyArray, _flatten_keys, _unflatten_keys)


# A key array is a jax.Array to isinstance, as in JAX.
_Array.register(PRNGKeyArray)


# --- making, splitting and folding keys ------------------------------------------------------

def PRNGKey(seed, *, impl=None) -> "jnp.ndarray":
    """The raw key data for an integer seed: ``uint32[W]`` (``uint32[2]`` for threefry2x32
    keys, ``uint32[4]`` for rbg keys); a typed key with ``jax_enable_custom_prng`` on, as JAX's."""
    impl = resolve_impl(impl)
    data = _seed_data(seed, impl, "PRNGKey")
    return PRNGKeyArray(impl, data) if config.read("jax_enable_custom_prng") else data


def key(seed, *, impl=None, dtype=None) -> PRNGKeyArray:
    """A typed key (shape ``()``, dtype ``key<fry>``) from an integer seed; ``impl`` or
    ``dtype`` (a key dtype or an implementation's name) chooses the implementation.

    >>> k1, k2 = random.split(random.key(0))
    """
    impl = _impl_or_dtype(impl, dtype, "key")
    return PRNGKeyArray(impl, _seed_data(seed, impl, "key"))


def _seed_data(seed, impl: PRNGImpl, ctor: str):
    """As JAX's: the seed's low 32 bits fill the low word; the high word holds its next 32
    bits with x64 on, and is 0 with it off (JAX takes the seed as a 32-bit integer then).
    rbg keys repeat the two words; JAX's newer implementations hash them (their ``seed``).
    ``ctor`` (key or PRNGKey) is named in JAX's errors."""
    if isinstance(seed, PRNGKeyArray):
        raise TypeError(f"{ctor} accepts a scalar seed, but was given a PRNG key.")
    if np.ndim(seed):
        raise TypeError(f"{ctor} accepts a scalar seed, but was given an array of shape "
                        f"{np.shape(seed)} != (). Use jax.vmap for batching")
    if isinstance(seed, float) or (hasattr(seed, "dtype") and not isinstance(seed, int)
                                   and not _dt.is_int(seed.dtype)):
        raise TypeError(f"PRNG key seed must be an integer; got {seed!r}")
    if isinstance(seed, Tracer) or (hasattr(seed, "dtype") and not isinstance(seed, int)):
        # in a jitted function, as JAX seeds: its constants are the program's, so a seed on
        # the devices makes a key with no transfer from the host
        offset = config.read("jax_random_seed_offset")
        words = _seed_words(jnp.asarray(seed) + offset if offset else jnp.asarray(seed))
    else:
        seed = int(seed) + config.read("jax_random_seed_offset")
        if not -2 ** 63 <= seed < 2 ** 63:
            raise OverflowError(f"Python int {seed} too large to convert to int64")
        high = (seed >> 32) & 0xFFFFFFFF if _dt.x64_enabled() else 0
        words = jnp.asarray(np.array([high, seed & 0xFFFFFFFF], np.uint32))
    if impl.ops is not None:
        return compiled(impl.ops.seed)(words)
    return words if impl.words == 2 else jnp.concatenate([words, words])


@_jit
def _seed_words(seed):
    """An array seed's two words: its high 32 bits (0 for a 32-bit seed), then its low."""
    low = jnp.astype(seed, np.uint32)
    high = jnp.astype(lax.shift_right_logical(seed, seed.dtype.type(32)), np.uint32) \
        if seed.dtype.itemsize == 8 else jnp.zeros((), np.uint32)
    return jnp.stack([high, low])


# --- array functions on key arrays: their data moved, the word axis kept last ---------------

def _common_impl(values, what: str) -> PRNGImpl:
    impls = {v._impl for v in values if isinstance(v, PRNGKeyArray)}
    if len(impls) != 1 or not all(isinstance(v, PRNGKeyArray) for v in values):
        raise TypeError(f"{what}: key arrays can only be combined with key arrays of the same "
                        "implementation")
    return impls.pop()


def _where_keys(condition, x, y):
    impl = _common_impl((x, y), "where")
    condition = jnp.expand_dims(jnp.asarray(condition), -1)
    return PRNGKeyArray(impl, jnp.where(condition, x._base, y._base))


def _concatenate_keys(arrays, axis):
    impl = _common_impl(arrays, "concatenate")
    if axis is None:
        return _concatenate_keys([a.ravel() for a in arrays], 0)
    axis = axis % arrays[0].ndim if arrays[0].ndim else axis
    return PRNGKeyArray(impl, jnp.concatenate([a._base for a in arrays], axis))


def _stack_keys(arrays, axis):
    impl = _common_impl(arrays, "stack")
    axis = axis % (arrays[0].ndim + 1)
    return PRNGKeyArray(impl, jnp.stack([a._base for a in arrays], axis))


def _take_keys(keys, indices, axis, mode, fill_value=None):
    """jnp.take of keys: whole keys taken; out of bounds (the default mode, 'fill'), a key
    whose words are the fill, by default all ones (JAX's)."""
    if axis is None:
        keys, axis = keys.ravel(), 0
    axis = axis % keys.ndim
    return PRNGKeyArray(keys._impl, jnp.take(keys._base, indices, axis=axis, mode=mode,
                                             fill_value=fill_value))


def _take_along_axis_keys(keys, indices, axis, take):
    """jnp.take_along_axis of keys (``take``: it, on their data): each index picks a whole
    key, the index broadcast over the key's words."""
    if axis is None:
        keys, axis = keys.ravel(), 0
    axis = canonical_axis(axis, keys.ndim)
    return PRNGKeyArray(keys._impl, take(keys._base, jnp.expand_dims(jnp.asarray(indices), -1),
                                         axis))


def _moved_keys(keys, move):
    """A function that only moves elements, or puts zeros in places (``move``: it, on an
    array), on keys: it moves each key's number (1, 2, ...) and the keys follow; a zero
    becomes a key whose words are zeros (JAX's ``zeros_like`` of keys)."""
    n = keys.size
    numbers = move(jnp.arange(1, n + 1, dtype=np.int32).reshape(keys.shape))
    rows = keys._base.reshape(n, keys._impl.words)
    # (0 - 1) % (n + 1) is n: past the end, so the zero-filled row
    return PRNGKeyArray(keys._impl, jnp.take(rows, (numbers - 1) % (n + 1), axis=0,
                                             mode="fill", fill_value=0))


def _array_equal_keys(a, b, equal_nan=False):
    """Whether two key arrays hold the same keys (of one implementation)."""
    if not (isinstance(a, PRNGKeyArray) and isinstance(b, PRNGKeyArray)) \
            or a._impl != b._impl or a.shape != b.shape:
        return jnp.asarray(False)
    return jnp.array_equal(a._base, b._base)


def _broadcast_keys(keys, shape):
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return PRNGKeyArray(keys._impl, jnp.broadcast_to(keys._base, shape + (keys._impl.words,)))


def _reshape_keys(keys, shape):
    return keys.reshape(shape)


def _expand_dims_keys(keys, axis):
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    ndim = keys.ndim + len(axes)
    axes = tuple(canonical_axis(a, ndim) for a in axes)
    return PRNGKeyArray(keys._impl, jnp.expand_dims(keys._base, axes))


def _broadcast_arrays_keys(*args):
    shape = jnp.broadcast_shapes(*[jnp.shape(a) if not isinstance(a, PRNGKeyArray) else a.shape
                                   for a in args])
    return [_broadcast_keys(a, shape) if isinstance(a, PRNGKeyArray)
            else jnp.broadcast_to(a, shape) for a in args]


def _tile_keys(keys, reps):
    reps = (int(reps),) if isinstance(reps, (int, np.integer)) else tuple(int(r) for r in reps)
    ndim = max(keys.ndim, len(reps))
    keys = keys.reshape((1,) * (ndim - keys.ndim) + keys.shape)
    reps = (1,) * (ndim - len(reps)) + reps
    return PRNGKeyArray(keys._impl, jnp.tile(keys._base, reps + (1,)))


def _full_keys(shape, fill_value, dtype):
    """``jnp.full`` of keys: a key fill broadcast, or an integer fill written into every word
    of every key's data (JAX's: ``jnp.zeros(s, key_dtype)``'s data is zeros)."""
    shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if isinstance(fill_value, PRNGKeyArray):
        if dtype is not None and resolve_impl(dtype) != fill_value._impl:
            raise TypeError(f"full: a fill of dtype {fill_value.dtype} cannot make keys of "
                            f"dtype {dtype}")
        return _broadcast_keys(fill_value, shape)
    if not isinstance(dtype, KeyDtype):
        raise TypeError(f"full: keys cannot fill an array of dtype {dtype}")
    words = dtype.impl.words
    return PRNGKeyArray(dtype.impl, jnp.full(shape + (words,), fill_value, np.uint32))


def _full_like_keys(x, fill_value, dtype, shape):
    if dtype is None:
        dtype = x.dtype if isinstance(x, PRNGKeyArray) else jnp.result_type(x)
    if shape is None:
        shape = jnp.shape(x) if not isinstance(x, PRNGKeyArray) else x.shape
    if not isinstance(dtype, KeyDtype) and not isinstance(fill_value, PRNGKeyArray):
        return jnp.full(shape, fill_value, dtype)
    return _full_keys(shape, fill_value, dtype)


def _rev_keys(keys, dimensions):
    return PRNGKeyArray(keys._impl, lax.rev(keys._base, tuple(dimensions)))


def _broadcast_in_dim_keys(keys, shape, broadcast_dimensions):
    """lax.broadcast_in_dim of keys: the words' axis kept last."""
    shape = tuple(shape)
    return PRNGKeyArray(keys._impl, lax.broadcast_in_dim(
        keys._base, shape + (keys._impl.words,), tuple(broadcast_dimensions) + (len(shape),)))


def _select_n_keys(which, *cases):
    """lax.select_n of keys: ``which`` picks whole keys (it broadcasts over their words)."""
    impl = _common_impl(cases, "select_n")
    which = jnp.asarray(which)
    if which.ndim:
        which = jnp.broadcast_to(jnp.expand_dims(which, -1), cases[0]._base.shape)
    return PRNGKeyArray(impl, lax.select_n(which, *[c._base for c in cases]))


def _repeat_keys(keys, repeats, axis, total_repeat_length):
    """jnp.repeat of keys along a key dimension (of all keys flattened when ``axis`` is None)."""
    if axis is None:
        keys, axis = keys.reshape(-1), 0
    axis = canonical_axis(axis, keys.ndim)
    return PRNGKeyArray(keys._impl, jnp.repeat(keys._base, repeats, axis,
                                               total_repeat_length=total_repeat_length))


def _roll_keys(keys, shift, axis):
    """jnp.roll of keys: along key dimensions (of all keys flattened when ``axis`` is None),
    their words kept together."""
    if axis is None:
        return _roll_keys(keys.reshape(-1), shift, 0).reshape(keys.shape)
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    axes = tuple(canonical_axis(a, keys.ndim) for a in axes)
    return PRNGKeyArray(keys._impl, jnp.roll(keys._base, shift, axes))


def _asarray_keys(keys, dtype, copy):
    if isinstance(keys, (list, tuple)):          # jnp.array([k1, k2]): the keys stacked
        keys = _stack_keys(keys, 0)
    if dtype is not None and (not isinstance(dtype, KeyDtype) or dtype.impl != keys._impl):
        raise TypeError(f"Cannot convert an array of dtype {keys.dtype} to dtype {dtype}; use "
                        "jax.random.key_data to read its data")
    return keys.copy() if copy else keys


def _result_type_keys(*args):
    dtypes = {a if isinstance(a, KeyDtype) else getattr(a, "dtype", None) for a in args}
    if len(dtypes) != 1:
        raise TypeError("result_type: key dtypes do not promote with "
                        + ", ".join(sorted(str(d) for d in dtypes)))
    return dtypes.pop()


def _slice_keys(keys, start_indices, limit_indices, strides):
    strides = None if strides is None else tuple(strides) + (1,)
    return PRNGKeyArray(keys._impl, lax.slice(keys._base, tuple(start_indices) + (0,),
                                              tuple(limit_indices) + (keys._impl.words,),
                                              strides))


def _dynamic_slice_keys(keys, start_indices, slice_sizes):
    return PRNGKeyArray(keys._impl, lax.dynamic_slice(
        keys._base, list(start_indices) + [0], tuple(slice_sizes) + (keys._impl.words,)))


def _dynamic_update_slice_keys(keys, update, start_indices):
    impl = _common_impl((keys, update), "dynamic_update_slice")
    return PRNGKeyArray(impl, lax.dynamic_update_slice(keys._base, update._base,
                                                       list(start_indices) + [0]))


KEY_ARRAY_RULES.update(where=_where_keys, concatenate=_concatenate_keys, stack=_stack_keys,
                       take=_take_keys, broadcast_to=_broadcast_keys, reshape=_reshape_keys,
                       expand_dims=_expand_dims_keys, broadcast_arrays=_broadcast_arrays_keys,
                       tile=_tile_keys, full=_full_keys, full_like=_full_like_keys,
                       asarray=_asarray_keys, result_type=_result_type_keys, slice=_slice_keys,
                       dynamic_slice=_dynamic_slice_keys,
                       dynamic_update_slice=_dynamic_update_slice_keys, rev=_rev_keys,
                       roll=_roll_keys, broadcast_in_dim=_broadcast_in_dim_keys,
                       select_n=_select_n_keys, repeat=_repeat_keys,
                       take_along_axis=_take_along_axis_keys, moved=_moved_keys,
                       array_equal=_array_equal_keys)


def key_data(keys):
    """The ``uint32[..., W]`` data of a key array (raw key data is returned as it is, where
    ``jax_legacy_prng_key`` allows it)."""
    if not isinstance(keys, PRNGKeyArray):
        return _raw_key_data(keys)
    data = keys._base
    sharding = getattr(data, "sharding", None)
    if isinstance(data, _Array) and not isinstance(data, Tracer) \
            and isinstance(sharding, NamedSharding) \
            and len(sharding.spec) < data.ndim:
        # spelt as JAX spells the data of keys: the keys' spec and the words' dimension
        return data.respelled(_data_sharding(sharding, data.ndim))
    return data


def _data_sharding(sharding, ndim: int):
    """A sharding of key data (``ndim`` dimensions, the words' last) spelt with one entry
    per dimension, the words' unsplit."""
    if not isinstance(sharding, NamedSharding):
        return sharding
    entries = tuple(sharding.spec) + (None,) * (ndim - len(sharding.spec))
    return sharding.with_spec(sharding.spec.update(partitions=entries))


def _keys_sharding(sharding, ndim: int):
    """The keys' sharding from their data's (``ndim`` dimensions): its spec without the
    words' entry, which is never split."""
    data = _data_sharding(sharding, ndim)
    if not isinstance(data, NamedSharding):
        return data
    return data.with_spec(data.spec.update(partitions=tuple(data.spec)[:-1]))


def wrap_key_data(key_bits, *, impl=None, dtype=None) -> PRNGKeyArray:
    """A key array around ``uint32[..., W]`` key data (``key_data``'s inverse); ``impl`` or
    ``dtype`` chooses the implementation, as in ``key``."""
    impl = _impl_or_dtype(impl, dtype, "wrap_key_data")
    data = jnp.asarray(key_bits)
    _check_key_data(impl, data)
    return PRNGKeyArray(impl, data)


def _check_key_data(impl: PRNGImpl, data) -> None:
    """JAX's TypeErrors for data that cannot be ``impl``'s keys: a trailing dimension of its
    words, then uint32."""
    if data.ndim < 1:
        raise TypeError(f"JAX encountered invalid PRNG key data: expected key_data.ndim >= 1; "
                        f"got ndim={data.ndim}")
    if data.shape[-1] != impl.words:
        raise TypeError(f"JAX encountered invalid PRNG key data: expected key_data.shape to "
                        f"end with ({impl.words},); got shape={tuple(data.shape)} for "
                        f"impl={impl.name}")
    if data.dtype != np.uint32:
        raise TypeError(f"JAX encountered invalid PRNG key data: expected key_data.dtype = "
                        f"uint32; got dtype={data.dtype.name}")


def key_impl(keys) -> PRNGImpl:
    """The implementation of a typed key array (``str()`` gives its name); raw key data's is
    the default one (where ``jax_legacy_prng_key`` allows raw keys)."""
    if isinstance(keys, PRNGKeyArray):
        return keys._impl
    if not hasattr(keys, "dtype"):
        raise TypeError(f"key_impl accepts a typed key array, got {type(keys).__name__}")
    _raw_key_data(keys)
    return resolve_impl(None)


def clone(keys):
    """The same keys (shardc never consumes a key in place)."""
    return keys


def single_key(name: str, keys):
    """The ``uint32[2]`` words a sampler draws from; a key array must hold one key."""
    data = single_key_data(name, keys)
    if isinstance(keys, PRNGKeyArray) and keys._impl.words == 4 and keys._impl.ops is None:
        # A 4-word key folds to the 2 words the bit generator takes; the second half crosses
        # over, so a key made from a seed ([0, s, 0, s], as JAX makes it) folds to [s, s].
        return jnp.bitwise_xor(data[:2], data[3:1:-1])
    return data


def single_key_data(name: str, keys):
    """The data of one key (``uint32[words]``): JAX's ValueError for a batch of keys."""
    if isinstance(keys, PRNGKeyArray):
        if keys.shape != ():
            raise ValueError(f"{name} accepts a single key, but was given a key array of shape "
                             f"{keys.shape} != (). Use jax.vmap for batching.")
        return keys._base
    data = _raw_key_data(keys)
    if data.ndim > 1:
        raise ValueError(f"{name} accepts a single key, but was given a key array of shape "
                         f"{tuple(data.shape[:-1])} != (). Use jax.vmap for batching.")
    return data


_LEGACY_KEY = ("Legacy uint32 key array passed as key to jax.random function. Please create "
               "keys using jax.random.key(). If use of a raw key array was intended, set "
               "jax_legacy_prng_key=\"allow\".")


def _raw_key_data(keys):
    """Raw key data given where keys are taken, as an array of the default implementation's
    key data: JAX's error or warning for it first, as ``jax_legacy_prng_key`` asks, then its
    TypeError for data that cannot be keys."""
    mode = config.read("jax_legacy_prng_key")
    if mode == "error":
        raise ValueError(_LEGACY_KEY)
    if mode == "warn":
        warnings.warn(_LEGACY_KEY, stacklevel=3)
    elif config.read("jax_enable_custom_prng"):
        warnings.warn("Raw arrays as random keys to jax.random functions are deprecated. "
                      "Assuming valid threefry2x32 key for now.", FutureWarning, stacklevel=3)
    data = jnp.asarray(keys)
    _check_key_data(resolve_impl(None), data)
    return data


def _impl_of(keys) -> PRNGImpl:
    """The implementation of keys given as a key array or as raw key data (the default
    implementation's, as JAX takes raw data)."""
    return keys._impl if isinstance(keys, PRNGKeyArray) else resolve_impl(None)


def _raw_keys_out(data):
    """What split and fold_in give for raw key data: the new raw data, or typed keys with
    ``jax_enable_custom_prng`` on (JAX returns its key arrays then)."""
    if config.read("jax_enable_custom_prng"):
        return PRNGKeyArray(resolve_impl(None), data)
    return data


def threefry(words, high, low) -> list:
    """JAX's Threefry-2x32 hash of the counters ``(high, low)`` keyed by ``words``
    (``uint32[2]``): two uint32 arrays of the counters' shape."""
    return bind(p.threefry2x32_p, words[0], words[1], high, low)


def counters(shape) -> tuple:
    """The row-major index of each element of ``shape`` as two uint32 words, high and low:
    the counters JAX hashes, so that an element's bits depend only on its index (and a block
    of them is drawn wherever it lies)."""
    size = math.prod(shape)
    if size > 2 ** 32:
        raise NotImplementedError(f"random bits for {size} elements: shardc counts elements "
                                  "up to 2**32")
    high = jnp.asarray(np.uint32(0))
    if not shape:
        return high, high
    low = None
    stride = 1
    for d in reversed(range(len(shape))):
        index = lax.broadcasted_iota(np.uint32, shape, d)
        if stride != 1:
            index = jnp.multiply(index, np.uint32(stride))
        low = index if low is None else jnp.add(low, index)
        stride *= shape[d]
    return high, low


def _partitionable() -> bool:
    """JAX's scheme of bits (``jax_threefry_partitionable``, on by default): each element's
    bits hash its own index. Off, the original one: a flat run of counters hashed in two
    halves, so an element's bits depend on the size of the draw."""
    return config.read("jax_threefry_partitionable")


def _hash_run(words, count):
    """JAX's original ``threefry_2x32``: a uint32 array of counters (any shape), its first
    half hashed against its second (an odd count padded with 0), in its shape."""
    n = math.prod(count.shape)
    flat = jnp.reshape(count, (n,))
    if n % 2:
        flat = jnp.concatenate([flat, jnp.zeros((1,), np.uint32)])
    half = flat.shape[0] // 2
    first, second = threefry(words, flat[:half], flat[half:])
    return jnp.reshape(jnp.concatenate([first, second])[:n], count.shape)


def _original_bits(words, shape, bit_width: int):
    """The original scheme's bits: one hashed run of ``ceil(bit_width * size / 32)`` counters,
    cut into ``bit_width``-bit pieces (a 64-bit value: a word of the run's first half over
    one of its second)."""
    size = math.prod(shape)
    count = -(-bit_width * size // 32)
    if count >= 2 ** 32 - 1:
        raise NotImplementedError(f"random bits for {size} elements of {bit_width} bits")
    run = _hash_run(words, lax.iota(np.uint32, count))
    dtype = np.dtype(f"uint{bit_width}")
    if bit_width == 64:
        high, low = (jnp.astype(half, dtype) for half in (run[:size], run[size:]))
        value = jnp.bitwise_or(jnp.left_shift(high, dtype.type(32)), low)
    elif bit_width == 32:
        value = run
    else:
        # the words' pieces, lowest first (the little-endian view of the run)
        pieces = [jnp.astype(jnp.bitwise_and(
            lax.shift_right_logical(run, np.uint32(bit_width * i)), np.uint32(2 ** bit_width - 1)),
            dtype) for i in range(32 // bit_width)]
        value = jnp.reshape(jnp.stack(pieces, axis=1), (-1,))[:size]
    return jnp.reshape(value, shape)


def random_bits(key, shape, name: str = "random_bits", bit_width: int = 32):
    """Unsigned random bits of ``shape`` and ``bit_width`` (8, 16, 32 or 64) from one key,
    JAX's for a threefry key (``name`` is the caller's, for errors): the hash of each
    element's index, its two words xor-ed (64 bits: the first word high, the second low).
    One compiled program, as JAX's (an eager call runs it at once)."""
    shape = tuple(int(d) for d in shape)
    impl = _impl_of(key)
    if impl.ops is not None:
        return compiled(_random123_bits, shape, bit_width, impl)(single_key_data(name, key))
    return compiled(_bits_of_words, shape, bit_width)(single_key(name, key))


def _random123_bits(data, shape, bit_width, impl):
    return impl.ops.bits(data, *counters(shape), bit_width)


def _random123_split(data, shape, impl):
    return impl.ops.split(data, *counters(shape))


def compiled(fn, *static):
    """``fn`` of a key (and further arrays: a sampler's parameters) with its static arguments
    bound after them, jitted once per ``static``: a call with arrays only takes jit's fast
    path, and parameters that change from call to call trace nothing again."""
    # by type too: 1, 1.0 and True compare equal, and may draw differently
    key = (fn, static, tuple(map(type, static)))
    found = _PROGRAMS.get(key)
    if found is None:
        if len(_PROGRAMS) > 1024:
            _PROGRAMS.clear()
        found = _PROGRAMS[key] = _jit(lambda value, *arrays: fn(value, *arrays, *static))
    return found


_PROGRAMS: dict = {}


def _bits_of_words(words, shape, bit_width):
    if not _partitionable():
        return _original_bits(words, shape, bit_width)
    first, second = threefry(words, *counters(shape))
    dtype = np.dtype(f"uint{bit_width}")
    if bit_width == 64:
        return jnp.bitwise_or(jnp.left_shift(jnp.astype(first, dtype), dtype.type(32)),
                              jnp.astype(second, dtype))
    bits = jnp.bitwise_xor(first, second)
    return bits if bit_width == 32 else jnp.astype(bits, dtype)


def _split_words(words, shape):
    """``shape`` new keys' words from one key's two: the hashes of their indices (JAX's)."""
    if not _partitionable():
        run = _hash_run(words, lax.iota(np.uint32, 2 * math.prod(shape)))
        return jnp.reshape(run, shape + (2,))
    first, second = threefry(words, *counters(shape))
    return jnp.stack([first, second], axis=len(shape))


def _split_data(data, shape):
    """One key's data split into ``shape`` keys' (one compiled program, as JAX's)."""
    if data.shape[-1] == 4:
        return _by_halves(lambda words: _split_words(words, shape), data, shape)
    return _split_words(data, shape)


def _by_halves(fn, data, shape):
    """A 4-word (rbg) key's result: ``fn`` on each half of its words, as JAX's rbg keys
    split and fold."""
    halves = [fn(data[:2]), fn(data[2:])]
    return jnp.reshape(jnp.stack(halves, axis=len(shape)), shape + (4,))


def split(key, num=2):
    """``num`` new keys (an int or a shape): typed keys of shape ``(num,)`` for a typed key,
    ``uint32[num, 2]`` for raw key data."""
    impl, shape = _impl_of(key), sample_shape(num)
    if impl.ops is not None:
        new = compiled(_random123_split, shape, impl)(single_key_data("split", key))
    else:
        new = compiled(_split_data, shape)(single_key_data("split", key))
    if isinstance(key, PRNGKeyArray):
        return PRNGKeyArray(key._impl, new)
    return _raw_keys_out(new)


def fold_in(key, data):
    """A new key from ``key`` and an integer: the hash of ``(0, data)`` (JAX's), so that
    ``fold_in(key, i)`` is the ``i``-th key of ``split``."""
    if np.ndim(data):
        raise TypeError(f"fold_in accepts a scalar, but was given an array of shape "
                        f"{np.shape(data)} != (). Use jax.vmap for batching.")
    # a Python int is taken as a uint32 (JAX's: up to 2**32 - 1, not only int32's range)
    if type(data) is int:
        if not 0 <= data < 2**32:
            raise OverflowError(f"Python integer {data} out of bounds for uint32")
        data = np.uint32(data)
    ops = _impl_of(key).ops
    fold = _fold_data if ops is None else compiled(ops.fold_in)
    folded = fold(single_key_data("fold_in", key), data)
    return PRNGKeyArray(key._impl, folded) if isinstance(key, PRNGKeyArray) else \
        _raw_keys_out(folded)


@_jit
def _fold_data(words, data):
    """One key's data folded with ``data``: the hash of ``(0, data)`` (one compiled program,
    as JAX's)."""
    mixed = jnp.astype(jnp.asarray(data), np.uint32)
    zero = jnp.asarray(np.uint32(0))

    def fold(words):
        return jnp.stack(threefry(words, zero, mixed))
    return jnp.reshape(jnp.stack([fold(words[:2]), fold(words[2:])]), (4,)) \
        if words.shape[-1] == 4 else fold(words)


@takes_out_sharding
def bits(key, shape=(), dtype=None):
    """Random unsigned integers of ``dtype`` (the default unsigned one: uint64 under x64),
    JAX's bits."""
    dtype = _dt.canonicalize(np.uint) if dtype is None else _dt.requested(dtype, "")
    if not np.issubdtype(dtype, np.unsignedinteger):
        raise ValueError(f"dtype argument to `bits` must be an unsigned int dtype, got {dtype}")
    return random_bits(key, sample_shape(shape), "bits", 8 * dtype.itemsize)


def sample_shape(shape) -> tuple:
    """A sample shape given as an int or a sequence, as a tuple; JAX's TypeError for traced
    sizes (a shape must be known when tracing)."""
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    if hasattr(shape, "dtype") and not isinstance(shape, Tracer) and np.ndim(shape) == 0:
        shape = (shape,)            # a concrete integer array: one size, as JAX's (num,)
    if isinstance(shape, Tracer) or any(isinstance(d, Tracer) for d in shape):
        raise TypeError(f"Shapes must be 1D sequences of concrete values of integer type, "
                        f"got {shape}.\nIf using `jit`, try using `static_argnums` or "
                        "applying `jit` to smaller subfunctions.")
    try:
        return tuple(operator.index(d) for d in shape)   # concrete integer arrays as ints
    except TypeError:
        raise TypeError(f"Shapes must be 1D sequences of concrete values of integer type, "
                        f"got {shape}.") from None
