"""The scheduler: this process's devices run their programs and meet other processes' devices
at each communication node, completing the groups in one global order."""
from __future__ import annotations

import numpy as np

from ir import collectives as coll
from ir.core import Literal
from ir.interpreter import last_uses, locate
from runtime import collectives, reference
from runtime.mpi.agreement import settle, where_called
from runtime.mpi.arrays import Absent, local_positions
from runtime.mpi.direct import bind, has_rule
from runtime.mpi.exchanges import (across_ranks, communicator, contiguous, node_fingerprint,
                                   one_per_rank)
from runtime.mpi.faults import wait_all
from runtime.mpi.stacked import StackedBody, per_device, stacked_body
from runtime.mpi.world import world
from runtime.vectorized import prints


class _Round:
    """The state of one run of a mesh's programs on this rank."""

    def __init__(self, mesh):
        self.mesh = mesh
        self.position_of = {dev_id: p for p, dev_id in enumerate(mesh.flat_device_ids)}
        self.rank_of = [d.process_index for d in mesh.devices.flat]
        # the processes holding devices of the mesh, and each one's positions
        self.ranks = tuple(sorted(set(self.rank_of)))
        self.positions_of = {r: [p for p, q in enumerate(self.rank_of) if q == r]
                             for r in self.ranks}
        self.opening = None       # the run's agreement, while it is still open (``settle_then_wait``)
        self.absent = None        # the outputs of other ranks' positions (``_absent_results``)
        self.node = None          # the communication node being completed
        self.pending: list = []   # exchanges started and not yet waited for (``chain``)

    def doing(self) -> str:
        """What this process waits for, for an error's message: the node it completes."""
        eqn = self.node
        if eqn is None:
            return f"for the other processes{where_called()}"
        axes = eqn.params.get("mesh_axes")
        source = f" ({eqn.source})" if eqn.source else ""
        return f"in {eqn.primitive}[mesh_axes={axes}]{source}, in the program called{where_called()}"


def run_local_programs(mesh, programs: dict, inputs: dict, out_avals, native: bool = False) -> list:
    """Run this rank's devices' programs (``programs[p]``, ``inputs[p]`` by local position);
    other ranks run theirs. Returns each position's outputs, ``Absent`` for positions other
    ranks hold."""
    state = _Round(mesh)
    local = local_positions(mesh, world().rank)
    return _drive(state, local, programs, inputs, lambda waiting: _meet(state, waiting, native),
                  out_avals, rounds=True)


def _drive(state, local, programs, inputs, meet, out_avals, rounds: bool = False) -> list:
    """Run the programs of the ``local`` positions, completing each node their devices wait at
    with ``meet(waiting) -> {position: result}``. With ``rounds`` this process meets the
    others after every advance, even when its own devices have finished, until ``meet`` says
    every device of the mesh has (None)."""
    mesh = state.mesh
    ids = mesh.flat_device_ids
    runs = {p: reference._device_steps(programs[p], inputs[p], device=ids[p]) for p in local}
    results = list(_absent_results(state, out_avals))
    waiting: dict = {}
    prints: list = []
    printed = [0] * mesh.size
    resume = {p: None for p in local}
    try:
        while resume:
            for p, value in resume.items():
                _advance(runs, p, value, waiting, results, prints, printed, mesh)
            if not waiting and not rounds:
                break
            resume = meet(waiting)
            if resume is None:
                break
    finally:
        for _, _, text in sorted(prints):
            print(text)
    return results


def _absent_results(state, out_avals) -> list:
    """Each position's outputs as ``Absent`` for positions other ranks hold, None for this
    rank's (made once per state: Absent blocks are never changed)."""
    template = state.absent
    if template is None:
        me = world().rank
        template = state.absent = [
            None if d.process_index == me else [Absent(a.shape, a.dtype, d) for a in out_avals]
            for d in state.mesh.devices.flat]
    return template


class LocalPlan:
    """A lowered shard_map as this process runs it, made on its first run: the programs of its
    own devices only (specialised from the mesh-level program and verified here; each process
    builds its own), and for each communication node the device groups this process takes
    part in, in the one global order.

    When no communication node lies inside a loop or a branch, every device reaches the same
    nodes in the same order with operands of the same types: the ranks checked that they run
    the same module before running it (``MpiBackend.execute``), so the devices meet node after
    node with nothing more to check. Otherwise the processes meet in rounds (``_meet``)."""

    def __init__(self, lowered, rank: int, native: bool):
        mesh = lowered.mesh
        self.lowered = lowered
        self.mesh = mesh
        self.rank = rank
        self.native = native
        self.local = local_positions(mesh, rank)
        self.programs = _local_programs(lowered, self.local)
        sample = lowered.mesh_program
        if sample is None:
            sample = lowered.device_programs[0].program
        self.out_avals = [v.aval for v in sample.outvars]
        self.straight = not _communicates_under_control(sample)
        self.state = _Round(mesh)
        self.nodes: dict = {}
        # straight programs that print nothing run as flat step lists (``_steps``), without
        # a generator per device: prints need the generators' ordering
        self.steps = _steps(self.programs, self.local) if (
            self.straight and self.local and not prints(sample)) else None
        # this process's devices stacked (``stacked``), or why they run one at a time
        self.stacked = stacked_body(
            lowered, self.local, self._meet_straight, self.direct_call, self.state, native,
            self.straight, prints(sample), self.out_avals,
            _absent_results(self.state, self.out_avals)
        ) if self.local else None

    def run(self, values: list, column, opening=None) -> list:
        """Run this process's devices on the global ``values``; ``column(j)``: this process's
        blocks of input j, by position. Returns each output: its stack over this process's
        window (``LocalStack``, when its devices ran stacked), or its blocks by position.
        ``opening``: the run's agreement, still open (straight programs only: it settles
        before the first exchange's data is read)."""
        stacked = self.stacked
        state = self.state
        if type(stacked) is StackedBody:
            state.opening = opening
            try:
                outs = stacked.run(values, column)
            finally:
                settle(state)
            if outs is not None:
                return outs
            if stacked.window.chained:
                # the other processes walk this body's all-reduces through the processes,
                # which a run of one device at a time does not take part in: an error
                # here, where waiting for them would never end
                raise RuntimeError(
                    f"process {self.rank}: a replicated input of this shard_map holds "
                    "different values on this process's devices, so they would run one "
                    "at a time, which cannot take part in the all-reduce the processes "
                    "complete in turn; make the input's copies equal (a value that "
                    "varies is not replicated) or set SHARDC_MPI_REDUCTIONS=native")
            per_device("replicas_differ")
            opening = None             # settled above, before anything crossed processes
        elif stacked is not None:
            per_device(stacked)
        inputs = {p: [] for p in self.local}
        for j in range(len(values)):
            blocks = column(j)
            for p in self.local:
                inputs[p].append(blocks[p])
        results = self._run_devices(inputs, opening)
        return [[results[p][k] for p in range(self.mesh.size)]
                for k in range(len(self.out_avals))]

    def _run_devices(self, inputs, opening) -> list:
        """Each position's outputs, this process's devices run one at a time."""
        if not self.straight:
            assert opening is None, "only straight-line communication overlaps its agreement"
            if self.stacked is not None:
                per_device(self.stacked)
            return _drive(self.state, self.local, self.programs, inputs,
                          lambda waiting: _meet(self.state, waiting, self.native),
                          self.out_avals, rounds=True)
        state = self.state
        state.opening = opening
        try:
            if self.steps is not None:
                return self._run_steps(inputs)
            return _drive(state, self.local, self.programs, inputs, self._meet_straight,
                          self.out_avals)
        finally:
            settle(state)

    def _run_steps(self, inputs) -> list:
        """Run the flat steps: each device's equations up to the next communication node, then
        the node for all local devices together (``_meet_straight``)."""
        in_keys, literals, segments, out_keys = self.steps
        envs = {}
        for p in self.local:
            env = envs[p] = dict(literals[p])
            env.update(zip(in_keys[p], inputs[p]))
        for computes, node in segments:
            for p in self.local:
                env = envs[p]
                for fn, reads, outs, params, dead, eqn in computes[p]:
                    try:
                        values = fn(*[env[k] for k in reads], **params)
                    except Exception as err:
                        _locate(err, eqn, self.mesh, p)
                        raise
                    for key, value in zip(outs, values):
                        env[key] = value
                    for key in dead:
                        del env[key]
            if node is not None:
                waiting = {p: reference.Request(
                               node[p][3], collectives.node_operands(
                                   [envs[p][k] for k in node[p][0]]))
                           for p in self.local}
                for p, value in self._meet_straight(waiting).items():
                    read, out, dead, _ = node[p]
                    env = envs[p]
                    env[out] = value
                    for key in dead:
                        del env[key]
        results = list(_absent_results(self.state, self.out_avals))
        for p in self.local:
            env = envs[p]
            results[p] = [env[k] for k in out_keys[p]]
        return results

    def _groups(self, eqn) -> list:
        """(members, local members, ranks) of each group of ``eqn`` with a local member, in
        the one global order (sorted device groups)."""
        entry = self.nodes.get(id(eqn))
        if entry is None or entry[0] is not eqn:
            state = self.state
            groups = []
            for group in sorted(tuple(g) for g in eqn.params["device_groups"]):
                members = [state.position_of[d] for d in group]
                local = [m for m in members if state.rank_of[m] == self.rank]
                if local:
                    ranks = tuple(sorted({state.rank_of[m] for m in members}))
                    groups.append((members, local, ranks,
                                   self._direct(eqn, members, ranks)))
            entry = self.nodes[id(eqn)] = (eqn, groups)
        return entry[1]

    def _direct(self, eqn, members, ranks):
        """The bound call (``direct.bind``) when the group's node completes with MPI's own
        call (one member on each rank), else None."""
        if (not has_rule(eqn.primitive) or len(ranks) == 1
                or not one_per_rank(self.state, members, ranks)):
            return None
        return bind(eqn, communicator(self.state, ranks), ranks.index(self.rank), self.native)

    def direct_call(self, eqn):
        """The call completing ``eqn`` straight into MPI (``direct.bind``) where this process
        holds one device of it and its group has one device on each process; else None."""
        groups = self._groups(eqn)
        if len(groups) == 1 and len(groups[0][1]) == 1:
            return groups[0][3]
        return None

    def _meet_straight(self, waiting: dict) -> dict:
        """Every local device waits at the same node (straight-line communication)."""
        if len(waiting) != len(self.local):
            raise reference.DeadlockError(
                f"devices "
                f"{sorted(self.mesh.flat_device_ids[p] for p in self.local if p not in waiting)}"
                " finished while others wait at a communication node")
        resume = {}
        eqn = self.state.node = waiting[self.local[0]].eqn
        for members, local, ranks, call in self._groups(eqn):
            if call is not None:
                resume[local[0]] = call(contiguous(waiting[local[0]].value), self.state)
                continue
            if len(ranks) == 1:
                request = waiting[members[0]]
                outs = dict(zip(members, collectives.group_rules[request.eqn.primitive](
                    [waiting[m].value for m in members], **request.eqn.params)))
            else:
                outs = across_ranks(self.state, members, ranks, waiting, self.native)
            for m in local:
                resume[m] = outs[m]
        waiting.clear()
        return resume


def _steps(programs: dict, local: list) -> tuple:
    """Straight-line programs of the local devices as flat steps: ``(input keys, literals,
    segments, output keys)``, each by position. A segment is each device's equations up to a
    communication node (``(impl, keys read, keys written, params, keys freed, equation)``),
    then the node (by position: ``(keys read, key written, keys freed, equation)``; None at
    the end). Values are keyed by each device's own variables (programs read from text have
    variables of their own; specialisation makes some operands per-device literals), and
    literals get keys of their own.

    Not on the shared loop (``ir.interpreter``): it walks every local device's program in
    lockstep (their k-th equations together) and compiles steps rather than computing; the
    steps then free values as the loop would (``last_uses``)."""
    in_keys, literals, out_keys, dead = {}, {}, {}, {}

    def key_of(p, atom):
        if type(atom) is not Literal:
            return id(atom)
        key = ("literal", len(literals[p]))
        literals[p][key] = atom.value
        return key

    for p in local:
        literals[p] = {}
        in_keys[p] = [id(v) for v in programs[p].invars]
        out_keys[p] = [key_of(p, atom) for atom in programs[p].outvars]
        dead[p] = last_uses(programs[p])
    segments = []
    computes = {p: [] for p in local}
    for k, eqn in enumerate(programs[local[0]].eqns):
        if coll.grouped(eqn.primitive):
            node = {}
            for p in local:
                mine = programs[p].eqns[k]
                node[p] = ([key_of(p, atom) for atom in mine.invars], id(mine.outvars[0]),
                           dead[p][k], mine)
            segments.append((computes, node))
            computes = {p: [] for p in local}
            continue
        for p in local:
            mine = programs[p].eqns[k]
            computes[p].append((reference.impl_rules[mine.primitive],
                                [key_of(p, atom) for atom in mine.invars],
                                [id(v) for v in mine.outvars], mine.params, dead[p][k], mine))
    segments.append((computes, None))
    return in_keys, literals, segments, out_keys


def _locate(err: BaseException, eqn, mesh, p: int) -> None:
    """Attach the failing equation, its device and this process to ``err``, as the
    interpreter and the scheduler do for programs they walk."""
    device = mesh.devices.flat[p]
    locate(err, eqn, f" on device {device.id}")
    where = f", at {eqn.primitive}" + (f" ({eqn.source})" if eqn.source else "")
    err.add_note(f"on device {device.id} (mesh coordinates {mesh.coords(p)}) of process "
               f"{world().rank}{where}")


def _local_programs(lowered, local: list) -> dict:
    """Each local position's program: specialised for those positions only, unless the
    per-device programs exist already (built, or read from text)."""
    if lowered.built or lowered.mesh_program is None:
        programs = lowered.device_programs
        return {p: programs[p].program for p in local}
    from ir.specialise import device_programs
    return {dp.position: dp.program for dp in device_programs(lowered, local)}


def _communicates_under_control(program) -> bool:
    """Whether a communication node lies inside a loop, a branch or any other sub-program."""
    from ir.core import programs_in
    return any(_communicates(sub) for eqn in program.eqns for value in eqn.params.values()
               for sub in programs_in(value))


def _communicates(program) -> bool:
    from ir.core import programs_in
    return any(coll.grouped(eqn.primitive)
               or any(_communicates(sub) for value in eqn.params.values()
                      for sub in programs_in(value))
               for eqn in program.eqns)


def _advance(runs, p, value, waiting, results, prints, printed, mesh):
    try:
        reference._advance(runs, p, value, waiting, results, prints, printed)
    except Exception as err:
        device = mesh.devices.flat[p]
        eqn = _failing_equation(err)
        where = f", at {eqn.primitive}" + (f" ({eqn.source})" if eqn.source else "") if eqn else ""
        err.add_note(f"on device {device.id} (mesh coordinates {mesh.coords(p)}) of process "
                   f"{world().rank}{where}")
        raise


def _failing_equation(err):
    """The equation a device was running when ``err`` was raised: the innermost program
    frame's (a loop body's rather than the loop's)."""
    found, tb = None, err.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is reference._device_steps.__code__:
            found = tb.tb_frame.f_locals.get("eqn", found)
        tb = tb.tb_next
    return found


def _meet(state: _Round, waiting: dict, native: bool):
    """One round of devices that may take different paths (collectives under loops and
    branches): every process says where each of its devices waits (the node's fingerprint, its
    group's first device and size) or that it has finished, in one allgather; then each
    process completes, in the one global order of device groups, the groups whose members all
    wait at one node. A group whose members wait at different nodes waits for a later round
    (a member may first complete another group's collective); when no group anywhere can
    complete, every process raises DeadlockError. Returns the local devices' results, or None
    once every device of the mesh has finished."""
    where = _where_devices_wait(state, waiting)
    if not any(where.values()):
        return None
    ready = _complete_groups(where)
    if not ready:
        raise _deadlock(state, waiting, where)
    resume = {}
    me = world().rank
    groups = {_group_of(state, p, request) for p, request in waiting.items()
              if where[p] in ready}
    for group in sorted(groups):
        members = [state.position_of[d] for d in group]
        local = [m for m in members if state.rank_of[m] == me]
        ranks = tuple(sorted({state.rank_of[m] for m in members}))
        request = waiting[local[0]]
        if len(ranks) == 1:
            outs = dict(zip(members, collectives.group_rules[request.eqn.primitive](
                [waiting[m].value for m in members], **request.eqn.params)))
        else:
            state.node = request.eqn
            outs = across_ranks(state, members, ranks, waiting, native)
        for m in local:
            resume[m] = outs[m]
            del waiting[m]
    return resume


def _group_of(state: _Round, p: int, request) -> tuple:
    device = state.mesh.flat_device_ids[p]
    return tuple(next(g for g in request.eqn.params["device_groups"] if device in g))


def _where_devices_wait(state: _Round, waiting: dict) -> dict:
    """Every position of the mesh: None when its device has finished, else ``(fingerprint of
    its node, first device of its group, group size)``, from every process holding devices of
    the mesh (one allgather of three integers per device)."""
    me = world().rank
    # as many rows from every process (one allgather of equal blocks), though processes may
    # hold different numbers of the mesh's devices (a mesh of 5 of 6 devices on 2 processes)
    mine = np.zeros((max(len(positions) for positions in state.positions_of.values()), 3),
                    np.int64)
    for k, p in enumerate(state.positions_of[me]):
        request = waiting.get(p)
        if request is not None:
            group = _group_of(state, p, request)
            mine[k] = (node_fingerprint(request) | 1, group[0], len(group))
    comm = communicator(state, state.ranks)
    rows = np.empty((len(state.ranks),) + mine.shape, np.int64)
    wait_all([comm.Iallgather(mine, rows)], state.doing)
    where = {}
    for r, block in zip(state.ranks, rows):
        for p, (node, leader, size) in zip(state.positions_of[r], block.tolist()):
            where[p] = (node, leader, size) if node else None
    return where


def _complete_groups(where: dict) -> set:
    """The ``where`` entries of the groups all of whose members wait at one node."""
    counts: dict = {}
    for entry in where.values():
        if entry is not None:
            counts[entry] = counts.get(entry, 0) + 1
    return {entry for entry, count in counts.items() if count == entry[2]}


def _deadlock(state: _Round, waiting: dict, where: dict):
    ids = state.mesh.flat_device_ids
    finished = sorted(ids[p] for p, entry in where.items() if entry is None)
    stuck = "; ".join(
        f"device {ids[p]} at {request.eqn.primitive}[mesh_axes="
        f"{request.eqn.params.get('mesh_axes')}]"
        + (f" ({request.eqn.source})" if request.eqn.source else "")
        for p, request in sorted(waiting.items()))
    return reference.DeadlockError(
        f"devices wait at communication nodes their groups never complete: "
        f"{stuck or 'none of this process'}"
        + (f"; devices {finished} had already finished" if finished else "")
        + " (devices of one group reach different nodes: control flow that goes differently "
          "on different devices)")
