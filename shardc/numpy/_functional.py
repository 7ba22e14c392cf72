"""Functional programming: ``vectorize``, ``apply_along_axis`` and ``apply_over_axes`` (calls
broadcast and ``vmap`` the function). ``jnp.ufunc`` and ``jnp.frompyfunc`` live with the
ufuncs (``shardc.numpy._ufuncs``)."""
from __future__ import annotations

import functools
import math
import re

from compiler.vmap import vmap
from shardc.numpy._core import (as_array, broadcast_shapes_of, broadcast_to, canonical_axis,
                                expand_dims, ndim_of, reshape, shape_of)

__all__ = ["apply_along_axis", "apply_over_axes", "vectorize"]


def apply_along_axis(func1d, axis, arr, *args, **kwargs):
    """``func1d`` applied to every 1-D slice of ``arr`` along ``axis`` (by ``vmap``)."""
    arr = as_array(arr)
    n = ndim_of(arr)
    axis = canonical_axis(axis, n)
    fn = lambda x: func1d(x, *args, **kwargs)
    # vmap over the axes after ``axis``, then those before it
    for _ in range(n - axis - 1):
        fn = vmap(fn, in_axes=-1, out_axes=-1)
    for _ in range(axis):
        fn = vmap(fn, in_axes=0, out_axes=0)
    return fn(arr)


def apply_over_axes(func, a, axes):
    """``func(a, axis)`` for each axis in turn (the reduced axis kept, size 1)."""
    a = as_array(a)
    for axis in ([axes] if isinstance(axes, int) else axes):
        result = func(a, axis)
        if ndim_of(result) == ndim_of(a) - 1:
            result = expand_dims(result, axis)
        if ndim_of(result) != ndim_of(a):
            raise ValueError("function is not returning an array of the correct shape")
        a = result
    return a


def _parse_signature(signature):
    """A generalised ufunc signature ``'(m,n),(n)->(m)'`` as (input core dims, output core
    dims): tuples of dimension names per argument."""
    pattern = r"\s*\(\s*\w*(?:\s*,\s*\w+)*\s*\)\s*"
    arguments = rf"(?:{pattern}(?:,{pattern})*)?"
    if not re.fullmatch(rf"{arguments}->{arguments}", signature):
        raise ValueError(f"not a valid gufunc signature: {signature}")
    inputs, outputs = signature.split("->")

    def dims(group):
        return [tuple(d.strip() for d in g.split(",") if d.strip())
                for g in re.findall(r"\(([^()]*)\)", group)]
    return dims(inputs), dims(outputs)


def _loop_operand(x, core, sizes, name):
    """The loop shape of ``x`` (its dims before the ``core`` ones); records each core size."""
    shape = shape_of(x)
    if len(shape) < len(core):
        raise ValueError(f"{name}: input with shape {shape} does not have enough dimensions "
                         f"for its core dimensions {core}")
    for dim, size in zip(core, shape[len(shape) - len(core):]):
        if sizes.setdefault(dim, size) != size:
            raise ValueError(f"{name}: inconsistent size for core dimension {dim!r}: "
                             f"{size} vs {sizes[dim]}")
    return shape[:len(shape) - len(core)]


def vectorize(pyfunc, *, excluded=frozenset(), signature=None):
    """``pyfunc`` made to loop (by ``vmap``) over the broadcast leading dimensions of its
    arguments; each argument's last dimensions named in ``signature`` (``'(n),(n)->()'``) go
    to ``pyfunc`` whole, the others are scalars. ``excluded`` names positions or keywords
    passed through unchanged."""
    in_cores, out_cores = _parse_signature(signature) if signature else (None, None)

    @functools.wraps(pyfunc)
    def wrapped(*args, **kwargs):
        positions = [k for k in range(len(args)) if k not in excluded]
        names = [k for k in kwargs if k not in excluded]
        if in_cores is not None and (names or len(in_cores) != len(positions)):
            raise TypeError(f"wrong number of positional arguments: expected "
                            f"{len(in_cores)}, got {len(positions)}")
        arrays = [as_array(args[k]) for k in positions] + [as_array(kwargs[k]) for k in names]
        if not arrays:
            return pyfunc(*args, **kwargs)
        cores = in_cores or [()] * len(arrays)
        sizes: dict = {}
        loops = [_loop_operand(x, c, sizes, pyfunc.__name__) for x, c in zip(arrays, cores)]
        loop_shape = broadcast_shapes_of(*loops)
        members = math.prod(loop_shape)     # (not -1: a core dimension may be empty)
        flat = [reshape(broadcast_to(x, loop_shape + shape_of(x)[len(l):]),
                        (members,) + shape_of(x)[len(l):]) for x, l in zip(arrays, loops)]

        def member_call(*values):
            call_args = list(args)
            for k, v in zip(positions, values):
                call_args[k] = v
            call_kwargs = dict(kwargs)
            call_kwargs.update(zip(names, values[len(positions):]))
            return pyfunc(*call_args, **call_kwargs)
        out = vmap(member_call)(*flat)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        if out_cores is not None:
            _check_outputs(outs, out_cores, sizes)
        shaped = [reshape(o, loop_shape + shape_of(o)[1:]) for o in outs]
        return type(out)(shaped) if isinstance(out, (tuple, list)) else shaped[0]
    return wrapped


def _check_outputs(outs, out_cores, sizes):
    """ValueError unless each result has its signature's core dimensions (per member)."""
    if len(outs) != len(out_cores):
        raise ValueError(f"wrong number of outputs from the function: expected "
                         f"{len(out_cores)}, got {len(outs)}")
    for out, core in zip(outs, out_cores):
        member_shape = shape_of(out)[1:]
        if len(member_shape) != len(core):
            raise ValueError(f"output of shape {member_shape} does not match the core "
                             f"dimensions {core} of the signature")
        for dim, size in zip(core, member_shape):
            if sizes.setdefault(dim, size) != size:
                raise ValueError(f"inconsistent size for core dimension {dim!r}: {size} vs "
                                 f"{sizes[dim]}")
