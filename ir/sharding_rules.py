"""Sharding in types (JAX's explicit mode): how each primitive's results are split, from its
operands' types.

A value's type says how it is split over the mesh's Explicit axes (``Aval.sharding``: per
dimension the axes, major to minor). Each primitive has a rule here, a table like the shape
rules, from its operands' shardings to its results'. The rules are JAX 0.10's: a result
dimension that comes from operand dimensions is split as they are when they agree; where they
disagree, or where the split would need a choice the program did not make, the rule raises
``ShardingTypeError`` naming the operands and the ``out_sharding=`` (or ``reshard``) that
settles it. They only type; the partitioner (``compiler.partition``) decides the
communication.

A rule receives the operand avals and the results as the shape rule made them, and returns
each result's spec: a tuple with one entry per dimension, each a tuple of mesh axes. Rules
run only where some operand is split or the equation names an ``out_sharding``
(``typed_avals``), so programs without sharded types pay nothing.
"""
from __future__ import annotations

import functools
import math

from ir import primitives as prims
from ir import collectives as coll
from ir.core import Aval, Literal, TypeSharding, programs_in
from ir.primitives import RuleTable
from ir.sharding import (AbstractMesh, AxisType, Mesh, NamedSharding, PartitionSpec,
                         ShardingTypeError, current_mesh, spec_names)
from ir.shapes import out_avals

sharding_rules = RuleTable("sharding")

# Primitives whose operands never carry sharded types: collectives live in shard_map bodies
# (Manual axes), and a debug print or a sharding inspection has no results.
NO_TYPES = frozenset({prims.debug_print_p, prims.inspect_sharding_p})


def typed_avals(prim, in_avals, params) -> list:
    """The result avals of ``prim``, their shardings included: the shape rule's results, then
    the sharding rule where an operand is split or ``out_sharding`` is given."""
    outs = out_avals(prim, in_avals, params)
    if params.get("out_sharding") is None and not _types_target(prim, params) \
            and not any(a.type_sharding is not None for a in in_avals):
        if prim.kind == "higher":
            return _from_programs(prim, outs, params)
        return outs
    if prim in NO_TYPES:
        return outs
    mesh = _mesh_of(prim, in_avals, params)
    if prim is prims.shard_map_p:
        mesh = params["mesh"]
    specs = sharding_rules[prim](in_avals, outs, **params)
    return [_result(prim, in_avals, out, spec, mesh) for out, spec in zip(outs, specs)]


def _types_target(prim, params) -> bool:
    """Whether ``prim`` sends its operand to a layout that its type shows (a reshard onto a
    mesh with Explicit axes)."""
    if prim is not prims.sharding_constraint_p:
        return False
    target = params["sharding"]
    return isinstance(target, NamedSharding) and mesh_explicit(target.mesh)


def _from_programs(prim, outs, params) -> list:
    """A higher-order primitive's results take the types of its programs' results (a branch,
    a loop body) even when no operand is split: the program may split them itself."""
    mesh = params.get("mesh")
    if mesh is not None and not getattr(mesh, "explicit_axes", ()):
        return outs                    # a shard_map on a mesh without Explicit axes
    if mesh is None and not any(a.type_sharding is not None for sub in _programs_of(params)
                                for a in sub.out_avals):
        return outs
    specs = sharding_rules[prim]([], outs, **params)
    if not any(specs):
        return outs
    mesh = params.get("mesh") or _program_mesh(prim, params)
    return [_result(prim, [], out, spec, mesh) for out, spec in zip(outs, specs)]


def _programs_of(params) -> list:
    return [sub for value in params.values() for sub in programs_in(value)]


# --- specs -------------------------------------------------------------------------------------

def spec_of(aval: Aval) -> tuple:
    """Per dimension, the axes splitting ``aval`` (``()`` for none)."""
    return aval.type_sharding.spec if aval.type_sharding is not None else ((),) * aval.ndim


def partitions(spec) -> tuple:
    """A spec in JAX's printed form: per dimension None, an axis, or a tuple of axes."""
    return tuple(None if not names else names[0] if len(names) == 1 else tuple(names)
                 for names in spec)


def p_text(spec) -> str:
    """``P('x', None)`` as JAX prints it (``P('x',)`` for one entry)."""
    entries = [repr(e) for e in partitions(spec)]
    return "P(" + ", ".join(entries) + ("," if len(entries) == 1 else "") + ")"


def sharding_text(mesh, spec) -> str:
    """``NamedSharding(mesh=AbstractMesh(...), spec=P(...))`` as JAX's messages print it."""
    return f"NamedSharding(mesh={mesh.abstract_mesh}, spec={p_text(spec)})"


def spec_from_user(spec, ndim: int, mesh, what: str = "out_sharding") -> tuple:
    """A user's PartitionSpec as a type's spec: normalised to ``ndim`` entries, axes that are
    not Explicit dropped (types show Explicit axes only)."""
    names = spec_names(spec)
    while len(names) > ndim and not names[-1]:
        names = names[:-1]          # entries past the rank that split nothing mean nothing
    if len(names) > ndim:
        raise AssertionError((ndim, spec))
    explicit = set(mesh.explicit_axes) if mesh is not None else set()
    for axes in names:
        for a in axes:
            if mesh is not None and a not in mesh.axis_names:
                raise ValueError(f"Resource axis: {a} of {p_text(names)} is not found in mesh: "
                                 f"{tuple(mesh.axis_names)}.")
    return tuple(tuple(a for a in axes if a in explicit) for axes in names) \
        + ((),) * (ndim - len(names))


def _mesh_of(prim, in_avals, params):
    """The mesh of the results: the operands' (they must agree), else the ``out_sharding``'s."""
    if prim is prims.sharding_constraint_p:
        # a reshard: the result lives where it is sent
        target = params["sharding"]
        if not isinstance(target, NamedSharding):
            return None
        return _with_devices(target.mesh, [a.type_sharding.mesh for a in in_avals
                                           if a.type_sharding is not None])
    mesh = None
    for a in in_avals:
        if a.type_sharding is not None:
            if mesh is not None and a.type_sharding.mesh != mesh:
                raise ValueError(
                    f"For primitive {prim}, the operands are on different meshes: {mesh} "
                    f"and {a.type_sharding.mesh} (for shape {a.str_long()}); reshard one of them "
                    "onto the other's mesh")
            mesh = a.type_sharding.mesh
    given = params.get("out_sharding")
    if isinstance(given, NamedSharding):
        if mesh is not None and given.mesh.abstract_mesh != mesh.abstract_mesh:
            raise ValueError(f"For primitive {prim}, out_sharding's mesh {given.mesh} should "
                             f"match the operands' mesh {mesh}")
        mesh = mesh if mesh is not None else given.mesh
    context = current_mesh()
    if mesh is not None and context is not None:
        # typed on one mesh, computed under another (JAX's check); a mesh's abstract mesh is
        # made once, so the common case is one object
        ours, theirs = context.abstract_mesh, mesh.abstract_mesh
        if ours is not theirs and ours != theirs:
            typed = next(a for a in in_avals if a.type_sharding is not None)
            raise ValueError(
                f"For primitive {prim}, context mesh {ours!r} should match the aval mesh "
                f"{theirs!r} for shape {typed.str_short()}.")
    return mesh


def _with_devices(mesh, known: list):
    """``mesh``, or where it is abstract, the mesh of devices among ``known`` (the operands')
    that it abstracts: a result on its operands' devices stays there."""
    if not isinstance(mesh, AbstractMesh):
        return mesh
    return next((m for m in known if isinstance(m, Mesh) and m.abstract_mesh == mesh), mesh)


def _program_mesh(prim, params):
    from ir.core import programs_in
    for value in params.values():
        for program in programs_in(value):
            for aval in program.out_avals:
                if aval.type_sharding is not None:
                    return aval.type_sharding.mesh
    return None


def _result(prim, in_avals, out: Aval, spec, mesh) -> Aval:
    """``out`` typed by ``spec``: each axis at most once, each split dimension divisible."""
    if spec is None or not any(spec):
        return out.with_sharding(None)
    _check_each_axis_once(prim, in_avals, out, spec, mesh)
    check_divisible(out.shape, spec, mesh)
    return out.with_sharding(TypeSharding.of(mesh, spec))


def _check_each_axis_once(prim, in_avals, out: Aval, spec, mesh) -> None:
    axes = [a for names in spec for a in names]
    if len(axes) != len(set(axes)):
        ins = ", ".join(a.str_short() for a in in_avals)
        illegal = out.with_sharding(TypeSharding(mesh, tuple(spec)))
        raise ShardingTypeError(f"{prim} operation with inputs: {ins} produces an illegally "
                                f"sharded result: {illegal.str_short()}")


def check_broadcast_result(name: str, avals, shape: tuple) -> None:
    """JAX's errors for operands of an elementwise ``name`` that broadcast (to ``shape``) to
    an illegal split, named as the operation sees them: rank-promoted (leading dimensions
    of 1), before their dimensions of 1 are broadcast."""
    spec = broadcast_shardings_spec(name, avals)
    if spec is None:
        return
    mesh = next(a.type_sharding.mesh for a in avals if a.type_sharding is not None)
    ndim = len(shape)
    promoted = [Aval((1,) * (ndim - a.ndim) + tuple(a.shape), a.dtype).with_sharding(
        TypeSharding(mesh, ((),) * (ndim - a.ndim) + spec_of(a))
        if a.type_sharding is not None else None) for a in avals]
    _check_each_axis_once(name, promoted, Aval(tuple(shape), avals[0].dtype), spec, mesh)


def check_divisible(shape, spec, mesh) -> None:
    """JAX's ValueError for a split that does not divide its dimension."""
    sizes = mesh.shape
    for d, (n, names) in enumerate(zip(shape, spec)):
        k = math.prod(sizes[a] for a in names)
        if n % k:
            raise ValueError(
                f"Sharding spec {tuple(names)!r} implies that array axis {d} is partitioned {k} "
                f"times, but does not evenly divide the dimension size {n}. Got shape: "
                f"{tuple(shape)} and sharding {sharding_text(mesh, spec)}")


def _given(params, ndim: int) -> tuple | None:
    """The spec of an ``out_sharding`` parameter, or None."""
    given = params.get("out_sharding")
    if given is None:
        return None
    return spec_from_user(given.spec, ndim, given.mesh)


def _short(aval: Aval) -> str:
    return aval.str_short()


# --- elementwise ---------------------------------------------------------------------------------

def broadcasting_spec(name: str, avals) -> tuple:
    """JAX's broadcasting rule over operands of one rank (rank-0 ones ignored): per dimension
    the operands' specs if equal; else those of operands not of size 1 there; else the first
    split one, any other split one differing being an error."""
    ranked = [a for a in avals if a.shape]
    if not ranked:
        return ()
    return _broadcast_specs(name, [a.shape for a in ranked], [spec_of(a) for a in ranked])


def broadcast_shardings_spec(name: str, avals):
    """JAX's ``broadcast_shardings``: the spec operands of any ranks broadcast to (each with
    leading unsplit dimensions of size 1 up to the highest rank), or None where none is typed
    (no Explicit axis splits them)."""
    if all(a.type_sharding is None for a in avals):
        return None
    ndim = max(a.ndim for a in avals)
    return _broadcast_specs(name, [(1,) * (ndim - a.ndim) + a.shape for a in avals],
                            [((),) * (ndim - a.ndim) + spec_of(a) for a in avals])


def _broadcast_specs(name: str, shapes: list, specs: list) -> tuple:
    result = []
    for d in range(len(shapes[0])):
        ss = [s[d] for s in specs]
        if all(s == ss[0] for s in ss):
            result.append(ss[0])
            continue
        nontrivial = [s for s, shape in zip(ss, shapes) if not (shape[d] == 1 and not s)]
        if not nontrivial:
            result.append(())
        elif all(s == nontrivial[0] for s in nontrivial):
            result.append(nontrivial[0])
        else:
            chosen = ()
            for s in ss:
                if not chosen and s:
                    chosen = s
                elif chosen and s and s != chosen:
                    raise ShardingTypeError(
                        f"{name} got incompatible shardings for broadcasting: "
                        + ", ".join(str(partitions(s)) for s in specs) + ".")
            result.append(chosen)
    return tuple(result)


def _elementwise(prim, in_avals, outs, **params):
    return [broadcasting_spec(prim.name, in_avals)] * len(outs)


def _like_operand(in_avals, outs, **params):
    return [spec_of(in_avals[0])] * len(outs)


for _p in prims.UNARY + prims.ARITHMETIC + prims.COMPARISON + prims.PREDICATES + (
        prims.threefry2x32_p,):
    sharding_rules[_p] = functools.partial(_elementwise, _p)
for _p in (prims.convert_element_type_p, prims.reduce_precision_p, prims.stop_gradient_p,
           prims.copy_p,
           prims.name_p, prims.rev_p):
    sharding_rules[_p] = _like_operand
# each result typed as its operand (JAX's abstract evaluation); layouts are propagation's
sharding_rules[prims.shard_alike_p] = lambda in_avals, outs, **params: [
    spec_of(a) for a in in_avals]


def _bitcast(in_avals, outs, *, new_dtype):
    (x,), (out,) = in_avals, outs
    spec = spec_of(x)
    if out.ndim > x.ndim:
        return [spec + ((),)]
    if out.ndim < x.ndim:
        return [spec[:-1]]
    return [spec]


def _on_a_mesh(avals) -> list:
    """The operands whose types are on a mesh. JAX's rules for operations whose operands must
    agree (select, concatenate) pass over the others: values made outside any mesh (a constant
    made in a jitted function with no mesh set) take the split of those they meet."""
    return [a for a in avals if a.type_sharding is not None]


def _select_n(in_avals, outs):
    which, *cases = in_avals
    sharded = _on_a_mesh(in_avals)
    # rank-0 cases broadcast (jnp.where's scalars): they name no split
    cases = [c for c in cases if c.shape] or cases
    placed = _on_a_mesh(cases) or cases
    case_spec = spec_of(placed[0])
    if any(spec_of(c) != case_spec for c in placed):
        mesh = sharded[0].type_sharding.mesh
        raise ShardingTypeError(
            "select cases must have the same shardings, got ["
            + ", ".join(sharding_text(mesh, spec_of(c)) for c in cases) + "].")
    if (which.shape and which.type_sharding is not None and _on_a_mesh(cases)
            and spec_of(which) != case_spec):
        mesh = which.type_sharding.mesh
        raise ShardingTypeError(
            "select `which` must be scalar or have the same sharding as cases, got `which` "
            f"sharding {sharding_text(mesh, spec_of(which))} but case sharding "
            f"{sharding_text(mesh, case_spec)}.")
    return [case_spec]


sharding_rules[prims.bitcast_convert_type_p] = _bitcast
sharding_rules[prims.select_n_p] = _select_n


# --- shapes ------------------------------------------------------------------------------------

def _broadcast_in_dim(in_avals, outs, *, shape, broadcast_dimensions, out_sharding=None):
    given = _given({"out_sharding": out_sharding}, len(shape))
    if given is not None:
        return [given]
    (x,) = in_avals
    spec = [()] * len(shape)
    for d, od in enumerate(broadcast_dimensions):
        # a dimension of size 1 broadcast to more is a new one: not split
        spec[od] = spec_of(x)[d] if x.shape[d] == shape[od] else ()
    return [tuple(spec)]


def _transpose(in_avals, outs, *, permutation):
    spec = spec_of(in_avals[0])
    return [tuple(spec[p] for p in permutation)]


def _squeeze(in_avals, outs, *, dimensions):
    spec = spec_of(in_avals[0])
    return [tuple(s for d, s in enumerate(spec) if d not in dimensions)]


def _concatenate(in_avals, outs, *, dimension):
    placed = _on_a_mesh(in_avals) or in_avals
    spec = spec_of(placed[0])
    if any(spec_of(a) != spec for a in placed):
        mesh = next(a.type_sharding.mesh for a in in_avals if a.type_sharding is not None)
        raise ShardingTypeError("All operands should have the same sharding. Got shardings "
                                + ", ".join(sharding_text(mesh, spec_of(a)) for a in in_avals))
    return [spec]


def kept_if_divisible(name: str, x: Aval, out_shape) -> tuple:
    """JAX's rule for an operation that changes sizes (slicing, padding): the operand's split,
    when each changed dimension that is split stays divisible by its blocks."""
    spec = spec_of(x)
    sizes = x.type_sharding.mesh.shape if x.type_sharding is not None else {}
    for d, (old, new) in enumerate(zip(x.shape, out_shape)):
        names = spec[d]
        if old != new and names:
            k = math.prod(sizes[a] for a in names)
            if new % k:
                entry = names[0] if len(names) == 1 else tuple(names)
                shown = entry if isinstance(entry, str) else repr(entry)
                raise ShardingTypeError(
                    f"{name} on sharded dims where out dim ({new}) is not divisible by mesh "
                    f"axes ({k}) with spec ({shown}) is not implemented. Got input "
                    f"type={_short(x)} and output shape={tuple(out_shape)}")
    return spec


def _slice(in_avals, outs, **params):
    return [kept_if_divisible("slicing", in_avals[0], outs[0].shape)]


def _dynamic_slice(in_avals, outs, **params):
    return [kept_if_divisible("dynamic_slice", in_avals[0], outs[0].shape)]


def _pad(in_avals, outs, **params):
    return [kept_if_divisible("padding", in_avals[0], outs[0].shape)]


def _dynamic_update_slice(in_avals, outs):
    x, update = in_avals[:2]
    if spec_of(x) != spec_of(update):
        def shown(a):
            mesh = (a.type_sharding or x.type_sharding or update.type_sharding).mesh
            return f"{a.str_long()}({{Explicit: {tuple(mesh.explicit_axes)!r}}})"
        raise ShardingTypeError(
            "dynamic_update_slice operand sharding must be equal to update sharding, got "
            f"operand sharding {shown(x)} and update sharding {shown(update)}.")
    return [spec_of(x)]


def _iota(in_avals, outs, *, dtype, shape, dimension, out_sharding=None):
    return [_given({"out_sharding": out_sharding}, len(shape)) or ((),) * len(shape)]


sharding_rules[prims.broadcast_in_dim_p] = _broadcast_in_dim
sharding_rules[prims.transpose_p] = _transpose
sharding_rules[prims.squeeze_p] = _squeeze
sharding_rules[prims.concatenate_p] = _concatenate
sharding_rules[prims.slice_p] = _slice
sharding_rules[prims.dynamic_slice_p] = _dynamic_slice
sharding_rules[prims.pad_p] = _pad
sharding_rules[prims.dynamic_update_slice_p] = _dynamic_update_slice
sharding_rules[prims.iota_p] = _iota


# --- reshape (JAX's _reshape_sharding_rule) ----------------------------------------------------

def reshape_error(x: Aval, new_sizes) -> ShardingTypeError:
    return ShardingTypeError(
        "This reshape is not supported. Please specify the sharding of the output via the "
        "`out_sharding` argument of jax.lax.reshape. Got operand type: "
        f"{x.str_long()}, new sizes: {tuple(new_sizes)}")


class _NotOneSplit(Exception):
    """More than one dimension changes: neither one split nor one merge."""


def split_on_one_axis(old, new):
    """``(True, out)`` when ``new`` splits one dimension of ``old`` into a run (``out``: per
    old dimension its size, or the list of sizes it splits into); ``(False, [])`` otherwise.
    Raises _NotOneSplit when two dimensions change."""
    if len(new) <= len(old):
        return False, []
    old, new = list(old), list(new)
    ones = 0
    while old and new and old[-1] == 1 and new[-1] == 1:
        ones += 1
        old.pop()
        new.pop()
    i = j = count = 0
    out = []
    while j < len(new):
        if i >= len(old):
            return False, []
        if old[i] == new[j]:
            out.append(old[i])
        else:
            count += 1
            if count > 1:
                raise _NotOneSplit()
            run = [new[j]]
            next_j, next_i = j + 1, i + 1
            while math.prod(run) != old[i] or (next_j < len(new) and new[next_j] == 1):
                if math.prod(run) > old[i]:
                    return False, []
                if (math.prod(run) == old[i] and next_i < len(old)
                        and next_j < len(new) and new[next_j] == old[next_i]):
                    break
                j += 1
                if j >= len(new):
                    return False, []
                run.append(new[j])
                next_j += 1
            out.append(run)
        i += 1
        j += 1
    out.extend([1] * ones)
    if len(out) != len(old) + ones:
        raise _NotOneSplit()
    return True, out


def split_axes(axes, pieces, sizes, fail):
    """The mesh axes ``axes`` (major to minor) spread over dimensions of sizes ``pieces``:
    each piece takes axes while it is larger than 1 and they divide it; all must be used."""
    remaining = list(axes)
    result = []
    for size in pieces:
        mine = []
        while size > 1 and remaining:
            axis = remaining.pop(0)
            size, rest = divmod(size, sizes[axis])
            if rest:
                raise fail()
            mine.append(axis)
        result.append(tuple(mine))
    if remaining:
        raise fail()
    return result


def reshape_spec(x: Aval, new_sizes) -> tuple:
    """JAX's reshape rule: only singleton dimensions added or removed, one dimension split in
    a run, or one run merged into a dimension; anything else asks for ``out_sharding``."""
    spec = spec_of(x)
    new_sizes = tuple(new_sizes)
    if not any(spec):
        return ((),) * len(new_sizes)
    fail = functools.partial(reshape_error, x, new_sizes)
    sizes = x.type_sharding.mesh.shape
    if [s for s in x.shape if s != 1] == [s for s in new_sizes if s != 1]:
        kept = iter(s for n, s in zip(x.shape, spec) if n != 1)
        return tuple(() if n == 1 else next(kept) for n in new_sizes)
    try:
        is_split, out = split_on_one_axis(x.shape, new_sizes)
        if is_split:
            result = []
            for piece, names in zip(out, spec):
                if isinstance(piece, list):
                    result.extend(split_axes(names, piece, sizes, fail) if names
                                  else [()] * len(piece))
                else:
                    result.append(names)
            return tuple(result)
        is_merge, merge = split_on_one_axis(new_sizes, x.shape)
    except _NotOneSplit:
        raise fail() from None
    if not is_merge:
        raise fail()
    result = []
    old = iter(spec)
    for size, piece in zip(new_sizes, merge):
        if isinstance(piece, list):
            run = [next(old) for _ in piece]
            if not any(run):
                result.append(())
                continue
            # the run's axes major to minor: a split dimension after an unsplit one cannot
            # merge (its blocks would not be contiguous)
            flat = [names if names else None for names in run]
            while flat and flat[-1] is None:
                flat.pop()
            if None in flat:
                raise fail()
            result.extend(split_axes([a for names in flat for a in names], [size], sizes, fail))
        else:
            result.append(next(old))
    return tuple(result)


def _reshape(in_avals, outs, *, new_sizes, out_sharding=None):
    given = _given({"out_sharding": out_sharding}, len(new_sizes))
    if given is not None:
        return [given]
    return [reshape_spec(in_avals[0], new_sizes)]


sharding_rules[prims.reshape_p] = _reshape


# --- indexing ----------------------------------------------------------------------------------

def _gather(in_avals, outs, *, axis, out_sharding=None):
    """Take along ``axis``: the operand whole along it (unsplit, or of size 1, which each
    index reads whole) and the indices unsplit; the result is split as the operand's other
    dimensions."""
    given = _given({"out_sharding": out_sharding}, outs[0].ndim)
    if given is not None:
        return [given]
    x, indices = in_avals
    spec = spec_of(x)
    if (spec[axis] and x.shape[axis] != 1) or any(spec_of(indices)):
        raise gather_error(x, _with_index_vector(indices))
    return [spec[:axis] + ((),) * indices.ndim + spec[axis + 1:]]


def gather_error(operand: Aval, indices: Aval) -> ShardingTypeError:
    """JAX's error for a gather its operand's or indices' split forbids (``indices`` as JAX
    holds them, with the index-vector dimension)."""
    return ShardingTypeError(
        "Use `.at[...].get(out_sharding=)` to provide output PartitionSpec for the gather "
        "indexing as out sharding could not be resolved unambiguously (or would require "
        f"collectives on inputs). Got operand=ShapedArray({operand.str_long()}), "
        f"indices=ShapedArray({indices.str_long()})")


def scatter_error(operand: Aval, indices: Aval, updates: Aval) -> ShardingTypeError:
    """JAX's error for a scatter (an ``.at[]`` update) the splits forbid."""
    return ShardingTypeError(
        "Use `.at[...].set/add/mul/...(out_sharding=)` to provide output PartitionSpec for the "
        "scatter update as out sharding could not be resolved unambiguously (or would require "
        f"collectives on inputs). Got operand=ShapedArray({operand.str_long()}), "
        f"indices=ShapedArray({indices.str_long()}), updates=ShapedArray({updates.str_long()})")


def _with_index_vector(indices: Aval) -> Aval:
    """The indices as JAX's gather and scatter hold them (and name them in errors): with a
    trailing index-vector dimension of one."""
    spec = spec_of(indices) + ((),)
    return Aval(indices.shape + (1,), indices.dtype, type_sharding=TypeSharding.of(
        indices.type_sharding.mesh, spec) if indices.type_sharding is not None else None)


def _scatter(in_avals, outs, *, axis, mode, out_sharding=None):
    """The operand whole along ``axis``, the indices unsplit, the updates split as the operand
    elsewhere; the result is split as the operand."""
    given = _given({"out_sharding": out_sharding}, outs[0].ndim)
    if given is not None:
        return [given]
    x, indices, updates = in_avals
    spec = spec_of(x)
    expected = spec[:axis] + ((),) * indices.ndim + spec[axis + 1:]
    upd = spec_of(updates)
    fits = all(not u or u == e for u, e in zip(upd, expected))
    if spec[axis] or any(spec_of(indices)) or not fits:
        raise scatter_error(x, _with_index_vector(indices), updates)
    return [spec]


sharding_rules[prims.gather_p] = _gather
sharding_rules[prims.scatter_p] = _scatter


# --- reductions, scans along an axis, sorting ------------------------------------------------

def _reduce(in_avals, outs, *, axes, **params):
    given = _given(params, outs[0].ndim)
    if given is not None:
        return [given]
    spec = spec_of(in_avals[0])
    return [tuple(s for d, s in enumerate(spec) if d not in axes)]


def _cumulative(in_avals, outs, *, axis, reverse):
    (x,) = in_avals
    if spec_of(x)[axis]:
        raise ShardingTypeError("Input should be unsharded over the axis being reduced. Got "
                                f"input type={x.str_long()} and axis={axis}")
    return [spec_of(x)]


def _fft(in_avals, outs, *, fft_type, fft_lengths):
    """The result split as the operand, the transformed dimensions too (JAX's: the compiler
    gathers them; a real transform's shorter or longer last dimension must stay divisible)."""
    return [spec_of(in_avals[0])]


sharding_rules[prims.fft_p] = _fft
# a host callback reads its operands whole and gives whole results
sharding_rules[prims.callback_p] = lambda in_avals, outs, **params: [
    ((),) * out.ndim for out in outs]


def _sort(in_avals, outs, *, dimension, num_keys):
    first = in_avals[0]
    mesh = next(a.type_sharding.mesh for a in in_avals if a.type_sharding is not None)
    for a in in_avals:
        if spec_of(a)[dimension]:
            raise ShardingTypeError(
                "Arguments to sort must be unsharded over the sorting dimension. Got arg "
                f"sharding={sharding_text(mesh, spec_of(a))} and sorting dimension={dimension}")
    if any(spec_of(a) != spec_of(first) for a in in_avals):
        raise ShardingTypeError("Arguments to sort must have equal shardings, got: "
                                + " ".join(sharding_text(mesh, spec_of(a)) for a in in_avals))
    return [spec_of(first)] * len(outs)


def _searchsorted(in_avals, outs, *, side):
    sorted_values, query = in_avals
    if any(spec_of(sorted_values)):
        raise ShardingTypeError(
            "searchsorted needs its sorted operand unsharded. Got sorted operand type="
            f"{sorted_values.str_long()}; reshard it to P() first")
    return [spec_of(query)]


for _p in prims.REDUCTIONS + (prims.argmax_p, prims.argmin_p):
    sharding_rules[_p] = _reduce
for _p in prims.CUMULATIVE:
    sharding_rules[_p] = _cumulative
sharding_rules[prims.sort_p] = _sort
sharding_rules[prims.searchsorted_p] = _searchsorted


# --- dot_general (JAX's _dot_general_sharding_rule) ---------------------------------------------

def _dot_general(in_avals, outs, *, dimension_numbers, preferred_element_type=None,
                 out_sharding=None, precision=None):
    given = _given({"out_sharding": out_sharding}, outs[0].ndim)
    if given is not None:
        return [given]
    x, y = in_avals
    (lc, rc), (lb, rb) = dimension_numbers
    xs, ys = spec_of(x), spec_of(y)
    lhs_c, rhs_c = tuple(xs[d] for d in lc), tuple(ys[d] for d in rc)
    lhs_b, rhs_b = tuple(xs[d] for d in lb), tuple(ys[d] for d in rb)
    if any(l and r and l != r for l, r in zip(lhs_b, rhs_b)):
        raise ShardingTypeError(
            "dot_general requires lhs batch dimensions and rhs batch dimensions to have the "
            f"consistent sharding, got {partitions(lhs_b)} and {partitions(rhs_b)}.")
    if any(l and r and l != r for l, r in zip(lhs_c, rhs_c)):
        raise ShardingTypeError(
            "dot_general requires contracting dimensions to have consistent sharding, got "
            f"{partitions(lhs_c)} and {partitions(rhs_c)}.")
    if any(l and r for l, r in zip(lhs_c, rhs_c)):
        raise ShardingTypeError(
            "Contracting dimensions are sharded and it is ambiguous how the output should be "
            "sharded. Please specify the output sharding via the `out_sharding` parameter. "
            f"Got lhs_contracting_spec={partitions(lhs_c)} and "
            f"rhs_contracting_spec={partitions(rhs_c)}")
    x_free = tuple(s for d, s in enumerate(xs) if d not in lc and d not in lb)
    y_free = tuple(s for d, s in enumerate(ys) if d not in rc and d not in rb)
    return [lhs_b + x_free + y_free]


sharding_rules[prims.dot_general_p] = _dot_general


# --- linear algebra: the matrix dimensions whole -------------------------------------------------

def _linalg(prim, in_avals, outs, **params):
    batch = None
    for i, a in enumerate(in_avals):
        spec = spec_of(a)
        if any(spec[-2:]):
            raise ShardingTypeError(f"Input {i} to {prim} must be unsharded on non-batch "
                                    f"dimensions, but got {p_text(spec)}.")
        if batch is None:
            batch = spec[:-2]
        elif spec[:-2] != batch:
            raise ShardingTypeError(
                f"All inputs to {prim} must have the same batch sharding, but got "
                f"{[partitions(spec_of(b)[:-2]) for b in in_avals]}.")
    return [batch + ((),) * (out.ndim - len(batch)) for out in outs]


for _p in prims.LINALG:
    sharding_rules[_p] = functools.partial(_linalg, _p)


# --- annotations -------------------------------------------------------------------------------

def _sharding_constraint(in_avals, outs, *, sharding):
    """``reshard``: the result is split as asked (on Explicit axes)."""
    if not isinstance(sharding, NamedSharding):
        return [((),) * outs[0].ndim]
    return [spec_from_user(sharding.spec, outs[0].ndim, sharding.mesh)]


sharding_rules[prims.sharding_constraint_p] = _sharding_constraint


# --- higher-order: results typed by their programs -------------------------------------------

def _program_results(in_avals, outs, **params):
    """cond, while, remat, custom_jvp/vjp calls: the results as the programs give them."""
    program = (params.get("jaxpr") or params.get("body_jaxpr")
               or (params.get("branches") or [None])[0])
    return [spec_of(a) for a in program.out_avals]


def _scan(in_avals, outs, *, jaxpr, length, reverse, num_consts, num_carry):
    xs = in_avals[num_consts + num_carry:]
    split = [a for a in xs if a.ndim and spec_of(a)[0]]
    if split:
        raise ValueError("0th dimension of all xs should be replicated. Got "
                         + ", ".join(p_text(spec_of(a)) for a in xs))
    body = jaxpr.out_avals
    return ([spec_of(a) for a in body[:num_carry]]
            + [((),) + spec_of(a) for a in body[num_carry:]])


def _custom_lin(in_avals, outs, **params):
    return [spec_of(out) for out in outs]       # split as the shape rule's (their primals')


for _p in ((prims.cond_p, prims.while_p, prims.remat_p, prims.linear_solve_p)
           + prims.CUSTOM_CALLS):
    sharding_rules[_p] = _program_results
sharding_rules[prims.scan_p] = _scan
sharding_rules[prims.custom_lin_p] = _custom_lin


def _shard_map(in_avals, outs, *, mesh, out_specs, jaxpr, **params):
    """A shard_map's results are split as its out_specs say, over the mesh's Explicit axes."""
    return [shard_map_result_split(mesh, spec, None if isinstance(v, Literal) else v.aval)
            for spec, v in zip(out_specs, jaxpr.outvars)]


def shard_map_result_split(mesh, spec, body_aval) -> tuple:
    """A shard_map result's split: per dimension its out_spec's Explicit axes, then (minor)
    the split the body result's type gives it over Explicit axes a partial-manual shard_map
    left automatic, as JAX's ``_unshard_shaped_array``."""
    explicit = set(mesh.explicit_axes)
    ndim = body_aval.ndim if body_aval is not None else len(spec)
    names = spec_names(spec) + ((),) * (ndim - len(spec))
    inner = spec_of(body_aval) if body_aval is not None else ((),) * ndim
    # (an axis the out_spec names already, a vmap's spmd axis over a batched result, is not
    # named twice)
    return tuple(tuple(a for a in own if a in explicit)
                 + tuple(k for k in kept if k not in own)
                 for own, kept in zip(names, inner))


sharding_rules[prims.shard_map_p] = _shard_map


def _no_results(in_avals, outs, **params):
    return []


sharding_rules[prims.debug_print_p] = _no_results
sharding_rules[prims.inspect_sharding_p] = _no_results
sharding_rules[prims.check_p] = _no_results


def _collective(in_avals, outs, **params):
    """A collective's result keeps its operand's split over the Explicit axes a partial-manual
    shard_map left automatic, dimension by dimension, as JAX's abstract evals (which update
    only the shape: a tiled gather, scatter or all_to_all keeps the split of each dimension,
    the one it resizes included). An untiled all_gather inserts an unsplit dimension, an
    untiled psum_scatter drops its scatter dimension and an untiled all_to_all does both, as
    JAX's expand_dims / squeeze around its tiled form. ``ragged_all_to_all``'s result is its
    ``output`` operand's; ``axis_index``, without operands, is unsplit."""
    if not in_avals:
        return [((),) * out.ndim for out in outs]
    source = in_avals[1] if len(in_avals) == 6 else in_avals[0]
    spec = list(spec_of(source))
    if params.get("tiled") is False:                  # all_slice has no ``tiled``: kept
        if "gather_axis" in params:
            spec.insert(params["gather_axis"], ())
        elif "scatter_axis" in params:
            del spec[params["scatter_axis"]]
        elif params["split_axis"] != params["concat_axis"]:
            del spec[params["split_axis"]]
            spec.insert(params["concat_axis"], ())
    return [tuple(spec[d] if d < len(spec) else () for d in range(out.ndim)) for out in outs]


# The communication nodes a lowered body holds type their results as the collectives they
# come from (the same parameter names).
for _c in coll.FRONT_END + coll.NODES:
    sharding_rules[_c.prim] = _collective


def mesh_explicit(mesh) -> bool:
    """Whether ``mesh`` has an Explicit axis."""
    return mesh is not None and bool(mesh.explicit_axes)


def mesh_auto(mesh) -> bool:
    """Whether ``mesh`` has an Auto axis (an axis that is not Explicit)."""
    return mesh is not None and len(mesh.explicit_axes) < len(mesh.axis_names)


def type_sharding(sharding, ndim: int):
    """The type sharding an Array laid out by ``sharding`` has: its spec over the mesh's
    Explicit axes (None for other shardings, and for splits over no Explicit axis). Asked for
    every array made, so the answer is kept on the sharding, and per (mesh, spec, rank)."""
    named = type(sharding) is NamedSharding
    if named:
        found = sharding.typed.get(ndim, _MISSING)
        if found is not _MISSING:
            return found
    if not isinstance(sharding, NamedSharding) or not getattr(sharding.mesh, "explicit_axes",
                                                              ()):
        found = None
    else:
        key = (sharding.mesh, sharding.spec, ndim)
        found = _TYPE_SHARDINGS.get(key, _MISSING)
        if found is _MISSING:
            if len(_TYPE_SHARDINGS) > 4096:
                _TYPE_SHARDINGS.clear()
            found = _TYPE_SHARDINGS[key] = TypeSharding.of(
                sharding.mesh, spec_from_user(sharding.spec, ndim, sharding.mesh))
    if named:
        sharding.typed[ndim] = found
    return found


_TYPE_SHARDINGS: dict = {}
_MISSING = object()


def named_sharding(aval: Aval):
    """The NamedSharding an array of type ``aval`` has (None when its type names no split)."""
    typed = aval.type_sharding
    if typed is None:
        return None
    return NamedSharding(typed.mesh, PartitionSpec(*partitions(typed.spec),
                                                   unreduced=aval.unreduced, reduced=aval.reduced))
