"""The fast backend: a shard_map's mesh-level program runs once for all devices, one numpy
call per equation.

Where the reference backend interprets one program per device and meets them at every
communication node, this backend runs the lowering's mesh-level program (the same for every
device; ``compiler.lowering``) over the blocks of every device stacked along leading mesh
dimensions (``lead``: the axis' size where a value varies over it, 1 where it is the same on
every device along it; see ``runtime.vectorized_rules``). Inputs enter as they arrive; the
program's own ``all_slice``/``all_gather`` nodes lay them out::

    a f32[8,16] arrives P('x') on a (4,2) mesh  -> stacked f32[4,1,2,16]   (a view)
    all_slice over 'y', axis 1                   -> f32[4,2,2,8]            (a view)
    b f32[16,4] arrives P()                      -> stacked f32[1,1,16,4]
    all_slice over 'y', axis 0                   -> f32[1,2,8,4]            (a view)
    dot_general                                  -> f32[4,2,2,4]   (one broadcasting matmul)
    all_reduce over 'y'                          -> f32[4,1,2,4]   (rank-order sum over dim 1)
    out_specs P('x', None)                       -> an Array whose buffers are views of it

A program is planned once per layout of its inputs: one step per equation (its kernel), large
dead values released. The first call interprets the steps; the second compiles them to
straight-line Python (``BodyPlan.source``), whose elementwise results are written into dead
operands nothing else can see. Arrays keep
their stacked form, so a result fed back in costs nothing to lay out again; a ppermute result
that is only returned stays a relabelling of its source's blocks.

Loops and branches that go the same way on every device run stacked too
(``runtime.vectorized_control``); those that may not run per device when they hold no
collective. The rest runs on the reference backend, which stays the oracle, for the declared
reasons of ``FALLBACKS`` only (counted; SHARDC_EXPLAIN=1 reports each): bodies with
``debug.print`` (prints keep the reference's order), collectives under a predicate that may
differ between devices, inputs whose replicas disagree. Any other exception propagates.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import os
import sys

import numpy as np

from ir import dtypes
from ir import primitives as prims
from ir import collectives as coll
from ir.core import Aval, Eqn, Literal, Var
from ir.sharding import (NamedSharding, by_layout, canonical_spec, global_shape, normal_spec,
                         replication_mismatch, runtime_replication_error, spec_names)
from runtime import reference
from runtime.array import Array, canonical_array, detached, typed_as_laid_out
from runtime.vectorized_control import control_kernel
from runtime.reference import UNREDUCED_ON_HOST, ReferenceBackend
from runtime.collectives import group_rules
from runtime.vectorized_rules import (PER_DEVICE, EqnTypes, Relabelled, group_rule_kernel,
                                      per_device_rule, relabelling_ppermute_rule, stacked_rules)


# --- the stacked form of a sharded value --------------------------------------------------------

@functools.lru_cache(maxsize=256)
def position_index(mesh_sizes: tuple, lead: tuple) -> tuple:
    """For each mesh position (row-major), the index of its block in a ``lead`` array."""
    return tuple(tuple(c if n != 1 else 0 for c, n in zip(np.unravel_index(p, mesh_sizes), lead))
                 for p in range(math.prod(mesh_sizes)))


class Stacked:
    """Every device's block of one array: ``data`` of shape ``lead + block`` on ``mesh``,
    laid out over the global array by ``spec``. ``data`` may be a ``Relabelled`` ppermute
    result, whose blocks are views of its source's (the array is gathered only if asked)."""
    __slots__ = ("held", "lead", "mesh", "spec", "shape")

    def __init__(self, data, lead, mesh, spec, shape):
        self.held = data
        self.lead = lead
        self.mesh = mesh
        self.spec = spec
        self.shape = shape

    @property
    def data(self) -> np.ndarray:
        held = self.held
        return held.data if type(held) is Relabelled else held

    def buffers(self) -> list:
        held = self.held
        if type(held) is Relabelled:
            return held.blocks()
        return [held[i] for i in position_index(self.mesh.axis_sizes, self.lead)]

    def assemble(self) -> np.ndarray:
        """The global value (as the reference assembles it: the blocks of the positions at
        coordinate 0 on every axis the spec does not name)."""
        data = self.data
        out = join_blocks(data, self.mesh, self.spec, self.shape)
        if not out.flags.writeable or np.may_share_memory(out, data):
            out = np.array(out, copy=True)
        return out


def _spec_dims(mesh, spec):
    """Per array dimension, the mesh dims (indices) that split it, in the order listed."""
    return [tuple(mesh.axis_names.index(a) for a in names) for names in spec_names(spec)]


def split_global(value: np.ndarray, mesh, spec) -> tuple:
    """The stacked form of a global value laid out by ``spec``: a view when numpy can.

        P('x', 'y') on (4,2), f32[8,16]:  reshape [4,2, 2,8] -> transpose -> [4,2,2,8]
    """
    plan = by_layout(_SPLITS, _split_plan, value.shape, mesh, spec)
    shape, order, stacked, lead = plan
    return value.reshape(shape).transpose(order).reshape(stacked), lead


def _split_plan(global_shape, mesh, spec) -> tuple:
    sizes = mesh.axis_sizes
    dims_of = _spec_dims(mesh, spec)
    shape, labels = [], []
    for d, g in enumerate(global_shape):
        dims = dims_of[d] if d < len(dims_of) else ()
        for m in dims:
            shape.append(sizes[m])
            labels.append(("m", m))
        shape.append(g // math.prod(sizes[m] for m in dims))
        labels.append(("b", d))
    named = sorted(m for dims in dims_of for m in dims)
    order = [labels.index(("m", m)) for m in named]
    order += [labels.index(("b", d)) for d in range(len(global_shape))]
    lead = tuple(sizes[m] if m in named else 1 for m in range(len(sizes)))
    stacked = lead + tuple(shape[i] for i in order[len(named):])
    return tuple(shape), tuple(order), stacked, lead


def join_blocks(data: np.ndarray, mesh, spec, shape) -> np.ndarray:
    """The inverse of ``split_global``: a global value from stacked blocks laid out by
    ``spec`` (coordinate 0 on the mesh dims the spec does not name)."""
    index, spread, order = by_layout(_JOINS, _join_plan, data.shape, mesh, spec)
    x = np.broadcast_to(data[index], spread)
    return x.transpose(order).reshape(shape)


def _join_plan(stacked_shape, mesh, spec) -> tuple:
    k = mesh.ndim
    sizes = mesh.axis_sizes
    dims_of = _spec_dims(mesh, spec)
    named = sorted(m for dims in dims_of for m in dims)
    index = tuple(slice(None) if m in named else 0 for m in range(k))
    block = stacked_shape[k:]
    spread = tuple(sizes[m] for m in named) + tuple(block)
    order = []
    for d in range(len(block)):
        dims = dims_of[d] if d < len(dims_of) else ()
        order += [named.index(m) for m in dims] + [len(named) + d]
    return index, spread, tuple(order)


# how values of one shape are split into (or joined from) one mesh's stacks by one spec
# (``by_layout``: a host batch placed at every call takes the same way each time)
_SPLITS: dict = {}
_JOINS: dict = {}

def _same_layout(sharding, mesh, spec) -> bool:
    return (isinstance(sharding, NamedSharding) and sharding.mesh == mesh
            and normal_spec(sharding.spec) == normal_spec(spec))


def to_stacked(value, mesh, spec):
    """``(data, lead)`` of ``value`` laid out by ``spec``, or None when the stacked form
    cannot stand for what the devices hold (replicas that differ, as the reference keeps)."""
    if isinstance(value, Array):
        held = value._stacked
        if held is not None and held.mesh is mesh and held.spec == spec:
            return held.data, held.lead
    if isinstance(value, Array) and _same_layout(value.sharding, mesh, spec):
        held = value._stacked
        if held is None:
            held = _stacked_of_array(value, mesh)
            if held is None:
                return None
            value._stacked = held
        return held.data, held.lead
    return split_global(_host(value), mesh, spec)


def _stacked_of_array(value: Array, mesh):
    """The stacked form of an Array laid out on ``mesh``: a view of its global value when its
    buffers are slices of it; else its buffers, when the devices holding copies of a block
    hold equal copies (None when they differ: only the reference keeps such copies apart)."""
    spec = value.sharding.spec
    whole = value._global
    if value.sliced_from_global or (
            whole is not None and all(np.may_share_memory(b, whole) for b in value.buffers)):
        data, lead = split_global(whole, mesh, spec)
        return Stacked(data, lead, mesh, spec, value.shape)
    buffers = value.buffers
    sizes = mesh.axis_sizes
    dims_of = _spec_dims(mesh, spec)
    named = {m for dims in dims_of for m in dims}
    lead = tuple(n if m in named else 1 for m, n in enumerate(sizes))
    index = position_index(sizes, lead)
    first: dict = {}
    for p, i in enumerate(index):
        if not bitwise_same(first.setdefault(i, buffers[p]), buffers[p]):
            return None
    block = np.asarray(buffers[0]).shape
    data = np.stack([np.asarray(first[i]) for i in np.ndindex(*lead)])
    return Stacked(data.reshape(lead + block), lead, mesh, spec, value.shape)


class StackedBlocks:
    """An eager body value's blocks as the fast backend holds them: ``data`` of shape
    ``lead + block`` (see ``stack_blocks``); each position's block is a view of it, made
    when first asked for (printing, the reference's rules)."""
    __slots__ = ("data", "lead", "mesh", "_views")

    def __init__(self, data, lead: tuple, mesh):
        self.data = data.data if type(data) is Relabelled else data
        self.lead = lead
        self.mesh = mesh
        self._views = None

    def _blocks(self) -> list:
        if self._views is None:
            data = self.data
            self._views = [data[i] for i in position_index(self.mesh.axis_sizes, self.lead)]
        return self._views

    def __len__(self) -> int:
        return self.mesh.size

    def __getitem__(self, position):
        return self._blocks()[position]

    def __iter__(self):
        return iter(self._blocks())


def _eager_lead(mesh, vma, blocks) -> tuple:
    """The lead of an eager body value: the mesh axes its type varies over; every axis when
    untyped (the check off) unless all its blocks are one object."""
    if not vma and all(b is blocks[0] for b in blocks):
        return (1,) * mesh.ndim
    axes = vma or mesh.axis_names
    return tuple(n if a in axes else 1 for a, n in zip(mesh.axis_names, mesh.axis_sizes))


def stack_blocks(blocks: list, mesh, lead: tuple) -> np.ndarray:
    """The stacked form of per-position blocks: the block at coordinate 0 of every mesh axis
    where ``lead`` is 1 stands for the others (they are equal). Blocks that are the views a
    stacked array gives (an Array's buffers, an eager collective's results) are that array
    again, not a copy."""
    index = position_index(mesh.axis_sizes, lead)
    block = np.asarray(blocks[0])
    if not any(n > 1 for n in lead):
        return block.reshape(lead + block.shape)
    stacked = _viewed_stack(blocks, index, lead, block)
    if stacked is not None:
        return stacked
    first: dict = {}
    for p, i in enumerate(index):
        first.setdefault(i, blocks[p])
    data = np.stack([np.asarray(first[i]) for i in np.ndindex(*lead)])
    return data.reshape(lead + block.shape)


def _viewed_stack(blocks: list, index: tuple, lead: tuple, block):
    """A view of shape ``lead + block`` over the blocks, when they are views of one array
    laid out on a regular grid (an Array's buffers slice its global value or its stacked
    form that way; an eager collective's results its stacked result): no copy."""
    base = block.base
    if base is None or block.size == 0:
        return None
    origin = block.__array_interface__["data"][0]
    steps = []          # the bytes from one block to the next along each mesh dimension
    for d, n in enumerate(lead):
        unit = tuple(int(d == e) for e in range(len(lead)))
        if n == 1:
            steps.append(0)
            continue
        neighbour = blocks[index.index(unit) if unit in index else -1]
        steps.append(np.asarray(neighbour).__array_interface__["data"][0] - origin)
    first: dict = {}
    for p, i in enumerate(index):
        if i in first:
            continue
        view = blocks[p]
        first[i] = True
        if (type(view) is not np.ndarray or view.base is not base or view.dtype != block.dtype
                or view.shape != block.shape or view.strides != block.strides
                or view.__array_interface__["data"][0]
                != origin + sum(c * s for c, s in zip(i, steps))):
            return None
    return np.lib.stride_tricks.as_strided(block, lead + block.shape,
                                           tuple(steps) + block.strides, writeable=False)


def bitwise_same(a, b) -> bool:
    """Whether two blocks hold the same bits: the same object or view of one buffer, or
    equal bytes."""
    if a is b:
        return True
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return ((a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
             and a.strides == b.strides) or a.tobytes() == b.tobytes())



def _host(value):
    if isinstance(value, Array):
        if value.aval.unreduced:
            raise NotImplementedError(UNREDUCED_ON_HOST)
        return value._assemble()
    if isinstance(value, np.ndarray) and value.dtype == _canonical_dtype(value.dtype):
        return value
    return canonical_array(value)


def _canonical_dtype(dtype):
    return dtypes.canonicalize(dtype)


# --- compiling a body into straight-line Python ----------------------------------------------

# Why the fast backend may hand a shard_map to the reference backend: the only reasons it does.
# Each hand-over is counted (``FastBackend.counts``, ``FastBackend.fallbacks``) and, with
# SHARDC_EXPLAIN=1, reported on stderr. Any other exception of a stacked run is a bug and
# propagates.
FALLBACKS = {
    "debug_print": "the body prints (debug.print), and prints come out in the reference's "
                   "device order",
    "divergent_control": "a loop or branch holding a collective may go differently on "
                         "different devices",
    "replicas_differ": "an input's replicas differ between devices, which only the "
                       "reference keeps apart",
}


class NotStackable(Exception):
    """A body (or equation) the stacked interpreter does not run; the reference does.
    ``reason`` is a key of ``FALLBACKS``."""

    def __init__(self, detail: str, reason: str = "divergent_control"):
        super().__init__(detail)
        assert reason in FALLBACKS, reason
        self.reason = reason


def _holds_communication(program) -> bool:
    """Whether a program, or any sub-program, has a collective or a debug print."""
    for eqn in program.eqns:
        prim = eqn.primitive
        if prim.kind in ("collective", "lowered") or prim is prims.debug_print_p:
            return True
        for sub in _sub_programs(eqn):
            if _holds_communication(sub):
                return True
    return False


def prints(program) -> bool:
    """Whether a program, or any sub-program, has a debug print or a host callback (they run
    once per device, in the reference's order)."""
    return any(eqn.primitive in (prims.debug_print_p, prims.callback_p)
               or any(prints(s) for s in _sub_programs(eqn)) for eqn in program.eqns)


def _sub_programs(eqn) -> list:
    if not eqn.params:
        return []
    subs = []
    for value in eqn.params.values():
        if hasattr(value, "eqns"):
            subs.append(value)
        elif isinstance(value, tuple):
            subs.extend(v for v in value if hasattr(v, "eqns"))
    return subs


def _kernel(eqn, types: EqnTypes):
    prim = eqn.primitive
    own = getattr(_COMPILING[-1], "own_kernel", None)
    if own is not None:
        # a body planned over part of the mesh (``runtime.mpi.stacked.Window``)
        kernel = own(eqn, types)
        if kernel is not None:
            return kernel
    rule = stacked_rules.get(prim)
    if rule is not None:
        return rule(types)
    if prim in PER_DEVICE:
        return per_device_rule(prim, types)
    if prim in prims.CONTROL_FLOW:
        try:
            return control_kernel(eqn, types, _compile_sub_program, NotStackable)
        except NotStackable:
            if any(_holds_communication(s) for s in _sub_programs(eqn)):
                raise
        # each device's loop on its own blocks
        return per_device_rule(prim, types, "divergent_control")
    if prim.kind == "lowered" and prim in group_rules:
        return group_rule_kernel(prim, types)
    raise prims.MissingRuleError(prim, "stacked")


def _compile_sub_program(program, in_leads):
    mesh = _COMPILING[-1]
    return BodyPlan(program, mesh, in_leads)


_COMPILING: list = []       # the meshes of the bodies being compiled, innermost last


class BodyPlan:
    """A body compiled for one layout of its inputs: ``run(*stacked) -> stacked outputs``.

    Planning chooses each equation's kernel (from the leads of its operands) and which large
    values die where. The first call interprets the steps (one kernel call each); the second
    compiles them to straight-line Python (``source``), which later calls run, working out
    names and which dead operands ufuncs write into only then: a program run once does not
    pay for compiling it."""

    def __init__(self, body, mesh, in_leads, relabel: bool = False):
        self.mesh = mesh
        self.in_leads = tuple(in_leads)
        _COMPILING.append(mesh)
        try:
            (self.invars, self.steps, self.outvars, self.leads, self.out_leads,
             self.quiet) = _plan_steps(body, mesh, self.in_leads, relabel)
            order = _sunk(self.steps, self.outvars)
            if order is not None:
                (self.invars, self.steps, self.outvars, self.leads, self.out_leads,
                 self.quiet) = _plan_steps(body, mesh, self.in_leads, relabel, order)
            self.waits = _place_waits(self.steps)
        finally:
            _COMPILING.pop()
        self._literal_lead = (1,) * mesh.ndim
        self._compiled = None
        self._interpreted = False
        self._name = f"<shardc stacked body {id(body):x}>"

    def run(self, *args):
        if self._compiled is not None:
            return self._compiled(*args)
        if not self._interpreted:
            self._interpreted = True
            return self._interpret(args)
        source, namespace = self._source()
        exec(compile(source, self._name, "exec"), namespace)
        self._compiled = namespace["body"]
        return self._compiled(*args)

    def _constant(self, value, scalar: bool):
        """A literal as a kernel takes it: as is (0-d), or with a lead of ones."""
        return value if scalar else value.reshape(self._literal_lead + value.shape)

    def _interpret(self, args):
        values = dict(zip(self.invars, args))
        owned: set = set()        # vars holding fresh arrays a ufunc made here
        for step in self.steps:
            for var in step.waits:
                values[var] = values[var].wait()
            kernel = step.kernel
            shapes = kernel.arg_shapes
            operands = []
            for j, atom in enumerate(step.eqn.invars):
                if type(atom) is Literal:
                    operands.append(self._constant(atom.value, kernel.scalar_literals))
                elif shapes and shapes[j] is not None:
                    operands.append(values[atom].reshape(shapes[j]))
                else:
                    operands.append(values[atom])
            outvars = step.eqn.outvars
            into = (_dying_operand(step, owned, values) if kernel.ufunc and step.dead
                    else None)
            try:
                result = (kernel.fn(*operands) if into is None
                          else kernel.fn(*operands, out=into))
            except Exception as err:
                err.shardc_step = step
                raise
            if kernel.multiple:
                values.update(zip(outvars, result))
            elif outvars:
                values[outvars[0]] = result
                if kernel.ufunc:
                    owned.add(outvars[0])
            if _may_view(kernel):
                owned.difference_update(step.eqn.invars)
            for var in step.dead:
                del values[var]
        for var in self.waits:
            values[var] = values[var].wait()
        return [self._constant(atom.value, False) if type(atom) is Literal else values[atom]
                for atom in self.outvars]

    def failing_step(self, err: BaseException):
        """The step whose kernel raised ``err`` (interpreted, or compiled: by the line of the
        compiled source it raised at), or None."""
        step = getattr(err, "shardc_step", None)
        if step is not None:
            return step
        tb, line = err.__traceback__, None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == self._name:
                line = tb.tb_lineno
            tb = tb.tb_next
        return getattr(self, "_line_steps", {}).get(line)

    @property
    def source(self) -> str:
        return self._source()[0]

    def _source(self) -> tuple:
        """The body as straight-line Python, and the namespace it runs in (its kernels and
        constants). Elementwise results are written into dead operands nothing else can see."""
        namespace: dict = {"np": np}
        names = {var: f"a{i}" for i, var in enumerate(self.invars)}
        leads = self.leads
        uses = _use_counts([step.eqn for step in self.steps])
        outputs = {v for v in self.outvars if type(v) is not Literal}
        owned: set = set()        # vars holding fresh arrays nothing else refers to (a
        #                           non-ufunc kernel's results may view its operands)

        def constant(value, scalar: bool) -> str:
            name = f"c{len(namespace)}"
            namespace[name] = self._constant(value, scalar)
            return name

        lines = [f"def body({', '.join(names[v] for v in self.invars)}):"]
        self._line_steps = {}     # a line of the source -> the step it runs (``failing_step``)
        waited = {}          # a deferred result -> the step that made it

        def wait(variables) -> None:
            for var in variables:
                lines.append(f"    {names[var]} = {names[var]}.wait()")
                self._line_steps[len(lines)] = waited[var]

        for n, step in enumerate(self.steps):
            kernel, eqn = step.kernel, step.eqn
            wait(step.waits)
            if kernel.deferred:
                waited.update((var, step) for var in eqn.outvars)
            namespace[f"k{n}"] = kernel.fn
            operands = []
            for j, atom in enumerate(eqn.invars):
                if type(atom) is Literal:
                    operands.append(constant(atom.value, kernel.scalar_literals))
                elif kernel.arg_shapes and kernel.arg_shapes[j] is not None:
                    operands.append(f"{names[atom]}.reshape({kernel.arg_shapes[j]!r})")
                else:
                    operands.append(names[atom])
            into = _reusable(kernel, eqn, leads, owned, uses, outputs)
            if into is not None:
                operands.append(f"out={names[into]}")
            for atom in eqn.invars:
                if type(atom) is not Literal:
                    uses[atom] -= 1
            outs = []
            for j, var in enumerate(eqn.outvars[:len(kernel.out_leads)]):
                names[var] = f"v{n}_{j}"
                outs.append(names[var])
                if kernel.ufunc:
                    owned.add(var)
            if _may_view(kernel):
                owned.difference_update(eqn.invars)
            target = (", ".join(outs) + ("," if len(outs) == 1 else "")
                      if kernel.multiple else (outs[0] if outs else "_"))
            lines.append(f"    {target} = k{n}({', '.join(operands)})")
            self._line_steps[len(lines)] = step
            if step.dead:
                lines.append(f"    del {', '.join(names[v] for v in step.dead)}")
        wait(self.waits)
        results = [constant(atom.value, False) if type(atom) is Literal else names[atom]
                   for atom in self.outvars]
        lines.append(f"    return [{', '.join(results)}]")
        return "\n".join(lines) + "\n", namespace


@dataclasses.dataclass(slots=True)
class Step:
    """One equation of a planned body: the deferred results it is the first to read are
    waited for (``waits``); its results are ``kernel(*operands)``; then the variables in
    ``dead`` are released."""
    eqn: object
    kernel: object
    dead: list
    waits: list = dataclasses.field(default_factory=list)


def _sunk(steps, outvars):
    """``(equations, outputs)`` with the work that waits on deferred results moved after the
    rest, so that exchanges across processes overlap it; None when nothing moves.

    A step moves when it reads a deferred result (or what was computed from one), is no
    communication node and feeds none: every process keeps its nodes in program order
    whichever of its kernels are deferred, and only its own arithmetic moves."""
    if not any(step.kernel.deferred for step in steps):
        return None
    tainted: set = set()
    for step in steps:
        eqn = step.eqn
        if step.kernel.deferred or any(type(a) is not Literal and a in tainted
                                       for a in eqn.invars):
            tainted.update(eqn.outvars)
    feeding: set = set()        # read, directly or not, by a communication node
    for step in reversed(steps):
        eqn = step.eqn
        if eqn.primitive.collective is not None or any(v in feeding for v in eqn.outvars):
            feeding.update(a for a in eqn.invars if type(a) is not Literal)
    moved = [step.eqn.primitive.collective is None and not step.kernel.deferred
             and any(v in tainted for v in step.eqn.outvars)
             and not any(v in feeding for v in step.eqn.outvars) for step in steps]
    if not any(moved) or all(moved[moved.index(True):]):
        return None
    eqns = ([step.eqn for step, m in zip(steps, moved) if not m]
            + [step.eqn for step, m in zip(steps, moved) if m])
    return eqns, outvars


def _place_waits(steps) -> list:
    """Where each deferred kernel's results are waited for: before the first step reading
    them (``Step.waits``); the returned ones, and any never read, before the body returns."""
    pending: set = set()
    for step in steps:
        if pending:
            for atom in step.eqn.invars:
                if type(atom) is not Literal and atom in pending:
                    pending.discard(atom)
                    step.waits.append(atom)
        if step.kernel.deferred:
            pending.update(step.eqn.outvars)
    return [var for step in steps if step.kernel.deferred for var in step.eqn.outvars
            if var in pending]


_INLINED = tuple(p for p in (getattr(prims, "remat_p", None),) if p is not None)


def flatten_program(program) -> tuple:
    """``(eqns, outvars)`` of ``program`` with every ``remat`` inlined (its sub-program's
    equations in its place, with fresh variables): remat only matters to autodiff."""
    if not any(eqn.primitive in _INLINED for eqn in program.eqns):
        return program.eqns, program.outvars      # nothing to inline: read it as it is
    eqns: list = []
    outvars = _flatten_into(program, {}, eqns, fresh=False)
    return eqns, outvars


def _flatten_into(program, subst: dict, eqns: list, fresh: bool) -> list:
    def read(atom):
        return atom if isinstance(atom, Literal) else subst.get(id(atom), atom)

    for eqn in program.eqns:
        invars = [read(a) for a in eqn.invars]
        if eqn.primitive in _INLINED:
            sub = eqn.params["jaxpr"]
            inner = {id(v): a for v, a in zip(list(sub.constvars) + list(sub.invars), invars)}
            for outer, atom in zip(eqn.outvars, _flatten_into(sub, inner, eqns, fresh=True)):
                subst[id(outer)] = atom
            continue
        outvars = list(eqn.outvars)
        if fresh:
            outvars = [Var(v.aval) for v in eqn.outvars]
            for old, new in zip(eqn.outvars, outvars):
                subst[id(old)] = new
        eqns.append(Eqn(eqn.primitive, invars, outvars, eqn.params, eqn.source))
    return [read(a) for a in program.outvars]


def _plan_steps(body, mesh, in_leads, relabel: bool, flat=None):
    """One step per equation: its kernel (chosen from the leads of its operands) and the
    large operands it reads for the last time. ``relabel``: a ppermute result only returned
    stays a relabelling (``Relabelled``); only a shard_map's own outputs may, as only Arrays
    know how to hold one.

    Not on the shared loop (``ir.interpreter``): a plan is made of each value's lead, not of
    values, and where a large value dies is decided from all of its uses ahead.

    ``flat``: the body's ``(equations, outputs)``, flattened and ordered (``_sunk``).

    Returns (inputs, steps, outputs, the lead of each variable, the lead of each output,
    whether the kernels run with floating-point warnings off)."""
    body_eqns, body_outvars = flat or flatten_program(body)
    k = mesh.ndim
    sizes = mesh.axis_sizes
    leads: dict = {}          # keyed by the variable itself (variables hash by identity)
    uses = _use_counts(body_eqns)
    outputs = {v for v in body_outvars if type(v) is not Literal}
    kept = outputs | set(body.invars)
    steps = []
    quiet = False       # elementwise kernels run with floating-point warnings off, as the
    #                     reference's do
    for var, lead in zip(body.invars, in_leads):
        leads[var] = tuple(lead)
    axis_names = mesh.axis_names
    literal_lead = (1,) * k
    for eqn in body_eqns:
        invars = eqn.invars
        literals, in_leads_ = [], []
        for a in invars:
            if type(a) is Literal:
                literals.append(a.value)
                in_leads_.append(literal_lead)
            else:
                literals.append(None)
                in_leads_.append(leads[a])
        types = EqnTypes(sizes, axis_names, in_leads_, [a.aval for a in invars],
                         [v.aval for v in eqn.outvars], eqn.params, literals)
        if (relabel and eqn.primitive is coll.ppermute_node
                and uses.get(eqn.outvars[0], 0) == 0 and eqn.outvars[0] in outputs):
            kernel = relabelling_ppermute_rule(types)
        else:
            kernel = _kernel(eqn, types)
        quiet |= kernel.scalar_literals
        for atom in invars:
            if type(atom) is not Literal:
                uses[atom] -= 1
        for var, lead in zip(eqn.outvars, kernel.out_leads):
            leads[var] = tuple(lead)
        steps.append(Step(eqn, kernel, _released(invars, leads, uses, kept)))
    out_leads = [literal_lead if type(atom) is Literal else leads[atom]
                 for atom in body_outvars]
    return list(body.invars), steps, list(body_outvars), leads, out_leads, quiet


_RELEASE_BYTES = 1 << 16      # dead values this large are released at once (``del``)


def _stacked_bytes(lead, aval) -> int:
    return math.prod(lead) * math.prod(aval.shape) * aval.dtype.itemsize


def _use_counts(eqns) -> dict:
    """How many times each variable is read (keyed by the variable)."""
    uses: dict = {}
    get = uses.get
    for eqn in eqns:
        for atom in eqn.invars:
            if type(atom) is not Literal:
                uses[atom] = get(atom, 0) + 1
    return uses


def _may_view(kernel) -> bool:
    """Whether a kernel's results may view its operands (a transpose, a reshape, a message
    still being sent): no later ufunc may then write into those operands. A ufunc's results,
    and a ``fresh`` kernel's, are new arrays."""
    return not (kernel.ufunc or kernel.fresh)


def _dying_operand(step, owned, values):
    """The buffer of a large operand a ufunc step reads for the last time (``step.dead``),
    which a ufunc of this body made, of the result's shape and dtype: the first run writes
    the result there, as the compiled body does (``_reusable``), so that it holds no more
    memory than later runs."""
    kernel, eqn = step.kernel, step.eqn
    if len(eqn.outvars) != 1:
        return None
    out = eqn.outvars[0].aval
    out_shape = tuple(kernel.out_leads[0]) + out.shape
    for j, atom in enumerate(eqn.invars):
        if (atom in step.dead and atom in owned
                and not (kernel.arg_shapes and kernel.arg_shapes[j] is not None)):
            value = values[atom]
            if value.shape == out_shape and value.dtype == out.dtype:
                return value
    return None


def _reusable(kernel, eqn, leads, owned, uses, outputs):
    """An operand whose buffer the ufunc may write its result into: a fresh array of the
    result's shape and dtype, used nowhere else and not an output."""
    if not kernel.ufunc or len(eqn.outvars) != 1:
        return None
    out = eqn.outvars[0]
    out_shape = tuple(kernel.out_leads[0]) + out.aval.shape
    invars = eqn.invars
    for j, atom in enumerate(invars):
        if type(atom) is Literal or atom not in owned or atom in outputs:
            continue
        if kernel.arg_shapes and kernel.arg_shapes[j] is not None:
            continue
        if uses[atom] != _count(invars, atom):
            continue            # read again later
        aval = atom.aval
        if leads[atom] + aval.shape == out_shape and aval.dtype == out.aval.dtype:
            return atom
    return None


def _count(atoms, atom) -> int:
    count = 0
    for a in atoms:
        if a is atom:
            count += 1
    return count


def _released(invars, leads, uses, kept) -> list:
    """The large operands read for the last time by this step (each once; never one of
    ``kept``, the body's inputs and outputs): released at once rather than when the body
    returns."""
    dead: list = []
    for atom in invars:
        if type(atom) is Literal or uses[atom] or atom in kept or atom in dead:
            continue
        if _stacked_bytes(leads[atom], atom.aval) >= _RELEASE_BYTES:
            dead.append(atom)
    return dead


# --- running one shard_map equation ----------------------------------------------------------

class ShardMapPlan:
    """One lowered shard_map: its body compiled per input layout, its output types."""

    def __init__(self, lowered, eqn):
        self.lowered = lowered
        self.eqn = eqn
        self.mesh = lowered.mesh
        self.body = lowered.mesh_program
        self.in_specs = lowered.in_shardings        # the mesh-level program reshards them
        self.out_specs = lowered.out_specs
        self.plans: dict = {}
        self.reason = self._reason()
        self.stackable = not self.reason
        self.out_shardings = [keyed_sharding(self.mesh, canonical_spec(spec))
                              for spec in self.out_specs]
        # typed as their layouts split them, once: an array made with its type as is
        self.out_avals = [typed_as_laid_out(Aval(global_shape(a.shape, spec, self.mesh.shape),
                                                 a.dtype), sharding)
                          for a, spec, sharding in zip(self.body.out_avals, self.out_specs,
                                                       self.out_shardings)]

    def _reason(self) -> str:
        if prints(self.body):
            return "debug_print"      # prints come out in the reference's order
        return ""

    def run(self, values, backend) -> list:
        """Run stacked; hand the shard_map to the reference backend only for a declared
        reason (``FALLBACKS``), counted and explained. Any other exception propagates."""
        if not self.stackable:
            return self._on_reference(values, backend, self.reason)
        datas, leads = [], []
        mesh = self.mesh
        for value, spec in zip(values, self.in_specs):
            held = value._stacked if type(value) is Array else None
            if held is not None and held.mesh is mesh and (held.spec is spec
                                                           or held.spec == spec):
                datas.append(held.data)           # the common case: laid out already
                leads.append(held.lead)
                continue
            stacked = to_stacked(value, mesh, spec)
            if stacked is None:
                return self._on_reference(values, backend, "replicas_differ")
            datas.append(stacked[0])
            leads.append(stacked[1])
        in_leads = tuple(leads)
        plan = self.plans.get(in_leads)
        if plan is None:
            try:
                plan = self.plans[in_leads] = BodyPlan(self.body, self.mesh, in_leads,
                                                       relabel=True)
            except NotStackable as why:
                self.stackable = False
                self.reason = why.reason
                return self._on_reference(values, backend, self.reason)
        if plan.quiet:
            with np.errstate(all="ignore"):
                outs = plan.run(*datas)
        else:
            outs = plan.run(*datas)
        backend.counts["stacked"] += 1
        return self._arrays(outs, plan.out_leads)

    def _on_reference(self, values, backend, reason: str) -> list:
        backend.handed_over(self.eqn, reason)
        return reference._run_shard_map(self.lowered, values)

    def _arrays(self, outs, out_leads) -> list:
        mesh = self.mesh
        arrays = [Array.from_stacked(aval, sharding,
                                     Stacked(data, lead, mesh, sharding.spec, aval.shape))
                  for data, lead, aval, sharding in zip(outs, out_leads, self.out_avals,
                                                        self.out_shardings)]
        if self.lowered.runtime_check:
            for k, (array, spec) in enumerate(zip(arrays, self.out_specs)):
                mismatch = replication_mismatch(array.buffers, mesh, spec)
                if mismatch:
                    raise runtime_replication_error(k, spec, mesh, mismatch)
        return arrays


class ModulePlan:
    """A lowered module's shard_map equations, each ready to run stacked."""

    def __init__(self, module):
        self.module = module
        self.program = module.program
        self.shard_maps = {index: ShardMapPlan(lowered, module.program.eqns[index])
                           for index, lowered in module.shard_maps.items()}
        self.nested: dict = {}      # shard_maps inside host loops and branches, made at a first run
        self.only = self._only_shard_map()

    def _only_shard_map(self):
        """The shard_map plan when the program is exactly one shard_map of its inputs, in
        order, giving its outputs (the common case: run it without an environment)."""
        program = self.program
        if len(program.eqns) != 1 or program.constvars or 0 not in self.shard_maps:
            return None
        (eqn,) = program.eqns
        if (len(eqn.invars) == len(program.invars)
                and all(a is b for a, b in zip(eqn.invars, program.invars))
                and len(eqn.outvars) == len(program.outvars)
                and all(a is b for a, b in zip(eqn.outvars, program.outvars))):
            return self.shard_maps[0]
        return None

    def run(self, args, backend) -> list:
        if self.only is not None:
            return self.only.run(args, backend)
        return reference.execute_module(
            self.module, args,
            lambda index, values: self.shard_maps[index].run(values, backend),
            lambda eqn, values: self._nested(eqn).run(values, backend))

    def _nested(self, eqn) -> "ShardMapPlan":
        """The plan of a shard_map inside a host loop or branch, made at its first run."""
        plan = self.nested.get(id(eqn))
        if plan is None:
            plan = self.nested[id(eqn)] = ShardMapPlan(self.module.nested_lowered(eqn), eqn)
        return plan


# --- one sharding object per layout ------------------------------------------------------------

_KEYED: dict = {}


def keyed_sharding(mesh, spec) -> NamedSharding:
    """One NamedSharding per (mesh object, spec): equal keys are then the same object (jit
    hashes input shardings at every call: a sharding keeps its hash once worked out)."""
    key = (id(mesh), tuple(spec), spec.unreduced, spec.reduced)
    entry = _KEYED.get(key)
    if entry is None or entry.mesh is not mesh:
        entry = _KEYED[key] = NamedSharding(mesh, spec)
    return entry


EXPLAIN = os.environ.get("SHARDC_EXPLAIN", "") not in ("", "0")


# --- the backend -----------------------------------------------------------------------------------

class FastBackend(ReferenceBackend):
    """Runs shard_map bodies stacked over devices (see the module docstring); everything else
    as the reference backend does. A shard_map goes to the reference backend only for one of
    the ``FALLBACKS`` reasons, counted in ``fallbacks``."""
    name = "fast"

    def __init__(self):
        super().__init__()
        self._eager_plans: dict = {}
        self.counts = {"stacked": 0, "reference": 0}    # shard_map runs, by path
        self.fallbacks = {reason: 0 for reason in FALLBACKS}    # reference runs, by reason

    def handed_over(self, eqn, reason: str) -> None:
        """Count a shard_map run on the reference backend for ``reason`` (a key of
        ``FALLBACKS``), and report it on stderr under SHARDC_EXPLAIN=1."""
        self.counts["reference"] += 1
        self.fallbacks[reason] += 1
        if EXPLAIN:
            where = f" at {eqn.source}" if eqn.source else ""
            print(f"shardc: the shard_map{where} runs on the reference backend: "
                  f"{FALLBACKS[reason]}", file=sys.stderr)

    def run_mesh_program(self, mesh, program, inputs) -> list:
        """An equation of an eager body (or control flow holding some) stacked over every
        device: each input stacked along the mesh axes its type varies over (every axis when
        the program is untyped), or as the stacked result it is; one plan per program and
        layout. Each result is its stacked form (``StackedBlocks``)."""
        # (a partial sum's blocks differ along its unreduced axes, as a varying value's do)
        leads = [blocks.lead if type(blocks) is StackedBlocks
                 else _eager_lead(mesh, var.aval.vma | var.aval.unreduced, blocks)
                 for var, blocks in zip(program.invars, inputs)]
        key = (id(program), tuple(leads))
        entry = self._eager_plans.get(key)
        if entry is None or entry[0] is not program:
            if len(self._eager_plans) > 4096:
                self._eager_plans.clear()
            try:
                # prints come out in the reference's order (as a shard_map's body's do)
                plan = "debug_print" if prints(program) else BodyPlan(program, mesh, leads)
            except NotStackable as why:
                plan = why.reason
            entry = self._eager_plans[key] = (program, plan)
        plan = entry[1]
        if isinstance(plan, str):
            self.counts["reference"] += 1
            self.fallbacks[plan] += 1
            return super().run_mesh_program(mesh, program, inputs)
        stacked = [blocks.data if type(blocks) is StackedBlocks
                   else stack_blocks(blocks, mesh, lead) for blocks, lead in zip(inputs, leads)]
        if plan.quiet:
            with np.errstate(all="ignore"):
                outs = plan.run(*stacked)
        else:
            outs = plan.run(*stacked)
        self.counts["stacked"] += 1
        return [StackedBlocks(data, lead, mesh) for data, lead in zip(outs, plan.out_leads)]

    # an eager body runs each of its equations as a program (``run_mesh_program``, stacked),
    # not block by block (``eval_block``)
    eager_by_program = True

    def place_inputs(self, values, mesh, specs) -> list:
        """The inputs of an eager shard_map in their stacked form (a view where it can be)."""
        placed = []
        for value, spec in zip(values, specs):
            if not isinstance(value, Array):
                # a plain array (an np.matrix stays 2-d), and a copy where it is the caller's,
                # who may write into it later
                value = detached(np.asarray(_host(value)), value)
            held = to_stacked(value, mesh, canonical_spec(spec))
            placed.append(self.to_blocks(value, mesh, spec) if held is None
                          else StackedBlocks(held[0], held[1], mesh))
        return placed

    def from_blocks(self, blocks, mesh, spec):
        if type(blocks) is not StackedBlocks:
            return super().from_blocks(blocks, mesh, spec)
        spec = canonical_spec(spec)
        data = blocks.data
        shape = global_shape(data.shape[mesh.ndim:], spec, mesh.shape)
        sharding = NamedSharding(mesh, spec)
        return Array.from_stacked(typed_as_laid_out(Aval(shape, data.dtype), sharding), sharding,
                                  Stacked(data, blocks.lead, mesh, spec, shape))

    def execute(self, module, args) -> list:
        plan = module.__dict__.get("_stacked_plan")
        if plan is None:
            plan = module._stacked_plan = ModulePlan(module)
        return plan.run(args, self)

    def sharding_of(self, value):
        if not isinstance(value, Array):
            return None
        sharding = value.sharding
        if type(sharding) is NamedSharding:
            keyed = value.__dict__.get("_keyed_sharding")
            if keyed is None:
                keyed = value._keyed_sharding = keyed_sharding(sharding.mesh, sharding.spec)
            return keyed
        return sharding


BACKENDS = ("reference", "fast", "check")


def backend_named(name: str):
    """The backend ``SHARDC_BACKEND`` names: ``reference``, ``fast`` or ``check`` (both, with
    their results compared on every execution)."""
    if name == "reference":
        return ReferenceBackend()
    if name == "fast":
        return FastBackend()
    if name == "check":
        from runtime.vectorized_check import CheckingBackend
        return CheckingBackend()
    raise ValueError(f"unknown shardc backend {name!r}; expected one of {BACKENDS} "
                     "(SHARDC_BACKEND or shardc.set_backend_name)")


def default_backend_name() -> str:
    return os.environ.get("SHARDC_BACKEND", "fast") or "fast"
