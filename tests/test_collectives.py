"""Collectives (SEMANTICS 2): values against a plain-numpy reference, the literal examples,
every bad-argument error, replication types (2.9) and the lowered per-device nodes.

The reference below shares no code with shardc: it forms the device groups from the mesh shape
and the collective's axes (devices agreeing on every other axis, members ordered by the
mixed-radix rank over the listed axes, first listed major) and applies each collective's
definition from SEMANTICS 2 to the list of member blocks.

Every generated case gives device ``p`` (position ``p``, row-major) its own block: the global
input is the concatenation of the per-position blocks along dimension 0, with in_specs and
out_specs naming all mesh axes on dimension 0 in mesh order. The body adds a leading unit
dimension to its result, so every output (rank 0 included) concatenates back into the stack of
the per-position result blocks.
"""
from __future__ import annotations

import functools
import itertools
import math
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardc
import shardc.numpy as jnp
from shardc import lax
from shardc.sharding import Mesh, NamedSharding, PartitionSpec as P

SETTINGS = dict(derandomize=True, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

MESHES = [((8,), ("i",)), ((4,), ("i",)), ((4, 2), ("x", "y")), ((2, 4), ("x", "y")),
          ((2, 2, 2), ("x", "y", "z"))]


# --- the plain-numpy reference ------------------------------------------------------------------

def coords_of(mesh_shape) -> list:
    """Mesh coordinates in position order (row-major, last axis fastest)."""
    return list(itertools.product(*(range(n) for n in mesh_shape)))


def rank_over(mesh_shape, names, coord, axes) -> int:
    """Mixed-radix rank of ``coord`` over ``axes`` as listed, the first listed axis major."""
    size = dict(zip(names, mesh_shape))
    at = dict(zip(names, coord))
    rank = 0
    for a in axes:
        rank = rank * size[a] + at[a]
    return rank


def ref_groups(mesh_shape, names, axes) -> list:
    """Each group's member positions in rank order; groups sorted by first member's position."""
    groups: dict = {}
    for position, coord in enumerate(coords_of(mesh_shape)):
        others = tuple(c for a, c in zip(names, coord) if a not in axes)
        groups.setdefault(others, {})[rank_over(mesh_shape, names, coord, axes)] = position
    ordered = [tuple(members[r] for r in range(len(members))) for members in groups.values()]
    return sorted(ordered, key=lambda group: group[0])


def over_groups(mesh_shape, names, axes, blocks, rule) -> list:
    """Apply ``rule(xs) -> ys`` (member blocks in rank order) group by group; per-position out."""
    out = [None] * len(blocks)
    for group in ref_groups(mesh_shape, names, axes):
        ys = rule([blocks[p] for p in group])
        assert len(ys) == len(group)
        for p, y in zip(group, ys):
            out[p] = y
    return out


def ref_sum(xs):
    """xs[0] + ... + xs[N-1], in rank order; bool counts as int32."""
    xs = [x.astype(np.int32) if x.dtype == np.bool_ else x for x in xs]
    return functools.reduce(lambda a, b: a + b, xs)


def ref_psum(xs):
    return [ref_sum(xs)] * len(xs)


def ref_pmean(xs):
    mean = ref_sum(xs) / len(xs)
    return [mean.astype(np.float32 if xs[0].dtype.kind in "biu" else xs[0].dtype)] * len(xs)


def ref_pmax(xs):
    return [functools.reduce(np.maximum, xs)] * len(xs)


def ref_pmin(xs):
    return [functools.reduce(np.minimum, xs)] * len(xs)


def ref_all_gather(xs, *, axis, tiled):
    joined = np.concatenate(xs, axis) if tiled else np.stack(xs, axis)
    return [joined] * len(xs)


def ref_psum_scatter(xs, *, scatter_dimension, tiled):
    total, n = ref_sum(xs), len(xs)
    if tiled:
        return list(np.split(total, n, scatter_dimension))
    return [total.take(r, scatter_dimension) for r in range(n)]


def ref_ppermute(xs, *, perm):
    out = [np.zeros_like(xs[0])] * len(xs)
    for s, d in perm:
        out[d] = xs[s]
    return out


def ref_all_to_all(xs, *, split_axis, concat_axis, tiled):
    n = len(xs)
    if tiled:
        chunks = [np.split(x, n, split_axis) for x in xs]
        return [np.concatenate([chunks[s][d] for s in range(n)], concat_axis) for d in range(n)]
    return [np.stack([xs[s].take(d, split_axis) for s in range(n)], concat_axis)
            for d in range(n)]


def ref_pbroadcast(xs, *, source):
    return [xs[source]] * len(xs)


def ref_axis_index(mesh_shape, names, axes) -> list:
    return [np.int32(rank_over(mesh_shape, names, c, axes)) for c in coords_of(mesh_shape)]


# --- running a collective under shardc ---------------------------------------------------------

def all_axes_spec(names):
    return P(tuple(names))


def run_per_position(mesh, blocks, collective, *, check_vma=True):
    """Run ``collective`` on each device's block, eagerly and under jit; both results must be
    equal. Returns the stack of per-position result blocks (the eager one)."""
    spec = all_axes_spec(mesh.axis_names)

    def body(x):
        y = collective(x)
        return jnp.reshape(y, (1,) + tuple(y.shape))

    f = shardc.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=check_vma)
    x = jnp.asarray(np.concatenate(blocks, 0))
    eager = f(x)
    jitted = shardc.jit(f)(x)
    assert eager.dtype == jitted.dtype
    np.testing.assert_array_equal(np.asarray(eager), np.asarray(jitted))
    return eager


def check_against(eager, expected_blocks, dtype):
    expected = np.stack(expected_blocks)
    assert eager.dtype == np.dtype(dtype), (eager.dtype, dtype)
    assert expected.dtype == np.dtype(dtype), (expected.dtype, dtype)
    assert tuple(eager.shape) == expected.shape
    np.testing.assert_array_equal(np.asarray(eager), expected)


def blocks_of(mesh, fn, blocks, *, check_vma=True):
    """Per-position result blocks of ``fn`` (for the literal examples)."""
    out = np.asarray(run_per_position(mesh, [np.asarray(b) for b in blocks], fn,
                                      check_vma=check_vma))
    return [out[p] for p in range(mesh.size)]


def make_blocks(seed, n, shape, dtype) -> list:
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return [rng.integers(0, 2, shape).astype(bool) for _ in range(n)]
    if dtype.kind == "f":
        # fractional values: reductions must add in rank order to match bit for bit
        return [rng.standard_normal(shape).astype(dtype) for _ in range(n)]
    return [rng.integers(-9, 10, shape).astype(dtype) for _ in range(n)]


# --- strategies --------------------------------------------------------------------------------

@st.composite
def group_setups(draw):
    """(mesh, axes as a tuple, axis_name as passed): one axis, tuples in any order, all axes."""
    shape, names = draw(st.sampled_from(MESHES))
    order = draw(st.permutations(names))
    k = draw(st.integers(1, len(names)))
    axes = tuple(order[:k])
    form = draw(st.sampled_from(["str", "tuple", "list"] if k == 1 else ["tuple", "list"]))
    axis_name = axes[0] if form == "str" else (list(axes) if form == "list" else axes)
    return shardc.make_mesh(shape, names), axes, axis_name


def block_shapes(draw, rank=None):
    rank = draw(st.integers(1, 3)) if rank is None else rank
    return [draw(st.integers(1, 3)) for _ in range(rank)]


def ref_run(mesh, axes, blocks, rule):
    return over_groups(tuple(mesh.shape.values()), mesh.axis_names, axes, blocks, rule)


def group_size(mesh, axes):
    return math.prod(mesh.shape[a] for a in axes)


# --- generated cases: every collective against the reference ------------------------------------

REDUCERS = {
    "psum": (lax.psum, ref_psum),
    "pmean": (lax.pmean, ref_pmean),
    "pmax": (lax.pmax, ref_pmax),
    "pmin": (lax.pmin, ref_pmin),
}
REDUCED_DTYPE = {
    ("psum", "bool"): np.int32,
    ("pmean", "int32"): np.float32,
}


@pytest.mark.parametrize("name", sorted(REDUCERS))
@settings(max_examples=50, **SETTINGS)
@given(data=st.data())
def test_reductions_match_reference(name, data):
    mesh, axes, axis_name = data.draw(group_setups())
    dtypes = ["float32", "int32"] + (["bool"] if name == "psum" else [])
    dtype = data.draw(st.sampled_from(dtypes))
    shape = block_shapes(data.draw)
    check_vma = data.draw(st.booleans())
    blocks = make_blocks(data.draw(st.integers(0, 2**16)), mesh.size, shape, dtype)
    op, rule = REDUCERS[name]
    out = run_per_position(mesh, blocks, lambda x: op(x, axis_name), check_vma=check_vma)
    check_against(out, ref_run(mesh, axes, blocks, rule),
                  REDUCED_DTYPE.get((name, dtype), dtype))


MOVING_DTYPES = st.sampled_from(["float32", "int32", "bool"])


@settings(max_examples=100, **SETTINGS)
@given(data=st.data())
def test_all_gather_matches_reference(data):
    mesh, axes, axis_name = data.draw(group_setups())
    dtype = data.draw(MOVING_DTYPES)
    shape = block_shapes(data.draw)
    tiled = data.draw(st.booleans())
    out_rank = len(shape) if tiled else len(shape) + 1
    axis = data.draw(st.integers(-out_rank, out_rank - 1))
    to = data.draw(st.sampled_from(["varying", "invarying"]))
    check_vma = data.draw(st.booleans())
    blocks = make_blocks(data.draw(st.integers(0, 2**16)), mesh.size, shape, dtype)
    out = run_per_position(
        mesh, blocks, lambda x: lax.all_gather(x, axis_name, axis=axis, tiled=tiled, to=to),
        check_vma=check_vma)
    expected = ref_run(mesh, axes, blocks,
                       functools.partial(ref_all_gather, axis=axis, tiled=tiled))
    check_against(out, expected, dtype)


@settings(max_examples=100, **SETTINGS)
@given(data=st.data())
def test_psum_scatter_matches_reference(data):
    mesh, axes, axis_name = data.draw(group_setups())
    n = group_size(mesh, axes)
    dtype = data.draw(st.sampled_from(["float32", "int32"]))
    shape = block_shapes(data.draw)
    tiled = data.draw(st.booleans())
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    shape[dim] = n * data.draw(st.integers(1, 2)) if tiled else n
    check_vma = data.draw(st.booleans())
    blocks = make_blocks(data.draw(st.integers(0, 2**16)), mesh.size, shape, dtype)
    out = run_per_position(
        mesh, blocks,
        lambda x: lax.psum_scatter(x, axis_name, scatter_dimension=dim, tiled=tiled),
        check_vma=check_vma)
    expected = ref_run(mesh, axes, blocks, functools.partial(
        ref_psum_scatter, scatter_dimension=dim, tiled=tiled))
    check_against(out, expected, dtype)


@pytest.mark.parametrize("tiled", [True, False])
def test_psum_scatter_of_booleans_is_a_type_error(tiled):
    # JAX 0.10.2: TypeError "add does not accept dtype bool ..." (psum counts booleans;
    # psum_scatter does not); shardc used to return int32 counts
    x = jnp.asarray(np.array([True, False, True, True] * 4))
    raises_in_body(MESH_I, lambda v: lax.psum_scatter(v, "i", tiled=tiled), TypeError,
                   "psum_scatter: add does not accept dtype bool at position 0. Accepted dtypes "
                   "at position 0 are subtypes of integer, floating, complexfloating.",
                   in_specs=P(None) if not tiled else P("i"), x=x)


ZERO_SUMS = {
    "psum": lambda v: lax.psum(v, "i"),
    "pmean": lambda v: lax.pmean(v, "i"),
    "psum_scatter": lambda v: lax.psum_scatter(v, "i", tiled=True),
    "psum_scatter_untiled": lambda v: lax.psum_scatter(v.reshape(4, 1), "i"),
}


@pytest.mark.parametrize("backend", ["reference", "fast"])
@pytest.mark.parametrize("name", list(ZERO_SUMS))
def test_sums_of_negative_zeros_are_positive_zeros(name, backend):
    # JAX 0.10.2 on CPU accumulates an all-reduce from +0.0: -0.0 blocks sum to +0.0 (the
    # backends used to disagree, eagerly and under jit); other values are unchanged
    from compiler.backend import get_backend, set_backend
    f = shardc.shard_map(ZERO_SUMS[name], mesh=MESH_I, in_specs=P("i"), out_specs=P("i"))
    saved = get_backend()
    try:
        shardc.set_backend_name(backend)
        for run in (f, shardc.jit(f)):
            got = np.asarray(run(-jnp.zeros(16)))
            assert (got == 0).all() and not np.signbit(got).any(), got
            mixed = np.asarray(run(jnp.asarray(np.tile([-0.0, 1.5, np.nan, -np.inf], 4))))
            assert not np.signbit(mixed[mixed == 0]).any()
    finally:
        set_backend(saved)


@pytest.mark.parametrize("name, want", [("pmax", [np.nan, 7.0]), ("pmin", [np.nan, 1.0])])
def test_pmax_pmin_propagate_nan(name, want):
    # shardc decision: as lax.max / jnp.max do (JAX's CPU all-reduce drops NaN instead:
    # pmax over [nan, 2, 4, 6] gives 6, and over all-NaN blocks -inf)
    f = shardc.shard_map(lambda v: getattr(lax, name)(v, "i"), mesh=MESH_I, in_specs=P("i"),
                         out_specs=P())
    x = jnp.asarray(np.array([np.nan, 1, 2, 3, 4, 5, 6, 7], np.float32))
    for run in (f, shardc.jit(f)):
        np.testing.assert_array_equal(np.asarray(run(x)), want)


@settings(max_examples=100, **SETTINGS)
@given(data=st.data())
def test_ppermute_matches_reference(data):
    mesh, axes, axis_name = data.draw(group_setups())
    n = group_size(mesh, axes)
    dtype = data.draw(MOVING_DTYPES)
    shape = block_shapes(data.draw)
    targets = data.draw(st.permutations(range(n)))
    # a random subset of sources, in random order: full and partial permutations
    sources = data.draw(st.lists(st.integers(0, n - 1), unique=True, max_size=n))
    perm = [(s, targets[s]) for s in sources]
    perm = perm if data.draw(st.booleans()) else tuple(perm)
    check_vma = data.draw(st.booleans())
    blocks = make_blocks(data.draw(st.integers(0, 2**16)), mesh.size, shape, dtype)
    out = run_per_position(mesh, blocks, lambda x: lax.ppermute(x, axis_name, perm),
                           check_vma=check_vma)
    # ppermute alone ranks a group's members in mesh order, however the axes are listed (JAX)
    in_mesh_order = tuple(sorted(axes, key=mesh.axis_names.index))
    check_against(out, ref_run(mesh, in_mesh_order, blocks,
                               functools.partial(ref_ppermute, perm=perm)), dtype)


@settings(max_examples=100, **SETTINGS)
@given(data=st.data())
def test_all_to_all_matches_reference(data):
    mesh, axes, axis_name = data.draw(group_setups())
    n = group_size(mesh, axes)
    dtype = data.draw(MOVING_DTYPES)
    shape = block_shapes(data.draw)
    r = len(shape)
    tiled = data.draw(st.booleans())
    split = data.draw(st.integers(-r, r - 1))
    concat = data.draw(st.integers(-r, r - 1))
    shape[split] = n * data.draw(st.integers(1, 2)) if tiled else n
    check_vma = data.draw(st.booleans())
    blocks = make_blocks(data.draw(st.integers(0, 2**16)), mesh.size, shape, dtype)
    out = run_per_position(
        mesh, blocks, lambda x: lax.all_to_all(x, axis_name, split, concat, tiled=tiled),
        check_vma=check_vma)
    expected = ref_run(mesh, axes, blocks, functools.partial(
        ref_all_to_all, split_axis=split, concat_axis=concat, tiled=tiled))
    check_against(out, expected, dtype)


@settings(max_examples=60, **SETTINGS)
@given(data=st.data())
def test_pbroadcast_matches_reference(data):
    mesh, axes, axis_name = data.draw(group_setups())
    source = data.draw(st.integers(0, group_size(mesh, axes) - 1))
    dtype = data.draw(MOVING_DTYPES)
    shape = block_shapes(data.draw)
    check_vma = data.draw(st.booleans())
    blocks = make_blocks(data.draw(st.integers(0, 2**16)), mesh.size, shape, dtype)
    out = run_per_position(mesh, blocks, lambda x: lax.pbroadcast(x, axis_name, source),
                           check_vma=check_vma)
    expected = ref_run(mesh, axes, blocks, functools.partial(ref_pbroadcast, source=source))
    check_against(out, expected, dtype)


@settings(max_examples=60, **SETTINGS)
@given(data=st.data())
def test_axis_index_and_axis_size_match_reference(data):
    mesh, axes, axis_name = data.draw(group_setups())
    sizes = []

    def body(x):
        sizes.append(lax.axis_size(axis_name))
        return lax.axis_index(axis_name)

    blocks = [np.zeros((1,), np.float32)] * mesh.size
    out = run_per_position(mesh, blocks, body, check_vma=data.draw(st.booleans()))
    check_against(out, ref_axis_index(tuple(mesh.shape.values()), mesh.axis_names, axes),
                  np.int32)
    assert sizes and all(type(s) is int and s == group_size(mesh, axes) for s in sizes)


@settings(max_examples=20, **SETTINGS)
@given(data=st.data())
def test_psum_is_tiled_all_gather_of_tiled_psum_scatter(data):
    mesh, axes, axis_name = data.draw(group_setups())
    n = group_size(mesh, axes)
    shape = block_shapes(data.draw)
    dim = data.draw(st.integers(0, len(shape) - 1))
    shape[dim] = n * data.draw(st.integers(1, 2))
    blocks = make_blocks(data.draw(st.integers(0, 2**16)), mesh.size, shape, "int32")
    composed = run_per_position(mesh, blocks, lambda x: lax.all_gather(
        lax.psum_scatter(x, axis_name, scatter_dimension=dim, tiled=True),
        axis_name, axis=dim, tiled=True))
    check_against(composed, ref_run(mesh, axes, blocks, ref_psum), np.int32)


def test_collectives_map_over_pytree_operands():
    mesh = shardc.make_mesh((4, 2), ("x", "y"))

    def body(x):
        pair = lax.psum((x, {"twice": 2 * x}), "x")
        gathered = lax.all_gather({"a": x}, "y", tiled=True)
        return pair[0], pair[1]["twice"], gathered["a"]

    spec = P(("x", "y"))
    f = shardc.shard_map(body, mesh=mesh, in_specs=spec, out_specs=(spec, spec, spec))
    x = np.arange(8, dtype=np.float32)
    blocks = [x[p:p + 1] for p in range(8)]
    ones, twice, gathered = f(jnp.asarray(x))
    summed = ref_run(mesh, ("x",), blocks, ref_psum)
    np.testing.assert_array_equal(np.asarray(ones), np.concatenate(summed))
    np.testing.assert_array_equal(np.asarray(twice), 2 * np.concatenate(summed))
    np.testing.assert_array_equal(
        np.asarray(gathered),
        np.concatenate(ref_run(mesh, ("y",), blocks,
                               functools.partial(ref_all_gather, axis=0, tiled=True))))


def test_the_reference_groups_are_those_of_the_examples():
    # SEMANTICS 2.0: on (2,2) ('i','j') -- the reference itself against the stated groups
    shape, names = (2, 2), ("i", "j")
    assert ref_groups(shape, names, ("i",)) == [(0, 2), (1, 3)]
    assert ref_groups(shape, names, ("j",)) == [(0, 1), (2, 3)]
    assert ref_groups(shape, names, ("i", "j")) == [(0, 1, 2, 3)]
    assert ref_groups(shape, names, ("j", "i")) == [(0, 2, 1, 3)]


# --- the literal examples of SEMANTICS 2.1-2.8 ------------------------------------------------

MESH_I = shardc.make_mesh((4,), ("i",))
MESH_IJ = shardc.make_mesh((2, 2), ("i", "j"))


def ints(*rows, dtype=np.int32):
    return [np.array(r, dtype) for r in rows]


def assert_blocks(actual, expected, dtype=None):
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        e = np.asarray(e)
        if dtype is not None:
            assert a.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(a, e)


def test_example_2_1_psum_over_each_group():
    blocks = ints([1], [2], [3], [4])
    assert_blocks(blocks_of(MESH_IJ, lambda x: lax.psum(x, "i"), blocks),
                  [[4], [6], [4], [6]], np.int32)
    assert_blocks(blocks_of(MESH_IJ, lambda x: lax.psum(x, "j"), blocks), [[3], [3], [7], [7]])
    assert_blocks(blocks_of(MESH_IJ, lambda x: lax.psum(x, ("i", "j")), blocks), [[10]] * 4)


def test_example_2_1_pmean_pmin_pmax():
    blocks = ints([1], [2], [3], [4])
    assert_blocks(blocks_of(MESH_IJ, lambda x: lax.pmean(x, "i"), blocks),
                  [[2.], [3.], [2.], [3.]], np.float32)
    assert_blocks(blocks_of(MESH_IJ, lambda x: lax.pmin(x, "j"), blocks),
                  [[1], [1], [3], [3]], np.int32)
    assert_blocks(blocks_of(MESH_IJ, lambda x: lax.pmax(x, ("i", "j")), blocks), [[4]] * 4,
                  np.int32)


def test_example_2_1_psum_of_a_python_number_is_static():
    seen = []

    def body(x):
        seen.append((lax.psum(1, "i"), lax.psum(2, ("i",)), lax.psum(1.5, "i")))
        return x

    blocks_of(MESH_I, body, ints([0], [0], [0], [0]))
    assert seen and all(s == (4, 8, 6.0) for s in seen)
    assert all(type(s[0]) is int for s in seen)


def test_example_2_2_all_gather_on_a_line():
    blocks = ints([0, 1], [2, 3], [4, 5], [6, 7])
    assert_blocks(blocks_of(MESH_I, lambda x: lax.all_gather(x, "i", tiled=True), blocks),
                  [np.arange(8)] * 4)
    assert_blocks(blocks_of(MESH_I, lambda x: lax.all_gather(x, "i", axis=0), blocks),
                  [[[0, 1], [2, 3], [4, 5], [6, 7]]] * 4)
    assert_blocks(blocks_of(MESH_I, lambda x: lax.all_gather(x, "i", axis=1), blocks),
                  [[[0, 2, 4, 6], [1, 3, 5, 7]]] * 4)


def test_example_2_2_all_gather_follows_the_listed_axis_order():
    blocks = ints([0], [1], [2], [3])
    assert_blocks(blocks_of(MESH_IJ, lambda x: lax.all_gather(x, ("i", "j"), tiled=True),
                            blocks), [[0, 1, 2, 3]] * 4)
    assert_blocks(blocks_of(MESH_IJ, lambda x: lax.all_gather(x, ("j", "i"), tiled=True),
                            blocks), [[0, 2, 1, 3]] * 4)


def test_example_2_3_psum_scatter_on_a_line():
    blocks = ints([3, 1, 4, 1], [5, 9, 2, 6], [5, 3, 5, 8], [9, 7, 1, 2])
    assert_blocks(blocks_of(MESH_I, lambda x: lax.psum_scatter(x, "i", tiled=True), blocks),
                  [[22], [20], [12], [17]])
    untiled = blocks_of(MESH_I, lambda x: lax.psum_scatter(x, "i"), blocks)
    assert [b.shape for b in untiled] == [()] * 4
    assert_blocks(untiled, [22, 20, 12, 17])


def test_example_2_3_psum_scatter_over_j():
    blocks = [np.arange(4, dtype=np.int32) + 10 * p for p in range(4)]
    assert_blocks(blocks_of(MESH_IJ, lambda x: lax.psum_scatter(x, "j", tiled=True), blocks),
                  [[10, 12], [14, 16], [50, 52], [54, 56]])


def test_example_2_4_ppermute_shift_and_partial_perm():
    blocks = ints([0, 1], [2, 3], [4, 5], [6, 7])
    shift = [(k, (k + 1) % 4) for k in range(4)]
    assert_blocks(blocks_of(MESH_I, lambda x: lax.ppermute(x, "i", shift), blocks),
                  [[6, 7], [0, 1], [2, 3], [4, 5]])
    assert_blocks(blocks_of(MESH_I, lambda x: lax.ppermute(x, "i", [(0, 1)]), blocks),
                  [[0, 0], [0, 1], [0, 0], [0, 0]])


def test_example_2_4_ppermute_ranks_members_in_mesh_order():
    # JAX 0.10.2 sorts each group's device ids: over ('j', 'i') the ring runs in mesh order
    # too, though axis_index(('j', 'i')) numbers the devices 0, 2, 1, 3
    blocks = ints([0], [1], [2], [3])
    ring = [(k, (k + 1) % 4) for k in range(4)]
    for axes in (("i", "j"), ("j", "i")):
        assert_blocks(blocks_of(MESH_IJ, lambda x: lax.ppermute(x, axes, ring), blocks),
                      [[3], [0], [1], [2]])
    shuffle = lambda x: lax.pshuffle(x, ("j", "i"), [3, 0, 1, 2])
    assert_blocks(blocks_of(MESH_IJ, shuffle, blocks), [[3], [0], [1], [2]])
    index = lambda x: lax.axis_index(("j", "i"))[None] + 0 * x
    assert_blocks(blocks_of(MESH_IJ, index, blocks), [[0], [2], [1], [3]])


def test_example_2_5_all_to_all_tiled_and_untiled():
    blocks = ints([3, 1, 4, 1], [5, 9, 2, 6], [5, 3, 5, 8], [9, 7, 1, 2])
    assert_blocks(blocks_of(MESH_I, lambda x: lax.all_to_all(x, "i", 0, 0, tiled=True),
                            blocks),
                  [[3, 5, 5, 9], [1, 9, 3, 7], [4, 2, 5, 1], [1, 6, 8, 2]])
    counting = [np.arange(4 * k, 4 * k + 4, dtype=np.int32) for k in range(4)]
    assert_blocks(blocks_of(MESH_I, lambda x: lax.all_to_all(x, "i", 0, 0), counting),
                  [[d, 4 + d, 8 + d, 12 + d] for d in range(4)])


def test_example_2_5_all_to_all_reshards_rows_to_columns():
    f = shardc.shard_map(lambda x: lax.all_to_all(x, "i", 1, 0, tiled=True), mesh=MESH_I,
                         in_specs=P("i"), out_specs=P(None, "i"))
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    np.testing.assert_array_equal(np.asarray(f(jnp.asarray(x))), x)
    np.testing.assert_array_equal(np.asarray(shardc.jit(f)(jnp.asarray(x))), x)


def test_example_2_6_axis_index_and_axis_size():
    zeros = ints([0], [0], [0], [0])
    for axes, expected in [("i", [0, 0, 1, 1]), (("i", "j"), [0, 1, 2, 3]),
                           (("j", "i"), [0, 2, 1, 3])]:
        assert_blocks(blocks_of(MESH_IJ, lambda x, a=axes: lax.axis_index(a), zeros), expected,
                      np.int32)
    seen = []

    def body(x):
        seen.append((lax.axis_size("i"), lax.axis_size(("j", "i"))))
        return x

    blocks_of(MESH_IJ, body, zeros)
    assert seen == [(2, 4)] * 2     # a Python int, traced once eagerly and once under jit
    assert all(type(k) is int for pair in seen for k in pair)


def test_example_2_7_pvary_changes_the_type_only():
    seen = []

    def body(x):
        y = lax.pvary(x, "i")
        seen.append((str(shardc.typeof(x)), str(shardc.typeof(y))))
        return y

    f = shardc.shard_map(body, mesh=MESH_I, in_specs=P(), out_specs=P("i"))
    out = f(jnp.arange(6.))
    np.testing.assert_array_equal(np.asarray(out), np.tile(np.arange(6.), 4))
    np.testing.assert_array_equal(np.asarray(shardc.jit(f)(jnp.arange(6.))), np.asarray(out))
    assert seen and all(s == ("float32[6]", "float32[6]{V:i}") for s in seen)
    printed = str(shardc.make_jaxpr(f)(jnp.arange(6.)))
    assert "f32[6]{i} = pvary[mesh_axes=('i',)]" in printed


def test_example_2_8_pbroadcast_from_source():
    blocks = ints([1], [2], [3], [4])
    assert_blocks(blocks_of(MESH_I, lambda x: lax.pbroadcast(x, "i", 2), blocks), [[3]] * 4,
                  np.int32)
    masked = blocks_of(MESH_I, lambda x: lax.psum(jnp.where(lax.axis_index("i") == 2, x, 0),
                                                   "i"), blocks)
    assert_blocks(masked, [[3]] * 4)


def test_example_3_3_psum_lifts_an_operand_varying_over_part_of_the_axes():
    mesh = shardc.make_mesh((4, 2), ("x", "y"))
    f = shardc.shard_map(lambda v: lax.psum(v, ("x", "y")), mesh=mesh, in_specs=P("x"),
                         out_specs=P())
    np.testing.assert_array_equal(np.asarray(f(jnp.arange(8.))), [24., 32.])
    np.testing.assert_array_equal(np.asarray(shardc.jit(f)(jnp.arange(8.))), [24., 32.])


# --- bad arguments ------------------------------------------------------------------------------

def raises_in_body(mesh, body, exc, message, *, in_specs=None, x=None):
    """``body`` must raise ``exc`` with exactly ``message``, eagerly and under jit."""
    spec = in_specs if in_specs is not None else all_axes_spec(mesh.axis_names)
    f = shardc.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec)
    x = jnp.arange(16.) if x is None else x
    for run in (f, shardc.jit(f)):
        with pytest.raises(exc) as info:
            run(x)
        assert str(info.value) == message


def test_perm_must_be_pairs():
    """JAX reads perm as ``tuple(map(tuple, perm))``: a set or a generator of pairs is one;
    a mapping is refused."""
    perm = {0: 1}
    raises_in_body(MESH_I, lambda x: lax.ppermute(x, "i", perm), TypeError,
                   "ppermute: perm must be a list or a tuple of (source, destination) "
                   f"pairs. Got perm of type {type(perm)}")
    f = shardc.vmap(lambda x: lax.ppermute(x, "i", {(0, 1), (1, 0)}), axis_name="i")
    np.testing.assert_array_equal(np.asarray(f(np.arange(4.))), [1., 0., 0., 0.])


def test_perm_may_be_an_array_of_pairs():
    pairs = np.array([[0, 1], [1, 2], [2, 3], [3, 0]])
    f = shardc.vmap(lambda x: lax.ppermute(x, "i", pairs), axis_name="i")
    np.testing.assert_array_equal(np.asarray(f(np.arange(4.))), [3., 0., 1., 2.])


@pytest.mark.parametrize("entry", [(0, 1, 2), (0,), [], [1, 2, 3]])
def test_perm_entries_that_are_not_pairs_are_value_errors(entry):
    # JAX 0.10.2 raises ValueError here (too many / not enough values to unpack)
    raises_in_body(MESH_I, lambda x: lax.ppermute(x, "i", [entry, (3, 0)]), ValueError,
                   "ppermute: perm must be a list or a tuple of (source, destination) pairs. "
                   f"Got the entry {entry!r} of length {len(entry)}")


def test_perm_entries_that_are_not_sequences_are_type_errors():
    # JAX: TypeError ('int' object is not iterable)
    raises_in_body(MESH_I, lambda x: lax.ppermute(x, "i", [0, 1]), TypeError,
                   "ppermute: perm must be a list or a tuple of (source, destination) pairs. "
                   "Got the entry 0")


def test_perm_entries_may_be_numpy_pairs():
    ring = [np.array([k, (k + 1) % 4]) for k in range(4)]
    f = shardc.shard_map(lambda x: lax.ppermute(x, "i", ring), mesh=MESH_I, in_specs=P("i"),
                         out_specs=P("i"))
    np.testing.assert_array_equal(np.asarray(f(jnp.arange(4.))), [3., 0., 1., 2.])


@pytest.mark.parametrize("perm", [[(0, 1), (0, 2)], [(0, 2), (1, 2)], ((3, 3), (3, 3))])
def test_perm_sources_and_destinations_must_be_unique(perm):
    pairs = tuple(tuple(p) for p in perm)
    raises_in_body(MESH_I, lambda x: lax.ppermute(x, "i", perm), ValueError,
                   f"ppermute sources and destinations must be unique, got {pairs}.")


@pytest.mark.parametrize("axis_name, pair", [("i", (0, 4)), ("i", (-5, 0)), (("i", "j"), (4, 0)),
                                             ("j", (1, 2))])
def test_perm_entries_must_be_in_range(axis_name, pair):
    mesh = MESH_I if axis_name == "i" else MESH_IJ
    n = 4 if axis_name in ("i", ("i", "j")) else 2
    # JAX's IndexError (a ValueError too)
    raises_in_body(mesh, lambda x: lax.ppermute(x, axis_name, [pair]), IndexError,
                   f"ppermute: perm entry {pair} is out of range for axis_name {axis_name!r} "
                   f"of size {n}")


def test_negative_perm_ranks_count_from_the_end():
    # [(i, i - 1)]: a shift down written without "% n", as JAX takes it
    f = shardc.shard_map(lambda x: lax.ppermute(x, "i", [(i, i - 1) for i in range(4)]),
                      mesh=MESH_I, in_specs=P("i"), out_specs=P("i"))
    for run in (f, shardc.jit(f)):
        np.testing.assert_array_equal(np.asarray(run(np.arange(4.))), [1., 2., 3., 0.])
    # uniqueness is of the ranks they name
    raises_in_body(MESH_I, lambda x: lax.ppermute(x, "i", [(0, 1), (-4, 2)]), ValueError,
                   "ppermute sources and destinations must be unique, got ((0, 1), (-4, 2)).")


def test_psum_scatter_size_must_fit_the_group():
    # blocks of 16/4 = 4 on MESH_I; over ('i',) N = 4
    raises_in_body(MESH_I, lambda x: lax.psum_scatter(x[:3], "i", tiled=True), ValueError,
                   "tiled reduce_scatter operand scatter dimension size 3 must be divisible "
                   "by shard_count 4")
    raises_in_body(MESH_I, lambda x: lax.psum_scatter(x[:2], "i"), ValueError,
                   "reduce_scatter operand scatter dimension size 2 must match shard count 4")
    raises_in_body(MESH_IJ, lambda x: lax.psum_scatter(x[:3], ("j", "i")), ValueError,
                   "reduce_scatter operand scatter dimension size 3 must match shard count 4")
    raises_in_body(MESH_IJ, lambda x: lax.psum_scatter(x, "j", scatter_dimension=0), ValueError,
                   "reduce_scatter operand scatter dimension size 4 must match shard count 2")


def test_all_to_all_size_must_fit_the_group():
    raises_in_body(MESH_I, lambda x: lax.all_to_all(x[:3], "i", 0, 0, tiled=True), ValueError,
                   "The size of all_to_all split_axis (3) has to be divisible by the size of "
                   "the named axis i (4)")
    raises_in_body(MESH_IJ, lambda x: lax.all_to_all(x[:3], ("j", "i"), 0, 0, tiled=True),
                   ValueError, "The size of all_to_all split_axis (3) has to be divisible by "
                   "the size of the named axis ('j', 'i') (4)")
    raises_in_body(MESH_I, lambda x: lax.all_to_all(x[:2], "i", 0, 0), ValueError,
                   "all_to_all requires the size of the mapped axis axis_name to equal "
                   "x.shape[split_axis], but they are 4 and 2 respectively.")


DIMENSION_CASES = [
    # (name, call on a rank-2 block, param, value, rank in the message)
    ("all_gather", lambda x, v: lax.all_gather(x, "i", axis=v), "axis", 3, 2),
    ("all_gather", lambda x, v: lax.all_gather(x, "i", axis=v), "axis", -4, 2),
    ("all_gather", lambda x, v: lax.all_gather(x, "i", axis=v, tiled=True), "axis", 2, 2),
    ("all_gather", lambda x, v: lax.all_gather(x, "i", axis=v, tiled=True), "axis", -3, 2),
    ("psum_scatter", lambda x, v: lax.psum_scatter(x, "i", scatter_dimension=v, tiled=True),
     "scatter_dimension", 2, 2),
    ("psum_scatter", lambda x, v: lax.psum_scatter(x, "i", scatter_dimension=v),
     "scatter_dimension", -3, 2),
    ("all_to_all", lambda x, v: lax.all_to_all(x, "i", v, 0, tiled=True), "split_axis", 2, 2),
    ("all_to_all", lambda x, v: lax.all_to_all(x, "i", v, 0), "split_axis", -3, 2),
    ("all_to_all", lambda x, v: lax.all_to_all(x, "i", 0, v, tiled=True), "concat_axis", 5, 2),
    ("all_to_all", lambda x, v: lax.all_to_all(x, "i", 0, v, tiled=True), "concat_axis", -3, 2),
]


@pytest.mark.parametrize("case", DIMENSION_CASES,
                         ids=[f"{c[0]}-{c[2]}={c[3]}-{i}" for i, c in enumerate(DIMENSION_CASES)])
def test_dimension_parameters_out_of_range(case):
    prim, call, param, value, rank = case
    raises_in_body(MESH_I, lambda x: call(x, value), ValueError,
                   f"{prim}: {param}={value} is out of range for an operand of rank {rank}",
                   x=jnp.zeros((16, 4)))


def test_negative_dimensions_count_from_the_end():
    blocks = [np.arange(8, dtype=np.int32).reshape(2, 4) + 10 * p for p in range(4)]
    same = [(lambda x: lax.all_gather(x, "i", axis=-1, tiled=True),
             lambda x: lax.all_gather(x, "i", axis=1, tiled=True)),
            (lambda x: lax.all_gather(x, "i", axis=-1),
             lambda x: lax.all_gather(x, "i", axis=2)),
            (lambda x: lax.psum_scatter(x, "i", scatter_dimension=-1),
             lambda x: lax.psum_scatter(x, "i", scatter_dimension=1)),
            (lambda x: lax.all_to_all(x, "i", -1, -2, tiled=True),
             lambda x: lax.all_to_all(x, "i", 1, 0, tiled=True))]
    for negative, positive in same:
        assert_blocks(blocks_of(MESH_I, negative, blocks), blocks_of(MESH_I, positive, blocks))


# every collective, called with its axis_name argument replaced
CALLS = {
    "psum": lambda x, a: lax.psum(x, a),
    "pmean": lambda x, a: lax.pmean(x, a),
    "pmax": lambda x, a: lax.pmax(x, a),
    "pmin": lambda x, a: lax.pmin(x, a),
    "all_gather": lambda x, a: lax.all_gather(x, a),
    "psum_scatter": lambda x, a: lax.psum_scatter(x, a, tiled=True),
    "ppermute": lambda x, a: lax.ppermute(x, a, [(0, 1)]),
    "all_to_all": lambda x, a: lax.all_to_all(x, a, 0, 0, tiled=True),
    "pbroadcast": lambda x, a: lax.pbroadcast(x, a, 0),
    "axis_index": lambda x, a: lax.axis_index(a) + x,
    "axis_size": lambda x, a: lax.axis_size(a) + x,
    "pvary": lambda x, a: lax.pvary(x, a),
}


@pytest.mark.parametrize("prim", sorted(CALLS))
def test_unknown_axis_inside_a_body(prim):
    message = (f"Found an unbound axis name: k. To fix this, please call {prim} under "
               f"`jax.shard_map`. ({prim}: unknown mesh axis 'k' in axis_name=('i', 'k'); the "
               "enclosing shard_map's mesh has axes ('i', 'j').)")
    for exc in (ValueError, NameError):
        raises_in_body(MESH_IJ, lambda x: CALLS[prim](x, ("i", "k")), exc, message,
                       x=jnp.zeros((16,)))


@pytest.mark.parametrize("to, prim", [("varying", "pvary"), ("reduced", "pcast")])
def test_pcast_outside_any_shard_map_names_the_cast(to, prim):
    """pcast's unbound-axis error names the primitive it binds, as JAX's: pvary for
    ``to='varying'``."""
    message = (f"Found an unbound axis name: i. To fix this, please call {prim} under "
               "`jax.shard_map`.")
    with pytest.raises(NameError) as info:
        shardc.jit(lambda x: lax.pcast(x, "i", to=to))(jnp.zeros((4,)))
    assert str(info.value) == message


@pytest.mark.parametrize("prim", sorted(CALLS))
def test_axis_name_outside_any_shard_map(prim):
    message = (f"Found an unbound axis name: i. To fix this, please call {prim} under "
               "`jax.shard_map`.")
    for run in (lambda x: CALLS[prim](x, "i"), shardc.jit(lambda x: CALLS[prim](x, "i"))):
        for exc in (ValueError, NameError):
            with pytest.raises(exc) as info:
                run(jnp.zeros((4,)))
            assert str(info.value) == message


@pytest.mark.parametrize("prim", sorted(CALLS))
def test_repeated_axis_in_axis_name(prim):
    raises_in_body(MESH_IJ, lambda x: CALLS[prim](x, ("j", "i", "j")), ValueError,
                   f"{prim}: axis_name=('j', 'i', 'j') names mesh axis 'j' more than once.",
                   x=jnp.zeros((16,)))


@pytest.mark.parametrize("prim", sorted(CALLS))
def test_a_set_is_not_an_axis_name(prim):
    for axis_name in ({"i"}, frozenset({"i"})):
        raises_in_body(MESH_I, lambda x: CALLS[prim](x, axis_name), TypeError,
                       f"axis_name={axis_name!r} must be a tuple or a str. Got {axis_name}")


def test_pcast_needs_to():
    # JAX's pcast has no default target type: a keyword-only argument it must be given
    raises_in_body(MESH_I, lambda x: lax.pcast(x, "i"), TypeError,
                   "pcast() missing 1 required keyword-only argument: 'to'")


@pytest.mark.parametrize("axis_name, source, n", [("i", 4, 4), ("i", -1, 4), ("j", 2, 2),
                                                  (("j", "i"), 4, 4)])
def test_pbroadcast_source_out_of_range(axis_name, source, n):
    mesh = MESH_I if axis_name == "i" else MESH_IJ
    raises_in_body(mesh, lambda x: lax.pbroadcast(x, axis_name, source), ValueError,
                   f"pbroadcast: source={source} is out of range for axis_name {axis_name!r} "
                   f"of size {n}")


def _grouped_reference(kind, blocks, groups, tiled):
    """Each device's result of a grouped psum_scatter or all_to_all (dimension 0 split,
    concatenated or stacked along 0), from the members' blocks."""
    out = [None] * len(blocks)
    for group in groups:
        g = len(group)
        for r, d in enumerate(group):
            if kind == "psum_scatter":
                total = sum(blocks[m] for m in group)
                out[d] = np.split(total, g)[r] if tiled else total[r]
            else:
                pieces = [np.split(blocks[m], g)[r] for m in group]
                out[d] = np.concatenate(pieces) if tiled else np.stack(
                    [p[0] for p in pieces])
    return np.concatenate(out)


@pytest.mark.parametrize("kind", ["psum_scatter", "all_to_all"])
@pytest.mark.parametrize("groups", [[[0, 1], [2, 3]], [[0, 2], [1, 3]], [[3, 2, 1, 0]]])
@pytest.mark.parametrize("tiled", [True, False])
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_grouped_psum_scatter_and_all_to_all_equal_the_reference(kind, groups, tiled, jit):
    g = len(groups[0])
    n = 2 * g if tiled else g
    x = np.arange(4 * n * 3, dtype=np.float32).reshape(4 * n, 3) ** 1.5
    if kind == "psum_scatter":
        body = lambda b: lax.psum_scatter(b, "i", tiled=tiled, axis_index_groups=groups)
    else:
        body = lambda b: lax.all_to_all(b, "i", 0, 0, tiled=tiled, axis_index_groups=groups)
    f = shardc.shard_map(body, mesh=MESH_I, in_specs=P("i"), out_specs=P("i"))
    got = (shardc.jit(f) if jit else f)(x)
    want = _grouped_reference(kind, np.split(x, 4), groups, tiled)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)


def test_grouped_collectives_need_equal_groups():
    raises_in_body(MESH_I, lambda x: lax.psum_scatter(x, "i", tiled=True,
                                                      axis_index_groups=[[0], [1, 2, 3]]),
                   ValueError, "psum_scatter: axis_index_groups must all be the same size, got "
                   "[[0], [1, 2, 3]]")


@pytest.mark.parametrize("to", ["invarying", None])
def test_pcast_refuses_what_jax_does_not_know(to):
    raises_in_body(MESH_I, lambda x: lax.pcast(x, "i", to=to), ValueError,
                   "Got unexpected `to` value. Allowed `to` values are: "
                   "{'unreduced', 'varying', 'reduced'}", in_specs=P())


def test_pcast_of_an_invariant_value_to_partial_sums_is_refused():
    # as JAX's: only a varying value's devices hold terms of a sum (tests/test_unreduced.py)
    raises_in_body(MESH_I, lambda x: lax.pcast(x, "i", to="unreduced"), ValueError,
                   "Unsupported pcast from=invarying, to='unreduced'", in_specs=P())


@pytest.mark.parametrize("cast", [lambda x: lax.pcast(x, "i", to="varying"),
                                  lambda x: lax.pvary(x, ("i",))])
def test_a_cast_to_varying_outside_shard_map_under_a_context_mesh(cast):
    # as JAX's: run (eagerly, under grad or vmap), its ValueError; staged out under jit, the
    # axis is unbound (a NameError), as it is with no mesh in context; in a body, the cast
    x = np.arange(4.0, dtype=np.float32)
    run_outside = re.escape("pvary should be called under jax.shard_map.")
    with shardc.sharding.use_mesh(MESH_I):
        with pytest.raises(ValueError, match=run_outside):
            cast(x)
        with pytest.raises(ValueError, match=run_outside):
            shardc.grad(lambda v: cast(v).sum())(x)
        with pytest.raises(ValueError, match=run_outside):
            shardc.vmap(cast)(x[:, None])
        with pytest.raises(NameError, match="Found an unbound axis name: i"):
            shardc.jit(cast)(x)
        inside = shardc.shard_map(cast, mesh=MESH_I, in_specs=P(), out_specs=P("i"))
        np.testing.assert_array_equal(np.asarray(inside(x)), np.tile(x, 4))
    with pytest.raises(NameError, match="Found an unbound axis name: i"):
        cast(x)


# --- replication types (SEMANTICS 2.9) -----------------------------------------------------------

MESH_XY = shardc.make_mesh((4, 2), ("x", "y"))
TYPE_SPECS = [P(), P("x"), P(("x", "y")), P(None, "y")]
TYPE_AXES = ["x", "y", ("x", "y"), ("y", "x")]

# name -> (call, whether the result drops the axes)
TYPED = {
    "psum": (lambda x, a: lax.psum(x, a), "drop"),
    "pmean": (lambda x, a: lax.pmean(x, a), "drop"),
    "pmax": (lambda x, a: lax.pmax(x, a), "drop"),
    "pmin": (lambda x, a: lax.pmin(x, a), "drop"),
    "all_gather": (lambda x, a: lax.all_gather(x, a, axis=1, tiled=True), "keep"),
    "all_gather_untiled": (lambda x, a: lax.all_gather(x, a), "keep"),
    "all_gather_invarying": (lambda x, a: lax.all_gather(x, a, tiled=True, to="invarying"),
                             "drop"),
    "psum_scatter": (lambda x, a: lax.psum_scatter(x, a, scatter_dimension=1, tiled=True),
                     "keep"),
    "ppermute": (lambda x, a: lax.ppermute(x, a, [(0, 1), (1, 0)]), "keep"),
    "all_to_all": (lambda x, a: lax.all_to_all(x, a, 1, 0, tiled=True), "keep"),
    "pbroadcast": (lambda x, a: lax.pbroadcast(x, a, 1), "keep"),
    "axis_index": (lambda x, a: lax.axis_index(a), "exactly"),
}


def spec_axes(spec):
    axes = set()
    for entry in spec:
        axes |= set(entry if isinstance(entry, tuple) else (() if entry is None else (entry,)))
    return frozenset(axes)


@pytest.mark.parametrize("name", sorted(TYPED))
def test_collective_result_types(name):
    call, kind = TYPED[name]
    for spec, axis_name in itertools.product(TYPE_SPECS, TYPE_AXES):
        axes = frozenset((axis_name,) if isinstance(axis_name, str) else axis_name)
        seen = []

        def body(x):
            seen.append(shardc.typeof(call(x, axis_name)).vma)
            return x

        f = shardc.shard_map(body, mesh=MESH_XY, in_specs=spec, out_specs=spec)
        x = jnp.zeros((16, 16))    # dimension 1 of every block divides by 8
        f(x)
        shardc.jit(f)(x)
        lifted = spec_axes(spec) | axes
        expected = {"drop": lifted - axes, "keep": lifted, "exactly": axes}[kind]
        assert seen == [expected, expected], (spec, axis_name)


def test_pvary_adds_axes_and_rejects_an_axis_already_varying():
    for spec, axis_name in itertools.product([P(), P("x")], ["y", ("y",)]):
        seen = []

        def body(x):
            seen.append(shardc.typeof(lax.pvary(x, axis_name)).vma)
            return x

        f = shardc.shard_map(body, mesh=MESH_XY, in_specs=spec, out_specs=spec)
        f(jnp.zeros((16, 8)))
        shardc.jit(f)(jnp.zeros((16, 8)))
        assert seen == [spec_axes(spec) | {"y"}] * 2
    raises_in_body(MESH_XY, lambda x: lax.pvary(x, ("y", "x")), ValueError,
                   "pvary: the operand has type f32[4,8]{x} and already varies over ('x',); "
                   "pvary only casts invariant values to varying.", in_specs=P("x"),
                   x=jnp.zeros((16, 8)))
    raises_in_body(MESH_XY, lambda x: lax.pcast(x, ("x", "y"), to="varying"), ValueError,
                   "pcast: the operand has type f32[2,8]{x,y} and already varies over "
                   "('x', 'y'); pcast(..., to='varying') only casts invariant values to "
                   "varying.",
                   in_specs=P(("x", "y")), x=jnp.zeros((16, 8)))


def test_pvary_of_a_varying_value_is_allowed_with_the_check_off():
    f = shardc.shard_map(lambda x: lax.pvary(x, "x"), mesh=MESH_XY, in_specs=P("x"),
                         out_specs=P("x"), check_vma=False)
    np.testing.assert_array_equal(np.asarray(f(jnp.arange(8.))), np.arange(8.))


def test_all_gather_to_invarying_returns_replicated_under_the_check():
    def gather(to):
        return shardc.shard_map(lambda x: lax.all_gather(x, "i", tiled=True, to=to),
                                mesh=MESH_I, in_specs=P("i"), out_specs=P())

    x = jnp.arange(8.)
    np.testing.assert_array_equal(np.asarray(gather("invarying")(x)), np.arange(8.))
    np.testing.assert_array_equal(np.asarray(shardc.jit(gather("invarying"))(x)), np.arange(8.))
    with pytest.raises(ValueError, match=re.escape("may vary over mesh axis 'i'")):
        gather("varying")(x)


# --- lowered per-device nodes (SEMANTICS 2.9) ------------------------------------------------------

def axes_choices(names):
    return [tuple(p) for k in range(1, len(names) + 1) for p in itertools.permutations(names, k)]


LOWERED_CASES = [(shape, names, axes) for shape, names in MESHES for axes in axes_choices(names)]

# name -> (call on a (4,4)-shaped block given the group size, lowered node, params to check)
LOWERINGS = {
    "psum": (lambda x, a, n: lax.psum(x, a), "all_reduce", {"reduction": "sum"}),
    "pmax": (lambda x, a, n: lax.pmax(x, a), "all_reduce", {"reduction": "max"}),
    "pmin": (lambda x, a, n: lax.pmin(x, a), "all_reduce", {"reduction": "min"}),
    "pmean": (lambda x, a, n: lax.pmean(x, a), "all_reduce", {}),
    "pbroadcast": (lambda x, a, n: lax.pbroadcast(x, a, n - 1), "broadcast", {}),
    "all_gather": (lambda x, a, n: lax.all_gather(x, a, axis=-1, tiled=True), "all_gather",
                   {"gather_axis": 1, "tiled": True}),
    "psum_scatter": (lambda x, a, n: lax.psum_scatter(jnp.tile(x, (1, n)), a,
                                                      scatter_dimension=-1, tiled=True),
                     "reduce_scatter", {"scatter_axis": 1, "tiled": True, "reduction": "sum"}),
    "ppermute": (lambda x, a, n: lax.ppermute(x, a, [(k, (k + 1) % n) for k in range(n)]),
                 "ppermute", {}),
    "all_to_all": (lambda x, a, n: lax.all_to_all(jnp.tile(x, (1, n)), a, 1, 0, tiled=True),
                   "all_to_all", {"split_axis": 1, "concat_axis": 0, "tiled": True}),
}
COMMUNICATION = {"all_reduce", "all_gather", "reduce_scatter", "ppermute", "all_to_all",
                 "all_slice", "broadcast"}


def lowered_programs(mesh, body, global_shape):
    spec = all_axes_spec(mesh.axis_names)
    f = shardc.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False)
    x = shardc.device_put(jnp.zeros(global_shape), NamedSharding(mesh, spec))
    (lowered,) = shardc.jit(f).lower(x).module.all_shard_maps()
    return {d.id: lowered.program_of(d.id).program.eqns for d in mesh.devices.flat}


def comm_nodes(eqns):
    return [e for e in eqns if e.primitive.name in COMMUNICATION]


@pytest.mark.parametrize("name", sorted(LOWERINGS))
def test_lowered_node_and_device_groups(name):
    call, node, params = LOWERINGS[name]
    for shape, names, axes in LOWERED_CASES:
        mesh = shardc.make_mesh(shape, names)
        n = group_size(mesh, axes)
        programs = lowered_programs(mesh, lambda x: call(x, axes, n), (4 * mesh.size, 4))
        if name == "ppermute":      # ranks its members in mesh order, as JAX's
            axes = tuple(sorted(axes, key=names.index))
        groups = tuple(ref_groups(shape, names, axes))    # positions == ids on make_mesh
        for device_id, eqns in programs.items():
            (eqn,) = comm_nodes(eqns)
            assert eqn.primitive.name == node, (name, axes)
            assert eqn.params["device_groups"] == groups, (name, shape, axes)
            assert tuple(eqn.params["mesh_axes"]) == axes
            for key, value in params.items():
                assert eqn.params[key] == value, (name, key)
            if name == "pmean":
                assert eqn.params["reduction"] in ("mean", "sum")
            if name == "pbroadcast":
                assert eqn.params["root"] == n - 1
            if name == "ppermute":
                assert tuple(map(tuple, eqn.params["perm"])) == tuple(
                    (k, (k + 1) % n) for k in range(n))


def test_axis_index_and_pvary_lower_to_no_communication():
    for shape, names, axes in LOWERED_CASES:
        mesh = shardc.make_mesh(shape, names)
        programs = lowered_programs(
            mesh, lambda x: lax.pvary(jnp.zeros((1,)), axes) + lax.axis_index(axes) + x,
            (mesh.size,))
        for eqns in programs.values():
            assert comm_nodes(eqns) == []
            assert not any(e.primitive.name in ("axis_index", "pvary") for e in eqns)


def test_device_groups_name_device_ids_not_positions():
    # a mesh of devices 2..5: positions 0..3 hold ids 2..5
    devices = shardc.devices()
    mesh = Mesh(np.array(devices[2:6], dtype=object).reshape(2, 2), ("i", "j"))
    for axes in axes_choices(("i", "j")):
        expected = tuple(tuple(p + 2 for p in g) for g in ref_groups((2, 2), ("i", "j"), axes))
        programs = lowered_programs(mesh, lambda x: lax.psum(x, axes), (8,))
        assert sorted(programs) == [2, 3, 4, 5]
        for eqns in programs.values():
            (eqn,) = comm_nodes(eqns)
            assert eqn.params["device_groups"] == expected
        ring = [(0, 1), (1, 0)] if len(axes) == 1 else [(k, (k + 1) % 4) for k in range(4)]
        blocks = ints([0], [1], [2], [3])
        got = blocks_of(mesh, lambda x: lax.ppermute(x, axes, ring), blocks)
        ranked = tuple(sorted(axes, key=mesh.axis_names.index))      # mesh order, as JAX's
        assert_blocks(got, ref_run(mesh, ranked, blocks, functools.partial(ref_ppermute,
                                                                            perm=ring)))


def test_sums_of_python_constants_and_bools_take_jaxs_types():
    # a Python scalar sums to a Python scalar (weakly typed); a bool counts as int32 (strong);
    # pmean divides truly, so a Python int's mean is a float
    i8, b16 = np.ones(3, np.int8), np.ones(3, jnp.bfloat16)

    def body(fn):
        return shardc.shard_map(fn, mesh=MESH_I, in_specs=P(), out_specs=P())

    cases = [(lambda a: a + lax.psum(1, "i"), i8, np.int8, 5),
             (lambda a: a + lax.psum(2.0, "i"), b16, jnp.bfloat16, 9),
             (lambda a: a + lax.psum(True, "i"), i8, np.int32, 5),
             (lambda a: a + lax.pmean(3, "i"), i8, np.float32, 4),
             (lambda a: a + lax.pmean(True, "i"), i8, np.float32, 2),
             (lambda a: a + lax.pmean(2.0, "i"), b16, jnp.bfloat16, 3)]
    for fn, x, dtype, want in cases:
        got = body(fn)(x)
        assert got.dtype == dtype, (fn, got.dtype)
        np.testing.assert_array_equal(np.asarray(got, np.float32), np.full(3, want, np.float32))
    # a traced bool sums to a strongly typed int32 too
    count = body(lambda a: lax.psum(a, "i"))(True)
    assert count.dtype == np.int32 and int(count) == 4
    assert (count + i8).dtype == np.int32


def test_reductions_over_no_axes_and_top_k_lists_as_jax():
    x = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(np.asarray(shardc.vmap(lambda v: lax.psum(v, ()))(x)), x)
    assert lax.pmax(x, []) is x
    mean = lax.pmean(np.arange(3), ())
    assert mean.dtype == np.float64 or mean.dtype == np.float32     # a true division by 1
    values = lax.top_k(jnp.arange(5.0), 2)
    assert isinstance(values, list) and np.asarray(values[0]).tolist() == [4.0, 3.0]
    got = shardc.vmap(lambda a: lax.top_k(a, 2), out_axes=[0, 1])(jnp.ones((4, 3)))
    assert got[0].shape == (4, 2) and got[1].shape == (2, 4)


def test_gathers_scatters_and_permutes_over_no_axes_as_jax():
    """Over ``()`` (an axis list computed from a mesh may be empty): all_gather and
    psum_scatter return the block itself; ppermute is within a group of one device, which
    keeps its block only where perm sends rank 0 to itself. A generator of pairs is a perm."""
    mesh = shardc.make_mesh((8,), ("i",))
    x = np.arange(32, dtype=np.float32).reshape(8, 4)

    def run(body):
        return np.asarray(shardc.shard_map(body, mesh=mesh, in_specs=P("i"),
                                           out_specs=P("i"))(x))

    np.testing.assert_array_equal(run(lambda a: lax.all_gather(a, ())), x)
    np.testing.assert_array_equal(run(lambda a: lax.all_gather(a, (), tiled=True, axis=1)), x)
    np.testing.assert_array_equal(run(lambda a: lax.psum_scatter(a, ())), x)
    np.testing.assert_array_equal(run(lambda a: lax.ppermute(a, (), [])), np.zeros_like(x))
    np.testing.assert_array_equal(run(lambda a: lax.ppermute(a, (), [(0, 0)])), x)
    reversed_blocks = run(lambda a: lax.ppermute(a, "i", ((j, 7 - j) for j in range(8))))
    np.testing.assert_array_equal(reversed_blocks, x[::-1])


def test_pargmax_and_pargmin_over_vmap_and_mesh_axes():
    """``jax._src.lax.parallel.pargmax``/``pargmin``: the member index of each entry's
    largest (smallest) value, the same on every member; numpy's argmax over the members."""
    from shardc.lax import parallel
    rng = np.random.default_rng(3)
    for shape, axis in [((7,), 0), ((5, 8), 0), ((5, 8), 1)]:
        x = rng.standard_normal(shape).astype(np.float32)
        for collective, bulk in [(parallel.pargmax, np.argmax), (parallel.pargmin, np.argmin)]:
            got = shardc.vmap(lambda v: collective(v, "i"), in_axes=axis, out_axes=None,
                              axis_name="i")(x)
            np.testing.assert_array_equal(got, bulk(x, axis=axis))
    x = rng.standard_normal((8, 3)).astype(np.float32)
    f = shardc.shard_map(lambda b: parallel.pargmax(b, "i"), mesh=shardc.make_mesh((8,), ("i",)),
                         in_specs=P("i"), out_specs=P())
    np.testing.assert_array_equal(f(x), np.argmax(x, axis=0)[None])
