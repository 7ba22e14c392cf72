"""Batching rules for ``scan`` and ``cond``: the loop or branch runs once, on whole batches.

The sub-program is traced again under a BatchTrace of the same vmap (so collectives over the
vmap's named axis inside it act across the members, in lockstep), with every batched value's
batch axis in front. A scan's carry is batched when its initial value or its update is, found
by a fixpoint as in JAX; its ``xs`` and ``ys`` carry the batch axis second, after the scanned
axis. A cond with an unbatched index runs the chosen branch batched; with a batched index
every branch runs and each member selects its own result.

    vmap(lambda c, xs: lax.scan(f, c, xs))(cs f32[B,3], xss f32[B,T,3])
        == scan(vmap(f), cs f32[B,3], xss moved to f32[T,B,3])   ys f32[T,B,...] -> [B,T,...]
"""
from __future__ import annotations

import numpy as np

from compiler.batching import (BatchTrace, BatchTracer, check_spmd_unused, explicit_split,
                               shape_of, spec_entry, spmd_split, batch_at, batch_spec,
                               broadcast_batch, control_rules, current_batch_split,
                               moveaxis)
from compiler.control_flow import share_consts
from compiler.shard_map import ShardContext, current_shard_context, in_body
from compiler.tracing import (Replay, aval_of, bind, current_trace, set_current_trace,
                              trace_to_program)
from ir import primitives as prims
from ir.core import Program, TypeSharding
from ir.graph import io_effects
from ir.sharding import PartitionSpec



# --- sub-programs on batches -------------------------------------------------------------------

def _replay(program: Program, args, after_eqn=None) -> list:
    """Bind each equation of ``program`` in the current trace; ``after_eqn(k)`` is called
    after equation k."""
    return Replay(after_eqn).run(program, args)


def batch_program(trace: BatchTrace, program: Program, batched: list, batch_out: list,
                  origins: list | None = None):
    """``program`` run on batches: inputs marked ``batched`` hold the batch on axis 0.

    Outputs marked in ``batch_out`` are batched on axis 0 even when the program leaves them
    the same for every member. Returns (program, closed-over values, which outputs are
    batched); closed-over values become the program's leading inputs. ``origins``, if given,
    receives for each new equation the index of the equation it was made for (None after).
    """
    size = trace.axis_size
    out_batched: list = []

    def run(*args):
        staging = current_trace()
        inner = BatchTrace(staging, size, axis=trace.axis,
                           spmd_axis_name=trace.spmd_axis_name, spmd=trace.spmd)
        inner.batch_spec = trace.batch_spec
        tracers = [BatchTracer(inner, a, 0) if b else a for a, b in zip(args, batched)]

        def tag(k):
            if origins is not None:
                origins.extend([k] * (len(staging.eqns) - len(origins)))

        with set_current_trace(inner):
            outs = [inner.unwrap(o) for o in _replay(program, tracers, tag)]
        results = []
        for (value, dim), force in zip(outs, batch_out):
            if dim is None and not force:
                results.append(value)
                out_batched.append(False)
            else:
                results.append(batch_at(value, dim, size, 0))
                out_batched.append(True)
        return results

    in_avals = [_batched_aval(a, size) if b else a for a, b in zip(program.in_avals, batched)]
    traced, consts, _ = trace_to_program(run, in_avals, shard=current_shard_context(),
                                         parent=current_trace())
    closed = Program([], traced.constvars + traced.invars, traced.eqns, traced.outvars)
    return closed, consts, out_batched


def _batched_aval(aval, size: int):
    """A batch of ``aval`` (batch axis in front) split as ``aval`` is, its batch axis split as
    the batched operands of the equation being batched split theirs (where those axes are
    free): a loop's carry keeps both splits."""
    sharding = aval.type_sharding
    spec = sharding.spec if sharding is not None else ((),) * aval.ndim
    mesh, batch_axes = (sharding.mesh if sharding is not None else None), ()
    split = current_batch_split()
    if split is not None and not set(split[1]) & {a for names in spec for a in names}:
        mesh, batch_axes = split[0], tuple(split[1])
    batched = aval.update(shape=(size,) + aval.shape)
    if mesh is None:
        return batched
    return batched.update(type_sharding=TypeSharding.of(mesh, (batch_axes,) + tuple(spec)))


def _leading(values, dims) -> list:
    """Batched values with the batch axis in front; unbatched ones unchanged."""
    return [v if d is None else moveaxis(v, d, 0) for v, d in zip(values, dims)]


# --- scan --------------------------------------------------------------------------------------

def _scan_rule(trace, values, dims, *, jaxpr, length, reverse, num_consts, num_carry):
    size = trace.axis_size
    nc, nk = num_consts, num_carry
    const_dims, carry_dims, x_dims = dims[:nc], dims[nc:nc + nk], dims[nc + nk:]
    carry_batched = [d is not None for d in carry_dims]
    in_batched = [d is not None for d in const_dims] + carry_batched + [
        d is not None for d in x_dims]
    n_ys = len(jaxpr.outvars) - nk
    while True:
        body, body_consts, out_batched = batch_program(
            trace, jaxpr, in_batched, carry_batched + [False] * n_ys)
        grown = [c or o for c, o in zip(carry_batched, out_batched[:nk])]
        if grown == carry_batched:
            break
        carry_batched = grown
        in_batched[nc:nc + nk] = grown
    consts = _leading(values[:nc], const_dims)
    init = [batch_at(v, d, size, 0) if b else v
            for v, d, b in zip(values[nc:nc + nk], carry_dims, carry_batched)]
    # xs keep the scanned axis in front: the batch axis goes second.
    xs = [v if d is None else moveaxis(v, d, 1) for v, d in zip(values[nc + nk:], x_dims)]
    outs = bind(prims.scan_p, *body_consts, *consts, *init, *xs, jaxpr=body, length=length,
                reverse=reverse, num_consts=len(body_consts) + nc, num_carry=nk)
    out_dims = [0 if b else None for b in carry_batched] + [
        1 if b else None for b in out_batched[nk:]]
    return outs, out_dims


control_rules[prims.scan_p] = _scan_rule


# --- cond --------------------------------------------------------------------------------------

def _cond_rule(trace, values, dims, *, branches):
    (index, *operands), (index_dim, *operand_dims) = values, dims
    if any(io_effects(b) for b in branches):       # JAX's: whether or not the index is batched
        raise NotImplementedError("IO effect not supported in vmap-of-cond.")
    batched = [d is not None for d in operand_dims]
    operands = _leading(operands, operand_dims)
    if index_dim is not None:
        return _cond_by_member(trace, moveaxis(index, index_dim, 0), operands, batched,
                               branches)
    # Every branch returns each result batched if any branch does.
    traced = [batch_program(trace, b, batched, [False] * len(b.outvars)) for b in branches]
    batch_out = [any(t[2][k] for t in traced) for k in range(len(branches[0].outvars))]
    if any(t[2] != batch_out for t in traced):
        traced = [batch_program(trace, b, batched, batch_out) for b in branches]
    programs, consts = share_consts(traced)
    outs = bind(prims.cond_p, index, *consts, *operands, branches=tuple(programs))
    return outs, [0 if b else None for b in batch_out]


def _cond_by_member(trace, index, operands, batched, branches):
    """A cond whose index is batched (in front): every branch runs on every member, and each
    member keeps its branch's results. As JAX's, a branch sees a member's operands through a
    stop_gradient where the member takes another branch: that branch's derivative there (inf
    from sqrt at 0, say, times a zero cotangent) never reaches the operands."""
    size = trace.axis_size
    operands = [v if b else broadcast_batch(v, size, 0) for v, b in zip(operands, batched)]
    n_out = len(branches[0].outvars)
    results = []
    for k, branch in enumerate(branches):
        program, consts, _ = batch_program(trace, branch, [True] * len(operands), [True] * n_out)
        taken = bind(prims.eq_p, index, np.asarray(k, aval_of(index).dtype))
        guarded = [_select(taken, [bind(prims.stop_gradient_p, v), v], True, size)
                   for v in operands]
        results.append(_replay(program, list(consts) + guarded))
    outs = [_select(index, [r[k] for r in results], True, size) for k in range(n_out)]
    return outs, [0] * n_out


def _select(index, cases, batched: bool, size: int):
    """Each member's case by its own ``index`` (an integer or boolean per member, of shape
    (members,))."""
    cases = [c if batched else broadcast_batch(c, size, 0) for c in cases]
    shape = shape_of(cases[0])
    which = bind(prims.broadcast_in_dim_p, index, shape=shape, broadcast_dimensions=(0,))
    return bind(prims.select_n_p, which, *cases)


control_rules[prims.cond_p] = _cond_rule


# --- while_loop --------------------------------------------------------------------------------

def _while_rule(trace, values, dims, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    """A batched predicate: the loop runs while any member's holds, and only the members whose
    predicate holds take each step (every carry then batched), as in JAX."""
    nc, nb = cond_nconsts, body_nconsts
    cond_b = [d is not None for d in dims[:nc]]
    body_b = [d is not None for d in dims[nc:nc + nb]]
    carry_b = [d is not None for d in dims[nc + nb:]]
    body, body_consts, carry_b = _batched_loop_body(trace, body_jaxpr, body_b, carry_b)
    cond, cond_consts, (pred_b,) = batch_program(trace, cond_jaxpr, cond_b + carry_b, [False])
    if pred_b and "IOEffect" in io_effects(body_jaxpr) + io_effects(cond_jaxpr):
        # every member would run each step's callback, its predicate held or not
        raise Exception("Unordered IO effects not supported in while_loop with batched "
                        "predicate")
    if pred_b and not all(carry_b):
        carry_b = [True] * len(carry_b)
        body, body_consts, _ = batch_program(trace, body_jaxpr, body_b + carry_b, carry_b)
        cond, cond_consts, _ = batch_program(trace, cond_jaxpr, cond_b + carry_b, [False])
    size = trace.axis_size
    cond_ops = list(cond_consts) + _leading(values[:nc], dims[:nc])
    body_ops = list(body_consts) + _leading(values[nc:nc + nb], dims[nc:nc + nb])
    init = [batch_at(v, d, size, 0) if b else v
            for v, d, b in zip(values[nc + nb:], dims[nc + nb:], carry_b)]
    if pred_b:
        cond, body = _any_member_cond(cond, cond_ops), _masked_body(cond, body, cond_ops,
                                                                     body_ops)
        body_ops = cond_ops + body_ops
    outs = bind(prims.while_p, *cond_ops, *body_ops, *init, cond_jaxpr=cond, body_jaxpr=body,
                cond_nconsts=len(cond_ops), body_nconsts=len(body_ops))
    return outs, [0 if b else None for b in carry_b]


def _batched_loop_body(trace, body_jaxpr, consts_b, carry_b):
    """The body batched, with the carries batched where the initial value or an update is."""
    while True:
        body, consts, out_b = batch_program(trace, body_jaxpr, consts_b + carry_b, carry_b)
        grown = [c or o for c, o in zip(carry_b, out_b)]
        if grown == carry_b:
            return body, consts, carry_b
        carry_b = grown


def _trace_closed(fun, avals) -> Program:
    program, consts, _ = trace_to_program(fun, avals, shard=current_shard_context(),
                                          parent=current_trace())
    if consts:       # the programs it replays are closed, so nothing is closed over
        raise AssertionError("a batched while_loop program closed over values")
    return program


def _any_member_cond(cond: Program, cond_ops) -> Program:
    """Whether any member's predicate holds."""
    n = len(cond_ops)

    def any_member(*args):
        (pred,) = _replay(cond, list(args))
        return [bind(prims.reduce_or_p, pred, axes=(0,))]

    return _trace_closed(any_member, cond.in_avals[:n] + cond.in_avals[n:])


def _masked_body(cond: Program, body: Program, cond_ops, body_ops) -> Program:
    """One step for the members whose predicate holds; the others keep their carry. Takes the
    predicate's operands, then the body's, then the carries."""
    nc, nb = len(cond_ops), len(body_ops)

    def masked(*args):
        cond_args, body_args, carry = args[:nc], args[nc:nc + nb], list(args[nc + nb:])
        (pred,) = _replay(cond, list(cond_args) + carry)
        stepped = _replay(body, list(body_args) + carry)
        outs = []
        for old, new in zip(carry, stepped):
            which = bind(prims.broadcast_in_dim_p, pred, shape=shape_of(new),
                         broadcast_dimensions=(0,))
            outs.append(bind(prims.select_n_p, which, old, new))
        return outs

    avals = cond.in_avals[:nc] + body.in_avals[:nb] + body.in_avals[nb:]
    return _trace_closed(masked, avals)


control_rules[prims.while_p] = _while_rule


# --- remat -------------------------------------------------------------------------------------

def _remat_rule(trace, values, dims, *, jaxpr, saved):
    """The body batched; the policy's saved equations are those made for saved ones."""
    origins: list = []
    body, consts, out_b = batch_program(trace, jaxpr, [d is not None for d in dims],
                                        [False] * len(jaxpr.outvars), origins)
    kept = set(saved)
    new_saved = tuple(k for k, origin in enumerate(origins) if origin in kept)
    outs = bind(prims.remat_p, *consts, *_leading(values, dims), jaxpr=body, saved=new_saved)
    return outs, [0 if b else None for b in out_b]


control_rules[prims.remat_p] = _remat_rule


# --- a staged shard_map ------------------------------------------------------------------------

def _shard_map_rule(trace, values, dims, *, jaxpr, mesh, in_specs, out_specs, check_vma):
    """A shard_map equation (a gradient's, say): its body batched, the batch axis in front of
    each batched input's and output's spec, as for a shard_map traced under vmap."""
    split = (spmd_split(trace, mesh, in_specs, "in_specs")
             or explicit_split(trace, mesh, in_specs, values, dims))
    local = trace.axis_size if split is None else trace.axis_size // split.size
    entry = None if split is None else spec_entry(split.mesh_axes)
    spmd_vma = frozenset() if split is None else frozenset(split.mesh_axes)
    batched = [d is not None for d in dims]
    block_trace = BatchTrace(trace.parent, local, tag=trace.tag, axis=trace.axis,
                             spmd_axis_name=trace.spmd_axis_name, spmd=split)
    in_avals = [a.update(shape=(local,) + a.shape, vma=a.vma | spmd_vma) if b else a
                for a, b in zip(jaxpr.in_avals, batched)]
    shard = ShardContext(mesh, check_vma is True)
    with in_body(shard):
        body, consts, out_b = _batch_in_body(block_trace, jaxpr, batched, in_avals, shard)
    new_out_specs = tuple(batch_spec(s, 0, entry) if b else s for s, b in zip(out_specs, out_b))
    if split is not None:
        check_spmd_unused(split, out_specs, "out_specs")
    new_in_specs = (PartitionSpec(),) * len(consts) + tuple(
        batch_spec(s, 0, entry) if b else s for s, b in zip(in_specs, batched))
    outs = bind(prims.shard_map_p, *consts, *_leading(values, dims), jaxpr=body, mesh=mesh,
                in_specs=new_in_specs, out_specs=new_out_specs, check_vma=check_vma)
    return outs, [0 if b else None for b in out_b]


def _batch_in_body(block_trace, jaxpr, batched, in_avals, shard):
    """``batch_program`` for a shard_map body: traced at block avals, in the body's context."""
    out_batched: list = []

    def run(*args):
        inner = BatchTrace(current_trace(), block_trace.axis_size, axis=block_trace.axis,
                           spmd_axis_name=block_trace.spmd_axis_name, spmd=block_trace.spmd)
        tracers = [BatchTracer(inner, a, 0) if b else a for a, b in zip(args, batched)]
        with set_current_trace(inner):
            outs = [inner.unwrap(o) for o in _replay(jaxpr, tracers)]
        out_batched.extend(d is not None for _, d in outs)
        return [v if d is None else moveaxis(v, d, 0) for v, d in outs]

    traced, consts, _ = trace_to_program(run, in_avals, shard=shard, parent=current_trace())
    closed = Program([], traced.constvars + traced.invars, traced.eqns, traced.outvars)
    return closed, consts, out_batched


control_rules[prims.shard_map_p] = _shard_map_rule
