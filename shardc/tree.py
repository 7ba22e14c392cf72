"""``shardc.tree``: JAX's short names for the pytree utilities (``jax.tree.map`` ...)."""
import dataclasses

from shardc.tree_util import tree_all as all  # noqa: A001
from shardc.tree_util import tree_broadcast as broadcast
from shardc.tree_util import tree_flatten as flatten
from shardc.tree_util import tree_flatten_with_path as flatten_with_path
from shardc.tree_util import tree_leaves as leaves
from shardc.tree_util import tree_leaves_with_path as leaves_with_path
from shardc.tree_util import tree_map as map  # noqa: A001
from shardc.tree_util import tree_map_with_path as map_with_path
from shardc.tree_util import tree_reduce as reduce  # noqa: A001
from shardc.tree_util import tree_reduce_associative as reduce_associative
from shardc.tree_util import tree_structure as structure
from shardc.tree_util import tree_transpose as transpose
from shardc.tree_util import tree_unflatten as unflatten

__all__ = ["all", "broadcast", "flatten", "flatten_with_path", "leaves", "leaves_with_path",
           "map", "map_with_path", "reduce", "reduce_associative", "static", "structure",
           "transpose", "unflatten"]


def static(**kwargs):
    """A dataclass field ``register_dataclass`` keeps static (out of the leaves): JAX's
    ``dataclasses.field`` with ``metadata`` marked ``static=True`` unless ``metadata`` says
    otherwise."""
    metadata = {"static": True, **(kwargs.pop("metadata", None) or {})}
    return dataclasses.field(metadata=metadata, **kwargs)
