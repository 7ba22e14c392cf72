"""jax.scipy.signal's spectral functions (stft, istft, welch, csd) and their windows:
identities that hold exactly (Parseval, stft -> istft round trips, a sinusoid's power, csd of
a signal with itself), transformations (jit, vmap, grad against finite differences), shapes,
dtypes and errors; and, where scipy is installed, scipy.signal as the reference."""
import warnings

import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from shardc.scipy import signal
from shardc.scipy._windows import get_window, window_names

RNG = np.random.default_rng(0)


def _noise(*shape, dtype=np.float32):
    return RNG.normal(size=shape).astype(dtype)


# --- windows --------------------------------------------------------------------------------

# periodic windows from scipy.signal.get_window(spec, n) (scipy 1.17.1), rounded to 10 digits
SCIPY_WINDOWS = [
    ("hann", [0.0, 0.25, 0.75, 1.0, 0.75, 0.25]),
    ("hamming", [0.08, 0.3978521826, 0.9121478174, 0.9121478174, 0.3978521826]),
    ("blackman", [0.0, 0.13, 0.63, 1.0, 0.63, 0.13]),
    ("bartlett", [0.0, 0.3333333333, 0.6666666667, 1.0, 0.6666666667, 0.3333333333]),
    ("boxcar", [1.0, 1.0, 1.0]),
    ("triang", [0.25, 0.5, 0.75, 1.0, 0.75, 0.5]),
    ("triang", [0.125, 0.375, 0.625, 0.875, 0.875, 0.625, 0.375]),
    (("tukey", 0.5), [0.0, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5]),
    ("cosine", [0.2588190451, 0.7071067812, 0.9659258263, 0.9659258263, 0.7071067812]),
    ("bohman", [0.0, 0.0707247468, 0.4374840122, 0.9103685132, 0.9103685132, 0.4374840122,
                0.0707247468]),
    ("parzen", [0.00390625, 0.10546875, 0.47265625, 0.91796875, 0.91796875, 0.47265625,
                0.10546875]),
    ("flattop", [-0.000421051, -0.0368407812, 0.0107037167, 0.7808739149, 0.7808739149,
                 0.0107037167, -0.0368407812]),
    ("nuttall", [0.0003628, 0.0613345, 0.5292298, 1.0, 0.5292298, 0.0613345]),
    ("blackmanharris", [6e-05, 0.055645, 0.520575, 1.0, 0.520575, 0.055645]),
    ("barthann", [0.0, 0.27, 0.73, 1.0, 0.73, 0.27]),
    (("kaiser", 6.0), [0.0148733371, 0.1997819513, 0.5913121823, 0.9454284906, 0.9454284906,
                       0.5913121823, 0.1997819513]),
    (("gaussian", 1.5), [0.0657285286, 0.2493522088, 0.6065306597, 0.9459594689, 0.9459594689,
                         0.6065306597, 0.2493522088]),
    (("exponential", None, 2.0), [0.2231301601, 0.3678794412, 0.6065306597, 1.0, 0.6065306597,
                                  0.3678794412]),
    (("general_hamming", 0.6), [0.2, 0.4763932023, 0.9236067977, 0.9236067977, 0.4763932023]),
]


@pytest.mark.parametrize("spec, expected", SCIPY_WINDOWS, ids=lambda v: str(v)[:20])
def test_windows_match_scipys_periodic_windows(spec, expected):
    np.testing.assert_allclose(get_window(spec, len(expected)), expected, atol=1e-10)


@pytest.mark.parametrize("name, numpy_window", [
    ("hann", np.hanning), ("hamming", np.hamming), ("blackman", np.blackman),
    ("bartlett", np.bartlett), (("kaiser", 5.0), lambda m: np.kaiser(m, 5.0))])
@pytest.mark.parametrize("m", [1, 2, 7, 10])
def test_symmetric_windows_match_numpy_and_periodic_drops_a_point(name, numpy_window, m):
    np.testing.assert_allclose(get_window(name, m, fftbins=False), numpy_window(m),
                               atol=1e-12)
    np.testing.assert_allclose(get_window(name, m), numpy_window(m + 1)[:m] if m > 1
                               else np.ones(m), atol=1e-12)
    base = name if isinstance(name, str) else name[0]
    suffixed = base + "_symmetric" if isinstance(name, str) else (base + "_symmetric",
                                                                    *name[1:])
    np.testing.assert_allclose(get_window(suffixed, m), numpy_window(m), atol=1e-12)


@pytest.mark.parametrize("spec, message", [
    ("nosuchwindow", "Unknown window type 'nosuchwindow'"),
    (("hann", 3), "takes no parameters"),
    ("kaiser", "needs parameters"),
    ((3.0,), "must be a window name"),
    (("exponential", 2.0, 1.0), "center must be None"),
])
def test_window_errors_name_the_window(spec, message):
    fftbins = not (isinstance(spec, tuple) and spec[0] == "exponential")
    with pytest.raises(ValueError, match=message):
        get_window(spec, 8, fftbins=fftbins)
    if spec == "nosuchwindow":
        with pytest.raises(ValueError, match="nosuchwindow"):
            signal.stft(np.ones(16), nperseg=8, window=spec)


# --- identities -----------------------------------------------------------------------------

def test_stft_of_disjoint_boxcar_segments_keeps_energy():
    # Parseval per segment: sum_k |X_k|^2 = n sum_t |x_t|^2, and stft divides X by n
    x = _noise(3, 64)
    _, _, zxx = signal.stft(x, window="boxcar", nperseg=16, noverlap=0, boundary=None,
                            padded=False, return_onesided=False)
    assert zxx.shape == (3, 16, 4)
    energy = np.sum(np.abs(np.asarray(zxx)) ** 2, axis=(-2, -1)) * 16
    np.testing.assert_allclose(energy, np.sum(x ** 2, axis=-1), rtol=1e-5)


@pytest.mark.parametrize("nfft", [16, 17])
def test_welch_density_integrates_to_the_mean_power(nfft):
    x = _noise(2, 96)
    f, pxx = signal.welch(x, fs=4.0, window="boxcar", nperseg=16, noverlap=0, nfft=nfft,
                          detrend=False)
    assert f.shape == (nfft // 2 + 1,)
    np.testing.assert_allclose(np.sum(np.asarray(pxx), -1) * 4.0 / nfft,
                               np.mean(x ** 2, -1), rtol=1e-5)


@pytest.mark.parametrize("window, nperseg, noverlap", [
    ("hann", 16, 8), ("hamming", 16, 12), (("tukey", 0.25), 12, 9), ("boxcar", 10, 5),
    ("blackman", 15, 10), (("kaiser", 8.0), 16, 12)])
@pytest.mark.parametrize("boundary", ["zeros", "even", "odd", "constant"])
def test_stft_then_istft_recovers_the_signal(window, nperseg, noverlap, boundary):
    x = _noise(2, 70)
    _, _, zxx = signal.stft(x, window=window, nperseg=nperseg, noverlap=noverlap,
                            boundary=boundary)
    t, back = signal.istft(zxx, window=window, nperseg=nperseg, noverlap=noverlap)
    # the times count the result's first axis, as scipy's and JAX's do
    assert back.dtype == np.float32 and t.shape == back.shape[:1]
    np.testing.assert_allclose(np.asarray(back)[:, :70], x, atol=2e-5)


def test_istft_of_a_two_sided_stft_along_a_middle_axis():
    x = (_noise(3, 50, 2) + 1j * _noise(3, 50, 2)).astype(np.complex64)
    with pytest.warns(UserWarning, match="switching to return_onesided=False"):
        f, _, zxx = signal.stft(x, nperseg=10, axis=1)
    assert zxx.shape[:3] == (3, 10, 2) and f.shape == (10,) and zxx.dtype == np.complex64
    _, back = signal.istft(zxx, nperseg=10, input_onesided=False, time_axis=-1, freq_axis=1)
    # the time axis was last: the signal comes back last
    assert back.dtype == np.complex64 and back.shape[:2] == (3, 2)
    np.testing.assert_allclose(np.asarray(back)[..., :50], x.transpose(0, 2, 1), atol=2e-5)


@pytest.mark.parametrize("window", ["hann", "hamming", "blackman", ("tukey", 0.25)])
def test_welch_of_an_on_bin_sinusoid_has_its_power_at_its_frequency(window):
    fs, n, amplitude = 64.0, 64, 3.0
    t = np.arange(1024) / fs
    x = (amplitude * np.sin(2 * np.pi * 10.0 * t)).astype(np.float32)
    f, pxx = signal.welch(x, fs=fs, window=window, nperseg=n, scaling="spectrum")
    peak = int(np.argmax(np.asarray(pxx)))
    assert f[peak] == 10.0
    np.testing.assert_allclose(pxx[peak], amplitude ** 2 / 2, rtol=1e-4)


def test_welch_of_white_noise_is_flat_at_twice_the_variance_over_fs():
    x = _noise(4, 8192) * 2.0
    f, pxx = signal.welch(x, fs=10.0, nperseg=128, detrend=False)
    level = np.mean(np.asarray(pxx)[:, 1:-1])
    np.testing.assert_allclose(level, 2 * 4.0 / 10.0, rtol=0.05)
    assert np.all(np.abs(np.asarray(pxx)[:, 1:-1].mean(0) / level - 1) < 0.5)


@pytest.mark.parametrize("kwargs", [dict(nperseg=16), dict(nperseg=9, noverlap=3, nfft=12,
                                    detrend="linear", scaling="spectrum"),
                                    dict(nperseg=16, average="median", return_onesided=False)])
def test_csd_of_a_signal_with_itself_is_welch(kwargs):
    x, y = _noise(2, 80), _noise(2, 80)
    f1, pxx = signal.welch(x, **kwargs)
    f2, pxy = signal.csd(x, x, **kwargs)
    assert pxy.dtype == np.complex64 and pxx.dtype == np.float32
    np.testing.assert_array_equal(f1, f2)
    np.testing.assert_allclose(np.asarray(pxy).real, pxx, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(np.asarray(pxy).imag, 0, atol=1e-6)
    np.testing.assert_allclose(signal.csd(x, y, **kwargs)[1],
                               np.conj(signal.csd(y, x, **kwargs)[1]), rtol=1e-5, atol=1e-6)


def test_median_average_divides_by_the_median_bias():
    # a signal of period step = 8 has identical segments: mean P, median P / bias(3)
    x = np.tile(_noise(8), 4)
    _, mean = signal.welch(x, nperseg=16, noverlap=8)
    _, median = signal.welch(x, nperseg=16, noverlap=8, average="median")
    bias = 1 + (1 / 3 - 1 / 2)
    np.testing.assert_allclose(np.asarray(median) * bias, mean, rtol=1e-5, atol=1e-7)


def test_callable_detrend_sees_the_segments_as_jax_hands_them():
    # JAX moves the signal's (nonnegative) axis of the segments array last before calling
    seen = []
    x = _noise(40)

    def record(segments):
        seen.append(segments.shape)
        return segments - segments.mean(-1, keepdims=True)

    _, pxx = signal.welch(x, nperseg=8, detrend=record)
    assert seen == [(8, 9)]
    segments = x[np.arange(9)[:, None] * 4 + np.arange(8)]
    segments = segments - segments.mean(0, keepdims=True)
    window = get_window("hann", 8)
    spectra = np.abs(np.fft.rfft(segments * window)) ** 2 / np.sum(window ** 2)
    spectra[:, 1:-1] *= 2
    np.testing.assert_allclose(pxx, spectra.mean(0), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(signal.welch(x, nperseg=8, detrend=lambda d: d)[1],
                               signal.welch(x, nperseg=8, detrend=False)[1])


# --- shapes, dtypes and transformations -----------------------------------------------------

@pytest.mark.parametrize("dtype, complex_dtype", [(np.float32, np.complex64),
                                                  (np.int32, np.complex64),
                                                  (np.uint8, np.complex64)])
def test_result_dtypes(dtype, complex_dtype):
    x = (np.arange(50) % 7).astype(dtype)
    f, t, zxx = signal.stft(x, nperseg=16)
    assert (f.dtype, t.dtype, zxx.dtype) == (np.float32, np.float32, complex_dtype)
    # 50 points, 8 added at each end, padded to 72 = 16 + 7 steps of 8: 8 segments
    assert (f.shape, t.shape, zxx.shape) == ((9,), (8,), (9, 8))
    np.testing.assert_allclose(t, np.arange(8) * 8.0)
    f, pxx = signal.welch(x, fs=2.0, nperseg=16, nfft=20)
    assert (f.dtype, pxx.dtype, pxx.shape) == (np.float32, np.float32, (11,))
    np.testing.assert_allclose(f, np.arange(11) / 10.0)
    assert signal.csd(x, x, nperseg=16)[1].dtype == np.complex64
    assert signal.istft(zxx)[1].dtype == np.float32


def test_frequency_and_time_axes_of_a_batched_stft():
    x = _noise(2, 33, 3)
    f, t, zxx = signal.stft(x, fs=8.0, nperseg=8, noverlap=6, boundary=None, padded=False,
                            axis=1)
    assert zxx.shape == (2, 5, 3, 13) and t.shape == (13,)
    np.testing.assert_allclose(t, (4 + 2 * np.arange(13)) / 8.0)
    np.testing.assert_allclose(f, np.arange(5))
    segment = x[1, 6:14, 2] * get_window("hann", 8)
    np.testing.assert_allclose(zxx[1, :, 2, 3], np.fft.rfft(segment) / np.sum(
        get_window("hann", 8)), rtol=1e-5, atol=1e-6)


def test_empty_signals_give_empty_results():
    f, pxx = signal.welch(np.zeros((3, 0), np.float32))
    assert f.shape == pxx.shape == (3, 0) and pxx.dtype == np.float32
    with pytest.warns(UserWarning, match="nperseg=4 is greater than input_length=0"):
        f, t, zxx = signal.stft(np.zeros((0,), np.float32), nperseg=4)
    assert zxx.shape == (0,) and zxx.dtype == np.complex64


def _all_close(got, expected):
    for g, e in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(expected)):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["stft", "welch", "csd", "istft"])
def test_jit_and_vmap_agree_with_eager(name):
    x, y = _noise(3, 40), _noise(3, 40)
    zxx = np.asarray(signal.stft(x, nperseg=8)[2])
    calls = {
        "stft": (lambda a, b: signal.stft(a, fs=2.0, nperseg=8, window=("tukey", 0.5)), x),
        "welch": (lambda a, b: signal.welch(a, nperseg=8, average="median"), x),
        "csd": (lambda a, b: signal.csd(a, b, nperseg=10, noverlap=3, detrend="linear"), x),
        "istft": (lambda a, b: signal.istft(a, nperseg=8), zxx),
    }
    function, operand = calls[name]
    eager = function(operand, y)
    _all_close(jax.jit(function)(operand, y), eager)
    batched = jax.vmap(lambda a, b: jax.tree_util.tree_leaves(function(a, b))[-1])(operand, y)
    _all_close(batched, jax.tree_util.tree_leaves(eager)[-1])


def test_traced_fs_under_jit():
    x = _noise(40)
    f, pxx = jax.jit(lambda a, fs: signal.welch(a, fs=fs, nperseg=8))(x, 4.0)
    np.testing.assert_allclose(f, np.arange(5) * 0.5)
    np.testing.assert_allclose(pxx, signal.welch(x, fs=4.0, nperseg=8)[1], rtol=1e-5)


def test_gradient_of_stft_power_matches_finite_differences():
    x = _noise(24).astype(np.float32)
    weights = _noise(5, 7)

    def power(a):
        _, _, zxx = signal.stft(a, nperseg=8, window="hamming")
        return jnp.sum(weights * jnp.abs(zxx) ** 2)

    grad = np.asarray(jax.grad(power)(x))
    # the power is quadratic in x, so central differences are exact up to rounding
    for i in [0, 5, 11, 23]:
        step = np.zeros_like(x)
        step[i] = 0.5
        difference = (power(x + step) - power(x - step)) / 1.0
        np.testing.assert_allclose(grad[i], difference, rtol=2e-3, atol=2e-4)


def test_gradient_of_welch_and_istft_by_the_dot_product_test():
    x, t = _noise(32), _noise(32)
    _, vjp = jax.vjp(lambda a: signal.welch(a, nperseg=8)[1], x)
    _, tangent = jax.jvp(lambda a: signal.welch(a, nperseg=8)[1], (x,), (t,))
    cotangent = _noise(5)
    np.testing.assert_allclose(np.dot(vjp(cotangent)[0], t), np.dot(tangent, cotangent),
                               rtol=1e-4)
    zxx = np.asarray(signal.stft(x, nperseg=8)[2]).real.astype(np.float32)
    grad = jax.grad(lambda z: signal.istft(z + 0j, nperseg=8)[1].sum())(zxx)
    assert grad.shape == zxx.shape and np.all(np.isfinite(grad))


# --- warnings and errors --------------------------------------------------------------------

def test_warnings():
    with pytest.warns(UserWarning, match="nperseg=256 is greater than input_length=40, "
                                         "using nperseg=40"):
        _, _, zxx = signal.stft(_noise(40))
    assert zxx.shape[0] == 21


X = np.ones(32, np.float32)
Z = np.ones((5, 9), np.complex64)


@pytest.mark.parametrize("call, error, message", [
    (lambda: signal.stft(X, boundary="wrap"), ValueError,
     r"Unknown boundary option 'wrap', must be one of: \['even', 'odd', 'constant', 'zeros', "
     r"None\]"),
    (lambda: signal.stft(X, nperseg=0), ValueError, "nperseg must be a positive integer"),
    (lambda: signal.stft(X, nperseg=8, noverlap=8), ValueError,
     "noverlap must be less than nperseg"),
    (lambda: signal.welch(X, nperseg=8, nfft=4), ValueError,
     "nfft must be greater than or equal to nperseg"),
    (lambda: signal.stft(X, nperseg=8, detrend=True), ValueError,
     "Unsupported detrend type: True"),
    (lambda: signal.welch(X, nperseg=8, detrend="cubic"), ValueError,
     "Trend type must be 'linear' or 'constant'"),
    (lambda: signal.welch(X, nperseg=8, scaling="power"), ValueError, "Unknown scaling: power"),
    (lambda: signal.welch(X, nperseg=8, average="mode"), ValueError,
     'average must be "median" or "mean", got mode'),
    (lambda: signal.stft(X, window=np.ones((2, 4))), ValueError, "window must be 1-D"),
    (lambda: signal.stft(X, window=np.ones(40)), ValueError,
     "window is longer than input signal"),
    (lambda: signal.stft(X, nperseg=6, window=np.ones(8)), ValueError,
     "value specified for nperseg is different from length of window"),
    (lambda: signal.stft(X, axis=1), ValueError, "axis 1 is out of bounds"),
    (lambda: signal.csd(np.ones((2, 8)), np.ones(8)), ValueError, "same rank"),
    (lambda: signal.csd(np.ones((2, 8)), np.ones((3, 8))), ValueError,
     "x and y cannot be broadcast together"),
    (lambda: signal.welch([1.0, 2.0]), TypeError, "requires ndarray or scalar arguments"),
    (lambda: signal.istft(np.ones(8)), ValueError, "Input stft must be at least 2d!"),
    (lambda: signal.istft(Z, time_axis=0, freq_axis=-2), ValueError,
     "Must specify differing time and frequency axes!"),
    (lambda: signal.istft(Z, nfft=6), ValueError,
     r"FFT length \(6\) must be longer than nperseg \(8\)"),
    (lambda: signal.istft(Z, noverlap=8), ValueError, "noverlap must be less than nperseg"),
    (lambda: signal.istft(Z, nperseg=-2), ValueError, "nperseg must be a positive integer"),
    (lambda: signal.istft(Z, window=np.ones(7)), ValueError, "window must have length of 8"),
    (lambda: signal.istft(Z, window=np.ones((8, 1))), ValueError, "window must be 1-D"),
    (lambda: signal.istft([[1.0]]), TypeError, "istft requires ndarray"),
    (lambda: jax.jit(lambda a, n: signal.welch(a, nperseg=n))(X, 8),
     jax.errors.ConcretizationTypeError, "nperseg of windowed-FFT"),
    (lambda: jax.jit(lambda a, n: signal.stft(a, nperseg=8, nfft=n))(X, 8),
     jax.errors.ConcretizationTypeError, "nfft of windowed-FFT"),
    (lambda: jax.jit(lambda z, n: signal.istft(z, nfft=n))(Z, 8),
     jax.errors.ConcretizationTypeError, "nfft of STFT"),
    (lambda: jax.jit(lambda z, n: signal.istft(z, noverlap=n))(Z, 2),
     jax.errors.ConcretizationTypeError, ""),
    # reachable through the private helpers only
    (lambda: signal._odd_extension(jnp.ones(2), 3), ValueError,
     r"The extension length n \(3\) is too big. It must not exceed x.shape\[axis\]-1, which "
     r"is 1."),
    (lambda: signal._spectral_helper(X, None, mode="welch"), ValueError,
     r"Unknown value for mode welch, must be one of: \('psd', 'stft'\)"),
    (lambda: signal._spectral_helper(X, X, mode="stft"), ValueError,
     "two-argument mode is available only when mode=='psd'"),
])
def test_errors(call, error, message):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(error, match=message):
            call()


def test_istft_reads_a_zero_noverlap_as_the_default_as_jax_does():
    _, _, zxx = signal.stft(_noise(40), nperseg=8)
    np.testing.assert_array_equal(signal.istft(zxx, noverlap=0)[1], signal.istft(zxx)[1])


# --- scipy.signal as the reference ---------------------------------------------------------

@pytest.fixture(scope="module")
def scipy_signal():
    return pytest.importorskip("scipy.signal")


def test_every_window_name_matches_scipy(scipy_signal):
    parameters = {"chebwin": (60.0,), "cheb": (60.0,), "gaussian": (1.3,), "gauss": (1.3,),
                  "gss": (1.3,), "general_cosine": ([0.5, 0.3, 0.2],),
                  "general cosine": ([0.5, 0.3, 0.2],), "general_hamming": (0.6,),
                  "general hamming": (0.6,), "kaiser": (4.0,), "ksr": (4.0,)}
    for name in window_names():
        spec = (name, *parameters[name]) if name in parameters else name
        if name.startswith(("general gauss", "general_gauss", "ggs")):
            spec = (name, 1.5, 2.0)
        for m in (1, 6, 9):
            for fftbins in (True, False):
                np.testing.assert_allclose(get_window(spec, m, fftbins),
                                           scipy_signal.get_window(spec, m, fftbins),
                                           atol=1e-12, err_msg=f"{spec} {m} {fftbins}")


STFT_CASES = [
    dict(nperseg=16),
    dict(nperseg=9, noverlap=3, nfft=14, boundary="even", detrend="linear"),
    dict(nperseg=12, window=("tukey", 0.25), boundary="odd", padded=False, fs=100.0),
    dict(nperseg=8, boundary=None, return_onesided=False, window=("kaiser", 6.0)),
    dict(nperseg=10, boundary="constant", window="flattop", detrend="constant"),
    dict(window=np.hamming(11), nperseg=None, noverlap=7, axis=0),
]


@pytest.mark.parametrize("kwargs", STFT_CASES, ids=range(len(STFT_CASES)))
def test_stft_matches_scipy(scipy_signal, kwargs):
    x = _noise(60, 2) if kwargs.get("axis") == 0 else _noise(2, 60)
    for got, expected in zip(signal.stft(x, **kwargs), scipy_signal.stft(x, **kwargs)):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


WELCH_CASES = [
    dict(nperseg=16),
    dict(nperseg=16, average="median", scaling="spectrum", fs=10.0),
    dict(nperseg=9, noverlap=3, nfft=14, detrend="linear", return_onesided=False),
    dict(nperseg=10, detrend=False, window=("gaussian", 2.5)),
    dict(nperseg=11, window="blackmanharris", axis=0),
]


@pytest.mark.parametrize("kwargs", WELCH_CASES, ids=range(len(WELCH_CASES)))
def test_welch_and_csd_match_scipy(scipy_signal, kwargs):
    shape = (70, 2) if kwargs.get("axis") == 0 else (2, 70)
    x, y = _noise(*shape), _noise(*shape)
    for got, expected in zip(signal.welch(x, **kwargs), scipy_signal.welch(x, **kwargs)):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)
    if kwargs.get("average") == "median":
        return              # scipy's complex median differs (scipy issue 15601)
    for got, expected in zip(signal.csd(x, y, **kwargs), scipy_signal.csd(x, y, **kwargs)):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)


def test_csd_of_unequal_lengths_matches_scipy(scipy_signal):
    x, y = _noise(3, 50), _noise(3, 37)
    for got, expected in zip(signal.csd(x, y, nperseg=16), scipy_signal.csd(x, y, nperseg=16)):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("kwargs", [dict(), dict(window=("tukey", 0.5), noverlap=6),
                                    dict(boundary=False), dict(nfft=12)])
def test_istft_matches_scipy(scipy_signal, kwargs):
    zxx = (_noise(2, 7, 9) + 1j * _noise(2, 7, 9)).astype(np.complex64)
    nperseg = 12 if "nfft" in kwargs else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # scipy's NOLA warning without the boundary
        expected = scipy_signal.istft(zxx, nperseg=nperseg, **kwargs)
    for got, expected in zip(signal.istft(zxx, nperseg=nperseg, **kwargs), expected):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
