"""The primitives ``jax.lax`` names (``lax.add_p``, ``lax.reduce_sum_p``, ...), those shardc's
IR has under the same name: a program's equations can be matched against them
(``eqn.primitive is lax.reduce_sum_p``), as JAX users inspect jaxprs. Their parameters are
shardc's (``docs/semantics.md``), not always JAX's."""
from __future__ import annotations

from ir.primitives import (
    abs_p, acos_p, acosh_p, add_p, and_p, argmax_p, argmin_p, asin_p, asinh_p, atan2_p,
    atan_p, atanh_p, bessel_i0e_p, bessel_i1e_p, bitcast_convert_type_p,
    broadcast_in_dim_p, cbrt_p, ceil_p, complex_p, concatenate_p, cond_p, conj_p,
    convert_element_type_p, cos_p, cosh_p, cummax_p, cummin_p, cumprod_p, cumsum_p,
    digamma_p, div_p, dot_general_p, dynamic_slice_p, dynamic_update_slice_p, eq_p,
    erf_inv_p, erf_p, erfc_p, exp2_p, exp_p, expm1_p, fft_p, floor_p, gather_p, ge_p,
    gt_p, igamma_grad_a_p, igamma_p, igammac_p, imag_p, integer_pow_p, iota_p, is_finite_p, le_p,
    lgamma_p, log1p_p, log_p, logistic_p, lt_p, max_p, min_p, mul_p, ne_p, neg_p,
    nextafter_p, not_p, or_p, pad_p, polygamma_p, population_count_p, pow_p, real_p,
    reduce_and_p, reduce_max_p, reduce_min_p, reduce_or_p, reduce_precision_p,
    reduce_prod_p, reduce_sum_p, rem_p, reshape_p, rev_p, round_p, rsqrt_p, scan_p,
    scatter_p, select_n_p, sharding_constraint_p, shift_left_p,
    shift_right_arithmetic_p, shift_right_logical_p, sign_p, sin_p, sinh_p, slice_p,
    sort_p, sqrt_p, squeeze_p, stop_gradient_p, sub_p, tan_p, tanh_p, transpose_p,
    while_p, xor_p, zeta_p)
from ir.collectives import (
    all_gather_p, all_to_all_p, axis_index_p, pmax_p, pmin_p, ppermute_p, psum_p,
    ragged_all_to_all_p)
