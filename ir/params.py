"""What each primitive takes: how many operands, and which parameters (required, optional).

The verifier holds every equation to its primitive's signature, so a program read from edited
text cannot carry an unknown parameter (which a rule taking ``**params`` would otherwise
ignore) or one operand too many::

    >>> signature_of(all_reduce_node).check("all_reduce", 1, {"mesh_axes": ("x",),
    ...     "reduction": "sum", "device_groups": ((0, 1),), "colour": 1})
    "unknown parameter 'colour' (all_reduce takes device_groups, mesh_axes, reduction)"

Primitives whose shape rule names its parameters as keyword-only arguments (and takes no
``**params``) get their signature from that rule; the others are declared here, collectives
with their records (``ir.collectives``). A test holds every registered primitive to have one.
"""
from __future__ import annotations

import dataclasses
import inspect
from typing import Optional

from ir import primitives as prims
from ir.primitives import RuleTable


@dataclasses.dataclass(frozen=True)
class Signature:
    """``arity``: the number of operands (``min_arity`` or more when ``variadic``);
    ``required`` and ``optional``: parameter names."""
    arity: int
    required: frozenset = frozenset()
    optional: frozenset = frozenset()
    variadic: bool = False

    def check(self, name: str, n_operands: int, params) -> str:
        """Why ``n_operands`` operands and ``params`` do not fit primitive ``name``, or ''."""
        if n_operands == self.arity and params.keys() == self.required:
            return ""           # the common case, decided at once
        if self.variadic and n_operands < self.arity:
            return f"takes at least {self.arity} operands, got {n_operands}"
        if not self.variadic and n_operands != self.arity:
            return f"takes {self.arity} operand{'s' * (self.arity != 1)}, got {n_operands}"
        allowed = self.required | self.optional
        for key in params:
            if key not in allowed:
                listed = ", ".join(sorted(allowed)) or "no parameters"
                return f"unknown parameter {key!r} ({name} takes {listed})"
        missing = sorted(self.required - set(params))
        if missing:
            return f"missing parameter {missing[0]!r}"
        return ""


def _sig(arity: int, required=(), optional=(), variadic=False) -> Signature:
    return Signature(arity, frozenset(required), frozenset(optional), variadic)


# Declared signatures: primitives whose shape rule takes ``**params`` or serves a family.
signatures = RuleTable("signature")

for _p in prims.UNARY + (prims.is_finite_p, prims.stop_gradient_p, prims.copy_p):
    signatures[_p] = _sig(1)
signatures[prims.integer_pow_p] = _sig(1, ["y"])
for _p in prims.ARITHMETIC + prims.COMPARISON:
    signatures[_p] = _sig(2)
signatures[prims.select_n_p] = _sig(2, variadic=True)
signatures[prims.sharding_constraint_p] = _sig(1, ["sharding"])
signatures[prims.device_put_p] = _sig(1, ["device", "src"])
signatures[prims.shard_alike_p] = _sig(2)
signatures[prims.debug_print_p] = _sig(0, ["fmt"], ["arg_names", "partitioned", "ordered"],
                                      variadic=True)
signatures[prims.inspect_sharding_p] = _sig(1, ["callback"])
for _p in prims.PREDICATES:
    signatures[_p] = _sig(1)
# Custom-derivative calls hold the primal program and the user's rules (inlined before
# lowering, so only traced programs carry them).
signatures[prims.custom_jvp_call_p] = _sig(0, ["jaxpr", "jvp", "name", "num_consts",
                                               "symbolic_zeros"], variadic=True)
signatures[prims.custom_vjp_call_p] = _sig(0, ["jaxpr", "fwd", "bwd", "name", "num_consts",
                                               "symbolic_zeros"], variadic=True)
signatures[prims.custom_vmap_call_p] = _sig(0, ["jaxpr", "vmap_rule", "name", "num_consts"],
                                            variadic=True)
signatures[prims.linear_solve_p] = _sig(0, ["jaxpr", "rules"], variadic=True)
signatures[prims.custom_lin_p] = _sig(0, ["bwd", "num_res", "out_shapes", "out_dtypes",
                                          "out_vmas"], ["out_ur", "out_shardings"],
                                      variadic=True)


def signature_of(prim) -> Optional[Signature]:
    """The primitive's signature: declared, or read off its shape rule; None when neither
    says (the completeness test names such primitives)."""
    if prim in signatures:
        return signatures[prim]
    return _from_shape_rule(prim)


_INFERRED: dict = {}


def _from_shape_rule(prim) -> Optional[Signature]:
    if prim in _INFERRED:
        return _INFERRED[prim]
    from ir.shapes import shape_rules
    signature = None
    if prim in shape_rules:
        signature = _signature_of_rule(shape_rules[prim])
    _INFERRED[prim] = signature
    return signature


def _signature_of_rule(rule) -> Optional[Signature]:
    try:
        parameters = inspect.signature(rule).parameters.values()
    except (TypeError, ValueError):     # a builtin without a signature
        return None
    arity, variadic, required, optional = 0, False, [], []
    for parameter in parameters:
        if parameter.kind is parameter.VAR_KEYWORD:
            return None             # takes any parameter: only a declaration can say which
        if parameter.kind is parameter.VAR_POSITIONAL:
            variadic = True
        elif parameter.kind is parameter.KEYWORD_ONLY:
            (required if parameter.default is parameter.empty else optional).append(
                parameter.name)
        else:
            arity += 1
    return _sig(arity, required, optional, variadic)
