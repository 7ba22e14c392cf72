"""Dead code elimination: drop the equations whose results nothing needs."""
from __future__ import annotations

import dataclasses

from ir.core import Program
from ir.graph import has_side_effect, reachable_from_outputs, replace_sub_programs
from ir.verify import verify


def dce(program: Program) -> Program:
    """Drop every equation whose results the outputs do not need, transitively.

    Equations with side effects stay, with what they use: ``debug_print``, and every
    communication node of a per-device program (a node carrying device groups, or a lowered
    one such as ``all_reduce`` or ``all_slice``), because the devices of its group must still
    meet at it. A front-end collective of a traced program (``psum``) goes when unused: every
    device drops it alike. Sub-programs are cleaned too, keeping their inputs and outputs, so
    a loop keeps every carry and a ``shard_map`` body every output.

    Args: program: a traced or per-device program.
    Returns: a new, verified program with the same inputs and outputs.

    >>> print(dce(make_jaxpr(lambda x: (jnp.cos(x), jnp.sin(x))[1])(x).jaxpr))
    { lambda ; a:f32[3]. let
        b:f32[3] = sin a
      in (b,) }
    """
    result = _dce(program)
    verify(result)
    return result


def _dce(program: Program) -> Program:
    eqns = [replace_sub_programs(eqn, _dce) for eqn in program.eqns]
    roots = [k for k, eqn in enumerate(eqns) if has_side_effect(eqn)]
    live = reachable_from_outputs(dataclasses.replace(program, eqns=eqns), roots)
    return Program(list(program.constvars), list(program.invars),
                   [eqn for k, eqn in enumerate(eqns) if k in live],
                   list(program.outvars), list(program.consts))
