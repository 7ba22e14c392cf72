"""``shardc.monitoring`` (``jax.monitoring``): named events and the listeners that hear them.

Code records an event (``record_event``), a duration, a time span or a scalar under a name;
every listener registered for that kind is called with it, keyword metadata included, in
the order they were registered. shardc records JAX's compilation events for each jitted
function it compiles, with ``fun_name=`` metadata, as JAX's dispatch does:

- ``/jax/core/compile/jaxpr_trace_duration``: tracing the function to a program;
- ``/jax/core/compile/backend_compile_duration``: partitioning and lowering it (shardc has
  no MLIR step, so ``jaxpr_to_mlir_module_duration`` is never recorded).

Each is a scalar at its start (the wall-clock time), then a duration in seconds and a time
span::

    jax.monitoring.register_event_duration_secs_listener(
        lambda event, secs, **kw: print(event, kw["fun_name"], secs))
"""
from __future__ import annotations

from typing import Callable

from compiler import jit as _jit

__all__ = [
    "record_event", "record_event_duration_secs", "record_event_time_span", "record_scalar",
    "register_event_listener", "register_event_duration_secs_listener",
    "register_event_time_span_listener", "register_scalar_listener",
    "unregister_event_listener", "unregister_event_duration_listener",
    "unregister_event_time_span_listener", "unregister_scalar_listener",
    "clear_event_listeners", "get_event_listeners", "get_event_duration_listeners",
    "get_event_time_span_listeners", "get_scalar_listeners",
]

_event_listeners: list = []
_duration_listeners: list = []
_time_span_listeners: list = []
_scalar_listeners: list = []


def record_event(event: str, **kwargs) -> None:
    """Tell every event listener that ``event`` happened (with ``kwargs`` as metadata)."""
    for callback in list(_event_listeners):
        callback(event, **kwargs)


def record_event_duration_secs(event: str, duration: float, **kwargs) -> None:
    """Tell every duration listener that ``event`` took ``duration`` seconds."""
    for callback in list(_duration_listeners):
        callback(event, duration, **kwargs)


def record_event_time_span(event: str, start_time: float, end_time: float, **kwargs) -> None:
    """Tell every time-span listener that ``event`` ran from ``start_time`` to ``end_time``
    (seconds)."""
    for callback in list(_time_span_listeners):
        callback(event, start_time, end_time, **kwargs)


def record_scalar(event: str, value, **kwargs) -> None:
    """Tell every scalar listener the value ``event`` measured."""
    for callback in list(_scalar_listeners):
        callback(event, value, **kwargs)


def register_event_listener(callback: Callable) -> None:
    _event_listeners.append(callback)


def register_event_duration_secs_listener(callback: Callable) -> None:
    _duration_listeners.append(callback)


def register_event_time_span_listener(callback: Callable) -> None:
    _time_span_listeners.append(callback)


def register_scalar_listener(callback: Callable) -> None:
    _scalar_listeners.append(callback)


def _unregister(listeners: list, callback: Callable) -> None:
    assert callback in listeners       # JAX's: unregistering a stranger is an AssertionError
    listeners.remove(callback)


def unregister_event_listener(callback: Callable) -> None:
    _unregister(_event_listeners, callback)


def unregister_event_duration_listener(callback: Callable) -> None:
    _unregister(_duration_listeners, callback)


def unregister_event_time_span_listener(callback: Callable) -> None:
    _unregister(_time_span_listeners, callback)


def unregister_scalar_listener(callback: Callable) -> None:
    _unregister(_scalar_listeners, callback)


def clear_event_listeners() -> None:
    """Forget every listener of every kind."""
    for listeners in (_event_listeners, _duration_listeners, _time_span_listeners,
                      _scalar_listeners):
        listeners.clear()


def get_event_listeners() -> list:
    return list(_event_listeners)


def get_event_duration_listeners() -> list:
    return list(_duration_listeners)


def get_event_time_span_listeners() -> list:
    return list(_time_span_listeners)


def get_scalar_listeners() -> list:
    return list(_scalar_listeners)


def _compile_step(event: str, fun_name: str, start: float, end: float) -> None:
    """A step of a jitted function's compilation, recorded as JAX's dispatch records it."""
    if _scalar_listeners:
        record_scalar(event, start, fun_name=fun_name)
    if _duration_listeners:
        record_event_duration_secs(event, end - start, fun_name=fun_name)
    if _time_span_listeners:
        record_event_time_span(event, start, end, fun_name=fun_name)


_jit.set_compile_observer(_compile_step)
