"""``gaussian_kde``: a density estimate from a sample, a sum of Gaussian kernels centred at
its points."""
from __future__ import annotations

import dataclasses
import math

import numpy as np

import shardc.numpy as jnp
import shardc.random as random
import shardc.scipy.linalg as linalg
import shardc.scipy.special as special
from shardc._transforms import jit
from shardc.batching_api import vmap
from shardc.numpy._arraylike import check_arraylike
from shardc.tree_util import register_pytree_node_class

__all__ = ["gaussian_kde"]

_LOG_2PI = math.log(2 * math.pi)


@register_pytree_node_class
@dataclasses.dataclass(frozen=True, init=False, slots=True)
class gaussian_kde:
    """A Gaussian kernel density estimate of the ``d``-dimensional ``dataset`` (shape
    ``(d, n)``, or ``(n,)`` for ``d = 1``), its points weighted by ``weights`` (default
    equally). ``bw_method`` sets the kernel's width relative to the data's covariance:
    ``'scott'`` (the default), ``'silverman'``, a scalar, or a callable of the estimate.
    Immutable, and a pytree whose leaves are ``neff``, ``dataset``, ``weights``,
    ``covariance`` and ``inv_cov`` (so it passes through ``jit``).

    >>> kde = gaussian_kde(jnp.array([0., 1., 1.5, 3.]))
    >>> kde.evaluate(jnp.array([1.0]))
    """
    neff: object
    dataset: object
    weights: object
    covariance: object
    inv_cov: object

    def __init__(self, dataset, bw_method=None, weights=None):
        check_arraylike("gaussian_kde", dataset, 0)
        dataset = jnp.atleast_2d(dataset)
        if jnp.iscomplexobj(dataset):
            raise NotImplementedError("gaussian_kde does not support complex data")
        if not dataset.size > 1:
            raise ValueError("`dataset` input should have multiple elements.")
        d, n = dataset.shape
        if weights is None:
            (dataset,) = special.inexact_operands(dataset)
            weights = jnp.full(n, 1.0 / n, dtype=dataset.dtype)
        else:
            check_arraylike("gaussian_kde", weights, 1)
            dataset, weights = special.inexact_operands(dataset, weights)
            weights = jnp.atleast_1d(weights)
            weights = weights / jnp.sum(weights)
            if weights.ndim != 1:
                raise ValueError("`weights` input should be one-dimensional.")
            if len(weights) != n:
                raise ValueError("`weights` input should be of length n")
        self._set("dataset", dataset)
        self._set("weights", weights)
        self._set("neff", 1 / jnp.sum(weights ** 2))
        factor = self._bandwidth_factor("scott" if bw_method is None else bw_method)
        data_covariance = self._data_covariance()
        self._set("covariance", data_covariance * factor ** 2)
        self._set("inv_cov", jnp.linalg.inv(data_covariance) / factor ** 2)

    def _set(self, name, value):
        object.__setattr__(self, name, value)     # (the dataclass is frozen)

    def _bandwidth_factor(self, bw_method):
        """The kernel's width over the data's standard deviation."""
        if isinstance(bw_method, str) and bw_method == "scott":
            return jnp.power(self.neff, -1.0 / (self.d + 4))
        if isinstance(bw_method, str) and bw_method == "silverman":
            return jnp.power(self.neff * (self.d + 2) / 4.0, -1.0 / (self.d + 4))
        if jnp.isscalar(bw_method) and not isinstance(bw_method, str):
            return bw_method
        if callable(bw_method):
            return bw_method(self)
        raise ValueError(
            "`bw_method` should be 'scott', 'silverman', a scalar, or a callable.")

    def _data_covariance(self):
        """The weighted covariance of the dataset (unbiased), as a ``(d, d)`` matrix."""
        return jnp.atleast_2d(jnp.cov(self.dataset, rowvar=True, bias=False,
                                      aweights=self.weights))

    def tree_flatten(self):
        return (self.neff, self.dataset, self.weights, self.covariance, self.inv_cov), None

    @classmethod
    def tree_unflatten(cls, aux_data, children):
        kde = cls.__new__(cls)
        for name, value in zip(("neff", "dataset", "weights", "covariance", "inv_cov"),
                               children):
            kde._set(name, value)
        return kde

    @property
    def d(self):
        """The number of dimensions."""
        return self.dataset.shape[0]

    @property
    def n(self):
        """The number of data points."""
        return self.dataset.shape[1]

    @property
    def factor(self):
        """The bandwidth factor (scipy's attribute; JAX's class has none): derived from the
        kernel's and the data's covariance, so the pytree's leaves stay JAX's five."""
        return jnp.sqrt(self.covariance[0, 0] / self._data_covariance()[0, 0])

    def evaluate(self, points):
        """The estimated density at ``points`` (shape ``(d, m)``; ``(m,)`` for ``d = 1``, or
        ``(d,)`` for one point)."""
        check_arraylike("evaluate", points, 0)
        points = self._reshape_points(points)
        return _kernel_sum(False, self.dataset.T, self.weights, points.T, self.inv_cov)

    def __call__(self, points):
        return self.evaluate(points)

    def pdf(self, x):
        """The estimated density at ``x`` (``evaluate``)."""
        return self.evaluate(x)

    def logpdf(self, x):
        """``log`` of the estimated density, accurate where the density underflows."""
        check_arraylike("logpdf", x, 0)
        x = self._reshape_points(x)
        return _kernel_sum(True, self.dataset.T, self.weights, x.T, self.inv_cov)

    def integrate_gaussian(self, mean, cov):
        """The integral of the estimate times the normal density of ``mean`` and ``cov``."""
        mean = jnp.atleast_1d(jnp.squeeze(mean))
        cov = jnp.atleast_2d(cov)
        if mean.shape != (self.d,):
            raise ValueError(f"mean does not have dimension {self.d}")
        if cov.shape != (self.d, self.d):
            raise ValueError(f"covariance does not have dimension {self.d}")
        chol, norm = _factor_sum(self.covariance + cov, self.d)
        return _convolved(chol, norm, self.dataset, self.weights, mean)

    @jit
    def integrate_box_1d(self, low, high):
        """The estimate's mass between the scalars ``low`` and ``high`` (``d = 1`` only)."""
        if self.d != 1:
            raise ValueError("integrate_box_1d() only handles 1D pdfs")
        if np.ndim(low) != 0 or np.ndim(high) != 0:
            raise ValueError("the limits of integration in integrate_box_1d must be scalars")
        sigma = jnp.squeeze(jnp.sqrt(self.covariance))
        low = jnp.squeeze((low - self.dataset) / sigma)
        high = jnp.squeeze((high - self.dataset) / sigma)
        return jnp.sum(self.weights * (special.ndtr(high) - special.ndtr(low)))

    def integrate_kde(self, other):
        """The integral of the product of this estimate and ``other`` (same ``d``)."""
        if other.d != self.d:
            raise ValueError("KDEs are not the same dimensionality")
        chol, norm = _factor_sum(self.covariance + other.covariance, self.d)
        small, large = (self, other) if self.n < other.n else (other, self)
        per_point = vmap(lambda mean: _convolved(chol, norm, large.dataset, large.weights,
                                                 mean), in_axes=1)(small.dataset)
        return jnp.sum(per_point * small.weights)

    @jit(static_argnames=("shape",))
    def resample(self, key, shape=()):
        """Samples of shape ``(d, *shape)``: data points drawn by weight, plus kernel
        noise."""
        index_key, noise_key = random.split(key)
        index = random.choice(index_key, self.n, shape=shape, p=self.weights)
        noise = random.multivariate_normal(noise_key, jnp.zeros(self.d, self.covariance.dtype),
                                           self.covariance, shape=shape,
                                           dtype=self.dataset.dtype).T
        return self.dataset[:, index] + noise

    def integrate_box(self, low_bounds, high_bounds, maxpts=None):
        """Not supported beyond one dimension: see ``integrate_box_1d``."""
        raise NotImplementedError(
            "only 1D box integrations are supported; use `integrate_box_1d`")

    def set_bandwidth(self, bw_method=None):
        """Not supported: the estimate is immutable."""
        raise NotImplementedError(
            "dynamically changing the bandwidth method is not supported")

    def _reshape_points(self, points):
        """``points`` as a ``(d, m)`` array (a ``(d,)`` vector is one point)."""
        if jnp.iscomplexobj(points):
            raise NotImplementedError("gaussian_kde does not support complex coordinates")
        points = jnp.atleast_2d(points)
        d, m = points.shape
        if d == self.d:
            return points
        if d == 1 and m == self.d:
            return jnp.reshape(points, (self.d, 1))
        raise ValueError(f"points have dimension {d}, dataset has dimension {self.d}")


def _factor_sum(covariance, d):
    """The Cholesky factor of the summed ``covariance`` and the normal density's constant
    ``1 / sqrt((2 pi)^d det covariance)``."""
    chol = linalg.cho_factor(covariance)
    return chol, 1.0 / (math.sqrt(2 * math.pi) ** d * jnp.prod(jnp.diag(chol[0])))


def _convolved(chol, norm, target, weights, mean):
    """The weighted sum over the columns of ``target`` of the normal density (factor
    ``chol``, constant ``norm``) of their distance from ``mean``."""
    diff = target - mean[:, None]
    quadratic = 0.5 * jnp.sum(diff * linalg.cho_solve(chol, diff), axis=0)
    return norm * jnp.sum(jnp.exp(-quadratic) * weights)


def _kernel_sum(in_log, points, weights, xi, precision):
    """The weighted sum (its ``log`` if ``in_log``) over the ``(n, d)`` ``points`` of the
    normal densities of precision ``precision`` at each row of ``xi``: computed in the
    whitened coordinates (``precision = W W^T``)."""
    points, weights, xi, precision = special.inexact_operands(points, weights, xi, precision)
    d = points.shape[1]
    if xi.shape[1] != d:
        raise ValueError("points and xi must have same trailing dim")
    if precision.shape != (d, d):
        raise ValueError("precision matrix must match data dims")
    whitening = linalg.cholesky(precision, lower=True)
    points, xi = jnp.dot(points, whitening), jnp.dot(xi, whitening)
    log_norm = jnp.sum(jnp.log(jnp.diag(whitening))) - 0.5 * d * _LOG_2PI
    # (m, n): the kernel's exponent between each evaluation point and each data point
    exponent = log_norm - 0.5 * jnp.sum(jnp.square(xi[:, None, :] - points[None, :, :]),
                                        axis=-1)
    if in_log:
        return special.logsumexp(jnp.log(weights) + exponent, axis=1)
    return jnp.sum(weights * jnp.exp(exponent), axis=1)
