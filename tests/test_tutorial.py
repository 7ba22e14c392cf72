"""The seed tutorial's examples up to the end of the psum section (SEMANTICS 6, T1-T13), and the
2025 varying-axes examples V1-V6, with only the imports swapped.

Each example's code is the tutorial's; the checks around it hold its values, shapes, dtypes and
the exact per-device prints (SEMANTICS 5.2: the seed's scraped text drops the blank line that
ends each device entry). Examples run eagerly and, where meaningful, under ``shardc.jit``, where
a ``print`` inside the body shows the value's type (``Traced<f32[3]{i}>``).
"""
from functools import partial

import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from shardc import lax
from shardc.experimental import mesh_utils
from shardc.experimental.shard_map import shard_map
from shardc.sharding import Mesh, NamedSharding, PartitionSpec as P
from shardc.tree_util import tree_all, tree_map


def allclose(a, b):
    return tree_all(tree_map(partial(jnp.allclose, atol=1e-2, rtol=1e-2), a, b))


def eager(f):
    return f


# Eager, and the same function under jit: both must give the same values.
WRAPS = [pytest.param(eager, id="eager"), pytest.param(jax.jit, id="jit")]


def spelt(wrap, *entries) -> P:
    """The spec a result reports: a shard_map's out_specs as written when run eagerly; under
    jit, as JAX spells a layout its compiler worked out (no trailing None; P() replicated)."""
    if wrap is eager:
        return P(*entries)
    entries = list(entries)
    while entries and entries[-1] is None:
        entries.pop()
    return P(*entries)


def device_entries(names: str, entries) -> str:
    """What ``print(v)`` shows for an eager body value: one entry per device (SEMANTICS 5.2)."""
    return "\n".join(f"On TFRT_CPU_{d} at mesh coordinates {names} = {coord}:\n{block}\n"
                     for d, coord, block in entries)


# --- T1, T2: matmul_basic and its jit reference --------------------------------------------------

def _matmul_example():
    devices = mesh_utils.create_device_mesh((4, 2))
    mesh = Mesh(devices, axis_names=('x', 'y'))
    a = jnp.arange( 8 * 16.).reshape(8, 16)
    b = jnp.arange(16 *  4.).reshape(16, 4)

    @partial(shard_map, mesh=mesh, in_specs=(P('x', 'y'), P('y', None)),
             out_specs=P('x', None))
    def matmul_basic(a_block, b_block):
      # a_block: f32[2, 8]
      # b_block: f32[8, 4]
      c_partialsum = jnp.dot(a_block, b_block)
      c_block = jax.lax.psum(c_partialsum, 'y')
      # c_block: f32[2, 4]
      return c_block

    return mesh, a, b, matmul_basic


@pytest.mark.parametrize("wrap", WRAPS)
def test_t1_matmul_basic(wrap):
    mesh, a, b, matmul_basic = _matmul_example()
    c = wrap(matmul_basic)(a, b)   # c: f32[8, 4]
    assert allclose(c, jnp.dot(a, b)) is True
    assert c.shape == (8, 4) and c.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(c), np.asarray(a) @ np.asarray(b))
    np.testing.assert_array_equal(np.asarray(c)[0], [4960., 5080., 5200., 5320.])
    assert c.sharding == NamedSharding(mesh, P('x', None))
    assert c.sharding.spec == spelt(wrap, 'x', None)
    # The result is split along its rows: devices (k, 0) and (k, 1) hold rows 2k, 2k+1.
    shards = c.addressable_shards
    assert [s.device.id for s in shards] == list(range(8))
    for s in shards:
        assert s.data.shape == (2, 4)
        np.testing.assert_array_equal(np.asarray(s.data), np.asarray(c)[s.index])


def test_t1_block_shapes_are_the_comments():
    _, a, b, matmul_basic = _matmul_example()
    eqn = jax.make_jaxpr(matmul_basic)(a, b).jaxpr.eqns[0]
    body = eqn.params["jaxpr"]
    assert [v.aval.shape for v in body.invars] == [(2, 8), (8, 4)]     # a_block, b_block
    assert [a.shape for a in body.out_avals] == [(2, 4)]               # c_block
    assert [v.aval.str_short(("x", "y")) for v in body.invars] == ["f32[2,8]{x,y}",
                                                                   "f32[8,4]{y}"]


def test_t2_jit_reference():
    mesh, a, b, _ = _matmul_example()
    a = jax.device_put(a, NamedSharding(mesh, P('x', 'y')))
    b = jax.device_put(b, NamedSharding(mesh, P('y', None)))
    @jax.jit
    def matmul_reference(a, b):
      c = jnp.dot(a, b)
      return jax.lax.with_sharding_constraint(c, NamedSharding(mesh, P('x', None)))
    c_ref = matmul_reference(a, b)
    assert allclose(c_ref, jnp.dot(a, b)) is True
    assert c_ref.sharding.spec == P('x',)      # as JAX spells what jit works out
    assert a.sharding.spec == P('x', 'y') and b.sharding.spec == P('y', None)


# --- T3, T4: rank-reducing vmap versus rank-preserving shard_map ---------------------------------

def test_t3_check_vmap(capsys):
    def check_vmap(f, xs):
      ans = jax.vmap(f, in_axes=(0,), out_axes=0)(xs)
      expected = jnp.stack([f(x) for x in xs])  # vmap reference semantics
      print(allclose(ans, expected))
    check_vmap(lambda x: x @ x, jnp.arange(12).reshape(4, 3))
    assert capsys.readouterr().out == "True\n"


@pytest.mark.parametrize("wrap", WRAPS)
def test_t4_check_shmap(wrap, capsys):
    devices = np.array(jax.devices()[:4])
    mesh = Mesh(devices, ('i',))  # mesh.shape['i'] = 4
    assert mesh.shape['i'] == 4
    def check_shmap(f, y):
      ans = wrap(shard_map(f, mesh, in_specs=P('i'), out_specs=P('i')))(y)
      expected = jnp.concatenate([f(y_blk) for y_blk in jnp.split(y, mesh.shape['i'])])
      print(allclose(ans, expected))
      return ans
    ans = check_shmap(lambda x: x.T @ x, jnp.arange(32).reshape(8, 4))
    assert capsys.readouterr().out == "True\n"
    assert ans.shape == (16, 4) and ans.dtype == np.int32
    y = np.arange(32, dtype=np.int32).reshape(8, 4)
    expected = np.concatenate([blk.T @ blk for blk in np.split(y, 4)])
    np.testing.assert_array_equal(np.asarray(ans), expected)


# --- T5, T6: in_specs split and tile -------------------------------------------------------------

@pytest.mark.parametrize("wrap", WRAPS)
def test_t5_t6_in_specs_split_and_tile(wrap, capsys):
    devices = mesh_utils.create_device_mesh((4, 2))
    mesh = Mesh(devices, ('i', 'j'))
    @partial(shard_map, mesh=mesh, in_specs=P('i', None), out_specs=P('i', 'j'))
    def f1(x_block):
      print(x_block.shape)  # prints (3, 12)
      return x_block
    x1 = jnp.arange(12 * 12).reshape(12, 12)
    y = wrap(f1)(x1)
    assert capsys.readouterr().out == "(3, 12)\n"

    @partial(shard_map, mesh=mesh, in_specs=P('i', 'j'), out_specs=P('i', 'j'))
    def f2(x_block):
      print(x_block.shape)
      return x_block
    x = jnp.arange(12 * 12).reshape(12, 12)
    x_ = jnp.tile(x, (1, mesh.shape['j']))  # x_ has shape (12, 24)
    y2 = wrap(f2)(x_)  # prints (3,12), and f1(x) == f2(x_)
    assert capsys.readouterr().out == "(3, 12)\n"

    assert x_.shape == (12, 24)
    expected = np.tile(np.arange(144, dtype=np.int32).reshape(12, 12), (1, 2))
    for out in (y, y2):
        assert out.shape == (12, 24) and out.dtype == np.int32
        np.testing.assert_array_equal(np.asarray(out), expected)
        assert out.sharding.spec == P('i', 'j')


def test_t6_tiling_along_the_first_axis():
    # "we could also tile along the first axis and use the pspec P(('j', 'i'), None)"
    mesh = Mesh(mesh_utils.create_device_mesh((4, 2)), ('i', 'j'))
    x = jnp.arange(12 * 12).reshape(12, 12)
    f = shard_map(lambda b: b, mesh, in_specs=P(('j', 'i'), None), out_specs=P(('j', 'i')))
    np.testing.assert_array_equal(np.asarray(f(jnp.tile(x, (2, 1)))),
                                  np.tile(np.arange(144).reshape(12, 12), (2, 1)))


# --- T7: untiling a closed-over value ------------------------------------------------------------

@pytest.mark.parametrize("wrap", WRAPS)
def test_t7_untiling_a_closure(wrap, capsys):
    devices = mesh_utils.create_device_mesh((4, 2))
    mesh = Mesh(devices, ('i', 'j'))
    x = jnp.array([[3.]])
    z = wrap(shard_map(lambda: x, mesh=mesh, in_specs=(), out_specs=P('i', 'j')))()
    print(z)  # prints the same as jnp.tile(x, (4, 2))
    assert z.shape == (4, 2) and z.sharding.spec == P('i', 'j')
    z = wrap(shard_map(lambda: x, mesh=mesh, in_specs=(), out_specs=P('i', None)))()
    print(z)  # prints the same as jnp.tile(x, (4, 1)), or just jnp.tile(x, (4,))
    assert z.shape == (4, 1) and z.sharding.spec == spelt(wrap, 'i', None)
    z = wrap(shard_map(lambda: x, mesh=mesh, in_specs=(), out_specs=P(None, None)))()
    print(z)  # prints the same as jnp.tile(x, (1, 1)), or just x
    assert z.shape == (1, 1) and z.dtype == np.float32
    assert capsys.readouterr().out == (
        "[[3. 3.]\n [3. 3.]\n [3. 3.]\n [3. 3.]]\n"
        "[[3.]\n [3.]\n [3.]\n [3.]]\n"
        "[[3.]]\n")


# --- T8-T10: out_specs untiling after psum -------------------------------------------------------

@pytest.mark.parametrize("wrap", WRAPS)
def test_t8_t10_out_specs_after_psum(wrap, capsys):
    devices = mesh_utils.create_device_mesh((4, 2))
    mesh = Mesh(devices, ('i', 'j'))

    @partial(shard_map, mesh=mesh, in_specs=P('i', 'j'), out_specs=P('i', None))
    def f3(x_block):
      return jax.lax.psum(x_block, 'j')
    x = jnp.arange(12 * 12).reshape(12, 12)
    y3 = wrap(f3)(x)
    print(y3.shape)

    @partial(shard_map, mesh=mesh, in_specs=P('i', 'j'), out_specs=P(None, 'j'))
    def f4(x_block):
      return jax.lax.psum(x_block, 'i')
    x = jnp.arange(12 * 12).reshape(12, 12)
    y4 = wrap(f4)(x)
    print(y4.shape)  # (3,12)
    @partial(shard_map, mesh=mesh, in_specs=P('i', 'j'), out_specs=P(None, None))
    def f5(x_block):
      return jax.lax.psum(x_block, ('i', 'j'))
    y5 = wrap(f5)(x)
    print(y5.shape)  # (3,6)

    assert capsys.readouterr().out == "(12, 6)\n(3, 12)\n(3, 6)\n"
    xs = np.arange(144, dtype=np.int32).reshape(12, 12)
    np.testing.assert_array_equal(np.asarray(y3), xs[:, :6] + xs[:, 6:])
    np.testing.assert_array_equal(np.asarray(y4), sum(xs[3 * k:3 * k + 3] for k in range(4)))
    quarters = [xs[3 * k:3 * k + 3] for k in range(4)]
    np.testing.assert_array_equal(np.asarray(y5), sum(q[:, :6] + q[:, 6:] for q in quarters))
    np.testing.assert_array_equal(np.asarray(y3)[0], [6, 8, 10, 12, 14, 16])
    np.testing.assert_array_equal(np.asarray(y4)[0], np.arange(216, 261, 4))
    np.testing.assert_array_equal(np.asarray(y5)[0], np.arange(456, 497, 8))
    for y, spec in ((y3, spelt(wrap, 'i', None)), (y4, P(None, 'j')),
                    (y5, spelt(wrap, None, None))):
        assert y.dtype == np.int32
        assert y.sharding.spec == spec


# --- T11-T13: psum with prints -------------------------------------------------------------------

X16 = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2]

T11_EAGER = """\
BEFORE:
 On TFRT_CPU_0 at mesh coordinates (i,) = (0,):
[3 1 4 1]

On TFRT_CPU_1 at mesh coordinates (i,) = (1,):
[5 9 2 6]

On TFRT_CPU_2 at mesh coordinates (i,) = (2,):
[5 3 5 8]

On TFRT_CPU_3 at mesh coordinates (i,) = (3,):
[9 7 1 2]

AFTER:
 On TFRT_CPU_0 at mesh coordinates (i,) = (0,):
[22 20 12 17]

On TFRT_CPU_1 at mesh coordinates (i,) = (1,):
[22 20 12 17]

On TFRT_CPU_2 at mesh coordinates (i,) = (2,):
[22 20 12 17]

On TFRT_CPU_3 at mesh coordinates (i,) = (3,):
[22 20 12 17]

FINAL RESULT:
 [22 20 12 17]
"""

T11_JIT = """\
BEFORE:
 Traced<i32[4]{i}>
AFTER:
 Traced<i32[4]>
FINAL RESULT:
 [22 20 12 17]
"""


@pytest.mark.parametrize("wrap, expected", [pytest.param(eager, T11_EAGER, id="eager"),
                                            pytest.param(jax.jit, T11_JIT, id="jit")])
def test_t11_psum_1d(wrap, expected, capsys):
    mesh1d = Mesh(jax.devices()[:4], ('i',))
    @partial(shard_map, mesh=mesh1d, in_specs=P('i'), out_specs=P(None))
    def f1(x_block):
      print('BEFORE:\n', x_block)
      y_block = jax.lax.psum(x_block, 'i')
      print('AFTER:\n', y_block)
      return y_block

    x = jnp.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2])
    y = wrap(f1)(x)
    print('FINAL RESULT:\n', y)
    assert capsys.readouterr().out == expected
    assert y.shape == (4,) and y.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(y), [22, 20, 12, 17])
    assert y.sharding == NamedSharding(mesh1d, P(None))


def test_t11_block_text_helper_matches():
    blocks = ["[3 1 4 1]", "[5 9 2 6]", "[5 3 5 8]", "[9 7 1 2]"]
    text = device_entries("(i,)", [(k, (k,), b) for k, b in enumerate(blocks)])
    assert "BEFORE:\n " + text + "\n" in T11_EAGER


T12_BEFORE = """\
BEFORE:
 On TFRT_CPU_0 at mesh coordinates (i, j,) = (0, 0):
[[0 1]
 [4 5]]

On TFRT_CPU_1 at mesh coordinates (i, j,) = (0, 1):
[[2 3]
 [6 7]]

On TFRT_CPU_2 at mesh coordinates (i, j,) = (1, 0):
[[ 8  9]
 [12 13]]

On TFRT_CPU_3 at mesh coordinates (i, j,) = (1, 1):
[[10 11]
 [14 15]]

"""

T12_EAGER = T12_BEFORE + """\
AFTER:
 On TFRT_CPU_0 at mesh coordinates (i, j,) = (0, 0):
[[ 8 10]
 [16 18]]

On TFRT_CPU_1 at mesh coordinates (i, j,) = (0, 1):
[[12 14]
 [20 22]]

On TFRT_CPU_2 at mesh coordinates (i, j,) = (1, 0):
[[ 8 10]
 [16 18]]

On TFRT_CPU_3 at mesh coordinates (i, j,) = (1, 1):
[[12 14]
 [20 22]]

FINAL RESULT:
 [[ 8 10 12 14]
 [16 18 20 22]]
"""

T12_JIT = """\
BEFORE:
 Traced<i32[2,2]{i,j}>
AFTER:
 Traced<i32[2,2]{j}>
FINAL RESULT:
 [[ 8 10 12 14]
 [16 18 20 22]]
"""


def _mesh2d():
    return Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ('i', 'j'))


@pytest.mark.parametrize("wrap, expected", [pytest.param(eager, T12_EAGER, id="eager"),
                                            pytest.param(jax.jit, T12_JIT, id="jit")])
def test_t12_psum_over_i(wrap, expected, capsys):
    mesh2d = _mesh2d()
    @partial(shard_map, mesh=mesh2d, in_specs=P('i', 'j'), out_specs=P(None, 'j'))
    def f2(x_block):
      print('BEFORE:\n', x_block)
      y_block = jax.lax.psum(x_block, 'i')
      print('AFTER:\n', y_block)
      return y_block
    y = wrap(f2)(jnp.arange(16).reshape(4, 4))
    print('FINAL RESULT:\n', y)
    assert capsys.readouterr().out == expected
    assert y.shape == (2, 4) and y.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(y), [[8, 10, 12, 14], [16, 18, 20, 22]])
    assert y.sharding.spec == P(None, 'j')


T13_EAGER = T12_BEFORE + """\
AFTER:
 On TFRT_CPU_0 at mesh coordinates (i, j,) = (0, 0):
[[20 24]
 [36 40]]

On TFRT_CPU_1 at mesh coordinates (i, j,) = (0, 1):
[[20 24]
 [36 40]]

On TFRT_CPU_2 at mesh coordinates (i, j,) = (1, 0):
[[20 24]
 [36 40]]

On TFRT_CPU_3 at mesh coordinates (i, j,) = (1, 1):
[[20 24]
 [36 40]]

FINAL RESULT:
 [[20 24]
 [36 40]]
"""

T13_JIT = """\
BEFORE:
 Traced<i32[2,2]{i,j}>
AFTER:
 Traced<i32[2,2]>
FINAL RESULT:
 [[20 24]
 [36 40]]
"""


@pytest.mark.parametrize("wrap, expected", [pytest.param(eager, T13_EAGER, id="eager"),
                                            pytest.param(jax.jit, T13_JIT, id="jit")])
def test_t13_psum_over_both_axes(wrap, expected, capsys):
    mesh2d = _mesh2d()
    @partial(shard_map, mesh=mesh2d, in_specs=P('i', 'j'), out_specs=P(None, None))
    def f3(x_block):
      print('BEFORE:\n', x_block)
      y_block = jax.lax.psum(x_block, ('i', 'j'))
      print('AFTER:\n', y_block)
      return y_block
    y = wrap(f3)(jnp.arange(16).reshape(4, 4))
    print('FINAL RESULT:\n', y)
    assert capsys.readouterr().out == expected
    assert y.shape == (2, 2) and y.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(y), [[20, 24], [36, 40]])
    assert y.sharding.spec == spelt(wrap, None, None)


def test_psum_ref_matches_psum():
    # The tutorial's reference implementation of psum over the list of blocks.
    def psum_ref(_, x_blocks):
      tot = sum(x_blocks)
      return [tot] * len(x_blocks)
    blocks = np.split(np.array(X16, dtype=np.int32), 4)
    mesh1d = Mesh(jax.devices()[:4], ('i',))
    y = shard_map(lambda b: lax.psum(b, 'i'), mesh1d, in_specs=P('i'), out_specs=P())(
        jnp.array(X16))
    for ref in psum_ref(None, blocks):
        np.testing.assert_array_equal(np.asarray(y), ref)


# --- V1-V6: the 2025 API and varying manual axes -------------------------------------------------

V1_EAGER = device_entries("(i,)", [(0, (0,), "[0. 1. 2.]"), (1, (1,), "[3. 4. 5.]")]) + "\n"
V2_EAGER = device_entries("(i,)", [(0, (0,), "[0. 1. 2. 3. 4. 5.]"),
                                   (1, (1,), "[0. 1. 2. 3. 4. 5.]")]) + "\n"
V3_EAGER = device_entries("(i,)", [(0, (0,), "[3. 5. 7.]"), (1, (1,), "[3. 5. 7.]")]) + "\n"


def test_v1_text_is_the_tutorials():
    assert V1_EAGER == ("On TFRT_CPU_0 at mesh coordinates (i,) = (0,):\n[0. 1. 2.]\n\n"
                        "On TFRT_CPU_1 at mesh coordinates (i,) = (1,):\n[3. 4. 5.]\n\n")


@pytest.mark.parametrize("wrap, expected", [pytest.param(eager, V1_EAGER, id="eager"),
                                            pytest.param(jax.jit, "Traced<f32[3]{i}>\n",
                                                         id="jit")])
def test_v1_print_inside_a_varying_body(wrap, expected, capsys):
    mesh = jax.make_mesh((2,), ('i',))

    @jax.shard_map(mesh=mesh, in_specs=P('i'), out_specs=P('i'))
    def f(x):
      print(x)
      return 2 * x

    x = jnp.arange(6.)
    y = wrap(f)(x)
    assert capsys.readouterr().out == expected
    assert y.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(y), [0., 2., 4., 6., 8., 10.])
    assert repr(y) == "Array([ 0.,  2.,  4.,  6.,  8., 10.], dtype=float32)"


@pytest.mark.parametrize("wrap, expected", [pytest.param(eager, V2_EAGER, id="eager"),
                                            pytest.param(jax.jit, "Traced<f32[6]>\n",
                                                         id="jit")])
def test_v2_print_inside_an_invariant_body(wrap, expected, capsys):
    mesh = jax.make_mesh((2,), ('i',))

    @jax.shard_map(mesh=mesh, in_specs=P(), out_specs=P())
    def f(x):
      print(x)
      return 2 * x

    x = jnp.arange(6.)
    y = wrap(f)(x)
    assert capsys.readouterr().out == expected
    np.testing.assert_array_equal(np.asarray(y), [0., 2., 4., 6., 8., 10.])


@pytest.mark.parametrize("wrap, expected", [pytest.param(eager, V3_EAGER, id="eager"),
                                            pytest.param(jax.jit, "Traced<f32[3]>\n",
                                                         id="jit")])
def test_v3_print_after_psum(wrap, expected, capsys):
    mesh = jax.make_mesh((2,), ('i',))

    @jax.shard_map(mesh=mesh, in_specs=P('i'), out_specs=P())
    def f(x):
      y = jax.lax.psum(x, 'i')
      print(y)
      return y

    x = jnp.arange(6.)
    y = wrap(f)(x)
    assert capsys.readouterr().out == expected
    assert y.shape == (3,)
    np.testing.assert_array_equal(np.asarray(y), [3., 5., 7.])
    assert repr(y) == "Array([3., 5., 7.], dtype=float32)"


@pytest.mark.parametrize("wrap", WRAPS)
def test_v4_typeof_around_psum(wrap, capsys):
    mesh = jax.make_mesh((2,), ('i',))

    @jax.shard_map(mesh=mesh, in_specs=P('i'), out_specs=P())
    def f(x):
      print('x type:', jax.typeof(x))
      y = jax.lax.psum(x, 'i')
      print('y type:', jax.typeof(y))
      return y

    x = jnp.arange(6.)
    y = wrap(f)(x)
    assert capsys.readouterr().out == "x type: float32[3]{V:i}\ny type: float32[3]\n"
    np.testing.assert_array_equal(np.asarray(y), [3., 5., 7.])


@pytest.mark.parametrize("wrap", WRAPS)
def test_v5_typeof_on_a_2d_mesh(wrap, capsys):
    mesh = jax.make_mesh((4, 2), ('i', 'j'))

    @jax.shard_map(mesh=mesh, in_specs=P('i', 'j'), out_specs=P('i'))
    def f(x):
      print('x type:', jax.typeof(x))
      y = jax.lax.psum(x, 'j')
      print('y type:', jax.typeof(y))
      assert 'j' not in jax.typeof(y).vma
      print(jax.typeof(y).vma)
      return y

    x = jnp.arange(8 * 4.).reshape(8, 4)
    y = wrap(f)(x)
    assert capsys.readouterr().out == ("x type: float32[2,2]{V:(i,j)}\ny type: float32[2,2]{V:i}\n"
                                       "frozenset({'i'})\n")
    assert y.shape == (8, 2)
    expected = np.arange(32.).reshape(8, 4)
    np.testing.assert_array_equal(np.asarray(y), expected[:, :2] + expected[:, 2:])
    np.testing.assert_array_equal(np.asarray(y)[[0, 1, -1]], [[2, 4], [10, 12], [58, 60]])


@pytest.mark.parametrize("wrap", WRAPS)
def test_v6_identity_claimed_replicated_is_rejected(wrap):
    mesh = jax.make_mesh((2,), ('i',))
    x = jnp.arange(6.)
    f = jax.shard_map(lambda x: x, mesh=mesh, in_specs=P('i'), out_specs=P())
    with pytest.raises(ValueError) as info:
        wrap(f)(x)
    text = str(info.value)
    assert text.startswith("shard_map applied to the function '<lambda>' was given out_specs "
                           "which require replication which can't be statically inferred "
                           "given the mesh:")
    assert "replicated across mesh axis 'i', but it may vary over mesh axis 'i'" in text
    assert "check_vma=False" in text
