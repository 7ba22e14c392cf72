"""Where a computation runs, as JAX assigns it: on the devices of the committed arrays among its
operands (an array put on a device by name, or laid out on a mesh), which must agree; else on
the default device (or the mesh its operands' layouts name).

    >>> x3 = device_put(np.arange(4.), devices()[3])
    >>> (x3 + 1).devices()
    {CpuDevice(id=3)}
"""
from __future__ import annotations

from ir import transfer_guard as _transfer_guard
from ir.sharding import NamedSharding, current_mesh
from runtime.array import Array, SingleDeviceSharding
from runtime.devices import default_device


def device_assignment(sharding) -> tuple:
    """The ids of the devices a layout occupies, in order (JAX's ``_device_assignment``; a
    mesh read back from program text holds references to the devices, not the devices)."""
    if isinstance(sharding, SingleDeviceSharding):
        return (sharding.device.id,)
    return sharding.mesh.flat_device_ids


def committed_device(values, fun_name: str, names=None):
    """The device a computation on ``values`` runs on where a committed array among them is on
    one device; None where none is committed, or they are laid out on a mesh. Committed arrays
    on different devices, or on devices other than those of the mesh set as the context, are
    JAX's ValueError, naming them (``names()``: each value's name, else ``x``,
    ``y`` for two operands and ``args[k]`` for more)."""
    for value in values:              # the common case, at every eager operation: none is
        if getattr(value, "_committed", False):
            break
    else:
        if _transfer_guard.active:
            guard_inputs(values, None)
        return None
    committed = [k for k, value in enumerate(values) if getattr(value, "_committed", False)]
    first = values[committed[0]].sharding
    expected = device_assignment(first)
    for k in committed[1:]:
        if device_assignment(values[k].sharding) != expected:
            labels = _labels(values, names)
            raise ValueError(f"{_INCOMPATIBLE}Got "
                             f"{_argument(values, committed[0], labels, fun_name)} and "
                             f"{_argument(values, k, labels, fun_name)}")
    context = getattr(current_mesh(), "flat_device_ids", None)   # an abstract mesh names none
    if context is not None and context != expected:
        ids = list(context)
        raise ValueError(_INCOMPATIBLE + "Got "
                         f"{_argument(values, committed[0], _labels(values, names), fun_name)} "
                         f"and jit's context mesh with device ids {ids} on platform CPU")
    if _transfer_guard.active:
        guard_inputs(values, first)
    return first.device if isinstance(first, SingleDeviceSharding) else None


HOST_TYPES = _transfer_guard.HOST_TYPES


def guard_inputs(values, committed) -> None:
    """The transfer guard on a computation's inputs (an operation run at once, a jitted
    call): a host value (a numpy array, a Python number) goes to the devices, an implicit
    host-to-device transfer; an uncommitted array on another device than the committed
    ones (``committed``: their sharding) moves there, an implicit device-to-device one."""
    target = committed
    if target is None:
        placed = next((v.sharding for v in values if isinstance(v, Array)
                       and isinstance(v.sharding, NamedSharding)), None)
        target = placed or SingleDeviceSharding(default_device())
    for value in values:
        if isinstance(value, HOST_TYPES):
            _transfer_guard.check("host_to_device", False, lambda: (
                f"aval={_transfer_guard.host_aval_text(value)}, dst_sharding={target!r}"))
        elif (isinstance(committed, SingleDeviceSharding) and isinstance(value, Array)
              and not value._committed and value.sharding != committed):
            _transfer_guard.check("device_to_device", False, lambda: (
                f"aval={array_aval_text(value)}, sharding={value.sharding!r}, "
                f"dst_sharding={committed!r}"))


def array_aval_text(value) -> str:
    """``ShapedArray(float32[3])``: an array's type as JAX's transfer messages name it."""
    return _transfer_guard.aval_text(value.shape, value.dtype, value.weak)


_INCOMPATIBLE = "Received incompatible devices for jitted computation. "


def _labels(values, names) -> list:
    if names is not None:
        return names()
    if len(values) <= 2:
        return ["x", "y"][:len(values)]
    return [f"args[{k}]" for k in range(len(values))]


def _argument(values, k, labels, fun_name) -> str:
    ids = list(device_assignment(values[k].sharding))
    return (f"argument {labels[k]} of {fun_name} with shape {values[k].aval.str_long()} and "
            f"with device ids {ids} on platform CPU")


def on_device(outs, device) -> list:
    """Results of a computation on arrays committed to ``device``: there, committed too (a
    result laid out on a mesh stays as it is)."""
    return [out.committed_to(device)
            if isinstance(getattr(out, "sharding", None), SingleDeviceSharding) else out
            for out in outs]
