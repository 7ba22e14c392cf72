"""The methods and operators of traced values and Arrays (``x.sum()``, ``x + y``, ``x.T``,
``x.at[i].set(v)``): numpy's, bound to ``shardc.numpy``'s functions."""
from __future__ import annotations

import numpy as np

from compiler.tracing import Tracer, bind, install_array_methods
from ir import dtypes as _dt
from ir import primitives as p
from runtime.array import Array
from runtime.reference import device_put
from shardc._compiled import NUMPY as COMPILED_NUMPY, compiled_in_jax
from shardc.numpy._array_api import __array_namespace__
from shardc.numpy._arraylike import check_arraylike
from shardc.numpy._arithmetic import (abs, add, bitwise_and, bitwise_or, bitwise_xor, clip, equal,
                                      floor_divide, greater, greater_equal, less, less_equal,
                                      multiply, negative, not_equal, power, remainder, subtract,
                                      true_divide)
from shardc.numpy._core import astype, ravel, reshape
from shardc.numpy._diagonals import diagonal
from shardc.numpy._index_routines import choose
from shardc.numpy._indexing import AtIndexer, getitem, take
from shardc.numpy._manipulation import flip, repeat, squeeze, swapaxes, transpose
from shardc.numpy._products import dot, matmul, trace
from shardc.numpy._reductions import (all, any, argmax, argmin, cumprod, cumsum, max, mean, min,
                                      prod, std, sum, var)
from shardc.numpy._sorting import argpartition, argsort, compress, nonzero, searchsorted, sort
from shardc.numpy._statistics import ptp
from shardc.numpy._ufuncs import conj, divmod, imag, left_shift, real, right_shift, round


def _reflected(fn):
    return lambda self, other: fn(other, self)


# what an operator takes as its other operand; anything else is left to that operand's own
# operator (NotImplemented), so a class with __radd__ gets ``array + obj``, and a list or a
# dict is Python's TypeError, as in JAX
_OPERANDS = (bool, int, float, complex, np.generic, np.ndarray, Array, Tracer)


def _deferring(method):
    def operator(self, other):
        if not isinstance(other, _OPERANDS) and not hasattr(other, "__jax_array__"):
            return NotImplemented
        return method(self, other)
    return operator


_BINARY = ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or",
           "xor", "divmod", "lshift", "rshift")
_DEFERRING = ({f"__{n}__" for n in _BINARY} | {f"__r{n}__" for n in _BINARY}
              | {"__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"})


def _contains(self, other):
    """``other in x``, as JAX's: whether the one-dimensional ``x`` holds the scalar ``other``
    (numpy's broadcasting comparison is refused: JAX's errors name what is wrong)."""
    if other is None or isinstance(other, str):
        raise TypeError(f"Array.__contains__: unsupported operand type {type(other)}.")
    check_arraylike("Array.__contains__", other, 0)
    if self.ndim != 1:
        raise ValueError("Array.__contains__: search array must be one-dimensional, got "
                         f"arr.shape={self.shape}.")
    query = np.shape(other)
    if query != ():
        raise ValueError(f"Array.__contains__: query value must be a scalar, got "
                         f"query.shape={query}")
    return any(equal(self, other))


def _view(self, dtype=None, type=None):
    """The array's bits read as ``dtype`` (JAX's ``Array.view``): a narrower dtype widens the
    last dimension by the width ratio, a wider one narrows it."""
    if type is not None:
        raise NotImplementedError("`type` argument of array.view() is not supported.")
    if dtype is None:
        return self
    old, new = self.dtype, _dt.canonicalize(dtype)
    if old == new:
        return self
    if old == _dt.bool_:
        self, old = astype(self, np.uint8), np.dtype(np.uint8)
    target = np.dtype(np.uint8) if new == _dt.bool_ else new
    # widths in bits: int4 and its kin pack two to a byte
    old_bits, new_bits = _dt.bit_width(old), _dt.bit_width(target)
    if self.ndim == 0 and old_bits != new_bits:
        raise ValueError("view() of a 0d array is only supported if the itemsize is unchanged.")
    if old_bits > new_bits:              # (..., n) -> (..., n, r) -> (..., n * r)
        out = bind(p.bitcast_convert_type_p, self, new_dtype=target)
        out = reshape(out, self.shape[:-1] + (-1,))
    elif old_bits < new_bits:
        ratio = new_bits // old_bits
        if self.shape[-1] % ratio:
            raise ValueError("When changing to a larger dtype, its size must be a divisor of "
                             "the total size in bytes of the last axis of the array.")
        out = bind(p.bitcast_convert_type_p,
                   reshape(self, self.shape[:-1] + (self.shape[-1] // ratio, ratio)),
                   new_dtype=target)
    else:
        out = bind(p.bitcast_convert_type_p, self, new_dtype=target)
    return astype(out, new) if new == _dt.bool_ else out


def _byteswap(self):
    """The array with the bytes of each element reversed (little- to big-endian and back),
    of its dtype: a complex number's parts each swapped, one-byte elements as they are."""
    if _dt.kind(self.dtype) == _dt.COMPLEX:
        parts = (_byteswap(real(self)), _byteswap(imag(self)))
        return bind(p.complex_p, *parts)
    if self.dtype.itemsize == 1:
        return self
    as_bytes = bind(p.bitcast_convert_type_p, self, new_dtype=np.dtype(np.uint8))
    return bind(p.bitcast_convert_type_p, flip(as_bytes, -1), new_dtype=self.dtype)


_METHODS = {
    "__add__": add, "__radd__": _reflected(add),
    "__sub__": subtract, "__rsub__": _reflected(subtract),
    "__mul__": multiply, "__rmul__": _reflected(multiply),
    "__truediv__": true_divide, "__rtruediv__": _reflected(true_divide),
    "__floordiv__": floor_divide, "__rfloordiv__": _reflected(floor_divide),
    "__mod__": remainder, "__rmod__": _reflected(remainder),
    "__pow__": power, "__rpow__": _reflected(power),
    "__matmul__": matmul, "__rmatmul__": _reflected(matmul),
    "__and__": bitwise_and, "__rand__": _reflected(bitwise_and),
    "__or__": bitwise_or, "__ror__": _reflected(bitwise_or),
    "__xor__": bitwise_xor, "__rxor__": _reflected(bitwise_xor),
    "__eq__": equal, "__ne__": not_equal, "__lt__": less, "__le__": less_equal,
    "__gt__": greater, "__ge__": greater_equal,
    "__neg__": negative, "__pos__": lambda self: self, "__abs__": abs,
    "__invert__": lambda self: bind(p.not_p, self),
    "__round__": lambda self, ndigits=None: (
        round(self, ndigits) if ndigits is not None else astype(round(self), _dt.int_)),
    "__getitem__": lambda self, index: getitem(self, index),
    "at": property(lambda self: AtIndexer(self)),
    "T": property(lambda self: transpose(self)),
    "mT": property(lambda self: swapaxes(self, -1, -2)),
    "reshape": reshape, "transpose": lambda self, *axes: transpose(
        self, axes[0] if len(axes) == 1 and not isinstance(axes[0], (int, np.integer))
        else (axes or None)),
    "astype": astype, "sum": sum, "mean": mean, "max": max, "min": min, "prod": prod,
    "argmax": argmax, "argmin": argmin, "all": all, "any": any, "var": var, "std": std,
    "cumsum": cumsum, "dot": dot, "squeeze": squeeze, "ravel": ravel,
    "flatten": ravel, "swapaxes": swapaxes, "clip": clip, "round": round,
    "take": take, "repeat": repeat,
    "sort": sort, "argsort": argsort, "searchsorted": searchsorted,
    "cumprod": cumprod, "nonzero": nonzero, "diagonal": diagonal, "ptp": ptp,
    "conj": conj, "conjugate": conj, "real": property(real),
    "imag": property(imag), "trace": trace,
    "compress": lambda self, condition, axis=None, **kw: compress(condition, self, axis, **kw),
    "choose": lambda self, choices, mode="raise": choose(self, choices, mode=mode),
    "__divmod__": divmod, "__rdivmod__": _reflected(divmod),
    "__lshift__": left_shift, "__rlshift__": _reflected(left_shift),
    "__rshift__": right_shift, "__rrshift__": _reflected(right_shift),
    "view": _view, "byteswap": _byteswap,
    "argpartition": lambda self, kth, axis=-1: argpartition(self, kth, axis),
    "__setitem__": lambda self, idx, value: _immutable(self),
    "__contains__": _contains,
    "__array_namespace__": __array_namespace__,
}


def _immutable(x):
    """``x[idx] = y``: JAX arrays (and traced values) cannot change; JAX's TypeError points
    to ``.at[]``."""
    raise TypeError(
        "JAX arrays are immutable and do not support in-place item assignment. Instead of "
        "x[idx] = y, use x = x.at[idx].set(y) or another .at[] method: "
        "https://docs.jax.dev/en/latest/_autosummary/jax.numpy.ndarray.at.html")


# the methods whose functions JAX jits (x.mean() is jnp.mean's program), as such for the
# transfer guards
_COMPILED_METHODS = {
    "mean": "mean", "round": "round", "diagonal": "diagonal",
    "__floordiv__": "floor_divide", "__rfloordiv__": "floor_divide", "__mod__": "remainder",
    "__rmod__": "remainder", "__divmod__": "divmod", "__rdivmod__": "divmod"}
for _method, _function in _COMPILED_METHODS.items():
    _METHODS[_method] = compiled_in_jax(_METHODS[_method], COMPILED_NUMPY[_function])


def install_methods():
    """Give traced values and Arrays numpy's methods and operators (``x.sum()``, ``x + y``,
    ``x.at[i].set(v)``)."""
    methods = {name: _deferring(m) if name in _DEFERRING else m for name, m in _METHODS.items()}
    install_array_methods(Tracer, methods)
    install_array_methods(Array, methods)
    # an array's copy is itself (arrays are never changed; Array.copy keeps its layout)
    install_array_methods(Tracer, {"copy": lambda self, order=None: self})
    install_array_methods(Array, {"to_device": lambda self, device, *, stream=None:
                                  device_put(self, device)})
