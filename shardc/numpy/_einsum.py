"""``einsum`` as a chain of pairwise ``dot_general``s, reductions and transposes."""
from __future__ import annotations

import operator
import string

import numpy as np

from compiler.tracing import aval_of
from ir import dtypes
from shardc.numpy._core import (as_array, astype, broadcast_to, check_out_sharding, constrain,
                                shape_of)
from shardc.numpy._diagonals import diagonal
from shardc.numpy._manipulation import transpose
from shardc.numpy._products import (accepts_out_sharding, preferred_dtype, preferring,
                                    promoted_dot_general)
from shardc.sharding import auto_axes, resolve_sharding
from shardc.numpy._reductions import any as any_true, sum
from shardc.dtypes import result_type

__all__ = ["einsum", "einsum_path"]


@accepts_out_sharding
def einsum(subscripts, *operands, out=None, optimize=None, precision=None,
           preferred_element_type=None, out_sharding=None):
    """Einstein summation over two operands at a time (``dot_general`` plus transposes);
    ``preferred_element_type``: the products accumulate in, and return, that dtype.

    >>> jnp.einsum("ij,jk->ik", a, b)      # a @ b
    """
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.einsum is not supported.")
    _check_path(optimize)
    wanted = preferred_dtype()      # (``accepts_out_sharding`` takes the keyword)
    if wanted is not None and wanted != np.bool_:
        # booleans count in the accumulation dtype asked for (JAX's), not as "any"
        operands = tuple(astype(x, wanted) if getattr(x, "dtype", None) == np.bool_ else x
                         for x in operands)
    if preferred_element_type is None:
        result = _einsum(subscripts, *operands)
    else:
        with preferring(preferred_element_type):
            result = _einsum(subscripts, *operands)
        result = astype(result, dtypes.canonicalize(preferred_element_type))
    if out_sharding is not None:
        result = constrain(result, resolve_sharding(out_sharding, "einsum(out_sharding=...)"))
    return result


def _check_path(optimize) -> None:
    """JAX's refusal of an explicit contraction path (``optimize=[(0, 1), ...]``, or
    ``einsum_path``'s list) with a step contracting three or more operands at once. shardc
    contracts two at a time in its own order, so any other ``optimize`` gives the same
    result."""
    if not isinstance(optimize, (list, tuple)):
        return
    steps = optimize[1:] if optimize and optimize[0] == "einsum_path" else optimize
    if any(len(step) > 2 for step in steps):
        raise NotImplementedError(
            "jax.numpy.einsum does not support simultaneous contraction of 3 or more "
            "operands. Typically this means you've passed an unsupported path to the einsum "
            "optimize parameter.")


_einsum_typed = einsum   # the chain as typed; the public einsum below wraps it


def einsum(subscripts, *operands, out_sharding=None, **kwargs):
    """Einstein summation over two operands at a time (``dot_general`` plus transposes);
    ``preferred_element_type``: the products accumulate in, and return, that dtype;
    ``out_sharding``: the result's layout. With more than two operands the intermediate
    products have no layout asked for, so, as JAX's does, the chain runs with the mesh's
    Explicit axes taken out of the types (``auto_axes``) and only the result is laid out.

    >>> jnp.einsum("ij,jk->ik", a, b)      # a @ b
    >>> jnp.einsum(a, [0, 1], b, [1, 2], [0, 2])    # the same, in numpy's interleaved form
    """
    if not isinstance(subscripts, str):
        subscripts, operands = _from_sublists((subscripts,) + operands)
    if out_sharding is not None and len(operands) > 2:
        check_out_sharding(out_sharding, "einsum")
        sharding = resolve_sharding(out_sharding, "einsum(out_sharding=...)")
        explicit = getattr(sharding.mesh, "explicit_axes", ())
        if explicit:
            return auto_axes(lambda *ops: _einsum_typed(subscripts, *ops, **kwargs),
                             axes=explicit, out_sharding=sharding)(*operands)
    return _einsum_typed(subscripts, *operands, out_sharding=out_sharding, **kwargs)


def _from_sublists(args: tuple) -> tuple:
    """numpy's interleaved form ``op0, sublist0, op1, sublist1, ..., [out_sublist]`` (axes
    named by integers, or ``...``) as a subscripts string and its operands."""
    def letters(sublist):
        return "".join("..." if axis is Ellipsis else _SUBSCRIPT_LETTERS[operator.index(axis)]
                       for axis in sublist)
    operands, sublists = args[0::2], args[1::2]
    subscripts = ",".join(letters(sublist) for sublist in sublists)
    if len(operands) > len(sublists):          # the last argument is the output's sublist
        *operands, output = operands
        subscripts += "->" + letters(output)
    return subscripts, tuple(operands)


_SUBSCRIPT_LETTERS = string.ascii_lowercase + string.ascii_uppercase


def _expand_ellipsis(subscripts: str, ranks: list) -> str:
    """``...`` replaced by letters no subscript uses: the broadcast dimensions, right-aligned
    across operands as numpy aligns them; an implicit output puts them first."""
    lhs, arrow, out = subscripts.partition("->")
    inputs = lhs.split(",")
    if len(inputs) != len(ranks):
        raise ValueError(f"einsum: {len(inputs)} operand subscripts for {len(ranks)} operands")
    counts = [rank - (len(spec) - 3) if "..." in spec else 0
              for spec, rank in zip(inputs, ranks)]
    if any(k < 0 for k in counts):
        raise ValueError(f"einsum: subscripts {subscripts!r} name more dimensions than an "
                         "operand has")
    width = max(counts, default=0)
    used = set(subscripts)
    spare = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
             if c not in used][:width]
    if len(spare) < width:
        raise ValueError("einsum: too many dimensions under '...'")
    expanded = [spec.replace("...", "".join(spare[width - k:])) for spec, k in
                zip(inputs, counts)]
    if arrow:
        out = out.replace("...", "".join(spare))
    else:
        letters = "".join(expanded)
        out = "".join(spare) + "".join(sorted(c for c in set(letters) - set(spare)
                                              if letters.count(c) == 1))
    return ",".join(expanded) + "->" + out


def _parse(subscripts: str, n: int):
    subscripts = subscripts.replace(" ", "")
    if "..." in subscripts:
        raise ValueError("einsum: '...' must be expanded first")
    if "->" in subscripts:
        lhs, out = subscripts.split("->")
    else:
        lhs = subscripts
        counts = {}
        for c in lhs.replace(",", ""):
            counts[c] = counts.get(c, 0) + 1
        out = "".join(sorted(c for c, k in counts.items() if k == 1))
    inputs = lhs.split(",")
    if len(inputs) != n:
        raise ValueError(f"einsum: {len(inputs)} operand subscripts for {n} operands")
    if len(set(out)) != len(out):
        raise ValueError(f"einsum: output subscript {out!r} repeats an index")
    unknown = set(out) - set("".join(inputs))
    if unknown:
        raise ValueError(f"einsum: output subscript {out!r} has indices {sorted(unknown)} that "
                         "no operand has")
    return inputs, out


def _take_diagonals(spec, x):
    """Reduce an operand whose subscripts repeat an index (``ii``) to its diagonal (taken,
    not masked and summed: an infinity off the diagonal stays out of it, and booleans stay
    booleans)."""
    while len(set(spec)) != len(spec):
        c = next(c for c in spec if spec.count(c) > 1)
        i = spec.index(c)
        j = spec.index(c, i + 1)
        shape = aval_of(x).shape
        if shape[i] != shape[j]:
            raise ValueError(f"einsum: index {c!r} has sizes {shape[i]} and {shape[j]} in "
                             f"one operand of shape {shape}")
        x = diagonal(x, 0, i, j)            # the diagonal becomes the last dimension
        spec = spec[:i] + spec[i + 1:j] + spec[j + 1:] + c
    return spec, x


def _einsum(subscripts: str, *operands):
    """Einstein summation; see ``shardc.numpy.einsum``."""
    operands = [as_array(x) for x in operands]      # numpy arrays too (as JAX's arrays)
    # one dtype for all, as JAX's promote_dtypes: a boolean beside numbers sums as a number
    common = result_type(*operands)
    operands = [x if aval_of(x).dtype == common else astype(x, common) for x in operands]
    subscripts = subscripts.replace(" ", "")
    if "..." in subscripts:
        subscripts = _expand_ellipsis(subscripts, [aval_of(x).ndim for x in operands])
    inputs, out = _parse(subscripts, len(operands))
    sizes: dict = {}
    for k, (spec, x) in enumerate(zip(inputs, operands)):
        shape = aval_of(x).shape
        if len(spec) != len(shape):
            raise ValueError(f"einsum: subscripts {spec!r} do not match an operand of rank "
                             f"{len(shape)}")
        for label, size in zip(spec, shape):
            seen = sizes.setdefault(label, size)
            if seen == 1:
                sizes[label] = size
            elif size not in (1, seen):
                # JAX's (opt_einsum's) words, which give the earlier size first
                raise ValueError(f"Size of label '{label}' for operand {k} ({seen}) does not "
                                 f"match previous terms ({size}).")
    specs, values = [], []
    for spec, x in zip(inputs, operands):
        # an index of size 1 here and larger elsewhere broadcasts, as numpy's
        full = tuple(sizes[c] for c in spec)
        if full != aval_of(x).shape and len(set(spec)) == len(spec):
            x = broadcast_to(x, full)
        spec, x = _take_diagonals(spec, x)
        specs.append(spec)
        values.append(x)
    while len(values) > 1:
        rest = set("".join(specs[2:])) | set(out)
        spec, value = _pair(specs[0], values[0], specs[1], values[1], rest,
                            out if len(values) == 2 else None)
        specs = [spec] + specs[2:]
        values = [value] + values[2:]
    spec, value = specs[0], values[0]
    value = _sum_out(spec, value, set(out))
    spec = "".join(c for c in spec if c in out)
    return transpose(value, [spec.index(c) for c in out]) if spec != out else value


def _sum_out(spec, value, keep):
    axes = tuple(k for k, c in enumerate(spec) if c not in keep)
    if not axes:
        return value
    # booleans sum as numpy's einsum sums them: any is true (and stay booleans)
    return (any_true(value, axis=axes) if aval_of(value).dtype == np.bool_
            else sum(value, axis=axes))


def _pair(sa, a, sb, b, keep, out=None):
    """Contract two operands, as JAX's einsum pairs them: batch dimensions in the order of
    the result (``out``, for the last pair; else sorted), then the free dimensions of ``a``
    and ``b``, where that is the result's order; else ``dot_general(b, a)``, whose batch
    dimensions take ``b``'s sharding, as JAX's (its contraction path puts the second operand
    first). Returns the result's subscripts and value."""
    a = _sum_out(sa, a, keep | set(sb))
    sa = "".join(c for c in sa if c in keep or c in sb)
    b = _sum_out(sb, b, keep | set(sa))
    sb = "".join(c for c in sb if c in keep or c in sa)
    shared = set(sa) & set(sb)
    order = out if out is not None else "".join(sorted((set(sa) | set(sb)) & keep))
    batch = [c for c in order if c in shared]
    contract = sorted(shared - set(batch))
    free_a = [c for c in sa if c not in shared]
    free_b = [c for c in sb if c not in shared]
    if "".join(batch + free_a + free_b) != order:
        sa, a, sb, b, free_a, free_b = sb, b, sa, a, free_b, free_a
    dims = ((tuple(sa.index(c) for c in contract), tuple(sb.index(c) for c in contract)),
            (tuple(sa.index(c) for c in batch), tuple(sb.index(c) for c in batch)))
    names = "".join(batch + free_a + free_b)
    # the last pair's dot takes an out_sharding given in the result's order (JAX's inverse)
    positions = None if out is None else tuple(out.index(c) for c in names)
    result = promoted_dot_general(a, b, dims[0], dims[1], result_positions=positions)
    return names, result


def einsum_path(subscripts, *operands, optimize="greedy"):
    """numpy's contraction order for ``einsum`` with operands of these shapes."""
    shapes = [np.zeros(shape_of(as_array(o)), np.float32) for o in operands]
    return np.einsum_path(subscripts, *shapes, optimize=optimize)
