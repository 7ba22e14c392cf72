"""``shardc.ref`` (``jax.ref``): mutable arrays. ``new_ref(x)`` holds an array that
``ref[idx]`` reads and ``ref[idx] = v`` (``set``, ``swap``, ``addupdate``) replaces.

A Ref works eagerly; inside a traced function that made it; as an argument of a jitted
function, or closed over by one (the call reads each Ref's value as an input of its program
and writes back what the function left in it once the program has run: JAX's effects,
discharged); as an argument of vmap, mapped over the axis ``in_axes`` gives it; and written
by a scan body, as a further carry of the loop. A write from inside other transformations of
the function that holds the Ref (grad, a branch or while body) raises NotImplementedError.

    >>> ref = new_ref(jnp.zeros(3))
    >>> ref[1] = 10.0
    >>> ref
    Ref([ 0., 10.,  0.], dtype=float32)
"""
from __future__ import annotations

import numpy as np

from compiler.refs import ClosedOverRef, RefWrittenOutside, ref_type
from compiler.eager import ShardTrace
from compiler.tracing import (ProgramTrace, Tracer, aval_of, current_trace, values_known_now,
                              weakened, weakly_typed)
from shardc.lax._ops import convert_element_type
from shardc.numpy import array, asarray, zeros

__all__ = ["Ref", "RefView", "addupdate", "empty_ref", "free_ref", "freeze", "get", "new_ref",
           "set", "swap"]


class Ref:
    """A mutable array: ``ref[...]`` reads it, ``ref[idx] = value`` writes into it."""
    __slots__ = ("_value", "_weak", "_trace", "_staged", "_freed", "_unmapped")
    _mutable_ref = True        # how jit knows a ref among its arguments (compiler.jit)

    def __init__(self, value, weak=None):
        self._value = value
        # its type is fixed when it is made: a weakly typed Ref reads back weakly typed
        # whatever is written (JAX's Ref type), eagerly and in a traced body
        self._weak = weakly_typed(value) if weak is None else weak
        self._trace = current_trace()     # where it was made: it is written there only
        self._staged = not values_known_now()    # made in a body jit traces
        self._freed = False
        self._unmapped = False   # held for vmap, not mapped over: it takes no writes (JAX's)

    # -- the type of the array it holds ----------------------------------------------------------

    @property
    def shape(self) -> tuple:
        return tuple(aval_of(self._value).shape)

    @property
    def dtype(self):
        return aval_of(self._value).dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def sharding(self):
        return self._read().sharding

    committed = property(lambda self: True)

    def unsafe_buffer_pointer(self) -> int:
        """The address of the buffer the Ref holds now (a write that is not in place, as
        shardc's are, gives it another)."""
        return np.asarray(self._read()).__array_interface__["data"][0]

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    # -- reading and writing ----------------------------------------------------------------------

    def __getitem__(self, idx):
        return get(self, idx)

    def __setitem__(self, idx, value):
        set(self, idx, value)

    def addupdate(self, x, idx=()):
        addupdate(self, idx, x)

    @property
    def at(self) -> "_ViewIndexer":
        """``ref.at[index]``: a view of that part of the Ref, read and written as a Ref is."""
        return _ViewIndexer(self)

    def __repr__(self):
        value = self._read()
        if isinstance(value, Tracer):
            return f"Ref({aval_of(value).str_short()})"
        return "Ref" + repr(value)[len("Array"):]

    def _read(self):
        if self._freed:
            raise ValueError("the Ref was freed (free_ref or freeze): it holds no value")
        if not self._staged and not values_known_now():
            raise ClosedOverRef(self)      # jit takes it as a hidden argument
        return self._value

    def _swap_state(self, value) -> tuple:
        """Hold ``value``, traced where the caller traces, as a Ref made there; returns the
        state to restore (jit's closed-over refs)."""
        saved = (self._value, self._trace, self._staged)
        self._value, self._trace, self._staged = value, current_trace(), True
        return saved

    def _restore_state(self, saved) -> None:
        self._value, self._trace, self._staged = saved

    def _write(self, value, operation: str = "set/swap"):
        self._read()
        if self._unmapped:
            # every member would write it: JAX refuses, whatever the value
            raise ValueError(
                f"performing a{'n' if operation[0] in 'aeiou' else ''} {operation} operation "
                f"with vmapped value on an unbatched array reference of type "
                f"{ref_type(self)}. Move the array reference to be an argument to the "
                "vmapped function?")
        if current_trace() is not self._trace:
            raise RefWrittenOutside(self)    # scan threads it through its loop
        self._value = weakened(value) if self._weak else value


class _ViewIndexer:
    __slots__ = ("_of",)

    def __init__(self, of):
        self._of = of

    def __getitem__(self, index) -> "RefView":
        return RefView(self._of, index)


class RefView:
    """A part of a Ref (``ref.at[index]``, JAX's transformed Ref): reading it reads the Ref
    there, writing it writes the Ref there. Views of views compose."""
    __slots__ = ("_of", "_index")

    def __init__(self, of, index):
        self._of = of            # a Ref, or another view
        self._index = index

    def _value(self):
        return self._of[self._index]

    shape = property(lambda self: tuple(self._value().shape))
    dtype = property(lambda self: self._value().dtype)
    ndim = property(lambda self: len(self.shape))
    at = property(lambda self: _ViewIndexer(self))

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, idx):
        value = self._value()
        return value if _whole(idx) else value[idx]

    def __setitem__(self, idx, value):
        if not _whole(idx):
            value = self._value().at[idx].set(value)
        self._of[self._index] = value

    def __repr__(self):
        return f"RefView({self._index!r} of {self._of!r})"


def _whole(idx) -> bool:
    return idx is None or idx is Ellipsis or (isinstance(idx, tuple) and (
        len(idx) == 0 or len(idx) == 1 and idx[0] is Ellipsis))


def new_ref(init_val, *, memory_space=None, kind=None) -> Ref:
    """A Ref holding ``init_val`` (an array or anything ``jnp.asarray`` takes)."""
    if isinstance(init_val, Ref):
        raise ValueError("Cannot store a Ref into another Ref. Did you forget to load from it "
                         "using `[...]`?")
    if memory_space is not None and values_known_now():
        raise NotImplementedError("array ref with memory space only works inside of a `jit`.")
    _check_not_eager_shard_map()
    return Ref(array(init_val))


def empty_ref(ty, memory_space=None) -> Ref:
    """A Ref of type ``ty`` (anything with ``shape`` and ``dtype``) whose value is not yet
    written (shardc holds zeros)."""
    _check_not_eager_shard_map()
    return Ref(zeros(ty.shape, ty.dtype))


def _check_not_eager_shard_map() -> None:
    """JAX's error for a Ref made in a shard_map body that runs eagerly (not under jit), even
    one frozen before the body returns, or made under vmap there; one made in a body that is
    traced (jit, a loop or branch, and, unlike JAX, grad's) is fine."""
    if not values_known_now():
        return                     # (jit's trace)
    trace = current_trace()
    while trace is not None and not isinstance(trace, (ShardTrace, ProgramTrace)):
        trace = trace.parent
    if isinstance(trace, ShardTrace):
        raise ValueError("Eager shard_map cannot return a `jax.Ref`. Please wrap your "
                         "shard_map in `jax.jit`.")


def free_ref(ref: Ref) -> None:
    """Free the Ref's buffer: reading it afterwards is an error."""
    ref._read()
    ref._freed = True


def freeze(ref: Ref):
    """The Ref's value, as an immutable array; the Ref may not be used afterwards."""
    value = ref._read()
    ref._freed = True
    return value


def get(ref: Ref, idx=None):
    """``ref[idx]``: the elements of the Ref's value at ``idx`` (all of them by default)."""
    _check_ref(ref, "get")
    value = ref._read()
    _check_bounds(ref.shape, idx)
    return value if _whole(idx) else value[idx]


def swap(ref: Ref, idx, value, _function_name: str = "swap"):
    """Write ``value`` at ``idx`` and return what was there."""
    _check_ref(ref, _function_name)
    if isinstance(value, Ref):
        raise ValueError("Cannot store a Ref into another Ref. Did you forget to load from it "
                         "using `[...]`?")
    current = ref._read()
    _check_bounds(ref.shape, idx)
    old = current if _whole(idx) else current[idx]
    value = _checked_value(ref, old, value, "swap", idx)
    ref._write(value if _whole(idx) else current.at[idx].set(value))
    return old


def set(ref: Ref, idx, value) -> None:     # noqa: A001 (JAX's name)
    """``ref[idx] = value``."""
    swap(ref, idx, value, "set")


def addupdate(ref: Ref, idx, x) -> None:
    """``ref[idx] += x``, in place."""
    _check_ref(ref, "addupdate")
    current = ref._read()
    _check_bounds(ref.shape, idx)
    old = current if _whole(idx) else current[idx]
    x = _checked_value(ref, old, x, "addupdate", idx)
    ref._write(current + x if _whole(idx) else current.at[idx].add(x), "addupdate")


def _check_bounds(shape, idx) -> None:
    """JAX's ValueError for an integer index known now that is past its dimension's end (a
    Ref's indexing does not clamp: iterating over a Ref ends there, as JAX's)."""
    if _whole(idx):
        return
    entries = idx if isinstance(idx, tuple) else (idx,)
    # (``is``, not ``in``: an entry may be an array of indices)
    k = next((k for k, e in enumerate(entries) if e is Ellipsis), None)
    if k is not None:
        taken = sum(1 for e in entries if e is not None and e is not Ellipsis)
        entries = entries[:k] + (slice(None),) * (len(shape) - taken) + entries[k + 1:]
    dims = iter(shape)
    for entry in entries:
        if entry is None:
            continue
        size = next(dims, None)
        if size is None:
            return                          # too many indices: the indexing says so
        if isinstance(entry, (int, np.integer)) and not isinstance(entry, bool) \
                and entry >= size:
            raise ValueError(f"Out of bound indexer: idx={int(entry)}, dim={size}.")


def _check_ref(ref, name: str) -> None:
    if not isinstance(ref, Ref):
        raise ValueError(f"`{name}` must be called on `Ref` types: {ref!r}.")


def _checked_value(ref: Ref, old, value, name: str, idx=()):
    """``value`` as written over ``old``: a weakly typed value takes the Ref's dtype (within
    its kind); otherwise shape and dtype must be the same (JAX's errors)."""
    value = asarray(value)
    aval, old_aval = aval_of(value), aval_of(old)
    same_kind = (np.issubdtype(old_aval.dtype, np.floating)
                 and np.issubdtype(aval.dtype, np.floating)) or (
                 np.issubdtype(old_aval.dtype, np.integer)
                 and np.issubdtype(aval.dtype, np.integer))
    if getattr(value, "weak", False) is True and same_kind:     # typed as the Ref is
        value = convert_element_type(value, old_aval.dtype)
        aval = aval_of(value)
    if tuple(aval.shape) != tuple(old_aval.shape):
        raise ValueError(f"Invalid shape for `{name}`. Ref shape: {ref.shape}. Expected shape: "
                         f"{tuple(old_aval.shape)}. Value shape: {tuple(aval.shape)}. "
                         f"Transforms: {() if _whole(idx) else (idx,)}. ")
    if aval.dtype != old_aval.dtype:
        raise ValueError(f"Invalid dtype for `{name}`. Ref dtype: {old_aval.dtype}. Value "
                         f"dtype: {aval.dtype}. ")
    return value
