"""jnp.fft and lax.fft against numpy.fft; gradients against finite differences and JAX
0.10.2's values; under jit, vmap and on split arrays; the errors JAX gives."""
from __future__ import annotations

import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from shardc import lax
from shardc.sharding import NamedSharding, PartitionSpec as P

RNG = np.random.default_rng(0)
X = RNG.standard_normal((4, 6)).astype(np.float32)
Z = (X + 1j * X[::-1]).astype(np.complex64)
H = np.fft.rfft2(X).astype(np.complex64)


@pytest.mark.parametrize("name, fn, ref, arg", [
    ("fft", lambda a: jnp.fft.fft(a), lambda a: np.fft.fft(a), X),
    ("fft n pads", lambda a: jnp.fft.fft(a, n=8), lambda a: np.fft.fft(a, n=8), X),
    ("fft n crops", lambda a: jnp.fft.fft(a, n=3, axis=0), lambda a: np.fft.fft(a, n=3, axis=0),
     X),
    ("ifft", lambda a: jnp.fft.ifft(a), lambda a: np.fft.ifft(a), Z),
    ("rfft", lambda a: jnp.fft.rfft(a), lambda a: np.fft.rfft(a), X),
    ("irfft", lambda a: jnp.fft.irfft(a), lambda a: np.fft.irfft(a), H),
    ("irfft n", lambda a: jnp.fft.irfft(a, n=7), lambda a: np.fft.irfft(a, n=7), H),
    ("fft2", lambda a: jnp.fft.fft2(a), lambda a: np.fft.fft2(a), Z),
    ("ifft2", lambda a: jnp.fft.ifft2(a), lambda a: np.fft.ifft2(a), Z),
    ("rfft2", lambda a: jnp.fft.rfft2(a), lambda a: np.fft.rfft2(a), X),
    ("irfft2", lambda a: jnp.fft.irfft2(a, s=(4, 6)), lambda a: np.fft.irfft2(a, s=(4, 6)), H),
    ("fftn axes", lambda a: jnp.fft.fftn(a, axes=(0,)), lambda a: np.fft.fftn(a, axes=(0,)), Z),
    ("rfftn s", lambda a: jnp.fft.rfftn(a, s=(4, 8)),
     lambda a: np.fft.rfftn(a, s=(4, 8), axes=(0, 1)), X),
    ("ortho", lambda a: jnp.fft.fft(a, norm="ortho"), lambda a: np.fft.fft(a, norm="ortho"), X),
    ("forward", lambda a: jnp.fft.ifft(a, norm="forward"),
     lambda a: np.fft.ifft(a, norm="forward"), Z),
    ("hfft", lambda a: jnp.fft.hfft(a), lambda a: np.fft.hfft(a), Z),
    ("ihfft", lambda a: jnp.fft.ihfft(a), lambda a: np.fft.ihfft(a), X),
    ("4-D", lambda a: jnp.fft.fftn(a), lambda a: np.fft.fftn(a),
     RNG.standard_normal((2, 3, 2, 4)).astype(np.float32)),
    ("4-D real", lambda a: jnp.fft.irfftn(jnp.fft.rfftn(a), s=a.shape),
     lambda a: a, RNG.standard_normal((2, 3, 2, 4)).astype(np.float32)),
    ("fftshift", lambda a: jnp.fft.fftshift(a), lambda a: np.fft.fftshift(a), X),
    ("ifftshift", lambda a: jnp.fft.ifftshift(a, axes=1), lambda a: np.fft.ifftshift(a, axes=1),
     X),
])
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_transforms_equal_numpy(name, fn, ref, arg, jit):
    got = (jax.jit(fn) if jit else fn)(jnp.asarray(arg))
    want = ref(arg)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)
    kind = np.complexfloating if np.iscomplexobj(want) else np.floating
    assert np.issubdtype(got.dtype, kind) and got.dtype.itemsize <= 8


def test_frequencies_and_lax_fft():
    np.testing.assert_allclose(np.asarray(jnp.fft.fftfreq(5, 0.1)), np.fft.fftfreq(5, 0.1))
    np.testing.assert_allclose(np.asarray(jnp.fft.rfftfreq(6)), np.fft.rfftfreq(6))
    assert jnp.fft.fftfreq(4).dtype == np.float32
    np.testing.assert_allclose(np.asarray(lax.fft(Z, lax.FftType.FFT, (6,))), np.fft.fft(Z),
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(lax.fft(Z, "ifft", (4, 6))), np.fft.ifft2(Z),
                               rtol=1e-4, atol=1e-4)
    assert jnp.fft.fft(jnp.arange(4)).dtype == np.complex64      # integers made complex


def _finite_difference(f, x, h=1e-3):
    x = x.astype(np.float64)
    grad = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[index] = h
        grad[index] = (f(x + e) - f(x - e)) / (2 * h)
    return grad


@pytest.mark.parametrize("name, fn, ref, arg", [
    ("fft", lambda a: jnp.abs(jnp.fft.fft(a)).sum(), lambda a: np.abs(np.fft.fft(a)).sum(), X),
    ("rfft", lambda a: (jnp.abs(jnp.fft.rfft(a)) ** 2).sum(),
     lambda a: (np.abs(np.fft.rfft(a)) ** 2).sum(), X),
    ("irfft", lambda a: (jnp.fft.irfft(a * (1 + 2j)) ** 2).sum(),
     lambda a: (np.fft.irfft(a * (1 + 2j)) ** 2).sum(), X[:, :4]),
    ("irfft odd", lambda a: (jnp.fft.irfft(a * (1 + 2j), n=7) ** 2 * jnp.arange(7)).sum(),
     lambda a: (np.fft.irfft(a * (1 + 2j), n=7) ** 2 * np.arange(7)).sum(), X[:, :4]),
    ("ifft2", lambda a: jnp.real(jnp.fft.ifft2(a * 1j) * jnp.arange(6)).sum(),
     lambda a: np.real(np.fft.ifft2(a * 1j) * np.arange(6)).sum(), X),
    ("rfftn", lambda a: (jnp.imag(jnp.fft.rfftn(a)) * jnp.arange(4)).sum(),
     lambda a: (np.imag(np.fft.rfftn(a)) * np.arange(4)).sum(), X),
])
def test_gradients_equal_finite_differences(name, fn, ref, arg):
    got = np.asarray(jax.grad(fn)(jnp.asarray(arg)))
    np.testing.assert_allclose(got, _finite_difference(ref, arg), rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(np.asarray(jax.jit(jax.grad(fn))(jnp.asarray(arg))), got,
                               rtol=1e-5, atol=1e-5)


def test_vmap_and_split_batches():
    np.testing.assert_allclose(np.asarray(jax.vmap(jnp.fft.fft)(X)), np.fft.fft(X), rtol=1e-4,
                               atol=1e-4)
    mesh = jax.make_mesh((4,), ("i",))
    x = jax.device_put(X, NamedSharding(mesh, P("i")))
    got = jax.jit(jnp.fft.rfft)(x)
    np.testing.assert_allclose(np.asarray(got), np.fft.rfft(X), rtol=1e-4, atol=1e-4)
    assert str(jax.typeof(got)) == "complex64[4@i,4]"
    f = jax.shard_map(lambda b: lax.psum(jnp.fft.fft(b), "i"), mesh=mesh, in_specs=P("i"),
                      out_specs=P())
    np.testing.assert_allclose(np.asarray(f(x)), np.fft.fft(X).sum(0, keepdims=True),
                               rtol=1e-4, atol=1e-4)
    # the transform keeps its operand's split (JAX's rule): rfft's last dimension of 3 does
    # not divide over 4 devices, JAX's error
    with pytest.raises(ValueError, match=r"Sharding spec \('i',\) implies that array axis 1 is "
                                         r"partitioned 4 times, but does not evenly divide the "
                                         r"dimension size 3"):
        jnp.fft.rfft(jax.device_put(X[:, :4], NamedSharding(mesh, P(None, "i"))))


def test_errors_are_jaxs():
    with pytest.raises(ValueError, match="only real valued inputs supported for rfft"):
        jnp.fft.rfft(jnp.asarray(Z))
    with pytest.raises(ValueError, match='Invalid norm value bad; should be "backward",'
                                         '"ortho" or "forward".'):
        jnp.fft.fft(X, norm="bad")
    with pytest.raises(ValueError, match="jax.numpy.fft.fft does not support multiple axes. "
                                         "Please use jax.numpy.fft.fftn."):
        jnp.fft.fft(X, axis=(0, 1))
    with pytest.raises(ValueError, match="fftn does not support repeated axes"):
        jnp.fft.fftn(X, axes=(0, 0))
    with pytest.raises(ValueError, match="Shape and axes have different lengths."):
        jnp.fft.fftn(X, s=(2,), axes=(0, 1))
    with pytest.raises(TypeError, match="Unknown FFT type value 'dct'"):
        lax.fft(Z, "dct", (6,))


@pytest.mark.parametrize("name", ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"])
def test_one_axis_transforms_refuse_sequences_of_axes_as_jax(name):
    # JAX's words, the axes as given (hfft and ihfft check before reading the axis's size)
    for axis, shown in (([1, 1], r"\[1, 1\]"), ((1, 1), r"\(1, 1\)"), ([2], r"\[2\]")):
        with pytest.raises(ValueError, match=rf"^jax\.numpy\.fft\.{name} does not support "
                                             rf"multiple axes\. Please use jax\.numpy\.fft\."
                                             rf"{name}n\. Got axis = {shown}\.$"):
            getattr(jnp.fft, name)(X, axis=axis)


@pytest.mark.parametrize("name", ["fft2", "ifft2", "rfft2", "irfft2"])
def test_two_and_n_axis_transforms_show_the_axes_as_given(name):
    with pytest.raises(ValueError, match=rf"^jax\.numpy\.fft\.{name} only supports 2 axes\. "
                                         rf"Got axes = \(0, 1, 2\)\.$"):
        getattr(jnp.fft, name)(X[None], axes=(0, 1, 2))
    with pytest.raises(ValueError, match=rf"^jax\.numpy\.fft\.{name} only supports 2 axes\. "
                                         rf"Got axes = \[0\]\.$"):
        getattr(jnp.fft, name)(X, axes=[0])
    nname = name[:-1] + "n"
    with pytest.raises(ValueError, match=rf"^jax\.numpy\.fft\.{nname} does not support "
                                         rf"repeated axes\. Got axes \[1, 1\]\.$"):
        getattr(jnp.fft, nname)(X, axes=[1, 1])
    with pytest.raises(ValueError, match="^Shape should be positive.$"):
        getattr(jnp.fft, name)(X, s=(0, 2))


@pytest.mark.parametrize("name", ["fftfreq", "rfftfreq"])
def test_frequencies_refuse_sequences_as_jax(name):
    with pytest.raises(ValueError, match=rf"^The n argument of jax\.numpy\.fft\.{name} only "
                                         rf"takes an int\. Got n = \[0, 1, 2\]\.$"):
        getattr(jnp.fft, name)(n=(0, 1, 2))
    with pytest.raises(ValueError, match=rf"^The d argument of jax\.numpy\.fft\.{name} only "
                                         rf"takes a single value\. Got d = \[0, 1\]\.$"):
        getattr(jnp.fft, name)(n=10, d=[0, 1])


def test_lax_fft_shape_errors_are_value_errors_as_jax():
    cases = [
        ((14, 15), np.float32, "fft", (4, 5, 6), r"FFT input shape \(14, 15\) must have at "
         r"least as many input dimensions as fft_lengths \(4, 5, 6\)\."),
        ((14, 15), np.float32, "fft", (17,), r"FFT input shape \(14, 15\) minor dimensions "
         r"must be equal to fft_lengths \(17,\)"),
        ((2, 14, 15), np.float32, "rfft", (14, 12), r"RFFT input shape \(2, 14, 15\) minor "
         r"dimensions must be equal to fft_lengths \(14, 12\)"),
        ((2, 14, 15), np.float32, "irfft", (13, 15), r"IRFFT input shape \(2, 14, 15\) minor "
         r"dimensions must be equal to all except the last fft_length, got "
         r"fft_lengths=\(13, 15\)"),
        ((14, 15), jnp.bfloat16, "rfft", (5, 6), "RFFT input must be float32 or float64, got "
         "bfloat16"),
    ]
    for shape, dtype, fft_type, lengths, message in cases:
        for run in (lambda x: lax.fft(x, fft_type, lengths),
                    jax.jit(lambda x: lax.fft(x, fft_type, lengths))):
            with pytest.raises(ValueError, match=message):
                run(np.ones(shape, dtype))


@pytest.mark.parametrize("name, arg, shape, dtype", [
    ("fft", np.zeros((0,), np.complex64), (0,), np.complex64),
    ("ifft", np.zeros((0, 3), np.complex64), (0, 3), np.complex64),
    ("irfft", np.zeros((0,), np.complex64), (0,), np.float32),
    ("hfft", np.zeros((3, 0), np.complex64), (3, 0), np.float32),
    ("fft2", np.zeros((3, 0), np.float32), (3, 0), np.complex64),
    ("rfft2", np.zeros((0, 3), np.float32), (0, 2), np.complex64),
    ("irfftn", np.zeros((0, 3), np.complex64), (0, 4), np.float32),
    ("irfft2", np.zeros((3, 0), np.complex64), (3, 0), np.float32),
])
@pytest.mark.parametrize("jit", [False, True])
def test_transforms_of_empty_arrays_are_empty(name, arg, shape, dtype, jit):
    # XLA's transform of no points is no points (numpy refuses one); an irfft of an empty
    # half spectrum has no points
    fn = getattr(jnp.fft, name)
    got = (jax.jit(fn) if jit else fn)(arg)
    assert got.shape == shape and got.dtype == dtype


def test_rfft_of_no_points_is_refused():
    with pytest.raises(ValueError, match=r"RFFT fft_lengths \(3, 0\) must end in a positive"):
        jnp.fft.rfft2(np.zeros((3, 0), np.float32))
