"""``vmap``: placeholder until the batching trace lands."""
from compiler.batching import vmap

__all__ = ["vmap"]
