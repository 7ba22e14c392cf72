"""Whole-program partitioning: a traced program whose types split values over a mesh's
Explicit axes computes each device's block.

A jitted program outside shard_map is global: its values are whole arrays, and their types
say how they are split (``f32[8@x,4@y]``, ``ir.sharding_rules``). This pass rewrites each run
of consecutive equations on split values into a shard_map over the mesh whose body computes
blocks: every global equation becomes its block operation, and every change of layout an
explicit collective (``all_gather`` to join blocks, a ``dynamic_slice`` at the device's
``axis_index`` to take one, ``psum``/``pmax``/``pmin`` for a reduction over a split
dimension), made under the source line of the equation that needed it. The shard_map's
in_specs and out_specs are the values' types, so values cross its boundary as they lie: no
communication there.

From then on the program is an ordinary one with shard_map islands: lowering gives one
program per device, the ledger counts the collectives' bytes with their lines, the
replication checker proves every result replicated where its type says so (the shard_maps
are checked), every backend runs it, and on MPI a process computes only its devices' blocks.

The block rule of each primitive is in ``block_rules``; a primitive without one, or a case a
rule does not cover, takes the general one: gather the operands whole, compute, and keep
this device's block of each result (correct for any primitive, at the cost of the gathers).
Equations that hold sub-programs (loops, branches, shard_maps, custom derivatives) and prints
stay outside the runs, on whole values, as before; a ``partitioned`` print or debug callback
joins a run, and each device prints (calls back with) its blocks.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from compiler.inline_calls import inline_calls
from compiler.propagation import WHOLE, inlined_shard_map
from compiler.shard_map import shard_map
from compiler.tracing import aval_of, bind, eval_program, replaying, trace_to_program
from ir import collectives as coll
from ir import dtypes as _dtypes
from ir import primitives as prims
from ir.core import Eqn, Literal, Program, TypeSharding, Var
from ir.graph import runs_per_device, sub_programs
from ir.shapes import reshape_groups
from ir.sharding import PartitionSpec, spec_names
from ir.sharding_rules import partitions, spec_of
from ir.unreduced import slicing_partial_sums

block_rules: dict = {}


# --- communication the partitioner inserts, and the strict mode ----------------------------------

@dataclasses.dataclass(frozen=True)
class InsertedCommunication:
    """One collective the partitioner put in a program: the operation that needed it (and
    where the user wrote that), the value's type before and after, what moves, why, and the
    annotation that would avoid it. ``requested``: a reshard or sharding constraint the
    program wrote (communication it asked for, not one inserted for it)."""
    operation: str
    source: Any
    collective: str
    mesh_axes: tuple
    from_type: str
    to_type: str
    bytes_per_device: int
    reason: str
    avoid: str
    requested: bool = False

    @property
    def site(self) -> str:
        return str(self.source) if self.source is not None else "<unknown>"

    def __str__(self):
        return (f"{self.site}: {self.operation} {self.from_type} -> {self.to_type}: "
                f"{self.collective} over {', '.join(self.mesh_axes)}, "
                f"{self.bytes_per_device} B per device; {self.reason}; {self.avoid}")


class ImplicitCommunicationError(ValueError):
    """The partitioner had to insert communication and ``shardc_implicit_communication`` is
    ``'error'``."""


_MODES = ("allow", "warn", "error")
_strict = {"mode": "allow", "warned": set()}
_recording: list = []          # the lists the current partition appends to (innermost last)
_at: list = []                 # the equation whose block rule is running (innermost last)


def set_implicit_communication(mode: str) -> None:
    """``'allow'`` (default), ``'warn'`` (a warning once per site) or ``'error'`` (raise at the
    first): what inserting communication the program did not write does."""
    if mode not in _MODES:
        raise ValueError(f"shardc_implicit_communication must be one of {list(_MODES)}, got "
                         f"{mode!r}")
    _strict["mode"] = mode
    _strict["warned"].clear()


def check_inserted(records) -> None:
    """Apply the strict mode to what a partition inserted (requested reshards are the
    program's own)."""
    mode = _strict["mode"]
    if mode == "allow" or not records:
        return
    inserted = [r for r in records if not r.requested]
    if not inserted:
        return
    if mode == "error":
        raise ImplicitCommunicationError(
            f"the partitioner would insert communication the program does not write "
            f"(shardc_implicit_communication='error'): {inserted[0]}")
    import warnings
    for record in inserted:
        key = (record.site, record.collective, record.mesh_axes, record.operation)
        if key not in _strict["warned"]:
            _strict["warned"].add(key)
            warnings.warn(f"implicit communication: {record}", stacklevel=4)


def _note(mesh, collective, names, before, after, block, reason: str = "",
          avoid: str = "") -> None:
    """Record a collective the running block rule inserts (``before``/``after``: the value's
    type as laid out before and after; ``block``: this device's block, which the bytes moved
    are counted from)."""
    if not _recording or not _at:
        return
    eqn = _at[-1]
    requested = eqn.primitive is prims.sharding_constraint_p
    k = _shards(mesh, names)
    block_bytes = int(np.prod(aval_of(block).shape)) * aval_of(block).dtype.itemsize
    # a ring: a gather receives the k-1 other blocks, a reduce-scatter k-1 k-ths of the
    # block it reduces, an all-reduce both
    moved = {"all_gather": block_bytes * (k - 1),
             "reduce_scatter": block_bytes * (k - 1) // k}.get(
        collective, 2 * block_bytes * (k - 1) // k)
    if not reason:
        reason = ("the program asks for this layout" if requested else
                  f"{eqn.primitive.name} reads its operand laid out as {after}")
    if not avoid:
        avoid = ("" if requested else
                 f"avoid it by laying the operand out as {after} where it is made "
                 "(jax.sharding.reshard, or out_sharding=)")
    _recording[-1].append(InsertedCommunication(
        eqn.primitive.name, eqn.source, collective, tuple(names), before, after, int(moved),
        reason, avoid, requested))


def _type_text(mesh, aval, spec) -> str:
    """``aval`` as it prints laid out by ``spec`` on ``mesh`` (``f32[8@x,16]``)."""
    return _typed_as(mesh, aval, spec).str_short()


def _typed_as(mesh, aval, spec):
    """``aval`` with the type that splits it by ``spec`` on ``mesh``."""
    return aval.with_sharding(TypeSharding.of(mesh, tuple(spec)))



def partition(program: Program, records: list | None = None) -> Program:
    """``program`` with each run of equations on values split over Explicit axes computed
    block by block in a shard_map (the program itself when its types split nothing).
    ``records``: a list that gets each collective the partitioning inserts
    (``InsertedCommunication``)."""
    _recording.append(records if records is not None else [])
    try:
        return _partition(program)
    finally:
        _recording.pop()


def _partition(program: Program) -> Program:
    mesh = _mesh_of(program)
    if mesh is None:
        return program
    # custom derivatives have done their work once a program runs: their bodies are
    # partitioned as the rest (lowering would inline them anyway)
    program = inline_calls(program)
    items = _runs(program, mesh)
    if not any(kind == "run" for kind, _ in items):
        return program
    live_after = _live_after(program, items)
    n_const = len(program.constvars)

    def replay(*args):
        env = {id(v): a for v, a in zip(program.constvars + program.invars, args)}

        def read(atom):
            return atom.value[()] if isinstance(atom, Literal) else env[id(atom)]

        for k, (kind, eqns) in enumerate(items):
            if kind == "eqn":
                (eqn,) = eqns
                with replaying(eqn.source):
                    outs = bind(eqn.primitive, *[read(a) for a in eqn.invars], **eqn.params)
                outs = outs if eqn.primitive.multiple_results else [outs]
                env.update((id(v), o) for v, o in zip(eqn.outvars, outs))
                continue
            ins, outs = _boundary(eqns, live_after[k])
            results = _run_region(mesh, eqns, ins, outs, [read(v) for v in ins])
            env.update((id(v), r) for v, r in zip(outs, results))
        return [read(a) for a in program.outvars]

    avals = [v.aval for v in program.constvars + program.invars]
    new, consts, _ = trace_to_program(replay, avals)
    assert not consts, "partitioning closed over a value"
    return Program(new.invars[:n_const], new.invars[n_const:], new.eqns, new.outvars,
                   list(program.consts))


def _typed_vars(program: Program):
    yield from program.constvars
    yield from program.invars
    for eqn in program.eqns:
        yield from eqn.invars
        yield from eqn.outvars


def type_meshes(program: Program) -> set:
    """The meshes whose axes split values of ``program`` by their types (or hold partial
    sums of them, or known-equal copies: such values too are computed device by device)."""
    meshes = {a.aval.type_sharding.mesh for a in _typed_vars(program)
              if not isinstance(a, Literal) and a.aval.type_sharding is not None}
    if not meshes and any(not isinstance(a, Literal) and a.aval.ur
                          for a in _typed_vars(program)):
        meshes = _ur_meshes(program)
    return meshes


def _ur_meshes(program: Program) -> set:
    """The meshes an unsplit program's unreduced or reduced values are on: those of the
    shard_maps and reshards that make them, else the mesh in context."""
    found = set()
    for eqn in program.eqns:
        mesh = eqn.params.get("mesh") if eqn.primitive is prims.shard_map_p else getattr(
            eqn.params.get("sharding"), "mesh", None)
        if mesh is not None and any(v.aval.ur for v in eqn.outvars):
            found.add(mesh)
    if not found:
        from ir.sharding import Mesh, current_mesh
        mesh = current_mesh()
        if isinstance(mesh, Mesh):
            found.add(mesh)
    return found


def _mesh_of(program: Program):
    """The one mesh whose Explicit axes split values of ``program``; None when none does, or
    when types name several meshes (such a program stays on whole values)."""
    meshes = type_meshes(program)
    return meshes.pop() if len(meshes) == 1 else None


def _runs(program: Program, mesh) -> list:
    """The equations in order, grouped: ``("run", eqns)`` for each maximal run of equations
    that may be partitioned and touch a split value, ``("eqn", [eqn])`` for the others."""
    items, current = [], []

    def close():
        if current:
            if any(_touches_split(e) or _partitioned_effect(e) for e in current):
                items.append(("run", list(current)))
            else:
                items.extend(("eqn", [e]) for e in current)
            current.clear()

    for eqn in program.eqns:
        if not _partitionable(eqn, mesh):
            close()
            items.append(("eqn", [eqn]))
        else:
            current.append(eqn)
    close()
    return items


# Loops and branches whose programs hold only what a run may hold run inside the run, each
# iteration (or branch) on blocks: their carries keep their types, so their blocks stay put.
# A remat, past autodiff, is its body.
_BLOCK_CONTROL = (prims.scan_p, prims.while_p, prims.cond_p, prims.remat_p)


def _partitionable(eqn, mesh, in_body: bool = False) -> bool:
    """Whether a run may hold ``eqn``: an operation whose split values are on ``mesh``, or a
    loop or branch whose programs hold only such equations (or shard_maps on ``mesh``:
    ``in_body``, one inside such a program)."""
    if not _on(eqn, mesh) or _leaves_mesh(eqn, mesh):
        return False
    if eqn.primitive in _BLOCK_CONTROL:
        return all(_partitionable(e, mesh, True)
                   for _, _, sub in sub_programs(eqn) for e in sub.eqns)
    if in_body and inlined_shard_map(eqn, mesh):
        return True
    if _partitioned_effect(eqn):
        return True                     # each device prints (calls back with) its blocks
    return eqn.primitive.kind == "op" and eqn.primitive not in WHOLE


def _leaves_mesh(eqn, mesh) -> bool:
    """Whether ``eqn`` lays a value out on another mesh than ``mesh`` (leaving
    ``explicit_axes`` for the same devices with Auto axes): the run hands the value over as
    its type lays it out, and the value leaves laid out so (JAX's mesh cast moves nothing)."""
    target = eqn.params.get("sharding") if eqn.primitive is prims.sharding_constraint_p \
        else None
    return getattr(target, "mesh", mesh) != mesh


def _partitioned_effect(eqn) -> bool:
    """A ``partitioned`` print or debug callback: every device prints (calls back), its
    values split or not (JAX's)."""
    return runs_per_device(eqn.primitive, eqn.params)


def _touches_split(eqn) -> bool:
    return any(not isinstance(a, Literal) and (a.aval.type_sharding is not None or a.aval.ur)
               for a in list(eqn.invars) + list(eqn.outvars)) or any(
        _touches_split(e) for _, _, sub in sub_programs(eqn) for e in sub.eqns)


def _on(eqn, mesh) -> bool:
    """Whether every split value of ``eqn`` is on ``mesh``."""
    return all(a.aval.type_sharding is None or a.aval.type_sharding.mesh == mesh
               for a in list(eqn.invars) + list(eqn.outvars) if not isinstance(a, Literal))


def _live_after(program: Program, items) -> list:
    """For each item, the ids of the variables read after it (or returned)."""
    live = {id(v) for v in program.outvars if isinstance(v, Var)}
    result = [None] * len(items)
    for k in range(len(items) - 1, -1, -1):
        result[k] = set(live)
        for eqn in items[k][1]:
            live.update(id(a) for a in eqn.invars if isinstance(a, Var))
    return result


def _boundary(eqns, live_after: set):
    """A run's inputs (variables it reads that it does not define, in order of first use) and
    outputs (variables it defines that are read after it)."""
    defined, ins, seen = set(), [], set()
    for eqn in eqns:
        for a in eqn.invars:
            if isinstance(a, Var) and id(a) not in defined and id(a) not in seen:
                seen.add(id(a))
                ins.append(a)
        defined.update(id(v) for v in eqn.outvars)
    outs = [v for eqn in eqns for v in eqn.outvars if id(v) in live_after]
    return ins, outs


def _spec_p(aval) -> PartitionSpec:
    """The spec a value enters and leaves a run with: its type's (its partial sums stay
    partial sums, its known-equal copies stay so)."""
    return PartitionSpec(*partitions(spec_of(aval)), unreduced=aval.unreduced,
                         reduced=aval.reduced)


def _run_region(mesh, eqns, ins, outs, values) -> list:
    """The run as one shard_map over ``mesh``: blocks in, each equation's block rule, blocks
    out, every value laid out as its type says."""
    in_specs = tuple(_spec_p(v.aval) for v in ins)
    out_specs = tuple(_spec_p(v.aval) for v in outs)

    def blocks(*args):
        return tuple(_eval_blocks(mesh, eqns, dict(zip(map(id, ins), args)), outs))

    body = shard_map(blocks, mesh, in_specs, out_specs, check_vma=True)
    with replaying(eqns[0].source):      # the region is written where its first operation is
        return list(body(*values))


def _eval_blocks(mesh, eqns, env: dict, outs) -> list:
    """The blocks of ``outs``: each equation's block rule on its operands' blocks (``env``:
    variable id -> block, filled as the equations run)."""
    def read(atom):
        return atom.value[()] if isinstance(atom, Literal) else env[id(atom)]

    for eqn in _fuse_relayouts_into_reductions(_fuse_partial_sum_products(eqns, outs), outs):
        rule = block_rules.get(eqn.primitive, whole_rule)
        _at.append(eqn)
        try:
            with replaying(eqn.source):
                results = rule(mesh, eqn, [read(a) for a in eqn.invars])
        finally:
            _at.pop()
        env.update((id(v), r) for v, r in zip(eqn.outvars, results))
    return [read(v) for v in outs]


def _program_blocks(mesh, program: Program, args) -> list:
    """A sub-program (a loop body, a branch) run on blocks."""
    env = {id(v): c for v, c in zip(program.constvars, program.consts)}
    env.update(zip(map(id, program.invars), args))
    return _eval_blocks(mesh, program.eqns, env, program.outvars)


def _use_counts(eqns) -> dict:
    """How many times the equations read each variable (by id)."""
    uses: dict = {}
    for eqn in eqns:
        for a in eqn.invars:
            if isinstance(a, Var):
                uses[id(a)] = uses.get(id(a), 0) + 1
    return uses


def _fuse_partial_sum_products(eqns, outs) -> list:
    """The run's equations, where a product (``dot_general``) feeding only a reshard to
    partial sums over the axes both its sides split the contraction over is that product
    left unreduced (JAX's ``out_sharding`` on the product): each device keeps its product,
    nothing is added to be split up again."""
    uses = _use_counts(eqns)
    kept_out = {id(v) for v in outs}
    producer = {id(eqn.outvars[0]): eqn for eqn in eqns if eqn.primitive is prims.dot_general_p}
    fused, result = set(), []
    for eqn in eqns:
        source = (producer.get(id(eqn.invars[0])) if eqn.primitive is prims.sharding_constraint_p
                  and isinstance(eqn.invars[0], Var) else None)
        if (source is not None and uses[id(eqn.invars[0])] == 1
                and id(eqn.invars[0]) not in kept_out and not eqn.invars[0].aval.ur
                and not eqn.outvars[0].aval.reduced
                and eqn.outvars[0].aval.unreduced
                and eqn.outvars[0].aval.unreduced == _split_contraction(source)):
            fused.add(id(source))
            eqn = Eqn(prims.dot_general_p, list(source.invars), eqn.outvars,
                      dict(source.params, out_sharding=eqn.params["sharding"]), source.source)
        result.append(eqn)
    return [e for e in result if id(e) not in fused]


def _split_contraction(eqn) -> frozenset:
    """The mesh axes both operands of a dot_general split a contracted dimension over."""
    (lc, rc), _ = eqn.params["dimension_numbers"]
    a, b = eqn.invars
    if isinstance(a, Literal) or isinstance(b, Literal):
        return frozenset()
    xs, ys = spec_of(a.aval), spec_of(b.aval)
    return frozenset(n for l, r in zip(lc, rc) if xs[l] == ys[r] for n in xs[l])


def _fuse_relayouts_into_reductions(eqns, outs) -> list:
    """The run's equations, where a layout change that only joins the dimensions a sum (max,
    min) then reduces, and feeds nothing else, is left out: the reduction reads the operand
    as it lies and completes across the devices (a block-sized psum instead of gathering
    every block). Gradients hold this often: a broadcast operand's cotangent takes the
    operand's type, then is summed over the broadcast dimensions."""
    uses = _use_counts(eqns)
    kept_out = {id(v) for v in outs}
    producer = {id(eqn.outvars[0]): eqn for eqn in eqns
                if eqn.primitive is prims.sharding_constraint_p}
    skipped, result = set(), []
    for eqn in eqns:
        source = producer.get(id(eqn.invars[0])) if eqn.invars else None
        if (eqn.primitive in _ACROSS and source is not None
                and uses[id(eqn.invars[0])] == 1 and id(eqn.invars[0]) not in kept_out
                and eqn.invars[0].aval.dtype != np.bool_
                and _only_joins(source.invars[0], eqn.invars[0], eqn.params["axes"])):
            skipped.add(id(source))
            eqn = Eqn(eqn.primitive, [source.invars[0]], eqn.outvars, eqn.params, eqn.source)
        result.append(eqn)
    return [e for e in result if id(e) not in skipped]


def _only_joins(before, after, axes) -> bool:
    """Whether the layout change from ``before`` to ``after`` moves nothing outside ``axes``."""
    if not isinstance(before, Var):
        return False
    src, dst = spec_of(before.aval), spec_of(after.aval)
    return all(src[d] == dst[d] for d in range(len(src)) if d not in axes)


# --- moving blocks ------------------------------------------------------------------------------

def _shards(mesh, names) -> int:
    sizes = mesh.shape
    return math.prod(sizes[a] for a in names)


def relayout(mesh, x, shape, src, dst, aval=None):
    """The block ``x`` of a global array of ``shape`` laid out by ``src`` (per dimension the
    axes splitting it), laid out by ``dst`` instead: each dimension whose split changes is
    gathered whole (``all_gather``; an uneven split's padding cut off), then cut to this
    device's block (a ``dynamic_slice`` at its ``axis_index``, no communication)."""
    src, dst = tuple(src), tuple(dst)
    if src == dst:
        return x
    for d, (s, t) in enumerate(zip(src, dst)):
        if s and s != t:
            if aval is not None:
                _note(mesh, "all_gather", s, _type_text(mesh, aval, src),
                      _type_text(mesh, aval, dst), x)
            x = bind(coll.all_gather_p, x, mesh_axes=tuple(s), gather_axis=d, tiled=True,
                     axis_size=_shards(mesh, s), to="invarying")
            if aval_of(x).shape[d] != shape[d]:
                x = _cut(x, d, shape[d])
    for d, (s, t) in enumerate(zip(src, dst)):
        if t and s != t:
            x = take_block(mesh, x, d, shape[d], t)
    return x


# What an uneven split's padding holds where a block is cut from a whole value: a value no
# result may depend on (the tests fill it with NaN to prove that none does).
padding_fill = {"value": 0}


def _ceil_block(size: int, k: int) -> int:
    return -(-size // k)


def take_block(mesh, x, d: int, size: int, names):
    """This device's block along dimension ``d`` (whole, of ``size``) split over ``names``:
    ``ceil(size / k)`` long, the last blocks padded at the end where ``k`` does not divide
    ``size`` (GSPMD's and Shardy's uneven layout)."""
    k = _shards(mesh, names)
    block = _ceil_block(size, k)
    if block * k != size:
        config = [(0, 0, 0)] * aval_of(x).ndim
        config[d] = (0, block * k - size, 0)
        with np.errstate(invalid="ignore"):       # a NaN fill has no integer value
            fill = np.asarray(padding_fill["value"]).astype(aval_of(x).dtype)
        x = bind(prims.pad_p, x, fill, padding_config=tuple(config))
    start = bind(prims.mul_p, bind(coll.axis_index_p, mesh_axes=tuple(names)),
                 np.int32(block))
    starts = [np.int32(0)] * aval_of(x).ndim
    starts[d] = start
    sizes = list(aval_of(x).shape)
    sizes[d] = block
    return bind(prims.dynamic_slice_p, x, *starts, slice_sizes=tuple(sizes))


def _cut(x, d: int, size: int):
    """``x`` along dimension ``d`` cut to its first ``size`` entries (a gathered uneven split,
    its padding dropped)."""
    shape = aval_of(x).shape
    limit = tuple(size if e == d else n for e, n in enumerate(shape))
    return bind(prims.slice_p, x, start_indices=(0,) * len(shape), limit_indices=limit,
                strides=None)


def uneven_dims(mesh, aval) -> list:
    """The dimensions of ``aval`` its type splits into uneven blocks, with their axes."""
    return [(d, names) for d, (n, names) in enumerate(zip(aval.shape, spec_of(aval)))
            if names and n % _shards(mesh, names)]


def _masked(mesh, x, aval, dims, fill):
    """The block ``x`` of a value of type ``aval``, its padding along ``dims`` (uneven split
    dimensions) set to ``fill``: what a reduction or contraction over them must not see."""
    block = aval_of(x).shape
    keep = None
    for d, names in uneven_dims(mesh, aval):
        if d not in dims:
            continue
        start = bind(prims.mul_p, bind(coll.axis_index_p, mesh_axes=tuple(names)),
                     np.int32(block[d]))
        index = bind(prims.add_p, bind(prims.iota_p, dtype=np.dtype(np.int32), shape=block,
                                       dimension=d), start)
        inside = bind(prims.lt_p, index, np.int32(aval.shape[d]))
        keep = inside if keep is None else bind(prims.and_p, keep, inside)
    if keep is None:
        return x
    filler = bind(prims.broadcast_in_dim_p, np.asarray(fill).astype(aval_of(x).dtype),
                  shape=block, broadcast_dimensions=())
    return bind(prims.select_n_p, keep, filler, x)


def to_layout(mesh, value, atom, dst):
    """An operand's block (``atom`` its global variable or literal) laid out by ``dst``."""
    if isinstance(atom, Literal) or not aval_of(value).shape:
        return value
    return relayout(mesh, value, atom.aval.shape, spec_of(atom.aval), dst, atom.aval)


def _unsplit(aval) -> tuple:
    return ((),) * aval.ndim


def whole_rule(mesh, eqn, values) -> list:
    """Any primitive: its operands gathered whole, the primitive on them, and this device's
    block of each result kept."""
    whole = [to_layout(mesh, v, a, _unsplit(a.aval)) for v, a in zip(values, eqn.invars)]
    outs = bind(eqn.primitive, *whole, **block_params(eqn))
    outs = outs if eqn.primitive.multiple_results else [outs]
    return [relayout(mesh, o, v.aval.shape, _unsplit(v.aval), spec_of(v.aval))
            for o, v in zip(outs, eqn.outvars)]




def block_params(eqn) -> dict:
    """An equation's parameters for its block operation: ``out_sharding`` is the type's
    business, not the block's."""
    return {k: v for k, v in eqn.params.items() if k != "out_sharding"}


def _block_shape(mesh, aval) -> tuple:
    return tuple(_ceil_block(n, _shards(mesh, names))
                 for n, names in zip(aval.shape, spec_of(aval)))


# --- elementwise: operands laid out as the result ------------------------------------------------

def elementwise_rule(mesh, eqn, values) -> list:
    """Each operand laid out as the result (a dimension of size 1 broadcasts whole), then the
    primitive on the blocks."""
    target = spec_of(eqn.outvars[0].aval)
    laid = []
    for v, a in zip(values, eqn.invars):
        if isinstance(a, Literal) or not a.aval.shape:
            laid.append(v)
            continue
        want = tuple(t if n != 1 else () for t, n in zip(target, a.aval.shape))
        laid.append(to_layout(mesh, v, a, want))
    outs = bind(eqn.primitive, *laid, **eqn.params)
    return outs if eqn.primitive.multiple_results else [outs]


for _p in prims.ELEMENTWISE + (prims.threefry2x32_p,):
    block_rules[_p] = elementwise_rule


def _bitcast_rule(mesh, eqn, values) -> list:
    """Each element's bits on their own: blockwise, the word dimension that a narrower dtype
    adds (or a wider one consumes) whole."""
    (x,), (a,), (out,) = values, eqn.invars, eqn.outvars
    if not isinstance(a, Literal) and a.aval.shape:
        want = (tuple(spec_of(out.aval)) + ((),) * a.aval.ndim)[:a.aval.ndim]
        x = to_layout(mesh, x, a, want)
    return [bind(eqn.primitive, x, **eqn.params)]


block_rules[prims.bitcast_convert_type_p] = _bitcast_rule


def _sharding_constraint_rule(mesh, eqn, values) -> list:
    (x,), (a,), (out,) = values, eqn.invars, eqn.outvars
    if not (a.aval.ur or out.aval.ur):
        return [to_layout(mesh, x, a, spec_of(out.aval))]
    # a reshard to or from partial sums, or known-equal copies (JAX's): those no longer wanted
    # given up first, the layout changed, those wanted made last
    order = lambda axes: tuple(n for n in mesh.axis_names if n in axes)
    src, dst = a.aval, out.aval
    added = order(src.unreduced - dst.unreduced)
    if added:                             # partial sums added
        x = bind(coll.unreduced_psum_p, x, mesh_axes=added)
    dropped = order(src.reduced - dst.reduced)
    made = order(dst.unreduced - src.unreduced)
    if dropped:                           # known-equal copies: one of them, picked
        x = _at_first(bind(coll.reduced_vary_cast_p, x, mesh_axes=dropped), dropped)
        summed = tuple(n for n in dropped if n not in made)
        if summed:
            x = bind(coll.psum_p, x, mesh_axes=summed)
    src_spec, dst_spec = list(spec_of(src)), spec_of(dst)
    placed = set()
    if made and not isinstance(a, Literal):
        # a block split over axes that become partial sums: each device's term is its block,
        # zeros elsewhere (JAX's; nothing moves)
        for d, (have, want) in enumerate(zip(src_spec, dst_spec)):
            if have and not want and set(have) <= set(made) \
                    and src.shape[d] % _shards(mesh, have) == 0:
                x = _into_zeros(mesh, x, d, src.shape[d], have)
                src_spec[d] = ()
                placed |= set(have)
    if not isinstance(a, Literal) and aval_of(x).shape:
        with slicing_partial_sums():       # (a block of a partial sum is one)
            x = relayout(mesh, x, src.shape, tuple(src_spec), dst_spec, src)
    if made:                              # a value made partial sums: held at coordinate 0
        fresh = tuple(n for n in made if n not in dropped and n not in placed)
        if fresh:
            missing = tuple(n for n in fresh if n not in aval_of(x).vma)
            if missing:
                x = bind(coll.pvary_p, x, mesh_axes=missing)
            x = _at_first(x, fresh)
        x = bind(coll.vary_unreduced_cast_p, x, mesh_axes=made)
    started = order(dst.reduced - src.reduced)
    if started:                           # copies now known equal
        x = bind(coll.preduced_p, x, mesh_axes=started)
    return [x]


def _into_zeros(mesh, x, d: int, size: int, names):
    """The block ``x`` (this device's along dimension ``d`` of ``size``, split over
    ``names``) at its place in zeros of the whole dimension."""
    shape = list(aval_of(x).shape)
    shape[d] = size
    zeros = _zeros_typed_as(x, tuple(shape))
    rank = bind(coll.axis_index_p, mesh_axes=tuple(names))
    starts = [np.int32(0)] * len(shape)
    starts[d] = bind(prims.mul_p, rank, np.int32(aval_of(x).shape[d]))
    return bind(prims.dynamic_update_slice_p, zeros, x, *starts)


def _at_first(x, axes):
    """``x`` on the devices at coordinate 0 along ``axes``, zeros on the others (zeros typed
    as ``x``: on every device, they are partial sums, or copies, of zero)."""
    first = bind(prims.eq_p, bind(coll.axis_index_p, mesh_axes=axes), np.int32(0))
    return bind(prims.select_n_p, first, _zeros_typed_as(x), x)


def _zeros_typed_as(x, shape=None):
    """Zeros typed as ``x`` (of ``shape``, default its own)."""
    aval = aval_of(x)
    zeros = bind(prims.broadcast_in_dim_p, np.zeros((), aval.dtype),
                 shape=aval.shape if shape is None else shape, broadcast_dimensions=())
    varying = tuple(n for n in sorted(aval.vma | aval.unreduced))
    if varying:
        zeros = bind(coll.pvary_p, zeros, mesh_axes=varying)
    if aval.unreduced:
        zeros = bind(coll.vary_unreduced_cast_p, zeros, mesh_axes=tuple(sorted(aval.unreduced)))
    if aval.reduced:
        zeros = bind(coll.preduced_p, zeros, mesh_axes=tuple(sorted(aval.reduced)))
    return zeros


block_rules[prims.sharding_constraint_p] = _sharding_constraint_rule


def _partitioned_effect_rule(mesh, eqn, blocks):
    """A ``partitioned`` print or debug callback: each device prints (calls back with) its
    blocks as they lie (in the run's shard_map, once per device, in mesh-position order)."""
    params = {k: v for k, v in eqn.params.items() if k != "partitioned"}
    bind(eqn.primitive, *blocks, **params)
    return []


block_rules[prims.debug_print_p] = _partitioned_effect_rule
block_rules[prims.callback_p] = _partitioned_effect_rule


def _shard_alike_rule(mesh, eqn, values):
    """Each value laid out as its result's type says (propagation types them alike)."""
    return [to_layout(mesh, v, a, spec_of(out.aval))
            for v, a, out in zip(values, eqn.invars, eqn.outvars)]


block_rules[prims.shard_alike_p] = _shard_alike_rule


def _shard_map_rule(mesh, eqn, values):
    """A shard_map in a loop body or a branch, on blocks (``inlined_shard_map``): its operands
    laid out as its in_specs say, its body's equations on them in the run (manual over the
    mesh, as the body is), its results laid out from its out_specs as their types say."""
    params = eqn.params
    blocks = [to_layout(mesh, v, a, _names(spec, a.aval.ndim))
              for v, a, spec in zip(values, eqn.invars, params["in_specs"])]
    outs = eval_program(params["jaxpr"], blocks)
    return [relayout(mesh, o, v.aval.shape, _names(spec, v.aval.ndim), spec_of(v.aval), v.aval)
            for o, v, spec in zip(outs, eqn.outvars, params["out_specs"])]


def _names(spec, ndim: int) -> tuple:
    """A spec's mesh axes per dimension, one entry for each of ``ndim``."""
    names = spec_names(spec)
    return tuple(names) + ((),) * (ndim - len(names))


block_rules[prims.shard_map_p] = _shard_map_rule


# --- shapes --------------------------------------------------------------------------------------

def _transpose_rule(mesh, eqn, values) -> list:
    (x,), (a,), (out,) = values, eqn.invars, eqn.outvars
    perm = eqn.params["permutation"]
    target = spec_of(out.aval)
    want = [()] * len(perm)
    for i, p in enumerate(perm):
        want[p] = target[i]
    return [bind(prims.transpose_p, to_layout(mesh, x, a, tuple(want)), permutation=perm)]


def _squeeze_rule(mesh, eqn, values) -> list:
    (x,), (a,), (out,) = values, eqn.invars, eqn.outvars
    dims = eqn.params["dimensions"]
    kept = iter(spec_of(out.aval))
    want = tuple(() if d in dims else next(kept) for d in range(a.aval.ndim))
    return [bind(prims.squeeze_p, to_layout(mesh, x, a, want), dimensions=dims)]


def _broadcast_in_dim_rule(mesh, eqn, values) -> list:
    """The operand's dimensions laid out as the result's they map to (one that broadcasts from
    size 1 whole), broadcast to the result's block."""
    (x,), (a,), (out,) = values, eqn.invars, eqn.outvars
    target = spec_of(out.aval)
    dims = eqn.params["broadcast_dimensions"]
    want = tuple(target[od] if a.aval.shape[d] == out.aval.shape[od] else ()
                 for d, od in enumerate(dims))
    x = to_layout(mesh, x, a, want)
    return [bind(prims.broadcast_in_dim_p, x, shape=_block_shape(mesh, out.aval),
                 broadcast_dimensions=dims)]


def _iota_rule(mesh, eqn, values) -> list:
    """The result's block of the iota: along the counted dimension, offset by where the block
    starts."""
    (out,) = eqn.outvars
    params = block_params(eqn)
    block = _block_shape(mesh, out.aval)
    result = bind(prims.iota_p, **dict(params, shape=block))
    d = params["dimension"]
    names = spec_of(out.aval)[d]
    if names:
        dtype = out.aval.dtype
        offset = bind(prims.mul_p, bind(coll.axis_index_p, mesh_axes=tuple(names)),
                      np.int32(block[d]))
        offset = bind(prims.convert_element_type_p, offset, new_dtype=dtype)
        result = bind(prims.add_p, result, offset)
    return [result]


def _contiguous(dims, shape, block, spec) -> bool:
    """Whether each device's block of these dimensions is one run of their flat order: the
    dimensions before the innermost split one have blocks of one row, and those after it are
    whole."""
    split = [d for d in dims if spec[d]]
    if not split:
        return True
    return all(block[d] == 1 for d in dims if d < split[-1]) and \
        all(block[d] == shape[d] for d in dims if d > split[-1])


def _local_reshape(mesh, a, out) -> bool:
    """Whether reshaping blocks gives the result's blocks: in each group of dimensions the
    reshape joins or splits, the same axes split it, in the same order, and each device holds
    one contiguous run of it before and after."""
    if uneven_dims(mesh, a.aval) or uneven_dims(mesh, out.aval):
        return False
    src, dst = spec_of(a.aval), spec_of(out.aval)
    in_block = _block_shape(mesh, a.aval)
    out_block = _block_shape(mesh, out.aval)
    for old_dims, new_dims in reshape_groups(a.aval.shape, out.aval.shape):
        if [n for d in old_dims for n in src[d]] != [n for d in new_dims for n in dst[d]]:
            return False
        if not (_contiguous(old_dims, a.aval.shape, in_block, src)
                and _contiguous(new_dims, out.aval.shape, out_block, dst)):
            return False
    return True


def _reshape_rule(mesh, eqn, values) -> list:
    """A reshape of blocks where they are runs of the flat order before and after; else the
    operand laid out so that they are (each group of dimensions the reshape joins or splits
    keeps the split of its major dimension where the result's major one has it, the rest
    gathered), the blocks reshaped, the result laid out as its type says; else whole."""
    (x,), (a,), (out,) = values, eqn.invars, eqn.outvars
    if _local_reshape(mesh, a, out):
        return [bind(prims.reshape_p, x, new_sizes=_block_shape(mesh, out.aval))]
    src, dst = spec_of(a.aval), spec_of(out.aval)
    want_in, want_out = [()] * a.aval.ndim, [()] * out.aval.ndim
    for old, new in reshape_groups(a.aval.shape, out.aval.shape):
        old = [d for d in old if a.aval.shape[d] != 1]
        new = [d for d in new if out.aval.shape[d] != 1]
        if old and new and src[old[0]] and src[old[0]] == dst[new[0]]:
            want_in[old[0]], want_out[new[0]] = src[old[0]], dst[new[0]]
    typed_in, typed_out = _typed_as(mesh, a.aval, want_in), _typed_as(mesh, out.aval, want_out)
    if any(want_in) and _local_reshape(mesh, Var(typed_in), Var(typed_out)):
        x = to_layout(mesh, x, a, tuple(want_in))
        y = bind(prims.reshape_p, x, new_sizes=_block_shape(mesh, typed_out))
        return [relayout(mesh, y, out.aval.shape, tuple(want_out), dst, out.aval)]
    return whole_rule(mesh, eqn, values)


block_rules[prims.transpose_p] = _transpose_rule
block_rules[prims.squeeze_p] = _squeeze_rule
block_rules[prims.broadcast_in_dim_p] = _broadcast_in_dim_rule
block_rules[prims.iota_p] = _iota_rule
block_rules[prims.reshape_p] = _reshape_rule


# --- operations along unsplit dimensions: local where the type keeps the split ---------------

def _kept_rule(mesh, eqn, values) -> list:
    """Cumulative ops and sort: each runs along one dimension, so blocks are computed on their
    own once that dimension is whole."""
    along = eqn.params["dimension" if eqn.primitive is prims.sort_p else "axis"]
    return _whole_along(mesh, eqn, values, (along,))


def _fft_rule(mesh, eqn, values) -> list:
    """An FFT transforms its last dimensions, so blocks are computed on their own once those
    are whole (a real transform changes the last one's length: it is whole either way)."""
    (a,) = eqn.invars
    n = len(eqn.params["fft_lengths"])
    return _whole_along(mesh, eqn, values, tuple(range(a.aval.ndim - n, a.aval.ndim)),
                        same_shape=False)


def _whole_along(mesh, eqn, values, dims, same_shape: bool = True) -> list:
    """An operation that runs along ``dims`` on blocks: the operands laid out as the result
    with ``dims`` whole, the operation on the blocks, and a result whose type splits one of
    ``dims`` (JAX keeps an FFT's split; on Auto axes propagation may keep a sort's) cut to
    its block. ``same_shape``: operands of another shape than the result are gathered whole
    instead."""
    shape = eqn.outvars[0].aval.shape
    return _on_blocks(mesh, eqn, values, dims, block_params(eqn), lambda aval: (
        aval.ndim == len(shape) and (not same_shape or aval.shape == shape)))


def _on_blocks(mesh, eqn, values, dims, params, takes) -> list:
    """``eqn`` run on each device's blocks (``params``), its array operands laid out as its
    result with ``dims`` whole, where ``takes`` says each such operand's type allows it
    (else the whole arrays); its results then laid out as their types say."""
    want = tuple(() if d in dims else names
                 for d, names in enumerate(spec_of(eqn.outvars[0].aval)))
    laid = []
    for v, a in zip(values, eqn.invars):
        if isinstance(a, Literal) or not a.aval.shape:
            laid.append(v)              # a scalar: an index, a padding value
        elif not takes(a.aval):
            return whole_rule(mesh, eqn, values)
        else:
            laid.append(to_layout(mesh, v, a, want))
    results = bind(eqn.primitive, *laid, **params)
    results = results if eqn.primitive.multiple_results else [results]
    return [relayout(mesh, r, o.aval.shape, want, spec_of(o.aval), o.aval)
            for r, o in zip(results, eqn.outvars)]


# --- operations along some dimensions: local where the others carry the splits ------------------

def _along_rule(dims_of, block_params_of=None):
    """A block rule for an operation that acts along the dimensions ``dims_of(eqn)`` gives
    (a slice, pad, reversal, concatenation, dynamic slice or update): where the result's
    type splits none of them, each device runs it on its blocks, laid out as the result with
    those dimensions whole, without gathering the split ones. ``block_params_of(eqn,
    block_shape, params)`` gives the parameters for a block (None: ``params`` as they are)."""
    def rule(mesh, eqn, values) -> list:
        out = eqn.outvars[0].aval
        dims = dims_of(eqn)
        if any(spec_of(out)[d] for d in dims) or uneven_dims(mesh, out):
            return whole_rule(mesh, eqn, values)
        params = block_params(eqn)
        if block_params_of is not None:
            params = block_params_of(eqn, _block_shape(mesh, out), params)
        return _on_blocks(mesh, eqn, values, dims, params, lambda aval: (
            aval.ndim == out.ndim and not uneven_dims(mesh, aval)))
    return rule


def _changed_dims(eqn) -> tuple:
    """The dimensions along which an operand's shape differs from the result's."""
    out = eqn.outvars[0].aval.shape
    return tuple(d for d in range(len(out))
                 if any(a.aval.ndim == len(out) and a.aval.shape[d] != out[d]
                        for a in eqn.invars if not isinstance(a, Literal)))


def _slice_dims(eqn) -> tuple:
    (x,) = eqn.invars
    strides = eqn.params["strides"] or (1,) * x.aval.ndim
    return tuple(d for d, (lo, hi, st, n) in enumerate(zip(
        eqn.params["start_indices"], eqn.params["limit_indices"], strides, x.aval.shape))
        if (lo, hi, st) != (0, n, 1))


def _slice_block(eqn, block, params):
    dims = _slice_dims(eqn)
    limits = tuple(hi if d in dims else block[d]
                   for d, hi in enumerate(eqn.params["limit_indices"]))
    return dict(params, limit_indices=limits)


def _dynamic_slice_block(eqn, block, params):
    sizes = eqn.params["slice_sizes"]
    full = eqn.invars[0].aval.shape
    return dict(params, slice_sizes=tuple(b if s == n else s
                                          for s, n, b in zip(sizes, full, block)))


block_rules[prims.slice_p] = _along_rule(_slice_dims, _slice_block)
block_rules[prims.pad_p] = _along_rule(lambda eqn: tuple(
    d for d, cfg in enumerate(eqn.params["padding_config"]) if tuple(cfg) != (0, 0, 0)))
block_rules[prims.rev_p] = _along_rule(lambda eqn: tuple(eqn.params["dimensions"]))
block_rules[prims.concatenate_p] = _along_rule(lambda eqn: (eqn.params["dimension"],))
block_rules[prims.dynamic_slice_p] = _along_rule(
    lambda eqn: tuple(d for d, (s, n) in enumerate(zip(eqn.params["slice_sizes"],
                                                         eqn.invars[0].aval.shape)) if s != n),
    _dynamic_slice_block)
block_rules[prims.dynamic_update_slice_p] = _along_rule(_changed_dims)


for _p in prims.CUMULATIVE + (prims.sort_p,):
    block_rules[_p] = _kept_rule
block_rules[prims.fft_p] = _fft_rule


# --- reductions: local, then across the devices a split reduced dimension spreads over -----

_ACROSS = {prims.reduce_sum_p: coll.psum_p, prims.reduce_max_p: coll.pmax_p,
           prims.reduce_min_p: coll.pmin_p}


def _reduce_rule(mesh, eqn, values) -> list:
    """Kept dimensions laid out as the result; the block reduced; a reduced dimension split
    over axes completed by psum/pmax/pmin over them (JAX's all-reduce). Reductions without
    one (products, logical ones, arg-reductions) take reduced dimensions whole first."""
    (x,), (a,), (out,) = values, eqn.invars, eqn.outvars
    axes = eqn.params["axes"]
    across = _ACROSS.get(eqn.primitive)
    src = spec_of(a.aval)
    partial = across is not None and a.aval.dtype != np.bool_
    split = tuple(n for d in axes for n in src[d]) if partial else ()
    kept = iter(spec_of(out.aval))
    want = tuple((src[d] if partial else ()) if d in axes
                 else tuple(n for n in next(kept) if n not in split)
                 for d in range(a.aval.ndim))
    x = to_layout(mesh, x, a, want)
    laid = _typed_as(mesh, a.aval, want)
    if split and any(d in axes for d, _ in uneven_dims(mesh, laid)):
        # an uneven split's padding is the reduction's identity
        x = _masked(mesh, x, laid, axes, _identity(eqn.primitive, a.aval.dtype))
    result = bind(eqn.primitive, x, **block_params(eqn))
    # a sum typed unreduced over some of the axes splitting it stays each device's partial
    # sum over those (JAX's out_sharding); partial sums it is not typed over are completed
    partial_sums = out.aval.unreduced
    completed = tuple(n for n in mesh.axis_names
                      if n in a.aval.unreduced and n not in partial_sums)
    if completed:
        result = bind(coll.unreduced_psum_p, result, mesh_axes=completed)
    kept_partial = tuple(n for n in split if n in partial_sums)
    split = tuple(n for n in split if n not in partial_sums)
    if kept_partial:
        result = bind(coll.vary_unreduced_cast_p, result, mesh_axes=kept_partial)
    if split:
        _note(mesh, "all_reduce", split, _type_text(mesh, a.aval, want), out.aval.str_short(),
              result,
              f"{eqn.primitive.name} over a dimension split over {', '.join(split)} completes "
              "across the devices", "needed by the reduction itself (reduce before splitting "
              "to avoid it)")
        result = bind(across, result, mesh_axes=split)
    have = tuple(w for d, w in enumerate(want) if d not in axes)
    return [relayout(mesh, result, out.aval.shape, have, spec_of(out.aval), out.aval)]


for _p in prims.REDUCTIONS + (prims.argmax_p, prims.argmin_p):
    block_rules[_p] = _reduce_rule


def _identity(prim, dtype):
    """The value a sum, max or min over ``dtype`` ignores: zero, or the dtype's lowest
    (highest) value, an infinity where the dtype has one (float8_e4m3fn has none)."""
    if prim is prims.reduce_sum_p:
        return 0
    if _dtypes.is_inexact(dtype):
        info = _dtypes.finfo(dtype)
        has_inf = np.isinf(np.asarray(np.inf).astype(dtype))
        low, high = (-np.inf, np.inf) if has_inf else (info.min, info.max)
    else:
        info = _dtypes.iinfo(dtype)
        low, high = info.min, info.max
    return low if prim is prims.reduce_max_p else high



# --- dot_general: local products, summed across a contraction split on both sides -------------

def _dot_general_rule(mesh, eqn, values) -> list:
    """Operands laid out so that the product of blocks is the result's block: batch and free
    dimensions as the result, each contracted pair kept as it is where both sides split it
    alike, else whole. A kept split leaves each device a partial sum (a pending sum), summed
    over its axes: a result dimension the result splits over some of them alone is computed
    whole and reduce-scattered along (each device sums, and keeps, its block); a result
    dimension split over some of them and others is computed whole and cut after the sum;
    the axes left are summed with psum."""
    (x, y), (a, b), (out,) = values, eqn.invars, eqn.outvars
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    target = spec_of(out.aval)
    xs, ys = spec_of(a.aval), spec_of(b.aval)
    contract = [xs[l] if xs[l] and xs[l] == ys[r] else () for l, r in zip(lc, rc)]
    pending = {n for names in contract for n in names}
    product = [() if pending & set(names) else names for names in target]
    # (a result typed unreduced over the contracted axes keeps each device's product, its
    # term of the sum: nothing is summed over them)
    unreduced = out.aval.unreduced
    scatter = [(d, names) for d, names in enumerate(target)
               if names and set(names) <= pending and not unreduced & set(names)
               and out.aval.shape[d] % _shards(mesh, names) == 0]
    n_batch = len(lb)
    x_free = [d for d in range(a.aval.ndim) if d not in lc and d not in lb]
    y_free = [d for d in range(b.aval.ndim) if d not in rc and d not in rb]
    want_x, want_y = [()] * a.aval.ndim, [()] * b.aval.ndim
    for k, (l, r) in enumerate(zip(lb, rb)):
        want_x[l] = want_y[r] = product[k]
    for k, d in enumerate(x_free):
        want_x[d] = product[n_batch + k]
    for k, d in enumerate(y_free):
        want_y[d] = product[n_batch + len(x_free) + k]
    for (l, r), names in zip(zip(lc, rc), contract):
        want_x[l] = want_y[r] = names
    x = to_layout(mesh, x, a, tuple(want_x))
    y = to_layout(mesh, y, b, tuple(want_y))
    if pending:      # an uneven contracted split's padding adds nothing (zero on both sides)
        x = _masked(mesh, x, _typed_as(mesh, a.aval, want_x), lc, 0)
        y = _masked(mesh, y, _typed_as(mesh, b.aval, want_y), rc, 0)
    params = block_params(eqn)
    # bfloat16 partial sums are kept and summed in float32, rounded once after the sum: XLA's
    # CPU product accumulates bfloat16 in float32 and its partitioner sums before the
    # rounding, so a split contraction gives the unsplit product's bits (rounding each
    # device's term first was off by an ulp of the largest term)
    widen = out.aval.dtype == _dtypes.bfloat16 and bool(pending) and not unreduced
    if widen:
        params = dict(params, preferred_element_type=np.dtype(np.float32))
    result = bind(prims.dot_general_p, x, y, **params)
    why = "needed by the contraction (split a free dimension instead to avoid it)"
    for d, names in scatter:
        _note(mesh, "reduce_scatter", names, "partial sums", out.aval.str_short(), result,
              f"the contraction is split over {', '.join(names)} on both sides, and the "
              f"result's dimension {d} over the same axes", why)
        result = bind(coll.psum_scatter_p, result, mesh_axes=tuple(names), scatter_axis=d,
                      tiled=True, axis_size=_shards(mesh, names))
        product[d] = names
    scattered = {n for _, names in scatter for n in names}
    summed = tuple(n for names in contract for n in names
                   if n not in scattered and n not in unreduced)
    if unreduced:
        result = bind(coll.vary_unreduced_cast_p, result,
                      mesh_axes=tuple(a for a in mesh.axis_names if a in unreduced))
    if summed:
        _note(mesh, "all_reduce", summed, "partial sums", out.aval.str_short(), result,
              f"the contraction is split over {', '.join(summed)} on both sides", why)
        result = bind(coll.psum_p, result, mesh_axes=summed)
    if widen:
        result = bind(prims.convert_element_type_p, result, new_dtype=out.aval.dtype)
    return [relayout(mesh, result, out.aval.shape, tuple(product), target, out.aval)]


block_rules[prims.dot_general_p] = _dot_general_rule



# --- loops and branches: each iteration, each branch, on blocks ----------------------------------

def _as_carried(outs, carry) -> list:
    """Loop results typed as the carry they replace: where a result varies over fewer mesh
    axes than the carry (a value every device computed alike), it is cast up."""
    cast = []
    for out, before in zip(outs, carry):
        missing = tuple(sorted(aval_of(before).vma - aval_of(out).vma))
        cast.append(bind(coll.pvary_p, out, mesh_axes=missing) if missing else out)
    return cast


def _varying_as_split(values, atoms) -> list:
    """Blocks cast to vary over every axis their types split them over: a block made alike on
    every device (from a constant, say) is not yet marked so, and a loop's carry must keep
    one type across iterations."""
    cast = []
    for value, atom in zip(values, atoms):
        names = set() if isinstance(atom, Literal) else {
            n for names in spec_of(atom.aval) for n in names}
        missing = tuple(sorted(names - aval_of(value).vma))
        cast.append(bind(coll.pvary_p, value, mesh_axes=missing) if missing else value)
    return cast


def _scan_rule(mesh, eqn, values) -> list:
    """A scan over blocks: the leading dimension of ``xs`` is unsplit (the type rule says so),
    so each iteration reads its slice of this device's block."""
    from compiler import control_flow
    params = eqn.params
    n_consts, n_carry = params["num_consts"], params["num_carry"]
    consts = values[:n_consts]

    def step(carry, x):
        outs = _program_blocks(mesh, params["jaxpr"], list(consts) + list(carry) + list(x))
        return _as_carried(outs[:n_carry], carry), outs[n_carry:]

    init = _varying_as_split(values[n_consts:n_consts + n_carry],
                             eqn.invars[n_consts:n_consts + n_carry])
    carry, ys = control_flow.scan(step, init,
                                  list(values[n_consts + n_carry:]), length=params["length"],
                                  reverse=params["reverse"])
    return list(carry) + list(ys)


def _while_rule(mesh, eqn, values) -> list:
    from compiler import control_flow
    params = eqn.params
    n_cond, n_body = params["cond_nconsts"], params["body_nconsts"]
    cond_consts, body_consts = values[:n_cond], values[n_cond:n_cond + n_body]

    def cond(carry):
        (pred,) = _program_blocks(mesh, params["cond_jaxpr"], list(cond_consts) + list(carry))
        return pred

    def body(carry):
        outs = _program_blocks(mesh, params["body_jaxpr"], list(body_consts) + list(carry))
        return _as_carried(outs, carry)

    init = _varying_as_split(values[n_cond + n_body:], eqn.invars[n_cond + n_body:])
    return list(control_flow.while_loop(cond, body, init))


def _cond_rule(mesh, eqn, values) -> list:
    """A switch over blocks: each branch's results cast to vary over the axes the equation's
    types split them over, since one branch may make alike on every device (a zero residual,
    say) what another computes per device, and the branches must agree on their types."""
    from compiler import control_flow
    index, operands = values[0], values[1:]
    branches = [(lambda *ops, program=program: tuple(_varying_as_split(
                    _program_blocks(mesh, program, ops), eqn.outvars)))
                for program in eqn.params["branches"]]
    return list(control_flow.switch(index, branches, *operands))


def _remat_rule(mesh, eqn, values) -> list:
    return _program_blocks(mesh, eqn.params["jaxpr"], values)


block_rules[prims.remat_p] = _remat_rule
block_rules[prims.scan_p] = _scan_rule
block_rules[prims.while_p] = _while_rule
block_rules[prims.cond_p] = _cond_rule
