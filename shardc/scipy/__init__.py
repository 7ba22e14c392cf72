"""``shardc.scipy``: the parts of ``jax.scipy`` user code reaches for (``special``,
``stats``, ``linalg``, ``integrate.trapezoid``, ``cluster.vq``, ``sparse.linalg``'s Krylov
solvers)."""
from shardc.scipy import cluster, integrate, linalg, sparse, special, stats

__all__ = ["cluster", "integrate", "linalg", "sparse", "special", "stats"]
