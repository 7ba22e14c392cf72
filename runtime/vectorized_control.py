"""Control flow in stacked bodies: a loop whose trip count, or a branch whose index, is the
same on every device runs once over the stacked blocks, collectives inside it included.

    scan     the body compiled once; ``length`` calls, xs sliced and ys stacked after the
             mesh dims; carries keep one layout across iterations (the union of what enters
             and what the body returns: a fixpoint over layouts, which only grow)
    while    the same, when the predicate's layout says it is one value on every device
    cond     the chosen branch, when the index is one value on every device

Anything else (a predicate or an index that may differ between devices) raises
``NotStackable`` here; the caller then runs the loop per device when it holds no collective,
or the whole shard_map on the reference backend.
"""
from __future__ import annotations

import numpy as np

from ir import primitives as prims
from runtime.vectorized_rules import Kernel, broadcast_lead, union_lead


def control_kernel(eqn, types, compile_body, not_stackable) -> Kernel:
    """The stacked kernel of a scan, while or cond equation. ``compile_body(program,
    in_leads)`` compiles a sub-program (a ``BodyPlan``); ``not_stackable`` is the exception
    raised when the loop or branch may go differently on different devices."""
    rule = {prims.scan_p: _scan, prims.while_p: _while, prims.cond_p: _cond}[eqn.primitive]
    return rule(eqn.params, types, compile_body, not_stackable)


def _invariant(lead) -> bool:
    return all(n == 1 for n in lead)


def _carry_fixpoint(compile_with, carry_leads, carry_outs):
    """Compile with carry layouts grown until the body returns carries no wider than it
    takes; returns (plan, carry_leads)."""
    carry = [tuple(l) for l in carry_leads]
    for _ in range(len(carry[0]) + 2 if carry else 1):
        plan = compile_with(carry)
        returned = carry_outs(plan)
        joined = [union_lead([a, b]) for a, b in zip(carry, returned)]
        if joined == carry:
            return plan, carry
        carry = joined
    raise AssertionError("carry layouts did not settle")


def _quietly(fn, quiet: bool):
    if not quiet:
        return fn

    def quiet_fn(*values):
        with np.errstate(all="ignore"):
            return fn(*values)
    return quiet_fn


def _scan(params, types, compile_body, not_stackable) -> Kernel:
    body, length, reverse = params["jaxpr"], params["length"], params["reverse"]
    nconst, ncarry = params["num_consts"], params["num_carry"]
    k = types.k
    leads = [tuple(l) for l in types.in_leads]
    consts, xs = leads[:nconst], leads[nconst + ncarry:]
    plan, carry_leads = _carry_fixpoint(
        lambda carry: compile_body(body, consts + carry + xs), leads[nconst:nconst + ncarry],
        lambda plan: plan.out_leads[:ncarry])
    y_leads = plan.out_leads[ncarry:]
    y_avals = body.out_avals[ncarry:]
    steps = list(range(length - 1, -1, -1) if reverse else range(length))

    def scan(*values):
        fixed = list(values[:nconst])
        carry = [broadcast_lead(c, l) for c, l in zip(values[nconst:nconst + ncarry],
                                                        carry_leads)]
        xs_values = values[nconst + ncarry:]
        ys = []
        for i in steps:
            index = (slice(None),) * k + (i,)
            outs = plan.run(*fixed, *carry, *[x[index] for x in xs_values])
            carry = [broadcast_lead(c, l) for c, l in zip(outs[:ncarry], carry_leads)]
            ys.append(outs[ncarry:])
        if reverse:
            ys.reverse()
        stacked = [np.stack([y[j] for y in ys], axis=k) if ys
                   else np.zeros(tuple(lead) + (0,) + aval.shape, aval.dtype)
                   for j, (lead, aval) in enumerate(zip(y_leads, y_avals))]
        return [np.asarray(c) for c in carry] + stacked
    return Kernel(_quietly(scan, plan.quiet), list(carry_leads) + list(y_leads), multiple=True)


def _while(params, types, compile_body, not_stackable) -> Kernel:
    cond_body, loop_body = params["cond_jaxpr"], params["body_jaxpr"]
    cn, bn = params["cond_nconsts"], params["body_nconsts"]
    leads = [tuple(l) for l in types.in_leads]
    cond_consts, body_consts, init = leads[:cn], leads[cn:cn + bn], leads[cn + bn:]
    plan, carry_leads = _carry_fixpoint(
        lambda carry: compile_body(loop_body, body_consts + carry), init,
        lambda plan: plan.out_leads)
    test = compile_body(cond_body, cond_consts + carry_leads)
    if not _invariant(test.out_leads[0]):
        raise not_stackable("while: the predicate may differ between devices")

    def while_loop(*values):
        cond_values = list(values[:cn])
        body_values = list(values[cn:cn + bn])
        carry = [broadcast_lead(c, l) for c, l in zip(values[cn + bn:], carry_leads)]
        while True:
            (pred,) = test.run(*cond_values, *carry)
            if not bool(pred.reshape(())):
                return [np.asarray(c) for c in carry]
            outs = plan.run(*body_values, *carry)
            carry = [broadcast_lead(c, l) for c, l in zip(outs, carry_leads)]
    return Kernel(_quietly(while_loop, plan.quiet or test.quiet), list(carry_leads),
                  multiple=True)


def _cond(params, types, compile_body, not_stackable) -> Kernel:
    branches = params["branches"]
    leads = [tuple(l) for l in types.in_leads]
    if not _invariant(leads[0]):
        raise not_stackable("cond: the branch index may differ between devices")
    plans = [compile_body(branch, leads[1:]) for branch in branches]
    out_leads = [union_lead(ls) for ls in zip(*[p.out_leads for p in plans])]
    last = len(branches) - 1

    def cond(index, *operands):
        chosen = plans[int(np.clip(int(index.reshape(())), 0, last))]
        outs = chosen.run(*operands)
        return [np.asarray(broadcast_lead(o, l)) for o, l in zip(outs, out_leads)]
    return Kernel(_quietly(cond, any(p.quiet for p in plans)), out_leads, multiple=True)
