"""``shardc.scipy``: the parts of ``jax.scipy`` user code reaches for (``special``,
``stats``, ``linalg``, ``integrate.trapezoid``, ``cluster.vq``, ``sparse.linalg``'s Krylov
solvers, ``signal``, ``fft``'s cosine transforms, ``ndimage.map_coordinates``,
``optimize.minimize``, ``interpolate.RegularGridInterpolator`` and
``spatial.transform``'s rotations)."""
from shardc.scipy import (cluster, fft, integrate, interpolate, linalg, ndimage, optimize,
                          signal, sparse, spatial, special, stats)

__all__ = ["cluster", "fft", "integrate", "interpolate", "linalg", "ndimage", "optimize",
           "signal", "sparse", "spatial", "special", "stats"]
