"""The tutorial's collectives section and matmul examples (SEMANTICS 6: T14-T20), and the two
varying-axes examples tests/test_tutorial.py leaves out (V7, V8), with only the imports swapped.

Each example's body is the tutorial's; the checks around it hold the exact per-device prints
(SEMANTICS 5.2: one entry per device, a blank line after each), the final values and their
shardings. Examples run eagerly as in the tutorial and again under ``shardc.jit``, where a
``print`` inside the body shows the value's type (``Traced<i32[4]{i}>``). The 2024 call form
(``partial(shard_map, mesh=...)``) is the seed's; where the 2025 tutorial changed a line
(``lax.axis_size`` for ``psum(1, 'i')``, the pad-and-add bidirectional matmul, ``pcast``)
both spellings run.
"""
from functools import partial

import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
import shardc.random  # noqa: F401  (jax.random)
from shardc import lax
from shardc.experimental.shard_map import shard_map
from shardc.sharding import Mesh, NamedSharding, PartitionSpec as P


def eager(f):
    return f


X16 = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2]


def device_entries(names: str, blocks) -> str:
    """What ``str(v)`` shows for an eager body value on a mesh whose devices are 0..n-1."""
    return "\n".join(f"On TFRT_CPU_{d} at mesh coordinates {names} = ({d},):\n{block}\n"
                     for d, block in enumerate(blocks))


def printed(before, after, final, *, traced=None) -> str:
    """The text an example's three prints produce: eager (per-device entries) or, given
    ``traced=(before_type, after_type)``, under jit."""
    if traced is not None:
        return (f"BEFORE:\n Traced<{traced[0]}>\nAFTER:\n Traced<{traced[1]}>\n"
                f"FINAL RESULT:\n {final}\n")
    return (f"BEFORE:\n {device_entries('(i,)', before)}\n"
            f"AFTER:\n {device_entries('(i,)', after)}\n"
            f"FINAL RESULT:\n {final}\n")


def _mesh1d():
    return Mesh(jax.devices()[:4], ('i',))


X16_BLOCKS = ["[3 1 4 1]", "[5 9 2 6]", "[5 3 5 8]", "[9 7 1 2]"]


def test_printed_helper_is_the_seed_text():
    # The helper reproduces the seed's T11 layout: a space after each label, entries separated
    # by a blank line, and one more blank line before the next label.
    text = printed(X16_BLOCKS, ["[22 20 12 17]"] * 4, "[22 20 12 17]")
    assert text.startswith("BEFORE:\n On TFRT_CPU_0 at mesh coordinates (i,) = (0,):\n"
                           "[3 1 4 1]\n\nOn TFRT_CPU_1 at mesh coordinates (i,) = (1,):\n")
    assert "[9 7 1 2]\n\nAFTER:\n On TFRT_CPU_0" in text
    assert text.endswith("[22 20 12 17]\n\nFINAL RESULT:\n [22 20 12 17]\n")


# --- T14: all_gather f4 (tiled), f5 (untiled) ----------------------------------------------------

F4_EAGER = printed(["[3]", "[9]", "[5]", "[2]"], ["[3 9 5 2]"] * 4,
                   "[3 9 5 2 3 9 5 2 3 9 5 2 3 9 5 2]")
F4_JIT = printed(None, None, "[3 9 5 2 3 9 5 2 3 9 5 2 3 9 5 2]",
                 traced=("i32[1]{i}", "i32[4]{i}"))


@pytest.mark.parametrize("wrap, expected", [pytest.param(eager, F4_EAGER, id="eager"),
                                            pytest.param(jax.jit, F4_JIT, id="jit")])
def test_t14_all_gather_tiled_f4(wrap, expected, capsys):
    mesh1d = _mesh1d()

    @partial(shard_map, mesh=mesh1d, in_specs=P('i'), out_specs=P('i'))
    def f4(x_block):
      print('BEFORE:\n', x_block)
      y_block = jax.lax.all_gather(x_block, 'i', tiled=True)
      print('AFTER:\n', y_block)
      return y_block

    x = jnp.array([3, 9, 5, 2])
    y = wrap(f4)(x)
    print('FINAL RESULT:\n', y)
    assert capsys.readouterr().out == expected
    assert y.shape == (16,) and y.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(y), np.tile([3, 9, 5, 2], 4))
    assert y.sharding == NamedSharding(mesh1d, P('i'))


F5_AFTER = "[[3]\n [9]\n [5]\n [2]]"
F5_FINAL = "[[3]\n [9]\n [5]\n [2]\n" + " [3]\n [9]\n [5]\n [2]\n" * 2 + " [3]\n [9]\n [5]\n [2]]"
F5_EAGER = printed(["[3]", "[9]", "[5]", "[2]"], [F5_AFTER] * 4, F5_FINAL)
F5_JIT = printed(None, None, F5_FINAL, traced=("i32[1]{i}", "i32[4,1]{i}"))


@pytest.mark.parametrize("wrap, expected", [pytest.param(eager, F5_EAGER, id="eager"),
                                            pytest.param(jax.jit, F5_JIT, id="jit")])
def test_t14_all_gather_untiled_f5(wrap, expected, capsys):
    mesh1d = _mesh1d()
    x = jnp.array([3, 9, 5, 2])

    @partial(shard_map, mesh=mesh1d, in_specs=P('i'), out_specs=P('i'))
    def f5(x_block):
      print('BEFORE:\n', x_block)
      y_block = jax.lax.all_gather(x_block, 'i', tiled=False)
      print('AFTER:\n', y_block)
      return y_block

    y = wrap(f5)(x)
    print('FINAL RESULT:\n', y)
    assert capsys.readouterr().out == expected
    assert y.shape == (16, 1) and y.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(y), np.tile([3, 9, 5, 2], 4)[:, None])


@pytest.mark.parametrize("wrap", [eager, jax.jit], ids=["eager", "jit"])
@pytest.mark.parametrize("tiled", [True, False])
def test_t14_all_gather_returned_replicated_is_rejected(wrap, tiled):
    # "Notice that we actually can't set out_specs=P() here": all_gather's result is typed
    # varying (it transposes to psum_scatter), so claiming it replicated fails the check.
    mesh1d = _mesh1d()

    @partial(shard_map, mesh=mesh1d, in_specs=P('i'), out_specs=P())
    def f4(x_block):
      return jax.lax.all_gather(x_block, 'i', tiled=tiled)

    with pytest.raises(ValueError) as info:
        wrap(f4)(jnp.array([3, 9, 5, 2]))
    text = str(info.value)
    assert text.startswith("shard_map applied to the function 'f4' was given out_specs which "
                           "require replication which can't be statically inferred given the "
                           "mesh:")
    assert "The mesh given has shape (4,) with corresponding axis names ('i',)." in text
    assert ("out_specs is P() which implies that the corresponding output value is "
            "replicated across mesh axis 'i', but it may vary over mesh axis 'i'") in text
    assert "check_rep=False" in text


@pytest.mark.parametrize("wrap", [eager, jax.jit], ids=["eager", "jit"])
def test_t14_the_two_fixes_the_tutorial_names(wrap):
    # "we could use all_gather_invariant" (shardc: to='invarying'), "or just use
    # out_specs=P('i') to perform the concatenation".
    mesh1d = _mesh1d()
    x = jnp.array([3, 9, 5, 2])
    gathered = shard_map(lambda b: jax.lax.all_gather(b, 'i', tiled=True, to='invarying'),
                         mesh=mesh1d, in_specs=P('i'), out_specs=P())
    concatenated = shard_map(lambda b: b, mesh=mesh1d, in_specs=P('i'), out_specs=P('i'))
    for f in (gathered, concatenated):
        y = wrap(f)(x)
        assert y.shape == (4,)
        np.testing.assert_array_equal(np.asarray(y), [3, 9, 5, 2])


def test_t14_all_gather_ref_matches_all_gather():
    def all_gather_ref(_, x_blocks, *, tiled=False):
      combine = jnp.concatenate if tiled else jnp.stack
      return [combine(x_blocks)] * len(x_blocks)

    mesh1d = _mesh1d()
    x = np.arange(8, dtype=np.int32)
    blocks = [jnp.array(b) for b in np.split(x, 4)]
    for tiled in (True, False):
        y = shard_map(lambda b: jax.lax.all_gather(b, 'i', tiled=tiled), mesh=mesh1d,
                      in_specs=P('i'), out_specs=P('i'))(jnp.array(x))
        ref = all_gather_ref(None, blocks, tiled=tiled)
        np.testing.assert_array_equal(np.asarray(y), np.concatenate([np.asarray(r) for r in ref]))


# --- T15: psum_scatter f6 ------------------------------------------------------------------------

SCATTERED_EAGER = printed(X16_BLOCKS, ["[22]", "[20]", "[12]", "[17]"], "[22 20 12 17]")
SCATTERED_JIT = printed(None, None, "[22 20 12 17]", traced=("i32[4]{i}", "i32[1]{i}"))


@pytest.mark.parametrize("wrap, expected", [pytest.param(eager, SCATTERED_EAGER, id="eager"),
                                            pytest.param(jax.jit, SCATTERED_JIT, id="jit")])
def test_t15_psum_scatter_f6(wrap, expected, capsys):
    mesh1d = _mesh1d()

    @partial(shard_map, mesh=mesh1d, in_specs=P('i'), out_specs=P('i'))
    def f6(x_block):
      print('BEFORE:\n', x_block)
      y_block = jax.lax.psum_scatter(x_block, 'i', tiled=True)
      print('AFTER:\n', y_block)
      return y_block

    x = jnp.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2])
    y = wrap(f6)(x)
    print('FINAL RESULT:\n', y)
    assert capsys.readouterr().out == expected
    assert y.shape == (4,) and y.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(y), [22, 20, 12, 17])
    assert y.sharding == NamedSharding(mesh1d, P('i'))


def test_t15_psum_scatter_ref_matches_psum_scatter():
    def psum_scatter_ref(i, x_blocks, *, tiled=False):
      axis_size = len(x_blocks)
      tot = sum(x_blocks)
      if tiled:
        tot = tot.reshape(axis_size, -1, *tot.shape[1:])  # split leading axis
      return [tot[i] for i in range(tot.shape[0])]

    mesh1d = _mesh1d()
    blocks = [jnp.array(b) for b in np.split(np.array(X16, dtype=np.int32), 4)]
    for tiled in (True, False):
        # untiled, each device keeps a scalar: a singleton axis lets out_specs concatenate it
        y = shard_map(lambda b: jax.lax.psum_scatter(b, 'i', tiled=tiled).reshape(-1),
                      mesh=mesh1d, in_specs=P('i'), out_specs=P('i'))(jnp.array(X16))
        ref = psum_scatter_ref(None, blocks, tiled=tiled)
        assert [np.shape(r) for r in ref] == [(1,) if tiled else ()] * 4
        expected = np.concatenate([np.atleast_1d(np.asarray(r)) for r in ref])
        np.testing.assert_array_equal(np.asarray(y), expected)
        np.testing.assert_array_equal(np.asarray(y), [22, 20, 12, 17])


@pytest.mark.parametrize("wrap", [eager, jax.jit], ids=["eager", "jit"])
def test_t15_psum_is_psum_scatter_then_all_gather(wrap):
    # "one way to implement psum is" the tutorial's two-line psum
    def psum(x, axis_name):
      summed_chunk = jax.lax.psum_scatter(x, axis_name)
      return jax.lax.all_gather(summed_chunk, axis_name)

    mesh1d = _mesh1d()
    f = shard_map(lambda b: psum(b, 'i'), mesh=mesh1d, in_specs=P('i'), out_specs=P('i'))
    g = shard_map(lambda b: jax.lax.psum(b, 'i'), mesh=mesh1d, in_specs=P('i'), out_specs=P())
    x = jnp.array(X16)
    np.testing.assert_array_equal(np.asarray(wrap(f)(x)), np.tile([22, 20, 12, 17], 4))
    np.testing.assert_array_equal(np.asarray(wrap(g)(x)), [22, 20, 12, 17])


# --- T16: ppermute f7 ----------------------------------------------------------------------------

F7_EAGER = printed(["[0 1]", "[2 3]", "[4 5]", "[6 7]"], ["[6 7]", "[0 1]", "[2 3]", "[4 5]"],
                   "[6 7 0 1 2 3 4 5]")
F7_JIT = printed(None, None, "[6 7 0 1 2 3 4 5]", traced=("i32[2]{i}", "i32[2]{i}"))
SIZES = [pytest.param(lambda: jax.lax.psum(1, 'i'), id="psum1"),      # the 2024 tutorial
         pytest.param(lambda: jax.lax.axis_size('i'), id="axis_size")]  # the 2025 tutorial


@pytest.mark.parametrize("axis_size", SIZES)
@pytest.mark.parametrize("wrap, expected", [pytest.param(eager, F7_EAGER, id="eager"),
                                            pytest.param(jax.jit, F7_JIT, id="jit")])
def test_t16_ppermute_f7(wrap, expected, axis_size, capsys):
    mesh1d = _mesh1d()

    @partial(shard_map, mesh=mesh1d, in_specs=P('i'), out_specs=P('i'))
    def f7(x_block):
      sz = axis_size()
      print('BEFORE:\n', x_block)
      y_block = jax.lax.ppermute(x_block, 'i', [(i, (i + 1) % sz) for i in range(sz)])
      print('AFTER:\n', y_block)
      return y_block

    y = wrap(f7)(jnp.arange(8))
    print('FINAL RESULT:\n', y)
    assert capsys.readouterr().out == expected
    assert y.shape == (8,) and y.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(y), [6, 7, 0, 1, 2, 3, 4, 5])


def test_t16_axis_size_is_a_python_int():
    sizes = []

    @partial(shard_map, mesh=_mesh1d(), in_specs=P('i'), out_specs=P('i'))
    def f(x_block):
      sizes.append((jax.lax.psum(1, 'i'), jax.lax.axis_size('i')))
      return x_block

    f(jnp.arange(8))
    assert sizes == [(4, 4)] and all(type(s) is int for s in sizes[0])


def test_t16_ppermute_ref_matches_ppermute():
    def ppermute_ref(i, x_blocks, perm):
      results = [jnp.zeros_like(x_blocks[0])] * len(x_blocks)
      for src, dst in perm:
        results[dst] = x_blocks[src]
      return results

    mesh1d = _mesh1d()
    x = np.arange(8, dtype=np.int32)
    blocks = [jnp.array(b) for b in np.split(x, 4)]
    # a full ring, and a partial perm whose non-destinations get zeros
    for perm in ([(i, (i + 1) % 4) for i in range(4)], [(0, 1)], [(3, 0), (1, 2)]):
        y = shard_map(lambda b: jax.lax.ppermute(b, 'i', perm), mesh=mesh1d,
                      in_specs=P('i'), out_specs=P('i'))(jnp.array(x))
        ref = ppermute_ref(None, blocks, perm)
        np.testing.assert_array_equal(np.asarray(y),
                                      np.concatenate([np.asarray(r) for r in ref]))


# --- T17: psum_scatter as a ring of ppermutes, f8 ------------------------------------------------

def psum_scatter_2024(x, axis_name, *, tiled=False):
  size = jax.lax.psum(1, axis_name)
  idx = jax.lax.axis_index(axis_name)  # function instance index along axis_name
  if tiled:
    x = x.reshape(size, -1, *x.shape[1:])  # split leading axis
  shift = partial(jax.lax.ppermute, axis_name=axis_name,
                  perm=[(i, (i - 1) % size) for i in range(size)])
  for i in range(1, size):
    update = shift(x[(idx + i) % size])
    x = x.at[(idx + i + 1) % size].add(update)
  return x[idx]


def psum_scatter_2025(x, axis_name, *, tiled=False):
  size = jax.lax.axis_size(axis_name)
  idx = jax.lax.axis_index(axis_name)  # function instance index along axis_name
  if tiled:
    x = x.reshape(size, -1, *x.shape[1:])  # split leading axis
  shift = partial(jax.lax.ppermute, axis_name=axis_name,
                  perm=[(i, (i - 1) % size) for i in range(size)])
  for i in range(1, size):
    update = shift(x[(idx + i) % size])
    x = x.at[(idx + i + 1) % size].add(update)
  return x[idx]


@pytest.mark.parametrize("psum_scatter", [psum_scatter_2024, psum_scatter_2025],
                         ids=["2024", "2025"])
@pytest.mark.parametrize("wrap, expected", [pytest.param(eager, SCATTERED_EAGER, id="eager"),
                                            pytest.param(jax.jit, SCATTERED_JIT, id="jit")])
def test_t17_ring_psum_scatter_f8(wrap, expected, psum_scatter, capsys):
    mesh1d = _mesh1d()

    @partial(shard_map, mesh=mesh1d, in_specs=P('i'), out_specs=P('i'))
    def f8(x_block):
      print('BEFORE:\n', x_block)
      y_block = psum_scatter(x_block, 'i', tiled=True)
      print('AFTER:\n', y_block)
      return y_block

    x = jnp.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2])
    y = wrap(f8)(x)
    print('FINAL RESULT:\n', y)
    assert capsys.readouterr().out == expected
    assert y.shape == (4,) and y.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(y), [22, 20, 12, 17])


@pytest.mark.parametrize("wrap", [eager, jax.jit], ids=["eager", "jit"])
def test_t17_ring_psum_scatter_untiled_and_on_rows(wrap):
    # The ring helper is general: untiled on a (4,) block per device, and tiled on 2-D blocks.
    mesh1d = _mesh1d()
    x = np.arange(32, dtype=np.float32).reshape(16, 2)
    f = shard_map(lambda b: psum_scatter_2025(b, 'i', tiled=True), mesh=mesh1d,
                  in_specs=P('i'), out_specs=P('i'))
    expected = sum(np.split(x, 4))  # (4, 2); device k keeps row k
    np.testing.assert_array_equal(np.asarray(wrap(f)(jnp.array(x))), expected)
    g = shard_map(lambda b: psum_scatter_2025(b, 'i')[None], mesh=mesh1d,
                  in_specs=P('i'), out_specs=P('i'))
    np.testing.assert_array_equal(np.asarray(wrap(g)(jnp.array(X16))), [22, 20, 12, 17])


# --- T18: all_to_all f9 --------------------------------------------------------------------------

F9_AFTER = ["[3 5 5 9]", "[1 9 3 7]", "[4 2 5 1]", "[1 6 8 2]"]
F9_EAGER = printed(X16_BLOCKS, F9_AFTER, "[3 5 5 9 1 9 3 7 4 2 5 1 1 6 8 2]")
F9_JIT = printed(None, None, "[3 5 5 9 1 9 3 7 4 2 5 1 1 6 8 2]",
                 traced=("i32[4]{i}", "i32[4]{i}"))


@pytest.mark.parametrize("wrap, expected", [pytest.param(eager, F9_EAGER, id="eager"),
                                            pytest.param(jax.jit, F9_JIT, id="jit")])
def test_t18_all_to_all_f9(wrap, expected, capsys):
    mesh1d = _mesh1d()

    @partial(shard_map, mesh=mesh1d, in_specs=P('i'), out_specs=P('i'))
    def f9(x_block):
      print('BEFORE:\n', x_block)
      y_block = jax.lax.all_to_all(x_block, 'i', split_axis=0, concat_axis=0,
                                   tiled=True)
      print('AFTER:\n', y_block)
      return y_block

    x = jnp.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2])
    y = wrap(f9)(x)
    print('FINAL RESULT:\n', y)
    assert capsys.readouterr().out == expected
    assert y.shape == (16,) and y.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(y), [3, 5, 5, 9, 1, 9, 3, 7, 4, 2, 5, 1, 1, 6, 8, 2])


def test_t18_all_to_all_ref_matches_all_to_all():
    def all_to_all_ref(_, x_blocks, *, tiled=False):
      axis_size = len(x_blocks)
      if tiled:
        splits = [jnp.array_split(x, axis_size) for x in x_blocks]
        return [jnp.concatenate(s) for s in zip(*splits)]
      else:
        splits = [list(x) for x in x_blocks]
        return [jnp.stack(s) for s in zip(*splits)]

    mesh1d = _mesh1d()
    x = np.array(X16, dtype=np.int32)
    blocks = [jnp.array(b) for b in np.split(x, 4)]
    for tiled in (True, False):
        y = shard_map(lambda b: jax.lax.all_to_all(b, 'i', 0, 0, tiled=tiled), mesh=mesh1d,
                      in_specs=P('i'), out_specs=P('i'))(jnp.array(x))
        ref = all_to_all_ref(None, blocks, tiled=tiled)
        np.testing.assert_array_equal(np.asarray(y), np.concatenate([np.asarray(r) for r in ref]))


# --- T19, T20: collective matmuls ----------------------------------------------------------------

def _matmul_setup():
    mesh = Mesh(jax.devices()[:4], ('i',))

    def device_put(x, pspec):
      return jax.device_put(x, NamedSharding(mesh, pspec))

    lhs_spec = P('i', None)
    lhs = device_put(jax.random.normal(jax.random.key(0), (8, 8)), lhs_spec)
    rhs_spec = P('i', None)
    rhs = device_put(jax.random.normal(jax.random.key(1), (8, 4)), rhs_spec)
    return mesh, device_put, lhs, rhs


def _check_matmul(out, lhs, rhs, capsys):
    print(jnp.allclose(out, lhs @ rhs, atol=1e-3, rtol=1e-3))
    assert capsys.readouterr().out == "True\n"
    assert out.shape == (8, 4) and out.dtype == np.float32
    np.testing.assert_allclose(np.asarray(out), np.asarray(lhs) @ np.asarray(rhs),
                               rtol=1e-5, atol=1e-5)
    assert out.sharding == NamedSharding(lhs.sharding.mesh, P('i', None))
    # as the shard_map's out_specs write it; under jit as JAX spells what its compiler worked
    # out: as the first argument where laid out alike, else without the trailing None
    spelt = {P('i', None), P('i',) if lhs.sharding.spec != P('i', None) else P('i', None)}
    assert out.sharding.spec in spelt


def test_t19_inputs_are_placed():
    mesh, _, lhs, rhs = _matmul_setup()
    assert lhs.shape == (8, 8) and rhs.shape == (8, 4) and lhs.dtype == np.float32
    assert lhs.sharding == NamedSharding(mesh, P('i', None))
    assert rhs.sharding == NamedSharding(mesh, P('i', None))
    assert [s.data.shape for s in rhs.addressable_shards] == [(2, 4)] * 4
    # random, not constant: the matmul checks below would be vacuous otherwise
    assert np.unique(np.asarray(lhs)).size == 64 and np.asarray(lhs).std() > 0.3


def test_t19_matmul_allgather(capsys):
    mesh, _, lhs, rhs = _matmul_setup()
    lhs_spec = rhs_spec = P('i', None)

    @jax.jit
    @partial(shard_map, mesh=mesh, in_specs=(lhs_spec, rhs_spec),
             out_specs=rhs_spec)
    def matmul_allgather(lhs_block, rhs_block):
      rhs = jax.lax.all_gather(rhs_block, 'i', tiled=True)
      return lhs_block @ rhs

    out = matmul_allgather(lhs, rhs)
    _check_matmul(out, lhs, rhs, capsys)


@pytest.mark.parametrize("axis_size", SIZES)
@pytest.mark.parametrize("wrap", [eager, jax.jit], ids=["eager", "jit"])
def test_t19_matmul_allgather_overlapped(wrap, axis_size, capsys):
    mesh, _, lhs, rhs = _matmul_setup()
    lhs_spec = rhs_spec = P('i', None)

    @partial(shard_map, mesh=mesh, in_specs=(lhs_spec, rhs_spec),
             out_specs=rhs_spec)
    def matmul_allgather_overlapped(lhs_block, rhs_block):
      size = axis_size()
      idx = jax.lax.axis_index('i')
      shift = partial(jax.lax.ppermute, axis_name='i',
                      perm=[(i, (i + 1) % size) for i in range(size)])

      B = lhs_block.shape[1] // size
      lhs_blocks = lambda i: lax.dynamic_slice_in_dim(lhs_block, i * B, B, 1)

      out_block = lhs_blocks(idx) @ rhs_block
      for i in range(1, size):
        rhs_block = shift(rhs_block)
        out_block += lhs_blocks((idx - i) % size) @ rhs_block
      return out_block

    out = wrap(matmul_allgather_overlapped)(lhs, rhs)
    _check_matmul(out, lhs, rhs, capsys)


@pytest.mark.parametrize("wrap", [eager, jax.jit], ids=["eager", "jit"])
def test_t19_matmul_allgather_overlapped_bidi_2024(wrap, capsys):
    # The 2024 tutorial's version: two half-size matmuls per step.
    mesh, _, lhs, rhs = _matmul_setup()
    lhs_spec = rhs_spec = P('i', None)

    @partial(shard_map, mesh=mesh, in_specs=(lhs_spec, rhs_spec),
             out_specs=rhs_spec)
    def matmul_allgather_overlapped_bidi(lhs_block, rhs_block):
      size = jax.lax.psum(1, 'i')
      idx = jax.lax.axis_index('i')
      shift_up = partial(jax.lax.ppermute, axis_name='i',
                         perm=[(i, (i + 1) % size) for i in range(size)])
      shift_dn = partial(jax.lax.ppermute, axis_name='i',
                         perm=[(i, (i - 1) % size) for i in range(size)])

      B = lhs_block.shape[1] // size // 2  # half-size blocks
      lhs_blocks = lambda i, hi: lax.dynamic_slice_in_dim(lhs_block, (2*i+hi) * B, B, 1)

      rhs_block_lo, rhs_block_hi = jnp.split(rhs_block, 2, axis=0)
      out_block  = lhs_blocks(idx, 0) @ rhs_block_lo
      out_block += lhs_blocks(idx, 1) @ rhs_block_hi
      for i in range(1, size):
        rhs_block_lo = shift_up(rhs_block_lo)
        rhs_block_hi = shift_dn(rhs_block_hi)
        out_block += lhs_blocks((idx - i) % size, 0) @ rhs_block_lo
        out_block += lhs_blocks((idx + i) % size, 1) @ rhs_block_hi
      return out_block

    out = wrap(matmul_allgather_overlapped_bidi)(lhs, rhs)
    _check_matmul(out, lhs, rhs, capsys)


@pytest.mark.parametrize("wrap", [eager, jax.jit], ids=["eager", "jit"])
def test_t19_matmul_allgather_overlapped_bidi_pad_and_add(wrap, capsys):
    # The current tutorial's version: pad both half-blocks onto one full-size block.
    mesh, _, lhs, rhs = _matmul_setup()
    lhs_spec = rhs_spec = P('i', None)

    @partial(shard_map, mesh=mesh, in_specs=(lhs_spec, rhs_spec),
             out_specs=rhs_spec)
    def matmul_allgather_overlapped_bidi(lhs_block, rhs_block):
      size = jax.lax.axis_size('i')
      idx = jax.lax.axis_index('i')
      shift_up = partial(jax.lax.ppermute, axis_name='i',
                         perm=[(i, (i + 1) % size) for i in range(size)])
      shift_dn = partial(jax.lax.ppermute, axis_name='i',
                         perm=[(i, (i - 1) % size) for i in range(size)])

      B = lhs_block.shape[1] // size // 2  # half-size blocks
      lhs_blocks = lambda i, hi: lax.dynamic_slice_in_dim(lhs_block, (2*i+hi) * B, B, 1)

      def block_matmul(rhs_lo, rhs_hi, i_lo, i_hi):
        lhs_lo = jnp.pad(lhs_blocks(i_lo, 0), [(0, 0), (0, B)])
        lhs_hi = jnp.pad(lhs_blocks(i_hi, 1), [(0, 0), (B, 0)])
        rhs_lo = jnp.pad(rhs_lo, [(0, B), (0, 0)])
        rhs_hi = jnp.pad(rhs_hi, [(B, 0), (0, 0)])
        return (lhs_lo + lhs_hi) @ (rhs_lo + rhs_hi)

      rhs_block_lo, rhs_block_hi = jnp.split(rhs_block, 2, axis=0)
      out_block = block_matmul(rhs_block_lo, rhs_block_hi, idx, idx)
      for i in range(1, size):
        rhs_block_lo = shift_up(rhs_block_lo)
        rhs_block_hi = shift_dn(rhs_block_hi)
        out_block += block_matmul(rhs_block_lo, rhs_block_hi,
                                  (idx - i) % size, (idx + i) % size)
      return out_block

    out = wrap(matmul_allgather_overlapped_bidi)(lhs, rhs)
    _check_matmul(out, lhs, rhs, capsys)


def _psumscatter_setup():
    mesh, device_put, lhs, rhs = _matmul_setup()
    lhs_spec = P(None, 'i')
    lhs = device_put(lhs, lhs_spec)

    rhs_spec = P('i', None)
    rhs = device_put(rhs, rhs_spec)
    return mesh, lhs_spec, lhs, rhs_spec, rhs


def test_t20_inputs_are_resharded():
    mesh, lhs_spec, lhs, _, rhs = _psumscatter_setup()
    assert lhs.sharding == NamedSharding(mesh, P(None, 'i'))
    assert [s.data.shape for s in lhs.addressable_shards] == [(8, 2)] * 4
    assert rhs.sharding == NamedSharding(mesh, P('i', None))
    _, _, lhs0, rhs0 = _matmul_setup()
    np.testing.assert_array_equal(np.asarray(lhs), np.asarray(lhs0))


@pytest.mark.parametrize("wrap", [eager, jax.jit], ids=["eager", "jit"])
def test_t20_matmul_psumscatter(wrap, capsys):
    mesh, lhs_spec, lhs, rhs_spec, rhs = _psumscatter_setup()

    @partial(shard_map, mesh=mesh, in_specs=(lhs_spec, rhs_spec),
             out_specs=rhs_spec)
    def matmul_psumscatter(lhs_block, rhs_block):
      out_summand = lhs_block @ rhs_block
      return jax.lax.psum_scatter(out_summand, 'i', tiled=True)

    out = wrap(matmul_psumscatter)(lhs, rhs)
    _check_matmul(out, lhs, rhs, capsys)


@pytest.mark.parametrize("axis_size", SIZES)
@pytest.mark.parametrize("wrap", [eager, jax.jit], ids=["eager", "jit"])
def test_t20_matmul_psumscatter_overlapped(wrap, axis_size, capsys):
    mesh, lhs_spec, lhs, rhs_spec, rhs = _psumscatter_setup()

    @partial(shard_map, mesh=mesh, in_specs=(lhs_spec, rhs_spec),
             out_specs=rhs_spec)
    def matmul_psumscatter_overlapped(lhs_block, rhs_block):
      size = axis_size()
      idx = jax.lax.axis_index('i')
      shift = partial(jax.lax.ppermute, axis_name='i',
                      perm=[(i, (i - 1) % size) for i in range(size)])
      lhs_block = lhs_block.reshape(size, -1, lhs_block.shape[1])  # split 1st axis

      out_summand = lhs_block[(idx + 1) % size] @ rhs_block
      for i in range(1, size):
        out_summand = shift(out_summand)
        out_summand += lhs_block[(idx + i + 1) % size] @ rhs_block
      return out_summand

    out = wrap(matmul_psumscatter_overlapped)(lhs, rhs)
    _check_matmul(out, lhs, rhs, capsys)


@pytest.mark.parametrize("axis_size", SIZES)
@pytest.mark.parametrize("wrap", [eager, jax.jit], ids=["eager", "jit"])
def test_t20_matmul_psumscatter_overlapped_bidi(wrap, axis_size, capsys):
    mesh, lhs_spec, lhs, rhs_spec, rhs = _psumscatter_setup()

    @partial(shard_map, mesh=mesh, in_specs=(lhs_spec, rhs_spec),
             out_specs=rhs_spec)
    def matmul_psumscatter_overlapped_bidi(lhs_block, rhs_block):
      size = axis_size()
      idx = jax.lax.axis_index('i')
      shift_up = partial(jax.lax.ppermute, axis_name='i',
                         perm=[(i, (i + 1) % size) for i in range(size)])
      shift_dn = partial(jax.lax.ppermute, axis_name='i',
                         perm=[(i, (i - 1) % size) for i in range(size)])

      B = lhs_block.shape[0] // size // 2  # half-size blocks
      lhs_blocks = lambda i, hi: lax.dynamic_slice_in_dim(lhs_block, (2*i+hi) * B, B, 0)

      out_summand_lo = lhs_blocks((idx - 1) % size, 0) @ rhs_block
      out_summand_hi = lhs_blocks((idx + 1) % size, 1) @ rhs_block
      for i in range(1, size):
        out_summand_lo = shift_up(out_summand_lo)
        out_summand_hi = shift_dn(out_summand_hi)
        out_summand_lo += lhs_blocks((idx - i - 1) % size, 0) @ rhs_block
        out_summand_hi += lhs_blocks((idx + i + 1) % size, 1) @ rhs_block
      return jnp.concatenate([out_summand_lo, out_summand_hi])

    out = wrap(matmul_psumscatter_overlapped_bidi)(lhs, rhs)
    _check_matmul(out, lhs, rhs, capsys)


# --- V7, V8: pvary / pcast, and the implicit pvary in a jaxpr ------------------------------------

V7_CASTS = [pytest.param(lambda x: jax.lax.pvary(x, 'i'), id="pvary"),                # 2025
            pytest.param(lambda x: jax.lax.pcast(x, 'i', to='varying'), id="pcast")]  # 2026


@pytest.mark.parametrize("cast", V7_CASTS)
@pytest.mark.parametrize("wrap", [eager, jax.jit], ids=["eager", "jit"])
def test_v7_pvary_an_invariant_input(wrap, cast, capsys):
    mesh = jax.make_mesh((2,), ('i',))

    @jax.shard_map(mesh=mesh, in_specs=P(), out_specs=None)
    def f(x):
      print(jax.typeof(x))  # f32[6]
      y = cast(x)
      print(jax.typeof(y))  # f32[6]{i}

    x = jnp.arange(6.)
    assert wrap(f)(x) is None
    assert capsys.readouterr().out == "float32[6]\nfloat32[6]{V:i}\n"


def test_v7_pvary_is_a_no_op_on_values():
    mesh = jax.make_mesh((2,), ('i',))
    f = jax.shard_map(lambda x: jax.lax.pvary(x, 'i'), mesh=mesh, in_specs=P(),
                      out_specs=P('i'))
    np.testing.assert_array_equal(np.asarray(f(jnp.arange(6.))), np.tile(np.arange(6.), 2))


def test_v8_jaxpr_shows_the_implicit_pvary():
    mesh = jax.make_mesh((2,), ('i',))

    @jax.shard_map(mesh=mesh, in_specs=(P('i'), P()), out_specs=P('i'))
    def f(x, y):
      return x * y

    x = jnp.arange(6.)
    y = jnp.arange(3.)
    text = str(jax.make_jaxpr(f)(x, y))
    print(text)
    lines = [line.strip().split("  #")[0] for line in text.splitlines()]
    assert "{ lambda ; a:f32[6] b:f32[3]. let" in lines
    assert "in_specs=(P('i'), P())" in lines
    assert "jaxpr={ lambda ; d:f32[3]{i} e:f32[3]. let" in lines
    pvary = lines.index("f:f32[3]{i} = pvary[mesh_axes=('i',)] e")
    mul = lines.index("g:f32[3]{i} = mul d f")
    assert pvary < mul
    np.testing.assert_array_equal(np.asarray(f(x, y)), [0., 1., 4., 0., 4., 10.])


# --- the same collectives in the 2025 call form, and the current tutorial's mesh-less form -------

BODIES = {
    "f4": (lambda b: jax.lax.all_gather(b, 'i', tiled=True), [3, 9, 5, 2],
           np.tile([3, 9, 5, 2], 4)),
    "f5": (lambda b: jax.lax.all_gather(b, 'i', tiled=False), [3, 9, 5, 2],
           np.tile([3, 9, 5, 2], 4)[:, None]),
    "f6": (lambda b: jax.lax.psum_scatter(b, 'i', tiled=True), X16, [22, 20, 12, 17]),
    "f7": (lambda b: jax.lax.ppermute(b, 'i', [(i, (i + 1) % 4) for i in range(4)]),
           list(range(8)), [6, 7, 0, 1, 2, 3, 4, 5]),
    "f8": (lambda b: psum_scatter_2025(b, 'i', tiled=True), X16, [22, 20, 12, 17]),
    "f9": (lambda b: jax.lax.all_to_all(b, 'i', split_axis=0, concat_axis=0, tiled=True), X16,
           [3, 5, 5, 9, 1, 9, 3, 7, 4, 2, 5, 1, 1, 6, 8, 2]),
}


@pytest.mark.parametrize("name", sorted(BODIES))
@pytest.mark.parametrize("wrap", [eager, jax.jit], ids=["eager", "jit"])
def test_collectives_in_the_2025_call_form(wrap, name):
    body, x, expected = BODIES[name]
    mesh1d = jax.make_mesh((4,), ('i',))
    f = jax.shard_map(body, mesh=mesh1d, in_specs=P('i'), out_specs=P('i'))
    y = wrap(f)(jnp.array(x))
    np.testing.assert_array_equal(np.asarray(y), expected)
    assert y.dtype == np.int32 and y.sharding == NamedSharding(mesh1d, P('i'))


def test_current_tutorial_mesh_from_set_mesh():
    # The current tutorial: jax.set_mesh(mesh1d), then shard_map without mesh=, specs as jax.P.
    # (Its mesh1d is Mesh(...), Auto: on make_mesh's Explicit axes the replicated jnp array
    # would not match in_specs, JAX's ValueError.)
    mesh1d = jax.sharding.Mesh(jax.devices()[:4], ('i',))
    with jax.set_mesh(mesh1d):
      @jax.shard_map(in_specs=jax.P('i'), out_specs=jax.P('i'))
      def f6(x_block):
        y_block = jax.lax.psum_scatter(x_block, 'i', tiled=True)
        return y_block

      x = jnp.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2])
      y = f6(x)
    np.testing.assert_array_equal(np.asarray(y), [22, 20, 12, 17])
