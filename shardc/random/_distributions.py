"""Samplers: ``uniform``, ``normal``, ``randint``, ``bernoulli``, ``permutation``,
``choice``, ``categorical``, ``truncated_normal``, ``multivariate_normal``, ``gamma``,
``beta``, ``dirichlet``, ``poisson``, ... Each takes a single key (typed or raw data) and
draws its bits with ``random_bits``, JAX's bits; each follows JAX's algorithm (the same
splits, bit widths, formulas and clamps, and XLA's roundings: its fused multiply-adds, its
float32 log, log1p, erf and erf_inv), so that for the same key the draws are JAX's.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from compiler.custom_ad import custom_jvp
from compiler.tracing import aval_of, bind
from compiler.vmap import vmap
from ir import dtypes as _dt
from ir import primitives as p
import shardc.numpy as jnp
import shardc.lax as lax
from shardc.lax import complex as lax_complex, lgamma, pcast, rem, top_k, while_loop
from shardc.config import config
from shardc.numpy._core import canonical_axis, takes_out_sharding
from shardc.random._keys import (bits, compiled, fold_in, IMPLS, PRNGKeyArray,
                                 random_bits, resolve_impl, sample_shape, single_key, split)

__all__ = [
    "uniform", "normal", "randint", "bernoulli", "permutation", "exponential", "gumbel", "logistic",
    "laplace", "rademacher", "truncated_normal", "categorical", "choice", "multivariate_normal",
    "gamma", "beta", "dirichlet", "poisson",
]


@takes_out_sharding
def uniform(key, shape=(), dtype=float, minval=0.0, maxval=1.0):
    """Uniform floats in ``[minval, maxval)``; ``dtype`` must be a floating one (JAX's
    ValueError otherwise). JAX's values: random mantissa bits under the exponent of 1 give a
    float in ``[1, 2)``; less 1, it is scaled to the range."""
    single_key("uniform", key)
    dtype = _dt.requested(dtype, "")
    if not _dt.is_float(dtype):
        raise ValueError(f"dtype argument to `uniform` must be a float dtype, got {dtype}")
    shape = sample_shape(shape)
    if all(type(v) in (int, float) for v in (minval, maxval)):
        # bounds given as numbers: one compiled program per shape and dtype (and whether the
        # bounds' span is exact), the bounds its arguments, as JAX's jitted _uniform
        exact = _exact_multiple(minval, maxval, dtype)
        return compiled(_uniform_between, shape, dtype, exact)(key, jnp.asarray(minval),
                                                               jnp.asarray(maxval))
    return _uniform_draw(key, shape, dtype, minval, maxval)


def _uniform_between(key, minval, maxval, shape, dtype, exact):
    return _uniform_draw(key, shape, dtype, minval, maxval, exact)


def _uniform_draw(key, shape, dtype, minval, maxval, exact=None):
    info = _dt.finfo(dtype)
    nbits, nmant = info.bits, info.nmant
    rng_bits = 8 if nmant < 8 else nbits      # a float of few mantissa bits draws a byte
    unsigned = np.dtype(f"uint{nbits}")
    raw = jnp.astype(random_bits(key, shape, "uniform", rng_bits), unsigned)
    one = np.array(1.0, dtype).view(unsigned)
    float_bits = jnp.bitwise_or(lax.shift_right_logical(raw, unsigned.type(rng_bits - nmant)),
                                one)
    floats = jnp.subtract(lax.bitcast_convert_type(float_bits, dtype), dtype.type(1.0))
    if exact is None:
        exact = _exact_multiple(minval, maxval, dtype)
    minval, maxval = (jnp.astype(jnp.asarray(v), dtype) for v in (minval, maxval))
    span = jnp.subtract(maxval, minval)
    if dtype.itemsize >= 4 and not exact:
        # XLA fuses the product and the sum into one rounding for float32 and float64
        scaled = _fused_multiply_add(floats, span, minval)
    else:
        scaled = jnp.add(jnp.multiply(floats, span), minval)
    return jnp.maximum(minval, scaled)


def _exact_multiple(minval, maxval, dtype) -> bool:
    """Whether bounds given as numbers have a span (in ``dtype``) of a power of two or 0, so
    that a uniform draw times it is exact and a fused multiply-add rounds as a multiply and
    an add do (the default bounds, and normal's)."""
    if not all(isinstance(v, (int, float, np.generic)) for v in (minval, maxval)):
        return False
    span = np.asarray(maxval, dtype) - np.asarray(minval, dtype)
    if not np.isfinite(span):
        return False
    mantissa, _ = np.frexp(np.abs(span.astype(np.float64)))
    return bool(mantissa in (0.0, 0.5))


def _fused_multiply_add(a, b, c):
    """``a * b + c`` rounded once (a fused multiply-add, as XLA computes a product added to),
    in ``a``'s float32 or float64: the product split exactly into a rounded part and its
    error (Dekker's, with Veltkamp's splitting), added to ``c`` with the error of that sum
    kept (Knuth's two-sum), the two errors added last. Gradients are those of ``a * b + c``;
    where the splitting overflows, the unfused value stands."""
    dtype = jnp.result_type(a)
    plain = jnp.add(jnp.multiply(a, b), c)
    a, b, c = (lax.stop_gradient(jnp.broadcast_to(v, plain.shape)) for v in (a, b, c))
    splitter = dtype.type(2.0 ** -(-(_dt.finfo(dtype).nmant + 1) // 2) + 1)

    def halves(x):
        t = jnp.multiply(splitter, x)
        high = jnp.subtract(t, jnp.subtract(t, x))
        return high, jnp.subtract(x, high)

    product = jnp.multiply(a, b)
    (a_hi, a_lo), (b_hi, b_lo) = halves(a), halves(b)
    error = jnp.add(jnp.add(jnp.add(jnp.subtract(jnp.multiply(a_hi, b_hi), product),
                                    jnp.multiply(a_hi, b_lo)),
                            jnp.multiply(a_lo, b_hi)),
                    jnp.multiply(a_lo, b_lo))
    total = jnp.add(product, c)
    back = jnp.subtract(total, product)
    total_error = jnp.add(jnp.subtract(product, jnp.subtract(total, back)),
                          jnp.subtract(c, back))
    fused = jnp.add(total, jnp.add(total_error, error))
    correction = jnp.where(jnp.isfinite(fused), jnp.subtract(fused, lax.stop_gradient(plain)),
                           dtype.type(0))
    return jnp.add(plain, correction)


@takes_out_sharding
def normal(key, shape=(), dtype=float):
    """Standard normal floats, JAX's: ``sqrt(2) * erf_inv(u)`` of a uniform ``u`` in
    ``(-1, 1)``. A complex ``dtype`` draws the real and imaginary parts from the two keys of
    a split, each of variance 1/2, so ``E|z|**2 == 1``."""
    single_key("normal", key)
    dtype = _dt.requested(dtype, "")
    if not _dt.is_inexact(dtype):
        raise ValueError(f"dtype argument to `normal` must be a float or complex dtype, "
                         f"got {dtype}")
    shape = sample_shape(shape)
    if _dt.kind(dtype) == _dt.COMPLEX:
        key_re, key_im = split(key)
        real_dtype = _dt.real_dtype(dtype)
        re, im = (jnp.astype(_normal_real(k, shape, real_dtype), dtype) for k in (key_re, key_im))
        return jnp.divide(jnp.add(re, jnp.multiply(im, dtype.type(1j))),
                          dtype.type(np.sqrt(2)))
    # one compiled program per shape and dtype, as JAX's jitted _normal
    return compiled(_normal_real, shape, dtype)(key)


def _normal_real(key, shape, dtype):
    low = np.nextafter(np.array(-1.0, dtype), np.array(0.0, dtype))
    u = uniform(key, shape, dtype, low, 1.0)
    return jnp.multiply(dtype.type(np.sqrt(2)), lax.erf_inv(u))


@takes_out_sharding
def randint(key, shape, minval, maxval, dtype=int):
    """Integers in ``[minval, maxval)``: the bounds may be traced, or arrays broadcasting to
    ``shape``; they are clipped to ``dtype``'s range (``maxval`` one past it still reaches
    its largest value), and ``maxval <= minval`` gives ``minval``.

    JAX's values: twice the dtype's bits are drawn (from the two keys of a split) and reduced
    modulo the span, so every value of a span up to the dtype's whole range is reached,
    almost uniformly; a dtype narrower than 32 bits is drawn as int32 and converted."""
    single_key("randint", key)
    dtype = _dt.requested(dtype, "")
    if not _dt.is_int(dtype) or dtype == np.bool_:
        raise TypeError(f"randint only accepts integer dtypes, got {dtype}")
    shape = sample_shape(shape)
    if type(minval) is int and type(maxval) is int:
        # bounds given as numbers: one compiled program per shape and dtype, the bounds its
        # arguments, as JAX's jitted randint
        return compiled(_randint_of_dtype, shape, dtype)(key, jnp.asarray(minval),
                                                         jnp.asarray(maxval))
    return _randint_of_dtype(key, minval, maxval, shape, dtype)


def _randint_of_dtype(key, minval, maxval, shape, dtype):
    info = np.iinfo(dtype)
    if info.bits < 32:
        # drawn in 32 bits, as JAX's (fewer would bias the remainders more)
        minval = jnp.clip(jnp.astype(jnp.asarray(minval), np.int32), int(info.min),
                          int(info.max))
        maxval = jnp.clip(jnp.astype(jnp.asarray(maxval), np.int32), int(info.min),
                          int(info.max) + 1)
        return jnp.astype(_randint(key, shape, minval, maxval, np.dtype(np.int32)), dtype)
    return _randint(key, shape, minval, maxval, dtype)


def _randint(key, shape, minval, maxval, dtype):
    _check_bounds_shape("randint", shape, jnp.shape(minval), jnp.shape(maxval))
    minval, maxval = (jnp.asarray(v) for v in (minval, maxval))
    minval, maxval = (v if _dt.is_int(v.dtype) else jnp.astype(v, int) for v in (minval, maxval))
    info = np.iinfo(dtype)
    beyond = jnp.greater(maxval, _clip_integer(jnp.asarray(info.max, dtype), maxval.dtype))
    minval, maxval = _clip_integer(minval, dtype), _clip_integer(maxval, dtype)
    unsigned = np.dtype(f"uint{info.bits}")
    first, second = split(key)
    high = random_bits(first, shape, "randint", info.bits)
    low = random_bits(second, shape, "randint", info.bits)
    span = jnp.astype(jnp.subtract(maxval, minval), unsigned)
    span = jnp.where(jnp.less_equal(maxval, minval), unsigned.type(1), span)
    # a maxval past the dtype's range reaches its largest value: one more (wrapping to 0 for
    # the whole range, where the remainders below leave every value)
    span = jnp.where(jnp.logical_and(beyond, jnp.greater(maxval, minval)),
                     jnp.add(span, unsigned.type(1)), span)
    span = lax.broadcast_to_rank(span, len(shape))     # (lax's rem takes operands of one rank)
    # (high * 2**bits + low) mod span, without overflow: 2**bits mod span by halves (lax's
    # rem: x rem 0 is x)
    multiplier = rem(unsigned.type(2 ** (info.bits // 2)), span)
    multiplier = rem(jnp.multiply(multiplier, multiplier), span)
    offset = jnp.add(jnp.multiply(rem(high, span), multiplier),
                     rem(low, span))
    offset = rem(offset, span)
    return jnp.add(minval, jnp.astype(offset, dtype))


def _check_bounds_shape(name, shape, *param_shapes):
    """JAX's check that parameters broadcast to a sampler's ``shape``: lax's ValueError where
    they do not broadcast at all, JAX's where they broadcast to another shape."""
    broadcast = lax.broadcast_shapes(tuple(shape), *param_shapes)
    if broadcast != tuple(shape):
        raise ValueError(f"{name} parameter shapes must be broadcast-compatible with shape "
                         f"argument, and the result of broadcasting the shapes must equal the "
                         f"shape argument, but got result {broadcast} for shape argument "
                         f"{tuple(shape)}.")


def _clip_integer(value, dtype):
    """An integer array as ``dtype``, clipped to the values both dtypes hold."""
    if value.dtype == dtype:
        return value
    have, want = np.iinfo(value.dtype), np.iinfo(dtype)
    lo, hi = max(have.min, want.min), min(have.max, want.max)
    return jnp.astype(jnp.clip(value, value.dtype.type(lo), value.dtype.type(hi)), dtype)


@takes_out_sharding
def bernoulli(key, p=0.5, shape=None, mode="low"):
    """Booleans that are True with probability ``p`` (shape: ``p``'s when ``shape`` is None),
    JAX's: a uniform draw of ``p``'s (floating) dtype below ``p``. ``mode='high'`` draws two
    uniforms and adds the second below the first's resolution, so that a ``p`` smaller than
    that resolution is still honoured."""
    if shape is not None:
        shape = sample_shape(shape)
    if mode not in ("high", "low"):
        raise ValueError(f"got {mode=}, expected 'high' or 'low'")
    single_key("bernoulli", key)
    dtype = jnp.result_type(p)
    if not _dt.is_float(dtype):
        raise TypeError(f"bernoulli probability `p` must have a floating dtype, got {dtype}.")
    if shape is None:
        shape = jnp.shape(p)
    else:
        _check_bounds_shape("bernoulli", shape, jnp.shape(p))
    if type(p) is float:
        # one compiled program per shape and mode, the probability its argument, as JAX's
        # jitted bernoulli
        return compiled(_bernoulli, dtype, shape, mode)(key, jnp.asarray(p))
    return _bernoulli(key, p, dtype, shape, mode)


def _bernoulli(key, p, dtype, shape, mode):
    p = jnp.astype(jnp.asarray(p), dtype)
    if mode == "high":
        u1, u2 = uniform(key, (2,) + shape, dtype)
        # the resolution of a uniform draw is 2 ** -nmant
        u2 = jnp.multiply(u2, dtype.type(2.0 ** -_dt.finfo(dtype).nmant))
        return jnp.less(u2, jnp.subtract(p, u1))
    return jnp.less(uniform(key, shape, dtype), p)


def _float_draw(name: str, key, shape, dtype):
    """A sampler's checked key, shape and (floating) dtype: JAX's ValueError for another."""
    single_key(name, key)
    dtype = _dt.requested(dtype, "")
    if not _dt.is_float(dtype):
        raise ValueError(f"dtype argument to `{name}` must be a float dtype, got {dtype}")
    return sample_shape(shape), dtype


@takes_out_sharding
def permutation(key, x, axis=0, independent=False):
    """A random permutation of ``range(x)``, or of ``x`` along ``axis`` (every slice permuted
    alike; ``independent=True`` permutes each 1-d slice along ``axis`` on its own).

    JAX's values: a few rounds (enough that 32-bit keys of every item are distinct with high
    probability) of a stable sort by fresh random 32-bit keys, each round's from a split.

    >>> random.permutation(random.key(0), 5)        # the integers 0..4 in a random order
    """
    single_key("permutation", key)
    axis = canonical_axis(axis, jnp.ndim(x) or 1)
    if jnp.ndim(x) == 0:
        if not _dt.is_int(jnp.result_type(x)):
            raise TypeError("x must be an integer or at least 1-dimensional")
        return _shuffle(key, jnp.arange(int(x)), axis)    # a traced count raises, as in JAX
    x = jnp.asarray(x)
    if independent or x.ndim == 1:
        return _shuffle(key, x, axis)
    order = _shuffle(key, jnp.arange(x.shape[axis]), 0)
    return jnp.take(x, order, axis, unique_indices=True)


def _shuffle(key, x, axis):
    """``x`` shuffled along ``axis``, JAX's way: ``ceil(3 log(size) / log(2**32 - 1))``
    rounds, each a stable sort of ``x`` by 32 random bits per item drawn from a new key of a
    split, so that ties in one round's keys are broken by the next's."""
    rounds = int(np.ceil(3 * np.log(max(1, x.size)) / np.log(np.iinfo(np.uint32).max)))
    for _ in range(rounds):
        key, subkey = split(key)
        sort_keys = random_bits(subkey, x.shape, "permutation", 32)
        _, x = lax.sort_key_val(sort_keys, x, axis)
    return x


@takes_out_sharding
def exponential(key, shape=(), dtype=float):
    """Exponential floats with rate 1 (mean 1), JAX's: ``-log1p(-u)`` of a uniform ``u`` in
    ``[0, 1)``."""
    shape, dtype = _float_draw("exponential", key, shape, dtype)
    return compiled(_exponential, shape, dtype)(key)       # as JAX's jitted exponential


def _exponential(key, shape, dtype):
    u = uniform(key, shape, dtype)
    return jnp.negative(jnp.log1p(jnp.negative(u)))


@takes_out_sharding
def gumbel(key, shape=(), dtype=float, mode=None):
    """Standard Gumbel floats (location 0, scale 1), JAX's: ``-log(-log u)`` of a uniform
    ``u`` in ``[tiny, 1)`` (``mode='low'``). ``mode='high'`` draws two uniforms, the second
    filling in below the first's resolution where the first is under 1/2 (the largest draw
    goes from about 16 to about 32 in float32); ``mode='highest'`` (float32) builds ``u`` from
    64 random bits. ``mode`` defaults to ``'high'`` under ``jax_high_dynamic_range_gumbel``,
    else ``'low'``."""
    single_key("gumbel", key)
    dtype = _dt.requested(dtype, "")
    if not _dt.is_float(dtype):
        raise ValueError(f"dtype argument to `gumbel` must be a float dtype, got {dtype}")
    shape = sample_shape(shape)
    if mode is None:
        mode = "high" if config.read("jax_high_dynamic_range_gumbel") else "low"
    if mode not in ("highest", "high", "low"):
        raise ValueError(f"Must provide valid mode for gumbel got: {mode}")
    return compiled(_gumbel, shape, dtype, mode)(key)      # as JAX's jitted gumbel


def _gumbel(key, shape, dtype, mode):
    info = _dt.finfo(dtype)
    if dtype == np.float32 and mode == "highest":
        words = random_bits(key, (2,) + shape, "gumbel", 32)
        # 1 - u, as the two's complement of the 64-bit fixed point fraction
        neg = jnp.bitwise_not(words)
        carry = jnp.astype(jnp.equal(neg[1], np.uint32(2 ** 32 - 1)), np.uint32)
        neg = jnp.stack([jnp.add(neg[0], carry), jnp.add(neg[1], np.uint32(1))])
        flip = jnp.less(words[0], np.uint32(2 ** 31))
        x = _fraction_to_float32(jnp.where(flip, words, neg))
        # log1p for u in (0, 1/2), log for 1 - u in [1/2, 1)
        return jnp.where(flip, jnp.negative(jnp.log(jnp.negative(jnp.log1p(jnp.negative(x))))),
                         jnp.negative(jnp.log(jnp.negative(jnp.log(x)))))
    if mode in ("high", "highest"):
        high, low = uniform(key, (2,) + shape, dtype)
        x = jnp.where(high >= dtype.type(0.5), high,
                      jnp.add(jnp.add(high, jnp.multiply(dtype.type(2.0 ** -info.nmant), low)),
                              dtype.type(info.tiny)))
        return jnp.negative(jnp.log(jnp.negative(jnp.log1p(jnp.negative(x)))))
    u = uniform(key, shape, dtype, minval=info.tiny, maxval=1.0)
    return jnp.negative(jnp.log(jnp.negative(jnp.log(u))))


def _fraction_to_float32(words):
    """The float32 nearest below the 64-bit binary fraction ``words[0] . words[1]`` (in
    (0, 1); JAX's ``_safe_int_to_float``): its leading one found by counting leading zeros,
    the 23 bits after it the mantissa."""
    info = _dt.finfo(np.float32)
    high_zeros, low_zeros = lax.clz(words[0]), lax.clz(words[1])
    high, low = words[0], words[1]
    all_high_zero = jnp.equal(high_zeros, np.uint32(32))
    mantissa = jnp.bitwise_or(
        lax.shift_left(high, high_zeros),
        jnp.where(all_high_zero, lax.shift_left(low, low_zeros),
                  lax.shift_right_logical(low, jnp.subtract(np.uint32(32), high_zeros))))
    mantissa = lax.shift_right_logical(mantissa, np.uint32(info.bits - info.nmant - 1))
    mantissa = jnp.bitwise_and(mantissa, np.uint32((1 << info.nmant) - 1))
    exponent = jnp.subtract(np.uint32(-info.minexp),
                            jnp.where(all_high_zero, jnp.add(np.uint32(32), low_zeros),
                                      high_zeros))
    exponent = lax.shift_left(exponent, np.uint32(info.nmant))
    exponent = jnp.bitwise_and(exponent,
                               np.uint32((1 << (info.bits - 2)) - (1 << (info.nmant - 1))))
    return lax.bitcast_convert_type(jnp.bitwise_or(exponent, mantissa), np.float32)


@takes_out_sharding
def logistic(key, shape=(), dtype=float):
    """Standard logistic floats, JAX's: ``log(u) - log1p(-u)`` of a uniform ``u`` in
    ``[tiny, 1)``."""
    shape, dtype = _float_draw("logistic", key, shape, dtype)
    return compiled(_logistic, shape, dtype)(key)          # as JAX's jitted logistic


def _logistic(key, shape, dtype):
    u = uniform(key, shape, dtype, minval=_dt.finfo(dtype).tiny, maxval=1.0)
    return jnp.subtract(jnp.log(u), jnp.log1p(jnp.negative(u)))


@takes_out_sharding
def laplace(key, shape=(), dtype=float):
    """Standard Laplace floats (location 0, scale 1), JAX's: ``sign(u) log1p(-|u|)`` of a
    uniform ``u`` in ``(-1, 1)``."""
    shape, dtype = _float_draw("laplace", key, shape, dtype)
    return compiled(_laplace, shape, dtype)(key)           # as JAX's jitted laplace


def _laplace(key, shape, dtype):
    u = uniform(key, shape, dtype, minval=-1.0 + _dt.finfo(dtype).epsneg, maxval=1.0)
    return jnp.multiply(jnp.sign(u), jnp.log1p(jnp.negative(jnp.abs(u))))


@takes_out_sharding
def rademacher(key, shape=(), dtype=int):
    """-1 or +1 with equal probability."""
    single_key("rademacher", key)
    return jnp.astype(jnp.subtract(jnp.multiply(jnp.astype(bernoulli(key, 0.5, shape), np.int32),
                                                2), 1), dtype)


@takes_out_sharding
def truncated_normal(key, lower, upper, shape=None, dtype=float):
    """Standard normal floats conditioned on ``lower < x < upper``, JAX's: a uniform draw
    between ``erf(lower / sqrt 2)`` and ``erf(upper / sqrt 2)`` mapped back by
    ``sqrt 2 * erf_inv``, clamped into the open interval.

    ``shape`` defaults to the broadcast shape of ``lower`` and ``upper``.
    """
    if shape is not None:
        shape = sample_shape(shape)
    single_key("truncated_normal", key)
    dtype = _dt.requested(dtype, "")
    if not _dt.is_float(dtype):
        raise ValueError(f"dtype argument to `truncated_normal` must be a float dtype, "
                         f"got {dtype}")
    if shape is None:
        shape = lax.broadcast_shapes(jnp.shape(lower), jnp.shape(upper))
    else:
        _check_bounds_shape("truncated_normal", shape, jnp.shape(lower), jnp.shape(upper))
    if all(type(v) in (int, float) for v in (lower, upper)):
        # bounds given as numbers: one compiled program per shape and dtype, the bounds its
        # arguments, as JAX's jitted truncated_normal
        return compiled(_truncated_normal, shape, dtype)(key, jnp.asarray(lower),
                                                         jnp.asarray(upper))
    return _truncated_normal(key, lower, upper, shape, dtype)


def _truncated_normal(key, lower, upper, shape, dtype):
    sqrt2 = np.array(np.sqrt(2), dtype)
    lower = jnp.astype(jnp.asarray(lower), dtype)
    upper = jnp.astype(jnp.asarray(upper), dtype)
    a = bind(p.erf_p, jnp.divide(lower, sqrt2))
    b = bind(p.erf_p, jnp.divide(upper, sqrt2))
    u = uniform(key, shape, dtype, minval=a, maxval=b)
    out = jnp.multiply(sqrt2, bind(p.erf_inv_p, u))
    # rounding (or a draw of exactly a) could leave the open interval: clamp into it
    inf = np.asarray(np.inf, dtype)
    return jnp.clip(out, lax.nextafter(lax.stop_gradient(lower), inf),
                    lax.nextafter(lax.stop_gradient(upper), -inf))


@takes_out_sharding
def categorical(key, logits, axis=-1, shape=None, replace=True, mode=None):
    """Indices drawn with probabilities ``softmax(logits)`` along ``axis``, JAX's: the argmax
    of the logits plus ``gumbel`` noise of ``mode`` (the Gumbel max trick), the noise drawn
    in the logits' layout for every draw of ``shape``.

    ``shape`` (default: ``logits``' shape without ``axis``) must broadcast with that batch
    shape. Without replacement (``replace=False``) the leading ``prod(shape[:-len(batch)])``
    draws of each batch member are distinct: the top ones of one Gumbel-perturbed copy of the
    logits (the Gumbel top-k trick).
    """
    single_key("categorical", key)
    logits = jnp.asarray(logits)
    axis = canonical_axis(axis, logits.ndim)
    batch = tuple(np.delete(logits.shape, axis))
    if shape is None:
        shape = batch
    else:
        shape = sample_shape(shape)
        _check_bounds_shape("categorical", shape, batch)
    prefix = shape[:len(shape) - len(batch)]
    if replace:
        noise_shape = list(shape[len(shape) - len(batch):])
        noise_shape.insert(axis, logits.shape[axis])
        noise = gumbel(key, prefix + tuple(noise_shape), logits.dtype, mode=mode)
        moved = axis - logits.ndim          # the same axis, counted from the end
        return jnp.argmax(jnp.add(noise, jnp.expand_dims(logits, tuple(range(len(prefix))))),
                          axis=moved)
    logits = jnp.add(logits, gumbel(key, logits.shape, logits.dtype, mode=mode))
    k = math.prod(prefix)
    if k > logits.shape[axis]:
        raise ValueError(f"Number of samples without replacement ({k}) cannot exceed number "
                         f"of categories ({logits.shape[axis]}).")
    _, indices = top_k(jnp.moveaxis(logits, axis, -1), k)
    if tuple(shape) != tuple(prefix) + batch:
        raise ValueError(f"categorical: without replacement, shape {shape} must end with the "
                         f"batch shape {batch} (logits' shape without the sampled axis)")
    # batch + (k,) -> (k,) + batch -> prefix + batch
    return jnp.reshape(jnp.moveaxis(indices, -1, 0), shape)


@takes_out_sharding
def choice(key, a, shape=(), replace=True, p=None, axis=0, mode=None):
    """Items of ``a`` along ``axis`` (or of ``range(a)`` for an int) drawn with probabilities
    ``p`` (uniform if None), with or without replacement: ``shape`` draws, in place of
    ``a``'s ``axis``.

    JAX's values: ``randint`` indices (uniform, with replacement), the first of a
    ``permutation`` (uniform, without), the inverse of ``p``'s cumulative sum at a uniform
    (weighted, with), or the top of ``log p`` plus ``gumbel`` noise of ``mode`` (weighted,
    without)."""
    single_key("choice", key)
    if not isinstance(shape, Sequence):
        raise TypeError(f"shape argument of jax.random.choice must be a sequence, got {shape}")
    shape = tuple(shape)
    arr = jnp.asarray(a)
    if arr.ndim == 0:
        n_inputs = int(a)
    else:
        axis = canonical_axis(axis, arr.ndim)
        n_inputs = arr.shape[axis]
    n_draws = math.prod(shape)
    if n_draws == 0:
        return jnp.zeros(shape, dtype=arr.dtype)
    if n_inputs <= 0:
        raise ValueError("a must be greater than 0 unless no samples are taken")
    if not replace and n_draws > n_inputs:
        raise ValueError(f"Cannot take a larger sample (size {n_draws}) than population (size "
                         f"{n_inputs}) when 'replace=False'")
    if p is None:
        if replace:
            index = randint(key, shape, 0, n_inputs)
            result = index if arr.ndim == 0 else jnp.take(arr, index, axis)
        else:
            slices = (slice(None),) * axis + (slice(n_draws),)
            result = permutation(key, n_inputs if arr.ndim == 0 else arr, axis)[slices]
    else:
        p_arr = jnp.asarray(p)
        if not _dt.is_inexact(p_arr.dtype):
            p_arr = jnp.astype(p_arr, _dt.canonicalize(float))
        if p_arr.shape != (n_inputs,):
            raise ValueError(f"p must be None or a 1D vector with the same size as "
                             f"a.shape[axis]. p has shape {p_arr.shape} and a.shape[axis] is "
                             f"{n_inputs}.")
        if replace:
            cdf = jnp.cumsum(p_arr)
            u = uniform(key, shape, dtype=cdf.dtype)
            r = jnp.multiply(cdf[-1], jnp.subtract(cdf.dtype.type(1), u))
            index = jnp.astype(jnp.searchsorted(cdf, r), int)
        else:
            # the Gumbel top-k trick
            scores = jnp.add(gumbel(key, (n_inputs,), dtype=p_arr.dtype, mode=mode),
                             jnp.log(p_arr))
            index = jnp.astype(top_k(scores, n_draws)[1], int)
        result = index if arr.ndim == 0 else jnp.take(arr, index, axis)
    return jnp.reshape(result, shape if arr.ndim == 0 else
                       arr.shape[:axis] + shape + arr.shape[axis + 1:])


@takes_out_sharding
def multivariate_normal(key, mean, cov, shape=None, dtype=None, method="cholesky"):
    """Normal vectors with ``mean`` (``[..., n]``) and covariance ``cov`` (``[..., n, n]``),
    JAX's: ``mean + F z`` with ``z`` standard normal (of ``dtype``, by default ``mean``'s)
    and ``F F^T = cov``: the Cholesky factor (``method='cholesky'``), ``V sqrt(w)`` from
    ``eigh`` or ``U sqrt(s)`` from ``svd`` (``'eigh'``, ``'svd'``: positive semi-definite
    covariances too).

    ``shape`` (default: the broadcast batch shape of ``mean`` and ``cov``) is the batch shape
    of the result, which has a last dimension ``n``.
    """
    single_key("multivariate_normal", key)
    mean, cov = (jnp.asarray(v) for v in (mean, cov))
    inexact = jnp.promote_types(jnp.result_type(mean, cov), _dt.canonicalize(float))
    mean, cov = (jnp.astype(v, inexact) for v in (mean, cov))
    if method not in ("svd", "eigh", "cholesky"):
        raise ValueError("method must be one of {'svd', 'eigh', 'cholesky'}")
    dtype = mean.dtype if dtype is None else _dt.requested(dtype, "")
    if not _dt.is_float(dtype):
        raise ValueError(f"dtype argument to `multivariate_normal` must be a float dtype, "
                         f"got {dtype}")
    if shape is not None:
        shape = sample_shape(shape)
    if mean.ndim < 1:
        raise ValueError(f"multivariate_normal requires mean.ndim >= 1, got mean.ndim == "
                         f"{mean.ndim}")
    if cov.ndim < 2:
        raise ValueError(f"multivariate_normal requires cov.ndim >= 2, got cov.ndim == "
                         f"{cov.ndim}")
    n = mean.shape[-1]
    if cov.shape[-2:] != (n, n):
        raise ValueError(f"multivariate_normal requires cov.shape == (..., n, n) for n={n}, "
                         f"but got cov.shape == {cov.shape}.")
    if shape is None:
        shape = lax.broadcast_shapes(mean.shape[:-1], cov.shape[:-2])
    else:
        _check_bounds_shape("normal", shape, mean.shape[:-1], cov.shape[:-2])
    if method == "svd":
        u, s, _ = jnp.linalg.svd(cov)
        factor = jnp.multiply(u, jnp.sqrt(s[..., None, :]))
    elif method == "eigh":
        w, v = jnp.linalg.eigh(cov)
        factor = jnp.multiply(v, jnp.sqrt(w[..., None, :]))
    else:
        factor = jnp.linalg.cholesky(cov)
    z = normal(key, tuple(shape) + mean.shape[-1:], dtype)
    return jnp.add(mean, jnp.einsum("...ij,...j->...i", factor, z))


@takes_out_sharding
def gamma(key, a, shape=None, dtype=float):
    """Gamma(``a``, 1) floats (``a > 0``, broadcast to ``shape``), JAX's: each entry draws
    from its own key of a split, by Marsaglia and Tsang's rejection method (a ``while_loop``
    of rounds, each drawing from the next keys of a split), ``a < 1`` drawing Gamma(a + 1)
    times ``u ** (1/a)``. Differentiable in ``a`` (the derivative of the draw that keeps
    its place in the distribution, JAX's)."""
    single_key("gamma", key)
    return gamma_draws(key, a, shape, gamma_dtype(dtype), log_space=False)


def gamma_dtype(dtype):
    """A gamma sampler's float ``dtype`` (None: the default float), JAX's error otherwise."""
    dtype = _dt.requested(float if dtype is None else dtype, "")
    if not _dt.is_float(dtype):
        raise ValueError(f"dtype argument to `gamma` must be a float dtype, got {dtype}")
    return dtype


def gamma_draws(key, a, shape, dtype, log_space: bool):
    """Gamma(``a``) draws, or their logs (``log_space``: accurate for small ``a``, where the
    draws themselves underflow to 0); one key gives the same draws either way, as JAX's."""
    a = jnp.astype(jnp.asarray(a), dtype)
    if shape is None:
        shape = jnp.shape(a)
    else:
        shape = sample_shape(shape)
        _check_bounds_shape("gamma", shape, jnp.shape(a))
    a = jnp.broadcast_to(a, shape)
    return _gamma_with_grad(typed_key(key), a, log_space)


def typed_key(key):
    """A typed key for raw key data (of the default implementation, as JAX wraps it; a
    threefry key for two words), so that a loop's splits stay keys of one type."""
    if isinstance(key, PRNGKeyArray):
        return key
    data = jnp.asarray(key)
    impl = resolve_impl(None)
    return PRNGKeyArray(impl if impl.words == data.shape[-1] else IMPLS["threefry2x32"], data)


@functools.partial(custom_jvp, nondiff_argnums=(2,))
def _gamma_with_grad(key, a, log_space):
    """JAX's ``random_gamma_p``: one key of a split per entry of ``a``, and each entry's
    draw by ``_gamma_one``."""
    count = int(np.prod(a.shape, dtype=np.int64))
    if count == 0:
        return jnp.zeros(a.shape, a.dtype)
    keys = split(key, count)
    alphas = jnp.reshape(a, (count,))
    alphas, = varying_start((alphas,), key, alphas)
    draws = vmap(functools.partial(_gamma_one, log_space=log_space))(keys, alphas)
    return jnp.reshape(draws, a.shape)


@_gamma_with_grad.defjvp
def _gamma_with_grad_jvp(log_space, primals, tangents):
    key, a = primals
    draws = _gamma_with_grad(key, a, log_space)
    if log_space:
        # d log x = dx / x; a draw that underflowed counts as the smallest float (JAX's)
        samples = jnp.exp(draws)
        samples = jnp.where(samples == 0, _dt.finfo(a.dtype).tiny, samples)
        grad = gamma_sample_grad(a, samples) / samples
    else:
        grad = gamma_sample_grad(a, draws)
    return draws, tangents[1] * grad


def gamma_sample_grad(a, x):
    """The derivative in ``a`` of a Gamma(``a``) draw ``x`` that keeps its quantile,
    ``-(d/da) P(a, x) / (d/dx) P(a, x)`` of the regularized incomplete gamma function ``P``:
    JAX's ``random_gamma_grad``, step for step. Where ``x <= 1`` or ``x <= a`` it sums
    ``P``'s power series and its derivative in ``a``; elsewhere it runs the continued
    fraction of ``1 - P`` (at most 2000 terms, rescaled as it grows), each until the
    derivative's term falls below the dtype's eps. Both leave out the density's factor,
    which the ratio cancels. 0 at ``x == 0``, NaN outside the domain."""
    dtype = a.dtype
    is_nan = jnp.isnan(a) | jnp.isnan(x)
    x_is_zero = x == 0
    domain_error = (x < 0) | (a <= 0)
    use_continued_fraction = (x > 1) & (x > a)
    log_ax = a * lax.log(x) - x - lgamma(a)
    underflow = log_ax < -np.log(_dt.finfo(dtype).max).astype(dtype)
    enabled = ~(x_is_zero | domain_error | underflow | is_nan)
    output = jnp.where(
        use_continued_fraction,
        -_gamma_grad_continued_fraction(x, a, enabled & use_continued_fraction),
        _gamma_grad_series(x, a, enabled & ~use_continued_fraction))
    output = jnp.where(x_is_zero, jnp.zeros_like(output), output)
    return jnp.where(domain_error | is_nan, jnp.full_like(output, np.nan), output)


def _gamma_grad_series(x, a, enabled):
    """JAX's ``_igamma_series`` in its sample-derivative mode."""
    eps = _dt.finfo(a.dtype).eps

    def body(state):
        active, r, c, ans, z, dc_da, dans_da = state
        r = r + 1
        dc_da = dc_da * (z / r) - (c * z) / (r * r)
        dans_da = dans_da + dc_da
        c = c * (z / r)
        ans = ans + c
        conditional = active & (jnp.abs(dc_da / dans_da) > eps)
        new = (r, c, ans, z, dc_da, dans_da)
        return (conditional,) + tuple(jnp.where(active, n, o) for n, o in zip(new, state[1:]))

    one, zero = jnp.ones_like(a), jnp.zeros_like(a)
    start = varying_start((enabled, a, one, one, x, zero, zero), enabled, a, x)
    _, _, _, ans, _, _, dans_da = while_loop(lambda state: jnp.any(state[0]), body, start)
    dlogax_da = lax.log(x) - lax.digamma(a + 1)
    return -(dans_da + ans * dlogax_da) * x / a


def _gamma_grad_continued_fraction(x, a, enabled):
    """JAX's ``_igammac_continued_fraction`` in its sample-derivative mode."""
    eps = _dt.finfo(a.dtype).eps
    big = a.dtype.type(1 / eps)

    def body(state):
        (active, ans, t, y, z, c, pkm1, qkm1, pkm2, qkm2,
         dpkm2_da, dqkm2_da, dpkm1_da, dqkm1_da, dans_da) = state
        c = c + 1
        y = y + 1
        z = z + 2
        yc = y * c
        pk = pkm1 * z - pkm2 * yc
        qk = qkm1 * z - qkm2 * yc
        qk_is_nonzero = qk != 0
        r = pk / qk
        t = jnp.where(qk_is_nonzero, jnp.abs((ans - r) / r), jnp.ones_like(r))
        ans = jnp.where(qk_is_nonzero, r, ans)
        dpk_da = dpkm1_da * z - pkm1 - dpkm2_da * yc + pkm2 * c
        dqk_da = dqkm1_da * z - qkm1 - dqkm2_da * yc + qkm2 * c
        dans_da_new = jnp.where(qk_is_nonzero, (dpk_da - ans * dqk_da) / qk, dans_da)
        grad_conditional = jnp.where(qk_is_nonzero, jnp.abs(dans_da_new - dans_da),
                                     jnp.ones_like(dans_da))
        pkm2, pkm1, qkm2, qkm1 = pkm1, pk, qkm1, qk
        dpkm2_da, dqkm2_da, dpkm1_da, dqkm1_da = dpkm1_da, dqkm1_da, dpk_da, dqk_da
        rescale = jnp.abs(pk) > big
        pkm2, pkm1, qkm2, qkm1, dpkm2_da, dqkm2_da, dpkm1_da, dqkm1_da = (
            jnp.where(rescale, v * eps, v)
            for v in (pkm2, pkm1, qkm2, qkm1, dpkm2_da, dqkm2_da, dpkm1_da, dqkm1_da))
        conditional = active & (grad_conditional > eps)
        new = (ans, t, y, z, c, pkm1, qkm1, pkm2, qkm2, dpkm2_da, dqkm2_da, dpkm1_da,
               dqkm1_da, dans_da_new)
        kept = tuple(v if k == 4 else jnp.where(active, v, o)
                     for k, (v, o) in enumerate(zip(new, state[1:])))
        return (conditional,) + kept

    y = 1 - a
    z = x + y + 1
    c = jnp.asarray(0, a.dtype)
    pkm1 = x + 1
    qkm1 = z * x
    ans = pkm1 / qkm1
    zero = jnp.zeros_like(x)
    dqkm1_da = -x
    dans_da = (zero - ans * dqkm1_da) / qkm1
    start = varying_start((enabled, ans, jnp.ones_like(x), y, z), enabled, a, x) + (c,) + \
        varying_start((pkm1, qkm1, jnp.ones_like(x), x, zero, zero, zero, dqkm1_da, dans_da),
                 enabled, a, x)
    state = while_loop(lambda s: (s[5] < 2000) & jnp.any(s[0]), body, start)
    ans, dans_da = state[1], state[14]
    dlogax_da = lax.log(x) - lax.digamma(a)
    return -(dans_da + ans * dlogax_da) * x


def fused_multiply_add(a, b, c):
    """``a * b + c`` rounded once, as XLA's CPU code computes a product feeding a sum (it
    contracts the two into a fused multiply-add): the product's rounding error by Dekker's
    split, the sum's by Knuth's two-sum, added back before the final rounding (where that
    overflows: the plain ``a * b + c``)."""
    a, b, c = jnp.asarray(a), jnp.asarray(b), jnp.asarray(c)
    dtype = jnp.result_type(a, b, c)
    factor = dtype.type(2 ** ((_dt.finfo(dtype).nmant + 2) // 2) + 1)

    def halves(x):
        scaled = x * factor
        high = scaled - (scaled - x)
        return high, x - high

    product = a * b
    (a_high, a_low), (b_high, b_low) = halves(a), halves(b)
    product_error = (((a_high * b_high - product) + a_high * b_low) + a_low * b_high) \
        + a_low * b_low
    total = product + c
    back = total - product
    sum_error = (product - (total - back)) + (c - back)
    fused = total + (sum_error + product_error)
    return jnp.where(jnp.isfinite(fused), fused, product + c)


def _gamma_one(key, alpha, log_space):
    """One Gamma(``alpha``) draw from one key, JAX's ``_gamma_one`` step for step: Marsaglia
    and Tsang's squeeze and log tests on ``d V`` (``V = (1 + c x)**3``, ``x`` normal redrawn
    while ``V <= 0``), each round's keys split from the last; ``alpha < 1`` boosted to
    ``alpha + 1`` and scaled by ``u ** (1/alpha)`` (its log, ``log(u) / alpha``, in log
    space), ``u`` from the key split off first."""
    dtype = alpha.dtype
    zero, one, minus_one = (varying_start((jnp.asarray(v, dtype),), key, alpha)[0]
                            for v in (0, 1, -1))
    half, third, squeeze = (dtype.type(v) for v in (0.5, 1. / 3., 0.0331))
    boost_mask = alpha >= one
    alpha_orig = alpha
    alpha = lax.select(boost_mask, alpha, alpha + one)
    d = alpha - third
    c = third / lax.sqrt(d)

    def cond_fn(state):
        _, x2, v3, u = state
        return ((u >= one - squeeze * (x2 * x2))
                & (lax.log(u) >= x2 * half + d * ((one - v3) + lax.log(v3))))

    def next_x(state):
        x_key, _, _ = state
        x_key, subkey = split(x_key)
        x = normal(subkey, (), dtype)
        return x_key, x, fused_multiply_add(x, c, one)

    def body_fn(state):
        round_key, x_key, u_key = split(state[0], 3)
        _, x, v = while_loop(lambda s: s[2] <= zero, next_x, (x_key, zero, minus_one))
        return round_key, x * x, (v * v) * v, uniform(u_key, (), dtype)

    key, subkey = split(key)
    _, _, v3, _ = while_loop(cond_fn, body_fn, (key, zero, one, one + one))
    if log_space:
        log_samples = lax.log1p(-uniform(subkey, (), dtype))     # -exponential(subkey)
        log_boost = lax.select(boost_mask | (log_samples == 0), zero,
                               log_samples * (one / alpha_orig))
        return (lax.log(d) + lax.log(v3)) + log_boost
    samples = one - uniform(subkey, (), dtype)
    boost = lax.select(boost_mask, one, lax.pow(samples, one / alpha_orig))
    return (d * v3) * boost


def check_safe_to_cast(name, dtype, *args):
    """JAX's TypePromotionError for a parameter whose dtype does not promote to ``dtype``
    (a float64 array for float32 draws, a complex one for real draws); Python numbers,
    weakly typed, always do."""
    for arg in args:
        have = jnp.asarray(arg).dtype
        if have != dtype and jnp.result_type(arg, dtype) != dtype:
            raise _dt.TypePromotionError(f"In arguments to {name}, cannot safely cast argument "
                                         f"of type {have} to {dtype}")


@takes_out_sharding
def beta(key, a, b, shape=None, dtype=float):
    """Beta(``a``, ``b``) floats, JAX's: ``X / (X + Y)`` of X ~ Gamma(a), Y ~ Gamma(b) drawn
    in log space from the two keys of a split, scaled by the larger before leaving it."""
    single_key("beta", key)
    dtype = _dt.requested(float if dtype is None else dtype, "")
    if not _dt.is_float(dtype):
        raise ValueError(f"dtype argument to `beta` must be a float dtype, got {dtype}")
    check_safe_to_cast("beta", dtype, a, b)
    if shape is None:
        shape = jnp.broadcast_shapes(jnp.shape(a), jnp.shape(b))
    else:
        shape = sample_shape(shape)
        _check_bounds_shape("beta", shape, jnp.shape(a), jnp.shape(b))
    key_a, key_b = split(key)
    log_a = gamma_draws(key_a, a, shape, dtype, log_space=True)
    log_b = gamma_draws(key_b, b, shape, dtype, log_space=True)
    log_max = jnp.maximum(log_a, log_b)
    scaled_a, scaled_b = jnp.exp(log_a - log_max), jnp.exp(log_b - log_max)
    return scaled_a / (scaled_a + scaled_b)


@takes_out_sharding
def dirichlet(key, alpha, shape=None, dtype=float):
    """Dirichlet(``alpha``) vectors (``alpha``'s last dimension is the number of categories),
    JAX's: the softmax of Gamma draws taken in log space (with tiny ``alpha`` every draw
    itself underflows to 0). ``shape`` is the batch shape, without the categories."""
    single_key("dirichlet", key)
    dtype = _dt.requested(float if dtype is None else dtype, "")
    if not _dt.is_float(dtype):
        raise ValueError(f"dtype argument to `dirichlet` must be a float dtype, got {dtype}")
    if jnp.ndim(alpha) < 1:
        raise ValueError(f"dirichlet requires alpha.ndim >= 1, got alpha.ndim == "
                         f"{jnp.ndim(alpha)}")
    alpha_shape = jnp.shape(alpha)
    if shape is None:
        shape = alpha_shape[:-1]
    else:
        shape = sample_shape(shape)
        _check_bounds_shape("dirichlet", shape, alpha_shape[:-1])
    logs = gamma_draws(key, alpha, shape + alpha_shape[-1:], dtype, log_space=True)
    logs = jnp.exp(logs - lax.stop_gradient(jnp.max(logs, axis=-1, keepdims=True)))
    return logs / jnp.sum(logs, axis=-1, keepdims=True)


@takes_out_sharding
def poisson(key, lam, shape=None, dtype=int):
    """Poisson(``lam``) integers (``lam >= 0``, broadcast to ``shape``), JAX's: Knuth's
    product of uniforms below ``lam`` 10, Hormann's transformed rejection (PTRS) from 10,
    both drawn from the same key, each a ``while_loop`` that splits its key every round
    until every entry is done. A negative or NaN rate gives -1. Threefry keys only, as JAX's
    (NotImplementedError otherwise)."""
    single_key("poisson", key)
    key = typed_key(key)
    if key._impl.name != "threefry2x32":
        raise NotImplementedError(f"`poisson` is only implemented for the threefry2x32 RNG, "
                                  f"not {key._impl.tag}")
    dtype = _dt.requested(int if dtype is None else dtype, "")
    shape = jnp.shape(lam) if shape is None else sample_shape(shape)
    lam = jnp.astype(jnp.broadcast_to(lam, shape), np.float32)
    use_knuth = jnp.isnan(lam) | (lam < 10)
    lam_knuth = jnp.where(use_knuth, lam, np.float32(0.0))
    # the rejection's acceptance rate tends to 89% as lam grows: a large rate for the entries
    # it does not draw
    lam_rejection = jnp.where(use_knuth, np.float32(1e5), lam)
    max_iters = dtype.type(np.iinfo(dtype).max)      # (JAX's: more rounds than ever happen)
    result = jnp.where(use_knuth, _poisson_by_arrivals(key, lam_knuth, dtype, max_iters),
                       _poisson_by_rejection(key, lam_rejection, dtype, max_iters))
    return jnp.where(lam == 0, jnp.zeros_like(result), result)


def _poisson_by_arrivals(key, lam, dtype, max_iters):
    """Knuth's method, JAX's: the count of uniforms whose running product (a sum of logs)
    stays above ``exp(-lam)``, one draw of every entry per round from a key split off the
    last round's."""

    def body(state):
        rounds, count, round_key, log_prod = state
        round_key, subkey = split(round_key)
        count = jnp.where(log_prod > -lam, count + dtype.type(1), count)
        u = uniform(subkey, lam.shape, np.float32)
        return rounds + 1, count, round_key, log_prod + jnp.log(u)

    def cond(state):
        rounds, log_prod = state[0], state[3]
        return jnp.any(log_prod > -lam) & (rounds < max_iters)

    start = (jnp.asarray(0, dtype), jnp.zeros(lam.shape, dtype), key,
             jnp.zeros(lam.shape, np.float32))
    start = varying_start(start[:2], key, lam) + (key,) + varying_start(start[3:], key, lam)
    count = while_loop(cond, body, start)[1]
    return jnp.astype(count - dtype.type(1), dtype)


def _poisson_by_rejection(key, lam, dtype, max_iters):
    """Hormann's transformed rejection (PTRS), JAX's: each round splits its key in three
    (the next round's, and two uniforms' of every entry) and keeps each entry's first
    accepted ``k``."""
    log_lam = lax.log(lam)
    b = 0.931 + 2.53 * lax.sqrt(lam)
    a = -0.059 + 0.02483 * b
    inv_alpha = 1.1239 + 1.1328 / (b - 3.4)
    v_r = 0.9277 - 3.6224 / (b - 2)

    def body(state):
        rounds, k_out, accepted, round_key = state
        round_key, subkey_0, subkey_1 = split(round_key, 3)
        u = uniform(subkey_0, lam.shape, lam.dtype) - 0.5
        v = uniform(subkey_1, lam.shape, lam.dtype)
        u_shifted = 0.5 - jnp.abs(u)
        k = lax.floor((2 * a / u_shifted + b) * u + lam + 0.43)
        s = lax.log(v * inv_alpha / (a / (u_shifted * u_shifted) + b))
        t = -lam + k * log_lam - lgamma(k + 1)
        accept1 = (u_shifted >= 0.07) & (v <= v_r)
        reject = (k < 0) | ((u_shifted < 0.013) & (v > u_shifted))
        accept = accept1 | (~reject & (s <= t))
        return rounds + 1, jnp.where(accept, k, k_out), accepted | accept, round_key

    def cond(state):
        rounds, _, accepted, _ = state
        return jnp.any(~accepted) & (rounds < max_iters)

    start = varying_start((jnp.asarray(0, dtype), jnp.full(lam.shape, -1.0, lam.dtype),
                      jnp.zeros(lam.shape, jnp.bool_)), key, lam) + (key,)
    return jnp.astype(while_loop(cond, body, start)[1], dtype)


def varying_start(start: tuple, key, *operands) -> tuple:
    """A rejection loop's initial state, varying over the mesh axes its key and operands vary
    over in a shard_map body, as the rounds make it (JAX's loop keeps a carry's type)."""
    data = key._base if isinstance(key, PRNGKeyArray) else key     # (raw key data as it is)
    axes = frozenset().union(*(aval_of(v).vma for v in (data,) + operands))
    if not axes:
        return start
    return tuple(pcast(v, tuple(sorted(axes - aval_of(v).vma, key=str)), to="varying")
                 if axes - aval_of(v).vma else v for v in start)
