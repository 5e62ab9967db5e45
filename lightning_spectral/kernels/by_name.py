"""A feature map chosen by kernel name (``"gaussian"`` or ``"cosine"``), as callbacks and the CLI take it.
"""

from __future__ import annotations

from typing import Optional

from lightning_spectral.kernels.cosine_map import CosineMap
from lightning_spectral.kernels.feature_map import FeatureMap
from lightning_spectral.kernels.gaussian_rff import GaussianRFF

KERNELS = ("gaussian", "cosine")


def kernel_feature_map(
    kernel: str,
    in_features: Optional[int],
    sigma: Optional[float],
    n_frequencies: int,
    seed: int,
    persistent: bool = True,
) -> FeatureMap:
    """A normalised kernel's feature map: [`GaussianRFF`][lightning_spectral.kernels.GaussianRFF] (``"gaussian"``) or
    [`CosineMap`][lightning_spectral.kernels.CosineMap] (``"cosine"``).

    Raises:
        ValueError: unknown ``kernel``, or ``sigma`` missing / not > 0 for the Gaussian kernel.
    """
    if kernel == "cosine":
        return CosineMap(in_features=in_features)
    if kernel != "gaussian":
        raise ValueError(f"`kernel` must be one of {KERNELS}, got {kernel!r}.")
    if sigma is None:
        raise ValueError(
            "The Gaussian kernel needs a bandwidth `sigma`; start from `median_bandwidth(x)` or, for SPEC, match the "
            "two embeddings with `lightning_spectral.functional.match_bandwidth`."
        )
    return GaussianRFF(in_features, n_frequencies, sigma, seed, persistent=persistent)
