"""What each communication node costs one device: messages and bytes sent and received.

The model is the bandwidth-optimal ring algorithm for each collective over a group of N
devices, with b the bytes of the operand block:

    all_reduce       reduce-scatter then all-gather: 2(N-1) messages of b/N each way
                     (the block is dealt into N chunks of whole elements, the first chunks one
                     element larger when N does not divide it; see ``ring_all_reduce``)
    all_gather       N-1 messages of b each way
    reduce_scatter   N-1 messages of b/N each way
    all_to_all       N-1 messages of b/N each way (direct exchange)
    ppermute         one message of b, sent if the device is a source, received if a destination
    all_slice        nothing (each device keeps its own chunk)

A message that would carry no bytes (an empty chunk) is not sent and not counted.
"""
from __future__ import annotations

import dataclasses



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


def symmetric(messages: int, nbytes: int) -> Traffic:
    if nbytes == 0:
        return Traffic()
    return Traffic(messages, messages * nbytes, messages, messages * nbytes)


def chunk_bytes(aval, n: int) -> list:
    """The bytes of the n chunks a ring deals a block into: whole elements, as even as
    possible, the first ``size % n`` chunks one element larger."""
    base, extra = divmod(aval.size, n)
    return [(base + (k < extra)) * aval.dtype.itemsize for k in range(n)]


def ring_all_reduce(chunks: list, rank: int) -> Traffic:
    """Ring all_reduce for the member at ``rank``: at step s of the reduce-scatter it sends
    chunk r-1-s and receives chunk r-2-s (ending with chunk r reduced); at step s of the
    all-gather it sends chunk r-s and receives chunk r-1-s (indices mod N). Over N-1 steps
    each, it sends every chunk but r, then every chunk but r+1, and receives every chunk
    but r-1, then every chunk but r. With equal chunks: 2(N-1) messages of b/N each way."""
    n = len(chunks)
    sent = _all_but(chunks, rank) + _all_but(chunks, (rank + 1) % n)
    received = _all_but(chunks, (rank - 1) % n) + _all_but(chunks, rank)
    return Traffic(sum(1 for c in sent if c), sum(sent),
                   sum(1 for c in received if c), sum(received))


def _all_but(chunks: list, skipped: int) -> list:
    return [c for k, c in enumerate(chunks) if k != skipped]


def device_traffic(eqn, device_id: int) -> Traffic | None:
    """The traffic of a lowered communication node for ``device_id`` (its record's model,
    ``ir.collectives``); None for other equations."""
    params = eqn.params
    if "device_groups" not in params:
        return None
    group = _group_of(params["device_groups"], device_id)
    if len(group) == 1:
        return Traffic()
    return eqn.primitive.collective.traffic(eqn, group, group.index(device_id))
