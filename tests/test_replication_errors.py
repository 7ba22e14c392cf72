"""The out_specs replication check (SEMANTICS 3.5), turning it off (3.6, 1.5), and Python control
flow on eager body values (3.6). Eager and ``jit`` raise the same errors."""
import operator
import sys

import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from shardc import lax
from shardc.experimental.shard_map import shard_map
from shardc.sharding import PartitionSpec as P
from compiler.replication import ReplicationError


def eager(f):
    return f


WRAPS = [pytest.param(eager, id="eager"), pytest.param(jax.jit, id="jit")]

HEAD = ("shard_map applied to the function '{fn}' was given out_specs which require replication "
        "which can't be statically inferred given the mesh:\n\n"
        "The mesh given has shape {sizes} with corresponding axis names {names}.\n\n")
TAIL = ("\n\nCheck if these output values are meant to be replicated over those mesh axes. If "
        "not, consider revising the corresponding out_specs entries. If so, consider disabling "
        "the check by passing the {flag}=False argument to shard_map.")


def failure(path, spec, unnamed, bad, origin=""):
    return (f"out_specs{path} is {spec} which implies that the corresponding output value is "
            f"replicated across {unnamed}, but it may vary over {bad}{origin}. Reduce it over "
            f"those axes (for example with psum) or mention them in out_specs{path}.")


def failure_over(path, spec, named, bad, varying, origin=""):
    """A spec leaving several axes unnamed: JAX 0.10.2's words, then shardc's origin and
    advice."""
    return (f"out_specs{path} is {spec} which implies that the corresponding output value is "
            f"only varying across mesh axes {{{named}}} and not {{{bad}}}, but it was inferred "
            f"to be possibly varying over {{{varying}}}{origin}. Reduce it over those axes (for "
            f"example with psum) or mention them in out_specs{path}.")


@pytest.fixture
def mesh():
    return jax.make_mesh((4, 2), ('x', 'y'))


def replication_error(fn, *args) -> str:
    with pytest.raises(ValueError) as info:
        fn(*args)
    assert type(info.value) is ReplicationError
    # one error, raised once: not another one while handling a first
    assert info.value.__context__ is None and info.value.__cause__ is None
    return str(info.value)


# --- 3.5: the examples ---------------------------------------------------------------------------

@pytest.mark.parametrize("wrap", WRAPS)
def test_doubling_claimed_replicated_over_x(mesh, wrap):
    def double(x):
        return 2 * x
    f = shard_map(double, mesh, in_specs=P('x', 'y'), out_specs=P(None, 'y'))
    text = replication_error(wrap(f), jnp.arange(8 * 16.).reshape(8, 16))
    assert text == (HEAD.format(fn="double", sizes=(4, 2), names=('x', 'y'))
                    + failure("", "P(None, 'y')", "mesh axis 'x'", "mesh axis 'x'")
                    + TAIL.format(flag="check_rep"))


@pytest.mark.parametrize("wrap", WRAPS)
def test_psum_over_x_makes_it_pass(mesh, wrap):
    def double(x):
        return 2 * lax.psum(x, 'x')
    f = shard_map(double, mesh, in_specs=P('x', 'y'), out_specs=P(None, 'y'))
    x = np.arange(8 * 16., dtype=np.float32).reshape(8, 16)
    y = wrap(f)(jnp.asarray(x))
    assert y.shape == (2, 16)
    np.testing.assert_array_equal(np.asarray(y), 2 * sum(np.split(x, 4)))


@pytest.mark.parametrize("wrap", WRAPS)
def test_v6_identity_names_lambda_and_axis_i(wrap):
    mesh = jax.make_mesh((2,), ('i',))
    f = jax.shard_map(lambda x: x, mesh=mesh, in_specs=P('i'), out_specs=P())
    text = replication_error(wrap(f), jnp.arange(6.))
    assert text == (HEAD.format(fn="<lambda>", sizes=(2,), names=('i',))
                    + failure("", "P()", "mesh axis 'i'", "mesh axis 'i'")
                    + TAIL.format(flag="check_vma"))


@pytest.mark.parametrize("wrap", WRAPS)
def test_origin_names_the_line_where_the_value_starts_to_vary(mesh, wrap):
    lines = []

    def scaled(x):
        y, line = x * lax.axis_index('x'), sys._getframe().f_lineno
        lines.append(line)
        return y
    f = jax.shard_map(scaled, mesh=mesh, in_specs=P(), out_specs=P())
    text = replication_error(wrap(f), jnp.arange(8.))
    origin = f" (it first varies over 'x' at test_replication_errors.py:{lines[-1]})"
    assert text == (HEAD.format(fn="scaled", sizes=(4, 2), names=('x', 'y'))
                    + failure_over("", "P()", "", "x", "x", origin)
                    + TAIL.format(flag="check_vma"))


@pytest.mark.parametrize("wrap", WRAPS)
def test_an_implicit_lift_is_not_an_origin(mesh, wrap):
    # c is lifted over 'x' to meet x (a pvary equation when traced): x, an input, already
    # varied over 'x', so no line is named, eagerly or under jit.
    f = jax.shard_map(lambda x, c: c + x, mesh=mesh, in_specs=(P('x'), P()), out_specs=P())
    text = replication_error(wrap(f), jnp.arange(8.), jnp.ones(2))
    assert failure_over("", "P()", "", "x", "x") in text


@pytest.mark.parametrize("wrap", WRAPS)
def test_the_earliest_origin_is_named(mesh, wrap):
    lines = []

    def body(c):
        y, line = c * lax.axis_index('y'), sys._getframe().f_lineno
        lines.append(line)
        return 2 * c + y          # 2 * c is lifted over 'y' here: still y's line is named
    f = jax.shard_map(body, mesh=mesh, in_specs=P(), out_specs=P())
    text = replication_error(wrap(f), jnp.ones(2))
    origin = f" (it first varies over 'y' at test_replication_errors.py:{lines[-1]})"
    assert failure_over("", "P()", "", "y", "y", origin) in text


@pytest.mark.parametrize("wrap", WRAPS)
def test_explicit_pvary_is_an_origin(mesh, wrap):
    lines = []

    def body(x):
        y, line = lax.pvary(x, 'y'), sys._getframe().f_lineno
        lines.append(line)
        return y
    f = jax.shard_map(body, mesh=mesh, in_specs=P('x'), out_specs=P('x'))
    text = replication_error(wrap(f), jnp.arange(8.))
    origin = f" (it first varies over 'y' at test_replication_errors.py:{lines[-1]})"
    assert text == (HEAD.format(fn="body", sizes=(4, 2), names=('x', 'y'))
                    + failure("", "P('x',)", "mesh axis 'y'", "mesh axis 'y'", origin)
                    + TAIL.format(flag="check_vma"))


@pytest.mark.parametrize("wrap", WRAPS)
def test_several_failing_outputs_are_bullets(mesh, wrap):
    def body(a, b):
        return {'sum': lax.psum(a, 'x'), 'a': a, 'b': b}
    f = shard_map(body, mesh, in_specs=(P('x', 'y'), P('y')),
                  out_specs={'sum': P(), 'a': P(None, 'y'), 'b': P()})
    text = replication_error(wrap(f), jnp.ones((8, 4)), jnp.ones((4,)))
    assert text == (
        HEAD.format(fn="body", sizes=(4, 2), names=('x', 'y'))
        + "* " + failure("['a']", "P(None, 'y')", "mesh axis 'x'", "mesh axis 'x'")
        + "\n\n* " + failure_over("['b']", "P()", "", "y", "y")
        + "\n\n* " + failure_over("['sum']", "P()", "", "y", "y")
        + TAIL.format(flag="check_rep"))


@pytest.mark.parametrize("wrap", WRAPS)
def test_varying_over_every_unnamed_axis_text(mesh, wrap):
    f = jax.shard_map(lambda x: [x], mesh=mesh, in_specs=P('x', 'y'), out_specs=[P()])
    text = replication_error(wrap(f), jnp.ones((8, 4)))
    assert failure_over("[0]", "P()", "", "x,y", "x,y") in text


def test_eager_and_jit_give_the_same_error(mesh):
    f = shard_map(lambda x: (x, lax.psum(x, 'y')), mesh, in_specs=P('x', 'y'),
                  out_specs=(P('x'), P(None, 'y')))
    x = jnp.ones((8, 4))
    assert replication_error(f, x) == replication_error(jax.jit(f), x)


def test_flag_wording_old_and_new_api(mesh):
    x = jnp.ones((8, 4))
    old = replication_error(shard_map(lambda x: x, mesh, P('x'), P()), x)
    new = replication_error(jax.shard_map(lambda x: x, mesh=mesh, in_specs=P('x'),
                                          out_specs=P()), x)
    assert old.endswith("passing the check_rep=False argument to shard_map.")
    assert new.endswith("passing the check_vma=False argument to shard_map.")
    assert old.replace("check_rep", "check_vma") == new


@pytest.mark.parametrize("wrap", WRAPS)
def test_invariant_output_under_a_named_spec_is_tiled(mesh, wrap):
    f = jax.shard_map(lambda x: lax.psum(x, 'x'), mesh=mesh, in_specs=P('x'),
                      out_specs=P('x'))
    y = wrap(f)(jnp.arange(8.))
    np.testing.assert_array_equal(np.asarray(y), np.tile([12., 16.], 4))


# --- 3.6 / 1.5: the check off --------------------------------------------------------------------

@pytest.mark.parametrize("wrap", WRAPS)
def test_check_off_skips_the_check_and_untiles_coordinate_zero(mesh, wrap):
    x = np.arange(8 * 16., dtype=np.float32).reshape(8, 16)
    old = shard_map(lambda x: x, mesh, in_specs=P('x', 'y'), out_specs=P(), check_rep=False)
    new = jax.shard_map(lambda x: x, mesh=mesh, in_specs=P('x', 'y'), out_specs=P(),
                        check_vma=False)
    for f in (old, new):
        y = wrap(f)(jnp.asarray(x))
        assert y.shape == (2, 8)
        np.testing.assert_array_equal(np.asarray(y), x[0:2, 0:8])


@pytest.mark.parametrize("wrap", WRAPS)
def test_check_off_untiles_along_the_unnamed_axis_only(mesh, wrap):
    x = np.arange(8 * 16., dtype=np.float32).reshape(8, 16)
    f = shard_map(lambda x: 2 * x, mesh, in_specs=P('x', 'y'), out_specs=P(None, 'y'),
                  check_rep=False)
    y = wrap(f)(jnp.asarray(x))
    np.testing.assert_array_equal(np.asarray(y), 2 * x[0:2])


@pytest.mark.parametrize("wrap", WRAPS)
def test_check_off_gives_the_same_values_for_passing_programs(mesh, wrap):
    x = jnp.arange(8 * 16.).reshape(8, 16)
    results = [wrap(shard_map(lambda x: lax.psum(x, 'x'), mesh, P('x', 'y'), P(None, 'y'),
                              check_rep=flag))(x) for flag in (True, False)]
    np.testing.assert_array_equal(np.asarray(results[0]), np.asarray(results[1]))


# --- 3.6: Python control flow on eager body values -----------------------------------------------

def test_if_on_an_invariant_eager_value_is_allowed(mesh):
    def body(x):
        total = lax.psum(x.sum(), ('x', 'y'))
        if total > 0:
            return x
        return -x
    x = jnp.arange(8 * 4.).reshape(8, 4)
    y = shard_map(body, mesh, P('x', 'y'), P('x', 'y'))(x)
    np.testing.assert_array_equal(np.asarray(y), np.asarray(x))
    y = shard_map(body, mesh, P('x', 'y'), P('x', 'y'))(-x - 1)
    np.testing.assert_array_equal(np.asarray(y), np.asarray(x) + 1)


def test_python_numbers_from_invariant_values(mesh):
    """bool, int and operator.index of a value the check proves invariant are Python numbers
    in an eager body, as JAX's; float never is (JAX's Tracer.__float__ asks for no value)."""
    seen = []

    def body(x):
        n = lax.psum(x.sum(), ('x', 'y'))
        seen.append((bool(n > 0), int(n), operator.index(n.astype(np.int32))))
        with pytest.raises(jax.errors.ConcretizationTypeError,
                           match=r"traced array with shape float32\[\]\nThe problem arose "
                                 r"with the `float` function"):
            float(n)
        return x
    shard_map(body, mesh, P('x', 'y'), P('x', 'y'))(jnp.ones((8, 4)))
    assert seen == [(True, 32, 32)]


def test_no_python_numbers_from_an_eager_body_without_the_check(mesh):
    """With check_vma off nothing is proved invariant: JAX gives no value (even a psum's)."""
    def body(x, n):
        return x + 1 if n > 0 else x - 1
    f = jax.shard_map(body, mesh=mesh, in_specs=(P('x'), P()), out_specs=P('x'),
                      check_vma=False)
    with pytest.raises(jax.TracerBoolConversionError,
                       match=r"Attempted boolean conversion of traced array with shape "
                             r"bool\[\]"):
        f(np.ones(8, np.float32), np.float32(3))


@pytest.mark.parametrize("check", [True, False])
def test_if_on_a_varying_eager_value_raises(mesh, check):
    def body(x):
        if x.sum() > 0:
            return x
        return -x
    f = shard_map(body, mesh, P('x', 'y'), P('x', 'y'), check_rep=check)
    with pytest.raises(TypeError) as info:
        f(jnp.ones((8, 4)))
    assert type(info.value) is jax.TracerBoolConversionError
    assert str(info.value) == ("Attempted boolean conversion of traced array with shape "
                               "bool[]{V:(x,y)}.\nSee https://docs.jax.dev/en/latest/errors.html"
                               "#jax.errors.TracerBoolConversionError")


def test_bool_of_a_partly_varying_eager_value(mesh):
    def body(x):
        return x if bool(lax.psum(x.sum(), 'x') > 0) else -x
    with pytest.raises(TypeError) as info:
        shard_map(body, mesh, P('x', 'y'), P('x', 'y'))(jnp.ones((8, 4)))
    assert str(info.value) == ("Attempted boolean conversion of traced array with shape "
                               "bool[]{V:y}.\nSee https://docs.jax.dev/en/latest/errors.html"
                               "#jax.errors.TracerBoolConversionError")


def test_int_and_float_of_a_varying_eager_value_raise(mesh):
    """JAX's ConcretizationTypeError naming the function (it was the bool conversion's)."""
    for convert in (int, float):
        f = shard_map(lambda x: x * convert(x.sum()), mesh, P('x'), P('x'))
        with pytest.raises(jax.errors.ConcretizationTypeError) as info:
            f(jnp.ones((8,)))
        assert str(info.value).startswith(
            "Abstract tracer value encountered where concrete value is expected: traced array "
            f"with shape float32[]{{V:x}}\nThe problem arose with the `{convert.__name__}` "
            "function.")


def test_if_under_jit_names_the_users_line(mesh):
    lines = []

    def body(x):
        lines.append(sys._getframe().f_lineno + 1)
        if x.sum() > 0:
            return x
        return -x
    f = jax.jit(shard_map(body, mesh, P('x', 'y'), P('x', 'y')))
    with pytest.raises(TypeError) as info:
        f(jnp.ones((8, 4)))
    assert isinstance(info.value, jax.TracerBoolConversionError)
    assert str(info.value).startswith(
        "Attempted boolean conversion of traced array with shape bool[]{V:(x,y)}.\nThe error "
        f"occurred while tracing at test_replication_errors.py:{lines[-1]}: ")


def test_if_on_an_invariant_value_under_jit_is_a_tracer_error(mesh):
    def body(x):
        if lax.psum(x.sum(), ('x', 'y')) > 0:
            return x
        return -x
    with pytest.raises(jax.TracerBoolConversionError):
        jax.jit(shard_map(body, mesh, P('x', 'y'), P('x', 'y')))(jnp.ones((8, 4)))


@pytest.mark.parametrize("wrap", WRAPS)
def test_with_auto_pcast_off_operands_must_vary_alike(mesh, wrap):
    """``jax_auto_pcast`` off: an operation whose operands vary over different axes (a literal
    is invariant) is JAX's ValueError instead of lifting the others; a pcast by hand, a
    one-operand operation and check_vma=False run as ever. Traces made with it on are not
    reused."""
    x = jnp.arange(32.0).reshape(8, 4)
    scaled = wrap(shard_map(lambda b: b * 2, mesh, P('x', 'y'), P('x', 'y')))
    np.testing.assert_array_equal(np.asarray(scaled(x)), np.asarray(x) * 2)
    jax.config.update("jax_auto_pcast", False)
    try:
        with pytest.raises(ValueError, match=(
                r"Primitive mul requires varying manual axes to match, but got "
                r"\[frozenset\(\{'[xy]', '[xy]'\}\), frozenset\(\)\]\. .*check_vma=False")):
            scaled(x)
        cast = wrap(shard_map(lambda b: b * lax.pcast(jnp.float32(2), ('x', 'y'), to="varying"),
                              mesh, P('x', 'y'), P('x', 'y')))
        unary = wrap(shard_map(jnp.sin, mesh, P('x', 'y'), P('x', 'y')))
        unchecked = wrap(shard_map(lambda b: b * 2, mesh, P('x', 'y'), P('x', 'y'),
                                   check_rep=False))
        for f, want in ((cast, np.asarray(x) * 2), (unary, np.sin(np.asarray(x))),
                        (unchecked, np.asarray(x) * 2)):
            np.testing.assert_allclose(np.asarray(f(x)), want, rtol=1e-6)
    finally:
        jax.config.update("jax_auto_pcast", True)
    np.testing.assert_array_equal(np.asarray(scaled(x)), np.asarray(x) * 2)
