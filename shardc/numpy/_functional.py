"""Functional programming: ``vectorize``, ``apply_along_axis`` and ``apply_over_axes``, and
``jnp.ufunc``/``jnp.frompyfunc`` (a scalar function as a numpy-style universal function).

Calls broadcast and ``vmap`` the scalar function; ``reduce`` and ``accumulate`` fold it along
an axis with ``scan`` (one step per element, in order, as numpy applies it); ``outer`` calls it
on every pair; ``at`` applies it at indices one after the other (repeated indices compound).
"""
from __future__ import annotations

import functools
import re

import numpy as np

from compiler.vmap import vmap
from compiler.control_flow import fori_loop, scan
from shardc.dtypes import result_type
from shardc.numpy._core import (as_array, astype, broadcast_shapes_of, broadcast_to, canonical_axis,
                                concatenate, expand_dims, ndim_of, ravel, reshape, shape_of, stack)
from shardc.numpy._manipulation import moveaxis

__all__ = ["apply_along_axis", "apply_over_axes", "vectorize", "ufunc", "frompyfunc"]


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
        flat = [reshape(broadcast_to(x, loop_shape + shape_of(x)[len(l):]),
                            (-1,) + shape_of(x)[len(l):]) for x, l in zip(arrays, loops)]

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


class ufunc:
    """A universal function of ``nin`` scalar inputs and ``nout`` outputs.

    >>> add = jnp.frompyfunc(lambda a, b: a + b, 2, 1, identity=0)
    >>> add.reduce(jnp.arange(5))          # 10
    """

    def __init__(self, func, /, nin, nout, *, name=None, nargs=None, identity=None):
        self.func = func
        self.nin, self.nout = int(nin), int(nout)
        self.nargs = nargs if nargs is not None else self.nin
        self.identity = identity
        self.__name__ = name or getattr(func, "__name__", "ufunc")
        self._vectorized = vectorize(func)

    def __repr__(self):
        return f"<jnp.ufunc '{self.__name__}'>"

    def __call__(self, *args):
        if len(args) != self.nin:
            raise TypeError(f"{self.__name__}() takes {self.nin} positional argument(s) but "
                            f"{len(args)} were given")
        return self._vectorized(*args)

    def _binary(self, method):
        if self.nin != 2 or self.nout != 1:
            raise ValueError(f"{method} only supported for binary ufuncs with a single "
                             f"output; {self.__name__} has nin={self.nin}, nout={self.nout}")

    def outer(self, A, B, /):
        """``func(a, b)`` for every pair of elements: shape ``A.shape + B.shape``."""
        self._binary("outer")
        A, B = as_array(A), as_array(B)
        return self(reshape(A, shape_of(A) + (1,) * len(shape_of(B))), B)

    def _moved(self, a, axis):
        a = as_array(a)
        if axis is None:
            return ravel(a)
        return moveaxis(a, canonical_axis(axis, len(shape_of(a))), 0)

    def reduce(self, a, axis=0, dtype=None, out=None, keepdims=False, initial=None,
               where=None):
        """``func`` folded along ``axis`` (all axes when None), starting from ``initial`` (or
        the identity, or the first element)."""
        self._binary("reduce")
        if out is not None or where is not None:
            raise NotImplementedError(f"{self.__name__}.reduce: out= and where= are not "
                                      "supported")
        a = as_array(a)
        moved = self._moved(a, axis)
        if dtype is not None:
            moved = astype(moved, dtype)
        start = initial if initial is not None else self.identity
        if start is None:
            if shape_of(moved)[0] == 0:
                raise ValueError(f"zero-size array to reduction operation {self.__name__} "
                                 "which has no identity")
            start, rest = moved[0], moved[1:]
        else:
            rest = moved
        carry = broadcast_to(astype(as_array(start), result_type(moved)),
                                 shape_of(moved)[1:])
        result, _ = scan(lambda c, x: (astype(self(c, x), result_type(c)), None),
                         carry, rest)
        if keepdims:
            if axis is None:
                return reshape(result, (1,) * len(shape_of(a)))
            return expand_dims(result, canonical_axis(axis, len(shape_of(a))))
        return result

    def accumulate(self, a, axis=0, dtype=None, out=None):
        """The running values of ``func`` folded along ``axis`` (the first one is ``a``'s)."""
        self._binary("accumulate")
        if out is not None:
            raise NotImplementedError(f"{self.__name__}.accumulate: out= is not supported")
        a = as_array(a)
        if axis is None and len(shape_of(a)) != 1:
            raise ValueError("accumulate does not allow multiple axes")
        axis = 0 if axis is None else canonical_axis(axis, len(shape_of(a)))
        moved = moveaxis(a, axis, 0)
        if dtype is not None:
            moved = astype(moved, dtype)
        if shape_of(moved)[0] == 0:
            return a
        step = lambda c, x: (lambda v: (v, v))(astype(self(c, x), result_type(c)))
        _, running = scan(step, moved[0], moved[1:])
        return moveaxis(concatenate([moved[:1], running]), 0, axis)

    def at(self, a, indices, b=None, /, *, inplace=True):
        """``a`` with ``func`` applied at ``indices`` (with ``b``), one index after another,
        so repeated indices compound; needs ``inplace=False``."""
        if inplace:
            raise NotImplementedError("jnp.ufunc.at: arrays are immutable; pass "
                                      "inplace=False")
        a = as_array(a)
        indices = ravel(as_array(indices))
        n = shape_of(indices)[0]
        if self.nin == 2:
            if b is None:
                raise ValueError(f"{self.__name__}.at needs b for a binary ufunc")
            values = broadcast_to(as_array(b), (n,) + shape_of(a)[1:])
        elif self.nin != 1 or b is not None:
            raise ValueError(f"{self.__name__}.at: b must be given exactly for binary ufuncs")

        def body(k, current):
            i = indices[k]
            args = (current[i],) if self.nin == 1 else (current[i], values[k])
            return current.at[i].set(astype(self(*args), result_type(current)))
        return fori_loop(0, n, body, a)

    def reduceat(self, a, indices, axis=0, dtype=None, out=None):
        """``reduce`` over the slices ``a[indices[k]:indices[k + 1]]`` along ``axis`` (the
        element ``a[indices[k]]`` where the next index is not larger); ``indices`` concrete."""
        self._binary("reduceat")
        if out is not None:
            raise NotImplementedError(f"{self.__name__}.reduceat: out= is not supported")
        a = as_array(a)
        axis = canonical_axis(axis, len(shape_of(a)))
        starts = np.asarray(indices).astype(np.int64).ravel()
        size = shape_of(a)[axis]
        moved = moveaxis(a, axis, 0)
        pieces = []
        for k, start in enumerate(starts):
            stop = starts[k + 1] if k + 1 < len(starts) else size
            if stop > start:
                pieces.append(self.reduce(moved[start:stop], axis=0, dtype=dtype))
            else:
                pieces.append(moved[start])
        return moveaxis(stack(pieces), 0, axis)


def frompyfunc(func, /, nin, nout, *, identity=None):
    """``func`` of ``nin`` scalars (returning ``nout`` values) as a ``jnp.ufunc``."""
    return ufunc(func, nin, nout, identity=identity)
