"""``shardc.random``: keys and random numbers, functional as in JAX.

``key(seed)`` gives a typed key array (dtype ``key<fry>``, shape ``()``); ``PRNGKey(seed)`` the
raw ``uint32[2]`` key data of older JAX code. Every sampler, ``split`` and ``fold_in`` take
either; ``split`` and ``fold_in`` return keys of the kind they were given. The bits, splits and
folds are JAX's (the Threefry-2x32 hash of each element's index keyed by the key).

    _keys             key arrays, key, PRNGKey, split, fold_in, key_data, bits
    _distributions    uniform, normal, randint, choice, gamma, poisson, ...
    _more             lognormal, cauchy, chisquare, t, f, pareto, orthogonal, ball, ...
    _random123        JAX's threefry4x32, philox2x32 and philox4x32 keys (``impl=``)
"""
from shardc.random._distributions import (bernoulli, beta, categorical, choice, dirichlet,
                                          exponential, gamma, gumbel, laplace, logistic,
                                          multivariate_normal, normal, permutation, poisson,
                                          rademacher, randint, truncated_normal, uniform)
from shardc.random._more import (ball, binomial, cauchy, chisquare, double_sided_maxwell, f,
                                 generalized_normal, geometric, loggamma, lognormal, maxwell,
                                 multinomial, orthogonal, pareto, rayleigh, t, triangular, wald,
                                 weibull_min)
from shardc.random._keys import (IMPLS, KeyDtype, PRNGImpl, PRNGKey, PRNGKeyArray, bits, clone,
                                 fold_in, key, key_data, key_dtype, key_impl, resolve_impl,
                                 split, wrap_key_data)

__all__ = [
    "IMPLS", "KeyDtype", "PRNGImpl", "PRNGKey", "PRNGKeyArray", "bernoulli", "beta", "bits",
    "categorical", "choice", "clone", "dirichlet", "exponential", "fold_in", "gamma", "gumbel",
    "key", "key_data", "key_dtype", "key_impl", "laplace", "logistic", "multivariate_normal", "normal",
    "permutation", "poisson", "rademacher", "randint", "resolve_impl", "split", "truncated_normal",
    "uniform", "wrap_key_data", "ball", "cauchy", "chisquare", "double_sided_maxwell", "f",
    "generalized_normal", "geometric", "loggamma", "lognormal", "maxwell", "orthogonal", "pareto",
    "rayleigh", "t", "triangular", "wald", "weibull_min", "binomial", "multinomial",
]


# the functions JAX runs as jitted programs, as such for the transfer guards
from shardc._compiled import RANDOM as _COMPILED, mark_compiled as _mark_compiled  # noqa: E402
_mark_compiled(globals(), _COMPILED)
