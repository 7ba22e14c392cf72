"""JVP and transpose rules for the array primitives.

A JVP rule is ``rule(primals, tangents, **params) -> (outputs, output tangents)`` where a
tangent of None is a symbolic zero. A transpose rule is ``rule(ct, *operands, **params) ->
cotangents per operand`` where linear operands are ``Linear`` markers and the rest are values.
Rules bind primitives in the current trace.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from compiler.ad_core import (Linear, add_tangents, as_typed, full_like_aval, instantiate,
                               jvp_rules, transpose_rules, typed_as, zeros_like_aval)
from compiler.tracing import aval_of, bind, device_put_traced
from ir import dtypes
from ir import primitives as p
from ir.core import TypeSharding
from ir.sharding import NamedSharding, PartitionSpec
from ir.sharding_rules import named_sharding, partitions, spec_of
from ir.unreduced import split_contraction


def _aval(x):
    return x.aval if isinstance(x, Linear) else aval_of(x)


def _scalar(value, like):
    return np.asarray(value, _aval(like).dtype)[()]


def _mul(a, b):
    return bind(p.mul_p, a, b)


def _zero_tangents(prim, primals, tangents, **params):
    outs = bind(prim, *primals, **params)
    outs = outs if prim.multiple_results else [outs]
    return outs, [None] * len(outs)


def _one(prim, primals, **params):
    return bind(prim, *primals, **params)


# --- linear primitives: the tangent map is the primitive itself ------------------------------------

def linear_jvp(prim, primals, tangents, **params):
    out = bind(prim, *primals, **params)
    filled = [instantiate(t, aval_of(x)) for t, x in zip(tangents, primals)]
    tangent = bind(prim, *filled, **params)
    return ([out], [tangent]) if not prim.multiple_results else (out, tangent)


# --- elementwise, one operand ------------------------------------------------------------------------

def _unary_jvp(derivative, primals, tangents, prim=None, **params):
    (x,), (t,) = primals, tangents
    y = bind(prim, x, **params)
    return [y], [_mul(t, derivative(x, y))]


def _d_sin(x, y):
    return bind(p.cos_p, x)


def _d_cos(x, y):
    return bind(p.neg_p, bind(p.sin_p, x))


def _d_tan(x, y):
    return bind(p.add_p, _scalar(1, x), _mul(y, y))


def _d_exp(x, y):
    return y


def _d_expm1(x, y):
    return bind(p.add_p, y, _scalar(1, x))


def _d_sqrt(x, y):
    return bind(p.div_p, _scalar(0.5, x), y)


def _d_rsqrt(x, y):
    return _mul(bind(p.div_p, y, x), _scalar(-0.5, x))


def _d_abs(x, y):
    # 1 where x >= 0 (at 0 too, as JAX), else -1
    nonneg = bind(p.convert_element_type_p, bind(p.ge_p, x, _scalar(0, x)),
                  new_dtype=aval_of(x).dtype)
    return bind(p.sub_p, _mul(nonneg, _scalar(2, x)), _scalar(1, x))


def _d_logistic(x, y):
    return _mul(y, bind(p.sub_p, _scalar(1, x), y))


def _one_minus_square(x):
    return bind(p.sub_p, _scalar(1, x), _mul(x, x))


def _d_asin(x, y):
    return bind(p.rsqrt_p, _one_minus_square(x))


def _d_acos(x, y):
    return bind(p.neg_p, bind(p.rsqrt_p, _one_minus_square(x)))


def _d_sinh(x, y):
    return bind(p.cosh_p, x)


def _d_cosh(x, y):
    return bind(p.sinh_p, x)


def _d_asinh(x, y):
    return bind(p.rsqrt_p, bind(p.add_p, _mul(x, x), _scalar(1, x)))


def _d_acosh(x, y):
    # 1 / (sqrt(x - 1) sqrt(x + 1)): no cancellation in x*x - 1 near 1
    return _mul(bind(p.rsqrt_p, bind(p.sub_p, x, _scalar(1, x))),
                bind(p.rsqrt_p, bind(p.add_p, x, _scalar(1, x))))


def _d_lgamma(x, y):
    return bind(p.digamma_p, x)


def _d_digamma(x, y):
    return bind(p.polygamma_p, _scalar(1, x), x)


def _d_bessel_i0e(x, y):
    # (exp(-|x|) I0)' = exp(-|x|) I1 - sign(x) exp(-|x|) I0
    return bind(p.sub_p, bind(p.bessel_i1e_p, x), _mul(bind(p.sign_p, x), y))


def _d_bessel_i1e(x, y):
    # (exp(-|x|) I1)' = exp(-|x|) I0 - (sign(x) + 1/x) exp(-|x|) I1, which is 1/2 at 0
    zero = bind(p.eq_p, x, _scalar(0, x))
    safe = bind(p.select_n_p, zero, x, _ones_like(x))
    slope = bind(p.sub_p, bind(p.bessel_i0e_p, x),
                 _mul(y, bind(p.add_p, bind(p.sign_p, x), bind(p.div_p, _scalar(1, x), safe))))
    return bind(p.select_n_p, zero, slope, bind(p.mul_p, _ones_like(x), _scalar(0.5, x)))


def _two_operand_jvp(prim, slopes, primals, tangents):
    """A two-operand special function: its value, and the tangent from each operand's slope
    (``slopes[k](a, x, out)``; where it is not differentiable in that operand, None, or the
    error's message)."""
    out = bind(prim, *primals)
    total = None
    for k, (t, slope) in enumerate(zip(tangents, slopes)):
        if t is None:
            continue
        if slope is None or isinstance(slope, str):
            raise ValueError(slope or f"{prim.name} is not differentiable with respect to its "
                             f"operand {k}")
        term = _mul(t, slope(*primals, out))
        total = term if total is None else bind(p.add_p, total, term)
    return [out], [total]


def _d_igamma_x(a, x, out):
    # x^(a-1) e^-x / Gamma(a)
    return bind(p.exp_p, bind(p.sub_p, bind(p.sub_p, _mul(bind(p.sub_p, a, _scalar(1, a)),
                                                           bind(p.log_p, x)), x),
                              bind(p.lgamma_p, a)))


# d/dx polygamma(m, x) = polygamma(m + 1, x); m is an order, not differentiable
jvp_rules[p.polygamma_p] = functools.partial(
    _two_operand_jvp, p.polygamma_p,
    ("polygamma is not differentiable with respect to its order m",
     lambda m, x, out: bind(p.polygamma_p, bind(p.add_p, m, _scalar(1, m)), x)))
jvp_rules[p.igamma_p] = functools.partial(
    _two_operand_jvp, p.igamma_p,
    (lambda a, x, out: bind(p.igamma_grad_a_p, a, x), _d_igamma_x))
jvp_rules[p.igammac_p] = functools.partial(
    _two_operand_jvp, p.igammac_p,
    (lambda a, x, out: bind(p.neg_p, bind(p.igamma_grad_a_p, a, x)),
     lambda a, x, out: bind(p.neg_p, _d_igamma_x(a, x, out))))
jvp_rules[p.igamma_grad_a_p] = functools.partial(_two_operand_jvp, p.igamma_grad_a_p,
                                                 (None, None))
jvp_rules[p.zeta_p] = functools.partial(
    _two_operand_jvp, p.zeta_p,
    # d/dq zeta(s, q) = -s zeta(s + 1, q)
    (lambda s, q, out: bind(p.zeta_grad_s_p, s, q),
     lambda s, q, out: bind(p.neg_p, _mul(s, bind(p.zeta_p, bind(p.add_p, s, _scalar(1, s)),
                                                  q)))))
jvp_rules[p.zeta_grad_s_p] = functools.partial(_two_operand_jvp, p.zeta_grad_s_p,
                                               (None, None))


_UNARY_DERIVATIVES = {
    p.sin_p: _d_sin, p.cos_p: _d_cos, p.tan_p: _d_tan, p.exp_p: _d_exp,
    p.expm1_p: _d_expm1, p.sqrt_p: _d_sqrt, p.rsqrt_p: _d_rsqrt, p.logistic_p: _d_logistic,
    p.asin_p: _d_asin, p.acos_p: _d_acos, p.sinh_p: _d_sinh,
    p.cosh_p: _d_cosh, p.asinh_p: _d_asinh, p.acosh_p: _d_acosh,
    p.lgamma_p: _d_lgamma, p.digamma_p: _d_digamma,
    p.bessel_i0e_p: _d_bessel_i0e, p.bessel_i1e_p: _d_bessel_i1e,
}
for _p, _d in _UNARY_DERIVATIVES.items():
    jvp_rules[_p] = functools.partial(_unary_jvp, _d, prim=_p)


# Tangents spelt as JAX's rules spell them (where the tangent enters the arithmetic other
# than as one factor of a coefficient), so that derivatives round as JAX's do: tanh's
# (t + t*y)(1 - y) keeps its precision where y is near 1, and a low-precision (bfloat16)
# gradient gets JAX's bits.

def _tangent_jvp(rule, primals, tangents, prim=None, **params):
    (x,), (t,) = primals, tangents
    y = bind(prim, x, **params)
    return [y], [rule(t, x, y)]


def _inverse_square(y):
    """``y ** -2``, JAX's ``integer_pow``: one over the square, and its own derivatives
    integer powers (the square's quotient rule squares again at each order, overflowing
    float32 by the sixth derivative of ``1 / x`` at 4)."""
    return bind(p.integer_pow_p, y, y=-2)


def _integer_pow_jvp(primals, tangents, *, y):
    """JAX's: ``t * (y * x ** (y - 1))``, spelt ``t * (2 * x)`` for a square."""
    (x,), (t,) = primals, tangents
    out = bind(p.integer_pow_p, x, y=y)
    if y == 0:
        return [out], [None]
    if y == 1:
        return [out], [t]
    power = x if y == 2 else bind(p.integer_pow_p, x, y=y - 1)
    return [out], [_mul(t, _mul(_scalar(y, x), power))]


jvp_rules[p.integer_pow_p] = _integer_pow_jvp


def _exp_of_minus_square(x):
    return bind(p.exp_p, bind(p.neg_p, _mul(x, x)))


_TWO_OVER_SQRT_PI = 2 / np.sqrt(np.pi)
_TANGENT_RULES = {
    p.tanh_p: lambda t, x, y: _mul(bind(p.add_p, t, _mul(t, y)),
                                   bind(p.sub_p, _scalar(1, x), y)),
    p.log_p: lambda t, x, y: bind(p.div_p, t, x),
    p.log1p_p: lambda t, x, y: bind(p.div_p, t, bind(p.add_p, x, _scalar(1, x))),
    p.atan_p: lambda t, x, y: bind(p.div_p, t, bind(p.add_p, _scalar(1, x), _mul(x, x))),
    p.atanh_p: lambda t, x, y: _mul(bind(p.div_p, _scalar(1, x),
                                         bind(p.add_p, _scalar(1, x), x)),
                                    bind(p.div_p, t, bind(p.sub_p, _scalar(1, x), x))),
    p.cbrt_p: lambda t, x, y: _mul(t, _mul(_scalar(1 / 3, x), _inverse_square(y))),
    p.exp2_p: lambda t, x, y: _mul(_scalar(np.log(2), x), _mul(t, y)),
    p.erf_p: lambda t, x, y: _mul(_scalar(_TWO_OVER_SQRT_PI, x),
                                  _mul(t, _exp_of_minus_square(x))),
    p.erfc_p: lambda t, x, y: _mul(_scalar(-_TWO_OVER_SQRT_PI, x),
                                   _mul(t, _exp_of_minus_square(x))),
    # the inverse function's slope, 1 / erf'(y)
    p.erf_inv_p: lambda t, x, y: _mul(_scalar(1 / _TWO_OVER_SQRT_PI, x),
                                      _mul(t, bind(p.exp_p, _mul(y, y)))),
}
for _p, _rule in _TANGENT_RULES.items():
    jvp_rules[_p] = functools.partial(_tangent_jvp, _rule, prim=_p)

# Piecewise-constant or integer-valued results: zero tangents.
for _p in (p.sign_p, p.floor_p, p.ceil_p, p.round_p, p.not_p, p.is_finite_p, p.and_p, p.or_p,
           p.xor_p, p.argmax_p, p.argmin_p, p.iota_p, p.threefry2x32_p, p.reduce_and_p,
           p.reduce_or_p, p.signbit_p, p.population_count_p, p.nextafter_p,
           p.searchsorted_p, p.bitcast_convert_type_p) + p.COMPARISON + p.SHIFTS:
    jvp_rules[_p] = functools.partial(_zero_tangents, _p)

jvp_rules[p.neg_p] = functools.partial(linear_jvp, p.neg_p)
# reduce_precision is treated as linear, as JAX does: tangents and cotangents are rounded too.
jvp_rules[p.reduce_precision_p] = functools.partial(linear_jvp, p.reduce_precision_p)
transpose_rules[p.reduce_precision_p] = lambda ct, x, **params: [
    bind(p.reduce_precision_p, ct, **params)]
transpose_rules[p.neg_p] = lambda ct, x: [bind(p.neg_p, ct)]


# --- complex numbers: JAX's conventions --------------------------------------------------------
# The parts are linear maps over the reals; their transposes are JAX's (imag's and complex's
# negate the imaginary part), so that grad of a real function of complex values is the
# conjugate of its gradient ``df/dx + i df/dy``, as in JAX (grad(|z|^2)(z) = 2 conj(z)).

def _is_complex(x) -> bool:
    return bool(np.issubdtype(aval_of(x).dtype, np.complexfloating))


def _complex_of(re, im):
    return bind(p.complex_p, re, im)


for _p in p.COMPLEX_PARTS + (p.complex_p,):
    jvp_rules[_p] = functools.partial(linear_jvp, _p)
transpose_rules[p.real_p] = lambda ct, x: [_complex_of(ct, zeros_like_aval(aval_of(ct)))]
transpose_rules[p.imag_p] = lambda ct, x: [
    _complex_of(zeros_like_aval(aval_of(ct)), bind(p.neg_p, ct))]
transpose_rules[p.conj_p] = lambda ct, x: [
    bind(p.conj_p, ct) if np.issubdtype(_aval(x).dtype, np.complexfloating)
    else bind(p.real_p, ct)]


def _complex_transpose(ct, re, im):
    return [unbroadcast(bind(p.real_p, ct), _aval(re)) if isinstance(re, Linear) else None,
            unbroadcast(bind(p.neg_p, bind(p.imag_p, ct)), _aval(im))
            if isinstance(im, Linear) else None]


transpose_rules[p.complex_p] = lambda ct, re, im: _complex_transpose(ct, re, im)


def _abs_jvp(primals, tangents):
    """|x|' t: sign(x) t for a real x; for a complex one real(conj(x) t) / |x| (0 at 0)."""
    (x,), (t,) = primals, tangents
    y = bind(p.abs_p, x)
    if not _is_complex(x):
        return [y], [_mul(t, _d_abs(x, y))]
    zero = bind(p.eq_p, y, _scalar(0, y))
    safe = bind(p.select_n_p, zero, y, _ones_like(y))
    slope = bind(p.real_p, _mul(t, bind(p.conj_p, x)))
    tangent = bind(p.select_n_p, zero, bind(p.div_p, slope, safe), zeros_like_aval(aval_of(y)))
    return [y], [tangent]


jvp_rules[p.abs_p] = _abs_jvp


# --- the Fourier transform: linear; transposes as JAX's ---------------------------------------

def _fft(x, fft_type, fft_lengths):
    return bind(p.fft_p, x, fft_type=fft_type, fft_lengths=tuple(fft_lengths))


def _fft_transpose(ct, x, *, fft_type, fft_lengths):
    if fft_type in ("FFT", "IFFT"):         # the transform's matrix is symmetric
        return [_fft(ct, fft_type, fft_lengths)]
    n = fft_lengths[-1]
    if fft_type == "RFFT":
        # RFFT is FFT of the real input made complex, its last dimension cut to n//2+1:
        # transposed, the cut is padded back with zeros and the real part taken
        config = [(0, 0, 0)] * (aval_of(ct).ndim - 1) + [(0, n - aval_of(ct).shape[-1], 0)]
        zero = np.zeros((), aval_of(ct).dtype)
        padded = bind(p.pad_p, ct, zero, padding_config=tuple(config))
        return [bind(p.real_p, _fft(padded, "FFT", fft_lengths))]
    # IRFFT: JAX's rule (the RFFT of the cotangent, the doubled frequencies weighted, scaled,
    # conjugated by JAX's convention for complex gradients)
    y = _fft(ct, "RFFT", fft_lengths)
    m = aval_of(y).shape[-1]
    odd = n % 2
    weights = np.concatenate([np.ones(1), np.full(m - 2 + odd, 2.0), np.ones(1 - odd)])
    scale = (weights / math.prod(fft_lengths)).astype(aval_of(y).dtype)
    scale = bind(p.broadcast_in_dim_p, scale, shape=aval_of(y).shape,
                 broadcast_dimensions=(aval_of(y).ndim - 1,))
    return [bind(p.conj_p, _mul(y, scale))]


jvp_rules[p.fft_p] = functools.partial(linear_jvp, p.fft_p)


def _callback_jvp(primals, tangents, **params):
    """A debug callback runs on the primal values and has no tangent; the others are JAX's
    errors (a custom_jvp gives them derivatives)."""
    effect = params["effect"]
    if effect == "pure":
        raise ValueError("Pure callbacks do not support JVP. Please use `jax.custom_jvp` to "
                         "use callbacks while taking gradients.")
    if effect == "io":
        raise ValueError("IO callbacks do not support JVP.")
    outs = bind(p.callback_p, *primals, **params)
    return list(outs), [None] * len(outs)


jvp_rules[p.callback_p] = _callback_jvp
transpose_rules[p.fft_p] = _fft_transpose


# --- elementwise, two operands (rank-0 operands broadcast) -----------------------------------------

def unbroadcast(ct, operand_aval):
    """Sum a cotangent down to an operand that was broadcast from rank 0."""
    if ct is None:
        return None
    if operand_aval.shape == () and aval_of(ct).shape != ():
        ct = bind(p.reduce_sum_p, ct, axes=tuple(range(aval_of(ct).ndim)))
    return ct


def _add_jvp(primals, tangents):
    x, y = primals
    tx, ty = tangents
    out = bind(p.add_p, x, y)
    shape = aval_of(out)
    return [out], [_broadcast_to(add_tangents(_broadcast_to(tx, shape), _broadcast_to(ty, shape)),
                                 shape)]


def _broadcast_to(t, aval):
    if t is None or aval_of(t).shape == aval.shape:
        return t
    return bind(p.broadcast_in_dim_p, t, shape=aval.shape, broadcast_dimensions=())


def _sub_jvp(primals, tangents):
    x, y = primals
    tx, ty = tangents
    out = bind(p.sub_p, x, y)
    aval = aval_of(out)
    neg = bind(p.neg_p, ty) if ty is not None else None
    return [out], [_broadcast_to(add_tangents(_broadcast_to(tx, aval), _broadcast_to(neg, aval)),
                                 aval)]


def _add_transpose(ct, x, y):
    return [unbroadcast(ct, _aval(x)) if isinstance(x, Linear) else None,
            unbroadcast(ct, _aval(y)) if isinstance(y, Linear) else None]


def _sub_transpose(ct, x, y):
    neg = bind(p.neg_p, ct) if isinstance(y, Linear) else None
    return [unbroadcast(ct, _aval(x)) if isinstance(x, Linear) else None,
            unbroadcast(neg, _aval(y)) if isinstance(y, Linear) else None]


def _mul_jvp(primals, tangents):
    x, y = primals
    tx, ty = tangents
    out = bind(p.mul_p, x, y)
    aval = aval_of(out)
    a = _broadcast_to(_mul(tx, y), aval) if tx is not None else None
    b = _broadcast_to(_mul(x, ty), aval) if ty is not None else None
    return [out], [add_tangents(a, b)]


def _mul_transpose(ct, x, y):
    if isinstance(x, Linear) and isinstance(y, Linear):
        raise ValueError("mul is not linear in both operands at once")
    if isinstance(x, Linear):
        return [unbroadcast(_mul(ct, _scalar_reduced_as(y, ct)), x.aval), None]
    return [None, unbroadcast(_mul(_scalar_reduced_as(x, ct), ct), y.aval)]


def _scalar_reduced_as(factor, ct):
    """A constant scalar factor of a cotangent that is a partial sum, reduced over its axes
    (JAX reshards such a scalar to reduced in the forward pass, where it met a reduced
    value: the partial sum times it is then one)."""
    unreduced = aval_of(ct).unreduced
    aval = aval_of(factor)
    if not unreduced or aval.ndim or aval.ur or aval.type_sharding is not None \
            or aval.vma & unreduced:
        return factor
    from compiler.shard_map import current_shard_context
    from ir import collectives as coll
    from ir.sharding import current_mesh
    axes = tuple(sorted(unreduced))
    if current_shard_context() is not None:
        return bind(coll.preduced_p, factor, mesh_axes=axes)
    mesh = current_mesh()
    if mesh is None:
        return factor               # (the product's rule refuses it, naming it)
    return bind(p.sharding_constraint_p, factor,
                sharding=NamedSharding(mesh, PartitionSpec(reduced=frozenset(axes))))


def _div_jvp(primals, tangents):
    x, y = primals
    tx, ty = tangents
    out = bind(p.div_p, x, y)
    aval = aval_of(out)
    a = _broadcast_to(bind(p.div_p, tx, y), aval) if tx is not None else None
    b = None
    if ty is not None:
        # -t x / y^2, spelt as JAX's (-t * x) * y**-2
        b = _broadcast_to(_mul(_mul(bind(p.neg_p, ty), x), _inverse_square(y)), aval)
    return [out], [add_tangents(a, b)]


def _div_transpose(ct, x, y):
    if isinstance(y, Linear):
        raise ValueError("div is not linear in its denominator")
    return [unbroadcast(bind(p.div_p, ct, y), x.aval), None]


def _rem_jvp(primals, tangents):
    x, y = primals
    tx, ty = tangents
    out = bind(p.rem_p, x, y)
    aval = aval_of(out)
    a = _broadcast_to(tx, aval)
    b = None
    if ty is not None:
        # rem(x, y) = x - y * trunc(x / y)
        quotient = bind(p.div_p, bind(p.sub_p, x, out), y)
        b = _broadcast_to(bind(p.neg_p, _mul(ty, quotient)), aval)
    return [out], [add_tangents(a, b)]


def _pow_jvp(primals, tangents):
    x, y = primals
    tx, ty = tangents
    out = bind(p.pow_p, x, y)
    aval = aval_of(out)
    a = b = None
    if tx is not None:
        # JAX's rule for an inexact exponent: y * x ** (y - 1), nan at x == y == 0 (an
        # integer exponent, which jnp.power hands over as a float, is 0 there: jnp.power
        # makes x ** 0 the constant 1)
        power = bind(p.pow_p, x, bind(p.sub_p, y, _scalar(1, y)))
        a = _broadcast_to(_mul(tx, _mul(y, power)), aval)
    if ty is not None:
        safe_log = bind(p.log_p, bind(p.select_n_p, bind(p.eq_p, x, _scalar(0, x)), x,
                                      _ones_like(x)))
        b = _broadcast_to(_mul(ty, _mul(out, safe_log)), aval)
    return [out], [add_tangents(a, b)]


def _ones_like(x):
    return full_like_aval(aval_of(x), 1)


def _minmax_jvp(prim, primals, tangents):
    """JAX's rule: an operand's tangent passes where it is the result (wins), halved at a tie;
    where the result is NaN neither passes (a NaN wins no comparison and ties nothing)."""
    x, y = primals
    tx, ty = tangents
    out = bind(prim, x, y)
    aval = aval_of(out)
    # only the operands with a tangent contribute (relu = max(x, 0) keeps one weight)
    x_wins = _wins(prim, x, y, aval.dtype) if tx is not None else None
    y_wins = _wins(prim, y, x, aval.dtype) if ty is not None else None
    half_tie = _half_tie(x, y, out)
    x_part = y_part = None
    if tx is not None:
        x_part = _broadcast_to(_mul(tx, bind(p.add_p, x_wins, half_tie)), aval)
    if ty is not None:
        y_part = _broadcast_to(_mul(ty, bind(p.add_p, y_wins, half_tie)), aval)
    return [out], [add_tangents(x_part, y_part)]


def _wins(prim, mine, other, dtype):
    """1 where ``mine`` is strictly the max(mine, other) (or min), else 0."""
    wins = bind(p.gt_p if prim is p.max_p else p.lt_p, mine, other)
    return bind(p.convert_element_type_p, wins, new_dtype=dtype)


def _half_tie(x, y, out):
    tie = bind(p.convert_element_type_p, bind(p.eq_p, x, y), new_dtype=aval_of(out).dtype)
    return _mul(tie, _scalar(0.5, out))


def _atan2_jvp(primals, tangents):
    x, y = primals
    tx, ty = tangents
    out = bind(p.atan2_p, x, y)
    aval = aval_of(out)
    denom = bind(p.add_p, _mul(x, x), _mul(y, y))
    a = _broadcast_to(_mul(tx, bind(p.div_p, y, denom)), aval) if tx is not None else None
    b = None
    if ty is not None:
        b = _broadcast_to(_mul(ty, bind(p.neg_p, bind(p.div_p, x, denom))), aval)
    return [out], [add_tangents(a, b)]


jvp_rules[p.add_p] = _add_jvp
jvp_rules[p.sub_p] = _sub_jvp
jvp_rules[p.mul_p] = _mul_jvp
jvp_rules[p.div_p] = _div_jvp
jvp_rules[p.rem_p] = _rem_jvp
jvp_rules[p.pow_p] = _pow_jvp
jvp_rules[p.max_p] = functools.partial(_minmax_jvp, p.max_p)
jvp_rules[p.min_p] = functools.partial(_minmax_jvp, p.min_p)
jvp_rules[p.atan2_p] = _atan2_jvp
transpose_rules[p.add_p] = _add_transpose
transpose_rules[p.sub_p] = _sub_transpose
transpose_rules[p.mul_p] = _mul_transpose
transpose_rules[p.div_p] = _div_transpose


def _select_n_jvp(primals, tangents):
    pred, *cases = primals
    out = bind(p.select_n_p, pred, *cases)
    filled = [instantiate(t, aval_of(c)) for t, c in zip(tangents[1:], cases)]
    return [out], [bind(p.select_n_p, pred, *filled)]


def _select_n_transpose(ct, pred, *cases):
    if isinstance(pred, Linear):
        raise ValueError("select_n is not linear in its predicate")
    zeros = zeros_like_aval(aval_of(ct))
    result = [None]
    for k, case in enumerate(cases):
        if not isinstance(case, Linear):
            result.append(None)
            continue
        picks = [zeros] * len(cases)
        picks[k] = ct
        result.append(unbroadcast(bind(p.select_n_p, pred, *picks), case.aval))
    return result


jvp_rules[p.select_n_p] = _select_n_jvp
transpose_rules[p.select_n_p] = _select_n_transpose


def _convert_jvp(primals, tangents, *, new_dtype):
    (x,), (t,) = primals, tangents
    out = bind(p.convert_element_type_p, x, new_dtype=new_dtype)
    if not dtypes.is_inexact(new_dtype) or not dtypes.is_inexact(aval_of(x).dtype):
        return [out], [None]
    return [out], [bind(p.convert_element_type_p, t, new_dtype=new_dtype)]


def _convert_transpose(ct, x, *, new_dtype):
    return [bind(p.convert_element_type_p, ct, new_dtype=x.aval.dtype)]


jvp_rules[p.convert_element_type_p] = _convert_jvp
transpose_rules[p.convert_element_type_p] = _convert_transpose


# --- shapes -------------------------------------------------------------------------------------------

for _p in (p.broadcast_in_dim_p, p.reshape_p, p.transpose_p, p.squeeze_p, p.concatenate_p,
           p.slice_p, p.rev_p, p.reduce_sum_p, p.cumsum_p, p.pad_p,
           p.sharding_constraint_p, p.device_put_p, p.shard_alike_p):
    jvp_rules[_p] = functools.partial(linear_jvp, _p)


def _broadcast_in_dim_transpose(ct, x, *, shape, broadcast_dimensions):
    in_shape = x.aval.shape
    new_dims = tuple(d for d in range(len(shape)) if d not in broadcast_dimensions)
    expanded = tuple(od for d, od in zip(in_shape, broadcast_dimensions)
                     if d == 1 and shape[od] != 1)
    summed = bind(p.reduce_sum_p, ct, axes=tuple(sorted(new_dims + expanded))) \
        if new_dims or expanded else ct
    if aval_of(summed).shape != in_shape:
        summed = bind(p.reshape_p, summed, new_sizes=in_shape)
    return [summed]


def _reshape_transpose(ct, x, *, new_sizes, out_sharding=None):
    return [bind(p.reshape_p, ct, new_sizes=x.aval.shape,
                 **typed_as(x.aval, ct))]


def _transpose_transpose(ct, x, *, permutation):
    inverse = tuple(int(k) for k in np.argsort(permutation))
    return [bind(p.transpose_p, ct, permutation=inverse)]


def _squeeze_transpose(ct, x, *, dimensions):
    return [bind(p.reshape_p, ct, new_sizes=x.aval.shape)]


def _concatenate_transpose(ct, *xs, dimension):
    result = []
    offset = 0
    shape = aval_of(ct).shape
    for x in xs:
        size = _aval(x).shape[dimension]
        if isinstance(x, Linear):
            start = [0] * len(shape)
            limit = list(shape)
            start[dimension], limit[dimension] = offset, offset + size
            result.append(bind(p.slice_p, ct, start_indices=tuple(start),
                               limit_indices=tuple(limit), strides=None))
        else:
            result.append(None)
        offset += size
    return result


def _slice_transpose(ct, x, *, start_indices, limit_indices, strides):
    shape = x.aval.shape
    strides = strides or (1,) * len(shape)
    config = []
    for d, (lo, st) in enumerate(zip(start_indices, strides)):
        n = aval_of(ct).shape[d]
        used = lo + (n - 1) * st + 1 if n else lo
        config.append((lo, shape[d] - used, st - 1))
    zero = np.zeros((), x.aval.dtype)
    return [bind(p.pad_p, ct, zero, padding_config=tuple(config))]


def _rev_transpose(ct, x, *, dimensions):
    return [bind(p.rev_p, ct, dimensions=dimensions)]


def _reduce_sum_transpose(ct, x, *, axes, out_sharding=None):
    """The cotangent broadcast back over the summed dimensions, typed as the operand's
    cotangent is (JAX's: split as the operand; unreduced where it is reduced)."""
    shape = x.aval.shape
    kept = tuple(d for d in range(len(shape)) if d not in axes)
    ct = bind(p.broadcast_in_dim_p, ct, shape=shape, broadcast_dimensions=kept)
    return [as_typed(ct, x.aval.to_ct()) if x.aval.type_sharding is not None else ct]


def _cumsum_transpose(ct, x, *, axis, reverse):
    return [bind(p.cumsum_p, ct, axis=axis, reverse=not reverse)]


def _pad_transpose(ct, x, value, *, padding_config):
    """JAX's: the cotangent padded by the negated low and high padding (trimming what was
    added, zeros where the pad trimmed), then every ``interior + 1``-th entry."""
    shape = aval_of(ct).shape
    unpad = tuple((-lo, -hi, 0) for lo, hi, _ in padding_config)
    unpadded = bind(p.pad_p, ct, np.zeros((), aval_of(ct).dtype)[()], padding_config=unpad)
    strides = tuple(interior + 1 for _, _, interior in padding_config)
    ct_x = unpadded
    if any(s != 1 for s in strides):
        ct_x = bind(p.slice_p, unpadded, start_indices=(0,) * len(shape),
                    limit_indices=aval_of(unpadded).shape, strides=strides)
    ct_value = None
    if isinstance(value, Linear):
        everything = bind(p.reduce_sum_p, ct, axes=tuple(range(len(shape))))
        inner = bind(p.reduce_sum_p, ct_x, axes=tuple(range(len(shape))))
        ct_value = bind(p.sub_p, everything, inner)
    return [ct_x if isinstance(x, Linear) else None, ct_value]


def _sharding_constraint_transpose(ct, x, *, sharding):
    spec = getattr(sharding, "spec", None)
    if x.aval.ur or (spec is not None and (spec.unreduced or spec.reduced)):
        # back to the operand's layout, unreduced where it is reduced and the other way
        # round (JAX's reshard transpose): the cotangent of a reduction of partial sums is
        # known equal everywhere, and that of making partial sums is one
        ct_aval = x.aval.to_ct()
        typed = ct_aval.type_sharding
        entries = partitions(typed.spec) if typed is not None else ()
        return [bind(p.sharding_constraint_p, ct, sharding=NamedSharding(
            sharding.mesh, PartitionSpec(*entries, unreduced=ct_aval.unreduced,
                                         reduced=ct_aval.reduced)))]
    return [bind(p.sharding_constraint_p, ct, sharding=sharding)]


def _device_put_transpose(ct, x, *, device, src):
    return [device_put_traced(ct, src, src=device)]


def _shard_alike_transpose(cts, x, y):
    """The cotangents laid out alike, as the values were (one zero: as they are)."""
    if cts[0] is None or cts[1] is None:
        return list(cts)
    return bind(p.shard_alike_p, *cts)


transpose_rules[p.broadcast_in_dim_p] = _broadcast_in_dim_transpose
transpose_rules[p.reshape_p] = _reshape_transpose
transpose_rules[p.transpose_p] = _transpose_transpose
transpose_rules[p.squeeze_p] = _squeeze_transpose
transpose_rules[p.concatenate_p] = _concatenate_transpose
transpose_rules[p.slice_p] = _slice_transpose
transpose_rules[p.rev_p] = _rev_transpose
transpose_rules[p.reduce_sum_p] = _reduce_sum_transpose
transpose_rules[p.cumsum_p] = _cumsum_transpose
transpose_rules[p.pad_p] = _pad_transpose
transpose_rules[p.sharding_constraint_p] = _sharding_constraint_transpose
transpose_rules[p.device_put_p] = _device_put_transpose
transpose_rules[p.shard_alike_p] = _shard_alike_transpose


# --- indexing ----------------------------------------------------------------------------------------

def _dynamic_slice_jvp(primals, tangents, *, slice_sizes):
    x, *starts = primals
    out = bind(p.dynamic_slice_p, x, *starts, slice_sizes=slice_sizes)
    if tangents[0] is None:
        return [out], [None]
    return [out], [bind(p.dynamic_slice_p, tangents[0], *starts, slice_sizes=slice_sizes)]


def _dynamic_slice_transpose(ct, x, *starts, slice_sizes):
    zeros = zeros_like_aval(x.aval)
    return [bind(p.dynamic_update_slice_p, zeros, ct, *starts)] + [None] * len(starts)


def _dynamic_update_slice_jvp(primals, tangents):
    x, update, *starts = primals
    tx, tu = tangents[0], tangents[1]
    out = bind(p.dynamic_update_slice_p, x, update, *starts)
    if tx is None and tu is None:
        return [out], [None]
    tx = instantiate(tx, aval_of(x))
    tu = instantiate(tu, aval_of(update))
    return [out], [bind(p.dynamic_update_slice_p, tx, tu, *starts)]


def _dynamic_update_slice_transpose(ct, x, update, *starts):
    update_aval = _aval(update)
    ct_x = ct_update = None
    if isinstance(x, Linear):
        ct_x = bind(p.dynamic_update_slice_p, ct, zeros_like_aval(update_aval), *starts)
    if isinstance(update, Linear):
        ct_update = bind(p.dynamic_slice_p, ct, *starts, slice_sizes=update_aval.shape)
    return [ct_x, ct_update] + [None] * len(starts)


def _gather_jvp(primals, tangents, *, axis):
    x, indices = primals
    out = bind(p.gather_p, x, indices, axis=axis)
    if tangents[0] is None:
        return [out], [None]
    return [out], [bind(p.gather_p, tangents[0], indices, axis=axis)]


def _wrapped_indices(indices, size):
    """Negative indices counted from the end, as gather and scatter read them."""
    dtype = aval_of(indices).dtype
    negative = bind(p.lt_p, indices, np.asarray(0, dtype)[()])
    return bind(p.select_n_p, negative, indices,
                bind(p.add_p, indices, np.asarray(size, dtype)[()]))


def _gather_transpose(ct, x, indices, *, axis):
    """JAX's: a scatter-add of the cotangent, which drops the out-of-range indices the
    forward gather clamped (XLA's gather promises in-range indices; its transpose skips the
    others), so they get no cotangent."""
    zeros = zeros_like_aval(x.aval)
    return [bind(p.scatter_p, zeros, indices, ct, axis=axis, mode="add"), None]


def _scatter_applied(indices, size, mode):
    """Which updates a scatter writes, a bool per index: out-of-range ones are dropped, and of
    several 'set' updates to one place only the last is kept."""
    dtype = aval_of(indices).dtype
    if mode == "add":
        wrapped = _wrapped_indices(indices, size)
        return bind(p.and_p, bind(p.ge_p, wrapped, np.asarray(0, dtype)[()]),
                    bind(p.lt_p, wrapped, np.asarray(size, dtype)[()]))
    shape = aval_of(indices).shape
    n = int(np.prod(shape, dtype=np.int64))
    ids = bind(p.add_p, bind(p.iota_p, dtype=np.dtype(np.int32), shape=(n,), dimension=0),
               np.int32(1))
    if shape != (n,):
        ids = bind(p.reshape_p, ids, new_sizes=shape)
    slots = bind(p.broadcast_in_dim_p, np.int32(0), shape=(size,), broadcast_dimensions=())
    written = bind(p.scatter_p, slots, indices, ids, axis=0, mode="set")
    return bind(p.eq_p, bind(p.gather_p, written, indices, axis=0), ids)


def _scatter_jvp(primals, tangents, *, axis, mode):
    x, indices, updates = primals
    out = bind(p.scatter_p, x, indices, updates, axis=axis, mode=mode)
    tx, _, tu = tangents
    if tx is None and tu is None:
        return [out], [None]
    if mode == "mul" and tu is None:
        # linear in x: each element is scaled by the product of the updates it receives
        return [out], [bind(p.scatter_p, tx, indices, updates, axis=axis, mode=mode)]
    if mode == "mul":
        raise NotImplementedError(
            "scatter_mul gradients are only implemented if `unique_indices=True`")
    if mode in ("min", "max"):
        return [out], [_scatter_extremum_tangent(x, indices, updates, out,
                                                 instantiate(tx, aval_of(x)),
                                                 instantiate(tu, aval_of(updates)), axis)]
    if mode not in ("add", "set"):
        raise NotImplementedError(f"Differentiation rule for scatter with mode={mode!r} not "
                                  "implemented")
    tx = instantiate(tx, aval_of(x))
    tu = instantiate(tu, aval_of(updates))
    return [out], [bind(p.scatter_p, tx, indices, tu, axis=axis, mode=mode)]


def _scatter_extremum_tangent(x, indices, updates, out, tx, tu, axis):
    """JAX's tangent of a scatter-max/min: each place's tangent is that of the values that
    won it, averaged over ties (the operand's own value among them where it was kept)."""
    def take(v):
        return bind(p.gather_p, v, indices, axis=axis)

    def add_at(base, u):
        return bind(p.scatter_p, base, indices, u, axis=axis, mode="add")

    def where(pred, yes, no):
        return bind(p.select_n_p, pred, no, yes)

    u_aval = aval_of(updates)
    dtype = u_aval.dtype
    zeros_u, ones_u = zeros_like_aval(u_aval), _ones_like(updates)
    zeros_x = zeros_like_aval(aval_of(x))
    won = take(out)
    # an update dropped for being out of range won nothing, whatever the clipped read says
    in_range = bind(p.broadcast_in_dim_p,
                    _scatter_applied(indices, aval_of(x).shape[axis], "add"),
                    shape=u_aval.shape,
                    broadcast_dimensions=tuple(range(axis, axis + aval_of(indices).ndim)))
    successful = bind(p.and_p, bind(p.eq_p, updates, won), in_range)
    retained = bind(p.eq_p, take(x), won)
    winners = take(add_at(zeros_x, where(successful, ones_u, zeros_u)))
    refs = take(add_at(zeros_x, ones_u))
    one = np.ones((), dtype)[()]
    share_kept = bind(p.div_p, one, bind(p.add_p, winners, one))
    share = bind(p.div_p, one, winners)         # inf where nothing won: never selected
    update_coef = where(successful, where(retained, share_kept, share), zeros_u)
    # (an update dropped for being out of range moves nothing: no share, and no division by
    # the count of the place its clipped read names, which may be none)
    counted = where(in_range, refs, ones_u)
    operand_coef = where(in_range, bind(p.div_p, bind(p.sub_p, where(retained, share_kept,
                                                                      zeros_u), one), counted),
                         zeros_u)
    moved = bind(p.add_p, bind(p.mul_p, take(tx), operand_coef),
                 bind(p.mul_p, tu, update_coef))
    return add_at(tx, moved)


def _scatter_transpose(ct, x, indices, updates, *, axis, mode):
    if mode == "mul" and isinstance(x, Linear) and not isinstance(updates, Linear):
        # a scaling of each element: its own transpose
        return [bind(p.scatter_p, ct, indices, updates, axis=axis, mode=mode), None, None]
    if mode not in ("add", "set"):
        raise NotImplementedError(f"transpose of scatter with mode={mode!r}")
    ct_x = ct_updates = None
    if isinstance(x, Linear):
        ct_x = ct
        if mode == "set":
            zeros = zeros_like_aval(_aval(updates))
            ct_x = bind(p.scatter_p, ct, indices, zeros, axis=axis, mode="set")
    if isinstance(updates, Linear):
        ct_updates = bind(p.gather_p, ct, indices, axis=axis)
        applied = _scatter_applied(indices, aval_of(ct).shape[axis], mode)
        index_ndim = aval_of(indices).ndim
        applied = bind(p.broadcast_in_dim_p, applied, shape=aval_of(ct_updates).shape,
                       broadcast_dimensions=tuple(range(axis, axis + index_ndim)))
        ct_updates = bind(p.select_n_p, applied, zeros_like_aval(aval_of(ct_updates)),
                          ct_updates)
    return [ct_x, None, ct_updates]


jvp_rules[p.dynamic_slice_p] = _dynamic_slice_jvp
jvp_rules[p.dynamic_update_slice_p] = _dynamic_update_slice_jvp
jvp_rules[p.gather_p] = _gather_jvp
jvp_rules[p.scatter_p] = _scatter_jvp
transpose_rules[p.dynamic_slice_p] = _dynamic_slice_transpose
transpose_rules[p.dynamic_update_slice_p] = _dynamic_update_slice_transpose
transpose_rules[p.gather_p] = _gather_transpose
transpose_rules[p.scatter_p] = _scatter_transpose


# --- reductions --------------------------------------------------------------------------------------

def _extremum_jvp(prim, primals, tangents, *, axes):
    """The tangent at the extremum's locations, averaged over ties."""
    (x,), (t,) = primals, tangents
    out = bind(prim, x, axes=axes)
    shape = aval_of(x).shape
    kept = tuple(d for d in range(len(shape)) if d not in axes)
    spread = bind(p.broadcast_in_dim_p, out, shape=shape, broadcast_dimensions=kept)
    at = bind(p.convert_element_type_p, bind(p.eq_p, x, spread), new_dtype=aval_of(x).dtype)
    count = bind(p.reduce_sum_p, at, axes=axes)
    picked = bind(p.reduce_sum_p, _mul(t, at), axes=axes)
    return [out], [bind(p.div_p, picked, count)]


def _prod_jvp(primals, tangents, *, axes):
    (x,), (t,) = primals, tangents
    out = bind(p.reduce_prod_p, x, axes=axes)
    # d prod = sum over k of t_k * prod_{j != k} x_j, computed without dividing by zero
    others = _prod_of_others(x, axes)
    return [out], [bind(p.reduce_sum_p, _mul(t, others), axes=axes)]


def _prod_of_others(x, axes):
    """For each element, the product of the other elements along ``axes`` (no division)."""
    aval = aval_of(x)
    shape = aval.shape
    kept = tuple(d for d in range(len(shape)) if d not in axes)
    perm = kept + tuple(axes)
    moved = bind(p.transpose_p, x, permutation=perm) if perm != tuple(range(len(shape))) else x
    n = int(np.prod([shape[a] for a in axes], dtype=np.int64))
    lead = tuple(shape[d] for d in kept)
    flat = bind(p.reshape_p, moved, new_sizes=lead + (n,))
    split = aval_of(flat).type_sharding
    rows = None if split is None else TypeSharding.of(split.mesh, split.spec[:-1] + ((),))
    if split is not None and split.spec[-1]:
        # the products run along the reduced elements: gathered whole, the rows kept split
        flat = bind(p.sharding_constraint_p, flat,
                    sharding=NamedSharding(split.mesh, PartitionSpec(*partitions(
                        split.spec[:-1] + ((),)))))
    # ones laid out as a column of ``flat``
    ones = full_like_aval(aval_of(flat).update(shape=lead + (1,), type_sharding=rows), 1)
    left = _exclusive_cumprod(flat, ones, len(lead), reverse=False)
    right = _exclusive_cumprod(flat, ones, len(lead), reverse=True)
    others = _mul(left, right)
    others = bind(p.reshape_p, others, new_sizes=tuple(shape[d] for d in perm))
    inverse = tuple(int(k) for k in np.argsort(perm))
    if perm != tuple(range(len(shape))):
        others = bind(p.transpose_p, others, permutation=inverse)
    if aval.type_sharding is not None and aval_of(others).type_sharding != aval.type_sharding:
        others = bind(p.sharding_constraint_p, others, sharding=named_sharding(aval))
    return others


def _exclusive_cumprod(flat, ones, axis, reverse):
    """Products of the elements before (or after) each one along the last axis."""
    n = aval_of(flat).shape[axis]
    pieces = []
    running = ones
    order = range(n - 1, -1, -1) if reverse else range(n)
    for k in order:
        pieces.append(running)
        start = [0] * (axis + 1)
        limit = list(aval_of(flat).shape)
        start[axis], limit[axis] = k, k + 1
        element = bind(p.slice_p, flat, start_indices=tuple(start), limit_indices=tuple(limit),
                       strides=None)
        running = _mul(running, element)
    if reverse:
        pieces.reverse()
    return bind(p.concatenate_p, *pieces, dimension=axis) if len(pieces) > 1 else pieces[0]


jvp_rules[p.reduce_max_p] = functools.partial(_extremum_jvp, p.reduce_max_p)
jvp_rules[p.reduce_min_p] = functools.partial(_extremum_jvp, p.reduce_min_p)
jvp_rules[p.reduce_prod_p] = _prod_jvp


# --- dot_general ---------------------------------------------------------------------------------

def _dot_general_jvp(primals, tangents, *, dimension_numbers, preferred_element_type=None,
                     out_sharding=None, precision=None):
    x, y = primals
    tx, ty = tangents
    params = dict(dimension_numbers=dimension_numbers,
                  preferred_element_type=preferred_element_type)
    if precision is not None:
        params["precision"] = precision
    if out_sharding is not None:
        params["out_sharding"] = out_sharding
    out = bind(p.dot_general_p, x, y, **params)
    a = bind(p.dot_general_p, tx, y, **params) if tx is not None else None
    b = bind(p.dot_general_p, x, ty, **params) if ty is not None else None
    return [out], [add_tangents(a, b)]


def _remaining(n, *removed):
    gone = {d for group in removed for d in group}
    return [d for d in range(n) if d not in gone]


def _ranges(*lengths):
    start = 0
    for n in lengths:
        yield list(range(start, start + n))
        start += n


def _transpose_lhs(ct, x_aval, y, dimension_numbers, preferred_element_type, swap_ans=False,
                   precision=None):
    """The cotangent of the left operand: contract ct with y over y's free dimensions, then put
    the dimensions back in x's order."""
    (x_contract, y_contract), (x_batch, y_batch) = dimension_numbers
    y_ndim = _aval(y).ndim
    x_kept = _remaining(x_aval.ndim, x_contract, x_batch)
    y_kept = _remaining(y_ndim, y_contract, y_batch)
    if swap_ans:
        ans_batch, ans_y, _ = _ranges(len(x_batch), len(y_kept), len(x_kept))
    else:
        ans_batch, _, ans_y = _ranges(len(x_batch), len(x_kept), len(y_kept))
    dims = ((tuple(ans_y), tuple(y_kept)), (tuple(ans_batch), tuple(y_batch)))
    x_contract_by_y = [x_contract[k] for k in np.argsort(y_contract)]
    order = list(x_batch) + x_kept + x_contract_by_y
    out_axes = tuple(int(k) for k in np.argsort(order))
    ct_dtype, y_dtype = _aval(ct).dtype, _aval(y).dtype
    if ct_dtype != y_dtype:
        # a preferred_element_type wider than the operands gives a wider cotangent: the
        # product is taken in the wider dtype and rounded to x's
        wide = np.promote_types(ct_dtype, y_dtype)
        ct = ct if ct_dtype == wide else bind(p.convert_element_type_p, ct, new_dtype=wide)
        y = y if y_dtype == wide else bind(p.convert_element_type_p, y, new_dtype=wide)
    # the cotangent is split as x is (JAX's out_sharding in its transpose): with both
    # operands split over a contracted axis the dot alone could not say how
    extra = {} if precision is None else {"precision": precision}
    typed = typed_as(x_aval, ct, y, order=order)
    ct_aval = x_aval.to_ct()
    later = None
    if ct_aval.unreduced and split_contraction(_aval(ct), _aval(y), dims) != \
            ct_aval.unreduced:
        # a cotangent wanted as partial sums that its product cannot leave so (its sides
        # split the contraction otherwise): the product whole, then made partial sums
        sharding = typed["out_sharding"]
        typed = {"out_sharding": sharding.with_spec(PartitionSpec(*sharding.spec))}
        later = ct_aval
    result = bind(p.dot_general_p, ct, y, dimension_numbers=dims,
                  preferred_element_type=x_aval.dtype, **typed, **extra)
    if out_axes != tuple(range(len(out_axes))):
        result = bind(p.transpose_p, result, permutation=out_axes)
    if later is not None:
        result = bind(p.sharding_constraint_p, result, sharding=NamedSharding(
            sharding.mesh, PartitionSpec(*partitions(spec_of(later)),
                                         unreduced=later.unreduced, reduced=later.reduced)))
    return result


def _dot_general_transpose(ct, x, y, *, dimension_numbers, preferred_element_type=None,
                           out_sharding=None, precision=None):
    (x_contract, y_contract), (x_batch, y_batch) = dimension_numbers
    ct_x = ct_y = None
    # the products of the transpose keep the precision asked for, as JAX's
    if isinstance(x, Linear):
        ct_x = _transpose_lhs(ct, x.aval, y, dimension_numbers, preferred_element_type,
                              precision=precision)
    if isinstance(y, Linear):
        swapped = ((y_contract, x_contract), (y_batch, x_batch))
        ct_y = _transpose_lhs(ct, y.aval, x, swapped, preferred_element_type, swap_ans=True,
                              precision=precision)
    return [ct_x, ct_y]


jvp_rules[p.dot_general_p] = _dot_general_jvp
transpose_rules[p.dot_general_p] = _dot_general_transpose


# --- no derivative -------------------------------------------------------------------------------

def _debug_print_jvp(primals, tangents, **params):
    bind(p.debug_print_p, *primals, **params)
    return [], []


jvp_rules[p.debug_print_p] = _debug_print_jvp


def _check_jvp(primals, tangents, **params):
    bind(p.check_p, *primals, **params)         # the primal values are checked
    return [], []


jvp_rules[p.check_p] = _check_jvp


def _inspect_sharding_jvp(primals, tangents, **params):
    bind(p.inspect_sharding_p, *primals, **params)
    return [], []


jvp_rules[p.inspect_sharding_p] = _inspect_sharding_jvp
jvp_rules[p.stop_gradient_p] = functools.partial(_zero_tangents, p.stop_gradient_p)
jvp_rules[p.copy_p] = functools.partial(linear_jvp, p.copy_p)
transpose_rules[p.copy_p] = lambda ct, x: [bind(p.copy_p, ct)]


# --- cumulative products and extrema, and sorting ------------------------------------------------

def _slice_along(x, axis, start, limit, stride=1):
    """``x[start:limit:stride]`` along ``axis``."""
    shape = aval_of(x).shape
    starts, limits, strides = [0] * len(shape), list(shape), [1] * len(shape)
    starts[axis], limits[axis], strides[axis] = start, max(start, limit), stride
    return bind(p.slice_p, x, start_indices=tuple(starts), limit_indices=tuple(limits),
                strides=tuple(strides) if stride != 1 else None)


def _interleave(even, odd, axis):
    """``even[0], odd[0], even[1], ...`` along ``axis`` (``even`` as long as ``odd`` or one
    longer), as JAX's associative_scan builds it: each spread by zero padding, then added
    (so a -0 comes out +0, as in JAX)."""
    longer = aval_of(even).shape[axis] > aval_of(odd).shape[axis]
    parts = []
    for x, config in ((even, (0, 0 if longer else 1, 1)), (odd, (1, 1 if longer else 0, 1))):
        padding = [(0, 0, 0)] * len(aval_of(x).shape)
        padding[axis] = config
        parts.append(bind(p.pad_p, x, np.zeros((), aval_of(x).dtype)[()],
                          padding_config=tuple(padding)))
    return bind(p.or_p if aval_of(even).dtype == np.bool_ else p.add_p, *parts)


def _associative_scan(combine, elems, axis):
    """The inclusive scan of ``combine`` over the arrays ``elems`` (one pytree: a value and
    its tangent) along ``axis``, by JAX's associative_scan recursion: combine neighbouring
    pairs, scan those, combine each pair's scan with the next element, interleave. JAX
    differentiates cumulative products and extrema through this tree, so its rounding and
    its split of tied extrema are what this one reproduces."""
    n = aval_of(elems[0]).shape[axis]
    if n < 2:
        return elems
    odd = _associative_scan(combine, combine([_slice_along(e, axis, 0, n - 1, 2) for e in elems],
                                             [_slice_along(e, axis, 1, n, 2) for e in elems]),
                            axis)
    heads = [_slice_along(e, axis, 0, 1) for e in elems]
    if n > 2:
        previous = odd if n % 2 else [_slice_along(e, axis, 0, aval_of(e).shape[axis] - 1)
                                      for e in odd]
        rest = combine(previous, [_slice_along(e, axis, 2, n, 2) for e in elems])
        heads = [bind(p.concatenate_p, h, r, dimension=axis) for h, r in zip(heads, rest)]
    return [_interleave(even, o, axis) for even, o in zip(heads, odd)]


def _combine_prod(earlier, later):
    (a, ta), (b, tb) = earlier, later
    return [_mul(a, b), bind(p.add_p, _mul(ta, b), _mul(a, tb))]


def _combine_extremum(prim, earlier, later):
    """max or min of two running values, with max's derivative (``_minmax_jvp``'s weights)."""
    (a, ta), (b, tb) = earlier, later
    out = bind(prim, a, b)
    dtype = aval_of(out).dtype
    a_wins, b_wins = _wins(prim, a, b, dtype), _wins(prim, b, a, dtype)
    half_tie = _half_tie(a, b, out)
    return [out, bind(p.add_p, _mul(ta, bind(p.add_p, a_wins, half_tie)),
                      _mul(tb, bind(p.add_p, b_wins, half_tie)))]


_CUMULATIVE_COMBINE = {p.cumprod_p: _combine_prod,
                       p.cummax_p: functools.partial(_combine_extremum, p.max_p),
                       p.cummin_p: functools.partial(_combine_extremum, p.min_p)}


def _cumulative_jvp(prim, primals, tangents, *, axis, reverse):
    """JAX's: the jvp of its associative_scan of the binary operation (values included, so
    a product's value under jvp is the tree's)."""
    (x,), (t,) = primals, tangents
    if t is None or aval_of(x).shape[axis] == 0:
        return [bind(prim, x, axis=axis, reverse=reverse)], [t]
    elems = [x, t]
    if reverse:
        elems = [bind(p.rev_p, v, dimensions=(axis,)) for v in elems]
    elems = _associative_scan(_CUMULATIVE_COMBINE[prim], elems, axis)
    if reverse:
        elems = [bind(p.rev_p, v, dimensions=(axis,)) for v in elems]
    out, tangent = elems
    return [out], [tangent]


for _p in _CUMULATIVE_COMBINE:
    jvp_rules[_p] = functools.partial(_cumulative_jvp, _p)


def take_along(x, indices, axis):
    """``x[..., indices[..., k, ...], ...]`` along ``axis`` (indices of ``x``'s shape, in
    range): one gather from the flattened ``x``, so it is linear in ``x``. On Explicit axes
    it is computed whole and laid out as ``x`` after (as take_along_axis does)."""
    typed = named_sharding(aval_of(x))
    if typed is not None and any(typed.spec):
        whole = typed.with_spec(())
        x = bind(p.sharding_constraint_p, x, sharding=whole)
        indices = bind(p.sharding_constraint_p, indices, sharding=whole)
        return bind(p.sharding_constraint_p, _take_along_flat(x, indices, axis),
                    sharding=typed)
    return _take_along_flat(x, indices, axis)


def _take_along_flat(x, indices, axis):
    shape = aval_of(x).shape
    size = int(np.prod(shape, dtype=np.int64))
    stride = int(np.prod(shape[axis + 1:], dtype=np.int64))
    position = bind(p.iota_p, dtype=dtypes.int_, shape=shape, dimension=axis)
    flat_index = bind(p.reshape_p, bind(p.iota_p, dtype=dtypes.int_, shape=(size,), dimension=0),
                      new_sizes=shape)
    offset = bind(p.sub_p, indices, position)
    moved = _mul(offset, np.asarray(stride, aval_of(offset).dtype)[()])
    source = bind(p.add_p, flat_index, moved)
    flat = bind(p.reshape_p, x, new_sizes=(size,))
    return bind(p.gather_p, flat, source, axis=0)


def _sort_jvp(primals, tangents, *, dimension, num_keys):
    aval = aval_of(primals[0])
    order = bind(p.iota_p, dtype=dtypes.int_, shape=aval.shape, dimension=dimension)
    if aval.type_sharding is not None:
        # the positions sort with the keys, so they are laid out as the keys are
        order = bind(p.sharding_constraint_p, order, sharding=named_sharding(aval))
    *outs, permutation = bind(p.sort_p, *primals, order, dimension=dimension,
                              num_keys=num_keys)
    out_tangents = [None if t is None else take_along(t, permutation, dimension)
                    for t in tangents]
    return outs, out_tangents


jvp_rules[p.sort_p] = _sort_jvp
