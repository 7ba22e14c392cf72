"""``shardc.scipy``: the parts of ``jax.scipy`` user code reaches for (``special``,
``stats``, ``linalg``, ``integrate.trapezoid``, ``cluster.vq``, ``sparse.linalg``'s Krylov
solvers, ``signal``'s convolutions)."""
from shardc.scipy import cluster, integrate, linalg, signal, sparse, special, stats

__all__ = ["cluster", "integrate", "linalg", "signal", "sparse", "special", "stats"]
