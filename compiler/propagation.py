"""Sharding propagation on Auto axes: a jitted program laid out on a mesh with Auto axes gets
types from its annotations, so that ``compiler.partition`` computes it block by block as it
does an explicit-mode program. (On a mesh with Explicit axes too, the traced types fix each
value's split over those; propagation adds the Auto axes.)

JAX leaves the partitioning of such programs to its compiler (Shardy), which propagates the
annotations through the program. Here the annotations are the arguments' layouts (fixed: an
argument is never moved), the program's sharding constraints (fixed results, and a layout
asked of their operands) and shard_map boundaries (out_specs fix the results, in_specs are
asked of the operands). As Shardy's import does, a fully specified constraint's layout is
given to its operand too where nothing else asks that operand for another. Every other value
is open, and takes its layout from its neighbours:

- Most primitives are seen as Shardy sees them, as factors: dimensions that correspond across
  operands and results (each dimension of an elementwise operation, a transpose's permuted
  ones, the kept dimensions of a reduction, a contraction's batch, free and contracted ones,
  the positional dimensions of slices, pads and concatenations). A factor whose splits agree
  (each a major run of the longest) gives the longest to its open dimensions, as far as each
  value has those axes free; splits that disagree leave it alone (the partitioner then lays
  the operands out as the result). Uneven splits pass too: they reach the values they divide.
- Other primitives are typed forward by their explicit-mode sharding rule
  (``ir.sharding_rules``); where that rule would refuse, the result is as traced.
- Loops and conds whose programs hold only such operations are typed through: a loop's
  carries keep one layout across iterations, a cond's results take the layout its branches
  give them (each branch lays its results out so). Other equations holding programs read
  their operands as traced (a constraint is put before them): their bodies were traced
  without Auto types.

Equations spread splits in Shardy's op-priority schedule (``_Solver._direction``), each
priority to a fixed point, visited in program order and last in, first out: where two
annotations meet, the first to arrive stays. The block rules of ``compiler.partition`` lay
operands out as their results' types ask, so any typing computes the program's values; the
types decide only where communication happens. A value split unevenly is typed so (padded
blocks) only where ``_may_be_uneven`` allows; elsewhere by the axes that divide it.
"""
from __future__ import annotations

import itertools
import math

from compiler.layouts import meaningful
from ir import primitives as prims
from ir.core import Eqn, Literal, Program, TypeSharding, Var
from ir.graph import sub_programs
from ir.sharding import NamedSharding, PartitionSpec, dividing, read_back_entries, spec_names
from ir.shapes import reshape_groups
from ir.sharding_rules import mesh_auto, typed_avals

# Primitives whose operands and results share every dimension by position (sizes may differ:
# a slice keeps the dimension, shorter).
_POSITIONAL = frozenset(prims.ELEMENTWISE + prims.CUMULATIVE + (
    prims.threefry2x32_p, prims.sort_p, prims.concatenate_p, prims.slice_p, prims.pad_p, prims.rev_p,
    prims.dynamic_slice_p, prims.dynamic_update_slice_p, prims.shard_alike_p))
_REDUCTIONS = frozenset(prims.REDUCTIONS + (prims.argmax_p, prims.argmin_p))
_MAX_SWEEPS = 16
_PRIORITIES = 5
# What Shardy spreads splits through first (its elementwise operations include constraints)
_PASS_THROUGH = frozenset(prims.ELEMENTWISE + (prims.sharding_constraint_p, prims.reshape_p,
                                               prims.transpose_p, prims.shard_alike_p))


def program_mesh(program: Program, layouts):
    """The one mesh with Auto axes a program is laid out on: that of its arguments' layouts
    (replicated ones count), its sharding constraints and its shard_maps (those in its loop
    bodies and branches too). None when there is none, or several, or one with Explicit axes
    only."""
    meshes = {layout.mesh for layout in layouts if isinstance(layout, NamedSharding)}
    return _only_auto(meshes | annotated_meshes(program))


def annotated_meshes(program: Program, meshes: set | None = None) -> set:
    """The meshes of a program's sharding constraints and shard_maps, in its loop bodies and
    branches too."""
    meshes = set() if meshes is None else meshes
    for eqn in program.eqns:
        if eqn.primitive is prims.sharding_constraint_p:
            sharding = eqn.params["sharding"]
            if isinstance(sharding, NamedSharding):
                meshes.add(sharding.mesh)
        elif eqn.primitive is prims.shard_map_p:
            meshes.add(eqn.params["mesh"])
        elif eqn.params:
            for _, _, sub in sub_programs(eqn):
                annotated_meshes(sub, meshes)
    return meshes


def on_first_of_twins(layouts) -> list:
    """``layouts`` with those on meshes of Auto axes only that lay out the same devices in
    the same grid as the first such mesh, under other names, spelt on that first mesh (axis
    k named as its axis k): the same blocks on the same devices. JAX runs values on such
    meshes together, laid out on the first; otherwise as given."""
    meshes = [l.mesh for l in layouts if isinstance(l, NamedSharding) and not l.mesh.empty]
    first = meshes[0] if meshes else None
    if first is None or not first.are_all_axes_auto or all(m is first for m in meshes):
        return layouts
    out = []
    for layout in layouts:
        mesh = getattr(layout, "mesh", None)
        if (isinstance(layout, NamedSharding) and mesh is not first and mesh.are_all_axes_auto
                and mesh.axis_sizes == first.axis_sizes
                and mesh.flat_device_ids == first.flat_device_ids):
            name = dict(zip(mesh.axis_names, first.axis_names))
            layout = NamedSharding(first, PartitionSpec(*[
                tuple(name[a] for a in e) if isinstance(e, tuple) else
                e if e is None else name[e] for e in layout.spec]))
        out.append(layout)
    return out


def auto_mesh(layouts, replicated: bool = False):
    """The one mesh with Auto axes the layouts split values over (``replicated``: or lay them
    out on at all); None when there is none, or several, or one with Explicit axes only."""
    return _only_auto({layout.mesh for layout in layouts
                       if isinstance(layout, NamedSharding)
                       and (replicated or meaningful(layout))})


def _only_auto(meshes: set):
    if len(meshes) != 1:
        return None
    (mesh,) = meshes
    return mesh if mesh_auto(mesh) else None


def propagate(program: Program, layouts, mesh) -> Program:
    """``program`` (constants then inputs laid out by ``layouts``) with every value on
    ``mesh`` typed by propagation from its annotations."""
    specs = [_layout_spec(v.aval, layout, mesh)
             for v, layout in zip(program.constvars + program.invars, layouts)]
    solver = _Solver(program, specs, mesh)
    solver.solve()
    solver.uneven = _may_be_uneven(program)
    # JAX 0.10.2 leaves a one-dimensional result its type gives Explicit axes on those alone
    return solver.typed_program([((),) if isinstance(v, Var) and v.aval.ndim == 1
                                 and _spec(v.aval)[0] else None for v in program.outvars])


class _Solver:
    """Per value (by id) its split per dimension over Auto axes, and whether propagation may
    still extend it (open) or it is given (arguments, constraints' and shard_maps' results,
    results typed by a rule). On a mesh with Explicit axes too, a value's type fixes its
    split over those (``fixed``, major to the Auto axes in each dimension)."""

    def __init__(self, program: Program, in_specs, mesh):
        self.program, self.mesh = program, mesh
        self.spec: dict = {}
        self.fixed: dict = {}
        self.open: set = set()
        self.open_dims: dict = {}     # constraint result id -> the dimensions it leaves open
        self.uneven: set = set()      # values that may be typed with uneven blocks
        self.carried: dict = {}       # loop or cond equation id -> what typing it found
        self.users: dict = {}         # value id -> the equations that read it
        self.producer: dict = {}      # value id -> the equation that computes it
        self.uses: dict = {}          # value id -> how many times it is read (results too)
        for var, spec in zip(program.constvars + program.invars, in_specs):
            self._given(var, spec)
        for a in program.outvars:
            if isinstance(a, Var):
                self.uses[id(a)] = self.uses.get(id(a), 0) + 1
        for eqn in program.eqns:
            for a in eqn.invars:
                if isinstance(a, Var):
                    self.users.setdefault(id(a), []).append(eqn)
                    self.uses[id(a)] = self.uses.get(id(a), 0) + 1
            for var in eqn.outvars:
                self.producer[id(var)] = eqn
            prim = eqn.primitive
            if prim is prims.sharding_constraint_p:
                out, layout = eqn.outvars[0], eqn.params["sharding"]
                self._given(out, _layout_spec(out.aval, layout, mesh))
                left = _unconstrained(layout)
                if left:
                    self.open_dims[id(out)] = left
            elif prim is prims.shard_map_p and eqn.params["mesh"] == mesh:
                for var, spec in zip(eqn.outvars, eqn.params["out_specs"]):
                    self._given(var, _layout_spec(var.aval, NamedSharding(mesh, spec), mesh))
            else:
                for var in eqn.outvars:
                    self._given(var, _unsplit(var.aval))
                    if _factored(eqn):
                        self.open.add(id(var))
        self._apply_annotations_to_operands()

    def _apply_annotations_to_operands(self) -> None:
        """Shardy's first step (its ``apply-sharding-constraints``): a constraint's (or a
        shard_map's) layout is given to its operand too, where the operand is an open value
        that no other annotation asks another layout of. Such an operand then takes no split
        from elsewhere (``b`` feeding ``W(b, P('x'))`` and ``W(sin(b), P(None, 'y'))`` is
        split over x alone). Not on a mesh with Explicit axes: there JAX annotates every
        value its type splits, so an operand always has a layout already."""
        if self.mesh.explicit_axes:
            return
        asked: dict = {}          # operand id -> the layouts annotations ask of it
        for eqn in self.program.eqns:
            for a, layout in _annotation_operands(eqn, self.mesh):
                asked.setdefault(id(a), []).append(layout)
        done: set = set()
        for eqn in self.program.eqns:
            for a, layout in _annotation_operands(eqn, self.mesh):
                if (id(a) in self.open and id(a) not in done and not _unconstrained(layout)
                        and all(other == layout for other in asked[id(a)])):
                    self.open.discard(id(a))
                    done.add(id(a))
                    self._given(a, _layout_spec(a.aval, layout, self.mesh))

    def _given(self, var, spec) -> None:
        """``var``'s split over Auto axes is ``spec``'s (a layout's whole spec, or a part)."""
        fixed = _spec(var.aval)
        self.fixed[id(var)] = fixed
        self.spec[id(var)] = [_auto_part(names, f, self.mesh) for names, f in zip(spec, fixed)]

    # --- the schedule ---

    def solve(self) -> None:
        """Shardy's op-priority schedule: to a fixed point at each priority in turn, where
        priority ``p`` lets an equation spread splits in the directions ``_direction`` says.
        At each, equations are visited in program order, and those next to a value a visit
        changes at once (last in, first out, as MLIR's greedy driver does): where two splits
        meet at a value, the first to arrive stays."""
        eqns = self.program.eqns
        before = [None] * len(eqns)
        for priority in range(_PRIORITIES):
            now = [self._schedule(e, priority) for e in eqns]
            # each equation is at a fixed point for its direction at the previous priority:
            # only those whose direction changes can spread anything new
            self._spread([e for e, a, b in zip(eqns, now, before) if a != b], priority)
            before = now

    def _schedule(self, eqn, priority: int):
        """What an equation may do at ``priority``: its direction (factored equations and
        constraints), whether a shard_map asks its in_specs, else always the same."""
        if _factored(eqn) or eqn.primitive is prims.sharding_constraint_p:
            return self._direction(eqn, priority)
        if eqn.primitive is prims.shard_map_p:
            return priority >= 1
        return "typed"

    def _spread(self, work, priority: int) -> None:
        stack = list(reversed(work))
        stacked = {id(e) for e in stack}
        budget = _MAX_SWEEPS * max(len(self.program.eqns), 1)
        while stack and budget:
            budget -= 1
            eqn = stack.pop()
            stacked.discard(id(eqn))
            values = [a for a in eqn.invars if isinstance(a, Var) and id(a) in self.spec]
            values += list(eqn.outvars)
            before = [list(self.spec[id(v)]) for v in values]
            if not self._visit(eqn, priority):
                continue
            for v, old in zip(values, before):
                if self.spec[id(v)] != old:
                    for other in self._neighbours(v):
                        if other is not eqn and id(other) not in stacked:
                            stacked.add(id(other))
                            stack.append(other)

    def _neighbours(self, var) -> list:
        """The equations that compute or read ``var``."""
        producer = self.producer.get(id(var))
        return ([producer] if producer is not None else []) + self.users.get(id(var), [])

    def _direction(self, eqn, priority: int):
        """Which way ``eqn`` spreads splits at ``priority`` (Shardy's schedule): (operands to
        results, results to operands), and whether factors that are not in every result
        (contracted dimensions) spread. Priority 0: elementwise operations, constraints,
        reshapes and transposes none of whose operands has another use; 1: those whatever
        their uses; 2: every operation, along the dimensions it passes through, a broadcast
        backward only; 3: every factor, a broadcast still backward only; 4: everything."""
        prim = eqn.primitive
        broadcast = prim is prims.broadcast_in_dim_p
        if prim in _PASS_THROUGH:
            if priority == 0 and any(
                    self.uses.get(id(a), 0) > 1 for a in eqn.invars
                    if isinstance(a, Var) and a.aval.ndim):
                return None
            return True, True, True
        if priority < 2:
            return None
        return not broadcast or priority == 4, True, priority >= 3

    def _visit(self, eqn, priority: int) -> bool:
        prim = eqn.primitive
        if _factored(eqn) or prim is prims.sharding_constraint_p:
            direction = self._direction(eqn, priority)
            if direction is None:
                return False
            forward, backward, every = direction
            results = {id(v) for v in eqn.outvars}
            changed = False
            # where factors compete for an axis, the first resolved takes it (resolving one
            # changes no other's members: their agreed splits hold)
            agreed = [(factor, self._agreed(factor)) for factor in self._factors(eqn)]
            agreed.sort(key=lambda pair: self._precedence(*pair))
            for factor, names in agreed:
                if every or any(k in results for k, _ in factor):
                    changed |= self._resolve(factor, results, forward, backward, names)
            return changed
        if prim is prims.shard_map_p and eqn.params["mesh"] == self.mesh:
            if priority < 1:
                return False
            asked = [self._resolve([(id(a), d), (None, _auto_part(names, fixed, self.mesh))])
                     for a, spec in zip(eqn.invars, eqn.params["in_specs"])
                     if isinstance(a, Var) and id(a) in self.spec
                     for d, (names, fixed) in enumerate(zip(_layout_spec(
                         a.aval, NamedSharding(self.mesh, spec), self.mesh),
                         self.fixed[id(a)]))]
            return any(asked)
        if prim in _LOOPS and _blockwise(eqn, self.mesh):
            return self._loop(eqn)
        if prim is prims.cond_p and _blockwise(eqn, self.mesh):
            return self._branches(eqn)
        if prim.kind == "op":
            avals = self._typed(eqn)
            changed = False
            for var, aval in zip(eqn.outvars, avals):
                spec = [_auto_part(n, f, self.mesh)
                        for n, f in zip(_spec(aval), self.fixed[id(var)])]
                if spec != self.spec[id(var)]:
                    self.spec[id(var)] = spec
                    changed = True
            return changed
        return False

    # --- loops: carries keep one layout across iterations ---

    def _loop(self, eqn) -> bool:
        """A scan's or while loop's carries laid out alike before and after each iteration: as
        their initial values, extended where the body splits an unsplit dimension of them;
        the body typed from them (and the loop's constants and, for a scan, the slices of
        its ``xs``, whose scanned dimension is whole), its results typed from the body."""
        layout = _loop_layout(eqn)
        operands = [self.spec_of(a) for a in eqn.invars]
        carry = [operands[k] for k in layout.carry]
        for _ in range(1 + sum(len(c) for c in carry)):
            body = self._body(eqn, layout, operands, carry)
            outs = [body.spec_of(a) for a in layout.body(eqn).outvars]
            joined = [_extended(c, o) for c, o in zip(carry, outs)]
            if joined == carry:
                break
            carry = joined
        else:
            body = self._body(eqn, layout, operands, carry)
            outs = [body.spec_of(a) for a in layout.body(eqn).outvars]
        results = carry + [((),) + tuple(y) for y in outs[len(carry):]]
        changed = False
        for k, spec in zip(layout.carry, carry):       # an open initial value is made so
            atom = eqn.invars[k]
            if isinstance(atom, Var) and id(atom) in self.open:
                for d, names in enumerate(spec):
                    if names and not self.spec[id(atom)][d] \
                            and self._fitting(id(atom), d, names) == tuple(names):
                        # (``names``: Auto axes only, as the body's solver reports them)
                        self.spec[id(atom)][d] = names
                        changed = True
        for var, spec in zip(eqn.outvars, results):
            if self.spec[id(var)] != list(spec):
                self.spec[id(var)] = list(spec)
                changed = True
        self.carried[id(eqn)] = (carry, body)
        return changed

    def _body(self, eqn, layout, operands, carry) -> "_Solver":
        specs = [operands[k] for k in layout.consts] + list(carry)
        specs += [tuple(operands[k][1:]) for k in layout.xs]
        return self._solved(layout.body(eqn), specs)

    def _solved(self, program: Program, in_specs) -> "_Solver":
        """A sub-program's solver, solved: its constants unsplit, its inputs split over Auto
        axes by ``in_specs``."""
        specs = [_unsplit(v.aval) for v in program.constvars] + list(in_specs)
        solver = _Solver(program, _wholes(program, specs), self.mesh)
        solver.solve()
        return solver

    # --- branches: every branch lays its results out alike ---

    def _branches(self, eqn) -> bool:
        """A cond's branches typed from its operands (the index aside), its results split as
        the branches agree to split them (Shardy ties each result to every branch's), those
        that constrain it first. A constant index leaves the branch it picks alone (XLA
        folds the others away before it propagates)."""
        operands = [self.spec_of(a) for a in eqn.invars[1:]]
        branches = [self._solved(b, operands) for b in eqn.params["branches"]]
        taken = _taken(eqn.invars[0], branches)
        results = []
        for k in range(len(eqn.outvars)):
            # a branch's constraint on the result is an annotation, the others' splits
            # propagated ones: the constraints (where they agree) lay it out
            constrained = [b for b in taken if b.constrains(b.program.outvars[k])]
            results.append(_joined([b.spec_of(b.program.outvars[k])
                                    for b in constrained or taken]))
        changed = False
        for var, spec in zip(eqn.outvars, results):
            if self.spec[id(var)] != list(spec):
                self.spec[id(var)] = list(spec)
                changed = True
        self.carried[id(eqn)] = (operands, results, branches)
        return changed

    def constrains(self, atom) -> bool:
        """Whether ``atom`` is a sharding constraint's result (an annotation)."""
        producer = self.producer.get(id(atom)) if isinstance(atom, Var) else None
        return producer is not None and producer.primitive is prims.sharding_constraint_p

    def spec_of(self, atom) -> tuple:
        """``atom``'s split over Auto axes."""
        if isinstance(atom, Literal) or id(atom) not in self.spec:
            return _unsplit(atom.aval)
        return tuple(self.spec[id(atom)])

    def whole_spec(self, atom) -> tuple:
        """``atom``'s split over every axis: its type's, then the Auto axes."""
        if isinstance(atom, Literal) or id(atom) not in self.spec:
            return _spec(atom.aval)
        return tuple(f + a for f, a in zip(self.fixed[id(atom)], self.spec[id(atom)]))

    def _typed(self, eqn) -> list:
        """The results' types by the primitive's rule, from the operands' current types; as
        traced (unsplit over Auto axes) where the rule refuses."""
        avals = [self.aval(a) for a in eqn.invars]
        try:
            return typed_avals(eqn.primitive, avals, eqn.params)
        except (TypeError, ValueError):      # ShardingTypeError is a TypeError
            return [v.aval for v in eqn.outvars]

    def _resolve(self, factor, results=frozenset(), forward=True, backward=True,
                 names=None) -> bool:
        """Give a factor's split to its open dimensions: members are (value id, dimension), or
        (None, axes) for a layout asked from outside. The splits must agree, each a major run
        of the longest (Shardy's compatible major axes); the longest extends the others, as
        far as each value has the axes free. Nothing when no member is split or splits
        disagree. ``forward``/``backward``: whether results (ids in ``results``), operands,
        take splits from the others; ``names``: the agreed split, where already known."""
        names = self._agreed(factor) if names is None else names
        if not names:
            return False
        if not (forward and backward):     # the source must be on the side that spreads
            source = {k for k, d in factor
                      if (k in results) == backward and k is not None
                      and tuple(self.spec[k][d]) == names}
            if not source:
                return False
        changed = False
        for k, d in factor:
            if (k in results and not forward) or (k not in results and not backward):
                continue
            if (k in self.open or d in self.open_dims.get(k, ())) \
                    and len(self.spec[k][d]) < len(names):
                fitting = self._fitting(k, d, names)
                if len(fitting) > len(self.spec[k][d]):
                    self.spec[k][d] = fitting
                    changed = True
        return changed

    def _precedence(self, factor, longest) -> tuple:
        """The order in which an equation's factors take axes, as Shardy settles factors
        competing for one: the split over the most devices first, then the one an earlier
        operand gives (``a + b`` of ``P(None, 'y')`` and ``P('y', None)`` is split as ``a``;
        of ``P('x', None)`` and ``P(None, ('x', 'y'))`` as ``b``). A factor whose splits
        disagree, or that has none, takes nothing: last. ``longest``: its agreed split."""
        if not longest:
            return (0, len(factor))
        first = next(i for i, member in enumerate(factor) if self._split_of(*member))
        return (-math.prod(self.mesh.shape[n] for n in longest), first)

    def _split_of(self, k, d) -> tuple:
        """A factor member's split: a value's dimension's, or a layout asked from outside."""
        return tuple(self.spec[k][d]) if k is not None else tuple(d)

    def _agreed(self, factor) -> tuple:
        """The split a factor's members agree on: the longest of theirs, where each is a
        major run of it (Shardy's compatible major axes); ``()`` where none is split or
        they disagree."""
        splits = {self._split_of(k, d) for k, d in factor}
        splits.discard(())
        if not splits:
            return ()
        names = max(splits, key=len)
        if any(other != names[:len(other)] for other in splits):
            return ()
        return names

    def _fitting(self, k, d, names) -> tuple:
        """The longest major run of ``names`` that dimension ``d`` of value ``k`` may take:
        its axes free in the value's other dimensions. (Uneven blocks are no bar: the split
        passes on to values it divides.)"""
        spec, fixed = self.spec[k], self.fixed[k]
        used = {n for e, axes in enumerate(spec) if e != d for n in axes}
        used.update(n for axes in fixed for n in axes)
        fitting = ()
        for n in names:
            if n in used:
                break
            fitting += (n,)
        return fitting

    def _factors(self, eqn) -> list:
        """The factors of a factored equation (or a sharding constraint: the identity from
        its operand to its given result)."""
        prim, ins, outs = eqn.primitive, eqn.invars, eqn.outvars
        if prim is prims.select_n_p and len(ins) == 3:
            # in the order XLA's select reads them (which, on true, on false): its operands'
            # order settles factors competing for an axis (``_precedence``)
            ins = [ins[0], ins[2], ins[1]]
        arrays = [a for a in ins if isinstance(a, Var) and id(a) in self.spec]
        if prim is prims.sort_p and outs[0].aval.ndim == 1:
            # XLA sorts a split vector whole: its split does not pass to the results (a
            # matrix's does, along the sorted dimension too)
            return [[(id(v), 0) for v in outs]]
        if prim in _POSITIONAL or prim is prims.sharding_constraint_p:
            rank = outs[0].aval.ndim
            members = [a for a in arrays if a.aval.ndim == rank] + list(outs)
            broadcast = prim in prims.ELEMENTWISE
            unlinked = _read_at_unknown_positions(eqn)
            return [[(id(v), d) for v in members
                     if not (broadcast and v.aval.shape[d] != outs[0].aval.shape[d])
                     and not (d in unlinked and v is ins[0])]
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
        if prim is prims.reshape_p:
            # in each group of dimensions the reshape joins or splits, the major ones: a split
            # of them takes one contiguous run of the group, before and after
            (x,), (out,) = ins, outs
            factors = []
            for old, new in reshape_groups(x.aval.shape, out.aval.shape):
                old = [d for d in old if x.aval.shape[d] != 1]
                new = [d for d in new if out.aval.shape[d] != 1]
                if old and new and isinstance(x, Var):
                    factors.append([(id(x), old[0]), (id(out), new[0])])
            return factors
        if prim is prims.gather_p:
            # take along an axis: the operand's other dimensions, and the indices', pass through
            (x, indices), (out,) = ins, outs
            axis, n = eqn.params["axis"], indices.aval.ndim
            factors = [[(id(x), d), (id(out), d if d < axis else d + n - 1)]
                       for d in range(x.aval.ndim) if d != axis and isinstance(x, Var)]
            return factors + [[(id(indices), j), (id(out), axis + j)] for j in range(n)
                              if isinstance(indices, Var)]
        if prim is prims.scatter_p:
            x, out = ins[0], outs[0]
            return [[(id(x), d), (id(out), d)] if isinstance(x, Var) else [(id(out), d)]
                    for d in range(out.aval.ndim)]
        if prim is prims.iota_p:
            return [[(id(outs[0]), d)] for d in range(outs[0].aval.ndim)]
        if prim in prims.LINALG:
            return _batch_factors(ins, outs)
        raise AssertionError(prim)

    # --- the typed program ---

    def _typed_loop(self, eqn, ins, eqns):
        """A loop's operands laid out as its body reads them (the carries as they are
        carried, a scan's ``xs`` with the scanned dimension whole), and its programs typed:
        the body's carried results laid out as the carries."""
        layout = _loop_layout(eqn)
        carry, body = self.carried[id(eqn)]
        want = [self.spec_of(a) for a in eqn.invars]
        for k, spec in zip(layout.carry, carry):
            want[k] = spec
        for k in layout.xs:
            want[k] = ((),) + tuple(want[k][1:])
        ins = [_laid_out(a, _typed_spec(orig.aval, w, self.mesh), self.mesh, eqns, eqn.source)
               for a, orig, w in zip(ins, eqn.invars, want)]
        params = dict(eqn.params)
        params[layout.body_name] = body.typed_program(
            [tuple(c) for c in carry] + [None] * (len(body.program.outvars) - len(carry)))
        if layout.cond_name is not None:
            operands = [self.spec_of(a) for a in eqn.invars]
            specs = [operands[k] for k in range(eqn.params["cond_nconsts"])] + list(carry)
            params[layout.cond_name] = self._solved(eqn.params[layout.cond_name],
                                                    specs).typed_program()
        return ins, params

    def _typed_branches(self, eqn, ins, eqns):
        """A cond's operands laid out as its branches read them, and its branches typed,
        each laying its results out as the cond's."""
        operands, results, branches = self.carried[id(eqn)]
        ins = ins[:1] + [_laid_out(a, _typed_spec(orig.aval, w, self.mesh), self.mesh, eqns,
                                   eqn.source)
                         for a, orig, w in zip(ins[1:], eqn.invars[1:], operands)]
        typed = tuple(b.typed_program([tuple(r) for r in results]) for b in branches)
        return ins, dict(eqn.params, branches=typed)

    def aval(self, atom):
        if isinstance(atom, Literal) or id(atom) not in self.spec:
            return atom.aval
        spec = self.whole_spec(atom)
        if id(atom) not in self.uneven:
            spec = _divided(atom.aval, spec, self.mesh)
        return _with_spec(atom.aval, spec, self.mesh)

    def typed_program(self, out_specs=None) -> Program:
        """The program with every value typed; ``out_specs`` (splits over Auto axes; None
        entries: as they are) lay its results out by a constraint at its end."""
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
            params = eqn.params
            if id(eqn) in self.carried:
                through = self._typed_branches if prim is prims.cond_p else self._typed_loop
                ins, params = through(eqn, ins, eqns)
            elif prim.kind != "op" and not (prim is prims.shard_map_p
                                            and eqn.params["mesh"] == self.mesh):
                ins = [_laid_out(a, _spec(orig.aval), self.mesh, eqns, eqn.source)
                       for a, orig in zip(ins, eqn.invars)]      # as traced
            outs = [typed(v) for v in eqn.outvars]
            eqns.append(Eqn(prim, ins, outs, params, eqn.source))
        outvars = [read(a) for a in self.program.outvars]
        if out_specs is not None:
            outvars = [a if w is None
                       else _laid_out(a, _typed_spec(orig.aval, w, self.mesh), self.mesh, eqns,
                                      None)
                       for a, orig, w in zip(outvars, self.program.outvars, out_specs)]
        return Program(constvars, invars, eqns, outvars, list(self.program.consts))


def spelling_reference(program: Program, arguments):
    """The layout JAX spells a compiled program's results after where they equal it, as
    (rank, sharding): the first argument's (None when it is not laid out on a mesh: a host
    array), else, for a program of no arguments, its first sharding constraint's."""
    if arguments:
        sharding = getattr(arguments[0], "sharding", None)
        if isinstance(sharding, NamedSharding):
            return len(getattr(arguments[0], "shape", ())), sharding
        return None
    for eqn in program.eqns:
        if eqn.primitive is prims.sharding_constraint_p and isinstance(
                eqn.params["sharding"], NamedSharding):
            return eqn.invars[0].aval.ndim, eqn.params["sharding"]
    return None


def result_shardings(typed, mesh, reference) -> list:
    """How results of types ``typed`` on ``mesh`` report their layout, as JAX spells a layout
    its compiler worked out: as ``reference`` (``spelling_reference``) where a result has its
    rank and layout, else one entry per dimension up to the last split one (``P('x',)``,
    ``P()`` when replicated). On a mesh with Explicit axes too, a result split over none of
    its Auto axes is spelt as its type is, one entry per dimension, and the others as worked
    out (whatever ``reference`` says)."""
    explicit = set(mesh.explicit_axes)
    shardings = []
    for aval in typed:
        spec = _spec(aval)
        if explicit and all(a in explicit for names in spec for a in names):
            entries = [names[0] if len(names) == 1 else (tuple(names) or None)
                       for names in spec]       # as typed
        else:
            entries = read_back_entries(spec, mesh)
        sharding = NamedSharding(mesh, PartitionSpec(*entries))
        if reference is not None and reference[0] == aval.ndim and not explicit \
                and reference[1].mesh == mesh \
                and read_back_entries(reference[1].spec, mesh) == entries:
            sharding = reference[1]         # the same layout: spelt as the argument's
        shardings.append(sharding)
    return shardings


# Equations the partitioner computes on whole values: they hold programs (other than the loops
# and branches it runs on blocks), or print.
WHOLE = frozenset(prims.CONTROL_FLOW + prims.CUSTOM_CALLS
                  + (prims.shard_map_p, prims.remat_p, prims.debug_print_p, prims.custom_lin_p,
                     prims.callback_p, prims.linear_solve_p))
_LOOPS = (prims.scan_p, prims.while_p)
_BLOCKWISE_CONTROL = _LOOPS + (prims.cond_p,)


def inlined_shard_map(eqn, mesh) -> bool:
    """A shard_map on ``mesh`` in a loop body or a branch of a run, computed there on its
    blocks by ``compiler.partition`` (its body is a per-device program, as the run's is):
    its replication checked (its body's types say how its values vary) and no partial sums
    or known-equal copies in its specs."""
    if eqn.primitive is not prims.shard_map_p or eqn.params["mesh"] != mesh \
            or eqn.params["check_vma"] is not True:
        return False
    return not any(spec.unreduced or spec.reduced
                   for spec in eqn.params["in_specs"] + eqn.params["out_specs"])


def _blockwise(eqn, mesh) -> bool:
    """Whether a loop's or a cond's programs hold only equations the partitioner runs on
    blocks (shard_maps on ``mesh`` among them: ``inlined_shard_map``)."""
    return all((e.primitive.kind == "op" and e.primitive not in WHOLE)
               or (e.primitive in _BLOCKWISE_CONTROL and _blockwise(e, mesh))
               or inlined_shard_map(e, mesh)
               for _, _, sub in sub_programs(eqn) for e in sub.eqns)


def _extended(carry, out) -> tuple:
    """A carry's spec, with the splits the body gives unsplit dimensions of it (where their
    axes are free in it)."""
    spec = list(carry)
    for d, names in enumerate(out):
        if names and not spec[d] and not any(n in used for used in spec for n in names):
            spec[d] = names
    return tuple(spec)


def _joined(specs) -> tuple:
    """The split of a value each of ``specs`` gives: per dimension the longest of its splits
    where they agree (each a major run of the longest), unsplit where they disagree, and no
    axis taken twice (the first dimension to take it keeps it)."""
    joined, used = [], set()
    for splits in zip(*specs):
        names = max(splits, key=len)
        if any(tuple(other) != tuple(names[:len(other)]) for other in splits):
            names = ()
        names = tuple(itertools.takewhile(lambda n: n not in used, names))
        used.update(names)
        joined.append(names)
    return tuple(joined)


def _taken(index, branches) -> list:
    """The branches a cond's ``index`` may pick: the one a constant picks (clamped, as
    ``switch`` does), else all."""
    if not isinstance(index, Literal):
        return branches
    return [branches[min(max(int(index.value), 0), len(branches) - 1)]]


class _LoopLayout:
    """Where a loop's constants, carries and scanned operands are among its operands, and
    which parameters hold its body (and condition)."""

    def __init__(self, consts, carry, xs, body_name, cond_name=None):
        self.consts, self.carry, self.xs = consts, carry, xs
        self.body_name, self.cond_name = body_name, cond_name

    def body(self, eqn) -> Program:
        return eqn.params[self.body_name]


def _loop_layout(eqn) -> _LoopLayout:
    p, n = eqn.params, len(eqn.invars)
    if eqn.primitive is prims.scan_p:
        c, k = p["num_consts"], p["num_carry"]
        return _LoopLayout(range(c), range(c, c + k), range(c + k, n), "jaxpr")
    c, b = p["cond_nconsts"], p["body_nconsts"]
    return _LoopLayout(range(c, c + b), range(c + b, n), range(0), "body_jaxpr", "cond_jaxpr")


def _read_at_unknown_positions(eqn) -> frozenset:
    """The dimensions of a dynamic slice at start indices that are values (not constants)
    which it reads partially: XLA's propagation does not carry the operand's split of them
    into the result (with constant starts it is a slice, which does)."""
    if eqn.primitive is not prims.dynamic_slice_p or \
            not any(isinstance(s, Var) for s in eqn.invars[1:]):
        return frozenset()
    x, out = eqn.invars[0].aval, eqn.outvars[0].aval
    return frozenset(d for d in range(out.ndim) if out.shape[d] != x.shape[d])


def _factored(eqn) -> bool:
    prim = eqn.primitive
    return (prim in _POSITIONAL or prim in _REDUCTIONS or prim in (
        prims.transpose_p, prims.broadcast_in_dim_p, prims.squeeze_p, prims.dot_general_p,
        prims.iota_p, prims.gather_p, prims.scatter_p, prims.reshape_p) + prims.LINALG)


def _batch_factors(ins, outs) -> list:
    """A matrix decomposition's or solve's batch dimensions (the first operand's leading
    ones, before its matrix): each passes through every operand and result that leads with
    it. The matrix dimensions are no factor: they stay whole."""
    shape = ins[0].aval.shape[:-2]
    members = [v for v in list(ins) + list(outs) if isinstance(v, Var)
               and v.aval.shape[:len(shape)] == shape]
    return [[(id(v), d) for v in members] for d in range(len(shape))]


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


def _unconstrained(layout) -> frozenset:
    """The dimensions a constraint's layout leaves to propagation (``P.UNCONSTRAINED``)."""
    spec = getattr(layout, "spec", ())
    return frozenset(d for d, entry in enumerate(spec) if entry is PartitionSpec.UNCONSTRAINED)


def _annotation_operands(eqn, mesh):
    """The operands an equation asks a layout of, with that layout (a NamedSharding): a
    sharding constraint's, and a shard_map's over ``mesh``."""
    if eqn.primitive is prims.sharding_constraint_p:
        layout = eqn.params["sharding"]
        if isinstance(eqn.invars[0], Var) and isinstance(layout, NamedSharding) \
                and layout.mesh == mesh:
            yield eqn.invars[0], layout
    elif eqn.primitive is prims.shard_map_p and eqn.params["mesh"] == mesh:
        for a, spec in zip(eqn.invars, eqn.params["in_specs"]):
            if isinstance(a, Var):
                yield a, NamedSharding(mesh, spec)


def _auto_part(names, fixed, mesh) -> tuple:
    """What a dimension's split ``names`` adds over Auto axes to the split ``fixed`` its type
    gives it over Explicit ones (nothing where it does not extend it)."""
    names = tuple(names)
    if names[:len(fixed)] != tuple(fixed):
        return ()
    added = names[len(fixed):]
    explicit = getattr(mesh, "explicit_axes", ())
    return () if any(a in explicit for a in added) else added


def _whole(aval, auto) -> tuple:
    """The split of a value of type ``aval`` that adds ``auto`` (per dimension) to it."""
    return tuple(f + tuple(a) for f, a in zip(_spec(aval), auto))


def _may_be_uneven(program: Program) -> set:
    """The values a split may cut into uneven blocks (``compiler.partition`` pads them):
    those an operation computes and only operations read, none of them a program's result,
    with nothing between that the partitioner computes on whole values. (Where they meet
    anything else, the value is typed by the axes that divide it.)"""
    eqns = program.eqns
    plain = [e.primitive.kind == "op" and e.primitive not in WHOLE
             and not any(True for _ in sub_programs(e)) for e in eqns]
    last_user: dict = {}
    read_by_other: set = {id(a) for a in program.outvars if isinstance(a, Var)}
    for k, eqn in enumerate(eqns):
        for a in eqn.invars:
            if isinstance(a, Var):
                last_user[id(a)] = k
                if not plain[k]:
                    read_by_other.add(id(a))
    barriers = [k for k, ok in enumerate(plain) if not ok]
    allowed = set()
    for k, eqn in enumerate(eqns):
        if not plain[k]:
            continue
        for v in eqn.outvars:
            end = last_user.get(id(v))
            if end is None or id(v) in read_by_other:
                continue
            if not any(k < b < end for b in barriers):
                allowed.add(id(v))
    return allowed


def _typed_spec(aval, auto, mesh) -> tuple:
    """How a value of type ``aval`` that adds ``auto`` to it is typed: along a dimension the
    split does not divide, the major axes that do."""
    return _divided(aval, _whole(aval, auto), mesh)


def _divided(aval, spec, mesh) -> tuple:
    """``spec``, along each dimension of ``aval`` it does not divide, cut to the major axes
    that do: how a value the propagation splits unevenly is typed and laid out (JAX pads its
    blocks; here it is computed whole along that dimension, and where it reaches a result,
    JAX lays it out so too)."""
    return tuple(dividing(names, size, mesh) for names, size in zip(spec, aval.shape))


def _wholes(program, autos) -> list:
    """A program's constants' and inputs' splits, from what each adds over Auto axes."""
    return [_whole(v.aval, a) for v, a in zip(program.constvars + program.invars, autos)]


def _unsplit(aval) -> tuple:
    return ((),) * aval.ndim


def _spec(aval) -> tuple:
    sharding = aval.type_sharding
    if sharding is None:
        return _unsplit(aval)
    return tuple(tuple(names) for names in sharding.spec)


def _with_spec(aval, spec, mesh):
    return aval.with_sharding(TypeSharding.of(mesh, tuple(spec)))


def _layout_spec(aval, layout, mesh) -> tuple:
    """Per dimension the axes ``layout`` splits ``aval`` over (unsplit where it is not a
    layout on ``mesh``), evenly or not."""
    if not isinstance(layout, NamedSharding) or layout.mesh != mesh:
        return _unsplit(aval)
    names = spec_names(layout.spec)
    if len(names) > aval.ndim:
        return _unsplit(aval)
    return tuple(tuple(n) for n in names) + ((),) * (aval.ndim - len(names))


def _laid_out(atom, spec, mesh, eqns, source):
    """``atom`` laid out by ``spec`` (a sharding constraint, when its type says otherwise)."""
    spec = tuple(tuple(names) for names in spec)
    if isinstance(atom, Literal) or _spec(atom.aval) == spec:
        return atom
    new = Var(_with_spec(atom.aval, spec, mesh))
    entries = [names if names else None for names in spec]
    eqns.append(Eqn(prims.sharding_constraint_p, [atom], [new],
                    {"sharding": NamedSharding(mesh, PartitionSpec(*entries))}, source))
    return new
