"""The reading of FINCNovelty: both sides' spectra, nulls, modes, shares, standard errors and galleries."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Optional

import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor

from lightning_spectral._checks import check_batches, check_bool, check_positive_int
from lightning_spectral.algebra.eigen import PARTIAL_MIN_SIZE
from lightning_spectral.functional.finc import (
    DifferentialSpectrum,
    check_significance,
    differential_spectrum,
    top_bias,
    top_modes,
)
from lightning_spectral.functional.finc_null import noise_scale, null_model, null_scale
from lightning_spectral.functional.mode_groups import ModeGroups, contrast_ends, end_groups, region_detail
from lightning_spectral.functional.mode_shares import (
    ModeRow,
    ShareErrors,
    eigenvalue_gradients,
    two_sided_errors,
    two_sided_share_errors,
    two_sided_shares,
)
from lightning_spectral.functional.modes import (
    Ids,
    Modes,
    check_candidates_memory,
    mode_scores,
    orient,
    top_samples,
    top_samples_and_rows,
)
from lightning_spectral.functional.sampling_noise import NoiseSums, standard_error
from lightning_spectral.functional.student_t import student_t_isf
from lightning_spectral.functional.threshold_step import threshold_step
from lightning_spectral.metrics.accumulator import PooledSums
from lightning_spectral.metrics.headline import headline_values, minus_log10
from lightning_spectral.metrics.reading import Interval, ModeGallery, Reading, kept_summary

#: The share above which a mode's other end counts as in excess (`FINCNovelty.grouped_modes`): 1e-6, far below any
#: share a row reports and far above round-off.
SHARE_FLOOR = 1e-6

#: The fewest leading eigenvectors a side's first decomposition finds (the galleries' default modes,
#: ``EmbeddingMetrics(gallery_modes=4)``): the standard errors read one and the galleries then four, and a second
#: Lanczos run for four costs about what the first did, where finding four in the first costs little more.
TOP_PAIRS = 4
#: Modes below the last significant one (the top ones where none is significant) whose eigenpairs the scores'
#: standard errors read: those that may pass in another sample set (`FINCReading.standard_errors`,
#: `functional.threshold_step`).
STEP_MARGIN = 4


def _last_significant(spectrum: DifferentialSpectrum) -> int:
    """How many leading eigenvalues reach the last significant one (0 without one)."""
    return int(spectrum.significant.nonzero().max()) + 1 if bool(spectrum.significant.any()) else 0


class FINCReading(Reading):
    """A reading of [`FINCNovelty`][lightning_spectral.metrics.FINCNovelty]: ``value`` is the novelty score;
    ``novel_modes(k)`` / ``missing_modes(k)``, ``threshold``, ``standard_errors``, ``mode_shares`` and their standard
    errors, ``summary()``, ``galleries`` and ``plot_spectrum`` read both sides' decompositions, each done once on
    this reading and shared by all of them."""

    settings = ("rho", "significance", "min_eigenvalue", "noise_draws", "n_frequencies", "seed")

    def _bind(self, metric: Any) -> None:
        self.gen = [self.streams["gen"]]
        self.ref = [self.streams["ref"]]

    def pooled(self, real: bool = False) -> PooledSums:
        """The generated (``real=False``) or reference side as one stream (``C = Q / n``)."""
        check_bool(real, "real")
        return PooledSums(self.ref if real else self.gen, "FINCNovelty: this side holds no sample.")

    def _side(self, real: bool) -> NoiseSums:
        accumulator = (self.ref if real else self.gen)[0]
        if accumulator.multipliers is not None:
            return accumulator.noise_sums()
        total = accumulator.cov_sum
        return NoiseSums(total, total.new_zeros((0, *total.shape)), total.new_zeros(0), float(accumulator.count))

    def _spectrum(self, missing: bool, vectors: bool = True, full: bool = False) -> DifferentialSpectrum:
        """The spectrum of ``C_gen - rho C_ref`` (or the missing side's). Without ``vectors`` and ``full`` a
        ``partial`` one from 2r = 1024 (every eigenvalue above the threshold and the top one, all the score and the
        modes read; `differential_spectrum`); ``full`` all 2r eigenvalues (the plot)."""
        full = full or self.feature_map.out_features < PARTIAL_MIN_SIZE  # below it: eigvalsh (the partial route's)
        name = ("missing" if missing else "novel") + ("" if vectors else "_values" if full else "_partial")
        if missing and self.rho == 1.0 and (vectors or full):  # C_ref - C_gen = -(C_gen - C_ref): one serves both
            return self._cached(name, lambda: self._spectrum(False, vectors, full).mirrored())
        return self._cached(name, lambda: self._decompose(missing, vectors, partial=not (vectors or full)))

    def _top_spectrum(self, missing: bool, k: int) -> DifferentialSpectrum:
        """The values' spectrum with the eigenvectors of its top ``k`` modes and of every significant one (the
        standard errors' and the galleries' modes; `top_modes`),
        kept for any later read of as many or fewer."""
        spectrum = self._spectrum(missing, vectors=False)
        count = max(k, _last_significant(spectrum), TOP_PAIRS)

        def decompose(count: int) -> DifferentialSpectrum:
            gen, ref = self._side(real=False), self._side(real=True)
            x, y = (ref, gen) if missing else (gen, ref)
            return top_modes(spectrum, x, y, self.rho, count)

        return self._cached_top(("missing" if missing else "novel") + "_top", count, decompose)

    def _decompose(self, missing: bool, vectors: bool, partial: bool = False) -> DifferentialSpectrum:
        self._cached("sides_checked", self._check_sides)
        gen, ref = self._side(real=False), self._side(real=True)
        x, y = (ref, gen) if missing else (gen, ref)
        null = self._null(x, y)
        return differential_spectrum(x, y, self.rho, self.significance, self.min_eigenvalue, vectors, null, partial)

    def _check_sides(self) -> bool:
        """Refuse what FINC cannot compare, naming why: a side without samples; a generated side of one sample (its
        sampling noise, which the null is drawn from, cannot be estimated from one); a reference whose rows are all
        one point to the kernel (``||C_ref||_F^2 = (tr C_ref)^2``: a reference of one sample, not a distribution).
        A generated side whose rows are all one point is a collapse, which FINC reports."""
        for side, accumulator, call in (("generated", self.gen[0], "real=False"), ("reference", self.ref[0], "real=True")):
            count = float(accumulator.count)
            if count < 1:
                raise RuntimeError(
                    f"FINCNovelty: no {side} samples were accumulated (on any rank); call `update(x, {call})`"
                    + (" (or keep the reference with `reset_real_features=False`)." if side == "reference" else ".")
                )
            if side == "generated" and count < 2:
                raise RuntimeError(
                    "FINCNovelty: 1 generated sample was accumulated; the null is drawn from the generated side's "
                    "sampling noise, which one sample cannot show. Feed at least 2 (hundreds for a useful null)."
                )
        moment = self.ref[0].second_moment()
        trace = float(moment.diagonal().sum())
        if float(moment.square().sum()) >= (1.0 - 1e-6) * trace * trace:  # equal rows, to float32 products
            raise RuntimeError(
                f"FINCNovelty: the reference's {int(float(self.ref[0].count))} rows are all one point to the kernel "
                "(its covariance has rank one), so there is no distribution to compare against; pass the reference "
                "samples themselves (e.g. the dataset's embeddings), not one sample repeated."
            )
        return True

    def _null(self, x: NoiseSums, y: NoiseSums) -> Any:
        """The null of ``C_x - rho C_y``, kept beside the spectra: its matrices depend on the order of the sides only
        through the scale ``c'`` ([`null_scale`][lightning_spectral.functional.finc_null.null_scale]), so novel and
        missing share it at ``rho = 1`` or when both sides hold as many samples."""
        gen = x if x.draws else y
        return self._cached(("null", null_scale(gen, x, y, self.rho)), lambda: null_model(x, y, self.rho))

    def _value(self) -> Tensor:
        """Novelty score: the sum of the eigenvalues of ``C_gen - rho C_ref`` above the noise threshold."""
        return self._spectrum(missing=False, vectors=False).score

    def threshold(self, missing: bool = False) -> float:
        """The eigenvalue at which a novel (or missing) mode becomes significant: ``max(the null's quantile at the
        level, min_eigenvalue)``."""
        check_bool(missing, "missing")
        return self._spectrum(missing, vectors=False).threshold

    def _modes(self, k: int, missing: bool) -> Modes:
        check_positive_int(k, "k")
        spectrum = self._top_spectrum(missing, k)
        k = min(k, spectrum.eigenvectors.shape[1])  # type: ignore[union-attr]
        # toward the side the mode is over-represented in, v . (mu_x - mu_y) >= 0: the end that carries the excess;
        # where that is 0 to round-off (a contrast of two equal clusters), the fitting side's sum decides
        x, y = self.pooled(real=missing), self.pooled(real=not missing)
        excess, vectors = x.mean() - y.mean(), spectrum.eigenvectors[:, :k]  # type: ignore[index]
        tied = (excess.double() @ vectors.double()).abs() <= 1e-9 * float(excess.double().norm())
        vectors = torch.where(tied, orient(vectors, x.feature_sum), orient(vectors, excess))
        return Modes(spectrum.eigenvalues[:k], vectors, spectrum.significant[:k], spectrum.p_values[:k])

    def novel_modes(self, k: int = 10) -> Modes:
        """Top-``k`` eigen-pairs of ``C_gen - rho C_ref``: modes over-represented in the generated data.

        ``eigenvalues`` are the modes' excess masses (times their within-mode similarity), ``p_values`` the chance
        that noise alone reaches them, ``significant`` those with ``p <= significance`` (and above
        ``min_eigenvalue``): ``p = 0.08`` at level 0.05 is "not significant", ``p = 0.9`` "nothing there". A
        collective under DDP.
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
        check_bool(missing, "missing")
        batches = check_batches(batches, "FINCNovelty.top_samples")
        per_mode = check_positive_int(per_mode, "per_mode")
        check_candidates_memory("FINCNovelty", check_positive_int(k, "k"), per_mode)
        modes = self._modes(k, missing)
        feature_map, vectors = self.feature_map, modes.eigenvectors
        return top_samples(
            batches, lambda x: mode_scores(x, feature_map, vectors), vectors.shape[1], per_mode, self.process_group
        )

    def grouped_modes(
        self, batches: Iterable[tuple[Tensor, Ids]], k: int = 10, per_mode: int = 16, missing: bool = False
    ) -> ModeGroups:
        """The top ``k`` novel (or missing) modes as the regions a person reads: each mode's ends (the end of its
        excess, ``v . (mu_x - mu_y) >= 0``, and the other one where its top samples are members of the mode: a
        contrast of two classes names both), with split modes reported as one: an end whose top samples are
        members of an earlier end's region, and which does not split that end's own top samples, joins that region
        ([`mode_groups`][lightning_spectral.functional.mode_groups]). One pass over ``batches`` (generated batches
        for novel modes, reference batches for missing ones), as `top_samples`; a collective under DDP. It groups
        the ``k`` modes it is given: the galleries pass the significant ones.

        A region's share (and its standard error) is read along the mean direction of its first end's top samples
        within the ``k`` modes' span (`direction_shares`, `mode_shares`' model): a region shows one class where its
        mode may be the union or the contrast of two, whose eigenvector reads their joint share or about 0. A
        mode's other end is a region only where this side is in excess along it (that share is above `SHARE_FLOOR`):
        the other end of a contrast of a missing and a present class (or style) is not missing.

        Returns:
            A [`ModeGroups`][lightning_spectral.functional.mode_groups.ModeGroups]: per region its mode ends (the
            representative first), the representative's top samples and the region's share.
        """
        check_bool(missing, "missing")
        batches = check_batches(batches, "FINCNovelty.grouped_modes")
        per_mode = check_positive_int(per_mode, "per_mode")
        check_candidates_memory("FINCNovelty", 2 * check_positive_int(k, "k"), per_mode, rows=True)
        modes = self._modes(k, missing)
        feature_map, vectors = self.feature_map, modes.eigenvectors
        count = vectors.shape[1]

        def both_ends(x: Tensor) -> Tensor:
            scores = mode_scores(x, feature_map, vectors)
            return torch.cat([scores, -scores], 1)

        samples, rows = top_samples_and_rows(batches, both_ends, 2 * count, per_mode, self.process_group)
        overlap = [j for j in range(count) if bool(torch.isin(samples[j][0], samples[count + j][0]).any())]
        if overlap:  # known only after the pass (every rank holds the same gathered samples; rank 0 warns)
            rank_zero_warn(
                f"FINCNovelty.grouped_modes: mode {overlap[0] + 1}'s two ends share top samples: per_mode={per_mode} "
                "is more than half the samples streamed, or many samples score the same on the mode (duplicates, a "
                "collapsed side), so its ends hold the bulk of the data, not the mode's members, and the rows' "
                "samples, directions and shares read alike. Pass a `per_mode` well below half the samples."
            )
        # each end's direction: the mean of its top samples' projections on the k modes (u = sqrt(r) V^T phi); an
        # end without samples (no batch on any rank) reads share 0 and se 0
        means = [part[:, :count].mean(0) if part.shape[0] else torch.zeros(count, dtype=torch.float64) for part in rows]
        directions = vectors.double() @ torch.stack(means, 1).to(vectors.device)
        held = directions.norm(dim=0) > 0
        end_shares, end_errors = (torch.zeros(2 * count, dtype=torch.float64) for _ in range(2))
        if bool(held.any()):
            found = self.direction_shares(directions[:, held], missing)
            end_shares[held.cpu()], end_errors[held.cpu()] = found[0].cpu(), found[1].cpu()
        # a mode's other end is a region where it holds members and its side is in excess along it (a share above
        # SHARE_FLOOR: a share that is 0 but for round-off does not decide)
        others = [members and bool(end_shares[count + j] > SHARE_FLOOR)
                  for j, members in enumerate(contrast_ends(samples[:count], samples[count:]))]
        groups, columns = end_groups(samples, rows, others)
        return ModeGroups(groups, [samples[column] for column in columns], end_shares[columns], modes,
                          samples[:count], end_errors[columns])

    def direction_shares(self, directions: Tensor, missing: bool = False) -> tuple[Tensor, Tensor]:
        """The two-sided share (`mode_shares`' model) of the novel (or missing) side's samples along any directions
        (2r, m) of the feature space (normalised here), for a region that is no single eigenvector, and its standard
        error with the directions held fixed (`mode_share_standard_errors`' delta method without the eigenvector's
        turn). From the sums; a collective under DDP. Returns ``(shares, se)``, (m,) each."""
        check_bool(missing, "missing")
        width = 2 * self.n_frequencies
        if not isinstance(directions, Tensor) or directions.ndim != 2 or directions.shape[0] != width:
            shape = tuple(directions.shape) if isinstance(directions, Tensor) else type(directions).__name__
            raise ValueError(f"FINCNovelty.direction_shares: `directions` must be a ({width}, m) tensor (one column "
                             f"per direction in the 2r = {width} feature space), got {shape}.")
        if not bool(torch.isfinite(directions).all()):
            raise ValueError("FINCNovelty.direction_shares: `directions` holds NaN or infinite values.")
        moments = self._moments(missing)
        directions = directions.double()
        directions = directions / directions.norm(dim=0).clamp_min(1e-300)
        shares = two_sided_shares(directions, *moments)
        errors = two_sided_share_errors(
            directions, *moments, self.rho,
            self._side(real=False), noise_is_x=not missing, count_other=float(self.ref[0].count), turn=False,
        )
        return shares, errors.se

    def mode_shares(self, k: int = 10, missing: bool = False) -> Tensor:
        """Each of the top ``k`` novel (or missing) modes' share of its side's samples (the generated ones, or the
        reference's) (k,): the share of that side's samples that are the mode's members, when the side's other
        samples project on the mode like the other side's (from the first two moments of each side's projections,
        [`two_sided_shares`][lightning_spectral.functional.mode_shares.two_sided_shares]). From the sums alone; a collective under
        DDP.

        Examples:
            >>> import torch
            >>> g = torch.Generator().manual_seed(0)
            >>> ref = torch.cat([torch.randn(900, 2, generator=g), 8 + 0.3 * torch.randn(100, 2, generator=g)])
            >>> from lightning_spectral.metrics import FINCNovelty
            >>> metric = FINCNovelty(sigma=1.0, n_frequencies=256)
            >>> metric.update(torch.randn(1000, 2, generator=g), real=False)
            >>> metric.update(ref, real=True)  # 10 % of the reference is a cluster the generated side lacks
            >>> round(float(metric.reading().mode_shares(1, missing=True)[0]), 2)
            0.1
        """
        check_bool(missing, "missing")
        check_positive_int(k, "k")
        return two_sided_shares(self._modes(k, missing).eigenvectors, *self._moments(missing))

    def mode_share_standard_errors(self, k: int = 10, missing: bool = False) -> Tensor:
        """Standard errors (k,) of [`mode_shares`][lightning_spectral.metrics.finc_reading.FINCReading.mode_shares], first order
        in the noise (the delta method, the eigenvector's turn included;
        [`two_sided_share_errors`][lightning_spectral.functional.mode_shares.two_sided_share_errors]): the generated
        side's part from its multiplier draws of the mean and the second moment (exact bootstrap replicates), the
        reference's (which keeps no draws) from the share's model (members of the mode + samples like the other
        side). From the sums; a collective under DDP.

        Examples:
            >>> import torch
            >>> g = torch.Generator().manual_seed(0)
            >>> ref = torch.cat([torch.randn(900, 2, generator=g), 8 + 0.3 * torch.randn(100, 2, generator=g)])
            >>> from lightning_spectral.metrics import FINCNovelty
            >>> metric = FINCNovelty(sigma=1.0, n_frequencies=256)
            >>> metric.update(torch.randn(1000, 2, generator=g), real=False)
            >>> metric.update(ref, real=True)
            >>> se = float(metric.reading().mode_share_standard_errors(1, missing=True)[0])
            >>> 0.003 < se < 0.03   # about sqrt(0.1 * 0.9 / 1000) = 0.0095
            True
        """
        check_bool(missing, "missing")
        check_positive_int(k, "k")
        modes = self._modes(k, missing)
        name = ("missing" if missing else "novel") + f"_share_se_{modes.eigenvectors.shape[1]}"
        return self._cached(name, lambda: self._share_errors(modes, missing))

    def _share_errors(self, modes: Modes, missing: bool) -> Tensor:
        found = self._top_spectrum(missing, modes.eigenvectors.shape[1]).eigenvectors  # every eigenvector found
        return two_sided_share_errors(
            modes.eigenvectors, *self._moments(missing), self.rho, self._side(real=False), noise_is_x=not missing,
            count_other=float(self.ref[0].count), basis=found,
        ).se

    def _moments(self, missing: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(mu_x, C_x, mu_y, C_y)`` of the side the modes are over-represented in (``x``: the reference for the
        missing ones) and the other. Formed per call (two (2r)^2 matrices), except inside `summary`, which keeps one
        pair for all its reads and drops it when done."""
        kept = self._answers.get("moments")
        if kept is None:
            gen, ref = self.pooled(real=False), self.pooled(real=True)
            kept = (gen.mean(), gen.second_moment(), ref.mean(), ref.second_moment())
        mean_gen, moment_gen, mean_ref, moment_ref = kept
        return (mean_ref, moment_ref, mean_gen, moment_gen) if missing else kept

    def missing_score(self) -> Tensor:
        """The sum of the significant eigenvalues of ``C_ref - rho C_gen``: the mass of the missing modes."""
        return self._spectrum(missing=True, vectors=False).score

    def standard_errors(self, missing: bool = False) -> Tensor:
        """Standard error of the novelty (or missing) score, the sum of the eigenvalues above the threshold.

        Two parts, added as variances:

        - the passing eigenvalues' own noise, first order (the delta method, Kato 1995 II-2: ``lambda_i`` moves by
          ``v_i^T dC_x v_i - rho v_i^T dC_y v_i``): the generated side's part from its multiplier draws (exact
          bootstrap replicates, summed over the passing modes), the reference's (which keeps no draws) from each
          mode's share model, as the shares' (`functional.mode_shares.two_sided_errors`);
        - which modes pass (`functional.threshold_step`): every found mode near the threshold (the significant ones
          and `STEP_MARGIN` below them) passes with the chance its eigenvalue's law gives, and the threshold moves
          with its own standard error (`NullModel.threshold_se`). A side where no mode passes reads its top
          `STEP_MARGIN` modes the same way, so its score of 0 has an se where a mode could pass.

        Measured against the spread over 10 independent sample sets (digits and Fashion-MNIST with three classes
        dropped, ``benchmarks/bench_count_stability.py``). A collective under DDP.
        """
        check_bool(missing, "missing")
        return self._score_errors(missing)[0]

    def mode_count_standard_error(self, missing: bool = False) -> Tensor:
        """Standard error of the count of significant novel (or missing) modes: which modes pass, as in
        [`standard_errors`][lightning_spectral.metrics.finc_reading.FINCReading.standard_errors]."""
        check_bool(missing, "missing")
        return self._score_errors(missing)[1]

    def _score_errors(self, missing: bool) -> tuple[Tensor, Tensor]:
        return self._cached(("missing" if missing else "novel") + "_se", lambda: self._score_and_count_errors(missing))

    def _score_and_count_errors(self, missing: bool) -> tuple[Tensor, Tensor]:
        spectrum = self._spectrum(missing, vectors=False)
        null = spectrum.null
        estimated = null.threshold(self.significance) >= self.min_eigenvalue  # else the constant min_eigenvalue
        step_se = null.threshold_se(self.significance) if estimated else 0.0
        modes = self._modes(_last_significant(spectrum) + STEP_MARGIN, missing)  # oriented, as the share model reads
        errors = self._eigenvalue_errors(missing, modes.eigenvectors)
        passing = modes.significant
        first = errors.replicates[:, passing].sum(1).pow(2).mean() + errors.other[passing].sum()
        step = threshold_step(modes.eigenvalues, errors.se, spectrum.threshold, step_se)
        return (first + step.mass_variance).sqrt(), step.count_variance.sqrt()

    def _eigenvalue_errors(self, missing: bool, vectors: Tensor) -> ShareErrors:
        """The eigenvalues' first-order standard errors along ``vectors`` (D, k, oriented as `Modes`: the share model
        reads which end holds the mode): the generated side's part from its draws, the reference's from the share
        model (`two_sided_errors`)."""
        return two_sided_errors(
            eigenvalue_gradients(vectors, self.rho), *self._moments(missing), self._side(real=False),
            noise_is_x=not missing, count_other=float(self.ref[0].count),
        )

    def _top_se(self, missing: bool) -> Tensor:
        """The top eigenvalue's standard error from the generated side's draws, ``u_1^T D_a u_1`` with
        ``D_a = c E_gen(a)`` ([`noise_scale`][lightning_spectral.functional.finc_null.noise_scale]: one distribution
        on both sides; its coverage with `top_bias`: docs/benchmarks/coverage.md)."""
        spectrum = self._top_spectrum(missing, 1)
        gen, ref = self._side(real=False), self._side(real=True)
        x, y = (ref, gen) if missing else (gen, ref)
        top = spectrum.eigenvectors[:, :1]  # type: ignore[index]
        moved = noise_scale(gen, x, y, self.rho) * gen.draws_times(top)  # D_a u_1, (A, D, 1)
        return standard_error((top * moved).sum((1, 2)))

    def top_interval(self, missing: bool = False, level: float = 0.95) -> Interval:
        """The top novel (or missing) eigenvalue with its standard error, its upward bias and its interval
        ``[top - bias - q se, top + q se]``, ``q = t_{draws, (1 + level) / 2}``.

        ``lambda_max`` is convex, so the top eigenvalue of a noisy ``L`` is biased up (near the noise floor it is the
        largest of many noisy ones, and the symmetric ``top +- q se`` misses low: docs/benchmarks/coverage.md
        "Coverage of the standard errors"); the bias is the multiplier bootstrap's (second order,
        ``functional.finc.top_bias``: ``2 draws + 1`` Lanczos runs, about as much as
        one ``compute()``, which is why no summary or callback reads it: ask for it when you need the interval).
        """
        check_bool(missing, "missing")
        level = check_significance(level, "level")
        name = "missing" if missing else "novel"
        value = self._spectrum(missing, vectors=False).eigenvalues[0]
        se = self._cached(name + "_top_se", lambda: self._top_se(missing))
        bias = self._cached(name + "_top_bias", lambda: self._top_bias(missing))
        q = student_t_isf((1.0 - level) / 2.0, self._side(real=False).draws)
        return Interval(value, se, bias, value - bias - q * se, value + q * se, level)

    def _top_bias(self, missing: bool) -> Tensor:
        gen, ref = self._side(real=False), self._side(real=True)
        top = self._top_spectrum(missing, 1).eigenvectors[:, 0]  # type: ignore[index]  # the standard errors' too
        return top_bias(*((ref, gen) if missing else (gen, ref)), self.rho, near=top)

    @kept_summary
    def summary(self) -> dict[str, Any]:
        """The novelty score (``""``), the missing-mode score, how many novel / missing modes are significant (with
        their standard errors ``novel_modes_se`` / ``missing_modes_se``,
        [`mode_count_standard_error`][lightning_spectral.metrics.finc_reading.FINCReading.mode_count_standard_error]), and
        the top novel / missing mode's eigenvalue (excess mass) and p-value; ``se`` and ``missing_se``: the scores'
        standard errors ([`standard_errors`][lightning_spectral.metrics.finc_reading.FINCReading.standard_errors]).
        A mode's share of its side is a gallery row's (a region: both ends of a mode, split modes as one; logged with
        its se as ``detail/missing_share/i``); per eigenpair, with the eigenvector's turn in its se (a MINRES solve
        per side), ask [`mode_shares`][lightning_spectral.metrics.finc_reading.FINCReading.mode_shares] and
        [`mode_share_standard_errors`][lightning_spectral.metrics.finc_reading.FINCReading.mode_share_standard_errors];
        the top eigenvalue's interval, which costs a bootstrap, is read on demand by
        [`top_interval`][lightning_spectral.metrics.finc_reading.FINCReading.top_interval]; ``n``, ``n_real`` and
        ``n_features`` (2r), the sizes the values were computed at; ``sigma``."""
        self._answers["moments"] = self._moments(missing=False)  # one pair for every read below, dropped after
        try:
            return self._summary()
        finally:
            del self._answers["moments"]

    def _summary(self) -> dict[str, Any]:
        novel = self._spectrum(missing=False, vectors=False)
        missing = self._spectrum(missing=True, vectors=False)
        (novel_se, novel_count_se), (missing_se, missing_count_se) = self._score_errors(False), self._score_errors(True)
        sizes = self._sizes(real=True)
        return self._with_sigma({
            "": novel.score,
            "missing": missing.score,
            "novel_modes": novel.significant.sum().double(),
            "missing_modes": missing.significant.sum().double(),
            "novel_modes_se": novel_count_se,
            "missing_modes_se": missing_count_se,
            "novel_top": novel.eigenvalues[0],
            "novel_top_p_value": novel.p_values[0],
            "missing_top": missing.eigenvalues[0],
            "missing_top_p_value": missing.p_values[0],
            "se": novel_se,
            "missing_se": missing_se,
            **sizes,
        })

    def headline(self, summary: Optional[Mapping[str, Any]] = None) -> dict[str, Tensor]:
        """From ``summary``: ``novel_score`` and ``missing_score`` with their ``_se``, the counts of significant
        ``novel_modes`` / ``missing_modes`` with theirs (which modes pass moves with the sample), and each side's top eigenvalue's p-value as
        ``novel_top_minus_log10_p`` / ``missing_top_minus_log10_p`` (above 1.3: p < 0.05)."""
        summary = self.summary() if summary is None else summary
        return {
            **headline_values("novel_score", summary[""], summary["se"]),
            **headline_values("missing_score", summary["missing"], summary["missing_se"]),
            **headline_values("novel_modes", summary["novel_modes"], summary["novel_modes_se"]),
            **headline_values("missing_modes", summary["missing_modes"], summary["missing_modes_se"]),
            "novel_top_minus_log10_p": minus_log10(summary["novel_top_p_value"]),
            "missing_top_minus_log10_p": minus_log10(summary["missing_top_p_value"]),
        }

    def galleries(
        self, batches: Iterable[tuple[Tensor, Ids]], k: int, per_mode: int, reference_batches: Optional[Iterable] = None
    ) -> dict[str, ModeGallery]:
        """``"novel"``: generated samples (``batches``) of the significant novel modes; ``"missing"``: reference
        samples (``reference_batches``) of the significant missing modes. A gallery with no significant mode is
        left out. One row per region (`grouped_modes`: both ends of a mode, split modes as one). Rows read
        "missing region 1: about 10 % of the reference (eigenvalue 0.02, p=0.001)": the region's share of its side's
        samples, read along its top samples' mean direction
        ([`direction_shares`][lightning_spectral.metrics.finc_reading.FINCReading.direction_shares]); ``ModeGallery.rows`` keeps
        them, with the shares' standard errors, as
        [`ModeRow`][lightning_spectral.functional.mode_shares.ModeRow]s, for a caller that knows the classes."""
        galleries = {}
        for name, missing, stream in (("novel", False, batches), ("missing", True, reference_batches)):
            if stream is None or not bool(self._spectrum(missing, vectors=False).significant.any()):
                continue  # no row to show: no eigenvectors to find
            modes = self._modes(k, missing)
            count = int(modes.significant.sum())
            total = int(self._spectrum(missing, vectors=False).significant.sum())
            grouped = self.grouped_modes(stream, k=count, per_mode=per_mode, missing=missing)
            side = "reference" if missing else "generated samples"
            errors = grouped.shares_se if grouped.shares_se is not None else [None] * len(grouped.groups)
            first_rows = grouped.region_of(1)
            rows = [
                ModeRow(name, i, float(share), side, region_detail(group, modes, first_rows),
                        None if se is None else float(se), "region")
                for i, (group, share, se) in enumerate(zip(grouped.groups, grouped.shares, errors, strict=True))
            ]
            # the title counts the modes (eigenpairs: the logged `{name}_modes`), the rows count regions
            title = f"{total} significant {name} mode{'' if total == 1 else 's'}"
            title += f", {count} shown" if count != total else ""
            title += f" in {len(rows)} region{'' if len(rows) == 1 else 's'}"
            galleries[name] = ModeGallery(
                grouped.samples, [row.line() for row in rows], "reference" if missing else "samples", title, rows
            )
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
            >>> from lightning_spectral.metrics import FINCNovelty
            >>> metric = FINCNovelty(sigma=1.0, n_frequencies=64)
            >>> metric.update(torch.randn(300, 2, generator=g) * 0.1, real=True)
            >>> metric.update(torch.randn(300, 2, generator=g) * 0.1 + 10.0, real=False)
            >>> figure, (novel, missing) = metric.reading().plot_spectrum(top=5)
            >>> novel.get_title().startswith("novel")
            True
        """
        from lightning_spectral.pictures.plots import panels, plot_spectrum

        check_positive_int(top, "top")
        which = (False, True) if missing is None else (check_bool(missing, "missing"),)
        spectra = [self._spectrum(side, vectors=False, full=True) for side in which]
        figure, axes = panels(len(which), ax)
        for axis, side, spectrum in zip(axes, which, spectra):
            name, x, y = ("missing", "ref", "gen") if side else ("novel", "gen", "ref")
            count = int(spectrum.significant.sum())
            title = f"{name} modes: C_{x} - {self.rho:g} C_{y} ({count} significant)"
            plot_spectrum(spectrum.eigenvalues, spectrum.threshold, top=top, title=title, ax=axis)
        return figure, axes if len(axes) > 1 else axes[0]
