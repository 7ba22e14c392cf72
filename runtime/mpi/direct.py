"""One device on each process of the group: the node completes with MPI's own call, straight
into the result. Member k of the group is then rank k of its communicator. Each rule returns
the local member's result, or None where it does not apply (the general exchange runs
instead). Buffers go as bytes: MPI has no type for bfloat16 and the other narrow floats."""
from __future__ import annotations

import numpy as np

from ir import collectives as coll
from runtime import collectives
from runtime.mpi.agreement import settle_then_wait
from runtime.mpi.exchanges import contiguous, raw_bytes


def _direct_all_reduce(comm, block, k, state, *, reduction, **params):
    """Gather every member's block (one Allgather), then reduce in group order: bitwise the
    reference's reduction."""
    gathered = np.empty((comm.size,) + block.shape, block.dtype)
    settle_then_wait(state, [comm.Iallgather(raw_bytes(block), raw_bytes(gathered))])
    return collectives.all_reduce(list(gathered), reduction=reduction)[0]


def _direct_all_gather(comm, block, k, state, *, gather_axis, tiled, **params):
    if gather_axis != 0 or block.ndim == 0 and tiled:
        return None
    n = comm.size
    out = np.empty(((n * block.shape[0],) if tiled else (n,)) + block.shape[tiled:],
                   block.dtype)
    settle_then_wait(state, [comm.Iallgather(raw_bytes(block), raw_bytes(out))])
    return out


def _direct_all_to_all(comm, block, k, state, *, split_axis, concat_axis, **params):
    """Chunk d of the block is its d-th slice along axis 0, and the result joins the chunks
    along axis 0 in group order: MPI's Alltoall (tiled or not, the shapes agree)."""
    if split_axis != 0 or concat_axis != 0:
        return None
    out = np.empty_like(block)
    settle_then_wait(state, [comm.Ialltoall(raw_bytes(block), raw_bytes(out))])
    return out


def _direct_reduce_scatter(comm, block, k, state, *, scatter_axis, tiled, reduction,
                           **params):
    """Each member's chunk k reaches member k (one Alltoall), which reduces the chunks in group
    order: bitwise chunk k of the reference's reduction (it is elementwise)."""
    if scatter_axis != 0:
        return None
    received = np.empty_like(block)
    settle_then_wait(state, [comm.Ialltoall(raw_bytes(block), raw_bytes(received))])
    n = comm.size
    chunks = received.reshape((n, block.shape[0] // n) + block.shape[1:]) if tiled else received
    return contiguous(collectives.all_reduce(list(chunks), reduction=reduction)[0])


_PERMUTE_TAG = 7313


def _direct_ppermute(comm, block, k, state, *, perm, **params):
    """Send to this member's destination, receive from its source: point to point."""
    dest = [d for s, d in perm if s == k]
    source = [s for s, d in perm if d == k]
    if dest == [k] or source == [k]:
        return None           # keeps its own block: the general exchange copies it
    out = np.empty_like(block) if source else np.zeros_like(block)
    requests = []
    if source:
        requests.append(comm.Irecv(raw_bytes(out), source=source[0], tag=_PERMUTE_TAG))
    if dest:
        requests.append(comm.Isend(raw_bytes(block), dest=dest[0], tag=_PERMUTE_TAG))
    if requests:
        settle_then_wait(state, requests)
    return out


DIRECT = {
    coll.all_reduce_node: _direct_all_reduce,
    coll.all_gather_node: _direct_all_gather,
    coll.all_to_all_node: _direct_all_to_all,
    coll.reduce_scatter_node: _direct_reduce_scatter,
    coll.ppermute_node: _direct_ppermute,
}
