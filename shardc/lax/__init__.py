"""``shardc.lax``: collectives over mesh axes and the lax operations user code reaches for.

Collectives take ``axis_name`` as one mesh axis or a tuple of axes; inside a shard_map body
they act over the device groups of SEMANTICS 2.0.

One module per family; each lists in ``__all__`` what it adds here:

    _collectives      psum, all_gather, psum_scatter, ppermute, all_to_all, axis_index, ...
    _groups           the collectives' axis_index_groups, built from whole-axis collectives
    _ops              dot_general, conversions, elementwise arithmetic, reshape, slices
    _elementwise      special functions (erf, lgamma, ...), clamp, powers, rounding, bits
    _shapes           broadcast, expand_dims, squeeze, rev, pad, full
    _reductions       reduce_*, argmax, reduce, cumulative reductions, sort, top_k
    _control_flow     cond, switch, while_loop, fori_loop, scan, map, associative_scan
    _convolution      conv_general_dilated, conv, conv_transpose
    _more             inverse and hyperbolic functions, comparisons and bits by lax name,
                      select_n, reduce_and/or, reduce_window, split, tile, collapse
"""
from shardc.lax._collectives import (all_gather, all_to_all, axis_index, axis_size, pbroadcast,
                                     pcast, pmax, pmean, pmin, ppermute, pshuffle, psum,
                                     psum_scatter, pswapaxes, pvary, ragged_all_to_all, reshard)
from shardc.lax._control_flow import (associative_scan, cond, fori_loop, map, scan, switch,
                                      while_loop)
from shardc.lax._convolution import (ConvDimensionNumbers, conv, conv_dimension_numbers,
                                     conv_general_dilated_local, conv_general_dilated_patches,
                                     conv_general_dilated, conv_general_shape_tuple,
                                     conv_shape_tuple, conv_transpose,
                                     conv_transpose_shape_tuple, conv_with_general_padding,
                                     padtype_to_pads)
from compiler.custom_gradient import custom_root
from compiler.linear_solve import custom_linear_solve
from shardc.lax._extra import (ConvGeneralDilatedDimensionNumbers, DotDimensionNumbers,
                               RaggedDotDimensionNumbers, RoundingMethod, broadcast_shapes,
                               clz, composite, dtype, empty, index_take, platform_dependent,
                               ragged_dot, ragged_dot_general, reduce_xor, shape_as_value,
                               stack, unstack)
from shardc.lax._gather import (GatherDimensionNumbers, GatherScatterMode,
                                ScatterDimensionNumbers, gather, scatter, scatter_add,
                                scatter_apply, scatter_max, scatter_min, scatter_mul,
                                scatter_sub)
from shardc.lax._elementwise import (FftType, atan2, betainc, bitcast_convert_type, cbrt, ceil, clamp,
                                     complex, conj, digamma, erf, erf_inv, erfc, exp2, expm1, fft,
                                     floor, imag, bessel_i0e, bessel_i1e, igamma,
                                     igamma_grad_a, igammac, random_gamma_grad, zeta, integer_pow, is_finite, lgamma, log1p, polygamma, pow, real,
                                     reciprocal, reduce_precision, round, sign, square, tan)
from shardc.lax._ops import (AccuracyMode, DotAlgorithm, DotAlgorithmPreset, Precision, abs, add, batch_matmul, broadcast_in_dim,
                             broadcasted_iota, concatenate,
                             convert_element_type, cos, dce_sink, div, dot, dot_general,
                             dynamic_index_in_dim,
                             dynamic_slice, dynamic_slice_in_dim, dynamic_update_index_in_dim,
                             dynamic_update_slice, dynamic_update_slice_in_dim, exp, iota, log,
                             logistic, max, min, mul, neg, rem, reshape, rsqrt, select, sin, slice,
                             sqrt, stop_gradient, sub, tanh, Tolerance, transpose)
from shardc.lax._more import (acos, acosh, asin, asinh, atan, atanh, bitwise_and, bitwise_not,
                              bitwise_or, bitwise_xor, broadcast_like, broadcast_to_rank,
                              collapse, cosh, eq, ge,
                              gt, le, lt, mulhi, ne, nextafter, optimization_barrier, population_count,
                              reduce_and, reduce_or, reduce_window, reduce_window_shape_tuple,
                              select_n, shift_left,
                              shift_right_arithmetic, shift_right_logical, sinh, split, tile)
from shardc.lax._reductions import (approx_max_k, approx_min_k, argmax, argmin, cumlogsumexp,
                                    cummax, cummin, cumprod, cumsum, reduce, reduce_max,
                                    reduce_min, reduce_prod, reduce_sum, sort, sort_key_val, top_k)
from shardc.lax._rng import RandomAlgorithm, rng_bit_generator
from shardc.lax._shapes import (broadcast, expand_dims, full, full_like, index_in_dim, pad, rev,
                                slice_in_dim, squeeze)
from shardc.sharding import with_sharding_constraint
from shardc.lax import linalg
from shardc.lax._primitives import (
    abs_p, acos_p, acosh_p, add_p, all_gather_p, all_to_all_p, and_p, argmax_p, argmin_p,
    asin_p, asinh_p, atan2_p, atan_p, atanh_p, axis_index_p, bessel_i0e_p, bessel_i1e_p,
    bitcast_convert_type_p, broadcast_in_dim_p, cbrt_p, ceil_p, complex_p, concatenate_p,
    cond_p, conj_p, convert_element_type_p, cos_p, cosh_p, cummax_p, cummin_p, cumprod_p,
    cumsum_p, digamma_p, div_p, dot_general_p, dynamic_slice_p, dynamic_update_slice_p,
    eq_p, erf_inv_p, erf_p, erfc_p, exp2_p, exp_p, expm1_p, fft_p, floor_p, gather_p, ge_p,
    gt_p, igamma_grad_a_p, igamma_p, igammac_p, imag_p, integer_pow_p, iota_p, is_finite_p, le_p,
    lgamma_p,
    log1p_p, log_p, logistic_p, lt_p, max_p, min_p, mul_p, ne_p, neg_p, nextafter_p, not_p,
    or_p, pad_p, pmax_p, pmin_p, polygamma_p, population_count_p, pow_p, ppermute_p, psum_p,
    ragged_all_to_all_p, real_p, reduce_and_p, reduce_max_p, reduce_min_p, reduce_or_p,
    reduce_precision_p, reduce_prod_p, reduce_sum_p, rem_p, reshape_p, rev_p, round_p,
    rsqrt_p, scan_p, scatter_p, select_n_p, sharding_constraint_p, shift_left_p,
    shift_right_arithmetic_p, shift_right_logical_p, sign_p, sin_p, sinh_p, slice_p, sort_p,
    sqrt_p, squeeze_p, stop_gradient_p, sub_p, tan_p, tanh_p, transpose_p, while_p, xor_p,
    zeta_p)

__all__ = [
    "AccuracyMode", "RandomAlgorithm", "Tolerance", "rng_bit_generator",
    "ConvDimensionNumbers", "conv_general_dilated_local", "conv_general_dilated_patches", "betainc", "mulhi", "DotAlgorithm", "DotAlgorithmPreset", "Precision", "abs", "add", "all_gather", "all_to_all", "argmax",
    "argmin", "associative_scan", "atan2", "axis_index", "axis_size", "batch_matmul",
    "bitcast_convert_type", "broadcast", "broadcast_in_dim", "broadcasted_iota", "cbrt", "ceil", "clamp", "complex", "conj", "imag", "real", "fft", "FftType", "concatenate",
    "cond", "conv", "conv_dimension_numbers", "conv_general_dilated", "conv_transpose",
    "conv_shape_tuple", "conv_general_shape_tuple", "conv_transpose_shape_tuple",
    "conv_with_general_padding", "convert_element_type", "cos", "cumlogsumexp", "cummax", "cummin",
    "cumprod", "cumsum", "digamma", "div", "dot", "dot_general", "dynamic_index_in_dim",
    "dynamic_slice", "dynamic_slice_in_dim", "dynamic_update_index_in_dim", "dynamic_update_slice",
    "dynamic_update_slice_in_dim", "erf", "erf_inv", "erfc", "exp", "exp2", "expand_dims", "expm1",
    "floor", "fori_loop", "full", "full_like", "index_in_dim", "integer_pow", "iota", "is_finite",
    "lgamma", "log", "log1p", "logistic", "map", "max", "min", "mul", "neg", "pad",
    "padtype_to_pads", "pbroadcast", "pcast", "pmax", "pmean", "pmin", "polygamma", "pow",
    "ppermute", "pshuffle", "psum", "psum_scatter", "pswapaxes", "pvary", "ragged_all_to_all", "reciprocal", "reduce",
    "reduce_max", "reduce_min", "reduce_precision", "reduce_prod", "reduce_sum", "rem", "reshape",
    "reshard", "rev", "round", "rsqrt", "scan", "select", "sign", "sin", "slice", "slice_in_dim",
    "sort", "sort_key_val", "sqrt", "square", "squeeze", "stop_gradient", "sub", "switch", "tan",
    "dce_sink",
    "tanh", "top_k", "approx_max_k", "approx_min_k", "transpose", "while_loop", "with_sharding_constraint",
    "acos", "acosh", "asin", "asinh", "atan", "atanh", "bitwise_and", "bitwise_not", "bitwise_or",
    "bitwise_xor", "broadcast_like", "broadcast_to_rank", "collapse", "cosh", "eq", "ge", "gt", "le", "lt", "ne",
    "nextafter", "optimization_barrier", "population_count", "reduce_and", "reduce_or",
    "reduce_window", "reduce_window_shape_tuple", "select_n", "shift_left", "shift_right_arithmetic", "shift_right_logical",
    "sinh", "split", "tile",
    "GatherDimensionNumbers", "GatherScatterMode", "ScatterDimensionNumbers", "gather",
    "scatter", "scatter_add", "scatter_apply", "scatter_max", "scatter_min", "scatter_mul",
    "scatter_sub", "bessel_i0e", "bessel_i1e", "igamma", "igamma_grad_a", "igammac", "random_gamma_grad", "zeta",
    "custom_root",
    "custom_linear_solve",
    "ConvGeneralDilatedDimensionNumbers", "DotDimensionNumbers", "RaggedDotDimensionNumbers",
    "RoundingMethod", "broadcast_shapes", "clz", "composite", "dtype", "empty", "index_take",
    "platform_dependent", "ragged_dot", "ragged_dot_general", "reduce_xor", "shape_as_value",
    "stack", "unstack", "linalg",
    # the primitives (``shardc.lax._primitives``)
    "abs_p", "acos_p", "acosh_p", "add_p", "all_gather_p", "all_to_all_p", "and_p",
    "argmax_p", "argmin_p", "asin_p", "asinh_p", "atan2_p", "atan_p", "atanh_p",
    "axis_index_p", "bessel_i0e_p", "bessel_i1e_p", "bitcast_convert_type_p",
    "broadcast_in_dim_p", "cbrt_p", "ceil_p", "complex_p", "concatenate_p", "cond_p",
    "conj_p", "convert_element_type_p", "cos_p", "cosh_p", "cummax_p", "cummin_p",
    "cumprod_p", "cumsum_p", "digamma_p", "div_p", "dot_general_p", "dynamic_slice_p",
    "dynamic_update_slice_p", "eq_p", "erf_inv_p", "erf_p", "erfc_p", "exp2_p", "exp_p",
    "expm1_p", "fft_p", "floor_p", "gather_p", "ge_p", "gt_p", "igamma_grad_a_p",
    "igamma_p", "igammac_p", "imag_p", "integer_pow_p", "iota_p", "is_finite_p", "le_p", "lgamma_p",
    "log1p_p", "log_p", "logistic_p", "lt_p", "max_p", "min_p", "mul_p", "ne_p", "neg_p",
    "nextafter_p", "not_p", "or_p", "pad_p", "pmax_p", "pmin_p", "polygamma_p",
    "population_count_p", "pow_p", "ppermute_p", "psum_p", "ragged_all_to_all_p", "real_p",
    "reduce_and_p", "reduce_max_p", "reduce_min_p", "reduce_or_p", "reduce_precision_p",
    "reduce_prod_p", "reduce_sum_p", "rem_p", "reshape_p", "rev_p", "round_p", "rsqrt_p",
    "scan_p", "scatter_p", "select_n_p", "sharding_constraint_p", "shift_left_p",
    "shift_right_arithmetic_p", "shift_right_logical_p", "sign_p", "sin_p", "sinh_p",
    "slice_p", "sort_p", "sqrt_p", "squeeze_p", "stop_gradient_p", "sub_p", "tan_p",
    "tanh_p", "transpose_p", "while_p", "xor_p", "zeta_p",
]
