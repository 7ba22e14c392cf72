"""Several processes, as JAX's multi-controller model: every process runs the same script;
``shardc.devices()`` is global, ``shardc.local_devices()`` this process's share.

Under ``mpiexec -n N`` (or ``SHARDC_BACKEND=mpi``) shardc joins the MPI world when imported,
splits the ``SHARDC_NUM_DEVICES`` devices evenly over the processes, and runs each shard_map
body on the processes holding its devices (``runtime.mpi``). One process is the simulator.

>>> shardc.distributed.initialize()      # optional: validates the launch
>>> shardc.process_index(), shardc.process_count()
"""
from __future__ import annotations

import numpy as np

from compiler.backend import get_backend, set_backend
from compiler import tree
from ir import dtypes
from ir.sharding import (NamedSharding, PartitionSpec, Sharding, axes_size, block_index,
                         block_shape, block_slices, check_divides, check_rank, spec_names)
from runtime import devices as _devices
from runtime import mpi as _mpi
from compiler.tracing import Tracer
from ir.core import Aval
from ir.layout import sharding_of_format
from ir.sharding_rules import type_sharding
from runtime.array import Array, SingleDeviceSharding, canonical_array, detached
from shardc.sharding import resolve_sharding

__all__ = [
    "initialize", "is_initialized", "shutdown", "make_array_from_callback",
    "make_array_from_single_device_arrays",
    "make_array_from_process_local_data", "gather_costs", "mpi_wanted", "select_backend",
    "backend_named", "install_backend", "set_backend_name",
]

_state = {"initialized": False}


def mpi_wanted() -> bool:
    """Whether the environment asks for the MPI backend (a launch of several processes, or
    ``SHARDC_BACKEND=mpi``)."""
    return _mpi.wanted()


def select_backend():
    """The backend the environment asks for: MPI under a launch of several processes (or
    ``SHARDC_BACKEND=mpi``), else the simulator's ``SHARDC_BACKEND`` (default ``fast``)."""
    # the simulator's backends load only when one is asked for (not in an MPI process)
    from runtime.vectorized import backend_named, default_backend_name
    if _mpi.wanted():
        return _mpi.install()
    return backend_named(default_backend_name())


def backend_named(name: str):
    """A backend by name: ``'mpi'`` or one of the simulator's."""
    if name == "mpi":
        return _mpi.install()
    from runtime.vectorized import backend_named as simulator_backend   # (as select_backend)
    return simulator_backend(name)


class _UnknownBackend:
    """Installed when SHARDC_BACKEND names no backend: importing works (as JAX's does with a
    bad platform name) and the first use raises the error, so nothing runs on a guess."""

    def __init__(self, error: ValueError):
        self.error = error

    def __getattr__(self, name):
        raise ValueError(str(self.error))


def install_backend() -> None:
    """Install the backend the environment asks for (``import shardc`` does)."""
    if mpi_wanted():
        # under mpiexec with several processes: the MPI backend (its errors, such as devices
        # that do not split evenly over the processes, end the import on every process)
        set_backend(select_backend())
    else:
        try:
            set_backend(select_backend())
        except ValueError as error:
            set_backend(_UnknownBackend(error))


def set_backend_name(name: str) -> None:
    """Run programs on the ``'fast'`` backend (stacked over devices; the default), the
    ``'reference'`` one (one program per device, the oracle), ``'check'`` (both, results
    compared), or ``'mpi'`` (the processes of an MPI job). ``SHARDC_BACKEND`` sets the
    initial one."""
    set_backend(backend_named(name))


def initialize(coordinator_address=None, num_processes=None, process_id=None,
               local_device_ids=None, **unused):
    """Validate the multi-process launch: shardc joined the MPI world when imported, so this
    only checks what is given against it (``num_processes``, ``process_id``,
    ``local_device_ids``); ``coordinator_address`` is accepted and not used (MPI has its own
    launcher). A second call is a RuntimeError, as in JAX.

    >>> shardc.distributed.initialize(num_processes=2)     # under mpiexec -n 2
    """
    if _state["initialized"]:
        raise RuntimeError("distributed.initialize should only be called once.")
    count, index = _devices.process_count(), _devices.process_index()
    if num_processes is not None and int(num_processes) != count:
        raise ValueError(f"distributed.initialize: num_processes={num_processes}, but the job "
                         f"has {count} process(es) (launch with mpiexec -n {num_processes})")
    if process_id is not None and int(process_id) != index:
        raise ValueError(f"distributed.initialize: process_id={process_id}, but this is "
                         f"process {index}")
    if local_device_ids is not None:
        mine = [d.id for d in _devices.local_devices()]
        asked = [local_device_ids] if isinstance(local_device_ids, int) else list(local_device_ids)
        if sorted(asked) != mine:
            raise ValueError(f"distributed.initialize: local_device_ids={asked}, but process "
                             f"{index} holds devices {mine}")
    _state["initialized"] = True


def is_initialized() -> bool:
    return _state["initialized"]


def shutdown() -> None:
    """Forget ``initialize`` (the MPI world itself ends when the process exits)."""
    _state["initialized"] = False


def gather_costs() -> dict:
    """What reading global arrays has cost this process so far: ``gathers`` (how many arrays
    were gathered), ``bytes_sent`` and ``bytes_received`` (their blocks' bytes, this process's
    to the others and the others' to it). All zero on one process, where nothing is gathered.

    >>> np.asarray(y); shardc.distributed.gather_costs()["bytes_received"]
    """
    return dict(_mpi.gather_record)


# --- global arrays from per-process data -------------------------------------------------------

def make_array_from_callback(shape, sharding, data_callback, dtype=None):
    """A global array of ``shape`` laid out by ``sharding`` (any Sharding):
    ``data_callback(index)`` gives the block at ``index``, a tuple of slices with
    ``slice(None)`` along the dimensions the sharding does not split. As JAX's, it is called
    once per device of this process in the mesh's order, or once in all (with the whole index)
    when every device holds the whole array. ``dtype``, where given, must be the blocks' own.

    >>> x = shardc.make_array_from_callback((8, 4), NamedSharding(mesh, P('x')),
    ...                                     lambda index: global_value[index])
    """
    sharding = sharding_of_format(sharding, tuple(shape), "make_array_from_callback")
    if not isinstance(sharding, Sharding):
        raise TypeError(f"sharding should be an instance of `jax.sharding`. Got {sharding} of "
                        f"type {type(sharding)}")
    shape = tuple(shape)
    indices = sharding.devices_indices_map(shape)
    if sharding.is_fully_replicated:
        whole = _callback_block(data_callback, (slice(None),) * len(shape), shape, sharding)
        blocks = [whole if d.is_local else None for d in indices]
    else:
        blocks = [_callback_block(data_callback, index, shape, sharding) if d.is_local else None
                  for d, index in indices.items()]
    _check_user_dtype(blocks, dtype, "make_array_from_callback")
    if isinstance(sharding, SingleDeviceSharding):
        return Array.from_global(blocks[0], sharding).committed_to()
    return _from_local_blocks(blocks, sharding.mesh, sharding.spec, shape)


def _callback_block(data_callback, index, shape, sharding) -> np.ndarray:
    """The callback's block at ``index``, checked against the sharding's block shape."""
    block = _canonical(data_callback(index))
    want = sharding.shard_shape(shape)
    if block.shape != want:
        type_text = (_type_text(block.dtype, shape, sharding.spec, sharding.mesh)
                     if isinstance(sharding, NamedSharding)
                     else f"{block.dtype.name}[{','.join(map(str, shape))}]")
        raise ValueError(f"Expected shard shape {want} doesn't match the single device "
                         f"array shape {block.shape}. Shape of Array is {type_text} with sharding "
                         f"{sharding} (make_array_from_callback's callback, given the "
                         f"index {index})")
    return block


def _check_user_dtype(arrays, dtype, name) -> None:
    """JAX's check of a ``dtype=`` against the arrays given: it converts nothing, and it is
    needed where this process holds no array."""
    present = [a for a in arrays if a is not None]
    if dtype is None:
        if not present:
            raise ValueError("If the Array has no addressable shards, `dtype` must be provided "
                             f"via the `dtype` argument to `jax.{name}`.")
        return
    dtype = dtypes.canonicalize(np.dtype(dtype))
    if present and np.dtype(present[0].dtype) != dtype:
        raise ValueError(f"If `dtype` is provided to `jax.{name}`, it must match the dtype of "
                         f"the addressable shards. Got dtype={dtype} and shard "
                         f"dtype={present[0].dtype}`.")


def make_array_from_single_device_arrays(shape, sharding, arrays, *, dtype=None):
    """A global array of ``shape`` laid out by ``sharding`` from one array per addressable
    device (each that device's block): matched by device where an array names its own, else
    in the order of the mesh's devices. ``dtype``, where given, is the arrays' own (JAX's
    check: it converts nothing), and is needed where this process has no device."""
    name = "make_array_from_single_device_arrays"
    if not isinstance(arrays, (list, tuple)):
        raise TypeError(f"jax.{name} `arrays` argument must be a list or tuple, but got "
                        f"{type(arrays)}.")
    if any(isinstance(a, Tracer) for a in arrays):
        raise ValueError(f"jax.{name} requires a list of concrete arrays as input, but got "
                         f"types {set(map(type, arrays))}")
    for array in arrays:
        if not isinstance(array, Array):        # JAX's: numpy arrays are not device arrays
            raise TypeError(f"Unsupported type for elements in `arrays`: {type(array)}")
    _check_user_dtype(arrays, dtype, name)
    for array in arrays:
        shards = getattr(array, "addressable_shards", None)
        if shards is not None and len(shards) != 1:
            raise ValueError("When making an array from single-device arrays the input arrays "
                             f"must have one shard each. An argument array had {len(shards)} "
                             "shard(s).")
    shape = tuple(shape)
    if isinstance(sharding, SingleDeviceSharding):
        # the one array is the whole value, on that device
        if len(arrays) != 1 or tuple(np.shape(arrays[0])) != shape:
            raise ValueError(f"jax.{name}: a SingleDeviceSharding takes one array of shape "
                             f"{shape}, got {[tuple(np.shape(a)) for a in arrays]}")
        return Array.from_global(_canonical(np.asarray(arrays[0])), sharding).committed_to()
    mesh, spec = _named(sharding, name)
    local = [(p, d) for p, d in enumerate(mesh.devices.flat) if _devices.is_local(d)]
    arrays = list(arrays)
    if len(arrays) != len(local):
        raise ValueError(f"make_array_from_single_device_arrays: got {len(arrays)} arrays for "
                         f"{len(local)} addressable devices of {sharding!r}")
    by_device = {}
    for k, array in enumerate(arrays):
        named = getattr(array, "devices", None)
        device = next(iter(named())) if callable(named) and len(named()) == 1 else local[k][1]
        by_device[device] = array
    blocks = [None] * mesh.size
    for p, device in local:
        if device not in by_device:
            raise ValueError(f"make_array_from_single_device_arrays: no array for {device}")
        block = _canonical(np.asarray(by_device[device]))
        want = tuple(s.stop - s.start for s in block_slices(shape, spec, mesh, mesh.coords(p)))
        if block.shape != want:
            raise ValueError(f"make_array_from_single_device_arrays: the array for {device} has "
                             f"shape {block.shape}, but its block of {shape} is {want}")
        blocks[p] = block
    return _from_local_blocks(blocks, mesh, spec, shape)


def make_array_from_process_local_data(sharding, local_data, global_shape=None):
    """A global array from each process's part of it: ``local_data`` covers the blocks of this
    process's devices (a contiguous box of the global array). ``global_shape`` defaults to
    the local shape scaled by how many such boxes tile each dimension. ``local_data`` may be
    a pytree, ``sharding`` and ``global_shape`` prefixes of it; a PartitionSpec is read on the
    current mesh, and a sharding on one device places the data there.

    >>> x = shardc.make_array_from_process_local_data(NamedSharding(mesh, P('x')), rows)
    """
    leaves, treedef = tree.tree_flatten(local_data)
    shardings = tree.broadcast_prefix(sharding, local_data,
                                      is_leaf=lambda s: isinstance(s, (PartitionSpec, Sharding)),
                                      name="make_array_from_process_local_data sharding")
    shapes = tree.broadcast_prefix(global_shape, local_data,
                                   is_leaf=lambda s: s is None or isinstance(s, tuple),
                                   name="make_array_from_process_local_data global_shape")
    if _devices.process_count() == 1:
        # JAX's check on one process, where the local data is the whole array
        for shape, leaf in zip(shapes, leaves):
            if shape is not None and tuple(shape) != np.shape(leaf):
                raise ValueError(
                    "When calling `make_array_from_process_local_data` on a single process, "
                    "global_shape should be None or equal to local_data.shape.Got "
                    f"global_shape={shape} and local_data.shape={np.shape(leaf)}.")
    return tree.tree_unflatten(treedef, [
        _from_process_local_data(resolve_sharding(s, "make_array_from_process_local_data"),
                                 leaf, shape)
        for s, leaf, shape in zip(shardings, leaves, shapes)])


def _from_process_local_data(sharding, local_data, global_shape):
    if not isinstance(sharding, NamedSharding):
        # one device: every process holds it whole
        if global_shape is not None and tuple(global_shape) != np.shape(local_data):
            raise ValueError("make_array_from_process_local_data: a sharding on one device "
                             f"takes the whole array, but global_shape={tuple(global_shape)} "
                             f"and local_data has shape {np.shape(local_data)}")
        return Array.from_global(_canonical(local_data), sharding).committed_to()
    mesh, spec = sharding.mesh, sharding.spec
    local_data = _canonical(local_data)
    names = spec_names(spec) + ((),) * (local_data.ndim - len(spec_names(spec)))
    counts = [axes_size(mesh.shape, n) for n in names[:local_data.ndim]]
    mine = [p for p, d in enumerate(mesh.devices.flat) if _devices.is_local(d)]
    if not mine:
        raise _holds_none(mesh)
    index_of = {p: tuple(block_index(spec, mesh, mesh.coords(p))) + (0,) * local_data.ndim
                for p in range(mesh.size)}
    lows = [min(index_of[p][d] for p in mine) for d in range(local_data.ndim)]
    spans = [max(index_of[p][d] for p in mine) - lows[d] + 1 for d in range(local_data.ndim)]
    if global_shape is None:
        global_shape = tuple(n * k // s for n, k, s in zip(local_data.shape, counts, spans))
    global_shape = tuple(global_shape)
    check_rank(sharding, len(global_shape), "make_array_from_process_local_data arguments")
    check_divides(sharding, global_shape)                   # JAX's IndivisibleError
    block = [g // k for g, k in zip(global_shape, counts)]
    expected = tuple(b * s for b, s in zip(block, spans))
    if local_data.shape != expected:
        raise ValueError(f"make_array_from_process_local_data: process "
                         f"{_devices.process_index()} holds blocks covering shape {expected} of "
                         f"the global shape {global_shape}, but local_data has shape "
                         f"{local_data.shape}")
    blocks = []
    for p in range(mesh.size):
        if p not in mine:
            blocks.append(None)
            continue
        box = tuple(slice((index_of[p][d] - lows[d]) * block[d],
                          (index_of[p][d] - lows[d] + 1) * block[d])
                    for d in range(local_data.ndim))
        blocks.append(local_data[box])
    return _from_local_blocks(blocks, mesh, spec, global_shape)


def _named(sharding, who):
    if not isinstance(sharding, NamedSharding):
        raise TypeError(f"{who} requires a NamedSharding, got {sharding!r}")
    return sharding.mesh, sharding.spec


def _canonical(value) -> np.ndarray:
    """The caller's data as an array of its own (the caller may write into its numpy array
    later)."""
    return detached(canonical_array(value), value)


def _from_local_blocks(blocks, mesh, spec, shape):
    """The global array of these blocks (None: a block another process holds)."""
    present = next((b for b in blocks if b is not None), None)
    dtype = present.dtype if present is not None else np.dtype(np.float32)
    for b in blocks:
        if b is not None and b.dtype != dtype:
            raise ValueError(f"Input buffers to `Array` must have matching dtypes. Got "
                             f"{b.dtype}, expected {dtype} for buffer: {b}")
    bshape = block_shape(shape, spec, mesh.shape)
    full = [b if b is not None else _mpi.Absent(bshape, dtype, d)
            for b, d in zip(blocks, mesh.devices.flat)]
    if _devices.process_count() == 1:
        return Array.from_blocks(full, mesh, spec)
    if present is None:
        raise _holds_none(mesh)
    return get_backend().from_blocks(full, mesh, spec)


def _type_text(dtype, shape, spec, mesh) -> str:
    """An array type as JAX prints it: ``int32[8@x,4]`` (Explicit axes shown)."""
    aval = Aval(tuple(shape), np.dtype(dtype),
                type_sharding=type_sharding(NamedSharding(mesh, spec), len(shape)))
    return f"{np.dtype(dtype).name}{aval.str_short(None)[aval.str_short(None).index('['):]}"


def _holds_none(mesh) -> ValueError:
    return ValueError(f"process {_devices.process_index()} holds no device of {mesh}: "
                      "the mesh must include each process's devices")
