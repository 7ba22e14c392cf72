"""Differences, gradients and integrals, interpolation and phase unwrapping, and
convolutions, composed from the other functions (so they trace, batch and differentiate like
them)."""
from __future__ import annotations

import builtins
import operator

import numpy as np

from compiler.tracing import Tracer, is_python_scalar
from ir import dtypes as _dt
from shardc.dtypes import is_weakly_typed
from shardc.numpy._arithmetic import (abs, add, clip, divide, equal, floor_divide, greater, less,
                                      logical_and, multiply, negative, not_equal, remainder,
                                      subtract, where)
from shardc.numpy._core import (as_array, as_inexact, asarray, astype, broadcast_to, canonical_axis,
                                concatenate, convert, dtype_of, is_array, promote, ravel, reshape,
                                shape_of, typed, zeros)
from shardc.numpy._indexing import take
from shardc.numpy._manipulation import flip, slice_axis
from shardc.numpy._products import matmul
from shardc.numpy._reductions import cumsum, sum
from shardc.numpy._sorting import argsort, searchsorted

__all__ = ["diff", "ediff1d", "gradient", "trapezoid", "interp", "unwrap", "convolve", "correlate"]


def _slice(x, axis, lo, hi):
    """``x[lo:hi]`` along ``axis``, as one static slice (JAX's jitted functions index so: a
    split dimension stays split where the result divides, where an eager gather would ask
    for ``out_sharding``)."""
    n = shape_of(x)[axis]
    lo, hi, _ = slice(lo, hi).indices(n)
    return slice_axis(x, axis, lo, builtins.max(lo, hi))

def diff(a, n=1, axis=-1, prepend=None, append=None):
    """The ``n``-th discrete difference along ``axis`` (booleans: where neighbours differ);
    ``n=0`` is ``a`` itself, without ``prepend`` or ``append`` (numpy's and JAX's)."""
    a = as_array(a)
    n = operator.index(n)
    if n == 0:
        return a
    if not shape_of(a):
        raise ValueError("diff requires input that is at least one dimensional")
    axis = canonical_axis(axis, len(shape_of(a)))
    if n < 0:
        raise ValueError(f"order must be non-negative but got {n}")
    parts = []
    for extra in (prepend, append):
        if extra is None:
            parts.append(None)
            continue
        extra = as_array(extra)
        if not shape_of(extra):
            shape = list(shape_of(a))
            shape[axis] = 1
            extra = broadcast_to(extra, tuple(shape))
        parts.append(extra)
    pieces = [x for x in (parts[0], a, parts[1]) if x is not None]
    a = concatenate(pieces, axis) if len(pieces) > 1 else a
    for _ in range(n):
        later, earlier = _slice(a, axis, 1, None), _slice(a, axis, None, -1)
        a = not_equal(later, earlier) if _dt.is_bool(dtype_of(a)) \
            else subtract(later, earlier)
    return a


def ediff1d(ary, to_end=None, to_begin=None):
    """Differences between consecutive elements of the flattened ``ary``, with ``to_begin``
    and ``to_end`` added at the ends."""
    ary = ravel(as_array(ary))
    result = diff(ary) if shape_of(ary)[0] else ary
    pieces = [ravel(astype(as_array(to_begin), dtype_of(ary)))] if to_begin is not None \
        else []
    pieces.append(result)
    if to_end is not None:
        pieces.append(ravel(astype(as_array(to_end), dtype_of(ary))))
    return concatenate(pieces) if len(pieces) > 1 else result


def _gradient_along(f, axis, h):
    """Central differences inside, one-sided at the edges, with spacing ``h``: a scalar, or
    the 1-D coordinates along ``axis`` (numpy's second-order formula for uneven steps)."""
    n = shape_of(f)[axis]
    if n < 2:
        raise ValueError("Shape of array too small to calculate a numerical gradient, at "
                         "least (edge_order + 1) elements are required.")
    if not (is_array(h) and shape_of(h)):
        first = divide(subtract(_slice(f, axis, 1, 2), _slice(f, axis, 0, 1)), h)
        last = divide(subtract(_slice(f, axis, n - 1, n), _slice(f, axis, n - 2, n - 1)),
                          h)
        middle = divide(subtract(_slice(f, axis, 2, None), _slice(f, axis, None, -2)),
                            multiply(2, h))
        return concatenate([first, middle, last], axis)
    x = as_inexact(h)
    if len(shape_of(x)) != 1 or shape_of(x)[0] != n:
        raise ValueError("when 1d, distances must match the length of the corresponding "
                         "dimension")
    view = [1] * len(shape_of(f))
    view[axis] = -1
    steps = reshape(diff(x), tuple(view))
    dx1, dx2 = _slice(steps, axis, None, -1), _slice(steps, axis, 1, None)
    a = divide(negative(dx2), multiply(dx1, add(dx1, dx2)))
    b = divide(subtract(dx2, dx1), multiply(dx1, dx2))
    c = divide(dx1, multiply(dx2, add(dx1, dx2)))
    middle = add(add(multiply(a, _slice(f, axis, None, -2)),
                             multiply(b, _slice(f, axis, 1, -1))),
                     multiply(c, _slice(f, axis, 2, None)))
    first = divide(subtract(_slice(f, axis, 1, 2), _slice(f, axis, 0, 1)),
                       _slice(steps, axis, 0, 1))
    last = divide(subtract(_slice(f, axis, n - 1, n), _slice(f, axis, n - 2, n - 1)),
                      _slice(steps, axis, n - 2, n - 1))
    return concatenate([first, middle, last], axis)


def gradient(f, *varargs, axis=None, edge_order=None):
    """Central differences inside, one-sided at the edges, along each axis; spacings are
    scalars or 1-D coordinates. One array for one axis, else a list."""
    if edge_order is not None and edge_order != 1:
        raise NotImplementedError("jnp.gradient: only edge_order=1 is supported")
    f = as_inexact(f)
    ndim = len(shape_of(f))
    axes = tuple(range(ndim)) if axis is None else tuple(
        canonical_axis(a, ndim) for a in ((axis,) if isinstance(axis, int) else axis))
    if len(varargs) == 0:
        spacings = [1.0] * len(axes)
    elif len(varargs) == 1:
        spacings = list(varargs) * len(axes)
    elif len(varargs) == len(axes):
        spacings = list(varargs)
    else:
        raise TypeError("Invalid number of spacing arguments")
    spacings = [as_array(h) if isinstance(h, (list, tuple, np.ndarray)) else h for h in spacings]
    out = [_gradient_along(f, a, h) for a, h in zip(axes, spacings)]
    return out[0] if len(out) == 1 else out


def trapezoid(y, x=None, dx=1.0, axis=-1):
    """The integral of ``y`` along ``axis`` by the trapezoidal rule (at ``x``, or spaced ``dx``)."""
    y = as_inexact(y)
    given, axis = axis, canonical_axis(axis, len(shape_of(y)))
    mids = multiply(add(_slice(y, axis, 1, None), _slice(y, axis, None, -1)), 0.5)
    if x is None:
        # dx broadcasts against the intervals before they are summed (an array dx weighs each
        # one), as numpy's
        if not is_python_scalar(dx):
            return sum(multiply(mids, as_array(dx)), axis=axis)
        return multiply(sum(mids, axis=axis), dx)
    x = as_array(x)
    if len(shape_of(x)) == 1:
        shape = [1] * len(shape_of(y))
        shape[axis] = shape_of(x)[0]
        x = reshape(x, tuple(shape))
    # an N-d x is differenced along ``axis`` as given (counted from its own end when
    # negative), and broadcasts against the intervals, as numpy's
    widths = diff(x, axis=given if len(shape_of(x)) > 1 else axis)
    return sum(multiply(mids, widths), axis=axis)


def interp(x, xp, fp, left=None, right=None, period=None):
    """Piecewise-linear interpolation of the points ``(xp, fp)`` (``xp`` increasing) at ``x``;
    outside, ``left``/``right`` (default the end values), or the end pieces extended with
    ``'extrapolate'``. As JAX's, ``x`` and ``xp`` are promoted together and ``fp`` on its own
    (real points may carry complex values)."""
    for name, value in (("left", left), ("right", right)):
        if isinstance(value, str) and value != "extrapolate":
            raise ValueError(f"the only valid string value of `{name}` is 'extrapolate', but "
                             f"got: {value!r}")
    weak = _dt.promotes_weak([dtype_of(v) for v in (x, xp, fp)],
                             [is_weakly_typed(v) for v in (x, xp, fp)])
    if shape_of(xp) != shape_of(fp) or len(shape_of(xp)) != 1:
        raise ValueError("xp and fp must be one-dimensional arrays of equal size")
    x, xp = promote(as_inexact(x), as_inexact(xp))
    fp = as_inexact(fp)
    if _dt.kind(dtype_of(x)) == _dt.COMPLEX:
        raise ValueError("jnp.interp: complex x values not supported.")
    if period is not None:
        # one period, sorted, with a point wrapped around at each end; left/right unused
        if np.ndim(period) != 0:
            raise ValueError(f"period must be a scalar; got {period}")
        if not isinstance(period, Tracer) and float(period) == 0:
            raise ValueError("period must be a non-zero value")
        period = abs(convert(period, dtype_of(x)))
        x, xp = remainder(x, period), remainder(xp, period)
        order = argsort(xp)
        xp, fp = take(xp, order), take(fp, order)
        xp = concatenate([xp[-1:] - period, xp, xp[:1] + period])
        fp = concatenate([fp[-1:], fp, fp[:1]])
        left = right = None
    n = shape_of(xp)[0]
    if n == 1:
        value = broadcast_to(fp[0], shape_of(x))
    else:
        i = clip(searchsorted(xp, x, side="right"), 1, n - 1)
        x0, x1 = take(xp, i - 1), take(xp, i)
        f0, f1 = take(fp, i - 1), take(fp, i)
        # JAX's formula: (x - x0) / width * (f1 - f0) from the knot below, that knot's value
        # where the knots (nearly) coincide; at the last knot it is the last piece's (and
        # beyond the ends, the end pieces extended)
        width = subtract(x1, x0)
        tiny = abs(width) <= float(_dt.finfo(dtype_of(xp)).eps) ** 2    # the spacing at eps
        step = divide(subtract(x, x0), where(tiny, 1, width))
        value = where(tiny, f0, add(f0, multiply(step, subtract(f1, f0))))
    if not isinstance(left, str):
        value = where(less(x, xp[0]), fp[0] if left is None else left, value)
    if not isinstance(right, str):
        value = where(greater(x, xp[-1]), fp[-1] if right is None else right, value)
    # JAX promotes the three to one type first: weakly typed only where that is
    return value if weak else typed(value)


def unwrap(p, discont=None, axis=-1, period=2 * np.pi):
    """``p`` with jumps larger than ``discont`` (default ``period / 2``) along ``axis`` replaced
    by their equivalent modulo ``period``. As JAX's, ``p`` and ``period`` are promoted
    together: an integer ``p`` with an integer period stays integer (half the period rounded
    down)."""
    p, period = promote(as_array(p), period)
    dtype = dtype_of(p)
    if _dt.kind(dtype) == _dt.COMPLEX:
        raise ValueError("jnp.unwrap does not support complex inputs.")
    axis = canonical_axis(axis, len(shape_of(p)))
    if shape_of(p)[axis] == 0:
        return p
    discont = divide(period, 2) if discont is None else discont
    half = floor_divide(period, 2) if _dt.is_int(dtype) else divide(period, 2)
    dd = diff(p, axis=axis)
    ddmod = subtract(remainder(add(dd, half), period), half)
    ddmod = where(logical_and(equal(ddmod, negative(half)), greater(dd, 0)), half, ddmod)
    correction = where(less(abs(dd), discont), 0, subtract(ddmod, dd))
    cumulative = cumsum(correction, axis=axis)
    return concatenate([_slice(p, axis, 0, 1),
                        add(_slice(p, axis, 1, None), cumulative)], axis)


# --- convolution -----------------------------------------------------------------------------

def _conv(x, y, mode, op, preferred_element_type):
    """JAX's ``_conv``: the longer operand ``x`` padded with zeros and slid under the kernel
    ``y`` (as ``conv_general_dilated`` does), so a NaN or inf in ``x`` reaches only the outputs
    whose window holds it."""
    x, y = as_array(x), as_array(y)
    if len(shape_of(x)) != 1 or len(shape_of(y)) != 1:
        raise ValueError(f"{op}() only support 1-dimensional inputs.")
    # as JAX's: computed in a float dtype unless one is asked for (preferred_element_type)
    x, y = promote(x, y)
    if preferred_element_type is None:
        x, y = as_inexact(x), as_inexact(y)
    else:
        x = astype(x, preferred_element_type)
        y = astype(y, preferred_element_type)
    if shape_of(x)[0] == 0 or shape_of(y)[0] == 0:
        raise ValueError(f"{op}: inputs cannot be empty, got shapes {shape_of(x)} and "
                         f"{shape_of(y)}.")
    reverse = False
    if op == "correlate":
        from shardc.numpy._ufuncs import conj
        y = conj(y)
        if shape_of(x)[0] < shape_of(y)[0]:
            x, y, reverse = y, x, True
    else:
        if shape_of(x)[0] < shape_of(y)[0]:
            x, y = y, x
        y = flip(y)
    m = shape_of(y)[0]
    if mode == "valid":
        lo, hi = 0, 0
    elif mode == "same":
        lo, hi = m // 2, m - m // 2 - 1
    elif mode == "full":
        lo, hi = m - 1, m - 1
    else:
        raise ValueError("mode must be one of ['full', 'same', 'valid']")
    dtype = dtype_of(x)
    padded = concatenate([zeros((lo,), dtype), x, zeros((hi,), dtype)])
    length = shape_of(padded)[0] - m + 1
    index = np.arange(length)[:, None] + np.arange(m)[None, :]
    windows = take(padded, asarray(index.astype(np.int32)))
    out = matmul(windows, y)
    return flip(out) if reverse else out


def convolve(a, v, mode="full", *, precision=None, preferred_element_type=None):
    """The discrete linear convolution of the 1-D ``a`` and ``v``."""
    return _conv(a, v, mode, "convolve", preferred_element_type)


def correlate(a, v, mode="valid", *, precision=None, preferred_element_type=None):
    """The cross-correlation ``c[k] = sum_n a[n + k] conj(v[n])`` of the 1-D ``a`` and ``v``."""
    return _conv(a, v, mode, "correlate", preferred_element_type)
