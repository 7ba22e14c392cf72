"""``shardc.stages``: the types of JAX's ahead-of-time stages (``jax.stages``), for programs
that annotate with them or test what they hold: ``jit(f)`` is ``Wrapped``, ``.trace(...)``
gives ``Traced``, ``.lower(...)`` ``Lowered``, and ``.compile()`` ``Compiled``.

shardc's lowering already holds the programs that run, so a lowered and a compiled function
are one class (``compiler.jit.Compiled``) told apart by whether ``compile()`` made it:
``isinstance`` answers as JAX's does for each stage.
"""
from __future__ import annotations

from typing import Protocol, Union, runtime_checkable

from compiler import jit as _jit
from compiler.jit import ArgInfo, Traced

__all__ = ["Compiled", "CompilerOptions", "Lowered", "Wrapped", "ArgInfo", "Traced"]

# XLA's compiler options, as ``compile(compiler_options=...)`` takes them
CompilerOptions = dict[str, Union[str, bool]]


class _Stage(type):
    """The type of a stage: its instances are the lowerings in that stage."""

    def __instancecheck__(cls, value) -> bool:
        return isinstance(value, _jit.Compiled) and value.compiled is cls._compiled

    def __subclasscheck__(cls, other) -> bool:
        return other is cls


class Lowered(metaclass=_Stage):
    """A function lowered for argument types (``jit(f).lower(...)``), not yet compiled."""
    _compiled = False


class Compiled(metaclass=_Stage):
    """A lowered function compiled (``jit(f).lower(...).compile()``), ready to call."""
    _compiled = True


@runtime_checkable
class Wrapped(Protocol):
    """A function ready to be traced, lowered and compiled (what ``jit`` gives)."""

    def __call__(self, *args, **kwargs): ...

    def trace(self, *args, **kwargs) -> Traced: ...

    def lower(self, *args, **kwargs): ...
