"""Host input and output, and printing: numpy's, on the concrete values of arrays (``save``,
``load``, ``array_repr``, ``frombuffer``, ...)."""
from __future__ import annotations

import numpy as np

from shardc.numpy._core import asarray

__all__ = [
    "array_repr", "array_str", "get_printoptions", "set_printoptions", "printoptions", "save",
    "savez", "load", "frombuffer", "fromstring", "fromfile", "fromiter", "from_dlpack",
]


def _host(a):
    return np.asarray(a)


def array_repr(arr, max_line_width=None, precision=None, suppress_small=None):
    """numpy's repr of the array's value."""
    return np.array_repr(_host(arr), max_line_width, precision, suppress_small)


def array_str(a, max_line_width=None, precision=None, suppress_small=None):
    """numpy's str of the array's value."""
    return np.array_str(_host(a), max_line_width, precision, suppress_small)


get_printoptions = np.get_printoptions
set_printoptions = np.set_printoptions
printoptions = np.printoptions


def save(file, arr, allow_pickle=True):
    """Save the array's value to a ``.npy`` file."""
    np.save(file, _host(arr), allow_pickle=allow_pickle)


def savez(file, *args, **kwds):
    """Save several arrays' values to an uncompressed ``.npz`` file."""
    np.savez(file, *[_host(a) for a in args], **{k: _host(v) for k, v in kwds.items()})


def load(file, *args, **kwargs):
    """numpy's ``load``; an array read from a ``.npy`` file comes back as a shardc array."""
    value = np.load(file, *args, **kwargs)
    return asarray(value) if isinstance(value, np.ndarray) else value


def frombuffer(buffer, dtype=float, count=-1, offset=0):
    """An array of the values in ``buffer``."""
    return asarray(np.frombuffer(buffer, dtype=dtype, count=count, offset=offset))


def fromstring(string, dtype=float, count=-1, *, sep):
    """An array of the values in a text ``string`` separated by ``sep``."""
    return asarray(np.fromstring(string, dtype=dtype, count=count, sep=sep))


def fromfile(*args, **kwargs):
    """An array of the values in a file (numpy's ``fromfile``)."""
    return asarray(np.fromfile(*args, **kwargs))


def fromiter(iterable, dtype, count=-1):
    """An array of the values of ``iterable``."""
    return asarray(np.fromiter(iterable, dtype=dtype, count=count))


def from_dlpack(x, /, *, device=None, copy=None):
    """An array sharing the value of a DLPack-exporting object (copied to the host)."""
    return asarray(np.from_dlpack(x))
