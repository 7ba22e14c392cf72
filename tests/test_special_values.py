"""Edge values that must equal JAX 0.10.2's: logsumexp with b == 0, quantiles of infinities,
convolutions with NaN/inf, masked softmax, kl_div/rel_entr and gamma(-0.)."""
from __future__ import annotations

import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from shardc.scipy import special

inf, nan = np.inf, np.nan


def close(x, y):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-6)


def test_logsumexp_ignores_zero_b_in_max():
    a, b = jnp.array([-100.0, 1.0]), jnp.array([1.0, 0.0])
    close(special.logsumexp(a, b=b), -100.0)
    close(jax.grad(lambda a: special.logsumexp(a, b=b))(a), [1.0, 0.0])
    gb = np.asarray(jax.grad(lambda b: special.logsumexp(a, b=b))(b))
    assert np.isfinite(gb).all() and np.isclose(gb[0], 1.0)
    # a negative sum is NaN, or gives its sign with return_sign
    assert np.isnan(special.logsumexp(jnp.array([1.0, 2.0]), b=jnp.array([1.0, -1.0])))
    out, sign = special.logsumexp(jnp.array([1.0, 2.0]), b=jnp.array([1.0, -1.0]), return_sign=True)
    close(out, np.log(np.e ** 2 - np.e)); close(sign, -1.0)


def test_logsumexp_where():
    x = jnp.array([1.0, 5.0, 2.0])
    w = jnp.array([True, False, True])
    close(special.logsumexp(x, where=w), np.log(np.e + np.e ** 2))
    g = jax.grad(lambda x: special.logsumexp(x, where=w))(x)
    close(g, [np.e / (np.e + np.e ** 2), 0.0, np.e ** 2 / (np.e + np.e ** 2)])


def test_quantiles_of_infinities():
    assert np.asarray(jnp.median(jnp.array([inf, inf, inf]))) == inf
    assert np.asarray(jnp.nanmedian(jnp.array([inf, nan, inf]))) == inf
    assert np.asarray(jnp.quantile(jnp.array([-inf, 0.0, 1.0]), 0.3)) == -inf
    assert np.asarray(jnp.percentile(jnp.array([-inf, 0.0, 1.0]), 30.0)) == -inf
    assert np.asarray(jnp.nanquantile(jnp.array([nan, -inf, 0.0, 1.0]), 0.3)) == -inf
    close(jnp.median(jnp.array([4.0, 1.0, 3.0, 2.0])), 2.5)
    close(jnp.quantile(jnp.array([1.0, 2.0, 3.0, 4.0]), 0.1), 1.3)
    close(jax.grad(lambda x: jnp.quantile(x, 0.3))(jnp.array([3.0, 1.0, 2.0])), [0.0, 0.4, 0.6])


def test_convolve_nan_stays_local():
    close(jnp.convolve(jnp.array([1.0, nan, 3.0]), jnp.array([1.0, 1.0])), [1.0, nan, nan, 3.0])
    close(jnp.correlate(jnp.array([1.0, inf, 3.0, 4.0]), jnp.array([1.0, 2.0]), mode="full"),
          [2.0, inf, inf, 11.0, 4.0])
    x, y = np.arange(1.0, 8.0), np.array([0.5, -1.0, 2.0, 3.0])
    for mode in ("full", "same", "valid"):
        close(jnp.convolve(x, y, mode=mode), np.convolve(x, y, mode=mode))
        close(jnp.convolve(y, x, mode=mode), np.convolve(y, x, mode=mode))
        close(jnp.correlate(x, y, mode=mode), np.correlate(x, y, mode=mode))
        close(jnp.correlate(y, x, mode=mode), np.correlate(y, x, mode=mode))
    g = jax.grad(lambda v: jnp.convolve(jnp.array(x), v).sum())(jnp.array(y))
    close(g, np.full(4, x.sum()))


def test_masked_softmax():
    none = jnp.array([False, False])
    close(jax.nn.softmax(jnp.array([1.0, 2.0]), where=none), [0.0, 0.0])
    close(jax.nn.log_softmax(jnp.array([1.0, 2.0]), where=none), [-inf, -inf])
    w = jnp.array([True, False, True])
    e = np.exp([1.0, 3.0]) / np.exp([1.0, 3.0]).sum()
    close(jax.nn.softmax(jnp.array([1.0, 2.0, 3.0]), where=w), [e[0], 0.0, e[1]])
    close(jax.nn.log_softmax(jnp.array([1.0, 2.0, 3.0]), where=w), [np.log(e[0]), -inf, np.log(e[1])])
    assert np.isnan(np.asarray(jax.nn.softmax(jnp.array([1.0, inf])))).all()
    g = jax.grad(lambda x: jax.nn.softmax(x, where=w)[0])(jnp.array([1.0, 2.0, 3.0]))
    close(g, [e[0] * (1 - e[0]), 0.0, -e[0] * e[1]])


def test_kl_div_and_rel_entr():
    close(jax.grad(special.kl_div)(0.0, 1.0), -1.0)
    close(jax.grad(special.kl_div, argnums=1)(0.0, 1.0), 1.0)
    close(jax.grad(special.kl_div, argnums=(0, 1))(2.0, 0.5), (np.log(4.0), 1 - 4.0))
    close(jax.grad(special.rel_entr, argnums=(0, 1))(2.0, 0.5), (np.log(4.0) + 1, -4.0))
    assert np.isnan(special.kl_div(nan, 1.0)) and np.isnan(special.kl_div(1.0, nan))
    assert np.asarray(special.rel_entr(nan, 1.0)) == inf
    close(special.kl_div(jnp.array([0.0, 1.0, -1.0, 1.0]), jnp.array([2.0, 2.0, 1.0, -1.0])),
          [2.0, np.log(0.5) + 1, inf, inf])


def test_gamma_signed_zero():
    assert np.asarray(special.gamma(-0.0)) == -inf
    assert np.asarray(special.gamma(0.0)) == inf
    sgn = np.asarray(special.gammasgn(jnp.array([-0.0, 0.0, nan, -inf, -1.0, -0.5, -1.5, 2.0])))
    np.testing.assert_array_equal(sgn, [-1.0, 1.0, nan, nan, nan, -1.0, 1.0, 1.0])


def test_numpy_functions_at_edges_as_jax():
    """Values checked against JAX 0.10.2."""
    import shardc
    from shardc import lax
    # a finite value is never close to infinity; modf of an infinity is (NaN, inf)
    assert not bool(jnp.isclose(np.float32(1e38), np.float32(np.inf)))
    assert bool(jnp.isclose(np.float32(np.inf), np.float32(np.inf)))
    fraction, whole = jnp.modf(np.array([np.inf, -np.inf, 2.5], np.float32))
    assert np.isnan(np.asarray(fraction)[:2]).all() and float(fraction[2]) == 0.5
    # vecdot conjugates its first argument
    assert complex(jnp.vecdot(np.array([1j, 2.0]), np.array([1j, 3.0]))) == 7 + 0j
    # an arithmetic right shift copies the top bit of unsigned integers too
    shifted = lax.shift_right_arithmetic(np.array([255, 128, 7], np.uint8),
                                         np.array([1, 8, 1], np.uint8))
    np.testing.assert_array_equal(np.asarray(shifted), [255, 255, 3])
    # bfloat16 to integers saturates (NaN to 0), as the other floats do
    bf = jnp.asarray(np.array([-3.0, 1000.0, np.nan, np.inf], np.float32)).astype(jnp.bfloat16)
    np.testing.assert_array_equal(np.asarray(bf.astype(jnp.uint8)), [0, 255, 0, 255])
    np.testing.assert_array_equal(np.asarray(bf.astype(jnp.int32)),
                                  [-3, 1000, 0, 2 ** 31 - 1])
    # put's default mode reads indices as unravel_index does (negative from the end, clipped)
    np.testing.assert_array_equal(
        np.asarray(jnp.put(jnp.arange(4), np.array([9]), np.array([7]), inplace=False)),
        [0, 1, 2, 7])
    np.testing.assert_array_equal(
        np.asarray(jnp.put(jnp.arange(4), np.array([-5]), np.array([7]), inplace=False)),
        [7, 1, 2, 3])
    # intersect1d pads with its smallest element; an integer mean pads rounded
    np.testing.assert_array_equal(
        np.asarray(jnp.intersect1d(np.array([1, 2, 3]), np.array([3, 2]), size=3)), [2, 3, 2])
    np.testing.assert_array_equal(np.asarray(jnp.pad(np.array([1, 2]), 1, mode="mean")),
                                  [2, 1, 2, 2])
    np.testing.assert_array_equal(np.asarray(jnp.pad(np.array([-1, -2]), 1, mode="mean")),
                                  [-2, -1, -2, -2])
    # rounding integers returns them as they are
    rounded = jnp.round(np.array([15, 25], np.int8), 1)
    assert rounded.dtype == np.int8 and np.asarray(rounded).tolist() == [15, 25]
    with pytest.raises(NotImplementedError, match="decimals < 0"):
        jnp.round(np.array([15]), -1)
    # bfloat16 through the functions that read its limits
    x = jnp.asarray(np.array([1.0, np.nan, np.inf, -np.inf], np.float32)).astype(jnp.bfloat16)
    cleaned = np.asarray(jnp.nan_to_num(x), np.float32)
    assert cleaned[1] == 0 and cleaned[2] == float(shardc.dtypes.finfo(jnp.bfloat16).max)
    assert jnp.ldexp(x, np.int32(3)).dtype == jnp.bfloat16
    assert jnp.frexp(x)[0].dtype == jnp.bfloat16 and jnp.spacing(x).dtype == jnp.bfloat16


def test_derivatives_round_as_jaxs():
    """Derivatives spelt as JAX's rules spell them give JAX 0.10.2's bits: tanh's
    (t + t*y)(1 - y) (not 1 - y*y, which loses the small slope where y is near 1, and a
    bfloat16 ulp elsewhere), 1/x's (-t*x) * y**-2 and cbrt's (1/3) * y**-2."""
    x = jnp.array([0.5, 1.0, 1.5, 2.0], jnp.bfloat16)
    got = jax.vmap(jax.grad(jnp.tanh))(x)
    np.testing.assert_array_equal(np.asarray(got, np.float32),
                                  np.array([0.7890625, 0.419921875, 0.1787109375, 0.0693359375],
                                           np.float32))
    assert float(jax.grad(jnp.tanh)(np.float32(4.6))) == np.float32(0.00040407866)
    # the same rule forward (jvp) and backward (grad)
    y = np.float32(np.tanh(np.float32(0.7)))
    want = (np.float32(1) + y) * (np.float32(1) - y)
    assert float(jax.jvp(jnp.tanh, (np.float32(0.7),), (np.float32(1),))[1]) == want
    v = np.float32(1.7)
    assert float(jax.grad(lambda a: 1 / a)(v)) == -(np.float32(1) / (v * v))
    c = np.cbrt(v)
    assert float(jax.grad(jnp.cbrt)(v)) == np.float32(1 / 3) * (np.float32(1) / (c * c))


def test_zeta_and_polygamma_at_their_poles_are_xlas():
    # at q = 0, -1, ... XLA gives +inf for an even integer order, NaN otherwise (so polygamma
    # of an odd order is +inf there); recorded from JAX 0.10.2
    q = jnp.array([0.0, -1.0, -2.0, -0.5, 0.5])
    np.testing.assert_array_equal(special.zeta(2.0, q)[:3], [np.inf] * 3)
    assert np.isnan(np.asarray(special.zeta(3.0, q)[:3])).all()
    assert np.isnan(np.asarray(special.zeta(1.5, q)[:4])).all()
    np.testing.assert_allclose(special.zeta(3.0, q)[3:], [0.41439834, 8.414397], rtol=1e-5)
    np.testing.assert_array_equal(special.polygamma(1, q)[:3], [np.inf] * 3)
    np.testing.assert_array_equal(special.polygamma(3, q)[:3], [np.inf] * 3)
    assert np.isnan(np.asarray(special.polygamma(2, q)[:3])).all()
    assert np.isnan(np.asarray(special.polygamma(0, q)[:2])).all()


def test_betainc_limits_in_a_and_b():
    # a = 0 puts the mass at 0 (1 for x > 0), b = 0 at 1 (0 for x < 1); both zero is NaN
    got = special.betainc(jnp.array([0., 0., 2., 2., 0., 1.]), jnp.array([3., 3., 0., 0., 0., 1.]),
                          jnp.array([0.5, 0.0, 0.5, 1.0, 0.5, 0.25]))
    np.testing.assert_allclose(got, [1.0, 0.0, 0.0, 1.0, np.nan, 0.25], rtol=1e-6)
