"""FINCNovelty: the modes a model produces more often than a reference (FINC), with a noise-aware score."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional

from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor

from lightning_spectral._checks import check_positive, check_positive_int, check_side
from lightning_spectral.functional.finc import (
    DEFAULT_MIN_EIGENVALUE,
    DEFAULT_SIGNIFICANCE,
    DifferentialSpectrum,
    differential_spectrum,
)
from lightning_spectral.functional.modes import Ids, Modes, mode_scores, orient, top_samples
from lightning_spectral.linalg import DEFAULT_CHUNK_SIZE, add_covariance_
from lightning_spectral.metrics._base import RFFMetric


class FINCNovelty(RFFMetric):
    r"""Novel modes of generated embeddings against a reference: the spectrum of ``C_gen - rho C_ref`` (FINC).

    Both sides go through one set of random frequencies. Positive eigenvalues of
    ``L = C_gen - rho C_ref`` mark modes the generated data holds more than ``rho`` times as often as the
    reference (FINC eq. 4); the mirror ``C_ref - rho C_gen`` marks under-represented (missing) modes.

    Score (``compute``): finite samples give ``L`` many small positive eigenvalues from noise alone, often
    summing to more than a real novel class contributes, so only eigenvalues above a noise threshold count:
    ``novelty = sum of eigenvalues > max(significance * floor, min_eigenvalue)``, where the floor is the
    largest eigenvalue that two disjoint halves of the reference produce against each other (alternate
    reference samples go to halves A and B as they stream in), rescaled to the test's sample sizes. See
    :mod:`lightning_spectral.functional.finc` for the formula. ``novel_modes(k).significant`` says which
    modes pass. The rule assumes ``rho >= 1`` (the paper's range); 0 means no novel mode was found.

    Args:
        sigma: Gaussian bandwidth (> 0).
        n_frequencies: r; covariances are 2r x 2r.
        rho: novelty threshold (>= 1 in the paper; 1, 5 and 10 are used there).
        seed: frequency seed, identical on every rank.
        significance: margin over the noise floor (default 2).
        min_eigenvalue: absolute minimum of a significant eigenvalue (default 1e-3, about 0.1 % extra mass).
        reset_real_features: if False, ``reset()`` keeps the reference side (as torchmetrics' FID), so a
            reference is accumulated once per run.
        in_features: as :class:`~lightning_spectral.metrics.RFFCovariance`.
        chunk_size: as for ``in_features``.
        kwargs: ``torchmetrics.Metric`` keyword arguments.

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> metric = FINCNovelty(sigma=1.0, n_frequencies=256)
        >>> metric.update(torch.randn(300, 2, generator=g) * 0.1, real=True)
        >>> metric.update(torch.randn(200, 2, generator=g) * 0.1, real=False)           # shared mode
        >>> metric.update(torch.randn(100, 2, generator=g) * 0.1 + 10.0, real=False)    # novel mode
        >>> 0.25 < float(metric.compute()) < 0.4
        True
        >>> int(metric.novel_modes(3).significant.sum())
        1
    """

    is_differentiable = False
    reference_states = ("ref_cov_sum_a", "ref_cov_sum_b", "ref_feature_sum", "n_ref_a", "n_ref_b")
    higher_is_better: Optional[bool] = None

    gen_cov_sum: Tensor
    gen_feature_sum: Tensor
    n_gen: Tensor
    ref_cov_sum_a: Tensor
    ref_cov_sum_b: Tensor
    ref_feature_sum: Tensor
    n_ref_a: Tensor
    n_ref_b: Tensor

    def __init__(
        self,
        sigma: float,
        n_frequencies: int = 2048,
        rho: float = 1.0,
        seed: int = 0,
        significance: float = DEFAULT_SIGNIFICANCE,
        min_eigenvalue: float = DEFAULT_MIN_EIGENVALUE,
        reset_real_features: bool = True,
        in_features: Optional[int] = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        **kwargs: Any,
    ) -> None:
        super().__init__(sigma, n_frequencies, seed, in_features, chunk_size, **kwargs)
        self.rho = check_positive(rho, "rho")
        if self.rho < 1:
            rank_zero_warn(
                f"FINCNovelty: rho={self.rho} < 1 lets shared modes through as 'novel' and the noise floor "
                "assumes rho >= 1 (the FINC paper's range)."
            )
        self.significance = check_positive(significance, "significance")
        self.min_eigenvalue = check_positive(min_eigenvalue, "min_eigenvalue")
        if not isinstance(reset_real_features, bool):
            raise TypeError(f"`reset_real_features` must be a bool, got {reset_real_features!r}.")
        self.reset_real_features = reset_real_features
        width = self.feature_dim
        for side in ("gen_cov_sum", "ref_cov_sum_a", "ref_cov_sum_b"):
            self.add_sum_state(side, (width, width))
        self.add_sum_state("gen_feature_sum", (width,))
        self.add_sum_state("ref_feature_sum", (width,))
        for count in ("n_gen", "n_ref_a", "n_ref_b"):
            self.add_sum_state(count)

    def update(self, features: Tensor, real: bool) -> None:
        """Add embeddings (N, d) of the reference (``real=True``) or of the generated side (``real=False``)."""
        check_side(real, "FINCNovelty")
        feature_map = self.validated_features_map(features)
        if not real:
            add_covariance_(self.gen_cov_sum, features, feature_map, self.chunk_size, self.gen_feature_sum)
            self.n_gen += features.shape[0]
            return
        # alternate samples go to halves A and B (their difference measures the noise floor)
        first_to_a = int(self.n_ref_a + self.n_ref_b) % 2
        halves = ((first_to_a, "ref_cov_sum_a", "n_ref_a"), (1 - first_to_a, "ref_cov_sum_b", "n_ref_b"))
        for half, cov_sum, count in halves:
            rows = features[half::2]
            add_covariance_(getattr(self, cov_sum), rows, feature_map, self.chunk_size, self.ref_feature_sum)
            setattr(self, count, getattr(self, count) + rows.shape[0])

    def _spectrum(self, missing: bool) -> DifferentialSpectrum:
        return self.cached("missing" if missing else "novel", lambda: self._decompose(missing))

    def _decompose(self, missing: bool) -> DifferentialSpectrum:
        n_gen, n_a, n_b = float(self.n_gen), float(self.n_ref_a), float(self.n_ref_b)
        if n_gen <= 0:
            raise RuntimeError(
                "FINCNovelty: no generated samples were accumulated (on any rank); call `update(x, real=False)`."
            )
        if n_a + n_b < 2:
            raise RuntimeError(
                "FINCNovelty: fewer than 2 reference samples were accumulated (on any rank); call "
                "`update(x, real=True)` with the reference (or keep it with `reset_real_features=False`)."
            )
        cov_gen = self.gen_cov_sum / n_gen
        cov_a, cov_b = self.ref_cov_sum_a / n_a, self.ref_cov_sum_b / n_b
        cov_ref = (self.ref_cov_sum_a + self.ref_cov_sum_b) / (n_a + n_b)
        split = (cov_a, n_a, cov_b, n_b)
        sides = ((cov_ref, n_a + n_b), (cov_gen, n_gen)) if missing else ((cov_gen, n_gen), (cov_ref, n_a + n_b))
        return differential_spectrum(*sides[0], *sides[1], split, self.rho, self.significance, self.min_eigenvalue)

    def compute(self) -> Tensor:
        """Novelty score: the sum of the eigenvalues of ``C_gen - rho C_ref`` above the noise threshold."""
        return self._spectrum(missing=False).score

    def threshold(self, missing: bool = False) -> float:
        """The significance threshold of the novel (or missing) modes: ``max(significance * floor, min_eigenvalue)``."""
        with self.synced():
            return self._spectrum(missing).threshold

    def _modes(self, k: int, missing: bool) -> Modes:
        check_positive_int(k, "k")
        with self.synced():
            spectrum = self._spectrum(missing)
            k = min(k, spectrum.eigenvalues.shape[0])
            vectors = orient(spectrum.eigenvectors[:, :k], self.ref_feature_sum if missing else self.gen_feature_sum)
        return Modes(spectrum.eigenvalues[:k], vectors, spectrum.significant[:k])

    def novel_modes(self, k: int = 10) -> Modes:
        """Top-``k`` eigen-pairs of ``C_gen - rho C_ref``: modes over-represented in the generated data.

        ``significant`` marks those above the noise threshold. A collective under DDP.
        """
        return self._modes(k, missing=False)

    def missing_modes(self, k: int = 10) -> Modes:
        """Top-``k`` eigen-pairs of ``C_ref - rho C_gen``: modes the generated data under-represents."""
        return self._modes(k, missing=True)

    def top_samples(
        self, batches: Iterable[tuple[Tensor, Ids]], k: int = 10, per_mode: int = 16, missing: bool = False
    ) -> list[tuple[Tensor, Tensor]]:
        """Stream ``(features, ids)`` batches and return, per novel (or missing) mode, the best-scoring samples.

        Pass generated batches for novel modes and reference batches for missing ones. Returns ``k``
        ``(ids, scores)`` pairs, scores descending; check ``novel_modes(k).significant`` for which modes
        pass the noise threshold. Memory ``O(k * per_mode)``; under DDP only candidates are gathered.
        """
        check_positive_int(per_mode, "per_mode")
        modes = self._modes(k, missing)
        feature_map, vectors = self.feature_map, modes.eigenvectors
        return top_samples(
            batches, lambda x: mode_scores(x, feature_map, vectors), vectors.shape[1], per_mode, self.process_group
        )
