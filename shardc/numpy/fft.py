"""``jnp.fft``: discrete Fourier transforms, as JAX's (``lax.fft`` over up to three trailing
dimensions; the axes asked for are moved there and back, longer lists of axes are
transformed in groups), with the ``n``/``s`` padding or cropping and the ``norm`` modes of
numpy, and the sample frequencies and shifts."""
from __future__ import annotations

import math
import operator

import numpy as np

from compiler.tracing import bind
from ir import dtypes as _dt
from ir import primitives as p
from shardc.numpy._core import as_array, asarray, astype, dtype_of, put_on
from shardc.numpy._manipulation import moveaxis, roll
from shardc.numpy._ufuncs import conj

__all__ = ["fft", "ifft", "rfft", "irfft", "fft2", "ifft2", "rfft2", "irfft2", "fftn", "ifftn",
           "rfftn", "irfftn", "hfft", "ihfft", "fftfreq", "rfftfreq", "fftshift", "ifftshift"]


def transform(x, fft_type: str, fft_lengths):
    """``lax.fft``: the operand converted as JAX converts it (complex for FFT, IFFT and IRFFT;
    inexact and real for RFFT), then the primitive (none over no dimensions)."""
    x = as_array(x)
    dtype = dtype_of(x)
    if fft_type == "RFFT":
        if np.issubdtype(dtype, np.complexfloating):
            raise ValueError("only real valued inputs supported for rfft")
        x = astype(x, _dt.to_inexact(dtype))
    elif not np.issubdtype(dtype, np.complexfloating):
        x = astype(x, _dt.complex_dtype(_dt.to_inexact(dtype)))
    if not fft_lengths:
        return x
    return bind(p.fft_p, x, fft_type=fft_type, fft_lengths=tuple(int(n) for n in fft_lengths))


def _norm_factor(lengths, name: str, norm):
    n = math.prod(lengths)
    if norm is None or norm == "backward":
        return None
    if norm == "ortho":
        return math.sqrt(n) if name.startswith("i") else 1 / math.sqrt(n)
    if norm == "forward":
        return n if name.startswith("i") else 1 / n
    raise ValueError(f'Invalid norm value {norm}; should be "backward","ortho" or "forward".')


def _resized(x, axes, sizes):
    """``x`` cropped or padded with zeros to ``sizes`` along ``axes``."""
    shape = x.shape
    for axis, size in zip(axes, sizes):
        have = shape[axis]
        if size < have:
            index = [slice(None)] * x.ndim
            index[axis] = slice(0, size)
            x = x[tuple(index)]
        elif size > have:
            config = [(0, 0, 0)] * x.ndim
            config[axis] = (0, size - have, 0)
            x = bind(p.pad_p, x, np.zeros((), dtype_of(x)), padding_config=tuple(config))
        shape = x.shape
    return x


def _core(name: str, fft_type: str, a, s, axes, norm):
    """JAX's _fft_core: the transform of ``a`` over ``axes`` (lengths ``s``)."""
    arr = asarray(a)
    if s is not None:
        s = tuple(map(operator.index, s))
        if any(n <= 0 for n in s):
            raise ValueError("Shape should be positive.")
    if s is not None and axes is not None and len(s) != len(axes):
        raise ValueError("Shape and axes have different lengths.")
    given = axes
    if axes is None:
        axes = tuple(range(arr.ndim)) if s is None else tuple(range(arr.ndim - len(s),
                                                                      arr.ndim))
    axes = tuple(operator.index(ax) % arr.ndim if -arr.ndim <= ax < arr.ndim else
                 _axis_error(ax, arr.ndim) for ax in axes)
    if len(axes) != len(set(axes)):
        raise ValueError(f"jax.numpy.fft.{name} does not support repeated axes. Got axes "
                         f"{given!r}.")
    if s is None:
        lengths = [arr.shape[ax] for ax in axes]
        if fft_type == "IRFFT" and axes:    # (no points from no half spectrum)
            lengths[-1] = max(0, 2 * (arr.shape[axes[-1]] - 1))
    else:
        # the operand cropped or padded to the lengths (IRFFT: its half spectrum)
        lengths, sizes = list(s), list(s)
        if fft_type == "IRFFT":
            sizes[-1] = lengths[-1] // 2 + 1
        arr = _resized(arr, axes, sizes)
    if not axes:
        return transform(arr, fft_type, ())
    trailing = tuple(range(arr.ndim - len(axes), arr.ndim))
    arr = moveaxis(arr, axes, trailing)
    out = _in_groups(arr, fft_type, lengths)
    out = moveaxis(out, trailing, axes)
    factor = _norm_factor(lengths, name, norm)
    if factor is not None:
        out = out * np.asarray(factor, _dt.real_dtype(dtype_of(out)))
    return out


def _in_groups(arr, fft_type, lengths):
    """The transform of the last len(lengths) dimensions, at most three at a time (it is
    separable: RFFT takes the last group first, IRFFT last)."""
    if len(lengths) <= 3:
        return transform(arr, fft_type, lengths)
    n = len(lengths)
    if fft_type in ("FFT", "IFFT"):
        head = _moved(lambda y: transform(y, fft_type, lengths[:-3]), arr, n, n - 3)
        return transform(head, fft_type, lengths[-3:])
    if fft_type == "RFFT":
        out = transform(arr, "RFFT", lengths[-3:])
        return _moved(lambda y: _in_groups(y, "FFT", lengths[:-3]), out, n, n - 3)
    out = _moved(lambda y: _in_groups(y, "IFFT", lengths[:-3]), astype(arr, _dt.complex_dtype(
        dtype_of(arr))), n, n - 3)
    return transform(out, "IRFFT", lengths[-3:])


def _moved(f, x, n, k):
    """``f`` applied to the first ``k`` of the last ``n`` dimensions, moved last for it."""
    first = tuple(range(x.ndim - n, x.ndim - n + k))
    last = tuple(range(x.ndim - k, x.ndim))
    return moveaxis(f(moveaxis(x, first, last)), last, first)


def _axis_error(axis, ndim):
    raise ValueError(f"axis {axis} is out of bounds for array of dimension {ndim}")


def _check_one_axis(name, axis):
    """JAX's refusal of a sequence of axes where one axis is taken."""
    if isinstance(axis, (list, tuple)):
        raise ValueError(f"jax.numpy.fft.{name} does not support multiple axes. Please use "
                         f"jax.numpy.fft.{name}n. Got axis = {axis!r}.")


def _one_axis(name, fft_type, a, n, axis, norm):
    _check_one_axis(name, axis)
    s = None if n is None else [n]
    return _core(name, fft_type, a, s, (axis,), norm)


def _two_axes(name, fft_type, a, s, axes, norm):
    if len(axes) != 2:
        raise ValueError(f"jax.numpy.fft.{name} only supports 2 axes. Got axes = {axes!r}.")
    return _core(name, fft_type, a, s, axes, norm)


def fft(a, n=None, axis=-1, norm=None):
    """The one-dimensional discrete Fourier transform along ``axis``."""
    return _one_axis("fft", "FFT", a, n, axis, norm)


def ifft(a, n=None, axis=-1, norm=None):
    """The inverse of ``fft``."""
    return _one_axis("ifft", "IFFT", a, n, axis, norm)


def rfft(a, n=None, axis=-1, norm=None):
    """The transform of a real array: the ``n//2+1`` non-negative frequencies."""
    return _one_axis("rfft", "RFFT", a, n, axis, norm)


def irfft(a, n=None, axis=-1, norm=None):
    """The inverse of ``rfft``: ``n`` real values (default ``2 * (m - 1)``)."""
    return _one_axis("irfft", "IRFFT", a, n, axis, norm)


def fft2(a, s=None, axes=(-2, -1), norm=None):
    return _two_axes("fft2", "FFT", a, s, axes, norm)


def ifft2(a, s=None, axes=(-2, -1), norm=None):
    return _two_axes("ifft2", "IFFT", a, s, axes, norm)


def rfft2(a, s=None, axes=(-2, -1), norm=None):
    return _two_axes("rfft2", "RFFT", a, s, axes, norm)


def irfft2(a, s=None, axes=(-2, -1), norm=None):
    return _two_axes("irfft2", "IRFFT", a, s, axes, norm)


def fftn(a, s=None, axes=None, norm=None):
    """The transform over ``axes`` (default: all, or the last ``len(s)``)."""
    return _core("fftn", "FFT", a, s, axes, norm)


def ifftn(a, s=None, axes=None, norm=None):
    return _core("ifftn", "IFFT", a, s, axes, norm)


def rfftn(a, s=None, axes=None, norm=None):
    return _core("rfftn", "RFFT", a, s, axes, norm)


def irfftn(a, s=None, axes=None, norm=None):
    return _core("irfftn", "IRFFT", a, s, axes, norm)


def hfft(a, n=None, axis=-1, norm=None):
    """The transform of a signal whose spectrum is Hermitian (given by its half): real."""
    _check_one_axis("hfft", axis)
    conj_a = conj(asarray(a))
    nn = (conj_a.shape[axis] - 1) * 2 if n is None else n
    return _one_axis("hfft", "IRFFT", conj_a, n, axis, norm) * nn


def ihfft(a, n=None, axis=-1, norm=None):
    """The inverse of ``hfft``."""
    _check_one_axis("ihfft", axis)
    arr = asarray(a)
    nn = arr.shape[axis] if n is None else n
    return conj(_one_axis("ihfft", "RFFT", arr, n, axis, norm)) * (1 / nn)


def fftfreq(n, d=1.0, *, dtype=None, device=None):
    """The sample frequencies of an ``n``-point transform with spacing ``d``, placed on
    ``device`` (a device or a sharding) where given."""
    n = _frequency_count("fftfreq", n, d)
    k = np.concatenate([np.arange(0, (n - 1) // 2 + 1), np.arange(-(n // 2), 0)])
    return _placed(_frequencies(k, n, d, dtype), device)


def rfftfreq(n, d=1.0, *, dtype=None, device=None):
    """The non-negative sample frequencies of an ``n``-point real transform, placed on
    ``device`` where given."""
    n = _frequency_count("rfftfreq", n, d)
    return _placed(_frequencies(np.arange(0, n // 2 + 1), n, d, dtype), device)


def _placed(result, device):
    return result if device is None else put_on(result, device)


def _frequency_count(name, n, d) -> int:
    """``n`` as an int, after JAX's refusals of a sequence for ``n`` or ``d``."""
    if isinstance(n, (list, tuple)):
        raise ValueError(f"The n argument of jax.numpy.fft.{name} only takes an int. "
                         f"Got n = {list(n)}.")
    if isinstance(d, (list, tuple)):
        raise ValueError(f"The d argument of jax.numpy.fft.{name} only takes a single value. "
                         f"Got d = {list(d)}.")
    return operator.index(n)


def _frequencies(k, n, d, dtype):
    # (JAX's warning for a 64-bit dtype names the arange it computes with)
    dtype = _dt.float_ if dtype is None else _dt.requested(dtype, "arange")
    if isinstance(d, (int, float)):
        with np.errstate(divide="ignore", invalid="ignore"):   # n = 0: nan, as JAX's
            return asarray((k / (n * d)).astype(dtype))
    return asarray(k.astype(dtype)) / (asarray(d) * n)


def fftshift(x, axes=None):
    """The zero frequency moved to the centre."""
    x = asarray(x)
    axes = tuple(range(x.ndim)) if axes is None else (
        (axes,) if isinstance(axes, int) else tuple(axes))
    return roll(x, [x.shape[ax] // 2 for ax in axes], axes)


def ifftshift(x, axes=None):
    """The inverse of ``fftshift``."""
    x = asarray(x)
    axes = tuple(range(x.ndim)) if axes is None else (
        (axes,) if isinstance(axes, int) else tuple(axes))
    return roll(x, [-(x.shape[ax] // 2) for ax in axes], axes)
