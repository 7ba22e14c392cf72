"""``shardc.numpy``: the jax.numpy subset (see ``_core`` and the modules it gathers)."""
from shardc.numpy._core import *  # noqa: F401,F403
# what the other modules reach as jnp._name, until they import it from where it is defined
from shardc.numpy._core import (_axis, _binary, _convert, _dot_general, _dtype_of, _flat,  # noqa: F401
                                _nonzero_int_divisor, _numeric_pair, _promote, _reduce_axes)
