"""The tutorial's training examples (examples/train_*.py), trained for a few SGD steps.

Each example trains the tutorial's MLP (SEMANTICS T21) with its parallelism -- data parallel,
FSDP, tensor parallel, FSDP + TP, a collective-matmul layer -- on meshes (8,), (4,2), (2,4)
(FSDP + TP needs two axes: (4,2), (2,4) and (8,1)); after the steps its parameters must equal
single-device training of the same model (plain ``jnp``, no shard_map; same initialisation,
same data) to 1e-5, and so must the losses along the way. The scripts themselves run too.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import shardc as jax
from ir import collectives as coll
from shardc.sharding import NamedSharding, PartitionSpec as P

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))

import train_collective_matmul  # noqa: E402
import train_data_parallel  # noqa: E402
import train_fsdp  # noqa: E402
import train_fsdp_tp  # noqa: E402
import train_mlp  # noqa: E402
import train_tensor_parallel  # noqa: E402

TOLERANCE = 1e-5
STEPS = 3


@pytest.fixture(scope="module")
def setup():
    params, batch = train_mlp.model()
    reference, losses = train_mlp.train_single_device(params, batch, steps=STEPS)
    return params, batch, reference, losses


def assert_trained_like(params, reference, losses, reference_losses):
    for got, want in zip(jax.tree_util.tree_leaves(params),
                         jax.tree_util.tree_leaves(reference)):
        assert got.shape == want.shape
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=TOLERANCE,
                                   atol=TOLERANCE)
    np.testing.assert_allclose(losses, reference_losses, rtol=TOLERANCE)


def test_single_device_training_learns(setup):
    params, batch, reference, losses = setup
    assert len(losses) == STEPS and losses[-1] < losses[0]
    final = float(jax.jit(train_mlp.loss)(reference, batch))
    assert final < losses[-1]
    # the parameters moved
    assert train_mlp.max_difference(params, reference) > 1e-3


def _mesh_id(shape):
    return "x".join(map(str, shape))


@pytest.mark.parametrize("shape", list(train_data_parallel.MESHES), ids=_mesh_id)
def test_data_parallel(setup, shape):
    params, batch, reference, reference_losses = setup
    trained, losses = train_data_parallel.train_data_parallel(shape, params, batch, STEPS)
    assert_trained_like(trained, reference, losses, reference_losses)


@pytest.mark.parametrize("shape", list(train_fsdp.MESHES), ids=_mesh_id)
def test_fsdp(setup, shape):
    params, batch, reference, reference_losses = setup
    trained, losses = train_fsdp.train_fsdp(shape, params, batch, STEPS)
    assert_trained_like(trained, reference, losses, reference_losses)
    assert [s.data.shape for s in trained[0][0].addressable_shards] == [(98, 128)] * 8


@pytest.mark.parametrize("shape", list(train_tensor_parallel.MESHES), ids=_mesh_id)
def test_tensor_parallel(setup, shape):
    params, batch, reference, reference_losses = setup
    trained, losses = train_tensor_parallel.train_tensor_parallel(shape, params, batch, STEPS)
    assert_trained_like(trained, reference, losses, reference_losses)


@pytest.mark.parametrize("shape", train_fsdp_tp.MESHES, ids=_mesh_id)
def test_fsdp_tp(setup, shape):
    params, batch, reference, reference_losses = setup
    trained, losses = train_fsdp_tp.train_fsdp_tp(shape, params, batch, STEPS)
    assert_trained_like(trained, reference, losses, reference_losses)


@pytest.mark.parametrize("shape", list(train_collective_matmul.MESHES), ids=_mesh_id)
def test_collective_matmul(setup, shape):
    params, batch, reference, reference_losses = setup
    trained, losses = train_collective_matmul.train_collective_matmul(shape, params, batch,
                                                                      STEPS)
    assert_trained_like(trained, reference, losses, reference_losses)


def _gradient_setups():
    """(example, mesh, loss, placed params, placed batch, the parameters' specs)."""
    params, batch = train_mlp.model()
    mesh8 = jax.make_mesh((8,), ("batch",))
    mesh_bf = jax.make_mesh((4, 2), ("batch", "feats"))
    mesh_f = jax.make_mesh((8,), ("feats",))
    mesh_i = jax.make_mesh((8,), ("i",))
    yield ("data_parallel", mesh8, train_data_parallel.make_train_step(mesh8, "batch")[0],
           *train_data_parallel.place(mesh8, "batch", params, batch), (P(), P()))
    yield ("fsdp", mesh8, train_fsdp.make_train_step(mesh8, "batch")[0],
           *train_fsdp.place(mesh8, "batch", params, batch), (P("batch"), P("batch")))
    yield ("tensor_parallel", mesh_f, train_tensor_parallel.make_train_step(mesh_f, "feats")[0],
           *train_tensor_parallel.place(mesh_f, "feats", params, batch),
           (P("feats"), P("feats")))
    yield ("fsdp_tp", mesh_bf, train_fsdp_tp.make_train_step(mesh_bf)[0],
           *train_fsdp_tp.place(mesh_bf, params, batch),
           (P(("feats", "batch")), P(("feats", "batch"))))
    yield ("collective_matmul", mesh_i,
           train_collective_matmul.make_train_step(mesh_i, "i", len(params))[0],
           *train_collective_matmul.place(mesh_i, "i", params, batch), (P("i", None), P()))


def test_gradients_come_out_split_like_the_parameters():
    # FSDP's weight gradients leave their shard_map already reduce-scattered, tensor
    # parallelism's split by rows, data parallelism's replicated (summed over the batch)
    params, batch = train_mlp.model()
    want = jax.grad(train_mlp.loss)(params, batch)
    for name, mesh, loss, placed, placed_batch, (w_spec, b_spec) in _gradient_setups():
        grads = jax.jit(jax.grad(loss))(placed, placed_batch)
        for (gW, gb), (wW, wb) in zip(grads, want):
            assert gW.sharding == NamedSharding(mesh, w_spec), name
            assert gb.sharding == NamedSharding(mesh, b_spec), name
            np.testing.assert_allclose(np.asarray(gW), np.asarray(wW), rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(np.asarray(gb), np.asarray(wb), rtol=1e-4, atol=1e-5)


def test_collective_matmul_layer_is_a_matmul():
    # one layer, forward: the ring computes lhs @ rhs (SEMANTICS T19)
    mesh = jax.make_mesh((4, 2), ("x", "y"))
    matmul = train_collective_matmul.make_matmul(("x", "y"))
    f = jax.shard_map(matmul, mesh=mesh, in_specs=(P(("x", "y")), P(("x", "y"))),
                      out_specs=P(("x", "y")))
    rng = np.random.default_rng(0)
    lhs = rng.standard_normal((16, 24)).astype(np.float32)
    rhs = rng.standard_normal((24, 5)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(f(lhs, rhs)), lhs @ rhs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(jax.jit(f)(lhs, rhs)), lhs @ rhs, rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("script", ["train_mlp.py", "train_data_parallel.py"])
def test_scripts_run_from_the_repository_root(script):
    root = EXAMPLES.parent
    result = subprocess.run([sys.executable, f"examples/{script}"], cwd=root,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert sum(line.startswith("step ") for line in lines) >= STEPS
    if script != "train_mlp.py":
        checks = [line for line in lines if line.startswith("check:")]
        assert len(checks) == 3 and all(" equal single-device training" in c for c in checks)


# --- the lowered gradient programs (tests/golden/grad_*.txt) --------------------------------------

GOLDEN_LAYERS = [16, 16, 8]      # every dimension divisible by 8: FSDP splits all of them
GOLDEN_BATCH = 16


def lowered_train_step(example, mesh_shape, layer_sizes=GOLDEN_LAYERS, batch_size=GOLDEN_BATCH):
    """The jitted SGD step of examples/train_{example}.py, lowered on placed inputs."""
    params, batch = train_mlp.model(layer_sizes, batch_size)
    if example == "fsdp_tp":
        mesh = jax.make_mesh(mesh_shape, ("batch", "feats"))
        _, step = train_fsdp_tp.make_train_step(mesh)
        placed = train_fsdp_tp.place(mesh, params, batch)
    else:
        module = {"data_parallel": train_data_parallel, "fsdp": train_fsdp,
                  "tensor_parallel": train_tensor_parallel,
                  "collective_matmul": train_collective_matmul}[example]
        names, axes = module.MESHES[mesh_shape]
        mesh = jax.make_mesh(mesh_shape, names)
        extra = (len(params),) if example == "collective_matmul" else ()
        _, step = module.make_train_step(mesh, axes, *extra)
        placed = module.place(mesh, axes, params, batch)
    return step.lower(*placed).module


def train_step_text(example, mesh_shape) -> str:
    """The golden text: the lowered module as ``shardc lower -o`` writes it (the traced
    program, then the mesh-level program of each shard_map), which the IR parser reads back."""
    from ir.printer import print_module
    return print_module(lowered_train_step(example, mesh_shape), with_source=True).rstrip("\n")


def _communication(program):
    """The communication nodes of a per-device program, loops and branches included."""
    from ir.graph import is_communication_node, sub_programs
    found = []
    for eqn in program.eqns:
        if is_communication_node(eqn):
            found.append(eqn)
        for _, _, sub in sub_programs(eqn):
            found.extend(_communication(sub))
    return found


def _names(eqns):
    return sorted(e.primitive.name for e in eqns)


def _depends_on(program, targets):
    """For each output of ``program``, the ids of the ``targets`` equations it depends on."""
    producer = {id(v): e for e in program.eqns for v in e.outvars}
    target_ids = {id(e) for e in targets}

    def reach(atom, seen):
        eqn = producer.get(id(atom))
        if eqn is None or id(eqn) in seen:
            return set()
        seen.add(id(eqn))
        found = {id(eqn)} if id(eqn) in target_ids else set()
        for a in eqn.invars:
            found |= reach(a, seen)
        return found

    return [reach(v, set()) for v in program.outvars]


@pytest.mark.parametrize("shape", list(train_data_parallel.MESHES), ids=_mesh_id)
def test_data_parallel_gradient_program_has_one_all_reduce_per_parameter(shape):
    # full-size tutorial MLP: 6 layers, 12 parameters
    module = lowered_train_step("data_parallel", shape, train_mlp.LAYER_SIZES, 32)
    num_params = 2 * (len(train_mlp.LAYER_SIZES) - 1)
    forward, backward = module.all_shard_maps()
    _, batch_axes = train_data_parallel.MESHES[shape]
    axes = (batch_axes,) if isinstance(batch_axes, str) else batch_axes
    for d in range(len(backward.device_programs)):
        # the forward pass communicates nothing: the loss's pmean is dead (only the
        # gradients leave the step) and the inputs arrive placed as the in_specs say
        assert _communication(forward.program_of(d).program) == []
        comm = _communication(backward.program_of(d).program)
        assert _names(comm) == ["all_reduce"] * num_params
        assert all(e.params["mesh_axes"] == axes and e.params["reduction"] == "sum"
                   for e in comm)
        # one per gradient: each output (a parameter's gradient) reads exactly one of them
        deps = _depends_on(backward.program_of(d).program, comm)
        assert len(deps) == num_params and all(len(s) == 1 for s in deps)
        assert len(set().union(*deps)) == num_params
    # the printed module says the same, at the mesh level and device by device
    from ir.printer import print_module
    text = print_module(module, devices=True)
    assert text.count(" = all_reduce[") == num_params * (1 + len(backward.device_programs))
    for other in ("all_gather[", "reduce_scatter[", "ppermute[", "all_to_all[", "all_slice["):
        assert other not in text


@pytest.mark.parametrize("shape", list(train_fsdp.MESHES), ids=_mesh_id)
def test_fsdp_gradient_program_gathers_forward_and_reduce_scatters_backward(shape):
    module = lowered_train_step("fsdp", shape, train_mlp.LAYER_SIZES, 32)
    num_params = 2 * (len(train_mlp.LAYER_SIZES) - 1)
    forward, backward, update = module.all_shard_maps()
    # the SGD update outside the shard_maps runs on each device's blocks: no communication
    assert not any(coll.grouped(e.primitive) for e in update.mesh_program.eqns)
    for d in range(len(forward.device_programs)):
        fwd = _communication(forward.program_of(d).program)
        bwd = _communication(backward.program_of(d).program)
        # the forward pass gathers every parameter once, nothing else
        assert _names(fwd) == ["all_gather"] * num_params
        # the backward pass reduce-scatters every parameter gradient once; it may gather
        # weights again (remat's policy saves everything but all_gather); nothing else
        assert _names(bwd).count("reduce_scatter") == num_params
        assert set(_names(bwd)) <= {"reduce_scatter", "all_gather"}
        assert _names(bwd).count("all_gather") < num_params
        deps = _depends_on(backward.program_of(d).program,
                           [e for e in bwd if e.primitive.name == "reduce_scatter"])
        assert all(len(s) == 1 for s in deps) and len(set().union(*deps)) == num_params
