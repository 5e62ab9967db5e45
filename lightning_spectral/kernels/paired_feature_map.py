"""Two embeddings' feature maps side by side, for SPEC's joint covariance.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from lightning_spectral._checks import (
    check_positive_int,
)
from lightning_spectral.kernels.by_name import kernel_feature_map
from lightning_spectral.kernels.feature_map import FeatureMap
from lightning_spectral.kernels.gaussian_rff import GaussianRFF


class PairedFeatureMap(FeatureMap):
    """Two embeddings of the same samples mapped side by side: ``[phi_a(x_a), phi_b(x_b)]`` (N, D_a + D_b).

    Used by SPEC, whose joint covariance ``(1/n) A^T A`` of ``A = [Phi_a, Phi_b]`` holds both kernel
    covariances and the cross-covariance. The Gaussian maps draw from the same ``seed``, so two identical
    embeddings with one bandwidth get identical features (their SPEC difference is exactly 0). Called with one
    tensor, it maps the concatenated input ``[x_a, x_b]`` (N, d_a + d_b), the rows an accumulator holds.

    Args:
        kernel: ``"gaussian"`` (random Fourier features, ``D = 2 r`` per embedding) or ``"cosine"`` (``D = d``).
        in_features: widths ``(d_a, d_b)``, or ``None`` to fix them later
            ([`build`][lightning_spectral.kernels.PairedFeatureMap.build]).
        sigma: bandwidths ``(sigma_a, sigma_b)`` for the Gaussian kernel (ignored for cosine); either may be
            ``"auto"``, fixed later by [`set_bandwidth`][lightning_spectral.kernels.PairedFeatureMap.set_bandwidth].
        n_frequencies: ``r`` per embedding for the Gaussian kernel.
        seed: frequency seed.
        persistent: save the frequencies in ``state_dict``.

    Examples:
        >>> import torch
        >>> paired = PairedFeatureMap("cosine", (3, 2))
        >>> paired(torch.randn(4, 3), torch.randn(4, 2)).shape, paired.widths
        (torch.Size([4, 5]), (3, 2))
    """

    in_features: Optional[tuple[int, int]]  # type: ignore[assignment]

    def __init__(
        self,
        kernel: str,
        in_features: Optional[tuple[int, int]] = None,
        sigma: tuple[Any, Any] = (None, None),
        n_frequencies: int = 2000,
        seed: int = 0,
        persistent: bool = True,
    ) -> None:
        super().__init__()
        self.kernel, self.in_features = kernel, None
        self.map_a = kernel_feature_map(kernel, None, sigma[0], n_frequencies, seed, persistent)
        self.map_b = kernel_feature_map(kernel, None, sigma[1], n_frequencies, seed, persistent)
        if in_features is not None:
            self.build(in_features)

    def build(self, in_features: tuple[int, int]) -> "PairedFeatureMap":  # type: ignore[override]
        """Fix the two input widths ``(d_a, d_b)`` (a no-op when they are already these). Returns ``self``.

        Raises:
            ValueError: not a pair of integers >= 1, or other widths than the map was built for.
        """
        if not isinstance(in_features, (tuple, list)) or len(in_features) != 2:
            raise ValueError(f"`in_features` must be a pair (d_a, d_b), got {in_features!r}.")
        widths = tuple(check_positive_int(width, "in_features") for width in in_features)
        if self.in_features is not None and self.in_features != widths:
            raise ValueError(f"PairedFeatureMap was built for widths {self.in_features}, got {widths}.")
        self.in_features = widths  # type: ignore[assignment]
        self.map_a.build(widths[0])
        self.map_b.build(widths[1])
        return self

    @property
    def widths(self) -> tuple[int, int]:
        """``(D_a, D_b)``: the feature widths of the two embeddings.

        Raises:
            RuntimeError: before the input widths are known (cosine kernel).
        """
        if self.map_a.out_features is None or self.map_b.out_features is None:
            raise RuntimeError("PairedFeatureMap: the feature widths are unknown until the input widths are.")
        return self.map_a.out_features, self.map_b.out_features

    @property
    def out_features(self) -> Optional[int]:
        """``D_a + D_b`` (``None`` until known)."""
        if self.map_a.out_features is None or self.map_b.out_features is None:
            return None
        return self.map_a.out_features + self.map_b.out_features

    @property
    def squared_norm(self) -> Optional[float]:  # type: ignore[override]
        """``|phi_a|^2 + |phi_b|^2`` when both are constant (2 for two Gaussian maps), else ``None``."""
        a, b = self.map_a.squared_norm, self.map_b.squared_norm
        return None if a is None or b is None else a + b

    def forward(self, x_a: Tensor, x_b: Optional[Tensor] = None) -> Tensor:
        """Map a pair of batches (N, d_a), (N, d_b) of the same N samples, or their concatenation (N, d_a + d_b),
        to (N, D_a + D_b)."""
        if x_b is None:
            if self.in_features is None:
                raise RuntimeError("PairedFeatureMap: build it with the widths (d_a, d_b) to map a concatenated batch.")
            x_a, x_b = x_a[:, : self.in_features[0]], x_a[:, self.in_features[0] :]
        phi_a, phi_b = self.map_a(x_a), self.map_b(x_b)
        if self.in_features is None:
            self.in_features = (x_a.shape[1], x_b.shape[1])  # type: ignore[assignment]
        return torch.cat([phi_a, phi_b.to(phi_a.dtype)], dim=1)

    @property
    def awaits_bandwidth(self) -> bool:
        """True while either Gaussian map's ``"auto"`` bandwidth is not fixed."""
        return self.map_a.awaits_bandwidth or self.map_b.awaits_bandwidth

    @property
    def sigmas(self) -> tuple[Optional[float], Optional[float]]:
        """``(sigma_a, sigma_b)`` of the Gaussian maps (``None`` while ``"auto"`` waits; ``(None, None)`` for cosine)."""
        return getattr(self.map_a, "sigma", None), getattr(self.map_b, "sigma", None)

    def set_bandwidth(self, sigma: Any) -> None:  # type: ignore[override]
        """Fix the ``"auto"`` bandwidths: ``sigma`` is a pair ``(sigma_a, sigma_b)``; a map whose bandwidth is fixed
        already keeps it (its entry is ignored).

        Raises:
            ValueError: not a pair.
        """
        if not isinstance(sigma, (tuple, list)) or len(sigma) != 2:
            raise ValueError(f"PairedFeatureMap.set_bandwidth: `sigma` must be a pair (sigma_a, sigma_b), got {sigma!r}.")
        for feature_map, value in zip((self.map_a, self.map_b), sigma):
            if feature_map.awaits_bandwidth:
                feature_map.set_bandwidth(value)

    def frequencies(self) -> Optional[Tensor]:
        """What every rank must hold identically: both frequency matrices, or the widths for the cosine kernel."""
        if self.in_features is None or self.awaits_bandwidth:
            return None
        if isinstance(self.map_a, GaussianRFF):
            return torch.cat([self.map_a.omega.flatten(), self.map_b.omega.flatten()])
        return torch.tensor(self.in_features, dtype=torch.float64)
