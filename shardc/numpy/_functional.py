"""``jnp.ufunc`` and ``jnp.frompyfunc``: a scalar function as a numpy-style universal function.

Calls broadcast and ``vmap`` the scalar function; ``reduce`` and ``accumulate`` fold it along
an axis with ``scan`` (one step per element, in order, as numpy applies it); ``outer`` calls it
on every pair; ``at`` applies it at indices one after the other (repeated indices compound).
"""
from __future__ import annotations

import numpy as np

from compiler.control_flow import fori_loop, scan
from shardc.numpy._core import _axis, _is_array, _shape, asarray
import shardc.numpy as jnp

__all__ = ["ufunc", "frompyfunc"]


def _array(x):
    return asarray(x) if not _is_array(x) else x


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
        self._vectorized = jnp.vectorize(func)

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
        A, B = _array(A), _array(B)
        return self(jnp.reshape(A, _shape(A) + (1,) * len(_shape(B))), B)

    def _moved(self, a, axis):
        a = _array(a)
        if axis is None:
            return jnp.ravel(a)
        return jnp.moveaxis(a, _axis(axis, len(_shape(a))), 0)

    def reduce(self, a, axis=0, dtype=None, out=None, keepdims=False, initial=None,
               where=None):
        """``func`` folded along ``axis`` (all axes when None), starting from ``initial`` (or
        the identity, or the first element)."""
        self._binary("reduce")
        if out is not None or where is not None:
            raise NotImplementedError(f"{self.__name__}.reduce: out= and where= are not "
                                      "supported")
        a = _array(a)
        moved = self._moved(a, axis)
        if dtype is not None:
            moved = jnp.astype(moved, dtype)
        start = initial if initial is not None else self.identity
        if start is None:
            if _shape(moved)[0] == 0:
                raise ValueError(f"zero-size array to reduction operation {self.__name__} "
                                 "which has no identity")
            start, rest = moved[0], moved[1:]
        else:
            rest = moved
        carry = jnp.broadcast_to(jnp.astype(_array(start), jnp.result_type(moved)),
                                 _shape(moved)[1:])
        result, _ = scan(lambda c, x: (jnp.astype(self(c, x), jnp.result_type(c)), None),
                         carry, rest)
        if keepdims:
            if axis is None:
                return jnp.reshape(result, (1,) * len(_shape(a)))
            return jnp.expand_dims(result, _axis(axis, len(_shape(a))))
        return result

    def accumulate(self, a, axis=0, dtype=None, out=None):
        """The running values of ``func`` folded along ``axis`` (the first one is ``a``'s)."""
        self._binary("accumulate")
        if out is not None:
            raise NotImplementedError(f"{self.__name__}.accumulate: out= is not supported")
        a = _array(a)
        if axis is None and len(_shape(a)) != 1:
            raise ValueError("accumulate does not allow multiple axes")
        axis = 0 if axis is None else _axis(axis, len(_shape(a)))
        moved = jnp.moveaxis(a, axis, 0)
        if dtype is not None:
            moved = jnp.astype(moved, dtype)
        if _shape(moved)[0] == 0:
            return a
        step = lambda c, x: (lambda v: (v, v))(jnp.astype(self(c, x), jnp.result_type(c)))
        _, running = scan(step, moved[0], moved[1:])
        return jnp.moveaxis(jnp.concatenate([moved[:1], running]), 0, axis)

    def at(self, a, indices, b=None, /, *, inplace=True):
        """``a`` with ``func`` applied at ``indices`` (with ``b``), one index after another,
        so repeated indices compound; needs ``inplace=False``."""
        if inplace:
            raise NotImplementedError("jnp.ufunc.at: arrays are immutable; pass "
                                      "inplace=False")
        a = _array(a)
        indices = jnp.ravel(_array(indices))
        n = _shape(indices)[0]
        if self.nin == 2:
            if b is None:
                raise ValueError(f"{self.__name__}.at needs b for a binary ufunc")
            values = jnp.broadcast_to(_array(b), (n,) + _shape(a)[1:])
        elif self.nin != 1 or b is not None:
            raise ValueError(f"{self.__name__}.at: b must be given exactly for binary ufuncs")

        def body(k, current):
            i = indices[k]
            args = (current[i],) if self.nin == 1 else (current[i], values[k])
            return current.at[i].set(jnp.astype(self(*args), jnp.result_type(current)))
        return fori_loop(0, n, body, a)

    def reduceat(self, a, indices, axis=0, dtype=None, out=None):
        """``reduce`` over the slices ``a[indices[k]:indices[k + 1]]`` along ``axis`` (the
        element ``a[indices[k]]`` where the next index is not larger); ``indices`` concrete."""
        self._binary("reduceat")
        if out is not None:
            raise NotImplementedError(f"{self.__name__}.reduceat: out= is not supported")
        a = _array(a)
        axis = _axis(axis, len(_shape(a)))
        starts = np.asarray(indices).astype(np.int64).ravel()
        size = _shape(a)[axis]
        moved = jnp.moveaxis(a, axis, 0)
        pieces = []
        for k, start in enumerate(starts):
            stop = starts[k + 1] if k + 1 < len(starts) else size
            if stop > start:
                pieces.append(self.reduce(moved[start:stop], axis=0, dtype=dtype))
            else:
                pieces.append(moved[start])
        return jnp.moveaxis(jnp.stack(pieces), 0, axis)


def frompyfunc(func, /, nin, nout, *, identity=None):
    """``func`` of ``nin`` scalars (returning ``nout`` values) as a ``jnp.ufunc``."""
    return ufunc(func, nin, nout, identity=identity)
