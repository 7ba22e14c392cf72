"""A stacked body waits for a deferred kernel's results only where they are first read, and
runs the work that does not need them before that (``runtime.vectorized``: ``_sunk``,
``_place_waits``). An MPI process defers its chained all-reduces this way, so that their
messages travel while it computes; here a stand-in window defers the all-reduces of a
one-process body, and logs every kernel call and every wait."""
from __future__ import annotations

import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from ir import collectives as coll
from runtime.vectorized import BodyPlan
from runtime.vectorized_rules import Kernel, stacked_rules
from shardc import lax
from shardc.sharding import PartitionSpec as P


class Pending:
    def __init__(self, value, name, log):
        self.value, self.name, self.log = value, name, log

    def wait(self):
        self.log.append(f"wait {self.name}")
        return self.value


class DeferringWindow:
    """Stands for a mesh whose all-reduces are deferred kernels (computed by the fast
    backend's rule at once, handed out pending)."""

    def __init__(self, mesh, log):
        self.mesh, self.log = mesh, log
        self.axis_sizes, self.axis_names, self.ndim = mesh.axis_sizes, mesh.axis_names, mesh.ndim
        self.names: dict = {}

    def own_kernel(self, eqn, types):
        if eqn.primitive is not coll.all_reduce_node:
            return None
        inner = stacked_rules[eqn.primitive](types)
        # named in program order (a body is planned again once its work is reordered)
        name = self.names.setdefault(id(eqn), f"psum{len(self.names) + 1}")

        def start(x):
            self.log.append(f"start {name}")
            return Pending(inner.fn(x), name, self.log)
        return Kernel(start, inner.out_leads, deferred=True)


def planned(fn, x, log):
    """The body of ``shard_map(fn)`` over 8 devices planned with deferred all-reduces, every
    kernel's call logged by its primitive's name."""
    mesh = jax.make_mesh((8,), ("i",))
    f = jax.shard_map(fn, mesh=mesh, in_specs=P("i"), out_specs=P())
    placed = jax.device_put(x, jax.sharding.NamedSharding(mesh, P("i")))
    (lowered,) = jax.jit(f).lower(placed).module.all_shard_maps()
    assert tuple(lowered.in_shardings[0]) == ("i",)
    plan = BodyPlan(lowered.mesh_program, DeferringWindow(mesh, log), [(8,)])
    for step in plan.steps:
        if not step.kernel.deferred:
            step.kernel.fn = logged(step.kernel.fn, step.eqn.primitive.name, log)
    return f, plan


def logged(fn, name, log):
    def call(*args, **kwargs):
        log.append(name)
        return fn(*args, **kwargs)
    return call


X = np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32)


def overlapped(x):
    # in program order, the first all-reduce's result is read (``* 3``) before the second's
    # operand is computed: that read moves after the second all-reduce starts
    total = lax.psum(jnp.sin(x), "i") * 3
    other = lax.psum(jnp.exp(jnp.cos(x) * 2), "i")
    return total + other


def dependent(x):
    # the second all-reduce reads the first's result: it waits there, and nothing moves
    # across an all-reduce
    return lax.psum(x * lax.psum(jnp.sum(x), "i"), "i")


@pytest.mark.parametrize("run", ["interpreted", "compiled"])
def test_work_that_needs_no_deferred_result_runs_before_the_wait(run):
    log: list = []
    f, plan = planned(overlapped, X, log)
    stacked = X.reshape(8, 2, 4)
    if run == "compiled":
        plan.run(stacked)       # the first run interprets; later ones run the compiled body
        log.clear()
    (out,) = plan.run(stacked)
    np.testing.assert_array_equal(out.reshape(2, 4), np.asarray(jax.jit(f)(X)))
    # both all-reduces start before either is waited for; the cos/exp work sits between
    assert log.index("start psum1") < log.index("cos") < log.index("start psum2")
    assert log.index("start psum2") < log.index("wait psum1") < log.index("mul", log.index(
        "start psum2"))
    assert log[-1] == "add" and log.count("wait psum1") == log.count("wait psum2") == 1


def test_a_result_feeding_a_later_all_reduce_is_waited_for_first():
    log: list = []
    f, plan = planned(dependent, X, log)
    (out,) = plan.run(X.reshape(8, 2, 4))
    np.testing.assert_allclose(out.reshape(2, 4), (X * X.sum()).reshape(8, 2, 4).sum(0),
                               rtol=1e-5)
    assert log.index("start psum1") < log.index("wait psum1") < log.index("start psum2")
    assert log[-1] == "wait psum2"        # returned: waited for before the body returns
