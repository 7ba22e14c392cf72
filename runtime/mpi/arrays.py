"""Global arrays whose blocks live on the processes holding their devices: ``Absent`` blocks
(a type, no data) for other processes' devices, and gathering a global value on every process."""
from __future__ import annotations

import numpy as np

from ir.sharding import (block_shape, block_slices, by_layout, normal_spec, owner_positions,
                         spec_axes)
from runtime.array import Array
from runtime.mpi.agreement import (Agreement, Opening, fingerprint, settle_then_wait,
                                   where_called)
from runtime.mpi.exchanges import exchange_all, joined_bytes, split_blocks
from runtime.mpi.world import world


class Absent:
    """The block of a device this rank does not hold: its type, no data."""
    __slots__ = ("shape", "dtype", "device")
    absent = True

    def __init__(self, shape, dtype, device=None):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.device = device

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __array__(self, dtype=None, copy=None):
        where = f" of {self.device}" if self.device is not None else ""
        raise RuntimeError(f"the block{where} is held by another process; gather the global "
                           "array (np.asarray) to read it")

    def __repr__(self):
        return f"Absent({self.dtype.name}{list(self.shape)})"


def is_absent(value) -> bool:
    return type(value) is Absent


def local_positions(mesh, rank: int) -> list:
    return [p for p, d in enumerate(mesh.devices.flat) if d.process_index == rank]


class MpiArray(Array):
    """A global array laid out on a mesh whose blocks live on the ranks holding their devices;
    the global value is gathered, on every rank, when first read."""

    def _assemble(self) -> np.ndarray:
        if self._global is None:
            self._global = gather_global(self)
        return self._global

    @property
    def buffers(self) -> list:
        if self._buffers is None and self._local is not None:
            self._buffers = self._local.buffers()     # a stacked run's output
        return Array.buffers.fget(self)


# what reading global arrays has cost this process: the price of a script running unchanged
gather_record = {"gathers": 0, "bytes_sent": 0, "bytes_received": 0}


def gather_global(array: MpiArray) -> np.ndarray:
    """The global value of ``array`` on every rank: each block is sent once, by the rank of its
    first owner (devices holding copies send nothing). Where every rank holds a copy of every
    block (a replicated array, or one split only over axes within each process), each rank
    assembles it from its own devices: nothing is sent, nothing counted."""
    w = world()
    mesh, spec = array.sharding.mesh, array.sharding.spec
    local = _local_copies(mesh, spec, w.rank, w.size)
    if local is not None:
        stack = array._local
        if stack is not None and not any(spec):
            # replicated, as a stacked run left it: its first block is the value
            return np.array(stack.data[(0,) * len(stack.lead)], order="K")
        out = np.empty(array.shape, array.dtype)
        for coords, p in local:
            out[block_slices(array.shape, spec, mesh, coords)] = array.buffers[p]
        return out
    runs = _row_runs(mesh, spec, array.shape)
    if runs is not None:
        return _gather_rows(array, runs, w)
    owners = owner_positions(spec, mesh)
    rank_of = [mesh.devices.flat[p].process_index for p in owners]
    bshape = block_shape(array.shape, spec, mesh.shape)
    nbytes = int(np.prod(bshape, dtype=np.int64)) * array.dtype.itemsize
    mine = [array.buffers[p] for p, r in zip(owners, rank_of) if r == w.rank]
    counts = [nbytes * rank_of.count(r) for r in range(w.size)]
    data = exchange_all(w.comm, mine, counts, _gathering(array))
    _count_gather(counts[w.rank] * (w.size - 1), sum(counts) - counts[w.rank])
    out = np.empty(array.shape, array.dtype)
    taken = [0] * w.size
    for p, r in zip(owners, rank_of):
        (block,) = split_blocks(data[r][taken[r] * nbytes:], 1, bshape, array.dtype)
        taken[r] += 1
        out[block_slices(array.shape, spec, mesh, mesh.coords(p))] = block
    return out


def _gather_rows(array: MpiArray, runs: list, w) -> np.ndarray:
    """``gather_global`` where each process's blocks are one run of the global value's rows,
    the same number of blocks each, in rank order (``_row_runs``): the value's bytes are the
    processes' runs one after another, so they are gathered straight into it."""
    mine = [array.buffers[p] for p in runs[w.rank]]
    nbytes = sum(b.nbytes for b in mine)
    out = np.empty(array.shape, array.dtype)
    settle_then_wait(_gathering(array), [w.comm.Iallgather(
        joined_bytes(mine), out.reshape(-1).view(np.uint8))])
    _count_gather(nbytes * (w.size - 1), nbytes * (w.size - 1))
    return out


def _gathering(array: MpiArray) -> Opening:
    """The agreement of gathering ``array`` (every process reads it, in the same order)."""
    spec, mesh = normal_spec(array.sharding.spec), array.sharding.mesh
    what = f"{array.aval.str_short()} laid out {spec!r}"
    return Opening(Agreement(
        fingerprint(f"gather {array.shape} {array.dtype} {spec} {mesh}"),
        "gathered different arrays (a global array is gathered by every process: "
        "read it on all of them, in the same order)",
        detail=lambda: [("reading", f"{what}{where_called()}")],
        doing=lambda: f"to read a global array {what}{where_called()} (a global array is "
                      "gathered by every process: read it on all of them)"))


def _count_gather(sent: int, received: int) -> None:
    gather_record["gathers"] += 1
    gather_record["bytes_sent"] += sent
    gather_record["bytes_received"] += received


def _row_runs(mesh, spec, shape):
    """By rank, the positions whose blocks it sends, in row order, when every block is a run
    of whole rows (only the first dimension is split), each process's blocks follow one
    another, the processes come in rank order and each has as many: else None (worked out
    once per layout)."""
    return by_layout(_ROW_RUNS, _find_row_runs, shape, mesh, spec)


_ROW_RUNS: dict = {}


def _find_row_runs(shape: tuple, mesh, spec):
    if not shape or any(n == 0 for n in shape):
        return None
    starts = []
    for p in owner_positions(spec, mesh):
        rows, *rest = block_slices(shape, spec, mesh, mesh.coords(p))
        if any(cut != slice(0, n) for cut, n in zip(rest, shape[1:])):
            return None
        starts.append((rows.start, p))
    ranks = [mesh.devices.flat[p].process_index for _, p in sorted(starts)]
    runs = [[p for _, p in sorted(starts) if mesh.devices.flat[p].process_index == r]
            for r in range(world().size)]
    if ranks != sorted(ranks) or len({len(run) for run in runs}) != 1:
        return None
    return runs


def _local_copies(mesh, spec, rank: int, size: int):
    """(owner position, its coordinates, a position of this rank holding the same block) for
    every block, when every rank holds a copy of every block; else None. The same answer on
    every rank: it depends on the layout and the devices' processes only (worked out once
    per mesh and layout: outputs are read at every step)."""
    key = (id(mesh), tuple(spec), rank, size)
    entry = _LOCAL_COPIES.get(key)
    if entry is None or entry[0] is not mesh:
        if len(_LOCAL_COPIES) > 4096:
            _LOCAL_COPIES.clear()
        entry = _LOCAL_COPIES[key] = (mesh, _find_local_copies(mesh, spec, rank, size))
    return entry[1]


_LOCAL_COPIES: dict = {}


def _find_local_copies(mesh, spec, rank: int, size: int):
    named = set(spec_axes(spec))
    split = [k for k, name in enumerate(mesh.axis_names) if name in named]
    holders: dict = {}
    mine: dict = {}
    for p in range(mesh.size):
        key = tuple(mesh.coords(p)[k] for k in split)
        r = mesh.devices.flat[p].process_index
        holders.setdefault(key, set()).add(r)
        if r == rank:
            mine.setdefault(key, p)
    if any(len(ranks) != size for ranks in holders.values()):
        return None
    return [(mesh.coords(owner), mine[tuple(mesh.coords(owner)[k] for k in split)])
            for owner in owner_positions(spec, mesh)]


def gather_positions(column: list, mesh) -> list:
    """Every position's block on every rank (each rank sends the blocks of its devices)."""
    w = world()
    rank_of = [d.process_index for d in mesh.devices.flat]
    like = column[0]
    shape, dtype = tuple(np.shape(like)) if not is_absent(like) else like.shape, like.dtype
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    mine = [column[p] for p in range(mesh.size) if rank_of[p] == w.rank]
    counts = [nbytes * rank_of.count(r) for r in range(w.size)]
    opening = Opening(Agreement(
        fingerprint(f"positions {shape} {dtype}"), "gathered different blocks",
        doing=lambda: f"to compare the blocks of a result (check_vma='runtime'){where_called()}"))
    data = exchange_all(w.comm, [np.asarray(b) for b in mine], counts, opening)
    by_rank = {r: iter(split_blocks(data[r], rank_of.count(r), shape, dtype))
               for r in range(w.size)}
    return [next(by_rank[r]) for r in rank_of]
