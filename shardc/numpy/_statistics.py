"""Statistics: weighted averages, peak-to-peak, covariance and correlation, quantiles,
percentiles and medians (over sorted values), histograms and bin counts."""
from __future__ import annotations

import numpy as np

from compiler.tracing import bind
from ir import dtypes as _dt
from ir import primitives as p
from ir.sharding import ShardingTypeError
from ir.sharding_rules import partitions
from shardc.dtypes import result_type
from shardc.numpy._arithmetic import (abs, add, ceil, clip, divide, equal, floor, greater_equal,
                                      isnan, less, less_equal, logical_and, logical_not,
                                      logical_or, multiply, sqrt, subtract, where)
from shardc.numpy._calculus import diff
from shardc.numpy._core import (as_array, astype, broadcast_to, canonical_axis, concatenate,
                                convert, dtype_of, expand_dims, full, full_like, is_array, ones,
                                ravel, reshape, shape_of, stack, zeros)
from shardc.numpy._creation import linspace
from shardc.numpy._diagonals import diagonal
from shardc.numpy._index_routines import take_along_axis
from shardc.numpy._manipulation import atleast_2d, squeeze, transpose
from shardc.numpy._products import matmul
from shardc.numpy._reductions import (amax, any, cumsum, mean, min, no_out, reduce_axes,
                                      sum)
from shardc.numpy._sorting import argsort, concrete_size, searchsorted, sort
from shardc.numpy._ufuncs import conj, imag, real
from shardc.sharding import auto_axes, resolve_sharding

__all__ = [
    "average", "ptp", "cov", "corrcoef", "bincount", "histogram_bin_edges", "histogramdd",
    "histogram", "histogram2d", "quantile", "nanquantile", "percentile", "nanpercentile", "median",
    "nanmedian",
]


def average(a, axis=None, weights=None, returned=False, keepdims=False):
    """Mean of ``a`` along ``axis`` weighted by ``weights`` (``a``'s shape, or the shape of
    ``a`` along the axes ``axis`` names, in that order); ``returned`` also gives the sum of
    the weights."""
    a = as_array(a)
    if weights is None:
        result = mean(a, axis, keepdims=keepdims)
        if not returned:
            return result
        count = np.prod([shape_of(a)[d] for d in reduce_axes(a, axis)], dtype=np.int64)
        return result, full(shape_of(result), count, dtype_of(result))
    weights = as_array(weights)
    if not _dt.is_inexact(result_type(a, weights)):
        a = astype(a, _dt.to_inexact(result_type(a, weights)))
    if shape_of(weights) != shape_of(a):
        # weights over the axes named, in the order named (as JAX's)
        if axis is None:
            raise ValueError("Axis must be specified when shapes of a and weights differ.")
        axes = tuple(canonical_axis(d, len(shape_of(a)))
                     for d in (axis if isinstance(axis, (tuple, list)) else (axis,)))
        if len(set(axes)) != len(axes):
            raise ValueError(f"repeated axis: {tuple(axis)}")
        if shape_of(weights) != tuple(shape_of(a)[d] for d in axes):
            raise ValueError("Shape of weights must be consistent with shape of a along "
                             "specified axis.")
        weights = transpose(weights, tuple(np.argsort(axes)))
        shape = [size if d in axes else 1 for d, size in enumerate(shape_of(a))]
        weights = broadcast_to(reshape(weights, shape), shape_of(a))
    total = sum(multiply(a, weights), axis, keepdims=keepdims)
    scale = sum(astype(weights, dtype_of(total)), axis, keepdims=keepdims)
    result = divide(total, scale)
    return (result, broadcast_to(scale, shape_of(result))) if returned else result


@no_out
def ptp(a, axis=None, keepdims=False):
    """Peak to peak: maximum minus minimum along ``axis``."""
    return subtract(amax(a, axis, keepdims=keepdims), min(a, axis, keepdims=keepdims))


def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None,
        dtype=None):
    """Covariance matrix of the variables in the rows (``rowvar``) or columns of ``m``, with
    optional frequency (``fweights``, integers) and reliability (``aweights``) weights per
    observation, as JAX's: no variables give a (0, 0) matrix, no observations NaNs."""
    m = as_array(m)
    if len(shape_of(m)) > 2:
        raise ValueError("m has more than 2 dimensions")
    if dtype is not None and not _dt.is_inexact(np.dtype(dtype)):
        raise ValueError(f"cov: dtype must be a subclass of float or complex; got "
                         f"dtype={np.dtype(dtype)!r}")
    promoted = result_type(m, y) if y is not None else dtype_of(m)
    inexact = _dt.to_inexact(promoted)
    x = atleast_2d(astype(m, inexact))
    if not rowvar and len(shape_of(m)) != 1:
        x = transpose(x)
    if shape_of(x)[0] == 0:
        return full((0, 0), 0, inexact)
    if y is not None:
        y = as_array(y)
        if len(shape_of(y)) > 2:
            raise ValueError("y has more than 2 dimensions")
        y = atleast_2d(astype(y, inexact))
        if not rowvar and shape_of(y)[0] != 1:
            y = transpose(y)
        x = concatenate([x, y], 0)
    rows, observations = shape_of(x)
    if observations == 0:
        return full(() if rows == 1 else (rows, rows), np.nan, dtype_of(x))
    ddof = (0 if bias else 1) if ddof is None else ddof
    weights = None
    if fweights is not None:
        fweights = as_array(fweights)
        _check_weights(fweights, "fweights", observations)
        if not _dt.is_int(dtype_of(fweights)):
            raise TypeError("fweights must be integer.")
        weights = abs(fweights)
    if aweights is not None:
        aweights = abs(as_array(aweights))
        _check_weights(aweights, "aweights", observations)
        weights = aweights if weights is None else multiply(weights, aweights)
    if dtype is not None:
        x = astype(x, dtype)
    if weights is None:
        centered = subtract(x, mean(x, axis=1, keepdims=True))
        product = matmul(centered, transpose(conj(centered)))
        return squeeze(divide(product, observations - ddof))
    weights = astype(weights, dtype_of(x))
    total = sum(weights)
    weighted_mean = divide(sum(multiply(x, weights), axis=1, keepdims=True), total)
    if ddof == 0:
        factor = total
    elif aweights is None:
        factor = subtract(total, ddof)
    else:
        factor = subtract(total, divide(
            multiply(ddof, sum(multiply(weights, astype(aweights, dtype_of(x))))), total))
    centered = subtract(x, weighted_mean)
    product = matmul(multiply(centered, weights), transpose(conj(centered)))
    return squeeze(divide(product, factor))


def _check_weights(weights, name: str, observations: int) -> None:
    if len(shape_of(weights)) > 1:
        raise RuntimeError(f"cannot handle multidimensional {name}")
    if shape_of(weights)[0] != observations:
        raise RuntimeError(f"incompatible numbers of samples and {name}")


def corrcoef(x, y=None, rowvar=True, dtype=None):
    """Pearson correlation coefficients (clipped to [-1, 1]), computed in ``dtype`` (a float
    or complex one) when it is given."""
    if dtype is not None and not _dt.is_inexact(np.dtype(dtype)):
        raise ValueError(f"corrcoef: dtype must be a subclass of float or complex; got "
                         f"dtype={dtype!r}")
    c = cov(x, y, rowvar, dtype=dtype)
    if not shape_of(c):
        return divide(c, c)
    d = sqrt(diagonal(c))
    c = divide(divide(c, d[:, None]), d[None, :])
    if _dt.kind(dtype_of(c)) == _dt.COMPLEX:         # each part clipped (JAX's)
        return bind(p.complex_p, clip(real(c), -1, 1), clip(imag(c), -1, 1))
    return clip(c, -1, 1)


# --- counting --------------------------------------------------------------------------------

def bincount(x, weights=None, minlength=0, *, length=None, out_sharding=None):
    """Occurrences (or summed ``weights``) of each non-negative integer in ``x``.

    ``length=`` fixes the result's length (values beyond it are dropped) so the call traces;
    without it ``x`` must be concrete. Negative values count as 0, as in JAX.
    ``out_sharding``: the result's layout, replicated (or unreduced) over every mesh axis
    (JAX's ShardingTypeError otherwise).
    """
    x = as_array(x)
    if _dt.is_bool(dtype_of(x)):
        x = astype(x, _dt.int_)                  # booleans count as 0 and 1 (as JAX's)
    if not _dt.is_int(dtype_of(x)):
        raise TypeError(f"bincount: x must have an integer type, got {dtype_of(x)}")
    if len(shape_of(x)) != 1:
        raise ValueError(f"bincount only accepts 1-dimensional input, got shape {shape_of(x)}")
    if length is None:
        # an empty x counts nothing: minlength entries (JAX's max(minlength, x.size and ...))
        top = concrete_size(amax(x), "bincount") + 1 if shape_of(x)[0] else 0
        length = max(top, int(minlength))
    x = clip(x, 0, None)
    if weights is None:
        weights = ones(shape_of(x), _dt.int_)
    weights = broadcast_to(as_array(weights), shape_of(x))
    out = zeros((int(length),), dtype_of(weights))
    if out_sharding is not None:
        return out.at[x].add(weights, mode="drop",
                             out_sharding=_whole_layout(out_sharding, "jnp.bincount"))
    return bind(p.scatter_p, out, convert(x, _dt.int_), weights, axis=0, mode="add")


def _whole_layout(out_sharding, name):
    """``out_sharding`` as a NamedSharding that splits no dimension (JAX's ShardingTypeError
    otherwise)."""
    sharding = resolve_sharding(out_sharding, name)
    if set(partitions(sharding.spec)) - {None}:
        raise ShardingTypeError(f"out_sharding passed to `{name}` can only be fully replicated"
                                " or fully unreduced along all mesh axes")
    return sharding


def histogram_bin_edges(a, bins=10, range=None, weights=None):
    """The edges of the bins ``histogram`` uses: ``bins + 1`` evenly spaced from the data's
    (or ``range``'s) minimum to maximum, or ``bins`` itself when it is an array."""
    a = ravel(as_array(a))
    dtype = _dt.to_inexact(dtype_of(a))
    if not isinstance(bins, (int, np.integer)):
        bins = as_array(bins)
        return astype(bins, result_type(dtype, bins) if _dt.is_inexact(
            dtype_of(bins)) else dtype)
    if range is None:
        lo, hi = min(a), amax(a)
    else:
        lo, hi = range
    lo, hi = convert(lo, dtype), convert(hi, dtype)
    same = equal(lo, hi)                         # one value: a unit-wide range around it
    lo, hi = where(same, subtract(lo, 0.5), lo), where(same, add(hi, 0.5), hi)
    return astype(linspace(lo, hi, int(bins) + 1), dtype)


def _bin_index(a, edges):
    """Each value's bin (0 .. len(edges) - 2; the last bin includes its right edge), or -1
    outside."""
    nbins = shape_of(edges)[0] - 1
    index = subtract(searchsorted(edges, a, side="right"), 1)
    index = where(equal(a, edges[-1]), nbins - 1, index)
    inside = logical_and(greater_equal(a, edges[0]), less_equal(a, edges[-1]))
    return where(inside, index, -1)


def histogramdd(sample, bins=10, range=None, weights=None, density=None):
    """The histogram of ``sample`` (``(N, D)``): counts per bin (int32 without weights or
    density, as JAX's; else float32) and the edges per dimension."""
    sample = as_array(sample)
    if len(shape_of(sample)) != 2:
        raise ValueError(f"histogramdd: sample must be 2-D (N, D), got shape {shape_of(sample)}")
    n, dims = shape_of(sample)
    bins = bins if isinstance(bins, (list, tuple)) else [bins] * dims
    ranges = range if range is not None else [None] * dims
    edges = [histogram_bin_edges(sample[:, d], bins[d], ranges[d]) for d in builtins_range(dims)]
    flat = zeros((n,), _dt.int_)
    inside = ones((n,), bool)
    shape = tuple(shape_of(e)[0] - 1 for e in edges)
    for d, e in enumerate(edges):
        index = _bin_index(convert(sample[:, d], dtype_of(e)), e)
        inside = logical_and(inside, greater_equal(index, 0))
        flat = add(multiply(flat, shape[d]), clip(index, 0, None))
    size = int(np.prod(shape, dtype=np.int64))
    # weights in the inexact dtype they and the sample promote to (JAX's)
    weights = ones((n,), _dt.int_) if weights is None else \
        astype(weights, _dt.to_inexact(result_type(sample, weights)))
    weights = where(inside, weights, zeros((), dtype_of(weights)))
    counts = bind(p.scatter_p, zeros((size,), dtype_of(weights)), flat, weights, axis=0,
                  mode="add")
    counts = reshape(counts, shape)
    if density:
        counts = astype(counts, _dt.to_inexact(dtype_of(counts)))
        widths = [diff(e) for e in edges]
        volume = widths[0]
        for w in widths[1:]:
            volume = multiply(expand_dims(volume, -1), w)
        counts = divide(counts, multiply(sum(counts), volume))
    return counts, edges


builtins_range = range


def histogram(a, bins=10, range=None, weights=None, density=None):
    """Counts per bin of the flattened ``a``, and the bin edges. The counts are in the
    inexact dtype ``a`` (and ``weights``) promote to, even without weights (JAX's: float32
    for integers, float16 for float16)."""
    a = ravel(as_array(a))
    edges = histogram_bin_edges(a, bins, range)
    weights = ones(shape_of(a), _dt.to_inexact(dtype_of(a))) if weights is None \
        else ravel(as_array(weights))
    counts, _ = histogramdd(reshape(a, (-1, 1)), [edges], None, weights, density)
    return counts, edges


def histogram2d(x, y, bins=10, range=None, weights=None, density=None):
    """The 2-D histogram of points ``(x, y)``: counts and the edges along x and along y."""
    sample = stack([as_array(x), as_array(y)], axis=1)
    if isinstance(bins, (int, np.integer)) or (is_array(bins) and len(shape_of(bins)) == 1):
        bins = [bins, bins]
    counts, (edges_x, edges_y) = histogramdd(sample, bins, range, weights, density)
    return counts, edges_x, edges_y


# --- quantiles -------------------------------------------------------------------------------

_QUANTILE_METHODS = ("linear", "lower", "higher", "midpoint", "nearest", "inverted_cdf")


def _quantile(a, q, axis, method, keepdims, ignore_nan, name, weights=None):
    if method not in _QUANTILE_METHODS:
        raise ValueError(f"{name}: method={method!r} is not supported; use one of "
                         f"{_QUANTILE_METHODS}")
    a = as_array(a)
    if weights is not None:
        weights = as_array(weights)
        if np.dtype(dtype_of(weights)).kind == "c":
            raise ValueError("Weights cannot be complex types.")
        if method != "inverted_cdf":
            raise NotImplementedError(f"{method} doesn't support weights. Only method "
                                      "'inverted_cdf' supports weights.")
        weights = _weights_like(a, weights, axis)
        common = result_type(a, weights)
        common = _dt.to_inexact(common)
        a, weights = astype(a, common), astype(weights, common)
    if not _dt.is_inexact(dtype_of(a)):
        a = astype(a, _dt.to_inexact(dtype_of(a)))
    dtype = dtype_of(a)
    q = convert(q, dtype) if not is_array(q) else astype(q, dtype)
    if len(shape_of(q)) > 1:
        raise ValueError(f"q must be have rank <= 1, got shape {shape_of(q)}")
    original_shape = shape_of(a)
    if axis is None:
        def arrange(x):
            return ravel(x)
    else:
        axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
        axes = tuple(sorted(canonical_axis(x, len(original_shape)) for x in axes))
        kept = [d for d in builtins_range(len(original_shape)) if d not in axes]

        def arrange(x):     # the reduced axes flattened into one, last
            x = transpose(x, kept + list(axes))
            return reshape(x, tuple(original_shape[d] for d in kept) + (-1,))
    a = arrange(a)
    nan = isnan(a)
    a = where(nan, full_like(a, np.nan), a)       # one NaN, sorted last
    n = shape_of(a)[-1]
    count = sum(logical_not(nan), axis=-1, keepdims=True) if ignore_nan \
        else full(shape_of(a)[:-1] + (1,), n, _dt.int_)
    if method == "inverted_cdf":
        weights = ones(shape_of(a), dtype) if weights is None else arrange(weights)
        order = argsort(a, -1)
        ordered = take_along_axis(a, order, -1)
        result = _inverted_cdf(ordered, take_along_axis(weights, order, -1), q, count)
    else:
        result = _interpolate(sort(a, -1), q, count, method, dtype)
    if ignore_nan:
        empty = equal(count, 0)[..., 0]
        result = where(empty, np.nan, result)
    else:
        result = where(any(nan, axis=-1), np.nan, result)
    result = astype(result, dtype)
    if keepdims:
        shape = tuple(1 if (axis is None or d in _normalized(axis, len(original_shape))) else s
                      for d, s in enumerate(original_shape))
        result = reshape(result, shape_of(q) + shape)
    return result


def _weights_like(a, weights, axis):
    """Quantile weights of ``a``'s shape, or of its shape along the axes ``axis`` names (in
    ``a``'s order), broadcast to ``a``'s, as JAX's."""
    if shape_of(weights) == shape_of(a):
        return weights
    if axis is None:
        raise ValueError("Weights shape must match 'a' shape when axis is None.")
    axes = tuple(canonical_axis(d, len(shape_of(a)))
                 for d in (axis if isinstance(axis, (tuple, list)) else (axis,)))
    along = tuple(shape_of(a)[d] for d in axes)
    if shape_of(weights) != along:
        raise ValueError(f"Weights shape {shape_of(weights)} must match reduction axes {along}")
    weights = transpose(weights, tuple(np.argsort(axes)))      # to a's order of those axes
    shape = [size if d in axes else 1 for d, size in enumerate(shape_of(a))]
    return broadcast_to(reshape(weights, shape), shape_of(a))


def _inverted_cdf(ordered, weights, q, count):
    """numpy's inverted_cdf with weights, as JAX's: the first sorted value whose cumulative
    weight reaches q of the total; NaN values weigh nothing, and a negative or NaN weight
    makes its slice's quantiles NaN."""
    zero = np.zeros((), dtype_of(weights))[()]
    bad_weight = logical_or(less(weights, zero), isnan(weights))
    cumulative = cumsum(where(logical_or(bad_weight, isnan(ordered)), zero, weights), axis=-1)
    q_shape = shape_of(q)
    target = multiply(reshape(q, q_shape + (1,) * len(shape_of(ordered))),
                      cumulative[..., -1:])
    below = sum(astype(less(cumulative, target), _dt.int_), axis=-1, keepdims=True)
    index = clip(below, 0, subtract(count, 1))
    index = broadcast_to(astype(index, _dt.int_), q_shape + shape_of(ordered)[:-1] + (1,))
    rows = broadcast_to(ordered, q_shape + shape_of(ordered))
    return where(any(bad_weight, axis=-1), np.nan, take_along_axis(rows, index, -1)[..., 0])


def _normalized(axis, ndim):
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    return {canonical_axis(x, ndim) for x in axes}


def _interpolate(ordered, q, count, method, dtype):
    """Values at quantile(s) ``q`` of rows sorted along the last axis with ``count`` values
    each; the result has ``q``'s dimensions first."""
    q_shape = shape_of(q)
    qs = reshape(q, q_shape + (1,) * len(shape_of(ordered)))
    last = astype(subtract(count, 1), dtype)
    position = multiply(qs, last)
    low = floor(position)
    high = ceil(position)
    if method == "lower":
        position = low
    elif method == "higher":
        position = high
    elif method == "nearest":       # halfway goes to the lower value, as JAX's
        position = where(less_equal(subtract(position, low), 0.5), low, high)
    index_shape = q_shape + shape_of(ordered)[:-1] + (1,)
    rows = broadcast_to(ordered, q_shape + shape_of(ordered))

    def at(index):
        index = broadcast_to(astype(clip(index, 0, None), _dt.int_), index_shape)
        return take_along_axis(rows, index, -1)[..., 0]
    if method == "midpoint":
        return multiply(add(at(low), at(high)), 0.5)
    if method != "linear":
        return at(position)
    # JAX's formula, low * (1 - w) + high * w: equal infinities interpolate to themselves.
    weight = subtract(position, low)[..., 0]
    below, above = at(low), at(high)
    return add(multiply(below, subtract(1, weight)), multiply(above, weight))


def quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
             keepdims=False, *, weights=None, interpolation=None):
    """The ``q``-th quantile(s) of ``a`` along ``axis`` (NaN where a slice holds a NaN);
    ``weights`` (``method='inverted_cdf'`` only) weigh each value."""
    return _quantile(a, q, axis, interpolation or method, keepdims, False, "quantile",
                     weights)


def nanquantile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
                keepdims=False, *, weights=None, interpolation=None):
    """``quantile`` ignoring NaNs (NaN only for an all-NaN slice)."""
    return _quantile(a, q, axis, interpolation or method, keepdims, True, "nanquantile",
                     weights)


def percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
               keepdims=False, *, weights=None, interpolation=None, out_sharding=None):
    """The ``q``-th percentile(s) (0 to 100) of ``a`` along ``axis``; ``out_sharding``: the
    result's layout (as JAX's, computed with the mesh's Explicit axes out of the types)."""
    def at_fractions(a, fractions, weights):
        return quantile(a, fractions, axis, method=interpolation or method, keepdims=keepdims,
                        weights=weights)

    if out_sharding is not None:
        sharding = resolve_sharding(out_sharding, "jnp.percentile")
        return auto_axes(at_fractions, out_sharding=sharding,
                         axes=sharding.mesh.explicit_axes)(a, divide(q, 100), weights)
    return at_fractions(a, divide(q, 100), weights)


def nanpercentile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
                  keepdims=False, *, weights=None, interpolation=None):
    """``percentile`` ignoring NaNs."""
    return nanquantile(a, divide(q, 100), axis, method=interpolation or method,
                       keepdims=keepdims, weights=weights)


def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """The median of ``a`` along ``axis`` (the mean of the middle two for an even count)."""
    return quantile(a, 0.5, axis, keepdims=keepdims, method="midpoint")     # as JAX's


def nanmedian(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """The median ignoring NaNs."""
    return nanquantile(a, 0.5, axis, keepdims=keepdims, method="midpoint")  # as JAX's
