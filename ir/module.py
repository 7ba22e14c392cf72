"""Lowered modules: a traced program whose shard_map equations carry one program per device."""
from __future__ import annotations

import dataclasses

from ir.core import DeviceProgram, Program
from ir.sharding import Mesh


@dataclasses.dataclass
class LoweredShardMap:
    """The per-device programs of one shard_map equation, and the layouts at its boundary."""
    mesh: Mesh
    in_shardings: tuple      # the PartitionSpec each input arrives with (on this mesh)
    out_specs: tuple
    device_programs: list    # one DeviceProgram per mesh position
    runtime_check: bool = False   # verify claimed replication on the output blocks

    def program_of(self, device_id: int) -> DeviceProgram:
        for dp in self.device_programs:
            if dp.device_id == device_id:
                return dp
        raise KeyError(f"device {device_id} is not in {self.mesh}")


@dataclasses.dataclass
class LoweredModule:
    """A traced program and, for each of its shard_map equations (by index), the per-device
    programs. Equations outside shard_map run on global values."""
    program: Program
    shard_maps: dict              # equation index -> LoweredShardMap

    def lowered(self, index: int) -> LoweredShardMap:
        return self.shard_maps[index]

    def all_shard_maps(self) -> list:
        return [self.shard_maps[k] for k in sorted(self.shard_maps)]

    def __str__(self):
        from ir.printer import print_module
        return print_module(self)
