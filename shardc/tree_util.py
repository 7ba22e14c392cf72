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
from compiler.tree import (DICT_KINDS, Partial, PyTreeDef, dict_keys, node_children,
                           register_pytree_node, tree_all, tree_unflatten)
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


@dataclasses.dataclass(frozen=True)
class SequenceKey:
    """The index of a child of a tuple or list."""
    idx: int

    def __str__(self):
        return f"[{self.idx!r}]"


@dataclasses.dataclass(frozen=True)
class DictKey:
    """The key of a child of a dict."""
    key: Any

    def __str__(self):
        return f"[{self.key!r}]"


@dataclasses.dataclass(frozen=True)
class GetAttrKey:
    """The field name of a child of a namedtuple or a registered dataclass."""
    name: str

    def __str__(self):
        return f".{self.name}"


@dataclasses.dataclass(frozen=True)
class FlattenedIndexKey:
    """The position of a child of a registered container without named children."""
    key: int

    def __str__(self):
        return f"[<flat index {self.key}>]"


_field_names: dict = {}      # registered class -> names of its children, for key paths


def keystr(keys, *, simple: bool = False, separator: str = "") -> str:
    """``keystr((SequenceKey(0), DictKey('w')))`` is ``"[0]['w']"``."""
    if not simple:
        return "".join(str(k) for k in keys)
    parts = [str(getattr(k, "idx", getattr(k, "key", getattr(k, "name", k)))) for k in keys]
    return separator.join(parts)


def _child_keys(x, is_leaf):
    node = node_children(x, _with_keys_as_leaves(is_leaf))
    if node is None:
        return None
    kind, aux, children, _ = node
    if kind == "none":
        return []
    if kind in DICT_KINDS:
        return list(zip([DictKey(k) for k in dict_keys(kind, aux)], children))
    if kind in (tuple, list):
        return [(SequenceKey(k), c) for k, c in enumerate(children)]
    if kind in _keyed:
        return list(_keyed[kind](x)[0])
    if kind in _field_names:
        return [(GetAttrKey(n), c) for n, c in zip(_field_names[kind], children)]
    if hasattr(kind, "_fields"):
        return [(GetAttrKey(n), c) for n, c in zip(kind._fields, children)]
    return [(FlattenedIndexKey(k), c) for k, c in enumerate(children)]


def tree_flatten_with_path(tree, is_leaf=None):
    """([(key path, leaf), ...], treedef)."""
    pairs: list = []

    def walk(x, path):
        children = _child_keys(x, is_leaf)
        if children is None:
            pairs.append((path, x))
            return
        for key, child in children:
            walk(child, path + (key,))

    walk(tree, ())
    return pairs, tree_structure(tree, is_leaf)


def tree_leaves_with_path(tree, is_leaf=None) -> list:
    return tree_flatten_with_path(tree, is_leaf)[0]


def tree_map_with_path(f: Callable, tree, *rest, is_leaf=None):
    """``f(path, leaf, *others)`` at every leaf of ``tree``."""
    pairs, treedef = tree_flatten_with_path(tree, is_leaf)
    others = [_tree.treedef_flatten_up_to(treedef, r) for r in rest]
    return tree_unflatten(treedef, [f(path, leaf, *xs)
                                    for (path, leaf), *xs in zip(pairs, *others)])


_NO_INITIAL = object()


def tree_reduce(function: Callable, tree, initializer=_NO_INITIAL, is_leaf=None):
    leaves = tree_leaves(tree, is_leaf)
    if initializer is _NO_INITIAL:
        return functools.reduce(function, leaves)
    return functools.reduce(function, leaves, initializer)


def tree_transpose(outer_treedef: PyTreeDef, inner_treedef: PyTreeDef, pytree_to_transpose):
    """A tree of structure outer(inner) becomes inner(outer)."""
    outer_leaves = _tree.treedef_flatten_up_to(outer_treedef, pytree_to_transpose)
    inner = [tree_leaves(x) if inner_treedef is None
             else _tree.treedef_flatten_up_to(inner_treedef, x)
             for x in outer_leaves]
    if inner_treedef is None:
        inner_treedef = tree_structure(outer_leaves[0])
    columns = [tree_unflatten(outer_treedef, list(col)) for col in zip(*inner)]
    return tree_unflatten(inner_treedef, columns)


def treedef_is_leaf(treedef: PyTreeDef) -> bool:
    return treedef.kind is None


def register_pytree_with_keys(cls, flatten_with_keys: Callable, unflatten: Callable,
                              flatten_func: Callable | None = None):
    """Register ``cls`` with ``flatten_with_keys(x) -> (((key, child), ...), aux)``: key paths
    through it use those keys."""
    _keyed[cls] = flatten_with_keys

    def flatten(x):
        if flatten_func is not None:
            return flatten_func(x)
        pairs, aux = flatten_with_keys(x)
        return [c for _, c in pairs], aux

    register_pytree_node(cls, flatten, unflatten)
    return cls


_keyed: dict = {}       # class -> its flatten_with_keys (register_pytree_with_keys)


def register_pytree_node_class(cls):
    """Class decorator: ``cls.tree_flatten(self)`` and ``cls.tree_unflatten(aux, children)``."""
    register_pytree_node(cls, lambda x: x.tree_flatten(), cls.tree_unflatten)
    return cls


def register_dataclass(cls=None, data_fields=None, meta_fields=None, drop_fields=()):
    """Register a dataclass: ``data_fields`` are children (default: every field not marked
    ``field(metadata=dict(static=True))``), ``meta_fields`` static metadata."""
    if cls is None:
        return functools.partial(register_dataclass, data_fields=data_fields,
                                 meta_fields=meta_fields, drop_fields=drop_fields)
    if data_fields is None and meta_fields is None:
        fields = [f for f in dataclasses.fields(cls) if f.name not in drop_fields]
        data_fields = [f.name for f in fields if not f.metadata.get("static", False)]
        meta_fields = [f.name for f in fields if f.metadata.get("static", False)]
    data_fields, meta_fields = list(data_fields or ()), list(meta_fields or ())

    def flatten(x):
        return ([getattr(x, n) for n in data_fields],
                tuple(getattr(x, n) for n in meta_fields))

    def unflatten(aux, children):
        return cls(**dict(zip(data_fields, children)), **dict(zip(meta_fields, aux)))

    register_pytree_node(cls, flatten, unflatten)
    _field_names[cls] = tuple(data_fields)
    return cls





# --- the rest of jax.tree_util's helpers --------------------------------------------------------

def all_leaves(iterable, is_leaf=None) -> bool:
    """Whether every element of ``iterable`` is a leaf (None is a node, not a leaf)."""
    return all(treedef_is_leaf(tree_structure(x, is_leaf)) for x in iterable)


def register_static(cls):
    """Register ``cls`` as a node with no children: its instances are part of the structure
    (hashed and compared as metadata), never traced."""
    register_pytree_node(cls, lambda x: ((), x), lambda aux, _: aux)
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
                                    name="tree_broadcast")
    return tree_unflatten(tree_structure(full_tree, is_leaf), leaves)


def treedef_children(treedef: PyTreeDef) -> list:
    """The structures of a node's children (none for a leaf)."""
    return treedef.children()


def treedef_tuple(treedefs) -> PyTreeDef:
    """The structure of a tuple whose children have ``treedefs``."""
    return PyTreeDef(tuple, None, tuple(treedefs))


def flatten_one_level(tree):
    """``(children, metadata)`` of one node (its children left as they are)."""
    node = node_children(tree)
    if node is None:
        raise ValueError(f"flatten_one_level was called on a leaf: {tree!r}")
    kind, aux, children, _ = node
    return children, aux


def flatten_one_level_with_keys(tree):
    """``([(key, child), ...], metadata)`` of one node."""
    children = _child_keys(tree, None)
    if children is None:
        raise ValueError(f"flatten_one_level_with_keys was called on a leaf: {tree!r}")
    return tuple(children), flatten_one_level(tree)[1]


KeyEntry = typing.TypeVar("KeyEntry", bound=typing.Hashable)
KeyPath = tuple[KeyEntry, ...]


def is_tree_node(typ) -> bool:
    """Whether instances of ``typ`` are pytree nodes (containers) rather than leaves."""
    return (typ in (tuple, list, dict, type(None)) or _tree.is_registered(typ)
            or (isinstance(typ, type) and issubclass(typ, tuple) and hasattr(typ, "_fields")))


_NO_IDENTITY = object()


def tree_reduce_associative(operation, tree, *, identity=_NO_IDENTITY, is_leaf=None):
    """The leaves combined by the associative ``operation`` (as a balanced tree of calls);
    ``identity`` for a tree without leaves."""
    leaves = tree_leaves(tree, is_leaf)
    if not leaves:
        if identity is _NO_IDENTITY:
            raise ValueError("Must specify identity for parallel reduction of empty sequence.")
        return identity
    while len(leaves) > 1:
        paired = [operation(a, b) for a, b in zip(leaves[::2], leaves[1::2])]
        leaves = paired + ([leaves[-1]] if len(leaves) % 2 else [])
    return leaves[0]


__all__ += ["KeyEntry", "KeyPath", "flatten_one_level_with_keys"]
__all__ += ["all_leaves", "flatten_one_level", "is_tree_node", "register_pytree_with_keys_class",
            "register_static", "tree_broadcast", "tree_reduce_associative", "treedef_children",
            "treedef_tuple"]
