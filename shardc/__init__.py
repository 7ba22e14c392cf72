"""shardc: write, inspect and run SPMD programs with ``shard_map``.

JAX's names, so JAX code ports by changing its imports::

    import shardc
    import shardc.numpy as jnp
    from shardc.sharding import Mesh, PartitionSpec as P
"""
from __future__ import annotations

import functools as _functools

from compiler.backend import set_backend as _set_backend
from shardc import distributed



class _UnknownBackend:
    """Installed when SHARDC_BACKEND names no backend: importing works (as JAX's does with a
    bad platform name) and the first use raises the error, so nothing runs on a guess."""

    def __init__(self, error: ValueError):
        self.error = error

    def __getattr__(self, name):
        raise ValueError(str(self.error))


if distributed.mpi_wanted():
    # under mpiexec with several processes: the MPI backend (its errors, such as devices that
    # do not split evenly over the processes, end the import on every process)
    _set_backend(distributed.select_backend())
else:
    try:
        _set_backend(distributed.select_backend())
    except ValueError as _error:
        _set_backend(_UnknownBackend(_error))


def set_backend_name(name: str) -> None:
    """Run programs on the ``'fast'`` backend (stacked over devices; the default), the
    ``'reference'`` one (one program per device, the oracle), ``'check'`` (both, results
    compared), or ``'mpi'`` (the processes of an MPI job). ``SHARDC_BACKEND`` sets the
    initial one."""
    _set_backend(distributed.backend_named(name))

from compiler.jit import clear_caches, jit as _jit, make_jaxpr  # noqa: E402
from compiler.shard_map import shard_map as _shard_map_impl  # noqa: E402
from compiler.tracing import (ConcretizationTypeError, TracerBoolConversionError,  # noqa: E402
                              aval_of as _aval_of)
from ir.sharding import Mesh, NamedSharding, PartitionSpec, ReplicationError  # noqa: E402
from runtime.array import Array  # noqa: E402
from compiler.tracing import Tracer as _Tracer  # noqa: E402
from shardc._types import ManualAxisType as _ManualAxisType  # noqa: E402

# A traced value is an Array to isinstance, as in JAX (jnp.ndarray is the same class).
Array.register(_Tracer)
from runtime.devices import Device, device_count, devices  # noqa: E402
from runtime.reference import device_put as _device_put_one  # noqa: E402

from shardc import numpy, lax, nn, tree_util, tree, sharding, debug, random  # noqa: E402,F401
from shardc import dtypes  # noqa: E402,F401
from shardc.config import config, disable_jit  # noqa: E402 (jax.config: shardc/config.py)
from shardc.config import STATES as _STATES  # noqa: E402
globals().update(_STATES)     # with shardc.enable_x64(True): ..., shardc.debug_nans, ...
from shardc import scipy  # noqa: E402,F401
from shardc._extras import (default_backend, device_get, eval_shape, named_call,  # noqa: E402
                            named_scope, smap)
from shardc._jacobians import hessian, jacfwd, jacrev  # noqa: E402
from shardc.sharding import reshard  # noqa: E402
from shardc.batching_api import vmap  # noqa: E402
from shardc.ledger import comm_ledger  # noqa: E402
from compiler.autodiff import grad, jvp, value_and_grad, vjp  # noqa: E402
from compiler.remat import remat  # noqa: E402
# custom_jvp/custom_vjp, linearize, checkpoint policies and names, effects_barrier.
from compiler.custom_ad import custom_jvp, custom_vjp  # noqa: E402
from compiler.linearize import linearize  # noqa: E402
from shardc import ad_checkpoint, custom_derivatives  # noqa: E402,F401
from shardc.ad_checkpoint import checkpoint_policies  # noqa: E402


def effects_barrier():
    """Wait until every pending effect has happened: programs here run synchronously, so
    everything has already happened when this is called."""


_INFER = object()   # in_specs not given: take each argument's sharding


def shard_map(f=None, *, mesh=None, in_specs=_INFER, out_specs=None, check_vma=True,
              axis_names=frozenset()):
    """Map ``f`` over blocks of its arguments on ``mesh`` (the 2025 call form).

    Each argument is split into blocks by its ``in_specs`` entry; ``f`` runs once per device
    on its blocks and may communicate with collectives (``lax.psum`` ...); outputs are
    assembled by ``out_specs``. ``f=None`` returns a decorator.

    - ``mesh`` omitted: the mesh of ``shardc.set_mesh`` (or ``sharding.use_mesh``) current
      when the function is called, as in JAX; defining it needs no mesh.
    - ``in_specs`` omitted: each argument's own spec when it is laid out on the mesh (under
      ``jit`` and ``grad`` too: traced values keep their layout), else ``P()``;
      ``in_specs=None``: every argument is static (passed unchanged).
    - ``check_vma``: True checks replication statically (SEMANTICS 3); False checks nothing;
      ``'runtime'`` runs the program and verifies that devices holding copies of an output
      hold equal blocks (by value: -0.0 equals 0.0, NaN equals NaN), naming those that differ.

    >>> @partial(shard_map, mesh=mesh, in_specs=P('x'), out_specs=P())
    ... def total(x_block):
    ...     return lax.psum(x_block.sum(), 'x')
    """
    if f is None:
        return _functools.partial(shard_map, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                                  check_vma=check_vma, axis_names=axis_names)
    axis_names = _axis_name_set(axis_names)
    if mesh is not None:
        if in_specs is not _INFER and in_specs is not None:
            return _shard_map_impl(f, mesh, in_specs, out_specs, check_vma=check_vma,
                                   flag="check_vma", manual_axes=axis_names)
        # what can be checked before the call is checked now, as when in_specs are given
        _shard_map_impl(f, mesh, PartitionSpec(), out_specs, check_vma=check_vma,
                        flag="check_vma", manual_axes=axis_names)
    elif not callable(f):
        _shard_map_impl(f, None, PartitionSpec(), out_specs)     # raises its TypeError

    @_functools.wraps(f)
    def resolved_at_call(*args, **kwargs):
        call_mesh = mesh if mesh is not None else _current_mesh()
        if in_specs is None:
            specs = tuple(None for _ in args)
        elif in_specs is _INFER:
            specs = tuple(tree_util.tree_map(lambda v: _own_spec(v, call_mesh), a)
                          for a in args)
        else:
            specs = in_specs
        return _shard_map_impl(f, call_mesh, specs, out_specs, check_vma=check_vma,
                               flag="check_vma", manual_axes=axis_names)(*args, **kwargs)

    return resolved_at_call


def _current_mesh():
    """The mesh of the enclosing shard_map body (a nested shard_map), else the one set."""
    from compiler.shard_map import current_shard_context
    body = current_shard_context()
    current = body.mesh if body is not None else sharding.get_mesh()
    if current is None:
        raise ValueError("shard_map requires a mesh: pass mesh=, or call it under "
                         "shardc.set_mesh(mesh) (or `with shardc.sharding.use_mesh(mesh):`)")
    return current


def _axis_name_set(axis_names) -> frozenset:
    if not isinstance(axis_names, (set, frozenset)):
        raise TypeError("`axis_names` argument of shard_map should be of type `frozenset` or "
                        f"`set`. Got type: {type(axis_names)}")
    return frozenset(axis_names)


def _own_spec(value, mesh):
    from compiler.layouts import UNKNOWN, layout_of
    layout = layout_of(value)
    if layout is UNKNOWN:
        raise ValueError(
            "shard_map was given no in_specs, so it reads each argument's layout, but an "
            f"argument of type {_aval_of(value).str_short()} was computed from arrays laid out "
            "on a mesh by an operation whose layout shardc does not follow (it follows "
            "elementwise operations only). Pass in_specs, or lay the argument out with "
            "device_put or lax.with_sharding_constraint first.")
    spec_of = getattr(layout, "spec", None)
    if spec_of is not None and getattr(layout, "mesh", None) == mesh:
        return spec_of
    return PartitionSpec()


def device_put(x, device=None):
    """Lay out ``x`` (a pytree) by ``device``: a NamedSharding, a PartitionSpec on the current
    mesh, a device, or a pytree prefix of those; default device 0."""
    from compiler.tracing import check_jax_leaves
    from compiler.tree import broadcast_prefix, tree_flatten, tree_unflatten
    leaves, treedef = tree_flatten(x)
    check_jax_leaves(leaves, x, lambda path: f"device_put: x{path}")
    if device is None:
        return tree_unflatten(treedef, [_device_put_one(v) for v in leaves])
    is_leaf = lambda s: not isinstance(s, (tuple, list, dict)) or isinstance(s, PartitionSpec)
    targets = broadcast_prefix(device, x, is_leaf=is_leaf, name="device_put sharding")
    shardings = [sharding.resolve_sharding(t, "device_put") for t in targets]
    from compiler.backend import get_backend
    from compiler.tree import leaf_paths
    labels = lambda: [f"device_put x{path}" for path in leaf_paths(x)]   # for errors only
    return tree_unflatten(treedef, get_backend().put(leaves, shardings, labels))


def make_mesh(axis_shapes, axis_names, axis_types=None, *, devices=None):
    """A mesh of the first ``prod(axis_shapes)`` devices, in order. ``axis_types`` are
    recorded (``mesh.axis_types``) but every shard_map axis is manual here."""
    import math
    import numpy as _np
    from runtime.devices import devices as _all
    pool = list(_all() if devices is None else devices)
    n = math.prod(axis_shapes)
    if n > len(pool):
        raise ValueError(f"make_mesh: the mesh shape {tuple(axis_shapes)} needs {n} devices, "
                         f"but only {len(pool)} are available")
    array = _np.empty(n, dtype=object)
    for k in range(n):
        array[k] = pool[k]
    return Mesh(array.reshape(tuple(axis_shapes)), tuple(axis_names), axis_types=axis_types)


def jit(fun=None, **options):
    """Compile ``fun``: traced once per signature (shapes, dtypes, shardings, static
    arguments), lowered to per-device programs, cached. ``in_shardings``/``out_shardings``
    take shardings, PartitionSpecs on the current mesh, devices, or pytree prefixes of those.
    See ``compiler.jit.jit`` for every option.

    >>> @partial(jit, static_argnames='n', out_shardings=NamedSharding(mesh, P('x')))
    ... def power(x, n):
    ...     return x ** n
    """
    return _jit(fun, resolve=sharding.resolve_sharding, **options)


set_mesh = sharding.set_mesh

# --- several processes (shardc/distributed.py, runtime/mpi/) ---
from runtime.devices import process_count, process_index, local_devices  # noqa: E402
from shardc.distributed import (make_array_from_callback,  # noqa: E402
                                make_array_from_process_local_data)


def local_device_count() -> int:
    """The number of devices this process holds."""
    return len(local_devices())


P = PartitionSpec


def typeof(x):
    """The abstract type of ``x``: shape, dtype and the mesh axes it varies over (``.vma``)."""
    if isinstance(x, random.PRNGKeyArray):
        return _key_type(x)
    return _TypeOf(_aval_of(x), x)


def _key_type(keys):
    """A key array's type: its own shape and key dtype (``key<fry>[3]``), its data's vma."""
    of_data = _TypeOf(_aval_of(keys._base), keys._base)
    of_data.shape, of_data.ndim, of_data.dtype = keys.shape, keys.ndim, keys.dtype
    vma_text = of_data._text[of_data._text.index("]") + 1:]
    of_data._text = f"{keys.dtype.name}[{','.join(map(str, keys.shape))}]{vma_text}"
    return of_data


class _TypeOf:
    def __init__(self, aval, value):
        self.aval = aval
        self.shape = aval.shape
        self.dtype = aval.dtype
        self.ndim = aval.ndim
        self.vma = aval.vma
        # JAX's spelling of the vma: typeof(x).manual_axis_type.varying (and .mat)
        self.manual_axis_type = self.mat = _ManualAxisType(varying=aval.vma)
        # an Array's layout; under jit and grad, the layout of the argument traced
        self.sharding = getattr(value, "sharding", None)
        order = value._axis_order() if hasattr(value, "_axis_order") else ()
        self._text = aval.str_long(order)

    def __str__(self):
        return self._text

    __repr__ = __str__


checkpoint = remat


class ShapeDtypeStruct:
    """A stand-in argument with only a shape, a dtype and optionally a sharding: enough to
    trace and lower (``jit(f).lower(ShapeDtypeStruct((8, 16), jnp.float32))``)."""

    def __init__(self, shape, dtype, sharding=None):
        from ir.core import Aval
        from ir import dtypes
        self.shape = tuple(shape)
        self.dtype = dtypes.canonicalize(dtype)
        self.sharding = sharding
        self.aval = Aval(self.shape, self.dtype)

    def __repr__(self):
        return f"ShapeDtypeStruct(shape={self.shape}, dtype={self.dtype.name})"


def block_until_ready(x):
    return x


__all__ = [
    "Array", "ShapeDtypeStruct", "ReplicationError", "Mesh", "NamedSharding", "PartitionSpec", "device_count", "device_put", "devices",
    "jit", "make_jaxpr", "make_mesh", "grad", "value_and_grad", "vjp", "jvp", "remat", "checkpoint", "set_mesh", "P", "random", "shard_map", "typeof", "vmap", "numpy", "lax", "nn",
    "tree_util", "sharding", "debug", "ConcretizationTypeError", "TracerBoolConversionError",
    "custom_jvp", "custom_vjp", "linearize", "checkpoint_policies", "effects_barrier", "clear_caches",
    "ad_checkpoint", "custom_derivatives", "config", "disable_jit", "dtypes", *_STATES,
    "distributed", "process_index", "process_count", "local_devices", "local_device_count",
    "make_array_from_callback", "make_array_from_process_local_data",
]
