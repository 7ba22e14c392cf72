"""``shardc.scipy.spatial.transform`` (``jax.scipy.spatial.transform``): 3-D rotations.

``Rotation`` holds unit quaternions in scipy's scalar-last order ``(x, y, z, w)``: one
(``quat`` of shape ``(4,)``, a *single* rotation) or a stack of them (``(N, 4)``). It converts
to and from rotation matrices, rotation vectors, modified Rodrigues parameters and Euler
angles (``'xyz'``: extrinsic, about the fixed axes; ``'XYZ'``: intrinsic, about the rotating
ones), composes (``r1 * r2`` applies ``r2`` first), inverts and averages. ``Slerp``
interpolates a sequence of rotations at given times along the shortest arcs between them.

Both are NamedTuples, so pytrees: ``Rotation``'s one child is ``quat``, ``Slerp``'s are
``times``, ``timedelta``, ``rotations`` (a ``Rotation``) and ``rotvecs``. Unlike scipy's, they
check nothing that would need the values (unit norms, increasing times), so they work under
``jit``, ``vmap`` and ``grad``; ``Rotation.random`` is not implemented, as in JAX.

>>> r = Rotation.from_euler('z', 90, degrees=True)
>>> r.apply(jnp.array([1., 0., 0.])).round(6)
Array([0., 1., 0.], dtype=float32)
"""
from __future__ import annotations

import functools
import re
import typing

import numpy as np

import shardc.numpy as jnp

__all__ = ["Rotation", "Slerp"]

# Below this angle (radians) the rotation-vector scales use their Taylor series, where the
# closed forms would divide zero by zero.
_SMALL_ANGLE = 1e-3
# How close the middle Euler angle must come to 0 or pi to count as gimbal lock.
_GIMBAL_LOCK_EPS = 1e-7
_AXES = "xyz"


def _vectorized(signature: str):
    """``jnp.vectorize`` over quaternion-shaped core dimensions (JAX's shape checks, errors
    and rank-promotion behaviour come with it)."""
    return functools.partial(jnp.vectorize, signature=signature)


def _norm(vector):
    """The Euclidean norm of a 1-D array, with a zero (not NaN) gradient at zero."""
    squared = jnp.dot(vector, vector)
    positive = squared > 0
    return jnp.where(positive, jnp.sqrt(jnp.where(positive, squared, 1)), 0)


def _quat_product(p, q):
    """The Hamilton product ``p q`` of scalar-last quaternions: rotation ``q``, then ``p``."""
    p_vec, p_w, q_vec, q_w = p[:3], p[3], q[:3], q[3]
    vec = p_w * q_vec + q_w * p_vec + jnp.cross(p_vec, q_vec)
    return jnp.concatenate([vec, (p_w * q_w - jnp.dot(p_vec, q_vec))[None]])


def _axis_quat(axis, angle):
    """The quaternion of a rotation by ``angle`` about basis axis ``axis`` (0, 1 or 2)."""
    half = angle / 2
    vec = jnp.where(jnp.arange(3) == axis, jnp.sin(half), 0)
    return jnp.concatenate([vec, jnp.cos(half)[None]])


def _unit(quat):
    return quat / _norm(quat)


_normalize = _vectorized("(n)->(n)")(_unit)


@_vectorized("(n),(n)->(n)")
def _compose(p, q):
    return _quat_product(p, q)


@_vectorized("(n)->(n)")
def _conjugate(quat):
    return jnp.concatenate([-quat[:3], quat[3:]])


@_vectorized("(n)->(n)")
def _canonical(quat):
    """The one of ``quat`` and ``-quat`` whose first nonzero entry in the order w, x, y, z
    is positive."""
    w_first = quat[jnp.array([3, 0, 1, 2])]
    leading = w_first[jnp.argmax(w_first != 0)]
    return jnp.where(leading < 0, -quat, quat)


@_vectorized("(n)->()")
def _magnitude(quat):
    return 2 * jnp.arctan2(_norm(quat[:3]), jnp.abs(quat[3]))


@_vectorized("(m)->(n,n)")
def _as_matrix(quat):
    """``(w^2 - |v|^2) I + 2 v v^T + 2 w [v]x`` for ``quat = (v, w)``."""
    x, y, z, w = quat[0], quat[1], quat[2], quat[3]
    vec, zero = quat[:3], jnp.zeros_like(w)
    cross_matrix = jnp.stack([jnp.stack([zero, -z, y]),
                              jnp.stack([z, zero, -x]),
                              jnp.stack([-y, x, zero])])
    diagonal = (w * w - jnp.dot(vec, vec)) * jnp.eye(3, dtype=quat.dtype)
    return diagonal + 2 * jnp.outer(vec, vec) + 2 * w * cross_matrix


@_vectorized("(m,m),(m),()->(m)")
def _apply(matrix, vector, inverse):
    # v R is R^T v: the inverse rotation of a unit quaternion's matrix is its transpose
    return jnp.where(inverse, vector @ matrix, matrix @ vector)


@_vectorized("(m)->(n)")
def _as_mrp(quat):
    """``v / (1 + w)`` of the quaternion with ``w >= 0`` (rotation angle at most pi)."""
    quat = jnp.where(quat[3] < 0, -quat, quat)
    return quat[:3] / (1 + quat[3])


@_vectorized("(m)->(n)")
def _from_mrp(mrp):
    squared = jnp.dot(mrp, mrp)
    return jnp.concatenate([2 * mrp, (1 - squared)[None]]) / (1 + squared)


@_vectorized("(m),()->(n)")
def _as_rotvec(quat, degrees):
    """The axis scaled by the angle, ``v * angle / sin(angle / 2)`` with ``w >= 0``."""
    quat = jnp.where(quat[3] < 0, -quat, quat)
    angle = 2 * jnp.arctan2(_norm(quat[:3]), quat[3])
    small = angle <= _SMALL_ANGLE
    safe_angle = jnp.where(small, 1, angle)
    squared = angle * angle
    series = 2 + squared / 12 + 7 * squared * squared / 2880
    scale = jnp.where(small, series, safe_angle / jnp.sin(safe_angle / 2))
    scale = jnp.where(degrees, jnp.rad2deg(scale), scale)
    return scale * quat[:3]


@_vectorized("(m),()->(n)")
def _from_rotvec(rotvec, degrees):
    """``(sin(angle / 2) / angle * rotvec, cos(angle / 2))`` with ``angle = |rotvec|``."""
    rotvec = jnp.where(degrees, jnp.deg2rad(rotvec), rotvec)
    angle = _norm(rotvec)
    small = angle <= _SMALL_ANGLE
    safe_angle = jnp.where(small, 1, angle)
    squared = angle * angle
    series = 0.5 - squared / 48 + squared * squared / 3840
    scale = jnp.where(small, series, jnp.sin(safe_angle / 2) / safe_angle)
    return jnp.concatenate([scale * rotvec, jnp.cos(angle / 2)[None]])


@_vectorized("(m,m)->(n)")
def _from_matrix(matrix):
    """Shepperd's method: of the four (unnormalized) quaternions the matrix determines, the
    one built around the largest of its diagonal entries and its trace, which is the best
    conditioned."""
    trace = matrix[0, 0] + matrix[1, 1] + matrix[2, 2]
    candidates = []
    for i in range(3):
        j, k = (i + 1) % 3, (i + 2) % 3
        entries = [None] * 4
        entries[i] = 1 - trace + 2 * matrix[i, i]
        entries[j] = matrix[j, i] + matrix[i, j]
        entries[k] = matrix[k, i] + matrix[i, k]
        entries[3] = matrix[k, j] - matrix[j, k]
        candidates.append(jnp.stack(entries))
    candidates.append(jnp.stack([matrix[2, 1] - matrix[1, 2], matrix[0, 2] - matrix[2, 0],
                                 matrix[1, 0] - matrix[0, 1], 1 + trace]))
    largest = jnp.argmax(jnp.stack([matrix[0, 0], matrix[1, 1], matrix[2, 2], trace]))
    return _unit(jnp.stack(candidates)[largest])


@_vectorized("(m),(m),(),()->(n)")
def _from_euler(angles, axes, intrinsic, degrees):
    """The product of the elementary rotations, each new one applied after (extrinsic) or
    before (intrinsic: about the already rotated axes) those so far."""
    angles = jnp.where(degrees, jnp.deg2rad(angles), angles)
    quat = _axis_quat(axes[0], angles[0])
    for n in range(1, angles.shape[0]):
        step = _axis_quat(axes[n], angles[n])
        quat = jnp.where(intrinsic, _quat_product(quat, step), _quat_product(step, quat))
    return quat


def _euler_angles(quat, degrees, *, axes: tuple, extrinsic: bool):
    """Euler angles (degrees if ``degrees``, else radians) of a unit quaternion about
    ``axes`` (basis indices), after Bernardes and Viollet (2022). An intrinsic sequence is
    the extrinsic one reversed. In gimbal lock (the middle angle 0 or pi) only the sum or the
    difference of the outer angles is determined: the sequence's third angle is set to zero
    and the first takes it all."""
    first, second, last = axes if extrinsic else axes[::-1]
    proper = first == last            # e.g. 'zxz'; otherwise Tait-Bryan, e.g. 'xyz'
    if proper:
        last = 3 - first - second
    sign = (first - second) * (second - last) * (last - first) // 2
    w = quat[3]
    if proper:
        a, b, c, d = w, quat[first], quat[second], sign * quat[last]
    else:
        a, b = w - quat[second], quat[first] + sign * quat[last]
        c, d = quat[second] + w, sign * quat[last] - quat[first]
    middle = 2 * jnp.arctan2(jnp.hypot(c, d), jnp.hypot(a, b))
    half_sum, half_diff = jnp.arctan2(b, a), jnp.arctan2(d, c)
    near_zero = jnp.abs(middle) <= _GIMBAL_LOCK_EPS
    locked = near_zero | (jnp.abs(middle - np.pi) <= _GIMBAL_LOCK_EPS)
    about_first, about_last = half_sum - half_diff, half_sum + half_diff
    if extrinsic:                     # the third angle of the sequence is about `last`
        alone = 2 * jnp.where(near_zero, half_sum, -half_diff)
        about_first = jnp.where(locked, alone, about_first)
        about_last = jnp.where(locked, 0, about_last)
    else:                             # ... and here about `first`
        alone = 2 * jnp.where(near_zero, half_sum, half_diff)
        about_first = jnp.where(locked, 0, about_first)
        about_last = jnp.where(locked, alone, about_last)
    if not proper:
        about_last, middle = sign * about_last, middle - np.pi / 2
    ordered = (about_first, middle, about_last) if extrinsic else (about_last, middle,
                                                                   about_first)
    angles = (jnp.stack(ordered) + np.pi) % (2 * np.pi) - np.pi
    return jnp.where(degrees, jnp.rad2deg(angles), angles)


def _euler_axes(seq: str) -> tuple:
    """``(basis indices, intrinsic)`` of a checked axis sequence."""
    intrinsic = re.match(r"^[XYZ]{1,3}$", seq) is not None
    extrinsic = re.match(r"^[xyz]{1,3}$", seq) is not None
    if not (intrinsic or extrinsic):
        raise ValueError(f"Expected axes from `seq` to be from ['x', 'y', 'z'] or "
                         f"['X', 'Y', 'Z'], got {seq}")
    if any(seq[n] == seq[n + 1] for n in range(len(seq) - 1)):
        raise ValueError(f"Expected consecutive axes to be different, got {seq}")
    return tuple(_AXES.index(axis) for axis in seq.lower()), intrinsic


class Rotation(typing.NamedTuple):
    """Rotations in 3 dimensions, as unit quaternions ``(x, y, z, w)`` (scipy's
    ``Rotation``); build one with the ``from_*`` constructors.

    >>> r = Rotation.from_euler('z', 90, degrees=True) * Rotation.from_euler('x', 90,
    ...                                                                       degrees=True)
    >>> r.as_matrix().round(6)
    Array([[0., 0., 1.],
           [1., 0., 0.],
           [0., 1., 0.]], dtype=float32)
    """
    quat: typing.Any

    @classmethod
    def concatenate(cls, rotations: typing.Sequence):
        """One ``Rotation`` holding the rotations of each in ``rotations``, in order."""
        return cls(jnp.concatenate([rotation.quat for rotation in rotations]))

    @classmethod
    def from_euler(cls, seq: str, angles, degrees: bool = False):
        """From Euler angles (``angles[..., n]`` about the axis ``seq[n]``) for a sequence
        of 1 to 3 axes: lower case extrinsic, upper case intrinsic."""
        if not 1 <= len(seq) <= 3:
            raise ValueError(f"Expected axis specification to be a non-empty string of upto "
                             f"3 characters, got {seq}")
        axes, intrinsic = _euler_axes(seq)
        return cls(_from_euler(jnp.atleast_1d(angles), jnp.array(axes), intrinsic, degrees))

    @classmethod
    def from_matrix(cls, matrix):
        """From rotation matrices ``(..., 3, 3)``."""
        return cls(_from_matrix(matrix))

    @classmethod
    def from_mrp(cls, mrp):
        """From modified Rodrigues parameters ``(..., 3)``: the axis times ``tan(angle/4)``."""
        return cls(_from_mrp(mrp))

    @classmethod
    def from_quat(cls, quat):
        """From quaternions ``(..., 4)``, scalar last, normalized here."""
        return cls(_normalize(quat))

    @classmethod
    def from_rotvec(cls, rotvec, degrees: bool = False):
        """From rotation vectors ``(..., 3)``: the axis times the angle."""
        return cls(_from_rotvec(rotvec, degrees))

    @classmethod
    def identity(cls, num: int | None = None, dtype=float):
        """The single identity rotation (``num`` must be None, as in JAX)."""
        assert num is None
        return cls(jnp.array([0., 0., 0., 1.], dtype=dtype))

    @classmethod
    def random(cls, random_key, num: int | None = None):
        """Not implemented (as in JAX): it raises NotImplementedError."""
        raise NotImplementedError()

    def __getitem__(self, indexer):
        """The rotation(s) at ``indexer`` of a stack of rotations."""
        if self.single:
            raise TypeError("Single rotation is not subscriptable.")
        return Rotation(self.quat[indexer])

    def __len__(self):
        """The number of rotations in a stack."""
        if self.single:
            raise TypeError("Single rotation has no len().")
        return self.quat.shape[0]

    def __mul__(self, other) -> Rotation:
        """The composition applying ``other`` first, then this rotation."""
        return Rotation.from_quat(_compose(self.quat, other.quat))

    def apply(self, vectors, inverse: bool = False):
        """The vectors ``(..., 3)`` rotated (by the inverse rotation when ``inverse``)."""
        return _apply(self.as_matrix(), vectors, inverse)

    def as_euler(self, seq: str, degrees: bool = False):
        """Euler angles ``(..., 3)`` about the 3 axes of ``seq`` (lower case extrinsic, upper
        case intrinsic), each in [-pi, pi) and the middle one in [0, pi] for a proper
        sequence such as 'zxz' and [-pi/2, pi/2] otherwise."""
        if len(seq) != 3:
            raise ValueError(f"Expected 3 axes, got {seq}.")
        axes, intrinsic = _euler_axes(seq)
        angles = functools.partial(_euler_angles, axes=axes, extrinsic=not intrinsic)
        return _vectorized("(m),()->(n)")(angles)(self.quat, degrees)

    def as_matrix(self):
        """Rotation matrices ``(..., 3, 3)``."""
        return _as_matrix(self.quat)

    def as_mrp(self):
        """Modified Rodrigues parameters ``(..., 3)`` (of the rotation angle at most pi)."""
        return _as_mrp(self.quat)

    def as_rotvec(self, degrees: bool = False):
        """Rotation vectors ``(..., 3)`` (angles in [0, pi])."""
        return _as_rotvec(self.quat, degrees)

    def as_quat(self, canonical: bool = False, scalar_first: bool = False):
        """The quaternions ``(..., 4)``: scalar last unless ``scalar_first``; ``canonical``
        picks, of ``q`` and ``-q``, the one with ``w > 0`` (ties broken by x, y, z)."""
        quat = _canonical(self.quat) if canonical else self.quat
        return jnp.roll(quat, 1, axis=-1) if scalar_first else quat

    def inv(self):
        """The inverse rotation(s)."""
        return Rotation(_conjugate(self.quat))

    def magnitude(self):
        """The rotation angle(s), in [0, pi]."""
        return _magnitude(self.quat)

    def mean(self, weights=None):
        """The (weighted) mean of a stack of rotations: the unit quaternion maximizing the
        weighted sum of its squared dot products with the stack's (the eigenvector of the
        largest eigenvalue of their weighted outer-product sum)."""
        quat = self.quat
        if weights is None:
            weights = jnp.ones(quat.shape[0], dtype=quat.dtype)
        else:
            weights = jnp.asarray(weights, dtype=quat.dtype)
        if weights.ndim != 1:
            raise ValueError(f"Expected `weights` to be 1 dimensional, got shape "
                             f"{weights.shape}.")
        if weights.shape[0] != len(self):
            raise ValueError(f"Expected `weights` to have number of values equal to number of "
                             f"rotations, got {weights.shape[0]} values and {len(self)} "
                             f"rotations.")
        outer_sum = (weights[:, None] * quat).T @ quat
        _, eigenvectors = jnp.linalg.eigh(outer_sum)
        return Rotation(eigenvectors[:, -1])

    @property
    def single(self) -> bool:
        """Whether this holds one rotation (``quat`` of shape ``(4,)``), not a stack."""
        return self.quat.ndim == 1


class Slerp(typing.NamedTuple):
    """Spherical linear interpolation of rotations (scipy's ``Slerp``): build one with
    ``Slerp.init(times, rotations)``, call it on times. Between consecutive key times the
    rotation turns at a constant rate about a fixed axis. Times must increase (not
    checked); times outside the key times extrapolate from the nearest interval.

    >>> keys = Rotation.from_euler('z', jnp.array([[0.], [90.]]), degrees=True)
    >>> slerp = Slerp.init(jnp.array([0., 1.]), keys)
    >>> slerp(0.5).as_rotvec(degrees=True).round(4)
    Array([ 0.,  0., 45.], dtype=float32)
    """
    times: typing.Any
    timedelta: typing.Any
    rotations: Rotation
    rotvecs: typing.Any

    @classmethod
    def init(cls, times, rotations: Rotation):
        """The interpolator through ``rotations`` (a stack of at least 2) at the key
        ``times`` (a 1-D array as long, increasing)."""
        if not isinstance(rotations, Rotation):
            raise TypeError("`rotations` must be a `Rotation` instance.")
        if rotations.single or len(rotations) == 1:
            raise ValueError("`rotations` must be a sequence of at least 2 rotations.")
        times = jnp.asarray(times, dtype=rotations.quat.dtype)
        if times.ndim != 1:
            raise ValueError(f"Expected times to be specified in a 1 dimensional array, got "
                             f"{times.ndim} dimensions.")
        if times.shape[0] != len(rotations):
            raise ValueError(f"Expected number of rotations to be equal to number of "
                             f"timestamps given, got {len(rotations)} rotations and "
                             f"{times.shape[0]} timestamps.")
        quat = rotations.as_quat()
        starts = Rotation(quat[:-1])
        steps = starts.inv() * Rotation(quat[1:])
        return cls(times=times, timedelta=jnp.diff(times), rotations=starts,
                   rotvecs=steps.as_rotvec())

    def __call__(self, times):
        """The interpolated rotation at each of ``times`` (a scalar: a single rotation)."""
        times = jnp.asarray(times, dtype=self.times.dtype)
        if times.ndim > 1:
            raise ValueError("`times` must be at most 1-dimensional.")
        single = times.ndim == 0
        times = jnp.atleast_1d(times)
        interval = jnp.maximum(jnp.searchsorted(self.times, times) - 1, 0)
        fraction = (times - self.times[interval]) / self.timedelta[interval]
        step = Rotation.from_rotvec(self.rotvecs[interval] * fraction[:, None])
        result = self.rotations[interval] * step
        return result[0] if single else result
