"""An all-reduce over processes as a chain: each process adds its devices' blocks onto the
partial sum it receives and passes the result on; the last one finishes the reduction and
sends it back to the others.

The reference reduces a group's blocks one after another in rank order (``collectives.
all_reduce``). Where each process holds a run of consecutive members of every group it takes
part in, and the processes along a group hold the same devices of the other axes, that order
is a walk through the processes, one run each::

    psum over 'i', 8 devices, 2 processes (4 each):
        process 0: ((b0 + b1) + b2) + b3            -> partial   (one block sent)
        process 1: (((partial + b4) + b5) + b6) + b7 -> total    (one block sent back)

which is bitwise the reference's reduction with one block crossing each boundary each way,
instead of every member's block reaching every process (``exchanges.gather_then_apply``) or
two exchanges of chunks (``exchanges._all_reduce_exchange``). Large blocks of one member per
process on three or more processes keep the chunks, which reduce on every process at once. A
stacked process adds all its groups at once (one numpy call per member), and its result is
one block per group (the value no longer varies over the reduced axes), so nothing is copied
back into a stack.
"""
from __future__ import annotations

import math

import numpy as np

from runtime import collectives
from runtime.mpi.agreement import settle_then_wait
from runtime.mpi.exchanges import communicator, contiguous, raw_bytes
from runtime.mpi.world import world

_CHAIN_TAG = 7314

runs = {"all_reduce": 0}     # chained all-reduces run by this process (each node, each run)


class Chain:
    """The processes one node's groups walk through, in rank order of their runs: ``ranks``
    (sorted, the communicator's), ``order`` (the walk) and this process's place in it."""

    def __init__(self, ranks: tuple, order: list, me: int):
        self.ranks = ranks
        self.order = order
        self.at = order.index(me)
        # each neighbour's index in the communicator of ``ranks``
        self.previous = ranks.index(order[self.at - 1]) if self.at else None
        self.next = ranks.index(order[self.at + 1]) if self.at + 1 < len(order) else None
        self.last = ranks.index(order[-1])
        self.others = [ranks.index(r) for r in order[:-1]]

    @property
    def is_last(self) -> bool:
        return self.next is None


def chain_of(boxes: dict, mesh_sizes: tuple, dims: tuple, me: int):
    """The chain of an all-reduce over mesh dims ``dims`` (in the order the node lists them)
    for process ``me``, or None where the reference's order is not a walk through the
    processes. ``boxes[r]``: process r's box of the mesh, ``(origin, sizes)``, or None when
    its devices make none."""
    if any(box is None for box in boxes.values()):
        return None
    others = [d for d in range(len(mesh_sizes)) if d not in dims]
    extent = lambda box: tuple((box[0][d], box[1][d]) for d in others)
    mine = extent(boxes[me])
    starts = {}
    for r, box in boxes.items():
        theirs = extent(box)
        if theirs != mine:
            if _overlap(theirs, mine):
                return None          # a group meets processes holding other devices' runs
            continue
        start = _run_start(box, mesh_sizes, dims)
        if start is None:
            return None
        starts[r] = start
    if len(starts) < 2:
        return None
    order = sorted(starts, key=starts.get)
    return Chain(tuple(sorted(starts)), order, me)


def _overlap(a: tuple, b: tuple) -> bool:
    return all(lo1 < lo2 + n2 and lo2 < lo1 + n1 for (lo1, n1), (lo2, n2) in zip(a, b))


def _run_start(box, mesh_sizes: tuple, dims: tuple):
    """The rank (in the group) of a box's first member when its members along ``dims`` are a
    run of consecutive ranks (row-major over ``dims``), else None."""
    origin, sizes = box
    walk = [(origin[d], sizes[d], mesh_sizes[d]) for d in dims]
    split = next((k for k, (_, n, _) in enumerate(walk) if n > 1), len(walk))
    if any(lo != 0 or n != full for lo, n, full in walk[split + 1:]):
        return None
    start = 0
    for lo, _, full in walk:
        start = start * full + lo
    return start


def chained_all_reduce(state, chain: Chain, members: list, reduction: str, group_size: int,
                       doing_node) -> np.ndarray:
    """The all-reduce of a chain's groups: ``members`` are this process's blocks of them
    (stacked over its groups), in rank order; returns the reduced value, stacked alike."""
    MPI = world().MPI
    comm = communicator(state, chain.ranks)
    state.node = doing_node
    runs["all_reduce"] += 1
    blocks = collectives.counted(members, reduction)
    result_dtype = collectives.reduced_dtype(blocks[0].dtype, reduction)
    if chain.previous is not None:
        partial = np.empty(blocks[0].shape, blocks[0].dtype)
        settle_then_wait(state, [comm.Irecv([raw_bytes(partial), MPI.BYTE],
                                            source=chain.previous, tag=_CHAIN_TAG)])
        total = collectives.combine_in_order(blocks, reduction, partial)
    else:
        total = collectives.combine_in_order(blocks[1:], reduction, blocks[0])
    if not chain.is_last:
        out = np.empty(total.shape, result_dtype)
        settle_then_wait(state, [
            comm.Isend([raw_bytes(contiguous(total)), MPI.BYTE], dest=chain.next,
                       tag=_CHAIN_TAG),
            comm.Irecv([raw_bytes(out), MPI.BYTE], source=chain.last, tag=_CHAIN_TAG)])
        return out
    # a new array unless this process holds the whole walk's first and only block
    fresh = chain.previous is not None or len(blocks) > 1
    total = contiguous(collectives.finish_reduction(total, reduction, group_size, fresh))
    settle_then_wait(state, [comm.Isend([raw_bytes(total), MPI.BYTE], dest=k, tag=_CHAIN_TAG)
                             for k in chain.others])
    return total


def group_size(mesh_sizes: tuple, dims: tuple) -> int:
    return math.prod(mesh_sizes[d] for d in dims)
