"""Pytrees: nested tuples, lists, dicts, namedtuples, None and registered containers.

``shardc.tree_util`` re-exports this module under JAX's names.
"""
from __future__ import annotations

import collections
import dataclasses
import difflib
import functools
import textwrap
from typing import Any, Callable

_registry: dict = {}


@dataclasses.dataclass(frozen=True)
class _Registration:
    """How a registered container type comes apart and goes back together."""
    flatten: Callable                       # x -> (children, aux)
    unflatten: Callable                     # (aux, children) -> x
    flatten_with_keys: Callable | None      # x -> (((key, child), ...), aux), for key paths
    dataclass: bool                         # registered by register_dataclass (errors say so)


def register_pytree_node(cls, flatten: Callable, unflatten: Callable,
                         flatten_with_keys: Callable | None = None, *,
                         dataclass: bool = False) -> None:
    """Make ``cls`` a container: ``flatten(x) -> (children, aux)``, ``unflatten(aux, children)``;
    ``flatten_with_keys(x) -> (((key, child), ...), aux)`` gives the keys of its key paths
    (else ``FlattenedIndexKey``s). A type registers once, as in JAX."""
    if cls in _registry:
        what = "custom dataclass PyTreeDef" if dataclass else "custom PyTreeDef"
        raise ValueError(f"Duplicate {what} type registration for {cls!r}.")
    _registry[cls] = _Registration(flatten, unflatten, flatten_with_keys, dataclass)


def is_registered(cls) -> bool:
    """Whether ``cls`` was registered as a pytree node."""
    return cls in _registry


def is_spec_leaf(x) -> bool:
    """A leaf of a tree of shardings, specs or devices given as a prefix of a value's tree
    (jit's in_shardings, device_put's targets): None, a PartitionSpec (a tuple, but one
    entry), or anything that is no pytree node (a built-in container or a registered class)."""
    from ir.sharding import PartitionSpec
    if x is None or isinstance(x, PartitionSpec):
        return True
    return not isinstance(x, (tuple, list, dict)) and not is_registered(type(x))


def _is_namedtuple(x) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def _is_namedtuple_kind(kind) -> bool:
    """Whether a treedef node is an (unregistered) namedtuple's."""
    return (isinstance(kind, type) and kind not in _registry and issubclass(kind, tuple)
            and hasattr(kind, "_fields"))


# --- key path entries (JAX's jax.tree_util key classes) ---------------------------------------

@dataclasses.dataclass(frozen=True)
class SequenceKey:
    """The index of a child of a tuple or list."""
    idx: int

    def __str__(self):
        return f"[{self.idx!r}]"

    def __hash__(self):                   # JAX's: apart from a FlattenedIndexKey's
        return self.idx + 1


@dataclasses.dataclass(frozen=True)
class DictKey:
    """The key of a child of a dict."""
    key: Any

    def __str__(self):
        return f"[{self.key!r}]"

    def __hash__(self):
        return hash(self.key)


@dataclasses.dataclass(frozen=True)
class GetAttrKey:
    """The field name of a child of a namedtuple or a registered dataclass."""
    name: str

    def __str__(self):
        return f".{self.name}"

    def __hash__(self):
        return hash(self.name)


@dataclasses.dataclass(frozen=True)
class FlattenedIndexKey:
    """The position of a child of a registered container without named children."""
    key: int

    def __str__(self):
        return f"[<flat index {self.key}>]"

    def __hash__(self):
        return self.key + 42


@dataclasses.dataclass(frozen=True, eq=False)
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
        this structure down to them; a mismatch raises JAX's ValueError for it)."""
        reversed_leaves: list = []
        _flatten_up_to_jax(self, tree, reversed_leaves)
        return reversed_leaves[::-1]

    def compose(self, inner: "PyTreeDef") -> "PyTreeDef":
        """This structure with every leaf replaced by ``inner``."""
        if self.kind is None:
            return inner
        return PyTreeDef(self.kind, self.aux, tuple(c.compose(inner) for c in self.subtrees))

    def walk(self, f_node: Callable, f_leaf: Callable | None, leaves):
        """JAX's ``PyTreeDef.walk``: bottom up, ``f_leaf(leaf)`` at each leaf (the leaf itself
        when ``f_leaf`` is None) and ``f_node(children's results as a tuple, node data)`` at
        each node, where node data is a dict's list of keys, a namedtuple's type, a custom
        node's metadata, else None. Returns the root's result."""
        it = iter(leaves)

        def visit(td):
            if td.kind is None:
                leaf = next(it, _END)
                if leaf is _END:
                    raise ValueError("Too few leaves for PyTreeDef")
                return leaf if f_leaf is None else f_leaf(leaf)
            children = tuple(visit(c) for c in td.subtrees)
            return f_node(children, _walk_node_data(td))

        result = visit(self)
        if next(it, _END) is not _END:
            raise ValueError("Too many leaves for PyTreeDef")
        return result

    def __eq__(self, other):
        if not isinstance(other, PyTreeDef):
            return NotImplemented
        return _same_structure(self, other)

    def __hash__(self):
        # As JAX's: node types and arities only. Metadata (which need not hash, e.g. a
        # register_static dict) takes part in equality alone.
        return hash((self.kind, len(self.subtrees), self.subtrees))

    def __repr__(self):
        return f"PyTreeDef({_treedef_str(self)})"


def _walk_node_data(td: PyTreeDef):
    if td.kind in ("none", tuple, list):
        return None
    if td.kind is dict:
        return list(td.aux)
    if _is_namedtuple_kind(td.kind):
        return td.kind
    return td.aux


_METADATA_EQUALITY_ERROR = (
    "Exception raised while checking equality of metadata fields of pytree. Make sure that "
    "metadata fields are hashable and have simple equality semantics. (Note: arrays cannot be "
    "passed as metadata fields!)")


def _same_structure(a: PyTreeDef, b: PyTreeDef) -> bool:
    if a is b:
        return True
    if a.kind != b.kind or len(a.subtrees) != len(b.subtrees):
        return False
    try:
        same_aux = a.aux is b.aux or bool(a.aux == b.aux)
    except Exception as err:            # e.g. arrays as static dataclass fields, as JAX's
        raise ValueError(_METADATA_EQUALITY_ERROR) from err
    return same_aux and all(_same_structure(x, y) for x, y in zip(a.subtrees, b.subtrees))


def _treedef_str(td: PyTreeDef) -> str:
    """JAX's text: ``*`` a leaf, Python's brackets for None, tuples, lists and dicts,
    ``CustomNode(type[metadata], [children])`` for the rest (namedtuples, OrderedDicts ...)."""
    if td.kind is None:
        return "*"
    if td.kind == "none":
        return "None"
    children = [_treedef_str(c) for c in td.subtrees]
    inner = ", ".join(children)
    if td.kind is dict:
        return "{" + ", ".join(f"{k!r}: {c}" for k, c in zip(td.aux, children)) + "}"
    if td.kind is list:
        return f"[{inner}]"
    if td.kind is tuple:
        return f"({inner}{',' if len(children) == 1 else ''})"
    if _is_namedtuple_kind(td.kind):
        return f"CustomNode(namedtuple[{td.kind.__name__}], [{inner}])"
    return f"CustomNode({td.kind.__name__}[{td.aux}], [{inner}])"


_NONE_PREFIX_HINT = (
    "\n\nIn previous releases of JAX, flatten-up-to used to consider None to be a tree-prefix "
    "of non-None values. To obtain the previous behavior, you can usually write:\n"
    "  jax.tree.map(lambda x, y: None if x is None else f(x, y), a, b, "
    "is_leaf=lambda x: x is None)")


def _flatten_up_to_jax(td: PyTreeDef, x, reversed_leaves: list) -> None:
    # JAX walks the structure from its root, last child first: of two mismatches it reports
    # the later one, so this visits the children in reverse too.
    if td.kind is None:
        reversed_leaves.append(x)
        return
    children = _children_matching(td, x)
    for sub, child in zip(reversed(td.subtrees), reversed(children)):
        _flatten_up_to_jax(sub, child, reversed_leaves)


def _children_matching(td: PyTreeDef, x) -> tuple:
    """The children of ``x`` if its node matches ``td``'s, else JAX's ValueError."""
    kind, arity = td.kind, len(td.subtrees)
    if kind == "none":
        if x is not None:
            raise ValueError(f"Expected None, got {x!r}.{_NONE_PREFIX_HINT}")
        return ()
    if kind is tuple or kind is list:
        name = kind.__name__
        if type(x) is not kind:
            raise ValueError(f"Expected {name}, got {x!r}.")
        if len(x) != arity:
            raise ValueError(f"{name.capitalize()} arity mismatch: {len(x)} != {arity}; "
                             f"{name}: {x!r}.")
        return tuple(x)
    if kind is dict:
        if type(x) is not dict:
            raise ValueError(f"Expected dict, got {x!r}.")
        keys = sorted_dict_keys(x)
        if keys != td.aux:
            raise ValueError(f"Dict key mismatch; expected keys: {list(td.aux)!r}; "
                             f"present keys: {list(keys)!r}.")
        return tuple(x[k] for k in keys)
    if _is_namedtuple_kind(kind):
        if not _is_namedtuple(x):
            raise ValueError(f"Expected named tuple, got {x!r}.")
        # (as tuples: a named tuple may give __len__ and __getitem__ meanings of its own)
        if tuple.__len__(x) != arity:
            raise ValueError(f"Named tuple arity mismatch: {tuple.__len__(x)} != {arity}; "
                             f"tuple: {x!r}.")
        if type(x) is not kind:
            raise ValueError(f"Named tuple type mismatch: expected type: {kind!r}, "
                             f"tuple: {x!r}.")
        return tuple(tuple.__iter__(x))
    return _custom_children_matching(td, x)


def _custom_children_matching(td: PyTreeDef, x) -> tuple:
    what = "Custom dataclass node" if getattr(_registry.get(td.kind), "dataclass", False) \
        else "Custom node"
    if type(x) is not td.kind:
        raise ValueError(f"{what} type mismatch: expected type: {td.kind!r}, value: {x!r}.")
    _, aux, children, _ = node_children(x)
    if not (aux is td.aux or aux == td.aux):
        data = "custom dataclass node data" if what != "Custom node" else "custom node data"
        raise ValueError(f"Mismatch {data}: {td.aux!r} != {aux!r}; value: {x!r}.")
    if len(children) != len(td.subtrees):
        raise ValueError(f"Custom type arity mismatch: {len(children)} != {len(td.subtrees)}; "
                         f"value: {x!r}.")
    return children


def node_children(x, is_leaf=None):
    """(kind, aux, children, child keys) of a container, or None for a leaf."""
    if is_leaf is not None and is_leaf(x):
        return None
    if x is None:
        return "none", None, (), ()
    cls = type(x)
    if cls in _registry:
        children, aux = _custom_flatten(_registry[cls].flatten, x)
        return cls, aux, children, tuple(f"[{k}]" for k in range(len(children)))
    if _is_namedtuple(x):
        return cls, None, tuple(tuple.__iter__(x)), tuple(f".{f}" for f in cls._fields)
    if cls is tuple or cls is list:
        return cls, None, tuple(x), tuple(f"[{k}]" for k in range(len(x)))
    if cls is dict:
        keys = sorted_dict_keys(x)
        return cls, keys, tuple(x[k] for k in keys), tuple(f"[{k!r}]" for k in keys)
    if cls is _DefaultDict:
        keys = tuple(sorted(x))                     # JAX sorts these in Python
        return (cls, (x.default_factory, keys), tuple(x[k] for k in keys),
                tuple(f"[{k!r}]" for k in keys))
    if cls is _OrderedDict:                         # in insertion order, as JAX's
        keys = tuple(x.keys())
        return cls, keys, tuple(x[k] for k in keys), tuple(f"[{k!r}]" for k in keys)
    return None


def _custom_flatten(flatten: Callable, x) -> tuple:
    """(children, aux) from a registered ``flatten``, checked as JAX checks it."""
    children, aux = _checked_flatten(flatten, x)
    return tuple(children), aux


def _checked_flatten(flatten: Callable, x) -> tuple:
    """What a registered ``flatten`` gives, after JAX's checks: a pair whose first item is
    iterable."""
    out = flatten(x)
    if not isinstance(out, tuple) or len(out) != 2:
        raise ValueError("The to_iterable function for a custom PyTree node should return a "
                         f"(children, aux_data) tuple, got {out!r}")
    try:
        iter(out[0])
    except TypeError:
        raise ValueError("The to_iterable function for a custom PyTree node should return a "
                         "(children, aux_data) tuple where 'children' is iterable, got "
                         f"{out!r}") from None
    return out


def flatten_one_level(x):
    """JAX's ``(children, metadata)`` of one node, None for a leaf: a tuple or list is its own
    children, a dict gives its values and keys as tuples, a namedtuple a list and its type,
    a registered type what its flatten function gives (an OrderedDict or defaultdict a list
    and its keys, as registered in JAX)."""
    registration = _registry.get(type(x))
    if registration is not None:
        return _checked_flatten(registration.flatten, x)
    node = node_children(x)
    if node is None:
        return None
    kind, aux, children, _ = node
    if kind is tuple or kind is list:
        return x, None
    if kind == "none" or kind is dict:
        return children, aux
    return list(children), (kind if _is_namedtuple_kind(kind) else aux)


def flatten_one_level_with_keys(x):
    """JAX's ``(((key, child), ...), metadata)`` of one node, None for a leaf (a list of pairs
    but for tuples, lists and dicts)."""
    node = keyed_children(x)
    if node is None:
        return None
    kind, aux, keyed = node
    if kind in ("none", tuple, list, dict):
        return keyed, aux
    return list(keyed), (kind if _is_namedtuple_kind(kind) else aux)


def keyed_children(x):
    """(kind, aux, ((key, child), ...)) of a container, or None for a leaf: the keys JAX's key
    paths hold (``SequenceKey``, ``DictKey``, ``GetAttrKey``, a registered type's own keys,
    else ``FlattenedIndexKey``)."""
    cls = type(x)
    registration = _registry.get(cls)
    if registration is not None and registration.flatten_with_keys is not None:
        pairs, aux = _custom_flatten_with_keys(registration.flatten_with_keys, x)
        return cls, aux, pairs
    node = node_children(x)
    if node is None:
        return None
    kind, aux, children, _ = node
    return kind, aux, tuple(zip(_keys_of(kind, aux, len(children)), children))


def _keys_of(kind, aux, arity: int) -> list:
    if kind in DICT_KINDS:
        return [DictKey(k) for k in dict_keys(kind, aux)]
    if kind is tuple or kind is list:
        return [SequenceKey(k) for k in range(arity)]
    if _is_namedtuple_kind(kind):
        return [GetAttrKey(f) for f in kind._fields]
    return [FlattenedIndexKey(k) for k in range(arity)]


def _custom_flatten_with_keys(flatten_with_keys: Callable, x) -> tuple:
    """(((key, child), ...), aux) from a registered ``flatten_with_keys``, checked as JAX
    checks it."""
    out = flatten_with_keys(x)
    head = "The to_iterable_with_keys function for a custom PyTree node should return a " \
           "(key_leaf_pairs, aux_data) tuple"
    if not isinstance(out, tuple) or len(out) != 2:
        raise ValueError(f"{head}, got {out!r}")
    try:
        pairs = tuple(iter(out[0]))
    except TypeError:
        raise ValueError(f"{head} where 'key_leaf_pairs' is iterable, got {out!r}") from None
    for pair in pairs:
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise ValueError(f"{head} where each child is a (key, child) pair, got {pair!r}")
    return pairs, out[1]


_DefaultDict, _OrderedDict = collections.defaultdict, collections.OrderedDict
DICT_KINDS = (dict, _OrderedDict, _DefaultDict)


def dict_keys(kind, aux) -> tuple:
    """The keys of a dictionary node, in its children's order."""
    return aux[1] if kind is _DefaultDict else aux


def sorted_dict_keys(d: dict) -> tuple:
    """A dict's keys in the order its children flatten: sorted by ``<``, as JAX's (keys that do
    not compare, such as ``'a'`` and ``2``, raise JAX's ValueError)."""
    try:
        return tuple(sorted(d))
    except TypeError as err:
        raise ValueError("Comparator raised exception while sorting pytree dictionary "
                         "keys.") from err


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
    if treedef.kind is None and type(leaves) is list and len(leaves) == 1:
        return leaves[0]        # a single leaf: what most calls give
    if not hasattr(leaves, "__len__"):
        leaves = _Counted(leaves)           # for the error: how many there were
    it = iter(leaves)
    try:
        result = _unflatten(treedef, it)
    except StopIteration:
        raise ValueError(f"Too few leaves for PyTreeDef; expected {treedef.num_leaves}, got "
                         f"{len(leaves)}") from None
    if next(it, _END) is not _END:
        raise ValueError(f"Too many leaves for PyTreeDef; expected {treedef.num_leaves}.")
    return result


class _Counted:
    """An iterable that counts what has been drawn from it."""

    def __init__(self, iterable):
        self.iterable, self.drawn = iterable, 0

    def __iter__(self):
        for x in self.iterable:
            self.drawn += 1
            yield x

    def __len__(self):
        return self.drawn


_END = object()


def _unflatten(td: PyTreeDef, it):
    if td.kind is None:
        return next(it)
    if td.kind == "none":
        return None
    children = [_unflatten(c, it) for c in td.subtrees]
    if td.kind in _registry:
        return _registry[td.kind].unflatten(td.aux, children)
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
    others = [leaves_up_to(treedef, tree, r, is_leaf, "tree_map tree") for r in rest]
    return tree_unflatten(treedef, [f(*xs) for xs in zip(leaves, *others)])


def tree_all(tree, *, is_leaf=None) -> bool:
    """Whether every leaf is true (``is_leaf``: what counts as a leaf, as tree_leaves)."""
    return all(bool(x) for x in tree_leaves(tree, is_leaf=is_leaf))


def leaves_up_to(treedef: PyTreeDef, tree, other, is_leaf, name: str) -> list:
    """The subtrees of ``other`` at the leaves of ``tree`` (of structure ``treedef``); where
    they part, JAX's prefix error naming ``tree`` as ``name``."""
    try:
        return treedef.flatten_up_to(other)
    except ValueError:
        mismatch = next(prefix_errors(tree, other, is_leaf), None)
        if mismatch is None:
            raise
        raise mismatch(name) from None


def leaf_paths(tree, is_leaf=None) -> list:
    """The key path (``[0]['w'].f``) of every leaf, in flattening order."""
    paths: list = []

    def walk(x, path):
        node = node_children(x, is_leaf)
        if node is None:
            paths.append(path)
            return
        keys = node[3]
        if node[0] in _registry:
            # a registered type's keys as JAX prints them: its own (a dataclass's fields),
            # else flat indices
            keys = [str(key) for key, _ in keyed_children(x)[2]]
        for child, key in zip(node[2], keys):
            walk(child, path + key)

    walk(tree, "")
    return paths


class PrefixError(ValueError):
    """A prefix pytree whose structure does not match the full pytree."""


def broadcast_prefix(prefix, full, *, is_leaf, name: str) -> list:
    """For every leaf of ``full``, the leaf of ``prefix`` covering it.

    A ``None`` entry of ``prefix`` (when ``is_leaf`` accepts it) covers a whole subtree.
    Errors name the key path where the structures part, as JAX's.
    """
    out: list = []
    _broadcast(prefix, full, is_leaf, out, "", name)
    return out


def _broadcast(prefix, full, is_leaf, out, path, name):
    pnode = None if is_leaf(prefix) else keyed_children(prefix)
    if pnode is None:
        out.extend([prefix] * len(tree_leaves(full)))
        return
    fnode = keyed_children(full)
    mismatch = _node_mismatch(prefix, pnode, full, fnode)
    if mismatch is not None:
        raise mismatch(name, path)
    for (key, pchild), (_, fchild) in zip(pnode[2], fnode[2]):
        _broadcast(pchild, fchild, is_leaf, out, path + str(key), name)


class PytreeLeaf:
    """A leaf of the value tree, as JAX's prefix errors name it (they compare the prefix with
    the value's structure, not its leaves)."""
    def __repr__(self):
        return "pytree leaf"


def mismatch_details(name: str, prefix, full, *, is_leaf, sep: str = "\n") -> str:
    """JAX's ``Mismatch details (N found):`` and every place where ``prefix`` is not a prefix
    of ``full``'s structure, each named by ``name`` and its key path, joined by ``sep``."""
    dummy = tree_unflatten(tree_structure(full), [PytreeLeaf()] * len(tree_leaves(full)))
    errors = [str(error(name)) for error in prefix_errors(prefix, dummy, is_leaf)]
    return f"Mismatch details ({len(errors)} found):{sep}" + sep.join(errors)


def flatten_axes(name: str, prefix, full, *, is_leaf, hint: str = "") -> list:
    """``broadcast_prefix``, with JAX's ``flatten_axes`` error where ``prefix`` does not fit
    (``vmap in_axes``, ``device_put device``, ...): a ValueError listing every mismatch."""
    try:
        return broadcast_prefix(prefix, full, is_leaf=is_leaf, name=name)
    except PrefixError:
        pass
    raise ValueError(f"{name} specification must be a tree prefix of the corresponding value; "
                     f"{hint}\n  " + mismatch_details(name, prefix, full, is_leaf=is_leaf,
                                                      sep="\n  "))


def prefix_errors(prefix, full, is_leaf=None, path: str = ""):
    """JAX's ``prefix_errors``: for each place where ``prefix`` is not a prefix of ``full``
    (outermost first, none beneath one), a function of the prefix's name giving the
    PrefixError that says so."""
    pnode = None if is_leaf is not None and is_leaf(prefix) else keyed_children(prefix)
    if pnode is None:                   # a leaf is a prefix of anything
        return
    fnode = keyed_children(full)
    mismatch = _node_mismatch(prefix, pnode, full, fnode)
    if mismatch is not None:
        yield lambda name: mismatch(name, path)
        return
    for (key, pchild), (_, fchild) in zip(pnode[2], fnode[2]):
        yield from prefix_errors(pchild, fchild, is_leaf, path + str(key))


def _node_mismatch(prefix, pnode, full, fnode):
    """Where the node ``prefix`` and ``full`` part, a function of (name, key path) giving
    JAX's PrefixError; None when they agree down to their children."""
    if fnode is None or type(prefix) is not type(full):
        return functools.partial(_type_mismatch, type(prefix), type(full))
    pkeys, fkeys = [k for k, _ in pnode[2]], [k for k, _ in fnode[2]]
    if isinstance(prefix, (list, tuple)):
        if len(pkeys) != len(fkeys):       # (a named tuple's __len__ may mean something else)
            return functools.partial(_length_mismatch, type(prefix), len(pkeys), len(fkeys))
    elif len(pkeys) != len(fkeys):
        return functools.partial(_count_mismatch, type(prefix), pkeys, fkeys)
    if pnode[1] is not fnode[1] and pnode[1] != fnode[1]:
        return functools.partial(_metadata_mismatch, type(prefix), pnode[1], fnode[1])
    return None


def _type_mismatch(prefix_type, full_type, name, path) -> PrefixError:
    return PrefixError(
        f"pytree structure error: different types at key path\n"
        f"    {name}{path}\n"
        f"At that key path, the prefix pytree {name} has a subtree of type\n"
        f"    {prefix_type}\n"
        f"but at the same key path the full pytree has a subtree of different type\n"
        f"    {full_type}.")


def _length_mismatch(kind, n_prefix, n_full, name, path) -> PrefixError:
    t = kind.__name__
    return PrefixError(
        f"pytree structure error: different lengths of {t} at key path\n"
        f"    {name}{path}\n"
        f"At that key path, the prefix pytree {name} has a subtree of type {t} of length "
        f"{n_prefix}, but the full pytree has a subtree of the same type but of length "
        f"{n_full}.")


def _count_mismatch(kind, prefix_keys, full_keys, name, path) -> PrefixError:
    only_one = ([k for k in prefix_keys if k not in full_keys]
                + [k for k in full_keys if k not in prefix_keys])
    return PrefixError(
        f"pytree structure error: different numbers of pytree children at key path\n"
        f"    {name}{path}\n"
        f"At that key path, the prefix pytree {name} has a subtree of type\n"
        f"    {kind}\n"
        f"with {len(prefix_keys)} child keys\n"
        f"    {' '.join(map(simple_key_str, prefix_keys))}\n"
        f"but at the same key path the full pytree has a subtree of the same type but with "
        f"{len(full_keys)} child keys\n"
        f"    {' '.join(map(simple_key_str, full_keys))}\n"
        f"so the symmetric difference on key sets is\n"
        f"    {' '.join(map(simple_key_str, only_one))}")


def _metadata_mismatch(kind, prefix_aux, full_aux, name, path) -> PrefixError:
    diff = textwrap.indent("\n".join(difflib.ndiff(str(prefix_aux).splitlines(),
                                                   str(full_aux).splitlines())), "    ")
    return PrefixError(
        f"pytree structure error: different pytree metadata at key path\n"
        f"    {name}{path}\n"
        f"At that key path, the prefix pytree {name} has a subtree of type\n"
        f"    {kind}\n"
        f"with metadata\n"
        f"    {prefix_aux}\n"
        f"but at the same key path the full pytree has a subtree of the same type but with "
        f"metadata\n"
        f"    {full_aux}\n"
        f"so the diff in the metadata at these pytree nodes is\n"
        f"{diff}")


def simple_key_str(key) -> str:
    """A key path entry's bare index, key or name (``keystr(simple=True)``'s pieces)."""
    if isinstance(key, SequenceKey):
        return str(key.idx)
    if isinstance(key, (DictKey, FlattenedIndexKey)):
        return str(key.key)
    if isinstance(key, GetAttrKey):
        return str(key.name)
    return str(key)


class _HashableCallableShim:
    """A callable that hashes and compares as the function it wraps (JAX's)."""

    def __init__(self, fun):
        self.fun = fun

    def __call__(self, *args, **kw):
        return self.fun(*args, **kw)

    def __hash__(self):
        return hash(self.fun)

    def __eq__(self, other):
        if isinstance(other, _HashableCallableShim):
            return self.fun == other.fun
        return self.fun == other

    def __repr__(self):
        return f"_HashableCallableShim({self.fun!r})"


class Partial(functools.partial):
    """A ``functools.partial`` that is a pytree: its arguments are children, the function is
    static, so it can be passed through ``jit`` and ``shard_map`` as an argument.

    Given a ``functools.partial``, it keeps it whole as its function (Python would merge the
    two's arguments, making the inner one's arguments children too), behind a shim that
    compares and hashes as it does, as JAX's."""

    def __new__(cls, func, *args, **kw):
        if not isinstance(func, functools.partial):
            return super().__new__(cls, func, *args, **kw)
        shim = _HashableCallableShim(func)
        out = super().__new__(cls, shim, *args, **kw)
        # set only now: the pure-Python functools.partial merges a function that has them
        shim.func, shim.args, shim.keywords = func.func, func.args, func.keywords
        return out


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
