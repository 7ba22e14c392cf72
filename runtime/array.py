"""``shardc.Array``: a global array laid out over devices as per-device numpy buffers."""
from __future__ import annotations

import abc
import dataclasses
import enum
import gc
import math

import numpy as np

from ir import dtypes
from ir import transfer_guard as _transfer_guard
from ir.layout import Format, row_major
from ir.transfer_guard import JaxRuntimeError
from ir.core import Aval, check_index_conversion, check_scalar_conversion, check_truth_value
from ir.sharding import (UNREDUCED_INDICES, NamedSharding, Sharding, canonical_spec,
                         check_memory_kind, jax_index, owner_positions, position_slices,
                         same_layout, spec_axes)
from ir.sharding_rules import type_sharding
from runtime.devices import Device, default_device, is_local


class DLDeviceType(enum.IntEnum):
    """DLPack's device types, as JAX names them (shardc's devices are CPUs)."""
    kDLCPU = 1


class SingleDeviceSharding(Sharding):
    """The whole array on one device."""

    def __init__(self, device: Device, *, memory_kind=None):
        check_memory_kind(memory_kind, "SingleDeviceSharding")
        self.device = device

    def __eq__(self, other):
        return isinstance(other, SingleDeviceSharding) and other.device == self.device

    def __hash__(self):
        return hash(("SingleDeviceSharding", self.device))

    def __repr__(self):
        return f"SingleDeviceSharding(device={self.device!r}, memory_kind=device)"

    @property
    def device_set(self) -> set:
        return {self.device}

    @property
    def _device_assignment(self) -> tuple:
        return (self.device,)

    @property
    def is_fully_replicated(self) -> bool:
        return True

    @property
    def num_devices(self) -> int:
        return 1

    def shard_shape(self, global_shape) -> tuple:
        return tuple(global_shape)

    def devices_indices_map(self, global_shape) -> dict:
        return {self.device: (slice(None),) * len(tuple(global_shape))}


@dataclasses.dataclass(frozen=True)
class Shard:
    """One device's buffer and where it sits in the global array. ``data`` is the block as an
    array on that device (JAX's); ``buffer`` the numpy buffer itself."""
    device: Device
    index: tuple
    buffer: np.ndarray
    replica_id: int = 0      # which copy of this block: 0 for the first device holding it
    committed: bool = True   # as the array it is a shard of (JAX's ``data._committed``)

    @property
    def data(self) -> "Array":
        block = Array.from_global(self.buffer, SingleDeviceSharding(self.device))
        return block.committed_to() if self.committed else block

    def __repr__(self) -> str:      # JAX's spelling: the block printed, not its buffer
        return (f"Shard(device={self.device!r}, index={self.index}, "
                f"replica_id={self.replica_id}, data={self.data})")


def typed_as_laid_out(aval: Aval, sharding) -> Aval:
    """``aval`` as an array laid out by ``sharding`` is typed: how it is split over the mesh's
    Explicit axes (and over which its buffers are partial sums, or known-equal copies), and
    not weakly typed (an array is made so by ``with_weak``)."""
    aval = aval.strong().with_sharding(type_sharding(sharding, aval.ndim))
    spec = getattr(sharding, "spec", None)
    if spec is not None and (spec.unreduced or spec.reduced or aval.ur):
        aval = aval.with_ur(spec.unreduced, spec.reduced)
    return aval


def live_arrays() -> list:
    """Every array alive now (not freed and not deleted), as JAX's ``live_arrays``: found
    among the objects Python's garbage collector tracks (arrays are), so that making an
    array costs nothing for it; a debugging aid, slow in proportion to the objects alive."""
    return [a for a in gc.get_objects()
            if Array in type(a).__mro__ and not a.is_deleted()]   # not the traced values


class Array(metaclass=abc.ABCMeta):
    """A global array: shape, dtype, sharding, and one numpy buffer per device.

    With a ``NamedSharding`` the buffers are in mesh position order; devices along axes the
    spec does not name hold copies.

    An abstract base class so that the public API can register traced values as virtual
    subclasses: ``isinstance(x, shardc.Array)`` holds for them too, as in JAX (libraries
    dispatch on it), while ``type(x)`` stays what the value is. The runtime only ever sees
    concrete values.
    """
    __array_priority__ = 100

    def __init__(self, aval: Aval, sharding, buffers: list):
        self._hold(typed_as_laid_out(aval, sharding), sharding, buffers)

    @classmethod
    def typed(cls, aval: Aval, sharding, buffers) -> "Array":
        """An array whose ``aval`` is typed as ``typed_as_laid_out`` types it already: a
        compiled program's results, whose types are worked out once, not at every call."""
        result = object.__new__(cls)
        result._hold(aval, sharding, buffers)
        return result

    def _hold(self, aval: Aval, sharding, buffers) -> None:
        self.aval = aval
        self.sharding = sharding
        self._buffers = buffers
        self._global = None
        self._stacked = None     # the fast backend's stacked form (runtime/vectorized.py)
        self._local = None       # an MPI process's blocks, stacked (runtime/mpi/stacked.py)
        self.fingerprint = None  # a hash of the value, once computed (runtime/mpi: host values)
        # committed to its devices (JAX's): laid out on a mesh, or put on a device by name; an
        # array on the default device that nobody asked for may move
        self._committed = not isinstance(sharding, SingleDeviceSharding)

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def from_global(cls, value, sharding=None, source=None) -> "Array":
        """Lay out a host value: on the default device, or split by a NamedSharding
        (``source``: the spec it was laid out by on the same mesh, which says each device's
        term where the NamedSharding makes partial sums)."""
        array = canonical_array(value)
        aval = Aval(array.shape, array.dtype)
        if sharding is None:
            sharding = SingleDeviceSharding(default_device())
        if isinstance(sharding, SingleDeviceSharding):
            result = cls(aval, sharding, [array])
            result._global = array
            return result
        if sharding.spec.unreduced:
            return cls._unreduced_from_global(array, aval, sharding, source)
        # the per-device buffers are views of the global value, sliced when first asked for
        result = cls(aval, NamedSharding(sharding.mesh, canonical_spec(sharding.spec)), None)
        result._global = array
        return result

    @classmethod
    def _unreduced_from_global(cls, array, aval, sharding, source=None) -> "Array":
        """``array`` laid out as partial sums over the spec's unreduced axes, as JAX's reshard
        to unreduced gives it: where ``source`` (the spec the value was laid out by) splits
        it over an unreduced axis, each device's term is its own block of it, zeros
        elsewhere; along the others, the devices at coordinate 0 hold it, the others zeros.
        The terms add up to the value."""
        mesh, spec = sharding.mesh, canonical_spec(sharding.spec)
        slices = position_slices(array.shape, spec, mesh)
        unreduced = spec.unreduced
        owned = position_slices(array.shape, source, mesh) if source is not None else None
        split = set(spec_axes(source)) & unreduced if source is not None else set()
        buffers = []
        for p, index in enumerate(slices):
            if any(c != 0 for a, c in zip(mesh.axis_names, mesh.coords(p))
                   if a in unreduced and a not in split):
                buffers.append(np.zeros_like(array[index]))
                continue
            if not split:
                buffers.append(array[index])
                continue
            term = np.zeros_like(array)
            term[owned[p]] = array[owned[p]]
            buffers.append(term[index])
        return cls(aval, NamedSharding(mesh, spec), buffers)

    def reduced_value(self) -> np.ndarray:
        """The value of an unreduced array: each block the sum of the partial sums the devices
        along the unreduced axes hold, added in position order (what ``reshard`` to a layout
        without them gives)."""
        mesh, spec = self.sharding.mesh, self.sharding.spec
        summed = set(spec.unreduced) | set(spec_axes(spec))
        slices = position_slices(self.shape, spec, mesh)
        buffers = self.buffers
        out = np.zeros(self.shape, self.dtype)
        first: set = set()
        for p in range(mesh.size):
            # the copies along the axes neither split nor unreduced are equal: the first
            if any(c != 0 for a, c in zip(mesh.axis_names, mesh.coords(p)) if a not in summed):
                continue
            key = tuple((d.start, d.stop) for d in slices[p])
            if key in first:
                out[slices[p]] += buffers[p]
            else:
                out[slices[p]] = buffers[p]
                first.add(key)
        return out

    @classmethod
    def from_blocks(cls, blocks: list, mesh, spec) -> "Array":
        """Assemble per-position blocks laid out by ``spec`` (a shard_map output)."""
        first = np.asarray(blocks[0])
        from ir.sharding import global_shape
        shape = global_shape(first.shape, spec, mesh.shape)
        aval = Aval(shape, first.dtype)
        return cls(aval, NamedSharding(mesh, canonical_spec(spec)),
                   [np.asarray(b) for b in blocks])

    @classmethod
    def from_stacked(cls, aval: Aval, sharding, stacked) -> "Array":
        """An array held in the fast backend's stacked form (an object with ``buffers()`` and
        ``assemble()``): the per-device buffers and the global value are made on first use.
        ``aval`` is typed as ``typed_as_laid_out`` types it."""
        result = cls.typed(aval, sharding, None)
        result._stacked = stacked
        return result

    # -- numpy view --------------------------------------------------------------------------

    @property
    def _value(self) -> np.ndarray:
        """The global value as a read-only numpy array (JAX's ``Array._value``, which
        programs and tests read)."""
        return read_only(self._fetched())

    def _fetched(self) -> np.ndarray:
        """The global value, fetched to the host. No transfer guard applies: shardc's
        devices are CPU devices, whose buffers JAX's CPU backend fetches always (its
        device-to-host guard never refuses nor logs)."""
        return self._assemble()

    def __array__(self, dtype=None, copy=None):
        """The global value: a read-only view (``np.asarray``), or a copy of the caller's own
        (``np.array``, ``copy=True``), as JAX gives them: an array is never changed, so no
        numpy array handed out may write into it."""
        value = self._fetched()
        if dtype is not None and np.dtype(dtype) != value.dtype:
            if copy is False:
                raise ValueError(f"converting {value.dtype} to {np.dtype(dtype)} needs a copy")
            return value.astype(dtype)
        if copy:
            return value.copy()
        return read_only(value)

    def _assemble(self) -> np.ndarray:
        if self._global is not None:
            return self._global
        if self.aval.unreduced:
            # its buffers are partial sums, no piece of the value: JAX refuses it too
            raise NotImplementedError(UNREDUCED_INDICES)
        if self._stacked is not None:
            self._global = self._stacked.assemble()
            return self._global
        sharding = self.sharding
        if self._buffers is None:
            self._check_alive()
        if isinstance(sharding, SingleDeviceSharding):
            self._global = self._buffers[0]
            return self._global
        mesh, spec = sharding.mesh, sharding.spec
        out = np.empty(self.shape, self.dtype)
        slices = position_slices(self.shape, spec, mesh)
        for p in owner_positions(spec, mesh):
            out[slices[p]] = self.buffers[p]
        self._global = out
        return out

    @property
    def buffers(self) -> list:
        if self._buffers is None:
            if self._stacked is not None:
                self._buffers = self._stacked.buffers()
            else:
                self._check_alive()
                whole, sharding = self._global, self.sharding
                self._buffers = [whole[index] for index in position_slices(
                    whole.shape, sharding.spec, sharding.mesh)]
        return self._buffers

    @property
    def sliced_from_global(self) -> bool:
        """Whether the buffers are (or will be) views of the global value."""
        return self._global is not None and self._buffers is None and self._stacked is None

    # -- properties --------------------------------------------------------------------------

    @property
    def shape(self) -> tuple:
        return self.aval.shape

    @property
    def dtype(self):
        return self.aval.dtype

    @property
    def ndim(self) -> int:
        return self.aval.ndim

    @property
    def size(self) -> int:
        return self.aval.size

    @property
    def nbytes(self) -> int:
        return self.aval.nbytes

    @property
    def global_shards(self) -> list:
        """Every device's shard: on one process, the addressable ones."""
        if not self.is_fully_addressable:
            raise NotImplementedError("global_shards of an array whose devices span processes: "
                                      "each process reads its addressable_shards")
        return self.addressable_shards

    @property
    def addressable_shards(self) -> list:
        sharding = self.sharding
        if isinstance(sharding, SingleDeviceSharding):
            index = (slice(None),) * len(self.shape)
            return [Shard(sharding.device, index, read_only(self.buffers[0]),
                          committed=self._committed)]
        # under MPI a process addresses only its own devices' blocks
        mesh, spec = sharding.mesh, sharding.spec
        shards, copies = [], {}
        slices = position_slices(self.shape, spec, mesh)
        for p in range(mesh.size):
            key = tuple((d.start, d.stop) for d in slices[p])
            copies[key] = copies.get(key, -1) + 1
            if is_local(mesh.devices.flat[p]):     # this process's devices only (MPI)
                shards.append(Shard(mesh.devices.flat[p], jax_index(slices[p], spec, mesh),
                                    read_only(self.buffers[p]), copies[key]))
        return shards

    def addressable_data(self, index: int) -> "Array":
        """The block the ``index``-th device holds (in ``addressable_shards`` order), as an
        array on that device."""
        return self.addressable_shards[index].data

    def devices(self) -> set:
        self._check_alive()
        return set(self.sharding.device_set)

    @property
    def is_fully_addressable(self) -> bool:
        """Whether this process holds every device of the array (always, on one process)."""
        return all(is_local(d) for d in self.sharding.device_set)

    @property
    def is_fully_replicated(self) -> bool:
        return self.sharding.is_fully_replicated

    @property
    def format(self) -> Format:
        """The array's layout (row-major, as shardc keeps every block) and sharding."""
        return Format(row_major(self.ndim), self.sharding)

    def block_until_ready(self) -> "Array":
        self._check_buffer("BlockHostUntilReady")
        return self

    def _check_buffer(self, call: str) -> None:
        """JAX's runtime error for a call on the buffer of a deleted (or donated) array."""
        if self.is_deleted():
            raise JaxRuntimeError(f"INVALID_ARGUMENT: {call}() called on deleted or donated "
                                  "buffer")

    def copy_to_host_async(self) -> None:
        """Start copying the array to the host (a device-to-host transfer the guard checks,
        as JAX's); the copy is done at once."""
        self._check_alive()
        self._fetched()

    def platform(self) -> str:
        """The platform of the array's devices: ``'cpu'``."""
        return next(iter(self.sharding.device_set)).platform

    def on_device_size_in_bytes(self) -> int:
        """The bytes the array takes on all its devices together: one block's bytes times the
        devices (copies count; JAX's)."""
        self._check_buffer("GetOnDeviceSizeInBytes")
        block = self.sharding.shard_shape(self.shape)
        return math.prod(block) * self.dtype.itemsize * self.sharding.num_devices

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """The array as a DLPack capsule (``np.from_dlpack(x)``): only an array on one
        device, as JAX's."""
        devices = self.sharding.device_set
        if len(devices) > 1:
            raise BufferError("to_dlpack can only pack a dlpack tensor from an array on a "
                              f"singular device, but an array with a Sharding over "
                              f"{len(devices)} devices was provided.")
        return self._fetched().__dlpack__(stream=stream, max_version=max_version,
                                          dl_device=dl_device, copy=copy)

    def __dlpack_device__(self) -> tuple:
        """(CPU, 0) for an array on one device (DLPack's device type 1)."""
        if len(self.sharding.device_set) != 1:
            raise BufferError("__dlpack__ only supported for unsharded arrays.")
        return DLDeviceType.kDLCPU, 0

    def unsafe_buffer_pointer(self) -> int:
        """The address of the buffer of a one-device array (numpy's)."""
        if not isinstance(self.sharding, SingleDeviceSharding):
            raise ValueError("unsafe_buffer_pointer() is supported only for unsharded arrays.")
        return self._assemble().__array_interface__["data"][0]

    def item(self, *args):
        """One element (the only one, or the one at ``args``: a flat index or one per
        dimension) as a Python scalar."""
        return self._fetched().item(*args)

    def tobytes(self, order="C"):
        return self._fetched().tobytes(order)

    def tolist(self):
        return self._fetched().tolist()

    def respelled(self, sharding) -> "Array":
        """This array with ``sharding`` as its reported layout: the same layout spelt another
        way (``P('x')`` as ``P('x', None)``), the buffers shared."""
        assert same_layout(sharding, self.sharding), (sharding, self.sharding)
        result = self._shallow_copy()     # the same type: the layout is the same
        result.sharding = sharding
        return result

    def retyped_on(self, sharding, aval: Aval) -> "Array":
        """This array's blocks as laid out by ``sharding``, a layout of the same blocks on
        another mesh object of the same devices (an Explicit mesh for its Auto twin), typed
        by ``aval``."""
        result = self._shallow_copy()
        result.sharding, result.aval = sharding, aval.strong()
        result.weak = self.weak
        result.__dict__.pop("_keyed_sharding", None)
        return result

    def typed_as(self, aval: Aval) -> "Array":
        """This array, its layout kept, typed by ``aval`` (the same shape and dtype, split over
        fewer Explicit axes than its layout is): how jit's in_shardings lay out a value that
        was on no mesh, which JAX types by the value itself."""
        assert (aval.shape, aval.dtype) == (self.aval.shape, self.aval.dtype), (aval, self.aval)
        result = self._shallow_copy()
        result.aval = aval.strong()
        result.weak = self.weak
        return result

    # -- lifetime (JAX's): a deleted array, or one donated to a jitted call, holds no data -----

    def delete(self) -> None:
        self._deleted = True
        self._buffers = self._global = self._stacked = self._local = None

    def is_deleted(self) -> bool:
        return self.__dict__.get("_deleted", False)

    def _check_alive(self) -> None:
        if self.is_deleted():
            raise RuntimeError(f"Array has been deleted with shape="
                               f"{self.dtype.name}[{','.join(map(str, self.shape))}].")

    def is_ready(self) -> bool:
        return True

    @property
    def committed(self) -> bool:
        """Whether the array is committed to its devices: laid out on a mesh, or put on a
        device by name (an array made on the default device may move)."""
        return self._committed

    def committed_to(self, device: Device | None = None) -> "Array":
        """This one-device array committed to ``device`` (default: where it is), as
        ``device_put`` and computations on committed arrays leave their results; the buffer
        is shared."""
        sharding = self.sharding
        assert isinstance(sharding, SingleDeviceSharding), sharding
        if self._committed and (device is None or device == sharding.device):
            return self
        result = self._shallow_copy()
        if device is not None and device != sharding.device:
            result.sharding = SingleDeviceSharding(device)
        result._committed = True
        return result

    @property
    def device(self):
        """The device of a one-device array, else its sharding (JAX's)."""
        sharding = self.sharding
        return sharding.device if isinstance(sharding, SingleDeviceSharding) else sharding

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    def copy(self) -> "Array":
        """A new array object with the same value, layout and type, over the same data (an
        array is never changed); ``own_copy`` gives one with a buffer of its own."""
        return self._shallow_copy()

    def own_copy(self) -> "Array":
        """An explicit copy (``jnp.copy``, ``copy.copy``, a jitted call's result that passes
        an argument through): as JAX's, a one-device array's holds a buffer of its own
        (``unsafe_buffer_pointer`` tells them apart; read-only, as every buffer); an array
        laid out over devices shares its blocks."""
        result = self._shallow_copy()
        if isinstance(self.sharding, SingleDeviceSharding) and (
                self._global is not None or self._buffers is not None):
            own = np.array(self._assemble(), copy=True)
            own.flags.writeable = False
            result._global, result._buffers, result._stacked = own, [own], None
        return result

    def clone(self) -> "Array":
        """A new array object with this one's value, layout, type and commitment (JAX's)."""
        return self._shallow_copy()

    def _shallow_copy(self) -> "Array":
        self._check_alive()
        result = object.__new__(type(self))
        result.__dict__.update(self.__dict__)
        return result

    # weakly typed (JAX's weak_type): made from a Python scalar, or computed from such values
    # only; it takes the dtype of a typed operand it meets (jnp.asarray(2.0) * bf16 is bf16).
    # Its type says so too, as JAX's ``x.aval.weak_type`` reads it.
    @property
    def weak(self) -> bool:
        return self.aval.weak_type

    @weak.setter
    def weak(self, weak: bool) -> None:
        self.aval = self.aval.weak_twin() if weak else self.aval.strong()

    @property
    def weak_type(self) -> bool:
        return self.aval.weak_type

    def with_weak(self, weak: bool) -> "Array":
        """This array, weakly typed or not (a copy where it differs)."""
        if self.weak is weak:
            return self
        result = self._shallow_copy()
        result.weak = weak
        return result

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d array")
        if self.sharding.num_devices > 1 and not self.sharding.is_fully_replicated:
            # an array split over devices: its rows from the host, each on one device, as
            # JAX's (indexing would go through the split's type rules)
            host = self._fetched()
            return (Array.from_global(host[k]) for k in range(self.shape[0]))
        return (self[k] for k in range(self.shape[0]))

    def __bool__(self):
        check_truth_value(self.aval)
        return bool(self._fetched())

    def __int__(self):
        check_scalar_conversion(self.aval)
        return int(self._fetched())

    def __float__(self):
        check_scalar_conversion(self.aval)
        return float(self._fetched())

    def __index__(self):
        check_index_conversion(self.aval)
        return int(self._fetched())

    def __complex__(self):
        check_scalar_conversion(self.aval)
        return complex(self._fetched())

    def __format__(self, spec):
        return format(self._fetched(), spec) if self.ndim == 0 else str(self)

    def __str__(self):
        if self.aval.unreduced:
            return repr(self)
        return str(self._fetched())

    def __repr__(self):
        if self.aval.unreduced:
            # partial sums: JAX's repr names the layout instead of a value
            return (f"Array(shape={self.shape}, dtype={self.dtype.name}, "
                    f"sharding={self.sharding!r})")
        # as JAX's: an empty array's shape, and a weak type, are spelt out; the dtype follows
        # on the last line, after as many spaces as "Array(" has where it would not fit
        # in numpy's line width
        dtype = f"dtype={self.dtype.name}" + (", weak_type=True" if self.weak else "")
        width = np.get_printoptions()["linewidth"]
        body = f"[], shape={self.shape}" if self.size == 0 else np.array2string(
            self._fetched(), prefix="Array(", suffix=",", separator=", ",
            max_line_width=width)
        last = len(body) - body.rfind("\n") + 1
        sep = " " * len("Array(") if last + len(dtype) + 2 > width else " "
        return f"Array({body},{sep}{dtype})"

    # unhashable, as JAX's (hash() raises "unhashable type: 'Array'", and an array is no
    # collections.abc.Hashable)
    __hash__ = None

    def __copy__(self) -> "Array":
        return self.own_copy()

    def __deepcopy__(self, memo) -> "Array":
        return self.own_copy()

    def __reduce__(self):
        # the value and its weak type, as JAX's pickles keep them
        return (_unpickled, (self._fetched(), self.weak))


def _unpickled(value, weak: bool) -> Array:
    return Array.from_global(value).with_weak(weak)


def read_only(value) -> np.ndarray:
    """A read-only view of an array's buffer, to hand out: an array is never changed."""
    view = np.asarray(value).view()
    view.flags.writeable = False
    return view


def detached(array: np.ndarray, source) -> np.ndarray:
    """``array``, made from the caller's ``source``, as memory only shardc holds: a copy where
    it shares the caller's numpy array (the caller may write into that later, and an array
    never changes)."""
    if isinstance(source, np.ndarray) and np.may_share_memory(array, source):
        return array.copy()
    return array


def canonical_array(value) -> np.ndarray:
    if isinstance(value, Array):
        return value._assemble()
    array = np.asarray(value)
    canonical = dtypes.canonicalize(array.dtype)
    if array.dtype != canonical:
        array = array.astype(canonical)
    return array


