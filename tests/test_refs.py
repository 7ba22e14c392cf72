"""Mutable arrays (``jax.Ref``): eager reads and writes, refs as arguments of jitted functions
(their writes land after the call), refs made inside a traced function, and JAX's errors.
Expected values and messages are JAX 0.10.2's."""
import re

import numpy as np
import pytest

import shardc
import shardc.numpy as jnp


def test_eager_reads_and_writes():
    ref = shardc.new_ref(jnp.zeros(5))
    shardc.ref.set(ref, 1, 10.0)
    ref[2] = 3.0
    assert repr(ref) == "Ref([ 0., 10.,  3.,  0.,  0.], dtype=float32)"
    np.testing.assert_array_equal(np.asarray(ref[1:3]), [10.0, 3.0])
    assert (ref.shape, ref.dtype, ref.ndim, len(ref)) == ((5,), np.float32, 1, 5)
    counter = shardc.new_ref(jnp.arange(5))
    assert int(shardc.ref.swap(counter, 3, 10)) == 3
    np.testing.assert_array_equal(np.asarray(shardc.ref.get(counter)), [0, 1, 2, 10, 4])
    shardc.ref.addupdate(counter, slice(0, 2), jnp.array([5, 5], jnp.int32))
    np.testing.assert_array_equal(np.asarray(counter[...]), [5, 6, 2, 10, 4])
    scalar = shardc.new_ref(jnp.int32(5))
    scalar[...] = 4
    assert repr(scalar) == "Ref(4, dtype=int32)"


def test_writes_check_shape_and_dtype():
    ref = shardc.new_ref(jnp.ones(3))
    with pytest.raises(ValueError, match=r"Invalid shape for `swap`\. Ref shape: \(3,\)\. "
                                         r"Expected shape: \(3,\)\. Value shape: \(4,\)\."):
        ref[...] = jnp.ones(4)
    with pytest.raises(ValueError, match=r"Invalid dtype for `swap`\. Ref dtype: float32\. "
                                         r"Value dtype: int32\."):
        ref[...] = jnp.ones(3, jnp.int32)
    with pytest.raises(ValueError, match="Cannot store a Ref into another Ref"):
        ref[...] = shardc.new_ref(jnp.ones(3))
    with pytest.raises(ValueError, match="Invalid shape for `swap`"):
        ref[...] = 2.0                 # no broadcasting
    with pytest.raises(ValueError, match=r"Invalid dtype for `swap`\. Ref dtype: float32\. "
                                         r"Value dtype: int32\."):
        ref[1] = 2                     # a Python int is not cast to a float Ref
    ref[1] = 2.0                       # a Python float takes the Ref's float dtype
    ints = shardc.new_ref(jnp.ones(3, jnp.int32))
    ints[...] += 1
    assert ints[...].dtype == np.int32 and ref[...].dtype == np.float32


def test_refs_as_jit_arguments_are_written_after_the_call():
    @shardc.jit
    def step(r, x):
        r[...] += x
        r[0] = 100.0
        return r[...].sum()

    ref = shardc.new_ref(jnp.ones(3))
    assert float(step(ref, 2.0)) == 106.0
    np.testing.assert_array_equal(np.asarray(ref[...]), [100.0, 3.0, 3.0])
    assert float(step(ref, jnp.ones(3))) == 108.0
    np.testing.assert_array_equal(np.asarray(ref[...]), [100.0, 4.0, 4.0])


def test_a_pytree_of_refs_trains_in_place():
    @shardc.jit
    def update(state, batch):
        state["count"][...] += 1
        state["w"][...] -= 0.1 * batch.mean(0)
        return {"w_sum": state["w"][...].sum()}

    state = shardc.tree.map(shardc.new_ref, {"count": jnp.array(0), "w": jnp.ones(4)})
    for _ in range(3):
        out = update(state, jnp.ones((2, 4)))
    assert int(state["count"][...]) == 3
    np.testing.assert_allclose(np.asarray(state["w"][...]), np.full(4, 0.7), rtol=1e-6)
    np.testing.assert_allclose(float(out["w_sum"]), 2.8, rtol=1e-6)


def test_a_weakly_typed_ref_reads_back_weakly_typed_under_jit():
    # the training cookbook's Adam count: mu / (1 - b ** count) stays bfloat16
    @shardc.jit
    def step(count, mu):
        count[...] += 1
        mu[...] = mu[...] / (1 - 0.9 ** count[...])

    count = shardc.new_ref(shardc.jit(lambda: jnp.array(0))())
    mu = shardc.new_ref(jnp.ones(2, jnp.bfloat16))
    for _ in range(2):
        step(count, mu)
    assert mu[...].dtype == jnp.bfloat16


def test_a_refs_weak_type_is_fixed_when_it_is_made():
    # JAX's Ref type: what is written, eagerly or by a jitted function, reads back weakly
    # typed as the Ref was made, or typed (so a count added to int8 stays int8)
    weak = shardc.new_ref(jnp.array(0))
    weak[...] += 1
    assert str(shardc.typeof(weak[...])) == "~int32[]"
    assert (weak[...] + jnp.ones(3, jnp.int8)).dtype == jnp.int8
    weak[...] = jnp.int32(5)
    assert str(shardc.typeof(weak[...])) == "~int32[]" and int(weak[...]) == 5
    shardc.jit(lambda r: r.__setitem__(Ellipsis, r[...] + 1))(weak)
    assert str(shardc.typeof(weak[...])) == "~int32[]" and int(weak[...]) == 6
    typed = shardc.new_ref(jnp.int32(0))
    typed[...] = 5
    assert str(shardc.typeof(typed[...])) == "int32[]"


def test_refs_made_inside_a_traced_function():
    @shardc.jit
    def double(x):
        r = shardc.new_ref(jnp.zeros_like(x))
        r[...] += x * 2
        return r[...]

    np.testing.assert_array_equal(np.asarray(double(jnp.arange(3.0))), [0.0, 2.0, 4.0])

    def g(x):
        r = shardc.new_ref(0.0)
        r[...] += jnp.sin(x)
        return r[...]

    assert float(shardc.grad(g)(1.0)) == pytest.approx(np.cos(1.0))
    assert float(shardc.jit(shardc.grad(g))(1.0)) == pytest.approx(np.cos(1.0))


def test_a_jitted_function_closing_over_refs_takes_them_as_inputs():
    x_ref = shardc.new_ref(jnp.zeros(3))
    counter = shardc.new_ref(jnp.int32(0))

    @shardc.jit
    def f():
        x_ref[1] += 1.0

    f()
    f()
    assert repr(x_ref) == "Ref([0., 2., 0.], dtype=float32)"

    @shardc.jit
    def g(x):
        counter[...] += 1
        return x * 2 + x_ref[...]

    np.testing.assert_array_equal(np.asarray(g(jnp.ones(3))), [2.0, 4.0, 2.0])
    x_ref[0] = 5.0                  # the next call reads the value the Ref holds now
    np.testing.assert_array_equal(np.asarray(g(jnp.ones(3))), [7.0, 4.0, 2.0])
    assert int(counter[...]) == 2
    (pure,) = g.ref_calls.values()          # traced once, as a pure function of the refs
    assert pure.trace_count == 1


def test_vmap_maps_a_ref_argument_over_its_axis():
    def dist(x, y, out_ref):
        assert x.ndim == y.ndim == 1 and out_ref.ndim == 0
        out_ref[...] = jnp.sum((x - y) ** 2)

    vecs = jnp.arange(12.0).reshape(3, 4)
    out_ref = shardc.new_ref(jnp.zeros((3, 3)))
    shardc.vmap(shardc.vmap(dist, (0, None, 0)), (None, 0, 0))(vecs, vecs, out_ref)
    host = np.arange(12.0).reshape(3, 4)
    want = ((host[None, :, :] - host[:, None, :]) ** 2).sum(-1)
    np.testing.assert_array_equal(np.asarray(out_ref[...]), want)

    unbatched = shardc.new_ref(0.0)
    with pytest.raises(ValueError, match="unbatched array reference"):
        shardc.vmap(lambda x, r: r.__setitem__(..., x), (0, None))(jnp.arange(3.0), unbatched)


def test_scan_threads_a_ref_its_body_writes():
    total = shardc.new_ref(0)
    xs = jnp.arange(10)

    def body(_, x):
        total[...] += x
        return None, x * 2

    _, ys = shardc.lax.scan(body, None, xs)
    assert int(total[...]) == 45
    np.testing.assert_array_equal(np.asarray(ys), np.arange(10) * 2)

    acc = shardc.new_ref(jnp.zeros(2))

    @shardc.jit
    def run(n):
        def step(i, c):
            acc[...] += c
            return c + 1.0
        return shardc.lax.fori_loop(0, 3, step, n)

    np.testing.assert_array_equal(np.asarray(run(jnp.ones(2))), [4.0, 4.0])
    np.testing.assert_array_equal(np.asarray(acc[...]), [6.0, 6.0])


def test_while_loops_and_branches_thread_the_refs_they_write():
    """As scan does: a ref a while loop's body or a cond/switch branch writes from outside is
    threaded through it (JAX writes it in place), eagerly and under jit."""
    grown = shardc.new_ref(jnp.ones(2))
    total = shardc.new_ref(jnp.zeros(()))

    def body(c):
        grown[...] = grown[...] * 2.0
        total[...] = total[...] + c
        return c + 1

    assert int(shardc.lax.while_loop(lambda c: c < 3, body, 0)) == 3
    np.testing.assert_array_equal(np.asarray(grown[...]), [8.0, 8.0])
    assert float(total[...]) == 3.0
    marks = shardc.new_ref(jnp.zeros(3))

    def first(x):
        marks[0] = x
        return x * 2

    def second(x):
        marks[1] = x + 1
        return x * 3

    assert float(shardc.lax.cond(True, first, second, 5.0)) == 10.0
    assert float(shardc.lax.cond(False, first, second, 7.0)) == 21.0
    np.testing.assert_array_equal(np.asarray(marks[...]), [5.0, 8.0, 0.0])
    shardc.lax.switch(5, [lambda: None, lambda: marks.__setitem__(2, -1.0)])   # clamped: 1
    np.testing.assert_array_equal(np.asarray(marks[...]), [5.0, 8.0, -1.0])

    @shardc.jit
    def run(x):
        r = shardc.new_ref(x)
        shardc.lax.cond(x.sum() > 0, lambda: r.__setitem__(..., r[...] + 1), lambda: None)
        shardc.lax.while_loop(lambda c: c < 2,
                              lambda c: (r.__setitem__(..., r[...] * 3), c + 1)[1], 0)
        return r[...]

    np.testing.assert_array_equal(np.asarray(run(jnp.ones(2))), [18.0, 18.0])
    np.testing.assert_array_equal(np.asarray(run(-jnp.ones(2))), [-9.0, -9.0])


def test_what_shardc_refuses():
    ref = shardc.new_ref(jnp.ones(3))
    # the function named with where it is defined, as JAX's
    with pytest.raises(ValueError, match=r"function <lambda> at .*test_refs\.py:\d+ traced for "
                                         r"jit returned a mutable "
                                         r"array reference of type Ref\{float32\[3\]\}, but "
                                         r"mutable array references cannot be returned\."):
        shardc.jit(lambda r: r)(ref)
    with pytest.raises(ValueError, match=r"only one reference to a mutable array may be passed "
                                         r"as an argument to a function, but when tracing "
                                         r"<lambda> at .*test_refs\.py:\d+ for jit the mutable "
                                         r"array reference of "
                                         r"type Ref\{float32\[3\]\} appeared at both a and b\."):
        shardc.jit(lambda a, b: a[...] + b[...])(ref, ref)
    with pytest.raises(ValueError, match=r"was both closed over and passed as the argument r"):
        shardc.jit(lambda r: r[...] + ref[...])(ref)

    @shardc.jit
    def write_under_grad(r, x):
        def loss(y):
            r[...] = y
            return y.sum()
        return shardc.grad(loss)(x)

    with pytest.raises(NotImplementedError, match="inside a transformation"):
        write_under_grad(ref, jnp.ones(3))
    np.testing.assert_array_equal(np.asarray(ref[...]), np.ones(3))    # untouched


def test_freeze_and_free():
    ref = shardc.new_ref(jnp.arange(3.0))
    np.testing.assert_array_equal(np.asarray(shardc.freeze(ref)), [0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="freed"):
        ref[...]
    other = shardc.new_ref(jnp.ones(2))
    shardc.free_ref(other)
    with pytest.raises(ValueError, match="freed"):
        other[0] = 2.0


def test_a_shard_map_takes_a_ref_split_by_its_spec():
    mesh = shardc.make_mesh((2,), ("x",))
    P = shardc.sharding.PartitionSpec
    with shardc.sharding.set_mesh(mesh):
        x_ref = shardc.new_ref(jnp.zeros(4, "float32", out_sharding=P("x")))

        @shardc.jit
        @shardc.shard_map(out_specs=None)
        def bump(r):
            r[...] += shardc.lax.axis_index("x").astype("float32")

        bump(x_ref)
        np.testing.assert_array_equal(np.asarray(x_ref[...]), [0.0, 0.0, 1.0, 1.0])
        assert str(shardc.typeof(x_ref[...])) == "float32[4@x]"

        @shardc.jit
        @shardc.shard_map(out_specs=P("x"))
        def internal(x):
            r = shardc.new_ref(jnp.zeros_like(x))
            r[...] = x * 3
            return r[...]

        np.testing.assert_array_equal(
            np.asarray(internal(jnp.arange(4.0, out_sharding=P("x")))), [0.0, 3.0, 6.0, 9.0])



def test_an_eager_shard_map_body_makes_no_ref():
    """JAX's ValueError for a Ref made in a shard_map body run eagerly, even one frozen before
    the body returns; under jit, inside or outside the shard_map, in a loop or branch body
    (traced), the same body runs."""
    mesh = shardc.make_mesh((2,), ("x",))
    P = shardc.sharding.PartitionSpec
    with shardc.sharding.set_mesh(mesh):
        x = shardc.device_put(np.arange(8.0, dtype=np.float32), P("x"))

        def made_and_frozen(x):
            return shardc.freeze(shardc.new_ref(x))

        def under_grad(x):
            return shardc.grad(lambda y: shardc.freeze(shardc.new_ref(y * 2)).sum())(x)

        for body in (made_and_frozen,
                     lambda x: shardc.freeze(shardc.empty_ref(shardc.typeof(x)))):
            with pytest.raises(ValueError, match="Eager shard_map cannot return a `jax.Ref`"):
                shardc.shard_map(body, out_specs=P("x"), check_vma=False)(x)
        for run in (shardc.shard_map(shardc.jit(made_and_frozen), out_specs=P("x"),
                                     check_vma=False),
                    shardc.jit(shardc.shard_map(made_and_frozen, out_specs=P("x"),
                                                check_vma=False))):
            np.testing.assert_array_equal(np.asarray(run(x)), np.arange(8.0))
        np.testing.assert_array_equal(
            np.asarray(shardc.jit(shardc.shard_map(under_grad, out_specs=P("x")))(x)),
            np.full(8, 2.0))

        def in_a_loop(b):      # a loop's or a branch's body is traced: its Refs are fine
            def step(c, _):
                r = shardc.new_ref(c)
                r[...] = r[...] + 1
                return shardc.freeze(r), None
            looped = shardc.lax.scan(step, b, None, length=2)[0]
            return shardc.lax.cond(True, lambda v: shardc.freeze(shardc.new_ref(v * 2)),
                                   lambda v: v, looped)

        np.testing.assert_array_equal(
            np.asarray(shardc.shard_map(in_a_loop, out_specs=P("x"), check_vma=False)(x)),
            (np.arange(8.0) + 2) * 2)

def test_an_index_past_a_refs_end_is_an_error_so_iterating_over_it_ends():
    """JAX's ValueError for an integer index known now past its dimension's end (it was
    clamped): reading, writing, np.asarray and iterating over a Ref raise instead of looping
    for ever; negative indices and indices in range read as before."""
    ref = shardc.new_ref(jnp.arange(3.0))
    assert float(ref[2]) == float(ref[-1]) == 2.0
    for bad in (lambda: ref[3], lambda: np.asarray(ref), lambda: list(ref),
                lambda: ref.__setitem__(3, 1.0)):
        with pytest.raises(ValueError, match=re.escape("Out of bound indexer: idx=3, dim=3.")):
            bad()
    grid = shardc.new_ref(jnp.zeros((2, 3)))
    with pytest.raises(ValueError, match=re.escape("Out of bound indexer: idx=5, dim=3.")):
        grid[..., 5]
    with pytest.raises(ValueError, match=re.escape("Out of bound indexer: idx=2, dim=2.")):
        grid[2]
    assert grid[1, 2].shape == ()


def test_vmap_refuses_writes_to_a_ref_it_does_not_map_over():
    """A Ref passed to vmap with in_axes None takes no write from the mapped function, as in
    JAX (every member would write it): set and += name set/swap, addupdate its own name.
    shardc had written an unbatched value once (a counter went up by one for the batch)."""
    ref = shardc.new_ref(jnp.zeros((), jnp.int32))

    def bump(r, x):
        r[...] += 1
        return x * 2

    def put(r, x):
        r[...] = 5
        return x

    def add(r, x):
        shardc.ref.addupdate(r, ..., 1)
        return x

    x = jnp.arange(3.0)
    for fn, what in ((bump, "a set/swap"), (put, "a set/swap"), (add, "an addupdate")):
        with pytest.raises(ValueError, match=rf"^performing {what} operation with vmapped "
                                             r"value on an unbatched array reference of type "
                                             r"Ref\{int32\[\]\}\. Move the array reference"):
            shardc.vmap(fn, in_axes=(None, 0))(ref, x)
    assert int(ref[...]) == 0
    # reading it is fine, and a Ref mapped over is written member by member
    np.testing.assert_array_equal(shardc.vmap(lambda r, v: v + r[...], in_axes=(None, 0))(ref, x),
                                  [0.0, 1.0, 2.0])
    batch = shardc.new_ref(jnp.zeros(3, jnp.int32))
    shardc.vmap(bump)(batch, x)
    np.testing.assert_array_equal(batch[...], [1, 1, 1])


def test_typeof_a_ref_and_reads_and_writes_at_index_arrays():
    """jax.typeof of a Ref is its held type as a Ref's (``Ref{float32[3]}``), eagerly and
    under jit; integer-array indices read and write as an array's (JAX's)."""
    ref = shardc.new_ref(jnp.arange(3.0))
    assert str(shardc.typeof(ref)) == "Ref{float32[3]}" and shardc.typeof(ref).shape == (3,)
    seen = []
    shardc.jit(lambda r: seen.append(str(shardc.typeof(r))))(ref)
    assert seen == ["Ref{float32[3]}"]
    x = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    grid = shardc.new_ref(x)
    np.testing.assert_array_equal(grid[np.arange(2), np.arange(2)], x[[0, 1], [0, 1]])
    np.testing.assert_array_equal(grid[np.arange(2), ..., np.arange(2)], x[[0, 1], [0, 1]])
    grid[np.array([0, 2]), 1] = jnp.array([10.0, 20.0])

    def bump(r):
        r[np.arange(2), np.arange(2)] += 1.0
        return r[np.array([1]), ...]
    want = x.copy()
    want[[0, 2], 1] = [10.0, 20.0]
    want[[0, 1], [0, 1]] += 1.0
    np.testing.assert_array_equal(shardc.jit(bump)(grid), want[[1]])
    np.testing.assert_array_equal(grid[...], want)


def test_refs_as_operands_of_cond_and_switch():
    """A Ref given to cond or switch as an operand: each branch gets it, reads it and writes
    it (JAX's), eagerly and under jit; the write lands once the branch has run."""
    ref = shardc.new_ref(jnp.zeros(3))

    def up(r, k):
        r[...] += k
        return r[0] * 2

    def down(r, k):
        r[1] -= k
        return r[1]
    assert float(shardc.lax.cond(True, up, down, ref, 2.0)) == 4.0
    assert float(shardc.lax.cond(False, up, down, ref, 5.0)) == -3.0
    assert float(shardc.jit(lambda p: shardc.lax.cond(p, up, down, ref, 1.0))(True)) == 6.0
    got = shardc.lax.switch(1, [lambda r: r[2], lambda r: r.__setitem__(2, 7.0) or r[2]], ref)
    assert float(got) == 7.0
    np.testing.assert_array_equal(np.asarray(ref[...]), [3.0, -2.0, 7.0])


def test_ref_views_and_scans_over_refs():
    """ref.at[index] is a view read and written as a Ref (views of views too), under jit and
    grad; a Ref scanned over gives the body a view of each row, which it reads and writes
    (JAX's), forward and reversed, eagerly and under jit."""
    def f(x):
        ref = shardc.new_ref(jnp.ones(5))
        ref.at[1:4][...] += x
        return ref[...].sum()
    x = jnp.array([1.0, 2.0, 3.0])
    assert float(shardc.jit(f)(x)) == 11.0
    np.testing.assert_array_equal(np.asarray(shardc.grad(shardc.jit(f))(x)), [1.0, 1.0, 1.0])
    grid = shardc.new_ref(jnp.arange(12.0).reshape(3, 4))

    @shardc.jit
    def poke(r):
        r.at[1][2] = -1.0
        r.at[0:2][:, 3] = jnp.array([7.0, 8.0])
        r.at[0:2].at[1][0] = 50.0
        return r.at[2][...]
    np.testing.assert_array_equal(np.asarray(poke(grid)), [8.0, 9.0, 10.0, 11.0])
    want = np.arange(12.0).reshape(3, 4)
    want[1, 2], want[0, 3], want[1, 3], want[1, 0] = -1.0, 7.0, 8.0, 50.0
    np.testing.assert_array_equal(np.asarray(grid[...]), want)

    rows = shardc.new_ref(jnp.arange(6.0).reshape(3, 2))

    def body(c, xs):
        row, w = xs
        row[...] = row[...] * w + c
        return c + 1.0, row[0]
    c, ys = shardc.lax.scan(body, 0.0, (rows, jnp.array([1.0, 10.0, 100.0])), reverse=True)
    assert float(c) == 3.0
    np.testing.assert_array_equal(np.asarray(rows[...]), [[2.0, 3.0], [21.0, 31.0],
                                                          [400.0, 500.0]])
    np.testing.assert_array_equal(np.asarray(ys), [2.0, 21.0, 400.0])
    flags = shardc.new_ref(jnp.zeros(4))

    def fill(c, slot):
        slot[...] = c
        return c * 2, None
    assert float(shardc.jit(lambda r: shardc.lax.scan(fill, 1.0, r)[0])(flags)) == 16.0
    np.testing.assert_array_equal(np.asarray(flags[...]), [1.0, 2.0, 4.0, 8.0])
