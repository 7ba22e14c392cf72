"""remat: forward values unchanged; the policy decides what the backward pass recomputes."""
from functools import partial

import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from shardc import lax
from shardc.sharding import PartitionSpec as P

# An Auto mesh: the tests count the shard_maps' own equations; on Explicit axes the
# cotangents of the unsplit arguments are gathered to their types in a shard_map of their own.
MESH = jax.sharding.Mesh(jax.devices()[:4], ("i",))
W = jnp.arange(12.).reshape(4, 3) / 10
X = jnp.arange(32.).reshape(8, 4) / 30
SAVE_ALL_BUT_GATHER = lambda op, *_, **__: str(op) != "all_gather"   # the tutorial's FSDP policy


def fsdp_loss(policy):
    @partial(jax.remat, policy=policy)
    def gather_weights(w):
        return lax.all_gather(w, "i", tiled=True)

    def loss(w, x):
        body = lambda w, x: lax.psum(jnp.tanh(x @ gather_weights(w)).sum(), "i")
        return jax.shard_map(body, mesh=MESH, in_specs=(P("i"), P("i")), out_specs=P())(w, x)
    return loss


def single_device_loss(w, x):
    return jnp.tanh(x @ w).sum()


def backward_primitives(loss):
    forward, backward = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(W, X).module.all_shard_maps()
    return ([e.primitive.name for e in forward.device_programs[0].program.eqns],
            [e.primitive.name for e in backward.device_programs[0].program.eqns])


@pytest.mark.parametrize("policy", [SAVE_ALL_BUT_GATHER, None, lambda *a, **k: True],
                         ids=["all-but-gather", "nothing", "everything"])
def test_gradients_do_not_depend_on_the_policy(policy):
    want = jax.grad(single_device_loss, argnums=(0, 1))(W, X)
    for grads in (jax.grad(fsdp_loss(policy), argnums=(0, 1))(W, X),
                  jax.jit(jax.grad(fsdp_loss(policy), argnums=(0, 1)))(W, X)):
        for got, ref in zip(grads, want):
            np.testing.assert_allclose(np.asarray(got), np.asarray(ref), rtol=1e-5, atol=1e-6)
    assert float(fsdp_loss(policy)(W, X)) == pytest.approx(float(single_device_loss(W, X)),
                                                           rel=1e-5)


@jax.custom_jvp
def _clipped_relu(x):
    return jnp.where(x > 0.2, x, 0.0)


@_clipped_relu.defjvp
def _clipped_relu_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    # the rule makes constants of its own (a zero array, a closed-over numpy weight)
    weight = np.linspace(1.0, 2.0, 3, dtype=np.float32)
    return _clipped_relu(x), jnp.where(x > 0.2, t, jnp.zeros_like(t)) * weight


@pytest.mark.parametrize("policy", [SAVE_ALL_BUT_GATHER, None, lambda *a, **k: True],
                         ids=["all-but-gather", "nothing", "everything"])
def test_custom_rules_with_constants_inside_remat(policy):
    def loss(remat):
        def body(w, x):
            layer = lambda w, x: _clipped_relu(x @ lax.all_gather(w, "i", tiled=True))
            layer = jax.remat(layer, policy=policy) if remat else layer
            return lax.psum(layer(w, x).sum(), "i")
        return jax.shard_map(body, mesh=MESH, in_specs=(P("i"), P("i")), out_specs=P())

    want = jax.grad(loss(False), argnums=(0, 1))(W, X)
    for grads in (jax.grad(loss(True), argnums=(0, 1))(W, X),
                  jax.jit(jax.grad(loss(True), argnums=(0, 1)))(W, X)):
        for got, ref in zip(grads, want):
            np.testing.assert_allclose(np.asarray(got), np.asarray(ref), rtol=1e-6)
    # the rule's weight reaches the gradient: d/dw of sum(x @ w) weighted per column
    np.testing.assert_allclose(np.asarray(want[0]).sum(0) > 0, [True, True, True])


def test_a_remat_blocks_own_output_is_saved_whatever_the_policy():
    """A remat's results are computed by the forward pass, and the backward pass reads
    them from there where it needs them: with only the gather inside the remat, the gathered
    weights (its output, which the matmul outside needs) are saved, not gathered again, as
    in JAX (its vjp keeps the all_gather's output; one all_gather in the whole program)."""
    forward, backward = backward_primitives(fsdp_loss(SAVE_ALL_BUT_GATHER))
    assert forward.count("all_gather") == 1
    assert "all_gather" not in backward and backward.count("reduce_scatter") == 1


def test_the_policy_decides_inside_the_block_what_is_gathered_again():
    """The tutorial's FSDP policy over the whole layer: the gathered weights are inside the
    block, not saved, so the backward pass gathers them again."""
    @partial(jax.remat, policy=SAVE_ALL_BUT_GATHER)
    def layer(w, x):
        return jnp.tanh(x @ lax.all_gather(w, "i", tiled=True))

    def loss(w, x):
        body = lambda w, x: lax.psum(layer(w, x).sum(), "i")
        return jax.shard_map(body, mesh=MESH, in_specs=(P("i"), P("i")), out_specs=P())(w, x)

    forward, backward = backward_primitives(loss)
    assert forward.count("all_gather") == 1
    assert backward.count("all_gather") == 1 and backward.count("reduce_scatter") == 1


def test_saving_everything_keeps_the_gathered_weights():
    forward, backward = backward_primitives(fsdp_loss(lambda *a, **k: True))
    assert forward.count("all_gather") == 1
    assert "all_gather" not in backward and backward.count("reduce_scatter") == 1


@pytest.mark.parametrize("policy", [jax.checkpoint_policies.nothing_saveable, None,
                                    jax.checkpoint_policies.everything_saveable],
                         ids=["nothing", "default", "everything"])
def test_second_order_through_remat_of_control_flow(policy):
    # a remat output the policy does not save is recomputed in the backward part; a cond
    # that reads it on the forward side reads it as it is
    switch = jax.checkpoint(lambda x: lax.switch(1, [jnp.sin, jnp.cos], x), policy=policy)
    scanned = lambda x: lax.scan(jax.checkpoint(lambda c, _: (jnp.sin(c) * 1.1, None),
                                                policy=policy), x, None, length=2)[0]
    assert float(jax.grad(jax.grad(switch))(1.)) == pytest.approx(-np.cos(1.), rel=1e-6)
    # y = 1.1 sin(1.1 sin x): y'' by the chain rule
    s, c = np.sin(1.), np.cos(1.)
    inner = 1.1 * s
    want = (-1.1 * np.sin(inner) * (1.1 * c) ** 2 + 1.1 * np.cos(inner) * (-1.1 * s))
    assert float(jax.grad(jax.grad(scanned))(1.)) == pytest.approx(want, rel=1e-5)


def test_remat_prints_and_runs_like_its_body():
    f = jax.remat(lambda x: jnp.sin(x) * 2)
    text = str(jax.make_jaxpr(f)(jnp.ones(3)))
    assert "remat[" in text and "saved=()" in text and "sin" in text
    np.testing.assert_allclose(np.asarray(f(jnp.ones(3))), np.sin(np.ones(3)) * 2, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(jax.grad(lambda x: f(x).sum())(jnp.ones(3))),
                               2 * np.cos(np.ones(3)), rtol=1e-6)


def test_eager_remat_traces_once_per_signature():
    # as JAX caches it: called eagerly again with the same argument types (and static
    # arguments), the body is not traced again; new types or static values trace again
    count = []

    @partial(jax.remat, static_argnums=(1,))
    def g(x, positive):
        count.append(1)
        return (jnp.sin(x) if positive else jnp.cos(x)), 3.0

    for _ in range(5):
        y, c = g(2.0, True)
    np.testing.assert_allclose(float(y), np.sin(np.float32(2.0)), rtol=1e-6)
    assert c == 3.0 and len(count) == 1
    np.testing.assert_allclose(float(g(2.0, False)[0]), np.cos(np.float32(2.0)), rtol=1e-6)
    g(jnp.ones(3), True)
    assert len(count) == 3
    # under grad the body is traced each time (its values are traced), and differentiates
    np.testing.assert_allclose(float(jax.grad(lambda x: g(x, True)[0])(2.0)),
                               np.cos(np.float32(2.0)), rtol=1e-6)


def test_an_eager_checkpoint_gives_arrays_for_results_its_body_did_not_compute():
    # JAX: jax.checkpoint(jax.jit(lambda x: 2 * x), static_argnums=(0,))(1.) is an Array
    doubled = jax.checkpoint(jax.jit(lambda x: 2 * x), static_argnums=(0,))(1.0)
    assert isinstance(doubled, jax.Array) and float(doubled) == 2.0
    doubled.block_until_ready()
    constant = jax.checkpoint(lambda: 2.0)()
    assert isinstance(constant, jax.Array) and str(jax.typeof(constant)) == "~float32[]"
    assert jax.checkpoint(lambda x: x)(1.0) == 1.0          # a Python number passed through
