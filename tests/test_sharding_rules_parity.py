"""Explicit sharding ("sharding in types") where JAX 0.10.2 accepts a program that shardc once
refused: each case's values against numpy and its result type as JAX prints it
(``jax.typeof``), on every backend (fast, reference, and both compared).

- ``x.at[...].set/add``: the update is laid out as the operand splits the dimensions it
  covers whole (JAX broadcasts it to the indexed slice's sharding);
- FFTs keep the operand's split, the transformed dimensions too (gathered for the transform);
- ``lax.slice_in_dim`` is one ``slice``, eagerly too (not indexing's gather);
- ``jnp.isin`` and ``jnp.diag`` of a split vector compare and select, as JAX's, without a
  gather;
- ``lax.reduce_window`` whose padding would leave a split dimension indivisible;
- eager indexing of an array on one device takes the slice path (JAX's ``is_sharded``), and
  any index reads a dimension of size 1 whole.
"""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

import shardc
import shardc.numpy as jnp
from compiler.backend import get_backend, set_backend
from ir.sharding import ShardingTypeError
from runtime.vectorized import backend_named
from shardc import lax
from shardc.sharding import PartitionSpec as P

RNG = np.random.default_rng(0)
A = RNG.standard_normal((8, 8)).astype(np.float32)
B = RNG.standard_normal((4, 8, 16)).astype(np.float32)
V = np.arange(8.0, dtype=np.float32)
BACKENDS = ["fast", "reference", "check"]


@contextlib.contextmanager
def installed(name):
    previous = get_backend()
    set_backend(backend_named(name))
    try:
        yield
    finally:
        set_backend(previous)


def typed(name):
    """The program's operands on the (4, 2) mesh ('X', 'Y') of Explicit axes, by name."""
    placed = {"b": (A, P("X")), "c": (A, P(None, "Y")), "cX": (A, P(None, "X")),
              "bc": (A, P("X", "Y")), "v": (V, P("X")), "d": (B, P("Y", "X")),
              "e": (B, P(None, "Y", "X"))}
    value, spec = placed[name]
    return shardc.device_put(value, spec)


def _set(a, index, value):
    a = a.copy()
    a[index] = value
    return a


def _with(a, index, fn):
    a = a.copy()
    a[index] = fn(a[index])
    return a


def window_reduce(a, init, op, window, strides, pads, base=None):
    """numpy's loop over the windows of ``a`` dilated by ``base`` and padded by ``pads``."""
    if base is not None:
        dilated = np.full([(n - 1) * k + 1 for n, k in zip(a.shape, base)], init, a.dtype)
        dilated[tuple(slice(None, None, k) for k in base)] = a
        a = dilated
    a = np.pad(a, pads, constant_values=init)
    out = [(n - w) // s + 1 for n, w, s in zip(a.shape, window, strides)]
    result = np.empty(out, a.dtype)
    for at in np.ndindex(*out):
        block = a[tuple(slice(i * s, i * s + w) for i, s, w in zip(at, strides, window))]
        result[at] = op.reduce(block.ravel(), initial=init)
    return result


R = lax.reduce_window
# name: (program of the placed operands, numpy's value, JAX's result type)
CASES = {
    # 1. indexed updates
    "set_column": (lambda: typed("b").at[:, 2].set(0.0), _set(A, (slice(None), 2), 0),
                   "float32[8@X,8]"),
    "set_columns": (lambda: typed("b").at[:, 1:3].set(5.0), _set(A, (slice(None), slice(1, 3)), 5),
                    "float32[8@X,8]"),
    "set_column_jit": (lambda: shardc.jit(lambda b: b.at[:, 2].set(0.0))(typed("b")),
                       _set(A, (slice(None), 2), 0), "float32[8@X,8]"),
    "set_row_of_column_split": (lambda: typed("cX").at[0].set(0.0), _set(A, 0, 0),
                                "float32[8,8@X]"),
    "add_vector": (lambda: typed("b").at[:, 2].add(jnp.arange(8.0)),
                   _with(A, (slice(None), 2), lambda r: r + V), "float32[8@X,8]"),
    "set_split_vector_jit": (lambda: shardc.jit(lambda b, v: b.at[:, 3].set(v))(typed("b"),
                                                                               typed("v")),
                             _set(A, (slice(None), 3), V), "float32[8@X,8]"),
    "max_columns": (lambda: typed("b").at[:, 2:4].max(0.5),
                    _with(A, (slice(None), slice(2, 4)), lambda r: np.maximum(r, 0.5)),
                    "float32[8@X,8]"),
    "multiply_last_traced_index": (
        lambda: shardc.jit(lambda b, i: b.at[..., i].multiply(2.0))(typed("b"), -1),
        _with(A, (Ellipsis, -1), lambda r: r * 2), "float32[8@X,8]"),
    # 2. FFTs
    "fft": (lambda: jnp.fft.fft(typed("c")), np.fft.fft(A), "complex64[8,8@Y]"),
    "ifft": (lambda: jnp.fft.ifft(typed("c")), np.fft.ifft(A), "complex64[8,8@Y]"),
    "fft2": (lambda: jnp.fft.fft2(typed("c")), np.fft.fft2(A), "complex64[8,8@Y]"),
    "lax_fft": (lambda: lax.fft(typed("c").astype(jnp.complex64), "fft", (8,)), np.fft.fft(A),
                "complex64[8,8@Y]"),
    "fft_axis0": (lambda: jnp.fft.fft(typed("b"), axis=0), np.fft.fft(A, axis=0),
                  "complex64[8@X,8]"),
    "irfft": (lambda: jnp.fft.irfft(typed("c")), np.fft.irfft(A), "float32[8,14@Y]"),
    "fftn_3d": (lambda: jnp.fft.fftn(typed("d")), np.fft.fftn(B), "complex64[4@Y,8@X,16]"),
    "fft2_jit": (lambda: shardc.jit(jnp.fft.fft2)(typed("e")), np.fft.fft2(B),
                 "complex64[4,8@Y,16@X]"),
    # 3. slice_in_dim, eagerly
    "slice_in_dim": (lambda: lax.slice_in_dim(typed("v"), 0, 4), V[:4], "float32[4@X]"),
    "slice_in_dim_strided": (lambda: lax.slice_in_dim(typed("v"), 0, 8, 2), V[::2],
                             "float32[4@X]"),
    "slice_in_dim_negative": (lambda: lax.slice_in_dim(typed("v"), -4, None), V[-4:],
                              "float32[4@X]"),
    "slice_in_dim_unsplit_axis": (lambda: lax.slice_in_dim(typed("b"), 2, 6, axis=1),
                                  A[:, 2:6], "float32[8@X,4]"),
    "slice_in_dim_rows": (lambda: lax.slice_in_dim(typed("b"), 0, 8, 2, axis=0), A[::2],
                          "float32[4@X,8]"),
    "index_in_dim": (lambda: lax.index_in_dim(typed("b"), 3, axis=1, keepdims=False), A[:, 3],
                     "float32[8@X]"),
    # 4. isin and diag: no gather
    "isin": (lambda: jnp.isin(typed("v"), jnp.array([0.0])), np.isin(V, [0.0]), "bool[8@X]"),
    "isin_matrix": (lambda: jnp.isin(typed("b"), jnp.array(A[2, :3])), np.isin(A, A[2, :3]),
                    "bool[8@X,8]"),
    "isin_split_tests": (lambda: jnp.isin(jnp.arange(4.0), typed("v"), invert=True),
                         np.isin(np.arange(4.0), V, invert=True), "bool[4]"),
    "isin_jit": (lambda: shardc.jit(lambda v: jnp.isin(v, jnp.array([1.0, 2.0])))(typed("v")),
                 np.isin(V, [1.0, 2.0]), "bool[8@X]"),
    "diag": (lambda: jnp.diag(typed("v")), np.diag(V), "float32[8@X,8]"),
    "diag_jit": (lambda: shardc.jit(jnp.diag)(typed("v")), np.diag(V), "float32[8@X,8]"),
    # 5. reduce_window
    "pool_same": (lambda: R(typed("c"), 0.0, lax.add, (1, 2), (1, 1), "SAME"),
                  window_reduce(A, 0, np.add, (1, 2), (1, 1), ((0, 0), (0, 1))),
                  "float32[8,8@Y]"),
    "pool_same_3": (lambda: R(typed("c"), 0.0, lax.add, (1, 3), (1, 1), "SAME"),
                    window_reduce(A, 0, np.add, (1, 3), (1, 1), ((0, 0), (1, 1))),
                    "float32[8,8@Y]"),
    "pool_max_jit": (lambda: shardc.jit(lambda c: R(c, -jnp.inf, lax.max, (1, 2), (1, 1),
                                                    "SAME"))(typed("c")),
                     window_reduce(A, -np.inf, np.maximum, (1, 2), (1, 1), ((0, 0), (0, 1))),
                     "float32[8,8@Y]"),
    "pool_both_split": (lambda: R(typed("bc"), 0.0, lax.add, (3, 2), (1, 1), "SAME"),
                        window_reduce(A, 0, np.add, (3, 2), (1, 1), ((1, 1), (0, 1))),
                        "float32[8@X,8@Y]"),
    "pool_strided_valid": (lambda: R(typed("bc"), 0.0, lax.add, (2, 2), (2, 2), "VALID"),
                           window_reduce(A, 0, np.add, (2, 2), (2, 2), ((0, 0), (0, 0))),
                           "float32[4@X,4@Y]"),
    "pool_base_dilation": (lambda: R(typed("bc"), 0.0, lax.add, (1, 2), (1, 1),
                                     ((0, 0), (1, 1)), base_dilation=(1, 2)),
                           window_reduce(A, 0, np.add, (1, 2), (1, 1), ((0, 0), (1, 1)),
                                         base=(1, 2)), "float32[8@X,16@Y]"),
    "pool_4d": (lambda: R(typed("c")[None, :, :, None], 0.0, lax.add, (1, 2, 2, 1),
                          (1, 1, 1, 1), "SAME"),
                window_reduce(A[None, :, :, None], 0, np.add, (1, 2, 2, 1), (1, 1, 1, 1),
                              ((0, 0), (0, 1), (0, 1), (0, 0))), "float32[1,8,8@Y,1]"),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_types_are_jaxs(name, backend):
    program, expected, jax_type = CASES[name]
    with installed(backend), shardc.set_mesh(shardc.make_mesh((4, 2), ("X", "Y"))):
        result = program()
    assert str(shardc.typeof(result)) == jax_type
    np.testing.assert_allclose(np.asarray(result), expected, rtol=1e-4, atol=1e-4)


# --- 6. a dimension read whole: arrays on one device, dimensions of size 1 -----------------------

ONE_DEVICE = {
    "row": (lambda c: c[1], lambda a: a[1], "float32[8]"),
    "rows": (lambda c: c[1:2], lambda a: a[1:2], "float32[1@X,8]"),
    "strided": (lambda c: c[::2], lambda a: a[::2], "float32[2@X,8]"),
    "column": (lambda c: c[:, 2], lambda a: a[:, 2], "float32[3@X]"),
    "reversed_row": (lambda c: c[-1, ::-1], lambda a: a[-1, ::-1], "float32[8]"),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(ONE_DEVICE))
def test_eager_indexing_on_one_device_takes_the_slice_path(name, backend):
    program, reference, jax_type = ONE_DEVICE[name]
    a = np.arange(24.0, dtype=np.float32).reshape(3, 8)
    with installed(backend), shardc.set_mesh(shardc.make_mesh((1,), ("X",))):
        result = program(shardc.device_put(a, P("X", None)))
    assert str(shardc.typeof(result)) == jax_type
    np.testing.assert_array_equal(np.asarray(result), reference(a))


def test_any_index_reads_a_dimension_of_size_one_whole():
    a = np.arange(8.0, dtype=np.float32).reshape(1, 8)
    with shardc.set_mesh(shardc.make_mesh((8, 1), ("X", "Y"))):
        x = shardc.device_put(a, P("Y", "X"))
        cases = [(x[0], a[0], "float32[8@X]"),
                 (jnp.take(x, jnp.array([0, 0]), axis=0), a[[0, 0]], "float32[2,8@X]"),
                 (x[jnp.array([0])], a[[0]], "float32[1,8@X]"),
                 (x[0:1], a, "float32[1@Y,8@X]")]
        for result, expected, jax_type in cases:
            assert str(shardc.typeof(result)) == jax_type
            np.testing.assert_array_equal(np.asarray(result), expected)
        # JAX's still: a partial read of it, and a scatter into it
        with pytest.raises(ShardingTypeError, match=r"gather indexing .* "
                                                    r"operand=ShapedArray\(float32\[1@Y,8@X\]\)"):
            x[0, 2:]
        with pytest.raises(ShardingTypeError, match=r"for the scatter update"):
            x.at[0].set(1.0)


# --- what JAX still refuses ----------------------------------------------------------------------

def test_what_jax_refuses_is_refused_alike():
    with shardc.set_mesh(shardc.make_mesh((4, 2), ("X", "Y"))):
        with pytest.raises(ValueError, match=r"Sharding spec \('Y',\) implies that array axis 1 "
                                             r"is partitioned 2 times, but does not evenly "
                                             r"divide the dimension size 5"):
            jnp.fft.rfft(typed("c"))
        with pytest.raises(ShardingTypeError, match=r"reduce_window on sharded dims where out "
                                                    r"dim \(7\) is not divisible by mesh axes "
                                                    r"\(2\) with spec \(Y\)"):
            R(typed("c"), 0.0, lax.add, (1, 2), (1, 1), "VALID")
        with pytest.raises(ShardingTypeError, match=r"padding on sharded dims where out dim "
                                                    r"\(9\)"):
            jnp.diag(typed("v"), 1)
        with pytest.raises(ShardingTypeError, match=r"slicing on sharded dims where out dim "
                                                    r"\(1\)"):
            lax.index_in_dim(typed("v"), 0)
        # eager indexing of an array on several devices is a gather (JAX's), unlike the slice
        with pytest.raises(ShardingTypeError, match=r"gather indexing"):
            typed("v")[:4]
        assert str(shardc.typeof(shardc.jit(lambda v: v[:4])(typed("v")))) == "float32[4@X]"
        with pytest.raises(ShardingTypeError, match=r"for the scatter update"):
            typed("b").at[2].set(1.0)


def test_fft_gathers_only_the_transformed_dimensions():
    """The block rule keeps the untransformed dimensions split: the partitioner inserts an
    all_gather over Y (the transformed dimension's axis) for the transform, and gives the
    result its split back without moving data over X."""
    with shardc.set_mesh(shardc.make_mesh((4, 2), ("X", "Y"))):
        x = typed("bc").astype(jnp.complex64)
        ledger = shardc.comm_ledger(shardc.jit(lambda x: lax.fft(x, "fft", (8,))), x)
    assert [(r.operation, r.collective, r.mesh_axes) for r in ledger.inserted] == [
        ("fft", "all_gather", ("Y",))]
