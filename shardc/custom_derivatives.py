"""``shardc.custom_derivatives``: functions with user-defined derivatives
(``jax.custom_derivatives``)."""
from compiler.custom_ad import (CustomVJPException, CustomVJPPrimal, SymbolicZero, custom_jvp,
                                custom_vjp, custom_vjp_primal_tree_values, zero_from_primal)

__all__ = ["CustomVJPException", "CustomVJPPrimal", "SymbolicZero", "custom_jvp", "custom_vjp",
           "custom_vjp_primal_tree_values", "zero_from_primal"]
