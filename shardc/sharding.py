"""``shardc.sharding``: meshes, partition specs and shardings (JAX's names)."""
from ir.sharding import Mesh, NamedSharding, PartitionSpec
from runtime.array import SingleDeviceSharding

__all__ = ["Mesh", "NamedSharding", "PartitionSpec", "SingleDeviceSharding"]
