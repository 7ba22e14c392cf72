"""``lax.custom_linear_solve`` and ``scipy.sparse.linalg``, held to numpy's solutions and to
finite differences (each case also ran under JAX 0.10.2 with the same results, but where a
case says JAX fails)."""
import re

import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from shardc import lax
from shardc.sharding import PartitionSpec as P

RNG = np.random.RandomState(0)
_M = RNG.randn(3, 3)
A = (_M @ _M.T + 3 * np.eye(3)).astype(np.float32)       # symmetric positive definite
N = (RNG.randn(3, 3) + 4 * np.eye(3)).astype(np.float32)  # nonsymmetric
B = RNG.randn(3).astype(np.float32)


def _solved(a, b, symmetric=False):
    """``a x = b`` by a solver that is not differentiable through (a while_loop of Jacobi
    steps would do as well): the derivative must come from the implicit rule."""
    solve = lambda mv, r: jnp.linalg.solve(lax.stop_gradient(a), r)
    t_solve = None if symmetric else lambda vm, r: jnp.linalg.solve(lax.stop_gradient(a).T, r)
    return lax.custom_linear_solve(lambda x: jnp.dot(a, x), b, solve, t_solve,
                                   symmetric=symmetric)


def _fd_grad(f, x, eps=1e-3):
    x = np.asarray(x, np.float64)
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[idx] = eps
        g[idx] = (f((x + d).astype(np.float32)) - f((x - d).astype(np.float32))) / (2 * eps)
    return g


@pytest.mark.parametrize("wrap", [lambda f: f, jax.jit])
def test_forward_is_the_solve(wrap):
    got = wrap(_solved)(N, B)
    np.testing.assert_allclose(np.asarray(got), np.linalg.solve(N, B), rtol=1e-5)
    assert got.dtype == np.float32


@pytest.mark.parametrize("wrap", [lambda f: f, jax.jit])
@pytest.mark.parametrize("mat", [A, N])
def test_grad_in_b_and_in_the_matrix_matvec_closes_over(wrap, mat):
    loss = lambda a, b: jnp.sum(_solved(a, b) * jnp.arange(1.0, 4.0))
    ga, gb = wrap(jax.grad(loss, (0, 1)))(mat, B)
    f64 = lambda a, b: float(np.sum(np.linalg.solve(a.astype(np.float64), b) * [1, 2, 3]))
    np.testing.assert_allclose(np.asarray(gb), _fd_grad(lambda b: f64(mat, b), B),
                               rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(np.asarray(ga), _fd_grad(lambda a: f64(a, B), mat),
                               rtol=1e-3, atol=1e-4)


def test_jvp_is_the_implicit_one():
    da, db = np.ones_like(N), np.ones_like(B)
    x, dx = jax.jvp(_solved, (N, B), (da, db))
    want_x = np.linalg.solve(N, B)
    np.testing.assert_allclose(np.asarray(x), want_x, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(dx), np.linalg.solve(N, db - da @ want_x),
                               rtol=1e-4, atol=1e-6)


def test_symmetric_transposes_with_solve():
    g = jax.grad(lambda b: _solved(A, b, symmetric=True).sum())(B)
    np.testing.assert_allclose(np.asarray(g), np.linalg.solve(A.T, np.ones(3)), rtol=1e-5)


@pytest.mark.parametrize("axes", [(None, 0), (0, None), (0, 0)])
def test_vmap(axes):
    mats, bs = np.stack([N, 2 * N]), np.stack([B, -B])
    got = jax.vmap(_solved, axes)(mats if axes[0] == 0 else N, bs if axes[1] == 0 else B)
    want = [np.linalg.solve(mats[k] if axes[0] == 0 else N, bs[k] if axes[1] == 0 else B)
            for k in range(2)]
    np.testing.assert_allclose(np.asarray(got), np.stack(want), rtol=1e-5)
    grads = jax.grad(lambda b: jax.vmap(_solved, (None, 0))(N, b).sum())(bs)
    np.testing.assert_allclose(np.asarray(grads),
                               np.stack([np.linalg.solve(N.T, np.ones(3))] * 2), rtol=1e-5)


def test_reverse_mode_needs_transpose_solve():
    f = lambda b: lax.custom_linear_solve(lambda x: A @ x, b, lambda mv, r: r).sum()
    with pytest.raises(TypeError, match="transpose_solve required for backwards mode"):
        jax.grad(f)(B)
    # forward mode does not
    _, dx = jax.jvp(lambda b: lax.custom_linear_solve(lambda x: A @ x, b, lambda mv, r: r),
                    (B,), (B,))
    np.testing.assert_allclose(np.asarray(dx), B)


def test_has_aux_and_pytrees():
    solve = lambda mv, r: (r / 2, jnp.sum(r))
    f = lambda b: lax.custom_linear_solve(lambda x: 2 * x, b, solve, symmetric=True,
                                          has_aux=True)
    (x, aux), (dx, daux) = jax.jvp(f, (B,), (B,))
    np.testing.assert_allclose(np.asarray(x), B / 2)
    assert float(aux) == pytest.approx(float(B.sum())) and float(daux) == 0.0
    np.testing.assert_allclose(np.asarray(jax.grad(lambda b: f(b)[0].sum())(B)), 0.5)
    tree_b = {"u": B, "v": B[:2]}
    mv = lambda x: {"u": 2 * x["u"], "v": 4 * x["v"]}
    sv = lambda m, r: {"u": r["u"] / 2, "v": r["v"] / 4}
    g = jax.grad(lambda b: sum(jnp.sum(v) for v in
                               jax.tree.leaves(lax.custom_linear_solve(mv, b, sv, sv))))(tree_b)
    np.testing.assert_allclose(np.asarray(g["u"]), 0.5)
    np.testing.assert_allclose(np.asarray(g["v"]), 0.25)


@pytest.mark.parametrize("matvec, solve, error, message", [
    (lambda x: x[:2], lambda m, r: r, ValueError,
     "matvec() output shapes must match b, got [(2,)] and [(3,)]"),
    (lambda x: x, lambda m, r: (r, r), ValueError,
     "solve() output shapes must match b, got [(3,), (3,)] and [(3,)]"),
    (lambda x: [x], lambda m, r: r, TypeError,
     "matvec() output pytree structure must match b, got PyTreeDef([*]) and PyTreeDef(*)."),
])
def test_jax_errors_for_wrong_structures(matvec, solve, error, message):
    with pytest.raises(error, match=re.escape(message)):
        lax.custom_linear_solve(matvec, B, solve)


def test_weak_types_follow_the_solve_and_linalg():
    """Weakly typed where the solve's result is; JAX's linear algebra gives a weakly typed
    result where every operand is weakly typed."""
    weak = jax.dtypes.is_weakly_typed
    assert weak(lax.custom_linear_solve(lambda x: x, jnp.asarray(1.0), lambda mv, r: r * 2))
    assert not weak(lax.custom_linear_solve(lambda x: x, jnp.float32(1.0), lambda mv, r: r))
    a = jnp.zeros_like(jnp.asarray(1.0), shape=(2, 2)).at[0, 0].set(2.0).at[1, 1].set(1.0)
    v = jnp.zeros_like(jnp.asarray(1.0), shape=(2,)) + 1.0
    assert weak(jnp.linalg.cholesky(a)) and weak(jnp.linalg.solve(a, v))
    assert weak(jax.scipy.linalg.solve(a, v, assume_a="pos"))
    assert weak(jax.scipy.linalg.solve_triangular(a, v))
    assert not weak(jnp.linalg.solve(a, np.ones(2, np.float32)))
    np.testing.assert_allclose(np.asarray(jnp.linalg.solve(a, v)), [0.5, 1.0])


def test_inside_shard_map():
    mesh = jax.make_mesh((4,), ("i",))
    put = lambda x: jax.device_put(x, jax.NamedSharding(mesh, P("i")))
    scale = np.arange(1.0, 5.0, dtype=np.float32)

    def body(s, b):
        return lax.custom_linear_solve(lambda x: s * x, b, lambda mv, r: r / s, symmetric=True)

    f = jax.shard_map(body, mesh=mesh, in_specs=(P("i"), P("i")), out_specs=P("i"))
    args = put(scale), put(np.ones(4, np.float32))
    np.testing.assert_allclose(np.asarray(jax.jit(f)(*args)), 1 / scale, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(f(*args)), 1 / scale, rtol=1e-6)
    g = jax.jit(jax.grad(lambda s, b: f(s, b).sum(), (0, 1)))(*args)
    np.testing.assert_allclose(np.asarray(g[0]), -1 / scale ** 2, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(g[1]), 1 / scale, rtol=1e-6)


# --- scipy.sparse.linalg ------------------------------------------------------------------------

from shardc.scipy.sparse import linalg as sparse_linalg  # noqa: E402

SPD5 = (lambda m: (m @ m.T + 5 * np.eye(5)).astype(np.float32))(RNG.randn(5, 5))
GEN5 = (RNG.randn(5, 5) + 5 * np.eye(5)).astype(np.float32)
B5 = RNG.randn(5).astype(np.float32)


@pytest.mark.parametrize("solver, mat", [
    ("cg", SPD5), ("bicgstab", GEN5), ("gmres", GEN5)])
@pytest.mark.parametrize("as_function", [False, True])
def test_solvers_match_numpy(solver, mat, as_function):
    operator = (lambda x: jnp.dot(mat, x)) if as_function else mat
    x, info = getattr(sparse_linalg, solver)(operator, B5, tol=1e-6)
    np.testing.assert_allclose(np.asarray(x), np.linalg.solve(mat, B5), rtol=1e-4, atol=1e-5)
    assert x.dtype == np.float32
    if solver == "gmres":
        assert int(info) == 0
    else:
        assert info is None


@pytest.mark.parametrize("method", ["batched", "incremental"])
def test_gmres_methods_restart_and_x0(method):
    x, _ = sparse_linalg.gmres(GEN5, B5, x0=np.ones(5, np.float32), restart=2, tol=1e-6,
                               solve_method=method)
    np.testing.assert_allclose(np.asarray(x), np.linalg.solve(GEN5, B5), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="invalid solve_method foo, must be either "
                                         "'incremental' or 'batched'"):
        sparse_linalg.gmres(GEN5, B5, solve_method="foo")


def test_preconditioner_pytrees_and_complex():
    jacobi = np.diag(1 / np.diag(SPD5))
    x, _ = sparse_linalg.cg(SPD5, B5, M=jacobi, tol=1e-6)
    np.testing.assert_allclose(np.asarray(x), np.linalg.solve(SPD5, B5), rtol=1e-4, atol=1e-5)
    b = {"a": B5[:2], "b": B5[2:]}
    x, _ = sparse_linalg.cg(lambda t: {"a": 3 * t["a"], "b": 2 * t["b"]}, b)
    np.testing.assert_allclose(np.asarray(x["a"]), B5[:2] / 3, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(x["b"]), B5[2:] / 2, rtol=1e-5)
    c = (RNG.randn(3, 3) + 1j * RNG.randn(3, 3) + 4 * np.eye(3)).astype(np.complex64)
    bc = (RNG.randn(3) + 1j * RNG.randn(3)).astype(np.complex64)
    for solver in (sparse_linalg.bicgstab, sparse_linalg.gmres):
        x, _ = solver(c, bc, tol=1e-6)
        assert x.dtype == np.complex64
        np.testing.assert_allclose(np.asarray(x), np.linalg.solve(c, bc), rtol=1e-4,
                                   atol=1e-5)


@pytest.mark.parametrize("solver, mat", [
    ("cg", SPD5), ("bicgstab", GEN5), ("gmres", GEN5)])
def test_gradients_in_b_and_in_the_operator(solver, mat):
    solve = getattr(sparse_linalg, solver)
    weights = np.arange(1.0, 6.0)
    gb = jax.grad(lambda b: jnp.sum(solve(mat, b, tol=1e-6)[0] * weights))(B5)
    np.testing.assert_allclose(np.asarray(gb), np.linalg.solve(mat.T, weights), rtol=1e-3,
                               atol=1e-5)
    ga = jax.jit(jax.grad(lambda a: jnp.sum(
        solve(lambda x: jnp.dot(a, x), B5, tol=1e-6)[0] * weights)))(mat)
    f64 = lambda a: float(np.sum(np.linalg.solve(a.astype(np.float64), B5) * weights))
    np.testing.assert_allclose(np.asarray(ga), _fd_grad(f64, mat), rtol=1e-2, atol=1e-4)


def test_under_vmap_and_jit():
    bs = np.stack([B5, 2 * B5])
    got = jax.jit(jax.vmap(lambda b: sparse_linalg.cg(SPD5, b, tol=1e-6)[0]))(bs)
    np.testing.assert_allclose(np.asarray(got), np.linalg.solve(SPD5, bs.T).T, rtol=1e-4,
                               atol=1e-5)


def test_jax_errors_for_bad_operators_and_guesses():
    with pytest.raises(ValueError, match=re.escape(
            "linear operator must be a square matrix, but has shape: (2, 3)")):
        sparse_linalg.cg(np.ones((2, 3)), B5)
    with pytest.raises(TypeError, match="linear operator must be either a function or "
                                        "ndarray: x"):
        sparse_linalg.cg("x", B5)
    with pytest.raises(ValueError, match=re.escape(
            "arrays in x0 and b must have matching shapes: [(4,)] vs [(5,)]")):
        sparse_linalg.cg(SPD5, B5, x0=np.ones(4))


def test_weak_types_as_jax():
    """A Python-number right-hand side gives a weakly typed solution (cg and incremental
    gmres lose it, as JAX's do)."""
    weak = jax.dtypes.is_weakly_typed
    assert weak(sparse_linalg.bicgstab(lambda x: x, 1.0)[0])
    assert weak(sparse_linalg.gmres(lambda x: x, 1.0)[0])
    assert not weak(sparse_linalg.gmres(lambda x: x, 1.0, solve_method="incremental")[0])
    assert not weak(sparse_linalg.cg(lambda x: x, 1.0)[0])


def test_module_tree_as_jax():
    import shardc.scipy.sparse.linalg as by_path
    assert jax.scipy.sparse.linalg.cg is by_path.cg is sparse_linalg.cg


def test_vmap_over_a_batch_split_on_an_explicit_axis():
    """The unbatched b is broadcast split as the batched matrix is. (JAX 0.10.2 fails here
    with an internal error, a mesh-less sharding of the batched b; the values are 1/d.)"""
    mesh = jax.make_mesh((2,), ("i",))
    d = np.arange(1.0, 9.0, dtype=np.float32).reshape(4, 2)
    split = jax.device_put(d, jax.NamedSharding(mesh, P("i")))
    b = np.ones(2, np.float32)
    f = lambda s: lax.custom_linear_solve(lambda x: s * x, b, lambda mv, r: r / s,
                                          symmetric=True)
    with jax.set_mesh(mesh):
        out = jax.jit(jax.vmap(f))(split)
        grads = jax.jit(jax.vmap(jax.grad(lambda s: f(s).sum())))(split)
    np.testing.assert_allclose(np.asarray(out), 1 / d, rtol=1e-6)
    assert out.sharding.spec == P("i", None)
    np.testing.assert_allclose(np.asarray(grads), -1 / d ** 2, rtol=1e-6)


def test_a_program_read_from_text_runs_but_its_functions_are_names():
    from compiler.ad_core import jvp_eval
    from compiler.tracing import eval_program
    from ir.parser import parse_program
    from ir.printer import print_program

    program = jax.make_jaxpr(lambda a, b: _solved(a, b, symmetric=True))(A, B).jaxpr
    text = print_program(program)
    assert "custom_linear_solve[" in text and "rules='LinearSolve(matvec, vecmat, solve, " \
        "transpose_solve)'" in text
    read = parse_program(text)
    np.testing.assert_allclose(np.asarray(eval_program(read, [A, B])[0]),
                               np.linalg.solve(A, B), rtol=1e-5)
    with pytest.raises(NotImplementedError, match="are only names here"):
        jvp_eval(read, [A, B], [A, B])
