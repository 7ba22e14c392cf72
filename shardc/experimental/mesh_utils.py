"""``mesh_utils``: devices arranged in a mesh shape (``create_device_mesh``), and hybrid
meshes whose outer axes run across granules, here processes (``create_hybrid_device_mesh``)."""
from __future__ import annotations

import collections
import math

import numpy as np

from runtime.devices import devices as _devices

__all__ = ["create_device_mesh", "create_hybrid_device_mesh"]


def create_device_mesh(mesh_shape, devices=None, *, contiguous_submeshes=False,
                       allow_split_physical_axes=False):
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


def create_hybrid_device_mesh(mesh_shape, dcn_mesh_shape, devices=None, *,
                              process_is_granule=False, should_sort_granules_by_key=True,
                              allow_split_physical_axes=False):
    """A mesh of shape ``mesh_shape * dcn_mesh_shape``: each granule's devices in
    ``mesh_shape``, the granules tiled in ``dcn_mesh_shape``. Granules are processes
    (``process_is_granule=True``); devices here have no ``slice_index``, as JAX's CPU
    devices have none."""
    devices = list(_devices() if devices is None else devices)
    attr = "process_index" if process_is_granule else "slice_index"
    if not hasattr(devices[0], attr):
        raise ValueError(f"Device {devices[0]} does not have attribute {attr}. See "
                         "`process_is_granule` option.")
    by_granule = collections.defaultdict(list)
    for d in devices:
        by_granule[getattr(d, attr)].append(d)
    granules = ([by_granule[k] for k in sorted(by_granule)] if should_sort_granules_by_key
                else list(by_granule.values()))
    if math.prod(dcn_mesh_shape) != len(granules):
        raise ValueError(f"Number of slices {len(granules)} must equal the product of "
                         f"dcn_mesh_shape {tuple(dcn_mesh_shape)}")
    meshes = [create_device_mesh(mesh_shape, g) for g in granules]
    tiles = np.empty(len(granules), dtype=object)
    for k, m in enumerate(meshes):
        tiles[k] = m
    return np.block(tiles.reshape(tuple(dcn_mesh_shape)).tolist())
