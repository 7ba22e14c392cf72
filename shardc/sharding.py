"""``shardc.sharding``: meshes, partition specs and shardings (JAX's names), the current
mesh that ``set_mesh`` installs, and the layout constraints (``reshard``,
``with_sharding_constraint``, which ``shardc.lax`` exports too)."""
from __future__ import annotations

import contextlib

from compiler import tree
from compiler.shard_map import current_shard_context
from compiler.tracing import bind
from ir import primitives as p
from ir.sharding import (AbstractMesh, AxisType, Mesh, NamedSharding, PartitionSpec,
                         ReplicationError, ShardingTypeError, current_mesh, pop_mesh, push_mesh)
from runtime.array import SingleDeviceSharding

__all__ = ["AbstractMesh", "AxisType", "Mesh", "ShardingTypeError", "NamedSharding", "PartitionSpec", "ReplicationError",
           "SingleDeviceSharding", "get_abstract_mesh", "get_mesh", "reshard", "set_mesh",
           "use_mesh"]


class _MeshScope(contextlib.AbstractContextManager):
    """The handle ``set_mesh`` returns: the mesh is current from the call on; leaving a
    ``with`` block restores the previous one."""

    def __init__(self, mesh: Mesh):
        if not isinstance(mesh, Mesh):
            raise TypeError(f"set_mesh requires a Mesh, got {type(mesh).__name__}")
        self.mesh = mesh
        push_mesh(mesh)

    def __exit__(self, *exc):
        pop_mesh(self.mesh)
        return False


def set_mesh(mesh: Mesh) -> _MeshScope:
    """Make ``mesh`` the current mesh: ``shard_map`` without ``mesh=``, ``device_put(x, P(...))``
    and ``out_sharding=P(...)`` use it. Works as a call or as a context manager."""
    return _MeshScope(mesh)


def use_mesh(mesh: Mesh) -> _MeshScope:
    """``with use_mesh(mesh):`` makes ``mesh`` current inside the block (JAX's context-manager
    spelling of ``set_mesh``)."""
    return _MeshScope(mesh)


def get_abstract_mesh() -> Mesh | None:
    """The mesh code is traced under: inside a shard_map body, that body's mesh (what a
    nested shard_map passes as ``mesh=``); else the current mesh, or None."""
    body = current_shard_context()
    return body.mesh if body is not None else current_mesh()


def get_mesh() -> Mesh | None:
    """The current mesh, or None."""
    return current_mesh()


def resolve_sharding(sharding, what: str):
    """A NamedSharding, SingleDeviceSharding or device as given; a bare PartitionSpec on the
    current mesh."""
    if isinstance(sharding, (NamedSharding, SingleDeviceSharding)):
        return sharding
    if isinstance(sharding, PartitionSpec):
        mesh = get_mesh()
        if mesh is None:
            raise ValueError(f"{what} got the PartitionSpec {sharding!r} but no mesh is set; "
                             "pass NamedSharding(mesh, spec) or call shardc.set_mesh(mesh)")
        return NamedSharding(mesh, sharding)
    if hasattr(sharding, "id") and hasattr(sharding, "platform"):
        return SingleDeviceSharding(sharding)
    raise TypeError(f"{what} requires a NamedSharding, a PartitionSpec with a mesh set, or a "
                    f"device, got {sharding!r} of type {type(sharding).__name__}")


def with_sharding_constraint(x, shardings):
    """Ask for ``x`` (a pytree) to be laid out by ``shardings``: a NamedSharding, a
    PartitionSpec on the current mesh, or a pytree prefix of those."""
    leaves, treedef = tree.tree_flatten(x)
    is_leaf = lambda s: not isinstance(s, (tuple, list, dict)) or isinstance(s, PartitionSpec)
    targets = tree.broadcast_prefix(shardings, x, is_leaf=is_leaf,
                                    name="with_sharding_constraint shardings")
    out = []
    for leaf, target in zip(leaves, targets):
        sharding = resolve_sharding(target, "with_sharding_constraint")
        if not isinstance(sharding, NamedSharding):
            raise TypeError("with_sharding_constraint requires a NamedSharding or a "
                            f"PartitionSpec on the current mesh, got {target!r}")
        out.append(bind(p.sharding_constraint_p, leaf, sharding=sharding))
    return tree.tree_unflatten(treedef, out)


def reshard(x, out_shardings):
    """``x`` laid out by ``out_shardings`` (a sharding, a PartitionSpec on the current mesh, or
    a pytree prefix of those), eagerly or under a trace."""
    return with_sharding_constraint(x, out_shardings)
