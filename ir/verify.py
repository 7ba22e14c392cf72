"""The verifier: a program is well formed if every variable is defined once before it is used,
every equation fits its primitive's signature (operands and parameters, ``ir.params``) and
agrees with its shape rule, and its sub-programs are well formed.

Lowered programs are held to more (``verify_lowered``): the device groups of every
communication node partition the mesh exactly as its ``mesh_axes`` say, with ids on the mesh;
reductions come from the known set; permutations are valid; types vary over mesh axes only; no
front-end collective is left; and the devices of each group reach the same communication
nodes in the same order (cross-device coherence), so the programs cannot deadlock on a group.
"""
from __future__ import annotations

import os

from ir import primitives as prims
from ir import unreduced
from ir.core import Literal, Program, Var, programs_in
from ir.params import signature_of
from ir.sharding_rules import typed_avals
from ir.sharding import axes_size, device_groups, pop_mesh, push_mesh


class VerifyError(ValueError):
    """A malformed program. ``detail`` says what is wrong; ``eqn`` (and ``param``, ``var``)
    what it is about; ``device`` the device whose program it is; ``line`` and ``column``
    where it is when the program came from text (the parser fills them in)."""

    def __init__(self, detail: str, *, eqn=None, param=None, var=None, device=None,
                 line=None, column=None):
        self.detail = detail
        self.eqn = eqn
        self.param = param
        self.var = var
        self.device = device
        self.line = line
        self.column = column
        super().__init__(self._message())

    def _message(self) -> str:
        where = f"line {self.line}, column {self.column}: " if self.line is not None else ""
        device = f"device {self.device}: " if self.device is not None else ""
        return where + device + self.detail

    def replace(self, **changes) -> "VerifyError":
        fields = dict(detail=self.detail, eqn=self.eqn, param=self.param, var=self.var,
                      device=self.device, line=self.line, column=self.column)
        fields.update(changes)
        return VerifyError(**fields)


# Programs built by the tracer are well formed by construction (every equation's types come
# from its shape rule as it is recorded), so verifying them again on every trace is a debug
# check, off by default and on in the test suite: SHARDC_CHECKS=1. Passes, the parser and the
# lowering verify what they build always.
CHECKS = os.environ.get("SHARDC_CHECKS", "") not in ("", "0")


def check_traced(prog: Program) -> None:
    """Verify a freshly traced program when SHARDC_CHECKS is on."""
    if CHECKS:
        verify(prog)


def verify(prog: Program, mesh=None) -> None:
    """Raise ``VerifyError`` naming the first equation that breaks a rule.

    ``mesh``: the enclosing shard_map's mesh, when ``prog`` is a body or a device's program;
    its collectives and types may name only its axes, with their sizes.

    Types are checked against the program's own meshes, not the mesh set where it is
    verified: a part traced under another (``explicit_axes``) was checked against that one
    as it was traced.

    Not on the shared loop (``ir.interpreter``): the loop assumes what this checks (every
    variable defined once, before it is used), and must report its breach as an error of
    the program."""
    push_mesh(None)
    try:
        _verify(prog, mesh)
    finally:
        pop_mesh(None)


def _verify(prog: Program, mesh) -> None:
    defined: set = set()

    def define(var, where, eqn=None):
        if not isinstance(var, Var):
            raise VerifyError(f"{where}: binder {var!r} is not a variable", eqn=eqn)
        if id(var) in defined:
            raise VerifyError(f"{where}: variable {var!r} is assigned twice", eqn=eqn, var=var)
        defined.add(id(var))
        if mesh is not None:
            _check_vma(var, mesh.axis_names, where, eqn)

    def use(atom, where, eqn=None):
        if isinstance(atom, Literal):
            return
        if not isinstance(atom, Var) or id(atom) not in defined:
            raise VerifyError(f"{where}: {atom!r} is used before it is defined", eqn=eqn)

    for v in prog.constvars:
        define(v, "constants")
    for v in prog.invars:
        define(v, "inputs")
    if len(prog.consts) not in (0, len(prog.constvars)):
        raise VerifyError("constants: values do not match constvars")
    for k, eqn in enumerate(prog.eqns):
        where = f"equation {k} ({_eqn_text(eqn)})"
        for atom in eqn.invars:
            use(atom, where, eqn)
        _check_signature(eqn, where)
        # a front-end collective may also name the axis of an enclosing vmap (checked where it
        # is traced); communication nodes name mesh axes only
        if mesh is not None and eqn.primitive.kind == "lowered":
            _check_axes_known(eqn, mesh.axis_names, where)
            _check_axis_size(eqn, mesh, where)
        _check_types(eqn, where)
        _verify_sub_programs(eqn, where, mesh)
        for var in eqn.outvars:
            define(var, where, eqn)
    for atom in prog.outvars:
        use(atom, "outputs")


def _verify_sub_programs(eqn, where, mesh) -> None:
    if eqn.primitive is prims.shard_map_p:
        mesh = eqn.params.get("mesh")
    for value in eqn.params.values():
        for sub in programs_in(value):
            try:
                verify(sub, mesh)
            except VerifyError as err:
                raise err.replace(detail=f"{where}: in its sub-program: {err.detail}") from None


def _check_signature(eqn, where) -> None:
    signature = signature_of(eqn.primitive)
    if signature is None:
        return          # the completeness test names primitives without one
    why = signature.check(eqn.primitive.name, len(eqn.invars), eqn.params)
    if why:
        unknown = why.startswith("unknown parameter")
        param = why.split("'")[1] if unknown or why.startswith("missing") else None
        raise VerifyError(f"{where}: {why}", eqn=eqn, param=param)


def _check_axes_known(eqn, mesh_axes, where) -> None:
    axes = eqn.params["mesh_axes"]
    if not isinstance(axes, tuple) or not all(isinstance(a, str) for a in axes):
        raise VerifyError(f"{where}: mesh_axes={axes!r} is not a tuple of axis names",
                          eqn=eqn, param="mesh_axes")
    if len(set(axes)) != len(axes):
        raise VerifyError(f"{where}: mesh_axes={axes!r} names an axis twice", eqn=eqn,
                          param="mesh_axes")
    for axis in axes:
        if axis not in mesh_axes:
            raise VerifyError(f"{where}: mesh_axes names {axis!r}, which is not an axis of the "
                              f"mesh {tuple(mesh_axes)!r}", eqn=eqn, param="mesh_axes")


def _check_vma(var, mesh_axes, where, eqn) -> None:
    unknown = sorted(var.aval.vma - set(mesh_axes))
    if unknown:
        raise VerifyError(f"{where}: the type {var.aval.str_short()} varies over {unknown[0]!r}, "
                          f"which is not an axis of the mesh {tuple(mesh_axes)!r}", eqn=eqn,
                          var=var)


def _check_types(eqn, where):
    try:
        with unreduced.unchecked():     # (shapes and dtypes are compared, as below)
            expected = typed_avals(eqn.primitive, [a.aval for a in eqn.invars], eqn.params)
    except prims.MissingRuleError:
        raise VerifyError(f"{where}: primitive '{eqn.primitive}' has no shape rule",
                          eqn=eqn) from None
    except Exception as err:  # a shape rule rejecting its operands or parameters
        raise VerifyError(f"{where}: {err}", eqn=eqn) from err
    if len(expected) != len(eqn.outvars):
        raise VerifyError(f"{where}: expected {len(expected)} outputs, got {len(eqn.outvars)}",
                          eqn=eqn)
    for want, var in zip(expected, eqn.outvars):
        got = var.aval
        if (want.shape, want.dtype) != (got.shape, got.dtype):
            raise VerifyError(f"{where}: output has type {got.str_short()} but its shape rule "
                              f"gives {want.str_short()}", eqn=eqn, var=var)


def _eqn_text(eqn) -> str:
    return f"{eqn.primitive.name}"


# --- lowered programs ---------------------------------------------------------------------------

def verify_lowered(lowered) -> None:
    """Verify the per-device programs of one lowered shard_map (``ir.module.LoweredShardMap``):
    each one well formed, then all of them coherent. Errors name the device."""
    mesh = lowered.mesh
    for dp in lowered.device_programs:
        try:
            verify_device_program(dp, mesh)
        except VerifyError as err:
            raise (err if err.device is not None else err.replace(device=dp.device_id)) from None
    check_coherence(mesh, lowered.device_programs)


def verify_mesh_program(program: Program, mesh, full: bool = True) -> None:
    """A mesh-level program on ``mesh``: well formed, no front-end collective left, each
    communication node valid and without device groups (stage 2 adds them). ``full=False``
    checks the communication nodes only (their axes, sizes and parameters), for a program
    the lowering built from a typed body."""
    if full:
        verify(program, mesh)
    _check_nodes(program, mesh, per_device=False)


def verify_device_program(dp, mesh) -> None:
    """One device's program on ``mesh``: well formed, sitting where it says, and each of its
    communication nodes (sub-programs included) valid on the mesh, with its device groups."""
    if tuple(dp.mesh_axes) != tuple(mesh.axis_names):
        raise VerifyError(f"the program names mesh axes {tuple(dp.mesh_axes)!r}; the mesh has "
                          f"{tuple(mesh.axis_names)!r}", device=dp.device_id)
    if not 0 <= dp.position < mesh.size or mesh.flat_device_ids[dp.position] != dp.device_id:
        raise VerifyError(f"device {dp.device_id} is not at mesh position {dp.position} of "
                          f"{mesh}", device=dp.device_id)
    verify(dp.program, mesh)
    _check_nodes(dp.program, mesh, per_device=True)


def _check_nodes(program: Program, mesh, per_device: bool) -> None:
    for k, eqn in enumerate(program.eqns):
        prim = eqn.primitive
        if prim.kind not in ("collective", "lowered") and not eqn.params:
            continue        # an ordinary operation: nothing here to check
        where = f"equation {k} ({_eqn_text(eqn)})"
        if prim.kind == "collective":
            raise VerifyError(f"{where}: the front-end collective {prim} is left in a "
                              "lowered program (lowering replaces it)", eqn=eqn)
        record = prim.collective
        if per_device and record is not None and not record.grouped:
            raise VerifyError(f"{where}: {prim} is left in a per-device program (it is "
                              "the device's constant there)", eqn=eqn)
        if record is not None and record.grouped:
            _check_node(eqn, record, mesh, where, per_device)
        for value in eqn.params.values():
            for sub in programs_in(value):
                _check_nodes(sub, mesh, per_device)


def _check_node(eqn, record, mesh, where, per_device: bool) -> None:
    """A communication node: its axes and size on the mesh, its device groups (per-device
    programs only) and its record's own check of its parameters."""
    _check_axes_known(eqn, mesh.axis_names, where)
    _check_axis_size(eqn, mesh, where)
    if per_device:
        _check_groups(eqn, mesh, where)
    elif "device_groups" in eqn.params:
        raise VerifyError(f"{where}: device_groups in a mesh-level program (only "
                          "per-device programs carry them)", eqn=eqn, param="device_groups")
    if record.check is not None:
        why = record.check(eqn, axes_size(mesh.shape, eqn.params["mesh_axes"]))
        if why:
            param = next((p for p in ("reduction", "perm", "root") if p in eqn.params), None)
            raise VerifyError(f"{where}: {why}", eqn=eqn, param=param)


def _check_groups(eqn, mesh, where) -> None:
    """``device_groups`` are exactly the groups ``mesh_axes`` make on the mesh."""
    if "device_groups" not in eqn.params:
        raise VerifyError(f"{where}: a communication node without device_groups", eqn=eqn,
                          param="device_groups")
    groups = eqn.params["device_groups"]
    if groups is device_groups(mesh, eqn.params["mesh_axes"]):
        return      # the very groups the mesh makes (specialisation attaches them): valid
    ids = set(mesh.flat_device_ids)
    if not isinstance(groups, tuple) or not all(
            isinstance(g, tuple) and all(type(d) is int for d in g) for g in groups):
        raise VerifyError(f"{where}: device_groups={groups!r} is not a tuple of tuples of "
                          "device ids", eqn=eqn, param="device_groups")
    for group in groups:
        for device in group:
            if device not in ids:
                raise VerifyError(f"{where}: device_groups names device {device}, which is not "
                                  f"on the mesh {mesh} (ids {min(ids)} to {max(ids)})",
                                  eqn=eqn, param="device_groups")
    expected = device_groups(mesh, eqn.params["mesh_axes"])
    if groups != expected:
        raise VerifyError(f"{where}: device_groups={groups!r} do not match "
                          f"mesh_axes={eqn.params['mesh_axes']!r} on {mesh}, whose groups "
                          f"are {expected!r}", eqn=eqn, param="device_groups")


def _check_axis_size(eqn, mesh, where) -> None:
    size = axes_size(mesh.shape, eqn.params["mesh_axes"])
    given = eqn.params.get("axis_size", size)
    if given != size:
        raise VerifyError(f"{where}: axis_size={given!r}, but mesh_axes="
                          f"{eqn.params['mesh_axes']!r} have {size} devices", eqn=eqn,
                          param="axis_size")


# --- cross-device coherence ---------------------------------------------------------------------

def check_coherence(mesh, device_programs) -> None:
    """The devices of each group reach the same communication nodes, in the same order: for
    every group, every member's sequence of nodes over that group is the same (primitive,
    parameters, operand type). Nodes in loops and branches count in program order.

    Sameness is transitive, so each group's members are held against the first device that
    reaches the group, once: linear in the devices, not quadratic (a group of every device
    of a 4096-device mesh). The first mismatch found is the one a comparison of every pair,
    in device order, would find first. Groups are keyed by a small number, found once per
    ``device_groups`` tuple the programs share (hashing a group of every device, or finding
    a device in it, per device would be quadratic)."""
    groups = _GroupIndex()
    sequences = {dp.device_id: _nodes_by_group(dp, groups) for dp in device_programs}
    checked: set = set()
    for dp in device_programs:
        for key, nodes in sequences[dp.device_id].items():
            if key in checked:
                continue
            checked.add(key)
            group = groups.members[key]
            keys = [_node_key(eqn) for eqn in nodes]
            for member in group:
                if member in sequences:     # given a subset (one process's devices): its own
                    _compare_nodes(dp.device_id, nodes, member,
                                   sequences[member].get(key, []), group, keys)


class _GroupIndex:
    """Each distinct group (by its members) as a small number, and each device's group in a
    ``device_groups`` tuple, each worked out once per tuple object."""

    def __init__(self):
        self.numbers: dict = {}        # group members -> number
        self.members: list = []        # number -> group members
        self._of: dict = {}            # id(device_groups) -> (device_groups, {device: number})

    def group_of(self, device_groups, device) -> int:
        entry = self._of.get(id(device_groups))
        if entry is None or entry[0] is not device_groups:
            table = {}
            for group in device_groups:
                number = self.numbers.get(group)
                if number is None:
                    number = self.numbers[group] = len(self.members)
                    self.members.append(group)
                table.update(dict.fromkeys(group, number))
            entry = self._of[id(device_groups)] = (device_groups, table)
        return entry[1][device]


def _nodes_by_group(dp, groups: _GroupIndex) -> dict:
    by_group: dict = {}
    for eqn in _communication(dp.program):
        key = groups.group_of(eqn.params["device_groups"], dp.device_id)
        by_group.setdefault(key, []).append(eqn)
    return by_group


def _communication(program: Program):
    for eqn in program.eqns:
        record = eqn.primitive.collective
        if record is not None and record.level == "node" and record.grouped:
            yield eqn
        for value in eqn.params.values():
            for sub in programs_in(value):
                yield from _communication(sub)


def _node_key(eqn) -> tuple:
    operand = eqn.invars[0].aval
    return (eqn.primitive, tuple(sorted(eqn.params.items())), operand.shape, operand.dtype)


def _compare_nodes(device, nodes, member, others, group, keys) -> None:
    """``keys``: the ``_node_key`` of each of ``nodes`` (device's), worked out once."""
    if member == device:
        return
    for k, (mine, theirs) in enumerate(zip(nodes, others)):
        if keys[k] != _node_key(theirs):
            raise VerifyError(
                f"devices {device} and {member} of group {group} reach different communication "
                f"nodes at their node {k} over it: {_node_text(mine)} on device {device}, "
                f"{_node_text(theirs)} on device {member}", eqn=theirs, device=member)
    if len(nodes) != len(others):
        longer, shorter = (device, member) if len(nodes) > len(others) else (member, device)
        extra = (nodes if longer == device else others)[min(len(nodes), len(others))]
        raise VerifyError(
            f"device {longer} reaches {_node_text(extra)} over group {group}, which device "
            f"{shorter} never reaches", eqn=extra, device=longer)


def _node_text(eqn) -> str:
    operand = eqn.invars[0].aval
    params = " ".join(f"{k}={v!r}" for k, v in sorted(eqn.params.items())
                      if k != "device_groups")
    return f"{eqn.primitive}[{params}] of {operand.str_short(None)}"
