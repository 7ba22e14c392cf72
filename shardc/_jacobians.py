"""``jacfwd``, ``jacrev`` and ``hessian``: Jacobians as vmaps of jvp and vjp over a basis.

For inputs ``x`` (leaves of shapes ``in_j``) and outputs ``y`` (leaves of shapes ``out_i``),
the Jacobian is a pytree shaped like ``y`` whose leaves are pytrees shaped like ``x``, with
leaf ``[i][j]`` of shape ``out_i + in_j``, as in JAX. ``jacfwd`` pushes one tangent per input
element (cheap for few inputs), ``jacrev`` pulls one cotangent per output element.
"""
from __future__ import annotations

import math

import numpy as np

from compiler import tree
from compiler.autodiff import jvp, vjp
from compiler.shard_map import wraps
from compiler.tracing import aval_of, check_callable, weakened_where, weakly_typed
from ir import dtypes
import shardc.numpy as jnp
from shardc.batching_api import vmap


_JACOBIAN_DOC = ("Jacobian of {fun} with respect to positional argument(s) {argnums}. Takes "
                 "the same arguments as {fun} but returns the jacobian of the output with "
                 "respect to the arguments at positions {argnums}.")


def _dynamic(args, argnums, kwargs):
    """(the differentiated arguments, a function of them calling ``fun`` with the others and
    ``kwargs`` as given, whether ``argnums`` is one number)."""
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    nums = tuple(k % len(args) for k in nums)

    def with_dynamic(fun, dyn):
        def call(*values):
            full = list(args)
            for k, v in zip(nums, values):
                full[k] = v
            return fun(*full, **kwargs)
        return call

    dyn = tuple(args[k] for k in nums)
    return dyn, with_dynamic, isinstance(argnums, int)


def _basis(leaves):
    """The standard basis over the concatenated leaves: one leaf per input, each with a leading
    dimension of the total size."""
    sizes = [math.prod(aval_of(x).shape) for x in leaves]
    total = sum(sizes)
    out, start = [], 0
    for x, size in zip(leaves, sizes):
        aval = aval_of(x)
        rows = np.zeros((total, size), aval.dtype)
        rows[np.arange(start, start + size), np.arange(size)] = 1
        out.append(rows.reshape((total,) + aval.shape))
        start += size
    return out, sizes


def _split_rows(stacked, sizes, shapes):
    """Rows of ``stacked`` (leading dim = total size) for each block of ``sizes``, reshaped."""
    parts, start = [], 0
    for size, shape in zip(sizes, shapes):
        parts.append(jnp.reshape(stacked[start:start + size], tuple(shape)
                                 + tuple(stacked.shape[1:])))
        start += size
    return parts


def _check_inexact(leaves, name):
    for x in leaves:
        if not dtypes.is_inexact(aval_of(x).dtype):          # bfloat16 included
            raise TypeError(f"{name} requires real- or complex-valued inputs (input dtype that "
                            f"is a sub-dtype of np.inexact), but got {aval_of(x).dtype.name}. "
                            "If you want to use Boolean- or integer-valued inputs, use vjp "
                            "or set allow_int to True.")


def _check_complex(name: str, which: str, dtype_names) -> None:
    """JAX's refusal of ``holomorphic=True`` with real (or integer) inputs or outputs."""
    for dtype_name in dtype_names:
        if not dtype_name.startswith("complex"):
            raise TypeError(f"{name} with holomorphic=True requires {which} with complex "
                            f"dtype, but got {dtype_name}.")


def _check_rev_inputs(leaves, holomorphic, allow_int):
    if holomorphic:
        _check_complex("jacrev", "inputs", [aval_of(x).dtype.name for x in leaves])
    if not allow_int:
        _check_inexact(leaves, "jacrev")


def _check_rev_outputs(leaves, holomorphic):
    """JAX's: real floating outputs (complex ones with ``holomorphic`` only): a complex
    output's imaginary part would otherwise be dropped quietly."""
    if holomorphic:
        _check_complex("jacrev", "outputs", [aval_of(y).dtype.name for y in leaves])
        return
    for y in leaves:
        dtype = aval_of(y).dtype
        if dtype.kind == "c":
            raise TypeError(f"jacrev requires real-valued outputs (output dtype that is a "
                            f"sub-dtype of np.floating), but got {dtype.name}. For holomorphic "
                            "differentiation, pass holomorphic=True. For differentiation of "
                            "non-holomorphic functions involving complex outputs, use jax.vjp "
                            "directly.")
        elif not dtypes.is_inexact(dtype):
            raise TypeError(f"jacrev requires real-valued outputs (output dtype that is a "
                            f"sub-dtype of np.floating), but got {dtype.name}. For "
                            "differentiation of functions with integer outputs, use jax.vjp "
                            "directly.")


def _check_fwd_inputs(leaves, holomorphic):
    if holomorphic:
        _check_complex("jacfwd", "inputs", [aval_of(x).dtype.name for x in leaves])
        return
    for x in leaves:
        dtype = aval_of(x).dtype
        if not dtypes.is_inexact(dtype) or dtype.kind == "c":
            raise TypeError("jacfwd requires real-valued inputs (input dtype that is a "
                            f"sub-dtype of np.floating), but got {dtype.name}. For holomorphic "
                            "differentiation, pass holomorphic=True. For differentiation of "
                            "non-holomorphic functions involving complex inputs or integer "
                            "inputs, use jax.jvp directly.")


def jacrev(fun, argnums=0, has_aux=False, holomorphic=False, allow_int=False):
    """The Jacobian of ``fun`` by reverse mode: one vjp per output element, vmapped."""
    check_callable(fun)

    @wraps(fun, _JACOBIAN_DOC, argnums=argnums)   # fun's signature, for static_argnames
    def jac(*args, **kwargs):
        dyn, with_dynamic, single = _dynamic(args, argnums, kwargs)
        in_leaves, in_tree = tree.tree_flatten(dyn)
        _check_rev_inputs(in_leaves, holomorphic, allow_int)
        target = with_dynamic(fun, dyn)
        if has_aux:
            out, pullback, aux = vjp(target, *dyn, has_aux=True)
        else:
            out, pullback = vjp(target, *dyn)
        out_leaves, out_tree = tree.tree_flatten(out)
        _check_rev_outputs(out_leaves, holomorphic)
        basis, sizes = _basis(out_leaves)
        cts = vmap(lambda *b: pullback(tree.tree_unflatten(out_tree, list(b))))(*basis)
        ct_leaves = tree.tree_leaves(cts)
        in_shapes = [aval_of(x).shape for x in in_leaves]
        per_out = []
        for k, (size, y) in enumerate(zip(sizes, out_leaves)):
            start = sum(sizes[:k])
            shape = aval_of(y).shape
            blocks = [_reshaped(ct[start:start + size], tuple(shape) + tuple(s), x)
                      for ct, s, x in zip(ct_leaves, in_shapes, in_leaves)]
            per_out.append(_in_structure(in_tree, blocks, single))
        result = tree.tree_unflatten(out_tree, per_out)
        return (result, aux) if has_aux else result

    return jac


def _reshaped(x, shape, primal):
    """``x`` reshaped; float0 zeros (an integer input's cotangents) become zeros of the
    input's dtype, as JAX's Jacobian has them."""
    if dtypes.is_float0(x):
        return jnp.zeros(shape, aval_of(primal).dtype)
    # weakly typed where the input is, as JAX's
    return weakened_where([jnp.reshape(x, shape)], [weakly_typed(primal)])[0]


def jacfwd(fun, argnums=0, has_aux=False, holomorphic=False):
    """The Jacobian of ``fun`` by forward mode: one jvp per input element, vmapped."""
    check_callable(fun)

    @wraps(fun, _JACOBIAN_DOC, argnums=argnums)   # fun's signature, for static_argnames
    def jac(*args, **kwargs):
        dyn, with_dynamic, single = _dynamic(args, argnums, kwargs)
        in_leaves, in_tree = tree.tree_flatten(dyn)
        _check_fwd_inputs(in_leaves, holomorphic)
        target = with_dynamic(fun, dyn)
        basis, sizes = _basis(in_leaves)

        def push(*tangent_leaves):
            tangents = tree.tree_unflatten(in_tree, list(tangent_leaves))
            result = jvp(target, dyn, tangents, has_aux=has_aux)
            return result if has_aux else (result[0], result[1], None)

        # the primal outputs are the same for every basis vector
        primal, tangents, aux = vmap(push, out_axes=(None, 0, 0))(*basis)
        if has_aux:
            aux = tree.tree_map(lambda a: a[0], aux)
        out_leaves, out_tree = tree.tree_flatten(tangents)
        primal_leaves = tree.tree_leaves(primal)
        if holomorphic:
            _check_complex("jacfwd", "outputs", ["int" if dtypes.is_float0(t) else
                                                 aval_of(t).dtype.name for t in out_leaves])
        in_shapes = [aval_of(x).shape for x in in_leaves]
        per_out = []
        for n, t in enumerate(out_leaves):
            if dtypes.is_float0(t):
                # an integer or boolean output: JAX's Jacobian is zeros of its dtype
                t = jnp.zeros(t.shape, aval_of(primal_leaves[n]).dtype)
            out_shape = tuple(t.shape[1:])
            blocks = []
            for k, (size, shape) in enumerate(zip(sizes, in_shapes)):
                start = sum(sizes[:k])
                rows = jnp.reshape(t[start:start + size], tuple(shape) + out_shape)
                n_in, n_out = len(shape), len(out_shape)
                order = tuple(range(n_in, n_in + n_out)) + tuple(range(n_in))
                blocks.append(jnp.transpose(rows, order))
            # weakly typed where the output is, as JAX's
            blocks = weakened_where(blocks, [weakly_typed(primal_leaves[n])] * len(blocks))
            per_out.append(_in_structure(in_tree, blocks, single))
        result = tree.tree_unflatten(out_tree, per_out)
        return (result, aux) if has_aux else result

    return jac


def _in_structure(in_tree, blocks, single):
    value = tree.tree_unflatten(in_tree, blocks)
    return value[0] if single else value


def hessian(fun, argnums=0, has_aux=False, holomorphic=False):
    """``jacfwd(jacrev(fun))``: leaf ``[i][j]`` has shape ``in_i + in_j`` for scalar output."""
    return jacfwd(jacrev(fun, argnums, has_aux=has_aux, holomorphic=holomorphic), argnums,
                  has_aux=has_aux, holomorphic=holomorphic)
