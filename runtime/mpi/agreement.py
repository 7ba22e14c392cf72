"""Agreements: every operation that crosses processes opens with a fingerprint of what each
process is about to do, compared across processes before any of the operation's data is used."""
from __future__ import annotations

import zlib

import numpy as np

from runtime.mpi.world import world


class CoherenceError(RuntimeError):
    """Ranks reached different programs or different communication nodes."""


class _Slots:
    """The agreements' state: one is open at a time, and its buffers are these."""

    def __init__(self):
        self.size = 0
        self.mine = np.zeros(1, np.int64)
        self.theirs = np.zeros(0, np.int64)
        self.open = None
        # set when a mismatch left exchanges in flight: nothing more may cross processes
        self.broken = ""
        self.orphans: list = []

    def buffers(self, size: int):
        if size != self.size:
            self.size, self.theirs = size, np.zeros(size, np.int64)
        return self.mine, self.theirs


_slots = _Slots()


class Agreement:
    """Every operation that crosses processes (a module's run, gathering a global array, the
    multi-process utilities) opens with one: each process contributes the fingerprint of what
    it is about to do, in one 8-byte Iallgather on a communicator used for nothing else. Every
    process's k-th agreement meets every other's k-th, so a process about to do something else
    is found there, before any of the operation's data is used.

    ``start`` posts it; ``settle`` waits for it and raises CoherenceError on a mismatch. An
    operation may post its first exchange in between (nonblocking) so that the agreement costs
    no round trip of its own (``settle_then_wait``): the exchange's data is read only once the agreement
    has settled, and a mismatch ends the job (an uncaught error aborts every process)."""
    __slots__ = ("request", "what")

    def __init__(self, header: int, what):
        if _slots.broken:
            raise CoherenceError(_slots.broken)
        assert _slots.open is None, "an agreement was posted while another is open"
        w = world()
        mine, theirs = _slots.buffers(w.size)
        mine[0] = header
        self.request = w.check_comm.Iallgather(mine, theirs)
        self.what = what
        _slots.open = self

    def settle(self) -> None:
        self.request.Wait()
        _slots.open = None
        theirs = _slots.theirs.tolist()
        if theirs.count(theirs[0]) != len(theirs):
            what = self.what() if callable(self.what) else self.what
            check_headers(theirs, list(range(len(theirs))), what)


def fingerprints(header: int) -> list:
    """Every process's ``header``, by rank (an agreement whose caller compares them)."""
    agreement = Agreement(header, None)
    agreement.request.Wait()
    _slots.open = None
    return _slots.theirs.tolist()


def agree(header: int, what) -> None:
    """Wait until every process has reached an operation with the same fingerprint; a process
    reaching another is a CoherenceError on all of them. ``what``: the error's text (or a
    function giving it)."""
    Agreement(header, what).settle()


class Opening:
    """An operation's agreement, settled before its first exchange's data is waited for."""
    __slots__ = ("opening",)

    def __init__(self, opening=None):
        self.opening = opening


def settle_then_wait(state, requests: list) -> None:
    """Wait for an exchange's requests, after settling the operation's agreement if it is still
    open (``state.opening``). A mismatch found then leaves the exchange in flight, where it
    may never complete: its requests (and so its buffers) are kept, and nothing more may cross
    processes (an uncaught CoherenceError ends the job anyway)."""
    try:
        settle(state)
    except CoherenceError as err:
        _slots.orphans.extend(requests)
        _slots.broken = (f"an earlier CoherenceError left exchanges in flight; no more operations "
                    f"can cross processes ({err})")
        raise
    if len(requests) == 1:
        requests[0].Wait()
    else:
        world().MPI.Request.Waitall(requests)


def settle(state) -> None:
    if state is not None and state.opening is not None:
        opening, state.opening = state.opening, None
        opening.settle()


def check_headers(headers: list, ranks: list, what: str) -> None:
    if len(set(headers)) > 1:
        first = headers[0]
        differ = [r for r, h in zip(ranks, headers) if h != first]
        raise CoherenceError(f"processes {differ} and process {ranks[0]} {what}")


def fingerprint(text: str) -> int:
    return zlib.crc32(text.encode())
