"""``shardc.scipy``: the parts of ``jax.scipy`` user code reaches for (``special``,
``stats.norm``)."""
from shardc.scipy import special, stats

__all__ = ["special", "stats"]
