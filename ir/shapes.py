"""Shape and dtype rules, one per primitive: ``rule(*in_avals, **params) -> [out_aval, ...]``.

Rules see shapes and dtypes only; the varying mesh axes of a result are the replication
checker's business (``compiler.replication``).
"""
from __future__ import annotations

import functools

import numpy as np

from ir import dtypes
from ir import primitives as prims
from ir import unreduced
from ir.core import Aval
from ir.primitives import RuleTable

shape_rules = RuleTable("shape")


class ShapeError(TypeError):
    """Operands whose shapes or dtypes a primitive does not accept."""


def _aval(shape, dtype) -> Aval:
    return Aval(tuple(shape), np.dtype(dtype))


def out_avals(prim, in_avals, params) -> list:
    """The result avals of ``prim`` applied to ``in_avals``.

    A primitive without parameters (most elementwise ones) is typed once per operand types:
    its rule sees nothing else, and a long program repeats the same few. Operands that are
    unreduced or reduced (partial sums, known-equal copies) type the results by the
    primitive's rule for them (``ir.unreduced``), which refuses what it cannot keep exact."""
    if params:
        outs = shape_rules[prim](*in_avals, **params)
        if prim in unreduced.ALWAYS or unreduced.wants_rule(in_avals, params):
            return unreduced.typed(prim, in_avals, outs, params)
        return outs
    for a in in_avals:
        if a.ur:
            return unreduced.typed(prim, in_avals, shape_rules[prim](*in_avals), {})
    key = (prim, *in_avals)
    found = _PARAMETERLESS.get(key)
    if found is None:
        found = shape_rules[prim](*in_avals)
        if len(_PARAMETERLESS) > 4096:
            _PARAMETERLESS.clear()
        _PARAMETERLESS[key] = found
    return list(found)


_PARAMETERLESS: dict = dtypes.register_cache({})


# --- elementwise ------------------------------------------------------------------------------

def _common_shape(prim, avals) -> tuple:
    shapes = {a.shape for a in avals if a.shape != ()}
    if len(shapes) > 1:
        raise ShapeError(f"{prim} requires operands of equal shape (or rank 0), got "
                         + ", ".join(a.str_short() for a in avals))
    return shapes.pop() if shapes else ()


_INTEGER_ONLY = (prims.population_count_p,) + prims.SHIFTS
_INEXACT_ONLY = (prims.asin_p, prims.acos_p, prims.atan_p, prims.sinh_p, prims.cosh_p,
                 prims.asinh_p, prims.acosh_p, prims.atanh_p, prims.cbrt_p, prims.exp2_p,
                 prims.nextafter_p, prims.signbit_p, prims.polygamma_p) + prims.SPECIAL \
    + prims.INCOMPLETE


_COMPLEX_ONLY = (prims.real_p, prims.imag_p)
# lax's real-only functions (JAX's dtype rules refuse a complex operand)
_REAL_ONLY = (prims.floor_p, prims.ceil_p, prims.round_p, prims.atan2_p, prims.nextafter_p,
              prims.complex_p, prims.erf_p, prims.erfc_p, prims.erf_inv_p, prims.lgamma_p,
              prims.digamma_p, prims.cbrt_p, prims.is_finite_p, prims.signbit_p,
              prims.polygamma_p, prims.bessel_i0e_p, prims.bessel_i1e_p) + prims.INCOMPLETE


def _check_operand_kind(prim, x: Aval):
    # JAX's dtype-rule wording
    if prim in _COMPLEX_ONLY and not np.issubdtype(x.dtype, np.complexfloating):
        raise ShapeError(f"{prim} does not accept dtype {x.dtype.name}. Accepted dtypes are "
                         "subtypes of complexfloating.")
    if prim in (prims.conj_p, prims.logistic_p) and not dtypes.is_inexact(x.dtype):
        raise ShapeError(f"{prim} does not accept dtype {x.dtype.name}. Accepted dtypes are "
                         "subtypes of floating, complexfloating.")
    if prim in _REAL_ONLY and np.issubdtype(x.dtype, np.complexfloating):
        raise ShapeError(f"{prim} does not accept dtype {x.dtype.name}. Accepted dtypes are "
                         "subtypes of floating.")
    if prim in (prims.not_p,) and not (dtypes.is_bool(x.dtype) or dtypes.is_int(x.dtype)):
        raise ShapeError(f"{prim} requires a boolean or integer operand, got {x.str_short()}")
    if prim in _INTEGER_ONLY and not dtypes.is_int(x.dtype):
        raise ShapeError(f"{prim} requires an integer operand, got {x.str_short()}")
    if prim in _INEXACT_ONLY and not dtypes.is_inexact(x.dtype):
        raise ShapeError(f"{prim} requires a floating-point operand, got {x.str_short()}")
    if prim is prims.abs_p:
        if dtypes.is_bool(x.dtype) or dtypes.is_unsigned(x.dtype):
            raise ShapeError(f"abs does not accept dtype {x.dtype.name}. Accepted dtypes are "
                             "subtypes of floating, complexfloating, signedinteger.")
        if dtypes.is_int(x.dtype) and dtypes.bit_width(x.dtype) < 8:
            raise ShapeError(f"abs does not accept dtype {x.dtype.name}. Support for "
                             "narrow-width integers is platform-dependent and limited to a few "
                             "specific operations, e.g. basic arithmetic and type casting.")


def unary_rule(prim, x: Aval, **params) -> list:
    _check_operand_kind(prim, x)
    if prim in prims.PREDICATES:
        return [_aval(x.shape, dtypes.bool_)]
    if prim in (prims.real_p, prims.imag_p, prims.abs_p):
        return [_aval(x.shape, dtypes.real_dtype(x.dtype))]
    if prim is prims.conj_p:
        return [_aval(x.shape, dtypes.complex_dtype(x.dtype))]
    return [_aval(x.shape, x.dtype)]


def binary_rule(prim, *avals, **params) -> list:
    dts = {a.dtype for a in avals}
    if len(dts) > 1:
        raise ShapeError(f"{prim} requires operands of one dtype, got "
                         + ", ".join(a.str_short() for a in avals))
    _check_operand_kind(prim, avals[0])
    if prim is prims.complex_p:
        if not dtypes.is_inexact(avals[0].dtype):
            raise ShapeError(f"{prim} requires floating-point operands, got "
                             + ", ".join(a.str_short() for a in avals))
        return [_aval(_common_shape(prim, avals), dtypes.complex_dtype(avals[0].dtype))]
    return [_aval(_common_shape(prim, avals), avals[0].dtype)]


def comparison_rule(prim, *avals, **params) -> list:
    binary_rule(prim, *avals)
    return [_aval(_common_shape(prim, avals), dtypes.bool_)]


for _p in prims.UNARY + prims.PREDICATES:
    shape_rules[_p] = functools.partial(unary_rule, _p)
for _p in prims.ARITHMETIC:
    shape_rules[_p] = functools.partial(binary_rule, _p)
for _p in prims.COMPARISON:
    shape_rules[_p] = functools.partial(comparison_rule, _p)


def _select_n_rule(pred: Aval, *cases: Aval) -> list:
    if not cases:
        raise ShapeError("select_n requires at least one case")
    binary_rule(prims.select_n_p, *cases)
    shape = _common_shape(prims.select_n_p, (pred,) + cases)
    return [_aval(shape, cases[0].dtype)]


shape_rules[prims.select_n_p] = _select_n_rule


def _convert_rule(x: Aval, *, new_dtype) -> list:
    return [_aval(x.shape, new_dtype)]


shape_rules[prims.convert_element_type_p] = _convert_rule


def _bitcast_rule(x: Aval, *, new_dtype) -> list:
    """Widths in bits as JAX counts them (int4 is 4 bits): a narrower result gains a last
    dimension of the ratio, a wider one takes the operand's last dimension of that ratio."""
    old, new = np.dtype(x.dtype), np.dtype(new_dtype)
    if dtypes.is_bool(old) or dtypes.is_bool(new):
        raise ShapeError(f"bitcast_convert_type does not convert booleans, got "
                         f"{x.str_short()} to {new.name}")
    old_bits, new_bits = dtypes.bit_width(old), dtypes.bit_width(new)
    if old_bits == new_bits:
        return [_aval(x.shape, new)]
    if max(old_bits, new_bits) % min(old_bits, new_bits):
        raise ShapeError(f"bitcast_convert_type between {old.name} and {new.name}: neither "
                         f"width ({old_bits} and {new_bits} bits) divides the other")
    if old_bits > new_bits:
        return [_aval(tuple(x.shape) + (old_bits // new_bits,), new)]
    ratio = new_bits // old_bits
    if not x.shape or x.shape[-1] != ratio:
        raise ShapeError(f"bitcast_convert_type from {old.name} to the wider {new.name} needs a "
                         f"last dimension of {ratio}, got {x.str_short()}")
    return [_aval(tuple(x.shape[:-1]), new)]


shape_rules[prims.bitcast_convert_type_p] = _bitcast_rule


def _integer_pow_rule(x: Aval, *, y) -> list:
    """JAX's dtype rule: numbers, not booleans; integers to non-negative powers only."""
    if dtypes.is_bool(x.dtype):
        raise ShapeError("integer_pow does not accept dtype bool. Accepted dtypes are subtypes "
                         "of integer, floating, complexfloating.")
    if y < 0 and dtypes.is_int(x.dtype):
        raise ShapeError(f"Integers cannot be raised to negative powers, got "
                         f"integer_pow({x.str_long()}, {y})")
    return [_aval(x.shape, x.dtype)]


shape_rules[prims.integer_pow_p] = _integer_pow_rule


def _reduce_precision_rule(x: Aval, *, exponent_bits, mantissa_bits) -> list:
    if not dtypes.is_inexact(x.dtype):
        raise ShapeError(f"reduce_precision requires a floating-point operand, got "
                         f"{x.str_short()}")
    return [_aval(x.shape, x.dtype)]


shape_rules[prims.reduce_precision_p] = _reduce_precision_rule


# --- shapes -----------------------------------------------------------------------------------

def _broadcast_in_dim_rule(x: Aval, *, shape, broadcast_dimensions) -> list:
    if len(broadcast_dimensions) != x.ndim:
        raise ShapeError(f"broadcast_in_dim: broadcast_dimensions={broadcast_dimensions} "
                         f"must name one output dimension per operand dimension of {x.str_short()}")
    for d, od in zip(x.shape, broadcast_dimensions):
        if not (0 <= od < len(shape)) or d not in (1, shape[od]):
            raise ShapeError(f"broadcast_in_dim: cannot broadcast {x.str_short()} to shape "
                             f"{tuple(shape)} with broadcast_dimensions={broadcast_dimensions}")
    return [_aval(shape, x.dtype)]


def _reshape_rule(x: Aval, *, new_sizes, out_sharding=None) -> list:
    if int(np.prod(new_sizes, dtype=np.int64)) != x.size:
        raise ShapeError(f"reshape: cannot reshape {x.str_short()} to {tuple(new_sizes)}")
    return [_aval(new_sizes, x.dtype)]


def _transpose_rule(x: Aval, *, permutation) -> list:
    if sorted(permutation) != list(range(x.ndim)):
        # JAX's TypeError (lax.transpose's; jnp.transpose's for axes in bounds)
        raise ShapeError("transpose permutation isn't a permutation of operand dimensions, "
                         f"got permutation {permutation} for operand shape {x.shape}.")
    return [_aval([x.shape[p] for p in permutation], x.dtype)]


def _squeeze_rule(x: Aval, *, dimensions) -> list:
    for d in dimensions:
        if not 0 <= d < x.ndim or x.shape[d] != 1:
            raise ShapeError(f"squeeze: dimension {d} of {x.str_short()} is not of size 1")
    return [_aval([s for k, s in enumerate(x.shape) if k not in dimensions], x.dtype)]


def _concatenate_rule(*xs: Aval, dimension) -> list:
    first = xs[0]
    for x in xs[1:]:
        same = x.ndim == first.ndim and all(
            a == b for k, (a, b) in enumerate(zip(x.shape, first.shape)) if k != dimension)
        if not same or x.dtype != first.dtype:
            raise ShapeError("concatenate: operands must agree except along dimension "
                             f"{dimension}, got " + ", ".join(a.str_short() for a in xs))
    shape = list(first.shape)
    shape[dimension] = sum(x.shape[dimension] for x in xs)
    return [_aval(shape, first.dtype)]


def _check_nonnegative(name: str, what: str, values) -> None:
    """JAX's TypeError for a negative entry of a primitive's shape-like parameter."""
    if any(v < 0 for v in values):
        raise ShapeError(f"{name} {what} must have every element be nonnegative, got {values}.")


def _slice_rule(x: Aval, *, start_indices, limit_indices, strides) -> list:
    # JAX's checks, in its order and words
    _check_nonnegative("slice", "start_indices", start_indices)
    _check_nonnegative("slice", "limit_indices", limit_indices)
    if len(start_indices) != x.ndim:
        raise ShapeError("slice start_indices must have length equal to the number of "
                         f"dimensions of the operand, got indices {start_indices} for operand "
                         f"shape {x.shape}.")
    if len(limit_indices) != len(start_indices):
        raise ShapeError("slice limit_indices must have the same length as start_indices, got "
                         f"start_indices {start_indices} and limit_indices {limit_indices}.")
    if any(hi > d for hi, d in zip(limit_indices, x.shape)):
        raise ShapeError("slice limit_indices must be less than or equal to operand shape, got "
                         f"limit_indices {limit_indices} for operand shape {x.shape}.")
    if any(hi < lo for lo, hi in zip(start_indices, limit_indices)):
        raise ShapeError("slice limit_indices must be greater than or equal to start_indices, "
                         f"got start_indices {start_indices} and limit_indices "
                         f"{limit_indices}.")
    if strides is not None and tuple(strides) != (1,) * x.ndim:
        _check_nonnegative("slice", "strides", strides)
        if len(strides) != x.ndim:
            raise ShapeError("slice strides must have length equal to the number of dimensions "
                             f"of the operand, got strides {strides} for operand shape "
                             f"{x.shape}.")
    strides = strides or (1,) * x.ndim
    shape = [max(0, -(-(hi - lo) // st))
             for lo, hi, st in zip(start_indices, limit_indices, strides)]
    return [_aval(shape, x.dtype)]


def _dynamic_slice_rule(x: Aval, *starts: Aval, slice_sizes) -> list:
    # (the API checks the number of start indices first, as JAX's does)
    if len(starts) != x.ndim or len(slice_sizes) != x.ndim:
        raise ShapeError(f"dynamic_slice: {x.str_short()} needs {x.ndim} start indices and "
                         "slice sizes")
    if any(s > d for s, d in zip(slice_sizes, x.shape)):
        raise ShapeError("slice slice_sizes must be less than or equal to operand shape, got "
                         f"slice_sizes {slice_sizes} for operand shape {x.shape}.")
    if any(s < 0 for s in slice_sizes):
        raise ShapeError("slice slice_sizes must be greater than or equal to zero, got "
                         f"slice_sizes of {slice_sizes}.")
    return [_aval(slice_sizes, x.dtype)]


def _dynamic_update_slice_rule(x: Aval, update: Aval, *starts: Aval) -> list:
    if update.ndim != x.ndim:
        raise ShapeError("dynamic_update_slice update must have the same rank as operand, got "
                         f"update shape {update.shape} for operand shape {x.shape}.")
    if len(starts) != x.ndim:
        raise ShapeError("dynamic_update_slice start_indices must have length equal to the "
                         f"rank of operand, got {len(starts)} indices for operand shape "
                         f"{x.shape}.")
    if any(u > d for u, d in zip(update.shape, x.shape)):
        raise ShapeError("dynamic_update_slice update shape must be smaller than operand shape, "
                         f"got update shape {update.shape} for operand shape {x.shape}.")
    if update.dtype != x.dtype:
        raise ShapeError("lax.dynamic_update_slice requires arguments to have the same dtypes, "
                         f"got {x.dtype.name}, {update.dtype.name}.")
    return [_aval(x.shape, x.dtype)]


def _gather_rule(x: Aval, indices: Aval, *, axis) -> list:
    if not dtypes.is_int(indices.dtype):
        raise ShapeError(f"gather: indices must be integers, got {indices.str_short()}")
    shape = x.shape[:axis] + indices.shape + x.shape[axis + 1:]
    return [_aval(shape, x.dtype)]


def _scatter_rule(x: Aval, indices: Aval, updates: Aval, *, axis, mode) -> list:
    expected = x.shape[:axis] + indices.shape + x.shape[axis + 1:]
    if updates.shape != expected:
        raise ShapeError(f"scatter: updates {updates.str_short()} should have shape {expected}")
    check_scatter_combines(mode, x.dtype)
    return [_aval(x.shape, x.dtype)]


def check_scatter_combines(mode: str, dtype) -> None:
    """JAX's TypeError for a scatter-add or -mul of booleans: the add or mul that combines
    its updates takes numbers only."""
    if mode in ("add", "mul") and dtypes.is_bool(dtype):
        raise ShapeError(f"{mode} does not accept dtype bool at position 0. Accepted dtypes at "
                         "position 0 are subtypes of integer, floating, complexfloating.")


def _iota_rule(*, dtype, shape, dimension) -> list:
    # JAX's iota rules: numbers only (no bool), no negative dimension
    if not (dtypes.is_int(dtype) or dtypes.is_inexact(dtype)):
        raise ShapeError(f"iota does not accept dtype {np.dtype(dtype).name}. Accepted dtypes "
                         "are subtypes of integer, floating, complexfloating.")
    if any(d < 0 for d in shape):
        raise ShapeError(f"iota shape must have every element be nonnegative, got "
                         f"{tuple(shape)}.")
    return [_aval(shape, dtype)]


def _rev_rule(x: Aval, *, dimensions) -> list:
    return [_aval(x.shape, x.dtype)]


def _pad_rule(x: Aval, value: Aval, *, padding_config) -> list:
    shape = [lo + d + hi + max(0, d - 1) * interior
             for d, (lo, hi, interior) in zip(x.shape, padding_config)]
    return [_aval(shape, x.dtype)]


shape_rules[prims.broadcast_in_dim_p] = _broadcast_in_dim_rule
shape_rules[prims.reshape_p] = _reshape_rule
shape_rules[prims.transpose_p] = _transpose_rule
shape_rules[prims.squeeze_p] = _squeeze_rule
shape_rules[prims.concatenate_p] = _concatenate_rule
shape_rules[prims.slice_p] = _slice_rule
shape_rules[prims.dynamic_slice_p] = _dynamic_slice_rule
shape_rules[prims.dynamic_update_slice_p] = _dynamic_update_slice_rule
shape_rules[prims.gather_p] = _gather_rule
shape_rules[prims.scatter_p] = _scatter_rule
shape_rules[prims.iota_p] = _iota_rule
shape_rules[prims.rev_p] = _rev_rule
shape_rules[prims.pad_p] = _pad_rule


# --- matrix decompositions (the last two dimensions; leading ones are a batch) ------------------

def _square_matrices(prim, a: Aval):
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ShapeError(f"{prim} requires square matrices (shape [..., n, n]), got "
                         f"{a.str_short()}")
    if not dtypes.is_inexact(a.dtype):
        raise ShapeError(f"{prim} requires a floating-point operand, got {a.str_short()}")


def _cholesky_rule(a: Aval) -> list:
    _square_matrices(prims.cholesky_p, a)
    return [_aval(a.shape, a.dtype)]


def _qr_rule(a: Aval, *, full_matrices) -> list:
    if a.ndim < 2 or not dtypes.is_inexact(a.dtype):
        raise ShapeError(f"qr requires floating-point matrices (shape [..., m, n]), got "
                         f"{a.str_short()}")
    *batch, m, n = a.shape
    k = m if full_matrices else min(m, n)
    return [_aval(tuple(batch) + (m, k), a.dtype), _aval(tuple(batch) + (k, n), a.dtype)]


def _solve_rule(a: Aval, b: Aval) -> list:
    _square_matrices(prims.solve_p, a)
    if b.ndim != a.ndim or b.shape[:-2] != a.shape[:-2] or b.shape[-2] != a.shape[-1] \
            or b.dtype != a.dtype:
        raise ShapeError(f"solve requires b of shape [..., n, k] matching a {a.str_short()}, "
                         f"got {b.str_short()}")
    return [_aval(b.shape, b.dtype)]


def _slogdet_rule(a: Aval) -> list:
    _square_matrices(prims.slogdet_p, a)
    return [_aval(a.shape[:-2], a.dtype), _aval(a.shape[:-2], dtypes.real_dtype(a.dtype))]


shape_rules[prims.cholesky_p] = _cholesky_rule
shape_rules[prims.qr_p] = _qr_rule
shape_rules[prims.solve_p] = _solve_rule
shape_rules[prims.slogdet_p] = _slogdet_rule


def _eigh_rule(a: Aval) -> list:
    _square_matrices(prims.eigh_p, a)
    return [_aval(a.shape, a.dtype), _aval(a.shape[:-1], dtypes.real_dtype(a.dtype))]


shape_rules[prims.eigh_p] = _eigh_rule


def _svd_rule(a: Aval, *, full_matrices) -> list:
    """Singular values (descending, real), then u and vt: [..., m, k] and [..., k, n] with
    k = min(m, n) (full_matrices: m and n)."""
    if a.ndim < 2 or not dtypes.is_inexact(a.dtype):
        raise ShapeError(f"svd requires a floating-point matrix (shape [..., m, n]), got "
                         f"{a.str_short()}")
    m, n = a.shape[-2:]
    k = min(m, n)
    batch = a.shape[:-2]
    return [_aval(batch + (k,), dtypes.real_dtype(a.dtype)),
            _aval(batch + (m, m if full_matrices else k), a.dtype),
            _aval(batch + (n if full_matrices else k, n), a.dtype)]


shape_rules[prims.svd_p] = _svd_rule


def _eig_rule(a: Aval, *, compute_vectors, enable_eigvec_derivs=False) -> list:
    """The eigenvalues of a general square matrix, complex (and its right eigenvectors;
    ``enable_eigvec_derivs`` only says whether those may be differentiated)."""
    _square_matrices(prims.eig_p, a)
    dtype = dtypes.complex_dtype(a.dtype)
    values = _aval(a.shape[:-1], dtype)
    return [values, _aval(a.shape, dtype)] if compute_vectors else [values]


shape_rules[prims.eig_p] = _eig_rule


def _schur_rule(a: Aval, *, compute_vectors) -> list:
    """The Schur form (and the Schur vectors), of the operand's shape and dtype."""
    _square_matrices(prims.schur_p, a)
    return [_aval(a.shape, a.dtype)] * (2 if compute_vectors else 1)


def _hessenberg_rule(a: Aval) -> list:
    """The reduced matrix with its reflectors, and their n - 1 scale factors."""
    _square_matrices(prims.hessenberg_p, a)
    return [_aval(a.shape, a.dtype),
            _aval(a.shape[:-2] + (max(a.shape[-1] - 1, 0),), a.dtype)]


def _tridiagonal_rule(a: Aval, *, lower) -> list:
    """The reduced matrix with its reflectors, the (real) diagonal and off-diagonal, and the
    reflectors' scale factors."""
    _square_matrices(prims.tridiagonal_p, a)
    n = a.shape[-1]
    if n == 0:
        raise ShapeError(f"The input to tridiagonal must be a square matrix. Got shape "
                         f"{a.shape[-2:]}.")
    real = dtypes.real_dtype(a.dtype)
    batch = a.shape[:-2]
    return [_aval(a.shape, a.dtype), _aval(batch + (n,), real), _aval(batch + (n - 1,), real),
            _aval(batch + (n - 1,), a.dtype)]


def _geqp3_rule(a: Aval, jpvt: Aval) -> list:
    """The factored matrix, the column pivots (jpvt's dtype) and the min(m, n) scale
    factors."""
    if a.ndim < 2 or not dtypes.is_inexact(a.dtype):
        raise ShapeError(f"geqp3 requires floating-point matrices (shape [..., m, n]), got "
                         f"{a.str_short()}")
    pivots = a.shape[:-2] + (a.shape[-1],)
    if jpvt.shape != pivots or not np.issubdtype(jpvt.dtype, np.integer):
        raise ShapeError(f"geqp3 requires integer pivots of shape {pivots}, got "
                         f"{jpvt.str_short()}")
    m, n = a.shape[-2:]
    return [_aval(a.shape, a.dtype), _aval(jpvt.shape, jpvt.dtype),
            _aval(a.shape[:-2] + (min(m, n),), a.dtype)]


shape_rules[prims.schur_p] = _schur_rule
shape_rules[prims.hessenberg_p] = _hessenberg_rule
shape_rules[prims.tridiagonal_p] = _tridiagonal_rule
shape_rules[prims.geqp3_p] = _geqp3_rule


# --- reductions -------------------------------------------------------------------------------

def _check_axes(prim, x: Aval, axes):
    for a in axes:
        if not 0 <= a < x.ndim:
            raise ShapeError(f"{prim}: axis {a} is out of bounds for {x.str_short()}")


def reduction_rule(prim, x: Aval, *, axes, out_sharding=None) -> list:
    _check_axes(prim, x, axes)
    shape = [d for k, d in enumerate(x.shape) if k not in axes]
    return [_aval(shape, x.dtype)]


def _arg_reduction_rule(prim, x: Aval, *, axes, index_dtype) -> list:
    _check_axes(prim, x, axes)
    shape = [d for k, d in enumerate(x.shape) if k not in axes]
    return [_aval(shape, index_dtype)]


def _cumulative_rule(prim, x: Aval, *, axis, reverse) -> list:
    _check_axes(prim, x, (axis,))
    return [_aval(x.shape, x.dtype)]


def _sort_rule(*operands: Aval, dimension, num_keys) -> list:
    if not operands:
        raise ShapeError("sort requires at least one operand")
    first = operands[0]
    if any(x.shape != first.shape for x in operands):
        raise ShapeError("sort requires operands of one shape, got "
                         + ", ".join(x.str_short() for x in operands))
    _check_axes(prims.sort_p, first, (dimension,))
    if not 1 <= num_keys <= len(operands):
        raise ShapeError(f"sort: num_keys={num_keys} must be between 1 and the number of "
                         f"operands ({len(operands)})")
    return [_aval(x.shape, x.dtype) for x in operands]


def _searchsorted_rule(sorted_values: Aval, query: Aval, *, side) -> list:
    if sorted_values.ndim != 1:
        raise ShapeError(f"searchsorted: the sorted operand must be 1-D, got "
                         f"{sorted_values.str_short()}")
    if sorted_values.dtype != query.dtype:
        raise ShapeError("searchsorted requires operands of one dtype, got "
                         f"{sorted_values.str_short()} and {query.str_short()}")
    if side not in ("left", "right"):
        raise ShapeError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
    return [_aval(query.shape, dtypes.int32)]      # int32 with x64 on too (JAX's)


for _p in prims.REDUCTIONS:
    shape_rules[_p] = functools.partial(reduction_rule, _p)
shape_rules[prims.argmax_p] = functools.partial(_arg_reduction_rule, prims.argmax_p)
shape_rules[prims.argmin_p] = functools.partial(_arg_reduction_rule, prims.argmin_p)
for _p in prims.CUMULATIVE:
    shape_rules[_p] = functools.partial(_cumulative_rule, _p)
shape_rules[prims.sort_p] = _sort_rule
shape_rules[prims.searchsorted_p] = _searchsorted_rule


def _fft_rule(x: Aval, *, fft_type, fft_lengths) -> list:
    """JAX's fft_abstract_eval, its checks ValueErrors as JAX's (and XLA's: an IRFFT's last
    input dimension holds the half spectrum, an RFFT transforms at least one point): the
    transform of the last len(fft_lengths) dimensions."""
    n, lengths = len(fft_lengths), tuple(fft_lengths)
    if fft_type not in prims.FFT_TYPES:
        raise ShapeError(f"Unknown FFT type value '{fft_type}'")
    if n > x.ndim:
        raise ValueError(f"FFT input shape {x.shape} must have at least as many input "
                         f"dimensions as fft_lengths {lengths}.")
    if not 1 <= n <= 3:
        raise ValueError(f"fft takes 1 to 3 fft_lengths, got {lengths}")
    if fft_type == "RFFT":
        if x.dtype not in (np.float32, np.float64):
            raise ValueError(f"RFFT input must be float32 or float64, got {x.dtype}")
        if x.shape[-n:] != lengths:
            raise ValueError(f"RFFT input shape {x.shape} minor dimensions must be equal to "
                             f"fft_lengths {lengths}")
        if lengths[-1] == 0:
            raise ValueError(f"RFFT fft_lengths {lengths} must end in a positive length")
        return [_aval(x.shape[:-1] + (lengths[-1] // 2 + 1,), dtypes.complex_dtype(x.dtype))]
    if not np.issubdtype(x.dtype, np.complexfloating):
        raise ValueError(f"{fft_type} input must be complex64 or complex128, got {x.dtype}")
    if fft_type == "IRFFT":
        if x.shape[-n:-1] != lengths[:-1]:
            raise ValueError(f"IRFFT input shape {x.shape} minor dimensions must be equal to "
                             f"all except the last fft_length, got fft_lengths={lengths}")
        if lengths[-1] and x.shape[-1] != lengths[-1] // 2 + 1:
            raise ValueError(f"IRFFT input shape {x.shape} minor dimension must be "
                             f"{lengths[-1] // 2 + 1} for fft_lengths {lengths}")
        return [_aval(x.shape[:-1] + (lengths[-1],), dtypes.real_dtype(x.dtype))]
    if x.shape[-n:] != lengths:
        raise ValueError(f"FFT input shape {x.shape} minor dimensions must be equal to "
                         f"fft_lengths {lengths}")
    return [_aval(x.shape, x.dtype)]


shape_rules[prims.fft_p] = _fft_rule


def _callback_rule(*avals, callback, result_avals, effect, vmap_method,
                   partitioned=False, ordered=False) -> list:
    """A host callback's results are what it declared."""
    return [_aval(tuple(shape), np.dtype(dtype)) for shape, dtype in result_avals]


shape_rules[prims.callback_p] = _callback_rule


# --- linear algebra ---------------------------------------------------------------------------

def _dot_general_rule(x: Aval, y: Aval, *, dimension_numbers, preferred_element_type=None,
                      out_sharding=None, precision=None) -> list:
    (lc, rc), (lb, rb) = dimension_numbers
    if len(lc) != len(rc) or len(lb) != len(rb):
        raise ShapeError(f"dot_general: dimension_numbers={dimension_numbers} are unbalanced")
    for which, left, right in (("contracting", lc, rc), ("batch", lb, rb)):
        left_sizes = tuple(x.shape[d] for d in left)
        right_sizes = tuple(y.shape[d] for d in right)
        if left_sizes != right_sizes:
            raise ShapeError(f"dot_general requires {which} dimensions to have the same shape, "
                             f"got {left_sizes} and {right_sizes}.")
    if x.dtype != y.dtype:
        raise ShapeError(f"dot_general requires operands of one dtype, got {x.str_short()} "
                         f"and {y.str_short()}")
    batch = [x.shape[d] for d in lb]
    lfree = [d for k, d in enumerate(x.shape) if k not in lc and k not in lb]
    rfree = [d for k, d in enumerate(y.shape) if k not in rc and k not in rb]
    dtype = preferred_element_type or x.dtype
    return [_aval(batch + lfree + rfree, dtype)]


shape_rules[prims.dot_general_p] = _dot_general_rule


# --- identity-shaped ops: sharding annotations, stop_gradient ---------------------------------


def _single_identity_rule(x: Aval, **params) -> list:
    return [_aval(x.shape, x.dtype)]


shape_rules[prims.sharding_constraint_p] = _single_identity_rule
shape_rules[prims.device_put_p] = _single_identity_rule
shape_rules[prims.stop_gradient_p] = _single_identity_rule
shape_rules[prims.copy_p] = _single_identity_rule
shape_rules[prims.shard_alike_p] = lambda x, y: [_aval(x.shape, x.dtype), _aval(y.shape, y.dtype)]
shape_rules[prims.debug_print_p] = lambda *xs, **params: []  # printing has no results
shape_rules[prims.inspect_sharding_p] = lambda x, **params: []


def _check_rule(*errors: Aval, err_tree, debug) -> list:
    return []           # a check has no results


shape_rules[prims.check_p] = _check_rule


# --- control flow: results come from the sub-programs ------------------------------------------

def _scan_rule(*in_avals: Aval, jaxpr, length, reverse, num_consts, num_carry) -> list:
    outs = jaxpr.out_avals
    carry = [_aval(a.shape, a.dtype) for a in outs[:num_carry]]
    ys = [_aval((length,) + a.shape, a.dtype) for a in outs[num_carry:]]
    return carry + ys


def _while_rule(*in_avals: Aval, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts) -> list:
    return [_aval(a.shape, a.dtype) for a in body_jaxpr.out_avals]


def _cond_rule(index: Aval, *operands: Aval, branches) -> list:
    if not (dtypes.is_int(index.dtype) and index.shape == ()):
        raise ShapeError(f"cond: the branch index must be an integer scalar, got "
                         f"{index.str_short()}")
    return [_aval(a.shape, a.dtype) for a in branches[0].out_avals]


def _remat_rule(*in_avals: Aval, jaxpr, saved) -> list:
    return [_aval(a.shape, a.dtype) for a in jaxpr.out_avals]


shape_rules[prims.remat_p] = _remat_rule


def _custom_call_rule(*in_avals: Aval, jaxpr, **params) -> list:
    return [_aval(a.shape, a.dtype) for a in jaxpr.out_avals]


def _custom_lin_rule(*in_avals: Aval, out_shapes, out_dtypes, out_shardings=None,
                     **params) -> list:
    """A custom_vjp's tangents: typed as their primals (``out_shardings``: their splits)."""
    splits = out_shardings or (None,) * len(out_shapes)
    return [_aval(shape, dtype).with_sharding(split)
            for shape, dtype, split in zip(out_shapes, out_dtypes, splits)]


def _name_rule(x: Aval, *, name) -> list:
    return [x.strip_vma()]


for _p in prims.CUSTOM_CALLS + (prims.linear_solve_p,):
    shape_rules[_p] = _custom_call_rule
shape_rules[prims.custom_lin_p] = _custom_lin_rule
shape_rules[prims.name_p] = _name_rule
shape_rules[prims.scan_p] = _scan_rule
shape_rules[prims.while_p] = _while_rule
shape_rules[prims.cond_p] = _cond_rule


def _threefry2x32_rule(*operands: Aval) -> list:
    """Two uint32 results of the operands' common shape (rank-0 operands broadcast)."""
    if any(a.dtype != np.dtype("uint32") for a in operands):
        raise ShapeError("threefry2x32 requires uint32 operands, got "
                         + ", ".join(a.str_short() for a in operands))
    shape = _common_shape(prims.threefry2x32_p, operands)
    return [_aval(shape, np.dtype("uint32"))] * 2


shape_rules[prims.threefry2x32_p] = _threefry2x32_rule


def reshape_groups(old, new) -> list:
    """The reshape ``old -> new`` as independent groups: (old dims, new dims) runs whose sizes
    have equal products, in order (unit dimensions join a neighbouring group)."""
    groups, i, j = [], 0, 0
    if 0 in old or 0 in new:
        return [(list(range(len(old))), list(range(len(new))))]
    while i < len(old) and j < len(new):
        group_old, group_new, p_old, p_new = [i], [j], old[i], new[j]
        i, j = i + 1, j + 1
        while p_old != p_new:
            if p_old < p_new:
                group_old.append(i)
                p_old, i = p_old * old[i], i + 1
            else:
                group_new.append(j)
                p_new, j = p_new * new[j], j + 1
        groups.append((group_old, group_new))
    if groups:       # what is left is unit dimensions
        groups[-1][0].extend(range(i, len(old)))
        groups[-1][1].extend(range(j, len(new)))
    else:
        groups.append((list(range(len(old))), list(range(len(new)))))
    return groups
