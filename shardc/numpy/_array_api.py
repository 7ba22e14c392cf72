"""The Python array API's entry points (https://data-apis.org/array-api/), as JAX has them:
``x.__array_namespace__()`` is ``shardc.numpy``, and ``__array_namespace_info__()`` describes
it (the standard's version, capabilities, default dtypes, the dtypes of each kind, devices).
"""
from __future__ import annotations

import numpy as np

from ir import dtypes as _dt
from runtime.devices import devices as _devices

__array_api_version__ = "2024.12"

# the standard's dtypes, by name: 64-bit ones only with x64 on (JAX's)
_NARROW = ("bool", "int8", "int16", "int32", "uint8", "uint16", "uint32", "float32",
           "complex64")
_WIDE = ("int64", "uint64", "float64", "complex128")
_KINDS = {
    "bool": ("bool",),
    "signed integer": ("int8", "int16", "int32", "int64"),
    "unsigned integer": ("uint8", "uint16", "uint32", "uint64"),
    "integral": ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"),
    "real floating": ("float32", "float64"),
    "complex floating": ("complex64", "complex128"),
}
_KINDS["numeric"] = _KINDS["integral"] + _KINDS["real floating"] + _KINDS["complex floating"]


def __array_namespace__(self, *, api_version=None):
    """The array API namespace of an array: ``shardc.numpy`` (JAX's ValueError for a version
    other than ``__array_api_version__``)."""
    if api_version is not None and api_version != __array_api_version__:
        raise ValueError(f"api_version={api_version!r} is not available; available versions "
                         f"are: {[__array_api_version__]}")
    import shardc.numpy
    return shardc.numpy


def __array_namespace_info__() -> "ArrayNamespaceInfo":
    return ArrayNamespaceInfo()


class ArrayNamespaceInfo:
    """What the namespace supports, as the array API's inspection functions ask it."""
    _capabilities = {"boolean indexing": False, "data-dependent shapes": False,
                     "max dimensions": 64}

    def capabilities(self) -> dict:
        return self._capabilities

    def default_device(self):
        """None: arrays are uncommitted by default, placed where the computation needs."""
        return None

    def devices(self) -> list:
        """None (uncommitted), then every device."""
        return [None] + list(_devices())

    def default_dtypes(self, *, device=None) -> dict:
        del device                      # the same on every device
        wide = _dt.x64_enabled()
        return {"real floating": np.dtype(np.float64 if wide else np.float32),
                "complex floating": np.dtype(np.complex128 if wide else np.complex64),
                "integral": np.dtype(np.int64 if wide else np.int32),
                "indexing": np.dtype(np.int64 if wide else np.int32)}

    def dtypes(self, *, device=None, kind=None) -> dict:
        """The standard's dtypes of ``kind`` (a name, a tuple of names, or None: numeric and
        bool), by name."""
        del device
        names = _NARROW + (_WIDE if _dt.x64_enabled() else ())
        if kind is None:
            kinds = ("numeric", "bool")
        elif isinstance(kind, tuple):
            kinds = kind
        else:
            kinds = (kind,)
        return {name: np.dtype(name) for k in kinds for name in _KINDS[k] if name in names}
