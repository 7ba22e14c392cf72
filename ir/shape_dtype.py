"""``ShapeDtypeStruct``: a stand-in value with only a shape, a dtype and optionally a
sharding, to trace and lower with, and what ``out_info`` of a lowered function describes
its results with."""
from __future__ import annotations

import numpy as np

from ir import dtypes
from ir.core import Aval
from ir.layout import AutoLayout, Format, check_layout, row_major
from ir.sharding import NamedSharding, PartitionSpec, current_mesh, rank_problem
from ir.sharding_rules import type_sharding


class ShapeDtypeStruct:
    """A stand-in argument with only a shape, a dtype and optionally a sharding: enough to
    trace and lower (``jit(f).lower(ShapeDtypeStruct((8, 16), jnp.float32))``)."""

    def __init__(self, shape, dtype, sharding=None, weak_type: bool = False,
                 manual_axis_type=None):
        if dtype is None:
            raise ValueError("ShapeDtypeStruct: dtype must be specified.")
        self.shape = tuple(shape)
        self.weak = bool(weak_type)
        # in a shard_map body, the mesh axes the value varies over (JAX's manual_axis_type)
        self.manual_axis_type = manual_axis_type
        if callable(getattr(dtype, "stand_in", None)):
            # a key dtype (JAX's extended dtypes): traced as keys over their data's stand-in
            # (``dtype.stand_in``), never as an array of its own
            canonical, self.dtype = None, dtype
        else:
            canonical = dtypes.canonicalize(dtype)      # refuses what no array holds
            # the dtype as asked (JAX keeps float64 with x64 off: pure_callback refuses
            # it); what it stands for when traced is the canonical one
            self.dtype = np.dtype(dtype)
        # a Format's layout (row-major only: ``ir.layout``), and its sharding as the sharding
        self._layout = sharding.layout if isinstance(sharding, Format) else None
        if isinstance(sharding, Format):
            if sharding.layout is AutoLayout:
                raise TypeError("`Layout.AUTO` cannot be used in place of a device-local "
                                f"layout in a `ShapeDtypeStruct`. Got {sharding}")
            check_layout(sharding.layout, self.shape, "ShapeDtypeStruct")
            sharding = sharding.sharding
        problem = rank_problem(sharding, len(self.shape))
        if problem is not None:
            raise ValueError(problem)
        # a PartitionSpec is kept as given and read on the mesh set when the sharding is
        # asked for (JAX's); anything else is the sharding
        self._sharding = sharding
        self._canonical = canonical
        self._avals: dict = {}
        if not isinstance(sharding, PartitionSpec) and canonical is not None:
            self.aval       # made now: a sharding reported otherwise later keeps this type

    @property
    def format(self):
        """Its layout (row-major, or as a Format gave it) and sharding, as an array's."""
        return Format(self._layout or row_major(len(self.shape)), self.sharding)

    @property
    def extended(self) -> bool:
        """Whether the dtype is an extended one (a key dtype), which no array holds."""
        return self._canonical is None

    @property
    def sharding(self):
        """The sharding; a PartitionSpec given is on the mesh set now (JAX's TypeError where
        none is)."""
        sharding = self._sharding
        if isinstance(sharding, PartitionSpec):
            mesh = current_mesh()
            if mesh is None:
                raise TypeError("When specifying PartitionSpec to `ShapeDtypeStruct`, the "
                                "context mesh cannot be empty. Please use `jax.set_mesh` to "
                                "set the mesh context.")
            return NamedSharding(mesh, sharding)
        return sharding

    @property
    def aval(self) -> Aval:
        """The type it stands for: on an Explicit mesh its sharding is part of it (JAX's
        sharding in types)."""
        if self.extended:
            raise TypeError(f"a ShapeDtypeStruct of dtype {self.dtype} has no array type: it "
                            "stands for keys, traced over their uint32 data")
        sharding = self._sharding
        key = current_mesh() if isinstance(sharding, PartitionSpec) else None
        aval = self._avals.get(key)
        if aval is None:
            typed = sharding if key is None else NamedSharding(key, sharding)
            aval = Aval(self.shape, self._canonical).with_sharding(
                type_sharding(typed, len(self.shape)) if key is not None or not isinstance(
                    sharding, PartitionSpec) else None)
            manual = self.manual_axis_type
            if manual is not None and manual.varying:
                aval = aval.update(vma=frozenset(manual.varying))
            self._avals[key] = aval
        return aval

    def typed_as(self, aval: Aval) -> "ShapeDtypeStruct":
        """This stand-in, its sharding kept, standing for a value of type ``aval`` (split over
        fewer Explicit axes than its sharding is), as ``Array.typed_as``."""
        assert not isinstance(self._sharding, PartitionSpec)
        result = ShapeDtypeStruct(self.shape, self.dtype, self._sharding, self.weak,
                                  self.manual_axis_type)
        result._avals = {None: aval}
        return result

    weak_type = property(lambda self: self.weak)
    size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)))
    ndim = property(lambda self: len(self.shape))

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    @classmethod
    def like(cls, x) -> "ShapeDtypeStruct":
        """The shape, dtype, layout and weak type of ``x`` (the layout of an array placed
        where it lies by default, uncommitted, is None: JAX's)."""
        sharding = getattr(x, "sharding", None)
        if getattr(x, "committed", True) is False:
            sharding = None
        return cls(np.shape(x) if not hasattr(x, "shape") else x.shape, x.dtype,
                   sharding, weak_type=getattr(x, "weak", False) is True)

    def update(self, **kwargs) -> "ShapeDtypeStruct":
        """This struct with the fields given replaced."""
        return ShapeDtypeStruct(kwargs.pop("shape", self.shape),
                                kwargs.pop("dtype", self.dtype),
                                kwargs.pop("sharding", self._sharding),
                                weak_type=kwargs.pop("weak_type", self.weak_type),
                                manual_axis_type=kwargs.pop("manual_axis_type",
                                                            self.manual_axis_type))

    def __eq__(self, other):
        return isinstance(other, ShapeDtypeStruct) and (
            (self.shape, self.dtype, self.sharding, self.weak_type)
            == (other.shape, other.dtype, other.sharding, other.weak_type))

    def __hash__(self):
        return hash((self.shape, self.dtype, self.sharding, self.weak_type))

    def __repr__(self):
        sharding = f", sharding={self.sharding}" if self.sharding is not None else ""
        weak = ", weak_type=True" if self.weak_type else ""
        mat = (f", manual_axis_type={self.manual_axis_type}" if self.manual_axis_type
               and self.manual_axis_type.varying else "")
        return (f"ShapeDtypeStruct(shape={self.shape}, dtype={self.dtype.name}{sharding}"
                f"{weak}{mat})")
