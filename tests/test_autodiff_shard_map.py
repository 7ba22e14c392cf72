"""Gradients through shard_map (SEMANTICS 2.9 and 4).

``grad`` of a function calling shard_map differentiates the *global* function it denotes
(4.1). Every check here compares shardc's gradient with two independent oracles:

- central finite differences of the shardc function itself (float32, so directional
  derivatives along random directions with a loose tolerance), and
- the gradient of the same computation written **without shard_map**: a lockstep emulator
  (below) slices each input into per-device blocks with plain ``jnp`` indexing, runs the body
  once per device on Python lists of blocks, implements each collective by moving blocks
  between list entries (SEMANTICS 2.0-2.8), and assembles the outputs (1.5). Its gradient
  only uses the autodiff rules of ordinary ``jnp`` primitives, none of shard_map's.

The check flag changes the program, never the numbers (4.1), so every random case runs with
the check on and off; and under ``jit`` as well as eagerly. Then: the literal examples of
4.1, 4.3 and 4.4; ``grad`` inside a body (4.1, last sentences); control flow with collectives
in a body; the pmax/pmin error (4.6); residuals crossing the boundary (4.5).
"""
from __future__ import annotations

import math
import random as pyrandom
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import shardc as jax
import shardc.numpy as jnp
from shardc import lax
from shardc.experimental.shard_map import shard_map
from shardc.sharding import PartitionSpec as P

from reference_semantics import RefMesh, device_groups

MESHES = {
    (8,): ("a",),
    (4, 2): ("x", "y"),
    (2, 4): ("x", "y"),
    (2, 2, 2): ("x", "y", "z"),
}


OTHER_MESHES = {(4,): ("x",)}      # the literal examples' mesh; not drawn by the random cases


def axis_names(shape):
    return {**MESHES, **OTHER_MESHES}[shape]


def make_mesh(shape):
    return jax.make_mesh(shape, axis_names(shape))


def ref_mesh(shape):
    return RefMesh(axis_names(shape), tuple(shape), tuple(range(math.prod(shape))))


def spec_entries(spec, ndim):
    names = [() if e is None else (e,) if isinstance(e, str) else tuple(e) for e in spec]
    return names + [()] * (ndim - len(names))


def spec_axes(spec):
    return {a for e in spec_entries(spec, len(spec)) for a in e}


# --- the lockstep emulator: the same computation without shard_map ------------------------------

class Dev:
    """A body value in the emulator: one jnp block per mesh position."""

    def __init__(self, blocks):
        self.blocks = list(blocks)

    def _map(self, fn, other):
        others = other.blocks if isinstance(other, Dev) else [other] * len(self.blocks)
        return Dev(fn(a, b) for a, b in zip(self.blocks, others))

    def __add__(self, o): return self._map(lambda a, b: a + b, o)
    def __radd__(self, o): return self._map(lambda a, b: b + a, o)
    def __sub__(self, o): return self._map(lambda a, b: a - b, o)
    def __mul__(self, o): return self._map(lambda a, b: a * b, o)
    def __rmul__(self, o): return self._map(lambda a, b: b * a, o)
    def __getitem__(self, index): return Dev(b[index] for b in self.blocks)


def _index(ndim, axis, index):
    return (slice(None),) * axis + (index,)


def _chunk(a, axis, r, n):
    size = a.shape[axis] // n
    return a[_index(a.ndim, axis, slice(r * size, (r + 1) * size))]


class EmuOps:
    """Operations of a test body on :class:`Dev` values; collectives per SEMANTICS 2.1-2.8."""

    def __init__(self, shape):
        self.mesh = ref_mesh(shape)

    @staticmethod
    def sin(x):
        return Dev(jnp.sin(b) for b in x.blocks)

    @staticmethod
    def cos(x):
        return Dev(jnp.cos(b) for b in x.blocks)

    def collective(self, name, x, axes, **params):
        out = [None] * self.mesh.size
        if name == "ppermute" and not isinstance(axes, str):   # ranks in mesh order, as JAX's
            axes = tuple(sorted(axes, key=self.mesh.axis_names.index))
        for group in device_groups(self.mesh, axes):
            xs = [x.blocks[p] for p in group]
            n = len(group)
            for rank, p in enumerate(group):
                out[p] = self._one(name, xs, rank, n, **params)
        return Dev(out)

    @staticmethod
    def _one(name, xs, r, n, axis=0, tiled=False, to="varying", scatter_dimension=0,
             perm=(), split_axis=0, concat_axis=0, source=0):
        if name in ("psum", "pmean"):
            total = xs[0]
            for b in xs[1:]:
                total = total + b
            return total / n if name == "pmean" else total
        if name == "pvary":
            return xs[r]
        if name == "all_gather":
            return jnp.concatenate(xs, axis) if tiled else jnp.stack(xs, axis)
        if name == "psum_scatter":
            total = xs[0]
            for b in xs[1:]:
                total = total + b
            if tiled:
                return _chunk(total, scatter_dimension, r, n)
            return total[_index(total.ndim, scatter_dimension, r)]
        if name == "ppermute":
            for s, d in perm:
                if d == r:
                    return xs[s]
            return jnp.zeros_like(xs[r])
        if name == "all_to_all":
            if tiled:
                return jnp.concatenate([_chunk(b, split_axis, r, n) for b in xs], concat_axis)
            return jnp.stack([b[_index(b.ndim, split_axis, r)] for b in xs], concat_axis)
        if name == "pbroadcast":
            return xs[source]
        raise AssertionError(name)


class ShardOps:
    """The same operations inside a shard_map body."""
    sin = staticmethod(jnp.sin)
    cos = staticmethod(jnp.cos)

    @staticmethod
    def collective(name, x, axes, **params):
        if name == "all_gather":
            return lax.all_gather(x, axes, **params)
        if name == "pvary":
            return lax.pvary(x, axes)
        if name == "ppermute":
            return lax.ppermute(x, axes, params["perm"])
        if name == "all_to_all":
            return lax.all_to_all(x, axes, params["split_axis"], params["concat_axis"],
                                  tiled=params["tiled"])
        if name == "pbroadcast":
            return lax.pbroadcast(x, axes, params["source"])
        return getattr(lax, name)(x, axes, **params)


SHARD_OPS = ShardOps()


def block_of(x, spec, mesh, position):
    coord = mesh.coord(position)
    index = []
    for d, axes in enumerate(spec_entries(spec, x.ndim)):
        k = mesh.rank(coord, axes)
        size = x.shape[d] // mesh.axes_size(axes)
        index.append(slice(k * size, (k + 1) * size))
    return x[tuple(index)]


def assemble(blocks, spec, mesh):
    """SEMANTICS 1.5 with jnp: named dimensions concatenate the owners' blocks; unnamed axes
    take the coordinate-0 copy."""
    ndim = blocks[0].ndim
    entries = spec_entries(spec, ndim)
    named = {a for e in entries for a in e}
    by_ranks = {}
    for p in mesh.positions():
        coord = mesh.coord(p)
        if any(c != 0 for a, c in coord.items() if a not in named):
            continue
        by_ranks[tuple(mesh.rank(coord, axes) for axes in entries)] = blocks[p]

    def build(prefix, d):
        if d == ndim:
            return by_ranks[prefix]
        parts = [build(prefix + (k,), d + 1) for k in range(mesh.axes_size(entries[d]))]
        return parts[0] if len(parts) == 1 else jnp.concatenate(parts, d)

    return build((), 0)


def emulate(body, shape, in_specs, out_spec):
    """The global function of ``shard_map(body, in_specs, out_spec)`` without shard_map."""
    mesh = ref_mesh(shape)
    ops = EmuOps(shape)

    def fun(*args):
        devs = [Dev(block_of(a, s, mesh, p) for p in mesh.positions())
                for a, s in zip(args, in_specs)]
        out = body(ops, *devs)
        return assemble(out.blocks, out_spec, mesh)

    return fun


# --- random cases: a collective, a mesh, specs ----------------------------------------------------

COLLECTIVES = ["psum", "pmean", "all_gather", "all_gather_tiled", "all_gather_invarying",
               "psum_scatter", "psum_scatter_tiled", "ppermute", "all_to_all",
               "all_to_all_tiled", "pbroadcast", "pvary"]


def random_spec(rng, axes, ndim):
    """Each of ``axes`` goes to a random dimension or nowhere; order within a dim random."""
    dims = [[] for _ in range(ndim)]
    for a in axes:
        d = rng.randrange(ndim + 1)
        if d < ndim:
            dims[d].append(a)
    for d in dims:
        rng.shuffle(d)
    entries = [None if not d else d[0] if len(d) == 1 else tuple(d) for d in dims]
    while entries and entries[-1] is None:
        entries.pop()
    return P(*entries)


def spec_naming(rng, must, may, ndim):
    """A spec naming every axis of ``must`` and a random part of ``may``."""
    chosen = list(must) + [a for a in may if a not in must and rng.random() < 0.5]
    dims = [[] for _ in range(ndim)]
    for a in chosen:
        dims[rng.randrange(ndim)].append(a)
    entries = [None if not d else d[0] if len(d) == 1 else tuple(d) for d in dims]
    while entries and entries[-1] is None:
        entries.pop()
    return P(*entries)


def global_shape(block, spec, sizes):
    return tuple(b * math.prod(sizes[a] for a in e)
                 for b, e in zip(block, spec_entries(spec, len(block))))


class Case:
    """One random case: body ``collective(sin(x) * w + x)``, then ``* cos(x)`` where shapes
    allow (so residuals cross the boundary)."""

    def __init__(self, name, shape, seed):
        rng = pyrandom.Random(seed)
        self.name, self.shape = name, shape
        names = MESHES[shape]
        sizes = dict(zip(names, shape))
        self.sizes = sizes
        k = rng.randint(1, len(names))
        axes = tuple(rng.sample(names, k))
        self.axes = axes if len(axes) > 1 or rng.random() < 0.5 else axes[0]
        n = math.prod(sizes[a] for a in axes)
        block = [rng.choice([1, 2, 3]), rng.choice([2, 4])]
        params = {}
        base = name.replace("_tiled", "").replace("_invarying", "")
        self.base = base
        if base == "all_gather":
            params = dict(axis=rng.randrange(3 if "tiled" not in name else 2),
                          tiled="tiled" in name)
            if "invarying" in name:
                params = dict(axis=rng.randrange(2), tiled=rng.random() < 0.5, to="invarying")
        elif base == "psum_scatter":
            d = rng.randrange(2)
            tiled = "tiled" in name
            block[d] = n * rng.choice([1, 2]) if tiled else n
            params = dict(scatter_dimension=d, tiled=tiled)
        elif base == "ppermute":
            dests = list(range(n))
            rng.shuffle(dests)
            pairs = [(s, d) for s, d in enumerate(dests)]
            if n > 1 and rng.random() < 0.5:
                pairs = pairs[:rng.randrange(1, n)]
            params = dict(perm=tuple(pairs))
        elif base == "all_to_all":
            tiled = "tiled" in name
            s, c = rng.randrange(2), rng.randrange(2)
            block[s] = n * rng.choice([1, 2]) if tiled else n
            params = dict(split_axis=s, concat_axis=c, tiled=tiled)
        elif base == "pbroadcast":
            params = dict(source=rng.randrange(n))
        self.params = params
        self.block = tuple(block)
        # input specs: x may name any axes; pvary's operand must not vary over its axes
        spec_pool = [a for a in names if base != "pvary" or a not in axes]
        self.x_spec = random_spec(rng, spec_pool, 2)
        self.w_spec = random_spec(rng, spec_pool, 2)
        vma_in = spec_axes(self.x_spec) | spec_axes(self.w_spec)
        lifted = vma_in | set(axes)
        reduces = base in ("psum", "pmean") or params.get("to") == "invarying"
        self.out_vma = lifted - set(axes) if reduces else lifted
        self.out_ndim = len(self._out_block())
        # a second factor of the same block shape as the result, when there is one
        self.times_cos = self._out_block() == self.block
        if self.times_cos:
            self.out_vma |= spec_axes(self.x_spec)
        self.out_spec = spec_naming(rng, sorted(self.out_vma, key=names.index), names,
                                    self.out_ndim)
        data = np.random.default_rng(seed)
        self.x = data.standard_normal(global_shape(self.block, self.x_spec, sizes)).astype(
            np.float32)
        self.w = data.standard_normal(global_shape(self.block, self.w_spec, sizes)).astype(
            np.float32)

    def _out_block(self):
        b = list(self.block)
        p = self.params
        n = math.prod(self.sizes[a] for a in
                      ((self.axes,) if isinstance(self.axes, str) else self.axes))
        if self.base == "all_gather":
            if p["tiled"]:
                b[p["axis"]] *= n
            else:
                b.insert(p["axis"], n)
        elif self.base == "psum_scatter":
            if p["tiled"]:
                b[p["scatter_dimension"]] //= n
            else:
                del b[p["scatter_dimension"]]
        elif self.base == "all_to_all":
            if p["tiled"]:
                b[p["split_axis"]] //= n
                b[p["concat_axis"]] *= n
            else:
                b[p["split_axis"]], b[p["concat_axis"]] = b[p["concat_axis"]], b[p["split_axis"]]
                b[p["concat_axis"]] = n
        return tuple(b)

    def body(self, ops, x, w):
        h = ops.sin(x) * w + x
        y = ops.collective(self.base, h, self.axes, **self.params)
        return y * ops.cos(x) if self.times_cos else y

    def shard_fn(self, check):
        f = shard_map(lambda x, w: self.body(SHARD_OPS, x, w), mesh=make_mesh(self.shape),
                      in_specs=(self.x_spec, self.w_spec), out_specs=self.out_spec,
                      check_rep=check)
        return f

    def emu_fn(self):
        return emulate(self.body, self.shape, (self.x_spec, self.w_spec), self.out_spec)

    def __repr__(self):
        return (f"Case({self.name} over {self.axes!r} {self.params} on {self.shape}, "
                f"x {tuple(self.x.shape)} {self.x_spec}, w {tuple(self.w.shape)} {self.w_spec},"
                f" out {self.out_spec})")


def scalar_loss(f, out_shape, seed=1):
    c = np.random.default_rng(seed).standard_normal(out_shape).astype(np.float32)
    return lambda x, w: jnp.sum(jnp.sin(f(x, w)) * c)


def directional_fd(loss, args, directions, eps=1e-2):
    """Central differences along ``directions``, Richardson-extrapolated (error O(eps^4))."""
    def central(h):
        plus = loss(*[a + h * d for a, d in zip(args, directions)])
        minus = loss(*[a - h * d for a, d in zip(args, directions)])
        return (float(plus) - float(minus)) / (2 * h)

    return (4 * central(eps / 2) - central(eps)) / 3


def check_case(case, wraps=("eager", "jit")):
    emu = case.emu_fn()
    out_ref = emu(case.x, case.w)
    loss_ref = scalar_loss(emu, out_ref.shape)
    want = jax.grad(loss_ref, argnums=(0, 1))(case.x, case.w)
    rng = np.random.default_rng(7)
    directions = [rng.standard_normal(case.x.shape).astype(np.float32),
                  rng.standard_normal(case.w.shape).astype(np.float32)]
    fd = None
    for check in (True, False):
        f = case.shard_fn(check)
        out = f(case.x, case.w)
        np.testing.assert_allclose(np.asarray(out), np.asarray(out_ref), rtol=1e-5, atol=1e-5,
                                   err_msg=f"forward, check={check}")
        loss = scalar_loss(f, out.shape)
        for wrap in wraps:
            g = jax.grad(loss, argnums=(0, 1))
            g = jax.jit(g) if wrap == "jit" else g
            got = g(case.x, case.w)
            for k in range(2):
                np.testing.assert_allclose(
                    np.asarray(got[k]), np.asarray(want[k]), rtol=1e-4, atol=1e-5,
                    err_msg=f"d/d{'xw'[k]} vs emulator, check={check}, {wrap}")
        if fd is None:
            fd = directional_fd(jax.jit(loss), [case.x, case.w], directions)
            analytic = sum(float(np.vdot(np.asarray(gk, np.float64), d))
                           for gk, d in zip(got, directions))
            scale = 1 + abs(analytic) + 1e-2 * sum(float(np.abs(np.asarray(gk)).sum())
                                                   for gk in got)
            assert abs(fd - analytic) < 1e-2 * scale, ("finite differences", fd, analytic)


# Every collective on every mesh, one seeded case each (eager and jit, check on and off).
@pytest.mark.parametrize("shape", list(MESHES), ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", COLLECTIVES)
def test_collective_gradient(name, shape):
    case = Case(name, shape, seed=zlib.crc32(f"{name}{shape}".encode()) % 1000)
    try:
        check_case(case)
    except AssertionError as e:
        raise AssertionError(f"{case}: {e}") from None


# Random axes, specs and parameters: hypothesis, deterministic.
@settings(max_examples=100, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(COLLECTIVES), shape=st.sampled_from(list(MESHES)),
       seed=st.integers(0, 10 ** 6))
def test_collective_gradient_random(name, shape, seed):
    case = Case(name, shape, seed)
    try:
        check_case(case, wraps=("eager",))
    except AssertionError as e:
        raise AssertionError(f"{case}: {e}") from None


# --- SEMANTICS 4.1, 4.3, 4.4: the literal examples ---------------------------------------------

MESH_XY = jax.make_mesh((4, 2), ("x", "y"))
MESH_X = jax.make_mesh((4,), ("x",))


def _eqns(program, name):
    return [e for e in program.eqns if e.primitive.name == name]


def _shard_maps(closed):
    return _eqns(closed.jaxpr, "shard_map")


@pytest.mark.parametrize("check", [True, False], ids=["check-on", "check-off"])
def test_41_psum_gradient_is_ones_either_way(check):
    f = shard_map(lambda v: lax.psum(v, "x"), mesh=MESH_XY, in_specs=P("x"), out_specs=P(),
                  check_rep=check)
    loss = lambda a: f(a).sum()
    x = jnp.arange(8.)
    for g in (jax.grad(loss), jax.jit(jax.grad(loss))):
        np.testing.assert_array_equal(np.asarray(g(x)), np.ones(8, np.float32))
    value, grad = jax.value_and_grad(loss)(x)
    assert float(value) == float(np.arange(8.).sum())
    np.testing.assert_array_equal(np.asarray(grad), np.ones(8, np.float32))


def test_43_transpose_with_the_check_on_is_one_pvary():
    f = shard_map(lambda v: lax.psum(v, "x"), mesh=MESH_XY, in_specs=P("x"), out_specs=P())
    closed = jax.make_jaxpr(jax.grad(lambda a: f(a).sum()))(jnp.arange(8.))
    forward, backward = _shard_maps(closed)
    assert backward.params["in_specs"] == (P(),) and backward.params["out_specs"] == (P("x"),)
    body = backward.params["jaxpr"]
    assert [e.primitive.name for e in body.eqns] == ["pvary"]
    assert body.eqns[0].params["mesh_axes"] == ("x",)


def test_43_transpose_with_the_check_off_rescales():
    # ct/8, psum 'x', psum 'y': 1/8 * 4 * 2 = 1
    f = shard_map(lambda v: lax.psum(v, "x"), mesh=MESH_XY, in_specs=P("x"), out_specs=P(),
                  check_rep=False)
    closed = jax.make_jaxpr(jax.grad(lambda a: f(a).sum()))(jnp.arange(8.))
    forward, backward = _shard_maps(closed)
    body = backward.params["jaxpr"]
    assert [e.primitive.name for e in body.eqns] == ["div", "psum", "psum"]
    assert float(body.eqns[0].invars[1].value) == 8.0
    assert [e.params["mesh_axes"] for e in body.eqns[1:]] == [("x",), ("y",)]


@pytest.mark.parametrize("out_spec, transposed", [(P("x"), ["psum"]), (P(), [])],
                         ids=["P()->P('x')", "P()->P()"])
def test_43_identity_transposes(out_spec, transposed):
    # identity P() -> P('x') transposes to one psum over 'x'; P() -> P() to the identity
    f = shard_map(lambda v: v, mesh=MESH_XY, in_specs=P(), out_specs=out_spec)
    x = jnp.arange(4.)
    closed = jax.make_jaxpr(jax.grad(lambda a: (f(a) ** 2).sum()))(x)
    backward = _shard_maps(closed)[-1]
    names = [e.primitive.name for e in backward.params["jaxpr"].eqns
             if e.primitive.name in ("psum", "pvary", "div")]
    assert names == transposed
    if transposed:
        assert _eqns(backward.params["jaxpr"], "psum")[0].params["mesh_axes"] == ("x",)
    copies = 4 if out_spec == P("x") else 1
    np.testing.assert_allclose(np.asarray(jax.grad(lambda a: (f(a) ** 2).sum())(x)),
                               2 * copies * np.arange(4.))


@pytest.mark.parametrize("check", [True, False], ids=["check-on", "check-off"])
@pytest.mark.parametrize("wrap", ["eager", "jit"])
def test_44_unmapped_scalar_gets_the_sum_over_all_instances(check, wrap):
    g = shard_map(lambda w, x: lax.psum((w * x).sum(), ("x", "y")), mesh=MESH_XY,
                  in_specs=(P(), P("x", "y")), out_specs=P(), check_rep=check)
    grad = jax.grad(g)
    grad = jax.jit(grad) if wrap == "jit" else grad
    dw = grad(jnp.array(1.), jnp.ones((8, 4)))
    assert dw.shape == () and float(dw) == 32.0


@pytest.mark.parametrize("check", [True, False], ids=["check-on", "check-off"])
@pytest.mark.parametrize("wrap", ["eager", "jit"])
def test_44_unmapped_vector(check, wrap):
    h = shard_map(lambda x, y: x * y, mesh=MESH_X, in_specs=(P("x"), P()), out_specs=P("x"),
                  check_rep=check)
    grad = jax.grad(lambda x, y: h(x, y).sum(), argnums=1)
    grad = jax.jit(grad) if wrap == "jit" else grad
    np.testing.assert_array_equal(np.asarray(grad(jnp.arange(8.), jnp.ones(2))), [12., 16.])


@pytest.mark.parametrize("check", [True, False], ids=["check-on", "check-off"])
def test_44_closed_over_input_gets_the_sum(check):
    # a closed-over array is unmapped along every axis: the sum over all instances
    y = jnp.array([1., 2.])

    def loss(y):
        h = shard_map(lambda x: x * y, mesh=MESH_XY, in_specs=P("x"), out_specs=P("x"),
                      check_rep=check)
        return h(jnp.arange(8.)).sum()

    np.testing.assert_array_equal(np.asarray(jax.grad(loss)(y)), [12., 16.])
    np.testing.assert_array_equal(np.asarray(jax.jit(jax.grad(loss))(y)), [12., 16.])


@pytest.mark.parametrize("check", [True, False], ids=["check-on", "check-off"])
def test_44_unmapped_output_cotangent_reaches_every_instance(check):
    # out P(): one copy, whose whole cotangent reaches each instance along the axis
    f = shard_map(lambda x: lax.psum(x * x, "x"), mesh=MESH_X, in_specs=P("x"), out_specs=P(),
                  check_rep=check)
    x = jnp.arange(8.)
    c = jnp.array([3., 5.])
    got = jax.grad(lambda a: (f(a) * c).sum())(x)
    np.testing.assert_allclose(np.asarray(got), 2 * np.arange(8.) * np.tile([3., 5.], 4))


@pytest.mark.parametrize("check", [True, False], ids=["check-on", "check-off"])
@pytest.mark.parametrize("name", COLLECTIVES)
def test_vjp_and_jvp_through_shard_map_agree(name, check):
    # the dot-product test <t, vjp(ct)> == <jvp(t), ct>, every collective
    case = Case(name, (2, 4), seed=zlib.crc32(name.encode()) % 1000)
    f = case.shard_fn(check)
    rng = np.random.default_rng(0)
    tx = rng.standard_normal(case.x.shape).astype(np.float32)
    tw = rng.standard_normal(case.w.shape).astype(np.float32)
    out, vjp_fun = jax.vjp(f, case.x, case.w)
    ct = rng.standard_normal(out.shape).astype(np.float32)
    _, out_t = jax.jvp(f, (case.x, case.w), (tx, tw))
    cx, cw = vjp_fun(ct)
    lhs = np.vdot(tx, np.asarray(cx)) + np.vdot(tw, np.asarray(cw))
    rhs = np.vdot(np.asarray(out_t), ct)
    assert lhs == pytest.approx(rhs, rel=1e-4, abs=1e-4), case


# --- grad under jit equals eager ------------------------------------------------------------------

@pytest.mark.parametrize("check", [True, False], ids=["check-on", "check-off"])
def test_grad_under_jit_equals_eager(check):
    def body(w, x):
        h = jnp.tanh(x @ w)
        gathered = lax.all_gather(h, "y", axis=1, tiled=True)
        return lax.psum(h.sum(0) + jnp.cos(gathered).sum(0)[:2], "x")

    f = shard_map(body, mesh=MESH_XY, in_specs=(P(None, "y"), P("x", "y")),
                  out_specs=P("y"), check_rep=check)
    rng = np.random.default_rng(1)
    w = rng.standard_normal((2, 4)).astype(np.float32)
    x = rng.standard_normal((8, 4)).astype(np.float32)
    loss = lambda w, x: jnp.sum(jnp.sin(f(w, x)))
    eager = jax.value_and_grad(loss, argnums=(0, 1))(w, x)
    jitted = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(w, x)
    for a, b in zip(jax.tree_util.tree_leaves(eager), jax.tree_util.tree_leaves(jitted)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)


# --- grad inside a body (4.1, last sentences) ---------------------------------------------------------

@pytest.mark.parametrize("wrap", ["eager", "jit"])
def test_grad_inside_a_body_check_on_sums_over_lifted_axes(wrap):
    # w is P() (invariant) and meets varying x: the body lifted it, so its gradient comes out
    # invariant, summed over 'x' (pvary transposes to psum)
    x, w = jnp.arange(8.) / 4, jnp.array([2.])

    def body(w, x):
        g = jax.grad(lambda w: jnp.sin(w * x).sum())(w)
        assert jax.typeof(g).vma == frozenset()
        return g

    f = shard_map(body, mesh=MESH_X, in_specs=(P(), P("x")), out_specs=P("x"))
    f = jax.jit(f) if wrap == "jit" else f
    total = float((np.cos(2 * np.arange(8.) / 4) * np.arange(8.) / 4).sum())
    np.testing.assert_allclose(np.asarray(f(w, x)), [total] * 4, rtol=1e-5)
    # invariant, so it may be returned replicated
    g = shard_map(body, mesh=MESH_X, in_specs=(P(), P("x")), out_specs=P())
    np.testing.assert_allclose(np.asarray(g(w, x)), [total], rtol=1e-5)


@pytest.mark.parametrize("wrap", ["eager", "jit"])
def test_grad_inside_a_body_check_off_stays_per_device(wrap):
    x, w = jnp.arange(8.) / 4, jnp.array([2.])
    f = shard_map(lambda w, x: jax.grad(lambda w: jnp.sin(w * x).sum())(w), mesh=MESH_X,
                  in_specs=(P(), P("x")), out_specs=P("x"), check_rep=False)
    f = jax.jit(f) if wrap == "jit" else f
    blocks = (np.arange(8.) / 4).reshape(4, 2)
    per_device = (np.cos(2 * blocks) * blocks).sum(1)
    np.testing.assert_allclose(np.asarray(f(w, x)), per_device, rtol=1e-5)
    # ... and the user reduces it explicitly
    g = shard_map(lambda w, x: lax.psum(jax.grad(lambda w: jnp.sin(w * x).sum())(w), "x"),
                  mesh=MESH_X, in_specs=(P(), P("x")), out_specs=P(), check_rep=False)
    np.testing.assert_allclose(np.asarray(g(w, x)), [per_device.sum()], rtol=1e-5)


def test_grad_inside_a_body_through_a_psum():
    # nothing lifted; the psum couples the members, and its transpose (pvary of the psum of
    # the lifted product's cotangent with the check on, psum with it off) brings every
    # member's share: d/dv_d sum(sin(v_d) * S) + sum_e ... = cos(v_d) * S + sum_e sin(v_e)
    x = jnp.arange(8.) / 4
    for check in (True, False):
        f = shard_map(lambda x: jax.grad(lambda v: (jnp.sin(v) * lax.psum(v, "x")).sum())(x),
                      mesh=MESH_X, in_specs=P("x"), out_specs=P("x"), check_rep=check)
        blocks = (np.arange(8.) / 4).reshape(4, 2)
        s = blocks.sum(0)
        want = np.cos(blocks) * s + np.sin(blocks).sum(0)
        np.testing.assert_allclose(np.asarray(f(x)).reshape(4, 2), want, rtol=1e-5)


# --- control flow with collectives inside a body -------------------------------------------------

RING = tuple((k, (k + 1) % 4) for k in range(4))


def _rows(x):
    """A body value's rows: per device for the emulator."""
    if isinstance(x, Dev):
        return [Dev(b[k] for b in x.blocks) for k in range(x.blocks[0].shape[0])]
    return [x[k] for k in range(x.shape[0])]


def fori_body(ops, x, w, *, loop):
    def step(k, c):
        return ops.collective("ppermute", ops.sin(c) * w, "x", perm=RING) + c * x
    if loop:
        return lax.fori_loop(0, 3, step, x)
    c = x
    for k in range(3):
        c = step(k, c)
    return c


def scan_body(ops, x, w, *, loop):
    def step(c, xk):
        c = ops.collective("ppermute", c * xk, "x", perm=RING) + ops.sin(xk)
        return c, ops.cos(c) * w[0]
    if loop:
        c, ys = lax.scan(step, x[0], x)
        return ys * ops.sin(c)
    c, ys = _rows(x)[0], []
    for xk in _rows(x):
        c, y = step(c, xk)
        ys.append(y)
    stacked = Dev(jnp.stack([y.blocks[p] for y in ys]) for p in range(len(c.blocks)))
    return stacked * ops.sin(c)


def cond_body(ops, x, w, *, loop, branch=None):
    s = ops.collective("psum", x * x, "x")

    def yes(v):
        return ops.collective("ppermute", ops.sin(v), "x", perm=RING) * s

    def no(v):
        return v * w

    if loop:
        return lax.cond(w.sum() > 0, yes, no, x)
    return yes(x) if branch else no(x)


@pytest.mark.parametrize("check", [True, False], ids=["check-on", "check-off"])
@pytest.mark.parametrize("kind, w", [("fori_loop", 0.5), ("scan", 0.5), ("cond-true", 0.5),
                                     ("cond-false", -0.5)])
def test_control_flow_with_collectives_in_a_body(kind, w, check):
    # w is P() (invariant); the cond's predicate w.sum() > 0 is invariant (SEMANTICS 3.4)
    body = {"fori_loop": fori_body, "scan": scan_body}.get(kind, cond_body)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((8, 3)).astype(np.float32)
    w = (np.float32(w) + 0.1 * rng.standard_normal(3)).astype(np.float32)
    f = shard_map(lambda x, w: body(SHARD_OPS, x, w, loop=True), mesh=MESH_X,
                  in_specs=(P("x"), P()), out_specs=P("x"), check_rep=check)
    extra = {"branch": kind == "cond-true"} if kind.startswith("cond") else {}
    emu = emulate(lambda ops, x, w: body(ops, x, w, loop=False, **extra), (4,),
                  (P("x"), P()), P("x"))
    np.testing.assert_allclose(np.asarray(f(x, w)), np.asarray(emu(x, w)), rtol=1e-5,
                               atol=1e-6)
    loss = scalar_loss(f, (8, 3))
    want = jax.grad(scalar_loss(emu, (8, 3)), argnums=(0, 1))(x, w)
    for g in (jax.grad(loss, argnums=(0, 1)), jax.jit(jax.grad(loss, argnums=(0, 1)))):
        got = g(x, w)
        for a, b in zip(got, want):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)
    directions = [rng.standard_normal(x.shape).astype(np.float32),
                  rng.standard_normal(w.shape).astype(np.float32)]
    fd = directional_fd(jax.jit(loss), [x, w], directions)
    analytic = sum(float(np.vdot(np.asarray(a, np.float64), d)) for a, d in zip(got, directions))
    assert fd == pytest.approx(analytic, rel=1e-2, abs=1e-2)


def test_while_loop_in_a_body_reverse_mode_is_an_error():
    def body(x):
        return lax.while_loop(lambda c: c[1] < 3, lambda c: (lax.ppermute(c[0], "x", RING) * 2,
                                                             c[1] + 1), (x, 0))[0]

    f = shard_map(body, mesh=MESH_X, in_specs=P("x"), out_specs=P("x"))
    x = jnp.arange(8.)
    with pytest.raises(ValueError, match="Reverse-mode differentiation does not work for "
                                         "lax.while_loop or lax.fori_loop with dynamic start/stop"):
        jax.grad(lambda a: f(a).sum())(x)
    # forward mode works
    _, t = jax.jvp(f, (x,), (jnp.ones(8),))
    np.testing.assert_array_equal(np.asarray(t), np.full(8, 8.))


# --- a cond whose predicate varies: devices along it may take different branches ---------------
#
# The branches are typed with their operands' own types (as in JAX), so inside them a value
# typed invariant over the predicate's axis is only equal among the devices that took the same
# branch. Its gradient must still be the global function's: JAX 0.10.2 gets this case wrong
# (it sums the output cotangent over the predicate's axis before the branches transpose).

RING_Y = tuple((k, (k + 1) % 4) for k in range(4))
PAIRED = {
    "none": None,
    "psum-x": ("psum", "x", {}),
    "psum-y": ("psum", "y", {}),
    "pmean-y": ("pmean", "y", {}),
    "pcast-y": ("pvary", "y", {}),
    "all_gather-y": ("all_gather", "y", dict(tiled=True, to="invarying")),
    "ppermute-y": ("ppermute", "y", dict(perm=RING_Y)),
}


def _paired(ops, collective, v):
    if collective is None:
        return v
    name, axes, params = collective
    out = ops.collective(name, v, axes, **params)
    return out[2:4] if name == "all_gather" else out


def cond_on_y(ops, pre, post, collective, x, w):
    """``lax.cond(axis_index('y') % 2 == 0, yes, no, x, w)``, branch k computing
    ``post[k](paired(pre[k](x, w)), x, w)``: the one collective of every device pairs up with
    its group's, whichever branch each device took (the emulator picks each device's operand
    of the collective, then its result, by its own predicate)."""
    if isinstance(ops, EmuOps):
        even = [ops.mesh.coord(p)["y"] % 2 == 0 for p in ops.mesh.positions()]

        def pick(yes, no):
            return Dev(a if e else b for e, a, b in zip(even, yes.blocks, no.blocks))

        shared = _paired(ops, collective, pick(pre[0](x, w), pre[1](x, w)))
        return pick(post[0](shared, x, w), post[1](shared, x, w))
    yes, no = [lambda v, u, k=k: post[k](_paired(ops, collective, pre[k](v, u)), v, u)
               for k in range(2)]
    return lax.cond(lax.axis_index("y") % 2 == 0, yes, no, x, w)


def varying_cond_body(ops, x, w, *, collective):
    pre = (lambda v, u: ops.sin(v) * u, lambda v, u: v * v * u)
    post = (lambda s, v, u: ops.sin(s) * v, lambda s, v, u: s * u + v)
    return cond_on_y(ops, pre, post, collective, x, w)


@pytest.mark.parametrize("check", [True, False], ids=["check-on", "check-off"])
@pytest.mark.parametrize("paired", list(PAIRED))
def test_cond_on_a_varying_predicate_gradient(paired, check):
    collective = PAIRED[paired]
    rng = np.random.default_rng(11)
    x = rng.standard_normal((4, 3)).astype(np.float32)            # P('x'): blocks (2, 3)
    w = rng.standard_normal(3).astype(np.float32)                 # P(): invariant
    specs = (P("x"), P())
    f = shard_map(lambda x, w: varying_cond_body(SHARD_OPS, x, w, collective=collective),
                  mesh=make_mesh((2, 4)), in_specs=specs, out_specs=P(("x", "y")),
                  check_rep=check)
    emu = emulate(lambda ops, x, w: varying_cond_body(ops, x, w, collective=collective),
                  (2, 4), specs, P(("x", "y")))
    np.testing.assert_allclose(np.asarray(f(x, w)), np.asarray(emu(x, w)), rtol=1e-5,
                               atol=1e-6)
    loss = scalar_loss(f, (16, 3))
    want = jax.grad(scalar_loss(emu, (16, 3)), argnums=(0, 1))(x, w)
    for g in (jax.grad(loss, argnums=(0, 1)), jax.jit(jax.grad(loss, argnums=(0, 1)))):
        for a, b in zip(g(x, w), want):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)
    # forward mode and vjp agree: <t, vjp(ct)> == <jvp(t), ct>
    tangents = [rng.standard_normal(x.shape).astype(np.float32),
                rng.standard_normal(w.shape).astype(np.float32)]
    ct = rng.standard_normal((16, 3)).astype(np.float32)
    _, jvp_out = jax.jvp(f, (x, w), tuple(tangents))
    _, f_vjp = jax.vjp(f, x, w)
    lhs = sum(float(np.vdot(t, np.asarray(c))) for t, c in zip(tangents, f_vjp(ct)))
    assert lhs == pytest.approx(float(np.vdot(np.asarray(jvp_out), ct)), rel=1e-4, abs=1e-4)


@pytest.mark.parametrize("paired", ["none", "psum-y"])
def test_cond_on_a_varying_predicate_under_vmap(paired):
    collective = PAIRED[paired]
    rng = np.random.default_rng(12)
    xs = rng.standard_normal((3, 4, 3)).astype(np.float32)
    w = rng.standard_normal(3).astype(np.float32)
    f = shard_map(lambda x, w: varying_cond_body(SHARD_OPS, x, w, collective=collective),
                  mesh=make_mesh((2, 4)), in_specs=(P("x"), P()), out_specs=P(("x", "y")))
    want = np.stack([np.asarray(f(x, w)) for x in xs])
    for g in (jax.vmap(f, in_axes=(0, None)), jax.jit(jax.vmap(f, in_axes=(0, None)))):
        np.testing.assert_allclose(np.asarray(g(xs, w)), want, rtol=1e-6)


def test_grad_inside_a_body_through_a_cond_on_a_varying_predicate():
    # per device: d/dv sum(branch(v)); v is invariant over 'y', so its gradient is summed over
    # the devices along 'y', each through the branch it took (as if v had been pcast first)
    def body(v):
        def loss(u):
            return lax.cond(lax.axis_index("y") % 2 == 0, lambda a: jnp.sin(a),
                            lambda a: a * a, u).sum()
        return jax.grad(loss)(v)

    x = np.arange(8, dtype=np.float32).reshape(4, 2) / 4
    f = shard_map(body, mesh=make_mesh((2, 4)), in_specs=P("x"), out_specs=P("x"))
    want = [2 * (np.cos(b) + 2 * b) for b in np.split(x, 2)]     # two devices of each branch
    for g in (f, jax.jit(f)):
        np.testing.assert_allclose(np.asarray(g(x)), np.concatenate(want), rtol=1e-6)


# --- SEMANTICS 4.6: pmax / pmin ---------------------------------------------------------------------

PMAX_ERROR = ("Differentiation rule for '{}' not implemented; apply lax.stop_gradient to its "
              "operand if its derivative is not needed.")


@pytest.mark.parametrize("name", ["pmax", "pmin"])
def test_pmax_pmin_are_not_differentiable(name):
    op = getattr(lax, name)
    f = shard_map(lambda v: op(v, "x") * v, mesh=MESH_X, in_specs=P("x"), out_specs=P("x"))
    x = jnp.arange(8.)
    attempts = [lambda: jax.grad(lambda a: f(a).sum())(x),
                lambda: jax.jit(jax.grad(lambda a: f(a).sum()))(x),
                lambda: jax.jvp(f, (x,), (jnp.ones(8),)),
                lambda: jax.vjp(f, x)]
    for attempt in attempts:
        with pytest.raises(NotImplementedError) as info:
            attempt()
        assert str(info.value) == PMAX_ERROR.format(name)


@pytest.mark.parametrize("name", ["pmax", "pmin"])
def test_pmax_pmin_of_a_stopped_operand_are_fine(name):
    op = getattr(lax, name)
    f = shard_map(lambda v: op(lax.stop_gradient(v), "x") * v, mesh=MESH_X, in_specs=P("x"),
                  out_specs=P("x"))
    x = jnp.arange(8.)
    got = jax.grad(lambda a: f(a).sum())(x)
    blocks = np.arange(8.).reshape(4, 2)
    want = np.tile(blocks.max(0) if name == "pmax" else blocks.min(0), 4)
    np.testing.assert_array_equal(np.asarray(got), want)


# --- SEMANTICS 4.5: residuals are per-device ------------------------------------------------------------

@pytest.mark.parametrize("shape", [(8,), (4, 2), (2, 2, 2)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("check", [True, False], ids=["check-on", "check-off"])
def test_residuals_cross_the_boundary_per_device(shape, check):
    mesh = make_mesh(shape)
    names = mesh.axis_names

    def body(w, x):
        h = jnp.tanh(x * w)                          # tanh(.) is a residual, varying
        s = jnp.sin(w).sum()                         # a scalar, needed by the backward pass
        return lax.psum(h.sum() * s, names)

    f = shard_map(body, mesh=mesh, in_specs=(P(), P(names)), out_specs=P(), check_rep=check)
    w = jnp.arange(3.) / 3
    x = jnp.arange(8 * 3.).reshape(8, 3) / 24
    closed = jax.make_jaxpr(jax.grad(lambda w, x: f(w, x), argnums=(0, 1)))(w, x)
    known, unknown = _shard_maps(closed)
    n_out = 1
    residuals = known.outvars[n_out:]
    assert residuals, "a nonlinear body needs residuals"
    body_out = known.params["jaxpr"].outvars[n_out:]
    res_specs = known.params["out_specs"][n_out:]
    for outer, inner, spec in zip(residuals, body_out, res_specs):
        assert inner.aval.shape[0] == 1
        # with the check on a residual is mapped over the axes it varies over (its copies
        # along the others are equal); with it off, over every axis
        axes = tuple(a for a in names if a in inner.aval.vma) if check else tuple(names)
        want_spec = P() if not axes else P(axes) if len(axes) > 1 else P(axes[0])
        assert spec == want_spec
        # the global residual: the per-device blocks stacked along a leading dim over them
        size = int(np.prod([mesh.shape[a] for a in axes]))
        assert outer.aval.shape == (size,) + inner.aval.shape[1:]
    # tanh(x * w) varies over every axis, sin(w).sum() over none
    if check:
        assert {r.aval.vma for r in body_out} == {frozenset(), frozenset(names)}
    # the unknown shard_map reads them with the same specs, block (1, *block)
    n_res = len(residuals)
    assert [a for a in unknown.invars[:n_res]] == residuals
    assert unknown.params["in_specs"][:n_res] == res_specs
    # a scalar residual becomes (1,) per device
    assert any(r.aval.shape[1:] == () for r in residuals)
    # and the numbers
    got = jax.grad(lambda w, x: f(w, x), argnums=(0, 1))(w, x)
    want = jax.grad(lambda w, x: jnp.tanh(x * w).sum() * jnp.sin(w).sum(),
                    argnums=(0, 1))(w, x)
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_residuals_in_the_lowered_program_are_per_device():
    # under jit, each device writes its own (1, *block) residual and reads back its own
    mesh = MESH_XY
    f = shard_map(lambda x: lax.psum(jnp.sin(x).sum(), ("x", "y")), mesh=mesh,
                  in_specs=P("x", "y"), out_specs=P())
    x = jnp.arange(32.).reshape(8, 4) / 32
    module = jax.jit(jax.grad(f)).lower(x).module
    # the third shard_map gathers x's cotangent to x's type (x is an unsplit host value)
    known, unknown, _ = module.all_shard_maps()
    for d in range(mesh.size):
        forward = known.device_programs[d].program
        backward = unknown.device_programs[d].program
        cos_out = [v for v in forward.outvars if v.aval.shape[:1] == (1,)]
        assert cos_out and all(v.aval.shape == (1, 2, 2) for v in cos_out)
        assert backward.invars[0].aval.shape == (1, 2, 2)
        names = [e.primitive.name for e in forward.eqns]
        assert "all_gather" not in names and "all_reduce" not in names
    np.testing.assert_allclose(np.asarray(jax.jit(jax.grad(f))(x)), np.cos(np.asarray(x)),
                               rtol=1e-6)


@pytest.mark.parametrize("check", [True, False], ids=["check-on", "check-off"])
def test_inputs_are_not_emitted_again_as_residuals(check):
    # x * y needs both inputs in the backward pass; y is lifted (pvary) where it meets x. The
    # unknown shard_map reads the inputs themselves, with their in_specs, and redoes the
    # pvary: no residual leaves the known body.
    h = shard_map(lambda x, y: x * y, mesh=MESH_X, in_specs=(P("x"), P()), out_specs=P("x"),
                  check_rep=check)
    loss = lambda x, y: (h(x, y) ** 2).sum()
    x, y = jnp.arange(8.), jnp.array([1., 2.])
    closed = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1)))(x, y)
    known, unknown = _shard_maps(closed)
    assert len(known.outvars) == 1 and known.params["out_specs"] == (P("x"),)
    outer_x, outer_y = closed.jaxpr.invars
    assert set(map(id, unknown.invars)) >= {id(outer_x), id(outer_y)}
    specs = dict(zip(map(id, unknown.invars), unknown.params["in_specs"]))
    assert specs[id(outer_x)] == P("x") and specs[id(outer_y)] == P()
    if check:
        assert [e.primitive.name for e in known.params["jaxpr"].eqns] == ["pvary", "mul"]
        assert "pvary" in [e.primitive.name for e in unknown.params["jaxpr"].eqns]
    gx, gy = jax.grad(loss, argnums=(0, 1))(x, y)
    yy = np.tile([1., 2.], 4)
    np.testing.assert_allclose(np.asarray(gx), 2 * np.arange(8.) * yy ** 2)
    np.testing.assert_allclose(np.asarray(gy), (2 * np.arange(8.) ** 2 * yy).reshape(4, 2).sum(0))


# --- linearize and linear_transpose in a body: the varying axes of primals and tangents ----------

def _mean_square(x):
    return jnp.mean(x ** 2)


def _auto_mesh2():
    return jax.make_mesh((2,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))


def test_linear_transpose_of_a_varying_primal_sums_nothing():
    """The transpose at a primal that varies over 'x' gives each device its own cotangent:
    the point it transposes at varies as the primal does (before, it was invariant, and the
    cotangent was summed over 'x': 8 where JAX gives 4)."""
    def body(t):
        p = lax.pcast(jnp.array([1.]), "x", to="varying")
        _, fwd = jax.linearize(_mean_square, p)        # fwd(u) = 2 p u
        return jax.linear_transpose(fwd, p)(fwd(t))[0]
    out = jax.shard_map(body, mesh=_auto_mesh2(), in_specs=P("x"), out_specs=P("x"))(
        jnp.ones((2,)))
    np.testing.assert_array_equal(np.asarray(out), [4., 4.])


@pytest.mark.parametrize("vary_primal", [False, True])
def test_a_tangent_varying_otherwise_than_its_primal_is_jax_error(vary_primal):
    def body(t):
        p = jnp.array([1.])
        if vary_primal:
            p = lax.pcast(p, "x", to="varying")
            t = jnp.ones(1)                            # invariant tangent
        _, fwd = jax.linearize(_mean_square, p)
        return fwd(t)
    where = ("the tangent value passed to the callable `f_jvp`" if vary_primal
             else "the primal value passed to `jax.linearize`")
    got, want = (("float32[1]", "float32[1]{V:x}") if vary_primal
                 else ("float32[1]{V:x}", "float32[1]"))
    with pytest.raises(ValueError) as info:
        jax.shard_map(body, mesh=_auto_mesh2(), in_specs=P("x"), out_specs=P("x"))(
            jnp.ones((2,)))
    assert str(info.value) == (
        "linearized function called on tangent values inconsistent with the original primal "
        f"values:\nGot tangent aval {got} for primal aval {want} but expected {want}. \nThis "
        f"might be fixed by:\n  * applying `jax.lax.pcast(..., ('x',), to='varying')` to "
        f"{where}{' returned by `jax.linearize`' if vary_primal else ''};")


def test_linearize_in_a_body_with_the_check_off_takes_any_tangent():
    """With check_vma=False nothing tracks how values vary: a tangent made in the body is
    accepted for a block primal, as JAX's (with the check on, ``ones_like`` of a block varies
    as it does)."""
    from shardc.sharding import AxisType, PartitionSpec as P
    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
    x = np.arange(16, dtype=np.float32)

    def body(u):
        return jax.linearize(lambda v: jnp.sin(v) * 2, u)[1](jnp.ones_like(u))

    f = jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    np.testing.assert_allclose(f(x), 2 * np.cos(x), rtol=1e-6)
    g = jax.shard_map(lambda u: jax.linearize(lambda v: jnp.sin(v) * 2, u)[1](
        jnp.ones(u.shape)), mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    np.testing.assert_allclose(g(x), 2 * np.cos(x), rtol=1e-6)


def test_jacrev_of_a_body_with_a_split_and_a_replicated_output_from_a_scan():
    """The report: jacrev through a shard_map returning a P('x') carry and P() outputs of a
    scan raised AttributeError when the stacked cotangent was sliced eagerly (its slice held
    one device's layout, which has no spec)."""
    mesh = jax.make_mesh((8,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    xs = np.arange(8, dtype=np.float32)
    f = jax.shard_map(lambda a, x: lax.scan(lambda v, _: (v * a, a), x, None, length=2),
                      mesh=mesh, in_specs=(P(), P("x")), out_specs=(P("x"), P()))
    a = np.float32(0.7)
    carry_jac, ys_jac = jax.jacrev(lambda a: f(a, xs))(a)
    np.testing.assert_allclose(np.asarray(carry_jac), 2 * a * xs, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(ys_jac), [1.0, 1.0])
    fwd_carry, fwd_ys = jax.jacfwd(lambda a: f(a, xs))(a)
    np.testing.assert_allclose(np.asarray(fwd_carry), np.asarray(carry_jac), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(fwd_ys), np.asarray(ys_jac))
