"""``shardc.scipy.optimize`` (``jax.scipy.optimize``): ``minimize`` by BFGS or L-BFGS, and
its ``OptimizeResults``. The strong Wolfe line search both methods use is the module
``shardc.scipy.optimize.line_search``."""
from shardc.scipy.optimize._minimize import OptimizeResults, minimize

__all__ = ["OptimizeResults", "minimize"]
