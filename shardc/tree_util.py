"""``shardc.tree_util``: pytree utilities under JAX's names.

A typed PRNG key array is a leaf here, as in JAX; transformations see through it to its key
data (see ``shardc.random._keys``). Key paths are tuples of key objects, as in JAX:
``SequenceKey(0)`` prints ``[0]``, ``DictKey('w')`` prints ``['w']``, ``GetAttrKey('f')`` prints
``.f``; ``keystr(path)`` joins them.
"""
from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Any, Callable

from compiler import tree as _tree
from compiler.tree import (DictKey, FlattenedIndexKey, GetAttrKey, Partial, PyTreeDef,
                           SequenceKey, tree_all, tree_unflatten)
from shardc.random._keys import PRNGKeyArray as _PRNGKeyArray

__all__ = ["DictKey", "FlattenedIndexKey", "GetAttrKey", "Partial", "PyTreeDef", "SequenceKey",
           "keystr", "register_dataclass", "register_pytree_node",
           "register_pytree_node_class", "register_pytree_with_keys", "tree_all",
           "tree_flatten", "tree_flatten_with_path", "tree_leaves", "tree_leaves_with_path",
           "tree_map", "tree_map_with_path", "tree_reduce", "tree_structure", "tree_transpose",
           "tree_unflatten", "treedef_is_leaf"]


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


def keystr(keys, *, simple: bool = False, separator: str = "") -> str:
    """The key path ``keys`` as text, its entries joined by ``separator``:
    ``keystr((SequenceKey(0), DictKey('w')))`` is ``"[0]['w']"``; ``simple=True`` gives the bare
    index, key or name of each entry (``"0/w"`` with ``separator='/'``)."""
    return separator.join(map(_tree.simple_key_str if simple else str, keys))


def _keyed_children(x):
    """(kind, aux, ((key, child), ...)) of a node, None for a leaf (a key array is one)."""
    if isinstance(x, _PRNGKeyArray):
        return None
    return _tree.keyed_children(x)


def tree_flatten_with_path(tree, is_leaf: Callable | None = None,
                           is_leaf_takes_path: bool = False):
    """([(key path, leaf), ...], treedef). ``is_leaf(x)`` (or ``is_leaf(path, x)`` with
    ``is_leaf_takes_path=True``) stops the flattening at ``x``."""
    if is_leaf is not None and not is_leaf_takes_path:
        stop = lambda _, x: is_leaf(x)  # noqa: E731
    else:
        stop = is_leaf
    pairs: list = []

    def walk(x, path) -> PyTreeDef:
        node = None if stop is not None and stop(path, x) else _keyed_children(x)
        if node is None:
            pairs.append((path, x))
            return _tree.PyTreeDef(None, None, ())
        kind, aux, keyed = node
        return _tree.PyTreeDef(kind, aux, tuple(walk(child, path + (key,))
                                                for key, child in keyed))

    treedef = walk(tree, ())
    return pairs, treedef


def tree_leaves_with_path(tree, is_leaf: Callable | None = None,
                          is_leaf_takes_path: bool = False) -> list:
    return tree_flatten_with_path(tree, is_leaf, is_leaf_takes_path)[0]


def tree_map_with_path(f: Callable, tree, *rest, is_leaf: Callable | None = None,
                       is_leaf_takes_path: bool = False):
    """``f(path, leaf, *others)`` at every leaf of ``tree``."""
    pairs, treedef = tree_flatten_with_path(tree, is_leaf, is_leaf_takes_path)
    plain_is_leaf = None if is_leaf_takes_path else is_leaf
    others = [_tree.leaves_up_to(treedef, tree, r, plain_is_leaf, "tree_map_with_path tree")
              for r in rest]
    return tree_unflatten(treedef, [f(path, leaf, *xs)
                                    for (path, leaf), *xs in zip(pairs, *others)])


_NO_INITIAL = object()


def tree_reduce(function: Callable, tree, initializer=_NO_INITIAL, is_leaf=None):
    leaves = tree_leaves(tree, is_leaf)
    if initializer is _NO_INITIAL:
        return functools.reduce(function, leaves)
    return functools.reduce(function, leaves, initializer)


def tree_transpose(outer_treedef: PyTreeDef, inner_treedef: PyTreeDef | None,
                   pytree_to_transpose):
    """A tree of structure outer(inner) becomes inner(outer). As JAX's, the tree is flattened
    whole and its leaves regrouped: only their number must match (``inner_treedef=None``:
    the structure of the first outer leaf's subtree)."""
    flat, treedef = tree_flatten(pytree_to_transpose)
    if inner_treedef is None:
        inner_treedef = tree_structure(outer_treedef.flatten_up_to(pytree_to_transpose)[0])
    inner_size, outer_size = inner_treedef.num_leaves, outer_treedef.num_leaves
    if treedef.num_leaves != inner_size * outer_size:
        raise TypeError(f"Mismatch\n{treedef}\n != \n{outer_treedef.compose(inner_treedef)}")
    rows = [flat[k * inner_size:(k + 1) * inner_size] for k in range(outer_size)]
    columns = [tree_unflatten(outer_treedef, column) for column in zip(*rows)]
    return tree_unflatten(inner_treedef, columns)


def treedef_is_leaf(treedef: PyTreeDef) -> bool:
    """Whether ``treedef`` is a single node: a leaf, None, or an empty container (JAX's)."""
    return treedef.num_nodes == 1


def register_pytree_node(nodetype, flatten_func: Callable, unflatten_func: Callable,
                         flatten_with_keys_func: Callable | None = None) -> None:
    """Make ``nodetype`` a container: ``flatten_func(x) -> (children, aux)``,
    ``unflatten_func(aux, children)``; ``flatten_with_keys_func(x) -> (((key, child), ...),
    aux)`` names its children in key paths."""
    _tree.register_pytree_node(nodetype, flatten_func, unflatten_func, flatten_with_keys_func)


def register_pytree_with_keys(cls, flatten_with_keys: Callable, unflatten: Callable,
                              flatten_func: Callable | None = None):
    """Register ``cls`` with ``flatten_with_keys(x) -> (((key, child), ...), aux)``: key paths
    through it use those keys."""
    def flatten(x):
        pairs, aux = flatten_with_keys(x)
        return [c for _, c in pairs], aux

    register_pytree_node(cls, flatten_func or flatten, unflatten, flatten_with_keys)
    return cls


def register_pytree_node_class(cls):
    """Class decorator: ``cls.tree_flatten(self)`` and ``cls.tree_unflatten(aux, children)``."""
    register_pytree_node(cls, lambda x: x.tree_flatten(), cls.tree_unflatten)
    return cls


def register_dataclass(nodetype=None, data_fields=None, meta_fields=None, drop_fields=()):
    """Register a dataclass: ``data_fields`` are children (default: every field not marked
    ``field(metadata=dict(static=True))``), ``meta_fields`` static metadata. A dataclass's
    fields in ``__init__`` must be exactly those two, less ``drop_fields`` (JAX's checks)."""
    if nodetype is None:
        return functools.partial(register_dataclass, data_fields=data_fields,
                                 meta_fields=meta_fields, drop_fields=drop_fields)
    if data_fields is None or meta_fields is None:
        data_fields, meta_fields = _fields_by_metadata(nodetype, data_fields, meta_fields)
    data_fields, meta_fields = tuple(data_fields), tuple(meta_fields)
    if dataclasses.is_dataclass(nodetype):
        _check_init_fields(nodetype, data_fields, meta_fields, drop_fields)
    if overlap := set(data_fields) & set(meta_fields):
        raise ValueError("data_fields and meta_fields must not overlap. Overlapping fields: "
                         f"{overlap}.")

    def flatten(x):
        return ([getattr(x, n) for n in data_fields],
                tuple(getattr(x, n) for n in meta_fields))

    def flatten_with_keys(x):
        return ([(GetAttrKey(n), getattr(x, n)) for n in data_fields],
                tuple(getattr(x, n) for n in meta_fields))

    def unflatten(aux, children):
        return nodetype(**dict(zip(meta_fields, aux)), **dict(zip(data_fields, children)))

    _tree.register_pytree_node(nodetype, flatten, unflatten, flatten_with_keys,
                               dataclass=True)
    return nodetype


def _fields_by_metadata(nodetype, data_fields, meta_fields) -> tuple:
    """A dataclass's (data fields, meta fields) from its fields' ``static`` metadata."""
    if (data_fields is None) != (meta_fields is None):
        raise TypeError("register_dataclass: data_fields and meta_fields must both be specified"
                        f" when either is specified. Got {data_fields=} {meta_fields=}.")
    if not dataclasses.is_dataclass(nodetype):
        raise TypeError("register_dataclass: data_fields and meta_fields are required when"
                        f" nodetype is not a dataclass. Got {nodetype=}.")
    fields = dataclasses.fields(nodetype)
    return ([f.name for f in fields if not f.metadata.get("static", False)],
            [f.name for f in fields if f.metadata.get("static", False)])


def _check_init_fields(nodetype, data_fields, meta_fields, drop_fields) -> None:
    init_fields = {f.name for f in dataclasses.fields(nodetype) if f.init} - set(drop_fields)
    given = {*meta_fields, *data_fields}
    if given == init_fields:
        return
    msg = ("data_fields and meta_fields must include all dataclass fields with ``init=True`` "
           "and only them.")
    if missing := init_fields - given:
        msg += f" Missing fields: {missing}. Add them to drop_fields to suppress this error."
    if unexpected := given - init_fields:
        msg += f" Unexpected fields: {unexpected}."
    raise ValueError(msg)


# --- the rest of jax.tree_util's helpers --------------------------------------------------------

def all_leaves(iterable, is_leaf=None) -> bool:
    """Whether every element of ``iterable`` is a leaf (None is a node, not a leaf)."""
    if is_leaf is None:
        return all(_keyed_children(x) is None for x in iterable)
    items = list(iterable)
    leaves = tree_leaves(items, is_leaf)
    return len(leaves) == len(items) and all(a is b for a, b in zip(items, leaves))


def register_static(cls):
    """Register ``cls`` as a node with no children: its instances are part of the structure
    (compared as metadata), never traced."""
    register_pytree_with_keys(cls, lambda x: ((), x), lambda aux, _: aux)
    return cls


def register_pytree_with_keys_class(cls):
    """Class decorator: ``cls.tree_flatten_with_keys(self)`` and ``cls.tree_unflatten``
    (``cls.tree_flatten`` too, when it has one)."""
    return register_pytree_with_keys(cls, lambda x: x.tree_flatten_with_keys(),
                                     cls.tree_unflatten,
                                     (lambda x: x.tree_flatten())
                                     if hasattr(cls, "tree_flatten") else None)


def tree_broadcast(prefix_tree, full_tree, is_leaf=None):
    """``prefix_tree`` with each of its leaves repeated over the subtree of ``full_tree`` it
    stands for: the result has ``full_tree``'s structure."""
    leaves = _tree.broadcast_prefix(prefix_tree, full_tree, is_leaf=is_leaf or (lambda x: False),
                                    name="broadcast_prefix prefix_tree")
    return tree_unflatten(tree_structure(full_tree), leaves)


def treedef_children(treedef: PyTreeDef) -> list:
    """The structures of a node's children (none for a leaf)."""
    return treedef.children()


def treedef_tuple(treedefs) -> PyTreeDef:
    """The structure of a tuple whose children have ``treedefs``."""
    return PyTreeDef(tuple, None, tuple(treedefs))


def flatten_one_level(tree):
    """``(children, metadata)`` of one node, its children as the node gives them (a tuple or
    list is its own children, a dict gives its values and keys as tuples, a namedtuple a list
    and its type, a registered type what its flatten function gives)."""
    out = None if isinstance(tree, _PRNGKeyArray) else _tree.flatten_one_level(tree)
    if out is None:
        raise ValueError(f"can't tree-flatten type: {type(tree)}")
    return out


def flatten_one_level_with_keys(tree):
    """``(((key, child), ...), metadata)`` of one node."""
    out = None if isinstance(tree, _PRNGKeyArray) else _tree.flatten_one_level_with_keys(tree)
    if out is None:
        raise ValueError(f"can't tree-flatten type: {type(tree)}")
    return out


KeyEntry = typing.TypeVar("KeyEntry", bound=typing.Hashable)
KeyPath = tuple[KeyEntry, ...]


def is_tree_node(typ) -> bool:
    """Whether instances of ``typ`` are pytree nodes (containers) rather than leaves."""
    if typ is _PRNGKeyArray:
        return False
    return (typ in (tuple, list, dict, type(None)) or _tree.is_registered(typ)
            or typ in _tree.DICT_KINDS
            or (isinstance(typ, type) and issubclass(typ, tuple) and hasattr(typ, "_fields")))


_NO_IDENTITY = object()


def tree_reduce_associative(operation, tree, *, identity=_NO_IDENTITY, is_leaf=None):
    """The leaves combined by the associative ``operation``, as JAX groups them: each half of
    the leaves reduced, then the halves combined; ``identity`` for a tree without leaves."""
    return _halving_reduce(operation, tree_leaves(tree, is_leaf), identity)


def _halving_reduce(operation, leaves: list, identity):
    if not leaves:
        if identity is _NO_IDENTITY:
            raise TypeError("Must specify identity for parallel reduction of empty sequence.")
        return identity
    if len(leaves) == 1:
        return leaves[0]
    half = len(leaves) // 2
    return operation(_halving_reduce(operation, leaves[:half], identity),
                     _halving_reduce(operation, leaves[half:], identity))


__all__ += ["KeyEntry", "KeyPath", "flatten_one_level_with_keys"]
__all__ += ["all_leaves", "flatten_one_level", "is_tree_node", "register_pytree_with_keys_class",
            "register_static", "tree_broadcast", "tree_reduce_associative", "treedef_children",
            "treedef_tuple"]
