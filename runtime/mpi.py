"""The MPI backend: the per-device programs of a shard_map run on the MPI processes (ranks)
that hold their devices, and collectives whose device group spans ranks exchange blocks with
mpi4py's buffer calls.

Every rank runs the same script: it traces, lowers and runs every host equation on global
values as one process would. Only a shard_map body is divided: the global devices are split
evenly, in id order, over the ranks (rank r holds devices ``r*k .. r*k+k-1``), and each rank
runs the programs of its own devices, as the reference backend does, meeting at each
communication node::

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
agreement on what it is (``Agreement``: a fingerprint, on a communicator of its own); a module
whose communication nodes all lie outside loops and branches overlaps it with its first
exchange, and its exchanges need nothing more. Under loops and branches every exchange also
carries the fingerprint of its node. A mismatch raises on every rank concerned, and any
uncaught exception on any rank aborts the whole job (``install_fault_handler``), so a fault
never leaves ranks waiting. A group with one device on each of its ranks completes with MPI's
own call, straight into the result (``_DIRECT``).

Blocks of devices on other ranks are ``Absent``: a shape and a dtype, no data. A global array
made by a shard_map holds only this rank's blocks; ``np.asarray`` of it (and printing,
indexing, any operation outside shard_map) gathers it on every rank (``gather_global``).
"""
from __future__ import annotations

import atexit
import os
import sys
import time
import traceback
import zlib

import numpy as np

from ir import primitives as prims
from ir.core import Aval
from ir.shapes import out_avals
from ir.sharding import (NamedSharding, block_shape, block_slices, canonical_spec, global_shape,
                         normal_spec, owner_positions, replication_mismatch,
                         runtime_replication_error)
from runtime import reference
from runtime.array import Array
from runtime.devices import set_processes
from runtime.vectorized import _prints, keyed_sharding

# the environment the common launchers give each process: its world size
_LAUNCHER_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS")


def launched_size() -> int:
    """The number of processes the launcher started (1 outside ``mpiexec``)."""
    for name in _LAUNCHER_SIZE_VARS:
        text = os.environ.get(name)
        if text and text.isdigit():
            return int(text)
    return 1


def wanted() -> bool:
    """Whether shardc should run on MPI: ``SHARDC_BACKEND=mpi``, or (no backend named) a
    launch of more than one process."""
    name = os.environ.get("SHARDC_BACKEND", "")
    if name:
        return name == "mpi"
    return launched_size() > 1


# --- the world, its sub-communicators, and faults ----------------------------------------------

class World:
    """COMM_WORLD, this rank, and one sub-communicator per set of ranks (made on first use, by
    exactly those ranks, in the one global order of the groups that need them)."""

    def __init__(self):
        try:
            from mpi4py import MPI
        except ImportError as err:
            raise ImportError("the MPI backend needs mpi4py and an MPI library: "
                              "pip install -e '.[mpi]' (mpi4py and mpich)") from err
        self.MPI = MPI
        self.comm = MPI.COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self._comms = {tuple(range(self.size)): self.comm}
        # the processes meet here at exit; a communicator of its own never meets another call
        self.exit_comm = self.comm.Dup()
        # every operation across processes opens with an agreement here (``Agreement``)
        self.check_comm = self.comm.Dup()
        self._mine = np.zeros(1, np.int64)
        self._theirs = np.zeros(self.size, np.int64)
        self.open_agreement = None
        # set when a mismatch left exchanges in flight: nothing more may cross processes
        self.broken = ""
        self._orphans: list = []

    def comm_of(self, ranks: tuple):
        """The communicator of ``ranks`` (sorted); its rank k is world rank ``ranks[k]``."""
        comm = self._comms.get(ranks)
        if comm is None:
            group = self.comm.Get_group().Incl(list(ranks))
            comm = self.comm.Create_group(group, tag=_CREATE_TAG)
            group.Free()
            self._comms[ranks] = comm
        return comm

    def abort(self, code: int = 1) -> None:
        self.comm.Abort(code)


_CREATE_TAG = 7311
_world: list = []


def world() -> World:
    if not _world:
        _world.append(World())
    return _world[0]


def install() -> "MpiBackend":
    """Join the MPI world: split the devices over its ranks, abort the job on any uncaught
    exception, and return the backend."""
    w = world()
    set_processes(w.rank, w.size)
    install_fault_handler()
    return MpiBackend()


# An abort ends every process at once, the launcher's output forwarding included: a report
# written just before it may never reach the user. A short pause lets it through.
_REPORT_SECONDS = 0.5


def install_fault_handler() -> None:
    """An uncaught exception on any rank prints its traceback under the rank's name, then
    aborts every rank: the others may be waiting in a collective this rank will never reach,
    and MPI_Finalize at exit would wait for them forever."""
    def abort_on_exception(kind, value, tb):
        w = world()
        try:
            sys.stdout.flush()
            # one write: the first process to abort ends the others, maybe mid-report
            report = "".join(traceback.format_exception(kind, value, tb))
            sys.stderr.write(f"shardc: process {w.rank} of {w.size} failed; aborting the job\n"
                             f"{report}")
            sys.stderr.flush()
            time.sleep(_REPORT_SECONDS)
        finally:
            w.abort(1)

    if getattr(sys.excepthook, "__name__", "") != "abort_on_exception":
        sys.excepthook = abort_on_exception
        # registered after mpi4py's own exit handler (MPI_Finalize), so it runs first
        atexit.register(_exit_together)


def _exit_together() -> None:
    """At exit, wait for every process to reach its end, at most ``SHARDC_MPI_EXIT_TIMEOUT``
    seconds (default 300), then abort the job: a process that leaves early (``sys.exit`` on one
    process) would otherwise wait in MPI_Finalize for processes waiting on it, forever."""
    w = world()
    if w.size == 1:
        return
    timeout = float(os.environ.get("SHARDC_MPI_EXIT_TIMEOUT", "300") or 300)
    request = w.exit_comm.Ibarrier()
    deadline = time.monotonic() + timeout
    while not request.Test():
        if time.monotonic() > deadline:
            sys.stdout.flush()
            sys.stderr.write(f"shardc: process {w.rank} of {w.size} ended, but other processes "
                             f"did not reach their end within {timeout:g} s "
                             "(SHARDC_MPI_EXIT_TIMEOUT); aborting the job\n")
            sys.stderr.flush()
            time.sleep(_REPORT_SECONDS)
            w.abort(1)
        time.sleep(0.002)


class CoherenceError(RuntimeError):
    """Ranks reached different programs or different communication nodes."""


class Agreement:
    """Every operation that crosses processes (a module's run, gathering a global array, the
    multi-process utilities) opens with one: each process contributes the fingerprint of what
    it is about to do, in one 8-byte Iallgather on a communicator used for nothing else. Every
    process's k-th agreement meets every other's k-th, so a process about to do something else
    is found there, before any of the operation's data is used.

    ``start`` posts it; ``settle`` waits for it and raises CoherenceError on a mismatch. An
    operation may post its first exchange in between (nonblocking) so that the agreement costs
    no round trip of its own (``_wait``): the exchange's data is read only once the agreement
    has settled, and a mismatch ends the job (an uncaught error aborts every process)."""
    __slots__ = ("request", "what")

    def __init__(self, header: int, what):
        w = _world[0] if _world else world()
        if w.broken:
            raise CoherenceError(w.broken)
        # one agreement is open at a time: its buffers are the world's
        assert w.open_agreement is None, "an agreement was posted while another is open"
        w._mine[0] = header
        self.request = w.check_comm.Iallgather(w._mine, w._theirs)
        self.what = what
        w.open_agreement = self

    def settle(self) -> None:
        self.request.Wait()
        w = _world[0]
        w.open_agreement = None
        theirs = w._theirs.tolist()
        if theirs.count(theirs[0]) != len(theirs):
            what = self.what() if callable(self.what) else self.what
            _check_headers(theirs, list(range(len(theirs))), what)


def fingerprints(header: int) -> list:
    """Every process's ``header``, by rank (an agreement whose caller compares them)."""
    agreement = Agreement(header, None)
    agreement.request.Wait()
    return world()._theirs.tolist()


def agree(header: int, what) -> None:
    """Wait until every process has reached an operation with the same fingerprint; a process
    reaching another is a CoherenceError on all of them. ``what``: the error's text (or a
    function giving it)."""
    Agreement(header, what).settle()


class _Opening:
    """An operation's agreement, settled before its first exchange's data is waited for."""
    __slots__ = ("opening",)

    def __init__(self, opening=None):
        self.opening = opening


def _wait(state, requests: list) -> None:
    """Wait for an exchange's requests, after settling the operation's agreement if it is still
    open (``state.opening``). A mismatch found then leaves the exchange in flight, where it
    may never complete: its requests (and so its buffers) are kept, and nothing more may cross
    processes (an uncaught CoherenceError ends the job anyway)."""
    try:
        _settle(state)
    except CoherenceError as err:
        w = world()
        w._orphans.extend(requests)
        w.broken = (f"an earlier CoherenceError left exchanges in flight; no more operations "
                    f"can cross processes ({err})")
        raise
    if len(requests) == 1:
        requests[0].Wait()
    else:
        world().MPI.Request.Waitall(requests)


# --- blocks other ranks hold -------------------------------------------------------------------

class Absent:
    """The block of a device this rank does not hold: its type, no data."""
    __slots__ = ("shape", "dtype", "device")
    absent = True

    def __init__(self, shape, dtype, device=None):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.device = device

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __array__(self, dtype=None, copy=None):
        where = f" of {self.device}" if self.device is not None else ""
        raise RuntimeError(f"the block{where} is held by another process; gather the global "
                           "array (np.asarray) to read it")

    def __repr__(self):
        return f"Absent({self.dtype.name}{list(self.shape)})"


def _is_absent(value) -> bool:
    return type(value) is Absent


def _local_positions(mesh, rank: int) -> list:
    return [p for p, d in enumerate(mesh.devices.flat) if d.process_index == rank]


def _fingerprint(text: str) -> int:
    return zlib.crc32(text.encode())


# --- global arrays with local blocks -----------------------------------------------------------

class MpiArray(Array):
    """A global array laid out on a mesh whose blocks live on the ranks holding their devices;
    the global value is gathered, on every rank, when first read."""

    def _assemble(self) -> np.ndarray:
        if self._global is None:
            self._global = gather_global(self)
        return self._global

    @classmethod
    def from_local(cls, blocks: list, mesh, spec, aval: Aval) -> "MpiArray":
        return cls(aval, NamedSharding(mesh, canonical_spec(spec)), list(blocks))


_SEPARATE_HEADER_BYTES = 1 << 16


def _exchange_all(comm, payload: list, header, counts: list, state=None) -> tuple:
    """Every rank's arrays (as bytes) on every rank of ``comm``, and every rank's ``header``;
    ``counts`` are every rank's payload bytes. The caller compares the headers; when they
    differ the payloads are not exchanged (None). ``header=None``: no headers (the ranks are
    known to be at the same node), headers returned as None; the exchange is nonblocking, so
    that ``state``'s open agreement settles while it moves (``_wait``).

    One Allgather of equal slots (MPICH's Allgatherv is far slower than its Allgather on large
    messages: 50 times on 4 MiB here). A large single block goes without a copy, after the
    headers in a call of their own."""
    if header is None:
        if len(set(counts)) == 1:
            send = _as_bytes(payload)
        else:
            send = np.zeros(max(counts), np.uint8)
            mine = _as_bytes(payload)
            send[:mine.nbytes] = mine
        slot = send.nbytes
        recv = np.empty(slot * len(counts), np.uint8)
        _wait(state, [comm.Iallgather(send, recv)])
        return [recv[k * slot:k * slot + c] for k, c in enumerate(counts)], None
    if len(payload) == 1 and len(set(counts)) == 1 and counts[0] >= _SEPARATE_HEADER_BYTES:
        return _exchange_one_block(comm, payload[0], header, len(counts))
    slot = 8 + max(counts)
    send = np.empty(slot, np.uint8)
    send[:8] = np.frombuffer(np.int64(header).tobytes(), np.uint8)
    offset = 8
    for a in payload:
        send[offset:offset + a.nbytes] = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
        offset += a.nbytes
    recv = np.empty(slot * len(counts), np.uint8)
    comm.Allgather(send, recv)
    parts = [recv[k * slot:(k + 1) * slot] for k in range(len(counts))]
    return ([part[8:8 + c] for part, c in zip(parts, counts)],
            [int(part[:8].view(np.int64)[0]) for part in parts])


def _exchange_one_block(comm, block, header: int, size: int) -> tuple:
    headers = np.empty(size, np.int64)
    comm.Allgather(np.array([header], np.int64), headers)
    headers = headers.tolist()
    if len(set(headers)) > 1:
        return [None] * size, headers
    data = np.ascontiguousarray(block).reshape(-1).view(np.uint8)
    recv = np.empty(data.nbytes * size, np.uint8)
    comm.Allgather(data, recv)
    return [recv[k * data.nbytes:(k + 1) * data.nbytes] for k in range(size)], headers


def _split_blocks(data: np.ndarray, count: int, shape, dtype) -> list:
    """``count`` blocks of ``shape``/``dtype`` from contiguous bytes."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    return [data[k * nbytes:(k + 1) * nbytes].view(dtype).reshape(shape) for k in range(count)]


# what reading global arrays has cost this process: the price of a script running unchanged
gather_record = {"gathers": 0, "bytes_sent": 0, "bytes_received": 0}


def gather_global(array: MpiArray) -> np.ndarray:
    """The global value of ``array`` on every rank: each block is sent once, by the rank of its
    first owner (devices holding copies send nothing)."""
    w = world()
    mesh, spec = array.sharding.mesh, array.sharding.spec
    owners = owner_positions(spec, mesh)
    rank_of = [mesh.devices.flat[p].process_index for p in owners]
    bshape = block_shape(array.shape, spec, mesh.shape)
    nbytes = int(np.prod(bshape, dtype=np.int64)) * array.dtype.itemsize
    mine = [array.buffers[p] for p, r in zip(owners, rank_of) if r == w.rank]
    counts = [nbytes * rank_of.count(r) for r in range(w.size)]
    header = _fingerprint(f"gather {array.shape} {array.dtype} {normal_spec(spec)} {mesh}")
    opening = _Opening(Agreement(header, "gathered different arrays (a global array is "
                                 "gathered by every process: read it on all of them, in the "
                                 "same order)"))
    data, _ = _exchange_all(w.comm, mine, None, counts, opening)
    gather_record["gathers"] += 1
    gather_record["bytes_sent"] += counts[w.rank] * (w.size - 1)
    gather_record["bytes_received"] += sum(counts) - counts[w.rank]
    out = np.empty(array.shape, array.dtype)
    taken = [0] * w.size
    for p, r in zip(owners, rank_of):
        (block,) = _split_blocks(data[r][taken[r] * nbytes:], 1, bshape, array.dtype)
        taken[r] += 1
        out[block_slices(array.shape, spec, mesh, mesh.coords(p))] = block
    return out


def _check_headers(headers: list, ranks: list, what: str) -> None:
    if len(set(headers)) > 1:
        first = headers[0]
        differ = [r for r, h in zip(ranks, headers) if h != first]
        raise CoherenceError(f"processes {differ} and process {ranks[0]} {what}")


# --- the scheduler: this rank's devices, meeting other ranks' at each node --------------------

class _Round:
    """The state of one run of a mesh's programs on this rank."""

    def __init__(self, mesh, headers: bool = True):
        self.mesh = mesh
        self.position_of = {dev_id: p for p, dev_id in enumerate(mesh.device_ids)}
        self.rank_of = [d.process_index for d in mesh.devices.flat]
        # whether exchanges carry the node's fingerprint (False: coherent by construction)
        self.headers = headers
        self.opening = None       # the run's agreement, while it is still open (``_wait``)
        self.absent = None        # the outputs of other ranks' positions (``_absent_results``)


def run_local_programs(mesh, programs, inputs, native: bool = False) -> list:
    """Run this rank's devices' programs; other ranks run theirs. Returns each position's
    outputs, ``Absent`` for positions other ranks hold."""
    state = _Round(mesh)
    local = _local_positions(mesh, world().rank)
    return _drive(state, local, {p: programs[p] for p in local}, inputs,
                  lambda waiting: _meet(state, waiting, native),
                  [v.aval for v in programs[0].outvars])


def _drive(state, local, programs, inputs, meet, out_avals) -> list:
    """Run the programs of the ``local`` positions, completing each node their devices wait at
    with ``meet(waiting) -> {position: result}``."""
    mesh = state.mesh
    ids = mesh.device_ids
    runs = {p: reference._device_steps(programs[p], inputs[p], device=ids[p]) for p in local}
    results = list(_absent_results(state, out_avals))
    waiting: dict = {}
    prints: list = []
    printed = [0] * mesh.size
    resume = {p: None for p in local}
    try:
        while resume:
            for p, value in resume.items():
                _advance(runs, p, value, waiting, results, prints, printed, mesh)
            if not waiting:
                break
            resume = meet(waiting)
    finally:
        for _, _, text in sorted(prints):
            print(text)
    return results


def _absent_results(state, out_avals) -> list:
    """Each position's outputs as ``Absent`` for positions other ranks hold, None for this
    rank's (made once per state: Absent blocks are never changed)."""
    template = state.absent
    if template is None:
        me = world().rank
        template = state.absent = [
            None if d.process_index == me else [Absent(a.shape, a.dtype, d) for a in out_avals]
            for d in state.mesh.devices.flat]
    return template


class LocalPlan:
    """A lowered shard_map as this process runs it, made on its first run: the programs of its
    own devices only (specialised from the mesh-level program and verified here; each process
    builds its own), and for each communication node the device groups this process takes
    part in, in the one global order.

    When no communication node lies inside a loop or a branch, every device reaches the same
    nodes in the same order with operands of the same types: the ranks checked that they run
    the same module before running it (``MpiBackend.execute``), so exchanges carry no
    fingerprint (``headers`` false). Otherwise each exchange still checks one."""

    def __init__(self, lowered, rank: int, native: bool):
        mesh = lowered.mesh
        self.lowered = lowered
        self.mesh = mesh
        self.rank = rank
        self.native = native
        self.local = _local_positions(mesh, rank)
        self.programs = _local_programs(lowered, self.local)
        sample = lowered.mesh_program
        if sample is None:
            sample = lowered.device_programs[0].program
        self.out_avals = [v.aval for v in sample.outvars]
        self.straight = not _communicates_under_control(sample)
        self.state = _Round(mesh, headers=not self.straight)
        self.nodes: dict = {}
        # straight programs that print nothing run as flat step lists (``_steps``), without
        # a generator per device: prints need the generators' ordering
        self.steps = _steps(self.programs, self.local) if (
            self.straight and self.local and not _prints(sample)) else None

    def run(self, inputs, opening=None) -> list:
        """Run this process's devices; ``opening``: the run's agreement, still open (straight
        programs only: it settles before the first exchange's data is read)."""
        if not self.straight:
            assert opening is None, "only straight-line communication overlaps its agreement"
            return _drive(self.state, self.local, self.programs, inputs,
                          lambda waiting: _meet(self.state, waiting, self.native),
                          self.out_avals)
        state = self.state
        state.opening = opening
        try:
            if self.steps is not None:
                return self._run_steps(inputs)
            return _drive(state, self.local, self.programs, inputs, self._meet_straight,
                          self.out_avals)
        finally:
            _settle(state)

    def _run_steps(self, inputs) -> list:
        """Run the flat steps: each device's equations up to the next communication node, then
        the node for all local devices together (``_meet_straight``)."""
        in_keys, literals, segments, out_keys = self.steps
        envs = {}
        for p in self.local:
            env = envs[p] = dict(literals[p])
            env.update(zip(in_keys[p], inputs[p]))
        for computes, node in segments:
            for p in self.local:
                env = envs[p]
                for fn, reads, outs, params, dead, eqn in computes[p]:
                    try:
                        values = fn(*[env[k] for k in reads], **params)
                    except Exception as err:
                        _locate(err, eqn, self.mesh, p)
                        raise
                    for key, value in zip(outs, values):
                        env[key] = value
                    for key in dead:
                        del env[key]
            if node is not None:
                waiting = {p: reference._Request(node[p][3], envs[p][node[p][0]])
                           for p in self.local}
                for p, value in self._meet_straight(waiting).items():
                    read, out, dead, _ = node[p]
                    env = envs[p]
                    env[out] = value
                    for key in dead:
                        del env[key]
        results = list(_absent_results(self.state, self.out_avals))
        for p in self.local:
            env = envs[p]
            results[p] = [env[k] for k in out_keys[p]]
        return results

    def _groups(self, eqn) -> list:
        """(members, local members, ranks) of each group of ``eqn`` with a local member, in
        the one global order (sorted device groups)."""
        entry = self.nodes.get(id(eqn))
        if entry is None or entry[0] is not eqn:
            state = self.state
            groups = []
            for group in sorted(tuple(g) for g in eqn.params["device_groups"]):
                members = [state.position_of[d] for d in group]
                local = [m for m in members if state.rank_of[m] == self.rank]
                if local:
                    ranks = tuple(sorted({state.rank_of[m] for m in members}))
                    groups.append((members, local, ranks,
                                   self._direct(eqn, members, ranks)))
            entry = self.nodes[id(eqn)] = (eqn, groups)
        return entry[1]

    def _direct(self, eqn, members, ranks):
        """``(rule, communicator, member index)`` when the group's node completes with MPI's
        own call (``_DIRECT``: one member on each rank), else None."""
        rule = _DIRECT.get(eqn.primitive)
        if (rule is None or len(ranks) == 1 or not _one_per_rank(self.state, members, ranks)
                or (self.native and eqn.primitive is prims.all_reduce_p
                    and _natively_reducible_type(eqn.invars[0].aval.dtype,
                                                 eqn.params["reduction"]))):
            return None
        return rule, _comm(self.state, ranks), ranks.index(self.rank)

    def _meet_straight(self, waiting: dict) -> dict:
        """Every local device waits at the same node (straight-line communication)."""
        if len(waiting) != len(self.local):
            raise reference.DeadlockError(
                f"devices {sorted(self.mesh.device_ids[p] for p in self.local if p not in waiting)}"
                " finished while others wait at a communication node")
        resume = {}
        for members, local, ranks, direct in self._groups(waiting[self.local[0]].eqn):
            if direct is not None:
                rule, comm, k = direct
                request = waiting[local[0]]
                out = rule(comm, _contiguous(request.value), k, self.state,
                           **request.eqn.params)
                if out is not None:
                    resume[local[0]] = out
                    continue
            if len(ranks) == 1:
                request = waiting[members[0]]
                outs = dict(zip(members, reference.group_rules[request.eqn.primitive](
                    [waiting[m].value for m in members], **request.eqn.params)))
            else:
                outs = _across_ranks(self.state, members, ranks, waiting, self.native)
            for m in local:
                resume[m] = outs[m]
        waiting.clear()
        return resume


def _steps(programs: dict, local: list) -> tuple:
    """Straight-line programs of the local devices as flat steps: ``(input keys, literals,
    segments, output keys)``, each by position. A segment is each device's equations up to a
    communication node (``(impl, keys read, keys written, params, keys freed, equation)``),
    then the node (by position: ``(key read, key written, keys freed, equation)``; None at
    the end). Values are keyed by each device's own variables (programs read from text have
    variables of their own; specialisation makes some operands per-device literals), and
    literals get keys of their own."""
    from ir.core import Literal
    from ir.interpreter import last_uses
    from ir.specialise import COMMUNICATION
    in_keys, literals, out_keys, dead = {}, {}, {}, {}

    def key_of(p, atom):
        if type(atom) is not Literal:
            return id(atom)
        key = ("literal", len(literals[p]))
        literals[p][key] = atom.value
        return key

    for p in local:
        literals[p] = {}
        in_keys[p] = [id(v) for v in programs[p].invars]
        out_keys[p] = [key_of(p, atom) for atom in programs[p].outvars]
        dead[p] = last_uses(programs[p])
    segments = []
    computes = {p: [] for p in local}
    for k, eqn in enumerate(programs[local[0]].eqns):
        if eqn.primitive in COMMUNICATION:
            node = {}
            for p in local:
                mine = programs[p].eqns[k]
                node[p] = (key_of(p, mine.invars[0]), id(mine.outvars[0]), dead[p][k], mine)
            segments.append((computes, node))
            computes = {p: [] for p in local}
            continue
        for p in local:
            mine = programs[p].eqns[k]
            computes[p].append((reference.impl_rules[mine.primitive],
                                [key_of(p, atom) for atom in mine.invars],
                                [id(v) for v in mine.outvars], mine.params, dead[p][k], mine))
    segments.append((computes, None))
    return in_keys, literals, segments, out_keys


def _locate(err: BaseException, eqn, mesh, p: int) -> None:
    """Attach the failing equation, its device and this process to ``err``, as the
    interpreter and the scheduler do for programs they walk."""
    device = mesh.devices.flat[p]
    reference.DeviceInterpreter(device.id)._locate(err, eqn)
    where = f", at {eqn.primitive}" + (f" ({eqn.source})" if eqn.source else "")
    _note(err, f"on device {device.id} (mesh coordinates {mesh.coords(p)}) of process "
               f"{world().rank}{where}")


def _local_programs(lowered, local: list) -> dict:
    """Each local position's program: specialised for those positions only, unless the
    per-device programs exist already (built, or read from text)."""
    if lowered.built or lowered.mesh_program is None:
        programs = lowered.device_programs
        return {p: programs[p].program for p in local}
    from ir.specialise import device_programs
    return {dp.position: dp.program for dp in device_programs(lowered, local)}


def _communicates_under_control(program) -> bool:
    """Whether a communication node lies inside a loop, a branch or any other sub-program."""
    from ir.core import programs_in
    return any(_communicates(sub) for eqn in program.eqns for value in eqn.params.values()
               for sub in programs_in(value))


def _communicates(program) -> bool:
    from ir.core import programs_in
    from ir.specialise import COMMUNICATION
    return any(eqn.primitive in COMMUNICATION
               or any(_communicates(sub) for value in eqn.params.values()
                      for sub in programs_in(value))
               for eqn in program.eqns)


def _advance(runs, p, value, waiting, results, prints, printed, mesh):
    try:
        reference._advance(runs, p, value, waiting, results, prints, printed)
    except Exception as err:
        device = mesh.devices.flat[p]
        eqn = _failing_equation(err)
        where = f", at {eqn.primitive}" + (f" ({eqn.source})" if eqn.source else "") if eqn else ""
        _note(err, f"on device {device.id} (mesh coordinates {mesh.coords(p)}) of process "
                   f"{world().rank}{where}")
        raise


def _failing_equation(err):
    """The equation a device was running when ``err`` was raised: the innermost program
    frame's (a loop body's rather than the loop's)."""
    found, tb = None, err.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is reference._device_steps.__code__:
            found = tb.tb_frame.f_locals.get("eqn", found)
        tb = tb.tb_next
    return found


def _note(err: BaseException, text: str) -> None:
    if hasattr(err, "add_note"):
        err.add_note(text)
    else:   # Python 3.10: the note goes into the message
        err.args = ((f"{err.args[0]}\n  {text}" if err.args else text),) + err.args[1:]


def _meet(state: _Round, waiting: dict, native: bool) -> dict:
    """Every local device waits at a node or has finished: complete every group they wait at,
    in the one global order of device groups."""
    groups: dict = {}
    for p, request in waiting.items():
        group = next(g for g in request.eqn.params["device_groups"]
                     if state.mesh.device_ids[p] in g)
        groups.setdefault(tuple(group), []).append(p)
    resume = {}
    for group in sorted(groups):
        members = [state.position_of[d] for d in group]
        local = [m for m in members if state.rank_of[m] == world().rank]
        missing = [m for m in local if m not in waiting]
        if missing:
            raise reference.DeadlockError(
                f"device {state.mesh.device_ids[missing[0]]} finished while the devices of its "
                f"group {group} wait at {waiting[groups[group][0]].eqn.primitive}")
        ranks = tuple(sorted({state.rank_of[m] for m in members}))
        if len(ranks) == 1:
            reference._check_same_node(members, waiting)
            request = waiting[members[0]]
            outs = reference.group_rules[request.eqn.primitive](
                [waiting[m].value for m in members], **request.eqn.params)
            outs = dict(zip(members, outs))
        else:
            outs = _across_ranks(state, members, ranks, waiting, native)
        for m in local:
            resume[m] = outs[m]
            del waiting[m]
    return resume


_NODE_PRINTS: dict = {}


def _node_fingerprint(request) -> int:
    """What the members of a group must agree on: the node's primitive, params and operand
    type (computed once per equation)."""
    eqn, value = request.eqn, request.value
    entry = _NODE_PRINTS.get(id(eqn))
    if entry is None or entry[0] is not eqn:
        if len(_NODE_PRINTS) > 4096:
            _NODE_PRINTS.clear()
        params = sorted((k, v) for k, v in eqn.params.items() if k != "device_groups")
        entry = _NODE_PRINTS[id(eqn)] = (eqn, _fingerprint(f"{eqn.primitive} {params}"))
    return entry[1] ^ _fingerprint(f"{np.shape(value)} {np.asarray(value).dtype}")


def _across_ranks(state: _Round, members: list, ranks: tuple, waiting: dict,
                  native: bool) -> dict:
    """Complete one group's node whose members live on several ranks; outputs of the local
    members, by position."""
    me = world().rank
    local = [m for m in members if state.rank_of[m] == me]
    request = waiting[local[0]]
    prim, params = request.eqn.primitive, request.eqn.params
    if prim is prims.all_slice_p and not state.headers:
        # each member keeps a chunk of its own block: nothing crosses processes (under
        # control flow the general exchange still checks that the group is at one node)
        return {m: np.split(np.asarray(waiting[m].value), params["axis_size"],
                            params["slice_axis"])[members.index(m)] for m in local}
    comm = _comm(state, ranks)
    if native and prim is prims.all_reduce_p and _natively_reducible(request):
        return _native_all_reduce(state, comm, ranks, local, members, waiting,
                                  params["reduction"])
    exchange = _EXCHANGES.get(prim, _gather_then_apply)
    return exchange(state, comm, members, ranks, local, waiting)


def _comm(state, ranks: tuple):
    """The communicator of ``ranks``. Making one is collective over them: an open agreement
    settles first, so that no process waits there for one that runs something else."""
    w = world()
    comm = w._comms.get(ranks)
    if comm is None:
        _settle(state)
        comm = w.comm_of(ranks)
    return comm


def _settle(state) -> None:
    if state is not None and state.opening is not None:
        opening, state.opening = state.opening, None
        opening.settle()


def _gather_then_apply(state, comm, members, ranks, local, waiting) -> dict:
    """Every rank of the group gets every member's block, then applies the reference's rule:
    the simulator's result, reduced in its order (all_reduce, all_gather)."""
    request = waiting[local[0]]
    value = np.asarray(request.value)
    count_on = {r: sum(1 for m in members if state.rank_of[m] == r) for r in ranks}
    payload = [np.asarray(waiting[m].value) for m in local]
    _check_local_same(local, waiting)
    data, headers = _exchange_all(comm, payload, _header(state, request),
                                  [value.nbytes * count_on[r] for r in ranks], state)
    _check_node_headers(headers, ranks, request)
    if _gathered_in_place(state, members, ranks, request, value):
        # one large block per rank, in rank order, gathered along axis 0: the receive buffer
        # is the result already
        lead = ((len(members) * value.shape[0],) if request.eqn.params["tiled"]
                else (len(members), value.shape[0]))
        joined = data[0].base.view(value.dtype).reshape(lead + value.shape[1:])
        return {m: joined for m in local}
    by_rank = {r: iter(_split_blocks(d, count_on[r], value.shape, value.dtype))
               for r, d in zip(ranks, data)}
    blocks = [next(by_rank[state.rank_of[m]]) for m in members]
    outs = reference.group_rules[request.eqn.primitive](blocks, **request.eqn.params)
    return {m: out for m, out in zip(members, outs) if m in local}


def _gathered_in_place(state, members, ranks, request, value) -> bool:
    return (request.eqn.primitive is prims.all_gather_p
            and request.eqn.params["gather_axis"] == 0 and value.ndim > 0
            and value.nbytes >= _SEPARATE_HEADER_BYTES
            and [state.rank_of[m] for m in members] == list(ranks))


def _one_per_rank(state, members, ranks) -> bool:
    """Whether the group has one member on each of its ranks, in rank order (the member's
    group index is then its rank in the group's communicator)."""
    return len(members) == len(ranks) and [state.rank_of[m] for m in members] == list(ranks)


def _check_local_same(local, waiting) -> None:
    if len(local) > 1:
        reference._check_same_node(local, waiting)


def _header(state, request):
    """The fingerprint a node's exchange carries, or None where the ranks are known to be at
    the same node (``state.headers`` false: see ``LocalPlan``)."""
    return _node_fingerprint(request) if state.headers else None


def _check_node_headers(headers, ranks, request) -> None:
    if headers is None:
        return
    _check_headers(list(headers), list(ranks),
                   f"reached a different communication node than {request.eqn.primitive}"
                   f"[mesh_axes={request.eqn.params.get('mesh_axes')}] (a collective under "
                   "control flow that goes differently on different processes)")


_PAIR_TAG = 7312


def _exchange_pairs(comm, ranks, sends: dict, recv_counts: dict, header, state=None) -> tuple:
    """``sends[r]``: the arrays for world rank r; ``recv_counts[r]``: the bytes expected from
    it. Returns the bytes received by rank, and every rank's header (the caller compares them;
    when they differ nothing else moves, None); ``header=None`` sends none.

    The headers go first, in one Alltoall of 8 bytes; then one message per pair of ranks that
    has something to exchange, point to point (a single contiguous array is sent without a
    copy, and received into the buffer its blocks will view)."""
    MPI = world().MPI
    me = world().rank
    headers = None
    if header is not None:
        heads = np.empty(len(ranks), np.int64)
        comm.Alltoall(np.full(len(ranks), header, np.int64), heads)
        headers = heads.tolist()
        if len(set(headers)) > 1:
            return {r: None for r in ranks}, headers
    requests, received = [], {}
    for k, r in enumerate(ranks):
        if r != me and recv_counts.get(r, 0):
            received[r] = np.empty(recv_counts[r], np.uint8)
            requests.append(comm.Irecv([received[r], MPI.BYTE], source=k, tag=_PAIR_TAG))
    for k, r in enumerate(ranks):
        if r != me and sends.get(r):
            requests.append(comm.Isend([_as_bytes(sends[r]), MPI.BYTE], dest=k, tag=_PAIR_TAG))
    received[me] = _as_bytes(sends.get(me, ()))
    if requests:
        _wait(state, requests)
    empty = np.empty(0, np.uint8)
    return {r: received.get(r, empty) for r in ranks}, headers


def _as_bytes(arrays) -> np.ndarray:
    """The arrays' bytes, one after another (a view when there is one contiguous array)."""
    views = [np.ascontiguousarray(a).reshape(-1).view(np.uint8) for a in arrays]
    if len(views) == 1:
        return views[0]
    return np.concatenate(views) if views else np.empty(0, np.uint8)


def _chunks(block, n: int, axis: int, tiled: bool) -> list:
    """The reference's chunks of one block along ``axis`` (one per group member)."""
    if tiled:
        return np.split(block, n, axis)
    return [np.take(block, d, axis=axis) for d in range(n)]


def _chunked_exchange(state, comm, members, ranks, local, waiting, axis_key):
    """Member d receives chunk d of every member's block: chunks[d][s], in group order of s.
    Each chunk crosses to its destination's rank once."""
    request = waiting[local[0]]
    params = request.eqn.params
    n, me = len(members), world().rank
    tiled = params.get("tiled", True)
    _check_local_same(local, waiting)
    chunks_of = {s: _chunks(np.asarray(waiting[s].value), n, params[axis_key], tiled)
                 for s in local}
    index = {m: k for k, m in enumerate(members)}
    sends = {r: [chunks_of[s][index[d]] for s in local for d in members
                 if state.rank_of[d] == r] for r in ranks}
    like = chunks_of[local[0]][0]
    sources_on = {r: [s for s in members if state.rank_of[s] == r] for r in ranks}
    recv_counts = {r: like.nbytes * len(sources_on[r]) * len(local) for r in ranks}
    data, headers = _exchange_pairs(comm, ranks, sends, recv_counts, _header(state, request),
                                    state)
    _check_node_headers(headers, ranks, request)
    received = {}
    for r in ranks:
        parts = iter(_split_blocks(data[r], len(sources_on[r]) * len(local), like.shape,
                                   like.dtype))
        for s in sources_on[r]:
            for d in local:
                received[(s, d)] = next(parts)
    return {d: [received[(s, d)] for s in members] for d in local}


def _all_to_all_exchange(state, comm, members, ranks, local, waiting) -> dict:
    """all_to_all: member d joins chunk d of every member's block along ``concat_axis``."""
    params = waiting[local[0]].eqn.params
    parts = _chunked_exchange(state, comm, members, ranks, local, waiting, "split_axis")
    join = np.concatenate if params.get("tiled", True) else np.stack
    return {d: join(chunks, params["concat_axis"]) for d, chunks in parts.items()}


def _reduce_scatter_exchange(state, comm, members, ranks, local, waiting) -> dict:
    """reduce_scatter: member d reduces chunk d of every member's block in group order, which
    is bitwise chunk d of the reference's reduction of whole blocks (elementwise)."""
    params = waiting[local[0]].eqn.params
    parts = _chunked_exchange(state, comm, members, ranks, local, waiting, "scatter_axis")
    outs = {}
    for d, chunks in parts.items():
        total = reference._all_reduce(chunks, reduction=params["reduction"])[0]
        outs[d] = _contiguous(total)
    return outs


def _ppermute_exchange(state, comm, members, ranks, local, waiting) -> dict:
    """ppermute: each source's block goes to its destination's rank only; members no pair
    names get zeros."""
    request = waiting[local[0]]
    value = np.asarray(request.value)
    _check_local_same(local, waiting)
    pairs = [(members[s], members[d]) for s, d in request.eqn.params["perm"]]
    sends = {r: [np.asarray(waiting[s].value) for s, d in pairs
                 if s in local and state.rank_of[d] == r] for r in ranks}
    incoming = {r: [(s, d) for s, d in pairs if state.rank_of[s] == r and d in local]
                for r in ranks}
    recv_counts = {r: value.nbytes * len(incoming[r]) for r in ranks}
    data, headers = _exchange_pairs(comm, ranks, sends, recv_counts, _header(state, request),
                                    state)
    _check_node_headers(headers, ranks, request)
    named = {d for _, d in pairs}
    outs = {d: np.zeros_like(value) for d in local if d not in named}
    for r in ranks:
        blocks = _split_blocks(data[r], len(incoming[r]), value.shape, value.dtype)
        for (s, d), block in zip(incoming[r], blocks):
            outs[d] = block
    return outs


_SCATTERED_REDUCTION_BYTES = 1 << 16


def _all_reduce_exchange(state, comm, members, ranks, local, waiting) -> dict:
    """all_reduce with large blocks over three or more ranks, or over ranks holding several
    members each: each rank reduces one chunk of the flattened blocks over every member, in
    group order, then the reduced chunks are gathered (each rank moves about two blocks, not
    one per member on other ranks). Reductions are elementwise, so this is bitwise the
    reference's reduction of whole blocks. Smaller blocks, and two ranks of one member each,
    gather every block (one exchange instead of two, moving as much)."""
    request = waiting[local[0]]
    value = np.asarray(request.value)
    if ((len(ranks) < 3 and len(members) == len(ranks))
            or value.nbytes < _SCATTERED_REDUCTION_BYTES):     # the same on every rank
        return _gather_then_apply(state, comm, members, ranks, local, waiting)
    _check_local_same(local, waiting)
    params = request.eqn.params
    pieces = {m: np.array_split(np.asarray(waiting[m].value).reshape(-1), len(ranks))
              for m in local}
    order = {r: k for k, r in enumerate(ranks)}
    me = world().rank
    sends = {r: [pieces[m][order[r]] for m in local] for r in ranks}
    mine = pieces[local[0]][order[me]]
    sources_on = {r: [m for m in members if state.rank_of[m] == r] for r in ranks}
    recv_counts = {r: mine.nbytes * len(sources_on[r]) for r in ranks}
    fingerprint = _header(state, request)
    data, headers = _exchange_pairs(comm, ranks, sends, recv_counts, fingerprint, state)
    _check_node_headers(headers, ranks, request)
    received = {}
    for r in ranks:
        for m, chunk in zip(sources_on[r], _split_blocks(data[r], len(sources_on[r]),
                                                         mine.shape, mine.dtype)):
            received[m] = chunk
    reduced = reference._all_reduce([received[m] for m in members], **params)[0]
    reduced = np.ascontiguousarray(reduced)
    sizes = [p.size for p in pieces[local[0]]]
    counts = [n * reduced.dtype.itemsize for n in sizes]
    parts, headers = _exchange_all(comm, [reduced], fingerprint, counts, state)
    _check_node_headers(headers, ranks, request)
    total = np.concatenate([p.view(reduced.dtype) for p in parts]).reshape(value.shape)
    return {m: total for m in local}


# --- one device on each process of the group: MPI's own call, into the result ----------------
# Member k of the group is then rank k of its communicator. Each rule returns the local
# member's result, or None where it does not apply (the general exchange runs instead).
# Buffers go as bytes: MPI has no type for bfloat16 and the other narrow floats.

def _contiguous(value) -> np.ndarray:
    """``value`` as a C-contiguous array of its own shape (numpy's ascontiguousarray makes a
    0-d array 1-d)."""
    array = np.asarray(value)
    return array if array.flags.c_contiguous else np.ascontiguousarray(array)


def _raw(array: np.ndarray) -> np.ndarray:
    """The bytes of a C-contiguous array, as a view."""
    return array.reshape(-1).view(np.uint8)


def _direct_all_reduce(comm, block, k, state, *, reduction, **params):
    """Gather every member's block (one Allgather), then reduce in group order: bitwise the
    reference's reduction."""
    gathered = np.empty((comm.size,) + block.shape, block.dtype)
    _wait(state, [comm.Iallgather(_raw(block), _raw(gathered))])
    return reference._all_reduce(list(gathered), reduction=reduction)[0]


def _direct_all_gather(comm, block, k, state, *, gather_axis, tiled, **params):
    if gather_axis != 0 or block.ndim == 0 and tiled:
        return None
    n = comm.size
    out = np.empty(((n * block.shape[0],) if tiled else (n,)) + block.shape[tiled:],
                   block.dtype)
    _wait(state, [comm.Iallgather(_raw(block), _raw(out))])
    return out


def _direct_all_to_all(comm, block, k, state, *, split_axis, concat_axis, **params):
    """Chunk d of the block is its d-th slice along axis 0, and the result joins the chunks
    along axis 0 in group order: MPI's Alltoall (tiled or not, the shapes agree)."""
    if split_axis != 0 or concat_axis != 0:
        return None
    out = np.empty_like(block)
    _wait(state, [comm.Ialltoall(_raw(block), _raw(out))])
    return out


def _direct_reduce_scatter(comm, block, k, state, *, scatter_axis, tiled, reduction,
                           **params):
    """Each member's chunk k reaches member k (one Alltoall), which reduces the chunks in group
    order: bitwise chunk k of the reference's reduction (it is elementwise)."""
    if scatter_axis != 0:
        return None
    received = np.empty_like(block)
    _wait(state, [comm.Ialltoall(_raw(block), _raw(received))])
    n = comm.size
    chunks = received.reshape((n, block.shape[0] // n) + block.shape[1:]) if tiled else received
    return _contiguous(reference._all_reduce(list(chunks), reduction=reduction)[0])


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
        requests.append(comm.Irecv(_raw(out), source=source[0], tag=_PERMUTE_TAG))
    if dest:
        requests.append(comm.Isend(_raw(block), dest=dest[0], tag=_PERMUTE_TAG))
    if requests:
        _wait(state, requests)
    return out


_DIRECT = {
    prims.all_reduce_p: _direct_all_reduce,
    prims.all_gather_p: _direct_all_gather,
    prims.all_to_all_p: _direct_all_to_all,
    prims.reduce_scatter_p: _direct_reduce_scatter,
    prims.ppermute_p: _direct_ppermute,
}


_EXCHANGES = {
    prims.all_reduce_p: _all_reduce_exchange,
    prims.all_to_all_p: _all_to_all_exchange,
    prims.reduce_scatter_p: _reduce_scatter_exchange,
    prims.ppermute_p: _ppermute_exchange,
}


def _natively_reducible(request) -> bool:
    return _natively_reducible_type(np.asarray(request.value).dtype,
                                    request.eqn.params["reduction"])


# the dtypes MPI reduces natively (it has no bfloat16 or float16, and bool sums count)
_NATIVE_DTYPES = frozenset(np.dtype(t) for t in (
    np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
    np.uint8, np.uint16, np.uint32, np.uint64))


def _natively_reducible_type(dtype, reduction) -> bool:
    return np.dtype(dtype) in _NATIVE_DTYPES and reduction in ("sum", "mean", "max", "min")


def _native_all_reduce(state, comm, ranks, local, members, waiting, reduction) -> dict:
    """MPI's Allreduce over the ranks' partial reductions: fast, not bit-exact (MPI picks the
    order). Under control flow the ranks first compare the node's fingerprint, as every other
    exchange there does."""
    MPI = world().MPI
    request = waiting[local[0]]
    if state.headers:
        _, headers = _exchange_all(comm, [], _node_fingerprint(request), [0] * len(ranks))
        _check_node_headers(headers, ranks, request)
    blocks = [np.asarray(waiting[m].value) for m in local]
    partial = reference._all_reduce(blocks, reduction="sum" if reduction == "mean"
                                    else reduction)[0]
    partial = _contiguous(partial)
    total = np.empty_like(partial)
    op = {"sum": MPI.SUM, "mean": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}[reduction]
    _wait(state, [comm.Iallreduce(partial, total, op=op)])
    if reduction == "mean":
        total = np.asarray(total / len(members)).astype(
            reference._reduced_dtype(partial.dtype, "mean"), copy=False)
    return {m: total for m in local}


# --- the backend ---------------------------------------------------------------------------------

class MpiBackend(reference.ReferenceBackend):
    """Host equations on global values on every rank; shard_map bodies on the ranks holding
    their devices. ``SHARDC_MPI_REDUCTIONS=native`` uses MPI's reductions (not bit-exact)."""
    name = "mpi"

    def __init__(self, native: bool | None = None):
        if native is None:
            mode = os.environ.get("SHARDC_MPI_REDUCTIONS", "exact") or "exact"
            if mode not in ("exact", "native"):
                raise ValueError(f"SHARDC_MPI_REDUCTIONS must be 'exact' or 'native', "
                                 f"got {mode!r}")
            native = mode == "native"
        self.native = native
        self._checked: dict = {}
        self._shardings: dict = {}
        self._plans: dict = {}

    def eval_block(self, prim, blocks, params) -> list:
        if not any(_is_absent(b) for b in blocks):
            return super().eval_block(prim, blocks, params)
        if prim is prims.debug_print_p:
            return []
        avals = out_avals(prim, [Aval(b.shape, b.dtype) for b in blocks], params)
        return [Absent(a.shape, a.dtype) for a in avals]

    def run_programs(self, mesh, programs, inputs) -> list:
        agree(self._fingerprint_of(programs, lambda: "\n".join(str(p) for p in programs[:1])),
              _DIFFERENT_PROGRAM)
        return run_local_programs(mesh, programs, inputs, self.native)

    def to_blocks(self, value, mesh, spec) -> list:
        """This rank's blocks of ``value``; the others ``Absent`` (a global value's other
        blocks are views, never copied)."""
        blocks = reference.to_blocks(value, mesh, spec)
        me = world().rank
        return [b if d.process_index == me or _is_absent(b) else Absent(b.shape, b.dtype, d)
                for b, d in zip(blocks, mesh.devices.flat)]

    def from_blocks(self, blocks, mesh, spec):
        first = blocks[0]
        shape = global_shape(first.shape, spec, mesh.shape)
        return MpiArray(Aval(shape, first.dtype), self._sharding(mesh, spec), list(blocks))

    def _sharding(self, mesh, spec):
        """One sharding object per (mesh, spec): jit compares input shardings on every call,
        and the same object compares at once."""
        key = (id(mesh), tuple(spec))
        sharding = self._shardings.get(key)
        if sharding is None or sharding.mesh is not mesh:
            sharding = self._shardings[key] = keyed_sharding(mesh, canonical_spec(spec))
        return sharding

    def sharding_of(self, value):
        if not isinstance(value, Array):
            return None
        sharding = value.sharding
        if type(sharding) is NamedSharding:
            return self._sharding(sharding.mesh, sharding.spec)
        return sharding

    def execute(self, module, args) -> list:
        """Run a module once every process has agreed to run it (``Agreement``): otherwise one
        would wait at a collective the others never reach. A module that is one shard_map with
        straight-line communication overlaps the agreement with its first exchange."""
        entry = module.__dict__.get("_mpi_entry")
        if entry is None or entry[0] is not self:
            only = _only_shard_map(module)
            entry = module._mpi_entry = (
                self, _fingerprint(str(module.program)), only,
                only is not None and self._plan(only).straight)
        _, fingerprint, only, overlapped = entry
        if overlapped:
            return self._run_shard_map(only, args, fingerprint)
        agree(fingerprint, _DIFFERENT_PROGRAM)
        if only is not None:
            return self._run_shard_map(only, args)
        return reference.execute_module(
            module, args, lambda index, values: self._run_shard_map(module.lowered(index),
                                                                    values))

    def _fingerprint_of(self, key_object, text) -> int:
        """The fingerprint of a module's (or programs') text, computed once per object."""
        key = id(key_object)
        entry = self._checked.get(key)
        if entry is None or entry[0] is not key_object:
            if len(self._checked) > 4096:
                self._checked.clear()
            entry = self._checked[key] = (key_object, _fingerprint(text()))
        return entry[1]

    def every_block(self, blocks, mesh) -> list:
        """Every position's block on every rank (check_vma='runtime' of an eager shard_map)."""
        return gather_positions(blocks, mesh)

    def _run_shard_map(self, lowered, values, fingerprint=None) -> list:
        """Run one shard_map on this process's devices; with the module's ``fingerprint``, its
        agreement is posted here and overlaps the first exchange (straight programs)."""
        plan = self._plan(lowered)
        mesh = lowered.mesh
        inputs = {p: [] for p in plan.local}
        for value, spec, sharding in zip(values, lowered.in_shardings, plan.in_shardings):
            if type(value) is MpiArray and value.sharding is sharding and value._buffers:
                blocks = value._buffers       # laid out as the program wants it already
            else:
                blocks = self.to_blocks(value, mesh, spec)
            for p in plan.local:
                inputs[p].append(blocks[p])
        results = plan.run(inputs, None if fingerprint is None
                           else Agreement(fingerprint, _DIFFERENT_PROGRAM))
        outs = []
        for k, (aval, sharding) in enumerate(zip(plan.out_global_avals, plan.out_shardings)):
            column = [results[p][k] for p in range(mesh.size)]
            if lowered.runtime_check:
                _runtime_check(column, mesh, sharding.spec, k)
            outs.append(MpiArray(aval, sharding, column))
        return outs

    def _plan(self, lowered) -> LocalPlan:
        entry = self._plans.get(id(lowered))
        if entry is None or entry.lowered is not lowered:
            if len(self._plans) > 4096:
                self._plans.clear()
            entry = self._plans[id(lowered)] = LocalPlan(lowered, world().rank, self.native)
            mesh = lowered.mesh
            entry.in_shardings = [self._sharding(mesh, spec) for spec in lowered.in_shardings]
            entry.out_shardings = [self._sharding(mesh, spec) for spec in lowered.out_specs]
            entry.out_global_avals = [Aval(global_shape(a.shape, spec, mesh.shape), a.dtype)
                                      for a, spec in zip(entry.out_avals, lowered.out_specs)]
        return entry


_DIFFERENT_PROGRAM = ("are about to run a different program (every process must run the same "
                      "sequence of programs: no process-dependent Python control flow around "
                      "jit or shard_map)")


def _only_shard_map(module):
    """The lowered shard_map when the module is exactly one shard_map of its inputs, in order,
    giving its outputs (run without the host program's interpreter), else None."""
    program = module.program
    if len(program.eqns) != 1 or program.constvars or 0 not in module.shard_maps:
        return None
    (eqn,) = program.eqns
    if (len(eqn.invars) == len(program.invars) == len(set(map(id, eqn.invars)))
            and all(a is b for a, b in zip(eqn.invars, program.invars))
            and len(eqn.outvars) == len(program.outvars)
            and all(a is b for a, b in zip(eqn.outvars, program.outvars))):
        return module.lowered(0)
    return None


def _runtime_check(column, mesh, spec, k) -> None:
    """check_vma='runtime': every rank compares every position's block (all gathered)."""
    mismatch = replication_mismatch(gather_positions(column, mesh), mesh, spec)
    if mismatch:
        raise runtime_replication_error(k, spec, mesh, mismatch)


def gather_positions(column: list, mesh) -> list:
    """Every position's block on every rank (each rank sends the blocks of its devices)."""
    w = world()
    rank_of = [d.process_index for d in mesh.devices.flat]
    like = column[0]
    shape, dtype = tuple(np.shape(like)) if not _is_absent(like) else like.shape, like.dtype
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    mine = [column[p] for p in range(mesh.size) if rank_of[p] == w.rank]
    counts = [nbytes * rank_of.count(r) for r in range(w.size)]
    opening = _Opening(Agreement(_fingerprint(f"positions {shape} {dtype}"),
                                 "gathered different blocks"))
    data, _ = _exchange_all(w.comm, [np.asarray(b) for b in mine], None, counts, opening)
    by_rank = {r: iter(_split_blocks(data[r], rank_of.count(r), shape, dtype))
               for r in range(w.size)}
    return [next(by_rank[r]) for r in rank_of]

