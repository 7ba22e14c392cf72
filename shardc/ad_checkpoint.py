"""``shardc.ad_checkpoint``: remat and its policies under JAX's names (``jax.ad_checkpoint``),
and ``print_saved_residuals``: what reverse-mode autodiff of a function keeps from its
forward pass."""
import inspect as _inspect
import types as _types

from compiler import checkpoint_policies as _policies
from compiler import tree as _tree
from compiler.autodiff import vjp as _vjp
from compiler.checkpoint_policies import checkpoint_name
from compiler.jit import make_jaxpr as _make_jaxpr
from compiler.remat import remat
from ir import primitives as _p
from ir.core import Var as _Var

checkpoint = remat

# ``jax.checkpoint_policies``: policy(prim, *avals, **params) -> whether to save the result.
checkpoint_policies = _types.SimpleNamespace(**_policies.POLICIES)


def saved_residuals(f, *args, **kwargs) -> list:
    """``[(aval, where it comes from)]``: the values ``vjp(f, *args, **kwargs)`` keeps for
    the backward pass (its pullback's leaves), as JAX's ``saved_residuals``: first those
    that are constants, then the arguments (named by ``f``'s parameters and the path inside
    them, ``params[0]``), then the results of the forward pass's operations in program order
    (``"output of sin from file.py:6 (g)"``; a ``checkpoint_name``'d value as
    ``"named 'a' from ..."``). A result computed inside a ``remat`` body is named by the
    operation in the body that computed it."""
    in_leaves, in_tree = _tree.tree_flatten((args, kwargs))

    def flat_f(*leaves):
        a, kw = _tree.tree_unflatten(in_tree, list(leaves))
        return f(*a, **kw)

    closed, shapes = _make_jaxpr(lambda *leaves: _vjp(flat_f, *leaves),
                                 return_shape=True)(*in_leaves)
    program = closed.jaxpr
    num_res = len(_tree.tree_leaves(shapes[1]))
    outvars = list(program.outvars[len(program.outvars) - num_res:])
    results = [(_aval_of(v), "from a literal") for v in outvars if not isinstance(v, _Var)]
    wanted = {id(v) for v in outvars if isinstance(v, _Var)}
    for v in program.constvars:
        if id(v) in wanted:
            results.append((v.aval, "from a constant"))
    names = _argument_names(f, args, kwargs, len(in_leaves))
    for i, v in enumerate(program.invars):
        if id(v) in wanted:
            results.append((v.aval, f"from the argument {names[i]}" if names[i]
                            else f"from the argument at flattened index {i}"))
    for eqn in program.eqns:
        for k, v in enumerate(eqn.outvars):
            if id(v) in wanted:
                results.append((v.aval, _produced_by(eqn, k)))
    return results


def print_saved_residuals(f, *args, **kwargs) -> None:
    """Print ``saved_residuals(f, *args, **kwargs)``, one ``f32[5,4] from the argument W1``
    line each, as JAX's ``jax.ad_checkpoint.print_saved_residuals``."""
    for aval, src in saved_residuals(f, *args, **kwargs):
        print(f"{aval.str_short(axis_order=None)} {src}")


def _aval_of(value):
    from compiler.tracing import aval_of
    return aval_of(getattr(value, "val", value))


def _produced_by(eqn, k: int) -> str:
    """Where the ``k``th result of ``eqn`` comes from: inside a remat body, the body's
    operation that computed it (its results beyond the body's own outputs are residuals
    the body saved, read from the body's outputs in order)."""
    if eqn.primitive is _p.remat_p:
        body = eqn.params["jaxpr"]
        out = body.outvars[k]
        for inner in body.eqns:
            for j, v in enumerate(inner.outvars):
                if v is out:
                    return _produced_by(inner, j)
    src = _summarize(eqn.source)
    if eqn.primitive is _p.name_p:
        return f"named '{eqn.params['name']}' from {src}"
    return f"output of {eqn.primitive} from {src}"


def _summarize(source) -> str:
    if source is None:
        return "unknown"
    return f"{source.file}:{source.line} ({source.function})" if source.function \
        else f"{source.file}:{source.line}"


def _argument_names(f, args, kwargs, n: int) -> list:
    """Each flattened argument leaf's name: the parameter of ``f`` it was passed as and its
    path inside it (``params[0]``, ``cfg['w']``); None where ``f``'s signature is unknown."""
    try:
        params = list(_inspect.signature(f).parameters.values())
    except (TypeError, ValueError):
        return [None] * n
    positional = [q.name for q in params
                  if q.kind in (q.POSITIONAL_ONLY, q.POSITIONAL_OR_KEYWORD)]
    star = next((q.name for q in params if q.kind is q.VAR_POSITIONAL), None)
    names = []
    for i, a in enumerate(args):
        if i < len(positional):
            base = positional[i]
        elif star is not None:
            base = f"{star}[{i - len(positional)}]"
        else:
            return [None] * n
        names += [base + _tree_keystr(path) for path, _ in _with_path(a)]
    for key in sorted(kwargs):
        names += [key + _tree_keystr(path) for path, _ in _with_path(kwargs[key])]
    return names if len(names) == n else [None] * n


def _with_path(value):
    from shardc.tree_util import tree_flatten_with_path
    return tree_flatten_with_path(value)[0]


def _tree_keystr(path) -> str:
    from shardc.tree_util import keystr
    return keystr(path)


__all__ = ["checkpoint", "checkpoint_name", "checkpoint_policies", "print_saved_residuals",
           "remat", "saved_residuals"]
