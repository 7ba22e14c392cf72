"""The types of values: ``typeof`` (shape, dtype and the manual axis type, JAX's name for the
mesh axes a value varies over), ``ShapeDtypeStruct``, and traced values as ``shardc.Array`` to
``isinstance``."""
from __future__ import annotations

import math
import operator

import numpy as np

from compiler.refs import is_ref
from compiler.shard_map import current_shard_context
from compiler.tracing import Tracer, aval_of, layout_of_value, weakly_typed
from ir.core import Aval, TypeSharding, set_public_sharding_view, short_dtype
from ir.dtypes import is_float0
from ir.float0 import float0_aval
from ir.sharding import (EMPTY_MESH, AbstractMesh, ManualAxisType, NamedSharding, PartitionSpec,
                         entry_names)
from ir.shape_dtype import ShapeDtypeStruct
from ir.sharding_rules import check_divisible, partitions
from runtime.array import Array
from shardc.random import PRNGKeyArray
from shardc.sharding import body_abstract_mesh, get_abstract_mesh

__all__ = ["ManualAxisType", "ShapeDtypeStruct", "ShapedArray", "typeof"]

# A traced value is an Array to isinstance, as in JAX (jnp.ndarray is the same class).
Array.register(Tracer)




def typeof(x):
    """The abstract type of ``x``: shape, dtype and the mesh axes it varies over (``.vma``)."""
    if isinstance(x, PRNGKeyArray):
        return _key_type(x)
    if is_ref(x):            # the type of the array it holds, as a Ref's (Ref{float32[3]})
        value = x._read()
        held = ShapedArray._of(aval_of(value), value)
        held._text = f"Ref{{{held._text}}}"
        return held
    if isinstance(x, (tuple, list)):      # a container, not a value of one type (JAX's)
        raise TypeError(f"Argument '{x}' of type '{type(x)}' is not a valid JAX type")
    if is_float0(x):          # an integer's cotangent: typed, holding nothing
        return ShapedArray._of(float0_aval(x), x)
    return ShapedArray._of(aval_of(x), x)


def _key_type(keys):
    """A key array's type: its own shape and key dtype (``key<fry>[3]``), its data's vma."""
    of_data = ShapedArray._of(aval_of(keys._base), keys._base)
    of_data.shape, of_data.ndim, of_data.dtype = keys.shape, keys.ndim, keys.dtype
    # the keys' sharding: the data's without the entry of the key words' dimension
    spec = of_data.sharding.spec
    of_data.sharding = of_data.sharding.with_spec(spec.update(partitions=tuple(spec)[:-1]))
    vma_text = of_data._text[of_data._text.index("]") + 1:]
    # the key dimensions as the data's leading ones are split (key<fry>[8@X])
    data_dims = of_data._text[of_data._text.index("[") + 1:of_data._text.index("]")]
    dims = _top_level_parts(data_dims)[:keys.ndim] if keys.ndim else []
    of_data._text = f"{keys.dtype.name}[{','.join(dims)}]{vma_text}"
    return of_data


def _top_level_parts(text: str) -> list:
    """``text`` split at its commas outside parentheses (``8@(x,y),2`` -> ``8@(x,y)``, ``2``)."""
    parts, depth, start = [], 0, 0
    for k, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            parts.append(text[start:k])
            start = k + 1
    return parts + [text[start:]]


def public_sharding(aval, value=None) -> NamedSharding:
    """JAX's reading of a type's sharding (``typeof(x).sharding``, ``x.aval.sharding``): a
    NamedSharding on an abstract mesh with one spec entry per dimension. The mesh is the one
    the type splits over (in a shard_map body, the body's, its manual axes Manual), else the
    body's, else the abstract mesh of the mesh ``value`` is laid out on, else the one in
    context (empty when none) for a traced value, the empty one for a concrete value laid
    out otherwise: an unsplit type reads ``P(None, ...)`` there."""
    typed = aval.type_sharding
    shard = current_shard_context() if value is None or isinstance(value, Tracer) else None
    # outside a body the spec names the unreduced and reduced axes (in one, ``aval.mat``)
    ur = {} if shard is not None else dict(unreduced=aval.unreduced, reduced=aval.reduced)
    if typed is not None:
        mesh = (body_abstract_mesh(shard) if shard is not None and shard.mesh == typed.mesh
                else typed.mesh.abstract_mesh)
        return NamedSharding(mesh, PartitionSpec(*partitions(typed.spec), **ur))
    unsplit = PartitionSpec(*[None] * aval.ndim, **ur)
    if shard is not None:
        return NamedSharding(body_abstract_mesh(shard), unsplit)
    layout = layout_of_value(value)
    if isinstance(layout, NamedSharding):
        return NamedSharding(layout.mesh.abstract_mesh, unsplit)
    if value is not None and not isinstance(value, Tracer):
        # a value on one device, or on none yet (numpy's, Python's): on no mesh
        return NamedSharding(EMPTY_MESH, unsplit)
    return NamedSharding(get_abstract_mesh(), unsplit)


set_public_sharding_view(public_sharding)


def _abstract_split(aval):
    """What a type's split says, its mesh abstracted (JAX's types name abstract meshes)."""
    typed = aval.type_sharding
    return None if typed is None else (typed.mesh.abstract_mesh, typed.spec)


def _type_sharding(sharding, shape) -> tuple:
    """A type's public sharding and what shardc's type keeps of it (the split over Explicit
    axes), from a NamedSharding on an abstract mesh given for ``shape``: as JAX's, one spec
    entry per dimension, naming Explicit axes only, each dividing its dimension evenly."""
    if not isinstance(sharding, NamedSharding):
        raise TypeError(f"ShapedArray's sharding must be a NamedSharding, got {sharding!r}")
    mesh, spec = sharding.mesh, sharding.spec
    if not isinstance(mesh, AbstractMesh):
        raise ValueError(f"Mesh of an aval must be an AbstractMesh. Got {mesh} of type "
                         f"{type(mesh)}")
    explicit = set(mesh.explicit_axes)
    kept = [tuple(n for n in entry_names(e) if n in explicit) for e in spec]
    if len(kept) > len(shape) and any(kept[len(shape):]):
        raise ValueError(f"Length of sharding.spec must be equal to aval's ndim. Got "
                         f"sharding.spec {spec}, aval.ndim {len(shape)} and sharding {sharding}")
    kept = (kept + [()] * len(shape))[:len(shape)]
    entries = [None if not names else names[0] if len(names) == 1 else names
               for names in kept]
    check_divisible(shape, kept, mesh)
    public = NamedSharding(mesh, PartitionSpec(
        *entries, unreduced=spec.unreduced & explicit, reduced=spec.reduced & explicit))
    return public, TypeSharding.of(mesh, kept)


class ShapedArray:
    """A value's type as JAX shows it (``typeof(x)``, named as JAX's class is): shape, dtype,
    weak type, the mesh axes it varies over and its sharding. As JAX's ``jax.core.ShapedArray``
    it can be made from a shape and dtype (a ``sharding=`` on a mesh splits the dimensions
    its spec names: each must divide evenly, JAX's ValueError otherwise).

    >>> ShapedArray((8, 4), np.float32)
    ShapedArray(float32[8,4])
    """

    stands_for_a_value = True   # lower() and eval_shape() take it as a ShapeDtypeStruct

    def __init__(self, shape, dtype, weak_type: bool = False, *, sharding=None,
                 manual_axis_type=None):
        shape = tuple(operator.index(d) for d in shape)
        mat = ManualAxisType() if manual_axis_type is None else manual_axis_type
        if sharding is None:
            public = NamedSharding(EMPTY_MESH, PartitionSpec(*[None] * len(shape)))
            typed = None
        else:
            public, typed = _type_sharding(sharding, shape)
        aval = Aval(shape, np.dtype(dtype), mat.varying, typed, mat.unreduced, mat.reduced)
        self._fill(aval, weak_type, public, ())

    @classmethod
    def _of(cls, aval, value) -> "ShapedArray":
        """The type of ``value``, whose abstract value is ``aval``."""
        order = value._axis_order() if hasattr(value, "_axis_order") else ()
        out = cls.__new__(cls)
        out._fill(aval, weakly_typed(value), public_sharding(aval, value), order)
        if aval.ur and order is not None and isinstance(value, Tracer) \
                and current_shard_context() is not None:
            # in a body, a block's partial sums and known-equal copies are its manual type's
            # (outside one, its sharding's spec names them: JAX's)
            out.manual_axis_type = out.mat = ManualAxisType(
                varying=out.vma, unreduced=aval.unreduced, reduced=aval.reduced)
        return out

    def _fill(self, aval, weak_type: bool, sharding, order) -> None:
        self.aval = aval
        self.shape = aval.shape
        self.dtype = aval.dtype
        self.ndim = aval.ndim
        # in a body whose replication check is off (no axis order) nothing is typed varying
        # (JAX's); the axes shardc infers there stay internal
        self.vma = aval.vma if order is not None else frozenset()
        # JAX 0.10's spelling: typeof(x).manual_axis_type.varying (and .mat); ``.vma`` is
        # the older one, kept for programs written against it
        self.manual_axis_type = self.mat = ManualAxisType(varying=self.vma)
        self.sharding = sharding
        self.weak_type = bool(weak_type)
        self._text = aval.str_long(order)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def update(self, shape=None, dtype=None, weak_type=None, **kwargs) -> "ShapedArray":
        """This type with the fields given changed (JAX's ``update``): its sharding kept for
        a new shape of the same rank."""
        kept = shape is None or len(tuple(shape)) == len(self.shape)
        kwargs.setdefault("sharding", self.sharding if kept else None)
        kwargs.setdefault("manual_axis_type", self.manual_axis_type)
        return ShapedArray(self.shape if shape is None else shape,
                           self.dtype if dtype is None else dtype,
                           self.weak_type if weak_type is None else weak_type, **kwargs)

    def __str__(self):
        # a weakly typed value's type is marked ``~`` (JAX's ``~float32[]``)
        return ("~" if self.weak_type else "") + self._text

    def str_short(self, short_dtypes: bool = False, mesh_axis_types: bool = False) -> str:
        """JAX's ``str_short``: the type without its weak-type mark, with ``f32``-style
        dtypes if asked."""
        if not short_dtypes:
            return self._text
        return short_dtype(self.dtype) + self._text[len(self.dtype.name):]

    def __repr__(self):
        # JAX's repr (f"{typeof(x)=}"): ShapedArray(float32[], weak_type=True)
        weak_text = ", weak_type=True" if self.weak_type else ""
        return f"ShapedArray({self._text}{weak_text})"

    # two types are equal when they print alike and lay out alike (JAX's interned types)
    def __eq__(self, other):
        if isinstance(other, Aval):
            # an array's ``.aval`` (shardc's abstract value): the same shape, dtype, vma and
            # type (a strongly typed one: the abstract value records no weak type)
            mine, theirs = self.aval, other
            return (not self.weak_type and mine.strip_sharding() == theirs.strip_sharding()
                    and _abstract_split(mine) == _abstract_split(theirs))
        return (isinstance(other, ShapedArray) and str(self) == str(other)
                and self.sharding == other.sharding)

    def __hash__(self):
        return hash(str(self))
