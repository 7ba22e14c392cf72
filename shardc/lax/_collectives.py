"""``shardc.lax``'s collectives over mesh axes: ``psum``, ``pmean``, ``pmax``, ``pmin``,
``all_gather``, ``psum_scatter``, ``ppermute``, ``all_to_all``, ``pbroadcast``, ``pshuffle``,
``pswapaxes``, ``axis_index``, ``axis_size``, ``pvary``/``pcast``, and ``reshard``.

Collectives take ``axis_name`` as one mesh axis or a tuple of axes; inside a shard_map body
they act over the device groups of SEMANTICS 2.0.
"""
from __future__ import annotations

import numpy as np

from compiler import tree
from compiler.batching import vmap_axis
from compiler.collective_rules import named_axes_size
from compiler.replication import pvary_error_check
from compiler.shard_map import UnknownAxisError, current_shard_context
from compiler.tracing import (ProgramTrace, aval_of, bind, check_jax_leaves, current_trace,
                              is_python_scalar, weakened, weakly_typed)
from ir import collectives as coll
from ir import dtypes as _dt
from ir.sharding import current_mesh
import shardc.lax._groups as _groups
import shardc.numpy as jnp
from shardc.numpy._core import is_key_array
from shardc.sharding import reshard  # noqa: F401  (jax.lax.reshard is jax.sharding.reshard)

__all__ = [
    "axis_size", "psum", "pmean", "pmax", "pmin", "axis_index", "pvary", "pcast", "all_gather",
    "psum_scatter", "ppermute", "all_to_all", "pbroadcast", "pshuffle", "pswapaxes", "reshard",
    "ragged_all_to_all",
]


# --- axis names ------------------------------------------------------------------------------

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
                f"Found an unbound axis name: {a}. To fix this, please call {prim_name} under "
                "`jax.shard_map`.", axis_name=a, bound=False)
        if a not in shard.mesh.axis_names:
            raise UnknownAxisError(
                f"Found an unbound axis name: {a}. To fix this, please call {prim_name} under "
                f"`jax.shard_map`. ({prim_name}: unknown mesh axis '{a}' in "
                f"axis_name={axis_name!r}; the enclosing shard_map's mesh has axes "
                f"{shard.mesh.axis_names}.)")
        if a not in shard.manual:
            # JAX's words first (an axis the body is not manual over is unbound there)
            raise UnknownAxisError(
                f"Found an unbound axis name: {a}. To fix this, please call {prim_name} under "
                f"`jax.shard_map`. ({prim_name}: mesh axis '{a}' in axis_name={axis_name!r} "
                f"is not manual here; the enclosing shard_map is manual over {shard.manual} "
                "(its axis_names). Nest a shard_map over it to communicate along it.)")
    for a in axes:
        if axes.count(a) > 1:
            raise ValueError(f"{prim_name}: axis_name={axis_name!r} names mesh axis '{a}' "
                             "more than once.")
    return axes


def _check_operands(prim_name: str, x):
    """Every leaf of a collective's operand must be a JAX value (an array or a number)."""
    check_jax_leaves(tree.tree_leaves(x), x, lambda path: f"{prim_name}: operand x{path}")


# what combines the members' blocks of each reducing collective, and the dtypes it takes
_COMBINES = {"psum": ("add", "integer, floating, complexfloating"),
             "pmean": ("add", "integer, floating, complexfloating"),
             "psum_scatter": ("add", "integer, floating, complexfloating"),
             "pmax": ("max", "integer, bool, floating, complexfloating"),
             "pmin": ("min", "integer, bool, floating, complexfloating")}


def _check_no_keys(prim_name: str, x) -> None:
    """JAX's TypeError for a reduction of typed PRNG keys: its add (max, min) takes numbers.
    (Moving keys, as all_gather and ppermute do, is fine.)"""
    for leaf in tree.tree_leaves(x, is_leaf=is_key_array):
        if is_key_array(leaf):
            op, accepted = _COMBINES[prim_name]
            raise TypeError(f"{op} does not accept dtype {leaf.dtype} at position 0. Accepted "
                            f"dtypes at position 0 are subtypes of {accepted}.")


def _check_int(prim_name: str, param: str, value) -> int:
    """A static integer parameter (a dimension, a rank): ints only, no floats or strings."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{prim_name}: {param} must be an int, got {value!r} of type "
                        f"{type(value).__name__}")
    return int(value)


def _no_groups(prim_name, axis_index_groups):
    if axis_index_groups is not None:
        raise NotImplementedError(f"{prim_name}: axis_index_groups is not supported by shardc "
                                  "(psum, pmean, pmax, pmin, all_gather, psum_scatter and "
                                  "all_to_all take it)")


def _no_vmap_groups(axes, axis_index_groups, message) -> None:
    """JAX's NotImplementedError for ``axis_index_groups`` over an axis a vmap names (its
    batching rules take no groups): only a shard_map's manual axes are grouped."""
    if axis_index_groups is None:
        return
    shard = current_shard_context()
    manual = set(shard.manual) if shard is not None else set()
    if any(a not in manual for a in axes):
        raise NotImplementedError(message)


_VMAP_REDUCTION_GROUPS = ("axis_index_groups not supported in vmap collectives. Please open a "
                          "feature request!")
_VMAP_GROUPS = "axis_index_groups not supported in vmap"


def axis_size(axis_name) -> int:
    """The number of devices along ``axis_name`` (a product for a tuple of axes)."""
    return named_axes_size(_axes("axis_size", axis_name))


def _reducing(prim, name, x, axis_name, axis_index_groups):
    _check_operands(name, x)
    _check_no_keys(name, x)
    axes = _axes(name, axis_name)
    if not axes:
        # over no axes: the value itself (pmean still divides, by 1), as JAX's
        return tree.tree_map(lambda v: v / 1, x) if prim is coll.pmean_p else x
    if axis_index_groups is not None:
        _no_vmap_groups(axes, axis_index_groups, _VMAP_REDUCTION_GROUPS)
        return _grouped_reducing(name, x, axes, axis_index_groups)

    def one(leaf):
        if is_python_scalar(leaf):
            if prim is coll.psum_p or prim is coll.pmean_p:
                return _constant_sum(prim, leaf, named_axes_size(axes))
            return leaf
        if prim is coll.psum_p and aval_of(leaf).dtype.kind == "b":
            leaf = jnp.astype(leaf, np.int32)       # JAX's: a strongly typed int32 sum
        if prim is coll.psum_p and _state(aval_of(leaf), axes, "jax.lax.psum") == "unreduced":
            # partial sums added: an unreduced value becomes the invariant total
            return _weak_as(leaf, bind(coll.unreduced_psum_p, leaf, mesh_axes=axes))
        return _weak_as(leaf, bind(prim, leaf, mesh_axes=axes))

    return tree.tree_map(one, x)


def _constant_sum(prim, value, size: int):
    """JAX's psum of a Python scalar: the size times it, a Python scalar still (weakly typed);
    a bool counts as an int32 array first (strongly typed). pmean divides that by the size, a
    true division (so a Python int's mean is a float)."""
    if isinstance(value, bool):
        total = jnp.multiply(jnp.astype(value, np.int32), np.int32(size))
    else:
        total = value * size
    return total / size if prim is coll.pmean_p else total


def _weak_as(operand, result):
    """``result`` weakly typed where ``operand`` is: a collective keeps JAX's weak_type."""
    return weakened(result) if weakly_typed(operand) else result


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
        return _weak_as(leaf, _groups.reduce(name, leaf, axes, groups, size))

    return tree.tree_map(one, x)


def psum(x, axis_name, *, axis_index_groups=None):
    """Sum over the devices of each group; every member gets the total.

        blocks over 'i':  [1] [2] [3] [4]   ->   [10] [10] [10] [10]

    ``psum(1, 'i')`` of a Python number is the axis size, computed statically.
    """
    return _reducing(coll.psum_p, "psum", x, axis_name, axis_index_groups)


def pmean(x, axis_name, *, axis_index_groups=None):
    """Mean over the devices of each group.

        blocks over 'i':  [1] [2] [3] [4]   ->   [2.5] [2.5] [2.5] [2.5]
    """
    return _reducing(coll.pmean_p, "pmean", x, axis_name, axis_index_groups)


def pmax(x, axis_name, *, axis_index_groups=None):
    """Maximum over the devices of each group.

        blocks over 'i':  [1] [2] [3] [4]   ->   [4] [4] [4] [4]
    """
    return _reducing(coll.pmax_p, "pmax", x, axis_name, axis_index_groups)


def pmin(x, axis_name, *, axis_index_groups=None):
    """Minimum over the devices of each group.

        blocks over 'i':  [1] [2] [3] [4]   ->   [1] [1] [1] [1]
    """
    return _reducing(coll.pmin_p, "pmin", x, axis_name, axis_index_groups)


def axis_index(axis_name):
    """This device's rank over ``axis_name`` (first listed axis major), an int32 scalar.

        mesh (2,2) ('i','j'):  axis_index('i') -> 0 0 1 1;  axis_index(('j','i')) -> 0 2 1 3
    """
    axes = _axes("axis_index", axis_name)
    return bind(coll.axis_index_p, mesh_axes=axes)


class PermutationIndexError(IndexError, ValueError):
    """A ppermute pair naming a member outside the axis: JAX's IndexError (a ValueError too,
    as this was)."""


def pvary(x, axis_name):
    """Mark ``x`` as varying over ``axis_name`` (identity on values)."""
    _check_operands("pvary", x)
    _check_not_run_outside(axis_name)
    axes = _axes("pvary", axis_name)
    return tree.tree_map(lambda leaf: _weak_as(leaf, bind(coll.pvary_p, leaf, mesh_axes=axes)),
                         x)


def _check_not_run_outside(axis_name) -> None:
    """JAX's ValueError for a cast to varying over axes of the context mesh (``set_mesh``)
    run outside any shard_map: eagerly, or under grad or vmap (its implementation raises it).
    Staged out under jit, or with no such mesh, the axis is unbound instead (``_axes``)."""
    axes = tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)
    mesh = current_mesh()
    if (current_shard_context() is not None or mesh is None
            or not all(vmap_axis(a) is None and a in mesh.axis_names for a in axes)):
        return
    trace = current_trace()
    while trace is not None:
        if isinstance(trace, ProgramTrace) and trace.staged:
            return
        trace = trace.parent
    raise ValueError("pvary should be called under jax.shard_map.")


def _state(aval, axes, name: str) -> str:
    """Whether ``axes`` are ones the value is varying, unreduced, reduced or invarying over
    (JAX's ``_get_from``): they must all be one of these."""
    found = set()
    for a in axes:
        found.add("varying" if a in aval.vma else "unreduced" if a in aval.unreduced
                  else "reduced" if a in aval.reduced else "invarying")
    if found <= {"varying", "invarying"} and len(found) > 1:
        # (shardc keeps lifting such an operand, as its collectives always have; JAX 0.10.2
        # refuses it)
        return "varying"
    if len(found) > 1:
        raise ValueError(f"{name} can only accept axis_name which corresponds to one of "
                         "varying, unreduced, reduced or invarying state of the input. Got "
                         f"input type: {aval.str_long(short=True)}, axes: {tuple(axes)} and "
                         f"input state: {found}")
    return found.pop()


# what pcast binds, by (what the value is over the axes, what it is asked to become)
_PCASTS = {
    ("invarying", "varying"): coll.pvary_p,
    ("invarying", "reduced"): coll.preduced_p,
    ("varying", "unreduced"): coll.vary_unreduced_cast_p,
    ("reduced", "varying"): coll.reduced_vary_cast_p,
}


def pcast(x, axis_name, *, to):
    """``pcast(x, axis_name, to=...)``: a type cast, no communication (JAX's). ``'varying'``
    from invariant (``pvary``) or from reduced; ``'reduced'`` from invariant; ``'unreduced'``
    from varying (each device's value becomes its term of a sum)."""
    if isinstance(axis_name, (set, frozenset)):
        raise TypeError(f"axis_name={axis_name!r} must be a tuple or a str. Got {axis_name}")
    if to not in ("varying", "unreduced", "reduced"):
        raise ValueError("Got unexpected `to` value. Allowed `to` values are: "
                         "{'unreduced', 'varying', 'reduced'}")
    _check_operands("pcast", x)
    _check_not_run_outside(axis_name)
    # (JAX's errors name the primitive bound: pvary for 'varying')
    axes = _axes("pvary" if to == "varying" else "pcast", axis_name)
    shard = current_shard_context()
    if not axes or (shard is not None and not shard.check_vma):
        # with the check off the body's values carry no types: nothing to cast (JAX's)
        return x

    def one(leaf):
        aval = aval_of(leaf)
        state = _state(aval, axes, "jax.lax.pcast")
        prim = _PCASTS.get((state, to))
        if to == "varying" and state == "varying":
            prim = coll.pvary_p           # (pvary's own error names what already varies)
        if prim is None:
            raise ValueError(f"Unsupported pcast from={_state(aval, axes, 'jax.lax.pcast')}, "
                             f"to={to!r}")
        if prim is coll.pvary_p and shard is not None:
            pvary_error_check(aval.vma, axes, aval, shard.mesh.axis_names, name="pcast")
        return _weak_as(leaf, bind(prim, leaf, mesh_axes=axes))

    return tree.tree_map(one, x)


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
    if not axes:
        return x                      # over no axes: the value itself, as JAX's
    if to not in ("varying", "invarying", "reduced"):
        raise ValueError("Got unexpected `to` value for `jax.lax.all_gather`. Allowed `to` "
                         "values are: {'varying', 'reduced', 'invarying'}")
    size = _group_size(axes)
    groups = None
    if axis_index_groups is not None:
        _no_vmap_groups(axes, axis_index_groups, _VMAP_GROUPS)
        if to != "varying":
            raise NotImplementedError("all_gather: axis_index_groups with to='invarying' is not "
                                      "supported (as in JAX)")
        groups = _groups.check_groups("all_gather", axis_index_groups, size, equal_sizes=True)

    def one(leaf):
        leaf = jnp.asarray(leaf) if is_python_scalar(leaf) else leaf
        rank = aval_of(leaf).ndim
        dim = _dimension("all_gather", "axis", axis, rank if tiled else rank + 1, rank)
        if groups is not None:
            return _weak_as(leaf, _groups.all_gather(leaf, axes, groups, size, dim, bool(tiled)))
        if to == "reduced":
            # gathered, and known equal on every member (its transpose scatters partial sums)
            return _weak_as(leaf, bind(coll.all_gather_reduced_p, leaf, mesh_axes=axes,
                                       gather_axis=dim, tiled=bool(tiled), axis_size=size))
        extra = {"to": "invarying"} if to == "invarying" else {}
        return _weak_as(leaf, bind(coll.all_gather_p, leaf, mesh_axes=axes, gather_axis=dim,
                                   tiled=bool(tiled), axis_size=size, **extra))

    return tree.tree_map(one, x)


def psum_scatter(x, axis_name, *, scatter_dimension=0, tiled=False, axis_index_groups=None):
    """Sum over the group, then member r keeps chunk r of ``scatter_dimension``.

        blocks over 'i': [3 1 4 1] [5 9 2 6] [5 3 5 8] [9 7 1 2]   tiled ->  [22] [20] [12] [17]
    """
    _check_operands("psum_scatter", x)
    _check_no_keys("psum_scatter", x)
    axes = _axes("psum_scatter", axis_name)
    if not axes:
        return x
    _no_vmap_groups(axes, axis_index_groups, _VMAP_GROUPS)
    size = _group_size(axes)
    groups = None if axis_index_groups is None else _groups.check_groups(
        "psum_scatter", axis_index_groups, size, equal_sizes=True)

    def one(leaf):
        if _dt.is_bool(aval_of(leaf).dtype):
            raise TypeError("psum_scatter: add does not accept dtype bool at position 0. "
                            "Accepted dtypes at position 0 are subtypes of integer, floating, "
                            "complexfloating.")
        shape = aval_of(leaf).shape
        dim = _dimension("psum_scatter", "scatter_dimension", scatter_dimension, len(shape))
        n = shape[dim]
        shards = size if groups is None else len(groups[0])
        if tiled and n % shards:
            raise ValueError(f"tiled reduce_scatter operand scatter dimension size {n} must be "
                             f"divisible by shard_count {shards}")
        if not tiled and n != shards:
            raise ValueError(f"reduce_scatter operand scatter dimension size {n} must match "
                             f"shard count {shards}")
        if groups is not None:
            return _groups.psum_scatter(leaf, axes, groups, size, dim, bool(tiled))
        if _state(aval_of(leaf), axes, "jax.lax.psum_scatter") == "unreduced":
            # partial sums added, each member keeping its chunk
            return bind(coll.unreduced_psum_scatter_p, leaf, mesh_axes=axes, scatter_axis=dim,
                        tiled=bool(tiled), axis_size=size)
        return bind(coll.psum_scatter_p, leaf, mesh_axes=axes, scatter_axis=dim,
                    tiled=bool(tiled), axis_size=size)

    return tree.tree_map(one, x)


def _check_perm(perm, axis_name, size) -> tuple:
    if isinstance(perm, np.ndarray) and perm.ndim == 2:      # rows of pairs, as JAX takes
        perm = perm.tolist()
    elif not isinstance(perm, (list, tuple, str, dict)) and hasattr(perm, "__iter__"):
        perm = list(perm)                                   # a generator of pairs
    if not isinstance(perm, (list, tuple)):
        raise TypeError("ppermute: perm must be a list or a tuple of (source, destination) "
                        f"pairs. Got perm of type {type(perm)}")
    pairs = []
    for entry in perm:
        if isinstance(entry, np.ndarray) and entry.ndim == 1:
            entry = tuple(entry.tolist())
        if not isinstance(entry, (list, tuple)):
            raise TypeError("ppermute: perm must be a list or a tuple of (source, destination) "
                            f"pairs. Got the entry {entry!r}")
        if len(entry) != 2:
            # a ValueError, as JAX's (it unpacks each entry into two)
            raise ValueError("ppermute: perm must be a list or a tuple of (source, destination) "
                             f"pairs. Got the entry {entry!r} of length {len(entry)}")
        pairs.append((_check_int("ppermute", "each perm source", entry[0]),
                      _check_int("ppermute", "each perm destination", entry[1])))
    given = pairs = tuple(pairs)
    for pair in given:
        if not all(-size <= k < size for k in pair):
            raise PermutationIndexError(f"ppermute: perm entry {pair} is out of range for "
                                        f"axis_name {axis_name!r} of size {size}")
    if any(s < 0 or d < 0 for s, d in given):
        # a negative rank counts from the end, as a Python index does (as JAX's)
        pairs = tuple((s % size, d % size) for s, d in given)
    sources = [s for s, _ in pairs]
    dests = [d for _, d in pairs]
    if len(set(sources)) != len(sources) or len(set(dests)) != len(dests):
        raise ValueError(f"ppermute sources and destinations must be unique, got {given}.")
    return pairs


def ppermute(x, axis_name, perm):
    """Send each member's block to the member ``perm`` pairs it with; members that receive
    nothing get zeros. Over several mesh axes, ranks count the members in mesh order, however
    ``axis_name`` lists the axes, as JAX's (it sorts each group's device ids; ``axis_index``
    and the other collectives follow the order listed).

        perm [(0,1),(1,2),(2,3),(3,0)]:  [a] [b] [c] [d]  ->  [d] [a] [b] [c]
    """
    _check_operands("ppermute", x)
    axes = _in_mesh_order(_axes("ppermute", axis_name))
    pairs = _check_perm(perm, axis_name, _group_size(axes))
    if not axes:
        # each device alone: it keeps its block where perm sends rank 0 to itself, else
        # receives nothing (zeros), as JAX's
        return tree.tree_map(lambda leaf: leaf if (0, 0) in pairs else jnp.zeros_like(leaf), x)
    return tree.tree_map(
        lambda leaf: _weak_as(leaf, bind(coll.ppermute_p, leaf, mesh_axes=axes, perm=pairs)), x)


def _in_mesh_order(axes: tuple) -> tuple:
    """Mesh axes in the enclosing shard_map's mesh order (vmap axes among them: as given)."""
    shard = current_shard_context()
    if shard is None or not all(a in shard.mesh.axis_names for a in axes):
        return axes
    return tuple(sorted(axes, key=shard.mesh.axis_names.index))


def all_to_all(x, axis_name, split_axis, concat_axis, *, tiled=False, axis_index_groups=None):
    """Member d gets chunk d (along ``split_axis``) of every member's block, joined along
    ``concat_axis`` in rank order.

        tiled, split 0, concat 0:  [a0 a1] [b0 b1]  ->  [a0 b0] [a1 b1]
    """
    _check_operands("all_to_all", x)
    axes = _axes("all_to_all", axis_name)
    size = _group_size(axes)
    groups = None if axis_index_groups is None else _groups.check_groups(
        "all_to_all", axis_index_groups, size, equal_sizes=True)
    shards = size if groups is None else len(groups[0])

    def one(leaf):
        shape = aval_of(leaf).shape
        split = _dimension("all_to_all", "split_axis", split_axis, len(shape))
        concat = _dimension("all_to_all", "concat_axis", concat_axis, len(shape))
        n = shape[split]
        if tiled and n % shards:
            raise ValueError(f"The size of all_to_all split_axis ({n}) has to be divisible by "
                             f"the size of the named axis {axis_name} ({shards})")
        if not tiled and n != shards:
            raise ValueError("all_to_all requires the size of the mapped axis axis_name to "
                             f"equal x.shape[split_axis], but they are {shards} and {n} "
                             "respectively.")
        if groups is not None:
            return _groups.all_to_all(leaf, axes, groups, size, split, concat, bool(tiled))
        return bind(coll.all_to_all_p, leaf, mesh_axes=axes, split_axis=split,
                    concat_axis=concat, tiled=bool(tiled), axis_size=size)

    return tree.tree_map(one, x)


def ragged_all_to_all(operand, output, input_offsets, send_sizes, output_offsets, recv_sizes,
                      *, axis_name, axis_index_groups=None):
    """The ragged all_to_all: slice i of each member's ``operand`` (its leading-axis rows
    ``input_offsets[i]`` onwards, ``send_sizes[i]`` of them) goes to member ``i // (K / N)``
    (K offsets, N members), which writes it into its ``output`` at ``output_offsets[i]`` (the
    sender's offset); ``recv_sizes`` are the sizes each member receives. The result is
    ``output`` with the received rows written in.

        N=2, operand [1 2 2] / [3 4 0], send_sizes [1 2] / [1 1], input_offsets [0 1] / [0 1],
        output_offsets [0 0] / [1 2], output zeros(4)  ->  [1 3 0 0] / [2 2 4 0]
    """
    operands = (operand, output, input_offsets, send_sizes, output_offsets, recv_sizes)
    for name, value in zip(("operand", "output", "input_offsets", "send_sizes",
                            "output_offsets", "recv_sizes"), operands):
        _check_operands(f"ragged_all_to_all: {name}", value)
    _no_groups("ragged_all_to_all", axis_index_groups)
    axes = _axes("ragged_all_to_all", axis_name)
    problem = coll.ragged_offsets_problem([aval_of(v) for v in operands[2:]])
    if problem:
        raise ValueError(problem)
    return bind(coll.ragged_all_to_all_p, *operands, mesh_axes=axes,
                axis_size=_group_size(axes))


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
        lambda leaf: bind(coll.pbroadcast_p, leaf, mesh_axes=axes, source=int(source)), x)


# --- collectives built from others -----------------------------------------------------------

def pshuffle(x, axis_name, perm):
    """Device ``i`` along ``axis_name`` gets the block of device ``perm[i]`` (``perm`` a
    permutation of ``range(axis_size)``); a ``ppermute`` with pairs ``(perm[i], i)``.

        before: [a0 | a1 | a2]   perm=(2, 0, 1)   after: [a2 | a0 | a1]
    """
    perm = [int(i) for i in perm]
    size = axis_size(axis_name)
    if sorted(perm) != list(range(size)):
        raise ValueError(f"`perm` does not represent a permutation: {perm} (pshuffle: perm "
                         f"must be a permutation of range({size}), the size of axis "
                         f"{axis_name!r})")
    return ppermute(x, axis_name, [(src, dst) for dst, src in enumerate(perm)])


def pswapaxes(x, axis_name, axis, *, axis_index_groups=None):
    """Swap the mesh axis ``axis_name`` with array dimension ``axis`` (whose size must equal
    the mesh axis's): an ``all_to_all`` splitting and concatenating along ``axis``.

        before: device i holds x_i[j]       after: device j holds x_i[j] at position i
    """
    return all_to_all(x, axis_name, axis, axis, axis_index_groups=axis_index_groups)


# --- layouts ---------------------------------------------------------------------------------
