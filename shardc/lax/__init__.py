"""``shardc.lax``: collectives and lax operations (see ``_collectives`` and the modules it
gathers)."""
from shardc.lax._collectives import *  # noqa: F401,F403
