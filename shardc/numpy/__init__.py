"""``shardc.numpy``: the jax.numpy subset, as thin wrappers that bind primitives.

Broadcasting follows numpy; type promotion follows JAX with x64 off (float32 and int32
defaults, Python scalars weakly typed, so ``x * 2`` keeps ``x``'s dtype).

One module per family of functions; each lists in ``__all__`` what it adds here:

    _core             conversion to arrays, promotion, broadcasting, filled arrays, reshape
    _scalars          dtype names (``jnp.float32(3)`` is a 0-d array), abstract types, constants
    _arithmetic       + - * / // % **, comparisons, logic, the elementwise ``where``
    _ufuncs           the other elementwise functions (trigonometry, logs, rounding, bits, ...),
                      ``jnp.ufunc`` and the functions JAX makes ufuncs (add, maximum, ...)
    _bits             packbits, unpackbits
    _reductions       sum, max, mean, var, cumsum, nan-ignoring forms, allclose
    _statistics       average, cov, quantiles, medians, histograms
    _creation         arange, linspace, logspace, eye
    _manipulation     transposes, joining and splitting, tiling, padding, flips, shapes
    _diagonals        diagonal, diag, tril/triu and their index arrays
    _indexing         ``x[...]``, ``x.at[...]``, take
    _index_routines   take_along_axis, put, indices, meshgrid, choose, select
    _index_tricks     mgrid, ogrid, r_, c_, s_
    _sorting          sort, argsort, searchsorted, nonzero, ``where`` (one argument too)
    _sets             unique, isin, union1d, intersect1d, ...
    _products         dot, matmul, tensordot, outer, trace, kron, cross
    _einsum           einsum
    _calculus         diff, gradient, trapezoid, interp, convolve
    _polynomials      polyval, polyfit, vander, ...
    _windows          bartlett, hamming, kaiser, i0, ...
    _functional       vectorize, apply_along_axis
    _io               save, load, array_repr, frombuffer, ...
    _methods          the methods and operators of arrays and traced values
    _array_api        the Python array API's entry points (``x.__array_namespace__()``)
    fft               ``jnp.fft``
    linalg            ``jnp.linalg``
"""
from shardc.numpy._arithmetic import (abs, absolute, arctan2, ceil, clip, cos, divide, equal, exp,
                                      expm1, floor, floor_divide, greater, greater_equal, isfinite,
                                      isinf, isnan, less, less_equal, log, log1p, logical_and_,
                                      logical_not, mod, not_equal, power, reciprocal, remainder,
                                      sign, sin, sqrt, square, tan, tanh, true_divide)
from shardc.numpy._bits import packbits, unpackbits
from shardc.numpy._calculus import (convolve, correlate, diff, ediff1d, gradient, interp, trapezoid,
                                    unwrap)
from shardc.numpy._core import (array, asarray, astype, broadcast_arrays, broadcast_to, concatenate,
                                empty, empty_like, expand_dims, full, full_like, ones, ones_like,
                                ravel, reshape, stack, zeros, zeros_like)
from shardc.numpy._creation import arange, eye, geomspace, identity, linspace, logspace
from shardc.numpy._diagonals import (diag, diag_indices, diag_indices_from, diagflat, diagonal,
                                     fill_diagonal, mask_indices, tri, tril, tril_indices,
                                     tril_indices_from, triu, triu_indices, triu_indices_from)
from shardc.numpy._einsum import einsum, einsum_path
from shardc.numpy._functional import apply_along_axis, apply_over_axes, vectorize
from shardc.numpy._index_routines import (choose, fromfunction, indices, ix_, meshgrid, piecewise,
                                          place, put, put_along_axis, ravel_multi_index, select,
                                          take_along_axis, unravel_index)
from shardc.numpy._index_tricks import c_, index_exp, mgrid, ogrid, r_, s_
from shardc.numpy._indexing import take
from shardc.numpy._io import (array_repr, array_str, from_dlpack, frombuffer, fromfile, fromiter,
                              fromstring, get_printoptions, load, printoptions, save, savez,
                              set_printoptions)
from shardc.numpy._manipulation import (append, array_split, atleast_1d, atleast_2d, atleast_3d,
                                        block, broadcast_shapes, column_stack, concat, copy, delete,
                                        dsplit, dstack, flip, fliplr, flipud, hsplit, hstack,
                                        insert, matrix_transpose, moveaxis, ndim, pad, permute_dims,
                                        repeat, resize, roll, rollaxis, rot90, shape, size, split,
                                        squeeze, swapaxes, tile, transpose, unstack, vsplit, vstack)
from shardc.numpy._polynomials import (poly, polyadd, polyder, polydiv, polyfit, polyint, polymul,
                                       polysub, polyval, roots, vander)
from shardc.numpy._products import (cross, dot, inner, kron, matmul, matvec, outer, tensordot,
                                    trace, vdot, vecdot, vecmat)
from shardc.numpy._reductions import (all, allclose, amax, amin, any, argmax, argmin, array_equal,
                                      array_equiv, count_nonzero, cumprod, cumsum, cumulative_prod,
                                      cumulative_sum, isclose, max, mean, min, nanargmax, nanargmin,
                                      nancumprod, nancumsum, nanmax, nanmean, nanmin, nanprod,
                                      nanstd, nansum, nanvar, prod, std, sum, var)
from shardc.numpy._scalars import (ComplexWarning, bfloat16, bool_, can_cast, character, complex128,
                                   complex64, complexfloating, dtype, e, euler_gamma, finfo,
                                   flexible, float16, float32, float4_e2m1fn, float64,
                                   float6_e2m3fn, float6_e3m2fn, float8_e3m4, float8_e4m3,
                                   float8_e4m3b11fnuz, float8_e4m3fn, float8_e4m3fnuz, float8_e5m2,
                                   float8_e5m2fnuz, float8_e8m0fnu, floating, generic, iinfo,
                                   inexact, inf, int16, int2, int32, int4, int64, int8, integer,
                                   isdtype, isscalar, issubdtype, iterable, nan, ndarray, newaxis,
                                   number, object_, pi, promote_types, result_type, signedinteger,
                                   uint16, uint2, uint32, uint4, uint64, uint8, unsignedinteger)
from shardc.numpy._sets import (intersect1d, isin, setdiff1d, setxor1d, union1d, unique, unique_all,
                                unique_counts, unique_inverse, unique_values)
from shardc.numpy._sorting import (argpartition, argsort, argwhere, compress, digitize, extract,
                                   flatnonzero, lexsort, nonzero, partition, searchsorted, sort,
                                   sort_complex, trim_zeros, where)
from shardc.numpy._statistics import (average, bincount, corrcoef, cov, histogram, histogram2d,
                                      histogram_bin_edges, histogramdd, median, nanmedian,
                                      nanpercentile, nanquantile, percentile, ptp, quantile)
from shardc.numpy._ufuncs import (acos, acosh, add, angle, arccos, arccosh, arcsin, arcsinh,
                                  arctan, arctanh, around, asin, asinh, atan, atan2, atanh,
                                  bitwise_and, bitwise_count, bitwise_invert, bitwise_left_shift,
                                  bitwise_not, bitwise_or, bitwise_right_shift, bitwise_xor, cbrt,
                                  conj, conjugate, copysign, cosh, deg2rad, degrees, divmod, exp2,
                                  fabs, float_power, fmax, fmin, fmod, frexp, frompyfunc, gcd,
                                  heaviside, hypot, imag, invert, iscomplex, iscomplexobj,
                                  isneginf, isposinf, isreal, isrealobj, lcm, ldexp, left_shift,
                                  log10, log2, logaddexp, logaddexp2, logical_and, logical_or,
                                  logical_xor, maximum, minimum, modf, multiply, nan_to_num,
                                  negative, nextafter, positive, pow, rad2deg, radians, real,
                                  right_shift, rint, round, signbit, sinc, sinh, spacing, subtract,
                                  trunc, ufunc)
from shardc.numpy._windows import bartlett, blackman, hamming, hanning, i0, kaiser
from shardc.numpy._array_api import __array_api_version__, __array_namespace_info__
from shardc.numpy._methods import install_methods as _install_methods
from shardc.numpy import fft, linalg

_install_methods()

__all__ = [
    "ComplexWarning", "abs", "absolute", "acos", "acosh", "add", "all", "allclose", "amax", "amin",
    "angle", "any", "append", "apply_along_axis", "apply_over_axes", "arange", "arccos", "arccosh",
    "arcsin", "arcsinh", "arctan", "arctan2", "arctanh", "argmax", "argmin", "argpartition",
    "argsort", "argwhere", "around", "array", "array_equal", "array_equiv", "array_repr",
    "array_split", "array_str", "asarray", "asin", "asinh", "astype", "atan", "atan2", "atanh",
    "atleast_1d", "atleast_2d", "atleast_3d", "average", "bartlett", "bfloat16", "bincount",
    "bitwise_and", "bitwise_count", "bitwise_invert", "bitwise_left_shift", "bitwise_not",
    "bitwise_or", "bitwise_right_shift", "bitwise_xor", "blackman", "block", "bool_",
    "broadcast_arrays", "broadcast_shapes", "broadcast_to", "c_", "can_cast", "cbrt", "ceil",
    "character", "choose", "clip", "column_stack", "complex128", "complex64", "complexfloating",
    "compress", "concat", "concatenate", "conj", "conjugate", "convolve", "copy", "copysign",
    "corrcoef", "correlate", "cos", "cosh", "count_nonzero", "cov", "cross", "cumprod", "cumsum",
    "cumulative_prod", "cumulative_sum", "deg2rad", "degrees", "delete", "diag", "diag_indices",
    "diag_indices_from", "diagflat", "diagonal", "diff", "digitize", "divide", "divmod", "dot",
    "dsplit", "dstack", "dtype", "e", "ediff1d", "einsum", "einsum_path", "empty", "empty_like",
    "equal", "euler_gamma", "exp", "exp2", "expand_dims", "expm1", "extract", "eye", "fabs", "fft",
    "fill_diagonal", "finfo", "flatnonzero", "flexible", "flip", "fliplr", "flipud", "float16",
    "float32", "float4_e2m1fn", "float64", "float6_e2m3fn", "float6_e3m2fn", "float8_e3m4",
    "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
    "float8_e5m2fnuz", "float8_e8m0fnu", "float_power", "floating", "floor", "floor_divide", "fmax",
    "fmin", "fmod", "frexp", "from_dlpack", "frombuffer", "fromfile", "fromfunction", "fromiter",
    "frompyfunc", "fromstring", "full", "full_like", "gcd", "generic", "geomspace",
    "get_printoptions", "gradient", "greater", "greater_equal", "hamming", "hanning", "heaviside",
    "histogram", "histogram2d", "histogram_bin_edges", "histogramdd", "hsplit", "hstack", "hypot",
    "i0", "identity", "iinfo", "imag", "index_exp", "indices", "inexact", "inf", "inner", "insert",
    "int16", "int2", "int32", "int4", "int64", "int8", "integer", "interp", "intersect1d", "invert",
    "isclose", "iscomplex", "iscomplexobj", "isdtype", "isfinite", "isin", "isinf", "isnan",
    "isneginf", "isposinf", "isreal", "isrealobj", "isscalar", "issubdtype", "iterable", "ix_",
    "kaiser", "kron", "lcm", "ldexp", "left_shift", "less", "less_equal", "lexsort", "linalg",
    "linspace", "load", "log", "log10", "log1p", "log2", "logaddexp", "logaddexp2", "logical_and",
    "logical_and_", "logical_not", "logical_or", "logical_xor", "logspace", "mask_indices",
    "matmul", "matrix_transpose", "matvec", "max", "maximum", "mean", "median", "meshgrid", "mgrid",
    "min", "minimum", "mod", "modf", "moveaxis", "multiply", "nan", "nan_to_num", "nanargmax",
    "nanargmin", "nancumprod", "nancumsum", "nanmax", "nanmean", "nanmedian", "nanmin",
    "nanpercentile", "nanprod", "nanquantile", "nanstd", "nansum", "nanvar", "ndarray", "ndim",
    "negative", "newaxis", "nextafter", "nonzero", "not_equal", "number", "object_", "ogrid",
    "ones", "ones_like", "outer", "packbits", "pad", "partition", "percentile", "permute_dims",
    "pi", "piecewise", "place", "poly", "polyadd", "polyder", "polydiv", "polyfit", "polyint",
    "polymul", "polysub", "polyval", "positive", "pow", "power", "printoptions", "prod",
    "promote_types", "ptp", "put", "put_along_axis", "quantile", "r_", "rad2deg", "radians",
    "ravel", "ravel_multi_index", "real", "reciprocal", "remainder", "repeat", "reshape", "resize",
    "result_type", "right_shift", "rint", "roll", "rollaxis", "roots", "rot90", "round", "s_", "save",
    "savez", "searchsorted", "select", "set_printoptions", "setdiff1d", "setxor1d", "shape", "sign",
    "signbit", "signedinteger", "sin", "sinc", "sinh", "size", "sort", "sort_complex", "spacing",
    "split", "sqrt", "square", "squeeze", "stack", "std", "subtract", "sum", "swapaxes", "take",
    "take_along_axis", "tan", "tanh", "tensordot", "tile", "trace", "transpose", "trapezoid", "tri",
    "tril", "tril_indices", "tril_indices_from", "trim_zeros", "triu", "triu_indices",
    "triu_indices_from", "true_divide", "trunc", "ufunc", "uint16", "uint2", "uint32", "uint4",
    "uint64", "uint8", "union1d", "unique", "unique_all", "unique_counts", "unique_inverse",
    "unique_values", "unpackbits", "unravel_index", "unsignedinteger", "unstack", "unwrap",
    "vander", "var", "vdot", "vecdot", "vecmat", "vectorize", "vsplit", "vstack", "where", "zeros",
    "zeros_like",
]

# numpy's other names of these types, as jax.numpy has them (after __all__: ``bool`` here is
# the dtype, so nothing below may use the builtin)
single, double, csingle, cdouble, complex_ = float32, float64, complex64, complex128, complex128
float_, int_, uint = float64, int64, uint64
bool = bool_  # noqa: A001
__all__ += ["bool", "cdouble", "complex_", "csingle", "double", "float_", "int_", "single", "uint"]

# lists and tuples where an array is taken are JAX's TypeError
from shardc.numpy import _arraylike  # noqa: E402
_arraylike.install(globals())
del _arraylike


# the functions JAX jits, as such for the transfer guards
from shardc._compiled import NUMPY as _COMPILED, mark_compiled as _mark_compiled  # noqa: E402
_mark_compiled(globals(), _COMPILED)
