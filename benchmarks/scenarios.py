"""The benchmark scenarios of issue 6, written once against a JAX-shaped API.

shardc's public API has JAX's names, so each scenario's program is one function of an ``Api``
(shardc's or JAX's modules); only the numpy lower bound is written separately: the same
per-device block computations and the collective's data movement, directly in numpy, on blocks
already in place. Data moves once and is shared where every receiver gets the same block: a
psum's total or an all_gather's concatenation is made once; a ppermute copies each block once
(shardc's result aliases its source's blocks instead, as arrays are immutable).

    matmul_basic    the tutorial's matmul on a (4,2) mesh: 8x16@16x4, 1024^2, 2048^2 (f32)
    collective      psum, pmax, all_gather, psum_scatter, ppermute, all_to_all on 8 devices,
                    per-device blocks of 2^16 and 2^20 float32
    mlp_step        a data-parallel MLP training step: batch 256, widths 512-512-10, 8 devices
    program_size    200 and 1000 repetitions of x = sin(x) * 1.0001 + 0.1 on 8x8 blocks
    mesh_scaling    the same psum-and-matmul program on 8, 64 and 512 devices
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import numpy as np


@dataclasses.dataclass
class Api:
    """The modules a scenario's program is written against: shardc's, or JAX's."""
    name: str
    jit: Callable
    shard_map: Callable
    jnp: object
    lax: object
    device_put: Callable
    NamedSharding: type
    P: type
    Mesh: type
    devices: Callable
    value_and_grad: Callable
    block: Callable          # wait for a result (JAX dispatches asynchronously)
    clear: Callable          # forget every compiled program (a first call compiles again)

    def mesh(self, shape, names):
        count = int(np.prod(shape))
        return self.Mesh(np.array(self.devices()[:count], dtype=object).reshape(shape), names)

    def place(self, value, mesh, spec):
        return self.device_put(value, self.NamedSharding(mesh, spec))


def shardc_api() -> Api:
    import shardc
    import shardc.numpy as jnp
    from shardc import lax
    from shardc.sharding import Mesh
    return Api("shardc", shardc.jit, shardc.shard_map, jnp, lax, shardc.device_put,
               shardc.NamedSharding, shardc.P, Mesh, shardc.devices, shardc.value_and_grad,
               block=lambda x: x, clear=lambda: None)


def jax_api() -> Api:
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    return Api("jax", jax.jit, jax.shard_map, jnp, jax.lax, jax.device_put, NamedSharding,
               PartitionSpec, Mesh, jax.devices, jax.value_and_grad,
               block=jax.block_until_ready, clear=jax.clear_caches)


@dataclasses.dataclass
class Scenario:
    """One program at one size.

    ``build(api)`` returns ``(fn, args)``: the shard_map'd function (not jitted) and its
    arguments, already placed. ``lower_bound()`` returns a function running the numpy lower
    bound once (its inputs prepared outside the timing)."""
    name: str
    group: str
    size: int                 # the x axis of the plots: block bytes, repetitions, devices
    size_label: str
    devices: int
    build: Callable
    lower_bound: Callable
    quick: bool = False       # part of --quick
    big_blocks: bool = False  # blocks of 1 MiB or more: the 1.3x-of-numpy target applies
    eager: bool = True        # JAX's eager shard_map is measured (never on large meshes)


def _rng(seed=0):
    return np.random.default_rng(seed)


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


# --- matmul_basic ---------------------------------------------------------------------------------

def _matmul_inputs(m, k, n):
    if m == 8:      # the tutorial's values
        return (np.arange(m * k, dtype=np.float32).reshape(m, k),
                np.arange(k * n, dtype=np.float32).reshape(k, n))
    rng = _rng(1)
    return _f32(rng, m, k), _f32(rng, k, n)


def _matmul_build(m, k, n, api: Api):
    mesh = api.mesh((4, 2), ("x", "y"))
    P = api.P
    a, b = _matmul_inputs(m, k, n)

    @functools.partial(api.shard_map, mesh=mesh, in_specs=(P("x", "y"), P("y", None)),
                       out_specs=P("x", None))
    def matmul_basic(a_block, b_block):
        c_partialsum = api.jnp.dot(a_block, b_block)
        return api.lax.psum(c_partialsum, "y")

    return matmul_basic, (api.place(a, mesh, P("x", "y")), api.place(b, mesh, P("y", None)))


def seed_matmul(api: Api) -> tuple:
    """The tutorial's matmul (8x16 @ 16x4 on a (4, 2) mesh of Auto axes) and its numpy
    inputs, as a user calls it on host batches."""
    fn, _ = _matmul_build(8, 16, 4, api)
    return fn, _matmul_inputs(8, 16, 4)


def _matmul_bound(m, k, n):
    a, b = _matmul_inputs(m, k, n)
    a_blocks = {(i, j): a[i * m // 4:(i + 1) * m // 4, j * k // 2:(j + 1) * k // 2]
                for i in range(4) for j in range(2)}
    b_blocks = {j: b[j * k // 2:(j + 1) * k // 2] for j in range(2)}

    def run():
        partial = {(i, j): a_blocks[i, j] @ b_blocks[j] for i in range(4) for j in range(2)}
        out = {}
        for i in range(4):
            total = partial[i, 0] + partial[i, 1]
            out[i, 0] = out[i, 1] = total
        return out
    return run


def matmul_scenarios() -> list:
    out = []
    for m, k, n, quick in [(8, 16, 4, True), (1024, 1024, 1024, True),
                           (2048, 2048, 2048, False)]:
        label = "8x16@16x4" if m == 8 else f"{m}^2"
        block_bytes = (m // 4) * (k // 2) * 4
        out.append(Scenario(f"matmul_basic {label}", "matmul_basic", m, label, 8,
                            functools.partial(_matmul_build, m, k, n),
                            functools.partial(_matmul_bound, m, k, n), quick=quick,
                            big_blocks=block_bytes >= 1 << 20))
    return out


# --- collectives ----------------------------------------------------------------------------------

COLLECTIVES = ("psum", "pmax", "all_gather", "psum_scatter", "ppermute", "all_to_all")


def _collective_body(name, api: Api):
    lax = api.lax
    shift = [(k, (k + 1) % 8) for k in range(8)]
    return {
        "psum": (lambda x: lax.psum(x, "i"), False),
        "pmax": (lambda x: lax.pmax(x, "i"), False),
        "all_gather": (lambda x: lax.all_gather(x, "i", tiled=True), True),
        "psum_scatter": (lambda x: lax.psum_scatter(x, "i", tiled=True), True),
        "ppermute": (lambda x: lax.ppermute(x, "i", shift), True),
        "all_to_all": (lambda x: lax.all_to_all(x, "i", 0, 0, tiled=True), True),
    }[name]


def _collective_build(name, size, api: Api):
    mesh = api.mesh((8,), ("i",))
    P = api.P
    body, varying = _collective_body(name, api)
    fn = api.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i") if varying else P())
    x = _f32(_rng(2), 8 * size)
    return fn, (api.place(x, mesh, P("i")),)


def _collective_bound(name, size):
    blocks = list(_f32(_rng(2), 8 * size).reshape(8, size))
    shift = {(k + 1) % 8: k for k in range(8)}          # destination -> source

    def psum():
        return [functools.reduce(np.add, blocks)] * 8

    def pmax():
        return [functools.reduce(np.maximum, blocks)] * 8

    def all_gather():
        return [np.concatenate(blocks)] * 8

    def psum_scatter():
        return np.split(functools.reduce(np.add, blocks), 8)

    def ppermute():
        # every block moves once, to the device after it (shardc's result aliases instead)
        return [blocks[shift[d]].copy() for d in range(8)]

    def all_to_all():
        chunks = [np.split(b, 8) for b in blocks]
        return [np.concatenate([chunks[s][d] for s in range(8)]) for d in range(8)]

    return locals()[name]


def collective_scenarios() -> list:
    out = []
    for log2 in (16, 20):
        size = 1 << log2
        for name in COLLECTIVES:
            quick = log2 == 16 and name in ("psum", "all_gather", "ppermute")
            out.append(Scenario(f"{name} 2^{log2}", "collective", size * 4, f"2^{log2} f32", 8,
                                functools.partial(_collective_build, name, size),
                                functools.partial(_collective_bound, name, size), quick=quick,
                                big_blocks=size * 4 >= 1 << 20))
    return out


# --- a data-parallel MLP training step ------------------------------------------------------------

MLP_WIDTHS = (512, 512, 10)
MLP_BATCH = 256


def _mlp_params(rng):
    return [(_f32(rng, m, n) / np.float32(np.sqrt(m)), np.zeros(n, np.float32))
            for m, n in zip(MLP_WIDTHS[:-1], MLP_WIDTHS[1:])]


def _mlp_build(api: Api):
    mesh = api.mesh((8,), ("batch",))
    P, jnp, lax = api.P, api.jnp, api.lax
    rng = _rng(3)
    params = _mlp_params(rng)
    batch = (_f32(rng, MLP_BATCH, MLP_WIDTHS[0]), _f32(rng, MLP_BATCH, MLP_WIDTHS[-1]))

    def loss(params, inputs, targets):
        x = inputs
        for k, (w, b) in enumerate(params):
            x = jnp.dot(x, w) + b
            if k + 1 < len(params):
                x = jnp.maximum(x, 0.0)
        return jnp.mean(jnp.sum((x - targets) ** 2, axis=-1))

    @functools.partial(api.shard_map, mesh=mesh, in_specs=(P(), P("batch"), P("batch")),
                       out_specs=(P(), P()))
    def train_step(params, inputs, targets):
        value, grads = api.value_and_grad(loss)(params, inputs, targets)
        grads = lax.pmean(grads, "batch")
        new = [(w - 0.01 * dw, b - 0.01 * db) for (w, b), (dw, db) in zip(params, grads)]
        return lax.pmean(value, "batch"), new

    placed = [(api.place(w, mesh, P()), api.place(b, mesh, P())) for w, b in params]
    return train_step, (placed, api.place(batch[0], mesh, P("batch")),
                        api.place(batch[1], mesh, P("batch")))


def _mlp_bound():
    rng = _rng(3)
    params = _mlp_params(rng)
    inputs, targets = _f32(rng, MLP_BATCH, MLP_WIDTHS[0]), _f32(rng, MLP_BATCH, MLP_WIDTHS[-1])
    per = MLP_BATCH // 8
    blocks = [(inputs[d * per:(d + 1) * per], targets[d * per:(d + 1) * per]) for d in range(8)]
    (w1, b1), (w2, b2) = params

    def device_grads(x, t):
        h = x @ w1 + b1
        a = np.maximum(h, 0)
        y = a @ w2 + b2
        r = y - t
        value = np.mean(np.sum(r * r, axis=-1))
        dy = 2 * r / per
        dw2, db2 = a.T @ dy, dy.sum(0)
        dh = (dy @ w2.T) * (h > 0)
        return value, [x.T @ dh, dh.sum(0), dw2, db2]

    def run():
        results = [device_grads(x, t) for x, t in blocks]
        value = functools.reduce(np.add, [v for v, _ in results]) / 8
        # the gradient of replicated parameters is the sum over devices (its pmean in the
        # program averages eight equal copies of it)
        grads = [functools.reduce(np.add, [g[j] for _, g in results]) for j in range(4)]
        new = [w1 - 0.01 * grads[0], b1 - 0.01 * grads[1], w2 - 0.01 * grads[2],
               b2 - 0.01 * grads[3]]
        return value, new
    return run


def mlp_scenarios() -> list:
    return [Scenario("mlp_step 256x512-512-10", "mlp_step", MLP_BATCH, "batch 256", 8,
                     _mlp_build, _mlp_bound, quick=True)]


# --- program size ---------------------------------------------------------------------------------

def _program_build(reps, api: Api):
    mesh = api.mesh((8,), ("i",))
    P, jnp = api.P, api.jnp

    def body(x):
        for _ in range(reps):
            x = jnp.sin(x) * 1.0001 + 0.1
        return x

    fn = api.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
    return fn, (api.place(_f32(_rng(4), 64, 8), mesh, P("i")),)


def _program_bound(reps):
    blocks = list(_f32(_rng(4), 64, 8).reshape(8, 8, 8))

    def run():
        out = []
        for x in blocks:
            for _ in range(reps):
                x = np.sin(x) * np.float32(1.0001) + np.float32(0.1)
            out.append(x)
        return out
    return run


def program_scenarios() -> list:
    # JAX's eager shard_map of these takes a minute (200) to five (1000) a call: not measured
    return [Scenario(f"program_size {reps} reps", "program_size", reps, f"{reps} reps", 8,
                     functools.partial(_program_build, reps),
                     functools.partial(_program_bound, reps), quick=reps == 200, eager=False)
            for reps in (200, 1000)]


# --- mesh scaling ---------------------------------------------------------------------------------

SCALING_BLOCK = (16, 64)


def _scaling_build(n, api: Api):
    mesh = api.mesh((n,), ("i",))
    P, jnp, lax = api.P, api.jnp, api.lax
    rng = _rng(5)
    x = _f32(rng, n * SCALING_BLOCK[0], SCALING_BLOCK[1])
    w = _f32(rng, SCALING_BLOCK[1], SCALING_BLOCK[1])

    @functools.partial(api.shard_map, mesh=mesh, in_specs=(P("i"), P()), out_specs=P())
    def psum_matmul(x_block, w):
        return lax.psum(jnp.dot(x_block, w), "i")

    return psum_matmul, (api.place(x, mesh, P("i")), api.place(w, mesh, P()))


def _scaling_bound(n):
    rng = _rng(5)
    x = _f32(rng, n * SCALING_BLOCK[0], SCALING_BLOCK[1])
    w = _f32(rng, SCALING_BLOCK[1], SCALING_BLOCK[1])
    blocks = list(x.reshape(n, *SCALING_BLOCK))

    def run():
        return [functools.reduce(np.add, [b @ w for b in blocks])] * n
    return run


def scaling_scenarios() -> list:
    return [Scenario(f"mesh_scaling {n} devices", "mesh_scaling", n, f"{n} devices", n,
                     functools.partial(_scaling_build, n), functools.partial(_scaling_bound, n),
                     quick=n <= 64, eager=True)
            for n in (8, 64, 512)]


def all_scenarios() -> list:
    return (matmul_scenarios() + collective_scenarios() + mlp_scenarios()
            + program_scenarios() + scaling_scenarios())


def by_name(name: str) -> Scenario:
    for s in all_scenarios():
        if s.name == name:
            return s
    raise KeyError(name)
