"""FINCNovelty: the modes a model produces more (novel) or less (missing) often than a reference (FINC)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional

from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor

from lightning_spectral._checks import check_bool, check_positive, check_positive_int, check_side, check_state_memory
from lightning_spectral.features import GaussianRFF
from lightning_spectral.functional.finc import (
    DEFAULT_MIN_EIGENVALUE,
    DEFAULT_SIGNIFICANCE,
    DifferentialSpectrum,
    Moment,
    NoiseSplit,
    differential_spectrum,
    reference_halves,
)
from lightning_spectral.functional.modes import Ids, Modes, check_candidates_memory, mode_scores, orient, top_samples
from lightning_spectral.metrics.base import ModeGallery, SpectralMetric


class FINCNovelty(SpectralMetric):
    r"""Novel modes of generated embeddings against a reference: the spectrum of ``C_gen - rho C_ref`` (FINC).

    Both sides go through one set of random frequencies. Positive eigenvalues of
    ``L = C_gen - rho C_ref`` mark modes the generated data holds more than ``rho`` times as often as the
    reference (FINC eq. 4); the mirror ``C_ref - rho C_gen`` marks under-represented (missing) modes.

    Score (``compute``): finite samples give ``L`` many small positive eigenvalues from noise alone, often
    summing to more than a real novel class contributes, so only eigenvalues above a noise threshold count:
    ``novelty = sum of eigenvalues > max(significance * floor, min_eigenvalue)``, where the floor is the
    largest eigenvalue that two disjoint halves of the reference produce against each other (each reference
    sample joins a half by a hash of its own values, so order, batching and sharding do not matter), rescaled
    to the test's sample sizes. See
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
        kwargs: ``in_features``, ``chunk_size``, ``feature``, ``normalize``, ``save_feature`` (see
            :mod:`~lightning_spectral.metrics.base`) and torchmetrics' keyword arguments.

    Examples:
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

    inputs = "two"
    higher_is_better: Optional[bool] = None

    def __init__(
        self,
        sigma: float,
        n_frequencies: int = 2048,
        *,
        rho: float = 1.0,
        seed: int = 0,
        significance: float = DEFAULT_SIGNIFICANCE,
        min_eigenvalue: float = DEFAULT_MIN_EIGENVALUE,
        reset_real_features: bool = True,
        in_features: Optional[int] = None,
        **kwargs: Any,
    ) -> None:
        rho = check_positive(rho, "rho")
        significance = check_positive(significance, "significance")
        min_eigenvalue = check_positive(min_eigenvalue, "min_eigenvalue")
        check_bool(reset_real_features, "reset_real_features")
        rff = GaussianRFF(None, n_frequencies, sigma, seed, persistent=False)
        check_state_memory(type(self).__name__, rff.n_frequencies, matrices=3, vectors=3)
        super().__init__(feature_map=rff, **kwargs)
        if rho < 1:
            rank_zero_warn(
                f"FINCNovelty: rho={rho} < 1 lets shared modes through as 'novel' and the noise floor "
                "assumes rho >= 1 (the FINC paper's range)."
            )
        self.sigma, self.n_frequencies, self.seed = rff.sigma, rff.n_frequencies, rff.seed
        self.rho, self.significance, self.min_eigenvalue = rho, significance, min_eigenvalue
        self.reset_real_features = reset_real_features
        self.gen = self.add_accumulator("gen")
        self.ref_a = self.add_accumulator("ref_a", reference=True)
        self.ref_b = self.add_accumulator("ref_b", reference=True)
        if in_features is not None:
            self.build(check_positive_int(in_features, "in_features"))

    def update(self, features: Tensor, real: bool) -> None:
        """Add embeddings (N, d) (or images, with ``feature``) of the reference (``real=True``) or of the
        generated side (``real=False``)."""
        check_side(real, "FINCNovelty")
        features = self.embeddings(features)
        if not real:
            self.gen.add(features)
            return
        in_a = reference_halves(features)  # a half per sample, from its content: order-free
        self.ref_a.add(features[in_a])
        self.ref_b.add(features[~in_a])

    def _spectrum(self, missing: bool, vectors: bool = True) -> DifferentialSpectrum:
        name = ("missing" if missing else "novel") + ("" if vectors else "_values")
        return self.cached(name, lambda: self._decompose(missing, vectors))

    def _decompose(self, missing: bool, vectors: bool) -> DifferentialSpectrum:
        n_gen, n_a, n_b = float(self.gen.count), float(self.ref_a.count), float(self.ref_b.count)
        if n_gen <= 0:
            raise RuntimeError(
                "FINCNovelty: no generated samples were accumulated (on any rank); call `update(x, real=False)`."
            )
        if min(n_a, n_b) < 1:
            raise RuntimeError(
                f"FINCNovelty: the noise floor needs reference samples in both halves, got {n_a:.0f} and {n_b:.0f} "
                "(on all ranks); call `update(x, real=True)` with more reference samples (or keep the reference "
                "with `reset_real_features=False`)."
            )
        # the sums as they are: each matrix decomposed below is formed in one pass over them
        gen = Moment((self.gen.cov_sum,), n_gen)
        split = NoiseSplit(Moment((self.ref_a.cov_sum,), n_a), Moment((self.ref_b.cov_sum,), n_b))
        ref = Moment((self.ref_a.cov_sum, self.ref_b.cov_sum), n_a + n_b)
        x, y = (ref, gen) if missing else (gen, ref)
        return differential_spectrum(x, y, split, self.rho, self.significance, self.min_eigenvalue, vectors=vectors)

    def compute(self) -> Tensor:
        """Novelty score: the sum of the eigenvalues of ``C_gen - rho C_ref`` above the noise threshold."""
        return self._spectrum(missing=False, vectors=False).score

    def threshold(self, missing: bool = False) -> float:
        """The significance threshold of the novel (or missing) modes: ``max(significance * floor, min_eigenvalue)``."""
        with self.synced():
            return self._spectrum(missing, vectors=False).threshold

    def _modes(self, k: int, missing: bool) -> Modes:
        check_positive_int(k, "k")
        with self.synced():
            spectrum = self._spectrum(missing)
            k = min(k, spectrum.eigenvalues.shape[0])
            feature_sum = self.ref_a.feature_sum + self.ref_b.feature_sum if missing else self.gen.feature_sum
            vectors = orient(spectrum.eigenvectors[:, :k], feature_sum)  # type: ignore[index]
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
        per_mode = check_positive_int(per_mode, "per_mode")
        check_candidates_memory("FINCNovelty", check_positive_int(k, "k"), per_mode)
        modes = self._modes(k, missing)
        feature_map, vectors = self.feature_map, modes.eigenvectors
        return top_samples(
            batches, lambda x: mode_scores(x, feature_map, vectors), vectors.shape[1], per_mode, self.process_group
        )

    def missing_score(self) -> Tensor:
        """The sum of the significant eigenvalues of ``C_ref - rho C_gen``: the mass of the missing modes."""
        with self.synced():
            return self._spectrum(missing=True, vectors=False).score

    def summary(self) -> dict[str, Tensor]:
        """The novelty score (``""``), the missing-mode score and how many novel / missing modes are significant."""
        with self.synced():
            novel = self._spectrum(missing=False, vectors=False)
            missing = self._spectrum(missing=True, vectors=False)
        return {
            "": novel.score,
            "missing": missing.score,
            "novel_modes": novel.significant.sum().double(),
            "missing_modes": missing.significant.sum().double(),
        }

    def galleries(
        self, batches: Iterable[tuple[Tensor, Ids]], k: int, per_mode: int, reference_batches: Optional[Iterable] = None
    ) -> dict[str, ModeGallery]:
        """``"novel"``: generated samples (``batches``) of the significant novel modes; ``"missing"``: reference
        samples (``reference_batches``) of the significant missing modes. A gallery with no significant mode is
        left out. Rows are labelled with the eigenvalue (about the extra probability mass times the mode's
        within-mode similarity)."""
        galleries = {}
        with self.synced():
            for name, missing, stream in (("novel", False, batches), ("missing", True, reference_batches)):
                modes = self._modes(k, missing)
                count = int(modes.significant.sum())
                if stream is None or count == 0:
                    continue
                total = int(self._spectrum(missing, vectors=False).significant.sum())
                samples = self.top_samples(stream, k=count, per_mode=per_mode, missing=missing)
                what = "missing mass (real images)" if missing else "excess mass (generated images)"
                labels = [
                    f"{name} mode {i + 1}: +{float(v):.3f} {what}" for i, v in enumerate(modes.eigenvalues[:count])
                ]
                title = f"{total} significant {name} mode{'' if total == 1 else 's'}"
                title += f", {count} shown" if count != total else ""
                galleries[name] = ModeGallery(samples, labels, "reference" if missing else "samples", title)
        return galleries

    def plot_spectrum(self, ax: Any = None, top: int = 50, missing: Optional[bool] = None) -> tuple[Any, Any]:
        """The ``top`` eigenvalues of ``C_gen - rho C_ref`` (novel) and ``C_ref - rho C_gen`` (missing), each with its
        significance threshold dashed: bars above it are the significant modes. A collective under DDP.

        Args:
            ax: an axis (one panel) or two axes (both); default a new figure.
            top: eigenvalues shown per panel.
            missing: ``None`` both panels, ``False`` the novel one, ``True`` the missing one.

        Returns:
            ``(figure, axis)`` for one panel, ``(figure, [novel_axis, missing_axis])`` for both.

        Examples:
            >>> import torch
            >>> g = torch.Generator().manual_seed(0)
            >>> metric = FINCNovelty(sigma=1.0, n_frequencies=64)
            >>> metric.update(torch.randn(300, 2, generator=g) * 0.1, real=True)
            >>> metric.update(torch.randn(300, 2, generator=g) * 0.1 + 10.0, real=False)
            >>> figure, (novel, missing) = metric.plot_spectrum(top=5)
            >>> novel.get_title().startswith("novel")
            True
        """
        from lightning_spectral.viz import panels, plot_spectrum

        check_positive_int(top, "top")
        which = (False, True) if missing is None else (check_bool(missing, "missing"),)
        with self.synced():
            spectra = [self._spectrum(side, vectors=False) for side in which]
        figure, axes = panels(len(which), ax)
        for axis, side, spectrum in zip(axes, which, spectra):
            name, x, y = ("missing", "ref", "gen") if side else ("novel", "gen", "ref")
            count = int(spectrum.significant.sum())
            title = f"{name} modes: C_{x} - {self.rho:g} C_{y} ({count} significant)"
            plot_spectrum(spectrum.eigenvalues, spectrum.threshold, top=top, title=title, ax=axis)
        return figure, axes if len(axes) > 1 else axes[0]
