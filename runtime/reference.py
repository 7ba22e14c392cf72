"""The reference backend: numpy implementations of every primitive, and an interpreter that
runs per-device programs in lockstep, meeting at each collective.

Each device program runs as a generator over its equations; at a communication node it yields
the request and waits. When every device has reached a node, the scheduler applies the
collective's reference over the blocks of each device group and resumes them.
"""
from __future__ import annotations

import contextlib
import functools
import io
import math
import sys
import traceback

import numpy as np

from ir import dtypes
from ir import primitives as prims
from ir.interpreter import Interpreter
from ir.core import Program
from ir.module import runs_shard_map
from ir.primitives import RuleTable
from ir.transfer_guard import JaxRuntimeError
from ir.sharding_rules import check_divisible, mesh_auto, mesh_explicit, spec_from_user
from ir.specialise import specialise
from ir.sharding import (Mesh, NamedSharding, check_divides, check_rank, dividing_sharding,
                         normal_spec, replication_mismatch, runtime_replication_error)
from runtime import linalg, linalg_reductions, placement, scans, special
from runtime.collectives import group_rules, node_operands, operand_types
from runtime.array import Array, SingleDeviceSharding, canonical_array, detached
from runtime.devices import Device, default_device

impl_rules = RuleTable("implementation")


def _one(f):
    """Wrap a numpy function of arrays returning one array as a rule returning a list."""
    @functools.wraps(f)
    def rule(*args, **params):
        return [np.asarray(f(*args, **params))]
    return rule


def _rsqrt(x):
    """``1 / sqrt(x)``; a float narrower than float32 (bfloat16, float16, float8s) in float32
    and rounded once, as XLA computes it: a square root rounded to the narrow dtype and then
    divided rounds twice, one unit in the last place off on about a quarter of inputs."""
    x = np.asarray(x)
    if dtypes.is_float(x.dtype) and x.dtype.itemsize < 4:
        return (1 / np.sqrt(x.astype(np.float32))).astype(x.dtype)
    return (1 / np.sqrt(x)).astype(x.dtype)


# float32 exp is computed in float64 and rounded once: numpy's own float32 exp is one unit in
# the last place off on about 40% of inputs (XLA's, which JAX's results come from, on about
# 10%), and a finite-difference check of a gradient magnifies that unit 1/eps times. Large
# arrays are converted in numpy's buffered chunks (2.6x numpy's float32 exp, not 9x).
_WIDE_EXP_CHUNKED = 1 << 14


def _exp(x):
    x = np.asarray(x)
    if x.dtype != np.float32:
        return np.exp(x)
    if x.size <= _WIDE_EXP_CHUNKED:
        return np.exp(x.astype(np.float64)).astype(np.float32)
    out = np.empty(x.shape, np.float32)
    np.exp(x, out=out, dtype=np.float64, casting="unsafe")
    return out


def _logistic(x):
    return (1 / (1 + _exp(-x))).astype(x.dtype)


def _round(x):
    """lax.round: half away from zero, the sign kept (round(-0.3) is -0.0). The fraction
    ``x - trunc(x)`` is exact, where ``floor(|x| + 0.5)`` rounds the sum itself first
    (0.49999997 gave 1, 8388609 gave 8388610)."""
    x = np.asarray(x)
    whole = np.trunc(x)
    away = np.abs(x - whole) >= 0.5
    rounded = np.where(away, whole + np.copysign(np.ones((), x.dtype), x), whole)
    return np.copysign(rounded, x).astype(x.dtype)


def _sign(x):
    """numpy's sign, but a zero keeps its own sign (``sign(-0.0)`` is -0.0, as XLA's)."""
    signs = np.sign(x).astype(x.dtype)
    return np.where(x == 0, x, signs) if dtypes.is_float(x.dtype) else signs


def _not(x):
    return np.logical_not(x) if x.dtype == np.bool_ else np.invert(x)


def _unsigned_view(x):
    """``x``'s bits as the unsigned integer of its width (numpy's bit functions read values)."""
    x = np.asarray(x)
    return x.view(np.dtype(f"u{x.dtype.itemsize}"))


def _population_count(x):
    # two's complement bits, as lax.population_count (np.bitwise_count reads |x|)
    return np.bitwise_count(_unsigned_view(x)).astype(x.dtype)


def _conj(x):
    return np.conj(x).astype(dtypes.complex_dtype(np.asarray(x).dtype))


def _complex(re, im):
    """The parts placed as they are (``re + 1j * im`` would turn ``(1, inf)`` into NaN and
    lose the sign of a zero real part)."""
    re, im = np.asarray(re), np.asarray(im)
    out = np.empty(np.broadcast_shapes(re.shape, im.shape), dtypes.complex_dtype(re.dtype))
    out.real = re
    out.imag = im
    return out


def _log1p(x):
    """``log(1 + x)``; for complex ``x`` near 0, from ``|1 + x|**2 - 1 = x.re (2 + x.re) +
    x.im**2`` in double precision (numpy forms ``1 + x`` first and loses the digits)."""
    x = np.asarray(x)
    if x.dtype.kind != "c":
        return np.log1p(x)
    z = x.astype(np.complex128)
    re, im = z.real, z.imag
    near = _complex(0.5 * np.log1p(re * (2 + re) + im * im), np.arctan2(im, 1 + re))
    return np.where(np.abs(z) < 0.5, near, np.log1p(z)).astype(x.dtype)


_UNARY_IMPLS = {
    prims.real_p: np.real, prims.imag_p: np.imag, prims.conj_p: _conj,
    prims.neg_p: np.negative, prims.sin_p: np.sin, prims.cos_p: np.cos, prims.tan_p: np.tan,
    prims.tanh_p: np.tanh, prims.exp_p: _exp, prims.log_p: np.log, prims.log1p_p: _log1p,
    prims.expm1_p: np.expm1, prims.sqrt_p: np.sqrt, prims.rsqrt_p: _rsqrt, prims.abs_p: np.abs,
    prims.sign_p: _sign, prims.floor_p: np.floor, prims.ceil_p: np.ceil, prims.round_p: _round,
    prims.logistic_p: _logistic, prims.not_p: _not, prims.is_finite_p: np.isfinite,
    prims.asin_p: np.arcsin, prims.acos_p: np.arccos, prims.atan_p: np.arctan,
    prims.sinh_p: np.sinh, prims.cosh_p: np.cosh, prims.asinh_p: np.arcsinh,
    prims.acosh_p: np.arccosh, prims.atanh_p: np.arctanh, prims.cbrt_p: np.cbrt,
    prims.exp2_p: np.exp2, prims.population_count_p: _population_count,
    prims.signbit_p: np.signbit, prims.erf_p: special.erf, prims.erfc_p: special.erfc,
    prims.erf_inv_p: special.erf_inv, prims.lgamma_p: special.lgamma,
    prims.digamma_p: special.digamma, prims.bessel_i0e_p: special.bessel_i0e,
    prims.bessel_i1e_p: special.bessel_i1e,
}


def _div(x, y):
    dtype = np.result_type(x, y)
    if dtypes.is_unsigned(dtype):
        # unsigned: numpy's floor division is XLA's truncation; x / 0 has all bits set
        safe = np.where(y == 0, 1, y).astype(dtype)
        return np.where(y == 0, np.iinfo(dtype).max, np.asarray(x, dtype) // safe).astype(dtype)
    if dtypes.is_int(dtype):
        # lax.div on integers rounds towards zero, as XLA: x / 0 is -1 (all bits set),
        # INT_MIN / -1 wraps to INT_MIN. int64 holds every quotient of 32-bit operands.
        wide_x, wide_y = np.asarray(x, np.int64), np.where(y == 0, 1, y).astype(np.int64)
        q = wide_x // wide_y
        q = q + ((q * wide_y != wide_x) & ((wide_x < 0) != (wide_y < 0)))
        return np.where(y == 0, np.int64(-1), q).astype(dtype)
    if np.ndim(y) == 0 and np.ndim(x) and dtypes.divides_by_reciprocal(dtype):
        # divided by a value broadcast from rank 0: by its reciprocal, as XLA does (see
        # compiler.passes.reciprocal; a lowered program has it written so already)
        return np.multiply(x, dtype.type(1) / np.asarray(y, dtype)[()])
    return np.divide(x, y)


def _rem(x, y):
    if dtypes.is_int(np.result_type(x, y)):
        # XLA: x % 0 is x
        return np.where(y == 0, x, np.fmod(x, np.where(y == 0, 1, y)))
    return np.fmod(x, y)


def _pow(x, y):
    out = np.power(x, y)
    if np.iscomplexobj(out):
        # XLA: a zero base to a power with an imaginary part is nan (numpy gives 0 where
        # the real part is positive)
        nan = np.asarray(complex(np.nan, np.nan), out.dtype)
        out = np.where((np.asarray(x) == 0) & (np.imag(y) != 0), nan, out)
    return out


def _shift_in_range(x, y):
    """Shift amounts in ``[0, bits)``, and where they are; XLA reads others as too large."""
    bits = np.asarray(x).dtype.itemsize * 8
    y = np.asarray(y)
    valid = (y >= 0) & (y < bits)
    return np.where(valid, y, 0).astype(np.asarray(x).dtype), valid


def _shift_left(x, y):
    amount, valid = _shift_in_range(x, y)
    return np.where(valid, np.left_shift(x, amount), 0)


def _shift_right_arithmetic(x, y):
    """Shifts in copies of the top bit, of unsigned integers too (as XLA's)."""
    x = np.asarray(x)
    signed = x.view(np.dtype(f"int{x.dtype.itemsize * 8}")) if x.dtype.kind == "u" else x
    amount, valid = _shift_in_range(signed, y)
    out = np.where(valid, np.right_shift(signed, amount), np.where(signed < 0, -1, 0))
    return out.astype(signed.dtype, copy=False).view(x.dtype) if x.dtype.kind == "u" else out


def _shift_right_logical(x, y):
    amount, valid = _shift_in_range(x, y)
    x = np.asarray(x)
    unsigned = _unsigned_view(x) >> amount.astype(_unsigned_view(x).dtype)
    return np.where(valid, unsigned.view(x.dtype), 0)


_BINARY_IMPLS = {
    prims.complex_p: _complex,
    prims.add_p: np.add, prims.sub_p: np.subtract, prims.mul_p: np.multiply,
    prims.div_p: _div, prims.rem_p: _rem, prims.pow_p: _pow, prims.max_p: np.maximum,
    prims.min_p: np.minimum, prims.atan2_p: np.arctan2, prims.and_p: np.bitwise_and,
    prims.or_p: np.bitwise_or, prims.xor_p: np.bitwise_xor,
    prims.eq_p: np.equal, prims.ne_p: np.not_equal, prims.lt_p: np.less,
    prims.le_p: np.less_equal, prims.gt_p: np.greater, prims.ge_p: np.greater_equal,
    prims.nextafter_p: np.nextafter, prims.polygamma_p: special.polygamma,
    prims.igamma_p: special.igamma, prims.igammac_p: special.igammac,
    prims.igamma_grad_a_p: special.igamma_grad_a, prims.zeta_p: special.zeta,
    prims.zeta_grad_s_p: special.zeta_grad_s,
    prims.shift_left_p: _shift_left,
    prims.shift_right_arithmetic_p: _shift_right_arithmetic,
    prims.shift_right_logical_p: _shift_right_logical,
}


def elementwise_dtype(got, args) -> np.dtype:
    """The dtype of an elementwise result numpy computed as ``got`` from ``args``: the
    operands' own (numpy may widen), real where the result is the real part of complex
    operands (abs, real, imag), complex where real operands make a complex one."""
    got = np.dtype(got)
    if got == np.bool_:
        return got
    want = np.result_type(*args)
    if np.issubdtype(want, np.complexfloating) and not np.issubdtype(got, np.complexfloating):
        return dtypes.real_dtype(want)
    if np.issubdtype(got, np.complexfloating) and not np.issubdtype(want, np.complexfloating):
        return dtypes.complex_dtype(want)
    return want


def _elementwise(fn, *args):
    with np.errstate(all="ignore"):
        result = np.asarray(fn(*args))
    got = result.dtype
    key = (got,) + tuple(a.dtype if isinstance(a, np.ndarray) else type(a) for a in args)
    want = _RESULT_DTYPES.get(key)
    if want is None:
        want = elementwise_dtype(got, [np.asarray(a) for a in args])
        if all(isinstance(a, np.ndarray) for a in args):   # python scalars: by value
            _RESULT_DTYPES[key] = want
    if got != want:
        result = result.astype(want)
    return [result]


# an elementwise result's dtype, by the dtype numpy gave it and its operands' dtypes
_RESULT_DTYPES: dict = {}


for _p, _f in _UNARY_IMPLS.items():
    impl_rules[_p] = functools.partial(_elementwise, _f)
for _p, _f in _BINARY_IMPLS.items():
    impl_rules[_p] = functools.partial(_elementwise, _f)


def _select_n(pred, *cases):
    if pred.dtype == np.bool_:
        return [np.asarray(np.where(pred, cases[1] if len(cases) > 1 else cases[0], cases[0]))]
    # an index out of range takes the nearest case (XLA clamps it, as JAX's tests expect)
    return [np.asarray(np.choose(pred, np.broadcast_arrays(*cases), mode="clip"))]


def convert_element(x, new_dtype) -> np.ndarray:
    """``x`` as ``new_dtype`` the way JAX converts: float to int saturates, complex drops the
    imaginary part.

    numpy's float-to-int cast is undefined out of range (it wraps or gives the minimum); JAX
    truncates toward zero, clips to the integer range and sends NaN to 0:
    ``[nan, -3.7, 300.5, inf] -> uint8 [0, 0, 255, 255]``.
    """
    x, new_dtype = np.asarray(x), np.dtype(new_dtype)
    if x.dtype.kind == "c" and new_dtype.kind != "c" and new_dtype != np.bool_:
        x = x.real
    if new_dtype.kind in "iu" and (x.dtype.kind == "f" or x.dtype.kind == "V"
                                   and x.dtype in dtypes.ML_FLOATS):
        return _float_to_int(x, new_dtype)      # (bfloat16 and the small floats too)
    with np.errstate(over="ignore"):     # a float too large for the narrower type is inf
        return x.astype(new_dtype)


def _float_to_int(x: np.ndarray, new_dtype: np.dtype) -> np.ndarray:
    info = np.iinfo(new_dtype)
    wide = x.astype(np.float64)
    # Bounds that float64 holds exactly: the range's minimum and one past its maximum.
    too_big = wide >= 2.0 ** (info.bits - (info.min < 0))
    too_small = wide < info.min
    out = np.where(too_big | too_small | np.isnan(wide), 0, wide).astype(new_dtype)
    out[too_big] = info.max
    out[too_small] = info.min
    return out


def _convert(x, *, new_dtype):
    return [convert_element(x, new_dtype)]


def _broadcast_in_dim(x, *, shape, broadcast_dimensions):
    x = np.asarray(x)
    expanded = [1] * len(shape)
    for d, od in zip(x.shape, broadcast_dimensions):
        expanded[od] = d
    return [np.broadcast_to(x.reshape(expanded), shape)]


def _dynamic_slice(x, *starts, slice_sizes):
    index = []
    for d, (s, size) in enumerate(zip(starts, slice_sizes)):
        s = int(np.clip(int(s), 0, x.shape[d] - size))
        index.append(slice(s, s + size))
    return [x[tuple(index)]]


def _dynamic_update_slice(x, update, *starts):
    out = np.array(x, copy=True)
    index = []
    for d, s in enumerate(starts):
        s = int(np.clip(int(s), 0, x.shape[d] - update.shape[d]))
        index.append(slice(s, s + update.shape[d]))
    out[tuple(index)] = update
    return [out]


def _gather(x, indices, *, axis):
    size = x.shape[axis]
    idx = np.where(indices < 0, indices + size, indices)
    return [np.take(x, np.clip(idx, 0, size - 1), axis=axis)]


def _scatter(x, indices, updates, *, axis, mode):
    out = np.array(x, copy=True)
    size = x.shape[axis]
    idx = np.where(indices < 0, indices + size, indices)
    keep = (idx >= 0) & (idx < size)
    moved = np.moveaxis(out, axis, 0)
    # updates hold the index dims at axis..axis+idx.ndim; bring them to the front
    upd = np.moveaxis(updates, tuple(range(axis, axis + idx.ndim)), tuple(range(idx.ndim)))
    flat_idx = idx[keep]
    flat_upd = upd[keep] if np.ndim(upd) else upd
    if mode == "add":
        np.add.at(moved, flat_idx, flat_upd)
    elif mode == "mul":
        np.multiply.at(moved, flat_idx, flat_upd)
    elif mode == "min":
        np.minimum.at(moved, flat_idx, flat_upd)
    elif mode == "max":
        np.maximum.at(moved, flat_idx, flat_upd)
    else:
        moved[flat_idx] = flat_upd
    return [out]


def _iota(*, dtype, shape, dimension):
    ramp = np.arange(shape[dimension], dtype=dtype)
    view = [1] * len(shape)
    view[dimension] = shape[dimension]
    return [np.broadcast_to(ramp.reshape(view), shape)]


def _pad(x, value, *, padding_config):
    lows = [max(lo, 0) for lo, _, _ in padding_config]
    shape = [lo + d + hi + max(0, d - 1) * interior
             for d, (lo, hi, interior) in zip(x.shape, padding_config)]
    full_shape = [max(lo, 0) + d + max(hi, 0) + max(0, d - 1) * interior
                  for d, (lo, hi, interior) in zip(x.shape, padding_config)]
    out = np.full(full_shape, value, dtype=x.dtype)
    index = tuple(slice(lo, lo + (d - 1) * (interior + 1) + 1 if d else lo, interior + 1)
                  for lo, d, (_, _, interior) in zip(lows, x.shape, padding_config))
    out[index] = x
    crop = tuple(slice(-min(lo, 0), -min(lo, 0) + s)
                 for (lo, _, _), s in zip(padding_config, shape))
    return [out[crop]]


impl_rules[prims.select_n_p] = _select_n
impl_rules[prims.convert_element_type_p] = _convert


def _bitcast(x, *, new_dtype):
    x = np.ascontiguousarray(x).reshape(np.shape(x))      # (ascontiguousarray makes 0-d 1-d)
    new = np.dtype(new_dtype)
    old_bits, new_bits = dtypes.bit_width(x.dtype), dtypes.bit_width(new)
    if min(old_bits, new_bits) < 8:
        return [_bitcast_sub_byte(x, new, old_bits, new_bits)]
    if x.dtype.itemsize < new.itemsize:
        return [x.view(new).reshape(x.shape[:-1])]
    # (viewed flat: numpy views a 0-d array only as a dtype of its width)
    return [x.reshape(-1).view(new).reshape(x.shape + ((x.dtype.itemsize // new.itemsize,)
                                                       if x.dtype.itemsize > new.itemsize
                                                       else ()))]


def _bitcast_sub_byte(x, new, old_bits, new_bits):
    """``bitcast_convert_type`` where a side is narrower than a byte (int4, uint2, float4, ...):
    through each element's bit pattern as an unsigned integer (numpy keeps a narrow type's code
    in the low bits of its byte); the narrower side's elements are the wider's bits from the
    least significant up, as XLA's little-endian packing."""
    if old_bits < 8:
        codes = x.view(np.uint8).astype(np.uint64) & np.uint64((1 << old_bits) - 1)
    else:
        codes = x.reshape(-1).view(f"uint{old_bits}").astype(np.uint64).reshape(x.shape)
    if old_bits < new_bits:             # the last dimension's parts, least significant first
        shifts = np.arange(new_bits // old_bits, dtype=np.uint64) * np.uint64(old_bits)
        codes = np.bitwise_or.reduce(codes << shifts, axis=-1) if codes.size else \
            np.zeros(codes.shape[:-1], np.uint64)
    elif old_bits > new_bits:
        shifts = np.arange(old_bits // new_bits, dtype=np.uint64) * np.uint64(new_bits)
        codes = (codes[..., None] >> shifts) & np.uint64((1 << new_bits) - 1)
    if new_bits < 8:
        return codes.astype(np.uint8).view(new)
    return codes.astype(f"uint{new_bits}").view(new)


impl_rules[prims.bitcast_convert_type_p] = _bitcast


@functools.lru_cache(maxsize=None)
def integer_pow_kernel(y: int):
    """The elementwise kernel of ``integer_pow`` for the exponent ``y`` (one function object
    per exponent): XLA's repeated squaring, then one over the product for a negative ``y``,
    so ``x ** 3`` is ``x * (x * x)`` and ``x ** -2`` is ``1 / (x * x)``, rounded as JAX's."""
    def power(x):
        x = np.asarray(x)
        if y == 0:
            return np.ones_like(x)
        n, acc, base = abs(y), None, x
        with np.errstate(all="ignore"):      # integers wrap, floats overflow to inf
            while n:
                if n & 1:
                    acc = base if acc is None else np.multiply(acc, base)
                n >>= 1
                if n:
                    base = np.multiply(base, base)
            if y < 0:
                return np.divide(x.dtype.type(1), acc)
        return acc.copy() if acc is x else acc
    return power


def _integer_pow(x, *, y):
    return [integer_pow_kernel(y)(x)]


impl_rules[prims.integer_pow_p] = _integer_pow


def _reduce_precision(x, *, exponent_bits, mantissa_bits):
    return [special.reduce_precision_kernel(exponent_bits, mantissa_bits)(x)]


impl_rules[prims.reduce_precision_p] = _reduce_precision
impl_rules[prims.broadcast_in_dim_p] = _broadcast_in_dim
impl_rules[prims.reshape_p] = _one(lambda x, *, new_sizes, out_sharding=None:
                                   np.reshape(x, new_sizes))
impl_rules[prims.transpose_p] = _one(lambda x, *, permutation: np.transpose(x, permutation))
impl_rules[prims.squeeze_p] = _one(lambda x, *, dimensions: np.squeeze(x, tuple(dimensions)))
impl_rules[prims.concatenate_p] = _one(lambda *xs, dimension: np.concatenate(xs, dimension))
impl_rules[prims.slice_p] = _one(
    lambda x, *, start_indices, limit_indices, strides: x[tuple(
        slice(lo, hi, st) for lo, hi, st in
        zip(start_indices, limit_indices, strides or (1,) * x.ndim))])
impl_rules[prims.dynamic_slice_p] = _dynamic_slice
impl_rules[prims.dynamic_update_slice_p] = _dynamic_update_slice
impl_rules[prims.gather_p] = _gather
impl_rules[prims.scatter_p] = _scatter
impl_rules[prims.iota_p] = _iota
impl_rules[prims.rev_p] = _one(lambda x, *, dimensions: np.flip(x, tuple(dimensions)))
impl_rules[prims.pad_p] = _pad


def _reduction(fn, x, *, axes):
    if not x.flags.c_contiguous and adds_in_memory_order(fn, x.dtype):
        x = np.ascontiguousarray(x)
    result = np.asarray(fn(x, axis=tuple(axes)))
    return [result.astype(x.dtype, copy=False)]


def adds_in_memory_order(fn, dtype) -> bool:
    """Whether numpy's reduction ``fn`` rounds by the operand's memory layout: a float sum or
    product adds in memory order, and a block's layout depends on how it was made (a view of
    its global value here, a slice of a stack of blocks on the fast backend). Every backend
    reduces such an operand C-contiguous, so all add in one order."""
    return fn in (np.sum, np.prod) and np.dtype(dtype).kind in "fc"


impl_rules[prims.reduce_sum_p] = functools.partial(_reduction, np.sum)
impl_rules[prims.reduce_max_p] = functools.partial(_reduction, np.max)
impl_rules[prims.reduce_min_p] = functools.partial(_reduction, np.min)
impl_rules[prims.reduce_prod_p] = functools.partial(_reduction, np.prod)
def reduce_and(x, axis):
    """The bitwise AND of the entries (for booleans: all); lax's reduce_and."""
    return np.bitwise_and.reduce(x, axis=axis)


def reduce_or(x, axis):
    """The bitwise OR of the entries (for booleans: any); lax's reduce_or."""
    return np.bitwise_or.reduce(x, axis=axis)


impl_rules[prims.reduce_and_p] = functools.partial(_reduction, reduce_and)
impl_rules[prims.reduce_or_p] = functools.partial(_reduction, reduce_or)


def _arg_reduction(fn, x, *, axes, index_dtype):
    (axis,) = axes
    return [np.asarray(fn(x, axis=axis)).astype(index_dtype)]


impl_rules[prims.argmax_p] = functools.partial(_arg_reduction, np.argmax)
impl_rules[prims.argmin_p] = functools.partial(_arg_reduction, np.argmin)




def fft_kernel(fft_type, fft_lengths):
    """numpy's transform of the last len(fft_lengths) dimensions, in the result's dtype
    (numpy computes in double precision)."""
    axes = tuple(range(-len(fft_lengths), 0))
    lengths = tuple(fft_lengths)

    def kernel(x):
        if x.size == 0 or 0 in lengths:     # numpy refuses no points; XLA's result is empty
            return _empty_fft(x, fft_type, lengths)
        if fft_type == "FFT":
            out = np.fft.fftn(x, axes=axes)
            dtype = x.dtype
        elif fft_type == "IFFT":
            out = np.fft.ifftn(x, axes=axes)
            dtype = x.dtype
        elif fft_type == "RFFT":
            out = np.fft.rfftn(x, axes=axes)
            dtype = dtypes.complex_dtype(x.dtype)
        else:
            out = np.fft.irfftn(x, s=lengths, axes=axes)
            dtype = dtypes.real_dtype(x.dtype)
        return np.asarray(out, dtype)
    return kernel


def _empty_fft(x, fft_type, lengths):
    """The transform of ``x`` where it or its result has no elements: zeros (none, or an RFFT
    of no rows: the zero frequency of nothing) of the result's shape and dtype."""
    if fft_type in ("FFT", "IFFT"):
        return np.zeros(x.shape, x.dtype)
    if fft_type == "RFFT":
        return np.zeros(x.shape[:-1] + (lengths[-1] // 2 + 1,), dtypes.complex_dtype(x.dtype))
    return np.zeros(x.shape[:-1] + (lengths[-1],), dtypes.real_dtype(x.dtype))


impl_rules[prims.fft_p] = lambda x, *, fft_type, fft_lengths: [
    fft_kernel(fft_type, fft_lengths)(x)]

_CUMULATIVE_UFUNCS = {prims.cumsum_p: np.add, prims.cumprod_p: np.multiply,
                      prims.cummax_p: np.maximum, prims.cummin_p: np.minimum}


def cumulative(ufunc, x, axis, reverse):
    """``ufunc`` accumulated along ``axis`` in ``x``'s dtype (from the end when ``reverse``).
    A float sum or product rounds by the order of its steps, so it takes XLA's order
    (``scans``); any order gives the same integers, extrema and booleans."""
    if ufunc in (np.add, np.multiply) and dtypes.is_inexact(x.dtype):
        return scans.cumulative(ufunc, x, axis, reverse, 0 if ufunc is np.add else 1)
    if reverse:
        return np.flip(ufunc.accumulate(np.flip(x, axis), axis=axis, dtype=x.dtype), axis)
    return ufunc.accumulate(x, axis=axis, dtype=x.dtype)


for _p, _f in _CUMULATIVE_UFUNCS.items():
    impl_rules[_p] = functools.partial(
        lambda ufunc, x, *, axis, reverse: [cumulative(ufunc, np.asarray(x), axis, reverse)], _f)


def total_order_key(x):
    """Integers that order like ``x`` as JAX sorts floats: -inf < ... < inf < nan, with -0
    equal to 0 and every NaN equal and last (so a stable sort keeps them in order);
    integers and booleans are their own keys."""
    x = np.asarray(x)
    if not dtypes.is_inexact(x.dtype):
        return x
    # -0 as 0 and every NaN as one positive NaN, on the values (not their bits)
    x = np.where(np.isnan(x), np.array(np.nan, x.dtype), x + np.zeros((), x.dtype))
    signed = x.view(np.dtype(f"i{x.dtype.itemsize}"))
    # negative floats order backwards in their bits: flip every bit but the sign
    return np.where(signed < 0, signed ^ np.iinfo(signed.dtype).max, signed)


def sort_along(operands, axis, num_keys):
    """``operands`` reordered along ``axis`` by the first ``num_keys`` (lexicographic, stable)."""
    operands = np.broadcast_arrays(*[np.asarray(x) for x in operands])
    keys = []
    for x in operands[:num_keys]:
        # complex values order by their real parts, then their imaginary ones (JAX's)
        parts = (x.real, x.imag) if np.iscomplexobj(x) else (x,)
        keys.extend(total_order_key(part) for part in parts)
    if len(keys) == 1:
        order = np.argsort(keys[0], axis=axis, kind="stable")
    else:
        order = np.lexsort(keys[::-1], axis=axis)    # lexsort's last key is the primary one
    return [np.take_along_axis(x, order, axis=axis) for x in operands]


def _sort(*operands, dimension, num_keys):
    return sort_along(operands, dimension, num_keys)


def _searchsorted(sorted_values, query, *, side):
    if np.iscomplexobj(sorted_values):
        # by real part, then imaginary (numpy's and JAX's order of complex numbers)
        found = np.searchsorted(np.asarray(sorted_values), np.asarray(query), side=side)
    else:
        found = np.searchsorted(total_order_key(sorted_values), total_order_key(query),
                                side=side)
    return [np.asarray(found, dtype=np.int32)]


impl_rules[prims.sort_p] = _sort
impl_rules[prims.cholesky_p] = linalg.cholesky
impl_rules[prims.qr_p] = linalg.qr
impl_rules[prims.solve_p] = linalg.solve
impl_rules[prims.slogdet_p] = linalg.slogdet
impl_rules[prims.eigh_p] = linalg.eigh
impl_rules[prims.svd_p] = linalg.svd
impl_rules[prims.eig_p] = linalg.eig
impl_rules[prims.schur_p] = linalg_reductions.schur
impl_rules[prims.hessenberg_p] = linalg_reductions.hessenberg
impl_rules[prims.tridiagonal_p] = linalg_reductions.tridiagonal
impl_rules[prims.geqp3_p] = linalg_reductions.geqp3
impl_rules[prims.searchsorted_p] = _searchsorted


def _dot_general(x, y, *, dimension_numbers, preferred_element_type=None, out_sharding=None,
                 precision=None):
    (lc, rc), (lb, rb) = dimension_numbers
    for kind, left, right in (("contracting", lc, rc), ("batch", lb, rb)):
        # (2, 3) against (3, 2) would reshape fine and give a wrong answer: check each size.
        if tuple(x.shape[d] for d in left) != tuple(y.shape[d] for d in right):
            raise TypeError(f"dot_general requires {kind} dimensions to have the same shape, "
                            f"got {tuple(x.shape[d] for d in left)} and "
                            f"{tuple(y.shape[d] for d in right)} (operand shapes {x.shape} "
                            f"and {y.shape}, dimension_numbers={dimension_numbers})")
    lfree = [d for d in range(x.ndim) if d not in lc and d not in lb]
    rfree = [d for d in range(y.ndim) if d not in rc and d not in rb]
    xt = np.transpose(x, list(lb) + lfree + list(lc))
    yt = np.transpose(y, list(rb) + list(rc) + rfree)
    nb = len(lb)
    batch = xt.shape[:nb]
    k = math.prod(x.shape[d] for d in lc)
    m = math.prod(x.shape[d] for d in lfree)
    n = math.prod(y.shape[d] for d in rfree)
    dtype = preferred_element_type or x.dtype
    wide = widened_to(x.dtype, dtype)
    out = np.matmul(matmul_operand(xt.reshape(batch + (m, k)), wide),
                    matmul_operand(yt.reshape(batch + (k, n)), wide))
    shape = batch + tuple(x.shape[d] for d in lfree) + tuple(y.shape[d] for d in rfree)
    return [out.reshape(shape).astype(dtype, copy=False)]


impl_rules[prims.dot_general_p] = _dot_general


def widened_to(dtype, preferred):
    """The dtype a product of ``dtype`` operands accumulates in: ``preferred`` where it holds
    every value of ``dtype`` and more (int8 products summed in int32, float16 ones in float32,
    as XLA's), else None (the operands' own)."""
    if preferred is None or preferred == dtype or not np.can_cast(dtype, preferred, "safe"):
        return None
    return np.dtype(preferred)


def matmul_operand(x, widen=None):
    """A matmul operand whose matrices (the last two dimensions) are row-major: BLAS's result,
    and whether numpy calls BLAS at all, depends on the operand's layout (a transposed matrix
    rounds differently), and a block's layout on how it was made; row-major, every backend
    rounds alike, however many devices are stacked. Rows may lie apart (a column block of a
    larger matrix): BLAS packs them alike. ``widen``: a dtype to compute in (a copy)."""
    if widen is not None:
        return np.asarray(x, dtype=widen, order="C")
    if x.ndim < 2:
        return x
    item = x.itemsize
    if x.strides[-1] == item and x.strides[-2] >= x.shape[-1] * item and (
            x.strides[-2] % item == 0):
        return x
    return np.array(x, order="C")


_THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def threefry2x32(k1, k2, x1, x2) -> list:
    """The Threefry-2x32 hash (20 rounds, a key injection after every 4) of the counters
    ``(x1, x2)`` keyed by ``(k1, k2)``, elementwise with numpy broadcasting: JAX's bits."""
    k1, k2, x1, x2 = (np.asarray(v, np.uint32) for v in (k1, k2, x1, x2))
    shape = np.broadcast_shapes(k1.shape, k2.shape, x1.shape, x2.shape)
    if math.prod(shape) <= 4:
        # a few elements (a key split in two, a fold): Python's integers beat numpy's
        # per-call cost over the hundred operations of the rounds
        pairs = [_threefry_scalar(*(int(v) for v in args))
                 for args in zip(*(np.broadcast_to(v, shape).reshape(-1)
                                   for v in (k1, k2, x1, x2)))]
        return [np.array([p[i] for p in pairs], np.uint32).reshape(shape) for i in (0, 1)]
    ks = (k1, k2, np.asarray(k1 ^ k2 ^ np.uint32(0x1BD11BDA)))
    a, b = np.empty(shape, np.uint32), np.empty(shape, np.uint32)
    np.add(x1, ks[0], out=a)
    np.add(x2, ks[1], out=b)
    spare = np.empty_like(b)
    for i in range(5):
        for r in _THREEFRY_ROTATIONS[i % 2]:
            np.add(a, b, out=a)
            np.left_shift(b, np.uint32(r), out=spare)
            np.right_shift(b, np.uint32(32 - r), out=b)
            np.bitwise_or(b, spare, out=b)
            np.bitwise_xor(b, a, out=b)
        np.add(a, ks[(i + 1) % 3], out=a)
        np.add(b, ks[(i + 2) % 3], out=b)
        np.add(b, np.uint32(i + 1), out=b)
    return [a, b]


def _threefry_scalar(k1: int, k2: int, a: int, b: int) -> tuple:
    """One element of ``threefry2x32``, in Python integers."""
    mask = 0xFFFFFFFF
    ks = (k1, k2, k1 ^ k2 ^ 0x1BD11BDA)
    a, b = (a + k1) & mask, (b + k2) & mask
    for i in range(5):
        for r in _THREEFRY_ROTATIONS[i % 2]:
            a = (a + b) & mask
            b = (((b << r) | (b >> (32 - r))) & mask) ^ a
        a = (a + ks[(i + 1) % 3]) & mask
        b = (b + ks[(i + 2) % 3] + i + 1) & mask
    return a, b


impl_rules[prims.threefry2x32_p] = threefry2x32
impl_rules[prims.sharding_constraint_p] = lambda x, *, sharding: [x]
impl_rules[prims.device_put_p] = lambda x, *, device, src: [x]
impl_rules[prims.stop_gradient_p] = lambda x: [x]
impl_rules[prims.copy_p] = lambda x: [np.array(x, copy=True)]
impl_rules[prims.shard_alike_p] = lambda x, y: [x, y]


def _debug_print(*args, fmt, arg_names=(), partitioned=False, ordered=False):
    print(_format_print(args, fmt=fmt, arg_names=arg_names))
    return []


impl_rules[prims.debug_print_p] = _debug_print


class CallbackLog:
    """The host callbacks one run of a program called, in order, with their arguments and
    results; replayed, a second run of the same program (the check backend's fast one) gets
    the recorded results instead of calling the user's function again, after ``compare``
    (``(recorded, given) -> why they differ or ''``) holds its arguments to the recorded
    ones. A callback's effects happen once."""

    def __init__(self, compare):
        self.calls: list = []
        self.compare = compare
        self.replaying: int | None = None      # the next call to replay, when replaying

    def call(self, callback, args: list) -> list:
        if self.replaying is None:
            printed = io.StringIO()         # what it prints is replayed too
            try:
                with contextlib.redirect_stdout(printed):
                    results = callback(*args)
            finally:
                sys.stdout.write(printed.getvalue())
            self.calls.append((callback, [np.array(a) for a in args], results,
                               printed.getvalue()))
            return results
        if self.replaying >= len(self.calls):
            raise AssertionError(f"the second run called {callback} where the first run had "
                                 "called no more callbacks")
        recorded_callback, recorded, results, printed = self.calls[self.replaying]
        self.replaying += 1
        if recorded_callback is not callback or len(recorded) != len(args):
            raise AssertionError(f"the second run called {callback} where the first run "
                                 f"called {recorded_callback}")
        for k, (a, b) in enumerate(zip(recorded, args)):
            why = self.compare(a, b)
            if why:
                raise AssertionError(f"the second run called {callback} with argument {k} "
                                     f"unlike the first run's: {why}")
        sys.stdout.write(printed)
        return results


_CALLBACK_LOGS: list = []     # the logs of the runs in progress, innermost last


@contextlib.contextmanager
def callback_log(log: CallbackLog, replay: bool):
    """Record (or, with ``replay``, replay) the host callbacks of what runs inside."""
    log.replaying = 0 if replay else None
    _CALLBACK_LOGS.append(log)
    try:
        yield log
    finally:
        _CALLBACK_LOGS.pop()


def _callback(*args, callback, result_avals, effect, vmap_method, partitioned=False,
              ordered=False):
    """Call the host function on numpy values; its results held to what it declared, as
    JAX's: as many, of the declared shapes, and of the declared dtypes once canonical (a
    Python float may stand for a float32, an int32 for no float). A failure is the program's
    JaxRuntimeError, as XLA raises it, with the failing traceback in its message."""
    values = [np.asarray(a) for a in args]
    results = (_CALLBACK_LOGS[-1].call(callback, values) if _CALLBACK_LOGS
               else callback(*values))
    try:
        return _declared_results(results, result_avals)
    except Exception as exc:         # (a value of no dtype a program holds, too)
        raise host_failure(exc) from exc


def _declared_results(results, result_avals) -> list:
    if len(results) != len(result_avals):
        raise RuntimeError(f"Mismatched number of outputs from callback. Expected: "
                           f"{len(result_avals)}, Actual: {len(results)}")
    out = []
    for k, (value, (shape, dtype)) in enumerate(zip(results, result_avals)):
        value = np.asarray(value)
        value = value.astype(dtypes.canonicalize(value.dtype), copy=False)
        if value.shape != tuple(shape):
            raise RuntimeError(f"Incorrect output shape for return value #{k}: Expected: "
                               f"{tuple(shape)}, Actual: {value.shape}")
        if value.dtype != dtype:
            raise RuntimeError(f"Incorrect output dtype for return value #{k}: Expected: "
                               f"{np.dtype(dtype).name}, Actual: {value.dtype.name}")
        out.append(value)
    return out


def host_failure(exc: BaseException) -> JaxRuntimeError:
    """A host callback's failure as the program's error: JAX's type and wording, the
    failure's own traceback in the message (the original is its ``__cause__``)."""
    trace = "".join(traceback.format_exception(exc)).rstrip("\n")
    return JaxRuntimeError(f"INTERNAL: CpuCallback error calling callback: {trace}")


impl_rules[prims.callback_p] = _callback


# --- running programs -------------------------------------------------------------------------

class Request:
    """A device waiting at a communication node."""
    __slots__ = ("eqn", "value")

    def __init__(self, eqn, value):
        self.eqn = eqn
        self.value = value


class _Print:
    """A device printing (debug_print): the scheduler orders prints by mesh position."""
    __slots__ = ("text",)

    def __init__(self, text):
        self.text = text


class DeadlockError(RuntimeError):
    """Devices wait at communication nodes their group never completes."""


def _run_alone(steps):
    """Drive one program's steps with no other device: prints go out, collectives are errors."""
    try:
        request = next(steps)
        while True:
            if not isinstance(request, _Print):
                raise RuntimeError(f"{request.eqn.primitive} needs a device mesh; it cannot run "
                                   "on one value")
            print(request.text)
            request = steps.send(None)
    except StopIteration as done:
        return done.value


def eval_program(program: Program, args, consts=()):
    """Evaluate a program on concrete numpy values (no communication allowed)."""
    return _run_alone(_device_steps(program, args, consts))


class DeviceInterpreter(Interpreter):
    """One device's program: numpy implementations; a communication node yields a request
    (the scheduler meets the device's group there), a print yields its text."""

    def __init__(self, device=None):
        self.device = device

    def eval_equation(self, eqn, values):
        prim = eqn.primitive
        if prim in group_rules or prim in control_rules or prim is prims.debug_print_p:
            return self._meeting(eqn, values)
        return impl_rules[prim](*values, **eqn.params)

    def _meeting(self, eqn, values):
        prim = eqn.primitive
        if prim in group_rules:
            return [(yield Request(eqn, node_operands(values)))]
        if prim in control_rules:
            return (yield from control_rules[prim](values, interpreter=self, **eqn.params))
        yield _Print(_format_print(values, **eqn.params))
        return []


def _device_steps(program: Program, args, consts=(), device=None):
    """Run one device's program; yield at each communication node, receive its result."""
    return DeviceInterpreter(device).steps(program, args, consts)


# --- control flow: generators, so collectives inside loops and branches meet across devices ---

control_rules = RuleTable("control flow")


def _scan_steps(values, *, jaxpr, length, reverse, num_consts, num_carry, interpreter):
    consts = list(values[:num_consts])
    carry = list(values[num_consts:num_consts + num_carry])
    xs = values[num_consts + num_carry:]
    ys = []
    for k in (range(length - 1, -1, -1) if reverse else range(length)):
        outs = yield from interpreter.steps(jaxpr, consts + carry + [x[k] for x in xs])
        carry = outs[:num_carry]
        ys.append(outs[num_carry:])
    if reverse:
        ys.reverse()
    stacked = []
    for j, aval in enumerate(jaxpr.out_avals[num_carry:]):
        stacked.append(np.stack([np.asarray(y[j]) for y in ys]) if ys
                       else np.zeros((0,) + aval.shape, aval.dtype))
    return [np.asarray(c) for c in carry] + stacked


def _while_steps(values, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, interpreter):
    cond_consts = list(values[:cond_nconsts])
    body_consts = list(values[cond_nconsts:cond_nconsts + body_nconsts])
    carry = list(values[cond_nconsts + body_nconsts:])
    while True:
        (pred,) = yield from interpreter.steps(cond_jaxpr, cond_consts + carry)
        if not bool(pred):
            return [np.asarray(c) for c in carry]
        carry = yield from interpreter.steps(body_jaxpr, body_consts + carry)


def _cond_steps(values, *, branches, interpreter):
    index = int(np.clip(int(values[0]), 0, len(branches) - 1))
    outs = yield from interpreter.steps(branches[index], list(values[1:]))
    return [np.asarray(o) for o in outs]


control_rules[prims.scan_p] = _scan_steps
control_rules[prims.while_p] = _while_steps
control_rules[prims.cond_p] = _cond_steps


def _remat_steps(values, *, jaxpr, saved, interpreter):
    outs = yield from interpreter.steps(jaxpr, list(values))
    return [np.asarray(o) for o in outs]


control_rules[prims.remat_p] = _remat_steps


def _control_impl(prim, *values, **params):
    return _run_alone(control_rules[prim](list(values), interpreter=DeviceInterpreter(),
                                          **params))


for _p in prims.CONTROL_FLOW + (prims.remat_p,):
    impl_rules[_p] = functools.partial(_control_impl, _p)


def _format_print(values, *, fmt, arg_names=(), partitioned=False, ordered=False):
    positional = len(values) - len(arg_names)
    return fmt.format(*values[:positional], **dict(zip(arg_names, values[positional:])))


# --- many devices ------------------------------------------------------------------------------

def run_device_programs(mesh, programs, inputs_by_position) -> list:
    """Run every device's program; a group's members meet at each communication node.

    A group proceeds as soon as all its members wait at a node, so groups never wait for
    each other. Prints are gathered and written in (print number, position) order. Members
    that can never meet (one finished, or waiting at a different node while no group can
    proceed) raise DeadlockError.
    """
    position_of = {dev_id: p for p, dev_id in enumerate(mesh.flat_device_ids)}
    ids = mesh.flat_device_ids
    runs = [_device_steps(program, args, device=ids[p])
            for p, (program, args) in enumerate(zip(programs, inputs_by_position))]
    results = [None] * len(runs)
    waiting: dict = {}
    prints: list = []
    printed = [0] * len(runs)
    resume = {p: None for p in range(len(runs))}
    try:
        while resume:
            for p, value in resume.items():
                _advance(runs, p, value, waiting, results, prints, printed)
            resume = _meet(waiting, position_of, results)
        if waiting:
            raise _deadlock(waiting, mesh, results)
    finally:
        for _, _, text in sorted(prints):
            print(text)
    return results


def _advance(runs, p, value, waiting, results, prints, printed):
    """Run device p until it waits at a communication node or finishes."""
    try:
        request = runs[p].send(value)
        while isinstance(request, _Print):
            prints.append((printed[p], p, request.text))
            printed[p] += 1
            request = runs[p].send(None)
        waiting[p] = request
    except StopIteration as done:
        results[p] = done.value


def _meet(waiting, position_of, results) -> dict:
    """Complete every communication node all of whose group members wait at it.

    A member waiting at another node may be held by another group's collective (a branch
    that communicates over other axes first): its group waits while any group completes, and
    is a deadlock only once none can."""
    resume = {}
    mismatched = None
    for p in sorted(waiting):
        if p not in waiting or p in resume:
            continue
        request = waiting[p]
        params = request.eqn.params
        group = next(g for g in params["device_groups"] if _member(g, p, position_of))
        members = [position_of[d] for d in group]
        if not all(m in waiting for m in members):
            continue
        if not _same_node(members, waiting):
            mismatched = mismatched or members
            continue
        outs = group_rules[request.eqn.primitive]([waiting[m].value for m in members], **params)
        for m, out in zip(members, outs):
            resume[m] = out
            del waiting[m]
    if not resume and mismatched is not None:
        _check_same_node(mismatched, waiting)
    return resume


def _member(group, position, position_of) -> bool:
    return any(position_of[d] == position for d in group)


def _at_same_node(first, other) -> bool:
    return (other.eqn.primitive is first.eqn.primitive
            and other.eqn.params == first.eqn.params
            and operand_types(other.value) == operand_types(first.value))


def _same_node(members, waiting) -> bool:
    return all(_at_same_node(waiting[members[0]], waiting[m]) for m in members[1:])


def _check_same_node(members, waiting):
    """Members pair up only at the same kind of node with operands of one type."""
    first = waiting[members[0]]
    for m in members[1:]:
        other = waiting[m]
        if not _at_same_node(first, other):
            raise DeadlockError(
                f"devices of one group reached different communication nodes: "
                f"{_node_text(first)} on device position {members[0]} and "
                f"{_node_text(other)} on device position {m}")


def _node_text(request) -> str:
    types = ", ".join(f"{dtype}{list(shape)}" for shape, dtype in operand_types(request.value))
    return f"{request.eqn.primitive}[{_axes_of(request.eqn)}] of {types}"


def _axes_of(eqn) -> str:
    return f"mesh_axes={eqn.params.get('mesh_axes')}"


def _deadlock(waiting, mesh, results) -> DeadlockError:
    ids = mesh.flat_device_ids
    stuck = ", ".join(f"device {ids[p]} at {req.eqn.primitive}[{_axes_of(req.eqn)}]"
                      for p, req in sorted(waiting.items()))
    done = [ids[p] for p, r in enumerate(results) if r is not None]
    return DeadlockError(f"devices wait at communication nodes their groups never complete: "
                         f"{stuck}" + (f"; devices {done} had already finished" if done else ""))


# --- the backend --------------------------------------------------------------------------------

def _host(value):
    if isinstance(value, Array):
        if value.aval.unreduced:
            raise NotImplementedError(UNREDUCED_ON_HOST)
        return value._assemble()
    if isinstance(value, np.ndarray):
        if type(value) is not np.ndarray and isinstance(value, np.ma.MaskedArray):
            # its mask would be dropped (JAX's error)
            raise ValueError("numpy masked arrays are not supported as direct inputs to JAX "
                             "functions. Use arr.filled() to convert the value to a standard "
                             "numpy array.")
        return value
    return canonical_array(value)


# an operation outside shard_map bodies runs on global values; a partial sum has none
UNREDUCED_ON_HOST = (
    "an operation on an unreduced array (partial sums over mesh axes) outside a shard_map: "
    "shardc adds the partial sums only by reshard (jax.reshard(x, P(...))) or psum in a "
    "shard_map; reshard the array before the operation")


class ReferenceBackend:
    """Interprets per-device programs with numpy, one equation and one device at a time."""
    name = "reference"

    def __init__(self):
        self._device_programs: dict = {}    # id(mesh-level program) -> its specialisations

    def eval_primitive(self, prim, args, params) -> list:
        if prim is prims.sharding_constraint_p:
            return self.put([args[0]], [params["sharding"]])
        outs = impl_rules[prim](*[_host(a) for a in args], **params)
        for a in args:
            if isinstance(a, np.ndarray):   # a result viewing a host operand is copied
                outs = [detached(o, a) for o in outs]
        return [Array.from_global(o) for o in outs]

    def eval_block(self, prim, blocks, params) -> list:
        return impl_rules[prim](*[np.asarray(b) for b in blocks], **params)

    def run_mesh_program(self, mesh, program, inputs) -> list:
        """Every device's program, specialised from ``program`` (once per program), run
        together."""
        programs = self._specialised(mesh, program)
        by_position = [[blocks[p] for blocks in inputs] for p in range(mesh.size)]
        results = run_device_programs(mesh, programs, by_position)
        return [[results[p][k] for p in range(mesh.size)]
                for k in range(len(program.outvars))]

    def _specialised(self, mesh, program) -> list:
        cache = self._device_programs
        entry = cache.get(id(program))
        if entry is None or entry[0] is not program or entry[1] is not mesh:
            if len(cache) > 4096:
                cache.clear()
            entry = cache[id(program)] = (program, mesh, [
                specialise(mesh, p, program) for p in range(mesh.size)])
        return entry[2]

    def to_blocks(self, value, mesh, spec) -> list:
        return to_blocks(value, mesh, spec)

    def place_inputs(self, values, mesh, specs) -> list:
        """Each position's block of each input of an eager shard_map."""
        return [self.to_blocks(v, mesh, s) for v, s in zip(values, specs)]

    def put(self, values, shardings, labels=None) -> list:
        """``device_put`` of each value by its sharding (``labels``, or a function giving them,
        name them in errors)."""
        return [device_put(v, s) for v, s in zip(values, shardings)]

    def from_blocks(self, blocks, mesh, spec):
        return Array.from_blocks(blocks, mesh, spec)

    def sharding_of(self, value):
        return value.sharding if isinstance(value, Array) else None

    def execute(self, module, args) -> list:
        return execute_module(module, args)

    committed_device = staticmethod(placement.committed_device)
    on_device = staticmethod(placement.on_device)

    def default_sharding(self):
        return SingleDeviceSharding(default_device())


def to_blocks(value, mesh, spec) -> list:
    """Each position's block of ``value`` laid out by ``spec``: an Array already laid out so
    gives its buffers; anything else is split from its global value."""
    if (isinstance(value, Array) and isinstance(value.sharding, NamedSharding)
            and value.sharding.mesh == mesh
            and normal_spec(value.sharding.spec) == normal_spec(spec)):
        return list(value.buffers)
    return Array.from_global(detached(_host(value), value), NamedSharding(mesh, spec)).buffers


def device_put(value, sharding=None) -> Array:
    """Lay out one array by ``sharding`` (a NamedSharding, SingleDeviceSharding or device),
    committed to it; without one, on the default device, uncommitted."""
    if sharding is not None and not isinstance(sharding, (NamedSharding, SingleDeviceSharding)):
        if not isinstance(sharding, Device):
            raise TypeError(f"device_put requires a NamedSharding or a device, got {sharding!r}")
        sharding = SingleDeviceSharding(sharding)
    if isinstance(sharding, NamedSharding) and not isinstance(sharding.mesh, Mesh):
        # an abstract mesh names no devices to lay a value out on (JAX's error)
        raise ValueError("is_fully_addressable is not implemented for "
                         "`jax.sharding.AbstractMesh`.")
    if isinstance(sharding, NamedSharding) and isinstance(value, Array):
        # (an equal sharding may spell more dimensions than the value has: JAX's error)
        check_rank(sharding, value.ndim, "device_put args")
    if isinstance(value, Array) and value.sharding == sharding:
        return value.committed_to() if isinstance(sharding, SingleDeviceSharding) else value
    if isinstance(sharding, NamedSharding):
        _check_put_divisible(value, sharding)
    if isinstance(value, Array) and value.aval.unreduced:
        # partial sums: added up first (JAX's reshard of an unreduced array reduces it)
        return Array.from_global(value.reduced_value(), sharding)
    source = None
    if (isinstance(sharding, NamedSharding) and sharding.spec.unreduced
            and isinstance(value, Array) and isinstance(value.sharding, NamedSharding)
            and value.sharding.mesh == sharding.mesh):
        source = value.sharding.spec       # each device's term: its own block (JAX's)
    put = Array.from_global(detached(_host(value), value), sharding, source)
    return put.committed_to() if sharding is not None and not put.committed else put


def _check_put_divisible(value, sharding: NamedSharding):
    shape = np.shape(value) if not isinstance(value, Array) else value.shape
    check_rank(sharding, len(shape), "device_put args")
    if mesh_explicit(sharding.mesh):
        # the result's type names the split: JAX's check of types, and its message
        check_divisible(shape, spec_from_user(sharding.spec, len(shape), sharding.mesh),
                        sharding.mesh)
    check_divides(sharding, shape)


def execute_module(module, args, run_shard_map=None, run_nested=None) -> list:
    """Run a lowered module: host equations on global values, shard_maps on every device.

    ``run_shard_map(index, values)`` runs the shard_map equation at ``index``, and
    ``run_nested(eqn, values)`` one inside a host loop or branch (``module.nested``); by
    default their per-device programs in lockstep (another backend passes its own).
    """
    if run_shard_map is None:
        run_shard_map = lambda index, values: _run_shard_map(module.lowered(index), values)
    if run_nested is None:
        run_nested = lambda eqn, values: _run_shard_map(module.nested_lowered(eqn), values)
    outs = _ModuleInterpreter(module.program, run_shard_map, run_nested).run(
        module.program, args[len(module.program.constvars):],
        args[:len(module.program.constvars)])
    return [v if isinstance(v, Array) else Array.from_global(v) for v in outs]


class _ModuleInterpreter(Interpreter):
    """A lowered module's host program: shard_maps on every device, the rest on global
    values. A host loop or branch holding a shard_map runs here, step by step, its
    shard_maps by ``run_nested(eqn, values)``."""

    def __init__(self, program, run_shard_map, run_nested):
        self.index_of = {id(eqn): k for k, eqn in enumerate(program.eqns)}
        self.run_shard_map = run_shard_map
        self.run_nested = run_nested

    def eval_equation(self, eqn, values):
        prim = eqn.primitive
        if prim is prims.shard_map_p:
            index = self.index_of.get(id(eqn))
            if index is None:
                return self.run_nested(eqn, values)
            return self.run_shard_map(index, values)
        if prim is prims.sharding_constraint_p:
            return [_constrained(values[0], eqn.params["sharding"])]
        if prim in control_rules and holds_shard_map(eqn):
            return control_rules[prim]([_host(v) for v in values], interpreter=self,
                                       **eqn.params)
        return impl_rules[prim](*[_host(v) for v in values], **eqn.params)


def holds_shard_map(eqn) -> bool:
    """Whether a loop or branch equation runs a shard_map (in a body, at any depth outside
    shard_map bodies); worked out once per equation."""
    entry = _HOLDS_SHARD_MAP.get(id(eqn))
    if entry is None or entry[0] is not eqn:
        if len(_HOLDS_SHARD_MAP) > 4096:
            _HOLDS_SHARD_MAP.clear()
        entry = _HOLDS_SHARD_MAP[id(eqn)] = (eqn, runs_shard_map(eqn.params))
    return entry[1]


_HOLDS_SHARD_MAP: dict = {}


def _constrained(value, sharding):
    """A sharding constraint inside a program: laid out so; on a mesh with Auto axes, where
    the layout does not divide the value (JAX accepts it on intermediates), by the axes that
    divide it."""
    if isinstance(sharding, NamedSharding) and not isinstance(sharding.mesh, Mesh):
        # on an abstract mesh: the devices of the mesh the value is on, where that mesh is
        # the one abstracted; else it stays where it is (the layout names no devices)
        layout = getattr(value, "sharding", None)
        if not (isinstance(layout, NamedSharding) and isinstance(layout.mesh, Mesh)
                and layout.mesh.shape_tuple == sharding.mesh.shape_tuple):
            return value
        sharding = NamedSharding(layout.mesh, sharding.spec)
    if isinstance(sharding, NamedSharding) and mesh_auto(sharding.mesh):
        sharding = dividing_sharding(sharding, np.shape(value) if not isinstance(value, Array)
                                     else value.shape)
    return device_put(value, sharding)


def _run_shard_map(lowered, values) -> list:
    mesh = lowered.mesh
    blocks = []
    for value, spec in zip(values, lowered.in_shardings):
        # Lay each input out as the per-device programs expect it to arrive.
        blocks.append(to_blocks(value, mesh, spec))
    inputs = [[b[p] for b in blocks] for p in range(mesh.size)]
    results = run_device_programs(mesh, [dp.program for dp in lowered.device_programs], inputs)
    if lowered.runtime_check:
        for k, spec in enumerate(lowered.out_specs):
            mismatch = replication_mismatch([r[k] for r in results], mesh, spec)
            if mismatch:
                raise runtime_replication_error(k, spec, mesh, mismatch)
    return [Array.from_blocks([results[p][k] for p in range(mesh.size)], mesh, spec)
            for k, spec in enumerate(lowered.out_specs)]
