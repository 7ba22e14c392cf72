"""``shardc.flatten_util``: JAX's ``ravel_pytree``, a pytree of arrays as one flat vector.

    >>> import shardc.numpy as jnp
    >>> flat, unravel = ravel_pytree({"w": jnp.ones((2, 2)), "b": jnp.zeros(2)})
    >>> flat
    Array([0., 0., 1., 1., 1., 1.], dtype=float32)
    >>> unravel(flat)["w"].shape
    (2, 2)
"""
from __future__ import annotations

from typing import Callable

import shardc.dtypes as dtypes
import shardc.lax as lax
import shardc.numpy as jnp
from shardc.tree_util import PyTreeDef, tree_flatten, tree_unflatten

__all__ = ["ravel_pytree"]


def ravel_pytree(pytree) -> tuple:
    """``(flat, unravel)``: the leaves of ``pytree`` raveled and concatenated into one 1-D
    array, and the function that cuts such a vector back into a pytree of that structure.

    ``flat``'s dtype is the promotion of the leaves' dtypes (float32 when there are no
    leaves). When the leaves share one dtype, ``unravel`` keeps the dtype it is given; else
    it takes only ``flat``'s dtype and gives each leaf its own back. ``unravel`` compares
    and hashes by what it does, so it can be a static argument of ``jit``.
    """
    leaves, treedef = tree_flatten(pytree)
    flat, unravel_list = _ravel_list(leaves)
    return flat, _HashablePartial(_unravel_pytree, treedef, unravel_list)


def _unravel_pytree(treedef: PyTreeDef, unravel_list: Callable, flat):
    return tree_unflatten(treedef, unravel_list(flat))


def _ravel_list(leaves: list) -> tuple:
    if not leaves:
        return lax.full([0], 0, "float32"), _HashablePartial(_no_leaves)
    from_dtypes = tuple(dtypes.result_type(x) for x in leaves)
    to_dtype = dtypes.result_type(*from_dtypes)
    sizes = tuple(int(jnp.size(x)) for x in leaves)
    shapes = tuple(tuple(jnp.shape(x)) for x in leaves)
    if all(dt == to_dtype for dt in from_dtypes):
        # no conversion, so a weakly typed leaf stays weak and unravel keeps any dtype
        flat = lax.concatenate([lax.reshape(x, (n,)) for x, n in zip(leaves, sizes)], 0)
        return flat, _HashablePartial(_unravel_one_dtype, sizes, shapes)
    flat = lax.concatenate([lax.reshape(lax.convert_element_type(x, to_dtype), (n,))
                            for x, n in zip(leaves, sizes)], 0)
    return flat, _HashablePartial(_unravel_each_dtype, sizes, shapes, from_dtypes, to_dtype)


def _no_leaves(flat) -> list:
    return []


def _unravel_one_dtype(sizes: tuple, shapes: tuple, flat) -> list:
    return [chunk.reshape(shape) for chunk, shape in zip(lax.split(flat, sizes), shapes)]


def _unravel_each_dtype(sizes: tuple, shapes: tuple, from_dtypes: tuple, to_dtype, flat) -> list:
    flat_dtype = dtypes.result_type(flat)
    if flat_dtype != to_dtype:
        raise TypeError(f"unravel function given array of dtype {flat_dtype}, "
                        f"but expected dtype {to_dtype}")
    return [lax.convert_element_type(chunk.reshape(shape), dtype)
            for chunk, shape, dtype in zip(lax.split(flat, sizes), shapes, from_dtypes)]


class _HashablePartial:
    """``f`` with its first arguments bound, equal to another with the same code and
    arguments (JAX's ``HashablePartial``): two ravels of alike trees give equal unravels."""

    def __init__(self, f: Callable, *args):
        self.f, self.args = f, args

    def __eq__(self, other):
        return (type(other) is _HashablePartial and self.f.__code__ == other.f.__code__
                and self.args == other.args)

    def __hash__(self):
        return hash((self.f.__code__, self.args))

    def __call__(self, *args):
        return self.f(*self.args, *args)
