"""remat of shard_map, checkpoint policies and names, linearize, effects_barrier.

Gradients are held against the un-remat'ed gradient and hand-derived values; what a policy
saves is read off the gradient program: the equations the backward pass runs again.
"""
from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import shardc as jax
import shardc.numpy as jnp
from shardc.ad_checkpoint import checkpoint_name
from shardc.sharding import PartitionSpec as P

# An Auto mesh: these tests count equations of the shard_maps themselves; on Explicit axes
# the cotangent of an unsplit argument is gathered to its type in a shard_map of its own.
MESH = jax.sharding.Mesh(jax.devices()[:4], ("i",))
X8 = jnp.arange(8.) / 3 - 1
W = jnp.arange(12.).reshape(4, 3) / 10 - 0.5
XS = jnp.arange(32.).reshape(8, 4) / 30


def close(got, want, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=rtol, atol=atol)


def sin_sin_loss(check_vma=True):
    body = lambda x: jax.lax.psum(jnp.sin(jnp.sin(x)).sum(), "i")
    return jax.shard_map(body, mesh=MESH, in_specs=P("i"), out_specs=P(), check_vma=check_vma)


def shard_map_count(fun, *args) -> int:
    module = jax.jit(fun).lower(*args).module
    return len(module.all_shard_maps())


def count(program, name: str) -> int:
    """Equations of primitive ``name`` in a program and the remats inside it."""
    return sum(count(e.params["jaxpr"], name) if e.primitive.name == "remat"
               else e.primitive.name == name for e in program.eqns)


# --- remat of a shard_map -------------------------------------------------------------------

@pytest.mark.parametrize("check_vma", [True, False])
def test_remat_of_a_shard_map_under_grad(check_vma):
    loss = sin_sin_loss(check_vma)
    x64 = np.asarray(X8, np.float64)
    want = np.cos(np.sin(x64)) * np.cos(x64)
    plain = jax.grad(loss)(X8)
    close(plain, want)
    for remat in (jax.remat, jax.checkpoint):
        close(jax.grad(remat(loss))(X8), plain)
        close(jax.jit(jax.grad(remat(loss)))(X8), plain)
        close(remat(loss)(X8), loss(X8))
    value, g = jax.value_and_grad(jax.remat(loss))(X8)
    assert float(value) == pytest.approx(float(np.sin(np.sin(x64)).sum()), rel=1e-5)


def test_remat_of_a_function_calling_shard_map():
    sharded = jax.shard_map(lambda x, w: jnp.tanh(x @ w), mesh=MESH, in_specs=(P("i"), P()),
                            out_specs=P("i"))

    def loss(w, x):
        return (sharded(x * 2, w) ** 2).sum()

    want = jax.grad(loss, argnums=(0, 1))(W, XS)
    w64, x64 = np.asarray(W, np.float64), np.asarray(XS, np.float64)
    t = np.tanh(2 * x64 @ w64)
    close(want[0], (2 * x64).T @ (2 * t * (1 - t ** 2)), rtol=1e-4)
    for grad in (jax.grad(jax.checkpoint(loss), argnums=(0, 1)),
                 jax.jit(jax.grad(jax.checkpoint(loss), argnums=(0, 1)))):
        for got, ref in zip(grad(W, XS), want):
            close(got, ref)


def test_the_backward_pass_runs_the_forward_shard_map_again():
    loss = sin_sin_loss()
    # the value's forward pass, then the backward pass; with remat the backward pass first
    # runs the forward body again for the values it needs
    assert shard_map_count(jax.value_and_grad(loss), X8) == 2
    assert shard_map_count(jax.value_and_grad(jax.remat(loss)), X8) == 3
    program = jax.make_jaxpr(jax.grad(jax.remat(loss)))(X8).jaxpr
    bodies = [e.params["jaxpr"] for remat in program.eqns if remat.primitive.name == "remat"
              for e in remat.params["jaxpr"].eqns if e.primitive.name == "shard_map"]
    bodies += [e.params["jaxpr"] for e in program.eqns if e.primitive.name == "shard_map"]
    # the forward body and its recomputation both compute sin(sin(x)); nothing is kept
    assert [count(b, "sin") for b in bodies] == [2, 2, 0]
    # a policy saving the shard_map keeps its residuals: nothing runs again
    saved = jax.remat(loss, policy=jax.checkpoint_policies.everything_saveable)
    assert shard_map_count(jax.value_and_grad(saved), X8) == 2
    close(jax.jit(jax.grad(saved))(X8), jax.grad(loss)(X8))
    saving = jax.make_jaxpr(jax.grad(loss))(X8).jaxpr
    assert sum(count(e.params["jaxpr"], "sin") for e in saving.eqns
               if e.primitive.name == "shard_map") == 2


# --- policies --------------------------------------------------------------------------------

def mlp_loss(policy):
    def layer(w, x):
        return jnp.sin(jnp.tanh(x @ w))
    body = lambda w, x: jax.lax.psum(jax.remat(layer, policy=policy)(w, x).sum(), "i")
    return jax.shard_map(body, mesh=MESH, in_specs=(P(), P("i")), out_specs=P())


def backward_count(loss, name):
    """Equations ``name`` in the backward pass (the last shard_map: with nothing saved, the
    forward one is dead and gone, the backward pass computing everything it needs)."""
    backward = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(W, XS).module.all_shard_maps()[-1]
    return sum(e.primitive.name == name for e in backward.device_programs[0].program.eqns)


def test_policy_names_are_jax_names():
    names = {"everything_saveable", "nothing_saveable", "dots_saveable", "checkpoint_dots",
             "dots_with_no_batch_dims_saveable", "save_anything_except_these_names",
             "save_only_these_names", "save_any_names_but_these", "save_from_both_policies",
             "save_and_offload_only_these_names", "offload_dot_with_no_batch_dims",
             "SaveOnlyTheseNames", "SaveAnyNamesButThese", "SaveAndOffloadOnlyTheseNames"}
    assert names <= set(vars(jax.checkpoint_policies))
    assert jax.checkpoint_policies is jax.ad_checkpoint.checkpoint_policies


@pytest.mark.parametrize("policy, recomputed_dots", [
    (jax.checkpoint_policies.nothing_saveable, 1),
    (None, 1),
    (jax.checkpoint_policies.dots_saveable, 0),
    (jax.checkpoint_policies.checkpoint_dots, 0),
    (jax.checkpoint_policies.dots_with_no_batch_dims_saveable, 0),
    (jax.checkpoint_policies.offload_dot_with_no_batch_dims("device", "pinned_host"), 0),
    (jax.checkpoint_policies.everything_saveable, 0),
])
def test_dot_policies_decide_whether_the_backward_pass_multiplies_again(policy, recomputed_dots):
    want = jax.grad(mlp_loss(jax.checkpoint_policies.everything_saveable), argnums=(0, 1))(W, XS)
    w64, x64 = np.asarray(W, np.float64), np.asarray(XS, np.float64)
    t = np.tanh(x64 @ w64)
    close(want[0], x64.T @ (np.cos(t) * (1 - t ** 2)), rtol=1e-4)
    for got, ref in zip(jax.jit(jax.grad(mlp_loss(policy), argnums=(0, 1)))(W, XS), want):
        close(got, ref)
    # the backward pass holds the two dots of the transpose, plus the recomputed one
    assert backward_count(mlp_loss(policy), "dot_general") == 2 + recomputed_dots


def named_loss(policy):
    @partial(jax.remat, policy=policy)
    def f(x, w):
        return jnp.sin(checkpoint_name(x @ w, "h")).sum()
    return f


@pytest.mark.parametrize("policy, saves_h", [
    (jax.checkpoint_policies.nothing_saveable, False),
    (jax.checkpoint_policies.save_only_these_names("h"), True),
    (jax.checkpoint_policies.save_only_these_names("other"), False),
    (jax.checkpoint_policies.SaveOnlyTheseNames(frozenset({"h"})), True),
    (jax.checkpoint_policies.SaveAnyNamesButThese(frozenset({"h"})), False),
    (jax.checkpoint_policies.save_any_names_but_these("h"), False),
    (jax.checkpoint_policies.save_any_names_but_these("other"), True),
    (jax.checkpoint_policies.save_from_both_policies(
        jax.checkpoint_policies.nothing_saveable,
        jax.checkpoint_policies.save_only_these_names("h")), True),
    (jax.checkpoint_policies.save_and_offload_only_these_names(
        names_which_can_be_saved=[], names_which_can_be_offloaded=["h"],
        offload_src="device", offload_dst="pinned_host"), True),
    # as in JAX, the names do not restrict it: everything is saveable
    (jax.checkpoint_policies.save_anything_except_these_names("h"), True),
])
def test_name_policies_save_the_named_values(policy, saves_h):
    w64, x64 = np.asarray(W, np.float64), np.asarray(XS, np.float64)
    ct = np.cos(x64 @ w64)
    for grad in (jax.grad(named_loss(policy), argnums=(0, 1)),
                 jax.jit(jax.grad(named_loss(policy), argnums=(0, 1)))):
        gx, gw = grad(XS, W)
        close(gx, ct @ w64.T, rtol=1e-5)
        close(gw, x64.T @ ct, rtol=1e-5)
    program = jax.make_jaxpr(jax.grad(named_loss(policy), argnums=(0, 1)))(XS, W).jaxpr
    # the forward product and the two of its transpose; a fourth recomputes h when not saved
    assert count(program, "dot_general") == (3 if saves_h else 4)


def test_checkpoint_name_is_the_identity_everywhere():
    x = jnp.arange(3.)
    close(checkpoint_name(x, "x"), x)
    tree = checkpoint_name({"a": x, "b": 2 * x}, "t")
    close(tree["b"], 2 * x)
    close(jax.jit(lambda x: checkpoint_name(x, "x") * 2)(x), 2 * x)
    close(jax.vmap(lambda x: checkpoint_name(x, "x") ** 2)(x), x ** 2)
    text = str(jax.make_jaxpr(lambda x: checkpoint_name(x, "hidden"))(x))
    assert "name[name='hidden']" in text
    body = jax.shard_map(lambda x: checkpoint_name(x, "x") * 2, mesh=MESH, in_specs=P("i"),
                         out_specs=P("i"))
    close(body(X8), 2 * X8)
    close(jax.jit(jax.grad(lambda x: body(x).sum()))(X8), np.full(8, 2.))


def test_dropping_names_and_policy_errors():
    with pytest.raises(ValueError, match="should not intersect"):
        jax.checkpoint_policies.save_and_offload_only_these_names(
            names_which_can_be_saved=["a"], names_which_can_be_offloaded=["a"],
            offload_src="device", offload_dst="pinned_host")
    both = jax.checkpoint_policies.save_from_both_policies(lambda *a, **k: 1,
                                                          lambda *a, **k: True)
    with pytest.raises(ValueError, match="should be a boolean"):
        jax.grad(jax.remat(jnp.sin, policy=both))(1.)


# --- linearize ---------------------------------------------------------------------------------

def test_linearize_matches_jvp_and_is_linear():
    f = lambda x, y: (jnp.sin(x) * y, jnp.exp(x).sum())
    x, y = jnp.linspace(-1., 1., 4), jnp.float32(3.)
    out, f_jvp = jax.linearize(f, x, y)
    close(out[0], np.sin(np.asarray(x)) * 3, rtol=1e-6)
    t1 = (jnp.ones(4), jnp.float32(0.5))
    t2 = (jnp.arange(4.), jnp.float32(-1.))
    for t in (t1, t2):
        want = jax.jvp(f, (x, y), t)[1]
        for got, ref in zip(f_jvp(*t), want):
            close(got, ref)
    combo = f_jvp(2 * t1[0] + 3 * t2[0], 2 * t1[1] + 3 * t2[1])
    parts = [f_jvp(*t1), f_jvp(*t2)]
    for k in range(2):
        close(combo[k], 2 * np.asarray(parts[0][k]) + 3 * np.asarray(parts[1][k]), rtol=1e-5)
    close(jax.jit(f_jvp)(*t1)[0], f_jvp(*t1)[0])
    with pytest.raises(ValueError, match="inconsistent with the original primal values"):
        f_jvp(jnp.ones(3), jnp.float32(1.))


def test_linearize_runs_while_loops_forward():
    # as JAX's: the carries that stay known loop once on the primal side; the loop runs again
    # with its tangents when the linear function is called (transposing it is an error)
    w = jnp.array([1.1, 0.9])

    def f(x, w):
        def body(c):
            i, y, z = c
            return i + 1, y * w + jnp.sin(z), z * 0.5 + i
        return jax.lax.while_loop(lambda c: c[0] < 4, body, (0, x, jnp.cos(x)))

    def stops_on_x(x):          # the loop's length depends on the differentiated value
        return jax.lax.while_loop(lambda y: y < 10., lambda y: y * 1.7, x)

    x = jnp.array([0.3, 0.7])
    t = (jnp.ones(2), jnp.full(2, 0.5))
    out, f_jvp = jax.linearize(f, x, w)
    want_out, want_t = jax.jvp(f, (x, w), t)
    for got, ref in zip(out, want_out):
        close(got, ref)
    for got, ref in zip(f_jvp(*t), want_t):
        if ref.dtype == jax.dtypes.float0:       # the integer counter's tangent: float0 zeros
            assert got.dtype == jax.dtypes.float0 and got.shape == ref.shape
        else:
            close(got, ref, rtol=1e-6)
    # the forward difference of the carried y agrees
    eps = 1e-3
    x64 = np.asarray(x, np.float64)
    y = lambda s: np.asarray(f(jnp.asarray(x64 + s * eps, jnp.float32),
                               w + jnp.float32(s * eps / 2))[1], np.float64)
    close(f_jvp(*t)[1], (y(1) - y(-1)) / (2 * eps), rtol=2e-3)
    value, lin = jax.linearize(stops_on_x, 1.0)
    close(value, 1.7 ** 5, rtol=1e-5)
    close(lin(1.0), 1.7 ** 5, rtol=1e-5)
    # the linear function is a pytree of its residuals: it can leave a jit
    _, jitted = jax.jit(lambda x: jax.linearize(lambda x: f(x, w)[1], x))(x)
    close(jitted(t[0]), jax.jvp(lambda x: f(x, w)[1], (x,), (t[0],))[1], rtol=1e-6)
    with pytest.raises(ValueError, match="Reverse-mode differentiation does not work for "
                                         "lax.while_loop"):
        jax.vjp(stops_on_x, 1.0)[1](1.0)


def test_linearize_through_a_shard_map_with_aux():
    loss = sin_sin_loss()

    def with_aux(x):
        return loss(x), {"x0": x[0]}
    out, f_jvp, aux = jax.linearize(with_aux, X8, has_aux=True)
    assert float(aux["x0"]) == float(X8[0])
    t = jnp.linspace(0., 1., 8)
    x64 = np.asarray(X8, np.float64)
    want = float(np.sum(np.cos(np.sin(x64)) * np.cos(x64) * np.asarray(t, np.float64)))
    assert float(f_jvp(t)) == pytest.approx(want, rel=1e-5)
    assert float(f_jvp(t)) == pytest.approx(float(jax.jvp(loss, (X8,), (t,))[1]), rel=1e-6)


@settings(derandomize=True, deadline=None, max_examples=6)
@given(st.lists(st.floats(-2., 2., width=32), min_size=8, max_size=8),
       st.lists(st.floats(-2., 2., width=32), min_size=8, max_size=8))
def test_linearize_agrees_with_jvp_on_generated_points(xs, ts):
    x, t = jnp.asarray(xs, jnp.float32), jnp.asarray(ts, jnp.float32)
    body = jax.shard_map(lambda x: jnp.tanh(x) * jax.lax.psum(x.sum(), "i"), mesh=MESH,
                         in_specs=P("i"), out_specs=P("i"))
    _, f_jvp = jax.linearize(body, x)
    close(f_jvp(t), jax.jvp(body, (x,), (t,))[1], rtol=1e-5, atol=1e-5)


def test_effects_barrier_returns_after_pending_work():
    x = jax.jit(lambda x: x * 2)(jnp.ones(3))
    assert jax.effects_barrier() is None
    close(x, np.full(3, 2.))


def test_checkpoint_with_static_and_keyword_arguments():
    def layer(x, w, use_sin, *, scale):
        y = x @ w
        return (jnp.sin(y) if use_sin else jnp.cos(y)) * scale

    f = jax.checkpoint(layer, static_argnums=(2,))
    w64, x64 = np.asarray(W, np.float64), np.asarray(XS, np.float64)
    for use_sin, derivative in ((True, np.cos), (False, lambda y: -np.sin(y))):
        g = jax.grad(lambda w: f(XS, w, use_sin, scale=2.).sum())(W)
        close(g, x64.T @ (2 * derivative(x64 @ w64)), rtol=1e-5)
    g = jax.grad(lambda s: f(XS, W, True, scale=s).sum())(2.)
    assert float(g) == pytest.approx(float(np.sin(x64 @ w64).sum()), rel=1e-5)


def test_print_saved_residuals_lists_what_the_backward_pass_keeps(capsys):
    """``jax.ad_checkpoint.print_saved_residuals`` as JAX's autodiff_remat page shows it: the
    arguments by name (and path), then the forward operations' results; checkpointing each
    layer keeps the layers' outputs, a policy its dots, ``checkpoint_name`` its name."""
    from shardc.ad_checkpoint import checkpoint_name, print_saved_residuals, saved_residuals

    def g(W, x):
        return jnp.sin(jnp.dot(W, x))

    def f(W1, W2, x):
        return g(W2, g(W1, x))

    def f2(W1, W2, x):
        return jax.checkpoint(g)(W2, jax.checkpoint(g)(W1, x))

    def f3(W1, W2, x):
        a = checkpoint_name(g(W1, x), "a")
        return g(W2, a)

    W1, W2, x = jnp.ones((5, 4)), jnp.ones((6, 5)), jnp.ones(4)
    args = ["f32[5,4] from the argument W1", "f32[6,5] from the argument W2",
            "f32[4] from the argument x"]

    def lines(fun, *a):
        capsys.readouterr()
        print_saved_residuals(fun, *a)
        # up to the source (file:line (function)), which the last case checks
        return [l.split(" from ")[0] if " from the " not in l else l
                for l in capsys.readouterr().out.splitlines()]

    assert lines(f, W1, W2, x) == args + [
        "f32[5] output of sin", "f32[5] output of cos", "f32[6] output of cos"]
    assert lines(f2, W1, W2, x) == args + ["f32[5] output of sin"]
    policy = jax.checkpoint_policies.dots_with_no_batch_dims_saveable
    assert lines(jax.checkpoint(f, policy=policy), W1, W2, x) == args + [
        "f32[5] output of dot_general", "f32[6] output of dot_general"]
    assert lines(jax.checkpoint(f3, policy=jax.checkpoint_policies.save_only_these_names(
        "a")), W1, W2, x) == args + ["f32[5] named 'a'"]
    # a list argument is named by its path; the source names the file, line and function
    res = saved_residuals(lambda params, x: g(params[1], g(params[0], x)), [W1, W2], x)
    assert [src for _, src in res][:2] == ["from the argument params[0]",
                                           "from the argument params[1]"]
    assert res[-1][1].startswith("output of cos from test_checkpoint_api.py:")
    assert res[-1][1].endswith("(g)")


def test_the_removed_concrete_option_is_jaxs_error():
    for concrete in (True, False):
        with pytest.raises(NotImplementedError, match="The `concrete` option to "
                                                      "`jax.checkpoint` was deprecated"):
            jax.checkpoint(lambda x: x, concrete=concrete)


def test_linearized_function_holds_its_linear_program_where_jax_does():
    """``f_jvp.func.args[0]`` is the linear program, as JAX's linearized function holds its
    linear jaxpr: under checkpoint_dots the dots are saved, so the program computes each
    dot's two tangent products (six) and recomputes the two sines the later tangents read."""
    @jax.jit
    @partial(jax.checkpoint, policy=jax.checkpoint_policies.checkpoint_dots)
    def f(x):
        for _ in range(3):
            x = jnp.sin(jnp.dot(x, x) * 1e-3)
        return x

    x = jnp.ones((2, 2))
    _, f_jvp = jax.linearize(f, x)
    text = str(f_jvp.func.args[0])
    assert text.count(" sin ") == 2 and text.count(" dot_general") == 6
    t = jnp.full((2, 2), 0.5)
    eps = 1e-2
    numeric = (np.asarray(f(x + eps * t), np.float64) - np.asarray(f(x - eps * t))) / (2 * eps)
    np.testing.assert_allclose(f_jvp(t), numeric, rtol=1e-3, atol=1e-6)
