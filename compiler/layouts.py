"""Layouts followed through operations outside shard_map bodies.

A shard_map without in_specs takes each argument's spec from its layout. An array laid out on
a mesh keeps its layout through elementwise operations (JAX's sharding rules give the result
its operands' layout there), so ``f(jnp.sin(x))`` splits ``x``'s result as ``x``. Through any
other operation shardc does not work out the layout JAX would give, and the result's layout
is ``UNKNOWN``: a shard_map that would have to read it raises instead of guessing ``P()``
(guessing gives every device the whole array, a wrong answer that looks right).
"""
from __future__ import annotations

from ir import primitives as prims
from ir.sharding import NamedSharding, spec_axes


class _Unknown:
    """The layout of a value computed from laid-out arrays by an operation shardc does not
    follow."""

    def __repr__(self):
        return "UNKNOWN"


UNKNOWN = _Unknown()

ELEMENTWISE = frozenset(prims.UNARY + prims.ARITHMETIC + prims.COMPARISON + prims.PREDICATES
                        + (prims.select_n_p, prims.convert_element_type_p,
                           prims.threefry2x32_p))


def meaningful(layout) -> bool:
    """A layout that constrains how a value is split: UNKNOWN, or a NamedSharding naming
    some mesh axis (a replicated one says nothing a shard_map would read differently)."""
    if layout is UNKNOWN:
        return True
    return isinstance(layout, NamedSharding) and bool(spec_axes(layout.spec))


def result_layout(prim, operand_layouts, operand_shapes, out_shapes) -> list:
    """The layout of each output of ``prim`` given its operands' layouts (None: none)."""
    laid = [(layout, shape) for layout, shape in zip(operand_layouts, operand_shapes)
            if meaningful(layout)]
    if not laid:
        return [None] * len(out_shapes)
    if prim in ELEMENTWISE:
        layouts = {layout for layout, _ in laid}
        if len(layouts) == 1:
            (layout,) = layouts
            shape = laid[0][1]
            if layout is not UNKNOWN and all(s == shape for _, s in laid) \
                    and all(s == shape for s in out_shapes):
                return [layout] * len(out_shapes)
    return [UNKNOWN] * len(out_shapes)


def layout_of(value):
    """A value's layout: a tracer's (``_layout``), an Array's sharding (UNKNOWN when it was
    computed from laid-out arrays by an operation whose layout is not followed), else None."""
    hook = getattr(value, "_layout", None)
    if hook is not None:
        return hook()
    if getattr(value, "_unknown_layout", False):
        return UNKNOWN
    return getattr(value, "sharding", None)
