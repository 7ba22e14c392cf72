"""``shardc.sharding``: meshes, partition specs and shardings (JAX's names), the current
mesh that ``set_mesh`` installs, and the layout constraints (``reshard``,
``with_sharding_constraint``, which ``shardc.lax`` exports too)."""
from __future__ import annotations

import contextlib
import functools

import numpy as np

from compiler import tree
from compiler.backend import get_backend
from compiler.jit import jit
from compiler.shard_map import current_shard_context
from compiler.tracing import (Tracer, aval_of, bind, current_trace, eval_trace,
                              layout_of_value, weakened, weakly_typed)
from ir import primitives as p
from ir.layout import sharding_of_format
from ir.sharding import (EMPTY_CONCRETE_MESH, EMPTY_MESH, UNCONSTRAINED, AbstractDevice,
                         AbstractMesh, AxisType,
                         ManualAxisType, Mesh, NamedSharding, PartitionSpec,
                         ReplicationError, Sharding, ShardingTypeError, concrete_mesh_for,
                         current_mesh,
                         check_rank, legacy_mesh, pop_mesh, push_mesh, read_back_entries,
                         spec_axes, spec_names, standing_for_abstract)
from ir.sharding_rules import named_sharding, p_text, partitions, spec_from_user
from runtime.array import SingleDeviceSharding
from runtime.devices import devices as all_devices

__all__ = ["AbstractDevice", "AbstractMesh", "AxisType", "ManualAxisType", "Mesh",
           "ShardingTypeError", "auto_axes", "explicit_axes", "NamedSharding", "PartitionSpec",
           "ReplicationError", "Sharding", "SingleDeviceSharding", "get_abstract_mesh", "get_mesh",
           "make_single_device_sharding", "reshard", "set_mesh", "use_abstract_mesh", "use_mesh"]


class _MeshScope(contextlib.AbstractContextManager):
    """The handle ``set_mesh`` returns: the mesh is current from the call on; leaving a
    ``with`` block restores the previous one."""

    def __init__(self, mesh: Mesh | None):
        if mesh is not None and not isinstance(mesh, Mesh):
            raise ValueError(f"Expected mesh of type `jax.sharding.Mesh`. Got {type(mesh)}")
        if mesh is not None and mesh.manual_axes:
            raise ValueError(f"mesh {mesh} contains manual axes which is not allowed when "
                             "using `jax.set_mesh`. Please use `jax.shard_map` to enter into "
                             "`Manual` mode instead.")
        # None or the empty mesh: no mesh is current (JAX's set_mesh(None), set_mesh(Mesh()))
        self.mesh = None if mesh is not None and mesh.empty else mesh
        push_mesh(self.mesh)

    def __exit__(self, *exc):
        pop_mesh(self.mesh)
        return False


def set_mesh(mesh: Mesh | None) -> _MeshScope:
    """Make ``mesh`` the current mesh: ``shard_map`` without ``mesh=``, ``device_put(x, P(...))``
    and ``out_sharding=P(...)`` use it (None: no mesh). Works as a call or as a context
    manager. A mesh with Manual axes is JAX's ValueError (shard_map makes axes manual); so is
    a call under a trace (inside jit, grad, vmap or a shard_map body), where the mesh is fixed
    already."""
    if current_trace() is not eval_trace:
        raise ValueError("`set_mesh` can only be used outside of `jax.jit`.")
    return _MeshScope(mesh)


def use_mesh(mesh: Mesh) -> _MeshScope:
    """``with use_mesh(mesh):`` makes ``mesh`` current inside the block (JAX's context-manager
    spelling of ``set_mesh``)."""
    return _MeshScope(mesh)


def get_abstract_mesh() -> AbstractMesh:
    """The mesh code is traced under, as an ``AbstractMesh`` (sizes, names, axis types): inside
    a shard_map body, that body's mesh with the axes it is manual over typed Manual (what a
    nested shard_map may pass as ``mesh=``); else
    the current mesh; else the empty one (``.empty``). Inside ``auto_axes`` its axes are Auto,
    as JAX reports them there."""
    body = current_shard_context()
    mesh = body.mesh if body is not None else current_mesh()
    if mesh is None:
        return EMPTY_MESH
    abstract = getattr(mesh, "given_abstract", None) or mesh.abstract_mesh
    if body is not None:
        abstract = body_abstract_mesh(body)
    if _AUTO_AXES and set(_AUTO_AXES[-1]) & set(abstract.axis_names):
        types = tuple(AxisType.Auto if n in _AUTO_AXES[-1] else t
                      for n, t in zip(abstract.axis_names, abstract.axis_types))
        abstract = AbstractMesh(abstract.axis_sizes, abstract.axis_names, types,
                                _device_kind=abstract._device_kind)
    return abstract


def body_abstract_mesh(body) -> AbstractMesh:
    """A shard_map body's mesh as its code sees it: the axes it is manual over typed Manual
    (JAX's context mesh there)."""
    abstract = body.mesh.abstract_mesh
    manual = set(body.manual)
    types = tuple(AxisType.Manual if n in manual else t
                  for n, t in zip(abstract.axis_names, abstract.axis_types))
    return AbstractMesh(abstract.axis_sizes, abstract.axis_names, types,
                        _device_kind=abstract._device_kind)


# the axes each enclosing auto_axes call takes out of the types (innermost last)
_AUTO_AXES: list = []


@contextlib.contextmanager
def use_abstract_mesh(mesh: AbstractMesh):
    """Code inside sees ``mesh`` (an ``AbstractMesh``) as the current mesh: the current mesh's
    devices, in order, arranged as ``mesh`` says (its size must be theirs). PartitionSpecs and
    ``reshard`` inside refer to it (JAX's ``use_abstract_mesh``); ``get_abstract_mesh`` inside
    gives ``mesh`` itself."""
    if not isinstance(mesh, AbstractMesh):
        raise ValueError("Expected mesh of type `jax.sharding.AbstractMesh`. Got type:"
                         f" {type(mesh)}")
    current = current_mesh()
    if current is not None and current.size != mesh.size and not mesh.empty:
        raise ValueError("use_abstract_mesh cannot change the size of the mesh. Got new mesh: "
                         f"{mesh} with size={mesh.size} and prev mesh: "
                         f"{current.abstract_mesh} with size={current.size}")
    devices = current.devices.flat if current is not None else all_devices()[:mesh.size]
    devices = list(devices)
    if len(devices) != mesh.size:
        raise ValueError(f"use_abstract_mesh: the mesh {mesh} has {mesh.size} devices, but the "
                         f"current mesh has {len(devices)}")
    concrete = Mesh(np.array(devices, dtype=object).reshape(mesh.axis_sizes), mesh.axis_names,
                    axis_types=mesh.axis_types)
    concrete.given_abstract = mesh      # what get_abstract_mesh gives inside (JAX's)
    with standing_for_abstract(concrete), _MeshScope(concrete):
        yield concrete


def get_mesh() -> Mesh:
    """The current mesh (``set_mesh``/``use_mesh``), or the empty mesh ``Mesh()`` outside any
    (JAX's; ``.empty`` tells them apart).

    >>> get_mesh().empty
    True

    Under a trace it is JAX's ValueError (the abstract mesh is what traced code sees).
    """
    if current_trace() is not eval_trace:
        raise ValueError("`get_mesh` can only be used outside of `jax.jit`. Maybe you want "
                         "`jax.sharding.get_abstract_mesh()`?")
    mesh = current_mesh()
    return EMPTY_CONCRETE_MESH if mesh is None else mesh


def concrete_named(sharding: NamedSharding) -> NamedSharding:
    """A NamedSharding on an abstract mesh (``jax.typeof(x).sharding``) on the concrete mesh
    in context that it describes; as it is where there is none."""
    mesh = concrete_mesh_for(sharding.mesh) if isinstance(sharding.mesh, AbstractMesh) else None
    if mesh is None:
        return sharding
    return NamedSharding(mesh, sharding.spec, memory_kind=sharding.memory_kind)


def resolve_sharding(sharding, what: str):
    """A NamedSharding, SingleDeviceSharding or device as given; a bare PartitionSpec on the
    current mesh (a sharding constraint in a shard_map body without one: on the body's mesh,
    as JAX's)."""
    if isinstance(sharding, NamedSharding) and isinstance(sharding.mesh, AbstractMesh) \
            and what != "device_put":
        return concrete_named(sharding)
    if isinstance(sharding, (NamedSharding, SingleDeviceSharding)):
        return sharding
    if isinstance(sharding, PartitionSpec):
        mesh = current_mesh()
        body = (current_shard_context() if mesh is None and what == "with_sharding_constraint"
                else None)
        if body is not None:
            mesh = body.mesh
        if mesh is None and what == "with_sharding_constraint":
            mesh = legacy_mesh()
        if mesh is None:
            if what == "device_put":       # JAX's words
                raise ValueError("Please set a mesh via `jax.set_mesh` if a PartitionSpec is "
                                 "passed to device_put")
            if what == "with_sharding_constraint":
                raise RuntimeError(
                    "with_sharding_constraint requires a non-empty mesh in context if you are "
                    "passing `PartitionSpec`s to shardings. You can define a context mesh via "
                    "`jax.set_mesh(mesh)`. Alternatively, provide `Sharding`s to shardings and "
                    "then the mesh context manager is not required.")
            if what in ("jit in_shardings", "jit out_shardings"):
                option = what.split()[1]
                raise RuntimeError(
                    f"jit requires a non-empty mesh in context if you are passing "
                    f"`PartitionSpec`s to {option}. You can define a context mesh via "
                    f"`jax.set_mesh(mesh)`. Alternatively, provide `Sharding`s to {option} and "
                    "then the mesh context manager is not required.")
            # reshard, and an out_sharding= (matmul, einsum, reshape, zeros, ...): JAX's words
            raise ValueError(
                "Using PartitionSpec when you are not under a mesh context is not "
                "allowed. Please pass a NamedSharding instance or enter into a mesh "
                f"context via `jax.set_mesh`. Got {p_text(spec_names(sharding))}")
        return NamedSharding(mesh, sharding)
    if hasattr(sharding, "id") and hasattr(sharding, "platform"):
        return SingleDeviceSharding(sharding)
    if what == "device_put":
        raise ValueError("`jax.device_put` only accepts `None`, `jax.sharding.Sharding`, "
                         "`jax.Device`, `Format`, `jax.memory.Space` or a pytree of these "
                         f"values. Received invalid value: {sharding}")
    raise TypeError(f"{what} requires a NamedSharding, a PartitionSpec with a mesh set, or a "
                    f"device, got {sharding!r} of type {type(sharding).__name__}")


def with_sharding_constraint(x, shardings):
    """Ask for ``x`` (a pytree) to be laid out by ``shardings``: a NamedSharding, a
    PartitionSpec on the current mesh, or a pytree prefix of those.

    On a mesh whose axes are all Explicit the layout is in the types already: as in JAX, the
    constraint asserts that the type says so (AssertionError otherwise) and does nothing;
    ``reshard`` changes a type. On a mesh with Explicit and Auto axes it may name Auto axes
    only."""
    return _constrained(x, shardings, "with_sharding_constraint")


def check_context_mesh(sharding, name: str) -> None:
    """JAX's ValueError for a result's NamedSharding on another mesh (by its axes) than the
    mesh set; meshes of Auto axes only may differ (JAX allows that for old code). Not in a
    shard_map body: types there are on the mesh outside, whose axes the body sees Manual."""
    if not isinstance(sharding, NamedSharding) or current_shard_context() is not None:
        return
    context, given = get_abstract_mesh(), sharding.mesh.abstract_mesh
    if context.empty or given == context or (
            given.are_all_axes_auto and context.are_all_axes_auto):
        return
    raise ValueError(f"Context mesh {context} should match the mesh of sharding {given} "
                     f"passed to {name}.")


def check_explicit_axes(sharding, name: str) -> None:
    """JAX's ValueError for a result's sharding (``out_sharding``, ``reshard``) naming an
    axis that is not Explicit: only types say how a result is split, and only Explicit axes
    are in types (Auto ones are the compiler's; a body's are Manual)."""
    spec = sharding.spec if isinstance(sharding, NamedSharding) else sharding
    mesh = sharding.mesh if isinstance(sharding, NamedSharding) else get_abstract_mesh()
    kinds = dict(zip(mesh.axis_names, mesh.axis_types))
    for axes in spec_names(spec):
        for axis in axes:
            if kinds.get(axis, AxisType.Explicit) is not AxisType.Explicit:
                raise ValueError(
                    f"PartitionSpec passed to {name} cannot contain axis names that are of "
                    f"type Auto or Manual. Got PartitionSpec: {spec!r} with axis name: {axis} "
                    f"of type: {kinds[axis]}.")


def open_over_auto_axes(sharding, ndim: int):
    """A result's layout from its type's sharding on a mesh with Auto axes, as JAX lowers it:
    the dimensions its type splits over no axis are left to propagation
    (``P.UNCONSTRAINED``), so the Auto axes its operands are split over carry into it. On an
    all-Auto mesh that is every dimension: JAX lowers no constraint there at all. On other
    meshes ``sharding`` as it is."""
    mesh = sharding.mesh
    if not mesh.auto_axes:
        return sharding
    names = spec_names(sharding.spec)
    names += ((),) * (ndim - len(names))
    return sharding.with_spec(PartitionSpec(*(
        axes if axes else PartitionSpec.UNCONSTRAINED for axes in names)))


def _check_no_manual_axes(sharding) -> None:
    """JAX's refusal of a constraint in a shard_map body naming a manual axis (the body
    holds one block along it: there is nothing to lay out over it)."""
    body = current_shard_context()
    if body is None:
        return
    manual = body.manual
    if any(a in manual for a in spec_axes(sharding.spec)):
        raise ValueError(
            f"pspec {sharding.spec} contains a manual axes {tuple(manual)} of mesh which is not "
            "allowed. If you are using a with_sharding_constraint under a shard_map, only use "
            "the mesh axis in PartitionSpec which are not manual.")


def _check_auto_in_body(sharding) -> None:
    """JAX's refusal of a bare PartitionSpec constraint in a shard_map body naming an axis
    the body's mesh does not have as Auto (a manual one; an Explicit one is refused below)."""
    body = current_shard_context()
    if body is None or body.mesh.axis_names != sharding.mesh.axis_names:
        return
    if any(a in body.manual for a in spec_axes(sharding.spec)):
        raise ValueError(
            "The spec of NamedSharding passed to with_sharding_constraint can only refer to "
            f"Auto axes of the mesh. Got spec={p_text(spec_names(sharding.spec))} and "
            f"mesh={_context_text(sharding.mesh)!r}. You probably meant to use `reshard` API?")


def _context_text(mesh):
    """``mesh`` as JAX names it in a constraint's error: in a shard_map body on it, the body's
    abstract mesh (its manual axes typed Manual)."""
    body = current_shard_context()
    if body is not None and body.mesh.axis_names == mesh.axis_names:
        return body_abstract_mesh(body)
    return mesh.abstract_mesh


def reshard(x, out_shardings):
    """``x`` laid out by ``out_shardings`` (a sharding, a PartitionSpec on the current mesh, or
    a pytree prefix of those), eagerly or under a trace; on Explicit axes its type changes
    to say so."""
    return _constrained(x, out_shardings, "reshard")


def _on_devices(sharding, leaf):
    """A sharding on an abstract mesh, on the devices it stands for: those of the mesh set
    (``set_mesh``), else those the value is laid out on, where that mesh is the abstract one
    (JAX takes the devices from the computation's); as it is where neither is."""
    abstract = sharding.mesh
    meshes = [current_mesh()]
    value = leaf
    while value is not None:      # a batched value's own layout is its batch's (vmap)
        # a traced value's concrete layout (its ``sharding`` is JAX's abstract view)
        layout = (value._layout() if hasattr(value, "_layout")
                  else getattr(value, "sharding", None))
        meshes.append(getattr(layout, "mesh", None))
        value = getattr(value, "value", None) if isinstance(value, Tracer) else None
    for mesh in meshes:
        if isinstance(mesh, Mesh) and mesh.abstract_mesh == abstract:
            return NamedSharding(mesh, sharding.spec)
    return sharding


def _check_same_devices(value, sharding) -> None:
    """JAX's ValueError for an eager constraint (a jitted identity with that out_shardings)
    of a committed array onto other devices, or the same devices in another order."""
    have = [d.id for d in value.sharding._device_assignment]
    want = list(sharding.mesh.flat_device_ids)
    if have != want:
        raise ValueError(
            "Received incompatible devices for jitted computation. Got argument x of "
            f"_identity_fn with shape {aval_of(value).str_long()} and with device ids {have} on "
            f"platform CPU and explicit output sharding with device ids {want} on platform CPU")


def _eagerly_on_devices(sharding, value):
    """A constraint on an abstract mesh applied to a concrete value, as JAX's: a host value
    goes to the mesh set (JAX's ValueError without one); an array must be laid out on a mesh
    of the same axis names and sizes (JAX's TypeError, ValueError), whose devices it takes."""
    text = aval_of(value).str_long()
    layout = getattr(value, "sharding", None)
    if layout is None or (not isinstance(layout, NamedSharding) and current_mesh() is not None
                          and not getattr(value, "_committed", False)):
        # (under a mesh set, JAX makes arrays on it: an uncommitted one goes there too)
        mesh = current_mesh()
        if mesh is None:
            raise ValueError("Target sharding contains a `jax.sharding.AbstractMesh` which "
                             "requires the input passed should be a `jax.Array`. Got "
                             f"{type(value)} with shape {text}")
        return NamedSharding(mesh, sharding.spec)
    if not isinstance(layout, NamedSharding):
        raise TypeError("The sharding on the input must be a `NamedSharding` since the target "
                        f"sharding has an `AbstractMesh` in it. Got sharding type "
                        f"{type(layout)} for shape {text}")
    if layout.mesh.shape_tuple != sharding.mesh.shape_tuple:
        raise ValueError(f"Mesh shape of the input {layout.mesh.shape_tuple} does not match "
                         f"the mesh shape of the target sharding {sharding.mesh.shape_tuple} "
                         f"for shape {text}")
    return NamedSharding(layout.mesh, sharding.spec)


def _constrained(x, shardings, what: str):
    """``x``'s leaves laid out by ``shardings`` (a prefix of ``x``'s tree): JAX's
    ``with_sharding_constraint`` or ``reshard``, as ``what`` names it."""
    leaves, treedef = tree.tree_flatten(x)
    constraint = what == "with_sharding_constraint"
    out = []
    for leaf, target in zip(leaves, _targets(x, shardings, what)):
        if constraint:      # a Format: its (row-major) layout, and its sharding (JAX's)
            target = sharding_of_format(target, np.shape(leaf), what)
        sharding = resolve_sharding(target, what)
        if constraint and isinstance(sharding, SingleDeviceSharding):
            out.append(_on_one_device(leaf, sharding))
            continue
        sharding = _on_a_device_mesh(leaf, target, sharding, what)
        out.append(_constraint(leaf, target, sharding) if constraint
                   else _reshard(leaf, sharding))
    return tree.tree_unflatten(treedef, out)


def _targets(x, shardings, what: str) -> list:
    """The sharding (or spec) asked of each leaf of ``x``: ``shardings`` a prefix of its tree
    (with_sharding_constraint refuses a None among them, as JAX's)."""
    is_leaf = tree.is_spec_leaf
    if what != "with_sharding_constraint":
        return tree.broadcast_prefix(shardings, x, is_leaf=is_leaf, name=f"{what} shardings")
    targets = tree.flatten_axes(f"{what} shardings", shardings, x, is_leaf=is_leaf)
    if any(t is None for t in targets):
        raise ValueError("One of with_sharding_constraint arguments got sharding None which "
                         "is not allowed. Please only pass `jax.sharding.Sharding` instances.")
    return targets


def _on_a_device_mesh(leaf, target, sharding, what: str):
    """``sharding`` as a NamedSharding on a mesh of devices (one on an AbstractMesh takes the
    devices ``leaf`` is on, or the current mesh's)."""
    if not isinstance(sharding, NamedSharding):
        raise TypeError(f"{what} requires a NamedSharding or a PartitionSpec on the "
                        f"current mesh, got {target!r}")
    if not isinstance(sharding.mesh, AbstractMesh):
        return sharding
    if (what == "with_sharding_constraint" and not isinstance(leaf, Tracer)
            and current_trace() is eval_trace):
        return _eagerly_on_devices(sharding, leaf)
    return _on_devices(sharding, leaf)


def _rank(leaf) -> int:
    return np.ndim(leaf) if not hasattr(leaf, "shape") else len(leaf.shape)


def _reshard(leaf, sharding):
    """``reshard``: Explicit axes only; the dimensions left unsplit open to propagation on a
    mesh with Auto axes too."""
    check_explicit_axes(sharding, "reshard")
    return _laid_out(leaf, open_over_auto_axes(sharding, _rank(leaf)))


def _constraint(leaf, target, sharding):
    """``with_sharding_constraint``: on Auto axes a layout; under an all-Explicit mesh set, an
    assert of the type (in a shard_map body, or with no mesh set, Auto axes only)."""
    if (getattr(leaf, "_committed", False) and not isinstance(leaf, Tracer)
            and current_trace() is eval_trace and isinstance(sharding.mesh, Mesh)):
        _check_same_devices(leaf, sharding)
    mesh = sharding.mesh      # its spec names its axes, once each (NamedSharding checks)
    check_rank(sharding, _rank(leaf), "with_sharding_constraint arguments")
    if isinstance(target, PartitionSpec):
        _check_auto_in_body(sharding)
    _check_no_manual_axes(sharding)
    if not mesh.explicit_axes:
        return _laid_out(leaf, sharding)
    # in a shard_map body the manual axes are not Explicit: no assert there, the constraint
    # may name Auto axes only (JAX's abstract mesh of the body); nor with no mesh set (JAX
    # asserts on the mesh code runs under, not the sharding's)
    in_body = current_shard_context() is not None
    if len(mesh.explicit_axes) == mesh.ndim and not in_body and current_mesh() is not None:
        named = set(spec_axes(sharding.spec))
        # inside auto_axes these axes are Auto: a layout hint for the values computed whole
        # there, which changes none of them
        if not (named and _AUTO_AXES and named <= set(_AUTO_AXES[-1])):
            _assert_type(leaf, sharding)
        return leaf
    named = [a for a in spec_axes(sharding.spec) if a in mesh.explicit_axes]
    if named:
        raise ValueError(
            "The spec of NamedSharding passed to with_sharding_constraint can only refer to "
            f"Auto axes of the mesh. Got spec={p_text(spec_names(sharding.spec))} and "
            f"mesh={_context_text(mesh)!r}. You probably meant to use `reshard` API?")
    if in_body and not spec_axes(sharding.spec):
        return leaf         # naming no axis: nothing to lay out, the type kept
    if isinstance(leaf, Tracer) or current_trace() is not eval_trace:
        return _laid_out(leaf, _over_type(leaf, sharding))
    # eagerly JAX 0.10.2 runs it as a jitted identity with that out_shardings: laid out (and
    # spelt) as named, the type's split dropped
    result = bind(p.sharding_constraint_p, leaf, sharding=sharding).respelled(sharding)
    return weakened(result) if weakly_typed(leaf) else result


def _laid_out(leaf, sharding):
    """``leaf`` laid out by ``sharding``; a Python number stays weakly typed, as JAX's."""
    if (UNCONSTRAINED in tuple(sharding.spec) and not isinstance(leaf, Tracer)
            and current_trace() is eval_trace):
        # eagerly as under jit (JAX runs an eager constraint as a jitted one): the
        # unconstrained dimensions take what propagation gives them
        return jit(functools.partial(_constraint_of, sharding=sharding))(leaf)
    result = bind(p.sharding_constraint_p, leaf, sharding=sharding)
    return weakened(result) if weakly_typed(leaf) else result


def _on_one_device(value, sharding):
    """A constraint to one device. Eagerly it is JAX's: a jitted identity with that
    ``out_shardings``, so the result is committed there (JAX's ValueError where ``value`` is
    committed to other devices). Under vmap with ``spmd_axis_name`` JAX refuses it; under
    other transformations, a constraint to the default device (where a program on no mesh
    runs) changes nothing; shardc cannot place one value of a program on another device."""
    batched = value
    while isinstance(batched, Tracer):
        if getattr(batched._trace, "spmd_axis_name", None) is not None:
            raise ValueError(
                "If you are using spmd_axis_name parameter of jax.vmap, please make sure to "
                "run your jitted function inside the mesh context manager. Only "
                "`jax.lax.with_sharding_constraint` with `jax.sharding.NamedSharding` as an "
                "input can be transformed with spmd_axis_name batching rules outside of an "
                f"explicit mesh context manager scope {sharding!r}")
        batched = getattr(batched, "value", None)
    if isinstance(value, Tracer) or current_trace() is not eval_trace:
        if sharding == get_backend().default_sharding() and not _laid_out_on_mesh(value):
            return value        # where a program on no mesh runs anyway: nothing to do
        raise NotImplementedError(
            f"with_sharding_constraint to {sharding!r} under a transformation (jit, grad, "
            "vmap): shardc places a value on one device eagerly, or a jitted function's "
            "results through out_shardings")
    return jit(_identity, out_shardings=sharding)(value)


def _identity(value):
    return value


def _laid_out_on_mesh(value) -> bool:
    """Whether a traced value is known to lie on a mesh (its type or its operands' layouts
    say so)."""
    layout = layout_of_value(value)
    return isinstance(layout, NamedSharding) and not layout.mesh.empty


def _constraint_of(value, sharding):
    return bind(p.sharding_constraint_p, value, sharding=sharding)


def _over_type(value, sharding):
    """A constraint over the Auto axes of a mesh with Explicit ones too, as the layout it asks
    of ``value``: each dimension split over its type's Explicit axes (a constraint keeps the
    type), then over the Auto axes the constraint names."""
    typed = aval_of(value).type_sharding
    names = list(spec_names(sharding.spec))
    if typed is None or len(names) > len(typed.spec):
        return sharding
    names += [()] * (len(typed.spec) - len(names))
    merged = [tuple(t) + tuple(n) for t, n in zip(typed.spec, names)]
    return NamedSharding(sharding.mesh, PartitionSpec(*partitions(merged)))


def _assert_type(leaf, sharding) -> None:
    aval = aval_of(leaf)
    have = aval.type_sharding.spec if aval.type_sharding is not None else ((),) * aval.ndim
    given = spec_from_user(sharding.spec, aval.ndim, sharding.mesh)
    if have != given:
        raise AssertionError(
            "`with_sharding_constraint` acts as an assert when all axes of mesh are of type "
            f"`Explicit`. The array sharding: {p_text(have)} did not match the sharding "
            f"provided: {p_text(given)}. Please use `jax.sharding.reshard` to shard your "
            "input to the sharding you want.")


def auto_axes(fun=None, *, axes=None, out_sharding=None):
    """Run ``fun`` with ``axes`` (default: every axis of the mesh) out of its arguments'
    types, then lay its results out by ``out_sharding`` (JAX's ``auto_axes``; it may also be
    given at the call). Inside, no sharding rule can object to a split over those axes, since
    nothing is split over them: the arguments are gathered along them, and the partitioner
    computes the results whole there before cutting them to ``out_sharding``.

        f = auto_axes(lambda a, b: a @ b, out_sharding=P('x', None))
    """
    if fun is None:
        return lambda f: auto_axes(f, axes=axes, out_sharding=out_sharding)

    @functools.wraps(fun)
    def wrapped(*args, out_sharding=out_sharding, **kwargs):
        if out_sharding is None:
            raise TypeError("Missing required keyword argument: 'out_sharding'")
        _check_not_manual(axes)
        mesh = current_mesh() or _mesh_of_sharding(out_sharding)
        dropped = set() if mesh is None else set(
            mesh.axis_names if axes is None else ((axes,) if isinstance(axes, str) else axes))
        if not dropped & set(mesh.explicit_axes if mesh is not None else ()):
            # the axes are Auto already: nothing to do, out_sharding included (JAX's)
            return fun(*args, **kwargs)
        args, kwargs = tree.tree_map(lambda leaf: _without_axes(leaf, mesh, dropped),
                                     (args, kwargs))
        _AUTO_AXES.append(tuple(dropped))
        try:
            result = fun(*args, **kwargs)
        finally:
            _AUTO_AXES.pop()
        return reshard(result, out_sharding)

    return wrapped


def explicit_axes(fun=None, *, axes=None, in_sharding=None):
    """Run ``fun`` with ``axes`` (default: every axis of the current mesh) Explicit, its
    arguments split by ``in_sharding`` (JAX's ``explicit_axes``; required, given here or at
    the call): inside, types name those axes and every operation's rule applies; the
    results leave laid out as they are."""
    if fun is None:
        return lambda f: explicit_axes(f, axes=axes, in_sharding=in_sharding)

    @functools.wraps(fun)
    def wrapped(*args, in_sharding=in_sharding, **kwargs):
        if in_sharding is None:
            raise TypeError("Missing required keyword argument: 'in_sharding'")
        _check_not_manual(axes)
        mesh = current_mesh()
        if mesh is None:
            raise ValueError("Context mesh cannot be empty. Please use `jax.set_mesh` API to "
                             "enter into a mesh context when using `explicit_axes` API.")
        chosen = set(mesh.axis_names if axes is None else
                     ((axes,) if isinstance(axes, str) else axes))
        types = tuple(AxisType.Explicit if n in chosen else t
                      for n, t in zip(mesh.axis_names, mesh.axis_types))
        inner = Mesh(mesh.devices, mesh.axis_names, axis_types=types)
        specs = tree.broadcast_prefix(in_sharding, args,
                                      is_leaf=lambda s: isinstance(s, PartitionSpec),
                                      name="explicit_axes in_sharding")
        leaves, treedef = tree.tree_flatten(args)
        args = tree.tree_unflatten(treedef, [
            reshard(leaf, NamedSharding(inner, spec)) for leaf, spec in zip(leaves, specs)])
        with _MeshScope(inner):
            result = fun(*args, **kwargs)

        def back(leaf):
            sharding = named_sharding(aval_of(leaf))
            if sharding is None or sharding.mesh != inner:
                return leaf
            target = NamedSharding(mesh, sharding.spec)
            if set(spec_axes(sharding.spec)) <= set(mesh.explicit_axes):
                return reshard(leaf, target)
            # onto axes Auto outside: laid out as it was, its type no longer naming them
            # (JAX's mesh_cast); an array is placed so at once
            if not isinstance(leaf, Tracer) and current_trace() is eval_trace:
                from shardc._devices import device_put
                # spelt as JAX reads back the layout its jitted cast leaves
                return device_put(leaf, target.with_spec(
                    PartitionSpec(*read_back_entries(sharding.spec, mesh))))
            with _MeshScope(inner):
                return bind(p.sharding_constraint_p, leaf, sharding=target)
        return tree.tree_map(back, result)

    return wrapped


def explicit_axes_for(out_sharding) -> tuple:
    """The axes shardc's own ``auto_axes`` calls (an operation given ``out_sharding``) take
    out of types, as JAX's pass ``out_sharding.mesh.explicit_axes``: the Explicit axes of the
    mesh the code runs on (in a shard_map body, not those it is manual over), else of the
    sharding's mesh."""
    mesh = get_abstract_mesh()
    if mesh.empty and isinstance(out_sharding, NamedSharding):
        mesh = out_sharding.mesh
    return tuple(mesh.explicit_axes)


def _check_not_manual(axes) -> None:
    """JAX's NotImplementedError for auto_axes/explicit_axes over axes a shard_map body is
    manual over (``axes`` None: every axis of the body's mesh)."""
    body = current_shard_context()
    if body is None:
        return
    chosen = body.mesh.axis_names if axes is None else (
        (axes,) if isinstance(axes, str) else tuple(axes))
    if set(chosen) & set(body.manual):
        raise NotImplementedError(
            "Going from `Manual` AxisType to `Auto` or `Explicit` AxisType is not allowed. "
            "Please file a bug at https://github.com/jax-ml/jax/issues with your use case")


def _mesh_of_sharding(sharding):
    leaves = tree.tree_leaves(sharding, is_leaf=lambda s: isinstance(s, PartitionSpec))
    for leaf in leaves:
        if isinstance(leaf, NamedSharding):
            return leaf.mesh
    return None


def _without_axes(leaf, mesh, dropped):
    """``leaf`` resharded so that its type splits it over none of ``dropped`` (other leaves,
    an index's slices, pass)."""
    aval = getattr(leaf, "aval", None)
    if aval is None or aval.type_sharding is None or not dropped & set(aval.type_sharding.axes):
        return leaf
    kept = [tuple(a for a in names if a not in dropped) for names in aval.type_sharding.spec]
    return reshard(leaf, NamedSharding(aval.type_sharding.mesh,
                                       PartitionSpec(*partitions(kept))))


def make_single_device_sharding(device, *, memory_kind=None):
    """The whole array on ``device`` (JAX's ``make_single_device_sharding``)."""
    return SingleDeviceSharding(device)
