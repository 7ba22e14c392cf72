"""Functional programming: ``vectorize``, ``apply_along_axis`` and ``apply_over_axes`` (calls
broadcast and ``vmap`` the function). ``jnp.ufunc`` and ``jnp.frompyfunc`` live with the
ufuncs (``shardc.numpy._ufuncs``)."""
from __future__ import annotations

import functools
import math
import re
import warnings

from compiler.vmap import vmap
from shardc.config import config
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


def _loop_operand(x, core, sizes, context):
    """The loop shape of ``x`` (its dims before the ``core`` ones); records each core size."""
    shape = shape_of(x)
    if len(shape) < len(core):
        raise ValueError(f"input with shape {shape} does not have enough dimensions for all "
                         f"core dimensions {core} {context}")
    _record_core_sizes(shape[len(shape) - len(core):], core, sizes, context)
    return shape[:len(shape) - len(core)]


def _record_core_sizes(core_shape, core, sizes, context):
    """Each core dimension's size in ``sizes``; JAX's ValueError where one disagrees."""
    for dim, size in zip(core, core_shape):
        if sizes.setdefault(dim, size) != size:
            raise ValueError(f"inconsistent size for core dimension {dim!r}: {size} vs "
                             f"{sizes[dim]} {context}")


def _check_excluded(excluded):
    """JAX's checks of ``excluded``: positions (non-negative ints) and keyword names."""
    if any(not isinstance(e, (str, int)) for e in excluded):
        raise TypeError(f"jax.numpy.vectorize can only exclude integer or string arguments, "
                        f"but excluded={excluded!r}")
    if any(isinstance(e, int) and e < 0 for e in excluded):
        raise ValueError(f"excluded={excluded!r} contains negative numbers")


def _without_nones(args, positions, cores, signature):
    """``positions`` and their ``cores`` less the arguments that are None, which (as JAX's)
    pass through to the function unchanged; ValueError where the signature gives one core
    dimensions."""
    nones = {i for i, k in enumerate(positions) if args[k] is None}
    if not nones:
        return positions, cores
    if any(cores[i] for i in nones):
        raise ValueError(f"Cannot pass None at locations {nones} with signature={signature!r}")
    keep = [i for i in range(len(positions)) if i not in nones]
    return [positions[i] for i in keep], [cores[i] for i in keep]


def _check_rank_promotion(arrays, loops, signature):
    """JAX's ``jax_numpy_rank_promotion`` check: loop dimensions of different ranks (scalars
    aside) warn or raise unless the flag is 'allow'."""
    mode = config.read("jax_numpy_rank_promotion")
    ranks = {len(loop) for x, loop in zip(arrays, loops) if ndim_of(x) != 0}
    if mode == "allow" or len(ranks) <= 1:
        return
    message = (f"operands with shapes {[shape_of(x) for x in arrays]} require rank promotion "
               f"for jnp.vectorize function with signature {signature}. Set the "
               "jax_numpy_rank_promotion config option to 'allow' to disable this message; "
               "for more information, see "
               "https://docs.jax.dev/en/latest/rank_promotion_warning.html.")
    if mode == "raise":
        raise ValueError(message)
    warnings.warn(message, stacklevel=4)


def vectorize(pyfunc, *, excluded=frozenset(), signature=None):
    """``pyfunc`` made to loop (by ``vmap``) over the broadcast leading dimensions of its
    arguments; each argument's last dimensions named in ``signature`` (``'(n),(n)->()'``) go
    to ``pyfunc`` whole, the others are scalars. ``excluded`` names positions or keywords
    passed through unchanged, as are arguments that are None."""
    _check_excluded(excluded)
    in_cores, out_cores = _parse_signature(signature) if signature else (None, None)

    @functools.wraps(pyfunc)
    def wrapped(*args, **kwargs):
        context = f"on vectorized function with excluded={excluded!r} and signature={signature!r}"
        positions = [k for k in range(len(args)) if k not in excluded]
        names = [k for k in kwargs if k not in excluded]
        if in_cores is not None and (names or len(in_cores) != len(positions)):
            raise TypeError(f"wrong number of positional arguments: expected "
                            f"{len(in_cores)}, got {len(positions)} {context}")
        positions, cores = _without_nones(args, positions, in_cores or [()] * len(positions),
                                          signature)
        arrays = [as_array(args[k]) for k in positions] + [as_array(kwargs[k]) for k in names]
        if not arrays:
            return pyfunc(*args, **kwargs)
        cores = cores + [()] * len(names)
        sizes: dict = {}
        loops = [_loop_operand(x, c, sizes, context) for x, c in zip(arrays, cores)]
        _check_rank_promotion(arrays, loops, signature)
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
            _check_outputs(out, outs, out_cores, sizes, context)
        shaped = [reshape(o, loop_shape + shape_of(o)[1:]) for o in outs]
        return type(out)(shaped) if isinstance(out, (tuple, list)) else shaped[0]
    return wrapped


def _check_outputs(out, outs, out_cores, sizes, context):
    """JAX's checks that the results have the signature's core dimensions (per member): a
    tuple of as many as it names (TypeErrors), each of its core dimensions (ValueErrors)."""
    if len(out_cores) > 1 and not isinstance(out, tuple):
        raise TypeError(f"output must be a tuple when multiple outputs are expected, got: "
                        f"{out!r}\n{context}")
    if len(outs) != len(out_cores):
        raise TypeError(f"wrong number of output arguments: expected {len(out_cores)}, got "
                        f"{len(outs)} {context}")
    sizes = dict(sizes)
    for o, core in zip(outs, out_cores):
        member_shape = shape_of(o)[1:]
        if len(member_shape) != len(core):
            raise ValueError(f"output shape {member_shape} does not match core dimensions "
                             f"{core} {context}")
        _record_core_sizes(member_shape, core, sizes, context)
