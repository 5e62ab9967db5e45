"""FINCNovelty: the modes a model produces more (novel) or less (missing) often than a reference (FINC)."""

from __future__ import annotations

from typing import Any, Optional, Union

from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor, nn

from lightning_spectral._checks import (
    check_bool,
    check_memory,
    check_positive,
    check_positive_int,
    check_side,
)
from lightning_spectral.algebra.gram import DEFAULT_CHUNK_SIZE
from lightning_spectral.functional.finc import (
    DEFAULT_MIN_EIGENVALUE,
    DEFAULT_RHO,
    DEFAULT_SIGNIFICANCE,
    check_significance,
)
from lightning_spectral.functional.finc_null import NULL_BATCH
from lightning_spectral.functional.sampling_noise import (
    DEFAULT_DRAWS,
    DEFAULT_RATIO,
    Multipliers,
    check_draws,
)
from lightning_spectral.kernels.gaussian_rff import GaussianRFF
from lightning_spectral.metrics.base import SpectralMetric
from lightning_spectral.metrics.finc_reading import FINCReading


class FINCNovelty(SpectralMetric):
    r"""Novel modes of generated embeddings against a reference: the spectrum of ``C_gen - rho C_ref`` (FINC).

    Both sides go through one set of random frequencies. Positive eigenvalues of
    ``L = C_gen - rho C_ref`` mark modes the generated data holds more than ``rho`` times as often as the
    reference (FINC eq. 4); the mirror ``C_ref - rho C_gen`` marks under-represented (missing) modes.

    Score (``compute``): finite samples give ``L`` many small positive eigenvalues from noise alone, so only
    significant eigenvalues count: ``novelty = sum of eigenvalues with p-value <= significance (and >
    min_eigenvalue)``. The p-value of an eigenvalue is the chance that sampling noise alone puts the top
    eigenvalue that high; its law is estimated from ``noise_draws`` multiplier draws of the generated side, scaled to
    both sides' noise (each sample's multiplier is a smooth random function of its own values, so order, batching and
    sharding do not matter, and neither do the last bits of the embeddings). On two samples of one
    distribution at most a ``significance`` share of runs names any mode. See
    [`lightning_spectral.functional.finc`][lightning_spectral.functional.finc] for the formula. ``novel_modes(k)``
    carries each mode's eigenvalue
    (its excess mass, weighted by its within-mode similarity), p-value and whether it is significant; 0 means no
    novel mode was found.

    Args:
        sigma: Gaussian bandwidth (> 0), or ``"auto"``: fixed from the reference rows at the first read (the rule of [`auto_bandwidth`][lightning_spectral.kernels.auto_bandwidth]; ``summary()["sigma"]`` reports it).
        n_frequencies: r; covariances are 2r x 2r.
        rho: novelty threshold (>= 1; the paper uses 1, 5 and 10). Default 2: novel = more than twice as often as
            the reference, missing = less than half as often; chosen on dropped classes
            (docs/benchmarks/dropped-modes.md "Dropped modes at the defaults"); ``rho = 1`` (any excess) names fewer
            of them, with a cheaper null.
        seed: frequency seed, identical on every rank.
        significance: the level in (0, 1) (default 0.05): the share of same-distribution runs allowed to name a
            mode.
        min_eigenvalue: absolute minimum of a significant eigenvalue (default 1e-3, about 0.1 % extra mass).
        noise_draws: multiplier draws of the sampling noise, kept by the generated side, in [1, 64] (default 3):
            ``2 + noise_draws`` (2r)^2 float64 sums are kept (5 by default; fewer draws widen the Student-t quantile
            and cost power, docs/benchmarks/finc-significance.md).
        reset_real_features: if False, ``reset()`` keeps the reference side (as torchmetrics' FID), so a
            reference is accumulated once per run.
        in_features: the input width d, if known (else the first batch fixes it).
        chunk_size: rows mapped and summed at once (rows wait in a buffer until this many are pending).
        feature: a frozen ``nn.Module`` mapping a batch of images to (N, d) embeddings: ``update`` then takes
            images ([`FrozenFeature`][lightning_spectral.metrics.FrozenFeature]); ``None``: embeddings.
        normalize: with ``feature``: images are floats in [0, 1] (``True``) or ``uint8`` in [0, 255] (``False``,
            torchmetrics' FID convention); ``None`` (default, as the callbacks): read from the dtype.
        save_feature: with ``feature``: also write its weights into the metric's ``state_dict``.
        kwargs: ``torchmetrics.Metric`` keyword arguments (``process_group``, ``dist_sync_fn``, ...).

    Examples:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> metric = FINCNovelty(sigma=1.0, n_frequencies=256, rho=1.0)
        >>> metric.update(torch.randn(300, 2, generator=g) * 0.1, real=True)
        >>> metric.update(torch.randn(200, 2, generator=g) * 0.1, real=False)           # shared mode
        >>> metric.update(torch.randn(100, 2, generator=g) * 0.1 + 10.0, real=False)    # novel mode
        >>> 0.25 < float(metric.compute()) < 0.4
        True
        >>> modes = metric.reading().novel_modes(3)
        >>> int(modes.significant.sum()), float(modes.p_values[0]) < 1e-3
        (1, True)
    """

    inputs = "two"
    higher_is_better: Optional[bool] = None
    reading_class = FINCReading

    def __init__(
        self,
        sigma: Union[float, str],
        n_frequencies: int = 2048,
        *,
        rho: float = DEFAULT_RHO,
        seed: int = 0,
        significance: float = DEFAULT_SIGNIFICANCE,
        min_eigenvalue: float = DEFAULT_MIN_EIGENVALUE,
        noise_draws: int = DEFAULT_DRAWS,
        reset_real_features: bool = True,
        in_features: Optional[int] = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        feature: Optional[nn.Module] = None,
        normalize: Optional[bool] = None,
        save_feature: bool = False,
        **kwargs: Any,
    ) -> None:
        rho = check_positive(rho, "rho")
        significance = check_significance(significance)
        min_eigenvalue = check_positive(min_eigenvalue, "min_eigenvalue")
        noise_draws = check_draws(noise_draws, "noise_draws")
        check_bool(reset_real_features, "reset_real_features")
        rff = GaussianRFF(None, n_frequencies, sigma, seed, persistent=False)
        self._check_memory(rff.n_frequencies, noise_draws)
        super().__init__(
            feature_map=rff,
            chunk_size=chunk_size,
            feature=feature,
            normalize=normalize,
            save_feature=save_feature,
            **kwargs,
        )
        if rho < 1:
            rank_zero_warn(
                f"FINCNovelty: rho={rho} < 1 lets shared modes through as 'novel' and the significance rule "
                "assumes rho >= 1 (the FINC paper's range)."
            )
        self.sigma, self.n_frequencies, self.seed = rff.sigma, rff.n_frequencies, rff.seed
        self.rho, self.significance, self.min_eigenvalue = rho, significance, min_eigenvalue
        self.noise_draws = noise_draws
        self.reset_real_features = reset_real_features
        multipliers = Multipliers(noise_draws, rff.sigma, rff.seed, DEFAULT_RATIO)
        self.gen = [self._add_accumulator("gen", multipliers=multipliers, mean_draws=True)]
        self.ref = [self._add_accumulator("ref", reference=True)]
        if in_features is not None:
            self._build(check_positive_int(in_features, "in_features"))

    @staticmethod
    def _check_memory(n_frequencies: int, draws: int) -> None:
        """Refuse before allocating: ``2 + noise_draws`` (2r)^2 float64 sums, plus the difference and a batch of the
        null's matrices of the same size at compute."""
        width = 2 * n_frequencies
        kept = 2 + draws
        extra = 1 + min(NULL_BATCH, 2 * draws)
        needed = 8 * ((kept + extra) * width * width + 2 * width)
        what = f"{kept} float64 sums of {width} x {width} (`noise_draws`={draws}) and {extra} at compute"
        fix = (f"use a smaller `n_frequencies` (2r = 4096 to 16384 is typical) or fewer `noise_draws` (>= 1; {draws} "
               "now)")
        check_memory("FINCNovelty", "n_frequencies", n_frequencies, needed, what, fix)

    #: The layout of the sums: multiplier draws on the generated side only, with the draws of its mean (written with
    #: every checkpoint).
    _NOISE_LAYOUT = "generated-side draws with mean draws"

    def _checkpoint_settings(self) -> dict[str, Any]:
        """The sums' layout and ``noise_draws`` (a checkpoint of either other is refused on load)."""
        return {"noise": self._NOISE_LAYOUT, "noise_draws": self.noise_draws}

    def set_extra_state(self, state: Any) -> None:
        """Refuse a checkpoint whose sums were written when both sides kept multiplier draws (no ``noise`` setting):
        those draws cannot be converted (the multipliers depend on ``draws``); and one whose generated side kept no
        draws of its mean (``noise`` ``"generated-side draws"``)."""
        if isinstance(state, dict) and set(state.get("sums", {})) == {"gen", "ref"} and "noise" not in (
            state.get("settings") or {}
        ) and any(packed.numel() > 1 for packed in state["sums"].values()):
            raise RuntimeError(
                "FINCNovelty: the checkpoint's sums were written by an earlier version that kept multiplier draws on "
                "both sides (2 x (1 + draws) sums of (2r)^2); this version keeps them on the generated side only "
                "(2 + draws) and cannot convert them. Accumulate the data again instead of resuming these sums (or "
                "load the checkpoint with the version that wrote it)."
            )
        if isinstance(state, dict) and (state.get("settings") or {}).get("noise") == "generated-side draws":
            raise RuntimeError(
                "FINCNovelty: the checkpoint's sums were written by an earlier version whose generated side kept no "
                "draws of its mean (the mode shares' standard errors need them: `A` vectors of 2r beside its "
                "(2r)^2 draws) and cannot be converted. Accumulate the data again instead of resuming these sums (or "
                "load the checkpoint with the version that wrote it)."
            )
        super().set_extra_state(state)

    def update(self, features: Tensor, real: bool) -> None:
        """Add embeddings (N, d) (or images, with ``feature``) of the reference (``real=True``) or of the
        generated side (``real=False``)."""
        check_side(real, "FINCNovelty")
        embeddings = self._embeddings(features)
        (self.ref if real else self.gen)[0].add(embeddings)
