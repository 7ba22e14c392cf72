"""The runtime replication oracle (check_vma='runtime') and its agreement with the static
checker: every program the static checker accepts passes the oracle; the static checker's
false positives are listed here as known."""
from functools import partial

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import shardc
import shardc.numpy as jnp
from shardc import lax
from shardc.experimental.shard_map import shard_map as old_shard_map
from shardc.sharding import PartitionSpec as P

MESH = shardc.make_mesh((4, 2), ("x", "y"))


def run(body, out_specs, check, x, jit=False):
    f = shardc.shard_map(body, mesh=MESH, in_specs=P("x", "y"), out_specs=out_specs,
                         check_vma=check)
    return (shardc.jit(f) if jit else f)(x)


X = jnp.arange(32.).reshape(8, 4)


@pytest.mark.parametrize("jit", [False, True])
def test_oracle_names_the_devices_that_differ(jit):
    with pytest.raises(shardc.ReplicationError) as err:
        run(lambda v: v * 2, P(None, "y"), "runtime", X, jit)
    assert str(err.value) == (
        "shard_map output 0 has out_specs entry P(None, 'y'), which claims it is "
        "replicated across mesh axis 'x', but at run time device 0 (mesh coordinates (0, 0)) "
        "and device 2 (mesh coordinates (1, 0)) hold different blocks; they differ along 'x'. "
        "Reduce the output over those axes (for example with psum) or mention them in "
        "out_specs.")


@pytest.mark.parametrize("jit", [False, True])
def test_oracle_accepts_what_is_replicated(jit):
    out = run(lambda v: lax.psum(v, "x"), P(None, "y"), "runtime", X, jit)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(X).reshape(4, 2, 4).sum(0))


def test_old_api_accepts_runtime_too():
    f = old_shard_map(lambda v: v, MESH, in_specs=P("x", "y"), out_specs=P("x"),
                      check_rep="runtime")
    with pytest.raises(shardc.ReplicationError, match="differ along 'y'"):
        f(X)


def test_bad_check_flag():
    with pytest.raises(ValueError, match="check_vma='sometimes'; expected True, False or "
                                         "'runtime'"):
        shardc.shard_map(lambda v: v, mesh=MESH, in_specs=P(), out_specs=P(),
                         check_vma="sometimes")(X)


def test_runtime_mode_prints_in_the_program():
    text = str(shardc.make_jaxpr(partial(run, lambda v: v, P("x", "y"), "runtime"))(X))
    assert "check_vma='runtime'" in text


# --- known false positives of the static checker (SEMANTICS 3.7): rejected statically, they
# hold at run time. The checker keeps rejecting them by design.

KNOWN_FALSE_POSITIVES = {
    "all_gather returned replicated": (lambda v: lax.all_gather(v, "x", tiled=True),
                                       P(None, "y")),
    "ppermute of a replicated value": (
        lambda v: lax.ppermute(lax.psum(v, "x"), "x", [(0, 1), (1, 0), (2, 3), (3, 2)]),
        P(None, "y")),
    "x - x of a varying x": (lambda v: v - v, P()),
    "zeros_like of a varying x": (lambda v: jnp.zeros_like(v), P()),
    "axis_index values that coincide": (
        lambda v: v * 0 + (lax.axis_index("x") * 0).astype(jnp.float32), P(None, "y")),
}


@pytest.mark.parametrize("name", sorted(KNOWN_FALSE_POSITIVES))
def test_known_false_positive(name):
    body, out_specs = KNOWN_FALSE_POSITIVES[name]
    with pytest.raises(shardc.ReplicationError):
        run(body, out_specs, True, X)
    run(body, out_specs, "runtime", X)
    run(body, out_specs, "runtime", X, jit=True)


# --- random programs through both checkers ---------------------------------------------------------

def _op(kind):
    """One step of a random body: (function of the running value, name)."""
    return {
        "double": lambda v: v * 2.0,
        "sin": jnp.sin,
        "psum_x": lambda v: lax.psum(v, "x"),
        "psum_y": lambda v: lax.psum(v, "y"),
        "pmax_xy": lambda v: lax.pmax(v, ("x", "y")),
        "pmean_yx": lambda v: lax.pmean(v, ("y", "x")),
        "add_index_x": lambda v: v + lax.axis_index("x").astype(jnp.float32),
        "add_index_y": lambda v: v + lax.axis_index("y").astype(jnp.float32),
        "ring_x": lambda v: lax.ppermute(v, "x", [(k, (k + 1) % 4) for k in range(4)]),
        "gather_y": lambda v: lax.all_gather(v, "y", axis=1, tiled=True)[:, :v.shape[1]],
        "scatter_x": lambda v: lax.psum_scatter(jnp.concatenate([v] * 4, 0), "x", tiled=True),
        "cummax_loop": lambda v: lax.fori_loop(0, 2, lambda i, c: c + lax.pmax(c, "y"), v),
        "sum_rows": lambda v: v.sum(0, keepdims=True) * jnp.ones_like(v),
        "invariant_const": lambda v: v * 0.0 + 3.0,
    }[kind]


KINDS = ["double", "sin", "psum_x", "psum_y", "pmax_xy", "pmean_yx", "add_index_x",
         "add_index_y", "ring_x", "gather_y", "scatter_x", "cummax_loop", "sum_rows",
         "invariant_const"]
SPECS = [P(), P("x"), P(None, "y"), P("x", "y"), P("y"), P(("x", "y"))]


@settings(derandomize=True, deadline=None, max_examples=60)
@given(st.lists(st.sampled_from(KINDS), min_size=1, max_size=4), st.sampled_from(SPECS))
def test_static_acceptance_implies_runtime_acceptance(kinds, out_spec):
    def body(v):
        for kind in kinds:
            v = _op(kind)(v)
        return v

    try:
        static = run(body, out_spec, True, X)
    except shardc.ReplicationError:
        return          # rejected statically: nothing to hold it to (false positives above)
    dynamic = run(body, out_spec, "runtime", X)      # must not raise: no false negatives
    np.testing.assert_array_equal(np.asarray(static), np.asarray(dynamic))


# --- the oracle compares values: signed zeros are equal, NaNs equal NaNs in the same place ------

def _signed_zeros(v):
    return v * 0.0        # +0.0 where the block is positive, -0.0 where it is negative


def _nan_where_negative(v):
    return jnp.sqrt(v * 0.0 - jnp.where(v < 0, 1.0, 0.0))   # NaN on negative blocks, else 0


SIGNED = jnp.concatenate([jnp.ones((4, 4)), -jnp.ones((4, 4))])   # rows 4..7 negative


@pytest.mark.parametrize("jit", [False, True])
def test_oracle_equates_signed_zeros(jit):
    out = run(_signed_zeros, P(None, "y"), "runtime", SIGNED, jit)
    blocks = np.asarray(SIGNED).reshape(4, 2, 4) * 0.0
    assert np.signbit(blocks[2:]).all() and not np.signbit(blocks[:2]).any()
    np.testing.assert_array_equal(np.asarray(out), np.zeros((2, 4), np.float32))


@pytest.mark.parametrize("jit", [False, True])
def test_oracle_equates_nans_in_the_same_place(jit):
    everywhere_nan = lambda v: jnp.sqrt(v * 0.0 - 1.0)
    out = run(everywhere_nan, P(None, "y"), "runtime", SIGNED, jit)
    assert np.isnan(np.asarray(out)).all()


@pytest.mark.parametrize("jit", [False, True])
def test_oracle_tells_nan_from_a_number(jit):
    with pytest.raises(shardc.ReplicationError, match=r"device 0 \(mesh coordinates \(0, 0\)\) "
                       r"and device 4 \(mesh coordinates \(2, 0\)\) hold different blocks"):
        run(_nan_where_negative, P(None, "y"), "runtime", SIGNED, jit)


def test_oracle_equates_integer_blocks_by_value():
    out = run(lambda v: (v * 0).astype(jnp.int32), P(None, "y"), "runtime", SIGNED)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(out), np.zeros((2, 4), np.int32))
