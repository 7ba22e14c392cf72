"""Faults across processes: an uncaught exception on any process ends the whole job, and the
processes meet at exit so that none waits in MPI_Finalize for one that will never come."""
from __future__ import annotations

import atexit
import os
import sys
import time
import traceback

from runtime.mpi.world import world


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


def add_note(err: BaseException, text: str) -> None:
    if hasattr(err, "add_note"):
        err.add_note(text)
    else:   # Python 3.10: the note goes into the message
        err.args = ((f"{err.args[0]}\n  {text}" if err.args else text),) + err.args[1:]
