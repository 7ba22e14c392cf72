"""Replication checking: for every body value, the mesh axes it may vary over (its vma).

The checker is an abstract interpreter over sets of mesh axes. Each primitive has a rule
``rule(in_vmas, **params) -> (required_in_vmas, out_vma)``: what each operand must be lifted to
first (the tracer inserts a visible ``pvary`` equation for that), and what its results vary
over (one set for every result, or a list with one set per result). Inputs vary over the axes their in_spec names; ``psum`` over an axis makes a value
invariant there (each collective's rule is declared with it, ``ir.collectives``); ordinary
operations join.
"""
from __future__ import annotations

from ir import primitives as prims
from ir import collectives as coll
from ir.core import Literal
from ir.interpreter import Interpreter
from ir.primitives import RuleTable
from ir.sharding import ReplicationError, spec_axes  # noqa: F401  (raised here, defined in ir)

vma_rules = RuleTable("replication")


def _union(vmas) -> frozenset:
    if not vmas:
        return frozenset()
    first = vmas[0]
    for vma in vmas:
        if not vma <= first:
            return frozenset().union(*vmas)
    # the common case: every operand varies over the same axes or fewer (a frozenset is
    # returned as it is)
    return frozenset(first)


def join_rule(in_vmas, **params):
    """Ordinary operations: every operand is lifted to the union, and so is the result."""
    out = _union(in_vmas)
    return [out] * len(in_vmas), out


def _untyped_rule(in_vmas, **params):
    return list(in_vmas), _union(in_vmas)


# Explicit lists, so a test can hold coverage against the registry.
JOIN_PRIMITIVES = (
    prims.UNARY + prims.ARITHMETIC + prims.COMPARISON + prims.REDUCTIONS + (
        prims.is_finite_p, prims.select_n_p, prims.convert_element_type_p,
        prims.broadcast_in_dim_p, prims.reshape_p, prims.transpose_p, prims.squeeze_p,
        prims.concatenate_p, prims.slice_p, prims.dynamic_slice_p,
        prims.dynamic_update_slice_p, prims.gather_p, prims.scatter_p, prims.iota_p,
        prims.rev_p, prims.pad_p, prims.argmax_p, prims.argmin_p, prims.cumsum_p,
        prims.dot_general_p, prims.sharding_constraint_p, prims.device_put_p, prims.threefry2x32_p,
        prims.stop_gradient_p, prims.copy_p, prims.signbit_p, prims.cumprod_p, prims.cummax_p,
        prims.cummin_p, prims.sort_p, prims.searchsorted_p, prims.bitcast_convert_type_p,
        prims.reduce_precision_p, prims.fft_p, prims.callback_p)
    + prims.LINALG)
for _p in JOIN_PRIMITIVES:
    vma_rules[_p] = join_rule
# the operations whose operands JAX's standard rule asks to vary alike
_STANDARD_VMA = frozenset(JOIN_PRIMITIVES) - {prims.callback_p}
# Collectives: their declared rules (ir.collectives).
for _c in coll.FRONT_END:
    vma_rules[_c.prim] = _c.vma
vma_rules[prims.debug_print_p] = _untyped_rule
vma_rules[prims.shard_alike_p] = join_rule
vma_rules[prims.inspect_sharding_p] = _untyped_rule
vma_rules[prims.check_p] = _untyped_rule


def pvary_error_check(vma, mesh_axes, aval, axis_order, name="pvary"):
    """pvary only casts invariant values: an axis already varied over is an error. ``name``
    is what the user called (``pcast`` reads ``pcast(..., to='varying')``)."""
    already = [a for a in mesh_axes if a in vma]
    if already:
        call = "pcast(..., to='varying')" if name == "pcast" else name
        raise ValueError(
            f"{name}: the operand has type {aval.str_short(axis_order)} and already varies over "
            f"{tuple(already)}; {call} only casts invariant values to varying.")


def infer_types(prim, in_vmas, params):
    """(required operand vmas, result vma) for one primitive."""
    try:
        rule = vma_rules[prim]
    except prims.MissingRuleError:
        raise NotImplementedError(
            f"No replication rule for {prim}. As a workaround, pass the check_vma=False "
            "argument to shard_map.") from None
    return rule(list(in_vmas), **params)


# jax_auto_pcast: an operation lifts operands that vary over fewer axes (on), or refuses them
# with JAX's error (off)
_auto_pcast = [True]


def set_auto_pcast(on: bool) -> None:
    _auto_pcast[0] = bool(on)


def check_vmas_match(prim, in_vmas) -> None:
    """With ``jax_auto_pcast`` off, JAX's ValueError for operands of an operation that vary
    over different axes (a literal invariant): the user casts them (``pcast``) instead."""
    if _auto_pcast[0] or len(in_vmas) < 2 or prim not in _STANDARD_VMA:
        return
    if any(vma != in_vmas[0] for vma in in_vmas[1:]):
        raise ValueError(
            f"Primitive {prim.name} requires varying manual axes to match, but got "
            f"{list(in_vmas)}. Please open an issue at https://github.com/jax-ml/jax/issues "
            "and as a temporary workaround pass the check_vma=False argument to "
            "`jax.shard_map`")


def type_operands(trace, prim, tracers, params):
    """Lift operands of a primitive traced in a shard_map body; return (operands, out vma).

    Outside a body values carry no vma. With the check on, an operand that varies over fewer
    axes than required gets an explicit ``pvary`` equation; literals are never lifted.
    """
    shard = trace.shard
    if shard is None:
        return tracers, frozenset()
    in_vmas = [t.aval.vma for t in tracers]
    if prim is coll.pvary_p and shard.check_vma:
        pvary_error_check(in_vmas[0], params["mesh_axes"], tracers[0].aval, shard.mesh.axis_names)
    required, out_vma = infer_types(prim, in_vmas, params)
    if shard.check_vma:
        check_vmas_match(prim, in_vmas)
        tracers = [_lift(trace, t, want) for t, want in zip(tracers, required)]
    return tracers, out_vma


def _lift(trace, tracer, want):
    vma = tracer.aval.vma
    if want <= vma or isinstance(trace.atom(tracer), Literal):
        return tracer
    return lift_operand(trace, tracer, want - vma)


def lift_operand(trace, tracer, missing):
    """``tracer`` made varying over ``missing`` as an operation needs it (JAX's auto pcast):
    over the axes it is reduced over by ``reduced_vary_cast`` (its transpose makes the
    cotangent a partial sum), over the others by ``pvary``."""
    names = trace.shard.mesh.axis_names
    reduced = tuple(a for a in names if a in missing and a in tracer.aval.reduced)
    if reduced:
        tracer = trace.process_primitive(coll.reduced_vary_cast_p, [tracer],
                                         {"mesh_axes": reduced})[0]
    axes = tuple(a for a in names if a in missing and a not in reduced)
    if not axes:
        return tracer
    return trace.process_primitive(coll.pvary_p, [tracer], {"mesh_axes": axes})[0]


# --- the static checker over programs -----------------------------------------------------------

class _VmaChecker(Interpreter):
    """The replication checker as a program walker: each value is ``(vma, origins)``."""
    locates_errors = False

    def __init__(self):
        self.order = 0

    def read_literal(self, literal):
        return _INVARIANT

    def eval_equation(self, eqn, values):
        operand_vmas = [vma for vma, _ in values]
        _, out_vma = infer_types(eqn.primitive, operand_vmas, eqn.params)
        operand_origins = [origins for _, origins in values]
        order, self.order = self.order, self.order + 1
        return [(vma, merge_origins(operand_origins, operand_vmas, vma, order, eqn.source))
                for vma in per_output(out_vma, len(eqn.outvars))]


_INVARIANT = (frozenset(), {})


def infer_vma(program, in_vmas):
    """Abstract interpretation of a body program: (vma of each output, origin of each axis).

    The origin of an axis in an output is the source of the equation where the value it derives
    from first came to vary over it (absent when that is an input); see ``merge_origins``.
    """
    args = [(frozenset(vma), input_origins(vma)) for vma in in_vmas]
    outs = _VmaChecker().run(program, args, [_INVARIANT] * len(program.constvars))
    return [vma for vma, _ in outs], [origin_sources(origins) for _, origins in outs]


def input_origins(vma) -> dict:
    """An input varies over its axes from the start: the earliest origin, with no source."""
    return {axis: (-1, None) for axis in vma}


def merge_origins(operand_origins, operand_vmas, out_vma, order: int, source) -> dict:
    """``{axis: (order, source)}`` of a result: for each axis an operand varies over, the
    earliest origin among those operands; an axis no operand varies over starts here.

    Taking the earliest makes an implicit ``pvary`` lift (a traced equation, but nothing in
    eager mode) never the origin of an axis another operand already varied over, so eager and
    traced bodies name the same line.
    """
    origin: dict = {}
    for origins in operand_origins:
        for axis, (k, src) in origins.items():
            if axis in out_vma and (axis not in origin or k < origin[axis][0]):
                origin[axis] = (k, src)
    for axis in out_vma - _union(operand_vmas):
        origin.setdefault(axis, (order, source))
    return origin


def origin_sources(origin: dict) -> dict:
    """``{axis: source}`` for the axes whose origin has a known source line."""
    return {axis: src for axis, (_, src) in origin.items() if src is not None}


def per_output(out_vma, n: int) -> list:
    """The vma of each of ``n`` results from what a rule returned."""
    if isinstance(out_vma, (list, tuple)):
        return list(out_vma)
    return [out_vma] * n


def check_out_specs(*, fn_name, flag, mesh, out_specs, out_vmas, out_origins, out_paths,
                    manual_axes=None):
    """Reject out_specs that leave out an axis an output may vary over (SEMANTICS 3.5).
    Only the shard_map's own manual axes count (None: every mesh axis)."""
    failures = []
    axes = mesh.axis_names if manual_axes is None else manual_axes
    for spec, vma, origin, path in zip(out_specs, out_vmas, out_origins, out_paths):
        unnamed = [a for a in axes if a not in spec_axes(spec)]
        bad = [a for a in unnamed if a in vma]
        if bad:
            failures.append(_failure_text(spec, unnamed, bad, origin, path, vma, axes))
    if not failures:
        return
    if len(failures) == 1:
        body = failures[0]
    else:
        body = "\n\n".join("* " + f for f in failures)
    sizes = tuple(mesh.shape.values())
    raise ReplicationError(
        f"shard_map applied to the function '{fn_name}' was given out_specs which require "
        "replication which can't be statically inferred given the mesh:\n\n"
        f"The mesh given has shape {sizes} with corresponding axis names {mesh.axis_names}.\n\n"
        f"{body}\n\n"
        "Check if these output values are meant to be replicated over those mesh axes. If not, "
        "consider revising the corresponding out_specs entries. If so, consider disabling the "
        f"check by passing the {flag}=False argument to shard_map.")


def _axes_text(axes) -> str:
    if len(axes) == 1:
        return f"mesh axis '{axes[0]}'"
    return "mesh axes {" + ",".join(axes) + "}"


def _failure_text(spec, unnamed, bad, origin, path, vma, axes) -> str:
    """One output's failure. Where the spec leaves several axes unnamed, JAX 0.10.2's words
    (the axes it may vary over, those it may not, and those it does); then, as for one axis,
    where it first varies over the first of them, and what to do (SEMANTICS 3.5)."""
    first = bad[0]
    where = origin.get(first)
    origin_text = f" (it first varies over '{first}' at {where})" if where else ""
    if len(unnamed) > 1:
        named = ",".join(a for a in axes if a not in unnamed)
        varying = ",".join(a for a in axes if a in vma)
        claim = (f"is only varying across mesh axes {{{named}}} and not {{{','.join(bad)}}}, "
                 f"but it was inferred to be possibly varying over {{{varying}}}")
    else:
        claim = (f"is replicated across {_axes_text(unnamed)}, but it may vary over "
                 f"{_axes_text(bad)}")
    return (f"out_specs{path} is {spec!r} which implies that the corresponding output value "
            f"{claim}{origin_text}. Reduce it over those axes (for example with psum) or "
            f"mention them in out_specs{path}.")
