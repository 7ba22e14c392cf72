"""A differential backend: every lowered module runs on the reference backend and on the fast
one, and their results must agree (``SHARDC_BACKEND=check`` runs any program this way).

Integers and booleans must be bitwise equal, floats equal within a tight tolerance (the fast
backend adds group members in the reference's order, so most are bitwise equal too; matmuls
may differ in the last bits, which a sum with cancellation can lift above a tolerance relative
to each element, so the tolerance is relative to the array's largest magnitude as well);
shapes, dtypes, shardings and every device's buffer are compared, not only the global values.
What the program prints (``debug.print``) must be the same text, and is printed once; host
callbacks are called once (the fast run replays the reference run's results).
"""
from __future__ import annotations

import contextlib
import io
import sys

import numpy as np

from runtime.array import Array
from runtime.reference import CallbackLog, ReferenceBackend, callback_log
from runtime.vectorized import FastBackend

RTOL = 1e-5
ATOL = 1e-6
SCALE_RTOL = 1e-6     # of the array's largest magnitude: about 8 float32 ulps of it


class BackendMismatch(AssertionError):
    """The fast backend disagrees with the reference on a program's result."""


def blocks_agree(ref, fast, rtol=RTOL, atol=ATOL) -> str:
    """Why two blocks differ, or '' when they agree."""
    ref, fast = _held(ref), _held(fast)
    if ref.shape != fast.shape or ref.dtype != fast.dtype:
        return f"{ref.dtype}{list(ref.shape)} against {fast.dtype}{list(fast.shape)}"
    if ref.tobytes() == fast.tobytes():
        return ""
    if ref.dtype.kind in "fc":
        finite = np.abs(ref[np.isfinite(ref)])
        atol = atol + SCALE_RTOL * (float(finite.max()) if finite.size else 0.0)
        if np.allclose(ref, fast, rtol=rtol, atol=atol, equal_nan=True):
            return ""
    bad = np.argwhere(~np.isclose(ref, fast, rtol=rtol, atol=atol, equal_nan=True)
                      if ref.dtype.kind in "fc" else ref != fast)
    where = tuple(int(i) for i in bad[0]) if len(bad) else ()
    return (f"values differ at {len(bad)} elements, first at {where}: "
            f"{ref[where] if ref.ndim else ref} against {fast[where] if fast.ndim else fast}")


def arrays_agree(ref: Array, fast: Array, rtol=RTOL, atol=ATOL) -> str:
    """Why two results differ (type, sharding, any device's buffer), or ''."""
    if ref.aval.strip_vma() != fast.aval.strip_vma():
        return f"types {ref.aval} against {fast.aval}"
    if ref.sharding != fast.sharding:
        return f"shardings {ref.sharding} against {fast.sharding}"
    for p, (a, b) in enumerate(zip(ref.buffers, fast.buffers)):
        why = blocks_agree(a, b, rtol, atol)
        if why:
            return f"the buffer of mesh position {p}: {why}"
    if ref.aval.unreduced:
        return ""       # partial sums: the buffers are all there is (no value to assemble)
    return blocks_agree(_held(ref), _held(fast), rtol, atol)


def _held(value) -> np.ndarray:
    """A value as numpy, read where shardc holds it: comparing backends is no fetch of the
    program's, for the transfer guards."""
    return value._assemble() if isinstance(value, Array) else np.asarray(value)


class CheckingBackend(ReferenceBackend):
    """Runs each module on both backends; returns the reference's results once they agree."""
    name = "check"

    def __init__(self):
        super().__init__()
        self.fast = FastBackend()

    # every equation of an eager body is compared, as the fast backend runs it
    eager_by_program = True

    def run_mesh_program(self, mesh, program, inputs) -> list:
        """An eager equation on both backends, every device's blocks compared."""
        expected, got = _on_both(lambda: super(CheckingBackend, self).run_mesh_program(
            mesh, program, inputs), lambda: self.fast.run_mesh_program(mesh, program, inputs),
            program)
        for k, (ref, fast) in enumerate(zip(expected, got)):
            for p, (a, b) in enumerate(zip(ref, fast)):
                why = blocks_agree(a, b)
                if why:
                    raise BackendMismatch(f"output {k} of the fast backend differs from the "
                                          f"reference backend's at mesh position {p}: {why}\n"
                                          f"{program}")
        return expected

    def execute(self, module, args) -> list:
        expected, got = _on_both(lambda: ReferenceBackend.execute(self, module, args),
                                 lambda: self.fast.execute(module, args), module)
        for k, (ref, fast) in enumerate(zip(expected, got)):
            why = arrays_agree(ref, fast)
            if why:
                raise BackendMismatch(f"output {k} of the fast backend differs from the "
                                      f"reference backend's: {why}\n{module}")
        return expected


def _on_both(reference, fast, what) -> tuple:
    """Both results; what the two print must be the same text, printed once. Host callbacks
    run once, in the reference's run: the fast one gets their recorded results, its calls'
    arguments held to the reference's."""
    printed_ref = io.StringIO()
    log = CallbackLog(blocks_agree)
    try:
        with contextlib.redirect_stdout(printed_ref), callback_log(log, replay=False):
            expected = reference()
    finally:
        sys.stdout.write(printed_ref.getvalue())       # once, even when it raised
    printed_fast = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed_fast), callback_log(log, replay=True):
            got = fast()
    except AssertionError as err:
        if "the second run called" in str(err):
            raise BackendMismatch(f"the fast backend's host callbacks differ from the "
                                  f"reference backend's: {err}\n{what}") from None
        raise
    if log.replaying != len(log.calls):
        raise BackendMismatch(f"the fast backend called {log.replaying} host callbacks where "
                              f"the reference backend called {len(log.calls)}\n{what}")
    if printed_fast.getvalue() != printed_ref.getvalue():
        raise BackendMismatch("the fast backend printed\n" + printed_fast.getvalue()
                              + "where the reference backend printed\n"
                              + printed_ref.getvalue() + str(what))
    return expected, got
