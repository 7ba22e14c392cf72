"""``jax.experimental.layout``: memory layouts. shardc keeps every block row-major (see
``ir.layout``): an array's ``format`` reports that layout, and placements and constraints
accept it (or ``Layout.AUTO``, or None); another layout is refused."""
from __future__ import annotations

from compiler import tree
from ir.layout import Format, Layout, check_layout
from shardc.numpy._core import shape_of

__all__ = ["Format", "Layout", "with_layout_constraint"]


def with_layout_constraint(x, layouts):
    """``x`` (a pytree) with each leaf laid out by its entry of ``layouts`` (a prefix): as it
    is, where that is row-major, None or ``Layout.AUTO``."""
    leaves, treedef = tree.tree_flatten(x)
    wanted = tree.broadcast_prefix(layouts, x, is_leaf=lambda v: v is None or isinstance(
        v, (Layout, Format)) or not isinstance(v, (tuple, list, dict)), name="layouts")
    for leaf, layout in zip(leaves, wanted):
        if isinstance(layout, Format):
            layout = layout.layout
        check_layout(layout, shape_of(leaf), "with_layout_constraint")
    return tree.tree_unflatten(treedef, leaves)
