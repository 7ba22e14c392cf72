"""Stacked implementation rules: one numpy call per equation for the blocks of every device.

A body value is one array of shape ``lead + block``: ``lead`` has one dimension per mesh axis,
the axis' size where the value may vary over it, 1 where every device along it holds the same
block (read through broadcasting, never copied). A rule sees the equation's static types (the
``lead`` and block aval of each operand) and returns a ``Kernel``: a function of the stacked
operands and the ``lead`` of each result. Rules run once, when a body is compiled; kernels run
on every call.

Collectives act on the mesh dimensions (groups are the devices agreeing on every other axis,
members ranked over the listed axes, first listed major; SEMANTICS 2.0)::

    psum over 'y', lead (4,2):   x[4,2,...] -> sum over dim 1 in rank order -> [4,1,...]
    all_gather over 'y', tiled:  x[4,2,b,...] -> [4,1,2*b,...]    (a reshape; a view if it can)
    ppermute over 'y':           x[4,2,...] -> x indexed by source rank along dim 1

Reductions over a group add members one after the other in rank order, as the reference
does, so their float results are bitwise equal to the reference backend's; elementwise
primitives are too. Matmuls may differ in the last bits (BLAS blocks shapes its own way).
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import math
import os
from typing import Callable

import numpy as np

from ir import dtypes
from ir import primitives as prims
from ir import collectives as coll
from ir.primitives import RuleTable
from runtime import collectives, reference
from runtime.reference import impl_rules, matmul_operand, widened_to

stacked_rules = RuleTable("stacked implementation")


@dataclasses.dataclass
class Kernel:
    """What one equation runs: ``fn(*stacked operands)`` and each result's ``lead``.

    ``arg_shapes[i]`` (when not None) reshapes operand i first (aligning ranks for numpy
    broadcasting); ``ufunc`` marks a plain numpy ufunc that may write into a dead operand;
    ``multiple`` says ``fn`` returns a list; ``fresh`` that its results are new arrays, never
    views of its operands (a ufunc's are too); ``deferred`` that it returns a pending result,
    whose ``wait()`` gives the value: the body waits for it only where it is first read, so
    an exchange across processes overlaps the work after it."""
    fn: Callable
    out_leads: list
    arg_shapes: list | None = None
    ufunc: bool = False
    multiple: bool = False
    scalar_literals: bool = False    # literal operands are passed as 0-d arrays (elementwise)
    fresh: bool = False
    deferred: bool = False


@dataclasses.dataclass(slots=True)
class EqnTypes:
    """The static types of one equation inside a stacked body."""
    mesh_sizes: tuple        # size of each mesh axis, mesh order
    axis_names: tuple
    in_leads: list           # the lead of each operand
    in_avals: list           # the block aval of each operand
    out_avals: list
    params: dict
    literals: list           # each operand's value when it is a literal, else None

    @property
    def k(self) -> int:
        return len(self.mesh_sizes)

    def dims_of(self, axes) -> list:
        """The mesh dimensions of ``axes``, in the order listed."""
        return [self.axis_names.index(a) for a in axes]


def union_lead(leads) -> tuple:
    """The lead of a result computed from operands of these leads (numpy broadcasting)."""
    leads = list(leads)
    if not leads:
        return ()
    return tuple(max(sizes) for sizes in zip(*leads))


def _frozen(array):
    """A constant a kernel returns on every call: read-only, so no caller can change it."""
    array.flags.writeable = False
    return array


def _full_along(lead, dims, mesh_sizes) -> tuple:
    return tuple(mesh_sizes[d] if d in dims else n for d, n in enumerate(lead))


def broadcast_lead(x, lead):
    """``x`` viewed with ``lead`` (only size-1 dimensions grow; nothing is copied)."""
    shape = tuple(lead) + x.shape[len(lead):]
    return x if x.shape == shape else np.broadcast_to(x, shape)


# --- elementwise ------------------------------------------------------------------------------

def _probe_dtype(fn, types: EqnTypes):
    """The dtype the reference's rule gives (numpy's result, fixed up to the operands' type)."""
    key = (fn, tuple((a.dtype, lit is not None) for lit, a in zip(types.literals, types.in_avals)))
    found = _PROBED.get(key)
    if found is None:
        args = [np.zeros((), a.dtype) if lit is not None else np.zeros((1,), a.dtype)
                for lit, a in zip(types.literals, types.in_avals)]
        with np.errstate(all="ignore"):
            got = np.asarray(fn(*args)).dtype
        found = _PROBED[key] = (got, reference.elementwise_dtype(got, args))
    return found


_PROBED: dict = {}


def _elementwise_rule(fn, types: EqnTypes) -> Kernel:
    # A long body repeats the same few equations: their kernels are made once.
    key = (fn, tuple(map(tuple, types.in_leads)), tuple(types.in_avals),
           tuple([None if lit is None else _literal_key(lit) for lit in types.literals]))
    kernel = _ELEMENTWISE.get(key)
    if kernel is None:
        if len(_ELEMENTWISE) > 4096:
            _ELEMENTWISE.clear()
        kernel = _ELEMENTWISE[key] = _make_elementwise(fn, types)
    return kernel


_ELEMENTWISE: dict = {}


def _literal_key(value) -> tuple:
    value = np.asarray(value)
    return value.dtype, value.tobytes()


def _make_elementwise(fn, types: EqnTypes) -> Kernel:
    got, want = _probe_dtype(fn, types)
    rank = max(a.ndim for a in types.in_avals)
    lead = union_lead(l for l, lit in zip(types.in_leads, types.literals) if lit is None)
    shapes = []
    for a, l, lit in zip(types.in_avals, types.in_leads, types.literals):
        if lit is not None or a.ndim == rank:
            shapes.append(None)     # a literal is 0-d: it broadcasts from the right
        else:
            shapes.append(tuple(l) + (1,) * (rank - a.ndim) + a.shape)
    if not lead:
        with np.errstate(all="ignore"):     # literals only: fold once
            value = _frozen(np.asarray(fn(*types.literals)).astype(want).reshape((1,) * types.k))
        return Kernel(lambda *args: value, [(1,) * types.k])
    if got != want:
        def fixed(*args):
            return np.asarray(fn(*args)).astype(want)
        return Kernel(fixed, [lead], shapes, scalar_literals=True)
    return Kernel(fn, [lead], shapes, ufunc=isinstance(fn, np.ufunc), scalar_literals=True)


def _unary_impls() -> dict:
    # The reference's numpy functions act elementwise, so they act on stacked blocks as is.
    return dict(reference._UNARY_IMPLS)


def _binary_impls() -> dict:
    return dict(reference._BINARY_IMPLS)


for _p, _f in list(_unary_impls().items()) + list(_binary_impls().items()):
    stacked_rules[_p] = functools.partial(_elementwise_rule, _f)


_REFERENCE_DIV = _binary_impls()[prims.div_p]


def _divide_as_written(x, y):
    """A division as written (integers as lax divides them)."""
    if np.issubdtype(np.result_type(x, y), np.integer):
        return _REFERENCE_DIV(x, y)
    return np.divide(x, y)


def _div_rule(types: EqnTypes) -> Kernel:
    """A division whose divisor is broadcast from rank 0 into each block (XLA's reciprocal)
    as the reference divides it; any other, a per-device scalar's included, as written:
    stacked, a device's rank-0 block has a leading dimension that must not make its
    division look broadcast (it gave the reciprocal's bits, an ulp off the reference's)."""
    x, y = types.in_avals
    fn = _REFERENCE_DIV if y.ndim == 0 and x.ndim else _divide_as_written
    return _elementwise_rule(fn, types)


stacked_rules[prims.div_p] = _div_rule


def _convert_rule(types: EqnTypes) -> Kernel:
    new_dtype = types.params["new_dtype"]
    return Kernel(lambda x: reference.convert_element(x, new_dtype), [types.in_leads[0]])


def _select_n_rule(types: EqnTypes) -> Kernel:
    rank = max(a.ndim for a in types.in_avals)
    lead = union_lead(types.in_leads)
    shapes = [None if a.ndim == rank else tuple(l) + (1,) * (rank - a.ndim) + a.shape
              for a, l in zip(types.in_avals, types.in_leads)]

    def select(pred, *cases):
        if pred.dtype == np.bool_:
            return np.where(pred, cases[1] if len(cases) > 1 else cases[0], cases[0])
        return np.choose(pred, np.broadcast_arrays(*cases), mode="clip")
    return Kernel(select, [lead], shapes)


def _threefry2x32_rule(types: EqnTypes) -> Kernel:
    """Elementwise on the stacked blocks (rank-0 operands broadcast), two results."""
    rank = max(a.ndim for a in types.in_avals)
    lead = union_lead(l for l, lit in zip(types.in_leads, types.literals) if lit is None)
    shapes = [None if lit is not None or a.ndim == rank
              else tuple(l) + (1,) * (rank - a.ndim) + a.shape
              for a, l, lit in zip(types.in_avals, types.in_leads, types.literals)]
    if not lead:        # literals only: hash once
        values = [_frozen(v.reshape((1,) * types.k)) for v in
                  reference.threefry2x32(*types.literals)]
        return Kernel(lambda *args: values, [(1,) * types.k] * 2, multiple=True)
    return Kernel(reference.threefry2x32, [lead, lead], shapes, multiple=True,
                  scalar_literals=True, fresh=True)


stacked_rules[prims.convert_element_type_p] = _convert_rule
stacked_rules[prims.threefry2x32_p] = _threefry2x32_rule
stacked_rules[prims.integer_pow_p] = lambda types: _elementwise_rule(
    reference.integer_pow_kernel(types.params["y"]), types)
stacked_rules[prims.reduce_precision_p] = lambda types: _elementwise_rule(
    reference.special.reduce_precision_kernel(**types.params), types)
stacked_rules[prims.select_n_p] = _select_n_rule


# --- shapes -----------------------------------------------------------------------------------

def _same_lead(types: EqnTypes, fn) -> Kernel:
    return Kernel(fn, [types.in_leads[0]])


def _broadcast_in_dim_rule(types: EqnTypes) -> Kernel:
    (a,), (lead,) = types.in_avals, types.in_leads
    shape, dims = types.params["shape"], types.params["broadcast_dimensions"]
    expanded = [1] * len(shape)
    for d, od in zip(a.shape, dims):
        expanded[od] = d
    expanded = tuple(lead) + tuple(expanded)
    target = tuple(lead) + tuple(shape)
    return _same_lead(types, lambda x: np.broadcast_to(x.reshape(expanded), target))


def _reshape_rule(types: EqnTypes) -> Kernel:
    shape = tuple(types.in_leads[0]) + tuple(types.params["new_sizes"])
    return _same_lead(types, lambda x: x.reshape(shape))


def _shifted(types: EqnTypes, dims) -> tuple:
    return tuple(types.k + d for d in dims)


def _transpose_rule(types: EqnTypes) -> Kernel:
    perm = tuple(range(types.k)) + _shifted(types, types.params["permutation"])
    return _same_lead(types, lambda x: x.transpose(perm))


def _squeeze_rule(types: EqnTypes) -> Kernel:
    dims = _shifted(types, types.params["dimensions"])
    return _same_lead(types, lambda x: np.squeeze(x, dims))


def _rev_rule(types: EqnTypes) -> Kernel:
    dims = _shifted(types, types.params["dimensions"])
    return _same_lead(types, lambda x: np.flip(x, dims))


def _slice_rule(types: EqnTypes) -> Kernel:
    p = types.params
    strides = p["strides"] or (1,) * len(p["start_indices"])
    index = (slice(None),) * types.k + tuple(
        slice(lo, hi, st) for lo, hi, st in zip(p["start_indices"], p["limit_indices"], strides))
    return _same_lead(types, lambda x: x[index])


def _concatenate_rule(types: EqnTypes) -> Kernel:
    lead = union_lead(types.in_leads)
    axis = types.k + types.params["dimension"]
    targets = [tuple(lead) + a.shape for a in types.in_avals]

    def concatenate(*xs):
        return np.concatenate([x if x.shape == t else np.broadcast_to(x, t)
                               for x, t in zip(xs, targets)], axis)
    return Kernel(concatenate, [lead])


def _iota_rule(types: EqnTypes) -> Kernel:
    (value,) = impl_rules[prims.iota_p](**types.params)
    value = _frozen(value.reshape((1,) * types.k + value.shape))
    return Kernel(lambda: value, [(1,) * types.k])


def _pad_rule(types: EqnTypes) -> Kernel:
    if any(n != 1 for n in types.in_leads[1]):
        return per_device_rule(prims.pad_p, types)      # a padding value per device
    config = ((0, 0, 0),) * types.k + tuple(types.params["padding_config"])

    def pad(x, value):
        return reference._pad(x, value.reshape(()), padding_config=config)[0]
    return Kernel(pad, [types.in_leads[0]])


stacked_rules[prims.broadcast_in_dim_p] = _broadcast_in_dim_rule
stacked_rules[prims.reshape_p] = _reshape_rule
stacked_rules[prims.transpose_p] = _transpose_rule
stacked_rules[prims.squeeze_p] = _squeeze_rule
stacked_rules[prims.rev_p] = _rev_rule
stacked_rules[prims.slice_p] = _slice_rule
stacked_rules[prims.concatenate_p] = _concatenate_rule
stacked_rules[prims.iota_p] = _iota_rule
stacked_rules[prims.pad_p] = _pad_rule
stacked_rules[prims.sharding_constraint_p] = lambda types: _same_lead(types, lambda x: x)
stacked_rules[prims.device_put_p] = lambda types: _same_lead(types, lambda x: x)
stacked_rules[prims.stop_gradient_p] = lambda types: _same_lead(types, lambda x: x)
stacked_rules[prims.copy_p] = lambda types: _same_lead(types, lambda x: np.array(x, copy=True))
stacked_rules[prims.shard_alike_p] = lambda types: Kernel(lambda x, y: [x, y],
                                                          list(types.in_leads), multiple=True)


def _invariant(types: EqnTypes, operands) -> bool:
    """Whether the operands at these positions are the same on every device."""
    return all(all(n == 1 for n in types.in_leads[i]) for i in operands)


def _dynamic_slice_rule(types: EqnTypes) -> Kernel:
    n = len(types.in_avals)
    if not _invariant(types, range(1, n)):
        return per_device_rule(prims.dynamic_slice_p, types)
    k, sizes = types.k, types.params["slice_sizes"]
    shape = types.in_avals[0].shape

    def dynamic_slice(x, *starts):
        index = [slice(None)] * k
        for d, (s, size) in enumerate(zip(starts, sizes)):
            s = int(np.clip(int(s.reshape(())), 0, shape[d] - size))
            index.append(slice(s, s + size))
        return x[tuple(index)]
    return Kernel(dynamic_slice, [types.in_leads[0]])


def _dynamic_update_slice_rule(types: EqnTypes) -> Kernel:
    n = len(types.in_avals)
    if not _invariant(types, range(2, n)):
        return per_device_rule(prims.dynamic_update_slice_p, types)
    k = types.k
    lead = union_lead(types.in_leads[:2])
    shape, update_shape = types.in_avals[0].shape, types.in_avals[1].shape

    def dynamic_update_slice(x, update, *starts):
        out = np.array(broadcast_lead(x, lead), copy=True)
        index = [slice(None)] * k
        for d, s in enumerate(starts):
            s = int(np.clip(int(s.reshape(())), 0, shape[d] - update_shape[d]))
            index.append(slice(s, s + update_shape[d]))
        out[tuple(index)] = update
        return out
    return Kernel(dynamic_update_slice, [lead])


def _gather_rule(types: EqnTypes) -> Kernel:
    if not _invariant(types, [1]):
        return per_device_rule(prims.gather_p, types)
    k, axis = types.k, types.params["axis"]

    def gather(x, indices):
        return reference._gather(x, indices.reshape(indices.shape[k:]), axis=k + axis)[0]
    return Kernel(gather, [types.in_leads[0]])


stacked_rules[prims.dynamic_slice_p] = _dynamic_slice_rule
stacked_rules[prims.dynamic_update_slice_p] = _dynamic_update_slice_rule
stacked_rules[prims.gather_p] = _gather_rule


# --- reductions and contractions --------------------------------------------------------------

def _reduction_rule(fn, types: EqnTypes) -> Kernel:
    axes = _shifted(types, types.params["axes"])
    dtype = types.in_avals[0].dtype
    if reference.adds_in_memory_order(fn, dtype):
        return _same_lead(types, lambda x: np.asarray(
            fn(np.ascontiguousarray(x), axis=axes)).astype(dtype, copy=False))
    return _same_lead(types, lambda x: np.asarray(fn(x, axis=axes)).astype(dtype, copy=False))


for _p, _f in ((prims.reduce_sum_p, np.sum), (prims.reduce_max_p, np.max),
               (prims.reduce_min_p, np.min), (prims.reduce_prod_p, np.prod),
               (prims.reduce_and_p, reference.reduce_and),
               (prims.reduce_or_p, reference.reduce_or)):
    stacked_rules[_p] = functools.partial(_reduction_rule, _f)


def _arg_reduction_rule(fn, types: EqnTypes) -> Kernel:
    (axis,) = types.params["axes"]
    axis, index_dtype = types.k + axis, types.params["index_dtype"]
    return _same_lead(types, lambda x: np.asarray(fn(x, axis=axis)).astype(index_dtype))


stacked_rules[prims.argmax_p] = functools.partial(_arg_reduction_rule, np.argmax)
stacked_rules[prims.argmin_p] = functools.partial(_arg_reduction_rule, np.argmin)


# the transform acts on the last dimensions: stacked devices lead, and are batch to it
stacked_rules[prims.fft_p] = lambda types: _same_lead(
    types, reference.fft_kernel(**types.params))


def _cumulative_rule(ufunc, types: EqnTypes) -> Kernel:
    axis = types.k + types.params["axis"]
    reverse = types.params["reverse"]
    return _same_lead(types, lambda x: reference.cumulative(ufunc, x, axis, reverse))


for _p, _f in reference._CUMULATIVE_UFUNCS.items():
    stacked_rules[_p] = functools.partial(_cumulative_rule, _f)


def _sort_rule(types: EqnTypes) -> Kernel:
    """Every device's blocks sorted along the sort axis at once (the lead broadcast first)."""
    lead = union_lead(types.in_leads)
    axis = types.k + types.params["dimension"]
    num_keys = types.params["num_keys"]
    targets = [tuple(lead) + a.shape for a in types.in_avals]

    def sort(*xs):
        xs = [np.broadcast_to(x, t) for x, t in zip(xs, targets)]
        return reference.sort_along(xs, axis, num_keys)
    return Kernel(sort, [lead] * len(types.out_avals), multiple=True)


def _searchsorted_rule(types: EqnTypes) -> Kernel:
    if not _invariant(types, [0]):
        return per_device_rule(prims.searchsorted_p, types)   # a sorted array per device
    side = types.params["side"]

    def searchsorted(sorted_values, query):
        flat = sorted_values.reshape(sorted_values.shape[types.k:])
        return reference._searchsorted(flat, query, side=side)[0]
    return Kernel(searchsorted, [types.in_leads[1]])


stacked_rules[prims.sort_p] = _sort_rule
stacked_rules[prims.searchsorted_p] = _searchsorted_rule


def dot_general_kernel(types: EqnTypes, merge_rows: bool = True) -> Kernel:
    """Mesh dimensions become leading batch dimensions of one broadcasting ``matmul``.
    ``merge_rows``: where the right operand is the same on every device, the devices' rows
    are stacked into one taller matmul (one BLAS call); without it each device's result has
    the reference's bits however many devices are stacked."""
    (lc, rc), (lb, rb) = types.params["dimension_numbers"]
    dtype = types.params.get("preferred_element_type") or types.in_avals[0].dtype
    wide = widened_to(types.in_avals[0].dtype, dtype)
    x, y = types.in_avals
    x_lead, y_lead = types.in_leads
    k = types.k
    lfree = [d for d in range(x.ndim) if d not in lc and d not in lb]
    rfree = [d for d in range(y.ndim) if d not in rc and d not in rb]
    x_perm = tuple(range(k)) + _shifted(types, list(lb) + lfree + list(lc))
    y_perm = tuple(range(k)) + _shifted(types, list(rb) + list(rc) + rfree)
    batch = tuple(x.shape[d] for d in lb)
    m = math.prod(x.shape[d] for d in lfree)
    n = math.prod(y.shape[d] for d in rfree)
    contracted = math.prod(x.shape[d] for d in lc)
    x_shape = tuple(x_lead) + batch + (m, contracted)
    y_shape = tuple(y_lead) + batch + (contracted, n)
    lead = union_lead([x_lead, y_lead])
    out_shape = (lead + batch + tuple(x.shape[d] for d in lfree)
                 + tuple(y.shape[d] for d in rfree))

    if merge_rows and not batch and all(n == 1 for n in y_lead):
        # The same right operand on every device: one matmul with the devices' rows stacked
        # (one BLAS call, not one per device). BLAS may block a taller matrix differently,
        # so floats agree with the reference to rounding, not always bit for bit.
        rows = (math.prod(x_lead) * m, contracted)
        right_perm = tuple(rc) + tuple(rfree)

        def dot_general(a, b):
            right = b.reshape(b.shape[k:]).transpose(right_perm).reshape(contracted, n)
            out = np.matmul(matmul_operand(a.transpose(x_perm).reshape(rows), wide),
                            matmul_operand(right, wide))
            return out.reshape(out_shape).astype(dtype, copy=False)
        return Kernel(dot_general, [lead], fresh=True)     # matmul makes a new array

    def dot_general(a, b):
        out = np.matmul(matmul_operand(a.transpose(x_perm).reshape(x_shape), wide),
                        matmul_operand(b.transpose(y_perm).reshape(y_shape), wide))
        return out.reshape(out_shape).astype(dtype, copy=False)
    return Kernel(dot_general, [lead], fresh=True)


stacked_rules[prims.dot_general_p] = dot_general_kernel


# --- anything else: one reference call per distinct block ---------------------------------------

# Why the stacked interpreter may run an equation once per device block (the reference's rule
# on each block): the only reasons it does. Each run is counted in ``per_device_runs``.
PER_DEVICE_REASONS = {
    "per_device_operands": "its operands hold per-device state that no broadcasting shares "
                           "(scattered indices, a matrix to factorise, a padding value or "
                           "start index that differs between devices)",
    "divergent_control": "a loop or branch without collectives that may go differently on "
                         "different devices",
    "node_without_stacked_rule": "a communication node with no stacked rule of its own runs "
                                 "its reference rule (runtime.collectives) group by group",
}
per_device_runs = {reason: 0 for reason in PER_DEVICE_REASONS}


def per_device_rule(prim, types: EqnTypes, reason: str = "per_device_operands") -> Kernel:
    """Run the reference's rule on each distinct device block and stack the results: correct
    for any primitive without collectives, at one call per device; only for one of the
    ``PER_DEVICE_REASONS``, each run counted."""
    assert reason in PER_DEVICE_REASONS, reason
    lead = union_lead(types.in_leads) or (1,) * types.k
    params = types.params
    out_shapes = [tuple(lead) + a.shape for a in types.out_avals]
    rule = impl_rules[prim]

    def per_device(*xs):
        per_device_runs[reason] += 1
        results = []
        for index in np.ndindex(*lead):
            blocks = [x[tuple(i if x.shape[d] != 1 else 0 for d, i in enumerate(index))]
                      for x in xs]
            results.append(rule(*blocks, **params))
        return [np.stack([np.asarray(r[j]) for r in results]).reshape(shape)
                for j, shape in enumerate(out_shapes)]
    return Kernel(per_device, [lead] * len(types.out_avals), multiple=True)


# --- collectives ------------------------------------------------------------------------------

def group_rule_kernel(prim, types: EqnTypes) -> Kernel:
    """A communication node with no stacked rule: its reference rule on the member blocks of
    each group, in rank order, the results stacked over the whole mesh. Correct for any node,
    at one call per group (counted as ``node_without_stacked_rule``)."""
    params = types.params
    dims = types.dims_of(params["mesh_axes"])
    sizes = types.mesh_sizes
    others = [d for d in range(types.k) if d not in dims]
    full = tuple(sizes)
    out_avals = types.out_avals
    rule = collectives.group_rules[prim]
    # per group, the mesh index of each member in rank order (the first listed axis major)
    groups = []
    for rest in np.ndindex(*[sizes[d] for d in others]):
        members = []
        for ranks in np.ndindex(*[sizes[d] for d in dims]):
            index = [0] * types.k
            for d, i in zip(others, rest):
                index[d] = i
            for d, i in zip(dims, ranks):
                index[d] = i
            members.append(tuple(index))
        groups.append(members)

    def by_group(*xs):
        per_device_runs["node_without_stacked_rule"] += 1
        xs = [broadcast_lead(x, full) for x in xs]
        outs = [np.empty(full + a.shape, a.dtype) for a in out_avals]
        for members in groups:
            results = rule([collectives.node_operands([x[m] for x in xs]) for m in members],
                           **params)
            for m, result in zip(members, results):
                outs[0][m] = result
        return outs
    return Kernel(by_group, [full] * len(out_avals), multiple=True)


class Members:
    """How to read a group's members from a stacked operand: broadcast to full size along
    the group dims, move them to the front in the order listed (a row-major walk over them is
    rank order). Computed once per equation."""

    def __init__(self, lead, dims, mesh_sizes, block_ndim: int):
        self.full = _full_along(lead, dims, mesh_sizes)
        self.count = len(dims)
        self.group = tuple(mesh_sizes[d] for d in dims)
        self.size = math.prod(self.group)
        k = len(lead)
        rest = [d for d in range(k) if d not in dims]
        self.perm = tuple(dims) + tuple(rest) + tuple(range(k, k + block_ndim))
        self.indices = list(np.ndindex(*self.group))
        self.block_ndim = block_ndim

    def __call__(self, x):
        if x.shape[:len(self.full)] != self.full:
            x = np.broadcast_to(x, self.full + x.shape[len(self.full):])
        return x.transpose(self.perm)


_COMBINE = {"sum": np.add, "max": np.maximum, "min": np.minimum}


def rank_order_reducer(how: Members, reduction: str, dtype):
    """``reduce(members)``: the group members (the leading ``how.count`` dims of
    ``members``) reduced in rank order, exactly as the reference's all_reduce does (bitwise
    for floats, a float sum accumulated from +0.0). The way is chosen once, from the dtype
    and the group."""
    indices = how.indices
    wide = collectives.accumulated_dtype(dtype, reduction)
    if wide != dtype and dtype != np.bool_:
        # bfloat16 adds in float32 (the caller rounds the result once)
        reduce_wide = rank_order_reducer(how, reduction, wide)
        return lambda members: reduce_wide(members.astype(wide))
    # a float sum starts from +0.0 (the reduction's initial value, or one in-place add)
    from_zero = reduction == "sum" and dtypes.is_inexact(dtype)
    if reduction == "mean" and dtypes.is_float(dtype) and how.size > 1:
        # the reference's mean: the rank-order sum, then one division by the group size
        total_of = rank_order_reducer(how, "sum", dtype)
        count = how.size

        def mean_in_order(members):
            return collectives.mean_of_sum(total_of(members), count, how.block_ndim)
        return mean_in_order
    if reduction == "mean" or dtype == np.bool_:
        return lambda members: collectives.all_reduce([members[i] for i in indices],
                                                     reduction=reduction,
                                                     block_ndim=how.block_ndim)[0]
    if how.size == 1:
        if from_zero:
            return lambda members: collectives.positive_zero_sum(members[indices[0]])
        return lambda members: members[indices[0]]
    fn = _COMBINE[reduction]
    if dtypes.is_int(dtype):
        # Integer sums, maxima and minima are exact in any order: one numpy reduction.
        flat = (how.size,)

        def reduce_exactly(members):
            return fn.reduce(members.reshape(flat + members.shape[how.count:]), axis=0,
                             dtype=dtype)
        return reduce_exactly
    first, second, rest = indices[0], indices[1], indices[2:]
    group_size, count = how.size, how.count
    initial = np.zeros((), dtype) if from_zero else None

    def reduce_in_order(members):
        if members.flags.c_contiguous:
            # One numpy reduction over the leading axis of a C-contiguous (members, m) array
            # with m >= 2 adds the rows one after the other, into each output element: rank
            # order, bitwise (a 1-column one would be summed pairwise; the tests hold it).
            flat = members.reshape(group_size, -1)
            if flat.shape[1] >= 2:
                return reduce_rows(fn, flat, initial).reshape(members.shape[count:])
        total = np.asarray(fn(members[first], members[second]))     # 0-d blocks give scalars
        for i in rest:
            fn(total, members[i], out=total)
        if from_zero:
            fn(total, initial, out=total)
        return total
    return reduce_in_order


# --- large reductions on every core ------------------------------------------------------------

PARALLEL_BYTES = 1 << 22     # a reduction reading this much is split across threads


_CORES = os.cpu_count() or 1


def threads() -> int:
    """How many threads large reductions use: SHARDC_THREADS, else every core."""
    text = (os.environ.get("SHARDC_THREADS") or "").strip()
    if not text:
        return _CORES
    if not (text.isascii() and text.isdigit() and int(text) > 0):
        raise ValueError(f"SHARDC_THREADS={text!r}: expected a positive number of threads")
    return int(text)


_POOL: dict = {}          # (process id, workers) -> the executor of that process


def _pool(workers: int) -> concurrent.futures.ThreadPoolExecutor:
    """The reduction threads of this process (a forked child makes its own: it has none of
    its parent's threads); a pool of another size is shut down."""
    key = (os.getpid(), workers)
    pool = _POOL.get(key)
    if pool is None:
        for old_key in list(_POOL):
            old = _POOL.pop(old_key)
            if old_key[0] == key[0]:
                old.shutdown(wait=False)
        pool = _POOL[key] = concurrent.futures.ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix="shardc-reduce")
    return pool


def reduce_rows(fn, flat: np.ndarray, initial=None) -> np.ndarray:
    """``fn.reduce(flat, axis=0)`` for a (members, m) array with m >= 2: the rows combined
    one after the other into each column (after ``initial``, when given). A large one is
    split into column ranges reduced on threads at once (numpy releases the GIL in its loops);
    each column still combines its rows in the same order, so the result is bitwise the same.
    The threads run under the caller's floating-point error settings (``np.errstate`` does
    not cross threads)."""
    start = {} if initial is None else {"initial": initial}
    if flat.nbytes < PARALLEL_BYTES:
        return fn.reduce(flat, axis=0, **start)
    workers = threads()
    m = flat.shape[1]
    if workers == 1 or m < 4 * workers:
        return fn.reduce(flat, axis=0, **start)
    out = np.empty(m, fn.reduce(flat[:, :2], axis=0).dtype)
    bounds = [m * w // workers for w in range(workers + 1)]
    errors = np.geterr()
    jobs = [_pool(workers).submit(_reduce_columns, fn, flat[:, lo:hi], out[lo:hi], errors,
                                  start)
            for lo, hi in zip(bounds[:-1], bounds[1:])]
    for job in jobs:
        job.result()
    return out


def _reduce_columns(fn, part, out, errors, start):
    with np.errstate(**errors):
        fn.reduce(part, axis=0, out=out, **start)


def _all_reduce_rule(types: EqnTypes) -> Kernel:
    reduction = types.params["reduction"]
    dims = types.dims_of(types.params["mesh_axes"])
    (lead,), (aval,) = types.in_leads, types.in_avals
    how = Members(lead, dims, types.mesh_sizes, aval.ndim)
    out_lead = tuple(1 if d in dims else n for d, n in enumerate(lead))
    out_shape = out_lead + aval.shape
    reduce = rank_order_reducer(how, reduction, aval.dtype)
    reduced_dtype = coll.reduced_dtype(aval.dtype, reduction)

    def all_reduce(x):
        return np.asarray(reduce(how(x))).astype(reduced_dtype, copy=False).reshape(out_shape)
    return Kernel(all_reduce, [out_lead])


stacked_rules[coll.all_reduce_node] = _all_reduce_rule


def _gather_order(types: EqnTypes, dims, before: int) -> tuple:
    """The permutation putting the group dims (listed order) before block dim ``before``,
    the other mesh dims first."""
    k = types.k
    rest = [d for d in range(k) if d not in dims]
    block = list(range(k, k + types.in_avals[0].ndim))
    return tuple(rest + block[:before] + list(dims) + block[before:])


def _all_gather_rule(types: EqnTypes) -> Kernel:
    """Members' blocks joined in rank order: the group dims move into the block.

        lead (4,2), over 'y', tiled axis 0:  [4,2,b0,b1] -> [4,1,2*b0,b1]
    """
    p = types.params
    dims = types.dims_of(p["mesh_axes"])
    (lead,) = types.in_leads
    sizes = types.mesh_sizes
    full = _full_along(lead, dims, sizes)
    out_lead = tuple(1 if d in dims else n for d, n in enumerate(lead))
    axis = p["gather_axis"]
    perm = _gather_order(types, dims, axis)
    out_shape = out_lead + types.out_avals[0].shape

    def all_gather(x):
        x = broadcast_lead(x, full)
        return x.transpose(perm).reshape(out_shape)
    return Kernel(all_gather, [out_lead])


stacked_rules[coll.all_gather_node] = _all_gather_rule


def _scatter_to_mesh(chunked, k: int, dims, at: int):
    """Move the group dims sitting at block position ``at`` (after the k mesh dims) onto the
    mesh dims ``dims`` (which have size 1): a transpose, nothing is copied."""
    perm = list(range(chunked.ndim))
    for j, d in enumerate(dims):
        src = k + at + j
        perm[d], perm[src] = perm[src], perm[d]
    return chunked.transpose(perm)


def _reduce_scatter_rule(types: EqnTypes) -> Kernel:
    """Reduce over the group, then member r keeps chunk r: the chunks become the group dims.

        lead (8,), tiled axis 0:  [8,n] -> sum -> [1,n] -> chunks [1,8,n/8] -> [8,n/8]
    """
    p = types.params
    dims = types.dims_of(p["mesh_axes"])
    (lead,), (aval,) = types.in_leads, types.in_avals
    sizes, k = types.mesh_sizes, types.k
    axis, tiled = p["scatter_axis"], p["tiled"]
    group = tuple(sizes[d] for d in dims)
    reduced_lead = tuple(1 if d in dims else n for d, n in enumerate(lead))
    chunk = (aval.shape[axis] // math.prod(group),) if tiled else ()
    split_shape = (reduced_lead + aval.shape[:axis] + group + chunk + aval.shape[axis + 1:])
    out_lead = _full_along(lead, dims, sizes)
    reduction = p["reduction"]
    how = Members(lead, dims, sizes, aval.ndim)
    reduce = rank_order_reducer(how, reduction, aval.dtype)
    reduced_dtype = coll.reduced_dtype(aval.dtype, reduction)

    def reduce_scatter(x):
        total = np.asarray(reduce(how(x))).astype(reduced_dtype, copy=False)
        out = _scatter_to_mesh(total.reshape(split_shape), k, dims, axis)
        return _drop_unit(out, k, axis, len(dims))
    return Kernel(reduce_scatter, [out_lead])


def _all_slice_rule(types: EqnTypes) -> Kernel:
    """Member r keeps chunk r of its block along ``slice_axis``: the chunks become the group
    dims (a view when the block is the same along them, as at an input's reshard).

        lead (1,), over 'x' of 4, axis 0:  [1,8,c] -> chunks [1,4,2,c] -> [4,2,c]
    """
    p = types.params
    dims = types.dims_of(p["mesh_axes"])
    (lead,), (aval,) = types.in_leads, types.in_avals
    sizes, k = types.mesh_sizes, types.k
    axis = p["slice_axis"]
    group = tuple(sizes[d] for d in dims)
    chunk = aval.shape[axis] // math.prod(group)
    out_lead = _full_along(lead, dims, sizes)
    if all(lead[d] == 1 for d in dims):
        split_shape = lead + aval.shape[:axis] + group + (chunk,) + aval.shape[axis + 1:]

        def all_slice(x):
            out = _scatter_to_mesh(x.reshape(split_shape), k, dims, axis)
            return _drop_unit(out, k, axis, len(dims))
        return Kernel(all_slice, [out_lead])
    out_shape = out_lead + types.out_avals[0].shape

    def all_slice_varying(x):
        # each member's own block differs: cut each member's chunk from its own block
        x = broadcast_lead(x, out_lead)
        out = np.empty(out_shape, x.dtype)
        for rank, digits in enumerate(np.ndindex(*group)):
            at = [slice(None)] * len(out_lead)
            for d, digit in zip(dims, digits):
                at[d] = slice(digit, digit + 1)
            cut = [slice(None)] * aval.ndim
            cut[axis] = slice(rank * chunk, (rank + 1) * chunk)
            out[tuple(at)] = x[tuple(at) + tuple(cut)]
        return out
    return Kernel(all_slice_varying, [out_lead])


def _drop_unit(x, k, at, count):
    """After ``_scatter_to_mesh`` the group dims left size-1 dims at block position ``at``
    (followed by the chunk when tiled; by the next block dim when not)."""
    shape = x.shape[:k + at] + x.shape[k + at + count:]
    return x.reshape(shape)


stacked_rules[coll.reduce_scatter_node] = _reduce_scatter_rule
stacked_rules[coll.all_slice_node] = _all_slice_rule


def _ppermute_rule(types: EqnTypes) -> Kernel:
    """Destination rank d takes the block of the source paired with it; others get zeros.
    The group dims are indexed by the source ranks (one gather)."""
    p = types.params
    dims = types.dims_of(p["mesh_axes"])
    (lead,), (aval,) = types.in_leads, types.in_avals
    sizes = types.mesh_sizes
    group = tuple(sizes[d] for d in dims)
    size = math.prod(group)
    source_of = dict((d, s) for s, d in p["perm"])
    sources = [source_of.get(r, 0) for r in range(size)]
    missing = [r for r in range(size) if r not in source_of]
    source_index = np.unravel_index(np.array(sources, dtype=np.intp), group)
    missing_index = np.unravel_index(np.array(missing, dtype=np.intp), group)
    full = _full_along(lead, dims, sizes)
    count = len(dims)
    how = Members(lead, dims, sizes, aval.ndim)

    def ppermute(x):
        flat = how(x)[source_index]                             # (size, ...): dest order
        if missing:
            flat[np.ravel_multi_index(missing_index, group)] = 0
        out = flat.reshape(group + flat.shape[1:])
        return np.moveaxis(out, range(count), dims)
    return Kernel(ppermute, [full])


stacked_rules[coll.ppermute_node] = _ppermute_rule


class Relabelled:
    """A ppermute result nothing but the outputs reads: each device's block is a view of its
    source's block (or the zeros), made when asked for; the stacked array only if needed."""
    __slots__ = ("source", "sources", "zeros", "gather", "_data")

    def __init__(self, source, sources, zeros, gather):
        self.source = source        # the operand, full size along the group dims
        self.sources = sources      # per mesh position: the index of its source block, or None
        self.zeros = zeros
        self.gather = gather
        self._data = None

    def blocks(self) -> list:
        source, zeros = self.source, self.zeros
        return [zeros if i is None else source[i] for i in self.sources]

    @property
    def data(self):
        if self._data is None:
            self._data = self.gather(self.source)
        return self._data


def relabelling_ppermute_rule(types: EqnTypes) -> Kernel:
    """ppermute as a relabelling of blocks (no data moves), for a result only output."""
    eager = _ppermute_rule(types)
    p = types.params
    dims = types.dims_of(p["mesh_axes"])
    (lead,), (aval,) = types.in_leads, types.in_avals
    sizes = types.mesh_sizes
    full = _full_along(lead, dims, sizes)
    group = tuple(sizes[d] for d in dims)
    source_of = dict((d, s) for s, d in p["perm"])
    sources = []
    for position in range(math.prod(sizes)):
        coords = list(np.unravel_index(position, sizes))
        rank = 0
        for d in dims:
            rank = rank * sizes[d] + coords[d]
        if rank not in source_of:
            sources.append(None)
            continue
        for d, digit in zip(dims, np.unravel_index(source_of[rank], group)):
            coords[d] = int(digit)
        sources.append(tuple(int(c) if n != 1 else 0 for c, n in zip(coords, full)))
    zeros = _frozen(np.zeros(aval.shape, aval.dtype))

    def relabel(x):
        return Relabelled(broadcast_lead(x, full), sources, zeros, eager.fn)
    return Kernel(relabel, [full])


def _all_to_all_rule(types: EqnTypes) -> Kernel:
    """Member d gets chunk d of every member's block, joined along ``concat_axis`` in rank
    order: the chunk dims become the group dims, and the group dims move into the block."""
    p = types.params
    dims = types.dims_of(p["mesh_axes"])
    (lead,), (aval,) = types.in_leads, types.in_avals
    sizes, k = types.mesh_sizes, types.k
    split, concat, tiled = p["split_axis"], p["concat_axis"], p["tiled"]
    group = tuple(sizes[d] for d in dims)
    count = len(dims)
    full = _full_along(lead, dims, sizes)
    chunk = (aval.shape[split] // math.prod(group),) if tiled else ()
    split_shape = full + aval.shape[:split] + group + chunk + aval.shape[split + 1:]
    # Labels of the split array's dims: ('m', d) mesh dim, ('c', j) chunk dim of member j,
    # ('b', d) block dim d (the split dim's remainder keeps label ('b', split) when tiled).
    labels = [("m", d) for d in range(k)]
    labels += [("b", d) for d in range(split)] + [("c", j) for j in range(count)]
    labels += [("b", split)] * bool(tiled) + [("b", d) for d in range(split + 1, aval.ndim)]
    out_block = [("b", d) for d in range(aval.ndim) if tiled or d != split]
    source = [("m", d) for d in dims]
    order = [("c", dims.index(d)) if d in dims else ("m", d) for d in range(k)]
    order += out_block[:concat] + source + out_block[concat:]
    perm = tuple(labels.index(label) for label in order)
    out_shape = full + types.out_avals[0].shape

    def all_to_all(x):
        x = broadcast_lead(x, full).reshape(split_shape)
        return x.transpose(perm).reshape(out_shape)
    return Kernel(all_to_all, [full])


stacked_rules[coll.all_to_all_node] = _all_to_all_rule


def _broadcast_rule(types: EqnTypes) -> Kernel:
    """Every member gets the block of rank ``root``: an index into the group dims (a view)."""
    p = types.params
    dims = types.dims_of(p["mesh_axes"])
    (lead,) = types.in_leads
    sizes = types.mesh_sizes
    group = tuple(sizes[d] for d in dims)
    digits = np.unravel_index(p["root"], group)
    index = [slice(None)] * len(lead)
    for d, digit in zip(dims, digits):
        index[d] = slice(int(digit), int(digit) + 1)
    index = tuple(index)
    out_lead = tuple(1 if d in dims else n for d, n in enumerate(lead))
    full = _full_along(lead, dims, sizes)

    def broadcast(x):
        return broadcast_lead(x, full)[index]
    return Kernel(broadcast, [out_lead])


stacked_rules[coll.broadcast_node] = _broadcast_rule


def process_index_kernel(types: EqnTypes, origin=None, mesh_sizes=None) -> Kernel:
    """Each device's rank over ``mesh_axes`` (row-major in the order listed). The stacked
    devices may be a box of a larger mesh: at ``origin`` of a mesh of ``mesh_sizes``."""
    dims = types.dims_of(types.params["mesh_axes"])
    sizes, k = types.mesh_sizes, types.k
    origin = origin or (0,) * k
    mesh_sizes = mesh_sizes or sizes
    lead = tuple(sizes[d] if d in dims else 1 for d in range(k))
    rank = np.zeros(lead, dtypes.int32)
    for d in dims:
        coord = np.arange(origin[d], origin[d] + sizes[d], dtype=dtypes.int32).reshape(
            tuple(sizes[d] if e == d else 1 for e in range(k)))
        rank = rank * mesh_sizes[d] + coord
    rank = _frozen(rank)
    return Kernel(lambda: rank, [lead])


stacked_rules[coll.process_index_node] = process_index_kernel


# Primitives with no stacked rule that run one reference call per device block: their
# operands are per-device state (scattered indices) no broadcasting shares.
# Matrix primitives (linalg) likewise: numpy factorises one matrix at a time anyway.
PER_DEVICE = (prims.scatter_p, prims.bitcast_convert_type_p) + prims.LINALG
