"""Sharding propagation on Auto axes: a jitted program laid out on a mesh without Explicit axes
gets types from its annotations, so that ``compiler.partition`` computes it block by block as
it does an explicit-mode program.

JAX leaves the partitioning of such programs to its compiler (Shardy), which propagates the
annotations through the program. Here the annotations are the arguments' layouts (fixed: an
argument is never moved), the program's sharding constraints (fixed results, and a layout
asked of their operands) and shard_map boundaries (out_specs fix the results, in_specs are
asked of the operands). Every other value is open, and takes its layout from its neighbours:

- Most primitives are seen as Shardy sees them, as factors: dimensions that correspond across
  operands and results (each dimension of an elementwise operation, a transpose's permuted
  ones, the kept dimensions of a reduction, a contraction's batch, free and contracted ones,
  the positional dimensions of slices, pads and concatenations). A factor that some of its
  dimensions already split, all alike, gives that split to its open dimensions, forward and
  backward; splits that disagree leave it alone (the partitioner then lays the operands out
  as the result). A split is only given where it divides the dimension and where the value
  does not already use its axes.
- Other primitives are typed forward by their explicit-mode sharding rule
  (``ir.sharding_rules``); where that rule would refuse, the result is unsplit.
- Loops, branches and other equations holding programs read their operands whole (a
  constraint to unsplit is put before them): their bodies were traced without types.

The sweeps go forward then backward over the equations until nothing changes, so a
constraint at the end of a chain lays out the chain, and where two annotations meet at an
operation the first to arrive wins (deterministic: program order). The block rules of
``compiler.partition`` lay operands out as their results' types ask, so any typing computes
the program's values; the types decide only where communication happens.
"""
from __future__ import annotations

import math

from compiler.layouts import meaningful
from ir import primitives as prims
from ir.core import Eqn, Literal, Program, TypeSharding, Var
from ir.sharding import NamedSharding, PartitionSpec, check_divides, spec_names
from ir.sharding_rules import typed_avals

# Primitives whose operands and results share every dimension by position (sizes may differ:
# a slice keeps the dimension, shorter).
_POSITIONAL = frozenset(prims.ELEMENTWISE + prims.CUMULATIVE + (
    prims.sort_p, prims.concatenate_p, prims.slice_p, prims.pad_p, prims.rev_p,
    prims.dynamic_slice_p, prims.dynamic_update_slice_p))
_REDUCTIONS = frozenset(prims.REDUCTIONS + (prims.argmax_p, prims.argmin_p))
_MAX_SWEEPS = 16


def program_mesh(program: Program, layouts):
    """The one mesh without Explicit axes a program is laid out on: that of its arguments'
    layouts (replicated ones count), its sharding constraints and its shard_maps. None when
    there is none, or several, or an Explicit one."""
    meshes = {layout.mesh for layout in layouts if isinstance(layout, NamedSharding)}
    for eqn in program.eqns:
        if eqn.primitive is prims.sharding_constraint_p:
            sharding = eqn.params["sharding"]
            if isinstance(sharding, NamedSharding):
                meshes.add(sharding.mesh)
        elif eqn.primitive is prims.shard_map_p:
            meshes.add(eqn.params["mesh"])
    if len(meshes) != 1:
        return None
    (mesh,) = meshes
    return None if getattr(mesh, "explicit_axes", ()) else mesh


def auto_mesh(layouts):
    """The one mesh without Explicit axes the meaningful (split) layouts are on (None when
    there is none, or several, or an Explicit one)."""
    meshes = {layout.mesh for layout in layouts
              if isinstance(layout, NamedSharding) and meaningful(layout)}
    if len(meshes) != 1:
        return None
    (mesh,) = meshes
    return None if getattr(mesh, "explicit_axes", ()) else mesh


def propagate(program: Program, layouts, mesh) -> Program:
    """``program`` (constants then inputs laid out by ``layouts``) with every value on
    ``mesh`` typed by propagation from its annotations."""
    solver = _Solver(program, layouts, mesh)
    solver.solve()
    return solver.typed_program()


class _Solver:
    """Per value (by id) its split per dimension, and whether propagation may still extend
    it (open) or it is given (arguments, constraints' and shard_maps' results, results typed
    by a rule)."""

    def __init__(self, program: Program, layouts, mesh):
        self.program, self.mesh = program, mesh
        self.spec: dict = {}
        self.shape: dict = {}
        self.open: set = set()
        for var, layout in zip(program.constvars + program.invars, layouts):
            self._given(var, _layout_spec(var.aval, layout, mesh))
        for eqn in program.eqns:
            prim = eqn.primitive
            if prim is prims.sharding_constraint_p:
                self._given(eqn.outvars[0],
                            _layout_spec(eqn.outvars[0].aval, eqn.params["sharding"], mesh))
            elif prim is prims.shard_map_p and eqn.params["mesh"] == mesh:
                for var, spec in zip(eqn.outvars, eqn.params["out_specs"]):
                    self._given(var, _layout_spec(var.aval, NamedSharding(mesh, spec), mesh))
            else:
                for var in eqn.outvars:
                    self._given(var, _unsplit(var.aval))
                    if _factored(eqn):
                        self.open.add(id(var))

    def _given(self, var, spec) -> None:
        self.spec[id(var)] = list(spec)
        self.shape[id(var)] = var.aval.shape

    # --- the sweeps ---

    def solve(self) -> None:
        eqns = self.program.eqns
        for _ in range(_MAX_SWEEPS):
            changed = False
            for eqn in eqns:
                changed |= self._visit(eqn)
            for eqn in reversed(eqns):
                changed |= self._visit(eqn)
            if not changed:
                return

    def _visit(self, eqn) -> bool:
        prim = eqn.primitive
        if _factored(eqn) or prim is prims.sharding_constraint_p:
            return any([self._resolve(f) for f in self._factors(eqn)])
        if prim is prims.shard_map_p and eqn.params["mesh"] == self.mesh:
            asked = [self._resolve([(id(a), d), (None, names)])
                     for a, spec in zip(eqn.invars, eqn.params["in_specs"])
                     if isinstance(a, Var) and id(a) in self.spec
                     for d, names in enumerate(_layout_spec(
                         a.aval, NamedSharding(self.mesh, spec), self.mesh))]
            return any(asked)
        if prim.kind == "op":
            avals = self._typed(eqn)
            changed = False
            for var, aval in zip(eqn.outvars, avals):
                spec = list(_spec(aval))
                if spec != self.spec[id(var)]:
                    self.spec[id(var)] = spec
                    changed = True
            return changed
        return False

    def _typed(self, eqn) -> list:
        """The results' types by the primitive's rule, from the operands' current types;
        unsplit where the rule refuses."""
        avals = [self.aval(a) for a in eqn.invars]
        try:
            return typed_avals(eqn.primitive, avals, eqn.params)
        except (TypeError, ValueError):      # ShardingTypeError is a TypeError
            return [v.aval.with_sharding(None) for v in eqn.outvars]

    def _resolve(self, factor) -> bool:
        """Give a factor's split to its open, unsplit dimensions: members are (value id,
        dimension), or (None, axes) for a layout asked from outside. Nothing when no member is
        split or splits disagree."""
        splits = {self.spec[k][d] if k is not None else d for k, d in factor}
        splits.discard(())
        if len(splits) != 1:
            return False
        (names,) = splits
        changed = False
        for k, d in factor:
            if k in self.open and not self.spec[k][d] and self._fits(k, d, names):
                self.spec[k][d] = names
                changed = True
        return changed

    def _fits(self, k, d, names) -> bool:
        spec = self.spec[k]
        if any(n in used for used in spec for n in names):
            return False
        return self.shape[k][d] % math.prod(self.mesh.shape[n] for n in names) == 0

    def _factors(self, eqn) -> list:
        """The factors of a factored equation (or a sharding constraint: the identity from
        its operand to its given result)."""
        prim, ins, outs = eqn.primitive, eqn.invars, eqn.outvars
        arrays = [a for a in ins if isinstance(a, Var) and id(a) in self.spec]
        if prim in _POSITIONAL or prim is prims.sharding_constraint_p:
            rank = outs[0].aval.ndim
            members = [a for a in arrays if a.aval.ndim == rank] + list(outs)
            broadcast = prim in prims.ELEMENTWISE
            return [[(id(v), d) for v in members
                     if not (broadcast and v.aval.shape[d] != outs[0].aval.shape[d])]
                    for d in range(rank)]
        if prim is prims.transpose_p:
            (a,), (out,) = ins, outs
            return [[(id(a), p), (id(out), i)]
                    for i, p in enumerate(eqn.params["permutation"]) if isinstance(a, Var)]
        if prim is prims.broadcast_in_dim_p:
            (a,), (out,) = ins, outs
            dims = eqn.params["broadcast_dimensions"]
            mapped = {od: d for d, od in enumerate(dims)
                      if isinstance(a, Var) and a.aval.shape[d] == out.aval.shape[od]}
            return [[(id(out), od)] + ([(id(a), mapped[od])] if od in mapped else [])
                    for od in range(out.aval.ndim)]
        if prim is prims.squeeze_p or prim in _REDUCTIONS:
            (a,), (out,) = ins, outs
            gone = eqn.params["dimensions" if prim is prims.squeeze_p else "axes"]
            kept = [d for d in range(a.aval.ndim) if d not in gone]
            return [[(id(a), d), (id(out), j)] for j, d in enumerate(kept)
                    if isinstance(a, Var)]
        if prim is prims.dot_general_p:
            return _dot_factors(eqn)
        if prim is prims.iota_p:
            return [[(id(outs[0]), d)] for d in range(outs[0].aval.ndim)]
        raise AssertionError(prim)

    # --- the typed program ---

    def aval(self, atom):
        if isinstance(atom, Literal) or id(atom) not in self.spec:
            return atom.aval
        return _with_spec(atom.aval, self.spec[id(atom)], self.mesh)

    def typed_program(self) -> Program:
        subst: dict = {}

        def typed(var):
            new = Var(self.aval(var))
            subst[id(var)] = new
            return new

        def read(atom):
            return atom if isinstance(atom, Literal) else subst.get(id(atom), atom)

        constvars = [typed(v) for v in self.program.constvars]
        invars = [typed(v) for v in self.program.invars]
        eqns: list = []
        for eqn in self.program.eqns:
            ins = [read(a) for a in eqn.invars]
            prim = eqn.primitive
            if prim.kind != "op" and not (prim is prims.shard_map_p
                                          and eqn.params["mesh"] == self.mesh):
                ins = [_gathered(a, self.mesh, eqns, eqn.source) for a in ins]
            outs = [typed(v) for v in eqn.outvars]
            eqns.append(Eqn(prim, ins, outs, eqn.params, eqn.source))
        return Program(constvars, invars, eqns, [read(a) for a in self.program.outvars],
                       list(self.program.consts))


def result_shardings(typed, mesh, arguments) -> list:
    """How results of types ``typed`` on ``mesh`` report their layout, as JAX spells a
    propagated one: as an argument of the same rank and layout spells it (``arguments``:
    (rank, sharding) pairs), else one entry per dimension up to the last split one
    (``P('x',)``, ``P()`` when replicated)."""
    shardings = []
    for aval in typed:
        spec = _spec(aval)
        entries = [names[0] if len(names) == 1 else (tuple(names) or None) for names in spec]
        while entries and entries[-1] is None:
            entries.pop()
        sharding = NamedSharding(mesh, PartitionSpec(*entries))
        same = [s for rank, s in arguments if rank == aval.ndim and s == sharding]
        shardings.append(same[0] if same else sharding)
    return shardings


def _factored(eqn) -> bool:
    prim = eqn.primitive
    return (prim in _POSITIONAL or prim in _REDUCTIONS or prim in (
        prims.transpose_p, prims.broadcast_in_dim_p, prims.squeeze_p, prims.dot_general_p,
        prims.iota_p))


def _dot_factors(eqn) -> list:
    (a, b), (out,) = eqn.invars, eqn.outvars
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    free_a = [d for d in range(a.aval.ndim) if d not in lc and d not in lb]
    free_b = [d for d in range(b.aval.ndim) if d not in rc and d not in rb]
    ka = (lambda d: (id(a), d)) if isinstance(a, Var) else None
    kb = (lambda d: (id(b), d)) if isinstance(b, Var) else None

    def members(*pairs):
        return [key(d) for key, d in pairs if key is not None]

    o = iter(range(out.aval.ndim))
    factors = [members((ka, l), (kb, r)) + [(id(out), next(o))] for l, r in zip(lb, rb)]
    factors += [members((ka, d)) + [(id(out), next(o))] for d in free_a]
    factors += [members((kb, d)) + [(id(out), next(o))] for d in free_b]
    factors += [members((ka, l), (kb, r)) for l, r in zip(lc, rc)]
    return factors


def _unsplit(aval) -> tuple:
    return ((),) * aval.ndim


def _spec(aval) -> tuple:
    sharding = aval.sharding
    if sharding is None:
        return _unsplit(aval)
    return tuple(tuple(names) for names in sharding.spec)


def _with_spec(aval, spec, mesh):
    spec = tuple(spec)
    return aval.with_sharding(TypeSharding.of(mesh, spec) if any(spec) else None)


def _layout_spec(aval, layout, mesh) -> tuple:
    """Per dimension the axes ``layout`` splits ``aval`` over (unsplit where it is not a
    layout on ``mesh``, or does not divide the value)."""
    if not isinstance(layout, NamedSharding) or layout.mesh != mesh:
        return _unsplit(aval)
    names = spec_names(layout.spec)
    if len(names) > aval.ndim:
        return _unsplit(aval)
    try:
        check_divides(layout, aval.shape)
    except ValueError:
        return _unsplit(aval)
    return tuple(tuple(n) for n in names) + ((),) * (aval.ndim - len(names))


def _gathered(atom, mesh, eqns, source):
    """``atom`` laid out whole (a constraint to replicated, when its type splits it)."""
    if isinstance(atom, Literal) or atom.aval.sharding is None:
        return atom
    whole = Var(atom.aval.with_sharding(None))
    eqns.append(Eqn(prims.sharding_constraint_p, [atom], [whole],
                    {"sharding": NamedSharding(mesh, PartitionSpec())}, source))
    return whole
