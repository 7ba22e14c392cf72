"""Lowered modules: a traced program whose shard_map equations carry one program per device."""
from __future__ import annotations

from typing import Callable, Optional

from ir import primitives as prims
from ir.core import DeviceProgram, Program, programs_in
from ir.sharding import Mesh


class LoweredShardMap:
    """The lowering of one shard_map equation: the layouts at its boundary, its mesh-level
    program (the same for every device) and the per-device programs specialised from it.

    Both programs are built on first use when their builders are given
    (``build_mesh_program()`` returns the mesh-level program, ``build(self)`` the per-device
    list): a backend that runs the mesh-level program stacked over devices never needs the
    per-device programs, so a 512-device mesh does not pay for 512 of them until someone reads
    one (the printer, the CLI, the ledger, the reference backend). A module read from text
    holds its mesh-level program and derives the per-device programs from it the same way
    (older texts carry per-device programs only: ``mesh_program`` is None).
    """
    __slots__ = ("mesh", "in_shardings", "out_specs", "runtime_check", "show_vma",
                 "_programs", "_build", "_mesh_program", "_build_mesh_program", "derived")

    def __init__(self, mesh: Mesh, in_shardings: tuple, out_specs: tuple,
                 device_programs: Optional[list] = None, runtime_check: bool = False,
                 build: Optional[Callable[["LoweredShardMap"], list]] = None,
                 mesh_program: Optional[Program] = None,
                 build_mesh_program: Optional[Callable[[], Program]] = None,
                 show_vma: bool = True):
        self.mesh = mesh
        self.in_shardings = in_shardings      # the PartitionSpec each input arrives with
        self.out_specs = out_specs
        self.runtime_check = runtime_check    # verify claimed replication on output blocks
        self.show_vma = show_vma              # False when the replication check is off
        self._programs = device_programs if build is None else None
        self._build = build
        # whether the per-device programs are (to be) built here rather than given
        self.derived = build is not None
        self._mesh_program = mesh_program
        self._build_mesh_program = build_mesh_program

    @property
    def mesh_program(self) -> Optional[Program]:
        """The mesh-level program, or None when this lowering came without one."""
        if self._mesh_program is None and self._build_mesh_program is not None:
            self._mesh_program = self._build_mesh_program()
            self._build_mesh_program = None
        return self._mesh_program

    @property
    def device_programs(self) -> list:
        """One DeviceProgram per mesh position, in position order."""
        if self._programs is None:
            self._programs = self._build(self) if self._build is not None else []
            self._build = None
        return self._programs

    @property
    def built(self) -> bool:
        """Whether the per-device programs exist yet."""
        return self._programs is not None

    def replace(self, **changes) -> "LoweredShardMap":
        """A copy with fields changed; new per-device programs leave no mesh-level program
        (it would no longer be theirs)."""
        fields = dict(mesh=self.mesh, in_shardings=self.in_shardings, out_specs=self.out_specs,
                      device_programs=self.device_programs, runtime_check=self.runtime_check,
                      show_vma=self.show_vma)
        if "device_programs" not in changes:
            fields["mesh_program"] = self.mesh_program
        fields.update(changes)
        return LoweredShardMap(**fields)

    def program_of(self, device_id: int) -> DeviceProgram:
        for dp in self.device_programs:
            if dp.device_id == device_id:
                return dp
        raise KeyError(f"device {device_id} is not in {self.mesh}")

    def __repr__(self):
        return (f"LoweredShardMap(mesh={self.mesh}, in_shardings={self.in_shardings!r}, "
                f"out_specs={self.out_specs!r}, runtime_check={self.runtime_check!r})")


class LoweredModule:
    """A traced program and, for each of its shard_map equations (by index), the per-device
    programs. Equations outside shard_map run on global values."""

    def __init__(self, program: Program, shard_maps: dict):
        self.program = program
        self.shard_maps = shard_maps          # equation index -> LoweredShardMap
        # the shard_maps inside host loops and branches: id of the equation -> LoweredShardMap
        self.nested: dict = {}
        # the communication the partitioner inserted (compiler.partition.InsertedCommunication)
        self.inserted: tuple = ()
        # on Auto axes, the mesh, results' types and their shardings sharding propagation
        # gave (None: the program's types are its own)
        self.propagated = None

    def lowered(self, index: int) -> LoweredShardMap:
        return self.shard_maps[index]

    def nested_lowered(self, eqn) -> LoweredShardMap:
        """The lowered form of a shard_map inside a host loop or branch (``nested``)."""
        found = self.nested.get(id(eqn))
        if found is None:
            raise NotImplementedError(
                "a shard_map inside a host loop or branch of a module read from text: its "
                "lowered programs are not in the text (lower the traced program to run it)")
        return found

    def all_shard_maps(self) -> list:
        return [self.shard_maps[k] for k in sorted(self.shard_maps)]

    def __str__(self):
        from ir.printer import print_module
        return print_module(self)


def runs_shard_map(params) -> bool:
    """Whether the programs in a higher-order equation's ``params`` (a loop's body, a branch)
    run a shard_map, at any depth outside shard_map bodies."""
    return any(eqn.primitive is prims.shard_map_p
               or (eqn.primitive.kind == "higher" and runs_shard_map(eqn.params))
               for value in params.values() for program in programs_in(value)
               for eqn in program.eqns)
