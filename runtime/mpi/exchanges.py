"""Exchanges: completing one device group's communication node whose members live on several
processes, with mpi4py's buffer calls on the group's sub-communicator."""
from __future__ import annotations

import numpy as np

from ir import collectives as coll
from runtime import collectives
from runtime.mpi.agreement import fingerprint, settle, settle_then_wait
from runtime.mpi.world import world


# a large all_gather along axis 0 whose receive buffer is its result (no reassembly)
IN_PLACE_BYTES = 1 << 16
_PAIR_TAG = 7312


def exchange_all(comm, payload: list, counts: list, state=None) -> list:
    """Every rank's arrays (as bytes) on every rank of ``comm``; ``counts`` are every rank's
    payload bytes. Nonblocking, so that ``state``'s open agreement settles while it moves
    (``settle_then_wait``).

    One Allgather of equal slots (MPICH's Allgatherv is far slower than its Allgather on large
    messages: 50 times on 4 MiB here)."""
    if len(set(counts)) == 1:
        send = as_bytes(payload)
    else:
        send = np.zeros(max(counts), np.uint8)
        mine = as_bytes(payload)
        send[:mine.nbytes] = mine
    slot = send.nbytes
    recv = np.empty(slot * len(counts), np.uint8)
    settle_then_wait(state, [comm.Iallgather(send, recv)])
    return [recv[k * slot:k * slot + c] for k, c in enumerate(counts)]


def split_blocks(data: np.ndarray, count: int, shape, dtype) -> list:
    """``count`` blocks of ``shape``/``dtype`` from contiguous bytes."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    return [data[k * nbytes:(k + 1) * nbytes].view(dtype).reshape(shape) for k in range(count)]


_NODE_PRINTS: dict = {}


def node_fingerprint(request) -> int:
    """What the members of a group must agree on: the node's primitive, params and operand
    type (computed once per equation)."""
    eqn, value = request.eqn, request.value
    entry = _NODE_PRINTS.get(id(eqn))
    if entry is None or entry[0] is not eqn:
        if len(_NODE_PRINTS) > 4096:
            _NODE_PRINTS.clear()
        params = sorted((k, v) for k, v in eqn.params.items() if k != "device_groups")
        entry = _NODE_PRINTS[id(eqn)] = (eqn, fingerprint(f"{eqn.primitive} {params}"))
    return entry[1] ^ fingerprint(f"{collectives.operand_types(value)}")


def communicator(state, ranks: tuple):
    """The communicator of ``ranks``. Making one is collective over them: an open agreement
    settles first, so that no process waits there for one that runs something else."""
    w = world()
    comm = w.existing_comm(ranks)
    if comm is None:
        settle(state)
        comm = w.comm_of(ranks)
    return comm


def gather_then_apply(state, comm, members, ranks, local, waiting) -> dict:
    """Every rank of the group gets every member's block, then applies the reference's rule:
    the simulator's result, reduced in its order (all_reduce, all_gather)."""
    request = waiting[local[0]]
    if type(request.value) is tuple:
        return _gather_operands_then_apply(state, comm, members, ranks, local, waiting)
    value = np.asarray(request.value)
    count_on = {r: sum(1 for m in members if state.rank_of[m] == r) for r in ranks}
    payload = [np.asarray(waiting[m].value) for m in local]
    data = exchange_all(comm, payload, [value.nbytes * count_on[r] for r in ranks], state)
    if _gathered_in_place(state, members, ranks, request, value):
        # one large block per rank, in rank order, gathered along axis 0: the receive buffer
        # is the result already
        lead = ((len(members) * value.shape[0],) if request.eqn.params["tiled"]
                else (len(members), value.shape[0]))
        joined = data[0].base.view(value.dtype).reshape(lead + value.shape[1:])
        return {m: joined for m in local}
    by_rank = {r: iter(split_blocks(d, count_on[r], value.shape, value.dtype))
               for r, d in zip(ranks, data)}
    blocks = [next(by_rank[state.rank_of[m]]) for m in members]
    outs = collectives.group_rules[request.eqn.primitive](blocks, **request.eqn.params)
    return {m: out for m, out in zip(members, outs) if m in local}


def _gather_operands_then_apply(state, comm, members, ranks, local, waiting) -> dict:
    """``gather_then_apply`` for a node whose members bring several operands
    (``ragged_all_to_all``): each member's operands travel as one run of bytes."""
    types = collectives.operand_types(waiting[local[0]].value)
    sizes = [int(np.prod(shape, dtype=np.int64)) * dtype.itemsize for shape, dtype in types]
    count_on = {r: sum(1 for m in members if state.rank_of[m] == r) for r in ranks}
    payload = [np.ascontiguousarray(v) for m in local for v in waiting[m].value]
    data = exchange_all(comm, payload, [sum(sizes) * count_on[r] for r in ranks], state)
    by_rank = {r: iter(split_blocks(d, count_on[r], (sum(sizes),), np.uint8))
               for r, d in zip(ranks, data)}
    ends = np.cumsum([0] + sizes)
    blocks = []
    for m in members:
        run = next(by_rank[state.rank_of[m]])
        blocks.append(tuple(run[a:b].view(dtype).reshape(shape)
                            for a, b, (shape, dtype) in zip(ends, ends[1:], types)))
    request = waiting[local[0]]
    outs = collectives.group_rules[request.eqn.primitive](blocks, **request.eqn.params)
    return {m: out for m, out in zip(members, outs) if m in local}


def _gathered_in_place(state, members, ranks, request, value) -> bool:
    return (request.eqn.primitive is coll.all_gather_node
            and request.eqn.params["gather_axis"] == 0 and value.ndim > 0
            and value.nbytes >= IN_PLACE_BYTES
            and [state.rank_of[m] for m in members] == list(ranks))


def one_per_rank(state, members, ranks) -> bool:
    """Whether the group has one member on each of its ranks, in rank order (the member's
    group index is then its rank in the group's communicator)."""
    return len(members) == len(ranks) and [state.rank_of[m] for m in members] == list(ranks)


def _exchange_pairs(comm, ranks, sends: dict, recv_counts: dict, state=None) -> dict:
    """``sends[r]``: the arrays for world rank r; ``recv_counts[r]``: the bytes expected from
    it. Returns the bytes received by rank: one message per pair of ranks that has something
    to exchange, point to point (a single contiguous array is sent without a copy, and
    received into the buffer its blocks will view)."""
    MPI = world().MPI
    me = world().rank
    requests, received = [], {}
    for k, r in enumerate(ranks):
        if r != me and recv_counts.get(r, 0):
            received[r] = np.empty(recv_counts[r], np.uint8)
            requests.append(comm.Irecv([received[r], MPI.BYTE], source=k, tag=_PAIR_TAG))
    for k, r in enumerate(ranks):
        if r != me and sends.get(r):
            requests.append(comm.Isend([as_bytes(sends[r]), MPI.BYTE], dest=k, tag=_PAIR_TAG))
    received[me] = as_bytes(sends.get(me, ()))
    if requests:
        settle_then_wait(state, requests)
    empty = np.empty(0, np.uint8)
    return {r: received.get(r, empty) for r in ranks}


def as_bytes(arrays) -> np.ndarray:
    """The arrays' bytes, one after another (a view when there is one contiguous array)."""
    views = [np.ascontiguousarray(a).reshape(-1).view(np.uint8) for a in arrays]
    if len(views) == 1:
        return views[0]
    return np.concatenate(views) if views else np.empty(0, np.uint8)


def joined_bytes(arrays) -> np.ndarray:
    """``as_bytes``, as one view where the arrays lie one after another in memory (the
    blocks of one stack, in order): nothing copied."""
    first = arrays[0] if arrays else None
    if (len(arrays) > 1 and all(type(a) is np.ndarray and a.flags.c_contiguous
                                for a in arrays)):
        at = first.__array_interface__["data"][0]
        for a in arrays:
            if a.__array_interface__["data"][0] != at:
                return as_bytes(arrays)
            at += a.nbytes
        base = first.reshape(-1).view(np.uint8)
        return np.lib.stride_tricks.as_strided(base, (at - first.__array_interface__[
            "data"][0],), (1,), writeable=False)
    return as_bytes(arrays)


def _chunks(block, n: int, axis: int, tiled: bool) -> list:
    """The reference's chunks of one block along ``axis`` (one per group member)."""
    if tiled:
        return np.split(block, n, axis)
    return [np.take(block, d, axis=axis) for d in range(n)]


def _chunked_exchange(state, comm, members, ranks, local, waiting, axis_key):
    """Member d receives chunk d of every member's block: chunks[d][s], in group order of s.
    Each chunk crosses to its destination's rank once."""
    request = waiting[local[0]]
    params = request.eqn.params
    n = len(members)
    tiled = params.get("tiled", True)
    chunks_of = {s: _chunks(np.asarray(waiting[s].value), n, params[axis_key], tiled)
                 for s in local}
    index = {m: k for k, m in enumerate(members)}
    sends = {r: [chunks_of[s][index[d]] for s in local for d in members
                 if state.rank_of[d] == r] for r in ranks}
    like = chunks_of[local[0]][0]
    sources_on = {r: [s for s in members if state.rank_of[s] == r] for r in ranks}
    recv_counts = {r: like.nbytes * len(sources_on[r]) * len(local) for r in ranks}
    data = _exchange_pairs(comm, ranks, sends, recv_counts, state)
    received = {}
    for r in ranks:
        parts = iter(split_blocks(data[r], len(sources_on[r]) * len(local), like.shape,
                                   like.dtype))
        for s in sources_on[r]:
            for d in local:
                received[(s, d)] = next(parts)
    return {d: [received[(s, d)] for s in members] for d in local}


def _all_to_all_exchange(state, comm, members, ranks, local, waiting) -> dict:
    """all_to_all: member d joins chunk d of every member's block along ``concat_axis``."""
    params = waiting[local[0]].eqn.params
    parts = _chunked_exchange(state, comm, members, ranks, local, waiting, "split_axis")
    join = np.concatenate if params.get("tiled", True) else np.stack
    return {d: join(chunks, params["concat_axis"]) for d, chunks in parts.items()}


def _reduce_scatter_exchange(state, comm, members, ranks, local, waiting) -> dict:
    """reduce_scatter: member d reduces chunk d of every member's block in group order, which
    is bitwise chunk d of the reference's reduction of whole blocks (elementwise)."""
    params = waiting[local[0]].eqn.params
    parts = _chunked_exchange(state, comm, members, ranks, local, waiting, "scatter_axis")
    outs = {}
    for d, chunks in parts.items():
        total = collectives.all_reduce(chunks, reduction=params["reduction"])[0]
        outs[d] = contiguous(total)
    return outs


def _ppermute_exchange(state, comm, members, ranks, local, waiting) -> dict:
    """ppermute: each source's block goes to its destination's rank only; members no pair
    names get zeros."""
    request = waiting[local[0]]
    value = np.asarray(request.value)
    pairs = [(members[s], members[d]) for s, d in request.eqn.params["perm"]]
    sends = {r: [np.asarray(waiting[s].value) for s, d in pairs
                 if s in local and state.rank_of[d] == r] for r in ranks}
    incoming = {r: [(s, d) for s, d in pairs if state.rank_of[s] == r and d in local]
                for r in ranks}
    recv_counts = {r: value.nbytes * len(incoming[r]) for r in ranks}
    data = _exchange_pairs(comm, ranks, sends, recv_counts, state)
    named = {d for _, d in pairs}
    outs = {d: np.zeros_like(value) for d in local if d not in named}
    for r in ranks:
        blocks = split_blocks(data[r], len(incoming[r]), value.shape, value.dtype)
        for (s, d), block in zip(incoming[r], blocks):
            outs[d] = block
    return outs


SCATTERED_REDUCTION_BYTES = 1 << 16


def _all_reduce_exchange(state, comm, members, ranks, local, waiting) -> dict:
    """all_reduce with large blocks over three or more ranks, or over ranks holding several
    members each: each rank reduces one chunk of the flattened blocks over every member, in
    group order, then the reduced chunks are gathered (each rank moves about two blocks, not
    one per member on other ranks). Reductions are elementwise, so this is bitwise the
    reference's reduction of whole blocks. Smaller blocks, and two ranks of one member each,
    gather every block (one exchange instead of two, moving as much)."""
    request = waiting[local[0]]
    value = np.asarray(request.value)
    if ((len(ranks) < 3 and len(members) == len(ranks))
            or value.nbytes < SCATTERED_REDUCTION_BYTES):     # the same on every rank
        return gather_then_apply(state, comm, members, ranks, local, waiting)
    params = request.eqn.params
    pieces = {m: np.array_split(np.asarray(waiting[m].value).reshape(-1), len(ranks))
              for m in local}
    order = {r: k for k, r in enumerate(ranks)}
    me = world().rank
    sends = {r: [pieces[m][order[r]] for m in local] for r in ranks}
    mine = pieces[local[0]][order[me]]
    sources_on = {r: [m for m in members if state.rank_of[m] == r] for r in ranks}
    recv_counts = {r: mine.nbytes * len(sources_on[r]) for r in ranks}
    data = _exchange_pairs(comm, ranks, sends, recv_counts, state)
    received = {}
    for r in ranks:
        for m, chunk in zip(sources_on[r], split_blocks(data[r], len(sources_on[r]),
                                                         mine.shape, mine.dtype)):
            received[m] = chunk
    reduced = collectives.all_reduce([received[m] for m in members], **params)[0]
    reduced = np.ascontiguousarray(reduced)
    sizes = [p.size for p in pieces[local[0]]]
    counts = [n * reduced.dtype.itemsize for n in sizes]
    parts = exchange_all(comm, [reduced], counts, state)
    total = np.concatenate([p.view(reduced.dtype) for p in parts]).reshape(value.shape)
    return {m: total for m in local}


EXCHANGES = {
    coll.all_reduce_node: _all_reduce_exchange,
    coll.all_to_all_node: _all_to_all_exchange,
    coll.reduce_scatter_node: _reduce_scatter_exchange,
    coll.ppermute_node: _ppermute_exchange,
}


def natively_reducible(request) -> bool:
    return natively_reducible_type(np.asarray(request.value).dtype,
                                    request.eqn.params["reduction"])


# the dtypes MPI reduces natively (it has no bfloat16 or float16, and bool sums count)
_NATIVE_DTYPES = frozenset(np.dtype(t) for t in (
    np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
    np.uint8, np.uint16, np.uint32, np.uint64))


def natively_reducible_type(dtype, reduction) -> bool:
    return np.dtype(dtype) in _NATIVE_DTYPES and reduction in ("sum", "mean", "max", "min")


def native_all_reduce(state, comm, ranks, local, members, waiting, reduction) -> dict:
    """MPI's Allreduce over the ranks' partial reductions: fast, not bit-exact (MPI picks the
    order)."""
    blocks = [np.asarray(waiting[m].value) for m in local]
    summed = reduction in ("sum", "mean")
    if len(blocks) == 1:
        # this process's one member goes to MPI as it is; a sum is made +0.0-based on the
        # total, in place, rather than on a copy of the block
        partial = contiguous(blocks[0])
    else:
        partial = contiguous(collectives.all_reduce(blocks, reduction="sum" if summed
                                                    else reduction)[0])
    total = np.empty_like(partial)
    settle_then_wait(state, [comm.Iallreduce(partial, total, op=native_op(reduction))])
    total = native_total(total, reduction, len(members), len(blocks) == 1)
    return {m: total for m in local}


def native_op(reduction: str):
    """MPI's operation for a native all-reduce (a mean is a sum, divided afterwards)."""
    MPI = world().MPI
    return {"sum": MPI.SUM, "mean": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}[reduction]


def native_total(total, reduction: str, count: int, as_given: bool):
    """MPI's Allreduce result ``total`` as the reduction gives it: a sum of blocks MPI added
    as they were given (``as_given``) made +0.0-based, in place; a mean the sum over the
    group's ``count`` members."""
    if as_given and reduction in ("sum", "mean"):
        total = collectives.positive_zero_sum(total, in_place=True)
    if reduction == "mean":
        total = collectives.mean_of_sum(total, count, total.ndim).astype(
            coll.reduced_dtype(total.dtype, "mean"), copy=False)
    return total


def contiguous(value) -> np.ndarray:
    """``value`` as a C-contiguous array of its own shape (numpy's ascontiguousarray makes a
    0-d array 1-d)."""
    array = np.asarray(value)
    return array if array.flags.c_contiguous else np.ascontiguousarray(array)


def raw_bytes(array: np.ndarray) -> list:
    """The MPI message of a C-contiguous array's bytes (MPI has no type for bfloat16 and the
    other narrow floats: every buffer goes as bytes), read or written in place."""
    return [array, world().MPI.BYTE]


def across_ranks(state, members: list, ranks: tuple, waiting: dict,
                  native: bool) -> dict:
    """Complete one group's node whose members live on several ranks; outputs of the local
    members, by position."""
    me = world().rank
    local = [m for m in members if state.rank_of[m] == me]
    request = waiting[local[0]]
    prim, params = request.eqn.primitive, request.eqn.params
    if prim is coll.all_slice_node:
        # each member keeps a chunk of its own block: nothing crosses processes
        return {m: np.split(np.asarray(waiting[m].value), params["axis_size"],
                            params["slice_axis"])[members.index(m)] for m in local}
    comm = communicator(state, ranks)
    if native and prim is coll.all_reduce_node and natively_reducible(request):
        return native_all_reduce(state, comm, ranks, local, members, waiting,
                                  params["reduction"])
    exchange = EXCHANGES.get(prim, gather_then_apply)
    return exchange(state, comm, members, ranks, local, waiting)
