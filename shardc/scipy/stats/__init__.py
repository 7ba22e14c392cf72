"""``shardc.scipy.stats``: distributions (``norm``)."""
from shardc.scipy.stats import norm  # noqa: F401
