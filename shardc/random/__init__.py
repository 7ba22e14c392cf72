"""``shardc.random``: keys and samplers (see ``_distributions``)."""
from shardc.random._distributions import *  # noqa: F401,F403
from shardc.random._distributions import _shape  # noqa: F401  (reached as random._shape)
