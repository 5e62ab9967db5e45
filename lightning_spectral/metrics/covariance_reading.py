"""The reading of one stream's kernel covariance: its value ``C``, spectrum, modes, top samples and gallery."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional

import torch
from torch import Tensor

from lightning_spectral._checks import check_batches, check_positive_int
from lightning_spectral.functional.mode_shares import ModeRow, counted_shares, counting, summed_over_ranks
from lightning_spectral.functional.modes import Ids, Modes, check_candidates_memory, mode_scores, top_samples
from lightning_spectral.metrics.reading import ModeGallery, Reading, kept_summary


class CovarianceReading(Reading):
    r"""A reading of [`Covariance`][lightning_spectral.metrics.Covariance] (and
    [`RFFCovariance`][lightning_spectral.metrics.RFFCovariance]): ``value`` is ``C = (1/n) sum_i phi(x_i)
    phi(x_i)^T`` (D, D), float64; with ``noise_draws`` its entrywise standard error."""

    settings = ("noise_draws",)

    def _bind(self, metric: Any) -> None:
        self.samples = self.streams["samples"]

    def _value(self) -> Tensor:
        return self.samples.second_moment()

    @property
    def _precision(self) -> str:
        return getattr(self, "precision", "float64")

    def modes(self, k: int = 10) -> Modes:
        """The top-``k`` eigenvalues and eigenvectors (D, k) of ``C``.

        For well-separated modes an eigenvalue is about the mode's frequency times its within-mode kernel
        similarity (FKEA section 3; only approximately a frequency). Eigenvector signs follow the
        fitting-set rule of `functional.modes`.
        """
        check_positive_int(k, "k")
        values, vectors = self._cached_top("modes", k, self.samples.modes)  # the top k pairs, or more if kept
        k = min(k, values.shape[0])
        return Modes(values[:k], vectors[:, :k], torch.ones(k, dtype=torch.bool))

    def spectrum(self) -> Tensor:
        """The eigenvalues of ``C`` (descending, float64, round-off zeroed;
        [`psd_eigenvalues`][lightning_spectral.algebra.psd_eigenvalues] at the metric's ``precision``, float64 if it
        has none)."""
        return self._cached("spectrum", lambda: self.samples.eigenvalues(self._precision))

    def standard_error(self) -> Tensor:
        r"""The standard error of every entry of ``C`` (D, D), float64: $\sqrt{\tfrac{1}{A}\sum_a (E_a)_{ij}^2}$, the
        root mean square of the ``noise_draws`` multiplier draws
        ([`sampling_noise`][lightning_spectral.functional.sampling_noise]). ``C`` is linear in the sums, so each
        draw is its replicate exactly (no first-order step).

        Raises:
            RuntimeError: built with ``noise_draws=0`` (no draws were kept).
        """
        if not self.noise_draws:
            raise RuntimeError(f"{self.metric_name}.standard_error: built with noise_draws=0, so no draws were "
                               "kept; build it with noise_draws >= 1.")

        def error() -> Tensor:
            noise = self.samples.noise_sums()
            return torch.stack([noise.draw(a) for a in range(noise.draws)]).square().mean(0).sqrt()

        return self._cached("se", error)

    @kept_summary
    def summary(self) -> dict[str, Any]:
        """The covariance ``C`` (``""``, D x D: a matrix, not a scalar), with ``noise_draws`` its entrywise standard
        error ``se`` (D x D), and ``sigma`` (a setting, no se)."""
        values: dict[str, Any] = {"": self.value}
        if self.noise_draws:
            values["se"] = self.standard_error()
        return self._with_sigma(values)

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
            each rank streams its shard and only the candidates are gathered (a collective).
        """
        return self._top_samples(batches, k, per_mode)[0]

    def _top_samples(
        self, batches: Iterable[tuple[Tensor, Ids]], k: int, per_mode: int
    ) -> tuple[list[tuple[Tensor, Tensor]], Tensor]:
        """`top_samples` and, from the same pass, each mode's share of the streamed samples (k,): those scoring at
        least half the median score of its top samples
        ([`lightning_spectral.functional.mode_shares`][lightning_spectral.functional.mode_shares])."""
        batches = check_batches(batches, f"{self.metric_name}.top_samples")
        per_mode = check_positive_int(per_mode, "per_mode")
        check_candidates_memory(self.metric_name, check_positive_int(k, "k"), per_mode)
        vectors = self.modes(k).eigenvectors
        feature_map = self.feature_map
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
        samples, shares = self._top_samples(batches, k, per_mode)
        values = self.modes(k).eigenvalues
        rows = [
            ModeRow("", i, float(share), "samples", f"(eigenvalue {float(v):.3g})")
            for i, (v, share) in enumerate(zip(values[: len(samples)], shares, strict=True))
        ]
        labels = [row.line() for row in rows]
        return {"modes": ModeGallery(samples, labels, title=f"top {len(samples)} modes, best samples first", rows=rows)}

    def plot_spectrum(self, ax: Any = None, top: int = 50) -> tuple[Any, Any]:
        """Bar plot of the ``top`` eigenvalues of ``C`` (each a mode's share of the unit trace).

        Returns:
            ``(figure, axis)``.

        Examples:
            >>> import torch
            >>> from lightning_spectral.metrics import RFFCovariance
            >>> metric = RFFCovariance(sigma=1.0, n_frequencies=32)
            >>> metric.update(torch.randn(100, 2))
            >>> figure, axis = metric.reading().plot_spectrum(top=10)
            >>> len(axis.patches)
            10
        """
        from lightning_spectral.pictures.plots import panels, plot_spectrum

        check_positive_int(top, "top")
        figure, (axis,) = panels(1, ax)
        plot_spectrum(self.spectrum(), top=top, title=f"{self.metric_name}: kernel covariance spectrum", ax=axis)
        return figure, axis
