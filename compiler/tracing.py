"""Tracing: turning Python functions over arrays into programs.

There is always a current trace. ``bind(prim, *args, **params)`` hands the primitive to it:
the eval trace runs it on concrete values (through the backend), a program trace records an
equation, a batching or shard trace applies its rule and binds again in its parent trace.
Values of an enclosing trace met inside a nested one are closed-over constants.
"""
from __future__ import annotations

import contextlib
import inspect
import operator
import sys
from typing import Any, Callable, Sequence

import numpy as np

from compiler import layouts as layouts_mod
from compiler.backend import get_backend
from compiler.replication import per_output, type_operands
from ir import collectives as coll
from ir import dtypes
from ir import primitives as prims
from ir.graph import runs_per_device
from ir.core import (Aval, Eqn, Literal, Program, SourceInfo, Var, check_index_conversion,
                     check_scalar_conversion, check_truth_value)
from ir.interpreter import Interpreter
from ir.module import runs_shard_map
from ir.shape_dtype import ShapeDtypeStruct
from ir.shapes import out_avals
from ir.sharding import (Mesh, NamedSharding, PartitionSpec, current_mesh, pop_mesh, push_mesh,
                         read_back_entries, same_layout)
from ir.sharding_rules import mesh_auto, mesh_explicit, named_sharding, typed_avals
from compiler.propagation import auto_mesh, on_first_of_twins
from ir.source import frame_source
from ir.verify import check_traced


# --- errors ------------------------------------------------------------------------------------

class JAXTypeError(TypeError):
    """The base of the tracer errors that are TypeErrors (JAX's ``jax.errors.JAXTypeError``)."""


class JAXIndexError(IndexError):
    """The base of the indexing errors (JAX's ``jax.errors.JAXIndexError``)."""


class ConcretizationTypeError(JAXTypeError):
    """A traced value was used where a concrete Python value is needed."""


class TracerIntegerConversionError(JAXTypeError):
    """``operator.index`` (``__index__``) of a traced integer value. As in JAX, not a
    ConcretizationTypeError: catch ``CONCRETIZATION_ERRORS`` for any value not known now."""


class TracerArrayConversionError(JAXTypeError):
    """``np.asarray`` (``__array__``) of a traced value (as in JAX, not a
    ConcretizationTypeError)."""


class NonConcreteBooleanIndexError(JAXIndexError):
    """Indexing with a traced boolean mask, whose result's shape depends on its values."""


def errors_link(cls) -> str:
    """The line JAX ends its tracer errors with: where its documentation explains them."""
    return f"\nSee https://docs.jax.dev/en/latest/errors.html#jax.errors.{cls.__name__}"


class TracerBoolConversionError(ConcretizationTypeError):
    """``if``, ``bool()`` or ``while`` on a traced value."""


class UnexpectedTracerError(JAXTypeError):
    """A traced value escaped the function that was being traced."""


# a traced value Python needed the value of, whichever conversion asked for it
CONCRETIZATION_ERRORS = (ConcretizationTypeError, TracerIntegerConversionError,
                         TracerArrayConversionError)


def check_callable(fun) -> None:
    """JAX's check of the function a transformation (``jit``, ``grad``, ``vmap``, ``vjp``,
    ...) is given, made when it is given: a staticmethod object (``@jit`` above
    ``@staticmethod``), anything not callable and a generator function are TypeErrors."""
    if isinstance(fun, staticmethod):
        raise TypeError(f"staticmethod arguments are not supported, got {fun}")
    if not callable(fun):
        raise TypeError(f"Expected a callable value, got {fun}")
    if inspect.isgeneratorfunction(fun):
        raise TypeError(f"Expected a function, got a generator function: {fun}")


# --- source info -------------------------------------------------------------------------------

def user_source() -> SourceInfo | None:
    """The innermost frame of user code: where the user wrote the operation. While a program
    is replayed (a transformation binding its equations again), the equation replayed."""
    replayed = _REPLAYED[-1]
    if replayed is not None:
        return replayed
    return frame_source(sys._getframe(1))


_REPLAYED: list = [None]    # the source of the equation being replayed, innermost last


class replaying:
    """``with replaying(eqn.source):`` equations made while replaying ``eqn`` (its JVP, its
    transpose, the equation itself bound again) carry the user's line of ``eqn``, as JAX's
    transformations keep an equation's source. A source of None keeps the enclosing one.
    ``replaying(eqn.source, traced_mesh(eqn))`` replays it under the mesh it was traced
    under too, where that is not the mesh set now."""
    __slots__ = ("source", "mesh")

    def __init__(self, source, mesh=None):
        self.source = source
        self.mesh = mesh

    def __enter__(self):
        _REPLAYED.append(self.source if self.source is not None else _REPLAYED[-1])
        if self.mesh is not None:
            push_mesh(self.mesh)

    def __exit__(self, *exc):
        _REPLAYED.pop()
        if self.mesh is not None:
            pop_mesh(self.mesh)


def traced_mesh(eqn):
    """The mesh of devices ``eqn``'s types are on where a mesh set now is another one (by its
    axes), else None. Typed values are computed under their own mesh, so the equation was
    traced under that one (a ``use_abstract_mesh`` block) as its results are; JAX replays an
    equation under the mesh it was traced under, as its transformations (a gradient's
    transpose) run after the block has ended."""
    context = current_mesh()
    if context is None:
        return None
    for var in eqn.outvars + eqn.invars:    # a reshard's results: where it was written
        typed = var.aval.type_sharding
        if typed is not None:
            mesh = typed.mesh
            if isinstance(mesh, Mesh) and mesh.abstract_mesh != context.abstract_mesh:
                return mesh
            return None
    return None


class Replay(Interpreter):
    """A program's equations bound again in the current trace, each under its own source line
    (so its errors are the tracer's, already naming the user's line): how a transformation
    runs a program it was given (a JVP, a batch, a remat's body). ``after(k)``, when given, is
    called after equation k."""
    locates_errors = False

    def __init__(self, after=None):
        self.after = after
        self.count = 0

    def read_literal(self, literal):
        return literal.value[()]

    def eval_equation(self, eqn, values):
        params = eqn.params
        if eqn.primitive is coll.pvary_p:
            params = _recast(params, values[0])
        if params is None:
            outs = values[0]
        else:
            with replaying(eqn.source, traced_mesh(eqn)):
                outs = bind(eqn.primitive, *values, **params)
        if self.after is not None:
            self.after(self.count)
        self.count += 1
        return outs if eqn.primitive.multiple_results else [outs]


def _recast(params: dict, operand):
    """A recorded ``pvary``'s parameters for ``operand``, which may vary over more axes now
    than when the program was traced (a branch replayed per member of a batch that varies):
    over the axes it does not vary over yet; None where that is none (no cast)."""
    vma = aval_of(operand).vma
    axes = tuple(a for a in params["mesh_axes"] if a not in vma)
    if not axes:
        return None
    return params if len(axes) == len(params["mesh_axes"]) else dict(params, mesh_axes=axes)


def eval_program(program: Program, args, consts=()) -> list:
    """Evaluate a program by binding each equation in the current trace."""
    return Replay().run(program, args, consts)


# --- values of finished traces that a transformation meets again -------------------------------

# A custom derivative rule is a Python closure: what it closed over when its function was
# traced may be a tracer of a trace that has finished when the rule runs (a gradient traces the
# function, then differentiates the program), or an array that is an input of the program now
# being traced. While the rule runs, those values read as what they are now:
# ``id(old value) -> (old value, value now)``, innermost mapping last.
_STALE: list = []


class resolving_stale:
    """``with resolving_stale(olds, nows):`` a value in ``olds`` met by a trace it does not
    belong to reads as the value at the same position of ``nows``."""
    __slots__ = ("mapping",)

    def __init__(self, olds, nows):
        self.mapping = {id(old): (old, now) for old, now in zip(olds, nows)
                        if old is not now and not is_python_scalar(old)}

    def __enter__(self):
        _STALE.append(self.mapping)

    def __exit__(self, *exc):
        _STALE.pop()


def stale_value(tracer):
    """What ``tracer`` (of a finished trace) reads as now; ``tracer`` itself if unknown."""
    for mapping in reversed(_STALE):
        entry = mapping.get(id(tracer))
        if entry is not None and entry[0] is tracer:
            return entry[1]
    return tracer


# --- traces ------------------------------------------------------------------------------------

# The Python functions whose conversions of a traced value JAX names in its error
_CONVERTERS = {"integer conversion": "int", "float conversion": "float",
               "complex conversion": "complex"}


def concretization_head(what: str, cls, traced: str) -> str:
    """The first line of JAX's error ``cls`` for ``what`` (``"boolean conversion"``, ...) of
    ``traced`` (``"traced array with shape f32[]"``), in JAX's words."""
    function = _CONVERTERS.get(what)
    if what == "boolean conversion":
        return f"Attempted boolean conversion of {traced}."
    if what == "integer conversion" and cls is TracerIntegerConversionError:
        return f"The __index__() method was called on {traced}"
    if what.startswith("conversion to a numpy array"):
        return f"The numpy.ndarray conversion method __array__() was called on {traced}"
    if function is not None:
        return ("Abstract tracer value encountered where concrete value is expected: "
                f"{traced}\nThe problem arose with the `{function}` function. If trying "
                "to convert the data type of a value, try using "
                f"`x.astype({function})` or `jnp.array(x, {function})` instead.")
    if cls is ConcretizationTypeError:
        # JAX's words for a concrete value asked of a traced one, then what asked
        return ("Abstract tracer value encountered where concrete value is expected: "
                f"{traced}\nIt arose in {what}.")
    return f"Attempted {what} of {traced}."


# JAX's names of the tracers a leaked value was wrapped in
_TRACER_NAMES = {"ProgramTracer": "DynamicJaxprTracer", "ShardTracer": "ShardMapTracer"}


def escaped_tracer_error(value) -> UnexpectedTracerError:
    """JAX's error for a traced value used after the function it was traced in returned
    (stored in a global, a closure, an attribute): its type, where it was made (where known)
    and how to catch the leak earlier."""
    kind = _TRACER_NAMES.get(type(value).__name__, type(value).__name__)
    text = ("Encountered an unexpected tracer. A function transformed by JAX had a side "
            "effect, allowing for a reference to an intermediate value with type "
            f"{value.aval.str_long()} wrapped in a {kind} to escape the scope of the "
            "transformation.\nJAX transformations require that functions explicitly return "
            "their outputs, and disallow saving intermediate values to global state.")
    source = _creation_source(value)
    if source is not None:
        text += ("\n------------------------------\nThe leaked intermediate value was created "
                 f"on line {source}" + (f" ({source.function})" if source.function else "")
                 + ".\n------------------------------")
    return UnexpectedTracerError(
        text + "\nTo catch the leak earlier, try setting the environment variable "
        "JAX_CHECK_TRACER_LEAKS or using the `jax.checking_leaks` context manager.")


def _creation_source(value):
    """The user's line that made a program tracer's value (None: an argument, or unknown)."""
    trace = getattr(value, "_trace", None)
    var_of = getattr(trace, "var_of", None)
    if var_of is None or id(value) not in var_of:
        return None
    trace._index_producers()
    k = trace._producer.get(var_of[id(value)])
    return None if k is None else trace.eqns[k].source

class Trace:
    """Where primitives go. Subclasses say how to hold values and process primitives."""
    parent: "Trace | None" = None

    def to_tracer(self, value) -> "Tracer":
        """``value`` as one of this trace's tracers: own tracers pass, others are constants."""
        if isinstance(value, Tracer) and value._trace is self:
            return value
        if _STALE:
            now = stale_value(value)
            if now is not value:
                return self.to_tracer(now)
        if isinstance(value, Tracer) and not self.is_descendant_of(value._trace):
            raise escaped_tracer_error(value)
        return self.lift(value)

    def is_descendant_of(self, other: "Trace") -> bool:
        trace = self.parent
        while trace is not None:
            if trace is other or trace.same_level(other):
                return True
            trace = trace.parent
        return False

    def same_level(self, other: "Trace") -> bool:
        """Whether ``other`` stands for this trace: a transformation that re-enters itself
        inside a nested body (vmap of a shard_map) takes the outer trace's values as its own."""
        return self is other

    def binds_axis_names(self) -> bool:
        """Whether this trace gives names to axes that collectives may name (a shard_map
        body's mesh axes, a vmap's axis name): a function traced on its own, apart from
        this trace, would not see them."""
        return False

    def vmapped_mesh_axes(self) -> tuple:
        """The mesh axes the batch of a vmap at or below this trace is split over by its
        Explicit type (JAX's explicit mesh axes of the axis environment)."""
        return self.parent.vmapped_mesh_axes() if self.parent is not None else ()

    def lift(self, value) -> "Tracer":
        raise NotImplementedError

    def process_primitive(self, prim, tracers, params):
        raise NotImplementedError

    def process_shard_map(self, fun, args, params):
        raise NotImplementedError(f"shard_map under {type(self).__name__}")


# Primitives an eager trace (this one, or an eager shard_map body) runs itself rather than
# handing them to the backend: ``rule(*values, **params) -> list of results`` binds other
# primitives in the current trace. A call (remat, custom_jvp/vjp) runs its body equation by
# equation, so a shard_map inside it runs as any shard_map does.
eager_rules: dict = {}


def _place(x, *, device, src):
    return get_backend().put([x], [device])


eager_rules[prims.device_put_p] = _place


class EvalTrace(Trace):
    """The bottom trace: primitives run at once on concrete values."""

    def to_tracer(self, value):
        if isinstance(value, Tracer):
            now = stale_value(value)
            if now is not value:
                return self.to_tracer(now)
            raise escaped_tracer_error(value)
        return value

    def process_primitive(self, prim, values, params):
        if runs_per_device(prim, params):
            # run eagerly, a partitioned print or callback sees whole values (JAX's)
            params = {k: v for k, v in params.items() if k != "partitioned"}
        # The shape and sharding rules run first so bad operands get the same errors as
        # under jit.
        typed = typed_avals(prim, [aval_of(v) for v in values], params)
        # on the device the committed operands are on, which must agree (JAX's device
        # assignment); else where the operands' layouts or the default device say
        backend = get_backend()
        device = backend.committed_device(values, prim.name)
        if typed and typed[0].unreduced and prim.kind == "op" and \
                prim is not prims.sharding_constraint_p and _whole(typed, values):
            # (split ones run partitioned, as any operation on split arrays)
            return _on_partial_sums(prim, values, params, typed)
        outs = self._run_primitive(prim, values, params, typed)
        if device is None or prim is prims.device_put_p:     # (placed where it asks)
            return outs
        return backend.on_device(outs, device)

    def _run_primitive(self, prim, values, params, typed):
        rule = eager_rules.get(prim)
        if rule is not None:
            return rule(*values, **params)
        split = split_mesh(typed, values, params)
        layouts = on_first_of_twins(layouts_of(values))
        if prim.name == "shard_map":
            # as jit runs it (lowered): its out_specs lay out its results
            from compiler.jit import execute_equation
            outs = execute_equation(prim, values, params)
        elif prim.kind == "higher" and runs_shard_map(params):
            # a loop or branch running a shard_map: as jit runs it, partitioned, its results
            # laid out as propagation types them from the shard_map's out_specs
            from compiler.jit import execute_partitioned
            outs, placed = execute_partitioned(prim, values, params, typed)
            if placed:
                check_invalid_values(outs, prim.name)
                return outs
        elif (prim.kind == "op" and split is not None and not prim.multiple_results
              and not (prim is prims.sharding_constraint_p
                       and (typed[0].ur or aval_of(values[0]).ur))
              or prim.kind in ("op", "higher") and prim is not prims.sharding_constraint_p
              and auto_mesh(layouts) is not None):
            # (a reshard to or from partial sums, or known-equal copies: laid out at once)
            # on split arrays (by their types, or on Auto axes by their layouts): block by
            # block, as under jit
            from compiler.jit import execute_partitioned
            outs, placed = execute_partitioned(prim, values, params, typed)
            if placed:            # on Auto axes: laid out as propagation typed them
                check_invalid_values(outs, prim.name)
                return outs
        else:
            if prim.kind == "higher":     # a loop or branch: its body runs on the backend
                from compiler.inline_calls import inline_params
                params = inline_params(params)
            outs = get_backend().eval_primitive(prim, values, params)
        check_invalid_values(outs, prim.name)
        mesh = split or placement_mesh(values)
        target = getattr(params.get("sharding"), "mesh", None)
        if prim is prims.sharding_constraint_p and mesh_explicit(target) and mesh_auto(target):
            return outs       # a constraint over Auto axes too: laid out as it asks
        if mesh is not None and prim is not prims.shard_map_p:   # (its out_specs place it)
            return placed_as_typed(outs, typed, mesh)
        replicated = auto_mesh(layouts, replicated=True) if prim.kind == "op" else None
        if replicated is None and prim.kind == "op":
            # made from nothing placed (an iota, host or uncommitted values) under a mesh
            context = context_auto_mesh()
            if context is not None and not any(getattr(v, "_committed", False)
                                               for v in values):
                replicated = context
        if replicated is not None and prim is not prims.sharding_constraint_p:
            # operands replicated on an Auto mesh: so are the results
            return placed_as_typed(outs, typed, replicated,
                                   _replicated_spelling(values, typed, replicated))
        return _follow_layouts(prim, values, layouts, outs)

    def process_shard_map(self, fun, args, params):
        from compiler.eager import run_shard_map_eagerly
        outs = run_shard_map_eagerly(self, fun, args, params)
        check_invalid_values(outs, "shard_map")
        return outs


def _replicated_spelling(values, typed, mesh) -> list:
    """How results replicated on an Auto ``mesh`` are spelt, as JAX reads them back: as the
    first operand's sharding where that is replicated on the mesh too and the result has its
    rank (``P(None, None)`` stays so), else ``P()``."""
    plain = NamedSharding(mesh, PartitionSpec())
    first = getattr(values[0], "sharding", None) if values else None
    if not (isinstance(first, NamedSharding) and first.mesh == mesh
            and not read_back_entries(first.spec, mesh)):
        return [plain] * len(typed)
    rank = len(values[0].shape)
    return [first if aval.ndim == rank else plain for aval in typed]


def _whole(typed, values) -> bool:
    """Whether no result nor operand is split by its type."""
    return all(a.type_sharding is None for a in typed) and all(
        aval_of(v).type_sharding is None for v in values)


def _on_partial_sums(prim, values, params, typed) -> list:
    """An operation whose result is unreduced (its rule allowed it: linear in the partial
    sums) run at once on arrays whole on every device: device by device on each operand's
    block, as JAX runs it; the unreduced operands hold their terms, the others the value."""
    backend = get_backend()
    mesh = next(v.sharding.mesh for v in values if aval_of(v).unreduced)
    blocks = [backend.to_blocks(v, mesh, v.sharding.spec if aval_of(v).unreduced
                                else PartitionSpec()) for v in values]
    per_position = [backend.eval_primitive(prim, [b[p] for b in blocks], params)
                    for p in range(mesh.size)]
    return [backend.from_blocks([np.asarray(outs[k]) for outs in per_position], mesh,
                                PartitionSpec(unreduced=aval.unreduced, reduced=aval.reduced))
            for k, aval in enumerate(typed)]


# --- jax_debug_nans / jax_debug_infs: invalid values from operations run at once -------------

_invalid_checks: set = set()         # "nan" and/or "inf"


def set_invalid_value_check(kind: str, enabled: bool) -> None:
    """Raise FloatingPointError when an operation run outside any trace (eagerly, or a jitted
    call's outputs) produces a NaN (``kind='nan'``) or an infinity (``'inf'``)."""
    (_invalid_checks.add if enabled else _invalid_checks.discard)(kind)


# Settings that change what tracing a function gives (besides x64): a jitted function's traces
# are cached per value of them all. One at its default is left out of the key, so a trace made
# before the setting was ever set is the trace made at its default.
_trace_settings: dict = {}
_trace_settings_key = [()]
trace_setting_defaults: dict = {}     # flag name -> its default


def set_trace_setting(name: str, value, default=None) -> None:
    """Record a setting that tracing reads (config flag ``name``'s value): traces made under
    one value are not reused under another."""
    trace_setting_defaults[name] = default
    if value == default:
        _trace_settings.pop(name, None)
    else:
        _trace_settings[name] = value
    _trace_settings_key[0] = tuple(sorted(_trace_settings.items()))


def trace_settings() -> tuple:
    """The settings tracing reads that differ from their defaults, as a hashable key of
    (flag name, value) pairs."""
    return _trace_settings_key[0]


_static_index_checks = [False]


def set_static_index_check(enabled: bool) -> None:
    """Raise IndexError for a static integer index out of bounds where indexing would clamp
    it (JAX's ``jax_check_static_indices``)."""
    _static_index_checks[0] = bool(enabled)
    set_trace_setting("jax_check_static_indices", bool(enabled), False)


def static_index_check_on() -> bool:
    return _static_index_checks[0]


def invalid_value_checks_on() -> bool:
    return bool(_invalid_checks)


def check_invalid_values(values, where: str) -> None:
    """FloatingPointError ``invalid value (nan) encountered in {where}``, as JAX raises."""
    if not _invalid_checks:
        return
    for value in values:
        if not dtypes.is_inexact(aval_of(value).dtype):
            continue
        array = np.asarray(value)
        for kind, test in (("nan", np.isnan), ("inf", np.isinf)):
            if kind in _invalid_checks and np.any(test(array)):
                if where == "shard_map":        # (JAX's words for a shard_map's results)
                    raise FloatingPointError(
                        f"Invalid value ({kind}) encountered in sharded computation.")
                raise FloatingPointError(f"invalid value ({kind}) encountered in {where}")


def split_mesh(typed, values, params):
    """The mesh whose Explicit axes split an operation's results (``typed``) or operands, or
    that its ``out_sharding`` names; None when types name no split."""
    for aval in typed:
        if aval.type_sharding is not None:
            return aval.type_sharding.mesh
    for value in values:
        sharding = aval_of(value).type_sharding
        if sharding is not None:
            return sharding.mesh
    given = params.get("out_sharding") if params else None
    return getattr(given, "mesh", None)


def placement_mesh(values):
    """The Explicit mesh unsplit results stay on, replicated (JAX's ``P(None, ...)``): that
    of an operand laid out on one, else the current mesh when it is one; None otherwise."""
    for value in values:
        sharding = getattr(value, "sharding", None)
        if isinstance(sharding, NamedSharding) and mesh_explicit(sharding.mesh):
            return sharding.mesh
    mesh = current_mesh()
    return mesh if mesh_explicit(mesh) else None


def context_auto_mesh():
    """The mesh set as the context when none of its axes is Explicit: values made or computed
    under it from unplaced operands are laid out on it, replicated (JAX's ``P()``); None
    otherwise."""
    mesh = current_mesh()
    return mesh if mesh is not None and not mesh_explicit(mesh) else None


def typed_sharding(aval, mesh) -> NamedSharding:
    """The layout a value of type ``aval`` has on ``mesh``: as its type splits it, else
    replicated (one ``None`` per dimension, as JAX spells it)."""
    return named_sharding(aval) or NamedSharding(mesh, PartitionSpec(
        *[None] * aval.ndim, unreduced=aval.unreduced, reduced=aval.reduced))


def placed_as_typed(outs, typed, mesh, shardings=None):
    """Eager results laid out as their types say (replicated where the type names no split):
    an operation on sharded arrays keeps its results on the mesh, as under jit.
    ``shardings``: how each result reports its layout, where not as its type spells it."""
    placed = []
    for k, (out, aval) in enumerate(zip(outs, typed)):
        sharding = shardings[k] if shardings is not None else typed_sharding(aval, mesh)
        if out.sharding is sharding:
            placed.append(out)            # laid out and spelt so already
            continue
        if aval.type_sharding is None and not isinstance(out.sharding, NamedSharding):
            # a value every process holds whole, now said to be on the mesh's devices
            out = type(out).from_global(np.asarray(out), sharding)
        elif not same_layout(out.sharding, sharding):
            (out,) = get_backend().eval_primitive(prims.sharding_constraint_p, [out],
                                                  {"sharding": sharding})
        if tuple(out.sharding.spec) != tuple(sharding.spec):
            out = out.respelled(sharding)   # computed results report one spec entry per dim
        placed.append(out)
    return placed


class TypedPlacement:
    """``placed_as_typed`` for one compiled program's results, called at each of its runs: a
    result laid out as its type says but spelt otherwise (``P()`` where the type spells
    ``P(None,)``) is respelt without the checks once a run gave that layout object."""
    __slots__ = ("typed", "mesh", "shardings", "respelt")

    def __init__(self, typed, mesh, shardings):
        self.typed, self.mesh, self.shardings = typed, mesh, shardings
        self.respelt = [None] * len(typed)      # by result: a layout known to need respelling

    def __call__(self, outs):
        shardings, respelt = self.shardings, self.respelt
        placed = list(outs)
        for k, out in enumerate(outs):
            sharding = out.sharding
            if sharding is shardings[k]:
                continue
            if sharding is respelt[k]:
                placed[k] = out.respelled(shardings[k])
                continue
            (placed[k],) = placed_as_typed([out], [self.typed[k]], self.mesh, [shardings[k]])
            if isinstance(sharding, NamedSharding) and same_layout(sharding, shardings[k]):
                respelt[k] = sharding
        return placed


def _follow_layouts(prim, values, layouts, outs):
    """Eager results of operations on laid-out arrays (``layouts``: the operands'): laid out
    as their operands where the layout follows (elementwise), else marked as having an
    unknown layout (compiler.layouts)."""
    if prim is prims.sharding_constraint_p or not any(
            layouts_mod.meaningful(l) for l in layouts):
        return outs
    if prim in layouts_mod.ELEMENTWISE:
        # an operand of unknown layout is laid out as it lies: elementwise, JAX's result is
        # laid out as that (a gradient's result, say, on its mesh)
        layouts = [v.sharding if l is layouts_mod.UNKNOWN
                   and isinstance(getattr(v, "sharding", None), NamedSharding) else l
                   for v, l in zip(values, layouts)]
    result = layouts_mod.result_layout(prim, layouts, [aval_of(v).shape for v in values],
                                       [aval_of(o).shape for o in outs])
    placed = []
    for out, layout in zip(outs, result):
        if layout is layouts_mod.UNKNOWN:
            out._unknown_layout = True
        elif layout is not None:
            (out,) = get_backend().eval_primitive(prims.sharding_constraint_p, [out],
                                                  {"sharding": layout})
        placed.append(out)
    return placed


eval_trace = EvalTrace()
_current: list = [eval_trace]


def current_trace() -> Trace:
    return _current[-1]


def enclosing_spmd_axes() -> frozenset:
    """The mesh axes that the vmaps being traced split their batch over (``spmd_axis_name``;
    JAX's axis environment's spmd names)."""
    names: set = set()
    trace = current_trace()
    while trace is not None:
        names.update(getattr(trace, "spmd_axis_name", None) or ())
        trace = trace.parent
    return frozenset(names)


# How many jit bodies are being traced (staged out, or inlined under a transformation): in
# them every value is abstract, as in JAX, so none is known now, whatever the trace below.
_staging = [0]


@contextlib.contextmanager
def staging():
    _staging[0] += 1
    try:
        yield
    finally:
        _staging[0] -= 1


def values_known_now() -> bool:
    """Whether a value computed from known inputs may be handed to Python: not in a body jit
    traces."""
    return _staging[0] == 0


def known_if_concrete(values, shard):
    """``values`` as what a trace at them may read (``trace_to_program``'s ``known``): where
    they are known now, outside shard_map bodies (``shard``: the body's context); else None."""
    return values if shard is None and values_known_now() else None


def device_put_traced(value, target, src=None):
    """``device_put`` of a traced ``value`` to ``target`` (a device or a NamedSharding). Where
    the value is known while tracing (a gradient's trace at concrete inputs, a jvp), it is
    placed as asked, and its cotangent goes back to ``src`` (default: where the value lies),
    as JAX's transpose sends it; under jit a sharding lays it out and a device changes
    nothing, as in JAX."""
    source = _known_placement(value)
    explicit = isinstance(target, NamedSharding) and mesh_explicit(target.mesh)
    aval = aval_of(value)
    if source is not None and not explicit and aval.type_sharding is None and not aval.ur:
        return bind(prims.device_put_p, value, device=target,
                    src=source if src is None else src)
    if not isinstance(target, NamedSharding):
        return value
    return bind(prims.sharding_constraint_p, value, sharding=target)


def _known_placement(value):
    """The device or sharding ``value`` lies on, where it is known now; else None."""
    if not values_known_now():
        return None
    try:
        known = value.concrete_value("device_put", ConcretizationTypeError) \
            if isinstance(value, Tracer) else value
    except CONCRETIZATION_ERRORS:
        return None
    backend = get_backend()
    sharding = backend.sharding_of(known) or backend.default_sharding()
    return getattr(sharding, "device", sharding)       # a device for a single-device layout


def innermost_trace(kinds: tuple):
    """The innermost trace (the latest set) of one of ``kinds``, or None."""
    return next((t for t in reversed(_current) if isinstance(t, kinds)), None)


@contextlib.contextmanager
def set_current_trace(trace: Trace):
    _current.append(trace)
    try:
        yield trace
    finally:
        _current.pop()


def bind(prim, *args, **params):
    """Apply a primitive in the current trace; one result unless it has multiple results.
    The results of an operation that keeps weak types are weakly typed when its operands all
    are (``weakly_typed``)."""
    trace = current_trace()
    operands = [trace.to_tracer(a) for a in args]
    outs = trace.process_primitive(prim, operands, params)
    if prim in WEAK_KEEPING:
        if args and _all_weak(args[1:] if prim is prims.select_n_p else args):
            outs = [weakened(o) for o in outs]
    elif prim in WEAK_AS_OPERAND:
        if args and weakly_typed(args[0]):
            outs = [weakened(o) for o in outs]
    elif prim is prims.sort_p:
        # each sorted operand keeps its own weak type (argsort's indices are typed)
        outs = [weakened(o) if weakly_typed(a) else o for o, a in zip(outs, args)]
    return outs if prim.multiple_results else outs[0]


def check_closed_over(aval, shard, value=None) -> None:
    """JAX's NotImplementedError for a shard_map body closing over an array on a mesh with
    Explicit axes (split over them by its type, or laid out on such a mesh at all: JAX reads
    the mesh in its type), where the body's mesh has no Explicit axis left (the body's own
    axes are Manual: an argument says how to split it). A body that leaves some Explicit
    axes automatic sees such a value as typed outside it; a host value is no array of a mesh.
    """
    if any(a not in shard.manual for a in shard.mesh.explicit_axes):
        return
    explicit = ()
    if aval.type_sharding is not None and any(aval.type_sharding.spec):
        explicit = aval.type_sharding.mesh.explicit_axes
    elif value is not None:
        layout = layouts_mod.layout_of(value)
        explicit = getattr(getattr(layout, "mesh", None), "explicit_axes", ())
    if explicit:
        raise NotImplementedError(
            "Closing over inputs to shard_map where the input is sharded on `Explicit` axes "
            "is not implemented. As a workaround, please pass those inputs as an argument to "
            f"shard_map. Got input with shape {aval.str_short()}({{Explicit: "
            f"{tuple(explicit)}}})")


def weakly_typed(value) -> bool:
    """Whether ``value`` is weakly typed (JAX's weak_type): a Python number (not a bool), an
    array made from one, a traced value standing for one, or what only such values
    computed."""
    return type(value) in _WEAK_NUMBERS or getattr(value, "weak", False) is True


# JAX's weakly typed scalars: Python ints, floats and complex numbers (a bool is typed)
_WEAK_NUMBERS = frozenset((int, float, complex))


def _all_weak(values) -> bool:
    for v in values:
        if getattr(v, "weak", False) is not True:
            return False
    return True


def weakened_where(values, weak) -> list:
    """``values``, each marked weakly typed where ``weak`` says (a higher-order operation's
    results, weakly typed where the function it traced gave them so, as JAX types them)."""
    if True not in weak:
        return list(values)
    return [weakened(v) if w else v for v, w in zip(values, weak)]


def weakened(value):
    """``value`` marked weakly typed: a tracer that carries the mark, or an array (a copy
    where it is not weak already); other tracers as they are."""
    if isinstance(value, Tracer):
        if hasattr(type(value), "weak"):      # the tracers that carry the mark
            value.weak = True
        return value
    with_weak = getattr(value, "with_weak", None)
    return value if with_weak is None else with_weak(True)


# The operations whose results are weakly typed when their operands all are, as JAX's
# (elementwise, comparisons included, moving and selecting elements, contractions); a
# reduction, a conversion or a cumulative operation gives a typed result.
WEAK_KEEPING = frozenset(getattr(prims, f"{name}_p") for name in (
    "abs acos acosh add and asin asinh atan atan2 atanh cbrt ceil cos cosh div eq erf erf_inv "
    "erfc exp exp2 expm1 floor ge gt le lgamma log log1p logistic lt max min mul ne neg "
    "nextafter not or pow rem round rsqrt sign sin sinh sqrt sub tan tanh xor digamma "
    "population_count bessel_i0e bessel_i1e real imag conj polygamma igamma igammac "
    "igamma_grad_a zeta zeta_grad_s shift_left shift_right_arithmetic shift_right_logical "
    "complex reduce_precision is_finite integer_pow "
    "broadcast_in_dim concatenate dynamic_update_slice pad reshape rev "
    "select_n slice squeeze transpose sharding_constraint stop_gradient copy "
    "dot_general").split())
# The operations whose results are weakly typed when their first operand is, whatever the
# indices or updates (JAX's gathers, dynamic slices and scatters)
WEAK_AS_OPERAND = frozenset(getattr(prims, f"{name}_p") for name in
                            "dynamic_slice gather scatter".split())


def _note_equation(err: Exception, prim, tracers, params) -> None:
    """Name, on an error raised while typing an equation, the equation (its operands' types)
    and the user's line that wrote it."""
    if getattr(err, "shardc_equation", None) is not None:
        return
    from ir.printer import format_param
    shown = " ".join(f"{k}={format_param(v)}" for k, v in sorted(params.items())
                     if not hasattr(v, "eqns"))
    operands = " ".join(t.aval.str_short() for t in tracers)
    source = user_source()
    where = f" at {source}" if source is not None else ""
    err.shardc_equation = (f"while tracing {prim}{f'[{shown}]' if shown else ''} of "
                           f"{operands or 'no operands'}{where}")
    err.add_note(err.shardc_equation)


# --- tracers -----------------------------------------------------------------------------------

class Tracer:
    """A value under a trace. Array methods and operators are installed by ``shardc.numpy``."""
    __array_priority__ = 1000
    _trace: Trace

    @property
    def aval(self) -> Aval:
        raise NotImplementedError

    def __copy__(self):
        """``copy.copy`` of a traced value: the value itself (it is immutable; a copy made
        field by field would be a value its trace does not know)."""
        return self

    def __deepcopy__(self, memo):
        """``copy.deepcopy``: the value itself, not a copy of its trace."""
        return self

    @property
    def shape(self):
        return self.aval.shape

    @property
    def dtype(self):
        return self.aval.dtype

    @property
    def ndim(self):
        return self.aval.ndim

    @property
    def mat(self):
        """JAX's ``x.mat``: the mesh axes the value varies over, is unreduced and reduced
        over (its type's ManualAxisType)."""
        return self.aval.mat

    @property
    def sharding(self):
        """Not available on a traced value, as JAX's (an AttributeError, so that ``hasattr``
        and ``getattr`` with a default see none): its type says how it is split
        (``jax.typeof(x).sharding``); shardc's own code reads ``traced_sharding()``."""
        raise AttributeError(
            "The 'sharding' attribute is not available on traced array with shape "
            f"{self.aval.str_long(self._axis_order())}. To query sharding information on "
            "tracers, use `jax.typeof(x)`.")

    def traced_sharding(self):
        """The layout the traced value is known to have, or None: where its operands' layouts
        do not say it, the one its type says (on Explicit axes the type is the layout)."""
        layout = self._layout()
        if layout is None or layout is layouts_mod.UNKNOWN:
            return named_sharding(self.aval)
        return layout

    def _layout(self):
        """The layout of the value traced (compiler.layouts): None, a sharding or UNKNOWN."""
        return None

    @property
    def size(self):
        return self.aval.size

    @property
    def nbytes(self):
        return self.aval.nbytes

    @property
    def itemsize(self):
        return self.aval.dtype.itemsize

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d array")
        return (self[k] for k in range(self.shape[0]))

    # Python asks for a truth value or an integer (``if x < 3``, ``range(n)``): a tracer whose
    # value is known now gives it, as JAX's concrete tracers do; a float, complex or numpy
    # conversion only where JAX would not have traced the value (``_known_exact``); any other
    # raises JAX's error
    def __bool__(self):
        check_truth_value(self.aval)
        return bool(self.concrete_value("boolean conversion", TracerBoolConversionError))

    def __int__(self):
        check_scalar_conversion(self.aval)
        return int(self.concrete_value("integer conversion", ConcretizationTypeError))

    def __float__(self):
        check_scalar_conversion(self.aval)
        return float(self._known_exact("float conversion", ConcretizationTypeError))

    def __complex__(self):
        check_scalar_conversion(self.aval)
        return complex(self._known_exact("complex conversion", ConcretizationTypeError))

    def item(self, *args):
        """One element as a Python scalar, where the value is known now (as JAX's)."""
        return np.asarray(self.concrete_value("conversion in item()",
                                              ConcretizationTypeError)).item(*args)

    # a traced value's elements are Python's only where JAX hands the value to Python as an
    # array (``_known_exact``); else JAX's error naming the method
    def tolist(self):
        return self._host_value("tolist").tolist()

    def tobytes(self, order="C"):
        return self._host_value("tobytes").tobytes(order)

    def _host_value(self, method: str) -> np.ndarray:
        try:
            return np.asarray(self._known_exact(f"conversion in {method}()",
                                                ConcretizationTypeError))
        except ConcretizationTypeError:
            raise self._method_error(method) from None

    def _method_error(self, method: str):
        shape = self.aval.str_long(self._axis_order(), short=True)
        return ConcretizationTypeError(
            "Abstract tracer value encountered where concrete value is expected: The "
            f"{method}() method was called on traced array with shape {shape}."
            + errors_link(ConcretizationTypeError))

    def _known_exact(self, what: str, cls):
        """The value of a boolean or integer tracer, or of one that depends on no input of
        its transformation, where it is known now: such a value has no derivative and no
        batch, so JAX hands it to Python as an array; any other stays JAX's error ``cls``."""
        if dtypes.is_inexact(self.aval.dtype) and not self.independent_of_inputs():
            raise self._concretization_error(what, cls)
        try:
            return self.concrete_value(what, cls)
        except CONCRETIZATION_ERRORS:
            raise self._concretization_error(what, cls) from None

    def __index__(self):
        check_index_conversion(self.aval)       # (before the value is asked for, as JAX's)
        return operator.index(self.concrete_value("integer conversion",
                                                  TracerIntegerConversionError))

    def concrete_value(self, what: str, cls):
        """This tracer's value, where it is known while tracing; else ``cls``, JAX's error
        for ``what`` (``"boolean conversion"``)."""
        raise self._concretization_error(what, cls)

    def independent_of_inputs(self) -> bool:
        """Whether this value depends on no input of its transformation (computed from
        constants only): JAX would not have traced it."""
        return False

    def __array__(self, dtype=None, copy=None):
        value = self._known_exact("conversion to a numpy array (the numpy.ndarray "
                                  "conversion method __array__() was called)",
                                  TracerArrayConversionError)
        return np.asarray(value, dtype)

    def _concretization_error(self, what: str, cls):
        """JAX's error ``cls`` for ``what`` (``"boolean conversion"``, ...), its first line in
        JAX's words, then the user's line and what to do instead."""
        head = concretization_head(
            what, cls, f"traced array with shape {self.aval.str_long(self._axis_order())}")
        src = user_source()
        return cls(
            f"{head}\nThe error occurred while tracing{f' at {src}' if src else ''}: the value "
            "is only known when the program runs, so Python control flow cannot depend on it; "
            "use shardc.numpy.where or lax control flow instead, or mark the argument static."
            f"{errors_link(cls)}")

    def __repr__(self):
        return f"Traced<{self.aval.str_short(self._axis_order())}>"

    __str__ = __repr__

    def _axis_order(self) -> tuple:
        return ()

    # unhashable, as JAX's tracers (no collections.abc.Hashable either)
    __hash__ = None


def inner_concrete(value, what: str, cls):
    """What a transformation's tracer wraps, as a value: itself, or what its own tracer
    knows (``concrete_value``)."""
    return value.concrete_value(what, cls) if isinstance(value, Tracer) else value


def inner_independent(value) -> bool:
    """Whether what a transformation's tracer wraps depends on no input (a value does not)."""
    return not isinstance(value, Tracer) or value.independent_of_inputs()


def value_if_known(value):
    """A tracer's value as a numpy array (a numpy scalar for one of rank 0) where it is known
    now (what a gradient outside jit computes from its inputs: JAX hands such values to
    Python as arrays), else ``value`` as it is."""
    if not isinstance(value, Tracer):
        return value
    try:
        known = value.concrete_value("conversion to a value", ConcretizationTypeError)
    except ConcretizationTypeError:
        return value
    return np.asarray(known)[()]


def abstract_value_error(tracer, context: str) -> ConcretizationTypeError:
    """JAX's ConcretizationTypeError for a traced value where a concrete one is needed,
    ``context`` saying where."""
    return ConcretizationTypeError(
        "Abstract tracer value encountered where concrete value is expected: traced array "
        f"with shape {aval_of(tracer).str_long()}\n{context}"
        f"{errors_link(ConcretizationTypeError)}")


def concrete_or_error(value, context: str):
    """``value`` where it is known now (a traced one as a numpy value); JAX's
    ConcretizationTypeError with ``context`` where it is traced (JAX's
    ``core.concrete_or_error``). Values inside a container are left as they are."""
    value = value_if_known(value)
    if isinstance(value, Tracer):
        raise abstract_value_error(value, context)
    return value


def concrete_index(value, context: str) -> int:
    """``operator.index(value)`` where ``value`` is known now; JAX's ConcretizationTypeError
    with ``context`` where it is traced (JAX's ``concrete_dim_or_error``)."""
    return operator.index(concrete_or_error(value, context))


def static_int(value, what: str) -> int:
    """``value`` as a Python int where it is known now (a number, or a traced value a
    gradient outside jit knows); JAX's ConcretizationTypeError naming ``what`` where it is
    traced."""
    value = value_if_known(value)
    if isinstance(value, Tracer):
        raise ConcretizationTypeError(
            f"Attempted conversion of a traced value to a static integer ({what}): shapes "
            f"and sizes must be known when tracing, but {value.aval.str_short()} is traced "
            f"here.{errors_link(ConcretizationTypeError)}")
    return operator.index(value)


def known_nested(value):
    """``value`` (a number, or nested lists and tuples of them) with every known traced
    value replaced by its value."""
    if isinstance(value, (list, tuple)):
        return type(value)(known_nested(v) for v in value)
    return value_if_known(value)


# Installed by shardc.numpy: the array methods and operators of tracers and Arrays.
def install_array_methods(cls, methods: dict) -> None:
    for name, method in methods.items():
        setattr(cls, name, method)


# --- concrete values ---------------------------------------------------------------------------

def is_python_scalar(value) -> bool:
    return isinstance(value, (bool, int, float, complex)) and not isinstance(value, np.generic)


_VALID_TYPES_TEXT = ("expected an array, or a scalar, of bool, integer, floating or complex "
                     "dtype")


def masked_array_error() -> ValueError:
    """JAX's refusal of a numpy masked array: its mask would be dropped silently."""
    return ValueError("numpy masked arrays are not supported as direct inputs to JAX "
                      "functions. Use arr.filled() to convert the value to a standard numpy "
                      "array.")


def check_jax_value(value, where: str) -> None:
    """Raise unless ``value`` is something a program computes on: a traced value, an array or
    a scalar of bool, integer, floating or complex dtype (a ``shardc.Array``, a numpy array or
    scalar, a Python scalar, a ``ShapeDtypeStruct``).

    ``where`` names the value for the user (``"jit argument args[0]"``). A Python int outside
    the default integer type (int32 with x64 off) is an OverflowError: it has nowhere to go
    but wrap around.

    >>> check_jax_value("abc", "args[0]")
    Traceback (most recent call last):
    TypeError: Argument 'abc' of type <class 'str'> is not a valid JAX type (args[0] is ...
    """
    if isinstance(value, np.ma.MaskedArray):
        raise masked_array_error()
    if is_jax_value(value):
        return
    if hasattr(type(value), "__jax_array__"):
        raise ValueError("Triggering __jax_array__() during abstractification is no longer "
                         f"supported. {where} is of type {type(value).__name__}: convert it "
                         "with jnp.asarray first, or register it as a pytree")
    if is_python_scalar(value):         # only an int out of range is refused
        default = dtypes.int_
        raise OverflowError(f"{where} is the Python int {value}, too large to convert to "
                            f"{default} (the default integer type"
                            + ("; x64 is off)" if default.itemsize < 8 else ")"))
    dtype = _dtype_of(value)
    if dtype == dtypes.FLOAT0:
        raise TypeError(f"{where} is a float0 array. float0s do not support any operations by "
                        "design because they are not compatible with non-trivial vector "
                        "spaces. No implicit dtype conversion is done. You can use "
                        "np.zeros_like(arr, dtype=np.float) to cast a float0 array to a "
                        "regular zeros array. \nIf you didn't expect to get a float0 you "
                        "might have accidentally taken a gradient with respect to an integer "
                        "argument.")
    if dtype is None:
        # JAX's sentence, then where the value was passed
        raise TypeError(f"Argument {_short_repr(value)} of type {type(value)} is not a valid "
                        f"JAX type ({where} is {_short_repr(value)} of type "
                        f"{type(value).__name__}, which is not a valid JAX type: "
                        f"{_VALID_TYPES_TEXT})")
    raise TypeError(f"{where} is {_short_repr(value)} of dtype {np.dtype(dtype).name}, "
                    f"which is not a valid JAX type: {_VALID_TYPES_TEXT}")


def layout_of_value(value):
    """A value's layout as shardc knows it: a traced one's (``traced_sharding``), an array's
    ``sharding``; None for anything else."""
    if isinstance(value, Tracer):
        return value.traced_sharding()
    return getattr(value, "sharding", None)


def check_returned_values(outs, result, fun, traced_for: str, describe) -> None:
    """``check_jax_leaves`` on the leaves ``outs`` of what ``fun`` returned (``result``), with
    JAX's words for a value of no array type at all: the function, where it is defined, what
    traced it and the result's path."""
    if all(is_jax_value(leaf) for leaf in outs):
        return
    from compiler.tree import leaf_paths
    from ir.source import where_defined
    for leaf, path in zip(outs, leaf_paths(result)):
        if _dtype_of(leaf) == dtypes.FLOAT0:
            continue                       # (an integer input's cotangent: no values)
        if not (is_jax_value(leaf) or is_python_scalar(leaf)
                or isinstance(leaf, np.ma.MaskedArray) or hasattr(type(leaf), "__jax_array__")):
            at = f" at output component {path}" if path else ""
            raise TypeError(f"function {where_defined(fun)} traced for {traced_for} returned a "
                            f"value of type {type(leaf)}{at}, which is not a valid JAX type")
        check_jax_value(leaf, describe(path))


def check_jax_leaves(leaves, tree_value, describe) -> None:
    """``check_jax_value`` on each of ``leaves`` (the flattened ``tree_value``); the leaf at
    key path ``path`` is named ``describe(path)``. Paths are worked out only on a failure, so
    the common call costs one cheap test per leaf."""
    if all(is_jax_value(leaf) for leaf in leaves):
        return
    from compiler.tree import leaf_paths
    for leaf, path in zip(leaves, leaf_paths(tree_value)):
        check_jax_value(leaf, describe(path))


def is_jax_value(value) -> bool:
    """Whether ``check_jax_value`` accepts ``value`` (never raises)."""
    if isinstance(value, Tracer):
        return True
    aval = getattr(value, "aval", None)
    if isinstance(aval, Aval):               # an array (the common case: asked first)
        return dtypes.is_valid(aval.dtype)
    if is_python_scalar(value):
        return type(value) is not int or in_default_int_range(value)
    dtype = _dtype_of(value)
    return dtype is not None and dtypes.is_valid(dtype)


def in_default_int_range(value: int) -> bool:
    """Whether a Python int fits the default integer type (int64 with x64 on)."""
    info = np.iinfo(dtypes.int_)
    return info.min <= value <= info.max


def _dtype_of(value):
    """The dtype of an array-like value we accept, or None for anything else."""
    aval = getattr(value, "aval", None)
    if isinstance(aval, Aval):
        return aval.dtype
    if isinstance(value, (np.ndarray, np.generic)):
        return value.dtype
    return None


def _short_repr(value) -> str:
    text = repr(value)
    if isinstance(value, np.ndarray):
        text = f"an array of shape {value.shape}"
    return text if len(text) <= 60 else text[:57] + "..."


def concrete_aval(value) -> Aval:
    """The aval of a concrete value (numpy, Python scalar, or a backend array)."""
    scalar = _SCALAR_AVALS.get(type(value))
    if scalar is not None:
        return scalar
    aval = getattr(value, "aval", None)       # an array or a traced value (the common case)
    if aval is not None:
        return aval
    if isinstance(value, np.generic):          # a numpy scalar: one aval per type
        scalar = _SCALAR_AVALS[type(value)] = Aval((), dtypes.canonicalize(value.dtype))
        return scalar
    if is_python_scalar(value):           # one aval per type, until x64 flips
        scalar = _SCALAR_AVALS[type(value)] = Aval((), dtypes.weak_scalar_dtype(value))
        return scalar
    if isinstance(value, np.ma.MaskedArray):
        raise masked_array_error()
    array = np.asarray(value)
    if not dtypes.is_valid(array.dtype):       # a string, an object, ...: never computed on
        check_jax_value(value, "an operand")    # raises: value is no scalar, array or tracer
    return Aval(array.shape, dtypes.canonicalize(array.dtype))


_SCALAR_AVALS: dict = dtypes.register_cache({})


def aval_of(value) -> Aval:
    return value.aval if isinstance(value, Tracer) else concrete_aval(value)


def layouts_of(values) -> list:
    """Each value's layout (compiler.layouts; None for host values): what the tracers standing
    for them report, so a shard_map without in_specs reads the same specs traced as eagerly."""
    return [layouts_mod.layout_of(v) for v in values]


# --- program tracing ---------------------------------------------------------------------------

class ProgramTracer(Tracer):
    __slots__ = ("_trace", "_aval", "_sharding", "weak")

    def __init__(self, trace, aval: Aval):
        self._trace = trace
        self._aval = aval
        self._sharding = None
        # weakly typed (JAX's weak_type): a jit argument given as a Python scalar, or what
        # only such values computed; promotion treats it as it treats a Python scalar
        self.weak = False

    @property
    def aval(self):
        return self._aval

    def _layout(self):
        """The layout of the argument this tracer stands for under ``jit`` (what
        ``typeof(x).sharding`` reads, and what a shard_map without in_specs takes its specs
        from), followed through elementwise operations (compiler.layouts)."""
        return self._sharding

    def _axis_order(self):
        """Mesh order for printing vma; None (no braces) in a body with the check off."""
        shard = self._trace.shard
        if shard is None:
            return ()
        return shard.mesh.axis_names if shard.check_vma else None

    def concrete_value(self, what: str, cls):
        trace = self._trace
        if trace.known is None or not values_known_now():
            raise self._concretization_error(what, cls)
        return trace.known_value(trace.var_of[id(self)], what, cls)

    def independent_of_inputs(self) -> bool:
        trace = self._trace
        return (trace.known is not None and values_known_now()
                and not trace.reads_inputs(trace.var_of[id(self)]))


class ProgramTrace(Trace):
    """Records equations into a program. ``shard`` is set when tracing a shard_map body."""

    def __init__(self, parent: Trace, shard=None, staged: bool = False):
        self.parent = parent
        self.shard = shard
        self.staged = staged            # jit's: the program is staged out, not run as traced
        # a trace of a function at values known now (a gradient's): Var -> its value, or a
        # value of an enclosing trace that gives it; None where the inputs are abstract
        self.known: dict | None = None
        self.inputs: frozenset = frozenset()     # the argument Vars, where known is set
        self._producer: dict = {}       # Var -> index of the equation that made it
        self._scanned = 0               # equations _producer covers
        self.eqns: list = []
        self.var_of: dict = {}          # id(tracer) -> Var or Literal
        self.keep: list = []            # tracers kept alive so ids stay unique
        self.const_tracers: dict = {}   # id(value) -> tracer, for values closed over
        self.consts: list = []          # (Var, value) pairs

    def binds_axis_names(self) -> bool:
        return self.shard is not None

    def new_tracer(self, aval: Aval, atom=None) -> ProgramTracer:
        tracer = ProgramTracer(self, aval)
        self.var_of[id(tracer)] = atom if atom is not None else Var(aval)
        self.keep.append(tracer)
        return tracer

    def new_arg(self, aval: Aval) -> ProgramTracer:
        return self.new_tracer(aval)

    def _from_same_body(self, value) -> bool:
        """Whether ``value`` is a value of the shard_map body this trace is inside (a loop or
        branch body in it closing over the body's values), not one from outside the
        shard_map, which the body may not close over when its type is split."""
        trace = getattr(value, "_trace", None) if isinstance(value, Tracer) else None
        return trace is not None and getattr(trace, "shard", None) is self.shard

    def lift(self, value) -> ProgramTracer:
        """A closed-over value: a scalar becomes an inline literal, anything else a constant."""
        known = self.const_tracers.get(id(value))
        if known is not None:
            return known
        if isinstance(value, ShapeDtypeStruct):
            raise TypeError("A ShapeDtypeStruct does not have a value and cannot be used as a "
                            "constant in a JAX function.")
        # Values from outside every shard_map body carry no vma; those closed over from an
        # enclosing body (a loop body inside a shard_map) keep theirs.
        aval = aval_of(value)
        if not isinstance(value, Tracer) and aval.shape == ():
            if _is_plain_scalar(value):
                return self.new_tracer(aval, Literal(value, aval))
            if _is_free_scalar_array(value):
                # a rank-0 array made while tracing (jnp.asarray(2.0)) is inlined too, as
                # JAX's jaxprs inline it
                tracer = self.new_tracer(aval, Literal(np.asarray(value)[()], aval))
                tracer.weak = getattr(value, "weak", False) is True
                return tracer
        if self.shard is not None and not self._from_same_body(value):
            check_closed_over(aval, self.shard, value)
        tracer = self.new_tracer(aval)
        tracer.weak = getattr(value, "weak", False) is True
        if self.shard is None:
            tracer._sharding = layouts_mod.layout_of(value)
        # a numpy array is the caller's, who may write into it later: the program holds its
        # value as traced (JAX copies it to the device then)
        held = value.copy() if type(value) is np.ndarray else value
        self.consts.append((self.var_of[id(tracer)], held))
        self.const_tracers[id(value)] = tracer
        self.keep.append(value)
        return tracer

    def atom(self, tracer: ProgramTracer):
        return self.var_of[id(tracer)]

    def process_primitive(self, prim, tracers, params):
        try:
            if self.shard is None:          # outside shard_map bodies values carry no vma
                outs = [self.new_tracer(a.strip_vma())
                        for a in typed_avals(prim, [t.aval for t in tracers], params)]
            else:
                tracers, out_vma = type_operands(self, prim, tracers, params)
                # (typed where a partial-manual body's values are split over Explicit axes
                # it left automatic)
                avals = typed_avals(prim, [t.aval for t in tracers], params)
                outs = [self.new_tracer(a.with_vma(vma))
                        for a, vma in zip(avals, per_output(out_vma, len(avals)))]
        except Exception as err:
            _note_equation(err, prim, tracers, params)
            raise
        if self.shard is None and any(t._sharding is not None for t in tracers):
            for out, layout in zip(outs, layouts_mod.result_layout(
                    prim, [t._sharding for t in tracers], [t.aval.shape for t in tracers],
                    [o.aval.shape for o in outs])):
                out._sharding = layout
        self.add_eqn(prim, tracers, outs, params)
        return outs

    def add_eqn(self, prim, in_tracers, out_tracers, params):
        var_of = self.var_of
        self.eqns.append(Eqn(prim, [var_of[id(t)] for t in in_tracers],
                             [var_of[id(t)] for t in out_tracers], dict(params), user_source()))

    def process_shard_map(self, fun, args, params):
        from compiler.shard_map import stage_shard_map
        return stage_shard_map(self, fun, args, params)

    def known_value(self, atom, what: str, cls):
        """The value of ``atom``, computed from the known inputs by running, at once, the
        equations it depends on (those not run before). What Python asks of a value while
        a function is traced at known inputs, so the program follows the branch it takes."""
        if isinstance(atom, Literal):
            return atom.value
        known = self.known
        if atom not in known:
            self._run_cone(atom, what, cls)
        value = known[atom]
        if isinstance(value, Tracer):           # a value of an enclosing trace
            value = known[atom] = value.concrete_value(what, cls)
        return value

    def reads_inputs(self, target) -> bool:
        """Whether the value of ``target`` is computed from the trace's inputs (not from
        closed-over values and literals alone)."""
        self._index_producers()
        inputs = self.inputs
        seen, stack = set(), [target]
        while stack:
            var = stack.pop()
            if isinstance(var, Literal) or id(var) in seen:
                continue
            seen.add(id(var))
            if var in inputs:
                return True
            k = self._producer.get(var)
            if k is not None:
                stack.extend(self.eqns[k].invars)
        return False

    def _index_producers(self) -> None:
        producer, eqns = self._producer, self.eqns
        for k in range(self._scanned, len(eqns)):
            producer.update((v, k) for v in eqns[k].outvars)
        self._scanned = len(eqns)

    def _run_cone(self, target, what: str, cls) -> None:
        self._index_producers()
        producer, eqns = self._producer, self.eqns
        consts = dict(self.consts)
        needed, stack = set(), [target]
        while stack:
            var = stack.pop()
            if isinstance(var, Literal) or var in self.known:
                continue
            if var in consts:
                self.known[var] = consts[var]
                continue
            k = producer.get(var)
            if k is None:       # an input whose value is not known (a tangent)
                raise cls(f"Attempted {what} of a value computed from an argument whose "
                          "value is not known now")
            if k not in needed:
                needed.add(k)
                stack.extend(eqns[k].invars)
        root = _current[0]
        for k in sorted(needed):
            eqn = eqns[k]
            args = [self.known_value(v, what, cls) for v in eqn.invars]
            with set_current_trace(root), replaying(eqn.source, traced_mesh(eqn)):
                outs = bind(eqn.primitive, *args, **eqn.params)
            self.known.update(zip(eqn.outvars, outs if eqn.primitive.multiple_results
                                  else [outs]))

    def build(self, in_tracers: Sequence, out_values: Sequence) -> tuple[Program, list]:
        """The program from ``in_tracers`` to ``out_values``, and its closed-over values."""
        outs = [self.atom(self.to_tracer(v)) for v in out_values]
        constvars = [var for var, _ in self.consts]
        values = [value for _, value in self.consts]
        program = Program(constvars, [self.atom(t) for t in in_tracers], self.eqns, outs)
        return program, values


def _is_plain_scalar(value) -> bool:
    return is_python_scalar(value) or isinstance(value, np.generic) or (
        isinstance(value, np.ndarray) and value.shape == ())


def _is_free_scalar_array(value) -> bool:
    """A concrete rank-0 array placed nowhere in particular (uncommitted, not float0): its
    value is all a program needs of it."""
    return (is_jax_value(value) and getattr(value, "_committed", True) is False
            and not dtypes.is_float0(value))


# An argument of a trace at known values whose own value is not known (a tangent).
UNKNOWN = object()


def trace_to_program(fun: Callable, in_avals: Sequence[Aval], *, shard=None,
                     parent: Trace | None = None,
                     in_shardings: Sequence | None = None,
                     weak: Sequence[bool] | None = None,
                     staged: bool = False,
                     known: Sequence | None = None) -> tuple[Program, list, Any]:
    """Trace ``fun`` on abstract arguments. Returns (program, closed-over values, raw outputs).

    ``fun`` takes and returns flat lists of arrays. ``in_shardings``, one per argument (None
    for a host value), are the argument tracers' layouts (``traced_sharding``); ``weak``, one
    per argument, marks those weakly typed (Python scalars given to jit). ``staged``: jit's
    trace (transformations trace programs too, to run them). ``known``, one per argument: the
    values the function is traced at, where they are known (a gradient's; ``UNKNOWN`` for one
    that is not, a tangent), so Python may branch on what they compute, as JAX allows; the
    program follows the branches taken.
    """
    trace = ProgramTrace(parent or current_trace(), shard, staged)
    args = [trace.new_arg(a) for a in in_avals]
    if known is not None:
        trace.known = {trace.atom(arg): value for arg, value in zip(args, known)
                       if value is not UNKNOWN}
        trace.inputs = frozenset(trace.atom(arg) for arg in args)
    for arg, sharding in zip(args, in_shardings or ()):
        arg._sharding = sharding
    for arg, is_weak in zip(args, weak or ()):
        arg.weak = is_weak
    with set_current_trace(trace), (staging() if staged else contextlib.nullcontext()):
        outs = fun(*args)
    program, consts = trace.build(args, outs)
    check_traced(program)
    return program, consts, outs
