"""``shardc.lax``'s elementwise functions beyond the arithmetic: the special functions
(``erf``, ``lgamma``, ``digamma``, ``polygamma``, ... bind their own primitives), ``clamp``,
powers, rounding, and the bit-level ``bitcast_convert_type`` and ``reduce_precision``."""
from __future__ import annotations

import enum
import operator

import numpy as np

from compiler.custom_ad import custom_jvp
from compiler.tracing import bind
from ir import dtypes as _dt
from ir import primitives as p
import shardc.numpy as jnp
from shardc.numpy._core import weakly_typed_like
from shardc.lax._ops import (check_operand_dtypes, check_operand_ranks, check_operand_values,
                            check_unary_dtype, lax_binary, same_dtypes_error,
                            with_accuracy)
from shardc.numpy._core import dtype_of as _operand_dtype
from shardc.lax._shapes import array_operand, weak_as_operands

__all__ = [
    "erf", "erfc", "erf_inv", "lgamma", "digamma", "polygamma", "igamma", "igammac",
    "igamma_grad_a", "random_gamma_grad", "zeta", "bessel_i0e", "bessel_i1e", "clamp",
    "square", "integer_pow", "reciprocal", "atan2", "exp2", "expm1", "log1p", "sign", "tan", "cbrt", "ceil", "floor",
    "is_finite", "pow", "round", "bitcast_convert_type", "reduce_precision", "real", "imag",
    "conj", "complex", "fft", "FftType",
]


class FftType(enum.IntEnum):
    """lax.fft's transforms."""
    FFT = 0
    IFFT = 1
    RFFT = 2
    IRFFT = 3


def fft(x, fft_type, fft_lengths):
    """The discrete Fourier transform of the last ``len(fft_lengths)`` dimensions:
    ``fft_type`` an ``FftType`` or its name in any case ('fft', 'ifft', 'rfft', 'irfft')."""
    from shardc.numpy.fft import transform
    if isinstance(fft_type, FftType):
        name = fft_type.name
    elif isinstance(fft_type, str) and fft_type.upper() in FftType.__members__:
        name = fft_type.upper()
    else:
        raise TypeError(f"Unknown FFT type value '{fft_type}'")
    return transform(x, name, tuple(fft_lengths))


def real(x):
    """The real part of a complex ``x`` (a real ``x`` is JAX's TypeError)."""
    return bind(p.real_p, array_operand(x))


def imag(x):
    """The imaginary part of a complex ``x``."""
    return bind(p.imag_p, array_operand(x))


def conj(x):
    """The complex conjugate; of a real ``x``, ``x`` as a complex array (as lax's)."""
    return bind(p.conj_p, array_operand(x))


def complex(x, y):
    """``x + i y`` from real arrays of one dtype (lax does not promote: a Python float is a
    float32, a Python int refused)."""
    check_operand_ranks("complex", x, y)
    for i, v in enumerate((x, y)):
        if _operand_dtype(v) not in (np.float32, np.float64):
            raise TypeError(f"complex does not accept dtype {_operand_dtype(v).name} at position "
                            f"{i}. Accepted dtypes at position {i} are subtypes of float32, "
                            f"float64.")
    check_operand_dtypes("complex", (_dt.FLOAT,), x, y)
    x, y = jnp.asarray(x), jnp.asarray(y)
    if jnp.shape(x) != jnp.shape(y):
        x, y = jnp.broadcast_arrays(x, y)
    return bind(p.complex_p, x, y)


def _special(prim, x):
    x = array_operand(x)
    if not _dt.is_inexact(x.dtype):
        raise TypeError(f"lax.{prim.name} requires a floating-point operand, got {x.dtype}")
    return bind(prim, x)


def erf(x):
    """The error function ``2/sqrt(pi) * integral_0^x exp(-t^2) dt``."""
    return _special(p.erf_p, x)


def erfc(x):
    """``1 - erf(x)``, accurate where ``erf(x)`` is near 1."""
    return _special(p.erfc_p, x)


def erf_inv(x):
    """The inverse of ``erf`` on ``(-1, 1)`` (``+-inf`` at ``+-1``, nan outside)."""
    return _special(p.erf_inv_p, x)


def lgamma(x):
    """``log|Gamma(x)|`` (``inf`` at the poles ``0, -1, -2, ...``)."""
    return _special(p.lgamma_p, x)


def digamma(x):
    """``d/dx log Gamma(x)`` (nan at the poles)."""
    return _special(p.digamma_p, x)


def polygamma(m, x):
    """The ``m``-th derivative of ``digamma`` at ``x`` (``m`` a non-negative integer, as an
    array of ``x``'s dtype or a Python int); differentiable in ``x``."""
    x = array_operand(x)
    if not _dt.is_inexact(x.dtype):
        raise TypeError(f"lax.polygamma requires a floating-point x, got {x.dtype}")
    order = jnp.astype(array_operand(m), x.dtype)
    if jnp.shape(order) != x.shape:
        order = jnp.broadcast_to(order, x.shape)
    return weakly_typed_like(bind(p.polygamma_p, order, x), m, x)


def _binary_special(prim, name, a, x):
    """A two-operand special function of floating operands of one dtype, broadcast to one
    shape (weakly typed when both operands are)."""
    given = (a, x)
    check_operand_dtypes(name, (_dt.FLOAT,), a, x)      # lax does not promote (JAX's)
    a, x = array_operand(a), array_operand(x)
    shape = jnp.broadcast_shapes(a.shape, x.shape)
    return weakly_typed_like(bind(prim, jnp.broadcast_to(a, shape), jnp.broadcast_to(x, shape)),
                             *given)


def igamma(a, x):
    """The regularized lower incomplete gamma function ``P(a, x)``."""
    return _binary_special(p.igamma_p, "igamma", a, x)


def betainc(a, b, x):
    """The regularized incomplete beta function ``I_x(a, b)`` of floating operands of one
    dtype (lax does not promote), as ``jax.scipy.special.betainc`` computes it."""
    check_operand_dtypes("regularized_incomplete_beta", (_dt.FLOAT,), a, b, x)
    from shardc.scipy.special import betainc as scipy_betainc
    return scipy_betainc(a, b, x)


def igammac(a, x):
    """The regularized upper incomplete gamma function ``Q(a, x) = 1 - P(a, x)``."""
    return _binary_special(p.igammac_p, "igammac", a, x)


def igamma_grad_a(a, x):
    """``d igamma(a, x) / da``."""
    return _binary_special(p.igamma_grad_a_p, "igamma_grad_a", a, x)


def random_gamma_grad(a, x):
    """The derivative in ``a`` of a Gamma(``a``) sample ``x`` that keeps its quantile
    (``random.gamma``'s derivative), computed as JAX's: the series or continued fraction
    of the incomplete gamma function with its derivative, the operands broadcast and
    float16/bfloat16 computed in float32."""
    from shardc.random._distributions import gamma_sample_grad
    a, x = jnp.asarray(a), jnp.asarray(x)
    shape = jnp.broadcast_shapes(a.shape, x.shape)
    a, x = jnp.broadcast_to(a, shape), jnp.broadcast_to(x, shape)
    dtype = a.dtype
    if dtype in (np.float16, _dt.bfloat16):
        a, x = jnp.astype(a, np.float32), jnp.astype(x, np.float32)
    return jnp.astype(gamma_sample_grad(a, jnp.astype(x, a.dtype)), dtype)


def zeta(x, q):
    """The Hurwitz zeta function ``sum_k (q + k)^-x`` (``x > 1``)."""
    return _binary_special(p.zeta_p, "zeta", x, q)


def bessel_i0e(x):
    """``exp(-|x|) I0(x)``, the exponentially scaled modified Bessel function of order 0."""
    return _special(p.bessel_i0e_p, x)


def bessel_i1e(x):
    """``exp(-|x|) I1(x)``, the exponentially scaled modified Bessel function of order 1."""
    return _special(p.bessel_i1e_p, x)


@weak_as_operands(0, 1, 2)
def clamp(min, x, max):
    """``x`` limited to ``[min, max]`` (``min`` and ``max`` are scalars or ``x``'s shape)."""
    x = array_operand(x)
    for name, bound in (("min", min), ("max", max)):
        shape = jnp.shape(bound)
        if shape not in ((), x.shape):
            raise TypeError(f"clamp: {name} must be a scalar or have x's shape {x.shape}, "
                            f"got {shape}")
    dtypes = [_operand_dtype(min), x.dtype, _operand_dtype(max)]
    if any(d != x.dtype for d in dtypes):
        raise same_dtypes_error("clamp", dtypes)
    lo, hi = jnp.asarray(min, x.dtype), jnp.asarray(max, x.dtype)
    if not _dt.is_inexact(x.dtype):
        return _clamp_values(lo, x, hi)
    return _clamp(lo, x, hi)


def _clamp_values(lo, x, hi):
    return jnp.minimum(jnp.maximum(x, lo), hi)


@custom_jvp
def _clamp(lo, x, hi):
    return _clamp_values(lo, x, hi)


@_clamp.defjvp
def _clamp_jvp(primals, tangents):
    """JAX's: the operand's tangent strictly inside ``(min, max)``, a bound's where it is the
    result (``min`` above the operand and below ``max``; ``max`` below the operand); ties
    pass none."""
    (lo, x, hi), (t_lo, t_x, t_hi) = primals, tangents
    out = _clamp(lo, x, hi)
    return out, (jnp.where((x > lo) & (x < hi), t_x, 0)
                 + jnp.where((lo > x) & (lo < hi), t_lo, 0)
                 + jnp.where(hi < x, t_hi, 0))


def square(x):
    return jnp.multiply(x, x)


def integer_pow(x, y):
    """``x ** y`` for a Python int ``y``, by repeated squaring (JAX's ``integer_pow``): the
    operand's dtype, weakly typed where it is."""
    return weakly_typed_like(bind(p.integer_pow_p, array_operand(x), y=operator.index(y)), x)


def reciprocal(x):
    """``1 / x`` as JAX's: ``integer_pow(x, -1)`` (integers refused)."""
    return integer_pow(x, -1)


exp2, log1p, expm1, tan = (with_accuracy(fn, name) for fn, name in (
    (jnp.exp2, "exp2"), (jnp.log1p, "log1p"), (jnp.expm1, "expm1"), (jnp.tan, "tan")))
sign = jnp.sign
atan2 = lax_binary("atan2", (_dt.FLOAT, _dt.COMPLEX), jnp.arctan2,
                   "The angle of ``(x, y)``, of operands of one inexact dtype.")
def _floating_only(fn, name: str):
    """``fn`` of one operand of a floating dtype only (JAX's lax checks the kind)."""
    def op(x):
        check_operand_values(name, x)
        check_unary_dtype(name, (_dt.FLOAT,), x)
        return fn(x)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"Elementwise {name} (JAX's lax.{name}) of a floating operand."
    return op


floor, ceil, is_finite = (_floating_only(fn, name) for fn, name in (    # rem: shardc.lax
    (jnp.floor, "floor"), (jnp.ceil, "ceil"), (jnp.isfinite, "is_finite")))
cbrt = with_accuracy(jnp.cbrt, "cbrt", accepted=(_dt.FLOAT,))


def pow(x, y):
    """``x ** y``: ``x`` inexact, ``y`` an integer (any width) or of ``x``'s dtype, as JAX's
    ``lax.pow`` (it does not promote)."""
    check_operand_ranks("pow", x, y)
    check_operand_dtypes("pow", (_dt.FLOAT, _dt.COMPLEX), x, same=False)
    check_operand_dtypes("pow", (_dt.INT, _dt.FLOAT, _dt.COMPLEX), y, same=False)
    x_dtype, y_dtype = _operand_dtype(x), _operand_dtype(y)
    if not _dt.is_int(y_dtype) and x_dtype != y_dtype:
        raise TypeError("the first argument to pow must have an inexact dtype (float or "
                        "complex), and the second argument must have an inexact or integer "
                        "dtype, and two inexact dtypes must match, but got "
                        f"{x_dtype} and {y_dtype} respectively.")
    return jnp.power(x, y)


def round(x, rounding_method=0):
    """Round to the nearest integer: halves away from zero (``rounding_method=0``, the
    default) or to even (``1``)."""
    x = array_operand(x)
    if not _dt.is_float(x.dtype):
        raise TypeError(f"round does not accept dtype {np.dtype(x.dtype).name}. Accepted "
                        "dtypes are subtypes of floating.")
    if int(rounding_method) == 1:
        return jnp.round(x)
    return bind(p.round_p, x)


# --- bits ------------------------------------------------------------------------------------

def bitcast_convert_type(operand, new_dtype):
    """``operand``'s bits read as ``new_dtype``: a narrower dtype adds a last dimension of the
    width ratio, a wider one needs that last dimension and removes it.

    >>> lax.bitcast_convert_type(jnp.float32(1.0), jnp.uint32)      # 0x3f800000
    """
    operand = array_operand(operand)
    old, new = np.dtype(operand.dtype), _dt.canonicalize(new_dtype)
    if old != new and any(_dt.kind(d) in (_dt.BOOL, _dt.COMPLEX) for d in (old, new)):
        raise TypeError("lax.bitcast_convert_type does not support bool or complex values "
                        "unless the operand and destination types match. Got operand "
                        f"dtype={old}, new_dtype={new!r}. Consider using the arr.view() "
                        "method instead.")
    return bind(p.bitcast_convert_type_p, operand, new_dtype=new)


def reduce_precision(operand, exponent_bits, mantissa_bits):
    """``operand`` rounded to a float format with ``exponent_bits`` and ``mantissa_bits`` and
    back (round to nearest even; too large gives inf, below the format's smallest normal gives
    a signed zero, NaN stays NaN), as XLA's ReducePrecision. As in JAX it is linear to
    autodiff: tangents and cotangents are rounded the same way.

    >>> lax.reduce_precision(x, 8, 7)       # x rounded to bfloat16's precision
    """
    operand = array_operand(operand)
    if not _dt.is_inexact(operand.dtype):
        raise TypeError(f"reduce_precision requires a floating-point operand, got "
                        f"{operand.dtype}")
    exponent_bits, mantissa_bits = int(exponent_bits), int(mantissa_bits)
    if exponent_bits < 1:
        raise ValueError(f"reduce_precision: exponent_bits must be positive; got "
                         f"{exponent_bits}")
    if mantissa_bits < 0:
        raise ValueError(f"reduce_precision: mantissa_bits must be non-negative; got "
                         f"{mantissa_bits}")
    return bind(p.reduce_precision_p, operand, exponent_bits=exponent_bits,
                mantissa_bits=mantissa_bits)
