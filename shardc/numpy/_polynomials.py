"""Polynomials as arrays of coefficients, highest power first (``polyval``, ``polyadd``,
``polymul``, ``polydiv``, ``polyder``, ``polyint``, ``poly``, ``polyfit``), composed from the
other functions."""
from __future__ import annotations

import numpy as np

from compiler.tracing import Tracer
from ir import dtypes as _dt
from shardc.numpy._arithmetic import (add, divide, equal, less, multiply, negative, sqrt, subtract,
                                      where)
from shardc.numpy._calculus import convolve
from shardc.numpy._creation import eye
from shardc.numpy._core import (as_array, as_inexact, asarray, broadcast_to, concatenate, convert,
                                dtype_of, ndim_of, ones, promote, reshape, shape_of, stack, zeros,
                                zeros_like)
from shardc.numpy._manipulation import flip, pad, transpose
from shardc.numpy._products import matmul, outer
from shardc.numpy._reductions import cumprod, sum
from shardc.numpy.linalg import eigvals, inv, lstsq

__all__ = [
    "vander", "polyval", "polyadd", "polysub", "polymul", "polyder", "polyint", "polydiv", "poly",
    "polyfit", "roots",
]


def vander(x, N=None, increasing=False):
    """The Vandermonde matrix of the 1-D ``x``: columns ``x ** (N - 1)`` down to ``x ** 0``."""
    x = as_array(x)
    if ndim_of(x) != 1:
        raise ValueError("x must be a one-dimensional array")
    n = shape_of(x)[0]
    N = n if N is None else int(N)
    if N < 0:
        raise ValueError("N must be nonnegative")
    if N == 0:
        return zeros((n, 0), dtype_of(x))
    columns = concatenate([ones((n, 1), dtype_of(x)),
                               broadcast_to(x[:, None], (n, N - 1))], axis=1)
    powers = cumprod(columns, axis=1, dtype=dtype_of(x))
    return powers if increasing else flip(powers, 1)


def _coefficients(p, name):
    p = as_array(p)
    if len(shape_of(p)) != 1:
        raise ValueError(f"{name}: input must be a 1-D array of coefficients")
    return p


def polyval(p, x, *, unroll=16):
    """The polynomial with coefficients ``p`` evaluated at ``x`` (Horner's scheme). Along
    ``p``'s first axis are the coefficients; its other axes broadcast with ``x`` (numpy's
    and JAX's), so each column of a 2-D ``p`` is a polynomial of its own."""
    p = as_array(p)
    if len(shape_of(p)) < 1:
        raise ValueError("polyval: input must be an array of coefficients of rank 1 or more")
    p, x = promote(p, as_array(x))
    result = zeros_like(x)
    for k in range(shape_of(p)[0]):
        result = add(multiply(result, x), p[k])
    return result


def _aligned(a1, a2):
    a1, a2 = promote(as_array(a1), as_array(a2))
    n = max(shape_of(a1)[0], shape_of(a2)[0])
    padded = lambda a: pad(a, (n - shape_of(a)[0], 0))
    return padded(a1), padded(a2)


def polyadd(a1, a2):
    """The sum of two polynomials."""
    a1, a2 = _aligned(_coefficients(a1, "polyadd"), _coefficients(a2, "polyadd"))
    return add(a1, a2)


def polysub(a1, a2):
    """The difference of two polynomials."""
    a1, a2 = _aligned(_coefficients(a1, "polysub"), _coefficients(a2, "polysub"))
    return subtract(a1, a2)


def polymul(a1, a2, *, trim_leading_zeros=False):
    """The product of two polynomials, in their promoted inexact dtype (JAX's);
    ``trim_leading_zeros`` drops each one's leading zero coefficients first (numpy's result,
    which needs concrete coefficients)."""
    from shardc.numpy._sorting import trim_zeros
    a1, a2 = _coefficients(a1, "polymul"), _coefficients(a2, "polymul")
    a1, a2 = promote(as_inexact(a1), as_inexact(a2))
    if trim_leading_zeros and (shape_of(a1)[0] > 1 or shape_of(a2)[0] > 1):
        a1, a2 = trim_zeros(a1, trim="f"), trim_zeros(a2, trim="f")
    if shape_of(a1)[0] == 0:
        a1 = zeros((1,), dtype_of(a2))
    if shape_of(a2)[0] == 0:
        a2 = zeros((1,), dtype_of(a1))
    return convolve(a1, a2)


def polyder(p, m=1):
    """The ``m``-th derivative of a polynomial, in an inexact dtype (JAX's: integer
    coefficients give float32, where numpy keeps ints)."""
    p = as_inexact(_coefficients(p, "polyder"))
    if m < 0:
        raise ValueError("Order of derivative must be positive")
    for _ in range(m):
        n = shape_of(p)[0]
        if n <= 1:
            return p[:0]
        powers = asarray(np.arange(n - 1, 0, -1).astype(dtype_of(p)))
        p = multiply(p[:-1], powers)
    return p


def polyint(p, m=1, k=None):
    """The ``m``-th antiderivative, with integration constants ``k`` (default 0)."""
    p = as_inexact(_coefficients(p, "polyint"))
    if m < 0:
        raise ValueError("Order of integral must be positive (see polyder)")
    constants = np.zeros(m) if k is None else np.broadcast_to(np.asarray(k, np.float64), (m,))
    for step in range(m):
        n = shape_of(p)[0]
        powers = asarray(np.arange(n, 0, -1).astype(dtype_of(p)))
        p = concatenate([divide(p, powers),
                             reshape(convert(constants[step], dtype_of(p)), (1,))])
    return p


def polydiv(u, v, *, trim_leading_zeros=False):
    """Quotient and remainder of polynomial division (the remainder keeps ``u``'s length)."""
    u, v = promote(as_inexact(_coefficients(u, "polydiv")), as_inexact(_coefficients(v, "polydiv")))
    m, n = shape_of(u)[0], shape_of(v)[0]
    scale = divide(1, v[0])
    quotient = []
    remainder = u
    for k in range(max(m - n + 1, 0)):
        d = multiply(scale, remainder[k])
        quotient.append(d)
        update = pad(multiply(d, v), (k, m - k - n))
        remainder = subtract(remainder, update)
    q = stack(quotient) if quotient else zeros((1,), dtype_of(u))
    return q, remainder


def poly(seq_of_zeros):
    """Coefficients of the monic polynomial with the given roots (1-D), or whose roots are a
    square matrix's eigenvalues (its characteristic polynomial, complex as JAX's)."""
    roots = as_array(seq_of_zeros)
    shape = shape_of(roots)
    if len(shape) == 2 and shape[0] == shape[1] and shape[0] != 0:
            roots = eigvals(as_inexact(roots))
    elif len(shape) != 1:
        raise ValueError("input must be 1d or non-empty square 2d array.")
    roots = as_inexact(roots)
    coefficients = ones((1,), dtype_of(roots))
    for k in range(shape_of(roots)[0]):
        factor = stack([ones((), dtype_of(roots)), negative(roots[k])])
        coefficients = convolve(coefficients, factor)
    return coefficients


def roots(p, *, strip_zeros=True):
    """The roots of the polynomial with coefficients ``p`` (highest power first): the
    eigenvalues of its companion matrix, complex. Leading zeros are stripped, which needs
    concrete coefficients (``strip_zeros=False`` under a trace: they make roots at infinity
    NaN instead, as JAX's)."""
    coefficients = as_inexact(as_array(p))
    if coefficients.ndim == 0:
        coefficients = reshape(coefficients, (1,))
    if coefficients.ndim != 1:
        raise ValueError("Input must be a rank-1 array.")
    complex_dtype = _dt.complex_dtype(dtype_of(coefficients))
    n = shape_of(coefficients)[0]
    if strip_zeros:
        if isinstance(coefficients, Tracer):
            raise ValueError("roots: strip_zeros=True needs concrete coefficients (the number "
                             "of leading zeros decides the result's shape); pass "
                             "strip_zeros=False under a trace")
        host = np.asarray(coefficients)
        leading = int(np.argmin(host == 0)) if not np.all(host == 0) else n
        coefficients = coefficients[leading:]
        n = n - leading
    if n < 2:
        return zeros((0,), complex_dtype)
    companion = eye(n - 1, k=-1, dtype=dtype_of(coefficients))
    first = negative(divide(coefficients[1:], coefficients[0]))
    companion = companion.at[0, :].set(first)
    return eigvals(companion)


# --- least squares for polyfit ---------------------------------------------------------------

def _householder_least_squares(a, b):
    """The least-squares solution of ``a @ c = b`` for a tall ``a`` of full column rank, by
    Householder QR (stable where the normal equations would square the conditioning)."""
    m, n = shape_of(a)
    for j in range(n):
        column = a[j:, j]
        norm = sqrt(sum(column * column))
        sign = where(less(column[0], 0), -1.0, 1.0).astype(dtype_of(a))
        v = column.at[0].add(sign * norm)
        v_norm = sqrt(sum(v * v))
        v = where(equal(v_norm, 0), zeros_like(v), v / where(
            equal(v_norm, 0), 1.0, v_norm))
        a = a.at[j:, :].add(-2 * outer(v, v @ a[j:, :]))
        b = b.at[j:].add(-2 * outer(v, v @ b[j:]))
    solution = [None] * n
    for j in range(n - 1, -1, -1):
        rest = b[j]
        for k in range(j + 1, n):
            rest = rest - a[j, k] * solution[k]
        solution[j] = rest / a[j, j]
    return stack(solution)


def polyfit(x, y, deg, rcond=None, full=False, w=None, cov=False):
    """Coefficients (highest power first) of the degree-``deg`` polynomial closest to the
    points ``(x, y)`` in least squares (``y`` may hold several columns; ``w`` weights each
    point). The columns of the Vandermonde matrix are scaled to unit norm first, as numpy
    does. ``full=True`` also returns the least-squares residuals, the rank, the singular
    values and ``rcond`` (as JAX's, from ``linalg.lstsq``); ``cov=True`` (or ``'unscaled'``)
    also returns the coefficients' covariance matrix (scaled by the residual variance unless
    ``'unscaled'``), one per column of ``y``."""
    deg = int(deg)
    if deg < 0:
        raise ValueError("expected deg >= 0")
    x, y = as_inexact(x), as_inexact(y)
    x, y = promote(x, y)
    if len(shape_of(x)) != 1 or shape_of(x)[0] == 0:
        raise TypeError("expected a non-empty 1-D x")
    if len(shape_of(y)) not in (1, 2) or shape_of(y)[0] != shape_of(x)[0]:
        raise TypeError("expected y of one or two dimensions, as long as x")
    if shape_of(x)[0] < deg + 1:
        raise ValueError(f"polyfit of degree {deg} needs at least {deg + 1} points")
    lhs = vander(x, deg + 1)
    rhs = y if len(shape_of(y)) == 2 else y[:, None]
    if w is not None:
        w = as_inexact(w)
        lhs, rhs = lhs * w[:, None], rhs * w[:, None]
    scale = sqrt(sum(lhs * lhs, axis=0))
    scale = where(equal(scale, 0), 1.0, scale)
    if full or cov:
        return _polyfit_with_statistics(x, y, lhs / scale, rhs, scale, deg + 1, rcond, full,
                                        cov)
    coefficients = _householder_least_squares(lhs / scale, rhs) / scale[:, None]
    return coefficients if len(shape_of(y)) == 2 else coefficients[:, 0]


def _polyfit_with_statistics(x, y, lhs, rhs, scale, order, rcond, full, cov):
    """``polyfit``'s ``full`` and ``cov`` results (JAX's): the scaled least-squares problem
    solved by ``linalg.lstsq``, whose residuals, rank and singular values ``full`` returns;
    the covariance is ``inv(lhs^T lhs)`` unscaled, times each column's residual variance."""
    if rcond is None:
        rcond = shape_of(x)[0] * float(np.finfo(dtype_of(x)).eps)
    rcond = float(rcond)
    coefficients, resids, rank, singular = lstsq(lhs, rhs, rcond)
    coefficients = coefficients / scale[:, None]
    if len(shape_of(y)) == 1:
        coefficients = coefficients[:, 0]
    if full:
        return coefficients, resids, rank, singular, asarray(np.asarray(rcond, dtype_of(x)))
    base = inv(matmul(transpose(lhs), lhs)) / outer(scale, scale)
    if cov == "unscaled":
        factor = asarray(np.ones((1,), dtype_of(resids)))
    else:
        if shape_of(x)[0] <= order:
            raise ValueError("the number of data points must exceed order to scale the "
                             "covariance matrix")
        factor = resids / (shape_of(x)[0] - order)
    if len(shape_of(y)) == 1:
        return coefficients, base * factor[0]
    return coefficients, base[:, :, None] * factor[None, None, :]
