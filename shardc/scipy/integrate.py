"""``shardc.scipy.integrate`` (``jax.scipy.integrate``): ``trapezoid``."""
from shardc.numpy import trapezoid

__all__ = ["trapezoid"]
