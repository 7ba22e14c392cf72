"""What a lowered program will hold in memory, for ``Compiled.memory_analysis()``.

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
"""
from __future__ import annotations

import dataclasses
import math

from ir.core import Var


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
