"""The 2024 API: ``shard_map(f, mesh, in_specs, out_specs, check_rep=True, auto=frozenset())``."""
from __future__ import annotations

from compiler.shard_map import shard_map as _shard_map
from shardc.lax import pvary

__all__ = ["shard_map", "pbroadcast"]


def shard_map(f, mesh, in_specs, out_specs, check_rep: bool = True, auto=frozenset()):
    """Map ``f`` over blocks of its arguments (the old call form; see ``shardc.shard_map``).
    ``auto``: mesh axes left automatic (the complement of the new form's ``axis_names``)."""
    manual = None
    if auto:
        names = getattr(mesh, "axis_names", ())
        unknown = [a for a in auto if a not in names]
        if unknown:
            raise ValueError(f"shard_map: auto={set(auto)} names {unknown[0]!r}, which is not an "
                             f"axis of the mesh {names}")
        manual = tuple(a for a in names if a not in auto)
        if not manual:
            raise ValueError(f"shard_map: auto={set(auto)} leaves no manual mesh axis")
    return _shard_map(f, mesh, in_specs, out_specs, check_vma=check_rep, flag="check_rep",
                      manual_axes=manual)


def pbroadcast(x, axis_name):
    """The 2024 name of ``pvary``: mark ``x`` as varying over ``axis_name``."""
    return pvary(x, axis_name)
