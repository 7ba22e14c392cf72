"""``shardc.errors``: the exception classes JAX programs catch by name (``jax.errors``)."""
from compiler.tracing import (ConcretizationTypeError, JAXIndexError, JAXTypeError,
                              NonConcreteBooleanIndexError, TracerArrayConversionError,
                              TracerBoolConversionError, TracerIntegerConversionError,
                              UnexpectedTracerError)
from ir.transfer_guard import JaxRuntimeError

__all__ = ["ConcretizationTypeError", "JAXIndexError", "JAXTypeError", "JaxRuntimeError",
           "NonConcreteBooleanIndexError", "TracerArrayConversionError",
           "TracerBoolConversionError", "TracerIntegerConversionError", "UnexpectedTracerError"]
