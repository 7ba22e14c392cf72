"""``custom_gradient``, ``closure_convert`` and ``custom_root`` (JAX's), on top of the custom
derivatives and tracing.

``custom_gradient(f)``: ``f(*args)`` returns ``(output, vjp)`` where ``vjp(cotangent)`` is a
closure over the forward pass. As in JAX, the closure is traced once, at the forward pass,
into a program on the output's cotangent; the values it closed over are that program's
constants, and they travel to the backward pass as ``custom_vjp`` residuals (arrays), the
program itself in the residuals' tree structure.

``closure_convert(f, *example_args)``: ``f`` traced on the examples' types into a function of
``(*args, *consts)`` whose floating-point closed-over values (those a derivative may flow
through) are passed in ``consts`` instead of being captured.
"""
from __future__ import annotations

from compiler import tree
from compiler.ad_core import zeros_like_aval
from compiler.autodiff import jvp
from compiler.custom_ad import custom_jvp, custom_vjp
from compiler.tracing import (Tracer, aval_of, bind, eval_program, trace_to_program,
                              weakly_typed)
from ir import dtypes
from ir import primitives as p


class _Rule:
    """A traced vjp closure: its program, the values it closed over, and its trees (the
    cotangent it reads, the input cotangents it gives). A pytree whose leaves are the values
    and whose structure holds the rest, so it crosses to the backward pass as residuals."""

    def __init__(self, program, consts, out_tree, in_tree):
        self.program, self.consts = program, list(consts)
        self.out_tree, self.in_tree = out_tree, in_tree


tree.register_pytree_node(
    _Rule, lambda r: (r.consts, (r.program, r.out_tree, r.in_tree)),
    lambda aux, consts: _Rule(aux[0], consts, aux[1], aux[2]))


def _traced(fun, in_tree, examples):
    """``fun(*args)``, ``args`` of structure ``in_tree`` with leaves typed as ``examples``,
    traced: (program on the leaves, the values it closed over, its result's structure)."""
    out_tree_box = []

    def flat_fun(*leaves):
        out, out_tree = tree.tree_flatten(fun(*tree.tree_unflatten(in_tree, list(leaves))))
        out_tree_box.append(out_tree)
        return out

    # (a Python number stays weakly typed, as JAX traces it: -g * y of a float16 y and a
    # Python g is float16)
    program, consts, _ = trace_to_program(flat_fun, [aval_of(x) for x in examples],
                                          weak=[weakly_typed(x) for x in examples])
    return program, consts, out_tree_box[0]


def custom_gradient(fun):
    """``fun(*args) -> (output, vjp)``, differentiated by ``vjp(output_cotangent) -> one
    cotangent per argument`` (JAX's ``jax.custom_gradient``)."""

    @custom_vjp
    def wrapped(*args, **kwargs):
        output, _ = fun(*args, **kwargs)
        return output

    def fwd(*args, **kwargs):
        output, rule = fun(*args, **kwargs)
        leaves, out_tree = tree.tree_flatten((output,))
        program, consts, in_tree = _traced(rule, out_tree, leaves)
        return output, _Rule(program, consts, out_tree, in_tree)

    def bwd(rule, ct):
        cts, out_tree = tree.tree_flatten((ct,))
        if out_tree != rule.out_tree:
            raise TypeError(f"custom_gradient: the cotangent's structure {out_tree} is not "
                            f"the output's {rule.out_tree}")
        result = tree.tree_unflatten(rule.in_tree, eval_program(rule.program, cts,
                                                                rule.consts))
        return result if isinstance(result, tuple) else (result,)

    wrapped.defvjp(fwd, bwd)
    return wrapped


def closure_convert(fun, *example_args):
    """``(converted, consts)``: ``converted(*args, *consts)`` computes ``fun(*args)``, its
    closed-over values that may carry a derivative taken from ``consts`` (JAX's
    ``jax.closure_convert``): traced floating-point values. A concrete array cannot be
    differentiated, so, as in JAX, it stays in the closure."""
    flat, in_tree = tree.tree_flatten(example_args)
    program, consts, out_tree = _traced(fun, in_tree, flat)
    hoisted = [isinstance(c, Tracer) and dtypes.is_inexact(aval_of(c).dtype) for c in consts]
    lifted = [c for c, h in zip(consts, hoisted) if h]
    kept = [c for c, h in zip(consts, hoisted) if not h]

    def converted(*args):
        args, given = args[:len(args) - len(lifted)], args[len(args) - len(lifted):]
        leaves, tree_now = tree.tree_flatten(args)
        if tree_now != in_tree:
            raise TypeError("The inputs to the closure produced by closure_convert must have "
                            "the same Pytree structure as the example arguments passed when "
                            f"closure_convert was called. Expected {in_tree}, but got "
                            f"{tree_now}")
        given_it, kept_it = iter(given), iter(kept)
        values = [next(given_it) if h else next(kept_it) for h in hoisted]
        return tree.tree_unflatten(out_tree, eval_program(program, leaves, values))

    return converted, lifted


def custom_root(f, initial_guess, solve, tangent_solve, has_aux=False):
    """``solve(f, initial_guess)``, a root of ``f``, differentiated in what ``f`` closes over
    by the implicit function theorem: at the root ``f(x, p) = 0``, so
    ``dx = -tangent_solve(d_x f, d_p f . dp)`` (JAX's ``lax.custom_root``). The initial guess
    gets no derivative. ``f``, ``solve`` and ``tangent_solve`` must each give a result of the
    guess's structure (JAX's TypeError otherwise)."""
    guess_leaves, guess_tree = tree.tree_flatten(initial_guess)
    _, _, f_tree = _traced(f, tree.tree_structure((initial_guess,)), guess_leaves)
    check_tree("f", "initial_guess", f_tree, guess_tree)
    converted, consts = closure_convert(f, initial_guess)
    guess = tree.tree_map(lambda v: bind(p.stop_gradient_p, v), initial_guess)
    if not consts:
        result = solve(converted, guess)
        check_tree("solve", "initial_guess", tree.tree_structure(result), guess_tree, has_aux)
        return result
    # what solve and tangent_solve close over (the guess among it) enter as arguments whose
    # tangents do not count: the solution's derivative is the implicit function theorem's
    solver, solver_consts = closure_convert(
        lambda *params: solve(lambda x: converted(x, *params), guess), *consts)

    def linearized_solve(x, b, *params):
        return tangent_solve(lambda v: jvp(lambda y: converted(y, *params), (x,), (v,))[1], b)

    tangent_solver, tangent_consts = closure_convert(linearized_solve, guess, guess, *consts)
    n, m = len(consts), len(solver_consts)

    @custom_jvp
    def root(*args):
        return solver(*args[:n + m])

    def root_jvp(args, tangents):
        params, result = args[:n], root(*args)
        x = result[0] if has_aux else result
        _, rhs = jvp(lambda *q: converted(x, *q), tuple(params), tuple(tangents[:n]))
        dx = tangent_solver(x, tree.tree_map(lambda r: -r, rhs), *params, *args[n + m:])
        check_tree("tangent_solve", "x", tree.tree_structure(dx), guess_tree)
        if not has_aux:
            return result, dx
        return result, (dx, tree.tree_map(lambda v: zeros_like_aval(aval_of(v)), result[1]))

    root.defjvp(root_jvp)
    result = root(*consts, *solver_consts, *tangent_consts)
    check_tree("solve", "initial_guess", tree.tree_structure(result), guess_tree, has_aux)
    return result


def check_tree(func_name, expected_name, actual_tree, expected_tree, has_aux=False):
    """JAX's check that a function given to ``custom_root`` returns the structure asked for
    (the first of a pair where it also returns auxiliary data)."""
    if has_aux:
        children = actual_tree.children()
        if len(children) != 2:
            raise ValueError(f"{func_name}() produced a pytree with structure {actual_tree}, "
                             "but a pytree tuple with auxiliary output was expected because "
                             "has_aux was set to True.")
        actual_tree = children[0]
    if actual_tree != expected_tree:
        raise TypeError(f"{func_name}() output pytree structure must match {expected_name}, "
                        f"got {actual_tree} and {expected_tree}.")
