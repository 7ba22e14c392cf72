"""Collectives, each declared once.

Two levels, distinct primitives. **Front-end collectives** are what a shard_map body binds,
under JAX's names (``psum``, ``all_gather``, ``axis_index``, ``pvary`` ...): they name mesh
axes and carry a replication rule. **Communication nodes** are what lowering turns them into,
in the words of MLIR's shard dialect (``all_reduce``, ``reduce_scatter``, ``all_gather``,
``all_to_all``, ``ppermute``, ``all_slice``, ``broadcast``, and ``process_index``, a device's
rank): the same for every device in a mesh-level program, each given its concrete
``device_groups`` in a per-device program. Three words are shared by both levels; the text
parser resolves them by the level of the program it reads (``ir.primitives.lookup``)::

    body (front end)      psum[mesh_axes=('y',)] g
    mesh-level program    all_reduce[mesh_axes=('y',) reduction='sum'] f
    device 3's program    all_reduce[device_groups=((0, 1), (2, 3), ...) ...] f

A ``Collective`` record holds everything the IR knows of one: its primitive, level,
parameters, shape rule, replication rule and lowering (front end), or its traffic model,
parameter check and whether it has device groups (nodes). The verifier, the specialiser, the
ledger, the backends and MPI read these records (``prim.collective``); the rule tables of
other layers hold what only they can (autodiff and vmap in ``compiler.collective_rules``,
implementations in ``runtime.collectives``).

Adding a collective: declare it here (a front-end record, and a node record unless it lowers
to an existing node), give its JVP, transpose and vmap rules in
``compiler/collective_rules.py``, a new node's implementations in ``runtime/collectives.py``,
and its user-facing function in ``shardc``'s lax. Tests hold every record to every rule.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Optional

import numpy as np

from ir import dtypes
from ir import unreduced
from ir.comm import Traffic, ring_all_reduce, chunk_bytes, symmetric
from ir.core import Aval
from ir.params import Signature, signatures
from ir.primitives import Primitive, primitive
from ir.shapes import ShapeError, shape_rules

FRONT = "front"           # bound by a body; names mesh axes; lowered away
NODE = "node"             # a communication node of mesh-level and per-device programs

REDUCTIONS = ("sum", "max", "min", "mean")


@dataclasses.dataclass(frozen=True, eq=False)
class Collective:
    """One collective. ``level`` is FRONT or NODE. ``shape(*avals, **params)`` is its shape
    rule; ``vma(in_vmas, **params) -> (required operand vmas, result vma)`` its replication
    rule (front end); ``lowering(params) -> (node, node params)``, or None for a collective that
    only changes a type (front end); ``traffic(eqn, group, rank) -> Traffic`` what one member
    moves, ``check(eqn, group_size) -> why it is invalid or ''`` the node's own parameter
    check (nodes); ``grouped``: the node gets device groups when specialised (``all_slice``
    moves nothing but is grouped; ``process_index`` becomes a constant)."""
    prim: Primitive
    level: str
    signature: Signature
    shape: Callable
    vma: Optional[Callable] = None
    reduction: Optional[str] = None
    lowering: Optional[Callable] = None
    traffic: Optional[Callable] = None
    check: Optional[Callable] = None
    grouped: bool = True
    communicates: bool = True

    @property
    def name(self) -> str:
        return self.prim.name


FRONT_END: list = []      # the front-end records, in declaration order
NODES: list = []          # the node records


def _declare(name: str, level: str, arity: int, required, optional=(), **fields) -> Primitive:
    prim = primitive(name, kind="collective" if level == FRONT else "lowered")
    record = Collective(prim, level, Signature(arity, frozenset(required), frozenset(optional)),
                        **fields)
    prim.collective = record
    (FRONT_END if level == FRONT else NODES).append(record)
    shape_rules[prim] = record.shape
    signatures[prim] = record.signature
    return prim


def _aval(shape, dtype) -> list:
    return [Aval(tuple(shape), np.dtype(dtype))]


# --- shape rules --------------------------------------------------------------------------------

def _same_shape(x: Aval, **params) -> list:
    return _aval(x.shape, x.dtype)


def reduced_dtype(dtype, reduction: str):
    """The dtype a reduction computes in (SEMANTICS 2), as JAX's: a sum of booleans counts
    them (int32, with x64 on too); a mean of integers or booleans is in the inexact dtype
    JAX gives them (float32 up to 32 bits); else the operand's."""
    if reduction == "mean" and not dtypes.is_inexact(dtype):
        return dtypes.to_inexact(dtype)
    if reduction == "sum" and dtypes.is_bool(dtype):
        return dtypes.int32
    return dtype


def _reduced_type(reduction: str, x: Aval, **params) -> list:
    return _aval(x.shape, reduced_dtype(x.dtype, reduction))


def _all_reduce_shape(x: Aval, *, reduction="sum", **params) -> list:
    return _reduced_type(reduction, x)


def _rank(**params) -> list:
    return _aval((), dtypes.int32)          # int32 with x64 too, as JAX's axis_index


def _all_gather_shape(x: Aval, *, gather_axis, tiled, axis_size, **params) -> list:
    shape = list(x.shape)
    if tiled:
        shape[gather_axis] *= axis_size
    else:
        shape.insert(gather_axis, axis_size)
    return _aval(shape, x.dtype)


def _all_slice_shape(x: Aval, *, slice_axis, axis_size, **params) -> list:
    if x.shape[slice_axis] % axis_size:
        raise ShapeError(f"all_slice: dimension {slice_axis} of {x.str_short()} is not "
                         f"divisible by {axis_size}")
    shape = list(x.shape)
    shape[slice_axis] //= axis_size
    return _aval(shape, x.dtype)


def _reduce_scatter_shape(name, x: Aval, *, scatter_axis, tiled, axis_size, **params) -> list:
    if dtypes.is_bool(x.dtype):
        # JAX's sum (add) rejects booleans here; only psum counts them
        raise ShapeError(f"{name}: add does not accept dtype bool at position 0. Accepted "
                         "dtypes at position 0 are subtypes of integer, floating, complexfloating.")
    n = x.shape[scatter_axis]
    if tiled and n % axis_size:
        raise ShapeError(f"tiled reduce_scatter operand scatter dimension size {n} must be "
                         f"divisible by shard_count {axis_size}")
    if not tiled and n != axis_size:
        raise ShapeError(f"reduce_scatter operand scatter dimension size {n} must match shard "
                         f"count {axis_size}")
    shape = list(x.shape)
    if tiled:
        shape[scatter_axis] //= axis_size
    else:
        del shape[scatter_axis]
    return _aval(shape, x.dtype)


def _all_to_all_shape(x: Aval, *, split_axis, concat_axis, tiled, axis_size, **params) -> list:
    n = x.shape[split_axis]
    shape = list(x.shape)
    if tiled:
        if n % axis_size:
            raise ShapeError(f"all_to_all: split_axis {split_axis} of size {n} is not divisible "
                             f"by {axis_size}")
        shape[split_axis] //= axis_size
        shape[concat_axis] *= axis_size
    else:
        if n != axis_size:
            raise ShapeError(f"all_to_all: split_axis {split_axis} of size {n} must equal "
                             f"{axis_size}")
        del shape[split_axis]
        shape.insert(concat_axis, axis_size)
    return _aval(shape, x.dtype)


def ragged_offsets_problem(offsets_and_sizes) -> str | None:
    """JAX's message for offsets or sizes (avals, in argument order) that are not integer
    vectors of positive length; None when they are."""
    names = ("input_offsets", "send_sizes", "output_offsets", "recv_sizes")
    for name, aval in zip(names, offsets_and_sizes):
        if not dtypes.is_int(aval.dtype):
            return f"ragged_all_to_all {name} must be integer type."
    for name, aval in zip(names, offsets_and_sizes):
        if len(aval.shape) != 1 or aval.shape[0] < 1:
            return (f"ragged_all_to_all {name} must be rank 1 with positive dimension size, "
                    f"but got shape {aval.shape}")
    return None


def _ragged_all_to_all_shape(operand: Aval, output: Aval, *offsets_and_sizes: Aval, axis_size,
                             **params) -> list:
    """``output``'s type; the slices move along the leading axis (SEMANTICS 2.5)."""
    problem = ragged_offsets_problem(offsets_and_sizes)
    if problem:
        raise ShapeError(problem)
    lengths = {aval.shape[0] for aval in offsets_and_sizes}
    if len(lengths) != 1 or lengths.pop() % axis_size:
        raise ShapeError(f"ragged_all_to_all: the offsets and sizes must have one length, a "
                         f"multiple of the axis size {axis_size}; got "
                         f"{[a.shape[0] for a in offsets_and_sizes]}")
    if (operand.dtype != output.dtype or operand.ndim != output.ndim or operand.ndim == 0
            or operand.shape[1:] != output.shape[1:]):
        raise ShapeError(f"ragged_all_to_all: the operand {operand.str_short()} and the output "
                         f"{output.str_short()} must differ in their leading dimension only")
    return _aval(output.shape, output.dtype)


# --- replication rules (front end): what operands are lifted to, what the result varies over --

def _reducing_vma(in_vmas, *, mesh_axes, **params):
    (vma,) = in_vmas
    lifted = vma | frozenset(mesh_axes)
    return [lifted], lifted - frozenset(mesh_axes)


def _keeping_vma(in_vmas, *, mesh_axes, **params):
    (vma,) = in_vmas
    lifted = vma | frozenset(mesh_axes)
    return [lifted], lifted


def _all_gather_vma(in_vmas, *, mesh_axes, **params):
    """all_gather is typed varying (it transposes to psum_scatter) unless to='invarying'."""
    required, out = _keeping_vma(in_vmas, mesh_axes=mesh_axes)
    if params.get("to", "varying") == "invarying":
        out = out - frozenset(mesh_axes)
    return required, out


def _every_operand_vma(in_vmas, *, mesh_axes, **params):
    """Every operand lifted to vary over the axes, the result too (a member's slices come
    from every member)."""
    lifted = frozenset().union(*in_vmas) | frozenset(mesh_axes)
    return [lifted] * len(in_vmas), lifted


def _pvary_vma(in_vmas, *, mesh_axes):
    (vma,) = in_vmas
    return [vma], vma | frozenset(mesh_axes)


def _axis_index_vma(in_vmas, *, mesh_axes):
    return [], frozenset(mesh_axes)


# --- traffic (nodes): what one member moves; see ir.comm for the model ------------------------

def _all_reduce_traffic(eqn, group, rank) -> Traffic:
    return ring_all_reduce(chunk_bytes(eqn.invars[0].aval, len(group)), rank)


def _all_gather_traffic(eqn, group, rank) -> Traffic:
    return symmetric(len(group) - 1, eqn.invars[0].aval.nbytes)


def _chunked_traffic(eqn, group, rank) -> Traffic:
    n = len(group)
    return symmetric(n - 1, eqn.invars[0].aval.nbytes // n)


def _broadcast_traffic(eqn, group, rank) -> Traffic:
    """The root sends its block to every other member (a tree or a ring moves no less)."""
    n, block = len(group), eqn.invars[0].aval.nbytes
    if rank == eqn.params["root"]:
        return Traffic(n - 1, (n - 1) * block, 0, 0)
    return Traffic(0, 0, 1, block)


def _ppermute_traffic(eqn, group, rank) -> Traffic:
    block = eqn.invars[0].aval.nbytes
    moves = [(s, d) for s, d in eqn.params["perm"] if s != d and block > 0]
    sends = any(s == rank for s, _ in moves)
    receives = any(d == rank for _, d in moves)
    return Traffic(int(sends), block * sends, int(receives), block * receives)


def _ragged_traffic(eqn, group, rank) -> Traffic:
    """At most the whole operand leaves, and at most the whole output arrives (the sizes are
    values, known only when the node runs)."""
    sent, received = eqn.invars[0].aval.nbytes, eqn.invars[1].aval.nbytes
    n = len(group)
    return Traffic(n - 1, sent, n - 1, received)


def _no_traffic(eqn, group, rank) -> Traffic:
    return Traffic()


# --- parameter checks (nodes): what a node read from text must hold ---------------------------

def _check_reduction(eqn, size: int) -> str:
    reduction = eqn.params["reduction"]
    if reduction not in REDUCTIONS:
        return (f"unknown reduction={reduction!r}; expected one of "
                + ", ".join(repr(r) for r in REDUCTIONS))
    return ""


def _check_perm(eqn, size: int) -> str:
    perm = eqn.params["perm"]
    if not isinstance(perm, tuple) or not all(
            isinstance(pair, tuple) and len(pair) == 2 and all(type(r) is int for r in pair)
            for pair in perm):
        return f"perm={perm!r} is not a tuple of (source, destination) pairs"
    for pair in perm:
        if not all(0 <= r < size for r in pair):
            return f"perm pair {pair} is out of range for a group of {size}"
    for side, name in ((0, "source"), (1, "destination")):
        ranks = [pair[side] for pair in perm]
        if len(set(ranks)) != len(ranks):
            return f"perm names a {name} twice: {perm!r}"
    return ""


def _check_root(eqn, size: int) -> str:
    root = eqn.params["root"]
    if type(root) is not int or not 0 <= root < size:
        return f"root={root!r} is out of range for a group of {size}"
    return ""


# --- the nodes -----------------------------------------------------------------------------------

_GROUPS = ("device_groups",)

all_reduce_node = _declare(
    "all_reduce", NODE, 1, ["mesh_axes", "reduction"], _GROUPS, shape=_all_reduce_shape,
    traffic=_all_reduce_traffic, check=_check_reduction)
reduce_scatter_node = _declare(
    "reduce_scatter", NODE, 1, ["mesh_axes", "scatter_axis", "tiled", "axis_size", "reduction"],
    _GROUPS, shape=functools.partial(_reduce_scatter_shape, "reduce_scatter"),
    traffic=_chunked_traffic, check=_check_reduction)
all_gather_node = _declare(
    "all_gather", NODE, 1, ["mesh_axes", "gather_axis", "tiled", "axis_size"], _GROUPS + ("to",),
    shape=_all_gather_shape, traffic=_all_gather_traffic)
all_to_all_node = _declare(
    "all_to_all", NODE, 1, ["mesh_axes", "split_axis", "concat_axis", "tiled", "axis_size"],
    _GROUPS, shape=_all_to_all_shape, traffic=_chunked_traffic)
ppermute_node = _declare(
    "ppermute", NODE, 1, ["mesh_axes", "perm"], _GROUPS, shape=_same_shape,
    traffic=_ppermute_traffic, check=_check_perm)
# each member keeps its own chunk: a node of the mesh's groups that moves nothing
all_slice_node = _declare(
    "all_slice", NODE, 1, ["mesh_axes", "slice_axis", "axis_size"], _GROUPS,
    shape=_all_slice_shape, traffic=_no_traffic, communicates=False)
broadcast_node = _declare(
    "broadcast", NODE, 1, ["mesh_axes", "root"], _GROUPS, shape=_same_shape,
    traffic=_broadcast_traffic, check=_check_root)
# slices of each member's leading axis to every member, of sizes known only at run time
ragged_all_to_all_node = _declare(
    "ragged_all_to_all", NODE, 6, ["mesh_axes", "axis_size"], _GROUPS,
    shape=_ragged_all_to_all_shape, traffic=_ragged_traffic)
# the mesh-level program's only device-dependent value: this device's rank over mesh_axes (a
# constant once the program is specialised to one device)
process_index_node = _declare(
    "process_index", NODE, 0, ["mesh_axes"], shape=_rank, grouped=False, communicates=False)


# --- the front end -------------------------------------------------------------------------------

def _to(node, **fixed):
    """The lowering to ``node`` with the collective's own parameters (and ``fixed`` ones)."""
    return lambda params: (node, dict(params, **fixed))


def _reducing(name: str, reduction: str) -> Primitive:
    return _declare(name, FRONT, 1, ["mesh_axes"], shape=functools.partial(_reduced_type,
                                                                           reduction),
                    vma=_reducing_vma, reduction=reduction,
                    lowering=_to(all_reduce_node, reduction=reduction))


psum_p = _reducing("psum", "sum")
pmax_p = _reducing("pmax", "max")
pmin_p = _reducing("pmin", "min")
pmean_p = _reducing("pmean", "mean")
psum_scatter_p = _declare(
    "psum_scatter", FRONT, 1, ["mesh_axes", "scatter_axis", "tiled", "axis_size"],
    shape=functools.partial(_reduce_scatter_shape, "psum_scatter"), vma=_keeping_vma,
    reduction="sum", lowering=_to(reduce_scatter_node, reduction="sum"))
all_gather_p = _declare(
    "all_gather", FRONT, 1, ["mesh_axes", "gather_axis", "tiled", "axis_size"], ["to"],
    shape=_all_gather_shape, vma=_all_gather_vma, lowering=_to(all_gather_node))
ppermute_p = _declare(
    "ppermute", FRONT, 1, ["mesh_axes", "perm"], shape=_same_shape, vma=_keeping_vma,
    lowering=_to(ppermute_node))
all_to_all_p = _declare(
    "all_to_all", FRONT, 1, ["mesh_axes", "split_axis", "concat_axis", "tiled", "axis_size"],
    shape=_all_to_all_shape, vma=_keeping_vma, lowering=_to(all_to_all_node))
pbroadcast_p = _declare(
    "pbroadcast", FRONT, 1, ["mesh_axes", "source"], shape=_same_shape, vma=_keeping_vma,
    lowering=lambda params: (broadcast_node, dict(mesh_axes=params["mesh_axes"],
                                                  root=params["source"])))
axis_index_p = _declare(
    "axis_index", FRONT, 0, ["mesh_axes"], shape=_rank, vma=_axis_index_vma,
    lowering=_to(process_index_node))
ragged_all_to_all_p = _declare(
    "ragged_all_to_all", FRONT, 6, ["mesh_axes", "axis_size"],
    shape=_ragged_all_to_all_shape, vma=_every_operand_vma,
    lowering=_to(ragged_all_to_all_node))
# a type change only: nothing to lower
pvary_p = _declare("pvary", FRONT, 1, ["mesh_axes"], shape=_same_shape, vma=_pvary_vma)


# --- unreduced and reduced values (JAX 0.10's): partial sums and known-equal copies -----------
# A value unreduced over an axis varies over it as data (each device holds a term of the sum)
# but not in its type; one reduced over an axis is the same on every device. The casts between
# them change types only; the others move what their varying counterparts move.

def _casting_vma(adds: bool, in_vmas, *, mesh_axes, **params):
    """A cast making the value varying over ``mesh_axes`` (``adds``), or no longer."""
    (vma,) = in_vmas
    axes = frozenset(mesh_axes)
    return [vma], (vma | axes) if adds else (vma - axes)


def _unchanged_vma(in_vmas, *, mesh_axes, **params):
    (vma,) = in_vmas
    return [vma], vma


# varying -> unreduced (each device's value becomes its term of a sum), its transpose
# reduced -> varying, and invariant -> reduced: type changes, nothing to lower
# (named as JAX 0.10.2 names them in programs, the two casts with their "_p")
vary_unreduced_cast_p = _declare("vary_unreduced_cast_p", FRONT, 1, ["mesh_axes"],
                                 shape=_same_shape, vma=functools.partial(_casting_vma, False))
reduced_vary_cast_p = _declare("reduced_vary_cast_p", FRONT, 1, ["mesh_axes"], shape=_same_shape,
                               vma=functools.partial(_casting_vma, True))
preduced_p = _declare("preduced", FRONT, 1, ["mesh_axes"], shape=_same_shape,
                      vma=_unchanged_vma)
# unreduced -> invariant: the terms added (psum's all_reduce); its transpose is preduced
unreduced_psum_p = _declare(
    "unreduced_psum", FRONT, 1, ["mesh_axes"],
    shape=functools.partial(_reduced_type, "sum"), vma=_unchanged_vma, reduction="sum",
    lowering=_to(all_reduce_node, reduction="sum"))
# unreduced -> varying: the terms added, each device keeping its chunk (psum_scatter's
# reduce_scatter); its transpose is all_gather_reduced
unreduced_psum_scatter_p = _declare(
    "unreduced_reduce_scatter", FRONT, 1, ["mesh_axes", "scatter_axis", "tiled", "axis_size"],
    shape=functools.partial(_reduce_scatter_shape, "psum_scatter"),
    vma=functools.partial(_casting_vma, True), reduction="sum",
    lowering=_to(reduce_scatter_node, reduction="sum"))
# varying -> reduced: the chunks gathered, the result known equal everywhere (all_gather)
all_gather_reduced_p = _declare(
    "all_gather_reduced", FRONT, 1, ["mesh_axes", "gather_axis", "tiled", "axis_size"],
    shape=_all_gather_shape, vma=functools.partial(_casting_vma, False),
    lowering=_to(all_gather_node, to="invarying"))
UNREDUCED_COLLECTIVES = (vary_unreduced_cast_p, reduced_vary_cast_p, preduced_p,
                         unreduced_psum_p, unreduced_psum_scatter_p, all_gather_reduced_p)

REDUCING = tuple(c.prim for c in FRONT_END if c.reduction is not None
                 and c.prim not in (psum_scatter_p, unreduced_psum_p, unreduced_psum_scatter_p))


def is_node(prim) -> bool:
    """A communication node (or process_index) of lowered programs."""
    return prim.kind == "lowered"


def is_front_end(prim) -> bool:
    """A front-end collective (what a body binds; lowering replaces every one)."""
    return prim.kind == "collective"


def grouped(prim) -> bool:
    """A node that gets device groups when a program is specialised to one device."""
    record = prim.collective
    return record is not None and record.level == NODE and record.grouped


# --- unreduced and reduced operands: JAX 0.10.2's rules ------------------------------------------

def _state_error(name: str, x: Aval, axes) -> None:
    """JAX's check_unreduced_args: a collective over axes its operand is unreduced or reduced
    over (other than those that exist for it) is an error."""
    for held, which in ((x.unreduced, "unreduced"), (x.reduced, "reduced")):
        if held & set(axes):
            raise ValueError(f"{name} cannot accept args which are {which}. Got "
                             f"{x.str_long(short=True)} and axes={set(axes)}")


def _linear_ur(name):
    """A collective linear in its operand, over other axes than those it is unreduced or
    reduced over: they stay so (a sum of partial sums is one; so is a gathered one)."""
    def rule(x, *, mesh_axes, **params):
        _state_error(name, x, mesh_axes)
        return x.unreduced, x.reduced
    return rule


for _p in (psum_p, pmean_p, psum_scatter_p, all_gather_p, ppermute_p, all_to_all_p,
           pbroadcast_p, pvary_p):
    unreduced.ur_rules[_p] = _linear_ur(_p.name)


def _vary_unreduced_cast_ur(x, *, mesh_axes):
    name = "vary_unreduced_cast"
    _state_error(name, x, mesh_axes)
    if not x.vma:
        raise ValueError(f"{name} only accepts inputs that are varying. Got "
                         f"{x.str_long(short=True)}")
    if not x.vma & set(mesh_axes):
        raise ValueError(f"{name} is a Varying->Unreduced collective. This means that the axis "
                         f"names mentioned in `axes` passed to `{name}` must be present in "
                         f"`jax.typeof(x).mat.varying`. Got axes={tuple(mesh_axes)} and "
                         f"jax.typeof(x).mat.varying={set(x.vma)}")
    return x.unreduced | set(mesh_axes), x.reduced


def _reduced_vary_cast_ur(x, *, mesh_axes):
    name = "reduced_vary_cast"
    if not x.reduced:
        raise ValueError(f"{name} only accepts inputs that are reduced. Got "
                         f"{x.str_long(short=True)}")
    if not x.reduced & set(mesh_axes):
        raise ValueError(f"{name} is a Reduced->Varying collective. This means that the axis "
                         f"names mentioned in `axes` passed to `{name}` must be present in "
                         f"`jax.typeof(x).mat.reduced`. Got axes={tuple(mesh_axes)} and "
                         f"jax.typeof(x).mat.reduced={set(x.reduced)}")
    if x.vma & set(mesh_axes):
        raise ValueError(f"{name} input cannot be varying across the axis_name provided. Got "
                         f"x={x.str_long(short=True)} and axis_name={tuple(mesh_axes)}")
    return x.unreduced, x.reduced - set(mesh_axes)


def _preduced_ur(x, *, mesh_axes):
    if x.vma & set(mesh_axes):
        raise ValueError("preduced is a Invariant->Reduced collective. This means that the "
                         "axis names mentioned in `axes` passed to `preduced` must not be "
                         f"present in `jax.typeof(inp).mat.varying`. Got axes={tuple(mesh_axes)}"
                         f" and jax.typeof(inp).mat.varying={set(x.vma)}")
    if x.reduced & set(mesh_axes):
        raise ValueError("preduced input cannot be reduced across the axis_name provided. Got "
                         f"x={x.str_long(short=True)} and axis_name={tuple(mesh_axes)}")
    _state_error("preduced", x, mesh_axes)
    return x.unreduced, x.reduced | set(mesh_axes)


def _from_unreduced_ur(name: str, kind: str, x, *, mesh_axes, **params):
    """unreduced_psum (to invariant) and unreduced_psum_scatter (to varying)."""
    if not x.unreduced:
        raise ValueError(f"{name} only accepts inputs that are unreduced. Got "
                         f"{x.str_long(short=True)}")
    if not x.unreduced & set(mesh_axes):
        raise ValueError(f"{name} is a Unreduced -> {kind} collective. This means that the "
                         f"axes={tuple(mesh_axes)} passed to `{name}` must be present in "
                         f"jax.typeof(x).mat.unreduced={set(x.unreduced)}")
    if x.vma & set(mesh_axes):
        raise ValueError(f"{name}'s input cannot be varying across the axis_name provided. Got "
                         f"x={x.str_long(short=True)} and axis_name={tuple(mesh_axes)}")
    return x.unreduced - set(mesh_axes), x.reduced


def _all_gather_reduced_ur(x, *, mesh_axes, **params):
    name = "all_gather_reduced"
    if not x.vma:
        raise ValueError(f"{name} only accepts inputs that are varying. Got "
                         f"{x.str_long(short=True)}")
    if not x.vma & set(mesh_axes):
        raise ValueError(f"{name} is a Varying -> Reduced collective. This means that the "
                         f"axis_name={tuple(mesh_axes)} passed to `{name}` must be present in "
                         f"jax.typeof(x).mat.varying={set(x.vma)}")
    if x.reduced & set(mesh_axes):
        raise ValueError(f"{name}'s input cannot be reduced across the axis_name provided. Got "
                         f"x={x.str_long(short=True)} and axis_name={tuple(mesh_axes)}")
    return x.unreduced, x.reduced | set(mesh_axes)


unreduced.ur_rules[vary_unreduced_cast_p] = _vary_unreduced_cast_ur
unreduced.ur_rules[reduced_vary_cast_p] = _reduced_vary_cast_ur
unreduced.ur_rules[preduced_p] = _preduced_ur
unreduced.ur_rules[unreduced_psum_p] = functools.partial(_from_unreduced_ur, "unreduced_psum",
                                                         "Invariant")
unreduced.ur_rules[unreduced_psum_scatter_p] = functools.partial(
    _from_unreduced_ur, "unreduced_psum_scatter", "Varying")
unreduced.ur_rules[all_gather_reduced_p] = _all_gather_reduced_ur
unreduced.ALWAYS.update(UNREDUCED_COLLECTIVES)
