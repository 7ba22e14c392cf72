"""``shardc.tree_util``: pytree utilities under JAX's names.

A typed PRNG key array is a leaf here, as in JAX; transformations see through it to its key
data (see ``shardc._keys``).
"""
from compiler import tree as _tree
from compiler.tree import PyTreeDef, register_pytree_node, tree_all, tree_unflatten
from shardc._keys import PRNGKeyArray as _PRNGKeyArray

__all__ = ["PyTreeDef", "register_pytree_node", "tree_all", "tree_flatten", "tree_leaves",
           "tree_map", "tree_structure", "tree_unflatten"]


def _with_keys_as_leaves(is_leaf):
    if is_leaf is None:
        return lambda x: isinstance(x, _PRNGKeyArray)
    return lambda x: isinstance(x, _PRNGKeyArray) or is_leaf(x)


def tree_flatten(tree, is_leaf=None):
    """(leaves, treedef)."""
    return _tree.tree_flatten(tree, _with_keys_as_leaves(is_leaf))


def tree_leaves(tree, is_leaf=None) -> list:
    return _tree.tree_leaves(tree, _with_keys_as_leaves(is_leaf))


def tree_structure(tree, is_leaf=None) -> PyTreeDef:
    return _tree.tree_structure(tree, _with_keys_as_leaves(is_leaf))


def tree_map(f, tree, *rest, is_leaf=None):
    """``f`` applied to the leaves of ``tree`` (and the matching leaves of ``rest``)."""
    return _tree.tree_map(f, tree, *rest, is_leaf=_with_keys_as_leaves(is_leaf))
