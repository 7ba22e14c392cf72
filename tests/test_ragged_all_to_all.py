"""lax.ragged_all_to_all: values against a plain-numpy reference over random meshes, slice
counts and sizes (eager, jit, every backend), JAX's documented example, grad against finite
differences, vmap against a loop, the lowered node and its text, and every error.

The reference shares no code with shardc: each receiver starts from its own ``output`` and,
for every sender in rank order and every slice that sender addresses to it, copies the
sender's rows into the receiver's rows at the sender's ``output_offsets``.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardc
import shardc.numpy as jnp
from ir.parser import parse_module
from ir.printer import print_module
from shardc import lax
from shardc.sharding import PartitionSpec as P

SETTINGS = dict(derandomize=True, deadline=None, max_examples=25,
                suppress_health_check=[HealthCheck.too_slow])

ARGS = ("operand", "output", "input_offsets", "send_sizes", "output_offsets", "recv_sizes")


def reference(members: list) -> list:
    """``members[s]``: sender s's six arrays (rank order). Each receiver's result."""
    n = len(members)
    results = []
    for r in range(n):
        out = members[r]["output"].copy()
        for s in range(n):
            m = members[s]
            per = len(m["input_offsets"]) // n
            for i in range(r * per, (r + 1) * per):
                start, size, at = m["input_offsets"][i], m["send_sizes"][i], m["output_offsets"][i]
                out[at:at + size] = m["operand"][start:start + size]
        results.append(out)
    return results


def layout(sizes: np.ndarray, rows_in: int, rows_out: int, gaps: np.ndarray) -> list:
    """Six arrays per member for ``sizes[s, i]`` (sender s, slice i): each sender packs its
    slices in order with ``gaps`` rows between them; each receiver lays out what it receives
    sender by sender, slice by slice."""
    n, k = sizes.shape
    per = k // n
    input_offsets = np.zeros((n, k), np.int32)
    for s in range(n):
        at = 0
        for i in range(k):
            at += gaps[s, i]
            input_offsets[s, i] = at
            at += sizes[s, i]
        assert at <= rows_in
    output_offsets = np.zeros((n, k), np.int32)
    recv_sizes = np.zeros((n, k), np.int32)
    for r in range(n):
        at = 0
        for s in range(n):
            for q in range(per):
                i = r * per + q
                output_offsets[s, i] = at
                recv_sizes[r, s * per + q] = sizes[s, i]
                at += sizes[s, i]
        assert at <= rows_out
    return [input_offsets, sizes.astype(np.int32), output_offsets, recv_sizes]


def ragged_map(mesh, axis):
    def body(*blocks):
        return lax.ragged_all_to_all(*[b[0] for b in blocks], axis_name=axis)[None]
    return shardc.shard_map(body, mesh=mesh, in_specs=P(axis), out_specs=P(axis))


@st.composite
def cases(draw):
    n = draw(st.sampled_from([2, 3, 4]))
    per = draw(st.integers(1, 3))
    trailing = draw(st.sampled_from([(), (2,), (3, 2)]))
    sizes = np.array(draw(st.lists(st.integers(0, 3), min_size=n * n * per,
                                   max_size=n * n * per))).reshape(n, n * per)
    gaps = np.array(draw(st.lists(st.integers(0, 2), min_size=n * n * per,
                                  max_size=n * n * per))).reshape(n, n * per)
    rows_in = int((sizes + gaps).sum(axis=1).max()) + draw(st.integers(0, 2))
    rows_out = int(sizes.sum()) + draw(st.integers(0, 2))     # room for any receiver
    dtype = draw(st.sampled_from([np.float32, np.int32]))
    return n, trailing, sizes, gaps, rows_in, rows_out, dtype


@settings(**SETTINGS)
@given(cases())
def test_values_match_the_reference(case):
    n, trailing, sizes, gaps, rows_in, rows_out, dtype = case
    rng = np.random.default_rng(n * 100 + sizes.size)
    operand = rng.integers(1, 100, (n, rows_in) + trailing).astype(dtype)
    output = -rng.integers(1, 100, (n, rows_out) + trailing).astype(dtype)
    arrays = [operand, output] + layout(sizes, rows_in, rows_out, gaps)
    want = np.stack(reference([dict(zip(ARGS, [a[s] for a in arrays])) for s in range(n)]))
    mesh = shardc.make_mesh((n,), ("i",), devices=shardc.devices()[:n])
    f = ragged_map(mesh, "i")
    for got in (f(*arrays), shardc.jit(f)(*arrays)):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(np.asarray(got), want)


def test_jax_documented_example():
    mesh = shardc.make_mesh((2,), ("i",), devices=shardc.devices()[:2])
    arrays = [np.array([[1, 2, 2], [3, 4, 0]], np.float32), np.zeros((2, 4), np.float32),
              np.array([[0, 1], [0, 1]], np.int32), np.array([[1, 2], [1, 1]], np.int32),
              np.array([[0, 0], [1, 2]], np.int32), np.array([[1, 1], [2, 1]], np.int32)]
    got = shardc.jit(ragged_map(mesh, "i"))(*arrays)
    np.testing.assert_array_equal(np.asarray(got), [[1, 3, 0, 0], [2, 2, 4, 0]])


def test_over_two_mesh_axes_and_within_groups_of_the_other():
    """Over ('x', 'y') the members are ranked x-major; over 'y' alone each x row is a group."""
    mesh = shardc.make_mesh((2, 2), ("x", "y"), devices=shardc.devices()[:4])
    sizes = np.array([[1, 0, 2, 1], [0, 1, 1, 1], [2, 1, 0, 0], [1, 1, 1, 0]])
    arrays = [np.arange(4 * 5, dtype=np.float32).reshape(4, 5) + 1,
              np.zeros((4, 8), np.float32)] + layout(sizes, 5, 8, np.zeros_like(sizes))
    members = [dict(zip(ARGS, [a[s] for a in arrays])) for s in range(4)]
    f = ragged_map(mesh, ("x", "y"))
    np.testing.assert_array_equal(np.asarray(f(*arrays)), np.stack(reference(members)))

    pairs = np.array([[1, 2], [0, 1]])
    arrays = [np.arange(4 * 3, dtype=np.float32).reshape(4, 3) + 1,
              np.zeros((4, 5), np.float32)]
    per_group = [layout(pairs, 3, 5, np.zeros_like(pairs)) for _ in range(2)]
    arrays += [np.concatenate([g[j] for g in per_group]) for j in range(4)]
    members = [dict(zip(ARGS, [a[s] for a in arrays])) for s in range(4)]
    want = np.stack(reference(members[:2]) + reference(members[2:]))

    def body(*blocks):
        return lax.ragged_all_to_all(*[b[0] for b in blocks], axis_name="y")[None]
    g = shardc.shard_map(body, mesh=mesh, in_specs=P(("x", "y")), out_specs=P(("x", "y")))
    np.testing.assert_array_equal(np.asarray(shardc.jit(g)(*arrays)), want)


def _small_case():
    sizes = np.array([[1, 2], [2, 1]])
    rows = [np.arange(12, dtype=np.float32).reshape(2, 3, 2) / 7 + 0.5,
            np.arange(16, dtype=np.float32).reshape(2, 4, 2) / 5 - 1.0]
    return rows + layout(sizes, 3, 4, np.array([[0, 0], [0, 0]]))


def test_grad_matches_finite_differences():
    mesh = shardc.make_mesh((2,), ("i",), devices=shardc.devices()[:2])
    operand, output, *offsets = _small_case()
    weights = np.linspace(-1.0, 2.0, output.size, dtype=np.float32).reshape(output.shape)
    f = ragged_map(mesh, "i")

    def loss(op, out):
        return jnp.sum(f(op, out, *offsets) * weights)

    members = lambda op, out: [dict(zip(ARGS, [a[s] for a in [op, out] + offsets]))
                               for s in range(2)]

    def numeric_loss(op, out):
        return float(np.sum(np.stack(reference(members(op, out))) * weights))

    g_op, g_out = shardc.jit(shardc.grad(loss, argnums=(0, 1)))(operand, output)
    for got, x, which in ((g_op, operand, 0), (g_out, output, 1)):
        want = np.zeros(x.shape)
        h = 0.25
        for index in np.ndindex(*x.shape):
            bumped = [operand.astype(np.float64), output.astype(np.float64)]
            bumped[which][index] += h
            up = numeric_loss(*bumped)
            bumped[which][index] -= 2 * h
            want[index] = (up - numeric_loss(*bumped)) / (2 * h)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
    # the output's rows that receive slices get no gradient; the others pass it through
    assert np.asarray(g_out)[0, 3].tolist() == weights[0, 3].tolist()
    assert np.asarray(g_out)[0, 0].tolist() == [0.0, 0.0]


def test_jvp_is_the_ragged_all_to_all_of_the_tangents():
    mesh = shardc.make_mesh((2,), ("i",), devices=shardc.devices()[:2])
    operand, output, *offsets = _small_case()
    f = ragged_map(mesh, "i")
    t_op, t_out = operand * 3 - 1, output * 2 + 1
    primal, tangent = shardc.jvp(lambda a, b: f(a, b, *offsets), (operand, output),
                                 (t_op, t_out))
    np.testing.assert_array_equal(np.asarray(primal), np.asarray(f(operand, output, *offsets)))
    np.testing.assert_array_equal(np.asarray(tangent), np.asarray(f(t_op, t_out, *offsets)))


def test_vmap_inside_shard_map_matches_a_loop():
    mesh = shardc.make_mesh((2,), ("i",), devices=shardc.devices()[:2])
    cases_ = [_small_case() for _ in range(3)]
    for b, c in enumerate(cases_):
        c[0] = c[0] * (b + 1)
        c[3] = np.where(c[3] > 0, c[3] - b % 2, 0).astype(np.int32)   # differing sizes
        c[5] = np.ascontiguousarray(c[5])
    # recv_sizes follow send_sizes: recompute each case's receive sizes from its send sizes
    for c in cases_:
        c[5] = np.array([[c[3][0, 0], c[3][1, 0]], [c[3][0, 1], c[3][1, 1]]], np.int32)
    batched = [np.stack([c[j] for c in cases_], axis=1) for j in range(6)]

    def body(*blocks):
        one = lambda *xs: lax.ragged_all_to_all(*xs, axis_name="i")
        return shardc.vmap(one)(*[b[0] for b in blocks])[None]
    f = shardc.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
    got = np.asarray(shardc.jit(f)(*batched))
    loop = ragged_map(mesh, "i")
    for b, c in enumerate(cases_):
        np.testing.assert_array_equal(got[:, b], np.asarray(loop(*c)))


def test_vmap_over_the_communicating_axis_is_not_implemented():
    mesh = shardc.make_mesh((2,), ("i",), devices=shardc.devices()[:2])
    operand, output, *offsets = _small_case()

    def body(*blocks):
        one = lambda *xs: lax.ragged_all_to_all(*xs, axis_name="b")
        return shardc.vmap(one, axis_name="b")(*blocks)
    f = shardc.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
    with pytest.raises(NotImplementedError, match="ragged_all_to_all"):
        f(operand, output, *offsets)


def test_the_result_varies_over_the_axis_even_from_an_invariant_output():
    mesh = shardc.make_mesh((2,), ("i",), devices=shardc.devices()[:2])
    operand, output, *offsets = _small_case()

    def body(op, io, ss, oo, rs):
        return lax.ragged_all_to_all(op[0], jnp.zeros((4, 2)), io[0], ss[0], oo[0], rs[0],
                                     axis_name="i")
    f = shardc.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P())
    with pytest.raises(Exception, match="out_specs") as info:
        f(operand, *offsets)
    assert "i" in str(info.value)


def test_lowered_node_prints_parses_and_runs():
    mesh = shardc.make_mesh((2,), ("i",), devices=shardc.devices()[:2])
    arrays = _small_case()
    compiled = shardc.jit(ragged_map(mesh, "i")).lower(*arrays)
    text = print_module(compiled.module)
    assert "ragged_all_to_all[" in text
    assert print_module(parse_module(text)) == text


def test_slices_outside_the_arrays_are_errors_naming_the_slice():
    mesh = shardc.make_mesh((2,), ("i",), devices=shardc.devices()[:2])
    operand, output, input_offsets, send_sizes, output_offsets, recv_sizes = _small_case()
    bad = input_offsets.copy()
    bad[1, 1] = 2                    # sender 1's slice 1 (one row) fits; two rows do not
    sizes = send_sizes.copy()
    sizes[1, 1] = 2
    with pytest.raises(ValueError, match=r"slice 1 of member 1 .*operand's 3 rows"):
        ragged_map(mesh, "i")(operand, output, bad, sizes, output_offsets, recv_sizes)
    negative = send_sizes.copy()
    negative[0, 0] = -1
    with pytest.raises(ValueError, match="slice 0 of member 0"):
        shardc.jit(ragged_map(mesh, "i"))(operand, output, input_offsets, negative,
                                          output_offsets, recv_sizes)


@pytest.mark.parametrize("which, value, message", [
    (2, np.zeros((2, 2), np.float32), "input_offsets must be integer type"),
    (3, np.zeros((2, 2), np.float32), "send_sizes must be integer type"),
    (4, np.zeros((2, 2, 1), np.int32), r"output_offsets must be rank 1 .* got shape \(2, 1\)"),
    (5, np.zeros((2, 0), np.int32), r"recv_sizes must be rank 1 .* got shape \(0,\)"),
])
def test_bad_offsets_are_value_errors_as_in_jax(which, value, message):
    mesh = shardc.make_mesh((2,), ("i",), devices=shardc.devices()[:2])
    arrays = _small_case()
    arrays[which] = value
    with pytest.raises(ValueError, match=message):
        ragged_map(mesh, "i")(*arrays)


def test_mismatched_lengths_and_shapes_are_type_errors():
    mesh = shardc.make_mesh((2,), ("i",), devices=shardc.devices()[:2])
    arrays = _small_case()
    short = list(arrays)
    short[5] = np.zeros((2, 1), np.int32)
    with pytest.raises(TypeError, match=r"one length, a multiple of the axis size 2; got "
                                        r"\[2, 2, 2, 1\]"):
        ragged_map(mesh, "i")(*short)
    odd = list(arrays)
    odd[2:] = [np.zeros((2, 3), np.int32)] * 4
    with pytest.raises(TypeError, match="multiple of the axis size 2"):
        ragged_map(mesh, "i")(*odd)
    wide = list(arrays)
    wide[1] = np.zeros((2, 4, 3), np.float32)
    with pytest.raises(TypeError, match=r"operand f32\[3,2\]{i} and the output f32\[4,3\]{i}"):
        ragged_map(mesh, "i")(*wide)
    mixed = list(arrays)
    mixed[1] = arrays[1].astype(np.int32)
    with pytest.raises(TypeError, match="leading dimension only"):
        ragged_map(mesh, "i")(*mixed)


def test_unbound_axis_name_and_groups():
    mesh = shardc.make_mesh((2,), ("i",), devices=shardc.devices()[:2])
    arrays = _small_case()

    def body(*blocks):
        return lax.ragged_all_to_all(*[b[0] for b in blocks], axis_name="j")[None]
    with pytest.raises(NameError, match="'j'"):
        shardc.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"))(*arrays)

    def grouped(*blocks):
        return lax.ragged_all_to_all(*[b[0] for b in blocks], axis_name="i",
                                     axis_index_groups=[[0], [1]])[None]
    with pytest.raises(NotImplementedError, match="ragged_all_to_all"):
        shardc.shard_map(grouped, mesh=mesh, in_specs=P("i"), out_specs=P("i"))(*arrays)
