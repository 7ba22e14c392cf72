"""``nn.initializers``' ``out_sharding=`` keyword, as JAX 0.10.2's: every initializer lays its
result out as asked (the values those of the same draw unsplit), under jit too; orthogonal
ones refuse it; JAX's errors for what is not a sharding or a spec off a mesh. And the
initializers JAX has besides: ``delta_orthogonal``, ``variance_scaling``'s ``fan_geo_avg``."""
from __future__ import annotations

import numpy as np
import pytest

import shardc
import shardc.numpy as jnp
from shardc import nn, random
from shardc.sharding import AxisType, NamedSharding
from shardc.sharding import PartitionSpec as P

I = nn.initializers
KEY = random.key(0)
INITIALIZERS = {
    "zeros": I.zeros, "ones": I.ones, "constant": I.constant(-0.5), "normal": I.normal(0.1),
    "uniform": I.uniform(2.0), "truncated_normal": I.truncated_normal(0.5),
    "glorot_uniform": I.glorot_uniform(), "glorot_normal": I.glorot_normal(),
    "lecun_normal": I.lecun_normal(), "he_uniform": I.he_uniform(),
    "variance_scaling": I.variance_scaling(2.0, "fan_out", "normal"),
}


def padded(spec, ndim):
    return tuple(spec) + (None,) * (ndim - len(spec))


def explicit_mesh():
    return shardc.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)


@pytest.mark.parametrize("name", sorted(INITIALIZERS))
@pytest.mark.parametrize("spec", [P("x"), P("x", "y"), P(None, "y")])
def test_out_sharding_lays_out_the_same_draw(name, spec):
    init = INITIALIZERS[name]
    mesh = explicit_mesh()
    unsplit = np.asarray(init(KEY, (8, 6)))
    with shardc.set_mesh(mesh):
        split = init(KEY, (8, 6), out_sharding=spec)
        jitted = shardc.jit(lambda k: init(k, (8, 6), jnp.float32, out_sharding=spec))(KEY)
    named = init(KEY, (8, 6), out_sharding=NamedSharding(mesh, spec))
    for result in (split, jitted, named):
        assert result.shape == (8, 6) and result.dtype == np.float32
        assert padded(result.sharding.spec, 2) == padded(spec, 2)
        np.testing.assert_allclose(np.asarray(result), unsplit, rtol=1e-6, atol=1e-7)


def test_out_sharding_keeps_the_dtype_and_none_changes_nothing():
    with shardc.set_mesh(explicit_mesh()):
        w = I.uniform(2.0)(KEY, (8, 4), jnp.bfloat16, out_sharding=P("x", "y"))
        conv = I.he_normal()(KEY, (3, 3, 8, 4), out_sharding=P(None, None, "x"))
    assert w.dtype == jnp.bfloat16 and padded(w.sharding.spec, 2) == ("x", "y")
    assert padded(conv.sharding.spec, 4) == (None, None, "x", None)
    np.testing.assert_array_equal(np.asarray(I.normal()(KEY, (4,), out_sharding=None)),
                                  np.asarray(I.normal()(KEY, (4,))))


def test_out_sharding_errors_are_jaxs():
    with shardc.set_mesh(explicit_mesh()):
        for name, init in (("orthogonal", I.orthogonal()),
                           ("delta_orthogonal", I.delta_orthogonal())):
            with pytest.raises(NotImplementedError, match=name):
                init(KEY, (3, 8, 8), out_sharding=P("x"))
        with pytest.raises(TypeError, match="`out_sharding` argument of normal only supports "
                                            "instances of `NamedSharding` or `PartitionSpec`"):
            I.normal()(KEY, (8, 4), out_sharding="x")
        with pytest.raises(TypeError, match="`out_sharding` argument of "
                                            "nn.initializers.constant only supports"):
            I.constant(1.0)(KEY, (8, 4), out_sharding=3)
        with pytest.raises(ValueError):          # 6 rows do not split in 4
            I.normal()(KEY, (6, 4), out_sharding=P("x"))
    with pytest.raises(ValueError, match="PartitionSpec"):
        I.normal()(KEY, (8, 4), out_sharding=P("x"))


def test_delta_orthogonal_is_an_orthogonal_matrix_at_the_window_centre():
    for shape in ((3, 4, 5), (3, 5, 4, 6), (2, 3, 3, 4, 4)):
        w = np.asarray(I.delta_orthogonal(scale=2.0)(KEY, shape))
        assert w.shape == shape and w.dtype == np.float32
        centre = tuple((k - 1) // 2 for k in shape[:-2])
        block = w[centre]
        np.testing.assert_allclose(block @ block.T, 4.0 * np.eye(shape[-2]), atol=1e-5)
        rest = w.copy()
        rest[centre] = 0
        assert not rest.any()
    with pytest.raises(ValueError, match="requires a 3D, 4D or 5D shape"):
        I.delta_orthogonal()(KEY, (3, 3))
    with pytest.raises(ValueError, match="`fan_in` must be less or equal than `fan_out`"):
        I.delta_orthogonal()(KEY, (3, 5, 4))


def test_fan_geo_avg_scales_by_the_geometric_mean_of_the_fans():
    w = np.asarray(I.variance_scaling(1.0, "fan_geo_avg", "normal")(KEY, (400, 100)))
    assert abs(w.std() - np.sqrt(1.0 / 200.0)) < 0.002


def test_like_constructors_of_a_shape_dtype_struct_take_its_sharding():
    """JAX's issue 20390: ``zeros_like`` of a ShapeDtypeStruct with a sharding is laid out by
    that sharding (another shape asked for is not)."""
    from shardc.sharding import AxisType
    mesh = shardc.make_mesh((2, 1), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    s = NamedSharding(mesh, P("x", "y"))
    x = shardc.ShapeDtypeStruct((4, 4), jnp.float32, sharding=s)
    y = jnp.zeros_like(x)
    assert y.sharding == s and jnp.zeros_like(x, device=y.sharding).sharding == s
    np.testing.assert_array_equal(y, np.zeros((4, 4), np.float32))
    other = jnp.ones_like(x, shape=(3,))
    assert other.sharding == shardc.sharding.SingleDeviceSharding(shardc.devices()[0])
    np.testing.assert_array_equal(other, np.ones(3, np.float32))
