"""The samplers give JAX's values: for the same key, ``randint``, ``bernoulli``,
``permutation``, ``choice``, ``categorical``, ``truncated_normal``, ... and the ``nn``
initializers follow JAX's algorithms step by step (the same splits, bit widths, formulas and
clamps). Expected values were printed by JAX 0.10.2 (CPU) for the same calls: integer and
boolean results are pinned exactly, floats to a few ulp where a transcendental function is
involved."""
import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import shardc as jax
import shardc.numpy as jnp
from shardc import random


K = random.key(42)
RAW = random.PRNGKey(7)


def assert_ulps(got, want, ulps=2):
    """Equal to within ``ulps`` units in the last place of ``want`` (draws through lax.log,
    numpy's, within an ulp of XLA's), of one dtype and shape."""
    got = np.asarray(got)
    want = np.asarray(want, got.dtype)
    assert got.shape == want.shape
    finite = np.isfinite(want)
    assert_array_equal(got[~finite], want[~finite])
    gap = np.abs(got[finite].astype(np.float64) - want[finite].astype(np.float64))
    assert np.all(gap <= ulps * np.abs(np.spacing(want[finite])).astype(np.float64)), (got, want)


def _same_under_jit(fn, *args):
    """``fn(*args)`` eagerly and under jit agree exactly; the eager value."""
    eager = np.asarray(fn(*args))
    assert_array_equal(np.asarray(jax.jit(fn)(*args)), eager)
    return eager


def test_randint_is_jaxs():
    got = _same_under_jit(lambda k: random.randint(k, (10,), 0, 100), K)
    assert_array_equal(got, [44, 14, 71, 69, 9, 19, 77, 7, 94, 26])
    got = random.randint(RAW, (2, 5), -50, jnp.array([3, 7, 1000, 2 ** 31 - 1, 5]))
    assert_array_equal(got, [[-10, -27, 250, 1822441403, -38], [-15, -19, 654, 2074602666, 1]])
    got = random.randint(K, (6,), -2 ** 31, 2 ** 31 - 1)
    assert_array_equal(got, [977810628, 1236381714, -1367112521, -1019495231, -1671904627,
                             -1277190805])
    # narrow dtypes are drawn as int32 and converted (JAX's)
    got = _same_under_jit(lambda k: random.randint(k, (8,), -5, 300, jnp.int16), K)
    assert got.dtype == np.int16
    assert_array_equal(got, [199, 169, 171, 189, 119, 104, 52, 227])
    got = random.randint(K, (8,), 0, 256, jnp.uint8)
    assert got.dtype == np.uint8
    assert_array_equal(got, [196, 18, 183, 193, 141, 107, 129, 39])
    assert_array_equal(random.randint(K, (8,), -128, 128, jnp.int8),
                       [68, -110, 55, 65, 13, -21, 1, -89])
    with jax.enable_x64(True):
        got = random.randint(K, (6,), -2 ** 62, 2 ** 62, jnp.int64)
        assert_array_equal(got, [-145378591231461835, -3741815450302687554,
                                 -3506958169482507113, 1329420531636154415,
                                 3780175045237482401, -2791129331754305598])
        assert_array_equal(random.randint(RAW, (6,), 3, 1000), [412, 899, 709, 711, 574, 432])


def test_bernoulli_is_jaxs():
    got = _same_under_jit(lambda k: random.bernoulli(k, 0.3, (12,)), K)
    assert_array_equal(got, [0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0])
    assert_array_equal(random.bernoulli(RAW, jnp.array([0.1, 0.5, 0.9]), (2, 3)),
                       [[0, 0, 1], [0, 0, 1]])
    # drawn in p's dtype
    assert_array_equal(random.bernoulli(K, jnp.float16(0.3), (12,)),
                       [1, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1])
    got = _same_under_jit(lambda k: random.bernoulli(k, 0.3, (12,), mode="high"), K)
    assert_array_equal(got, [0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0])
    assert_array_equal(random.bernoulli(RAW, jnp.array([0.1, 1e-9, 0.9]), mode="high"),
                       [0, 0, 1])
    with pytest.raises(TypeError, match="must have a floating dtype, got int32"):
        random.bernoulli(K, 1, (2,))
    with pytest.raises(ValueError, match="expected 'high' or 'low'"):
        random.bernoulli(K, 0.5, (2,), mode="mid")


def test_permutation_is_jaxs():
    got = _same_under_jit(lambda k: random.permutation(k, 10), K)
    assert_array_equal(got, [7, 4, 2, 5, 3, 6, 8, 9, 0, 1])
    assert_array_equal(random.permutation(K, jnp.arange(7) * 10), [40, 20, 50, 30, 60, 0, 10])
    x = jnp.arange(12).reshape(3, 4)
    assert_array_equal(random.permutation(RAW, x, axis=1),
                       [[2, 3, 0, 1], [6, 7, 4, 5], [10, 11, 8, 9]])
    got = _same_under_jit(lambda k: random.permutation(k, x, axis=1, independent=True), RAW)
    assert_array_equal(got, [[2, 3, 0, 1], [4, 5, 7, 6], [10, 9, 11, 8]])
    # more than (2**32)**(1/3) items: two rounds of sorting
    big = np.asarray(random.permutation(K, 2000))
    assert_array_equal(big[:8], [1474, 815, 539, 874, 1693, 84, 995, 1191])
    assert_array_equal(big[-8:], [554, 1475, 1139, 753, 715, 1865, 1434, 1906])
    assert sorted(big) == list(range(2000))
    with pytest.raises(TypeError, match="x must be an integer or at least 1-dimensional"):
        random.permutation(K, 3.0)


def test_choice_is_jaxs():
    got = _same_under_jit(lambda k: random.choice(k, 10, (5,)), K)
    assert_array_equal(got, [4, 4, 1, 9, 9])
    assert_array_equal(random.choice(K, jnp.arange(12).reshape(3, 4), (2,), axis=1),
                       [[0, 2], [4, 6], [8, 10]])
    # without replacement: the first of a permutation
    assert_array_equal(random.choice(K, 10, (5,), replace=False), [7, 4, 2, 5, 3])
    assert_array_equal(random.choice(RAW, jnp.arange(12).reshape(4, 3), (2,), replace=False),
                       [[6, 7, 8], [9, 10, 11]])
    got = random.choice(RAW, jnp.arange(24).reshape(2, 3, 4), (2, 2), replace=False, axis=2)
    assert got.shape == (2, 3, 2, 2)
    assert_array_equal(got[1], [[[14, 15], [12, 13]], [[18, 19], [16, 17]],
                                [[22, 23], [20, 21]]])
    # weighted: the inverse of the cumulative sum at a uniform; without replacement, Gumbel
    # top-k
    p = jnp.array([0.1, 0.2, 0.3, 0.2, 0.2])
    got = _same_under_jit(lambda k: random.choice(k, 5, (8,), p=p), K)
    assert_array_equal(got, [2, 2, 2, 2, 2, 2, 4, 1])
    assert_array_equal(random.choice(RAW, jnp.arange(10) * 3, (2, 3), p=jnp.arange(10)),
                       [[15, 6, 24], [21, 15, 18]])
    assert_array_equal(random.choice(K, 5, (3,), replace=False, p=p), [2, 1, 3])
    got = random.choice(RAW, 7, (2, 2), replace=False, p=jnp.arange(1., 8.), mode="high")
    assert_array_equal(got, [[6, 2], [3, 5]])
    got = random.choice(RAW, jnp.arange(6.), (0,))
    assert got.shape == (0,) and got.dtype == np.float32
    with jax.enable_x64(True):
        assert random.choice(K, 5, (8,), p=p).dtype == np.int64
    with pytest.raises(TypeError, match="shape argument of jax.random.choice must be a seq"):
        random.choice(RAW, 7, 3)
    with pytest.raises(ValueError, match=r"p has shape \(4,\) and a.shape\[axis\] is 3"):
        random.choice(RAW, 3, (2,), p=jnp.ones(4) / 4)


def test_gumbel_is_jaxs():
    # -log(-log(u)): an ulp of lax.log's (numpy's) grows to a few through the outer log
    got = _same_under_jit(lambda k: random.gumbel(k, (6,)), K)
    assert_ulps(got, ulps=8, want=np.float32([0.3340933918952942, 0.952019453048706,
                                        0.7255305647850037, 0.5481715202331543,
                                        0.2268049567937851, 0.6261159181594849]))
    want_high = np.float32([0.39925816655158997, -0.12997561693191528, 0.043095413595438004,
                            0.1944437325000763, 0.5124775171279907, 0.12605616450309753])
    assert_ulps(random.gumbel(K, (6,), mode="high"), want_high, ulps=8)
    # the default mode follows jax_high_dynamic_range_gumbel, under jit too
    draw = jax.jit(lambda k: random.gumbel(k, (6,)))
    low = np.asarray(draw(K))
    jax.config.update("jax_high_dynamic_range_gumbel", True)
    try:
        assert_ulps(draw(K), want_high, ulps=8)
    finally:
        jax.config.update("jax_high_dynamic_range_gumbel", False)
    assert_array_equal(draw(K), low)
    got = random.gumbel(K, (6,), jnp.float16, mode="high")
    assert_array_equal(got, np.array([2.525390625, 1.5537109375, -1.3115234375,
                                      -0.346435546875, 0.515625, 1.0], np.float16))
    # "highest": the uniform built from 64 bits
    got = _same_under_jit(lambda k: random.gumbel(k, (20,), mode="highest"), K)
    assert_ulps(got[:6], ulps=8, want=np.float32([0.3992578089237213, -0.129975825548172,
                                            0.04309510067105293, 0.19444338977336884,
                                            0.5124772787094116, 0.1260560303926468]))
    assert_ulps(got[-2:], np.float32([2.569190263748169, -0.40771445631980896]), ulps=8)
    with pytest.raises(ValueError, match="Must provide valid mode for gumbel got: mid"):
        random.gumbel(K, (6,), mode="mid")


def test_categorical_is_jaxs():
    logits = jnp.array([[0.1, 1.0, -0.5], [2.0, 0.0, 0.3]])
    got = _same_under_jit(lambda k: random.categorical(k, logits), K)
    assert_array_equal(got, [1, 0])
    assert_array_equal(random.categorical(RAW, jnp.array([0.1, 1.0, -0.5, 0.7]), shape=(3, 2)),
                       [[1, 1], [3, 2], [3, 0]])
    # the noise is drawn in the logits' layout, whichever axis is sampled
    got = _same_under_jit(
        lambda k: random.categorical(k, jnp.arange(12.).reshape(4, 3) / 5, axis=0,
                                     shape=(2, 3)), K)
    assert_array_equal(got, [[3, 2, 3], [0, 2, 3]])
    got = random.categorical(RAW, jnp.arange(8.).reshape(1, 4, 2) / 3, axis=1, shape=(2, 3, 2))
    assert_array_equal(got, [[[2, 0], [3, 1], [2, 1]], [[3, 2], [3, 1], [3, 3]]])
    got = random.categorical(RAW, jnp.arange(24.).reshape(2, 3, 4) / 7, axis=-2,
                             shape=(5, 2, 4))
    assert_array_equal(got[0], [[1, 0, 2, 2], [2, 1, 0, 1]])
    assert_array_equal(got[4], [[1, 2, 1, 2], [2, 1, 2, 1]])
    got = random.categorical(K, jnp.array([0.1, 1.0, -0.5, 0.7]), shape=(6,), mode="high")
    assert_array_equal(got, [3, 2, 1, 1, 2, 2])
    got = random.categorical(RAW, jnp.array([0.1, 1.0, -0.5, 0.7], jnp.bfloat16), shape=(6,))
    assert_array_equal(got, [2, 1, 1, 3, 3, 3])
    # without replacement: the top of one perturbed copy
    got = random.categorical(K, jnp.arange(12.).reshape(3, 4) / 5, shape=(2, 3), replace=False)
    assert_array_equal(got, [[1, 3, 3], [3, 1, 1]])
    got = random.categorical(RAW, jnp.arange(12.).reshape(4, 3) / 5, axis=0, shape=(3, 3),
                             replace=False)
    assert_array_equal(got, [[2, 0, 3], [0, 3, 1], [3, 1, 2]])
    with pytest.raises(ValueError, match="must be a float dtype, got int32"):
        random.categorical(K, jnp.array([1, 2, 3]))
    with pytest.raises(ValueError, match="Incompatible shapes for broadcasting"):
        random.categorical(RAW, jnp.zeros((4, 3)), shape=(5, 3))
    with pytest.raises(ValueError, match=r"without replacement \(5\) cannot exceed number of "
                                         r"categories \(4\)"):
        random.categorical(RAW, jnp.zeros((4, 3)), axis=0, shape=(5, 3), replace=False)


def test_erf_is_xlas_in_float32():
    x = jnp.array([-3.9, -1.3, -0.2, 1e-3, 0.37, 0.7071, 1.5, 2.2, 3.8], jnp.float32)
    want = np.float32([-1.0, -0.934008002281189, -0.22270257771015167, 0.001128378789871931,
                       0.3992059826850891, 0.6826847195625305, 0.966105043888092,
                       0.9981372356414795, 0.9999998807907104])
    assert_array_equal(_same_under_jit(jax.lax.erf, x), want)
    want16 = np.float16([-1.0, -0.93408203125, -0.22265625, 0.001129150390625, 0.3994140625,
                         0.6826171875, 0.96630859375, 0.998046875, 1.0])
    assert_array_equal(jax.lax.erf(x.astype(jnp.float16)), want16)


def test_uniform_between_bounds_rounds_once_as_xla():
    # XLA computes floats * (maxval - minval) + minval as one fused multiply-add
    got = _same_under_jit(lambda k: random.uniform(k, (6,), minval=-0.7431, maxval=1.3377), K)
    assert_array_equal(got, np.float32([0.2738068997859955, 0.671422004699707,
                                        0.5392377972602844, 0.42426231503486633,
                                        0.19460134208202362, 0.47596973180770874]))
    got = random.uniform(RAW, (3, 4), minval=jnp.array([0., 1., -2., 5.]),
                         maxval=jnp.array([[1.], [3.], [7.]]))
    assert_array_equal(got, np.float32(
        [[0.6740899085998535, 1.0, -1.0914692878723145, 5.0],
         [2.192659854888916, 2.261859178543091, 0.24275171756744385, 5.0],
         [0.488348126411438, 1.5383930206298828, 1.340743899345398, 6.682502269744873]]))
    # still differentiable in the bounds, as a * (maxval - minval) + minval
    grad = jax.grad(lambda lo: random.uniform(K, (3,), minval=lo, maxval=2.0).sum())(0.5)
    u = np.asarray(random.uniform(K, (3,)))
    assert_allclose(grad, np.sum(1 - u), rtol=1e-6)


def test_truncated_normal_is_jaxs():
    got = _same_under_jit(lambda k: random.truncated_normal(k, -2.0, 1.0, (8,)), K)
    assert_array_equal(got, np.float32(
        [-0.19472239911556244, 0.19991998374462128, 0.06830012798309326, -0.04514751210808754,
         -0.27503320574760437, 0.005857396870851517, -1.3787320852279663, 0.4050241708755493]))
    got = random.truncated_normal(RAW, jnp.array([-1.0, 0.0, 2.0]), 3.0)
    assert_array_equal(got, np.float32([0.5974224805831909, 2.197085380554199,
                                        2.137733221054077]))
    got = random.truncated_normal(K, -2.0, 1.0, (8,), jnp.float16)
    assert_array_equal(got, np.float16([-1.373046875, -0.92041015625, 0.9189453125,
                                        0.363525390625, -0.2783203125, -0.59912109375,
                                        0.277099609375, -1.0830078125]))
    with pytest.raises(ValueError, match="truncated_normal parameter shapes must be"):
        random.truncated_normal(K, jnp.zeros(3), 1.0, (2, 1))


def test_initializers_are_jaxs():
    init = jax.nn.initializers
    f32 = np.float32
    cases = [
        (init.normal(5.0), [[-0.141523078083992, 2.3356592655181885, 1.4785147905349731],
                            [0.7677295804023743, -0.6201640963554382, 1.084615707397461]]),
        (init.uniform(10.0), [[4.8870954513549805, 6.797971725463867, 6.162714958190918],
                              [5.610160827636719, 4.50644588470459, 5.858658790588379]]),
        (init.truncated_normal(5.0),
         [[-0.13508248329162598, 2.2219040393829346, 1.409385323524475],
          [0.7325402498245239, -0.59181147813797, 1.034537434577942]]),
        (init.glorot_uniform(),
         [[-0.02473609521985054, 0.39391589164733887, 0.25473809242248535],
          [0.13367953896522522, -0.1081322431564331, 0.1881226748228073]]),
        (init.glorot_normal(),
         [[-0.019425004720687866, 0.31951215863227844, 0.2026711106300354],
          [0.10534006357192993, -0.0851031169295311, 0.14876757562160492]]),
        (init.lecun_normal(),
         [[-0.021717816591262817, 0.3572254478931427, 0.22659318149089813],
          [0.11777377128601074, -0.09514818340539932, 0.16632720828056335]]),
        (init.he_uniform(),
         [[-0.03911120072007179, 0.622835636138916, 0.4027762711048126],
          [0.21136590838432312, -0.17097207903862, 0.2974480390548706]]),
        (init.he_normal(),
         [[-0.030713632702827454, 0.5051931142807007, 0.32045117020606995],
          [0.16655728220939636, -0.13455985486507416, 0.2352222055196762]]),
    ]
    for fn, want in cases:
        assert_array_equal(_same_under_jit(lambda k: fn(k, (2, 3)), K), f32(want))
    got = init.variance_scaling(1.0, "fan_out", "truncated_normal")(K, (5, 7), jnp.float16)
    assert_array_equal(got[0], np.float16([-0.56201171875, -0.3544921875, 0.7236328125,
                                           0.283447265625, -0.05242919921875,
                                           -0.205322265625, 0.2337646484375]))
    got = init.variance_scaling(1.0, "fan_in", "uniform")(K, (3, 4), jnp.complex64)
    assert_array_equal(got[0], np.complex64(
        [-0.08316747844219208 - 0.5887191891670227j, 0.10772573202848434 - 0.44418829679489136j,
         0.32260143756866455 + 0.7049457430839539j, -0.05409052595496178 + 0.6801687479019165j]))
    # a convolution kernel: the receptive field counts in the fans
    got = init.glorot_normal()(K, (3, 3, 4, 8))
    assert_allclose(got[1, 2, 0], [-0.16293157637119293, 0.026637136936187744,
                                   -0.01529229711741209, 0.08395334333181381,
                                   -0.04891757294535637, 0.048665810376405716,
                                   0.03163277730345726, -0.11909494549036026], rtol=1e-6)


def test_exponential_logistic_laplace_rademacher_are_jaxs():
    got = _same_under_jit(lambda k: random.exponential(k, (6,)), K)
    assert_ulps(got, np.float32([0.670817494392395, 1.1388006210327148,
                                        0.9578199982643127, 0.8232924938201904,
                                        0.5990096926689148, 0.8815653324127197]))
    assert_ulps(random.logistic(K, (6,)),
                       np.float32([-0.0451694130897522, 0.7528398036956787,
                                   0.47375231981277466, 0.245286762714386,
                                   -0.19806653261184692, 0.3469008803367615]))
    # sign(u) log1p(-|u|): a positive u gives a negative draw
    got = _same_under_jit(lambda k: random.laplace(k, (6,)), K)
    assert_ulps(got, np.float32([0.022839652374386787, -0.4456535577774048,
                                        -0.2646729052066803, -0.1301453858613968,
                                        0.10392900556325912, -0.1884182244539261]))
    got = random.laplace(RAW, (6,), jnp.bfloat16)
    assert_array_equal(np.asarray(got, np.float32),
                       [2.5, 5.53125, -0.404296875, 0.96875, -0.052001953125, 0.18359375])
    assert_array_equal(random.rademacher(K, (10,)), [1, -1, -1, -1, 1, -1, 1, -1, -1, -1])
    got = random.rademacher(RAW, (7,), jnp.int16)
    assert got.dtype == np.int16
    assert_array_equal(got, [-1, -1, 1, 1, -1, -1, 1])
    with pytest.raises(ValueError, match="`exponential` must be a float dtype, got int32"):
        random.exponential(RAW, (2,), jnp.int32)


def test_multivariate_normal_is_jaxs():
    mean, cov = jnp.array([1.0, -1.0]), jnp.array([[2.0, 0.5], [0.5, 1.0]])
    wants = {
        "cholesky": [[0.9599712491035461, -0.5730453729629517],
                     [1.418187141418457, -0.751824140548706],
                     [0.8245911002159119, -0.8409391641616821]],
        "eigh": [[0.34919482469558716, -1.242292046546936],
                 [0.8900144696235657, -1.330559253692627],
                 [0.6599977016448975, -1.021289348602295]],
        "svd": [[0.8796701431274414, -0.5996153354644775],
                [0.5418118238449097, -1.04179847240448],
                [1.0963222980499268, -0.7510290145874023]],
    }
    for method, want in wants.items():
        got = _same_under_jit(
            lambda k: random.multivariate_normal(k, mean, cov, (3,), method=method), K)
        assert_allclose(got, want, rtol=1e-6)
    # integer mean and covariance are promoted to floats
    got = random.multivariate_normal(RAW, jnp.array([1, 2]), jnp.array([[2, 1], [1, 2]]))
    assert got.dtype == np.float32
    assert_allclose(got, [1.6381428241729736, 4.711550712585449], rtol=1e-6)
    got = random.multivariate_normal(RAW, jnp.zeros((2, 3)), jnp.eye(3) * jnp.array([1., 2., 3.]),
                                     (4, 2))
    assert_allclose(got[3], [[-0.3426169455051422, 2.759303569793701, 2.623974323272705],
                             [-0.2613246738910675, -0.543836772441864, 0.806678831577301]],
                    rtol=1e-6)
    with pytest.raises(ValueError, match="method must be one of"):
        random.multivariate_normal(RAW, jnp.zeros(2), jnp.eye(2), method="qr")
    with pytest.raises(ValueError, match=r"cov.shape == \(..., n, n\) for n=2, but got"):
        random.multivariate_normal(RAW, jnp.zeros(2), jnp.eye(3))


def test_traced_shapes_are_jaxs_type_error():
    @jax.jit
    def draw(n, d):
        return random.normal(K, (d, n))
    with pytest.raises(TypeError, match="Shapes must be 1D sequences of concrete values"):
        draw(5, 3)
    with pytest.raises(TypeError, match="Shapes must be 1D sequences of concrete values"):
        jax.jit(lambda n: random.uniform(K, n))(4)


def test_log_and_log1p_are_within_an_ulp_of_xlas_in_float32():
    # lax.log and log1p are numpy's (within an ulp of XLA's); erf_inv's log1p is XLA's own
    x = np.float32([1e-30, 0.0031, 0.3, 0.70710677, 0.9999, 1.0001, 2.5, 77.7, 3.3e38, 0, -1,
                    np.inf])
    want = np.float32([-69.07755279541016, -5.776353359222412, -1.2039728164672852,
                       -0.3465736210346222, -0.00010002159251598641, 0.00010001159535022452,
                       0.9162907600402832, 4.352855205535889, 88.69215393066406, -np.inf,
                       np.nan, np.inf])
    assert_ulps(_same_under_jit(jnp.log, x), want, ulps=1)
    y = np.float32([-0.9999, -0.6, -0.41, -0.2, -1e-6, 0, 3e-5, 0.1, 0.4142, 0.5, 10, np.inf])
    want = np.float32([-9.210174560546875, -0.9162907600402832, -0.5276327133178711,
                       -0.2231435477733612, -1.0000004522225936e-06, 0.0,
                       2.999954995175358e-05, 0.09531018137931824, 0.34656399488449097,
                       0.40546509623527527, 2.397895336151123, np.inf])
    assert_ulps(_same_under_jit(jnp.log1p, y), want, ulps=1)
    # so normal draws (sqrt 2 erf_inv(u)) are JAX's bit for bit
    got = _same_under_jit(lambda k: random.normal(k, (8,)), K)
    assert_array_equal(got, np.float32(
        [-0.02830461598932743, 0.4671318531036377, 0.2957029640674591, 0.15354591608047485,
         -0.12403281778097153, 0.21692314743995667, -1.440878987312317, 0.755859911441803]))
    many = np.asarray(random.normal(RAW, (4000,)))
    assert_array_equal(many[[17, 1234, 3999]],
                       np.float32([0.7317481637001038, 0.7765987515449524,
                                   -0.023785023018717766]))
    assert many.astype(np.float64).sum() == 12.21600782420137
