"""jax.scipy.signal against a numpy reference: the full N-d convolution summed term by term,
cropped as scipy crops each mode."""
import itertools

import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from shardc.scipy import signal

RNG = np.random.default_rng(0)


def _full(a, b):
    out = np.zeros(tuple(s1 + s2 - 1 for s1, s2 in zip(a.shape, b.shape)),
                   np.result_type(a, b, np.float32))
    for index in itertools.product(*[range(s) for s in b.shape]):
        window = tuple(slice(i, i + s) for i, s in zip(index, a.shape))
        out[window] += a * b[index]
    return out


def _cropped(full, a, b, mode):
    if mode == "full":
        return full
    if mode == "same":
        shape = a.shape
    else:
        shape = tuple(abs(s1 - s2) + 1 for s1, s2 in zip(a.shape, b.shape))
    start = [(f - s) // 2 for f, s in zip(full.shape, shape)]
    return full[tuple(slice(st, st + s) for st, s in zip(start, shape))]


def reference(a, b, mode, correlate=False):
    if correlate:
        b = np.flip(np.conj(b))
    return _cropped(_full(a, b), a, b, mode)


@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("shapes", [((9, 8), (3, 4)), ((3, 4), (9, 8)), ((13,), (4,)),
                                    ((5, 6, 4), (2, 3, 2))])
@pytest.mark.parametrize("method", ["direct", "fft"])
def test_convolve_and_correlate_match_the_reference(mode, shapes, method):
    a = RNG.normal(size=shapes[0]).astype(np.float32)
    b = RNG.normal(size=shapes[1]).astype(np.float32)
    got = signal.convolve(a, b, mode=mode, method=method)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, reference(a, b, mode), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(signal.correlate(a, b, mode=mode, method=method),
                               reference(a, b, mode, correlate=True), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("swapped", [False, True])
def test_2d_forms_including_complex_correlation(mode, swapped):
    a = (RNG.normal(size=(6, 5)) + 1j * RNG.normal(size=(6, 5))).astype(np.complex64)
    b = (RNG.normal(size=(2, 3)) + 1j * RNG.normal(size=(2, 3))).astype(np.complex64)
    if swapped:
        a, b = b, a
    np.testing.assert_allclose(signal.convolve2d(a, b, mode=mode), reference(a, b, mode),
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(signal.correlate2d(a, b, mode=mode),
                               _scipy_correlate2d(a, b, mode), rtol=1e-4, atol=1e-4)


def _scipy_correlate2d(a, b, mode):
    """JAX's correlate2d, built on the reference convolution: a convolution with one operand
    reversed and conjugated, which operand and whether the result is reversed back chosen
    per mode as JAX's (its 'same' aligns an even kernel as the reversed convolution does)."""
    swap = all(s1 <= s2 for s1, s2 in zip(a.shape, b.shape))
    if mode == "full" and swap:
        return np.conj(reference(np.flip(b), np.conj(a), mode))
    if mode == "valid" and swap and a.shape != b.shape:
        return reference(np.flip(b), np.conj(a), mode)
    return np.flip(reference(np.flip(a), np.conj(b), mode))


def test_fftconvolve_maps_over_the_axes_it_does_not_convolve():
    a = RNG.normal(size=(3, 10)).astype(np.float32)
    b = RNG.normal(size=(3, 4)).astype(np.float32)
    got = signal.fftconvolve(a, b, axes=1)
    want = np.stack([np.convolve(x, y) for x, y in zip(a, b)])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="mapped axes must have same shape"):
        signal.fftconvolve(a, b[:2], axes=1)


def test_detrend_removes_means_and_piecewise_lines():
    x = np.arange(12, dtype=np.float32).reshape(3, 4) ** 2
    np.testing.assert_allclose(signal.detrend(x, type="constant"), x - x.mean(-1, keepdims=True),
                               atol=1e-5)
    line = 3 * np.arange(10, dtype=np.float32) + 1
    np.testing.assert_allclose(signal.detrend(line), 0, atol=1e-4)
    pieces = np.concatenate([2 * np.arange(5.0), -np.arange(5.0) + 40]).astype(np.float32)
    np.testing.assert_allclose(signal.detrend(pieces, bp=[5]), 0, atol=1e-4)
    assert signal.detrend(np.arange(6)).dtype == np.float32


def test_gradient_and_jit():
    a = RNG.normal(size=(6, 6)).astype(np.float32)
    k = RNG.normal(size=(3, 3)).astype(np.float32)
    g = jax.grad(lambda x: jnp.sum(signal.convolve(x, k, mode="same") * a))(a)
    # the convolution is linear: its gradient is the correlation with the kernel
    np.testing.assert_allclose(g, signal.correlate(a, k, mode="same"), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(jax.jit(signal.correlate2d)(a, k), signal.correlate2d(a, k),
                               rtol=1e-6)


@pytest.mark.parametrize("call, error, message", [
    (lambda: signal.convolve(np.ones(4), np.ones(2), mode="x"), ValueError,
     "mode must be one of"),
    (lambda: signal.convolve(np.ones((4, 4)), np.ones(2)), ValueError,
     "same number of dimensions"),
    (lambda: signal.convolve(np.ones((3, 5)), np.ones((5, 3))), ValueError,
     "One input must be smaller than the other in every dimension"),
    (lambda: signal.convolve(np.ones(4), np.ones(2), method="x"), ValueError,
     "expected 'auto', 'fft', or 'direct'"),
    (lambda: signal.convolve2d(np.ones((4, 4)), np.ones((2, 2)), boundary="wrap"),
     NotImplementedError, "only supports boundary='fill'"),
    (lambda: signal.correlate2d(np.ones(4), np.ones(2)), ValueError,
     "only supports 2-dimensional inputs"),
    (lambda: signal.detrend(np.ones(4), type="x"), ValueError, "Trend type must be"),
    (lambda: signal.convolve(np.ones(0), np.ones(2)), ValueError, "zero-size arrays"),
])
def test_errors(call, error, message):
    with pytest.raises(error, match=message):
        call()
