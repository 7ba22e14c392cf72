"""``shardc.nn``: activations, softmax, attention and the other functions of ``jax.nn``
(``_functions``), and ``initializers``."""
from shardc.nn._functions import (celu, dot_product_attention, elu, gelu, glu, hard_sigmoid,
                                  hard_silu, hard_swish, hard_tanh, leaky_relu, log_sigmoid,
                                  log_softmax, logsumexp, one_hot, relu, relu6, selu, sigmoid, silu,
                                  soft_sign, softmax, softplus, standardize, swish, tanh,
                                  identity, mish, squareplus, sparse_plus, sparse_sigmoid,
                                  log1mexp, logmeanexp)
from shardc.nn import initializers

__all__ = [
    "celu", "dot_product_attention", "elu", "gelu", "glu", "hard_sigmoid", "hard_silu",
    "hard_swish", "hard_tanh", "initializers", "leaky_relu", "log_sigmoid", "log_softmax",
    "logsumexp", "one_hot", "relu", "relu6", "selu", "sigmoid", "silu", "soft_sign", "softmax",
    "softplus", "standardize", "swish", "tanh", "identity", "mish", "squareplus", "sparse_plus",
    "sparse_sigmoid", "log1mexp", "logmeanexp",
]


# the functions JAX jits, as such for the transfer guards
from shardc._compiled import NN as _COMPILED, mark_compiled as _mark_compiled  # noqa: E402
_mark_compiled(globals(), _COMPILED)
