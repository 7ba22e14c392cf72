"""Lowering in two stages: the mesh-level program (the same for every device) and the
per-device programs specialised from it; both print and parse back, both verify."""
from __future__ import annotations

from functools import partial

import numpy as np
import pytest

import shardc
import shardc.numpy as jnp
from compiler.lowering import lowering_rules, specialise
from ir import primitives as prims
from ir import collectives as coll
from ir.core import Literal, programs_in
from ir.parser import parse_program
from ir.printer import print_device_program, print_program
from ir.verify import VerifyError, verify_device_program, verify_mesh_program
from shardc import lax
from shardc.sharding import NamedSharding, PartitionSpec as P

# Auto axes: A placed P("x") is resharded at the boundary (Explicit axes would want P("x", "y"))
MESH = shardc.make_mesh((4, 2), ("x", "y"), axis_types=(shardc.sharding.AxisType.Auto,) * 2)


@partial(shardc.shard_map, mesh=MESH, in_specs=(P("x", "y"), P("y", None)),
         out_specs=(P("x", None), P("x", "y"), P(None, "y"), P("x", "y")))
def everything(a, b):
    total = lax.psum(jnp.dot(a, b), "y")
    ring = lax.ppermute(a, "x", [(k, (k + 1) % 4) for k in range(4)])
    low = lax.pmin(ring, "x") + lax.pmean(a, "y")
    gathered = lax.all_gather(b, "y", axis=0, tiled=True)
    scattered = lax.psum_scatter(gathered, "y", scatter_dimension=0, tiled=True)
    rank = lax.axis_index("x") + 10 * lax.axis_index("y")
    picked = lax.pbroadcast(a, "x", 2) * rank.astype(jnp.float32)
    swapped = lax.all_to_all(lax.pmax(picked, "y"), "y", 1, 1, tiled=True)
    return total, low, scattered, swapped


A = np.arange(8 * 16, dtype=np.float32).reshape(8, 16) / 5
B = np.arange(16 * 4, dtype=np.float32).reshape(16, 4) / 7


@pytest.fixture(scope="module")
def lowered():
    placed = shardc.device_put(A, NamedSharding(MESH, P("x")))
    (only,) = shardc.jit(everything).lower(placed, B).module.all_shard_maps()
    return only


def _all_eqns(program):
    for eqn in program.eqns:
        yield eqn
        for value in eqn.params.values():
            for sub in programs_in(value):
                yield from _all_eqns(sub)


def test_the_mesh_level_program_has_only_communication_nodes(lowered):
    program = lowered.mesh_program
    verify_mesh_program(program, MESH)
    names = [eqn.primitive.name for eqn in _all_eqns(program)]
    # front-end collectives and the nodes they lower to are distinct primitives
    assert not [e for e in _all_eqns(program) if e.primitive.kind == "collective"]
    for name in ("all_reduce", "ppermute", "all_gather", "reduce_scatter", "broadcast",
                 "process_index", "all_to_all", "all_slice"):
        assert name in names, name
    assert names.count("all_slice") == 2 and names.count("all_gather") == 1   # the reshards
    assert all("device_groups" not in eqn.params for eqn in _all_eqns(program))


def test_the_mesh_level_program_prints_and_parses_back(lowered):
    text = print_program(lowered.mesh_program, axis_order=MESH.axis_names, with_source=True)
    parsed = parse_program(text, lowered=True)     # its all_gather and ppermute are nodes
    verify_mesh_program(parsed, MESH)
    assert print_program(parsed, axis_order=MESH.axis_names, with_source=True) == text
    assert "broadcast[mesh_axes=('x',) root=2]" in text
    assert "all_reduce[mesh_axes=('y',) reduction='mean']" in text


def test_device_programs_are_the_mesh_level_program_specialised(lowered):
    program = lowered.mesh_program
    for dp in lowered.device_programs:
        again = specialise(MESH, dp.position, program)
        assert print_program(again) == print_program(dp.program)
        eqns = list(_all_eqns(dp.program))
        assert not [e for e in eqns if e.primitive is coll.process_index_node]
        for eqn in eqns:
            if coll.grouped(eqn.primitive):
                groups = eqn.params["device_groups"]
                assert sum(dp.device_id in g for g in groups) == 1
        # axis_index is this device's rank: x + 10 * y, as constants
        x, y = dp.coords
        literals = [a.value for e in eqns for a in e.invars
                    if isinstance(a, Literal) and a.aval.dtype == np.int32]
        assert x in literals and y in literals, literals


def test_per_device_types_carry_their_varying_axes(lowered):
    dp = lowered.device_programs[5]
    a, b = dp.program.invars
    assert a.aval.vma == {"x"} and b.aval.vma == frozenset()       # as they arrive
    first, second = [e for e in _all_eqns(dp.program) if e.primitive is coll.all_slice_node]
    assert first.invars[0] is a and first.outvars[0].aval.vma == {"x", "y"}
    assert second.invars[0] is b and second.outvars[0].aval.vma == {"y"}
    text = print_device_program(dp)
    assert "{ lambda ; a:f32[2,16]{x} b:f32[16,4]. let" in text
    assert "c:f32[2,8]{x,y} = all_slice" in text


def test_a_mesh_level_program_with_device_groups_is_rejected(lowered):
    program = lowered.device_programs[0].program
    with pytest.raises(VerifyError, match="device_groups in a mesh-level program"):
        verify_mesh_program(program, MESH)


def test_a_per_device_program_with_process_index_is_rejected(lowered):
    from ir.core import DeviceProgram
    dp = lowered.device_programs[0]
    with_mesh_nodes = DeviceProgram(dp.device_id, dp.position, dp.mesh_axes, dp.coords,
                                    lowered.mesh_program)
    with pytest.raises(VerifyError, match="without device_groups|process_index is left"):
        verify_device_program(with_mesh_nodes, MESH)


def test_every_front_end_collective_has_one_lowering_rule():
    collectives = [p for p in prims.all_primitives() if p.kind == "collective"]
    assert {c.prim for c in coll.FRONT_END} == set(collectives)
    missing = [p.name for p in collectives if p not in lowering_rules]
    assert not missing, missing
    # the lowering rules produce lowered nodes only (or nothing, for pvary)
    assert all(p.kind in ("collective", "higher") for p in lowering_rules)


def _blockwise(a, b):
    """The tutorial's semantics: split into blocks, apply per block, combine."""
    ab = [[a[2 * i:2 * i + 2, 8 * j:8 * j + 8] for j in range(2)] for i in range(4)]
    bb = [b[8 * j:8 * j + 8] for j in range(2)]
    total = [sum(ab[i][j] @ bb[j] for j in range(2)) for i in range(4)]
    return np.concatenate(total)


def _run_on(name):
    from compiler.backend import get_backend, set_backend
    saved = get_backend()
    try:
        shardc.set_backend_name(name)
        placed = shardc.device_put(A, NamedSharding(MESH, P("x")))
        return [np.asarray(o) for o in shardc.jit(everything)(placed, B)]
    finally:
        set_backend(saved)


def test_the_per_device_programs_compute_what_the_body_does():
    # the reference backend runs the per-device programs; the fast one the body, stacked
    ref, fast = _run_on("reference"), _run_on("fast")
    np.testing.assert_allclose(ref[0], _blockwise(A, B), rtol=1e-5)
    for r, f in zip(ref, fast):
        assert r.shape == f.shape and r.dtype == f.dtype
        np.testing.assert_allclose(r, f, rtol=1e-5, atol=1e-5)


def test_front_end_collectives_and_their_nodes_are_distinct_primitives(lowered):
    # the same word at both levels: the traced body binds the collective, the mesh-level
    # program holds the node it lowers to; text is read at its level
    assert coll.all_gather_p is not coll.all_gather_node
    assert coll.all_gather_p.kind == "collective" and coll.all_gather_node.kind == "lowered"
    assert prims.lookup("all_gather") is coll.all_gather_p
    assert prims.lookup("all_gather", lowered=True) is coll.all_gather_node
    assert prims.lookup("all_reduce") is coll.all_reduce_node       # one level only
    assert prims.lookup("psum", lowered=True) is coll.psum_p
    text = print_program(lowered.mesh_program, axis_order=MESH.axis_names)
    assert "all_gather[" in text
    with pytest.raises(VerifyError, match="the front-end collective (ppermute|all_gather|all_to_all) is left"):
        verify_mesh_program(parse_program(text), MESH)       # read as a traced program
    # every record's primitive points back at it, and its level says which kind it is
    for record in coll.FRONT_END + coll.NODES:
        assert record.prim.collective is record
        assert record.prim.kind == ("collective" if record.level == coll.FRONT else "lowered")
