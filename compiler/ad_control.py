"""Autodiff of control flow: JVP of scan, while and cond; partial evaluation and transposition
of scan (reverse mode through loops, residuals stacked per iteration) and of cond; reverse mode
through while_loop is an error, as in JAX (SEMANTICS 4.6)."""
from __future__ import annotations

import numpy as np

from compiler.ad_core import (Linear, add_tangents, backward_pass, instantiate,
                               jvp_program_with_consts,
                               jvp_rules, partial_eval, partial_eval_rules, transpose_rules,
                               zeros_like_aval)
from compiler.ad_shard_map import check_on, per_device_axes, per_device_cotangents
from compiler.passes.dce import dce
from compiler.shard_map import current_shard_context
from compiler.tracing import aval_of, bind, current_trace, trace_to_program
from ir import primitives as p
from ir import collectives as coll
from ir.core import Aval, Eqn, Program, Var


def _trace(fun, avals) -> tuple[Program, list]:
    program, consts, _ = trace_to_program(fun, avals, shard=current_shard_context(),
                                          parent=current_trace())
    return Program([], program.constvars + program.invars, program.eqns, program.outvars), consts


def _reorder(program: Program, in_order: list, out_order: list) -> Program:
    return Program([], [program.invars[k] for k in in_order], program.eqns,
                   [program.outvars[k] for k in out_order])


# --- scan: JVP -----------------------------------------------------------------------------------

def _scan_jvp(primals, tangents, *, jaxpr, length, reverse, num_consts, num_carry):
    nc, nk = num_consts, num_carry
    nx = len(primals) - nc - nk
    const_nz = [t is not None for t in tangents[:nc]]
    xs_nz = [t is not None for t in tangents[nc + nk:]]
    # carries get tangents whenever anything does: a loop may move a tangent into any carry
    carry_nz = [True] * nk
    nonzero = const_nz + carry_nz + xs_nz
    # arrays a custom rule in the body closed over become the scan's first constants
    body, rule_consts = jvp_program_with_consts(jaxpr, nonzero, shard=current_shard_context())
    k = len(rule_consts)
    n_ct, n_xt = sum(const_nz), sum(xs_nz)
    n_in = nc + nk + nx
    # jvp_program order: primals, then tangents of (consts, carry, xs); scan needs
    # (consts + const tangents, carry + carry tangents, xs + xs tangents)
    t0 = n_in
    in_order = (list(range(nc)) + list(range(t0, t0 + n_ct))
                + list(range(nc, nc + nk)) + list(range(t0 + n_ct, t0 + n_ct + nk))
                + list(range(nc + nk, n_in)) + list(range(t0 + n_ct + nk, t0 + n_ct + nk + n_xt)))
    in_order = list(range(k)) + [i + k for i in in_order]
    n_out = len(jaxpr.outvars)
    ny = n_out - nk
    out_order = (list(range(nk)) + list(range(n_out, n_out + nk))
                 + list(range(nk, n_out)) + list(range(n_out + nk, 2 * n_out)))
    body = _reorder(body, in_order, out_order)
    carry_t = [instantiate(t, aval_of(x)) for t, x in zip(tangents[nc:nc + nk], primals[nc:nc + nk])]
    args = (list(rule_consts) + list(primals[:nc]) + [t for t in tangents[:nc] if t is not None]
            + list(primals[nc:nc + nk]) + carry_t
            + list(primals[nc + nk:]) + [t for t in tangents[nc + nk:] if t is not None])
    outs = bind(p.scan_p, *args, jaxpr=body, length=length, reverse=reverse,
                num_consts=k + nc + n_ct, num_carry=2 * nk)
    carry, carry_tangent = outs[:nk], outs[nk:2 * nk]
    ys, ys_tangent = outs[2 * nk:2 * nk + ny], outs[2 * nk + ny:]
    return carry + ys, carry_tangent + ys_tangent


jvp_rules[p.scan_p] = _scan_jvp


# --- scan: partial evaluation --------------------------------------------------------------------

def _scan_partial_eval(eqn: Eqn, ins_unknown: list):
    params = eqn.params
    body = params["jaxpr"]
    nc, nk, length = params["num_consts"], params["num_carry"], params["length"]
    const_uk = ins_unknown[:nc]
    carry_uk = list(ins_unknown[nc:nc + nk])
    xs_uk = ins_unknown[nc + nk:]
    n_out = len(body.outvars)
    while True:     # a carry is unknown if it starts unknown or the body makes it so
        split = partial_eval(body, const_uk + carry_uk + xs_uk,
                             carry_uk + [False] * (n_out - nk))
        grown = [a or b for a, b in zip(carry_uk, split.out_unknown[:nk])]
        if grown == carry_uk:
            break
        carry_uk = grown
    out_uk = split.out_unknown
    res = split.known.outvars[len(split.known.outvars) - split.num_residuals:]
    known_ins = [v for v, u in zip(body.invars, const_uk + carry_uk + xs_uk) if not u]
    const_known = [v for v, u in zip(body.invars[:nc], const_uk) if not u]
    # residuals that are known constants of the loop pass through as constants, not stacked
    const_res = [r for r in res if any(r is c for c in const_known)]
    loop_res = [r for r in res if not any(r is c for c in const_known)]
    outer_in = eqn.invars
    outer_const_res = [outer_in[body.invars.index(r)] for r in const_res]
    stacked = [Var(r.aval.stacked(length)) for r in loop_res]

    # the known scan: known consts, known carries, known xs -> known carries, known ys, residuals
    known_body_outs = split.known.outvars[:len(split.known.outvars) - split.num_residuals]
    known_carry_outs = [v for v, u in zip(body.outvars[:nk], carry_uk) if not u]
    known_body = Program([], known_ins, split.known.eqns, known_body_outs + loop_res)
    n_known_carry = len(known_carry_outs)
    known_eqn = Eqn(p.scan_p, [a for a, u in zip(outer_in, const_uk + carry_uk + xs_uk) if not u],
                    [v for v, u in zip(eqn.outvars, out_uk) if not u] + stacked,
                    dict(params, jaxpr=known_body, num_consts=sum(not u for u in const_uk),
                         num_carry=n_known_carry), eqn.source)
    # the unknown scan: (constant residuals, unknown consts), unknown carries,
    # (stacked residuals, unknown xs) -> unknown carries, unknown ys
    uk_consts = [v for v, u in zip(body.invars[:nc], const_uk) if u]
    uk_carry = [v for v, u in zip(body.invars[nc:nc + nk], carry_uk) if u]
    uk_xs = [v for v, u in zip(body.invars[nc + nk:], xs_uk) if u]
    unknown_body = Program([], const_res + uk_consts + uk_carry + loop_res + uk_xs,
                           split.unknown.eqns, split.unknown.outvars)
    unknown_eqn = Eqn(p.scan_p,
                      outer_const_res + [a for a, u in zip(outer_in[:nc], const_uk) if u]
                      + [a for a, u in zip(outer_in[nc:nc + nk], carry_uk) if u]
                      + stacked + [a for a, u in zip(outer_in[nc + nk:], xs_uk) if u],
                      [v for v, u in zip(eqn.outvars, out_uk) if u],
                      dict(params, jaxpr=unknown_body,
                           num_consts=len(const_res) + len(uk_consts), num_carry=len(uk_carry)),
                      eqn.source)
    return [known_eqn], [unknown_eqn], [v for v, u in zip(eqn.outvars, out_uk) if u]


partial_eval_rules[p.scan_p] = _scan_partial_eval


# --- scan: transpose -------------------------------------------------------------------------------

def _scan_transpose(cts, *args, jaxpr, length, reverse, num_consts, num_carry):
    """Run the loop backwards: carry cotangents flow back through the body's backward pass,
    constant cotangents accumulate in extra carries, xs cotangents come out as ys."""
    nc, nk = num_consts, num_carry
    consts, xs = args[:nc], args[nc + nk:]
    # A known initial carry (zeros the JVP instantiated) only offsets the result: the loop is
    # linear in it, so transpose as if it were linear and drop its cotangent.
    carry_known = [not isinstance(c, Linear) for c in args[nc:nc + nk]]
    carry = [c if isinstance(c, Linear) else Linear(aval_of(c)) for c in args[nc:nc + nk]]
    known_consts = [c for c in consts if not isinstance(c, Linear)]
    lin_consts = [c for c in consts if isinstance(c, Linear)]
    known_xs = [x for x in xs if not isinstance(x, Linear)]
    ct_carry = [instantiate(ct, c.aval) for ct, c in zip(cts[:nk], carry)]
    ct_ys = [instantiate(ct, a.stacked(length)) for ct, a in zip(cts[nk:], jaxpr.out_avals[nk:])]
    acc = [zeros_like_aval(c.aval) for c in lin_consts]
    body_in = jaxpr.in_avals

    def body_t(*vals):
        it = iter(vals)
        kc = [next(it) for _ in known_consts]
        acc_in = [next(it) for _ in lin_consts]
        ct_c = [next(it) for _ in range(nk)]
        kx = [next(it) for _ in known_xs]
        ct_y = [next(it) for _ in range(len(ct_ys))]
        it_kc, it_kx = iter(kc), iter(kx)
        block_args = ([Linear(a) if isinstance(c, Linear) else next(it_kc)
                       for c, a in zip(consts, body_in[:nc])]
                      + [Linear(a) for a in body_in[nc:nc + nk]]
                      + [Linear(a) if isinstance(x, Linear) else next(it_kx)
                         for x, a in zip(xs, body_in[nc + nk:])])
        in_cts = backward_pass(jaxpr, block_args, ct_c + ct_y)
        it_ct = iter(in_cts)
        const_cts = [next(it_ct) for c in consts if isinstance(c, Linear)]
        carry_cts = [next(it_ct) for _ in range(nk)]
        x_cts = [next(it_ct) for x in xs if isinstance(x, Linear)]
        new_acc = [add_tangents(a, ct) for a, ct in zip(acc_in, const_cts)]
        carry_cts = [instantiate(ct, a) for ct, a in zip(carry_cts, body_in[nc:nc + nk])]
        lin_x_avals = [a for x, a in zip(xs, body_in[nc + nk:]) if isinstance(x, Linear)]
        x_cts = [instantiate(ct, a) for ct, a in zip(x_cts, lin_x_avals)]
        return new_acc + carry_cts + x_cts

    slice_aval = lambda v: aval_of(v).unstacked()
    avals = ([aval_of(c) for c in known_consts] + [c.aval for c in lin_consts]
             + [c.aval for c in carry] + [slice_aval(x) for x in known_xs]
             + [slice_aval(ct) for ct in ct_ys])
    body, closed = _trace(body_t, avals)
    outs = bind(p.scan_p, *closed, *known_consts, *acc, *ct_carry, *known_xs, *ct_ys,
                jaxpr=body, length=length, reverse=not reverse,
                num_consts=len(closed) + len(known_consts), num_carry=len(acc) + nk)
    acc_out = outs[:len(acc)]
    carry_out = outs[len(acc):len(acc) + nk]
    xs_out = outs[len(acc) + nk:]
    it_acc, it_x = iter(acc_out), iter(xs_out)
    return ([next(it_acc) if isinstance(c, Linear) else None for c in consts]
            + [None if known else ct for ct, known in zip(carry_out, carry_known)]
            + [next(it_x) if isinstance(x, Linear) else None for x in xs])


transpose_rules[p.scan_p] = _scan_transpose


# --- while: forward mode only -------------------------------------------------------------------

def _while_jvp(primals, tangents, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    cn, bn = cond_nconsts, body_nconsts
    carry = primals[cn + bn:]
    nk = len(carry)
    body_const_nz = [t is not None for t in tangents[cn:cn + bn]]
    nonzero = body_const_nz + [True] * nk
    # arrays a custom rule in the body closed over become its first constants
    body, rule_consts = jvp_program_with_consts(body_jaxpr, nonzero,
                                                shard=current_shard_context())
    k = len(rule_consts)
    n_bt = sum(body_const_nz)
    n_in = bn + nk
    in_order = (list(range(bn)) + list(range(n_in, n_in + n_bt)) + list(range(bn, n_in))
                + list(range(n_in + n_bt, n_in + n_bt + nk)))
    in_order = list(range(k)) + [i + k for i in in_order]
    body = _reorder(body, in_order, list(range(2 * nk)))
    # the condition reads the primal carries only
    extra = [Var(v.aval) for v in cond_jaxpr.invars[cn:]]
    cond = Program([], list(cond_jaxpr.invars) + extra, cond_jaxpr.eqns, cond_jaxpr.outvars)
    carry_t = [instantiate(t, aval_of(x)) for t, x in zip(tangents[cn + bn:], carry)]
    outs = bind(p.while_p, *primals[:cn], *rule_consts, *primals[cn:cn + bn],
                *[t for t in tangents[cn:cn + bn] if t is not None], *carry, *carry_t,
                cond_jaxpr=cond, body_jaxpr=body, cond_nconsts=cn, body_nconsts=k + bn + n_bt)
    return outs[:nk], outs[nk:]


def _while_transpose(cts, *args, **params):
    raise ValueError("Reverse-mode differentiation does not work for lax.while_loop or "
                     "lax.fori_loop with dynamic start/stop values. Try using lax.scan, or using "
                     "fori_loop with static start/stop.")


jvp_rules[p.while_p] = _while_jvp
transpose_rules[p.while_p] = _while_transpose


# --- cond ----------------------------------------------------------------------------------------

def _cond_jvp(primals, tangents, *, branches):
    index, *ops = primals
    op_tangents = tangents[1:]
    nonzero = [t is not None for t in op_tangents]
    # arrays a custom rule in a branch closed over become leading operands of every branch
    # (each branch ignores the others')
    traced = [jvp_program_with_consts(b, nonzero, shard=current_shard_context())
              for b in branches]
    all_consts, new_branches = _over_every_branchs_consts(traced)
    outs = bind(p.cond_p, index, *all_consts, *ops, *[t for t in op_tangents if t is not None],
                branches=tuple(new_branches))
    n = len(branches[0].outvars)
    return outs[:n], outs[n:]


def _over_every_branchs_consts(traced) -> tuple:
    """``(constants, programs)`` for branches traced with constants of their own (``traced``:
    ``(program, its constants)`` each): every branch takes every branch's constants as its
    leading operands, in branch order, and ignores the others'."""
    all_consts = [c for _, consts in traced for c in consts]
    programs = []
    offset = 0
    for program, consts in traced:
        before = [Var(aval_of(c)) for c in all_consts[:offset]]
        after = [Var(aval_of(c)) for c in all_consts[offset + len(consts):]]
        own = program.invars[:len(consts)]
        programs.append(Program([], before + own + after + program.invars[len(consts):],
                                program.eqns, program.outvars))
        offset += len(consts)
    return all_consts, programs


def _cond_transpose(cts, index, *ops, branches):
    """Each branch transposed (recomputing its non-linear part); the taken one runs.

    Under a predicate that varies over axes ``q`` the branches transpose with per-device
    cotangents along ``q`` (see ``per_device_cotangents``), and an operand that does not vary
    over an axis of ``q`` gets the sum of every device's contribution along it."""
    if isinstance(index, Linear):
        raise ValueError("cond is not linear in its index")
    linear = [isinstance(o, Linear) for o in ops]
    known = [o for o in ops if not isinstance(o, Linear)]
    out_avals = branches[0].out_avals
    filled = [instantiate(ct, a) for ct, a in zip(cts, out_avals)]
    lin_avals = [o.aval for o in ops if isinstance(o, Linear)]
    q = aval_of(index).vma if check_on() else frozenset()
    new_branches = []
    for branch in branches:
        def branch_t(*vals, branch=branch):
            it_known = iter(vals[:len(known)])
            args = [Linear(a) if lin else next(it_known)
                    for a, lin in zip(branch.in_avals, linear)]
            in_cts = backward_pass(branch, args, list(vals[len(known):]))
            return [instantiate(ct, a) for ct, a in zip(in_cts, lin_avals)]

        with per_device_cotangents(q):
            program, consts = _trace(branch_t, [aval_of(k) for k in known] +
                                     [aval_of(c) for c in filled])
        new_branches.append((program, consts))
    all_consts, programs = _over_every_branchs_consts(new_branches)
    outs = bind(p.cond_p, index, *all_consts, *known, *filled, branches=tuple(programs))
    it = iter(outs)
    return [None] + [_sum_contributions(next(it), o.aval, q) if lin else None
                     for o, lin in zip(ops, linear)]


def _sum_contributions(ct, aval: Aval, q):
    """An operand's cotangent from branches transposed per device along ``q``: summed over the
    axes of ``q`` the operand does not vary over (an enclosing cond's per-device axes stay
    per-device; its own transpose sums them)."""
    shard = current_shard_context()
    summed = q - aval.vma - per_device_axes()
    if not summed or shard is None:
        return ct
    axes = tuple(a for a in shard.mesh.axis_names if a in summed)
    return bind(coll.psum_p, ct, mesh_axes=axes)


jvp_rules[p.cond_p] = _cond_jvp
transpose_rules[p.cond_p] = _cond_transpose


# --- cond: partial evaluation ----------------------------------------------------------------------

def _cond_partial_eval(eqn: Eqn, ins_unknown: list):
    """A known cond computing the known outputs and every branch's residuals (zeros for the
    branches not taken), and an unknown cond computing the rest from them."""
    from ir.core import Literal
    if ins_unknown[0]:
        return [], [eqn], list(eqn.outvars)
    branches = eqn.params["branches"]
    ops_uk = list(ins_unknown[1:])
    n_out = len(branches[0].outvars)
    out_uk = [False] * n_out
    for branch in branches:
        split = partial_eval(branch, ops_uk, [False] * n_out)
        out_uk = [a or b for a, b in zip(out_uk, split.out_unknown)]
    splits = [partial_eval(b, ops_uk, out_uk) for b in branches]
    res_lists = [s.known.outvars[len(s.known.outvars) - s.num_residuals:] for s in splits]
    slots = [r for res in res_lists for r in res]
    known_branches, unknown_branches = [], []
    for k, (split, res) in enumerate(zip(splits, res_lists)):
        keep = split.known.outvars[:len(split.known.outvars) - split.num_residuals]
        eqns = list(split.known.eqns)
        outs = list(keep)
        for owner, owner_res in enumerate(res_lists):
            for r in owner_res:
                if owner == k:
                    outs.append(r)
                    continue
                zero = Var(r.aval)
                literal = Literal(np.zeros((), r.aval.dtype), Aval((), r.aval.dtype))
                eqns.append(Eqn(p.broadcast_in_dim_p, [literal], [zero],
                                dict(shape=r.aval.shape, broadcast_dimensions=())))
                outs.append(zero)
        known_branches.append(Program([], list(split.known.invars), eqns, outs))
        # the unknown branch reads its own residual slots and ignores the others
        entries = [r if owner == k else Var(r.aval)
                   for owner, owner_res in enumerate(res_lists) for r in owner_res]
        unknown_branches.append(Program([], entries + list(split.unknown.invars[len(res):]),
                                        split.unknown.eqns, split.unknown.outvars))
    index, ops = eqn.invars[0], eqn.invars[1:]
    # a device's residuals are those of the branch it took: they vary over the predicate's axes
    q = index.aval.vma if isinstance(index, Var) else frozenset()
    outer_res = [Var(r.aval.update(vma=r.aval.vma | q) if q else r.aval) for r in slots]
    known_eqn = Eqn(p.cond_p, [index] + [a for a, u in zip(ops, ops_uk) if not u],
                    [v for v, u in zip(eqn.outvars, out_uk) if not u] + outer_res,
                    dict(branches=tuple(known_branches)), eqn.source)
    unknown_eqn = Eqn(p.cond_p, [index] + outer_res + [a for a, u in zip(ops, ops_uk) if u],
                      [v for v, u in zip(eqn.outvars, out_uk) if u],
                      dict(branches=tuple(unknown_branches)), eqn.source)
    return [known_eqn], [unknown_eqn], [v for v, u in zip(eqn.outvars, out_uk) if u]


partial_eval_rules[p.cond_p] = _cond_partial_eval


def _while_partial_eval(eqn: Eqn, ins_unknown: list):
    """As JAX's: the carries that stay known (those that neither read an unknown value nor
    decide when the loop stops with one) loop on the known side; the whole loop runs again
    on the unknown side, its known inputs as residuals. A linearized loop runs forward;
    transposing it is the error of ``_while_transpose``."""
    params = eqn.params
    cn, bn = params["cond_nconsts"], params["body_nconsts"]
    cond, body = params["cond_jaxpr"], params["body_jaxpr"]
    cond_uk, body_uk, carry_uk = ins_unknown[:cn], ins_unknown[cn:cn + bn], ins_unknown[cn + bn:]
    whole = [], [eqn], list(eqn.outvars)
    if any(cond_uk):
        return whole
    while True:         # a carry the body makes unknown is unknown from the start
        outs_uk = partial_eval(body, body_uk + carry_uk, [False] * len(carry_uk)).out_unknown
        grown = [a or b for a, b in zip(carry_uk, outs_uk)]
        if grown == carry_uk:
            break
        carry_uk = grown
    if not any(carry_uk):
        return [eqn], [], []
    if partial_eval(cond, cond_uk + carry_uk, [False]).out_unknown[0]:
        return whole
    keep = [not u for u in carry_uk]
    body_keep = [not u for u in body_uk]
    # what the known carries need reads no unknown input
    known_body = dce(Program([], list(body.invars), body.eqns, _kept(body.outvars, keep)))
    known_body = Program([], _kept(body.invars, body_keep + keep), known_body.eqns,
                         known_body.outvars)
    known_cond = Program([], _kept(cond.invars, [True] * cn + keep), cond.eqns, cond.outvars)
    ins = eqn.invars
    known = Eqn(p.while_p,
                ins[:cn] + _kept(ins[cn:cn + bn], body_keep) + _kept(ins[cn + bn:], keep),
                _kept(eqn.outvars, keep),
                dict(params, cond_jaxpr=known_cond, body_jaxpr=known_body,
                     body_nconsts=sum(body_keep)), eqn.source)
    # the unknown side computes the known carries again: under other names
    outs = [v if u else Var(v.aval) for v, u in zip(eqn.outvars, carry_uk)]
    unknown = Eqn(p.while_p, list(ins), outs, dict(params), eqn.source)
    return [known], [unknown], _kept(outs, carry_uk)


def _kept(items, keep) -> list:
    return [item for item, k in zip(items, keep) if k]


partial_eval_rules[p.while_p] = _while_partial_eval
