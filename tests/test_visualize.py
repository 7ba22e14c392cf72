"""``debug.visualize_array_sharding`` (SEMANTICS 5.3): exact drawings, sizes and the rank error.

Every expected drawing was worked out by hand from the 5.3 formulas, with
``bh = floor(10·scale)``, ``bw = floor(bh·n1/n0)`` (``n1 = 1`` for 1-D),
``w = clamp(floor(2.5·fw·bw), min_width, max_width)``, ``h = floor(fh·bh)`` (1 for 1-D); the
derivation sits beside each case.
"""
from __future__ import annotations

import io
import re
import sys
import types
from functools import partial

import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from shardc.experimental import mesh_utils
from shardc.sharding import Mesh, NamedSharding, PartitionSpec as P


@pytest.fixture
def mesh():
    return Mesh(mesh_utils.create_device_mesh((4, 2)), ('x', 'y'))


def put(mesh, shape, spec):
    """An arange of ``shape`` laid out on ``mesh`` by ``spec``."""
    value = np.arange(float(np.prod(shape))).reshape(shape)
    return jax.device_put(value, NamedSharding(mesh, spec))


def drawn(capsys, x, **options) -> str:
    """What visualize_array_sharding prints for ``x``."""
    jax.debug.visualize_array_sharding(x, **options)
    return capsys.readouterr().out


def lines(*rows) -> str:
    """The expected output: the rows (no blank line follows a drawing, as in JAX)."""
    return "\n".join(rows) + "\n"


# --- the 5.3 examples, mesh x=4, y=2 ---------------------------------------------------------

# (8,4) P('x',None): bh=10, bw=floor(10·4/8)=5; fw=1 -> w=floor(12.5)=12; fh=1/4 -> h=2.
# "CPU 0,1" (7): pads (12-9) -> left 1, right 2; top/bottom 0 -> one line per cell.
ROWS_BY_X = lines(
    "┌──────────┐",
    "│ CPU 0,1  │",
    "├──────────┤",
    "│ CPU 2,3  │",
    "├──────────┤",
    "│ CPU 4,5  │",
    "├──────────┤",
    "│ CPU 6,7  │",
    "└──────────┘",
)

# (8,16) P('x','y'): bw=floor(10·16/8)=20; fw=1/2 -> w=floor(25)=25; h=2.
# "CPU 0" (5): pads (25-7) -> 9, 9: cells 23 wide.
GRID_BY_X_Y = lines(
    "┌───────────────────────┬───────────────────────┐",
    "│         CPU 0         │         CPU 1         │",
    "├───────────────────────┼───────────────────────┤",
    "│         CPU 2         │         CPU 3         │",
    "├───────────────────────┼───────────────────────┤",
    "│         CPU 4         │         CPU 5         │",
    "├───────────────────────┼───────────────────────┤",
    "│         CPU 6         │         CPU 7         │",
    "└───────────────────────┴───────────────────────┘",
)

# (16,4) P('y',None): bw=floor(10·4/16)=2; w=floor(5)=5 -> min 9; fh=1/2 -> h=5.
# "CPU 0,2,4,6" (11): pads 9-13 < 0 -> 0, 11 wide; top floor(3/2)=1, bottom 2.
ROWS_BY_Y = lines(
    "┌───────────┐",
    "│           │",
    "│CPU 0,2,4,6│",
    "│           │",
    "│           │",
    "├───────────┤",
    "│           │",
    "│CPU 1,3,5,7│",
    "│           │",
    "│           │",
    "└───────────┘",
)


def test_rows_sharded_over_x(capsys, mesh):
    assert drawn(capsys, put(mesh, (8, 4), P('x', None))) == ROWS_BY_X


def test_grid_sharded_over_x_and_y(capsys, mesh):
    assert drawn(capsys, put(mesh, (8, 16), P('x', 'y'))) == GRID_BY_X_Y


def test_rows_sharded_over_y_group_the_x_copies(capsys, mesh):
    assert drawn(capsys, put(mesh, (16, 4), P('y', None))) == ROWS_BY_Y


def test_one_dimensional_is_one_row(capsys, mesh):
    # (8,) P('x'): bw=floor(10·1/8)=1; w=floor(2.5·1/4·1)=0 -> 9; h=1.
    # "CPU 0,1" (7): pads 0; top floor(-1/2) < 0 -> 0.
    assert drawn(capsys, put(mesh, (8,), P('x'))) == lines(
        "┌───────┬───────┬───────┬───────┐",
        "│CPU 0,1│CPU 2,3│CPU 4,5│CPU 6,7│",
        "└───────┴───────┴───────┴───────┘",
    )


def test_one_dimensional_over_both_axes(capsys, mesh):
    # (8,) P(('x','y')): w=9 as above; "CPU 0" (5): pads 1, 1.
    assert drawn(capsys, put(mesh, (8,), P(('x', 'y')))) == lines(
        "┌───────┬───────┬───────┬───────┬───────┬───────┬───────┬───────┐",
        "│ CPU 0 │ CPU 1 │ CPU 2 │ CPU 3 │ CPU 4 │ CPU 5 │ CPU 6 │ CPU 7 │",
        "└───────┴───────┴───────┴───────┴───────┴───────┴───────┴───────┘",
    )


def test_fully_replicated_is_one_cell(capsys, mesh):
    # (8,4) P(): w=12, h=10. "CPU 0,1,2,3,4,5,6,7" (19): pads < 0 -> 0; top 4, bottom 4.
    blank = "│                   │"
    assert drawn(capsys, put(mesh, (8, 4), P())) == lines(
        "┌───────────────────┐",
        blank, blank, blank, blank,
        "│CPU 0,1,2,3,4,5,6,7│",
        blank, blank, blank, blank,
        "└───────────────────┘",
    )


def test_fully_replicated_wide_cell_is_centred(capsys, mesh):
    # (8,16) P(): bw=20, w=50, h=10. Pads (50-21)=29 -> left 14, right 15; 48 wide.
    blank = "│" + " " * 48 + "│"
    assert drawn(capsys, put(mesh, (8, 16), P())) == lines(
        "┌" + "─" * 48 + "┐",
        blank, blank, blank, blank,
        "│              CPU 0,1,2,3,4,5,6,7               │",
        blank, blank, blank, blank,
        "└" + "─" * 48 + "┘",
    )


def test_columns_sharded_over_y(capsys, mesh):
    # (8,16) P(None,'y'): bw=20, fw=1/2 -> w=25; h=10. "CPU 0,2,4,6" (11): pads 6, 6; 23 wide.
    blank = "│                       │                       │"
    assert drawn(capsys, put(mesh, (8, 16), P(None, 'y'))) == lines(
        "┌───────────────────────┬───────────────────────┐",
        blank, blank, blank, blank,
        "│      CPU 0,2,4,6      │      CPU 1,3,5,7      │",
        blank, blank, blank, blank,
        "└───────────────────────┴───────────────────────┘",
    )


# --- single-device arrays ------------------------------------------------------------------

def test_single_device_one_dimensional(capsys):
    # (8,) on device 0: w=9; "CPU 0" (5): pads 1, 1.
    assert drawn(capsys, jnp.arange(8.)) == lines(
        "┌───────┐",
        "│ CPU 0 │",
        "└───────┘",
    )


def test_single_device_two_dimensional(capsys):
    # (8,4) on device 0: w=12, h=10. "CPU 0" (5): pads (12-7)=5 -> 2, 3; top 4, bottom 4.
    blank = "│          │"
    assert drawn(capsys, jnp.zeros((8, 4))) == lines(
        "┌──────────┐",
        blank, blank, blank, blank,
        "│  CPU 0   │",
        blank, blank, blank, blank,
        "└──────────┘",
    )


# --- the tutorial's matmul_basic layouts ----------------------------------------------------

def test_tutorial_result_of_matmul_basic(capsys, mesh):
    from shardc.experimental.shard_map import shard_map
    a = jnp.arange(8 * 16.).reshape(8, 16)
    b = jnp.arange(16 * 4.).reshape(16, 4)

    @partial(shard_map, mesh=mesh, in_specs=(P('x', 'y'), P('y', None)),
             out_specs=P('x', None))
    def matmul_basic(a_block, b_block):
        c_partialsum = jnp.dot(a_block, b_block)
        return jax.lax.psum(c_partialsum, 'y')

    c = matmul_basic(a, b)
    assert drawn(capsys, c) == ROWS_BY_X


def test_tutorial_a_b_c_blocks(capsys, mesh):
    a = jax.device_put(np.arange(8 * 16.).reshape(8, 16), NamedSharding(mesh, P('x', 'y')))
    b = jax.device_put(np.arange(16 * 4.).reshape(16, 4), NamedSharding(mesh, P('y', None)))
    c = jax.device_put(np.arange(8 * 4.).reshape(8, 4), NamedSharding(mesh, P('x', None)))
    print('a blocks:'); jax.debug.visualize_array_sharding(a)
    print('b blocks:'); jax.debug.visualize_array_sharding(b)
    print('c blocks:'); jax.debug.visualize_array_sharding(c)
    assert capsys.readouterr().out == ("a blocks:\n" + GRID_BY_X_Y + "b blocks:\n" + ROWS_BY_Y
                                       + "c blocks:\n" + ROWS_BY_X)


# --- scale, min_width, max_width ------------------------------------------------------------

def test_scale_two_doubles_the_cells(capsys, mesh):
    # scale=2: bh=20, bw=floor(20·4/8)=10; w=25, h=floor(20/4)=5.
    # "CPU 0,1" (7): pads (25-9)=16 -> 8, 8: 23 wide; top 1, bottom 2.
    blank = "│                       │"

    def cell(label):
        return [blank, f"│        {label}        │", blank, blank]

    assert drawn(capsys, put(mesh, (8, 4), P('x', None)), scale=2) == lines(
        "┌───────────────────────┐",
        *cell("CPU 0,1"),
        "├───────────────────────┤",
        *cell("CPU 2,3"),
        "├───────────────────────┤",
        *cell("CPU 4,5"),
        "├───────────────────────┤",
        *cell("CPU 6,7"),
        "└───────────────────────┘",
    )


def test_scale_half_shrinks_to_the_label(capsys, mesh):
    # scale=0.5: bh=5, bw=floor(5·4/8)=2; w=floor(5)=5 -> 9, h=floor(5/4)=1. Pads 0.
    assert drawn(capsys, put(mesh, (8, 4), P('x', None)), scale=0.5) == lines(
        "┌───────┐",
        "│CPU 0,1│",
        "├───────┤",
        "│CPU 2,3│",
        "├───────┤",
        "│CPU 4,5│",
        "├───────┤",
        "│CPU 6,7│",
        "└───────┘",
    )


def test_min_width_widens_cells(capsys, mesh):
    # (8,4) P('x',None): w=12 -> min 20. "CPU 0,1" (7): pads (20-9)=11 -> 5, 6: 18 wide.
    assert drawn(capsys, put(mesh, (8, 4), P('x', None)), min_width=20) == lines(
        "┌──────────────────┐",
        "│     CPU 0,1      │",
        "├──────────────────┤",
        "│     CPU 2,3      │",
        "├──────────────────┤",
        "│     CPU 4,5      │",
        "├──────────────────┤",
        "│     CPU 6,7      │",
        "└──────────────────┘",
    )


def test_min_width_one_dimensional(capsys, mesh):
    # (8,) P('x'): w=0 -> min 13. "CPU 0,1" (7): pads (13-9)=4 -> 2, 2: 11 wide.
    assert drawn(capsys, put(mesh, (8,), P('x')), min_width=13) == lines(
        "┌───────────┬───────────┬───────────┬───────────┐",
        "│  CPU 0,1  │  CPU 2,3  │  CPU 4,5  │  CPU 6,7  │",
        "└───────────┴───────────┴───────────┴───────────┘",
    )


def test_max_width_is_the_width_rich_squeezes_the_drawing_into(capsys, mesh):
    # (8,16) P('x','y'): cells w=25 -> max 15, but the console is max_width (15) wide, as
    # JAX's: rich squeezes the two columns (17 wide each with their lines) into 15 and the
    # labels no longer fit (JAX 0.10.2's drawing, verbatim)
    assert drawn(capsys, put(mesh, (8, 16), P('x', 'y')), max_width=15) == lines(
        "┌──────┬──────┐", "│      │      │", "├──────┼──────┤", "│      │      │",
        "├──────┼──────┤", "│      │      │", "├──────┼──────┤", "│      │      │",
        "└──────┴──────┘")
    # (8, 800) P(None, 'x'): four cells as wide as max_width; rich squeezes them into 80
    # columns, the labels left out (as JAX's)
    out = drawn(capsys, put(mesh, (8, 800), P(None, 'x'))).splitlines()
    assert {len(line) for line in out} == {80} and len(out) == 10
    assert out[0] == "┌" + "┬".join(["─" * 19] * 3 + ["─" * 18]) + "┐"


def test_default_max_width_caps_a_wide_array(capsys, mesh):
    # (2,64) P(): bw=floor(10·64/2)=320; w=800 -> max 80; h=10.
    # "CPU 0,1,2,3,4,5,6,7" (19): pads (80-21)=59 -> 29, 30: 78 wide, 80 with its lines.
    blank = "│" + " " * 78 + "│"
    label = "│" + " " * 29 + "CPU 0,1,2,3,4,5,6,7" + " " * 30 + "│"
    assert drawn(capsys, put(mesh, (2, 64), P())) == lines(
        "┌" + "─" * 78 + "┐",
        blank, blank, blank, blank, label, blank, blank, blank, blank,
        "└" + "─" * 78 + "┘",
    )


def test_wider_than_eighty_columns_does_not_wrap(capsys, mesh):
    # Same array, max_width=100: pads (100-21)=79 -> 39, 40: 98 wide, 100 with its lines.
    blank = "│" + " " * 98 + "│"
    label = "│" + " " * 39 + "CPU 0,1,2,3,4,5,6,7" + " " * 40 + "│"
    assert drawn(capsys, put(mesh, (2, 64), P()), max_width=100) == lines(
        "┌" + "─" * 98 + "┐",
        blank, blank, blank, blank, label, blank, blank, blank, blank,
        "└" + "─" * 98 + "┘",
    )


# --- the rank error --------------------------------------------------------------------------

RANK_ERROR = "`visualize_sharding` only works for shapes with 1 and 2 dimensions."


def test_three_dimensional_array_is_rejected(capsys, mesh):
    x = put(mesh, (8, 2, 2), P('x'))
    with pytest.raises(ValueError) as info:
        jax.debug.visualize_array_sharding(x)
    assert str(info.value) == RANK_ERROR
    assert capsys.readouterr().out == ""


def test_scalar_is_rejected(mesh):
    with pytest.raises(ValueError) as info:
        jax.debug.visualize_array_sharding(jnp.float32(3.0) + jnp.zeros(()))
    assert str(info.value) == RANK_ERROR


# --- colour -----------------------------------------------------------------------------------

class Terminal(io.StringIO):
    """A stdout that says it is a terminal."""

    def isatty(self):
        return True


@pytest.fixture
def terminal(monkeypatch):
    """A function that makes stdout a colour terminal and returns the buffer it writes to.

    Called in the test body: pytest puts its own capture back on sys.stdout between fixture
    setup and the test call."""
    def attach():
        monkeypatch.setenv("TERM", "xterm-256color")
        monkeypatch.setenv("COLORTERM", "truecolor")
        monkeypatch.delenv("NO_COLOR", raising=False)
        screen = Terminal()
        monkeypatch.setattr(sys, "stdout", screen)
        return screen
    return attach


@pytest.fixture
def fake_matplotlib(monkeypatch):
    """A matplotlib whose ``tab20b`` maps v to RGB (v, 1/2, 1-v)."""
    module = types.ModuleType("matplotlib")
    module.colormaps = {"tab20b": lambda v: (v, 0.5, 1 - v, 1.0)}
    monkeypatch.setitem(sys.modules, "matplotlib", module)


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_colour_cells_have_backgrounds_and_no_lines(terminal, fake_matplotlib, mesh):
    # (8,) P('x') in colour: w=9, pads 0 + 1 each side -> 9 wide; h=1: top 0, bottom 1.
    screen = terminal()
    jax.debug.visualize_array_sharding(put(mesh, (8,), P('x')))
    out = screen.getvalue()
    assert ANSI.sub("", out) == lines(
        " CPU 0,1  CPU 2,3  CPU 4,5  CPU 6,7 ",
        " " * 36,
    )
    # Four colours from linspace(0, 1, 4), visited 0, 3, 2, 1 (a stride of 4//2 + 1).
    backgrounds = re.findall(r"48;2;(\d+;\d+;\d+)m", out)
    assert list(dict.fromkeys(backgrounds)) == ["0;127;255", "255;127;0", "170;127;85",
                                                 "85;127;170"]


def test_use_color_false_draws_lines_on_a_terminal(terminal, fake_matplotlib, mesh):
    screen = terminal()
    jax.debug.visualize_array_sharding(put(mesh, (8, 4), P('x', None)), use_color=False)
    assert screen.getvalue() == ROWS_BY_X


def test_no_matplotlib_draws_lines_on_a_terminal(terminal, monkeypatch, mesh):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails
    screen = terminal()
    jax.debug.visualize_array_sharding(put(mesh, (8, 4), P('x', None)))
    assert screen.getvalue() == ROWS_BY_X


def test_captured_output_has_no_colour_even_when_forced(capsys, monkeypatch, fake_matplotlib,
                                                        mesh):
    # rich would colour on FORCE_COLOR; 5.3 says not a terminal means no colour.
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert drawn(capsys, put(mesh, (8, 4), P('x', None))) == ROWS_BY_X


# --- visualize_sharding and inspect_array_sharding (JAX's jax.debug) -----------------------------

def test_visualize_sharding_draws_a_shape_and_sharding_without_an_array(capsys, mesh):
    x = put(mesh, (8, 4), P('x', 'y'))
    jax.debug.visualize_sharding((8, 4), NamedSharding(mesh, P('x', 'y')))
    from_sharding = capsys.readouterr().out
    assert from_sharding == drawn(capsys, x)
    assert from_sharding.count("CPU") == 8
    device = jax.devices()[3]
    jax.debug.visualize_sharding((6,), jax.sharding.SingleDeviceSharding(device))
    assert "CPU 3" in capsys.readouterr().out
    with pytest.raises(ValueError):
        jax.debug.visualize_sharding((2, 2, 2), NamedSharding(mesh, P('x')))


def test_inspect_array_sharding_calls_back_eagerly_and_once_per_compile():
    mesh = jax.make_mesh((4, 2), ('x', 'y'))          # Explicit axes: layouts in the types
    x = put(mesh, (8, 4), P('x', 'y'))
    seen = []
    jax.debug.inspect_array_sharding({"a": x, "b": [x]}, callback=seen.append)
    assert seen == [x.sharding, x.sharding]

    traced = []

    @jax.jit
    def f(v):
        y = jnp.sin(v).sum(axis=1)
        jax.debug.inspect_array_sharding(y, callback=traced.append)
        return y * 2

    np.testing.assert_allclose(np.asarray(f(x)), np.sin(np.asarray(x)).sum(axis=1) * 2,
                               rtol=1e-6)
    f(x)                      # compiled: no second call
    assert len(traced) == 1
    assert isinstance(traced[0], NamedSharding) and traced[0].mesh == mesh
    assert tuple(traced[0].spec)[:1] == ('x',)
    with pytest.raises(TypeError, match="pytree of arrays"):
        jax.debug.inspect_array_sharding("text", callback=print)


def test_inspect_array_sharding_of_a_value_left_to_propagation_calls_back_when_compiled(
        mesh, capsys):
    """On Auto axes a traced value's layout is propagation's: the callback gets it when the
    program is compiled (``compile()``, or its first call), once, as JAX's; with
    no mesh, the one device the program runs on; under grad and vmap too; and
    visualize_array_sharding of a traced value draws then."""
    x = put(mesh, (8, 4), P('x', 'y'))                # Auto axes: propagation decides
    seen = []

    def make():
        def f(v):
            y = jnp.sin(v).sum(1)
            jax.debug.inspect_array_sharding(y, callback=seen.append)
            return y * 2
        return f

    lowered = jax.jit(make()).lower(x)
    assert seen == []                                 # lowered only: not yet (JAX's)
    compiled = lowered.compile()
    assert seen == [NamedSharding(mesh, P('x'))]
    np.testing.assert_allclose(np.asarray(compiled(x)), 2 * np.sin(np.asarray(x)).sum(1),
                               rtol=1e-6)
    assert len(seen) == 1
    jitted = jax.jit(make())
    jitted(x)
    jitted(x)
    assert seen == [NamedSharding(mesh, P('x'))] * 2
    f = make()
    jax.jit(lambda v: jax.debug.inspect_array_sharding(v, callback=seen.append))(x)
    assert seen[-1] == x.sharding
    seen.clear()
    host = np.arange(8.0, dtype=np.float32).reshape(2, 4)
    jax.jit(f)(host)
    jax.jit(jax.grad(lambda v: f(v).sum()))(host)
    jax.jit(jax.vmap(f))(host[None])
    jax.grad(lambda v: f(v).sum())(host)              # eagerly: at once
    assert seen == [jax.sharding.SingleDeviceSharding(jax.devices()[0])] * 4
    # a constant of the program (a number, a numpy array) is on one device (JAX's)
    seen.clear()
    jax.jit(lambda v: jax.debug.inspect_array_sharding((3.0, np.ones(3)),
                                                       callback=seen.append))(x)
    assert seen == [jax.sharding.SingleDeviceSharding(jax.devices()[0])] * 2
    with pytest.raises(TypeError, match="pytree of arrays"):
        jax.debug.inspect_array_sharding(3.0, callback=print)
    capsys.readouterr()
    jax.jit(lambda v: jax.debug.visualize_array_sharding(jnp.sin(v)))(x[:, 0])
    assert capsys.readouterr().out.count("CPU") == 4      # split over x, whole over y
