"""``shardc.example_libraries.stax`` (``jax.example_libraries.stax``): neural network layers
as pairs of pure functions.

A layer is ``(init_fun, apply_fun)``: ``init_fun(rng, input_shape)`` gives ``(output_shape,
params)``, ``apply_fun(params, inputs, **kwargs)`` the outputs (``rng=`` a key, for layers
that need randomness). ``serial`` and ``parallel`` compose layers into layers::

    init_fun, apply_fun = stax.serial(stax.Dense(512), stax.Relu, stax.Dense(10),
                                      stax.LogSoftmax)
    out_shape, params = init_fun(jax.random.key(0), (-1, 784))
    logits = apply_fun(params, images)

Keys are split as JAX's stax splits them, so the same key gives JAX's parameters.
"""
from __future__ import annotations

import functools
import math

from shardc import lax, random
from shardc import numpy as jnp
from shardc.nn import (elu, gelu, leaky_relu, log_softmax, relu, selu, sigmoid, softmax,
                       softplus, standardize)
from shardc.nn.initializers import glorot_normal, normal, ones, zeros

__all__ = [
    "Dense", "GeneralConv", "Conv", "GeneralConvTranspose", "Conv1DTranspose", "ConvTranspose",
    "BatchNorm", "elementwise", "Tanh", "Relu", "Exp", "LogSoftmax", "Softmax", "Softplus",
    "Sigmoid", "Elu", "LeakyRelu", "Selu", "Gelu", "MaxPool", "SumPool", "AvgPool", "Flatten",
    "Identity", "FanOut", "FanInSum", "FanInConcat", "Dropout", "serial", "parallel",
    "shape_dependent", "glorot", "randn", "logsoftmax",
]

# older names, kept as JAX keeps them
glorot = glorot_normal
randn = normal
logsoftmax = log_softmax


def _split_pair(rng):
    k1, k2 = random.split(rng)
    return k1, k2


def Dense(out_dim, W_init=glorot_normal(), b_init=normal()):
    """A fully connected layer: ``inputs @ W + b``, ``W`` of shape ``(in, out_dim)``."""
    def init_fun(rng, input_shape):
        k1, k2 = _split_pair(rng)
        params = W_init(k1, (input_shape[-1], out_dim)), b_init(k2, (out_dim,))
        return tuple(input_shape[:-1]) + (out_dim,), params

    def apply_fun(params, inputs, **kwargs):
        W, b = params
        return jnp.dot(inputs, W) + b
    return init_fun, apply_fun


def _kernel_shape(rhs_spec, input_shape, lhs_spec, out_chan, filter_shape) -> list:
    """A convolution kernel's shape in layout ``rhs_spec``: ``out_chan`` at O, the input's
    channels at I, ``filter_shape`` in order at the spatial letters."""
    spatial = iter(filter_shape)
    in_chan = input_shape[lhs_spec.index("C")]
    return [out_chan if c == "O" else in_chan if c == "I" else next(spatial) for c in rhs_spec]


def _conv_layer(shape_tuple, apply, dimension_numbers, out_chan, filter_shape, strides,
                padding, W_init, b_init):
    """The layer both convolutions share: a kernel and a bias broadcast along the channels."""
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    one = (1,) * len(filter_shape)
    strides = strides or one
    W_init = W_init or glorot_normal(rhs_spec.index("I"), rhs_spec.index("O"))

    def init_fun(rng, input_shape):
        kernel_shape = _kernel_shape(rhs_spec, input_shape, lhs_spec, out_chan, filter_shape)
        output_shape = shape_tuple(input_shape, kernel_shape, strides, padding,
                                   dimension_numbers)
        bias_shape = [out_chan if c == "C" else 1 for c in out_spec]
        k1, k2 = _split_pair(rng)
        return output_shape, (W_init(k1, kernel_shape), b_init(k2, bias_shape))

    def apply_fun(params, inputs, **kwargs):
        W, b = params
        return apply(inputs, W, strides, padding, one) + b
    return init_fun, apply_fun


def GeneralConv(dimension_numbers, out_chan, filter_shape, strides=None, padding="VALID",
                W_init=None, b_init=normal(1e-6)):
    """A convolution with layouts ``dimension_numbers`` (three strings, e.g. ``('NHWC',
    'HWIO', 'NHWC')``), ``out_chan`` output channels and a ``filter_shape`` window."""
    def apply(inputs, W, strides, padding, one):
        return lax.conv_general_dilated(inputs, W, strides, padding, one, one,
                                        dimension_numbers=dimension_numbers)
    return _conv_layer(lax.conv_general_shape_tuple, apply, dimension_numbers, out_chan,
                       filter_shape, strides, padding, W_init, b_init)


Conv = functools.partial(GeneralConv, ("NHWC", "HWIO", "NHWC"))


def GeneralConvTranspose(dimension_numbers, out_chan, filter_shape, strides=None,
                         padding="VALID", W_init=None, b_init=normal(1e-6)):
    """A transposed convolution (``lax.conv_transpose``), laid out as ``GeneralConv``."""
    def apply(inputs, W, strides, padding, one):
        return lax.conv_transpose(inputs, W, strides, padding,
                                  dimension_numbers=dimension_numbers)
    return _conv_layer(lax.conv_transpose_shape_tuple, apply, dimension_numbers, out_chan,
                       filter_shape, strides, padding, W_init, b_init)


Conv1DTranspose = functools.partial(GeneralConvTranspose, ("NHC", "HIO", "NHC"))
ConvTranspose = functools.partial(GeneralConvTranspose, ("NHWC", "HWIO", "NHWC"))


def BatchNorm(axis=(0, 1, 2), epsilon=1e-5, center=True, scale=True, beta_init=zeros,
              gamma_init=ones):
    """Normalizes over ``axis`` (statistics of the batch itself), then scales by ``gamma`` and
    shifts by ``beta``, each over the other axes (either left out, as ``()``, by
    ``center=False`` / ``scale=False``)."""
    axis = (axis,) if jnp.isscalar(axis) else axis

    def init_fun(rng, input_shape):
        shape = tuple(d for i, d in enumerate(input_shape) if i not in axis)
        k1, k2 = _split_pair(rng)
        beta = beta_init(k1, shape) if center else ()
        gamma = gamma_init(k2, shape) if scale else ()
        return input_shape, (beta, gamma)

    def apply_fun(params, x, **kwargs):
        beta, gamma = params
        expand = tuple(None if i in axis else slice(None) for i in range(jnp.ndim(x)))
        z = standardize(x, axis, epsilon=epsilon)
        if center and scale:
            return gamma[expand] * z + beta[expand]
        if center:
            return z + beta[expand]
        if scale:
            return gamma[expand] * z
        return z
    return init_fun, apply_fun


def elementwise(fun, **fun_kwargs):
    """A parameterless layer applying ``fun(inputs, **fun_kwargs)``."""
    def init_fun(rng, input_shape):
        return input_shape, ()

    def apply_fun(params, inputs, **kwargs):
        return fun(inputs, **fun_kwargs)
    return init_fun, apply_fun


Tanh = elementwise(jnp.tanh)
Relu = elementwise(relu)
Exp = elementwise(jnp.exp)
LogSoftmax = elementwise(log_softmax, axis=-1)
Softmax = elementwise(softmax, axis=-1)
Softplus = elementwise(softplus)
Sigmoid = elementwise(sigmoid)
Elu = elementwise(elu)
LeakyRelu = elementwise(leaky_relu)
Selu = elementwise(selu)
Gelu = elementwise(gelu)


def _with_unit_axes(values: tuple, axes) -> tuple:
    """``values`` with a 1 inserted at each of ``axes`` (in increasing order)."""
    for i in sorted(axes):
        values = values[:i] + (1,) + values[i:]
    return values


def _non_spatial_axes(spec, ndim: int) -> tuple:
    """The batch and channel axes: first and last, or where ``spec`` puts N and C."""
    return (0, ndim - 1) if spec is None else (spec.index("N"), spec.index("C"))


def _pooling_layer(reducer, init_val, rescaler=None):
    """A pooling layer constructor: ``window_shape`` and ``strides`` over the spatial axes
    (batch and channels first and last, or as ``spec`` names them), reduced by ``reducer``
    from ``init_val`` and rescaled by ``rescaler`` (the average's window sizes)."""
    def PoolingLayer(window_shape, strides=None, padding="VALID", spec=None):
        strides = strides or (1,) * len(window_shape)
        rescale = rescaler(window_shape, strides, padding) if rescaler else None
        non_spatial = _non_spatial_axes(spec, len(window_shape) + 2)
        window = _with_unit_axes(tuple(window_shape), non_spatial)
        steps = _with_unit_axes(tuple(strides), non_spatial)

        def init_fun(rng, input_shape):
            pads = lax.padtype_to_pads(input_shape, window, steps, padding)
            ones_ = (1,) * len(window)
            return lax.reduce_window_shape_tuple(input_shape, window, steps, pads, ones_,
                                                 ones_), ()

        def apply_fun(params, inputs, **kwargs):
            out = lax.reduce_window(inputs, init_val, reducer, window, steps, padding)
            return rescale(out, inputs, spec) if rescale else out
        return init_fun, apply_fun
    return PoolingLayer


MaxPool = _pooling_layer(lax.max, -jnp.inf)
SumPool = _pooling_layer(lax.add, 0.)


def _normalize_by_window_size(dims, strides, padding):
    """Divides pooled sums by how many real (unpadded) elements each window held."""
    def rescale(outputs, inputs, spec):
        non_spatial = _non_spatial_axes(spec, inputs.ndim)
        spatial_shape = tuple(n for i, n in enumerate(inputs.shape) if i not in non_spatial)
        one = jnp.ones(spatial_shape, dtype=inputs.dtype)
        window_sizes = lax.reduce_window(one, 0., lax.add, dims, strides, padding)
        for i in sorted(non_spatial):
            window_sizes = jnp.expand_dims(window_sizes, i)
        return outputs / window_sizes
    return rescale


AvgPool = _pooling_layer(lax.add, 0., _normalize_by_window_size)


def _flatten():
    def init_fun(rng, input_shape):
        return (input_shape[0], math.prod(input_shape[1:])), ()

    def apply_fun(params, inputs, **kwargs):
        return jnp.reshape(inputs, (inputs.shape[0], -1))
    return init_fun, apply_fun


Flatten = _flatten()
"""Flattens all but the leading (batch) axis."""

Identity = elementwise(lambda inputs: inputs)
"""Returns its input."""


def FanOut(num):
    """``num`` copies of the input, for ``parallel`` layers."""
    def init_fun(rng, input_shape):
        return [input_shape] * num, ()

    def apply_fun(params, inputs, **kwargs):
        return [inputs] * num
    return init_fun, apply_fun


def _fan_in_sum():
    def init_fun(rng, input_shape):
        return input_shape[0], ()

    def apply_fun(params, inputs, **kwargs):
        return sum(inputs)
    return init_fun, apply_fun


FanInSum = _fan_in_sum()
"""Sums a list of inputs of one shape."""


def FanInConcat(axis=-1):
    """Concatenates a list of inputs along ``axis``."""
    def init_fun(rng, input_shape):
        ax = axis % len(input_shape[0])
        concat_size = sum(shape[ax] for shape in input_shape)
        first = tuple(input_shape[0])
        return first[:ax] + (concat_size,) + first[ax + 1:], ()

    def apply_fun(params, inputs, **kwargs):
        return jnp.concatenate(inputs, axis)
    return init_fun, apply_fun


def Dropout(rate, mode="train"):
    """In ``mode='train'``, keeps each input with probability ``rate`` (scaled by
    ``1 / rate``; JAX's stax reads ``rate`` as the keep rate) and zeroes the rest, drawn
    from the ``rng=`` key ``apply_fun`` must be given; any other mode is the identity."""
    def init_fun(rng, input_shape):
        return input_shape, ()

    def apply_fun(params, inputs, **kwargs):
        rng = kwargs.get("rng", None)
        if rng is None:
            raise ValueError(
                "Dropout layer requires apply_fun to be called with a PRNG key argument. That "
                "is, instead of `apply_fun(params, inputs)`, call it like `apply_fun(params, "
                "inputs, rng)` where `rng` is a PRNG key (e.g. from `jax.random.key`).")
        if mode != "train":
            return inputs
        keep = random.bernoulli(rng, rate, inputs.shape)
        return jnp.where(keep, inputs / rate, 0)
    return init_fun, apply_fun


def _layer_keys(rng, count: int):
    return random.split(rng, count) if rng is not None else (None,) * count


def serial(*layers):
    """The layers applied one after another; ``init_fun`` threads shapes through them."""
    init_funs, apply_funs = zip(*layers)

    def init_fun(rng, input_shape):
        params = []
        for init in init_funs:
            rng, layer_rng = random.split(rng)
            input_shape, param = init(layer_rng, input_shape)
            params.append(param)
        return input_shape, params

    def apply_fun(params, inputs, **kwargs):
        rngs = _layer_keys(kwargs.pop("rng", None), len(layers))
        for apply, param, rng in zip(apply_funs, params, rngs):
            inputs = apply(param, inputs, rng=rng, **kwargs)
        return inputs
    return init_fun, apply_fun


def parallel(*layers):
    """The layers applied side by side, the k-th to the k-th of a sequence of inputs (with
    ``FanOut`` and ``FanInSum`` around it, a residual block)."""
    init_funs, apply_funs = zip(*layers)

    def init_fun(rng, input_shape):
        rngs = random.split(rng, len(layers))
        return zip(*[init(r, shape) for init, r, shape in zip(init_funs, rngs, input_shape)])

    def apply_fun(params, inputs, **kwargs):
        rngs = _layer_keys(kwargs.pop("rng", None), len(layers))
        return [apply(p, x, rng=r, **kwargs)
                for apply, p, x, r in zip(apply_funs, params, inputs, rngs)]
    return init_fun, apply_fun


def shape_dependent(make_layer):
    """A layer built by ``make_layer(input_shape)`` once the input's shape is known."""
    def init_fun(rng, input_shape):
        return make_layer(input_shape)[0](rng, input_shape)

    def apply_fun(params, inputs, **kwargs):
        return make_layer(inputs.shape)[1](params, inputs, **kwargs)
    return init_fun, apply_fun
