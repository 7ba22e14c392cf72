"""The communication ledger of a lowered module: every collective, what it moves, what it costs.

One entry per communication node (a lowered node carrying ``device_groups``: ``all_reduce``,
``all_gather``, ``reduce_scatter``, ``ppermute``, ``all_to_all``, ``all_slice``) of each
shard_map, in program order, nodes inside control flow included where their control-flow
equation stands. The seed tutorial's ``matmul_basic`` on a (4, 2) mesh has one: an
``all_reduce`` over ``('y',)``, 4 groups of 2 devices, each device sending and receiving
2 messages of 16 B, 256 B sent over all 8 devices.

The traffic of one node on one device is ``ir.comm.device_traffic`` (the ring model). An entry
reports the busiest device (each field maximised separately over devices) and the sum over
devices, both multiplied by the trip count: a node inside ``scan[length=L]`` (``fori_loop``
with static bounds is one) counts L times, nested loops multiply. A while loop's trip count is
unknown: its nodes count once and carry the flag ``while``; nodes in a ``cond`` branch count
as if the branch runs and carry the flag ``cond``.

Time is the alpha-beta model. A device spends ``messages * alpha + bytes / beta`` on what it
sends, and as long on what it receives (full duplex: the longer of the two counts); a node
takes as long as its slowest device, times its trip count; totals sum nodes (no overlap).
Alpha (latency, seconds per message) and beta (bandwidth, bytes per second) are set per mesh
axis, default ``DEFAULT_LATENCY`` and ``DEFAULT_BANDWIDTH`` on every axis; a node over several
axes pays the worst of them (largest alpha, smallest beta).

>>> ledger = build_ledger(module, latency={'x': 5e-6}, bandwidth=2.5e10)   # doctest: +SKIP
>>> ledger.total_bytes_sent, ledger.by_axis()['y'].total.sent_bytes          # doctest: +SKIP
(256, 256)
"""
from __future__ import annotations

import dataclasses
import math
from numbers import Real

from ir import primitives as prims
from ir.comm import Traffic, device_traffic
from ir.core import Program, SourceInfo

DEFAULT_LATENCY = 1e-6      # seconds per message, every mesh axis
DEFAULT_BANDWIDTH = 1e10    # bytes per second, every mesh axis

WHILE = "while"             # flag: inside a while loop, whose trip count is unknown (counted once)
COND = "cond"               # flag: inside a cond branch, which may not run (counted as if it does)
RESHARDING = "(resharding)"  # the source key of nodes inserted at a shard_map's boundary


# --- traffic arithmetic ---------------------------------------------------------------------------

_TRAFFIC_FIELDS = tuple(f.name for f in dataclasses.fields(Traffic))


def _combine(a: Traffic, b: Traffic, op) -> Traffic:
    return Traffic(*(op(getattr(a, name), getattr(b, name)) for name in _TRAFFIC_FIELDS))


def _plus(a: Traffic, b: Traffic) -> Traffic:
    return _combine(a, b, lambda u, v: u + v)


def _fieldwise_max(a: Traffic, b: Traffic) -> Traffic:
    return _combine(a, b, max)


def _times(traffic: Traffic, k: int) -> Traffic:
    return Traffic(*(getattr(traffic, name) * k for name in _TRAFFIC_FIELDS))


def _traffic_dict(traffic: Traffic) -> dict:
    return {name: getattr(traffic, name) for name in _TRAFFIC_FIELDS}


def transfer_time(traffic: Traffic, alpha: float, beta: float) -> float:
    """One device's seconds for one execution: ``messages * alpha + bytes / beta`` for what it
    sends and for what it receives, whichever is longer (links are full duplex).

    >>> transfer_time(Traffic(2, 32, 1, 16), alpha=1.0, beta=16.0)   # sending: 2 + 32/16
    4.0
    """
    sending = traffic.sent_messages * alpha + traffic.sent_bytes / beta
    receiving = traffic.received_messages * alpha + traffic.received_bytes / beta
    return max(sending, receiving)


# --- entries and sums -----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class LedgerEntry:
    """One communication node of one shard_map, over all its executions.

    ``device_max`` is the busiest device's traffic (each field maximised over devices on its
    own) and ``total`` the sum over devices, both multiplied by ``trip_count``; ``time`` is the
    alpha-beta estimate of the slowest device, in seconds, also multiplied by ``trip_count``.
    ``context`` names the enclosing control flow, outermost first (``'scan[length=4]'``,
    ``'while'``, ``'cond branch 1'``); ``flags`` holds ``WHILE`` and ``COND`` where they apply.
    """
    index: int                  # the node's place in the ledger, program order
    shard_map: int              # the shard_map equation's index in the traced program
    kind: str                   # all_reduce, all_gather, reduce_scatter, ppermute, ...
    mesh_axes: tuple
    group_size: int
    num_groups: int
    trip_count: int
    device_max: Traffic
    total: Traffic
    time: float
    source: SourceInfo | None = None
    context: tuple = ()
    flags: tuple = ()

    @property
    def source_key(self) -> str:
        """``file:line`` where the user wrote the collective; ``RESHARDING`` for nodes the
        lowering inserted at the shard_map boundary."""
        return str(self.source) if self.source is not None else RESHARDING

    def to_dict(self) -> dict:
        """A JSON-able dict (lists for tuples); ``LedgerEntry.from_dict`` reads it back."""
        source = None if self.source is None else dataclasses.asdict(self.source)
        return dict(index=self.index, shard_map=self.shard_map, kind=self.kind,
                    mesh_axes=list(self.mesh_axes), group_size=self.group_size,
                    num_groups=self.num_groups, trip_count=self.trip_count,
                    device_max=_traffic_dict(self.device_max), total=_traffic_dict(self.total),
                    time=self.time, source=source, source_key=self.source_key,
                    context=list(self.context), flags=list(self.flags))

    @classmethod
    def from_dict(cls, data: dict) -> "LedgerEntry":
        source = data["source"]
        return cls(data["index"], data["shard_map"], data["kind"], tuple(data["mesh_axes"]),
                   data["group_size"], data["num_groups"], data["trip_count"],
                   Traffic(**data["device_max"]), Traffic(**data["total"]), data["time"],
                   None if source is None else SourceInfo(**source),
                   tuple(data["context"]), tuple(data["flags"]))


@dataclasses.dataclass(frozen=True)
class LedgerSum:
    """Entries summed: how many nodes, how many executions (trip counts summed), the sum of
    their busiest devices' traffic (an upper bound for any one device), the total traffic over
    devices, the summed time, and the union of their flags."""
    nodes: int = 0
    executions: int = 0
    device_max: Traffic = Traffic()
    total: Traffic = Traffic()
    time: float = 0.0
    flags: tuple = ()

    def add(self, entry: LedgerEntry) -> "LedgerSum":
        return LedgerSum(self.nodes + 1, self.executions + entry.trip_count,
                         _plus(self.device_max, entry.device_max), _plus(self.total, entry.total),
                         self.time + entry.time, _union(self.flags, entry.flags))

    def to_dict(self) -> dict:
        return dict(nodes=self.nodes, executions=self.executions,
                    device_max=_traffic_dict(self.device_max), total=_traffic_dict(self.total),
                    time=self.time, flags=list(self.flags))


def _union(a: tuple, b: tuple) -> tuple:
    return tuple(sorted(set(a) | set(b)))


def _sum_by(entries, key) -> dict:
    sums: dict = {}
    for entry in entries:
        k = key(entry)
        sums[k] = sums.get(k, LedgerSum()).add(entry)
    return sums


@dataclasses.dataclass
class Ledger:
    """The communication of a lowered module: its entries, and the per-axis latency (seconds
    per message) and bandwidth (bytes per second) its times were estimated with.

    ``notes`` says what the ledger could not count (a shard_map nested in control flow outside
    any shard_map is lowered only when it runs).
    """
    entries: list
    axis_names: tuple           # every mesh axis of the module, first appearance first
    latency: dict               # axis -> seconds per message
    bandwidth: dict             # axis -> bytes per second
    notes: list = dataclasses.field(default_factory=list)
    # what the partitioner inserted for operations on split values (its entries are among
    # ``entries``): operation, site, types before and after, bytes, reason, the fix
    inserted: tuple = ()

    def by_axis(self) -> dict:
        """Sums keyed by mesh axes: ``'x'``, ``'y'``; a node over several axes sums under its
        axes joined in mesh order (``'x,y'``), so that the sums add up to the total. Keys in
        mesh order, single axes first."""
        order = {name: k for k, name in enumerate(self.axis_names)}

        def mesh_order(axes):
            return sorted(axes, key=lambda a: (order.get(a, len(order)), a))

        sums = _sum_by(self.entries, lambda e: tuple(mesh_order(e.mesh_axes)))
        keys = sorted(sums, key=lambda axes: (len(axes), [order.get(a, len(order)) for a in axes]))
        return {",".join(axes): sums[axes] for axes in keys}

    def by_source(self) -> dict:
        """Sums keyed by the source line of the collective (``file:line``), in order of first
        appearance; nodes inserted at a shard_map boundary sum under ``RESHARDING``."""
        return _sum_by(self.entries, lambda e: e.source_key)

    def total(self) -> LedgerSum:
        """Every entry summed."""
        result = LedgerSum()
        for entry in self.entries:
            result = result.add(entry)
        return result

    @property
    def total_bytes_sent(self) -> int:
        """Bytes sent, summed over nodes, executions and devices."""
        return self.total().total.sent_bytes

    @property
    def total_time(self) -> float:
        """The estimated seconds of all communication: the nodes' times summed."""
        return self.total().time

    @property
    def exact(self) -> bool:
        """True when no count is a guess: no node in a while loop or a cond branch, and
        nothing left uncounted."""
        return not self.notes and not any(e.flags for e in self.entries)

    def to_dict(self) -> dict:
        """A JSON-able dict: settings, entries, per-axis and per-source sums and the total;
        ``json.loads(json.dumps(d)) == d`` and ``Ledger.from_dict(d) == ledger``."""
        return dict(axis_names=list(self.axis_names), latency=dict(self.latency),
                    bandwidth=dict(self.bandwidth),
                    entries=[e.to_dict() for e in self.entries],
                    by_axis={k: s.to_dict() for k, s in self.by_axis().items()},
                    by_source={k: s.to_dict() for k, s in self.by_source().items()},
                    total=self.total().to_dict(), exact=self.exact, notes=list(self.notes))

    @classmethod
    def from_dict(cls, data: dict) -> "Ledger":
        """The ledger ``to_dict`` wrote (the sums are recomputed from the entries)."""
        return cls([LedgerEntry.from_dict(e) for e in data["entries"]],
                   tuple(data["axis_names"]), dict(data["latency"]), dict(data["bandwidth"]),
                   list(data["notes"]))


# --- per-axis link costs --------------------------------------------------------------------------

def axis_costs(setting, axis_names: tuple, default: float, what: str) -> dict:
    """``{axis: value}`` for every axis from a setting: None (the default everywhere), a number
    (on every axis) or a dict naming some axes (the default on the others)."""
    if setting is None:
        return {name: default for name in axis_names}
    if not isinstance(setting, dict):
        value = _checked_cost(setting, what, "every axis")
        return {name: value for name in axis_names}
    unknown = [name for name in setting if name not in axis_names]
    if unknown:
        known = ", ".join(repr(n) for n in axis_names) or "none"
        raise ValueError(f"{what} names mesh axis {unknown[0]!r}, which no shard_map of this "
                         f"module has (its mesh axes: {known})")
    return {name: _checked_cost(setting.get(name, default), what, f"axis {name!r}")
            for name in axis_names}


def _checked_cost(value, what: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or math.isnan(value):
        raise TypeError(f"{what} for {where} must be a number, got {value!r}")
    if value < 0 or (what == "bandwidth" and value == 0):
        bound = "positive" if what == "bandwidth" else "zero or more"
        raise ValueError(f"{what} for {where} must be {bound}, got {value!r}")
    return float(value)


def _link(mesh_axes, latency: dict, bandwidth: dict) -> tuple:
    """(alpha, beta) of a node: the worst of its axes; a node over no axes costs nothing."""
    if not mesh_axes:
        return 0.0, math.inf
    return (max(latency[a] for a in mesh_axes), min(bandwidth[a] for a in mesh_axes))


# --- walking per-device programs ------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Site:
    """A communication node as one device meets it: how often, inside what."""
    eqn: object
    trips: int
    context: tuple
    flags: tuple


def communication_sites(program: Program, trips: int = 1, context: tuple = (),
                        flags: tuple = ()) -> list:
    """The communication nodes of a per-device program in program order, sub-programs included
    where their equation stands, each with its trip count, context and flags."""
    sites = []
    for eqn in program.eqns:
        if "device_groups" in eqn.params:
            sites.append(_Site(eqn, trips, context, flags))
        for sub, inner in _sub_programs(eqn, trips, context, flags):
            sites.extend(communication_sites(sub, *inner))
    return sites


def _sub_programs(eqn, trips: int, context: tuple, flags: tuple) -> list:
    """(program, (trips, context, flags)) for each program an equation carries."""
    prim = eqn.primitive
    if prim is prims.scan_p:
        length = eqn.params["length"]
        return [(eqn.params["jaxpr"],
                 (trips * length, context + (f"scan[length={length}]",), flags))]
    if prim is prims.while_p:
        inner = (trips, context + ("while",), _union(flags, (WHILE,)))
        return [(eqn.params["cond_jaxpr"], inner), (eqn.params["body_jaxpr"], inner)]
    if prim is prims.cond_p:
        return [(branch, (trips, context + (f"cond branch {k}",), _union(flags, (COND,))))
                for k, branch in enumerate(eqn.params["branches"])]
    return [(program, (trips, context + (f"{prim.name}.{key}",), flags))
            for key, program in _program_params(eqn)]


def _program_params(eqn) -> list:
    found = []
    for key, value in sorted(eqn.params.items()):
        if isinstance(value, Program):
            found.append((key, value))
        elif isinstance(value, tuple) and value and all(isinstance(v, Program) for v in value):
            found.extend((f"{key}[{k}]", v) for k, v in enumerate(value))
    return found


# --- building the ledger --------------------------------------------------------------------------

def build_ledger(module, *, latency=None, bandwidth=None) -> "Ledger":
    """The communication ledger of a ``LoweredModule``.

    Args:
      module: a lowered module (``shardc.jit(f).lower(*args).module``).
      latency: alpha, seconds per message: None (``DEFAULT_LATENCY`` on every axis), a number
        for every axis, or ``{axis: seconds}`` (the default on axes it leaves out).
      bandwidth: beta, bytes per second, given the same ways (``DEFAULT_BANDWIDTH``).

    Returns:
      a ``Ledger``: one ``LedgerEntry`` per communication node, shard_maps in equation order.
    """
    axis_names = _module_axes(module)
    latency = axis_costs(latency, axis_names, DEFAULT_LATENCY, "latency")
    bandwidth = axis_costs(bandwidth, axis_names, DEFAULT_BANDWIDTH, "bandwidth")
    entries: list = []
    for index in sorted(module.shard_maps):
        entries.extend(_shard_map_entries(index, module.shard_maps[index], len(entries),
                                          latency, bandwidth))
    return Ledger(entries, axis_names, latency, bandwidth, _unlowered_notes(module.program),
                  tuple(getattr(module, "inserted", ())))


def _module_axes(module) -> tuple:
    names: list = []
    for index in sorted(module.shard_maps):
        names.extend(n for n in module.shard_maps[index].mesh.axis_names if n not in names)
    return tuple(names)


def _shard_map_entries(index: int, lowered, first: int, latency: dict, bandwidth: dict) -> list:
    """The entries of one shard_map: the k-th communication node of every device together."""
    per_device = [(dp.device_id, communication_sites(dp.program))
                  for dp in lowered.device_programs]
    counts = {len(sites) for _, sites in per_device}
    if len(counts) != 1:
        raise ValueError(f"the devices of shard_map equation {index} run different numbers of "
                         f"communication nodes: {sorted(counts)}")
    return [_entry(first + k, index, [(device, sites[k]) for device, sites in per_device],
                   latency, bandwidth)
            for k in range(counts.pop())]


def _entry(position: int, index: int, device_sites: list, latency: dict,
           bandwidth: dict) -> LedgerEntry:
    """One node met by every device: ``device_sites`` pairs each device id with its site."""
    site = device_sites[0][1]
    eqn = site.eqn
    mesh_axes = tuple(eqn.params["mesh_axes"])
    _check_same_node(index, position, device_sites)
    alpha, beta = _link(mesh_axes, latency, bandwidth)
    device_max, total, slowest = Traffic(), Traffic(), 0.0
    for device_id, device_site in device_sites:
        traffic = device_traffic(device_site.eqn, device_id)
        device_max = _fieldwise_max(device_max, traffic)
        total = _plus(total, traffic)
        slowest = max(slowest, transfer_time(traffic, alpha, beta))
    groups = eqn.params["device_groups"]
    return LedgerEntry(position, index, eqn.primitive.name, mesh_axes, len(groups[0]),
                       len(groups), site.trips, _times(device_max, site.trips),
                       _times(total, site.trips), slowest * site.trips, eqn.source,
                       site.context, site.flags)


def _check_same_node(index: int, position: int, device_sites: list) -> None:
    first = device_sites[0][1]
    for device_id, site in device_sites[1:]:
        same = (site.eqn.primitive is first.eqn.primitive
                and tuple(site.eqn.params["mesh_axes"]) == tuple(first.eqn.params["mesh_axes"])
                and site.trips == first.trips)
        if not same:
            raise ValueError(
                f"communication node {position} of shard_map equation {index} differs between "
                f"devices: {device_sites[0][0]} runs {first.eqn.primitive}"
                f"{tuple(first.eqn.params['mesh_axes'])}, {device_id} runs "
                f"{site.eqn.primitive}{tuple(site.eqn.params['mesh_axes'])}")


def _unlowered_notes(program: Program, context: tuple = ()) -> list:
    """Notes for shard_maps nested in control flow of the traced program: the module does not
    hold their per-device programs, so their collectives are not in the ledger."""
    notes = []
    for k, eqn in enumerate(program.eqns):
        if context and eqn.primitive is prims.shard_map_p:
            where = " > ".join(context)
            notes.append(f"a shard_map inside {where} is lowered only when it runs: its "
                         "collectives are not counted")
            continue
        if eqn.primitive is prims.shard_map_p:
            continue
        for _, sub in _program_params(eqn):
            notes.extend(_unlowered_notes(sub, context + (f"{eqn.primitive.name} "
                                                          f"(equation {k})",)))
    return notes
