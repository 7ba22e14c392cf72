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
from shardc.numpy._core import astype, broadcast_to, concatenate, convert, reshape, takes_device
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
    if stop is None:
        start, stop = 0, start
    step = 1 if step is None else step
    values = [v for v in (start, stop, step)]
    if dtype is None:
        dtype = _dt.float_ if builtins.any(isinstance(v, float) or (isinstance(v, np.floating))
                                  for v in values) else _dt.int_
    dtype = _dt.canonicalize(dtype)
    length = builtins.max(0, int(math.ceil((stop - start) / step)))
    ramp = bind(p.iota_p, dtype=dtype, shape=(length,), dimension=0)
    if step != 1:
        ramp = multiply(ramp, convert(step, dtype))
    if start != 0:
        ramp = add(ramp, convert(start, dtype))
    return ramp


@takes_device
def linspace(start, stop, num=50, endpoint=True, dtype=None):
    """``num`` evenly spaced values from ``start`` to ``stop`` (included when ``endpoint``).

    Integer dtypes round towards negative infinity, as numpy 2 and JAX do.
    """
    num = operator.index(num)
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.")
    # complex endpoints make a complex line (JAX: the result type of start, stop and float)
    work = _dt.complex_ if any(np.iscomplexobj(v) or np.issubdtype(
        getattr(v, "dtype", np.float32), np.complexfloating) for v in (start, stop)) else _dt.float_
    dtype = _dt.canonicalize(dtype or work)
    start, stop = convert(start, work), convert(stop, work)
    if num <= 1:
        values = broadcast_to(start, (num,))
    else:
        div = (num - 1) if endpoint else num
        count = num - 1 if endpoint else num
        ramp = bind(p.iota_p, dtype=_dt.float_, shape=(count,), dimension=0)
        values = add(start, multiply(ramp, divide(subtract(stop, start), div)))
        if endpoint:
            values = concatenate([values, broadcast_to(stop, (1,))])
    if not _dt.is_inexact(dtype):
        values = floor(values)
    return astype(values, dtype)


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
