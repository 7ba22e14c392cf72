"""shardc: write, inspect and run SPMD programs with ``shard_map``.

JAX's names, so JAX code ports by changing its imports::

    import shardc
    import shardc.numpy as jnp
    from shardc.sharding import Mesh, PartitionSpec as P

Importing shardc installs the backend the environment asks for (``SHARDC_BACKEND``, an MPI
launch; ``shardc.distributed``).
"""
# The JAX release whose API and semantics shardc follows: what code reading
# ``jax.__version__`` to pick a code path must see. shardc's own version is its package's.
__version__ = "0.10.2"
__version_info__ = (0, 10, 2)

import functools as _functools
import platform as _platform
import sys as _sys

import numpy as _np

from shardc import core, distributed
from shardc.distributed import install_backend as _install_backend
from shardc.distributed import (make_array_from_callback, make_array_from_process_local_data,
                                make_array_from_single_device_arrays,
                                set_backend_name)
from compiler.autodiff import grad, jvp, linear_transpose, value_and_grad, vjp
from compiler.custom_ad import custom_jvp, custom_vjp
from compiler.custom_gradient import closure_convert, custom_gradient
from compiler.jit import clear_caches, make_jaxpr
from compiler.linearize import linearize
from compiler.remat import remat
from compiler.tracing import ConcretizationTypeError, TracerBoolConversionError
from ir.sharding import Mesh, NamedSharding, PartitionSpec, ReplicationError
from runtime.array import Array, Shard
from runtime.devices import (Device, device_count, devices, local_devices, process_count,
                             process_index)
from shardc import (ad_checkpoint, custom_batching, custom_derivatives, debug, dtypes, errors,
                    flatten_util, image, lax, monitoring, nn, numpy, ops, profiler, random, ref,
                    scipy, sharding, stages, tree, tree_util, typing)
from shardc.ref import Ref, empty_ref, free_ref, freeze, new_ref
from shardc._devices import device_put, live_arrays, local_device_count, make_mesh
from shardc._extras import (block_until_ready, copy_to_host_async, default_backend, device_get,
                            effects_barrier, eval_shape, named_call, named_scope, smap)
from shardc._jacobians import hessian, jacfwd, jacrev
from shardc._transforms import jit, pmap, shard_map
from shardc._types import ShapeDtypeStruct, typeof
from shardc.ad_checkpoint import checkpoint_policies
from shardc.batching_api import vmap
from shardc.config import STATES as _STATES
from shardc.config import TRANSFER_GUARDS as _TRANSFER_GUARDS
from shardc.config import config, disable_jit, ensure_compile_time_eval, transfer_guard
from shardc._callbacks import pure_callback
from shardc.ledger import comm_ledger
from shardc.numpy._indexing import ds
from shardc.sharding import reshard, set_mesh

P = PartitionSpec
checkpoint = remat

# JAX's top-level flag context managers (``with shardc.enable_x64(True): ...``)
enable_x64 = _STATES["enable_x64"]
debug_nans = _STATES["debug_nans"]
debug_infs = _STATES["debug_infs"]
default_matmul_precision = _STATES["default_matmul_precision"]
numpy_dtype_promotion = _STATES["numpy_dtype_promotion"]
numpy_rank_promotion = _STATES["numpy_rank_promotion"]
log_compiles = _STATES["log_compiles"]
enable_checks = _STATES["enable_checks"]
check_tracer_leaks = _STATES["check_tracer_leaks"]
checking_leaks = _functools.partial(check_tracer_leaks, True)
explain_cache_misses = _STATES["explain_cache_misses"]
default_prng_impl = _STATES["default_prng_impl"]
legacy_prng_key = _STATES["legacy_prng_key"]
threefry_partitionable = _STATES["threefry_partitionable"]
softmax_custom_jvp = _STATES["softmax_custom_jvp"]
default_device = _STATES["default_device"]
debug_key_reuse = _STATES["debug_key_reuse"]
no_tracing = _STATES["no_tracing"]
no_execution = _STATES["no_execution"]
enable_custom_prng = _STATES["enable_custom_prng"]
transfer_guard_host_to_device = _TRANSFER_GUARDS["transfer_guard_host_to_device"]
transfer_guard_device_to_device = _TRANSFER_GUARDS["transfer_guard_device_to_device"]
transfer_guard_device_to_host = _TRANSFER_GUARDS["transfer_guard_device_to_host"]

_install_backend()

# JAX's other names: jacobian is jacrev; a process was once called a host
jacobian = jacrev
float0 = dtypes.float0
host_count, host_id = process_count, process_index


def host_ids() -> list:
    """The process indices (JAX's old name for ``process_indices``)."""
    return list(range(process_count()))


def process_indices() -> list:
    """The index of every process of the job."""
    return list(range(process_count()))


def print_environment_info(return_string: bool = False):
    """The versions, devices and platform this runs with: printed, or returned as text."""
    text = (f"jax:    {__version__}\n"
            f"jaxlib: {__version__}\n"
            f"numpy:  {_np.__version__}\n"
            f"python: {_sys.version.replace(chr(10), ' ')}\n"
            f"device info: cpu-{device_count()}, {len(local_devices())} local devices "
            "(simulated by shardc)\n"
            f"process_count: {process_count()}\n"
            f"platform: {_platform.platform()}\n")
    if return_string:
        return text
    print(text)
    return None

__all__ = [
    "Array", "ConcretizationTypeError", "Device", "Mesh", "NamedSharding", "P", "PartitionSpec",
    "Ref", "ReplicationError", "ShapeDtypeStruct", "Shard", "TracerBoolConversionError", "ad_checkpoint", "core",
    "block_until_ready", "copy_to_host_async", "print_environment_info", "check_tracer_leaks", "checking_leaks", "checkpoint", "checkpoint_policies", "clear_caches",
    "closure_convert", "comm_ledger", "config", "custom_batching", "custom_derivatives",
    "custom_gradient",
    "custom_jvp", "custom_vjp", "debug",
    "debug_infs", "debug_nans", "default_backend", "default_device", "default_matmul_precision",
    "debug_key_reuse", "no_tracing", "no_execution", "default_prng_impl", "legacy_prng_key",
    "device_count", "device_get", "ds",
    "device_put",
    "devices", "disable_jit", "live_arrays",
    "distributed", "dtypes", "effects_barrier", "errors", "typing", "enable_checks",
    "enable_custom_prng", "enable_x64",
    "empty_ref", "ensure_compile_time_eval", "eval_shape", "free_ref", "freeze", "new_ref",
    "pure_callback", "ref",
    "explain_cache_misses", "flatten_util", "float0", "grad", "hessian", "host_count",
    "host_id", "host_ids",
    "jacfwd", "jacobian", "jacrev", "jit", "jvp", "lax", "ops",
    "linear_transpose", "linearize",
    "image", "local_device_count", "local_devices", "log_compiles", "make_array_from_callback",
    "make_array_from_single_device_arrays",
    "make_array_from_process_local_data", "make_jaxpr", "make_mesh", "named_call", "named_scope",
    "monitoring", "nn", "numpy", "numpy_dtype_promotion", "numpy_rank_promotion", "process_count",
    "pmap", "process_index", "process_indices", "random", "remat", "reshard", "scipy", "set_backend_name", "set_mesh",
    "shard_map", "sharding", "smap", "stages", "softmax_custom_jvp", "threefry_partitionable",
    "tree",
    "tree_util", "typeof", "value_and_grad", "vjp", "vmap", "transfer_guard",
    "transfer_guard_host_to_device", "transfer_guard_device_to_device",
    "transfer_guard_device_to_host",
]

# Names JAX 0.10 removed: reading one is its AttributeError, in its words
_REMOVED = {
    "device_put_replicated": "jax.device_put_replicated is deprecated; use jax.device_put "
                             "instead. See https://docs.jax.dev/en/latest/migrate_pmap.html"
                             "#drop-in-replacements for a drop-in replacement.",
    "device_put_sharded": "jax.device_put_sharded is deprecated; use jax.device_put instead. "
                          "See https://docs.jax.dev/en/latest/migrate_pmap.html"
                          "#drop-in-replacements for a drop-in replacement.",
}


def __getattr__(name):
    if name in _REMOVED:
        raise AttributeError(_REMOVED[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
