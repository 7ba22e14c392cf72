"""``jax_explain_cache_misses``: why a jitted function is traced again.

A jitted function's traces are cached by a key (``TraceKey`` names its fields). On a miss the
new key is compared with each key the function's cache holds, and the closest one explains
the miss, as JAX's explainer does: the tracing context first (config flags, the mesh, x64), then the
arguments' structure and static values, then their types.

    TRACING CACHE MISS at /home/me/train.py:42 (main):
      for step defined at /home/me/train.py:10
      all previously seen cache keys differ. For the closest previous key:
      different input types:
      * at x, now f32[8] and before f32[4]
"""
from __future__ import annotations

import ast
import functools
import inspect
import itertools
import sys
from typing import Any, Callable, NamedTuple

from compiler import tree
from compiler.tracing import trace_setting_defaults
from ir.source import is_user_code, user_frame

_WEAK_TYPES_DOC = "https://docs.jax.dev/en/latest/type_promotion.html#weak-types"


class TraceKey(NamedTuple):
    """The fields of the key by which ``JitFunction._traced`` caches a function's traces:
    what its traced program depends on."""
    in_tree: Any
    avals: tuple
    weak: tuple
    layouts: tuple
    static: tuple           # (where, type, value) per static argument
    mesh: Any
    x64: bool
    settings: tuple         # (flag name, value) per tracing setting off its default


_call_sites_missed: set = set()     # where a never seen function was traced


def explanation(fun: Callable, key: tuple | None, seen: list,
                arg_names: Callable[[], list]) -> str | None:
    """The text explaining why ``fun`` is traced at ``key``, given the keys its cache holds
    (``seen``) and the name of each argument leaf (``arg_names``); None for a function of
    shardc's own (what ``jax.numpy`` traces is none of the user's business)."""
    source_fun = _unwrapped(fun)
    code = getattr(source_fun, "__code__", None)
    if code is not None and not is_user_code(code):
        return None
    call_site = _call_site()
    lines = [f"TRACING CACHE MISS at {call_site}:"]
    defined = "" if code is None else f" defined at {code.co_filename}:{code.co_firstlineno}"
    name = getattr(source_fun, "__name__", type(source_fun).__name__)
    if not seen:
        lines.append(f"  never seen function:\n    {name} id={id(fun)}{defined}")
        if call_site in _call_sites_missed:
            lines.append("  but seen another function defined on the same line; maybe the "
                         "function is\n  being re-defined repeatedly, preventing caching?")
        _call_sites_missed.add(call_site)
        return "\n".join(lines)
    lines.append(f"  for {name}{defined}")
    closest = (min(_difference(TraceKey(*key), TraceKey(*old), arg_names) for old in seen)
               if key is not None else (0, 0, 0, "cache miss explanation unavailable"))
    lines.append("  all previously seen cache keys differ. For the closest previous key:")
    lines.append("  " + closest[-1])
    return "\n".join(lines)


def _unwrapped(fun):
    while isinstance(fun, functools.partial):
        fun = fun.func
    return inspect.unwrap(fun)


def _call_site() -> str:
    """The innermost user frame: ``file:line[:column] (function)``, as JAX names it."""
    frame = user_frame(sys._getframe(1))
    if frame is None:
        return "<unknown>"
    code = frame.f_code
    position = next(itertools.islice(code.co_positions(), frame.f_lasti // 2, None),
                    (None,) * 4)
    column = f":{position[2]}" if position[2] else ""
    return f"{code.co_filename}:{frame.f_lineno}{column} ({code.co_name})"


def _difference(new: TraceKey, old: TraceKey, arg_names) -> tuple:
    """(severity, number of differences, distance, text) of how ``new`` differs from ``old``;
    the least explains best: a different context before a different structure before
    different types."""
    return (_context_difference(new, old) or _structure_difference(new, old)
            or _type_difference(new, old, arg_names)
            or (4, 0, 0, "cache miss explanation unavailable"))


def _context(key: TraceKey) -> dict:
    settings = dict(key.settings)
    return {"jax_enable_x64": key.x64, "mesh": key.mesh,
            **{name: settings.get(name, default)
               for name, default in sorted(trace_setting_defaults.items())}}


def _context_difference(new: TraceKey, old: TraceKey):
    now, before = _context(new), _context(old)
    diffs = [f"  * {name} differs: now {now[name]} and before {before[name]}"
             for name in now if now[name] != before[name]]
    if diffs:
        return (0, len(diffs), 0, "Tracing context doesn't match, e.g. due to config or "
                "context manager.\n" + "\n".join(diffs))


def _structure_difference(new: TraceKey, old: TraceKey):
    diffs = [f"  * at input path {path}, now {now} and before {before}, so {why}"
             for path, now, before, why in tree.equality_errors(new.in_tree, old.in_tree)]
    if diffs:
        return 1, len(diffs), 0, "different input pytree:\n" + "\n".join(diffs)
    if new.static != old.static:
        return 1, 1, 0, _static_difference(new.static, old.static)


def _static_difference(new: tuple, old: tuple) -> str:
    """Static arguments differ: those given by position (``index k``) as ``1.0, 'foo'``, by
    name (``name 'k'``) as ``{k: 'foo'}``."""
    texts = []
    for kind, prefix in (("args", "index "), ("kwargs", "name ")):
        now, before = (_static_text(key, prefix) for key in (new, old))
        if now != before:
            texts.append(f"different value of static {kind}:\n  * now {now} and before {before}")
    return "\n  ".join(texts)


def _static_text(static: tuple, prefix: str) -> str:
    entries = [(where.removeprefix(prefix), value) for where, _, value in static
               if where.startswith(prefix)]
    if prefix == "index ":
        return ", ".join(repr(value) for _, value in entries)
    return "{" + ", ".join(f"{ast.literal_eval(name)}: {value!r}"
                           for name, value in entries) + "}"


def _type_difference(new: TraceKey, old: TraceKey, arg_names):
    leaves = lambda key: zip(key.avals, key.weak, key.layouts)
    changed = [k for k, (a, b) in enumerate(zip(leaves(new), leaves(old))) if a != b]
    if not changed:
        return None
    names = arg_names()
    diffs, weak_hint, distance = [], False, 0
    for k in changed:
        now, before = _type_text(new, old, k), _type_text(old, new, k)
        weak_hint |= new.weak[k] != old.weak[k]
        distance += _shape_distance(getattr(new.avals[k], "shape", ()),
                                    getattr(old.avals[k], "shape", ()))
        name = names[k] if k < len(names) else f"args[{k}]"
        diffs.append(f"  * at {name}, now {now} and before {before}")
    text = "different input types:\n" + "\n".join(diffs)
    if weak_hint:
        text += f"\n  see {_WEAK_TYPES_DOC}"
    return 3, len(diffs), distance, text


def _type_text(key: TraceKey, other: TraceKey, k: int) -> str:
    """Leaf ``k``'s type in ``key``, with what differs from ``other`` beyond the aval."""
    aval = key.avals[k]
    text = aval.str_short() if hasattr(aval, "str_short") else str(aval)
    if key.weak[k] != other.weak[k]:
        text += f"{{weak_type={key.weak[k]}}}"
    if key.layouts[k] != other.layouts[k]:
        text += f" laid out as {key.layouts[k]}"
    return text


def _shape_distance(now: tuple, before: tuple) -> int:
    """How far apart two shapes are: the dimensions that differ (every one, across ranks)."""
    if len(now) != len(before):
        return max(len(now), len(before))
    return sum(a != b for a, b in zip(now, before))
