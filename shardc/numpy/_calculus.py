"""``shardc.numpy``'s calculus and signal helpers, polynomials and window functions, composed
from the other functions (so they trace, batch and differentiate like them)."""
from __future__ import annotations

import numpy as np

from compiler.tracing import Tracer
from ir import dtypes as _dt
from shardc.numpy._core import _axis, _convert, _dtype_of, _is_array, _promote, _shape, asarray
import shardc.numpy as jnp

__all__ = [
    "diff", "ediff1d", "gradient", "trapezoid", "interp", "unwrap", "convolve", "correlate",
    "polyval", "polyadd", "polysub", "polymul", "polyder", "polyint", "polydiv", "poly",
    "polyfit",
    "bartlett", "blackman", "hamming", "hanning", "kaiser", "i0",
]


def _array(x):
    return asarray(x) if not _is_array(x) else x


def _inexact(x):
    x = _array(x)
    return x if _dt.is_inexact(_dtype_of(x)) else jnp.astype(x, _dt.float_)


def _slice(x, axis, lo, hi):
    index = [slice(None)] * len(_shape(x))
    index[axis] = slice(lo, hi)
    return x[tuple(index)]


# --- differences and integrals ---------------------------------------------------------------

def diff(a, n=1, axis=-1, prepend=None, append=None):
    """The ``n``-th discrete difference along ``axis`` (booleans: where neighbours differ)."""
    a = _array(a)
    if not _shape(a):
        raise ValueError("diff requires input that is at least one dimensional")
    axis = _axis(axis, len(_shape(a)))
    if n < 0:
        raise ValueError(f"order must be non-negative but got {n}")
    parts = []
    for extra in (prepend, append):
        if extra is None:
            parts.append(None)
            continue
        extra = _array(extra)
        if not _shape(extra):
            shape = list(_shape(a))
            shape[axis] = 1
            extra = jnp.broadcast_to(extra, tuple(shape))
        parts.append(extra)
    pieces = [x for x in (parts[0], a, parts[1]) if x is not None]
    a = jnp.concatenate(pieces, axis) if len(pieces) > 1 else a
    for _ in range(n):
        later, earlier = _slice(a, axis, 1, None), _slice(a, axis, None, -1)
        a = jnp.not_equal(later, earlier) if _dt.is_bool(_dtype_of(a)) \
            else jnp.subtract(later, earlier)
    return a


def ediff1d(ary, to_end=None, to_begin=None):
    """Differences between consecutive elements of the flattened ``ary``, with ``to_begin``
    and ``to_end`` added at the ends."""
    ary = jnp.ravel(_array(ary))
    result = diff(ary) if _shape(ary)[0] else ary
    pieces = [jnp.ravel(jnp.astype(_array(to_begin), _dtype_of(ary)))] if to_begin is not None \
        else []
    pieces.append(result)
    if to_end is not None:
        pieces.append(jnp.ravel(jnp.astype(_array(to_end), _dtype_of(ary))))
    return jnp.concatenate(pieces) if len(pieces) > 1 else result


def _gradient_along(f, axis, h):
    """Central differences inside, one-sided at the edges, with spacing ``h``: a scalar, or
    the 1-D coordinates along ``axis`` (numpy's second-order formula for uneven steps)."""
    n = _shape(f)[axis]
    if n < 2:
        raise ValueError("Shape of array too small to calculate a numerical gradient, at "
                         "least (edge_order + 1) elements are required.")
    if not (_is_array(h) and _shape(h)):
        first = jnp.divide(jnp.subtract(_slice(f, axis, 1, 2), _slice(f, axis, 0, 1)), h)
        last = jnp.divide(jnp.subtract(_slice(f, axis, n - 1, n), _slice(f, axis, n - 2, n - 1)),
                          h)
        middle = jnp.divide(jnp.subtract(_slice(f, axis, 2, None), _slice(f, axis, None, -2)),
                            jnp.multiply(2, h))
        return jnp.concatenate([first, middle, last], axis)
    x = _inexact(h)
    if len(_shape(x)) != 1 or _shape(x)[0] != n:
        raise ValueError("when 1d, distances must match the length of the corresponding "
                         "dimension")
    view = [1] * len(_shape(f))
    view[axis] = -1
    steps = jnp.reshape(diff(x), tuple(view))
    dx1, dx2 = _slice(steps, axis, None, -1), _slice(steps, axis, 1, None)
    a = jnp.divide(jnp.negative(dx2), jnp.multiply(dx1, jnp.add(dx1, dx2)))
    b = jnp.divide(jnp.subtract(dx2, dx1), jnp.multiply(dx1, dx2))
    c = jnp.divide(dx1, jnp.multiply(dx2, jnp.add(dx1, dx2)))
    middle = jnp.add(jnp.add(jnp.multiply(a, _slice(f, axis, None, -2)),
                             jnp.multiply(b, _slice(f, axis, 1, -1))),
                     jnp.multiply(c, _slice(f, axis, 2, None)))
    first = jnp.divide(jnp.subtract(_slice(f, axis, 1, 2), _slice(f, axis, 0, 1)),
                       _slice(steps, axis, 0, 1))
    last = jnp.divide(jnp.subtract(_slice(f, axis, n - 1, n), _slice(f, axis, n - 2, n - 1)),
                      _slice(steps, axis, n - 2, n - 1))
    return jnp.concatenate([first, middle, last], axis)


def gradient(f, *varargs, axis=None, edge_order=None):
    """Central differences inside, one-sided at the edges, along each axis; spacings are
    scalars or 1-D coordinates. One array for one axis, else a list."""
    if edge_order is not None and edge_order != 1:
        raise NotImplementedError("jnp.gradient: only edge_order=1 is supported")
    f = _inexact(f)
    ndim = len(_shape(f))
    axes = tuple(range(ndim)) if axis is None else tuple(
        _axis(a, ndim) for a in ((axis,) if isinstance(axis, int) else axis))
    if len(varargs) == 0:
        spacings = [1.0] * len(axes)
    elif len(varargs) == 1:
        spacings = list(varargs) * len(axes)
    elif len(varargs) == len(axes):
        spacings = list(varargs)
    else:
        raise TypeError("Invalid number of spacing arguments")
    spacings = [_array(h) if isinstance(h, (list, tuple, np.ndarray)) else h for h in spacings]
    out = [_gradient_along(f, a, h) for a, h in zip(axes, spacings)]
    return out[0] if len(out) == 1 else out


def trapezoid(y, x=None, dx=1.0, axis=-1):
    """The integral of ``y`` along ``axis`` by the trapezoidal rule (at ``x``, or spaced ``dx``)."""
    y = _inexact(y)
    axis = _axis(axis, len(_shape(y)))
    mids = jnp.multiply(jnp.add(_slice(y, axis, 1, None), _slice(y, axis, None, -1)), 0.5)
    if x is None:
        return jnp.multiply(jnp.sum(mids, axis=axis), dx)
    x = _array(x)
    if len(_shape(x)) == 1:
        shape = [1] * len(_shape(y))
        shape[axis] = _shape(x)[0]
        x = jnp.reshape(x, tuple(shape))
    widths = diff(x, axis=axis if len(_shape(x)) > 1 else axis)
    return jnp.sum(jnp.multiply(mids, widths), axis=axis)


def interp(x, xp, fp, left=None, right=None, period=None):
    """Piecewise-linear interpolation of the points ``(xp, fp)`` (``xp`` increasing) at ``x``;
    ``left``/``right`` (default the end values) outside."""
    x, xp, fp = _inexact(x), _inexact(xp), _inexact(fp)
    if len(_shape(xp)) != 1 or _shape(xp) != _shape(fp):
        raise ValueError("xp and fp must be one-dimensional arrays of equal size")
    x, xp, fp = _promote(x, xp, fp)
    if period is not None:
        # one period, sorted, with a point wrapped around at each end; left/right unused
        if not isinstance(period, Tracer) and float(period) == 0:
            raise ValueError("period must be a non-zero value")
        period = jnp.abs(_convert(period, _dtype_of(x)))
        x, xp = jnp.remainder(x, period), jnp.remainder(xp, period)
        order = jnp.argsort(xp)
        xp, fp = jnp.take(xp, order), jnp.take(fp, order)
        xp = jnp.concatenate([xp[-1:] - period, xp, xp[:1] + period])
        fp = jnp.concatenate([fp[-1:], fp, fp[:1]])
        left = right = None
    n = _shape(xp)[0]
    if n == 1:
        value = jnp.broadcast_to(fp[0], _shape(x))
    else:
        i = jnp.clip(jnp.searchsorted(xp, x, side="right"), 1, n - 1)
        x0, x1 = jnp.take(xp, i - 1), jnp.take(xp, i)
        f0, f1 = jnp.take(fp, i - 1), jnp.take(fp, i)
        width = jnp.subtract(x1, x0)
        slope = jnp.divide(jnp.subtract(f1, f0), jnp.where(jnp.equal(width, 0), 1, width))
        value = jnp.add(f0, jnp.multiply(slope, jnp.subtract(x, x0)))
        value = jnp.where(jnp.equal(x, xp[-1]), fp[-1], value)
    value = jnp.where(jnp.less(x, xp[0]), fp[0] if left is None else left, value)
    return jnp.where(jnp.greater(x, xp[-1]), fp[-1] if right is None else right, value)


def unwrap(p, discont=None, axis=-1, period=2 * np.pi):
    """``p`` with jumps larger than ``discont`` (default ``period / 2``) along ``axis`` replaced
    by their equivalent modulo ``period``."""
    p = _inexact(p)
    axis = _axis(axis, len(_shape(p)))
    dtype = _dtype_of(p)
    half = period / 2
    discont = half if discont is None else discont
    dd = diff(p, axis=axis)
    ddmod = jnp.subtract(jnp.remainder(jnp.add(dd, half), period), half)
    ddmod = jnp.where(jnp.logical_and(jnp.equal(ddmod, -half), jnp.greater(dd, 0)),
                      _convert(half, dtype), ddmod)
    correction = jnp.where(jnp.less(jnp.abs(dd), discont), _convert(0, dtype),
                           jnp.subtract(ddmod, dd))
    cumulative = jnp.cumsum(correction, axis=axis)
    return jnp.concatenate([_slice(p, axis, 0, 1),
                            jnp.add(_slice(p, axis, 1, None), cumulative)], axis)


# --- convolution -----------------------------------------------------------------------------

def _full_convolution(a, v):
    """``out[k] = sum_i a[i] v[k - i]``, as one matrix-vector product."""
    n, m = _shape(a)[0], _shape(v)[0]
    length = n + m - 1
    padded = jnp.concatenate([jnp.zeros((n - 1,), _dtype_of(v)), v,
                              jnp.zeros((n - 1,), _dtype_of(v))])
    index = np.arange(length)[:, None] - np.arange(n)[None, :] + (n - 1)
    windows = jnp.take(padded, jnp.asarray(index.astype(np.int32)))
    return jnp.matmul(windows, a)


def _convolution_mode(full, n, m, mode):
    if mode == "full":
        return full
    if mode == "same":
        start = (min(n, m) - 1) // 2
        return full[start:start + max(n, m)]
    if mode == "valid":
        return full[min(n, m) - 1:max(n, m)]
    raise ValueError(f"mode must be one of ['full', 'same', 'valid'], got {mode!r}")


def convolve(a, v, mode="full", *, precision=None, preferred_element_type=None):
    """The discrete linear convolution of the 1-D ``a`` and ``v``."""
    a, v = _promote(_array(a), _array(v))
    if len(_shape(a)) != 1 or len(_shape(v)) != 1:
        raise ValueError("convolve() only support 1-dimensional inputs.")
    n, m = _shape(a)[0], _shape(v)[0]
    if n == 0 or m == 0:
        raise ValueError("convolve: inputs cannot be empty")
    return _convolution_mode(_full_convolution(a, v), n, m, mode)


def correlate(a, v, mode="valid", *, precision=None, preferred_element_type=None):
    """The cross-correlation ``c[k] = sum_n a[n + k] v[n]`` of the 1-D ``a`` and ``v``."""
    a, v = _promote(_array(a), _array(v))
    if len(_shape(a)) != 1 or len(_shape(v)) != 1:
        raise ValueError("correlate() only support 1-dimensional inputs.")
    n, m = _shape(a)[0], _shape(v)[0]
    if n == 0 or m == 0:
        raise ValueError("correlate: inputs cannot be empty")
    if m > n:
        # numpy's convention for a longer v: the correlation of (v, a), reversed
        return jnp.flip(correlate(v, a, mode))
    full = _full_convolution(a, jnp.flip(v))
    return _convolution_mode(full, n, m, mode)


# --- polynomials (coefficients highest power first) -------------------------------------------

def _coefficients(p, name):
    p = _array(p)
    if len(_shape(p)) != 1:
        raise ValueError(f"{name}: input must be a 1-D array of coefficients")
    return p


def polyval(p, x, *, unroll=16):
    """The polynomial with coefficients ``p`` evaluated at ``x`` (Horner's scheme)."""
    p = _coefficients(p, "polyval")
    p, x = _promote(p, _array(x))
    result = jnp.zeros_like(x)
    for k in range(_shape(p)[0]):
        result = jnp.add(jnp.multiply(result, x), p[k])
    return result


def _aligned(a1, a2):
    a1, a2 = _promote(_array(a1), _array(a2))
    n = max(_shape(a1)[0], _shape(a2)[0])
    pad = lambda a: jnp.pad(a, (n - _shape(a)[0], 0))
    return pad(a1), pad(a2)


def polyadd(a1, a2):
    """The sum of two polynomials."""
    a1, a2 = _aligned(_coefficients(a1, "polyadd"), _coefficients(a2, "polyadd"))
    return jnp.add(a1, a2)


def polysub(a1, a2):
    """The difference of two polynomials."""
    a1, a2 = _aligned(_coefficients(a1, "polysub"), _coefficients(a2, "polysub"))
    return jnp.subtract(a1, a2)


def polymul(a1, a2, *, trim_leading_zeros=False):
    """The product of two polynomials."""
    a1, a2 = _coefficients(a1, "polymul"), _coefficients(a2, "polymul")
    return convolve(a1, a2)


def polyder(p, m=1):
    """The ``m``-th derivative of a polynomial."""
    p = _coefficients(p, "polyder")
    if m < 0:
        raise ValueError("Order of derivative must be positive")
    for _ in range(m):
        n = _shape(p)[0]
        if n <= 1:
            return p[:0]
        powers = jnp.asarray(np.arange(n - 1, 0, -1).astype(_dtype_of(p)))
        p = jnp.multiply(p[:-1], powers)
    return p


def polyint(p, m=1, k=None):
    """The ``m``-th antiderivative, with integration constants ``k`` (default 0)."""
    p = _inexact(_coefficients(p, "polyint"))
    if m < 0:
        raise ValueError("Order of integral must be positive (see polyder)")
    constants = np.zeros(m) if k is None else np.broadcast_to(np.asarray(k, np.float64), (m,))
    for step in range(m):
        n = _shape(p)[0]
        powers = jnp.asarray(np.arange(n, 0, -1).astype(_dtype_of(p)))
        p = jnp.concatenate([jnp.divide(p, powers),
                             jnp.reshape(_convert(constants[step], _dtype_of(p)), (1,))])
    return p


def polydiv(u, v, *, trim_leading_zeros=False):
    """Quotient and remainder of polynomial division (the remainder keeps ``u``'s length)."""
    u, v = _promote(_inexact(_coefficients(u, "polydiv")), _inexact(_coefficients(v, "polydiv")))
    m, n = _shape(u)[0], _shape(v)[0]
    scale = jnp.divide(1, v[0])
    quotient = []
    remainder = u
    for k in range(max(m - n + 1, 0)):
        d = jnp.multiply(scale, remainder[k])
        quotient.append(d)
        update = jnp.pad(jnp.multiply(d, v), (k, m - k - n))
        remainder = jnp.subtract(remainder, update)
    q = jnp.stack(quotient) if quotient else jnp.zeros((1,), _dtype_of(u))
    return q, remainder


def poly(seq_of_zeros):
    """Coefficients of the monic polynomial with the given roots (1-D)."""
    roots = _array(seq_of_zeros)
    if len(_shape(roots)) != 1:
        raise NotImplementedError("jnp.poly: only a 1-D sequence of roots is supported by "
                                  "shardc (a matrix needs its eigenvalues)")
    roots = _inexact(roots)
    coefficients = jnp.ones((1,), _dtype_of(roots))
    for k in range(_shape(roots)[0]):
        factor = jnp.stack([jnp.ones((), _dtype_of(roots)), jnp.negative(roots[k])])
        coefficients = convolve(coefficients, factor)
    return coefficients


# --- window functions and the Bessel function I0 ---------------------------------------------

def _window_ramp(M):
    return jnp.arange(1 - M, M, 2, dtype=_dt.float_)


def _short_window(M):
    if M < 1:
        return jnp.zeros((0,), _dt.float_)
    return jnp.ones((1,), _dt.float_)


def bartlett(M):
    """The triangular (Bartlett) window of ``M`` points."""
    M = int(M)
    if M <= 1:
        return _short_window(M)
    n = _window_ramp(M)
    return jnp.where(jnp.less_equal(n, 0), 1 + n / (M - 1), 1 - n / (M - 1))


def _cosine_window(M, terms):
    M = int(M)
    if M <= 1:
        return _short_window(M)
    n = _window_ramp(M)
    result = jnp.full((M,), terms[0], _dt.float_)
    for k, weight in enumerate(terms[1:], start=1):
        result = result + weight * jnp.cos(k * np.pi * n / (M - 1))
    return result


def blackman(M):
    """The Blackman window of ``M`` points."""
    return _cosine_window(M, (0.42, 0.5, 0.08))


def hamming(M):
    """The Hamming window of ``M`` points."""
    return _cosine_window(M, (0.54, 0.46))


def hanning(M):
    """The Hann window of ``M`` points."""
    return _cosine_window(M, (0.5, 0.5))


def kaiser(M, beta):
    """The Kaiser window of ``M`` points with shape ``beta``."""
    M = int(M)
    if M <= 1:
        return _short_window(M)
    n = jnp.arange(0, M, dtype=_dt.float_)
    alpha = (M - 1) / 2.0
    ratio = (n - alpha) / alpha
    return i0(beta * jnp.sqrt(1 - ratio * ratio)) / i0(_convert(beta, _dt.float_))


# Chebyshev coefficients of exp(-x) I0(x) on [0, 8] and of exp(-x) sqrt(x) I0(x) on (8, inf)
# (the Cephes library's, which numpy's i0 uses too).
_I0_SMALL = (
    -4.4153416464793395e-18, 3.3307945188222384e-17, -2.431279846547955e-16,
    1.715391285555133e-15, -1.1685332877993451e-14, 7.676185498604936e-14,
    -4.856446783111929e-13, 2.95505266312964e-12, -1.726826291441556e-11,
    9.675809035373237e-11, -5.189795601635263e-10, 2.6598237246823866e-09,
    -1.300025009986248e-08, 6.046995022541919e-08, -2.670793853940612e-07,
    1.1173875391201037e-06, -4.4167383584587505e-06, 1.6448448070728896e-05,
    -5.754195010082104e-05, 0.00018850288509584165, -0.0005763755745385824,
    0.0016394756169413357, -0.004324309995050576, 0.010546460394594998, -0.02373741480589947,
    0.04930528423967071, -0.09490109704804764, 0.17162090152220877, -0.3046826723431984,
    0.6767952744094761,
)
_I0_LARGE = (
    -7.233180487874754e-18, -4.830504485944182e-18, 4.46562142029676e-17,
    3.461222867697461e-17, -2.8276239805165836e-16, -3.425485619677219e-16,
    1.7725601330565263e-15, 3.8116806693526224e-15, -9.554846698828307e-15,
    -4.150569347287222e-14, 1.54008621752141e-14, 3.8527783827421426e-13,
    7.180124451383666e-13, -1.7941785315068062e-12, -1.3215811840447713e-11,
    -3.1499165279632416e-11, 1.1889147107846439e-11, 4.94060238822497e-10,
    3.3962320257083865e-09, 2.266668990498178e-08, 2.0489185894690638e-07,
    2.8913705208347567e-06, 6.889758346916825e-05, 0.0033691164782556943, 0.8044904110141088,
)


def _chebyshev(t, coefficients):
    """Clenshaw's recurrence for a Chebyshev series at ``t``."""
    b0 = jnp.full_like(t, coefficients[0])
    b1 = jnp.zeros_like(t)
    b2 = b1
    for c in coefficients[1:]:
        b2, b1 = b1, b0
        b0 = t * b1 - b2 + c
    return 0.5 * (b0 - b2)


def i0(x):
    """The modified Bessel function of the first kind, order 0 (float32 for integer ``x``)."""
    x = jnp.abs(_inexact(x))
    small = jnp.less_equal(x, 8.0)
    safe_large = jnp.where(small, jnp.full_like(x, 16.0), x)
    near = _chebyshev(x / 2.0 - 2.0, _I0_SMALL)
    far = _chebyshev(32.0 / safe_large - 2.0, _I0_LARGE) / jnp.sqrt(safe_large)
    return jnp.exp(x) * jnp.where(small, near, far)


# --- least squares for polyfit ---------------------------------------------------------------

def _householder_least_squares(a, b):
    """The least-squares solution of ``a @ c = b`` for a tall ``a`` of full column rank, by
    Householder QR (stable where the normal equations would square the conditioning)."""
    m, n = _shape(a)
    for j in range(n):
        column = a[j:, j]
        norm = jnp.sqrt(jnp.sum(column * column))
        sign = jnp.where(jnp.less(column[0], 0), -1.0, 1.0).astype(_dtype_of(a))
        v = column.at[0].add(sign * norm)
        v_norm = jnp.sqrt(jnp.sum(v * v))
        v = jnp.where(jnp.equal(v_norm, 0), jnp.zeros_like(v), v / jnp.where(
            jnp.equal(v_norm, 0), 1.0, v_norm))
        a = a.at[j:, :].add(-2 * jnp.outer(v, v @ a[j:, :]))
        b = b.at[j:].add(-2 * jnp.outer(v, v @ b[j:]))
    solution = [None] * n
    for j in range(n - 1, -1, -1):
        rest = b[j]
        for k in range(j + 1, n):
            rest = rest - a[j, k] * solution[k]
        solution[j] = rest / a[j, j]
    return jnp.stack(solution)


def polyfit(x, y, deg, rcond=None, full=False, w=None, cov=False):
    """Coefficients (highest power first) of the degree-``deg`` polynomial closest to the
    points ``(x, y)`` in least squares (``y`` may hold several columns; ``w`` weights each
    point). The columns of the Vandermonde matrix are scaled to unit norm first, as numpy
    does."""
    if full or cov:
        raise NotImplementedError("jnp.polyfit: full=True and cov=True need a singular value "
                                  "decomposition, which shardc does not have")
    deg = int(deg)
    if deg < 0:
        raise ValueError("expected deg >= 0")
    x, y = _inexact(x), _inexact(y)
    x, y = _promote(x, y)
    if len(_shape(x)) != 1 or _shape(x)[0] == 0:
        raise TypeError("expected a non-empty 1-D x")
    if len(_shape(y)) not in (1, 2) or _shape(y)[0] != _shape(x)[0]:
        raise TypeError("expected y of one or two dimensions, as long as x")
    if _shape(x)[0] < deg + 1:
        raise ValueError(f"polyfit of degree {deg} needs at least {deg + 1} points")
    from shardc.numpy._manipulation import vander
    lhs = vander(x, deg + 1)
    rhs = y if len(_shape(y)) == 2 else y[:, None]
    if w is not None:
        w = _inexact(w)
        lhs, rhs = lhs * w[:, None], rhs * w[:, None]
    scale = jnp.sqrt(jnp.sum(lhs * lhs, axis=0))
    scale = jnp.where(jnp.equal(scale, 0), 1.0, scale)
    coefficients = _householder_least_squares(lhs / scale, rhs) / scale[:, None]
    return coefficients if len(_shape(y)) == 2 else coefficients[:, 0]
