"""Agreements: every operation that crosses processes opens with a fingerprint of what each
process is about to do (the program with its operand types, and the host values entering the
mesh), compared across processes before any of the operation's data is used.

A mismatch is a CoherenceError on every process. Only then do the processes exchange the
details behind their fingerprints (``detail``), so that the message names what differs and
each process's side of it::

    CoherenceError: processes [1] and process 0 disagree on the values entering the mesh ...
      argument 0: process 0: f32[16], values 3f2a19c0...; process 1: f32[32], values 81bc02d4...
"""
from __future__ import annotations

import hashlib
import pickle
import zlib

import numpy as np

from ir.dtypes import short_name
from ir.source import caller_source
from runtime.mpi.faults import ProcessLeftError, begin_operation, wait_all
from runtime.mpi.world import world


class CoherenceError(RuntimeError):
    """Ranks reached different programs or different communication nodes."""


class _Slots:
    """The agreements' state: one is open at a time, and its buffers are these."""

    def __init__(self):
        self.comm = None          # the communicator of agreements (the world's check_comm)
        self.mine = np.zeros(1, np.int64)
        self.theirs = np.zeros(0, np.int64)
        self.open = None
        # set when a mismatch left exchanges in flight: nothing more may cross processes
        self.broken = ""
        self.orphans: list = []
        self.persistent = None    # the Allgather started afresh at each agreement

    def bind(self, comm) -> None:
        self.comm, self.theirs = comm, np.zeros(comm.size, np.int64)
        # an MPI 4 persistent collective over the two buffers, made once (by every process,
        # at its first agreement) and started at each: a fraction of what posting a new
        # Iallgather costs, and the data it moves is the same
        try:
            self.persistent = comm.Allgather_init(self.mine, self.theirs)
        except (AttributeError, NotImplementedError):
            self.persistent = None


_slots = _Slots()


class Agreement:
    """Every operation that crosses processes (a module's run, an eager collective, host
    values entering the mesh, gathering a global array, the multi-process utilities) opens
    with one: each process contributes the fingerprint of what it is about to do, in one 8-byte
    nonblocking Allgather on a communicator used for nothing else. Every process's k-th
    agreement meets every other's k-th, so a process about to do something else is found
    there, before any of the operation's data is used.

    ``what``: the error's text, or a function giving it from the labels of the details that
    differ; ``detail``: a function giving this process's side (a text, or a list of
    ``(label, text)``), exchanged only on a mismatch;
    ``doing``: what this process waits for (see ``faults.wait_all``).

    The constructor posts it; ``settle`` waits for it and raises CoherenceError on a mismatch.
    An operation may post its first exchange in between (nonblocking) so that the agreement
    costs no round trip of its own (``settle_then_wait``): the exchange's data is read only
    once the agreement has settled, and a mismatch ends the job (an uncaught error aborts every
    process)."""
    __slots__ = ("request", "what", "detail", "doing")

    def __init__(self, header: int, what, detail=None, doing=None):
        slots = _slots
        if slots.broken:
            raise CoherenceError(slots.broken)
        if slots.open is not None:
            # one still open (a module's, before its first exchange) settles first: the
            # processes meet their agreements in order
            slots.open.settle()
        comm = world().check_comm
        if slots.comm is not comm:
            slots.bind(comm)
        slots.mine[0] = header
        begin_operation()
        request = slots.persistent
        if request is None:
            request = comm.Iallgather(slots.mine, slots.theirs)
        else:
            request.Start()
        self.request = request
        self.what, self.detail, self.doing = what, detail, doing
        slots.open = self

    def settle(self) -> None:
        try:
            wait_all([self.request], self.doing)
        except ProcessLeftError as err:
            # the agreement stays in flight, with its buffers: nothing more may cross
            _slots.orphans.append(self.request)
            _slots.broken = f"a process left the job while this one waited for it ({err})"
            raise
        finally:
            _slots.open = None
        theirs = _slots.theirs.tolist()
        if theirs.count(theirs[0]) != len(theirs):
            detail = self.detail() if self.detail is not None else None
            raise coherence_error(theirs, self.what,
                                  allgather_objects(world().check_comm, detail, self.doing))


def is_open(agreement) -> bool:
    """Whether ``agreement`` is posted and not yet settled."""
    return agreement is not None and _slots.open is agreement


def fingerprints(header: int) -> list:
    """Every process's ``header``, by rank (an agreement whose caller compares them)."""
    agreement = Agreement(header, None)
    try:
        wait_all([agreement.request], agreement.doing)
    finally:
        _slots.open = None
    return _slots.theirs.tolist()


def agree(header: int, what, detail=None, doing=None) -> None:
    """Wait until every process has reached an operation with the same fingerprint; a process
    reaching another is a CoherenceError on all of them (see ``Agreement``)."""
    Agreement(header, what, detail, doing).settle()


class Opening:
    """An operation's agreement, settled before its first exchange's data is waited for."""
    __slots__ = ("opening", "doing")

    def __init__(self, opening=None):
        self.opening = opening
        self.doing = opening.doing if opening is not None else None


def settle_then_wait(state, requests: list) -> None:
    """Wait for an exchange's requests, after settling the operation's agreement if it is still
    open (``state.opening``). A mismatch found then leaves the exchange in flight, where it
    may never complete: its requests (and so its buffers) are kept, and nothing more may cross
    processes (an uncaught CoherenceError ends the job anyway)."""
    try:
        settle(state)
    except CoherenceError as err:
        _slots.orphans.extend(requests)
        _slots.broken = (f"an earlier CoherenceError left exchanges in flight; no more "
                         f"operations can cross processes ({err})")
        raise
    wait_all(requests, None if state is None else state.doing)


def abandon(requests: list, reason: str) -> None:
    """Keep ``requests`` (and so their buffers) in flight for good, after an error left them
    unfinished: nothing more may cross processes."""
    _slots.orphans.extend(requests)
    if not _slots.broken:         # the first cause is the one to name
        _slots.broken = (f"an earlier error left exchanges in flight; no more operations "
                         f"can cross processes ({reason})")


def settle(state) -> None:
    if state is not None and state.opening is not None:
        opening, state.opening = state.opening, None
        opening.settle()


def coherence_error(headers: list, what, details: list) -> CoherenceError:
    """The error for fingerprints ``headers`` (by rank) that differ, with the lines of the
    details (by rank) that differ. ``what``: a text, or a function of the labels that differ."""
    differ = [r for r, h in enumerate(headers) if h != headers[0]]
    sides = [[("", d)] if isinstance(d, str) else list(d or ()) for d in details]
    labels = [label for label in dict.fromkeys(label for side in sides for label, _ in side)
              if len({dict(side).get(label, "(none)") for side in sides}) > 1]
    text = what(labels) if callable(what) else what
    return CoherenceError("\n".join([f"processes {differ} and process 0 {text}"]
                                    + _detail_lines(sides, labels)))


def _detail_lines(sides: list, labels: list) -> list:
    """For each label whose texts differ between processes, one line with each process's text;
    texts over several lines show their first line that differs, by number."""
    lines = []
    for label in labels:
        texts = [dict(side).get(label, "(none)") for side in sides]
        head = f"  {label}: " if label else "  "
        if any("\n" in t for t in texts):
            split = [t.splitlines() for t in texts]
            k = min(_first_difference(lines_, split[0]) for lines_ in split[1:])
            head += f"line {k + 1}: "
            texts = [lines_[k].strip() if k < len(lines_) else "(the end)" for lines_ in split]
        lines.append(head + "; ".join(f"process {r}: {t}" for r, t in enumerate(texts)))
    return lines


def _first_difference(lines: list, reference: list) -> int:
    """The index of the first line where ``lines`` and ``reference`` differ (len if none)."""
    for k, (a, b) in enumerate(zip(lines, reference)):
        if a != b:
            return k
    return min(len(lines), len(reference)) if len(lines) != len(reference) else len(lines)


def fingerprint(text: str) -> int:
    return zlib.crc32(text.encode())


# --- exchanging Python objects (error details, the multi-process utilities) -------------------

def allgather_objects(comm, obj, doing=None) -> list:
    """Every process's ``obj`` (pickled), by rank of ``comm``: the sizes first, then equal
    slots, nonblocking, so that a process that left is noticed (``faults.wait_all``)."""
    data = np.frombuffer(pickle.dumps(obj), np.uint8)
    sizes = np.empty(comm.size, np.int64)
    wait_all([comm.Iallgather(np.array([data.size], np.int64), sizes)], doing)
    slot = int(sizes.max())
    send = np.zeros(slot, np.uint8)
    send[:data.size] = data
    recv = np.empty(slot * comm.size, np.uint8)
    wait_all([comm.Iallgather(send, recv)], doing)
    return [pickle.loads(recv[k * slot:k * slot + int(n)].tobytes())
            for k, n in enumerate(sizes)]


def broadcast_object(comm, obj, root: int, doing=None):
    """Process ``root``'s ``obj`` on every process of ``comm``."""
    data = np.frombuffer(pickle.dumps(obj), np.uint8) if comm.rank == root else None
    size = np.array([0 if data is None else data.size], np.int64)
    wait_all([comm.Ibcast(size, root=root)], doing)
    buffer = data.copy() if data is not None else np.empty(int(size[0]), np.uint8)
    wait_all([comm.Ibcast(buffer, root=root)], doing)
    return obj if comm.rank == root else pickle.loads(buffer.tobytes())


# --- host values entering the mesh --------------------------------------------------------------

_KEY_WORDS = 4096
# random odd multipliers: a multilinear hash of each 32 KiB row, exact modulo 2**64
_KEYS = np.random.default_rng(0x5EED5).integers(1, 2 ** 63, _KEY_WORDS, dtype=np.uint64) | 1


def value_fingerprint(value) -> int:
    """A 64-bit fingerprint of an array's type and bytes, at about the cost of copying it.

    Rows of 4096 words are hashed by a dot product with random odd keys (numpy's einsum, exact
    modulo 2**64: a change of one word always changes its row's hash); the row hashes, the tail
    and the type go through BLAKE2b."""
    array = np.asarray(value)
    data = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    whole = data.size // (8 * _KEY_WORDS) * (8 * _KEY_WORDS)
    digest = hashlib.blake2b(f"{array.dtype.str}{array.shape}".encode(), digest_size=8)
    if whole:
        rows = data[:whole].view(np.uint64).reshape(-1, _KEY_WORDS)
        digest.update(np.einsum("ij,j->i", rows, _KEYS).tobytes())
    digest.update(data[whole:].tobytes())
    return int.from_bytes(digest.digest(), "little", signed=True)


def combine(fingerprints_: list) -> int:
    """One fingerprint for several."""
    digest = hashlib.blake2b(np.asarray(fingerprints_, np.int64).tobytes(), digest_size=8)
    return int.from_bytes(digest.digest(), "little", signed=True)


def value_text(value, fingerprint_: int) -> str:
    """How an error names a host value: its type and its fingerprint."""
    array = np.asarray(value)
    return (f"{short_name(array.dtype)}{list(array.shape)}, values "
            f"{fingerprint_ & 0xFFFFFFFFFFFFFFFF:016x}")


def where_called() -> str:
    """`` at file:line`` of the user's code calling into shardc now, or nothing."""
    source = caller_source()
    return f" at {source}" if source else ""
