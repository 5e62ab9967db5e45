"""The kernel covariance of one stream and its modes: the state behind FKEA (Gaussian) and kernel PCA (any map)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional, Union

import torch
from torch import Tensor, nn

from lightning_spectral._checks import check_batches, check_positive_int, check_state_memory
from lightning_spectral.algebra.gram import DEFAULT_CHUNK_SIZE
from lightning_spectral.functional.mode_shares import ModeRow, counted_shares, counting, summed_over_ranks
from lightning_spectral.functional.modes import Ids, Modes, check_candidates_memory, mode_scores, top_samples
from lightning_spectral.functional.sampling_noise import DEFAULT_RATIO, Multipliers, check_noise_draws
from lightning_spectral.kernels.feature_map import FeatureMap
from lightning_spectral.kernels.gaussian_rff import GaussianRFF
from lightning_spectral.metrics.base import ModeGallery, SpectralMetric


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
        self.samples = self.add_accumulator("samples", centre=centre, multipliers=multipliers)
        if in_features is not None:
            self.build(check_positive_int(in_features, "in_features"))

    def update(self, features: Tensor) -> None:
        """Add a batch of embeddings (N, d), or of images with ``feature``; N may be 0."""
        self.samples.add(self.embeddings(features))

    def compute(self) -> Tensor:
        """The covariance ``C`` (D, D), float64.

        Raises:
            RuntimeError: no samples were accumulated on any rank.
        """
        return self.samples.second_moment()

    def modes(self, k: int = 10) -> Modes:
        """The top-``k`` eigenvalues and eigenvectors (D, k) of ``C``, over all ranks (a collective under DDP).

        For well-separated modes an eigenvalue is about the mode's frequency times its within-mode kernel
        similarity (FKEA section 3; only approximately a frequency). Eigenvector signs follow the
        fitting-set rule of `functional.modes`.
        """
        check_positive_int(k, "k")
        with self.synced():
            values, vectors = self._cached_top("modes", k, self.samples.modes)  # the top k pairs, or more if kept
            k = min(k, values.shape[0])
            values, vectors = values[:k], vectors[:, :k]
        return Modes(values[:k], vectors, torch.ones(k, dtype=torch.bool))

    def spectrum(self) -> Tensor:
        """The eigenvalues of ``C`` (descending, float64, round-off zeroed), kept while the sums are unchanged
        ([`psd_eigenvalues`][lightning_spectral.algebra.psd_eigenvalues] at the metric's ``precision``, float64 if
        it has none)."""
        precision = getattr(self, "precision", "float64")
        return self._cached(f"spectrum/{precision}", lambda: self.samples.eigenvalues(precision))

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
        return self._top_samples(batches, k, per_mode)[0]

    def _top_samples(
        self, batches: Iterable[tuple[Tensor, Ids]], k: int, per_mode: int
    ) -> tuple[list[tuple[Tensor, Tensor]], Tensor]:
        """`top_samples` and, from the same pass, each mode's share of the streamed samples (k,): those scoring at
        least half the median score of its top samples
        ([`lightning_spectral.functional.mode_shares`][lightning_spectral.functional.mode_shares])."""
        batches = check_batches(batches, f"{type(self).__name__}.top_samples")
        per_mode = check_positive_int(per_mode, "per_mode")
        check_candidates_memory(type(self).__name__, check_positive_int(k, "k"), per_mode)
        modes = self.modes(k)
        feature_map, vectors = self.feature_map, modes.eigenvectors
        r = feature_map.n_frequencies
        score, histogram = counting(lambda x: mode_scores(x, feature_map, vectors), vectors.shape[1], r)
        samples = top_samples(batches, score, vectors.shape[1], per_mode, self.process_group)
        return samples, counted_shares(summed_over_ranks(histogram, self.process_group), samples, r)

    def galleries(
        self, batches: Iterable[tuple[Tensor, Ids]], k: int, per_mode: int, reference_batches: Optional[Iterable] = None
    ) -> dict[str, ModeGallery]:
        """``{"modes": ...}``: the top samples of the top ``k`` modes, each row labelled with the mode's share of the
        samples (those scoring at least half the median score of its top samples, counted in the same pass:
        [`mode_shares`][lightning_spectral.functional.mode_shares]) and its eigenvalue (its share of the kernel
        covariance's unit trace: a share times a within-mode similarity, not a share of the samples)."""
        with self.synced():
            samples, shares = self._top_samples(batches, k, per_mode)
            values = self.modes(k).eigenvalues
        rows = [
            ModeRow("", i, float(share), "samples", f"(eigenvalue {float(v):.3g})")
            for i, (v, share) in enumerate(zip(values[: len(samples)], shares, strict=True))
        ]
        labels = [row.line() for row in rows]
        return {"modes": ModeGallery(samples, labels, title=f"top {len(samples)} modes, best samples first", rows=rows)}

    def plot_spectrum(self, ax: Any = None, top: int = 50) -> tuple[Any, Any]:
        """Bar plot of the ``top`` eigenvalues of ``C`` (each a mode's share of the unit trace). A collective under DDP.

        Returns:
            ``(figure, axis)``.

        Examples:
            >>> import torch
            >>> metric = RFFCovariance(sigma=1.0, n_frequencies=32)
            >>> metric.update(torch.randn(100, 2))
            >>> figure, axis = metric.plot_spectrum(top=10)
            >>> len(axis.patches)
            10
        """
        from lightning_spectral.pictures.plots import panels, plot_spectrum

        check_positive_int(top, "top")
        with self.synced():
            values = self.spectrum()
        figure, (axis,) = panels(1, ax)
        plot_spectrum(values, top=top, title=f"{type(self).__name__}: kernel covariance spectrum", ax=axis)
        return figure, axis


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

    def standard_error(self) -> Tensor:
        r"""The standard error of every entry of ``C`` (D, D), float64: $\sqrt{\tfrac{1}{A}\sum_a (E_a)_{ij}^2}$, the
        root mean square of the ``noise_draws`` multiplier draws
        ([`sampling_noise`][lightning_spectral.functional.sampling_noise]). ``C`` is linear in the sums, so each
        draw is its replicate exactly (no first-order step). A collective under DDP.

        Raises:
            RuntimeError: built with ``noise_draws=0`` (no draws were kept).
        """
        if not self.noise_draws:
            raise RuntimeError(f"{type(self).__name__}.standard_error: built with noise_draws=0, so no draws were "
                               "kept; build it with noise_draws >= 1.")
        with self.synced():
            noise = self.samples.noise_sums()
            return torch.stack([noise.draw(a) for a in range(noise.draws)]).square().mean(0).sqrt()

    def summary(self) -> dict[str, Tensor]:
        """The covariance ``C`` (``""``, D x D: a matrix, not a scalar), with ``noise_draws`` its entrywise standard
        error ``se`` (D x D; [`standard_error`][lightning_spectral.metrics.RFFCovariance.standard_error]), and
        ``sigma`` (a setting, no se). A collective under DDP."""
        with self.synced():
            values = {"": self.value()}
            if self.noise_draws:
                values["se"] = self.standard_error()
        return self._with_sigma(values)
