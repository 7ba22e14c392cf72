"""``shardc.lax``: collectives over mesh axes and the lax operations user code reaches for.

Collectives take ``axis_name`` as one mesh axis or a tuple of axes; inside a shard_map body
they act over the device groups of SEMANTICS 2.0.
"""
from __future__ import annotations

import numpy as np

from compiler import tree
from compiler.batching import vmap_axis
from compiler.batching_axes import named_axes_size
from compiler.shard_map import UnknownAxisError, current_shard_context
from compiler.tracing import aval_of, bind, check_jax_leaves, is_python_scalar
from ir import dtypes as _dt
from ir import primitives as p
from ir.sharding import NamedSharding, PartitionSpec
import shardc.numpy as jnp
from shardc.numpy._arithmetic import binary_op
from shardc.numpy._core import dtype_of, promote
from shardc.lax import _groups


# --- axis names --------------------------------------------------------------------------------

def _axes(prim_name: str, axis_name) -> tuple:
    """Validate ``axis_name`` against the enclosing shard_map's mesh; return it as a tuple."""
    if isinstance(axis_name, (set, frozenset)):
        raise TypeError(f"axis_name={axis_name!r} must be a tuple or a str. Got {axis_name}")
    axes = tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)
    shard = current_shard_context()
    for a in axes:
        if vmap_axis(a) is not None:            # vmap(..., axis_name=a): across its members
            if shard is not None and a in shard.mesh.axis_names:
                raise ValueError(
                    f"{prim_name}: axis name '{a}' is both a vmap axis_name and an axis of "
                    "the enclosing shard_map's mesh; rename one of them.")
            continue
        if shard is None:
            raise UnknownAxisError(
                f"{prim_name}: found an unbound axis name '{a}'; call {prim_name} inside a "
                "shard_map body whose mesh has that axis.")
        if a not in shard.mesh.axis_names:
            raise UnknownAxisError(
                f"{prim_name}: unknown mesh axis '{a}' in axis_name={axis_name!r}; the "
                f"enclosing shard_map's mesh has axes {shard.mesh.axis_names}.")
        if a not in shard.manual:
            raise UnknownAxisError(
                f"{prim_name}: mesh axis '{a}' in axis_name={axis_name!r} is not manual here; "
                f"the enclosing shard_map is manual over {shard.manual} (its axis_names). "
                "Nest a shard_map over it to communicate along it.")
    for a in axes:
        if axes.count(a) > 1:
            raise ValueError(f"{prim_name}: axis_name={axis_name!r} names mesh axis '{a}' "
                             "more than once.")
    return axes


def _check_operands(prim_name: str, x):
    """Every leaf of a collective's operand must be a JAX value (an array or a number)."""
    check_jax_leaves(tree.tree_leaves(x), x, lambda path: f"{prim_name}: operand x{path}")


def _check_int(prim_name: str, param: str, value) -> int:
    """A static integer parameter (a dimension, a rank): ints only, no floats or strings."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{prim_name}: {param} must be an int, got {value!r} of type "
                        f"{type(value).__name__}")
    return int(value)


def _no_groups(prim_name, axis_index_groups):
    if axis_index_groups is not None:
        raise NotImplementedError(f"{prim_name}: axis_index_groups is not supported by shardc "
                                  "(psum, pmean, pmax, pmin and all_gather take it)")


def axis_size(axis_name) -> int:
    """The number of devices along ``axis_name`` (a product for a tuple of axes)."""
    return named_axes_size(_axes("axis_size", axis_name))


def _reducing(prim, name, x, axis_name, axis_index_groups):
    _check_operands(name, x)
    axes = _axes(name, axis_name)
    if axis_index_groups is not None:
        return _grouped_reducing(name, x, axes, axis_index_groups)

    def one(leaf):
        if is_python_scalar(leaf):
            size = named_axes_size(axes)
            if prim is p.psum_p:
                return leaf * size
            if prim is p.pmean_p:
                return leaf
            return leaf
        return bind(prim, leaf, mesh_axes=axes)

    return tree.tree_map(one, x)


def _grouped_reducing(name, x, axes, axis_index_groups):
    """A reduction within each of ``axis_index_groups`` (see ``shardc.lax._groups``). As in JAX,
    psum and pmean take groups only with the replication check off."""
    shard = current_shard_context()
    if name in ("psum", "pmean") and shard.check_vma:
        raise NotImplementedError(
            f"{name}: axis_index_groups is not supported with the replication check on (as in "
            "JAX); pass check_vma=False to shard_map")
    size = _group_size(axes)
    groups = _groups.check_groups(name, axis_index_groups, size, equal_sizes=False)

    def one(leaf):
        if is_python_scalar(leaf) and len({len(g) for g in groups}) == 1:
            # a constant: the group size for psum, as JAX computes it statically
            return leaf * len(groups[0]) if name == "psum" else leaf
        return _groups.reduce(name, leaf, axes, groups, size)

    return tree.tree_map(one, x)


def psum(x, axis_name, *, axis_index_groups=None):
    """Sum over the devices of each group; every member gets the total.

        blocks over 'i':  [1] [2] [3] [4]   ->   [10] [10] [10] [10]

    ``psum(1, 'i')`` of a Python number is the axis size, computed statically.
    """
    return _reducing(p.psum_p, "psum", x, axis_name, axis_index_groups)


def pmean(x, axis_name, *, axis_index_groups=None):
    """Mean over the devices of each group.

        blocks over 'i':  [1] [2] [3] [4]   ->   [2.5] [2.5] [2.5] [2.5]
    """
    return _reducing(p.pmean_p, "pmean", x, axis_name, axis_index_groups)


def pmax(x, axis_name, *, axis_index_groups=None):
    """Maximum over the devices of each group.

        blocks over 'i':  [1] [2] [3] [4]   ->   [4] [4] [4] [4]
    """
    return _reducing(p.pmax_p, "pmax", x, axis_name, axis_index_groups)


def pmin(x, axis_name, *, axis_index_groups=None):
    """Minimum over the devices of each group.

        blocks over 'i':  [1] [2] [3] [4]   ->   [1] [1] [1] [1]
    """
    return _reducing(p.pmin_p, "pmin", x, axis_name, axis_index_groups)


def axis_index(axis_name):
    """This device's rank over ``axis_name`` (first listed axis major), an int32 scalar.

        mesh (2,2) ('i','j'):  axis_index('i') -> 0 0 1 1;  axis_index(('j','i')) -> 0 2 1 3
    """
    axes = _axes("axis_index", axis_name)
    return bind(p.axis_index_p, mesh_axes=axes)


def pvary(x, axis_name):
    """Mark ``x`` as varying over ``axis_name`` (identity on values)."""
    _check_operands("pvary", x)
    axes = _axes("pvary", axis_name)
    return tree.tree_map(lambda leaf: bind(p.pvary_p, leaf, mesh_axes=axes), x)


def pcast(x, axis_name, *, to="varying"):
    if to != "varying":
        raise ValueError(f"pcast: unexpected to={to!r}; shardc supports to='varying'")
    return pvary(x, axis_name)


def _dimension(prim_name: str, param: str, value: int, rank: int,
               operand_rank: int | None = None) -> int:
    """A dimension parameter, negative values counted from the end of ``rank``; the error
    names the operand's rank (``operand_rank``, when ``rank`` counts an inserted dimension)."""
    value = _check_int(prim_name, param, value)
    if not -rank <= value < rank:
        raise ValueError(f"{prim_name}: {param}={value} is out of range for an operand of "
                         f"rank {rank if operand_rank is None else operand_rank}")
    return value % rank


def _group_size(axes) -> int:
    return named_axes_size(axes)


def all_gather(x, axis_name, *, axis=0, tiled=False, to="varying", axis_index_groups=None):
    """Every member gets all members' blocks: stacked along a new ``axis`` (untiled) or
    concatenated along ``axis`` (tiled), in rank order.

        blocks over 'i':  [0 1] [2 3] [4 5] [6 7]   tiled ->  [0 1 2 3 4 5 6 7] on every device
    """
    _check_operands("all_gather", x)
    axes = _axes("all_gather", axis_name)
    if to not in ("varying", "invarying"):
        raise ValueError(f"all_gather: unexpected to={to!r}; expected 'varying' or 'invarying'")
    size = _group_size(axes)
    groups = None
    if axis_index_groups is not None:
        if to != "varying":
            raise NotImplementedError("all_gather: axis_index_groups with to='invarying' is not "
                                      "supported (as in JAX)")
        groups = _groups.check_groups("all_gather", axis_index_groups, size, equal_sizes=True)

    def one(leaf):
        leaf = jnp.asarray(leaf) if is_python_scalar(leaf) else leaf
        rank = aval_of(leaf).ndim
        dim = _dimension("all_gather", "axis", axis, rank if tiled else rank + 1, rank)
        if groups is not None:
            return _groups.all_gather(leaf, axes, groups, size, dim, bool(tiled))
        extra = {"to": "invarying"} if to == "invarying" else {}
        return bind(p.all_gather_p, leaf, mesh_axes=axes, gather_axis=dim, tiled=bool(tiled),
                    axis_size=size, **extra)

    return tree.tree_map(one, x)


def psum_scatter(x, axis_name, *, scatter_dimension=0, tiled=False, axis_index_groups=None):
    """Sum over the group, then member r keeps chunk r of ``scatter_dimension``.

        blocks over 'i': [3 1 4 1] [5 9 2 6] [5 3 5 8] [9 7 1 2]   tiled ->  [22] [20] [12] [17]
    """
    _check_operands("psum_scatter", x)
    _no_groups("psum_scatter", axis_index_groups)
    axes = _axes("psum_scatter", axis_name)
    size = _group_size(axes)

    def one(leaf):
        shape = aval_of(leaf).shape
        dim = _dimension("psum_scatter", "scatter_dimension", scatter_dimension, len(shape))
        n = shape[dim]
        if tiled and n % size:
            raise ValueError(f"tiled reduce_scatter operand scatter dimension size {n} must be "
                             f"divisible by shard_count {size}")
        if not tiled and n != size:
            raise ValueError(f"reduce_scatter operand scatter dimension size {n} must match "
                             f"shard count {size}")
        return bind(p.psum_scatter_p, leaf, mesh_axes=axes, scatter_axis=dim,
                    tiled=bool(tiled), axis_size=size)

    return tree.tree_map(one, x)


def _check_perm(perm, axis_name, size) -> tuple:
    if not isinstance(perm, (list, tuple)):
        raise TypeError("ppermute: perm must be a list or a tuple of (source, destination) "
                        f"pairs. Got perm of type {type(perm)}")
    pairs = []
    for entry in perm:
        if not isinstance(entry, (list, tuple)) or len(entry) != 2:
            raise TypeError("ppermute: perm must be a list or a tuple of (source, destination) "
                            f"pairs. Got the entry {entry!r}")
        pairs.append((_check_int("ppermute", "each perm source", entry[0]),
                      _check_int("ppermute", "each perm destination", entry[1])))
    pairs = tuple(pairs)
    sources = [s for s, _ in pairs]
    dests = [d for _, d in pairs]
    if len(set(sources)) != len(sources) or len(set(dests)) != len(dests):
        raise ValueError(f"ppermute sources and destinations must be unique, got {pairs}.")
    for pair in pairs:
        if not all(0 <= k < size for k in pair):
            raise ValueError(f"ppermute: perm entry {pair} is out of range for axis_name "
                             f"{axis_name!r} of size {size}")
    return pairs


def ppermute(x, axis_name, perm):
    """Send each member's block to the member ``perm`` pairs it with; members that receive
    nothing get zeros. Ranks are over ``axis_name`` in the order listed.

        perm [(0,1),(1,2),(2,3),(3,0)]:  [a] [b] [c] [d]  ->  [d] [a] [b] [c]
    """
    _check_operands("ppermute", x)
    axes = _axes("ppermute", axis_name)
    pairs = _check_perm(perm, axis_name, _group_size(axes))
    return tree.tree_map(lambda leaf: bind(p.ppermute_p, leaf, mesh_axes=axes, perm=pairs), x)


def all_to_all(x, axis_name, split_axis, concat_axis, *, tiled=False, axis_index_groups=None):
    """Member d gets chunk d (along ``split_axis``) of every member's block, joined along
    ``concat_axis`` in rank order.

        tiled, split 0, concat 0:  [a0 a1] [b0 b1]  ->  [a0 b0] [a1 b1]
    """
    _check_operands("all_to_all", x)
    _no_groups("all_to_all", axis_index_groups)
    axes = _axes("all_to_all", axis_name)
    size = _group_size(axes)

    def one(leaf):
        shape = aval_of(leaf).shape
        split = _dimension("all_to_all", "split_axis", split_axis, len(shape))
        concat = _dimension("all_to_all", "concat_axis", concat_axis, len(shape))
        n = shape[split]
        if tiled and n % size:
            raise ValueError(f"The size of all_to_all split_axis ({n}) has to be divisible by "
                             f"the size of the named axis {axis_name} ({size})")
        if not tiled and n != size:
            raise ValueError("all_to_all requires the size of the mapped axis axis_name to "
                             f"equal x.shape[split_axis], but they are {size} and {n} "
                             "respectively.")
        return bind(p.all_to_all_p, leaf, mesh_axes=axes, split_axis=split,
                    concat_axis=concat, tiled=bool(tiled), axis_size=size)

    return tree.tree_map(one, x)


def pbroadcast(x, axis_name, source):
    """Every member gets the block of the member at rank ``source``.

        source=2:  [1] [2] [3] [4]  ->  [3] [3] [3] [3]
    """
    _check_operands("pbroadcast", x)
    axes = _axes("pbroadcast", axis_name)
    size = _group_size(axes)
    source = _check_int("pbroadcast", "source", source)
    if not 0 <= source < size:
        raise ValueError(f"pbroadcast: source={source} is out of range for axis_name "
                         f"{axis_name!r} of size {size}")
    return tree.tree_map(
        lambda leaf: bind(p.pbroadcast_p, leaf, mesh_axes=axes, source=int(source)), x)


def with_sharding_constraint(x, shardings):
    """Ask for ``x`` (a pytree) to be laid out by ``shardings``: a NamedSharding, a
    PartitionSpec on the current mesh, or a pytree prefix of those."""
    from shardc.sharding import resolve_sharding
    leaves, treedef = tree.tree_flatten(x)
    is_leaf = lambda s: not isinstance(s, (tuple, list, dict)) or isinstance(s, PartitionSpec)
    targets = tree.broadcast_prefix(shardings, x, is_leaf=is_leaf,
                                    name="with_sharding_constraint shardings")
    out = []
    for leaf, target in zip(leaves, targets):
        sharding = resolve_sharding(target, "with_sharding_constraint")
        if not isinstance(sharding, NamedSharding):
            raise TypeError("with_sharding_constraint requires a NamedSharding or a "
                            f"PartitionSpec on the current mesh, got {target!r}")
        out.append(bind(p.sharding_constraint_p, leaf, sharding=sharding))
    return tree.tree_unflatten(treedef, out)


def reshard(x, out_shardings):
    """``x`` laid out by ``out_shardings`` (as ``with_sharding_constraint``)."""
    return with_sharding_constraint(x, out_shardings)


# --- lax operations ----------------------------------------------------------------------------

def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None):
    """Contract ``lhs`` and ``rhs`` over ((lhs_contract, rhs_contract), (lhs_batch, rhs_batch))."""
    (lc, rc), (lb, rb) = dimension_numbers
    dims = ((tuple(lc), tuple(rc)), (tuple(lb), tuple(rb)))
    lhs, rhs = promote(lhs, rhs)
    return bind(p.dot_general_p, lhs, rhs, dimension_numbers=dims,
                preferred_element_type=(dtype_of(lhs) if preferred_element_type is None
                                        else _dt.canonicalize(preferred_element_type)))


def convert_element_type(x, new_dtype):
    return jnp.astype(x, new_dtype)


def broadcast_in_dim(x, shape, broadcast_dimensions):
    return bind(p.broadcast_in_dim_p, x, shape=tuple(shape),
                broadcast_dimensions=tuple(broadcast_dimensions))


def reshape(x, new_sizes, dimensions=None):
    if dimensions is not None:
        x = jnp.transpose(x, dimensions)
    return jnp.reshape(x, tuple(new_sizes))


def slice(x, start_indices, limit_indices, strides=None):
    return bind(p.slice_p, x, start_indices=tuple(start_indices),
                limit_indices=tuple(limit_indices),
                strides=None if strides is None else tuple(strides))


def iota(dtype, size):
    return bind(p.iota_p, dtype=_dt.canonicalize(dtype), shape=(int(size),), dimension=0)


add, sub, mul = jnp.add, jnp.subtract, jnp.multiply


def div(x, y):
    """``x / y``; integers divide rounding toward zero (``lax.div(-7, 2)`` is -3), and an
    integer division by zero gives -1, as XLA does."""
    return binary_op(p.div_p, x, y)


def rem(x, y):
    """The remainder of ``lax.div``: the sign of ``x`` (C's ``fmod``); ``rem(x, 0)`` is ``x``
    for integers, as XLA does."""
    return binary_op(p.rem_p, x, y)


max, min = jnp.maximum, jnp.minimum
neg, exp, log, sin, cos, tanh, sqrt, abs = (jnp.negative, jnp.exp, jnp.log, jnp.sin, jnp.cos,
                                            jnp.tanh, jnp.sqrt, jnp.abs)
concatenate = jnp.concatenate
transpose = jnp.transpose


def rsqrt(x):
    return bind(p.rsqrt_p, x)


def logistic(x):
    return bind(p.logistic_p, x)


def select(pred, on_true, on_false):
    return bind(p.select_n_p, pred, on_false, on_true)


def stop_gradient(x):
    """``x``, with a zero derivative: gradients do not flow through it."""
    return tree.tree_map(lambda leaf: bind(p.stop_gradient_p, leaf), x)


# --- control flow ------------------------------------------------------------------------------

from compiler.control_flow import cond, fori_loop, scan, switch, while_loop  # noqa: E402,F401


def _start_indices(operand, start_indices):
    """int32 start indices, negative ones counted from the end of their dimension (as JAX);
    the primitives then clamp them so the window fits."""
    shape = aval_of(operand).shape
    starts = []
    for s, size in zip(start_indices, shape):
        if is_python_scalar(s) or isinstance(s, np.integer):
            starts.append(np.int32(int(s) + size if int(s) < 0 else int(s)))
            continue
        s = jnp.astype(s, _dt.int_)
        starts.append(jnp.where(jnp.less(s, 0), jnp.add(s, np.int32(size)), s))
    return starts


def dynamic_slice(operand, start_indices, slice_sizes):
    """The window of ``slice_sizes`` at ``start_indices`` (traced starts allowed; negative ones
    count from the end; clamped so the window stays inside the operand)."""
    starts = _start_indices(operand, start_indices)
    return bind(p.dynamic_slice_p, operand, *starts, slice_sizes=tuple(int(s) for s in slice_sizes))


def dynamic_slice_in_dim(operand, start_index, slice_size, axis=0):
    shape = aval_of(operand).shape
    axis = axis % len(shape)
    starts = [0] * len(shape)
    starts[axis] = start_index
    sizes = list(shape)
    sizes[axis] = slice_size
    return dynamic_slice(operand, starts, sizes)


def dynamic_index_in_dim(operand, index, axis=0, keepdims=True):
    out = dynamic_slice_in_dim(operand, index, 1, axis)
    return out if keepdims else jnp.squeeze(out, axis)


def dynamic_update_slice(operand, update, start_indices):
    """``operand`` with ``update`` written at ``start_indices`` (negative ones count from the
    end; clamped to fit)."""
    starts = _start_indices(operand, start_indices)
    return bind(p.dynamic_update_slice_p, operand, update, *starts)


def dynamic_update_slice_in_dim(operand, update, start_index, axis):
    ndim = aval_of(operand).ndim
    axis = axis % ndim
    starts = [0] * ndim
    starts[axis] = start_index
    return dynamic_update_slice(operand, update, starts)


def dynamic_update_index_in_dim(operand, update, index, axis):
    if aval_of(update).ndim == aval_of(operand).ndim - 1:
        update = jnp.expand_dims(update, axis)
    return dynamic_update_slice_in_dim(operand, update, index, axis)
from shardc.lax._ops import *  # noqa: E402,F401,F403  (the rest of jax.lax; see __all__ there)
from shardc.lax._convolution import *  # noqa: E402,F401,F403  (convolutions)
