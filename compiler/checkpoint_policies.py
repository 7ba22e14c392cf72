"""remat policies under JAX's names, and ``checkpoint_name``.

A policy is asked ``policy(prim, *in_avals, **params)`` once per equation of a remat body and
says whether autodiff may save that equation's results (compiler/remat.py). ``checkpoint_name``
binds ``name``, the identity carrying a name that the name-based policies read::

    x = checkpoint_name(jnp.sin(w) @ x, "hidden")
    remat(f, policy=save_only_these_names("hidden"))   # saves `hidden`, recomputes the rest

Memory kinds do not exist here: the offloading policies save what they would offload.
"""
from __future__ import annotations

import dataclasses
import functools

from compiler import tree
from compiler.ad_core import jvp_rules, transpose_rules
from compiler.batching import batching_rules, keep_dim_rule
from compiler.replication import join_rule, vma_rules
from compiler.tracing import bind
from ir import primitives as p


def checkpoint_name(x, name: str):
    """``x`` (a pytree of arrays) unchanged, each leaf named ``name`` for remat policies."""
    return tree.tree_map(lambda leaf: bind(p.name_p, leaf, name=name), x)


def _name_jvp(primals, tangents, *, name):
    (x,), (t,) = primals, tangents
    return [bind(p.name_p, x, name=name)], [t]      # the tangent is not named, as in JAX


def _name_transpose(ct, x, *, name):
    return [ct]


jvp_rules[p.name_p] = _name_jvp
transpose_rules[p.name_p] = _name_transpose
batching_rules[p.name_p] = functools.partial(keep_dim_rule, p.name_p)
vma_rules[p.name_p] = join_rule


# --- the policies -------------------------------------------------------------------------------

def everything_saveable(*_, **__) -> bool:
    """Save every result: as if there were no remat."""
    return True


def nothing_saveable(*_, **__) -> bool:
    """Save nothing but the inputs; recompute everything (remat's default)."""
    return False


@dataclasses.dataclass(frozen=True)
class _DotsSaveable:
    only_if_no_batch_dims: bool

    def __call__(self, prim, *avals, **params) -> bool:
        if prim is not p.dot_general_p:
            return False
        if not self.only_if_no_batch_dims:
            return True
        (_, _), (lhs_batch, rhs_batch) = params["dimension_numbers"]
        return not lhs_batch and not rhs_batch


dots_saveable = checkpoint_dots = _DotsSaveable(False)
dots_with_no_batch_dims_saveable = checkpoint_dots_with_no_batch_dims = _DotsSaveable(True)


@dataclasses.dataclass(frozen=True)
class _Names:
    """Named values (``checkpoint_name``) whose name is in ``names`` (or not, ``exclude``)."""
    names: frozenset
    exclude: bool = False

    def __call__(self, prim, *avals, **params) -> bool:
        if prim is not p.name_p:
            return False
        return (params["name"] in self.names) != self.exclude


def save_only_these_names(*names) -> _Names:
    """Save only the values named (``checkpoint_name``) with one of ``names``."""
    return _Names(frozenset(names))


def save_any_names_but_these(*names) -> _Names:
    """Save every named value except those named with one of ``names``."""
    return _Names(frozenset(names), exclude=True)


def save_anything_except_these_names(*names):
    """Save any value; as in JAX, the names do not restrict it (it behaves like
    ``everything_saveable``)."""
    return everything_saveable


def save_from_both_policies(policy_1, policy_2):
    """Save what either policy saves."""
    def policy(prim, *avals, **params) -> bool:
        first = policy_1(prim, *avals, **params)
        second = policy_2(prim, *avals, **params)
        if not (isinstance(first, bool) and isinstance(second, bool)):
            raise ValueError("The return value of the policies should be a boolean. Got: "
                             f"{first} and {second}. Please write a custom policy function "
                             "directly, rather than using this helper function.")
        return first or second
    return policy


def save_and_offload_only_these_names(*, names_which_can_be_saved,
                                      names_which_can_be_offloaded, offload_src=None,
                                      offload_dst=None) -> _Names:
    """``save_only_these_names`` of both lists: offloading keeps a value, as saving does."""
    saved, offloaded = frozenset(names_which_can_be_saved), frozenset(names_which_can_be_offloaded)
    if saved & offloaded:
        raise ValueError("The names should be exclusive and should not intersect in "
                         "`names_which_can_be_saved` and `names_which_can_be_offloaded`. Got "
                         f"names_which_can_be_saved={set(saved)}, names_which_can_be_offloaded="
                         f"{set(offloaded)} and the intersection={set(saved & offloaded)}")
    return _Names(saved | offloaded)


def offload_dot_with_no_batch_dims(offload_src=None, offload_dst=None) -> _DotsSaveable:
    """``dots_with_no_batch_dims_saveable``: offloading keeps a value, as saving does."""
    return dots_with_no_batch_dims_saveable


# JAX's policy classes, by the fields they are built from.
def SaveOnlyTheseNames(saveable_names) -> _Names:      # noqa: N802 (JAX's name)
    return _Names(frozenset(saveable_names))


def SaveAnyNamesButThese(names) -> _Names:             # noqa: N802
    return _Names(frozenset(names), exclude=True)


def SaveAndOffloadOnlyTheseNames(names_which_can_be_saved, names_which_can_be_offloaded,
                                 offload_src=None, offload_dst=None) -> _Names:   # noqa: N802
    return save_and_offload_only_these_names(
        names_which_can_be_saved=names_which_can_be_saved,
        names_which_can_be_offloaded=names_which_can_be_offloaded)


POLICIES = {
    "SaveOnlyTheseNames": SaveOnlyTheseNames,
    "SaveAnyNamesButThese": SaveAnyNamesButThese,
    "SaveAndOffloadOnlyTheseNames": SaveAndOffloadOnlyTheseNames,
    "everything_saveable": everything_saveable,
    "nothing_saveable": nothing_saveable,
    "dots_saveable": dots_saveable,
    "checkpoint_dots": checkpoint_dots,
    "dots_with_no_batch_dims_saveable": dots_with_no_batch_dims_saveable,
    "checkpoint_dots_with_no_batch_dims": checkpoint_dots_with_no_batch_dims,
    "save_only_these_names": save_only_these_names,
    "save_any_names_but_these": save_any_names_but_these,
    "save_anything_except_these_names": save_anything_except_these_names,
    "save_from_both_policies": save_from_both_policies,
    "save_and_offload_only_these_names": save_and_offload_only_these_names,
    "offload_dot_with_no_batch_dims": offload_dot_with_no_batch_dims,
}
