"""JAX's transfer guards: what happens when a value crosses between the host and the devices,
or between devices (``jax.transfer_guard``, ``jax_transfer_guard*``).

Each direction (``host_to_device``, ``device_to_device``, ``device_to_host``) has a level:

- ``allow``: every transfer goes through silently (the default);
- ``log``: implicit transfers are logged, explicit ones go through silently;
- ``disallow``: implicit transfers raise ``JaxRuntimeError``, explicit ones go through;
- ``log_explicit``: every transfer is logged;
- ``disallow_explicit``: every transfer raises.

Explicit transfers are ``device_put``; implicit ones every other: a numpy array or a Python
number given to a jitted function or an operation (``jnp.ones`` too, whose fill value goes to
the device; not ``jnp.arange(n)``, made on the device), an uncommitted array moved to the
device of a committed one. Constants of a traced function are the program's: no transfer.

A log record is a warning of the ``shardc.transfer_guard`` logger (``host-to-device transfer:
aval=..., dst_sharding=...``), the text JAX writes to stderr through absl. A refusal is
``JaxRuntimeError('INVALID_ARGUMENT: Disallowed host-to-device transfer: ...')``, as JAX's.

Fetches (device to host) are never guarded, as on JAX's CPU backend, whose buffers are host
memory already: shardc's devices are CPU devices, and a program that prints or converts
arrays under a guard runs as it runs under JAX there. The level of that direction is kept
and read back all the same.

A level set with ``config.update`` is global; one set by a context manager holds for the
thread that entered it, inside the block, over the global one (a new thread sees the global
levels), as in JAX. The runtime and the compiler read ``active`` first: while no guard is set
anywhere a transfer costs that one read.
"""
from __future__ import annotations

import contextlib
import logging
import threading

import numpy as np

from ir import dtypes

__all__ = ["JaxRuntimeError", "LEVELS", "DIRECTIONS", "HOST_TYPES", "active", "check_level",
           "set_global", "global_level", "local_level", "level", "guarding", "explicit_scope",
           "scope_explicit", "program_scope", "check", "aval_text", "host_aval_text"]

LEVELS = ("allow", "log", "disallow", "log_explicit", "disallow_explicit")
DIRECTIONS = ("host_to_device", "device_to_device", "device_to_host")

logger = logging.getLogger("shardc.transfer_guard")


class JaxRuntimeError(RuntimeError):
    """An error of the runtime (JAX's ``jax.errors.JaxRuntimeError``): a transfer a guard
    refuses raises it, and so does a host callback that fails while a program runs."""


# the host values a computation or device_put takes: numpy arrays and scalars, Python numbers
HOST_TYPES = (np.ndarray, np.generic, int, float, complex)

# True while some guard level is set: globally, or by a context manager in some thread
active = False

_global: dict = dict.fromkeys(DIRECTIONS)
_global_all = None                  # jax_transfer_guard's own value, for reading it back
_local = threading.local()
_entered = 0                        # context managers open now, over every thread
_lock = threading.Lock()


def _update_active() -> None:
    global active
    active = _entered > 0 or any(v is not None for v in _global.values())


def check_level(value) -> str | None:
    """``value`` as a level (None: unset), or JAX's ValueError for anything else."""
    if value is not None and (type(value) is not str or value not in LEVELS):
        raise ValueError(f"new enum value must be None or in {list(LEVELS)}, got {value} of "
                         f"type {type(value)}.")
    return value


def set_global(direction: str | None, value) -> None:
    """The global level of one direction (None: every direction, as ``jax_transfer_guard``
    sets the three); ``value`` None unsets it."""
    global _global_all
    value = check_level(value)
    if direction is None:
        _global_all = value
        for d in DIRECTIONS:
            _global[d] = value
    else:
        _global[direction] = value
    _update_active()


def global_level(direction: str | None):
    """The global value of one direction's option (None: ``jax_transfer_guard``'s)."""
    return _global_all if direction is None else _global[direction]


def local_level(direction: str | None):
    """The value of one direction's option as this thread reads it: a context manager's,
    else the global one (None: ``jax_transfer_guard``'s)."""
    value = getattr(_local, direction or "all", None)
    return global_level(direction) if value is None else value


def level(direction: str) -> str:
    """The level in force for ``direction`` in this thread."""
    return local_level(direction) or "allow"


@contextlib.contextmanager
def guarding(directions, value):
    """Set ``directions`` (a tuple of names; ``"all"`` too for ``jax_transfer_guard``'s own
    reading) to ``value`` in this thread inside the block."""
    value = check_level(value)
    global _entered
    previous = [getattr(_local, d, None) for d in directions]
    for d in directions:
        setattr(_local, d, value)
    with _lock:
        _entered += 1
        _update_active()
    try:
        yield
    finally:
        for d, p in zip(directions, previous):
            setattr(_local, d, p)
        with _lock:
            _entered -= 1
            _update_active()


def explicit_scope(explicit: bool = True):
    """Inside the block every transfer counts as explicit (``device_get``'s fetches), or with
    ``explicit=False`` as implicit (the moves of ``jit(f, device=d)``, made by device_put)."""
    return _Explicit(explicit)


@contextlib.contextmanager
def program_scope():
    """Inside the block shardc runs a function JAX compiles (``jnp.mean``, ``random.split``):
    its constants are the program's, and it fetches nothing, so no implicit transfer is
    checked (its arguments were, on entry, as a jitted call's)."""
    depth = getattr(_local, "program", 0)
    _local.program = depth + 1
    try:
        yield
    finally:
        _local.program = depth


def scope_explicit():
    """Whether transfers count as explicit (True), implicit (False) or as each says (None)
    in this thread now (``explicit_scope``)."""
    return getattr(_local, "explicit", None)


class _Explicit:
    def __init__(self, explicit: bool):
        self.explicit = explicit

    def __enter__(self):
        self.previous = getattr(_local, "explicit", None)
        _local.explicit = self.explicit

    def __exit__(self, *exc):
        _local.explicit = self.previous


_REFUSE = {"disallow": False, "disallow_explicit": True}   # level -> refuses explicit too
_LOG = {"log": False, "log_explicit": True}


def check(direction: str, explicit: bool, describe) -> None:
    """Apply the guard of ``direction`` to one transfer: nothing, a log record, or
    ``JaxRuntimeError`` (``INVALID_ARGUMENT: Disallowed host-to-device transfer: ...``, as
    JAX's). ``describe()`` gives the text naming the value (called only when needed)."""
    guard = level(direction)
    if guard == "allow":
        return
    scope = getattr(_local, "explicit", None)
    if scope is not None:
        explicit = scope
    if not explicit and getattr(_local, "program", 0):
        return
    name = direction.replace("_", "-")
    if guard in _REFUSE:
        if explicit and not _REFUSE[guard]:
            return
        raise JaxRuntimeError(f"INVALID_ARGUMENT: Disallowed {name} transfer: {describe()}")
    if explicit and not _LOG[guard]:
        return
    logger.warning("%s transfer: %s", name, describe())


# --- naming the value moved, as JAX's messages do -------------------------------------------

def aval_text(shape, dtype, weak=False) -> str:
    """``ShapedArray(float32[3])``, ``ShapedArray(float32[], weak_type=True)``."""
    dims = ",".join(str(d) for d in shape)
    weak_text = ", weak_type=True" if weak else ""
    return f"ShapedArray({np.dtype(dtype).name}[{dims}]{weak_text})"


def host_aval_text(value) -> str:
    """The type a host value takes on a device: a Python number weakly typed, 64-bit types
    canonical as the x64 switch says."""
    if type(value) in (int, float, complex):
        return aval_text((), dtypes.weak_scalar_dtype(value), weak=True)
    array = np.asarray(value)
    return aval_text(array.shape, dtypes.canonicalize(array.dtype)
                     if dtypes.is_valid(array.dtype) else array.dtype)
