"""``shardc.debug``: printing from inside programs and drawing array layouts."""
from __future__ import annotations


def visualize_array_sharding(x, *, use_color=True, scale=1.0, min_width=9, max_width=80):
    """Draw the layout of a 1-D or 2-D Array over its devices (SEMANTICS 5.3)."""
    from shardc._visualize import visualize_array_sharding as draw
    return draw(x, use_color=use_color, scale=scale, min_width=min_width, max_width=max_width)
