"""``jax.lax`` parallel operators by their JAX module's name (``jax._src.lax.parallel``): the
collectives, and ``pargmax``/``pargmin``, the position along a named axis of each entry's
largest (smallest) value across its members.
"""
from __future__ import annotations

import numpy as np

import shardc.numpy as jnp
from shardc.lax._collectives import (all_gather, all_to_all, axis_index, axis_size, pmax,
                                     pmean, pmin, ppermute, psum, psum_scatter)

__all__ = ["all_gather", "all_to_all", "axis_index", "axis_size", "pargmax", "pargmin",
           "pmax", "pmean", "pmin", "ppermute", "psum", "psum_scatter"]


def pargmax(x, axis_name):
    """The index along ``axis_name`` of the member holding each entry's largest value (the
    first such member), the same on every member."""
    return _position_of(x, pmax(x, axis_name), axis_name)


def pargmin(x, axis_name):
    """The index along ``axis_name`` of the member holding each entry's smallest value."""
    return _position_of(x, pmin(x, axis_name), axis_name)


def _position_of(x, value, axis_name):
    index = axis_index(axis_name)
    largest = np.iinfo(np.int32).max
    return pmin(jnp.where(x == value, index, largest), axis_name)
