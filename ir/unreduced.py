"""Unreduced and reduced types: which operations accept them, and what their results are.

A value unreduced over mesh axis ``x`` (JAX's ``{U:x}``) is a partial sum: each device along
``x`` holds a term, and the value is their sum, not yet added. A value reduced over ``x``
(``{R:x}``) is replicated along ``x``, its copies known equal; its transpose is unreduced (the
cotangent of a reduced value is a partial sum), so a backward pass adds once, where JAX would.

An operation on an unreduced operand is only right where it is linear in it: ``add`` of two
partial sums over the same axes is a partial sum, ``mul`` by a value reduced over those axes
is one, a transpose or a ``reduce_sum`` of one is one. Anything else (``sin`` of a partial
sum) is JAX's NotImplementedError: the value must be reduced first (``reshard``, ``psum``).
Each rule here is JAX 0.10.2's ``ur_rule`` for its primitive:
``rule(*in_avals, **params) -> (unreduced, reduced)``, or a list of such pairs for a
primitive with several results. A primitive with no rule accepts neither.
"""
from __future__ import annotations

from ir import primitives as prims

ur_rules: dict = {}
# the primitives whose rule types every result (those that make values unreduced or reduced)
ALWAYS: set = set()

_ISSUE = "Please file an issue at https://github.com/jax-ml/jax/issues"
NONE = frozenset()


def _type_error(message: str):
    from ir.sharding import ShardingTypeError
    return ShardingTypeError(message)


_unchecked = [0]


class unchecked:
    """Within it, results are not typed unreduced or reduced (the verifier's shape check of
    lowered programs, where the casts between those types are gone)."""

    def __enter__(self):
        _unchecked[0] += 1

    def __exit__(self, *exc):
        _unchecked[0] -= 1


def typed(prim, in_avals, outs, params) -> list:
    """``outs`` (the shape rule's results) unreduced and reduced as ``prim``'s rule says, for
    operands some of which are unreduced or reduced (or an ``out_sharding`` that is)."""
    if prim.kind == "lowered" or _unchecked[0]:
        # a communication node of a lowered program (its front-end collective was typed), or
        # a shape check only
        return outs
    rule = ur_rules.get(prim)
    if rule is None:
        raise NotImplementedError(f"unreduced/reduced rule for {prim.name} is not implemented. "
                                  f"{_ISSUE}")
    found = rule(*in_avals, **params)
    pairs = found if isinstance(found, list) else [found] * len(outs)
    return [out.with_ur(frozenset(u), frozenset(r)) for out, (u, r) in zip(outs, pairs)]


def wants_rule(in_avals, params) -> bool:
    """Whether an operation's result types need an unreduced/reduced rule: an operand is
    unreduced or reduced, or its ``out_sharding`` (a reshard's ``sharding``) asks for a result
    that is."""
    for a in in_avals:
        if a.ur:
            return True
    if not params:
        return False
    given = params.get("out_sharding") or params.get("sharding")
    spec = _spec_of_sharding(given)
    return spec is not None and bool(spec.unreduced or spec.reduced)


def _spec_of_sharding(given):
    """The PartitionSpec an ``out_sharding`` (a NamedSharding, or a spec) names, or None."""
    from ir.sharding import PartitionSpec
    return given if isinstance(given, PartitionSpec) else getattr(given, "spec", None)


# --- elementwise: JAX's unop_ur_rule and nary_ur_rule -----------------------------------------

def _unary(name):
    def rule(x, **params):
        if x.unreduced:
            raise NotImplementedError(f"unreduced rule for {name} is not implemented. {_ISSUE}")
        return NONE, x.reduced
    return rule


def _nary_reduced(*avals) -> frozenset:
    """JAX's default_nary_reduced_rule: every reduced operand reduced over the same axes, and
    no other operand split, varying or merely replicated over them."""
    found = {a.reduced for a in avals if a.reduced}
    if len(found) > 1:
        raise _type_error(f"All inputs should be reduced across the same mesh axes. Got specs: "
                          f"{found}")
    reduced = next(iter(found)) if found else NONE
    if reduced:
        for a in avals:
            split = set(a.type_sharding.axes) if a.type_sharding is not None else set()
            if (split | a.vma) & reduced:
                raise _type_error(
                    "Inputs cannot be sharded/varying on the same axes that another input is "
                    "reduced on. Reshard the input which is reduced to be sharded on the mesh "
                    "axes it is reduced on via `jax.sharding.reshard(inp, jax.P(...))`. Got "
                    f"input type: {a.str_long()} and reduced spec: {reduced}")
            # (a rank-0 operand replicated over them is taken as reduced, as JAX reshards
            # one to reduced before the operation)
            if a.ndim and not (a.reduced | a.unreduced) >= reduced:
                raise _type_error(
                    "Inputs cannot be replicated on the same axes that another input is "
                    f"reduced on. Got input type: {a.str_long()} and reduced spec: {reduced}")
    return reduced


def _nary(name):
    def rule(*avals, **params):
        reduced = _nary_reduced(*avals)
        if any(a.unreduced for a in avals):
            raise NotImplementedError(f"unreduced rule for {name} is not implemented. {_ISSUE}")
        return NONE, reduced
    return rule


def _add(x, y, **params):
    reduced = _nary_reduced(x, y)
    xu, yu = x.unreduced, y.unreduced
    if xu and yu:
        if xu != yu:
            raise _type_error(f"lhs and rhs to `add` must be unreduced along the same mesh axes. "
                              f"Got lhs={set(xu)}, rhs={set(yu)}")
        return xu, reduced
    if xu or yu:
        one, other = ("lhs", "rhs") if xu else ("rhs", "lhs")
        raise _type_error(f"{one} is unreduced while {other} is not. `add` operation does not "
                          "allow this because there will be implicit communication. Please "
                          f"reduce {one} via `reshard` before calling `add`.")
    return NONE, reduced


def _mul(x, y, **params):
    reduced = _nary_reduced(x, y)
    xu, yu = x.unreduced, y.unreduced
    if xu and yu:
        raise _type_error("lhs and rhs to `mul` cannot be unreduced since mul is bilinear. "
                          f"Got lhs={set(xu)}, rhs={set(yu)}")
    if xu:
        if xu != y.reduced:
            raise _type_error("RHS should be reduced along the same axes LHS is unreduced on. "
                              f"Got lhs={x.str_long()} and rhs={y.str_long()}")
        return xu, NONE
    if yu:
        if x.reduced != yu:
            raise _type_error("LHS should be reduced along the same axes RHS is unreduced on. "
                              f"Got lhs={x.str_long()} and rhs={y.str_long()}")
        return yu, NONE
    return NONE, reduced


def _same(x, *rest, **params):
    """A linear rearrangement of one operand (transpose, reshape, a reduce_sum, a type
    conversion): unreduced and reduced as its operand."""
    return x.unreduced, x.reduced


for _p in prims.UNARY + prims.PREDICATES:
    ur_rules[_p] = _unary(_p.name)
for _p in prims.ARITHMETIC + prims.COMPARISON:
    ur_rules[_p] = _nary(_p.name)
ur_rules[prims.add_p] = _add
ur_rules[prims.mul_p] = _mul
for _p in (prims.transpose_p, prims.convert_element_type_p,
           prims.reduce_precision_p, prims.squeeze_p, prims.broadcast_in_dim_p,
           prims.slice_p, prims.rev_p, prims.stop_gradient_p, prims.copy_p, prims.name_p):
    ur_rules[_p] = _same


def _concatenate(*operands, **params):
    """Partial sums over the same axes, joined, are one (JAX's _concatenate_ur_rule)."""
    found = {a.unreduced for a in operands if a.unreduced}
    if len(found) > 1 or (found and any(not a.unreduced for a in operands)):
        raise _type_error("All operands should be unreduced along the same mesh axes. Got "
                          f"unreduced specs: {[set(a.unreduced) for a in operands]}")
    return (next(iter(found)) if found else NONE), _nary_reduced(*operands)


def _select(which, *cases, **params):
    """A choice between partial sums over the same axes, by a predicate equal everywhere."""
    if which.unreduced:
        raise NotImplementedError(f"unreduced rule for select_n's predicate is not implemented. "
                                  f"{_ISSUE}")
    unreduced, reduced = _concatenate(*cases)
    return unreduced, reduced


_slicing = [0]


class slicing_partial_sums:
    """Within it, a dynamic_slice of a partial sum is one (each device's term sliced alike):
    the partitioner's layout changes of unreduced blocks, which JAX's own rule refuses to
    users."""

    def __enter__(self):
        _slicing[0] += 1

    def __exit__(self, *exc):
        _slicing[0] -= 1


def _dynamic_slice(x, *starts, **params):
    if x.unreduced:
        if _slicing[0] and not any(s.unreduced for s in starts):
            return x.unreduced, x.reduced
        raise NotImplementedError(f"unreduced rule for dynamic_slice is not implemented. "
                                  f"{_ISSUE}")
    return NONE, x.reduced


ur_rules[prims.concatenate_p] = _concatenate
ur_rules[prims.select_n_p] = _select
ur_rules[prims.dynamic_slice_p] = _dynamic_slice


def _sharding_constraint(x, *, sharding, **params):
    """A reshard's result is unreduced and reduced as its target says: reducing a partial
    sum (the devices add their terms), or making one (one device's copy is the value)."""
    spec = getattr(sharding, "spec", None)
    if spec is None:
        if x.unreduced:
            raise NotImplementedError(f"unreduced/reduced rule for sharding_constraint to "
                                      f"{sharding!r} is not implemented. {_ISSUE}")
        return NONE, NONE
    return spec.unreduced, spec.reduced


ur_rules[prims.sharding_constraint_p] = _sharding_constraint


def _dot_general(x, y, *, dimension_numbers, out_sharding=None, **params):
    """JAX's _dot_general_ur_rule: no operand may be a partial sum (a product is bilinear);
    the result is one where ``out_sharding`` asks, over exactly the mesh axes both sides
    split their contracted dimensions over (each device's product is its term). Reduced
    operands give a result that is not (JAX's rule does not propagate it)."""
    if x.unreduced or y.unreduced:
        raise _type_error(f"lhs or rhs passed to dot_general cannot be unreduced. Got "
                          f"lhs={x.str_long()} and rhs={y.str_long()}")
    spec = _spec_of_sharding(out_sharding)
    if spec is None or not spec.unreduced:
        return NONE, NONE
    from ir.sharding_rules import partitions, spec_of
    (lc, rc), _ = dimension_numbers
    xs, ys = spec_of(x), spec_of(y)
    lhs_c, rhs_c = tuple(xs[d] for d in lc), tuple(ys[d] for d in rc)
    if lhs_c != rhs_c:
        raise _type_error("lhs and rhs contracting dims should be sharded identically when "
                          "out_sharding provided to dot_general mentions unreduced_axes. Got "
                          f"lhs_contracting_spec={partitions(lhs_c)}, "
                          f"rhs_contracting_spec={partitions(rhs_c)}")
    if spec.unreduced != frozenset(a for names in lhs_c for a in names):
        raise _type_error("out_sharding's unreduced axes should be equal to the contracting "
                          f"specs. Got unreduced axes={set(spec.unreduced)} and contracting "
                          f"spec={partitions(lhs_c)}")
    return spec.unreduced, NONE


ur_rules[prims.dot_general_p] = _dot_general


def split_contraction(x, y, dimension_numbers) -> frozenset | None:
    """The mesh axes both operands of a product split their contracted dimensions over,
    alike (the axes its result may be left a partial sum over); None where the two sides
    split them differently."""
    from ir.sharding_rules import spec_of
    (lc, rc), _ = dimension_numbers
    xs, ys = spec_of(x), spec_of(y)
    lhs_c, rhs_c = tuple(xs[d] for d in lc), tuple(ys[d] for d in rc)
    if lhs_c != rhs_c:
        return None
    return frozenset(a for names in lhs_c for a in names)


# --- higher-order: results as their programs give them ------------------------------------------

def _program_results(*in_avals, **params) -> list:
    """cond, while, remat, custom_jvp/vjp calls, scan: each result unreduced and reduced as
    its program's (every branch of a cond alike)."""
    programs = list(params.get("branches") or ())
    program = params.get("jaxpr") or params.get("body_jaxpr") or programs[0]
    pairs = [(a.unreduced, a.reduced) for a in program.out_avals]
    for other in programs[1:]:
        theirs = [(a.unreduced, a.reduced) for a in other.out_avals]
        if any(mine != their for mine, their in zip(pairs, theirs)):
            raise _type_error("cond branches must give results unreduced and reduced alike. "
                              f"Got {[a.str_long() for a in program.out_avals]} and "
                              f"{[a.str_long() for a in other.out_avals]}")
    return pairs


for _p in ((prims.cond_p, prims.while_p, prims.remat_p, prims.linear_solve_p, prims.scan_p)
           + prims.CUSTOM_CALLS):
    ur_rules[_p] = _program_results
    ALWAYS.add(_p)


def _pad(x, value, **params):
    """JAX's _pad_ur_rule: as the operand (a partial sum padded with zeros is one)."""
    if value.unreduced:
        raise NotImplementedError(f"unreduced rule for pad's padding value is not "
                                  f"implemented. {_ISSUE}")
    return x.unreduced, x.reduced


ur_rules[prims.pad_p] = _pad


def _reduce_sum(x, *, axes, out_sharding=None, **params):
    """JAX's _reduce_sum_ur_rule: a sum of partial sums is one; ``out_sharding`` may leave
    the sum a partial one over the mesh axes that split the summed dimensions (or over
    which the operand already is one)."""
    spec = _spec_of_sharding(out_sharding)
    if spec is None or not spec.unreduced:
        return x.unreduced, x.reduced
    from ir.sharding_rules import spec_of
    split = {n for d, names in enumerate(spec_of(x)) if d in axes for n in names}
    if not spec.unreduced <= (split | x.unreduced):
        raise _type_error("out_sharding's unreduced axes should be in operand's specs that "
                          f"were summed over. Got operand={x.str_long()}, axes={tuple(axes)}, "
                          f"unreduced_spec={set(spec.unreduced)}")
    return spec.unreduced, x.reduced


ur_rules[prims.reduce_sum_p] = _reduce_sum


def _custom_lin(*in_avals, out_shapes, out_ur=None, **params) -> list:
    """A custom_vjp's tangents: unreduced and reduced as their primals (``out_ur``)."""
    if out_ur is None:
        return [(NONE, NONE)] * len(out_shapes)
    return [(frozenset(u), frozenset(r)) for u, r in out_ur]


ur_rules[prims.custom_lin_p] = _custom_lin
ALWAYS.add(prims.custom_lin_p)


def _dynamic_update_slice(operand, update, *starts, **params):
    """JAX's _dynamic_update_slice_ur_rule: operand and update unreduced, and reduced, over
    the same axes."""
    for which in ("unreduced", "reduced"):
        if getattr(operand, which) != getattr(update, which):
            raise _type_error(f"dynamic_update_slice operand and update must be {which} along "
                              f"the same axes. Got operand sharding {operand.str_long()} and "
                              f"update sharding {update.str_long()}.")
    return operand.unreduced, operand.reduced


ur_rules[prims.dynamic_update_slice_p] = _dynamic_update_slice


def _reshape(x, *, out_sharding=None, **params):
    """JAX's _reshape_ur_rule: as the operand; an ``out_sharding`` must name the operand's
    unreduced and reduced axes, and no others."""
    spec = _spec_of_sharding(out_sharding)
    for which in ("unreduced", "reduced"):
        mine = getattr(x, which)
        theirs = getattr(spec, which) if spec is not None else NONE
        if mine and spec is not None and mine != theirs:
            raise ValueError(f"out_sharding passed to reshape must be {which} over the same "
                             f"mesh axes as operand. Got out_sharding: {spec} and operand "
                             f"type: {x.str_long(short=True)}")
        if not mine and theirs:
            raise ValueError(f"out_sharding passed to `reshape` cannot contain {which} axes. "
                             f"Got {out_sharding}")
    return x.unreduced, x.reduced


ur_rules[prims.reshape_p] = _reshape
