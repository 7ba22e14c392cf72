"""``shardc.scipy.cluster.vq`` (``jax.scipy.cluster.vq``): vector quantisation."""
from __future__ import annotations

import shardc.numpy as jnp

__all__ = ["vq"]


def vq(obs, code_book, check_finite=True):
    """``(code, dist)``: for each observation (a row of ``obs``; an entry, when it is 1-D) the
    index of the nearest code in ``code_book`` (Euclidean; the first among equals) and its
    distance. ``check_finite`` is accepted (JAX does not check)."""
    obs, code_book = jnp.asarray(obs), jnp.asarray(code_book)
    dtype = jnp.result_type(obs, code_book, jnp.float32)
    obs, code_book = obs.astype(dtype), code_book.astype(dtype)
    if obs.ndim != code_book.ndim:
        raise ValueError("Observation and code_book should have the same rank")
    if obs.ndim == 1:
        obs, code_book = obs[..., None], code_book[..., None]
    if obs.ndim != 2:
        raise ValueError("ndim different than 1 or 2 are not supported")
    dist = jnp.linalg.norm(obs[:, None, :] - code_book[None, :, :], axis=-1)
    code = jnp.argmin(dist, axis=-1)
    return code, jnp.take_along_axis(dist, code[:, None], axis=-1)[:, 0]
