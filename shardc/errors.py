"""``shardc.errors``: the exception classes JAX programs catch by name (``jax.errors``)."""
from compiler.tracing import (ConcretizationTypeError, JAXIndexError, JAXTypeError,
                              NonConcreteBooleanIndexError, TracerArrayConversionError,
                              TracerBoolConversionError, TracerIntegerConversionError,
                              UnexpectedTracerError)

__all__ = ["ConcretizationTypeError", "JAXIndexError", "JAXTypeError",
           "NonConcreteBooleanIndexError", "TracerArrayConversionError",
           "TracerBoolConversionError", "TracerIntegerConversionError", "UnexpectedTracerError"]
