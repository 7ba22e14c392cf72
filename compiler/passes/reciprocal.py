"""Division by a broadcast value, as XLA computes it: ``a / b`` where ``b`` is broadcast (a
rank-0 value divided into an array, or the result of a ``broadcast_in_dim``) or a constant
(a literal, into a scalar too) is ``a * (1 / b)``, the reciprocal taken once on the value
before it is broadcast and rounded to its dtype. A value computed from literals alone is
folded by XLA, its division as written.

XLA's algebraic simplifier rewrites such a division that way for float16, float32 and float64
(bfloat16 is computed in float32 first, and complex numbers are divided as written). The
results differ from a division by up to an ulp (``x / 3`` on a third of float32 values), so
shardc rewrites the same divisions when it lowers a program, and JAX's programs get JAX's bits:
a mean over an axis, a softmax's normalisation, ``x / 255``.

    before:  c:f32[8,4] = div a 3.0:f32[]
    after:   r:f32[]    = div 1.0:f32[] 3.0:f32[]
             c:f32[8,4] = mul a r
"""
from __future__ import annotations

import math

import numpy as np

from ir import primitives as prims
from ir.core import Aval, Eqn, Literal, Program, Var
from ir.dtypes import divides_by_reciprocal
from ir.graph import replace_sub_programs


def reciprocal_divisions(program: Program) -> Program:
    """``program`` (and its sub-programs) with every division by a broadcast value of a dtype
    XLA divides so (``divides_by_reciprocal``) written as a product with the value's
    reciprocal (``program`` itself when there is none)."""
    producers: dict = {}        # id(var) -> the equation computing it
    constant: set = set()       # ids of values computed from literals alone (XLA folds them)
    eqns: list = []
    changed = False
    for eqn in program.eqns:
        new = replace_sub_programs(eqn, reciprocal_divisions)
        written = (_as_product(new, producers) if new.primitive is prims.div_p
                   and not _folded(new.invars[0], constant) else None)
        if written is not None:
            new, changed = written, True
        eqns.extend(new if isinstance(new, list) else [new])
        changed |= new is not eqn
        for step in (new if isinstance(new, list) else [new]):
            for var in step.outvars:
                producers[id(var)] = step
            if step.invars and not step.params.get("jaxpr") \
                    and all(_folded(a, constant) for a in step.invars):
                constant.update(id(v) for v in step.outvars)
    if not changed:
        return program
    return Program(list(program.constvars), list(program.invars), eqns,
                   list(program.outvars), list(program.consts))


def _folded(atom, constant: set) -> bool:
    """Whether ``atom`` is a literal or computed from literals alone: XLA folds such a value,
    a division of it included (divided as written, not by a reciprocal)."""
    return isinstance(atom, Literal) or id(atom) in constant


def is_broadcast_divisor(divisor, out_aval: Aval, producers: dict):
    """What ``divisor`` is broadcast from where a division into ``out_aval`` divides by a
    broadcast value: ``(value, broadcast equation or None)``; else None."""
    if divisor.aval.ndim == 0:
        # a constant divides a scalar so too (XLA's simplifier takes a constant's
        # reciprocal); a computed scalar into a scalar is divided as written
        return (divisor, None) if out_aval.ndim or isinstance(divisor, Literal) else None
    producer = producers.get(id(divisor)) if isinstance(divisor, Var) else None
    if producer is not None and producer.primitive is prims.broadcast_in_dim_p:
        source = producer.invars[0]
        if math.prod(source.aval.shape) < math.prod(divisor.aval.shape):
            return source, producer
    return None


def _as_product(eqn: Eqn, producers: dict):
    """The equations computing division ``eqn`` as XLA does where it divides by a broadcast
    value (a list: the reciprocal, its broadcast, the product), else None."""
    numerator, divisor = eqn.invars
    (out,) = eqn.outvars
    dtype = out.aval.dtype
    if not divides_by_reciprocal(dtype):
        return None
    if isinstance(numerator, Literal) and numerator.value == 1:
        return None             # a reciprocal already
    found = is_broadcast_divisor(divisor, out.aval, producers)
    if found is None:
        return None
    value, broadcast = found
    one = Literal(np.ones((), dtype), Aval((), dtype))
    reciprocal = Var(value.aval)
    steps = [Eqn(prims.div_p, [one, value], [reciprocal], {}, eqn.source)]
    if broadcast is not None:
        spread = Var(divisor.aval)
        steps.append(Eqn(prims.broadcast_in_dim_p, [reciprocal], [spread],
                         dict(broadcast.params), eqn.source))
        reciprocal = spread
    steps.append(Eqn(prims.mul_p, [numerator, reciprocal], [out], dict(eqn.params),
                     eqn.source))
    return steps
