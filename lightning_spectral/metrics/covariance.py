"""The kernel covariance of one stream and its modes: the state behind FKEA (Gaussian) and kernel PCA (any map)."""

from __future__ import annotations

from typing import Any, Optional, Union

from torch import Tensor, nn

from lightning_spectral._checks import check_positive_int, check_state_memory
from lightning_spectral.algebra.gram import DEFAULT_CHUNK_SIZE
from lightning_spectral.functional.sampling_noise import DEFAULT_RATIO, Multipliers, check_noise_draws
from lightning_spectral.kernels.feature_map import FeatureMap
from lightning_spectral.kernels.gaussian_rff import GaussianRFF
from lightning_spectral.metrics.base import SpectralMetric
from lightning_spectral.metrics.covariance_reading import CovarianceReading


class Covariance(SpectralMetric):
    r"""Uncentred kernel covariance ``C = (1/n) sum_i phi(x_i) phi(x_i)^T`` of a stream, for a feature map ``phi``.

    One [`Accumulator`][lightning_spectral.metrics.Accumulator], ``samples``: the count, the feature sum (D,)
    and the outer-product sum (D, D), float64, all-reduced under DDP; memory does not grow with the number of
    samples. [`RFFCovariance`][lightning_spectral.metrics.RFFCovariance] is the Gaussian kernel's (FKEA); kernel PCA
    uses the cosine and linear maps.

    Args:
        feature_map: ``phi`` (a [`FeatureMap`][lightning_spectral.kernels.FeatureMap]).
        centre: accumulate around a shift near the mean, so that ``centred_covariance`` stays exact for features
            with a large offset (the values do not change).
        multipliers: keep the stream's sampling-noise draws
            ([`sampling_noise`][lightning_spectral.functional.sampling_noise]; uncentred streams only).
        in_features: the input width d, if known (else the first batch fixes it).
        chunk_size: rows mapped and summed at once (rows wait in a buffer until this many are pending).
        feature: a frozen ``nn.Module`` mapping a batch of images to (N, d) embeddings: ``update`` then takes
            images ([`FrozenFeature`][lightning_spectral.metrics.FrozenFeature]); ``None``: embeddings.
        normalize: with ``feature``: images are floats in [0, 1] (``True``) or ``uint8`` in [0, 255] (``False``,
            torchmetrics' FID convention); ``None`` (default, as the callbacks): read from the dtype.
        save_feature: with ``feature``: also write its weights into the metric's ``state_dict``.
        kwargs: ``torchmetrics.Metric`` keyword arguments (``process_group``, ``dist_sync_fn``, ...).
    """

    higher_is_better: Optional[bool] = None
    reports_scalars = False  # its value is the (D, D) matrix C
    reading_class = CovarianceReading
    noise_draws = 0  # multiplier draws kept (RFFCovariance's argument)

    def __init__(
        self,
        feature_map: FeatureMap,
        *,
        centre: bool = False,
        multipliers: Optional[Multipliers] = None,
        in_features: Optional[int] = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        feature: Optional[nn.Module] = None,
        normalize: Optional[bool] = None,
        save_feature: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            feature_map=feature_map,
            chunk_size=chunk_size,
            feature=feature,
            normalize=normalize,
            save_feature=save_feature,
            **kwargs,
        )
        self.samples = self._add_accumulator("samples", centre=centre, multipliers=multipliers)
        if in_features is not None:
            self._build(check_positive_int(in_features, "in_features"))

    def update(self, features: Tensor) -> None:
        """Add a batch of embeddings (N, d), or of images with ``feature``; N may be 0."""
        self.samples.add(self._embeddings(features))


class RFFCovariance(Covariance):
    r"""The Gaussian kernel's covariance ``C = (1/n) sum_i phi(x_i) phi(x_i)^T`` through random Fourier features.

    ``phi`` is [`GaussianRFF`][lightning_spectral.kernels.GaussianRFF] (``2r`` features of unit norm), so ``trace(C) =
    1``
    and the non-zero eigenvalues of ``C`` equal those of the proxy kernel matrix ``K~/n`` (FKEA eq. 2). State: one
    accumulator ([`Covariance`][lightning_spectral.metrics.Covariance]).

    Args:
        sigma: Gaussian bandwidth (> 0) or ``"auto"`` (see [`FKEAVendi`][lightning_spectral.metrics.FKEAVendi]).
        n_frequencies: number of frequencies ``r`` (features ``2r``).
        seed: seed of the frequencies; every rank must use the same one.
        noise_draws: multiplier draws kept for the standard errors (``A`` (2r)^2 float64 sums beside ``Q``;
            [`sampling_noise`][lightning_spectral.functional.sampling_noise]): ``summary()["se"]``, the entrywise se
            of ``C``; 0 (default here) keeps none and reports no ``se``.
            [`FKEAVendi`][lightning_spectral.metrics.FKEAVendi] keeps 2 by default.
        chunk_size: rows mapped and summed at once (rows wait in a buffer until this many are pending).
        feature: a frozen ``nn.Module`` mapping a batch of images to (N, d) embeddings: ``update`` then takes
            images ([`FrozenFeature`][lightning_spectral.metrics.FrozenFeature]); ``None``: embeddings.
        normalize: with ``feature``: images are floats in [0, 1] (``True``) or ``uint8`` in [0, 255] (``False``,
            torchmetrics' FID convention); ``None`` (default, as the callbacks): read from the dtype.
        save_feature: with ``feature``: also write its weights into the metric's ``state_dict``.
        kwargs: ``in_features``, ``centre`` (see [`Covariance`][lightning_spectral.metrics.Covariance]) and
            ``torchmetrics.Metric`` keyword arguments.

    Examples:
        >>> import torch
        >>> metric = RFFCovariance(sigma=1.0, n_frequencies=16)
        >>> metric.update(torch.randn(100, 3))
        >>> cov = metric.compute()
        >>> cov.shape, round(float(cov.trace()), 6)
        (torch.Size([32, 32]), 1.0)
    """

    def __init__(
        self,
        sigma: Union[float, str],
        n_frequencies: int = 2048,
        *,
        seed: int = 0,
        noise_draws: int = 0,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        feature: Optional[nn.Module] = None,
        normalize: Optional[bool] = None,
        save_feature: bool = False,
        **kwargs: Any,
    ) -> None:
        noise_draws = check_noise_draws(noise_draws)
        rff = GaussianRFF(None, n_frequencies, sigma, seed, persistent=False)
        check_state_memory(type(self).__name__, rff.n_frequencies, matrices=1 + noise_draws, vectors=1)
        multipliers = Multipliers(noise_draws, rff.sigma, rff.seed, DEFAULT_RATIO) if noise_draws else None
        super().__init__(
            feature_map=rff,
            multipliers=multipliers,
            chunk_size=chunk_size,
            feature=feature,
            normalize=normalize,
            save_feature=save_feature,
            **kwargs,
        )
        self.sigma, self.n_frequencies, self.seed = rff.sigma, rff.n_frequencies, rff.seed
        self.noise_draws = noise_draws
