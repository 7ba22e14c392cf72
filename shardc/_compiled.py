"""The functions JAX runs as compiled programs (``jnp.mean``, ``nn.relu``, ``random.split``:
jitted in JAX), for the transfer guards: shardc runs them op by op, binding their constants
at once, where JAX's constants are part of the program. ``compiled_in_jax`` marks one: with
a guard set, its arguments are checked as a jitted call's are (a numpy array or a Python
number among those JAX does not take as static is an implicit host-to-device transfer), and
nothing inside it is; with none set it costs one read."""
from __future__ import annotations

import functools
import inspect

from compiler import tree
from ir import transfer_guard as _transfer_guard
from runtime.array import Array, SingleDeviceSharding
from runtime.placement import guard_inputs

__all__ = ["compiled_in_jax", "mark_compiled"]


def compiled_in_jax(fun, static_argnames=()):
    """``fun`` guarded as a function JAX jits with ``static_argnames`` (its other arguments
    are the program's inputs)."""
    static = frozenset(static_argnames)
    signature = []

    @functools.wraps(fun)
    def compiled(*args, **kwargs):
        if not _transfer_guard.active:
            return fun(*args, **kwargs)
        if not signature:
            signature.append(inspect.signature(fun))
        _guard_arguments(signature[0], static, args, kwargs)
        with _transfer_guard.program_scope():
            return fun(*args, **kwargs)
    return compiled


def _guard_arguments(signature, static, args, kwargs) -> None:
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return                      # the function raises its own error for the call
    inputs = [value for name, value in bound.arguments.items() if name not in static]
    leaves = [v for v in tree.tree_leaves(inputs)
              if isinstance(v, (Array, *_transfer_guard.HOST_TYPES))]
    committed = next((v.sharding for v in leaves if isinstance(v, Array) and v._committed
                      and isinstance(v.sharding, SingleDeviceSharding)), None)
    guard_inputs(leaves, committed)


def mark_compiled(namespace: dict, table: dict) -> None:
    """Replace each function ``table`` names in ``namespace`` (a module's globals) by its
    ``compiled_in_jax`` form, with the static argument names given. A ``jnp.ufunc`` object
    (``logaddexp``) stays itself: its methods (``reduce``, ``at``, ...) are its own."""
    for name, static_argnames in table.items():
        if inspect.isfunction(namespace[name]):
            namespace[name] = compiled_in_jax(namespace[name], static_argnames)


# What JAX 0.10 jits, by module, with its static argument names (jax.numpy's, jax.nn's and
# jax.numpy.linalg's decorators; jax.random's public functions pass all but these to jitted
# implementations). Those shardc runs with constants bound at once are listed.
NUMPY = {
    "allclose": ('equal_nan',), "angle": ('deg',), "around": ('decimals',),
    "average": ('axis', 'returned', 'keepdims'), "corrcoef": ('rowvar', 'dtype'),
    "count_nonzero": ('axis', 'keepdims'), "cov": ('rowvar', 'bias', 'ddof', 'dtype'),
    "deg2rad": (), "degrees": (), "diag": ('k',), "diagonal": ('offset', 'axis1', 'axis2'),
    "divmod": (), "floor_divide": (), "frexp": (),
    "geomspace": ('num', 'endpoint', 'dtype', 'axis'), "gradient": ('axis', 'edge_order'),
    "heaviside": (), "hypot": (), "i0": (), "imag": (), "isclose": ('equal_nan',),
    "iscomplex": (), "isin": ('assume_unique', 'invert', 'method'), "isinf": (), "isreal": (),
    "linspace": ('num', 'endpoint', 'retstep', 'dtype', 'axis', 'device'), "log10": (),
    "log2": (), "logaddexp": (), "logaddexp2": (), "mean": ('axis', 'dtype', 'keepdims'),
    "median": ('axis', 'overwrite_input', 'keepdims'), "mod": (), "modf": (), "nan_to_num": (),
    "nanargmax": ('axis', 'keepdims'), "nanargmin": ('axis', 'keepdims'),
    "nancumprod": ('axis', 'dtype'), "nancumsum": ('axis', 'dtype'),
    "nanmax": ('axis', 'keepdims'), "nanmean": ('axis', 'dtype', 'keepdims'),
    "nanmedian": ('axis', 'overwrite_input', 'keepdims'), "nanmin": ('axis', 'keepdims'),
    "nanprod": ('axis', 'dtype', 'keepdims'), "nanstd": ('axis', 'dtype', 'keepdims'),
    "nansum": ('axis', 'dtype', 'keepdims'), "nanvar": ('axis', 'dtype', 'keepdims'),
    "packbits": ('axis', 'bitorder'), "polyval": ('unroll',), "rad2deg": (), "radians": (),
    "reciprocal": (), "remainder": (), "rint": (), "round": ('decimals',), "sinc": (),
    "spacing": (), "trace": ('axis1', 'axis2', 'dtype'), "trapezoid": ('axis',),
    "tril": ('k',), "triu": ('k',), "trunc": (), "unwrap": ('axis',),
}
LINALG = {
    "cond": ('p',), "diagonal": ('offset', 'axis1', 'axis2'),
    "lstsq": ('rcond', 'numpy_resid'), "matrix_rank": ('hermitian',), "pinv": ('hermitian',),
}
NN = {
    "celu": (), "elu": (), "hard_sigmoid": (), "hard_silu": (), "hard_swish": (),
    "hard_tanh": (), "leaky_relu": (), "log1mexp": (), "log_sigmoid": (),
    "log_softmax": ('axis',), "logmeanexp": ('axis', 'keepdims'), "mish": (), "relu": (),
    "relu6": (), "selu": (), "soft_sign": (), "softplus": (), "sparse_plus": (),
    "sparse_sigmoid": (), "squareplus": (), "standardize": ('axis', 'algorithm'),
}
_DRAW = ('shape', 'dtype')
RANDOM = {
    "split": ('num',), "bits": _DRAW, "normal": _DRAW, "cauchy": _DRAW, "exponential": _DRAW,
    "gumbel": ('shape', 'dtype', 'mode'), "laplace": _DRAW, "logistic": _DRAW,
    "maxwell": _DRAW, "rademacher": _DRAW, "dirichlet": _DRAW,
    "categorical": ('axis', 'shape', 'replace', 'mode'),
    "multivariate_normal": ('shape', 'dtype', 'method'),
    "orthogonal": ('n', 'shape', 'dtype', 'm'),
    # an int x is the size of the range permuted (JAX's takes it so, no transfer)
    "permutation": ('x', 'axis', 'independent'),
}
