"""``shardc.scipy.signal`` (``jax.scipy.signal``): convolution, correlation and detrending.

``convolve`` and ``correlate`` of N-dimensional arrays compute directly, as one
``lax.conv_general_dilated`` (``method='fft'``: by ``fftconvolve``); ``convolve2d`` and
``correlate2d`` are their 2-D forms (zero fill at the boundary only, as JAX's). Modes are
scipy's: ``'full'``, ``'same'`` (centred as the first input) and ``'valid'``.

>>> jax.scipy.signal.convolve(jnp.ones((8, 8)), jnp.ones((3, 3)), mode="same").shape
(8, 8)
"""
from __future__ import annotations

import numpy as np

import shardc.lax as lax
import shardc.numpy as jnp
from ir.dtypes import to_inexact
from shardc.batching_api import vmap

__all__ = ["convolve", "correlate", "convolve2d", "correlate2d", "fftconvolve", "detrend"]

_MODES = ("full", "same", "valid")


def _inexact_pair(in1, in2):
    """Both operands in the inexact dtype they promote to (JAX's promote_dtypes_inexact)."""
    in1, in2 = jnp.asarray(in1), jnp.asarray(in2)
    dtype = to_inexact(jnp.result_type(in1, in2))
    return in1.astype(dtype), in2.astype(dtype)


def _ordered(in1, in2, message: str):
    """``(larger, smaller, whether they were swapped)``: one operand must be at least as
    large as the other in every dimension."""
    if all(s1 >= s2 for s1, s2 in zip(in1.shape, in2.shape)):
        return in1, in2, False
    if all(s1 <= s2 for s1, s2 in zip(in1.shape, in2.shape)):
        return in2, in1, True
    raise ValueError(message)


def _convolve_nd(in1, in2, mode: str, precision=None):
    """The N-dimensional convolution, the larger operand convolved with the smaller flipped,
    padded for ``mode`` ('same' centres on the first operand's shape)."""
    if mode not in _MODES:
        raise ValueError("mode must be one of ['full', 'same', 'valid']")
    in1, in2 = jnp.asarray(in1), jnp.asarray(in2)
    if in1.ndim != in2.ndim:
        raise ValueError("in1 and in2 must have the same number of dimensions")
    if in1.size == 0 or in2.size == 0:
        raise ValueError(f"zero-size arrays not supported in convolutions, got shapes "
                         f"{in1.shape} and {in2.shape}.")
    in1, in2 = _inexact_pair(in1, in2)
    second_shape = in2.shape        # 'same' pads by the second operand's, swapped or not
    large, small, _ = _ordered(in1, in2, "One input must be smaller than the other in every "
                                         "dimension.")
    window = small.shape
    if mode == "valid":
        pads = [(0, 0)] * len(window)
    elif mode == "same":
        pads = [(k - 1 - (o - 1) // 2, k - o + (o - 1) // 2)
                for k, o in zip(window, second_shape)]
    else:
        pads = [(k - 1, k - 1) for k in window]
    out = lax.conv_general_dilated(large[None, None], jnp.flip(small)[None, None],
                                   (1,) * len(window), pads, precision=precision)
    return out[0, 0]


def convolve(in1, in2, mode: str = "full", method: str = "auto", precision=None):
    """The N-dimensional convolution of ``in1`` and ``in2`` (scipy's): directly
    (``method='auto'`` or ``'direct'``) or by FFTs (``'fft'``)."""
    if method == "fft":
        return fftconvolve(in1, in2, mode=mode)
    if method not in ("direct", "auto"):
        raise ValueError(f"Got method={method!r}; expected 'auto', 'fft', or 'direct'.")
    return _convolve_nd(in1, in2, mode, precision)


def correlate(in1, in2, mode: str = "full", method: str = "auto", precision=None):
    """The cross-correlation of ``in1`` and ``in2``: ``convolve(in1, flip(conj(in2)))``."""
    in2 = jnp.asarray(in2)
    return convolve(in1, jnp.flip(in2.conj()), mode, precision=precision, method=method)


def _check_2d(name: str, in1, in2, boundary: str, fillvalue) -> None:
    if boundary != "fill" or fillvalue != 0:
        raise NotImplementedError(f"{name}() only supports boundary='fill', fillvalue=0")
    if np.ndim(in1) != 2 or np.ndim(in2) != 2:
        raise ValueError(f"{name}() only supports 2-dimensional inputs.")


def convolve2d(in1, in2, mode: str = "full", boundary: str = "fill", fillvalue=0,
               precision=None):
    """The 2-D convolution (``boundary='fill'`` with ``fillvalue=0`` only, as JAX's)."""
    _check_2d("convolve2d", in1, in2, boundary, fillvalue)
    return _convolve_nd(in1, in2, mode, precision)


def correlate2d(in1, in2, mode: str = "full", boundary: str = "fill", fillvalue=0,
                precision=None):
    """The 2-D cross-correlation (``boundary='fill'`` with ``fillvalue=0`` only), laid out
    as scipy's for every mode, the operands' order included."""
    _check_2d("correlate2d", in1, in2, boundary, fillvalue)
    in1, in2 = jnp.asarray(in1), jnp.asarray(in2)
    swap = all(s1 <= s2 for s1, s2 in zip(in1.shape, in2.shape))
    same_shape = in1.shape == in2.shape
    # correlating is convolving with one operand reversed; which one, and whether the result
    # is reversed back, as scipy's layout of each mode needs
    if mode != "same" and swap and (mode == "full" or not same_shape):
        result = _convolve_nd(jnp.flip(in2), in1.conj(), mode, precision)
        return result.conj() if mode == "full" else result
    return jnp.flip(_convolve_nd(jnp.flip(in1), in2.conj(), mode, precision))


def _fftconvolve_one(in1, in2, mode: str):
    full_shape = tuple(s1 + s2 - 1 for s1, s2 in zip(in1.shape, in2.shape))
    if mode == "valid":
        in1, in2, _ = _ordered(in1, in2, "For 'valid' mode, One input must be at least as "
                                         "large as the other in every dimension.")
    if all(s1 == 1 or s2 == 1 for s1, s2 in zip(in1.shape, in2.shape)):
        conv = in1 * in2                     # no dimension to convolve along
    else:
        complex_ = jnp.iscomplexobj(in1)
        fft = jnp.fft.fftn if complex_ else jnp.fft.rfftn
        ifft = jnp.fft.ifftn if complex_ else jnp.fft.irfftn
        conv = ifft(fft(in1, full_shape) * fft(in2, full_shape), full_shape)
    if mode == "full":
        out_shape = full_shape
    elif mode == "same":
        out_shape = in1.shape
    else:
        out_shape = tuple(s1 - s2 + 1 for s1, s2 in zip(in1.shape, in2.shape))
    starts = tuple((full - out) // 2 for full, out in zip(full_shape, out_shape))
    return lax.dynamic_slice(conv, starts, out_shape)


def fftconvolve(in1, in2, mode: str = "full", axes=None):
    """The convolution of ``in1`` and ``in2`` by FFTs (over ``axes``; the other dimensions,
    which must agree, are mapped over)."""
    in1, in2 = _inexact_pair(in1, in2)
    if in1.ndim != in2.ndim:
        raise ValueError("in1 and in2 should have the same dimensionality")
    if mode not in _MODES:
        raise ValueError("mode must be one of ['same', 'full', 'valid']")
    one = lambda a, b: _fftconvolve_one(a, b, mode)
    if axes is None:
        return one(in1, in2)
    axes = (axes,) if isinstance(axes, (int, np.integer)) else tuple(axes)
    axes = tuple(int(a) % in1.ndim for a in axes)
    mapped = sorted(set(range(in1.ndim)) - set(axes))
    if any(in1.shape[i] != in2.shape[i] for i in mapped):
        raise ValueError(f"mapped axes must have same shape; got in1.shape={in1.shape} "
                         f"in2.shape={in2.shape} axes={axes}")
    for axis in mapped:
        one = vmap(one, in_axes=axis, out_axes=axis)
    return one(in1, in2)


def detrend(data, axis: int = -1, type: str = "linear", bp=0, overwrite_data=None):
    """``data`` less its mean (``type='constant'``) or less its least-squares line on each
    piece between the breakpoints ``bp`` (``'linear'``), along ``axis``."""
    if overwrite_data is not None:
        raise NotImplementedError("overwrite_data argument not implemented.")
    if type not in ("constant", "linear"):
        raise ValueError("Trend type must be 'linear' or 'constant'.")
    x = jnp.asarray(data)
    x = x.astype(to_inexact(x.dtype))
    if type == "constant":
        return x - x.mean(axis, keepdims=True)
    n = x.shape[axis]
    breaks = np.sort(np.unique(np.r_[0, bp, n]))
    if breaks[0] < 0 or breaks[-1] > n:
        raise ValueError("Breakpoints must be non-negative and less than length of data along "
                         "given axis.")
    x = jnp.moveaxis(x, axis, 0)
    shape = x.shape
    x = x.reshape(n, -1)
    for lo, hi in zip(breaks[:-1], breaks[1:]):
        count = hi - lo
        basis = jnp.vstack([jnp.ones(count, dtype=x.dtype),
                            jnp.arange(1, count + 1, dtype=x.dtype)
                            / np.asarray(count).astype(x.dtype)]).T
        piece = slice(lo, hi)
        coef, *_ = jnp.linalg.lstsq(basis, x[piece])
        x = x.at[piece].add(-jnp.matmul(basis, coef, precision=lax.Precision.HIGHEST))
    return jnp.moveaxis(x.reshape(shape), 0, axis)
