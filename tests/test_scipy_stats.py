"""jax.scipy.stats against scipy.stats: every function of every distribution on a grid of
points inside, outside and at the edges of its support with broadcast parameters, in float32;
then the places where JAX deliberately differs from scipy, invalid parameters, errors, dtypes,
gradients, jit and vmap, and the multivariate distributions, gaussian_kde, mode, rankdata and
sem."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import scipy.special as sps
import scipy.stats as osp

import shardc
from shardc.scipy import stats

INF, NAN = np.inf, np.nan


def grid(*axes):
    """The arguments as float32 arrays, each along its own axis (so they broadcast to every
    combination)."""
    arrays = []
    for i, values in enumerate(axes):
        shape = [1] * len(axes)
        shape[i] = len(values)
        arrays.append(np.asarray(values, np.float32).reshape(shape))
    return arrays


def assert_matches(got, want, rtol, atol):
    """``got`` against the float64 reference: NaN and infinite entries where the reference
    has them, the finite ones within ``atol + rtol * |want|``."""
    got = np.asarray(got, np.float64)
    want = np.broadcast_to(np.asarray(want, np.float64), got.shape)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg="NaN positions")
    infinite = np.isinf(want)
    np.testing.assert_array_equal(got[infinite], want[infinite], err_msg="infinities")
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=rtol, atol=atol)


X = [-2, -1, -0.5, 0, 0.25, 0.5, 0.75, 1, 1.5, 2, 3.5, 8]      # exactly representable
UNIT = [-0.5, 0, 0.25, 0.5, 0.75, 1, 1.5]                      # around [0, 1]
Q = [0, 1e-4, 0.1, 0.25, 0.5, 0.75, 0.9, 1, -0.5, 1.5]         # probabilities, and not
Q_OPEN = [1e-4, 0.1, 0.25, 0.5, 0.75, 0.9]                     # strictly inside (0, 1)
K = [-1, 0, 1, 2, 3, 5, 8]                                     # integer counts
LOC, SCALE = [-1, 0, 0.5], [0.5, 1, 2.5]
ANGLES = [-3, -1, 0, 0.5, 2, 3]                                # inside [-pi, pi]

# (module, function, arguments, rtol, atol); scipy.stats.<module>.<function> is the reference
CASES = [
    ("bernoulli", "logpmf", (K, [0, 0.2, 0.5, 1], [0, 1]), 1e-6, 1e-6),
    ("bernoulli", "pmf", (K, [0, 0.2, 0.5, 1], [0, 1]), 1e-6, 1e-7),
    ("bernoulli", "cdf", ([-1, -0.5, 0, 0.5, 1, 1.5], [-0.5, 0, 0.2, 1, 1.5]), 1e-6, 1e-7),
    ("bernoulli", "ppf", ([0.1, 0.3, 0.6, 0.9, -0.5, 1.5], [0.2, 0.5, 1.5, -0.5]), 0, 0),
    *[("beta", f, (UNIT + [2, 2.5], [0.5, 1, 2.5], [0.5, 1, 3], [0, -0.5], [1, 2]), 2e-5, 2e-5)
      for f in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf")],
    *[("betabinom", f, (K, [0, 1, 5], [0.5, 2], [0.5, 3], [0, 1]), 2e-5, 2e-6)
      for f in ("logpmf", "pmf")],
    *[("binom", f, (K, [0, 1, 5], [0, 0.3, 1], [0, 2]), 2e-5, 2e-6) for f in ("logpmf", "pmf")],
    *[("cauchy", f, (X, LOC, SCALE), 1e-5, 1e-6)
      for f in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf")],
    # (not near 0 or 1: there tan(pi q - pi/2) in float32 is ill-conditioned, as JAX's)
    *[("cauchy", f, (Q_OPEN[1:], LOC, SCALE), 2e-5, 2e-5) for f in ("ppf", "isf")],
    # no df = 2: there JAX's logpdf is NaN at x == loc (see test_jax_differs_from_scipy)
    *[("chi2", f, (X, [1, 3, 5.5], [0, 0.5], [1, 2]), 2e-5, 1e-6)
      for f in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf")],
    *[("expon", f, (X, LOC, SCALE), 1e-5, 1e-6)
      for f in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf")],
    ("expon", "ppf", (Q, LOC, SCALE), 1e-5, 1e-6),
    *[("gamma", f, (X, [0.5, 1, 3], [0, 0.5], [1, 2]), 2e-5, 1e-6)
      for f in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf")],
    *[("gennorm", f, (X, [0.5, 1, 2, 4]), 2e-5, 1e-6) for f in ("logpdf", "pdf", "cdf")],
    *[("geom", f, (K, [0.2, 0.5, 1], [0, 1]), 1e-5, 1e-7) for f in ("logpmf", "pmf")],
    *[(m, f, (X, LOC, SCALE), 2e-5, 1e-6) for m in ("gumbel_l", "gumbel_r")
      for f in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf")],
    *[(m, "ppf", (Q_OPEN, LOC, SCALE), 2e-5, 2e-6) for m in ("gumbel_l", "gumbel_r")],
    *[("laplace", f, (X, LOC, SCALE), 1e-5, 1e-6) for f in ("logpdf", "pdf", "cdf")],
    *[("logistic", f, (X, LOC, SCALE), 1e-5, 1e-6) for f in ("logpdf", "pdf", "cdf", "sf")],
    *[("logistic", f, (Q, LOC, SCALE), 1e-5, 2e-6) for f in ("ppf", "isf")],
    *[("nbinom", f, (K, [0.5, 1, 3], [0.2, 0.5, 1], [0, 1]), 2e-5, 1e-6)
      for f in ("logpmf", "pmf")],
    *[("norm", f, (X, LOC, SCALE), 1e-5, 1e-6)
      for f in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf")],
    ("norm", "ppf", (Q[:8], LOC, SCALE), 1e-5, 1e-6),
    # isf is ppf(1 - q): near q = 0, 1 - q rounds in float32 (as JAX's)
    ("norm", "isf", (Q[:8], LOC, SCALE), 5e-5, 1e-6),
    *[("pareto", f, (X, [0.5, 1, 3], [-1, 0], [0.5, 1, 2]), 1e-5, 1e-6)
      for f in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf")],
    ("pareto", "ppf", (Q, [0.5, 1, 3], [-1, 0], [0.5, 1, 2]), 1e-5, 1e-6),
    *[("poisson", f, (K + [0.5, 2.5], [0.5, 1, 4], [0, 1]), 2e-5, 1e-6)
      for f in ("logpmf", "pmf", "cdf")],
    *[("t", f, (X, [1, 2.5, 10], LOC, SCALE), 2e-5, 1e-6) for f in ("logpdf", "pdf")],
    *[("truncnorm", f, (X, [-INF, -1, 0.5], [1, 2, INF], [0, 0.5], [1, 2]), 5e-5, 1e-6)
      for f in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf")],
    *[("uniform", f, (X, LOC, SCALE), 1e-6, 1e-7) for f in ("logpdf", "pdf", "cdf")],
    ("uniform", "ppf", (Q, LOC, SCALE), 1e-6, 1e-7),
    *[("vonmises", f, (ANGLES, [0.5, 1, 5, 50]), 2e-5, 1e-6) for f in ("logpdf", "pdf")],
    *[("wrapcauchy", f, ([-1, 0, 0.5, 2, 3, 6, 7], [0.1, 0.5, 0.9]), 2e-5, 1e-6)
      for f in ("logpdf", "pdf")],
]


@pytest.mark.parametrize("module, function, axes, rtol, atol", CASES,
                         ids=[f"{m}.{f}-{i}" for i, (m, f, *_) in enumerate(CASES)])
def test_against_scipy(module, function, axes, rtol, atol):
    args = grid(*axes)
    got = getattr(getattr(stats, module), function)(*args)
    assert got.dtype == np.float32
    want = getattr(getattr(osp, module), function)(*(a.astype(np.float64) for a in args))
    assert_matches(got, want, rtol, atol)


# jax.scipy.stats 0.10.2: its modules and their functions
JAX_FUNCTIONS = {
    "bernoulli": "logpmf pmf cdf ppf",
    "beta": "logpdf pdf cdf logcdf sf logsf",
    "betabinom": "logpmf pmf",
    "binom": "logpmf pmf",
    "cauchy": "logpdf pdf cdf logcdf sf logsf isf ppf",
    "chi2": "logpdf pdf cdf logcdf sf logsf",
    "dirichlet": "logpdf pdf",
    "expon": "logpdf pdf cdf logcdf logsf sf ppf",
    "gamma": "logpdf pdf cdf logcdf sf logsf",
    "gennorm": "logpdf cdf pdf",
    "geom": "logpmf pmf",
    "gumbel_l": "logpdf pdf logcdf cdf ppf sf logsf",
    "gumbel_r": "logpdf pdf logcdf cdf ppf sf logsf",
    "laplace": "logpdf pdf cdf",
    "logistic": "logpdf pdf ppf sf isf cdf",
    "multinomial": "logpmf pmf",
    "multivariate_normal": "logpdf pdf",
    "nbinom": "logpmf pmf",
    "norm": "logpdf pdf cdf logcdf ppf logsf sf isf",
    "pareto": "logpdf pdf cdf logcdf logsf sf ppf",
    "poisson": "logpmf pmf cdf entropy",
    "t": "logpdf pdf",
    "truncnorm": "logpdf pdf logsf sf logcdf cdf",
    "uniform": "logpdf pdf cdf ppf",
    "vonmises": "logpdf pdf",
    "wrapcauchy": "logpdf pdf",
}


def test_every_module_and_function_of_jax_is_here():
    assert sorted(stats.__all__) == sorted([*JAX_FUNCTIONS, "gaussian_kde", "mode",
                                            "rankdata", "sem"])
    for module, functions in JAX_FUNCTIONS.items():
        assert sorted(getattr(stats, module).__all__) == sorted(functions.split()), module


def test_every_function_of_jax_is_tested_against_scipy():
    tested = {(m, f) for m, f, *_ in CASES}
    untested = {(m, f) for m, functions in JAX_FUNCTIONS.items()
                for f in functions.split()} - tested
    # the multivariate ones and poisson.entropy have tests of their own below
    assert untested == {("dirichlet", "logpdf"), ("dirichlet", "pdf"),
                        ("multinomial", "logpmf"), ("multinomial", "pmf"),
                        ("multivariate_normal", "logpdf"), ("multivariate_normal", "pdf"),
                        ("poisson", "entropy")}


def test_the_log_distribution_functions_stay_finite_in_the_tails():
    x = np.array([-60, -30, -12, 0, 12, 30, 60], np.float32)
    # (atol: the far tail's log-probabilities underflow float32 near 0)
    assert_matches(stats.norm.logcdf(x), osp.norm.logcdf(x.astype(np.float64)), 1e-5, 1e-37)
    assert_matches(stats.norm.logsf(x), osp.norm.logsf(x.astype(np.float64)), 1e-5, 1e-37)
    assert np.isfinite(np.asarray(stats.norm.logcdf(np.float32(-60))))
    assert_matches(stats.truncnorm.logpdf(np.float32(9), 8, 10), osp.truncnorm.logpdf(9, 8, 10),
                   1e-4, 0)
    assert_matches(stats.gumbel_r.logsf(x), osp.gumbel_r.logsf(x.astype(np.float64)), 1e-5,
                   1e-37)


def _binom_formula(k, n, p):
    return np.exp(sps.gammaln(n + 1) - sps.gammaln(k + 1) - sps.gammaln(n - k + 1)
                  + k * np.log(p) + (n - k) * np.log1p(-p))


# where JAX's definition is not scipy's (each read from JAX's source): the value JAX gives
JAX_DIFFERS = [
    # binom, nbinom, geom and bernoulli evaluate their formula between the integers (scipy:
    # probability 0); betabinom floors k; poisson is 0 there, as scipy
    (lambda: stats.binom.pmf(1.5, 4, 0.5), _binom_formula(1.5, 4, 0.5)),
    (lambda: stats.nbinom.pmf(1.5, 2, 0.5),
     np.exp(sps.gammaln(3.5) - sps.gammaln(2) - sps.gammaln(2.5) + 3.5 * np.log(0.5))),
    (lambda: stats.geom.pmf(2.5, 0.5), 0.5 ** 1.5 * 0.5),
    (lambda: stats.bernoulli.pmf(0.5, 0.36), 0.6 * 0.8),
    (lambda: stats.betabinom.pmf(2.7, 5, 2, 3), osp.betabinom.pmf(2, 5, 2, 3)),
    (lambda: stats.poisson.pmf(2.5, 3.0), 0.0),
    # scipy's discrete ppf is -1 at q = 0 (below the support); JAX's bernoulli.ppf is 0
    (lambda: stats.bernoulli.ppf(0.0, 0.3), 0.0),
    # chi2's kernel (df/2 - 1) log y is 0 * -inf at x == loc for df = 2 (scipy: log 1/2)
    (lambda: stats.chi2.logpdf(0.0, 2.0), NAN),
    # the scale enters norm.logpdf squared (scipy: NaN for a negative scale)
    (lambda: stats.norm.logpdf(1.0, 0.0, -2.0), osp.norm.logpdf(1.0, 0.0, 2.0)),
    # gumbel quantiles are NaN at q = 0 and 1 (scipy: the infinite ends)
    (lambda: stats.gumbel_r.ppf(0.0), NAN),
    (lambda: stats.gumbel_l.ppf(1.0), NAN),
    # the von Mises density is periodic (scipy's is 0 outside [-pi, pi])
    (lambda: stats.vonmises.pdf(2 * np.pi + 0.5, 2.0), osp.vonmises.pdf(0.5, 2.0)),
    # a NaN x is in none of uniform.cdf's three cases, and select's default is 0
    (lambda: stats.uniform.cdf(NAN), 0.0),
    # gamma and expon do not check their parameters (scipy: NaN)
    (lambda: stats.gamma.logpdf(1.0, -0.5), -sps.gammaln(-0.5) - 1.0),   # (a - 1) log 1 = 0
    (lambda: stats.expon.cdf(1.0, 0.0, -1.0), -np.expm1(1.0)),
]


@pytest.mark.parametrize("index", range(len(JAX_DIFFERS)))
def test_jax_differs_from_scipy(index):
    compute, want = JAX_DIFFERS[index]
    np.testing.assert_allclose(np.asarray(compute(), np.float64), want, rtol=1e-5, atol=1e-7)


def _a(*values):
    return np.array(values, np.float32)


# invalid parameters: NaN where JAX's source makes it so
INVALID = [
    lambda: stats.beta.logpdf(0.5, _a(0, -1, 1, 1, 1), _a(1, 1, 0, -2, 1), 0, _a(1, 1, 1, 1, -1)),
    lambda: stats.beta.pdf(0.5, _a(0, -1), 1.0),
    lambda: stats.betabinom.logpmf(1, _a(-1, 3, 3), _a(1, 0, 1), _a(1, 1, -1)),
    lambda: stats.bernoulli.cdf(0.5, _a(-0.1, 1.1, NAN)),
    lambda: stats.bernoulli.ppf(_a(0.5, -0.1, 1.1, NAN), _a(1.2, 0.5, 0.5, 0.5)),
    lambda: stats.gumbel_l.logpdf(0.5, 0, _a(0, -1)),
    lambda: stats.gumbel_r.cdf(0.5, 0, _a(0, -1)),
    lambda: stats.gumbel_r.logsf(0.5, 0, _a(0, -1)),
    lambda: stats.vonmises.logpdf(0.5, _a(0, -1)),
    lambda: stats.wrapcauchy.logpdf(0.5, _a(0, 1, -0.5, 1.5)),
    lambda: stats.truncnorm.logpdf(0.5, _a(1, 2), _a(1, 0)),
    lambda: stats.truncnorm.cdf(0.5, _a(1, 2), _a(1, 0)),
    lambda: stats.truncnorm.logsf(0.5, _a(1, 2), _a(1, 0)),
    lambda: stats.expon.ppf(_a(-0.1, 1.1, NAN)),
    lambda: stats.pareto.ppf(_a(-0.1, 1.1, NAN), 2.0),
    lambda: stats.uniform.ppf(_a(-0.1, 1.1, NAN)),
    lambda: stats.gumbel_l.ppf(_a(-0.1, 1.1, NAN)),
]


@pytest.mark.parametrize("index", range(len(INVALID)))
def test_invalid_parameters_give_nan(index):
    assert np.isnan(np.asarray(INVALID[index]())).all()


def test_lists_are_refused_as_jax_does():
    with pytest.raises(TypeError, match=r"gamma.logpdf requires ndarray or scalar arguments, "
                                        r"got <class 'list'> at position 1"):
        stats.gamma.logpdf(1.0, [1.0, 2.0])
    with pytest.raises(TypeError, match="poisson.entropy requires ndarray"):
        stats.poisson.entropy([3.0])


# --- dtypes: JAX's promotion -------------------------------------------------------------------

@pytest.mark.parametrize("function, args", [
    (stats.norm.logpdf, (1, 0, 2)),
    (stats.gamma.cdf, (np.int32(2), 3)),
    (stats.poisson.logpmf, (np.arange(4), 2)),
    (stats.beta.sf, (np.array([0, 1]), 2, 3)),
    (stats.bernoulli.ppf, (np.array([0, 1]), np.array([0, 1]))),
    (stats.uniform.cdf, (np.array([True, False]),)),
])
def test_integer_and_boolean_inputs_compute_in_float32(function, args):
    assert function(*args).dtype == np.float32


def test_dtypes_follow_the_floating_operands():
    half = np.array([0.5, 1.5], np.float16)
    assert stats.gamma.logpdf(half, 2.0).dtype == np.float16
    assert stats.cauchy.cdf(half, np.float32(0)).dtype == np.float32
    assert stats.t.logpdf(half, 3).dtype == np.float16
    scalar = stats.expon.logpdf(1.0)
    assert scalar.dtype == np.float32 and scalar.weak_type      # Python numbers: weak
    assert not stats.expon.logpdf(np.float32(1.0)).weak_type
    # norm.ppf is in the default floating dtype whatever q's (JAX's asarray(..., float))
    assert stats.norm.ppf(0.3).dtype == np.float32 and not stats.norm.ppf(0.3).weak_type
    with shardc.enable_x64(True):
        assert stats.gamma.logpdf(np.int64(2), 3).dtype == np.float64
        assert stats.gamma.logpdf(np.int32(2), np.int32(3)).dtype == np.float32
        assert stats.norm.ppf(np.float32(0.3)).dtype == np.float64


# --- gradients, jit and vmap -------------------------------------------------------------------

# (module, function, arguments, which to differentiate: None for all)
GRADIENTS = [
    ("norm", "logpdf", (0.3, 0.1, 1.5), None),
    ("norm", "logcdf", (-12.0, 0.0, 1.0), None),      # log_ndtr's derivative in the tail
    ("beta", "logpdf", (0.3, 2.0, 3.0, 0.0, 1.2), None),
    ("gamma", "logpdf", (1.3, 2.0, 0.1, 1.5), None),
    ("chi2", "logpdf", (1.3, 3.0, 0.0, 1.0), None),
    ("t", "logpdf", (0.7, 3.0, 0.2, 1.5), None),
    ("truncnorm", "logpdf", (0.3, -1.0, 2.0, 0.1, 1.2), None),
    ("truncnorm", "logcdf", (0.3, -1.0, 2.0, 0.1, 1.2), None),
    ("vonmises", "logpdf", (0.7, 2.0), None),
    ("gumbel_r", "logsf", (0.7, 0.2, 1.5), None),
    ("logistic", "logpdf", (0.7, 0.2, 1.5), None),
    ("pareto", "logpdf", (2.7, 2.0, 0.2, 1.5), None),
    # the counts k and n are integers: only the continuous parameters
    ("poisson", "logpmf", (3.0, 2.5), (1,)),
    ("binom", "logpmf", (3.0, 7.0, 0.3), (2,)),
    ("betabinom", "logpmf", (3.0, 7.0, 2.0, 3.0), (2, 3)),
]


@pytest.mark.parametrize("module, function, args, wrt", GRADIENTS,
                         ids=[f"{m}.{f}" for m, f, *_ in GRADIENTS])
def test_gradients_against_central_differences_of_scipy(module, function, args, wrt):
    ours = getattr(getattr(stats, module), function)
    reference = getattr(getattr(osp, module), function)
    for i in range(len(args)) if wrt is None else wrt:
        def at(v, i=i):
            return ours(*args[:i], v, *args[i + 1:])
        got = float(shardc.grad(at)(np.float32(args[i])))
        h = 1e-6 * max(1.0, abs(args[i]))
        up = reference(*args[:i], args[i] + h, *args[i + 1:])
        down = reference(*args[:i], args[i] - h, *args[i + 1:])
        np.testing.assert_allclose(got, (up - down) / (2 * h), rtol=2e-4, atol=1e-5,
                                   err_msg=f"argument {i}")


def test_gamma_below_loc_computes_no_nan_on_the_way():
    # JAX replaces y below loc before its logarithm: debug_nans finds nothing to report
    with shardc.debug_nans(True):
        assert float(stats.gamma.pdf(0.0, 1.0, 1.0)) == 0.0
        assert float(stats.gamma.logpdf(0.0, 2.0, 1.0)) == -np.inf


def test_jit_gives_the_eager_values():
    x = np.linspace(-1, 3, 9, dtype=np.float32)
    for function, args in [(stats.gamma.logpdf, (x, 2.0, 0.1)),
                           (stats.truncnorm.logcdf, (x, -0.5, 2.0)),
                           (stats.betabinom.logpmf, (np.round(x), 5.0, 2.0, 3.0)),
                           (stats.poisson.entropy, (np.abs(x) * 40,)),
                           (stats.pareto.sf, (x, 2.0, -1.0))]:
        np.testing.assert_allclose(shardc.jit(function)(*args), function(*args), rtol=1e-6)


def test_vmap_over_parameters_is_broadcasting():
    x = np.linspace(0.1, 3, 7, dtype=np.float32)
    a = np.array([0.5, 1.0, 2.5], np.float32)
    mapped = shardc.vmap(lambda shape: stats.gamma.cdf(x, shape, 0.0, 1.5))(a)
    np.testing.assert_allclose(mapped, stats.gamma.cdf(x, a[:, None], 0.0, 1.5), rtol=1e-6)
    mapped = shardc.vmap(stats.norm.logsf, in_axes=(0, None, 0))(x, 0.5, x + 1)
    np.testing.assert_allclose(mapped, stats.norm.logsf(x, 0.5, x + 1), rtol=1e-6)
    mapped = shardc.vmap(lambda c: stats.wrapcauchy.pdf(x, c))(np.array([0.2, 0.7], np.float32))
    assert mapped.shape == (2, 7)
    np.testing.assert_allclose(mapped[1], osp.wrapcauchy.pdf(x, 0.7), rtol=1e-5)


# --- the multivariate distributions ------------------------------------------------------------

def test_dirichlet_against_scipy():
    alpha = np.array([0.5, 1.5, 3.0], np.float32)
    points = np.array([[0.25, 0.25, 0.5], [0.5, 0.125, 0.375], [0.0625, 0.875, 0.0625]],
                      np.float32).T                   # a point per column, summing to 1
    want = [osp.dirichlet.logpdf(p.astype(np.float64), alpha) for p in points.T]
    np.testing.assert_allclose(stats.dirichlet.logpdf(points, alpha), want, rtol=1e-5)
    # K - 1 components: the last is 1 - their sum
    np.testing.assert_allclose(stats.dirichlet.logpdf(points[:2], alpha), want, rtol=1e-5)
    np.testing.assert_allclose(stats.dirichlet.pdf(points[:, 0], alpha), np.exp(want[0]),
                               rtol=1e-5)
    off = np.array([[0.5, 0.5, 0.5], [1.25, -0.25, 0.0], [0.0, 0.5, 0.5]], np.float32).T
    assert np.all(np.asarray(stats.dirichlet.logpdf(off, alpha)) == -np.inf)


def test_multinomial_against_scipy():
    p = np.array([0.25, 0.25, 0.5], np.float32)
    counts = np.array([1, 2, 3])
    np.testing.assert_allclose(stats.multinomial.logpmf(counts, 6, p),
                               osp.multinomial.logpmf(counts, 6, p), rtol=1e-5)
    np.testing.assert_allclose(stats.multinomial.pmf(counts, 6, p),
                               osp.multinomial.pmf(counts, 6, p), rtol=1e-5)
    assert float(stats.multinomial.logpmf(counts, 7, p)) == -np.inf
    assert stats.multinomial.logpmf(counts.astype(np.int8), 6, p.astype(np.float16)).dtype \
        == np.float16


def test_multivariate_normal_against_scipy():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 3)).astype(np.float32)
    mean = rng.normal(size=3).astype(np.float32)
    factor = rng.normal(size=(3, 3))
    cov = (factor @ factor.T + np.eye(3)).astype(np.float32)
    np.testing.assert_allclose(stats.multivariate_normal.logpdf(x, mean, cov),
                               osp.multivariate_normal.logpdf(x, mean, cov), rtol=1e-5)
    np.testing.assert_allclose(stats.multivariate_normal.pdf(x, mean, cov),
                               osp.multivariate_normal.pdf(x, mean, cov), rtol=1e-5)
    # a scalar cov is a multiple of the identity; a scalar mean a one-dimensional normal
    np.testing.assert_allclose(stats.multivariate_normal.logpdf(x, mean, 2.0),
                               osp.multivariate_normal.logpdf(x, mean, 2.0 * np.eye(3)),
                               rtol=1e-5)
    np.testing.assert_allclose(stats.multivariate_normal.logpdf(x[:, 0], 0.5, 2.0),
                               osp.norm.logpdf(x[:, 0], 0.5, np.sqrt(2.0)), rtol=1e-5)
    # batches of covariances broadcast against the points
    covs = np.stack([cov, 2 * cov, np.eye(3, dtype=np.float32), cov])
    want = [osp.multivariate_normal.logpdf(x[i], mean, covs[i]) for i in range(4)]
    np.testing.assert_allclose(stats.multivariate_normal.logpdf(x, mean, covs), want,
                               rtol=1e-5)
    # not positive definite: NaN (the Cholesky factor is)
    assert np.isnan(np.asarray(stats.multivariate_normal.logpdf(x, mean, -cov))).all()


# --- poisson.entropy ---------------------------------------------------------------------------

def test_poisson_entropy_against_scipy_in_each_regime():
    mu = np.array([0.0, 0.01, 0.5, 3.0, 9.5, 10.0, 50.0, 99.0, 100.0, 500.0], np.float32)
    np.testing.assert_allclose(stats.poisson.entropy(mu),
                               osp.poisson.entropy(mu.astype(np.float64)), rtol=2e-5)
    # loc moves the distribution: the entropy is unchanged, broadcast against it
    with_loc = stats.poisson.entropy(mu[1:4], np.zeros((2, 1), np.float32))
    np.testing.assert_allclose(with_loc, np.broadcast_to(stats.poisson.entropy(mu[1:4]), (2, 3)))
    assert np.isnan(np.asarray(stats.poisson.entropy(np.float32(-1.0))))


# --- mode, rankdata, sem -----------------------------------------------------------------------

SAMPLE = np.random.default_rng(1).integers(0, 4, size=(6, 7)).astype(np.float32)
WITH_NANS = np.where(np.random.default_rng(2).random((6, 7)) < 0.25, np.nan, SAMPLE)


@pytest.mark.parametrize("axis, keepdims", [(0, False), (1, True), (-1, False), (None, False)])
@pytest.mark.parametrize("data", [SAMPLE, SAMPLE.astype(np.int32), WITH_NANS],
                         ids=["float", "int", "nan"])
def test_mode_against_scipy(data, axis, keepdims):
    got = stats.mode(data, axis=axis, keepdims=keepdims)
    want = osp.mode(data, axis=axis, keepdims=keepdims)
    np.testing.assert_array_equal(got.mode, want.mode)
    np.testing.assert_array_equal(got.count, want.count)
    assert got.mode.dtype == data.dtype and got.count.dtype == np.int32


def test_mode_of_an_empty_axis_is_nan_with_count_zero():
    result = stats.mode(np.zeros((0, 3), np.int32), axis=0)
    assert np.isnan(np.asarray(result.mode)).all() and result.mode.dtype == np.float32
    np.testing.assert_array_equal(result.count, np.zeros(3))
    assert stats.mode(np.zeros((0, 3)), axis=1).mode.shape == (0,)


@pytest.mark.parametrize("method", ["average", "min", "max", "dense", "ordinal"])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_rankdata_against_scipy(method, axis):
    np.testing.assert_array_equal(stats.rankdata(SAMPLE, method, axis=axis),
                                  osp.rankdata(SAMPLE, method, axis=axis))
    got = stats.rankdata(WITH_NANS, method, axis=axis)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, osp.rankdata(WITH_NANS, method, axis=axis))


@pytest.mark.parametrize("axis, ddof, keepdims", [(0, 1, False), (1, 0, True), (None, 2, False),
                                                  (-1, 3, True)])
@pytest.mark.parametrize("nan_policy", ["propagate", "omit"])
def test_sem_against_scipy(axis, ddof, keepdims, nan_policy):
    for data in (SAMPLE, WITH_NANS):
        got = stats.sem(data, axis=axis, ddof=ddof, nan_policy=nan_policy, keepdims=keepdims)
        want = osp.sem(data, axis=axis, ddof=ddof, nan_policy=nan_policy, keepdims=keepdims)
        np.testing.assert_allclose(got, want, rtol=1e-5, equal_nan=True)
    assert stats.sem(SAMPLE.astype(np.int32)).dtype == np.float32


def test_mode_and_rankdata_under_jit_and_vmap():
    np.testing.assert_array_equal(
        shardc.jit(lambda a: stats.mode(a, axis=1).mode)(SAMPLE), stats.mode(SAMPLE, 1).mode)
    np.testing.assert_array_equal(shardc.vmap(stats.rankdata)(SAMPLE),
                                  osp.rankdata(SAMPLE, axis=1))
    np.testing.assert_array_equal(shardc.vmap(lambda row: stats.mode(row).count)(SAMPLE),
                                  osp.mode(SAMPLE, axis=1).count)


# --- gaussian_kde ------------------------------------------------------------------------------

_KDE_RNG = np.random.default_rng(3)
DATA = _KDE_RNG.normal(size=(2, 25)).astype(np.float32)
WEIGHTS = _KDE_RNG.random(25).astype(np.float32)
POINTS = _KDE_RNG.normal(size=(2, 6)).astype(np.float32)


@pytest.mark.parametrize("bw_method", [None, "silverman", 0.7, lambda kde: kde.neff ** -0.2])
@pytest.mark.parametrize("weights", [None, WEIGHTS], ids=["equal", "weighted"])
def test_kde_against_scipy(bw_method, weights):
    ours = stats.gaussian_kde(DATA, bw_method=bw_method, weights=weights)
    theirs = osp.gaussian_kde(DATA, bw_method=bw_method, weights=weights)
    for method in ("evaluate", "pdf", "logpdf", "__call__"):
        np.testing.assert_allclose(getattr(ours, method)(POINTS), getattr(theirs, method)(POINTS),
                                   rtol=1e-4, err_msg=method)
    np.testing.assert_allclose(ours.covariance, theirs.covariance, rtol=1e-5)
    np.testing.assert_allclose(ours.inv_cov, theirs.inv_cov, rtol=1e-4)
    np.testing.assert_allclose(ours.neff, theirs.neff, rtol=1e-5)
    np.testing.assert_allclose(ours.factor, theirs.factor, rtol=1e-5)
    assert (ours.d, ours.n) == (2, 25)


def test_kde_integrals_against_scipy():
    ours = stats.gaussian_kde(DATA, weights=WEIGHTS)
    theirs = osp.gaussian_kde(DATA, weights=WEIGHTS)
    mean, cov = np.array([0.25, -0.5], np.float32), np.array([[1.0, 0.25], [0.25, 0.5]],
                                                              np.float32)
    np.testing.assert_allclose(ours.integrate_gaussian(mean, cov),
                               theirs.integrate_gaussian(mean, cov), rtol=1e-5)
    other = (DATA[:, :10] + 0.25, WEIGHTS[:10])
    np.testing.assert_allclose(ours.integrate_kde(stats.gaussian_kde(*other[:1],
                                                                     weights=other[1])),
                               theirs.integrate_kde(osp.gaussian_kde(*other[:1],
                                                                     weights=other[1])),
                               rtol=1e-5)
    line = stats.gaussian_kde(DATA[0], weights=WEIGHTS)
    np.testing.assert_allclose(line.integrate_box_1d(-0.5, 1.5),
                               osp.gaussian_kde(DATA[0], weights=WEIGHTS).integrate_box_1d(
                                   -0.5, 1.5), rtol=1e-5)
    below = shardc.vmap(lambda high: line.integrate_box_1d(-np.inf, high))(POINTS[0])
    np.testing.assert_allclose(below, [osp.gaussian_kde(DATA[0], weights=WEIGHTS)
                                       .integrate_box_1d(-np.inf, h) for h in POINTS[0]],
                               rtol=1e-5)


def test_kde_resample_draws_from_the_estimate():
    kde = stats.gaussian_kde(DATA, weights=WEIGHTS)
    assert kde.resample(shardc.random.key(0)).shape == (2,)
    samples = kde.resample(shardc.random.key(1), shape=(4000,))
    assert samples.shape == (2, 4000) and samples.dtype == np.float32
    weighted_mean = (DATA * WEIGHTS).sum(1) / WEIGHTS.sum()
    np.testing.assert_allclose(np.mean(samples, axis=1), weighted_mean, atol=0.06)
    # the spread of the weighted points (as a population) plus the kernel's
    np.testing.assert_allclose(np.cov(samples), np.cov(DATA, aweights=WEIGHTS, bias=True)
                               + np.asarray(kde.covariance), atol=0.1)


def test_kde_is_a_pytree_that_passes_through_jit():
    kde = stats.gaussian_kde(DATA)
    leaves, treedef = shardc.tree_util.tree_flatten(kde)
    assert len(leaves) == 5                  # neff, dataset, weights, covariance, inv_cov
    again = shardc.tree_util.tree_unflatten(treedef, leaves)
    np.testing.assert_array_equal(again.covariance, kde.covariance)
    np.testing.assert_allclose(shardc.jit(lambda k, x: k.evaluate(x))(kde, POINTS),
                               kde.evaluate(POINTS), rtol=1e-6)
    with pytest.raises(dataclasses.FrozenInstanceError):       # immutable, as JAX's
        kde.neff = 1.0


# --- errors ------------------------------------------------------------------------------------

ERRORS = [
    (lambda: stats.multinomial.logpmf(np.array([1.0, 2.0]), 3, np.array([0.5, 0.5])),
     ValueError, "x and n must be of integer type; got x.dtype=float32, n.dtype=float32"),
    (lambda: stats.dirichlet.logpdf(np.ones(3) / 3, np.ones((1, 3))),
     ValueError, r"`alpha` must be one-dimensional; got alpha.shape=\(1, 3\)"),
    (lambda: stats.dirichlet.logpdf(np.ones(5) / 5, np.ones(3)),
     ValueError, "`x` must have either the same number of entries as `alpha`"),
    (lambda: stats.multivariate_normal.logpdf(np.zeros(2), np.zeros(2), np.eye(2),
                                              allow_singular=True),
     NotImplementedError, "allow_singular argument of multivariate_normal.logpdf"),
    (lambda: stats.multivariate_normal.logpdf(np.zeros(2), np.zeros(2), np.eye(3)),
     ValueError, "multivariate_normal.logpdf got incompatible shapes"),
    (lambda: stats.mode(SAMPLE, nan_policy="omit"), NotImplementedError,
     "Logic for `nan_policy` of omit is not implemented"),
    (lambda: stats.mode(SAMPLE, nan_policy="raise"), NotImplementedError,
     "we cannot know whether `x` contains nans"),
    (lambda: stats.mode(SAMPLE, nan_policy="never"), ValueError, "Illegal nan_policy value"),
    (lambda: stats.mode(SAMPLE, axis=2), ValueError, "axis 2 is out of bounds"),
    (lambda: stats.rankdata(SAMPLE, "median"), ValueError, "unknown method 'median'"),
    (lambda: stats.rankdata(SAMPLE, nan_policy="raise"), NotImplementedError,
     "In order to best JIT compile `rankdata`"),
    (lambda: stats.sem(SAMPLE, nan_policy="raise"), ValueError, "raise is not supported"),
    (lambda: stats.gaussian_kde(np.array([1.0])), ValueError,
     "`dataset` input should have multiple elements."),
    (lambda: stats.gaussian_kde(np.array([1.0, 2j])), NotImplementedError,
     "gaussian_kde does not support complex data"),
    (lambda: stats.gaussian_kde(DATA, weights=WEIGHTS[:3]), ValueError,
     "`weights` input should be of length n"),
    (lambda: stats.gaussian_kde(DATA, weights=np.ones((2, 25))), ValueError,
     "`weights` input should be one-dimensional."),
    (lambda: stats.gaussian_kde(DATA, bw_method="wide"), ValueError,
     "`bw_method` should be 'scott', 'silverman', a scalar, or a callable."),
    (lambda: stats.gaussian_kde(DATA).evaluate(np.ones((3, 2))), ValueError,
     "points have dimension 3, dataset has dimension 2"),
    (lambda: stats.gaussian_kde(DATA).integrate_box_1d(0.0, 1.0), ValueError,
     r"integrate_box_1d\(\) only handles 1D pdfs"),
    (lambda: stats.gaussian_kde(DATA).integrate_gaussian(np.zeros(3), np.eye(3)), ValueError,
     "mean does not have dimension 2"),
    (lambda: stats.gaussian_kde(DATA).integrate_kde(stats.gaussian_kde(DATA[0])), ValueError,
     "KDEs are not the same dimensionality"),
    (lambda: stats.gaussian_kde(DATA).integrate_box([0, 0], [1, 1]), NotImplementedError,
     "only 1D box integrations are supported"),
    (lambda: stats.gaussian_kde(DATA).set_bandwidth("scott"), NotImplementedError,
     "dynamically changing the bandwidth method is not supported"),
]


@pytest.mark.parametrize("index", range(len(ERRORS)))
def test_errors_as_jax_raises_them(index):
    call, error, message = ERRORS[index]
    with pytest.raises(error, match=message):
        call()
