"""Autodiff of collectives and of shard_map itself (SEMANTICS 2.9 and 4).

Collectives are linear: their tangent is the collective of the tangent. Transposes follow
SEMANTICS 2.9; with the replication check on, ``psum`` and ``pvary`` transpose to each other
with no rescaling; with it off, ``psum`` transposes to itself and the shard_map boundary
rescales (4.3).

A shard_map is differentiated as a whole: its JVP is a shard_map of the body's JVP; partial
evaluation splits it into a shard_map computing the known outputs and the residuals (which
leave the body as per-device values, their leading dimension mapped over every mesh axis) and
one computing the rest from them; its transpose is a shard_map of the body's backward pass.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math

import numpy as np

from compiler.ad_core import (Linear, backward_pass, instantiate, jvp_program_with_consts,
                               jvp_rules,
                               partial_eval, partial_eval_rules, transpose_rules)
from compiler.shard_map import ShardContext, current_shard_context, in_body, lift_to_out_spec
from compiler.tracing import (aval_of, bind, current_trace, enclosing_spmd_axes,
                              trace_to_program)
from ir import primitives as p
from ir import collectives as coll
from ir.core import Aval, Eqn, Program, TypeSharding, Var
from ir.sharding import PartitionSpec, axes_size, canonical_spec, spec_axes
from ir.sharding_rules import shard_map_result_split

# --- whether the enclosing shard_map checks replication, while transposing its body ---------------
#
# Each entry is (check on, per-device axes). The per-device axes are those of the predicates of
# the conds whose branches are being transposed: devices along them may have run different
# branches, so along them a cotangent is each device's own contribution, never a total that
# every device holds (SEMANTICS 4; see ``per_device_cotangents``).

_checking_stack: list = []


@contextlib.contextmanager
def _transposing(check: bool, per_device: frozenset = frozenset()):
    _checking_stack.append((check, frozenset(per_device)))
    try:
        yield
    finally:
        _checking_stack.pop()


def check_on() -> bool:
    if _checking_stack:
        return _checking_stack[-1][0]
    shard = current_shard_context()
    return shard is not None and shard.check_vma


def per_device_axes() -> frozenset:
    """The mesh axes along which cotangents are per-device contributions (see above)."""
    return _checking_stack[-1][1] if _checking_stack else frozenset()


def per_device_cotangents(axes):
    """Transpose a cond's branches chosen by a predicate that varies over ``axes``.

    The branches are typed with their operands' own types, as in JAX, so a value the branches
    type invariant over an axis of the predicate is only equal among the devices that ran the
    same branch. Along those axes the collectives then transpose as the linear maps they are
    (``psum`` to ``psum``, ``pvary`` to nothing), and the cond's transpose sums each operand's
    cotangent over the axes the operand itself does not vary over.
    """
    return _transposing(check_on(), per_device_axes() | frozenset(axes))



# --- shard_map: JVP -------------------------------------------------------------------------------

def _shard_map_jvp(primals, tangents, *, jaxpr, mesh, in_specs, out_specs, check_vma):
    nonzero = [t is not None for t in tangents]
    shard = ShardContext(mesh, check_vma is True)
    with in_body(shard):
        # arrays a custom rule closed over (a symbolic zero made whole, say) are the body's:
        # they enter it as inputs every device holds whole
        body, consts = jvp_program_with_consts(jaxpr, nonzero, shard=shard)
    tangent_specs = tuple(s for s, nz in zip(in_specs, nonzero) if nz)
    outs = bind(p.shard_map_p, *consts, *primals, *[t for t in tangents if t is not None],
                jaxpr=body, mesh=mesh,
                in_specs=(PartitionSpec(),) * len(consts) + tuple(in_specs) + tangent_specs,
                out_specs=tuple(out_specs) * 2, check_vma=check_vma)
    n = len(out_specs)
    return outs[:n], outs[n:]


jvp_rules[p.shard_map_p] = _shard_map_jvp


# --- shard_map: partial evaluation ------------------------------------------------------------------

def _residual_axes(aval: Aval, mesh, check: bool) -> tuple:
    """The mesh axes a residual leaves the known body mapped over (SEMANTICS 4.5).

    With the check on, a residual's type is sound: it is equal across the axes it does not
    vary over, so it leaves mapped over its varying axes only and reaches the other body with
    its own type. Lifting it to every axis instead would make the cotangents computed from it
    look varying, and a second differentiation would then sum equal copies (a gradient
    multiplied by the mesh size). With the check off nothing is known, so every axis but
    those an enclosing vmap splits its batch over: batching the shard_map adds those."""
    if not check:
        # nor the Explicit axes its type is split over: a partial-manual body leaves those
        # automatic, and the residual keeps that split across the boundary
        spmd = enclosing_spmd_axes()
        typed = aval.type_sharding.axes if aval.type_sharding is not None else ()
        return tuple(a for a in mesh.axis_names if a not in spmd and a not in typed)
    return tuple(a for a in mesh.axis_names if a in aval.vma)


def _residual_spec(axes: tuple, aval: Aval) -> PartitionSpec:
    """A residual's spec: mapped over ``axes``, unreduced and reduced as its type is (a
    reduced residual stays so in the other body: its cotangents stay partial sums)."""
    ur = dict(unreduced=aval.unreduced, reduced=aval.reduced)
    return canonical_spec(PartitionSpec(axes, **ur)) if axes else PartitionSpec(**ur)


def _shard_map_partial_eval(eqn: Eqn, ins_unknown: list):
    """Split a shard_map whose inputs are partly unknown into a known shard_map (known outputs
    and residuals) and an unknown one (the rest, from the residuals)."""
    params = eqn.params
    body, mesh = params["jaxpr"], params["mesh"]
    split = partial_eval(body, ins_unknown, [False] * len(body.outvars))
    split, forwarded = _forward_inputs(split)
    known_out = [not u for u in split.out_unknown]
    residuals = split.known.outvars[len(split.known.outvars) - split.num_residuals:]
    check = params["check_vma"] is True
    # residuals leave the known body as (1, *block), their leading dim over their mesh axes
    res_axes = [_residual_axes(r.aval, mesh, check) for r in residuals]
    res_specs = tuple(_residual_spec(axes, r.aval) for r, axes in zip(residuals, res_axes))
    known_body = _with_residual_exits(split.known, res_axes, mesh, check)
    exits = known_body.outvars[len(known_body.outvars) - len(residuals):]
    outer_res = [Var(_outer_residual(e.aval, axes, spec, mesh))
                 for e, axes, spec in zip(exits, res_axes, res_specs)]
    known_eqn = Eqn(p.shard_map_p,
                    [a for a, u in zip(eqn.invars, ins_unknown) if not u],
                    [v for v, k in zip(eqn.outvars, known_out) if k] + outer_res,
                    dict(params, jaxpr=known_body,
                         in_specs=tuple(s for s, u in zip(params["in_specs"], ins_unknown)
                                        if not u),
                         out_specs=tuple(s for s, k in zip(params["out_specs"], known_out)
                                         if k) + res_specs),
                    eqn.source)
    unknown_body = _with_residual_entries(split.unknown, res_axes)
    known_ins = [a for a, u in zip(eqn.invars, ins_unknown) if not u]
    known_specs = [s for s, u in zip(params["in_specs"], ins_unknown) if not u]
    unknown_eqn = Eqn(p.shard_map_p,
                      outer_res + [known_ins[k] for k in forwarded]
                      + [a for a, u in zip(eqn.invars, ins_unknown) if u],
                      [v for v, k in zip(eqn.outvars, known_out) if not k],
                      dict(params, jaxpr=unknown_body,
                           in_specs=res_specs
                           + tuple(known_specs[k] for k in forwarded)
                           + tuple(s for s, u in zip(params["in_specs"], ins_unknown) if u),
                           out_specs=tuple(s for s, k in zip(params["out_specs"], known_out)
                                           if not k)),
                      eqn.source)
    unknown_outs = [v for v, k in zip(eqn.outvars, known_out) if not k]
    return [known_eqn], [unknown_eqn], unknown_outs


def _forward_inputs(split):
    """SEMANTICS 4.5: inputs are not emitted again as residuals. A residual that is a known
    input of the body, or a ``pvary`` of one (free to redo), leaves the known body's exits; the
    unknown body reads that input itself, with its in_spec, and redoes the ``pvary``.

    Returns the split (unknown invars: kept residuals, forwarded inputs, unknown inputs) and
    the indices of the forwarded known inputs."""
    known, unknown, n = split.known, split.unknown, split.num_residuals
    residuals = known.outvars[len(known.outvars) - n:]
    position = {id(v): k for k, v in enumerate(known.invars)}
    defined_by = {id(v): e for e in known.eqns for v in e.outvars}
    kept, forwarded, redo = [], [], []
    for res in residuals:
        source = defined_by.get(id(res))
        if id(res) in position:
            k = position[id(res)]
        elif (source is not None and source.primitive is coll.pvary_p
              and isinstance(source.invars[0], Var) and id(source.invars[0]) in position):
            k = position[id(source.invars[0])]
            redo.append(source)
        else:
            kept.append(res)
            continue
        if k not in forwarded:
            forwarded.append(k)
    if not forwarded:
        return split, []
    outs = known.outvars[:len(known.outvars) - n] + kept
    used = {id(a) for e in known.eqns for a in e.invars} | {id(a) for a in outs}
    moved = {id(e) for e in redo}
    eqns = [e for e in known.eqns
            if not (id(e) in moved and not any(id(v) in used for v in e.outvars))]
    new_known = Program([], list(known.invars), eqns, outs)
    new_unknown = Program([], kept + [known.invars[k] for k in forwarded] + unknown.invars[n:],
                          [Eqn(e.primitive, list(e.invars), list(e.outvars), dict(e.params),
                               e.source) for e in redo] + list(unknown.eqns),
                          list(unknown.outvars))
    return dataclasses.replace(split, known=new_known, unknown=new_unknown,
                               num_residuals=len(kept)), forwarded


def _with_residual_exits(known: Program, res_axes: list, mesh, check: bool) -> Program:
    """Append a reshape per residual to (1, *block), after a ``pvary`` over the axes of its
    exit it does not already vary over (with the check off: none; its exit spans every axis)."""
    num_res = len(res_axes)
    keep = known.outvars[:len(known.outvars) - num_res]
    eqns = list(known.eqns)
    exits = []
    for res, axes in zip(known.outvars[len(known.outvars) - num_res:], res_axes):
        value = res
        exit_vma = frozenset(axes) if check else res.aval.vma
        missing = tuple(a for a in axes if a not in res.aval.vma)
        if check and missing:
            lifted = Var(res.aval.update(vma=exit_vma))
            eqns.append(Eqn(coll.pvary_p, [value], [lifted], dict(mesh_axes=missing)))
            value = lifted
        shaped = Var(_with_leading_one(res.aval, exit_vma))
        eqns.append(Eqn(p.reshape_p, [value], [shaped], dict(new_sizes=(1,) + res.aval.shape)))
        exits.append(shaped)
    return Program([], list(known.invars), eqns, keep + exits)


def _outer_residual(exit_aval: Aval, axes: tuple, spec, mesh) -> Aval:
    """The known shard_map's result for a residual leaving as ``exit_aval`` (1, *block),
    its leading dimension over ``axes``; typed as a shard_map result where the block keeps a
    split over Explicit axes left automatic."""
    out = Aval((axes_size(mesh.shape, axes),) + exit_aval.shape[1:], exit_aval.dtype,
               unreduced=exit_aval.unreduced, reduced=exit_aval.reduced)
    if exit_aval.type_sharding is None:
        return out
    return out.with_sharding(TypeSharding.of(mesh, shard_map_result_split(mesh, spec,
                                                                          exit_aval)))


def _with_leading_one(aval: Aval, vma) -> Aval:
    """``aval`` with a leading dimension of 1, varying over ``vma``; its split over the
    Explicit axes a partial-manual shard_map leaves automatic is kept on the dimensions after
    (a residual crosses the boundary typed as the body made it)."""
    shaped = Aval((1,) + aval.shape, aval.dtype, vma, unreduced=aval.unreduced,
                  reduced=aval.reduced)
    typed = aval.type_sharding
    if typed is None:
        return shaped
    return shaped.with_sharding(TypeSharding.of(typed.mesh, ((),) + tuple(typed.spec)))


def _with_residual_entries(unknown: Program, res_axes: list) -> Program:
    """Residual blocks arrive as (1, *block); reshape them back to the values the body reads,
    with the types they had in the known body."""
    entries, eqns = [], []
    for res in unknown.invars[:len(res_axes)]:
        block = Var(_with_leading_one(res.aval, res.aval.vma))
        entries.append(block)
        eqns.append(Eqn(p.reshape_p, [block], [res], dict(new_sizes=res.aval.shape)))
    return Program([], entries + list(unknown.invars[len(res_axes):]),
                   eqns + list(unknown.eqns), list(unknown.outvars))


partial_eval_rules[p.shard_map_p] = _shard_map_partial_eval


# --- shard_map: transpose -------------------------------------------------------------------------

def _shard_map_transpose(cts, *args, jaxpr, mesh, in_specs, out_specs, check_vma):
    """A shard_map whose body is the backward pass of this one's body (SEMANTICS 4.3)."""
    check = check_vma is True
    linear = [isinstance(a, Linear) for a in args]
    known = [a for a in args if not isinstance(a, Linear)]
    known_specs = tuple(s for s, lin in zip(in_specs, linear) if not lin)
    nonzero = [ct is not None for ct in cts]
    # a reduced value's cotangent is unreduced, and the other way round
    ct_specs = tuple(s.to_ct_spec() for s, nz in zip(out_specs, nonzero) if nz)
    lin_specs = tuple(s.to_ct_spec() for s, lin in zip(in_specs, linear) if lin)
    body_in = jaxpr.in_avals
    known_avals = [a for a, lin in zip(body_in, linear) if not lin]
    ct_avals = [a.to_ct() for a, nz in zip(jaxpr.out_avals, nonzero) if nz]

    def body(*blocks):
        it_known = iter(blocks[:len(known_avals)])
        it_ct = iter(blocks[len(known_avals):])
        block_args = [Linear(a) if lin else next(it_known) for a, lin in zip(body_in, linear)]
        block_cts = [next(it_ct) if nz else None for nz in nonzero]
        if not check:
            block_cts = [_rescale(ct, spec, mesh) for ct, spec in zip(block_cts, out_specs)]
        with _transposing(check):
            in_cts = backward_pass(jaxpr, block_args, block_cts)
        outs = []
        for ct, aval, spec in zip(in_cts, [a for a, lin in zip(body_in, linear) if lin],
                                  lin_specs):
            ct = instantiate(ct, aval.strip_vma().to_ct())
            outs.append(_reduce_unmapped(ct, spec, mesh) if not check
                        else lift_to_out_spec(ct, spec, mesh))
        return outs

    shard = ShardContext(mesh, check)
    with in_body(shard):
        transposed, consts, _ = trace_to_program(body, known_avals + ct_avals, shard=shard,
                                                 parent=current_trace())
    transposed = Program([], transposed.constvars + transposed.invars, transposed.eqns,
                         transposed.outvars)
    outs = bind(p.shard_map_p, *consts, *known, *[ct for ct in cts if ct is not None],
                jaxpr=transposed, mesh=mesh,
                in_specs=(PartitionSpec(),) * len(consts) + known_specs + ct_specs,
                out_specs=lin_specs, check_vma=check_vma)
    it = iter(outs)
    return [next(it) if lin else None for lin in linear]


def _unmentioned(spec, mesh) -> tuple:
    """The mesh axes ``spec`` leaves unmapped, but those an enclosing vmap splits its batch
    over: batching the shard_map maps the batch over them."""
    spmd = enclosing_spmd_axes()
    return tuple(a for a in mesh.axis_names if a not in spec_axes(spec) and a not in spmd)


def _rescale(ct, spec, mesh):
    """Check off: an output unmapped along some axes counts once, not once per device."""
    if ct is None:
        return None
    omitted = _unmentioned(spec, mesh)
    if not omitted:
        return ct
    size = math.prod(mesh.shape[a] for a in omitted)
    return bind(p.div_p, ct, np.asarray(size, aval_of(ct).dtype)[()])


def _reduce_unmapped(ct, spec, mesh):
    """Check off: an input unmapped along some axes gets the sum over them."""
    omitted = _unmentioned(spec, mesh)
    return bind(coll.psum_p, ct, mesh_axes=omitted) if omitted else ct


transpose_rules[p.shard_map_p] = _shard_map_transpose
