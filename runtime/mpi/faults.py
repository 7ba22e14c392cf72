"""Faults across processes: no process is left waiting for one that will never come.

A process that leaves the job (the end of its script, ``sys.exit``, ``exit()``, ``os._exit``,
an uncaught exception) first tells every other process: a notice saying how it left, where,
its exit code, and how many operations across processes it began, sent point to point on a
communicator of its own. A process waiting on the others (an agreement, an exchange, a read:
``wait_all``) looks for notices while it waits. A notice from a process that will not take part
in the operation being waited for (it began fewer operations, or it failed) stops the waiting
process within a few milliseconds with a ``ProcessLeftError`` naming the process that left,
where it left, and what the waiting process was doing and where; that process then aborts the
job with the exit code of the one that left (1 when that was 0), so the job's exit code is the
first failing process's::

    process 1: sys.exit(3) at train.py:40          -> notice (exited, code 3, 5 operations)
    process 0: waits in operation 6 (a psum)       -> ProcessLeftError, the job exits with 3

An uncaught exception prints its traceback under the process's name, tells the others, leaves
them ``GRACE_SECONDS`` to say what they were waiting for, and aborts the job. At their end the
processes meet (a barrier) for at most ``SHARDC_MPI_EXIT_TIMEOUT`` seconds (300), then receive
the others' notices, so that MPI_Finalize finds nothing in flight.

What MPI does not let a process see: a process killed by a signal it cannot catch (SIGKILL)
ends the job at once under MPICH's launcher, which reports its PID and the signal; the others
are killed with it before they can say anything, and the job exits with the signal's number.
"""
from __future__ import annotations

import atexit
import builtins
import functools
import json
import os
import sys
import time
import traceback

from ir.source import caller_source, traceback_source
from runtime.mpi.world import world

# An abort ends every process at once, the launcher's output forwarding included: a report
# written just before it may never reach the user. A short pause lets it through.
REPORT_SECONDS = 0.5
# how long a failing process leaves the others to report what they were waiting for
GRACE_SECONDS = 1.0
# how often a waiting process looks for notices
_LOOK_SECONDS = 0.005
# an oversubscribed process spins this long in a wait, then naps this long between tests
_SPIN_SECONDS = 0.00005
_NAP_SECONDS = 0.00002
_QUICK_TESTS = 8
_NOTICE_TAG = 7320
# os._exit as Python gives it (``install_fault_handler`` wraps it)
_os_exit = os._exit


class ProcessLeftError(RuntimeError):
    """Another process left the job (or failed) while this one waited for it; ``code`` is the
    exit code this process ends the job with."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


class _Departure:
    """A notice: process ``rank`` left (``kind``: 'ended' at the end of its script, 'exited'
    through sys.exit/exit()/os._exit, 'failed' with an uncaught exception)."""
    __slots__ = ("rank", "kind", "code", "where", "operations")

    def __init__(self, rank, kind, code, where, operations):
        self.rank, self.kind, self.code = rank, kind, code
        self.where, self.operations = where, operations

    def how(self) -> str:
        if self.kind == "failed":
            return f"failed ({self.where})"
        if self.kind == "exited":
            return f"left the job ({self.where})"
        return f"reached {self.where}"

    def dooms(self, operations: int) -> bool:
        """Whether the operation numbered ``operations`` waits for this process in vain: it
        failed, or it left before beginning that operation."""
        return self.kind == "failed" or self.operations < operations


class _State:
    def __init__(self):
        self.pid = os.getpid()
        self.operations = 0          # operations across processes begun (agreements posted)
        self.departed: dict = {}     # rank -> _Departure, the notices received
        self.leaving = None          # (kind, code, where) recorded by sys.exit/exit()/os._exit
        self.announced = False
        self.exited = False
        self.notice = None           # this process's notice (its buffer stays alive)
        self.sends: list = []


_state = _State()


def begin_operation() -> int:
    """Count an operation across processes (its agreement is being posted); its number."""
    _state.operations += 1
    return _state.operations


def wait_all(requests: list, doing=None) -> None:
    """Wait for ``requests`` to complete, watching for processes that left: one that will not
    take part in the current operation raises ``ProcessLeftError``. ``doing``: what this
    process waits for (a text, or a function giving it), for that error's message."""
    test = requests[0].Test if len(requests) == 1 else functools.partial(
        world().MPI.Request.Testall, requests)
    # a short exchange completes within a few tests: those cost less than the watch's set-up
    # and a yield of the core
    for _ in range(_QUICK_TESTS):
        if test():
            return
    _wait_watching(test, doing)


def _wait_watching(test, doing) -> None:
    """Call ``test`` until it says the requests completed, watching for departures."""
    if _state.departed:
        check_departures(doing)
    start = time.monotonic()
    look = start + _LOOK_SECONDS
    # more processes than cores (common on one machine): after a short spin, a waiting
    # process sleeps, so that the one it waits for gets a core (a yield leaves it the core
    # while it is the only process queued there)
    nap = start + _SPIN_SECONDS if getattr(world(), "oversubscribed", False) else None
    while not test():
        now = time.monotonic()
        if nap is not None and now >= nap:
            time.sleep(_NAP_SECONDS)
        else:
            os.sched_yield()
        if now >= look:
            receive_notices()
            check_departures(doing)
            look = now + _LOOK_SECONDS


def check_departures(doing=None) -> None:
    """Raise ``ProcessLeftError`` if a process that left will not take part in the current
    operation."""
    for departure in sorted(_state.departed.values(), key=lambda d: d.rank):
        if departure.dooms(_state.operations):
            raise ProcessLeftError(_left_message(departure, doing), departure.code or 1)


def _left_message(departure: _Departure, doing) -> str:
    w = world()
    text = doing() if callable(doing) else doing
    if not text:
        where = caller_source()
        text = "for the other processes" + (f" at {where}" if where else "")
    return f"process {departure.rank} {departure.how()} while process {w.rank} waits {text}"


def receive_notices() -> None:
    """Take in every notice that has arrived."""
    w = world()
    MPI = w.MPI
    status = MPI.Status()
    while w.notice_comm.Iprobe(source=MPI.ANY_SOURCE, tag=_NOTICE_TAG, status=status):
        _receive(status.Get_source(), status.Get_count(MPI.BYTE))


def _receive(rank: int, nbytes: int) -> None:
    w = world()
    buffer = bytearray(nbytes)
    w.notice_comm.Recv([buffer, w.MPI.BYTE], source=rank, tag=_NOTICE_TAG)
    kind, code, where, operations = json.loads(buffer.decode())
    _state.departed[rank] = _Departure(rank, kind, code, where, operations)


def announce(kind: str, code: int, where: str) -> None:
    """Tell every other process that this one leaves (once)."""
    if _state.announced:
        return
    _state.announced = True
    w = world()
    _state.notice = json.dumps([kind, code, where, _state.operations]).encode()
    for rank in range(w.size):
        if rank != w.rank:
            _state.sends.append(w.notice_comm.Isend([_state.notice, w.MPI.BYTE], dest=rank,
                                                    tag=_NOTICE_TAG))


# --- leaving: the end of the script, sys.exit, exit(), os._exit, an uncaught exception --------

def install_fault_handler() -> None:
    """Abort the job on an uncaught exception on any process, tell the others when this one
    leaves, and meet them at exit (``exit_together``)."""
    if getattr(sys.excepthook, "__name__", "") == "_abort_on_exception":
        return
    sys.excepthook = _abort_on_exception
    # registered after mpi4py's own exit handler (MPI_Finalize), so it runs first
    atexit.register(exit_together)
    sys.exit = _recording(sys.exit, "sys.exit")
    for name in ("exit", "quit"):
        if hasattr(builtins, name):
            setattr(builtins, name, _recording(getattr(builtins, name), f"{name}"))
    os._exit = _leaving_now(os._exit)


def _exit_code(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int) and not isinstance(code, bool):
        return code & 0xFF
    return 1          # sys.exit('message') prints the message and exits with 1


def _recording(exit_function, name: str):
    """``exit_function`` (sys.exit, exit, quit), recording where and with what code this
    process leaves, for its notice."""
    def leave(code=None):
        if os.getpid() == _state.pid:
            where = caller_source()
            _state.leaving = ("exited", _exit_code(code),
                              f"{name}({code!r})" + (f" at {where}" if where else ""))
        return exit_function(code)
    leave.__name__ = leave.__qualname__ = getattr(exit_function, "__name__", name)
    leave.__doc__ = exit_function.__doc__
    return leave


def _leaving_now(os_exit):
    """``os._exit`` that first tells the others and meets them at exit: without it the
    launcher would kill every process the moment this one ends."""
    def _exit(code):
        if os.getpid() == _state.pid and not _state.announced:
            where = caller_source()
            _state.leaving = ("exited", _exit_code(code),
                              f"os._exit({code!r})" + (f" at {where}" if where else ""))
            try:
                sys.stdout.flush()
                sys.stderr.flush()
                exit_together()
                world().MPI.Finalize()
            finally:
                os_exit(code)
        os_exit(code)
    _exit.__doc__ = os_exit.__doc__
    return _exit


def _abort_on_exception(kind, value, tb) -> None:
    """An uncaught exception: report it under this process's name, tell the others (unless it
    is another process's departure, which they were told of), then abort the job."""
    w = world()
    code = 1
    try:
        sys.stdout.flush()
        if isinstance(value, ProcessLeftError):
            code = value.code
            sys.stderr.write(f"shardc: process {w.rank} of {w.size} stops: {value}; aborting "
                             "the job\n")
        else:
            where = traceback_source(tb)
            summary = "".join(traceback.format_exception_only(kind, value)).strip()
            summary = summary.splitlines()[0] if summary else kind.__name__
            announce("failed", 1, f"{summary}" + (f" at {where}" if where else ""))
            # one write: the first process to abort ends the others, maybe mid-report
            report = "".join(traceback.format_exception(kind, value, tb))
            sys.stderr.write(f"shardc: process {w.rank} of {w.size} failed; aborting the "
                             f"job\n{report}")
        sys.stderr.flush()
        time.sleep(REPORT_SECONDS if isinstance(value, ProcessLeftError) else GRACE_SECONDS)
    finally:
        abort(code)


def exit_together() -> None:
    """At exit, tell the others, then wait for every process to reach its end, at most
    ``SHARDC_MPI_EXIT_TIMEOUT`` seconds (default 300); abort the job if one failed meanwhile or
    the time runs out. Then receive the others' notices: nothing is left in flight."""
    w = world()
    if w.size == 1 or _state.exited:
        return
    _state.exited = True
    kind, code, where = _state.leaving or ("ended", 0, _end_of_script())
    announce(kind, code, where)
    timeout = float(os.environ.get("SHARDC_MPI_EXIT_TIMEOUT", "300") or 300)
    request = w.exit_comm.Ibarrier()
    deadline = time.monotonic() + timeout
    while not request.Test():
        receive_notices()
        failed = [d for d in _state.departed.values() if d.kind == "failed"]
        if failed:
            _stop(f"process {failed[0].rank} {failed[0].how()} while process {w.rank} waits "
                  "at its end for the others", failed[0].code or 1)
        if time.monotonic() > deadline:
            running = [r for r in range(w.size) if r != w.rank and r not in _state.departed]
            _stop(f"process {w.rank} of {w.size} reached its end, but processes {running} did "
                  f"not reach theirs within {timeout:g} s (SHARDC_MPI_EXIT_TIMEOUT): they are "
                  "still computing, or waiting for an operation this process never began", 1)
        time.sleep(0.002)
    status = w.MPI.Status()
    for rank in range(w.size):
        if rank != w.rank and rank not in _state.departed:
            w.notice_comm.Probe(source=rank, tag=_NOTICE_TAG, status=status)
            _receive(rank, status.Get_count(w.MPI.BYTE))
    w.MPI.Request.Waitall(_state.sends)
    _state.sends = []


def _end_of_script() -> str:
    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return f"the end of its script {script}".rstrip() if script not in ("", "-c") else \
        "the end of its script"


def _stop(message: str, code: int) -> None:
    sys.stdout.flush()
    sys.stderr.write(f"shardc: {message}; aborting the job\n")
    sys.stderr.flush()
    time.sleep(REPORT_SECONDS)
    abort(code)


def abort(code: int) -> None:
    """End the job with ``code``: MPI_Abort returns before the launcher has ended this process,
    so nothing of the script may run after it."""
    try:
        world().abort(code)
    finally:
        _os_exit(code)
