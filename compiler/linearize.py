"""``linearize``: a function's value and its JVP as a linear function of the tangents alone.

The forward part runs once, now; the returned function evaluates the linear part of the JVP
program (partial evaluation with the tangents unknown, as ``vjp`` does before transposing), so
calling it again does not recompute the primal function.
"""
from __future__ import annotations

import numpy as np

from compiler import tree
from compiler.autodiff import (as_array, rebuild_aux, split_aux, eval_program,
                               linearize_flat)
from compiler.shard_map import current_shard_context
from compiler.tracing import aval_of, check_callable
from ir import dtypes
from ir.float0 import float0_zeros


def linearize(fun, *primals, has_aux: bool = False):
    """``(fun(*primals), f_jvp)`` with ``f_jvp(*tangents) == jvp(fun, primals, tangents)[1]``,
    linear in the tangents (and ``aux`` third with ``has_aux``).

    >>> y, f_jvp = linearize(jnp.sin, 1.0)
    >>> f_jvp(2.0)      # 2 cos(1)
    """
    check_callable(fun)
    flat_primals, in_tree = tree.tree_flatten(primals)
    opaque: dict = {}      # aux leaves that are not arrays, returned as they are
    target = split_aux(fun, opaque) if has_aux else fun
    outs, residuals, linear, out_tree, diff = linearize_flat(target, flat_primals, in_tree)
    flat_primals = [as_array(x) for x in flat_primals]
    aux = None
    if has_aux:
        out_tree, _ = out_tree.subtrees
        aux = rebuild_aux(opaque, outs[out_tree.num_leaves:])
        outs = outs[:out_tree.num_leaves]
    primal_avals = [aval_of(x) for x in flat_primals]
    # a pytree whose leaves are the residuals, as JAX's: it can pass through jit
    f_jvp = tree.Partial(_LinearJVP(linear, in_tree, out_tree, primal_avals, diff),
                         list(residuals))
    primal_out = tree.tree_unflatten(out_tree, outs)
    return (primal_out, f_jvp, aux) if has_aux else (primal_out, f_jvp)


class _LinearJVP:
    """What a linearized function does with its residuals: the linear program, run from the
    tangents of the primals (those that differentiate) to the outputs' tangents."""

    def __init__(self, linear, in_tree, out_tree, primal_avals, diff):
        self.linear, self.in_tree, self.out_tree = linear, in_tree, out_tree
        self.primal_avals, self.diff = primal_avals, diff

    @property
    def args(self) -> tuple:
        """The linear program first, where JAX's linearized function (a partial application
        of its linear jaxpr) holds it: ``f_jvp.func.args[0]`` prints the program."""
        return (self.linear,)

    def __call__(self, residuals, *tangents):
        flat, t_tree = tree.tree_flatten(tangents)
        if t_tree != self.in_tree:
            raise TypeError(f"linearized function called with tangents of structure {t_tree}, "
                            f"but the primals had structure {self.in_tree}")
        flat = [t if dtypes.is_float0(t) else as_array(t) for t in flat]
        for t, aval, d in zip(flat, self.primal_avals, self.diff):
            # an integer or boolean primal's tangent is float0 zeros, as JAX's
            expected = aval.dtype if d else dtypes.FLOAT0
            if dtypes.is_float0(t):
                shape, dtype, text = t.shape, dtypes.FLOAT0, f"float0{list(t.shape)}"
            else:
                got = aval_of(t)
                shape, dtype, text = got.shape, got.dtype, got.str_short()
            if tuple(shape) != tuple(aval.shape) or dtype != expected:
                want = (aval.str_short() if d
                        else "float0[" + ",".join(map(str, aval.shape)) + "]")
                raise ValueError("linearized function called on tangent values inconsistent "
                                 f"with the original primal values: got tangent {text} for "
                                 f"primal {aval.str_short()} but expected {want}")
            if not d:
                continue
            if got.vma != aval.vma and _checks_vma():
                raise ValueError(_vma_mismatch(got, aval))
        args = list(residuals) + [t for t, d in zip(flat, self.diff) if d]
        out_tangents = eval_program(self.linear, args)[:self.out_tree.num_leaves]
        # an integer or boolean output's tangent is float0 zeros, as jvp's
        out_tangents = [float0_zeros(aval_of(t)) if np.dtype(aval_of(t).dtype).kind in "iub"
                        else t for t in out_tangents]
        return tree.tree_unflatten(self.out_tree, out_tangents)


def _checks_vma() -> bool:
    """Whether values' varying axes are checked here: in a shard_map body with the check on
    (with it off, JAX tracks none, so a tangent made there need not vary as its primal)."""
    shard = current_shard_context()
    return shard is not None and shard.check_vma is True


def _vma_mismatch(tangent, primal) -> str:
    """JAX's error for a tangent that varies over other mesh axes than its primal did (in a
    shard_map body), with the ``pcast`` that would make them agree."""
    order = lambda axes: tuple(sorted(axes, key=str))
    fixes = []
    if tangent.vma - primal.vma:
        fixes.append(f"applying `jax.lax.pcast(..., {order(tangent.vma - primal.vma)}, "
                     "to='varying')` to the primal value passed to `jax.linearize`")
    if primal.vma - tangent.vma:
        fixes.append(f"applying `jax.lax.pcast(..., {order(primal.vma - tangent.vma)}, "
                     "to='varying')` to the tangent value passed to the callable `f_jvp` "
                     "returned by `jax.linearize`")
    shard = current_shard_context()
    axes = shard.mesh.axis_names if shard is not None else ()
    got, want = tangent.str_long(axes), primal.str_long(axes)
    return ("linearized function called on tangent values inconsistent with the original "
            f"primal values:\nGot tangent aval {got} for primal aval {want} but expected "
            f"{want}. \nThis might be fixed by:\n" + "\n".join(f"  * {fix};" for fix in fixes))
