"""Common subexpression elimination: compute each distinct expression once."""
from __future__ import annotations

import dataclasses

import numpy as np

from ir import primitives as prims
from ir.core import Literal, Program, Var
from ir.graph import has_side_effect, replace_sub_programs
from ir.verify import verify


def cse(program: Program) -> Program:
    """Merge equations that compute the same thing; later uses read the first one's results.

    Two equations are the same when they have the same primitive, structurally equal params
    (sub-programs equal up to the names of their variables), the same operands (variables by
    identity, literals by value and type) and the same result types. Never merged: equations
    with side effects (``debug_print``, per-device communication nodes, and higher-order
    equations holding either), since each must happen as often as written; front-end
    collectives of a traced program do merge, as every device merges them alike. Sub-programs
    are cleaned first, each on its own.

    Args: program: a traced or per-device program.
    Returns: a new, verified program with the same inputs and outputs.

    >>> print(cse(make_jaxpr(lambda x: jnp.sin(x) + jnp.sin(x))(x).jaxpr))
    { lambda ; a:f32[3]. let
        b:f32[3] = sin a
        c:f32[3] = add b b
      in (c,) }
    """
    result = _cse(program)
    verify(result)
    return result


def _cse(program: Program) -> Program:
    rename: dict = {}       # id(merged var) -> the var computed first
    seen: dict = {}         # expression key -> that equation's outvars
    eqns = []

    def read(atom):
        return rename.get(id(atom), atom) if isinstance(atom, Var) else atom

    for eqn in program.eqns:
        eqn = replace_sub_programs(eqn, _cse)
        invars = [read(a) for a in eqn.invars]
        if any(new is not old for new, old in zip(invars, eqn.invars)):
            eqn = dataclasses.replace(eqn, invars=invars)
        key = _expression_key(eqn)
        if key is not None and key in seen:
            rename.update((id(old), new) for old, new in zip(eqn.outvars, seen[key]))
            continue
        if key is not None:
            seen[key] = eqn.outvars
        eqns.append(eqn)
    return Program(list(program.constvars), list(program.invars), eqns,
                   [read(a) for a in program.outvars], list(program.consts))


def _expression_key(eqn):
    """What the equation computes, hashable; None for equations that must not merge."""
    if not eqn.outvars or eqn.primitive is prims.debug_print_p or has_side_effect(eqn):
        return None
    return _eqn_key(eqn, lambda var: ("var", id(var)))


def _eqn_key(eqn, var_key) -> tuple:
    operands = tuple(_atom_key(a, var_key) for a in eqn.invars)
    return (eqn.primitive, operands, _params_key(eqn.params),
            tuple(v.aval for v in eqn.outvars))


def _atom_key(atom, var_key):
    if isinstance(atom, Literal):
        return ("literal", atom.aval, atom.value.tobytes())
    return var_key(atom)


def _params_key(params: dict) -> tuple:
    return tuple(sorted((name, _value_key(value)) for name, value in params.items()))


def _value_key(value):
    """A hashable stand-in for a param value; equal keys mean interchangeable values.
    Values that cannot be compared are keyed by identity."""
    if isinstance(value, Program):
        return program_key(value)
    if type(value) in (tuple, list):
        return (type(value).__name__, tuple(_value_key(v) for v in value))
    if isinstance(value, dict):
        return ("dict", _params_key(value))
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    try:
        hash(value)
    except TypeError:
        return ("object", id(value))
    return (type(value), value)


def program_key(program: Program) -> tuple:
    """A hashable key equal for programs that differ only in the names of their variables
    (variables are numbered in definition order)."""
    numbers: dict = {}

    def define(var):
        numbers[id(var)] = len(numbers)

    def var_key(var):
        return ("var", numbers.get(id(var), ("free", id(var))))

    for var in list(program.constvars) + list(program.invars):
        define(var)
    body = []
    for eqn in program.eqns:
        body.append(_eqn_key(eqn, var_key))
        for var in eqn.outvars:
            define(var)
    return ("program",
            tuple(v.aval for v in program.constvars), tuple(v.aval for v in program.invars),
            tuple(_value_key(c) for c in program.consts), tuple(body),
            tuple(_atom_key(a, var_key) for a in program.outvars))
