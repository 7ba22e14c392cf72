"""How traced functions meet Refs (mutable arrays, ``shardc.ref``): a Ref made outside the
function being traced and read or written in it raises one of these, and the transformation
that can take it as a hidden input (jit), or thread it through its loop (scan), catches it and
traces again; elsewhere the message stands. ``swapped_in`` makes such Refs hold traced values
while a function is traced."""
from __future__ import annotations

import contextlib

import numpy as np


class ClosedOverRef(NotImplementedError):
    """A Ref made outside a body jit traces, read or written in it."""

    def __init__(self, ref):
        super().__init__(
            "a Ref made outside a traced function and read or written inside it (closed over) "
            "where shardc cannot take it as an input (a branch or while body, grad under jit "
            "...): pass it as an argument, or jit the function that uses it")
        self.ref = ref


class RefWrittenOutside(NotImplementedError):
    """A Ref written from inside a transformation of the function that made it."""

    def __init__(self, ref):
        super().__init__(
            "writing a Ref from inside a transformation (grad, a branch or while body, vmap of "
            "a Ref not passed to it) of the function that holds it is not supported: return "
            "the value and write it outside")
        self.ref = ref


@contextlib.contextmanager
def swapped_in(refs, values):
    """``refs`` holding ``values`` (traced in the current trace) as Refs made there, their own
    state put back after."""
    saved = [r._swap_state(v) for r, v in zip(refs, values)]
    try:
        yield
    finally:
        for r, state in zip(refs, saved):
            r._restore_state(state)


def is_ref(value) -> bool:
    """Whether ``value`` is a Ref (its class says so: the compiler does not import shardc)."""
    return getattr(value, "_mutable_ref", False)


def stand_in(ref, value):
    """A Ref made in the current trace holding ``value`` in place of ``ref``, typed as it is
    (a transformation's view of a Ref it was given)."""
    return type(ref)(value, weak=ref._weak)


def ref_type(ref) -> str:
    """``Ref{float32[3]}``, as JAX's errors name a Ref's type."""
    return f"Ref{{{np.dtype(ref.dtype).name}[{','.join(map(str, ref.shape))}]}}"
