"""jax.profiler: a trace records annotations and jitted calls and is written where JAX writes
its own (a Chrome trace-event file); annotations record nothing outside a trace; the memory
profile is a pprof protobuf of the live arrays' device buffers, read back here field by
field."""
from __future__ import annotations

import gzip
import json
import pathlib

import numpy as np
import pytest

import shardc
import shardc.numpy as jnp
from shardc import profiler
from shardc.sharding import PartitionSpec as P


def _trace_events(log_dir) -> list:
    files = sorted(pathlib.Path(log_dir).glob("plugins/profile/*/*.trace.json.gz"))
    assert len(files) == 1
    with gzip.open(files[0], "rt") as f:
        return json.load(f)["traceEvents"]


def test_a_trace_records_steps_annotations_and_jitted_calls(tmp_path):
    step = shardc.jit(lambda x: jnp.tanh(x) @ x.T)
    x = jnp.ones((16, 16))
    step(x)                                     # compiled before the trace
    with profiler.trace(tmp_path):
        for k in range(3):
            with profiler.StepTraceAnnotation("train", step_num=k):
                step(x).block_until_ready()
        with profiler.TraceAnnotation("summary", kind="eval"):
            float(jnp.sum(x))
    spans = [e for e in _trace_events(tmp_path) if e["ph"] == "X"]
    names = [e["name"] for e in spans]
    assert names.count("train") == 3 and names.count("summary") == 1
    assert names.count("jit(<lambda>)") == 3
    assert [e["args"]["step_num"] for e in spans if e["name"] == "train"] == ["0", "1", "2"]
    assert all(e["dur"] >= 0 for e in spans)
    train = [e for e in spans if e["name"] == "train"]
    calls = [e for e in spans if e["name"] == "jit(<lambda>)"]
    for outer, inner in zip(train, calls):          # each call lies inside its step
        assert outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= \
            outer["ts"] + outer["dur"] + 1e-3
    # outside a trace nothing is recorded, and the function's results are as always
    with profiler.TraceAnnotation("after"):
        np.testing.assert_allclose(step(x), np.tanh(np.ones((16, 16))) @ np.ones((16, 16)),
                                   rtol=1e-6)


def test_perfetto_trace_annotate_function_and_errors(tmp_path):
    @profiler.annotate_function
    def add_one(a):
        return a + 1

    @profiler.annotate_function(name="named")
    def double(a):
        return a * 2

    profiler.start_trace(tmp_path, create_perfetto_trace=True)
    with pytest.raises(RuntimeError, match="Profile has already been started"):
        profiler.start_trace(tmp_path)
    assert int(double(add_one(jnp.int32(1)))) == 4
    profiler.stop_trace()
    with pytest.raises(RuntimeError, match="No profile started"):
        profiler.stop_trace()
    names = {e["name"] for e in _trace_events(tmp_path)}
    assert {"test_perfetto_trace_annotate_function_and_errors.<locals>.add_one",
            "named"} <= names
    assert len(list(tmp_path.glob("plugins/profile/*/perfetto_trace.json.gz"))) == 1
    with pytest.raises(NotImplementedError, match="no profiler server"):
        profiler.start_server(9999)
    # a trace whose body raises is still written, and the next can start
    with pytest.raises(ValueError):
        with profiler.trace(tmp_path / "second"):
            raise ValueError("in the body")
    assert len(list((tmp_path / "second").glob("plugins/profile/*/*.trace.json.gz"))) == 1


def _fields(data: bytes) -> list:
    """A protobuf message's (field number, value) pairs: ints for varints, bytes otherwise."""
    out, k = [], 0

    def varint():
        nonlocal k
        value, shift = 0, 0
        while True:
            byte = data[k]
            k += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while k < len(data):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            out.append((number, varint()))
        else:
            assert wire == 2
            size = varint()
            out.append((number, data[k:k + size]))
            k += size
    return out


def _varints(data: bytes) -> list:
    values, value, shift = [], 0, 0
    for byte in data:
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            values.append(value)
            value, shift = 0, 0
    return values


def test_device_memory_profile_is_pprof_of_the_live_buffers(tmp_path):
    mesh = shardc.make_mesh((4,), ("x",))
    held = shardc.device_put(np.zeros((8, 32), np.float32), shardc.NamedSharding(mesh, P("x")))
    profile = _fields(gzip.decompress(profiler.device_memory_profile()))
    strings = [v.decode() for n, v in profile if n == 6]
    assert strings[0] == ""
    sample_types = [[strings[i] for _, i in _fields(v)] for n, v in profile if n == 1]
    assert sample_types == [["allocations", "count"], ["space", "bytes"]]
    functions = {dict(_fields(v))[1]: strings[dict(_fields(v))[2]]
                 for n, v in profile if n == 5}
    found = []
    for n, v in profile:
        if n != 2:
            continue
        sample = _fields(v)
        (location,) = _varints(next(x for m, x in sample if m == 1))
        count, size = _varints(next(x for m, x in sample if m == 2))
        labels = {strings[dict(_fields(x))[1]]: strings[dict(_fields(x))[2]]
                  for m, x in sample if m == 3}
        if functions[location] == "float32[8,32]":
            found.append((labels["device"], count, size))
    # the held array's four blocks, 2 x 32 float32 each, one per device
    expected = {(str(d), 1, 2 * 32 * 4) for d in held.sharding.mesh.devices.flat}
    assert expected <= set(found)
    path = tmp_path / "memory.prof"
    profiler.save_device_memory_profile(path)
    saved = _fields(gzip.decompress(path.read_bytes()))
    assert [n for n, _ in saved if n == 1] == [1, 1] and [v for n, v in saved if n == 6][0] == b""
