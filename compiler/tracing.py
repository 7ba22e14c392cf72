"""Tracing: turning Python functions over arrays into programs.

There is always a current trace. ``bind(prim, *args, **params)`` hands the primitive to it:
the eval trace runs it on concrete values (through the backend), a program trace records an
equation, a batching or shard trace applies its rule and binds again in its parent trace.
Values of an enclosing trace met inside a nested one are closed-over constants.
"""
from __future__ import annotations

import contextlib
import os
import sys
import sysconfig
from typing import Any, Callable, Sequence

import numpy as np

from compiler.backend import get_backend
from ir import dtypes
from ir.core import Aval, Eqn, Literal, Program, SourceInfo, Var
from ir.shapes import out_avals
from ir.verify import check_traced


# --- errors ------------------------------------------------------------------------------------

class ConcretizationTypeError(TypeError):
    """A traced value was used where a concrete Python value is needed."""


class TracerBoolConversionError(ConcretizationTypeError):
    """``if``, ``bool()`` or ``while`` on a traced value."""


class UnexpectedTracerError(RuntimeError):
    """A traced value escaped the function that was being traced."""


# --- source info -------------------------------------------------------------------------------

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_INTERNAL = tuple(os.path.join(_ROOT, pkg) + os.sep
                  for pkg in ("shardc", "compiler", "ir", "runtime"))
# Python's own library and installed entry-point scripts are not user code either.
_NOT_USER = _INTERNAL + tuple(
    os.path.join(path, "") for path in {sysconfig.get_paths()["stdlib"],
                                        sysconfig.get_paths()["scripts"]})


def user_source() -> SourceInfo | None:
    """The innermost frame of user code: where the user wrote the operation. While a program
    is replayed (a transformation binding its equations again), the equation replayed."""
    replayed = _REPLAYED[-1]
    if replayed is not None:
        return replayed
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        user = _USER_CODE.get(code)
        if user is None:
            if len(_USER_CODE) > 4096:
                _USER_CODE.clear()
            name = code.co_filename
            user = _USER_CODE[code] = (not name.startswith(_NOT_USER)
                                       and not name.startswith("<frozen"))
        if user:
            return SourceInfo(os.path.basename(code.co_filename), frame.f_lineno, code.co_name)
        frame = frame.f_back
    return None


_USER_CODE: dict = {}       # code object -> whether it is user code (asked once per function)
_REPLAYED: list = [None]    # the source of the equation being replayed, innermost last


class replaying:
    """``with replaying(eqn.source):`` equations made while replaying ``eqn`` (its JVP, its
    transpose, the equation itself bound again) carry the user's line of ``eqn``, as JAX's
    transformations keep an equation's source. A source of None keeps the enclosing one."""
    __slots__ = ("source",)

    def __init__(self, source):
        self.source = source

    def __enter__(self):
        _REPLAYED.append(self.source if self.source is not None else _REPLAYED[-1])

    def __exit__(self, *exc):
        _REPLAYED.pop()


# --- traces ------------------------------------------------------------------------------------

class Trace:
    """Where primitives go. Subclasses say how to hold values and process primitives."""
    parent: "Trace | None" = None

    def to_tracer(self, value) -> "Tracer":
        """``value`` as one of this trace's tracers: own tracers pass, others are constants."""
        if isinstance(value, Tracer) and value._trace is self:
            return value
        if isinstance(value, Tracer) and not self.is_descendant_of(value._trace):
            raise UnexpectedTracerError(
                f"a traced value {value.aval.str_short()} escaped the function it was traced in "
                "(it was stored somewhere and used after that function returned)")
        return self.lift(value)

    def is_descendant_of(self, other: "Trace") -> bool:
        trace = self.parent
        while trace is not None:
            if trace is other:
                return True
            trace = trace.parent
        return False

    def lift(self, value) -> "Tracer":
        raise NotImplementedError

    def process_primitive(self, prim, tracers, params):
        raise NotImplementedError

    def process_shard_map(self, fun, args, params):
        raise NotImplementedError(f"shard_map under {type(self).__name__}")


class EvalTrace(Trace):
    """The bottom trace: primitives run at once on concrete values."""

    def to_tracer(self, value):
        if isinstance(value, Tracer):
            raise UnexpectedTracerError(
                f"a traced value {value.aval.str_short()} escaped the function it was traced in")
        return value

    def process_primitive(self, prim, values, params):
        # The shape rule runs first so bad operands get the same error as under jit.
        out_avals(prim, [aval_of(v) for v in values], params)
        if prim.kind == "higher" and prim.name == "shard_map":
            from compiler.jit import execute_equation
            return execute_equation(prim, values, params)
        return get_backend().eval_primitive(prim, values, params)

    def process_shard_map(self, fun, args, params):
        from compiler.eager import run_shard_map_eagerly
        return run_shard_map_eagerly(self, fun, args, params)


eval_trace = EvalTrace()
_current: list = [eval_trace]


def current_trace() -> Trace:
    return _current[-1]


@contextlib.contextmanager
def set_current_trace(trace: Trace):
    _current.append(trace)
    try:
        yield trace
    finally:
        _current.pop()


def bind(prim, *args, **params):
    """Apply a primitive in the current trace; one result unless it has multiple results."""
    trace = current_trace()
    operands = [trace.to_tracer(a) for a in args]
    outs = trace.process_primitive(prim, operands, params)
    return outs if prim.multiple_results else outs[0]


def _note_equation(err: Exception, prim, tracers, params) -> None:
    """Name, on an error raised while typing an equation, the equation (its operands' types)
    and the user's line that wrote it."""
    if not hasattr(err, "add_note") or getattr(err, "shardc_equation", None) is not None:
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
    def size(self):
        return self.aval.size

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d array")
        return (self[k] for k in range(self.shape[0]))

    def __bool__(self):
        raise self._concretization_error("boolean conversion", TracerBoolConversionError)

    def __int__(self):
        raise self._concretization_error("integer conversion", ConcretizationTypeError)

    def __float__(self):
        raise self._concretization_error("float conversion", ConcretizationTypeError)

    def __index__(self):
        raise self._concretization_error("integer conversion", ConcretizationTypeError)

    def __array__(self, dtype=None, copy=None):
        raise self._concretization_error("conversion to a numpy array",
                                         ConcretizationTypeError)

    def _concretization_error(self, what: str, cls):
        src = user_source()
        where = f" at {src}" if src else ""
        return cls(
            f"Attempted {what} of traced array with shape {self.aval.str_short()}{where}. "
            "The value is only known when the program runs, so Python control flow cannot "
            "depend on it; use shardc.numpy.where or lax control flow instead, or mark the "
            "argument static.")

    def __repr__(self):
        return f"Traced<{self.aval.str_short(self._axis_order())}>"

    __str__ = __repr__

    def _axis_order(self) -> tuple:
        return ()

    def __hash__(self):
        raise TypeError("unhashable type: traced array")


# Installed by shardc.numpy: the array methods and operators of tracers and Arrays.
def install_array_methods(cls, methods: dict) -> None:
    for name, method in methods.items():
        setattr(cls, name, method)


# --- concrete values ---------------------------------------------------------------------------

def is_python_scalar(value) -> bool:
    return isinstance(value, (bool, int, float, complex)) and not isinstance(value, np.generic)


def concrete_aval(value) -> Aval:
    """The aval of a concrete value (numpy, Python scalar, or a backend array)."""
    scalar = _SCALAR_AVALS.get(type(value))
    if scalar is not None:
        return scalar
    if isinstance(value, np.generic):          # a numpy scalar: one aval per type
        scalar = _SCALAR_AVALS[type(value)] = Aval((), dtypes.canonicalize(value.dtype))
        return scalar
    if is_python_scalar(value):
        return Aval((), dtypes.weak_scalar_dtype(value))
    if isinstance(value, Tracer):
        return value.aval
    if hasattr(value, "aval"):
        return value.aval
    array = np.asarray(value)
    return Aval(array.shape, dtypes.canonicalize(array.dtype))


_SCALAR_AVALS = {t: Aval((), dtypes.weak_scalar_dtype(t(0))) for t in (bool, int, float, complex)}


def aval_of(value) -> Aval:
    return value.aval if isinstance(value, Tracer) else concrete_aval(value)


# --- program tracing ---------------------------------------------------------------------------

class ProgramTracer(Tracer):
    __slots__ = ("_trace", "_aval")

    def __init__(self, trace, aval: Aval):
        self._trace = trace
        self._aval = aval

    @property
    def aval(self):
        return self._aval

    def _axis_order(self):
        """Mesh order for printing vma; None (no braces) in a body with the check off."""
        shard = self._trace.shard
        if shard is None:
            return ()
        return shard.mesh.axis_names if shard.check_vma else None


class ProgramTrace(Trace):
    """Records equations into a program. ``shard`` is set when tracing a shard_map body."""

    def __init__(self, parent: Trace, shard=None):
        self.parent = parent
        self.shard = shard
        self.eqns: list = []
        self.var_of: dict = {}          # id(tracer) -> Var or Literal
        self.keep: list = []            # tracers kept alive so ids stay unique
        self.const_tracers: dict = {}   # id(value) -> tracer, for values closed over
        self.consts: list = []          # (Var, value) pairs

    def new_tracer(self, aval: Aval, atom=None) -> ProgramTracer:
        tracer = ProgramTracer(self, aval)
        self.var_of[id(tracer)] = atom if atom is not None else Var(aval)
        self.keep.append(tracer)
        return tracer

    def new_arg(self, aval: Aval) -> ProgramTracer:
        return self.new_tracer(aval)

    def lift(self, value) -> ProgramTracer:
        """A closed-over value: a scalar becomes an inline literal, anything else a constant."""
        known = self.const_tracers.get(id(value))
        if known is not None:
            return known
        # Values from outside every shard_map body carry no vma; those closed over from an
        # enclosing body (a loop body inside a shard_map) keep theirs.
        aval = aval_of(value)
        if not isinstance(value, Tracer) and aval.shape == () and _is_plain_scalar(value):
            return self.new_tracer(aval, Literal(np.asarray(value), aval))
        tracer = self.new_tracer(aval)
        self.consts.append((self.var_of[id(tracer)], value))
        self.const_tracers[id(value)] = tracer
        self.keep.append(value)
        return tracer

    def atom(self, tracer: ProgramTracer):
        return self.var_of[id(tracer)]

    def process_primitive(self, prim, tracers, params):
        try:
            if self.shard is None:          # outside shard_map bodies values carry no vma
                outs = [self.new_tracer(a.strip_vma())
                        for a in out_avals(prim, [t.aval for t in tracers], params)]
            else:
                from compiler.replication import per_output, type_operands
                tracers, out_vma = type_operands(self, prim, tracers, params)
                avals = out_avals(prim, [t.aval for t in tracers], params)
                outs = [self.new_tracer(a if a.vma == vma else a.update(vma=vma))
                        for a, vma in zip(avals, per_output(out_vma, len(avals)))]
        except Exception as err:
            _note_equation(err, prim, tracers, params)
            raise
        self.add_eqn(prim, tracers, outs, params)
        return outs

    def add_eqn(self, prim, in_tracers, out_tracers, params):
        self.eqns.append(Eqn(prim, [self.atom(t) for t in in_tracers],
                             [self.atom(t) for t in out_tracers], dict(params), user_source()))

    def process_shard_map(self, fun, args, params):
        from compiler.shard_map import stage_shard_map
        return stage_shard_map(self, fun, args, params)

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


def trace_to_program(fun: Callable, in_avals: Sequence[Aval], *, shard=None,
                     parent: Trace | None = None) -> tuple[Program, list, Any]:
    """Trace ``fun`` on abstract arguments. Returns (program, closed-over values, raw outputs).

    ``fun`` takes and returns flat lists of arrays.
    """
    trace = ProgramTrace(parent or current_trace(), shard)
    args = [trace.new_arg(a) for a in in_avals]
    with set_current_trace(trace):
        outs = fun(*args)
    program, consts = trace.build(args, outs)
    check_traced(program)
    return program, consts, outs
