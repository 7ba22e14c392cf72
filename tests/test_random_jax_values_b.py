"""The gamma family, poisson and the transforms of ``random`` compute JAX's values: the same key
splits in the same order, the same formulas and loops, so for one key the draws are JAX's
(bit for bit where no transcendental function rounds on the way; within a few ulp where one
does). Expected values were printed by JAX 0.10.2 (CPU) for the same calls."""
import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from shardc import random

f32 = np.float32
ALPHAS = [0.3, 1.0, 2.5, 7.0, 0.05, 40.0]


def _close(got, want, rtol=2e-6):
    got = np.asarray(got)
    assert got.dtype == np.asarray(want).dtype
    np.testing.assert_allclose(got, want, rtol=rtol, atol=0)


# --- gamma, loggamma, beta, dirichlet ----------------------------------------------------------

def test_gamma_is_jaxs():
    k = random.key(0)
    _close(random.gamma(k, jnp.array(ALPHAS)), np.array(
        [6.2926972e-01, 7.2628492e-01, 1.5440423e+00, 1.0622705e+01, 1.1215913e-08,
         4.1120613e+01], f32))
    _close(random.gamma(random.PRNGKey(3), 1.5, (2, 3)), np.array(
        [[0.35186765, 0.4801843, 4.9697742], [0.4075234, 0.037913825, 0.8036478]], f32))
    # one key per entry, from a split of the key: jit draws the same
    a = jnp.linspace(0.1, 9.0, 7)
    np.testing.assert_array_equal(jax.jit(random.gamma)(k, a), random.gamma(k, a))


def test_gamma_in_float64_is_jaxs():
    with jax.enable_x64(True):
        got = random.gamma(random.key(0), jnp.array([0.3, 2.5, 7.0]), dtype=jnp.float64)
        _close(got, np.array([0.01796465549854392, 1.5385596967070414, 10.249570076361112]),
               rtol=1e-14)


def test_loggamma_is_jaxs():
    _close(random.loggamma(random.key(0), jnp.array(ALPHAS)), np.array(
        [-0.46319538, -0.31981286, 0.4344039, 2.3629937, -18.305933, 3.7165096], f32),
        rtol=1e-6 * 2)


def test_gamma_gradient_in_a_is_jaxs():
    """JAX differentiates a draw in ``a`` (the draw at the same quantile), by the series and
    continued fraction of its random_gamma_grad."""
    k = random.key(0)
    a = jnp.array(ALPHAS)
    _close(jax.grad(lambda a: random.gamma(k, a).sum())(a), np.array(
        [2.2258236e+00, 9.9277365e-01, 8.3078825e-01, 1.2524103e+00, 3.9946790e-06,
         1.0181142e+00], f32), rtol=5e-6)
    _close(jax.grad(lambda a: random.loggamma(k, a).sum())(a), np.array(
        [3.5371535e+00, 1.3669204e+00, 5.3806055e-01, 1.1789937e-01, 3.5616174e+02,
         2.4759218e-02], f32), rtol=5e-6)


def test_beta_and_dirichlet_are_jaxs():
    k = random.key(0)
    _close(random.beta(k, jnp.array([0.5, 2.0, 3.0]), 1.5),
           np.array([0.2229499, 0.85506094, 0.92541414], f32))
    _close(random.dirichlet(k, jnp.array([0.5, 2.0, 3.0]), (2,)), np.array(
        [[0.19176006, 0.38152826, 0.42671165], [0.012034549, 0.48558924, 0.5023763]], f32))
    with pytest.raises(ValueError, match="dirichlet requires alpha.ndim >= 1"):
        random.dirichlet(k, 1.0)


def test_the_original_scheme_gives_jaxs_table():
    """JAX's own table of values (its random_test), drawn without jax_threefry_partitionable."""
    import zlib

    def key(name):
        return random.key(zlib.adler32((name + "threefry2x32").encode()))
    with jax.threefry_partitionable(False):
        _close(random.gamma(key("gamma"), 0.8, (5,)), np.array(
            [0.8242206, 1.7244755, 0.5028824, 5.386132, 0.6855432], f32))
        _close(random.loggamma(key("loggamma"), 0.8, (5,)), np.array(
            [0.24055934, -3.5754426, -0.45094585, -2.1613722, -2.943277], f32))
        _close(random.beta(key("beta"), 0.8, 0.9, (5,)), np.array(
            [0.13258961, 0.8248933, 0.94836277, 0.9641547, 0.23544838], f32))
        _close(random.dirichlet(key("dirichlet"), np.array([0.5, 0.6, 0.7], f32), (2,)),
               np.array([[0.003128, 0.009694, 0.98717797],
                         [0.02593828, 0.47909105, 0.49497065]], f32))
        np.testing.assert_array_equal(random.poisson(key("poisson"), 5, (5,)),
                                      np.array([7, 3, 6, 11, 6], np.int32))


# --- poisson -----------------------------------------------------------------------------------

def test_poisson_is_jaxs():
    k = random.key(0)
    lam = jnp.array([0.5, 3.0, 9.9, 10.0, 25.0, 300.0, 0.0, -1.0])
    want = np.array([0, 0, 11, 13, 20, 307, 0, -1], np.int32)
    np.testing.assert_array_equal(random.poisson(k, lam), want)
    np.testing.assert_array_equal(jax.jit(random.poisson)(k, lam), want)
    np.testing.assert_array_equal(random.poisson(random.key(5), 4.0, (3, 4)), np.array(
        [[1, 2, 5, 4], [3, 2, 3, 3], [2, 2, 0, 2]], np.int32))
    with jax.enable_x64(True):
        got = random.poisson(k, jnp.array([3.0, 30.0]), dtype=jnp.int64)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, [0, 27])


def test_poisson_takes_threefry_keys_only():
    with pytest.raises(NotImplementedError, match="only implemented for the threefry2x32"):
        random.poisson(random.key(0, impl="rbg"), 3.0)


# --- the transforms -----------------------------------------------------------------------------

K1 = random.key(1)

# name: (draw, JAX's values); compared within a few ulp (exp, log, tan, erf_inv round)
TRANSFORMS = {
    "lognormal": (lambda: random.lognormal(K1, 0.5, (4,)),
                  [0.9256875, 1.0432633, 0.9342696, 0.9254103]),
    "cauchy": (lambda: random.cauchy(K1, (4,)),
               [-0.1952162, 0.10643734, -0.17155637, -0.19598646]),
    "chisquare": (lambda: random.chisquare(K1, jnp.array([0.5, 3.0, 10.0])),
                  [9.7074237e-04, 1.8115525e+00, 1.5418316e+01]),
    "t": (lambda: random.t(K1, jnp.array([0.5, 3.0, 10.0])), [1.2482606, -0.6574837, 1.4156599]),
    "f": (lambda: random.f(K1, 3.0, jnp.array([0.5, 3.0, 10.0])),
          [5.395197, 3.6864173, 0.08521492]),
    "pareto": (lambda: random.pareto(K1, 2.0, (4,)), [1.3346776, 1.4645087, 1.3434241, 1.334397]),
    "weibull_min": (lambda: random.weibull_min(K1, 2.0, 1.5, (4,)),
                    [1.3867693, 1.6700445, 1.4076091, 1.3860958]),
    "rayleigh": (lambda: random.rayleigh(K1, 2.0, (4,)),
                 [2.5676343, 2.241111, 2.541841, 2.5684733]),
    "maxwell": (lambda: random.maxwell(K1, (4,)), [0.22252384, 1.284708, 2.3824213, 0.8305838]),
    "double_sided_maxwell": (lambda: random.double_sided_maxwell(K1, 1.0, 2.0, (4,)),
                             [3.5525095, -4.169679, 2.5741, 3.4237757]),
    "triangular": (lambda: random.triangular(K1, 0.0, 0.3, 2.0, (4,)),
                   [0.61846113, 0.74093676, 0.6274557, 0.6181706]),
    "wald": (lambda: random.wald(K1, jnp.array([0.5, 1.0, 2.0, 4.0])),
             [0.3440044, 0.4925651, 0.597461, 0.7367487]),
    "generalized_normal": (lambda: random.generalized_normal(K1, 1.5, (4,)),
                           [0.36778095, -0.22509871, 0.32924864, 0.14993909]),
    "ball": (lambda: random.ball(K1, 3, 2, (2,)),
             [[-0.1512913, 0.45654598, 0.636299], [0.75003374, 0.15619831, -0.01705654]]),
    "orthogonal": (lambda: random.orthogonal(K1, 3),
                   [[-0.07174075, 0.11106675, -0.9912201], [-0.07201905, 0.99061006, 0.11621087],
                    [0.9948198, 0.07972381, -0.06306826]]),
    "orthogonal_wide": (lambda: random.orthogonal(K1, 2, m=3),
                        [[-0.12034643, -0.10596386, 0.9870605],
                         [0.5959598, -0.8029001, -0.01353187]]),
}


@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_transforms_are_jaxs(name):
    draw, want = TRANSFORMS[name]
    # orthogonal's Q comes from a QR (Householder reflections, rounded differently)
    _close(draw(), np.array(want, f32), rtol=2e-6 if "orthogonal" not in name else 1e-5)


def test_exact_transforms_are_jaxs_bit_for_bit():
    """Where only exact operations (and floors) act on the draws, every value is JAX's."""
    np.testing.assert_array_equal(random.geometric(K1, jnp.array([0.01, 0.1, 0.5, 0.9])),
                                  np.array([82, 6, 2, 1], np.int32))
    np.testing.assert_array_equal(
        random.binomial(K1, jnp.array([5.0, 20.0, 100.0, 1000.0, 30.0, -1.0, np.inf]),
                        jnp.array([0.3, 0.3, 0.3, 0.6, 0.99, 0.3, 0.3])),
        np.array([1, 8, 26, 616, 30, np.nan, np.inf], f32))
    np.testing.assert_array_equal(
        random.multinomial(K1, 100.0, jnp.array([0.2, 0.3, 0.1, 0.4]), shape=(2, 4)),
        np.array([[24, 25, 6, 45], [16, 30, 11, 43]], f32))
    np.testing.assert_array_equal(
        random.multinomial(K1, jnp.array([10.0, 1000.0]), jnp.array([0.5, 0.25, 0.25]),
                           shape=(2, 3)),
        np.array([[6, 4, 0], [517, 245, 238]], f32))


def test_wald_fuses_products_into_sums_as_xla_does():
    """XLA's CPU code rounds ``a * b + c`` once (a fused multiply-add); wald's roots are
    JAX's bit for bit wherever its normal draws are (these are)."""
    np.testing.assert_array_equal(random.wald(K1, jnp.array([0.5, 1.0, 2.0, 4.0])),
                                  np.array([0.3440044, 0.4925651, 0.597461, 0.7367487], f32))


def test_transforms_keep_jaxs_shapes_and_quirks():
    # double_sided_maxwell appends the parameters' shape, even to their own
    assert random.double_sided_maxwell(K1, jnp.zeros(2), 2.0).shape == (2, 2)
    assert random.double_sided_maxwell(K1, jnp.zeros(2), 2.0, (3,)).shape == (3, 2)
    # rayleigh of a uniform 0 is inf, as JAX's (entry 103009 of this draw)
    x = np.asarray(random.rayleigh(random.key(7), 2.0, (200_000,)))
    assert np.flatnonzero(np.isinf(x)).tolist() == [103009]
    with pytest.raises(ValueError, match="must be an int dtype"):
        random.geometric(K1, 0.5, dtype=jnp.float32)
    with pytest.raises(ValueError, match="must be a float dtype"):
        random.binomial(K1, 3.0, 0.5, dtype=jnp.int32)
    with pytest.raises(ValueError, match="broadcast-compatible with shape"):
        random.t(K1, jnp.ones(3), (2,))


@pytest.mark.parametrize("name", ["wald", "t", "binomial", "multinomial", "orthogonal"])
def test_transforms_under_jit_are_eager(name):
    draw = {"wald": lambda k: random.wald(k, 1.5, (6,)),
            "t": lambda k: random.t(k, 3.0, (6,)),
            "binomial": lambda k: random.binomial(k, 40.0, 0.4, (6,)),
            "multinomial": lambda k: random.multinomial(k, 9.0, jnp.array([0.5, 0.5])),
            "orthogonal": lambda k: random.orthogonal(k, 3)}[name]
    np.testing.assert_array_equal(jax.jit(draw)(K1), draw(K1))


@pytest.mark.parametrize("name", ["gamma", "poisson", "binomial", "multinomial", "beta"])
def test_rejection_loops_in_a_shard_map_body_draw_what_vmap_draws(name):
    """Each device's key and parameters vary over the mesh: the loops' carries do too."""
    from shardc.sharding import PartitionSpec as P
    draw = {"gamma": lambda k, x: random.gamma(k, x),
            "poisson": lambda k, x: random.poisson(k, x * 4),
            "binomial": lambda k, x: random.binomial(k, x * 20, 0.4),
            "multinomial": lambda k, x: random.multinomial(k, x[0], jnp.array([0.3, 0.7]),
                                                           shape=(2,)),
            "beta": lambda k, x: random.beta(k, x, 2.0)}[name]
    keys = random.split(random.key(3), 2)
    x = jnp.array([1.5, 4.0])
    body = jax.shard_map(lambda k, x: draw(k[0], x), mesh=jax.make_mesh((2,), ("x",)),
                         in_specs=(P("x"), P("x")), out_specs=P("x"))
    want = jax.vmap(lambda k, x: draw(k, x[None]))(keys, x)
    np.testing.assert_array_equal(np.asarray(body(keys, x)).ravel(), np.asarray(want).ravel())


def test_lax_random_gamma_grad_is_jaxs():
    from shardc import lax
    got = lax.random_gamma_grad(jnp.array([0.5, 2.0, 40.0, 0.05, 3.0]),
                                jnp.array([0.3, 1.0, 41.0, 1e-6, 0.0]))
    _close(got, np.array([1.0098022e+00, 7.5077868e-01, 1.0166259e+00, 2.6635357e-04, 0.0], f32),
           rtol=5e-6)
    assert np.isnan(np.asarray(lax.random_gamma_grad(jnp.array([-1.0, np.nan]), 1.0))).all()
    half = lax.random_gamma_grad(jnp.array([0.5, 2.0], jnp.float16), jnp.array([0.3, 1.0],
                                                                               jnp.float16))
    assert half.dtype == jnp.float16
    np.testing.assert_array_equal(half, np.array([1.01, 0.751], np.float16))


def test_parameters_that_do_not_cast_safely_raise_jaxs_error():
    with pytest.raises(jax.dtypes.TypePromotionError,
                       match="In arguments to t, cannot safely cast argument of type float32 "
                             "to float16"):
        random.t(K1, np.array([3.0]), dtype=jnp.float16)
    with pytest.raises(jax.dtypes.TypePromotionError, match="argument of type complex64"):
        random.beta(K1, 1 + 2j, 1.0)
    with jax.enable_x64(True):
        with pytest.raises(jax.dtypes.TypePromotionError, match="float64 to float32"):
            random.wald(K1, np.array([1.0]), dtype=jnp.float32)
    # Python numbers and integer arrays are weak enough
    assert random.t(K1, 3, dtype=jnp.float16).dtype == jnp.float16
    assert random.pareto(K1, jnp.array([3], jnp.int32), dtype=jnp.float16).dtype == jnp.float16
