"""``shardc.scipy.cluster`` (``jax.scipy.cluster``): ``vq``."""
from shardc.scipy.cluster import vq

__all__ = ["vq"]
