"""``jnp.ufunc``: the fourteen functions JAX makes ufunc objects, and ``jnp.frompyfunc``.
Their methods (``reduce``, ``accumulate``, ``outer``, ``at``, ``reduceat``) against numpy's
methods of the same ufuncs (values), JAX's dtypes, gradients against finite differences, jit
and vmap, and JAX's errors."""
from __future__ import annotations

import numpy as np
import pytest

import shardc
import shardc.numpy as jnp

from breadth_checks import assert_close, check_grad

# JAX 0.10.2's ufuncs: name -> (nin, identity)
UFUNCS = {
    "negative": (1, None), "add": (2, 0), "multiply": (2, 1), "subtract": (2, None),
    "maximum": (2, None), "minimum": (2, None), "bitwise_and": (2, -1), "bitwise_or": (2, 0),
    "bitwise_xor": (2, 0), "logical_and": (2, True), "logical_or": (2, False),
    "logical_xor": (2, False), "logaddexp": (2, -np.inf), "logaddexp2": (2, -np.inf),
}
BINARY = sorted(n for n, (nin, _) in UFUNCS.items() if nin == 2)
FLOAT = {"add", "multiply", "subtract", "maximum", "minimum", "logaddexp", "logaddexp2"}

RNG = np.random.default_rng(0)
XF = RNG.uniform(-2, 2, size=(3, 4)).astype(np.float32)
XI = RNG.integers(0, 8, size=(3, 4)).astype(np.int32)
XB = RNG.integers(0, 2, size=(3, 4)).astype(bool)


def operand(name):
    """An array the ufunc takes, and its numpy twin."""
    if name in FLOAT:
        return XF
    return XB if name.startswith("logical") else XI


def close(got, want, rtol=1e-5, atol=1e-5):
    np.testing.assert_allclose(np.asarray(got).astype(np.float64),
                               np.asarray(want).astype(np.float64), rtol=rtol, atol=atol)


def test_jaxs_ufuncs_are_ufunc_objects_and_the_rest_functions():
    for name, (nin, ident) in UFUNCS.items():
        u = getattr(jnp, name)
        assert isinstance(u, jnp.ufunc), name
        assert (u.nin, u.nout, u.nargs, u.__name__) == (nin, 1, nin, name)
        assert u.identity == ident and type(u.identity) is type(ident)
        assert repr(u) == f"<jnp.ufunc '{name}'>"
        assert u == getattr(jnp, name) and hash(u) == hash(getattr(jnp, name))
        assert u.__doc__
    for name in ("sin", "divide", "power", "true_divide", "where", "fmax", "equal"):
        assert not isinstance(getattr(jnp, name), jnp.ufunc), name
    assert jnp.add != jnp.multiply
    with pytest.raises(AttributeError):
        jnp.add.identity = 5


def test_called_a_ufunc_is_its_function():
    assert_close(jnp.add(XF, 1.0), XF + 1, dtype=np.float32)
    assert_close(jnp.negative(XI), -XI, dtype=np.int32)
    assert_close(jnp.logaddexp(XF, XF[::-1]), np.logaddexp(XF, XF[::-1]), 1e-6, 1e-6)
    assert jnp.add(np.int8(1), 2).dtype == np.int8
    assert_close(shardc.jit(jnp.maximum)(XF, 0.0), np.maximum(XF, 0))
    assert_close(shardc.vmap(jnp.multiply)(XF, XF), XF * XF)
    assert_close(shardc.grad(lambda v: jnp.multiply(v, v).sum())(XF), 2 * XF)
    static = shardc.jit(lambda u, v: u.reduce(v), static_argnums=0)
    assert_close(static(jnp.maximum, XF), XF.max(0))
    assert_close(static(jnp.minimum, XF), XF.min(0))


@pytest.mark.parametrize("name", BINARY)
def test_reduce_equals_numpys(name):
    u, ref, x = getattr(jnp, name), getattr(np, name), operand(name)
    close(u.reduce(x), ref.reduce(x))
    close(u.reduce(x, axis=1, keepdims=True), ref.reduce(x, axis=1, keepdims=True))
    close(u.reduce(x, axis=-1), ref.reduce(x, axis=-1))
    whole = ref.reduce(x.ravel())       # numpy folds a non-reorderable ufunc on one axis
    close(u.reduce(x, axis=None), whole)
    close(u.reduce(x, axis=None, keepdims=True), np.reshape(whole, (1, 1)))
    close(shardc.jit(lambda v: u.reduce(v, axis=1))(x), ref.reduce(x, axis=1))
    initial = x[0, 0]
    close(u.reduce(x, axis=0, initial=initial), ref.reduce(x, axis=0, initial=initial))
    if u.identity is not None or name in ("maximum", "minimum", "subtract"):
        mask = XB if name != "subtract" else np.ones_like(XB)
        close(u.reduce(x, axis=1, where=mask, initial=initial),
              ref.reduce(x, axis=1, where=mask, initial=initial))


def test_reduce_dtypes_and_rules_are_jaxs():
    x8 = XI.astype(np.int8)
    assert jnp.add.reduce(x8).dtype == np.int32              # jnp.sum promotes
    assert jnp.add.reduce(XB).dtype == np.int32
    assert jnp.add.reduce(x8, dtype=jnp.int8).dtype == np.int8
    assert jnp.subtract.reduce(x8).dtype == np.int8           # a fold keeps the dtype
    assert jnp.subtract.reduce(x8, dtype=jnp.float32).dtype == np.float32
    assert jnp.maximum.reduce(x8, dtype=jnp.float32).dtype == np.float32
    assert jnp.logaddexp.reduce(XI).dtype == np.float32
    assert jnp.bitwise_or.reduce(x8).dtype == np.int8
    assert jnp.logical_and.reduce(XI).dtype == np.bool_
    assert jnp.logical_or.reduce(XI, dtype=jnp.int32).dtype == np.int32
    np.testing.assert_array_equal(np.asarray(jnp.bitwise_and.reduce(XI, axis=(0, 1))),
                                  np.bitwise_and.reduce(XI.ravel()))
    np.testing.assert_array_equal(np.asarray(jnp.bitwise_xor.reduce(XB, axis=1)),
                                  np.logical_xor.reduce(XB, axis=1))
    np.testing.assert_array_equal(np.asarray(jnp.logical_xor.reduce(XB, axis=1, initial=True)),
                                  ~np.logical_xor.reduce(XB, axis=1))
    # a reduction of nothing is the identity, or the initial value
    close(jnp.add.reduce(np.zeros((0, 3), np.float32)), np.zeros(3))
    assert np.all(np.isneginf(np.asarray(jnp.logaddexp.reduce(np.zeros((0, 2), np.float32)))))
    close(jnp.subtract.reduce(np.zeros((0, 2), np.float32), initial=4.0), [4.0, 4.0])


def test_logaddexp_reductions_are_stable_logsumexps():
    big = np.array([[1000.0, 1000.0], [-1000.0, 0.0]], np.float32)
    close(jnp.logaddexp.reduce(big, axis=1), [1000 + np.log(2), 0.0])
    close(jnp.logaddexp2.reduce(big, axis=1), [1001.0, 0.0])
    close(jnp.logaddexp.reduce(XF, axis=1, initial=np.float32(0.5)),
          np.logaddexp.reduce(XF, axis=1, initial=0.5))
    close(jnp.logaddexp2.reduce(XF, axis=0, initial=np.float32(1.0)),
          np.logaddexp2.reduce(XF, axis=0, initial=1.0))


@pytest.mark.parametrize("name", BINARY)
def test_accumulate_equals_numpys(name):
    u, ref, x = getattr(jnp, name), getattr(np, name), operand(name)
    close(u.accumulate(x), ref.accumulate(x))
    close(u.accumulate(x, axis=1), ref.accumulate(x, axis=1))
    close(u.accumulate(x, axis=-1), ref.accumulate(x, axis=-1))
    close(shardc.jit(lambda v: u.accumulate(v, axis=1))(x), ref.accumulate(x, axis=1))
    close(shardc.vmap(u.accumulate)(x), ref.accumulate(x, axis=1))


def test_accumulate_dtypes_and_edges_are_jaxs():
    x8 = XI.astype(np.int8)
    assert jnp.add.accumulate(x8).dtype == np.int8            # cumsum keeps the dtype
    assert jnp.add.accumulate(XB).dtype == np.int32
    assert jnp.subtract.accumulate(x8, dtype=jnp.float32).dtype == np.float32
    assert jnp.logaddexp2.accumulate(XI).dtype == np.float32
    # a fold in int32 of booleans: the running values promote, as JAX's select does
    got = jnp.logical_xor.accumulate(XB, axis=0, dtype=jnp.int32)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(got), np.logical_xor.accumulate(XB, axis=0))
    empty = jnp.subtract.accumulate(np.zeros((0, 2), np.int32))
    assert empty.shape == (0, 2) and empty.dtype == np.int32
    close(jnp.add.accumulate(XI, axis=None), np.cumsum(XI))   # cumsum flattens


@pytest.mark.parametrize("name", BINARY)
def test_outer_equals_numpys(name):
    u, ref, x = getattr(jnp, name), getattr(np, name), operand(name)
    close(u.outer(x[0], x[1, :3]), ref.outer(x[0], x[1, :3]))
    close(u.outer(x[:2], x[2]), ref.outer(x[:2], x[2]))
    assert u.outer(x[0], x[0]).dtype == getattr(jnp, name)(x[0], x[0]).dtype


def test_outer_shapes_and_weak_scalars():
    assert jnp.add.outer(np.ones((1, 3, 5)), np.ones((2, 4))).shape == (1, 3, 5, 2, 4)
    x8 = XI[0].astype(np.int8)
    assert jnp.add.outer(x8, 2).dtype == np.int8 and jnp.add.outer(2, x8).dtype == np.int8
    assert jnp.multiply.outer(1.5, x8).dtype == np.float32
    assert jnp.add.outer(np.float32(1), np.float32(2)).shape == ()
    assert_close(shardc.vmap(jnp.multiply.outer)(XF, XF), XF[:, :, None] * XF[:, None, :])


def numpy_at(name, a, indices, *b):
    a = np.array(a)
    getattr(np, name).at(a, indices, *b)
    return a


@pytest.mark.parametrize("name", BINARY)
def test_at_equals_numpys_and_repeated_indices_compound(name):
    u, x = getattr(jnp, name), operand(name)
    idx = np.array([0, 2, 0, 3, 0])
    values = x[1, [0, 1, 2, 3, 1]]
    close(u.at(x[0], idx, values, inplace=False), numpy_at(name, x[0], idx, values))
    close(u.at(x[0], 2, x[1, 0], inplace=False), numpy_at(name, x[0], 2, x[1, 0]))
    rows = np.array([2, 0, 2])
    close(u.at(x, rows, x[[1, 1, 0]], inplace=False), numpy_at(name, x, rows, x[[1, 1, 0]]))
    pairs = (np.array([0, 1, 0]), np.array([3, 3, 3]))
    close(u.at(x, pairs, x[2, 1], inplace=False), numpy_at(name, x, pairs, x[2, 1]))
    jitted = shardc.jit(lambda v, i: u.at(v, i, values, inplace=False))(x[0], idx)
    close(jitted, numpy_at(name, x[0], idx, values))


def test_unary_at_and_at_dtypes():
    idx = np.array([1, 1, 2])
    close(jnp.negative.at(XF[0], idx, inplace=False), numpy_at("negative", XF[0], idx))
    close(jnp.negative.at(XF, 1, inplace=False), numpy_at("negative", XF, 1))
    x8 = XI[0].astype(np.int8)
    assert jnp.maximum.at(x8, idx, 4, inplace=False).dtype == np.int8
    assert jnp.add.at(x8, idx, 1, inplace=False).dtype == np.int8
    assert jnp.logaddexp.at(x8, idx, 1, inplace=False).dtype == np.float32
    # booleans add and multiply as integers, then are true where nonzero
    np.testing.assert_array_equal(np.asarray(jnp.add.at(XB[0], idx, True, inplace=False)),
                                  XB[0] | np.isin(np.arange(4), idx))
    np.testing.assert_array_equal(np.asarray(jnp.multiply.at(XB[0], idx, 0, inplace=False)),
                                  XB[0] & ~np.isin(np.arange(4), idx))
    batched = shardc.vmap(lambda v, i: jnp.add.at(v, i, 1.0, inplace=False))(
        XF, np.array([[0, 0], [1, 2], [3, 3]]))
    close(batched, XF + np.array([[2, 0, 0, 0], [0, 1, 1, 0], [0, 0, 0, 2]]))


@pytest.mark.parametrize("name", BINARY)
def test_reduceat_equals_numpys(name):
    u, ref, x = getattr(jnp, name), getattr(np, name), operand(name)
    for indices, axis in (([0, 2, 1], 1), ([0, 2], 0), ([1, 3], -1), ([0, 1, 1, 3], 1)):
        indices = np.array(indices)
        close(u.reduceat(x, indices, axis=axis), ref.reduceat(x, indices, axis=axis))
    traced = shardc.jit(lambda v, i: u.reduceat(v, i, axis=1))(x, np.array([0, 1, 3]))
    close(traced, ref.reduceat(x, [0, 1, 3], axis=1))
    close(shardc.vmap(lambda v: u.reduceat(v, np.array([0, 2])))(x),
          ref.reduceat(x, [0, 2], axis=1))


def test_reduceat_reads_jaxs_way_beyond_numpys():
    # an index past the end reads the fill value (NaN), as JAX's take; a negative one counts
    # from the end and takes in nothing after it
    got = np.asarray(jnp.add.reduceat(XF[0], np.array([0, 7])))
    assert np.isnan(got[1]) and np.isclose(got[0], XF[0].sum())
    close(jnp.add.reduceat(XF[0], np.array([-1, 0])), [XF[0, -1], XF[0].sum()])
    # as JAX's, dtype does not change the result
    assert jnp.add.reduceat(XI.astype(np.int8), np.array([0]), axis=1,
                            dtype=jnp.float32).dtype == np.int8


def test_frompyfunc_makes_a_ufunc():
    f = jnp.frompyfunc(lambda a, b: a * b + 1, 2, 1, identity=0)
    ref = np.frompyfunc(lambda a, b: a * b + 1, 2, 1)
    assert isinstance(f, jnp.ufunc) and repr(f) == "<jnp.ufunc '<lambda>'>"
    assert (f.nin, f.nout, f.identity) == (2, 1, 0)
    as_int = lambda v: np.asarray(v, np.int64)
    np.testing.assert_array_equal(np.asarray(f(XI, 2)), as_int(ref(XI, 2)))
    np.testing.assert_array_equal(np.asarray(f.outer(XI[0], XI[1])),
                                  as_int(ref.outer(XI[0], XI[1])))
    # with an identity, a reduction starts from it (ref has none: prepend it)
    start = np.zeros((1, 4), np.int32)
    np.testing.assert_array_equal(np.asarray(f.reduce(XI)),
                                  as_int(ref.reduce(np.concatenate([start, XI]))))
    np.testing.assert_array_equal(np.asarray(f.accumulate(XI, axis=1)),
                                  as_int(ref.accumulate(XI, axis=1)))
    np.testing.assert_array_equal(np.asarray(f.reduceat(XI, np.array([0, 3]), axis=1)),
                                  as_int(ref.reduceat(XI, [0, 3], axis=1)))
    want = XI[0].copy()
    ref.at(want, [0, 2, 0], 3)
    np.testing.assert_array_equal(np.asarray(f.at(XI[0], np.array([0, 2, 0]), 3,
                                                  inplace=False)), want)
    pair = jnp.frompyfunc(lambda a: (a + 1, a - 1), 1, 2)
    up, down = pair(XF)
    close(up, XF + 1)
    close(down, XF - 1)
    cmp = jnp.frompyfunc(lambda a, b: a > b, 2, 1)
    assert cmp.accumulate(XF, axis=1).dtype == np.bool_
    custom = jnp.ufunc(lambda a, b: a - b, 2, 1, name="sub", identity=0)
    assert repr(custom) == "<jnp.ufunc 'sub'>"
    close(custom.reduce(XF, axis=1, where=XB), np.where(XB, -XF, 0).sum(1))


def test_method_gradients():
    softmax = np.exp(XF) / np.exp(XF).sum(1, keepdims=True)
    assert_close(shardc.grad(lambda v: jnp.logaddexp.reduce(v, axis=1).sum())(XF), softmax,
                 1e-5, 1e-6)
    check_grad(lambda v: jnp.logaddexp2.reduce(v, axis=0, initial=np.float32(0.5)).sum(), XF)
    check_grad(lambda v: (jnp.subtract.accumulate(v, axis=1) ** 2).sum(), XF)
    check_grad(lambda v: (jnp.subtract.reduce(v, axis=0) ** 2).sum(), XF)
    check_grad(lambda v: jnp.logaddexp.accumulate(v, axis=0).sum(), XF)
    check_grad(lambda v: (jnp.multiply.outer(v[0], v[1]) ** 2).sum(), XF)
    check_grad(lambda v: jnp.multiply.reduceat(v, np.array([0, 2, 1]), axis=1).sum(), XF)
    check_grad(lambda v: jnp.logaddexp.at(v, np.array([0, 2, 0]), v[1, :3],
                                          inplace=False).sum(), XF)
    check_grad(lambda v: (jnp.subtract.at(v[0], np.array([1, 1]), v[2, :2],
                                          inplace=False) ** 2).sum(), XF)
    f = jnp.frompyfunc(lambda a, b: a * jnp.sin(b), 2, 1)
    check_grad(lambda v: f.reduce(v, axis=1).sum(), XF)
    assert_close(shardc.grad(lambda v: jnp.maximum.reduce(v, axis=0).sum())(XF),
                 (XF == XF.max(0)).astype(np.float32))


def test_errors_are_jaxs():
    x, idx = XF, np.array([0, 2])
    cases = [
        (lambda: jnp.add.at(x[0], idx, 1.0), NotImplementedError,
         r"Because JAX arrays are immutable, jnp.ufunc.at\(\) cannot operate inplace"),
        (lambda: jnp.negative.reduce(x), ValueError, "reduce only supported for binary ufuncs"),
        (lambda: jnp.negative.accumulate(x), ValueError,
         "accumulate only supported for binary ufuncs"),
        (lambda: jnp.negative.outer(x, x), ValueError, "outer only supported for binary ufuncs"),
        (lambda: jnp.negative.reduceat(x, idx), ValueError,
         "reduceat only supported for binary ufuncs"),
        (lambda: jnp.frompyfunc(lambda a, b: (a, b), 2, 2).reduce(x), ValueError,
         "reduce only supported for functions returning a single value"),
        (lambda: jnp.subtract.reduce(x, where=XB), ValueError,
         "reduction operation 'subtract' does not have an identity, so to use a where mask "
         "one has to specify 'initial'."),
        (lambda: jnp.maximum.reduce(x, where=XB), ValueError,
         "reduction operation 'maximum' does not have an identity"),
        (lambda: jnp.add.reduce(x, where=XI), ValueError,
         "where argument must have dtype=bool; got dtype=int32"),
        (lambda: jnp.subtract.reduce(np.zeros(0, np.float32)), ValueError,
         "zero-size array to reduction operation subtract which has no identity"),
        (lambda: jnp.add.reduce(x, out=1), NotImplementedError,
         r"out argument of add.reduce\(\)"),
        (lambda: jnp.add.accumulate(x, out=1), NotImplementedError,
         r"out argument of add.accumulate\(\)"),
        (lambda: jnp.add.reduceat(x, idx, out=1), NotImplementedError,
         r"out argument of add.reduceat\(\)"),
        (lambda: jnp.add(x, x, out=x), NotImplementedError, "out argument of <jnp.ufunc 'add'>"),
        (lambda: jnp.add(x, x, where=XB), NotImplementedError,
         "where argument of <jnp.ufunc 'add'>"),
        (lambda: jnp.subtract.accumulate(x, axis=None), ValueError,
         "accumulate does not allow multiple axes"),
        (lambda: jnp.subtract.reduce(x, axis=(0, 1)), NotImplementedError, "tuple of axes"),
        (lambda: jnp.add.reduceat(x, np.array([[0, 1]])), ValueError,
         r"reduceat: indices must be one-dimensional, got indices.shape=\(1, 2\)"),
        (lambda: jnp.add.reduceat(np.float32(1), np.array([0])), ValueError,
         r"reduceat: a must have 1 or more dimension, got a.shape=\(\)"),
        (lambda: jnp.add.reduceat(x, idx, axis=None), ValueError,
         "reduceat requires a single integer axis."),
        (lambda: jnp.bitwise_and.reduce(x), ValueError,
         "integer argument required; got dtype=float32"),
        (lambda: jnp.bitwise_or.reduce(XI, initial=np.array([1, 2])), ValueError,
         r"initial value must be a scalar. Got array of shape \(2,\)"),
        (lambda: jnp.add.at(x[0], idx, inplace=False), TypeError, "missing 1 required"),
        (lambda: jnp.maximum.at(x, np.array([2, 0]), x[1], inplace=False), ValueError,
         "Incompatible types for broadcasting"),
        (lambda: jnp.frompyfunc(lambda a, b: a, 2, 1)(x), TypeError,
         r"takes 2 positional argument\(s\) but 1 were given"),
    ]
    for call, error, message in cases:
        with pytest.raises(error, match=message):
            call()
