"""Pytrees: nested tuples, lists, dicts, namedtuples, None and registered containers.

``shardc.tree_util`` re-exports this module under JAX's names.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
from typing import Any, Callable

_registry: dict = {}


def register_pytree_node(cls, flatten: Callable, unflatten: Callable) -> None:
    """Make ``cls`` a container: ``flatten(x) -> (children, aux)``, ``unflatten(aux, children)``."""
    _registry[cls] = (flatten, unflatten)


def is_registered(cls) -> bool:
    """Whether ``cls`` was registered as a pytree node."""
    return cls in _registry


def _is_namedtuple(x) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


@dataclasses.dataclass(frozen=True)
class PyTreeDef:
    """The structure of a pytree: a node type, its metadata and its children's structures."""
    kind: Any                  # None for a leaf, "none" for None, else the container type
    aux: Any
    subtrees: tuple            # the children's structures

    @property
    def num_leaves(self) -> int:
        if self.kind is None:
            return 1
        return sum(c.num_leaves for c in self.subtrees)

    @property
    def num_nodes(self) -> int:
        """Nodes of the tree, leaves and None included (JAX's count)."""
        return 1 + sum(c.num_nodes for c in self.subtrees)

    def children(self) -> list:
        """The structures of this node's children (none for a leaf)."""
        return list(self.subtrees)

    def node_data(self):
        """(node type, metadata) of this node; None for a leaf."""
        if self.kind is None:
            return None
        if self.kind is dict:
            return dict, list(self.aux)          # the keys, as JAX lists them
        return (type(None) if self.kind == "none" else self.kind), self.aux

    def unflatten(self, leaves):
        """The tree of this structure holding ``leaves``."""
        return tree_unflatten(self, leaves)

    def flatten_up_to(self, tree) -> list:
        """The subtrees of ``tree`` where this structure has its leaves (``tree`` must have
        this structure down to them)."""
        if self.kind is None:
            return [tree]
        node = node_children(tree)
        kind = None if node is None else node[0]
        if node is None or kind != self.kind or len(node[2]) != len(self.subtrees) or (
                kind in DICT_KINDS and node[1] != self.aux):
            raise ValueError(f"Tree structures did not match: {tree!r} vs {self!r}")
        return [leaf for sub, child in zip(self.subtrees, node[2])
                for leaf in sub.flatten_up_to(child)]

    def compose(self, inner: "PyTreeDef") -> "PyTreeDef":
        """This structure with every leaf replaced by ``inner``."""
        if self.kind is None:
            return inner
        return PyTreeDef(self.kind, self.aux, tuple(c.compose(inner) for c in self.subtrees))

    def __repr__(self):
        return f"PyTreeDef({_treedef_str(self)})"


def _treedef_str(td: PyTreeDef) -> str:
    if td.kind is None:
        return "*"
    if td.kind == "none":
        return "None"
    inner = ", ".join(_treedef_str(c) for c in td.subtrees)
    if td.kind in DICT_KINDS:
        entries = "{" + ", ".join(f"{k!r}: {_treedef_str(c)}" for k, c in
                                  zip(dict_keys(td.kind, td.aux), td.subtrees)) + "}"
        if td.kind is _DefaultDict:
            return f"defaultdict[{td.aux[0]!r}]({entries})"
        return entries if td.kind is dict else f"OrderedDict({entries})"
    if td.kind is list:
        return f"[{inner}]"
    if td.kind is tuple:
        return f"({inner}{',' if len(td.subtrees) == 1 else ''})"
    return f"{getattr(td.kind, '__name__', td.kind)}({inner})"


def node_children(x, is_leaf=None):
    """(kind, aux, children, child keys) of a container, or None for a leaf."""
    if is_leaf is not None and is_leaf(x):
        return None
    if x is None:
        return "none", None, (), ()
    cls = type(x)
    if cls in _registry:
        children, aux = _registry[cls][0](x)
        children = tuple(children)
        return cls, aux, children, tuple(f"[{k}]" for k in range(len(children)))
    if _is_namedtuple(x):
        return cls, None, tuple(x), tuple(f".{f}" for f in cls._fields)
    if cls is tuple or cls is list:
        return cls, None, tuple(x), tuple(f"[{k}]" for k in range(len(x)))
    if cls is dict or cls is _DefaultDict:
        keys = tuple(sorted(x.keys(), key=_sort_key))
        aux = keys if cls is dict else (x.default_factory, keys)
        return cls, aux, tuple(x[k] for k in keys), tuple(f"[{k!r}]" for k in keys)
    if cls is _OrderedDict:                         # in insertion order, as JAX's
        keys = tuple(x.keys())
        return cls, keys, tuple(x[k] for k in keys), tuple(f"[{k!r}]" for k in keys)
    return None


_DefaultDict, _OrderedDict = collections.defaultdict, collections.OrderedDict
DICT_KINDS = (dict, _OrderedDict, _DefaultDict)


def dict_keys(kind, aux) -> tuple:
    """The keys of a dictionary node, in its children's order."""
    return aux[1] if kind is _DefaultDict else aux


def _sort_key(k):
    return (type(k).__name__, k)


def tree_flatten(tree, is_leaf=None):
    """(leaves, treedef)."""
    leaves: list = []
    treedef = _flatten(tree, is_leaf, leaves)
    return leaves, treedef


def _flatten(x, is_leaf, leaves) -> PyTreeDef:
    cls = type(x)
    # tuples and lists first, without their child keys (flattening is on every call's path)
    if (cls is tuple or cls is list) and (is_leaf is None or not is_leaf(x)):
        return PyTreeDef(cls, None, tuple([_flatten(c, is_leaf, leaves) for c in x]))
    node = node_children(x, is_leaf)
    if node is None:
        leaves.append(x)
        return _LEAF
    kind, aux, children, _ = node
    return PyTreeDef(kind, aux, tuple([_flatten(c, is_leaf, leaves) for c in children]))


_LEAF = PyTreeDef(None, None, ())


def tree_unflatten(treedef: PyTreeDef, leaves):
    """The pytree of ``treedef``'s structure holding ``leaves`` (exactly as many as it has)."""
    it = iter(leaves)
    try:
        result = _unflatten(treedef, it)
    except StopIteration:
        raise ValueError(f"Too few leaves for PyTreeDef; expected {treedef.num_leaves}, got "
                         f"{_count(leaves)}.") from None
    if next(it, _END) is not _END:
        raise ValueError(f"Too many leaves for PyTreeDef; expected {treedef.num_leaves}, got "
                         f"{_count(leaves)}.")
    return result


def _count(leaves) -> str:
    return str(len(leaves)) if hasattr(leaves, "__len__") else "another number"


_END = object()


def _unflatten(td: PyTreeDef, it):
    if td.kind is None:
        return next(it)
    if td.kind == "none":
        return None
    children = [_unflatten(c, it) for c in td.subtrees]
    if td.kind in _registry:
        return _registry[td.kind][1](td.aux, children)
    if td.kind is dict or td.kind is _OrderedDict:
        return td.kind(zip(td.aux, children))
    if td.kind is _DefaultDict:
        return _DefaultDict(td.aux[0], zip(td.aux[1], children))
    if td.kind is list:
        return children
    if td.kind is tuple:
        return tuple(children)
    return td.kind(*children)     # namedtuple


def flatten_fun(fun, in_tree):
    """``fun`` of pytrees as a function of flat leaves returning flat leaves; the output's
    structure lands in the returned box (a list) when it runs."""
    box: list = []

    def flat_fun(*leaves):
        out_leaves, out_tree = tree_flatten(fun(*tree_unflatten(in_tree, leaves)))
        box.append(out_tree)
        return out_leaves

    return flat_fun, box


def tree_leaves(tree, is_leaf=None) -> list:
    return tree_flatten(tree, is_leaf)[0]


def tree_structure(tree, is_leaf=None) -> PyTreeDef:
    return tree_flatten(tree, is_leaf)[1]


def tree_map(f: Callable, tree, *rest, is_leaf=None):
    leaves, treedef = tree_flatten(tree, is_leaf)
    others = [treedef_flatten_up_to(treedef, r) for r in rest]
    return tree_unflatten(treedef, [f(*xs) for xs in zip(leaves, *others)])


def tree_all(tree, *, is_leaf=None) -> bool:
    """Whether every leaf is true (``is_leaf``: what counts as a leaf, as tree_leaves)."""
    return all(bool(x) for x in tree_leaves(tree, is_leaf=is_leaf))


def treedef_flatten_up_to(treedef: PyTreeDef, tree) -> list:
    """The subtrees of ``tree`` at the leaves of ``treedef`` (``tree`` must have that prefix)."""
    out: list = []
    _flatten_up_to(treedef, tree, out, "", "tree")
    return out


def leaf_paths(tree, is_leaf=None) -> list:
    """The key path (``[0]['w'].f``) of every leaf, in flattening order."""
    paths: list = []

    def walk(x, path):
        node = node_children(x, is_leaf)
        if node is None:
            paths.append(path)
            return
        for child, key in zip(node[2], node[3]):
            walk(child, path + key)

    walk(tree, "")
    return paths


class PrefixError(ValueError):
    """A prefix pytree whose structure does not match the full pytree."""


def _flatten_up_to(td: PyTreeDef, tree, out: list, path: str, name: str):
    if td.kind is None:
        out.append(tree)
        return
    node = node_children(tree)
    if node is None or node[0] != td.kind:
        got = type(tree)
        raise PrefixError(_type_mismatch(name, path, td.kind, got))
    kind, aux, children, keys = node
    if len(children) != len(td.subtrees):
        raise PrefixError(_length_mismatch(name, path, kind, len(td.subtrees), len(children)))
    if aux != td.aux:
        raise PrefixError(_metadata_mismatch(name, path, kind, td.aux, aux))
    for child_td, child, key in zip(td.subtrees, children, keys):
        _flatten_up_to(child_td, child, out, path + key, name)


def broadcast_prefix(prefix, full, *, is_leaf, name: str) -> list:
    """For every leaf of ``full``, the leaf of ``prefix`` covering it.

    A ``None`` entry of ``prefix`` (when ``is_leaf`` accepts it) covers a whole subtree.
    Errors name the key path where the structures part.
    """
    out: list = []
    _broadcast(prefix, full, is_leaf, out, "", name)
    return out


def _broadcast(prefix, full, is_leaf, out, path, name):
    if is_leaf(prefix):
        out.extend([prefix] * len(tree_leaves(full)))
        return
    pnode = node_children(prefix)
    fnode = node_children(full)
    if pnode is None:
        out.extend([prefix] * len(tree_leaves(full)))
        return
    if fnode is None or pnode[0] != fnode[0]:
        raise PrefixError(_type_mismatch(name, path, pnode[0], type(full) if fnode is None
                                         else fnode[0]))
    if len(pnode[2]) != len(fnode[2]):
        raise PrefixError(_length_mismatch(name, path, pnode[0], len(pnode[2]), len(fnode[2])))
    if pnode[1] != fnode[1]:
        raise PrefixError(_metadata_mismatch(name, path, pnode[0], pnode[1], fnode[1]))
    for pchild, fchild, key in zip(pnode[2], fnode[2], pnode[3]):
        _broadcast(pchild, fchild, is_leaf, out, path + key, name)


def _type_name(kind) -> str:
    if kind == "none":
        return "NoneType"
    return getattr(kind, "__name__", str(kind))


def _length_mismatch(name, path, kind, n_prefix, n_full) -> str:
    t = _type_name(kind)
    return (f"pytree structure error: different lengths of {t} at key path\n"
            f"    {name}{path}\n"
            f"At that key path, the prefix pytree {name} has a subtree of type {t} of length "
            f"{n_prefix}, but the full pytree has a subtree of the same type but of length "
            f"{n_full}.")


def _type_mismatch(name, path, prefix_kind, full_kind) -> str:
    return (f"pytree structure error: different types at key path\n"
            f"    {name}{path}\n"
            f"At that key path, the prefix pytree {name} has a subtree of type\n"
            f"    {_kind_obj(prefix_kind)!r}\n"
            f"but at the same key path the full pytree has a subtree of different type\n"
            f"    {_kind_obj(full_kind)!r}.")


def _kind_obj(kind):
    return type(None) if kind == "none" else kind


def _metadata_mismatch(name, path, kind, prefix_aux, full_aux) -> str:
    return (f"pytree structure error: different pytree metadata at key path\n"
            f"    {name}{path}\n"
            f"At that key path, the prefix pytree {name} has a subtree of type\n"
            f"    {_kind_obj(kind)!r}\n"
            f"with metadata\n"
            f"    {prefix_aux!r}\n"
            f"but at the same key path the full pytree has a subtree of the same type but with "
            f"metadata\n"
            f"    {full_aux!r}.")


class Partial(functools.partial):
    """A ``functools.partial`` that is a pytree: its arguments are children, the function is
    static, so it can be passed through ``jit`` and ``shard_map`` as an argument."""

    def __new__(cls, func, *args, **kw):
        if isinstance(func, functools.partial):
            original, func = func, func.func
            args = original.args + args
            kw = {**original.keywords, **kw}
        return super().__new__(cls, func, *args, **kw)


register_pytree_node(
    Partial, lambda p: ((p.args, p.keywords), p.func),
    lambda func, children: Partial(func, *children[0], **children[1]))


# --- where two structures part (JAX's equality_errors) ---------------------------------------

def _kind_text(td, leaf: str) -> str:
    """What JAX's structure comparison calls a node: its class, or ``leaf``."""
    if td.kind is None:
        return leaf
    return str(type(None) if td.kind == "none" else td.kind)


def _child_keys(td) -> list:
    """(key path text, key as JAX's ``DictKey``/``FlattenedIndexKey`` holds it, or None)."""
    n = len(td.subtrees)
    if td.kind in DICT_KINDS:
        return [(f"[{k!r}]", k) for k in dict_keys(td.kind, td.aux)]
    if td.kind in (list, tuple):
        return [(f"[{k}]", None) for k in range(n)]
    if isinstance(td.kind, type) and issubclass(td.kind, tuple) and hasattr(td.kind, "_fields"):
        return [(f".{f}", None) for f in td.kind._fields]
    return [(f"[{k}]", k) for k in range(n)]        # registered nodes: flattened indices


def equality_errors(t1, t2, leaf: str = "pytree leaf", path: str = ""):
    """JAX's ``tree_util.equality_errors`` on two PyTreeDefs: (key path, what the first is,
    what the second is, why they differ) where they part, outermost first. ``leaf`` names a
    leaf (JAX: its class, or ``pytree leaf`` for bare structures)."""
    if t1.kind is None and t2.kind is None:
        return
    if t1.kind != t2.kind:
        yield path, _kind_text(t1, leaf), _kind_text(t2, leaf), "their Python types differ"
        return
    n1, n2 = len(t1.subtrees), len(t2.subtrees)
    kind = t1.kind
    if isinstance(kind, type) and issubclass(kind, (list, tuple)) and n1 != n2:
        yield (path, f"{kind.__name__} of length {n1}", f"{kind.__name__} of length {n2}",
               "the lengths do not match")
        return
    keys1, keys2 = _child_keys(t1), _child_keys(t2)
    if n1 != n2:
        held1 = [k for _, k in keys1 if k is not None]
        held2 = [k for _, k in keys2 if k is not None]
        diff = " ".join(repr(k) for k in [k for k in held1 if k not in held2]
                        + [k for k in held2 if k not in held1])
        name = _kind_text(t1, leaf)
        yield (path, f"{name} with {n1} child{'ren' if n1 > 1 else ''}",
               f"{name} with {n2} child{'ren' if n2 > 1 else ''}",
               "the numbers of children do not match"
               + (diff and f", with the symmetric difference of key sets: {{{diff}}}"))
        return
    if t1.aux != t2.aux:
        name = _kind_text(t1, leaf)
        yield (path, f"{name} with pytree metadata {t1.aux}",
               f"{name} with pytree metadata {t2.aux}", "the pytree node metadata does not match")
        return
    for (key, _), c1, c2 in zip(keys1, t1.subtrees, t2.subtrees):
        yield from equality_errors(c1, c2, leaf, path + key)
