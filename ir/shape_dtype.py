"""``ShapeDtypeStruct``: a stand-in value with only a shape, a dtype and optionally a
sharding, to trace and lower with, and what ``out_info`` of a lowered function describes
its results with."""
from __future__ import annotations

import numpy as np

from ir import dtypes
from ir.core import Aval
from ir.sharding import NamedSharding, PartitionSpec, current_mesh, rank_problem
from ir.sharding_rules import type_sharding


class ShapeDtypeStruct:
    """A stand-in argument with only a shape, a dtype and optionally a sharding: enough to
    trace and lower (``jit(f).lower(ShapeDtypeStruct((8, 16), jnp.float32))``)."""

    def __init__(self, shape, dtype, sharding=None, weak_type: bool = False,
                 manual_axis_type=None):
        self.shape = tuple(shape)
        self.weak = bool(weak_type)
        # in a shard_map body, the mesh axes the value varies over (JAX's manual_axis_type)
        self.manual_axis_type = manual_axis_type
        canonical = dtypes.canonicalize(dtype)      # refuses what no array holds
        # the dtype as asked (JAX keeps float64 with x64 off: pure_callback refuses it);
        # what it stands for when traced is the canonical one
        self.dtype = np.dtype(dtype)
        problem = rank_problem(sharding, len(self.shape))
        if problem is not None:
            raise ValueError(problem)
        mesh = current_mesh()
        if isinstance(sharding, PartitionSpec) and mesh is not None:
            sharding = NamedSharding(mesh, sharding)    # on the mesh set, as JAX resolves it
        self.sharding = sharding
        # on an Explicit mesh the sharding is part of the type (JAX's sharding in types)
        self.aval = Aval(self.shape, canonical).with_sharding(
            type_sharding(sharding, len(self.shape)))
        if manual_axis_type is not None and manual_axis_type.varying:
            self.aval = self.aval.update(vma=frozenset(manual_axis_type.varying))

    weak_type = property(lambda self: self.weak)
    size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)))
    ndim = property(lambda self: len(self.shape))

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    @classmethod
    def like(cls, x) -> "ShapeDtypeStruct":
        """The shape, dtype, layout and weak type of ``x``."""
        return cls(np.shape(x) if not hasattr(x, "shape") else x.shape, x.dtype,
                   getattr(x, "sharding", None), weak_type=getattr(x, "weak", False) is True)

    def update(self, **kwargs) -> "ShapeDtypeStruct":
        """This struct with the fields given replaced."""
        return ShapeDtypeStruct(kwargs.pop("shape", self.shape),
                                kwargs.pop("dtype", self.dtype),
                                kwargs.pop("sharding", self.sharding),
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
