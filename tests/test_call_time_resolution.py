"""What a shard_map reads when it is called, not when it is defined.

- in_specs omitted: each argument's spec comes from its layout, eagerly and under jit, grad
  and jvp alike (a traced argument keeps its layout: ``typeof(x).sharding``). Before,
  under jit every device got the whole array: ``jit(f)(x)`` was 4x ``f(x)``.
- mesh omitted: the mesh current at the call (``set_mesh``, ``use_mesh``); defining needs none,
  calling with none is a ValueError, and jit does not reuse a program traced for another mesh.
"""
from __future__ import annotations

import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from shardc import lax
from shardc.sharding import NamedSharding, PartitionSpec as P

MESH4 = jax.make_mesh((4,), ("i",))
MESH2 = jax.make_mesh((2,), ("i",))
AUTO4 = jax.sharding.Mesh(jax.devices()[:4], ("i",))


def _total():
    return jax.shard_map(lambda b: lax.psum(b.sum(), "i"), mesh=MESH4, out_specs=P())


def _placed(values, spec=P("i"), mesh=MESH4):
    return jax.device_put(jnp.asarray(values), NamedSharding(mesh, spec))


@pytest.mark.parametrize("wrap", ["eager", "jit", "jit-twice"])
def test_omitted_in_specs_follow_the_layout_under_every_wrapper(wrap):
    f = _total()
    g = {"eager": f, "jit": jax.jit(f), "jit-twice": jax.jit(jax.jit(f))}[wrap]
    x = _placed(np.arange(8.))
    assert float(g(x)) == 28.0
    # the same values laid out otherwise: not on the mesh, so P(): every device sums all
    assert float(g(jnp.arange(8.))) == 4 * 28.0


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_omitted_in_specs_follow_the_layout_under_autodiff(jit):
    f = _total()
    x = _placed(np.arange(8.))
    grad = jax.jit(jax.grad(f)) if jit else jax.grad(f)
    np.testing.assert_array_equal(np.asarray(grad(x)), np.ones(8))
    value, g = jax.value_and_grad(f)(x)
    assert float(value) == 28.0
    np.testing.assert_array_equal(np.asarray(g), np.ones(8))
    out, tangent = jax.jvp(f, (x,), (jnp.ones(8),))
    assert (float(out), float(tangent)) == (28.0, 8.0)


def test_a_traced_argument_reports_its_layout():
    x = _placed(np.arange(8.))
    seen = []

    @jax.jit
    def f(v):
        seen.append(jax.typeof(v).sharding)
        return v * 2

    f(x)
    # on Explicit axes the type's sharding, on the abstract mesh (JAX's)
    assert seen == [NamedSharding(MESH4.abstract_mesh, P("i"))]
    assert jax.typeof(x).sharding == NamedSharding(MESH4.abstract_mesh, P("i"))
    assert x.sharding == NamedSharding(MESH4, P("i"))
    # on Auto axes the type names no split: P(None) on the argument's mesh, abstract (JAX's);
    # the layout is the traced value's own sharding
    y = _placed(np.arange(8.), mesh=AUTO4)
    seen.clear()
    layouts = []
    jax.jit(lambda v: layouts.append(v.traced_sharding()) or v)(y)
    f(y)
    assert seen == [NamedSharding(AUTO4.abstract_mesh, P(None))]
    assert layouts == [NamedSharding(AUTO4, P("i"))]


def test_jit_traces_again_for_another_layout():
    f = jax.jit(_total())
    assert float(f(_placed(np.arange(8.)))) == 28.0
    assert float(f(_placed(np.arange(8.), P()))) == 4 * 28.0


def test_a_shard_map_without_a_mesh_takes_the_mesh_current_at_the_call():
    ranks = jax.shard_map(lambda b: b * lax.axis_index("i"), in_specs=P("i"), out_specs=P("i"))
    assert jax.sharding.get_mesh().empty        # defined with no mesh set: fine
    with jax.sharding.use_mesh(MESH4):
        np.testing.assert_array_equal(np.asarray(ranks(np.ones(8))), [0, 0, 1, 1, 2, 2, 3, 3])
    with jax.set_mesh(MESH2):
        np.testing.assert_array_equal(np.asarray(ranks(np.ones(8))), [0] * 4 + [1] * 4)
        # an array made under the mesh is typed replicated on it: not what in_specs says
        with pytest.raises(ValueError, match=r"in_specs passed to shard_map: P\('i',\) does "
                                             r"not match the specs of the input: P\(None,\)"):
            ranks(jnp.ones(8))
        split = jax.reshard(jnp.ones(8), P("i"))
        np.testing.assert_array_equal(np.asarray(ranks(split)), [0] * 4 + [1] * 4)


def test_jit_does_not_reuse_a_program_traced_under_another_mesh():
    ranks = jax.jit(jax.shard_map(lambda b: b * lax.axis_index("i"), in_specs=P("i"),
                                  out_specs=P("i")))
    with jax.set_mesh(MESH4):
        np.testing.assert_array_equal(np.asarray(ranks(np.ones(8))), [0, 0, 1, 1, 2, 2, 3, 3])
    with jax.set_mesh(MESH2):
        np.testing.assert_array_equal(np.asarray(ranks(np.ones(8))), [0] * 4 + [1] * 4)


def test_omitted_specs_read_the_layout_on_the_mesh_of_the_call():
    f = jax.shard_map(lambda b: lax.psum(b.sum(), "i"), out_specs=P())
    with jax.set_mesh(MESH4):
        assert float(f(_placed(np.arange(8.)))) == 28.0
        # laid out on another mesh's devices: the shard_map cannot compute on them (JAX's
        # ValueError, eagerly and under jit)
        for call in (f, jax.jit(f)):
            with pytest.raises(ValueError, match=r"^Received incompatible devices for jitted "
                                                 r"computation\. Got argument .* with device "
                                                 r"ids \[0, 1\] on platform CPU and "):
                call(_placed(np.arange(8.), mesh=MESH2))


def test_calling_without_any_mesh_is_a_value_error():
    f = jax.shard_map(lambda b: b, in_specs=P(), out_specs=P())
    with pytest.raises(ValueError, match="The context mesh cannot be empty. Use "
                                         "`jax.set_mesh"):
        f(jnp.ones(4))
    with pytest.raises(ValueError, match="The context mesh cannot be empty"):
        jax.jit(f)(jnp.ones(4))


def test_definition_checks_the_function_and_the_call_the_rest():
    """As JAX 0.10: a non-callable is refused at once; specs and flags when called."""
    with pytest.raises(TypeError, match="requires a callable"):
        jax.shard_map(3, out_specs=P())
    bad_out = jax.shard_map(abs, mesh=MESH4, out_specs=3)            # defined
    with pytest.raises(TypeError, match="out_specs argument must be a pytree of PartitionSpec"):
        bad_out(np.ones(4))
    bad_flag = jax.shard_map(abs, mesh=MESH4, out_specs=P(), check_vma="yes")
    with pytest.raises(ValueError, match="check_vma='yes'"):
        bad_flag(np.ones(4))


# --- layouts followed through operations outside shard_map (compiler.layouts) --------------------

@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_elementwise_results_keep_their_operands_layout(jit):
    f = _total()
    x = _placed(np.arange(8.))
    g = (lambda x: f(jnp.sin(x) * 2 + x)) if not jit else jax.jit(lambda x: f(jnp.sin(x) * 2 + x))
    want = float((np.sin(np.arange(8.)) * 2 + np.arange(8.)).sum())
    assert float(g(x)) == pytest.approx(want, rel=1e-6)
    y = jnp.sin(x) * 2
    assert y.sharding == NamedSharding(MESH4, P("i"))


MAKES = [lambda x: x.reshape(2, 4).reshape(8), lambda x: jnp.cumsum(x),
         lambda x: jnp.concatenate([x[:4], x[4:]])]


AUTO_NOT_INFERRED = ("shard_map in_specs argument must be a pytree of "
                     "`jax.sharding.PartitionSpec` instances, but it was `None` when "
                     "axis_names=frozenset({'i'}) are of type AxisType.Auto")


@pytest.mark.parametrize("make", MAKES, ids=["reshape", "cumsum", "concatenate"])
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_on_auto_axes_in_specs_are_not_inferred(make, jit):
    """JAX's TypeError: on Auto axes a value's type says nothing of its layout, so a
    shard_map reads in_specs from the argument types only where its manual axes are all
    Explicit (a guess would give every device the whole array: 4x the answer, silently)."""
    f = jax.shard_map(lambda b: lax.psum(b.sum(), "i"), mesh=AUTO4, out_specs=P())
    x = _placed(np.arange(8.), mesh=AUTO4)
    g = (lambda x: f(make(x))) if not jit else jax.jit(lambda x: f(make(x)))
    with pytest.raises(TypeError) as err:
        g(x)
    assert str(err.value) == AUTO_NOT_INFERRED
    # with in_specs given there is nothing to infer
    given = jax.shard_map(lambda b: lax.psum(b.sum(), "i"), mesh=AUTO4, in_specs=P("i"),
                          out_specs=P())
    assert float(given(make(x))) == pytest.approx(float(np.asarray(make(jnp.arange(8.))).sum()))


def test_in_specs_are_inferred_where_the_manual_axes_are_explicit():
    mixed = jax.make_mesh((4, 2), ("i", "j"), axis_types=(jax.sharding.AxisType.Explicit,
                                                         jax.sharding.AxisType.Auto))
    x = _placed(np.arange(8.), mesh=mixed)
    over_i = jax.shard_map(lambda b: lax.psum(b.sum(), "i"), mesh=mixed, out_specs=P(),
                           axis_names={"i"})
    assert float(over_i(x)) == 28.0
    both = jax.shard_map(lambda b: b, mesh=mixed, out_specs=P())
    with pytest.raises(TypeError, match=r"axis_names=frozenset\(\{'[ij]', '[ij]'\}\) are "
                                        r"of type AxisType.(Auto|Explicit), AxisType"):
        both(x)


@pytest.mark.parametrize("make, error", list(zip(MAKES, [
    "This reshape is not supported",
    "The input should be fully replicated when axis is not specified to cumsum",
    None])), ids=["reshape", "cumsum", "concatenate"])
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_on_explicit_axes_the_types_decide(make, error, jit):
    """On Explicit axes each operation types its result as JAX does: a reshape or cumsum of
    the split dimension is JAX's ShardingTypeError, and the halves concatenate back into the
    split array, which the shard_map reads."""
    f = _total()
    x = _placed(np.arange(8.))
    g = (lambda x: f(make(x))) if not jit else jax.jit(lambda x: f(make(x)))
    if error is None and not jit:
        # eagerly, JAX slices an array laid out on several devices by a gather, which a
        # split dimension refuses; under jit the slices keep the split
        error = r"Use `\.at\[\.\.\.\]\.get\(out_sharding=\)`"
    if error is None:
        assert float(g(x)) == 28.0
    else:
        with pytest.raises(jax.sharding.ShardingTypeError, match=error):
            g(x)


def test_a_batch_of_laid_out_values_is_not_guessed_either():
    f = jax.shard_map(lambda b: lax.psum(b.sum(), "i"), mesh=AUTO4, out_specs=P())
    x = _placed(np.arange(8.), mesh=AUTO4)
    with pytest.raises(TypeError) as err:
        jax.vmap(f)(jnp.stack([x, x]))
    assert str(err.value) == AUTO_NOT_INFERRED
    # on Explicit axes each member's type is known: the batch splits as its members
    typed = _placed(np.arange(8.))
    got = jax.vmap(_total())(jnp.stack([typed, typed]))
    np.testing.assert_array_equal(np.asarray(got), [28.0, 28.0])
    # host values have no layout: P(), as JAX reads an unlaid-out argument
    got = jax.vmap(_total())(jnp.stack([jnp.arange(8.)] * 2))
    np.testing.assert_array_equal(np.asarray(got), [4 * 28.0] * 2)
