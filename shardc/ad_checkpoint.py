"""``shardc.ad_checkpoint``: remat and its policies under JAX's names (``jax.ad_checkpoint``)."""
import types as _types

from compiler import checkpoint_policies as _policies
from compiler.checkpoint_policies import checkpoint_name
from compiler.remat import remat

checkpoint = remat

# ``jax.checkpoint_policies``: policy(prim, *avals, **params) -> whether to save the result.
checkpoint_policies = _types.SimpleNamespace(**_policies.POLICIES)

__all__ = ["checkpoint", "checkpoint_name", "checkpoint_policies", "remat"]
