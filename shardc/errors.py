"""``shardc.errors``: the exception classes JAX programs catch by name (``jax.errors``)."""
from compiler.tracing import (ConcretizationTypeError, JAXIndexError, JAXTypeError,
                              NonConcreteBooleanIndexError, TracerArrayConversionError,
                              TracerBoolConversionError, TracerIntegerConversionError,
                              UnexpectedTracerError)
from ir.transfer_guard import JaxRuntimeError


class KeyReuseError(JAXTypeError):
    """JAX's error for a PRNG key used twice under ``jax_debug_key_reuse``. shardc does not
    track key reuse, so nothing raises it; it is here for programs that catch it by name."""

__all__ = ["ConcretizationTypeError", "JAXIndexError", "JAXTypeError", "JaxRuntimeError",
           "KeyReuseError", "NonConcreteBooleanIndexError", "TracerArrayConversionError",
           "TracerBoolConversionError", "TracerIntegerConversionError", "UnexpectedTracerError"]
