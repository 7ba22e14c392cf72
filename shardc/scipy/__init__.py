"""``shardc.scipy``: the parts of ``jax.scipy`` user code reaches for (``special``,
``stats``, ``linalg``, ``integrate.trapezoid``, ``cluster.vq``)."""
from shardc.scipy import cluster, integrate, linalg, special, stats

__all__ = ["cluster", "integrate", "linalg", "special", "stats"]
