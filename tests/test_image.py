"""jax.image (resize, scale_and_translate) against numpy references (interpolation, block
means, nearest indexing) and values recorded from JAX 0.10.2."""
import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from shardc.sharding import NamedSharding, PartitionSpec as P

RNG = np.random.default_rng(0)
X = np.array([[0., 1., 4., 2., -1.], [3., 0., 1., 5., 2.]], np.float32)


def _interp_rows(x, n):
    """Linear interpolation of each row at the half-centred samples of an n-pixel output."""
    m = x.shape[-1]
    samples = (np.arange(n) + 0.5) * m / n - 0.5
    return np.stack([np.interp(samples, np.arange(m), row) for row in x])


@pytest.mark.parametrize("n", [7, 10, 13])
@pytest.mark.parametrize("antialias", [True, False])
def test_linear_upsampling_interpolates(n, antialias):
    got = jax.image.resize(X, (2, n), "bilinear", antialias=antialias)
    assert got.dtype == np.float32 and got.shape == (2, n)
    np.testing.assert_allclose(got, _interp_rows(X, n), rtol=1e-5, atol=1e-6)


def test_linear_downsampling_without_antialias_interpolates():
    x = RNG.normal(size=(3, 12)).astype(np.float32)
    np.testing.assert_allclose(jax.image.resize(x, (3, 5), "linear", antialias=False),
                               _interp_rows(x, 5), rtol=1e-5, atol=1e-6)


def test_area_downsampling_is_the_block_mean():
    x = RNG.normal(size=(2, 8, 12, 3)).astype(np.float32)
    got = jax.image.resize(x, (2, 4, 3, 3), "area")
    want = x.reshape(2, 4, 2, 3, 4, 3).mean(axis=(2, 4))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_nearest_indexes_and_keeps_the_dtype():
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    got = jax.image.resize(x, (7, 2), "nearest")
    rows = np.floor((np.arange(7) + 0.5) * 3 / 7).astype(int)
    cols = np.floor((np.arange(2) + 0.5) * 4 / 2).astype(int)
    np.testing.assert_array_equal(got, x[rows][:, cols])
    assert got.dtype == np.int32
    # the other methods give a floating result
    assert jax.image.resize(x, (7, 2), "linear").dtype == np.float32


@pytest.mark.parametrize("method", ["linear", "cubic", "lanczos3", "lanczos5", "area",
                                    "cubic-pytorch"])
def test_an_unchanged_shape_is_the_identity(method):
    x = RNG.normal(size=(4, 5)).astype(np.float32)
    np.testing.assert_allclose(jax.image.resize(x, (4, 5), method), x, rtol=1e-6)


# recorded from JAX 0.10.2
@pytest.mark.parametrize("method, shape, antialias, want", [
    ("cubic", (2, 8), True,
     [[-0.0719557, 0.2437493, 1.1417236, 3.364624, 3.777832, 2.161621, 0.0836853, -1.2158672],
      [3.215867, 1.7652701, -0.0528564, 0.331665, 2.2634277, 4.9367676, 3.3857746,
       1.7841327]]),
    ("cubic-pytorch", (2, 8), False,
     [[-0.0928345, 0.187561, 1.1957397, 3.3948364, 3.8986816, 2.2312012, 0.1279297,
       -1.2785034],
      [3.2785034, 1.6298218, -0.0848999, 0.1134644, 2.4312744, 4.9276123, 3.6124268,
       1.7214966]]),
    ("lanczos3", (2, 3), True,
     [[0.3058527, 3.240045, 0.2716228], [1.4438214, 1.6217816, 3.556179]]),
    ("linear", (2, 3), True,
     [[0.4285714, 2.888889, 0.2857146], [1.7142859, 1.6666667, 3.2857141]]),
    ("lanczos5", (3, 4), False,
     [[-0.4357563, 2.7878492, 3.4375267, -1.3131733],
      [1.3791195, 0.7857563, 3.9400742, 0.7680671],
      [3.193996, -1.2163366, 4.4426227, 2.849308]]),
])
def test_kernels_match_jax(method, shape, antialias, want):
    np.testing.assert_allclose(jax.image.resize(X, shape, method, antialias=antialias), want,
                               rtol=1e-5, atol=1e-6)


def test_scale_and_translate_matches_jax_and_zeroes_samples_outside():
    got = jax.image.scale_and_translate(X, (2, 7), (1,), jnp.array([1.7]), jnp.array([-0.6]),
                                        "cubic")
    np.testing.assert_allclose(got, [
        [0.0713051, 0.5521935, 1.9995542, 3.9115727, 3.375, 1.7515574, -0.2701139],
        [2.6985378, 0.6458151, -0.0787828, 0.7875408, 3.25, 4.970832, 2.9276662]],
        rtol=1e-5, atol=1e-6)
    # shifted right by 3 pixels: the first 3 outputs sample left of the input
    shifted = jax.image.scale_and_translate(X, (2, 5), (1,), jnp.array([1.0]),
                                            jnp.array([3.0]), "linear")
    np.testing.assert_array_equal(shifted[:, :3], 0)
    np.testing.assert_allclose(shifted[:, 3:], X[:, :2])


def test_resize_is_linear_and_differentiates_as_its_transpose():
    x = RNG.normal(size=(6, 5)).astype(np.float32)
    c = RNG.normal(size=(4, 9)).astype(np.float32)
    f = lambda v: jax.image.resize(v, (4, 9), "bicubic")
    g = jax.grad(lambda v: jnp.sum(f(v) * c))(x)
    # <f(e_ij), c> for each basis image e_ij
    basis = np.eye(30, dtype=np.float32).reshape(30, 6, 5)
    want = np.array([np.sum(np.asarray(f(e)) * c) for e in basis]).reshape(6, 5)
    np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5)


def test_resize_under_vmap_jit_and_on_a_sharded_image():
    x = RNG.normal(size=(8, 6, 6, 3)).astype(np.float32)
    want = jax.image.resize(x, (8, 3, 3, 3), "linear")
    np.testing.assert_allclose(jax.vmap(lambda v: jax.image.resize(v, (3, 3, 3), "linear"))(x),
                               want, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(jax.jit(lambda v: jax.image.resize(v, (8, 3, 3, 3),
                                                                  "linear"))(x), want, rtol=1e-5, atol=1e-7)
    mesh = jax.make_mesh((8,), ("b",))
    sharded = jax.device_put(x, NamedSharding(mesh, P("b")))
    out = jax.image.resize(sharded, (8, 3, 3, 3), "linear")
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-7)
    assert out.sharding.spec[0] == "b"


@pytest.mark.parametrize("shape", [[10.5, 17], (6, 4.0)])
def test_a_shape_of_non_integers_is_a_type_error(shape):
    with pytest.raises(TypeError, match="Shapes must be 1D sequences of concrete values of "
                                        "integer type"):
        jax.image.resize(X, shape, "bicubic")
    with pytest.raises(TypeError, match="Shapes must be 1D sequences"):
        jax.image.scale_and_translate(X, shape, (0,), jnp.array([2.]), jnp.array([0.]),
                                      "linear")
    # an integer array is a shape
    assert jax.image.resize(X, jnp.array((10, 17)), "linear").shape == (10, 17)


def test_methods_by_name_and_errors():
    assert jax.image.ResizeMethod.from_string("trilinear") is jax.image.ResizeMethod.LINEAR
    assert jax.image.ResizeMethod.from_string("bicubic") is jax.image.ResizeMethod.CUBIC
    with pytest.raises(ValueError, match='Unknown resize method "foo"'):
        jax.image.resize(X, (2, 3), "foo")
    with pytest.raises(ValueError, match=r"shape must have length equal to the number of "
                                         r"dimensions of x;  \(3,\) vs \(2, 5\)"):
        jax.image.resize(X, (3,), "linear")
    with pytest.raises(ValueError, match="Nearest neighbor resampling is not currently "
                                         "supported for scale_and_translate"):
        jax.image.scale_and_translate(X, (2, 7), (1,), jnp.array([1.7]), jnp.array([0.]),
                                      "nearest")
