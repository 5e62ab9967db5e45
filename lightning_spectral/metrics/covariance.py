"""Streaming random-Fourier-feature covariance and its modes: the shared state behind FKEA and kernel PCA."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional

import torch
from torch import Tensor

from lightning_spectral._checks import check_positive_int
from lightning_spectral.functional.modes import Ids, Modes, mode_scores, orient, top_samples
from lightning_spectral.linalg import DEFAULT_CHUNK_SIZE, add_covariance_, symmetric_eigh
from lightning_spectral.metrics._base import RFFMetric


class RFFCovariance(RFFMetric):
    r"""Uncentred kernel covariance ``C = (1/n) sum_i phi(x_i) phi(x_i)^T`` through Gaussian random features.

    ``phi`` is :class:`~lightning_spectral.features.GaussianRFF` (``2r`` features of unit norm), so ``trace(C) = 1``
    and the non-zero eigenvalues of ``C`` equal those of the proxy kernel matrix ``K~/n`` (FKEA eq. 2).
    States: ``cov_sum`` (2r, 2r), ``feature_sum`` (2r,) and ``n_samples``, float64 sums, all-reduced under DDP;
    memory does not grow with the number of samples.

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
    feature_sum: Tensor
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
        self.add_sum_state("feature_sum", (self.feature_dim,))
        self.add_sum_state("n_samples")

    def update(self, features: Tensor) -> None:
        """Add a batch of embeddings (N, d); N may be 0."""
        feature_map = self.validated_features_map(features)
        add_covariance_(self.cov_sum, features, feature_map, self.chunk_size, feature_sum=self.feature_sum)
        self.n_samples += features.shape[0]

    def _covariance(self) -> Tensor:
        self._require_samples(self.n_samples)
        return self.cov_sum / self.n_samples

    def compute(self) -> Tensor:
        """The covariance ``C`` (2r, 2r), float64.

        Raises:
            RuntimeError: no samples were accumulated on any rank.
        """
        return self._covariance()

    def modes(self, k: int = 10) -> Modes:
        """The top-``k`` eigenvalues and eigenvectors (2r, k) of ``C``, over all ranks (a collective under DDP).

        For well-separated modes an eigenvalue is about the mode's frequency times its within-mode kernel
        similarity (FKEA section 3; only approximately a frequency). Eigenvector signs follow the
        fitting-set rule of :mod:`~lightning_spectral.functional.modes`.
        """
        check_positive_int(k, "k")
        with self.synced():
            values, vectors = self.cached("eigh", lambda: symmetric_eigh(self._covariance()))
            k = min(k, values.shape[0])
            vectors = orient(vectors[:, :k], self.feature_sum)
        return Modes(values[:k], vectors, torch.ones(k, dtype=torch.bool))

    def top_samples(
        self, batches: Iterable[tuple[Tensor, Ids]], k: int = 10, per_mode: int = 16
    ) -> list[tuple[Tensor, Tensor]]:
        """Second streaming pass: for each of the top ``k`` modes, the ``per_mode`` best-scoring samples.

        Args:
            batches: iterable of ``(features (N, d), ids (N,))``, e.g. the same dataloader again; ids are
                integers the caller can map back to samples (dataset indices).
            k: number of modes.
            per_mode: samples kept per mode.

        Returns:
            A list of ``k`` pairs ``(ids, scores)``, scores descending. Memory ``O(k * per_mode)``; under DDP
            each rank streams its shard and only the candidates are gathered.
        """
        check_positive_int(per_mode, "per_mode")
        modes = self.modes(k)
        feature_map, vectors = self.feature_map, modes.eigenvectors
        return top_samples(
            batches, lambda x: mode_scores(x, feature_map, vectors), vectors.shape[1], per_mode, self.process_group
        )
