"""``shardc.errors``: the exception classes JAX programs catch by name (``jax.errors``)."""
from compiler.tracing import (ConcretizationTypeError, JAXIndexError, JAXTypeError,
                              NonConcreteBooleanIndexError, TracerArrayConversionError,
                              TracerBoolConversionError, TracerIntegerConversionError,
                              UnexpectedTracerError)
from ir.transfer_guard import JaxRuntimeError


class KeyReuseError(JAXTypeError):
    """JAX's error for a PRNG key used twice under ``jax_debug_key_reuse``. shardc does not
    track key reuse, so nothing raises it; it is here for programs that catch it by name."""


class InconclusiveDimensionOperation(Exception):
    """JAX's error for a computation on symbolic dimensions whose result it cannot decide.
    shardc's shapes are concrete, so nothing raises it; it is here for programs that catch
    it by name."""


class JaxprTypeError(TypeError):
    """JAX's error for an ill-typed jaxpr found by its checker. shardc's verifier raises its
    own errors, so nothing raises this; it is here for programs that catch it by name."""


__all__ = ["ConcretizationTypeError", "InconclusiveDimensionOperation", "JAXIndexError",
           "JAXTypeError", "JaxRuntimeError", "JaxprTypeError", "KeyReuseError",
           "NonConcreteBooleanIndexError", "TracerArrayConversionError",
           "TracerBoolConversionError", "TracerIntegerConversionError", "UnexpectedTracerError"]
