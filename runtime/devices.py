"""Simulated devices: 8 by default; ``request_device_count`` (``jax_num_cpu_devices``),
``SHARDC_NUM_DEVICES`` or ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` set the count
before first use, in that order of precedence."""
from __future__ import annotations

import os
import re


class Device:
    """A simulated CPU device. ``str`` is ``cpu:{id}``, ``repr`` ``CpuDevice(id={id})``, as
    JAX's."""
    platform = "cpu"
    device_kind = "cpu"

    def __init__(self, id: int):
        self.id = id

    def __str__(self):
        return f"cpu:{self.id}"

    def __repr__(self):
        return f"CpuDevice(id={self.id})"

    def __eq__(self, other):
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self):
        return hash(("Device", self.id))

    def __lt__(self, other):
        return self.id < other.id

    @property
    def process_index(self) -> int:
        """The process that holds this device: devices are split evenly, in id order."""
        return self.id // (device_count() // _processes["count"])

    # JAX's older names for the process, both still read
    host_id = task_id = process_index

    @property
    def local_hardware_id(self) -> int:
        """The device's number among its process's devices (its id on one process)."""
        return self.id % (device_count() // _processes["count"])

    def memory_stats(self) -> None:
        """None, as JAX's CPU devices: they report no memory statistics."""
        return None

    @property
    def is_local(self) -> bool:
        """Whether this process holds the device (addresses its buffers)."""
        return self.process_index == _processes["index"]


def configured_device_count() -> int:
    """The device count asked for by ``request_device_count`` or else the environment
    (default 8)."""
    return _requested[0] if _requested else environment_device_count()


def environment_device_count() -> int:
    """The device count ``SHARDC_NUM_DEVICES`` or ``XLA_FLAGS`` ask for (default 8)."""
    explicit = os.environ.get("SHARDC_NUM_DEVICES")
    if explicit:
        return _positive(explicit, "SHARDC_NUM_DEVICES")
    match = re.search(r"--xla_force_host_platform_device_count=([0-9]+)",
                      os.environ.get("XLA_FLAGS", ""))
    if match:
        return _positive(match.group(1), "XLA_FLAGS")
    return 8


def _positive(text: str, name: str) -> int:
    digits = text.strip()
    n = int(digits) if digits.isascii() and digits.isdigit() else 0    # 0-9 only, as the CLI
    if n < 1:
        raise ValueError(f"{name} must ask for a positive number of devices, got {text!r}")
    return n


_devices: list = []
_requested: list = []       # the count request_device_count asked for, if any


def request_device_count(n: int, name: str = "jax_num_cpu_devices") -> None:
    """Create ``n`` devices at first use (``n == -1``: the environment's count). After first
    use only the count already in place is accepted: RuntimeError otherwise, as JAX raises
    once its backends are initialised."""
    if _devices:
        if (n if n != -1 else environment_device_count()) == len(_devices):
            return
        raise RuntimeError(f"{name} config should be updated before backends are initialized "
                           "i.e. before any JAX operation is executed. You should initialize "
                           f"this config immediately after `import jax`. ({len(_devices)} "
                           "simulated devices already exist.)")
    if n == -1:
        _requested.clear()
        return
    if n < 1:
        raise ValueError(f"{name} must ask for a positive number of devices, got {n}")
    _requested[:] = [n]


def check_backend(backend) -> None:
    """JAX's ``backend=`` argument: the simulated devices are CPU devices."""
    if backend is None or backend == "cpu" or getattr(backend, "platform", None) == "cpu":
        return
    raise RuntimeError(f"Unknown backend: '{backend}' requested, but no platforms that are "
                       "instances of it are present. Platforms present are: cpu")


def devices(backend=None) -> list:
    """All simulated devices; the count is fixed at the first call."""
    check_backend(backend)
    if not _devices:
        _devices.extend(Device(k) for k in range(configured_device_count()))
    return list(_devices)


_default: list = [None]      # jax_default_device: a Device, a platform name, or None


def set_default_device(value) -> None:
    """``jax_default_device``: the device values made without one are put on (a platform
    name, or None, is device 0 of the one platform)."""
    _default[0] = value if isinstance(value, Device) else None


def default_device() -> Device:
    """Where values made without a device go, and computations on them run (JAX's default
    device): this process's first device."""
    chosen = _default[0]
    if chosen is not None:
        return chosen
    every = _devices or devices()
    return every[_processes["index"] * (len(every) // _processes["count"])]


def device_count(backend=None) -> int:
    return len(devices(backend))


# --- processes: one by default; under MPI each holds an equal, contiguous run of the devices ---

_processes = {"index": 0, "count": 1}


def set_processes(index: int, count: int) -> None:
    """Declare this process ``index`` of ``count``; the devices must split evenly over them."""
    n = device_count()
    if n % count:
        raise ValueError(f"{n} devices cannot be split evenly over {count} processes: set "
                         f"SHARDC_NUM_DEVICES to a multiple of {count} (the device count is "
                         "global: every process sees every device, and holds its share)")
    _processes["index"], _processes["count"] = index, count


def process_index(backend=None) -> int:
    """This process's index (0 without MPI)."""
    check_backend(backend)
    return _processes["index"]


def process_count(backend=None) -> int:
    """The number of processes (1 without MPI)."""
    check_backend(backend)
    return _processes["count"]


def local_devices(process_index=None, backend=None, host_id=None) -> list:
    """The devices process ``process_index`` holds (default: this one's)."""
    check_backend(backend)
    me = _processes["index"] if process_index is None else int(process_index)
    if host_id is not None:
        me = int(host_id)
    return [d for d in devices() if d.process_index == me]


def is_local(device) -> bool:
    """Whether this process holds ``device``'s buffers."""
    return _processes["count"] == 1 or device.process_index == _processes["index"]
