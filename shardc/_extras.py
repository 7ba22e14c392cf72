"""Smaller pieces of JAX's top-level API: ``device_get``, ``eval_shape``, ``named_scope``,
``named_call``, ``default_backend``, ``smap``, ``effects_barrier`` and ``block_until_ready``."""
from __future__ import annotations

import contextlib

import numpy as np

from compiler import tree
from compiler.jit import UNSPECIFIED, JitFunction, abstract_stand_ins, trace_function
from compiler.shard_map import current_shard_context
from compiler.tracing import Tracer, aval_of, check_callable, weakly_typed
from ir.sharding import Mesh, NamedSharding, PartitionSpec, current_mesh
from ir.sharding_rules import partitions
from runtime.array import Array
from shardc._transforms import shard_map
from shardc._types import ShapeDtypeStruct

__all__ = ["block_until_ready", "copy_to_host_async", "default_backend", "device_get",
           "effects_barrier", "eval_shape", "named_call", "named_scope", "smap"]


def device_get(x):
    """Every leaf of ``x`` that converts to a numpy array (an Array, a numpy array or
    scalar: ``np.float32(1)`` becomes ``array(1., dtype=float32)``) as that array on the
    host; Python scalars, other objects and traced values as they are, as JAX's (no
    transfer guard applies to fetches from CPU devices).

    >>> device_get({'a': jnp.ones(2), 'b': np.int8(3), 'c': 2})
    {'a': array([1., 1.], dtype=float32), 'b': array(3, dtype=int8), 'c': 2}
    """
    return tree.tree_map(_host_value, x)


def _host_value(leaf):
    if isinstance(leaf, Tracer):
        return leaf
    if isinstance(leaf, Array):
        return np.asarray(leaf)
    to_array = getattr(leaf, "__array__", None)
    return leaf if to_array is None else to_array()


def eval_shape(fun, *args, **kwargs):
    """The shapes and dtypes ``fun(*args, **kwargs)`` would return, as ``ShapeDtypeStruct``s,
    found by tracing it: nothing runs. Arguments may be arrays, ``ShapeDtypeStruct``s or other
    objects with a shape and a dtype (avals), as JAX abstracts them."""
    check_callable(fun)
    if isinstance(fun, JitFunction) and fun.out_shardings is not UNSPECIFIED \
            and current_shard_context() is None:
        # a jitted function's out_shardings lay its results out: they report them (JAX's; the
        # usual way to find the layouts a checkpoint is restored to)
        return fun.eval_shape(*args, **kwargs)
    args, kwargs = abstract_stand_ins((args, kwargs))
    if current_shard_context() is not None:
        # in a shard_map body: traced where it stands (what it adds, nothing reads), so that
        # the results vary over the mesh axes as they would there
        leaves, out_tree = tree.tree_flatten(fun(*args, **kwargs))
        avals, weak = [aval_of(v) for v in leaves], [weakly_typed(v) for v in leaves]
    else:
        closed = trace_function(fun, args, kwargs)
        avals, weak, out_tree = closed.out_avals, closed.out_weak, closed.out_tree
    outs = [_abstract(ShapeDtypeStruct(a.shape, a.dtype, weak_type=w,
                                       manual_axis_type=a.mat if a.vma else None,
                                       sharding=_typed(a)))
            for a, w in zip(avals, weak)]
    return tree.tree_unflatten(out_tree, outs)


def _typed(aval):
    """The sharding an abstract result reports on a mesh with Explicit axes: its type's (one
    None per unsplit dimension), as JAX's eval_shape gives it; else None."""
    typed = aval.type_sharding
    if typed is not None:
        return NamedSharding(typed.mesh, PartitionSpec(*partitions(typed.spec)))
    mesh = current_mesh()
    if mesh is not None and mesh.explicit_axes and current_shard_context() is None:
        return NamedSharding(mesh, PartitionSpec(*[None] * aval.ndim))
    return None


def _abstract(struct):
    """``struct`` reporting its sharding on the abstract mesh, as JAX's eval_shape does; its
    type keeps the mesh its value would be on, so it lowers as that value."""
    if isinstance(struct.sharding, NamedSharding) and isinstance(struct.sharding.mesh, Mesh):
        struct._sharding = NamedSharding(struct.sharding.mesh.abstract_mesh,
                                         struct.sharding.spec)
    return struct


@contextlib.contextmanager
def named_scope(name: str):
    """A name for the operations traced inside (JAX uses it in profiles and HLO metadata);
    shardc's programs name the user's source line instead, so this only checks the name."""
    if not isinstance(name, str):
        raise TypeError(f"named_scope name argument must be a string, got {name!r}")
    yield


def named_call(fun, *, name: str | None = None):
    """``fun`` itself: JAX gives its equations a name scope, shardc their source lines."""
    return fun


def default_backend() -> str:
    """The platform programs run on: shardc simulates CPU devices."""
    return "cpu"


_INFER_AXES = object()      # smap's in_axes not given: read from the argument types


def smap(f=None, /, *, in_axes=_INFER_AXES, out_axes, axis_name):
    """A shard_map over one mesh axis of the current mesh, with in_axes/out_axes naming which
    array dimension is split over it (``None``: not split), as ``vmap`` names its axes.
    ``in_axes`` omitted: read from the arguments' types (the axis must be Explicit)."""
    if f is None:
        return lambda g: smap(g, in_axes=in_axes, out_axes=out_axes, axis_name=axis_name)
    if isinstance(axis_name, (list, tuple)):
        raise TypeError(f"smap axis_name should be a `str` or a `Hashable`, but got {axis_name}")
    infer = in_axes is _INFER_AXES
    if not infer and in_axes is not None and not isinstance(in_axes, (int, tuple)):
        raise TypeError("smap in_axes must be an int, None, or a tuple of entries "
                        "corresponding to the positional arguments passed to the function, "
                        f"but got {in_axes}.")
    for leaves, what in (([] if infer else tree.tree_leaves(in_axes), "in_axes"),
                         (tree.tree_leaves(out_axes), "out_axes")):
        if not all(isinstance(a, int) for a in leaves):
            raise TypeError(f"smap {what} must be an int, None, or (nested) container with "
                            f"those types as leaves, but got {in_axes if what == 'in_axes' else out_axes}.")
    spec_of = _axis_spec(axis_name)
    out_specs = tree.tree_map(spec_of, out_axes, is_leaf=lambda a: a is None)
    if infer:
        return shard_map(f, out_specs=out_specs, axis_names={axis_name}, _smap=True)
    in_specs = tree.tree_map(spec_of, in_axes, is_leaf=lambda a: a is None)
    if isinstance(in_specs, list):
        in_specs = tuple(in_specs)
    return shard_map(f, in_specs=in_specs, out_specs=out_specs, axis_names={axis_name})


def _axis_spec(axis_name):

    def spec(axis):
        if axis is None:
            return PartitionSpec()
        return PartitionSpec(*([None] * axis + [axis_name]))
    return spec


def effects_barrier():
    """Wait until every pending effect has happened: programs here run synchronously, so
    everything has already happened when this is called."""


def block_until_ready(x):
    """``x``, each leaf ready (at once here); a deleted array's is JAX's runtime error."""
    for leaf in tree.tree_leaves(x):
        if isinstance(leaf, Array):
            leaf.block_until_ready()
    return x


def copy_to_host_async(x):
    """Start copying every leaf of ``x`` that can be copied to the host (calls its
    ``copy_to_host_async``); returns ``x``. shardc's arrays are on the host already."""
    for leaf in tree.tree_leaves(x):
        copy = getattr(type(leaf), "copy_to_host_async", None)
        if copy is not None or hasattr(leaf, "copy_to_host_async"):
            leaf.copy_to_host_async()
    return x
