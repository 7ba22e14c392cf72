"""IR passes: named functions from program to program that leave the IR valid.

Each pass returns a program and never changes its input: unchanged equations are shared,
and a pass with nothing to do may return its input itself. A new program is verified. They apply to traced programs and to per-device programs alike;
in a per-device program, communication nodes are never dropped, merged or reordered among
themselves, since every device of a group must meet at them in the same order.

    >>> program = run_passes(make_jaxpr(f)(x).jaxpr, ["cse", "dce", "schedule"])
    >>> module = run_passes_on_module(jit(f).lower(x).module, ["dce"])
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

from compiler.passes.cse import cse
from compiler.passes.dce import dce
from compiler.passes.schedule import schedule
from ir.core import Program
from ir.module import LoweredModule

PASSES: dict[str, Callable[[Program], Program]] = {"dce": dce, "cse": cse, "schedule": schedule}


def run_passes(program: Program, names: Sequence[str]) -> Program:
    """Apply the passes named in ``names`` in order; an unknown name raises ``ValueError``.

    >>> run_passes(program, ["cse", "dce"])
    """
    if isinstance(names, str):
        raise TypeError(f"run_passes takes a sequence of pass names, got the string {names!r}")
    unknown = [name for name in names if name not in PASSES]
    if unknown:
        raise ValueError(f"unknown pass {unknown[0]!r}; the passes are {', '.join(PASSES)}")
    for name in names:
        program = PASSES[name](program)
    return program


def run_passes_on_module(module: LoweredModule, names: Sequence[str]) -> LoweredModule:
    """A new module whose per-device programs went through the passes (every device alike).

    The traced program is kept as it is, so the shard_map equation indices that key the
    per-device programs stay valid.
    """
    shard_maps = {}
    for index, lowered in module.shard_maps.items():
        programs = [dataclasses.replace(dp, program=run_passes(dp.program, names))
                    for dp in lowered.device_programs]
        shard_maps[index] = lowered.replace(device_programs=programs)
    return LoweredModule(module.program, shard_maps)
