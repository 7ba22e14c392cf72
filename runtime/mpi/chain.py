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
back into a stack. Processes of one machine pass the partial through a block of memory they
share (``shared``, ``_shared_walk``), not as messages; two pass the total there too.
"""
from __future__ import annotations

import math

import numpy as np

from ir import collectives as coll
from runtime import collectives
from runtime.mpi.agreement import settle_then_wait
from runtime.mpi.exchanges import communicator, contiguous, raw_bytes
from runtime.mpi.shared import pool
from runtime.mpi.world import world

_CHAIN_TAG = 7314

# chained all-reduces run by this process (each node, each run), and those of them that
# passed their blocks through shared memory
runs = {"all_reduce": 0, "shared": 0}


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


class PendingReduction:
    """A chained all-reduce under way (``walk``, a generator that yields the requests each
    stage waits for and returns the result): its first ``stages`` are done at once;
    ``wait()`` completes the rest, after settling the run's agreement, and gives the result
    shaped ``shape``."""
    __slots__ = ("state", "node", "walk", "requests", "shape")

    def __init__(self, state, node, walk, shape: tuple, stages: int):
        self.state = state
        self.node = node
        self.walk = walk
        self.shape = shape
        self.requests = next(walk)
        state.pending.append(self)         # from here on, abandoned if an error leaves it
        for _ in range(stages):
            settle_then_wait(state, self.requests)
            self.requests = walk.send(None)

    def wait(self) -> np.ndarray:
        state = self.state
        state.node = self.node
        try:
            while True:
                # an error here propagates, and this stays pending (its requests in
                # flight) for the stacked body to ``abandon``
                settle_then_wait(state, self.requests)
                self.requests = self.walk.send(None)
        except StopIteration as done:
            state.pending.remove(self)
            return done.value.reshape(self.shape)


# A block crosses as the bytes of its memory, row-major (C) or column-major (F, the layout of
# a transposed result, as a weight's gradient often is): a one-byte message ahead of it says
# which, so that no side converts it (adding blocks of different layouts reads one against
# its grain, many times slower than either).
_ROW_MAJOR, _COLUMN_MAJOR = 0, 1


def _send(comm, MPI, value: np.ndarray, dest: int) -> list:
    """The requests sending ``value`` (its layout, then its bytes) to ``dest``."""
    if value.flags.c_contiguous:
        layout, data = _ROW_MAJOR, value
    elif value.flags.f_contiguous:
        layout, data = _COLUMN_MAJOR, value.T
    else:
        layout, data = _ROW_MAJOR, contiguous(value)
    return [comm.Isend([np.array([layout], np.uint8), MPI.BYTE], dest=dest, tag=_CHAIN_TAG),
            comm.Isend(raw_bytes(data), dest=dest, tag=_CHAIN_TAG)]


class Incoming:
    """A block being received (``requests``): its layout, then its bytes."""
    __slots__ = ("layout", "flat", "shape", "requests")

    def __init__(self, comm, MPI, shape: tuple, dtype, source: int):
        self.layout = np.empty(1, np.uint8)
        self.flat = np.empty(math.prod(shape), dtype)
        self.shape = shape
        self.requests = [
            comm.Irecv([self.layout, MPI.BYTE], source=source, tag=_CHAIN_TAG),
            comm.Irecv(raw_bytes(self.flat), source=source, tag=_CHAIN_TAG)]

    def value(self) -> np.ndarray:
        """The block, once its requests are complete: a view of the bytes received."""
        if self.layout[0] == _COLUMN_MAJOR:
            return self.flat.reshape(self.shape[::-1]).T
        return self.flat.reshape(self.shape)


def chained_all_reduce(state, chain: Chain, members: list, reduction: str, group_size: int,
                       doing_node, shape: tuple, shared_blocks: bool) -> PendingReduction:
    """Start the all-reduce of a chain's groups: ``members`` are this process's blocks of
    them (stacked over its groups), in rank order; the result, waited for, is the reduced
    value stacked alike, of shape ``shape``.

    Each process adds its members onto the partial sum it receives (waiting for it here) and
    passes the sum on; the rest (the total coming back, or sent back) completes when the
    result is waited for. The partial is waited for here, not there: messages move only
    while both processes are inside MPI, as one waiting for its partial is (deferred, the
    whole walk took twice as long)."""
    runs["all_reduce"] += 1
    state.node = doing_node
    comm, MPI = communicator(state, chain.ranks), world().MPI
    like = members[0]
    block = None
    if shared_blocks:
        shared = pool(state, comm, tuple(chain.order))
        block = shared.take(state, like.size * like.dtype.itemsize)
    if block is None:
        walk = _walk(comm, MPI, chain, members, reduction, group_size)
    else:
        runs["shared"] += 1
        walk = _shared_walk(comm, MPI, chain, members, reduction, group_size, shared, block)
    return PendingReduction(state, doing_node, walk, shape, 0 if chain.previous is None else 1)


def _walk(comm, MPI, chain: Chain, members: list, reduction: str, group_size: int):
    """This process's part of a chained all-reduce: yields the requests of each stage, and
    returns the reduced value. Holds no reference to the operand past its sum (a body
    releases a large operand at its last use)."""
    dtype = members[0].dtype
    blocks = collectives.counted(members, reduction)
    del members
    result_dtype = coll.reduced_dtype(dtype, reduction)
    # a float sum starts from +0.0 on the first process, not finished with it on the last:
    # the same bits, and the last process (which has the more to add) has one pass less
    from_zero = collectives.starts_from_zero(blocks[0].dtype, reduction)
    # a new array unless this process holds the whole walk's first and only block
    fresh = chain.previous is not None or len(blocks) > 1 or from_zero
    if chain.previous is not None:
        partial = Incoming(comm, MPI, blocks[0].shape, blocks[0].dtype, chain.previous)
        yield partial.requests
        total = collectives.combine_in_order(blocks, reduction, partial.value())
        del partial
    elif from_zero:
        total = collectives.combine_in_order(
            blocks[1:], reduction, collectives.positive_zero_sum(blocks[0]), owned=True)
    else:
        total = collectives.combine_in_order(blocks[1:], reduction, blocks[0])
    del blocks
    if not chain.is_last:
        out = Incoming(comm, MPI, total.shape, result_dtype, chain.last)
        yield _send(comm, MPI, np.asarray(total), chain.next) + out.requests
        return out.value()
    out = np.asarray(collectives.finish_reduction(total, reduction, group_size, fresh,
                                                  from_zero, dtype))
    yield [r for k in chain.others for r in _send(comm, MPI, out, k)]
    return out


def _shared_walk(comm, MPI, chain: Chain, members: list, reduction: str, group_size: int,
                 shared, block):
    """``_walk`` for processes of one machine, through a shared block (``shared``): the first
    sums its members into the block and tells the next, each adds its own there, where it
    lies, and tells the next. Of two, the second finishes the total in the block and tells the
    first back; each copies it out. Of more, the last sends the total, as ``_walk`` does: the
    first reuses the block only once that has come, so after the last has read it. The same
    operations in the same order as ``_walk``, so the same bits."""
    blocks = collectives.counted(members, reduction)
    del members
    shape, dtype = blocks[0].shape, blocks[0].dtype
    from_zero = collectives.starts_from_zero(dtype, reduction)
    pair = len(chain.order) == 2
    note = np.empty(1, np.uint8)
    if chain.previous is None:
        first = blocks[0]
        column_major = bool(first.flags.f_contiguous and not first.flags.c_contiguous)
        total = block.view(shape, dtype, column_major)
        if from_zero:
            np.add(first, np.zeros((), dtype), out=total)
        else:
            np.copyto(total, first)
        collectives.combine_in_order(blocks[1:], reduction, total, owned=True)
        del blocks, first
        block.sync()
        sent = np.array([_COLUMN_MAJOR if column_major else _ROW_MAJOR], np.uint8)
        ahead = comm.Isend([sent, MPI.BYTE], dest=chain.next, tag=_CHAIN_TAG)
        if pair:
            yield [ahead, comm.Irecv([note, MPI.BYTE], source=chain.last, tag=_CHAIN_TAG)]
            block.sync()
            result = np.copy(total, order="K")
        else:
            incoming = Incoming(comm, MPI, shape, dtype, chain.last)
            yield [ahead] + incoming.requests
            result = incoming.value()
        shared.give_back(block)
        return result
    yield [comm.Irecv([note, MPI.BYTE], source=chain.previous, tag=_CHAIN_TAG)]
    block.sync()
    total = block.view(shape, dtype, note[0] == _COLUMN_MAJOR)
    if not chain.is_last:                 # between the first and the last of several
        collectives.combine_in_order(blocks, reduction, total, owned=True)
        del blocks
        block.sync()
        incoming = Incoming(comm, MPI, shape, dtype, chain.last)
        yield [comm.Isend([note, MPI.BYTE], dest=chain.next, tag=_CHAIN_TAG)] + \
            incoming.requests
        shared.give_back(block)
        return incoming.value()
    if not pair:                          # the last of several: the total in a new array
        total = collectives.combine_in_order(blocks, reduction, total)
        del blocks
        out = np.asarray(collectives.finish_reduction(total, reduction, group_size, True,
                                                      from_zero))
        yield [r for k in chain.others for r in _send(comm, MPI, out, k)]
        shared.give_back(block)
        return out
    collectives.combine_in_order(blocks, reduction, total, owned=True)
    del blocks
    out = np.asarray(collectives.finish_reduction(total, reduction, group_size, True,
                                                  from_zero))
    if np.shares_memory(out, total):
        result = np.copy(out, order="K")
    else:                        # a mean: divided into a new array
        np.copyto(total, out)
        result = out
    block.sync()
    yield [comm.Isend([note, MPI.BYTE], dest=chain.others[0], tag=_CHAIN_TAG)]
    shared.give_back(block)
    return result


def group_size(mesh_sizes: tuple, dims: tuple) -> int:
    return math.prod(mesh_sizes[d] for d in dims)
