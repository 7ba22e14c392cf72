"""The interface between the compiler and whatever runs programs.

The compiler never imports the runtime; the public layer installs a backend with
``set_backend``. A backend evaluates primitives eagerly (on global values, on one device's
block, and collectives over the blocks of a mesh) and executes lowered modules.
"""
from __future__ import annotations

from typing import Protocol, Sequence


class Backend(Protocol):
    def eval_primitive(self, prim, args: Sequence, params: dict) -> list:
        """Apply ``prim`` to concrete global values; returns concrete values."""

    def eval_block(self, prim, blocks: Sequence, params: dict) -> list:
        """Apply ``prim`` to one device's numpy blocks."""

    def run_mesh_program(self, mesh, program, inputs: Sequence) -> list:
        """Run a mesh-level program on every device of ``mesh`` (an eager collective, or
        control flow holding one; any equation of an eager body where ``eager_by_program``);
        ``inputs[k]`` is input k's block at each mesh position (a list, or the sequence this
        backend gave them in). Returns each output's blocks at every position, as a sequence
        ``from_blocks`` and ``run_mesh_program`` take back."""

    # optional: True where every equation of an eager body runs as a one-equation program
    # (``run_mesh_program``) rather than block by block (``eval_block``)
    eager_by_program: bool

    def to_blocks(self, value, mesh, spec) -> list:
        """The numpy block of each mesh position for ``value`` split by ``spec``."""

    def place_inputs(self, values: Sequence, mesh, specs: Sequence) -> list:
        """The inputs of an eager shard_map: ``to_blocks`` of each (where processes share the
        mesh, after agreeing on them)."""

    def put(self, values: Sequence, shardings: Sequence, labels=None) -> list:
        """``device_put`` of each value by its sharding (where processes share the mesh, after
        agreeing on the values); ``labels`` (or a function giving them) name them in errors."""

    def from_blocks(self, blocks: Sequence, mesh, spec):
        """A global value from the blocks of every position laid out by ``spec``."""

    def sharding_of(self, value):
        """The value's sharding, or None for a plain host value."""

    def execute(self, module, args: Sequence) -> list:
        """Run a lowered module on concrete arguments."""

    def committed_device(self, values: Sequence, fun_name: str, names=None):
        """The device a computation on ``values`` runs on where one of them is committed to a
        device (None otherwise); ValueError where committed values are on different devices,
        or on others than the mesh set as the context's; ``names()`` names the values in it."""

    def default_sharding(self):
        """The layout of a value made without a device: on the default device."""

    def on_device(self, outs: Sequence, device) -> list:
        """A computation's results on ``device``, committed to it (from ``committed_device``)."""


_backend: Backend | None = None


def set_backend(backend: Backend) -> None:
    global _backend
    _backend = backend


def get_backend() -> Backend:
    if _backend is None:
        raise RuntimeError("no backend is installed; import shardc first")
    return _backend
