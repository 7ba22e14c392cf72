"""The communication ledger: bytes and messages of every collective, worked out by hand.

The ring model (ir/comm.py), for a block of b bytes over a group of N devices, per device:
all_reduce 2(N-1) messages of b/N each way, all_gather N-1 of b, reduce_scatter and
all_to_all N-1 of b/N, ppermute one of b, all_slice nothing. Totals sum the 8 devices.
"""
import json
from pathlib import Path

import numpy as np
import pytest

import shardc
from shardc import lax
from shardc.sharding import NamedSharding, PartitionSpec as P
from ir.comm import Traffic
from ir.ledger import (COND, DEFAULT_BANDWIDTH, DEFAULT_LATENCY, RESHARDING, WHILE, Ledger,
                       build_ledger)
from shardc.ledger import comm_ledger, format_seconds, render_ledger

MESH_8 = shardc.make_mesh((8,), ("i",))
MESH_42 = shardc.make_mesh((4, 2), ("x", "y"))
HERE = Path(__file__).name
ALPHA, BETA = DEFAULT_LATENCY, DEFAULT_BANDWIDTH


def placed(mesh, spec, shape, dtype=np.float32):
    """An array laid out by ``spec`` already, so no resharding node comes before the body."""
    value = np.arange(int(np.prod(shape))).reshape(shape).astype(dtype)
    return shardc.device_put(value, NamedSharding(mesh, spec))


def ledger_of(body, mesh, spec, shape, out_specs=None, **settings) -> Ledger:
    out_specs = spec if out_specs is None else out_specs
    f = shardc.shard_map(body, mesh=mesh, in_specs=spec, out_specs=out_specs)
    return comm_ledger(f, placed(mesh, spec, shape), **settings)


def only_entry(ledger):
    assert len(ledger.entries) == 1, ledger.entries
    return ledger.entries[0]


def symmetric(messages, nbytes):
    return Traffic(messages, messages * nbytes, messages, messages * nbytes)


def line_of(fun, offset: int) -> str:
    """The source key of the line ``offset`` lines below ``fun``'s ``def``."""
    return f"{HERE}:{fun.__code__.co_firstlineno + offset}"


# --- each collective on an (8,) mesh: block f32[8,4] = 128 B, N = 8 -------------------------------

CASES_8 = [
    # name, body, kind, per-device traffic
    ("psum", lambda v: lax.psum(v, "i"), "all_reduce",
     symmetric(2 * (8 - 1), 128 // 8)),                           # 14 messages of 16 B
    ("all_gather", lambda v: lax.all_gather(v, "i", axis=0, tiled=True), "all_gather",
     symmetric(8 - 1, 128)),                                      # 7 messages of 128 B
    ("psum_scatter", lambda v: lax.psum_scatter(v, "i", scatter_dimension=0, tiled=True),
     "reduce_scatter", symmetric(8 - 1, 128 // 8)),               # 7 messages of 16 B
    ("all_to_all", lambda v: lax.all_to_all(v, "i", 0, 0, tiled=True), "all_to_all",
     symmetric(8 - 1, 128 // 8)),                                 # 7 messages of 16 B
    ("ppermute_ring", lambda v: lax.ppermute(v, "i", [(k, (k + 1) % 8) for k in range(8)]),
     "ppermute", symmetric(1, 128)),                              # one message of 128 B
]


@pytest.mark.parametrize("name, body, kind, traffic", CASES_8, ids=[c[0] for c in CASES_8])
def test_each_collective_on_an_8_device_mesh(name, body, kind, traffic):
    entry = only_entry(ledger_of(body, MESH_8, P("i"), (64, 4)))
    assert (entry.kind, entry.mesh_axes, entry.group_size, entry.num_groups) == (kind, ("i",), 8, 1)
    assert entry.trip_count == 1 and entry.flags == ()
    assert entry.device_max == traffic
    assert entry.total == Traffic(*(8 * v for v in dataclass_values(traffic)))
    # every device sends and receives alike: time = messages * alpha + bytes / beta
    assert entry.time == pytest.approx(traffic.sent_messages * ALPHA + traffic.sent_bytes / BETA)


def dataclass_values(traffic):
    return (traffic.sent_messages, traffic.sent_bytes, traffic.received_messages,
            traffic.received_bytes)


def test_ppermute_shift_without_wraparound_sends_from_seven_devices():
    # 0->1 ... 6->7: device 7 only receives, device 0 only sends; one block of 128 B each
    shift = lambda v: lax.ppermute(v, "i", [(k, k + 1) for k in range(7)])
    entry = only_entry(ledger_of(shift, MESH_8, P("i"), (64, 4)))
    assert entry.device_max == Traffic(1, 128, 1, 128)
    assert entry.total == Traffic(7, 7 * 128, 7, 7 * 128)
    assert entry.time == pytest.approx(1 * ALPHA + 128 / BETA)


def test_all_reduce_of_a_block_smaller_than_the_group():
    # f32[] is 4 B = one element over N = 8: the ring deals chunks [4, 0, 0, 0, 0, 0, 0, 0] B.
    # Member r sends every chunk but r, then every chunk but r+1: 4 + 4 B for r = 1..6,
    # 0 + 4 B for r = 0, 4 + 0 B for r = 7; empty messages are not sent.
    # All devices together send 2(N-1) b = 14 * 4 = 56 B, as with any block.
    total = lambda v: lax.psum(v.sum(), "i")
    entry = only_entry(ledger_of(total, MESH_8, P("i"), (64, 4), out_specs=P()))
    assert entry.device_max == Traffic(2, 8, 2, 8)
    assert entry.total == Traffic(6 * 2 + 2, 6 * 8 + 4 + 4, 6 * 2 + 2, 6 * 8 + 4 + 4)
    assert entry.total.sent_bytes == 2 * (8 - 1) * 4


# --- a (4, 2) mesh: block f32[2,4] = 32 B; over 'x' N = 4, over 'y' N = 2, over both N = 8 --------

CASES_42 = [
    # name, body, kind, mesh_axes, (group_size, num_groups), per-device traffic
    ("psum_y", lambda v: lax.psum(v, "y"), "all_reduce", ("y",), (2, 4),
     symmetric(2 * (2 - 1), 32 // 2)),                            # 2 messages of 16 B
    ("psum_x", lambda v: lax.psum(v, "x"), "all_reduce", ("x",), (4, 2),
     symmetric(2 * (4 - 1), 32 // 4)),                            # 6 messages of 8 B
    ("psum_xy", lambda v: lax.psum(v, ("x", "y")), "all_reduce", ("x", "y"), (8, 1),
     symmetric(2 * (8 - 1), 32 // 8)),                            # 14 messages of 4 B
    ("all_gather_x", lambda v: lax.all_gather(v, "x", axis=0, tiled=True), "all_gather",
     ("x",), (4, 2), symmetric(4 - 1, 32)),                       # 3 messages of 32 B
    ("all_gather_y", lambda v: lax.all_gather(v, "y", axis=1, tiled=True), "all_gather",
     ("y",), (2, 4), symmetric(2 - 1, 32)),                       # 1 message of 32 B
    ("all_gather_xy", lambda v: lax.all_gather(v, ("x", "y"), axis=0, tiled=True), "all_gather",
     ("x", "y"), (8, 1), symmetric(8 - 1, 32)),                   # 7 messages of 32 B
    ("psum_scatter_x", lambda v: lax.psum_scatter(v, "x", scatter_dimension=1, tiled=True),
     "reduce_scatter", ("x",), (4, 2), symmetric(4 - 1, 32 // 4)),   # 3 messages of 8 B
    ("psum_scatter_y", lambda v: lax.psum_scatter(v, "y", scatter_dimension=0, tiled=True),
     "reduce_scatter", ("y",), (2, 4), symmetric(2 - 1, 32 // 2)),    # 1 message of 16 B
    ("all_to_all_x", lambda v: lax.all_to_all(v, "x", 1, 0, tiled=True), "all_to_all",
     ("x",), (4, 2), symmetric(4 - 1, 32 // 4)),                  # 3 messages of 8 B
    ("all_to_all_y", lambda v: lax.all_to_all(v, "y", 1, 0, tiled=True), "all_to_all",
     ("y",), (2, 4), symmetric(2 - 1, 32 // 2)),                  # 1 message of 16 B
    ("ppermute_x", lambda v: lax.ppermute(v, "x", [(0, 1), (1, 2), (2, 3), (3, 0)]), "ppermute",
     ("x",), (4, 2), symmetric(1, 32)),
    ("ppermute_y", lambda v: lax.ppermute(v, "y", [(0, 1), (1, 0)]), "ppermute",
     ("y",), (2, 4), symmetric(1, 32)),
]


@pytest.mark.parametrize("name, body, kind, mesh_axes, groups, traffic", CASES_42,
                         ids=[c[0] for c in CASES_42])
def test_each_collective_on_a_4x2_mesh(name, body, kind, mesh_axes, groups, traffic):
    entry = only_entry(ledger_of(body, MESH_42, P("x", "y"), (8, 8)))
    assert (entry.kind, entry.mesh_axes, (entry.group_size, entry.num_groups)) == (
        kind, mesh_axes, groups)
    assert entry.device_max == traffic
    assert entry.total.sent_bytes == 8 * traffic.sent_bytes
    assert entry.total.received_messages == 8 * traffic.received_messages
    assert entry.time == pytest.approx(traffic.sent_messages * ALPHA + traffic.sent_bytes / BETA)


# --- the seed tutorial's matmul_basic -------------------------------------------------------------

def matmul_basic(a_block, b_block):
    # a_block: f32[2, 8], b_block: f32[8, 4]
    c_partialsum = shardc.numpy.dot(a_block, b_block)
    return lax.psum(c_partialsum, "y")          # an all_reduce of f32[2,4] = 32 B over 'y'


def matmul_basic_sharded():
    return shardc.shard_map(matmul_basic, mesh=MESH_42, in_specs=(P("x", "y"), P("y", None)),
                            out_specs=P("x", None))


def matmul_inputs():
    return (placed(MESH_42, P("x", "y"), (8, 16)), placed(MESH_42, P("y", None), (16, 4)))


def test_matmul_basic_is_one_all_reduce_per_device():
    entry = only_entry(comm_ledger(matmul_basic_sharded(), *matmul_inputs()))
    assert (entry.kind, entry.mesh_axes, entry.group_size, entry.num_groups) == (
        "all_reduce", ("y",), 2, 4)
    # 2(2-1) = 2 messages of 32/2 = 16 B each way per device; 8 devices
    assert entry.device_max == Traffic(2, 32, 2, 32)
    assert entry.total == Traffic(16, 256, 16, 256)
    assert entry.source_key == line_of(matmul_basic, 3)
    assert entry.time == pytest.approx(2 * 1e-6 + 32 / 1e10)


def test_matmul_basic_from_host_inputs_slices_without_communication():
    a, b = np.ones((8, 16), np.float32), np.ones((16, 4), np.float32)
    ledger = comm_ledger(matmul_basic_sharded(), a, b)
    kinds = [(e.kind, e.mesh_axes, e.source_key) for e in ledger.entries]
    assert kinds == [("all_slice", ("x",), RESHARDING), ("all_slice", ("y",), RESHARDING),
                     ("all_slice", ("y",), RESHARDING),
                     ("all_reduce", ("y",), line_of(matmul_basic, 3))]
    assert all(e.total == Traffic() and e.time == 0 for e in ledger.entries[:3])
    assert ledger.total_bytes_sent == 256
    assert ledger.by_source()[RESHARDING].nodes == 3


def test_comm_ledger_takes_jitted_functions_and_lowered_modules():
    inputs = matmul_inputs()
    jitted = shardc.jit(matmul_basic_sharded())
    compiled = jitted.lower(*inputs)
    expected = comm_ledger(matmul_basic_sharded(), *inputs)
    assert comm_ledger(jitted, *inputs) == expected
    assert comm_ledger(compiled) == expected
    assert comm_ledger(compiled.module) == expected
    assert build_ledger(compiled.module) == expected
    with pytest.raises(TypeError, match="takes no arguments"):
        comm_ledger(compiled, *inputs)


def test_static_arguments_of_a_jitted_function():
    def scaled(x, times):
        f = shardc.shard_map(lambda v: lax.psum(v * times, "y"), mesh=MESH_42,
                             in_specs=P("x", "y"), out_specs=P("x"))
        return f(x)

    jitted = shardc.jit(scaled, static_argnums=1)
    entry = only_entry(comm_ledger(jitted, placed(MESH_42, P("x", "y"), (8, 8)), 3))
    assert entry.device_max == Traffic(2, 32, 2, 32)


# --- sums per mesh axes and per source line -------------------------------------------------------

def mixed(v):
    a = lax.psum(v, "y")
    b = lax.psum(v, "x") + lax.psum(v, ("y", "x"))
    c = lax.all_gather(v, "x", axis=0, tiled=True)
    return a + b + c[:2]


def test_sums_per_axis_and_per_source_line():
    ledger = ledger_of(mixed, MESH_42, P("x", "y"), (8, 8))
    y_reduce, x_reduce, xy_reduce, x_gather = symmetric(2, 16), symmetric(6, 8), \
        symmetric(14, 4), symmetric(3, 32)
    assert [e.kind for e in ledger.entries] == ["all_reduce"] * 3 + ["all_gather"]
    by_axis = ledger.by_axis()
    # single axes first in mesh order; ('y','x') sums with the axes in mesh order
    assert list(by_axis) == ["x", "y", "x,y"]
    assert by_axis["y"].device_max == y_reduce and by_axis["y"].nodes == 1
    assert by_axis["x"].nodes == 2
    assert by_axis["x"].device_max.sent_bytes == 48 + 96        # 6*8 B + 3*32 B
    assert by_axis["x"].device_max.sent_messages == 6 + 3
    assert by_axis["x"].total.sent_bytes == 8 * (48 + 96)
    assert by_axis["x,y"].device_max == xy_reduce
    assert by_axis["x"].time == pytest.approx(6 * ALPHA + 48 / BETA + 3 * ALPHA + 96 / BETA)

    by_source = ledger.by_source()
    assert list(by_source) == [line_of(mixed, 1), line_of(mixed, 2), line_of(mixed, 3)]
    two = by_source[line_of(mixed, 2)]                  # psum 'x' and psum ('y','x'), one line
    assert two.nodes == 2 and two.device_max.sent_bytes == 48 + 56
    assert by_source[line_of(mixed, 3)].device_max == x_gather

    assert sum(s.total.sent_bytes for s in by_axis.values()) == ledger.total_bytes_sent
    assert sum(s.time for s in by_source.values()) == pytest.approx(ledger.total_time)
    assert ledger.total_bytes_sent == 8 * (32 + 48 + 56 + 96)
    assert ledger.exact


# --- control flow -----------------------------------------------------------------------------

def looped(v):
    def body(i, w):
        return w + lax.psum(w, "y")                     # 32 B over 'y', 5 times
    return lax.fori_loop(0, 5, body, v)


def scanned(v):
    def step(w, _):
        inner = lax.fori_loop(0, 2, lambda i, u: u + lax.psum(u, "x"), w)
        return inner, None
    return lax.scan(step, v, None, length=3)[0]


def test_fori_loop_multiplies_by_its_trip_count():
    entry = only_entry(ledger_of(looped, MESH_42, P("x", "y"), (8, 8)))
    assert entry.trip_count == 5 and entry.context == ("scan[length=5]",)
    assert entry.device_max == Traffic(5 * 2, 5 * 32, 5 * 2, 5 * 32)
    assert entry.total.sent_bytes == 5 * 8 * 32
    assert entry.time == pytest.approx(5 * (2 * ALPHA + 32 / BETA))
    assert entry.source_key == line_of(looped, 2)


def test_nested_loops_multiply():
    entry = only_entry(ledger_of(scanned, MESH_42, P("x", "y"), (8, 8)))
    # scan of 3 around fori_loop of 2: psum over 'x' (6 messages of 8 B) 6 times
    assert entry.trip_count == 3 * 2
    assert entry.context == ("scan[length=3]", "scan[length=2]")
    assert entry.device_max == Traffic(6 * 6, 6 * 48, 6 * 6, 6 * 48)
    assert ledger_of(scanned, MESH_42, P("x", "y"), (8, 8)).by_axis()["x"].executions == 6


def test_a_while_loop_counts_once_and_is_flagged():
    def waiting(v):
        def body(carry):
            k, w = carry
            return k + 1, w + lax.psum(w, "y")
        return lax.while_loop(lambda carry: carry[0] < 3, body, (0, v))[1]

    ledger = ledger_of(waiting, MESH_42, P("x", "y"), (8, 8))
    entry = only_entry(ledger)
    assert entry.trip_count == 1 and entry.flags == (WHILE,) and entry.context == ("while",)
    assert entry.device_max == Traffic(2, 32, 2, 32)
    assert not ledger.exact
    assert ledger.by_axis()["y"].flags == (WHILE,)
    assert "trip count is unknown" in render_ledger(ledger)


def test_a_fori_loop_with_traced_bounds_is_a_while_loop():
    def until(v, n):
        return lax.fori_loop(0, n[0], lambda i, w: w + lax.psum(w, "y"), v)

    f = shardc.shard_map(until, mesh=MESH_42, in_specs=(P("x", "y"), P()), out_specs=P("x", "y"))
    n = shardc.device_put(np.array([4], np.int32), NamedSharding(MESH_42, P()))
    entry = only_entry(comm_ledger(f, placed(MESH_42, P("x", "y"), (8, 8)), n))
    assert entry.flags == (WHILE,) and entry.trip_count == 1


def test_cond_branches_are_flagged():
    def branching(v, p):
        return lax.cond(p[0] > 0, lambda w: w + lax.psum(w, "x"), lambda w: w, v)

    f = shardc.shard_map(branching, mesh=MESH_42, in_specs=(P("x", "y"), P()),
                         out_specs=P("x", "y"))
    p = shardc.device_put(np.ones((1,), np.float32), NamedSharding(MESH_42, P()))
    ledger = comm_ledger(f, placed(MESH_42, P("x", "y"), (8, 8)), p)
    entry = only_entry(ledger)
    assert entry.flags == (COND,) and entry.context == ("cond branch 1",)
    assert entry.device_max == Traffic(6, 48, 6, 48)
    assert not ledger.exact


# --- latency and bandwidth --------------------------------------------------------------------

def test_latency_and_bandwidth_numbers_apply_to_every_axis():
    ledger = comm_ledger(matmul_basic_sharded(), *matmul_inputs(), latency=3e-6, bandwidth=4e9)
    assert ledger.latency == {"x": 3e-6, "y": 3e-6}
    assert ledger.bandwidth == {"x": 4e9, "y": 4e9}
    assert only_entry(ledger).time == pytest.approx(2 * 3e-6 + 32 / 4e9)
    assert ledger.total_time == pytest.approx(2 * 3e-6 + 32 / 4e9)


def test_per_axis_settings_leave_other_axes_at_the_default():
    ledger = comm_ledger(matmul_basic_sharded(), *matmul_inputs(), latency={"x": 1e-3},
                         bandwidth={"y": 2e9})
    assert ledger.latency == {"x": 1e-3, "y": DEFAULT_LATENCY}
    assert only_entry(ledger).time == pytest.approx(2 * DEFAULT_LATENCY + 32 / 2e9)


def test_a_collective_over_several_axes_pays_the_worst_of_them():
    both = lambda v: lax.psum(v, ("x", "y"))
    ledger = ledger_of(both, MESH_42, P("x", "y"), (8, 8),
                       latency={"x": 5e-6, "y": 2e-6}, bandwidth={"x": 1e9, "y": 4e9})
    # 14 messages of 4 B; alpha = max(5e-6, 2e-6), beta = min(1e9, 4e9)
    assert only_entry(ledger).time == pytest.approx(14 * 5e-6 + 56 / 1e9)


def test_the_estimate_is_the_slowest_device():
    # f32[] over 8 devices: the busiest members send 2 messages of 4 B, the ends one
    total = lambda v: lax.psum(v.sum(), "i")
    ledger = ledger_of(total, MESH_8, P("i"), (64, 4), out_specs=P(), latency=1.0, bandwidth=1.0)
    assert only_entry(ledger).time == 2 * 1.0 + 8 / 1.0


@pytest.mark.parametrize("settings, error, words", [
    (dict(latency={"z": 1e-6}), ValueError, "latency names mesh axis 'z'"),
    (dict(bandwidth={"y": 0}), ValueError, "bandwidth for axis 'y' must be positive"),
    (dict(latency=-1.0), ValueError, "latency for every axis must be zero or more"),
    (dict(latency="fast"), TypeError, "latency for every axis must be a number"),
    (dict(bandwidth={"x": True}), TypeError, "bandwidth for axis 'x' must be a number"),
])
def test_bad_settings_are_named(settings, error, words):
    with pytest.raises(error, match=words):
        comm_ledger(matmul_basic_sharded(), *matmul_inputs(), **settings)


def test_zero_latency_is_a_pure_bandwidth_model():
    ledger = comm_ledger(matmul_basic_sharded(), *matmul_inputs(), latency=0)
    assert ledger.total_time == pytest.approx(32 / DEFAULT_BANDWIDTH)


# --- JSON and the table -------------------------------------------------------------------------

def test_to_dict_round_trips_through_json():
    ledger = ledger_of(mixed, MESH_42, P("x", "y"), (8, 8), latency={"y": 2e-6})
    data = ledger.to_dict()
    text = json.dumps(data)
    assert json.loads(text) == data
    assert Ledger.from_dict(json.loads(text)) == ledger
    assert data["total"]["total"]["sent_bytes"] == ledger.total_bytes_sent
    assert data["by_axis"]["x"]["nodes"] == 2
    assert data["entries"][0]["source_key"] == line_of(mixed, 1)
    assert data["entries"][2]["mesh_axes"] == ["y", "x"]


def test_render_matmul_basic():
    text = render_ledger(comm_ledger(matmul_basic_sharded(), *matmul_inputs()))
    rows = [line.split() for line in text.splitlines()]
    source = line_of(matmul_basic, 3)
    # index, kind, axes, groups, trips, msgs/dev, B sent/dev, B recv/dev, B total, time, source
    assert ["0", "all_reduce", "y", "4x2", "1", "2", "32", "32", "256", "2.00", "us",
            source] in rows
    #          axes nodes executions msgs  B/dev B recv total  time
    assert ["y", "1", "1", "2", "32", "32", "256", "2.00", "us"] in rows
    assert [source, "1", "1", "2", "32", "32", "256", "2.00", "us"] in rows
    assert ("total: 1 collectives, 1 executions, 256 B sent over all devices, "
            "estimated time 2.00 us") in text
    assert "latency per message: x=1e-06 s, y=1e-06 s" in text
    assert "bandwidth: x=1e+10 B/s, y=1e+10 B/s" in text
    assert "\x1b[" not in text
    assert render_ledger(comm_ledger(matmul_basic_sharded(), *matmul_inputs())) == text


def test_render_marks_loops_and_names_their_context():
    text = render_ledger(ledger_of(looped, MESH_42, P("x", "y"), (8, 8)))
    row = next(line.split() for line in text.splitlines() if "all_reduce" in line)
    assert row == ["0", "all_reduce", "y", "4x2", "5", "10", "160", "160", "1280", "10.0", "us",
                   line_of(looped, 2), "scan[length=5]"]


def test_a_program_without_shard_map_has_no_collectives():
    ledger = comm_ledger(lambda a: a + 1, np.ones(4, np.float32))
    assert ledger.entries == [] and ledger.total_bytes_sent == 0 and ledger.total_time == 0
    assert render_ledger(ledger) == "no collectives\n"


def test_format_seconds():
    assert [format_seconds(t) for t in (0, 2.0032e-6, 1.5e-3, 12.0, 3e-9)] == [
        "0 s", "2.00 us", "1.50 ms", "12.0 s", "3.00 ns"]


def test_public_name():
    assert shardc.comm_ledger is comm_ledger
