"""Timing: medians over repeated calls, within a time budget per measurement.

Columns, per system (shardc's reference and fast backends, JAX):
    first    trace + lower (compile) + first run: a fresh ``jit`` of a freshly built program
    steady   a call of a jitted program already compiled (its inputs placed beforehand)
    eager    the shard_map called without jit
and ``numpy``: the lower bound, the same block computations written directly in numpy,
sampled in turns with shardc's fast steady call (``steady_and_bound``).
"""
from __future__ import annotations

import dataclasses
import gc
import statistics
import time


@dataclasses.dataclass
class Budget:
    """How long one measurement may take, and how many samples it wants."""
    seconds: float
    min_reps: int
    max_reps: int
    first_reps: int
    eager_reps: int


FULL = Budget(seconds=2.0, min_reps=5, max_reps=200, first_reps=5, eager_reps=5)
QUICK = Budget(seconds=0.1, min_reps=2, max_reps=20, first_reps=2, eager_reps=2)


def samples(call, *, budget: Budget, reps: int | None = None, warmup: int = 1,
            least: int | None = None) -> list:
    """Seconds per call of ``call()``: as many samples as the budget allows, at least
    ``least`` (default ``budget.min_reps``), at most ``reps`` (default ``budget.max_reps``)."""
    limit = reps if reps is not None else budget.max_reps
    least = min(limit, budget.min_reps if least is None else least)
    return _in_turns({"call": call}, budget.seconds, limit, least, warmup)["call"]


def interleaved(calls: dict, *, budget: Budget, warmup: int = 2) -> dict:
    """Seconds per call of each of ``calls`` (name -> function), sampled in turns (a, b, a,
    b, ...), so that every one of them sees the same moments of a shared, noisy machine;
    the budget is shared among them."""
    return _in_turns(calls, budget.seconds * len(calls), budget.max_reps, budget.min_reps,
                     warmup)


def _in_turns(calls: dict, seconds: float, limit: int, least: int, warmup: int) -> dict:
    """Rounds of one call of each, garbage collection off, until ``limit`` rounds or, after
    ``least``, until ``seconds`` have passed."""
    for call in calls.values():
        for _ in range(warmup):
            call()
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        out = {name: [] for name in calls}
        deadline = time.perf_counter() + seconds
        rounds = 0
        while rounds < limit and (rounds < least or time.perf_counter() < deadline):
            for name, call in calls.items():
                start = time.perf_counter()
                call()
                out[name].append(time.perf_counter() - start)
            rounds += 1
        return out
    finally:
        if enabled:
            gc.enable()


def steady_and_bound(api, scenario, budget: Budget) -> dict:
    """The steady-state call and the numpy lower bound, sampled in turns."""
    fn, args = scenario.build(api)
    jitted = api.jit(fn)
    return interleaved({"steady": lambda: api.block(jitted(*args)),
                        "numpy": scenario.lower_bound()}, budget=budget)


def first_call(api, scenario, budget: Budget) -> list:
    """A fresh program, jitted and called once, per sample (compiled caches cleared)."""
    out = []
    deadline = time.perf_counter() + 2 * budget.seconds
    for _ in range(budget.first_reps):
        if out and time.perf_counter() > deadline:
            break                # slow first calls: fewer samples, the budget holds
        fn, args = scenario.build(api)
        api.clear()
        gc.collect()
        start = time.perf_counter()
        api.block(api.jit(fn)(*args))
        out.append(time.perf_counter() - start)
    return out


def steady_call(api, scenario, budget: Budget) -> list:
    fn, args = scenario.build(api)
    jitted = api.jit(fn)
    return samples(lambda: api.block(jitted(*args)), budget=budget, warmup=2)


def eager_call(api, scenario, budget: Budget) -> list:
    """Eager calls; one whose first call already takes many budgets is that one sample
    (JAX's eager shard_map of a long program takes minutes a call)."""
    fn, args = scenario.build(api)
    start = time.perf_counter()
    api.block(fn(*args))
    first = time.perf_counter() - start
    if first > 5 * budget.seconds:
        return [first]
    return samples(lambda: api.block(fn(*args)), budget=budget, reps=budget.eager_reps, least=1,
                   warmup=0)


MEASURES = {"first": first_call, "steady": steady_call, "eager": eager_call}


def median(values) -> float | None:
    return statistics.median(values) if values else None
