"""Utilities for several processes, under JAX's names (``jax.experimental.multihost_utils``)."""
from __future__ import annotations

import zlib

import numpy as np

from runtime import devices as _devices


def sync_global_devices(name: str) -> None:
    """Wait until every process reaches the call with the same ``name``; a process that
    reaches another name is an error on all of them."""
    if _devices.process_count() == 1:
        return
    from runtime.mpi import CoherenceError, world
    w = world()
    names = w.comm.allgather(zlib.crc32(str(name).encode()))
    if len(set(names)) > 1:
        differ = [r for r, n in enumerate(names) if n != names[w.rank]]
        raise CoherenceError(f"sync_global_devices({name!r}) on process {w.rank} met other "
                             f"names on processes {differ}")


def process_allgather(in_tree, tiled: bool = False):
    """Every process's value of each leaf, on every process, as numpy arrays.

    A global array (laid out on a mesh) is already the same on every process: its global value
    is returned. A host value is this process's part: the parts are stacked along a new
    leading axis in process order, or concatenated along axis 0 with ``tiled=True``.

    >>> process_allgather(np.float32(shardc.process_index()))    # [0., 1.] under -n 2
    """
    from compiler.tree import tree_flatten, tree_unflatten
    from runtime.array import Array
    leaves, treedef = tree_flatten(in_tree)
    out = []
    for leaf in leaves:
        if isinstance(leaf, Array):
            out.append(np.asarray(leaf))
        else:
            out.append(_allgather_host(np.asarray(leaf), tiled))
    return tree_unflatten(treedef, out)


def _allgather_host(value: np.ndarray, tiled: bool) -> np.ndarray:
    if _devices.process_count() == 1:
        parts = [value]
    else:
        from runtime.mpi import world
        parts = world().comm.allgather(value)
        shapes = {(p.shape, p.dtype.str) for p in parts}
        if len(shapes) > 1:
            raise ValueError(f"process_allgather: processes hold parts of different types: "
                             f"{sorted(shapes)}")
    if tiled:
        return np.concatenate([np.atleast_1d(p) for p in parts], axis=0)
    return np.stack(parts)


def broadcast_one_to_all(in_tree, is_source=None):
    """Process 0's value of each leaf (or the process for which ``is_source`` is true), on
    every process."""
    from compiler.tree import tree_flatten, tree_unflatten
    leaves, treedef = tree_flatten(in_tree)
    if _devices.process_count() == 1:
        return tree_unflatten(treedef, [np.asarray(v) for v in leaves])
    from runtime.mpi import world
    w = world()
    source = w.rank == 0 if is_source is None else bool(is_source)
    roots = [r for r, s in enumerate(w.comm.allgather(source)) if s]
    if len(roots) != 1:
        raise ValueError(f"broadcast_one_to_all: exactly one process must be the source, got "
                         f"{roots}")
    return tree_unflatten(treedef, [w.comm.bcast(np.asarray(v), root=roots[0]) for v in leaves])
