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

from compiler.batching import (BatchTrace, BatchTracer, _shape, batch_at, broadcast_batch,
                               control_rules, moveaxis)
from compiler.control_flow import _share_consts
from compiler.shard_map import current_shard_context
from compiler.tracing import (bind, current_trace, replaying, set_current_trace,
                              trace_to_program)
from ir import primitives as prims
from ir.core import Literal, Program



# --- sub-programs on batches -------------------------------------------------------------------

def _replay(program: Program, args) -> list:
    """Bind each equation of ``program`` in the current trace."""
    env = {id(v): a for v, a in zip(program.invars, args)}

    def read(atom):
        return atom.value[()] if isinstance(atom, Literal) else env[id(atom)]

    for eqn in program.eqns:
        with replaying(eqn.source):
            outs = bind(eqn.primitive, *[read(a) for a in eqn.invars], **eqn.params)
        outs = outs if eqn.primitive.multiple_results else [outs]
        env.update((id(v), o) for v, o in zip(eqn.outvars, outs))
    return [read(a) for a in program.outvars]


def batch_program(trace: BatchTrace, program: Program, batched: list, batch_out: list):
    """``program`` run on batches: inputs marked ``batched`` hold the batch on axis 0.

    Outputs marked in ``batch_out`` are batched on axis 0 even when the program leaves them
    the same for every member. Returns (program, closed-over values, which outputs are
    batched); closed-over values become the program's leading inputs.
    """
    size = trace.axis_size
    out_batched: list = []

    def run(*args):
        inner = BatchTrace(current_trace(), size, axis=trace.axis,
                           spmd_axis_name=trace.spmd_axis_name, spmd=trace.spmd)
        tracers = [BatchTracer(inner, a, 0) if b else a for a, b in zip(args, batched)]
        with set_current_trace(inner):
            outs = [inner.unwrap(o) for o in _replay(program, tracers)]
        results = []
        for (value, dim), force in zip(outs, batch_out):
            if dim is None and not force:
                results.append(value)
                out_batched.append(False)
            else:
                results.append(batch_at(value, dim, size, 0))
                out_batched.append(True)
        return results

    in_avals = [a.update(shape=(size,) + a.shape) if b else a
                for a, b in zip(program.in_avals, batched)]
    traced, consts, _ = trace_to_program(run, in_avals, shard=current_shard_context(),
                                         parent=current_trace())
    closed = Program([], traced.constvars + traced.invars, traced.eqns, traced.outvars)
    return closed, consts, out_batched


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
    size = trace.axis_size
    (index, *operands), (index_dim, *operand_dims) = values, dims
    batched = [d is not None for d in operand_dims]
    operands = _leading(operands, operand_dims)
    # Every branch returns each result batched if any branch does.
    traced = [batch_program(trace, b, batched, [False] * len(b.outvars)) for b in branches]
    batch_out = [any(t[2][k] for t in traced) for k in range(len(branches[0].outvars))]
    if any(t[2] != batch_out for t in traced):
        traced = [batch_program(trace, b, batched, batch_out) for b in branches]
    if index_dim is None:
        programs, consts = _share_consts(traced)
        outs = bind(prims.cond_p, index, *consts, *operands, branches=tuple(programs))
        return outs, [0 if b else None for b in batch_out]
    # A batched index: every branch runs; each member keeps its branch's results.
    results = [_replay(program, list(consts) + operands) for program, consts, _ in traced]
    index = moveaxis(index, index_dim, 0)
    outs = [_select(index, [r[k] for r in results], b, size) for k, b in enumerate(batch_out)]
    return outs, [0] * len(outs)


def _select(index, cases, batched: bool, size: int):
    """Each member's case by its own ``index`` (int32 of shape (members,))."""
    cases = [c if batched else broadcast_batch(c, size, 0) for c in cases]
    shape = _shape(cases[0])
    which = bind(prims.broadcast_in_dim_p, index, shape=shape, broadcast_dimensions=(0,))
    return bind(prims.select_n_p, which, *cases)


control_rules[prims.cond_p] = _cond_rule
