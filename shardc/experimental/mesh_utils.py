"""``mesh_utils.create_device_mesh``: all devices arranged in a given shape."""
from __future__ import annotations

import math

import numpy as np

from runtime.devices import devices as _devices

__all__ = ["create_device_mesh"]


def create_device_mesh(mesh_shape, devices=None):
    """An ndarray of devices of shape ``mesh_shape`` (it must use every device)."""
    devices = list(_devices() if devices is None else devices)
    mesh_shape = tuple(mesh_shape)
    if math.prod(mesh_shape) != len(devices):
        raise ValueError(f"Number of devices {len(devices)} must equal the product of "
                         f"mesh_shape {mesh_shape}")
    array = np.empty(len(devices), dtype=object)
    for k, d in enumerate(devices):
        array[k] = d
    return array.reshape(mesh_shape)
