"""jax.monitoring: listeners hear the events recorded, and each jitted function's compile
steps under JAX's event names."""
import time

import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from shardc import monitoring


@pytest.fixture(autouse=True)
def no_listeners_left():
    monitoring.clear_event_listeners()
    yield
    monitoring.clear_event_listeners()


def test_each_kind_of_listener_hears_its_records_in_order():
    heard = []
    monitoring.register_event_listener(lambda e, **kw: heard.append(("event", e, kw)))
    monitoring.register_event_listener(lambda e, **kw: heard.append(("second", e, kw)))
    monitoring.register_event_duration_secs_listener(
        lambda e, d, **kw: heard.append(("duration", e, d, kw)))
    monitoring.register_event_time_span_listener(
        lambda e, s, t, **kw: heard.append(("span", e, s, t, kw)))
    monitoring.register_scalar_listener(lambda e, v, **kw: heard.append(("scalar", e, v, kw)))
    monitoring.record_event("/a", tag="x")
    monitoring.record_event_duration_secs("/b", 0.5)
    monitoring.record_event_time_span("/c", 1.0, 2.0, n=3)
    monitoring.record_scalar("/d", 7)
    assert heard == [("event", "/a", {"tag": "x"}), ("second", "/a", {"tag": "x"}),
                     ("duration", "/b", 0.5, {}), ("span", "/c", 1.0, 2.0, {"n": 3}),
                     ("scalar", "/d", 7, {})]


def test_unregistering_and_clearing():
    heard = []
    listener = lambda e, **kw: heard.append(e)
    monitoring.register_event_listener(listener)
    assert monitoring.get_event_listeners() == [listener]
    monitoring.unregister_event_listener(listener)
    monitoring.record_event("/gone")
    assert heard == [] and monitoring.get_event_listeners() == []
    with pytest.raises(AssertionError):
        monitoring.unregister_event_listener(listener)
    monitoring.register_scalar_listener(listener)
    monitoring.clear_event_listeners()
    assert monitoring.get_scalar_listeners() == []


def test_a_jitted_functions_compile_steps_are_recorded_once():
    durations, spans, scalars = [], [], []
    monitoring.register_event_duration_secs_listener(
        lambda e, d, **kw: durations.append((e, d, kw["fun_name"])))
    monitoring.register_event_time_span_listener(
        lambda e, s, t, **kw: spans.append((e, s, t)))
    monitoring.register_scalar_listener(lambda e, v, **kw: scalars.append((e, v)))

    def step(x):
        return jnp.sin(x) * 2

    before = time.time()
    f = jax.jit(step)
    f(np.ones(4, np.float32))
    f(np.ones(4, np.float32))            # cached: nothing more to record
    after = time.time()
    events = ["/jax/core/compile/jaxpr_trace_duration",
              "/jax/core/compile/backend_compile_duration"]
    assert [(e, name) for e, _, name in durations] == list(zip(events, ["step", "jit_step"]))
    assert all(d >= 0 for _, d, _ in durations)
    assert [e for e, _, _ in spans] == events == [e for e, _ in scalars]
    for (_, start, end), (_, value) in zip(spans, scalars):
        assert before <= start == value <= end <= after
