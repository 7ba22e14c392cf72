"""Meshes, partition specs, block shapes and device groups: the pure arithmetic of sharding.

Nothing here touches data. Devices are any objects with an integer ``id``.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import enum
import functools
import math
import warnings
from typing import Sequence

import numpy as np

from ir import primitives as prims
from ir import unreduced as unreduced_rules
from ir.core import Aval, ManualAxisType  # noqa: F401  (its home is ir.core)
from ir.shapes import shape_rules


class ReplicationError(ValueError):
    """out_specs claim replication that the checker cannot prove, or that the run disproved."""


class ShardingSpecError(ValueError):
    """A spec that does not fit the mesh or the arguments."""


class DuplicateSpecError(ShardingSpecError):
    """A mesh axis named more than once in one spec, or by a mesh (JAX accepts such a mesh and
    raises its DuplicateSpecError once a shard_map's spec names the axis)."""


class ShardingTypeError(TypeError):
    """Operands whose shardings (in their types, on Explicit mesh axes) leave the result's
    ambiguous or illegal: JAX's ShardingTypeError. A TypeError here, so that ``except
    TypeError`` and ``except Exception`` both catch it."""


class AxisType(enum.Enum):
    """How a mesh axis is partitioned (JAX's names and values): ``Explicit`` axes appear in
    types and each operation's rule decides its result's split; ``Auto`` axes are left to the
    compiler; ``Manual`` axes are a shard_map body's."""
    Auto = 1
    Explicit = 2
    Manual = 3

    def __repr__(self):
        return self.name

    def __str__(self):
        return f"AxisType.{self.name}"


def _axis_types(axis_types, n: int, default, names=(), who: str = "Mesh") -> tuple:
    """One AxisType per mesh axis, checked as JAX checks them: a single AxisType stands for a
    mesh of one axis (it is not repeated), and each must be an AxisType (not its name)."""
    if axis_types is None:
        return (default,) * n
    if not isinstance(axis_types, (tuple, list)):
        axis_types = (axis_types,)
    axis_types = tuple(axis_types)
    if not all(isinstance(t, AxisType) for t in axis_types):
        raise TypeError(f"axis_types passed to {who} must be of type "
                        f"`jax.sharding.AxisType`. Got {axis_types} of type "
                        f"{tuple(type(t) for t in axis_types)}")
    if len(axis_types) != n:
        raise ValueError(f"Number of axis names should match the number of axis_types. Got "
                         f"axis_names={tuple(names)} and axis_types={axis_types}")
    return axis_types


class _AxisKinds:
    """The axes of a mesh by type, as JAX's meshes (concrete and abstract) name them."""
    axis_names: tuple
    axis_types: tuple

    def _of_type(self, kind) -> tuple:
        return tuple(n for n, t in zip(self.axis_names, self.axis_types) if t is kind)

    @property
    def auto_axes(self) -> tuple:
        return self._of_type(AxisType.Auto)

    @property
    def manual_axes(self) -> tuple:
        return self._of_type(AxisType.Manual)

    @property
    def are_all_axes_auto(self) -> bool:
        return bool(self.axis_types) and all(t is AxisType.Auto for t in self.axis_types)

    @property
    def are_all_axes_explicit(self) -> bool:
        return bool(self.axis_types) and all(t is AxisType.Explicit for t in self.axis_types)

    @property
    def are_all_axes_manual(self) -> bool:
        return bool(self.axis_types) and all(t is AxisType.Manual for t in self.axis_types)


@dataclasses.dataclass(frozen=True)
class AbstractDevice:
    """The kind of device an abstract mesh's devices are (JAX's ``AbstractDevice``)."""
    device_kind: str
    num_cores: int | None
    platform: str

    def __repr__(self):
        return (f"AbstractDevice(device_kind={self.device_kind}, num_cores={self.num_cores}, "
                f"platform={self.platform})")


class AbstractMesh(_AxisKinds):
    """A mesh's axis sizes, names and types, without devices (JAX's ``AbstractMesh``): what
    types refer to."""

    def __init__(self, axis_sizes, axis_names, axis_types=None, *, abstract_device=None,
                 _device_kind=None):
        if abstract_device is not None:
            _device_kind = abstract_device.device_kind
        if isinstance(axis_names, str):
            axis_names = (axis_names,)
        self.axis_sizes = tuple(int(n) for n in axis_sizes)
        self.axis_names = tuple(axis_names)
        if len(self.axis_sizes) != len(self.axis_names):
            raise ValueError(f"AbstractMesh needs one size per axis name, got sizes "
                             f"{self.axis_sizes} and names {self.axis_names}")
        self.axis_types = _axis_types(axis_types, len(self.axis_names), AxisType.Auto,
                                      self.axis_names, "AbstractMesh")
        self._device_kind = _device_kind
        self.explicit_axes = tuple(n for n, t in zip(self.axis_names, self.axis_types)
                                   if t is AxisType.Explicit)

    @functools.cached_property
    def shape(self) -> dict:
        # one dict per mesh, as JAX's (read at every step of tracing and lowering)
        return collections.OrderedDict(zip(self.axis_names, self.axis_sizes))

    @property
    def shape_tuple(self) -> tuple:
        return tuple(zip(self.axis_names, self.axis_sizes))

    @property
    def size(self) -> int:
        return math.prod(self.axis_sizes)

    @property
    def empty(self) -> bool:
        return not self.axis_names

    @property
    def abstract_mesh(self) -> "AbstractMesh":
        return self

    @property
    def abstract_device(self) -> AbstractDevice | None:
        """The kind of device of the mesh it abstracts (None for a mesh made without)."""
        if self._device_kind is None:
            return None
        return AbstractDevice(self._device_kind, None, self._device_kind)

    def update(self, axis_sizes=None, axis_names=None, axis_types=None) -> "AbstractMesh":
        """This mesh with the sizes, names or types given replaced."""
        return AbstractMesh(self.axis_sizes if axis_sizes is None else axis_sizes,
                            self.axis_names if axis_names is None else axis_names,
                            self.axis_types if axis_types is None else axis_types,
                            _device_kind=self._device_kind)

    def update_axis_types(self, name_to_type: dict) -> "AbstractMesh":
        """This mesh with the named axes' types replaced."""
        return self.update(axis_types=tuple(name_to_type.get(n, t) for n, t in
                                            zip(self.axis_names, self.axis_types)))

    def _key(self):
        return (self.axis_sizes, self.axis_names, self.axis_types, self._device_kind)

    def __eq__(self, other):
        return isinstance(other, AbstractMesh) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        if self.empty:
            return "AbstractMesh((), axis_types=())"
        sizes = ", ".join(f"{n!r}: {s}" for n, s in zip(self.axis_names, self.axis_sizes))
        kind = (f", device_kind={self._device_kind}, num_cores=None, "
                f"platform={self._device_kind}" if self._device_kind else "")
        return f"AbstractMesh({sizes}, axis_types={_types_text(self.axis_types)}{kind})"


def _types_text(axis_types) -> str:
    return "(" + ", ".join(t.name for t in axis_types) + ("," if len(axis_types) == 1 else "") \
        + ")"


EMPTY_MESH = AbstractMesh((), ())


class _Unconstrained:
    """``P.UNCONSTRAINED``: a dimension a sharding constraint leaves to propagation."""
    __slots__ = ()

    def __repr__(self):
        return "UNCONSTRAINED"

    def __reduce__(self):
        return "UNCONSTRAINED"


UNCONSTRAINED = _Unconstrained()


class PartitionSpec(tuple):
    """How each array dimension is split over mesh axes: ``P('x', None, ('y', 'z'))``.

    Entries are ``None``, an axis name, or a tuple of names (split over their product, the
    first name major). Dimensions past the end are not split; ``P()`` replicates. In a
    sharding constraint, ``P.UNCONSTRAINED`` leaves a dimension to propagation (elsewhere it
    splits nothing).
    """
    UNCONSTRAINED = UNCONSTRAINED

    def __init_subclass__(cls, **kwargs):
        raise TypeError("Subclassing `jax.P` is prohibited (PartitionSpec is final, as JAX's)")

    # the mesh axes over which the value is a partial sum not yet added (``unreduced``), or
    # over which its copies are known to be equal (``reduced``, whose transpose is unreduced)
    unreduced = frozenset()
    reduced = frozenset()

    def __new__(cls, *entries, unreduced=frozenset(), reduced=frozenset()):
        spec = super().__new__(cls, (_canonical_entry(e) for e in entries))
        if unreduced or reduced:
            unreduced = _axis_set(unreduced, "unreduced")
            reduced = _axis_set(reduced, "reduced")
            _check_unreduced(tuple(spec), unreduced, reduced)
            if unreduced:
                spec.unreduced = unreduced
            if reduced:
                spec.reduced = reduced
        elif not isinstance(unreduced, (set, frozenset)) or \
                not isinstance(reduced, (set, frozenset)):
            _axis_set(unreduced, "unreduced")
            _axis_set(reduced, "reduced")
        return spec

    @property
    def partitions(self) -> tuple:
        """The entries, one per dimension (JAX's ``spec.partitions``)."""
        return tuple(self)

    def update(self, partitions=None, unreduced=None, reduced=None) -> "PartitionSpec":
        """This spec with its entries, unreduced or reduced axes replaced."""
        return PartitionSpec(*(self if partitions is None else partitions),
                             unreduced=self.unreduced if unreduced is None else unreduced,
                             reduced=self.reduced if reduced is None else reduced)

    def to_ct_spec(self) -> "PartitionSpec":
        """The spec of a cotangent: a reduced value's cotangent is unreduced, and the other
        way round."""
        if not (self.unreduced or self.reduced):
            return self
        return self.update(unreduced=self.reduced, reduced=self.unreduced)

    def __repr__(self):
        # JAX's form: the entries as a tuple prints them, so one entry keeps its comma
        entries = repr(tuple(self))[1:-1]
        if not (self.unreduced or self.reduced):
            return "P(" + entries + ")"
        entries = "" if not entries else entries + " " if entries.endswith(",") \
            else entries + ", "
        return "P(" + entries + _unreduced_text(self.unreduced, self.reduced) + ")"

    def short_repr(self) -> str:
        """``P('x', None)``, the form printed in programs."""
        entries = [_entry_repr(e) for e in self]
        if self.unreduced or self.reduced:
            entries.append(_unreduced_text(self.unreduced, self.reduced))
        return "P(" + ", ".join(entries) + ")"

    def __reduce__(self):
        if self.unreduced or self.reduced:
            return (_spec_with, (tuple(self), self.unreduced, self.reduced))
        return (PartitionSpec, tuple(self))

    # a spec extended by another (or a tuple of entries) is a spec, as JAX's
    def __add__(self, other):
        if isinstance(other, PartitionSpec):
            return PartitionSpec(*self, *other, unreduced=self.unreduced | other.unreduced,
                                 reduced=self.reduced | other.reduced)
        if isinstance(other, (tuple, list)):
            self._check_no_unreduced(other, "__add__")
            return PartitionSpec(*self, *other)
        return NotImplemented

    def __radd__(self, other):
        if isinstance(other, (tuple, list)):
            self._check_no_unreduced(other, "__radd__")
            return PartitionSpec(*other, *self)
        return NotImplemented

    def _check_no_unreduced(self, other, method: str) -> None:
        for which in ("unreduced", "reduced"):
            if getattr(self, which):
                raise TypeError(f"other {other} cannot be of instance `tuple` when self {self} "
                                f"has {which} in `{method}` of PartitionSpec.")

    def __eq__(self, other):
        return (isinstance(other, PartitionSpec) and tuple.__eq__(self, other)
                and self.unreduced == other.unreduced and self.reduced == other.reduced)

    def __ne__(self, other):
        return not self == other

    # the tuple's own hash: specs key caches met at every trace, so it stays at C speed (a
    # spec and the plain tuple of its entries share it, and stay unequal; so do specs that
    # differ only in their unreduced or reduced axes)
    __hash__ = tuple.__hash__


def _spec_with(entries, unreduced, reduced) -> "PartitionSpec":
    return PartitionSpec(*entries, unreduced=unreduced, reduced=reduced)


def _axis_set(axes, which: str) -> frozenset:
    """``unreduced=`` or ``reduced=`` as a frozenset, checked as JAX checks it."""
    if isinstance(axes, frozenset):
        return axes
    if not isinstance(axes, set):
        raise TypeError(f"{which} argument of PartitionSpec should of type `frozenset` or "
                        f"`set`. Got type {axes}")
    return frozenset(axes)


def _check_unreduced(entries: tuple, unreduced: frozenset, reduced: frozenset) -> None:
    """JAX's errors for unreduced and reduced axes: no None, no axis in both, and none that
    also splits a dimension."""
    for axes, which in ((unreduced, "unreduced"), (reduced, "reduced")):
        if None in axes:
            raise ValueError(f"{which} cannot contain None. All elements in {which} should "
                             "refer to the mesh axes.")
    if unreduced & reduced:
        raise ValueError("`unreduced` and `reduced` argument to PartitionSpec cannot overlap. "
                         f"Got unreduced: {unreduced} and reduced: {reduced}")
    for entry in entries:
        for name in entry_names(entry):
            for axes, which in ((unreduced, "unreduced"), (reduced, "reduced")):
                if name in axes:
                    raise ValueError(f"partitions cannot overlap with {which} axes passed to "
                                     f"PartitionSpec. Got partitions: {entries} and {which} "
                                     f"axes: {axes}")


def _unreduced_text(unreduced, reduced) -> str:
    """``unreduced={'x'}, reduced={'y'}``, as JAX's repr writes them, the names sorted (a
    set's order changes from process to process)."""
    parts = []
    if unreduced:
        parts.append(f"unreduced={_names_set(unreduced)}")
    if reduced:
        parts.append(f"reduced={_names_set(reduced)}")
    return ", ".join(parts)


def _names_set(names) -> str:
    return "{" + ", ".join(repr(n) for n in sorted(names, key=str)) + "}"


P = PartitionSpec


def _canonical_entry(entry):
    """One spec entry in JAX's normal form: ``('x',)`` is ``'x'``, ``()`` is ``None``."""
    if isinstance(entry, (tuple, list)):
        entry = tuple(entry)
        if any(isinstance(name, (tuple, list)) for name in entry):
            raise ValueError(f"A tuple inside PartitionSpec cannot contain a nested tuple. "
                             f"Got {entry}")
        return None if not entry else entry[0] if len(entry) == 1 else entry
    return entry


def _entry_repr(entry) -> str:
    if isinstance(entry, tuple):
        return "(" + ", ".join(repr(n) for n in entry) + ("," if len(entry) == 1 else "") + ")"
    return repr(entry)


def entry_names(entry) -> tuple:
    """The mesh axes of one spec entry: ``()`` for None (and UNCONSTRAINED), ``(a,)`` for a
    name, else the tuple."""
    if entry is None or entry is UNCONSTRAINED:
        return ()
    if isinstance(entry, (tuple, list)):
        return tuple(entry)
    return (entry,)


def spec_names(spec) -> tuple:
    """The mesh axes named by ``spec`` per dimension, as tuples: the normal form's meaning."""
    return _per_spec(_SPEC_NAMES, spec, lambda: tuple(entry_names(e) for e in spec))


def _per_spec(cache: dict, spec, derive):
    """``derive()``, computed once per spec (specs are few and asked about often); a spec
    that does not hash (a list among its entries) is derived every time."""
    try:
        found = cache.get(spec)
    except TypeError:
        return derive()
    if found is None:
        if len(cache) > 1024:
            cache.clear()
        found = cache[spec] = derive()
    return found


_SPEC_NAMES: dict = {}
_CANONICAL: dict = {}
_NORMAL: dict = {}


def spec_axes(spec) -> tuple:
    """Every mesh axis a spec names, in the order it names them."""
    return tuple(a for names in spec_names(spec) for a in names)


def canonical_spec(spec) -> PartitionSpec:
    """The spec as ``.sharding`` reports it: 1-tuples unwrapped, ``()`` read as None."""
    return _per_spec(_CANONICAL, spec, lambda: _canonical_spec(spec))


def _canonical_spec(spec) -> PartitionSpec:
    entries = []
    for names in spec_names(spec):
        entries.append(None if not names else names[0] if len(names) == 1 else tuple(names))
    return PartitionSpec(*entries, unreduced=getattr(spec, "unreduced", frozenset()),
                         reduced=getattr(spec, "reduced", frozenset()))


def spec_per_dim(spec, ndim: int) -> tuple:
    """``spec``'s entries padded with None to one per dimension (entries past ``ndim`` kept,
    for the caller's rank check to name)."""
    return tuple(spec) + (None,) * (ndim - len(spec))


def normal_spec(spec) -> PartitionSpec:
    """The normal form: canonical, with trailing Nones dropped (for comparing meanings)."""
    return _per_spec(_NORMAL, spec, lambda: _normal_spec(spec))


def _normal_spec(spec) -> PartitionSpec:
    canonical = canonical_spec(spec)
    entries = list(canonical)
    while entries and entries[-1] is None:
        entries.pop()
    return PartitionSpec(*entries, unreduced=canonical.unreduced, reduced=canonical.reduced)


class Mesh(_AxisKinds, contextlib.ContextDecorator):
    """Devices arranged in an n-dimensional array with one name per dimension. As JAX's, it
    is also the (deprecated) ``with mesh:`` context, and so a decorator running a function
    inside that context.

    >>> Mesh(np.array(devices[:8]).reshape(4, 2), ('x', 'y'))
    Mesh('x': 4, 'y': 2)
    """

    def __init__(self, devices, axis_names, axis_types=None):
        if isinstance(axis_names, str):
            axis_names = (axis_names,)
        axis_names = tuple(axis_names)
        if any(name is None for name in axis_names):
            raise ValueError("Mesh axis names cannot be None.")
        devices = _device_array(devices)
        if devices.ndim != len(axis_names):
            raise ValueError(
                "Mesh requires the ndim of its first argument (`devices`) to equal the length of "
                f"its second argument (`axis_names`), but got devices.ndim == {devices.ndim} and "
                f"len(axis_names) == {len(axis_names)}.")
        if not axis_names and devices[()] is None:      # JAX's spelling of the empty mesh
            self._become_empty()
            return
        if devices.size == 0:
            raise ValueError(f"Mesh needs at least one device, but its devices array has shape "
                             f"{devices.shape} (axis sizes must be positive)")
        for name in axis_names:
            if axis_names.count(name) > 1:
                raise DuplicateSpecError(
                    f"Mesh axis names must be unique, but axis_names={axis_names!r} names "
                    f"'{name}' more than once.")
        seen = set()
        for device in devices.flat:
            if not isinstance(getattr(device, "id", None), (int, np.integer)):
                raise TypeError(f"Mesh devices must be devices (from shardc.devices()), but "
                                f"got {device!r} of type {type(device).__name__}")
            if device.id in seen:
                raise ValueError(f"Mesh devices must be distinct, but {device} appears more "
                                 "than once.")
            seen.add(device.id)
        self.devices = devices
        self.axis_names = axis_names
        # the devices never change: their ids and the hash are computed once
        self._device_ids = tuple(int(d.id) for d in devices.flat)
        # Mesh(...) gives Auto axes, as JAX's; make_mesh gives Explicit ones
        self.axis_types = _axis_types(axis_types, len(axis_names), AxisType.Auto,
                                      axis_names)
        self._hash = hash((axis_names, tuple(devices.shape), self._device_ids,
                           self.axis_types))
        self.explicit_axes = tuple(n for n, t in zip(axis_names, self.axis_types)
                                   if t is AxisType.Explicit)
        self._abstract = None

    @functools.cached_property
    def shape(self) -> dict:
        return collections.OrderedDict(zip(self.axis_names, self.devices.shape))

    @property
    def local_devices(self) -> list:
        """The devices of the mesh this process holds."""
        return [d for d in self.devices.flat if d.is_local]

    @property
    def shape_tuple(self) -> tuple:
        return tuple(zip(self.axis_names, self.devices.shape))

    def update(self, devices=None, axis_names=None, axis_types=None) -> "Mesh":
        """This mesh with the devices, names or types given replaced."""
        return Mesh(self.devices if devices is None else devices,
                    self.axis_names if axis_names is None else axis_names,
                    self.axis_types if axis_types is None else axis_types)

    @property
    def axis_sizes(self) -> tuple:
        return tuple(self.devices.shape)

    @property
    def size(self) -> int:
        return len(self._device_ids)

    @property
    def flat_device_ids(self) -> tuple:
        """The devices' ids in mesh order (row-major), as the compiler and runtime read them."""
        return self._device_ids

    @functools.cached_property
    def device_ids(self) -> np.ndarray:
        """The devices' ids, an integer array of the mesh's shape (JAX's).

        >>> make_mesh((2, 2), ('x', 'y')).device_ids
        array([[0, 1],
               [2, 3]])
        """
        assert not self.empty
        return np.array(self._device_ids, dtype=int).reshape(self.devices.shape)

    @property
    def is_multi_process(self) -> bool:
        """Whether devices of other processes are in the mesh."""
        return self.size != len(self.local_devices)

    @property
    def local_mesh(self) -> "Mesh":
        """The smallest box of the mesh that holds this process's devices, as a mesh with
        Auto axes (JAX's): an error where that box holds another process's devices too."""
        if self.empty:
            return self
        local = np.vectorize(lambda d: d.is_local, otypes=[bool])(self.devices)
        box = []
        for axis in range(self.ndim):
            others = tuple(a for a in range(self.ndim) if a != axis)
            held = np.flatnonzero(local.any(axis=others))
            box.append(slice(int(held.min()), int(held.max()) + 1))
        if not local[tuple(box)].all():
            raise ValueError("When passing host local inputs to pjit, devices connected to a "
                             "single host must form a contiguous subcube of the global device "
                             "mesh")
        return Mesh(self.devices[tuple(box)], self.axis_names)

    @property
    def _flat_devices_tuple(self) -> tuple:
        """The devices in mesh order (JAX's name, which programs read)."""
        return tuple(self.devices.flat)

    @property
    def ndim(self) -> int:
        return self.devices.ndim

    def coords(self, position: int) -> tuple:
        """The mesh coordinate of a row-major position."""
        return tuple(int(c) for c in np.unravel_index(position, self.axis_sizes))

    def position(self, coords) -> int:
        return int(np.ravel_multi_index(tuple(coords), self.axis_sizes))

    @property
    def abstract_mesh(self) -> AbstractMesh:
        """The mesh without its devices, as types name it."""
        if self._abstract is None:
            self._abstract = AbstractMesh(self.axis_sizes, self.axis_names, self.axis_types,
                                          _device_kind="cpu")
        return self._abstract

    @property
    def empty(self) -> bool:
        """Whether this is the mesh of no axes and no device (``get_mesh()`` outside any)."""
        return not self._device_ids

    @classmethod
    def _empty(cls) -> "Mesh":
        """JAX's empty mesh: no axes, and a 0-d devices array holding no device."""
        mesh = cls.__new__(cls)
        mesh._become_empty()
        return mesh

    def _become_empty(self) -> None:
        self.devices = np.empty((), dtype=object)
        self.axis_names = self.axis_types = self.explicit_axes = self._device_ids = ()
        self._hash = hash(("Mesh", ()))
        self._abstract = EMPTY_MESH

    def __eq__(self, other):
        return self is other or (
            isinstance(other, Mesh) and self._hash == other._hash
            and self.axis_names == other.axis_names and self.axis_sizes == other.axis_sizes
            and self._device_ids == other._device_ids and self.axis_types == other.axis_types)

    def __hash__(self):
        return self._hash

    def __str__(self):
        if self.empty:
            return "Mesh()"
        parts = [f"{n!r}: {s}" for n, s in self.shape.items()]
        parts.append(f"axis_types={_types_text(self.axis_types)}")
        if self.flat_device_ids != tuple(range(self.size)):
            # devices other than the first ones: name them, so the text says which devices
            parts.append(f"device_ids={self.flat_device_ids}")
        return f"Mesh({', '.join(parts)})"

    def __repr__(self):
        """JAX's repr, the sizes and names apart (``str`` is the short form that programs
        print and IR text reads: ``Mesh('x': 4, 'y': 2, axis_types=...)``)."""
        if not self.axis_names:
            return "Mesh(axis_sizes=(), axis_names=())"
        return (f"Mesh(axis_sizes={tuple(self.axis_sizes)}, axis_names={self.axis_names!r}, "
                f"axis_types={_types_text(self.axis_types)})")

    def __enter__(self):
        # JAX's deprecated mesh context: with_sharding_constraint reads a bare PartitionSpec
        # on it (set_mesh is the way now)
        warnings.warn("`with mesh:` context manager has been deprecated. Please use `with "
                      "jax.set_mesh(mesh):` instead.", category=DeprecationWarning, stacklevel=2)
        _legacy_meshes.append(self)
        return self

    def __exit__(self, *exc):
        _legacy_meshes.pop()
        return False


EMPTY_CONCRETE_MESH = Mesh._empty()


# The current mesh (``set_mesh``/``use_mesh``), innermost last. It lives beside Mesh because
# what a program means depends on it: a shard_map without mesh= takes it when called, so jit
# keys its cache on it too.
_mesh_stack: list = []


_legacy_meshes: list = []        # ``with mesh:`` blocks, innermost last


def legacy_mesh() -> "Mesh | None":
    """The mesh of the innermost ``with mesh:`` block, or None."""
    return _legacy_meshes[-1] if _legacy_meshes else None


def current_mesh() -> Mesh | None:
    """The mesh set by ``set_mesh``/``use_mesh``, or None."""
    return _mesh_stack[-1] if _mesh_stack else None


# The meshes a jitted function's arguments lie on, innermost trace last: where a sharding on
# an abstract mesh (``jax.typeof(x).sharding``) finds its devices when no mesh is set.
_argument_meshes: list = []
# The meshes ``use_abstract_mesh`` sets (by id): types made under one stay on its abstract mesh
_abstract_contexts: set = set()


@contextlib.contextmanager
def standing_for_abstract(mesh: "Mesh"):
    """Inside, ``mesh`` (set by ``use_abstract_mesh``) stands for its abstract mesh: a sharding
    on the abstract mesh is not taken onto it (``concrete_mesh_for``)."""
    _abstract_contexts.add(id(mesh))
    try:
        yield
    finally:
        _abstract_contexts.discard(id(mesh))


@contextlib.contextmanager
def arguments_on(meshes):
    """Inside, ``argument_mesh`` knows ``meshes`` (concrete ones; others are ignored)."""
    _argument_meshes.append([m for m in meshes if isinstance(m, Mesh)])
    try:
        yield
    finally:
        _argument_meshes.pop()


def concrete_mesh_for(abstract: "AbstractMesh") -> "Mesh | None":
    """The concrete mesh ``abstract`` describes: the current mesh, else that of an argument of
    the innermost jitted function being traced; None when neither is one."""
    mesh = current_mesh()
    if isinstance(mesh, Mesh) and mesh.abstract_mesh == abstract \
            and id(mesh) not in _abstract_contexts:
        return mesh
    for m in (_argument_meshes[-1] if _argument_meshes else ()):
        if m.abstract_mesh == abstract:
            return m
    return None


def push_mesh(mesh: Mesh) -> None:
    _mesh_stack.append(mesh)


def pop_mesh(mesh: Mesh) -> None:
    if _mesh_stack and _mesh_stack[-1] is mesh:
        _mesh_stack.pop()


def _device_array(devices) -> np.ndarray:
    if isinstance(devices, np.ndarray):
        return devices
    array = np.empty(np.shape(np.array(devices, dtype=object)), dtype=object)
    for index in np.ndindex(array.shape):
        array[index] = _nested_get(devices, index)
    return array


def _nested_get(nested, index):
    for k in index:
        nested = nested[k]
    return nested


class IndivisibleError(ValueError):
    """A sharding splits a dimension into blocks that do not divide it (JAX's class, raised by
    ``device_put`` and ``jit``'s ``in_shardings``/``out_shardings`` on Auto axes)."""


def check_rank(sharding, ndim: int, what: str, path: str = "") -> None:
    """JAX's ValueError where ``sharding``'s spec names more dimensions than a value of rank
    ``ndim`` has (``what``: "pjit arguments", "with_sharding_constraint arguments", ...;
    ``path``: the value's pytree key path, where JAX names it)."""
    problem = rank_problem(sharding, ndim)
    if problem is not None:
        where = f" with pytree key path {path}" if path else ""
        raise ValueError(f"One of {what}{where} is incompatible with its sharding annotation "
                         f"{sharding!r}: {problem}")


def rank_problem(sharding, ndim: int) -> str | None:
    """JAX's words for a sharding (or PartitionSpec) naming more dimensions than a value of
    rank ``ndim`` has; None where it fits."""
    spec = sharding if isinstance(sharding, PartitionSpec) else getattr(sharding, "spec", None)
    if spec is None or len(spec) <= ndim:
        return None
    extra = " For scalars the PartitionSpec should be P()" if ndim == 0 else ""
    kind = "PartitionSpec" if isinstance(sharding, PartitionSpec) else "Sharding"
    return (f"{kind} {sharding!r} is only valid for values of rank at least {len(spec)}, but "
            f"was applied to a value of rank {ndim}.{extra}")


def check_divides(sharding, shape) -> None:
    """JAX 0.10's IndivisibleError where ``sharding`` (a NamedSharding) splits a dimension of
    ``shape`` into unequal blocks."""
    sizes = sharding.mesh.shape
    factors = [math.prod(sizes[a] for a in names) for names in spec_names(sharding.spec)]
    factors += [1] * (len(shape) - len(factors))
    for d, (n, k) in enumerate(zip(shape, factors)):
        if n % k:
            raise IndivisibleError(
                f"Sharding {sharding!r} implies that array axis {d} is partitioned {k} times, "
                f"but the dimension size is {n} (full shape: {tuple(shape)}, per-dimension "
                f"tiling factors: {factors} should evenly divide the shape)")


def dividing(names, size: int, mesh) -> tuple:
    """The longest major run of the axes ``names`` whose product divides ``size``: how much
    of an uneven split of a dimension (JAX accepts one on intermediates on Auto axes) lays it
    out in equal blocks."""
    names = tuple(names)
    while size % math.prod(mesh.shape[a] for a in names):
        names = names[:-1]
    return names


def dividing_sharding(sharding, shape):
    """``sharding`` with each dimension of ``shape`` split by its ``dividing`` axes only."""
    names = spec_names(sharding.spec)
    cut = [dividing(n, size, sharding.mesh) for n, size in zip(names, shape)]
    return NamedSharding(sharding.mesh, PartitionSpec(
        *[None if not n else n[0] if len(n) == 1 else n for n in cut]))


# the memory kinds JAX's CPU devices address; shardc's devices have the first only
_CPU_MEMORY_KINDS = ("device", "pinned_host", "unpinned_host")


def check_memory_kind(kind, who: str) -> None:
    """Refuse a memory kind other than ``'device'``: one no CPU device has as JAX does
    (ValueError), a host memory as a limit of shardc's (NotImplementedError)."""
    if kind is None or kind == "device":
        return
    if kind not in _CPU_MEMORY_KINDS:
        raise ValueError("Could not find memory addressable by device cpu. Device cpu can "
                         f"address the following memory kinds: {', '.join(_CPU_MEMORY_KINDS)}. "
                         f"Got memory kind: {kind}")
    raise NotImplementedError(f"{who}(memory_kind={kind!r}): shardc's devices have one memory "
                              "kind, 'device'")


class Sharding:
    """What every sharding is (JAX's ``jax.sharding.Sharding``): how an array's blocks lie
    on devices. ``isinstance(x.sharding, Sharding)`` holds for each kind. A subclass says
    where each device's block lies (``devices_indices_map``); the rest follows."""
    __slots__ = ()
    memory_kind = "device"

    def devices_indices_map(self, global_shape) -> dict:
        raise NotImplementedError

    def addressable_devices_indices_map(self, global_shape) -> dict:
        """The indices of this process's devices' blocks."""
        return {d: index for d, index in self.devices_indices_map(global_shape).items()
                if d.is_local}

    @property
    def addressable_devices(self) -> set:
        return {d for d in self.device_set if d.is_local}

    @property
    def is_fully_addressable(self) -> bool:
        return all(d.is_local for d in self.device_set)

    @property
    def has_addressable_devices(self) -> bool:
        """Whether this process holds any of the devices."""
        return any(d.is_local for d in self.device_set)

    def with_memory_kind(self, kind: str) -> "Sharding":
        """This sharding in the memory ``kind``: ``'device'``, the one shardc's devices have
        (a sharding is immutable: it is returned as it is)."""
        check_memory_kind(kind, f"{type(self).__name__}.with_memory_kind")
        return self

    def is_equivalent_to(self, other, ndim: int) -> bool:
        """Whether ``other`` puts the same blocks on the same devices, for arrays of ``ndim``
        dimensions."""
        if not isinstance(other, Sharding) or self.device_set != other.device_set:
            return False
        shape = (len(self.device_set),) * ndim      # every split of these devices divides it
        return self.devices_indices_map(shape) == other.devices_indices_map(shape)


def check_unique_axes(spec, arg_name: str) -> None:
    """JAX's DuplicateSpecError for a spec naming a mesh axis twice (``arg_name``: what the
    spec was given as, "in_shardings" or "NamedSharding spec")."""
    axes = spec_axes(spec)
    repeated = sorted({a for a in axes if axes.count(a) > 1}, key=str)
    if repeated:
        raise DuplicateSpecError(
            f"A single {arg_name} specification can map every mesh axis to at most one "
            f"positional dimension, but {spec!r} has duplicate entries for "
            + ", ".join(f"`{a}`" for a in repeated))


def _check_named_axes(spec, mesh) -> None:
    """JAX's errors for a spec that names an axis twice, or one its mesh lacks (checked once
    per spec and mesh names)."""
    names = getattr(mesh, "axis_names", None)
    if names is not None and (spec.unreduced or spec.reduced):
        _check_unreduced_axes(spec, mesh, names)
    if names is None or (spec, names) in _CHECKED_SPECS:
        return
    check_unique_axes(spec, "NamedSharding spec")
    for a in spec_axes(spec):
        if a not in names:
            raise ValueError(f"Resource axis: {a} of {spec!r} is not found in mesh: "
                             f"{tuple(names)}.")
    if len(_CHECKED_SPECS) > 4096:
        _CHECKED_SPECS.clear()
    _CHECKED_SPECS.add((spec, names))


_CHECKED_SPECS: set = set()


def _check_unreduced_axes(spec, mesh, names) -> None:
    """JAX's errors for unreduced or reduced axes the mesh lacks, or that are not Explicit
    (partial sums are a type's, and only Explicit axes appear in types)."""
    types = dict(zip(names, getattr(mesh, "axis_types", ())))
    for axes, which in ((spec.unreduced, "Unreduced"), (spec.reduced, "Reduced")):
        if not axes:
            continue
        unknown = [a for a in axes if a not in names]
        if unknown:
            raise ValueError(f"{which} axes {','.join(map(str, unknown))} is not found in "
                             f"mesh.axis_names={tuple(names)}. Got pspec={spec!r}")
        if any(types.get(a) is not AxisType.Explicit for a in axes):
            raise ValueError(f"{which} axes can only refer to mesh axes that is of type "
                             f"`Explicit`. Got {which.lower()} axes: {axes} and mesh: {mesh!r}")


class NamedSharding(Sharding):
    """A mesh and a partition spec: how a global array is laid out over devices."""

    def __init__(self, mesh: Mesh, spec: PartitionSpec, *, memory_kind=None):
        if not isinstance(spec, PartitionSpec):
            raise TypeError(f"NamedSharding requires a PartitionSpec, got {spec!r}")
        check_memory_kind(memory_kind, "NamedSharding")
        types = getattr(mesh, "axis_types", ())
        if UNCONSTRAINED in tuple(spec) and AxisType.Auto not in types:
            raise ValueError(f"{spec!r} cannot contain `P.UNCONSTRAINED` when no mesh "
                             f"axis_types are `Auto`. Got mesh axis_types: {tuple(types)}")
        _check_named_axes(spec, mesh)
        self.mesh = mesh
        self.spec = spec
        # by rank: the type sharding of an array it lays out (``sharding_rules.type_sharding``,
        # asked at every array made)
        self.typed: dict = {}
        self._hash = None           # worked out at the first ``hash`` (every jitted call's key)

    def __eq__(self, other):
        if self is other:
            return True
        return (isinstance(other, NamedSharding) and self.mesh == other.mesh
                and (self.spec == other.spec
                     or normal_spec(self.spec) == normal_spec(other.spec)))

    def __hash__(self):
        found = self._hash
        if found is None:
            found = self._hash = hash((self.mesh, normal_spec(self.spec)))
        return found

    def __repr__(self):
        memory = ", memory_kind=device" if isinstance(self.mesh, Mesh) else ""
        return f"NamedSharding(mesh={self.mesh}, spec={self.spec!r}{memory})"

    def is_equivalent_to(self, other, ndim: int) -> bool:
        if not isinstance(self.mesh, Mesh) or not isinstance(getattr(other, "mesh", None),
                                                            Mesh):
            # an abstract mesh names no devices: the same mesh, split alike
            return (isinstance(other, NamedSharding) and self.mesh == other.mesh
                    and normal_spec(self.spec) == normal_spec(other.spec))
        return super().is_equivalent_to(other, ndim)

    def with_spec(self, spec) -> "NamedSharding":
        """This sharding with ``spec``: a PartitionSpec as it is; entries (a tuple) replace
        this spec's, its unreduced and reduced axes kept."""
        if isinstance(spec, PartitionSpec):
            return NamedSharding(self.mesh, spec)
        return NamedSharding(self.mesh, PartitionSpec(*spec, unreduced=self.spec.unreduced,
                                                      reduced=self.spec.reduced))

    def update(self, **kwargs) -> "NamedSharding":
        """JAX's ``update``: this sharding with its ``mesh``, ``spec`` (a PartitionSpec or a
        sequence of entries) or ``memory_kind`` replaced."""
        spec = kwargs.pop("spec", self.spec)
        if not isinstance(spec, PartitionSpec):
            spec = PartitionSpec(*spec)
        mesh = kwargs.pop("mesh", self.mesh)
        memory_kind = kwargs.pop("memory_kind", None)
        if kwargs:
            raise TypeError(f"NamedSharding.update() got unexpected keyword arguments "
                            f"{sorted(kwargs)}")
        return NamedSharding(mesh, spec, memory_kind=memory_kind)

    def short_repr(self) -> str:
        """``NamedSharding(Mesh('x': 4), P('x'))``, the form printed in programs."""
        return f"NamedSharding({self.mesh}, {self.spec.short_repr()})"

    @property
    def device_set(self) -> set:
        return set(self.mesh.devices.flat)

    @property
    def _device_assignment(self) -> tuple:
        """The devices in mesh order (JAX's name, which programs read)."""
        return tuple(self.mesh.devices.flat)

    @property
    def is_fully_replicated(self) -> bool:
        """Whether every device holds the whole array (a property, as in JAX): the spec
        splits over no axis of more than one device, and holds no partial sums (an unreduced
        axis; a reduced one holds equal copies)."""
        sizes = self.mesh.shape
        return all(sizes[a] == 1 for a in spec_axes(self.spec) + tuple(self.spec.unreduced))

    @property
    def num_devices(self) -> int:
        return self.mesh.size

    def shard_shape(self, global_shape) -> tuple:
        """The shape of each device's block of an array of ``global_shape`` (JAX's
        IndivisibleError where the blocks would be unequal; an IndexError where the spec
        splits a dimension the shape does not have)."""
        global_shape = tuple(global_shape)
        if any(entry is not None for entry in tuple(self.spec)[len(global_shape):]):
            raise IndexError(f"{self.spec} splits {len(self.spec)} dimensions; the shape "
                             f"{global_shape} has {len(global_shape)}")
        try:
            return block_shape(tuple(global_shape), self.spec, self.mesh.shape)
        except ValueError:
            check_divides(self, tuple(global_shape))
            raise

    def devices_indices_map(self, global_shape) -> dict:
        """Where each device's block lies in an array of ``global_shape``: JAX's indices
        (``slice(None)`` along dimensions the spec does not split)."""
        if self.spec.unreduced:
            raise NotImplementedError(UNREDUCED_INDICES)
        check_divides(self, tuple(global_shape))           # JAX's IndivisibleError
        slices = position_slices(tuple(global_shape), self.spec, self.mesh)
        return {d: jax_index(index, self.spec, self.mesh)
                for d, index in zip(self.mesh.devices.flat, slices)}


# JAX's words where a layout's blocks would be read as pieces of one value, but they are
# partial sums not yet added (an unreduced layout)
UNREDUCED_INDICES = ("device_indices_map doesn't work with unreduced. Please file a bug at "
                     "https://github.com/jax-ml/jax/issues")


_SAME_LAYOUT: dict = {}


def same_layout(a, b) -> bool:
    """``a == b`` for two shardings, remembered for the pair of objects: the shardings a
    compiled call gives its results and those their types say are met again at every call."""
    if a is b:
        return True
    key = (id(a), id(b))
    hit = _SAME_LAYOUT.get(key)
    if hit is not None and hit[0] is a and hit[1] is b:
        return hit[2]
    same = a == b
    if len(_SAME_LAYOUT) >= 4096:
        _SAME_LAYOUT.clear()
    _SAME_LAYOUT[key] = (a, b, same)     # held: their ids stay theirs
    return same


def read_back_entries(spec, mesh) -> list:
    """``spec``'s entries as JAX reads a layout back from its compiler (a jitted program's
    results on Auto axes): axes of one device dropped (the compiler cannot see them), no
    trailing unsplit dimensions.

    >>> read_back_entries(P('data', 'model'), mesh_8x1)
    ['data']
    """
    sizes = mesh.shape
    entries = []
    for names in spec_names(spec):
        kept = tuple(a for a in names if sizes[a] > 1)
        entries.append(kept[0] if len(kept) == 1 else (kept or None))
    while entries and entries[-1] is None:
        entries.pop()
    return entries


def jax_index(slices: tuple, spec, mesh) -> tuple:
    """A block's index as JAX writes it: ``slice(None)`` along the dimensions ``spec`` does
    not split over ``mesh`` (the block spans them whole), those it splits over axes of one
    device only included."""
    names = spec_names(spec)
    sizes = mesh.shape
    return tuple(s if d < len(names) and axes_size(sizes, names[d]) > 1 else slice(None)
                 for d, s in enumerate(slices))


# --- mesh arithmetic -----------------------------------------------------------------------------

def axes_size(axis_sizes: dict, axes: Sequence[str]) -> int:
    """The product of the sizes of ``axes``: the number of blocks a spec entry splits into."""
    return math.prod(axis_sizes[a] for a in axes)


def axes_rank(axis_sizes: dict, axis_names: Sequence[str], coords: Sequence[int],
              axes: Sequence[str]) -> int:
    """Mixed-radix rank of a mesh coordinate over ``axes``, the first listed axis major."""
    where = {name: coords[k] for k, name in enumerate(axis_names)}
    rank = 0
    for a in axes:
        rank = rank * axis_sizes[a] + where[a]
    return rank


def device_groups(mesh: Mesh, axes: Sequence[str]) -> tuple:
    """The devices that communicate in a collective over ``axes``, as tuples of device ids.

    Devices agreeing on every other axis form one group, ordered by their rank over ``axes``;
    groups are sorted by their first member's position. On a (2,2) mesh ('i','j'): over 'i'
    ``((0,2),(1,3))``; over ('j','i') ``((0,2,1,3),)``. Computed once per mesh and axes:
    lowering asks for every device of every collective.
    """
    return _device_groups(mesh, tuple(axes))


@functools.lru_cache(maxsize=4096)
def _device_groups(mesh: Mesh, axes: tuple) -> tuple:
    sizes = mesh.shape
    names = mesh.axis_names
    ids = mesh.flat_device_ids
    groups: dict = {}
    for position in range(mesh.size):
        coords = mesh.coords(position)
        key = tuple(c for name, c in zip(names, coords) if name not in axes)
        rank = axes_rank(sizes, names, coords, axes)
        groups.setdefault(key, []).append((rank, position))
    ordered = sorted(groups.values(), key=lambda members: min(p for _, p in members))
    return tuple(tuple(ids[p] for _, p in sorted(members)) for members in ordered)


# --- block shapes: one pure function and its exact inverse ---------------------------------------

def block_shape(global_shape: Sequence[int], spec, axis_sizes: dict) -> tuple:
    """The shape of each device's block: ``g[d] // size(spec[d])``. Requires divisibility."""
    names = spec_names(spec)
    shape = []
    for d, g in enumerate(global_shape):
        k = axes_size(axis_sizes, names[d]) if d < len(names) else 1
        if g % k:
            raise ValueError(f"dimension {d} of size {g} is not divisible by {k}")
        shape.append(g // k)
    return tuple(shape)


def global_shape(block: Sequence[int], spec, axis_sizes: dict) -> tuple:
    """The inverse of ``block_shape``: ``b[d] * size(spec[d])``."""
    names = spec_names(spec)
    return tuple(b * (axes_size(axis_sizes, names[d]) if d < len(names) else 1)
                 for d, b in enumerate(block))


def block_index(spec, mesh: Mesh, coords: Sequence[int]) -> tuple:
    """Which block (per dimension) the device at ``coords`` holds under ``spec``."""
    return tuple(axes_rank(mesh.shape, mesh.axis_names, coords, names)
                 for names in spec_names(spec))


def by_layout(cache: dict, make, shape, mesh: Mesh, spec):
    """``make(shape, mesh, spec)``, worked out once per shape, mesh and spec (a value of one
    layout is split, joined or sliced the same way at every call). Keyed by the mesh's and
    spec's identity, checked on every hit: hashing them would cost more than the work."""
    key = (tuple(shape), id(mesh), id(spec))
    entry = cache.get(key)
    if entry is None or entry[0] is not mesh or entry[1] is not spec:
        if len(cache) > 4096:
            cache.clear()
        entry = cache[key] = (mesh, spec, make(tuple(shape), mesh, spec))
    return entry[2]


def position_slices(shape: Sequence[int], spec, mesh: Mesh) -> list:
    """``block_slices`` of every mesh position, in position order (``by_layout``)."""
    return by_layout(_POSITION_SLICES, _position_slices, shape, mesh, spec)


def _position_slices(shape: tuple, mesh: Mesh, spec) -> list:
    return [block_slices(shape, spec, mesh, mesh.coords(p)) for p in range(mesh.size)]


_POSITION_SLICES: dict = {}


def block_slices(shape: Sequence[int], spec, mesh: Mesh, coords: Sequence[int]) -> tuple:
    """The index of the device's block in the global array: a tuple of slices."""
    block = block_shape(shape, spec, mesh.shape)
    index = block_index(spec, mesh, coords)
    slices = []
    for d, size in enumerate(block):
        k = index[d] if d < len(index) else 0
        slices.append(slice(k * size, (k + 1) * size))
    return tuple(slices)


def owner_positions(spec, mesh: Mesh) -> list:
    """Positions whose coordinate is 0 on every axis ``spec`` does not name: one per block."""
    named = set(spec_axes(spec))
    return [p for p in range(mesh.size)
            if all(c == 0 for name, c in zip(mesh.axis_names, mesh.coords(p))
                   if name not in named)]


# --- the shard_map equation's shape rule ---------------------------------------------------------

def _shard_map_rule(*in_avals: Aval, jaxpr, mesh, in_specs, out_specs, check_vma) -> list:
    if check_vma is True:
        _check_body_types(jaxpr, mesh, out_specs)
    return [Aval(global_shape(a.shape, spec, mesh.shape), a.dtype,
                 unreduced=spec.unreduced, reduced=spec.reduced)
            for a, spec in zip(jaxpr.out_avals, out_specs)]


def _check_body_types(jaxpr, mesh, out_specs) -> None:
    """With the check on, a body output may vary only over the axes its out_spec names: an
    output typed otherwise would be assembled from one copy of blocks that may differ, and
    transposed as if its copies were different values. The checker rejects such user bodies
    first; a derived body (a JVP, a transpose, a partial evaluation) breaking it is a bug."""
    for k, (aval, spec) in enumerate(zip(jaxpr.out_avals, out_specs)):
        # axes the mesh lacks are the verifier's to report (an unknown axis in a type)
        extra = (aval.vma & set(mesh.axis_names)) - set(spec_axes(spec))
        if extra:
            raise ValueError(f"shard_map output {k} has type {aval.str_short()} but its out_spec "
                             f"{spec} does not name {sorted(extra)}")


shape_rules[prims.shard_map_p] = _shard_map_rule


def _shard_map_ur(*in_avals, in_specs, out_specs, **params) -> list:
    """A shard_map's operands must be unreduced and reduced as its in_specs say (a value's
    copies are never taken for partial sums, nor partial sums for copies); its results are
    as its out_specs say (its body's outputs were checked to be)."""
    for aval, spec in zip(in_avals, in_specs):
        for which in ("unreduced", "reduced"):
            if getattr(spec, which) != getattr(aval, which):
                raise ValueError(f"in_specs containing {which} {spec} passed to shard_map "
                                 f"should be equal to the {which} present on the in_aval "
                                 f"{aval.str_long(short=True)}")
    return [(spec.unreduced, spec.reduced) for spec in out_specs]


unreduced_rules.ur_rules[prims.shard_map_p] = _shard_map_ur
unreduced_rules.ALWAYS.add(prims.shard_map_p)


# --- the runtime replication oracle ----------------------------------------------------------------

def replication_mismatch(blocks, mesh: Mesh, spec):
    """Two positions that should hold equal blocks under ``spec`` but do not, or None.

    Devices agreeing on every axis ``spec`` names hold copies of one block; copies must hold
    equal values: ``-0.0`` equals ``+0.0`` and a NaN equals a NaN in the same place, as a user
    means "replicated" (the bits of a NaN's payload or a zero's sign are not compared).
    """
    named = set(spec_axes(spec))
    first_of: dict = {}
    for position in range(mesh.size):
        coords = mesh.coords(position)
        key = tuple(c for name, c in zip(mesh.axis_names, coords) if name in named)
        if key not in first_of:
            first_of[key] = position
            continue
        other = first_of[key]
        if not _equal_values(blocks[other], blocks[position]):
            return other, position
    return None


def _equal_values(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    # equal_nan only applies to inexact dtypes; numpy rejects it for the others.
    return bool(np.array_equal(a, b, equal_nan=np.issubdtype(a.dtype, np.inexact)))


def runtime_replication_error(output: int, spec, mesh: Mesh, positions) -> ReplicationError:
    """The error of the runtime oracle: which output, which devices, along which axes."""
    a, b = positions
    ca, cb = mesh.coords(a), mesh.coords(b)
    differ = [n for n, x, y in zip(mesh.axis_names, ca, cb) if x != y]
    unnamed = [n for n in mesh.axis_names if n not in spec_axes(spec)]
    ids = mesh.flat_device_ids
    axes_text = ("mesh axis " + repr(unnamed[0]) if len(unnamed) == 1
                 else "mesh axes {" + ",".join(unnamed) + "}")
    return ReplicationError(
        f"shard_map output {output} has out_specs entry {spec!r}, which claims it is replicated "
        f"across {axes_text}, but at run time device {ids[a]} (mesh coordinates {ca}) and "
        f"device {ids[b]} (mesh coordinates {cb}) hold different blocks; they differ along "
        f"{', '.join(repr(n) for n in differ)}. Reduce the output over those axes (for example "
        "with psum) or mention them in out_specs.")
