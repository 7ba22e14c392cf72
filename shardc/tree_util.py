"""``shardc.tree_util``: pytree utilities under JAX's names.

A typed PRNG key array is a leaf here, as in JAX; transformations see through it to its key
data (see ``shardc.random._keys``). Key paths are tuples of key objects, as in JAX:
``SequenceKey(0)`` prints ``[0]``, ``DictKey('w')`` prints ``['w']``, ``GetAttrKey('f')`` prints
``.f``; ``keystr(path)`` joins them.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

from compiler import tree as _tree
from compiler.tree import (Partial, PyTreeDef, node_children, register_pytree_node, tree_all,
                           tree_unflatten)
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
    if kind is dict:
        return list(zip([DictKey(k) for k in aux], children))
    if kind in (tuple, list):
        return [(SequenceKey(k), c) for k, c in enumerate(children)]
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
    """Register ``cls`` with ``flatten_with_keys(x) -> (((key, child), ...), aux)``."""
    def flatten(x):
        if flatten_func is not None:
            return flatten_func(x)
        pairs, aux = flatten_with_keys(x)
        return [c for _, c in pairs], aux

    register_pytree_node(cls, flatten, unflatten)
    return cls


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



