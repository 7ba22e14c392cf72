"""Golden IR text: traced programs and per-device programs of the seed tutorial and friends.

A refactor that leaves these files unchanged left the compiler unchanged. To accept a deliberate
change, run with SHARDC_UPDATE_GOLDEN=1 and review the diff.
"""
import os
from functools import partial
from pathlib import Path

import numpy as np
import pytest

import shardc
import shardc.numpy as jnp
from shardc import lax
from shardc.experimental.shard_map import shard_map
from shardc.sharding import Mesh, NamedSharding, PartitionSpec as P
from ir.verify import verify

GOLDEN = Path(__file__).parent / "golden"
MESH = shardc.make_mesh((4, 2), ("x", "y"))
MESH_IJ = shardc.make_mesh((4, 2), ("i", "j"))
MESH_1D = Mesh(np.array(shardc.devices()[:4]), ("i",))
MESH_2D = Mesh(np.array(shardc.devices()[:4]).reshape(2, 2), ("i", "j"))


def matmul_basic(a_block, b_block):
    c_partialsum = jnp.dot(a_block, b_block)
    return lax.psum(c_partialsum, "y")


def _matmul():
    return shard_map(matmul_basic, MESH, in_specs=(P("x", "y"), P("y", None)),
                     out_specs=P("x", None))


def _matmul_args(placed):
    a = jnp.arange(8 * 16.).reshape(8, 16)
    b = jnp.arange(16 * 4.).reshape(16, 4)
    if placed:
        a = shardc.device_put(a, NamedSharding(MESH, P("x", "y")))
        b = shardc.device_put(b, NamedSharding(MESH, P("y", None)))
    return a, b


def _traced(fn, *args):
    closed = shardc.make_jaxpr(fn)(*args)
    verify(closed.jaxpr)
    return closed.pretty_print(with_source=True)


def _device(fn, args, device_id):
    (lowered,) = shardc.jit(fn).lower(*args).module.all_shard_maps()
    dp = lowered.program_of(device_id)
    verify(dp.program)
    return dp.pretty_print(with_source=True)


def _psum_body(axes):
    return lambda x_block: lax.psum(x_block, axes)


def _collectives(x):
    total = lax.psum(x, ("i", "j"))
    mean = lax.pmean(x, "i")
    top = lax.pmax(x, "j")
    low = lax.pmin(x, ("j", "i"))
    rank = lax.axis_index(("j", "i"))
    return total + mean + top + low + rank


def _on_mesh_4x2(body, out_specs=P("x", "y")):
    """A body over an (8,8) input split P('x','y') on the (4,2) mesh, lowered for device 3."""
    fn = shardc.shard_map(body, mesh=MESH, in_specs=P("x", "y"), out_specs=out_specs,
                          check_vma=False)
    x = shardc.device_put(jnp.arange(64.).reshape(8, 8), NamedSharding(MESH, P("x", "y")))
    return _device(fn, (x,), 3)


COLLECTIVE_CASES = {
    "collective_all_gather_tiled_x": lambda: _on_mesh_4x2(
        lambda v: lax.all_gather(v, "x", axis=0, tiled=True)),
    "collective_all_gather_untiled_yx": lambda: _on_mesh_4x2(
        lambda v: lax.all_gather(v, ("y", "x"), axis=1), P("x", None, "y")),
    "collective_psum_scatter_tiled_y": lambda: _on_mesh_4x2(
        lambda v: lax.psum_scatter(v, "y", scatter_dimension=0, tiled=True)),
    "collective_ppermute_ring_x": lambda: _on_mesh_4x2(
        lambda v: lax.ppermute(v, "x", [(k, (k + 1) % 4) for k in range(4)])),
    "collective_all_to_all_x": lambda: _on_mesh_4x2(
        lambda v: lax.all_to_all(v, "x", 1, 0, tiled=True)),
    "collective_pbroadcast_xy": lambda: _on_mesh_4x2(
        lambda v: lax.pbroadcast(v, ("x", "y"), 5)),
    "collective_psum_xy": lambda: _on_mesh_4x2(lambda v: lax.psum(v, ("x", "y"))),
}


CASES = {
    "matmul_basic_traced": lambda: _traced(_matmul(), *_matmul_args(False)),
    "matmul_basic_device0_placed": lambda: _device(_matmul(), _matmul_args(True), 0),
    "matmul_basic_device3_placed": lambda: _device(_matmul(), _matmul_args(True), 3),
    "matmul_basic_device5_host_inputs": lambda: _device(_matmul(), _matmul_args(False), 5),
    "psum_f1_traced": lambda: _traced(
        shard_map(_psum_body("i"), MESH_1D, in_specs=P("i"), out_specs=P(None)),
        jnp.arange(16)),
    "psum_f2_device2": lambda: _device(
        shard_map(_psum_body("i"), MESH_2D, in_specs=P("i", "j"), out_specs=P(None, "j")),
        (shardc.device_put(jnp.arange(16).reshape(4, 4), NamedSharding(MESH_2D, P("i", "j"))),),
        2),
    "psum_f3_traced": lambda: _traced(
        shard_map(_psum_body(("i", "j")), MESH_2D, in_specs=P("i", "j"),
                  out_specs=P(None, None)), jnp.arange(16).reshape(4, 4)),
    "closure_tiled_traced": lambda: _traced(
        lambda: shard_map(lambda: jnp.array([[3.]]), MESH_IJ, in_specs=(),
                          out_specs=P("i", "j"))()),
    "mixed_operands_lifted_traced": lambda: _traced(
        shardc.shard_map(lambda x, y: x * y, mesh=Mesh(np.array(shardc.devices()[:2]), ("i",)),
                         in_specs=(P("i"), P()), out_specs=P("i")),
        jnp.arange(6.), jnp.arange(3.)),
    "check_off_traced": lambda: _traced(
        shard_map(lambda x: x * 2, MESH_IJ, in_specs=P("i", "j"), out_specs=P(),
                  check_rep=False), jnp.arange(16.).reshape(8, 2)),
    "collectives_traced": lambda: _traced(
        shard_map(_collectives, MESH_2D, in_specs=P("i", "j"), out_specs=P("i", "j")),
        jnp.arange(16.).reshape(4, 4)),
    "collectives_device3": lambda: _device(
        shard_map(_collectives, MESH_2D, in_specs=P("i", "j"), out_specs=P("i", "j")),
        (shardc.device_put(jnp.arange(16.).reshape(4, 4), NamedSharding(MESH_2D, P("i", "j"))),),
        3),
}


CASES.update(COLLECTIVE_CASES)


def _grad_step(example, shape):
    """examples/train_{example}.py's jitted SGD step on a small MLP, lowered: the traced
    program and device 0's program of each shard_map (tests/test_training.py)."""
    from test_training import train_step_text
    return train_step_text(example, shape)


GRAD_CASES = {
    "grad_data_parallel_8": lambda: _grad_step("data_parallel", (8,)),
    "grad_data_parallel_4x2": lambda: _grad_step("data_parallel", (4, 2)),
    "grad_fsdp_8": lambda: _grad_step("fsdp", (8,)),
    "grad_fsdp_tp_4x2": lambda: _grad_step("fsdp_tp", (4, 2)),
}


CASES.update(GRAD_CASES)



@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name):
    text = CASES[name]() + "\n"
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("SHARDC_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"no golden file {path.name}: write it with SHARDC_UPDATE_GOLDEN=1"
    assert text == path.read_text()


def test_every_golden_file_has_a_case():
    assert sorted(p.stem for p in GOLDEN.glob("*.txt")) == sorted(CASES)
