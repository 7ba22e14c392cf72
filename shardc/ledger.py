"""``comm_ledger``: what every collective of a function moves and costs, and its table.

    >>> ledger = shardc.comm_ledger(matmul_basic, a, b)             # doctest: +SKIP
    >>> ledger.total_bytes_sent, ledger.entries[0].kind             # doctest: +SKIP
    (256, 'all_reduce')
    >>> print(render_ledger(ledger))                                # doctest: +SKIP

The analysis is ``ir.ledger`` (``build_ledger`` over a lowered module); this module lowers the
function and draws the tables with rich.
"""
from __future__ import annotations

import io

import rich.box
import rich.console
import rich.table

from compiler.jit import Compiled, JitFunction, jit
from ir.ledger import COND, WHILE, Ledger, LedgerEntry, LedgerSum, build_ledger
from ir.module import LoweredModule

__all__ = ["comm_ledger", "render_ledger", "Ledger", "LedgerEntry", "LedgerSum"]


def comm_ledger(f, *args, latency=None, bandwidth=None, **kwargs) -> Ledger:
    """The communication ledger of ``f`` lowered for ``args``.

    Args:
      f: a function (a shard_map-wrapped one, or one that calls shard_map), a ``shardc.jit``
        function (its own ``lower`` is used, with its static arguments), or something already
        lowered: a ``Compiled`` (``jit(f).lower(...)``) or a ``LoweredModule`` (no ``args``).
      *args, **kwargs: what ``f`` is called with: arrays or ``shardc.ShapeDtypeStruct``s.
      latency: seconds per message; a number for every mesh axis or ``{axis: seconds}``;
        default ``ir.ledger.DEFAULT_LATENCY`` (1e-6).
      bandwidth: bytes per second, given the same ways; default ``DEFAULT_BANDWIDTH`` (1e10).

    Returns:
      a ``Ledger``: ``entries`` (one per communication node), ``by_axis()``, ``by_source()``,
      ``total_bytes_sent``, ``total_time``, ``to_dict()``.

    >>> ledger = comm_ledger(matmul_basic, a, b, bandwidth={'y': 5e9})   # doctest: +SKIP
    """
    module = _lowered_module(f, args, kwargs)
    return build_ledger(module, latency=latency, bandwidth=bandwidth)


def _lowered_module(f, args: tuple, kwargs: dict) -> LoweredModule:
    if isinstance(f, (LoweredModule, Compiled)):
        if args or kwargs:
            raise TypeError("comm_ledger: a lowered module takes no arguments")
        return f if isinstance(f, LoweredModule) else f.module
    jitted = f if isinstance(f, JitFunction) else jit(f)
    return jitted.lower(*args, **kwargs).module


# --- rendering ------------------------------------------------------------------------------------

_FLAG_MARKS = {WHILE: "*", COND: "+"}
_FLAG_NOTES = {WHILE: "* inside a while loop: its trip count is unknown, counted once",
               COND: "+ inside a cond branch: counted as if the branch runs"}
_TRAFFIC_HEADERS = ("msgs/dev", "B sent/dev", "B recv/dev", "B sent total", "time")


def render_ledger(ledger: Ledger, *, width: int = 200, color: bool = False) -> str:
    """The ledger as text: one row per collective, then the sums per mesh axis and per source
    line, the total, the link settings and what the flags mean.

    Per-device columns are the busiest device (summed over the rows in the sum tables); bytes
    and messages are over all executions. Deterministic: no colour unless ``color``, and a
    fixed ``width`` (a table narrower than it takes only what it needs).
    """
    console = rich.console.Console(file=io.StringIO(), width=width, color_system=(
        "standard" if color else None), force_terminal=color, highlight=False, emoji=False,
        markup=False, soft_wrap=False)
    if ledger.entries:
        console.print(_entries_table(ledger.entries))
        console.print(_sums_table("by mesh axes", "mesh axes", ledger.by_axis()))
        console.print(_sums_table("by source line", "source", ledger.by_source()))
    if ledger.inserted:
        console.print(_inserted_table(ledger.inserted))
    for line in _footer(ledger):
        console.print(line)
    lines = [line.rstrip() for line in console.file.getvalue().splitlines()]
    return "\n".join(lines).strip("\n") + "\n"


def _inserted_table(inserted) -> rich.table.Table:
    """What the partitioner inserted for operations on split values, with why and the fix."""
    table = rich.table.Table(title="inserted by the partitioner", title_justify="left",
                             box=rich.box.SIMPLE_HEAD, pad_edge=False)
    for header in ("source", "operation", "from -> to", "collective", "B/dev", "reason"):
        table.add_column(header, no_wrap=header != "reason",
                         justify="right" if header == "B/dev" else "left")
    for r in inserted:
        table.add_row(r.site, r.operation, f"{r.from_type} -> {r.to_type}",
                      f"{r.collective} {','.join(r.mesh_axes)}", str(r.bytes_per_device),
                      r.reason + ("" if r.requested else f"; {r.avoid}"))
    return table


def _table(title: str, first_headers: tuple) -> rich.table.Table:
    table = rich.table.Table(title=title, title_justify="left", box=rich.box.SIMPLE_HEAD,
                             pad_edge=False)
    for header in first_headers:
        table.add_column(header, no_wrap=True)
    for header in _TRAFFIC_HEADERS:
        table.add_column(header, justify="right", no_wrap=True)
    return table


def _entries_table(entries: list) -> rich.table.Table:
    table = _table("collectives", ("#", "kind", "mesh axes", "groups", "trips"))
    table.add_column("source", no_wrap=True)
    table.add_column("inside", no_wrap=True)
    for e in entries:
        trips = f"{e.trip_count}{_marks(e.flags)}"
        groups = f"{e.num_groups}x{e.group_size}"
        table.add_row(str(e.index), e.kind, ",".join(e.mesh_axes), groups, trips,
                      *_traffic_cells(e.device_max, e.total, e.time), e.source_key,
                      " > ".join(e.context))
    return table


def _sums_table(title: str, key_header: str, sums: dict) -> rich.table.Table:
    table = _table(title, (key_header, "nodes", "executions"))
    for key, s in sums.items():
        table.add_row(key, str(s.nodes), f"{s.executions}{_marks(s.flags)}",
                      *_traffic_cells(s.device_max, s.total, s.time))
    return table


def _traffic_cells(device_max, total, time: float) -> tuple:
    return (str(device_max.sent_messages), str(device_max.sent_bytes),
            str(device_max.received_bytes), str(total.sent_bytes), format_seconds(time))


def _marks(flags: tuple) -> str:
    return "".join(_FLAG_MARKS.get(f, "?") for f in flags)


def _footer(ledger: Ledger) -> list:
    total = ledger.total()
    if not total.nodes:
        return ["no collectives"] + [f"note: {note}" for note in ledger.notes]
    lines = [f"total: {total.nodes} collectives, {total.executions} executions, "
             f"{total.total.sent_bytes} B sent over all devices, "
             f"estimated time {format_seconds(total.time)}"]
    if ledger.axis_names:
        lines.append("latency per message: " + _per_axis(ledger.latency, "s"))
        lines.append("bandwidth: " + _per_axis(ledger.bandwidth, "B/s"))
    lines.extend(_FLAG_NOTES[f] for f in total.flags if f in _FLAG_NOTES)
    lines.extend(f"note: {note}" for note in ledger.notes)
    return lines


def _per_axis(values: dict, unit: str) -> str:
    return ", ".join(f"{axis}={value:g} {unit}" for axis, value in values.items())


def format_seconds(seconds: float) -> str:
    """Three significant digits in a readable unit: ``2.00 us``, ``1.50 ms``, ``0 s``.

    >>> format_seconds(2.0032e-06)
    '2.00 us'
    """
    if seconds == 0:
        return "0 s"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if seconds >= scale:
            return f"{seconds / scale:#.3g} {unit}"
    return f"{seconds / 1e-9:#.3g} ns"
