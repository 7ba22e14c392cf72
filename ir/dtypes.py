"""Dtypes as JAX has them: the promotion lattice, weakly typed Python scalars, the ML floats of
``ml_dtypes`` (bfloat16, the float8 family, ...) and the x64 switch.

With x64 off (the default) 64-bit types are canonicalised to 32 bits and Python scalars
default to float32/int32; with x64 on (``set_x64(True)``) 64-bit types are kept and Python
scalars default to float64/int64. Everything else reads the defaults from here at call time
(``dtypes.float_``), so the switch is this module's state alone; caches that depend on it
are registered with ``register_cache`` and cleared when it flips.

    >>> promote_types(bfloat16, np.dtype('float16'))
    dtype('float32')
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

bool_ = np.dtype("bool")
bfloat16 = np.dtype(ml_dtypes.bfloat16)

# The ML dtypes JAX exposes, by kind. numpy files them under kind 'V', so every kind test in
# shardc goes through is_float / is_int / is_inexact below rather than np.issubdtype.
FLOAT8 = tuple(np.dtype(getattr(ml_dtypes, name)) for name in (
    "float8_e3m4", "float8_e4m3", "float8_e8m0fnu", "float8_e4m3b11fnuz", "float8_e4m3fn",
    "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"))
SMALL_FLOATS = tuple(np.dtype(getattr(ml_dtypes, name)) for name in (
    "float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn")) + FLOAT8
ML_FLOATS = SMALL_FLOATS + (bfloat16,)
SMALL_SIGNED = (np.dtype(ml_dtypes.int2), np.dtype(ml_dtypes.int4))
SMALL_UNSIGNED = (np.dtype(ml_dtypes.uint2), np.dtype(ml_dtypes.uint4))
SMALL_INTS = SMALL_SIGNED + SMALL_UNSIGNED

_STANDARD = tuple(np.dtype(n) for n in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128"))
ALL = _STANDARD + SMALL_INTS + ML_FLOATS       # every dtype a shardc array may have


class TypePromotionError(ValueError):
    """Raised when dtypes have no implicit promotion (JAX's ``TypePromotionError``)."""


def real_dtype(dtype) -> np.dtype:
    """The real dtype of a complex one's parts (complex64 -> float32); others as they are."""
    dtype = np.dtype(dtype)
    return {np.dtype("complex64"): np.dtype("float32"),
            np.dtype("complex128"): np.dtype("float64")}.get(dtype, dtype)


def complex_dtype(dtype) -> np.dtype:
    """The complex dtype whose parts are ``dtype`` (float64 -> complex128, smaller floats ->
    complex64); a complex one as it is."""
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.complexfloating):
        return dtype
    return np.dtype("complex128") if dtype == np.dtype("float64") else np.dtype("complex64")


# --- the x64 switch -------------------------------------------------------------------------

_CANONICAL_X32 = {
    np.dtype("float64"): np.dtype("float32"),
    np.dtype("int64"): np.dtype("int32"),
    np.dtype("uint64"): np.dtype("uint32"),
    np.dtype("complex128"): np.dtype("complex64"),
}
_canonical = _CANONICAL_X32
_x64 = False
float_ = np.dtype("float32")         # the defaults; set_x64 rebinds them
int_ = np.dtype("int32")
uint_ = np.dtype("uint32")
complex_ = np.dtype("complex64")
# axis_index, psum of bools and cond/switch indices are int32 in either mode, as in JAX
int32 = np.dtype("int32")
_caches: list = []


def x64_enabled() -> bool:
    """Whether 64-bit types are kept (JAX's ``jax_enable_x64``)."""
    return _x64


_explicit_x64 = "warn"      # a 64-bit dtype asked for with x64 off: "warn", "error", "allow"


def set_explicit_x64_mode(mode: str) -> None:
    """What asking for a 64-bit dtype with x64 off does (JAX's ``jax_explicit_x64_dtypes``):
    ``"warn"`` and truncate, ``"error"``, or ``"allow"``: JAX then keeps the 64-bit dtype,
    which shardc cannot (its dtypes follow x64 alone), so it refuses."""
    global _explicit_x64
    _explicit_x64 = mode


def set_x64(enabled: bool) -> None:
    """Keep 64-bit types and default Python scalars to them (True), or not (False)."""
    global _x64, _canonical, float_, int_, uint_, complex_
    _x64 = bool(enabled)
    _canonical = {} if _x64 else _CANONICAL_X32
    bits = 64 if _x64 else 32
    float_, int_ = np.dtype(f"float{bits}"), np.dtype(f"int{bits}")
    uint_, complex_ = np.dtype(f"uint{bits}"), np.dtype(f"complex{2 * bits}")
    _clear_caches()


def _clear_caches() -> None:
    for cache in _caches:
        cache.clear()


def register_cache(cache: dict) -> dict:
    """Clear ``cache`` whenever x64 or the promotion mode flips (a cache of results that
    depend on them)."""
    _caches.append(cache)
    return cache

# The dtypes a program computes on (the 64-bit ones canonicalize to 32 bits): no strings, bytes,
# objects, dates, structured records or extended precision.
_VALID = frozenset(ALL)


def is_valid(dtype) -> bool:
    """Whether arrays of ``dtype`` are JAX values (bool, integer, floating or complex)."""
    try:
        return np.dtype(dtype) in _VALID
    except TypeError:                 # not a dtype at all
        return False


def canonicalize(dtype) -> np.dtype:
    """The dtype JAX would use: with x64 off float64 -> float32, int64 -> int32, ...

    Raises TypeError for a dtype no program computes on (strings, objects, ...)."""
    dtype = np.dtype(dtype)
    dtype = _canonical.get(dtype, dtype)
    if dtype not in _VALID:
        raise TypeError(f"dtype {dtype.name} is not a valid JAX type: arrays hold bool, "
                        "integer, floating or complex numbers")
    return dtype


def requested(dtype, function: str) -> np.dtype:
    """``canonicalize(dtype)`` for a dtype a user asked ``function`` for, with JAX's warning
    when x64 is off and it asks for a 64-bit one (``function`` "": naming none, as
    ``jax.random``'s)."""
    want = np.dtype(dtype)
    got = canonicalize(want)
    # Python's int, float and complex name the default types: no warning (as in JAX)
    if got == want or dtype in (int, float, complex):
        return got
    asked = f" requested in {function}" if function else ""
    if _explicit_x64 == "allow":
        raise NotImplementedError(
            f"Explicitly requested dtype {want}{asked} under "
            "jax_explicit_x64_dtypes='allow': shardc keeps 64-bit dtypes only with "
            "jax_enable_x64 on, and does not truncate it quietly")
    if _explicit_x64 == "error":
        raise ValueError(f"Explicitly requested dtype {want}{asked} is not "
                         "available. To enable more dtypes, set the jax_enable_x64 or "
                         "allow_explicit_x64_dtypes configuration options.See "
                         "https://github.com/jax-ml/jax#current-gotchas for more.")
    import warnings
    warnings.warn(f"Explicitly requested dtype {want}{asked} is not "
                  f"available, and will be truncated to dtype {got}. To enable more "
                  "dtypes, set the jax_enable_x64 configuration option or the "
                  "JAX_ENABLE_X64 shell environment variable. See "
                  "https://github.com/jax-ml/jax#current-gotchas for more.", stacklevel=4)
    return got


# --- kinds ------------------------------------------------------------------------------------

BOOL, INT, FLOAT, COMPLEX, OTHER = range(5)
_KINDS: dict = {}


def kind(dtype) -> int:
    """BOOL, INT, FLOAT, COMPLEX or OTHER; ml_dtypes' types count as the numbers they are."""
    try:
        return _KINDS[dtype]
    except (KeyError, TypeError):
        pass
    found = _KINDS[np.dtype(dtype)] = _kind(np.dtype(dtype))
    try:
        _KINDS[dtype] = found          # a scalar type or name: found directly next time
    except TypeError:
        pass
    return found


def _kind(dtype: np.dtype) -> int:
    if dtype == bool_:
        return BOOL
    if np.issubdtype(dtype, np.integer) or dtype in SMALL_INTS:
        return INT
    if np.issubdtype(dtype, np.floating) or dtype in ML_FLOATS:
        return FLOAT
    if np.issubdtype(dtype, np.complexfloating):
        return COMPLEX
    return OTHER


def is_float(dtype) -> bool:
    return kind(dtype) == FLOAT


def is_int(dtype) -> bool:
    return kind(dtype) == INT


def is_bool(dtype) -> bool:
    return np.dtype(dtype) == bool_


def bit_width(dtype) -> int:
    """Bits per element as JAX counts them: int4, uint4 and float4 are 4, int2 and uint2 are 2,
    the float6 types 6 (numpy stores each in a byte, the value's code in its low bits)."""
    dtype = np.dtype(dtype)
    if dtype in SMALL_INTS:
        return ml_dtypes.iinfo(dtype).bits
    if dtype in SMALL_FLOATS:
        return ml_dtypes.finfo(dtype).bits
    return 8 * dtype.itemsize


def is_inexact(dtype) -> bool:
    return kind(dtype) in (FLOAT, COMPLEX)


def to_inexact(dtype) -> np.dtype:
    """The inexact dtype JAX computes a value of ``dtype`` in where it needs one (``jnp.mean``,
    ``true_divide``, ``sin`` of integers): an inexact dtype itself; booleans and integers up
    to 32 bits float32, even with x64 on; 64-bit integers float64."""
    dtype = np.dtype(dtype)
    if is_inexact(dtype):
        return dtype
    return canonicalize(np.float64 if is_int(dtype) and bit_width(dtype) == 64
                        else np.float32)


# the dtypes XLA divides by a broadcast value as a product with its reciprocal (bfloat16 is
# computed in float32 first; complex numbers are divided as written)
_RECIPROCAL_DIVISION = frozenset(np.dtype(t) for t in (np.float16, np.float32, np.float64))


def divides_by_reciprocal(dtype) -> bool:
    """Whether XLA computes ``a / b`` of ``dtype``, ``b`` broadcast, as ``a * (1 / b)``."""
    return (dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)) in _RECIPROCAL_DIVISION


def is_unsigned(dtype) -> bool:
    dtype = np.dtype(dtype)
    return np.issubdtype(dtype, np.unsignedinteger) or dtype in SMALL_UNSIGNED


def computation_dtype(dtype) -> np.dtype:
    """The dtype ``jnp.sum``, ``prod``, ``mean`` and ``var`` compute a reduction of ``dtype``
    in: float32 for bfloat16 and float16 (the result is cast back), else ``dtype``."""
    dtype = np.dtype(dtype)
    return np.dtype("float32") if dtype in _UPCAST_FOR_REDUCTION else dtype


_UPCAST_FOR_REDUCTION = (bfloat16, np.dtype("float16"))


def finfo(dtype):
    """Machine limits of a floating dtype, ml_dtypes' floats included (``jnp.finfo``)."""
    return ml_dtypes.finfo(_info_dtype(dtype))


def iinfo(dtype):
    """Machine limits of an integer dtype, int4 and friends included (``jnp.iinfo``)."""
    return ml_dtypes.iinfo(_info_dtype(dtype))


def _info_dtype(dtype) -> np.dtype:
    if not isinstance(dtype, type):
        dtype = getattr(dtype, "dtype", dtype)   # an array, or a dtype-like (not a class)
    return np.dtype(dtype)


def weak_scalar_dtype(value) -> np.dtype:
    """The default dtype of a Python scalar (int32/float32, or 64-bit with x64 on)."""
    if isinstance(value, (bool, np.bool_)):
        return bool_
    if isinstance(value, int):
        return int_
    if isinstance(value, float):
        return float_
    if isinstance(value, complex):
        return complex_
    raise TypeError(f"not a Python scalar: {value!r}")


# --- printing ---------------------------------------------------------------------------------

def _short_name(dtype: np.dtype) -> str:
    """JAX's short names: f32, i32, u8, c64, bf16, f8_e4m3fn, i4, bool."""
    return (dtype.name.replace("bfloat", "bf").replace("float", "f").replace("uint", "u")
            .replace("int", "i").replace("complex", "c"))


SHORT_NAMES = {dtype.name: _short_name(dtype) for dtype in ALL}
BY_NAME = {dtype.name: dtype for dtype in ALL}
_BY_SHORT_NAME = {SHORT_NAMES[dtype.name]: dtype for dtype in ALL}


def short_name(dtype) -> str:
    """``f32``, ``bf16``, ``f8_e4m3fn``: the dtype as types print it in IR text."""
    if np.dtype(dtype) == FLOAT0:
        return "float0"
    return SHORT_NAMES[np.dtype(dtype).name]


def dtype_name(dtype) -> str:
    """``float32``, ``bfloat16``, ``float0``: the dtype as JAX's types print it."""
    return "float0" if np.dtype(dtype) == FLOAT0 else np.dtype(dtype).name


def from_short_name(name: str) -> np.dtype:
    """The dtype ``short_name`` prints as ``name`` (KeyError if none)."""
    return _BY_SHORT_NAME[name]


# --- promotion: JAX's lattice -----------------------------------------------------------------

# Python's int, float and complex stand for weakly typed values of their kind.
_WEAK = {INT: int, FLOAT: float, COMPLEX: complex}


def _lattice(x64: bool) -> dict:
    """Each type's immediate successors on JAX's promotion lattice (standard mode).

    Integers widen within signedness, unsigned reaching the next signed width; every integer
    meets the floats at the weak float; bfloat16 and float16 meet at float32; the sub-byte
    ints and the 4/6/8-bit floats have no successors (no implicit promotion at all).
    """
    d = np.dtype
    u8, u16, u32, u64 = d("uint8"), d("uint16"), d("uint32"), d("uint64")
    i8, i16, i32, i64 = d("int8"), d("int16"), d("int32"), d("int64")
    f16, f32, f64, c64, c128 = d("float16"), d("float32"), d("float64"), d("complex64"), \
        d("complex128")
    lattice = {
        bool_: [int],
        int: [u8, i8, *SMALL_INTS],
        u8: [i16, u16], u16: [i32, u32], u32: [i64, u64] if x64 else [i32, u64], u64: [float],
        i8: [i16], i16: [i32], i32: [i64], i64: [float],
        float: [*SMALL_FLOATS, bfloat16, f16, complex],
        bfloat16: [f32], f16: [f32], f32: [f64, c64], f64: [c128],
        complex: [c64], c64: [c128], c128: [],
    }
    lattice.update({t: [] for t in SMALL_INTS + SMALL_FLOATS})
    return lattice


def _upper_bounds(lattice: dict) -> dict:
    """Every node's set of nodes at or above it."""
    bounds = {}
    for node in lattice:
        above, todo = {node}, [node]
        while todo:
            for successor in lattice[todo.pop()]:
                if successor not in above:
                    above.add(successor)
                    todo.append(successor)
        bounds[node] = above
    return bounds


_UPPER_BOUNDS = {x64: _upper_bounds(_lattice(x64)) for x64 in (False, True)}


def _strict_lattice() -> dict:
    """JAX's strict promotion lattice: no implicit promotion between typed values; a Python
    scalar takes the type of a value of its kind (an int also a float's, a float also a
    complex's)."""
    lattice = {t: [] for t in _lattice(True) if not isinstance(t, type) or t is bool_}
    ints = [t for t in lattice if t != bool_ and kind(t) == INT]
    floats = [t for t in lattice if kind(t) == FLOAT]
    lattice[int] = [float] + ints
    lattice[float] = [complex] + floats
    lattice[complex] = [t for t in lattice if isinstance(t, np.dtype) and kind(t) == COMPLEX]
    return lattice


_STRICT_UPPER_BOUNDS = _upper_bounds(_strict_lattice())
_strict = False          # jax_numpy_dtype_promotion='strict'


def strict_promotion() -> bool:
    return _strict


def set_strict_promotion(strict: bool) -> None:
    """Promote as JAX's ``jax_numpy_dtype_promotion='strict'`` (True) or ``'standard'``."""
    global _strict
    _strict = bool(strict)
    _clear_caches()


def _node(dtype, weak: bool):
    dtype = np.dtype(dtype)
    if weak and dtype != bool_:
        return _WEAK[kind(dtype)]
    return dtype


def _least_upper_bound(nodes):
    """The least upper bound of ``nodes`` (in the operands' order, for the error message)."""
    order, nodes = list(dict.fromkeys(nodes)), set(nodes)
    bounds = _STRICT_UPPER_BOUNDS if _strict else _UPPER_BOUNDS[_x64]
    missing = [n for n in nodes if n not in bounds]
    if missing:
        raise TypeError(f"dtype {np.dtype(missing[0]).name} is not a valid array type; "
                        "shardc arrays hold bool, numbers and ml_dtypes' types")
    common = set.intersection(*(bounds[n] for n in nodes))
    least = [c for c in common if common <= bounds[c]]
    if len(least) == 1:
        return least[0]
    if _strict:
        names = tuple(str(n) for n in order)          # (JAX's: "<class 'float'>", 'int32')
        raise TypePromotionError(
            f"Input dtypes {names} have no available implicit dtype promotion path when "
            "jax_numpy_dtype_promotion=strict. Try explicitly casting inputs to the desired "
            "output type, or set jax_numpy_dtype_promotion=standard.")
    raise TypePromotionError(_no_promotion_message(order))


def _no_promotion_message(nodes) -> str:
    names = tuple(n.__name__ if isinstance(n, type) else n.name for n in nodes)
    text = f"Input dtypes {names} have no available implicit dtype promotion path."
    for group, what, cast in ((FLOAT8, "8-bit floats", "float32"),
                              (SMALL_FLOATS, "4- and 6-bit floats", "float32"),
                              (SMALL_INTS, "2- and 4-bit integers", "int32")):
        if any(n in group for n in nodes):
            return (f"{text} To avoid unintended promotion, {what} do not support implicit "
                    f"promotion; cast explicitly, e.g. x.astype('{cast}').")
    return text + " Try explicitly casting inputs to the desired output type."


def _default_of(node) -> np.dtype:
    """The dtype a weak node takes when nothing strong decides it."""
    return {int: int_, float: float_, complex: complex_}.get(node, node)


def promote_types(a, b) -> np.dtype:
    """The dtype two dtypes promote to (``jnp.promote_types``): Python's ``int``, ``float``
    and ``complex`` are weak, anything else is a strong dtype."""
    nodes = [t if t in (int, float, complex) else np.dtype(t) for t in (a, b)]
    return canonicalize(_default_of(_least_upper_bound(nodes)))


def result_type(dtypes, weak) -> np.dtype:
    """See ``_result_type``; the answer is cached per (dtypes, weak flags)."""
    key = (tuple(dtypes), tuple(weak))
    try:
        return _RESULT_TYPES[key]
    except KeyError:
        pass
    except TypeError:                  # an unhashable dtype-like: compute it
        return _result_type(dtypes, weak)
    result = _RESULT_TYPES[key] = _result_type(dtypes, weak)
    return result


_RESULT_TYPES: dict = register_cache({})


def _result_type(dtypes, weak) -> np.dtype:
    """Promote ``dtypes`` on JAX's lattice; entries flagged ``weak`` (Python scalars) only lift
    the kind: a weak int with a bfloat16 array gives bfloat16, a weak float with an int32
    array the default float. Weak values alone give their kind's default dtype.
    """
    if all(weak) and not _strict:
        nodes = [canonicalize(d) for d in dtypes]
    else:
        nodes = [_node(d, w) for d, w in zip(dtypes, weak)]
    return canonicalize(_default_of(_least_upper_bound(nodes)))


def promotes_weak(dtypes, weak) -> bool:
    """Whether values of ``dtypes`` (``weak``: which are weakly typed) promote to a weakly
    typed result, as JAX's lattice says: all are weak, or a weak one lifts the kind above
    every typed one's (an int32 array plus 2.5 is a weak float; a float32 array plus 2.5 is
    float32)."""
    if all(weak):
        return True
    if not any(weak):
        return False
    key = (tuple(dtypes), tuple(weak))
    found = _PROMOTES_WEAK.get(key)
    if found is None:
        bound = _least_upper_bound({_node(d, w) for d, w in zip(dtypes, weak)})
        # by identity: numpy finds np.dtype('int64') == int (x64's int64 is not weak)
        found = _PROMOTES_WEAK[key] = any(bound is node for node in _WEAK_NODES)
    return found


_WEAK_NODES = (int, float, complex)
_PROMOTES_WEAK: dict = register_cache({})


# JAX's dtype of no values: the cotangent of an integer or boolean input
FLOAT0 = np.dtype([("float0", np.void, 0)])


def is_float0(value) -> bool:
    """Whether ``value`` is float0 zeros (a numpy array holding nothing)."""
    return isinstance(value, np.ndarray) and value.dtype == FLOAT0
