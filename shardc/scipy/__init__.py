"""``shardc.scipy``: the parts of ``jax.scipy`` user code reaches for (``special``,
``stats.norm``, ``linalg``)."""
from shardc.scipy import linalg, special, stats

__all__ = ["linalg", "special", "stats"]
