"""Streaming random-Fourier-feature covariance: the shared state behind FKEA, FINC and kernel PCA."""

from __future__ import annotations

from typing import Any, Optional

from torch import Tensor

from lightning_spectral.linalg import DEFAULT_CHUNK_SIZE, add_covariance_
from lightning_spectral.metrics._base import RFFMetric


class RFFCovariance(RFFMetric):
    r"""Uncentred kernel covariance ``C = (1/n) sum_i phi(x_i) phi(x_i)^T`` through Gaussian random features.

    ``phi`` is :class:`~lightning_spectral.features.GaussianRFF` (``2r`` features of unit norm), so ``trace(C) = 1``
    and the non-zero eigenvalues of ``C`` equal those of the proxy kernel matrix ``K~/n`` (FKEA eq. 2).
    States: ``cov_sum`` (2r, 2r) and ``n_samples``, float64 sums, all-reduced under DDP; memory does not grow
    with the number of samples.

    Args:
        sigma: Gaussian bandwidth (> 0).
        n_frequencies: number of frequencies ``r`` (features ``2r``).
        seed: seed of the frequencies; every rank must use the same one.
        in_features: input width; if ``None`` the feature map is built at the first ``update``.
        chunk_size: rows per chunk of the accumulation.
        kwargs: ``torchmetrics.Metric`` keyword arguments.

    Example:
        >>> import torch
        >>> metric = RFFCovariance(sigma=1.0, n_frequencies=16)
        >>> metric.update(torch.randn(100, 3))
        >>> cov = metric.compute()
        >>> cov.shape, round(float(cov.trace()), 6)
        (torch.Size([32, 32]), 1.0)
    """

    is_differentiable = False
    higher_is_better: Optional[bool] = None

    cov_sum: Tensor
    n_samples: Tensor

    def __init__(
        self,
        sigma: float,
        n_frequencies: int = 2048,
        seed: int = 0,
        in_features: Optional[int] = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        **kwargs: Any,
    ) -> None:
        super().__init__(sigma, n_frequencies, seed, in_features, chunk_size, **kwargs)
        self.add_sum_state("cov_sum", (self.feature_dim, self.feature_dim))
        self.add_sum_state("n_samples")

    def update(self, features: Tensor) -> None:
        """Add a batch of embeddings (N, d); N may be 0."""
        feature_map = self.validated_features_map(features)
        add_covariance_(self.cov_sum, features, feature_map, self.chunk_size)
        self.n_samples += features.shape[0]

    def compute(self) -> Tensor:
        """The covariance ``C`` (2r, 2r), float64.

        Raises:
            RuntimeError: no samples were accumulated on any rank.
        """
        self._require_samples(self.n_samples)
        return self.cov_sum / self.n_samples
