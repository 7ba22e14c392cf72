"""``shardc.debug``: printing from inside programs and drawing array layouts."""
from __future__ import annotations

from compiler.tracing import bind
from ir import primitives as prims

from shardc._callbacks import debug_callback as callback

__all__ = ["print", "callback", "visualize_array_sharding"]


def visualize_array_sharding(x, *, use_color=True, scale=1.0, min_width=9, max_width=80):
    """Draw the layout of a 1-D or 2-D Array over its devices (SEMANTICS 5.3)."""
    # the drawing code loads when first asked for: running programs never needs it
    from shardc._visualize import visualize_array_sharding as draw
    return draw(x, use_color=use_color, scale=scale, min_width=min_width, max_width=max_width)


def print(fmt: str, *args, **kwargs):
    """Print ``fmt.format(*args, **kwargs)`` with the values of arrays when the program runs:
    eagerly at once, under ``jit`` when the compiled program runs; inside a shard_map body once
    per device, in mesh-position order.

    >>> shardc.debug.print("x = {}", x)
    """
    names = tuple(sorted(kwargs))
    leaves = list(args) + [kwargs[k] for k in names]
    # Format on arrays: numpy prints them; pytrees are not supported in the format arguments.
    bind(prims.debug_print_p, *leaves, fmt=fmt, arg_names=names)
