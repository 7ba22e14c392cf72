"""Explicit sharding (JAX 0.10's sharding in types), held against JAX's own expectations.

The tables are JAX 0.10.2's (its ``ShardingInTypesTest`` cases and its documented rules, each
row as JAX gives it): the result's type, its values against numpy, its runtime layout against
its type, and, under jit, the collectives the lowered program holds. Errors are checked by
type and message. The explicit-mode training example is checked against single-device
training and by the communication its lowered step holds.
"""
from __future__ import annotations

import functools
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from shardc import lax
from shardc.sharding import NamedSharding, PartitionSpec as P

from lowered_comm import communication

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

ShardingTypeError = jax.sharding.ShardingTypeError
AMBIGUOUS = "Contracting dimensions are sharded and it is ambiguous"
CONTRACT = "dot_general requires contracting dimensions to have consistent sharding"
ILLEGAL = "produces an illegally sharded result"
RESHAPE = "This reshape is not supported"


def mesh_of(shape, names=None):
    names = names or ("x", "y", "z")[:len(shape)]
    return jax.make_mesh(shape, names)


def placed(shape, spec, dtype=np.float32, seed=0):
    """A host array of ``shape`` (small integers, exact in float32) placed by ``spec``."""
    rng = np.random.default_rng(seed)
    host = rng.integers(-4, 5, size=shape).astype(dtype)
    return host, jax.device_put(host, P(*spec))


def check_result(result, want_type, want_value):
    """``result`` has type ``want_type`` (JAX's printed form), its runtime layout is its type,
    and its value is ``want_value``."""
    assert str(jax.typeof(result)) == want_type
    typed = jax.typeof(result).sharding
    assert isinstance(result.sharding, NamedSharding)
    assert result.sharding.spec == typed.spec or \
        tuple(result.sharding.spec) + (None,) * (result.ndim - len(result.sharding.spec)) \
        == tuple(typed.spec)
    np.testing.assert_array_equal(np.asarray(result), want_value)
    assert np.asarray(result).dtype == np.asarray(want_value).dtype


# --- the issue's table: each row as JAX 0.10.2 gives it ----------------------------------------

@pytest.fixture
def mesh24():
    mesh = mesh_of((2, 4), ("x", "y"))
    with jax.set_mesh(mesh):
        yield mesh


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_issue_table_rows(mesh24, jit):
    run = (lambda f, *a: jax.jit(f)(*a)) if jit else (lambda f, *a: f(*a))
    host, x = placed((8, 4), ("x", "y"))
    assert str(jax.typeof(x)) == "float32[8@x,4@y]"
    assert jax.typeof(x).sharding == NamedSharding(mesh24.abstract_mesh, P("x", "y"))
    check_result(run(lambda a: jnp.sum(a, axis=0), x), "float32[4@y]", host.sum(0))
    check_result(run(lambda a: a.T, x), "float32[4@y,8@x]", host.T)
    check_result(run(lambda a: a.reshape(32), x), "float32[32@(x,y)]", host.reshape(32))
    _, other = placed((8, 4), ("y", "x"))
    with pytest.raises(ShardingTypeError) as err:
        run(lambda a, b: a + b, x, other)
    assert isinstance(err.value, TypeError)
    assert str(err.value) == ("add got incompatible shardings for broadcasting: ('x', 'y'), "
                              "('y', 'x').")
    _, w = placed((4, 16), ("y", None))
    with pytest.raises(ShardingTypeError, match=AMBIGUOUS + ".*`out_sharding`"):
        run(lambda a, b: jnp.dot(a, b), x, w)
    zeros = run(lambda: jnp.zeros((8, 4), out_sharding=P("x")))
    check_result(zeros, "float32[8@x,4]", np.zeros((8, 4), np.float32))
    assert zeros.sharding.spec == P("x", None)


def test_issue_table_indexing_eager_is_a_gather_and_jit_a_slice(mesh24):
    host, x = placed((8, 4), ("x", "y"))
    with pytest.raises(ShardingTypeError, match=re.escape(
            "Use `.at[...].get(out_sharding=)` to provide output PartitionSpec for the gather "
            "indexing as out sharding could not be resolved unambiguously (or would require "
            "collectives on inputs). Got operand=ShapedArray(float32[8@x,4@y]), "
            "indices=ShapedArray(int32[1])")):
        x[0]
    with pytest.raises(ShardingTypeError, match=re.escape(
            "slicing on sharded dims where out dim (1) is not divisible by mesh axes (2) with "
            "spec (x) is not implemented. Got input type=f32[8@x,4@y] and output shape=(1, 4)")):
        jax.jit(lambda a: a[0])(x)
    check_result(x.at[0].get(out_sharding=P("y")), "float32[4@y]", host[0])
    check_result(jax.jit(lambda a: a[0:4])(x), "float32[4@x,4@y]", host[0:4])


@pytest.mark.parametrize("axis_types", ["explicit", "auto"])
def test_issue_table_jit_update_keeps_the_layout(axis_types):
    """jit(lambda w: w * 2) of w placed P('x', None): P('x', None), on Auto axes too."""
    if axis_types == "explicit":
        mesh = mesh_of((2, 4), ("x", "y"))
    else:
        mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"))
    host = np.arange(32, dtype=np.float32).reshape(8, 4)
    w = jax.device_put(host, NamedSharding(mesh, P("x", None)))
    out = jax.jit(lambda w: w * 2)(w)
    assert out.sharding == NamedSharding(mesh, P("x", None))
    np.testing.assert_array_equal(np.asarray(out), host * 2)
    assert str(jax.typeof(out)) == ("float32[8@x,4]" if axis_types == "explicit"
                                    else "float32[8,4]")
    assert communication(lambda w: w * 2, w) == []


# --- dot_general: JAX's full 2-D grid on the (2, 4) mesh ---------------------------------------

SPECS = [(None, None), (None, "x"), (None, "y"), ("x", None), ("x", "y"), ("y", None), ("y", "x")]
A, C, D = "E-AMBIG", "E-CONTRACT", "E-DUP"
GRID = [  # rows: lhs spec; columns: rhs spec, in SPECS order (JAX 0.10.2)
    ["[16,16]", "[16,16@x]", "[16,16@y]", "[16,16]", "[16,16@y]", "[16,16]", "[16,16@x]"],
    ["[16,16]", "[16,16@x]", "[16,16@y]", A, A, C, C],
    ["[16,16]", "[16,16@x]", "[16,16@y]", C, C, A, A],
    ["[16@x,16]", D, "[16@x,16@y]", "[16@x,16]", "[16@x,16@y]", "[16@x,16]", D],
    ["[16@x,16]", D, "[16@x,16@y]", C, C, A, A],
    ["[16@y,16]", "[16@y,16@x]", D, "[16@y,16]", D, "[16@y,16]", "[16@y,16@x]"],
    ["[16@y,16]", "[16@y,16@x]", D, A, A, C, C],
]
CASES = [(i, j) for i in range(len(SPECS)) for j in range(len(SPECS))]


@pytest.mark.parametrize("i, j", CASES, ids=[f"{SPECS[i]}@{SPECS[j]}" for i, j in CASES])
def test_matmul_grid(mesh24, i, j):
    ha, a = placed((16, 16), SPECS[i], seed=1)
    hb, b = placed((16, 16), SPECS[j], seed=2)
    want = GRID[i][j]
    for run in (lambda: a @ b, lambda: jax.jit(jnp.matmul)(a, b)):
        if want.startswith("E-"):
            match = {A: AMBIGUOUS, C: CONTRACT, D: ILLEGAL}[want]
            with pytest.raises(ShardingTypeError, match=match):
                run()
        else:
            check_result(run(), "float32" + want, ha @ hb)
    if want == A:
        # out_sharding settles it: local products, summed over the contracted axis
        out = jax.jit(lambda a, b: jnp.dot(a, b, out_sharding=P(*SPECS[i][:1], None)))(a, b)
        np.testing.assert_array_equal(np.asarray(out), ha @ hb)
        axis = SPECS[i][1]
        assert ("all_reduce", (axis,)) in communication(
            lambda a, b: jnp.dot(a, b, out_sharding=P(*SPECS[i][:1], None)), a, b)
    elif not want.startswith("E-") and SPECS[i][1] is None and SPECS[j][0] is None:
        # no contracted split: each device multiplies its own blocks, nothing moves
        assert communication(jnp.matmul, a, b) == []


def test_dot_error_messages_verbatim(mesh24):
    _, a = placed((16, 16), ("x", "y"))
    _, b = placed((16, 16), ("y", None))
    _, c = placed((16, 16), ("x", None))
    _, d = placed((16, 16), (None, "x"))
    with pytest.raises(ShardingTypeError) as err:
        a @ b
    assert str(err.value) == (
        "Contracting dimensions are sharded and it is ambiguous how the output should be "
        "sharded. Please specify the output sharding via the `out_sharding` parameter. Got "
        "lhs_contracting_spec=('y',) and rhs_contracting_spec=('y',)")
    with pytest.raises(ShardingTypeError) as err:
        a @ c
    assert str(err.value) == ("dot_general requires contracting dimensions to have consistent "
                              "sharding, got ('y',) and ('x',).")
    with pytest.raises(ShardingTypeError) as err:
        c @ d
    assert str(err.value) == ("dot_general operation with inputs: f32[16@x,16], f32[16,16@x] "
                              "produces an illegally sharded result: f32[16@x,16@x]")


BATCH = [  # lhs, rhs, lax.dot_general, jnp.matmul (JAX 0.10.2)
    ((None, None, None), (None, None, None), "[8,16,16]", "[8,16,16]"),
    ((None, None, "y"), (None, None, None), "[8,16,16]", "[8,16,16]"),
    ((None, None, None), ("x", None, None), "[8,16,16]", "E"),
    (("x", None, None), (None, None, None), "[8@x,16,16]", "E"),
    (("x", None, None), (None, "y", None), "[8@x,16,16]", "E"),
    (("x", None, "y"), ("x", None, None), "[8@x,16,16]", "[8@x,16,16]"),
    (("x", None, None), ("x", "y", None), "[8@x,16,16]", "[8@x,16,16]"),
    (("x", None, None), ("y", None, None), "E", "E"),
    (("y", None, None), ("y", None, None), "[8@y,16,16]", "[8@y,16,16]"),
]


@pytest.mark.parametrize("lhs, rhs, by_lax, by_matmul", BATCH)
def test_batch_matmul(mesh24, lhs, rhs, by_lax, by_matmul):
    ha, a = placed((8, 16, 16), lhs, seed=3)
    hb, b = placed((8, 16, 16), rhs, seed=4)
    want = np.einsum("bij,bjk->bik", ha, hb)
    numbers = (((2,), (1,)), ((0,), (0,)))
    if by_lax == "E":
        with pytest.raises(ShardingTypeError, match="lhs batch dimensions and rhs batch "
                                                    "dimensions to have the consistent sharding"):
            lax.dot_general(a, b, numbers)
    else:
        check_result(jax.jit(lambda a, b: lax.dot_general(a, b, numbers))(a, b),
                     "float32" + by_lax, want)
    if by_matmul == "E":
        with pytest.raises(ValueError, match=re.escape(
                "Incompatible types for matmul arguments: "
                f"{jax.typeof(a)} and {jax.typeof(b)}")):
            jnp.matmul(a, b)
    else:
        check_result(jnp.matmul(a, b), "float32" + by_matmul, want)


MATMUL_BROADCAST = [  # lhs shape, spec; rhs shape, spec; out_sharding; type (JAX 0.10.2)
    # a batch dimension one operand lacks (by rank, or as an unsplit 1) is the other's free
    # dimension: it keeps its split and is never broadcast
    ((4, 16), (None, ("x", "y")), (4, 16, 4), ("x", None, None), None, "float32[4@x,4,4]"),
    ((1, 4, 16), (None, None, "y"), (4, 16, 4), ("x", None, None), None, "float32[4@x,4,4]"),
    ((8, 16), (None, "x"), (2, 16, 4), (None, None, "y"), None, "float32[2,8,4@y]"),
    ((2, 1, 4, 16), ("x", None, None, None), (4, 16, 8), ("y", None, None), None,
     "float32[2@x,4@y,4,8]"),
    ((1, 4, 16), (None, "x", None), (1, 16, 8), (None, None, "y"), None, "float32[1,4@x,8@y]"),
    ((16,), ("y",), (2, 16, 4), ("x", None, None), None, "float32[2@x,4]"),
    ((2, 4, 16), ("x", None, None), (16,), (None,), None, "float32[2@x,4]"),
    # out_sharding is the dot's, in its order (lhs free, then rhs free), as JAX's
    ((8, 8), (None, ("x", "y")), (1, 8, 4), (None, "x", None), ("x",), "float32[1,8@x,4]"),
    ((4, 8), (None, None), (2, 8, 4), ("x", None, None), (None, "y"),
     "E:Sharding spec ('y',) implies that array axis 1 is partitioned 4 times"),
    ((2, 4, 8), ("x", None, None), (2, 8, 4), (None, None, None), None,
     "E:Incompatible types for matmul arguments: float32[2@x,4,8] and float32[2,8,4]"),
]


@pytest.mark.parametrize("lhs, lspec, rhs, rspec, out, want", MATMUL_BROADCAST)
def test_matmul_broadcasting_batch_dimensions(mesh24, lhs, lspec, rhs, rspec, out, want):
    ha, a = placed(lhs, lspec, seed=5)
    hb, b = placed(rhs, rspec, seed=6)
    product = functools.partial(jnp.matmul, out_sharding=None if out is None else P(*out))
    for run in (product, jax.jit(product)):
        if want.startswith("E:"):
            with pytest.raises(ValueError, match=re.escape(want[2:])):
                run(a, b)
        else:
            check_result(run(a, b), want, np.matmul(ha, hb))


def test_where_checks_shapes_before_shardings(mesh24):
    # operands whose shapes do not broadcast are JAX's shape error, whatever their splits
    _, a = placed((4, 2), ("y", None))
    _, b = placed((16, 1), ("x", None))
    with pytest.raises(ValueError, match=re.escape(
            "Incompatible shapes for broadcasting: shapes=[(4, 2), (4, 2), (16, 1)]")):
        jnp.where(a > 0, a, b)


# --- reshape: JAX's test_reshape tables ---------------------------------------------------------

RESHAPES = [  # mesh shape, input shape, input spec, new shape, result type ("E": an error)
    # Table A: ShardingInTypesTest.test_reshape, mesh (2,)
    ((2,), (16, 1), ("x", None), (1, 16, 1), "float32[1,16@x,1]"),
    ((2,), (8, 2, 1), ("x", None, None), (1, 16, 1), "E"),
    ((2,), (1, 4, 1, 6, 1), (None, "x", None, None, None), (1, 4, 6), "float32[1,4@x,6]"),
    ((2,), (4, 6), (None, "x"), (4, 6), "float32[4,6@x]"),
    ((2,), (64, 16), ("x", None), (64, 8, 2, 1, 1, 1, 1), "float32[64@x,8,2,1,1,1,1]"),
    ((2,), (64, 16, 4), ("x", None, None), (64, 8, 2, 1, 1, 4), "float32[64@x,8,2,1,1,4]"),
    ((2,), (64, 16), ("x", None), (64, 1, 1, 16), "float32[64@x,1,1,16]"),
    ((2,), (64, 16), (None, "x"), (64, 1, 1, 16), "float32[64,1,1,16@x]"),
    ((2,), (64, 8, 2, 1, 1, 1), ("x",) + (None,) * 5, (64, 16), "float32[64@x,16]"),
    ((2,), (64, 8, 2, 1, 1, 1), (None, "x") + (None,) * 4, (64, 16), "float32[64,16@x]"),
    ((2,), (4, 1, 8, 1, 32), ("x",) + (None,) * 4, (4, 1, 2, 4, 1, 32),
     "float32[4@x,1,2,4,1,32]"),
    ((2,), (4, 1, 2, 4, 1, 32), ("x",) + (None,) * 5, (4, 1, 8, 1, 32),
     "float32[4@x,1,8,1,32]"),
    # Table B: test_reshape_split_merge_one_axis, mesh (2, 2)
    ((2, 2), (4, 6, 8), ("x", None, "y"), (4, 2, 3, 8), "float32[4@x,2,3,8@y]"),
    ((2, 2), (4, 6, 8), ("x", None, None), (4, 6, 2, 2, 2), "float32[4@x,6,2,2,2]"),
    ((2, 2), (4, 6, 8), ("x", None, None), (4, 2, 3, 4, 2), "E"),
    ((2, 2), (4, 6, 8), ("x", "y", None), (4, 2, 3, 8), "float32[4@x,2@y,3,8]"),
    ((2, 2), (4, 12, 8), (None, ("x", "y"), None), (4, 4, 3, 8), "float32[4,4@(x,y),3,8]"),
    ((2, 2), (4, 6, 8), ("x", "y", None), (4, 3, 2, 8), "E"),
    ((2, 2), (4, 6, 8), ("x", None, None), (4, 4, 2, 6), "E"),
    ((2, 2), (4, 8, 9), ("x", None, None), (4, 2, 2, 3, 3, 2), "E"),
    ((2, 2), (10, 1), ("x", None), (2, 5, 1), "float32[2@x,5,1]"),
    ((2, 2), (10, 1), ("x", None), (2, 5, 1, 1), "float32[2@x,5,1,1]"),
    ((2, 2), (1, 10), (None, "x"), (1, 2, 5), "float32[1,2@x,5]"),
    ((2, 2), (4, 2, 3, 8), ("x", None, None, "y"), (4, 6, 8), "float32[4@x,6,8@y]"),
    ((2, 2), (2, 2, 6, 8), (None, None, "y", "x"), (4, 6, 8), "float32[4,6@y,8@x]"),
    ((2, 2), (4, 4, 3, 8), (None, ("x", "y"), None, None), (4, 12, 8),
     "float32[4,12@(x,y),8]"),
    ((2, 2), (4, 2, 3, 2, 4), ("x", None, None, None, None), (4, 6, 8), "E"),
    ((2, 2), (4, 2, 6, 8), (None, None, "y", "x"), (4, 12, 8), "E"),
    ((2, 2), (4, 2, 3, 8), (None, "y", None, "x"), (4, 8, 6), "E"),
    ((2, 2), (2, 5, 1), ("x", None, None), (10, 1), "float32[10@x,1]"),
    # Table C: one dimension split over several axes
    ((2, 2), (4,), (("x", "y"),), (2, 2), "float32[2@x,2@y]"),
    ((2, 2), (8,), (("x", "y"),), (2, 4), "float32[2@x,4@y]"),
    ((2, 2), (8,), (("x", "y"),), (4, 2), "float32[4@(x,y),2]"),
    ((2, 2), (2, 2), ("x", "y"), (4,), "float32[4@(x,y)]"),
    ((2, 2), (4, 2), (("x", "y"), None), (8,), "float32[8@(x,y)]"),
    ((2, 2), (2, 2, 2), ("x", None, "y"), (8,), "E"),
    ((2, 2), (12,), (("x", "y"),), (3, 4), "E"),
    ((2, 2), (8, 4, 4), (None, None, "x"), (32, 4), "float32[32,4@x]"),
    ((2, 2, 2), (8,), (("x", "y", "z"),), (2, 2, 2), "float32[2@x,2@y,2@z]"),
    ((2, 2, 2), (8,), (("x", "y", "z"),), (2, 4), "float32[2@x,4@(y,z)]"),
    ((2, 2, 2), (8,), (("x", "y", "z"),), (4, 2), "float32[4@(x,y),2@z]"),
    ((2, 2, 2), (16,), (("x", "y", "z"),), (2, 2, 2, 2), "float32[2@x,2@y,2@z,2]"),
    ((2, 2, 2), (2, 4), ("x", ("y", "z")), (8,), "float32[8@(x,y,z)]"),
    ((2, 2, 2), (2, 2, 2), ("x", "y", "z"), (4, 2), "float32[4@(x,y),2@z]"),
    # Table D: the (2, 4) mesh
    ((2, 4), (8, 4), ("x", "y"), (32,), "float32[32@(x,y)]"),
    ((2, 4), (8, 4), ("x", None), (32,), "float32[32@x]"),
    ((2, 4), (8, 4), (None, "y"), (32,), "E"),
    ((2, 4), (8, 4), ("x", "y"), (2, 4, 4), "float32[2@x,4,4@y]"),
    ((2, 4), (8, 4), ("x", "y"), (8, 2, 2), "E"),
    ((2, 4), (8, 4), ("x", "y"), (4, 8), "E"),
    ((2, 4), (32,), (("x", "y"),), (2, 16), "float32[2@x,16@y]"),
    ((2, 4), (32,), (("x", "y"),), (4, 8), "E"),
    ((2, 4), (32,), (("x", "y"),), (2, 4, 4), "float32[2@x,4@y,4]"),
    ((2, 4), (32,), ("y",), (2, 16), "E"),
    ((2, 4), (16,), (("y", "x"),), (4, 4), "float32[4@y,4@x]"),
    ((2, 4), (8, 8), ("y", "x"), (64,), "float32[64@(y,x)]"),
    ((2, 4), (2, 4, 4), ("x", None, "y"), (8, 4), "float32[8@x,4@y]"),
    ((2, 4), (2, 4, 4), (None, None, "y"), (2, 16), "E"),
    ((2, 4), (6,), ("x",), (2, 3), "float32[2@x,3]"),
    ((2, 4), (6,), ("x",), (3, 2), "E"),
    # the (4, 2) mesh
    ((4, 2), (32,), (("x", "y"),), (4, 8), "float32[4@x,8@y]"),
    ((4, 2), (8, 16), ("x", "y"), (2, 4, 16), "E"),
    ((4, 2), (8, 16), ("x", "y"), (128,), "float32[128@(x,y)]"),
]


def _reshape_id(case):
    mesh, shape, spec, new, _ = case
    return f"{mesh}-{shape}{spec}->{new}"


@pytest.mark.parametrize("case", RESHAPES, ids=[_reshape_id(c) for c in RESHAPES])
def test_reshape_table(case):
    mesh_shape, shape, spec, new, want = case
    with jax.set_mesh(mesh_of(mesh_shape)):
        host, x = placed(shape, spec)
        if want == "E":
            for run in (lambda: x.reshape(new), lambda: jax.jit(lambda a: a.reshape(new))(x)):
                with pytest.raises(ShardingTypeError) as err:
                    run()
                assert str(err.value) == (
                    "This reshape is not supported. Please specify the sharding of the output "
                    "via the `out_sharding` argument of jax.lax.reshape. Got operand type: "
                    f"{jax.typeof(x)}, new sizes: {tuple(new)}")
            # out_sharding settles any reshape (the partitioner moves the data)
            out = jax.jit(lambda a: jnp.reshape(a, new, out_sharding=P()))(x)
            check_result(out, f"float32[{','.join(map(str, new))}]", host.reshape(new))
            return
        check_result(x.reshape(new), want, host.reshape(new))
        check_result(jax.jit(lambda a: a.reshape(new))(x), want, host.reshape(new))


@pytest.mark.parametrize("case", [c for c in RESHAPES if c[4] != "E"][:20],
                         ids=[_reshape_id(c) for c in RESHAPES if c[4] != "E"][:20])
def test_a_typed_reshape_moves_no_data(case):
    """Where JAX's rule keeps the splits, each device reshapes its own block."""
    mesh_shape, shape, spec, new, _ = case
    with jax.set_mesh(mesh_of(mesh_shape)):
        _, x = placed(shape, spec)
        assert communication(lambda a: a.reshape(new), x) == []


@pytest.mark.parametrize("spec, out", [(P(None, "a"), P("a")), (P("a", None), P("a")),
                                       (P(None, "a"), P(None)), (P("a", None), P(None))])
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_a_reshape_given_its_result_layout_is_right_whatever_the_blocks(spec, out, jit):
    """A block of columns is not a run of the flattened array: its reshape is not the block
    of the result (this gave wrong values once; rows are, and move nothing)."""
    mesh = jax.make_mesh((8,), ("a",))
    host = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    x = jax.device_put(host, NamedSharding(mesh, spec))
    fn = lambda a: jnp.reshape(a, (128,), out_sharding=NamedSharding(mesh, out))
    got = (jax.jit(fn) if jit else fn)(x)
    np.testing.assert_array_equal(np.asarray(got), host.reshape(128))
    assert got.sharding == NamedSharding(mesh, out)
    for shard in got.addressable_shards:
        np.testing.assert_array_equal(np.asarray(shard.data), host.reshape(128)[shard.index])
    if spec == P("a", None) and out == P("a"):
        assert communication(fn, x) == []


# --- reductions, elementwise, layout changes: values, types, collectives -----------------------

@pytest.mark.parametrize("name, fn, want, comm", [
    ("sum", lambda a: a.sum(), "float32[]", [("all_reduce", ("x", "y"))]),
    ("sum0", lambda a: a.sum(0), "float32[16@y]", [("all_reduce", ("x",))]),
    ("max1", lambda a: a.max(1), "float32[8@x]", [("all_reduce", ("y",))]),
    ("mean0", lambda a: jnp.mean(a, 0), "float32[16@y]", [("all_reduce", ("x",))]),
    ("sum0_keep", lambda a: a.sum(0, keepdims=True), "float32[1,16@y]",
     [("all_reduce", ("x",))]),
    ("argmax0", lambda a: jnp.argmax(a, 0), "int32[16@y]", None),
    ("exp", lambda a: jnp.exp(a / 8), "float32[8@x,16@y]", []),
    ("transpose", lambda a: a.T * 2, "float32[16@y,8@x]", []),
    ("expand", lambda a: a[:, None], "float32[8@x,1,16@y]", []),
    ("reshard", lambda a: jax.sharding.reshard(a, P("y", "x")), "float32[8@y,16@x]", None),
    ("replicate", lambda a: jax.sharding.reshard(a, P()), "float32[8,16]",
     [("all_gather", ("x",)), ("all_gather", ("y",))]),
    ("concat0", lambda a: jnp.concatenate([a, a], 0), "float32[16@x,16@y]", None),
    ("pad", lambda a: jnp.pad(a, ((0, 0), (4, 4))), "float32[8@x,24@y]", None),
    ("cumsum_c", lambda a: jnp.cumsum(jax.sharding.reshard(a, P("x", None)), 1),
     "float32[8@x,16]", None),
    ("softmax", lambda a: jax.nn.softmax(a / 8, axis=1), "float32[8@x,16@y]", None),
])
def test_operation_table(mesh24, name, fn, want, comm):
    host, x = placed((8, 16), ("x", "y"))
    import shardc.numpy as ref_jnp  # the same function on an unsplit copy is the reference
    expected = np.asarray(jax.jit(fn)(ref_jnp.asarray(host)))
    for result in (fn(x), jax.jit(fn)(x)):
        assert str(jax.typeof(result)) == want
        np.testing.assert_allclose(np.asarray(result), expected, rtol=1e-6, atol=1e-6)
        assert result.sharding.spec == jax.typeof(result).sharding.spec or result.ndim == 0
    if comm is not None:
        assert communication(fn, x) == comm


@pytest.mark.parametrize("fn, error, message", [
    (lambda a: jnp.cumsum(a, 0), ShardingTypeError,
     "Input should be unsharded over the axis being reduced. Got input type=float32[8@x,16@y] "
     "and axis=0"),
    (lambda a: jnp.cumsum(a), ShardingTypeError,
     "The input should be fully replicated when axis is not specified to cumsum. Got input "
     "type=float32[8@x,16@y]"),
    (lambda a: jnp.sort(a, -1), ShardingTypeError,
     "Arguments to sort must be unsharded over the sorting dimension. Got arg sharding="
     "NamedSharding(mesh=AbstractMesh('x': 2, 'y': 4, axis_types=(Explicit, Explicit), "
     "device_kind=cpu, num_cores=None, platform=cpu), spec=P('x', 'y')) and sorting "
     "dimension=1"),
    (lambda a: lax.top_k(a, 3), ShardingTypeError,
     "The input should be unsharded over the axis along which to compute the top_k values. "
     "Got input type=float32[8@x,16@y] and axis=1"),
    (lambda a: jnp.unstack(a, axis=0), ShardingTypeError,
     "unstack operand cannot be sharded on the unstacking axis 0. Got operand "
     "type=f32[8@x,16@y]"),
    (lambda a: jnp.tile(a, (2, 1)), ShardingTypeError,
     "Operand cannot be sharded on dimension 0 when the tiling is non-trivial. Got input "
     "type: float32[8@x,16@y] with reps: (2, 1)"),
    (lambda a: jnp.repeat(a, 2, axis=1), ValueError,
     "Please pass sharding to `jnp.repeat` via `out_sharding` parameter."),
    (lambda a: jnp.pad(a, ((0, 0), (1, 1))), ShardingTypeError,
     "padding on sharded dims where out dim (18) is not divisible by mesh axes (4) with spec "
     "(y) is not implemented"),
    (lambda a: jnp.split(a, [6], 1), ShardingTypeError,
     "split on sharded dims where out dim (6) is not divisible by mesh axes (4) with spec (y) "
     "is not implemented"),
    (lambda a: a.at[0].set(1.), ShardingTypeError,
     "Use `.at[...].set/add/mul/...(out_sharding=)` to provide output PartitionSpec for the "
     "scatter update as out sharding could not be resolved unambiguously (or would require "
     "collectives on inputs). Got operand=ShapedArray(float32[8@x,16@y]), "
     "indices=ShapedArray(int32[1]), updates=ShapedArray(float32[16@y])"),
    (lambda a: jnp.concatenate([a, jax.sharding.reshard(a, P("x", None))]),
     ShardingTypeError, "All operands should have the same sharding."),
    (lambda a: lax.scan(lambda c, r: (c, r), 0., a), ValueError,
     "0th dimension of all xs should be replicated. Got P('x', 'y')"),
])
def test_errors_as_jax(mesh24, fn, error, message):
    _, x = placed((8, 16), ("x", "y"))
    for run in (fn, jax.jit(fn)):
        with pytest.raises(error) as err:
            run(x)
        assert message in str(err.value)


def test_sharding_type_error_is_a_type_error():
    assert issubclass(ShardingTypeError, TypeError) and issubclass(ShardingTypeError, Exception)


def test_explicit_divisibility_is_a_value_error_naming_dim_axis_and_sizes(mesh24):
    with pytest.raises(ValueError) as err:
        jnp.zeros((6, 16), out_sharding=P("y"))
    assert str(err.value).startswith(
        "Sharding spec ('y',) implies that array axis 0 is partitioned 4 times, but does not "
        "evenly divide the dimension size 6. Got shape: (6, 16)")


def test_creation_with_out_sharding(mesh24):
    check_result(jnp.ones((8, 16), out_sharding=P(None, "y")), "float32[8,16@y]",
                 np.ones((8, 16), np.float32))
    # filled with a Python number and no dtype asked for: weakly typed, as JAX's
    check_result(jnp.full((8, 16), 3., out_sharding=P("x", "y")), "~float32[8@x,16@y]",
                 np.full((8, 16), 3., np.float32))
    check_result(jnp.arange(16, out_sharding=P("y")), "int32[16@y]", np.arange(16, dtype=np.int32))
    check_result(lax.broadcasted_iota(jnp.int32, (8, 16), 1, out_sharding=P("x", "y")),
                 "int32[8@x,16@y]", np.broadcast_to(np.arange(16, dtype=np.int32), (8, 16)))
    host, x = placed((8, 16), ("x", "y"))
    check_result(jnp.zeros_like(x), "float32[8@x,16@y]", np.zeros_like(host))
    key = jax.random.key(0)
    sample = jax.random.normal(key, (8, 16), out_sharding=P("x", "y"))
    assert str(jax.typeof(sample)) == "float32[8@x,16@y]"
    np.testing.assert_array_equal(np.asarray(sample), np.asarray(jax.random.normal(key, (8, 16))))
    # None entries past the rank are dropped, as JAX types the result; an axis named there,
    # and device_put's layout (no computed result), are JAX's rank error
    check_result(jnp.zeros(8, out_sharding=P("x", None)), "float32[8@x]", np.zeros(8, np.float32))
    check_result(jnp.full((8,), 2., out_sharding=P("x", None, None)), "~float32[8@x]",
                 np.full(8, 2., np.float32))
    draw = jax.random.uniform(key, (8,), out_sharding=P("x", None))
    assert str(jax.typeof(draw)) == "float32[8@x]" and draw.sharding.spec == P("x")
    np.testing.assert_array_equal(np.asarray(draw), np.asarray(jax.random.uniform(key, (8,))))
    with pytest.raises(ValueError, match="only valid for values of rank at least 2"):
        jnp.zeros(8, out_sharding=P(None, "x"))
    with pytest.raises(ValueError, match="only valid for values of rank at least 2"):
        jax.device_put(np.zeros(8, np.float32), P("x", None))


# --- control flow, transformations --------------------------------------------------------------

def test_carries_and_branches_keep_their_types(mesh24):
    host, x = placed((8, 16), ("x", "y"))
    check_result(lax.fori_loop(0, 3, lambda i, a: a * 2, x), "float32[8@x,16@y]", host * 8)
    check_result(lax.cond(True, lambda a: a * 2, lambda a: a, x), "float32[8@x,16@y]",
                 host * 2)
    with pytest.raises(TypeError, match=re.escape(
            "has type float32[8@x,16@y] but the corresponding output carry component has type "
            "float32[8@y,16@x]")):
        lax.fori_loop(0, 3, lambda i, a: jax.sharding.reshard(a, P("y", "x")), x)
    with pytest.raises(TypeError, match=re.escape(
            "The output of true_fun has type float32[8@x,16@y] but the corresponding output of "
            "false_fun has type float32[8,16].")):
        lax.cond(True, lambda a: a * 2, lambda a: jax.sharding.reshard(a, P()), x)
    _, u = placed((4, 16), (None, "y"))
    carry, ys = lax.scan(lambda c, r: (c + r, r * 2), jnp.zeros((16,), out_sharding=P("y")), u)
    assert (str(jax.typeof(carry)), str(jax.typeof(ys))) == ("float32[16@y]",
                                                              "float32[4,16@y]")


def test_carries_and_branches_of_no_mesh_take_the_types_on_the_mesh():
    """Outside set_mesh, an initial carry or a branch output made on no mesh (jnp.zeros)
    matches a type on the mesh (JAX's type match): the loop or cond runs with the mesh's
    type. Under set_mesh such values are typed on the mesh, and the mismatch stays an
    error."""
    mesh = mesh_of((2, 4), ("x", "y"))
    host = np.arange(32.0, dtype=np.float32).reshape(8, 4)
    x = jax.device_put(host, NamedSharding(mesh, P("x", "y")))
    check_result(lax.fori_loop(0, 3, lambda i, c: c + x * i, jnp.zeros((8, 4))),
                 "float32[8@x,4@y]", host * 3)
    check_result(lax.while_loop(lambda c: c.sum() < 1000, lambda c: c + x, jnp.zeros((8, 4))),
                 "float32[8@x,4@y]", host * 3)
    carry, ys = lax.scan(lambda c, t: (c * 2 + x, c.sum() + t), jnp.ones((8, 4)), jnp.arange(3.))
    check_result(carry, "float32[8@x,4@y]", 8 + host * 7)
    np.testing.assert_array_equal(np.asarray(ys), [32.0, 64 + host.sum() + 1,
                                                   128 + 3 * host.sum() + 2])
    zeros = lambda: jnp.zeros((8, 4))
    none = np.zeros((8, 4), np.float32)
    check_result(lax.cond(False, lambda: x, zeros), "float32[8@x,4@y]", none)
    check_result(lax.cond(True, zeros, lambda: x * 2), "float32[8@x,4@y]", none)
    check_result(lax.switch(1, [zeros, lambda: x + 1]), "float32[8@x,4@y]", host + 1)
    check_result(jax.jit(lambda p: lax.cond(p, lambda: x, zeros))(True), "float32[8@x,4@y]",
                 host)
    with jax.set_mesh(mesh):
        with pytest.raises(TypeError, match="carry input and carry output must have equal"):
            lax.fori_loop(0, 3, lambda i, c: c + x, jnp.zeros((8, 4), np.float32))
        with pytest.raises(TypeError, match="branches must have equal output types"):
            lax.cond(True, lambda: x, zeros)


def test_a_traced_mask_update_of_a_split_array_is_jaxs_boolean_index_error():
    """x.at[mask].set(v) with a traced mask: JAX's NonConcreteBooleanIndexError comes before
    any layout's error (it said to pass out_sharding), as for x[mask]."""
    mesh = mesh_of((4, 2), ("x", "y"))
    x = jax.device_put(jnp.arange(32.).reshape(8, 4), NamedSharding(mesh, P("x", None)))
    for f in (lambda a: a.at[a > 20].set(0.0), lambda a: a[a > 20]):
        with pytest.raises(jax.errors.NonConcreteBooleanIndexError,
                           match="Array boolean indices must be concrete"):
            jax.jit(f)(x)


def test_jvp_tangents_take_their_primals_types():
    """A tangent split otherwise than its primal, or a host value, is taken as split as the
    primal (JAX's): jvp runs, and the output tangent has the output's type."""
    mesh = mesh_of((4, 2), ("x", "y"))
    with jax.set_mesh(mesh):
        x = jax.device_put(jnp.arange(8.0), P("x"))
        for t in (jax.device_put(jnp.ones(8), P("y")), np.ones(8, np.float32)):
            y, ty = jax.jvp(jnp.sin, (x,), (t,))
            assert str(jax.typeof(ty)) == "float32[8@x]" and ty.sharding.spec == P("x")
            np.testing.assert_allclose(np.asarray(ty), np.cos(np.arange(8.0)), rtol=1e-6)


def test_gradients_have_their_primals_types(mesh24):
    hx, x = placed((8, 16), ("x", "y"))
    hw, w = placed((16, 4), (None, "y"))

    def loss(x, w):
        h = jnp.dot(jax.sharding.reshard(x, P("x", None)), w)
        return jnp.sum(jnp.tanh(h / 16) ** 2)

    for gx, gw in (jax.grad(loss, argnums=(0, 1))(x, w),
                   jax.jit(jax.grad(loss, argnums=(0, 1)))(x, w)):
        assert (str(jax.typeof(gx)), str(jax.typeof(gw))) == ("float32[8@x,16@y]",
                                                              "float32[16,4@y]")
        assert gx.sharding.spec == P("x", "y") and gw.sharding.spec == P(None, "y")
        # finite differences in float64 on a few coordinates
        for (k, i, j) in ((0, 1, 2), (0, 7, 15), (1, 3, 1), (1, 15, 3)):
            args = [hx.astype(np.float64), hw.astype(np.float64)]

            def f(args):
                h = args[0] @ args[1]
                return np.sum(np.tanh(h / 16) ** 2)

            eps = 1e-4
            plus = [a.copy() for a in args]
            minus = [a.copy() for a in args]
            plus[k][i, j] += eps
            minus[k][i, j] -= eps
            numeric = (f(plus) - f(minus)) / (2 * eps)
            got = np.asarray((gx, gw)[k])[i, j]
            assert got == pytest.approx(numeric, rel=1e-3, abs=1e-4)


def test_vmap_maps_away_a_split_dimension_and_puts_it_back(mesh24):
    host, x = placed((8, 4, 16), ("x", None, None))
    inside = []
    out = jax.vmap(lambda r: (inside.append(str(jax.typeof(r))), r * 2)[1])(x)
    assert inside == ["float32[4,16]"]
    check_result(out, "float32[8@x,4,16]", host * 2)
    check_result(jax.vmap(lambda r: jax.sharding.reshard(r, P(None, "y")))(x),
                 "float32[8@x,4,16@y]", host)
    _, v = placed((8,), ("x",))
    check_result(jax.vmap(lambda u: jnp.zeros((4,)))(v), "float32[8@x,4]",
                 np.zeros((8, 4), np.float32))
    _, r = placed((8,), ())
    with pytest.raises(ValueError, match="Mapped away dimension of inputs passed to vmap should "
                                         "be sharded the same. Got inconsistent axis specs: "
                                         "x vs None"):
        jax.vmap(lambda a, b: a + b)(v, r)


def test_vmap_refuses_an_unmapped_value_split_over_the_vmapped_axis(mesh24):
    # JAX's check: each member would hold a block of it; split over other axes it is fine
    rows, batch = placed((8, 4), ("x", None))
    host, across = placed((4,), ("y",), seed=1)
    out = jax.vmap(lambda u, v: u * v, in_axes=(None, 0))(across, batch)
    check_result(out, "float32[8@x,4@y]", host * rows)
    _, along = placed((8,), ("x",))
    with pytest.raises(ValueError, match=re.escape(
            "Unmapped values passed to vmap cannot be sharded along the mesh axis you are "
            "vmapping over. Got type: f32[8@x], in_axes: None and vmapped mesh axis: ('x',)")):
        jax.vmap(lambda u, v: u.sum() + v, in_axes=(None, 0))(along, batch)


def test_jit_shardings(mesh24):
    host, x = placed((8, 16), ("x", "y"))
    out = jax.jit(lambda a: a * 2, out_shardings=NamedSharding(mesh24, P("y")))(x)
    check_result(out, "float32[8@y,16]", host * 2)
    with pytest.raises(ValueError, match="Sharding passed to jit does not match the sharding "
                                         "on the respective arg"):
        jax.jit(lambda a: a * 2, in_shardings=NamedSharding(mesh24, P("y", "x")))(x)
    check_result(jax.jit(lambda a: a * 2, in_shardings=NamedSharding(mesh24, P("x", "y")))(x),
                 "float32[8@x,16@y]", host * 2)


def test_jit_in_shardings_of_a_host_value_type_it_unsharded():
    """A host value (or an array on one device) that jit's in_shardings lays out is typed by
    itself, split over no axis, as JAX 0.10.2 types it: ops that refuse a split operand
    accept it. Under a mesh set, the results are typed (and laid out) unsharded; with none
    set, XLA lays the program out from the arguments' layouts and the results report those
    layouts as their types (checked against JAX 0.10.2)."""
    rng = np.random.default_rng(1)
    a = rng.integers(-4, 5, size=(8, 16)).astype(np.float32)
    b = rng.integers(-4, 5, size=(16, 4)).astype(np.float32)
    seen = []

    def cumsum(t):
        seen.append(str(jax.typeof(t)))
        return jnp.cumsum(t, 0)
    mesh24 = mesh_of((2, 4), ("x", "y"))
    with jax.set_mesh(mesh24):
        check_result(jax.jit(cumsum, in_shardings=P("x"))(a), "float32[8,16]", np.cumsum(a, 0))
        check_result(jax.jit(lambda u, v: u @ v, in_shardings=(P(None, "y"), P("y", None)))(a, b),
                     "float32[8,4]", a @ b)
        check_result(jax.jit(lambda u: u * 2, in_shardings=P("x", "y"))(a), "float32[8,16]",
                     a * 2)
    # a NamedSharding with no mesh set, on a host value and on an array on one device
    for value in (a, jnp.asarray(a)):
        out = jax.jit(cumsum, in_shardings=NamedSharding(mesh24, P("x")))(value)
        check_result(out, "float32[8@x,16]", np.cumsum(a, 0))
        assert out.sharding.spec == P("x")
        both = NamedSharding(mesh24, P("x", "y"))
        check_result(jax.jit(lambda u: u.T, in_shardings=both)(value), "float32[16@y,8@x]", a.T)
        check_result(jax.jit(lambda u: u.reshape(128), in_shardings=both)(value),
                     "float32[128@x]", a.reshape(128))
        check_result(jax.jit(lambda u: u.sum(), in_shardings=both)(value), "float32[]", a.sum())
    assert set(seen) == {"float32[8,16]"}


def test_a_training_loop_from_host_values_by_in_shardings():
    """The step's results come back laid out (and typed) as XLA lays them out from the
    in_shardings, so the next step takes them as they are: it refused them as laid out
    otherwise than in_shardings says."""
    mesh = mesh_of((2, 4), ("x", "y"))
    rows = NamedSharding(mesh, P("x"))
    step = jax.jit(lambda w, b: (w - 0.1 * b.mean(0), (w * b).sum()),
                   in_shardings=(rows, NamedSharding(mesh, P())))
    w, want = np.ones((8, 4), np.float32), np.ones((8, 4), np.float32)
    for _ in range(3):
        w, loss = step(w, np.ones((8, 4), np.float32))
        np.testing.assert_allclose(float(loss), want.sum(), rtol=1e-6)
        want = want - 0.1
        assert str(jax.typeof(w)) == "float32[8@x,4]" and w.sharding == rows
        np.testing.assert_allclose(np.asarray(w), want, rtol=1e-6)
    # replicated by in_shardings from the host: P(); an array of the mesh keeps its spelling
    host = jax.jit(lambda v: v * 2, in_shardings=NamedSharding(mesh, P()))(np.ones(4, np.float32))
    assert host.sharding.spec == P() and str(jax.typeof(host)) == "float32[4]"
    placed = jax.device_put(np.ones((8, 4), np.float32), NamedSharding(mesh, P()))
    again = jax.jit(lambda v: v * 2)(placed)
    assert again.sharding.spec == P(None, None) and str(jax.typeof(again)) == "float32[8,4]"


def test_with_sharding_constraint_asserts_and_auto_axes_escapes(mesh24):
    host, x = placed((8, 16), ("x", "y"))
    check_result(jax.jit(lambda a: lax.with_sharding_constraint(a, P("x", "y")))(x),
                 "float32[8@x,16@y]", host)
    with pytest.raises(AssertionError):
        jax.jit(lambda a: lax.with_sharding_constraint(a, P("y", "x")))(x)
    picked = jax.sharding.auto_axes(lambda a: a[0], out_sharding=P("y"))(x)
    check_result(picked, "float32[16@y]", host[0])


def test_the_lowered_program_prints_and_parses_the_types(mesh24):
    from ir.parser import parse_program
    _, x = placed((8, 16), ("x", "y"))
    text = str(jax.make_jaxpr(lambda a: jnp.sum(a * 2, axis=0))(x))
    assert "f32[8@x,16@y]" in text and "f32[16@y]" in text
    assert str(parse_program(text)) == text


# --- the explicit-mode training example ---------------------------------------------------------

def test_explicit_training_matches_single_device_training():
    import train_mlp
    import train_explicit
    params, batch = train_mlp.model()
    reference, reference_losses = train_mlp.train_single_device(params, batch, steps=2)
    for shape in train_explicit.MESHES:
        trained, losses = train_explicit.train_explicit(shape, params, batch, steps=2)
        assert train_mlp.compare(trained, reference)
        np.testing.assert_allclose(losses, reference_losses, rtol=1e-5)
        types = [str(jax.typeof(v)) for v in jax.tree_util.tree_leaves(trained)]
        assert types[:2] == ["float32[784,128@y]", "float32[128@y]"]
        assert types[-2:] == ["float32[128,8@y]", "float32[8@y]"]


def test_explicit_training_step_communicates_only_what_the_layouts_need():
    """One program of blocks: per layer one gather of the activations along y (the reshard)
    and, backwards, block all-reduces (the weight and bias gradients over the split batch,
    the activations' gradient over y); the SGD update moves nothing."""
    import train_mlp
    import train_explicit
    sizes = [16, 32, 32, 8]
    params, batch = train_mlp.model(sizes, 8)
    with jax.set_mesh(mesh_of((2, 4), ("x", "y"))):
        placed_params, placed_batch = train_explicit.place(params, batch)
        module = train_explicit.train_step.lower(placed_params, placed_batch).module
        found = communication(train_explicit.train_step, placed_params, placed_batch)
    (region,) = module.all_shard_maps()
    layers = len(sizes) - 1
    names = [n for n, _ in found]
    # the first layer's reshard is of the batch, already P('x', None): nothing to gather
    assert names.count("all_gather") == layers - 1
    assert set(names) == {"all_gather", "all_reduce"}
    # weight and bias gradients of every layer reduce over x (the batch) as blocks
    assert found.count(("all_reduce", ("x",))) == 2 * layers
    assert all(axes in (("x",), ("y",)) for _, axes in found)
    # each collective names the line of the example that needed it
    from ir.printer import print_module
    text = print_module(module, with_source=True)
    lines = [l for l in text.splitlines() if "= all_reduce[" in l or "= all_gather[" in l]
    assert lines and all("train_explicit.py:" in l for l in lines)
    assert region is not None


# --- loops and branches under jit run on blocks ---------------------------------------------------

def test_loops_and_branches_run_on_blocks(mesh24):
    """A loop or branch over split values sits in the partitioned program: each iteration
    computes this device's blocks, so the only communication is what its body's layouts need
    (here the sum over the split rows), not gathering the carry."""
    host, x = placed((8, 16), ("x", "y"))
    looped = lambda a: lax.fori_loop(0, 3, lambda i, c: c * 2 + a.sum(0), a)  # noqa: E731
    want = host.copy()
    for _ in range(3):
        want = want * 2 + host.sum(0)
    check_result(jax.jit(looped)(x), "float32[8@x,16@y]", want)
    assert communication(looped, x) == [("all_reduce", ("x",))]

    def whiled(a):
        return lax.while_loop(lambda s: s[0] < 3, lambda s: (s[0] + 1, s[1] * 2 - s[1].sum()),
                              (0, a))[1]

    want = host.copy()
    for _ in range(3):
        want = want * 2 - want.sum()
    check_result(jax.jit(whiled)(x), "float32[8@x,16@y]", want)
    assert communication(whiled, x) == [("all_reduce", ("x", "y"))]

    def branched(a, p):
        return lax.cond(p, lambda b: b * 2, lambda b: b - b.max(1, keepdims=True), a)
    check_result(jax.jit(branched)(x, False), "float32[8@x,16@y]",
                 host - host.max(1, keepdims=True))
    check_result(jax.jit(branched)(x, True), "float32[8@x,16@y]", host * 2)
    assert communication(branched, x, True) == [("all_reduce", ("y",))]

    _, u = placed((8, 16), (None, "y"))
    scanned = lambda a: lax.scan(lambda c, r: (c + r, r * c),  # noqa: E731
                                 jnp.zeros((16,), out_sharding=P("y")), a)
    carry, ys = jax.jit(scanned)(u)
    running, rows = np.zeros(16, np.float32), []
    for r in np.asarray(u):
        rows.append(r * running)
        running = running + r
    check_result(carry, "float32[16@y]", running)
    check_result(ys, "float32[8,16@y]", np.array(rows))
    assert communication(scanned, u) == []


def test_gradients_through_branches_run_on_blocks(mesh24):
    """The derivative of a branch saves residuals a branch may make alike on every device (a
    zero where the other keeps its operand): under jit each branch's blocks are cast to vary
    as the cond's types split them, so the branches agree on their types."""
    host, x = placed((8, 16), ("x", "y"))
    square = lambda a: a * a  # noqa: E731
    double = lambda a: a * 2.  # noqa: E731
    by_sign = jax.grad(lambda a: jnp.sum(lax.cond(jnp.sum(a) > 0, square, double, a)))
    want = 2 * host if host.sum() > 0 else np.full_like(host, 2.)
    check_result(jax.jit(by_sign)(x), "float32[8@x,16@y]", want)
    check_result(jax.jit(by_sign)(-x), "float32[8@x,16@y]",
                 -2 * host if -host.sum() > 0 else np.full_like(host, 2.))
    fixed = jax.grad(lambda a: jnp.sum(lax.switch(1, [double, square, jnp.tanh], a)))
    check_result(jax.jit(fixed)(x), "float32[8@x,16@y]", 2 * host)
    # a replicated operand, the split value closed over
    w = jnp.float32(0.5)
    scaled = lambda w, a: jnp.sum(lax.cond(w > 0, lambda w: (w * a) ** 2,  # noqa: E731
                                           lambda w: w * a, w))
    gw, ga = jax.jit(jax.grad(scaled, argnums=(0, 1)))(w, x)
    check_result(gw, "float32[]", np.float32(np.sum(2 * 0.5 * host * host)))
    check_result(ga, "float32[8@x,16@y]", 2 * 0.25 * host)


def test_linear_transposes_have_their_primals_types(mesh24):
    """``linear_transpose`` transposes at a point typed as its primal, so each cotangent it
    returns is typed so; a cotangent whose split differs from the output's is JAX's
    TypeError (a host array has no split to differ)."""
    host, x = placed((8, 16), ("x", "y"))
    twice = lambda a: a * 2.  # noqa: E731
    (t,) = jax.linear_transpose(twice, x)(x)
    check_result(t, "float32[8@x,16@y]", host * 2)
    stand_in = jax.ShapeDtypeStruct((8, 16), jnp.float32, sharding=x.sharding)
    check_result(jax.linear_transpose(twice, stand_in)(x)[0], "float32[8@x,16@y]", host * 2)
    thrice = jax.shard_map(lambda a: a * 3., in_specs=P("x", "y"), out_specs=P("x", "y"))
    check_result(jax.linear_transpose(thrice, x)(x)[0], "float32[8@x,16@y]", host * 3)
    _, tangent_map = jax.linearize(lambda a: jnp.sin(a) * 2, x)
    (t,) = jax.linear_transpose(tangent_map, x)(x)
    assert str(jax.typeof(t)) == "float32[8@x,16@y]" and t.sharding.spec == P("x", "y")
    np.testing.assert_allclose(np.asarray(t), host * np.cos(host) * 2, rtol=1e-6, atol=1e-6)
    rows = jax.linear_transpose(lambda a: jnp.sum(a, axis=1), x)
    ct_host = np.arange(8, dtype=np.float32)
    want = np.broadcast_to(ct_host[:, None], (8, 16))
    check_result(rows(jax.device_put(ct_host, P("x")))[0], "float32[8@x,16@y]", want)
    check_result(rows(ct_host)[0], "float32[8@x,16@y]", want)
    for ct in (jnp.asarray(ct_host), jax.device_put(ct_host, P("y"))):
        with pytest.raises(TypeError, match=re.escape(
                "cotangent type does not match function output, expected "
                "(ShapedArray(float32[8@x]),) but got [")):
            rows(ct)


def test_in_specs_must_match_an_arrays_type_replicated_ones_too(mesh24):
    # JAX 0.10.2's ValueError: on an all-Explicit mesh an array replicated on it (made under
    # the mesh, put there, or laid out so by in_shardings) is typed P(None, ...), which a
    # split in_spec does not match; reshard it first. A host value has no type: it is split
    # as in_specs say (shardc keeps accepting it, as on Auto axes)
    f = jax.shard_map(lambda b: b * 2, in_specs=P("x", "y"), out_specs=P("x", "y"))
    host = np.arange(32.).reshape(8, 4)
    message = (r"^in_specs passed to shard_map: P\('x', 'y'\) does not match the specs of the "
               r"input: P\(None, None\) for arg: float32\[8,4\]\. `in_specs` is an optional")
    for replicated in (jnp.asarray(host), jax.device_put(host, P()),
                       jax.device_put(host, NamedSharding(mesh24, P(None, None)))):
        with pytest.raises(ValueError, match=message):
            f(replicated)
        with pytest.raises(ValueError, match=message):
            jax.jit(f)(replicated)
    with pytest.raises(ValueError, match=message):
        jax.jit(f, in_shardings=NamedSharding(mesh24, P()))(host)
    np.testing.assert_array_equal(np.asarray(f(host)), host * 2)
    np.testing.assert_array_equal(np.asarray(f(jax.reshard(jnp.asarray(host), P("x", "y")))),
                                  host * 2)
    # an in_spec that says replicated matches
    g = jax.shard_map(lambda b: b * 2, in_specs=P(), out_specs=P())
    np.testing.assert_array_equal(np.asarray(g(jnp.asarray(host))), host * 2)


def test_a_vjp_functions_cotangent_must_have_its_outputs_type(mesh24):
    # JAX 0.10.2's ValueError: an array's type says how it is split, and the cotangent's must
    # be the output's; a host value has none, and is laid out as the output is
    host, x = placed((8, 4), ("x", "y"))
    y, pullback = jax.vjp(jnp.sin, x)
    assert str(jax.typeof(y)) == "float32[8@x,4@y]"
    for ct in (jnp.ones((8, 4)), jax.device_put(np.ones((8, 4), np.float32), P("x"))):
        with pytest.raises(ValueError, match=re.escape(
                f"unexpected JAX type (e.g. shape/dtype) for argument to VJP function: got "
                f"{jax.typeof(ct)}, but expected float32[8@x,4@y] because the corresponding "
                "output of the differentiated function had JAX type float32[8@x,4@y]")):
            pullback(ct)
    for ct in (np.ones((8, 4), np.float32), jax.device_put(np.ones((8, 4), np.float32),
                                                            P("x", "y"))):
        (got,) = pullback(ct)
        check_result(got, "float32[8@x,4@y]", np.cos(host))


def test_abstract_meshes(mesh24):
    abstract = jax.sharding.get_abstract_mesh()
    assert isinstance(abstract, jax.sharding.AbstractMesh) and abstract == mesh24.abstract_mesh
    assert repr(abstract) == ("AbstractMesh('x': 2, 'y': 4, axis_types=(Explicit, Explicit), "
                              "device_kind=cpu, num_cores=None, platform=cpu)")
    host, x = placed((8, 4), ("x", "y"))
    seen = []
    jax.sharding.auto_axes(lambda a: seen.append(jax.sharding.get_abstract_mesh()) or a,
                           out_sharding=P("x", "y"))(x)
    assert seen[0].axis_types == (jax.sharding.AxisType.Auto,) * 2
    # a shard_map may be given the abstract mesh: the devices are the current mesh's
    f = jax.shard_map(lambda b: b * 2, mesh=abstract, in_specs=P("x", "y"),
                      out_specs=P("x", "y"))
    np.testing.assert_array_equal(np.asarray(f(x)), host * 2)
    # code under use_abstract_mesh sees the same devices arranged as it says
    flat = jax.sharding.AbstractMesh((8,), ("A",), (jax.sharding.AxisType.Explicit,))
    with jax.sharding.use_abstract_mesh(flat):
        check_result(jax.jit(lambda a: jax.sharding.reshard(a, P("A", None)) * 2)(x),
                     "float32[8@A,4]", host * 2)
        # the abstract mesh in context is the one given (JAX's), not one made from devices
        assert jax.sharding.get_abstract_mesh() == flat
        assert str(jax.sharding.get_abstract_mesh()) == str(flat)
    with pytest.raises(ValueError, match="Expected mesh of type `jax.sharding.AbstractMesh`"):
        with jax.sharding.use_abstract_mesh(jax.sharding.get_mesh()):
            pass
    # a type's update keeps its sharding for a shape of the same rank
    assert str(jax.typeof(x).update(shape=(4, 4))) == "float32[4@x,4@y]"
    assert str(jax.typeof(x).update(shape=(4,))) == "float32[4]"
    text = jax.jit(lambda a: a.sum(0)).lower(x).compile().as_text()
    assert "all_reduce[" in text and "f32[8@x,4@y]" in text


def test_use_abstract_mesh_keeps_the_size_of_the_mesh_set():
    explicit = (jax.sharding.AxisType.Explicit,)
    mesh = jax.make_mesh((2,), ("x",), axis_types=explicit, devices=jax.devices()[:2])
    bigger = jax.sharding.AbstractMesh((4,), ("x",), explicit)
    with jax.sharding.set_mesh(mesh):
        with pytest.raises(ValueError, match=re.escape(
                "use_abstract_mesh cannot change the size of the mesh. Got new mesh: "
                "AbstractMesh('x': 4, axis_types=(Explicit,)) with size=4 and prev mesh: "
                "AbstractMesh('x': 2, axis_types=(Explicit,), device_kind=cpu, "
                "num_cores=None, platform=cpu) with size=2")):
            with jax.sharding.use_abstract_mesh(bigger):
                pass
        assert jax.sharding.get_mesh() == mesh


def test_no_mesh_is_the_empty_abstract_mesh():
    empty = jax.sharding.get_abstract_mesh()
    assert empty.empty and repr(empty) == "AbstractMesh((), axis_types=())"


def test_unreduced_specs_are_kept():
    # (their behaviour is tests/test_unreduced.py's)
    spec = P("x", unreduced={"y"})
    assert spec.unreduced == {"y"} and spec.partitions == ("x",)


# --- what the partitioner inserts, and the strict mode -----------------------------------------

@pytest.fixture
def strict_mode():
    yield lambda mode: jax.config.update("shardc_implicit_communication", mode)
    jax.config.update("shardc_implicit_communication", "allow")


def test_the_ledger_lists_what_the_partitioner_inserted(mesh24):
    _, x = placed((8, 16), ("x", "y"))
    _, w = placed((16, 4), (None, "y"))

    def f(a, b):
        return jnp.dot(jax.sharding.reshard(a, P("x", None)), b) + a.sum()

    ledger = jax.comm_ledger(jax.jit(f), x, w)
    asked, summed = ledger.inserted
    assert (asked.operation, asked.collective, asked.mesh_axes, asked.requested) == (
        "sharding_constraint", "all_gather", ("y",), True)
    assert (asked.from_type, asked.to_type, asked.bytes_per_device) == (
        "f32[8@x,16@y]", "f32[8@x,16]", 4 * 4 * 3 * 4)     # 3 blocks of 4x4 float32
    assert (summed.operation, summed.collective, summed.mesh_axes, summed.requested) == (
        "reduce_sum", "all_reduce", ("x", "y"), False)
    line = f.__code__.co_firstlineno + 1
    assert {r.site for r in ledger.inserted} == {f"test_explicit_sharding.py:{line}"}
    from shardc.ledger import render_ledger
    text = render_ledger(ledger)
    assert "inserted by the partitioner" in text
    assert re.search(r"reduce_sum +f32\[8@x,16@y\] -> f32\[\] +all_reduce x,y", text)


def test_strict_mode_error_stops_at_the_first_inserted_collective(mesh24, strict_mode):
    _, x = placed((8, 16), ("x", "y"))
    strict_mode("error")
    # what the program asks for itself is not implicit
    jax.jit(lambda a: jax.sharding.reshard(a, P("y", "x")))(x)
    jax.jit(lambda a: jnp.sin(a) * 2)(x)           # every layout as annotated: nothing moves
    with pytest.raises(ValueError, match=re.escape(
            "the partitioner would insert communication the program does not write "
            "(shardc_implicit_communication='error'): test_explicit_sharding.py:")) as err:
        jax.jit(lambda a: a.sum(0))(x)
    assert "reduce_sum f32[8@x,16@y] -> f32[16@y]: all_reduce over x" in str(err.value)
    with pytest.raises(ValueError, match="reduce_sum"):
        x.sum(0)                                     # eager operations too
    with pytest.raises(ValueError, match=re.escape(
            "new enum value must be in ['allow', 'warn', 'error'], got sometimes")):
        jax.config.update("shardc_implicit_communication", "sometimes")


def test_strict_mode_warns_once_per_site(mesh24, strict_mode):
    import warnings
    _, x = placed((8, 16), ("x", "y"))
    strict_mode("warn")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            jax.jit(lambda a: a.max(1))(x)
    texts = [str(w.message) for w in caught]
    assert len(texts) == 1 and texts[0].startswith("implicit communication: ")
    assert "reduce_max f32[8@x,16@y] -> f32[8@x]: all_reduce over y" in texts[0]


def test_strict_mode_names_the_training_steps_lines(strict_mode):
    import train_mlp
    import train_explicit
    params, batch = train_mlp.model([16, 32, 8], 8)
    with jax.set_mesh(mesh_of((2, 4), ("x", "y"))):
        placed_params, placed_batch = train_explicit.place(params, batch)
        ledger = jax.comm_ledger(train_explicit.train_step, placed_params, placed_batch)
        assert ledger.inserted and all("train_explicit.py:" in r.site for r in ledger.inserted)
        asked = [r for r in ledger.inserted if r.requested]
        assert asked and all(r.operation == "sharding_constraint" for r in asked)
        strict_mode("error")
        with pytest.raises(ValueError, match="train_explicit.py:"):
            jax.jit(lambda p, b: train_explicit.train_step(p, b))(placed_params, placed_batch)


# Every placement of a rank-2 value, resharded to every other: the collectives the partitioner
# puts in, with the bytes a device receives (tests/data/resharding_*.txt; after an intended
# change, run with SHARDC_UPDATE_GOLDEN=1 and review the diff), and the values.
RESHARD_PLACEMENTS = {
    "1d": ((8,), ("i",), [P(), P("i"), P(None, "i")]),
    "2x4": ((2, 4), ("x", "y"), [
        P(), P("x"), P("y"), P(None, "x"), P(None, "y"), P("x", "y"), P("y", "x"),
        P(("x", "y")), P(("y", "x")), P(None, ("x", "y")), P(None, ("y", "x"))]),
}
RESHARD_VALUE = np.arange(16 * 16, dtype=np.float32).reshape(16, 16)
# Pending sums: the value as a product whose contraction is split over these axes on both
# sides (each device holds a partial sum of the whole value until it is reduced).
PENDING = {"1d": [("i",)], "2x4": [("y",), ("x", "y")]}


def pending(axes):
    """The value and the identity laid out so that their product is a sum pending over
    ``axes``; the product taken as ``dst`` lays it out."""
    a = jax.device_put(RESHARD_VALUE, P(None, axes))
    eye = jax.device_put(np.eye(16, dtype=np.float32), P(axes, None))
    return a, eye, lambda a, b, dst: jnp.dot(a, b, out_sharding=dst)


def resharding_matrix(name: str) -> str:
    shape, names, placements = RESHARD_PLACEMENTS[name]
    mesh = jax.make_mesh(shape, names)
    lines = [f"f32[16,16] on {mesh}: from -> to: what moves (bytes received per device)"]
    with jax.set_mesh(mesh):
        for src in placements:
            x = jax.device_put(RESHARD_VALUE, src)
            for dst in placements:
                ledger = jax.comm_ledger(jax.jit(lambda a: jax.sharding.reshard(a, dst)), x)
                moves = "; ".join(f"{r.collective} {','.join(r.mesh_axes)} "
                                  f"{r.bytes_per_device} B" for r in ledger.inserted)
                lines.append(f"{src!r} -> {dst!r}: {moves or 'nothing'}")
        for axes in PENDING[name]:
            a, eye, product = pending(axes)
            for dst in placements:
                ledger = jax.comm_ledger(jax.jit(lambda a, b: product(a, b, dst)), a, eye)
                moves = "; ".join(f"{r.collective} {','.join(r.mesh_axes)} "
                                  f"{r.bytes_per_device} B" for r in ledger.inserted)
                lines.append(f"sum pending over {','.join(axes)} -> {dst!r}: "
                             f"{moves or 'nothing'}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("name", list(RESHARD_PLACEMENTS))
def test_resharding_matrix(name):
    import os
    text = resharding_matrix(name)
    path = ROOT / "tests" / "data" / f"resharding_{name}.txt"
    if os.environ.get("SHARDC_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert text == path.read_text()


@pytest.mark.parametrize("name", list(RESHARD_PLACEMENTS))
def test_resharding_matrix_values(name):
    """Every placement to every other, under jit and eagerly: the value unchanged, laid out
    as asked, every shard its block."""
    shape, names, placements = RESHARD_PLACEMENTS[name]
    mesh = jax.make_mesh(shape, names)
    with jax.set_mesh(mesh):
        for src in placements:
            x = jax.device_put(RESHARD_VALUE, src)
            for dst in placements:
                for out in (jax.jit(lambda a: jax.sharding.reshard(a, dst))(x),
                            jax.sharding.reshard(x, dst)):
                    assert out.sharding == NamedSharding(mesh, dst), (src, dst)
                    np.testing.assert_array_equal(np.asarray(out), RESHARD_VALUE)
                    for shard in out.addressable_shards:
                        np.testing.assert_array_equal(shard.data, RESHARD_VALUE[shard.index])
        for axes in PENDING[name]:
            a, eye, product = pending(axes)
            for dst in placements:
                for out in (jax.jit(lambda a, b: product(a, b, dst))(a, eye),
                            product(a, eye, dst)):
                    assert out.sharding == NamedSharding(mesh, dst), (axes, dst)
                    np.testing.assert_array_equal(np.asarray(out), RESHARD_VALUE)
                    for shard in out.addressable_shards:
                        np.testing.assert_array_equal(shard.data, RESHARD_VALUE[shard.index])


# --- operands broadcast together, tiling, placing under jit (each once refused or crashed) ----

def test_where_broadcasts_its_operands_to_the_split_they_share(mesh24):
    """An unsplit condition (or case) of another shape meets a split case: each is broadcast
    to the split they broadcast to together, as JAX's _broadcast_arrays does (before, the
    condition stayed unsplit and select refused it)."""
    host, x = placed((8, 4), ("x", None))
    check_result(jnp.where(jnp.arange(4) > 1, x, 0.0), "float32[8@x,4]",
                 np.where(np.arange(4) > 1, host, 0.0).astype(np.float32))
    check_result(jnp.where(x > 3, 1.0, jnp.zeros((8, 1))), "float32[8@x,4]",
                 np.where(host > 3, 1.0, 0.0).astype(np.float32))
    cube_host, cube = placed((8, 4, 4), ("x", None, None))
    check_result(jnp.tril(cube), "float32[8@x,4,4]", np.tril(cube_host))
    both = jnp.broadcast_arrays(x, jnp.ones((1, 4)))
    assert [str(jax.typeof(b)) for b in both] == ["float32[8@x,4]", "float32[8@x,4]"]
    # scalar cases take the condition's split too (they came out unsplit), weak as they were
    for f in (lambda a: jnp.where(a > 3, 1.0, 0.0), jax.jit(lambda a: jnp.where(a > 3, 1.0, 0.0))):
        check_result(f(x), "~float32[8@x,4]", np.where(host > 3, 1.0, 0.0).astype(np.float32))
    check_result(jnp.where(x > 3, 1, 0), "~int32[8@x,4]", np.where(host > 3, 1, 0).astype(np.int32))
    check_result(jnp.where(x > 3, True, False), "bool[8@x,4]", host > 3)
    check_result(jnp.copysign(1.0, x), "float32[8@x,4]", np.copysign(1.0, host).astype(np.float32))


@pytest.mark.parametrize("reps, want", [((1, 2), "float32[8@x,8]"),
                                         ((2, 1, 3), "float32[2,8@x,12]")])
def test_tile_keeps_the_operands_split(mesh24, reps, want):
    host, x = placed((8, 4), ("x", None))
    check_result(jnp.tile(x, reps), want, np.tile(host, reps))


def test_device_put_under_jit_reshards(mesh24):
    host, x = placed((8, 4), ("x", None))
    check_result(jax.jit(lambda a: jax.device_put(a, P(None, "x")))(x), "float32[8,4@x]", host)
    check_result(jax.jit(lambda a: a.copy() * 2)(x), "float32[8@x,4]", host * 2)


def test_a_results_sharding_names_explicit_axes_only():
    """out_sharding and reshard name Explicit axes only, as JAX 0.10.2's (an Auto axis is the
    compiler's, a body's are Manual); jit's in_shardings do not move an argument committed
    to another layout on an Auto mesh either."""
    auto = jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    mixed = jax.make_mesh((2, 4), ("x", "y"),
                    axis_types=(jax.sharding.AxisType.Explicit, jax.sharding.AxisType.Auto))

    def message(name, spec, axis):
        return (f"PartitionSpec passed to {name} cannot contain axis names that are of type "
                f"Auto or Manual. Got PartitionSpec: {spec} with axis name: {axis} of type: "
                "AxisType.Auto.")
    with jax.set_mesh(auto):
        x = jax.device_put(np.ones((8, 16), np.float32), P("x", "y"))
        for call, text in [
                (lambda: jnp.zeros((8, 16), out_sharding=P("x")),
                 message("jnp.zeros", "P('x',)", "x")),
                (lambda: jax.sharding.reshard(x, P("y")), message("reshard", "P('y',)", "y")),
                (lambda: jnp.dot(x, x.T, out_sharding=P("x", "y")),
                 message("dot_general", "P('x', 'y')", "x")),
                (lambda: jnp.einsum("ij,kj->ik", x, x, out_sharding=P("x")),
                 message("einsum", "P('x',)", "x"))]:
            with pytest.raises(ValueError) as info:
                call()
            assert str(info.value) == text
        with pytest.raises(ValueError, match="Sharding passed to jit does not match the "
                                             "sharding on the respective arg"):
            jax.jit(lambda a: a * 2, in_shardings=P("x", None))(x)
        assert jax.jit(lambda a: a * 2, in_shardings=P("x", "y"))(x).sharding.spec == \
            P("x", "y")
        # a device is no sharding to check: the result goes there
        assert jnp.zeros((8,), device=NamedSharding(auto, P("x"))).sharding.spec == P("x")
    with jax.set_mesh(mixed):
        with pytest.raises(ValueError) as info:
            jnp.zeros((8, 16), out_sharding=P("x", "y"))
        assert str(info.value) == message("jnp.zeros", "P('x', 'y')", "y")


def test_an_array_typed_on_one_mesh_computed_under_another_is_jax_error():
    m1 = jax.make_mesh((2, 4), ("X", "Y"))
    m2 = jax.make_mesh((4, 2), ("X", "Y"))
    a = jax.device_put(np.ones((8, 8), np.float32), NamedSharding(m1, P("X")))
    with jax.set_mesh(m2):
        with pytest.raises(ValueError, match=re.escape(
                f"For primitive mul, context mesh {m2.abstract_mesh!r} should match the aval "
                f"mesh {m1.abstract_mesh!r} for shape f32[8@X,8].")):
            a * 2
    with jax.set_mesh(m1):
        check_result(a * 2, "float32[8@X,8]", np.full((8, 8), 2, np.float32))


def test_take_along_axis_keeps_the_operands_split(mesh24):
    """As JAX's batched gather types it: the other dimensions keep the operand's split (and
    sorted indices split alike are taken); split along the axis taken is JAX's error."""
    host, x = placed((8, 4), ("x", None))
    index_host = np.random.default_rng(0).integers(-5, 5, (8, 2)).astype(np.int32)
    taken = jnp.take_along_axis(x, jnp.asarray(index_host), axis=1)
    want = np.where((index_host >= -4) & (index_host < 4),
                    np.take_along_axis(host, np.clip(index_host % 4, 0, 3), axis=1), np.nan)
    check_result(taken, "float32[8@x,2]", want.astype(np.float32))
    order = jnp.argsort(-x, axis=1)
    check_result(jnp.take_along_axis(x, order, axis=1), "float32[8@x,4]",
                 -np.sort(-host, axis=1))
    check_result(jax.jit(lambda a, i: jnp.take_along_axis(a, i, axis=1))(
        x, jnp.asarray(index_host)), "float32[8@x,2]", want.astype(np.float32))
    _, cube = placed((2, 8, 4), (None, "x", "y"))
    with pytest.raises(ShardingTypeError, match=re.escape(
            "Got operand=ShapedArray(float32[2,8@x,4@y]), indices=ShapedArray(int32[2,8,3,1])")):
        jnp.take_along_axis(cube, jnp.zeros((2, 8, 3), jnp.int32), axis=2)


# JAX's einsum pairs (first, second) as dot_general(first, second) where the result comes out
# in order, else dot_general(second, first): the batch dimensions take the sharding of the
# operand put first. (subscripts, specs, JAX 0.10.2's result type)
EINSUM_TYPES = [
    ("bi,bij->jb", (P(), P("a")), "float32[6,8@a]"),
    ("bi,bij->bj", (P(), P("a")), "float32[8,6]"),
    ("bij,bi->jb", (P("a"), P()), "float32[6,8]"),
    ("ij,jk->ki", (P("a"), P()), "float32[6,8@a]"),
    ("bhts,bshk->bthk", (P("a"), P()), "float32[8,4,2,6]"),
    ("bhts,bshk->bthk", (P(), P("a")), "float32[8@a,4,2,6]"),
    ("bij,bjk->bik", (P(), P("a")), "float32[8,8,6]"),
]


@pytest.mark.parametrize("subscripts,specs,want", EINSUM_TYPES)
def test_einsum_shards_its_result_as_jax_pairs_the_operands(subscripts, specs, want):
    mesh = jax.make_mesh((8,), ("a",))
    sizes = dict(b=8, i=8, j=6, k=6, h=2, t=4, s=3)
    ins, out = subscripts.split("->")
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal([sizes[c] for c in s]).astype(np.float32)
              for s in ins.split(",")]
    placed = [jax.device_put(x, NamedSharding(mesh, spec)) for x, spec in zip(arrays, specs)]
    for fn in (jnp.einsum, jax.jit(jnp.einsum, static_argnums=0)):
        got = fn(subscripts, *placed)
        assert str(jax.typeof(got)) == want
        np.testing.assert_allclose(got, np.einsum(subscripts, *arrays), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("out_spec", [P("data", None, None), P("data")])
def test_einsum_of_three_operands_lays_out_only_its_result(out_spec):
    """JAX's einsum of more than two operands with out_sharding: the intermediate product
    (contracting the split b) has no layout asked for, so the chain runs with the Explicit
    axes out of the types and only the result is laid out (an ambiguity error before)."""
    mesh = jax.make_mesh((4,), ("data",))
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((8, 32, 1, 16)).astype(np.float32) for _ in range(2))
    c = rng.standard_normal((8, 32, 1, 8)).astype(np.float32)
    with jax.set_mesh(mesh):
        x, y, z = (jax.device_put(v, P("data")) for v in (a, b, c))

        @jax.jit
        def f(x, y, z):
            out = jnp.einsum("bthD, bthi, bthj->ijD", x, y, z, out_sharding=out_spec)
            assert str(jax.typeof(out)) == "float32[16@data,8,16]"
            return out

        out = f(x, y, z)
        assert out.sharding == NamedSharding(mesh, P("data", None, None))
        np.testing.assert_allclose(out, np.einsum("bthD,bthi,bthj->ijD", a, b, c), rtol=1e-4,
                                   atol=1e-4)


def test_lax_broadcast_takes_out_sharding_through_jacobians():
    """``lax.broadcast(x, sizes, out_sharding=)`` as JAX's: the new dimensions split as asked;
    the Jacobians' layouts are JAX 0.10.2's."""
    mesh = jax.make_mesh((2, 2), ("x", "y"))
    values = np.arange(16, dtype=np.float32)
    with jax.set_mesh(mesh):
        arr = jax.device_put(values, P("y"))

        @jax.jit
        def spread(x):
            return lax.broadcast(x, sizes=[2], out_sharding=P("x", *jax.typeof(x).sharding.spec))

        out = spread(arr)
        assert out.sharding.spec == P("x", "y")
        np.testing.assert_array_equal(out, np.broadcast_to(values, (2, 16)))
        eye = np.broadcast_to(np.eye(16, dtype=np.float32), (2, 16, 16))
        for jac, spec in ((jax.jacfwd, P("x", "y", None)), (jax.jacrev, P(None, None, "y"))):
            got = jax.jit(jac(spread))(arr)
            assert got.sharding.spec == spec
            np.testing.assert_array_equal(got, eye)


def test_top_k_and_sort_differentiate_on_a_split_batch():
    """JAX's top_k sharding test: the values keep the operand's split, and so does their
    gradient, which is 1/n at each selected place and 0 elsewhere (as numpy computes it)."""
    mesh = jax.make_mesh((2, 2), ("x", "y"))
    values = np.random.default_rng(0).standard_normal((4, 32, 32)).astype(np.float32)
    with jax.set_mesh(mesh):
        arr = jax.device_put(values, P("x", None, None))
        top = jax.jit(lambda w: lax.top_k(w, 6)[0])
        out = top(arr)
        assert out.sharding.spec == P("x", None, None)
        np.testing.assert_array_equal(out, -np.sort(-values, axis=-1)[..., :6])
        grad = jax.jit(jax.grad(lambda x: top(x).mean()))(arr)
        assert grad.sharding.spec == P("x", None, None)
        chosen = values >= np.sort(values, axis=-1)[..., -6:-5]
        np.testing.assert_allclose(grad, chosen / out.size, rtol=1e-6)
        g_sort = jax.grad(lambda x: (jnp.sort(x, axis=-1) * jnp.arange(32.0)).sum())(arr)
        assert g_sort.sharding.spec == P("x", None, None)
        np.testing.assert_array_equal(g_sort, np.argsort(np.argsort(values, -1), -1))


# vmap over a batch split by its type, with an operand every member shares: the shared one is
# broadcast split as the batch is, as JAX's batching broadcasts it (JAX 0.10.2's types)
VMAP_SHARED = {
    "where, a shared mask": (lambda r: jnp.where(jnp.arange(8) % 2 == 0, r, 0.0),
                             lambda b: np.where(np.arange(8) % 2 == 0, b, 0.0), "float32[8@X,8]"),
    "concatenate a shared row": (lambda r: jnp.concatenate([r, jnp.ones(2)]),
                                 lambda b: np.concatenate([b, np.ones((8, 2))], 1),
                                 "float32[8@X,10]"),
    "a cond on each member": (lambda r: lax.cond(r[0] > 10, lambda: r, lambda: jnp.zeros(8)),
                              lambda b: np.where(b[:, :1] > 10, b, 0.0), "float32[8@X,8]"),
    "diag": (jnp.diag, lambda b: np.stack([np.diag(v) for v in b]), "float32[8@X,8,8]"),
    "set an element": (lambda r: r.at[2].set(0.0),
                       lambda b: np.where(np.arange(8) == 2, 0.0, b), "float32[8@X,8]"),
    # loops: the carry keeps the batch's split
    "a fori_loop": (lambda r: lax.fori_loop(0, 3, lambda i, c: c * 2 + i, r),
                    lambda b: b * 8 + 4, "float32[8@X,8]"),
    "a scan over shared steps": (lambda r: lax.scan(lambda c, t: (c + t, c.sum()), r,
                                                    jnp.arange(3.0))[0],
                                 lambda b: b + 3, "float32[8@X,8]"),
    "a while_loop per member": (lambda r: lax.while_loop(lambda c: c[0] < 100, lambda c: c * 2,
                                                         r + 1),
                                lambda b: np.stack([_doubled_past_100(v + 1) for v in b]),
                                "float32[8@X,8]"),
}


def _doubled_past_100(v):
    while v[0] < 100:
        v = v * 2
    return v


@pytest.mark.parametrize("name", list(VMAP_SHARED))
def test_vmap_broadcasts_a_shared_operand_split_as_the_batch(name):
    fn, reference, want = VMAP_SHARED[name]
    mesh = jax.make_mesh((4, 2), ("X", "Y"))
    data = np.arange(64.0, dtype=np.float32).reshape(8, 8)
    b = jax.device_put(data, NamedSharding(mesh, P("X")))
    for run in (jax.vmap(fn), jax.jit(jax.vmap(fn))):
        got = run(b)
        assert str(jax.typeof(got)) == want
        np.testing.assert_allclose(got, reference(data))


def test_explicit_axes_on_an_auto_mesh_returns_values_typed_unsplit():
    # JAX's parallel programming guide: explicit_axes inside a jit on an Auto mesh; its
    # result leaves typed as the Auto mesh types it (unsplit), and computes on
    auto = jax.make_mesh((4, 2), ("X", "Y"), (jax.sharding.AxisType.Auto,) * 2)
    seen = []

    @jax.sharding.explicit_axes
    def double(y):
        seen.append(str(jax.typeof(y)))
        return y * 2

    data = np.arange(16.0, dtype=np.float32).reshape(4, 4)
    with jax.set_mesh(auto):
        x = jax.device_put(data, NamedSharding(auto, P("X", "Y")))
        eager = double(jnp.asarray(data), in_sharding=P("X", None))
        staged = jax.jit(lambda a: double(jnp.sin(a), in_sharding=P("X", "Y")) + 1)(x)
        after = staged + x
    assert seen == ["float32[4@X,4]", "float32[4@X,4@Y]"]
    assert str(jax.typeof(eager)) == str(jax.typeof(staged)) == "float32[4,4]"
    # eagerly the result stays laid out as computed, on the Auto mesh (JAX's)
    assert eager.sharding == NamedSharding(auto, P("X"))
    assert str(eager.sharding.spec) == "P('X',)"       # spelt as JAX reads the layout back
    np.testing.assert_allclose(eager, data * 2)
    np.testing.assert_allclose(staged, np.sin(data) * 2 + 1, rtol=1e-6)
    np.testing.assert_allclose(after, np.sin(data) * 2 + 1 + data, rtol=1e-6)


def test_a_sharding_constraint_inside_auto_axes_names_auto_axes():
    # inside auto_axes the axes are Auto: a constraint there is a layout hint, not an assert
    mesh = jax.make_mesh((4, 2), ("X", "Y"))
    data = np.arange(64.0, dtype=np.float32).reshape(8, 8)
    b = jax.device_put(data, NamedSharding(mesh, P("X")))
    with jax.set_mesh(mesh):
        f = jax.sharding.auto_axes(lambda a: lax.with_sharding_constraint(a * 2, P("Y", None)),
                                   out_sharding=P("X"))
        got = f(b)
        assert str(jax.typeof(got)) == "float32[8@X,8]"
        np.testing.assert_allclose(got, data * 2)
        with pytest.raises(AssertionError, match="acts as an assert"):
            lax.with_sharding_constraint(b, P("Y", None))


def test_auto_axes_over_axes_that_are_auto_already_only_calls_the_function():
    """JAX's auto_axes does nothing where its axes are Auto already: out_sharding included
    (reshard would refuse Auto axes)."""
    mesh = jax.make_mesh((4, 2), ("X", "Y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    with jax.set_mesh(mesh):
        a = jax.device_put(np.arange(8.0), P("X"))
        for f in (functools.partial(jax.sharding.auto_axes(lambda x: x * 2), out_sharding=P("Y")),
                  jax.jit(jax.sharding.auto_axes(lambda x: x * 2, out_sharding=P("Y")))):
            got = f(a)
            assert got.sharding.spec == P("X")
            np.testing.assert_array_equal(np.asarray(got), np.arange(8.0) * 2)


# gradients whose rules make constants (ones, positions) of their operand's type: split as it
# is, so selects and concatenations among them type (JAX 0.10.2 gives float32[8,8@Y])
SPLIT_GRADS = {
    "abs of a complex": (lambda x: jnp.abs(x.astype(jnp.complex64)).sum(), lambda x: np.sign(x)),
    "prod along a whole axis": (lambda x: jnp.prod(x, axis=0).sum(),
                                lambda x: np.prod(x, 0) / x),
    "prod along a split axis": (lambda x: jnp.prod(x, axis=1).sum(),
                                lambda x: np.prod(x, 1, keepdims=True) / x),
    "cumprod": (lambda x: jnp.cumprod(x, axis=0).sum(),
                lambda x: np.stack([sum(np.prod(np.delete(x[:j + 1], i, 0), 0)
                                        for j in range(i, 8)) for i in range(8)])),
}


@pytest.mark.parametrize("name", list(SPLIT_GRADS))
def test_gradient_rules_type_their_constants_as_their_operands(name):
    fn, reference = SPLIT_GRADS[name]
    mesh = jax.make_mesh((4, 2), ("X", "Y"))
    data = (np.arange(64.0).reshape(8, 8) % 5 + 0.5).astype(np.float32)
    c = jax.device_put(data, NamedSharding(mesh, P(None, "Y")))
    for run in (jax.grad(fn), jax.jit(jax.grad(fn))):
        got = run(c)
        assert str(jax.typeof(got)) == "float32[8,8@Y]"
        np.testing.assert_allclose(got, reference(data.astype(np.float64)), rtol=1e-4)


def test_eval_shape_reports_the_results_sharding_on_explicit_axes():
    mesh = jax.make_mesh((4, 2), ("X", "Y"))
    xs = jax.device_put(np.ones((8, 4), np.float32), NamedSharding(mesh, P("X", "Y")))
    with jax.set_mesh(mesh):
        summed = jax.eval_shape(lambda a: a.sum(1), xs)
        total = jax.eval_shape(lambda a: a.sum(), xs)
        host = jax.eval_shape(lambda a: a * 2, np.ones(3, np.float32))
        assert summed.sharding == NamedSharding(mesh.abstract_mesh, P("X"))
        assert str(jax.typeof(summed)) == "float32[8@X]"
        assert total.sharding.spec == P() and host.sharding.spec == P(None)
        # such a stand-in lowers as the value it stands for
        lowered = jax.jit(lambda a: a * 2).lower(summed)
        assert "f32[8@X]" in lowered.as_text()
    assert jax.eval_shape(lambda a: a * 2, np.ones(3, np.float32)).sharding is None


def test_vmap_of_random_draws_over_split_keys_keeps_the_split():
    # one key per member: each member's draw is its key's, wherever the keys are
    mesh = jax.make_mesh((4, 2), ("X", "Y"))
    keys = jax.random.split(jax.random.key(3), 8)
    split = jax.device_put(keys, NamedSharding(mesh, P("X")))
    want = np.stack([np.asarray(jax.random.normal(k, (3,))) for k in keys])
    draw = jax.vmap(lambda k: jax.random.normal(k, (3,)))
    for run in (draw, jax.jit(draw)):
        got = run(split)
        assert str(jax.typeof(got)) == "float32[8@X,3]"
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(draw(keys), want)
    # the lowered program draws each device's keys on that device: no gather of the keys
    lowered = jax.jit(draw).lower(split)
    assert "all_gather" not in lowered.as_text()


# operations along some dimensions run on each device's blocks where the split ones are left
# alone: (function, numpy reference, the dimensions it acts along)
ALONG = {
    "slice": (lambda a: a[:, 1:5], lambda a: a[:, 1:5], (1,)),
    "strided slice": (lambda a: a[:, ::3], lambda a: a[:, ::3], (1,)),
    "slice rows": (lambda a: a[2:7], lambda a: a[2:7], (0,)),
    "concatenate": (lambda a: jnp.concatenate([a, a[:, :2] * 2], axis=1),
                    lambda a: np.concatenate([a, a[:, :2] * 2], axis=1), (1,)),
    "pad": (lambda a: jnp.pad(a, ((0, 0), (1, 2)), constant_values=-1.0),
            lambda a: np.pad(a, ((0, 0), (1, 2)), constant_values=-1.0), (1,)),
    "reverse": (lambda a: a[:, ::-1], lambda a: a[:, ::-1], (1,)),
    "dynamic slice": (lambda a: lax.dynamic_slice_in_dim(a, a.shape[1] // 3, 3, axis=1),
                      lambda a: a[:, a.shape[1] // 3:a.shape[1] // 3 + 3], (1,)),
    "dynamic update": (lambda a: lax.dynamic_update_slice_in_dim(a, a[:, :2] * 0 - 5, 3, axis=1),
                       lambda a: np.concatenate([a[:, :3], a[:, :2] * 0 - 5, a[:, 5:]], 1),
                       (1,)),
    "top_k": (lambda a: lax.top_k(a, 2)[0], lambda a: -np.sort(-a, axis=1)[:, :2], (1,)),
}


def _along_cases():
    """Each operation with the operand's splits it leaves alone (on the ones it acts along,
    JAX's types mostly refuse it: slicing a split dimension unevenly, say)."""
    for name, (_, _, dims) in ALONG.items():
        for spec in (P("X"), P(None, "X"), P(("X", "Y")), P(None, ("Y", "X")), P(None, "Y")):
            split = {d for d, names in enumerate(spec) if names}
            if not split & set(dims):
                yield name, spec


@pytest.mark.parametrize("name, spec", list(_along_cases()), ids=str)
def test_operations_along_unsplit_dimensions_run_on_blocks(name, spec):
    fn, reference, dims = ALONG[name]
    mesh = jax.make_mesh((4, 2), ("X", "Y"))
    data = np.random.default_rng(1).permutation(64).astype(np.float32).reshape(8, 8)
    x = jax.device_put(data, NamedSharding(mesh, spec))
    for run in (fn, jax.jit(fn)):
        got = run(x)
        np.testing.assert_array_equal(got, reference(data))
        assert got.sharding == NamedSharding(mesh, spec)
    # no gather, no exchange at all: each device computes on its own blocks
    assert communication(fn, x) == []


def test_indexing_a_closed_over_placed_array_inside_traces():
    # a concrete array laid out over devices, read partially inside jit, grad, vmap and scan
    auto = jax.make_mesh((8,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    data = np.arange(32, dtype=np.float32).reshape(8, 4)
    x = jax.device_put(data, NamedSharding(auto, P("x")))
    np.testing.assert_array_equal(jax.jit(lambda: x[0])(), data[0])
    assert float(jax.grad(lambda w: w * x[1, 2])(1.0)) == data[1, 2]
    np.testing.assert_array_equal(jax.vmap(lambda i: x[i])(jnp.arange(3)), data[:3])
    total = lax.scan(lambda c, i: (c + x[i].sum(), None), 0.0, jnp.arange(8))[0]
    assert float(total) == data.sum()
    mesh = jax.make_mesh((4, 2), ("a", "b"))
    with jax.set_mesh(mesh):
        xe = jax.device_put(data, P("a"))
        column = jax.jit(lambda: xe[:, 1])()
        assert str(jax.typeof(column)) == "float32[8@a]"
        np.testing.assert_array_equal(column, data[:, 1])
        ones = jnp.ones((4, 16))
        assert float(jax.jit(lambda w: w * ones[0].sum())(1.0)) == 16.0


def test_convolution_of_a_batch_split_input_keeps_the_split():
    rng = np.random.default_rng(0)
    images = rng.normal(size=(4, 8, 8, 3)).astype(np.float32)
    kernel = rng.normal(size=(3, 3, 3, 8)).astype(np.float32)
    conv = lambda a: lax.conv_general_dilated(a, kernel, (1, 1), "SAME",
                                              dimension_numbers=("NHWC", "HWIO", "NHWC"))
    want = np.asarray(conv(images))
    mesh = jax.make_mesh((2, 4), ("x", "y"))
    with jax.set_mesh(mesh):
        split = jax.device_put(images, P("x"))
        for run in (conv, jax.jit(conv)):
            got = run(split)
            assert str(jax.typeof(got)) == "float32[4@x,8,8,8]"
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
        grad = jax.grad(lambda a: conv(a).sum())(split)
        assert str(jax.typeof(grad)) == "float32[4@x,8,8,3]"


@pytest.mark.parametrize("groups, layout", [(2, "NCHW"), (4, "NCHW"), (2, "NHWC")])
def test_grouped_convolution_of_a_batch_split_input_keeps_the_split(groups, layout):
    """feature_group_count > 1 on a batch split over x: it failed in a reshape that split the
    features and merged the positions at once (JAX's reshape rule refuses that)."""
    rng = np.random.default_rng(1)
    images = rng.normal(size=(8, 4, 6, 6)).astype(np.float32)
    kernel = rng.normal(size=(4, 4 // groups, 3, 3)).astype(np.float32)
    if layout == "NHWC":
        images, kernel = images.transpose(0, 2, 3, 1), kernel.transpose(2, 3, 1, 0)
    numbers = ("NCHW", "OIHW", "NCHW") if layout == "NCHW" else ("NHWC", "HWIO", "NHWC")
    conv = lambda a: lax.conv_general_dilated(a, kernel, (1, 1), "SAME",
                                              dimension_numbers=numbers,
                                              feature_group_count=groups)
    want = np.asarray(conv(images))
    with jax.set_mesh(jax.make_mesh((2, 4), ("x", "y"))):
        split = jax.device_put(images, P("x"))
        for run in (conv, jax.jit(conv)):
            got = run(split)
            assert str(jax.typeof(got)) == f"float32[8@x,{','.join(map(str, want.shape[1:]))}]"
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_resize_of_a_split_array_runs_eagerly_as_under_jit():
    """JAX's resize is jitted: its static cut is a slice, eagerly too (it failed as a gather)."""
    host = np.arange(128, dtype=np.float32).reshape(8, 16)
    with jax.set_mesh(jax.make_mesh((2, 4), ("x", "y"))):
        a = jax.device_put(host, P("x", None))
        for run in (jnp.resize, jax.jit(jnp.resize, static_argnums=1)):
            check_result(run(a, (4, 16)), "float32[4@x,16]", host[:4])
            with pytest.raises(ShardingTypeError, match="slicing on sharded dims where out dim "
                                                        r"\(15\) is not divisible"):
                run(a, (3, 5))       # as JAX's: a cut that leaves uneven blocks


def test_iterating_a_split_array_gives_its_rows_on_one_device():
    mesh = jax.make_mesh((2, 4), ("x", "y"))
    data = np.arange(32.0, dtype=np.float32).reshape(2, 16)
    with jax.set_mesh(mesh):
        for spec in (P("x", "y"), P(None, "y")):
            first, second = jax.device_put(data, spec)
            assert str(jax.typeof(first)) == "float32[16]"
            assert type(first.sharding).__name__ == "SingleDeviceSharding"
            np.testing.assert_array_equal(np.asarray(second), data[1])
        # an array on every device alike is indexed as usual (its rows keep the mesh)
        row, _ = jnp.arange(6.0).reshape(2, 3)
        assert type(row.sharding).__name__ == "NamedSharding"


def _numpy_pad(x, value, config):
    """lax.pad's meaning: interior padding, then low and high (negative ones trim)."""
    for d, (lo, hi, interior) in enumerate(config):
        n = x.shape[d]
        spread = np.full(x.shape[:d] + (max(0, n + (n - 1) * interior),) + x.shape[d + 1:],
                         value, x.dtype)
        index = [slice(None)] * x.ndim
        index[d] = slice(None, None, interior + 1)
        spread[tuple(index)] = x
        widths = [(0, 0)] * x.ndim
        widths[d] = (max(lo, 0), max(hi, 0))
        spread = np.pad(spread, widths, constant_values=value)
        index[d] = slice(max(-lo, 0), spread.shape[d] - max(-hi, 0))
        x = spread[tuple(index)]
    return x


def test_pad_with_trims_keeps_a_split_that_divides_and_differentiates():
    data = np.arange(128.0, dtype=np.float32).reshape(8, 16)
    config = ((-2, 3, 1), (2, -5, 0))
    np.testing.assert_array_equal(np.asarray(lax.pad(data, -1.0, config)),
                                  _numpy_pad(data, -1.0, config))
    grad = jax.grad(lambda x: lax.pad(x, 0.0, config).sum())(data)
    # rows 0 and part of the columns were trimmed: their cotangent is 0, the rest 1
    expected = np.ones_like(data)
    expected[0, :] = 0
    expected[:, 11:] = 0
    np.testing.assert_array_equal(np.asarray(grad), expected)
    mesh = jax.make_mesh((2, 4), ("x", "y"))
    with jax.set_mesh(mesh):
        x = jax.device_put(data, P("x", "y"))
        for config, want_type in [(((1, -1, 0), (0, 0, 0)), "float32[8@x,16@y]"),
                                  (((-2, 0, 0), (0, 0, 0)), "float32[6@x,16@y]"),
                                  (((0, 0, 0), (-4, 0, 0)), "float32[8@x,12@y]")]:
            for run in (lambda v: lax.pad(v, 0.0, config),
                        jax.jit(lambda v: lax.pad(v, 0.0, config))):
                got = run(x)
                assert str(jax.typeof(got)) == want_type
                np.testing.assert_array_equal(np.asarray(got),
                                              np.asarray(lax.pad(data, 0.0, config)))


def test_host_data_made_an_array_under_an_explicit_mesh_is_on_it_replicated():
    mesh = jax.make_mesh((2, 4), ("x", "y"))
    with jax.set_mesh(mesh):
        for value in (jnp.array(np.ones((8, 4), np.float32)), jnp.asarray(np.ones(3)),
                      jnp.float32(2.0), jnp.array([1, 2]), jnp.asarray(3.0)):
            assert value.sharding == NamedSharding(mesh, P())
        assert str(jax.typeof(jnp.asarray(3.0))) == "~float32[]"
        total = jnp.array(np.ones((8, 4), np.float32)) + jax.device_put(np.ones((8, 4)), P("x"))
        assert str(jax.typeof(total)) == "float32[8@x,4]"
    assert type(jnp.array([1, 2]).sharding).__name__ == "SingleDeviceSharding"


def test_vmap_of_per_member_indexing_over_a_split_batch():
    """``vmap(lambda row, i: row[i])`` over rows and indices both split along the batch (a
    cross-entropy's pick of each example's label): types and values as JAX's."""
    mesh = jax.make_mesh((4, 2), ("x", "y"))
    rows = np.arange(32.0, dtype=np.float32).reshape(8, 4)
    picks = (np.arange(8) * 3 % 4).astype(np.int32)
    with jax.set_mesh(mesh):
        x, k = jax.device_put(rows, P("x")), jax.device_put(picks, P("x"))
        pick = jax.vmap(lambda r, i: r[i])
        for run in (pick, jax.jit(pick)):
            got = run(x, k)
            assert str(jax.typeof(got)) == "float32[8@x]"
            np.testing.assert_array_equal(np.asarray(got), rows[np.arange(8), picks])
        cleared = jax.vmap(lambda r, i: r.at[i].set(0.0))(x, k)
        assert str(jax.typeof(cleared)) == "float32[8@x,4]"
        want = rows.copy()
        want[np.arange(8), picks] = 0
        np.testing.assert_array_equal(np.asarray(cleared), want)
        window = jax.vmap(lambda r, i: lax.dynamic_slice_in_dim(r, i, 1))(x, k)
        assert str(jax.typeof(window)) == "float32[8@x,1]"
        grad = jax.grad(lambda a: pick(a, k).sum())(x)
        assert str(jax.typeof(grad)) == "float32[8@x,4]"
        np.testing.assert_array_equal(np.asarray(grad), (want == 0).astype(np.float32))


@pytest.mark.parametrize("update", [
    lambda x, i, y: x.at[i].set(y), lambda x, i, y: x.at[i].add(y),
    lambda x, i, y: x.at[i].max(y),
    lambda x, i, y: lax.dynamic_update_slice_in_dim(x, y[None], i, axis=0)])
def test_vmap_of_per_member_updates_keeps_the_operands_split(update):
    """JAX's scatter sharding test: vmap of an update at each member's own index, the
    operand split on the batch and on another axis, the update on the batch only: the result
    (and its gradient) are laid out as the operand, the update's gradient as the update;
    values as numpy's."""
    mesh = jax.make_mesh((2, 2), ("x", "y"))
    base = np.zeros((2, 10, 8), np.float32)
    ups = np.arange(16.0, dtype=np.float32).reshape(2, 8)
    at = np.array([2, 3], np.int32)
    with jax.set_mesh(mesh):
        operand = jax.device_put(base, P("x", None, "y"))
        indices = jax.device_put(at, P("x"))
        updates = jax.device_put(ups, P("x", "y"))
        f = jax.jit(jax.vmap(update))
        out = f(operand, indices, updates)
        assert out.sharding.spec == P("x", None, "y")
        want = base.copy()
        want[np.arange(2), at] = ups        # zeros in, so set, add and max agree
        np.testing.assert_array_equal(np.asarray(out), want)
        g_op, g_up = jax.grad(lambda *a: (f(*a) ** 2).sum(), argnums=(0, 2))(
            operand, indices, updates)
        assert g_op.sharding.spec == P("x", None, "y") and g_up.sharding.spec == P("x", "y")
        np.testing.assert_array_equal(np.asarray(g_up), 2 * ups)


def test_the_deprecated_mesh_context_gives_constraints_their_mesh():
    """``with mesh:`` (JAX's deprecated context, warned about) lets with_sharding_constraint
    take a bare PartitionSpec on that mesh, as JAX's does."""
    import warnings
    from shardc.sharding import AxisType
    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
    with pytest.warns(DeprecationWarning, match="set_mesh"):
        with mesh:
            f = jax.jit(lambda v: jax.lax.with_sharding_constraint(v, P("x")))
            out = f(np.arange(8.0))
    assert out.sharding == NamedSharding(mesh, P("x"))
    np.testing.assert_array_equal(out, np.arange(8.0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError, match="requires a non-empty mesh"):
            jax.jit(lambda v: jax.lax.with_sharding_constraint(v, P("x")))(np.ones(8))


def test_constraint_to_one_device_commits_eagerly_and_none_is_refused():
    """with_sharding_constraint to a SingleDeviceSharding is JAX's jitted identity with that
    out_shardings: a committed copy there; None is JAX's ValueError; under vmap with
    spmd_axis_name JAX refuses a constraint that is not a NamedSharding."""
    from shardc.sharding import AxisType, SingleDeviceSharding
    d = jax.devices()
    x = jnp.arange(10)
    for device in (d[0], d[1]):
        out = jax.lax.with_sharding_constraint(x, SingleDeviceSharding(device))
        assert out.committed and out.sharding == SingleDeviceSharding(device)
        np.testing.assert_array_equal(out, np.arange(10))
    kept = jax.jit(lambda v: v, out_shardings=SingleDeviceSharding(d[0]))(x)
    assert kept.committed and not x.committed        # JAX commits a result asked for
    mesh = jax.make_mesh((2,), ("x",), axis_types=(AxisType.Auto,))
    split = jax.device_put(np.arange(4.0), NamedSharding(mesh, P("x")))
    with pytest.raises(ValueError, match="Received incompatible devices for jitted "
                                         "computation"):
        jax.lax.with_sharding_constraint(split, SingleDeviceSharding(d[0]))
    none = ("One of with_sharding_constraint arguments got sharding None which is not "
            "allowed. Please only pass `jax.sharding.Sharding` instances.")
    with pytest.raises(ValueError, match=re.escape(none)):
        jax.lax.with_sharding_constraint(x, None)
    with pytest.raises(ValueError, match=re.escape(none)):
        jax.lax.with_sharding_constraint((x, x), (SingleDeviceSharding(d[0]), None))
    with pytest.raises(ValueError, match="If you are using spmd_axis_name parameter of "
                                         "jax.vmap.*SingleDeviceSharding"):
        jax.jit(jax.vmap(lambda v: jax.lax.with_sharding_constraint(
            v, SingleDeviceSharding(d[0])), spmd_axis_name="x"))(np.ones((2, 3)))
    with pytest.raises(NotImplementedError, match="under a transformation"):
        jax.jit(lambda v: jax.lax.with_sharding_constraint(v, SingleDeviceSharding(d[1])))(x)
    # to the default device, where a program on no mesh runs: nothing to do, under jit too
    twice = jax.jit(lambda v: jax.lax.with_sharding_constraint(v * 2, SingleDeviceSharding(d[0])))
    np.testing.assert_array_equal(twice(x), 2 * np.arange(10))
    assert twice(x).sharding == SingleDeviceSharding(d[0])


def test_constraint_on_an_abstract_mesh_applied_eagerly():
    """JAX's eager with_sharding_constraint to a sharding on an AbstractMesh: an array on a
    mesh of the same names and sizes takes that mesh's devices; a host value needs a mesh
    set; anything else is JAX's error (it gave an array laid out on no devices)."""
    from shardc.sharding import AxisType
    mesh = jax.make_mesh((2,), ("x",), axis_types=(AxisType.Auto,))
    target = NamedSharding(mesh.abstract_mesh, P("x"))
    arr = jax.device_put(np.arange(8), NamedSharding(mesh, P()))
    out = jax.lax.with_sharding_constraint(arr, target)
    assert out.sharding == NamedSharding(mesh, P("x"))
    np.testing.assert_array_equal(out, np.arange(8))
    with pytest.raises(ValueError, match=re.escape(
            "Target sharding contains a `jax.sharding.AbstractMesh` which requires the input "
            "passed should be a `jax.Array`. Got <class 'numpy.ndarray'> with shape int32[8]")):
        jax.lax.with_sharding_constraint(np.arange(8), target)
    with pytest.raises(TypeError, match="The sharding on the input must be a `NamedSharding` "
                                        "since the target sharding has an `AbstractMesh`"):
        jax.lax.with_sharding_constraint(jnp.arange(8), target)
    other = jax.make_mesh((2,), ("y",), axis_types=(AxisType.Auto,)).abstract_mesh
    with pytest.raises(ValueError, match=re.escape(
            "Mesh shape of the input (('x', 2),) does not match the mesh shape of the target "
            "sharding (('y', 2),) for shape int32[8]")):
        jax.lax.with_sharding_constraint(arr, NamedSharding(other, P("y")))
    with jax.set_mesh(mesh):
        placed = jax.lax.with_sharding_constraint(np.arange(8), target)
    assert placed.sharding == NamedSharding(mesh, P("x"))


def test_auto_and_explicit_axes_refuse_axes_a_body_is_manual_over():
    mesh = jax.make_mesh((2, 2), ("x", "y"))
    auto = lambda v: jax.sharding.auto_axes(lambda a: a * 2, out_sharding=P("y"))(v)
    only_y = lambda v: jax.sharding.auto_axes(lambda a: a * 2, axes="y",
                                              out_sharding=P(None, "y"))(v)
    explicit = lambda v: jax.sharding.explicit_axes(lambda a: a * 2, axes=("x",),
                                                    in_sharding=P("x"))(v)
    data = np.arange(16).reshape(8, 2)
    with jax.set_mesh(mesh):
        for body in (auto, explicit):
            with pytest.raises(NotImplementedError, match="Going from `Manual` AxisType to "
                                                          "`Auto` or `Explicit` AxisType is "
                                                          "not allowed"):
                jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                                      axis_names={"x"}))(data)
        out = jax.jit(jax.shard_map(only_y, mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                                    axis_names={"x"}))(data)
        # an operation's own out_sharding there takes only the Explicit axes (JAX's)
        rep = lambda v: jnp.repeat(v, 2, axis=1, out_sharding=P(None, "y"))
        split = jax.device_put(data.astype(np.float32), P("x", "y"))
        repeated = jax.jit(jax.shard_map(rep, out_specs=P("x"), axis_names={"x"}))(split)
    np.testing.assert_array_equal(out, data * 2)
    np.testing.assert_array_equal(repeated, np.repeat(data, 2, axis=1))
    assert repeated.sharding == NamedSharding(mesh, P("x", "y"))


def test_values_are_never_laid_out_on_an_abstract_mesh():
    """An AbstractMesh names no devices: device_put onto one is JAX's ValueError (it made an
    array laid out on no devices), and a *_like of a ShapeDtypeStruct split on one is made on
    the mesh set of the same names and sizes, as JAX's, else JAX's ValueError."""
    mesh = jax.make_mesh((2,), ("x",))
    abstract = NamedSharding(mesh.abstract_mesh, P("x"))
    message = "is_fully_addressable is not implemented for `jax.sharding.AbstractMesh`."
    with pytest.raises(ValueError, match=re.escape(message)):
        jax.device_put(np.arange(8.0), abstract)
    with jax.set_mesh(mesh), pytest.raises(ValueError, match=re.escape(message)):
        jax.device_put(jnp.arange(8.0), abstract)
    stand_in = jax.ShapeDtypeStruct((32,), jnp.float32, sharding=abstract)
    with jax.set_mesh(mesh):
        for made, value in ((jnp.zeros_like(stand_in), 0.0), (jnp.ones_like(stand_in), 1.0),
                            (jnp.full_like(stand_in, 2.0), 2.0)):
            assert made.sharding == NamedSharding(mesh, P("x"))
            np.testing.assert_array_equal(made, np.full(32, value, np.float32))
    with pytest.raises(ValueError, match="Please enter your `jit` into a mesh context via "
                                         "`jax.set_mesh`"):
        jnp.zeros_like(stand_in)
    # on Auto axes a stand-in's layout on an abstract mesh is no concrete one: JAX makes the
    # result on the default device
    auto = jax.sharding.AbstractMesh((2,), ("x",))
    loose = jax.ShapeDtypeStruct((8, 2), np.float32, sharding=NamedSharding(auto, P("x")))
    for made in (lax.full_like(loose, 0), jnp.zeros_like(loose)):
        assert made.sharding == jax.sharding.SingleDeviceSharding(jax.devices()[0])


ABSTRACT_OUT_SHARDING = {
    "zeros": lambda p, s: jnp.zeros(p.shape, out_sharding=s),
    "zeros + p": lambda p, s: p + jnp.zeros(p.shape, out_sharding=s),
    "normal + p": lambda p, s: p + jax.random.normal(jax.random.key(3), p.shape,
                                                     out_sharding=s) * 0,
    "einsum": lambda p, s: jnp.einsum("ij,jk->ik", p, p, out_sharding=s),
    "reshard": lambda p, s: jax.sharding.reshard(p.T, s),
    "device": lambda p, s: p - jnp.full(p.shape, 1.0, device=s),
}


@pytest.mark.parametrize("name", sorted(ABSTRACT_OUT_SHARDING))
def test_a_typed_sharding_on_the_abstract_mesh_lays_out_on_the_concrete_one(name):
    """``jax.typeof(x).sharding`` is a NamedSharding on an abstract mesh: as an out_sharding,
    a ``device=`` or a reshard's target, it means the mesh set (or, under jit, that of the
    arguments) of those names and sizes, as in JAX. It used to fail on mixed meshes."""
    mesh = jax.make_mesh((2, 4), ("x", "y"))
    host = np.arange(64, dtype=np.float32).reshape(8, 8)
    call = ABSTRACT_OUT_SHARDING[name]
    want = np.asarray(call(host, None)) if name != "reshard" else None
    expect = {"zeros": np.zeros((8, 8)), "zeros + p": host, "normal + p": host,
              "einsum": host @ host, "reshard": host.T, "device": host - 1}[name]
    if want is not None:
        np.testing.assert_allclose(want, expect, rtol=1e-6)

    def run(p):
        return call(p, jax.typeof(p).sharding)

    with jax.set_mesh(mesh):
        p = jax.device_put(host, P("x", "y"))
        results = [jax.jit(run)(p), run(p)]
    results.append(jax.jit(run)(jax.device_put(host, NamedSharding(mesh, P("x", "y")))))
    for out in results:
        assert str(jax.typeof(out)) == "float32[8@x,8@y]"
        assert out.sharding == NamedSharding(mesh, P("x", "y"))
        np.testing.assert_allclose(np.asarray(out), expect, rtol=1e-6)


def test_a_mesh_decorates_a_function_as_its_deprecated_context():
    """A Mesh is JAX's ContextDecorator: ``@mesh`` runs the function inside ``with mesh:``."""
    from shardc.sharding import AxisType
    mesh = jax.make_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)

    @mesh
    def run(v):
        return jax.jit(lambda a: jax.lax.with_sharding_constraint(a * 2, P("x")))(v)

    with pytest.warns(DeprecationWarning, match="set_mesh"):
        out = run(np.arange(8.0))
    assert out.sharding == NamedSharding(mesh, P("x"))
    np.testing.assert_array_equal(out, np.arange(8.0) * 2)
    with pytest.warns(DeprecationWarning):
        run(np.arange(4.0))          # a second call enters the context again


def test_like_constructors_under_jit_on_an_auto_mesh():
    """zeros_like/ones_like/full_like of a traced array laid out on an Auto mesh: the layout
    is propagation's (it raised, placing a traced value as an eager one)."""
    from shardc.sharding import AxisType
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    a = jax.device_put(np.ones((8, 8), np.float32), NamedSharding(mesh, P("x", "y")))
    np.testing.assert_array_equal(jax.jit(lambda v: jnp.zeros_like(v))(a), np.zeros((8, 8)))
    np.testing.assert_array_equal(jax.jit(lambda v: jnp.ones_like(v) + v)(a), 2 * np.ones((8, 8)))
    np.testing.assert_array_equal(jax.jit(lambda v: jnp.full_like(v, 3.0))(a), 3 * np.ones((8, 8)))
    # an array placed inside a trace (concrete there), on an Explicit mesh, replicated
    with jax.set_mesh(jax.make_mesh((8,), ("x",))):
        @jax.jit
        def f():
            placed = jax.device_put(np.ones((8, 4), np.float32), P())
            return jnp.zeros_like(placed), jnp.ones_like(placed) + placed
        zeros, twos = f()
    assert str(jax.typeof(zeros)) == str(jax.typeof(twos)) == "float32[8,4]"
    np.testing.assert_array_equal(np.asarray(twos), 2 * np.ones((8, 4)))


def test_set_mesh_takes_none_and_refuses_manual_axes_and_non_meshes():
    """JAX's set_mesh: None means no mesh inside the block (the previous one comes back
    after); a mesh with Manual axes, or something not a Mesh, is its ValueError."""
    from shardc.sharding import AxisType, Mesh
    mesh = jax.make_mesh((8,), ("x",))
    with jax.set_mesh(mesh):
        with jax.set_mesh(None):
            assert jax.sharding.get_abstract_mesh().empty
        assert jax.sharding.get_abstract_mesh().axis_names == ("x",)
        # the empty mesh too: a shard's data and a numpy value add on the shard's device
        split = jax.device_put(np.arange(16.0, dtype=np.float32), P("x"))
        with jax.set_mesh(Mesh(np.empty((), dtype=object), ())):   # JAX's empty mesh
            assert jax.sharding.get_mesh().empty
            total = jax.lax.add(split.addressable_shards[1].data, np.arange(2.0, dtype=np.float32))
        assert total.sharding == jax.sharding.SingleDeviceSharding(jax.devices()[1])
        np.testing.assert_array_equal(np.asarray(total), [2.0, 4.0])
        assert jax.sharding.get_abstract_mesh().axis_names == ("x",)
        with pytest.raises(ValueError, match=re.escape(
                "mesh Mesh('x': 8, axis_types=(Manual,)) contains manual axes which is not "
                "allowed when using `jax.set_mesh`. Please use `jax.shard_map` to enter into "
                "`Manual` mode instead.")):
            jax.set_mesh(Mesh(jax.devices(), "x", (AxisType.Manual,)))
        with pytest.raises(ValueError, match="Expected mesh of type `jax.sharding.Mesh`. "
                                             "Got <class 'str'>"):
            jax.set_mesh("mesh")
        assert jax.sharding.get_abstract_mesh().axis_names == ("x",)


def test_vmap_spmd_axis_name_must_repeat_the_explicit_split_of_the_batch():
    """JAX's vmap: a batch split over Explicit axes may be given the same axes as
    spmd_axis_name (nothing changes); other axes are its ValueError."""
    mesh = jax.make_mesh((2, 2), ("x", "y"))
    values = np.arange(16).reshape(8, 2)
    with jax.set_mesh(mesh):
        arr = jax.device_put(values, P("x", "y"))
        same = jax.jit(jax.vmap(lambda v: v * 2, spmd_axis_name="x"))(arr)
        assert same.sharding == NamedSharding(mesh, P("x", "y"))
        np.testing.assert_array_equal(same, values * 2)
        with pytest.raises(ValueError, match=re.escape(
                "Only one of spmd_axis_name or arrays sharded on `Explicit` mesh axis type is "
                "allowed. Got spmd_axis_name=('y',) and arrays sharded on "
                "explicit_mesh_axis=('x',)")):
            jax.jit(jax.vmap(lambda v: v * 2, spmd_axis_name="y"))(arr)


def test_an_update_split_where_the_updated_part_is_not_is_jaxs_error():
    """JAX broadcasts an ``.at[...]`` update (and segment_sum's data) to the type of the part
    it updates first: an update split over an axis that part's type does not split there is
    its ValueError, naming both types (each as JAX 0.10.2 prints it); one split alike runs."""
    mesh = jax.make_mesh((2, 4), ("x", "y"))
    with jax.set_mesh(mesh):
        d = jax.device_put(np.arange(8.0, dtype=np.float32), P("x"))
        rows = jax.device_put(np.arange(32.0, dtype=np.float32).reshape(4, 8), P("x", "y"))
        target = jax.device_put(np.zeros((5, 8), np.float32), P(None, "y"))
        cases = [
            (lambda: jax.ops.segment_sum(d, np.array([0, 1, 2, 0, 1, 2, 0, 1]), 3),
             "float32[8@x]", "float32[8]"),
            (lambda: jnp.zeros(8).at[np.arange(8)].add(d), "float32[8@x]", "float32[8]"),
            (lambda: jnp.zeros(8).at[:].set(d), "float32[8@x]", "float32[8]"),
            (lambda: target.at[np.arange(4)].set(rows), "float32[4@x,8@y]", "float32[4,8@y]"),
            (lambda: jnp.zeros((4, 8)).at[np.array([0, 1])].add(
                jax.device_put(np.ones(8, np.float32), P("y"))), "float32[8@y]", "float32[2,8]"),
            # x split too: the update's type is checked first, as JAX does
            (lambda: rows.at[0].set(d), "float32[8@x]", "float32[8@y]"),
            (lambda: rows.at[:, 0].set(jax.device_put(np.ones(4, np.float32), P("y"))),
             "float32[4@y]", "float32[4@x]"),
        ]
        for run, given, wanted in cases:
            with pytest.raises(ValueError, match=re.escape(
                    f"Incompatible types for broadcasting: input type={given} and requested "
                    f"type={wanted}")):
                run()
        # a static slice keeps the split in the updated part's type: the update agrees, and
        # the scatter's own rule refuses a part of a split dimension (JAX's)
        with pytest.raises(ShardingTypeError, match="out_sharding"):
            rows.at[0:2].set(jax.device_put(np.ones((2, 8), np.float32), P("x", "y")))
        alike = target.at[np.arange(4)].set(jax.device_put(np.ones((4, 8), np.float32),
                                                           P(None, "y")))
        assert alike.sharding.spec == P(None, "y")
        np.testing.assert_array_equal(np.asarray(alike)[:4], np.ones((4, 8)))

def test_vmap_of_a_shard_map_leaves_it_the_axes_its_batch_is_not_split_over():
    """A vmap whose batch is split over Explicit axis 'x' holds 'x': a shard_map inside is
    manual over the other axes, and one whose axis_names name 'x' is JAX's ValueError."""
    mesh = jax.make_mesh((2, 2), ("x", "y"))
    values = np.arange(16).reshape(4, 4)
    arr = jax.device_put(values, NamedSharding(mesh, P("x", "y")))
    f = jax.shard_map(lambda b: b * 2 + jax.lax.axis_index("y"), mesh=mesh, in_specs=P("y"),
                      out_specs=P("y"))
    for run in (jax.vmap(f), jax.jit(jax.vmap(f))):
        out = run(arr)
        np.testing.assert_array_equal(out, values * 2 + np.repeat([0, 1], 2))
        assert out.sharding.spec == P("x", "y")
    both = jax.shard_map(lambda b: b, mesh=mesh, in_specs=P("y"), out_specs=P("y"),
                         axis_names={"x", "y"})
    for run in (jax.vmap(both), jax.jit(jax.vmap(both))):
        with pytest.raises(ValueError, match=r"jax.shard_map requires axis_names=frozenset\("
                                             r".*\) to be a subset of "
                                             r"mesh.axis_names=frozenset\(\{'y'\}\)"):
            run(arr)


def test_at_divide_and_power_and_percentile_take_out_sharding():
    """JAX's ``.at[...].divide/power(..., out_sharding=)`` and ``jnp.percentile(...,
    out_sharding=)``: the result laid out as asked, values as numpy's."""
    mesh = jax.make_mesh((2, 2), ("x", "y"))
    base = np.arange(1.0, 65.0, dtype=np.float32).reshape(8, 8)
    at, vals = np.array([0, 2, 4], np.int32), np.array([10.0, 2.0, 0.5], np.float32)
    with jax.set_mesh(mesh):
        params = jax.device_put(base, P("x", None))
        for name, combine in (("divide", np.divide), ("power", np.power)):
            f = jax.jit(lambda p, i, v: getattr(p.at[i, 0], name)(v, out_sharding=P("x", None)))
            out = f(params, jax.device_put(at, P(None)), vals)
            assert out.sharding.spec == P("x", None)
            want = base.copy()
            want[at, 0] = combine(want[at, 0], vals)
            np.testing.assert_allclose(out, want, rtol=1e-6)
        data = np.arange(100.0, dtype=np.float32)
        med = jax.jit(lambda x: jnp.percentile(x, 50, axis=0, out_sharding=P()))(
            jax.device_put(data, P("x")))
        assert med.sharding == NamedSharding(mesh, P())
        np.testing.assert_allclose(med, np.percentile(data, 50), rtol=1e-6)


def test_grad_of_a_scan_keeps_its_residuals_split_on_an_explicit_mesh():
    # JAX's pjit_test test_scan: the relu mask a scan body saves is split as the body made
    # it; its transpose read it unsplit and refused the select
    mesh = jax.make_mesh((2, 2), ("x", "y"))
    carry0 = np.arange(16.).reshape(2, 8) / 16
    xs0 = np.arange(128.).reshape(8, 8, 2) / 128
    carry = jax.device_put(carry0, NamedSharding(mesh, P(None, "x")))
    xs = jax.device_put(xs0, NamedSharding(mesh, P(None, "x", "y")))

    def loss(c, xs, explicit=True):
        def body(c, x):
            y = (jnp.einsum("xy,yz->xz", c, x, out_sharding=P(None, "y")) if explicit
                 else c @ x)
            z = jax.nn.relu(y)
            a = (jnp.einsum("xy,yz->xz", z, x.T, out_sharding=P(None, "x")) if explicit
                 else z @ x.T)
            return a, y
        return jnp.sum(jax.lax.scan(body, c, xs)[0])

    with jax.set_mesh(mesh):
        g = jax.jit(jax.grad(loss, argnums=(0, 1)))(carry, xs)
    want = jax.grad(lambda c, x: loss(c, x, explicit=False), argnums=(0, 1))(carry0, xs0)
    assert g[0].sharding.spec == P(None, "x") and g[1].sharding.spec == P(None, "x", "y")
    for got, expected in zip(g, want):
        np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-5)


def test_vmap_of_a_scan_keeps_its_carrys_split_past_the_batch_axis():
    # a batched carry is typed as the carry was, its batch axis in front: the (unsplit)
    # batch of a carry split over x stays split over x, so the loop's dot_general and its
    # transpose see the blocks their operands have (they saw whole carries, and failed)
    mesh = jax.make_mesh((2,), ("x",), axis_types=(jax.sharding.AxisType.Explicit,))
    xs = np.arange(4 * 8 * 16, dtype=np.float32).reshape(4, 8, 16) % 7 / 8
    ws = np.arange(2 * 16 * 16, dtype=np.float32).reshape(2, 16, 16) % 5 / 16

    def loss(w, x):
        return jnp.sum(jax.lax.scan(lambda c, p: (c @ p, None), x, w)[0])

    with jax.set_mesh(mesh):
        x = jax.device_put(xs, P(None, "x"))
        total, grad = jax.jit(jax.vmap(jax.value_and_grad(loss), in_axes=(None, 0)))(ws, x)
    first = xs @ ws[0]                                  # per member: c1 = x w0, c2 = c1 w1
    ones = np.ones((4, 8, 16), np.float32)
    np.testing.assert_allclose(np.asarray(total), (first @ ws[1]).sum(axis=(1, 2)),
                               rtol=1e-5)
    want = np.stack([np.swapaxes(xs, 1, 2) @ (ones @ ws[1].T),
                     np.swapaxes(first, 1, 2) @ ones], axis=1)
    np.testing.assert_allclose(np.asarray(grad), want, rtol=1e-5)
    assert str(jax.typeof(total)) == "float32[4]"
    assert str(jax.typeof(grad)) == "float32[4,2,16,16]"


def test_vmap_of_a_scatter_into_an_unbatched_operand_under_a_split_batch():
    # batched indices over a batch split along x, an unbatched operand (a gather's transpose:
    # zeros) or unbatched updates: broadcast to the batch they take its split, which the
    # members laid end to end must lose before the scatter
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Explicit,) * 2)
    table = np.arange(32 * 256, dtype=np.float32).reshape(32, 256) / 100
    index = (np.arange(32 * 16, dtype=np.int32).reshape(32, 16) * 7) % 256 - 40
    picked = lambda t, i: jnp.mean(jnp.sin(t.at[i].get(out_sharding=P("y"))))
    with jax.set_mesh(mesh):
        t, i = jax.device_put(table, P("x", None)), jax.device_put(index, P("x", None))
        value, grad = jax.jit(jax.vmap(jax.value_and_grad(picked)))(t, i)
        added = jax.jit(jax.vmap(lambda i: jnp.zeros(256).at[i].add(2.0)))(i)
    rows = np.arange(32)[:, None]
    np.testing.assert_allclose(np.asarray(value), np.sin(table[rows, index]).mean(1),
                               rtol=1e-5)
    want = np.zeros_like(table)
    np.add.at(want, (np.broadcast_to(rows, index.shape), index % 256),
              np.cos(table[rows, index]) / 16)
    np.testing.assert_allclose(np.asarray(grad), want, rtol=1e-5, atol=1e-7)
    want = np.zeros((32, 256), np.float32)
    np.add.at(want, (np.broadcast_to(rows, index.shape), index % 256), 2.0)
    np.testing.assert_array_equal(np.asarray(added), want)
    assert (str(jax.typeof(value)), str(jax.typeof(grad)), str(jax.typeof(added))) == (
        "float32[32@x]", "float32[32@x,256]", "float32[32@x,256]")


def test_vmap_of_a_split_batch_keeps_its_split_in_an_out_sharding_a_rule_asks_for():
    # JAX's pjit test_dot_general_vmap: the batch dimension an out_sharding gains under vmap
    # is split as the batch is (JAX's explicit_mesh_axis), not left unsplit
    mesh = jax.make_mesh((2, 2), ("x", "y"))
    a = np.arange(16.).reshape(4, 2, 2)
    b = np.arange(16.).reshape(2, 4, 2)
    arr1 = jax.device_put(a, NamedSharding(mesh, P("x", None, "y")))
    arr2 = jax.device_put(b, NamedSharding(mesh, P(None, "x", "y")))
    f = lambda x, y: jnp.einsum("xy,yz->xz", x, y, out_sharding=P(None, "y"))
    want = np.einsum("bxy,ybz->bxz", a, b)
    for g, out_axes, spec in ((f, 2, P(None, "y", "x")), (f, 0, P("x", None, "y")),
                              (jax.jit(f), 2, P(None, "y", "x"))):
        with jax.set_mesh(mesh):
            out = jax.vmap(g, in_axes=(0, 1), out_axes=out_axes)(arr1, arr2)
        assert out.sharding.spec == spec
        np.testing.assert_allclose(np.asarray(out), np.moveaxis(want, 0, out_axes))


def test_a_jitted_shard_maps_results_are_spelt_as_their_types_at_every_call():
    # out_specs=P() is the type's P(None, None): each call's result says so, a reshard's not
    mesh = jax.make_mesh((4, 2), ("X", "Y"))
    xs = jax.device_put(np.arange(32, dtype=np.float32).reshape(8, 4),
                        NamedSharding(mesh, P("X", "Y")))
    summed = jax.jit(jax.shard_map(lambda b: lax.psum(b, ("X", "Y")), mesh=mesh,
                                   in_specs=P("X", "Y"), out_specs=P()))
    gathered = jax.jit(lambda a: jax.sharding.reshard(a * 2, NamedSharding(mesh, P())))
    blocks = np.arange(32, dtype=np.float32).reshape(4, 2, 2, 2)   # (X block, row, Y block, col)
    for _ in range(3):
        out = summed(xs)
        assert out.sharding.spec == P(None, None) and out.shape == (2, 2)
        np.testing.assert_array_equal(np.asarray(out), blocks.sum((0, 2)))
        again = gathered(xs)
        assert again.sharding.spec == P(None, None)
        np.testing.assert_array_equal(np.asarray(again), np.arange(32).reshape(8, 4) * 2)


def test_concatenate_and_select_take_the_split_of_the_operands_split_over_some_axis():
    # JAX passes over operands made outside any mesh (here: no mesh set; constants in a
    # jitted function); two different splits still conflict
    mesh24 = mesh_of((2, 4), ("x", "y"))
    b = jax.device_put(jnp.arange(32.0).reshape(8, 4), NamedSharding(mesh24, P("x")))
    o = jnp.ones((8, 4))
    cat = jnp.concatenate([b, o], axis=1)
    assert str(jax.typeof(cat)) == "float32[8@x,8]"
    np.testing.assert_array_equal(cat, np.concatenate([np.arange(32.0).reshape(8, 4),
                                                       np.ones((8, 4))], axis=1))
    picked = jnp.where(b > 3, b, o)
    assert str(jax.typeof(picked)) == "float32[8@x,4]"
    np.testing.assert_array_equal(picked, np.where(np.arange(32.0).reshape(8, 4) > 3,
                                                   np.arange(32.0).reshape(8, 4), 1.0))
    stacked = jax.jit(lambda v: jnp.array([v, jnp.ones(8)]))(b[:, 0])
    assert str(jax.typeof(stacked)) == "float32[2,8@x]"
    with pytest.raises(ShardingTypeError, match="All operands should have the same sharding"):
        jnp.concatenate([b, jax.device_put(jnp.ones((8, 4)), NamedSharding(mesh24, P("y")))])


def test_array_of_a_list_of_split_arrays_keeps_their_split():
    # as JAX's: arrays among a list's values are stacked where they are, not fetched
    mesh = mesh_of((4, 2), ("x", "y"))
    b = jax.device_put(jnp.arange(8.0), NamedSharding(mesh, P("x")))
    for value, text in (([b, b * 2], "float32[2,8@x]"), ([[b], [b]], "float32[2,1,8@x]"),
                        ([b, np.ones(8, np.float32)], "float32[2,8@x]")):
        got = jnp.array(value)
        assert str(jax.typeof(got)) == text
        np.testing.assert_array_equal(got, np.array([np.asarray(v) for v in value]))
    assert jnp.array([b, b], dtype=jnp.int32).dtype == np.int32
    assert jnp.array([jnp.int8(3), 2]).dtype == np.int8       # a Python number is weak


def mixed_mesh():
    """A 2x4 mesh whose 'x' is Explicit and whose 'y' is Auto."""
    return jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Explicit,
                                                         jax.sharding.AxisType.Auto))


def test_mixed_mesh_eager_slice_keeps_the_explicit_split():
    """A partial slice of a dimension split over an Auto axis, eagerly, leaves that dimension
    unsplit and keeps the Explicit split of the other, as JAX 0.10.2's gather does."""
    with jax.set_mesh(mixed_mesh()):
        host, m = placed((8, 16), ("x", "y"))
        check_result(m[:, 1:], "float32[8@x,15]", host[:, 1:])
        assert m[:, 1:].sharding.spec == P("x", None)
        assert m[:, :8].sharding.spec == P("x", None)


def test_mixed_mesh_results_keep_the_auto_split_of_their_operands():
    """On a mesh with Explicit and Auto axes a result's type fixes its Explicit split only;
    the Auto split of its operands carries into the dimensions its type leaves unsplit, as
    JAX 0.10.2 lowers a reshard (those dimensions are open to propagation). A dynamic slice
    at start indices that are values drops the split of the dimensions it reads partially."""
    with jax.set_mesh(mixed_mesh()):
        host, m = placed((8, 16), ("x", "y"))
        rows = [
            (lambda: jax.sharding.reshard(m, P()), "float32[8,16]", P(None, "y"), host),
            (lambda: jax.jit(lambda t: jax.sharding.reshard(t, P(None, None)))(m),
             "float32[8,16]", P(None, "y"), host),
            (lambda: jax.sharding.reshard(m, P("x")), "float32[8@x,16]", P("x", "y"), host),
            (lambda: jax.sharding.auto_axes(lambda t: t * 2, axes="x", out_sharding=P("x"))(m),
             "float32[8@x,16]", P("x", "y"), host * 2),
            (lambda: jax.jit(jax.sharding.auto_axes(lambda t: t.sum(0), axes="x",
                                                    out_sharding=P(None)))(m),
             "float32[16]", P("y"), host.sum(0)),
            (lambda: m.at[0].get(out_sharding=P(None)), "float32[16]", P("y"), host[0]),
            (lambda: lax.dynamic_slice(m, (0, 2), (8, 4)), "float32[8@x,4]", P("x", None),
             host[:, 2:6]),
            (lambda: jax.jit(lambda t, i: lax.dynamic_slice(t, (0, i), (8, 4)))(m, 2),
             "float32[8@x,4]", P("x", None), host[:, 2:6]),
            (lambda: lax.dynamic_slice(m, (0, 0), (8, 16)), "float32[8@x,16]", P("x", "y"),
             host)]
        for call, want_type, want_spec, want_value in rows:
            out = call()
            assert str(jax.typeof(out)) == want_type
            assert out.sharding.spec == want_spec, (want_type, out.sharding.spec)
            np.testing.assert_array_equal(np.asarray(out), want_value)


def test_with_sharding_constraint_on_an_explicit_mesh_with_no_mesh_set():
    """With no mesh set, JAX 0.10.2 does not assert a constraint against the type (it asserts
    under an all-Explicit mesh set only): a spec naming an axis of the sharding's mesh is its
    ValueError (Explicit axes are not the constraint's); one naming none lays the array out
    eagerly as named, its type unsplit, and under jit keeps the type."""
    mesh = mesh_of((2, 4), ("x", "y"))
    host = np.arange(128, dtype=np.float32).reshape(8, 16)
    a = jax.device_put(host, NamedSharding(mesh, P("x", "y")))
    eager = lax.with_sharding_constraint(a, NamedSharding(mesh, P()))
    assert str(jax.typeof(eager)) == "float32[8,16]" and eager.sharding.spec == P()
    np.testing.assert_array_equal(np.asarray(eager), host)
    jitted = jax.jit(lambda t: lax.with_sharding_constraint(t, NamedSharding(mesh, P())) * 2)(a)
    check_result(jitted, "float32[8@x,16@y]", host * 2)
    for spec in (P("y"), P("x", "y"), P(None, "y")):
        for run in (lambda f, t: f(t), lambda f, t: jax.jit(f)(t)):
            with pytest.raises(ValueError, match=re.escape(
                    "The spec of NamedSharding passed to with_sharding_constraint can only "
                    f"refer to Auto axes of the mesh. Got spec={spec}")):
                run(lambda t: lax.with_sharding_constraint(t, NamedSharding(mesh, spec)), a)


def test_jitted_explicit_axes_on_an_auto_mesh_leave_results_laid_out():
    """Under jit, explicit_axes' results leave for the Auto mesh laid out as their types
    inside split them (JAX's reshard onto an all-Auto mesh moves nothing), spelt as JAX
    reads the layout back (no trailing unsplit dimensions)."""
    auto = jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    host = np.arange(128, dtype=np.float32).reshape(8, 16)
    with jax.set_mesh(auto):
        for given in (P("x", "y"), P()):
            x = jax.device_put(host, given)
            out = jax.jit(jax.sharding.explicit_axes(lambda t: t * 2,
                                                     in_sharding=P("x", "y")))(x)
            assert str(jax.typeof(out)) == "float32[8,16]" and out.sharding.spec == P("x", "y")
            np.testing.assert_array_equal(np.asarray(out), host * 2)
        out = jax.jit(jax.sharding.explicit_axes(lambda t: t.sum(0), in_sharding=P("x", "y")))(
            jax.device_put(host, P("x", "y")))
        assert out.sharding.spec == P("y")
        np.testing.assert_array_equal(np.asarray(out), host.sum(0))
        out = jax.jit(jax.sharding.explicit_axes(lambda t: jax.sharding.reshard(t, P("y")),
                                                 in_sharding=P("x", "y")))(
            jax.device_put(host, P("x", "y")))
        assert out.sharding.spec == P("y")
        np.testing.assert_array_equal(np.asarray(out), host)


def test_out_sharding_on_the_abstract_mesh_of_the_operands_mesh():
    """An ``out_sharding`` naming the abstract mesh of the operands' mesh (as a type's
    ``.sharding.mesh`` gives it inside jit) is that mesh: the product and its reshard run on
    the operands' devices, eagerly and under jit, as in JAX."""
    mesh = mesh_of((2, 2), ("x", "y"))
    host = np.arange(16, dtype=np.float32).reshape(8, 2)
    with jax.set_mesh(mesh):
        a = jax.device_put(host, P("x", "y"))
        b = jax.device_put(host.T, P("y", "x"))

        def f(x, y):
            given = NamedSharding(jax.typeof(x).sharding.mesh, P("x", None))
            return jnp.einsum("xy,yz->xz", x, y, out_sharding=given)

        want = np.array([[r @ c for c in host] for r in host], np.float32)
        for run in (f, jax.jit(f)):
            out = run(a, b)
            check_result(out, "float32[8@x,8]", want)
            assert out.sharding == NamedSharding(mesh, P("x", None))


def test_gradient_through_a_block_on_another_abstract_mesh():
    """A ``use_abstract_mesh`` block inside a jitted function: its equations are typed on the
    block's mesh, and the gradient's transpose (run after the block has ended) runs them
    under that mesh, as JAX does; the cotangent comes back laid out as the argument."""
    mesh = mesh_of((2, 2), ("x", "y"))
    host = np.arange(16, dtype=np.float32).reshape(8, 2)
    other = mesh.abstract_mesh.update(axis_sizes=(4, 1), axis_names=("a", "b"))

    @jax.jit
    def f(x):
        x = jnp.sin(x)
        with jax.sharding.use_abstract_mesh(other):
            out = jax.sharding.reshard(x, P(("a", "b"), None)) * 2
            assert jax.typeof(out).sharding.spec == P(("a", "b"), None)
        return jax.sharding.reshard(out, P("y", None))

    with jax.set_mesh(mesh):
        arr = jax.device_put(host, P("x", "y"))
        assert f(arr).sharding.spec == P("y", None)
        for grad in (jax.grad(lambda x: f(x).sum()), jax.jit(jax.grad(lambda x: f(x).sum()))):
            out = grad(arr)
            assert out.sharding == arr.sharding
            np.testing.assert_allclose(np.asarray(out), 2 * np.cos(host), rtol=1e-6)


def test_out_sharding_on_another_mesh_than_the_one_set_is_an_error():
    """An ``out_sharding`` NamedSharding on a mesh of other axis types than the mesh set is
    JAX's ValueError naming both abstract meshes and the function; meshes of Auto axes
    only may differ."""
    explicit = mesh_of((2,), ("x",))
    auto = jax.make_mesh((2,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    host = np.arange(16, dtype=np.float32).reshape(8, 2)
    with jax.set_mesh(explicit):
        a = jax.device_put(host, P("x", None))
        b = jax.device_put(host.T, P(None, "x"))
        f = jax.jit(lambda x, y: jnp.einsum("xy,yz->xz", x, y,
                                            out_sharding=NamedSharding(auto, P(None, None))))
        with pytest.raises(ValueError, match=re.escape(
                f"Context mesh {explicit.abstract_mesh} should match the mesh of sharding "
                f"{auto.abstract_mesh} passed to einsum.")):
            f(a, b)
    other_auto = jax.make_mesh((2,), ("y",), axis_types=(jax.sharding.AxisType.Auto,))
    with jax.set_mesh(auto):
        out = jnp.einsum("xy,yz->xz", host, host.T,
                         out_sharding=NamedSharding(other_auto, P(None, None)))
        np.testing.assert_array_equal(np.asarray(out), host @ host.T)


@pytest.mark.parametrize("subscripts", ["btd,dhq->bhtq", "btd,dhq->qhtb", "btd,dhq->hbqt"])
@pytest.mark.parametrize("out_spec", [P("x", None, "y", None), P(None, "x", None, "y"),
                                      P("y")])
def test_einsum_out_sharding_is_the_results_whatever_the_dots_order(subscripts, out_spec):
    """An einsum whose dot gives its dimensions in another order than the result's takes
    out_sharding in the result's order, as JAX's (its dot takes the spec's inverse): it was
    applied to the dot's dimensions and moved with them by the final transpose."""
    mesh = jax.make_mesh((2, 2), ("x", "y"))
    values = np.arange(64.0, dtype=np.float32)
    a, b = values.reshape(8, 4, 2), values.reshape(2, 4, 8)
    with jax.set_mesh(mesh):
        x = jax.device_put(a, P("x", "y", None))
        y = jax.device_put(b, P(None, "x", "y"))
        out = jax.jit(lambda x, y: jnp.einsum(subscripts, x, y, out_sharding=out_spec))(x, y)
    want = tuple(out_spec) + (None,) * (4 - len(out_spec))
    assert out.sharding.spec == P(*want)
    np.testing.assert_allclose(out, np.einsum(subscripts, a, b), rtol=1e-6)


@pytest.mark.parametrize("where", ["jit", "grad", "vmap", "shard_map"])
def test_set_mesh_and_get_mesh_under_a_trace_are_errors(where):
    """JAX's ValueErrors: the mesh of traced code is fixed, so ``set_mesh`` (as a call or as
    a context manager) and ``get_mesh`` are for code outside jit; ``get_abstract_mesh`` and
    ``use_abstract_mesh`` work there, as do ``explicit_axes``/``auto_axes``."""
    mesh = jax.make_mesh((4,), ("x",))

    def setter(x):
        with jax.set_mesh(mesh):
            return x * 2

    def getter(x):
        jax.sharding.get_mesh()
        return x * 2

    def abstract(x):
        assert jax.sharding.get_abstract_mesh().axis_names == ("x",)
        return x * 2

    def wrap(f):
        if where == "jit":
            return jax.jit(f)
        if where == "grad":
            return jax.grad(lambda x: f(x).sum())
        if where == "vmap":
            return jax.vmap(f)
        return jax.shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=P("x"))

    x = np.ones(4, np.float32)
    with pytest.raises(ValueError, match=r"`set_mesh` can only be used outside of `jax\.jit`"):
        wrap(setter)(x)
    with pytest.raises(ValueError, match=r"`get_mesh` can only be used outside of `jax\.jit`"
                                         r"\. Maybe you want `jax\.sharding\.get_abstract_mesh"):
        wrap(getter)(x)
    with jax.set_mesh(mesh):
        np.testing.assert_array_equal(np.asarray(jax.jit(abstract)(x)), 2 * x)
        assert jax.sharding.get_mesh() is mesh


def test_diff_and_wrap_padding_of_split_arrays_slice_as_jaxs_do():
    """JAX's diff and pad(mode='wrap') slice statically (they are jitted), so a split
    dimension stays split where the result divides; they were eager gathers asking for
    ``out_sharding``. Values as numpy's."""
    a = np.arange(32.0, dtype=np.float32).reshape(8, 4)
    with jax.set_mesh(jax.make_mesh((8, 1), ("x", "y"))):
        x = jax.device_put(a, P("x", "y"))
        d = jnp.diff(x, axis=1)
        assert str(jax.typeof(d)) == "float32[8@x,3@y]"
        np.testing.assert_array_equal(np.asarray(d), np.diff(a, axis=1))
        d2 = jnp.diff(x, n=2, axis=1)
        np.testing.assert_array_equal(np.asarray(d2), np.diff(a, n=2, axis=1))
    with jax.set_mesh(jax.make_mesh((4, 2), ("x", "y"))):
        v = jax.device_put(np.arange(8, dtype=np.float32), P("x"))
        r = jnp.pad(v, (4, 4), mode="wrap")
        assert str(jax.typeof(r)) == "float32[16@x]"
        np.testing.assert_array_equal(np.asarray(r), np.pad(np.arange(8.0), (4, 4), "wrap"))
        with pytest.raises(ShardingTypeError, match=r"slicing on sharded dims where out dim "
                                                    r"\(3\) is not divisible by mesh axes"):
            jnp.pad(v, (3, 1), mode="wrap")
    for width in [(0, 0), (1, 2), (5, 11), (8, 8)]:
        np.testing.assert_array_equal(np.asarray(jnp.pad(a, width, mode="wrap")),
                                      np.pad(a, width, mode="wrap"))
    # reflections and edges are slices too: a dimension split over an axis of one device
    # stays split (a gather refused it)
    with jax.set_mesh(jax.make_mesh((1, 8), ("u", "v"))):
        x = jax.device_put(np.arange(24.0, dtype=np.float32).reshape(3, 8), P("u", "v"))
        for mode in ("reflect", "symmetric"):
            r = jnp.pad(x, ((1, 2), (0, 0)), mode=mode)
            assert str(jax.typeof(r)) == "float32[6@u,8@v]"
            np.testing.assert_array_equal(np.asarray(r), np.pad(np.asarray(x), ((1, 2), (0, 0)),
                                                                mode=mode))


def test_lax_reduce_sum_takes_out_sharding_as_jaxs():
    with jax.set_mesh(jax.make_mesh((4, 2), ("x", "y"))):
        x = jax.device_put(np.arange(32.0, dtype=np.float32).reshape(8, 4), P("x", "y"))
        r = lax.reduce(x, 0.0, lax.add, (1,), out_sharding=P("x"))
        assert str(jax.typeof(r)) == "float32[8@x]"
        np.testing.assert_array_equal(np.asarray(r), np.arange(32.0).reshape(8, 4).sum(1))
        with pytest.raises(NotImplementedError):
            lax.reduce(x, -np.inf, lax.max, (1,), out_sharding=P("x"))


def test_explicit_axes_needs_in_sharding():
    with jax.set_mesh(jax.make_mesh((4, 2), ("x", "y"))):
        x = jax.device_put(np.ones((8, 4), np.float32), P("x"))
        with pytest.raises(TypeError, match="Missing required keyword argument: 'in_sharding'"):
            jax.sharding.explicit_axes(lambda v: v * 2)(x)
        out = jax.sharding.explicit_axes(lambda v: v * 2)(x, in_sharding=P("x"))
        np.testing.assert_array_equal(np.asarray(out), np.full((8, 4), 2.0))


def test_results_keep_their_types_after_a_program_on_an_equal_auto_mesh():
    """The report: a program laid out from in_shardings with no mesh set runs on its Explicit
    mesh's Auto twin, and its results take their types from the twin. Types made once per
    (mesh, spec) were shared by equal meshes, so after a program on a user's Auto mesh of the
    same devices the results named that mesh and came back typed unsplit."""
    a = np.arange(128, dtype=np.float32).reshape(8, 16)
    auto = jax.sharding.Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("x", "y"))
    on_auto = jax.jit(lambda u: u.T)(jax.device_put(a, NamedSharding(auto, P("x", "y"))))
    assert str(jax.typeof(on_auto)) == "float32[16,8]"
    both = NamedSharding(mesh_of((2, 4), ("x", "y")), P("x", "y"))
    check_result(jax.jit(lambda u: u.T, in_shardings=both)(a), "float32[16@y,8@x]", a.T)
