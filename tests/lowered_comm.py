"""The communication a jitted function's lowered program holds, for tests to compare."""
from __future__ import annotations

import shardc as jax


def communication(fn, *args) -> list:
    """(collective, mesh axes) of every communication node of ``jit(fn)``'s lowered program,
    sorted (a device reading its own position moves nothing)."""
    from ir.graph import is_communication_node, sub_programs

    def walk(program):
        found = []
        for eqn in program.eqns:
            if is_communication_node(eqn) and eqn.primitive.name != "process_index":
                found.append((eqn.primitive.name, tuple(eqn.params.get("mesh_axes", ()))))
            for _, _, sub in sub_programs(eqn):
                found.extend(walk(sub))
        return found

    module = jax.jit(fn).lower(*args).module
    return sorted(c for s in module.all_shard_maps() for c in walk(s.mesh_program))
