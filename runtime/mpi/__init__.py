"""The MPI backend: the per-device programs of a shard_map run on the MPI processes (ranks)
that hold their devices, and collectives whose device group spans ranks exchange blocks with
mpi4py's buffer calls.

Every rank runs the same script: it traces, lowers and runs every host equation on global
values as one process would. Only a shard_map body is divided: the global devices are split
evenly, in id order, over the ranks (rank r holds devices ``r*k .. r*k+k-1``), and each rank
runs its own devices' part of the program (stacked over them, ``stacked``; else one device at
a time, as the reference backend does), meeting the other ranks at each communication node::

    8 devices, 2 ranks, psum over 'x' of a (4, 2) mesh ('x', 'y'):
        rank 0 holds devices 0..3, rank 1 devices 4..7
        group (0, 2, 4, 6): rank 0 brings the blocks of 0 and 2, rank 1 those of 4 and 6
        every rank sums the four blocks in group order: bitwise the simulator's sum

A group whose members are all on one rank is completed in place with the reference's
collective rules. A group spanning ranks uses the sub-communicator of its ranks (made once per
set of ranks, cached) and, by default, gathers the members' blocks so that every reduction runs
in the simulator's fixed order (bit-exact). ``SHARDC_MPI_REDUCTIONS=native`` lets all_reduce
use MPI's own Allreduce: faster for large groups, but not bit-exact.

Ranks complete the cross-rank groups of a round in one global order (sorted device groups), so
no two ranks wait on each other in opposite orders. Every operation across ranks opens with an
agreement on what it is (``agreement``); a module whose communication nodes all lie outside
loops and branches overlaps it with its first exchange, and its exchanges need nothing more.
Under loops and branches the processes meet in rounds, saying where each device waits, and
complete the groups whose members all wait at one node (``schedule``). A mismatch raises on
every rank concerned, and any uncaught exception on any rank aborts the whole job
(``faults``), so a fault never leaves ranks waiting. A group with one device on each of its
ranks completes with MPI's own call, straight into the result (``direct``).

Blocks of devices on other ranks are ``Absent``: a shape and a dtype, no data. A global array
made by a shard_map holds only this rank's blocks; ``np.asarray`` of it (and printing,
indexing, any operation outside shard_map) gathers it on every rank (``arrays``).

The modules, by concern: ``world`` (the launch and the communicators), ``faults``,
``agreement``, ``arrays``, ``exchanges``, ``direct`` (MPI's own calls), ``schedule`` (this
process's devices meeting the others'), ``stacked`` (them run stacked) and ``backend``.
"""
from runtime.mpi.agreement import (CoherenceError, agree, allgather_objects, broadcast_object,
                                   fingerprints)
from runtime.mpi.arrays import Absent, MpiArray, gather_global, gather_record
from runtime.mpi.backend import MpiBackend, install
from runtime.mpi.faults import ProcessLeftError
from runtime.mpi.world import World, launched_size, set_world, wanted, world

__all__ = ["Absent", "CoherenceError", "MpiArray", "MpiBackend", "ProcessLeftError", "World",
           "agree", "allgather_objects", "broadcast_object", "fingerprints", "gather_global",
           "gather_record", "install", "launched_size", "set_world", "wanted", "world"]
