"""``jit`` and ``make_jaxpr``: trace once per signature, lower, cache, run.

The cache key is (argument structure, avals, input shardings, static arguments, the current
mesh, which a shard_map without ``mesh=`` reads when called, the x64 mode); a second call
with the same key runs the cached lowered module without tracing again.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import inspect
import logging
import math
import time
import types
import warnings
import weakref
from typing import Any, Callable, Sequence

import numpy as np

from compiler import tree
from compiler.backend import get_backend
from compiler.cache_miss import explanation
from compiler.checks import without_checks
from compiler.inline_calls import inline_calls
from compiler.inspection import done, inspected, placement_of
from compiler.refs import ClosedOverRef, is_ref, ref_type, swapped_in
from ir.shape_dtype import ShapeDtypeStruct
from compiler.lowering import lower_module
from compiler.passes.dce import dce
from compiler.shard_map import function_name, names_axes_in_scope
from ir.module import LoweredModule
from compiler.tracing import (Tracer, TypedPlacement, aval_of, check_callable,
                              check_invalid_values, check_jax_leaves, check_jax_value,
                              check_returned_values,
                              context_auto_mesh, current_trace, eval_program, eval_trace,
                              invalid_value_checks_on, is_jax_value, is_python_scalar,
                              layouts_of, placed_as_typed, placement_mesh, split_mesh, staging,
                              trace_settings, trace_to_program, typed_sharding, values_known_now,
                              user_source, weakened,
                              weakened_where, weakly_typed)
from compiler.layouts import meaningful
from ir import dtypes
from ir import primitives as prims
from ir import transfer_guard as _transfer_guard
from ir.core import Aval, Program, TypeSharding, Var, programs_in
from ir.float0 import float0_aval, float0_zeros
from ir.layout import Format, row_major, sharding_of_format
from ir.sharding import (EMPTY_CONCRETE_MESH, AbstractMesh, AxisType, arguments_on,
                         check_divides, check_rank, check_unique_axes, current_mesh,
                         Mesh, NamedSharding, PartitionSpec, pop_mesh, push_mesh, Sharding,
                         spec_axes, spec_names, UNCONSTRAINED)
from ir.sharding_rules import mesh_explicit, named_sharding, typed_avals
from compiler.partition import check_inserted, partition, type_meshes
from compiler.propagation import (annotated_meshes, on_first_of_twins, program_mesh, propagate,
                                  result_shardings, spelling_reference)
from ir.graph import (ORDERED_EFFECTS_ERROR, holds_equation, is_ordered_effect,
                      replace_sub_programs, sub_programs)
from ir.printer import print_program
from ir.source import where_defined


_jit_disabled = False


def set_jit_disabled(disabled: bool) -> None:
    """Run jitted functions op by op, untraced (``jax_disable_jit``)."""
    global _jit_disabled
    _jit_disabled = bool(disabled)


_no_tracing = False             # ``jax_no_tracing``: a jitted function traced is an error
_call_observer = None           # the profiler's, while it records a trace
_compile_observer = None        # jax.monitoring's: (event, fun_name, start, end) per step
_no_execution = False           # ``jax_no_execution``: a compiled program run is an error


_log_compiles = False
_logger = logging.getLogger(__name__)


def set_log_compiles(on: bool) -> None:
    """jax_log_compiles: each jitted function's tracing and lowering is logged at WARNING
    level (at DEBUG otherwise), as JAX logs its tracing and compiling."""
    global _log_compiles
    _log_compiles = bool(on)


def _log_compile_step(message: Callable[[], str]) -> None:
    level = logging.WARNING if _log_compiles else logging.DEBUG
    if _logger.isEnabledFor(level):
        _logger.log(level, message())


_explain_cache_misses = False


def set_explain_cache_misses(on: bool) -> None:
    """jax_explain_cache_misses: each time a jitted function is traced, why its traces so far
    did not serve (compiler.cache_miss) is logged at WARNING level."""
    global _explain_cache_misses
    _explain_cache_misses = bool(on)


def set_no_tracing(on: bool) -> None:
    global _no_tracing
    _no_tracing = bool(on)


# JAX's names for the steps of a jitted function's compilation (jax.monitoring events):
# shardc traces, then partitions and lowers (its "backend compile"; it has no MLIR step)
TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def set_compile_observer(observer) -> None:
    """``observer(event, fun_name, start, end)`` (wall-clock seconds) runs after each step
    of a jitted function's compilation, named by JAX's monitoring events; None: none."""
    global _compile_observer
    _compile_observer = observer


def _observe_compile(event: str, fun_name: str, start: float, end: float) -> None:
    if _compile_observer is not None:
        _compile_observer(event, fun_name, start, end)


def set_call_observer(observer) -> None:
    """``observer(name, call)`` runs each jitted call made outside any trace (``call()``
    makes it and gives its result); None: none does (the profiler's recording)."""
    global _call_observer
    _call_observer = observer


def set_no_execution(on: bool) -> None:
    global _no_execution
    _no_execution = bool(on)


def _refuse_execution(fun) -> None:
    raise RuntimeError(f"JAX tried to execute function {_name(fun)}, but the no_execution "
                       "config option is set")


@dataclasses.dataclass
class ClosedProgram:
    """A traced program with the values of its constants and its output structure."""
    program: Program
    consts: list
    out_tree: Any
    # each output's layout as the trace followed it (compiler.layouts): on Auto axes an
    # elementwise program's results are laid out as its arguments
    out_layouts: list = dataclasses.field(default_factory=list)
    # which outputs are weakly typed (computed from weakly typed values only)
    out_weak: list = dataclasses.field(default_factory=list)
    # the float0 outputs, by place among the output leaves: their types (they hold nothing)
    float0_outs: dict = dataclasses.field(default_factory=dict)
    # which inputs (after the constants) are weakly typed (Python numbers given)
    in_weak: list = dataclasses.field(default_factory=list)

    @property
    def jaxpr(self) -> Program:
        return self.program

    @property
    def eqns(self) -> list:
        """The program's equations (JAX's ``ClosedJaxpr.eqns``)."""
        return self.program.eqns

    @property
    def in_avals(self):
        """The inputs' types, weakly typed where a Python number was given (JAX's)."""
        return _weak_where(self.program.in_avals, self.in_weak)

    @property
    def out_avals(self):
        return _weak_where(self.program.out_avals, self.out_weak)

    def __str__(self):
        return print_program(self.program)

    __repr__ = __str__

    def pretty_print(self, **options) -> str:
        """JAX's ``ClosedJaxpr.pretty_print`` (``Program.pretty_print`` says what it takes)."""
        return self.program.pretty_print(**options)


_JITTED: "weakref.WeakSet" = weakref.WeakSet()     # every live jitted function

# function -> (its jit options -> the traced programs by signature)
_TRACES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _shared_cache(fun, options: tuple) -> dict:
    """The cache of traced programs that every ``jit`` of ``fun`` with the same options
    shares, as JAX's tracing cache is keyed by the function, not by the jit object: a fresh
    ``jit(f)`` called with a signature seen before runs what was traced then (without running
    ``f``'s Python again, so without seeing a global it read that changed since). A function
    that cannot be weakly referenced, or options that cannot be hashed, get a cache of
    their own, and so does a bound method (each ``obj.method`` is a new object, which JAX
    traces anew)."""
    if isinstance(fun, types.MethodType):
        return {}
    try:
        by_options = _TRACES.get(fun)
        if by_options is None:
            by_options = _TRACES[fun] = {}
        return by_options.setdefault(options, {})
    except TypeError:
        return {}


def clear_caches() -> None:
    """Forget what every jitted function compiled and traced, the loop bodies' and branches'
    traced programs, and the eager mode's lowered collectives (``jax.clear_caches``)."""
    from compiler import control_flow, eager
    for jitted in list(_JITTED):
        jitted.clear_cache()
    eager._LOWERED.clear()
    control_flow.clear_sub_programs()


def _split_static(args: tuple, static_argnums: Sequence[int]):
    static = tuple((k, args[k]) for k in static_argnums if k < len(args))
    dynamic = tuple(a for k, a in enumerate(args) if k not in static_argnums)
    return static, dynamic


def _check_hashable(static_values) -> None:
    """JAX's ValueError for a static argument whose hash raises a TypeError, naming its type,
    its text and the error (other errors of ``__hash__`` propagate, as in JAX)."""
    for value in static_values:
        try:
            hash(value)
        except TypeError as error:
            raise ValueError(
                "Non-hashable static arguments are not supported. An error occurred while "
                f"trying to hash an object of type {type(value)}, {value}. The error was:\n"
                f"{type(error).__name__}: {error}\n") from None


def _pytree_mismatch(called, compiled) -> str:
    """JAX's error for a compiled function called with arguments of another structure: each
    place where the structures part, under ``args`` or ``kwargs``."""
    errors = list(tree.equality_errors(called, compiled))
    lines = ["Function compiled with input pytree does not match the input pytree it was "
             f"called with. There are {len(errors)} mismatches, including:"]
    for path, now, seen, why in errors:
        where = ("args" + path[3:] if path.startswith("[0]") else
                 "kwargs" + path[3:] if path.startswith("[1]") else path)
        lines.append(f"    * at {where}, seen {seen} but now given {now}, so {why}")
    return "\n".join(lines)


def _rebuild(static, dynamic, n):
    lookup = dict(static)
    it = iter(dynamic)
    return tuple(lookup[k] if k in lookup else next(it) for k in range(n))


def trace_function(fun: Callable, args: tuple, kwargs: dict, static_argnums=(),
                   static_kwargs=None, constrain_outputs=None, parent=None) -> ClosedProgram:
    """Trace ``fun(*args, **kwargs)`` with array leaves abstract; static arguments (positions
    ``static_argnums`` and the keyword arguments ``static_kwargs``) stay Python.
    ``constrain_outputs(result) -> result``, when given, runs on the traced result (jit's
    ``out_shardings``). ``parent``: the trace whose values ``fun`` may close over (by default
    none: a top-level program)."""
    static, dynamic = _split_static(args, static_argnums)
    static_kwargs = static_kwargs or {}
    leaves, in_tree = tree.tree_flatten((dynamic, kwargs))
    out_tree_box: list = []

    float0_outs: dict = {}

    def flat_fun(*flat):
        dyn, kw = tree.tree_unflatten(in_tree, flat)
        result = fun(*_rebuild(static, dyn, len(args)), **kw, **static_kwargs)
        if constrain_outputs is not None:
            result = constrain_outputs(result)
        outs, out_tree = tree.tree_flatten(result)
        check_returned_values(outs, result, fun, "jit",
                              lambda path: f"the output {function_name(fun)}(*args){path}")
        # float0 results (an integer input's cotangent) hold no values: kept aside, by place
        float0_outs.clear()
        float0_outs.update((k, float0_aval(leaf)) for k, leaf in enumerate(outs)
                           if dtypes.is_float0(leaf))
        outs = [leaf for k, leaf in enumerate(outs) if k not in float0_outs]
        out_tree_box.append(out_tree)
        return outs

    _check_arguments(fun, leaves, args, kwargs, static_argnums)
    in_avals = [aval_of(x).strip_vma() for x in leaves]
    # Arguments keep their layout under the trace, as in JAX: a shard_map without in_specs
    # takes each argument's spec from it, eagerly and under jit alike.
    # Python scalars stay weakly typed, as in JAX: jit(f)(bf16_array, 0.5) computes in bfloat16
    layouts = layouts_of(leaves)
    weak = [weakly_typed(x) for x in leaves]
    with arguments_on({getattr(layout, "mesh", None) for layout in layouts}):
        program, consts, outs = trace_to_program(flat_fun, in_avals,
                                                 parent=parent or eval_trace,
                                                 in_shardings=layouts, weak=weak, staged=True)
    return ClosedProgram(program, consts, out_tree_box[0], layouts_of(outs),
                         [weakly_typed(o) for o in outs], dict(float0_outs), weak)


def _weak_where(avals, weak) -> list:
    """``avals`` read as weakly typed where ``weak`` (shorter: the rest as they are) says."""
    flags = list(weak) + [False] * (len(avals) - len(weak))
    return [a.weak_twin() if w and hasattr(a, "weak_twin") else a
            for a, w in zip(avals, flags)]


def _finished(outs: list, closed: "ClosedProgram") -> list:
    """A run's results as the caller gets them: weakly typed where the trace said so, and the
    float0 results (an integer input's cotangent: no values) put back in their places."""
    outs = weakened_where(outs, closed.out_weak)
    if closed.float0_outs:
        outs = list(outs)
        for k, aval in sorted(closed.float0_outs.items()):
            outs.insert(k, float0_zeros(aval))
    return outs


def _own_results(outs: list, module) -> list:
    """A run's results, those that are its arguments or constants passed straight through
    as copies (``own_copy``): a call's results are its own, as in JAX, so deleting (or
    donating) one leaves the argument or the constant alive."""
    passed = module.__dict__.get("_passed_through")
    if passed is None:
        program = module.program
        given = {id(v) for v in program.constvars + program.invars}
        passed = module._passed_through = tuple(
            k for k, v in enumerate(program.outvars) if id(v) in given)
    if not passed:
        return outs
    outs = list(outs)
    for k in passed:
        if hasattr(outs[k], "is_deleted"):
            outs[k] = outs[k].own_copy()
    return outs


def _held(args) -> list:
    """The arguments of a call as the program holds them: a host numpy array (or scalar) is
    copied (its caller may write into it later, and a result may be a view of an input), in
    the dtype its type has (with x64 off an int64 wraps to int32, a float64 rounds to
    float32, before anything is computed), as JAX puts it on the device."""
    return [_as_canonical(a) if isinstance(a, (np.ndarray, np.generic)) else a for a in args]


def _as_canonical(value) -> np.ndarray:
    try:
        dtype = dtypes.canonicalize(value.dtype)
    except TypeError:           # float0 (an integer's cotangent): held as it is
        dtype = value.dtype
    return np.array(value, dtype=dtype)


def _placing(compiled, leaves, outs):
    """How a program's results are laid out once it has run (False: as they come): on an
    Explicit mesh each as its type says; on Auto axes as propagation typed it, spelt as JAX
    does; else as the trace followed their layouts."""
    if compiled.module.propagated is not None:
        mesh, typed, shardings = compiled.module.propagated
        if leaves:
            # spelt after this call's first argument (its layout is the compiled one's, but
            # not necessarily spelt as that call's was: P('x') and P('x', None) lay out alike)
            shardings = result_shardings(typed, mesh, spelling_reference(None, leaves))
        return TypedPlacement(typed, mesh, _spelt_as_given(shardings, compiled.given, typed))
    leaves = [leaf for k, leaf in enumerate(leaves) if k not in compiled.unused]
    mesh = (split_mesh([], leaves, None) or placement_mesh(leaves)
            or split_mesh([], outs, None) or placement_mesh(outs))
    if mesh is not None:
        program = compiled.module.program
        typed = [v.aval for v in program.outvars]
        left = _left_for_auto_axes(program)
        shardings = [left.get(id(v)) or typed_sharding(v.aval, mesh)  # made once
                     for v in program.outvars]
        return TypedPlacement(typed, mesh, _spelt_as_given(shardings, compiled.given, typed))
    layouts = compiled.closed.out_layouts
    if any(isinstance(l, NamedSharding) and meaningful(l) for l in layouts):
        return lambda results: _laid_out(results, layouts)
    auto = context_auto_mesh()
    if auto is not None:
        # under an Auto mesh set as the context, results nothing splits are replicated on it
        program = compiled.module.program
        left = _left_for_auto_axes(program)
        replicated = [left.get(id(v)) or NamedSharding(auto, PartitionSpec())
                      for v in program.outvars]
        typed = [v.aval for v in program.outvars]
        return TypedPlacement(typed, auto, replicated)
    return False


def _spelling(leaves):
    """The spec of the first argument, as written (None where it has no NamedSharding)."""
    sharding = getattr(leaves[0], "sharding", None) if leaves else None
    return tuple(sharding.spec) if isinstance(sharding, NamedSharding) else None


def _spelt_as_given(shardings: list, given, typed) -> list:
    """Results' shardings, an ``out_shardings`` entry spelt as written where it lays its
    result out alike (axes of one device included)."""
    if not given:
        return shardings
    return [g if isinstance(g, NamedSharding) and _laid_alike(g, s, aval.ndim) else s
            for s, g, aval in zip(shardings, given, typed)]


def _laid_alike(given: NamedSharding, sharding, ndim: int) -> bool:
    if given == sharding:
        return True
    if given.spec.unreduced or getattr(getattr(sharding, "spec", None), "unreduced", None):
        return False        # (partial sums have no block indices to compare)
    return given.is_equivalent_to(sharding, ndim)


def _left_for_auto_axes(program: Program) -> dict:
    """The layouts of the values a program lays out, untyped, over Auto axes (leaving
    ``explicit_axes`` under jit), by variable id: such a value leaves as it was laid out
    inside, as JAX's reshard onto an all-Auto mesh moves nothing (spelt as JAX reads a
    layout back from XLA: no trailing unsplit dimensions)."""
    left = {}
    for eqn in program.eqns:
        sharding = eqn.params.get("sharding") if eqn.primitive is prims.sharding_constraint_p \
            else None
        if (isinstance(sharding, NamedSharding) and sharding.mesh.are_all_axes_auto
                and eqn.outvars[0].aval.type_sharding is None):
            entries = list(sharding.spec)
            while entries and entries[-1] is None:
                entries.pop()
            left[id(eqn.outvars[0])] = sharding.with_spec(
                sharding.spec.update(partitions=entries))
    return left


def _unused_inputs(program: Program) -> frozenset:
    """The places of the inputs ``program`` never reads (JAX's pruned arguments)."""
    read = {id(a) for eqn in program.eqns for a in eqn.invars if isinstance(a, Var)}
    read.update(id(a) for a in program.outvars if isinstance(a, Var))
    return frozenset(k for k, v in enumerate(program.invars) if id(v) not in read)


def _partitioned(program: Program, values, pending: list | None = None) -> tuple:
    """``program`` (run on ``values``: its constants, then its inputs) with the values its
    types split computed block by block (``compiler.partition``), the communication that
    inserted, and on Auto axes, where its types come from its annotations (propagation), the
    mesh, its results' types and how they report their layout, spelt as JAX spells them (else
    None: its types are its own)."""
    program = without_checks(program)
    propagated = None
    layouts = [getattr(v, "sharding", None) for v in values]
    # a value the program closes over is a constant to JAX: laid out on Auto axes, its layout
    # decides nothing (a jitted function of captured parameters is laid out by its arguments)
    layouts[:len(program.constvars)] = [
        None if isinstance(l, NamedSharding) and l.mesh.are_all_axes_auto else l
        for l in layouts[:len(program.constvars)]]
    layouts = on_first_of_twins(layouts)
    mesh = program_mesh(program, layouts)
    # a mesh with Auto axes (its Explicit ones, if any, split values as their types say)
    if mesh is not None and type_meshes(program) <= {mesh}:
        reference = spelling_reference(program, values[len(program.constvars):])
        # (remats inlined: past autodiff a remat is its body, which propagation sees through)
        program = propagate(inline_calls(program, every_remat=True), layouts, mesh)
        typed = [a.aval for a in program.outvars]
        propagated = (mesh, typed, result_shardings(typed, mesh, reference))
    program = inspected(program, *placement_of(layouts, mesh),
                        consts=values[:len(program.constvars)], pending=pending)
    inserted: list = []
    return partition(program, inserted), tuple(inserted), propagated


def _arrival(backend, x):
    """How an argument arrives: an array's layout, or the one a stand-in (``ShapeDtypeStruct``)
    names on a mesh, which its program is then lowered for."""
    sharding = backend.sharding_of(x)
    named = getattr(x, "sharding", None)
    if sharding is None and isinstance(named, NamedSharding) and not named.mesh.empty:
        sharding = x.sharding
        if isinstance(sharding.mesh, AbstractMesh):
            # on an abstract mesh (eval_shape's): the mesh its type names, or the mesh set
            # here, where it abstracts that
            typed = aval_of(x).type_sharding
            mesh = typed.mesh if typed is not None else current_mesh()
            if isinstance(mesh, Mesh) and mesh.abstract_mesh == sharding.mesh:
                sharding = NamedSharding(mesh, sharding.spec)
    return sharding


def _laid_out(outs, layouts) -> list:
    """Results laid out as the trace followed their layouts (on Auto axes: elementwise
    programs keep their arguments' layout, as JAX's propagation does)."""
    placed = []
    for out, layout in zip(outs, layouts):
        if isinstance(layout, NamedSharding) and meaningful(layout) and out.sharding != layout:
            (out,) = get_backend().eval_primitive(prims.sharding_constraint_p, [out],
                                                  {"sharding": layout})
        placed.append(out)
    return placed


def _check_no_stand_ins(fun, args, kwargs, static_argnums, leaves) -> None:
    """JAX's TypeError for a ShapeDtypeStruct passed to a call (it has no value: it stands
    in for an argument to ``lower`` or ``eval_shape`` only), naming it by its path."""
    for k, leaf in enumerate(leaves):
        if isinstance(leaf, ShapeDtypeStruct):
            name = _argument_names(fun, args, kwargs, static_argnums)[k]
            raise TypeError(f"Argument '{name}' of shape {leaf.aval.str_long()} of type "
                            f"{type(leaf)} is not a valid JAX type.")


def _check_arguments(fun, leaves, args, kwargs, static_argnums):
    """Every array argument must be a JAX value. JAX's errors name the first that is not by
    its path (``x``, ``b['k']``): a TypeError for a value of no array type, an OverflowError
    for a Python int out of range; a numpy masked array is its ValueError."""
    if all(is_jax_value(leaf) for leaf in leaves):
        return
    names = _argument_names(fun, args, kwargs, static_argnums)
    for leaf, name in zip(leaves, names):
        if is_jax_value(leaf):
            continue
        if is_python_scalar(leaf):
            raise OverflowError("An overflow was encountered while parsing an argument to a "
                                f"jitted computation, whose argument path is {name}. Got "
                                f"{type(leaf)} with value {leaf}")
        if isinstance(leaf, np.ma.MaskedArray) or hasattr(type(leaf), "__jax_array__") \
                or dtypes.is_float0(leaf):
            check_jax_value(leaf, f"argument {name} of '{function_name(fun)}'")
        if hasattr(leaf, "shape") and hasattr(leaf, "dtype") \
                and not isinstance(leaf, (np.ndarray, np.generic)):   # a stand-in, for lower
            raise TypeError(f"Argument '{leaf}' of type {type(leaf)} is not a valid JAX type.")
        raise TypeError(f"Error interpreting argument to {fun} as an abstract array. The "
                        f"problematic value is of type {type(leaf)} and was passed to the "
                        f"function at path {name}.\nThis typically means that a jit-wrapped "
                        "function was called with a non-array argument, and this argument "
                        "was not marked as static using the static_argnums or "
                        "static_argnames parameters of jax.jit.")


def make_jaxpr(fun: Callable, static_argnums=(), axis_env=None, return_shape=False,
               abstracted_axes=None):
    """``make_jaxpr(f)(*args)`` returns the traced program, which prints like a jaxpr; with
    ``return_shape``, also its results' shapes and dtypes (``ShapeDtypeStruct``s in the
    results' tree). Arguments may be values or stand-ins with a shape and a dtype."""
    static_argnums = _normalize_argnums(static_argnums)
    if axis_env or abstracted_axes is not None:
        raise NotImplementedError("make_jaxpr(axis_env=, abstracted_axes=): trace collectives "
                                  "inside the shard_map or vmap that binds their axes")

    @functools.wraps(fun)
    def traced(*args, **kwargs):
        # an argument may stand in for one (a ShapeDtypeStruct, an aval), as JAX's
        static = {k % len(args) for k in static_argnums if -len(args) <= k < len(args)}
        args = tuple(a if k in static else abstract_stand_ins(a) for k, a in enumerate(args))
        # values of the trace around the call that ``fun`` closes over are the program's
        # constants (JAX's: make_jaxpr inside vmap or jit)
        closed = trace_function(fun, args, abstract_stand_ins(kwargs), static_argnums,
                                parent=current_trace())
        if not return_shape:
            return closed
        return closed, result_structs(closed, [None] * len(closed.program.outvars))

    return traced


def result_structs(closed: ClosedProgram, shardings):
    """A traced program's results as ``ShapeDtypeStruct``s (``shardings``: each one's, or
    None), in its results' tree."""
    outs = [ShapeDtypeStruct(v.aval.shape, v.aval.dtype, s, weak_type=w)
            for v, s, w in zip(closed.program.outvars, shardings,
                               closed.out_weak or [False] * len(shardings))]
    for k, aval in sorted(closed.float0_outs.items()):
        outs.insert(k, ShapeDtypeStruct(aval.shape, dtypes.FLOAT0))
    return tree.tree_unflatten(closed.out_tree, outs)


def execute_equation(prim, values, params) -> list:
    """Run one equation (a shard_map with its body program) on concrete values: lower it as a
    one-equation module and execute it, as jit would."""
    from ir.core import Eqn
    backend = get_backend()
    invars = [Var(aval_of(v).strip_vma()) for v in values]
    outvars = [Var(a) for a in typed_avals(prim, [v.aval for v in invars], params)]
    program = Program([], invars, [Eqn(prim, invars, outvars, dict(params))], outvars)
    shardings = tuple(backend.sharding_of(v) for v in values)
    _check_ordered_effects(program, shardings)      # (run as jit runs it)
    module = lower_module(program, shardings)
    return backend.execute(module, _held(values))


_EAGER: dict = {}
_EAGER_LIMIT = 4096


def execute_partitioned(prim, values, params, typed) -> list:
    """One operation on arrays whose types split them, run as jit runs a program: partitioned
    (``compiler.partition``), so each device computes its own block and the layout changes it
    needs are collectives (a process under MPI computes only its devices' blocks). The lowered
    module is kept per operand types, shardings and parameters. Returns the results, and
    whether they are laid out (on Auto axes, as propagation typed them)."""
    backend = get_backend()
    in_avals = tuple(aval_of(v).strip_vma() for v in values)
    shardings = tuple(backend.sharding_of(v) for v in values)
    try:
        key = (prim, in_avals, shardings, tuple(sorted(params.items())))
        hash(key)
    except TypeError:
        key = None
    module = _EAGER.get(key) if key is not None else None
    if module is None:
        from ir.core import Eqn, Var
        invars = [Var(a) for a in in_avals]
        outvars = [Var(a) for a in typed]
        eqn = Eqn(prim, invars, outvars, dict(params), user_source())
        program, inserted, propagated = _partitioned(Program([], invars, [eqn], outvars),
                                                     values)
        module = lower_module(program, shardings)
        module.inserted, module.propagated = inserted, propagated
        if key is not None:
            if len(_EAGER) >= _EAGER_LIMIT:
                _EAGER.clear()
            _EAGER[key] = module
    check_inserted(module.inserted)       # at every run: the mode may have changed since
    outs = backend.execute(module, _held(values))
    if module.propagated is None:
        return outs, False
    mesh, typed, shardings = module.propagated
    if values:      # spelt after this call's first operand (the kept module's may differ)
        shardings = result_shardings(typed, mesh, spelling_reference(None, values))
    return placed_as_typed(outs, typed, mesh, shardings), True


def _normalize_argnums(argnums) -> tuple:
    if argnums is None:
        return ()
    if isinstance(argnums, int):
        return (argnums,)
    return tuple(argnums)


@dataclasses.dataclass
class Compiled:
    """A cached entry: the traced program, its lowered module and the output structure."""
    closed: ClosedProgram
    module: LoweredModule
    place_after: bool = False   # some output goes to one device once the program has run
    # how its results are laid out once it has run (``_placing``): worked out at the first
    # call, since a signature's arguments and results always have the same layouts; on Auto
    # axes spelt after that call's first argument (``spelt_after``, its spec as written)
    placing: Any = None
    spelt_after: Any = None
    given: Any = None           # out_shardings resolved per result (None: none given)
    warned_donation: bool = False   # that a donated argument could not be reused (once)
    # how a call of it looks (``__call__``): the jitted function, its static arguments (by
    # position; by name), and the dynamic ones' tree and types
    call_as: Any = None
    arg_shardings: tuple = ()   # how each argument arrived (None: a host value)
    # the arguments (by place) the program never reads, which JAX prunes (keep_unused=False):
    # their layouts decide no device
    unused: frozenset = frozenset()
    # the Explicit mesh whose Auto twin the program runs on (``_twin_for``), or None
    twin: Any = None
    compiled: bool = False      # ``compile()``'s view: its results' layouts are known
    context_mesh: Any = None    # the mesh set when it was lowered: it runs under it
    # what a call runs where not the jitted function itself: a jit with ``device=`` moves
    # its arguments to that device first (its layouts are then not checked)
    runs_as: Any = None
    # the devices of each layout the program asks for inside (with_sharding_constraint,
    # device_put), with where: JAX's computation runs on one set of devices
    constraint_devices: tuple = ()
    # a program traced for an abstract mesh (no devices known): the function of the devices
    # that lowers it on them (``module`` is then None)
    on_devices: Any = None
    # the inspect_array_sharding calls its program holds, made when it is compiled (its
    # first call, or ``compile()``: JAX's time), once; shared by the views of it
    inspections: list = dataclasses.field(default_factory=list)

    def compile(self, compiler_options=None, *, device_assignment=None) -> "Compiled":
        """JAX's ``lower(...).compile()``: lowering already gave the programs that run; the
        compiled view reports its results' layouts (``out_info``, ``output_shardings``).
        ``compiler_options`` (XLA's) change nothing here. ``device_assignment``, where given,
        must be the devices the program runs on, in order (its arguments' and results'
        mesh, else their one device): JAX's ValueError otherwise. A program traced for an
        abstract mesh needs it: it is lowered on those devices now."""
        if self.on_devices is not None:
            return self.on_devices(device_assignment).compile()
        done(self.inspections)
        if self.module is None:
            raise NotImplementedError(
                "a program whose types name an abstract mesh inside (a value it closes over, "
                "a constraint in it): shardc lowers it for concrete meshes only")
        if device_assignment is not None:
            self._check_device_assignment(tuple(device_assignment))
        return self if self.compiled else dataclasses.replace(self, compiled=True)

    def _check_device_assignment(self, given: tuple) -> None:
        for device in given:
            if not hasattr(device, "id") or not hasattr(device, "platform"):
                raise TypeError(f"device_assignment takes devices, got {device!r} of type "
                                f"{type(device).__name__}")
        own = self._device_assignment()
        if list(given) != own:
            raise ValueError(
                "device_assignment passed to `.compile` must match the device_assignment "
                "calculated from array shardings and out_shardings. Got device ids passed to "
                f"compile {[d.id for d in given]} on platform {_platform(given)} and devices "
                "ids calculated from array shardings and out_shardings "
                f"{[d.id for d in own]} on platform {_platform(own)}")

    def _device_assignment(self) -> list:
        """The devices the program runs on, in order: the mesh its arguments or results are
        laid out on (else the mesh set as the context), else the one device a committed
        argument or a result is on, else the default device."""
        laid = list(self.arg_shardings) + list(self.given or ())
        mesh = next((s.mesh for s in laid if isinstance(s, NamedSharding)), None)
        mesh = mesh if mesh is not None else self.context_mesh
        if isinstance(mesh, Mesh):
            return list(mesh.devices.flat)
        if mesh is not None:
            raise NotImplementedError(
                f"the devices of a program lowered for {mesh}: shardc lowers programs for "
                "concrete meshes only")
        placed = next((s for s in laid if s is not None), None)
        sharding = placed if placed is not None else get_backend().default_sharding()
        return sorted(sharding.device_set, key=lambda d: d.id)

    @property
    def donate_argnums(self) -> tuple:
        """The donated arguments' positions among all argument leaves (JAX's: the leaves of
        ``(args, kwargs)``, static arguments left out)."""
        return tuple(k for k, info in enumerate(tree.tree_leaves(self.args_info))
                     if info.donated)

    def memory_analysis(self):
        """JAX's estimate of the memory the program needs on a device (a
        ``CompiledMemoryStats``): shardc's is worked out from the program's types
        (``compiler.aot_analysis`` says how)."""
        from compiler.aot_analysis import memory_stats
        _, _, _, _, avals = self.call_as
        donated = [info.donated for info in tree.tree_leaves(self.args_info)]
        shardings = [s if isinstance(s, NamedSharding) else None for s in self.arg_shardings]
        results = [(v.aval, s if isinstance(s, NamedSharding) else None)
                   for v, s in zip(self.closed.program.outvars, self._result_shardings())]
        return memory_stats(self.closed.program, list(zip(avals, shardings, donated)), results)

    def cost_analysis(self):
        """JAX's execution cost estimate, a dict of ``flops``, ``transcendentals`` and
        ``bytes accessed`` per device, counted from the program as XLA's cost analysis
        counts (``compiler.aot_analysis`` says how)."""
        from compiler.aot_analysis import cost_stats
        memory = self.memory_analysis()
        return cost_stats(self.closed.program, memory.argument_size_in_bytes,
                          memory.output_size_in_bytes)

    # -- JAX's ahead-of-time views: what the program takes and gives ------------------------

    @property
    def in_tree(self):
        """The structure of a call's arguments, ``((positional ...), {keyword ...})``."""
        return self.call_as[3]

    @property
    def out_tree(self):
        """The structure of its results."""
        return self.closed.out_tree

    @property
    def in_avals(self):
        """The arguments' types: ``((per positional argument ...), {per keyword ...})``."""
        _, _, _, in_tree, avals = self.call_as
        return tree.tree_unflatten(in_tree, list(avals))

    @property
    def args_info(self):
        """Each argument's ``ArgInfo`` (its type, and whether it is donated), in ``in_avals``'
        tree: JAX's ahead-of-time view of a call's arguments."""
        jitted, static, _, in_tree, avals = self.call_as
        dynamic, kwargs = tree.tree_unflatten(in_tree, list(avals))
        fixed = {k for k, _ in static}
        positions = [k for k in range(len(dynamic) + len(fixed)) if k not in fixed]
        donated = set(jitted.donate_argnums)
        info = lambda flag: functools.partial(ArgInfo, donated=flag)
        return (tuple(tree.tree_map(info(k in donated), a) for k, a in zip(positions, dynamic)),
                {name: tree.tree_map(info(name in jitted.donate_argnames), a)
                 for name, a in kwargs.items()})

    @property
    def input_shardings(self):
        """How each argument is laid out when the program runs, in ``in_avals``' tree."""
        _, _, _, in_tree, _ = self.call_as
        return tree.tree_unflatten(in_tree, self._input_shardings_flat())

    def _input_shardings_flat(self) -> list:
        mesh = self._arguments_mesh()
        fallback = (NamedSharding(mesh, PartitionSpec()) if mesh is not None
                    else get_backend().default_sharding())
        return [s if s is not None else fallback for s in self.arg_shardings]

    @property
    def output_shardings(self):
        """How each result is laid out (the compiled program's), in the results' tree."""
        return tree.tree_unflatten(self.closed.out_tree, self._result_shardings())

    @property
    def input_formats(self):
        """Each argument's layout (row-major, as every block is) and sharding, in
        ``in_avals``' tree."""
        _, _, _, in_tree, avals = self.call_as
        return tree.tree_unflatten(in_tree, [
            Format(row_major(a.ndim), s) for a, s in zip(avals, self._input_shardings_flat())])

    @property
    def output_formats(self):
        """Each result's layout (row-major) and sharding, in the results' tree."""
        outs = self.closed.program.outvars
        return tree.tree_unflatten(self.closed.out_tree, [
            Format(row_major(v.aval.ndim), s) for v, s in zip(outs, self._result_shardings())])

    @property
    def out_info(self):
        """Each result's shape, dtype and (compiled; or lowered, where ``out_shardings`` or
        its Explicit type names it) sharding, as ``ShapeDtypeStruct``s in the results' tree."""
        return result_structs(self.closed, self._result_shardings() if self.compiled
                              else self._typed_result_shardings())

    def _arguments_mesh(self):
        """The mesh an argument is laid out on, else the mesh set as the context."""
        for k, sharding in enumerate(self.arg_shardings):
            if isinstance(sharding, NamedSharding) and k not in self.unused:
                return sharding.mesh
        return self.context_mesh

    def _typed_result_shardings(self) -> list:
        """Each result's layout as the lowered program states it: asked for by
        ``out_shardings``, or named by its type on an Explicit mesh; else None."""
        given = self.given or [None] * len(self.closed.program.outvars)
        mesh = self._arguments_mesh()
        explicit = mesh if mesh_explicit(mesh) else None
        out = []
        for v, g in zip(self.closed.program.outvars, given):
            typed = v.aval.type_sharding
            on = typed.mesh if typed is not None else explicit
            out.append(g if g is not None else typed_sharding(v.aval, on) if on else None)
        return out

    def place(self, leaves, outs) -> list:
        """A call's results (of ``leaves``) laid out as ``placing`` says; worked out again,
        not kept, where results are spelt after a first argument spelt otherwise than the
        first call's."""
        if self.placing is None:
            placing = _placing(self, leaves, outs)
            placed = placing(outs) if placing else outs
            # where the program's results come out laid out already, later calls skip it
            self.placing = placing if any(a is not b for a, b in zip(placed, outs)) else False
            if self.module.propagated is not None:
                self.spelt_after = _spelling(leaves)
            return placed
        if self.spelt_after is not None and _spelling(leaves) != self.spelt_after:
            placing = _placing(self, leaves, outs)
            return placing(outs) if placing else outs
        return self.placing(outs) if self.placing else outs

    def _result_shardings(self) -> list:
        """Each result's layout when the program has run (the layouts ``_placing`` gives
        the results of a call)."""
        outvars = self.closed.program.outvars
        if self.module.propagated is not None:
            _, _, shardings = self.module.propagated
            given = self.given or [None] * len(outvars)
            return [g if isinstance(g, NamedSharding) else s for s, g in zip(shardings, given)]
        mesh = self._arguments_mesh()
        layouts = self.closed.out_layouts or [None] * len(outvars)
        out = []
        for v, g, layout in zip(outvars, self._typed_result_shardings(), layouts):
            if g is not None:
                out.append(g)
            elif isinstance(layout, NamedSharding) and meaningful(layout):
                out.append(layout)
            elif mesh is not None and mesh is self.context_mesh and not mesh_explicit(mesh):
                # nothing given on a mesh, an Auto one set: replicated there (``_placing``)
                out.append(NamedSharding(mesh, PartitionSpec()))
            elif mesh is not None:
                out.append(typed_sharding(v.aval, mesh))
            else:
                out.append(get_backend().default_sharding())
        return out

    def __call__(self, *args, **kwargs):
        """JAX's compiled call, ``jit(f).lower(*args).compile()(*args)``: the jitted
        function's arguments less its static ones, of the types it was lowered for."""
        jitted, static, static_kwargs, in_tree, avals = self.call_as
        leaves, called_tree = tree.tree_flatten((args, kwargs))
        for leaf in leaves:
            if isinstance(leaf, Tracer):    # its signature is fixed: no transformation
                raise TypeError("Cannot apply JAX transformations to a function lowered and "
                                "compiled for a particular signature. Detected argument of "
                                f"Tracer type {type(leaf)}.")
        got = [aval_of(x).strip_vma() for x in leaves]
        if called_tree != in_tree:
            raise TypeError(_pytree_mismatch(called_tree, in_tree))
        full = _rebuild(static, args, len(static) + len(args))
        wrong = [k for k, (want, have) in enumerate(zip(avals, got))
                 if (want.shape, want.dtype) != (have.shape, have.dtype)]
        if wrong:       # JAX's words
            names = _argument_names(jitted.fun, full, kwargs, jitted._static_positions(len(full)))
            lines = [f"Argument '{names[k]}' compiled with {avals[k].str_long()} and called "
                     f"with {got[k].str_long()}" for k in wrong[:5]]
            count = f"The first 5 of {len(wrong)}" if len(wrong) >= 5 else "The"
            raise TypeError("Argument types differ from the types for which this computation "
                            "was compiled. Perhaps you are calling the compiled executable "
                            "with a different enable_x64 mode than when it was AOT compiled? "
                            f"{count} mismatches are:\n" + "\n".join(lines))
        if self.runs_as is not None:
            return self.runs_as(*full, **kwargs, **static_kwargs)
        required = self._input_shardings_flat()
        self._check_argument_shardings(leaves, required, lambda: _argument_names(
            jitted.fun, full, kwargs, jitted._static_positions(len(full))))
        placed = [_moved_to(leaf, want) for leaf, want in zip(leaves, required)]
        if any(a is not b for a, b in zip(placed, leaves)):
            # uncommitted arrays and host values go where the program takes them, as JAX
            # puts them: the call is then the one lowered
            args, kwargs = tree.tree_unflatten(called_tree, placed)
            full = _rebuild(static, args, len(static) + len(args))
        mesh = self.context_mesh
        if mesh is None or current_mesh() is mesh:
            return self._typed_as_compiled(jitted(*full, **kwargs, **static_kwargs))
        push_mesh(mesh)         # the program runs as lowered: under the mesh set then
        try:
            return self._typed_as_compiled(jitted(*full, **kwargs, **static_kwargs))
        finally:
            pop_mesh(mesh)

    def _typed_as_compiled(self, result):
        """A call's results weakly typed as the program compiled gives them, not as the
        arguments of this call would (``lower(3.0).compile()(jnp.float32(4))`` is weak, and
        ``lower(int32 struct).compile()(3)`` typed, as JAX's)."""
        leaves, out_tree = tree.tree_flatten(result)
        weak = iter(self.closed.out_weak)
        fixed = []
        for k, leaf in enumerate(leaves):
            if k in self.closed.float0_outs:
                fixed.append(leaf)
                continue
            w = next(weak, None)
            setter = getattr(leaf, "with_weak", None)
            fixed.append(leaf if w is None or setter is None else setter(bool(w)))
        return tree.tree_unflatten(out_tree, fixed)

    def _check_argument_shardings(self, leaves, required, names) -> None:
        """JAX's ValueError for a committed array laid out otherwise than the program takes
        that argument (``required``; an uncommitted one is moved, as JAX moves it)."""
        wrong = [k for k, (leaf, want) in enumerate(zip(leaves, required))
                 if getattr(leaf, "_committed", False) and isinstance(want, Sharding)
                 and not _same_layout(leaf.sharding, want, leaf)]
        if not wrong:
            return
        labels = names()
        lines = [f"Argument {labels[k]} with shape {aval_of(leaves[k]).str_long()}:\n"
                 f"  Passed sharding: {leaves[k].sharding}\n  Required sharding: {required[k]}"
                 for k in wrong[:5]]
        count = (f"the {len(wrong)} mismatches" if len(wrong) < 5 else
                 f"5 mismatches out of {len(wrong)}")
        raise ValueError("Computation was compiled for input shardings that disagree with the "
                         f"shardings of arguments passed to it. Here are {count}:\n"
                         + "\n".join(lines))

    def as_text(self, dialect=None, *, debug_info=False) -> str:
        """The lowered module as text: the traced program, then each shard_map's program at
        the mesh level (what ``shardc lower -o`` writes, and the IR parser reads); the
        traced program alone where it is lowered once devices are given."""
        from ir.printer import print_module
        if self.module is None:
            return print_program(self.closed.program)
        return print_module(self.module)


def _platform(devices) -> str:
    return devices[0].platform.upper() if devices else ""


@dataclasses.dataclass(frozen=True)
class ArgInfo:
    """An argument as a lowered or compiled function takes it (JAX's ``jax.stages.ArgInfo``):
    its type, and whether the call donates it."""
    _aval: Any
    donated: bool

    @property
    def shape(self) -> tuple:
        return self._aval.shape

    @property
    def dtype(self):
        return self._aval.dtype


@dataclasses.dataclass
class Traced:
    """What ``jit(f).trace(*args)`` gives: the traced program (``jaxpr``, which prints like
    JAX's) and the function's name; ``lower()`` gives the lowered programs."""
    compiled: Compiled
    fun_name: str

    @property
    def jaxpr(self) -> ClosedProgram:
        return self.compiled.closed

    in_avals = property(lambda self: self.compiled.in_avals)
    args_info = property(lambda self: self.compiled.args_info)
    donate_argnums = property(lambda self: self.compiled.donate_argnums)
    out_info = property(lambda self: self.compiled.out_info)

    def lower(self, *, lowering_platforms=None) -> Compiled:
        """The lowered program (``lowering_platforms``, XLA's targets, change nothing)."""
        return self.compiled


class _Unspecified:
    """No sharding was asked for (None is a request: leave the value as it is)."""

    def __repr__(self):
        return "UNSPECIFIED"


UNSPECIFIED = _Unspecified()


# what ``JitFunction._replayed`` answers where a nested call must be traced in place
_IN_PLACE = object()
# set while ``lower()`` runs: a program lowered, not compiled, makes no inspection calls yet
_lowering_only: list = []


def _check_ordered_effects(program: Program, shardings) -> None:
    """JAX's ValueError for a program that runs on more than one device and prints or calls
    back with ``ordered=True`` (its order across devices is not defined)."""
    if not _holds_ordered_effect(program):
        return
    meshes = annotated_meshes(program) | type_meshes(program) | {
        s.mesh for s in shardings if isinstance(s, NamedSharding)}
    if any(getattr(mesh, "size", 1) > 1 for mesh in meshes):
        raise ValueError(ORDERED_EFFECTS_ERROR)


def _holds_ordered_effect(program: Program) -> bool:
    """Whether ``program`` (its sub-programs too) prints or calls back ``ordered``."""
    return holds_equation(program, lambda eqn: is_ordered_effect(eqn.primitive, eqn.params))


def _settled(compiled: Compiled) -> Compiled:
    """``compiled`` about to run (or be compiled): the inspections it put off are made."""
    if compiled.inspections and not _lowering_only:
        done(compiled.inspections)
    return compiled


class JitFunction:
    """A function traced once per signature and run from its lowered module.

    ``in_shardings``/``out_shardings`` (pytree prefixes of the positional arguments and of
    the result; None entries leave a value as it is) are resolved to shardings by ``resolve``,
    which the public layer supplies (it knows the current mesh)."""

    def __init__(self, fun: Callable, static_argnums=(), static_argnames=(),
                 donate_argnums=(), donate_argnames=(), in_shardings=UNSPECIFIED,
                 out_shardings=UNSPECIFIED, resolve=None):
        check_callable(fun)
        # first: it copies the wrapped object's attributes (a custom_vjp's ``fun``, another
        # jit's ``cache``), which must not replace this function's own
        functools.update_wrapper(self, fun)
        self.fun = fun
        (self.static_argnums, self.static_argnames, self.donate_argnums,
         self.donate_argnames) = resolve_argnums(fun, static_argnums, static_argnames,
                                                 donate_argnums, donate_argnames)
        _check_no_unconstrained(in_shardings, "in_shardings")
        _check_no_unconstrained(out_shardings, "out_shardings")
        self.in_shardings = in_shardings
        self.out_shardings = out_shardings
        self._resolve = resolve or (lambda s, what: s)
        self.cache: dict = _shared_cache(fun, (
            self.static_argnums, self.static_argnames, self.donate_argnums,
            self.donate_argnames, in_shardings, out_shardings, resolve))
        # (aval, sharding, committed) per argument -> (Compiled, the device results go to)
        self.array_calls: dict = {}
        self.ref_calls: dict = {}       # where the arguments hold refs -> the pure function's jit
        self.closed_refs: list = []     # the refs the function closes over, found by tracing it
        self.float0_calls: dict = {}    # where arguments hold float0 zeros -> the others' jit
        # signature -> the traced program, for calls at the top level and under other traces
        # alike (shared, as above: JAX's tracing cache, below its compiled-call caches)
        self.traces: dict = _shared_cache(fun, ("traces", self.static_argnums,
                                                self.static_argnames))
        self.trace_count = 0
        # the mesh this jit was made for from one whose shardings name its abstract mesh
        # (``_lowered_on``): what it lowers is on that mesh's devices
        self.on_mesh = None
        _JITTED.add(self)

    def __get__(self, obj, objtype=None):
        """As a method (a jitted function defined in a class body), bound to its instance
        like a plain function: ``self`` is the first argument, counted by
        ``static_argnums``, as in JAX."""
        if obj is None:
            return self
        return types.MethodType(self, obj)

    def clear_cache(self) -> None:
        """Forget every compiled signature: the next call traces again."""
        self.cache.clear()
        self.array_calls.clear()
        self.float0_calls.clear()
        self.traces.clear()

    def _cache_size(self) -> int:
        """How many signatures have a compiled program, across every jit of this function
        with these options (JAX's private counter, which programs and tests read)."""
        return len(self.cache)

    def __call__(self, *args, **kwargs):
        if _call_observer is None or current_trace() is not eval_trace:
            return self._call_now(args, kwargs)
        return _call_observer(function_name(self.fun),
                              functools.partial(self._call_now, args, kwargs))

    def _call_now(self, args, kwargs):
        if current_trace() is not eval_trace or _jit_disabled:
            return self._inline(args, kwargs)       # inside another trace, or disabled
        key, leaves = self._array_key(args, kwargs)
        try:
            seen = self.array_calls.get(key) if key is not None else None
        except Exception:
            # a pytree's metadata whose comparison raises (a user's __eq__): this is only a
            # cache, so the call takes the full path, which compares structures itself and
            # reports what fails there
            key = seen = None
        if seen is not None:
            # the common call: positional arrays (or pytrees of them: their structure is in
            # the key), seen before (the key holds every argument's layout and commitment,
            # and the mesh set: where the results go was worked out at the first such call)
            compiled, device = seen
            closed = compiled.closed
            if _no_execution:
                _refuse_execution(self.fun)
            if compiled.module.inserted:
                check_inserted(compiled.module.inserted)
            backend = get_backend()
            if _transfer_guard.active:      # host arguments go to the devices: guarded
                backend.committed_device(leaves, _qualified_name(self.fun))
            outs = _own_results(backend.execute(compiled.module,
                                                list(closed.consts) + _held(leaves)),
                                compiled.module)
            if compiled.spelt_after is not None:
                outs = compiled.place(leaves, outs)
            elif compiled.placing:
                outs = compiled.placing(outs)
            if device is not None:
                outs = backend.on_device(outs, device)
            if self.donate_argnums or self.donate_argnames:
                outs = self._donate(args, kwargs, self._static_positions(len(args)), outs,
                                    compiled)
            if invalid_value_checks_on():
                self._check_outputs(outs, args, kwargs)
            return tree.tree_unflatten(closed.out_tree, _finished(outs, closed))
        self._last = None
        with _gc_paused():
            result = self._call(args, kwargs)
        if key is not None and self._last is not None:
            self.array_calls[key] = self._last
        if invalid_value_checks_on():
            self._check_outputs(tree.tree_leaves(result), args, kwargs)
        return result

    compiler_options: dict = {}     # XLA's, given to jit: they change nothing here
    # whether arguments the program never reads still count (JAX prunes them: they decide
    # no device, and a donated one is not donated)
    keep_unused: bool = False

    def _inline(self, args, kwargs):
        """Under another trace the body is traced in place, its shardings as constraints."""
        if self.compiler_options and not values_known_now():
            # staged into another program, it is no top-level computation (JAX's error)
            raise ValueError(
                "`compiler_options` can only be passed to top-level `jax.jit`. Got "
                f"compiler_options={dict(self.compiler_options)} specified on a nested jit "
                f"with name: {_name(self.fun)} and source info: {user_source()}")
        if not _jit_disabled:       # staged, its static arguments are hashed (as JAX's)
            static = _split_static(args, self._static_positions(len(args)))[0]
            self._static_key(static, self._split_static_kwargs(kwargs)[0])
        args, kwargs = self._place_inputs(args, kwargs, nested=True)
        if _jit_disabled:
            return self._constrain_outputs(self.fun(*args, **kwargs), nested=True)
        # staged, its values are abstract, as in a staged body
        with staging():
            if self.out_shardings is UNSPECIFIED:
                replayed = self._replayed(args, kwargs)
                if replayed is not _IN_PLACE:       # (a function may return None)
                    return replayed
            return self._constrain_outputs(self.fun(*args, **kwargs), nested=True)

    def _replayed(self, args, kwargs):
        """The function's program, traced once per signature, its equations bound in the
        current trace (as JAX binds a nested jit's traced program, the function's Python runs
        once, not at every call under grad, vmap or another jit); ``_IN_PLACE`` where the
        function must be traced in place: where an enclosing trace names axes (a shard_map body's, a
        vmap's) that a program traced on its own would not see, or arguments are not all
        arrays. A function closing over another trace's values is traced for this call only.
        """
        if names_axes_in_scope():
            return _IN_PLACE
        static_argnums = self._static_positions(len(args))
        static_kwargs, dynamic_kwargs = self._split_static_kwargs(kwargs)
        leaves, in_tree = tree.tree_flatten((_split_static(args, static_argnums)[1],
                                             dynamic_kwargs))
        for leaf in leaves:
            if is_python_scalar(leaf):
                continue            # traced abstract (weakly typed), as JAX traces it
            aval = _aval_attribute(leaf)
            if (aval is None or type(aval) is not Aval or aval.vma or is_ref(leaf)
                    or dtypes.is_float0(leaf)):
                return _IN_PLACE
        closed = self._traced(args, dynamic_kwargs, static_argnums, static_kwargs, leaves,
                              in_tree, parent=current_trace())
        outs = eval_program(closed.program, leaves, closed.consts)
        return tree.tree_unflatten(closed.out_tree, _finished(outs, closed))

    def _check_outputs(self, outs, args, kwargs):
        """jax_debug_nans/infs: on an invalid output, call the function again as if it were
        not jitted, as JAX does, so the operation that makes it raises (an operation holding
        programs, a cond, is one operation there); if none does, JAX's error naming the
        jitted function."""
        name = getattr(self.fun, "__name__", "fun")
        try:
            check_invalid_values(outs, f"jit({name})")
        except FloatingPointError as error:
            if any(_deleted(leaf) for leaf in tree.tree_leaves((args, kwargs))):
                raise   # (a donated argument is gone: the function cannot run again)
            self.fun(*args, **kwargs)
            raise FloatingPointError(
                f"{error}. Because jax_config.debug_nans.value and/or config.jax_debug_infs is "
                "set, the de-optimized function (i.e., the function as if the `jit` decorator "
                "were removed) was called in an attempt to get a more precise error message. "
                "However, the de-optimized function did not produce invalid values during its "
                "execution. This behavior can result from `jit` optimizations causing the "
                "invalid value to be produced. It may also arise from having nan/inf literals "
                "as inputs or outputs, like `jax.jit(lambda ...: jax.numpy.nan)(...)`. \n\n"
                "It may be possible to avoid the invalid value by removing the `jit` "
                "decorator, at the cost of losing optimizations.") from None

    def _array_key(self, args, kwargs):
        """A cheap cache key, and the argument leaves, when every argument (keywords too) is
        a concrete array (or a numpy array), or a pytree of them (a dict of parameters, a
        key array), with static arguments by value; no sharding is asked for (donated
        arguments are deleted after the call, as on the full path). ``(None, None)``
        otherwise."""
        if self.in_shardings is not UNSPECIFIED or self.out_shardings is not UNSPECIFIED:
            return None, None
        backend = get_backend()
        # x64 changes what tracing the same avals gives; the mesh, what a shard_map reads
        key = [dtypes.x64_enabled(), current_mesh(), trace_settings()]
        if self.static_argnums or self.static_argnames:
            # static arguments by value and type (``1`` and ``1.0`` trace apart), as the full
            # path keys them; the others are the dynamic ones
            positions = self._static_positions(len(args))
            static_kwargs, kwargs = self._split_static_kwargs(kwargs)
            static = (tuple((k, type(args[k]), args[k]) for k in positions)
                      + tuple((name, type(v), v) for name, v in sorted(static_kwargs.items())))
            try:
                hash(static)
            except TypeError:
                return None, None   # the full path's error names it
            key.append(static)
            if positions:
                args = tuple(a for k, a in enumerate(args) if k not in positions)
        leaves = args
        entries = None if kwargs else _leaf_entries(args, backend)
        if entries is None:
            # keywords or containers: the leaves in the order the full path passes them, and
            # their structure in the key (one whose metadata does not hash: the full path)
            leaves, structure = tree.tree_flatten((args, kwargs))
            try:
                hash(structure)
            except TypeError:
                return None, None
            key.append(structure)
            entries = _leaf_entries(leaves, backend)
            if entries is None:
                return None, None
        key += entries
        return tuple(key), leaves

    def _call(self, args, kwargs):
        given = args, kwargs          # the caller's arrays: donated ones are deleted
        args, kwargs = self._place_inputs(args, kwargs)
        static_argnums = self._static_positions(len(args))
        static_kwargs, kwargs = self._split_static_kwargs(kwargs)
        static, dynamic = _split_static(args, static_argnums)
        leaves, in_tree = tree.tree_flatten((dynamic, kwargs))
        if any(isinstance(leaf, Tracer) for leaf in leaves):
            # a traced value that outlived its trace: its value if that became known, else
            # JAX's UnexpectedTracerError
            leaves = [eval_trace.to_tracer(leaf) for leaf in leaves]
            dynamic, kwargs = tree.tree_unflatten(in_tree, leaves)
            args = _rebuild(static, dynamic, len(args))
        _check_no_stand_ins(self.fun, args, kwargs, static_argnums, leaves)
        if any(dtypes.is_float0(leaf) for leaf in leaves):
            return self._call_with_float0(static, static_kwargs, leaves, in_tree, len(args))
        if self.closed_refs or any(map(is_ref, leaves)):
            return self._call_with_refs(args, kwargs, static_argnums, static_kwargs, leaves,
                                        in_tree)
        # committed arguments on devices that cannot meet are JAX's error before tracing
        device = get_backend().committed_device(
            leaves, _qualified_name(self.fun),
            lambda: _argument_names(self.fun, args, kwargs, static_argnums))
        try:
            compiled = self._compiled(args, kwargs, static, static_kwargs, static_argnums,
                                      leaves, in_tree)
        except ClosedOverRef as found:
            if self.ref_calls is None:      # the pure function of another jit's refs
                raise
            self._close_over(found.ref)
            return self._call_with_refs(args, kwargs, static_argnums, static_kwargs, leaves,
                                        in_tree)
        self._last = (compiled, device)
        closed = compiled.closed
        if _no_execution:
            _refuse_execution(self.fun)
        if compiled.module.inserted:
            check_inserted(compiled.module.inserted)
        run_on = leaves if compiled.twin is None else [_to_twin(leaf) for leaf in leaves]
        outs = _own_results(get_backend().execute(compiled.module,
                                                  list(closed.consts) + _held(run_on)),
                            compiled.module)
        outs = compiled.place(leaves, outs)
        if device is not None:
            outs = get_backend().on_device(outs, device)
        if compiled.twin is not None:
            outs = _typed_from_twin(outs)
        if self.donate_argnums or self.donate_argnames:
            # the caller's own arrays, where the call used their buffers (as JAX's)
            outs = self._donate(*given, static_argnums, outs, compiled, placed=(args, kwargs))
        result = tree.tree_unflatten(closed.out_tree, _finished(outs, closed))
        return self._constrain_outputs(result) if compiled.place_after else result

    def _call_with_float0(self, static, static_kwargs, leaves, in_tree, n_args):
        """A call with float0 arguments (zeros holding nothing: an integer's cotangent, as a
        vjp function takes them): the jit of the function of the other leaves, the float0
        ones rebuilt from their types inside, as JAX passes them through."""
        if (self.donate_argnums or self.donate_argnames
                or self.in_shardings is not UNSPECIFIED):
            raise NotImplementedError("jit with in_shardings or donation of a call with float0 "
                                      "arguments")
        types = tuple(float0_aval(leaf) if dtypes.is_float0(leaf) else None for leaf in leaves)
        key = (static, tuple(sorted(static_kwargs.items())), in_tree, types, n_args)
        inner = self.float0_calls.get(key)
        if inner is None:
            fun = self.fun

            def pure(*others):
                it = iter(others)
                flat = [next(it) if aval is None else float0_zeros(aval) for aval in types]
                dyn, kw = tree.tree_unflatten(in_tree, flat)
                return fun(*_rebuild(static, dyn, n_args), **kw, **static_kwargs)

            pure.__name__ = pure.__qualname__ = _name(fun)
            inner = JitFunction(pure, out_shardings=self.out_shardings, resolve=self._resolve)
            self.float0_calls[key] = inner
        return inner(*[leaf for leaf in leaves if not dtypes.is_float0(leaf)])

    def _call_with_refs(self, args, kwargs, static_argnums, static_kwargs, leaves, in_tree):
        """A call whose arguments hold refs (mutable arrays), or whose function closes over
        some: the jit of a pure function that takes the refs' values as inputs and returns
        what the function left in them, written back into the refs once it has run (JAX's
        discharge of their effects). A ref found closed over while tracing it joins them, and
        the call starts again."""
        if (self.donate_argnums or self.donate_argnames or self.out_shardings is not UNSPECIFIED
                or self.in_shardings is not UNSPECIFIED):
            raise NotImplementedError("jit with in_shardings, out_shardings or donation of a "
                                      "function using Refs")
        marks = tuple(bool(is_ref(leaf)) for leaf in leaves)
        passed = [leaf for leaf, is_ref in zip(leaves, marks) if is_ref]
        refs = passed + self.closed_refs
        if len({id(r) for r in refs}) != len(refs):
            self._refuse_aliased_refs(args, kwargs, static_argnums, leaves, marks)
        statics = (tuple((k, args[k]) for k in static_argnums),
                   tuple(sorted(static_kwargs.items())))
        weak = tuple(r._weak for r in refs)
        key = (in_tree, marks, weak, type(refs[0]), tuple(map(id, self.closed_refs)))
        pure = self.ref_calls.get(key)
        if pure is None:
            pure = self.ref_calls[key] = jit(
                _pure_of_refs(self.fun, in_tree, marks, weak, type(refs[0]),
                              tuple(self.closed_refs)),
                static_argnums=(2,))
            pure.ref_calls = None         # a ref it finds closed over is this jit's to take
        plain = [leaf for leaf, is_ref in zip(leaves, marks) if not is_ref]
        try:
            out, written = pure([r._read() for r in refs], plain, _Hashed(statics))
        except ClosedOverRef as found:
            self._close_over(found.ref)
            return self._call_with_refs(args, kwargs, static_argnums, static_kwargs, leaves,
                                        in_tree)
        for ref, value in zip(refs, written):
            # the program's result, typed as the Ref is (a weakly typed Ref reads back so)
            ref._value = value.with_weak(ref._weak) if hasattr(value, "with_weak") else value
        return out

    def _refuse_aliased_refs(self, args, kwargs, static_argnums, leaves, marks):
        """JAX's errors for one Ref passed twice, or passed and closed over."""
        names = _argument_names(self.fun, args, kwargs, static_argnums)
        where: dict = {}
        for leaf, name, is_ref in zip(leaves, names, marks):
            if is_ref:
                where.setdefault(id(leaf), []).append(name)
        fun = where_defined(self.fun)           # (JAX names it with where it is defined)
        for ref in self.closed_refs:
            if id(ref) in where:
                raise ValueError(f"when tracing {fun} for jit, a mutable array reference of "
                                 f"type {ref_type(ref)} was both closed over and passed as "
                                 f"the argument {where[id(ref)][0]}")
        ref_of = {id(leaf): leaf for leaf in leaves}
        key, (first, second, *_) = next((k, n) for k, n in where.items() if len(n) > 1)
        raise ValueError("only one reference to a mutable array may be passed as an argument "
                         f"to a function, but when tracing {fun} for jit the mutable array "
                         f"reference of type {ref_type(ref_of[key])} appeared at both {first} "
                         f"and {second}.")

    def _close_over(self, ref) -> None:
        """Take ``ref``, found closed over while tracing, as a hidden argument from now on."""
        if any(r is ref for r in self.closed_refs):
            raise AssertionError("a closed-over Ref was read outside the refs jit swaps in")
        self.closed_refs.append(ref)
        self.array_calls.clear()
        self.cache.clear()
        self.ref_calls.clear()

    def _donate(self, args, kwargs, static_argnums, outs, compiled, placed=None) -> list:
        """Delete the donated arguments' arrays, as JAX does where the call can reuse their
        memory: each for a result whose block on a device has its block's shape and dtype,
        one result each, else for a result whose block has as many elements (XLA's
        donation); otherwise JAX warns that it was not usable, and the array lives on. A
        result that is a donated array itself stays alive: it is handed out as another array
        over the same data. An array that in_shardings laid out anew into blocks
        (``placed``: the arguments as laid out), or an uncommitted array on one device that a
        computation over several devices splits into blocks (no result is whole on a device
        as it is), lives on: the call donated the copy."""
        kept: set = set()
        if placed is not None and self.in_shardings is not UNSPECIFIED:
            for mine, theirs in zip(tree.tree_leaves((args, kwargs)),
                                    tree.tree_leaves(placed)):
                if not isinstance(mine, Tracer) and hasattr(mine, "is_deleted") \
                        and not _keeps_buffer(mine, theirs):
                    kept.add(id(mine))
        spread = max((_device_count(o) for o in outs), default=1)
        position: dict = {}
        if placed is not None:
            dynamic = _split_static(placed[0], static_argnums)[1]
            position = {id(leaf): k
                        for k, leaf in enumerate(tree.tree_leaves((dynamic, placed[1])))}
        free: dict = {}
        by_size: dict = {}
        for out in outs:
            key = _block_key(out)
            free[key] = free.get(key, 0) + 1
        unusable = []
        donated = [args[k] for k in self.donate_argnums
                   if k < len(args) and k not in static_argnums]
        donated += [v for name, v in kwargs.items() if name in self.donate_argnames]
        leaves = []
        for value in donated:
            for leaf in tree.tree_leaves(value):
                # a concrete array (numpy arrays are copied in: nothing to delete)
                if isinstance(leaf, Tracer) or not hasattr(leaf, "is_deleted") \
                        or leaf.is_deleted() or id(leaf) in kept:
                    continue
                if position.get(id(leaf)) in compiled.unused:
                    continue       # an argument the program never reads is pruned, as JAX's
                if not getattr(leaf, "_committed", False) and _device_count(leaf) < spread \
                        and _split_on_entry(compiled.module.program, position.get(id(leaf))):
                    continue       # moved from its device onto the mesh in blocks: a copy
                leaves.append(leaf)
        unmatched = []
        for leaf in leaves:
            key = _block_key(leaf)
            if free.get(key):
                free[key] -= 1
            else:
                unmatched.append(leaf)
        for (shape, _), count in free.items():
            size = math.prod(shape)
            by_size[size] = by_size.get(size, 0) + count
        matched = [leaf for leaf in leaves if not any(leaf is u for u in unmatched)]
        for leaf in unmatched:
            size = math.prod(_block_key(leaf)[0])
            if by_size.get(size):
                by_size[size] -= 1
                matched.append(leaf)
            else:
                unusable.append(leaf)
        # a donated array the call also takes otherwise: XLA's error (one donated twice, whether
        # or not a result takes it)
        twice = [leaf for k, leaf in enumerate(leaves) if any(leaf is m for m in leaves[:k])]
        if matched or twice:
            _check_donated_once(matched + twice, args, kwargs, static_argnums)
        for leaf in matched:
            outs = [o.copy() if o is leaf else o for o in outs]
            leaf.delete()
        if unusable and not compiled.warned_donation:
            compiled.warned_donation = True
            warnings.warn("Some donated buffers were not usable: " + ", ".join(
                f"{a.dtype.name}[{','.join(map(str, a.shape))}]" for a in unusable) + ".")
        return outs

    def _abstract_stand_ins(self, args, kwargs):
        """The dynamic arguments with each leaf that stands in for an array (not a value,
        but has a dtype: an aval) made a ``ShapeDtypeStruct`` of its shape, dtype, weak type
        and sharding, as JAX's ``shaped_abstractify`` reads one."""
        static = self._static_positions(len(args))
        args = tuple(a if k in static else abstract_stand_ins(a) for k, a in enumerate(args))
        kwargs = {k: v if k in self.static_argnames else abstract_stand_ins(v)
                  for k, v in kwargs.items()}
        return args, kwargs

    def _static_positions(self, n_args: int) -> tuple:
        """The static positions of this call: negative ones count from the end; positions
        past the arguments given are ignored (their defaults are used), as in JAX."""
        return tuple(sorted({k % n_args for k in self.static_argnums if -n_args <= k < n_args}))

    def _split_static_kwargs(self, kwargs):
        static = {k: v for k, v in kwargs.items() if k in self.static_argnames}
        return static, {k: v for k, v in kwargs.items() if k not in self.static_argnames}

    def _static_key(self, static, static_kwargs) -> tuple:
        """Static arguments as a cache key: hashable, and equal only with the same type
        (``1`` and ``1.0`` trace apart)."""
        entries = [(f"index {k}", v) for k, v in static] + \
                  [(f"name {k!r}", v) for k, v in sorted(static_kwargs.items())]
        _check_hashable(value for _, value in entries)
        return tuple((where, type(value), value) for where, value in entries)

    def _place_inputs(self, args, kwargs, nested=False):
        """Lay the positional arguments out by ``in_shardings`` (``nested``: a call traced
        into its caller's program)."""
        if self.in_shardings is UNSPECIFIED:
            return args, kwargs
        if kwargs:
            raise ValueError("pjit does not support kwargs when in_shardings is specified. "
                             f"(jit of {_name(self.fun)} got the keyword arguments "
                             f"{sorted(kwargs)}; pass them by position)")
        static = set(self._static_positions(len(args)))
        dynamic = tuple(a for k, a in enumerate(args) if k not in static)
        prefix = self.in_shardings
        if _is_sharding_leaf(prefix):
            prefix = (prefix,) * len(dynamic)
        names = lambda: _argument_names(self.fun, args, {}, static)
        # a list is taken as the tuple it lists (JAX's implicit cast); any other node, a
        # named tuple included, must match the arguments' tuple as it is
        placed = iter(_place_tree(tuple(prefix) if type(prefix) is list else prefix, dynamic,
                                  self._resolve, "jit in_shardings", names=names,
                                  nested=nested))
        return tuple(a if k in static else next(placed) for k, a in enumerate(args)), kwargs

    def _constrain_outputs(self, result, deferred=None, given=None, nested=False):
        if self.out_shardings is UNSPECIFIED:
            return result
        names = lambda: ["result" + path for path in tree.leaf_paths(result)]
        return _place_tree(self.out_shardings, result, self._resolve, "jit out_shardings",
                           deferred, given, names=names, nested=nested)

    def _count_trace(self) -> None:
        if _no_tracing:
            raise RuntimeError(f"re-tracing function {_name(self.fun)} for `jit`, but "
                               "'no_tracing' is set")
        self.trace_count += 1

    def _traced(self, args, kwargs, static_argnums, static_kwargs, leaves, in_tree,
                parent=None) -> ClosedProgram:
        """The function's program for arguments of this signature: traced at the first, then
        taken from the traces every jit of the function shares. A program closing over a
        value of another trace (``parent``'s, a value of this call only) is not kept."""
        static, _ = _split_static(args, static_argnums)
        key = _hashable((
            in_tree, tuple(aval_of(leaf).strip_vma() for leaf in leaves),
            tuple(weakly_typed(leaf) for leaf in leaves),
            # a layout that splits nothing reads the same to the trace as none, but for its
            # mesh (an AbstractMesh's shard_map runs on the devices of its arguments' mesh)
            tuple(layout if meaningful(layout) else getattr(layout, "mesh", None)
                  for layout in layouts_of(leaves)),
            self._static_key(static, static_kwargs), current_mesh(), dtypes.x64_enabled(),
            trace_settings()))
        closed = _looked_up(self.traces, key, self.fun)
        if closed is None:
            if _explain_cache_misses:
                self._explain_trace_miss(key, args, kwargs, static_argnums)
            self._count_trace()
            closed = trace_function(self.fun, args, kwargs, static_argnums, static_kwargs,
                                    parent=parent)
            if key is not None and not any(isinstance(c, Tracer) for c in closed.consts):
                self.traces[key] = closed
        return closed

    def _explain_trace_miss(self, key, args, kwargs, static_argnums) -> None:
        message = explanation(self.fun, key, list(self.traces),
                              lambda: _argument_names(self.fun, args, kwargs, static_argnums))
        if message is not None:
            _logger.warning(message)

    def _compiled(self, args, kwargs, static, static_kwargs, static_argnums, leaves,
                  in_tree) -> Compiled:
        """The compiled program for a call: from the cache of signatures (the arguments'
        layouts included), else traced (``_traced_for_call``) and lowered
        (``_lowered_program``)."""
        _check_arguments(self.fun, leaves, args, kwargs, static_argnums)
        shardings = tuple(_arrival(get_backend(), x) for x in leaves)
        avals = tuple(aval_of(x).strip_vma() for x in leaves)
        # a Python scalar argument is weakly typed (and an array made from one), an array of
        # its dtype is not
        weak = tuple(weakly_typed(x) for x in leaves)
        # (arguments in_shardings laid out from no mesh run otherwise: ``_twin_for``)
        laid = (() if self.in_shardings is UNSPECIFIED else
                tuple(getattr(x, "_laid_from_no_mesh", False) for x in leaves))
        key = _hashable((in_tree, avals, weak, shardings, self._static_key(static, static_kwargs),
                         current_mesh(), dtypes.x64_enabled(), trace_settings(), laid))
        names = lambda: _argument_names(self.fun, args, kwargs, static_argnums)
        found = _looked_up(self.cache, key, self.fun)
        if found is not None:
            if found.given or found.constraint_devices or _runs_shard_maps(found):
                _check_devices(found, leaves, _qualified_name(self.fun), names)
            return _settled(found)
        started, wall_started = time.perf_counter(), time.time()
        closed, deferred, given = self._traced_for_call(args, kwargs, static_argnums,
                                                        static_kwargs, leaves, in_tree)
        traced, wall_traced = time.perf_counter(), time.time()
        _log_compile_step(lambda: f"Finished tracing {_name(self.fun)} for jit in "
                                  f"{traced - started:.9f} sec")
        _observe_compile(TRACE_EVENT, _name(self.fun), wall_started, wall_traced)
        _log_compile_step(lambda: self._compiling_message(avals, weak, shardings))
        meshes = [s.mesh for s in shardings if isinstance(s, NamedSharding)
                  and isinstance(s.mesh, Mesh)] + [current_mesh()]
        closed = dataclasses.replace(closed, program=_concrete_constraints(
            closed.program, [m for m in meshes if m is not None]))
        call_as = (self, static, dict(static_kwargs), in_tree, avals)
        abstract = _abstract_mesh_of(closed.program, shardings)
        if abstract is not None:
            return self._on_abstract_mesh(args, kwargs, closed, abstract, meshes, shardings,
                                          given, call_as)
        compiled = self._lowered_program(closed, leaves, shardings, deferred, given, call_as)
        _log_compile_step(lambda: f"Finished partitioning and lowering jit({_name(self.fun)}) "
                                  f"in {time.perf_counter() - traced:.9f} sec")
        _observe_compile(COMPILE_EVENT, f"jit_{_name(self.fun)}", wall_traced, time.time())
        if given or compiled.constraint_devices or _runs_shard_maps(compiled):
            _check_devices(compiled, leaves, _qualified_name(self.fun), names)
        if key is not None:
            self.cache[key] = compiled
        return _settled(compiled)

    def _traced_for_call(self, args, kwargs, static_argnums, static_kwargs, leaves, in_tree):
        """(the traced program, the results ``out_shardings`` lays out after the call, each
        result's resolved ``out_shardings`` entry). Without ``out_shardings`` the program
        is the one every call of the signature shares; with them the trace resolves them."""
        deferred: list = []
        given: list = []
        if self.out_shardings is UNSPECIFIED:
            closed = self._traced(args, kwargs, static_argnums, static_kwargs, leaves, in_tree)
        else:
            self._count_trace()
            closed = trace_function(
                self.fun, args, kwargs, static_argnums, static_kwargs,
                constrain_outputs=lambda result: self._constrain_outputs(result, deferred, given))
        return closed, deferred, given

    def _on_abstract_mesh(self, args, kwargs, closed, abstract, meshes, shardings, given,
                          call_as) -> Compiled:
        """A program whose layouts name only ``abstract``: lowered on the devices of a mesh
        its arguments are on or the mesh set, else on those ``compile(device_assignment=)``
        gives (values it closes over or constraints in it on the abstract mesh of the devices
        known are not lowered here: ``on_devices`` None)."""
        known = next((m for m in meshes if isinstance(m, Mesh)), None)
        if known is not None and not self.on_mesh:
            if known.size != abstract.size:
                raise ValueError(f"AbstractMesh size: {abstract.size} does not match the "
                                 f"device assignment size: {known.size}")
            return self._lowered_on(args, kwargs, abstract, tuple(known.devices.flat))
        lowered_on = (functools.partial(self._lowered_on, args, kwargs, abstract)
                      if not self.on_mesh else None)
        return Compiled(closed, None, given=given or None, call_as=call_as,
                        arg_shardings=shardings, context_mesh=current_mesh(),
                        on_devices=lowered_on)

    def _lowered_program(self, closed, leaves, shardings, deferred, given, call_as) -> Compiled:
        """``closed`` partitioned and lowered for arguments ``leaves`` laid out by
        ``shardings``."""
        traced_constraints = _constraint_devices(closed.program)
        _check_ordered_effects(closed.program, shardings)
        # Work nothing reads goes before lowering (e.g. a gradient's unused forward value).
        inspections: list = []          # made when it is compiled (``_settled``)
        program = dce(closed.program)
        twin = _twin_for(program, leaves)
        if twin is not None:
            leaves = [_to_twin(leaf) for leaf in leaves]
            shardings = tuple(get_backend().sharding_of(leaf) for leaf in leaves)
        unused = (frozenset() if self.keep_unused or self.in_shardings is not UNSPECIFIED
                  else _unused_inputs(program))
        program, inserted, propagated = _partitioned(
            program, list(closed.consts) + [None if k in unused else leaf
                                            for k, leaf in enumerate(leaves)], inspections)
        closed = dataclasses.replace(closed, program=program)
        const_shardings = tuple(get_backend().sharding_of(c) for c in closed.consts)
        module = lower_module(closed.program, const_shardings + shardings)
        module.inserted, module.propagated = inserted, propagated
        return Compiled(closed, module, place_after=bool(deferred), given=given or None,
                        call_as=call_as, arg_shardings=shardings, context_mesh=current_mesh(),
                        constraint_devices=traced_constraints, inspections=inspections,
                        unused=unused, twin=twin)

    def _lowered_on(self, args, kwargs, abstract: AbstractMesh, device_assignment) -> Compiled:
        """The program traced for ``abstract`` lowered on ``device_assignment`` (the mesh of
        those devices that it abstracts), as JAX compiles such a program."""
        if device_assignment is None:
            raise RuntimeError("device_assignment cannot be `None` during compilation. Please "
                               "pass a tuple of devices to `.compile(device_assignment=)`")
        devices = tuple(device_assignment)
        if len(devices) != abstract.size:
            raise ValueError(f"The size of abstract mesh {abstract.size} in {abstract} must "
                             f"match the length of device assignment: {len(devices)}")
        mesh = Mesh(np.array(devices, dtype=object).reshape(abstract.axis_sizes),
                    abstract.axis_names, axis_types=abstract.axis_types)
        on_mesh = functools.partial(_on_mesh, mesh)
        args, kwargs = tree.tree_map(on_mesh, (args, kwargs),
                                     is_leaf=lambda x: isinstance(x, ShapeDtypeStruct))
        concrete = JitFunction(self.fun, self.static_argnums, self.static_argnames,
                               self.donate_argnums, self.donate_argnames,
                               _shardings_on(mesh, self.in_shardings),
                               _shardings_on(mesh, self.out_shardings), self._resolve)
        concrete.on_mesh = mesh
        return concrete.lower(*args, **kwargs)

    def _compiling_message(self, avals, weak, shardings) -> str:
        types_text = ", ".join(f"ShapedArray({aval}{', weak_type=True' if w else ''})"
                               for aval, w in zip(avals, weak))
        mapping = ", ".join("UnspecifiedValue" if self.in_shardings is UNSPECIFIED or s is None
                            else repr(s) for s in shardings)
        trailing = "," if len(avals) == 1 else ""
        return (f"Compiling jit({_name(self.fun)}) with global shapes and types "
                f"({types_text}{trailing}). Argument mapping: ({mapping}{trailing}).")

    def eval_shape(self, *args, **kwargs):
        """The results' shapes, dtypes and layouts, without running (``ShapeDtypeStruct``s)."""
        compiled = self._lowered(args, kwargs)
        # on an abstract mesh only: as the traced program types them
        return (compiled if compiled.module is None else compiled.compile()).out_info

    def trace(self, *args, **kwargs) -> "Traced":
        """JAX's ``jit(f).trace(*args)``: the traced program (``.jaxpr``), to lower
        (``.lower()``) without tracing again."""
        return Traced(self._lowered(args, kwargs), _name(self.fun))

    def lower(self, *args, **kwargs) -> Compiled:
        """Trace and lower without running: the traced program and the per-device programs.
        An argument may stand in for one: a ``ShapeDtypeStruct``, or, as JAX abstracts it,
        any object with a ``dtype`` and a shape (an aval such as ``jax.typeof(x)``). Where
        only abstract meshes say where it runs, JAX's ValueError: ``trace(...).lower()``
        lowers it, for ``compile(device_assignment=)`` to place."""
        _lowering_only.append(True)
        try:
            compiled = self._lowered(args, kwargs)
        finally:
            _lowering_only.pop()
        if compiled.on_devices is not None:
            mesh = current_mesh()
            raise ValueError(
                "Passing lowering_platforms via jax.export or "
                "jit(f).trace(*args).lower(lowering_platforms=...) is required when only "
                "AbstractMesh exists in a jitted computation. Got context mesh: "
                f"{mesh if mesh is not None else EMPTY_CONCRETE_MESH}")
        return compiled

    def _lowered(self, args, kwargs) -> Compiled:
        args, kwargs = self._abstract_stand_ins(args, kwargs)
        args, kwargs = self._place_inputs(args, kwargs)
        static_argnums = self._static_positions(len(args))
        static_kwargs, kwargs = self._split_static_kwargs(kwargs)
        static, dynamic = _split_static(args, static_argnums)
        leaves, in_tree = tree.tree_flatten((dynamic, kwargs))
        return self._compiled(args, kwargs, static, static_kwargs, static_argnums, leaves,
                              in_tree)


def _hashable(key):
    """``key``, or None where it does not hash (a pytree's unhashable metadata): no cache."""
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _looked_up(cache: dict, key, fun):
    """``cache[key]`` (None where absent, or where ``key`` is None). A user's ``__eq__`` (a
    static argument's) that raises while keys are compared is JAX's ValueError."""
    if key is None:
        return None
    try:
        return cache.get(key)
    except Exception as error:
        raise ValueError(
            "static arguments should be comparable using __eq__. The following error "
            f"was raised when comparing the static arguments of a call to "
            f"'{_name(fun)}' with those of an earlier call: "
            f"{type(error).__name__}: {error}") from error


def _leaf_entries(leaves, backend):
    """Each leaf's part of a cached call's key, or None where a leaf is no concrete array
    (a container, a Python number, a traced value, a ShapeDtypeStruct: the full path takes
    those, and refuses what it must, naming it)."""
    entries = []
    for a in leaves:
        if type(a) is np.ndarray:
            # a host array (a batch read at each step): its shape and dtype say it all
            entries.append((a.shape, a.dtype))
            continue
        if type(a) is ShapeDtypeStruct:
            return None
        aval = _aval_attribute(a)
        if aval is None or isinstance(a, Tracer) or aval.vma:
            return None
        entry = (aval, backend.sharding_of(a), getattr(a, "_committed", False))
        entries.append(entry + ("weak",) if getattr(a, "weak", False) is True else entry)
    return entries


def _aval_attribute(value):
    """``value.aval``, None where it has none: a pytree node's own attribute lookup may raise
    anything (a dict whose ``__getattr__`` is ``__getitem__`` raises KeyError). Nothing is
    hidden: such a value is no array, and the call takes the full path, which flattens it
    and reports what is wrong with its leaves."""
    try:
        return getattr(value, "aval", None)
    except Exception:
        return None


def abstract_stand_ins(value):
    """``value`` (a pytree) with each leaf that stands in for an array made a
    ``ShapeDtypeStruct`` (``_stand_in``): the arguments ``lower`` and ``eval_shape`` take."""
    return tree.tree_map(_stand_in, value)


def _stand_in(leaf):
    """``leaf`` as ``lower`` takes it: an object that is no value but has a dtype (an aval,
    JAX's ``ShapedArray`` or the like) as a ``ShapeDtypeStruct``; a struct of a key dtype as
    keys over their data's struct; anything else as it is."""
    if isinstance(leaf, ShapeDtypeStruct) and leaf.extended:
        return leaf.dtype.stand_in(leaf)
    if getattr(leaf, "stands_for_a_value", False) and leaf.sharding.mesh.empty:
        # a type on no mesh (jax.core.ShapedArray(shape, dtype)): in_shardings lay it out
        return ShapeDtypeStruct(leaf.shape, leaf.dtype, weak_type=leaf.weak_type,
                                manual_axis_type=leaf.manual_axis_type)
    if (isinstance(leaf, (Tracer, ShapeDtypeStruct, np.ndarray, np.generic))
            or getattr(leaf, "dtype", None) is None or is_jax_value(leaf)
            or getattr(leaf, "__jax_array__", None) is not None):
        return leaf
    if isinstance(leaf, Aval):          # shardc's own type of a value (``jax.typeof(x)``)
        sharding = named_sharding(leaf)
    else:
        sharding = getattr(leaf, "sharding", None)
    return ShapeDtypeStruct(np.shape(leaf), leaf.dtype, sharding=sharding,
                            weak_type=bool(getattr(leaf, "weak_type", False)))


def _pure_of_refs(fun, in_tree, marks, weak, ref_class, closed):
    """``fun`` as a pure function of (the refs' values, the other argument leaves, the static
    arguments): fresh refs of the same types (``weak``: each weakly typed or not) stand for
    the refs passed while it runs, and the refs it closes over (``closed``, after them) hold
    traced values; it returns its result and what it left in all of them."""
    def pure(ref_values, plain, statics):
        held = [weakened(v) if w else v for v, w in zip(ref_values, weak)]
        fresh = [ref_class(v, weak=w) for v, w in zip(held[:len(held) - len(closed)], weak)]
        refs, others = iter(fresh), iter(plain)
        dynamic, kwargs = tree.tree_unflatten(
            in_tree, [next(refs) if is_ref else next(others) for is_ref in marks])
        positional, static_kwargs = statics.value
        args, dynamic = [], list(dynamic)
        fixed = dict(positional)
        for k in range(len(dynamic) + len(fixed)):
            args.append(fixed[k] if k in fixed else dynamic.pop(0))
        with swapped_in(closed, held[len(fresh):]):
            out = fun(*args, **kwargs, **dict(static_kwargs))
            left = [r._value for r in fresh + list(closed)]     # (freed or not)
        returned = [leaf for leaf in tree.tree_leaves(out) if is_ref(leaf)]
        if returned:
            raise ValueError(f"function {where_defined(fun)} traced for jit returned a mutable "
                             f"array reference of type {ref_type(returned[0])}, but mutable "
                             "array references cannot be returned.")
        return out, left
    pure.__name__ = _name(fun)                 # named as the function, in errors
    pure.__qualname__ = _qualified_name(fun)
    return pure


class _Hashed:
    """Static arguments handed on as one static argument, hashed and compared by value."""
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __hash__(self):
        return hash(self.value)

    def __eq__(self, other):
        return isinstance(other, _Hashed) and self.value == other.value


def _name(fun) -> str:
    return getattr(fun, "__name__", type(fun).__name__)


def _deleted(leaf) -> bool:
    is_deleted = getattr(leaf, "is_deleted", None)
    return callable(is_deleted) and bool(is_deleted())


def _qualified_name(fun) -> str:
    return getattr(fun, "__qualname__", None) or _name(fun)


def _argument_names(fun, args, kwargs, static_argnums) -> list:
    """Each argument leaf's name as JAX's errors give it (``a``, ``a['k']``, ``args[1]``), in
    the order the call flattens them: positional arguments but the static ones, then
    keywords."""
    try:
        parameters = list(inspect.signature(fun).parameters.values())
    except (TypeError, ValueError):
        parameters = []
    positional = [p.name for p in parameters if p.kind in (
        inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    rest = next((p.name for p in parameters if p.kind is inspect.Parameter.VAR_POSITIONAL),
                "args")
    names = []
    for k, arg in enumerate(args):
        if k in static_argnums:
            continue
        base = positional[k] if k < len(positional) else f"{rest}[{k - len(positional)}]"
        names += [base + path for path in tree.leaf_paths(arg)]
    for key, arg in kwargs.items():
        names += [key + path for path in tree.leaf_paths(arg)]
    return names


def _is_device(entry) -> bool:
    """Whether ``entry`` is a device (by what it has: the compiler does not import the
    runtime's devices); a sharding has devices of its own (``device_set``)."""
    return (hasattr(entry, "platform") and hasattr(entry, "process_index")
            and not hasattr(entry, "device_set"))


def _check_no_unconstrained(shardings, name: str) -> None:
    """JAX's ValueError for ``P.UNCONSTRAINED`` in jit's in_shardings or out_shardings (a
    dimension left to propagation is for sharding constraints inside a function, not for
    the layouts a call takes or gives) and for a NamedSharding on the empty mesh (it lays
    nothing out); its DuplicateSpecError for a PartitionSpec there naming an axis twice; and
    its TypeError for an entry that is no sharding at all (an axis name as a string, a
    number)."""
    if shardings is UNSPECIFIED:
        return
    for entry in tree.tree_leaves(shardings, is_leaf=_is_sharding_leaf):
        if isinstance(entry, (str, int, float, complex)) or _is_device(entry):
            # bool, an axis name, a device (a Sharding names it: SingleDeviceSharding) ...
            raise TypeError(f"{name} leaf specifications are expected to be PartitionSpec "
                            f"instances or None, but got {entry}")
        if isinstance(entry, NamedSharding) and entry.mesh.empty:
            raise ValueError(f"One of {name} leaf specifications got an empty NamedSharding: "
                             f"{entry} which is not allowed.")
        spec = entry.spec if isinstance(entry, NamedSharding) else entry
        if isinstance(spec, PartitionSpec) and UNCONSTRAINED in spec:
            raise ValueError(f"Unconstrained dims are not allowed when passed to {name}: "
                             f"{entry}")
        if isinstance(entry, PartitionSpec):
            check_unique_axes(entry, name)      # JAX's DuplicateSpecError, naming the option


def _device_ids(sharding) -> tuple | None:
    """The ids of the devices a sharding lays a value on, in order; None for a mesh that
    names no devices (an abstract one)."""
    if isinstance(sharding, NamedSharding):
        ids = getattr(sharding.mesh, "flat_device_ids", None)
        return None if ids is None else tuple(ids)
    devices = getattr(sharding, "_device_assignment", None)
    return None if devices is None else tuple(d.id for d in devices)


def _abstract_mesh_of(program, shardings):
    """The abstract mesh (no devices) that ``program``'s types or its arguments' layouts
    name, where one does: such a program is lowered once devices are given for it."""
    laid = [s.mesh for s in shardings if isinstance(s, NamedSharding)]
    return next((m for m in list(type_meshes(program)) + laid
                 if isinstance(m, AbstractMesh)), None)


def _on_mesh(mesh, x):
    """``x`` (a sharding, or a stand-in laid out by one) on the abstract mesh of ``mesh``
    made the same on ``mesh``; anything else as it is."""
    if isinstance(x, NamedSharding) and x.mesh == mesh.abstract_mesh:
        return NamedSharding(mesh, x.spec)
    if isinstance(x, ShapeDtypeStruct) and isinstance(x._sharding, NamedSharding):
        return ShapeDtypeStruct(x.shape, x.dtype, _on_mesh(mesh, x._sharding), x.weak,
                                x.manual_axis_type)
    return x


def _shardings_on(mesh, prefix):
    """A jit's ``in_shardings``/``out_shardings`` with those on the abstract mesh of ``mesh``
    made the same on ``mesh``."""
    if prefix is UNSPECIFIED:
        return prefix
    return tree.tree_map(functools.partial(_on_mesh, mesh), prefix, is_leaf=_is_sharding_leaf)


def _concrete_constraints(program, meshes):
    """``program`` with each constraint to a layout on an abstract mesh (of Auto axes: no
    type names it) laid on the devices of the first of ``meshes`` (the computation's: its
    arguments', the mesh set) that it abstracts, as JAX takes them from the computation's
    devices; ``program`` itself where there is none."""
    from ir.core import Eqn

    def rewrite(prog):
        eqns, changed = [], False
        for eqn in prog.eqns:
            new = replace_sub_programs(eqn, rewrite)
            target = new.params.get("sharding") if new.primitive is \
                prims.sharding_constraint_p else None
            if (isinstance(target, NamedSharding) and isinstance(target.mesh, AbstractMesh)
                    and not target.mesh.explicit_axes):
                mesh = next((m for m in meshes
                             if m.shape_tuple == target.mesh.shape_tuple), None)
                if mesh is not None:
                    new = Eqn(new.primitive, new.invars, new.outvars,
                              dict(new.params, sharding=NamedSharding(mesh, target.spec)),
                              new.source)
            changed = changed or new is not eqn
            eqns.append(new)
        return dataclasses.replace(prog, eqns=eqns) if changed else prog
    return rewrite(program) if meshes else program


def _constraint_devices(program) -> tuple:
    """``(device ids, source)`` of each layout on a mesh of devices that ``program`` (its
    sub-programs too) constrains a value to."""
    found = []
    for eqn in program.eqns:
        if eqn.primitive is prims.sharding_constraint_p:
            ids = _device_ids(eqn.params["sharding"])
            if ids is not None:
                found.append((ids, eqn.source))
        for _, _, sub in sub_programs(eqn):
            found.extend(_constraint_devices(sub))
    return tuple(found)


def _check_devices(compiled, leaves, fun_name: str, names) -> None:
    """JAX's ValueError where the committed arguments (laid out by ``in_shardings`` or by
    their makers), the ``out_shardings`` entries and the layouts the program constrains
    values to are not all on the same devices, in the same order: one computation runs on
    one set of devices."""
    sources = []            # (kind, what, device ids): arguments first, as JAX orders them
    for k, leaf in enumerate(leaves):
        if getattr(leaf, "_committed", False):
            ids = _device_ids(leaf.sharding)
            if ids is not None:
                sources.append(("argument", k, ids))
                break       # the arguments agree with each other (checked when they run)
    for sharding in compiled.given or ():
        ids = None if sharding is None else _device_ids(sharding)
        if ids is not None:
            sources.append(("output", None, ids))
    sources += [("constraint", source, ids) for ids, source in compiled.constraint_devices]
    if sources and sources[0][0] == "argument":
        # a shard_map computes on its mesh's devices: committed arguments must be there
        sources += [("shard_map", source, ids) for what, ids, source in _inner_meshes(compiled)
                    if what == "shard_map"]
    if not sources:
        return
    first = sources[0]
    for source in sources[1:]:
        if source[2] != first[2]:
            described = []
            for kind, what, ids in (first, source):
                where = f"with device ids {list(ids)} on platform CPU"
                if kind == "output":
                    described.append(f"explicit output sharding {where}")
                elif kind in ("constraint", "shard_map"):
                    at = (f" at {what.file}:{what.line} ({what.function})"
                          if what is not None else "")
                    name = "sharding_constraint" if kind == "constraint" else kind
                    described.append(f"{name} inside jit {where}{at}")
                else:
                    described.append(f"argument {names()[what]} of {fun_name} with shape "
                                     f"{aval_of(leaves[what]).str_long()} and {where}")
            raise ValueError("Received incompatible devices for jitted computation. Got "
                             f"{described[0]} and {described[1]}")


_is_sharding_leaf = tree.is_spec_leaf


def _prefix_message(prefix, values, what: str) -> str:
    """JAX's error for shardings that do not fit the arguments (a tuple of them) or results:
    the wrong number of argument shardings, else every mismatch."""
    name = "pjit " + what.split()[-1]
    if what == "jit in_shardings" and (type(prefix) is not tuple or len(prefix) != len(values)):
        message = (f"{name} specification must be a tree prefix of the positional arguments "
                   f"tuple. In particular, {name} must either be a Sharding, a PartitionSpec, "
                   "or a tuple of length equal to the number of positional arguments. But ")
        message += (f"{name} is not a tuple: got {type(prefix)} instead."
                     if type(prefix) is not tuple else
                     f"{name} is the wrong length: got a tuple or list of length {len(prefix)} "
                     f"for an args tuple of length {len(values)}.")
        if len(values) == 1:
            try:
                tree.broadcast_prefix((prefix,), values, is_leaf=_is_sharding_leaf, name=name)
            except tree.PrefixError:
                return message
            message += (" Given the corresponding argument being passed, it looks like "
                        f"{name} might need to be wrapped in a singleton tuple.")
        return message
    return tree.mismatch_details(name, prefix, values, is_leaf=_is_sharding_leaf)


def _place_tree(prefix, values, resolve, what: str, deferred=None, given=None, names=None,
                nested=False):
    """Each leaf of ``values`` laid out by the entry of ``prefix`` covering it (None: as it
    is). Concrete values move now; traced ones get a sharding constraint, or, for one device,
    are noted in ``deferred`` to be placed once the program has run. ``given`` gets each
    leaf's resolved sharding (None where the prefix leaves it as it is); ``names()``, each
    leaf's name for JAX's error where a sharding names more dimensions than it has.
    ``nested``: the values are a nested jit's, traced in its caller's program."""
    leaves, treedef = tree.tree_flatten(values)
    try:
        targets = tree.broadcast_prefix(prefix, values, is_leaf=_is_sharding_leaf, name=what)
    except tree.PrefixError:
        raise ValueError(_prefix_message(prefix, values, what)) from None
    placed = []
    for k, (leaf, target) in enumerate(zip(leaves, targets)):
        if dtypes.is_float0(leaf):
            placed.append(leaf)         # holds nothing to lay out
            continue
        if isinstance(target, Format):
            target = sharding_of_format(target, aval_of(leaf).shape, what)
        sharding = resolve(target, what) if target is not None else None
        if (isinstance(sharding, NamedSharding) and isinstance(sharding.mesh, AbstractMesh)
                and not isinstance(leaf, Tracer)):
            sharding = _on_own_devices(sharding, leaf)
        if isinstance(sharding, NamedSharding) and len(sharding.spec) > ndim_of_leaf(leaf):
            check_rank(sharding, ndim_of_leaf(leaf),
                       "pjit arguments" if what == "jit in_shardings" else "pjit outputs",
                       names()[k] if names is not None else "")
        if given is not None:
            given.append(sharding)
        # one on no mesh (a host value, an array on one device, a stand-in without a
        # sharding) moves as asked, but JAX types it by itself: split over no axis
        typed = aval_of(leaf) if what == "jit in_shardings" and not isinstance(
            leaf, Tracer) and not isinstance(getattr(leaf, "sharding", None), NamedSharding) \
            else None
        if sharding is None:
            placed.append(leaf)
        elif isinstance(leaf, ShapeDtypeStruct):
            # a stand-in argument to lower(): it takes the layout asked for
            stand_in = ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding,
                                        weak_type=leaf.weak,
                                        manual_axis_type=leaf.manual_axis_type)
            placed.append(stand_in if typed is None else stand_in.typed_as(typed))
        elif isinstance(leaf, Tracer):
            placed.append(_traced_placed(leaf, sharding, nested, deferred))
        else:
            placed.append(_concrete_placed(leaf, sharding, what, typed))
    return tree.tree_unflatten(treedef, placed)


def _on_own_devices(sharding: NamedSharding, leaf) -> NamedSharding:
    """A sharding on an abstract mesh for a value placed now: on the devices of the value's
    own mesh or the mesh set, where it is the one abstracted (a traced value's are the
    computation's, found later); as it is otherwise."""
    have = get_backend().sharding_of(leaf)
    if isinstance(leaf, ShapeDtypeStruct):
        have = leaf._sharding
    meshes = [getattr(have, "mesh", None), current_mesh()]
    mesh = next((m for m in meshes if isinstance(m, Mesh)
                 and m.shape_tuple == sharding.mesh.shape_tuple), None)
    return sharding if mesh is None else NamedSharding(mesh, sharding.spec)


def _traced_placed(leaf, sharding, nested: bool, deferred):
    """A traced value laid out by ``sharding``: a mesh layout is part of the program (a
    sharding constraint); a single device is where the caller gets the value, noted in
    ``deferred`` to be placed when the program has run. A nested jit's shardings retype no
    value its type splits over Explicit axes already (JAX types a nested jit's results as
    its body does)."""
    from compiler.tracing import bind
    if not isinstance(sharding, NamedSharding):
        if deferred is not None:
            deferred.append(sharding)
        return leaf
    if nested and sharding.mesh.explicit_axes and aval_of(leaf).type_sharding is not None:
        return leaf
    check_divides(sharding, aval_of(leaf).shape)        # JAX's IndivisibleError
    return bind(prims.sharding_constraint_p, leaf, sharding=sharding)


def _concrete_placed(leaf, sharding, what: str, typed):
    """A concrete value laid out by ``sharding`` now (``typed``: the type it keeps, JAX's
    type of a value laid out from no mesh by in_shardings; None: its layout's)."""
    from compiler.tracing import bind
    if _same_layout(get_backend().sharding_of(leaf), sharding, leaf):
        if what == "jit out_shardings" and not isinstance(sharding, NamedSharding):
            # a result on the device asked for is committed to it, as JAX's
            (leaf,) = get_backend().on_device([leaf], sharding.device)
        return leaf
    if what == "jit in_shardings":
        _check_committed(leaf, sharding)
    if isinstance(sharding, NamedSharding):
        check_divides(sharding, aval_of(leaf).shape)        # JAX's IndivisibleError
    weak = weakly_typed(leaf)
    leaf = bind(prims.sharding_constraint_p, leaf, sharding=sharding)
    if typed is not None and not isinstance(leaf, Tracer):
        # (placed under a trace, a vmap's or an enclosing jit's, it is traced: typed by its
        # layout, as a traced argument is)
        leaf = leaf.typed_as(typed)
        leaf._laid_from_no_mesh = True      # (``_twin_for``)
    if weak:        # a Python number laid out stays weakly typed, as JAX's
        leaf = weakened(leaf)
    return leaf


def _twin_for(program: Program, leaves) -> "Mesh | None":
    """The Explicit mesh a program runs on the Auto twin of, or None. Arguments that jit's
    in_shardings laid out on an Explicit mesh from no mesh are typed by themselves (unsplit)
    while laid out split; with no mesh set, XLA lays such a program out from their layouts,
    and its results report the layouts it chose as their types (JAX's). On the twin,
    propagation does the same. Only on a mesh of Explicit axes alone, and not where any type
    splits a value, or the program names the mesh itself (a shard_map on it, a
    constraint)."""
    if current_mesh() is not None:
        return None
    meshes = set()
    for leaf in leaves:
        sharding = getattr(leaf, "sharding", None)
        if not isinstance(sharding, NamedSharding):
            continue
        meshes.add(sharding.mesh)
        if not getattr(leaf, "_laid_from_no_mesh", False):
            return None       # an array of the mesh already: typed by its layout
    if len(meshes) != 1:
        return None
    (mesh,) = meshes
    if not isinstance(mesh, Mesh) or len(mesh.explicit_axes) != len(mesh.axis_names) \
            or type_meshes(program) or mesh in annotated_meshes(program):
        return None
    return mesh


def _to_twin(leaf):
    """An argument laid out on an Explicit mesh, as laid out on its Auto twin (the same
    blocks)."""
    sharding = getattr(leaf, "sharding", None)
    if not isinstance(sharding, NamedSharding) or not sharding.mesh.explicit_axes:
        return leaf
    entries = list(sharding.spec)       # spelt as a layout XLA reads back: no trailing None
    while entries and entries[-1] is None:
        entries.pop()
    return leaf.retyped_on(NamedSharding(auto_twin(sharding.mesh),
                                         sharding.spec.update(partitions=entries)), leaf.aval)


@functools.lru_cache(maxsize=64)
def auto_twin(mesh: Mesh) -> Mesh:
    """``mesh`` with every axis Auto (the same devices, names and sizes), which knows the
    mesh it stands for (``_twin_of``)."""
    twin = Mesh(mesh.devices, mesh.axis_names,
                axis_types=(AxisType.Auto,) * len(mesh.axis_names))
    twin._twin_of = mesh
    return twin


def _typed_from_twin(outs) -> list:
    """Results laid out on an Explicit mesh's Auto twin, as they are on that mesh: their
    layouts are their types there (JAX's results of a program XLA laid out)."""
    placed = []
    for out in outs:
        sharding = getattr(out, "sharding", None)
        explicit = getattr(getattr(sharding, "mesh", None), "_twin_of", None)
        if explicit is None:
            placed.append(out)
            continue
        spec = sharding.spec            # spelt as XLA's layouts read back (as on the twin)
        names = spec_names(spec) + ((),) * (out.ndim - len(spec))
        placed.append(out.retyped_on(
            NamedSharding(explicit, spec),
            out.aval.with_sharding(TypeSharding.of(explicit, names) if any(names) else None)))
    return placed


def ndim_of_leaf(leaf) -> int:
    """The rank of an argument or result: a traced or concrete array's, a host value's."""
    shape = getattr(leaf, "shape", None)
    return len(shape) if shape is not None else np.ndim(leaf)


def _moved_to(leaf, sharding):
    """An uncommitted array or host value laid out by ``sharding`` (a mesh's) where it is not
    already; anything else as it is."""
    if (not isinstance(sharding, NamedSharding) or isinstance(leaf, Tracer)
            or getattr(leaf, "_committed", False)
            or _same_layout(get_backend().sharding_of(leaf), sharding, leaf)):
        return leaf
    from compiler.tracing import bind
    moved = bind(prims.sharding_constraint_p, leaf, sharding=sharding)
    return weakened(moved) if weakly_typed(leaf) else moved


def _same_layout(have, sharding, leaf) -> bool:
    """Whether an array laid out by ``have`` is laid out by ``sharding`` already: the same
    sharding, or one that puts the same blocks on the same devices (a 1-D mesh's P('i') and a
    4x2 mesh's P(('a', 'b')) over the same devices in order), as JAX's check of a committed
    argument against in_shardings compares them."""
    if have == sharding:
        return True
    if have is None or not hasattr(have, "is_equivalent_to"):
        return False
    try:
        return have.is_equivalent_to(sharding, np.ndim(leaf))
    except (TypeError, ValueError, NotImplementedError):
        return False


def _inner_meshes(compiled) -> list:
    """``_meshes_in`` of a compiled program, found once."""
    inner = compiled.__dict__.get("_inner_meshes")
    if inner is None:
        inner = compiled._inner_meshes = _meshes_in(compiled.closed.program)
    return inner


def _runs_shard_maps(compiled) -> bool:
    return any(what == "shard_map" for what, _, _ in _inner_meshes(compiled))


def _meshes_in(program) -> list:
    """(what, device ids, source) of each shard_map and sharding constraint on a mesh in
    ``program``, its loops' and branches' programs included."""
    found = []
    for eqn in program.eqns:
        mesh = None
        if eqn.primitive is prims.shard_map_p:
            mesh, what = eqn.params["mesh"], "shard_map"
        elif eqn.primitive is prims.sharding_constraint_p:
            mesh, what = getattr(eqn.params["sharding"], "mesh", None), "sharding_constraint"
        ids = getattr(mesh, "flat_device_ids", None)
        if ids is not None:
            found.append((what, tuple(ids), eqn.source))
        for value in eqn.params.values():
            for sub in programs_in(value):
                found += _meshes_in(sub)
    return found


def _split_on_entry(program, position) -> bool:
    """Whether ``program`` first reads its input at ``position`` in a shard_map whose in_spec
    splits it: the call lays an array held on one device out in blocks for it."""
    if position is None or position >= len(program.invars):
        return False
    var = program.invars[position]
    for eqn in program.eqns:
        if any(a is var for a in eqn.invars):
            if eqn.primitive is not prims.shard_map_p:
                return False
            k = next(i for i, a in enumerate(eqn.invars) if a is var)
            return bool(spec_axes(eqn.params["in_specs"][k]))
    return False


def _block_key(value) -> tuple:
    """The shape and dtype of ``value``'s block on one device (what JAX matches a donated
    argument with a result by)."""
    shape = tuple(np.shape(value))
    sharding = get_backend().sharding_of(value)
    if sharding is not None and hasattr(sharding, "shard_shape"):
        shape = tuple(sharding.shard_shape(shape))
    return shape, np.dtype(getattr(value, "dtype", np.result_type(value)))


def _device_count(value) -> int:
    """How many devices ``value`` is laid out on (1 for a value not laid out)."""
    sharding = get_backend().sharding_of(value)
    devices = getattr(sharding, "device_set", None)
    return len(devices) if devices else 1


def _check_donated_once(donated, args, kwargs, static_argnums) -> None:
    """XLA's error for an array the call donates that it also takes as another argument (or
    donates twice): nothing is deleted, as nothing runs in JAX."""
    flat = tree.tree_leaves((_split_static(args, static_argnums)[1], kwargs))
    for leaf in donated:
        uses = [k for k, other in enumerate(flat) if other is leaf]
        if len(uses) > 1:
            raise _transfer_guard.JaxRuntimeError(
                "INVALID_ARGUMENT: Attempt to use a buffer that was previously donated in the "
                f"same call to Execute() (flattened argument {uses[1]}, replica 0, partition 0, "
                f"first use: {uses[0]}). Toy example for this bug: `f(donate(a), a)`.")


def _keeps_buffer(leaf, placed) -> bool:
    """Whether ``placed`` (``leaf`` laid out by in_shardings) holds ``leaf``'s own buffer, so
    that donating it deletes ``leaf``, as JAX's does: ``leaf`` itself, or ``leaf`` on one
    device placed so that this device keeps the whole array (replicated there). Laid out
    anew in blocks, the blocks are copies: the copy is donated and ``leaf`` lives on."""
    if placed is leaf:
        return True
    have = get_backend().sharding_of(leaf)
    devices = getattr(have, "device_set", None)
    target = get_backend().sharding_of(placed)
    if not devices or len(devices) != 1 or target is None:
        return False
    (device,) = devices
    try:
        index = target.devices_indices_map(np.shape(leaf)).get(device)
    except (TypeError, ValueError, NotImplementedError):
        return True
    return index is not None and all(
        isinstance(i, slice) and i.indices(n) == (0, n, 1)
        for i, n in zip(index, np.shape(leaf)))


def _check_committed(leaf, sharding) -> None:
    """JAX's ValueError for an argument laid out on a mesh that ``in_shardings`` would move:
    it is committed to its layout (on Explicit axes its type says so), which a call does not
    change; an array on one device, where it was made, moves."""
    have = getattr(leaf, "sharding", None)
    if isinstance(have, NamedSharding):
        raise ValueError(
            "Sharding passed to jit does not match the sharding on the respective arg. Got "
            f"jit sharding: {sharding!r},\narg sharding: {have!r} for arg type: "
            f"{aval_of(leaf).str_long()}")


def resolve_argnums(fun, static_argnums, static_argnames, donate_argnums, donate_argnames):
    """Static and donated positions and names, each completed from the other through
    ``fun``'s signature and checked against it, as JAX does."""
    if all(v is None or v == () for v in (static_argnums, static_argnames, donate_argnums,
                                           donate_argnames)):
        return (), (), (), ()
    try:
        signature = inspect.signature(fun)
    except (TypeError, ValueError):
        signature = None
    if signature is None and donate_argnames is not None and donate_argnames != ():
        # donated names cannot be placed without the signature (JAX's error)
        raise ValueError(f"Getting the signature of function {fun} failed. Pass "
                         "donate_argnums instead of donate_argnames.")
    static_argnums, static_argnames = _infer_argnums_and_argnames(
        signature, static_argnums, static_argnames)
    donate_argnums, donate_argnames = _infer_argnums_and_argnames(
        signature, donate_argnums, donate_argnames)
    if signature is not None:
        _check_argnums(signature, static_argnums, "static_argnums")
        _check_argnames(signature, static_argnames, "static_argnames")
        _check_argnums(signature, donate_argnums, "donate_argnums")
        _check_argnames(signature, donate_argnames, "donate_argnames")
    both = set(static_argnames) & set(donate_argnames)
    if both:
        raise ValueError("static_argnames and donate_argnames cannot intersect. Argument names "
                         f"{both} appear in both static_argnames and donate_argnames")
    return static_argnums, static_argnames, donate_argnums, donate_argnames


_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _infer_argnums_and_argnames(signature, argnums, argnames):
    if argnums is None and argnames is None:
        return (), ()
    if signature is None or (argnums is not None and argnames is not None):
        return _normalize_argnums(argnums), _normalize_argnames(argnames)
    params = list(signature.parameters.items())
    keyword_ok = inspect.Parameter.POSITIONAL_OR_KEYWORD
    if argnums is None:
        argnames = _normalize_argnames(argnames)
        return (tuple(k for k, (name, prm) in enumerate(params)
                      if prm.kind == keyword_ok and name in argnames), argnames)
    argnums = _normalize_argnums(argnums)
    return argnums, tuple(name for k, (name, prm) in enumerate(params)
                          if prm.kind == keyword_ok and k in argnums)


def _normalize_argnames(argnames) -> tuple:
    if argnames is None:
        return ()
    return (argnames,) if isinstance(argnames, str) else tuple(argnames)


def _check_argnums(signature, argnums, what: str) -> None:
    kinds = [prm.kind for prm in signature.parameters.values()]
    if inspect.Parameter.VAR_POSITIONAL in kinds:
        return
    n = sum(kind in _POSITIONAL for kind in kinds)
    if argnums and (-min(argnums) > n or max(argnums) >= n):
        raise ValueError(f"Jitted function has {what}={argnums}, but only accepts {n} "
                         "positional arguments.")


def _check_argnames(signature, argnames, what: str) -> None:
    params = signature.parameters.values()
    positional_only = {prm.name for prm in params
                       if prm.kind in (inspect.Parameter.POSITIONAL_ONLY,
                                       inspect.Parameter.VAR_POSITIONAL)}
    bad = positional_only & set(argnames)
    if bad:
        raise ValueError(f"Jitted function has invalid argnames {bad} in {what}. These are "
                         "positional-only")
    if any(prm.kind == inspect.Parameter.VAR_KEYWORD for prm in params):
        return
    keyword = {prm.name for prm in params
               if prm.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                               inspect.Parameter.KEYWORD_ONLY)}
    bad = set(argnames) - keyword
    if bad:
        raise ValueError(f"Jitted function has invalid argnames {bad} in {what}. Function "
                         "does not take these args.")


@contextlib.contextmanager
def _gc_paused():
    """Python's cycle collector off while a signature is traced, lowered and first run.

    Tracing makes many objects that live until the program is built; collections triggered
    by them rescan every live object again and again, which makes compiling a long program
    grow faster than its length. What is garbage is collected once the collector is back."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        # Tracing's garbage is cyclic (tracers and their trace): collected now, while young,
        # it is not promoted to the oldest generation, whose growth triggers full collections
        # that rescan every live object.
        gc.collect(1)


def jit(fun: Callable = None, *, in_shardings=UNSPECIFIED, out_shardings=UNSPECIFIED,
        static_argnums=None, static_argnames=None, donate_argnums=None, donate_argnames=None,
        keep_unused=False, inline=False, compiler_options=None, resolve=None):
    """Compile ``fun``: trace once per signature, lower to per-device programs, cache.

    ``static_argnums``/``static_argnames``: arguments passed as Python values (hashable; part
    of the cache key), each completed from the other through ``fun``'s signature.
    ``in_shardings``/``out_shardings``: how arguments are laid out before the program runs and
    how its results are laid out (a sharding, or a pytree prefix of the positional arguments
    or of the result; None leaves a value as it is). ``donate_argnums``/``donate_argnames``
    are checked and accepted; shardc keeps donated buffers (nothing is reused in place).
    ``keep_unused``, ``inline`` and ``compiler_options`` (XLA's) change nothing a program
    computes and are accepted.

    >>> f = jit(lambda x, n: x ** n, static_argnums=1)
    """
    options = dict(in_shardings=in_shardings, out_shardings=out_shardings,
                   static_argnums=static_argnums, static_argnames=static_argnames,
                   donate_argnums=donate_argnums, donate_argnames=donate_argnames,
                   keep_unused=keep_unused, inline=inline, compiler_options=compiler_options,
                   resolve=resolve)
    if fun is None:
        return functools.partial(jit, **options)
    del options["keep_unused"], options["inline"], options["compiler_options"]
    jitted = JitFunction(fun, **options)
    if compiler_options:
        jitted.compiler_options = dict(compiler_options)
    if keep_unused:
        jitted.keep_unused = True
    return jitted
