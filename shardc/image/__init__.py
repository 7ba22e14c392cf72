"""``shardc.image`` (``jax.image``): resizing and resampling images.

``resize(image, shape, method)`` resamples every dimension whose size changes;
``scale_and_translate`` applies a given scale and translation to chosen dimensions. Both
sample as JAX does: pixels are half-centred (pixel ``i`` sits at ``i + 0.5``), each output
pixel is a normalized kernel-weighted sum of input pixels (a kernel widened by the scale when
downsampling with ``antialias``), and output pixels whose sample falls outside the input are
zero. Each resampled dimension is one weight matrix contracted with the image, so resizing
differentiates, batches and partitions as a contraction does.

>>> jax.image.resize(jnp.ones((8, 8, 3)), (16, 16, 3), "bilinear").shape
(16, 16, 3)
"""
from __future__ import annotations

import enum
from typing import Callable, Sequence

import numpy as np

import shardc.lax as lax
import shardc.numpy as jnp
from shardc._transforms import jit
from shardc.numpy._core import shape_tuple

__all__ = ["ResizeMethod", "resize", "scale_and_translate"]


class ResizeMethod(enum.Enum):
    """How ``resize`` and ``scale_and_translate`` interpolate: NEAREST, LINEAR (triangle
    kernel), LANCZOS3 / LANCZOS5 (Lanczos kernels of radius 3 and 5), CUBIC (Keys' kernel,
    a = -0.5), CUBIC_PYTORCH (PyTorch's bicubic: a = -0.75 with edge pixels repeated, unless
    antialiasing, where it is CUBIC) and AREA (the overlap of pixel areas, a box filter)."""
    NEAREST = 0
    LINEAR = 1
    LANCZOS3 = 2
    LANCZOS5 = 3
    CUBIC = 4
    CUBIC_PYTORCH = 5
    AREA = 6

    @staticmethod
    def from_string(s: str) -> "ResizeMethod":
        """The method a name spells (``'bilinear'``, ``'tricubic'``, ``'lanczos3'``, ...)."""
        for method, names in _NAMES.items():
            if s in names:
                return method
        raise ValueError(f'Unknown resize method "{s}"')


_NAMES = {
    ResizeMethod.NEAREST: ("nearest",),
    ResizeMethod.LINEAR: ("linear", "bilinear", "trilinear", "triangle"),
    ResizeMethod.LANCZOS3: ("lanczos3",),
    ResizeMethod.LANCZOS5: ("lanczos5",),
    ResizeMethod.CUBIC: ("cubic", "bicubic", "tricubic"),
    ResizeMethod.CUBIC_PYTORCH: ("cubic-pytorch", "bicubic-pytorch"),
    ResizeMethod.AREA: ("area",),
}


# ----- kernels: the weight of an input pixel at distance x (>= 0) from the sample -----

def _triangle(x):
    return jnp.maximum(0, 1 - jnp.abs(x))


def _lanczos(radius: float):
    def kernel(x):
        y = radius * jnp.sin(np.pi * x) * jnp.sin(np.pi * x / radius)
        # sin(pi x) sin(pi x / r) r / (pi x)^2 tends to 1 at 0: taken as 1 below 1e-3
        out = jnp.where(x > 1e-3, jnp.divide(y, jnp.where(x != 0, np.pi ** 2 * x ** 2, 1)), 1)
        return jnp.where(x > radius, 0., out)
    return kernel


def _keys_cubic(x):
    """Keys' cubic convolution kernel, a = -0.5 (Pillow's, TensorFlow's)."""
    out = ((1.5 * x - 2.5) * x) * x + 1.
    out = jnp.where(x >= 1., ((-0.5 * x + 2.5) * x - 4.) * x + 2., out)
    return jnp.where(x >= 2., 0., out)


def _opencv_cubic(x):
    """The cubic kernel with a = -0.75 (OpenCV's; PyTorch's without antialiasing)."""
    a = -0.75
    out = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    out = jnp.where(x >= 1.0, ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a, out)
    return jnp.where(x >= 2.0, 0.0, out)


_AREA = None      # not a pointwise kernel: weights are overlaps of pixel intervals

# method -> (radius, kernel)
_KERNELS = {
    ResizeMethod.LINEAR: (1, _triangle),
    ResizeMethod.LANCZOS3: (3, _lanczos(3.)),
    ResizeMethod.LANCZOS5: (5, _lanczos(5.)),
    ResizeMethod.CUBIC: (2, _keys_cubic),
    ResizeMethod.CUBIC_PYTORCH: (2, _opencv_cubic),
    ResizeMethod.AREA: (1, _AREA),
}

_TINY_WEIGHT = 1000. * float(np.finfo(np.float32).eps)


def _normalized(weights):
    """Each output pixel's (column's) weights divided by their sum; all zero where the sum
    is too small to divide by."""
    total = jnp.sum(weights, axis=0, keepdims=True)
    return jnp.where(jnp.abs(total) > _TINY_WEIGHT,
                     jnp.divide(weights, jnp.where(total != 0, total, 1)), 0)


def _area_weights(input_size: int, output_size: int, inv_scale, translation, dtype):
    """How much of each output pixel's interval, mapped back to the input, each input
    pixel's interval covers."""
    out_left = jnp.arange(output_size, dtype=dtype) * inv_scale - translation * inv_scale
    out_right = out_left + inv_scale
    in_left = jnp.arange(input_size, dtype=dtype)
    in_right = in_left + 1.0
    return jnp.maximum(0.0, jnp.minimum(out_right[np.newaxis, :], in_right[:, np.newaxis])
                       - jnp.maximum(out_left[np.newaxis, :], in_left[:, np.newaxis]))


def _edge_padded(weights, expanded, input_size: int, output_size: int, dtype):
    """Weights of samples ``expanded`` past the edges moved onto the edge pixels (edges
    repeated), then normalized."""
    clamped = jnp.clip(expanded.astype(jnp.int32), 0, input_size - 1)
    columns = lax.broadcast_in_dim(jnp.arange(output_size), (expanded.shape[0], output_size),
                                   (1,))
    weight_mat = jnp.zeros((input_size, output_size), dtype=dtype)
    return _normalized(weight_mat.at[clamped[:, np.newaxis], columns].add(weights))


def weight_matrix(input_size: int, output_size: int, scale, translation, kernel: Callable,
                  antialias: bool, edge_padding: bool, radius: int | None):
    """The ``[input_size, output_size]`` matrix whose column ``j`` weights the input pixels
    that make output pixel ``j``: the kernel at each input pixel's distance from the
    sample ``(j + 0.5 - translation) / scale - 0.5``, widened by ``1 / scale`` when
    antialiasing a downsample, normalized per column; zero for samples outside the input
    unless ``edge_padding`` repeats the edge pixels ``radius`` beyond it."""
    dtype = jnp.result_type(scale, translation)
    inv_scale = 1. / scale
    kernel_scale = jnp.maximum(inv_scale, 1.) if antialias else 1.
    samples = ((jnp.arange(output_size, dtype=dtype) + 0.5) * inv_scale
               - translation * inv_scale - 0.5)
    k = radius if edge_padding else 0      # edges are repeated only without antialiasing
    expanded = jnp.arange(-k, input_size + k, dtype=dtype)
    if kernel is _AREA:
        weights = _area_weights(input_size, output_size, inv_scale, translation, dtype)
    else:
        weights = kernel(jnp.abs(samples[np.newaxis, :] - expanded[:, np.newaxis])
                         / kernel_scale)
    if edge_padding:
        return _edge_padded(weights, expanded, input_size, output_size, dtype)
    inside = jnp.logical_and(samples >= -0.5, samples <= input_size - 0.5)
    return jnp.where(inside[np.newaxis, :], _normalized(weights), 0)


def _resample(x, output_shape, spatial_dims, scale, translation, kernel, antialias: bool,
              precision, edge_padding: bool = False, radius: int | None = None):
    """``x`` with each of ``spatial_dims`` contracted with its weight matrix, in one
    einsum."""
    if not spatial_dims:
        return x
    operands = [x, list(range(x.ndim))]
    out_indices = list(range(x.ndim))
    for i, d in enumerate(spatial_dims):
        d = d % x.ndim
        w = weight_matrix(x.shape[d], output_shape[d], scale[i], translation[i], kernel,
                          antialias, edge_padding, radius).astype(x.dtype)
        operands += [w, [d, x.ndim + i]]
        out_indices[d] = x.ndim + i
    return jnp.einsum(*operands, out_indices, precision=precision)


def _method(method) -> ResizeMethod:
    return ResizeMethod.from_string(method) if isinstance(method, str) else method


def _check_rank(shape, image) -> None:
    if len(shape) != image.ndim:
        raise ValueError("shape must have length equal to the number of dimensions of x; "
                         f" {shape} vs {image.shape}")


def _inexact(x):
    x = jnp.asarray(x)
    return x if jnp.issubdtype(x.dtype, jnp.inexact) else x.astype(jnp.result_type(float))


def _kernel_for(method: ResizeMethod, antialias: bool) -> tuple:
    """``(radius, kernel, edge_padding)``: PyTorch's cubic is Keys' when antialiasing."""
    if method == ResizeMethod.CUBIC_PYTORCH and antialias:
        method = ResizeMethod.CUBIC
    radius, kernel = _KERNELS[method]
    return radius, kernel, method == ResizeMethod.CUBIC_PYTORCH


def scale_and_translate(image, shape: Sequence[int], spatial_dims: Sequence[int], scale,
                        translation, method, antialias: bool = True,
                        precision=lax.Precision.HIGHEST):
    """``image`` resampled to ``shape`` where input location ``y`` of each of
    ``spatial_dims`` moves to ``y * scale + translation`` (the inverse map gives the
    samples; pixel ``i`` sits at ``i + 0.5``); output pixels that sample outside the input
    are zero. ``scale = (n - 1) / (m - 1)``, ``translation = 0.5 * (1 - scale)`` is
    PyTorch's ``align_corners=True``. NEAREST is not offered here (ValueError), as in JAX.

    >>> jax.image.scale_and_translate(img, (8, 8), (0, 1), jnp.array([2., 2.]),
    ...                               jnp.array([0., 0.]), "linear")
    """
    shape = shape_tuple(shape)
    _check_rank(shape, image)
    method = _method(method)
    if method == ResizeMethod.NEAREST:
        raise ValueError("Nearest neighbor resampling is not currently supported for "
                         "scale_and_translate.")
    radius, kernel, edge_padding = _kernel_for(method, antialias)
    image = _inexact(image)
    scale, translation = _inexact(scale), _inexact(translation)
    scale, translation = (jnp.asarray(v, jnp.result_type(scale, translation))
                          for v in (scale, translation))
    return _resample(image, shape, tuple(spatial_dims), scale, translation, kernel, antialias,
                     precision, edge_padding, radius)


def _resize_nearest(x, output_shape):
    """Each changed dimension indexed at ``floor((j + 0.5) * m / n)``."""
    for d, (m, n) in enumerate(zip(x.shape, output_shape)):
        if m == n:
            continue
        offsets = (jnp.arange(n, dtype=np.float32) + 0.5) * m / n
        index = [slice(None)] * x.ndim
        index[d] = jnp.floor(offsets.astype(np.float32)).astype(np.int32)
        x = x[tuple(index)]
    return x


def _resize(image, shape, method, antialias, precision):
    _check_rank(shape, image)
    method = _method(method)
    if method == ResizeMethod.NEAREST:
        return _resize_nearest(image, shape)
    image = _inexact(image)
    # a kernel interpolates: a dimension that keeps its size keeps its values
    spatial_dims = tuple(d for d in range(len(shape)) if image.shape[d] != shape[d])
    radius, kernel, edge_padding = _kernel_for(method, antialias)
    scale = [1.0 if shape[d] == 0 else shape[d] / image.shape[d] for d in spatial_dims]
    return _resample(image, shape, spatial_dims, scale, [0.] * len(spatial_dims), kernel,
                     antialias, precision, edge_padding, radius)


_resize_jit = jit(_resize, static_argnums=(1, 2, 3, 4))


def resize(image, shape: Sequence[int], method, antialias: bool = True,
           precision=lax.Precision.HIGHEST):
    """``image`` resampled to ``shape`` (every dimension; leave a batch or channel
    dimension's size unchanged and it is untouched) by ``method``, a ``ResizeMethod`` or
    its name: ``'nearest'`` keeps the dtype, the others give a floating result.
    ``antialias`` widens the kernel when downsampling (no effect when upsampling).

    >>> jax.image.resize(img, (64, 64, 3), "bicubic")
    """
    return _resize_jit(image, shape_tuple(shape), method, antialias, precision)
