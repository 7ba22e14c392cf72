"""What each communication node costs one device: messages and bytes sent and received.

The model is the bandwidth-optimal ring algorithm for each collective over a group of N
devices, with b the bytes of the operand block:

    all_reduce       reduce-scatter then all-gather: 2(N-1) messages of b/N each way
    all_gather       N-1 messages of b each way
    reduce_scatter   N-1 messages of b/N each way
    all_to_all       N-1 messages of b/N each way (direct exchange)
    ppermute         one message of b, sent if the device is a source, received if a destination
    all_slice        nothing (each device keeps its own chunk)
"""
from __future__ import annotations

import dataclasses

from ir import primitives as prims


@dataclasses.dataclass(frozen=True)
class Traffic:
    """One device's share of one communication node."""
    sent_messages: int = 0
    sent_bytes: int = 0
    received_messages: int = 0
    received_bytes: int = 0

    def __str__(self):
        return f"sends {self.sent_bytes} B, receives {self.received_bytes} B"


def _group_of(groups, device_id):
    for group in groups:
        if device_id in group:
            return group
    raise ValueError(f"device {device_id} is in none of the groups {groups}")


def _symmetric(messages: int, nbytes: int) -> Traffic:
    return Traffic(messages, messages * nbytes, messages, messages * nbytes)


def device_traffic(eqn, device_id: int) -> Traffic | None:
    """The traffic of a lowered communication node for ``device_id``; None for other nodes."""
    params = eqn.params
    if "device_groups" not in params:
        return None
    group = _group_of(params["device_groups"], device_id)
    n = len(group)
    block = eqn.invars[0].aval.nbytes
    prim = eqn.primitive
    if n == 1 or prim is prims.all_slice_p:
        return Traffic()
    if prim is prims.all_reduce_p:
        return _symmetric(2 * (n - 1), block // n)
    if prim is prims.all_gather_p:
        return _symmetric(n - 1, block)
    if prim in (prims.reduce_scatter_p, prims.all_to_all_p):
        return _symmetric(n - 1, block // n)
    if prim is prims.ppermute_p:
        rank = group.index(device_id)
        sends = any(s == rank and d != s for s, d in params["perm"])
        receives = any(d == rank and d != s for s, d in params["perm"])
        return Traffic(int(sends), block * sends, int(receives), block * receives)
    raise ValueError(f"no traffic model for {prim}")
