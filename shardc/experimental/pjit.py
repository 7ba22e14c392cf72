"""``pjit``: JAX's name for ``jit`` with shardings from before the two merged (deprecated in
JAX 0.10 in favour of ``jax.jit``). It differs in two readings: a ``None`` among
``in_shardings``/``out_shardings`` means replicated over the mesh in context (``set_mesh`` or
``with mesh:``), where ``jit`` leaves such a value as it is; and inside a ``with mesh:``
block it runs with that mesh as its context mesh, as ``jit`` does under ``set_mesh``."""
from __future__ import annotations

import contextlib
import functools
import warnings

from compiler.jit import UNSPECIFIED, JitFunction, jit
from ir.sharding import PartitionSpec, current_mesh, legacy_mesh, pop_mesh, push_mesh
from shardc import tree_util
from shardc.sharding import NamedSharding, resolve_sharding

__all__ = ["pjit"]


def __getattr__(name):
    # reading ``pjit`` warns, as JAX 0.10 deprecates it
    if name == "pjit":
        warnings.warn("jax.experimental.pjit.pjit has been deprecated. Please use `jax.jit` "
                      "instead.", DeprecationWarning, stacklevel=2)
        return _pjit
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Replicated:
    """A ``None`` of pjit's shardings: replicated on the context mesh, if there is one."""

    def __repr__(self):
        return "None"


_REPLICATED = _Replicated()


def _context_mesh():
    return current_mesh() or legacy_mesh()


def _resolve(sharding, what: str):
    mesh = _context_mesh()
    if sharding is _REPLICATED:
        return None if mesh is None else NamedSharding(mesh, PartitionSpec())
    if isinstance(sharding, PartitionSpec):
        if mesh is None:
            name = what.split()[-1]
            raise RuntimeError(
                f"pjit requires a non-empty mesh in context if you are passing "
                f"`PartitionSpec`s to {name}. You can define a context mesh via "
                "`jax.set_mesh(mesh)`. Alternatively, provide `Sharding`s to "
                f"{name} and then the mesh context manager is not required.")
        return NamedSharding(mesh, sharding)
    return resolve_sharding(sharding, what)


def _nones_replicated(shardings):
    if shardings is UNSPECIFIED:
        return shardings
    return tree_util.tree_map(lambda s: _REPLICATED if s is None else s, shardings,
                              is_leaf=lambda s: s is None or isinstance(s, PartitionSpec))


def _pjit(fun=None, in_shardings=UNSPECIFIED, out_shardings=UNSPECIFIED, static_argnums=None,
         static_argnames=None, donate_argnums=None, donate_argnames=None, keep_unused=False,
         device=None, backend=None, inline=False, compiler_options=None):
    """``jit(fun, in_shardings=..., out_shardings=...)`` in pjit's reading of ``None`` and of
    bare PartitionSpecs (on the mesh in context, ``with mesh:`` included). ``device`` and
    ``backend`` are JAX's deprecated ones, as ``jit`` takes them; ``keep_unused``, ``inline``
    and ``compiler_options`` change nothing a program computes.

    >>> with mesh:
    ...     f = pjit(lambda x: x * 2, in_shardings=P('x'), out_shardings=None)
    """
    if device is not None or backend is not None:
        return _pjit_on_one_device(fun, device, backend, dict(
            static_argnums=static_argnums, static_argnames=static_argnames,
            donate_argnums=donate_argnums, donate_argnames=donate_argnames,
            in_shardings=in_shardings, out_shardings=out_shardings))
    options = dict(static_argnums=static_argnums, static_argnames=static_argnames,
                   donate_argnums=donate_argnums, donate_argnames=donate_argnames,
                   in_shardings=_nones_replicated(in_shardings),
                   out_shardings=_nones_replicated(out_shardings), resolve=_resolve)
    if fun is None:
        return lambda f: _PjitFunction(f, **options)
    return _PjitFunction(fun, **options)


_pjit.__name__ = _pjit.__qualname__ = "pjit"      # as its errors name it (JAX's pjit())


def _pjit_on_one_device(fun, device, backend, options):
    """pjit with JAX's deprecated ``device``/``backend``: as ``jit`` runs them (the arguments
    moved to that device, the results committed there; not with shardings), and refused
    inside a ``with mesh:`` block, as JAX's pjit refuses it."""
    from shardc._transforms import jit as public_jit
    options = {k: v for k, v in options.items() if v is not UNSPECIFIED}
    if fun is None:
        return lambda f: _pjit_on_one_device(f, device, backend, options)
    jitted = public_jit(fun, device=device, backend=backend, **options)

    @functools.wraps(fun)
    def on_device(*args, **kwargs):
        if legacy_mesh() is not None:
            raise ValueError("Mesh context manager should not be used with jit when backend "
                             "or device is also specified as an argument to jit.")
        return jitted(*args, **kwargs)
    for name in ("lower", "trace", "eval_shape", "clear_cache"):
        setattr(on_device, name, getattr(jitted, name))
    return on_device


class _PjitFunction(JitFunction):
    """A jitted function as pjit runs it: inside a ``with mesh:`` block (JAX's resource
    environment), traced, lowered and run with that mesh as the context mesh, as ``jit`` is
    under ``set_mesh``. So values given uncommitted go to the mesh, results come out on it
    (replicated where nothing splits them, committed), and committed values on other devices
    are JAX's incompatible-devices ValueError."""

    def __call__(self, *args, **kwargs):
        with _legacy_context():
            return super().__call__(*args, **kwargs)

    def lower(self, *args, **kwargs):
        with _legacy_context():
            return super().lower(*args, **kwargs)

    def trace(self, *args, **kwargs):
        with _legacy_context():
            return super().trace(*args, **kwargs)

    def eval_shape(self, *args, **kwargs):
        with _legacy_context():
            return super().eval_shape(*args, **kwargs)


@contextlib.contextmanager
def _legacy_context():
    """The mesh of the innermost ``with mesh:`` block made the context mesh, while one is
    open and no other mesh is set."""
    mesh = legacy_mesh()
    if mesh is None or current_mesh() is not None:
        yield
        return
    push_mesh(mesh)
    try:
        yield
    finally:
        pop_mesh(mesh)
