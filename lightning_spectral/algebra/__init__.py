"""Linear algebra: chunked Gram accumulation in float64, the symmetric eigen routes (dense, Lanczos, float32) and
MINRES.
"""

from lightning_spectral.algebra.eigen import (
    FLOAT32_MIN_SIZE,
    PRECISIONS,
    default_lanczos_steps,
    eigen_dtype,
    eigenvalues_above,
    extreme_eigenpairs,
    extreme_eigenvalues,
    jittered_cholesky,
    one_thread,
    psd_eigenvalues,
    psd_eigh,
    symmetric_eigh,
    top_eigenvalue,
    top_eigh,
)
from lightning_spectral.algebra.gram import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_TILE,
    add_covariance_,
    add_feature_sums_,
    add_gram_,
    covariance,
    symmetrize,
    weighted_sum,
)
from lightning_spectral.algebra.minres import minres
from lightning_spectral.algebra.precision import full_precision

__all__ = [
    "add_covariance_",
    "add_feature_sums_",
    "add_gram_",
    "covariance",
    "DEFAULT_CHUNK_SIZE",
    "default_lanczos_steps",
    "DEFAULT_TILE",
    "full_precision",
    "eigen_dtype",
    "eigenvalues_above",
    "extreme_eigenpairs",
    "extreme_eigenvalues",
    "minres",
    "FLOAT32_MIN_SIZE",
    "jittered_cholesky",
    "one_thread",
    "PRECISIONS",
    "psd_eigenvalues",
    "psd_eigh",
    "symmetric_eigh",
    "symmetrize",
    "top_eigenvalue",
    "top_eigh",
    "weighted_sum",
]
