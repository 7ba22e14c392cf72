"""``jax.experimental.shard_map``: the old call form, ``shard_map(f, mesh, in_specs,
out_specs, check_rep=True)``, manual over every mesh axis. Deprecated in JAX (reading the name
warns, as JAX's does); ``shardc.shard_map`` is the current form. JAX 0.10 has dropped its
``auto=`` argument (use ``axis_names=`` of ``shardc.shard_map``) and ``pbroadcast``
(``lax.pcast(x, axes, to='varying')``)."""
from __future__ import annotations

import warnings

from compiler.shard_map import shard_map as _shard_map

__all__ = ["shard_map"]

_DEPRECATED = "jax.experimental.shard_map is deprecated in v0.8.0. Used jax.shard_map instead."


def _legacy_shard_map(f, mesh, in_specs, out_specs, check_rep: bool = True):
    """Map ``f`` over blocks of its arguments (the old call form; see ``shardc.shard_map``),
    manual over every axis of ``mesh``; ``check_rep`` is the current ``check_vma``."""
    return _shard_map(f, mesh, in_specs, out_specs, check_vma=check_rep, flag="check_rep")


_legacy_shard_map.__name__ = _legacy_shard_map.__qualname__ = "shard_map"


def __getattr__(name):
    if name == "shard_map":
        warnings.warn(_DEPRECATED, DeprecationWarning, stacklevel=2)
        return _legacy_shard_map
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
