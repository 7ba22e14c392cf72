"""``custom_jvp`` and ``custom_vjp``: functions whose derivatives the user writes.

A call traces the primal function at its arguments (so inside a shard_map body it is typed like
any call) and binds one equation holding that program and the user's rules::

    c:f32[8] = custom_jvp_call[jaxpr={ lambda ; a:f32[8]. let ... in (b,) }
                               jvp='log1pexp_jvp' name='log1pexp' num_consts=0
                               symbolic_zeros=False] x

Running it runs the primal program (compiler/inline_calls.py); only the transformations read
the rules, which are ``CustomRule`` params called on flat lists of arrays:

- JVP of a ``custom_jvp_call`` calls the user's ``jvp`` in the enclosing trace. Under ``grad``
  what it binds is linearized and transposed like any traced code.
- JVP of a ``custom_vjp_call`` runs ``fwd``, and the output tangents are one ``custom_lin``
  equation of the residuals and the input tangents, whose transpose calls ``bwd``. Nothing
  else can evaluate ``custom_lin``: ``jvp`` of a custom_vjp function raises, as in JAX.
- ``vmap`` batches the primal program and wraps each rule in ``vmap`` (``bwd``'s cotangents
  for unbatched inputs are summed over the batch).

Inside a shard_map body the rules run per device; a ``bwd`` whose cotangents are typed unlike
the primal inputs (their varying mesh axes) is an error (SEMANTICS 3.3).
"""
from __future__ import annotations

import functools
import inspect

import numpy as np

from compiler import tree
from compiler.ad_core import (Linear, backward_pass, eval_program, instantiate,
                               is_differentiable, jvp_eval, jvp_rules, transpose_rules,
                               zeros_like_aval)
from compiler.batching import batch_size, batching_rules, control_rules, moveaxis
from compiler.control_flow import scan
from compiler.vmap import vmap, vmap_unrestricted
from compiler.eager import ShardTrace
from compiler.inline_calls import custom_vjp_jvp_error
from compiler.replication import infer_vma, vma_rules
from compiler.shard_map import current_shard_context, function_name
from compiler.tracing import (EvalTrace, Tracer, UnexpectedTracerError, aval_of, bind,
                              current_trace, is_python_scalar, known_if_concrete,
                              resolving_stale, stale_value, trace_to_program, weakened_where,
                              weakly_typed)
from ir import dtypes
from ir import primitives as p
from ir import collectives as coll
from ir.core import Program
from ir.float0 import float0_zeros


# --- values the rules see -----------------------------------------------------------------------

class SymbolicZero:
    """A tangent or cotangent known to be zero, passed to rules defined with
    ``symbolic_zeros=True`` instead of an array of zeros (``.aval``, ``.shape``, ``.dtype``)."""
    __slots__ = ("aval",)

    def __init__(self, aval):
        self.aval = aval

    @property
    def shape(self):
        return self.aval.shape

    @property
    def dtype(self):
        return self.aval.dtype

    def __repr__(self):
        return f"SymbolicZero({self.aval.str_short()})"


class CustomVJPPrimal:
    """An argument of a ``symbolic_zeros=True`` custom_vjp ``fwd`` rule: the primal ``value``,
    and whether it is ``perturbed`` (differentiated)."""
    __slots__ = ("value", "perturbed")

    def __init__(self, value, perturbed: bool):
        self.value = value
        self.perturbed = perturbed

    def __repr__(self):
        return f"CustomVJPPrimal(value={self.value!r}, perturbed={self.perturbed})"


def custom_vjp_primal_tree_values(tree_of_primals):
    """The ``value`` of every ``CustomVJPPrimal`` leaf of a ``fwd`` rule's argument."""
    def value(leaf):
        if type(leaf) is not CustomVJPPrimal:
            raise TypeError(f"unexpected leaf type {type(leaf)}")
        return leaf.value
    return tree.tree_map(value, tree_of_primals)


def _zero_tangent(aval, symbolic_zeros: bool):
    """The zero tangent (or cotangent) a rule is given for a value of type ``aval``: a
    ``SymbolicZero`` or zeros, float0 for an integer or boolean one (a key's too), as JAX's."""
    if is_differentiable(aval):
        return SymbolicZero(aval) if symbolic_zeros else typed_zeros(aval)
    return (SymbolicZero(aval.update(dtype=dtypes.FLOAT0)) if symbolic_zeros
            else float0_zeros(aval))


def zero_from_primal(value, symbolic_zeros: bool = False):
    """A zero tangent for ``value``: a ``SymbolicZero`` or an array of zeros (float0 for an
    integer or boolean value, as JAX's)."""
    return _zero_tangent(aval_of(value), symbolic_zeros)


def typed_zeros(aval):
    """Zeros of ``aval``, varying over its mesh axes in a checked body (so a rule passing a
    zero tangent through keeps its primal's type)."""
    zeros = zeros_like_aval(aval.strip_vma())
    if aval.vma and _checks_vma():
        axes = tuple(a for a in _axis_order() if a in aval.vma)
        zeros = bind(coll.pvary_p, zeros, mesh_axes=axes)
    return zeros


class CustomRule:
    """A user's rule as an equation param: called on flat lists of arrays, printed as its name.

    Text holds only the name: a program read back from text runs its primal program but cannot
    be differentiated through the call."""
    __slots__ = ("fn", "name")

    def __init__(self, fn, name: str):
        self.fn = fn
        self.name = name

    def __call__(self, *args):
        return self.fn(*args)

    def short_repr(self) -> str:
        return repr(self.name)

    def __repr__(self):
        return f"CustomRule({self.name})"


def _live(rule, what: str):
    if isinstance(rule, CustomRule):
        return rule
    raise NotImplementedError(
        f"the custom {what} rule {rule!r} is only a name here (the program was read from "
        "text), so the call cannot be differentiated or batched; trace the Python function "
        "instead")


class _CustomFunction:
    """What JAX's custom_jvp, custom_vjp and custom_vmap share: as a method they bind their
    instance, and a ``def*`` method they lack is the function's they wrap (one decorator
    around another still takes the inner one's rules)."""

    def __get__(self, instance, owner=None):
        return self if instance is None else functools.partial(self, instance)

    def __getattr__(self, name):
        fun = self.__dict__.get("fun")
        if name.startswith("def") and fun is not None:
            return getattr(fun, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


class CustomVJPException(Exception):
    """A custom_vjp function differentiated with respect to a value it closes over."""

    def __init__(self, kind: str = "custom_vjp", rule: str = "VJP"):
        super().__init__(
            f"Detected differentiation of a {kind} function with respect to a closed-over "
            f"value. That isn't supported because the custom {rule} rule only specifies how to "
            f"differentiate the {kind} function with respect to explicit input parameters. Try "
            f"passing the closed-over value into the {kind} function as an argument, and "
            f"adapting the {kind} rules.")


class ClosedOverTangentError(CustomVJPException, UnexpectedTracerError):
    """A custom_jvp function differentiated with respect to a value it closes over: JAX
    raises its UnexpectedTracerError there (the value's tangent escapes the rule)."""


# --- the decorators -------------------------------------------------------------------------------

class custom_jvp(_CustomFunction):
    """A function with a user-defined JVP rule (``jax.custom_jvp``).

    >>> @custom_jvp
    ... def log1pexp(x):
    ...     return jnp.log1p(jnp.exp(x))
    >>> @log1pexp.defjvp
    ... def log1pexp_jvp(primals, tangents):
    ...     (x,), (t,) = primals, tangents
    ...     return log1pexp(x), t * (1 - 1 / (1 + jnp.exp(x)))

    ``nondiff_argnums`` (or ``nondiff_argnames``) arguments are passed to the rule first, as
    ``jvp(*nondiff_args, primals, tangents)``; they may be any Python values (functions ...).
    """

    def __init__(self, fun, nondiff_argnums=(), nondiff_argnames=()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = _nondiff_argnums(fun, nondiff_argnums, nondiff_argnames)
        self.jvp = None
        self.symbolic_zeros = False

    def defjvp(self, jvp, symbolic_zeros: bool = False):
        """Set the JVP rule ``jvp(primals, tangents) -> (primal_out, tangent_out)``; returns it,
        so it serves as a decorator. With ``symbolic_zeros`` unperturbed inputs get
        ``SymbolicZero`` tangents."""
        self.jvp = jvp
        self.symbolic_zeros = symbolic_zeros
        return jvp

    def defjvps(self, *jvps):
        """One rule per argument: ``jvp_k(tangent_k, primal_out, *primals)``, summed (None: the
        output does not depend on that argument)."""
        if self.nondiff_argnums:
            raise TypeError("Can't use ``defjvps`` with ``nondiff_argnums``.")

        def jvp(primals, tangents):
            primal_out = self(*primals)
            parts = [rule(t, primal_out, *primals) for t, rule in zip(tangents, jvps) if rule]
            if not parts:
                return primal_out, tree.tree_map(lambda x: zeros_like_aval(aval_of(x)),
                                                 primal_out)
            return primal_out, tree.tree_map(_sum_all, *parts)

        self.defjvp(jvp)

    def __call__(self, *args, **kwargs):
        name = function_name(self.fun)
        if self.jvp is None:
            raise AttributeError(f"No JVP defined for custom_jvp function {name} using defjvp.")
        args = _resolve_args(self.fun, args, kwargs, "custom_jvp", name)
        if _is_eager():
            return self.fun(*args)
        nondiff = self.nondiff_argnums
        args = tuple(tree.tree_map(_stop_gradient, a) if k in nondiff else a
                     for k, a in enumerate(args))
        static = [args[k] for k in nondiff]
        dyn = tuple(a for k, a in enumerate(args) if k not in nondiff)
        primal = functools.partial(_with_static, self.fun, nondiff, static)
        rule = functools.partial(self.jvp, *static)
        return _bind_custom_jvp(primal, rule, dyn, name, function_name(self.jvp),
                                self.symbolic_zeros)


class custom_vjp(_CustomFunction):
    """A function with a user-defined VJP (``jax.custom_vjp``): ``defvjp(fwd, bwd)``.

    ``fwd(*args) -> (out, residuals)``; ``bwd(residuals, out_cotangent) -> tuple of input
    cotangents`` (one entry per argument, None for zero). ``nondiff_argnums`` arguments go to
    ``bwd`` first and must not be traced values (functions, static settings).
    """

    def __init__(self, fun, nondiff_argnums=(), nondiff_argnames=()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = _nondiff_argnums(fun, nondiff_argnums, nondiff_argnames)
        self.fwd = None
        self.bwd = None
        self.symbolic_zeros = False

    def defvjp(self, fwd, bwd, symbolic_zeros: bool = False, optimize_remat: bool = False):
        """Set the rules. With ``symbolic_zeros`` ``fwd`` gets ``CustomVJPPrimal`` leaves and
        ``bwd`` gets ``SymbolicZero`` for output cotangents that are zero. ``optimize_remat``
        is accepted and has no effect (remat policies decide what is saved)."""
        self.fwd = fwd
        self.bwd = bwd
        self.symbolic_zeros = symbolic_zeros

    def __call__(self, *args, **kwargs):
        name = function_name(self.fun)
        if self.fwd is None or self.bwd is None:
            raise AttributeError(f"No VJP defined for custom_vjp function {name} using defvjp.")
        args = _resolve_args(self.fun, args, kwargs, "custom_vjp", name)
        if _is_eager():
            return self.fun(*args)
        nondiff = self.nondiff_argnums
        for k in nondiff:
            _check_for_tracers(args[k])
        static = [args[k] for k in nondiff]
        dyn = tuple(a for k, a in enumerate(args) if k not in nondiff)
        primal = functools.partial(_with_static, self.fun, nondiff, static)
        fwd = functools.partial(_with_static, self.fwd, nondiff, static)
        bwd = functools.partial(self.bwd, *static)
        return _bind_custom_vjp(primal, fwd, bwd, dyn, name, function_name(self.fwd),
                                function_name(self.bwd), self.symbolic_zeros)


def _nondiff_argnums(fun, argnums, argnames) -> tuple:
    chosen = set(argnums)
    if argnames:
        names = list(inspect.signature(fun).parameters)
        chosen.update(names.index(n) for n in argnames)
    return tuple(sorted(chosen))


def _resolve_args(fun, args, kwargs, kind: str, name: str) -> tuple:
    """Every argument positional, defaults filled in, as JAX's custom functions see them.
    A ``functools.partial`` is opaque (its bound keywords stay its own), as in JAX."""
    if isinstance(fun, functools.partial):
        if kwargs:
            raise TypeError(f"The input arguments to the {kind}-decorated function {name} "
                            "could not be resolved to positional-only arguments. Binding "
                            "failed with the error:\nThe following keyword arguments could not "
                            "be resolved to positions: " + ", ".join(kwargs))
        return tuple(args)
    try:
        signature = inspect.signature(fun)
    except (TypeError, ValueError):
        if kwargs:
            raise TypeError(f"The input arguments to the {kind}-decorated function {name} "
                            "could not be resolved to positional-only arguments.") from None
        return tuple(args)
    try:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        passed = [k for k in bound.kwargs if k in kwargs]
        if passed:
            # a keyword-only argument has no position; one left at its default is dropped
            # (the function then sees its default), as in JAX
            raise TypeError("The following keyword arguments could not be resolved to "
                            f"positions: {', '.join(passed)}")
    except TypeError as err:
        raise TypeError(f"The input arguments to the {kind}-decorated function {name} could "
                        "not be resolved to positional-only arguments. Binding failed with the "
                        f"error:\n{err}") from err
    return tuple(bound.args)


def _with_static(fun, nondiff, static, *dyn):
    """``fun`` called with the nondiff arguments put back in their positions."""
    it_static, it_dyn = iter(static), iter(dyn)
    n = len(static) + len(dyn)
    return fun(*[next(it_static) if k in nondiff else next(it_dyn) for k in range(n)])


def _stop_gradient(x):
    return bind(p.stop_gradient_p, x) if isinstance(x, Tracer) else x


def _check_for_tracers(value):
    for leaf in tree.tree_leaves(value):
        if isinstance(leaf, Tracer):
            raise UnexpectedTracerError(
                "Found a JAX Tracer object passed as an argument to a custom_vjp function in a "
                "position indicated by nondiff_argnums as non-differentiable. Tracers cannot be "
                "passed as non-differentiable arguments to custom_vjp functions; instead, "
                "nondiff_argnums should only be used for arguments that can't be or contain "
                "JAX tracers, e.g. function-valued arguments. In particular, array-valued "
                "arguments should typically not be indicated as nondiff_argnums.")


def _is_eager() -> bool:
    """Concrete values (no transformation in progress): the function just runs, as in JAX."""
    return isinstance(current_trace(), (EvalTrace, ShardTrace))


def _sum_all(*xs):
    total = xs[0]
    for x in xs[1:]:
        total = bind(p.add_p, total, x)
    return total


# --- binding: trace the primal, wrap the rules -----------------------------------------------

def _flat_arguments(dyn: tuple, kind: str, name: str):
    flat, in_tree = tree.tree_flatten(dyn)
    for leaf in flat:
        if not _is_array_like(leaf):
            raise TypeError(f"{kind} function {name}: the argument leaf {leaf!r} is not an "
                            "array; pass arguments that are not arrays (functions, settings) "
                            "through nondiff_argnums")
    return [_as_array(x) for x in flat], in_tree, [weakly_typed(x) for x in flat]


def _is_array_like(x) -> bool:
    return (isinstance(x, (Tracer, np.ndarray, np.generic)) or is_python_scalar(x)
            or hasattr(x, "aval"))


def _as_array(x):
    return np.asarray(x, dtypes.weak_scalar_dtype(x))[()] if is_python_scalar(x) else x


def _trace_primal(fun, flat, in_tree, weak):
    """(program with closed-over values as leading inputs, those values, output tree, which
    outputs are weakly typed); ``weak``: which of ``flat`` are."""
    flat_fun, box = tree.flatten_fun(fun, in_tree)
    shard = current_shard_context()
    # where the arguments' values are known now (a gradient's), the primal may branch on them
    body, consts, outs = trace_to_program(flat_fun, [aval_of(x) for x in flat], shard=shard,
                                          parent=current_trace(), weak=weak,
                                          known=known_if_concrete(flat, shard))
    body = Program([], body.constvars + body.invars, body.eqns, body.outvars)
    return body, consts, box[0], [weakly_typed(o) for o in outs]


def _bind_custom_jvp(primal, rule, dyn, name, jvp_name, symbolic_zeros):
    flat, in_tree, weak = _flat_arguments(dyn, "custom_jvp", name)
    body, consts, out_tree, out_weak = _trace_primal(primal, flat, in_tree, weak)
    out_avals = body.out_avals
    flat_rule = functools.partial(_flat_jvp, rule, consts, in_tree, out_tree, out_avals, name,
                                  jvp_name)
    outs = bind(p.custom_jvp_call_p, *consts, *flat, jaxpr=body,
                jvp=CustomRule(flat_rule, jvp_name), name=name, num_consts=len(consts),
                symbolic_zeros=symbolic_zeros)
    return tree.tree_unflatten(out_tree, weakened_where(outs, out_weak))


def _bind_custom_vjp(primal, fwd, bwd, dyn, name, fwd_name, bwd_name, symbolic_zeros):
    flat, in_tree, weak = _flat_arguments(dyn, "custom_vjp", name)
    body, consts, out_tree, out_weak = _trace_primal(primal, flat, in_tree, weak)
    in_avals = [aval_of(x) for x in flat]
    flat_fwd = functools.partial(_flat_fwd, fwd, consts, in_tree, out_tree, body.out_avals,
                                 symbolic_zeros, name, fwd_name)
    flat_bwd = functools.partial(_flat_bwd, bwd, consts, in_tree, out_tree, in_avals,
                                 body.out_avals, symbolic_zeros, bwd_name)
    outs = bind(p.custom_vjp_call_p, *consts, *flat, jaxpr=body,
                fwd=CustomRule(flat_fwd, fwd_name), bwd=CustomRule(flat_bwd, bwd_name),
                name=name, num_consts=len(consts), symbolic_zeros=symbolic_zeros)
    return tree.tree_unflatten(out_tree, weakened_where(outs, out_weak))


# --- the rules on flat lists, with JAX's checks ---------------------------------------------

def _axis_order():
    shard = current_shard_context()
    return shard.mesh.axis_names if shard is not None else ()


def _checks_vma() -> bool:
    shard = current_shard_context()
    return shard is not None and shard.check_vma is True


def _same_type(got, want) -> bool:
    return (got.shape == want.shape and got.dtype == want.dtype
            and (not _checks_vma() or got.vma == want.vma))


def _type_tree(out_tree, avals) -> str:
    order = _axis_order()
    return str(tree.tree_unflatten(out_tree, [a.str_long(order) for a in avals])
               ).replace("'", "")


def _flat_jvp(rule, closed, in_tree, out_tree, out_avals, name, jvp_name, consts, primals,
              tangents):
    """The user's JVP rule on flat lists: (primal outputs, output tangents, None for zero).

    ``closed`` are what the primal function closed over when it was traced, ``consts`` their
    values now: the rule, which closed over them too, reads those."""
    with resolving_stale(closed, consts):
        pair = _read_now(rule(tree.tree_unflatten(in_tree, primals),
                              tree.tree_unflatten(in_tree, tangents)))
    if not isinstance(pair, (list, tuple)) or len(pair) != 2:
        raise TypeError(f"Custom JVP rule {jvp_name} for function {name} must produce a pair "
                        "(list or tuple of length two) representing primal and tangent "
                        f"outputs, but got {pair}.")
    outs, tree_out = tree.tree_flatten(pair[0])
    tans, tree_tan = tree.tree_flatten(pair[1])
    if tree_out != tree_tan:
        raise TypeError(f"Custom JVP rule {jvp_name} for function {name} must produce primal "
                        "and tangent outputs with equal container (pytree) structures, but got "
                        f"{tree_out} and {tree_tan} respectively.")
    got = [aval_of(o) for o in outs]
    intro = (f"Custom JVP rule {jvp_name} for function {name} must produce a pair (list or "
             "tuple of length two) where the first element represents the primal output "
             f"(equal in value to the output of the custom_jvp-decorated function {name}, and "
             "in particular ")
    if tree_out != out_tree:
        raise TypeError(f"{intro}of the same container/pytree structure), but instead the JVP "
                        "rule output's first element had container/pytree structure:\n    "
                        f"{_type_tree(tree_out, got)}\nwhile the custom_jvp-decorated function "
                        f"{name} had output container/pytree structure:\n    "
                        f"{_type_tree(out_tree, out_avals)}.")
    if not all(map(_same_type, got, out_avals)):
        raise TypeError(f"{intro}with leaves of the same shape/dtype), but instead the JVP "
                        "rule output's first element had shapes/dtypes of:\n    "
                        f"{_type_tree(tree_out, got)}\nwhile the custom_jvp-decorated function "
                        f"{name} had output shapes/dtypes of:\n    "
                        f"{_type_tree(out_tree, out_avals)}")
    return outs, _checked_tangents(got, tans)


def _checked_tangents(primal_avals, tangents) -> list:
    order = _axis_order()
    checked, wrong = [], []
    for primal, tangent in zip(primal_avals, tangents):
        if not is_differentiable(primal) or type(tangent) is SymbolicZero:
            checked.append(None)      # integer outputs have no tangent (JAX: float0)
            continue
        got = aval_of(tangent)
        if not _same_type(got, primal):
            wrong.append((primal, got))
        checked.append(tangent)
    if len(primal_avals) == 1 and wrong:
        (primal, got), = wrong
        raise TypeError("Custom JVP rule must produce primal and tangent outputs with "
                        f"corresponding shapes and dtypes. Expected {primal.str_long(order)} "
                        f"(tangent type of {primal.str_long(order)}) but got "
                        f"{got.str_long(order)}.")
    if wrong:
        lines = "\n".join(f"  primal {a.str_long(order)} with tangent {b.str_long(order)}, "
                          f"expecting tangent {a.str_long(order)}" for a, b in wrong)
        raise TypeError("Custom JVP rule must produce primal and tangent outputs with "
                        f"corresponding shapes and dtypes, but got:\n{lines}")
    return checked


def _read_now(result):
    """A rule's result with each closed-over value it returns as it is (a residual ``x``)
    read as it is now: the rule ran with the values the function closed over standing for
    the ones it was traced with (a vmap's members, re-traced)."""
    return tree.tree_map(lambda v: stale_value(v) if isinstance(v, Tracer) else v, result)


def _flat_fwd(fwd, closed, in_tree, out_tree, out_avals, symbolic_zeros, name, fwd_name,
              consts, primals, perturbed):
    """The user's fwd rule on flat lists: (primal outputs, residual leaves, residual tree)."""
    leaves = ([CustomVJPPrimal(x, pert) for x, pert in zip(primals, perturbed)]
              if symbolic_zeros else list(primals))
    with resolving_stale(closed, consts):
        pair = _read_now(fwd(*tree.tree_unflatten(in_tree, leaves)))
    intro = (f"Custom VJP fwd rule {fwd_name} for function {name} must produce a pair (list or "
             "tuple of length two) where the first element represents the primal output "
             f"(equal to the output of the custom_vjp-decorated function {name}) and the second "
             "element represents residuals (i.e. values stored from the forward pass for use "
             "on the backward pass), but ")
    if not isinstance(pair, (list, tuple)) or len(pair) != 2:
        raise TypeError(f"{intro}instead of a pair the fwd rule {fwd_name} produced {pair}.")
    outs, tree_out = tree.tree_flatten(pair[0])
    got = [aval_of(o) for o in outs]
    if tree_out != out_tree:
        raise TypeError(f"{intro}instead the fwd rule output's first element had "
                        f"container/pytree structure:\n    {_type_tree(tree_out, got)}\nwhile "
                        f"the custom_vjp-decorated function {name} had output container/pytree "
                        f"structure:\n    {_type_tree(out_tree, out_avals)}.")
    if not all(map(_same_type, got, out_avals)):
        raise TypeError(f"{intro}instead the fwd rule output's first element had shapes/dtypes "
                        f"of:\n    {_type_tree(tree_out, got)}\nwhile the custom_vjp-decorated "
                        f"function {name} had output shapes/dtypes of:\n    "
                        f"{_type_tree(out_tree, out_avals)}")
    residuals, res_tree = tree.tree_flatten(pair[1])
    for leaf in residuals:
        if not _is_array_like(leaf):
            raise TypeError(f"Custom VJP fwd rule {fwd_name} for function {name}: residuals "
                            f"must be arrays (or pytrees of arrays), but one is {leaf!r}")
    return outs, [_as_array(r) for r in residuals], res_tree


def _flat_bwd(bwd, closed, in_tree, out_tree, in_avals, out_avals, symbolic_zeros, bwd_name,
              consts, residuals, res_tree, cts):
    """The user's bwd rule on flat lists: one cotangent per primal input (None for zero)."""
    cts = [_zero_tangent(a, symbolic_zeros) if ct is None else ct
           for ct, a in zip(cts, out_avals)]
    with resolving_stale(closed, consts):
        result = _read_now(bwd(tree.tree_unflatten(res_tree, residuals),
                               tree.tree_unflatten(out_tree, cts)))
    n_args = len(in_tree.subtrees)
    if isinstance(result, list) and len(result) == n_args:
        result = tuple(result)
    dummy = tree.tree_unflatten(in_tree, [object()] * in_tree.num_leaves)
    try:
        if not isinstance(result, tuple):
            raise tree.PrefixError("not a tuple")
        covering = tree.broadcast_prefix(result, dummy, is_leaf=lambda x: x is None,
                                         name="bwd output")
    except tree.PrefixError:
        raise TypeError(
            "Custom VJP bwd rule must produce an output with the same container (pytree) "
            "structure as the args tuple of the primal function, and in particular must "
            "produce a tuple of length equal to the number of arguments to the primal "
            f"function, but got bwd output structure {tree.tree_structure(result)} for primal "
            f"input structure {in_tree}.") from None
    paths = tree.leaf_paths(dummy)
    return [_checked_cotangent(ct, want, path, bwd_name)
            for ct, want, path in zip(covering, in_avals, paths)]


def _checked_cotangent(ct, want, path: str, bwd_name: str):
    if ct is None or not is_differentiable(want):
        return None
    order = _axis_order()
    if type(ct) is SymbolicZero:
        if ct.aval.shape != want.shape:
            raise ValueError("Custom VJP bwd rule produced a SymbolicZero with a shape/dtype "
                             "that does not match the corresponding input tangent shape/dtype: "
                             f"at output{path} the SymbolicZero had shape/dtype "
                             f"{ct.aval.str_long()} while the corresponding input had "
                             f"shape/dtype {want.str_long()}. Consider just returning a None "
                             "here instead of a SymbolicZero object.")
        return None
    ct = _as_array(ct)
    got = aval_of(ct)
    reasons = []
    if got.shape != want.shape:
        reasons.append("the shapes do not match")
    elif got.dtype != want.dtype and not dtypes.is_inexact(want.dtype):
        reasons.append("the dtypes do not match")
    if _checks_vma() and got.vma != want.vma:
        reasons.append("the manual axis types do not match")
    if reasons:
        so = reasons[0] if len(reasons) == 1 else ", ".join(reasons[:-1]) + ", and " + reasons[-1]
        raise ValueError(
            "Custom VJP bwd rule must produce an output with the same type as the args tuple "
            f"of the primal function, but at output{path} the bwd rule produced an output of "
            f"type {got.str_long(order)} corresponding to an input of type "
            f"{want.str_long(order)}, so {so}")
    return ct


# --- replication types: the callee typed with the argument types ---------------------------------

def call_types(in_vmas, *, jaxpr, **params):
    """The varying axes of a call of ``jaxpr``: its operands' as given, its results' as the
    program makes them."""
    outs, _ = infer_vma(jaxpr, list(in_vmas))
    return list(in_vmas), outs


def _custom_lin_types(in_vmas, *, out_vmas, **params):
    return list(in_vmas), [frozenset(v) for v in out_vmas]


for _p in p.CUSTOM_CALLS:
    vma_rules[_p] = call_types
vma_rules[p.custom_lin_p] = _custom_lin_types


# --- JVP ------------------------------------------------------------------------------------------

def _custom_jvp_call_jvp(primals, tangents, *, jaxpr, jvp, name, num_consts, symbolic_zeros):
    rule = _live(jvp, "JVP")
    if any(t is not None for t in tangents[:num_consts]):
        raise ClosedOverTangentError("custom_jvp", "JVP")
    args, arg_tangents = primals[num_consts:], tangents[num_consts:]
    tangents_in = [_zero_tangent(aval_of(a), symbolic_zeros) if t is None else t
                   for a, t in zip(args, arg_tangents)]
    return rule(list(primals[:num_consts]), list(args), tangents_in)


def _custom_vjp_call_jvp(primals, tangents, *, jaxpr, fwd, bwd, name, num_consts,
                         symbolic_zeros):
    fwd, bwd = _live(fwd, "fwd"), _live(bwd, "bwd")
    if any(t is not None for t in tangents[:num_consts]):
        raise CustomVJPException()
    args, arg_tangents = primals[num_consts:], tangents[num_consts:]
    consts = list(primals[:num_consts])
    outs, residuals, res_tree = fwd(consts, list(args), [t is not None for t in arg_tangents])
    out_avals = [aval_of(o) for o in outs]
    # the closed-over values travel with the residuals: bwd reads them too
    linear_bwd = CustomRule(functools.partial(_bwd_with_tree, bwd, res_tree, num_consts),
                            bwd.name)
    tangents_in = [instantiate(t, aval_of(a)) for a, t in zip(args, arg_tangents)]
    # a tangent is unreduced and reduced as its primal (JAX's to_tangent_spec)
    ur = ({"out_ur": tuple((tuple(sorted(a.unreduced)), tuple(sorted(a.reduced)))
                           for a in out_avals)} if any(a.ur for a in out_avals) else {})
    # and split as its primal, so the cotangent the bwd rule gets is typed as the output is
    if any(a.type_sharding is not None for a in out_avals):
        ur["out_shardings"] = tuple(a.type_sharding for a in out_avals)
    out_tangents = bind(p.custom_lin_p, *consts, *residuals, *tangents_in, bwd=linear_bwd,
                        num_res=num_consts + len(residuals),
                        out_shapes=tuple(a.shape for a in out_avals),
                        out_dtypes=tuple(a.dtype for a in out_avals),
                        out_vmas=tuple(tuple(sorted(a.vma)) for a in out_avals), **ur)
    return outs, [t if is_differentiable(a) else None for t, a in zip(out_tangents, out_avals)]


def _bwd_with_tree(bwd, res_tree, num_consts, residuals, cts):
    return bwd(residuals[:num_consts], residuals[num_consts:], res_tree, cts)


def _custom_lin_jvp(primals, tangents, **params):
    raise custom_vjp_jvp_error()


jvp_rules[p.custom_jvp_call_p] = _custom_jvp_call_jvp
jvp_rules[p.custom_vjp_call_p] = _custom_vjp_call_jvp
jvp_rules[p.custom_lin_p] = _custom_lin_jvp


# --- transpose ----------------------------------------------------------------------------------

def _custom_lin_transpose(cts, *operands, bwd, num_res, **params):
    """Cotangents of the tangent operands: the user's bwd on the residuals and ``cts``."""
    residuals, tangents = operands[:num_res], operands[num_res:]
    in_cts = _live(bwd, "bwd")(list(residuals), list(cts))
    return [None] * num_res + [ct if isinstance(t, Linear) else None
                               for ct, t in zip(in_cts, tangents)]


def _call_transpose(cts, *args, jaxpr, **params):
    """A call linear in some inputs (a rule applying a custom function to tangents):
    transpose its body."""
    in_cts = iter(backward_pass(jaxpr, list(args), list(cts)))
    return [next(in_cts) if isinstance(a, Linear) else None for a in args]


transpose_rules[p.custom_lin_p] = _custom_lin_transpose
for _p in p.CUSTOM_CALLS:
    transpose_rules[_p] = _call_transpose


# --- vmap -------------------------------------------------------------------------------------

def batched_program(jaxpr, values, dims, axis_name=None, axis_size=None):
    """The primal program batched (every output's batch axis leading), and its constants.
    ``axis_name``: the enclosing vmap's, so collectives over it inside act across members;
    ``axis_size``: its size, for a call none of whose operands it maps (a collective inside
    makes it one per member all the same)."""
    batched = vmap(lambda *args: eval_program(jaxpr, list(args)), in_axes=tuple(dims),
                   out_axes=0, axis_name=axis_name,
                   axis_size=_size_if_unmapped(dims, axis_size))
    body, consts, _ = trace_to_program(lambda *args: list(batched(*args)),
                                       [aval_of(v) for v in values],
                                       shard=current_shard_context(), parent=current_trace())
    return Program([], body.constvars + body.invars, body.eqns, body.outvars), consts


def _size_if_unmapped(dims, axis_size):
    """vmap's ``axis_size`` where no operand is mapped (else the operands say it)."""
    return axis_size if all(d is None for d in dims) else None


def _custom_jvp_call_batch(values, dims, *, jaxpr, jvp, name, num_consts, symbolic_zeros,
                           axis_name=None, axis_size=None):
    body, consts = batched_program(jaxpr, values, dims, axis_name, axis_size)
    jvp = _live(jvp, "JVP")
    rule = functools.partial(_batched_jvp, jvp, (axis_name, axis_size), len(consts),
                             dims[:num_consts], dims[num_consts:])
    outs = bind(p.custom_jvp_call_p, *consts, *values, jaxpr=body, jvp=CustomRule(rule, jvp.name),
                name=name, num_consts=len(consts) + num_consts, symbolic_zeros=symbolic_zeros)
    return outs, [0] * len(outs)


# The batched rules get the batched call's constants: the batched program's own (``n_new``),
# then the original call's, which go to the original rule per member with ``const_dims``.

def _batched_jvp(rule, axis, n_new, const_dims, arg_dims, consts, primals, tangents):
    """The rule per batch member; symbolic zeros stay outside the vmap."""
    symbolic = [type(t) is SymbolicZero for t in tangents]
    member_zeros = [_member_zero(t, d) if s else None
                    for t, d, s in zip(tangents, arg_dims, symbolic)]

    def member(cs, ps, ts):
        it = iter(ts)
        return rule(list(cs), list(ps),
                    [z if s else next(it) for z, s in zip(member_zeros, symbolic)])

    tangent_dims = [d for d, s in zip(arg_dims, symbolic) if not s]
    axis_name, axis_size = axis
    return vmap(member, in_axes=(list(const_dims), list(arg_dims), tangent_dims), out_axes=0,
                axis_name=axis_name,
                axis_size=_size_if_unmapped([*const_dims, *arg_dims, *tangent_dims], axis_size))(
        list(consts[n_new:]), list(primals), [t for t, s in zip(tangents, symbolic) if not s])


def _member_zero(zero, dim):
    if dim is None:
        return zero
    shape = zero.aval.shape
    return SymbolicZero(zero.aval.update(shape=shape[:dim] + shape[dim + 1:]))


def _custom_vjp_call_batch(values, dims, *, jaxpr, fwd, bwd, name, num_consts,
                           symbolic_zeros, axis_name=None, axis_size=None):
    body, consts = batched_program(jaxpr, values, dims, axis_name, axis_size)
    fwd, bwd = _live(fwd, "fwd"), _live(bwd, "bwd")
    layout = ((axis_name, axis_size), len(consts), dims[:num_consts], dims[num_consts:])
    outs = bind(p.custom_vjp_call_p, *consts, *values, jaxpr=body,
                fwd=CustomRule(functools.partial(_batched_fwd, fwd, *layout), fwd.name),
                bwd=CustomRule(functools.partial(_batched_bwd, bwd, *layout), bwd.name),
                name=name, num_consts=len(consts) + num_consts, symbolic_zeros=symbolic_zeros)
    return outs, [0] * len(outs)


def _batched_fwd(fwd, axis, n_new, const_dims, arg_dims, consts, primals, perturbed):
    trees: list = []

    def member(cs, ps):
        outs, residuals, res_tree = fwd(list(cs), list(ps), perturbed)
        trees.append(res_tree)
        return outs, residuals

    axis_name, axis_size = axis
    outs, residuals = vmap(member, in_axes=(list(const_dims), list(arg_dims)), out_axes=0,
                           axis_name=axis_name,
                           axis_size=_size_if_unmapped([*const_dims, *arg_dims], axis_size))(
        list(consts[n_new:]), list(primals))
    return list(outs), list(residuals), trees[0]


def _batched_bwd(bwd, axis, n_new, const_dims, arg_dims, consts, residuals, res_tree,
                 cts):
    """Every residual and cotangent is batched along axis 0; an input that is the same for
    every member gets the sum of the members' cotangents."""
    per_member = vmap(lambda cs, r, c: bwd(list(cs), list(r), res_tree, list(c)),
                      in_axes=(list(const_dims), 0, 0), out_axes=0, axis_name=axis[0])(
        list(consts[n_new:]), list(residuals), list(cts))
    return [None if ct is None else
            bind(p.reduce_sum_p, ct, axes=(0,)) if dim is None else moveaxis(ct, 0, dim)
            for ct, dim in zip(per_member, arg_dims)]


def _custom_lin_batch(values, dims, **params):
    raise custom_vjp_jvp_error()


batching_rules[p.custom_jvp_call_p] = _custom_jvp_call_batch
batching_rules[p.custom_vjp_call_p] = _custom_vjp_call_batch
batching_rules[p.custom_lin_p] = _custom_lin_batch


def _named(rule):
    """``rule`` under a vmap with an axis name: the primal and the user's rules are batched
    over that name, so collectives over it inside them act across the members (JAX's
    batch-norm pattern: a custom_vjp function taking ``pmean`` over the vmap axis)."""
    def control(trace, values, dims, **params):
        return rule(values, dims, axis_name=trace.axis.name if trace.axis else None,
                    axis_size=trace.axis_size, **params)
    return control


control_rules[p.custom_jvp_call_p] = _named(_custom_jvp_call_batch)
control_rules[p.custom_vjp_call_p] = _named(_custom_vjp_call_batch)


# --- custom_vmap --------------------------------------------------------------------------------

class custom_vmap(_CustomFunction):
    """A function with its own batching rule (JAX's ``jax.custom_batching.custom_vmap``):
    under ``vmap`` the rule runs in its place, elsewhere the function does.
    ``rule(axis_size, in_batched, *args)`` gets the arguments, batched ones with the batch
    axis leading, and ``in_batched`` (one tree of booleans per argument); it returns
    ``(outputs, out_batched)``, batched outputs with the batch axis leading.

    >>> @custom_vmap
    ... def f(x): return jnp.sin(x)
    >>> @f.def_vmap
    ... def f_vmap(axis_size, in_batched, xs): return jnp.cos(xs), in_batched[0]
    """

    def __init__(self, fun):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.vmap_rule = None

    def def_vmap(self, vmap_rule):
        """Set the batching rule; returns it unchanged (a decorator)."""
        self.vmap_rule = vmap_rule
        return vmap_rule

    def __call__(self, *args, **kwargs):
        name = function_name(self.fun)
        args = _resolve_args(self.fun, args, kwargs, "custom_vmap", name)
        if self.vmap_rule is None:
            raise AttributeError(f"No batching rule defined for custom_vmap function {name} "
                                 "using def_vmap.")
        flat, in_tree, weak = _flat_arguments(args, "custom_vmap", name)
        body, consts, out_tree, out_weak = _trace_primal(self.fun, flat, in_tree, weak)
        rule_name = function_name(self.vmap_rule)
        rule = functools.partial(_flat_vmap_rule, self.vmap_rule, rule_name, in_tree, out_tree)
        outs = bind(p.custom_vmap_call_p, *consts, *flat, jaxpr=body,
                    vmap_rule=CustomRule(rule, rule_name), name=name, num_consts=len(consts))
        return tree.tree_unflatten(out_tree, weakened_where(outs, out_weak))


def _flat_vmap_rule(rule, rule_name, in_tree, out_tree, axis_size, in_batched, args):
    """The user's rule on flat lists: (outputs, whether each is batched), with JAX's checks of
    the trees it returns."""
    batched_tree = tree.tree_unflatten(in_tree, list(in_batched))
    out, out_batched = rule(axis_size, list(batched_tree),
                            *tree.tree_unflatten(in_tree, list(args)))
    outs, got_tree = tree.tree_flatten(out)
    flags, flags_tree = tree.tree_flatten(out_batched)
    if got_tree != flags_tree:
        raise ValueError("structure of output value and output batching specification "
                         f"returned by custom vmap rule ({rule_name}) do not match.\n"
                         f"Output values: {got_tree}\nBatching spec: {flags_tree}")
    if got_tree != out_tree:
        raise ValueError(f"structure of output returned by custom vmap rule ({rule_name}) "
                         "does not match that of original custom-vmapped function.\n"
                         f"Original output: {out_tree}\nRule output: {got_tree}")
    return outs, [bool(b) for b in flags]


def _custom_vmap_call_batch(values, dims, *, jaxpr, vmap_rule, name, num_consts):
    if any(d is not None for d in dims[:num_consts]):
        raise NotImplementedError(
            f"custom_vmap function {name} closes over a value batched by an enclosing vmap; "
            "pass it as an argument")
    size = batch_size(values, dims)
    args = [v if d is None else moveaxis(v, d, 0)
            for v, d in zip(values[num_consts:], dims[num_consts:])]
    outs, out_batched = _live(vmap_rule, "vmap")(
        size, [d is not None for d in dims[num_consts:]], args)
    return list(outs), [0 if b else None for b in out_batched]


batching_rules[p.custom_vmap_call_p] = _custom_vmap_call_batch


def _custom_vmap_call_jvp(primals, tangents, *, jaxpr, vmap_rule, name, num_consts):
    """A custom_vmap call of the program's JVP, whose batching rule is the JVP of the user's
    rule (JAX's): vmap of a jvp still runs the rule."""
    rule = _live(vmap_rule, "vmap")
    if any(t is not None for t in tangents[:num_consts]):
        raise CustomVJPException("custom_vmap", "vmap")
    consts, args = list(primals[:num_consts]), list(primals[num_consts:])
    arg_tangents = [instantiate(t, aval_of(a)) for a, t in zip(args, tangents[num_consts:])]
    n = len(args)

    flat = args + arg_tangents
    body, body_consts, _, _ = _trace_primal(
        lambda *values: _outputs_and_tangents(jaxpr, consts, values[:n], values[n:]), flat,
        tree.tree_structure(tuple(flat)), [weakly_typed(x) for x in flat])
    outs = bind(p.custom_vmap_call_p, *body_consts, *flat, jaxpr=body,
                vmap_rule=CustomRule(functools.partial(_vmap_rule_jvp, rule, n), rule.name),
                name=name, num_consts=len(body_consts))
    m = len(outs) // 2
    return outs[:m], [t if is_differentiable(aval_of(o)) else None
                      for o, t in zip(outs[:m], outs[m:])]


def _outputs_and_tangents(program, consts, primals, tangents) -> list:
    """``program``'s outputs on (``consts``, ``primals``), then their tangents along
    ``tangents`` (zeros where they are symbolic)."""
    outs, out_tangents = jvp_eval(program, list(consts) + list(primals),
                                  [None] * len(consts) + list(tangents))
    return outs + [instantiate(t, aval_of(o)) for o, t in zip(outs, out_tangents)]


def _vmap_rule_jvp(rule, n, axis_size, in_batched, values):
    """The JVP of a batching rule (JAX's): the rule sees as batched the arguments whose primal
    and tangent both are, and is differentiated; a primal batched where its tangent is not (or
    the reverse) is batched by a vmap around that, whose results say what it batched."""
    batched_p, batched_t = in_batched[:n], in_batched[n:]
    both = [bp and bt for bp, bt in zip(batched_p, batched_t)]
    extra = ([0 if bp and not bt else None for bp, bt in zip(batched_p, batched_t)]
             + [0 if bt and not bp else None for bp, bt in zip(batched_p, batched_t)])
    seen = []

    def apply(*primals):
        outs, out_batched = rule(axis_size, both, list(primals))
        seen.append(out_batched)
        return list(outs)

    def rule_jvp(*values):
        primals = list(values[:n])
        body, consts, _, _ = _trace_primal(apply, primals, tree.tree_structure(tuple(primals)),
                                           [weakly_typed(x) for x in primals])
        return _outputs_and_tangents(body, consts, primals, values[n:])

    if any(d is not None for d in extra):
        outs, dims = vmap_unrestricted(rule_jvp, list(values), extra, axis_size)
    else:
        outs = rule_jvp(*values)
        dims = [None] * len(outs)
    m = len(outs) // 2
    out_both = list(seen[0])
    return outs, ([b or d is not None for b, d in zip(out_both, dims[:m])]
                  + [b or d is not None for b, d in zip(out_both, dims[m:])])


jvp_rules[p.custom_vmap_call_p] = _custom_vmap_call_jvp


def sequential_vmap(f):
    """A custom_vmap whose batching rule maps ``f`` over the batch one member at a time
    (``lax.map``), for functions that do not batch themselves."""
    f = custom_vmap(f)

    @f.def_vmap
    def rule(axis_size, in_batched, *args):
        leaves, args_tree = tree.tree_flatten(list(args))
        flags = tree.tree_leaves(in_batched)
        mapped = [leaf for leaf, b in zip(leaves, flags) if b]

        def member(carry, members):
            it = iter(members)
            merged = [next(it) if b else leaf for leaf, b in zip(leaves, flags)]
            return carry, f(*tree.tree_unflatten(args_tree, merged))

        _, out = scan(member, None, mapped, length=axis_size)
        return out, tree.tree_map(lambda _: True, out)

    return f
