"""``shardc.scipy.stats``: distributions (``norm``)."""
from shardc.scipy.stats import norm

__all__ = ["norm"]
