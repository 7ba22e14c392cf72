"""``jax.core``'s names programs test values against: ``Tracer`` (a value being traced, not a
concrete array), ``ShapedArray`` (a value's type, as ``typeof`` gives it), and the
concreteness errors; and ``eval_jaxpr``, which runs a traced program's equations again."""
from __future__ import annotations

from compiler.tracing import (ConcretizationTypeError, Tracer, TracerBoolConversionError,
                              eval_program)
from shardc._types import ShapedArray
from shardc.config import ensure_compile_time_eval

__all__ = ["Tracer", "ShapedArray", "ConcretizationTypeError", "TracerBoolConversionError",
           "ensure_compile_time_eval", "eval_jaxpr"]


def eval_jaxpr(jaxpr, consts, *args, propagate_source_info=True) -> list:
    """The results (a list) of ``jaxpr`` (``make_jaxpr(f)(...).jaxpr``) on ``consts`` (its
    ``.consts``) and ``args``: its equations bound one by one, so computed eagerly, or traced
    into whatever transformation or jit calls it, as JAX's."""
    del propagate_source_info           # (each equation keeps the line it was traced from)
    program = getattr(jaxpr, "program", jaxpr)      # (a ClosedJaxpr given whole)
    consts = list(consts)
    if len(consts) != len(program.constvars) or len(args) != len(program.invars):
        raise TypeError(f"eval_jaxpr: the program takes {len(program.constvars)} constants "
                        f"and {len(program.invars)} arguments, given {len(consts)} and "
                        f"{len(args)}")
    return eval_program(program, list(args), consts)
