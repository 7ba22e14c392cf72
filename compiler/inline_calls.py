"""Calls that matter only to autodiff: run eagerly as their body, inlined before lowering.

``remat``, ``custom_jvp_call`` and ``custom_vjp_call`` compute exactly what their body computes,
and ``name`` (``checkpoint_name``) is the identity: their meaning beyond that is for autodiff,
which is done once a program is being lowered. Inlining custom calls and names first means no
backend ever meets them, and inlining a remat that holds a shard_map (at the top level of a
jitted gradient) lets lowering find that shard_map, as it finds one inside a custom_vjp's
rules. Other remats stay as they print: lowering and the backends run them inline.

``custom_lin`` (a custom_vjp function's tangent) has no value to compute: reaching lowering
means a custom_vjp function was differentiated in forward mode, which is an error, as in JAX.

    custom_jvp_call[jaxpr={ lambda ; a. let b = sin a in (b,) } ...] x     ->     b' = sin x
"""
from __future__ import annotations

from compiler.inspection import inspected
from compiler.tracing import eval_program
from compiler.tracing import eager_rules
from ir import primitives as prims
from ir.core import Eqn, Literal, Program, Var, holds_programs
from ir.graph import holds_equation, replace_sub_programs

# Calls whose body runs in their place (a remat only around a shard_map); ``name`` is
# replaced by its operand.
INLINED_CALLS = (prims.remat_p, prims.linear_solve_p) + prims.CUSTOM_CALLS
_REWRITTEN = INLINED_CALLS + (prims.name_p, prims.custom_lin_p)


def custom_vjp_jvp_error() -> TypeError:
    """JAX's error for forward-mode autodiff of a custom_vjp function."""
    return TypeError("can't apply forward-mode autodiff (jvp) to a custom_vjp function.")


def inline_calls(program: Program, every_remat: bool = False) -> Program:
    """``program`` with every custom_jvp/custom_vjp call, ``name`` equation and remat holding a
    shard_map (``every_remat``: every remat, for propagation to see through) replaced by what
    it computes, in sub-programs too (``program`` itself when there is none).

    Inlined bodies get fresh variables, so one body inlined twice never binds a variable twice.
    Raises TypeError at a ``custom_lin`` equation (a custom_vjp function under ``jvp``).
    """
    if not _holds_rewritten(program, every_remat):
        return program
    eqns: list = []
    outvars = _inline_into(program, {}, eqns, fresh=False, every_remat=every_remat)
    return Program(list(program.constvars), list(program.invars), eqns, outvars,
                   list(program.consts))


def inline_params(params: dict) -> dict:
    """The params of a higher-order equation with ``inline_calls`` applied to its sub-programs
    (``params`` itself when nothing changes): for a loop a backend runs eagerly, its
    sharding inspections done (``compiler.inspection``)."""
    changed = {key: (inspected(inline_calls(value)) if isinstance(value, Program) else
                     tuple(inspected(inline_calls(v)) for v in value))
               for key, value in params.items() if holds_programs(value)}
    changed = {key: value for key, value in changed.items() if _differs(value, params[key])}
    return dict(params, **changed) if changed else params


def _differs(new, old) -> bool:
    if isinstance(new, Program):
        return new is not old
    return any(a is not b for a, b in zip(new, old))


def _holds_rewritten(program: Program, every_remat: bool = False) -> bool:
    return holds_equation(program, lambda eqn: _rewrites(eqn, every_remat))


def _rewrites(eqn: Eqn, every_remat: bool = False) -> bool:
    """Custom calls, names and custom_lin always; a remat only around a shard_map (lowering
    must find it), or where ``every_remat``. Other remats stay, as printed: lowering and
    backends run them inline."""
    if eqn.primitive is prims.remat_p:
        return every_remat or _holds_shard_map(eqn.params["jaxpr"])
    return eqn.primitive in _REWRITTEN


def _holds_shard_map(program: Program) -> bool:
    return holds_equation(program, lambda eqn: eqn.primitive is prims.shard_map_p)


def _inline_into(program: Program, subst: dict, eqns: list, fresh: bool,
                 every_remat: bool = False) -> list:
    """Append ``program``'s equations to ``eqns`` with calls inlined; returns its outputs.
    ``subst`` maps the program's variables to the atoms that replace them."""
    def read(atom):
        return atom if isinstance(atom, Literal) else subst.get(id(atom), atom)

    for eqn in program.eqns:
        invars = [read(a) for a in eqn.invars]
        prim = eqn.primitive
        if prim is prims.custom_lin_p:
            raise custom_vjp_jvp_error()
        if prim is prims.name_p:
            subst[id(eqn.outvars[0])] = invars[0]
            continue
        if prim in INLINED_CALLS and _rewrites(eqn, every_remat):
            body = eqn.params["jaxpr"]
            inner = {id(v): a for v, a in zip(list(body.constvars) + list(body.invars), invars)}
            for outer, atom in zip(eqn.outvars, _inline_into(body, inner, eqns, fresh=True,
                                                             every_remat=every_remat)):
                subst[id(outer)] = atom
            continue
        eqn = replace_sub_programs(eqn, lambda sub: inline_calls(sub, every_remat))
        outvars = list(eqn.outvars)
        if fresh:
            outvars = [Var(v.aval) for v in eqn.outvars]
            subst.update((id(old), new) for old, new in zip(eqn.outvars, outvars))
        eqns.append(Eqn(prim, invars, outvars, eqn.params, eqn.source))
    return [read(a) for a in program.outvars]


# --- eagerly: the body, equation by equation, in the current (eager) trace ---------------------

def _run_body(*values, jaxpr, **params):
    return eval_program(jaxpr, list(values))


def _run_name(x, *, name):
    return [x]


def _run_custom_lin(*values, **params):
    raise custom_vjp_jvp_error()


for _p in INLINED_CALLS:
    eager_rules[_p] = _run_body
eager_rules[prims.name_p] = _run_name
eager_rules[prims.custom_lin_p] = _run_custom_lin
