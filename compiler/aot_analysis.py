"""What a lowered program will hold in memory, for ``Compiled.memory_analysis()``, and what
it computes, for ``cost_analysis()``.

JAX reports XLA's buffer assignment per device: the bytes of the arguments, of the results,
of the results that reuse a donated argument's buffer (aliased), and of the temporaries.
shardc has no buffer assignment; it estimates the same fields from the program's types:

- arguments and results: each one's block on a device (its sharding's shard shape);
- aliased: the results that can reuse a donated argument of the same block shape and dtype
  (each donated argument at most once), as XLA pairs them;
- temporaries: the most bytes the program's intermediate values (not arguments, not results)
  hold at once when its equations run in order and each value is freed after its last use,
  each counted per device where its type splits it over a mesh, else whole. XLA fuses
  elementwise chains and so often needs less; this is what running the program as written
  needs.

Nothing is generated code, and nothing lives in host memory: those fields are 0.

The cost (``cost_stats``) counts what XLA's cost analysis counts, per device, from the
program's equations: ``flops`` (a dot 2 per multiply-add, an elementwise
operation or a conversion 1 per element, an integer power its repeated squaring's products,
a reduction or an all-reduce 1 per element combined), ``transcendentals`` (exp, log, tanh,
sqrt and the like, 1 per element) and ``bytes accessed`` (the arguments read and the results
written, as a fused program touches them). A shard_map body counts on its blocks, a scan's
body once per iteration, a value split by its type on its block. As in JAX's dict, a count
of 0 is left out.
"""
from __future__ import annotations

import dataclasses
import math

from ir import primitives as prims
from ir.core import Var
from ir.graph import sub_programs


@dataclasses.dataclass(frozen=True)
class CompiledMemoryStats:
    """JAX's ``CompiledMemoryStats``: estimated bytes per device (see the module's note)."""
    generated_code_size_in_bytes: int = 0
    argument_size_in_bytes: int = 0
    output_size_in_bytes: int = 0
    alias_size_in_bytes: int = 0
    temp_size_in_bytes: int = 0
    host_generated_code_size_in_bytes: int = 0
    host_argument_size_in_bytes: int = 0
    host_output_size_in_bytes: int = 0
    host_alias_size_in_bytes: int = 0
    host_temp_size_in_bytes: int = 0

    @property
    def peak_memory_in_bytes(self) -> int:
        """Arguments, results not aliased to arguments, and temporaries together."""
        return (self.argument_size_in_bytes + self.output_size_in_bytes
                - self.alias_size_in_bytes + self.temp_size_in_bytes)


def memory_stats(program, args, results) -> CompiledMemoryStats:
    """The estimate for ``program`` called with ``args`` (per argument: its aval, its sharding
    or None for one whole on a device, and whether it is donated) giving ``results`` (per
    result: its aval and sharding, or None)."""
    arg_blocks = [(_block(aval, sharding), aval.dtype, donated)
                  for aval, sharding, donated in args]
    out_blocks = [(_block(aval, sharding), aval.dtype) for aval, sharding in results]
    free = [(shape, dtype) for shape, dtype, donated in arg_blocks if donated]
    alias = 0
    for shape, dtype in out_blocks:
        if (shape, dtype) in free:
            free.remove((shape, dtype))
            alias += _nbytes(shape, dtype)
    return CompiledMemoryStats(
        argument_size_in_bytes=sum(_nbytes(s, d) for s, d, _ in arg_blocks),
        output_size_in_bytes=sum(_nbytes(s, d) for s, d in out_blocks),
        alias_size_in_bytes=alias,
        temp_size_in_bytes=_peak_temporaries(program))


def _peak_temporaries(program) -> int:
    """The most bytes intermediate values hold at once (see the module's note)."""
    kept = {id(v) for v in list(program.invars) + list(program.constvars)
            + list(program.outvars) if isinstance(v, Var)}
    last_use = {}
    for k, eqn in enumerate(program.eqns):
        for v in eqn.invars:
            if isinstance(v, Var):
                last_use[id(v)] = k
    live, peak, dying = 0, 0, {}
    for k, eqn in enumerate(program.eqns):
        for v in eqn.outvars:
            if isinstance(v, Var) and id(v) not in kept:
                size = _type_block_bytes(v.aval)
                live += size
                # a value nothing reads is freed once made
                dying.setdefault(last_use.get(id(v), k), []).append(size)
        peak = max(peak, live)
        live -= sum(dying.pop(k, ()))
    return peak


def _block(aval, sharding) -> tuple:
    shape = tuple(aval.shape)
    return tuple(sharding.shard_shape(shape)) if sharding is not None else shape


def _type_block_bytes(aval) -> int:
    """A value's bytes on one device: its block where its type splits it, else all of it."""
    typed = aval.type_sharding
    shape = list(aval.shape)
    if typed is not None:
        sizes = typed.mesh.shape
        for d, names in enumerate(typed.spec[:len(shape)]):
            shape[d] //= math.prod(sizes[a] for a in names)
    return _nbytes(shape, aval.dtype)


def _nbytes(shape, dtype) -> int:
    return math.prod(shape) * dtype.itemsize


# primitives computed by transcendental functions (XLA's HloCostAnalysis counts them apart)
_TRANSCENDENTAL = frozenset((
    "exp", "exp2", "expm1", "log", "log1p", "tanh", "sin", "cos", "tan", "sqrt", "rsqrt",
    "cbrt", "pow", "atan2", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
    "erf", "erfc", "erf_inv", "lgamma", "digamma", "igamma", "igammac", "bessel_i0e",
    "bessel_i1e", "polygamma", "zeta", "logistic"))
# the elementwise operations a logistic expands into beside its exp (XLA's count)
_LOGISTIC_FLOPS = 3
_FREE = frozenset(("stop_gradient", "copy", "name", "reduce_precision"))
_REDUCTIONS = frozenset(("reduce_sum", "reduce_max", "reduce_min", "reduce_prod",
                         "reduce_and", "reduce_or", "reduce_xor", "argmax", "argmin"))
_ALL_REDUCES = frozenset(("psum", "pmax", "pmin", "pmean", "psum_scatter", "unreduced_psum",
                          "unreduced_psum_scatter"))
_CUMULATIVE = frozenset(("cumsum", "cumprod", "cummax", "cummin"))
_ELEMENTWISE = frozenset(q.name for q in prims.ELEMENTWISE)


def cost_stats(program, arg_bytes: int, out_bytes: int) -> dict:
    """JAX's ``cost_analysis()`` dict for ``program`` (see the module's note), given the
    bytes of its arguments and results on a device."""
    flops, transcendentals = _cost(program)
    out = {}
    if flops:
        out["flops"] = float(flops)
    if transcendentals:
        out["transcendentals"] = float(transcendentals)
    out["bytes accessed"] = float(arg_bytes + out_bytes)
    return out


def _cost(program, times: int = 1) -> tuple:
    flops = transcendentals = 0
    for eqn in program.eqns:
        name = eqn.primitive.name
        subs = sub_programs(eqn)
        if subs:
            # a loop's body once per iteration; a branch, a call or a body once
            repeat = int(eqn.params.get("length", 1)) if name == "scan" else 1
            counted = [_cost(sub, repeat) for _, _, sub in subs]
            if name == "cond":
                counted = [max(counted)]
            flops += sum(f for f, _ in counted) * times
            transcendentals += sum(t for _, t in counted) * times
            continue
        if not eqn.outvars:
            continue
        out = _elements(eqn.outvars[0].aval)
        if name == "dot_general":
            (contract, _), _ = eqn.params["dimension_numbers"]
            lhs = eqn.invars[0].aval.shape
            flops += 2 * out * math.prod(lhs[d] for d in contract) * times
        elif name in _REDUCTIONS:
            flops += max(0, _elements(eqn.invars[0].aval) - out) * times
        elif name in _ALL_REDUCES:
            flops += out * times
        elif name in _CUMULATIVE:
            axis = eqn.params.get("axis", 0)
            flops += out * max(0, eqn.invars[0].aval.shape[axis] - 1) * times
        elif name == "integer_pow":
            y = abs(int(eqn.params["y"]))
            products = (y.bit_length() - 1 + bin(y).count("1") - 1) if y else 0
            flops += out * (products + (eqn.params["y"] < 0)) * times
        elif name in _TRANSCENDENTAL:
            transcendentals += out * times
            if name == "logistic":
                flops += _LOGISTIC_FLOPS * out * times
        elif name in _ELEMENTWISE and name not in _FREE:
            flops += out * times
    return flops, transcendentals


def _elements(aval) -> int:
    """A value's elements on one device (its block where its type splits it)."""
    itemsize = aval.dtype.itemsize or 1
    return _type_block_bytes(aval) // itemsize
