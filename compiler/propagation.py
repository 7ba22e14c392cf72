"""Sharding propagation on Auto axes: a jitted program whose arguments are laid out on a mesh
without Explicit axes gets types from those layouts, so that ``compiler.partition`` computes
it block by block as it does an explicit-mode program.

JAX leaves the partitioning of such programs to its compiler (Shardy), which propagates the
annotations. Here the annotations are the arguments' layouts and the program's sharding
constraints, carried forward through each primitive's sharding rule (``ir.sharding_rules``,
the explicit mode's table). Where a rule would refuse (operands split differently, a
contraction split on both sides, a reshape it cannot follow, a size the split does not
divide), the result is typed unsplit instead of raising: the partitioner then gathers what it
needs, so the values are always the program's. Loops, branches and other equations holding
programs read their operands whole (a constraint to unsplit is put before them): their bodies
were traced without types. Shard_maps read their operands as the lowering lays them out.

This is forward propagation only, with no cost model yet.
"""
from __future__ import annotations

from compiler.layouts import meaningful
from ir import primitives as prims
from ir.core import Eqn, Literal, Program, TypeSharding, Var
from ir.sharding import NamedSharding, PartitionSpec, check_divides, spec_names
from ir.sharding_rules import typed_avals


def auto_mesh(layouts):
    """The one mesh without Explicit axes the meaningful argument layouts are on (None when
    there is none, or several, or an Explicit one)."""
    meshes = {layout.mesh for layout in layouts
              if isinstance(layout, NamedSharding) and meaningful(layout)}
    if len(meshes) != 1:
        return None
    (mesh,) = meshes
    return None if getattr(mesh, "explicit_axes", ()) else mesh


def propagate(program: Program, layouts, mesh) -> Program:
    """``program`` (constants then inputs laid out by ``layouts``) with every value on
    ``mesh`` typed by propagation from those layouts."""
    subst: dict = {}
    constvars = [_typed_var(v, layout, mesh, subst)
                 for v, layout in zip(program.constvars, layouts)]
    invars = [_typed_var(v, layout, mesh, subst)
              for v, layout in zip(program.invars, layouts[len(program.constvars):])]
    eqns: list = []

    def read(atom):
        return atom if isinstance(atom, Literal) else subst.get(id(atom), atom)

    for eqn in program.eqns:
        ins = [read(a) for a in eqn.invars]
        prim = eqn.primitive
        if prim.kind != "op" and prim is not prims.shard_map_p:
            ins = [_unsplit(a, mesh, eqns, eqn.source) for a in ins]
            avals = [v.aval for v in eqn.outvars]
        elif prim is prims.sharding_constraint_p:
            avals = [_constrained(ins[0].aval, eqn.params["sharding"], mesh)]
        elif prim is prims.shard_map_p and eqn.params["mesh"] == mesh:
            # its results leave laid out as its out_specs say
            avals = [_constrained(v.aval, NamedSharding(mesh, spec), mesh)
                     for v, spec in zip(eqn.outvars, eqn.params["out_specs"])]
        else:
            avals = _typed_or_whole(eqn, ins)
        outs = [Var(a) for a in avals]
        subst.update((id(old), new) for old, new in zip(eqn.outvars, outs))
        eqns.append(Eqn(prim, ins, outs, eqn.params, eqn.source))
    return Program(constvars, invars, eqns, [read(a) for a in program.outvars],
                   list(program.consts))


def _typed_var(var, layout, mesh, subst) -> Var:
    aval = var.aval
    if isinstance(layout, NamedSharding) and layout.mesh == mesh and meaningful(layout):
        typed = _typed(aval, layout, mesh)
        aval = typed if typed is not None else aval
    new = Var(aval)
    subst[id(var)] = new
    return new


def _typed(aval, sharding, mesh):
    """``aval`` typed as ``sharding`` lays it out (over every axis of ``mesh``), or None when
    the layout does not divide it."""
    names = spec_names(sharding.spec)
    if len(names) > aval.ndim:
        return None
    try:
        check_divides(sharding, aval.shape)
    except ValueError:
        return None
    spec = tuple(tuple(n) for n in names) + ((),) * (aval.ndim - len(names))
    if not any(spec):
        return aval.with_sharding(None)
    return aval.with_sharding(TypeSharding.of(mesh, spec))


def _constrained(aval, sharding, mesh):
    if isinstance(sharding, NamedSharding) and sharding.mesh == mesh:
        typed = _typed(aval, sharding, mesh)
        if typed is not None:
            return typed
    return aval.with_sharding(None)


def _typed_or_whole(eqn, ins) -> list:
    """The results typed by the primitive's rule; unsplit where the rule refuses."""
    try:
        return typed_avals(eqn.primitive, [a.aval for a in ins], eqn.params)
    except (TypeError, ValueError):      # ShardingTypeError is a TypeError
        return [v.aval.with_sharding(None) for v in eqn.outvars]


def _unsplit(atom, mesh, eqns, source):
    """``atom`` laid out whole (a constraint to replicated, when its type splits it)."""
    if isinstance(atom, Literal) or atom.aval.sharding is None:
        return atom
    whole = Var(atom.aval.with_sharding(None))
    eqns.append(Eqn(prims.sharding_constraint_p, [atom], [whole],
                    {"sharding": NamedSharding(mesh, PartitionSpec())}, source))
    return whole
