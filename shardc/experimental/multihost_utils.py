"""Utilities for several processes, under JAX's names (``jax.experimental.multihost_utils``)."""
from __future__ import annotations

import zlib

import numpy as np

from compiler.tree import broadcast_prefix, tree_flatten, tree_unflatten
from ir.sharding import NamedSharding, PartitionSpec, block_slices, normal_spec
from runtime import devices as _devices
from runtime.array import Array
from runtime.mpi import (CoherenceError, agree, allgather_objects, broadcast_object, fingerprints,
                         world)
from shardc.distributed import make_array_from_process_local_data

__all__ = [
    "sync_global_devices", "process_allgather", "assert_equal", "broadcast_one_to_all",
    "host_local_array_to_global_array", "global_array_to_host_local_array",
    "reached_preemption_sync_point",
]


def sync_global_devices(name: str) -> None:
    """Wait until every process reaches the call with the same ``name``; a process that
    reaches another name is an error on all of them."""
    if _devices.process_count() == 1:
        return
    w = world()
    names = fingerprints(zlib.crc32(str(name).encode()))
    if len(set(names)) > 1:
        differ = [r for r, n in enumerate(names) if n != names[w.rank]]
        raise CoherenceError(f"sync_global_devices({name!r}) on process {w.rank} met other "
                             f"names on processes {differ}")


def reached_preemption_sync_point(step_id: int) -> bool:
    """Whether every process has reached the step at which to checkpoint after a preemption
    notice (JAX's: a training loop asks at each step). shardc's processes receive no
    preemption notices, so it never is: False, as JAX's is without its preemption service."""
    return False


def process_allgather(in_tree, tiled: bool = False):
    """Every process's value of each leaf, on every process, as numpy arrays.

    An array spanning other processes' devices is already the same on every process: its
    global value is returned. A host value, or an array on this process's devices only, is
    this process's part: the parts are stacked along a new leading axis in process order, or
    concatenated along axis 0 with ``tiled=True`` (a scalar part as one of shape (1,)). As
    JAX's, one process's value comes back with a leading axis of 1, or as it is when tiled;
    an array spanning processes needs ``tiled=True``.

    >>> process_allgather(np.float32(shardc.process_index()))    # [0., 1.] under -n 2
    """
    leaves, treedef = tree_flatten(in_tree)
    out = []
    for leaf in leaves:
        if isinstance(leaf, Array) and not leaf.is_fully_addressable:
            if not tiled:
                raise ValueError("Gathering global non-fully-addressable arrays only supports "
                                 "tiled=True")
            out.append(np.asarray(leaf))
        else:
            out.append(_allgather_host(np.asarray(leaf), tiled))
    return tree_unflatten(treedef, out)


def _allgather_host(value: np.ndarray, tiled: bool) -> np.ndarray:
    if _devices.process_count() == 1:
        # JAX's: the value as it is when tiled (a scalar stays a scalar), else stacked
        return value if tiled else np.expand_dims(value, 0)
    agree(zlib.crc32(b"process_allgather"), "called another operation than "
          "process_allgather", doing="in process_allgather")
    parts = allgather_objects(world().comm, value, "in process_allgather")
    shapes = {(p.shape, p.dtype.str) for p in parts}
    if len(shapes) > 1:
        raise ValueError(f"process_allgather: processes hold parts of different types: "
                         f"{sorted(shapes)}")
    if tiled:
        return np.concatenate([np.atleast_1d(p) for p in parts], axis=0)
    return np.stack(parts)


def assert_equal(in_tree, fail_message: str = "") -> None:
    """Check that every process holds the same tree of values: an AssertionError with
    ``fail_message`` where a process's leaf differs (an array spanning processes is one value
    already, and is not compared).

    >>> assert_equal(step, "the processes are at different steps")
    """
    gathered = process_allgather(in_tree, tiled=True)
    leaves, _ = tree_flatten(in_tree)
    for leaf, parts in zip(leaves, tree_flatten(gathered)[0]):
        if isinstance(leaf, Array) and not leaf.is_fully_addressable:
            continue
        own = np.atleast_1d(np.asarray(leaf))
        if not np.all(np.equal(np.concatenate([own] * _devices.process_count()), parts)):
            raise AssertionError(f"{fail_message}. Expected: {gathered}; got: {in_tree}.")


def broadcast_one_to_all(in_tree, is_source=None):
    """Process 0's value of each leaf (or the process for which ``is_source`` is true), on
    every process."""
    leaves, treedef = tree_flatten(in_tree)
    if _devices.process_count() == 1:
        return tree_unflatten(treedef, [np.asarray(v) for v in leaves])
    w = world()
    doing = "in broadcast_one_to_all"
    agree(zlib.crc32(f"broadcast_one_to_all {len(leaves)}".encode()),
          "called another operation than broadcast_one_to_all", doing=doing)
    source = w.rank == 0 if is_source is None else bool(is_source)
    roots = [r for r, s in enumerate(allgather_objects(w.comm, source, doing)) if s]
    if len(roots) != 1:
        raise ValueError(f"broadcast_one_to_all: exactly one process must be the source, got "
                         f"{roots}")
    values = broadcast_object(w.comm, [np.asarray(v) for v in leaves], roots[0], doing)
    return tree_unflatten(treedef, values)


def host_local_array_to_global_array(local_inputs, global_mesh, pspecs):
    """Global arrays from each process's part: each leaf of ``local_inputs`` covers this
    process's devices' blocks under its ``pspecs`` entry (a pytree prefix) on ``global_mesh``.

    >>> x = host_local_array_to_global_array(rows, mesh, P('x'))
    """
    leaves, treedef = tree_flatten(local_inputs)
    specs = _pspecs(pspecs, local_inputs)
    return tree_unflatten(treedef, [
        make_array_from_process_local_data(NamedSharding(global_mesh, s), v)
        for v, s in zip(leaves, specs)])


def _pspecs(pspecs, tree) -> list:
    """Each leaf's PartitionSpec from ``pspecs`` (a pytree prefix of ``tree``); None is JAX's
    ValueError, here as there."""
    specs = broadcast_prefix(pspecs, tree, is_leaf=_is_spec, name="pspecs")
    if any(s is None for s in specs):
        raise ValueError("`None` is not a valid input to the pspecs argument. Please use "
                         "jax.sharding.PartitionSpec() if you wanted to replicate your input.")
    return specs


def global_array_to_host_local_array(global_inputs, global_mesh, pspecs):
    """Each process's part of global arrays, as arrays laid out by ``pspecs`` on the process's
    box of ``global_mesh`` (its ``local_mesh``): the box of the global value its devices'
    blocks cover (the inverse of ``host_local_array_to_global_array``). As JAX's, an array
    this process holds whole (always, on one process) comes back as it is.

    >>> part = global_array_to_host_local_array(x, mesh, P('x'))
    """
    leaves, treedef = tree_flatten(global_inputs)
    specs = _pspecs(pspecs, global_inputs)
    return tree_unflatten(treedef, [_host_local(value, global_mesh, spec)
                                    for value, spec in zip(leaves, specs)])


def _host_local(value, global_mesh, spec):
    """One leaf of ``global_array_to_host_local_array``."""
    if isinstance(value, Array) and value.is_fully_addressable:
        return value
    local_mesh = global_mesh.local_mesh
    return Array.from_global(_local_part(value, global_mesh, spec),
                             NamedSharding(local_mesh, spec))


def _local_part(value, global_mesh, spec) -> np.ndarray:
    """The box of ``value`` this process's devices' blocks cover under ``spec``, read from
    its own blocks where ``value`` is laid out so (nothing is gathered)."""
    mine = [p for p, d in enumerate(global_mesh.devices.flat) if _devices.is_local(d)]
    shape = tuple(np.shape(value))
    blocks = {p: block_slices(shape, spec, global_mesh, global_mesh.coords(p)) for p in mine}
    box = tuple(slice(min(b[d].start for b in blocks.values()),
                      max(b[d].stop for b in blocks.values())) for d in range(len(shape)))
    laid_out = (isinstance(value, Array) and isinstance(value.sharding, NamedSharding)
                and value.sharding.mesh == global_mesh
                and normal_spec(value.sharding.spec) == normal_spec(spec))
    if not laid_out:
        return np.asarray(value)[box]      # a host value, or laid out otherwise
    part = np.empty(tuple(s.stop - s.start for s in box), value.dtype)
    for shard in value.addressable_shards:
        spans = [i.indices(n)[:2] for i, n in zip(shard.index, shape)]
        part[tuple(slice(lo - b.start, hi - b.start)
                   for (lo, hi), b in zip(spans, box))] = shard.buffer
    return part


def _is_spec(value) -> bool:
    return isinstance(value, PartitionSpec) or value is None
