"""Host callbacks: Python functions a program calls on concrete values when it runs
(``pure_callback``, ``io_callback``, ``debug.callback``), as JAX's. Outside shard_map a
callback is called once, on whole values; inside a body once per device, on its blocks."""
from __future__ import annotations

import logging

import numpy as np

from compiler import tree
from compiler.tracing import (Tracer, bind, current_trace, eval_trace, is_python_scalar,
                              set_current_trace, weakly_typed)
from ir import dtypes
from ir import primitives as prims
from runtime.array import Array, SingleDeviceSharding
from runtime.devices import local_devices
from runtime.reference import host_failure

__all__ = ["pure_callback", "io_callback", "debug_callback"]

_LOG = logging.getLogger("shardc.callbacks")

_VMAP_METHODS = ["sequential", "sequential_unrolled", "expand_dims", "broadcast_all",
                 "legacy_vectorized", None]


class HostCallback:
    """The user's function over flat numpy values: the arguments rebuilt into their pytree,
    the results flattened (None for a function whose results are not used)."""

    def __init__(self, fn, in_tree, returns: bool, static: tuple = (), weak: tuple = (),
                 api: str = "jax.pure_callback", raises_as_is: bool = False):
        # static: (position, value) of the leaves that are no arrays, passed as they are;
        # weak: per value passed, whether it is weakly typed (a Python number);
        # api: the function that asked for it, named in the log of a failure;
        # raises_as_is: a failure is raised as it is (an eager debug callback), not as the
        # program's runtime error
        self.fn, self.in_tree, self.returns, self.static = fn, in_tree, returns, static
        self.weak, self.api, self.raises_as_is = weak, api, raises_as_is

    def __call__(self, *flat):
        # the values reach the function as arrays on this process's first device, as JAX's
        # (it puts them on its CPU device): their repr, methods and jnp calls are an Array's
        device = local_devices()[0]
        flat = [self._array(v, k, device) for k, v in enumerate(flat)]
        if self.static:
            static, values = dict(self.static), iter(flat)
            flat = [static[k] if k in static else next(values)
                    for k in range(self.in_tree.num_leaves)]
        args, kwargs = tree.tree_unflatten(self.in_tree, list(flat))
        # the function runs on concrete values, outside every trace: an eager shard_map body
        # calling it is the current trace while the devices run
        try:
            with set_current_trace(eval_trace):
                result = self.fn(*args, **kwargs)
        except Exception as exc:
            # as JAX's: the failure logged with its traceback, and raised as the program's
            # runtime error (XLA's), which holds that traceback too
            _LOG.exception("%s failed", self.api)
            if self.raises_as_is:
                raise
            raise host_failure(exc) from exc
        return tree.tree_leaves(result) if self.returns else []

    def _array(self, value, position: int, device):
        if not (isinstance(value, (np.ndarray, np.generic)) and dtypes.is_valid(value.dtype)):
            return value
        array = Array.from_global(value, SingleDeviceSharding(device))
        if position < len(self.weak) and self.weak[position]:
            array.weak = True
        return array

    def short_repr(self) -> str:
        return getattr(self.fn, "__qualname__", type(self.fn).__name__)

    def __repr__(self):
        return f"callback {self.short_repr()}"


def _result_avals(result_shape_dtypes):
    leaves, out_tree = tree.tree_flatten(result_shape_dtypes)
    avals = []
    for leaf in leaves:
        dtype = np.dtype(leaf.dtype)
        if dtypes.canonicalize(dtype) != dtype:
            raise ValueError("result_shape_dtypes cannot specify 64-bit types when "
                             "`jax_enable_x64` is disabled")
        avals.append((tuple(leaf.shape), dtype))
    return tuple(avals), out_tree


def _call(effect, callback, result_shape_dtypes, args, kwargs, vmap_method=None):
    flat, in_tree = tree.tree_flatten((args, kwargs))
    avals, out_tree = _result_avals(result_shape_dtypes)
    weak = eager_weak_types(flat)
    host = HostCallback(callback, in_tree, True, (), weak, api=f"jax.{effect}_callback")
    outs = bind(prims.callback_p, *flat, callback=host, result_avals=avals, effect=effect,
                vmap_method=vmap_method)
    return tree.tree_unflatten(out_tree, list(outs))


def pure_callback(callback, result_shape_dtypes, *args, sharding=None, vmap_method=None,
                  **kwargs):
    """``callback(*args, **kwargs)`` on host values, as a pure function of them (unused
    results let it be skipped); ``result_shape_dtypes``: the pytree of ``ShapeDtypeStruct``s
    it returns. Under vmap as ``vmap_method`` says; not differentiable (a custom_jvp is)."""
    if vmap_method not in _VMAP_METHODS:
        raise ValueError(f"vmap_method must be on of the allowed methods {_VMAP_METHODS}, but "
                         f"got: {vmap_method}")
    return _call("pure", callback, result_shape_dtypes, args, kwargs, vmap_method)


def io_callback(callback, result_shape_dtypes, *args, sharding=None, ordered=False, **kwargs):
    """``callback(*args, **kwargs)`` on host values for its effects: it always runs, in
    program order. Under vmap it is called once per member; an ``ordered`` one cannot be
    mapped (JAX's ValueError): its calls would have no one order."""
    return _call("io", callback, result_shape_dtypes, args, kwargs,
                 None if ordered else "sequential")


def debug_callback(callback=None, *args, ordered=False, partitioned=False, **kwargs):
    """``callback(*args, **kwargs)`` on host values, for its effects; returns nothing. Under
    grad it sees the primal values; under vmap it is called once per member. Arguments that
    are no arrays (a dtype, a string) reach it as they are. Without a ``callback``, the
    options given return a function taking it and its arguments (JAX's two-call form:
    ``debug.callback(ordered=True)(f, x)``). ``partitioned=True`` under jit calls it once per
    device with that device's blocks of the values the program splits (as
    ``debug.print(partitioned=True)``); run eagerly, once with the whole values."""
    flag = ({"partitioned": True} if partitioned else {}) | ({"ordered": True} if ordered else {})

    def _debug_callback(callback, *args, **kwargs):
        if not callable(callback):
            raise TypeError("first argument to jax.debug.callback must be callable, but got "
                            f"an object of type {type(callback)}")
        in_tree, static, dynamic = split_arguments(args, kwargs)
        weak = eager_weak_types(dynamic)
        host = HostCallback(callback, in_tree, False, tuple(static.items()), weak,
                            api="jax.debug.callback", raises_as_is=current_trace() is eval_trace)
        bind(prims.callback_p, *dynamic, callback=host,
             result_avals=(), effect="debug", vmap_method=None, **flag)

    return two_call_form("debug_callback", _debug_callback, callback, args, kwargs)


def eager_weak_types(values) -> tuple:
    """Per value a host function will receive, whether it reaches it weakly typed: as JAX's,
    only when called eagerly (under a transformation the values come back from the compiled
    program typed)."""
    if current_trace() is not eval_trace:
        return ()
    return tuple(weakly_typed(v) for v in values)


def two_call_form(name: str, call, first, args, kwargs):
    """JAX's two forms of a debug function: given its first argument it runs now; without,
    only options were given, and it returns the function that takes the rest."""
    if first is not None:
        call(first, *args, **kwargs)
        return None
    if args or kwargs:
        raise TypeError(f"{name} received unexpected arguments in the two-call form: "
                        f"{args=} {kwargs=}")
    return call


def split_arguments(args, kwargs) -> tuple:
    """A debug callback's (or print's) arguments: their tree, the leaves that are Python
    objects passed as they are (by position), and the values of the program among them."""
    flat, in_tree = tree.tree_flatten((args, kwargs))
    static = {k: v for k, v in enumerate(flat) if not is_array_value(v)}
    return in_tree, static, [v for k, v in enumerate(flat) if k not in static]


def is_array_value(value) -> bool:
    """Whether a callback argument's leaf is a value of the program (an array, a traced
    value or a number), not a Python object passed as it is."""
    if isinstance(value, (Tracer, Array)) or is_python_scalar(value):
        return True
    return isinstance(value, (np.ndarray, np.generic)) and dtypes.is_valid(value.dtype)
