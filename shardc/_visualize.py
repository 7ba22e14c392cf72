"""``debug.visualize_array_sharding``: draw an Array's distinct blocks as a rich table.

SEMANTICS 5.3. One cell per distinct block (devices holding copies share a cell), sized by
the fraction of the array the block covers, as JAX's ``jax.debug.visualize_sharding`` does::

    (8, 16) laid out by P('x', 'y') on a (4, 2) mesh:

    ┌───────────────────────┬───────────────────────┐
    │         CPU 0         │         CPU 1         │
    ├───────────────────────┼───────────────────────┤
    │         CPU 2         │         CPU 3         │
    ...
"""
from __future__ import annotations

import dataclasses
import sys

import numpy as np
import rich.align
import rich.box
import rich.console
import rich.padding
import rich.style
import rich.table
import rich.text

from ir.sharding import NamedSharding, block_slices

# A terminal character is about 2.5 times as tall as it is wide; widths are scaled by this so
# a square block draws roughly square.
HEIGHT_TO_WIDTH = 2.5

RANK_ERROR = "`visualize_sharding` only works for shapes with 1 and 2 dimensions."


@dataclasses.dataclass(frozen=True)
class Block:
    """A distinct block: where it sits in the grid, how much of the array it covers, and who
    holds it. ``height_fraction`` is None for 1-D arrays (their cells are one line high)."""
    row: int
    column: int
    height_fraction: float | None
    width_fraction: float
    device_ids: tuple


@dataclasses.dataclass(frozen=True)
class Cell:
    """A block's label and its padding (top, right, bottom, left), all non-negative."""
    label: str
    padding: tuple

    @property
    def width(self) -> int:
        """Columns the cell occupies between its box lines."""
        _, right, _, left = self.padding
        return left + len(self.label) + right


def visualize_array_sharding(x, *, use_color=True, scale=1.0, min_width=9, max_width=80):
    """Print the layout of a 1-D or 2-D Array over its devices to stdout.

    Args:
      x: a ``shardc.Array`` (NamedSharding or SingleDeviceSharding).
      use_color: draw cells as coloured backgrounds (only on a terminal with matplotlib);
        otherwise cells are separated by box lines.
      scale: multiplies the drawing's height and width.
      min_width, max_width: bounds on each cell's width, box lines included.

    Returns None. Example: ``(8,)`` laid out by ``P('x')`` on a (4, 2) mesh prints::

        ┌───────┬───────┬───────┬───────┐
        │CPU 0,1│CPU 2,3│CPU 4,5│CPU 6,7│
        └───────┴───────┴───────┴───────┘
    """
    visualize_sharding(tuple(x.shape), x.sharding, use_color=use_color, scale=scale,
                       min_width=min_width, max_width=max_width)


def visualize_sharding(shape, sharding, *, use_color=True, scale=1.0, min_width=9,
                       max_width=80, color_map=None):
    """Print how an array of ``shape`` laid out by ``sharding`` lies over its devices (JAX's
    ``jax.debug.visualize_sharding``; the drawing as ``visualize_array_sharding``'s).
    ``color_map``: a matplotlib colormap for the cells, where colours are drawn."""
    shape = tuple(shape)
    if len(shape) not in (1, 2):
        raise ValueError(RANK_ERROR)
    console = _console(use_color)
    if console.color_system:
        color_map = color_map if color_map is not None else _color_map()
    else:
        color_map = None
    cells = cell_grid(shape, distinct_blocks(shape, sharding), scale=scale,
                      min_width=min_width, max_width=max_width, colored=color_map is not None)
    _print_table(console, cells, color_map, max_width)


# --- which blocks, where ---------------------------------------------------------------------

def distinct_blocks(shape: tuple, sharding) -> list:
    """The distinct blocks of an array of ``shape`` laid out by ``sharding``, grouping the
    devices that hold the same slices."""
    holders: dict = {}
    for device, index in _every_device_index(shape, sharding):
        key = tuple(_bounds(s, extent) for s, extent in zip(index, shape))
        holders.setdefault(key, []).append(device.id)
    # Grid position along a dimension = rank of the block's start among the distinct starts.
    starts = [sorted({key[d][0] for key in holders}) for d in range(len(shape))]
    blocks = []
    for key, ids in holders.items():
        position = tuple(starts[d].index(start) for d, (start, _) in enumerate(key))
        fractions = tuple(_fraction(stop - start, extent)
                          for (start, stop), extent in zip(key, shape))
        if len(shape) == 1:
            blocks.append(Block(0, position[0], None, fractions[0], tuple(sorted(ids))))
        else:
            blocks.append(Block(*position, *fractions, tuple(sorted(ids))))
    return sorted(blocks, key=lambda b: (b.row, b.column))


def _every_device_index(shape: tuple, sharding) -> list:
    """(device, index) of every device holding part of the array: all of them, not only this
    process's (under MPI a process addresses its own devices' shards only)."""
    if not isinstance(sharding, NamedSharding):
        return list(sharding.devices_indices_map(shape).items())
    mesh, spec = sharding.mesh, sharding.spec
    return [(mesh.devices.flat[p], block_slices(shape, spec, mesh, mesh.coords(p)))
            for p in range(mesh.size)]


def _bounds(index, extent: int) -> tuple:
    """``(start, stop)`` of one dimension of a shard's index (a slice or an int)."""
    if isinstance(index, slice):
        start, stop, _ = index.indices(extent)
        return start, stop
    return index, index + 1


def _fraction(size: int, extent: int) -> float:
    """The share of a dimension a block covers (all of it when the dimension is empty)."""
    return size / extent if extent else 1.0


# --- sizes -----------------------------------------------------------------------------------

def cell_grid(shape, blocks, *, scale, min_width, max_width, colored) -> list:
    """Rows of Cells, sized and padded by SEMANTICS 5.3."""
    base_height = int(10 * scale)
    aspect_ratio = (shape[1] if len(shape) == 2 else 1) / shape[0] if shape[0] else 1.0
    base_width = int(base_height * aspect_ratio)
    rows: dict = {}
    for block in blocks:
        width = int(block.width_fraction * base_width * HEIGHT_TO_WIDTH)
        width = min(max(width, min_width), max_width)
        height = 1 if block.height_fraction is None else int(block.height_fraction * base_height)
        label = f"CPU {','.join(str(i) for i in block.device_ids)}"
        rows.setdefault(block.row, []).append(Cell(label, _padding(label, width, height, colored)))
    return [rows[r] for r in sorted(rows)]


def _padding(label: str, width: int, height: int, colored: bool) -> tuple:
    """(top, right, bottom, left) padding that centres ``label`` in a width x height cell.

    Width and height count the box lines, hence the ``- 2``. Coloured cells have no lines, so
    they get one more space on every side to keep backgrounds apart."""
    left, odd = divmod(width - len(label) - 2, 2)
    right = left + odd
    top, odd = divmod(height - 2, 2)
    bottom = top + odd
    extra = 1 if colored else 0
    return tuple(max(pad + extra, 0) for pad in (top, right, bottom, left))


# --- drawing ---------------------------------------------------------------------------------

def _console(use_color: bool) -> rich.console.Console:
    """A console on ``sys.stdout`` as it is now (so captured output sees the drawing).

    Colour only on a terminal that has colours: ``isatty`` decides, not rich's environment
    overrides, so piped or captured output is always plain box drawing."""
    wants_color = use_color and sys.stdout.isatty()
    return rich.console.Console(file=sys.stdout, color_system="auto" if wants_color else None,
                                force_terminal=wants_color, force_jupyter=False,
                                highlight=False)


def _print_table(console: rich.console.Console, cells: list, color_map, max_width: int) -> None:
    """Render the rows of cells on a console ``max_width`` wide, as JAX's (rich squeezes a
    wider drawing, eliding labels with ``…``). No blank line follows: JAX asks rich for one
    (``end='\\n\\n'``), but rich ends a table with its last line whatever ``end`` says."""
    colored = color_map is not None
    table = rich.table.Table(show_header=False, show_lines=not colored, padding=0,
                             highlight=False, pad_edge=False,
                             box=None if colored else rich.box.SQUARE)
    colors = _colors(color_map, len(cells), max(len(row) for row in cells)) if colored else None
    for row in cells:
        table.add_row(*(_renderable(cell, next(colors) if colored else None) for cell in row))
    console.width = max_width
    console.print(table)


def _renderable(cell: Cell, color: str | None):
    """The cell's label, centred inside its padding, on its background colour if any."""
    style = rich.style.Style(bgcolor=color, color=_text_color(color) if color else None)
    label = rich.align.Align(rich.text.Text(cell.label), "center", vertical="middle")
    return rich.padding.Padding(label, cell.padding, style=style)


# --- colour ----------------------------------------------------------------------------------

def _color_map():
    """matplotlib's ``tab20b`` colour map, or None without matplotlib (then no colour)."""
    try:
        import matplotlib
    except ImportError:
        return None
    return matplotlib.colormaps["tab20b"]


def _colors(color_map, num_rows: int, num_columns: int):
    """Background colours as ``#RRGGBB``, stepping about half-way round the map each time so
    neighbouring cells contrast."""
    count = num_rows * num_columns
    values = np.linspace(0, 1, count)
    step = count // 2 + (count % 2 == 0)
    index = 0
    for _ in range(count):
        yield _hex_color(color_map(values[index])[:3])
        index = (index + step) % count


def _hex_color(rgb) -> str:
    """``#RRGGBB`` for RGB components in [0, 1]."""
    r, g, b = (int(component * 255) for component in rgb)
    return f"#{r:02X}{g:02X}{b:02X}"


def _text_color(background: str) -> str:
    """Black on light backgrounds, white on dark ones (perceived luminance)."""
    r, g, b = (int(background[k:k + 2], 16) for k in (1, 3, 5))
    return "#000000" if r * 0.299 + g * 0.587 + b * 0.114 > 186 else "#ffffff"
