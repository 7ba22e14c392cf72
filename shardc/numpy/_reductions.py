"""``shardc.numpy``'s reductions beyond sum/prod/max/min/mean/var/std: NaN-ignoring ones,
cumulative products, weighted averages, counts, covariance.

Cumulative products bind the ``cumprod`` primitive; NaN-ignoring reductions replace NaNs by
the reduction's identity first (so gradients flow to the other elements only).
"""
from __future__ import annotations

import numpy as np

from compiler.tracing import bind
from ir import dtypes as _dt
from ir import primitives as p
from shardc.numpy._core import (_accumulator_dtype, _axis, _convert, _cumulative_dtype, _dtype_of,
                                _is_array, _no_out, _reduce_axes, _shape, asarray)
import shardc.numpy as jnp

__all__ = [
    "cumprod", "cumulative_sum", "cumulative_prod", "nancumsum", "nancumprod", "nansum",
    "nanprod", "nanmax", "nanmin", "nanmean", "nanvar", "nanstd", "nanargmax", "nanargmin",
    "average", "ptp", "count_nonzero", "cov", "corrcoef",
]


def _array(x):
    return asarray(x) if not _is_array(x) else x


def _cumulative(prim, x, axis, dtype):
    x = _array(x)
    if axis is None:
        x, axis = jnp.ravel(x), 0
    x = jnp.astype(x, dtype if dtype is not None else _cumulative_dtype(_dtype_of(x)))
    return bind(prim, x, axis=_axis(axis, len(_shape(x))), reverse=False)


@_no_out
def cumprod(a, axis=None, dtype=None):
    """Cumulative product along ``axis`` (of the flattened array if None).

    >>> jnp.cumprod(jnp.array([1, 2, 3]))        # [1, 2, 6]
    """
    return _cumulative(p.cumprod_p, a, axis, dtype)


def _array_api_cumulative(fn, name, x, axis, dtype, include_initial, initial):
    x = _array(x)
    if not _shape(x):
        raise ValueError(f"{name}: the input must be at least 1-dimensional")
    if axis is None:
        if len(_shape(x)) > 1:
            raise ValueError(f"{name}: axis must be given for an array of more than one "
                             f"dimension (got shape {_shape(x)})")
        axis = 0
    axis = _axis(axis, len(_shape(x)))
    out = fn(x, axis=axis, dtype=dtype)
    if not include_initial:
        return out
    edge = list(_shape(out))
    edge[axis] = 1
    return jnp.concatenate([jnp.full(tuple(edge), initial, _dtype_of(out)), out], axis)


def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial=False):
    """The array API's cumulative sum: ``axis`` required beyond 1-D; ``include_initial``
    prepends the 0. Narrow integers accumulate in 32 bits, as ``sum`` (unlike ``cumsum``)."""
    if dtype is None:
        dtype = _accumulator_dtype(_dtype_of(_array(x)))
    return _array_api_cumulative(jnp.cumsum, "cumulative_sum", x, axis, dtype, include_initial,
                                 0)


def cumulative_prod(x, /, *, axis=None, dtype=None, include_initial=False):
    """The array API's cumulative product (``include_initial`` prepends the 1)."""
    return _array_api_cumulative(cumprod, "cumulative_prod", x, axis, dtype, include_initial, 1)


def _nan_to(x, value):
    x = _array(x)
    if not _dt.is_inexact(_dtype_of(x)):
        return x
    return jnp.where(jnp.isnan(x), _convert(value, _dtype_of(x)), x)


@_no_out
def nancumsum(a, axis=None, dtype=None):
    """Cumulative sum with NaNs taken as 0."""
    return jnp.cumsum(_nan_to(a, 0), axis, dtype)


@_no_out
def nancumprod(a, axis=None, dtype=None):
    """Cumulative product with NaNs taken as 1."""
    return cumprod(_nan_to(a, 1), axis, dtype)


@_no_out
def nansum(a, axis=None, dtype=None, keepdims=False):
    """Sum with NaNs taken as 0."""
    return jnp.sum(_nan_to(a, 0), axis, dtype, keepdims)


@_no_out
def nanprod(a, axis=None, dtype=None, keepdims=False):
    """Product with NaNs taken as 1."""
    return jnp.prod(_nan_to(a, 1), axis, dtype, keepdims)


def _nan_extremum(reduce, fill, a, axis, keepdims):
    a = _array(a)
    if not _dt.is_inexact(_dtype_of(a)):
        return reduce(a, axis, keepdims=keepdims)
    nan = jnp.isnan(a)
    result = reduce(jnp.where(nan, fill, a), axis, keepdims=keepdims)
    all_nan = jnp.all(nan, axis, keepdims=keepdims)
    return jnp.where(all_nan, np.nan, result)


@_no_out
def nanmax(a, axis=None, keepdims=False):
    """Maximum ignoring NaNs (NaN for an all-NaN slice)."""
    return _nan_extremum(jnp.max, -np.inf, a, axis, keepdims)


@_no_out
def nanmin(a, axis=None, keepdims=False):
    """Minimum ignoring NaNs (NaN for an all-NaN slice)."""
    return _nan_extremum(jnp.min, np.inf, a, axis, keepdims)


def _count(a, axis, keepdims):
    return jnp.sum(jnp.logical_not(jnp.isnan(a)), axis, keepdims=keepdims)


@_no_out
def nanmean(a, axis=None, dtype=None, keepdims=False):
    """Mean of the non-NaN elements (NaN for an all-NaN slice)."""
    a = _array(a)
    if not _dt.is_inexact(_dtype_of(a)):
        return jnp.mean(a, axis, dtype, keepdims)
    total = nansum(a, axis, dtype, keepdims)
    return jnp.divide(total, jnp.astype(_count(a, axis, keepdims), _dtype_of(total)))


@_no_out
def nanvar(a, axis=None, dtype=None, ddof=0, keepdims=False):
    """Variance of the non-NaN elements, with ``ddof`` delta degrees of freedom."""
    a = _array(a)
    if not _dt.is_inexact(_dtype_of(a)):
        a = jnp.astype(a, _dt.float_)
    centered = jnp.subtract(a, nanmean(a, axis, keepdims=True))
    squares = nansum(jnp.multiply(centered, centered), axis, keepdims=keepdims)
    count = jnp.astype(_count(a, axis, keepdims), _dtype_of(squares))
    return jnp.divide(squares, jnp.maximum(jnp.subtract(count, ddof), 0))


@_no_out
def nanstd(a, axis=None, dtype=None, ddof=0, keepdims=False):
    """Standard deviation of the non-NaN elements."""
    return jnp.sqrt(nanvar(a, axis, dtype, ddof, keepdims))


def _nan_arg_extremum(arg, fill, a, axis, keepdims):
    a = _array(a)
    if not _dt.is_inexact(_dtype_of(a)):
        return arg(a, axis, keepdims=keepdims)
    nan = jnp.isnan(a)
    index = arg(jnp.where(nan, fill, a), axis, keepdims=keepdims)
    all_nan = jnp.all(nan, axis, keepdims=keepdims) if axis is not None else jnp.all(nan)
    if axis is None and keepdims:
        all_nan = jnp.reshape(all_nan, (1,) * len(_shape(a)))
    return jnp.where(all_nan, -1, index)


@_no_out
def nanargmax(a, axis=None, keepdims=False):
    """Index of the maximum ignoring NaNs; -1 for an all-NaN slice (as in JAX)."""
    return _nan_arg_extremum(jnp.argmax, -np.inf, a, axis, keepdims)


@_no_out
def nanargmin(a, axis=None, keepdims=False):
    """Index of the minimum ignoring NaNs; -1 for an all-NaN slice (as in JAX)."""
    return _nan_arg_extremum(jnp.argmin, np.inf, a, axis, keepdims)


def average(a, axis=None, weights=None, returned=False, keepdims=False):
    """Mean of ``a`` along ``axis`` weighted by ``weights`` (1-D along ``axis``, or ``a``'s
    shape); ``returned`` also gives the sum of the weights."""
    a = _array(a)
    if weights is None:
        result = jnp.mean(a, axis, keepdims=keepdims)
        if not returned:
            return result
        count = np.prod([_shape(a)[d] for d in _reduce_axes(a, axis)], dtype=np.int64)
        return result, jnp.full(_shape(result), count, _dtype_of(result))
    weights = _array(weights)
    if not _dt.is_inexact(jnp.result_type(a, weights)):
        a = jnp.astype(a, _dt.float_)
    if _shape(weights) != _shape(a):
        if axis is None or len(_shape(weights)) != 1:
            raise TypeError("Axis must be specified when shapes of a and weights differ.")
        axis = _axis(axis, len(_shape(a)))
        if _shape(weights)[0] != _shape(a)[axis]:
            raise ValueError("Length of weights not compatible with specified axis.")
        shape = [1] * len(_shape(a))
        shape[axis] = _shape(weights)[0]
        weights = jnp.broadcast_to(jnp.reshape(weights, shape), _shape(a))
    total = jnp.sum(jnp.multiply(a, weights), axis, keepdims=keepdims)
    scale = jnp.sum(jnp.astype(weights, _dtype_of(total)), axis, keepdims=keepdims)
    result = jnp.divide(total, scale)
    return (result, jnp.broadcast_to(scale, _shape(result))) if returned else result


@_no_out
def ptp(a, axis=None, keepdims=False):
    """Peak to peak: maximum minus minimum along ``axis``."""
    return jnp.subtract(jnp.max(a, axis, keepdims=keepdims), jnp.min(a, axis, keepdims=keepdims))


def count_nonzero(a, axis=None, keepdims=False):
    """Number of non-zero elements along ``axis`` (int32)."""
    a = _array(a)
    return jnp.sum(jnp.not_equal(a, 0), axis, dtype=_dt.int_, keepdims=keepdims)


def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None):
    """Covariance matrix of the variables in the rows (``rowvar``) or columns of ``m``, with
    optional frequency (``fweights``) and reliability (``aweights``) weights per observation."""
    m = jnp.atleast_2d(_array(m))
    if not _dt.is_inexact(_dtype_of(m)):
        m = jnp.astype(m, _dt.float_)
    if not rowvar and _shape(m)[0] != 1:
        m = jnp.transpose(m)
    if y is not None:
        y = jnp.atleast_2d(jnp.astype(_array(y), _dtype_of(m)))
        if not rowvar and _shape(y)[0] != 1:
            y = jnp.transpose(y)
        m = jnp.concatenate([m, y], 0)
    ddof = (0 if bias else 1) if ddof is None else ddof
    weights = None
    for given in (fweights, aweights):
        if given is not None:
            given = jnp.astype(_array(given), _dtype_of(m))
            if len(_shape(given)) != 1 or _shape(given)[0] != _shape(m)[1]:
                raise RuntimeError("incompatible numbers of samples and weights")
            weights = given if weights is None else jnp.multiply(weights, given)
    if weights is None:
        centered = jnp.subtract(m, jnp.mean(m, axis=1, keepdims=True))
        product = jnp.matmul(centered, jnp.transpose(centered))
        return jnp.squeeze(jnp.divide(product, _shape(m)[1] - ddof))
    total = jnp.sum(weights)
    mean = jnp.divide(jnp.sum(jnp.multiply(m, weights), axis=1, keepdims=True), total)
    if ddof == 0:
        factor = total
    elif aweights is None:
        factor = jnp.subtract(total, ddof)
    else:
        reliability = jnp.astype(_array(aweights), _dtype_of(m))
        factor = jnp.subtract(total, jnp.divide(
            jnp.multiply(ddof, jnp.sum(jnp.multiply(weights, reliability))), total))
    centered = jnp.subtract(m, mean)
    product = jnp.matmul(jnp.multiply(centered, weights), jnp.transpose(centered))
    return jnp.squeeze(jnp.divide(product, factor))


def corrcoef(x, y=None, rowvar=True):
    """Pearson correlation coefficients (clipped to [-1, 1])."""
    c = cov(x, y, rowvar)
    if not _shape(c):
        return jnp.divide(c, c)
    d = jnp.sqrt(jnp.diagonal(c))
    c = jnp.divide(jnp.divide(c, d[:, None]), d[None, :])
    return jnp.clip(c, -1, 1)
