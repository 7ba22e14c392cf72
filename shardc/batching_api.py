"""``shardc.vmap``: vectorizing maps, by the batching trace of ``compiler.batching``."""
from compiler.vmap import vmap

__all__ = ["vmap"]
