"""``shardc.debug``: printing from inside programs and drawing array layouts."""
from __future__ import annotations

import string

import numpy as np

from compiler import tree
from compiler.inspection import inspect_later
from compiler.shard_map import current_shard_context
from compiler.tracing import Tracer, bind, current_trace, eval_trace, is_python_scalar
from ir import primitives as prims
from runtime.array import Array

from shardc._callbacks import debug_callback as callback
from shardc._debugger import breakpoint  # noqa: A004 (JAX's name)
from shardc._callbacks import (eager_weak_types, is_array_value, split_arguments,
                               two_call_form)

__all__ = ["print", "callback", "breakpoint", "visualize_array_sharding"]


def visualize_array_sharding(x, *, use_color=True, scale=1.0, min_width=9, max_width=80):
    """Draw the layout of a 1-D or 2-D Array over its devices (SEMANTICS 5.3)."""
    # the drawing code loads when first asked for: running programs never needs it
    from shardc._visualize import visualize_sharding as draw
    options = dict(use_color=use_color, scale=scale, min_width=min_width, max_width=max_width)
    if isinstance(x, Tracer):        # traced: drawn once its layout is known (JAX's)
        shape = tuple(x.shape)
        inspect_array_sharding(x, callback=lambda sharding: draw(shape, sharding, **options))
        return None
    return draw(tuple(x.shape), x.sharding, **options)


def visualize_sharding(shape, sharding, *, use_color=True, scale=1.0, min_width=9,
                       max_width=80, color_map=None):
    """Draw how an array of ``shape`` laid out by ``sharding`` lies over its devices."""
    from shardc._visualize import visualize_sharding as draw
    return draw(shape, sharding, use_color=use_color, scale=scale, min_width=min_width,
                max_width=max_width, color_map=color_map)


def inspect_array_sharding(value, *, callback):
    """Call ``callback`` with the sharding of each array of the pytree ``value``, as early as
    it is known (JAX's policy): eagerly at once; under ``jit`` when the program is compiled
    (its first call, or ``compile()``), with the layout the compiled program gives the value
    (on Auto axes, the one propagation chose), so that the calls of a compiled program that
    follow call it no more; in a shard_map body, with the body value's layout.

    >>> shardc.debug.inspect_array_sharding(x, callback=print)
    """
    staged = current_trace() is not eval_trace
    for leaf in tree.tree_leaves(value):
        # (traced, a number or a numpy array is a constant of the program: JAX's)
        if not isinstance(leaf, (Array, Tracer)) and not (staged and is_array_value(leaf)):
            raise TypeError(f"inspect_array_sharding takes a pytree of arrays; got a leaf of "
                            f"type {type(leaf).__name__}")
        if isinstance(leaf, Tracer):
            known_now = current_shard_context() is not None and leaf.sharding is not None
        else:
            known_now = isinstance(leaf, Array)     # a number or numpy's: a constant, later
        if known_now:
            callback(leaf.sharding)
        else:
            inspect_later(leaf, callback)


def print(fmt: str | None = None, *args, ordered: bool = False, partitioned: bool = False,
          skip_format_check: bool = False, **kwargs):
    """Print ``fmt.format(*args, **kwargs)`` with the values of arrays when the program runs:
    eagerly at once, under ``jit`` when the compiled program runs; inside a shard_map body once
    per device, in mesh-position order. The arguments may be pytrees of arrays; what is no
    array (``x.dtype``, a string) is formatted as the Python object it is. Values print under
    numpy's print options as they were when ``print`` was called (JAX's). Without a ``fmt``,
    the options given return a function taking ``fmt`` and the arguments (JAX's two-call
    form: ``debug.print(ordered=True)("x = {}", x)``).

    ``partitioned=True`` under jit prints each device's block of the values the compiled
    program splits (once per device, in mesh-position order, as a shard_map body's print):
    what each device holds where JAX's compiler splits the same values. Run eagerly it prints
    the whole value, as JAX's. shardc prints in program order; ``ordered=True`` in a jitted
    program that runs on more than one device is JAX's ValueError.

    >>> shardc.debug.print("x = {}", x)
    """
    flag = ({"partitioned": True} if partitioned else {}) | ({"ordered": True} if ordered else {})

    def _print(fmt: str, *args, **kwargs):
        if not skip_format_check:
            _FORMAT_CHECKER.format(fmt, *args, **kwargs)
        names = tuple(sorted(kwargs))
        leaves = list(args) + [kwargs[k] for k in names]
        options = tuple(np.get_printoptions().items())
        if options == _DEFAULT_PRINTOPTIONS and all(map(_is_plain, leaves)) and \
                (_has_placeholders(fmt) or not leaves):
            # arrays only, printed under numpy's defaults: the format string as it is (a
            # lowered program's text then holds all of the print)
            bind(prims.debug_print_p, *leaves, fmt=fmt, arg_names=names, **flag)
            return
        in_tree, static, dynamic = split_arguments(args, kwargs)
        weak = eager_weak_types(dynamic)
        # the runtime calls the format's .format with the array values, as with a str
        bind(prims.debug_print_p, *dynamic,
             fmt=_PrintFormat(fmt, in_tree, tuple(static.items()), options, weak),
             arg_names=(), **flag)

    return two_call_form("debug_print", _print, fmt, args, kwargs)


# numpy's print options as shardc found them (a print under them needs no options of its own)
_DEFAULT_PRINTOPTIONS = tuple(np.get_printoptions().items())


def _has_placeholders(fmt: str) -> bool:
    """Whether ``fmt`` has a replacement field (without one, JAX prints the arguments after
    it, separated by spaces)."""
    return bool(fmt) and next(iter(string.Formatter().parse(fmt)))[1] is not None


def _is_plain(value) -> bool:
    """Whether a print argument is one array (not a key array nor another pytree)."""
    return is_array_value(value) and (is_python_scalar(value) or
                                   isinstance(getattr(value, "dtype", None), np.dtype))


class _FormatChecker(string.Formatter):
    """JAX's check of a print's format: every argument given is used."""

    def format_field(self, value, format_spec):
        return ""

    def check_unused_args(self, used_args, args, kwargs):
        unused_args = [arg for i, arg in enumerate(args) if i not in used_args]
        unused_kwargs = [k for k in kwargs if k not in used_args]
        if unused_args:
            raise ValueError(f"Unused positional arguments to `jax.debug.print`: {unused_args}")
        if unused_kwargs:
            raise ValueError(
                f"Unused keyword arguments to `jax.debug.print`: {unused_kwargs}. You may be "
                "passing an f-string (i.e, `f\"{x}\"`) into `jax.debug.print` and instead "
                "should pass in a regular string.")


_FORMAT_CHECKER = _FormatChecker()


class _PrintFormat:
    """A print's format string with what formatting needs when the value is printed: the
    pytree the arguments rebuild into, the arguments that are no arrays, and numpy's print
    options at the call. Its ``format`` takes the array values, as ``str.format`` would."""

    def __init__(self, fmt: str, in_tree, static: tuple, printoptions: tuple,
                 weak: tuple = ()):
        self.fmt, self.in_tree, self.static, self.printoptions = fmt, in_tree, static, \
            printoptions
        self.weak = weak          # per array value, whether it is weakly typed (as it prints)
        self.has_placeholders = _has_placeholders(fmt)

    def format(self, *values):
        static = dict(self.static)
        values = iter(self._array(v, k) for k, v in enumerate(values))
        flat = [static[k] if k in static else next(values)
                for k in range(self.in_tree.num_leaves)]
        args, kwargs = tree.tree_unflatten(self.in_tree, flat)
        with np.printoptions(**dict(self.printoptions)):
            if self.has_placeholders:
                return self.fmt.format(*args, **kwargs)
            return " ".join((self.fmt, *(str(a) for a in args)))

    def _array(self, value, position: int):
        if not isinstance(value, (np.ndarray, np.generic)):
            return value
        array = Array.from_global(value)
        array.weak = position < len(self.weak) and self.weak[position]
        return array

    def _key(self):
        return (self.fmt, self.in_tree, tuple((k, id(v)) for k, v in self.static),
                self.printoptions, self.weak)

    def __eq__(self, other):
        return isinstance(other, _PrintFormat) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __str__(self):
        return self.fmt

    def __repr__(self):
        return repr(self.fmt)
