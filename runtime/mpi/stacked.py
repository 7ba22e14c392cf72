"""A process's devices run stacked: the mesh-level program over the blocks of this process's
devices, as the fast backend runs it over every device's (``runtime.vectorized``).

The devices a process holds form a box of the mesh (its *window*: devices are split over the
processes in id order, so a mesh made in id order gives each process a run of rows)::

    8 devices, 2 processes, a (4, 2) mesh ('x', 'y'):
        process 0: x in 0..1, y in 0..1   window (2, 2) at (0, 0)
        process 1: x in 2..3, y in 0..1   window (2, 2) at (2, 0)

Inside its window a process computes each equation once for all its devices (one numpy call
per equation). A communication node over axes the window holds whole (``y`` above) is a group
within the process: the fast backend's stacked rule completes it. One over axes the window
cuts (``x``) spans processes: its blocks go to the scheduler's exchanges, as the per-device
path's do (``schedule.LocalPlan``), and come back stacked. Where a device's coordinate enters
(``axis_index``), it is the window's origin plus its place in the window.

Every kernel gives each device the bits the reference backend gives it, however many devices
are stacked, so a program gives the same bits on 1, 2 or 4 processes: a contraction is one
matmul per device (never the devices' rows merged into one taller matmul, which BLAS may block
differently), and exchanges reduce in the reference's order.

Programs this path does not run stacked, for the reasons of ``PER_DEVICE_PATHS`` only, run
one device at a time (``schedule``), counted in ``paths``; SHARDC_EXPLAIN=1 reports each.
"""
from __future__ import annotations

import math
import sys

import numpy as np

from ir import collectives as coll
from ir import primitives as prims
from ir.core import Eqn
from ir.interpreter import locate
from ir.sharding import device_groups, spec_axes
from runtime import collectives
from runtime.mpi.agreement import abandon
from runtime.mpi.arrays import MpiArray
from runtime.mpi.chain import chain_of, chained_all_reduce, group_size
from runtime.mpi.exchanges import SCATTERED_REDUCTION_BYTES, natively_reducible_type
from runtime.mpi.shared import shareable
from runtime.mpi.world import world
from runtime.array import Array, canonical_array, detached
from runtime.reference import Request
from runtime.vectorized import (EXPLAIN, BodyPlan, NotStackable, bitwise_same, position_index,
                                stack_blocks)
from runtime.vectorized_rules import (Kernel, Members, broadcast_lead, dot_general_kernel,
                                      process_index_kernel)


# Why a process runs a shard_map's devices one at a time rather than stacked: the only
# reasons. Each run is counted in ``paths``.
PER_DEVICE_PATHS = {
    "not_a_box": "this process's devices are not a box of the mesh (a mesh whose devices are "
                 "not in id order)",
    "device_programs_only": "the program was read as per-device programs, with no "
                            "mesh-level program to stack",
    "communicates_under_control": "a collective lies inside a loop or a branch, where devices "
                                  "may meet in rounds",
    "prints": "the body prints or calls back to the host, once per device in device order",
    "divergent_control": "a loop or branch may go differently on different devices",
    "replicas_differ": "an input's replicas differ between devices",
}
paths = {"stacked": 0, **{reason: 0 for reason in PER_DEVICE_PATHS}}

# an all-reduce with one member per process, smaller than this, gathers every block at once
# rather than walking the processes
GATHERED_REDUCTION_BYTES = 1 << 16


class Window:
    """The box of the mesh this process holds: ``origin`` and size per mesh axis. Stands for
    the mesh where a stacked body is planned (``BodyPlan``): its ``axis_sizes`` are the
    window's, and ``own_kernel`` gives the kernels that differ from the fast backend's."""

    def __init__(self, mesh, origin: tuple, sizes: tuple, exchange, direct_call, state,
                 native: bool):
        self.mesh = mesh
        self.origin = origin
        self.axis_sizes = sizes
        self.axis_names = mesh.axis_names
        self.ndim = mesh.ndim
        self.exchange = exchange        # completes a node's groups for every local device
        # a node's call straight into MPI for a process holding one device of its group
        self.direct_call = direct_call
        self.state = state              # the scheduler's run state (agreement, errors)
        self.native = native            # reductions by MPI's own (not bit-exact) Allreduce
        self.chained = False            # whether some all-reduce walks the processes
        self.local = self.positions()

    def whole(self, axes) -> bool:
        """Whether the window holds every device along ``axes``."""
        full = self.mesh.axis_sizes
        return all(self.axis_sizes[i] == full[i]
                   for i in (self.axis_names.index(a) for a in axes))

    def own_kernel(self, eqn, types):
        prim = eqn.primitive
        if prim is prims.dot_general_p:
            return dot_general_kernel(types, merge_rows=False)
        if prim is coll.process_index_node:
            return process_index_kernel(types, self.origin, self.mesh.axis_sizes)
        record = prim.collective
        if record is not None and record.grouped and not self.whole(eqn.params["mesh_axes"]):
            if prim is coll.all_reduce_node:
                kernel = self._chained(eqn, types)
                if kernel is not None:
                    return kernel
            return self._exchanged(eqn, types)
        return None

    def _node(self, eqn) -> Eqn:
        """The equation as a communication node of the mesh (its device groups named)."""
        return Eqn(eqn.primitive, eqn.invars, eqn.outvars,
                   dict(eqn.params, device_groups=device_groups(self.mesh,
                                                                eqn.params["mesh_axes"])),
                   eqn.source)

    def _chained(self, eqn, types):
        """An all-reduce whose rank order walks through the processes (``chain``): each adds
        its members onto the partial it receives; the result is one block per group. None
        where the order is no such walk, or MPI reduces natively."""
        reduction = eqn.params["reduction"]
        (lead,), (aval,) = types.in_leads, types.in_avals
        if self.native and natively_reducible_type(aval.dtype, reduction):
            return None
        dims = types.dims_of(eqn.params["mesh_axes"])
        state, mesh = self.state, self.mesh
        boxes = {r: window_of(mesh, state.positions_of[r]) for r in state.ranks}
        found = chain_of(boxes, mesh.axis_sizes, dims, world().rank)
        if found is None:
            return None
        single = all(boxes[r][1][d] == 1 for r in found.order for d in dims)
        nbytes = aval.size * aval.dtype.itemsize
        if single and (nbytes < GATHERED_REDUCTION_BYTES or (
                len(found.order) > 2 and nbytes >= SCATTERED_REDUCTION_BYTES)):
            # one member per process: a small one goes to every process in one Allgather,
            # where a walk would take one hop after another; a large one on three processes
            # or more, each reduces a chunk of every block at once (``exchanges``). Decided
            # from every process's box, so that all the chain's processes decide alike
            return None
        self.chained = True
        how = Members(lead, dims, self.axis_sizes, aval.ndim)
        out_shape = tuple(1 if d in dims else n for d, n in enumerate(lead)) + aval.shape
        size, node = group_size(mesh.axis_sizes, dims), self._node(eqn)
        shared = shareable(found.ranks, aval.shape, aval.dtype, reduction)

        def all_reduce_chained(x):
            members = how(x)
            return chained_all_reduce(state, found, [members[i] for i in how.indices],
                                      reduction, size, node, out_shape, shared)
        return Kernel(all_reduce_chained, [out_shape[:len(lead)]], deferred=True)

    def _exchanged(self, eqn, types) -> Kernel:
        """A node whose groups span processes: each local device's block goes to the
        scheduler's exchange (as the per-device path's does); the results come back stacked."""
        node = self._node(eqn)
        window = self.axis_sizes
        positions = self.positions()
        out_avals = types.out_avals
        exchange = self.exchange
        if len(positions) == 1 and len(out_avals) == 1 and len(eqn.invars) == 1:
            return self._alone(node, positions[0], types)

        def exchanged(*xs):
            # one copy of the stack where a member's block is not contiguous (a transposed
            # result): the exchanges read each block as flat bytes
            xs = [np.ascontiguousarray(broadcast_lead(x, window)) for x in xs]
            waiting = {}
            for p, at in positions:
                waiting[p] = Request(node, collectives.node_operands([x[at] for x in xs]))
            results = exchange(waiting)
            if len(positions) == 1:          # one device here: its result is the stack
                (p, _), = positions
                return [np.asarray(results[p], out_avals[0].dtype).reshape(
                    window + out_avals[0].shape)] + [
                    np.empty(window + a.shape, a.dtype) for a in out_avals[1:]]
            outs = [np.empty(window + a.shape, a.dtype) for a in out_avals]
            for p, at in positions:
                outs[0][at] = results[p]
            return outs
        return Kernel(exchanged, [window] * len(out_avals), multiple=True)

    def _alone(self, node, position, types) -> Kernel:
        """A node of which this process holds one device: its block goes straight to MPI's
        own call where the group has one device on each process (``direct``), else to the
        scheduler's exchange. Which, is found at the first run (it may make the group's
        communicator, which the processes do at the node, in order)."""
        p, at = position
        window, (aval,) = self.axis_sizes, types.out_avals
        shape = window + aval.shape
        state, exchange = self.state, self.exchange
        found = []

        def alone(x):
            block = np.ascontiguousarray(broadcast_lead(x, window)[at])
            if not found:
                found.append(self.direct_call(node))
            call = found[0]
            if call is None:
                result = exchange({p: Request(node, block)})[p]
            else:
                state.node = node
                result = call(block, state)
            return [np.asarray(result, aval.dtype).reshape(shape)]
        return Kernel(alone, [window], multiple=True)

    def positions(self) -> list:
        """``(mesh position, index in the window)`` of each local device, in mesh order."""
        mesh, origin = self.mesh, self.origin
        return [(mesh.position(tuple(o + i for o, i in zip(origin, at))), at)
                for at in np.ndindex(*self.axis_sizes)]


def window_of(mesh, local: list):
    """``(origin, sizes)`` of the box the ``local`` positions make, or None when they make
    none."""
    if not local:
        return None
    coords = np.array([mesh.coords(p) for p in local])
    origin = tuple(int(c) for c in coords.min(axis=0))
    sizes = tuple(int(c) + 1 - o for c, o in zip(coords.max(axis=0), origin))
    if math.prod(sizes) != len(local):
        return None
    return origin, sizes


class LocalStack:
    """A global array's blocks on this process, stacked over its window (``data``, of shape
    ``lead + block``) and laid out by ``spec``, as a stacked run leaves its outputs and takes
    its inputs: held by the array (``_local``: an array is never changed), so that the next
    stacked run over the same window takes it as it is. An output's per-position list
    (``buffers()``: views, ``Absent`` for the other processes' devices) is made only if asked
    for."""
    __slots__ = ("data", "lead", "window", "spec", "absent")

    def __init__(self, data, lead: tuple, window: Window, spec, absent):
        self.data = data
        self.lead = lead
        self.window = window
        self.spec = spec
        self.absent = absent        # by position: ``Absent`` for other processes' devices

    def buffers(self) -> list:
        column = list(self.absent)
        data = self.data
        for (p, _), i in zip(self.window.local, position_index(self.window.axis_sizes,
                                                               self.lead)):
            column[p] = data[i]
        return column

    def over(self, window: Window, spec, lead: tuple):
        """The data as an input of a body over ``window`` that wants it laid out by ``spec``
        with ``lead`` (a broadcast view where this one is a single block), or None when it
        cannot stand for that."""
        mine = self.window
        if mine is not window and (mine.mesh is not window.mesh or mine.origin != window.origin
                                   or mine.axis_sizes != window.axis_sizes):
            return None
        if self.spec is not spec and self.spec != spec:
            return None
        if self.lead == lead:
            return self.data
        if all(a == b or a == 1 for a, b in zip(self.lead, lead)):
            return np.broadcast_to(self.data, lead + self.data.shape[len(lead):])
        return None          # varies where the body wants one block: copies to check


class StackedBody:
    """A straight shard_map body planned over this process's window; ``run`` takes the global
    inputs and gives each output's ``LocalStack``."""

    def __init__(self, lowered, window: Window, out_avals: list, absent: list):
        self.lowered = lowered
        self.window = window
        self.body = lowered.mesh_program
        self.positions = window.local
        self.order = [p for p, _ in self.positions]
        # an input varies over the axes its spec names, and is one block along the others
        self.in_leads = tuple(
            tuple(n if a in named else 1 for a, n in zip(window.axis_names, window.axis_sizes))
            for named in map(spec_axes, lowered.in_shardings))
        self.plan = BodyPlan(self.body, window, self.in_leads)     # NotStackable: the caller's
        # by output, the blocks of other processes' positions (``LocalStack.absent``)
        self.absent = [[None if row is None else row[k] for row in absent]
                       for k in range(len(out_avals))]
        # what each input and output is laid out by, zipped once (``run`` reads them per call)
        self.in_layouts = list(zip(self.in_leads, lowered.in_shardings))
        self.out_layouts = list(zip(self.plan.out_leads, lowered.out_specs, self.absent))

    def run(self, values: list, column):
        """Each output's ``LocalStack``, from the global ``values`` (``column(j)``: this
        process's blocks of input j by position, for an input holding no stack over this
        window already). None (nothing run) when an input's replicas differ between local
        devices: only the per-device path keeps them apart."""
        window = self.window
        stacked = []
        for j, (lead, spec) in enumerate(self.in_layouts):
            value = values[j]
            array = type(value) is MpiArray or isinstance(value, Array)
            held = value._local if array else None
            data = None if held is None else held.over(window, spec, lead)
            if data is None and held is None and not any(spec) and not array:
                # a host value every device takes whole (a cotangent's seed, a constant):
                # one block for all, with nothing to split or hold against its copies
                whole = detached(canonical_array(value), value)
                data = whole.reshape(lead + whole.shape)
            if data is None:
                blocks = column(j)
                blocks = [blocks[p] for p in self.order]
                if not _replicas_agree(blocks, window, lead):
                    return None
                data = stack_blocks(blocks, window, lead)
                if array and held is None:
                    # stacked and checked once: an array is never changed (one that holds a
                    # stack already keeps it: a stacked run's output reads its blocks there)
                    value._local = LocalStack(data, lead, window, spec, None)
            stacked.append(data)
        plan = self.plan
        try:
            if plan.quiet:
                with np.errstate(all="ignore"):
                    outs = plan.run(*stacked)
            else:
                outs = plan.run(*stacked)
        except Exception as err:
            self._locate(err)
            pending = window.state.pending
            if pending:
                abandon([r for p in pending for r in p.requests], f"{type(err).__name__} "
                         f"on process {world().rank} while all-reduces were under way")
                pending.clear()
            raise
        paths["stacked"] += 1
        return [LocalStack(data, lead, window, spec, absent)
                for data, (lead, spec, absent) in zip(outs, self.out_layouts)]

    def _locate(self, err: BaseException) -> None:
        """Name the failing equation, this process's devices and the process on ``err``."""
        step = self.plan.failing_step(err)
        mesh = self.window.mesh
        ids = [mesh.flat_device_ids[p] for p, _ in self.positions]
        first, last = self.positions[0][0], self.positions[-1][0]
        devices = (f"devices {ids} (mesh coordinates {mesh.coords(first)} to "
                   f"{mesh.coords(last)}, stacked)")
        if step is not None:
            locate(err, step.eqn, f" on {devices}")
        at = "" if step is None else f", at {step.eqn.primitive}" + (
            f" ({step.eqn.source})" if step.eqn.source else "")
        err.add_note(f"on {devices} of process {world().rank}{at}")


def _replicas_agree(blocks: list, window: Window, lead: tuple) -> bool:
    """Whether the blocks a stacked input keeps one of (along the axes ``lead`` is 1) are
    equal: the same buffer, as blocks of one value are, or the same bytes."""
    first: dict = {}
    return all(bitwise_same(first.setdefault(i, block), block)
               for block, i in zip(blocks, position_index(window.axis_sizes, lead)))


def stacked_body(lowered, local: list, exchange, direct_call, state, native: bool,
                 straight: bool, prints: bool, out_avals: list, absent: list):
    """The stacked body of a lowered shard_map for this process, or the reason it runs one
    device at a time (a key of ``PER_DEVICE_PATHS``)."""
    if prints:
        return "prints"
    if not straight:
        return "communicates_under_control"
    if lowered.mesh_program is None:
        return "device_programs_only"
    mesh = lowered.mesh
    box = window_of(mesh, local)
    if box is None:
        return "not_a_box"
    try:
        return StackedBody(lowered, Window(mesh, box[0], box[1], exchange, direct_call, state,
                                                  native),
                           out_avals, absent)
    except NotStackable as why:
        return why.reason if why.reason in PER_DEVICE_PATHS else "divergent_control"


def per_device(reason: str) -> None:
    """Count (and under SHARDC_EXPLAIN=1 report) a run of one device at a time."""
    paths[reason] += 1
    if EXPLAIN:
        print(f"shardc: a shard_map runs one device at a time on this process: "
              f"{PER_DEVICE_PATHS[reason]}", file=sys.stderr)
