"""Property tests of explicit-mode sharding ("sharding in types", JAX 0.10).

Random programs of 2-6 steps on the four 8-device meshes -- (8,) ('a',), (2, 4) and (4, 2)
('x', 'y'), (2, 2, 2) ('x', 'y', 'z'), every axis Explicit -- over arrays laid out by random
specs (per dimension None, one axis or a tuple of axes): elementwise unary operations, binary
operations with broadcasting (against another input, a numpy constant or a scalar), sum / max
/ mean over one axis or all, transposes, reshapes that merge two adjacent dimensions or split
one, 2-D dot / matmul, reshards to random specs, concatenation with itself and cumsum. Each
program runs eagerly and under ``jit`` (which returns every intermediate), and every
intermediate result is held against:

- its values: the same program in float64 numpy;
- its type: ``str(jax.typeof(r))`` and ``jax.typeof(r).sharding`` are what JAX's rules give,
  from a model of those rules written here (JAX 0.10.2's rules as its sources state them;
  reshape's as ``jax/_src/lax/lax.py`` has it);
- its layout: ``r.sharding`` is the type's spec on the concrete mesh, and every shard holds the
  block of the value that this spec puts on its device;
- the other run: eager and jit give the same types and, bit for bit, the same values.

Where JAX's rules refuse (disagreeing splits in a binary operation, a contraction split on
both sides, an unsupported reshape, cumsum over a split axis) shardc must raise
``ShardingTypeError`` -- a ``TypeError`` in shardc -- with JAX's message, and the program goes
on as a user would: a reshard, or ``out_sharding=``. Literal rows of the reference's tables
anchor the model to JAX's probed outputs.

Gradients: ``grad(lambda a: jnp.sum(f(a)))`` for ``f`` built from elementwise operations and
reductions has exactly its argument's type, eagerly and under ``jit``, and equals the gradient
of the same function on an unsplit copy outside any mesh and central differences in float64.

Tolerances: values start in [-1, 1]; a result is held to rtol 1e-5 and atol 1e-5 times a bound
on the magnitudes its float32 computation went through (1 unless sums, products or
contractions grew them), so that rounding is never mistaken for a wrong block.
"""
from __future__ import annotations

import math
import operator
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

try:
    import shardc as jax
except ImportError:  # run from elsewhere than the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import shardc as jax

import shardc.numpy as jnp
from shardc.sharding import NamedSharding, PartitionSpec as P

ShardingTypeError = jax.sharding.ShardingTypeError

SETTINGS = dict(derandomize=True, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

MESHES = [jax.make_mesh(shape, names) for shape, names in
          [((8,), ("a",)), ((2, 4), ("x", "y")), ((4, 2), ("x", "y")),
           ((2, 2, 2), ("x", "y", "z"))]]
MAX_SIZE = 1024          # elements of any value in a program


# --- types in the model ----------------------------------------------------------------------------
# A spec is one tuple of mesh axis names per dimension, () for an unsplit one.

def entry(names: tuple):
    """A spec entry as JAX writes it: None, a name, or a tuple of names."""
    return None if not names else names[0] if len(names) == 1 else tuple(names)


def to_p(spec) -> P:
    return P(*(entry(names) for names in spec))


def partitions(spec) -> tuple:
    """The spec as JAX prints it in messages: a tuple of entries."""
    return tuple(entry(names) for names in spec)


def type_str(shape, spec, short=False) -> str:
    """``float32[8@x,4@(y,z)]`` (``f32[...]`` with ``short``), as ``str(jax.typeof(v))``."""
    dims = [str(n) if not names else f"{n}@{names[0]}" if len(names) == 1
            else f"{n}@({','.join(names)})" for n, names in zip(shape, spec)]
    return f"{'f32' if short else 'float32'}[{','.join(dims)}]"


def duplicated(spec) -> bool:
    axes = [a for names in spec for a in names]
    return len(axes) != len(set(axes))


class Refusal(Exception):
    """JAX's rules refuse the operation with ``message`` (a ShardingTypeError in JAX).

    ``loose``, where set, is a pattern the message is held to instead: shardc's text for an
    illegally split broadcast names the operands broadcast to the result's shape, JAX's only
    rank-promoted (see test_..._names_the_operands_as_jax_does)."""

    def __init__(self, message: str, loose: str | None = None):
        super().__init__(message)
        self.message = message
        self.loose = loose


def broadcast_rule(prim, operands):
    """``lax.broadcasting_sharding_rule`` after jnp's rank promotion: the result's shape and
    spec for array operands ``(shape, spec)`` (a numpy constant's spec is all unsplit)."""
    rank = max(len(shape) for shape, _ in operands)
    padded = [((1,) * (rank - len(shape)) + tuple(shape), ((),) * (rank - len(spec)) + spec)
              for shape, spec in operands]
    out_shape = tuple(max(dims) for dims in zip(*(shape for shape, _ in padded)))
    out_spec = []
    for d in range(rank):
        ss = [spec[d] for _, spec in padded]
        sizes = [shape[d] for shape, _ in padded]
        if all(s == ss[0] for s in ss):
            out_spec.append(ss[0])
            continue
        kept = [s for s, n in zip(ss, sizes) if not (n == 1 and not s)]
        if not kept or all(s == kept[0] for s in kept):
            out_spec.append(kept[0] if kept else ())
            continue
        chosen = ()
        for s in ss:
            if s and not chosen:
                chosen = s
            elif s and s != chosen:
                raise Refusal(f"{prim} got incompatible shardings for broadcasting: "
                              + ", ".join(str(partitions(spec)) for _, spec in padded) + ".")
        out_spec.append(chosen)
    out_spec = tuple(out_spec)
    if duplicated(out_spec):
        ins = ", ".join(type_str(shape, spec, short=True) for shape, spec in padded)
        out = type_str(out_shape, out_spec, short=True)
        loose = None
        if any(shape != out_shape for shape, _ in padded):
            loose = (rf"{prim} operation with inputs: f32\[[^]]*\], f32\[[^]]*\] produces an "
                     rf"illegally sharded result: {re.escape(out)}")
        raise Refusal(f"{prim} operation with inputs: {ins} produces an illegally sharded "
                      f"result: {out}", loose)
    return out_shape, out_spec


def dot_rule(lhs, rhs, out_spec=None):
    """``lax._dot_general_sharding_rule`` for a 2-D ``lhs @ rhs``: ``(shape, spec)`` each."""
    (n, _), (a0, a1) = lhs
    (_, m), (b0, b1) = rhs
    if out_spec is not None:
        return out_spec
    lc, rc = (entry(a1),), (entry(b0),)
    if a1 and b0 and a1 != b0:
        raise Refusal("dot_general requires contracting dimensions to have consistent "
                      f"sharding, got {lc} and {rc}.")
    if a1 and b0:
        raise Refusal("Contracting dimensions are sharded and it is ambiguous how the output "
                      "should be sharded. Please specify the output sharding via the "
                      f"`out_sharding` parameter. Got lhs_contracting_spec={lc} and "
                      f"rhs_contracting_spec={rc}")
    spec = (a0, b1)
    if duplicated(spec):
        raise Refusal(f"dot_general operation with inputs: {type_str(*lhs, short=True)}, "
                      f"{type_str(*rhs, short=True)} produces an illegally sharded result: "
                      f"{type_str((n, m), spec, short=True)}")
    return spec


def cumsum_rule(shape, spec, axis):
    """``loops._cumred_sharding_rule``: the axis must be unsplit."""
    if spec[axis]:
        raise Refusal("Input should be unsharded over the axis being reduced. Got input "
                      f"type={type_str(shape, spec)} and axis={axis}")
    return spec


class _NotOneSplit(Exception):
    pass


def _split_on_one_axis(op_shape, new_sizes):
    """Port of ``lax._split_on_one_axis``: whether ``new_sizes`` splits one dimension of
    ``op_shape`` (the others passing through), and the split as a list per old dimension."""
    if len(new_sizes) <= len(op_shape):
        return False, []
    orig_op_shape = op_shape
    num_1s = 0
    while op_shape[-1] == 1 and new_sizes[-1] == 1:
        num_1s += 1
        op_shape, new_sizes = op_shape[:-1], new_sizes[:-1]
    i, j, count, out = 0, 0, 0, []
    while j < len(new_sizes):
        if op_shape[i] == new_sizes[j]:
            out.append(op_shape[i])
        else:
            count += 1
            if count > 1:
                raise _NotOneSplit()
            temp = [new_sizes[j]]
            next_j, next_i = j + 1, i + 1
            while (math.prod(temp) != op_shape[i]
                   or (next_j < len(new_sizes) and new_sizes[next_j] == 1)):
                if math.prod(temp) > op_shape[i]:
                    return False, []
                if (math.prod(temp) == op_shape[i] and next_i < len(op_shape)
                        and new_sizes[next_j] == op_shape[next_i]):
                    break
                j += 1
                if j >= len(new_sizes):
                    return False, []
                temp.append(new_sizes[j])
                next_j += 1
            out.append(temp)
        i += 1
        j += 1
    out.extend([1] * num_1s)
    assert len(orig_op_shape) == len(out)
    return True, out


def reshape_rule(sizes: dict, shape, spec, new_shape):
    """Port of ``lax._reshape_sharding_rule`` (no ``out_sharding``, no ``dimensions``)."""
    shape, new_shape = tuple(shape), tuple(new_shape)
    refusal = Refusal("This reshape is not supported. Please specify the sharding of the output "
                      "via the `out_sharding` argument of jax.lax.reshape. Got operand type: "
                      f"{type_str(shape, spec)}, new sizes: {new_shape}")
    if not any(spec):
        return ((),) * len(new_shape)
    if [n for n in shape if n != 1] == [n for n in new_shape if n != 1]:
        kept = iter(s for n, s in zip(shape, spec) if n != 1)
        return tuple(() if n == 1 else next(kept) for n in new_shape)

    def split_partitions(axes, pieces):
        axes, out = iter(axes), []
        for o in pieces:
            names = []
            while o > 1:
                a = next(axes, None)
                if a is None:
                    break
                o, remainder = divmod(o, sizes[a])
                if remainder:
                    raise refusal
                names.append(a)
            out.append(tuple(names))
        assert next(axes, None) is None
        return out

    try:
        is_split, split = _split_on_one_axis(shape, new_shape)
    except _NotOneSplit:
        raise refusal from None
    if is_split:
        out = []
        for pieces, names in zip(split, spec):
            if not isinstance(pieces, list):
                out.append(names)
            elif not names:
                out.extend([()] * len(pieces))
            else:
                out.extend(split_partitions(names, pieces))
        return tuple(out)
    try:
        is_merge, merge = _split_on_one_axis(new_shape, shape)
    except _NotOneSplit:
        raise refusal from None
    if not is_merge:
        raise refusal
    out, old = [], iter(spec)
    for n, pieces in zip(new_shape, merge):
        if not isinstance(pieces, list):
            out.append(next(old))
            continue
        run = [next(old) for _ in pieces]
        if not any(run):
            out.append(())
            continue
        flat = [a for names in run for a in (names or (None,))]
        while flat[-1] is None:
            flat.pop()
        if None in flat:
            raise refusal
        out.extend(split_partitions(flat, [n]))
    return tuple(out)


# --- the model of one value ------------------------------------------------------------------------

@dataclass
class Node:
    """What a value must be: float64 values, the type's spec, and ``scale``, a bound on the
    magnitudes its float32 computation went through (its rounding is a few epsilons of it)."""
    ref: np.ndarray
    spec: tuple
    scale: float = 1.0

    @property
    def shape(self):
        return self.ref.shape

    def then(self, ref, spec, scale=None):
        ref = np.asarray(ref, np.float64)
        bound = max(self.scale, float(np.abs(ref).max(initial=0.0)))
        return Node(ref, tuple(spec), max(bound, scale or 0.0))


def assert_is(r, node: Node, mesh):
    """``r`` has the node's values, shape, dtype and type, and is laid out as its type says."""
    assert isinstance(r, jax.Array), type(r)
    assert r.shape == node.shape and r.dtype == np.float32, (r.shape, r.dtype)
    got = np.asarray(r)
    assert got.shape == node.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, node.ref, rtol=1e-5, atol=1e-5 * node.scale)
    want = to_p(node.spec)
    typ = jax.typeof(r)
    assert str(typ) == type_str(node.shape, node.spec)
    assert typ.sharding.spec == want                       # normalised to the rank
    assert typ.sharding == NamedSharding(mesh.abstract_mesh, want)
    assert r.sharding == NamedSharding(mesh, want)
    assert r.sharding.mesh == mesh
    assert r.sharding.spec == want                         # computed results: normalised too
    assert_blocks(r, got, mesh, node.spec)


def assert_blocks(r, got, mesh, spec):
    """Each device holds the block of ``got`` that ``spec`` puts at its mesh coordinates."""
    sizes = dict(zip(mesh.axis_names, mesh.devices.shape))
    where = {d.id: dict(zip(mesh.axis_names, c)) for c, d in np.ndenumerate(mesh.devices)}
    shards = r.addressable_shards
    assert sorted(s.device.id for s in shards) == sorted(where)
    for shard in shards:
        coords = where[shard.device.id]
        index = []
        for n, names in zip(got.shape, spec):
            rank = 0
            for a in names:
                rank = rank * sizes[a] + coords[a]
            block = n // math.prod(sizes[a] for a in names)
            index.append((rank * block, (rank + 1) * block))
        assert [s.indices(n)[:2] for s, n in zip(shard.index, got.shape)] == index
        np.testing.assert_array_equal(np.asarray(shard.data),
                                      got[tuple(slice(*i) for i in index)])


def refused(refusal: Refusal, thunk):
    """``thunk()`` raises JAX's ShardingTypeError (a TypeError in shardc) with its message."""
    with pytest.raises(ShardingTypeError) as info:
        thunk()
    assert isinstance(info.value, TypeError)
    if refusal.loose is None:
        assert str(info.value) == refusal.message
    else:
        assert re.fullmatch(refusal.loose, str(info.value)), (str(info.value), refusal.loose)


def eager_and_jitted(mesh, f, operands, error):
    """``f`` on ``operands`` ((value, spec) pairs) laid out on ``mesh``, eagerly and under jit:
    both raise ``error`` when it is given (None is returned), else both results."""
    with jax.set_mesh(mesh):
        args = [jax.device_put(value, to_p(spec)) for value, spec in operands]
        if error is not None:
            refused(error, lambda: f(*args))
            refused(error, lambda: jax.jit(f)(*args))
            return None
        return f(*args), jax.jit(f)(*args)


# --- strategies ------------------------------------------------------------------------------------

@st.composite
def specs_for(draw, mesh, shape):
    """A spec for ``shape``: per dimension unsplit, one axis or a tuple of axes, each mesh axis
    at most once, every dimension divisible by its axes' sizes."""
    sizes = dict(zip(mesh.axis_names, mesh.devices.shape))
    free = list(draw(st.permutations(mesh.axis_names)))
    spec = []
    for n in shape:
        kind = pick(draw, ["none", "one", "one", "tuple"])
        names = ()
        if kind != "none":
            fits = [a for a in free if n % sizes[a] == 0]
            if fits:
                names = (pick(draw, fits),)
            if kind == "tuple":
                while True:
                    more = [a for a in free if a not in names
                            and n % math.prod(sizes[b] for b in names + (a,)) == 0]
                    if not more or not draw(st.booleans()) and len(names) > 1:
                        break
                    names += (pick(draw, more),)
        free = [a for a in free if a not in names]
        spec.append(names)
    return tuple(spec)


def pick(draw, options):
    """One of ``options``, about evenly (``sampled_from`` draws the first ones far more often
    in short runs); shrinks towards the first."""
    return options[draw(st.integers(0, 2**16 - 1)) % len(options)]


def values(draw, shape):
    """Random float32 values in [-1, 1] (distinct, so max has one argmax)."""
    seed = draw(st.integers(0, 2**32 - 1))
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


@st.composite
def input_shapes(draw):
    rank = pick(draw, [1, 2, 3])
    dims = [2, 4, 8, 16] if rank < 3 else [2, 4, 8]
    return tuple(pick(draw, dims) for _ in range(rank))


def power_of_two_below(bound: float) -> float:
    """A power of two ``c`` with ``c * bound <= 1``, exact in float32."""
    return 2.0 ** -math.ceil(math.log2(max(1.0, bound)))


# --- program steps: each one's shardc code, drawn together with the model's result -----------------

class Program:
    """A mesh, the inputs (the first one the value the steps start from, the others operands
    of binary steps and dots) and the steps with the model's value after each."""

    def __init__(self, mesh):
        self.mesh = mesh
        self.sizes = dict(zip(mesh.axis_names, mesh.devices.shape))
        self.inputs = []          # (float32 numpy values, spec)
        self.steps = []
        self.nodes = []           # the model's value after each step

    def __repr__(self):
        inputs = ", ".join(type_str(v.shape, spec) for v, spec in self.inputs)
        return (f"Program({self.mesh!r}, inputs: {inputs},\n  steps: {self.steps})")

    def add_input(self, value, spec) -> int:
        self.inputs.append((value, spec))
        return len(self.inputs) - 1

    def run(self, args):
        """The program on shardc arrays: every intermediate, in order."""
        x, outs = args[0], []
        for step in self.steps:
            x = step.run(x, args)
            outs.append(x)
        return tuple(outs)


UNARY = {"sin": (jnp.sin, np.sin), "exp": (jnp.exp, np.exp),
         "neg": (operator.neg, operator.neg), "double": (lambda v: v * 2, lambda v: v * 2)}

BINARY = {"add": (operator.add, np.add, "add"), "sub": (operator.sub, np.subtract, "sub"),
          "mul": (operator.mul, np.multiply, "mul"), "maximum": (jnp.maximum, np.maximum, "max")}


@dataclass
class Unary:
    op: str
    factor: float = 1.0           # exp's argument is scaled into [-1, 1]

    def run(self, x, args):
        return UNARY[self.op][0](x * self.factor if self.op == "exp" else x)

    @staticmethod
    @st.composite
    def draw(draw, prog, node):
        op = pick(draw, sorted(UNARY))
        factor = power_of_two_below(np.abs(node.ref).max(initial=0.0)) if op == "exp" else 1.0
        ref = UNARY[op][1](node.ref * factor if op == "exp" else node.ref)
        scale = np.abs(ref).max(initial=0.0) * max(1.0, factor * node.scale)
        return Unary(op, factor), node.then(ref, node.spec, scale)


@dataclass
class Binary:
    op: str
    kind: str                     # "input" (an argument's index), "constant" (numpy), "scalar"
    operand: object
    swap: bool                    # the operand on the left
    error: Refusal | None = None  # JAX's refusal; then the operand is resharded to P()

    def run(self, x, args):
        f = BINARY[self.op][0]
        y = args[self.operand] if self.kind == "input" else self.operand
        if self.error is not None:
            refused(self.error, lambda: f(y, x) if self.swap else f(x, y))
            y = jax.sharding.reshard(y, P())
        return f(y, x) if self.swap else f(x, y)

    @staticmethod
    @st.composite
    def draw(draw, prog, node):
        op = pick(draw, sorted(BINARY))
        kind = pick(draw, ["input", "input", "constant", "scalar"])
        swap = draw(st.booleans())
        _, ref_op, prim = BINARY[op]
        shape, spec, error = node.shape, node.spec, None
        if kind == "scalar":
            operand = y = pick(draw, [0.5, -1.5, 3.0])
        else:
            yshape = draw(operand_shapes(node.shape))
            y = values(draw, yshape)
            yspec = ((),) * len(yshape)                       # a numpy constant's
            operand = y
            if kind == "input":
                agree = pick(draw, [True, False])
                yspec = draw(agreeing_specs(node, yshape) if agree
                             else specs_for(prog.mesh, yshape))
                operand = prog.add_input(y, yspec)
            operands = [(node.shape, node.spec), (yshape, yspec)]
            try:
                shape, spec = broadcast_rule(prim, operands[::-1] if swap else operands)
            except Refusal as refusal:                        # then y is resharded to P()
                error = refusal
                shape, spec = broadcast_rule(prim, [(node.shape, node.spec),
                                                    (yshape, ((),) * len(yshape))])
        ref = ref_op(y, node.ref) if swap else ref_op(node.ref, y)
        step = Binary(op, kind, operand, swap, error)
        return step, node.then(ref, spec, 3 * node.scale)


@st.composite
def operand_shapes(draw, shape):
    """A shape broadcasting against ``shape`` (ranks one apart at most), the result small."""
    rank = len(shape)
    ndim = draw(st.integers(max(1, rank - 1), min(3, rank + 1)))
    dims = []
    for i in range(ndim):
        j = i - (ndim - rank)
        if j < 0:
            dims.append(pick(draw, [1, 2, 4]))
        elif shape[j] == 1:
            dims.append(pick(draw, [1, 2, 4, 8]))
        else:
            dims.append(pick(draw, [shape[j], shape[j], 1]))
    out = np.broadcast_shapes(tuple(dims), shape)
    if math.prod(out) > MAX_SIZE:
        return shape[rank - ndim:] if ndim <= rank else (1,) + shape
    return tuple(dims)


@st.composite
def agreeing_specs(draw, node, shape):
    """A spec for an operand of ``shape`` that splits only as ``node`` does."""
    offset = len(shape) - len(node.shape)
    spec = []
    for i, n in enumerate(shape):
        j = i - offset
        same = j >= 0 and n == node.shape[j] and n > 1
        spec.append(pick(draw, [(), node.spec[j]]) if same else ())
    return tuple(spec)


@dataclass
class Reduce:
    op: str
    axis: int | None
    keepdims: bool

    def run(self, x, args):
        return getattr(jnp, self.op)(x, axis=self.axis, keepdims=self.keepdims)

    @staticmethod
    @st.composite
    def draw(draw, prog, node):
        op = pick(draw, ["sum", "max", "mean"])
        ndim = len(node.shape)
        axis = draw(st.one_of(st.none(), st.integers(0, ndim - 1))) if ndim else None
        keepdims = draw(st.booleans())
        axes = range(ndim) if axis is None else [axis]
        if keepdims:
            spec = tuple(() if d in axes else s for d, s in enumerate(node.spec))
        else:
            spec = tuple(s for d, s in enumerate(node.spec) if d not in axes)
        ref = getattr(np, op)(node.ref, axis=axis, keepdims=keepdims)
        count = math.prod(node.shape[d] for d in axes)
        scale = node.scale * (count if op == "sum" else 1)
        return Reduce(op, axis, keepdims), node.then(ref, spec, scale)


@dataclass
class Transpose:
    perm: tuple | None            # None: ``x.T``

    def run(self, x, args):
        return x.T if self.perm is None else jnp.transpose(x, self.perm)

    @staticmethod
    @st.composite
    def draw(draw, prog, node):
        ndim = len(node.shape)
        perm = draw(st.one_of(st.none(), st.permutations(range(ndim)).map(tuple)))
        order = tuple(reversed(range(ndim))) if perm is None else perm
        spec = tuple(node.spec[d] for d in order)
        return Transpose(perm), node.then(np.transpose(node.ref, order), spec)


@dataclass
class Reshape:
    shape: tuple
    method: bool                  # ``x.reshape`` or ``jnp.reshape``
    error: Refusal | None = None  # JAX's refusal; then reshard to P() first

    def run(self, x, args):
        def reshape(v):
            return v.reshape(self.shape) if self.method else jnp.reshape(v, self.shape)
        if self.error is not None:
            refused(self.error, lambda: reshape(x))
            x = jax.sharding.reshard(x, P())
        return reshape(x)

    @staticmethod
    def applies(node):
        return (bool(node.shape) and 1 not in node.shape
                and (len(node.shape) > 1 or node.shape[0] >= 4))

    @staticmethod
    @st.composite
    def draw(draw, prog, node):
        shape = list(node.shape)
        splittable = [d for d, n in enumerate(shape) if n >= 4]
        how = pick(draw, (["merge"] if len(shape) > 1 else [])
                   + (["split"] if splittable and len(shape) < 4 else []))
        if how == "merge":
            d = draw(st.integers(0, len(shape) - 2))
            shape[d:d + 2] = [shape[d] * shape[d + 1]]
        else:
            d = pick(draw, splittable)
            a = pick(draw, [k for k in range(2, shape[d]) if shape[d] % k == 0])
            shape[d:d + 1] = [a, shape[d] // a]
        shape = tuple(shape)
        error = None
        try:
            spec = reshape_rule(prog.sizes, node.shape, node.spec, shape)
        except Refusal as refusal:
            error, spec = refusal, ((),) * len(shape)
        event(f"reshape {how} {'refused' if error else 'typed'}")
        step = Reshape(shape, draw(st.booleans()), error)
        return step, node.then(node.ref.reshape(shape), spec)


@dataclass
class Dot:
    fn: str                       # "dot", "matmul" or "@"
    operand: int
    out_spec: tuple | None
    error: Refusal | None = None  # JAX's refusal; then ``jnp.dot(..., out_sharding=fallback)``
    fallback: tuple | None = None

    def run(self, x, args):
        y = args[self.operand]

        def call(out_spec):
            if self.fn == "@":
                return x @ y
            f = jnp.dot if self.fn == "dot" else jnp.matmul
            if out_spec is None:
                return f(x, y)
            return f(x, y, out_sharding=to_p(out_spec))
        if self.error is not None:
            refused(self.error, lambda: call(self.out_spec))
            return jnp.dot(x, y, out_sharding=to_p(self.fallback))
        return call(self.out_spec)

    @staticmethod
    @st.composite
    def draw(draw, prog, node):
        n, k = node.shape
        m = pick(draw, [d for d in (2, 4, 8, 16) if d * max(n, k) <= MAX_SIZE])
        y = values(draw, (k, m))
        yspec = draw(specs_for(prog.mesh, (k, m)))
        operand = prog.add_input(y, yspec)
        fn = pick(draw, ["dot", "matmul", "@"])
        both = bool(node.spec[1]) and bool(yspec[0])
        # out_sharding mostly where the contraction is split on both sides, sometimes elsewhere
        give = fn != "@" and pick(draw, [True, True, False] if both
                                  else [True, False, False, False])
        out_spec = draw(specs_for(prog.mesh, (n, m))) if give else None
        error = fallback = None
        try:
            spec = dot_rule((node.shape, node.spec), ((k, m), yspec), out_spec)
        except Refusal as refusal:
            error, fallback = refusal, draw(specs_for(prog.mesh, (n, m)))
            spec = fallback
        event(f"dot {'refused' if error else 'out_sharding' if give else 'typed'}")
        step = Dot(fn, operand, out_spec, error, fallback)
        return step, node.then(node.ref @ y, spec, k * node.scale)


@dataclass
class Reshard:
    spec: tuple

    def run(self, x, args):
        return jax.sharding.reshard(x, to_p(self.spec))

    @staticmethod
    @st.composite
    def draw(draw, prog, node):
        spec = draw(specs_for(prog.mesh, node.shape))
        return Reshard(spec), node.then(node.ref, spec)


@dataclass
class Concatenate:
    axis: int

    def run(self, x, args):
        return jnp.concatenate([x, x], axis=self.axis)

    @staticmethod
    @st.composite
    def draw(draw, prog, node):
        axis = draw(st.integers(0, len(node.shape) - 1))
        return Concatenate(axis), node.then(np.concatenate([node.ref] * 2, axis), node.spec)


@dataclass
class Cumsum:
    axis: int
    error: Refusal | None = None  # JAX's refusal (the axis is split); then unsplit it first
    fallback: tuple | None = None

    def run(self, x, args):
        if self.error is not None:
            refused(self.error, lambda: jnp.cumsum(x, axis=self.axis))
            x = jax.sharding.reshard(x, to_p(self.fallback))
        return jnp.cumsum(x, axis=self.axis)

    @staticmethod
    @st.composite
    def draw(draw, prog, node):
        unsplit = [d for d, s in enumerate(node.spec) if not s]
        choices = unsplit * 3 + list(range(len(node.shape)))
        axis = pick(draw, choices)
        error = fallback = None
        spec = node.spec
        try:
            cumsum_rule(node.shape, node.spec, axis)
        except Refusal as refusal:
            error = refusal
            spec = fallback = tuple(() if d == axis else s for d, s in enumerate(node.spec))
        scale = node.scale * node.shape[axis]
        return Cumsum(axis, error, fallback), node.then(np.cumsum(node.ref, axis), spec, scale)


def kinds_for(node):
    """The steps that apply to a value (repeats weigh the draw)."""
    ndim, size = len(node.shape), node.ref.size
    kinds = [Unary, Binary, Binary, Reduce, Reshard]
    if ndim:
        kinds += [Transpose, Cumsum]
        if 2 * size <= MAX_SIZE:
            kinds.append(Concatenate)
    if Reshape.applies(node):
        kinds += [Reshape, Reshape]
    if ndim == 2:
        kinds += [Dot, Dot, Dot]
    return kinds


@st.composite
def programs(draw):
    prog = Program(pick(draw, MESHES))
    shape = draw(input_shapes())
    spec = draw(specs_for(prog.mesh, shape))
    x = values(draw, shape)
    prog.add_input(x, spec)
    node = Node(x.astype(np.float64), spec)
    for _ in range(draw(st.integers(2, 6))):
        kind = pick(draw, kinds_for(node))
        step, node = draw(kind.draw(prog, node))
        prog.steps.append(step)
        prog.nodes.append(node)
    return prog


def place(prog):
    """The program's inputs laid out by their specs (under the program's mesh)."""
    args = [jax.device_put(v, to_p(spec)) for v, spec in prog.inputs]
    for a, (v, spec) in zip(args, prog.inputs):
        assert_is(a, Node(v.astype(np.float64), spec), prog.mesh)
    return args


# --- the programs ----------------------------------------------------------------------------------

@settings(max_examples=1000, **SETTINGS)
@given(programs())
def test_random_programs_match_numpy_and_their_types_eagerly_and_under_jit(prog):
    """Every intermediate, eager and jitted: numpy's values, the model's type, a layout that
    is the type, and the two runs equal."""
    event(f"mesh {tuple(prog.mesh.devices.shape)}")
    for step in prog.steps:
        event(f"uses {type(step).__name__}")
        if getattr(step, "error", None):
            event(f"refused {type(step).__name__}")
    with jax.set_mesh(prog.mesh):
        args = place(prog)
        eager = prog.run(args)
        jitted = jax.jit(lambda *a: prog.run(a))(*args)
    assert len(eager) == len(jitted) == len(prog.nodes)
    for step, e, j, node in zip(prog.steps, eager, jitted, prog.nodes):
        assert_is(e, node, prog.mesh)
        assert_is(j, node, prog.mesh)
        assert str(jax.typeof(e)) == str(jax.typeof(j))
        np.testing.assert_array_equal(np.asarray(e), np.asarray(j), err_msg=repr(step))


# --- one operation at a time, more cases than programs reach ---------------------------------------

@st.composite
def binary_cases(draw):
    mesh = pick(draw, MESHES)
    shape = draw(input_shapes())
    yshape = draw(operand_shapes(shape))
    return (mesh, pick(draw, sorted(BINARY)),
            (values(draw, shape), draw(specs_for(mesh, shape))),
            (values(draw, yshape), draw(specs_for(mesh, yshape))))


@settings(max_examples=300, **SETTINGS)
@given(binary_cases())
def test_binary_operations_broadcast_splits_or_refuse_disagreeing_ones(case):
    """Two split operands of any broadcasting shapes: the merged type, or JAX's refusal."""
    mesh, op, (x, xspec), (y, yspec) = case
    f, ref_op, prim = BINARY[op]
    try:
        shape, spec = broadcast_rule(prim, [(x.shape, xspec), (y.shape, yspec)])
        error = None
    except Refusal as refusal:
        error = refusal
    event("refused" if error else "typed")
    ran = eager_and_jitted(mesh, f, [(x, xspec), (y, yspec)], error)
    if ran is None:
        return
    eager, jitted = ran
    node = Node(ref_op(x.astype(np.float64), y), spec)
    assert node.shape == shape
    assert_is(eager, node, mesh)
    assert_is(jitted, node, mesh)
    np.testing.assert_array_equal(np.asarray(eager), np.asarray(jitted))


@st.composite
def dot_cases(draw):
    mesh = pick(draw, MESHES)
    n, k, m = (pick(draw, [2, 4, 8, 16]) for _ in range(3))
    out_spec = draw(st.one_of(st.none(), specs_for(mesh, (n, m))))
    return (mesh, (values(draw, (n, k)), draw(specs_for(mesh, (n, k)))),
            (values(draw, (k, m)), draw(specs_for(mesh, (k, m)))), out_spec)


@settings(max_examples=250, **SETTINGS)
@given(dot_cases())
def test_dot_keeps_free_splits_or_asks_for_out_sharding(case):
    """JAX's rule: the free dimensions keep their splits, a contraction split on one side is
    dropped, on both sides it needs ``out_sharding``, which is then the result's type."""
    mesh, (a, aspec), (b, bspec), out_spec = case
    try:
        spec = dot_rule((a.shape, aspec), (b.shape, bspec), out_spec)
        error = None
    except Refusal as refusal:
        error = refusal
    event("refused" if error else "out_sharding" if out_spec else "typed")
    kw = {} if out_spec is None else {"out_sharding": to_p(out_spec)}
    f = lambda u, v: jnp.dot(u, v, **kw)  # noqa: E731
    ran = eager_and_jitted(mesh, f, [(a, aspec), (b, bspec)], error)
    if ran is None:
        return
    eager, jitted = ran
    node = Node(a.astype(np.float64) @ b, spec, a.shape[1])
    assert_is(eager, node, mesh)
    assert_is(jitted, node, mesh)
    np.testing.assert_array_equal(np.asarray(eager), np.asarray(jitted))


@st.composite
def reshape_cases(draw):
    prog = Program(pick(draw, MESHES))
    shape = draw(input_shapes().filter(lambda s: len(s) > 1 or s[0] >= 4))
    x = values(draw, shape)
    node = Node(x.astype(np.float64), draw(specs_for(prog.mesh, shape)))
    step, out = draw(Reshape.draw(prog, node))
    return prog.mesh, x, node, step, out


@settings(max_examples=250, **SETTINGS)
@given(reshape_cases())
def test_reshape_splits_and_merges_as_jax_or_refuses(case):
    """A reshape shardc refuses names reshape in its message, and works after
    ``reshard(x, P())``; one it types splits as JAX's rule does."""
    mesh, x, node, step, out = case
    with jax.set_mesh(mesh):
        a = jax.device_put(x, to_p(node.spec))
        eager = step.run(a, [a])
        jitted = jax.jit(lambda v: step.run(v, [v]))(a)
    if step.error is not None:
        assert "reshape" in step.error.message
    assert_is(eager, out, mesh)
    assert_is(jitted, out, mesh)
    np.testing.assert_array_equal(np.asarray(eager), np.asarray(jitted))


# --- the model against the reference's literal rows ------------------------------------------------

MESH_8, MESH_2X4, MESH_4X2, MESH_2X2X2 = MESHES


def s(*entries):
    """A model spec from P-like entries: ``s('x', None, ('y', 'z'))``."""
    return tuple(() if e is None else (e,) if isinstance(e, str) else tuple(e) for e in entries)


RESHAPE_ROWS = [      # JAX 0.10.2's reshape results (its test_reshape cases)
    (MESH_2X4, (8, 4), s("x", "y"), (32,), "float32[32@(x,y)]"),
    (MESH_2X4, (8, 4), s("x", None), (32,), "float32[32@x]"),
    (MESH_2X4, (8, 4), s(None, "y"), (32,), None),
    (MESH_2X4, (8, 4), s("x", "y"), (2, 4, 4), "float32[2@x,4,4@y]"),
    (MESH_2X4, (8, 4), s("x", "y"), (8, 2, 2), None),
    (MESH_2X4, (32,), s(("x", "y")), (2, 16), "float32[2@x,16@y]"),
    (MESH_2X4, (32,), s(("x", "y")), (4, 8), None),
    (MESH_2X4, (16,), s(("y", "x")), (4, 4), "float32[4@y,4@x]"),
    (MESH_2X4, (2, 4, 4), s("x", "y", None), (8, 4), "float32[8@(x,y),4]"),
    (MESH_4X2, (32,), s(("x", "y")), (4, 8), "float32[4@x,8@y]"),
    (MESH_4X2, (8,), s("x"), (2, 4), None),
    (MESH_2X2X2, (8,), s(("x", "y", "z")), (2, 4), "float32[2@x,4@(y,z)]"),
    (MESH_2X2X2, (4, 2), s(("x", "y"), "z"), (8,), "float32[8@(x,y,z)]"),
]


@pytest.mark.parametrize("mesh, shape, spec, new, want", RESHAPE_ROWS)
def test_reshape_rows_of_the_reference(mesh, shape, spec, new, want):
    """The model and shardc, eagerly and under jit, give the reference's probed result."""
    sizes = dict(zip(mesh.axis_names, mesh.devices.shape))
    message = (f"This reshape is not supported. Please specify the sharding of the output via "
               f"the `out_sharding` argument of jax.lax.reshape. Got operand type: "
               f"{type_str(shape, spec)}, new sizes: {new}")
    x = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    with jax.set_mesh(mesh):
        a = jax.device_put(x, to_p(spec))
        if want is None:
            with pytest.raises(Refusal, match="reshape is not supported"):
                reshape_rule(sizes, shape, spec, new)
            refused(Refusal(message), lambda: a.reshape(new))
            refused(Refusal(message), lambda: jax.jit(lambda v: v.reshape(new))(a))
            return
        assert type_str(new, reshape_rule(sizes, shape, spec, new)) == want
        assert str(jax.typeof(a.reshape(new))) == want
        assert str(jax.typeof(jax.jit(lambda v: v.reshape(new))(a))) == want


AMBIGUOUS = ("Contracting dimensions are sharded and it is ambiguous how the output should be "
             "sharded. Please specify the output sharding via the `out_sharding` parameter. "
             "Got lhs_contracting_spec=('y',) and rhs_contracting_spec=('y',)")
OPERATION_ROWS = [    # JAX 0.10.2's broadcasting and dot results, on the (2, 4) mesh
    ("dot", ((16, 16), s("x", None)), ((16, 16), s("x", None)), "float32[16@x,16]"),
    ("dot", ((16, 16), s(None, "y")), ((16, 16), s(None, "x")), "float32[16,16@x]"),
    ("dot", ((16, 16), s("x", "y")), ((16, 16), s("y", None)), AMBIGUOUS),
    ("dot", ((16, 16), s("x", "y")), ((16, 16), s("x", None)),
     "dot_general requires contracting dimensions to have consistent sharding, "
     "got ('y',) and ('x',)."),
    ("dot", ((16, 16), s("x", None)), ((16, 16), s(None, "x")),
     "dot_general operation with inputs: f32[16@x,16], f32[16,16@x] produces an illegally "
     "sharded result: f32[16@x,16@x]"),
    ("add", ((8, 8), s("x", "y")), ((8, 8), s("y", "x")),
     "add got incompatible shardings for broadcasting: ('x', 'y'), ('y', 'x')."),
    ("add", ((8, 4), s("x", None)), ((8, 4), s(None, "y")), "float32[8@x,4@y]"),
    ("add", ((8, 4), s("x", "y")), ((1, 4), s(None, "x")),
     "add got incompatible shardings for broadcasting: ('x', 'y'), (None, 'x')."),
    ("add", ((8, 4), s("x", None)), ((4,), s("x")),
     "add operation with inputs: f32[8@x,4], f32[1,4@x] produces an illegally sharded "
     "result: f32[8@x,4@x]"),
    ("add", ((4, 1), s("x", None)), ((1, 8), s(None, "x")),
     "add operation with inputs: f32[4@x,1], f32[1,8@x] produces an illegally sharded "
     "result: f32[4@x,8@x]"),
    ("add", ((8,), s("x")), ((4, 8), s("y", None)), "float32[4@y,8@x]"),
    ("add", ((8,), s("x")), ((4, 8), s(None, "y")),
     "add got incompatible shardings for broadcasting: (None, 'x'), (None, 'y')."),
    ("add", ((16, 4), s(("x", "y"), None)), ((16, 4), s(None, "y")),
     "add operation with inputs: f32[16@(x,y),4], f32[16,4@y] produces an illegally sharded "
     "result: f32[16@(x,y),4@y]"),
]


@pytest.mark.parametrize("op, lhs, rhs, want", OPERATION_ROWS)
def test_operation_rows_of_the_reference(op, lhs, rhs, want):
    """The model and shardc, eagerly and under jit, give the reference's probed result."""
    if op == "dot":
        f, rule = (lambda u, v: jnp.dot(u, v)), (lambda: ((16, 16), dot_rule(lhs, rhs)))
    else:
        f, rule = (lambda u, v: u + v), (lambda: broadcast_rule("add", [lhs, rhs]))
    try:
        got = type_str(*rule())
    except Refusal as refusal:
        got = refusal.message
    assert got == want
    with jax.set_mesh(MESH_2X4):
        a, b = (jax.device_put(np.ones(shape, np.float32), to_p(spec)) for shape, spec in
                (lhs, rhs))
        if want.startswith("float32["):
            assert str(jax.typeof(f(a, b))) == want
            assert str(jax.typeof(jax.jit(f)(a, b))) == want
        else:
            refused(Refusal(want), lambda: f(a, b))
            refused(Refusal(want), lambda: jax.jit(f)(a, b))


@pytest.mark.parametrize("make", ["device_put", "computed", "jit"])
def test_the_type_of_a_replicated_value_is_on_the_abstract_mesh(make):
    """JAX 0.10.2: ``typeof(v).sharding`` is a NamedSharding on the abstract
    mesh with the spec normalised to the rank, split or not."""
    x = np.ones((8, 4), np.float32)
    with jax.set_mesh(MESH_2X4):
        v = {"device_put": lambda: jax.device_put(x, P()),
             "computed": lambda: jnp.sin(jax.sharding.reshard(jax.device_put(x, P("x")), P())),
             "jit": lambda: jax.jit(lambda a: a * 2)(jax.device_put(x, P()))}[make]()
    assert str(jax.typeof(v)) == "float32[8,4]"
    assert isinstance(jax.typeof(v).sharding.mesh, type(MESH_2X4.abstract_mesh))
    assert jax.typeof(v).sharding == NamedSharding(MESH_2X4.abstract_mesh, P(None, None))
    assert jax.typeof(v).sharding.spec == P(None, None)


@pytest.mark.parametrize("mesh, spec", [(MESH_2X4, P("x", "y")), (MESH_8, P(None, "a"))])
def test_jit_of_a_broadcast_constant_beside_an_argument(mesh, spec):
    """The first program these properties found failing: under jit the closed-over constant
    and the arguments reached the partitioned program with their layouts out of order."""
    n = mesh.devices.shape[-1]
    c = np.arange(n, dtype=np.float32)
    x = np.arange(8 * n, dtype=np.float32).reshape(8, n)
    with jax.set_mesh(mesh):
        a = jax.device_put(x, spec)
        b = jax.device_put(np.ones(n, np.float32), P())
        f = lambda u, v: (u + v) * c  # noqa: E731
        eager = f(a, b)
        np.testing.assert_array_equal(np.asarray(eager), (x + 1) * c)
        jitted = jax.jit(f)(a, b)
    np.testing.assert_array_equal(np.asarray(jitted), (x + 1) * c)
    assert str(jax.typeof(jitted)) == str(jax.typeof(eager))


# --- gradients -------------------------------------------------------------------------------------

GRAD_OPS = ["max", "sin", "sum", "exp", "mean", "tanh", "center", "neg", "square", "double"]


def apply_steps(ns, steps, a):
    """``f(a)`` with ``ns`` either ``shardc.numpy`` or ``numpy``."""
    for op, axis, keepdims, factor in steps:
        if op in ("sin", "tanh"):
            a = getattr(ns, op)(a)
        elif op == "exp":
            a = ns.exp(a * factor)
        elif op == "neg":
            a = -a
        elif op == "double":
            a = a * 2
        elif op == "square":
            a = a * a
        elif op == "center":
            a = a - ns.mean(a, axis=axis, keepdims=True)
        else:
            a = getattr(ns, op)(a, axis=axis, keepdims=keepdims)
    return a


@st.composite
def differentiable(draw):
    mesh = pick(draw, MESHES)
    shape = draw(input_shapes())
    spec = draw(specs_for(mesh, shape))
    x = values(draw, shape)
    steps, ref = [], x.astype(np.float64)
    for _ in range(draw(st.integers(1, 4))):
        op = pick(draw, GRAD_OPS)
        axis = draw(st.one_of(st.none(), st.integers(0, ref.ndim - 1))) if ref.ndim else None
        factor = power_of_two_below(np.abs(ref).max(initial=0.0))
        steps.append((op, axis, draw(st.booleans()), factor))
        ref = apply_steps(np, steps[-1:], ref)
    coords = [tuple(draw(st.integers(0, n - 1)) for n in shape) for _ in range(3)]
    return mesh, x, spec, steps, coords


@settings(max_examples=300, **SETTINGS)
@given(differentiable())
def test_gradients_have_the_argument_type_and_the_unsplit_values(case):
    """``grad`` of a sum of elementwise steps and reductions: the argument's exact type and
    layout, eagerly and under jit; the values of the unsplit gradient and of central
    differences in float64 at three coordinates."""
    mesh, x, spec, steps, coords = case
    for op, *_ in steps:
        event(f"uses {op}")

    def loss(a):
        return jnp.sum(apply_steps(jnp, steps, a))

    with jax.set_mesh(mesh):
        a = jax.device_put(x, to_p(spec))
        value, grad = jax.value_and_grad(loss)(a)
        jitted = jax.jit(jax.grad(loss))(a)
    unsplit = jax.grad(loss)(x)                    # no mesh: the same function, unsplit
    assert str(jax.typeof(value)) == "float32[]"
    want = str(jax.typeof(a))
    assert want == type_str(x.shape, spec)
    for g in (grad, jitted):
        assert str(jax.typeof(g)) == want
        assert jax.typeof(g).sharding == jax.typeof(a).sharding
        assert g.sharding == a.sharding
        assert g.shape == x.shape and g.dtype == np.float32
        assert_blocks(g, np.asarray(g), mesh, spec)
    np.testing.assert_array_equal(np.asarray(grad), np.asarray(jitted))
    assert str(jax.typeof(unsplit)) == type_str(x.shape, ((),) * x.ndim)
    np.testing.assert_allclose(np.asarray(grad), np.asarray(unsplit), rtol=1e-5, atol=1e-5)

    def f64(v):
        return float(np.sum(apply_steps(np, steps, v)))

    x64 = x.astype(np.float64)
    np.testing.assert_allclose(float(value), f64(x64), rtol=1e-5, atol=1e-5 * x.size)
    eps = 1e-6
    for c in coords:
        up, down = x64.copy(), x64.copy()
        up[c] += eps
        down[c] -= eps
        fd = (f64(up) - f64(down)) / (2 * eps)
        np.testing.assert_allclose(float(np.asarray(grad)[c]), fd, rtol=1e-4, atol=1e-4,
                                   err_msg=f"d/dx{c}")
