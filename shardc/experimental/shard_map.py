"""The 2024 API: ``shard_map(f, mesh, in_specs, out_specs, check_rep=True, auto=frozenset())``."""
from __future__ import annotations

from compiler.shard_map import shard_map as _shard_map


def shard_map(f, mesh, in_specs, out_specs, check_rep: bool = True, auto=frozenset()):
    """Map ``f`` over blocks of its arguments (the old call form; see ``shardc.shard_map``)."""
    if auto:
        raise NotImplementedError(f"shard_map: auto={set(auto)} (partial-manual meshes) is not "
                                  "supported (argument auto)")
    return _shard_map(f, mesh, in_specs, out_specs, check_vma=check_rep, flag="check_rep")


def pbroadcast(x, axis_name):
    """The 2024 name of ``pvary``: mark ``x`` as varying over ``axis_name``."""
    from shardc.lax import pvary
    return pvary(x, axis_name)
