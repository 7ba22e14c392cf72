"""Blocks in memory that the processes of one machine share (MPI shared windows): a chained
all-reduce over two processes passes its partial sum and its total through one, so no block
is sent as a message (``chain``).

    process 0: S = ((b0 + b1) + b2) + b3                   -> note "S is ready"
    process 1: S = (((S + b4) + b5) + b6) + b7, in place    -> note back; both copy S out

A message of a large block costs the receiver a copy as it arrives, and it arrives only while
the receiver waits in MPI; through S, process 1 adds process 0's partial where it lies.

The blocks come from pools, one per pair of processes walked in one order and per block
size; a block is taken when a reduction starts and given back when it completes. Both
processes start and complete the pair's reductions in one order (the program's), so the
pools change alike on both, and a new block (a window both processes make together) is made
at the same start on both. A block is reused only after its last reader is done: the first
process gives it back once it has copied the total out, and the second writes into it only
after the first's next note."""
from __future__ import annotations

import math

import numpy as np

from runtime.mpi.agreement import settle_then_wait
from runtime.mpi.world import world

# the shared blocks of one pair of processes hold at most CAPACITY bytes; a reduction that
# finds the pool full goes as messages, on both processes alike
CAPACITY = 256 << 20
SMALLEST = 1 << 12       # blocks come in powers of two from here

# the dtypes whose reductions keep their dtype (a mean of integers is a float: a message)
_KEPT = frozenset(np.dtype(t) for t in (
    np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
    np.uint8, np.uint16, np.uint32, np.uint64))


def shareable(ranks: tuple, shape: tuple, dtype, reduction: str) -> bool:
    """Whether a chained all-reduce over ``ranks`` (two processes of this machine) of blocks
    of ``shape`` passes them through shared memory (added into where they lie, so not 0-d):
    the same answer on both, from what both know."""
    machine = getattr(world(), "machine_ranks", frozenset())
    return (len(ranks) == 2 and ranks[0] in machine and ranks[1] in machine
            and len(shape) > 0 and np.dtype(dtype) in _KEPT
            and (reduction in ("sum", "max", "min")
                 or (reduction == "mean" and np.dtype(dtype).kind == "f")))


def size_class(nbytes: int) -> int:
    """The size of the shared block that holds ``nbytes``."""
    return max(SMALLEST, 1 << max(0, nbytes - 1).bit_length())


class Block:
    """One shared block: ``data``, its bytes (the window stays open while it is used)."""
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


class Pool:
    """The shared blocks of one pair of processes, by size."""

    def __init__(self, comm):
        self.comm = comm          # the pair's own communicator: windows are made on it alone
        self.free: dict = {}      # nbytes -> [Block]
        self.held = 0

    def take(self, state, nbytes: int):
        """A block holding ``nbytes`` (a new one made by both processes together where none
        is free), or None when the pool is full: then the reduction goes as messages, on both
        processes alike."""
        nbytes = size_class(nbytes)
        free = self.free.get(nbytes)
        if free:
            return free.pop()
        if self.held + nbytes > CAPACITY:
            return None
        # both processes are here, at the same start: waiting in a barrier watches for a
        # process that left, as every wait across processes does
        settle_then_wait(state, [self.comm.Ibarrier()])
        MPI = world().MPI
        window = MPI.Win.Allocate_shared(nbytes if self.comm.rank == 0 else 0, 1,
                                         comm=self.comm)
        memory, _ = window.Shared_query(0)
        self.held += nbytes
        return Block(window, np.frombuffer(memory, np.uint8, nbytes))

    def give_back(self, block: Block) -> None:
        self.free.setdefault(block.data.nbytes, []).append(block)


_POOLS: dict = {}


def pool(state, comm, order: tuple) -> Pool:
    """The pool of the pair of processes walked in ``order`` (``comm`` their communicator;
    made by both together at their first shared reduction). One pool per order: a block is
    reused only once its first process has copied the total out, so that process must be the
    same for every reduction the block serves (a mesh in another device order walks the
    pair the other way)."""
    found = _POOLS.get(order)
    if found is None:
        settle_then_wait(state, [comm.Ibarrier()])
        found = _POOLS[order] = Pool(comm.Dup())
    return found
