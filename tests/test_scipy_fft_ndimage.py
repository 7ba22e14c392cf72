"""jax.scipy.fft (dct, idct, dctn, idctn) and jax.scipy.ndimage.map_coordinates against
scipy: shapes, axes, sizes, norms, dtypes, modes and orders; under jit and vmap, gradients
against finite differences, sharded operands, and each error JAX raises."""
import itertools

import numpy as np
import pytest
import scipy.fft as osp_fft
import scipy.ndimage as osp_ndimage

import shardc as jax
import shardc.numpy as jnp
from shardc.scipy import fft as jsp_fft
from shardc.scipy import ndimage as jsp_ndimage
from shardc.sharding import NamedSharding, PartitionSpec as P

RNG = np.random.default_rng(0)


@pytest.fixture
def x64():
    """Runs the test with x64 on, restoring the setting afterwards."""
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", before)


def _normal(shape, dtype=np.float32):
    if np.issubdtype(dtype, np.complexfloating):
        return (RNG.normal(size=shape) + 1j * RNG.normal(size=shape)).astype(dtype)
    if np.issubdtype(dtype, np.integer):
        return RNG.integers(-20, 20, size=shape).astype(dtype)
    return RNG.normal(size=shape).astype(dtype)


def _close(got, want, tol=1e-4):
    np.testing.assert_allclose(np.asarray(got), want, rtol=tol, atol=tol)


# --- jax.scipy.fft ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["dct", "idct"])
@pytest.mark.parametrize("shape", [(10,), (2, 5), (9,), (1,), (3, 4, 5)])
@pytest.mark.parametrize("norm", [None, "ortho", "backward"])
def test_one_axis_transforms_are_scipys(name, shape, norm):
    x = _normal(shape)
    ours, theirs = getattr(jsp_fft, name), getattr(osp_fft, name)
    for n, axis in itertools.product([None, 1, 2, 7, 13], [-1, 0, len(shape) - 1]):
        got = ours(x, n=n, axis=axis, norm=norm)
        assert got.dtype == np.float32
        _close(got, theirs(x, n=n, axis=axis, norm=norm))


def _axes_and_sizes(shape):
    """Every ``(axes, s)`` JAX's tests try: no axes, all, each combination of up to three
    (with sizes from 1 to twice the length), and single negative axes."""
    cases = [([], None), ([], ()), (None, None)]
    for count in range(1, min(len(shape), 3) + 1):
        for axes in itertools.combinations(range(len(shape)), count):
            cases.append((axes, None))
            sizes = [sorted({1, shape[a] - 1, shape[a] + 2} - {0}) for a in axes]
            cases.extend((axes, s) for s in itertools.product(*sizes))
    cases.extend(((-i,), None) for i in range(1, len(shape) + 1))
    return cases


@pytest.mark.parametrize("name", ["dctn", "idctn"])
@pytest.mark.parametrize("shape", [(10,), (6, 5), (2, 3, 4), (2, 3, 4, 5)])
@pytest.mark.parametrize("norm", [None, "ortho"])
def test_multi_axis_transforms_are_scipys(name, shape, norm):
    x = _normal(shape)
    ours, theirs = getattr(jsp_fft, name), getattr(osp_fft, name)
    for axes, s in _axes_and_sizes(shape):
        _close(ours(x, s=s, axes=axes, norm=norm), theirs(x, s=s, axes=axes, norm=norm))


@pytest.mark.parametrize("name", ["dctn", "idctn"])
def test_sizes_without_axes_take_the_last_dimensions(name):
    x = _normal((2, 3, 4))
    ours, theirs = getattr(jsp_fft, name), getattr(osp_fft, name)
    for s in [(5,), (3, 6), 7, (1, 2, 3)]:
        _close(ours(x, s=s), theirs(x, s=s))
    _close(ours(x, s=(12, 7), axes=(-2, -1)), theirs(x, s=(12, 7), axes=(-2, -1)))


@pytest.mark.parametrize("name", ["dct", "idct", "dctn", "idctn"])
@pytest.mark.parametrize("dtype, result", [(np.int32, np.float32), (np.bool_, np.float32),
                                           (np.float16, np.float32),
                                           (np.complex64, np.complex64)])
def test_dtypes_promote_as_jaxs(name, dtype, result):
    x = _normal((4, 6), dtype) if dtype != np.bool_ else RNG.random((4, 6)) > 0.5
    got = getattr(jsp_fft, name)(x, norm="ortho")
    assert got.dtype == result
    _close(got, getattr(osp_fft, name)(x, norm="ortho"), tol=2e-3)


def test_float64_and_complex128_with_x64(x64):
    for name in ["dct", "idct", "dctn", "idctn"]:
        ours, theirs = getattr(jsp_fft, name), getattr(osp_fft, name)
        for dtype in [np.float64, np.complex128]:
            x = _normal((5, 7), dtype)
            got = ours(x, norm="ortho")
            assert got.dtype == dtype
            _close(got, theirs(x, norm="ortho"), tol=1e-12)
        assert ours(np.arange(6, dtype=np.int64)).dtype == np.float64
        assert ours(np.arange(6, dtype=np.int32)).dtype == np.float32
    # the inverse's normalization in double precision (JAX's issue 23895)
    _close(jsp_fft.idct(np.ones(3), n=10), osp_fft.idct(np.ones(3), n=10), tol=1e-14)


def test_no_axes_leave_the_input_as_it_is():
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    for name in ["dctn", "idctn"]:
        got = getattr(jsp_fft, name)(x, axes=[])
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, x)


def test_inverses_undo_the_transforms():
    x = _normal((6, 7))
    for norm in [None, "ortho"]:
        _close(jsp_fft.idct(jsp_fft.dct(x, axis=0, norm=norm), axis=0, norm=norm), x)
        _close(jsp_fft.idctn(jsp_fft.dctn(x, norm=norm), norm=norm), x)


def test_fft_under_jit_and_vmap():
    x = _normal((3, 8, 5))
    dct = jax.jit(lambda v: jsp_fft.dct(v, n=6, axis=1, norm="ortho"))
    _close(dct(x), osp_fft.dct(x, n=6, axis=1, norm="ortho"))
    idctn = jax.jit(jsp_fft.idctn, static_argnames=("s", "axes"))
    _close(idctn(x, s=(4, 9), axes=(0, 2)), osp_fft.idctn(x, s=(4, 9), axes=(0, 2)))
    _close(jax.vmap(jsp_fft.dctn)(x), osp_fft.dctn(x, axes=(1, 2)))
    _close(jax.vmap(lambda v: jsp_fft.idct(v, axis=1), in_axes=2, out_axes=2)(x),
           osp_fft.idct(x, axis=1))


def _finite_difference_grad(f, x, eps=1e-2):
    grad = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[index] = eps
        grad[index] = (float(f(x + step)) - float(f(x - step))) / (2 * eps)
    return grad


@pytest.mark.parametrize("name, kwargs", [("dct", dict(n=7, norm="ortho")),
                                          ("idct", dict(axis=0)),
                                          ("dctn", dict(s=(3, 4))),
                                          ("idctn", dict(norm="ortho"))])
def test_fft_gradients_are_finite_differences(name, kwargs):
    x = _normal((4, 5))
    weights = _normal(getattr(osp_fft, name)(x, **kwargs).shape)
    loss = lambda v: jnp.sum(weights * getattr(jsp_fft, name)(v, **kwargs))
    _close(jax.grad(loss)(x), _finite_difference_grad(loss, x), tol=2e-3)


def test_complex_gradient_transforms_both_parts():
    x = _normal((6,), np.complex64)
    weights = _normal((6,))
    grad = jax.grad(lambda v: jnp.sum(weights * jnp.imag(jsp_fft.dct(v))))(x)
    # the loss is weights . D y (D the DCT matrix, y the imaginary part), and JAX's gradient
    # of a real function of z = x + iy is df/dx - i df/dy
    transform = osp_fft.dct(np.eye(6), axis=0)
    _close(grad, -1j * (transform.T @ weights))


def test_fft_on_sharded_arrays_keeps_the_split():
    x = _normal((8, 6))
    mesh = jax.make_mesh((4,), ("i",))
    sharded = jax.device_put(x, NamedSharding(mesh, P("i")))
    for name in ["dct", "idct"]:
        for axis in [0, 1]:
            got = getattr(jsp_fft, name)(sharded, axis=axis)
            assert got.sharding.spec[0] == "i"
            _close(got, getattr(osp_fft, name)(x, axis=axis))
    _close(jax.jit(jsp_fft.dctn)(sharded), osp_fft.dctn(x))


@pytest.mark.parametrize("name", ["dct", "idct", "dctn", "idctn"])
def test_fft_errors_are_jaxs(name):
    f = getattr(jsp_fft, name)
    x = np.ones((2, 3), np.float32)
    with pytest.raises(NotImplementedError, match="^Only DCT type 2 is implemented.$"):
        f(x, type=3)
    with pytest.raises(ValueError, match=f"^jax.scipy.fft.{name}: norm='forward' is not "
                                         f"implemented$"):
        f(x, norm="forward")
    with pytest.raises(TypeError, match=f"^{name} requires ndarray or scalar arguments, got "
                                        f"<class 'list'> at position 0.$"):
        f([1.0, 2.0])
    if name.endswith("n"):
        with pytest.raises(ValueError, match=r"^s must have at most x.ndim \(2\) elements, "
                                             r"got 3$"):
            f(x, s=(2, 3, 4))
        with pytest.raises(ValueError, match=r"^repeated axis: \(0, 0\)$"):
            f(x, axes=(0, -2))
        with pytest.raises(ValueError, match="^axis 2 is out of bounds for array of "
                                             "dimension 2$"):
            f(x, axes=(0, 2))
    else:
        with pytest.raises(ValueError, match="^axis -3 is out of bounds for array of "
                                             "dimension 2$") as raised:
            f(x, axis=-3)
        assert type(raised.value) is ValueError


# --- jax.scipy.ndimage ------------------------------------------------------------------------

# JAX's 'constant' and 'wrap' are scipy's 'grid-constant' and 'grid-wrap'
SCIPY_MODES = {"constant": "grid-constant", "wrap": "grid-wrap", "nearest": "nearest",
               "mirror": "mirror", "reflect": "reflect"}


def _coordinates(shape, coordinates_shape, spread=1.5):
    """Coordinates reaching ``spread`` times each dimension's size beyond either end."""
    return [RNG.uniform(-spread * size, (1 + spread) * size, coordinates_shape)
            .astype(np.float32) for size in shape]


@pytest.mark.parametrize("shape", [(5,), (3, 4), (1, 4), (3, 4, 5)])
@pytest.mark.parametrize("mode", list(SCIPY_MODES))
@pytest.mark.parametrize("order", [0, 1])
def test_map_coordinates_is_scipys(shape, mode, order):
    for dtype, cval, coordinates_shape in [(np.float32, 0.0, (7,)),
                                           (np.float32, -2.5, (2, 3, 4)),
                                           (np.complex64, 1.0, (6,)),
                                           (np.int32, -3, (2, 5))]:
        x = _normal(shape, dtype) * 4
        coordinates = _coordinates(shape, coordinates_shape)
        got = jsp_ndimage.map_coordinates(x, coordinates, order, mode=mode, cval=cval)
        want = osp_ndimage.map_coordinates(x, coordinates, order=order,
                                           mode=SCIPY_MODES[mode], cval=cval)
        assert got.dtype == dtype and got.shape == coordinates_shape
        _close(got, want, tol=0 if dtype == np.int32 else 1e-4)


def test_map_coordinates_with_x64(x64):
    x = _normal((4, 6), np.float64)
    coordinates = [c.astype(np.float64) for c in _coordinates(x.shape, (9,))]
    for mode, order in itertools.product(SCIPY_MODES, [0, 1]):
        got = jsp_ndimage.map_coordinates(x, coordinates, order, mode=mode)
        assert got.dtype == np.float64
        _close(got, osp_ndimage.map_coordinates(x, coordinates, order=order,
                                                mode=SCIPY_MODES[mode]), tol=1e-12)


def test_order_zero_rounds_half_away_from_zero():
    x = np.arange(-3.0, 3.0, dtype=np.float32)
    at = [np.array([-0.5, 0.5, 1.5, 2.5, 3.5, -1.5], np.float32)]
    # -0.5 rounds to -1 (outside: cval), -1.5 to -2
    np.testing.assert_array_equal(jsp_ndimage.map_coordinates(x, at, 0, cval=9.0),
                                  [9.0, -2.0, -1.0, 0.0, 1.0, 9.0])
    np.testing.assert_array_equal(jsp_ndimage.map_coordinates(x, at, 0, mode="nearest"),
                                  [-3.0, -2.0, -1.0, 0.0, 1.0, -3.0])


def test_integer_inputs_round_back_to_their_dtype():
    x = np.array([0, 10, 20, -5], np.int32)
    got = jsp_ndimage.map_coordinates(x, [np.array([0.25, 0.5, 2.5, 1.06])], 1)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, [3, 5, 8, 11])     # 2.5, 5, 7.5 and 10.6, rounded
    # cval is cast to the input's dtype first (-1.5 is -1), as JAX's
    got = jsp_ndimage.map_coordinates(x, [np.array([-1.0, 5.0])], 0, cval=-1.5)
    np.testing.assert_array_equal(got, [-1, -1])
    # integer coordinates index directly
    got = jsp_ndimage.map_coordinates(x.astype(np.float32), [np.array([3, 7])], 1, mode="wrap")
    np.testing.assert_array_equal(got, [-5.0, -5.0])


def test_map_coordinates_under_jit_and_vmap():
    x = _normal((5, 6))
    coordinates = _coordinates(x.shape, (4, 3), spread=0.5)
    want = osp_ndimage.map_coordinates(x, coordinates, order=1, mode="mirror")
    jitted = jax.jit(lambda a, c: jsp_ndimage.map_coordinates(a, c, 1, mode="mirror"))
    _close(jitted(x, coordinates), want)
    # a batch of coordinate sets, and a batch of inputs
    batched = jax.vmap(lambda c: jsp_ndimage.map_coordinates(x, c, 1, mode="mirror"),
                       in_axes=1)
    _close(batched(np.stack(coordinates)), want)
    images = np.stack([x, 2 * x])
    per_image = jax.vmap(lambda a: jsp_ndimage.map_coordinates(a, coordinates, 1,
                                                               mode="mirror"))(images)
    _close(per_image, np.stack([want, 2 * want]))


@pytest.mark.parametrize("mode", list(SCIPY_MODES))
def test_map_coordinates_gradients_are_finite_differences(mode):
    x = _normal((4, 5))
    # coordinates away from integers, where the interpolation is smooth
    coordinates = np.stack([RNG.integers(-5, 9, 6) + RNG.uniform(0.2, 0.8, 6)
                            for _ in range(2)]).astype(np.float32)
    weights = _normal((6,))

    def loss(a, c):
        return jnp.sum(weights * jsp_ndimage.map_coordinates(a, list(c), 1, mode=mode,
                                                             cval=0.5))
    _close(jax.grad(loss, argnums=1)(x, coordinates),
           _finite_difference_grad(lambda c: loss(x, c), coordinates, eps=1e-2), tol=2e-3)
    _close(jax.grad(loss)(x, coordinates),
           _finite_difference_grad(lambda a: loss(a, coordinates), x), tol=2e-3)


def test_gradient_of_a_shift_is_continuous():
    def loss(delta):
        x = np.arange(100.0, dtype=np.float32)
        shifted = jsp_ndimage.map_coordinates(x, [np.arange(100.0, dtype=np.float32) + delta],
                                              order=1)
        return ((x - shifted) ** 2)[10:-10].mean()
    _close(jax.grad(loss)(0.5), 1.0)
    _close(jax.grad(loss)(1.0), 2.0)


def test_map_coordinates_errors_are_jaxs():
    x = np.arange(5.0, dtype=np.float32)
    c = [np.linspace(0, 5, num=3)]
    with pytest.raises(NotImplementedError, match="^jax.scipy.ndimage.map_coordinates "
                                                  "currently requires order<=1$"):
        jsp_ndimage.map_coordinates(x, c, order=2)
    with pytest.raises(NotImplementedError) as raised:
        jsp_ndimage.map_coordinates(x, c, order=1, mode="grid-wrap")
    message = str(raised.value)
    assert message.startswith("jax.scipy.ndimage.map_coordinates does not yet support mode "
                              "grid-wrap. Currently supported modes are {")
    assert all(f"'{mode}'" in message for mode in SCIPY_MODES)
    with pytest.raises(ValueError, match=r"^coordinates must be a sequence of length "
                                         r"input.ndim, but 2 != 1$"):
        jsp_ndimage.map_coordinates(x, [c[0], c[0]], order=1)
    # order, mode and cval are static: an array cval is refused as JAX's jit refuses it
    with pytest.raises(ValueError, match="Non-hashable static arguments are not supported"):
        jsp_ndimage.map_coordinates(x, c, 1, cval=jnp.array(1.0))
