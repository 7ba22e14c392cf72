"""Devices, meshes and placement: ``make_mesh``, ``device_put`` (a value laid out by a
sharding, a PartitionSpec on the current mesh, or a device) and ``local_device_count``."""
from __future__ import annotations

import math
import operator

import numpy as np

from compiler.backend import get_backend
from compiler.eager import ShardTrace
from compiler.shard_map import current_shard_context
from compiler.tracing import (ProgramTrace, Tracer, aval_of, check_jax_leaves,
                              device_put_traced, innermost_trace, weakened, weakly_typed)
from compiler.tree import flatten_axes, is_spec_leaf, leaf_paths, tree_flatten, tree_unflatten
from ir import primitives as prims
from ir import transfer_guard as _transfer_guard
from ir.layout import sharding_of_format
from ir.sharding import (AxisType, Mesh, NamedSharding, PartitionSpec, normal_spec,
                         position_slices)
from runtime.array import Array, SingleDeviceSharding
from runtime.array import live_arrays as _live_arrays
from runtime.devices import Device, default_device
from runtime.devices import devices as all_devices
from runtime.devices import local_devices
from runtime.placement import HOST_TYPES, array_aval_text
from runtime.reference import device_put as _device_put_one
from shardc._types import ManualAxisType
from shardc.sharding import resolve_sharding

__all__ = ["device_put", "local_device_count", "make_mesh"]


def device_put(x, device=None, *, src=None, donate=False, may_alias=None):
    """Lay out ``x`` (a pytree) by ``device``: a NamedSharding, a PartitionSpec on the current
    mesh, a device, or a pytree prefix of those; default device 0.

    As JAX's, ``may_alias`` (default: unless donated) lets an array already laid out so come
    back as itself, and ``may_alias=False`` or ``donate=True`` give a new array (each a bool,
    or a pytree prefix of bools). A donated input stays alive, as JAX's CPU arrays do (JAX
    donates where it can). ``src``: where a gradient sends the cotangent back to (default:
    where ``x`` lies); shardc knows where every array lies, so it is unused otherwise."""
    leaves, treedef = tree_flatten(x)
    check_jax_leaves(leaves, x, lambda path: f"device_put: x{path}")
    for leaf in leaves:
        if isinstance(leaf, Array) and not isinstance(leaf, Tracer):
            leaf._check_alive()      # a deleted (donated) array, even where it would stay put
    semantics = _copy_semantics(x, leaves, donate, may_alias)
    if semantics is not None:
        placed = tree_flatten(device_put(x, device))[0]
        out = []
        for given, result, alias in zip(leaves, placed, semantics):
            if not alias and result is given and isinstance(given, Array):
                result = given.copy()            # a new array, as asked
            out.append(result)
        return tree_unflatten(treedef, out)
    if current_shard_context() is not None:
        return _device_put_in_body(x, leaves, device)
    if any(isinstance(v, Tracer) for v in leaves):
        # under jit: a value traced is laid out as a sharding asks (JAX's device_put there
        # reshards it), a device changes nothing
        targets = ([None] * len(leaves) if device is None else
                   [sharding_of_format(t, np.shape(v), "device_put") for t, v in zip(
                       flatten_axes("device_put device", device, x, is_leaf=_is_target),
                       leaves)])
        sources = ([None] * len(leaves) if src is None else
                   flatten_axes("device_put src", src, x, is_leaf=_is_target))
        return tree_unflatten(treedef, [_device_put_traced(v, t, s)
                                        for v, t, s in zip(leaves, targets, sources)])
    if device is None:
        # an array stays where it is laid out (JAX's device_put(x) hands it back); host
        # values go to the default device
        if _transfer_guard.active:
            _guard_put(leaves, [None] * len(leaves))
        placed = [v if isinstance(v, Array) else _device_put_one(v) for v in leaves]
    else:
        targets = flatten_axes("device_put device", device, x, is_leaf=_is_target)
        targets = [sharding_of_format(t, np.shape(v), "device_put")
                   for t, v in zip(targets, leaves)]
        # a None entry leaves its leaf as ``device=None`` does (JAX's)
        given = [k for k, t in enumerate(targets) if t is not None]
        shardings = [resolve_sharding(targets[k], "device_put") for k in given]
        if _transfer_guard.active:
            _guard_put([leaves[k] for k in given], shardings)
            _guard_put([v for v, t in zip(leaves, targets) if t is None],
                       [None] * (len(leaves) - len(given)))
        labels = lambda: [f"device_put x{path}" for k, path in enumerate(leaf_paths(x))
                          if targets[k] is not None]             # for errors only
        put = iter(get_backend().put([leaves[k] for k in given], shardings, labels))
        placed = [next(put) if t is not None else v if isinstance(v, Array)
                  else _device_put_one(v) for v, t in zip(leaves, targets)]
    # a weakly typed value stays so (a Python number too), as in JAX
    return tree_unflatten(treedef, [weakened(p) if weakly_typed(v) and not isinstance(v, bool)
                                    else p for p, v in zip(placed, leaves)])


def _guard_put(leaves, shardings) -> None:
    """The transfer guards on ``device_put``'s moves (explicit transfers): a host value to its
    target, host-to-device; an array to devices that do not hold its blocks already,
    device-to-device. As in JAX, an array laid out over the same devices in another order
    moves by a program run on them (JAX's jitted reshard), no transfer."""
    for value, sharding in zip(leaves, shardings):
        if isinstance(sharding, Device):
            sharding = SingleDeviceSharding(sharding)
        if isinstance(value, HOST_TYPES):
            target = sharding or SingleDeviceSharding(default_device())
            _transfer_guard.check("host_to_device", True, lambda: (
                f"aval={_transfer_guard.host_aval_text(value)}, dst_sharding={target!r}"))
        elif isinstance(value, Array) and sharding is not None and _moves_blocks(value,
                                                                                 sharding):
            source = value.sharding
            # JAX names the source where blocks move whole, and in its implicit moves
            kept = _transfer_guard.scope_explicit() is False or (
                    isinstance(source, NamedSharding) and isinstance(sharding, NamedSharding)
                    and source.mesh.axis_sizes == sharding.mesh.axis_sizes
                    and normal_spec(source.spec) == normal_spec(sharding.spec))
            _transfer_guard.check("device_to_device", True, lambda: (
                f"aval={array_aval_text(value)}, "
                + (f"sharding={source!r}, " if kept else "") + f"dst_sharding={sharding!r}"))


def _moves_blocks(value, sharding) -> bool:
    """Whether laying ``value`` out by ``sharding`` copies data between devices: some device
    needs a block it does not hold (the same devices in another order excepted: there JAX
    reshards by a program)."""
    source = value.sharding
    if (isinstance(source, NamedSharding) and isinstance(sharding, NamedSharding)
            and source.mesh.size > 1
            and source.mesh.flat_device_ids != sharding.mesh.flat_device_ids
            and set(source.mesh.flat_device_ids) == set(sharding.mesh.flat_device_ids)):
        return False
    held: dict = {}
    for device, block in _blocks(source, value.shape):
        held.setdefault(device.id, []).append(block)
    return not all(any(_covers(have, need) for have in held.get(device.id, ()))
                   for device, need in _blocks(sharding, value.shape))


def _blocks(sharding, shape):
    """``(device, ((start, stop) per dimension))`` of every device of a layout."""
    if isinstance(sharding, SingleDeviceSharding):
        return [(sharding.device, tuple((0, n) for n in shape))]
    mesh = sharding.mesh
    return [(device, tuple(s.indices(n)[:2] for s, n in zip(slices, shape)))
            for device, slices in zip(mesh.devices.flat,
                                      position_slices(shape, sharding.spec, mesh))]


def _covers(have, need) -> bool:
    return all(a <= c and d <= b for (a, b), (c, d) in zip(have, need))


def _copy_semantics(x, leaves, donate, may_alias):
    """Whether each leaf may come back as itself, checked as JAX checks ``may_alias`` and
    ``donate``; None where every leaf may (the default: nothing to do beyond placing)."""
    if donate is False and may_alias in (None, True):
        return None
    donates = ([donate] * len(leaves) if isinstance(donate, bool) else
               flatten_axes("device_put donate", donate, x, is_leaf=_is_flag))
    aliases = ([may_alias] * len(leaves) if may_alias is None or isinstance(may_alias, bool)
               else flatten_axes("device_put may_alias", may_alias, x, is_leaf=_is_flag))
    semantics = []
    for alias, give_up in zip(aliases, donates):
        if alias and give_up:
            raise ValueError("may_alias and donate cannot be True at the same time.")
        semantics.append(not give_up if alias is None else alias)
    if any(isinstance(v, Tracer) for v in leaves) or current_shard_context() is not None:
        return None                  # a traced value is no buffer to copy or delete
    return semantics


def _is_flag(value) -> bool:
    return value is None or isinstance(value, bool)


def _device_put_traced(value, target, src):
    if target is None:
        return value
    sharding = resolve_sharding(target, "device_put")
    if not isinstance(value, Tracer):
        return device_put(value, sharding) if isinstance(sharding, NamedSharding) else value
    source = None if src is None else resolve_sharding(src, "device_put")
    return device_put_traced(value, sharding, source)


def _is_target(s) -> bool:
    """A leaf of ``device_put``'s targets: a sharding, a PartitionSpec or a device (None
    among them is a leaf too: the value stays where it is)."""
    return is_spec_leaf(s)


def _device_put_in_body(x, leaves, device):
    """``device_put`` inside a shard_map body, as JAX 0.10 takes it: without a target, or
    under jit with a device or a sharding of a value that varies over no manual axis, it
    changes nothing; an eager body refuses any target, and under jit a sharding cannot
    hold a value that varies over the body's axes."""
    if device is None:
        return x
    targets = flatten_axes("device_put device", device, x, is_leaf=_is_target)
    for leaf, target in zip(leaves, targets):
        if isinstance(target, PartitionSpec):
            target = resolve_sharding(target, "device_put")
        vma = aval_of(leaf).vma
        if isinstance(target, NamedSharding) and vma:
            mat = ManualAxisType(varying=frozenset(vma))
            kinds = dict(zip(target.mesh.axis_names, target.mesh.axis_types))
            axis = next(a for a in target.mesh.axis_names if a in vma)
            raise ValueError(
                "Axes mentioned in `manual_axis_type` field of ShapedArray should be of type "
                f"`Manual`. Got manual_axis_type={mat!r} with axis: {axis} of type "
                f"{kinds[axis]}")
    if isinstance(innermost_trace((ShardTrace, ProgramTrace)), ShardTrace):
        raise ValueError("device_put with explicit device not allowed within "
                         f"shard_map-decorated functions, but got device {device}")
    return x


def make_mesh(axis_shapes, axis_names, axis_types=None, *, devices=None):
    """A mesh of the first ``prod(axis_shapes)`` devices, in order. Its axes are Explicit
    unless ``axis_types`` says otherwise, as in JAX 0.10."""
    pool = list(all_devices() if devices is None else devices)
    try:
        axis_shapes = tuple(operator.index(s) for s in axis_shapes)
    except TypeError:
        raise ValueError("`axis_shapes` passed to `make_mesh` should be a sequence of ints. "
                         f"Got {axis_shapes}") from None
    if isinstance(axis_names, str):     # make_mesh((8,), ('x')) names one axis, as JAX's
        axis_names = (axis_names,)
    n = math.prod(axis_shapes)
    if n > len(pool):
        raise ValueError(f"make_mesh: the mesh shape {tuple(axis_shapes)} needs {n} devices, "
                         f"but only {len(pool)} are available")
    array = np.empty(n, dtype=object)
    for k in range(n):
        array[k] = pool[k]
    if axis_types is None:
        axis_types = (AxisType.Explicit,) * len(axis_shapes)
    return Mesh(array.reshape(tuple(axis_shapes)), tuple(axis_names), axis_types=axis_types)


def live_arrays(platform=None) -> list:
    """Every array alive now (JAX's ``jax.live_arrays``): those not yet freed or deleted.
    shardc has one backend, so ``platform`` selects nothing."""
    return _live_arrays()


def local_device_count(backend=None) -> int:
    """The number of devices this process holds."""
    return len(local_devices(backend=backend))
