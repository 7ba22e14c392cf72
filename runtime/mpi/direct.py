"""One device on each process of the group: the node completes with MPI's own call, straight
into the result. Member k of the group is then rank k of its communicator.

Each rule is bound once per node and group (``bind``): what the node's parameters decide
(whether MPI's call applies, where a ppermute sends and receives) is worked out then, and the
bound call takes the local member's block and gives its result. A rule that does not apply
binds to None (the general exchange runs instead). Buffers go as bytes: MPI has no type for
bfloat16 and the other narrow floats."""
from __future__ import annotations

import numpy as np

from ir import collectives as coll
from runtime import collectives
from runtime.mpi.agreement import settle_then_wait
from runtime.mpi.exchanges import (contiguous, native_op, native_total,
                                   natively_reducible_type, raw_bytes)


def _all_reduce(comm, k, operand, *, reduction, **params):
    """Gather every member's block (one Allgather), then reduce in group order: bitwise the
    reference's reduction."""
    n = comm.size
    reduce = collectives.in_order_reducer(operand.dtype, reduction, operand.shape)

    def call(block, state):
        gathered = np.empty((n,) + block.shape, block.dtype)
        settle_then_wait(state, [comm.Iallgather(raw_bytes(block), raw_bytes(gathered))])
        return reduce(gathered)
    return call


def _native_all_reduce(comm, k, operand, *, reduction, **params):
    """MPI's own Allreduce (SHARDC_MPI_REDUCTIONS=native): fast, not bit-exact (MPI picks the
    order); the result as the exchange's (``native_total``)."""
    op, n = native_op(reduction), comm.size

    def call(block, state):
        total = np.empty_like(block)
        settle_then_wait(state, [comm.Iallreduce(block, total, op=op)])
        return native_total(total, reduction, n, True)
    return call


def _all_gather(comm, k, operand, *, gather_axis, tiled, **params):
    if gather_axis != 0 or len(operand.shape) == 0 and tiled:
        return None
    n = comm.size

    def call(block, state):
        out = np.empty(((n * block.shape[0],) if tiled else (n,)) + block.shape[tiled:],
                       block.dtype)
        settle_then_wait(state, [comm.Iallgather(raw_bytes(block), raw_bytes(out))])
        return out
    return call


def _all_to_all(comm, k, operand, *, split_axis, concat_axis, **params):
    """Chunk d of the block is its d-th slice along axis 0, and the result joins the chunks
    along axis 0 in group order: MPI's Alltoall (tiled or not, the shapes agree)."""
    if split_axis != 0 or concat_axis != 0:
        return None

    def call(block, state):
        out = np.empty_like(block)
        settle_then_wait(state, [comm.Ialltoall(raw_bytes(block), raw_bytes(out))])
        return out
    return call


def _reduce_scatter(comm, k, operand, *, scatter_axis, tiled, reduction, **params):
    """Each member's chunk k reaches member k (one Alltoall), which reduces the chunks in group
    order: bitwise chunk k of the reference's reduction (it is elementwise)."""
    if scatter_axis != 0:
        return None
    n = comm.size
    chunk = ((operand.shape[0] // n,) if tiled else ()) + tuple(operand.shape[1:])
    reduce = collectives.in_order_reducer(operand.dtype, reduction, chunk)

    def call(block, state):
        received = np.empty_like(block)
        settle_then_wait(state, [comm.Ialltoall(raw_bytes(block), raw_bytes(received))])
        chunks = (received.reshape((n, block.shape[0] // n) + block.shape[1:]) if tiled
                  else received)
        return contiguous(reduce(chunks))
    return call


_PERMUTE_TAG = 7313


def _ppermute(comm, k, operand, *, perm, **params):
    """Send to this member's destination, receive from its source: point to point."""
    dest = [d for s, d in perm if s == k]
    source = [s for s, d in perm if d == k]
    if dest == [k] or source == [k]:
        return None           # keeps its own block: the general exchange copies it
    if not source and not dest:
        return lambda block, state: np.zeros_like(block)
    to = dest[0] if dest else None
    source = source[0] if source else None

    def call(block, state):
        if source is None:
            out = np.zeros_like(block)
            requests = [comm.Isend(raw_bytes(block), dest=to, tag=_PERMUTE_TAG)]
        else:
            out = np.empty_like(block)
            requests = [comm.Irecv(raw_bytes(out), source=source, tag=_PERMUTE_TAG)]
            if to is not None:
                requests.append(comm.Isend(raw_bytes(block), dest=to, tag=_PERMUTE_TAG))
        settle_then_wait(state, requests)
        return out
    return call


_RULES = {
    coll.all_reduce_node: _all_reduce,
    coll.all_gather_node: _all_gather,
    coll.all_to_all_node: _all_to_all,
    coll.reduce_scatter_node: _reduce_scatter,
    coll.ppermute_node: _ppermute,
}


def has_rule(primitive) -> bool:
    """Whether a node of ``primitive`` may complete with MPI's own call."""
    return primitive in _RULES


def bind(eqn, comm, k: int, native: bool = False):
    """The call completing ``eqn`` for member ``k`` of the group ``comm`` stands for:
    ``call(block, state) -> result``, the block C-contiguous; None where MPI's own call does
    not apply. ``native``: an all-reduce MPI reduces natively is MPI's Allreduce."""
    operand = eqn.invars[0].aval
    if native and eqn.primitive is coll.all_reduce_node and natively_reducible_type(
            operand.dtype, eqn.params["reduction"]):
        return _native_all_reduce(comm, k, operand, **eqn.params)
    return _RULES[eqn.primitive](comm, k, operand, **eqn.params)
