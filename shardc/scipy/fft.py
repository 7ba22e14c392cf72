"""``shardc.scipy.fft`` (``jax.scipy.fft``): the discrete cosine transform of type 2 and its
inverse, over one axis (``dct``, ``idct``) or several (``dctn``, ``idctn``).

Each one-axis transform is one complex FFT of the same length (Makhoul's method): the DCT
reorders the points (the even-indexed ones, then the odd-indexed ones backwards), takes the
FFT and keeps the real part of each term turned by a quarter-sample phase; the inverse undoes
those steps in reverse order. The multi-axis transforms apply the one-axis ones axis by axis.

``n`` (``s`` for several axes) pads with zeros or truncates the input before transforming;
``norm`` is ``None`` or ``'backward'`` (scipy's unnormalized convention) or ``'ortho'``.
Integers and booleans are transformed as ``float32`` (64-bit integers as ``float64``), and a
complex input has its real and imaginary parts transformed separately.

>>> jax.scipy.fft.dct(jnp.array([1.0, 2.0, 3.0]))
Array([12.       , -3.4641016,  0.       ], dtype=float32)
>>> jax.scipy.fft.idctn(jax.scipy.fft.dctn(jnp.ones((2, 3)))).shape
(2, 3)
"""
from __future__ import annotations

import operator
from collections.abc import Sequence

import numpy as np

import shardc.lax as lax
import shardc.numpy as jnp
from ir.dtypes import complex_dtype, to_inexact
from shardc.numpy._arraylike import check_arraylike

__all__ = ["dct", "dctn", "idct", "idctn"]


# --- arguments --------------------------------------------------------------------------------

def _checked(name: str, x, type: int, norm):
    """``x`` as an array, once the transform type and the normalization are ones JAX has."""
    check_arraylike(name, x, 0)
    x = jnp.asarray(x)
    if type != 2:
        raise NotImplementedError("Only DCT type 2 is implemented.")
    if norm is not None and norm not in ("backward", "ortho"):
        raise ValueError(f"jax.scipy.fft.{name}: {norm=!r} is not implemented")
    return x


def _by_parts(transform, x, **kwargs):
    """``transform`` of the real and imaginary parts of a complex ``x``, rejoined."""
    return lax.complex(transform(jnp.real(x), **kwargs), transform(jnp.imag(x), **kwargs))


def _canonical_axis(axis, ndim: int) -> int:
    """``axis`` in ``[0, ndim)``; JAX's ValueError if out of bounds."""
    axis = operator.index(axis)
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of bounds for array of dimension {ndim}")
    return axis % ndim


def _axis_tuple(axes, ndim: int) -> tuple[int, ...]:
    """``axes`` (an int or a sequence of them) in ``[0, ndim)``, none repeated."""
    if not isinstance(axes, Sequence):
        return (_canonical_axis(axes, ndim),)
    axes = tuple(_canonical_axis(axis, ndim) for axis in axes)
    if len(set(axes)) != len(axes):
        raise ValueError(f"repeated axis: {axes}")
    return axes


def _shape_and_axes(x, s, axes):
    """``(s as a list or None, axes)``: without ``axes``, the last ``len(s)`` dimensions, or
    every dimension when ``s`` is not given either."""
    if s is not None:
        try:
            s = list(s)
        except TypeError:
            s = [operator.index(s)]
        if len(s) > x.ndim:
            raise ValueError(f"s must have at most x.ndim ({x.ndim}) elements, got {len(s)}")
    if axes is not None:
        return s, _axis_tuple(axes, x.ndim)
    if s is None:
        return s, tuple(range(x.ndim))
    return s, tuple(range(x.ndim - len(s), x.ndim))


def _resized(x, sizes: dict):
    """``x`` padded with zeros or truncated at the end to ``sizes[axis]`` along each axis
    ``sizes`` names."""
    if not sizes:
        return x
    config = [(0, sizes[axis] - x.shape[axis] if axis in sizes else 0, 0)
              for axis in range(x.ndim)]
    return lax.pad(x, jnp.zeros((), x.dtype), config)


# --- one axis ---------------------------------------------------------------------------------

def _along(values: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    """A vector of per-index constants shaped to broadcast along ``axis`` of an ``ndim``-d
    array."""
    return values.reshape([-1 if a == axis else 1 for a in range(ndim)])


def _even_then_odd(x, axis: int):
    """The DCT's reordering along ``axis``: points 0, 2, 4, ... then the odd-indexed ones
    from the last down."""
    evens = lax.slice_in_dim(x, 0, None, 2, axis)
    odds = lax.slice_in_dim(x, 1, None, 2, axis)
    return lax.concatenate([evens, lax.rev(odds, (axis,))], axis)


def _spread(x, axis: int, low: int, size: int):
    """``x`` along ``axis`` spread to every other point of ``size`` points from ``low``,
    zeros between."""
    count = x.shape[axis]
    high = size - low - count - max(count - 1, 0)
    config = [(low, high, 1) if a == axis else (0, 0, 0) for a in range(x.ndim)]
    return lax.pad(x, jnp.zeros((), x.dtype), config)


def _interleaved(x, axis: int):
    """The inverse of ``_even_then_odd``: the first half (rounded up) back to the even
    points, the rest reversed to the odd ones."""
    size = x.shape[axis]
    half = (size + 1) // 2
    evens = lax.slice_in_dim(x, 0, half, 1, axis)
    odds = lax.rev(lax.slice_in_dim(x, half, size, 1, axis), (axis,))
    return _spread(evens, axis, 0, size) + _spread(odds, axis, 1, size)


def _dct_along(x, axis: int, norm):
    """The DCT-II of a real ``x`` along ``axis`` (already sized)."""
    size = x.shape[axis]
    dtype = complex_dtype(to_inexact(x.dtype))
    reordered = _even_then_odd(x, axis)
    spectrum = jnp.fft.fft(reordered, axis=axis)
    k = np.arange(size)
    turn = 2 * np.exp(-0.5j * np.pi * k / size)
    out = jnp.real(spectrum * _along(turn.astype(dtype), axis, x.ndim))
    if norm != "ortho":
        return out
    scale = 1 / np.sqrt(np.where(k == 0, 4.0, 2.0) * size)
    return out * _along(scale.astype(out.dtype), axis, x.ndim)


def _idct_along(x, axis: int, norm):
    """The inverse of ``_dct_along`` for a real ``x`` along ``axis`` (already sized)."""
    size = x.shape[axis]
    dtype = complex_dtype(to_inexact(x.dtype))
    k = np.arange(size)
    if norm == "ortho":
        weight = np.sqrt(np.where(k == 0, 1.0, 2.0) * size)
    else:
        weight = np.where(k == 0, 0.5, 1.0)
    turn = weight * np.exp(0.5j * np.pi * k / size)
    turned = x.astype(dtype) * _along(turn.astype(dtype), axis, x.ndim)
    return _interleaved(jnp.real(jnp.fft.ifft(turned, axis=axis)), axis)


# --- public transforms ------------------------------------------------------------------------

def dct(x, type: int = 2, n: int | None = None, axis: int = -1, norm: str | None = None):
    """The discrete cosine transform of type 2 of ``x`` along ``axis`` (scipy.fft.dct's):
    ``y[k] = 2 * sum(x[j] * cos(pi * k * (2j + 1) / (2N)))``, times ``1/sqrt(4N)`` for
    ``k = 0`` and ``1/sqrt(2N)`` otherwise with ``norm='ortho'``. ``n`` pads ``x`` with zeros
    or truncates it to ``n`` points first.

    >>> jax.scipy.fft.dct(jnp.array([1.0, 2.0, 3.0]), n=2)
    Array([ 6.       , -1.4142135], dtype=float32)
    """
    x = _checked("dct", x, type, norm)
    if jnp.iscomplexobj(x):
        return _by_parts(dct, x, n=n, axis=axis, norm=norm)
    axis = _canonical_axis(axis, x.ndim)
    x = _resized(x, {} if n is None else {axis: n})
    return _dct_along(x, axis, norm)


def idct(x, type: int = 2, n: int | None = None, axis: int = -1, norm: str | None = None):
    """The inverse of ``dct`` along ``axis`` (scipy.fft.idct's, a DCT of type 3 scaled by
    ``1/(2N)``, or orthonormal with ``norm='ortho'``). ``n`` pads ``x`` with zeros or
    truncates it to ``n`` points first.

    >>> jax.scipy.fft.idct(jax.scipy.fft.dct(jnp.array([1.0, 2.0, 3.0])))
    Array([1., 2., 3.], dtype=float32)
    """
    x = _checked("idct", x, type, norm)
    if jnp.iscomplexobj(x):
        return _by_parts(idct, x, n=n, axis=axis, norm=norm)
    axis = _canonical_axis(axis, x.ndim)
    x = _resized(x, {} if n is None else {axis: n})
    return _idct_along(x, axis, norm)


def _transform_axes(name: str, along, x, type: int, s, axes, norm):
    """``along`` applied axis by axis over ``axes``, after sizing ``x`` to ``s``."""
    x = _checked(name, x, type, norm)
    if jnp.iscomplexobj(x):
        return lax.complex(_transform_axes(name, along, jnp.real(x), type, s, axes, norm),
                           _transform_axes(name, along, jnp.imag(x), type, s, axes, norm))
    s, axes = _shape_and_axes(x, s, axes)
    x = _resized(x, {} if s is None else dict(zip(axes, s)))
    for axis in axes:
        x = along(x, axis, norm)
    return x


def dctn(x, type: int = 2, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
         norm: str | None = None):
    """The DCT of type 2 of ``x`` over each of ``axes`` in turn (scipy.fft.dctn's). ``s``
    sizes those axes first (padding with zeros or truncating); without ``axes``, the last
    ``len(s)`` axes are transformed, or all of them when ``s`` is not given. No axes: ``x``
    as it is.

    >>> jax.scipy.fft.dctn(jnp.ones((2, 2)))
    Array([[16.,  0.],
           [ 0.,  0.]], dtype=float32)
    """
    return _transform_axes("dctn", _dct_along, x, type, s, axes, norm)


def idctn(x, type: int = 2, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
          norm: str | None = None):
    """The inverse of ``dctn``: ``idct`` over each of ``axes`` in turn (scipy.fft.idctn's),
    with ``s`` and ``axes`` as in ``dctn``.

    >>> jax.scipy.fft.idctn(jnp.array([[16.0, 0.0], [0.0, 0.0]]))
    Array([[1., 1.],
           [1., 1.]], dtype=float32)
    """
    return _transform_axes("idctn", _idct_along, x, type, s, axes, norm)
