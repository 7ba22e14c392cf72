"""A shard_map called inside another shard_map's body (nested), over axes the outer one left
automatic (``axis_names`` a strict subset of the mesh axes).

The outer body sees values whole along its automatic axes; every device along them holds the
same copy. The inner shard_map splits such values over its own axes, so its body is inlined
into the outer one with the boundary written in collectives the rest of shardc already knows:

    input, spec P('y') on (4,):      [a b c d] on every y   ->  y=0: [a], y=1: [b], ...
        this device's chunk: dynamic_slice at axis_index('y') * block (no communication)
    output, spec P('y'):             y=0: [a'], y=1: [b'] ...  ->  [a' b' c' d'] on every y
        all_gather(tiled, to='invarying') over the named axes (invariant again after)
    output, spec P() (check off):    the coordinate-0 copy, gathered and taken, as JAX does

so the traced program, the lowered per-device programs, every backend and autodiff treat a
nested shard_map as the collectives it is.
"""
from __future__ import annotations

import numpy as np

from compiler import tree
from compiler.tracing import aval_of, bind
from ir import primitives as p
from ir import collectives as coll
from ir.sharding import axes_size, spec_axes, spec_names


def call_nested(config, args: tuple, outer):
    """Run shard_map ``config`` on ``args`` inside the body of ``outer`` (a ShardContext)."""
    from compiler.shard_map import (ShardContext, ShardingSpecError, _Leaf, _arg_index, _axis_env,
                                    _broadcast_specs, _check_divisibility, _check_ranks,
                                    _flatten_outputs)
    from compiler.replication import check_out_specs
    mesh = config.mesh
    if mesh.axis_names != outer.mesh.axis_names or mesh.axis_sizes != outer.mesh.axis_sizes:
        raise ValueError(f"shard_map '{config.name}' is called inside a shard_map body on "
                         f"{outer.mesh!r}, but its mesh is {mesh!r}; a nested shard_map uses "
                         "the enclosing mesh")
    already = [a for a in config.manual_axes if a in outer.manual]
    new_axes = tuple(a for a in config.manual_axes if a not in outer.manual)
    specs, spec_paths = _broadcast_specs(config.in_specs, args, "shard_map in_specs")
    _check_not_already_manual(config.in_specs, already, "in_specs")
    leaves, treedef = tree.tree_flatten(args)
    paths = tree.leaf_paths(args)
    dynamic = [_Leaf(v, s, q, _arg_index(q), sp)
               for v, s, q, sp in zip(leaves, specs, paths, spec_paths) if s is not None]
    _check_ranks(config, dynamic)
    _check_divisibility(config, dynamic)
    blocks = [_own_block(v, s, mesh) if s is not None else v for v, s in zip(leaves, specs)]
    inner = ShardContext(mesh, outer.check_vma, frozenset(outer.manual) | frozenset(new_axes))
    _axis_env.append(inner)
    try:
        result = config.f(*tree.tree_unflatten(treedef, blocks))
    finally:
        _axis_env.pop()
    store: dict = {}
    outs = _flatten_outputs(config, result, store)
    _check_not_already_manual(config.out_specs, already, "out_specs")
    if config.check_vma and outer.check_vma:
        check_out_specs(fn_name=config.name, flag=config.flag, mesh=mesh,
                        out_specs=store["user_specs"],
                        out_vmas=[aval_of(o).vma for o in outs], out_origins=[{}] * len(outs),
                        out_paths=store["paths"], manual_axes=new_axes)
    checked = config.check_vma and outer.check_vma
    assembled = [_assemble(o, s, mesh, new_axes, checked) for o, s in zip(outs, store["specs"])]
    return tree.tree_unflatten(store["treedef"], assembled)


def _check_not_already_manual(specs, already, which):
    from compiler.shard_map import ShardingSpecError, _is_spec_leaf
    for spec in tree.tree_leaves(specs, is_leaf=_is_spec_leaf):
        for a in (spec_axes(spec) if spec is not None else ()):
            if a in already:
                raise ShardingSpecError(
                    f"shard_map {which} refers to {a!r}, which the enclosing shard_map is "
                    "already manual over; a nested shard_map may split only over axes the "
                    "enclosing one left automatic (its axis_names)")


def _own_block(value, spec, mesh):
    """This device's block of a value every device along the spec's axes holds whole."""
    shape = aval_of(value).shape
    starts = [np.int32(0)] * len(shape)
    sizes = list(shape)
    split = False
    for d, names in enumerate(spec_names(spec)):
        if not names:
            continue
        size = sizes[d] // axes_size(mesh.shape, names)
        rank = bind(coll.axis_index_p, mesh_axes=tuple(names))
        starts[d] = bind(p.mul_p, rank, np.int32(size))
        sizes[d] = size
        split = True
    if not split:
        return value
    return bind(p.dynamic_slice_p, value, *starts, slice_sizes=tuple(sizes))


def _assemble(value, spec, mesh, new_axes, checked: bool):
    """Gather an inner output back along the axes its spec names; along the inner axes it does
    not name, keep one copy (equal copies when checked; the coordinate-0 one otherwise)."""
    for d, names in enumerate(spec_names(spec)):
        if names:
            value = bind(coll.all_gather_p, value, mesh_axes=tuple(names), gather_axis=d,
                         tiled=True, axis_size=axes_size(mesh.shape, names), to="invarying")
    unnamed = tuple(a for a in new_axes if a not in spec_axes(spec))
    if unnamed and not checked:
        copies = bind(coll.all_gather_p, value, mesh_axes=unnamed, gather_axis=0, tiled=False,
                      axis_size=axes_size(mesh.shape, unnamed), to="invarying")
        shape = aval_of(copies).shape
        first = bind(p.dynamic_slice_p, copies, *([np.int32(0)] * len(shape)),
                     slice_sizes=(1,) + tuple(shape[1:]))
        value = bind(p.squeeze_p, first, dimensions=(0,))
    return value
