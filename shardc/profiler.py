"""``shardc.profiler`` (``jax.profiler``): traces of what a program ran, and its memory.

``start_trace(log_dir)`` ... ``stop_trace()`` (or ``with trace(log_dir):``) records, between
them, every ``TraceAnnotation`` and ``StepTraceAnnotation`` span (``annotate_function``'s
too) and every call of a jitted function (named as JAX names it, ``jit(name)``, from its
dispatch to its results), with the thread that ran it. ``stop_trace`` writes them as a
Chrome trace-event file where JAX writes its own, ``log_dir/plugins/profile/<run>/<host>
.trace.json.gz`` (and ``perfetto_trace.json.gz`` beside it with
``create_perfetto_trace=True``): TensorBoard's trace viewer, Perfetto and
``chrome://tracing`` open it. JAX also writes XLA's device trace (``.xplane.pb``);
shardc's programs run in this process, so every span is on the host.

Outside a trace an annotation records nothing and costs a flag test, as JAX's.

``device_memory_profile()`` is a pprof profile (gzipped protobuf, JAX's format) of the
arrays alive now: one sample per device buffer, its bytes and count, under a function
named by the array's type, labelled with its device; ``save_device_memory_profile``
writes it to a file (``pprof`` reads both).

``start_server`` (JAX's gRPC server for remote capture) is refused: shardc has no such
server; capture in the process with ``start_trace``.
"""
from __future__ import annotations

import contextlib
import functools
import gzip
import json
import os
import platform
import threading
import time

from compiler import jit as _jit
from shardc._devices import live_arrays

__all__ = ["ProfileOptions", "StepTraceAnnotation", "TraceAnnotation", "annotate_function",
           "device_memory_profile", "save_device_memory_profile", "start_server",
           "start_trace", "stop_server", "stop_trace", "trace"]


class ProfileOptions:
    """JAX's options of a trace (tracer levels, a duration): taken and kept; shardc's traces
    record the host's spans whatever they ask."""

    def __init__(self):
        self.host_tracer_level = 2
        self.python_tracer_level = 0
        self.enable_hlo_proto = True
        self.start_timestamp_ns = 0
        self.duration_ms = 0
        self.repository_path = ""
        self.raise_error_on_start_failure = False
        self.advanced_configuration = {}


class _Recording:
    """The trace under way: its directory and the spans finished so far."""

    def __init__(self, log_dir: str, perfetto: bool):
        self.log_dir, self.perfetto = os.fspath(log_dir), perfetto
        self.events: list = []
        self.lock = threading.Lock()
        self.origin = time.perf_counter_ns()

    def add(self, name: str, start_ns: int, end_ns: int, args: dict) -> None:
        event = {"name": name, "ph": "X", "pid": os.getpid(), "tid": threading.get_ident(),
                 "ts": (start_ns - self.origin) / 1e3, "dur": (end_ns - start_ns) / 1e3}
        if args:
            event["args"] = {k: str(v) for k, v in args.items()}
        with self.lock:
            self.events.append(event)

    def write(self) -> list:
        """Writes the trace; returns the files' paths."""
        run = time.strftime("%Y_%m_%d_%H_%M_%S")
        folder = os.path.join(self.log_dir, "plugins", "profile", run)
        os.makedirs(folder, exist_ok=True)
        names = [{"name": "thread_name", "ph": "M", "pid": os.getpid(), "tid": t.ident,
                  "args": {"name": t.name}} for t in threading.enumerate()]
        text = json.dumps({"traceEvents": names + self.events, "displayTimeUnit": "ms"})
        files = [f"{platform.node() or 'localhost'}.trace.json.gz"]
        if self.perfetto:
            files.append("perfetto_trace.json.gz")
        paths = [os.path.join(folder, name) for name in files]
        for path in paths:
            with gzip.open(path, "wt", encoding="utf-8") as out:
                out.write(text)
        return paths


_recording: _Recording | None = None
_start_lock = threading.Lock()


def start_trace(log_dir, create_perfetto_link: bool = False,
                create_perfetto_trace: bool = False,
                profiler_options: ProfileOptions | None = None) -> None:
    """Starts recording spans for a trace written under ``log_dir`` by ``stop_trace`` (JAX's
    RuntimeError when one is already recording). ``create_perfetto_link`` (a link served for
    Perfetto's web page) is refused; the file is written either way."""
    global _recording
    if create_perfetto_link:
        raise NotImplementedError("start_trace(create_perfetto_link=True): shardc serves no "
                                  "link; open the perfetto_trace.json.gz that stop_trace writes")
    with _start_lock:
        if _recording is not None:
            raise RuntimeError("Profile has already been started. Only one profile may be run "
                               "at a time.")
        _recording = _Recording(log_dir, create_perfetto_trace)
    _jit.set_call_observer(_jitted_call)


def stop_trace() -> None:
    """Stops recording and writes the trace (JAX's RuntimeError when none was started)."""
    global _recording
    with _start_lock:
        if _recording is None:
            raise RuntimeError("No profile started")
        recording, _recording = _recording, None
    _jit.set_call_observer(None)
    recording.write()


@contextlib.contextmanager
def trace(log_dir, create_perfetto_link: bool = False, create_perfetto_trace: bool = False,
          profiler_options: ProfileOptions | None = None):
    """``start_trace`` on entry, ``stop_trace`` on exit (the trace is written on an error
    too)."""
    start_trace(log_dir, create_perfetto_link, create_perfetto_trace, profiler_options)
    try:
        yield
    finally:
        stop_trace()


def _jitted_call(name: str, call):
    """One jitted call, recorded as a span while a trace is recording."""
    recording = _recording
    if recording is None:
        return call()
    start = time.perf_counter_ns()
    try:
        return call()
    finally:
        recording.add(f"jit({name})", start, time.perf_counter_ns(), {})


class TraceAnnotation:
    """A named span of the host's work in a trace (a context manager): ``with
    TraceAnnotation("load"):``; keyword arguments are shown with it."""

    def __init__(self, name: str, **kwargs):
        self.name, self.kwargs = name, kwargs
        self._start = None

    def __enter__(self):
        self._start = time.perf_counter_ns() if _recording is not None else None
        return self

    def __exit__(self, *exc):
        recording = _recording
        if recording is not None and self._start is not None:
            recording.add(self.name, self._start, time.perf_counter_ns(), self.kwargs)
        return False


class StepTraceAnnotation(TraceAnnotation):
    """A training step's span: ``StepTraceAnnotation("train", step_num=k)``."""


def annotate_function(func=None, name: str | None = None, **kwargs):
    """``func`` with each call a ``TraceAnnotation`` named ``name`` (its qualified name by
    default); usable as ``@annotate_function`` or ``@annotate_function(name=...)``."""
    if func is None:
        return functools.partial(annotate_function, name=name, **kwargs)
    label = name or getattr(func, "__qualname__", None) or getattr(func, "__name__", "call")

    @functools.wraps(func)
    def annotated(*args, **kw):
        with TraceAnnotation(label, **kwargs):
            return func(*args, **kw)
    return annotated


def start_server(port: int):
    raise NotImplementedError("jax.profiler.start_server: shardc has no profiler server for "
                              "remote capture; record in the process with "
                              "jax.profiler.start_trace(log_dir) / stop_trace()")


def stop_server():
    raise RuntimeError("No profiler server is running")


# --- memory: a pprof profile of the live arrays -------------------------------------------------

def device_memory_profile(backend: str | None = None) -> bytes:
    """A pprof profile (gzipped protobuf) of the device memory live arrays hold: per device
    buffer, a sample of (1 allocation, its bytes), at a function named by the array's type
    (``float32[8,128]``), labelled ``kind=buffer`` and ``device``."""
    strings = {"": 0}

    def text(s: str) -> int:
        return strings.setdefault(s, len(strings))

    functions: dict = {}
    samples = []
    for array in live_arrays():
        shards = array.addressable_shards
        name = f"{array.dtype}[{','.join(map(str, array.shape))}]"
        function = functions.setdefault(name, len(functions) + 1)
        for shard in shards:
            labels = [_field(1, _varint(text("kind"))) + _field(2, _varint(text("buffer"))),
                      _field(1, _varint(text("device"))) + _field(2, _varint(text(str(shard.device))))]
            samples.append(_message(1, _packed([function]))
                           + _message(2, _packed([1, int(shard.buffer.nbytes)]))
                           + b"".join(_message(3, label) for label in labels))
    body = (_message(1, _field(1, _varint(text("allocations"))) + _field(2, _varint(text("count"))))
            + _message(1, _field(1, _varint(text("space"))) + _field(2, _varint(text("bytes"))))
            + b"".join(_message(2, sample) for sample in samples))
    for name, ident in functions.items():
        body += _message(4, _field(1, _varint(ident))
                         + _message(4, _field(1, _varint(ident))))      # location -> line
        body += _message(5, _field(1, _varint(ident)) + _field(2, _varint(text(name)))
                         + _field(3, _varint(text(name))))
    for s in sorted(strings, key=strings.get):
        body += _message(6, s.encode())
    return gzip.compress(body)


def save_device_memory_profile(filename, backend: str | None = None) -> None:
    """Writes ``device_memory_profile()`` to ``filename``."""
    with open(filename, "wb") as out:
        out.write(device_memory_profile(backend))


def _varint(value: int) -> bytes:
    out = bytearray()
    value &= (1 << 64) - 1
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, varint: bytes) -> bytes:
    """A varint field: its key (wire type 0), then the value."""
    return _varint(number << 3) + varint


def _message(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2): a message, a string or a packed list."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _packed(values) -> bytes:
    return b"".join(_varint(v) for v in values)
