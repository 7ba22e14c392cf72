"""``lax.gather`` and the ``lax.scatter`` family with dimension numbers, held to an
element-by-element reference of XLA's semantics (the cases of JAX's lax tests, with indices
in and out of range, every mode), to finite differences, and run under jit and vmap. The same
cases ran under JAX 0.10.2 with equal results."""
import itertools

import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from shardc import lax

G, S = lax.GatherDimensionNumbers, lax.ScatterDimensionNumbers

GATHERS = [
    ((5,), [[0], [2], [7]], G((), (0,), (0,)), (1,)),
    ((10,), [[0], [0], [9]], G((1,), (), (0,)), (2,)),
    ((10, 5), [[0], [2], [1]], G((1,), (0,), (0,)), (1, 3)),
    ((10, 5), [[0, 2], [1, 0], [-3, 4]], G((1,), (0,), (0, 1)), (1, 3)),
    ((2, 5), [[[0], [2]], [[1], [1]]], G((), (1,), (1,), (0,), (0,)), (1, 1)),
    ((2, 3, 10), [[[0], [1]], [[2], [3]], [[4], [9]]], G((2,), (), (2,), (0, 1), (1, 0)),
     (1, 1, 3)),
    ((6, 7), [[[1, 2]], [[5, 6]], [[-1, 3]]], G((0, 3), (), (1, 0)), (2, 3)),
    ((4, 5, 6), [[3, 1], [0, 9]], G((1, 2), (1,), (1, 2)), (2, 1, 4)),
]


def _reference_gather(x, idx, dn, sizes, mode):
    """XLA's gather, one output element at a time."""
    batch_shape = idx.shape[:-1]
    kept = [d for d in range(x.ndim)
            if d not in dn.collapsed_slice_dims and d not in dn.operand_batching_dims]
    rank = len(batch_shape) + len(dn.offset_dims)
    batch_at = [p for p in range(rank) if p not in dn.offset_dims]
    shape = [0] * rank
    for p, n in zip(batch_at, batch_shape):
        shape[p] = n
    for p, d in zip(dn.offset_dims, kept):
        shape[p] = sizes[d]
    fill = np.nan
    out = np.empty(shape, x.dtype)
    for where in itertools.product(*map(range, shape)):
        b = tuple(where[p] for p in batch_at)
        start = [0] * x.ndim
        inside = True
        for k, d in enumerate(dn.start_index_map):
            s, hi = int(idx[b + (k,)]), x.shape[d] - sizes[d]
            inside &= 0 <= s <= hi
            start[d] = min(max(s, 0), hi)
        for d, bd in zip(dn.operand_batching_dims, dn.start_indices_batching_dims):
            start[d] = b[bd]
        for p, d in zip(dn.offset_dims, kept):
            start[d] += where[p]
        out[where] = x[tuple(start)] if inside or mode != "fill" else fill
    return out


@pytest.mark.parametrize("case", range(len(GATHERS)))
@pytest.mark.parametrize("mode", [None, "clip", "fill", "promise_in_bounds"])
def test_gather_equals_xlas_semantics(case, mode):
    shape, idx, dn, sizes = GATHERS[case]
    x = np.random.default_rng(case).standard_normal(shape).astype(np.float32)
    idx = np.array(idx, np.int32)
    want = _reference_gather(x, idx, dn, sizes, mode)
    for fn in (lax.gather, jax.jit(lax.gather, static_argnums=(2, 3),
                                   static_argnames=("mode",))):
        got = fn(x, idx, dn, sizes, mode=mode)
        np.testing.assert_array_equal(np.asarray(got), want)


def test_gather_fills_with_the_given_value_and_keeps_integer_types():
    x = np.arange(10, dtype=np.int32)
    idx = np.array([[1], [9], [12]], np.int32)
    got = lax.gather(x, idx, G((1,), (), (0,)), (2,), mode="fill")
    assert got.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(got), [[1, 2], [np.iinfo(np.int32).min] * 2,
                                                    [np.iinfo(np.int32).min] * 2])
    got = lax.gather(x, idx, G((1,), (), (0,)), (2,), mode="fill", fill_value=-1)
    np.testing.assert_array_equal(np.asarray(got), [[1, 2], [-1, -1], [-1, -1]])


def test_gather_gradient_is_a_scatter_add_of_the_cotangent():
    shape, idx, dn, sizes = GATHERS[3]
    x = np.random.default_rng(0).standard_normal(shape)
    idx = np.array(idx, np.int32)
    loss = lambda x: (lax.gather(x, idx, dn, sizes, mode="clip") ** 2).sum()
    got = np.asarray(jax.grad(loss)(x.astype(np.float32)))
    want = np.zeros_like(x)
    eps = 1e-3
    for i in np.ndindex(*shape):           # central differences, in float64
        d = np.zeros_like(x)
        d[i] = eps
        g = lambda v: (_reference_gather(v, idx, dn, sizes, "clip") ** 2).sum()
        want[i] = (g(x + d) - g(x - d)) / (2 * eps)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("case", range(len(GATHERS)))
@pytest.mark.parametrize("mode", [None, "clip", "fill", "promise_in_bounds"])
def test_gather_cotangent_skips_windows_out_of_range_unless_clipped(case, mode):
    """The transpose is XLA's scatter-add in the same mode: clip adds at the clamped window,
    the others skip a window not wholly in range (JAX's gradients)."""
    shape, idx, dn, sizes = GATHERS[case]
    idx = np.array(idx, np.int32)
    x = np.zeros(shape, np.float32)
    positions = np.arange(x.size, dtype=np.float32).reshape(shape)
    read = _reference_gather(positions, idx, dn, sizes, "clip").astype(np.int64)
    kept = _reference_gather(positions, idx, dn, sizes, "fill")
    ct = np.random.default_rng(case).standard_normal(read.shape).astype(np.float32)
    if mode != "clip":
        ct_kept, read = ct[~np.isnan(kept)], read[~np.isnan(kept)]
    else:
        ct_kept = ct
    want = np.zeros(x.size, np.float64)
    np.add.at(want, read.ravel(), ct_kept.ravel())
    got = jax.grad(lambda v: (lax.gather(v, idx, dn, sizes, mode=mode) * ct).sum())(x)
    np.testing.assert_allclose(np.asarray(got).ravel(), want, rtol=1e-6, atol=1e-6)


def test_gather_under_vmap():
    dn = G((), (0,), (0,))
    x = np.arange(10.0, dtype=np.float32).reshape(2, 5)
    idx = np.array([[[0], [2]], [[1], [4]]], np.int32)
    got = jax.vmap(lambda x, i: lax.gather(x, i, dn, (1,)))(x, idx)
    np.testing.assert_array_equal(np.asarray(got), [[0, 2], [6, 9]])


SCATTERS = [
    ((5,), [[0], [2], [2]], (3,), S((), (0,), (0,))),
    ((10,), [[0], [0], [9]], (3, 2), S((1,), (), (0,))),
    ((10, 5), [[0], [2], [9]], (3, 3), S((1,), (0,), (0,))),
    ((2, 5), [[[0], [2]], [[1], [1]]], (2, 2), S((), (1,), (1,), (0,), (0,))),
    ((2, 3, 10), [[[0], [1]], [[2], [3]], [[4], [9]]], (3, 2, 3), S((2,), (), (2,), (0, 1), (1, 0))),
    ((6, 7), [[1, 2], [5, 6], [-1, 3]], (3, 2, 3), S((1, 2), (), (0, 1))),
]

_COMBINE = {"add": np.add, "mul": np.multiply, "min": np.minimum, "max": np.maximum}


def _reference_scatter(x, idx, upd, dn, how, mode):
    """XLA's scatter, one update element at a time (a window not wholly in range dropped,
    or with ``clip`` moved into range)."""
    out = x.copy()
    windowed = [d for d in range(x.ndim)
                if d not in dn.inserted_window_dims and d not in dn.operand_batching_dims]
    sizes = [1] * x.ndim
    for d, u in zip(windowed, dn.update_window_dims):
        sizes[d] = upd.shape[u]
    batch_at = [p for p in range(upd.ndim) if p not in dn.update_window_dims]
    for where in np.ndindex(*upd.shape):
        b = tuple(where[p] for p in batch_at)
        start, inside = [0] * x.ndim, True
        for k, d in enumerate(dn.scatter_dims_to_operand_dims):
            s, hi = int(idx[b + (k,)]), x.shape[d] - sizes[d]
            inside &= 0 <= s <= hi
            start[d] = min(max(s, 0), hi) if mode == "clip" else s
        if not inside and mode != "clip":
            continue
        for d, bd in zip(dn.operand_batching_dims, dn.scatter_indices_batching_dims):
            start[d] = b[bd]
        for d, u in zip(windowed, dn.update_window_dims):
            start[d] += where[u]
        out[tuple(start)] = _COMBINE[how](out[tuple(start)], upd[where])
    return out


@pytest.mark.parametrize("case", range(len(SCATTERS)))
@pytest.mark.parametrize("how", sorted(_COMBINE))
@pytest.mark.parametrize("mode", [None, "clip", "promise_in_bounds"])
def test_scatters_equal_xlas_semantics(case, how, mode):
    shape, idx, ushape, dn = SCATTERS[case]
    rng = np.random.default_rng(case)
    x = rng.standard_normal(shape).astype(np.float32)
    upd = rng.standard_normal(ushape).astype(np.float32)
    idx = np.array(idx, np.int32)
    fn = {"add": lax.scatter_add, "mul": lax.scatter_mul, "min": lax.scatter_min,
          "max": lax.scatter_max}[how]
    got = fn(x, idx, upd, dn, mode=mode)
    np.testing.assert_allclose(np.asarray(got), _reference_scatter(x, idx, upd, dn, how, mode),
                               rtol=1e-6)
    if how == "add":
        np.testing.assert_allclose(np.asarray(lax.scatter_sub(x, idx, -upd, dn, mode=mode)),
                                   np.asarray(got), rtol=1e-6)


def test_scatter_replaces_and_its_gradients_are_the_reference():
    shape, idx, ushape, dn = SCATTERS[2]
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape).astype(np.float32)
    upd = rng.standard_normal(ushape).astype(np.float32)
    idx = np.array(idx, np.int32)
    got = np.asarray(lax.scatter(x, idx, upd, dn, mode="clip"))
    want = x.copy()
    want[0, :3], want[2, :3], want[9, :3] = upd        # rows 0, 2 and 9, columns 0 to 2
    np.testing.assert_array_equal(got, want)
    gx, gu = jax.grad(lambda x, u: (lax.scatter_add(x, idx, u, dn) ** 2).sum(),
                      argnums=(0, 1))(x, upd)
    y = _reference_scatter(x, idx, upd, dn, "add", None)
    np.testing.assert_allclose(np.asarray(gx), 2 * y, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(gu), 2 * y[[0, 2, 9], :3], rtol=1e-6)


def test_scatter_apply_applies_once_per_covering_window():
    x = np.linspace(0.1, 1.0, 10).astype(np.float32)
    idx = np.array([[0], [0], [8]], np.int32)          # element 0 and 1 covered twice
    got = lax.scatter_apply(x, idx, jnp.sin, S((1,), (), (0,)), update_shape=(3, 2))
    want = x.copy()
    want[:2] = np.sin(np.sin(want[:2]))
    want[8:] = np.sin(want[8:])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)


@pytest.mark.parametrize("call, message", [
    (lambda: lax.gather(np.ones(5), np.zeros((2, 2), np.int32), G((), (0,), (0,)), (1,)),
     "Gather op has 1 elements in start_index_map and the bound of dimension "
     "index_vector_dim=1 of indices is 2"),
    (lambda: lax.gather(np.ones((5, 3)), np.zeros((2, 1), np.int32), G((), (0,), (0,)), (1,)),
     "one slice size for every input dimension"),
    (lambda: lax.gather(np.ones(5), np.zeros((2, 1), np.int32), G((), (0,), (0,)), (2,)),
     "collapse slice dims with bound 1"),
    (lambda: lax.scatter_add(np.ones(5), np.zeros((2, 1), np.int32), np.ones((3,)),
                             S((), (0,), (0,))),
     "Bounds of the scatter dimensions of updates must be the same"),
])
def test_bad_dimension_numbers_are_type_errors_naming_what_is_wrong(call, message):
    with pytest.raises(TypeError, match=message):
        call()


def test_modes_parse_as_jaxs():
    assert lax.GatherScatterMode.from_any("clip") is lax.GatherScatterMode.CLIP
    assert lax.GatherScatterMode.from_any(None) is lax.GatherScatterMode.FILL_OR_DROP
    with pytest.raises(ValueError, match='Unknown gather mode "nope"'):
        lax.GatherScatterMode.from_any("nope")


def test_at_apply_applies_once_per_time_the_index_names_an_entry():
    x = jnp.arange(6.0)
    got = x.at[jnp.array([0, 0, 2, 7])].apply(lambda v: v * 2 + 1)
    np.testing.assert_array_equal(np.asarray(got), [3.0, 1.0, 5.0, 3.0, 4.0, 5.0])
    got = x.at[jnp.arange(6) % 2].apply(lambda v: v + 1)           # 0 and 1 three times each
    np.testing.assert_array_equal(np.asarray(got), [3.0, 4.0, 2.0, 3.0, 4.0, 5.0])
    grad = jax.grad(lambda x: x.at[1].apply(jnp.sin).sum())(x)
    np.testing.assert_allclose(np.asarray(grad), [1, np.cos(1.0), 1, 1, 1, 1], rtol=1e-6)


@pytest.mark.parametrize("call, message", [
    (lambda: lax.gather(np.ones((5, 3)), np.zeros((2, 1), np.int32), G((2,), (0,), (0,)),
                        (1, 3)), "Offset dimension 0 in gather op is out of bounds"),
    (lambda: lax.gather(np.ones((5, 3)), np.zeros((2, 1), np.int32), G((1, 0), (), (0,)),
                        (1, 3)), "offset_dims in gather op must be sorted"),
    (lambda: lax.gather(np.ones((5, 3)), np.zeros((2, 1), np.int32), G((1,), (0, 0), (0,)),
                        (1, 3)), "collapsed_slice_dims in gather op must not repeat"),
    (lambda: lax.gather(np.ones((5, 3)), np.zeros((2, 1), np.int32), G((1,), (), (0,)),
                        (1, 3)), "All components of the offset index in a gather op"),
    (lambda: lax.gather(np.ones((5, 3)), np.zeros((2, 1), np.int32), G((1,), (0,), (0,)),
                        (1, 4)), "Slice size at index 1 in gather op is out of range"),
    (lambda: lax.gather(np.ones(5), np.zeros((2, 1), np.float32), G((), (0,), (0,)), (1,)),
     "indices must have an integer type"),
    (lambda: lax.scatter_add(np.ones((5, 3)), np.zeros((2, 1), np.int32), np.ones((2, 3, 1)),
                             S((1,), (0,), (0,))), "Updates tensor must be of rank 2; got 3."),
    (lambda: lax.scatter_add(np.ones((5, 3)), np.zeros((2, 1), np.int32), np.ones((2, 3)),
                             S((1,), (0, 0), (0,))),
     "inserted_window_dims in scatter op must not repeat"),
    (lambda: lax.scatter_add(np.ones((5, 3)), np.zeros((2, 1), np.int32), np.ones((2, 4)),
                             S((1,), (0,), (0,))),
     "Bounds of the window dimensions of updates must not exceed"),
    (lambda: lax.scatter_add(np.ones((5, 3)), np.zeros((2, 1), np.int32), np.ones((2, 3)),
                             S((1,), (0,), (2,))),
     r"Invalid scatter_dims_to_operand_dims mapping; domain is \[0, 2\), got: 0->2."),
])
def test_gather_and_scatter_check_their_dimension_numbers_as_xla_does(call, message):
    """JAX's shape rules for gather and scatter (XLA's checks, in its order and words)."""
    with pytest.raises((TypeError, ValueError), match=message):
        call()


def test_scatter_mul_differentiates_in_the_updates_with_unique_indices():
    """JAX's rule (it needs unique_indices=True): d out / d updates is the operand at the
    window; a dropped window's updates get 0. Without the promise JAX raises."""
    dn = S(update_window_dims=(1,), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,))
    x = np.arange(1.0, 7.0, dtype=np.float32).reshape(3, 2)
    idx = np.array([[2], [0], [5]], np.int32)
    u = np.array([[2.0, 3.0], [4.0, 5.0], [6.0, 7.0]], np.float32)
    w = np.arange(6.0, dtype=np.float32).reshape(3, 2)
    loss = lambda x, u: (lax.scatter_mul(x, idx, u, dn, unique_indices=True) * w).sum()
    for run in (jax.grad(loss, argnums=(0, 1)), jax.jit(jax.grad(loss, argnums=(0, 1)))):
        gx, gu = run(x, u)
        want_x = w.copy()
        want_x[2] *= u[0]
        want_x[0] *= u[1]
        np.testing.assert_array_equal(np.asarray(gx), want_x)
        np.testing.assert_array_equal(np.asarray(gu), [x[2] * w[2], x[0] * w[0], [0, 0]])
    with pytest.raises(NotImplementedError,
                       match="scatter_mul gradients are only implemented if `unique_indices=True`"):
        jax.grad(lambda u: lax.scatter_mul(x, idx, u, dn).sum())(u)
