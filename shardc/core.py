"""``jax.core``'s names programs test values against: ``Tracer`` (a value being traced, not a
concrete array), and the concreteness errors."""
from __future__ import annotations

from compiler.tracing import ConcretizationTypeError, Tracer, TracerBoolConversionError

__all__ = ["Tracer", "ConcretizationTypeError", "TracerBoolConversionError"]
