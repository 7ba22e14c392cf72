"""``shardc.typing``: the annotation types JAX programs import (``jax.typing``)."""
from __future__ import annotations

from typing import Any, Union

import numpy as np

from runtime.array import Array

# what a function taking "an array" accepts: arrays, numpy arrays and scalars, Python numbers
ArrayLike = Union[Array, np.ndarray, np.bool_, np.number, bool, int, float, complex]
# what names a dtype: a numpy dtype, a scalar type, a type name
DTypeLike = Union[str, type, np.dtype, Any]

__all__ = ["ArrayLike", "DTypeLike"]
