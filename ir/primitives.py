"""The primitive registry.

A primitive is a tiny named object; every concern keeps its own rule table keyed by primitive
(shape rules in ``ir.shapes``, replication and autodiff rules in ``compiler``, implementation
rules in ``runtime``). Each primitive is registered once, here, by name, so the parser can find
it again.
"""
from __future__ import annotations

import enum
from typing import Any, NamedTuple

import numpy as np


class Primitive:
    """A named operation. ``multiple_results`` primitives return a list of values."""
    __slots__ = ("name", "multiple_results", "kind", "collective")

    def __init__(self, name: str, *, multiple_results: bool = False, kind: str = "op"):
        self.name = name
        self.multiple_results = multiple_results
        # kind: "op" (ordinary array op), "collective" (front-end collective naming mesh axes),
        # "lowered" (communication node of lowered programs), "higher" (carries sub-programs).
        self.kind = kind
        # a collective's declaration (``ir.collectives.Collective``), None for other kinds
        self.collective = None

    def __repr__(self):
        return self.name

    def __str__(self):
        return self.name


# Names are registered once per level: ``registry`` holds the primitives of traced programs
# (ordinary, higher-order and front-end collectives), ``node_registry`` the communication nodes
# of lowered programs. A few words name a front-end collective and the node it lowers to
# (``all_gather``); the level of the program being read tells which (``lookup``).
registry: dict[str, Primitive] = {}
node_registry: dict[str, Primitive] = {}


def primitive(name: str, **kwargs) -> Primitive:
    """Create and register a primitive; a name is registered once per level."""
    prim = Primitive(name, **kwargs)
    table = node_registry if prim.kind == "lowered" else registry
    if name in table:
        raise ValueError(f"primitive {name!r} is already registered")
    table[name] = prim
    return prim


def lookup(name: str, lowered: bool = False) -> Primitive:
    """The primitive named ``name`` in a traced program, or in a lowered one (``lowered``):
    there a communication node's name means the node, everywhere else what the front end
    binds; a name of one level only is found from either."""
    first, second = (node_registry, registry) if lowered else (registry, node_registry)
    found = first.get(name) or second.get(name)
    if found is None:
        raise KeyError(f"unknown primitive {name!r}")
    return found


def all_primitives() -> list:
    """Every registered primitive, of both levels."""
    return list(registry.values()) + list(node_registry.values())


class MissingRuleError(NotImplementedError):
    """A rule table has no entry for a primitive."""

    def __init__(self, prim, table: str):
        super().__init__(f"no {table} rule for primitive '{prim}'")
        self.primitive = prim
        self.table = table


class RuleTable(dict):
    """A dict of rules keyed by primitive whose missing entries raise one standard error."""

    def __init__(self, name: str):
        super().__init__()
        self.name = name

    def __missing__(self, prim):
        raise MissingRuleError(prim, self.name)


# ---------------------------------------------------------------------------------------------
# The primitives of the front end (what user code binds).

# Elementwise, one operand.
neg_p = primitive("neg")
sin_p = primitive("sin")
cos_p = primitive("cos")
tan_p = primitive("tan")
tanh_p = primitive("tanh")
exp_p = primitive("exp")
log_p = primitive("log")
log1p_p = primitive("log1p")
expm1_p = primitive("expm1")
sqrt_p = primitive("sqrt")
rsqrt_p = primitive("rsqrt")
abs_p = primitive("abs")
sign_p = primitive("sign")
floor_p = primitive("floor")
ceil_p = primitive("ceil")
round_p = primitive("round")
logistic_p = primitive("logistic")
not_p = primitive("not")
is_finite_p = primitive("is_finite")
# jax.numpy's other transcendental and bit functions (numpy's kernels; no composition of the
# ones above is as accurate near 0, 1 or the ends of the range)
asin_p = primitive("asin")
acos_p = primitive("acos")
atan_p = primitive("atan")
sinh_p = primitive("sinh")
cosh_p = primitive("cosh")
asinh_p = primitive("asinh")
acosh_p = primitive("acosh")
atanh_p = primitive("atanh")
cbrt_p = primitive("cbrt")
exp2_p = primitive("exp2")
population_count_p = primitive("population_count")
signbit_p = primitive("signbit")                         # bool result, reads the sign bit
# x ** y for a Python int y, by repeated squaring (JAX's): exact where the product is, and
# its derivative y * x ** (y - 1) another integer power, so derivatives of any order hold
integer_pow_p = primitive("integer_pow")                 # [y]
# Special functions (lax.erf ...): own kernels, accurate to the last bits of float32.
erf_p = primitive("erf")
erfc_p = primitive("erfc")
erf_inv_p = primitive("erf_inv")
lgamma_p = primitive("lgamma")
digamma_p = primitive("digamma")
bessel_i0e_p = primitive("bessel_i0e")                   # exp(-|x|) I0(x)
bessel_i1e_p = primitive("bessel_i1e")                   # exp(-|x|) I1(x)
SPECIAL = (erf_p, erfc_p, erf_inv_p, lgamma_p, digamma_p, bessel_i0e_p, bessel_i1e_p)

# Complex numbers' parts: real and imag of a complex operand are real; conj of a real operand
# is complex (lax's); complex(re, im) is in ARITHMETIC.
real_p = primitive("real")
imag_p = primitive("imag")
conj_p = primitive("conj")
COMPLEX_PARTS = (real_p, imag_p, conj_p)

UNARY = (neg_p, sin_p, cos_p, tan_p, tanh_p, exp_p, log_p, log1p_p, expm1_p, sqrt_p, rsqrt_p,
         abs_p, sign_p, floor_p, ceil_p, round_p, logistic_p, not_p, asin_p, acos_p, atan_p,
         sinh_p, cosh_p, asinh_p, acosh_p, atanh_p, cbrt_p, exp2_p, population_count_p,
         integer_pow_p) + SPECIAL + COMPLEX_PARTS
PREDICATES = (is_finite_p, signbit_p)                     # one operand, boolean result

# Elementwise, two operands of one dtype (rank-0 operands broadcast).
add_p = primitive("add")
sub_p = primitive("sub")
mul_p = primitive("mul")
div_p = primitive("div")
rem_p = primitive("rem")
pow_p = primitive("pow")
max_p = primitive("max")
min_p = primitive("min")
atan2_p = primitive("atan2")
and_p = primitive("and")
or_p = primitive("or")
xor_p = primitive("xor")
nextafter_p = primitive("nextafter")
polygamma_p = primitive("polygamma")                     # (m, x): the m-th derivative of digamma
igamma_p = primitive("igamma")                           # (a, x): regularized lower incomplete gamma
igammac_p = primitive("igammac")                         # (a, x): the upper one, 1 - igamma
igamma_grad_a_p = primitive("igamma_grad_a")             # (a, x): d igamma / da
zeta_p = primitive("zeta")                               # (s, q): Hurwitz zeta
zeta_grad_s_p = primitive("zeta_grad_s")                 # (s, q): d zeta / ds
INCOMPLETE = (igamma_p, igammac_p, igamma_grad_a_p, zeta_p, zeta_grad_s_p)
shift_left_p = primitive("shift_left")
shift_right_arithmetic_p = primitive("shift_right_arithmetic")
shift_right_logical_p = primitive("shift_right_logical")
SHIFTS = (shift_left_p, shift_right_arithmetic_p, shift_right_logical_p)
complex_p = primitive("complex")                         # (re, im): re + i im
ARITHMETIC = (add_p, sub_p, mul_p, div_p, rem_p, pow_p, max_p, min_p, atan2_p, and_p, or_p, xor_p,
              nextafter_p, polygamma_p, complex_p) + SHIFTS + INCOMPLETE

eq_p = primitive("eq")
ne_p = primitive("ne")
lt_p = primitive("lt")
le_p = primitive("le")
gt_p = primitive("gt")
ge_p = primitive("ge")
COMPARISON = (eq_p, ne_p, lt_p, le_p, gt_p, ge_p)

select_n_p = primitive("select_n")                       # select_n(pred, *cases)
convert_element_type_p = primitive("convert_element_type")   # [new_dtype]
# The bits reread as another dtype: a narrower one adds a last dimension (width ratio), a
# wider one consumes it.
bitcast_convert_type_p = primitive("bitcast_convert_type")   # [new_dtype]
# Round to a float format of fewer bits and back (elementwise); linear for autodiff, as JAX's.
reduce_precision_p = primitive("reduce_precision")       # [exponent_bits, mantissa_bits]

# Shapes.
broadcast_in_dim_p = primitive("broadcast_in_dim")       # [shape, broadcast_dimensions]
reshape_p = primitive("reshape")                         # [new_sizes]
transpose_p = primitive("transpose")                     # [permutation]
squeeze_p = primitive("squeeze")                         # [dimensions]
concatenate_p = primitive("concatenate")                 # [dimension]
slice_p = primitive("slice")                             # [start_indices, limit_indices, strides]
dynamic_slice_p = primitive("dynamic_slice")             # (x, *starts)[slice_sizes]
dynamic_update_slice_p = primitive("dynamic_update_slice")   # (x, update, *starts)
gather_p = primitive("gather")                           # (x, indices)[axis]: take along axis
scatter_p = primitive("scatter")                         # (x, indices, updates)[axis, mode]
iota_p = primitive("iota")                               # [dtype, shape, dimension]
rev_p = primitive("rev")                                 # [dimensions]
pad_p = primitive("pad")                                 # (x, value)[padding_config]

# Reductions.
reduce_sum_p = primitive("reduce_sum")                   # [axes]
reduce_max_p = primitive("reduce_max")
reduce_min_p = primitive("reduce_min")
reduce_prod_p = primitive("reduce_prod")
reduce_and_p = primitive("reduce_and")
reduce_or_p = primitive("reduce_or")
REDUCTIONS = (reduce_sum_p, reduce_max_p, reduce_min_p, reduce_prod_p, reduce_and_p, reduce_or_p)
argmax_p = primitive("argmax")                           # [axes, index_dtype]
argmin_p = primitive("argmin")
cumsum_p = primitive("cumsum")                           # [axis, reverse]
cumprod_p = primitive("cumprod")                         # [axis, reverse]
cummax_p = primitive("cummax")
cummin_p = primitive("cummin")
CUMULATIVE = (cumsum_p, cumprod_p, cummax_p, cummin_p)

# Sorting. sort orders floats totally (-nan < -inf < -0 < 0 < inf < nan), as JAX does.
sort_p = primitive("sort", multiple_results=True)        # (*operands)[dimension, num_keys]
searchsorted_p = primitive("searchsorted")               # (sorted, query)[side]: int32

# Random numbers: the Threefry-2x32 hash (20 rounds) of the counter words (x1, x2) keyed by
# (k1, k2), as JAX's; elementwise over uint32 operands (rank-0 ones broadcast), two results.
threefry2x32_p = primitive("threefry2x32", multiple_results=True)   # (k1, k2, x1, x2)

# Linear algebra.
# [dimension_numbers, preferred_element_type, precision (only where given)]
dot_general_p = primitive("dot_general")


class Precision(enum.Enum):
    """Matmul precision (``DEFAULT``, ``HIGH``, ``HIGHEST``), JAX's ``lax.Precision``. A
    ``dot_general`` given one carries it as its ``precision`` parameter, one per operand, as
    JAX's jaxprs show it; shardc computes every matmul in its operands' dtype with numpy
    (what ``HIGHEST`` asks for), so the three give one result."""
    DEFAULT = 0
    HIGH = 1
    HIGHEST = 2

    @classmethod
    def _missing_(cls, value):
        names = {"default": cls.DEFAULT, "bfloat16": cls.DEFAULT, "fastest": cls.DEFAULT,
                 "high": cls.HIGH, "bfloat16_3x": cls.HIGH, "tensorfloat32": cls.HIGH,
                 "highest": cls.HIGHEST, "float32": cls.HIGHEST}
        if isinstance(value, str) and value.lower() in names:
            return names[value.lower()]
        return None

    def short_repr(self) -> str:
        return f"Precision.{self.name}"

    __repr__ = short_repr


class DotAlgorithm(NamedTuple):
    """A dot product's algorithm, JAX's ``lax.DotAlgorithm``: the dtypes ``lhs`` and ``rhs``
    are rounded to, the accumulation dtype, and how many parts and products emulate a higher
    precision. Given as ``precision``, the operands are converted to the precision dtypes and
    the product is accumulated in ``accumulation_type`` before the result takes its usual
    dtype, as JAX's lowering does."""
    lhs_precision_type: Any
    rhs_precision_type: Any
    accumulation_type: Any
    lhs_component_count: int = 1
    rhs_component_count: int = 1
    num_primitive_operations: int = 1
    allow_imprecise_accumulation: bool = False


class DotAlgorithmPreset(enum.Enum):
    """JAX's ``lax.DotAlgorithmPreset``: the named dot algorithms, ``LHS_RHS_ACCUM``."""
    DEFAULT = enum.auto()
    ANY_F8_ANY_F8_F32 = enum.auto()
    ANY_F8_ANY_F8_F32_FAST_ACCUM = enum.auto()
    ANY_F8_ANY_F8_ANY = enum.auto()
    ANY_F8_ANY_F8_ANY_FAST_ACCUM = enum.auto()
    F16_F16_F16 = enum.auto()
    F16_F16_F32 = enum.auto()
    BF16_BF16_BF16 = enum.auto()
    BF16_BF16_F32 = enum.auto()
    BF16_BF16_F32_X3 = enum.auto()
    BF16_BF16_F32_X6 = enum.auto()
    BF16_BF16_F32_X9 = enum.auto()
    TF32_TF32_F32 = enum.auto()
    TF32_TF32_F32_X3 = enum.auto()
    F32_F32_F32 = enum.auto()
    F64_F64_F64 = enum.auto()

    def __repr__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    def __str__(self) -> str:
        return self.name

    @property
    def supported_lhs_types(self):
        """The operand dtypes the preset computes in (None: any); another is converted to the
        first of them."""
        from ir import dtypes as _dt
        name = self.name
        if name == "DEFAULT" or name.startswith("ANY_F8"):
            return None
        if name.startswith("F16_"):
            return (np.dtype(np.float16),)
        if name in ("BF16_BF16_BF16", "BF16_BF16_F32"):
            return (_dt.bfloat16, np.dtype(np.float32))
        if name == "F64_F64_F64":
            return (np.dtype(np.float64),)
        return (np.dtype(np.float32),)

    @property
    def supported_rhs_types(self):
        return self.supported_lhs_types

    @property
    def accumulation_type(self):
        """The dtype the products are summed in (None: the result's)."""
        from ir import dtypes as _dt
        name = self.name
        if name in ("DEFAULT", "ANY_F8_ANY_F8_ANY", "ANY_F8_ANY_F8_ANY_FAST_ACCUM"):
            return None
        return {"F16_F16_F16": np.dtype(np.float16), "BF16_BF16_BF16": _dt.bfloat16,
                "F64_F64_F64": np.dtype(np.float64)}.get(name, np.dtype(np.float32))

    def supported_output_types(self, lhs_dtype, rhs_dtype):
        """The accumulation dtypes the preset allows for these operands (None: any)."""
        from ir import dtypes as _dt
        name = self.name
        if name in ("ANY_F8_ANY_F8_F32", "ANY_F8_ANY_F8_F32_FAST_ACCUM"):
            return (np.dtype(np.float32), np.dtype(np.float16), _dt.bfloat16) + _dt.FLOAT8
        low = {"F16_F16_F32": np.dtype(np.float16), "BF16_BF16_F32": _dt.bfloat16}.get(name)
        if low is not None:
            both = np.promote_types(lhs_dtype, rhs_dtype) if lhs_dtype != rhs_dtype else lhs_dtype
            return ((np.dtype(np.float32), low) if np.dtype(both) == low
                    else (np.dtype(np.float32),))
        acc = self.accumulation_type
        return None if acc is None else (acc,)


# The presets XLA's CPU backend computes; JAX refuses the others there (shardc computes as a
# CPU does).
CPU_DOT_ALGORITHMS = frozenset({
    DotAlgorithmPreset.DEFAULT, DotAlgorithmPreset.F16_F16_F16, DotAlgorithmPreset.F32_F32_F32,
    DotAlgorithmPreset.F64_F64_F64, DotAlgorithmPreset.BF16_BF16_F32,
    DotAlgorithmPreset.BF16_BF16_F32_X3, DotAlgorithmPreset.BF16_BF16_F32_X6})


def algorithm_compute_types(algorithm, lhs_dtype, rhs_dtype, out_dtype):
    """The (lhs, rhs, accumulation) dtypes a dot algorithm computes in for these operand and
    result dtypes (accumulation None: the result's), as JAX's ``get_algorithm_compute_types``."""
    if isinstance(algorithm, DotAlgorithm):
        return tuple(np.dtype(t) for t in (algorithm.lhs_precision_type,
                                           algorithm.rhs_precision_type,
                                           algorithm.accumulation_type))

    def convert(dtype, targets):
        if targets is None or np.dtype(dtype) in targets:
            return np.dtype(dtype)
        return np.dtype(targets[0])

    lhs = convert(lhs_dtype, algorithm.supported_lhs_types)
    rhs = convert(rhs_dtype, algorithm.supported_rhs_types)
    return lhs, rhs, convert(out_dtype, algorithm.supported_output_types(lhs, rhs))


def canonical_precision(precision):
    """JAX's canonical form: None, one ``Precision`` per operand (a single value, a name or a
    pair of either given), or a ``DotAlgorithm`` or ``DotAlgorithmPreset`` (or a preset's
    name)."""
    if precision is None:
        return None
    if isinstance(precision, (DotAlgorithm, DotAlgorithmPreset)):
        return precision
    if isinstance(precision, (list, tuple)) and len(precision) == 2:
        return tuple(None if q is None else Precision(q) for q in precision)
    if isinstance(precision, str) and Precision._missing_(precision) is None:
        if precision in DotAlgorithmPreset.__members__:
            return DotAlgorithmPreset[precision]
    if isinstance(precision, (Precision, str)):
        return (Precision(precision),) * 2
    raise ValueError(f"Precision argument must be None, a Precision, a string naming one, a "
                     f"pair of them, a lax.DotAlgorithmPreset or the name of one, or a "
                     f"lax.DotAlgorithm; got {precision!r}")
# Matrix decompositions and solves on the last two dimensions (leading ones are a batch).
cholesky_p = primitive("cholesky")                       # (a): lower L with a = L L^T
qr_p = primitive("qr", multiple_results=True)            # (a)[full_matrices]: q, r
solve_p = primitive("solve")                             # (a, b): a^-1 b, b a stack of matrices
slogdet_p = primitive("slogdet", multiple_results=True)  # (a): sign, log|det|
eigh_p = primitive("eigh", multiple_results=True)        # (a): vectors, ascending values
svd_p = primitive("svd", multiple_results=True)          # (a)[full_matrices]: s, u, vt
# (a)[compute_vectors, enable_eigvec_derivs]: w(, v); the flag allows the vectors' derivative
eig_p = primitive("eig", multiple_results=True)
# LAPACK's orthogonal reductions, with its output layouts (reflectors stored in the matrix)
schur_p = primitive("schur", multiple_results=True)      # (a)[compute_vectors]: t(, z)
hessenberg_p = primitive("hessenberg", multiple_results=True)    # (a): a, taus (gehrd)
tridiagonal_p = primitive("tridiagonal", multiple_results=True)  # (a)[lower]: a, d, e, taus
geqp3_p = primitive("geqp3", multiple_results=True)      # (a, jpvt): a, jpvt, taus
LINALG = (cholesky_p, qr_p, solve_p, slogdet_p, eigh_p, svd_p, eig_p, schur_p, hessenberg_p,
          tridiagonal_p, geqp3_p)

# Identity whose tangent is zero.
stop_gradient_p = primitive("stop_gradient")
# The value in a buffer of its own (JAX's copy_p: jnp.copy, jnp.array(x, copy=True) of a traced
# value); linear, its tangent and cotangent copied too.
copy_p = primitive("copy")

# Sharding annotations outside shard_map.
sharding_constraint_p = primitive("sharding_constraint")     # [sharding]
# A value of known placement sent elsewhere (device_put where autodiff sees values): its
# transpose sends the cotangent back to ``src``.
device_put_p = primitive("device_put")     # [device, src]
# Two values of one shape laid out alike (jax.experimental.shard_alike): both unchanged, and
# propagation gives them (and the results) one layout.
shard_alike_p = primitive("shard_alike", multiple_results=True)

# Debugging.
debug_print_p = primitive("debug_print", multiple_results=True)   # [fmt]
# ``checkify.check``: an error value's leaves, raised when it holds a failure. Run at once
# eagerly; a checkified function turns it into its error result; a program compiled with one
# left is an error (a debug check is dropped).
check_p = primitive("check", multiple_results=True)     # (*error leaves)[err_tree, debug]
# inspect_array_sharding of a value whose layout is decided when the program is compiled: the
# callback is called then with it, and the equation removed (``compiler.inspection``).
inspect_sharding_p = primitive("inspect_sharding", multiple_results=True)   # [callback]

# Higher-order primitives.
shard_map_p = primitive("shard_map", multiple_results=True, kind="higher")
scan_p = primitive("scan", multiple_results=True, kind="higher")       # [jaxpr, length, reverse, num_consts, num_carry]
while_p = primitive("while", multiple_results=True, kind="higher")     # [cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts]
cond_p = primitive("cond", multiple_results=True, kind="higher")       # (index, *operands)[branches]
CONTROL_FLOW = (scan_p, while_p, cond_p)
remat_p = primitive("remat", multiple_results=True, kind="higher")     # [jaxpr, saved]
# Functions with user-defined derivatives: the primal program, run as is; the rules are used by
# autodiff only (compiler/custom_ad.py).
custom_jvp_call_p = primitive("custom_jvp_call", multiple_results=True, kind="higher")
#   [jaxpr, jvp, name, num_consts, symbolic_zeros]
custom_vjp_call_p = primitive("custom_vjp_call", multiple_results=True, kind="higher")
#   [jaxpr, fwd, bwd, name, num_consts, symbolic_zeros]
# A function with its own batching rule: run as its program, batched by the user's rule.
custom_vmap_call_p = primitive("custom_vmap_call", multiple_results=True, kind="higher")
#   [jaxpr, vmap_rule, name, num_consts]
CUSTOM_CALLS = (custom_jvp_call_p, custom_vjp_call_p, custom_vmap_call_p)
# ``lax.custom_linear_solve``: the solve program on every operand, run as is; ``rules`` holds
# matvec, its transpose and the two solvers, which autodiff and vmap read
# (compiler/linear_solve.py).
linear_solve_p = primitive("custom_linear_solve", multiple_results=True, kind="higher")
#   (*consts, *b)[jaxpr, rules]
# The tangent of a custom_vjp function's outputs: linear in its tangent operands, transposed by
# calling the user's bwd rule; it has no forward-mode meaning of its own.
custom_lin_p = primitive("custom_lin", multiple_results=True)
#   (*residuals, *tangents)[bwd, num_res, out_shapes, out_dtypes, out_vmas]
# ``checkpoint_name``: the identity, naming a value for remat policies.
name_p = primitive("name")                               # [name]

# The discrete Fourier transform over the last len(fft_lengths) dimensions: fft_type 'FFT',
# 'IFFT' (complex to complex, the inverse scaled by 1/n), 'RFFT' (real to the n//2+1
# non-negative frequencies of the last dimension), 'IRFFT' (their inverse, to real).
fft_p = primitive("fft")                                 # [fft_type, fft_lengths]
FFT_TYPES = ("FFT", "IFFT", "RFFT", "IRFFT")

# A Python function called on host values when the program runs (pure_callback, io_callback,
# debug.callback): inside a shard_map body once per device, on its blocks.
callback_p = primitive("callback", multiple_results=True)
#   (*args)[callback, result_avals, effect ('pure', 'io', 'debug'), vmap_method]

# Elementwise: operands and result of one shape, each element on its own (a rank-0 or size-1
# operand dimension broadcasts).
ELEMENTWISE = (UNARY + ARITHMETIC + COMPARISON + PREDICATES
               + (select_n_p, convert_element_type_p, reduce_precision_p, stop_gradient_p, copy_p,
                  name_p))
