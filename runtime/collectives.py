"""The communication nodes' implementations: what each does to the blocks of one device group,
given in rank order. The reference backend runs them as its devices meet at a node, the MPI
backend once a group's blocks are gathered, and the fast backend for a node without a stacked
rule of its own (``runtime.vectorized_rules``), so they define every backend's results.

Adding a communication node: its ``group_rules`` entry here (``rule(blocks, **params)``, one
result per member), declared in ``ir.collectives``; a stacked rule is an optional speed-up.
"""
from __future__ import annotations

import numpy as np

from ir import collectives as coll
from ir import dtypes
from ir.primitives import RuleTable

group_rules = RuleTable("collective implementation")


def node_operands(values: list):
    """What a device brings to a communication node: its operand, or the tuple of its
    operands for a node that takes several (``ragged_all_to_all``)."""
    return values[0] if len(values) == 1 else tuple(values)


def operand_types(value) -> tuple:
    """The (shape, dtype) of each operand a device brings to a node."""
    parts = value if type(value) is tuple else (value,)
    return tuple((np.shape(v), np.asarray(v).dtype) for v in parts)


def all_reduce(blocks, *, reduction, block_ndim=None, **params):
    """Every member gets the reduction of all members' blocks, reduced once in rank order.
    ``block_ndim``: a device's block's rank, where the blocks given are stacked over further
    devices (a mean divides as ``finish_reduction`` says).

        before: [a] [b] [c] [d]      after (sum): [a+b+c+d] x4
    """
    dtype = blocks[0].dtype
    blocks = counted(blocks, reduction)
    total = combine_in_order(blocks[1:], reduction, blocks[0])
    total = finish_reduction(total, reduction, len(blocks), fresh=len(blocks) > 1, dtype=dtype,
                             block_ndim=block_ndim)
    return [total] * len(blocks)


def in_order_reducer(dtype, reduction, shape: tuple):
    """``all_reduce``'s total, bound once for members of ``dtype`` and ``shape`` (a node's
    operand, reduced at every call): ``reduce(members) -> total``, the members stacked along a
    new first axis. Bitwise ``all_reduce(list(members))[0]``; a sum, max or min of same-typed
    members skips its per-call dtype decisions."""
    dtype = np.dtype(dtype)
    if (reduction not in ("sum", "max", "min") or not shape
            or accumulated_dtype(dtype, reduction) != dtype):
        return lambda members: all_reduce(list(members), reduction=reduction)[0]
    fn = _COMBINE[reduction]
    # a float sum as from +0.0 (``positive_zero_sum``): -0.0 members sum to +0.0
    zero = np.zeros((), dtype) if reduction == "sum" and dtypes.is_inexact(dtype) else None

    def reduce(members):
        if len(members) == 1:
            return all_reduce(list(members), reduction=reduction)[0]
        total = fn(members[0], members[1])
        for member in members[2:]:
            fn(total, member, out=total)
        if zero is not None:
            fn(total, zero, out=total)
        return total
    return reduce


def accumulated_dtype(dtype, reduction):
    """The dtype a reduction's members are combined in: booleans count as int32 (psum of
    bool is int32, pmean its mean), never a logical or; bfloat16 sums and means add in
    float32 and round once at the end, as XLA's CPU all-reduce does (float16 adds in
    float16, as it does there)."""
    if reduction in ("sum", "mean"):
        if dtype == np.bool_:
            return np.dtype(dtypes.int32)
        if dtype == dtypes.bfloat16:
            return np.dtype(np.float32)
    return dtype


def counted(blocks, reduction) -> list:
    """The blocks a reduction combines, in ``accumulated_dtype``."""
    wide = accumulated_dtype(blocks[0].dtype, reduction)
    if wide != blocks[0].dtype:
        return [np.asarray(b).astype(wide) for b in blocks]
    return list(blocks)


_COMBINE = {"sum": np.add, "mean": np.add, "max": np.maximum, "min": np.minimum}


def combine_in_order(blocks, reduction, total, owned: bool = False):
    """``total`` combined with each of ``blocks``, one after the other (the rank order of an
    all-reduce, whichever process holds which blocks). ``total`` itself is never changed,
    unless ``owned``: a new array of the caller's, combined into in place."""
    fn = _COMBINE[reduction]
    fresh = owned
    for block in blocks:
        if fresh and total.ndim:
            fn(total, block, out=total)
        elif total.ndim:
            # a new total, laid out as the blocks are (a transposed block is the transpose of
            # a contiguous one, and adding across layouts reads one side against its grain)
            out = np.empty_like(block, dtype=np.result_type(total, block))
            total, fresh = fn(total, block, out=out), True
        else:
            total, fresh = np.asarray(fn(total, block)), True
    return total


def finish_reduction(total, reduction, count: int, fresh: bool, from_zero: bool = False,
                     dtype=None, block_ndim=None):
    """The combined blocks of a group of ``count`` as the all-reduce gives them: a float sum
    as from +0.0, a mean divided once, in the reduction's dtype for members of ``dtype``
    (default: ``total``'s, where it was not accumulated wider). ``fresh``: ``total`` is a new
    array the caller owns; ``from_zero``: the sum was accumulated from +0.0 already
    (``starts_from_zero``); ``block_ndim``: a device's block's rank (default: ``total``'s)."""
    result_dtype = coll.reduced_dtype(total.dtype if dtype is None else dtype, reduction)
    if reduction in ("sum", "mean") and not from_zero:
        total = positive_zero_sum(total, in_place=fresh)
    if reduction == "mean":
        total = mean_of_sum(total, count, np.ndim(total) if block_ndim is None else block_ndim)
    return np.asarray(total).astype(result_dtype, copy=False)


def mean_of_sum(total, count: int, block_ndim: int):
    """A group's sum divided by its size, as JAX's pmean computes it: the sum (integers in
    the inexact dtype JAX gives them, float32 up to 32 bits) divided by ``count``, which XLA
    computes as a product with ``1 / count`` where a block of rank 1 or more is divided (a
    broadcast divisor, see ``dtypes.divides_by_reciprocal``)."""
    total = np.asarray(total)
    if not dtypes.is_inexact(total.dtype):
        total = total.astype(dtypes.to_inexact(total.dtype))
    dtype = total.dtype
    if block_ndim and dtypes.divides_by_reciprocal(dtype):
        return np.multiply(total, np.ones((), dtype) / dtype.type(count))
    return np.true_divide(total, dtype.type(count))


def starts_from_zero(dtype, reduction) -> bool:
    """Whether a reduction's first member may be added onto +0.0 rather than the total
    finished with one: a float sum or mean. The two agree bit for bit (round to nearest):
    the partial sums differ only where one is -0.0 and the other +0.0, and the last +0.0
    (or the first) makes that one +0.0 as well."""
    return reduction in ("sum", "mean") and dtypes.is_inexact(dtype)


def positive_zero_sum(total, in_place: bool = False):
    """A sum of members as JAX's all-reduce gives it: accumulated from +0.0, so -0.0 blocks
    sum to +0.0 (adding +0.0 changes no other value). ``in_place``: ``total`` is the caller's
    own new array, to be changed rather than copied."""
    total = np.asarray(total)
    if not dtypes.is_inexact(total.dtype):
        return total
    if in_place and total.ndim and total.flags.writeable:
        return np.add(total, np.zeros((), total.dtype), out=total)
    return np.asarray(np.add(total, np.zeros((), total.dtype)))


def _all_gather(blocks, *, gather_axis, tiled, **params):
    """Every member gets all blocks, concatenated (tiled) or stacked along ``gather_axis``.

        before: [a] [b] [c] [d]      after (tiled): [a b c d] x4
    """
    joined = np.concatenate(blocks, gather_axis) if tiled else np.stack(blocks, gather_axis)
    return [joined] * len(blocks)


def _all_slice(blocks, *, slice_axis, axis_size, **params):
    """Member r keeps chunk r of its own block along ``slice_axis``; no communication.

        before: [a b c d] x4         after: [a] [b] [c] [d]
    """
    return [np.split(block, axis_size, slice_axis)[rank] for rank, block in enumerate(blocks)]


def _reduce_scatter(blocks, *, scatter_axis, tiled, reduction, **params):
    """Sum every member's block, then member r keeps chunk r along ``scatter_axis``.

        before: [a0 a1 a2 a3] [b0 b1 b2 b3] ...    after (tiled): [a0+b0+..] [a1+b1+..] ...
    """
    total = all_reduce(blocks, reduction=reduction)[0]
    n = len(blocks)
    if tiled:
        return [np.ascontiguousarray(c) for c in np.split(total, n, scatter_axis)]
    return [np.take(total, r, axis=scatter_axis) for r in range(n)]


def _ppermute(blocks, *, perm, **params):
    """Member d gets the block of the source s paired with it; members no pair names get zeros.

        perm ((0,1),(1,2),(2,3),(3,0)):  [a] [b] [c] [d]  ->  [d] [a] [b] [c]
    """
    out = [np.zeros_like(blocks[0]) for _ in blocks]
    for source, dest in perm:
        out[dest] = blocks[source]
    return out


def _all_to_all(blocks, *, split_axis, concat_axis, tiled, **params):
    """Member d gets chunk d of every member's block, joined along ``concat_axis``.

        before: [a0 a1] [b0 b1]    after: [a0 b0] [a1 b1]
    """
    n = len(blocks)
    if tiled:
        chunks = [np.split(b, n, split_axis) for b in blocks]
        return [np.concatenate([chunks[s][d] for s in range(n)], concat_axis) for d in range(n)]
    return [np.stack([np.take(b, d, axis=split_axis) for b in blocks], concat_axis)
            for d in range(n)]


def _broadcast(blocks, *, root, **params):
    """Every member gets the block of the member at rank ``root``.

        root=2:  [a] [b] [c] [d]  ->  [c] [c] [c] [c]
    """
    return [blocks[root]] * len(blocks)


group_rules[coll.all_reduce_node] = all_reduce
group_rules[coll.broadcast_node] = _broadcast
group_rules[coll.reduce_scatter_node] = _reduce_scatter
group_rules[coll.ppermute_node] = _ppermute
group_rules[coll.all_to_all_node] = _all_to_all
group_rules[coll.all_gather_node] = _all_gather
group_rules[coll.all_slice_node] = _all_slice


def _ragged_all_to_all(blocks, **params):
    """Each member's blocks are ``(operand, output, input_offsets, send_sizes, output_offsets,
    recv_sizes)``. Slice i of member s, ``operand[input_offsets[i]:][:send_sizes[i]]``, goes to
    member ``i // (K / N)`` (K offsets, N members), written into its copy of ``output`` at
    ``output_offsets[i]`` (the sender's offset); rows nobody writes keep ``output``.

        N=2: s=0 sends [1] to 0 at 0, [2 2] to 1 at 0; s=1 sends [3] to 0 at 1, [4] to 1 at 2
             ->  member 0: [1 3 0 0], member 1: [2 2 4 0]
    """
    n = len(blocks)
    results = [np.array(member[1], copy=True) for member in blocks]
    for s, (operand, _, input_offsets, send_sizes, output_offsets, _) in enumerate(blocks):
        per = len(input_offsets) // n
        for i, (start, size, at) in enumerate(zip(np.asarray(input_offsets).tolist(),
                                                  np.asarray(send_sizes).tolist(),
                                                  np.asarray(output_offsets).tolist())):
            _check_slice(s, i, start, size, len(operand), "operand", "input_offsets")
            _check_slice(s, i, at, size, len(results[i // per]), "output", "output_offsets")
            if size > 0:
                results[i // per][at:at + size] = operand[start:start + size]
    return results


def _check_slice(member, i, start, size, rows, what, offsets):
    """Offsets and sizes are values: a slice outside the array is an error, not a silently
    shorter slice (XLA leaves it undefined)."""
    if size < 0 or start < 0 or start + size > rows:
        raise ValueError(
            f"ragged_all_to_all: slice {i} of member {member} covers rows {start} to "
            f"{start + size} ({offsets}[{i}]={start}, send_sizes[{i}]={size}), outside "
            f"the {what}'s {rows} rows")


group_rules[coll.ragged_all_to_all_node] = _ragged_all_to_all
