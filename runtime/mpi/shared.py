"""Blocks in memory that the processes of one machine share (MPI shared windows): a chained
all-reduce over processes of one machine passes its partial sum through one, and over two
its total too, so no block is sent as a message on the way (``chain``).

    the walk's first:  S = ((b0 + b1) + b2) + b3                   -> note "S is ready"
    its second:        S = (((S + b4) + b5) + b6) + b7, in place    -> note back; both copy
                                                                       S out

A message of a large block costs the receiver a copy as it arrives, and it arrives only while
the receiver waits in MPI; through S, each adds the partial where it lies. Over three or more
processes the last sends the total to the others as messages.

The blocks come from pools, one per walk (its processes, in order) and per block size; a
block is taken when a reduction starts and given back when it completes. The walk's
processes start and complete its reductions in one order (the program's), so the pools change
alike on all, and a new block (a window they make together) is made at the same start on
all. A block is reused only after its last reader is done: the first process gives it back
once it has the total (copied out of the block, over two; sent by the last, which has read
the block, over more), and the others write into it only after the previous one's next note.
The blocks are accessed as MPI's shared-memory model has it: each window is locked for good
when made, and synchronised (``Block.sync``) on each side of a note.

A set of processes' blocks hold at most CAPACITY bytes, and a new block is made only where
the machine's shared memory has room for it (the processes agree on that first): otherwise
the reduction goes as messages, on all of them alike. Blocks are kept for the job's life."""
from __future__ import annotations

import math
import os

import numpy as np

from ir import collectives as coll
from runtime import collectives
from runtime.mpi.agreement import settle_then_wait
from runtime.mpi.world import world

CAPACITY = 256 << 20     # the bytes of one set of processes' blocks, all walks together
SMALLEST = 1 << 12       # blocks come in powers of two from here
_SHARED_MEMORY = "/dev/shm"


def shareable(ranks: tuple, shape: tuple, dtype, reduction: str) -> bool:
    """Whether a chained all-reduce over ``ranks`` (processes of this machine) of blocks of
    ``shape`` passes them through shared memory: the same answer on all, from what all
    know. The blocks are added into where they lie, so a block is not 0-d (numpy adds 0-d
    values into new scalars), and the reduction keeps its dtype throughout (a mean of
    integers is a float, a sum of booleans an integer, bfloat16 adds in float32: messages)."""
    machine = getattr(world(), "machine_ranks", frozenset())
    dtype = np.dtype(dtype)
    return (len(ranks) >= 2 and all(r in machine for r in ranks)
            and len(shape) > 0 and dtype != np.bool_
            and reduction in ("sum", "mean", "max", "min")
            and coll.reduced_dtype(dtype, reduction) == dtype
            and collectives.accumulated_dtype(dtype, reduction) == dtype)


def size_class(nbytes: int) -> int:
    """The size of the shared block that holds ``nbytes``."""
    return max(SMALLEST, 1 << max(0, nbytes - 1).bit_length())


class Block:
    """One shared block: ``data``, its bytes (the window stays open, and locked, while it is
    used)."""
    __slots__ = ("window", "data", "_viewed")

    def __init__(self, window, data: np.ndarray):
        self.window = window
        self.data = data
        self._viewed = (None, None)

    def view(self, shape: tuple, dtype, column_major: bool) -> np.ndarray:
        """The block as an array of ``shape``, row- or column-major (the last view is kept:
        a block mostly serves one reduction, call after call)."""
        key = (shape, dtype, column_major)
        if self._viewed[0] == key:
            return self._viewed[1]
        flat = self.data[:math.prod(shape) * np.dtype(dtype).itemsize].view(dtype)
        view = flat.reshape(shape[::-1]).T if column_major else flat.reshape(shape)
        self._viewed = (key, view)
        return view

    def sync(self) -> None:
        """Make this process's writes visible to the other, and the other's to this one
        (with a note between them: MPI's shared-memory model)."""
        self.window.Sync()


class Pool:
    """The shared blocks of one walk (processes in one order), by size."""

    def __init__(self, comm, ranks: tuple):
        self.comm = comm          # the walk's own communicator: windows are made on it alone
        self.ranks = ranks
        self.free: dict = {}      # nbytes -> [Block]
        self.full = False         # agreed: the machine has no room for another block

    def take(self, state, nbytes: int):
        """A block holding ``nbytes`` (a new one made by the processes together where none is
        free), or None where they may make no more: then the reduction goes as messages, on
        all of them alike."""
        nbytes = size_class(nbytes)
        free = self.free.get(nbytes)
        if free:
            return free.pop()
        if self.full or _HELD.get(self.ranks, 0) + nbytes > CAPACITY:
            return None
        MPI = world().MPI
        # the processes are all here, at the same start: they agree whether the machine has
        # room (a block beyond it would kill them when written, not fail here), waiting as
        # every wait across processes does, watching for a process that left
        room = np.array([1 if _room_for(nbytes) else 0], np.int32)
        agreed = np.empty(1, np.int32)
        settle_then_wait(state, [self.comm.Iallreduce(room, agreed, op=MPI.MIN)])
        if not agreed[0]:
            self.full = True
            return None
        window = MPI.Win.Allocate_shared(nbytes if self.comm.rank == 0 else 0, 1,
                                         comm=self.comm)
        window.Lock_all(MPI.MODE_NOCHECK)
        memory, _ = window.Shared_query(0)
        _HELD[self.ranks] = _HELD.get(self.ranks, 0) + nbytes
        return Block(window, np.frombuffer(memory, np.uint8, nbytes))

    def give_back(self, block: Block) -> None:
        self.free.setdefault(block.data.nbytes, []).append(block)


def _room_for(nbytes: int) -> bool:
    """Whether the machine's shared memory has room for a block of ``nbytes`` and as much
    again to spare (for MPI's own, and other jobs'). Where it cannot be asked, yes."""
    try:
        found = os.statvfs(_SHARED_MEMORY)
    except OSError:
        return True
    return found.f_bavail * found.f_frsize >= 2 * nbytes


_POOLS: dict = {}
_HELD: dict = {}          # the bytes of each set of processes' blocks (sorted ranks -> bytes)


def pool(state, comm, order: tuple) -> Pool:
    """The pool of the processes walked in ``order`` (``comm`` their communicator; made by
    them together at their first shared reduction). One pool per order: a block is reused
    only once its first process has the total, so that process must be the same for every
    reduction the block serves (a mesh in another device order walks them another way)."""
    found = _POOLS.get(order)
    if found is None:
        settle_then_wait(state, [comm.Ibarrier()])
        found = _POOLS[order] = Pool(comm.Dup(), tuple(sorted(order)))
    return found
