"""``jit`` and ``shard_map`` as JAX's top level has them: shardings, PartitionSpecs and meshes
are resolved against the current mesh (``set_mesh``); a ``shard_map`` without ``mesh=`` or
``in_specs`` resolves them when it is called."""
from __future__ import annotations

import dataclasses
import functools
import warnings

import numpy as np

from compiler import tree
from compiler.jit import Traced
from compiler.jit import jit as _jit
from compiler.layouts import layout_of
from compiler.refs import is_ref
from compiler.shard_map import current_shard_context
from compiler.shard_map import shard_map as _shard_map_impl
from compiler.tracing import aval_of, check_callable
from compiler.vmap import check_axis_spec
from ir import transfer_guard as _transfer_guard
from ir.shape_dtype import ShapeDtypeStruct
from ir.sharding import AbstractMesh, AxisType, Mesh, PartitionSpec, current_mesh, spec_names
from runtime.array import Array, SingleDeviceSharding
from runtime.devices import devices as all_devices
from runtime.devices import local_devices
import shardc.numpy as jnp
from ir.sharding_rules import named_sharding
from shardc._devices import device_put
from shardc.random import PRNGKeyArray, key_data
from shardc.sharding import (NamedSharding, body_abstract_mesh, resolve_sharding,
                             with_sharding_constraint)
from shardc.tree_util import tree_map

__all__ = ["jit", "pmap", "shard_map"]


def jit(fun=None, **options):
    """Compile ``fun``: traced once per signature (shapes, dtypes, shardings, static
    arguments), lowered to per-device programs, cached. ``in_shardings``/``out_shardings``
    take shardings, PartitionSpecs on the current mesh, devices, or pytree prefixes of those.
    See ``compiler.jit.jit`` for every option.

    >>> @partial(jit, static_argnames='n', out_shardings=NamedSharding(mesh, P('x')))
    ... def power(x, n):
    ...     return x ** n
    """
    device, backend = options.pop("device", None), options.pop("backend", None)
    if device is not None or backend is not None:
        return _on_one_device(fun, device, backend, options)
    return _jit(fun, resolve=resolve_sharding, **options)


def _on_one_device(fun, device, backend, options):
    """JAX's deprecated ``jit(f, device=...)`` / ``jit(f, backend=...)``: the arguments are
    moved to that device (the backend's first) and the results come back there, committed."""
    warnings.warn('backend and device argument on jit is deprecated. You can use '
                  '`jax.device_put(..., jax.local_devices(backend="cpu")[0])` on the inputs to '
                  'the jitted function to get the same behavior.', DeprecationWarning,
                  stacklevel=3)
    if device is not None and backend is not None:
        raise ValueError("can't specify both a device and a backend for jit, got "
                         f"device={device!r} and backend={backend!r}")
    for name in ("in_shardings", "out_shardings"):
        if options.get(name) is not None:
            raise ValueError(f"If backend or device is specified on jit, then {name} should "
                             "not be specified.")
    if fun is None:
        return lambda f: _on_one_device(f, device, backend, options)
    target = device if device is not None else local_devices(backend=backend)[0]
    jitted = _jit(fun, resolve=resolve_sharding, **options)

    @functools.wraps(fun)
    def on_device(*args, **kwargs):
        # the arguments' moves are the call's own: implicit transfers, for the guards
        with _transfer_guard.explicit_scope(False):
            moved = tree_map(lambda v: device_put(v, target) if isinstance(
                v, (Array, np.ndarray, np.generic)) else v, (args, kwargs))
        return tree_map(lambda v: device_put(v, target) if isinstance(v, Array) else v,
                        jitted(*moved[0], **moved[1]))
    def lower(*args, **kwargs):
        # lowered for the arguments on the device; a call of it runs as this one
        args, kwargs = jitted._abstract_stand_ins(args, kwargs)
        lowered = jitted.lower(*tree_map(placed, args), **tree_map(placed, kwargs))
        return dataclasses.replace(lowered, runs_as=on_device)

    def placed(v):
        if isinstance(v, (Array, np.ndarray, np.generic)):
            return device_put(v, target)
        if isinstance(v, ShapeDtypeStruct):
            return v.update(sharding=SingleDeviceSharding(target))
        return v

    on_device.lower = lower
    on_device.trace = lambda *args, **kwargs: Traced(lower(*args, **kwargs),
                                                     getattr(fun, "__name__", "fun"))
    on_device.eval_shape = jitted.eval_shape
    on_device.clear_cache = jitted.clear_cache
    return on_device


_INFER = object()   # in_specs not given: take each argument's sharding


_REQUIRED = object()


def shard_map(f=None, *, mesh=None, in_specs=_INFER, out_specs=_REQUIRED, check_vma=True,
              axis_names=frozenset(), _smap=False):
    """Map ``f`` over blocks of its arguments on ``mesh`` (the 2025 call form).

    Each argument is split into blocks by its ``in_specs`` entry; ``f`` runs once per device
    on its blocks and may communicate with collectives (``lax.psum`` ...); outputs are
    assembled by ``out_specs``. ``f=None`` returns a decorator.

    - ``mesh`` omitted: the mesh of ``shardc.set_mesh`` (or ``sharding.use_mesh``) current
      when the function is called, as in JAX; defining it needs no mesh.
    - ``in_specs`` omitted: each argument's own spec when it is laid out on the mesh (under
      ``jit`` and ``grad`` too: traced values keep their layout), else ``P()``;
      ``in_specs=None``: every argument is static (passed unchanged).
    - ``check_vma``: True checks replication statically (SEMANTICS 3); False checks nothing;
      ``'runtime'`` runs the program and verifies that devices holding copies of an output
      hold equal blocks (by value: -0.0 equals 0.0, NaN equals NaN), naming those that differ.

    >>> @partial(shard_map, mesh=mesh, in_specs=P('x'), out_specs=P())
    ... def total(x_block):
    ...     return lax.psum(x_block.sum(), 'x')
    """
    if out_specs is _REQUIRED:
        raise TypeError("shard_map() missing 1 required keyword-only argument: 'out_specs'")
    if f is None:
        return functools.partial(shard_map, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                                  check_vma=check_vma, axis_names=axis_names, _smap=_smap)
    try:
        axis_names = _axis_name_set(axis_names)
    except TypeError as err:
        return _refused_at_call(f, None, err)
    if isinstance(mesh, (Mesh, AbstractMesh)) and not mesh.axis_names:
        return _refused_at_call(f, None, ValueError(
            f"shard_map requires a non-empty mesh. Got {mesh}"))
    abstract = None
    if isinstance(mesh, AbstractMesh):
        # the devices are the current mesh's (an enclosing shard_map body's), found at the call
        abstract, mesh = mesh, None
    if not callable(f):
        _shard_map_impl(f, None, PartitionSpec(), out_specs)     # raises its TypeError
    if mesh is not None:
        # JAX 0.10 checks a shard_map's mesh and specs when it is called: one defined with a
        # bad spec raises at its call, as there (its check runs now, its error then)
        try:
            mapped = _shard_map_impl(f, mesh, PartitionSpec() if in_specs in (_INFER, None)
                                     else in_specs, out_specs, check_vma=check_vma,
                                     flag="check_vma", manual_axes=axis_names)
        except (TypeError, ValueError) as err:
            return _refused_at_call(f, mesh, err)
        if in_specs is not _INFER and in_specs is not None:
            @functools.wraps(f)
            def checked_at_call(*args, **kwargs):
                _check_context_mesh(mesh)
                return mapped(*args, **kwargs)
            checked_at_call.__wrapped_shard_map__ = mapped.__wrapped_shard_map__
            return checked_at_call

    given = abstract if abstract is not None else mesh

    @functools.wraps(f)
    def resolved_at_call(*args, **kwargs):
        _check_context_mesh(given)
        call_mesh = mesh if mesh is not None else _current_mesh(abstract, args)
        if in_specs is None:
            specs = tuple(None for _ in args)
        elif in_specs is _INFER:
            _check_inferable(call_mesh, axis_names, _smap)
            specs = tuple(tree_map(lambda v: _own_spec(v, call_mesh, axis_names or None), a)
                          for a in args)
        else:
            specs = in_specs
        return _shard_map_impl(f, call_mesh, specs, out_specs, check_vma=check_vma,
                               flag="check_vma", manual_axes=axis_names)(*args, **kwargs)

    return resolved_at_call


def _refused_at_call(f, mesh, error: Exception):
    """A shard_map whose definition ``error`` refused: calling it raises the error (JAX checks
    a shard_map when it is called)."""
    @functools.wraps(f)
    def refused(*args, **kwargs):
        _check_context_mesh(mesh)
        raise error.with_traceback(None)
    return refused


def _check_context_mesh(given) -> None:
    """JAX's ValueError for a shard_map given a mesh other than the context's: the mesh set,
    or inside a shard_map body the body's mesh (its manual axes typed Manual; a nested
    shard_map takes the context's mesh: ``mesh=`` omitted, or ``get_abstract_mesh()``)."""
    body = current_shard_context()
    if given is None:
        return
    if body is None:
        # outside any body: the mesh set (``set_mesh``), where one is, must be the one given
        # (its abstract mesh: names, sizes and axis types), as JAX's _shmap_checks
        mesh = current_mesh()
        if mesh is None or not mesh.axis_names:
            return
        context = mesh.abstract_mesh
    else:
        context = body_abstract_mesh(body)
    theirs = given if isinstance(given, AbstractMesh) else given.abstract_mesh
    if theirs != context:
        raise ValueError(f"The context mesh {context} should match the mesh passed to "
                         f"shard_map {given}")


def _current_mesh(abstract=None, args=()):
    """The mesh of the enclosing shard_map body (a nested shard_map), else the one set; when
    ``abstract`` (an AbstractMesh given as ``mesh=``) is given, it must be that mesh's, and
    with no mesh set, the mesh an argument is laid out on that it names (JAX's)."""
    body = current_shard_context()
    current = body.mesh if body is not None else current_mesh()
    if current is None and abstract is not None:
        current = next((layout.mesh for layout in map(layout_of, tree.tree_leaves(args))
                        if isinstance(getattr(layout, "mesh", None), Mesh)
                        and layout.mesh.abstract_mesh == abstract), None)
        # every argument laid out on a mesh must be laid out on one the abstract mesh names
        for leaf in tree.tree_leaves(args):
            laid = getattr(layout_of(leaf), "mesh", None)
            if isinstance(laid, Mesh) and laid.abstract_mesh != abstract:
                raise ValueError(
                    f"Mesh shape of the input {_shape_tuple(laid)} does not match the mesh "
                    f"shape passed to shard_map  {_shape_tuple(abstract)} for shape "
                    f"{aval_of(leaf).str_long()}")
    if current is None and abstract is not None:
        raise ValueError("Please pass `jax.Array`s with a `NamedSharding` as input to "
                         "`shard_map` when passing `AbstractMesh` to the mesh argument.")
    if current is None:
        raise ValueError("The context mesh cannot be empty. Use `jax.set_mesh(mesh)` to enter "
                         "into a mesh context")
    if abstract is not None and (abstract.axis_names, abstract.axis_sizes) != (
            current.axis_names, tuple(current.devices.shape)):
        raise ValueError(f"shard_map was given the abstract mesh {abstract!r}, but the current "
                         f"mesh is {current!r}: an AbstractMesh names the current mesh's axes")
    return current


def _shape_tuple(mesh) -> tuple:
    """JAX's ``mesh.shape_tuple``: ``(('x', 2), ...)``."""
    return tuple(zip(mesh.axis_names, mesh.axis_sizes))


def _axis_name_set(axis_names) -> frozenset:
    if not isinstance(axis_names, (set, frozenset)):
        raise TypeError("`axis_names` argument of shard_map should be of type `frozenset` or "
                        f"`set`. Got type: {type(axis_names)}")
    return frozenset(axis_names)


def _check_inferable(mesh, axis_names, smap: bool = False) -> None:
    """JAX's TypeError: in_specs are read from the argument types only where every manual
    axis is Explicit (on Auto axes a type says nothing of the layout); ``smap`` words it as
    smap's in_axes."""
    manual = axis_names or frozenset(mesh.axis_names)
    types = dict(zip(mesh.axis_names, mesh.axis_types))
    if all(types[a] == AxisType.Explicit for a in manual):
        return
    if smap:
        raise TypeError(f"in_axes was not specified when axis_name={frozenset(manual)!r} was "
                        "of type " + ", ".join(str(types[a]) for a in sorted(manual)))
    raise TypeError(
        "shard_map in_specs argument must be a pytree of `jax.sharding.PartitionSpec` "
        f"instances, but it was `None` when axis_names={frozenset(manual)!r} are of type "
        + ", ".join(str(types[a]) for a in sorted(manual)))


def _own_spec(value, mesh, manual=None):
    """An argument's spec read from its type (every manual axis is Explicit here), naming the
    ``manual`` axes only (all, when None): P() when its type splits nothing on ``mesh``.
    A key array's is its data's, less the key's word axis; a Ref's, its value's."""
    if is_ref(value):
        value = value._read()
    if isinstance(value, PRNGKeyArray):
        spec = _own_spec(key_data(value), mesh, manual)
        return PartitionSpec(*tuple(spec)[:value.ndim])
    aval = aval_of(value)
    typed = aval.type_sharding
    if typed is None or typed.mesh != mesh:
        # (unreduced and reduced as its type is: a partial sum enters as one)
        return PartitionSpec(unreduced=aval.unreduced, reduced=aval.reduced)
    spec = named_sharding(aval).spec
    if manual is None:
        return spec
    kept = []
    for axes in spec_names(spec):
        marks = [a in manual for a in axes]
        while marks and not marks[-1]:
            marks.pop()
        if not all(marks):
            # a manual axis minor to an automatic one: its blocks are not one piece each
            raise ValueError(f"Invalid spec: {spec}")
        kept.append(axes[:len(marks)])
    return PartitionSpec(*[axes[0] if len(axes) == 1 else (axes or None) for axes in kept])


_PMAP_AXIS = "_internal_pmap_axis_name"


# JAX's explanation after an in_axes that is no prefix of the positional arguments
_PMAP_PREFIX_HELP = (
    "\n\nThe 'full pytree' here is the tuple of arguments passed positionally to the pmapped "
    "function, and the value of `in_axes` must be a tree prefix of that tuple. But it was not "
    "a prefix.{}\n\nCheck that the value of the `in_axes` argument to `pmap` is a tree "
    "prefix of the tuple of arguments passed positionally to the pmapped function.")
_PMAP_KWARGS_HELP = (
    "\n\nWhen some arguments are passed by keyword to the pmapped function, they are not "
    "included in the comparison to `in_axes`. Instead, each argument passed by keyword is "
    "mapped over its leading axis. See the description of `in_axes` in the `pmap` docstring.")


def _pmap_leaves(args, kwargs, static, in_axes) -> tuple:
    """(the positions of the mapped arguments, the leaves of them and of the keyword
    arguments, their tree, each leaf's mapped axis or None), with JAX's errors."""
    if static and max(static) >= len(args):
        raise ValueError(
            f"pmapped function has static_broadcasted_argnums={static} but was called "
            f"with only {len(args)} positional argument{'s' if len(args) > 1 else ''}. "
            "All static broadcasted arguments must be passed positionally.")
    positions = [k for k in range(len(args)) if k not in static]
    dynamic = tuple(args[k] for k in positions)
    if isinstance(in_axes, tuple):
        # one entry per positional argument, static ones included (theirs are dropped)
        axes = tuple(in_axes[k] for k in positions) if static else in_axes
    elif isinstance(in_axes, list):
        axes = in_axes          # a list is no prefix of the arguments' tuple (JAX's error)
    else:
        axes = (in_axes,) * len(dynamic)
    # keyword arguments are mapped over their leading axis, as JAX's
    leaves, treedef = tree.tree_flatten((dynamic, kwargs))
    try:
        leaf_axes = tree.broadcast_prefix((axes, {k: 0 for k in kwargs}),
                                          (dynamic, kwargs), is_leaf=lambda a: a is None,
                                          name="pmap in_axes")
    except tree.PrefixError as err:
        raise ValueError(str(err) + _PMAP_PREFIX_HELP.format(
            _PMAP_KWARGS_HELP if kwargs else "")) from None
    return positions, leaves, treedef, leaf_axes


def _pmap_size(leaves, leaf_axes, axis_size) -> int:
    """The length of the mapped dimension, read off the first mapped array (a number has no
    axis to map), which ``axis_size`` and every other mapped leaf must agree on."""
    mapped = [(leaf, a) for leaf, a in zip(leaves, leaf_axes)
              if a is not None and np.ndim(leaf)]
    if not mapped:
        raise ValueError("pmap requires at least one argument with a mapped axis.")
    n = int(mapped[0][0].shape[mapped[0][1]])
    if axis_size is not None and int(axis_size) != n:
        raise ValueError(f"Specified axis_size {axis_size} doesn't match received axis_size "
                         f"{n}.")
    sizes = {int(np.shape(leaf)[a]) for leaf, a in mapped}
    if len(sizes) > 1:
        raise ValueError("pmap got inconsistent sizes for array axes to be mapped: "
                         f"{sorted(sizes)}")
    return n


def pmap(fun, axis_name=None, *, in_axes=0, out_axes=0, static_broadcasted_argnums=(),
         devices=None, backend=None, axis_size=None, donate_argnums=()):
    """Map ``fun`` over a leading (``in_axes``) dimension, one slice per device, with
    collectives over ``axis_name``: JAX 0.10's pmap, which is a shard_map over a 1-D mesh of
    as many devices as the mapped dimension is long (the first ones, or ``devices``).

    >>> pmap(lambda a: lax.psum(a, 'i'), axis_name='i')(x)     # x: [n, ...], n <= devices
    """
    check_callable(fun)
    static = ((static_broadcasted_argnums,) if isinstance(static_broadcasted_argnums, int)
              else tuple(static_broadcasted_argnums))
    name = _PMAP_AXIS if axis_name is None else axis_name
    check_axis_spec(in_axes, "pmap in_axes")
    check_axis_spec(out_axes, "pmap out_axes")
    if devices is not None and not len(devices):
        raise ValueError("'devices' argument to pmap must be non-empty, or None.")

    @functools.wraps(fun)
    def mapped(*args, **kwargs):
        positions, leaves, treedef, leaf_axes = _pmap_leaves(args, kwargs, static, in_axes)
        n = _pmap_size(leaves, leaf_axes, axis_size)
        pool = list(devices) if devices is not None else list(all_devices())
        mesh = Mesh(np.array(pool[:n] if n <= len(pool) else pool, dtype=object), (name,))
        moved = [leaf if a is None else jnp.moveaxis(leaf, a, 0)
                 for leaf, a in zip(leaves, leaf_axes)]
        specs = tuple(PartitionSpec() if a is None else PartitionSpec(name) for a in leaf_axes)

        def body(*blocks):
            # each device's block holds its one slice: more than there are devices leaves
            # blocks of several, which cannot be squeezed (JAX's error), never read as one
            unmapped = [b if a is None else jnp.squeeze(b, 0)
                        for b, a in zip(blocks, leaf_axes)]
            rebuilt = list(args)
            values, keywords = tree.tree_unflatten(treedef, unmapped)
            for k, value in zip(positions, values):
                rebuilt[k] = value
            return tree_map(lambda out: jnp.expand_dims(out, 0), fun(*rebuilt, **keywords))

        outs = _shard_map_impl(body, mesh, specs, PartitionSpec(name), check_vma=False,
                               flag="check_vma")(*moved)
        out_leaves, out_tree = tree.tree_flatten(outs)
        out_dims = tree.broadcast_prefix(out_axes, tree.tree_unflatten(out_tree, out_leaves),
                                         is_leaf=lambda a: a is None, name="pmap out_axes")
        # an unmapped result (out_axes None) is device 0's, replicated over the devices
        replicated = NamedSharding(mesh, PartitionSpec())
        placed = [with_sharding_constraint(out[0], replicated) if d is None
                  else jnp.moveaxis(out, 0, d) for out, d in zip(out_leaves, out_dims)]
        return tree.tree_unflatten(out_tree, placed)

    # JAX 0.10's pmap is a jitted shard_map: traced once per signature, then run from its cache
    # (the function's Python runs at the first call only), and lowered as jit lowers. Its
    # arguments are checked against the static ones at the call (jit reads the signature
    # through __wrapped__ when it is made); donated arguments are donated to that jit
    del mapped.__wrapped__
    jitted = _jit(mapped, static_argnums=static, donate_argnums=donate_argnums)

    @functools.wraps(fun)
    def wrapped(*args, **kwargs):
        return jitted(*args, **kwargs)

    wrapped.lower = jitted.lower
    return wrapped
