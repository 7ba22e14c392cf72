"""Reductions: sums, products, extrema, logical and arg reductions, means and variances,
cumulative sums and products, their NaN-ignoring forms, and the comparisons of whole arrays.

Cumulative products bind the ``cumprod`` primitive; NaN-ignoring reductions replace NaNs by
the reduction's identity first (so gradients flow to the other elements only).
"""
from __future__ import annotations

import builtins
import functools

import numpy as np

from compiler.tracing import aval_of, bind, concrete_or_error
from ir.sharding import ShardingTypeError
from ir import dtypes as _dt
from ir import primitives as p
from shardc.numpy._arithmetic import (abs, abs2, add, divide, equal, greater, isfinite, isnan,
                                      less_equal, logical_and, logical_not, logical_or, maximum,
                                      minimum, multiply, not_equal, sqrt, subtract, where)
from shardc.numpy._core import (STATIC_AXIS, as_array, asarray, asked_dtype, astype,
                                broadcast_shapes_of, broadcast_to, canonical_axis, concatenate,
                                convert, dtype_of, full, key_array_rule, promote, ravel, reshape,
                                shape_of)
from shardc.numpy._scalars import bool_

where_ = where        # the reductions take a ``where=`` mask of their own

__all__ = [
    "sum", "prod", "max", "min", "amax", "amin", "all", "any", "mean", "var", "std", "argmax",
    "argmin", "cumsum", "cumprod", "cumulative_sum", "cumulative_prod", "nancumsum", "nancumprod",
    "nansum", "nanprod", "nanmax", "nanmin", "nanmean", "nanvar", "nanstd", "nanargmax",
    "nanargmin", "count_nonzero", "allclose", "isclose", "array_equal", "array_equiv",
]


def no_out(fn):
    """numpy hands ``out=`` to these when called as ``np.sum(array)``; only None makes sense."""

    @functools.wraps(fn)
    def wrapper(*args, out=None, **kwargs):
        if out is not None:
            raise NotImplementedError(f"{fn.__name__}: out= is not supported (arrays are "
                                      "immutable); use the result")
        return fn(*args, **kwargs)
    return wrapper


def reduce_axes(x, axis) -> tuple:
    """``axis`` (None: all, an int or a tuple) as sorted non-negative axes of ``x``; a
    traced ``axis`` is JAX's ConcretizationTypeError."""
    ndim = len(shape_of(x))
    axis = concrete_or_error(axis, STATIC_AXIS)
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (int, np.integer)):
        return (canonical_axis(int(axis), ndim),)
    axes = tuple(sorted(canonical_axis(a, ndim) for a in axis))
    if len(set(axes)) != len(axes):
        raise ValueError(f"duplicate value in 'axis': {tuple(axis)}")
    return axes


def accumulator_dtype(dtype) -> np.dtype:
    """JAX sums and multiplies booleans and integers narrower than the default int in the
    default int (int64 with x64 on)."""
    if _dt.is_bool(dtype) or (_dt.is_int(dtype) and np.dtype(dtype).itemsize < _dt.int_.itemsize):
        return _dt.uint_ if _dt.is_unsigned(dtype) else _dt.int_
    return np.dtype(dtype)


def cumulative_dtype(dtype) -> np.dtype:
    """JAX's cumulative sums and products count booleans in int32 and keep every other dtype
    (an int8 cumsum wraps in int8)."""
    return _dt.int_ if _dt.is_bool(dtype) else np.dtype(dtype)


def _keep(x, result, axes, keepdims):
    if not keepdims:
        return result
    shape = tuple(1 if k in axes else d for k, d in enumerate(shape_of(x)))
    return reshape(result, shape)


def _check_where(name, where) -> None:
    """JAX's ValueError for a ``where=`` mask that is not boolean."""
    if where is not None:
        dtype = dtype_of(as_array(where))
        if dtype != np.bool_:
            raise ValueError(f"jnp.{name}: where must be None or a boolean array; got "
                             f"where.dtype={dtype!r}.")


def _reduction(prim, x, axis, keepdims, dtype=None, initial=None, where=None,
               promote_integers=True):
    x = as_array(x)
    _check_where(_NAMES[prim], where)
    if dtype is not None:
        x = astype(x, dtype)
    elif prim in (p.reduce_sum_p, p.reduce_prod_p):
        if promote_integers:
            x = astype(x, accumulator_dtype(dtype_of(x)))
        elif dtype_of(x) == np.bool_:     # booleans count, as JAX's (its numeric dtype)
            x = astype(x, _dt.int_)
    result_dtype = dtype_of(x)
    if dtype is None and prim in (p.reduce_sum_p, p.reduce_prod_p):
        x = astype(x, _dt.computation_dtype(result_dtype))    # bf16/f16 sum in f32, as JAX
    axes = reduce_axes(x, axis)
    if where is not None:
        if prim in (p.reduce_max_p, p.reduce_min_p) and initial is None:
            raise ValueError(f"reduction operation {_NAMES[prim]} does not have an identity, so "
                             "to use a where mask one has to specify 'initial'")
        x = _masked(x, where, _identity(prim, dtype_of(x)))
    if prim in (p.reduce_max_p, p.reduce_min_p) and builtins.any(shape_of(x)[a] == 0
                                                                   for a in axes):
        if initial is None:
            raise ValueError(f"zero-size array to reduction operation {prim} which has no "
                             f"identity (shape {shape_of(x)}, axis {axis})")
        # nothing to compare: one identity element per reduction, so each gives ``initial``
        shape = shape_of(x)
        x = full(tuple(1 if a in axes and n == 0 else n for a, n in enumerate(shape)),
                 np.array(_identity(prim, dtype_of(x)), dtype_of(x)), dtype_of(x))
    result = bind(prim, x, axes=axes)
    if initial is not None:
        if shape_of(initial) != ():
            raise ValueError(f"initial value must be a scalar. Got array of shape "
                             f"{shape_of(initial)}")
        # convert, not as_array: a Python number becomes a literal of the result's dtype, so
        # no operation makes the -inf of max(..., initial=-inf) (debug_infs flags none, as JAX)
        result = _COMBINE[prim](result, convert(initial, dtype_of(result)))
    return _keep(x, astype(result, result_dtype), axes, keepdims)


_NAMES = {p.reduce_sum_p: "sum", p.reduce_prod_p: "prod", p.reduce_max_p: "max",
          p.reduce_min_p: "min", p.reduce_and_p: "all", p.reduce_or_p: "any"}


def _identity(prim, dtype):
    """The value that changes nothing in ``prim``'s reduction of ``dtype``."""
    if prim is p.reduce_sum_p:
        return 0
    if prim is p.reduce_prod_p:
        return 1
    if prim is p.reduce_and_p:
        return True
    if prim is p.reduce_or_p:
        return False
    low = prim is p.reduce_max_p
    if _dt.is_inexact(dtype):
        return -np.inf if low else np.inf
    if _dt.is_bool(dtype):
        return not low
    info = np.iinfo(dtype)
    return info.min if low else info.max


def _mask(x, where):
    """A ``where=`` mask as booleans of ``x``'s shape."""
    return broadcast_to(astype(asarray(where), bool_), shape_of(x))


def _masked(x, where, fill):
    """``x`` with its elements outside ``where`` replaced by ``fill``."""
    # the fill made in x's dtype first: a uint32 identity is no int32
    return where_(_mask(x, where), x, asarray(np.array(fill, dtype_of(x))))


def _how_many(x, axis, keepdims, where):
    """How many elements each reduction over ``axis`` reads (a mask's true ones)."""
    if where is None:
        axes = reduce_axes(x, axis)
        return int(np.prod([shape_of(x)[a] for a in axes], dtype=np.int64))
    return sum(astype(_mask(x, where), _dt.int_), axis, keepdims=keepdims)


def _no_out(name, out):
    if out is not None:
        raise NotImplementedError(f"{name}: out= is not supported (arrays are immutable); use "
                                  "the result")


def sum(x, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None,
        promote_integers=True):
    """Sum over ``axis`` (None: all; an int or a tuple, negative from the end); ``where``:
    the elements to add; ``initial``: added once."""
    _no_out("sum", out)
    return _reduction(p.reduce_sum_p, x, axis, keepdims, asked_dtype(dtype, "sum"), initial, where,
                      promote_integers)


def prod(x, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None,
         promote_integers=True):
    """Product over ``axis`` (None: all; an int or a tuple)."""
    _no_out("prod", out)
    return _reduction(p.reduce_prod_p, x, axis, keepdims, asked_dtype(dtype, "prod"), initial,
                      where,
                      promote_integers)


def max(x, axis=None, out=None, keepdims=False, initial=None, where=None):
    """Maximum over ``axis`` (None: all; an int or a tuple); with ``where``, ``initial`` is
    required (max has no identity), as in JAX."""
    _no_out("max", out)
    return _reduction(p.reduce_max_p, x, axis, keepdims, None, initial, where)


def min(x, axis=None, out=None, keepdims=False, initial=None, where=None):
    """Minimum over ``axis`` (None: all; an int or a tuple)."""
    _no_out("min", out)
    return _reduction(p.reduce_min_p, x, axis, keepdims, None, initial, where)


amax, amin = max, min


def all(x, axis=None, out=None, keepdims=False, *, where=None):
    """True where every element over ``axis`` (that ``where`` allows) is true."""
    _no_out("all", out)
    return _reduction(p.reduce_and_p, astype(x, bool_), axis, keepdims, where=where)


def any(x, axis=None, out=None, keepdims=False, *, where=None):
    """True where some element over ``axis`` (that ``where`` allows) is true."""
    _no_out("any", out)
    return _reduction(p.reduce_or_p, astype(x, bool_), axis, keepdims, where=where)


def mean(x, axis=None, dtype=None, out=None, keepdims=False, *, where=None):
    """Mean over ``axis`` (of the elements ``where`` allows: NaN where none); integers and
    booleans average in float32."""
    _no_out("mean", out)
    _check_where("mean", where)
    x, dtype = as_array(x), asked_dtype(dtype, "mean")
    count = _how_many(x, axis, keepdims, where)
    if dtype is not None and np.issubdtype(_dt.canonicalize(dtype), np.integer):
        # an integer dtype asked for: JAX sums in it (wrapping around) and divides as lax
        # divides integers (toward zero)
        wanted = _dt.canonicalize(dtype)
        total = sum(x, axis, wanted, keepdims=keepdims, where=where)
        return bind(p.div_p, total, astype(asarray(count), wanted))
    if not _dt.is_inexact(dtype_of(x)):
        x = astype(x, _dt.to_inexact(dtype_of(x)))
    result_dtype = _dt.canonicalize(dtype) if dtype is not None else dtype_of(x)
    x = astype(x, _dt.computation_dtype(result_dtype))   # bf16/f16 average in f32, as JAX
    total = sum(x, axis, None, keepdims=keepdims, where=where)
    if isinstance(count, int):      # a count past int32 (2**32 elements) divides as a float
        count = np.asarray(count, dtype_of(total))[()]
    return astype(divide(total, count), result_dtype)


def var(x, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, mean=None,
        correction=None):
    """Variance over ``axis`` with ``ddof`` (or ``correction``) delta degrees of freedom, of
    the elements ``where`` allows; ``mean``: the mean, when already known. As JAX's: of
    complex values real (complex where ``dtype`` asks for it), of integers float, NaN where
    no more than ``ddof`` elements remain."""
    _no_out("var", out)
    _check_where("var", where)
    ddof = _correction(ddof, correction)
    x, dtype = as_array(x), asked_dtype(dtype, "var")
    computation, result_dtype = _variance_dtypes(dtype_of(x), dtype)
    x = astype(x, computation)
    centre = (_mean(x, axis, keepdims=True, where=where) if mean is None
              else astype(asarray(mean), computation))
    # |x - mean|^2: the variance of complex values is real
    squares = sum(abs2(subtract(x, centre)), axis, keepdims=keepdims, where=where)
    normalizer = subtract(astype(asarray(_how_many(x, axis, keepdims, where)),
                                 dtype_of(squares)), ddof)
    variance = astype(divide(squares, normalizer), result_dtype)
    return where_(greater(normalizer, 0), variance, np.nan)


def _correction(ddof, correction):
    """The delta degrees of freedom, given as ``ddof`` or ``correction`` (not both)."""
    if correction is None:
        return ddof
    if not isinstance(ddof, int) or ddof != 0:
        raise ValueError("ddof and correction can't be provided simultaneously.")
    return correction


def std(x, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, mean=None,
        correction=None):
    """Standard deviation over ``axis``."""
    _no_out("std", out)
    _check_where("std", where)
    dtype = asked_dtype(dtype, "std")
    if dtype is not None and not _dt.is_inexact(_dt.canonicalize(dtype)):
        raise ValueError(f"dtype argument to jnp.std must be inexact; got "
                         f"{_dt.canonicalize(dtype)}")
    return sqrt(var(x, axis, dtype, None, _correction(ddof, correction), keepdims,
                    where=where, mean=mean))


_mean = mean
_COMBINE = {p.reduce_sum_p: add, p.reduce_prod_p: multiply, p.reduce_max_p: maximum,
            p.reduce_min_p: minimum}


def _arg_reduction(prim, x, axis, keepdims):
    x = as_array(x)
    original = x
    if axis is None:
        x, axis = ravel(x), 0
    axis = canonical_axis(axis, len(shape_of(x)))
    if shape_of(x)[axis] == 0:
        raise ValueError(f"attempt to get {prim} of an empty sequence (shape {shape_of(x)})")
    if _dt.kind(dtype_of(x)) == _dt.COMPLEX:    # JAX's comparison inside the reduction refuses it
        raise TypeError(f"{'gt' if prim is p.argmax_p else 'lt'} does not accept dtype "
                        f"{dtype_of(x).name} at position 0. Accepted dtypes at position 0 are "
                        "subtypes of integer, floating, bool.")
    result = bind(prim, x, axes=(axis,), index_dtype=_dt.int_)
    if original is not x:       # axis=None: keepdims keeps every dimension of the input
        return reshape(result, (1,) * len(shape_of(original))) if keepdims else result
    return _keep(x, result, (axis,), keepdims)


@no_out
def argmax(x, axis=None, keepdims=False):
    """Index (int32) of the first maximum along ``axis`` (of the flattened array if None)."""
    return _arg_reduction(p.argmax_p, x, axis, keepdims)


@no_out
def argmin(x, axis=None, keepdims=False):
    """Index (int32) of the first minimum along ``axis`` (of the flattened array if None)."""
    return _arg_reduction(p.argmin_p, x, axis, keepdims)


@no_out
def cumsum(x, axis=None, dtype=None):
    """Cumulative sum along ``axis`` (of the flattened array if None)."""
    x, dtype = as_array(x), asked_dtype(dtype, "cumsum")
    if axis is None:
        _check_whole(x, "cumsum")
        x, axis = ravel(x), 0
    x = astype(x, dtype if dtype is not None else cumulative_dtype(dtype_of(x)))
    return bind(p.cumsum_p, x, axis=canonical_axis(axis, len(shape_of(x))), reverse=False)


def _check_whole(x, name: str) -> None:
    """JAX's ShardingTypeError for a cumulative op over a split array's flattened form."""
    if aval_of(x).type_sharding is not None:
        raise ShardingTypeError(
            "The input should be fully replicated when axis is not specified to "
            f"{name}. Got input type={aval_of(x).str_long()}")


def _cumulative(prim, x, axis, dtype):
    x, dtype = as_array(x), asked_dtype(dtype, prim.name)
    if axis is None:
        _check_whole(x, prim.name)
        x, axis = ravel(x), 0
    x = astype(x, dtype if dtype is not None else cumulative_dtype(dtype_of(x)))
    return bind(prim, x, axis=canonical_axis(axis, len(shape_of(x))), reverse=False)


@no_out
def cumprod(a, axis=None, dtype=None):
    """Cumulative product along ``axis`` (of the flattened array if None).

    >>> jnp.cumprod(jnp.array([1, 2, 3]))        # [1, 2, 6]
    """
    return _cumulative(p.cumprod_p, a, axis, dtype)


def _array_api_cumulative(fn, what, x, axis, dtype, include_initial, initial):
    """``what``: "sum" or "product", in JAX's error texts."""
    x = as_array(x)
    if not shape_of(x):
        raise ValueError(f"The input must be non-scalar to take a cumulative {what}, however a "
                         "scalar value or scalar array was given.")
    if axis is None:
        if len(shape_of(x)) > 1:
            raise ValueError(f"The input array has rank {len(shape_of(x))}, however axis was "
                             "not set to an explicit value. The axis argument is only optional "
                             "for one-dimensional arrays.")
        axis = 0
    axis = canonical_axis(axis, len(shape_of(x)))
    out = fn(x, axis=axis, dtype=dtype)
    if not include_initial:
        return out
    edge = list(shape_of(out))
    edge[axis] = 1
    return concatenate([full(tuple(edge), initial, dtype_of(out)), out], axis)


def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial=False):
    """The array API's cumulative sum: ``axis`` required beyond 1-D; ``include_initial``
    prepends the 0. Narrow integers accumulate in 32 bits, as ``sum`` (unlike ``cumsum``)."""
    if dtype is None:
        dtype = accumulator_dtype(dtype_of(as_array(x)))
    return _array_api_cumulative(cumsum, "sum", x, axis, dtype, include_initial, 0)


def cumulative_prod(x, /, *, axis=None, dtype=None, include_initial=False):
    """The array API's cumulative product (``include_initial`` prepends the 1)."""
    return _array_api_cumulative(cumprod, "product", x, axis, dtype, include_initial, 1)


def _nan_to(x, value):
    x = as_array(x)
    if not _dt.is_inexact(dtype_of(x)):
        return x
    return where(isnan(x), convert(value, dtype_of(x)), x)


@no_out
def nancumsum(a, axis=None, dtype=None):
    """Cumulative sum with NaNs taken as 0."""
    return cumsum(_nan_to(a, 0), axis, dtype)


@no_out
def nancumprod(a, axis=None, dtype=None):
    """Cumulative product with NaNs taken as 1."""
    return cumprod(_nan_to(a, 1), axis, dtype)


def nansum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    """Sum with NaNs taken as 0."""
    _no_out("nansum", out)
    _check_where("nansum", where)
    return sum(_nan_to(a, 0), axis, dtype, keepdims=keepdims, initial=initial, where=where)


def nanprod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    """Product with NaNs taken as 1."""
    _no_out("nanprod", out)
    _check_where("nanprod", where)
    return prod(_nan_to(a, 1), axis, dtype, keepdims=keepdims, initial=initial, where=where)


def _nan_extremum(reduce, fill, a, axis, keepdims, initial, where):
    a = as_array(a)
    if not _dt.is_inexact(dtype_of(a)):
        return reduce(a, axis, keepdims=keepdims, initial=initial, where=where)
    nan = isnan(a)
    result = reduce(where_(nan, fill, a), axis, keepdims=keepdims, initial=initial, where=where)
    if initial is not None:
        return result
    considered = nan if where is None else logical_or(nan, logical_not(where))
    return where_(all(considered, axis, keepdims=keepdims), np.nan, result)


def nanmax(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    """Maximum ignoring NaNs (NaN for an all-NaN slice)."""
    _no_out("nanmax", out)
    _check_where("nanmax", where)
    return _nan_extremum(max, -np.inf, a, axis, keepdims, initial, where)


def nanmin(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    """Minimum ignoring NaNs (NaN for an all-NaN slice)."""
    _no_out("nanmin", out)
    _check_where("nanmin", where)
    return _nan_extremum(min, np.inf, a, axis, keepdims, initial, where)


def _count(a, axis, keepdims, where=None):
    """How many non-NaN elements (that ``where`` allows) each reduction reads."""
    present = logical_not(isnan(a))
    return _how_many(a, axis, keepdims,
                     present if where is None else logical_and(present, where))


def nanmean(a, axis=None, dtype=None, out=None, keepdims=False, where=None):
    """Mean of the non-NaN elements (NaN for an all-NaN slice)."""
    _no_out("nanmean", out)
    _check_where("nanmean", where)
    a = as_array(a)
    if not _dt.is_inexact(dtype_of(a)):
        return mean(a, axis, dtype, keepdims=keepdims, where=where)
    total = nansum(a, axis, dtype, keepdims=keepdims, where=where)
    return divide(total, astype(_count(a, axis, keepdims, where), dtype_of(total)))


def nanvar(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, where=None, mean=None):
    """Variance of the non-NaN elements, with ``ddof`` delta degrees of freedom (NaN where
    fewer than ``ddof`` + 1 remain); of complex values, real. As JAX's: NaNs are zeroed
    after centring, so gradients at the other elements are finite."""
    _no_out("nanvar", out)
    _check_where("nanvar", where)
    a = as_array(a)
    computation, result_dtype = _variance_dtypes(dtype_of(a), dtype)
    a = astype(a, computation)
    centre = (nanmean(a, axis, computation, keepdims=True, where=where) if mean is None
              else astype(asarray(mean), computation))
    nan = isnan(a)
    centered = where_(nan, np.zeros((), computation), subtract(a, centre))
    squares = sum(abs2(centered), axis, keepdims=keepdims, where=where)
    count = subtract(sum(logical_not(nan), axis, keepdims=keepdims, where=where), ddof)
    none = less_equal(count, 0)
    squares = where_(none, np.nan, squares)
    divisor = astype(where_(none, 1, count), dtype_of(squares))
    return astype(divide(squares, divisor), result_dtype)


def _variance_dtypes(a_dtype, dtype) -> tuple:
    """(the dtype a variance is computed in, its result's), as JAX's: a complex array's
    variance is real; integers' is float; half floats are computed in float32."""
    if dtype is not None:
        dtype = _dt.canonicalize(dtype)
        if np.dtype(a_dtype).kind == "c" and np.dtype(dtype).kind != "c":
            raise ValueError("jax.numpy.var does not yet support real dtype parameters when "
                             "computing the variance of an array of complex values. The "
                             "semantics of numpy.var seem unclear in this case. Please comment "
                             "on https://github.com/jax-ml/jax/issues/2283 if this behavior is "
                             "important to you.")
        return _dt.computation_dtype(dtype), np.dtype(dtype)
    if not _dt.is_inexact(a_dtype):
        return _dt.to_inexact(a_dtype), _dt.to_inexact(a_dtype)
    return _dt.computation_dtype(a_dtype), np.dtype(_dt.real_dtype(a_dtype))


def nanstd(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, where=None, mean=None):
    """Standard deviation of the non-NaN elements."""
    _no_out("nanstd", out)
    _check_where("nanstd", where)
    return sqrt(nanvar(a, axis, dtype, None, ddof, keepdims, where=where, mean=mean))


def _nan_arg_extremum(arg, fill, a, axis, keepdims):
    a = as_array(a)
    if not _dt.is_inexact(dtype_of(a)):
        return arg(a, axis, keepdims=keepdims)
    nan = isnan(a)
    index = arg(where(nan, fill, a), axis, keepdims=keepdims)
    all_nan = all(nan, axis, keepdims=keepdims) if axis is not None else all(nan)
    if axis is None and keepdims:
        all_nan = reshape(all_nan, (1,) * len(shape_of(a)))
    return where(all_nan, -1, index)


@no_out
def nanargmax(a, axis=None, keepdims=False):
    """Index of the maximum ignoring NaNs; -1 for an all-NaN slice (as in JAX)."""
    return _nan_arg_extremum(argmax, -np.inf, a, axis, keepdims)


@no_out
def nanargmin(a, axis=None, keepdims=False):
    """Index of the minimum ignoring NaNs; -1 for an all-NaN slice (as in JAX)."""
    return _nan_arg_extremum(argmin, np.inf, a, axis, keepdims)


def count_nonzero(a, axis=None, keepdims=False):
    """Number of non-zero elements along ``axis`` (int32)."""
    a = as_array(a)
    return sum(not_equal(a, 0), axis, dtype=_dt.int_, keepdims=keepdims)


# --- comparisons of whole arrays -------------------------------------------------------------

def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """True when every element of ``a`` is close to ``b`` (a scalar boolean array)."""
    return all(isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan))


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """Elementwise ``|a - b| <= atol + rtol * |b|`` for a finite ``b``; equal values (equal
    infinities too) are close."""
    a, b = promote(a, b)
    if not _dt.is_inexact(dtype_of(a)):
        inexact = _dt.to_inexact(dtype_of(a))
        a, b = astype(a, inexact), astype(b, inexact)
    # the tolerances are typed as the values' (real) dtype, as JAX's: the result is typed
    real = np.zeros((), dtype_of(a)).real.dtype
    rtol, atol = convert(rtol, real), convert(atol, real)
    # a finite value is never close to an infinite b (the tolerance would be infinite)
    in_range = less_equal(abs(subtract(a, b)), add(atol, multiply(rtol, abs(b))))
    close = logical_or(equal(a, b), logical_and(isfinite(b), in_range))
    if equal_nan:
        close = logical_or(close, logical_and(isnan(a), isnan(b)))
    return close


def array_equal(a, b, equal_nan=False):
    """True when ``a`` and ``b`` have one shape and equal elements (a scalar boolean array)."""
    if (rule := key_array_rule("array_equal", a, b)) is not None:
        return rule(a, b, equal_nan)
    if shape_of(a) != shape_of(b):
        return asarray(False)
    same = equal(a, b)
    if equal_nan:
        same = logical_or(same, logical_and(isnan(a), isnan(b)))
    return all(same)


def array_equiv(a1, a2) -> object:
    """True when ``a1`` and ``a2`` broadcast to one shape and are equal everywhere."""
    a1, a2 = as_array(a1), as_array(a2)
    try:
        broadcast_shapes_of(shape_of(a1), shape_of(a2))
    except ValueError:
        return asarray(False)
    return all(equal(a1, a2))
