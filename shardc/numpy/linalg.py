"""``shardc.numpy.linalg``: norms, determinants, inverses, solves and the Cholesky and QR
decompositions, differentiable, on the last two dimensions (leading ones are a batch).

>>> x = jnp.linalg.solve(a, b)          # a @ x == b
"""
from __future__ import annotations

import numpy as np

from compiler.tracing import bind
from ir import primitives as p
from shardc.dtypes import result_type
from shardc.numpy._arithmetic import abs, exp, power, sqrt
from shardc.numpy._core import asarray, astype, broadcast_to, ravel, reshape
from shardc.numpy._creation import eye
from shardc.numpy._manipulation import broadcast_shapes, squeeze, swapaxes
from shardc.numpy._products import matmul, outer as numpy_outer, trace as numpy_trace
from shardc.numpy._reductions import max, min, sum

__all__ = [
    "norm", "vector_norm", "matrix_norm", "det", "slogdet", "inv", "solve", "cholesky", "qr",
    "eigh", "eigvalsh", "matrix_power", "matrix_transpose", "trace", "outer", "multi_dot",
]


def _float(x):
    x = asarray(x) if not hasattr(x, "dtype") else x
    return astype(x, result_type(x, 0.0))


def _square(name, a):
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"linalg.{name}: expected square matrices (shape [..., n, n]), got "
                         f"shape {a.shape}")


def cholesky(a, *, upper=False):
    """The lower factor ``L`` with ``a = L L^T`` (``upper=True``: ``U = L^T``). Only the
    symmetric part of ``a`` is read; a matrix that is not positive definite gives NaNs."""
    a = _float(a)
    _square("cholesky", a)
    lower = bind(p.cholesky_p, a)
    return swapaxes(lower, -1, -2) if upper else lower


def qr(a, mode="reduced"):
    """``q, r`` with ``a = q r``, ``q`` orthonormal columns, ``r`` upper triangular;
    ``mode`` ``'reduced'``, ``'complete'`` or ``'r'`` (only ``r``)."""
    if mode not in ("reduced", "complete", "r"):
        raise ValueError(f"linalg.qr: unsupported mode {mode!r}; use 'reduced', 'complete' or "
                         "'r'")
    a = _float(a)
    if a.ndim < 2:
        raise ValueError(f"linalg.qr: expected matrices (shape [..., m, n]), got {a.shape}")
    q, r = bind(p.qr_p, a, full_matrices=mode == "complete")
    return r if mode == "r" else (q, r)


def eigh(a, UPLO=None, symmetrize_input=True):
    """``(eigenvalues, eigenvectors)`` of symmetric matrices: values ascending, vectors as
    columns. The symmetric part ``(a + a^T)/2`` is read (``UPLO`` and ``symmetrize_input``
    are accepted for JAX's signature; only ``symmetrize_input=True`` is supported)."""
    if not symmetrize_input:
        raise NotImplementedError("linalg.eigh: symmetrize_input=False is not supported")
    if UPLO not in (None, "L", "U"):
        raise ValueError(f"linalg.eigh: UPLO must be 'L' or 'U', got {UPLO!r}")
    a = _float(a)
    _square("eigh", a)
    vectors, values = bind(p.eigh_p, a)
    return values, vectors


def eigvalsh(a, UPLO="L"):
    """The eigenvalues of symmetric matrices, ascending."""
    return eigh(a, UPLO)[0]


def solve(a, b):
    """``x`` with ``a @ x == b``: ``b`` is ``[..., n]`` (one vector per matrix) or
    ``[..., n, k]``, batch dimensions broadcast."""
    a, b = _float(a), _float(b)
    dtype = result_type(a, b)
    a, b = astype(a, dtype), astype(b, dtype)
    _square("solve", a)
    vector = b.ndim == 1 or (b.ndim == a.ndim - 1 and b.shape == a.shape[:-1])
    if vector:
        b = b[..., None]
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = broadcast_to(a, batch + a.shape[-2:])
    b = broadcast_to(b, batch + b.shape[-2:])
    if b.shape[-2] != a.shape[-1]:
        raise ValueError(f"linalg.solve: b's rows ({b.shape[-2]}) must match a's size "
                         f"({a.shape[-1]})")
    x = bind(p.solve_p, a, b)
    return x[..., 0] if vector else x


def inv(a):
    """The inverse of each square matrix (NaNs or infs for a singular one)."""
    a = _float(a)
    _square("inv", a)
    identities = broadcast_to(eye(a.shape[-1], dtype=a.dtype), a.shape)
    return bind(p.solve_p, a, identities)


def slogdet(a):
    """``(sign, log|det a|)`` per matrix, without overflow."""
    a = _float(a)
    _square("slogdet", a)
    sign, logabsdet = bind(p.slogdet_p, a)
    return sign, logabsdet


def det(a):
    """The determinant ``sign * exp(log|det|)``."""
    sign, logabsdet = slogdet(a)
    return sign * exp(logabsdet)


def matrix_power(a, n):
    """``a`` multiplied by itself ``n`` times (an int; negative: powers of the inverse)."""
    a = _float(a)
    _square("matrix_power", a)
    n = int(n)
    if n < 0:
        a, n = inv(a), -n
    result = broadcast_to(eye(a.shape[-1], dtype=a.dtype), a.shape)
    square = a
    while n:                                  # binary powering
        if n & 1:
            result = matmul(result, square)
        n >>= 1
        if n:
            square = matmul(square, square)
    return result


def matrix_transpose(x):
    return swapaxes(x, -1, -2)


def trace(x, offset=0, dtype=None):
    out = numpy_trace(x, offset=offset, axis1=-2, axis2=-1)
    return out if dtype is None else astype(out, dtype)


def outer(x1, x2):
    return numpy_outer(x1, x2)


def multi_dot(arrays):
    """The product of a chain of matrices (the first and last may be vectors), left to right."""
    arrays = list(arrays)
    if len(arrays) < 2:
        raise ValueError("linalg.multi_dot: expected at least two arrays")
    out = arrays[0]
    for array in arrays[1:]:
        out = matmul(out, array)
    return out


def vector_norm(x, axis=None, keepdims=False, ord=2):
    """The ``ord``-norm of vectors along ``axis`` (None: the flattened array): ``ord`` a
    number, ``inf`` or ``-inf`` (0 counts non-zeros)."""
    x = _float(x)
    if axis is None:
        out = vector_norm(ravel(x), 0, False, ord)
        return reshape(out, (1,) * x.ndim) if keepdims else out
    magnitude = abs(x)
    if ord == np.inf:
        return max(magnitude, axis=axis, keepdims=keepdims)
    if ord == -np.inf:
        return min(magnitude, axis=axis, keepdims=keepdims)
    if ord == 0:
        return sum(astype(x != 0, x.dtype), axis=axis, keepdims=keepdims)
    if ord == 1:
        return sum(magnitude, axis=axis, keepdims=keepdims)
    if ord == 2:
        return sqrt(sum(x * x, axis=axis, keepdims=keepdims))
    ord = float(ord)
    return power(sum(power(magnitude, ord), axis=axis, keepdims=keepdims), 1 / ord)


def matrix_norm(x, ord="fro", keepdims=False, axis=(-2, -1)):
    """``'fro'``, ``1``, ``-1``, ``inf`` or ``-inf`` norms of the matrices on ``axis`` (the
    SVD-based ``2``, ``-2`` and ``'nuc'`` are not available)."""
    x = _float(x)
    rows, cols = (a % x.ndim for a in axis)
    if rows == cols:
        raise ValueError(f"linalg.norm: a matrix norm needs two distinct axes, got {axis}")
    if ord in ("fro", None):
        out = sqrt(sum(x * x, axis=(rows, cols), keepdims=True))
    elif ord in (1, -1, np.inf, -np.inf):
        summed_axis, extreme_axis = (rows, cols) if ord in (1, -1) else (cols, rows)
        sums = sum(abs(x), axis=summed_axis, keepdims=True)
        pick = max if ord in (1, np.inf) else min
        out = pick(sums, axis=extreme_axis, keepdims=True)
    elif ord in (2, -2, "nuc"):
        raise NotImplementedError(f"linalg.norm: ord={ord!r} needs singular values; shardc has "
                                  "no SVD yet")
    else:
        raise ValueError(f"linalg.norm: invalid matrix norm ord={ord!r}")
    return out if keepdims else squeeze(out, (rows, cols))


def norm(x, ord=None, axis=None, keepdims=False):
    """A vector or matrix norm, as numpy's: with ``axis`` None, the 2-norm of the flattened
    array when ``ord`` is None, else a vector norm (rank 1) or matrix norm (rank 2); an int
    ``axis`` gives vector norms, a pair matrix norms.

    >>> jnp.linalg.norm(jnp.array([3.0, 4.0]))        # 5
    """
    x = _float(x)
    if axis is None:
        if ord is None:
            return vector_norm(x, None, keepdims, 2)
        if x.ndim == 1:
            return vector_norm(x, 0, keepdims, ord)
        if x.ndim == 2:
            return matrix_norm(x, ord, keepdims, (0, 1))
        raise ValueError(f"linalg.norm: with ord={ord!r} and axis=None the array must have "
                         f"rank 1 or 2, got rank {x.ndim}")
    if isinstance(axis, (tuple, list)):
        if len(axis) == 1:
            return vector_norm(x, axis[0], keepdims, 2 if ord is None else ord)
        if len(axis) == 2:
            return matrix_norm(x, "fro" if ord is None else ord, keepdims, tuple(axis))
        raise ValueError(f"linalg.norm: axis must be an int or a pair, got {axis}")
    return vector_norm(x, int(axis), keepdims, 2 if ord is None else ord)
