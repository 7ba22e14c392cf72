"""Property tests: shard_map against the tutorial's reference semantics (SEMANTICS 1.7).

Generated meshes (full and sub-meshes, device ids not starting at 0), specs (None, names,
tuples, unmentioned axes), shapes, dtypes and bodies from a small menu (elementwise ops,
reductions keeping rank, psum/pmean/pmax/pmin over random axis tuples, axis_index). Each case
runs under shardc eagerly and under ``jit`` and is held against ``reference_semantics``, a
plain-numpy lockstep reference that shares no code with the compiler.
"""
from __future__ import annotations

import math
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

try:
    import shardc
except ImportError:  # run from elsewhere than the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import shardc

import shardc.numpy as jnp
from shardc import lax
from shardc.experimental.shard_map import shard_map as old_shard_map
from shardc.sharding import Mesh, NamedSharding, PartitionSpec as P
from ir import sharding as irs

import reference_semantics as ref

SETTINGS = dict(derandomize=True, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# The body's operations under shardc; RefOps is the reference's counterpart.
SHARDC_OPS = types.SimpleNamespace(
    psum=lax.psum, pmean=lax.pmean, pmax=lax.pmax, pmin=lax.pmin,
    axis_index=lax.axis_index, axis_size=lax.axis_size,
    sum=jnp.sum, max=jnp.max, min=jnp.min, abs=jnp.abs, maximum=jnp.maximum,
    minimum=jnp.minimum, where=jnp.where, astype=jnp.astype)


# --- meshes ----------------------------------------------------------------------------------------

FULL_SHAPES = [(8,), (4, 2), (2, 4), (2, 2, 2)]
SUB_SHAPES = [(1,), (2,), (1, 2), (2, 1), (2, 2), (4,), (4, 1), (1, 4)]
NAME_SETS = [("x", "y", "z"), ("i", "j", "k"), ("b", "a", "c")]


class MeshPair:
    """One mesh as shardc sees it and as the reference sees it."""

    def __init__(self, shape, names, ids, via_make_mesh=False):
        shape, names, ids = tuple(shape), tuple(names), tuple(ids)
        if via_make_mesh:
            assert ids == tuple(range(len(ids)))
            self.mesh = shardc.make_mesh(shape, names)
        else:
            devices = shardc.devices()
            self.mesh = Mesh(np.array([devices[i] for i in ids], dtype=object).reshape(shape),
                             names)
        self.ref = ref.RefMesh(names, shape, ids)
        assert self.mesh.flat_device_ids == ids

    @property
    def names(self):
        return self.ref.axis_names

    def __repr__(self):
        return f"MeshPair({self.ref.axis_sizes}, {self.names}, ids={self.ref.device_ids})"


@st.composite
def meshes(draw):
    shape = draw(st.sampled_from(FULL_SHAPES + SUB_SHAPES))
    names = draw(st.sampled_from(NAME_SETS))[:len(shape)]
    n = math.prod(shape)
    how = draw(st.sampled_from(["make_mesh", "offset", "permuted"]))
    if how == "make_mesh":
        return MeshPair(shape, names, range(n), via_make_mesh=True)
    if how == "offset":
        start = draw(st.integers(0, 8 - n))
        return MeshPair(shape, names, range(start, start + n))
    order = draw(st.permutations(range(8)))
    return MeshPair(shape, names, order[:n])


# --- specs -----------------------------------------------------------------------------------------

@st.composite
def specs(draw, names, rank, required=frozenset()):
    """A spec of length <= rank naming every ``required`` axis and maybe others, each at most
    once; tuple entries in random order, sometimes 1-tuples and ()."""
    dim_of = {}
    for a in names:
        if a in required:
            dim_of[a] = draw(st.integers(0, rank - 1))
        else:
            dim_of[a] = draw(st.sampled_from([None] + list(range(rank))))
    order = draw(st.permutations(names))
    entries = []
    for d in range(rank):
        axes = tuple(a for a in order if dim_of[a] == d)
        if not axes:
            entries.append(draw(st.sampled_from([None, None, None, ()])))
        elif len(axes) == 1:
            entries.append(draw(st.sampled_from([axes[0], axes[0], axes])))
        else:
            entries.append(axes)
    used = [d for d in range(rank) if entries[d] not in (None, ())]
    length = draw(st.integers(used[-1] + 1 if used else 0, rank))
    return P(*entries[:length])


@st.composite
def axis_names_arg(draw, names):
    """A collective's axis_name: a random nonempty subset in random order, a str if single."""
    axes = draw(st.permutations(names))[:draw(st.integers(1, len(names)))]
    if len(axes) == 1 and draw(st.booleans()):
        return axes[0]
    return tuple(axes)


def spec_size(mesh: MeshPair, spec, d):
    entries = list(spec)
    return mesh.ref.axes_size(ref.entry_names(entries[d])) if d < len(entries) else 1


# --- bodies from a small menu ----------------------------------------------------------------------

# Step kinds, collectives listed more often so most programs communicate.
STEP_KINDS = ("collective", "axis_index", "collective", "reduce", "add", "collective", "mul",
              "neg", "abs", "maximum", "where_gt", "collective", "axis_index", "reduce",
              "axis_size", "add_input_sum", "add_closure")


@st.composite
def steps(draw, names, n_inputs):
    kind = draw(st.sampled_from(STEP_KINDS))
    if kind in ("neg", "abs"):
        return (kind,)
    if kind == "add":
        return (kind, draw(st.integers(-3, 3)))
    if kind == "mul":
        return (kind, draw(st.sampled_from([-2, -1, 2, 3])))
    if kind in ("maximum", "where_gt"):
        return (kind, draw(st.integers(-2, 2)))
    if kind == "reduce":
        return (kind, draw(st.sampled_from(["sum", "max", "min"])), draw(st.integers(0, 2)))
    if kind == "collective":
        return (kind, draw(st.sampled_from(["psum", "pmean", "pmax", "pmin"])),
                draw(axis_names_arg(names)))
    if kind in ("axis_index", "axis_size"):
        return (kind, draw(axis_names_arg(names)))
    if kind == "add_closure":
        return (kind,)
    return (kind, draw(st.integers(0, n_inputs - 1)))


def apply_step(ops, step, x, inputs):
    kind = step[0]
    if kind == "neg":
        return -x
    if kind == "abs":
        return ops.abs(x)
    if kind == "add":
        return x + step[1]
    if kind == "mul":
        return x * step[1]
    if kind == "maximum":
        return ops.maximum(x, step[1])
    if kind == "where_gt":
        return ops.where(x > step[1], x, x * 2)
    if kind == "reduce":
        reduce = {"sum": ops.sum, "max": ops.max, "min": ops.min}[step[1]]
        return reduce(x, axis=step[2] % x.ndim, keepdims=True)
    if kind == "collective":
        return getattr(ops, step[1])(x, step[2])
    if kind == "axis_index":
        return x + ops.axis_index(step[1])
    if kind == "axis_size":
        return x + ops.psum(1, step[1])          # a Python number: the static group size
    if kind == "add_input_sum":
        return x + ops.sum(inputs[step[1]])
    if kind == "add_closure":               # a closed-over array: an input with spec P()
        size = math.prod(x.shape)
        return x + (np.arange(size) % 3 - 1).reshape(x.shape).astype(x.dtype)
    raise AssertionError(step)


def make_body(program, snapshot):
    """``body(ops, *inputs)``: the program's steps on input 0; returns the final value, and
    the value after step ``snapshot`` as a second output when it is not None."""
    def body(ops, *inputs):
        x = inputs[0]
        values = [x]
        for step in program:
            x = apply_step(ops, step, x, inputs)
            values.append(x)
        return (x,) if snapshot is None else (x, values[snapshot])
    return body


def shardc_function(body):
    def f(*blocks):
        return body(SHARDC_OPS, *blocks)
    return f


# --- cases -----------------------------------------------------------------------------------------

@st.composite
def inputs(draw, mesh: MeshPair):
    """1-2 arrays: random rank, dtype, in_spec; shape divisible by the spec; small integers."""
    n = draw(st.integers(1, 2))
    arrays, in_specs = [], []
    for _ in range(n):
        rank = draw(st.integers(1, 3))
        spec = draw(specs(mesh.names, rank))
        block = [draw(st.integers(1, 3)) for _ in range(rank)]
        shape = tuple(b * spec_size(mesh, spec, d) for d, b in enumerate(block))
        dtype = draw(st.sampled_from([np.float32, np.int32]))
        seed = draw(st.integers(0, 2**16))
        values = np.random.default_rng(seed).integers(-4, 5, size=shape).astype(dtype)
        arrays.append(values)
        in_specs.append(spec)
    return arrays, in_specs


@st.composite
def cases(draw):
    mesh = draw(meshes())
    arrays, in_specs = draw(inputs(mesh))
    program = draw(st.lists(steps(mesh.names, len(arrays)), min_size=1, max_size=5))
    snapshot = draw(st.one_of(st.none(), st.integers(0, len(program))))
    return mesh, arrays, in_specs, program, snapshot


def describe(mesh: MeshPair, program, checked):
    """Hypothesis statistics (--hypothesis-show-statistics): what the cases covered."""
    event(f"mesh {mesh.ref.axis_sizes}, ids from {min(mesh.ref.device_ids)}")
    event(f"check {'on' if checked else 'off'}")
    event(f"{sum(s[0] == 'collective' for s in program)} collectives")
    for kind in sorted({s[0] for s in program}):
        event(f"uses {kind}")


def call_shardc(mesh: MeshPair, body, in_specs, out_specs, args, *, check, api, jit):
    f = shardc_function(body)
    in_specs, out_specs = tuple(in_specs), tuple(out_specs)
    if api == "new":
        mapped = shardc.shard_map(f, mesh=mesh.mesh, in_specs=in_specs, out_specs=out_specs,
                                  check_vma=check)
    else:
        mapped = old_shard_map(f, mesh.mesh, in_specs, out_specs, check_rep=check)
    return (shardc.jit(mapped) if jit else mapped)(*args)


def place_inputs(draw, mesh: MeshPair, arrays, in_specs):
    """numpy arrays, or Arrays laid out by their in_spec, or replicated (resharded at entry;
    on an all-Explicit mesh an Array's type must match its in_spec, as in JAX: laid out by
    it)."""
    placed = []
    explicit = len(mesh.mesh.explicit_axes) == len(mesh.names)
    for x, spec in zip(arrays, in_specs):
        how = draw(st.sampled_from(["numpy", "numpy", "same", "replicated"]))
        if how == "replicated" and explicit:
            how = "same"
        if how == "numpy":
            placed.append(x)
        elif how == "same":
            placed.append(shardc.device_put(x, NamedSharding(mesh.mesh, spec)))
        else:
            placed.append(shardc.device_put(x, NamedSharding(mesh.mesh, P())))
    return placed


def _read_back(entries, mesh) -> list:
    """Spec entries as JAX reads a layout back from its compiler: axes of one device
    dropped (it cannot see them), no trailing None."""
    out = []
    for entry in entries:
        names = [a for a in (entry if isinstance(entry, tuple) else (entry,))
                 if a is not None and mesh.shape[a] > 1]
        out.append(None if not names else names[0] if len(names) == 1 else tuple(names))
    while out and out[-1] is None:
        out.pop()
    return out


def assert_matches(result, expected: np.ndarray, expected_blocks, mesh: MeshPair, spec,
                   *, consistent: bool, padded: bool = False, arguments=None):
    """Value, shape, dtype, canonical spec (``padded``: one entry per dimension, as a jitted
    program's results on an Explicit mesh report it; ``arguments``: a jitted program's on an
    Auto mesh, spelt as JAX spells what its compiler worked out: as the first argument where
    it has the same rank and layout, else without axes of one device or trailing None); with ``consistent`` every shard's buffer is
    the reference block of its position and the global array's slice at its index."""
    assert isinstance(result, shardc.Array), type(result)
    got = np.asarray(result)
    assert result.shape == expected.shape and got.shape == expected.shape
    assert result.dtype == expected.dtype and got.dtype == expected.dtype, (got.dtype,
                                                                             expected.dtype)
    if np.issubdtype(expected.dtype, np.floating):
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=0)
    else:
        np.testing.assert_array_equal(got, expected)
    entries = ref.canonical_entries(spec)
    if padded:
        entries = tuple(entries) + (None,) * (result.ndim - len(entries))
    if arguments is not None:
        entries = _read_back(entries, mesh.mesh)
        first = arguments[0] if arguments else None       # JAX compares the first only
        first_sharding = getattr(first, "sharding", None)
        if (first is not None and np.ndim(first) == result.ndim
                and isinstance(first_sharding, NamedSharding)
                and first_sharding.mesh == mesh.mesh
                and _read_back(ref.canonical_entries(first_sharding.spec), mesh.mesh)
                == entries):
            entries = tuple(first_sharding.spec)
    assert result.sharding.spec == P(*entries), result.sharding.spec
    assert result.sharding.mesh == mesh.mesh
    if not consistent:
        return
    shards = result.addressable_shards
    assert [s.device.id for s in shards] == list(mesh.ref.device_ids)
    for p, shard in enumerate(shards):
        np.testing.assert_array_equal(np.asarray(shard.data), expected_blocks[p])
        np.testing.assert_array_equal(np.asarray(shard.data), expected[shard.index])


# --- 1.3: block shapes and their inverse -----------------------------------------------------------

@settings(max_examples=200, **SETTINGS)
@given(st.data())
def test_block_shape_and_global_shape_are_inverse(data):
    mesh = data.draw(meshes())
    rank = data.draw(st.integers(0, 4))
    spec = data.draw(specs(mesh.names, rank))
    block = tuple(data.draw(st.lists(st.integers(0, 5), min_size=rank, max_size=rank)))
    sizes = mesh.mesh.shape
    glob = irs.global_shape(block, spec, sizes)
    assert glob == ref.global_shape(block, spec, mesh.ref)
    assert irs.block_shape(glob, spec, sizes) == block
    assert irs.global_shape(irs.block_shape(glob, spec, sizes), spec, sizes) == glob
    # Any global shape: the round trip holds exactly when every dimension divides.
    g = tuple(data.draw(st.lists(st.integers(0, 17), min_size=rank, max_size=rank)))
    if all(n % spec_size(mesh, spec, d) == 0 for d, n in enumerate(g)):
        assert irs.global_shape(irs.block_shape(g, spec, sizes), spec, sizes) == g
        assert irs.block_shape(g, spec, sizes) == ref.block_shape(g, spec, mesh.ref)
    else:
        with pytest.raises(ValueError):
            irs.block_shape(g, spec, sizes)


# --- 2.0: device groups ----------------------------------------------------------------------------

@settings(max_examples=150, **SETTINGS)
@given(st.data())
def test_device_groups_partition_the_mesh_in_rank_order(data):
    mesh = data.draw(meshes())
    n = data.draw(st.integers(0, len(mesh.names)))
    axes = tuple(data.draw(st.permutations(mesh.names))[:n])
    groups = irs.device_groups(mesh.mesh, axes)
    ids = mesh.ref.device_ids
    members = [d for g in groups for d in g]
    assert sorted(members) == sorted(ids), "every device in exactly one group"
    position = {d: p for p, d in enumerate(ids)}
    size = mesh.ref.axes_size(axes)
    for group in groups:
        assert len(group) == size
        coords = [mesh.ref.coord(position[d]) for d in group]
        # Members agree off the axes and are ordered by rank over the axes as listed.
        assert len({tuple(c[a] for a in mesh.names if a not in axes) for c in coords}) == 1
        assert [mesh.ref.rank(c, axes) for c in coords] == list(range(size))
    firsts = [position[g[0]] for g in groups]
    assert firsts == sorted(firsts)
    assert [list(g) for g in groups] == [[ids[p] for p in g]
                                         for g in ref.device_groups(mesh.ref, axes)]
    # Listing the axes in reverse changes member order but not membership.
    reverse = irs.device_groups(mesh.mesh, axes[::-1])
    assert sorted(map(sorted, reverse)) == sorted(map(sorted, groups))


def test_device_groups_examples_of_2_0():
    mesh = shardc.make_mesh((2, 2), ("i", "j"))
    assert irs.device_groups(mesh, ("i",)) == ((0, 2), (1, 3))
    assert irs.device_groups(mesh, ("j",)) == ((0, 1), (2, 3))
    assert irs.device_groups(mesh, ("i", "j")) == ((0, 1, 2, 3),)
    assert irs.device_groups(mesh, ("j", "i")) == ((0, 2, 1, 3),)
    rm = ref.RefMesh(("i", "j"), (2, 2), (0, 1, 2, 3))
    assert ref.device_groups(rm, ("i",)) == [[0, 2], [1, 3]]
    assert ref.device_groups(rm, ("j", "i")) == [[0, 2, 1, 3]]


def test_device_groups_use_ids_on_a_sub_mesh():
    mesh = MeshPair((2, 2), ("i", "j"), range(2, 6))
    assert irs.device_groups(mesh.mesh, ("i",)) == ((2, 4), (3, 5))
    assert irs.device_groups(mesh.mesh, ("j", "i")) == ((2, 4, 3, 5),)


# --- shard_map against the reference ---------------------------------------------------------------

@settings(max_examples=300, **SETTINGS)
@given(cases(), st.data())
def test_shard_map_matches_reference(case, data):
    mesh, arrays, in_specs, program, snapshot = case
    body = make_body(program, snapshot)
    outs = ref.run_body(body, mesh.ref, in_specs, arrays)
    checked = data.draw(st.booleans(), label="check on")
    describe(mesh, program, checked)
    if checked:   # out_specs naming every axis each output may vary over, maybe more
        out_specs = [data.draw(specs(mesh.names, o.ndim, required=o.vma)) for o in outs]
    else:         # anything: untiling takes the coordinate-0 blocks
        out_specs = [data.draw(specs(mesh.names, o.ndim)) for o in outs]
    expected = ref.run_shard_map(body, mesh.ref, in_specs, out_specs, arrays, check_vma=checked)
    api = data.draw(st.sampled_from(["new", "old"]), label="api")
    args = place_inputs(data.draw, mesh, arrays, in_specs)
    for jit in (False, True):
        results = call_shardc(mesh, body, in_specs, out_specs, args, check=checked, api=api,
                              jit=jit)
        assert isinstance(results, tuple) and len(results) == len(out_specs)
        for result, want, blocks, spec in zip(results, expected.outputs, expected.blocks,
                                              out_specs):
            explicit = bool(mesh.mesh.explicit_axes)
            assert_matches(result, want, blocks, mesh, spec, consistent=checked,
                           padded=jit and explicit,
                           arguments=args if jit and not explicit else None)


# --- 3.7: replication soundness --------------------------------------------------------------------

@settings(max_examples=300, **SETTINGS)
@given(cases(), st.data())
def test_replication_check_is_sound(case, data):
    """Whenever the static check accepts out_specs omitting an axis, the reference's blocks
    along it are bitwise equal; and it accepts exactly what SEMANTICS 3.3's rules infer."""
    mesh, arrays, in_specs, program, snapshot = case
    body = make_body(program, snapshot)
    outs = ref.run_body(body, mesh.ref, in_specs, arrays)
    out_specs = [data.draw(specs(mesh.names, o.ndim)) for o in outs]
    inferred_ok = all(o.vma <= ref.named_axes(s) for o, s in zip(outs, out_specs))
    for jit in (False, True):
        try:
            results = call_shardc(mesh, body, in_specs, out_specs, arrays, check=True,
                                  api="new", jit=jit)
        except ValueError as err:
            event("rejected")
            assert "require replication which can't be statically inferred" in str(err), err
            assert not inferred_ok, f"rejected, but 3.3 infers {[set(o.vma) for o in outs]}"
            continue
        event("accepted" + (" omitting an axis" if any(
            set(mesh.names) - ref.named_axes(s) for s in out_specs) else ""))
        assert inferred_ok, f"accepted, but 3.3 infers {[set(o.vma) for o in outs]}"
        for o, spec, result in zip(outs, out_specs, results):
            assert ref.copies_equal(o.blocks, spec, mesh.ref)
            assert ref.copies_equal([s.data for s in result.addressable_shards], spec, mesh.ref)
            np.testing.assert_array_equal(np.asarray(result),
                                          ref.assemble(o.blocks, spec, mesh.ref))


# --- 1.4 / 1.5: the literal examples ---------------------------------------------------------------

def _identity(x):
    return x


def test_tuple_entry_slicing_example_of_1_4():
    mesh = shardc.make_mesh((4, 2), ("i", "j"))
    x = np.arange(8)
    spec = P(("j", "i"))
    expected = [0, 4, 1, 5, 2, 6, 3, 7]
    rm = ref.RefMesh(("i", "j"), (4, 2), tuple(range(8)))
    assert [int(b[0]) for b in ref.input_blocks(x, spec, rm)] == expected
    placed = shardc.device_put(x, NamedSharding(mesh, spec))
    assert [int(s.data[0]) for s in placed.addressable_shards] == expected
    # Blocks concatenated in position order (rank over ('i','j') is the position).
    out = shardc.shard_map(_identity, mesh=mesh, in_specs=P(("j", "i")),
                           out_specs=P(("i", "j")))(x)
    np.testing.assert_array_equal(np.asarray(out), expected)
    assert [int(s.data[0]) for s in out.addressable_shards] == expected


@pytest.mark.parametrize("jit", [False, True])
def test_block_transpose_example_of_1_5(jit):
    mesh = shardc.make_mesh((4, 2), ("x", "y"))
    f = shardc.shard_map(_identity, mesh=mesh, in_specs=P(("x", "y")), out_specs=P(("y", "x")))
    out = (shardc.jit(f) if jit else f)(np.arange(8, dtype=np.int32))
    np.testing.assert_array_equal(np.asarray(out), [0, 2, 4, 6, 1, 3, 5, 7])
    assert out.sharding.spec == P(("y", "x"))


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("api", ["new", "old"])
def test_untiling_with_the_check_off_takes_coordinate_0_blocks(jit, api):
    mesh = shardc.make_mesh((4, 2), ("x", "y"))
    if api == "new":
        f = shardc.shard_map(_identity, mesh=mesh, in_specs=P("x", "y"), out_specs=P(),
                             check_vma=False)
    else:
        f = old_shard_map(_identity, mesh, P("x", "y"), P(), check_rep=False)
    x = np.arange(128, dtype=np.float32).reshape(8, 16)
    out = (shardc.jit(f) if jit else f)(x)
    np.testing.assert_array_equal(np.asarray(out), x[0:2, 0:8])
    # a jitted program's results on an Explicit mesh report one entry per dimension (JAX)
    assert out.shape == (2, 8) and out.sharding.spec == (P(None, None) if jit else P())


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("spec, reps", [(P("i", "j"), (4, 2)), (P("i", None), (4, 1)),
                                        (P(None, None), (1, 1))])
def test_closure_tiling_example_of_1_5(spec, reps, jit):
    mesh = shardc.make_mesh((4, 2), ("i", "j"))
    x = np.array([[3.0]], dtype=np.float32)
    f = old_shard_map(lambda: x, mesh, (), spec)
    out = (shardc.jit(f) if jit else f)()
    np.testing.assert_array_equal(np.asarray(out), np.tile(x, reps))
    assert out.dtype == np.float32
    assert out.sharding.spec == spec          # P('i', None) keeps its length


# --- 2.1 / 2.6: the literal collective examples on (2,2) ----------------------------------------

PSUM_EXAMPLES = [
    ("psum", "i", [4, 6, 4, 6], np.int32),
    ("psum", "j", [3, 3, 7, 7], np.int32),
    ("psum", ("i", "j"), [10] * 4, np.int32),
    ("pmean", "i", [2.0, 3.0, 2.0, 3.0], np.float32),
    ("pmin", "j", [1, 1, 3, 3], np.int32),
    ("pmax", ("i", "j"), [4] * 4, np.int32),
]


@pytest.mark.parametrize("prim, axes, want, dtype", PSUM_EXAMPLES)
@pytest.mark.parametrize("jit", [False, True])
def test_reduction_examples_of_2_1(prim, axes, want, dtype, jit):
    mesh = MeshPair((2, 2), ("i", "j"), range(4), via_make_mesh=True)
    blocks = np.arange(1, 5, dtype=np.int32)            # position p holds [p + 1]
    body = lambda ops, x: (getattr(ops, prim)(x, axes),)  # noqa: E731
    spec = P(("i", "j"))
    got = call_shardc(mesh, body, [spec], [spec], [blocks], check=True, api="new", jit=jit)[0]
    assert got.dtype == dtype
    np.testing.assert_array_equal(np.asarray(got), np.array(want, dtype))
    expected = ref.run_shard_map(body, mesh.ref, [spec], [spec], [blocks]).outputs[0]
    assert expected.dtype == dtype
    np.testing.assert_array_equal(expected, np.array(want, dtype))


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("axes, want", [("i", [0, 0, 1, 1]), (("i", "j"), [0, 1, 2, 3]),
                                        (("j", "i"), [0, 2, 1, 3])])
def test_axis_index_examples_of_2_6(axes, want, jit):
    mesh = MeshPair((2, 2), ("i", "j"), range(2, 6))     # ids 2..5: ranks use positions
    body = lambda ops, x: (x + ops.axis_index(axes),)   # noqa: E731
    spec = P(("i", "j"))
    zeros = np.zeros(4, np.int32)
    got = call_shardc(mesh, body, [spec], [spec], [zeros], check=True, api="new", jit=jit)[0]
    np.testing.assert_array_equal(np.asarray(got), np.array(want, np.int32))
    assert got.dtype == np.int32
    expected = ref.run_shard_map(body, mesh.ref, [spec], [spec], [zeros]).outputs[0]
    np.testing.assert_array_equal(expected, np.array(want, np.int32))


def test_the_reference_rejects_what_3_5_rejects():
    """The reference's own check: 2*x in P('x','y') out P(None,'y') fails over 'x';
    with psum(x,'x') it passes (SEMANTICS 3.5's example)."""
    rm = ref.RefMesh(("x", "y"), (4, 2), tuple(range(8)))
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    with pytest.raises(ref.ReferenceReplicationError):
        ref.run_shard_map(lambda ops, v: (2 * v,), rm, [P("x", "y")], [P(None, "y")], [x])
    out = ref.run_shard_map(lambda ops, v: (ops.psum(v, "x"),), rm, [P("x", "y")],
                            [P(None, "y")], [x]).outputs[0]
    np.testing.assert_array_equal(out, x.reshape(4, 2, 4).sum(0))


def test_pmean_of_integers_is_float32_under_jit():
    """The lowered all_reduce keeps pmean's float32 (SEMANTICS 2.0)."""
    mesh = shardc.make_mesh((8,), ("x",))
    f = shardc.shard_map(lambda a: lax.pmean(a, "x"), mesh=mesh, in_specs=P("x"),
                         out_specs=P())
    out = shardc.jit(f)(np.arange(8, dtype=np.int32))
    assert out.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(out), np.array([3.5], np.float32))
