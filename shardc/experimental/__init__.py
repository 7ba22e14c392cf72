"""Old API paths of JAX's ``jax.experimental``."""
from shardc._callbacks import io_callback
from shardc.config import disable_x64, enable_x64

__all__ = ["disable_x64", "enable_x64", "io_callback"]
