"""Auto axes (``Mesh(...)``, the tutorial's meshes): a jitted program whose arguments are laid
out on the mesh is typed by propagation from their layouts and computed block by block, as an
explicit-mode program is. Values equal the unsplit computation; results an annotation or an
elementwise/reduction chain fixes are laid out as JAX lays them out; what cannot be followed
is gathered, never guessed."""
from __future__ import annotations

import contextlib
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from shardc import lax
from shardc.sharding import Mesh, NamedSharding, PartitionSpec as P

from lowered_comm import communication

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

MESH = Mesh(np.array(jax.devices()).reshape(4, 2), ("x", "y"))
RNG = np.random.default_rng(0)
H = RNG.standard_normal((8, 16)).astype(np.float32)
HW = RNG.standard_normal((16, 4)).astype(np.float32)


def placed(value, *spec):
    return jax.device_put(value, NamedSharding(MESH, P(*spec)))


# (function, arguments' specs, the result's spec as JAX 0.10.2 lays it out, collectives)
CASES = {
    "elementwise": (lambda a: jnp.sin(a) * 2 + 1, [("x", "y")], P("x", "y"), []),
    "sum over rows": (lambda a: a.sum(0), [("x", "y")], P("y"), [("all_reduce", ("x",))]),
    "sum of all": (lambda a: a.sum(), [("x", "y")], P(), [("all_reduce", ("x", "y"))]),
    "centre rows": (lambda a: a - a.mean(1, keepdims=True), [("x", "y")], P("x", "y"),
                    [("all_reduce", ("y",))]),
    "transpose": (lambda a: a.T * 2, [("x", "y")], P("y", "x"), []),
    "split alike": (lambda a, b: a * b, [("x", "y"), ("x", "y")], P("x", "y"), []),
    "argmax": (lambda a: jnp.argmax(a, 1), [("x", "y")], P("x"), None),
}


@pytest.mark.parametrize("name", list(CASES))
def test_jit_on_auto_axes_runs_on_blocks(name):
    fn, specs, want, comm = CASES[name]
    args = [placed(H, *s) for s in specs]
    out = jax.jit(fn)(*args)
    reference = fn(*[jnp.asarray(H) for _ in specs])       # unsplit, one device
    np.testing.assert_allclose(np.asarray(out), np.asarray(reference), rtol=1e-6, atol=1e-6)
    assert out.sharding == NamedSharding(MESH, want)
    assert str(jax.typeof(out)) == f"{out.dtype.name}[{','.join(map(str, out.shape))}]"
    if comm is not None:
        assert communication(fn, *args) == comm


def test_the_issue_row_w_times_2_keeps_its_layout_on_auto_axes():
    w = placed(H, "x", None)
    out = jax.jit(lambda w: w * 2)(w)
    assert out.sharding == NamedSharding(MESH, P("x", None))
    assert jax.jit(lambda w: w * 2)(w).sharding == out.sharding      # the cached call too
    np.testing.assert_array_equal(np.asarray(out), H * 2)
    assert communication(lambda w: w * 2, w) == []


@pytest.mark.parametrize("fn", [
    lambda a, b: a @ b, lambda a, b: a + jnp.concatenate([b, b], 1).T,
    lambda a, b: jnp.cumsum(a, 0) @ b, lambda a, b: jnp.sort(a, 1)[:, :4] * b[:8],
    lambda a, b: lax.fori_loop(0, 3, lambda i, c: c * 2 + a.sum(0)[:4], b[:8]),
    lambda a, b: jax.grad(lambda p, q: jnp.sum(jnp.tanh(p @ q)), argnums=(0, 1))(a, b),
    lambda a, b: a.reshape(128)[::3] * 2,
], ids=["dot", "concat-slice", "cumsum-dot", "sort", "loop", "grad", "reshape-stride"])
@pytest.mark.parametrize("layout", [("x", "y"), ("x", None), (None, "y"), (("x", "y"), None)])
def test_values_never_depend_on_the_layout(fn, layout):
    """Whatever the propagation could or could not follow, the values are the program's."""
    a, b = placed(H, *layout), placed(HW, "y", None)
    got = jax.jit(fn)(a, b)
    want = fn(jnp.asarray(H), jnp.asarray(HW))
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-5)


def test_annotations_fix_the_result_layout():
    u = placed(H, "x", None)
    constrained = jax.jit(lambda a: lax.with_sharding_constraint(a * 2, NamedSharding(
        MESH, P(None, "y"))))(u)
    assert constrained.sharding == NamedSharding(MESH, P(None, "y"))
    out = jax.jit(lambda a: a * 2, out_shardings=NamedSharding(MESH, P("y", None)))(u)
    assert out.sharding == NamedSharding(MESH, P("y", None))
    np.testing.assert_array_equal(np.asarray(out), H * 2)


def test_the_lowered_module_shows_the_propagated_types_and_parses_back():
    from ir.parser import parse_module
    from ir.printer import print_module
    module = jax.jit(lambda a: a - a.mean(0)).lower(placed(H, "x", "y")).module
    text = print_module(module)
    assert text.startswith("types on Mesh('x': 4, 'y': 2, axis_types=(Auto, Auto)):\n"
                           "{ lambda ; a:f32[8@x,16@y]. let")
    assert print_module(parse_module(text)) == text


def test_a_shard_maps_results_propagate_as_its_out_specs_say():
    w = placed(H, "x", None)
    centre = jax.shard_map(lambda b: b - lax.pmean(b, "x"), mesh=MESH, in_specs=P("x", None),
                           out_specs=P("x", None))
    step = lambda w: centre(w) * 2 + 1       # noqa: E731
    out = jax.jit(step)(w)
    assert out.sharding == NamedSharding(MESH, P("x", None))
    blocks = H.reshape(4, 2, 16)
    np.testing.assert_allclose(np.asarray(out), ((blocks - blocks.mean(0)) * 2 + 1).reshape(8, 16),
                               rtol=1e-6, atol=1e-6)
    # the only communication is the pmean the shard_map writes: the update runs on blocks
    assert communication(step, w) == [("all_reduce", ("x",))]


def test_eager_operations_on_auto_layouts_run_on_blocks():
    w = placed(H, "x", None)
    doubled = w * 2
    centred = w - w.mean(0)
    assert doubled.sharding == NamedSharding(MESH, P("x", None))
    assert centred.sharding == NamedSharding(MESH, P("x", None))
    np.testing.assert_array_equal(np.asarray(doubled), H * 2)
    np.testing.assert_allclose(np.asarray(centred), H - H.mean(0), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(jnp.cumsum(w, 0)), np.cumsum(H, 0), rtol=1e-5,
                               atol=1e-5)


# --- random programs on Auto meshes -------------------------------------------------------------

from hypothesis import given, settings, strategies as st  # noqa: E402

MESHES = [Mesh(np.array(jax.devices()).reshape(shape), names) for shape, names in
          [((8,), ("a",)), ((2, 4), ("x", "y")), ((4, 2), ("x", "y")),
           ((2, 2, 2), ("x", "y", "z"))]]
STEPS = {
    "sin": lambda a, b: jnp.sin(a) * 2,
    "add": lambda a, b: a + b,
    "mul": lambda a, b: a * b - 1,
    "row sum": lambda a, b: a.sum(0, keepdims=True) + b,
    "centre": lambda a, b: a - a.max(1, keepdims=True),
    "cumsum 0": lambda a, b: jnp.cumsum(a, 0),
    "cumsum 1": lambda a, b: jnp.cumsum(a, 1) + b,
    "transpose": lambda a, b: (a.T * 2).T,
    "reshape": lambda a, b: a.reshape(-1).reshape(a.shape) * 3,
    "where": lambda a, b: jnp.where(a > 0, a, b),
    "concat": lambda a, b: jnp.concatenate([a, b], 0)[: a.shape[0]],
    "sort": lambda a, b: jnp.sort(a, 0),
    "reverse": lambda a, b: a[::-1] + b[:, ::-1],
    "loop": lambda a, b: lax.fori_loop(0, 2, lambda i, c: c * 0.5 + b, a),
    "grad": lambda a, b: jax.grad(lambda q: jnp.sum(jnp.tanh(q) * b))(a),
    "dot": lambda a, b: (a @ b.T @ b) / 64,
}


@st.composite
def placements(draw, mesh, shape):
    axes = list(mesh.axis_names)
    spec = []
    for d in shape:
        options = [None] + [a for a in axes if d % mesh.shape[a] == 0]
        choice = draw(st.sampled_from(options))
        if choice is not None:
            axes.remove(choice)
        spec.append(choice)
    return P(*spec)


@settings(max_examples=150, derandomize=True, deadline=None)
@given(st.data())
def test_random_programs_on_auto_meshes_equal_the_unsplit_computation(data):
    mesh = data.draw(st.sampled_from(MESHES))
    shape = (data.draw(st.sampled_from([8, 16])), 16)
    steps = data.draw(st.lists(st.sampled_from(sorted(STEPS)), min_size=1, max_size=4))
    seed = data.draw(st.integers(0, 1000))
    ha = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    hb = np.random.default_rng(seed + 1).standard_normal(shape).astype(np.float32)
    a = jax.device_put(ha, NamedSharding(mesh, data.draw(placements(mesh, shape))))
    b = jax.device_put(hb, NamedSharding(mesh, data.draw(placements(mesh, shape))))
    annotated = data.draw(placements(mesh, shape))

    def program(a, b):
        for step in steps:
            a = STEPS[step](a, b)
        return a

    def constrained(a, b):
        return lax.with_sharding_constraint(program(a, b), NamedSharding(mesh, annotated))

    want = np.asarray(program(jnp.asarray(ha), jnp.asarray(hb)))
    for fn in (program, constrained):
        got = jax.jit(fn)(a, b)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)
        for shard in got.addressable_shards:       # every device holds its block
            np.testing.assert_allclose(shard.data, want[shard.index], rtol=1e-4, atol=1e-4)
    # an annotation fixes the result's layout
    assert jax.jit(constrained)(a, b).sharding == NamedSharding(mesh, annotated)
    # eagerly, one operation at a time, the same values
    np.testing.assert_allclose(np.asarray(program(a, b)), want, rtol=1e-4, atol=1e-4)


UNEVEN_STEPS = {                     # on one operand, shapes that stop dividing the mesh
    "drop a row": lambda a: a[1:],
    "drop columns": lambda a: a[:, 3:],
    "sin": lambda a: jnp.sin(a) * 2,
    "row sums": lambda a: a - a.sum(0, keepdims=True),
    "column max": lambda a: a * a.max(1, keepdims=True),
    "transpose": lambda a: a.T + 1,
    "square": lambda a: a @ a.T / 16,
    "cumsum": lambda a: jnp.cumsum(a, 0),
}


def _dividing_spec(mesh, spec, shape):
    """``spec`` along each dimension cut to the major axes that divide it."""
    out = []
    for names, d in zip(list(spec) + [None] * (len(shape) - len(spec)), shape):
        names = () if names is None else (names,) if isinstance(names, str) else tuple(names)
        while names and d % math.prod(mesh.shape[a] for a in names):
            names = names[:-1]
        out.append(None if not names else names[0] if len(names) == 1 else names)
    return out


@settings(max_examples=120, derandomize=True, deadline=None)
@given(st.data())
def test_random_programs_through_uneven_intermediates_equal_numpy(data):
    mesh = data.draw(st.sampled_from(MESHES))
    steps = data.draw(st.lists(st.sampled_from(sorted(UNEVEN_STEPS)), min_size=1, max_size=5))
    seed = data.draw(st.integers(0, 1000))
    ha = np.random.default_rng(seed).standard_normal((16, 16)).astype(np.float32)
    a = jax.device_put(ha, NamedSharding(mesh, data.draw(placements(mesh, (16, 16)))))
    names = [None] + list(mesh.axis_names) + [tuple(mesh.axis_names)]
    where = data.draw(st.lists(st.booleans(), min_size=len(steps), max_size=len(steps)))
    specs = [P(*[data.draw(st.sampled_from(names)) for _ in range(2)]) for _ in steps]
    specs = [s if len(set(a for e in s if e for a in ((e,) if isinstance(e, str) else e)))
             == sum(len((e,) if isinstance(e, str) else e) for e in s if e) else P()
             for s in specs]

    def program(x, constrain):
        for step, c, spec in zip(steps, where, specs):
            x = UNEVEN_STEPS[step](x)
            if c and constrain:       # a constraint that may split unevenly (JAX accepts it)
                x = lax.with_sharding_constraint(x, NamedSharding(mesh, spec))
        return x

    want = np.asarray(program(jnp.asarray(ha), False))
    with padded_with_nan():
        got = jax.jit(lambda x: program(x, True))(a)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)
    for shard in got.addressable_shards:
        np.testing.assert_allclose(shard.data, want[shard.index], rtol=1e-4, atol=1e-4)
    last = [s for s, c in zip(specs, where) if c]
    if where[-1]:           # a result constrained last keeps the dividing part of its layout
        assert list(got.sharding.spec) + [None] * (got.ndim - len(got.sharding.spec)) \
            == _dividing_spec(mesh, last[-1], got.shape)


# --- JAX 0.10.2's layouts, row by row (the programs run under both and the printed specs were
# compared); each keeps the values of the unsplit computation ----------------------------------

R = placed(H)                       # replicated on the mesh
W_ = lambda a, *s: lax.with_sharding_constraint(a, NamedSharding(MESH, P(*s)))


def _back_chain(a):
    b = a * 2
    return b, W_(b + 1, "x")


def _back_reduce(a):
    b = jnp.sin(a)
    return b, W_(b.sum(1), "x")


def _back_transpose(a):
    b = a.T
    return b, W_(b * 2, "y", "x")


def _back_through_constraint(a):
    b = a * 2
    return b, W_(b, "x", "y") + 1


def _two_constraints_meet(a):
    b = a * 2
    return b, W_(b, "x"), W_(b, None, "y")


def _back_dot(a):
    b = jnp.exp(a)
    return b, b.sum(0), W_(b @ b.T, "x")


# (function, arguments, each result's spec as JAX lays it out)
JAX_ROWS = {
    "a constraint lays out the chain before it": (_back_chain, lambda: [R], [P("x"), P("x")]),
    "host arguments too": (_back_chain, lambda: [H], [P("x"), P("x")]),
    "back through a reduction": (_back_reduce, lambda: [R], [P("x"), P("x")]),
    "back through a transpose": (_back_transpose, lambda: [R], [P("y", "x"), P("y", "x")]),
    "a constraint's operand": (_back_through_constraint, lambda: [R],
                               [P("x", "y"), P("x", "y")]),
    "two constraints meet": (_two_constraints_meet, lambda: [R],
                             [P("x", "y"), P("x"), P(None, "y")]),
    "an argument is never moved": (lambda a, c: (a + c, W_(c, None, "y")), lambda: [R, R],
                                   [P(), P(None, "y")]),
    "dot then sum": (_back_dot, lambda: [R], [P("x"), P(), P("x")]),
    "forward into a reduction": (lambda a: W_(jnp.exp(a), "x", "y").sum(1), lambda: [R],
                                 [P("x")]),
    "split meets replicated": (lambda a, b: a + b, lambda: [placed(H, "x", "y"), R],
                               [P("x", "y")]),
    "replicated meets split": (lambda a, b: a + b, lambda: [R, placed(H, "x", "y")],
                               [P("x", "y")]),
    "splits disagree on a dimension": (lambda a, b: a + b, lambda: [
        placed(H, "x", "y"), placed(H, None, "x")], [P("x")]),
    "splits disagree the other way": (lambda a, b: a * b, lambda: [
        placed(H, "x", "y"), placed(H, "y", None)], [P(None, "y")]),
    "splits merge": (lambda a, b: a * b, lambda: [placed(H, "x", None), placed(H, None, "y")],
                     [P("x", "y")]),
    "a contraction split on both sides": (lambda a, b: a @ b, lambda: [
        placed(H, "x", "y"), placed(HW, "y", None)], [P("x")]),
    "an argument's spelling": (lambda a, b: a @ b, lambda: [
        placed(H, "x", None), placed(HW, "y", None)], [P("x", None)]),
    "only the first argument's spelling counts": (
        lambda a, b: a + b, lambda: [R, placed(H, "x", None)], [P("x")]),
    "the first argument's spelling": (
        lambda b, a: a + b, lambda: [placed(H, "x", None), R], [P("x", None)]),
    "a host array first": (lambda a, b: a + b, lambda: [H, placed(H, "x", None)], [P("x")]),
    "cumsum keeps the split": (lambda a: jnp.cumsum(a, 0), lambda: [placed(H, "x", "y")],
                               [P("x", "y")]),
    "sort keeps the split": (lambda a: jnp.sort(a, 1), lambda: [placed(H, "x", "y")],
                             [P("x", "y")]),
    "a vector's sort is whole": (lambda a: (jnp.sort(a), jnp.argsort(a) * 2),
                                 lambda: [placed(H[0], ("x", "y"))], [P(), P()]),
    "slice keeps the split": (lambda a: a[1:5, ::2], lambda: [placed(H, "x", "y")],
                              [P("x", "y")]),
    "concatenate keeps the split": (lambda a, b: jnp.concatenate([a, b], 1), lambda: [
        placed(H, "x", "y"), placed(H, "x", None)], [P("x", "y")]),
    "grad through a split contraction": (
        jax.grad(lambda a, b: jnp.sum(jnp.tanh(a @ b))),
        lambda: [placed(H, "x", "y"), placed(HW, "y", None)], [P("x", "y")]),
    "a loop's carry keeps its split": (
        lambda a: lax.fori_loop(0, 3, lambda i, c: c * 2 + a.sum(0), a),
        lambda: [placed(H, "x", "y")], [P("x", "y")]),
    "a scan's carry takes the split its body gives it": (
        lambda a: lax.scan(lambda c, r: (c + r, r * c), jnp.zeros(16), a),
        lambda: [placed(H, "x", "y")], [P("y"), P(None, "y")]),
    "a cond's result keeps the split its branches agree on": (
        lambda a: lax.cond(jnp.sum(a) > 0, lambda b: b * b, lambda b: b * 2., a),
        lambda: [placed(H, "x", "y")], [P("x", "y")]),
    "a branch's unsplit zeros take the other branch's split": (
        lambda a: lax.cond(jnp.sum(a) > 0, lambda b: b, jnp.zeros_like, a),
        lambda: [placed(H, "x", "y")], [P("x", "y")]),
    "where branches disagree, a cond's result is unsplit": (
        lambda a, b: lax.cond(jnp.sum(a) > 0, lambda: a, lambda: b),
        lambda: [placed(H, "x", "y"), placed(H, None, "x")], [P("x")]),
    "a cond joins its branches' splits per dimension": (
        lambda a, b: lax.cond(jnp.sum(a) > 0, lambda: a, lambda: b),
        lambda: [placed(H, None, "x"), placed(H, "y", None)], [P("y", "x")]),
    "a constant index leaves the branch it picks": (
        lambda a: lax.switch(0, [jnp.zeros_like, jnp.sin], a),
        lambda: [placed(H, "x", "y")], [P()]),
    "grad through a cond": (
        jax.grad(lambda a: jnp.sum(lax.cond(jnp.sum(a) > 0, jnp.sin, lambda b: b * b, a))),
        lambda: [placed(H, "x", "y")], [P("x", "y")]),
    "take keeps the other dimensions' split": (
        lambda a: a[jnp.array([0, 3])], lambda: [placed(H, "x", "y")], [P(None, "y")]),
    "a reshape keeps the major split": (lambda a: a.reshape(128) * 2,
                                        lambda: [placed(H, "x", "y")], [P("x")]),
    "out_shardings, and what they leave": (
        jax.jit(lambda a: (a * 2, a * 2 + 1),
                out_shardings=(None, NamedSharding(MESH, P("x")))), lambda: [R], [P(), P("x")]),
    # a jit's own out_shardings are spelt as given (below); a jit around it spells its
    # results as it worked them out, as JAX 0.10.2 does
    "out_shardings of an inner jit": (
        jax.jit(lambda a: a * 2, out_shardings=NamedSharding(MESH, P("y", None))),
        lambda: [placed(H, "x", "y")], [P("y")]),
}


def test_a_jits_own_out_shardings_are_spelt_as_given():
    fn = jax.jit(lambda a: a * 2, out_shardings=NamedSharding(MESH, P("y", None)))
    assert fn(placed(H, "x", "y")).sharding.spec == P("y", None)


def test_results_are_spelt_after_each_calls_own_first_argument():
    # P('x') and P('x', None) lay arrays out alike, so calls with either share one compiled
    # program; each call's results are spelt after its own argument (JAX 0.10.2's readings)
    for run in (jax.jit(jnp.sin), jnp.sin):
        for spec in [(), (None, None), ("x",), ("x", None), (None, "y"), ("x",)]:
            out = run(jax.device_put(H, NamedSharding(MESH, P(*spec))))
            assert tuple(out.sharding.spec) == spec, (run, spec)


@pytest.mark.parametrize("spec", [(None, None), (None,), ()])
def test_eager_results_of_replicated_operands_are_spelt_as_jax(spec):
    # replicated results are spelt as the first operand where it is replicated too and of
    # their rank, else P() (JAX 0.10.2's readings)
    a = jax.device_put(H, NamedSharding(MESH, P(*spec)))
    b = jax.device_put(H, NamedSharding(MESH, P()))
    assert tuple(jnp.sin(a).sharding.spec) == spec
    assert tuple((a + b).sharding.spec) == spec and tuple(a.T.sharding.spec) == spec
    assert tuple((b + a).sharding.spec) == ()
    assert tuple(jnp.sum(a, 0).sharding.spec) == () and tuple(a[0].sharding.spec) == ()


# a mesh with an axis of one device: JAX reads layouts back from its compiler, which sees no
# such axis, so a result's spec drops it, unless the layout is the first argument's (or the
# result's out_shardings): then it is spelt as that is. Recorded from JAX 0.10.2.
MESH_81 = Mesh(np.array(jax.devices()).reshape(8, 1), ("data", "model"))
MESH_412 = Mesh(np.array(jax.devices()).reshape(4, 1, 2), ("a", "b", "c"))
X8 = np.arange(64.0, dtype=np.float32).reshape(8, 8)


def _on(mesh, *spec):
    return jax.device_put(X8, NamedSharding(mesh, P(*spec)))


def _shmap(mesh, spec):
    return jax.shard_map(lambda a: a * 2, mesh=mesh, in_specs=spec, out_specs=spec)


ONE_DEVICE_AXIS_ROWS = {
    "shard_map-out": (lambda: jax.jit(_shmap(MESH_81, P("data", "model")))(X8), P("data")),
    "shard_map-out-transposed": (
        lambda: jax.jit(_shmap(MESH_81, P("model", "data")))(X8), P(None, "data")),
    "constraint": (lambda: jax.jit(lambda a: lax.with_sharding_constraint(
        a, NamedSharding(MESH_81, P("data", "model"))) + 1)(X8), P("data")),
    "like-first-argument": (lambda: jax.jit(lambda a, b: a @ b)(
        _on(MESH_81, "data", None), _on(MESH_81, None, "model")), P("data", None)),
    "transpose": (lambda: jax.jit(lambda a: a.T)(_on(MESH_81, "data", "model")),
                  P(None, "data")),
    "unchanged": (lambda: jax.jit(lambda a: a * 2)(_on(MESH_81, "data", "model")),
                  P("data", "model")),
    "out_shardings": (lambda: jax.jit(lambda a: a + 1, out_shardings=NamedSharding(
        MESH_81, P("data", "model")))(X8), P("data", "model")),
    "inside-a-tuple": (lambda: jax.jit(_shmap(MESH_412, P("b", ("a", "c"))))(X8),
                       P(None, ("a", "c"))),
    "inside-a-tuple-2": (lambda: jax.jit(_shmap(MESH_412, P(("a", "b"), "c")))(X8),
                         P("a", "c")),
}


@pytest.mark.parametrize("name", list(ONE_DEVICE_AXIS_ROWS))
def test_results_spell_axes_of_one_device_as_jax(name):
    make, want = ONE_DEVICE_AXIS_ROWS[name]
    out = make()
    assert out.sharding.spec == want and str(out.sharding.spec) == str(want)
    assert out.sharding.is_equivalent_to(NamedSharding(out.sharding.mesh, want), 2)
    for shard in out.addressable_shards:
        np.testing.assert_array_equal(np.asarray(shard.data), np.asarray(out)[shard.index])


def test_a_dimension_split_over_an_axis_of_one_device_is_whole_in_shard_indices():
    x = _on(MESH_81, "data", "model")
    assert x.addressable_shards[1].index == (slice(1, 2), slice(None))
    assert _on(MESH_81, None, "model").addressable_shards[1].index == (slice(None),) * 2
    assert x.addressable_shards[1].index == x.sharding.devices_indices_map((8, 8))[
        x.addressable_shards[1].device]


@pytest.mark.parametrize("name", list(JAX_ROWS))
def test_results_are_laid_out_as_jax_lays_them_out(name):
    fn, make, want = JAX_ROWS[name]
    args = make()
    got = jax.jit(fn)(*args)
    got = got if isinstance(got, tuple) else (got,)
    reference = fn(*[jnp.asarray(np.asarray(a)) for a in args])
    reference = reference if isinstance(reference, tuple) else (reference,)
    assert [g.sharding for g in got] == [NamedSharding(MESH, w) for w in want]
    assert [g.sharding.spec for g in got] == want          # spelt as JAX spells them
    for g, r in zip(got, reference):
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=1e-5, atol=1e-5)
        for shard in g.addressable_shards:
            np.testing.assert_array_equal(np.asarray(shard.data), np.asarray(g)[shard.index])


# Matrix decompositions and solves pass their batch dimensions through, as JAX 0.10.2 lays
# them out (eagerly too); a split of a matrix dimension is gathered, the result unsplit.
SPD = RNG.standard_normal((8, 4, 4)).astype(np.float32)
SPD = SPD @ SPD.transpose(0, 2, 1) + 4 * np.eye(4, dtype=np.float32)
RHS = RNG.standard_normal((8, 4, 3)).astype(np.float32)
LINALG = {
    "cholesky": jnp.linalg.cholesky, "inv": jnp.linalg.inv, "det": jnp.linalg.det,
    "slogdet": lambda m: jnp.linalg.slogdet(m)[1], "eigh": lambda m: jnp.linalg.eigh(m)[0],
    "qr": lambda m: jnp.linalg.qr(m)[1], "svd": lambda m: jnp.linalg.svd(m, compute_uv=False),
    "solve": lambda m: jnp.linalg.solve(m, RHS),
    "triangular_solve": lambda m: lax.linalg.triangular_solve(
        m, RHS.transpose(0, 2, 1), left_side=False, lower=True),
}


@pytest.mark.parametrize("name", list(LINALG))
@pytest.mark.parametrize("spec, want", [(P("x"), P("x")), (P(("x", "y")), P(("x", "y"))),
                                        (P("x", "y"), P("x")), (P(None, "y"), P())])
def test_matrix_functions_keep_their_batch_split(name, spec, want):
    fn = LINALG[name]
    a = jax.device_put(SPD, NamedSharding(MESH, spec))
    reference = np.asarray(fn(jnp.asarray(SPD)))
    for got in (jax.jit(fn)(a), fn(a)):
        assert got.sharding.spec == want
        np.testing.assert_allclose(np.asarray(got), reference, rtol=1e-4, atol=1e-4)
        for shard in got.addressable_shards:
            np.testing.assert_array_equal(np.asarray(shard.data), np.asarray(got)[shard.index])


# A constraint to uneven blocks (H is 8 x 16: 12 rows over 8 devices, 10 over 4): along that
# dimension the result keeps the major axes that divide it, as JAX 0.10.2 lays it out. Eagerly
# such a constraint is JAX's IndivisibleError, so the values are held to numpy's.
UNEVEN_ROWS = {
    "the dividing major axes are kept": (
        lambda a: W_(jnp.concatenate([a, a[:4]]) * 2, ("x", "y")),
        lambda a: np.concatenate([a, a[:4]]) * 2, P("x")),
    "an uneven dimension is unsplit, the other kept": (
        lambda a: jnp.exp(W_(a.T[:10, :6] @ a[:6, :6], "x", "y")) - 1,
        lambda a: np.exp(a.T[:10, :6] @ a[:6, :6]) - 1, P(None, "y")),
    "through a reduction": (
        lambda a: W_(a.T[:10], "x", "y").max(0), lambda a: a.T[:10].max(0), P("y")),
}


@contextlib.contextmanager
def padded_with_nan():
    """Uneven blocks padded with NaN meanwhile: no result may depend on padding."""
    from compiler import partition
    jax.clear_caches()
    partition.padding_fill["value"] = np.nan
    try:
        yield
    finally:
        partition.padding_fill["value"] = 0
        jax.clear_caches()


@pytest.fixture
def nan_padding():
    with padded_with_nan():
        yield


@pytest.mark.parametrize("name", list(UNEVEN_ROWS))
def test_uneven_constraints_lay_out_results_as_jax_does(name, nan_padding):
    fn, reference, want = UNEVEN_ROWS[name]
    got = jax.jit(fn)(R)
    assert got.sharding.spec == want
    np.testing.assert_allclose(np.asarray(got), reference(H.astype(np.float64)), rtol=1e-5)
    with pytest.raises(ValueError, match="should evenly divide the shape"):
        fn(jnp.asarray(H))


# Where annotations meet at a value (b = a * 2 here), Shardy's rules decide, each row held to
# JAX 0.10.2: a constraint's layout is given to its operand when nothing else constrains it;
# elementwise operations and constraints spread splits before other operations; among equals
# the first in program order wins; a split that extends another (x, then x and y) refines it.
def _meet(*uses):
    return lambda a: (lambda b: (b,) + tuple(u(b) for u in uses))(a * 2)


CONFLICT_ROWS = {
    "a constraint on b keeps b to its own layout": (
        _meet(lambda b: W_(b, "x"), lambda b: W_(jnp.sin(b), None, "y")), [P("x"), P("x"),
                                                                           P(None, "y")]),
    "also when it comes second": (
        _meet(lambda b: W_(jnp.sin(b), None, "y"), lambda b: W_(b, "x")), [P("x"),
                                                                           P(None, "y"),
                                                                           P("x")]),
    "two through operations merge": (
        _meet(lambda b: W_(jnp.cos(b), "x"), lambda b: W_(jnp.sin(b), None, "y")),
        [P("x", "y"), P("x"), P(None, "y")]),
    "the first in program order wins": (
        _meet(lambda b: W_(jnp.cos(b), "x"), lambda b: W_(jnp.sin(b), "y")),
        [P("x"), P("x"), P("y")]),
    "however far it is": (
        _meet(lambda b: W_(jnp.cos(jnp.sin(jnp.exp(b))), "x"), lambda b: W_(jnp.sin(b), "y")),
        [P("x"), P("x"), P("y")]),
    "and the other way round": (
        _meet(lambda b: W_(jnp.sin(b), "y"), lambda b: W_(jnp.cos(jnp.sin(jnp.exp(b))), "x")),
        [P("y"), P("y"), P("x")]),
    "elementwise before a broadcast": (
        _meet(lambda b: W_(b[None] * 2, None, "x"), lambda b: W_(b + 1, "y")),
        [P("x"), P(None, "x"), P("y")]),
    "a longer split refines a shorter": (
        _meet(lambda b: W_(b, "x"), lambda b: W_(b, ("x", "y"))),
        [P(("x", "y")), P("x"), P(("x", "y"))]),
    "elementwise constraints before a slice": (
        _meet(lambda b: W_(b[4:], "x"), lambda b: W_(b, None, "x"),
              lambda b: W_(b, None, "y")), [P(None, "x"), P("x"), P(None, "x"), P(None, "y")]),
}


@pytest.mark.parametrize("name", list(CONFLICT_ROWS))
def test_annotations_that_meet_lay_out_values_as_jax_does(name):
    fn, want = CONFLICT_ROWS[name]
    got = jax.jit(fn)(R)
    assert [g.sharding.spec for g in got] == want
    for g, r in zip(got, fn(jnp.asarray(H))):
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=1e-6)


def test_backward_propagation_computes_the_chain_on_blocks():
    """The chain before a constraint runs on blocks: no gather, the elementwise work split."""
    assert communication(_back_chain, R) == []
    assert communication(_back_transpose, R) == []


def test_a_split_contraction_is_one_all_reduce_of_the_result_block():
    a, b = placed(H, "x", "y"), placed(HW, "y", None)
    assert communication(lambda a, b: a @ b, a, b) == [("all_reduce", ("y",))]


def test_cumsum_along_a_split_dimension_gathers_it_then_keeps_its_block():
    a = placed(H, "x", "y")
    assert communication(lambda a: jnp.cumsum(a, 0), a) == [("all_gather", ("x",))]


def test_a_loop_on_auto_axes_runs_on_blocks_and_moves_nothing_inside():
    """The carry keeps its layout across iterations, so each iteration is block work: the
    only collective is the sum's all-reduce, once per iteration, inside the loop."""
    a = placed(H, "x", "y")
    fn = lambda a: lax.fori_loop(0, 3, lambda i, c: c * 2 + a.sum(0), a)
    assert communication(fn, a) == [("all_reduce", ("x",))]
    text = jax.jit(fn).lower(a).as_text()
    assert "all_gather" not in text


def test_a_cond_on_auto_axes_runs_on_blocks():
    """Each branch computes this device's blocks and lays its results out as the cond's: the
    only collective is the sum that decides the branch, and the values are numpy's."""
    a = placed(H, "x", "y")
    fn = lambda a: lax.cond(jnp.sum(a) > 0, jnp.cos, lambda b: b * b - 1, a)  # noqa: E731
    want = np.cos(H) if H.sum() > 0 else H * H - 1
    np.testing.assert_allclose(np.asarray(jax.jit(fn)(a)), want, rtol=1e-6)
    assert communication(fn, a) == [("all_reduce", ("x", "y"))]
    grad = jax.grad(lambda a: jnp.sum(fn(a)))
    want = -np.sin(H) if H.sum() > 0 else 2 * H
    got = jax.jit(grad)(a)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
    assert got.sharding == NamedSharding(MESH, P("x", "y"))


def test_a_reshape_whose_blocks_are_not_runs_still_computes_the_program():
    """Propagation may type a reshape of column blocks as split rows: the blocks are then
    gathered, never reshaped in place."""
    mesh = Mesh(np.array(jax.devices()), ("a",))
    x = jax.device_put(H, NamedSharding(mesh, P(None, "a")))
    fn = lambda a: lax.with_sharding_constraint(a.reshape(-1).reshape(a.shape) * 3,
                                                NamedSharding(mesh, P("a", None)))
    np.testing.assert_array_equal(np.asarray(jax.jit(fn)(x)), H * 3)


@pytest.mark.parametrize("fn, want", [
    (lambda a: a.reshape(128) * 2, [("all_gather", ("y",))]),
    (lambda a: (a * 2).reshape(4, 32), [("all_gather", ("y",))]),
    (lambda a: a.T.reshape(-1), [("all_gather", ("x",))]),
    (lambda a: a.reshape(8, 4, 4) + 1, []),
])
def test_a_reshape_gathers_only_what_keeps_its_blocks_from_being_runs(fn, want):
    """P('x', 'y') rows joined: the column split is gathered, the row split kept (the blocks
    of whole rows are runs of the flat order); never the whole value."""
    x = placed(H, "x", "y")
    assert communication(fn, x) == want
    np.testing.assert_array_equal(np.asarray(jax.jit(fn)(x)), np.asarray(fn(jnp.asarray(H))))


@pytest.mark.parametrize("spec, comm", [
    ((None, "y"), [("reduce_scatter", ("y",))]),
    (("x", "y"), [("reduce_scatter", ("y",))]),
    (("y", None), [("reduce_scatter", ("y",))]),
    ((), [("all_reduce", ("y",))]),
])
def test_a_pending_sum_laid_out_over_its_axes_is_a_reduce_scatter(spec, comm):
    """A contraction split over y on both sides leaves each device a partial sum; a result
    split over y takes its block of the sum (reduce-scatter), not the sum, then a slice."""
    a, b = placed(H, None, "y"), placed(HW, "y", None)
    fn = lambda a, b: lax.with_sharding_constraint(a @ b, NamedSharding(MESH, P(*spec)))
    out = jax.jit(fn)(a, b)
    np.testing.assert_allclose(np.asarray(out), H @ HW, rtol=1e-5, atol=1e-5)
    assert out.sharding == NamedSharding(MESH, P(*spec))
    for shard in out.addressable_shards:
        np.testing.assert_allclose(np.asarray(shard.data), (H @ HW)[shard.index], rtol=1e-5,
                                   atol=1e-5)
    assert [c for c in communication(fn, a, b) if c[0] != "all_gather"] == comm
    assert not [c for c in communication(fn, a, b) if c[0] == "all_gather"]


@pytest.fixture
def strict_mode():
    yield lambda mode: jax.config.update("shardc_implicit_communication", mode)
    jax.config.update("shardc_implicit_communication", "allow")


def test_strict_mode_lists_a_data_parallel_steps_reductions_with_their_lines(strict_mode):
    """The plain-jnp training step on an Auto mesh, the batch split: propagation computes it
    on the batch's blocks, and what it inserts is each gradient's sum over the batch, at the
    line that computes it; the shard_map form writes every collective itself."""
    import train_mlp
    import train_data_parallel
    params, batch = train_mlp.model([16, 32, 8], 8)
    p = jax.device_put(params, NamedSharding(MESH, P()))
    b = jax.device_put(batch, NamedSharding(MESH, P(("x", "y"))))
    step = train_mlp.single_device_step
    trained = step(p, b)
    assert train_mlp.max_difference(trained, step(params, batch)) < 1e-6
    assert all(leaf.sharding == NamedSharding(MESH, P())
               for leaf in jax.tree_util.tree_leaves(trained))
    ledger = jax.comm_ledger(step, p, b)
    line = train_mlp.predict.__code__.co_firstlineno + 2          # jnp.dot(inputs, W) + b
    assert sorted((r.operation, r.collective, r.mesh_axes) for r in ledger.inserted) == [
        ("dot_general", "all_reduce", ("x", "y"))] * 2 + [
        ("reduce_sum", "all_reduce", ("x", "y"))] * 2
    assert {r.site for r in ledger.inserted} == {f"train_mlp.py:{line}"}
    assert not any(r.requested for r in ledger.inserted)
    strict_mode("error")
    with pytest.raises(ValueError, match=re.escape(
            "(shardc_implicit_communication='error'): train_mlp.py:")):
        jax.jit(lambda p, b: step(p, b))(p, b)
    # written with shard_map, every collective is the program's own: nothing is inserted
    _, written = train_data_parallel.make_train_step(MESH, ("x", "y"))
    np.testing.assert_allclose(np.asarray(written(p, b)[0][0]), np.asarray(trained[0][0]),
                               rtol=1e-5, atol=1e-6)
    assert jax.comm_ledger(written, p, b).inserted == ()


def test_eager_results_of_replicated_operands_stay_on_the_mesh():
    """Operands laid out replicated on an Auto mesh give results replicated on it (P()), not
    on one device; a *_like copy keeps its operand's layout (JAX's)."""
    for out in (jnp.sin(R), R + 1, R.sum(0), jnp.where(R > 3, R, 0.)):
        assert out.sharding == NamedSharding(MESH, P()) and out.sharding.spec == P()
    np.testing.assert_allclose(np.asarray(jnp.sin(R)), np.sin(H), rtol=1e-6)
    x = placed(H, "x", "y")
    zeros = jnp.zeros_like(x)
    assert zeros.sharding == NamedSharding(MESH, P("x", "y"))
    assert float(np.asarray(zeros).sum()) == 0.0
    assert jnp.ones_like(R).sharding == NamedSharding(MESH, P())


def test_eager_gradients_of_linear_functions_stay_on_the_primals_mesh():
    """A cotangent computed from host values alone (the derivative of a linear function
    never reads the primal) is placed on the primal's mesh, whole (JAX's transposes make
    it there); a host primal's stays on the default device."""
    x = placed(H, "x", "y")
    for fn in (lambda t: jnp.sum(t * 2), lambda t: jnp.sum(t[0] * 2),
               lambda t: (t.T @ np.ones(8, np.float32)).sum()):
        g = jax.grad(fn)(x)
        assert g.sharding == NamedSharding(MESH, P()) and g.committed
        np.testing.assert_allclose(np.asarray(g), np.asarray(jax.grad(fn)(H)))
    ct = jax.vjp(lambda t: t * 3, x)[1](np.ones_like(H))[0]
    assert ct.sharding == NamedSharding(MESH, P())
    np.testing.assert_array_equal(np.asarray(ct), np.full_like(H, 3))
    # one primal on the mesh, one a Python number: each cotangent where its primal was
    gx, gs = jax.grad(lambda t, s: jnp.sum(t * 2 + s), argnums=(0, 1))(x, 1.0)
    assert gx.sharding.spec == P() and not gs.committed and float(gs) == H.size
    assert not jax.grad(lambda t: jnp.sum(t * 2))(H).committed


def test_eager_loops_and_branches_running_a_shard_map_lay_out_their_results_as_jit():
    """A loop or branch that runs a shard_map, called without jit on host values, runs as jit
    runs it: its carries are laid out as the shard_map's out_specs (it was one device)."""
    f = jax.shard_map(lambda c, w: c * w, mesh=MESH, in_specs=(P("x", "y"), P("y")),
                      out_specs=P("x", "y"))
    w = np.full(16, 1.5, np.float32)
    rows = {
        "fori_loop": lambda x, w: lax.fori_loop(0, 2, lambda i, c: f(c, w), x),
        "scan": lambda x, w: lax.scan(lambda c, _: (f(c, w), None), x, None, length=2)[0],
        "cond": lambda x, w: lax.cond(True, lambda a: f(a, w), lambda a: a * 2, x),
        "while_loop": lambda x, w: lax.while_loop(lambda c: c[0, 0] < 1e6,
                                                  lambda c: f(c, w) + 1, x),
    }
    for name, fn in rows.items():
        out = fn(H, w)
        assert out.sharding == NamedSharding(MESH, P("x", "y")), name
        np.testing.assert_allclose(np.asarray(out), np.asarray(jax.jit(fn)(H, w)), rtol=1e-6)
    g = jax.grad(lambda w: jnp.sum(rows["fori_loop"](H, w)))(w)
    assert g.sharding == NamedSharding(MESH, P("y"))
    np.testing.assert_allclose(np.asarray(g), 2 * w * H.sum(0), rtol=1e-5)   # sum(H w^2)


# eager indexing of an array laid out over the mesh, as JAX 0.10.2 lays out each result:
# JAX indexes a concrete laid-out array by a gather whenever an entry reads a dimension
# partially, and the gather leaves such dimensions unsplit; under jit the slice keeps them
EAGER_INDEXING = {
    "columns": (lambda a: a[:, 2:6], P("x")),
    "rows": (lambda a: a[2:6], P(None, "y")),
    "both": (lambda a: a[1:5, 4:12], P()),
    "strided": (lambda a: a[:, ::2], P("x")),
    "an integer": (lambda a: a[3], P("y")),
    "whole": (lambda a: a[:, :], P("x", "y")),
    "reversed whole": (lambda a: a[::-1], P("x", "y")),
    "a new axis": (lambda a: a[None, :, 3], P(None, "x")),
    "negative": (lambda a: a[-1:], P(None, "y")),
    "an integer array": (lambda a: a[np.array([0, 2])], P(None, "y")),
    "a mask": (lambda a: a[np.arange(8) > 3], P(None, "y")),
    "at get": (lambda a: a.at[:, 2:6].get(), P("x")),
}


@pytest.mark.parametrize("name", list(EAGER_INDEXING))
def test_eager_indexing_lays_out_results_as_jax_does(name):
    fn, want = EAGER_INDEXING[name]
    x = placed(H, "x", "y")
    got = fn(x)
    reference = np.asarray(fn(jnp.asarray(H)))          # unsplit, one device
    np.testing.assert_array_equal(np.asarray(got), reference)
    assert got.sharding.spec == want and got.sharding == NamedSharding(MESH, want)
    for shard in got.addressable_shards:
        np.testing.assert_array_equal(np.asarray(shard.data), np.asarray(got)[shard.index])
    jitted = jax.jit(fn)(x)                  # traced, JAX's slice paths keep every split
    np.testing.assert_array_equal(np.asarray(jitted), reference)


def test_a_mask_of_the_wrong_length_is_jaxs_index_error():
    with pytest.raises(IndexError, match=r"boolean index did not match shape of indexed array "
                                         r"in index 0: got \(2,\), expected \[8\]"):
        placed(H, "x", "y")[np.array([True, False])]


# --- a mesh with an Explicit axis and an Auto one: types hold the Explicit split, propagation
# adds the Auto one. Each row ran under JAX 0.10.2 (its spec and type printed alike) --------

MIXED = jax.make_mesh((4, 2), ("x", "y"),
                                     axis_types=(jax.sharding.AxisType.Explicit,
                                                 jax.sharding.AxisType.Auto))
HM = np.arange(128, dtype=np.float32).reshape(16, 8) / 16
WM = lambda a, *s: lax.with_sharding_constraint(a, NamedSharding(MIXED, P(*s)))
VM = lambda a: WM(a, None, "y")          # dimension 1 split over x (its type), then y


MIXED_ROWS = {
    # (the argument's spec, the function, both modes?, the result's spec, its type)
    "elementwise keeps both splits": (P("x", "y"), lambda a: jnp.sin(a) * 2, True,
                                      P("x", "y"), "float32[16@x,8]"),
    "a sum keeps the Auto split": (P("x", "y"), lambda a: a.sum(0), True,
                                   P("y"), "float32[8]"),
    "a transpose moves both": (P("x", "y"), lambda a: a.T + 1, True,
                               P("y", "x"), "float32[8,16@x]"),
    "the type's split alone, spelt per dimension": (P("x", None), lambda a: a * 2, True,
                                                    P("x", None), "float32[16@x,8]"),
    "a constraint adds an Auto axis minor to the type's": (
        P(None, "x"), lambda a: VM(a) * 2, False, P(None, ("x", "y")), "float32[16,8@x]"),
    "through a transpose": (P(None, "x"), lambda a: VM(a).T, False, P(("x", "y")),
                            "float32[8@x,16]"),
    "through a keepdims sum": (P(None, "x"), lambda a: VM(a).sum(0, keepdims=True), False,
                               P(None, ("x", "y")), "float32[1,8@x]"),
    "through a slice": (P(None, "x"), lambda a: VM(a)[2:], False, P(None, ("x", "y")),
                        "float32[14,8@x]"),
    "a one-dimensional result keeps its type's split only": (
        P(None, "x"), lambda a: VM(a).sum(0), False, P("x"), "float32[8@x]"),
    "uneven on the way": (P(None, "y"), lambda a: jnp.maximum(a, 0.).T[1:][1:], False,
                          P("y"), "float32[6,16]"),
}


@pytest.mark.parametrize("name", list(MIXED_ROWS))
def test_a_mesh_with_explicit_and_auto_axes_lays_out_results_as_jax_does(name):
    spec, fn, eager_too, want, text = MIXED_ROWS[name]
    x = jax.device_put(HM, NamedSharding(MIXED, spec))
    for run in [jax.jit(fn)] + ([fn] if eager_too else []):
        got = run(x)
        assert got.sharding == NamedSharding(MIXED, want) and got.sharding.spec == want
        assert str(jax.typeof(got)) == text
        np.testing.assert_allclose(np.asarray(got), np.asarray(fn(jnp.asarray(HM))),
                                   rtol=1e-6)
        for shard in got.addressable_shards:
            np.testing.assert_array_equal(np.asarray(shard.data), np.asarray(got)[shard.index])


def test_an_eager_constraint_on_a_mixed_mesh_lays_out_as_named():
    # JAX 0.10.2 eagerly lays the value out as the constraint names it, its type's split
    # dropped; under jit the constraint keeps the type
    x = jax.device_put(HM, NamedSharding(MIXED, P("y", "x")))
    eager, traced = VM(x), jax.jit(VM)(x)
    assert (eager.sharding.spec, str(jax.typeof(eager))) == (P(None, "y"), "float32[16,8]")
    assert (traced.sharding.spec, str(jax.typeof(traced))) == (P(None, ("x", "y")),
                                                              "float32[16,8@x]")
    np.testing.assert_array_equal(np.asarray(eager), HM)
    np.testing.assert_array_equal(np.asarray(traced), HM)


def test_an_unconstrained_dimension_is_left_to_propagation():
    # JAX 0.10.2: the constrained dimension is fixed, P.UNCONSTRAINED takes what propagation
    # gives, and such a constraint is not given to its operand (Shardy applies closed ones)
    x = jax.device_put(H[:8, :8], NamedSharding(MESH, P(None, "y")))
    assert repr(P("x", P.UNCONSTRAINED)) == "P('x', UNCONSTRAINED)"
    open_last = jax.jit(lambda a: W_(a * 2, "x", P.UNCONSTRAINED))(x)
    closed_last = jax.jit(lambda a: W_(a * 2, P.UNCONSTRAINED, None))(x)
    both = jax.jit(lambda a: (lambda b: (b, W_(b, "x", P.UNCONSTRAINED),
                                         W_(jnp.sin(b), None, "y")))(a * 2))(x)
    assert open_last.sharding.spec == P("x", "y")
    assert closed_last.sharding.spec == P()
    assert [o.sharding.spec for o in both] == [P("x", "y"), P("x", "y"), P(None, "y")]
    np.testing.assert_array_equal(np.asarray(open_last), H[:8, :8] * 2)
    np.testing.assert_array_equal(np.asarray(both[2]), np.sin(H[:8, :8] * 2))
    # eagerly as under jit (JAX runs an eager constraint as a jitted one)
    rows = jax.device_put(H[:8, :8], NamedSharding(MESH, P("x", None)))
    for spec, want in [((P.UNCONSTRAINED, "y"), P("x", "y")), (("y", P.UNCONSTRAINED), P("y")),
                       ((P.UNCONSTRAINED, P.UNCONSTRAINED), P("x", None))]:
        for run in (lambda a: W_(a, *spec), jax.jit(lambda a: W_(a, *spec))):
            got = run(rows)
            assert got.sharding.spec == want
            np.testing.assert_array_equal(np.asarray(got), H[:8, :8])


def _uneven_program(a):
    b = W_(jnp.concatenate([a, a[:2]]) * 2, "x", "y")       # 10 rows over 4, 16 columns
    return (b.sum(0), b.max(1), b.min(), jnp.exp(b) @ b.T, b.T @ jnp.sin(b),
            jnp.argmax(b, 0), jnp.cumsum(b, 0)[-1], b.reshape(-1)[:7])


def test_uneven_intermediates_are_split_with_padding_no_result_sees(nan_padding):
    got = jax.jit(_uneven_program)(R)
    h = np.concatenate([H, H[:2]]).astype(np.float64) * 2
    want = (h.sum(0), h.max(1), h.min(), np.exp(h) @ h.T, h.T @ np.sin(h), np.argmax(h, 0),
            np.cumsum(h, 0)[-1], h.reshape(-1)[:7])
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-4, atol=1e-4)
    # the intermediate really is split: blocks of ceil(10 / 4) = 3 rows, padded, masked
    text = jax.jit(_uneven_program).lower(R).as_text()
    assert "f32[3,8]" in text and " pad[" in text and "select_n" in text


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn", "float16", "int8"])
def test_max_and_min_over_split_and_uneven_rows_of_narrow_dtypes(dtype):
    # the padding of an uneven split is the reduction's identity: the dtype's infinity, or
    # its largest finite value where it has none (float8_e4m3fn)
    dtype = getattr(jnp, dtype)
    x = jax.device_put(np.arange(32, dtype=np.float32).reshape(8, 4),
                       NamedSharding(MESH, P("x"))).astype(dtype)
    np.testing.assert_array_equal(np.asarray(jax.jit(lambda a: a.max(0))(x), np.float32),
                                  np.asarray(x, np.float32).max(0))
    np.testing.assert_array_equal(np.asarray(x.min(0), np.float32),
                                  np.asarray(x, np.float32).min(0))
    h = (np.arange(16, dtype=np.float32).reshape(8, 2) - 20).astype(dtype)
    uneven = lambda a: (W_(jnp.concatenate([a, a[:2]]), "x").max(0),
                        W_(jnp.concatenate([a, a[:2]]), "x").min(0))
    with padded_with_nan():
        top, bottom = jax.jit(uneven)(jnp.asarray(h))
    np.testing.assert_array_equal(np.asarray(top, np.float32), np.asarray(h, np.float32).max(0))
    np.testing.assert_array_equal(np.asarray(bottom, np.float32),
                                  np.asarray(h, np.float32).min(0))


def test_unconstrained_needs_an_auto_axis():
    explicit = jax.make_mesh((4, 2), ("x", "y"))
    with pytest.raises(ValueError, match=re.escape(
            "P('x', UNCONSTRAINED) cannot contain `P.UNCONSTRAINED` when no mesh axis_types "
            "are `Auto`. Got mesh axis_types: (Explicit, Explicit)")):
        NamedSharding(explicit, P("x", P.UNCONSTRAINED))


def test_values_made_under_an_auto_mesh_are_replicated_on_it():
    """Under set_mesh of a mesh with Auto axes only, arrays made there and results of jit on
    unplaced inputs are laid out on the mesh, replicated (JAX's NamedSharding(mesh, P()));
    device_put without a sharding stays on one device, as JAX's."""
    from shardc.sharding import AxisType, SingleDeviceSharding
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    replicated = NamedSharding(mesh, P())
    with jax.set_mesh(mesh):
        made = jnp.ones(4)
        jitted = jax.jit(lambda v: v * 2)(np.ones(4))
        put = jax.device_put(np.ones(4))
        split = jax.device_put(np.ones(8), P("x"))
        total = jax.jit(lambda v: v.sum())(split)
    assert made.sharding == jitted.sharding == total.sharding == replicated
    assert (made + 1).sharding == replicated          # outside the context too
    assert put.sharding == SingleDeviceSharding(jax.devices()[0])
    assert split.sharding == (split + 1).sharding == NamedSharding(mesh, P("x"))
    np.testing.assert_array_equal(np.asarray(jitted), 2 * np.ones(4))


def test_eager_sorts_and_loops_are_laid_out_as_under_jit():
    # JAX runs an eager operation as a jit of it: a sort (several results) and a scan on
    # arrays laid out on Auto axes are laid out as propagation types them (JAX 0.10.2's
    # layouts), not replicated or put on one device
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    host = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    a = jax.device_put(host, NamedSharding(mesh, P("x", "y")))
    for run in (lambda f, *args: f(*args), lambda f, *args: jax.jit(f)(*args)):
        ordered = run(lambda t: jnp.sort(t, axis=0), a)
        assert ordered.sharding == NamedSharding(mesh, P("x", "y"))
        np.testing.assert_array_equal(np.asarray(ordered), np.sort(host, axis=0))
        carry, rows = run(lambda t: lax.scan(lambda c, r: (c + r, c), jnp.zeros(4), t), a)
        assert carry.sharding == NamedSharding(mesh, P("y"))
        np.testing.assert_allclose(np.asarray(carry), host.sum(0), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(rows)[-1], host[:-1].sum(0), rtol=1e-5,
                                   atol=1e-6)


# --- shard_alike: two values laid out alike ----------------------------------------------------

def test_shard_alike_gives_both_values_one_layout_under_jit_eagerly_and_under_transforms():
    """JAX's shard_alike: a value computed from nothing split (an iota, a host argument) takes
    the layout of the one it is paired with, under jit and eagerly; the values are unchanged;
    under vmap an unbatched side is broadcast, and a batch axis moved to the other's; its
    gradient passes through; mismatched shapes or pytrees are JAX's ValueErrors."""
    from shardc.experimental.shard_alike import shard_alike
    mesh = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("x", "y"))
    host = np.arange(16).reshape(8, 2)
    split = jax.device_put(host, NamedSharding(mesh, P("x", "y")))

    @jax.jit
    def pair_with_iota(x):
        return shard_alike(x, jnp.arange(16).reshape(8, 2) * 3)[1]

    out = pair_with_iota(split)
    assert out.sharding == NamedSharding(mesh, P("x", "y"))
    np.testing.assert_array_equal(np.asarray(out), host * 3)
    for run in (shard_alike, jax.jit(shard_alike)):
        a, b = run(split, host + 1)
        assert a.sharding == b.sharding == NamedSharding(mesh, P("x", "y"))
        np.testing.assert_array_equal(np.asarray(b), host + 1)
    columns = jax.device_put(np.arange(16).reshape(2, 8), NamedSharding(mesh, P("y", "x")))
    a, b = jax.jit(jax.vmap(shard_alike, in_axes=(0, 1)))(split, columns)
    assert a.sharding == b.sharding == NamedSharding(mesh, P("x", "y"))
    np.testing.assert_array_equal(np.asarray(b), np.arange(16).reshape(2, 8).T)

    def loss(x):
        x2, y2 = shard_alike(x, jnp.arange(8.0) * 2)
        return jnp.sum(x2 * y2)
    vec = jax.device_put(np.arange(8.0), NamedSharding(mesh, P("x")))
    for grad in (jax.grad(loss), jax.jit(jax.grad(loss))):
        np.testing.assert_array_equal(np.asarray(grad(vec)), np.arange(8.0) * 2)
    with pytest.raises(ValueError, match=re.escape(
            "The leaves shapes of `x` and `y` should match. Got `x` leaf shape: (8, 2) and "
            "`y` leaf shape: (8, 8).")):
        jax.jit(lambda x: shard_alike(x, x @ x.T))(split)
    with pytest.raises(ValueError, match="Trees should be equal"):
        shard_alike((split,), [split])


def test_a_constraint_in_a_loop_body_or_branch_lays_out_a_program_of_host_inputs():
    """A jitted program whose only annotation is a sharding constraint inside a cond branch,
    a fori_loop, scan or while_loop body (its inputs numpy arrays) is laid out on that
    constraint's mesh, as JAX's: the results come out as the constraint lays them out."""
    mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("x", "y"))
    at = lambda *spec: NamedSharding(mesh, P(*spec))
    w = lax.with_sharding_constraint
    x = np.arange(128, dtype=np.float32).reshape(8, 16)
    out = jax.jit(lambda a: lax.cond(True, lambda t: w(t * 2, at("y")), lambda t: t, a))(x)
    assert out.sharding == at("y")
    np.testing.assert_array_equal(np.asarray(out), x * 2)
    out = jax.jit(lambda a: lax.fori_loop(0, 2, lambda i, t: w(t * 2, at(None, "x")), a))(x)
    assert out.sharding == at(None, "x")
    np.testing.assert_array_equal(np.asarray(out), x * 4)
    carry, sums = jax.jit(lambda a: lax.scan(lambda c, _: (w(c + 1, at("y")), c.sum()), a,
                                             None, length=3))(x)
    assert carry.sharding == at("y") and sums.sharding == at()
    np.testing.assert_array_equal(np.asarray(carry), x + 3)
    np.testing.assert_array_equal(np.asarray(sums), [x.sum() + k * 128 for k in range(3)])
    out = jax.jit(lambda a: lax.while_loop(lambda t: t.sum() < 1e5, lambda t: w(t * 2, at("x")),
                                           a))(x)
    assert out.sharding == at("x")
    np.testing.assert_array_equal(np.asarray(out), x * 16)


def test_a_constraint_under_vmap_leaves_the_batch_dimension_to_propagation():
    """JAX's vmap of a sharding constraint on Auto axes adds the batch dimension to the
    unconstrained ones: it keeps the operand's split (over x here); a host operand's is not
    split; spmd_axis_name splits it."""
    mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("x", "y"))
    at = lambda *spec: NamedSharding(mesh, P(*spec))
    w = lax.with_sharding_constraint
    x = np.arange(128, dtype=np.float32).reshape(8, 16)
    split = jax.device_put(x, at("x", "y"))
    out = jax.jit(jax.vmap(lambda r: w(r, at("y")) * 2))(split)
    assert out.sharding == at("x", "y")
    np.testing.assert_array_equal(np.asarray(out), 2 * x)
    out = jax.jit(jax.vmap(lambda c: w(c, at("x")).sum(), in_axes=1))(split)
    assert out.sharding == at("y")
    np.testing.assert_array_equal(np.asarray(out), x.sum(0))
    assert jax.jit(jax.vmap(lambda r: w(r, at("y")) * 2))(x).sharding == at(None, "y")
    assert jax.jit(jax.vmap(lambda r: w(r, at("y")) * 2, spmd_axis_name="x"))(
        split).sharding == at("x", "y")
    # eagerly too, spelt as JAX spells it
    stacked = jax.device_put(np.zeros((8, 6, 4), np.float32), at("x"))
    out = jax.vmap(lambda m: w(m, at("y")))(stacked)
    assert out.sharding.spec == P("x", "y")
    assert jax.vmap(lambda m: w(m, at("y")))(np.zeros((8, 6, 4), np.float32)).sharding.spec \
        == P(None, "y")


def test_values_made_under_an_auto_context_mesh_are_replicated_on_it():
    """Under ``set_mesh`` of a mesh with Auto axes, a value made from nothing placed (an iota,
    jnp.eye, an operation on host or uncommitted values) is laid out on the mesh, replicated
    (JAX's P()); one computed from an array committed elsewhere is JAX's device error."""
    mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("x", "y"))
    uncommitted = jnp.arange(3.0)
    replicated = NamedSharding(mesh, P())
    with jax.set_mesh(mesh):
        for made in (jnp.arange(8.0), jnp.eye(4), jnp.sin(uncommitted), jnp.zeros(3)):
            assert made.sharding == replicated
        np.testing.assert_array_equal(np.asarray(jnp.arange(4)), np.arange(4))
        with pytest.raises(ValueError, match="Received incompatible devices for jitted "
                                             "computation. Got argument x of sin"):
            jnp.sin(jax.device_put(uncommitted, jax.devices()[1]))
    assert jnp.arange(3.0).sharding == jax.sharding.SingleDeviceSharding(jax.devices()[0])


def test_a_branch_constraint_lays_out_a_conds_result():
    """A cond (switch) whose one branch constrains its result and whose others compute it
    from the operand comes out as the constraint says (an annotation wins over propagated
    splits, as Shardy's); without constraints, as the branches agree."""
    mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("x", "y"))
    at = lambda *spec: NamedSharding(mesh, P(*spec))
    w = lax.with_sharding_constraint
    x = np.arange(128, dtype=np.float32).reshape(8, 16)
    split = jax.device_put(x, at("x", "y"))
    out = jax.jit(lambda a: lax.cond(a.sum() < 0, lambda t: w(t, at("y", "x")),
                                     lambda t: t * 2, a))(split)
    assert out.sharding == at("y", "x")
    np.testing.assert_array_equal(np.asarray(out), 2 * x)
    out = jax.jit(lambda a, i: lax.switch(i, [lambda t: t + 1, lambda t: w(t, at(None, "x")),
                                              lambda t: t * 3], a))(split, 1)
    assert out.sharding == at(None, "x")
    np.testing.assert_array_equal(np.asarray(out), x)
    out = jax.jit(lambda a: lax.cond(a.sum() < 0, lambda t: t + 1, lambda t: t * 2, a))(split)
    assert out.sharding == at("x", "y")


def test_a_shard_map_in_a_loop_or_branch_keeps_its_layout_on_auto_axes():
    """A shard_map inside a scan, fori_loop, while_loop or cond body on an Auto mesh runs on
    the loop's blocks: the carry keeps the layout its out_specs give it (JAX's; it was
    gathered whole at each iteration and came out replicated), values as before, under grad
    too; the lowered body holds no all_gather."""
    mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"))
    at = lambda *spec: NamedSharding(mesh, P(*spec))
    x = np.arange(64, dtype=np.float32).reshape(8, 8)
    split = jax.device_put(x, at("x"))
    double = jax.shard_map(lambda h: h * 2, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    runs = {
        "scan": (lambda a: lax.scan(lambda h, _: (double(h), None), a, length=3)[0], 8 * x),
        "fori": (lambda a: lax.fori_loop(0, 3, lambda i, h: double(h), a), 8 * x),
        "cond": (lambda a: lax.cond(a[0, 0] >= 0, double, lambda h: h, a), 2 * x),
        "while": (lambda a: lax.while_loop(lambda h: h[1, 1] < 10, double, a), 2 * x),
    }
    for name, (run, want) in runs.items():
        out = jax.jit(run)(split)
        assert out.sharding == at("x"), name
        np.testing.assert_array_equal(np.asarray(out), want)
    lowered = jax.jit(runs["scan"][0]).lower(split).as_text()
    assert "all_gather" not in lowered
    weights = jax.device_put(np.full((8, 8), 0.1, np.float32), at(None, "y"))
    layer = jax.shard_map(lambda h, w: lax.psum(h @ w, "y"), mesh=mesh,
                          in_specs=(P("x", "y"), P("y", None)), out_specs=P("x"))

    def loss(w, a):
        return lax.scan(lambda h, _: (jnp.tanh(layer(h, w)), None), a, length=2)[0].sum()

    def reference(w, a):
        h = a
        for _ in range(2):
            h = np.tanh(h @ w)
        return h.sum()
    np.testing.assert_allclose(float(jax.jit(loss)(weights, split)),
                               reference(np.full((8, 8), 0.1), x), rtol=1e-5)
    eps, probe = 1e-3, np.zeros((8, 8), np.float32)
    probe[2, 3] = 1.0
    grad = np.asarray(jax.jit(jax.grad(loss))(weights, split))
    numeric = (reference(np.full((8, 8), 0.1) + eps * probe, x)
               - reference(np.full((8, 8), 0.1) - eps * probe, x)) / (2 * eps)
    np.testing.assert_allclose(grad[2, 3], numeric, rtol=1e-3)


@pytest.mark.parametrize("axis_type", ["Auto", "Explicit"])
def test_bfloat16_product_over_a_split_contraction_has_the_unsplit_bits(axis_type):
    """The partial sums of a bfloat16 product split along its contraction are summed in
    float32 and rounded once, as XLA's CPU product is: the same bits as the unsplit product
    (rounding each device's term first was an ulp of the largest term off)."""
    mesh = jax.make_mesh((8,), ("x",), axis_types=(getattr(jax.sharding.AxisType, axis_type),))
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((64, 16)), jnp.bfloat16)
    w = jnp.asarray(rng.standard_normal((16, 8)), jnp.bfloat16)
    gram = jax.jit(lambda v: jnp.matmul(v.T, v, out_sharding=NamedSharding(mesh, P())))
    split = jax.device_put(x, NamedSharding(mesh, P("x")))
    whole, parts = np.asarray(gram(x)), np.asarray(gram(split))
    assert parts.dtype == whole.dtype == jnp.bfloat16
    np.testing.assert_array_equal(parts.view(np.uint16), whole.view(np.uint16))
    if axis_type == "Explicit":
        return          # (a gradient over the split batch asks for its out_sharding there)
    grad = jax.jit(jax.grad(lambda w, v: jnp.sum((v @ w).astype(jnp.float32) ** 2)))
    np.testing.assert_array_equal(np.asarray(grad(w, split)).view(np.uint16),
                                  np.asarray(grad(w, x)).view(np.uint16))


def test_a_remat_is_seen_through_by_propagation():
    """Past autodiff a remat is its body: its results (and a gradient through it) are laid
    out as without it, as JAX's, where they came out replicated."""
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    w = jax.device_put(jnp.arange(64.0).reshape(8, 8) / 100, NamedSharding(mesh, P(None, "model")))
    f = lambda w: jnp.sum(jnp.sin(w))
    for run in (jax.jit(jax.grad(jax.checkpoint(f))), jax.jit(jax.checkpoint(jnp.sin)),
                jax.jit(jax.grad(jax.remat(f)))):
        out = run(w)
        assert out.sharding.spec == P(None, "model")
    np.testing.assert_allclose(np.asarray(jax.jit(jax.grad(jax.checkpoint(f)))(w)),
                               np.cos(np.arange(64.0).reshape(8, 8) / 100), rtol=1e-6)


def test_an_elementwise_operation_on_a_gradient_keeps_its_layout():
    """A gradient of a shard_map comes out laid out on the mesh; an elementwise operation on
    it eagerly keeps that layout, as JAX's (it came out on one device)."""
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    f = jax.shard_map(lambda a: jnp.sin(a) * 2, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    x = jnp.arange(32.0).reshape(8, 4)
    _, pullback = jax.vjp(f, x)
    (ct,) = pullback(x)
    assert ct.sharding == NamedSharding(mesh, P("x"))
    shifted = ct + 1
    assert shifted.sharding == NamedSharding(mesh, P("x"))
    np.testing.assert_allclose(np.asarray(shifted), np.cos(np.arange(32.0).reshape(8, 4)) * 2
                               * np.arange(32.0).reshape(8, 4) + 1, rtol=1e-5)


@pytest.mark.parametrize("spec", [P(None, None), P()])
def test_reshard_on_an_all_auto_mesh_moves_nothing(spec):
    """``reshard`` to an unsplit spec on an all-Auto mesh leaves the layout to propagation,
    as JAX's (it lowers no constraint there): the argument's split carries through, under
    jit, eagerly, and into what follows. shardc had gathered the value."""
    mesh = jax.make_mesh((2, 2), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    values = np.arange(16.0, dtype=np.float32).reshape(8, 2)
    with jax.set_mesh(mesh):
        arr = jax.device_put(values, NamedSharding(mesh, P("x", "y")))
        jitted = jax.jit(lambda x: jax.sharding.reshard(x * 2, spec))(arr)
        eager = jax.sharding.reshard(arr, spec)
        after = jax.jit(lambda x: jnp.sin(jax.sharding.reshard(x * 2, spec)))(arr)
    for out in (jitted, eager, after):
        assert out.sharding.spec == P("x", "y")
    np.testing.assert_array_equal(jitted, values * 2)
    np.testing.assert_array_equal(eager, values)
    np.testing.assert_allclose(after, np.sin(values * 2), rtol=1e-6)


@pytest.mark.parametrize("a_spec, b_spec, want", [
    # two splits of one axis over different dimensions: the operand first in the
    # operation's order keeps it (JAX 0.10.2's XLA lays the result out so)
    (P(None, "y"), P("y", None), P(None, "y")),
    (P("y", None), P(None, "y"), P("y", None)),
    (P(None, "x"), P("x", None), P(None, "x")),
    # over more devices first, whichever operand gives it
    (P("x", None), P(None, ("x", "y")), P(None, ("x", "y"))),
    (P(None, "x"), P(("y", "x"), None), P(("y", "x"),)),
    (P(None, ("x", "y")), P("y", None), P(None, ("x", "y"))),
    (P("y", "x"), P(None, ("x", "y")), P(None, ("x", "y"))),
    # splits that do not compete both stay
    (P("x", None), P(None, "y"), P("x", "y")),
])
def test_operands_competing_for_an_axis_are_settled_as_jax_settles_them(a_spec, b_spec, want):
    """An elementwise operation on two arrays split over one axis along different dimensions
    gives the result the split over more devices, then the earlier operand's (jnp.where
    reads its cases as XLA's select: the one taken where true first), eagerly and under
    jit; shardc gave the first dimension's. Values are the unsplit computation's."""
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    values = np.arange(256.0, dtype=np.float32).reshape(16, 16)
    a = jax.device_put(values, NamedSharding(mesh, a_spec))
    b = jax.device_put(values * 2, NamedSharding(mesh, b_spec))
    c = jax.device_put(values, NamedSharding(mesh, P()))
    outs = [a + b, jax.jit(lambda a, b: a + b)(a, b), jnp.maximum(a, b),
            jax.jit(lambda c, a, b: jnp.where(c > 3, a, b))(c, a, b)]
    padded = tuple(want) + (None,) * (2 - len(want))
    for out in outs:
        assert tuple(out.sharding.spec) + (None,) * (2 - len(out.sharding.spec)) == padded
    np.testing.assert_array_equal(outs[0], values * 3)
    np.testing.assert_array_equal(outs[3], np.where(values > 3, values, values * 2))


def test_values_on_twin_auto_meshes_run_together_on_the_first():
    """Arrays on two meshes of Auto axes over the same devices in the same grid, under other
    names, run together, laid out on the first mesh (axis k as its axis k), eagerly and under
    jit, as JAX's; they were gathered to one device."""
    devices = np.array(jax.devices()).reshape(4, 2)
    first, twin = Mesh(devices, ("x", "y")), Mesh(devices, ("a", "b"))
    host = np.arange(32.0, dtype=np.float32).reshape(8, 4)
    a = jax.device_put(host, NamedSharding(first, P("x", "y")))
    b = jax.device_put(np.ones((8, 4), np.float32), NamedSharding(twin, P("a", None)))
    for out, want, mesh in ((a * b + 1, host + 1, first), (b - a, 1 - host, twin),
                            (jax.jit(lambda u, v: u + v)(a, b), host + 1, first)):
        assert isinstance(out.sharding, NamedSharding) and out.sharding.mesh is mesh
        np.testing.assert_array_equal(np.asarray(out), want)
