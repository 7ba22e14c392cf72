"""``inspect_array_sharding`` of values whose layout is decided when the program is compiled.

Under jit a value computed on a mesh with Auto axes has no layout while the function is
traced: propagation gives it one when the program is compiled. As JAX calls the callback at
compile time, the value's inspection is an equation (``inspect_sharding``) that stays in the
traced program until then; ``inspected`` calls each callback with the layout the compiled
program gives its value and removes the equation, so nothing past compilation sees it.
"""
from __future__ import annotations

from compiler.backend import get_backend
from compiler.propagation import result_shardings
from compiler.shard_map import current_shard_context
from compiler.tracing import bind, eager_rules
from ir import primitives as prims
from ir.core import Literal, Program
from ir.graph import holds_equation, replace_sub_programs
from ir.sharding import NamedSharding, PartitionSpec

# whether any inspection was ever traced (most programs hold none: nothing to look for)
_traced = [False]


def _inspect_now(x, *, callback):
    """An inspection of a concrete value (bound eagerly, or under eager grad or vmap): its
    layout is known now; a block of an eager shard_map body's is on the body's mesh."""
    sharding = x.sharding
    if sharding is None:
        shard = current_shard_context()
        sharding = (NamedSharding(shard.mesh, PartitionSpec()) if shard is not None
                    else get_backend().default_sharding())
    callback(sharding)
    return []


eager_rules[prims.inspect_sharding_p] = _inspect_now


def inspect_later(x, callback) -> None:
    """Record the inspection of the traced value ``x``, done when its program is compiled."""
    _traced[0] = True
    bind(prims.inspect_sharding_p, x, callback=callback)


def inspected(program: Program, mesh=None, device=None, consts=None,
              pending: list | None = None) -> Program:
    """``program`` with each inspection's callback called with its value's layout (its type's
    split, on ``mesh``: replicated where the type splits nothing; else ``device``, the
    one-device layout of what the program runs on, by default the default device's) and the
    inspection removed; ``program`` itself where it holds none. ``consts``: the values of its
    constants where the program does not hold them. ``pending``: a list that gets each call
    instead (``done`` makes them when the program is compiled: JAX's time for them)."""
    if not _traced[0] or not holds_equation(program, _is_inspection):
        return program
    eqns = []
    # a constant of the program: an array placed by the program where it lies, a number or
    # numpy's (uncommitted) on one device
    constants = {id(v): c.sharding if getattr(c, "_committed", False) else None
                 for v, c in zip(program.constvars,
                                 program.consts if consts is None else consts)}
    for eqn in program.eqns:
        if eqn.primitive is prims.inspect_sharding_p:
            (atom,) = eqn.invars
            if isinstance(atom, Literal) or id(atom) in constants:
                layout = constants.get(id(atom)) or _layout(atom.aval, None, device)
            else:
                layout = _layout(atom.aval, mesh, device)
            if pending is None:
                eqn.params["callback"](layout)
            else:
                pending.append((eqn.params["callback"], layout))
            continue
        eqns.append(replace_sub_programs(
            eqn, lambda sub: inspected(sub, mesh, device, pending=pending)))
    return Program(program.constvars, program.invars, eqns, program.outvars,
                   list(program.consts))


def done(pending: list) -> None:
    """Make the inspections' calls ``inspected`` put off, once: the list is emptied."""
    calls = list(pending)
    pending.clear()
    for callback, layout in calls:
        callback(layout)


def placement_of(layouts, mesh=None) -> tuple:
    """(mesh, device) a program whose values arrive laid out by ``layouts`` runs on: ``mesh``
    where given, else the mesh of the first laid out on one; and the first one-device
    layout among them."""
    if mesh is None:
        mesh = next((s.mesh for s in layouts if isinstance(s, NamedSharding)
                     and not s.mesh.empty), None)
    device = next((s for s in layouts if s is not None and not isinstance(s, NamedSharding)
                   and len(getattr(s, "device_set", ())) == 1), None)
    return mesh, device


def _is_inspection(eqn) -> bool:
    return eqn.primitive is prims.inspect_sharding_p


def _layout(aval, mesh, device):
    typed = aval.type_sharding
    mesh = typed.mesh if typed is not None else mesh
    if mesh is not None:
        # spelt as the compiled program's results are (a propagated layout up to its last
        # split dimension, a type on Explicit axes as it is)
        return result_shardings([aval], mesh, None)[0]
    return device if device is not None else get_backend().default_sharding()
