"""Complex numbers: elementwise operations, reductions, products and collectives against
numpy; gradients against JAX 0.10.2's values and finite differences (JAX's convention: the
gradient of a real function of complex values is ``df/dx - i df/dy``); the errors JAX gives."""
from __future__ import annotations

import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from shardc import lax
from shardc.sharding import NamedSharding, PartitionSpec as P

RNG = np.random.default_rng(0)
Z = (RNG.standard_normal(8) + 1j * RNG.standard_normal(8)).astype(np.complex64)
W = (RNG.standard_normal((8, 3)) + 1j * RNG.standard_normal((8, 3))).astype(np.complex64)
X = RNG.standard_normal(8).astype(np.float32)


def check(got, want, dtype, rtol=1e-5):
    assert got.dtype == np.dtype(dtype), got.dtype
    np.testing.assert_allclose(np.asarray(got), want, rtol=rtol, atol=1e-5)


@pytest.mark.parametrize("name, fn, ref, dtype", [
    ("abs", jnp.abs, np.abs, "float32"),
    ("real", jnp.real, np.real, "float32"),
    ("imag", jnp.imag, np.imag, "float32"),
    ("conj", jnp.conj, np.conj, "complex64"),
    ("angle", jnp.angle, np.angle, "float32"),
    ("exp", jnp.exp, np.exp, "complex64"),
    ("log", jnp.log, np.log, "complex64"),
    ("sqrt", jnp.sqrt, np.sqrt, "complex64"),
    ("sin", jnp.sin, np.sin, "complex64"),
    ("tanh", jnp.tanh, np.tanh, "complex64"),
    ("square", jnp.square, np.square, "complex64"),
    ("reciprocal", lambda z: 1 / z, lambda z: 1 / z, "complex64"),
    ("power", lambda z: z ** 3, lambda z: z ** 3, "complex64"),
    ("scaled", lambda z: z * 2j + 1, lambda z: z * 2j + 1, "complex64"),
    ("iscomplex", jnp.iscomplex, np.iscomplex, "bool"),
])
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_elementwise_operations_equal_numpy(name, fn, ref, dtype, jit):
    got = (jax.jit(fn) if jit else fn)(jnp.asarray(Z))
    check(got, ref(Z), dtype, rtol=1e-4)


@pytest.mark.parametrize("name, fn, ref, dtype", [
    ("sum", lambda z: z.sum(), lambda z: z.sum(), "complex64"),
    ("mean", lambda z: z.mean(), lambda z: z.mean(), "complex64"),
    ("prod", lambda z: z[:4].prod(), lambda z: z[:4].prod(), "complex64"),
    ("dot", lambda z: jnp.dot(z, z), lambda z: np.dot(z, z), "complex64"),
    ("vdot", lambda z: jnp.vdot(z, z), lambda z: np.vdot(z, z), "complex64"),
    ("matmul", lambda z: z @ jnp.asarray(W), lambda z: z @ W, "complex64"),
    ("float plus complex", lambda z: jnp.asarray(X) + z, lambda z: X + z, "complex64"),
    ("int times 1j", lambda z: jnp.arange(8) * 1j, lambda z: np.arange(8) * 1j, "complex64"),
    ("astype", lambda z: jnp.asarray(X).astype(jnp.complex64), lambda z: X.astype(np.complex64),
     "complex64"),
    ("lax.complex", lambda z: lax.complex(jnp.asarray(X), 2 * jnp.asarray(X)),
     lambda z: X + 2j * X, "complex64"),
    ("lax.conj of real", lambda z: lax.conj(jnp.asarray(X)), lambda z: X.astype(np.complex64),
     "complex64"),
    ("linspace", lambda z: jnp.linspace(0, 1j, 5), lambda z: np.linspace(0, 1j, 5), "complex64"),
    ("where", lambda z: jnp.where(jnp.abs(z) > 1, z, 0), lambda z: np.where(np.abs(z) > 1, z, 0),
     "complex64"),
])
def test_reductions_products_and_promotion_equal_numpy(name, fn, ref, dtype):
    check(fn(jnp.asarray(Z)), ref(Z), dtype, rtol=1e-4)
    check(jax.jit(fn)(jnp.asarray(Z)), ref(Z), dtype, rtol=1e-4)


MESH = jax.make_mesh((4,), ("i",))


@pytest.mark.parametrize("name, body, out_spec, ref", [
    ("psum", lambda b: lax.psum(b * (1 - 2j), "i"), P(),
     lambda z: (z * (1 - 2j)).reshape(4, 2).sum(0)),
    ("all_gather", lambda b: lax.all_gather(jnp.conj(b), "i", tiled=True), P("i"),
     lambda z: np.tile(np.conj(z), 4)),
    ("ppermute", lambda b: lax.ppermute(b, "i", [(k, (k + 1) % 4) for k in range(4)]), P("i"),
     lambda z: np.roll(z.reshape(4, 2), 1, axis=0).reshape(8)),
    ("psum_scatter", lambda b: lax.psum_scatter(jnp.tile(b, 4), "i", tiled=True), P("i"),
     lambda z: np.tile(z.reshape(4, 2).sum(0), 4)),
])
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_collectives_move_complex_blocks(name, body, out_spec, ref, jit):
    f = jax.shard_map(body, mesh=MESH, in_specs=P("i"), out_specs=out_spec)
    z = jax.device_put(Z, NamedSharding(MESH, P("i")))
    got = (jax.jit(f) if jit else f)(z)
    check(got, ref(Z), "complex64")


def test_lowered_programs_print_complex_values_and_parse_back():
    from ir.parser import parse_module
    from ir.printer import print_module
    f = jax.jit(jax.shard_map(lambda b: lax.psum(b * (1 + 2j) + jnp.conj(b), "i"), mesh=MESH,
                              in_specs=P("i"), out_specs=P()))
    text = print_module(f.lower(jnp.asarray(Z)).module)
    assert "(1+2j):c64[]" in text and "conj" in text
    assert print_module(parse_module(text)) == text


# --- autodiff: JAX's convention -------------------------------------------------------------

@pytest.mark.parametrize("name, fn, z, want", [        # JAX 0.10.2's values
    ("|z|^2", lambda z: jnp.abs(z) ** 2, 3. + 4j, 6 - 8j),
    ("real", lambda z: jnp.real(z * (2 + 1j)), 1. + 1j, 2 + 1j),
    ("imag", lambda z: jnp.imag(z * (2 + 1j)), 1. + 1j, 1 - 2j),
    ("angle", jnp.angle, 1. + 1j, -0.5 - 0.5j),
])
def test_gradients_are_jaxs(name, fn, z, want):
    got = jax.grad(fn)(z)
    assert got.dtype == np.complex64
    np.testing.assert_allclose(complex(got), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(complex(jax.jit(jax.grad(fn))(z)), want, rtol=1e-5, atol=1e-6)


def _finite_difference(f, z, h=1e-3):
    z = np.complex128(z)
    dx = (f(z + h) - f(z - h)) / (2 * h)
    dy = (f(z + 1j * h) - f(z - 1j * h)) / (2 * h)
    return dx - 1j * dy


@pytest.mark.parametrize("name, fn, ref", [
    ("exp", lambda z: jnp.sum(jnp.abs(jnp.exp(z * 0.5))), lambda z: np.abs(np.exp(z * 0.5))),
    ("log", lambda z: jnp.sum(jnp.angle(jnp.log(z + 3))), lambda z: np.angle(np.log(z + 3))),
    ("product", lambda z: jnp.sum(jnp.real(z * jnp.conj(z) * (1 + 1j) + z ** 2)),
     lambda z: np.real(z * np.conj(z) * (1 + 1j) + z ** 2)),
    ("division", lambda z: jnp.sum(jnp.imag(1 / (z + 2))), lambda z: np.imag(1 / (z + 2))),
    ("sqrt", lambda z: jnp.sum(jnp.abs(jnp.sqrt(z + 3)) ** 3),
     lambda z: np.abs(np.sqrt(z + 3)) ** 3),
])
def test_gradients_equal_finite_differences(name, fn, ref):
    points = Z[:4].astype(np.complex64)
    got = np.asarray(jax.grad(fn)(jnp.asarray(points)))
    want = [_finite_difference(ref, z) for z in points]
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)


def test_gradients_through_real_inputs_and_complex_parts():
    assert float(jax.grad(lambda x: jnp.abs(x * (1 + 1j)) ** 2)(1.0)) == pytest.approx(4.0)
    ga, gb = jax.grad(lambda a, b: jnp.abs(lax.complex(a, b)) ** 2, argnums=(0, 1))(1., 2.)
    assert (float(ga), float(gb)) == pytest.approx((2.0, 4.0))


def test_holomorphic_gradients_jvp_and_vjp():
    np.testing.assert_allclose(complex(jax.grad(lambda z: z * z, holomorphic=True)(1. + 1j)),
                               2 + 2j)
    out, tangent = jax.jvp(lambda z: jnp.conj(z) * z, (1. + 2j,), (1j,))
    np.testing.assert_allclose([complex(out), complex(tangent)], [5, 4])
    (ct,) = jax.vjp(lambda z: z * (1 + 2j), 1. + 1j)[1](1. + 0j)
    np.testing.assert_allclose(complex(ct), 1 + 2j)


def test_grad_errors_are_jaxs():
    with pytest.raises(TypeError, match=r"grad requires real-valued outputs \(output dtype that is "
                                        r"a sub-dtype of np.floating\), but got complex64. For "
                                        r"holomorphic differentiation, pass holomorphic=True"):
        jax.grad(lambda z: z * z)(1. + 1j)
    with pytest.raises(TypeError, match="grad with holomorphic=True requires inputs with complex "
                                        "dtype, but got float32."):
        jax.grad(lambda x: x * 1j, holomorphic=True)(1.)
    with pytest.raises(TypeError, match="grad with holomorphic=True requires outputs with "
                                        "complex dtype, but got float32."):
        jax.grad(jnp.abs, holomorphic=True)(1. + 1j)
    with pytest.raises(TypeError, match="but got int32. For differentiation of functions with "
                                        "integer outputs, use jax.vjp directly."):
        jax.grad(lambda x: jnp.int32(3), allow_int=True)(1.)


def test_lax_refuses_what_jax_refuses():
    with pytest.raises(TypeError, match="real does not accept dtype float32. Accepted dtypes are "
                                        "subtypes of complexfloating."):
        lax.real(jnp.asarray(X))
    with pytest.raises(TypeError, match="floor does not accept dtype complex64. Accepted dtypes "
                                        "are subtypes of floating."):
        lax.floor(jnp.asarray(Z))


# --- products in a preferred dtype, and other API corners -------------------------------------

def test_products_accumulate_in_the_preferred_dtype():
    bf = jnp.ones((2, 3), jnp.bfloat16)
    for fn in (lambda a: jnp.matmul(a, a.T, preferred_element_type=jnp.float32),
               lambda a: jnp.dot(a, a.T, preferred_element_type=jnp.float32),
               lambda a: jnp.einsum("ij,kj->ik", a, a, preferred_element_type=jnp.float32)):
        for f in (fn, jax.jit(fn)):
            out = f(bf)
            assert out.dtype == np.float32
            np.testing.assert_array_equal(np.asarray(out), np.full((2, 2), 3.0))
    out = lax.dot_general(jnp.ones((2, 3)), jnp.ones((3, 2)), (((1,), (0,)), ((), ())),
                          precision=lax.Precision.HIGHEST)
    np.testing.assert_array_equal(np.asarray(out), np.full((2, 2), 3.0))


def test_approx_top_k_repeat_lengths_and_linear_transpose():
    values, indices = lax.approx_max_k(jnp.array([3., 1., 4., 1., 5.]), 2)
    np.testing.assert_array_equal(np.asarray(values), [5, 4])
    np.testing.assert_array_equal(np.asarray(indices), [4, 2])
    values, indices = lax.approx_min_k(jnp.array([[3., 1., 4.], [1., 5., 9.]]), 2)
    np.testing.assert_array_equal(np.asarray(values), [[1, 3], [1, 5]])
    assert indices.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(
        jnp.repeat(jnp.arange(3), jnp.array([1, 2, 1]), total_repeat_length=5)), [0, 1, 1, 2, 2])
    traced = jax.jit(lambda r: jnp.repeat(jnp.arange(3), r, total_repeat_length=4))
    np.testing.assert_array_equal(np.asarray(traced(jnp.array([1, 2, 1]))), [0, 1, 1, 2])
    grid = np.arange(6).reshape(2, 3)
    np.testing.assert_array_equal(np.asarray(jnp.repeat(grid, np.array([2, 0, 1]), axis=1)),
                                  np.repeat(grid, [2, 0, 1], axis=1))
    transposed = jax.linear_transpose(lambda x: (2 * x, x.sum()), jnp.ones(3))
    (ct,) = transposed((jnp.arange(3.), 1.))
    np.testing.assert_array_equal(np.asarray(ct), [1, 3, 5])
    (ct,) = jax.linear_transpose(lambda z: z * (1 + 2j),
                                 jax.ShapeDtypeStruct((), np.complex64))(1. + 0j)
    assert complex(ct) == 1 + 2j


ZM = np.array([[1 + 2j, 3 - 1j], [-2 + 0.5j, 0.5 - 3j]], np.complex64)


@pytest.mark.parametrize("name, fn, ref, dtype", [
    ("var", lambda z: jnp.var(z), lambda z: np.var(z), "float32"),
    ("std", lambda z: jnp.std(z, axis=0), lambda z: np.std(z, axis=0), "float32"),
    ("sort", lambda z: jnp.sort(z.ravel()), lambda z: np.sort(z.ravel()), "complex64"),
    ("argsort", lambda z: jnp.argsort(z.ravel()), lambda z: np.argsort(z.ravel()), "int32"),
    ("unique", lambda z: jnp.unique(z), lambda z: np.unique(z), "complex64"),
    ("eigvalsh", lambda z: jnp.linalg.eigvalsh(z @ jnp.conj(z.T)),
     lambda z: np.linalg.eigvalsh(z @ np.conj(z.T)), "float32"),
    ("cholesky", lambda z: jnp.linalg.cholesky(z @ jnp.conj(z.T) + 3 * jnp.eye(2)),
     lambda z: np.linalg.cholesky(z @ np.conj(z.T) + 3 * np.eye(2)), "complex64"),
    ("det", jnp.linalg.det, np.linalg.det, "complex64"),
    ("inv", jnp.linalg.inv, np.linalg.inv, "complex64"),
    ("round", lambda z: jnp.round(z * 1.37, 1), lambda z: np.round(z * 1.37, 1), "complex64"),
    ("isfinite", lambda z: jnp.isfinite(z.at[0, 0].set(complex(1, np.inf))),
     lambda z: np.isfinite(np.where(np.eye(2, dtype=bool) & [[1, 0], [0, 0]],
                                    complex(1, np.inf), z)), "bool"),
    ("nan_to_num", lambda z: jnp.nan_to_num(z.at[1, 1].set(complex(np.nan, np.inf))),
     lambda z: np.nan_to_num(np.where([[0, 0], [0, 1]], complex(np.nan, np.inf), z)),
     "complex64"),
])
def test_statistics_sorting_and_decompositions_of_complex_values(name, fn, ref, dtype):
    got = fn(jnp.asarray(ZM))
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_allclose(np.asarray(got), ref(ZM), rtol=1e-4, atol=1e-4)


def test_matrix_gradients_of_complex_matrices_follow_jax():
    # d/dz of sum(eigvalsh(h)) = d trace(h) is the identity (jax.grad's conjugate convention)
    h = jnp.asarray(ZM @ np.conj(ZM.T) + 3 * np.eye(2, dtype=np.complex64))
    grad = jax.grad(lambda a: jnp.linalg.eigvalsh(a).sum())(h)
    np.testing.assert_allclose(np.asarray(grad), np.eye(2), atol=1e-5)
    # sum(s) of svd is the nuclear norm: its gradient is conj(U V^H)
    u, _, vh = np.linalg.svd(ZM)
    grad = jax.grad(lambda a: jnp.linalg.svd(a, compute_uv=False).sum())(jnp.asarray(ZM))
    np.testing.assert_allclose(np.asarray(grad), np.conj(u @ vh), rtol=1e-4, atol=1e-4)


def test_lax_complex_places_the_parts_as_they_are():
    # re + 1j * im would make (1, inf) NaN + inf j and lose the sign of -0.0
    z = np.asarray(lax.complex(np.float32([-0.0, 1.0, np.nan]), np.float32([0.0, np.inf, 2.0])))
    assert z.dtype == np.complex64
    assert np.signbit(z.real[0]) and z[1].real == 1.0 and z[1].imag == np.inf
    assert np.isnan(z[2].real) and z[2].imag == 2.0
    assert np.asarray(jax.jit(lax.complex)(np.float32(-0.0), np.float32(1.0))).real == 0.0


def test_slogdet_of_complex_matrices_gives_a_real_log_magnitude():
    a = np.array([[1 + 1j, 2.0], [0.0, 3j]], np.complex64)
    sign, logabsdet = jnp.linalg.slogdet(a)
    assert sign.dtype == np.complex64 and logabsdet.dtype == np.float32
    want_sign, want_log = np.linalg.slogdet(a.astype(np.complex128))
    np.testing.assert_allclose(np.asarray(sign), want_sign, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(logabsdet), want_log, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(jnp.linalg.det(a)), np.linalg.det(a), rtol=1e-6)


def test_pow_of_a_zero_base_is_nan_for_an_exponent_with_an_imaginary_part():
    """XLA's complex pow at a zero base: 1 for exponent 0, 0 for a positive real exponent,
    nan otherwise (numpy gives 0 for 0 ** (0.5+0.5j); JAX 0.10.2 gives nan)."""
    exponents = np.array([0, 2, 0.5, -1, 1j, 0.5 + 0.5j, np.inf, complex(np.inf, 1)],
                         np.complex64)
    got = np.asarray(lax.pow(np.zeros(8, np.complex64), exponents))
    nan = complex(np.nan, np.nan)
    np.testing.assert_array_equal(got, np.array([1, 0, 0, nan, nan, nan, 0, nan], np.complex64))
