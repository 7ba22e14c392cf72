"""``shardc.tree_util``: pytree utilities under JAX's names."""
from compiler.tree import (PyTreeDef, register_pytree_node, tree_all, tree_flatten, tree_leaves,
                           tree_map, tree_structure, tree_unflatten)

__all__ = ["PyTreeDef", "register_pytree_node", "tree_all", "tree_flatten", "tree_leaves",
           "tree_map", "tree_structure", "tree_unflatten"]
