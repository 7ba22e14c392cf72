"""``jax.core``'s names programs test values against: ``Tracer`` (a value being traced, not a
concrete array), ``ShapedArray`` (a value's type, as ``typeof`` gives it), and the
concreteness errors."""
from __future__ import annotations

from compiler.tracing import ConcretizationTypeError, Tracer, TracerBoolConversionError
from shardc._types import ShapedArray

__all__ = ["Tracer", "ShapedArray", "ConcretizationTypeError", "TracerBoolConversionError"]
