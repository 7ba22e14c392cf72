"""``shardc.scipy.signal`` (``jax.scipy.signal``): convolution, correlation, detrending and
spectral analysis.

``convolve`` and ``correlate`` of N-dimensional arrays compute directly, as one
``lax.conv_general_dilated`` (``method='fft'``: by ``fftconvolve``); ``convolve2d`` and
``correlate2d`` are their 2-D forms (zero fill at the boundary only, as JAX's). Modes are
scipy's: ``'full'``, ``'same'`` (centred as the first input) and ``'valid'``.

``stft``, ``istft``, ``welch`` and ``csd`` cut the signal into windowed, overlapping segments
and take their FFTs. Windows are named as scipy.signal.get_window names them (``'hann'``,
``('tukey', 0.25)``) or given as arrays; segment lengths, overlaps and FFT lengths shape the
result, so they must be known while tracing, the signal and ``fs`` need not be.

>>> jax.scipy.signal.convolve(jnp.ones((8, 8)), jnp.ones((3, 3)), mode="same").shape
(8, 8)
>>> jax.scipy.signal.welch(jnp.ones(64), nperseg=16)[1].shape
(9,)
"""
from __future__ import annotations

import operator
import warnings

import numpy as np

import shardc.lax as lax
import shardc.numpy as jnp
from compiler.tracing import concrete_or_error
from ir.dtypes import complex_dtype, real_dtype, to_inexact
from shardc.batching_api import vmap
from shardc.numpy._arraylike import check_arraylike
from shardc.numpy._core import canonical_axis
from shardc.scipy._windows import get_window

__all__ = ["convolve", "correlate", "convolve2d", "correlate2d", "fftconvolve", "detrend",
           "stft", "istft", "csd", "welch"]

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


# --- spectral analysis: FFTs of windowed, overlapping segments ------------------------------

_BOUNDARIES = ("even", "odd", "constant", "zeros", None)
_PADS = {"even": "reflect", "constant": "edge", "zeros": "constant"}


def _static_int(value, context: str) -> int:
    """``int(value)``; JAX's ConcretizationTypeError naming ``context`` where it is traced."""
    return int(concrete_or_error(value, context))


def _without(shape: tuple, axis: int) -> tuple:
    return shape[:axis] + shape[axis + 1:]


def _spectral_operands(x, y, mode: str, axis):
    """``(x, y, axis, outer shape)``: the signals in their common inexact dtype (``y`` may be
    None), the canonical time axis, and the broadcast shape of their other dimensions."""
    axis = operator.index(concrete_or_error(axis, "axis of windowed-FFT"))
    if y is None:
        check_arraylike("spectral_helper", x, 0)
        x = jnp.asarray(x)
        axis = canonical_axis(axis, x.ndim)
        return x.astype(to_inexact(x.dtype)), None, axis, _without(x.shape, axis)
    if mode != "psd":
        raise ValueError("two-argument mode is available only when mode=='psd'")
    check_arraylike("spectral_helper", x, 0)
    check_arraylike("spectral_helper", y, 1)
    x, y = _inexact_pair(x, y)
    axis = canonical_axis(axis, x.ndim)
    if x.ndim != y.ndim:
        raise ValueError(f"two-arguments must have the same rank ({x.ndim} vs {y.ndim}).")
    try:
        outer_shape = jnp.broadcast_shapes(_without(x.shape, axis), _without(y.shape, axis))
    except ValueError as err:
        raise ValueError("x and y cannot be broadcast together.") from err
    return x, y, axis, outer_shape


def _window_and_length(window, nperseg, input_length: int, dtype):
    """``(window array of dtype, segment length)``: a named window is ``nperseg`` points long,
    by default and at most as long as the input; an array window sets the length."""
    if isinstance(window, (str, tuple)):
        length = input_length if nperseg is None else nperseg
        if length > input_length:
            warnings.warn(f"nperseg={length} is greater than input_length={input_length}, "
                          f"using nperseg={input_length}")
            length = input_length
        return jnp.asarray(get_window(window, length), dtype=dtype), length
    win = jnp.asarray(window, dtype=dtype)
    length = win.size if nperseg is None else nperseg
    if win.ndim != 1:
        raise ValueError("window must be 1-D")
    if input_length < win.size:
        raise ValueError("window is longer than input signal")
    if length != win.size:
        raise ValueError("value specified for nperseg is different from length of window")
    return win, length


def _zero_padded(x, length: int):
    """``x`` with zeros appended to its last axis up to ``length`` points."""
    extra = length - x.shape[-1]
    if extra <= 0:
        return x
    return jnp.concatenate([x, jnp.zeros((*x.shape[:-1], extra), x.dtype)], axis=-1)


def _odd_extension(x, n: int):
    """``x`` extended by ``n`` points at each end of its last axis, mirrored through the end
    values (so the extension continues the signal's slope)."""
    if n < 1:
        return x
    if n > x.shape[-1] - 1:
        raise ValueError(f"The extension length n ({n}) is too big. It must not exceed "
                         f"x.shape[axis]-1, which is {x.shape[-1] - 1}.")
    left = 2 * x[..., :1] - jnp.flip(x[..., 1:n + 1], axis=-1)
    right = 2 * x[..., -1:] - jnp.flip(x[..., -(n + 1):-1], axis=-1)
    return jnp.concatenate([left, x, right], axis=-1)


def _framed(x, nperseg: int, step: int, boundary, padded: bool):
    """``x`` extended by half a segment at each end as ``boundary`` says, then (``padded``)
    zero-padded to a whole number of segments."""
    half = nperseg // 2
    if boundary == "odd":
        x = _odd_extension(x, half)
    elif boundary is not None:
        x = jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(half, half)], _PADS[boundary])
    if padded:
        x = _zero_padded(x, x.shape[-1] + (-(x.shape[-1] - nperseg) % step) % nperseg)
    return x


def _segment_detrend(detrend_type, axis: int):
    """The function detrending the segments (their last axis) as ``detrend_type`` says."""
    if isinstance(detrend_type, str):
        return lambda segments: detrend(segments, axis=-1, type=detrend_type)
    if callable(detrend_type):
        # JAX hands a callable the segments with the dimension at the signal's (nonnegative)
        # time axis moved last, and moves it back after: done alike so that results agree
        def moved(segments):
            return jnp.moveaxis(detrend_type(jnp.moveaxis(segments, axis, -1)), -1, axis)
        return moved
    if not detrend_type:
        return lambda segments: segments
    raise ValueError(f"Unsupported detrend type: {detrend_type}")


def _scale(win, fs, scaling: str, mode: str):
    """The factor making a periodogram a density (per unit frequency) or a power spectrum;
    its square root for an STFT, whose magnitude is squared to give power."""
    if scaling == "density":
        scale = 1.0 / (fs * (win * win).sum())
    elif scaling == "spectrum":
        scale = 1.0 / win.sum() ** 2
    else:
        raise ValueError(f"Unknown scaling: {scaling}")
    return jnp.sqrt(scale) if mode == "stft" else scale


def _is_onesided(return_onesided: bool, x, y) -> bool:
    """Whether to keep only nonnegative frequencies: a complex signal's spectrum is not
    symmetric, so it keeps both."""
    if not return_onesided:
        return False
    if jnp.iscomplexobj(x) or jnp.iscomplexobj(y):
        warnings.warn("Input data is complex, switching to return_onesided=False")
        return False
    return True


def _windowed_ffts(x, win, detrend_func, nperseg: int, step: int, nfft: int, onesided: bool):
    """The FFT of each detrended, windowed segment of ``x``'s last axis:
    ``(..., segments, frequencies)``."""
    starts = np.arange(0, x.shape[-1] - nperseg + 1, step)
    segments = detrend_func(x[..., starts[:, None] + np.arange(nperseg)])
    if jnp.iscomplexobj(win):
        segments = segments.astype(complex_dtype(segments.dtype))
    segments = win * segments
    if onesided:
        return jnp.fft.rfft(segments.real, n=nfft)
    return jnp.fft.fft(segments, n=nfft)


def _spectral_helper(x, y, fs=1.0, window="hann", nperseg=None, noverlap=None, nfft=None,
                     detrend_type="constant", return_onesided=True, scaling="density",
                     axis=-1, mode="psd", boundary=None, padded=False):
    """``(frequencies, segment times, spectra)``: ``x``'s STFT (``mode='stft'``) or the
    periodograms of ``x`` with ``y`` (``mode='psd'``; with itself where ``y`` is None, real),
    frequencies along ``axis`` and segments along the last axis."""
    if mode not in ("psd", "stft"):
        raise ValueError(f"Unknown value for mode {mode}, must be one of: ('psd', 'stft')")
    if boundary not in _BOUNDARIES:
        raise ValueError(f"Unknown boundary option '{boundary}', must be one of: "
                         f"{list(_BOUNDARIES)}")
    x, y, axis, outer_shape = _spectral_operands(x, y, mode, axis)
    result_dtype = complex_dtype(x.dtype)
    freq_dtype = real_dtype(result_dtype)
    if nperseg is not None:
        nperseg = _static_int(nperseg, "nperseg of windowed-FFT")
        if nperseg < 1:
            raise ValueError("nperseg must be a positive integer")
    win, nperseg = _window_and_length(window, nperseg, x.shape[axis], x.dtype)
    noverlap = (nperseg // 2 if noverlap is None
                else _static_int(noverlap, "noverlap of windowed-FFT"))
    nfft = nperseg if nfft is None else _static_int(nfft, "nfft of windowed-FFT")
    if x.size == 0 or (y is not None and y.size == 0):
        shape = x.shape if y is None else (
            outer_shape[:axis] + (min(x.shape[axis], y.shape[axis]),) + outer_shape[axis:])
        return (jnp.zeros(shape, freq_dtype), jnp.zeros(shape, freq_dtype),
                jnp.zeros(shape, result_dtype))
    x = jnp.moveaxis(x, axis, -1)
    if y is not None:
        y = jnp.moveaxis(y, axis, -1)
        length = max(x.shape[-1], y.shape[-1])
        x, y = _zero_padded(x, length), _zero_padded(y, length)
    if nfft < nperseg:
        raise ValueError("nfft must be greater than or equal to nperseg.")
    if noverlap >= nperseg:
        raise ValueError("noverlap must be less than nperseg.")
    step = nperseg - noverlap
    x = _framed(x, nperseg, step, boundary, padded)
    y = None if y is None else _framed(y, nperseg, step, boundary, padded)
    detrend_func = _segment_detrend(detrend_type, axis)
    scale = _scale(win, fs, scaling, mode)
    onesided = _is_onesided(return_onesided, x, y)
    frequencies = jnp.fft.rfftfreq if onesided else jnp.fft.fftfreq
    freqs = frequencies(nfft, 1 / fs, dtype=freq_dtype)

    result = _windowed_ffts(x, win, detrend_func, nperseg, step, nfft, onesided)
    if y is not None:
        result = jnp.conjugate(result) * _windowed_ffts(y, win, detrend_func, nperseg, step,
                                                        nfft, onesided)
    elif mode == "psd":
        result = jnp.conjugate(result) * result
    result = result * scale
    if onesided and mode == "psd":
        # each positive frequency also carries its negative one's power: all but the zero
        # frequency and, for an even nfft, the Nyquist one
        result = result.at[..., 1:None if nfft % 2 else -1].mul(2)
    times = jnp.asarray(np.arange(nperseg / 2, x.shape[-1] - nperseg / 2 + 1, step),
                        freq_dtype) / fs
    if boundary is not None:
        times = times - (nperseg / 2) / fs
    result = result.astype(result_dtype)
    if y is None and mode != "stft":
        result = result.real
    return freqs, times, jnp.moveaxis(result, -1, axis)


def stft(x, fs=1.0, window="hann", nperseg=256, noverlap=None, nfft=None, detrend=False,
         return_onesided=True, boundary="zeros", padded=True, axis=-1):
    """The short-time Fourier transform of ``x`` along ``axis``: ``(f, t, Zxx)``, the FFT of
    each windowed segment of ``nperseg`` points (``noverlap`` shared with the next, by default
    half), scaled so that a window's weights sum to one. ``boundary`` extends the signal by
    half a segment at each end (``'zeros'``, ``'even'``, ``'odd'``, ``'constant'`` or None);
    ``padded`` zero-pads it to whole segments. ``Zxx`` has frequencies at ``axis`` and times
    last; it is complex64 for float32 ``x``.

    >>> f, t, Zxx = jax.scipy.signal.stft(jnp.ones(16), nperseg=8)
    >>> f.shape, t.shape, Zxx.shape
    ((5,), (5,), (5, 5))
    """
    return _spectral_helper(x, None, fs, window, nperseg, noverlap, nfft, detrend,
                            return_onesided, scaling="spectrum", axis=axis, mode="stft",
                            boundary=boundary, padded=padded)


def _median_bias(count: int) -> float:
    """How much the median of ``count`` periodograms underestimates their mean (for
    exponentially distributed power)."""
    even = np.arange(2.0, count, 2)
    return 1 + np.sum(1 / (even + 1) - 1 / even)


def _averaged(pxy, average: str):
    """The periodograms ``pxy`` (segments last) averaged over their segments."""
    if pxy.ndim < 2 or pxy.size == 0:
        return pxy
    if pxy.shape[-1] == 1:
        return pxy.reshape(pxy.shape[:-1])
    if average == "mean":
        return pxy.mean(axis=-1)
    if average != "median":
        raise ValueError(f'average must be "median" or "mean", got {average}')
    if jnp.iscomplexobj(pxy):
        median = jnp.median(pxy.real, axis=-1) + 1j * jnp.median(pxy.imag, axis=-1)
    else:
        median = jnp.median(pxy, axis=-1)
    return median / np.asarray(_median_bias(pxy.shape[-1])).astype(pxy.dtype)


def csd(x, y, fs=1.0, window="hann", nperseg=None, noverlap=None, nfft=None,
        detrend="constant", return_onesided=True, scaling="density", axis=-1, average="mean"):
    """The cross power spectral density of ``x`` and ``y`` by Welch's method: ``(f, Pxy)``,
    the mean (or ``average='median'``) over segments of ``conj(X) * Y`` of their windowed,
    detrended segments, as a density (``scaling='density'``, per unit of ``fs``) or a power
    spectrum (``'spectrum'``). ``y=None`` means ``y = x`` with a real result. By default a
    segment is the whole signal.

    >>> f, pxy = jax.scipy.signal.csd(jnp.ones(32), jnp.ones(32), nperseg=8)
    >>> f.shape, pxy.dtype
    ((5,), dtype('complex64'))
    """
    freqs, _, pxy = _spectral_helper(x, y, fs, window, nperseg, noverlap, nfft, detrend,
                                     return_onesided, scaling, axis, mode="psd")
    return freqs, _averaged(pxy, average)


def welch(x, fs=1.0, window="hann", nperseg=None, noverlap=None, nfft=None,
          detrend="constant", return_onesided=True, scaling="density", axis=-1,
          average="mean"):
    """The power spectral density of ``x`` by Welch's method: ``(f, Pxx)``, ``csd(x, x)``'s
    real part (arguments as ``csd``'s).

    >>> f, pxx = jax.scipy.signal.welch(jnp.ones(32), nperseg=8)
    >>> f.shape, pxx.dtype
    ((5,), dtype('float32'))
    """
    freqs, pxx = csd(x, None, fs=fs, window=window, nperseg=nperseg, noverlap=noverlap,
                     nfft=nfft, detrend=detrend, return_onesided=return_onesided,
                     scaling=scaling, axis=axis, average=average)
    return freqs, pxx.real


def _overlap_add(frames, step: int):
    """The sum of ``frames`` ``(..., count, length)``, each placed ``step`` points after the
    one before: ``(..., (count - 1) * step + length)``."""
    count, length = frames.shape[-2:]
    positions = np.arange(count)[:, None] * step + np.arange(length)
    total = jnp.zeros((*frames.shape[:-2], (count - 1) * step + length), frames.dtype)
    return total.at[..., positions].add(frames)


def _istft_lengths(freq_count: int, nperseg, noverlap, nfft, onesided: bool):
    """``(nperseg, noverlap, nfft)`` of the STFT with ``freq_count`` frequencies, by default
    its segment length is its FFT length."""
    default = 2 * (freq_count - 1) if onesided else freq_count
    # `or`, as JAX's: a zero nperseg or noverlap also means the default
    nperseg = _static_int(nperseg or default, "nperseg: segment length of STFT")
    if nperseg < 1:
        raise ValueError("nperseg must be a positive integer")
    if nfft is not None:
        nfft = _static_int(nfft, "nfft of STFT")
    elif onesided and nperseg == default + 1:
        nfft = nperseg              # an odd nperseg's one-sided spectrum, unpadded
    else:
        nfft = default
    if nfft < nperseg:
        raise ValueError(f"FFT length ({nfft}) must be longer than nperseg ({nperseg}).")
    noverlap = _static_int(noverlap or nperseg // 2, "noverlap of STFT")
    if noverlap >= nperseg:
        raise ValueError("noverlap must be less than nperseg.")
    return nperseg, noverlap, nfft


def _istft_window(window, nperseg: int, dtype):
    """The window as an array: a named one in ``dtype``, an array one as given."""
    if isinstance(window, (str, tuple)):
        return jnp.asarray(get_window(window, nperseg), dtype=dtype)
    win = jnp.asarray(window)
    if win.ndim != 1:
        raise ValueError("window must be 1-D")
    if win.shape[0] != nperseg:
        raise ValueError(f"window must have length of {nperseg}")
    return win


def istft(Zxx, fs=1.0, window="hann", nperseg=None, noverlap=None, nfft=None,
          input_onesided=True, boundary=True, time_axis=-1, freq_axis=-2):
    """The inverse short-time Fourier transform: ``(t, x)``, the signal whose ``stft`` (with
    the same window, segments and ``boundary``) is ``Zxx``, by inverse FFTs of the segments
    overlap-added with the window and divided by the overlap-added squared window. ``x``
    takes the time axis's place, the frequency axis dropped.

    >>> x = jnp.array([1., 2., 3., 2., 1., 0., 1., 2.])
    >>> t, x_again = jax.scipy.signal.istft(jax.scipy.signal.stft(x, nperseg=4)[2])
    >>> bool(jnp.allclose(x_again, x, atol=1e-6))
    True
    """
    check_arraylike("istft", Zxx, 0)
    Zxx = jnp.asarray(Zxx)
    if Zxx.ndim < 2:
        raise ValueError("Input stft must be at least 2d!")
    freq_axis = canonical_axis(freq_axis, Zxx.ndim)
    time_axis = canonical_axis(time_axis, Zxx.ndim)
    if freq_axis == time_axis:
        raise ValueError("Must specify differing time and frequency axes!")
    Zxx = Zxx.astype(complex_dtype(to_inexact(Zxx.dtype)))
    nperseg, noverlap, nfft = _istft_lengths(Zxx.shape[freq_axis], nperseg, noverlap, nfft,
                                             input_onesided)
    outer = tuple(i for i in range(Zxx.ndim) if i not in (freq_axis, time_axis))
    Zxx = jnp.transpose(Zxx, outer + (freq_axis, time_axis))
    inverse = jnp.fft.irfft if input_onesided else jnp.fft.ifft
    segments = inverse(Zxx, n=nfft, axis=-2)[..., :nperseg, :]
    win = _istft_window(window, nperseg, segments.dtype)
    # undo stft's scaling (window weights summing to one); segments last
    segments = jnp.swapaxes(segments * win.sum(), -2, -1)
    step = nperseg - noverlap
    x = _overlap_add(segments * win, step)
    norm = _overlap_add(jnp.broadcast_to(win * win, segments.shape[-2:]), step)
    if boundary:
        half = nperseg // 2       # (a 1-point segment leaves nothing, as scipy's)
        x, norm = x[..., half:-half], norm[..., half:-half]
    x = x / jnp.where(norm > 1e-10, norm, 1.0)
    if x.ndim > 1 and time_axis != Zxx.ndim - 1:
        x = jnp.moveaxis(x, -1, time_axis - (freq_axis < time_axis))
    times = jnp.arange(x.shape[0], dtype=real_dtype(x.dtype)) / fs
    return times, x
