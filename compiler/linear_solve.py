"""``custom_linear_solve`` (JAX's ``lax.custom_linear_solve``): a matrix-free linear solve
whose derivative is the implicit one, not the derivative of the solver's iterations.

``custom_linear_solve(matvec, b, solve, transpose_solve)`` runs ``solve(matvec, b)``. At the
solution ``A x = b``, so ``A dx = db - dA x``: the JVP solves again, for the right-hand side
``db - (d matvec)(x)`` (``matvec`` differentiated in what it closes over, at ``x``). That second
solve is linear in its right-hand side, and its transpose is the transposed system solved by
``transpose_solve`` on ``vecmat`` (``matvec`` transposed, or ``matvec`` itself when
``symmetric``), which reverse mode needs.

One equation holds the four traced functions, each a program on its closed-over values then
the vector (x or b), and reads all those values then ``b``::

    x:f32[3] = custom_linear_solve[jaxpr={ lambda ; a b c. let ... in (x,) }
                                   rules='LinearSolve(matvec, solve)'] a b c

``jaxpr`` is the forward computation on every operand (the solve; the rest ignored), so running,
typing and lowering the equation treat it as a call that is inlined before lowering
(compiler/inline_calls.py); only autodiff and vmap read ``rules``. Text holds only their names:
a program read back from text runs, but cannot be differentiated or batched through the solve.
"""
from __future__ import annotations

from compiler import tree
from compiler.ad_core import (Linear, instantiate, is_differentiable, jvp_eval, jvp_rules,
                               partial_eval_rules, transpose_rules)
from compiler.autodiff import linear_transpose
from compiler.batching import batching_rules, broadcast_batch, control_rules, moveaxis
from compiler.custom_ad import batched_program, call_types
from compiler.custom_gradient import check_tree
from compiler.replication import vma_rules
from compiler.shard_map import current_shard_context
from compiler.tracing import (aval_of, bind, current_trace, trace_to_program, weakened_where,
                              weakly_typed)
from ir import primitives as p
from ir.core import Program, Var

_NAMES = ("matvec", "vecmat", "solve", "transpose_solve")


class LinearSolve:
    """The traced functions of a linear solve as an equation param: ``programs`` are matvec,
    vecmat (None without a transpose_solve), solve and transpose_solve (or None), each reading
    its ``const_lengths`` closed-over values then the vector; printed by the functions' names."""
    __slots__ = ("programs", "const_lengths")

    def __init__(self, programs, const_lengths):
        self.programs, self.const_lengths = tuple(programs), tuple(const_lengths)

    def transposed(self) -> "LinearSolve":
        """The transposed system: vecmat for matvec, transpose_solve for solve (and back)."""
        order = (1, 0, 3, 2)
        return LinearSolve([self.programs[k] for k in order],
                           [self.const_lengths[k] for k in order])

    def __repr__(self):
        return "LinearSolve(" + ", ".join(
            name for name, prog in zip(_NAMES, self.programs) if prog is not None) + ")"

    def short_repr(self) -> str:
        return repr(repr(self))


def _live(rules) -> LinearSolve:
    if isinstance(rules, LinearSolve):
        return rules
    raise NotImplementedError(
        f"the custom_linear_solve functions {rules!r} are only names here (the program was "
        "read from text), so the solve cannot be differentiated or batched; trace the Python "
        "functions instead")


def _split(values, const_lengths):
    """Operands as (one list of closed-over values per function, the vector)."""
    groups, start = [], 0
    for n in const_lengths:
        groups.append(list(values[start:start + n]))
        start += n
    return groups, list(values[start:])


def _forward(rules: LinearSolve) -> Program:
    """The solve as a program on every operand of the equation (the others' values unread)."""
    ins = []
    for k, (prog, n) in enumerate(zip(rules.programs, rules.const_lengths)):
        if k == 2:
            ins.extend(prog.invars[:n])
        elif prog is not None:
            ins.extend(Var(v.aval) for v in prog.invars[:n])
    solve = rules.programs[2]
    n_solve = rules.const_lengths[2]
    return Program([], ins + list(solve.invars[n_solve:]), solve.eqns, solve.outvars)


def _bind(rules: LinearSolve, groups, b) -> list:
    return bind(p.linear_solve_p, *[c for g in groups for c in g], *b, jaxpr=_forward(rules),
                rules=rules)


def _trace(fun, in_tree, avals, weak):
    """``fun`` on a pytree of ``in_tree`` traced at leaves typed ``avals``: (its program on
    its closed-over values then the leaves, those values, its result's structure, which of
    its results are weakly typed)."""
    out_tree = []

    def flat(*leaves):
        leaves_out, t = tree.tree_flatten(fun(tree.tree_unflatten(in_tree, list(leaves))))
        out_tree.append(t)
        return leaves_out

    program, consts, outs = trace_to_program(flat, avals, shard=current_shard_context(),
                                             parent=current_trace(), weak=weak)
    return (Program([], program.constvars + program.invars, program.eqns, program.outvars),
            consts, out_tree[0], [weakly_typed(o) for o in outs])


def _shape_checked(fun, name, b_shapes, has_aux):
    """``fun`` whose result (its first, with ``has_aux``) must have ``b``'s leaf shapes
    (JAX's ValueError)."""
    def checked(x):
        out = fun(x)
        y = out[0] if has_aux else out
        shapes = [tuple(aval_of(leaf).shape) for leaf in tree.tree_leaves(y)]
        if shapes != b_shapes:
            raise ValueError(f"{name}() output shapes must match b, got {shapes} and "
                             f"{b_shapes}")
        return out
    return checked


def custom_linear_solve(matvec, b, solve, transpose_solve=None, symmetric=False,
                        has_aux=False):
    """``solve(matvec, b)``, differentiated as the solution of ``matvec(x) == b`` (JAX's
    ``lax.custom_linear_solve``): forward mode solves again with ``solve``; reverse mode
    needs ``transpose_solve(vecmat, b)`` (``solve`` itself where ``symmetric``), ``vecmat``
    being ``matvec``'s transpose. With ``has_aux`` both solvers return ``(x, aux)``; ``aux``
    gets no derivative."""
    if transpose_solve is None and symmetric:
        transpose_solve = solve
    b_leaves, b_tree = tree.tree_flatten(b)
    avals = [aval_of(x) for x in b_leaves]
    weak = [weakly_typed(x) for x in b_leaves]
    b_shapes = [tuple(a.shape) for a in avals]
    programs, groups = [], []

    def add(fun, name, aux):
        prog, consts, out_tree, out_weak = _trace(_shape_checked(fun, name, b_shapes, aux),
                                                  b_tree, avals, weak)
        check_tree(name, "b", out_tree, b_tree, aux)
        programs.append(prog)
        groups.append(consts)
        return out_tree, out_weak

    add(matvec, "matvec", False)
    if transpose_solve is None:
        programs.append(None)
        groups.append([])
    elif symmetric:
        programs.append(programs[0])
        groups.append(groups[0])
        vecmat = matvec
    else:
        def vecmat(x):
            return linear_transpose(matvec, b)(x)[0]
        add(vecmat, "vecmat", False)
    out_tree, out_weak = add(lambda v: solve(matvec, v), "solve", has_aux)
    if transpose_solve is None:
        programs.append(None)
        groups.append([])
    else:
        add(lambda v: transpose_solve(vecmat, v), "transpose_solve", has_aux)
    rules = LinearSolve(programs, [len(g) for g in groups])
    # weakly typed where the solve gave a weakly typed result, as JAX types them
    outs = weakened_where(_bind(rules, groups, b_leaves), out_weak)
    return tree.tree_unflatten(out_tree, outs)


# --- autodiff -----------------------------------------------------------------------------------

def _linear_solve_jvp(primals, tangents, *, jaxpr, rules):
    """``dx = solve(db - (d matvec)(x))``; auxiliary outputs get no tangent."""
    rules = _live(rules)
    x_all = bind(p.linear_solve_p, *primals, jaxpr=jaxpr, rules=rules)
    groups, b = _split(primals, rules.const_lengths)
    t_groups, b_dot = _split(tangents, rules.const_lengths)
    x = x_all[:len(b)]
    rhs = list(b_dot)
    if any(t is not None for t in t_groups[0]):
        # matvec's tangent in what it closes over, at the solution
        _, a_dot_x = jvp_eval(rules.programs[0], groups[0] + x,
                              t_groups[0] + [None] * len(x))
        rhs = [t if d is None else bind(p.neg_p, d) if t is None else bind(p.sub_p, t, d)
               for t, d in zip(rhs, a_dot_x)]
    if all(t is None for t in rhs):
        return x_all, [None] * len(x_all)
    rhs = [instantiate(t, aval_of(v)) for t, v in zip(rhs, b)]
    dx = _bind(rules, groups, rhs)[:len(b)]
    return x_all, ([d if is_differentiable(aval_of(v)) else None for d, v in zip(dx, x)]
                   + [None] * (len(x_all) - len(b)))


def _linear_solve_transpose(cts, *args, jaxpr, rules):
    """The cotangent of ``b``: the transposed system solved for the solution's cotangent."""
    rules = _live(rules)
    if rules.programs[3] is None:
        raise TypeError("transpose_solve required for backwards mode automatic "
                        "differentiation of custom_linear_solve")
    groups, b = _split(args, rules.const_lengths)
    if any(isinstance(c, Linear) for g in groups for c in g):
        raise NotImplementedError("custom_linear_solve: transposing with respect to the "
                                  "values matvec or the solvers close over")
    if any(ct is not None for ct in cts[len(b):]):
        raise NotImplementedError("custom_linear_solve: a cotangent for the solvers' "
                                  "auxiliary outputs")
    ct_x = [instantiate(ct, v.aval if isinstance(v, Linear) else aval_of(v))
            for ct, v in zip(cts[:len(b)], b)]
    t_rules = rules.transposed()
    t_groups = [groups[k] for k in (1, 0, 3, 2)]
    ct_b = _bind(t_rules, t_groups, ct_x)[:len(b)]
    return ([None] * sum(rules.const_lengths)
            + [ct if isinstance(v, Linear) else None for ct, v in zip(ct_b, b)])


def _linear_solve_partial_eval(eqn, ins_unknown):
    """The whole solve is unknown once anything it reads is (a tangent right-hand side): its
    known operands become residuals."""
    return [], [eqn], list(eqn.outvars)


jvp_rules[p.linear_solve_p] = _linear_solve_jvp
transpose_rules[p.linear_solve_p] = _linear_solve_transpose
partial_eval_rules[p.linear_solve_p] = _linear_solve_partial_eval
vma_rules[p.linear_solve_p] = call_types


# --- vmap ---------------------------------------------------------------------------------------

def _linear_solve_batch(values, dims, *, jaxpr, rules, axis_name=None):
    """Every function batched with the vector batched along axis 0 (b broadcast where it is
    not), so all four agree on which values are batched; the solution is batched too."""
    rules = _live(rules)
    size = next(aval_of(v).shape[d] for v, d in zip(values, dims) if d is not None)
    groups, b = _split(values, rules.const_lengths)
    g_dims, b_dims = _split(dims, rules.const_lengths)
    b = [broadcast_batch(v, size) if d is None else moveaxis(v, d, 0)
         for v, d in zip(b, b_dims)]
    programs, new_groups = [], []
    for prog, consts, c_dims in zip(rules.programs, groups, g_dims):
        if prog is None:
            programs.append(None)
            new_groups.append([])
            continue
        batched, extra = batched_program(prog, consts + b, list(c_dims) + [0] * len(b),
                                          axis_name)
        programs.append(batched)
        new_groups.append(list(extra) + consts)
    new_rules = LinearSolve(programs, [len(g) for g in new_groups])
    outs = _bind(new_rules, new_groups, b)
    return outs, [0] * len(outs)


def _named(trace, values, dims, **params):
    return _linear_solve_batch(values, dims, axis_name=trace.axis.name if trace.axis else None,
                               **params)


batching_rules[p.linear_solve_p] = _linear_solve_batch
control_rules[p.linear_solve_p] = _named
