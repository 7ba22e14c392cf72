"""``lax.conv_general_dilated`` and ``lax.conv``: N-d convolutions with strides, padding,
lhs/rhs dilation and feature groups, built from ``pad``, strided ``slice`` and one
``dot_general`` (im2col), so they differentiate, batch and shard like those primitives.

Layouts follow XLA's dimension numbers: ``lhs_spec`` = (batch, feature, *spatial),
``rhs_spec`` = (out feature, in feature, *spatial), ``out_spec`` = (batch, feature, *spatial),
given as tuples of dimension indices or as strings such as ``('NHWC', 'HWIO', 'NHWC')``.
"""
from __future__ import annotations

import math
import operator
from typing import NamedTuple

import numpy as np

from compiler.tracing import aval_of
from ir import primitives as p
from ir.sharding import NamedSharding, PartitionSpec, ShardingTypeError
from ir.sharding_rules import kept_if_divisible, partitions, spec_of
import shardc.numpy as jnp
from shardc.lax._ops import Precision, dot_general, same_dtypes_error, slice as _slice
from shardc.lax._shapes import array_operand, pad
from shardc.numpy._core import check_out_sharding, constrain
from shardc.sharding import auto_axes, explicit_axes_for, resolve_sharding

__all__ = [
    "ConvDimensionNumbers", "conv_dimension_numbers", "padtype_to_pads", "conv_general_dilated",
    "conv", "conv_with_general_padding", "conv_transpose", "conv_shape_tuple",
    "conv_general_shape_tuple", "conv_transpose_shape_tuple",
]


class ConvDimensionNumbers(NamedTuple):
    """Dimension indices: ``lhs_spec`` (batch, feature, *spatial), ``rhs_spec`` (out feature,
    in feature, *spatial), ``out_spec`` (batch, feature, *spatial)."""
    lhs_spec: tuple
    rhs_spec: tuple
    out_spec: tuple


def conv_dimension_numbers(lhs_shape, rhs_shape, dimension_numbers) -> ConvDimensionNumbers:
    """``dimension_numbers`` (None, a ConvDimensionNumbers, or three layout strings) as
    dimension indices for operands of these shapes."""
    if isinstance(dimension_numbers, ConvDimensionNumbers):
        return dimension_numbers
    ndim = len(lhs_shape)
    if len(rhs_shape) != ndim:
        raise TypeError(f"convolution requires lhs and rhs ndim to be equal, got {ndim} and "
                        f"{len(rhs_shape)}.")
    if ndim < 2:
        raise TypeError(f"conv: operands need rank 2 or more, got {ndim}")
    if dimension_numbers is None:
        default = tuple(range(ndim))
        return ConvDimensionNumbers(default, default, default)
    if len(dimension_numbers) != 3:
        raise TypeError("conv: dimension_numbers must be None, a ConvDimensionNumbers or "
                        f"three layout strings, got {dimension_numbers!r}")
    if all(isinstance(s, str) for s in dimension_numbers):
        return _from_strings(*dimension_numbers, ndim)
    return ConvDimensionNumbers(*(tuple(int(d) for d in spec) for spec in dimension_numbers))


def _from_strings(lhs: str, rhs: str, out: str, ndim: int) -> ConvDimensionNumbers:
    for name, spec, required in (("lhs", lhs, "NC"), ("rhs", rhs, "OI"), ("out", out, "NC")):
        if len(spec) != ndim or len(set(spec)) != ndim or not set(required) <= set(spec):
            raise TypeError(f"conv: {name} layout {spec!r} must name {ndim} distinct "
                            f"dimensions including {', '.join(required)}")
    # spatial dimensions pair up in the order the kernel layout lists them
    spatial = [c for c in rhs if c not in "OI"]
    if sorted(spatial) != sorted(c for c in lhs if c not in "NC") or \
            sorted(spatial) != sorted(c for c in out if c not in "NC"):
        raise TypeError(f"conv: layouts {lhs!r}, {rhs!r}, {out!r} must name the same spatial "
                        "dimensions")
    return ConvDimensionNumbers(
        (lhs.index("N"), lhs.index("C")) + tuple(lhs.index(c) for c in spatial),
        (rhs.index("O"), rhs.index("I")) + tuple(rhs.index(c) for c in spatial),
        (out.index("N"), out.index("C")) + tuple(out.index(c) for c in spatial))


def padtype_to_pads(in_shape, window_shape, window_strides, padding) -> list:
    """``(low, high)`` pads per spatial dimension for ``'SAME'``, ``'SAME_LOWER'`` or
    ``'VALID'``: SAME gives ``ceil(in / stride)`` outputs, the odd pad at the high end (the low
    end for SAME_LOWER)."""
    kind = padding.upper()
    if kind == "VALID":
        return [(0, 0)] * len(in_shape)
    if kind not in ("SAME", "SAME_LOWER"):
        raise ValueError(f"conv: unknown padding {padding!r}; use 'SAME', 'SAME_LOWER', "
                         "'VALID' or a sequence of (low, high) pairs")
    pads = []
    for size, window, stride in zip(in_shape, window_shape, window_strides):
        size, window, stride = int(size), int(window), int(stride)    # Python ints, as JAX's
        out = math.ceil(size / stride)
        total = max((out - 1) * stride + window - size, 0)
        small, large = total // 2, total - total // 2
        pads.append((small, large) if kind == "SAME" else (large, small))
    return pads


def _ints(values, count, name, default):
    if values is None:
        return (default,) * count
    values = tuple(int(v) for v in values)
    if name == "window_strides" and len(values) != count:
        raise ValueError("conv_general_dilated window and window_strides must have the same "
                         f"number of dimensions, but got {count} and {len(values)}")
    if len(values) != count or any(v < 1 for v in values):
        raise ValueError(f"conv: {name} must be {count} positive ints, got {values}")
    return values


def conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=None,
                         rhs_dilation=None, dimension_numbers=None, feature_group_count=1,
                         batch_group_count=1, precision=None, preferred_element_type=None,
                         out_sharding=None):
    """A general N-d convolution (cross-correlation, as XLA's).

    ``window_strides``: one stride per spatial dimension. ``padding``: ``'SAME'``,
    ``'SAME_LOWER'``, ``'VALID'`` (without ``lhs_dilation``) or ``(low, high)`` per spatial
    dimension (negative trims).
    ``lhs_dilation`` inserts ``d - 1`` zeros between input elements (a transposed
    convolution), ``rhs_dilation`` between kernel taps (atrous). ``feature_group_count``
    splits the input features into groups, each convolved with its share of the kernel's
    output features (depthwise when it equals the input features).

    ``out_sharding``: the result's layout, as JAX's.

    >>> y = lax.conv_general_dilated(x, w, (1, 1), 'SAME',
    ...                              dimension_numbers=('NHWC', 'HWIO', 'NHWC'))
    """
    def convolve(lhs, rhs):
        return _conv(lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation,
                     dimension_numbers, feature_group_count, batch_group_count,
                     preferred_element_type)

    lhs, rhs = array_operand(lhs), array_operand(rhs)
    if out_sharding is not None:
        check_out_sharding(out_sharding, "conv_general_dilated")
        sharding = resolve_sharding(out_sharding, "conv_general_dilated(out_sharding=...)")
        explicit = explicit_axes_for(sharding)
        if explicit:
            # JAX's: the result laid out as asked, however the operands are split
            return auto_axes(convolve, axes=explicit, out_sharding=sharding)(lhs, rhs)
        return constrain(convolve(lhs, rhs), sharding)
    lhs_aval, rhs_aval = aval_of(lhs), aval_of(rhs)
    if not any(spec_of(a) != ((),) * a.ndim for a in (lhs_aval, rhs_aval)):
        return convolve(lhs, rhs)
    # split over Explicit axes: JAX's rule infers a layout only for a replicated kernel and
    # unsplit input features (then the input's, each resized dimension still divisible)
    dn = conv_dimension_numbers(lhs.shape, rhs.shape, dimension_numbers)
    if any(spec_of(rhs_aval)) or spec_of(lhs_aval)[dn.lhs_spec[1]]:
        raise ShardingTypeError("Please specify the output sharding via `out_sharding` "
                                "parameter of `conv_general_dilated`")
    out_shape = _out_shape(lhs, rhs, dn, window_strides, padding, lhs_dilation,
                           rhs_dilation, batch_group_count)
    spec = kept_if_divisible("conv_general_dilated", lhs_aval, out_shape)
    sharding = NamedSharding(lhs_aval.type_sharding.mesh, PartitionSpec(*partitions(spec)))
    return auto_axes(convolve, axes=explicit_axes_for(sharding),
                     out_sharding=sharding)(lhs, rhs)


def _conv(lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation, dimension_numbers,
          feature_group_count, batch_group_count, preferred_element_type):
    """The convolution itself, in the layouts its operands have."""
    lhs = array_operand(lhs)
    rhs = array_operand(rhs)
    dn = conv_dimension_numbers(lhs.shape, rhs.shape, dimension_numbers)
    if lhs.ndim != rhs.ndim:        # given dimension numbers, JAX's shape rule finds it
        raise ValueError("conv_general_dilated lhs and rhs must have the same number of "
                         f"dimensions, but got {lhs.shape} and {rhs.shape}.")
    if lhs.dtype != rhs.dtype:                          # lax does not promote (JAX's)
        raise same_dtypes_error("conv_general_dilated", [lhs.dtype, rhs.dtype])
    x = jnp.transpose(lhs, dn.lhs_spec)                  # [N, C, *S]
    w = jnp.transpose(rhs, dn.rhs_spec)                  # [O, I, *K]
    if int(batch_group_count) != 1:
        out = _batch_grouped(x, w, int(batch_group_count), int(feature_group_count),
                             window_strides, padding, lhs_dilation, rhs_dilation,
                             preferred_element_type)
        return jnp.transpose(out, tuple(np.argsort(dn.out_spec)))
    groups = _check_features(x.shape, w.shape, int(feature_group_count))
    plan = _Spatial.of(x.shape[2:], w.shape[2:], window_strides, padding, lhs_dilation,
                       rhs_dilation)
    strides, rhs_dilation, out_sizes = plan.strides, plan.rhs_dilation, plan.out_sizes
    x = _dilate(x, plan.lhs_dilation)
    x = pad(x, np.zeros((), x.dtype), [(0, 0, 0)] * 2 + [(lo, hi, 0) for lo, hi in plan.pads])
    if min(out_sizes, default=1) <= 0:
        # a window larger than the padded input has no position: an empty result, as XLA's
        out = jnp.zeros((x.shape[0], w.shape[0]) + tuple(out_sizes),
                        jnp.result_type(x.dtype, w.dtype))
    else:
        out = _im2col_product(x, w, strides, rhs_dilation, out_sizes, groups,
                              preferred_element_type)
    if preferred_element_type is not None:
        out = jnp.astype(out, preferred_element_type)
    return jnp.transpose(out, tuple(np.argsort(dn.out_spec)))


class _Spatial(NamedTuple):
    """The spatial dimensions' strides, dilations, pads and result sizes."""
    strides: list
    lhs_dilation: list
    rhs_dilation: list
    pads: list
    out_sizes: list

    @classmethod
    def of(cls, sizes, kernel, window_strides, padding, lhs_dilation, rhs_dilation):
        spatial = len(sizes)
        strides = _ints(window_strides, spatial, "window_strides", 1)
        lhs_dilation = _ints(lhs_dilation, spatial, "lhs_dilation", 1)
        rhs_dilation = _ints(rhs_dilation, spatial, "rhs_dilation", 1)
        if isinstance(padding, str) and any(d != 1 for d in lhs_dilation):
            # as JAX: which SAME padding a transposed convolution wants is ambiguous
            raise ValueError("conv_general_dilated: string padding is not supported with "
                             "lhs_dilation (a transposed convolution); give explicit (low, "
                             "high) pads")
        dilated = [(size - 1) * d + 1 if size else 0 for size, d in zip(sizes, lhs_dilation)]
        windows = [(k - 1) * d + 1 for k, d in zip(kernel, rhs_dilation)]
        if isinstance(padding, str):
            pads = padtype_to_pads(dilated, windows, strides, padding)
        else:
            try:
                pads = [(operator.index(lo), operator.index(hi)) for lo, hi in padding]
            except (ValueError, TypeError) as error:
                raise ValueError(f"padding argument to conv_general_dilated should be a string "
                                 f"or a sequence of (low, high) pairs, got {padding}") from error
        if len(pads) != spatial:
            raise ValueError(f"conv: padding needs {spatial} (low, high) pairs, got {padding!r}")
        padded = [size + lo + hi for size, (lo, hi) in zip(dilated, pads)]
        out_sizes = [(size - window) // stride + 1 if size >= window else 0
                     for size, window, stride in zip(padded, windows, strides)]
        return cls(strides, lhs_dilation, rhs_dilation, pads, out_sizes)


def _out_shape(lhs, rhs, dn, window_strides, padding, lhs_dilation, rhs_dilation,
               batch_group_count) -> tuple:
    """The convolution's result shape, in its layout."""
    x = [lhs.shape[d] for d in dn.lhs_spec]
    w = [rhs.shape[d] for d in dn.rhs_spec]
    plan = _Spatial.of(x[2:], w[2:], window_strides, padding, lhs_dilation, rhs_dilation)
    canonical = [x[0] // max(int(batch_group_count), 1), w[0], *plan.out_sizes]
    shape = [0] * len(canonical)
    for k, d in enumerate(dn.out_spec):
        shape[d] = canonical[k]
    return tuple(shape)


def _batch_grouped(x, w, groups, feature_groups, window_strides, padding, lhs_dilation,
                   rhs_dilation, preferred_element_type):
    """XLA's batch_group_count (in canonical layouts, x [N, C, *S], w [O, I, *K]): the batch
    in ``groups`` consecutive chunks, chunk g convolved with the g-th chunk of the kernel's
    output features, the results side by side along the features (what the gradient of a
    grouped convolution in its kernel is)."""
    if groups < 1:
        raise ValueError("conv_general_dilated batch_group_count must be a positive integer, "
                         f"got {groups}.")
    if x.shape[0] % groups:
        raise ValueError("conv_general_dilated batch_group_count must divide lhs batch "
                         f"dimension size, but {groups} does not divide {x.shape[0]}.")
    if w.shape[0] % groups:
        raise ValueError("conv_general_dilated rhs output feature dimension size must be a "
                         f"multiple of batch_group_count, but {w.shape[0]} is not a multiple "
                         f"of {groups}.")
    if feature_groups != 1:
        raise ValueError("At most one of batch_group_count and feature_group_count may be > 1, "
                         f"got batch_group_count={groups} and "
                         f"feature_group_count={feature_groups}")
    n, o = x.shape[0] // groups, w.shape[0] // groups
    canonical = ConvDimensionNumbers(*(tuple(range(x.ndim)),) * 3)
    parts = [conv_general_dilated(x[g * n:(g + 1) * n], w[g * o:(g + 1) * o], window_strides,
                                  padding, lhs_dilation, rhs_dilation, canonical,
                                  preferred_element_type=preferred_element_type)
             for g in range(groups)]
    return jnp.concatenate(parts, axis=1)


def _check_features(x_shape, w_shape, groups: int) -> int:
    channels, out_features, in_features = x_shape[1], w_shape[0], w_shape[1]
    if groups < 1 or channels % groups or out_features % groups:
        raise ValueError(f"conv: feature_group_count={groups} must divide the input features "
                         f"({channels}) and the kernel's output features ({out_features})")
    if channels // groups != in_features:
        raise ValueError(f"conv: the kernel's input features ({in_features}) must equal the "
                         f"input features over feature_group_count ({channels} / {groups})")
    return groups


def _dilate(x, dilation):
    if all(d == 1 for d in dilation):
        return x
    return pad(x, np.zeros((), x.dtype), [(0, 0, 0)] * 2 + [(0, 0, d - 1) for d in dilation])


def _im2col_product(x, w, strides, rhs_dilation, out_sizes, groups, preferred=None):
    """Every kernel tap's strided window of ``x`` stacked, then one contraction with ``w``."""
    n, c = x.shape[:2]
    o, i = w.shape[:2]
    taps = list(np.ndindex(*w.shape[2:]))
    patches = []
    for tap in taps:
        starts = [k * d for k, d in zip(tap, rhs_dilation)]
        limits = [s + (size - 1) * stride + 1
                  for s, size, stride in zip(starts, out_sizes, strides)]
        patches.append(_slice(x, (0, 0) + tuple(starts), (n, c) + tuple(limits),
                              (1, 1) + tuple(strides)))
    positions = int(np.prod(out_sizes))
    if groups == 1:
        # no group axis at all: a reshape inserting one would not keep a split batch's type
        cols = jnp.reshape(jnp.stack(patches, axis=2), (n, c, len(taps), positions))
        kernel = jnp.reshape(w, (o, i, len(taps)))
        # [N, P, O]: contract input features and taps
        product = dot_general(cols, kernel, (((1, 2), (1, 2)), ((), ())),
                              preferred_element_type=preferred)
        return jnp.reshape(jnp.transpose(product, (0, 2, 1)), (n, o) + tuple(out_sizes))
    # (each reshape either merges or splits dimensions, never both: a split batch's type
    # allows each on its own, as JAX's reshape rule does)
    cols = jnp.reshape(jnp.stack(patches, axis=2), (n, c, len(taps), positions))
    cols = jnp.reshape(cols, (n, groups, i, len(taps), positions))
    kernel = jnp.reshape(w, (groups, o // groups, i, len(taps)))
    # [G, N, P, O/G]: batch over groups, contract input features and taps
    product = dot_general(cols, kernel, (((2, 3), (2, 3)), ((1,), (0,))),
                          preferred_element_type=preferred)
    product = jnp.reshape(jnp.transpose(product, (1, 0, 3, 2)), (n, o, positions))
    return jnp.reshape(product, (n, o) + tuple(out_sizes))


def conv(lhs, rhs, window_strides, padding, precision=None, preferred_element_type=None):
    """``conv_general_dilated`` with the default layouts (``NC...``, ``OI...``) and no
    dilation."""
    return conv_general_dilated(lhs, rhs, window_strides, padding, precision=precision,
                                preferred_element_type=preferred_element_type)


def conv_with_general_padding(lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation,
                              precision=None, preferred_element_type=None):
    return conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation,
                                precision=precision, preferred_element_type=preferred_element_type)


# conv_transpose's default layouts by rank, TensorFlow's convention (as JAX's)
def conv_shape_tuple(lhs_shape, rhs_shape, strides, pads, batch_group_count=1) -> tuple:
    """The result shape of a convolution of operands in the canonical layouts (``lhs``
    ``[N, C, *spatial]``, ``rhs`` ``[O, I, *window]``), ``pads`` a padding type or ``(low,
    high)`` pairs.

    >>> lax.conv_shape_tuple((8, 3, 32, 32), (16, 3, 3, 3), (1, 1), "SAME")
    (8, 16, 32, 32)
    """
    lhs_shape, rhs_shape = tuple(lhs_shape), tuple(rhs_shape)
    if not isinstance(pads, str) and len(pads) != len(lhs_shape) - 2:
        raise TypeError(f"Wrong number of explicit pads for convolution: expected "
                        f"{len(lhs_shape) - 2}, got {len(pads)}.")
    plan = _Spatial.of(lhs_shape[2:], rhs_shape[2:], strides, pads, None, None)
    return (lhs_shape[0] // max(int(batch_group_count), 1), rhs_shape[0], *plan.out_sizes)


def _canonical_shapes(lhs_shape, rhs_shape, dimension_numbers) -> tuple:
    dn = conv_dimension_numbers(lhs_shape, rhs_shape, dimension_numbers)
    return dn, [lhs_shape[d] for d in dn.lhs_spec], [rhs_shape[d] for d in dn.rhs_spec]


def _laid_out(canonical, out_spec) -> tuple:
    shape = [0] * len(canonical)
    for k, d in enumerate(out_spec):
        shape[d] = int(canonical[k])
    return tuple(shape)


def conv_general_shape_tuple(lhs_shape, rhs_shape, window_strides, padding,
                             dimension_numbers) -> tuple:
    """The result shape of ``conv_general_dilated`` on operands of these shapes and layouts
    (``dimension_numbers`` as ``conv_general_dilated`` takes them), in the output layout.

    >>> lax.conv_general_shape_tuple((8, 32, 32, 3), (3, 3, 3, 16), (2, 2), "SAME",
    ...                              ("NHWC", "HWIO", "NHWC"))
    (8, 16, 16, 16)
    """
    dn, lhs, rhs = _canonical_shapes(lhs_shape, rhs_shape, dimension_numbers)
    return _laid_out(conv_shape_tuple(lhs, rhs, window_strides, padding), dn.out_spec)


def conv_transpose_shape_tuple(lhs_shape, rhs_shape, window_strides, padding,
                               dimension_numbers) -> tuple:
    """The result shape of ``conv_transpose`` on operands of these shapes and layouts: the
    input dilated by ``window_strides`` and padded as ``conv_transpose`` pads it."""
    dn, lhs, rhs = _canonical_shapes(lhs_shape, rhs_shape, dimension_numbers)
    strides = [int(s) for s in window_strides]
    if isinstance(padding, str):
        padding = [_transpose_pads(int(k), s, padding.upper()) for k, s in zip(rhs[2:], strides)]
    plan = _Spatial.of(lhs[2:], rhs[2:], None, padding, strides, None)
    return _laid_out((lhs[0], rhs[0], *plan.out_sizes), dn.out_spec)


_TRANSPOSE_LAYOUTS = {2: ("NC", "IO", "NC"), 3: ("NHC", "HIO", "NHC"),
                      4: ("NHWC", "HWIO", "NHWC"), 5: ("NHWDC", "HWDIO", "NHWDC")}


def _transpose_pads(window: int, stride: int, padding: str) -> tuple:
    """``(low, high)`` pads of the stride-dilated input that make a transposed convolution
    the gradient of a forward one with this ``padding``."""
    if padding == "SAME":
        total = window + stride - 2
        low = window - 1 if stride > window - 1 else math.ceil(total / 2)
    elif padding == "VALID":
        total = window + stride - 2 + max(window - stride, 0)
        low = window - 1
    else:
        raise ValueError(f"conv_transpose: padding must be 'SAME', 'VALID' or (low, high) "
                         f"pairs, got {padding!r}")
    return low, total - low


def conv_transpose(lhs, rhs, strides, padding, rhs_dilation=None, dimension_numbers=None,
                   transpose_kernel=False, precision=None, preferred_element_type=None,
                   use_consistent_padding=False):
    """A transposed ("fractionally strided") convolution: ``lhs`` dilated by ``strides`` and
    convolved with ``rhs``. ``'SAME'``/``'VALID'`` choose JAX's pads, which make it the
    gradient of the forward convolution with that padding (SAME gives ``input * stride``
    positions, so it matches when the forward input was a multiple of the stride).
    ``transpose_kernel=True`` flips the kernel's spatial axes and swaps its feature axes,
    giving exactly that gradient for the same kernel. Layouts default to
    ``NHWC``/``HWIO``/``NHWC`` (by rank), as JAX's. ``(low, high)`` pairs are the transposed
    convolution's own pads, unless ``use_consistent_padding``: then they are the forward
    convolution's (each side padded ``window - 1 - pad``, PyTorch's convention), as JAX's.
    """
    lhs = array_operand(lhs)
    rhs = array_operand(rhs)
    if dimension_numbers is None:
        if lhs.ndim not in _TRANSPOSE_LAYOUTS:
            raise ValueError(f"conv_transpose: no default layout for rank {lhs.ndim}; pass "
                             "dimension_numbers")
        dimension_numbers = _TRANSPOSE_LAYOUTS[lhs.ndim]
    dn = conv_dimension_numbers(lhs.shape, rhs.shape, dimension_numbers)
    spatial = lhs.ndim - 2
    rhs_dilation = _ints(rhs_dilation, spatial, "rhs_dilation", 1)
    strides = _ints(strides, spatial, "strides", 1)
    windows = [(rhs.shape[d] - 1) * r + 1 for d, r in zip(dn.rhs_spec[2:], rhs_dilation)]
    if isinstance(padding, str):
        pads = [_transpose_pads(k, s, padding.upper()) for k, s in zip(windows, strides)]
    else:
        pads = [tuple(int(v) for v in pair) for pair in padding]
        if use_consistent_padding:
            pads = [(k - 1 - lo, k - 1 - hi) for k, (lo, hi) in zip(windows, pads)]
    if transpose_kernel:
        rhs = jnp.flip(rhs, tuple(dn.rhs_spec[2:]))
        rhs = jnp.swapaxes(rhs, dn.rhs_spec[0], dn.rhs_spec[1])
    return conv_general_dilated(lhs, rhs, (1,) * spatial, pads, strides, rhs_dilation, dn,
                                precision=precision,
                                preferred_element_type=preferred_element_type)


def conv_general_dilated_patches(lhs, filter_shape, window_strides, padding, lhs_dilation=None,
                                 rhs_dilation=None, dimension_numbers=None, precision=None,
                                 preferred_element_type=None):
    """The patches a convolution with a ``filter_shape`` window would read, as channels: each
    input channel's window flattened (row-major) into ``prod(filter_shape)`` output channels,
    channel-major, as JAX's (a grouped convolution with identity kernels)."""
    lhs = jnp.asarray(lhs)
    filter_shape = tuple(int(d) for d in filter_shape)
    dn = conv_dimension_numbers(lhs.shape, (1, 1) + filter_shape, dimension_numbers)
    spatial = math.prod(filter_shape)
    channels = lhs.shape[dn.lhs_spec[1]]
    kernel = jnp.broadcast_to(jnp.eye(spatial, dtype=lhs.dtype), (channels, spatial, spatial))
    kernel = jnp.reshape(kernel, (channels * spatial, 1) + filter_shape)
    kernel = jnp.moveaxis(kernel, (0, 1), (dn.rhs_spec[0], dn.rhs_spec[1]))
    return conv_general_dilated(lhs, kernel, window_strides, padding, lhs_dilation,
                                rhs_dilation, dn, feature_group_count=channels,
                                precision=None if precision is None else
                                (precision, Precision.DEFAULT),
                                preferred_element_type=preferred_element_type)


def conv_general_dilated_local(lhs, rhs, window_strides, padding, filter_shape,
                               lhs_dilation=None, rhs_dilation=None, dimension_numbers=None,
                               precision=None):
    """A convolution whose kernel is not shared: a separate one at each output place (JAX's
    ``lax.conv_general_dilated_local``, a locally connected layer). ``rhs``'s spatial
    dimensions are the output's; its ``I`` dimension holds each input channel's receptive
    window of ``filter_shape`` flattened (channel-major, the window in the order of
    ``rhs_spec``'s spatial dimensions), as :func:`conv_general_dilated_patches` lays it out.
    Computed as JAX's: the patches, then a product batched over the output places."""
    lhs = array_operand(lhs)
    canonical = p.canonical_precision(precision)
    if canonical is None:
        lhs_precision = None
    elif isinstance(canonical, tuple) and len(canonical) == 2:
        lhs_precision = canonical[0]
    else:
        raise ValueError(f"Unsupported precision for conv_general_dilated_local: {precision}")
    patches = conv_general_dilated_patches(lhs, filter_shape, window_strides, padding,
                                           lhs_dilation, rhs_dilation, dimension_numbers,
                                           precision=lhs_precision)
    lhs_spec, rhs_spec, out_spec = conv_dimension_numbers(
        lhs.shape, (1, 1) + tuple(int(d) for d in filter_shape), dimension_numbers)
    lhs_batch = list(out_spec[2:])
    rhs_batch = [rhs_spec[2:][k] for k in sorted(range(len(lhs_batch)),
                                                 key=lambda k: lhs_batch[k])]
    dn = (([out_spec[1]], [rhs_spec[1]]), (sorted(lhs_batch), rhs_batch))
    out = dot_general(patches, rhs, dn, precision=precision)
    return jnp.moveaxis(out, (-2, -1), (out_spec[0], out_spec[1]))


__all__ += ["conv_general_dilated_patches", "conv_general_dilated_local"]
