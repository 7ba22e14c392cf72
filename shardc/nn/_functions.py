"""``shardc.nn``'s functions: activations, ``softmax`` and ``logsumexp``, ``one_hot``,
``standardize`` and ``dot_product_attention``, built from ``shardc.numpy``."""
from __future__ import annotations

import warnings

import numpy as np

from compiler.custom_ad import custom_jvp
from compiler.tracing import bind, concrete_index
from ir import dtypes as _dt
from ir import primitives as p
import shardc.numpy as jnp
import shardc.lax as lax
from shardc.numpy._core import keeps_weak, weakly_typed_like
from shardc.numpy._reductions import reduce_axes

__all__ = [
    "relu", "sigmoid", "gelu", "silu", "logsumexp", "log_softmax", "softmax", "one_hot", "relu6",
    "swish", "softplus", "soft_sign", "log_sigmoid", "tanh", "leaky_relu", "elu", "celu", "selu",
    "glu", "hard_tanh", "hard_sigmoid", "hard_silu", "hard_swish", "standardize",
    "dot_product_attention", "identity", "mish", "squareplus", "sparse_plus", "sparse_sigmoid",
    "log1mexp", "logmeanexp",
]


def relu(x):
    """``max(x, 0)``; its derivative is 1 where ``x > 0`` and 0 elsewhere (at 0 and at NaN
    too), as JAX's; NaN stays NaN."""
    x = jnp.asarray(x) if not hasattr(x, "dtype") else x
    return _relu(x)


@custom_jvp
def _relu(x):
    return jnp.where(jnp.logical_or(jnp.greater(x, 0), jnp.isnan(x)), x, 0)


@_relu.defjvp
def _relu_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return _relu(x), jnp.where(x > 0, t, 0)


def sigmoid(x):
    """``1 / (1 + exp(-x))``: ``lax.logistic``, so, as JAX's, of floating or complex ``x``
    only."""
    return lax.logistic(_as_array(x))


def gelu(x, approximate=True):
    """Gaussian error linear unit: ``x * Phi(x)`` with ``Phi`` the standard normal CDF.

    ``approximate=True`` (JAX's default) uses the tanh form
    ``x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``; ``approximate=False`` the exact
    ``x/2 erfc(-x / sqrt 2)``.

    >>> nn.gelu(jnp.array([0.0, 1.0]), approximate=False)     # [0, 0.8413447]
    """
    x = _inexact(x)
    if approximate:
        inner = np.sqrt(2 / np.pi).astype(x.dtype) * (x + 0.044715 * x ** 3)
        return x * (0.5 * (1.0 + jnp.tanh(inner)))
    # erfc(-x/sqrt 2), not 1 + erf(x/sqrt 2): no cancellation for negative x (JAX's form)
    return 0.5 * x * lax.erfc(-x * np.asarray(np.sqrt(0.5), x.dtype))


def silu(x):
    """``x * sigmoid(x)``."""
    x = _as_array(x)
    return x * sigmoid(x)


def _as_array(x):
    """``x`` as an array of shardc's: a numpy array too (numpy's own arithmetic with Python
    floats would widen a bfloat16 one to float32, where JAX's keeps bfloat16)."""
    return jnp.asarray(x) if not hasattr(x, "dtype") or isinstance(x, (np.ndarray, np.generic)) \
        else x


def _inexact(x, mixed: bool = False):
    """``x`` as an array of a floating dtype (integers and booleans become float32, weakly
    typed where ``x`` is, or with ``mixed`` always, as beside a Python float)."""
    x = _as_array(x)
    dtype = _dt.to_inexact(jnp.result_type(x))      # JAX's promote_dtypes_inexact
    if x.dtype == dtype:
        return x
    return weakly_typed_like(jnp.astype(x, dtype), *((x, 0.0) if mixed else (x,)))


def _mixed_with_float(x):
    """``x`` as the floating array JAX's activations written with Python floats make of it:
    integers and booleans become a weakly typed float32 (``int_array * 0.5`` is one)."""
    return _inexact(x, mixed=True)


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False, where=None):
    """``log(sum(b * exp(a), axis))``, computed stably by shifting by the maximum.

    ``axis`` is None (every axis), an int or a tuple of ints; ``b`` scales each term (it
    broadcasts against ``a``); ``where`` (booleans) leaves entries out of the sum;
    ``return_sign=True`` returns ``(log|sum|, sign(sum))``, otherwise a negative sum gives nan.
    A slice with nothing to sum gives ``-inf``.

    >>> nn.logsumexp(jnp.zeros((2, 3)), axis=1)      # [log 3, log 3]
    """
    # JAX's rule (jax/_src/ops/special.py): entries with b == 0 are -inf before the maximum
    # is taken, the shift is stop_gradient'ed, and ``where`` masks the max and the sum.
    a = _inexact(a)
    if where is not None:
        a = jnp.where(where, a, jnp.zeros_like(a))
    if b is not None:
        b = jnp.asarray(b) if not hasattr(b, "dtype") else b
        dtype = jnp.result_type(a, b, 0.0)
        a, b = jnp.astype(a, dtype), jnp.astype(b, dtype)
        a = jnp.where(b != 0, a, -jnp.inf)
        a, b = jnp.broadcast_arrays(a, b)
    axes = reduce_axes(a, axis)
    # complex entries: shifted by the largest real part, and the log of the complex sum kept
    # (its modulus only with return_sign), as JAX's
    complex_valued = jnp.iscomplexobj(a)
    top = jnp.max(jnp.real(a), axis=axes, keepdims=True, where=where, initial=-jnp.inf)
    top = _stop_gradient(jnp.where(jnp.isfinite(top), top, jnp.zeros_like(top)))
    terms = jnp.exp(a - jnp.astype(top, a.dtype))
    if b is not None:
        terms = terms * b
    total = jnp.sum(terms, axis=axes, keepdims=True, where=where)
    sign = jnp.sign(total)
    if return_sign or not complex_valued:
        total = jnp.abs(total)
    out = jnp.log(total) + jnp.astype(top, total.dtype)
    if not keepdims:
        out, sign = jnp.squeeze(out, axes), jnp.squeeze(sign, axes)
    if return_sign:
        return out, sign
    if b is not None and not complex_valued:
        out = jnp.where(sign < 0, jnp.full_like(out, jnp.nan), out)
    return out


def _stop_gradient(x):
    from shardc.lax import stop_gradient
    return stop_gradient(x)


def log_softmax(x, axis=-1, where=None):
    """``x - logsumexp(x)`` along ``axis`` (an int, a tuple, or None for every axis); entries
    where ``where`` is False are left out of the sum and give ``-inf`` (JAX's formula)."""
    x = _as_array(x)        # integers softmax into floats; booleans do not subtract (JAX's)
    x_max = jnp.max(x, axis=axis, keepdims=True, where=where, initial=-jnp.inf)
    x_safe = x if where is None else jnp.where(where, x, -jnp.inf)
    shifted = x_safe - _stop_gradient(x_max)
    result = shifted - jnp.log(jnp.sum(jnp.exp(shifted), axis=axis, keepdims=True, where=where))
    if where is not None:
        return jnp.where(where, result, -jnp.inf)
    return result


def softmax(x, axis=-1, where=None):
    """``exp(x) / sum(exp(x))`` along ``axis`` (an int, a tuple, or None), as JAX's default
    (non-custom-jvp) softmax: entries where ``where`` is False give 0; a +inf gives NaN."""
    x = _as_array(x)        # integers softmax into floats; booleans do not subtract (JAX's)
    x_max = jnp.max(x, axis=axis, keepdims=True, where=where, initial=-jnp.inf)
    x_safe = x if where is None else jnp.where(where, x, -jnp.inf)
    unnormalized = jnp.exp(x_safe - _stop_gradient(x_max))
    result = unnormalized / jnp.sum(unnormalized, axis=axis, keepdims=True, where=where)
    if where is not None:
        result = jnp.where(where, result, 0)
    return result


def one_hot(x, num_classes, *, dtype=None, axis=-1):
    """``x``'s integers as one-hot vectors of length ``num_classes`` along ``axis`` (a new
    dimension); indices outside ``[0, num_classes)`` give all-zero vectors. ``dtype``
    defaults to the default float. ``axis`` a mesh axis name (in a shard_map body,
    ``num_classes`` its size): each device's ``x == its index`` along it. As JAX's,
    ``num_classes`` must be a concrete int, and an ``x`` that is not integers warns (a
    deprecation) and compares with an iota of its dtype.

    >>> nn.one_hot(jnp.array([0, 2]), 3)       # [[1, 0, 0], [0, 0, 1]]
    """
    num_classes = concrete_index(num_classes,
                                 "The error arose in jax.nn.one_hot argument `num_classes`.")
    x = jnp.asarray(x)
    if not _dt.is_int(x.dtype):
        warnings.warn(f"jax.nn.one_hot input should be integer-typed; got dtype={x.dtype}",
                      DeprecationWarning)
    dtype = _dt.canonicalize(float if dtype is None else dtype)
    if not isinstance(axis, (int, np.integer)):
        # a mesh axis name inside shard_map: each device holds its class's slice (JAX's rule)
        size = lax.axis_size(axis)
        if num_classes != size:
            raise ValueError(f"Expected num_classes to match the size of axis {axis}, but "
                             f"{num_classes} != {size}")
        return jnp.astype(x == lax.axis_index(axis), dtype)
    out_ndim = x.ndim + 1
    if not -out_ndim <= axis < out_ndim:
        raise ValueError(f"axis {axis} is out of bounds for array of dimension {out_ndim}")
    position = axis % out_ndim
    classes_shape = [1] * x.ndim
    classes_shape.insert(position, num_classes)
    classes = lax.broadcasted_iota(x.dtype, classes_shape, position)
    return jnp.astype(jnp.expand_dims(x, position) == classes, dtype)


# --- activations ------------------------------------------------------------------------------

def relu6(x):
    """``min(max(x, 0), 6)``; its derivative is 1 strictly inside ``(0, 6)`` and 0 elsewhere,
    at the corners too, as JAX's."""
    return _relu6(_mixed_with_float(x))


@custom_jvp
def _relu6(x):
    return jnp.minimum(jnp.maximum(x, 0.0), 6.0)


@_relu6.defjvp
def _relu6_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return _relu6(x), jnp.where((x > 0) & (x < 6), t, 0)


def swish(x):
    """``x * sigmoid(x)`` (the same as ``silu``)."""
    return silu(x)


@keeps_weak
def softplus(x):
    """``log(1 + exp(x))``, computed without overflow."""
    return jnp.logaddexp(x, 0)


def soft_sign(x):
    """``x / (|x| + 1)``."""
    x = jnp.asarray(x) if not hasattr(x, "dtype") else x
    return x / (jnp.abs(x) + 1)


@keeps_weak
def log_sigmoid(x):
    """``log(sigmoid(x)) = -softplus(-x)``."""
    return -softplus(-_as_array(x))           # booleans do not negate (JAX's)


def tanh(x):
    return jnp.tanh(x)


def leaky_relu(x, negative_slope=0.01):
    """``x`` where ``x >= 0``, else ``negative_slope * x``."""
    x = _mixed_with_float(x)
    return jnp.where(x >= 0, x, negative_slope * x)


def elu(x, alpha=1.0):
    """``x`` where ``x > 0``, else ``alpha * (exp(x) - 1)``."""
    x = _mixed_with_float(x)
    negative = jnp.where(x > 0, jnp.zeros_like(x), x)     # no overflow in the unused branch
    return jnp.where(x > 0, x, alpha * jnp.expm1(negative))


def celu(x, alpha=1.0):
    """``max(x, 0) + alpha * min(exp(x / alpha) - 1, 0)``."""
    x = _mixed_with_float(x)
    return jnp.maximum(x, 0.0) + alpha * jnp.expm1(jnp.minimum(x, 0.0) / alpha)


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(x):
    """``scale * elu(x, alpha)`` with the self-normalising constants."""
    return _SELU_SCALE * elu(x, _SELU_ALPHA)


def glu(x, axis=-1):
    """Gated linear unit: ``a * sigmoid(b)`` for the two halves ``a, b`` of ``x`` along ``axis``."""
    x = _as_array(x)
    if x.shape[axis] % 2:
        raise AssertionError("axis size must be divisible by 2")      # JAX's assert
    a, b = jnp.split(x, 2, axis=axis)
    return a * sigmoid(b)


def hard_tanh(x):
    """``x`` clipped to ``[-1, 1]``, as JAX's two selects (so its derivative at -1 and 1 is
    1, not split between the bound and ``x``)."""
    x = jnp.asarray(x) if not hasattr(x, "dtype") else x      # integers stay integers
    return jnp.where(x > 1, 1, jnp.where(x < -1, -1, x))


def hard_sigmoid(x):
    """``relu6(x + 3) / 6``."""
    return relu6(_mixed_with_float(x) + 3.0) / 6.0


def hard_silu(x):
    """``x * hard_sigmoid(x)``."""
    x = _mixed_with_float(x)
    return x * hard_sigmoid(x)


hard_swish = hard_silu


def standardize(x, axis=-1, mean=None, variance=None, epsilon=1e-5, where=None, *,
                algorithm="fast"):
    """``(x - mean) * rsqrt(variance + epsilon)``, the moments taken along ``axis`` unless
    given (over the entries where ``where`` is True). As JAX's: ``algorithm='fast'`` (the
    default) takes the variance as ``mean(x**2) - mean**2`` clipped at 0 (with the mean given
    or not), ``'stable'`` as ``mean((x - mean)**2)``."""
    if mean is None:
        mean = jnp.mean(x, axis, keepdims=True, where=where)
    if variance is None:
        if algorithm == "stable":
            variance = jnp.mean(jnp.square(jnp.subtract(x, mean)), axis, keepdims=True,
                                where=where)
        elif algorithm == "fast":
            variance = jnp.mean(jnp.square(x), axis, keepdims=True, where=where) \
                - jnp.square(mean)
            variance = jnp.clip(variance, 0)
        else:
            raise ValueError(f"Unknown algorithm '{algorithm}'. Expected 'fast' or 'stable'.")
    return jnp.subtract(x, mean) * lax.rsqrt(variance + epsilon)


def dot_product_attention(query, key, value, bias=None, mask=None, *, scale=None,
                          is_causal=False, query_seq_lengths=None, key_value_seq_lengths=None,
                          local_window_size=None, implementation=None, return_residual=False):
    """Scaled dot-product attention: ``softmax(scale * Q K^T + bias, masked) V``, as JAX's
    XLA implementation.

    ``query`` is ``[B, T, N, H]``, ``key`` and ``value`` ``[B, S, K, H]`` with ``K`` dividing
    ``N`` (grouped heads share a key head); lower ranks gain leading dimensions of size 1 (so
    ``[T, N, H]`` works), as do ``bias`` and ``mask``, which broadcast to ``[B, N, T, S]``;
    ``mask`` (booleans) is True where attention is allowed; ``is_causal`` allows ``s <= t``
    only; ``local_window_size`` ``(left, right)`` (or one int for both) keeps keys near each
    query; the sequence lengths (int32, one per batch member) mask the padding, whose queries
    give zeros. ``scale`` defaults to ``1/sqrt(H)``. The logits accumulate in float32 (or
    wider) and the softmax is float32. Returns ``query``'s shape, and with
    ``return_residual`` also the logsumexp of each query's logits (``[B, T, N]``, no gradient).

    >>> out = nn.dot_product_attention(q, k, v, is_causal=True)
    """
    output_shape = jnp.shape(query)
    query, key, value = (_at_least_4d(t) for t in (query, key, value))
    bias = None if bias is None else _at_least_4d(bias)
    mask = None if mask is None else _at_least_4d(mask)
    q_lengths = None if query_seq_lengths is None else jnp.asarray(query_seq_lengths)
    kv_lengths = None if key_value_seq_lengths is None else jnp.asarray(key_value_seq_lengths)
    if isinstance(local_window_size, int):
        local_window_size = (local_window_size, local_window_size)
    batch, s_len, kv_heads, head_dim = key.shape
    _check_attention_operand(value, [batch, s_len, kv_heads, head_dim], key.dtype, "value")
    _check_attention_operand(query, [batch, -1, -1, head_dim], key.dtype, "query")
    _check_attention_operand(mask, [-1] * 4, np.dtype(bool), "mask")
    _check_attention_operand(bias, [-1] * 4, None, "bias")
    _check_attention_operand(q_lengths, [batch], np.dtype(np.int32), "query_seq_lengths")
    _check_attention_operand(kv_lengths, [batch], np.dtype(np.int32), "key_value_seq_lengths")
    heads = query.shape[-2]
    if heads % kv_heads:
        raise ValueError("The number of query heads must be a multiple of key/value heads, "
                         f"but got {heads} vs {kv_heads}")
    if implementation == "cudnn":
        raise ValueError("dot_product_attention: implementation='cudnn' is not available; "
                         "shardc computes attention as XLA's implementation does")
    if implementation not in (None, "xla"):
        raise ValueError(f"Unsupported implementation option: {implementation}")
    if heads != kv_heads:
        # head n reads key head n // G, as JAX's grouping of N into (K, G)
        key = jnp.repeat(key, heads // kv_heads, axis=2)
        value = jnp.repeat(value, heads // kv_heads, axis=2)
    scale = 1.0 / np.sqrt(head_dim) if scale is None else scale
    out, logits = _attention_core(query, key, value, bias, mask, is_causal, scale, q_lengths,
                                  kv_lengths, local_window_size)
    out = jnp.reshape(out, output_shape)
    if not return_residual:
        return out
    lse = jnp.astype(logsumexp(logits, axis=-1), key.dtype)          # [B, N, T]
    lse = _stop_gradient(jnp.transpose(lse, (0, 2, 1)))
    return out, jnp.reshape(lse, output_shape[:-1])


def _at_least_4d(t):
    t = jnp.asarray(t)
    return jnp.expand_dims(t, tuple(range(4 - t.ndim))) if t.ndim < 4 else t


def _check_attention_operand(t, shape, dtype, name):
    """JAX's checks of an attention operand's rank, dtype and sizes (-1: any size)."""
    if t is None:
        return
    if t.ndim != len(shape):
        raise ValueError(f"{name} ndim should be {len(shape)}, but got {t.ndim}")
    if dtype is not None and t.dtype != dtype:
        raise ValueError(f"{name} dtype should be {dtype}, but got {t.dtype}")
    if any(want != -1 and got != want for got, want in zip(t.shape, shape)):
        raise ValueError(f"{name} shape should be {shape}: but got {t.shape}")


def _attention_core(query, key, value, bias, mask, is_causal, scale, q_lengths, kv_lengths,
                    window):
    """``(output, masked float32 logits)`` of attention with as many key heads as query
    heads."""
    # accumulated in float32 (or wider) from bfloat16 and float16 operands, as JAX's
    logits_dtype = jnp.promote_types(query.dtype, np.float32)
    logits = jnp.einsum("btnh,bsnh->bnts", query, key, preferred_element_type=logits_dtype)
    logits = logits * jnp.asarray(scale, dtype=logits.dtype)
    if bias is not None:
        logits = jnp.astype(logits + bias, logits.dtype)
    allowed = _attention_mask(mask, is_causal, logits.shape, q_lengths, kv_lengths, window)
    if allowed is not None:
        # a large finite negative (within float32, where the softmax runs), so a fully
        # masked row averages the values uniformly
        large = -0.7 * min(_dt.finfo(logits.dtype).max, np.finfo(np.float32).max)
        logits = jnp.where(allowed, logits, jnp.asarray(large, logits.dtype))
    logits = jnp.astype(logits, np.float32)
    weights = jnp.astype(softmax(logits, axis=-1), key.dtype)
    out = jnp.einsum("bnts,bsnh->btnh", weights, value)
    if q_lengths is not None:
        # the padding queries' outputs are zeros, as JAX's
        valid = jnp.arange(out.shape[1])[None, :] < q_lengths[:, None]
        out = out * jnp.astype(valid, out.dtype)[:, :, None, None]
    return out, logits


def _attention_mask(mask, is_causal, shape, q_lengths=None, kv_lengths=None, window=None):
    """Where attention is allowed (None: everywhere), as JAX's ``_apply_masks``: the mask,
    causality, a local window ``(left, right)`` of key positions around each query, and the
    queries and keys before each batch member's lengths."""
    allowed = mask
    t, s = shape[-2], shape[-1]

    def both(more):
        return more if allowed is None else jnp.logical_and(allowed, more)

    if is_causal:
        allowed = both(jnp.tril(jnp.ones((t, s), jnp.bool_)))
    if window is not None:
        left, right = window
        queries, keys = jnp.arange(t)[:, None], jnp.arange(s)[None, :]
        allowed = both((queries <= keys + left) & (queries >= keys - right))
    if q_lengths is not None or kv_lengths is not None:
        padding = True
        if q_lengths is not None:
            padding = jnp.arange(t)[None, :, None] < q_lengths[:, None, None]
        if kv_lengths is not None:
            padding = jnp.logical_and(
                padding, jnp.arange(s)[None, None, :] < kv_lengths[:, None, None])
        allowed = both(padding[:, None, :, :])
    return allowed


def identity(x):
    """``x`` unchanged (the identity activation)."""
    return jnp.asarray(x) if not hasattr(x, "dtype") else x


@keeps_weak
def mish(x):
    """``x * tanh(softplus(x))``."""
    x = _as_array(x)
    return x * jnp.tanh(softplus(x))


def squareplus(x, b=4):
    """``(x + sqrt(x**2 + b)) / 2``: a smooth relu (``x`` and ``b`` promote together, as
    JAX's)."""
    x, b = _as_array(x), _as_array(b)
    return (x + jnp.sqrt(jnp.square(x) + b)) / 2


def sparse_plus(x):
    """0 below -1, ``x`` above 1, ``(x + 1)**2 / 4`` between."""
    x = _mixed_with_float(x)
    return jnp.where(x <= -1.0, jnp.zeros_like(x),
                     jnp.where(x >= 1.0, x, (x + 1.0) ** 2 / 4))


def sparse_sigmoid(x):
    """0 below -1, 1 above 1, ``(x + 1) / 2`` between: sparse_plus's derivative."""
    x = _mixed_with_float(x)
    return 0.5 * jnp.clip(x + 1.0, 0.0, 2.0)


def log1mexp(x):
    """``log(1 - exp(-x))`` for ``x > 0``, accurate near 0 and for large ``x``; its
    derivative is ``1 / expm1(x)`` (JAX's rule: no NaN from the branch not taken)."""
    return _log1mexp(_as_array(x))                  # booleans do not negate (JAX's)


@custom_jvp
def _log1mexp(x):
    return jnp.where(x < np.log(2.0), jnp.log(-jnp.expm1(-x)), jnp.log1p(-jnp.exp(-x)))


@_log1mexp.defjvp
def _log1mexp_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return _log1mexp(x), t / jnp.expm1(x)


def logmeanexp(x, axis=None, where=None, keepdims=False):
    """``log(mean(exp(x)))`` over ``axis`` (the elements ``where`` allows), stably."""
    x = _inexact(x)
    total = logsumexp(x, axis=axis, keepdims=keepdims, where=where)
    count = (jnp.sum(jnp.ones_like(x), axis=axis, keepdims=keepdims) if where is None
             else jnp.sum(jnp.broadcast_to(where, x.shape), axis=axis, keepdims=keepdims))
    return total - jnp.log(count)
