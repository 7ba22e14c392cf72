"""Dead code elimination: drop the equations whose results nothing needs."""
from __future__ import annotations

from ir import primitives as prims
from ir.core import Eqn, Program, Var
from ir.graph import has_side_effect, replace_sub_programs
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
    Returns: a verified program with the same inputs and outputs (``program`` itself when
    nothing is dead).

    >>> print(dce(make_jaxpr(lambda x: (jnp.cos(x), jnp.sin(x))[1])(x).jaxpr))
    { lambda ; a:f32[3]. let
        b:f32[3] = sin a
      in (b,) }
    """
    result = _dce(program)
    if result is not program:
        verify(result)
    return result


def _dce(program: Program) -> Program:
    # Pruning a shard_map's outputs can leave equations dead, and the reverse: repeat.
    while True:
        cleaned = _drop_dead_equations(_prune_shard_map_outputs(program))
        if _size(cleaned) == _size(program):
            return cleaned
        program = cleaned


def _size(program: Program) -> tuple:
    return (len(program.eqns), sum(len(e.outvars) for e in program.eqns))


def _prune_shard_map_outputs(program: Program) -> Program:
    """Drop the outputs of shard_map equations nothing reads (with their out_specs and the
    body's outputs), so the body's work for them can go too. Every device drops them alike."""
    if not any(eqn.primitive is prims.shard_map_p for eqn in program.eqns):
        return program
    used = {id(a) for eqn in program.eqns for a in eqn.invars if isinstance(a, Var)}
    used |= {id(a) for a in program.outvars if isinstance(a, Var)}
    eqns = []
    changed = False
    for eqn in program.eqns:
        if eqn.primitive is not prims.shard_map_p or has_side_effect(eqn):
            eqns.append(eqn)
            continue
        keep = [id(v) in used for v in eqn.outvars]
        if all(keep) or not any(keep):
            eqns.append(eqn)
            continue
        body = eqn.params["jaxpr"]
        body = Program(list(body.constvars), list(body.invars), list(body.eqns),
                       [a for a, k in zip(body.outvars, keep) if k], list(body.consts))
        params = dict(eqn.params, jaxpr=body,
                      out_specs=tuple(s for s, k in zip(eqn.params["out_specs"], keep) if k))
        eqns.append(Eqn(eqn.primitive, list(eqn.invars),
                        [v for v, k in zip(eqn.outvars, keep) if k], params, eqn.source))
        changed = True
    if not changed:
        return program
    return Program(list(program.constvars), list(program.invars), eqns, list(program.outvars),
                   list(program.consts))


def _any_live(outvars, live: set) -> bool:
    for v in outvars:
        if id(v) in live:
            return True
    return False


def _drop_dead_equations(program: Program) -> Program:
    """One backward sweep: an equation is live if it has a side effect or a live result; a
    live equation makes its operands live. (Equations come in dependency order.)"""
    eqns = [replace_sub_programs(eqn, _dce) if eqn.params else eqn for eqn in program.eqns]
    live = {id(a) for a in program.outvars if isinstance(a, Var)}
    keep = [False] * len(eqns)
    for k in range(len(eqns) - 1, -1, -1):
        eqn = eqns[k]
        if _any_live(eqn.outvars, live) or has_side_effect(eqn):
            keep[k] = True
            for a in eqn.invars:
                if type(a) is Var:
                    live.add(id(a))
    if all(keep) and all(a is b for a, b in zip(eqns, program.eqns)):
        return program
    return Program(list(program.constvars), list(program.invars),
                   [eqn for eqn, k in zip(eqns, keep) if k],
                   list(program.outvars), list(program.consts))
