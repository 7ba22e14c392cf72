"""The user-facing transformations of automatic differentiation: ``grad``, ``value_and_grad``,
``vjp``, ``jvp`` (and ``linearize_flat`` for ``compiler.linearize``).

``vjp`` is jvp, then partial evaluation with the tangents unknown, then the backward pass of
the unknown part (``compiler.ad_core``). This module imports every rule module, so that
autodiff works however it is reached.
"""
from __future__ import annotations

import numpy as np

# the rule modules fill the tables of ad_core when imported
from compiler import (ad_control, ad_linalg, ad_rules, ad_shard_map,  # noqa: F401
                      collective_rules, remat)
from compiler import tree
from compiler.backend import get_backend
from compiler.ad_core import (JVPTrace, JVPTracer, Linear, backward_pass, eval_program,
                              full_like_aval, instantiate, is_differentiable, zeros_like_aval,
                              jvp_program_with_consts, partial_eval, transpose_rules)
from compiler.shard_map import current_shard_context, function_name, wraps
from compiler.tracing import (Tracer, aval_of, bind, check_callable, check_jax_leaves,
                              current_trace, eval_trace, is_jax_value, is_python_scalar,
                              known_if_concrete, layouts_of, set_current_trace, trace_to_program,
                              weakened, weakened_where, weakly_typed)
from ir import collectives as coll
from ir import dtypes
from ir import primitives as prims
from ir.core import Program, Var
from ir.sharding import NamedSharding, PartitionSpec
from ir.sharding_rules import named_sharding, partitions
from ir.float0 import float0_zeros


def _trace_flat(fun, flat_args, in_tree, weak):
    """Trace ``fun`` at the avals of ``flat_args`` (``weak``: which are weakly typed): (program
    with constants as leading inputs, constant values, output tree, which outputs are weakly
    typed). Outside shard_map bodies Python may branch on values computed from ``flat_args``
    where they are known, as under JAX's autodiff: the program follows the branches taken."""
    flat_fun, box = tree.flatten_fun(fun, in_tree)
    shard = current_shard_context()
    program, consts, outs = trace_to_program(flat_fun, [aval_of(a) for a in flat_args],
                                             shard=shard, parent=current_trace(),
                                             in_shardings=layouts_of(flat_args), weak=weak,
                                             known=known_if_concrete(flat_args, shard))
    program = Program([], program.constvars + program.invars, program.eqns, program.outvars)
    return program, consts, box[0], [weakly_typed(o) for o in outs]


def as_array(x):
    if is_python_scalar(x):
        return np.asarray(x, dtypes.weak_scalar_dtype(x))[()]
    return x


def linearize_flat(fun, flat_primals, in_tree):
    """(primal outputs, residuals, the linear program, output tree, differentiable mask).
    The primal outputs are weakly typed where the function gave them so."""
    weak = [weakly_typed(p) for p in flat_primals]
    flat_primals = [as_array(p) for p in flat_primals]
    program, consts, out_tree, out_weak = _trace_flat(fun, flat_primals, in_tree, weak)
    n_consts = len(consts)
    diff = [False] * n_consts + [is_differentiable(aval_of(p)) for p in flat_primals]
    # arrays a custom rule closed over are known inputs too
    shard = current_shard_context()
    jvp_prog, rule_consts = jvp_program_with_consts(
        program, diff, shard=shard,
        known=known_if_concrete(list(consts) + flat_primals, shard))
    n_in = len(rule_consts) + len(program.invars)
    n_tan = sum(diff)
    n_out = len(program.outvars)
    unknown_in = [False] * n_in + [True] * n_tan
    split = partial_eval(jvp_prog, unknown_in, [False] * n_out + [True] * n_out)
    known = eval_program(split.known, list(rule_consts) + list(consts) + list(flat_primals))
    if len(known) - split.num_residuals != n_out:
        # an operation holding primal and tangent computations together (a custom_vmap's
        # JVP) made a primal output depend on tangents
        raise ValueError("Linearization failed to produce known values for all output "
                         "primals. This is typically caused by attempting to differentiate a "
                         "function uses an operation that does not support reverse-mode "
                         "autodiff.")
    primal_outs = _weakened_results(
        _as_arrays(known[:len(known) - split.num_residuals], out_weak), out_weak, flat_primals)
    residuals = known[len(known) - split.num_residuals:]
    return primal_outs, residuals, split.unknown, out_tree, diff[n_consts:]


def _as_arrays(values, weak) -> list:
    """``values`` with the host numpy values among them (a Python number the function
    returned as it was given, converted for tracing) as arrays where nothing traces, and as
    traced values where one is to be weakly typed (``weak``): a derivative's results are
    arrays, weakly typed where the number was, as JAX's."""
    at_eval = current_trace() is eval_trace
    return [bind(prims.broadcast_in_dim_p, v, shape=v.shape,
                 broadcast_dimensions=tuple(range(v.ndim)))
            if (at_eval or w) and isinstance(v, (np.ndarray, np.generic))
            and not dtypes.is_float0(v) else v
            for v, w in zip(values, weak)]


def _weakened_results(results, weak, givens) -> list:
    """``results`` weakly typed where ``weak`` says, as JAX types them; a traced value the
    caller gave (``givens``), handed back as it is, keeps its own mark (marking it would mark
    the caller's value)."""
    given = {id(g) for g in givens}
    return weakened_where(results, [w and id(r) not in given for r, w in zip(results, weak)])


def vjp(fun, *primals, has_aux=False):
    """``(out, vjp_fun)`` (and ``aux`` with ``has_aux``): ``vjp_fun(ct)`` gives the cotangents
    of ``primals``."""
    check_callable(fun)
    _check_values(primals, "primals", fun)
    flat_primals, in_tree = tree.tree_flatten(primals)
    opaque: dict = {}
    target = split_aux(fun, opaque) if has_aux else fun
    outs, residuals, linear_prog, out_tree, diff = linearize_flat(target, flat_primals, in_tree)
    if has_aux:
        out_tree, _ = out_tree.subtrees
        n_out = out_tree.num_leaves
        aux = rebuild_aux(opaque, outs[n_out:])
        outs = outs[:n_out]
    primal_out = tree.tree_unflatten(out_tree, outs)
    tangent_avals = [aval_of(p) for p, d in zip(flat_primals, diff) if d]

    pullback = _Pullback(linear_prog, tangent_avals, out_tree, in_tree,
                         [aval_of(p) for p in flat_primals], diff, has_aux,
                         [weakly_typed(p) for p in flat_primals], function_name(fun),
                         typed_out=not all(weakly_typed(o) for o in outs),
                         primal_meshes=[_mesh_of(p) for p in flat_primals])
    # a pytree whose leaves are the residuals (as JAX's): it can be a custom_vjp residual, or
    # pass through jit
    vjp_fun = tree.Partial(pullback, list(residuals))
    return (primal_out, vjp_fun, aux) if has_aux else (primal_out, vjp_fun)


# JAX's error for a vjp function called with the output's parts as separate arguments
_VJP_TOO_MANY_ARGS = """
The function returned by `jax.vjp` applied to {} was called with {} arguments,
but functions returned by `jax.vjp` must be called with a single argument
corresponding to the single value returned by the function being differentiated
(even if that returned value is a tuple or other container).

For example, if we have:

  def f(x):
    return (x, x)
  _, f_vjp = jax.vjp(f, 1.0)

the function `f` returns a single tuple as output, and so we call `f_vjp` with a
single tuple as its argument:

  x_bar, = f_vjp((2.0, 2.0))

If we instead call `f_vjp(2.0, 2.0)`, with the values 'splatted out' as
arguments rather than in a tuple, this error can arise.
"""


class _Pullback:
    """What a vjp function does with its residuals: the linear program transposed, from the
    output cotangent to the primals' (zeros where a primal does not differentiate)."""

    def __init__(self, linear_prog, tangent_avals, out_tree, in_tree, primal_avals, diff,
                 has_aux, primal_weak, name, typed_out=False, primal_meshes=None):
        self.name = name        # the differentiated function's, for errors
        # the mesh each concrete primal is laid out on (``_on_primal_mesh``)
        self.primal_meshes = primal_meshes or [None] * len(primal_avals)
        self.linear_prog, self.tangent_avals = linear_prog, tangent_avals
        self.out_tree, self.in_tree = out_tree, in_tree
        self.primal_avals, self.diff, self.has_aux = primal_avals, diff, has_aux
        # a weakly typed real primal's cotangent (a Python number's, or an array's:
        # jnp.full(n, 0.3)) is weak where the cotangent it comes from is (grad's seed is weak
        # where the output is), or where a typed output shows that the primal met a typed
        # value: JAX converts it to a typed one there, and that conversion's transpose gives
        # the cotangent the primal's weak type back (grad(lambda s: sum(W * s))(1.5) is weak;
        # vjp(lambda s: s * s, 1.5) pulled back from a typed cotangent is typed). JAX's
        # depends on the rules on the way too: the derivatives of powers, square roots, erf
        # and sort multiply by typed constants, a dot with a typed operand or a custom rule
        # gives a typed result, and those make it typed where shardc's is weak. A complex
        # one of a function with real results gets a typed one (taking the real part
        # transposes to a typed complex value), and so does one whose tangent is sliced or
        # gathered (JAX's transposes scatter those into typed zeros: grad(lambda x: x[0]))
        self.typed_out = typed_out
        indexed = iter(_indexed_tangents(linear_prog, len(tangent_avals)))
        indexed = [d and next(indexed) for d in diff]       # per primal
        complex_out = any(v.aval.dtype.kind == "c" for v in linear_prog.outvars)
        self.primal_weak = [w and (aval.dtype.kind != "c" or complex_out) and not i
                            for w, aval, i in zip(primal_weak, primal_avals, indexed)]

    def __call__(self, residuals, ct, *extra):
        if extra:
            raise TypeError(_VJP_TOO_MANY_ARGS.format(self.name, len(extra) + 1))
        ct_leaves, ct_tree = tree.tree_flatten(ct)
        if ct_tree != self.out_tree:
            raise ValueError(f"unexpected tree structure. The argument to a VJP function "
                             f"returned by `jax.vjp` must match the pytree structure of the "
                             f"differentiated function's output: {self.out_tree}, but got "
                             f"{ct_tree}.")
        _check_cotangents(ct_leaves, self.linear_prog.outvars)
        # a float0 cotangent (of an integer output) holds nothing: a zero
        ct_leaves = [None if dtypes.is_float0(c) else c for c in ct_leaves]
        if self.has_aux:
            ct_leaves = ct_leaves + [None] * (len(self.linear_prog.outvars) - len(ct_leaves))
        args = list(residuals) + [Linear(a) for a in self.tangent_avals]
        cts = backward_pass(self.linear_prog, args, ct_leaves)
        it = iter(cts)
        # an integer or boolean primal's cotangent is JAX's float0 zeros (a numpy array)
        # (a reduced primal's zero cotangent is unreduced: its cotangent type)
        flat = [_on_primal_mesh(instantiate(next(it), aval.to_ct()), mesh, aval) if d
                else float0_zeros(aval)
                for aval, d, mesh in zip(self.primal_avals, self.diff, self.primal_meshes)]
        seed_weak = all(weakly_typed(c) for c in ct_leaves if c is not None)
        weak = [w and d and (seed_weak or self.typed_out)
                for w, d in zip(self.primal_weak, self.diff)]
        return tree.tree_unflatten(self.in_tree,
                                   _weakened_results(flat, weak, ct_leaves + list(residuals)))


def _mesh_of(primal):
    """The mesh a concrete primal is laid out on; None for other values."""
    sharding = None if isinstance(primal, Tracer) else getattr(primal, "sharding", None)
    return sharding.mesh if isinstance(sharding, NamedSharding) else None


def _on_primal_mesh(ct, mesh, aval):
    """A primal's cotangent computed from host values alone (a linear function's: nothing
    laid out took part), placed on the primal's ``mesh`` as JAX's transposes make it there:
    split as the primal's type says, else whole on every device. Others as they are."""
    if mesh is None or getattr(ct, "_committed", True) or isinstance(ct, Tracer):
        return ct
    typed = aval.type_sharding
    spec = PartitionSpec(*partitions(typed.spec)) if typed is not None else PartitionSpec()
    return get_backend().put([ct], [NamedSharding(mesh, spec)])[0]


_INDEXING = (prims.slice_p, prims.dynamic_slice_p, prims.gather_p, prims.pad_p)


def _indexed_tangents(linear_prog, n: int) -> list:
    """For each of the ``n`` tangent inputs (the last inputs of ``linear_prog``), whether an
    equation slices, gathers or pads it."""
    tangents = linear_prog.invars[len(linear_prog.invars) - n:]
    read = {id(e.invars[0]) for e in linear_prog.eqns if e.primitive in _INDEXING}
    return [id(v) in read for v in tangents]


def _check_cotangents(cts, outvars) -> None:
    """JAX's check of a vjp function's argument: each cotangent has its output's shape and
    dtype (a weak type is not a difference); an integer or boolean output's (float0 zeros)
    only its shape."""
    for ct, var in zip(cts, outvars):
        aval = var.aval
        got_shape = tuple(np.shape(ct))
        got_dtype = np.dtype(dtypes.weak_scalar_dtype(ct)) if is_python_scalar(ct) else \
            np.dtype(getattr(ct, "dtype", None) or np.result_type(ct))
        inexact = dtypes.is_inexact(aval.dtype)
        if got_shape == tuple(aval.shape) and (got_dtype == aval.dtype or not inexact):
            got = aval_of(ct) if hasattr(ct, "aval") else None      # an array, traced or not
            if got is None or not inexact or got.type_sharding == aval.type_sharding or (
                    got.type_sharding is None and not _concrete_array(ct)):
                continue
            # an array's type says how it is split over Explicit axes: it must be the
            # output's (a host value has no type, and is laid out as the output is; so is a
            # traced one typed unsplit, as the basis jacrev maps over)
            raise _cotangent_type_error(got.str_long(None), aval.str_long(None), aval)
        raise _cotangent_type_error(
            _type_text(got_shape, got_dtype),
            _type_text(aval.shape, aval.dtype if inexact else dtypes.FLOAT0), aval)


def _cotangent_type_error(got: str, expected: str, aval) -> ValueError:
    return ValueError(
        f"unexpected JAX type (e.g. shape/dtype) for argument to VJP function: got {got}, but "
        f"expected {expected} because the corresponding output of the differentiated "
        f"function had JAX type {aval.str_long(None)}")


def _concrete_array(value) -> bool:
    return hasattr(value, "aval") and not isinstance(value, Tracer)


def _type_text(shape, dtype) -> str:
    return f"{dtypes.dtype_name(dtype)}[{','.join(map(str, shape))}]"


def split_aux(fun, opaque: dict):
    """``fun`` returning ``(out, aux)``, with aux's leaves that are not JAX values (strings,
    Python objects) or are Python numbers kept in ``opaque`` by leaf index instead of traced:
    aux is returned as is (a Python int stays one, as JAX's)."""
    def wrapped(*args):
        pair = fun(*args)
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise TypeError("expected function with aux output to return a two-element "
                            f"tuple, but got type {type(pair)} with value {pair!r}")
        out, aux = pair
        leaves, aux_tree = tree.tree_flatten(aux)
        opaque.clear()
        opaque.update({k: leaf for k, leaf in enumerate(leaves)
                       if not is_jax_value(leaf) or is_python_scalar(leaf)})
        opaque["tree"] = aux_tree
        return out, [leaf for k, leaf in enumerate(leaves) if k not in opaque]
    return wrapped


def rebuild_aux(opaque: dict, traced: list):
    """The aux pytree from its traced leaves and the opaque ones, in leaf order."""
    it = iter(traced)
    aux_tree = opaque["tree"]
    leaves = [opaque[k] if k in opaque else next(it) for k in range(aux_tree.num_leaves)]
    return tree.tree_unflatten(aux_tree, leaves)


def jvp(fun, primals, tangents, has_aux=False):
    """``(fun(*primals), the directional derivative along tangents)``."""
    check_callable(fun)
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise TypeError("primal and tangent arguments to jax.jvp must be tuples or lists; "
                        f"found {type(primals).__name__} and {type(tangents).__name__}.")
    _check_values(tuple(primals), "primals", fun)
    flat_primals, in_tree = tree.tree_flatten(tuple(primals))
    flat_tangents, _ = tree.tree_flatten(tuple(tangents))
    # float0 tangents (of integer and boolean primals: zeros, holding nothing) are not values
    _check_values(tuple(t for t in flat_tangents if not dtypes.is_float0(t)), "tangents", fun)
    # as given: a tuple of primals and a list of tangents differ, as in JAX
    given_tree, t_tree = tree.tree_structure(primals), tree.tree_structure(tangents)
    expanded = None if t_tree == given_tree else _float0_expanded(primals, tangents, t_tree)
    if expanded is not None:
        flat_tangents, t_tree = expanded, given_tree
    if t_tree != given_tree:
        raise TypeError("primal and tangent arguments to jax.jvp must have the same tree "
                        f"structure; primals have tree structure {given_tree} whereas tangents "
                        f"have tree structure {t_tree}.")
    weak = [weakly_typed(p) for p in flat_primals]
    flat_primals = [as_array(p) for p in flat_primals]
    flat_tangents = [_checked_tangent(p, t) for p, t in zip(flat_primals, flat_tangents)]
    opaque: dict = {}
    flat_fun, box = tree.flatten_fun(split_aux(fun, opaque) if has_aux else fun, in_tree)
    trace = JVPTrace(current_trace())
    args = [JVPTracer(trace, p, t) for p, t in zip(flat_primals, flat_tangents)]
    for arg, is_weak in zip(args, weak):
        arg.weak = is_weak      # a Python number, and what only such values compute (JAX's)
    with set_current_trace(trace):
        outs = [trace.to_tracer(o) for o in flat_fun(*args)]
    out_weak = [o.weak for o in outs]
    primal_out = weakened_where(_as_arrays([o.primal for o in outs], out_weak), out_weak)
    # an integer or boolean result's tangent is float0 zeros, as JAX's
    tangent_out = weakened_where(_as_arrays([instantiate(o.tangent, aval_of(o.primal))
                                             if _differentiable(aval_of(o.primal).dtype)
                                             else float0_zeros(aval_of(o.primal))
                                             for o in outs], out_weak), out_weak)
    out_tree = box[0]
    if has_aux:
        out_tree, _ = out_tree.subtrees
        n = out_tree.num_leaves
        return (tree.tree_unflatten(out_tree, primal_out[:n]),
                tree.tree_unflatten(out_tree, tangent_out[:n]),
                rebuild_aux(opaque, primal_out[n:]))
    return tree.tree_unflatten(out_tree, primal_out), tree.tree_unflatten(out_tree, tangent_out)


def _float0_expanded(primals, tangents, t_tree):
    """The flat tangents where a float0 tangent stands for a primal that flattens to more than
    itself (a key array, one value to JAX, flattens to its data): float0 zeros of each of its
    leaves. None where the trees part otherwise."""
    try:
        parts = t_tree.flatten_up_to(primals)
    except ValueError:
        return None
    flat = []
    for tangent, primal in zip(tree.tree_leaves(tangents), parts):
        leaves = tree.tree_leaves(primal)
        if len(leaves) == 1 and leaves[0] is primal:
            flat.append(tangent)
        elif dtypes.is_float0(tangent) and np.shape(tangent) == np.shape(primal):
            flat.extend(float0_zeros(aval_of(leaf)) for leaf in leaves)
        else:
            return None
    return flat


def _differentiable(dtype) -> bool:
    return np.dtype(dtype).kind not in "iub"


def _checked_tangent(primal, tangent):
    """A tangent as JAX's jvp takes it: of the primal's dtype and shape (float0 for an integer
    or boolean primal, which carries no tangent: None here)."""
    p_aval = aval_of(primal)
    if dtypes.is_float0(tangent):
        t_dtype, t_shape = dtypes.FLOAT0, np.shape(tangent)
    else:
        tangent = as_array(tangent)
        t_aval = aval_of(tangent)
        t_dtype, t_shape = t_aval.dtype, t_aval.shape
    expected = p_aval.dtype if _differentiable(p_aval.dtype) else dtypes.FLOAT0
    if t_dtype != expected:
        raise TypeError("primal and tangent arguments to jax.jvp do not match; dtypes must be "
                        "equal, or in case of int/bool primal dtype the tangent dtype must be "
                        f"float0. Got primal dtype {p_aval.dtype} and so expected tangent dtype "
                        f"{dtypes.dtype_name(expected)}, but got tangent dtype "
                        f"{dtypes.dtype_name(t_dtype)} instead.")
    if tuple(t_shape) != tuple(p_aval.shape):
        raise ValueError("jvp called with different primal and tangent shapes;Got primal "
                         f"shape {tuple(p_aval.shape)} and tangent shape as {tuple(t_shape)}")
    if expected == dtypes.FLOAT0:
        return None
    if (p_aval.type_sharding is not None and current_shard_context() is None
            and aval_of(tangent).type_sharding != p_aval.type_sharding):
        # a tangent takes its primal's type (JAX's: split as the primal is), whatever its own
        tangent = bind(prims.sharding_constraint_p, tangent, sharding=named_sharding(p_aval))
    return tangent


def _untransposable(eqn) -> Exception:
    """JAX's error for transposing an equation with no rule: a callback's names its kind."""
    name = eqn.primitive.name
    if eqn.primitive is prims.callback_p:
        if eqn.params["effect"] == "io":
            return ValueError("IO callbacks do not support transpose.")
        name = f"{eqn.params['effect']}_callback"
    return NotImplementedError(f"Transpose rule (for reverse-mode differentiation) for "
                               f"'{name}' not implemented")


def linear_transpose(fun, *primals, reduce_axes=()):
    """The transpose of the linear function ``fun`` at arguments shaped as ``primals``
    (arrays or ``ShapeDtypeStruct``s): a function from cotangents of its output to a tuple of
    cotangents of its arguments."""
    def zeros(x):
        aval = aval_of(x) if not hasattr(x, "shape") or hasattr(x, "aval") or isinstance(
            x, np.ndarray) else None
        shape, dtype = (aval.shape, aval.dtype) if aval is not None else (x.shape, x.dtype)
        point = np.zeros(shape, dtype)
        if aval is None:
            return point
        shard = current_shard_context()
        if aval.vma and shard is not None:
            # in a shard_map body, a point that varies as the primal does: the cotangent of
            # a varying argument is not summed over the axes it varies over
            axes = tuple(a for a in shard.mesh.axis_names if a in aval.vma)
            return bind(coll.pvary_p, point, mesh_axes=axes)
        # a point typed as the primal (its split over Explicit axes), so is its cotangent
        return point if aval.type_sharding is None else zeros_like_aval(aval)

    # a weakly typed primal (a Python number) gives a weak point, so that its cotangent is
    # weak where JAX's is (the pullback's rule)
    def at(x):
        made = zeros(x)
        if not weakly_typed(x):
            return made
        if isinstance(made, (np.ndarray, np.generic)):
            made = bind(prims.convert_element_type_p, made, new_dtype=made.dtype)
        return weakened(made)

    points = tree.tree_map(at, primals)
    out_avals = _check_linear(fun, points)
    in_dtypes = [leaf.dtype for leaf in tree.tree_leaves(points)]
    out_dtypes = [aval.dtype for aval in out_avals]
    every = in_dtypes + out_dtypes
    if all(np.issubdtype(d, np.integer) for d in every):
        raise NotImplementedError("linear_transpose of an integer -> integer function is not "
                                  "implemented in shardc")
    if not all(dtypes.is_inexact(d) for d in every):
        raise TypeError("linear_transpose only supports [float or complex] -> [float or "
                        "complex], and integer -> integer functions, but got "
                        f"{[str(np.dtype(d)) for d in in_dtypes]} -> "
                        f"{[str(np.dtype(d)) for d in out_dtypes]}.")
    out, transposed = vjp(fun, *points)
    # a pytree (the pullback's residuals its leaves), as JAX's: it passes through jit
    return tree.Partial(_Transposed(tree.tree_structure(out), out_avals), transposed)


class _Transposed:
    """What ``linear_transpose``'s function does: the cotangent checked against the function's
    output (its structure, then each leaf's shape and dtype, as JAX's TypeErrors), pulled
    back to a tuple of the arguments' cotangents."""

    def __init__(self, out_tree, out_avals):
        self.out_tree, self.out_avals = out_tree, out_avals

    def __call__(self, transposed, *cotangents):
        cotangent = cotangents[0] if len(cotangents) == 1 else cotangents
        cts, ct_tree = tree.tree_flatten(cotangent)
        if ct_tree != self.out_tree:
            raise TypeError("cotangent tree does not match function output, expected "
                            f"{self.out_tree} but got {ct_tree}")
        if not all(map(_typechecks, self.out_avals, cts)):
            texts = [f"ShapedArray({a.str_long()})" for a in self.out_avals]
            expected = f"({', '.join(texts)}{',' if len(texts) == 1 else ''})"
            raise TypeError("cotangent type does not match function output, expected "
                            f"{expected} but got {cts}")
        return tuple(transposed(cotangent))


def _typechecks(want, ct) -> bool:
    """Whether a cotangent is of type ``want``, as JAX's typecheck asks: its shape, its dtype
    and, unless it is a host value (which has no mesh), its split over Explicit axes."""
    got = aval_of(as_array(ct))
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    return (isinstance(ct, (np.ndarray, np.generic)) or is_python_scalar(ct)
            or got.type_sharding == want.type_sharding)


# operations linear in each operand alone: one of them at most may depend on the arguments
_BILINEAR = {prims.mul_p: (0, 1), prims.dot_general_p: (0, 1), prims.div_p: (0,)}


def _check_linear(fun, points) -> None:
    """JAX's refusal of a function ``linear_transpose`` cannot transpose: it traces ``fun``
    with its arguments unknown, and an operation on them without a transpose rule (``sin``),
    or a product of two of them, fails. (The transpose itself is ``fun``'s derivative at zero,
    which a non-linear function has too: without this check it would answer quietly.)"""
    flat, in_tree = tree.tree_flatten(points)
    flat_fun, _ = tree.flatten_fun(fun, in_tree)
    program, _, _ = trace_to_program(flat_fun, [aval_of(x) for x in flat],
                                     shard=current_shard_context(), parent=current_trace())
    linear = {id(v) for v in program.invars}
    for eqn in _live_eqns(program):
        depends = [isinstance(a, Var) and id(a) in linear for a in eqn.invars]
        if not any(depends):
            continue
        if eqn.primitive not in transpose_rules:
            raise _untransposable(eqn)
        allowed = _BILINEAR.get(eqn.primitive)
        if allowed is not None and (sum(depends) > 1 or not any(
                depends[k] for k in allowed)):
            raise NotImplementedError(f"linear_transpose: {function_name(fun)} is not linear "
                                      f"in its arguments: '{eqn.primitive}' of "
                                      + ("two values that depend on them" if sum(depends) > 1
                                         else "a divisor that depends on them"))
        linear.update(id(v) for v in eqn.outvars)
    return [v.aval for v in program.outvars]


def _live_eqns(program) -> list:
    """The equations of ``program`` that its outputs depend on (JAX transposes the program
    with the rest removed: a comparison whose result is dropped needs no transpose)."""
    live = {id(v) for v in program.outvars if isinstance(v, Var)}
    kept = []
    for eqn in reversed(program.eqns):
        if any(id(v) in live for v in eqn.outvars):
            kept.append(eqn)
            live.update(id(v) for v in eqn.invars if isinstance(v, Var))
    return kept[::-1]


def value_and_grad(fun, argnums=0, has_aux=False, holomorphic=False, allow_int=False):
    """``fun``'s value and its gradient with respect to ``argnums`` (a scalar output; complex
    only with ``holomorphic=True``, whose inputs must be complex too)."""
    check_callable(fun)
    single = isinstance(argnums, int)
    argnums_t = (argnums,) if single else tuple(argnums)

    # fun's signature: jit's static_argnames find its parameters
    @wraps(fun, "Value and gradient of {fun} with respect to positional argument(s) "
                "{argnums}. Takes the same arguments as {fun} but returns a two-element tuple "
                "where the first element is the value of {fun} and the second element is the "
                "gradient, which has the same shape as the arguments at positions {argnums}.",
           argnums=argnums)
    def value_and_grad_fun(*args, **kwargs):
        if argnums_t and max(argnums_t) >= len(args):
            raise TypeError(f"differentiating with respect to argnums={argnums} requires at "
                            f"least {max(argnums_t) + 1} positional arguments to be passed by "
                            f"the caller, but got only {len(args)} positional arguments.")
        for k in argnums_t:
            _check_values(args[k], f"args[{k}]", fun)
            _check_real(args[k], allow_int, holomorphic)

        def partial_fun(*diff_args):
            full = list(args)
            for k, a in zip(argnums_t, diff_args):
                full[k] = a
            return fun(*full, **kwargs)

        chosen = tuple(args[k] for k in argnums_t)
        if has_aux:
            out, vjp_fun, aux = vjp(partial_fun, *chosen, has_aux=True)
        else:
            out, vjp_fun = vjp(partial_fun, *chosen)
        # a container (a tuple, a registered class) has no type: JAX's error shows it
        aval = aval_of(out) if tree.node_children(out) is None else None
        if aval is None:
            raise TypeError("Gradient only defined for scalar-output functions. Output was "
                            f"{out}.")
        if aval.shape != ():     # JAX's wording
            raise TypeError("Gradient only defined for scalar-output functions. Output had "
                            f"shape: {aval.shape}.")
        _check_output(aval.dtype, holomorphic)
        seed = bind(prims.broadcast_in_dim_p, np.ones((), aval.dtype), shape=(),
                    broadcast_dimensions=())
        if aval.ur:
            # the cotangent of a partial sum is reduced (of a reduced value, unreduced)
            seed = full_like_aval(aval.to_ct(), 1)
        # weakly typed where the output is, as JAX's ones_like of it
        grads = vjp_fun(weakened_where([seed], [weakly_typed(out)])[0])
        grads = grads[0] if single else grads
        return ((out, aux), grads) if has_aux else (out, grads)

    return value_and_grad_fun


def grad(fun, argnums=0, has_aux=False, holomorphic=False, allow_int=False):
    """The gradient of a scalar-output ``fun`` with respect to ``argnums``. Of a real function
    of complex values it is the conjugate of ``df/dx + i df/dy``, as in JAX."""
    vg = value_and_grad(fun, argnums, has_aux, holomorphic, allow_int)

    @wraps(fun, "Gradient of {fun} with respect to positional argument(s) {argnums}. Takes "
                "the same arguments as {fun} but returns the gradient, which has the same "
                "shape as the arguments at positions {argnums}.", argnums=argnums)
    def grad_fun(*args, **kwargs):
        (_, aux), g = vg(*args, **kwargs) if has_aux else ((None, None), vg(*args, **kwargs)[1])
        return (g, aux) if has_aux else g

    return grad_fun


def _check_values(values, where: str, fun):
    """Every leaf of ``values`` (what is differentiated) must be a JAX value."""
    check_jax_leaves(tree.tree_leaves(values), values,
                     lambda path: f"differentiated argument {where}{path} of "
                                  f"'{function_name(fun)}'")


def _check_output(dtype, holomorphic) -> None:
    """JAX's TypeErrors for what grad cannot differentiate: a complex output without
    ``holomorphic=True``, a real one with it, an integer one."""
    is_complex = np.issubdtype(dtype, np.complexfloating)
    if holomorphic:
        if not is_complex:
            raise TypeError("grad with holomorphic=True requires outputs with complex dtype, "
                            f"but got {dtype.name}.")
    elif is_complex:
        raise TypeError("grad requires real-valued outputs (output dtype that is a sub-dtype "
                        f"of np.floating), but got {dtype.name}. For holomorphic "
                        "differentiation, pass holomorphic=True. For differentiation of "
                        "non-holomorphic functions involving complex outputs, use jax.vjp "
                        "directly.")
    elif not dtypes.is_inexact(dtype):
        raise TypeError("grad requires real-valued outputs (output dtype that is a sub-dtype "
                        f"of np.floating), but got {dtype.name}. For differentiation of "
                        "functions with integer outputs, use jax.vjp directly.")


def _check_real(arg, allow_int, holomorphic=False):
    for leaf in tree.tree_leaves(arg):
        dtype = aval_of(as_array(leaf)).dtype
        if holomorphic and not np.issubdtype(dtype, np.complexfloating):
            raise TypeError("grad with holomorphic=True requires inputs with complex dtype, "
                            f"but got {dtype.name}.")
        if not dtypes.is_inexact(dtype) and not allow_int:
            raise TypeError("grad requires real- or complex-valued inputs (input dtype that is a "
                            f"sub-dtype of np.inexact), but got {dtype.name}. If you want to "
                            "use Boolean- or integer-valued inputs, use vjp or set allow_int "
                            "to True.")


