"""``shardc.scipy.spatial`` (``jax.scipy.spatial``): its ``transform`` module of 3-D rotations."""
from shardc.scipy.spatial import transform

__all__ = ["transform"]
