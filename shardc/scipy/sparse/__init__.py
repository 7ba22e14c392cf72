"""``shardc.scipy.sparse`` (``jax.scipy.sparse``): its ``linalg`` module of Krylov solvers."""
from shardc.scipy.sparse import linalg

__all__ = ["linalg"]
