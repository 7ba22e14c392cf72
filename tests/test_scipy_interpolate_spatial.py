"""jax.scipy.interpolate.RegularGridInterpolator and jax.scipy.spatial.transform's Rotation and
Slerp against scipy's, over random grids, points, methods, fill values, quaternions, Euler
sequences and degrees flags; under jit, vmap and grad; and each error JAX raises."""
import warnings

import numpy as np
import pytest
import scipy.interpolate as sp_interpolate
from scipy.spatial.transform import Rotation as SpRotation
from scipy.spatial.transform import Slerp as SpSlerp

import shardc as jax
import shardc.numpy as jnp
import shardc.scipy.interpolate
import shardc.scipy.spatial.transform
from shardc.scipy.interpolate import RegularGridInterpolator
from shardc.scipy.spatial.transform import Rotation, Slerp

RNG = np.random.default_rng(0)
TOL = dict(rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- RegularGridInterpolator

def _random_grid(sizes):
    """Strictly increasing, unevenly spaced axes."""
    return tuple(np.sort(RNG.uniform(-3, 3, size)) + np.arange(size) * 1e-3 for size in sizes)


def _queries(grid, count, margin=0.3):
    """Points spread over the grid's box widened by ``margin`` of each side (some outside)."""
    columns = [RNG.uniform(g[0] - margin * (g[-1] - g[0]), g[-1] + margin * (g[-1] - g[0]),
                           count) for g in grid]
    return np.stack(columns, axis=-1)


@pytest.mark.parametrize("sizes,trailing", [((7,), ()), ((5, 6), ()), ((4, 3, 5), ()),
                                            ((5, 4), (2,)), ((3,), (2, 3))])
@pytest.mark.parametrize("method", ["linear", "nearest"])
@pytest.mark.parametrize("fill_value", [np.nan, None, -2.5])
def test_interpolator_matches_scipy(sizes, trailing, method, fill_value):
    grid = _random_grid(sizes)
    values = RNG.normal(size=sizes + trailing)
    xi = _queries(grid, 40)
    expected = sp_interpolate.RegularGridInterpolator(grid, values, method=method,
                                                       bounds_error=False,
                                                       fill_value=fill_value)(xi)
    got = RegularGridInterpolator(grid, values, method=method, fill_value=fill_value)(xi)
    assert got.shape == expected.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, **TOL)


@pytest.mark.parametrize("method", ["linear", "nearest"])
def test_point_layouts_and_method_override(method):
    grid = _random_grid((5, 6))
    values = RNG.normal(size=(5, 6))
    reference = sp_interpolate.RegularGridInterpolator(grid, values, method=method,
                                                        bounds_error=False)
    interpolator = RegularGridInterpolator(grid, values, method="linear")
    xi = _queries(grid, 12).reshape(3, 4, 2)
    np.testing.assert_allclose(interpolator(xi, method=method), reference(xi), **TOL)
    # a tuple of coordinate arrays, broadcast against each other
    xs, ys = xi[..., 0], xi[0, 0, 1]
    np.testing.assert_allclose(interpolator((xs, ys), method=method),
                               reference((xs, np.full_like(xs, ys))), **TOL)
    # a 1-D array holds whole points
    np.testing.assert_allclose(interpolator(xi.reshape(-1), method=method),
                               reference(xi.reshape(-1, 2)), **TOL)


def test_nearest_takes_the_lower_corner_at_a_tie():
    interpolator = RegularGridInterpolator((np.array([0., 1., 2.]),), np.array([10., 20., 30.]),
                                           method="nearest")
    np.testing.assert_array_equal(interpolator(np.array([0.5, 1.5, 1.6])), [10., 20., 30.])


def test_interpolator_dtypes():
    grid = (np.linspace(0, 1, 4), np.linspace(-1, 2, 5))
    point = np.array([[0.5, 0.5]])
    ints = RegularGridInterpolator(grid, np.arange(20).reshape(4, 5))(point)
    assert ints.dtype == np.float32
    halves = np.arange(20.).reshape(4, 5).astype(np.float16)
    # linear weights follow the query's dtype; nearest keeps the values'
    assert RegularGridInterpolator(grid, halves)(point).dtype == np.float32
    assert RegularGridInterpolator(grid, halves, "nearest")(point).dtype == np.float16
    strong_fill = RegularGridInterpolator(grid, halves, "nearest", fill_value=np.float64(2))
    assert strong_fill(point).dtype == np.float32
    half_grid = tuple(g.astype(np.float16) for g in grid)
    assert RegularGridInterpolator(half_grid, halves)(point.astype(np.float16)).dtype == \
        np.float16


def test_interpolator_is_a_pytree_under_jit_and_vmap():
    grid = _random_grid((5, 4))
    values = RNG.normal(size=(3, 5, 4))
    xi = _queries(grid, 10)
    interpolators = [RegularGridInterpolator(grid, v) for v in values]
    leaves, treedef = jax.tree_util.tree_flatten(interpolators[0])
    assert len(leaves) == 4                      # two axes, the values, the fill value
    assert jax.tree_util.tree_unflatten(treedef, leaves).method == "linear"
    assert len(jax.tree_util.tree_leaves(RegularGridInterpolator(grid, values[0],
                                                                  fill_value=None))) == 3
    expected = np.stack([sp_interpolate.RegularGridInterpolator(grid, v, bounds_error=False,
                                                                fill_value=None)(xi)
                         for v in values])
    filled = sp_interpolate.RegularGridInterpolator(grid, values[1], bounds_error=False)(xi)
    np.testing.assert_allclose(jax.jit(lambda f, p: f(p))(interpolators[1], xi), filled, **TOL)
    batched_values = jax.vmap(lambda v: RegularGridInterpolator(grid, v, fill_value=None)(xi))
    np.testing.assert_allclose(batched_values(jnp.asarray(values)), expected, **TOL)
    per_point = jax.vmap(lambda p: interpolators[2](p[None])[0])(xi)
    np.testing.assert_allclose(per_point, interpolators[2](xi), **TOL)
    built_inside = jax.jit(lambda g0, g1, v, p: RegularGridInterpolator((g0, g1), v,
                                                                      "nearest")(p))
    np.testing.assert_allclose(built_inside(*grid, values[0], xi),
                               RegularGridInterpolator(grid, values[0], "nearest")(xi), **TOL)


def test_interpolator_gradient_matches_finite_differences():
    grid = _random_grid((5, 6))
    values = RNG.normal(size=(5, 6))
    interpolator = RegularGridInterpolator(grid, values)
    point = np.array([grid[0][1] * 0.6 + grid[0][2] * 0.4, grid[1][3] * 0.3 + grid[1][4] * 0.7])
    gradient = jax.grad(lambda p: interpolator(p[None])[0])(jnp.asarray(point))
    reference = sp_interpolate.RegularGridInterpolator(grid, values, bounds_error=False)
    step = 1e-4
    for axis in range(2):
        offset = np.eye(2)[axis] * step
        slope = (reference(point + offset) - reference(point - offset))[0] / (2 * step)
        np.testing.assert_allclose(gradient[axis], slope, rtol=1e-3, atol=1e-3)


GRID = (np.linspace(0, 1, 4), np.linspace(-1, 2, 5))
VALUES = np.arange(20.).reshape(4, 5)


@pytest.mark.parametrize("make,error,message", [
    (lambda: RegularGridInterpolator(GRID, VALUES, method="cubic"), ValueError,
     "method 'cubic' is not defined"),
    (lambda: RegularGridInterpolator(GRID, VALUES, bounds_error=True), NotImplementedError,
     "`bounds_error` takes no effect under JIT"),
    (lambda: RegularGridInterpolator(GRID, VALUES.tolist()), TypeError,
     "RegularGridInterpolator requires ndarray or scalar arguments, got <class 'list'> at "
     "position 0."),
    (lambda: RegularGridInterpolator(GRID + (np.arange(2.),), VALUES), ValueError,
     "there are 3 point arrays, but values has 2 dimensions"),
    (lambda: RegularGridInterpolator(GRID, VALUES, fill_value=1j), ValueError,
     "fill_value must be either 'None' or of a type compatible with values"),
    (lambda: RegularGridInterpolator(([0., 1., 2., 3.], GRID[1]), VALUES), TypeError,
     "RegularGridInterpolator requires ndarray or scalar arguments, got <class 'list'> at "
     "position 0."),
    (lambda: RegularGridInterpolator(GRID, VALUES)(np.ones((1, 2)), method="cubic"),
     ValueError, "method 'cubic' is not defined"),
    (lambda: RegularGridInterpolator(GRID, VALUES)([[0.1, 0.2]]), TypeError,
     "_ndim_coords_from_arrays requires ndarray or scalar arguments, got <class 'list'> at "
     "position 0."),
    (lambda: RegularGridInterpolator(GRID, VALUES)(np.ones((2, 3))), ValueError,
     "the requested sample points xi have dimension 3, but this RegularGridInterpolator has "
     "dimension 2"),
])
def test_interpolator_errors(make, error, message):
    with pytest.raises(error) as caught:
        make()
    assert str(caught.value) == message


# ---------------------------------------------------------------- Rotation

def _random_quats(count):
    return RNG.normal(size=(count, 4))


@pytest.mark.parametrize("shape", [(4,), (6, 4)])
def test_quaternion_conversions_match_scipy(shape):
    quat = RNG.normal(size=shape)
    ours, theirs = Rotation.from_quat(quat.astype(np.float32)), SpRotation.from_quat(quat)
    assert ours.single == theirs.single
    np.testing.assert_allclose(ours.as_quat(), theirs.as_quat(), **TOL)
    np.testing.assert_allclose(ours.as_quat(canonical=True), theirs.as_quat(canonical=True),
                               **TOL)
    np.testing.assert_allclose(ours.as_quat(scalar_first=True),
                               theirs.as_quat(scalar_first=True), **TOL)
    np.testing.assert_allclose(ours.as_matrix(), theirs.as_matrix(), **TOL)
    np.testing.assert_allclose(ours.as_mrp(), theirs.as_mrp(), **TOL)
    np.testing.assert_allclose(ours.magnitude(), theirs.magnitude(), **TOL)
    np.testing.assert_allclose(ours.inv().as_quat(), theirs.inv().as_quat(), **TOL)
    for degrees in (False, True):
        np.testing.assert_allclose(ours.as_rotvec(degrees=degrees),
                                   theirs.as_rotvec(degrees=degrees), rtol=1e-4, atol=1e-3)
    assert ours.as_matrix().dtype == np.float32


def test_canonical_form_breaks_ties_in_order_w_x_y_z():
    quat = np.array([[0., -1., 0., 0.], [0., 0., -1., 0.], [0., 0., 0., -1.],
                     [0., 0.6, -0.8, 0.], [-0.3, 0.1, 0.2, 0.]])
    np.testing.assert_allclose(Rotation.from_quat(quat).as_quat(canonical=True),
                               SpRotation.from_quat(quat).as_quat(canonical=True), **TOL)


def test_other_representations_match_scipy():
    reference = SpRotation.random(8, random_state=1)
    matrices = reference.as_matrix()
    np.testing.assert_allclose(Rotation.from_matrix(matrices).as_quat(canonical=True),
                               reference.as_quat(canonical=True), **TOL)
    np.testing.assert_allclose(Rotation.from_matrix(matrices[0]).as_matrix(), matrices[0],
                               **TOL)
    mrp = RNG.normal(size=(5, 3))
    np.testing.assert_allclose(Rotation.from_mrp(mrp).as_quat(),
                               SpRotation.from_mrp(mrp).as_quat(), **TOL)
    rotvecs = np.concatenate([RNG.normal(size=(5, 3)), RNG.normal(size=(2, 3)) * 1e-4])
    for degrees, scale in ((False, 1.), (True, 60.)):
        np.testing.assert_allclose(Rotation.from_rotvec(rotvecs * scale, degrees).as_quat(),
                                   SpRotation.from_rotvec(rotvecs * scale, degrees).as_quat(),
                                   **TOL)
    np.testing.assert_allclose(Rotation.identity().as_quat(), [0., 0., 0., 1.])
    assert Rotation.identity(dtype=jnp.float16).quat.dtype == np.float16


EULER_SEQS = ["xyz", "xzy", "yxz", "yzx", "zxy", "zyx", "xyx", "xzx", "yxy", "yzy", "zxz",
              "zyz"]
EULER_SEQS = EULER_SEQS + [seq.upper() for seq in EULER_SEQS]


@pytest.mark.parametrize("seq", EULER_SEQS)
@pytest.mark.parametrize("degrees", [False, True])
def test_euler_angles_match_scipy(seq, degrees):
    quat = _random_quats(6)
    np.testing.assert_allclose(Rotation.from_quat(quat).as_euler(seq, degrees=degrees),
                               SpRotation.from_quat(quat).as_euler(seq, degrees=degrees),
                               rtol=1e-4, atol=1e-2 if degrees else 1e-4)
    angles = RNG.uniform(-np.pi, np.pi, size=(6, 3)) * (180 / np.pi if degrees else 1)
    np.testing.assert_allclose(Rotation.from_euler(seq, angles, degrees).as_matrix(),
                               SpRotation.from_euler(seq, angles, degrees).as_matrix(), **TOL)


@pytest.mark.parametrize("seq", ["x", "Y", "xz", "ZX"])
def test_short_euler_sequences_match_scipy(seq):
    angles = RNG.uniform(-2, 2, size=(3, len(seq)))
    np.testing.assert_allclose(Rotation.from_euler(seq, angles).as_quat(),
                               SpRotation.from_euler(seq, angles).as_quat(), **TOL)
    single = Rotation.from_euler(seq, angles[0])
    assert single.single
    np.testing.assert_allclose(single.as_quat(), SpRotation.from_euler(seq, angles[0]).as_quat(),
                               **TOL)


@pytest.mark.parametrize("seq", EULER_SEQS)
def test_gimbal_lock_zeroes_the_third_angle_as_scipy(seq):
    proper = seq[0].lower() == seq[2].lower()
    for middle in ([0., np.pi] if proper else [np.pi / 2, -np.pi / 2]):
        angles = np.array([[0.3, middle, 0.7], [-1.2, middle, 0.4]])
        quat = SpRotation.from_euler(seq, angles).as_quat()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")                  # scipy warns of gimbal lock
            expected = SpRotation.from_quat(quat).as_euler(seq)
        got = np.asarray(Rotation.from_quat(quat.astype(np.float32)).as_euler(seq))
        # JAX wraps every angle into [-pi, pi), so a middle angle of pi reads -pi
        difference = (got - expected + np.pi) % (2 * np.pi) - np.pi
        np.testing.assert_allclose(difference, 0, atol=1e-4)


def test_composition_application_and_indexing_match_scipy():
    p, q = _random_quats(5), _random_quats(5)
    ours_p, ours_q = Rotation.from_quat(p), Rotation.from_quat(q)
    theirs_p, theirs_q = SpRotation.from_quat(p), SpRotation.from_quat(q)
    np.testing.assert_allclose((ours_p * ours_q).as_matrix(), (theirs_p * theirs_q).as_matrix(),
                               **TOL)
    np.testing.assert_allclose((ours_p[0] * ours_q).as_matrix(),
                               (theirs_p[0] * theirs_q).as_matrix(), **TOL)
    vectors = RNG.normal(size=(5, 3))
    for inverse in (False, True):
        np.testing.assert_allclose(ours_p.apply(vectors, inverse=inverse),
                                   theirs_p.apply(vectors, inverse=inverse), **TOL)
        np.testing.assert_allclose(ours_p.apply(vectors[0], inverse=inverse),
                                   theirs_p.apply(vectors[0], inverse=inverse), **TOL)
        np.testing.assert_allclose(ours_p[1].apply(vectors, inverse=inverse),
                                   theirs_p[1].apply(vectors, inverse=inverse), **TOL)
    assert len(ours_p) == 5 and not ours_p.single and ours_p[2].single
    np.testing.assert_allclose(ours_p[1:4].as_quat(), theirs_p[1:4].as_quat(), **TOL)
    both = Rotation.concatenate([ours_p, ours_q[:2]])
    np.testing.assert_allclose(both.as_quat(),
                               SpRotation.concatenate([theirs_p, theirs_q[:2]]).as_quat(), **TOL)


@pytest.mark.parametrize("weighted", [False, True])
def test_mean_matches_scipy(weighted):
    quat = SpRotation.from_rotvec(RNG.normal(size=(6, 3)) * 0.4).as_quat()
    weights = RNG.uniform(0.1, 2, size=6) if weighted else None
    got = Rotation.from_quat(quat).mean(weights)
    assert got.single
    np.testing.assert_allclose(got.as_matrix(), SpRotation.from_quat(quat).mean(weights)
                               .as_matrix(), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("times", [0.4, np.array([0., 0.5, 1.7, 3.]), np.array([2.2])])
def test_slerp_matches_scipy(times):
    key_times = np.array([0., 1., 2.5, 3.])
    quat = _random_quats(4)
    slerp = Slerp.init(key_times, Rotation.from_quat(quat))
    expected = SpSlerp(key_times, SpRotation.from_quat(quat))(times)
    got = slerp(times)
    assert got.single == expected.single
    np.testing.assert_allclose(got.as_matrix(), expected.as_matrix(), **TOL)
    assert slerp.timedelta.shape == (3,) and slerp.rotvecs.shape == (3, 3)


def test_dtypes_follow_the_inputs():
    quat = RNG.normal(size=(2, 4))
    assert Rotation.from_quat(quat.astype(np.float16)).as_euler("zxz").dtype == np.float16
    assert Rotation.from_euler("z", 90, degrees=True).quat.dtype == np.float32
    assert Rotation.from_quat(np.array([0, 0, 0, 2])).quat.dtype == np.float32
    assert Rotation.from_quat(quat).apply(np.ones(3, np.int32)).dtype == np.float32
    angles = jnp.array([[1, 2, 3]], jnp.bfloat16)
    assert Rotation.from_euler("xyz", angles).quat.dtype == jnp.bfloat16


def test_rotation_and_slerp_are_namedtuple_pytrees():
    rotation = Rotation.from_quat(_random_quats(3))
    assert isinstance(rotation, tuple) and rotation._fields == ("quat",)
    leaves, treedef = jax.tree_util.tree_flatten(rotation)
    assert len(leaves) == 1 and jax.tree_util.tree_unflatten(treedef, leaves) == rotation
    slerp = Slerp.init(np.arange(3.), rotation)
    assert Slerp._fields == ("times", "timedelta", "rotations", "rotvecs")
    assert isinstance(slerp.rotations, Rotation)
    assert len(jax.tree_util.tree_leaves(slerp)) == 4
    doubled = jax.tree_util.tree_map(lambda x: x * 1, slerp)
    assert isinstance(doubled, Slerp) and isinstance(doubled.rotations, Rotation)


def test_rotation_under_jit_vmap_and_grad():
    quat = _random_quats(4)
    vectors = RNG.normal(size=(4, 3))
    reference = SpRotation.from_quat(quat)
    apply = jax.jit(lambda q, v, inverse: Rotation.from_quat(q).apply(v, inverse))
    np.testing.assert_allclose(apply(quat, vectors, True), reference.apply(vectors, True),
                               **TOL)
    euler = jax.jit(lambda q, degrees: Rotation.from_quat(q).as_euler("ZXY", degrees))
    np.testing.assert_allclose(euler(quat, True), reference.as_euler("ZXY", True), rtol=1e-4,
                               atol=1e-2)
    np.testing.assert_allclose(jax.vmap(lambda q: Rotation.from_quat(q).as_euler("zyz"))(quat),
                               reference.as_euler("zyz"), **TOL)
    np.testing.assert_allclose(jax.vmap(lambda r: r.as_matrix())(Rotation.from_quat(quat)),
                               reference.as_matrix(), **TOL)
    np.testing.assert_allclose(
        jax.jit(lambda r, t: Slerp.init(jnp.arange(4.), r)(t).as_rotvec())(
            Rotation.from_quat(quat), 1.3),
        SpSlerp(np.arange(4.), reference)(1.3).as_rotvec(), **TOL)
    # the rotation vector survives a round trip, so its gradient is the identity (zero too)
    for rotvec in (jnp.zeros(3), jnp.array([0.3, -0.2, 0.5])):
        gradient = jax.grad(lambda v: Rotation.from_rotvec(v).as_rotvec().sum())(rotvec)
        np.testing.assert_allclose(gradient, np.ones(3), **TOL)


def _angle_error(rotvec):
    """A scalar function of a rotation vector, for the finite-difference check."""
    target = Rotation.from_euler("xyz", jnp.array([0.2, -0.4, 0.9]))
    return (Rotation.from_rotvec(rotvec) * target).as_euler("XYZ")[1]


def test_rotation_gradient_matches_finite_differences():
    rotvec = np.array([0.3, 0.1, -0.6])
    gradient = jax.grad(_angle_error)(jnp.asarray(rotvec, jnp.float32))
    step = 1e-3
    for axis in range(3):
        offset = np.eye(3)[axis] * step
        plus = SpRotation.from_rotvec(rotvec + offset) * SpRotation.from_euler("xyz",
                                                                              [0.2, -0.4, 0.9])
        minus = SpRotation.from_rotvec(rotvec - offset) * SpRotation.from_euler(
            "xyz", [0.2, -0.4, 0.9])
        slope = (plus.as_euler("XYZ")[1] - minus.as_euler("XYZ")[1]) / (2 * step)
        np.testing.assert_allclose(gradient[axis], slope, rtol=1e-2, atol=1e-3)


def test_mixed_single_and_stacked_operands_follow_rank_promotion():
    stacked, single = Rotation.from_quat(_random_quats(2)), Rotation.from_quat(_random_quats(1)[0])
    with jax.numpy_rank_promotion("raise"):
        with pytest.raises(ValueError, match=r"require rank promotion for jnp.vectorize function "
                                             r"with signature \(n\),\(n\)->\(n\)"):
            single * stacked
        stacked.as_euler("xyz")                  # the axes are no operand: nothing to promote


QUAT = np.array([[0.1, 0.2, 0.3, 0.9], [-0.5, 0.1, 0.4, -0.2]])


@pytest.mark.parametrize("make,error,message", [
    (lambda: Rotation.from_euler("xyzx", np.ones(4)), ValueError,
     "Expected axis specification to be a non-empty string of upto 3 characters, got xyzx"),
    (lambda: Rotation.from_euler("", np.ones(1)), ValueError,
     "Expected axis specification to be a non-empty string of upto 3 characters, got "),
    (lambda: Rotation.from_euler("xYz", np.ones(3)), ValueError,
     "Expected axes from `seq` to be from ['x', 'y', 'z'] or ['X', 'Y', 'Z'], got xYz"),
    (lambda: Rotation.from_euler("xxz", np.ones(3)), ValueError,
     "Expected consecutive axes to be different, got xxz"),
    (lambda: Rotation.from_euler("xy", np.ones(3)), ValueError,
     "inconsistent size for core dimension 'm': 2 vs 3 on vectorized function with "
     "excluded=frozenset() and signature='(m),(m),(),()->(n)'"),
    (lambda: Rotation.from_quat(QUAT).as_euler("xy"), ValueError, "Expected 3 axes, got xy."),
    (lambda: Rotation.from_quat(QUAT).as_euler("xwz"), ValueError,
     "Expected axes from `seq` to be from ['x', 'y', 'z'] or ['X', 'Y', 'Z'], got xwz"),
    (lambda: Rotation.from_quat(QUAT).as_euler("xxy"), ValueError,
     "Expected consecutive axes to be different, got xxy"),
    (lambda: Rotation.from_quat(QUAT[0])[0], TypeError, "Single rotation is not subscriptable."),
    (lambda: len(Rotation.from_quat(QUAT[0])), TypeError, "Single rotation has no len()."),
    (lambda: Rotation.identity(3), AssertionError, ""),
    (lambda: Rotation.random(None), NotImplementedError, ""),
    (lambda: Rotation.from_quat(QUAT).mean(np.ones((2, 1))), ValueError,
     "Expected `weights` to be 1 dimensional, got shape (2, 1)."),
    (lambda: Rotation.from_quat(QUAT).mean(np.ones(3)), ValueError,
     "Expected `weights` to have number of values equal to number of rotations, got 3 values "
     "and 2 rotations."),
    (lambda: Rotation.from_quat(QUAT[0]).mean(), TypeError, "Single rotation has no len()."),
    (lambda: Rotation.from_quat(QUAT).apply(np.ones(4)), ValueError,
     "inconsistent size for core dimension 'm': 4 vs 3 on vectorized function with "
     "excluded=frozenset() and signature='(m,m),(m),()->(m)'"),
    (lambda: Slerp.init([0., 1.], QUAT), TypeError, "`rotations` must be a `Rotation` instance."),
    (lambda: Slerp.init([0., 1.], Rotation.from_quat(QUAT[0])), ValueError,
     "`rotations` must be a sequence of at least 2 rotations."),
    (lambda: Slerp.init([0.], Rotation.from_quat(QUAT[:1])), ValueError,
     "`rotations` must be a sequence of at least 2 rotations."),
    (lambda: Slerp.init([[0., 1.]], Rotation.from_quat(QUAT)), ValueError,
     "Expected times to be specified in a 1 dimensional array, got 2 dimensions."),
    (lambda: Slerp.init([0., 1., 2.], Rotation.from_quat(QUAT)), ValueError,
     "Expected number of rotations to be equal to number of timestamps given, got 2 rotations "
     "and 3 timestamps."),
    (lambda: Slerp.init([0., 1.], Rotation.from_quat(QUAT))(np.zeros((1, 1))), ValueError,
     "`times` must be at most 1-dimensional."),
])
def test_rotation_errors(make, error, message):
    with pytest.raises(error) as caught:
        make()
    assert str(caught.value) == message


def test_public_names():
    assert shardc.scipy.interpolate.__all__ == ["RegularGridInterpolator"]
    assert shardc.scipy.spatial.transform.__all__ == ["Rotation", "Slerp"]
    for name in ("concatenate", "from_euler", "from_matrix", "from_mrp", "from_quat",
                 "from_rotvec", "identity", "random", "apply", "as_euler", "as_matrix",
                 "as_mrp", "as_quat", "as_rotvec", "inv", "magnitude", "mean", "single"):
        assert hasattr(Rotation, name), name
    assert hasattr(Slerp, "init")
