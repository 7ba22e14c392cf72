"""Arrays made from ranges: ``arange``, ``linspace``, ``logspace``, ``geomspace``, ``eye``
and ``identity`` (arrays filled with a value are ``_core``'s, ``fromfunction``
``_index_routines``' and ``vander`` ``_polynomials``')."""
from __future__ import annotations

import builtins
import math
import operator

import numpy as np

from compiler.tracing import Tracer, bind, static_int, value_if_known
from ir import dtypes as _dt
from ir import primitives as p
from shardc.numpy._arithmetic import (abs, add, divide, equal, floor, less, multiply, power,
                                      subtract, where)
from shardc.dtypes import result_type
from shardc.numpy._core import (as_array, astype, broadcast_shapes_of, broadcast_to, concatenate,
                                convert, reshape, shape_of, takes_device)
from shardc.numpy._ufuncs import log10

__all__ = ["arange", "linspace", "eye", "identity", "logspace", "geomspace"]


@takes_device
def arange(start, stop=None, step=None, dtype=None):
    """Evenly spaced values; ``arange(8 * 16.)`` is float32."""
    start, stop, step = (value_if_known(v) for v in (start, stop, step))
    for v in (start, stop, step):
        if isinstance(v, Tracer):
            raise TypeError("arange needs concrete start, stop and step: the length of the "
                            "result must be known when tracing")
    given = [v for v in (start, stop, step) if v is not None]
    if builtins.any(np.iscomplexobj(v) for v in given):
        raise ValueError("Passing complex start/stop/step to jnp.arange is no longer supported "
                         "starting in JAX v0.10.0.")
    if dtype is None:
        # JAX's promotion of the bounds: typed ones (jnp.int8(3)) give their dtype
        dtype = result_type(*given)
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
        dtype = result_type(start, stop)
        dtype = dtype if _dt.is_inexact(dtype) else _dt.float_
    dtype = _dt.canonicalize(dtype)
    work = dtype if _dt.is_inexact(dtype) else _dt.float_
    start, stop = astype(start, work), astype(stop, work)
    bounds = list(broadcast_shapes_of(shape_of(start), shape_of(stop)))
    start, stop = broadcast_to(start, tuple(bounds)), broadcast_to(stop, tuple(bounds))
    axis = len(bounds) + axis + 1 if axis < 0 else axis
    shaped = tuple(bounds[:axis]) + (1,) + tuple(bounds[axis:])     # a sample axis of 1
    div = (num - 1) if endpoint else num
    no_step = broadcast_to(np.asarray(np.nan, work), ())
    if num > 1:
        step = divide(subtract(stop, start), np.asarray(div, work))
        ramp = reshape(bind(p.iota_p, dtype=_dt.real_dtype(work), shape=(div,), dimension=0),
                       (1,) * axis + (div,) + (1,) * (len(shaped) - axis - 1))
        out = add(reshape(start, shaped), multiply(ramp, reshape(step, shaped)))
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


@takes_device
def eye(N, M=None, k=0, dtype=None):
    """An ``N x M`` matrix with ones on diagonal ``k`` (float32 unless ``dtype`` says)."""
    N = static_int(N, "argument of 'N' jnp.eye()")
    M = N if M is None else static_int(M, "argument 'M' of jnp.eye()")
    dtype = _dt.canonicalize(dtype or _dt.float_)
    rows = bind(p.iota_p, dtype=_dt.int_, shape=(N, M), dimension=0)
    cols = bind(p.iota_p, dtype=_dt.int_, shape=(N, M), dimension=1)
    return astype(equal(add(rows, k), cols), dtype)


@takes_device
def identity(n, dtype=None):
    """The ``n x n`` identity matrix."""
    return eye(n, dtype=dtype)


def logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0):
    """``base ** linspace(start, stop, num)``."""
    if axis != 0:
        raise NotImplementedError("jnp.logspace: only axis=0 is supported by shardc")
    exponents = linspace(start, stop, num, endpoint=endpoint)
    result = power(convert(base, _dt.float_), exponents)
    return astype(result, dtype) if dtype is not None else result


def geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0):
    """``num`` values from ``start`` to ``stop`` spaced evenly on a log scale; the ends are
    exact."""
    if axis != 0:
        raise NotImplementedError("jnp.geomspace: only axis=0 is supported by shardc")
    start, stop = convert(start, _dt.float_), convert(stop, _dt.float_)
    if not isinstance(start, Tracer) and (float(start) == 0 or float(stop) == 0):
        raise ValueError("Geometric sequence cannot include zero")
    sign = where(less(start, 0), -1.0, 1.0)
    log_start = log10(abs(start))
    log_stop = log10(abs(stop))
    result = multiply(sign, logspace(log_start, log_stop, num, endpoint=endpoint))
    if num > 0:
        first = concatenate([reshape(start, (1,)), result[1:]])
        result = first
        if endpoint and num > 1:
            result = concatenate([result[:-1], reshape(stop, (1,))])
    return astype(result, dtype) if dtype is not None else result
