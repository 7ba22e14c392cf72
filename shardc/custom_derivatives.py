"""``shardc.custom_derivatives``: functions with user-defined derivatives
(``jax.custom_derivatives``)."""
from compiler.custom_ad import (CustomVJPException, CustomVJPPrimal, SymbolicZero, custom_jvp,
                                custom_vjp, custom_vjp_primal_tree_values, zero_from_primal)
from compiler.custom_gradient import closure_convert, custom_gradient

__all__ = ["CustomVJPException", "CustomVJPPrimal", "SymbolicZero", "closure_convert",
           "custom_gradient", "custom_jvp", "custom_vjp", "custom_vjp_primal_tree_values",
           "zero_from_primal"]
