"""Text form of programs, which reads like a jaxpr.

Names are assigned here, in definition order (an equation's outputs before its body):
``a`` .. ``z``, ``ba``, ``bb``, ... Parameters print sorted by name; a parameter holding a
program prints on its own lines.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ir.comm import device_traffic
from ir.core import (DeviceProgram, Literal, Program, Var, format_literal, holds_programs,
                     programs_in)
from ir.sharding import Mesh


def var_name(k: int) -> str:
    """The k-th name: a..z, ba..bz, ca.. (base 26, like jaxprs)."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    name = letters[k % 26]
    k //= 26
    while k:
        name = letters[k % 26] + name
        k //= 26
    return name


class _Names:
    def __init__(self):
        self.names: dict = {}
        self.count = 0

    def define(self, var: Var) -> str:
        # A counter, not len(names): a variable bound in two sub-programs gets two names.
        name = var_name(self.count)
        self.count += 1
        self.names[id(var)] = name
        return name

    def use(self, atom) -> str:
        if isinstance(atom, Literal):
            return format_literal(atom)
        return self.names.get(id(atom), "?")


def format_param(value) -> str:
    """How a parameter value prints; the parser reads these forms back."""
    if isinstance(value, np.dtype):
        return value.name
    if isinstance(value, type) and issubclass(value, np.generic):
        return np.dtype(value).name
    if hasattr(value, "short_repr"):
        return value.short_repr()
    if isinstance(value, tuple):
        inner = ", ".join(format_param(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, Mesh):
        return str(value)         # the short form, as JAX prints a mesh in a program
    return repr(value)


# parameters a program's text leaves out, as JAX's does: a check's error structure (the
# exception types and messages behind its operands)
_UNPRINTED = {("check", "err_tree")}


class _Printer:
    def __init__(self, with_source: bool, device_id: int | None = None):
        self.names = _Names()
        self.with_source = with_source
        self.device_id = device_id      # set for per-device programs: show traffic

    def binder(self, var: Var, axis_order) -> str:
        return f"{self.names.define(var)}:{var.aval.str_short(axis_order)}"

    def program(self, prog: Program, indent: int, axis_order: Sequence[str]) -> str:
        pad = " " * indent
        consts = " ".join(self.binder(v, axis_order) for v in prog.constvars)
        ins = " ".join(self.binder(v, axis_order) for v in prog.invars)
        head = "{ lambda " + (consts + "; " if consts else "; ") + ins + ". let"
        lines = [head]
        for eqn in prog.eqns:
            lines.append(self.equation(eqn, indent + 4, axis_order))
        outs = ", ".join(self.names.use(v) for v in prog.outvars)
        outs = f"({outs},)" if len(prog.outvars) == 1 else f"({outs})"
        lines.append(f"{pad}  in {outs} }}")
        return "\n".join(lines)

    def equation(self, eqn, indent: int, axis_order) -> str:
        pad = " " * indent
        # Outputs are named before the body's variables.
        outs = " ".join(self.binder(v, axis_order) for v in eqn.outvars)
        args = " ".join(self.names.use(a) for a in eqn.invars)
        has_program = any(holds_programs(v) for v in eqn.params.values())
        lhs = f"{pad}{outs} = " if outs else f"{pad}"
        if not eqn.params:
            text = f"{lhs}{eqn.primitive.name} {args}".rstrip()
        elif not has_program:
            params = " ".join(f"{k}={format_param(v)}" for k, v in sorted(eqn.params.items())
                              if (eqn.primitive.name, k) not in _UNPRINTED)
            text = f"{lhs}{eqn.primitive.name}[{params}] {args}".rstrip()
        else:
            text = self.multiline_equation(eqn, lhs, args, indent, axis_order)
        notes = []
        if self.device_id is not None:
            traffic = device_traffic(eqn, self.device_id)
            if traffic is not None:
                notes.append(str(traffic))
        if self.with_source and eqn.source is not None:
            notes.append(str(eqn.source))
        if notes:
            text += "  # " + "; ".join(notes)
        return text

    def multiline_equation(self, eqn, lhs, args, indent, axis_order) -> str:
        pad = " " * indent
        lines = [f"{lhs}{eqn.primitive.name}["]
        inner_order = axis_order
        mesh = eqn.params.get("mesh")
        if mesh is not None:
            # Types show the varying axes only where the replication check is on.
            inner_order = mesh.axis_names if eqn.params.get("check_vma", True) is True else None
        for key, value in sorted(eqn.params.items()):
            if isinstance(value, Program):
                text = self.program(value, indent + 2, inner_order)
                lines.append(f"{pad}  {key}={text}")
            elif holds_programs(value):
                lines.append(f"{pad}  {key}=(")
                for prog in value:
                    lines.append(f"{pad}    " + self.program(prog, indent + 4, inner_order))
                lines.append(f"{pad}  )")
            else:
                lines.append(f"{pad}  {key}={format_param(value)}")
        lines.append(f"{pad}] {args}".rstrip())
        return "\n".join(lines)


def print_program(prog: Program, *, axis_order: Sequence[str] = (), with_source=False) -> str:
    """The text of a program, as ``make_jaxpr`` shows it; headed ``types on Mesh(...):`` when
    its types name mesh axes (``f32[8@x,4]``)."""
    mesh = types_mesh(prog)
    head = f"types on {mesh}:\n" if mesh is not None else ""
    return head + _Printer(with_source).program(prog, 0, axis_order)


def types_mesh(prog: Program):
    """The mesh of the first type in ``prog`` (its sub-programs included) that names mesh
    axes, or None."""
    for var in list(prog.invars) + list(prog.constvars):
        if var.aval.type_sharding is not None:
            return var.aval.type_sharding.mesh
    for eqn in prog.eqns:
        for var in eqn.outvars:
            if var.aval.type_sharding is not None:
                return var.aval.type_sharding.mesh
        for value in eqn.params.values():
            for sub in programs_in(value):
                mesh = types_mesh(sub)
                if mesh is not None:
                    return mesh
    return None


def print_device_program(dp: DeviceProgram, *, with_source=False) -> str:
    """A per-device program, headed by its device id and mesh coordinates."""
    axes = ", ".join(dp.mesh_axes)
    coords = ", ".join(str(c) for c in dp.coords)
    head = f"device {dp.device_id} at mesh coordinates ({axes}) = ({coords}):"
    axis_order = dp.mesh_axes if dp.show_vma else None
    body = _Printer(with_source, dp.device_id).program(dp.program, 0, axis_order)
    return f"{head}\n{body}"


def print_mesh_program(lowered, *, with_source=False) -> str:
    """The mesh-level program of a lowered shard_map, headed ``mesh-level program:``; types
    show varying axes where the replication check is on."""
    axis_order = lowered.mesh.axis_names if lowered.show_vma else None
    body = _Printer(with_source).program(lowered.mesh_program, 0, axis_order)
    return f"mesh-level program:\n{body}"


def print_module(module, *, with_source: bool = False, devices: bool = False) -> str:
    """A lowered module: the traced program, then for each shard_map equation its mesh-level
    program. ``shardc run`` executes this text and derives every device's program from it.

    With ``devices`` (or for a lowering without a mesh-level program) the program of every
    device follows; reading such text back checks them against the derivation."""
    parts = [print_program(module.program, with_source=with_source)]
    for index in sorted(module.shard_maps):
        lowered = module.shard_maps[index]
        arrive = format_param(tuple(lowered.in_shardings))
        leave = format_param(tuple(lowered.out_specs))
        parts.append(f"shard_map equation {index} on {lowered.mesh}: inputs arrive as "
                     f"{arrive}, outputs leave as {leave}")
        if lowered.mesh_program is not None:
            parts.append(print_mesh_program(lowered, with_source=with_source))
        if devices or lowered.mesh_program is None:
            for dp in lowered.device_programs:
                parts.append(print_device_program(dp, with_source=with_source))
    return "\n\n".join(parts) + "\n"


def program_to_dict(prog: Program, *, axis_order: Sequence[str] = ()) -> dict:
    """A JSON-able form of a program with the printer's names: inputs, equations (primitive,
    params as printed, operands, results, source) and outputs."""
    return _program_dict(prog, _Names(), axis_order)


def _program_dict(prog: Program, names: _Names, axis_order) -> dict:
    def binder(var):
        return {"name": names.define(var), "type": var.aval.str_short(axis_order)}

    result = {"constvars": [binder(v) for v in prog.constvars],
              "invars": [binder(v) for v in prog.invars], "eqns": []}
    for eqn in prog.eqns:
        entry = {"primitive": eqn.primitive.name,
                 "invars": [names.use(a) for a in eqn.invars],
                 "outvars": [binder(v) for v in eqn.outvars],
                 "source": str(eqn.source) if eqn.source else None}
        inner = axis_order
        if eqn.params.get("mesh") is not None:
            inner = eqn.params["mesh"].axis_names
        entry["params"] = {k: _param_json(v, names, inner) for k, v in sorted(eqn.params.items())}
        result["eqns"].append(entry)
    result["outvars"] = [names.use(a) for a in prog.outvars]
    return result


def _param_json(value, names, axis_order):
    if isinstance(value, Program):
        return _program_dict(value, names, axis_order)
    if holds_programs(value):
        return [_program_dict(v, names, axis_order) for v in value]
    return format_param(value)


def print_equation(eqn) -> str:
    """One equation on its own, operands named in order (``c:f32[2] = add a b``); an equation
    holding sub-programs shows its first line only. For error messages."""
    printer = _Printer(with_source=False)
    for atom in eqn.invars:
        if isinstance(atom, Var) and id(atom) not in printer.names.names:
            printer.names.define(atom)
    text = printer.equation(eqn, 0, ())
    first, _, rest = text.partition("\n")
    return first + (" ...]" if rest else "")
