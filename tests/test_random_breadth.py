"""jax.random's samplers beyond uniform/normal: shapes, dtypes, supports and moments (fixed
seeds, tolerances of several standard errors), under jit and in shard_map bodies. The values
themselves are pinned to JAX's in test_random_jax_values_a.py."""
from __future__ import annotations

import math
import re
import warnings

import numpy as np
import pytest

import shardc
import shardc.numpy as jnp
from shardc import random
from shardc.sharding import PartitionSpec as P

from breadth_checks import mesh2

N = 40000
EULER = 0.5772156649015329


def _moments(x):
    x = np.asarray(x, np.float64)
    return x.mean(), x.var()


@pytest.mark.parametrize("name,mean,var,low,high", [
    ("exponential", 1.0, 1.0, 0.0, np.inf),
    ("gumbel", EULER, np.pi ** 2 / 6, -np.inf, np.inf),
    ("logistic", 0.0, np.pi ** 2 / 3, -np.inf, np.inf),
    ("laplace", 0.0, 2.0, -np.inf, np.inf),
])
def test_continuous_samplers_moments_support_shape_dtype(name, mean, var, low, high):
    sampler = getattr(random, name)
    x = sampler(random.key(0), (N,))
    assert x.shape == (N,) and x.dtype == np.float32
    values = np.asarray(x)
    assert np.isfinite(values).all() and (values >= low).all() and (values <= high).all()
    got_mean, got_var = _moments(values)
    assert abs(got_mean - mean) < 5 * math.sqrt(var / N)
    assert got_var == pytest.approx(var, rel=0.06)
    assert sampler(random.PRNGKey(1), (2, 3)).shape == (2, 3)
    jitted = shardc.jit(lambda k: sampler(k, (4,)))(random.key(2))
    assert_equal = np.testing.assert_array_equal
    assert_equal(np.asarray(jitted), np.asarray(sampler(random.key(2), (4,))))


def test_exponential_quantiles():
    x = np.sort(np.asarray(random.exponential(random.key(3), (N,)), np.float64))
    for q in (0.1, 0.5, 0.9):
        assert x[int(q * N)] == pytest.approx(-math.log(1 - q), rel=0.05)


def _truncated_moments(a, b):
    pdf = lambda t: math.exp(-t * t / 2) / math.sqrt(2 * math.pi)
    cdf = lambda t: 0.5 * (1 + math.erf(t / math.sqrt(2)))
    z = cdf(b) - cdf(a)
    mean = (pdf(a) - pdf(b)) / z
    term = lambda t: 0.0 if math.isinf(t) else t * pdf(t)
    var = 1 + (term(a) - term(b)) / z - mean ** 2
    return mean, var


@pytest.mark.parametrize("lower,upper", [(-1.0, 2.0), (-2.0, 2.0), (0.5, 3.0), (-np.inf, 0.0)])
def test_truncated_normal_moments_and_bounds(lower, upper):
    x = random.truncated_normal(random.key(4), lower, upper, (N,))
    assert x.dtype == np.float32 and x.shape == (N,)
    values = np.asarray(x)
    assert (values > lower).all() and (values < upper).all()
    mean, var = _truncated_moments(lower, upper)
    got_mean, got_var = _moments(values)
    assert abs(got_mean - mean) < 5 * math.sqrt(var / N)
    assert got_var == pytest.approx(var, rel=0.06)


def test_truncated_normal_broadcasts_bounds():
    lower = np.array([-1.0, 0.0, 1.0], np.float32)
    x = random.truncated_normal(random.key(5), lower, 2.0)
    assert x.shape == (3,)
    many = np.asarray(random.truncated_normal(random.key(5), lower, 2.0, (1000, 3)))
    assert (many > lower).all() and (many < 2).all()


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
def test_low_precision_uniform_normal_truncated_normal(dtype):
    # a float16 draw from 24 bits overflowed to inf, a bfloat16 one rounded up to 1; the normal
    # and truncated normal built on them were inf and NaN
    u = random.uniform(random.key(8), (N,), dtype)
    assert u.dtype == dtype
    u = np.asarray(u, np.float64)
    assert u.min() >= 0 and u.max() < 1
    # on JAX's grid of 2**nmant values in [0, 1)
    grid = 2 ** jnp.finfo(dtype).nmant
    assert np.all(u * grid == np.floor(u * grid)) and len(np.unique(u)) <= grid
    assert abs(u.mean() - 0.5) < 5 * math.sqrt(1 / 12 / N)
    assert u.var() == pytest.approx(1 / 12, rel=0.06)
    n = random.normal(random.key(9), (N,), dtype)
    assert n.dtype == dtype
    mean, var = _moments(n)
    assert np.isfinite(np.asarray(n, np.float64)).all()
    assert abs(mean) < 5 * math.sqrt(1 / N) and var == pytest.approx(1.0, rel=0.06)
    t = random.truncated_normal(random.key(10), -2.0, 2.0, (N,), dtype)
    assert t.dtype == dtype
    t = np.asarray(t, np.float64)
    assert (t > -2).all() and (t < 2).all()
    assert t.var() == pytest.approx(_truncated_moments(-2.0, 2.0)[1], rel=0.06)


def test_complex_normal_parts_and_the_samplers_dtype_errors():
    # JAX: independent real and imaginary parts of variance 1/2 each (E|z|^2 = 1)
    z = random.normal(random.key(11), (N,), jnp.complex64)
    assert z.dtype == np.complex64
    z = np.asarray(z, np.complex128)
    for part in (z.real, z.imag):
        assert abs(part.mean()) < 5 * math.sqrt(0.5 / N)
        assert part.var() == pytest.approx(0.5, rel=0.06)
    assert abs(np.mean(z.real * z.imag)) < 5 * 0.5 / math.sqrt(N)
    q = np.asarray(random.orthogonal(random.key(12), 3, (), jnp.complex64), np.complex128)
    assert np.abs(q.imag).max() > 0.1                      # unitary, not a real rotation
    np.testing.assert_allclose(q.conj().T @ q, np.eye(3), atol=1e-5)
    key = random.key(0)
    with pytest.raises(ValueError, match="dtype argument to `uniform` must be a float dtype, "
                                         "got complex64"):
        random.uniform(key, (2,), jnp.complex64)
    with pytest.raises(ValueError, match="dtype argument to `normal` must be a float or "
                                         "complex dtype, got int32"):
        random.normal(key, (2,), jnp.int32)
    with pytest.raises(ValueError, match="dtype argument to `truncated_normal` must be a "
                                         "float dtype, got complex64"):
        random.truncated_normal(key, -1.0, 1.0, (2,), jnp.complex64)


def test_bernoulli_and_rademacher():
    b = random.bernoulli(random.key(6), 0.3, (N,))
    assert b.dtype == np.bool_ and b.shape == (N,)
    assert np.asarray(b).mean() == pytest.approx(0.3, abs=5 * math.sqrt(0.21 / N))
    p = np.array([0.0, 0.5, 1.0], np.float32)
    per = random.bernoulli(random.key(7), p)
    assert per.shape == (3,)
    grid = np.asarray(random.bernoulli(random.key(7), p, (2000, 3)))
    assert not grid[:, 0].any() and grid[:, 2].all()
    r = np.asarray(random.rademacher(random.key(8), (N,)))
    assert r.dtype == np.int32 and set(np.unique(r)) == {-1, 1}
    assert abs(r.mean()) < 5 / math.sqrt(N)
    assert random.rademacher(random.key(8), (3,), jnp.float32).dtype == np.float32


def test_categorical_frequencies_axis_and_shape():
    probs = np.array([0.1, 0.2, 0.0, 0.7])
    logits = np.log(np.where(probs > 0, probs, 1e-30)).astype(np.float32)
    draws = np.asarray(random.categorical(random.key(9), logits, shape=(N,)))
    assert draws.dtype == np.int32
    freq = np.bincount(draws, minlength=4) / N
    assert freq[2] == 0
    np.testing.assert_allclose(freq, probs, atol=5 * math.sqrt(0.25 / N))
    batch = np.stack([logits, logits[::-1]], axis=1)             # [4 classes, 2 rows]
    per_row = random.categorical(random.key(10), batch, axis=0)
    assert per_row.shape == (2,)
    many = np.asarray(random.categorical(random.key(11), batch, axis=0, shape=(5000, 2)))
    assert (many[:, 0] != 2).all() and (many[:, 1] != 1).all()
    with pytest.raises(ValueError, match="Incompatible shapes for broadcasting"):
        random.categorical(random.key(0), batch, axis=0, shape=(3,))


def test_choice_with_and_without_replacement():
    key = random.key(12)
    draws = np.asarray(random.choice(key, 5, (N,)))
    np.testing.assert_allclose(np.bincount(draws, minlength=5) / N, np.full(5, 0.2), atol=0.01)
    p = np.array([0.5, 0.0, 0.25, 0.25], np.float32)
    weighted = np.asarray(random.choice(key, 4, (N,), p=p))
    np.testing.assert_allclose(np.bincount(weighted, minlength=4) / N, p, atol=0.01)
    unique = np.asarray(random.choice(key, 10, (2, 5), replace=False))
    assert unique.shape == (2, 5) and sorted(unique.ravel()) == list(range(10))
    items = np.arange(30.0, dtype=np.float32).reshape(10, 3)
    rows = np.asarray(random.choice(key, items, (4,), replace=False))
    assert rows.shape == (4, 3) and len({tuple(r) for r in rows}) == 4
    assert all(tuple(r) in {tuple(i) for i in items} for r in rows)
    cols = random.choice(key, items, (2,), axis=1)
    assert cols.shape == (10, 2)
    # without replacement and weighted: zero-weight items never come first
    firsts = [int(np.asarray(random.choice(random.key(s), 4, (2,), replace=False, p=p))[0])
              for s in range(200)]
    assert 1 not in firsts
    with pytest.raises(ValueError, match="larger sample"):
        random.choice(key, 3, (4,), replace=False)
    with pytest.raises(ValueError, match="p must be None or a 1D vector"):
        random.choice(key, 3, (2,), p=np.ones(4, np.float32) / 4)


def test_permutation_axis_and_independent():
    key = random.key(13)
    assert sorted(np.asarray(random.permutation(key, np.int32(7)))) == list(range(7))
    assert sorted(np.asarray(random.permutation(key, jnp.asarray(4)))) == list(range(4))
    with pytest.raises(TypeError, match="must be an integer"):
        random.permutation(key, 3.0)
    perm = np.asarray(random.permutation(key, 50))
    assert sorted(perm) == list(range(50)) and (perm != np.arange(50)).any()
    x = np.arange(24).reshape(4, 6)
    rows = np.asarray(random.permutation(key, x))
    assert sorted(map(tuple, rows)) == sorted(map(tuple, x))
    cols = np.asarray(random.permutation(key, x, axis=1))
    assert sorted(map(tuple, cols.T)) == sorted(map(tuple, x.T))
    each = np.asarray(random.permutation(key, x, axis=1, independent=True))
    assert all(sorted(r) == sorted(o) for r, o in zip(each, x))
    # every position is equally likely to hold item 0
    positions = [int(np.argmax(np.asarray(random.permutation(random.key(s), 4)) == 0))
                 for s in range(800)]
    np.testing.assert_allclose(np.bincount(positions, minlength=4) / 800, 0.25, atol=0.06)


def test_samplers_in_a_shard_map_body_differ_per_device_key():
    keys = random.split(random.key(14), 2)
    body = shardc.shard_map(lambda k: random.gumbel(k[0], (1, 3)), mesh=mesh2(),
                            in_specs=P("x"), out_specs=P("x"))
    out = np.asarray(body(keys))
    assert out.shape == (2, 3)
    np.testing.assert_array_equal(out[0], np.asarray(random.gumbel(keys[0], (1, 3)))[0])
    np.testing.assert_array_equal(out[1], np.asarray(random.gumbel(keys[1], (1, 3)))[0])


def test_multivariate_normal_mean_and_covariance():
    mean = np.array([1.0, -2.0, 0.5], np.float32)
    root = np.array([[1.0, 0, 0], [0.5, 1.0, 0], [-0.3, 0.2, 0.7]], np.float32)
    cov = root @ root.T
    x = np.asarray(random.multivariate_normal(random.key(15), mean, cov, (N,)), np.float64)
    assert x.shape == (N, 3)
    np.testing.assert_allclose(x.mean(0), mean, atol=5 * math.sqrt(cov.diagonal().max() / N))
    np.testing.assert_allclose(np.cov(x.T), cov, atol=0.05)
    batched = random.multivariate_normal(random.key(16), np.zeros((4, 3), np.float32), cov)
    assert batched.shape == (4, 3) and batched.dtype == np.float32
    by_eigh = np.asarray(random.multivariate_normal(random.key(15), mean, cov, (N,),
                                                    method="eigh"), np.float64)
    np.testing.assert_allclose(np.cov(by_eigh.T), cov, atol=0.05)
    np.testing.assert_allclose(by_eigh.mean(0), mean, atol=5 * math.sqrt(cov.diagonal().max() / N))
    by_svd = np.asarray(random.multivariate_normal(random.key(15), mean, cov, (N,),
                                                   method="svd"), np.float64)
    np.testing.assert_allclose(np.cov(by_svd.T), cov, atol=0.05)
    with pytest.raises(ValueError, match="cov"):
        random.multivariate_normal(random.key(0), mean, cov[:2, :2])


@pytest.mark.parametrize("a", [0.4, 1.0, 3.5])
def test_gamma_moments_and_support(a):
    x = random.gamma(random.key(17), a, (N,))
    assert x.dtype == np.float32 and x.shape == (N,)
    values = np.asarray(x, np.float64)
    assert (values >= 0).all() and np.isfinite(values).all()
    mean, var = _moments(values)
    assert abs(mean - a) < 5 * math.sqrt(a / N)
    assert var == pytest.approx(a, rel=0.08)
    per_entry = random.gamma(random.key(18), np.array([1.0, 50.0], np.float32), (2000, 2))
    assert np.asarray(per_entry).mean(0) == pytest.approx([1.0, 50.0], rel=0.1)
    jitted = shardc.jit(lambda k: random.gamma(k, a, (5,)))(random.key(19))
    np.testing.assert_array_equal(np.asarray(jitted), np.asarray(random.gamma(random.key(19), a,
                                                                              (5,))))


def test_beta_and_dirichlet_moments():
    a, b = 2.0, 5.0
    x = np.asarray(random.beta(random.key(20), a, b, (N,)), np.float64)
    assert ((x > 0) & (x < 1)).all()
    mean, var = _moments(x)
    assert mean == pytest.approx(a / (a + b), abs=0.005)
    assert var == pytest.approx(a * b / ((a + b) ** 2 * (a + b + 1)), rel=0.08)
    alpha = np.array([1.0, 2.0, 3.0], np.float32)
    d = np.asarray(random.dirichlet(random.key(21), alpha, (N,)), np.float64)
    assert d.shape == (N, 3)
    np.testing.assert_allclose(d.sum(1), 1.0, atol=1e-6)
    np.testing.assert_allclose(d.mean(0), alpha / alpha.sum(), atol=0.005)
    assert random.dirichlet(random.key(22), np.ones((4, 3), np.float32)).shape == (4, 3)


@pytest.mark.parametrize("lam", [0.0, 0.7, 4.0, 9.5, 10.0, 30.0])
def test_poisson_frequencies_match_the_pmf(lam):
    x = np.asarray(random.poisson(random.key(23), lam, (N,)))
    assert x.dtype == np.int32 and x.shape == (N,) and (x >= 0).all()
    counts = np.bincount(x)
    ks = np.arange(len(counts))
    pmf = np.exp(-lam + ks * math.log(lam) - np.array([math.lgamma(k + 1) for k in ks])) \
        if lam > 0 else (ks == 0).astype(float)
    # each frequency within 5 standard errors of its probability
    assert (np.abs(counts / N - pmf) <= 5 * np.sqrt(pmf * (1 - pmf) / N) + 1e-4).all()
    assert abs(x.mean() - lam) <= 5 * math.sqrt(max(lam, 1e-3) / N)


def test_poisson_broadcasts_rates():
    rates = np.array([1.0, 50.0], np.float32)
    assert random.poisson(random.key(24), rates).shape == (2,)
    many = np.asarray(random.poisson(random.key(24), rates, (5000, 2)))
    np.testing.assert_allclose(many.mean(0), rates, rtol=0.05)


# --- the transformed samplers: their moments against the distributions' (200k draws) -----------

_K = random.key(7)
_N = 200_000
_MOMENTS = {
    # name: (draw, mean, variance) of the distribution
    "lognormal": (lambda: random.lognormal(_K, 0.5, (_N,)), np.exp(0.125),
                  (np.exp(0.25) - 1) * np.exp(0.25)),
    "chisquare": (lambda: random.chisquare(_K, 3.0, (_N,)), 3.0, 6.0),
    "t": (lambda: random.t(_K, 5.0, (_N,)), 0.0, 5.0 / 3.0),
    "f": (lambda: random.f(_K, 4.0, 10.0, (_N,)), 10.0 / 8.0, None),
    "pareto": (lambda: random.pareto(_K, 3.0, (_N,)), 1.5, 0.75),
    "weibull_min": (lambda: random.weibull_min(_K, 2.0, 1.5, (_N,)),
                    2.0 * math.gamma(1 + 1 / 1.5), None),
    # (key 8: key 7's draws hold a uniform of 0, which JAX's rayleigh takes to inf)
    "rayleigh": (lambda: random.rayleigh(random.key(8), 2.0, (_N,)), 2.0 * np.sqrt(np.pi / 2),
                 (4 - np.pi) / 2 * 4.0),
    "maxwell": (lambda: random.maxwell(_K, (_N,)), 2 * np.sqrt(2 / np.pi), 3 - 8 / np.pi),
    "double_sided_maxwell": (lambda: random.double_sided_maxwell(_K, 1.0, 2.0, (_N,)), 1.0,
                             12.0),
    "geometric": (lambda: random.geometric(_K, 0.3, (_N,)), 1 / 0.3, 0.7 / 0.09),
    "triangular": (lambda: random.triangular(_K, 0.0, 1.0, 3.0, (_N,)), 4.0 / 3.0,
                   (9 + 1 - 3) / 18),
    "wald": (lambda: random.wald(_K, 2.0, (_N,)), 2.0, 8.0),
    "generalized_normal": (lambda: random.generalized_normal(_K, 2.0, (_N,)), 0.0, 0.5),
}


@pytest.mark.parametrize("name", list(_MOMENTS))
def test_transformed_samplers_have_their_distributions_moments(name):
    draw, mean, var = _MOMENTS[name]
    x = np.asarray(draw(), np.float64)
    assert x.shape == (_N,)
    assert abs(x.mean() - mean) < 0.02 * max(1.0, abs(mean)), (x.mean(), mean)
    if var is not None:
        assert abs(x.var() - var) < 0.05 * max(1.0, var), (x.var(), var)


def test_cauchy_loggamma_ball_and_orthogonal():
    assert abs(np.median(np.asarray(random.cauchy(_K, (_N,))))) < 0.02
    # log Gamma(0.5) draws: E[log X] = digamma(0.5)
    assert abs(np.asarray(random.loggamma(_K, 0.5, (_N,))).mean() - (-1.9635)) < 0.03
    points = np.asarray(random.ball(_K, 3, 2, (_N,)))
    radius = np.linalg.norm(points, axis=-1)
    assert points.shape == (_N, 3) and radius.max() <= 1.0
    assert abs(np.mean(radius) - 0.75) < 0.01          # E|x| = d / (d + 1) in the unit ball
    q = np.asarray(random.orthogonal(_K, 4, (3,)))
    np.testing.assert_allclose(q @ np.swapaxes(q, -1, -2), np.broadcast_to(np.eye(4), (3, 4, 4)),
                               atol=1e-5)
    wide, tall = random.orthogonal(_K, 3, m=5), random.orthogonal(_K, 5, m=3)
    assert wide.shape == (3, 5) and tall.shape == (5, 3)
    np.testing.assert_allclose(np.asarray(tall).T @ np.asarray(tall), np.eye(3), atol=1e-5)
    np.testing.assert_allclose(np.asarray(wide) @ np.asarray(wide).T, np.eye(3), atol=1e-5)


def test_binomial_and_multinomial_moments_and_edges():
    x = np.asarray(random.binomial(_K, 10.0, 0.3, (_N,)))
    assert x.dtype == np.float32 and abs(x.mean() - 3.0) < 0.03 and abs(x.var() - 2.1) < 0.05
    assert x.min() >= 0 and x.max() <= 10 and np.array_equal(x, np.round(x))
    np.testing.assert_array_equal(random.binomial(_K, 7.0, np.array([0.0, 1.0])), [0.0, 7.0])
    counts = np.asarray(random.multinomial(_K, 10.0, np.array([0.2, 0.3, 0.5]), shape=(_N, 3)))
    assert (counts.sum(1) == 10).all()
    np.testing.assert_allclose(counts.mean(0), [2.0, 3.0, 5.0], atol=0.03)
    np.testing.assert_allclose(counts.var(0), [1.6, 2.1, 2.5], atol=0.05)
    assert random.multinomial(_K, 4.0, np.array([0.5, 0.5])).shape == (2,)


def test_randint_bounds_traced_arrays_clipped_and_wide():
    key = random.key(0)
    # traced and array bounds, under jit and vmap
    got = shardc.jit(lambda hi: random.randint(key, (200,), 0, hi))(10)
    assert got.dtype == np.int32 and 0 <= int(got.min()) and int(got.max()) < 10
    lo, hi = np.array([0, 10, 20]), np.array([5, 15, 25])
    got = np.asarray(random.randint(key, (1000, 3), lo, hi))
    assert ((got >= lo) & (got < hi)).all() and len(np.unique(got[:, 1])) == 5
    got = np.asarray(shardc.vmap(lambda m: random.randint(key, (50,), m, 10))(jnp.arange(3)))
    assert (got >= np.arange(3)[:, None]).all() and (got < 10).all()
    # a wide span reaches every residue (a float draw scaled up would not)
    wide = np.asarray(random.randint(key, (20000,), 0, 2 ** 25))
    assert len(np.unique(wide % 8)) == 8 and abs((wide % 2).mean() - 0.5) < 0.02
    full = np.asarray(random.randint(key, (20000,), -2 ** 31, 2 ** 31 - 1))
    assert full.min() < -2 ** 30 and full.max() > 2 ** 30
    # bounds clipped to the dtype; a maxval past its range reaches its largest value
    small = np.asarray(random.randint(key, (4000,), -5, 300, np.uint8))
    assert small.dtype == np.uint8 and small.min() == 0 and small.max() == 255
    assert (np.asarray(random.randint(key, (5,), 5, 2)) == 5).all()
    with pytest.raises(TypeError, match="randint only accepts integer dtypes"):
        random.randint(key, (2,), 0, 3, np.float32)
    with pytest.raises(ValueError, match=re.escape(
            "Incompatible shapes for broadcasting: shapes=[(2,), (3,), ()]")):
        random.randint(key, (2,), np.zeros(3, np.int32), 5)
    with pytest.raises(ValueError, match="randint parameter shapes must be broadcast-compatible"):
        random.randint(key, (2,), np.zeros((3, 2), np.int32), 5)


def test_default_dtypes_follow_x64_as_jax_does():
    """Samplers default to the default float, int or uint: 64-bit ones under x64 (JAX's
    ``dtype=float``), 32-bit ones otherwise; 64-bit bits fill both words."""
    from shardc.experimental import enable_x64
    key = random.key(0)
    draws = lambda: {
        "uniform": random.uniform(key, (3,)), "normal": random.normal(key, (3,)),
        "gamma": random.gamma(key, 2.0, (3,)), "cauchy": random.cauchy(key, (3,)),
        "randint": random.randint(key, (3,), 0, 10), "poisson": random.poisson(key, 3.0, (3,)),
        "geometric": random.geometric(key, 0.5, (3,)), "bits": random.bits(key, (64,))}
    with enable_x64():
        wide = draws()
    narrow = draws()
    for name in ("uniform", "normal", "gamma", "cauchy"):
        assert (wide[name].dtype, narrow[name].dtype) == (np.float64, np.float32), name
    for name in ("randint", "poisson", "geometric"):
        assert (wide[name].dtype, narrow[name].dtype) == (np.int64, np.int32), name
    assert (wide["bits"].dtype, narrow["bits"].dtype) == (np.uint64, np.uint32)
    assert (np.asarray(wide["bits"]) >> np.uint64(32)).any()      # the high word is drawn too
    assert 0 <= float(np.asarray(wide["uniform"]).min()) and float(
        np.asarray(wide["uniform"]).max()) < 1


def test_poisson_of_rates_without_draws_and_fold_in_of_large_ints():
    key = random.key(0)
    np.testing.assert_array_equal(
        np.asarray(random.poisson(key, jnp.array([-1.0, 0.0, np.nan]), shape=(3,))), [-1, 0, -1])
    big = random.fold_in(key, 2**32 - 2)
    assert big.shape == () and not np.array_equal(np.asarray(random.key_data(big)),
                                                  np.asarray(random.key_data(key)))
    for bad in (-1, 2**32):         # no uint32: JAX's OverflowError, never wrapped around
        for k in (key, random.PRNGKey(0)):
            with pytest.raises(OverflowError, match=f"Python integer {bad} out of bounds for "
                                                    "uint32"):
                random.fold_in(k, bad)


def test_dirichlet_of_tiny_alpha_gamma_and_loggamma_agree_and_categorical_broadcasts():
    key = random.key(0)
    tiny = np.asarray(random.dirichlet(key, 1e-5 * jnp.ones(3), shape=(5,)))
    assert np.isfinite(tiny).all() and np.allclose(tiny.sum(1), 1)      # it was NaN
    a = jnp.array([0.5, 1.0, 3.0])
    np.testing.assert_allclose(np.asarray(random.gamma(key, a, (3,))),
                               np.exp(np.asarray(random.loggamma(key, a, (3,)))), rtol=1e-5)
    # a size-1 batch dimension of the logits broadcasts to shape (JAX's)
    draws = random.categorical(key, jnp.zeros((3, 1, 10)), axis=-1, shape=(3, 4))
    assert draws.shape == (3, 4) and 0 <= int(draws.min()) and int(draws.max()) < 10
    with pytest.raises(ValueError, match="Incompatible shapes for broadcasting"):
        random.categorical(key, jnp.zeros((3, 2, 10)), shape=(3, 4))


def test_samplers_given_numbers_compile_once_whatever_the_numbers():
    # as JAX's jitted samplers: the parameters are the compiled program's arguments, so a
    # probability or bounds changing at every call trace nothing again
    from shardc.random import _keys
    key = shardc.random.key(3)
    _keys._PROGRAMS.clear()
    for k in range(4):
        p, low, high = 0.1 * (k + 1), -1.0 - k, 1.0 + k
        got = shardc.random.bernoulli(key, p, (64,))
        np.testing.assert_array_equal(
            np.asarray(got), np.asarray(shardc.random.bernoulli(key, jnp.float32(p), (64,))))
        ints = shardc.random.randint(key, (64,), -k, 10 + k)
        np.testing.assert_array_equal(np.asarray(ints), np.asarray(
            shardc.random.randint(key, (64,), jnp.int32(-k), jnp.int32(10 + k))))
        cut = shardc.random.truncated_normal(key, low, high, (64,))
        np.testing.assert_array_equal(np.asarray(cut), np.asarray(
            shardc.random.truncated_normal(key, jnp.float32(low), jnp.float32(high), (64,))))
        assert ((low < np.asarray(cut)) & (np.asarray(cut) < high)).all()
    traced = {getattr(fn, "__name__", ""): jitted.trace_count
              for (fn, _, _), jitted in _keys._PROGRAMS.items()}
    assert traced["_bernoulli"] == traced["_randint_of_dtype"] == 1
    assert traced["_truncated_normal"] == 1


@pytest.mark.parametrize("draw", [
    lambda k: random.bits(k, (2,), np.uint64),
    lambda k: random.normal(k, (2,), np.float64),
    lambda k: random.uniform(k, (2,), np.float64),
    lambda k: random.randint(k, (2,), 0, 3, np.int64),
    lambda k: random.gamma(k, 1.0, (2,), np.float64),
    lambda k: random.poisson(k, 1.0, (2,), np.int64),
    lambda k: random.laplace(k, (2,), np.float64),
])
def test_a_64_bit_dtype_asked_of_random_warns_as_jax_does(draw):
    """JAX's warning (it names no function) for a 64-bit dtype asked of jax.random with x64
    off, and the draw in 32 bits; under jax_explicit_x64_dtypes='error' its ValueError. They
    truncated silently."""
    key = random.key(0)
    with pytest.warns(UserWarning, match=r"^Explicitly requested dtype \w+64 is not "
                                         r"available, and will be truncated to dtype \w+32"):
        out = draw(key)
    assert out.dtype.itemsize == 4
    shardc.config.update("jax_explicit_x64_dtypes", "error")
    try:
        with pytest.raises(ValueError, match=r"^Explicitly requested dtype \w+64 is not "
                                             r"available\. To enable"):
            draw(key)
    finally:
        shardc.config.update("jax_explicit_x64_dtypes", "warn")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        random.bits(key, (2,))              # the default dtype asks for nothing
