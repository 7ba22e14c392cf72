"""The shard_map partitioner: specs and global shapes in, block avals and a body program out.

``shard_map(f, mesh, in_specs, out_specs)`` validates its arguments in the order of
SEMANTICS 1.7, derives each input's block aval from its spec, and binds the ``shard_map``
primitive. The current trace decides what that means: run the body eagerly on every device's
block, or trace it into a program and emit one ``shard_map`` equation carrying it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Any, Callable

import numpy as np

from compiler import tree
from compiler.layouts import layout_of
from compiler.refs import is_ref, stand_in
from compiler.replication import check_out_specs, infer_vma
from compiler.tracing import (aval_of, bind, check_jax_value, current_trace, trace_to_program,
                              weakened_where, weakly_typed)
from ir import primitives as prims
from ir import collectives as coll
from ir.core import Aval, Literal, Program, TypeSharding
from ir.sharding import (DuplicateSpecError, Mesh, NamedSharding, PartitionSpec, ReplicationError,
                         ShardingSpecError, axes_size, block_shape, canonical_spec, spec_axes,
                         spec_names)
from ir.sharding_rules import (p_text, partitions, shard_map_result_split, spec_from_user,
                               spec_of)


# --- errors ------------------------------------------------------------------------------------

class UnknownAxisError(ShardingSpecError, NameError):
    """A collective or spec naming an axis the mesh lacks: ``axis_name``, where known; ``bound``
    is false for a collective outside any shard_map body."""

    def __init__(self, message, *, axis_name=None, bound=True):
        super().__init__(message)
        self.axis_name = axis_name
        self.bound = bound


@dataclasses.dataclass(frozen=True)
class ShardContext:
    """What a body is traced under: the mesh, whether replication is checked, and the mesh
    axes that are manual in it (None: every axis). Collectives may name manual axes only."""
    mesh: Mesh
    check_vma: bool
    manual_axes: frozenset | None = None

    @property
    def manual(self) -> tuple:
        """The manual axes, in mesh order."""
        names = self.mesh.axis_names
        return names if self.manual_axes is None else tuple(
            a for a in names if a in self.manual_axes)


# The shard_map bodies being traced or run, innermost last: collectives find their mesh here.
_axis_env: list = []


def current_shard_context() -> ShardContext | None:
    return _axis_env[-1] if _axis_env else None


def names_axes_in_scope() -> bool:
    """Whether collectives here may name axes: inside a shard_map body, or under a trace
    that names axes (a vmap's ``axis_name``). A function traced on its own, apart from the
    traces here, would not see them, so its traced program is not one to keep."""
    if current_shard_context() is not None:
        return True
    trace = current_trace()
    while trace is not None:
        if trace.binds_axis_names():
            return True
        trace = trace.parent
    return False


@contextlib.contextmanager
def in_body(shard: ShardContext):
    """Trace or run a body with ``shard`` as the enclosing shard_map (its mesh, its check),
    for the collectives and rules that ask for it."""
    _axis_env.append(shard)
    try:
        yield
    finally:
        _axis_env.pop()


def function_name(f) -> str:
    """The user's function name: the callable a partial wraps, else its class name."""
    while isinstance(f, functools.partial):
        f = f.func
    return getattr(f, "__name__", type(f).__name__)


def wraps(fun, docstr: str, **fields):
    """A decorator making its function look like ``fun`` (name, signature through
    ``__wrapped__``, attributes), as JAX's transformations make theirs, with the docstring
    ``docstr`` formatted with ``fun``'s name and ``fields`` (JAX's texts: "Gradient of f
    with respect to positional argument(s) 0. ...")."""
    def decorate(wrapper):
        functools.update_wrapper(wrapper, fun)
        wrapper.__doc__ = docstr.format(fun=function_name(fun), **fields)
        return wrapper
    return decorate


def _is_spec_leaf(x) -> bool:
    return x is None or isinstance(x, PartitionSpec)


# --- the public entry --------------------------------------------------------------------------

def shard_map(f: Callable, mesh: Mesh, in_specs, out_specs, *, check_vma: bool = True,
              flag: str = "check_vma", manual_axes=None) -> Callable:
    """Map ``f`` over the blocks of its arguments on ``mesh`` (see ``shardc.shard_map``).

    ``manual_axes`` (None: every mesh axis) are the axes ``f`` is manual over; specs and
    collectives may name only those. The others stay automatic: the body sees values whole
    along them, and a shard_map called inside the body may split over them (nested)."""
    if not callable(f):
        raise TypeError("shard_map requires a callable for its first argument, but got "
                        f"{f!r} of type {type(f)}.")
    if not isinstance(mesh, Mesh):
        raise TypeError("shard_map requires a Mesh instance for its second argument, but got "
                        f"mesh of type {type(mesh)}.")
    if in_specs is None and flag == "check_rep":
        _broadcast_specs(None, (), "shard_map in_specs")    # the old form rejects it up front
    _check_spec_leaves(in_specs, "in_specs")
    _check_spec_leaves(out_specs, "out_specs")
    manual = _manual_axes(mesh, manual_axes)
    _check_spec_axes(in_specs, mesh, "in_specs", manual)
    _check_unreduced(in_specs, mesh, manual, "in")
    _check_unreduced(out_specs, mesh, manual, "out")
    if check_vma not in (True, False, "runtime"):
        raise ValueError(f"shard_map: {flag}={check_vma!r}; expected True, False or 'runtime'")
    config = _Config(f, mesh, in_specs, out_specs, check_vma is True, flag,
                     runtime_check=check_vma == "runtime", manual_axes=manual,
                     manual_given=bool(manual_axes))

    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        if kwargs:
            raise TypeError(f"shard_map-wrapped function '{config.name}' takes positional "
                            f"arguments only, got {sorted(kwargs)}")
        return _call(config, args)

    wrapped.__wrapped_shard_map__ = config
    return wrapped


@dataclasses.dataclass
class _Config:
    f: Callable
    mesh: Mesh
    in_specs: Any
    out_specs: Any
    check_vma: bool
    flag: str
    runtime_check: bool = False      # check replication on the blocks after running
    manual_axes: tuple = ()          # in mesh order; the others are automatic
    manual_given: bool = False       # whether the user named them (axis_names)
    # what calls of one structure share: how the specs cover the arguments (by their tree),
    # the outputs (by theirs), and the argument types already checked
    layouts: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)
    checked: set = dataclasses.field(default_factory=set, compare=False, repr=False)

    @property
    def name(self) -> str:
        return function_name(self.f)


def _manual_axes(mesh: Mesh, manual_axes) -> tuple:
    """The manual axes in mesh order (every axis when None or empty, as in JAX)."""
    if not manual_axes:
        return mesh.axis_names
    unknown = [a for a in manual_axes if a not in mesh.axis_names]
    if unknown:
        raise ValueError(f"shard_map requires axis_names={set(manual_axes)} to be a subset of "
                         f"mesh.axis_names={mesh.axis_names}")
    return tuple(a for a in mesh.axis_names if a in manual_axes)


def _check_spec_leaves(specs, which: str):
    leaves = tree.tree_leaves(specs, is_leaf=_is_spec_leaf)
    paths = tree.leaf_paths(specs, is_leaf=_is_spec_leaf)
    bad = [f"  {which}{path} is {leaf} of type {type(leaf).__name__}, "
           for leaf, path in zip(leaves, paths) if not _is_spec_leaf(leaf)]
    if bad:
        raise TypeError(f"shard_map {which} argument must be a pytree of PartitionSpec "
                        "instances, but:\n\n" + "\n\n".join(bad) +
                        f"\n\nCheck the {which} values passed to shard_map.")


def _check_spec_axes(specs, mesh: Mesh, which: str, manual: tuple):
    leaves = tree.tree_leaves(specs, is_leaf=_is_spec_leaf)
    paths = tree.leaf_paths(specs, is_leaf=_is_spec_leaf)
    unknown = []
    for spec, path in zip(leaves, paths):
        if spec is None:
            continue
        for name in spec_axes(spec):
            if name not in manual:
                unknown.append(f"  {which}{path} refers to {name!r}")
    if not unknown:
        for spec, path in zip(leaves, paths):
            if spec is not None:
                _check_duplicates(spec, path, which)
    if unknown:
        raise UnknownAxisError(
            f"shard_map {which} argument must refer to an axis marked as manual "
            f"(frozenset({{{', '.join(map(repr, manual))}}})), but:\n\n" + "\n\n".join(unknown) +
            f"\n\nCheck the {which} values passed to shard_map.")


def _check_unreduced(specs, mesh: Mesh, manual: tuple, prefix: str) -> None:
    """JAX's errors for unreduced or reduced axes in specs: only when the shard_map is manual
    over every mesh axis, and only over Explicit axes (partial sums are a type's)."""
    explicit = set(mesh.explicit_axes)
    for spec in tree.tree_leaves(specs, is_leaf=_is_spec_leaf):
        if not isinstance(spec, PartitionSpec) or not (spec.unreduced or spec.reduced):
            continue
        if set(manual) != set(mesh.axis_names):
            raise NotImplementedError(
                f"unreduced/reduced can only be passed to {prefix}_specs when shard_map is in "
                f"full manual mode. Got mesh axis names {mesh.axis_names}, manual_axes: "
                f"{frozenset(manual)}, specs: {spec}. Please file a bug at "
                "https://github.com/jax-ml/jax/issues.")
        for axes, which in ((spec.unreduced, "unreduced"), (spec.reduced, "reduced")):
            if not axes <= explicit:
                raise ValueError(f"{which} in {prefix}_specs {spec} can only be used when the "
                                 "mesh passed to shard_map contains axis names all of type "
                                 f"`Explicit`. Got mesh {mesh}")


def _check_duplicates(spec: PartitionSpec, path: str, which: str):
    seen = set()
    for name in spec_axes(spec):
        if name in seen:
            raise DuplicateSpecError(
                "A single NamedSharding spec specification can map every mesh axis to at most "
                f"one positional dimension, but {spec!r} has duplicate entries for `{name}` "
                f"({which}{path})")
        seen.add(name)


# --- the call ----------------------------------------------------------------------------------

@dataclasses.dataclass
class _Leaf:
    """One array argument of the body: where it came from and how it is split."""
    value: Any
    spec: PartitionSpec
    path: str          # key path inside the args' tuple
    arg_index: int
    spec_path: str     # key path of the in_specs leaf covering it


def _call(config: _Config, args: tuple):
    outer = current_shard_context()
    if outer is not None:
        return call_nested(config, args, outer)
    mesh = config.mesh
    _check_manual_not_vmapped(config)
    leaves, treedef = tree.tree_flatten(args)
    if any(map(is_ref, leaves)):
        return _call_with_refs(config, args, leaves, treedef)
    specs, spec_paths, paths = _layout(config, ("in", treedef), lambda: (
        *_broadcast_specs(config.in_specs, args, "shard_map in_specs"), tree.leaf_paths(args)))
    dynamic = [_Leaf(v, s, p, _arg_index(p), sp)
               for v, s, p, sp in zip(leaves, specs, paths, spec_paths) if s is not None]
    for leaf in dynamic:
        check_jax_value(leaf.value, f"shard_map of '{config.name}': args{leaf.path}")
    _check_committed_devices(config, dynamic)
    # (an array replicated on the mesh is checked as its type, a host value is not)
    types = (treedef, tuple(aval_of(leaf.value) for leaf in dynamic),
             tuple(_replicated_on(leaf.value, mesh) for leaf in dynamic))
    if not _seen(config.checked, types):
        _check_ranks(config, dynamic)
        _check_divisibility(config, dynamic)
        _check_typed_arguments(config, dynamic)
        _remember(config.checked, types)
    out_store: dict = {}

    def flat_body(*blocks):
        it = iter(blocks)
        full = [next(it) if s is not None else v for v, s in zip(leaves, specs)]
        result = config.f(*tree.tree_unflatten(treedef, full))
        return _flatten_outputs(config, result, out_store)

    params = dict(mesh=mesh, in_specs=tuple(canonical_spec(l.spec) for l in dynamic),
                  check_vma="runtime" if config.runtime_check else config.check_vma,
                  config=config, out_store=out_store)
    outs = current_trace().process_shard_map(flat_body, [l.value for l in dynamic], params)
    # results are weakly typed where the body's were (a Python number returned), as JAX's
    return tree.tree_unflatten(out_store["treedef"], weakened_where(outs, out_store["weak"]))


def _check_manual_not_vmapped(config: _Config) -> None:
    """JAX's ValueError for ``axis_names`` naming a mesh axis that a vmap around the call
    splits its batch over (by the batch's Explicit type): the vmap holds that axis. Without
    ``axis_names`` the shard_map is manual over the others."""
    held = set(current_trace().vmapped_mesh_axes()) if config.manual_given else ()
    if held and held & set(config.manual_axes):
        free = frozenset(a for a in config.mesh.axis_names if a not in held)
        raise ValueError(f"jax.shard_map requires axis_names={frozenset(config.manual_axes)} "
                         f"to be a subset of mesh.axis_names={free}")


def _check_committed_devices(config: _Config, dynamic) -> None:
    """JAX's ValueError for an argument committed to devices other than the mesh's, in its
    order (one device, another mesh's): the shard_map computes on the mesh's devices."""
    ids = list(config.mesh.flat_device_ids)
    for leaf in dynamic:
        if not getattr(leaf.value, "_committed", False):
            continue
        sharding = leaf.value.sharding
        held = getattr(getattr(sharding, "mesh", None), "flat_device_ids", None)
        if held is None:
            devices = getattr(sharding, "device_set", ())
            held = [d.id for d in devices] if len(devices) == 1 else ids
        if list(held) != ids:
            raise ValueError(
                "Received incompatible devices for jitted computation. Got argument "
                f"args{leaf.path} of shard_map of '{config.name}' with shape "
                f"{aval_of(leaf.value).str_long()} and with device ids "
                f"{list(held)} on platform CPU and shard_map with device ids "
                f"{ids} on platform CPU")


def _call_with_refs(config: _Config, args: tuple, leaves, treedef):
    """A shard_map of Refs (mutable arrays): each Ref's value is split by its in_specs entry;
    in the body a Ref of this trace holds the block, and what the body leaves in it comes
    back laid out by the same spec, written into the Ref (JAX's effects, discharged)."""
    specs, _ = _broadcast_specs(config.in_specs, args, "shard_map in_specs")
    positions = [k for k, leaf in enumerate(leaves) if is_ref(leaf)]
    refs = [leaves[k] for k in positions]
    values = list(leaves)
    for k, ref in zip(positions, refs):
        values[k] = ref._read()

    def body(*block_args):
        blocks = tree.tree_leaves(block_args)
        held = [stand_in(ref, blocks[k]) for k, ref in zip(positions, refs)]
        for k, ref in zip(positions, held):
            blocks[k] = ref
        result = config.f(*tree.tree_unflatten(treedef, blocks))
        return result, [ref._value for ref in held]

    with_refs = dataclasses.replace(
        config, f=functools.wraps(config.f)(body), layouts={}, checked=set(),
        out_specs=(config.out_specs, [specs[k] for k in positions]))
    out, left = _call(with_refs, tree.tree_unflatten(treedef, values))
    for ref, value in zip(refs, left):
        ref._write(value)
    return out


# a shard_map remembers this many argument types and layouts at most
_CHECKED_LIMIT = 256


def _layout(config: _Config, key, make):
    """``make()``, remembered under ``key`` (a tree structure) for the calls after."""
    try:
        return config.layouts[key]
    except KeyError:
        pass
    except TypeError:          # a pytree node whose metadata is not hashable
        return make()
    layout = make()
    if len(config.layouts) >= _CHECKED_LIMIT:
        config.layouts.clear()
    config.layouts[key] = layout
    return layout


def _seen(checked: set, types) -> bool:
    try:
        return types in checked
    except TypeError:
        return False


def _remember(checked: set, types) -> None:
    try:
        if len(checked) >= _CHECKED_LIMIT:
            checked.clear()
        checked.add(types)
    except TypeError:
        pass


def _check_typed_arguments(config: _Config, dynamic) -> None:
    """JAX's ValueError for an argument whose type splits it otherwise than its in_spec, when
    the shard_map is manual over every axis of an all-Explicit mesh; an array replicated on
    the mesh is typed so. (A host value, or an array on one device, is split as the in_spec
    says, as on Auto axes: JAX 0.10 rejects that too, shardc keeps accepting it.)"""
    mesh = config.mesh
    if set(config.manual_axes) != set(mesh.axis_names) or \
            len(mesh.explicit_axes) != len(mesh.axis_names):
        for leaf in dynamic:
            if aval_of(leaf.value).unreduced:
                # partial sums enter a body only as such (an in_spec saying so)
                raise NotImplementedError(
                    f"shard_map of '{config.name}': an unreduced argument "
                    f"{aval_of(leaf.value).str_long(short=True)} on a mesh not all Explicit or "
                    "a shard_map not manual over every axis")
        return
    for leaf in dynamic:
        aval = aval_of(leaf.value)
        for which in ("unreduced", "reduced"):
            if getattr(leaf.spec, which) != getattr(aval, which):
                raise ValueError(
                    f"in_specs containing {which} {leaf.spec} passed to shard_map should be "
                    f"equal to the {which} present on the in_aval {aval.str_long(short=True)}")
        if aval.type_sharding is None:
            # replicated on this mesh, its type says so; a host value's says nothing
            if not _replicated_on(leaf.value, mesh):
                continue
            actual = spec_from_user(PartitionSpec(), aval.ndim, mesh)
        elif aval.type_sharding.mesh != mesh:
            continue
        else:
            actual = aval.type_sharding.spec
        given = spec_from_user(leaf.spec, aval.ndim, mesh)
        if given != actual:
            raise ValueError(
                f"in_specs passed to shard_map: {p_text(given)} does not match the specs of "
                f"the input: {p_text(actual)} for arg: {aval.str_long()}. "
                "`in_specs` is an optional argument so you can omit specifying it and "
                "shard_map will infer the in_specs from the arguments. If you want to reshard "
                "your inputs, you can use `jax.reshard` on the arguments and then pass those "
                "args to shard_map.")


def _replicated_on(value, mesh) -> bool:
    """Whether ``value`` is an array laid out on ``mesh``, replicated (typed so)."""
    layout = layout_of(value)
    return (isinstance(layout, NamedSharding) and layout.mesh == mesh
            and not spec_axes(layout.spec))


def _broadcast_specs(prefix, full, name):
    if prefix is None and name.endswith("in_specs"):
        raise TypeError("shard_map in_specs argument must be a pytree of PartitionSpec "
                        "instances, but it was None. Instead of in_specs=None, did you mean "
                        "in_specs=P()?")
    # Tag each spec leaf with its key path, so errors can name the spec and the value apart.
    spec_leaves, spec_tree = tree.tree_flatten(prefix, is_leaf=_is_spec_leaf)
    tagged = tree.tree_unflatten(spec_tree, [
        _SpecAt(s, p) for s, p in zip(spec_leaves,
                                      tree.leaf_paths(prefix, is_leaf=_is_spec_leaf))])
    try:
        covering = tree.broadcast_prefix(tagged, full, is_leaf=lambda x: isinstance(x, _SpecAt),
                                         name=name)
    except tree.PrefixError as err:
        raise ShardingSpecError(str(err)) from None
    return [c.spec for c in covering], [c.path for c in covering]


@dataclasses.dataclass(frozen=True)
class _SpecAt:
    """A spec leaf and its key path inside the specs tree."""
    spec: Any
    path: str


def _arg_index(path: str) -> int:
    return int(path[1:path.index("]")])


def _param_text(config: _Config, index: int) -> str:
    import inspect
    name = config.name
    try:
        params = list(inspect.signature(config.f).parameters.values())
    except (TypeError, ValueError):
        return f"{name}'s parameter {index}"
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if index < len(positional):
        return f"{name}'s parameter '{positional[index].name}'"
    varargs = [p for p in params if p.kind == p.VAR_POSITIONAL]
    if varargs:
        return (f"the index {index - len(positional)} component of {name}'s varargs "
                f"parameter '{varargs[0].name}'")
    return f"{name}'s parameter {index}"


def _check_ranks(config: _Config, dynamic):
    bad = []
    for leaf in dynamic:
        aval = aval_of(leaf.value)
        n = len(leaf.spec)
        if n > aval.ndim:
            bad.append((leaf, aval, n))
    if not bad:
        return
    lines = []
    for leaf, aval, n in bad:
        lines.append(
            f"in_specs{leaf.spec_path} is {leaf.spec!r} which has length {n}, but "
            f"args{leaf.path}, where args[{leaf.arg_index}] is bound to "
            f"{_param_text(config, leaf.arg_index)}, has shape {aval.str_short()}, which has "
            f"rank {aval.ndim} (and {aval.ndim} < {n})")
    text = lines[0] if len(lines) == 1 else "\n\n".join("* " + l for l in lines)
    scalar = any(aval.ndim == 0 for _, aval, _ in bad)
    raise ShardingSpecError(
        f"shard_map applied to the function '{config.name}' was given an in_specs entry which "
        "is too long to be compatible with the corresponding input value from the function:\n\n"
        f"{text}\n\nEntries in in_specs must be of length no greater than the number of axes "
        "in the corresponding input value.\n\nEither revise the spec to be shorter, or modify "
        f"'{config.name}' so that its inputs have sufficient rank."
        + ("\n\nFor scalar values (rank 0), consider using an in_specs entry of `P()`, "
           "where `P = jax.sharding.PartitionSpec`."
           if scalar else ""))


def _check_divisibility(config: _Config, dynamic):
    mesh = config.mesh
    lines = []
    for leaf in dynamic:
        aval = aval_of(leaf.value)
        for d, names in enumerate(spec_names(leaf.spec)):
            k = 1
            for a in names:
                k *= mesh.shape[a]
            if aval.shape[d] % k == 0:
                continue
            target = (f"mesh axis '{names[0]}' (of size {k})" if len(names) == 1
                      else f"mesh axes {names} (of total size {k})")
            lines.append(
                f"the passed args{leaf.path} of shape {aval.str_long()}, where "
                f"args[{leaf.arg_index}] is "
                f"bound to {_param_text(config, leaf.arg_index)}, corresponds to "
                f"in_specs{leaf.spec_path} of value {leaf.spec!r}, which maps array axis {d} "
                f"(of size {aval.shape[d]}) to {target}, but {k} does not evenly divide "
                f"{aval.shape[d]}")
    if not lines:
        return
    text = lines[0] if len(lines) == 1 else "\n\n".join("* " + l for l in lines)
    raise ShardingSpecError(
        f"shard_map applied to the function '{config.name}' was given argument arrays with axis "
        "sizes that are not evenly divisible by the corresponding mesh axis sizes:\n\n"
        f"The mesh given has shape {mesh.axis_sizes} with corresponding axis names "
        f"{mesh.axis_names}.\n\n{text}\n\nArray arguments' axis sizes must be evenly divisible "
        "by the mesh axis or axes indicated by the corresponding elements of the argument's "
        "in_specs entry. Consider checking that in_specs are correct, and if so consider "
        f"changing the mesh axis sizes or else padding the input and adapting '{config.name}' "
        "appropriately.")


def _flatten_outputs(config: _Config, result, out_store: dict) -> list:
    """Flatten the body's result, match out_specs, check ranks, lift to the named axes."""
    outs, treedef = tree.tree_flatten(result)
    paths = tree.leaf_paths(result)
    for out, path in zip(outs, paths):
        check_jax_value(out, f"shard_map of '{config.name}': its output {config.name}(*args)"
                             f"{path}")
    specs, spec_paths, canonical = _layout(config, ("out", treedef),
                                           lambda: _output_layout(config, result))
    _check_output_ranks(config, outs, specs, spec_paths, paths)
    out_store.update(treedef=treedef, specs=canonical, user_specs=specs, paths=spec_paths,
                     weak=[weakly_typed(out) for out in outs])
    if not config.check_vma:
        return outs
    lifted = [lift_to_out_spec(out, spec, config.mesh) for out, spec in zip(outs, specs)]
    for out, spec in zip(lifted, specs):
        check_out_ur(aval_of(out), spec)
    return lifted


def lift_to_out_spec(out, spec, mesh):
    """An output cast to the type its out_spec asks (JAX's implicit pvary and
    vary_unreduced_cast): varying over the axes the spec splits, unreduced over those it
    names unreduced."""
    aval = aval_of(out)
    missing = [a for a in mesh.axis_names if a in spec_axes(spec) and a not in aval.vma]
    if missing:
        out = bind(coll.pvary_p, out, mesh_axes=tuple(missing))
    unreduced = [a for a in mesh.axis_names if a in spec.unreduced and a not in aval.unreduced]
    if unreduced:
        out = bind(coll.vary_unreduced_cast_p, out, mesh_axes=tuple(unreduced))
    return out


def check_out_ur(aval, spec) -> None:
    """JAX's ValueError for an output whose unreduced or reduced axes are not its spec's."""
    for which in ("unreduced", "reduced"):
        if getattr(spec, which) != getattr(aval, which):
            raise ValueError(f"out_specs passed to shard_map should be equal to the {which} "
                             f"present on the out_aval. Got out_specs={spec} and "
                             f"out_aval={aval.str_long(short=True)}")


def _output_layout(config: _Config, result) -> tuple:
    """How the out_specs cover a result of this structure: each output's spec, its key path
    and its canonical form."""
    if config.out_specs is None and result is None:
        return [], [], []
    _check_spec_axes(config.out_specs, config.mesh, "out_specs", config.manual_axes)
    specs, spec_paths = _broadcast_specs(config.out_specs, result, "shard_map out_specs")
    for spec, path in zip(specs, spec_paths):
        if spec is None:
            raise ShardingSpecError(f"shard_map out_specs{path} is None; outputs need a "
                                    "PartitionSpec (P() for a replicated output)")
    return specs, spec_paths, [canonical_spec(s) for s in specs]


def _check_output_ranks(config: _Config, outs, specs, spec_paths, paths):
    lines = []
    scalar = False
    for out, spec, spec_path, path in zip(outs, specs, spec_paths, paths):
        aval = aval_of(out).strip_vma()
        if len(spec) > aval.ndim:
            scalar |= aval.ndim == 0
            lines.append(f"out_specs{spec_path} is {spec!r} which has length {len(spec)}, but "
                         f"{config.name}(*args){path} has shape {aval.str_short()}, which has "
                         f"rank {aval.ndim} (and {aval.ndim} < {len(spec)})")
    if not lines:
        return
    text = lines[0] if len(lines) == 1 else "\n\n".join("* " + l for l in lines)
    raise ShardingSpecError(
        f"shard_map applied to the function '{config.name}' was given an out_specs entry which "
        "is too long to be compatible with the corresponding output value from the function:\n\n"
        f"{text}\n\nEntries in out_specs must be of length no greater than the number of axes "
        "in the corresponding output value.\n\nEither revise the spec to be shorter, or modify "
        f"'{config.name}' so that its outputs have sufficient rank."
        + ("\n\nFor scalar values (rank 0), consider using an out_specs entry of `P()`, "
           "where `P = jax.sharding.PartitionSpec`. In "
           "particular, for rank 0 outputs which are not constant over the mesh, add at least "
           "one (singleton) axis to them so that they can be concatenated using out_specs."
           if scalar else ""))


def block_avals(mesh: Mesh, in_specs, avals, manual: tuple = (), check: bool = True) -> list:
    """Each input's block aval; it varies over the axes its spec names, and is unreduced or
    reduced as the spec says (with the check on: JAX's bodies type neither otherwise). Over a
    mesh some of whose Explicit axes stay automatic (``manual`` names the others), a block
    keeps its type's split over those, along every dimension, as JAX's."""
    kept = tuple(a for a in mesh.explicit_axes if a not in manual) if manual else ()
    return [Aval(block_shape(a.shape, spec, mesh.shape), a.dtype, frozenset(spec_axes(spec)),
                 type_sharding=_kept_split(a, kept, mesh) if kept else None,
                 unreduced=spec.unreduced if check else frozenset(),
                 reduced=spec.reduced if check else frozenset())
            for a, spec in zip(avals, in_specs)]


def _kept_split(aval, kept: tuple, mesh):
    """The part of ``aval``'s type split over the automatic Explicit axes ``kept``, along
    every dimension (one the spec splits over a manual axis too, as JAX's
    ``modify_spec_for_auto_manual``)."""
    typed = aval.type_sharding
    if not kept or typed is None or typed.mesh.axis_names != mesh.axis_names:
        return None
    split = tuple(tuple(a for a in names if a in kept) for names in typed.spec)
    return TypeSharding.of(mesh, split) if any(split) else None


def check_replication(params, out_vmas, out_origins) -> None:
    """The output check of SEMANTICS 3.5, when the check is on."""
    config = params["config"]
    if not config.check_vma:
        return
    store = params["out_store"]
    check_out_specs(fn_name=config.name, flag=config.flag, mesh=config.mesh,
                    out_specs=store["user_specs"], out_vmas=out_vmas, out_origins=out_origins,
                    out_paths=store["paths"], manual_axes=config.manual_axes)


def check_staged_replication(params, body: Program, in_vmas) -> None:
    """``check_replication`` of a traced body. Its outputs' types already say what they vary
    over; only when the check fails is the body interpreted again (``infer_vma``) for the
    line where each axis came in."""
    if not params["config"].check_vma:
        return
    out_vmas = [frozenset() if isinstance(a, Literal) else a.aval.vma for a in body.outvars]
    try:
        check_replication(params, out_vmas, [{}] * len(out_vmas))
        return
    except ReplicationError as err:
        without_origins = err
    out_vmas, origins = infer_vma(body, in_vmas)
    check_replication(params, out_vmas, origins)     # raises, naming where each axis came in
    raise without_origins


# --- staging: one shard_map equation carrying the traced body ----------------------------------

def stage_shard_map(trace, fun, args, params):
    """Trace the body at block avals under ``trace`` and emit a ``shard_map`` equation."""
    mesh = params["mesh"]
    in_specs = params["in_specs"]
    manual = params["config"].manual_axes
    in_avals = block_avals(mesh, in_specs, [aval_of(a) for a in args], manual,
                           params["check_vma"] is True)
    shard = ShardContext(mesh, params["check_vma"] is True, frozenset(manual))
    with in_body(shard):
        # a weakly typed argument (a Python scalar given to jit) stays weak in the body
        body, closed, _ = trace_to_program(fun, in_avals, shard=shard, parent=trace,
                                           weak=[getattr(a, "weak", False) for a in args])
    # Closed-over values become leading inputs, replicated over the mesh.
    body = Program([], body.constvars + body.invars, body.eqns, body.outvars)
    all_specs = (PartitionSpec(),) * len(closed) + tuple(in_specs)
    check_staged_replication(params, body, [frozenset(spec_axes(s)) for s in all_specs])
    eqn_params = dict(jaxpr=body, mesh=mesh, in_specs=all_specs,
                      out_specs=tuple(params["out_store"]["specs"]),
                      check_vma=params["check_vma"])
    return trace.process_primitive(prims.shard_map_p,
                                   [trace.to_tracer(v) for v in list(closed) + list(args)], eqn_params)


# --- a shard_map inside another's body ------------------------------------------------------
# A shard_map called inside another shard_map's body (nested), over axes the outer one left
# automatic (``axis_names`` a strict subset of the mesh axes).
#
# The outer body sees values whole along its automatic axes; every device along them holds the
# same copy. The inner shard_map splits such values over its own axes, so its body is inlined
# into the outer one with the boundary written in collectives the rest of shardc already knows:
#
#     input, spec P('y') on (4,):      [a b c d] on every y   ->  y=0: [a], y=1: [b], ...
#         this device's chunk: dynamic_slice at axis_index('y') * block (no communication)
#     output, spec P('y'):             y=0: [a'], y=1: [b'] ...  ->  [a' b' c' d'] on every y
#         all_gather(tiled, to='invarying') over the named axes (invariant again after)
#     output, spec P() (check off):    the coordinate-0 copy, gathered and taken, as JAX does
#
# so the traced program, the lowered per-device programs, every backend and autodiff treat a
# nested shard_map as the collectives it is.

def call_nested(config, args: tuple, outer):
    """Run shard_map ``config`` on ``args`` inside the body of ``outer`` (a ShardContext)."""
    mesh = config.mesh
    if mesh.axis_names != outer.mesh.axis_names or mesh.axis_sizes != outer.mesh.axis_sizes:
        raise ValueError(f"shard_map '{config.name}' is called inside a shard_map body on "
                         f"{outer.mesh}, but its mesh is {mesh}; a nested shard_map uses "
                         "the enclosing mesh")
    already = [a for a in config.manual_axes if a in outer.manual]
    new_axes = tuple(a for a in config.manual_axes if a not in outer.manual)
    specs, spec_paths = _broadcast_specs(config.in_specs, args, "shard_map in_specs")
    _check_not_already_manual(config.in_specs, already, "in_specs")
    leaves, treedef = tree.tree_flatten(args)
    paths = tree.leaf_paths(args)
    dynamic = [_Leaf(v, s, q, _arg_index(q), sp)
               for v, s, q, sp in zip(leaves, specs, paths, spec_paths) if s is not None]
    _check_ranks(config, dynamic)
    _check_divisibility(config, dynamic)
    blocks = [_own_block(_typed_without(v, new_axes), s, mesh) if s is not None else v
              for v, s in zip(leaves, specs)]
    inner = ShardContext(mesh, outer.check_vma, frozenset(outer.manual) | frozenset(new_axes))
    with in_body(inner):
        result = config.f(*tree.tree_unflatten(treedef, blocks))
    store: dict = {}
    outs = _flatten_outputs(config, result, store)
    _check_not_already_manual(config.out_specs, already, "out_specs")
    if config.check_vma and outer.check_vma:
        check_out_specs(fn_name=config.name, flag=config.flag, mesh=mesh,
                        out_specs=store["user_specs"],
                        out_vmas=[aval_of(o).vma for o in outs], out_origins=[{}] * len(outs),
                        out_paths=store["paths"], manual_axes=new_axes)
    checked = config.check_vma and outer.check_vma
    assembled = [_typed_as_result(_assemble(o, s, mesh, new_axes, checked), s, aval_of(o), mesh)
                 for o, s in zip(outs, store["specs"])]
    return tree.tree_unflatten(store["treedef"], assembled)


def _check_not_already_manual(specs, already, which):
    for spec in tree.tree_leaves(specs, is_leaf=_is_spec_leaf):
        for a in (spec_axes(spec) if spec is not None else ()):
            if a in already:
                raise ShardingSpecError(
                    f"shard_map {which} refers to {a!r}, which the enclosing shard_map is "
                    "already manual over; a nested shard_map may split only over axes the "
                    "enclosing one left automatic (its axis_names)")


def _typed_without(value, axes: tuple):
    """``value`` with its type no longer split over ``axes``, Explicit axes the enclosing body
    left automatic that the nested shard_map makes manual: its blocks are typed as JAX's are,
    split over the automatic axes only. The enclosing body holds the value whole along them, so
    the change is one of type only."""
    typed = aval_of(value).type_sharding
    if typed is None or not set(typed.axes) & set(axes):
        return value
    spec = tuple(tuple(a for a in names if a not in axes) for names in typed.spec)
    return bind(prims.sharding_constraint_p, value,
                sharding=NamedSharding(typed.mesh, PartitionSpec(*partitions(spec))))


def _typed_as_result(value, spec, body_aval, mesh):
    """An assembled output of a nested shard_map typed as JAX types a shard_map's result: split
    over the Explicit axes its out_spec names, then as the body's result was (a type change:
    the enclosing body holds it whole along those axes)."""
    if not mesh.explicit_axes:
        return value
    split = shard_map_result_split(mesh, spec, body_aval)
    if split == spec_of(aval_of(value)):
        return value
    return bind(prims.sharding_constraint_p, value,
                sharding=NamedSharding(mesh, PartitionSpec(*partitions(split))))


def _own_block(value, spec, mesh):
    """This device's block of a value every device along the spec's axes holds whole."""
    shape = aval_of(value).shape
    starts = [np.int32(0)] * len(shape)
    sizes = list(shape)
    split = False
    for d, names in enumerate(spec_names(spec)):
        if not names:
            continue
        size = sizes[d] // axes_size(mesh.shape, names)
        rank = bind(coll.axis_index_p, mesh_axes=tuple(names))
        starts[d] = bind(prims.mul_p, rank, np.int32(size))
        sizes[d] = size
        split = True
    if not split:
        return value
    return bind(prims.dynamic_slice_p, value, *starts, slice_sizes=tuple(sizes))


def _assemble(value, spec, mesh, new_axes, checked: bool):
    """Gather an inner output back along the axes its spec names; along the inner axes it does
    not name, keep one copy (equal copies when checked; the coordinate-0 one otherwise)."""
    for d, names in enumerate(spec_names(spec)):
        if names:
            value = bind(coll.all_gather_p, value, mesh_axes=tuple(names), gather_axis=d,
                         tiled=True, axis_size=axes_size(mesh.shape, names), to="invarying")
    unnamed = tuple(a for a in new_axes if a not in spec_axes(spec))
    if unnamed and not checked:
        copies = bind(coll.all_gather_p, value, mesh_axes=unnamed, gather_axis=0, tiled=False,
                      axis_size=axes_size(mesh.shape, unnamed), to="invarying")
        shape = aval_of(copies).shape
        first = bind(prims.dynamic_slice_p, copies, *([np.int32(0)] * len(shape)),
                     slice_sizes=(1,) + tuple(shape[1:]))
        value = bind(prims.squeeze_p, first, dimensions=(0,))
    return value
