"""``jit`` and ``make_jaxpr``: trace once per signature, lower, cache, run.

The cache key is (argument structure, avals, input shardings, static arguments, the x64 mode);
a second call with the same key runs the cached lowered module without tracing again.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import inspect
from typing import Any, Callable, Sequence

from compiler import tree
from compiler.backend import get_backend
from compiler.lowering import lower_module
from compiler.passes.dce import dce
from ir.module import LoweredModule
from compiler.tracing import (Tracer, aval_of, check_invalid_values, current_trace, eval_trace,
                              invalid_value_checks_on, trace_to_program)
from ir import dtypes
from ir.core import Program
from ir.printer import print_program


_jit_disabled = False


def set_jit_disabled(disabled: bool) -> None:
    """Run jitted functions op by op, untraced (``jax_disable_jit``)."""
    global _jit_disabled
    _jit_disabled = bool(disabled)


@dataclasses.dataclass
class ClosedProgram:
    """A traced program with the values of its constants and its output structure."""
    program: Program
    consts: list
    out_tree: Any

    @property
    def jaxpr(self) -> Program:
        return self.program

    @property
    def in_avals(self):
        return self.program.in_avals

    @property
    def out_avals(self):
        return self.program.out_avals

    def __str__(self):
        return print_program(self.program)

    __repr__ = __str__

    def pretty_print(self, with_source=False) -> str:
        return print_program(self.program, with_source=with_source)


def _split_static(args: tuple, static_argnums: Sequence[int]):
    static = tuple((k, args[k]) for k in static_argnums if k < len(args))
    dynamic = tuple(a for k, a in enumerate(args) if k not in static_argnums)
    return static, dynamic


def _rebuild(static, dynamic, n):
    lookup = dict(static)
    it = iter(dynamic)
    return tuple(lookup[k] if k in lookup else next(it) for k in range(n))


def trace_function(fun: Callable, args: tuple, kwargs: dict, static_argnums=()) -> ClosedProgram:
    """Trace ``fun(*args, **kwargs)`` with array leaves abstract; static arguments stay Python."""
    static, dynamic = _split_static(args, static_argnums)
    leaves, in_tree = tree.tree_flatten((dynamic, kwargs))
    out_tree_box: list = []

    def flat_fun(*flat):
        dyn, kw = tree.tree_unflatten(in_tree, flat)
        result = fun(*_rebuild(static, dyn, len(args)), **kw)
        outs, out_tree = tree.tree_flatten(result)
        out_tree_box.append(out_tree)
        return outs

    in_avals = [aval_of(x).strip_vma() for x in leaves]
    program, consts, _ = trace_to_program(flat_fun, in_avals, parent=eval_trace)
    return ClosedProgram(program, consts, out_tree_box[0])


def make_jaxpr(fun: Callable, static_argnums=()):
    """``make_jaxpr(f)(*args)`` returns the traced program, which prints like a jaxpr."""
    static_argnums = _normalize_argnums(static_argnums)

    @functools.wraps(fun)
    def traced(*args, **kwargs):
        return trace_function(fun, args, kwargs, static_argnums)

    return traced


def execute_equation(prim, values, params) -> list:
    """Run one equation (a shard_map with its body program) on concrete values: lower it as a
    one-equation module and execute it, as jit would."""
    from ir.core import Eqn, Var
    from ir.shapes import out_avals
    backend = get_backend()
    invars = [Var(aval_of(v).strip_vma()) for v in values]
    outvars = [Var(a) for a in out_avals(prim, [v.aval for v in invars], params)]
    program = Program([], invars, [Eqn(prim, invars, outvars, dict(params))], outvars)
    module = lower_module(program, tuple(backend.sharding_of(v) for v in values))
    return backend.execute(module, list(values))


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


class JitFunction:
    """A function traced once per signature and run from its lowered module."""

    def __init__(self, fun: Callable, static_argnums=(), static_argnames=()):
        self.fun = fun
        self.static_argnums = _normalize_argnums(static_argnums)
        self.static_argnames = tuple(static_argnames or ())
        self.cache: dict = {}
        self.array_calls: dict = {}     # (aval, sharding) per argument -> Compiled
        self.trace_count = 0
        functools.update_wrapper(self, fun)

    def __call__(self, *args, **kwargs):
        if current_trace() is not eval_trace or _jit_disabled:
            return self.fun(*args, **kwargs)       # inside another trace, or disabled: inline
        key = self._array_key(args, kwargs)
        compiled = self.array_calls.get(key) if key is not None else None
        if compiled is not None:
            # the common call: positional arrays only, seen before; no pytree walk
            closed = compiled.closed
            outs = get_backend().execute(compiled.module, list(closed.consts) + list(args))
            if invalid_value_checks_on():
                self._check_outputs(outs, args, kwargs)
            return tree.tree_unflatten(closed.out_tree, outs)
        with _gc_paused():
            result = self._call(args, kwargs)
        if key is not None:
            self.array_calls[key] = self._last
        if invalid_value_checks_on():
            self._check_outputs(tree.tree_leaves(result), args, kwargs)
        return result

    def _check_outputs(self, outs, args, kwargs):
        """jax_debug_nans/infs: on an invalid output, run the function again op by op so the
        operation that made it raises; if none does, name the jitted function."""
        name = getattr(self.fun, "__name__", "fun")
        try:
            check_invalid_values(outs, f"jit({name})")
        except FloatingPointError as error:
            previous = _jit_disabled
            set_jit_disabled(True)
            try:
                self.fun(*args, **kwargs)
            finally:
                set_jit_disabled(previous)
            raise FloatingPointError(f"{error}; run op by op, no operation of {name} produced "
                                     "it (it is a constant output, or came from an input)") \
                from None

    def _array_key(self, args, kwargs):
        """A cheap cache key when every argument is a concrete array and nothing is static."""
        if kwargs or self.static_argnums or self.static_argnames:
            return None
        backend = get_backend()
        key = [dtypes.x64_enabled()]        # x64 changes what tracing the same avals gives
        for a in args:
            aval = getattr(a, "aval", None)
            if aval is None or isinstance(a, Tracer) or aval.vma:
                return None
            key.append((aval, backend.sharding_of(a)))
        return tuple(key)

    def _call(self, args, kwargs):
        args = self._bind_static_names(args, kwargs)
        static, dynamic = _split_static(args, self.static_argnums)
        kwargs = {k: v for k, v in kwargs.items() if k not in self.static_argnames}
        leaves, in_tree = tree.tree_flatten((dynamic, kwargs))
        compiled = self._last = self._compiled(args, kwargs, static, leaves, in_tree)
        closed = compiled.closed
        outs = get_backend().execute(compiled.module, list(closed.consts) + list(leaves))
        return tree.tree_unflatten(closed.out_tree, outs)

    def _bind_static_names(self, args, kwargs):
        if not self.static_argnames:
            return args
        names = list(inspect.signature(self.fun).parameters)
        args = list(args)
        for name in self.static_argnames:
            if name in kwargs:
                k = names.index(name)
                while len(args) < k:
                    raise TypeError(f"static argument {name!r} given by keyword after "
                                    "missing positional arguments")
                args.insert(k, kwargs[name])
                if k not in self.static_argnums:
                    self.static_argnums = self.static_argnums + (k,)
        return tuple(args)

    def _compiled(self, args, kwargs, static, leaves, in_tree) -> Compiled:
        backend = get_backend()
        shardings = tuple(backend.sharding_of(x) for x in leaves)
        avals = tuple(aval_of(x).strip_vma() for x in leaves)
        try:
            key = (in_tree, avals, shardings, static, dtypes.x64_enabled())
            hash(key)
        except TypeError:
            key = None
        if key is not None and key in self.cache:
            return self.cache[key]
        self.trace_count += 1
        closed = trace_function(self.fun, args, kwargs, self.static_argnums)
        # Work nothing reads goes before lowering (e.g. a gradient's unused forward value).
        closed = dataclasses.replace(closed, program=dce(closed.program))
        const_shardings = tuple(backend.sharding_of(c) for c in closed.consts)
        module = lower_module(closed.program, const_shardings + shardings)
        compiled = Compiled(closed, module)
        if key is not None:
            self.cache[key] = compiled
        return compiled

    def lower(self, *args, **kwargs) -> Compiled:
        """Trace and lower without running: the traced program and the per-device programs."""
        args = self._bind_static_names(args, kwargs)
        static, dynamic = _split_static(args, self.static_argnums)
        kwargs = {k: v for k, v in kwargs.items() if k not in self.static_argnames}
        leaves, in_tree = tree.tree_flatten((dynamic, kwargs))
        return self._compiled(args, kwargs, static, leaves, in_tree)


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


def jit(fun: Callable = None, *, static_argnums=(), static_argnames=(), donate_argnums=()):
    """Compile ``fun``: trace once per signature, lower to per-device programs, cache."""
    if fun is None:
        return functools.partial(jit, static_argnums=static_argnums,
                                 static_argnames=static_argnames)
    return JitFunction(fun, static_argnums, static_argnames)
