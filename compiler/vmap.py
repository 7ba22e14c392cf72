"""``vmap``: vectorizing a function over an axis of its arguments, by the batching trace
(``compiler.batching``). This module imports every batching rule module, so that vmap works
however it is reached.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

# the rule modules fill the tables of compiler.batching when imported
from compiler import batching_control, batching_ops, collective_rules  # noqa: F401
import inspect

from compiler import tree
from compiler.batching import (BatchTrace, BatchTracer, NamedAxis, batch_at, member_aval,
                               moveaxis, named_axis, ndim_of)
from compiler.refs import is_ref, stand_in
from compiler.shard_map import function_name, wraps
from ir import dtypes
from ir import primitives as prims
from ir.sharding import NamedSharding, PartitionSpec
from ir.sharding_rules import partitions
from compiler.tracing import (aval_of, bind, check_callable, check_jax_value, current_trace,
                              is_jax_value, set_current_trace, weakened, weakly_typed)



def _is_axis_leaf(x) -> bool:
    return x is None or type(x) is int


def vmap(fun: Callable, in_axes=0, out_axes=0, *, axis_name=None, axis_size=None,
         spmd_axis_name=None) -> Callable:
    """Vectorize ``fun`` over an axis of its arguments.

    Args:
      fun: the per-member function.
      in_axes: an int, None, or a tuple (one entry per positional argument) of pytree
        prefixes with int/None leaves: which axis of each argument is mapped (None: not
        mapped, the same value for every member). Keyword arguments are mapped over axis 0.
      out_axes: the same for the outputs: where the batch axis goes.
      axis_size: the batch size, needed when no argument is mapped.
      axis_name: a name for the batch axis: collectives over it (``lax.psum(x, 'b')``,
        ``all_gather``, ``axis_index`` ...) act across the members, alone or together with
        mesh axes inside a shard_map body (``lax.psum(x, ('i', 'b'))``).
      spmd_axis_name: a mesh axis name, or a tuple of them, to split the batch axis over:
        a shard_map under this vmap gets the batch axis of its inputs and outputs split over
        those axes (each device runs its slice of the members), and sharding constraints
        place the batch axis on them.

    Returns:
      A function whose results stack ``fun``'s per-member results.

    >>> vmap(lambda x: x @ x)(jnp.arange(12.).reshape(4, 3)).shape
    (4,)
    """
    check_callable(fun)
    spmd_axis_name = _check_spmd_axis_name(spmd_axis_name)
    if axis_name is not None:
        hash(axis_name)         # an unhashable name fails here, as in JAX
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)
    if not (in_axes is None or type(in_axes) in (int, tuple)):
        raise TypeError("vmap in_axes must be an int, None, or a tuple of entries "
                         "corresponding to the positional arguments passed to the function, "
                         f"but got {in_axes}.")
    check_axis_spec(in_axes, "vmap in_axes")
    check_axis_spec(out_axes, "vmap out_axes")

    docstr = ("Vectorized version of {fun}. Takes similar arguments as {fun} but with "
              "additional array axes over which {fun} is mapped.")
    if getattr(fun, "__doc__", None):
        docstr += "\n\nOriginal documentation:\n\n" + fun.__doc__.replace(
            "{", "{{").replace("}", "}}")

    @wraps(fun, docstr)
    def batched(*args, **kwargs):
        return _batched_call(fun, args, kwargs, in_axes, out_axes, axis_size, axis_name,
                             spmd_axis_name)

    return batched


def vmap_unrestricted(fun, values, axes, size: int):
    """``fun`` batched over ``values`` (flat; ``axes`` their batch dims, None where unbatched):
    (its flat results, each result's batch dim at 0 or None where it is unbatched). Unlike
    ``vmap``, the results' batching is read off, not asked for (JAX's)."""
    trace = BatchTrace(current_trace(), size)
    tracers = [v if a is None else BatchTracer(trace, v, a) for v, a in zip(values, axes)]
    with set_current_trace(trace):
        outs = [trace.unwrap(o) for o in fun(*tracers)]
    return ([v if d is None else moveaxis(v, d, 0) for v, d in outs],
            [None if d is None else 0 for _, d in outs])


def check_axis_spec(spec, which: str):
    """JAX's TypeError unless ``spec`` (``which``: ``"vmap in_axes"``) is an int, None, or a
    container of them (a bool or a float is not an axis)."""
    leaves = tree.tree_leaves(spec, is_leaf=_is_axis_leaf)
    if not all(_is_axis_leaf(leaf) for leaf in leaves):
        raise TypeError(f"{which} must be an int, None, or (nested) container with those "
                        f"types as leaves, but got {spec}.")


def _check_spmd_axis_name(spmd_axis_name) -> tuple | None:
    if spmd_axis_name is None:
        return None
    names = tuple(spmd_axis_name) if isinstance(spmd_axis_name, (tuple, list)) else (
        spmd_axis_name,)
    if not all(isinstance(a, str) for a in names) or len(set(names)) != len(names):
        raise ValueError("vmap spmd_axis_name must be a mesh axis name or a tuple of distinct "
                         f"names, got {spmd_axis_name!r}")
    return names


def _batched_call(fun, args, kwargs, in_axes, out_axes, axis_size, axis_name=None,
                  spmd_axis_name=None):
    if isinstance(in_axes, tuple) and len(in_axes) != len(args):
        raise ValueError("vmap in_axes must be an int, None, or a tuple of entries "
                         "corresponding to the positional arguments passed to the function, "
                         f"but got len(in_axes)={len(in_axes)}, len(args)={len(args)}")
    leaves, in_tree = tree.tree_flatten((args, kwargs))
    # a Ref among the arguments (a mutable array) is mapped as the array it holds
    refs = {k: leaf for k, leaf in enumerate(leaves) if is_ref(leaf)}
    if refs:
        leaves = [refs[k]._read() if k in refs else leaf for k, leaf in enumerate(leaves)]
        args, kwargs = tree.tree_unflatten(in_tree, leaves)
    axes = _flat_in_axes(in_axes, args, kwargs)
    _check_mapped_values(fun, (args, kwargs), leaves, axes)
    axes = [_canonical_in_axis(x, a) for x, a in zip(leaves, axes)]
    size = _mapped_size(fun, args, kwargs, leaves, axes, axis_size)
    axis = None if axis_name is None else NamedAxis(axis_name, size)
    batch_spec, batch_mesh = _batch_spec(leaves, axes)
    _check_unmapped_unsplit(leaves, axes, batch_spec)
    if spmd_axis_name is not None and batch_spec:
        # the batch is split over Explicit axes already: spmd_axis_name may only repeat
        # them (then it adds nothing), as in JAX
        sized = lambda axes: tuple(a for a in axes if batch_mesh.shape.get(a) != 1)
        if sized(spmd_axis_name) != sized(batch_spec):
            raise ValueError("Only one of spmd_axis_name or arrays sharded on `Explicit` mesh "
                             f"axis type is allowed. Got spmd_axis_name={spmd_axis_name} and "
                             f"arrays sharded on explicit_mesh_axis={tuple(batch_spec)}")
        spmd_axis_name = None
    trace = BatchTrace(current_trace(), size, axis=axis, spmd_axis_name=spmd_axis_name)
    trace.batch_spec = batch_spec
    tracers = [x if a is None else BatchTracer(trace, x, a) for x, a in zip(leaves, axes)]
    with named_axis(axis), set_current_trace(trace):
        # each Ref is held, while the function runs, by a Ref of this trace over its members
        fresh = {k: stand_in(ref, tracers[k]) for k, ref in refs.items()}
        for k, held in fresh.items():
            held._unmapped = axes[k] is None      # (every member would write it: refused)
        call_args, call_kwargs = tree.tree_unflatten(
            in_tree, [fresh.get(k, t) for k, t in enumerate(tracers)])
        result = fun(*call_args, **call_kwargs)
        left = {k: trace.unwrap(held._read()) for k, held in fresh.items()}
        outs, out_tree = tree.tree_flatten(result)
        for o in outs:
            if not is_jax_value(o) and not dtypes.is_float0(o):
                raise TypeError(f"Output from batched function {o!r} with type {type(o)} is "
                                "not a valid JAX type")
        # float0 results (an integer's tangent or cotangent) hold nothing: the same for
        # every member
        unwrapped = [(o, None) if dtypes.is_float0(o) else trace.unwrap(o) for o in outs]
    if refs:
        _write_back_refs(refs, left, axes, size)
    out_specs = _flat_out_axes(out_axes, result)
    _check_unmapped_outputs(result, unwrapped, out_specs, axis_name)
    moved = [_batched_float0(v, a, size) if dtypes.is_float0(v) else
             _place_batch_axis(v, d, a, size) for (v, d), a in zip(unwrapped, out_specs)]
    if trace.batch_spec:
        moved = [_split_like_batch(v, d, a, trace.batch_spec, batch_mesh, o)
                 for v, (_, d), a, o in zip(moved, unwrapped, out_specs, outs)]
    return tree.tree_unflatten(out_tree, moved)


def _write_back_refs(refs, left, axes, size) -> None:
    """What the batched function left in each Ref mapped over (``left``: value and batch
    dim), written into the Ref: the members stacked along the axis it was mapped over. A Ref
    not mapped over took no write (its stand-in refused it, as JAX does)."""
    for k, ref in refs.items():
        if axes[k] is not None:
            value, dim = left[k]
            ref._value = _place_batch_axis(value, dim, axes[k], size)


def _batched_float0(value, out_axis, size: int):
    """float0 zeros of a batch: the batch dimension inserted at ``out_axis``."""
    if out_axis is None:
        return value
    shape = list(value.shape)
    shape.insert(out_axis % (len(shape) + 1), size)
    return np.zeros(tuple(shape), dtypes.FLOAT0)


def _batch_spec(leaves, axes) -> tuple:
    """The Explicit mesh axes splitting the mapped dimension of every mapped argument: JAX
    asks that they agree."""
    specs, mesh = [], None
    for x, a in zip(leaves, axes):
        if a is not None:
            aval = aval_of(x)
            spec = aval.type_sharding.spec[a] if aval.type_sharding is not None else ()
            mesh = mesh or (aval.type_sharding.mesh if spec else None)
            if spec not in specs:
                specs.append(spec)
    if len(specs) > 1:
        shown = [None if not s else s[0] if len(s) == 1 else s for s in specs[:2]]
        raise ValueError("Mapped away dimension of inputs passed to vmap should be sharded the "
                         f"same. Got inconsistent axis specs: {shown[0]} vs {shown[1]}")
    return (specs[0] if specs else ()), mesh


def _check_unmapped_unsplit(leaves, axes, batch_spec) -> None:
    """JAX's ValueError for an unmapped argument whose type splits it over a mesh axis that
    splits the mapped dimension (each member would hold only a block of it)."""
    if not batch_spec:
        return
    for x, a in zip(leaves, axes):
        if a is None and is_jax_value(x):
            aval = aval_of(x)
            typed = aval.type_sharding
            if typed is not None and set(typed.axes) & set(batch_spec):
                raise ValueError(
                    "Unmapped values passed to vmap cannot be sharded along the mesh axis you "
                    f"are vmapping over. Got type: {aval.str_short()}, in_axes: None and "
                    f"vmapped mesh axis: {tuple(batch_spec)}")


def _split_like_batch(value, dim, out_axis, batch_spec, mesh, returned):
    """An output the mapped arguments did not feed (broadcast along the batch axis) split
    along it as they are (JAX; a Python constant returned stays unsplit)."""
    if dim is not None or out_axis is None or isinstance(returned, (bool, int, float, complex)):
        return value
    aval = aval_of(value)
    spec = list(aval.type_sharding.spec) if aval.type_sharding is not None else [()] * aval.ndim
    position = out_axis % aval.ndim
    if spec[position] or any(set(batch_spec) & set(s) for s in spec):
        return value
    spec[position] = batch_spec
    return bind(prims.sharding_constraint_p, value, sharding=NamedSharding(
        mesh, PartitionSpec(*partitions(tuple(spec)))))


def _check_mapped_values(fun, args_and_kwargs, leaves, axes):
    """Mapped arguments must be JAX values; unmapped ones (in_axes None) pass as they are."""
    mapped = [leaf for leaf, axis in zip(leaves, axes) if axis is not None]
    if all(is_jax_value(leaf) for leaf in mapped):
        return
    for leaf, axis, path in zip(leaves, axes, tree.leaf_paths(args_and_kwargs)):
        if axis is not None:
            where = "args" + path[3:] if path.startswith("[0]") else "kwargs" + path[3:]
            check_jax_value(leaf, f"vmap of '{function_name(fun)}': argument {where}")


def _flat_in_axes(in_axes, args, kwargs) -> list:
    flat = tree.flatten_axes("vmap in_axes", in_axes, args, is_leaf=_is_axis_leaf)
    return flat + [0] * len(tree.tree_leaves(kwargs))


def _flat_out_axes(out_axes, result) -> list:
    return tree.flatten_axes("vmap out_axes", out_axes, result, is_leaf=_is_axis_leaf)


def _canonical_in_axis(x, axis):
    if axis is None:
        return None
    shape = aval_of(x).shape
    if not -len(shape) <= axis < len(shape):
        min_rank = axis + 1 if axis >= 0 else -axis
        raise ValueError(f"vmap was requested to map its argument along axis {axis}, which "
                         f"implies that its rank should be at least {min_rank}, but is only "
                         f"{len(shape)} (its shape is {shape})")
    return axis % len(shape)


def _mapped_size(fun, args, kwargs, leaves, axes, axis_size) -> int:
    sizes = [None if a is None else aval_of(x).shape[a] for x, a in zip(leaves, axes)]
    mapped = {s for s in sizes if s is not None}
    if axis_size is not None:
        mapped.add(int(axis_size))
    if len(mapped) == 1:
        return mapped.pop()
    if not mapped:
        if not leaves:
            raise ValueError("vmap wrapped function must be passed at least one argument "
                             "containing an array or axis_size must be specified, got empty "
                             f"*args={args} and **kwargs={kwargs}")
        raise ValueError("vmap must have at least one non-None value in in_axes or "
                         "axis_size must be specified")
    raise ValueError(_inconsistent_sizes_text(fun, args, kwargs, leaves, axes, sizes,
                                              axis_size))


def _inconsistent_sizes_text(fun, args, kwargs, leaves, axes, sizes, axis_size) -> str:
    """JAX's message: the most common size first, one example axis per size."""
    descriptions = _leaf_descriptions(fun, args, kwargs, leaves)
    counts: dict = {}
    for s in sizes:
        if s is not None:
            counts[s] = counts.get(s, 0) + 1
    ranked = sorted(counts.items(), key=lambda item: -item[1])   # stable: first seen first
    lines = ["vmap got inconsistent sizes for array axes to be mapped:"]
    if axis_size is not None:
        lines.append(f"  * the `axis_size` argument was {axis_size};")
    for rank, (size, count) in enumerate(ranked):
        k = sizes.index(size)
        example = f"axis {axes[k]} of {descriptions[k]}"
        if count == 1:
            lines.append(f"  * one axis had size {size}: {example};")
        elif rank == 0 and axis_size is None:
            lines.append(f"  * most axes ({count} of them) had size {size}, e.g. {example};")
        else:
            lines.append(f"  * some axes ({count} of them) had size {size}, e.g. {example};")
    return "\n".join(lines)[:-1]


def _leaf_descriptions(fun, args, kwargs, leaves) -> list:
    """``argument x['w'] of type float32[3]`` for each leaf of (args, kwargs)."""
    try:
        names = list(inspect.signature(fun).bind(*args, **kwargs).signature.parameters)
    except (TypeError, ValueError):
        names = None
    texts = []
    for path in tree.leaf_paths(args):
        index = int(path[1:path.index("]")])
        rest = path[path.index("]") + 1:]
        if names is not None and index < len(names):
            texts.append(f"argument {names[index]}{rest}")
        else:
            texts.append(f"args{path}")
    texts += [f"kwargs{path}" for path in tree.leaf_paths(kwargs)]
    return [f"{text} of type {_type_text(x)}" for text, x in zip(texts, leaves)]


def _type_text(x) -> str:
    try:
        return aval_of(x).str_long()
    except (TypeError, ValueError):
        return "unknown"


def _check_unmapped_outputs(result, unwrapped, out_specs, axis_name) -> None:
    """JAX's ValueError for an output batched where out_axes asks for none, naming its
    place in out_axes (or the vmap's axis name)."""
    for k, ((_, dim), out_axis) in enumerate(zip(unwrapped, out_specs)):
        if out_axis is None and dim is not None:
            if axis_name is not None:
                raise ValueError(f"vmap has mapped output (axis_name={axis_name}) but out_axes "
                                 "is None")
            raise ValueError(f"at vmap out_axes{tree.leaf_paths(result)[k]}, got axis spec None "
                             f"but output was batched on axis {dim}")


def _place_batch_axis(value, dim, out_axis, size):
    """Move (or broadcast) the batch axis of an output to ``out_axis`` (an output batched
    where ``out_axis`` is None was refused by ``_check_unmapped_outputs``)."""
    if out_axis is None:
        return value
    rank = ndim_of(value) + (dim is None)
    if not -rank <= out_axis < rank:
        raise ValueError(f"axis {out_axis} is out of bounds for array of dimension {rank} "
                         f"(vmap out_axes={out_axis}, for an output whose per-member shape is "
                         f"{member_aval(value, dim).shape})")
    placed = batch_at(value, dim, size, out_axis % rank)
    # an unbatched Python number (or weak value) broadcast stays weakly typed, as JAX's
    return weakened(placed) if dim is None and weakly_typed(value) else placed
