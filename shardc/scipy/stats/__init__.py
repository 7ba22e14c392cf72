"""``shardc.scipy.stats``: JAX's ``jax.scipy.stats``: a module of functions per distribution
(``norm.logpdf``, ``gamma.cdf``, ``poisson.pmf``, ...), ``gaussian_kde``, and the sample
summaries ``mode``, ``rankdata`` and ``sem``."""
from shardc.scipy.stats import (bernoulli, beta, betabinom, binom, cauchy, chi2, dirichlet,
                                expon, gamma, gennorm, geom, gumbel_l, gumbel_r, laplace,
                                logistic, multinomial, multivariate_normal, nbinom, norm,
                                pareto, poisson, t, truncnorm, uniform, vonmises, wrapcauchy)
from shardc.scipy.stats._core import mode, rankdata, sem
from shardc.scipy.stats.kde import gaussian_kde

__all__ = ["bernoulli", "beta", "betabinom", "binom", "cauchy", "chi2", "dirichlet", "expon",
           "gamma", "gennorm", "geom", "gumbel_l", "gumbel_r", "laplace", "logistic",
           "multinomial", "multivariate_normal", "nbinom", "norm", "pareto", "poisson", "t",
           "truncnorm", "uniform", "vonmises", "wrapcauchy", "gaussian_kde", "mode",
           "rankdata", "sem"]
