"""Structured control flow: ``scan``, ``fori_loop``, ``while_loop``, ``cond`` and ``switch``.

Each traces its Python functions into sub-programs and binds one primitive carrying them, so
the same equation runs eagerly, under ``jit``, and inside shard_map bodies, where collectives
may appear in the sub-programs. Replication types follow SEMANTICS 3.4: loop carries must keep
their types; branches see their operands' own types and must return equal types, as in JAX;
a predicate that varies makes the results vary (JAX types them as the branches return them,
which is unsound); branches under a varying predicate may not issue different collectives
over the axes it varies over, since devices of one group could then disagree and never
complete them.
"""
from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Sequence

import numpy as np

from compiler import tree
from compiler.refs import ClosedOverRef, RefWrittenOutside, is_ref, swapped_in
from compiler.replication import infer_vma, vma_rules
from compiler.shard_map import current_shard_context, names_axes_in_scope
from compiler.tracing import (CONCRETIZATION_ERRORS, ConcretizationTypeError, Tracer,
                              abstract_value_error, aval_of, bind, check_returned_values,
                              current_trace, errors_link, eval_trace, is_python_scalar,
                              trace_settings, trace_to_program, user_source, value_if_known,
                              weakened, weakened_where, weakly_typed)
from ir import dtypes
from ir import primitives as prims
from ir import collectives as coll
from ir.core import Aval, Program, Var, programs_in
from ir.sharding import NamedSharding, current_mesh
from ir.sharding_rules import named_sharding, p_text, spec_of
from ir.source import where_defined


# --- tracing sub-programs ----------------------------------------------------------------------

def _trace_sub(fun, in_avals, weak=None, *, owner=None, key=(), boxes=()) -> tuple[Program,
                                                                                 list]:
    """Trace ``fun`` (flat lists in and out) in the current context; closed-over values become
    leading inputs (``weak``: which inputs are weakly typed). Returns (program, closed-over
    values).

    ``owner``, the user's function ``fun`` calls (a loop body, a branch), keeps the program
    for later calls of the same signature (``key``: the pytree structures ``fun`` rebuilds),
    as JAX keeps a loop body's traced program: its Python runs once. ``boxes`` are the lists
    ``fun`` fills while traced (the output structure), saved and refilled. A program is kept
    only where no enclosing trace names axes (a shard_map body's, a vmap's axis) and it
    closes over no value of an enclosing trace."""
    entry = None
    if owner is not None and not names_axes_in_scope():
        entry = (key, tuple(in_avals), tuple(weak or ()), current_mesh(), dtypes.x64_enabled(),
                 trace_settings())
        try:
            found = _SUB_PROGRAMS.get(owner, {}).get(entry)
        except TypeError:         # an owner or a structure that cannot be hashed
            entry = found = None
        if found is not None:
            program, consts, saved = found
            for box, content in zip(boxes, saved):
                box[:] = content
            return program, consts
    program, consts, _ = trace_to_program(fun, in_avals, shard=current_shard_context(),
                                          parent=current_trace(), weak=weak)
    program = Program([], program.constvars + program.invars, program.eqns, program.outvars)
    if entry is not None and not any(isinstance(c, Tracer) for c in consts):
        try:
            _SUB_PROGRAMS.setdefault(owner, {})[entry] = (program, consts,
                                                          [list(box) for box in boxes])
        except TypeError:         # an owner that cannot be weakly referenced
            pass
    return program, consts


# a loop body's or a branch's function -> its programs by signature
_SUB_PROGRAMS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def clear_sub_programs() -> None:
    _SUB_PROGRAMS.clear()


def _promote_weak_carries(init_flat, weak, out_avals) -> bool:
    """JAX's promotion of weakly typed initial carries (``lax.fori_loop(0, n, f, 0.)`` over
    bfloat16 values): a weak carry the body returns as another dtype starts as that dtype
    instead (``init_flat`` and ``weak`` changed in place). Whether any was."""
    changed = False
    for k, (value, aval) in enumerate(zip(init_flat, out_avals)):
        have = aval_of(value)
        if not weak[k] or have.shape != aval.shape or have.dtype == aval.dtype:
            continue
        # the dtype the weak carry and the body's result promote to (JAX's result_type):
        # a weak float meeting an int result stays a float, and the carry check refuses it
        dtype = dtypes.result_type([have.dtype, aval.dtype], [True, False])
        if dtype != have.dtype:
            init_flat[k] = bind(prims.convert_element_type_p, value, new_dtype=dtype)
            weak[k] = False
            changed = True
    return changed


def _meshless_context() -> bool:
    """Whether an unsplit type may name no mesh: outside ``set_mesh`` (inside it, JAX types
    every new value on the mesh) and outside shard_map bodies. (shardc's types do not tell a
    value replicated on a mesh from one on no mesh: outside ``set_mesh`` a traced unsplit
    value is taken as the latter, as ``jnp.zeros`` there is.)"""
    return current_shard_context() is None and current_mesh() is None


def _settle_meshless_carries(init_flat, out_avals) -> bool:
    """JAX's type match of carries (``core.cmp_shape_shd_mat_memsp``): an initial carry whose
    type names no mesh (``jnp.zeros(s)`` outside ``set_mesh``) matches the body's result typed
    on a mesh; the loop then runs with the result's type, the initial value laid out so
    (``init_flat`` changed in place). Whether any was."""
    if not _meshless_context():
        return False
    changed = False
    for k, (value, aval) in enumerate(zip(init_flat, out_avals)):
        have = aval_of(value)
        if (have.type_sharding is None and aval.type_sharding is not None
                and (have.shape, have.dtype) == (aval.shape, aval.dtype)
                and not isinstance(getattr(value, "sharding", None), NamedSharding)):
            init_flat[k] = bind(prims.sharding_constraint_p, value,
                                sharding=named_sharding(aval))
            changed = True
    return changed


def _as_array(value):
    """Python scalars in loop carries become typed scalars (JAX's weak types, canonical)."""
    if is_python_scalar(value):
        return np.asarray(value, dtypes.weak_scalar_dtype(value))[()]
    return value


def _checking() -> bool:
    shard = current_shard_context()
    return shard is not None and shard.check_vma


def _axis_order() -> tuple:
    shard = current_shard_context()
    return shard.mesh.axis_names if shard is not None else ()


def _type_text(aval) -> str:
    return aval.str_long(_axis_order())


def _param_name(fun, index: int, default):
    """The name of ``fun``'s parameter ``index`` (JAX's: any kind of parameter), else
    ``default``."""
    try:
        return list(inspect.signature(fun).parameters)[index]
    except (TypeError, ValueError, IndexError):
        return default


def _check_callable(construct: str, what: str, *funs) -> None:
    """JAX's TypeError for arguments that should be functions."""
    if not all(callable(f) for f in funs):
        raise TypeError(f"lax.{construct}: {what}")


def _lift(values, axes_wanted) -> list:
    """pvary each value over the axes it lacks (with the check on)."""
    order = _axis_order()
    out = []
    for v in values:
        missing = tuple(a for a in order if a in axes_wanted and a not in aval_of(v).vma)
        out.append(bind(coll.pvary_p, v, mesh_axes=missing) if missing else v)
    return out


# --- carry types ---------------------------------------------------------------------------------

def _check_carry(construct: str, carry_name, paths, in_avals, out_avals):
    """Each output carry must have exactly its input's type (SEMANTICS 3.4): its shape, dtype
    and sharding (JAX promotes none; a reshard says which one is meant) and, with the check
    on, its manual axis types. JAX's text: every component that differs, and why."""
    checking = _checking()
    problems, gained_hints, lost_hints = [], [], []
    for path, a, b in zip(paths, in_avals, out_avals):
        vma_differs = checking and a.vma != b.vma
        if ((a.shape, a.dtype, a.type_sharding) == (b.shape, b.dtype, b.type_sharding)
                and not vma_differs):
            continue
        problems.append(
            f"{_carry_component(carry_name, path)} has type {_type_text(a)} but the "
            f"corresponding output carry component has type {_type_text(b)}"
            f"{_mismatch_extra(a, b, vma_differs)}")
        if not vma_differs:
            continue
        gained = tuple(x for x in _axis_order() if x in b.vma - a.vma)
        lost = tuple(x for x in _axis_order() if x in a.vma - b.vma)
        if gained:
            gained_hints.append(f"applying `jax.lax.pcast(..., {gained}, to='varying')`, to "
                                "the initial carry value corresponding to "
                                f"{_carry_component(carry_name, path)}")
        elif lost:
            lost_hints.append(f"applying `jax.lax.pcast(..., {lost}, to='varying')` to the "
                              f"output carry component {carry_name or 'carry'}{path} that "
                              "the body returns")
    # JAX's hints only, where it gives any; else shardc's for carries the body returns
    # varying over fewer axes than they came in (JAX gives none: SEMANTICS 3.4)
    hints = gained_hints or lost_hints
    if problems:
        raise TypeError(_carry_message(construct, problems, hints))


def _mismatch_extra(a, b, vma_differs: bool) -> str:
    """JAX's ``aval_mismatch_extra``: why two types differ (nothing for shardings alone)."""
    why = [w for w, bad in (("the dtypes do not match", a.dtype != b.dtype),
                            ("the shapes do not match", a.shape != b.shape),
                            ("the manual axis types do not match", vma_differs)) if bad]
    if not why:
        return ""
    if len(why) == 1:
        return ", so " + why[0]
    return ", so " + ", ".join(why[:-1]) + ", and " + why[-1]


def _carry_component(carry_name, path: str) -> str:
    """JAX's wording: a component of a pytree carry, or a carry that is one array (a body
    whose first parameter has no name: by path)."""
    if carry_name is None:
        return f"the input carry at path {path}" if path else "the input carry"
    return (f"the input carry component {carry_name}{path}" if path
            else f"the input carry {carry_name}")


def _check_carry_tree(construct: str, carry_name, in_tree, out_tree) -> None:
    """JAX's ``_check_carry_type`` for pytree structures: where and how the body's output
    carry is built unlike its input carry."""
    if in_tree == out_tree:
        return
    leaf = str(Aval)          # JAX names its leaves' class (its avals') here
    diffs = [f"{_carry_component(carry_name, path)} is a {thing1} but the corresponding "
             f"component of the carry output is a {thing2}, so {why}"
             for path, thing1, thing2, why in tree.equality_errors(in_tree, out_tree, leaf)]
    if not diffs:
        differences = (f"the input tree structure is:\n{in_tree}\n"
                       f"the output tree structure is:\n{out_tree}\n")
    else:
        differences = _differences(diffs, blank_between=True)
    raise TypeError(
        f"{construct} body function carry input and carry output must have the same pytree "
        f"structure, but they differ:\n\n{differences}\n"
        "Revise the function so that the carry output has the same pytree structure as the "
        "carry input.")


def _carry_message(construct: str, problems: list, hints: list) -> str:
    """JAX 0.10.2's text, laid out as it lays it out (``_jax_list``)."""
    return (f"{construct} body function carry input and carry output must have equal types, "
            f"but they differ:\n\n{_differences(problems, blank_between=True)}\n"
            f"{_pcast_hints(hints, blank_between=True)}"
            "Revise the function so that all output types match the corresponding input types.")


def _jax_list(items: list, blank_between: bool) -> str:
    """Bullets as JAX's scan and cond errors list them: ``;`` after each but the last, ``.``
    after it. JAX's scan joins bullets that end in a newline with another (a blank line
    between all but the last two); its cond does not."""
    if blank_between:
        return "\n".join(f"  * {d};\n" for d in items[:-1]) + f"  * {items[-1]}.\n"
    return "\n".join(f"  * {d};" for d in items[:-1]) + f"\n  * {items[-1]}.\n"


def _differences(items: list, blank_between: bool) -> str:
    """What differs, as JAX's paragraph: one sentence, or bullets for several."""
    if len(items) == 1:
        return items[0][0].upper() + items[0][1:] + ".\n"
    return _jax_list(items, blank_between)


_VMA_DOCS = ("See https://docs.jax.dev/en/latest/notebooks/shard_map.html#scan-vma for more "
             "information.\n\n")


def _pcast_hints(hints: list, blank_between: bool) -> str:
    """The hints' paragraph ('' without any), as JAX's."""
    if not hints:
        return ""
    if len(hints) == 1:
        return f"This might be fixed by {hints[0]}.\n" + _VMA_DOCS
    return "This might be fixed by:\n" + _jax_list(hints, blank_between) + _VMA_DOCS


# --- collectives under a varying predicate --------------------------------------------------------

_SILENT = (coll.pvary_p, coll.axis_index_p)


def collectives_in(program: Program) -> list:
    """(primitive name, mesh axes, operand type) of every communicating collective, in
    program order, nested sub-programs included. Two collectives pair up at run time only if
    all three agree."""
    found = []
    for eqn in program.eqns:
        if eqn.primitive.kind == "collective" and eqn.primitive not in _SILENT:
            operand = eqn.invars[0].aval
            found.append((eqn.primitive.name, tuple(eqn.params["mesh_axes"]),
                          (operand.shape, operand.dtype)))
        for value in eqn.params.values():
            for sub in programs_in(value):
                found.extend(collectives_in(sub))
    return found


def _meeting(collectives, q) -> list:
    return [c for c in collectives if set(c[1]) & q]


def _predicate_error(construct, source, q, where, name, axes) -> TypeError:
    """A TypeError, as JAX raises for a cond whose branches a collective leaves typed unlike
    each other (where their types agree JAX accepts the program, and it hangs)."""
    order = _axis_order()
    q_text = "{" + ",".join(a for a in order if a in q) + "}"
    return TypeError(
        f"{construct} at {source}: the predicate may vary over mesh axes {q_text} and {where} "
        f"issues {name} over {axes}, so devices of one group could disagree and never complete "
        f"it; make the predicate invariant over {axes} or move the collective out.")


def _user_site() -> str:
    src = user_source()
    return str(src) if src else "<unknown>"


# --- scan ----------------------------------------------------------------------------------------

def scan(f, init, xs=None, length=None, reverse=False, unroll=1, _split_transpose=False, *,
         carry_name=None, construct="scan"):
    """``lax.scan``: loop ``f(carry, x) -> (carry, y)`` over the leading axis of ``xs``.

    ``unroll`` (a non-negative int, or a bool) is checked as JAX checks it; it is a
    code-generation hint that leaves every result unchanged, and shardc runs the loop as it is.
    A Ref (mutable array) the body writes from outside is threaded through the loop as a
    carry, found by tracing the body, and written when the loop is done.
    """
    _check_callable("scan", "f argument should be a callable.", f)
    f, xs = _scanning_refs(f, xs, length)
    if _jit_disabled():
        return _scan_python(f, init, xs, length, reverse)
    return _threading_refs(
        lambda: _scan(f, init, xs, length, reverse, unroll, carry_name, construct),
        lambda refs: _scan_threading(refs, f, init, xs, length, reverse, unroll, carry_name,
                                     construct))


def _scanning_refs(f, xs, length):
    """``(f, xs)`` where ``xs`` holds Refs (mutable arrays): each Ref is scanned over by its
    row's index, and the body gets a view of that row (``ref.at[i]``), which it reads and
    writes as JAX's body gets a Ref of it; the Ref, closed over, is threaded through the loop.
    Otherwise as given."""
    leaves, xs_tree = tree.tree_flatten(xs)
    refs = [k for k, leaf in enumerate(leaves) if is_ref(leaf)]
    if not refs:
        return f, xs
    rows = leaves[refs[0]].shape[0] if length is None else length
    rows_given = {leaves[k].shape[0] for k in refs}
    if rows_given != {rows}:
        raise ValueError(f"scan got Refs of {sorted(rows_given)} rows to scan over {rows} steps")
    steps = np.arange(rows, dtype=np.int32)
    plain = [steps if k in refs else leaf for k, leaf in enumerate(leaves)]

    @functools.wraps(f)
    def body(carry, x):
        flat = tree.tree_leaves(x) if xs_tree.num_leaves else []
        viewed = [leaves[k].at[flat[k]] if k in refs else flat[k] for k in range(len(flat))]
        return f(carry, tree.tree_unflatten(xs_tree, viewed))
    return body, tree.tree_unflatten(xs_tree, plain)


def _threading_refs(plain, threaded):
    """``plain()``; where the functions it traces write Refs they close over (found one at a
    time, as tracing meets them), ``threaded(refs)``, which passes those Refs through the
    construct and writes them with its results (``_written_back``)."""
    refs: list = []
    while True:
        try:
            return threaded(refs) if refs else plain()
        except (ClosedOverRef, RefWrittenOutside) as found:
            if any(r is found.ref for r in refs):
                raise
            refs.append(found.ref)


def _written_back(refs, values) -> None:
    """Each of ``refs`` written with its value as the construct left it."""
    for r, value in zip(refs, values):
        r._write(value)


def _jit_disabled() -> bool:
    """Whether ``jax_disable_jit`` is on: then, as JAX's, a scan runs as a Python loop, a
    while loop does where its predicate is known, and a cond or switch whose predicate is
    known calls the branch it picks."""
    from compiler import jit
    return jit._jit_disabled


def _as_loop_value(value):
    """A carry of a loop run in Python, as JAX's ``lax.asarray`` gives it: a numpy value
    becomes an (immutable) array of its canonical dtype, so that a body updating it in place
    (``x += 1``) changes no other carry; a Python number a weakly typed array."""
    if is_python_scalar(value):
        return weakened(bind(prims.convert_element_type_p, _as_array(value),
                             new_dtype=dtypes.weak_scalar_dtype(value)))
    if isinstance(value, (np.ndarray, np.generic)):
        return bind(prims.convert_element_type_p, value,
                    new_dtype=dtypes.canonicalize(value.dtype))
    return value


def _scan_python(f, init, xs, length, reverse):
    """JAX's scan with jit disabled: ``f`` runs once per slice of ``xs``, op by op, and the
    ``y`` results are stacked. A scan of length 0 is an error (JAX cannot tell its ``y``
    types without tracing)."""
    xs_flat, xs_tree = tree.tree_flatten(xs)
    length = _scan_length(xs_flat, length)
    if length == 0:
        raise ValueError("zero-length scan is not supported in disable_jit() mode because "
                         "the output type is unknown.")
    carry, ys = init, []
    for i in (reversed(range(length)) if reverse else range(length)):
        x = tree.tree_unflatten(xs_tree, [_index_in_dim(v, i) for v in xs_flat])
        carry, y = _pair(f(carry, x))
        ys.append(y)
    if reverse:
        ys.reverse()
    flat = [tree.tree_flatten(y) for y in ys]
    stacked = [bind(prims.concatenate_p, *[_expand_leading(leaves[k]) for leaves, _ in flat],
                    dimension=0) for k in range(len(flat[0][0]))]
    # weakly typed where every step's y is (Python numbers, say), as JAX's stacking keeps it
    stacked = weakened_where(stacked, [all(weakly_typed(leaves[k]) for leaves, _ in flat)
                                       for k in range(len(stacked))])
    return carry, tree.tree_unflatten(flat[0][1], stacked)


def _index_in_dim(x, i):
    """``x[i]`` along the leading axis."""
    shape = aval_of(x).shape
    piece = bind(prims.slice_p, x, start_indices=(i,) + (0,) * (len(shape) - 1),
                 limit_indices=(i + 1,) + tuple(shape[1:]), strides=None)
    return bind(prims.squeeze_p, piece, dimensions=(0,))


def _expand_leading(y):
    """``y`` with a leading axis of length 1."""
    return bind(prims.reshape_p, y, new_sizes=(1,) + tuple(aval_of(y).shape))


def _scan_threading(refs, f, init, xs, length, reverse, unroll, carry_name, construct):
    """The scan of ``f`` with ``refs`` as further carries: each holds its carry while the body
    is traced, and is written with the last when the loop is done."""
    def body(carry, x):
        own, held = carry
        with swapped_in(refs, held):
            new, y = _pair(f(own, x))
            left = [r._value for r in refs]
        return (new, left), y

    (out, left), ys = _scan(body, (init, [r._read() for r in refs]), xs, length, reverse,
                            unroll, carry_name, construct)
    _written_back(refs, left)
    return out, ys


def _pair(result):
    node = tree.node_children(result)
    if node is None or len(node[2]) != 2:
        raise TypeError(f"scan body output must be a pair, got {_avals_text(result)}.")
    return node[2]


def _scan(f, init, xs, length, reverse, unroll, carry_name, construct):
    given, carry_tree = tree.tree_flatten(init)
    weak = [weakly_typed(v) for v in given]
    init_flat = [_as_array(v) for v in given]
    converted = list(init_flat)
    xs_flat, xs_tree = tree.tree_flatten(xs)
    length = _scan_length(xs_flat, length)
    _check_unroll(unroll)
    carry_avals = [aval_of(v) for v in init_flat]
    x_avals = _sliced_avals([aval_of(x) for x in xs_flat])
    nc = len(init_flat)
    ys_tree_box: list = []
    out_weak: list = []       # which results the body gives weakly typed (they stay so)
    pair_box: list = []       # the structure of the pair the body returns
    carry_name = carry_name or _param_name(f, 0, None)

    def flat_body(*args):
        carry = tree.tree_unflatten(carry_tree, args[:nc])
        x = tree.tree_unflatten(xs_tree, args[nc:])
        # as JAX: any pytree node of two children (a tuple or list, as a rule) is the pair,
        # and the scan gives its results in that node (a list, a dict, a namedtuple)
        result = f(carry, x)
        new_carry, y = _pair(result)
        pair_box[:] = [tree.tree_structure(result, is_leaf=lambda v: v is not result)]
        new_flat, new_tree = tree.tree_flatten(new_carry)
        ys_flat, ys_tree = tree.tree_flatten(y)
        check_returned_values(new_flat + ys_flat, (new_carry, y), f, "scan",
                              lambda path: f"the output of the scanned function{path}")
        _check_carry_tree(construct, carry_name, carry_tree, new_tree)
        ys_tree_box.append(ys_tree)
        out_weak[:] = [weakly_typed(v) for v in new_flat + ys_flat]
        return [_as_array(v) for v in new_flat] + list(ys_flat)

    x_weak = [weakly_typed(x) for x in xs_flat]
    kept = dict(owner=f, key=("scan", carry_tree, xs_tree, construct, carry_name),
                boxes=(ys_tree_box, out_weak, pair_box))
    body, consts = _trace_sub(flat_body, carry_avals + x_avals, weak + x_weak, **kept)
    if (_promote_weak_carries(init_flat, weak, body.out_avals[:nc])
            | _settle_meshless_carries(init_flat, body.out_avals[:nc])):
        carry_avals = [aval_of(v) for v in init_flat]
        ys_tree_box.clear()
        body, consts = _trace_sub(flat_body, carry_avals + x_avals, weak + x_weak, **kept)
    paths = tree.leaf_paths(init)
    _check_carry(construct, carry_name, paths, carry_avals, body.out_avals[:nc])
    outs = weakened_where(_bind_scan_forwarding(body, consts, init_flat, xs_flat, length,
                                                bool(reverse)), out_weak)
    outs = _given_where_forwarded(outs, given, converted)
    return tree.tree_unflatten(pair_box[0], [tree.tree_unflatten(carry_tree, outs[:nc]),
                                             tree.tree_unflatten(ys_tree_box[0], outs[nc:])])


def _given_where_forwarded(outs, given, converted) -> list:
    """A forwarded carry given as a Python number comes out as that number, as JAX's loops
    give it back (``fori_loop(0, 0, f, 1.0)`` is ``1.0``)."""
    return [given[k] if k < len(given) and is_python_scalar(given[k])
            and out is converted[k] else out for k, out in enumerate(outs)]


def _bind_scan_forwarding(body: Program, consts, init, xs, length, reverse) -> list:
    """Bind the scan; a carry the body returns unchanged (read-only) is a constant of the
    loop instead, and its result is its initial value, as JAX forwards it (so it keeps the
    initial value's type: under vmap, an unbatched one stays unbatched)."""
    nk, nc = len(consts), len(init)
    fixed, moving = _read_only(body, nk, nc)
    if not fixed:
        return bind(prims.scan_p, *consts, *init, *xs, jaxpr=body, length=length,
                    reverse=reverse, num_consts=nk, num_carry=nc)
    loop = _regrouped(body, nk, nc, fixed, moving,
                      [body.outvars[k] for k in moving] + body.outvars[nc:])
    outs = iter(bind(prims.scan_p, *consts, *[init[k] for k in fixed],
                     *[init[k] for k in moving], *xs, jaxpr=loop, length=length,
                     reverse=reverse, num_consts=nk + len(fixed), num_carry=len(moving)))
    carries = [init[k] if k in fixed else next(outs) for k in range(nc)]
    return carries + list(outs)


def _read_only(body: Program, n_consts: int, n_carry: int) -> tuple:
    """(the carries ``body`` returns as it takes them, the others), by position."""
    carry_in = body.invars[n_consts:n_consts + n_carry]
    fixed = [k for k in range(n_carry) if body.outvars[k] is carry_in[k]]
    return fixed, [k for k in range(n_carry) if k not in fixed]


def _regrouped(program: Program, n_consts: int, n_carry: int, fixed, moving, outvars):
    """``program`` taking its ``fixed`` carries after its constants, as constants, then the
    ``moving`` ones and its other inputs, and returning ``outvars``."""
    carry = program.invars[n_consts:n_consts + n_carry]
    return Program([], program.invars[:n_consts] + [carry[k] for k in fixed]
                   + [carry[k] for k in moving] + program.invars[n_consts + n_carry:],
                   program.eqns, outvars)


class _AvalText:
    """A leaf printed as JAX prints its avals: ``~float32[]`` (``str``, weakly typed) and
    ``ShapedArray(float32[], weak_type=True)`` (``repr``)."""

    def __init__(self, value):
        self.text = _type_text(aval_of(value))
        self.weak = weakly_typed(value)

    def __str__(self):
        return ("~" if self.weak else "") + self.text

    def __repr__(self):
        return f"ShapedArray({self.text}{', weak_type=True' if self.weak else ''})"


def _avals_text(value) -> str:
    """``value`` (a pytree) with its leaves' types for values, as JAX's errors show it."""
    leaves, treedef = tree.tree_flatten(value)
    return str(tree.tree_unflatten(treedef, [_AvalText(v) for v in leaves]))


def _sliced_avals(avals) -> list:
    """The types of one slice of each ``xs``: the leading dimension gone, its split with it
    (JAX asks that the leading dimension be unsplit)."""
    if any(a.ndim and spec_of(a)[0] for a in avals):
        raise ValueError("0th dimension of all xs should be replicated. Got "
                         + ", ".join(p_text(spec_of(a)) for a in avals))
    return [a.unstacked() for a in avals]


def _check_unroll(unroll) -> None:
    unroll = value_if_known(unroll)
    context = "The `unroll` argument to `scan` expects a concrete `int` or `bool` value."
    if isinstance(unroll, Tracer):
        raise abstract_value_error(unroll, context)
    if not isinstance(unroll, (bool, int, np.integer)):
        raise ConcretizationTypeError(f"{context[:-1]}, got {unroll!r}.")
    if not isinstance(unroll, bool) and unroll < 0:
        raise ValueError("`unroll` must be a `bool` or a non-negative `int`.")


def _scan_length(xs_flat, length):
    lengths = []
    for x in xs_flat:
        shape = aval_of(x).shape
        if not shape:
            raise ValueError("scan got value with no leading axis to scan over: "
                             f"{aval_of(x).str_short()}")
        lengths.append(shape[0])
    if length is None:
        if not lengths:
            raise ValueError("scan got no values to scan over and `length` not provided.")
        if len(set(lengths)) > 1:
            raise ValueError(f"scan got values with different leading axis sizes: {lengths}")
        return lengths[0]
    try:
        length = int(length)
    except ConcretizationTypeError:
        raise abstract_value_error(
            length, "The `length` argument to `scan` expects a concrete `int` value. For "
            "scan-like iteration with a dynamic length, use `while_loop` or `fori_loop`.") \
            from None
    if lengths and set(lengths) != {length}:
        raise ValueError(f"scan got `length` argument of {length} which disagrees with leading "
                         f"axis sizes {lengths}.")
    return length


def _scan_types(in_vmas, *, jaxpr, length, reverse, num_consts, num_carry):
    consts = list(in_vmas[:num_consts])
    carry = list(in_vmas[num_consts:num_consts + num_carry])
    xs = list(in_vmas[num_consts + num_carry:])
    # A fixpoint: with the check off a carry may grow its varying axes from one step to the next.
    while True:
        outs, _ = infer_vma(jaxpr, consts + carry + xs)
        grown = [c | o for c, o in zip(carry, outs[:num_carry])]
        if grown == carry:
            return list(in_vmas), carry + outs[num_carry:]
        carry = grown


vma_rules[prims.scan_p] = _scan_types


# --- fori_loop and while_loop ---------------------------------------------------------------------

def _static_bound(value):
    """A loop bound known now, as a Python int (JAX's test: a concrete value that ``int()``
    takes, a float bound truncated), else None: the loop length is static."""
    value = value_if_known(value)
    if isinstance(value, Tracer):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):        # not a number: not a static bound
        return None


def fori_loop(lower, upper, body_fun, init_val, *, unroll=None):
    """``lax.fori_loop``: ``body_fun(i, val)`` for i in [lower, upper). Static bounds lower to a
    scan (reverse-mode differentiable); traced bounds to a while loop. ``unroll`` is the
    scan's (static bounds only, as in JAX). With static bounds the counter is a weakly typed
    int32 (it counts from ``int(lower)``, as JAX's); otherwise it has the bounds' dtype (see
    ``_loop_index_dtype``)."""
    _check_callable("fori_loop", "body_fun argument should be callable.", body_fun)
    dtype = _loop_index_dtype(lower, upper)
    one = np.asarray(1, dtype)[()]
    start, stop = _static_bound(lower), _static_bound(upper)
    if start is not None and stop is not None:
        if stop <= start and _jit_disabled():
            return init_val       # (JAX's: a scan of no length cannot run op by op)
        # the counter counts from ``int(lower)``, a Python int: weakly typed int32, whatever
        # the bounds' dtype, as JAX's
        (_, result), _ = scan(_fori_step(body_fun), (start, init_val), None,
                              length=max(0, stop - start),
                              unroll=False if unroll is None else unroll,
                              carry_name="loop_carry")
        return result
    if unroll is not None and unroll is not False and unroll != 1:
        raise ValueError("Can only use `unroll` in `fori_loop` if the loop bounds are "
                         "statically known.")

    def cond_fun(loop_carry):
        i, stop, _ = loop_carry
        return bind(prims.lt_p, i, stop)

    def body(loop_carry):
        i, stop, val = loop_carry
        # a weakly typed counter (the lower bound a Python int) stays so, as JAX's
        return (bind(prims.add_p, i, one.item() if weakly_typed(i) else one), stop,
                body_fun(i, val))

    lower, upper = (_as_loop_index(b, dtype) for b in (lower, upper))
    _, _, result = while_loop(cond_fun, body, (lower, upper, init_val), carry_name="loop_carry")
    return result


def _fori_step(body_fun):
    """The scan step of a fori_loop with static bounds: one per ``body_fun`` (so the scan
    keeps its traced program, as JAX's), or a new one for a function that cannot be weakly
    referenced."""
    try:
        return _FORI_STEPS[body_fun]
    except (KeyError, TypeError):
        pass

    try:
        called = weakref.ref(body_fun)     # (the step must not keep body_fun alive)
    except TypeError:
        called = lambda: body_fun

    def step(loop_carry, _):
        i, val = loop_carry
        # (a Python int while the loop runs in Python, jit disabled, as JAX's)
        nxt = i + 1 if type(i) is int else bind(prims.add_p, i, 1)
        return (nxt, called()(i, val)), None
    try:
        _FORI_STEPS[body_fun] = step
    except TypeError:
        pass
    return step


_FORI_STEPS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _loop_index_dtype(lower, upper) -> np.dtype:
    """JAX's rule: the bounds' dtype; a weakly typed int bound (a Python int, or one ``jit``
    was given as a Python int) takes the other bound's. With both bounds Python ints the
    counter is int32 (JAX's is a weakly typed default int, which takes the dtype of what it
    meets: int32 is that in 32-bit mode and the closest strong type in 64-bit mode)."""
    weak = [weakly_typed(b) for b in (lower, upper)]
    found = [aval_of(b).dtype for b in (lower, upper)]
    if found[0] == found[1]:
        return found[0]
    # a weakly typed bound takes the other, signed integer bound's dtype
    if weak[0] != weak[1] and all(dtypes.is_int(d) and not dtypes.is_unsigned(d)
                                  for d in found):
        return found[1] if weak[0] else found[0]
    raise TypeError("lower and upper arguments to fori_loop must have equal types, got "
                    f"{found[0].name} and {found[1].name}")


def _as_loop_index(value, dtype):
    """A bound as the counter's ``dtype``. A Python int of that dtype stays one, so that the
    loop's counter, which starts as the lower bound, is weakly typed as JAX's is."""
    if is_python_scalar(value) and dtypes.weak_scalar_dtype(value) == dtype:
        return value
    if is_python_scalar(value) or isinstance(value, np.generic):
        return np.asarray(int(value), dtype)[()]
    if aval_of(value).dtype != dtype:
        return bind(prims.convert_element_type_p, value, new_dtype=dtype)
    return value


def while_loop(cond_fun, body_fun, init_val, *, carry_name=None):
    """``lax.while_loop``: repeat ``body_fun`` while ``cond_fun`` holds. A Ref (mutable
    array) the body writes from outside is threaded through the loop as a carry, found by
    tracing the body, and written when the loop is done (as ``scan`` does)."""
    _check_callable("while_loop", "body_fun and cond_fun arguments should be callable.",
                    body_fun, cond_fun)
    carry_name = carry_name or _param_name(body_fun, 0, None)
    return _threading_refs(
        lambda: _while_loop(cond_fun, body_fun, init_val, carry_name),
        lambda refs: _while_threading(refs, cond_fun, body_fun, init_val, carry_name))


def _while_threading(refs, cond_fun, body_fun, init_val, carry_name):
    """The while loop of ``body_fun`` with ``refs`` as further carries: each holds its carry
    while the functions are traced, and is written with the last when the loop is done."""
    def cond(carry):
        own, held = carry
        with swapped_in(refs, held):
            return cond_fun(own)

    def body(carry):
        own, held = carry
        with swapped_in(refs, held):
            new = body_fun(own)
            return new, [r._value for r in refs]

    out, left = _while_loop(cond, body, (init_val, [r._read() for r in refs]), carry_name)
    _written_back(refs, left)
    return out


def _while_loop(cond_fun, body_fun, init_val, carry_name):
    construct = "while_loop"
    if _jit_disabled():
        try:
            val = tree.tree_map(_as_loop_value, init_val)
            while cond_fun(val):
                val = tree.tree_map(_as_loop_value, body_fun(val))
            return val
        except CONCRETIZATION_ERRORS:
            pass     # a predicate not known now (under vmap, say): the loop is traced
    given, carry_tree = tree.tree_flatten(init_val)
    weak = [weakly_typed(v) for v in given]
    init_flat = [_as_array(v) for v in given]
    converted = list(init_flat)
    out_weak: list = []       # which carries the body gives weakly typed (they stay so)

    def flat_cond(*args):
        pred = cond_fun(tree.tree_unflatten(carry_tree, args))
        pred_flat, pred_tree = tree.tree_flatten(pred)
        if pred_tree.kind is not None:
            raise TypeError(f"cond_fun must return a boolean scalar, but got pytree "
                            f"{pred_tree}.")
        pred_aval = aval_of(pred)
        if pred_aval.shape != () or pred_aval.dtype != dtypes.bool_:
            raise TypeError("cond_fun must return a boolean scalar, but got output type(s) "
                            f"[{_AvalText(pred)!r}].")
        return pred_flat

    def flat_body(*args):
        new = body_fun(tree.tree_unflatten(carry_tree, args))
        new_flat, new_tree = tree.tree_flatten(new)
        _check_carry_tree(construct, carry_name, carry_tree, new_tree)
        out_weak[:] = [weakly_typed(v) for v in new_flat]
        return [_as_array(v) for v in new_flat]

    kept_cond = dict(owner=cond_fun, key=("while_cond", carry_tree))
    kept_body = dict(owner=body_fun, key=("while_body", carry_tree, construct, carry_name),
                     boxes=(out_weak,))
    cond_prog, cond_consts = _trace_sub(flat_cond, [aval_of(v) for v in init_flat],
                                        **kept_cond)
    pred = cond_prog.out_avals[0]
    q = pred.vma
    if q and _checking():
        init_flat = _lift(init_flat, q)
        cond_prog, cond_consts = _trace_sub(flat_cond, [aval_of(v) for v in init_flat])
    carry_avals = [aval_of(v) for v in init_flat]
    body_prog, body_consts = _trace_sub(flat_body, carry_avals, list(weak), **kept_body)
    if (_promote_weak_carries(init_flat, weak, body_prog.out_avals)
            | _settle_meshless_carries(init_flat, body_prog.out_avals)):
        carry_avals = [aval_of(v) for v in init_flat]
        cond_prog, cond_consts = _trace_sub(flat_cond, carry_avals, list(weak), **kept_cond)
        body_prog, body_consts = _trace_sub(flat_body, carry_avals, list(weak), **kept_body)
    _check_carry(construct, carry_name, tree.leaf_paths(init_val), carry_avals,
                 body_prog.out_avals)
    if q:
        for where, prog in (("cond_fun", cond_prog), ("body_fun", body_prog)):
            meeting = _meeting(collectives_in(prog), q)
            if meeting:
                name, axes, _ = meeting[0]
                raise _predicate_error(construct, _user_site(), q, where, name, axes)
    outs = _bind_while_forwarding(cond_prog, cond_consts, body_prog, body_consts, init_flat)
    outs = _given_where_forwarded(weakened_where(outs, out_weak), given, converted)
    return tree.tree_unflatten(carry_tree, outs)


def _bind_while_forwarding(cond_prog, cond_consts, body_prog, body_consts, init) -> list:
    """Bind the while loop; a carry the body returns unchanged (read-only) is a constant of
    both programs instead, and its result is its initial value, as JAX forwards it."""
    nq, nb, nc = len(cond_consts), len(body_consts), len(init)
    fixed, moving = _read_only(body_prog, nb, nc)
    if not fixed:
        return bind(prims.while_p, *cond_consts, *body_consts, *init, cond_jaxpr=cond_prog,
                    body_jaxpr=body_prog, cond_nconsts=nq, body_nconsts=nb)
    cond = _regrouped(cond_prog, nq, nc, fixed, moving, list(cond_prog.outvars))
    body = _regrouped(body_prog, nb, nc, fixed, moving, [body_prog.outvars[k] for k in moving])
    fixed_init = [init[k] for k in fixed]
    outs = iter(bind(prims.while_p, *cond_consts, *fixed_init, *body_consts, *fixed_init,
                     *[init[k] for k in moving], cond_jaxpr=cond, body_jaxpr=body,
                     cond_nconsts=nq + len(fixed), body_nconsts=nb + len(fixed)))
    return [init[k] if k in fixed else next(outs) for k in range(nc)]


def _while_types(in_vmas, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    cond_consts = list(in_vmas[:cond_nconsts])
    body_consts = list(in_vmas[cond_nconsts:cond_nconsts + body_nconsts])
    carry = list(in_vmas[cond_nconsts + body_nconsts:])
    while True:
        (q,), _ = infer_vma(cond_jaxpr, cond_consts + carry)
        outs, _ = infer_vma(body_jaxpr, body_consts + carry)
        # Devices may run different numbers of iterations where the predicate varies.
        grown = [c | o | q for c, o in zip(carry, outs)]
        if grown == carry:
            return list(in_vmas), carry
        carry = grown


vma_rules[prims.while_p] = _while_types


# --- cond and switch ------------------------------------------------------------------------------

# ``operand=`` not given (JAX's keyword form of a single operand)
_NO_OPERAND = object()


def _keyword_operand(operands: tuple, operand) -> tuple:
    """The operands, ``operand=`` (JAX's keyword for a single one) among them if given."""
    if operand is _NO_OPERAND:
        return operands
    if operands:
        raise TypeError("if 'operand' keyword is passed then no positional operands can be "
                        f"passed, got {operand=} and positional operands {operands}")
    return (operand,)


def cond(pred, true_fun, false_fun, *operands, operand=_NO_OPERAND):
    """``lax.cond``: ``true_fun(*operands)`` if ``pred`` else ``false_fun(*operands)``.

    ``pred`` is a boolean or number scalar (a number is true where it is not zero), checked
    as JAX checks it."""
    operands = _keyword_operand(operands, operand)
    if not (callable(true_fun) and callable(false_fun)):
        # JAX's deprecated form: cond(pred, true_operand, true_fun, false_operand, false_fun)
        if callable(false_fun) and len(operands) == 2 and callable(operands[1]):
            x_true, f_true, x_false, f_false = true_fun, false_fun, *operands
            return cond(pred, lambda x, _: f_true(x), lambda _, x: f_false(x), x_true, x_false)
        raise TypeError("lax.cond: true_fun and false_fun arguments should be callable.")
    if pred is None:
        raise TypeError("cond predicate is None")
    if isinstance(pred, Sequence) or len(np.shape(pred)) != 0:
        raise TypeError(f"Pred must be a scalar, got {pred} of "
                        + (f"type {type(pred)}" if isinstance(pred, Sequence)
                           else f"shape {np.shape(pred)}."))
    try:
        dtype = aval_of(pred).dtype
    except TypeError as err:
        raise TypeError(f"Pred type must be either boolean or number, got {pred}.") from err
    if dtype.kind not in "biuf":
        raise TypeError(f"Pred type must be either boolean or number, got {dtype}.")
    if is_python_scalar(pred) or isinstance(pred, (np.generic, np.ndarray)):
        index = np.int32(bool(pred))
    else:
        if dtype.kind != "b":
            pred = bind(prims.ne_p, pred, np.zeros((), dtype)[()])
        index = bind(prims.convert_element_type_p, pred, new_dtype=dtypes.int32)
    if _jit_disabled():
        known = value_if_known(index)
        if not isinstance(known, Tracer):
            return (true_fun if int(known) else false_fun)(*operands)
    return _switch("cond", index, [false_fun, true_fun], ["false_fun", "true_fun"], operands)


def switch(index, branches, *operands, operand=_NO_OPERAND):
    """``lax.switch``: ``branches[index](*operands)``, the index (an integer scalar) clamped
    into range."""
    operands = _keyword_operand(operands, operand)
    branches = list(branches)
    _check_callable("switch", "branches argument should be a sequence of callables.",
                    *branches)
    if len(np.shape(index)) != 0:
        raise TypeError(f"Branch index must be scalar, got {index} of shape {np.shape(index)}.")
    try:
        # (JAX's result_type takes None for its default float type)
        dtype = dtypes.float_ if index is None else aval_of(index).dtype
    except TypeError as err:
        raise TypeError(f"Index type must be an integer, got {index}.") from err
    if dtype.kind not in "iu":
        raise TypeError(f"Index type must be an integer, got {index} as {dtype}")
    if not branches:
        raise ValueError("Empty branch sequence")
    if len(branches) == 1:
        return branches[0](*operands)          # as JAX: no cond, so no predicate to type
    if is_python_scalar(index) or isinstance(index, (np.generic, np.ndarray)):
        # converted to int32 first, wrapping as the conversion does (JAX's), then clamped
        wrapped = (int(index) + 2 ** 31) % 2 ** 32 - 2 ** 31
        index = np.int32(min(max(wrapped, 0), len(branches) - 1))
    else:
        index = bind(prims.convert_element_type_p, index, new_dtype=dtypes.int32) \
            if dtype != dtypes.int32 else index
        index = bind(prims.max_p, index, np.int32(0))
        index = bind(prims.min_p, index, np.int32(len(branches) - 1))
    if _jit_disabled():
        known = value_if_known(index)
        if not isinstance(known, Tracer):
            return branches[int(known)](*operands)
    names = ["branch 0"] + [f"branch{k}" for k in range(1, len(branches))]   # (JAX's)
    return _switch("switch", index, branches, names, operands)


def _switch(construct, index, branches, names, operands):
    """The ``cond`` of ``branches`` (``_switch_once``); a Ref (mutable array) a branch writes
    from outside is passed in as a further operand, found by tracing the branches, returned
    by every branch, and written with the result. A Ref given as an operand is closed over
    by the branches instead, and so threaded alike (JAX's: the branches get the Ref)."""
    leaves, operands_tree = tree.tree_flatten(operands)
    if any(map(is_ref, leaves)):
        given = [leaf for leaf in leaves if not is_ref(leaf)]

        def closing(branch):
            @functools.wraps(branch)
            def run(*plain):
                rest = iter(plain)
                full = [leaf if is_ref(leaf) else next(rest) for leaf in leaves]
                return branch(*tree.tree_unflatten(operands_tree, full))
            return run
        branches, operands = [closing(b) for b in branches], tuple(given)
    return _threading_refs(
        lambda: _switch_once(construct, index, branches, names, operands),
        lambda refs: _switch_threading(refs, construct, index, branches, names, operands))


def _switch_threading(refs, construct, index, branches, names, operands):
    def threaded(branch):
        @functools.wraps(branch)
        def run(*args):
            *ops, held = args
            with swapped_in(refs, held):
                out = branch(*ops)
                return out, [r._value for r in refs]
        return run

    out, left = _switch_once(construct, index, [threaded(b) for b in branches], names,
                             tuple(operands) + ([r._read() for r in refs],))
    _written_back(refs, left)
    return out


def _switch_once(construct, index, branches, names, operands):
    """Trace every branch with the operands' own types, check them as JAX does, and bind one
    ``cond``. Outputs every branch returns as the same operand are that operand, not outputs
    of the cond (JAX forwards them too), so they keep its type."""
    ops_flat, ops_tree = tree.tree_flatten(operands)
    weak = [weakly_typed(v) for v in ops_flat]
    ops_flat = [_as_array(v) for v in ops_flat]
    q = aval_of(index).vma
    avals = [aval_of(v) for v in ops_flat]
    traced = [_trace_branch(b, ops_tree, avals, weak) for b in branches]
    _settle_meshless_outputs(branches, traced, ops_tree, avals, weak)
    out_trees = [t[2] for t in traced]
    # JAX names true_fun first for cond (branch 1 of the index), then false_fun
    order = [1, 0] if construct == "cond" else list(range(len(branches)))
    shown = [names[k] for k in order]
    _check_branch_trees(construct, [branches[k] for k in order], shown,
                        [out_trees[k] for k in order])
    if q:
        # first: an unpaired collective usually also leaves the branches typed differently,
        # and this names the real problem (JAX reports the types, or hangs if they agree)
        _check_branch_collectives(construct, shown, [traced[k][0] for k in order], q)
    _check_branch_types(construct, [branches[k] for k in order], shown,
                        [traced[k][0] for k in order], out_trees[0])
    programs, consts = share_consts(traced)
    # an operand every branch returns is forwarded in a trace; eagerly the cond runs, so its
    # results are arrays (as JAX's), not the operand as it was given
    eager = current_trace() is eval_trace
    forwarded = [f if f is None or not eager or isinstance(ops_flat[f], Tracer) else None
                 for f in _forwarded_operands(programs, len(consts))]
    kept = [Program([], p.invars, p.eqns, [v for v, f in zip(p.outvars, forwarded) if f is None])
            for p in programs]
    outs = iter(bind(prims.cond_p, index, *consts, *ops_flat, branches=tuple(kept)))
    results = [next(outs) if f is None else ops_flat[f] for f in forwarded]
    # weakly typed where the first branch (cond's false_fun) gives a weakly typed result,
    # as JAX types a cond's results from its first branch
    results = weakened_where(results, traced[0][3])
    return tree.tree_unflatten(out_trees[0], results)


def _forwarded_operands(programs, num_consts) -> list:
    """For each output, the operand every branch returns unchanged (its index), else None."""
    forwarded = []
    for k in range(len(programs[0].outvars)):
        found = {_operand_position(p, p.outvars[k], num_consts) for p in programs}
        forwarded.append(found.pop() if len(found) == 1 and None not in found else None)
    return forwarded


def _operand_position(program, atom, num_consts):
    for position, var in enumerate(program.invars[num_consts:]):
        if var is atom:
            return position
    return None


def _trace_branch(branch, ops_tree, avals, weak):
    """(program, closed-over values, output tree, which outputs are weakly typed)."""
    box: list = []

    def flat(*args):
        out = branch(*tree.tree_unflatten(ops_tree, args))
        out_flat, out_tree = tree.tree_flatten(out)
        box.append(out_tree)
        box.append([weakly_typed(v) for v in out_flat])
        return [_as_array(v) for v in out_flat]

    program, consts = _trace_sub(flat, avals, weak, owner=branch, key=("branch", ops_tree),
                                 boxes=(box,))
    return program, consts, box[0], box[1]


def _settle_meshless_outputs(branches, traced, ops_tree, avals, weak) -> None:
    """JAX's type match of branch outputs (``core.cmp_shape_shd_mat_memsp``): an output whose
    type names no mesh in some branches matches the others' typed on a mesh; those branches
    are traced again with that output laid out as the others type it (``traced`` changed in
    place), so the cond's result has their type."""
    counts = {len(t[0].out_avals) for t in traced}
    if not _meshless_context() or len(counts) != 1:
        return                          # (different structures: the checks say so)
    targets = {}
    for k, outs in enumerate(zip(*[t[0].out_avals for t in traced])):
        typed = [a for a in outs if a.type_sharding is not None]
        if typed and len(typed) < len(outs) and all(
                (a.shape, a.dtype) == (typed[0].shape, typed[0].dtype) for a in outs):
            targets[k] = named_sharding(typed[0])
    if not targets:
        return
    for b, branch in enumerate(branches):
        if not any(traced[b][0].out_avals[k].type_sharding is None for k in targets):
            continue

        def pinned(*args, branch=branch):
            out_flat, out_tree = tree.tree_flatten(branch(*args))
            return tree.tree_unflatten(out_tree, [
                bind(prims.sharding_constraint_p, _as_array(v), sharding=targets[k])
                if k in targets and aval_of(v).type_sharding is None else v
                for k, v in enumerate(out_flat)])
        traced[b] = _trace_branch(pinned, ops_tree, avals, weak)


def _check_branch_trees(construct, branches, names, out_trees):
    """JAX's text for branches whose outputs are built unlike the first's: where and how."""
    for k in range(1, len(out_trees)):
        if out_trees[k] == out_trees[0]:
            continue
        first, other = names[0], names[k]
        diffs = [f"{first} output{_at_path(path)} is a {thing1} but {other} "
                 f"output{_at_path(path)} is a {thing2}, so {why}"
                 for path, thing1, thing2, why in tree.equality_errors(out_trees[0], out_trees[k])]
        if len(diffs) == 1:
            differences = f"{diffs[0]}.\n"        # (JAX's: not capitalized, unlike the rest)
        else:
            differences = _jax_list(diffs, blank_between=True)
        raise TypeError(
            f"{construct} branch outputs must have the same pytree structure, but they "
            f"differ:\n\n"
            f"{first} is {where_defined(branches[0])}\n"
            f"{other} is {where_defined(branches[k])}\n\n"
            f"{differences}\n"
            f"Revise {first} and/or {other} so that they have the same pytree structure.")


def _at_path(path: str) -> str:
    return f" at path {path}" if path else ""


def _check_branch_types(construct, branches, names, programs, out_tree):
    """JAX's check that every branch's outputs have the first's types (shapes, dtypes,
    shardings and, with the check on, manual axis types), naming every output that differs.
    Its hints name, for each output, the axes each branch lacks (JAX names the other
    branch's extra axes, ``()`` where it lacks none: SEMANTICS 3.4)."""
    first = programs[0]
    paths = tree.leaf_paths(tree.tree_unflatten(out_tree, [0] * out_tree.num_leaves))
    checking = _checking()
    for k in range(1, len(programs)):
        diffs, hints = [], []
        for path, a, b in zip(paths, first.out_avals, programs[k].out_avals):
            vma_differs = checking and a.vma != b.vma
            if ((a.shape, a.dtype, a.type_sharding) == (b.shape, b.dtype, b.type_sharding)
                    and not vma_differs):
                continue
            diffs.append(f"the output of {names[0]}{_at_path(path)} has type {_type_text(a)} "
                         f"but the corresponding output of {names[k]} has type "
                         f"{_type_text(b)}{_mismatch_extra(a, b, vma_differs)}")
            if not vma_differs:
                continue
            for name, mine, theirs in ((names[0], a, b), (names[k], b, a)):
                missing = tuple(x for x in _axis_order() if x in theirs.vma - mine.vma)
                if missing:
                    hints.append(f"applying `jax.lax.pcast(..., {missing}, to='varying')` to "
                                 f"the output of {name}{_at_path(path)}")
        if diffs:
            first_name, other = names[0], names[k]
            raise TypeError(
                f"{construct} branches must have equal output types but they differ.\n\n"
                f"{first_name} is {where_defined(branches[0])}\n"
                f"{other} is {where_defined(branches[k])}\n\n"
                f"{_differences(diffs, blank_between=False)}\n"
                f"{_pcast_hints(hints, blank_between=False)}"
                f"Revise {first_name} and/or {other} so that all output types match.")


def _check_branch_collectives(construct, names, programs, q):
    sequences = [_meeting(collectives_in(p), q) for p in programs]
    for k, seq in enumerate(sequences[1:], start=1):
        if seq == sequences[0]:
            continue
        # name the first collective that does not pair up
        for step in range(max(len(seq), len(sequences[0]))):
            a = sequences[0][step] if step < len(sequences[0]) else None
            b = seq[step] if step < len(seq) else None
            if a != b:
                where, (name, axes, _) = (names[0], a) if a is not None else (names[k], b)
                raise _predicate_error(construct, _user_site(), q, where, name, axes)


def share_consts(traced) -> tuple[list, list]:
    """Every branch takes the closed-over values of all branches (ignoring the others')."""
    all_consts = [c for _, consts, *_ in traced for c in consts]
    programs = []
    offset = 0
    for program, consts, *_ in traced:
        n = len(consts)
        before = [Var(aval_of(c)) for c in all_consts[:offset]]
        after = [Var(aval_of(c)) for c in all_consts[offset + n:]]
        own = program.invars[:n]
        operands = program.invars[n:]
        programs.append(Program([], before + own + after + operands, program.eqns,
                                program.outvars))
        offset += n
    return programs, all_consts


def _cond_types(in_vmas, *, branches):
    """Each result varies over what the branches return (their join, with the check off) and
    over the predicate's axes: devices that differ along those may take different branches."""
    q = in_vmas[0]
    outs = None
    for program in branches:
        branch_outs, _ = infer_vma(program, list(in_vmas[1:]))
        outs = branch_outs if outs is None else [a | b for a, b in zip(outs, branch_outs)]
    return list(in_vmas), [o | q for o in outs]


vma_rules[prims.cond_p] = _cond_types
