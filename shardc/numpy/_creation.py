"""Arrays made from ranges: ``arange``, ``linspace``, ``logspace``, ``geomspace``, ``eye``
and ``identity`` (arrays filled with a value are ``_core``'s, ``fromfunction``
``_index_routines``' and ``vander`` ``_polynomials``')."""
from __future__ import annotations

import builtins
import math
import operator

import numpy as np

from compiler.tracing import ConcretizationTypeError, Tracer, bind, static_int, value_if_known
from ir import dtypes as _dt
from ir import primitives as p
from shardc.numpy._arithmetic import (abs, add, divide, equal, floor, less, multiply, power,
                                      subtract, where)
from shardc.dtypes import result_type
from shardc.numpy._core import (as_array, astype, broadcast_shapes_of, broadcast_to, concatenate,
                                convert, reshape, shape_of, takes_device)
from shardc.numpy._manipulation import moveaxis
from shardc.numpy._ufuncs import log10

__all__ = ["arange", "linspace", "eye", "identity", "logspace", "geomspace"]


@takes_device
def arange(start, stop=None, step=None, dtype=None):
    """Evenly spaced values; ``arange(8 * 16.)`` is float32."""
    start, stop, step = (value_if_known(v) for v in (start, stop, step))
    for name, v in (("start", start), ("stop", stop), ("step", step)):
        if isinstance(v, Tracer):
            # JAX's ConcretizationTypeError: the length of the result must be known
            raise ConcretizationTypeError(
                "Abstract tracer value encountered where concrete value is expected: traced "
                f"array with shape {v.aval.str_short(axis_order=None)}\n"
                f"It arose in the jnp.arange argument '{'stop' if stop is None else name}'")
    given = [v for v in (start, stop, step) if v is not None]
    if builtins.any(np.iscomplexobj(v) for v in given):
        raise ValueError("Passing complex start/stop/step to jnp.arange is no longer supported "
                         "starting in JAX v0.10.0.")
    if dtype is None:
        # JAX's promotion of the bounds: typed ones (jnp.int8(3)) give their dtype
        dtype = result_type(*given)
    else:
        dtype = _dt.requested(dtype, "arange")
    dtype = _dt.canonicalize(dtype)
    if stop is None:
        start, stop = 0, start
    step = 1 if step is None else step
    # float16 and bfloat16 steps are taken in float32, then rounded once (as JAX's)
    work = np.dtype(np.float32) if _dt.is_float(dtype) and _dt.finfo(dtype).bits < 32 \
        else dtype
    length = builtins.max(0, int(math.ceil((stop - start) / step)))
    ramp = bind(p.iota_p, dtype=work, shape=(length,), dimension=0)
    if step != 1:
        ramp = multiply(ramp, convert(step, work))
    if start != 0:
        ramp = add(ramp, convert(start, work))
    return astype(ramp, dtype) if work != dtype else ramp


@takes_device
def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0):
    """``num`` evenly spaced values from ``start`` to ``stop`` (included when ``endpoint``):
    ``start + k * step``, the last one ``stop`` itself. Array bounds broadcast; the samples run
    along ``axis``. ``retstep`` also returns the step. Integer dtypes round towards negative
    infinity, as numpy 2 and JAX do.
    """
    num = operator.index(num)
    axis = operator.index(axis)
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.")
    start, stop = as_array(start), as_array(stop)
    if dtype is None:
        dtype = _dt.to_inexact(result_type(start, stop))
    else:
        dtype = _dt.requested(dtype, "linspace")
    dtype = _dt.canonicalize(dtype)
    work = _dt.to_inexact(dtype)
    start, stop = astype(start, work), astype(stop, work)
    bounds = list(broadcast_shapes_of(shape_of(start), shape_of(stop)))
    start, stop = broadcast_to(start, tuple(bounds)), broadcast_to(stop, tuple(bounds))
    axis = len(bounds) + axis + 1 if axis < 0 else axis
    shaped = tuple(bounds[:axis]) + (1,) + tuple(bounds[axis:])     # a sample axis of 1
    div = (num - 1) if endpoint else num
    no_step = broadcast_to(np.asarray(np.nan, work), ())
    if num > 1:
        step = divide(subtract(stop, start), np.asarray(div, work))
        # JAX's: each sample a blend of the bounds, start * (1 - t) + stop * t for t = k / div
        # (in the working dtype, so low precisions round as JAX's do), which meets the
        # endpoints exactly
        real = _dt.real_dtype(work)
        ramp = reshape(bind(p.iota_p, dtype=real, shape=(div,), dimension=0),
                       (1,) * axis + (div,) + (1,) * (len(shaped) - axis - 1))
        t = astype(divide(ramp, np.asarray(div, real)), work)
        out = add(multiply(reshape(start, shaped), subtract(1, t)),
                  multiply(reshape(stop, shaped), t))
        if endpoint:
            out = concatenate([out, reshape(stop, shaped)], axis=axis)
    elif num == 1:
        step = no_step if endpoint else subtract(stop, start)
        out = reshape(start, shaped)
    else:
        step = no_step
        out = broadcast_to(np.zeros((), work), shaped[:axis] + (0,) + shaped[axis + 1:])
    if not _dt.is_inexact(dtype):
        out = floor(out)
    out = astype(out, dtype)
    return (out, step) if retstep else out


def _eye_size(n, what: str) -> int:
    """``n`` as a static size; a traced one is JAX's TypeError for a shape."""
    try:
        return static_int(n, what)
    except ConcretizationTypeError:
        raise TypeError(f"Shapes must be 1D sequences of concrete values of integer type, got "
                        f"({n},). {what}.\nIf using `jit`, try using `static_argnums` or "
                        "applying `jit` to smaller subfunctions.") from None


@takes_device
def eye(N, M=None, k=0, dtype=None):
    """An ``N x M`` matrix with ones on diagonal ``k`` (float32 unless ``dtype`` says)."""
    return _eye(N, M, k, _dt.float_ if dtype is None else _dt.requested(dtype, "eye"))


def _eye(N, M, k, dtype):
    N = _eye_size(N, "argument of 'N' jnp.eye()")
    M = N if M is None else _eye_size(M, "argument 'M' of jnp.eye()")
    if isinstance(k, (int, np.integer)):
        k = builtins.max(builtins.min(int(k), M), -N)     # any diagonal past the ends is empty
    rows = bind(p.iota_p, dtype=_dt.int_, shape=(N, M), dimension=0)
    cols = bind(p.iota_p, dtype=_dt.int_, shape=(N, M), dimension=1)
    return astype(equal(add(rows, k), cols), dtype)


@takes_device
def identity(n, dtype=None):
    """The ``n x n`` identity matrix."""
    return _eye(n, None, 0, _dt.float_ if dtype is None else _dt.requested(dtype, "identity"))


def _inexact_dtype(dtype, start, stop, function):
    """``(the result's dtype, the inexact one to compute in)``: ``dtype`` if given, else the
    bounds' promoted dtype made inexact (JAX's)."""
    if dtype is None:
        dtype = _dt.to_inexact(result_type(start, stop))
    else:
        dtype = _dt.requested(dtype, function)
    return dtype, _dt.to_inexact(dtype)


def logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0):
    """``base ** linspace(start, stop, num)``: array bounds broadcast, the samples run along
    ``axis``; computed in an inexact dtype and converted to ``dtype`` (as JAX does)."""
    num, axis = operator.index(num), operator.index(axis)
    start, stop = as_array(start), as_array(stop)
    dtype, work = _inexact_dtype(dtype, start, stop, "logspace")
    exponents = linspace(astype(start, work), astype(stop, work), num, endpoint=endpoint,
                         axis=axis)
    return astype(power(base, exponents), dtype)


def geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0):
    """``num`` values from ``start`` to ``stop`` spaced evenly on a log scale (array bounds
    broadcast, the samples along ``axis``); the ends are exact, as numpy's. Complex bounds
    step around the circle as numpy's and JAX's do (``start``'s phase times a real
    sequence)."""
    num, axis = operator.index(num), operator.index(axis)
    start, stop = as_array(start), as_array(stop)
    dtype, work = _inexact_dtype(dtype, start, stop, "geomspace")
    start, stop = astype(start, work), astype(stop, work)
    shape = broadcast_shapes_of(shape_of(start), shape_of(stop))
    start, stop = broadcast_to(start, shape), broadcast_to(stop, shape)
    for bound in (start, stop):
        known = value_if_known(bound)
        if not isinstance(known, Tracer) and (np.asarray(known) == 0).any():
            raise ValueError("Geometric sequence cannot include zero")
    sign = where(less(start, 0), -1.0, 1.0) if not _dt.kind(work) == _dt.COMPLEX \
        else divide(start, abs(start))
    result = multiply(sign, logspace(log10(divide(start, sign)), log10(divide(stop, sign)),
                                     num, endpoint=endpoint, dtype=work, axis=0))
    if num > 0:
        ends = [reshape(start, (1,) + shape), result[1:]]
        if endpoint and num > 1:
            ends = [ends[0], result[1:-1], reshape(stop, (1,) + shape)]
        result = concatenate(ends, axis=0)
    axis = axis + len(shape) + 1 if axis < 0 else axis
    if not 0 <= axis <= len(shape):
        raise np.exceptions.AxisError(f"axis {axis} is out of bounds for array of dimension "
                                      f"{len(shape) + 1}")
    return astype(moveaxis(result, 0, axis), dtype)
