"""Automatic differentiation as program transformations.

- ``jvp_program_with_consts``: a program of (primals, tangents) -> (outputs, output tangents),
  traced by running the program under a JVP trace whose rules bind into a program trace.
- ``partial_eval``: split a program into the part computable from known inputs (which also
  outputs the residuals the rest needs) and the part that needs the unknown inputs.
- ``backward_pass``: transpose a program linear in some inputs: equations that do not touch
  the linear inputs run forward first (recomputation), then the linear ones are transposed in
  reverse, each by its primitive's transpose rule.

The rule tables (``jvp_rules``, ``transpose_rules``, ``partial_eval_rules``) are filled by the
rule modules (``ad_rules``, ``ad_control``, ``ad_linalg``, ``ad_shard_map``,
``collective_rules``, ``remat``, ``custom_ad``), which build on this module; the user-facing
transformations (``compiler.autodiff``) import them all. Every step binds primitives in the
current trace, so a gradient runs eagerly, becomes part of a jitted program, or runs inside a
shard_map body alike.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from compiler.layouts import layout_of
from compiler.shard_map import current_shard_context
from compiler.tracing import (UNKNOWN, Trace, Tracer, aval_of, bind, current_trace,
                              eval_program, inner_concrete, inner_independent, replaying,
                              traced_mesh, set_current_trace, trace_to_program, values_known_now,
                              weakly_typed)
from ir import dtypes
from ir import primitives as prims
from ir.core import Aval, Eqn, Literal, Program, Var
from ir.primitives import RuleTable
from ir.sharding import NamedSharding, PartitionSpec
from ir.sharding_rules import named_sharding, partitions, spec_of

jvp_rules = RuleTable("jvp")
transpose_rules = RuleTable("transpose")
partial_eval_rules: dict = {}          # higher-order primitives that split themselves


# --- zeros and sums ------------------------------------------------------------------------------

def is_differentiable(aval: Aval) -> bool:
    return dtypes.is_inexact(aval.dtype)


def zeros_like_aval(aval: Aval):
    """Zeros of ``aval``'s type (shape, dtype and sharding), bound in the current trace."""
    return full_like_aval(aval, 0)


def full_like_aval(aval: Aval, value):
    """``value`` filling ``aval``'s type (shape, dtype and sharding), bound in the current
    trace: a constant a rule selects or combines with values of that type."""
    fill = np.full((), value, aval.dtype)
    filled = bind(prims.broadcast_in_dim_p, fill, shape=aval.shape, broadcast_dimensions=())
    if aval.shape != () and aval.type_sharding is not None:
        filled = bind(prims.sharding_constraint_p, filled, sharding=named_sharding(aval))
    if aval.vma:
        # varying as the type says (JAX's pvary of zeros): a loop carry or a cotangent of
        # this type then keeps its type, and its transpose sums nothing over those axes
        from ir import collectives as coll
        filled = bind(coll.pvary_p, filled, mesh_axes=tuple(sorted(aval.vma)))
    if aval.ur:
        filled = _as_ur(filled, aval, value)
    return filled


def _as_ur(value, aval: Aval, fill):
    """``value`` (``fill`` on every device) typed unreduced and reduced as ``aval``: in a
    shard_map body by the casts (each device's term of an unreduced one is the value: right
    for zeros, as JAX's zeros of such a type); outside, laid out so on the mesh (one device
    holding the value, the others zeros)."""
    from ir import collectives as coll
    from ir.sharding import current_mesh
    if aval.shape != () and aval_of(value).shape == ():
        value = bind(prims.broadcast_in_dim_p, value, shape=aval.shape, broadcast_dimensions=())
    if current_shard_context() is not None:
        if aval.reduced:
            value = bind(coll.preduced_p, value, mesh_axes=tuple(sorted(aval.reduced)))
        if aval.unreduced:
            # every device's term is the value: right for zeros only (the sum of the terms)
            axes = tuple(sorted(aval.unreduced))
            if fill != 0:
                raise NotImplementedError(f"a constant other than zero of type "
                                          f"{aval.str_long()} in a shard_map body")
            value = bind(coll.pvary_p, value, mesh_axes=axes)
            value = bind(coll.vary_unreduced_cast_p, value, mesh_axes=axes)
        return value
    typed = aval.type_sharding
    mesh = typed.mesh if typed is not None else current_mesh()
    if mesh is None:
        raise NotImplementedError(f"a value of type {aval.str_long()} outside any mesh")
    entries = partitions(typed.spec) if typed is not None else ()
    return bind(prims.sharding_constraint_p, value, sharding=NamedSharding(
        mesh, PartitionSpec(*entries, unreduced=aval.unreduced, reduced=aval.reduced)))


def typed_as(aval: Aval, *operands, order=None) -> dict:
    """``{"out_sharding": ...}`` making a result split as ``aval`` is (its dimensions taken in
    ``order``), when ``aval`` or an operand names a split; else nothing. Transpose rules give
    cotangents their primal's type this way, as JAX's do: a reduced primal's cotangent is
    unreduced (each device's product its term), an unreduced one's reduced."""
    shardings = [aval.type_sharding] + [aval_of(x).type_sharding for x in operands]
    mesh = next((s.mesh for s in shardings if s is not None), None)
    if mesh is None and aval.ur:
        from ir.sharding import current_mesh
        mesh = current_mesh()
    if mesh is None:
        return {}
    spec = spec_of(aval)
    if order is not None:
        spec = tuple(spec[d] for d in order)
    ct = aval.to_ct()
    return {"out_sharding": NamedSharding(mesh, PartitionSpec(
        *partitions(spec), unreduced=ct.unreduced, reduced=ct.reduced))}


def as_typed(value, aval: Aval):
    """``value`` resharded to ``aval``'s sharding where its own differs (a cotangent of a
    split primal, or of an unsplit one computed from split values)."""
    have = aval_of(value).type_sharding
    if have == aval.type_sharding:
        return value
    mesh = (aval.type_sharding or have).mesh
    target = named_sharding(aval) or NamedSharding(mesh, PartitionSpec())
    return bind(prims.sharding_constraint_p, value, sharding=target)


def instantiate(value, aval: Aval):
    return zeros_like_aval(aval) if value is None else value


def add_tangents(a, b):
    """Sum of two tangents or cotangents, either of which may be a symbolic zero (None)."""
    if a is None:
        return b
    if b is None:
        return a
    return bind(prims.add_p, a, b)


# --- the JVP trace -------------------------------------------------------------------------------

class JVPTracer(Tracer):
    __slots__ = ("_trace", "primal", "tangent", "_weak")

    def __init__(self, trace, primal, tangent):
        self._trace = trace
        self.primal = primal
        self.tangent = tangent          # None: a symbolic zero
        self._weak = False

    @property
    def weak(self) -> bool:
        """Weakly typed (JAX's weak_type): marked so (a Python number given to jvp, what only
        such values computed), or its primal is."""
        return self._weak or weakly_typed(self.primal)

    @weak.setter
    def weak(self, value: bool) -> None:
        self._weak = bool(value)

    @property
    def aval(self):
        return aval_of(self.primal)

    def _layout(self):
        return layout_of(self.primal)

    def _axis_order(self):
        inner = self.primal
        return inner._axis_order() if isinstance(inner, Tracer) else ()

    def independent_of_inputs(self) -> bool:
        """No tangent: JAX's jvp would have handed the primal on untraced."""
        return self.tangent is None and inner_independent(self.primal)

    def concrete_value(self, what: str, cls):
        """The primal's value, where it is known (as JAX's jvp gives it to Python)."""
        if not values_known_now():
            raise self._concretization_error(what, cls)
        return inner_concrete(self.primal, what, cls)


class JVPTrace(Trace):
    """Carries a tangent beside every value; rules compute both in the parent trace."""

    def __init__(self, parent: Trace):
        self.parent = parent

    def lift(self, value):
        return JVPTracer(self, value, None)

    def process_primitive(self, prim, tracers, params):
        primals = [t.primal for t in tracers]
        tangents = [t.tangent for t in tracers]
        with set_current_trace(self.parent):
            if all(t is None for t in tangents):
                outs = bind(prim, *primals, **params)
                outs = outs if prim.multiple_results else [outs]
                out_tangents = [None] * len(outs)
            else:
                outs, out_tangents = jvp_rules[prim](primals, tangents, **params)
        return [JVPTracer(self, p, t) for p, t in zip(outs, out_tangents)]

    def process_shard_map(self, fun, args, params):
        """Stage the call as a one-equation program traced under this trace (so the body may
        close over values carrying tangents), then evaluate it here: the shard_map equation's
        JVP rule runs, as for ``grad``."""
        tracers = [self.to_tracer(a) for a in args]
        program, consts, _ = trace_to_program(
            lambda *vals: current_trace().process_shard_map(fun, list(vals), params),
            [t.aval for t in tracers], shard=current_shard_context(), parent=self)
        flat = Program([], program.constvars + program.invars, program.eqns, program.outvars)
        with set_current_trace(self):
            return eval_program(flat, list(consts) + tracers)


def jvp_program_with_consts(program: Program, nonzero: list, *, shard=None, known=None):
    """The program (inputs, tangents of the inputs marked ``nonzero``) -> (outputs, tangents
    of every output; zeros instantiated), with the arrays a custom rule (custom_jvp/custom_vjp)
    closed over as leading inputs: (that program, those arrays' values). ``known``: the values
    of the program's inputs, where they are known now (a gradient's), so that a custom rule
    may branch on them."""
    in_avals = program.in_avals
    tangent_avals = [a for a, nz in zip(in_avals, nonzero) if nz]

    def fun(*args):
        primals = list(args[:len(in_avals)])
        it = iter(args[len(in_avals):])
        tangents = [next(it) if nz else None for nz in nonzero]
        outs, out_tangents = jvp_eval(program, primals, tangents)
        return list(outs) + [instantiate(t, aval_of(o)) for t, o in zip(out_tangents, outs)]

    if known is not None:
        known = list(known) + [UNKNOWN] * len(tangent_avals)
    jvp_prog, consts, _ = trace_to_program(fun, in_avals + tangent_avals, shard=shard,
                                           parent=current_trace(), known=known)
    jvp_prog = Program([], jvp_prog.constvars + jvp_prog.invars, jvp_prog.eqns,
                       jvp_prog.outvars)
    return jvp_prog, consts


def jvp_eval(program: Program, primals, tangents):
    """Evaluate ``program`` on (primal, tangent) pairs in the current trace."""
    trace = JVPTrace(current_trace())
    args = [JVPTracer(trace, p, t) for p, t in zip(primals, tangents)]
    with set_current_trace(trace):
        outs = eval_program(program, args)
    outs = [trace.to_tracer(o) for o in outs]
    return [o.primal for o in outs], [o.tangent for o in outs]


# --- partial evaluation ------------------------------------------------------------------------

@dataclasses.dataclass
class Split:
    """A program split into its known part and its unknown part.

    known:   known inputs -> known outputs + residuals
    unknown: residuals + unknown inputs -> unknown outputs
    """
    known: Program
    unknown: Program
    out_unknown: list          # per original output: computed by the unknown part
    num_residuals: int
    # id of a known-part equation a rule made -> the equation it came from (remat asks its
    # policy about the original)
    origin: dict = dataclasses.field(default_factory=dict)


def partial_eval(program: Program, unknown_in: list, instantiate: list) -> Split:
    """Split ``program`` given which inputs are unknown. Outputs marked ``instantiate`` are
    produced by the unknown part even if known (passed through as residuals).

    Not on the shared loop (``ir.interpreter``): it builds two programs from one, and which
    known values become residuals depends on every later use, not on one equation at a
    time."""
    unknown: set = {id(v) for v, u in zip(program.invars, unknown_in) if u}
    known_eqns, unknown_eqns = [], []
    # Known values a rule chose to recompute on the unknown side: later unknown equations
    # read the recomputed variable instead of keeping the known one as a residual.
    recomputed: dict = {}
    origin: dict = {}
    for eqn in program.eqns:
        ins_unknown = [isinstance(a, Var) and id(a) in unknown for a in eqn.invars]
        if not any(ins_unknown):
            known_eqns.append(eqn)
            continue
        rule = partial_eval_rules.get(eqn.primitive)
        if rule is None:
            eqn = _renamed(eqn, recomputed)
            unknown_eqns.append(eqn)
            unknown.update(id(v) for v in eqn.outvars)
            continue
        k_eqns, u_eqns, unknown_outs, *extra = rule(eqn, ins_unknown)
        # the known side reads known values as they are; only the unknown side reads the
        # recomputed ones
        u_eqns = [_renamed(e, recomputed) for e in u_eqns]
        origin.update((id(k), eqn) for k in k_eqns)
        known_eqns.extend(k_eqns)
        unknown_eqns.extend(u_eqns)
        # whatever the unknown side computes is unknown here, recomputed values included
        unknown.update(id(v) for v in unknown_outs)
        unknown.update(id(v) for e in u_eqns for v in e.outvars)
        for old, new in (extra[0] if extra else {}).items():
            recomputed[old] = new
            unknown.add(id(new))
    out_unknown = [isinstance(a, Var) and id(a) in unknown for a in program.outvars]
    residuals = _residuals(program, unknown, unknown_eqns, out_unknown, instantiate)
    known_outs = [a for a, u, inst in zip(program.outvars, out_unknown, instantiate)
                  if not u and not inst]
    unknown_outs = [a for a, u, inst in zip(program.outvars, out_unknown, instantiate)
                    if u or inst]
    known_in = [v for v, u in zip(program.invars, unknown_in) if not u]
    unknown_invars = [v for v, u in zip(program.invars, unknown_in) if u]
    known = Program([], known_in, known_eqns, known_outs + residuals)
    rest = Program([], residuals + unknown_invars, unknown_eqns, unknown_outs)
    flags = [u or inst for u, inst in zip(out_unknown, instantiate)]
    return Split(known, rest, flags, len(residuals), origin)


def _renamed(eqn: Eqn, recomputed: dict) -> Eqn:
    if not recomputed or not any(id(a) in recomputed for a in eqn.invars):
        return eqn
    invars = [recomputed.get(id(a), a) for a in eqn.invars]
    return Eqn(eqn.primitive, invars, eqn.outvars, eqn.params, eqn.source)


def _residuals(program, unknown, unknown_eqns, out_unknown, instantiate) -> list:
    """Known variables the unknown part reads, in first-use order."""
    seen: dict = {}

    def need(atom):
        if isinstance(atom, Var) and id(atom) not in unknown and id(atom) not in seen:
            seen[id(atom)] = atom

    for eqn in unknown_eqns:
        for atom in eqn.invars:
            need(atom)
    for atom, u, inst in zip(program.outvars, out_unknown, instantiate):
        if inst and not u:
            need(atom)
    return list(seen.values())


# --- the backward pass ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Linear:
    """An input the program is linear in (JAX's UndefinedPrimal): it has a type, no value."""
    aval: Aval


def backward_pass(program: Program, args, cts_out) -> list:
    """Cotangents of the ``Linear`` inputs of ``program`` given output cotangents (None for
    zero). Non-linear equations run forward first; linear ones are transposed in reverse.

    Not on the shared loop (``ir.interpreter``): the transpose walks the equations backwards,
    and reads forward values after the point where a forward walk frees them."""
    env: dict = {}
    linear: set = set()
    for var, arg in zip(program.invars, args):
        if isinstance(arg, Linear):
            linear.add(id(var))
        else:
            env[id(var)] = arg

    def read(atom):
        return atom.value[()] if isinstance(atom, Literal) else env[id(atom)]

    def is_linear(atom):
        return isinstance(atom, Var) and id(atom) in linear

    linear_eqns = []
    for eqn in program.eqns:
        if any(is_linear(a) for a in eqn.invars):
            linear_eqns.append(eqn)
            linear.update(id(v) for v in eqn.outvars)
            continue
        with replaying(eqn.source, traced_mesh(eqn)):
            outs = bind(eqn.primitive, *[read(a) for a in eqn.invars], **eqn.params)
        outs = outs if eqn.primitive.multiple_results else [outs]
        for var, value in zip(eqn.outvars, outs):
            env[id(var)] = value

    cts: dict = {}

    def accumulate(var, ct):
        if ct is not None:
            cts[id(var)] = add_tangents(cts.get(id(var)), as_typed(ct, var.aval))

    for atom, ct in zip(program.outvars, cts_out):
        if is_linear(atom):
            accumulate(atom, ct)
    for eqn in reversed(linear_eqns):
        out_cts = [cts.pop(id(v), None) for v in eqn.outvars]
        if all(ct is None for ct in out_cts):
            continue
        operands = [Linear(a.aval) if is_linear(a) else read(a) for a in eqn.invars]
        try:
            rule = transpose_rules[eqn.primitive]
        except prims.MissingRuleError:
            raise NotImplementedError(
                f"Transpose rule (for reverse-mode differentiation) for '{eqn.primitive}' "
                "not implemented") from None
        with replaying(eqn.source, traced_mesh(eqn)):
            in_cts = rule(out_cts if eqn.primitive.multiple_results else out_cts[0],
                          *operands, **eqn.params)
            for atom, ct in zip(eqn.invars, in_cts):
                if is_linear(atom):
                    accumulate(atom, ct)
    return [cts.get(id(v)) for v in program.invars if id(v) in linear]
