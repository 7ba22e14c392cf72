"""The tutorial's reference semantics of ``shard_map``, in plain numpy (SEMANTICS 1.7).

Independent of shardc's compiler on purpose: nothing here imports shardc, ``ir``,
``compiler`` or ``runtime``. A mesh is axis names, axis sizes and device ids in position
order; a body is a Python function ``body(ops, *blocks)`` written against a tiny namespace
of operations, so the same body runs under shardc (``ops`` = an adapter over ``shardc.lax``
and ``shardc.numpy``) and here (``ops`` = :class:`RefOps`).

The reference runs the body **once, in lockstep**: every body value is a :class:`Blocks`, the
list of one numpy block per mesh position. Ordinary operations map over the list; each
collective maps the whole list to a new one, group by group (SEMANTICS 2.0, 2.1, 2.6). Each
value also carries the set of mesh axes it may vary over, by the rules of SEMANTICS 3.2/3.3,
so tests can choose out_specs the static check must accept and compare verdicts.

    blocks[leaf] = [slice_block(x, spec, mesh, coord(p)) for p in positions]     # 1.4
    outs = body(RefOps(mesh), *[Blocks(...) for each input])                     # lockstep
    result[leaf] = assemble(out_blocks[leaf], out_spec, mesh)                    # 1.5
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, Sequence

import numpy as np


# --- the mesh ------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class RefMesh:
    """Axis names and sizes, and the device id at each row-major position."""
    axis_names: tuple
    axis_sizes: tuple
    device_ids: tuple

    def __post_init__(self):
        assert len(self.axis_names) == len(self.axis_sizes)
        assert len(self.device_ids) == math.prod(self.axis_sizes)

    @property
    def size(self) -> int:
        return len(self.device_ids)

    @property
    def shape(self) -> dict:
        return dict(zip(self.axis_names, self.axis_sizes))

    def coord(self, position: int) -> dict:
        """The mesh coordinate of a position, last axis fastest, as ``{axis: index}``."""
        coord = {}
        rest = position
        for name, size in reversed(list(zip(self.axis_names, self.axis_sizes))):
            rest, coord[name] = divmod(rest, size)
        assert rest == 0, position
        return {name: coord[name] for name in self.axis_names}

    def positions(self) -> range:
        return range(self.size)

    def axes_size(self, axes: Sequence[str]) -> int:
        return math.prod(self.shape[a] for a in axes)

    def rank(self, coord: dict, axes: Sequence[str]) -> int:
        """rank_A(c): mixed radix over ``axes`` as listed, the first listed axis major."""
        rank = 0
        for a in axes:
            rank = rank * self.shape[a] + coord[a]
        return rank


def as_axes(axis_name) -> tuple:
    """A collective's ``axis_name`` (a name, or a tuple/list of names) as a tuple."""
    return tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)


def device_groups(mesh: RefMesh, axes: Sequence[str]) -> list:
    """SEMANTICS 2.0: positions agreeing on every axis not in ``axes``, in rank order;
    groups sorted by their first member's position."""
    axes = tuple(axes)
    groups: dict = {}
    for p in mesh.positions():
        c = mesh.coord(p)
        key = tuple(c[a] for a in mesh.axis_names if a not in axes)
        groups.setdefault(key, []).append((mesh.rank(c, axes), p))
    ordered = [[p for _, p in sorted(members)] for members in groups.values()]
    for group in ordered:
        assert len(group) == mesh.axes_size(axes)
    return sorted(ordered, key=lambda g: g[0])


# --- specs, block shapes, slicing and assembly ---------------------------------------------------

def entry_names(entry) -> tuple:
    """``names(e)``: () for None, (a,) for a name, else the tuple."""
    if entry is None:
        return ()
    if isinstance(entry, (tuple, list)):
        return tuple(entry)
    return (entry,)


def dim_axes(spec, ndim: int) -> list:
    """The axes splitting each of ``ndim`` dimensions (() past the end of the spec)."""
    names = [entry_names(e) for e in spec]
    assert len(names) <= ndim, (spec, ndim)
    return names + [()] * (ndim - len(names))


def named_axes(spec) -> set:
    return {a for e in spec for a in entry_names(e)}


def canonical_entries(spec) -> tuple:
    """SEMANTICS 1.5's ``s'``: 1-tuples unwrapped, () read as None, length kept."""
    out = []
    for e in spec:
        names = entry_names(e)
        out.append(None if not names else names[0] if len(names) == 1 else names)
    return tuple(out)


def block_shape(global_shape: Sequence[int], spec, mesh: RefMesh) -> tuple:
    shape = []
    for g, axes in zip(global_shape, dim_axes(spec, len(global_shape))):
        k = mesh.axes_size(axes)
        assert g % k == 0, (global_shape, spec)
        shape.append(g // k)
    return tuple(shape)


def global_shape(block: Sequence[int], spec, mesh: RefMesh) -> tuple:
    return tuple(b * mesh.axes_size(axes) for b, axes in zip(block, dim_axes(spec, len(block))))


def block_index(shape: Sequence[int], spec, mesh: RefMesh, coord: dict) -> tuple:
    """SEMANTICS 1.4: ``x[k_0 b_0 : (k_0+1) b_0, ...]`` with ``k_d = rank_{names(spec[d])}(c)``."""
    b = block_shape(shape, spec, mesh)
    index = []
    for d, axes in enumerate(dim_axes(spec, len(shape))):
        k = mesh.rank(coord, axes)
        index.append(slice(k * b[d], (k + 1) * b[d]))
    return tuple(index)


def slice_block(x: np.ndarray, spec, mesh: RefMesh, coord: dict) -> np.ndarray:
    return np.array(x[block_index(x.shape, spec, mesh, coord)], copy=True)


def input_blocks(x: np.ndarray, spec, mesh: RefMesh) -> list:
    return [slice_block(x, spec, mesh, mesh.coord(p)) for p in mesh.positions()]


def owners(spec, mesh: RefMesh) -> list:
    """Positions whose coordinate is 0 on every axis the spec does not name."""
    named = named_axes(spec)
    return [p for p in mesh.positions()
            if all(c == 0 for a, c in mesh.coord(p).items() if a not in named)]


def assemble(blocks: list, spec, mesh: RefMesh) -> np.ndarray:
    """SEMANTICS 1.5: named axes concatenate; unnamed axes untile to the coordinate-0 block."""
    first = np.asarray(blocks[0])
    for b in blocks:
        assert b.shape == first.shape and b.dtype == first.dtype
    shape = global_shape(first.shape, spec, mesh)
    out = np.zeros(shape, first.dtype)
    filled = np.zeros(shape, bool)
    for p in owners(spec, mesh):
        index = block_index(shape, spec, mesh, mesh.coord(p))
        assert not filled[index].any(), "two owners wrote one element"
        out[index] = blocks[p]
        filled[index] = True
    assert filled.all(), "some element has no owner"
    return out


def copies_equal(blocks: list, spec, mesh: RefMesh) -> bool:
    """Whether blocks of positions differing only along unnamed axes are bitwise equal."""
    named = named_axes(spec)
    by_key: dict = {}
    for p in mesh.positions():
        c = mesh.coord(p)
        key = tuple(c[a] for a in mesh.axis_names if a in named)
        by_key.setdefault(key, []).append(np.asarray(blocks[p]))
    return all(_bitwise_equal(group[0], b) for group in by_key.values() for b in group[1:])


def _bitwise_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return (a.shape == b.shape and a.dtype == b.dtype
            and np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes())


# --- dtype promotion (JAX, x64 off) ----------------------------------------------------------------

def _result_dtype(operands) -> np.dtype:
    """The cases the test bodies use: Python scalars are weak (keep the array's dtype, a
    Python float with integers gives float32); int32 with float32 is float32."""
    strong = [o.dtype for o in operands if isinstance(o, (Blocks, np.ndarray))]
    weak = [o for o in operands if not isinstance(o, (Blocks, np.ndarray))]
    floats = {d for d in strong if np.issubdtype(d, np.floating)}
    others = {d for d in strong if not np.issubdtype(d, np.floating)}
    assert len(floats) <= 1 and len(others) <= 1, strong
    if floats:
        return floats.pop()
    if any(isinstance(w, float) for w in weak):
        return np.dtype(np.float32)
    return others.pop() if others else np.dtype(np.int32)


# --- body values: one block per position -----------------------------------------------------------

class Blocks:
    """A body value in the lockstep reference: ``blocks[p]`` for every position ``p``, and
    ``vma``, the mesh axes it may vary over (SEMANTICS 3.2/3.3)."""
    __array_priority__ = 1000

    def __init__(self, mesh: RefMesh, blocks: list, vma=frozenset()):
        assert len(blocks) == mesh.size
        self.mesh = mesh
        self.blocks = [np.asarray(b) for b in blocks]
        self.vma = frozenset(vma)
        shapes = {b.shape for b in self.blocks}
        dts = {b.dtype for b in self.blocks}
        assert len(shapes) == 1 and len(dts) == 1, (shapes, dts)

    @property
    def shape(self) -> tuple:
        return self.blocks[0].shape

    @property
    def dtype(self) -> np.dtype:
        return self.blocks[0].dtype

    @property
    def ndim(self) -> int:
        return self.blocks[0].ndim

    def __repr__(self):
        return f"Blocks({self.blocks!r}, vma={set(self.vma)})"

    # Ordinary operations act block by block; the result varies over the operands' union.
    def _map(self, fn, *others, dtype=None):
        operands = (self,) + others
        want = _result_dtype(operands) if dtype is None else np.dtype(dtype)
        vma = frozenset().union(*[o.vma for o in operands if isinstance(o, Blocks)])
        out = []
        for p in self.mesh.positions():
            args = [_at(o, p, want) for o in operands]
            with np.errstate(all="ignore"):
                result = np.asarray(fn(*args))
            out.append(result if result.dtype == np.bool_ else result.astype(want))
        return Blocks(self.mesh, out, vma)

    def __add__(self, o): return self._map(np.add, o)
    def __radd__(self, o): return self._map(lambda a, b: np.add(b, a), o)
    def __sub__(self, o): return self._map(np.subtract, o)
    def __rsub__(self, o): return self._map(lambda a, b: np.subtract(b, a), o)
    def __mul__(self, o): return self._map(np.multiply, o)
    def __rmul__(self, o): return self._map(lambda a, b: np.multiply(b, a), o)
    def __neg__(self): return self._map(np.negative)
    def __abs__(self): return self._map(np.abs)
    def __gt__(self, o): return self._map(np.greater, o)
    def __lt__(self, o): return self._map(np.less, o)
    def __ge__(self, o): return self._map(np.greater_equal, o)
    def __le__(self, o): return self._map(np.less_equal, o)


def _at(operand, position: int, dtype) -> np.ndarray:
    """One position's operand, converted to the operation's dtype first (as JAX does)."""
    if isinstance(operand, Blocks):
        block = operand.blocks[position]
    else:
        block = np.asarray(operand)
    return block if block.dtype == np.bool_ else block.astype(dtype)


def _lift(mesh: RefMesh, value) -> Blocks:
    """A constant (a Python number or a closed-over array): the same block everywhere, {}."""
    if isinstance(value, Blocks):
        return value
    array = np.asarray(value)
    if array.dtype == np.float64:
        array = array.astype(np.float32)
    elif array.dtype == np.int64:
        array = array.astype(np.int32)
    return Blocks(mesh, [array] * mesh.size, frozenset())


class RefOps:
    """The operations a test body may use, on :class:`Blocks`, with reference semantics."""

    def __init__(self, mesh: RefMesh):
        self.mesh = mesh

    # -- collectives (SEMANTICS 2.1, 2.6) --------------------------------------------------------

    def _reduce(self, x, axis_name, combine, *, mean=False):
        axes = as_axes(axis_name)
        assert len(set(axes)) == len(axes), axes
        if not isinstance(x, Blocks):
            # A Python number: psum is x * size(A), static; pmean/pmax/pmin keep it.
            assert isinstance(x, (int, float)), x
            return x * self.mesh.axes_size(axes) if combine is np.add and not mean else x
        out = [None] * self.mesh.size
        for group in device_groups(self.mesh, axes):
            total = x.blocks[group[0]]
            for p in group[1:]:                       # once per group, in rank order
                total = combine(total, x.blocks[p])
            total = np.asarray(total).astype(x.dtype)
            if mean:
                total = (total / len(group)).astype(
                    x.dtype if np.issubdtype(x.dtype, np.floating) else np.float32)
            for p in group:
                out[p] = total
        # Lifted over A first (an invariant operand sums N copies), then invariant over A.
        return Blocks(self.mesh, out, (x.vma | frozenset(axes)) - frozenset(axes))

    def psum(self, x, axis_name):
        return self._reduce(x, axis_name, np.add)

    def pmean(self, x, axis_name):
        return self._reduce(x, axis_name, np.add, mean=True)

    def pmax(self, x, axis_name):
        return self._reduce(x, axis_name, np.maximum)

    def pmin(self, x, axis_name):
        return self._reduce(x, axis_name, np.minimum)

    def axis_index(self, axis_name) -> Blocks:
        axes = as_axes(axis_name)
        blocks = [np.int32(self.mesh.rank(self.mesh.coord(p), axes))
                  for p in self.mesh.positions()]
        return Blocks(self.mesh, blocks, frozenset(axes))

    def axis_size(self, axis_name) -> int:
        return self.mesh.axes_size(as_axes(axis_name))

    # -- numpy-like operations ------------------------------------------------------------------

    def _per_block(self, fn, x, **kwargs) -> Blocks:
        x = _lift(self.mesh, x)
        return Blocks(self.mesh, [np.asarray(fn(b, **kwargs)).astype(b.dtype)
                                  for b in x.blocks], x.vma)

    def sum(self, x, axis=None, keepdims=False):
        return self._per_block(np.sum, x, axis=axis, keepdims=keepdims)

    def max(self, x, axis=None, keepdims=False):
        return self._per_block(np.max, x, axis=axis, keepdims=keepdims)

    def min(self, x, axis=None, keepdims=False):
        return self._per_block(np.min, x, axis=axis, keepdims=keepdims)

    def abs(self, x):
        return abs(_lift(self.mesh, x))

    def maximum(self, x, y):
        return _lift(self.mesh, x)._map(np.maximum, y)

    def minimum(self, x, y):
        return _lift(self.mesh, x)._map(np.minimum, y)

    def where(self, cond, x, y):
        x, y = _lift(self.mesh, x), _lift(self.mesh, y)
        cond = _lift(self.mesh, cond)
        return cond._map(lambda c, a, b: np.where(c, a, b), x, y,
                         dtype=_result_dtype((x, y)))

    def astype(self, x, dtype):
        x = _lift(self.mesh, x)
        return Blocks(self.mesh, [b.astype(dtype) for b in x.blocks], x.vma)


# --- running a shard_map ---------------------------------------------------------------------------

class ReferenceReplicationError(ValueError):
    """An output's out_spec omits an axis its vma holds (SEMANTICS 3.5), with the check on."""


@dataclasses.dataclass
class RefResult:
    outputs: list          # assembled global numpy arrays, one per output leaf
    blocks: list           # per output: the list of per-position blocks
    vmas: list             # per output: the axes it may vary over (before the out_spec lift)


def run_body(body: Callable, mesh: RefMesh, in_specs: Sequence,
             args: Sequence[np.ndarray]) -> list:
    """Slice every input (1.4) and run ``body(ops, *blocks)`` once in lockstep.

    Returns one :class:`Blocks` per output (constants lifted to every position, vma {}).
    """
    assert len(in_specs) == len(args)
    inputs = [Blocks(mesh, input_blocks(np.asarray(x), spec, mesh), named_axes(spec))
              for x, spec in zip(args, in_specs)]
    outs = body(RefOps(mesh), *inputs)
    assert isinstance(outs, tuple), outs
    return [_lift(mesh, o) for o in outs]


def run_shard_map(body: Callable, mesh: RefMesh, in_specs: Sequence, out_specs: Sequence,
                  args: Sequence[np.ndarray], *, check_vma: bool = True) -> RefResult:
    """Reference semantics of ``shard_map(body, mesh, in_specs, out_specs)(*args)``.

    ``in_specs``/``out_specs`` are flat sequences of specs (tuples of entries), one per
    argument / output; ``body(ops, *blocks)`` returns a tuple with one value per out_spec.
    With ``check_vma`` an out_spec omitting an axis its output may vary over raises
    :class:`ReferenceReplicationError` (SEMANTICS 3.5).
    """
    outs = run_body(body, mesh, in_specs, args)
    assert len(outs) == len(out_specs), (outs, out_specs)
    if check_vma:
        for o, spec in zip(outs, out_specs):
            bad = o.vma - named_axes(spec)
            if bad:
                raise ReferenceReplicationError(
                    f"out_spec {spec} omits axes {sorted(bad)} the output may vary over")
    return RefResult(outputs=[assemble(o.blocks, spec, mesh) for o, spec in zip(outs, out_specs)],
                     blocks=[o.blocks for o in outs], vmas=[o.vma for o in outs])
