"""SPECDivergence: streaming SPEC comparison of two embeddings of the same samples (SPEC-diff and clusters)."""

from __future__ import annotations

from typing import Any, Optional, Union

import torch
from torch import Tensor

from lightning_spectral._checks import (
    check_positive_int,
    check_seed,
    check_state_memory,
    check_width_memory,
)
from lightning_spectral.algebra.gram import DEFAULT_CHUNK_SIZE
from lightning_spectral.functional.sampling_noise import (
    DEFAULT_RATIO,
    DEFAULT_SCORE_DRAWS,
    Multipliers,
    check_noise_draws,
)
from lightning_spectral.functional.spec import check_pair
from lightning_spectral.kernels.bandwidth import check_sigma
from lightning_spectral.kernels.by_name import KERNELS
from lightning_spectral.kernels.paired_feature_map import PairedFeatureMap
from lightning_spectral.metrics.base import SpectralMetric
from lightning_spectral.metrics.spec_reading import SPECReading
from lightning_spectral.sync.collectives import distributed_available


class SPECDivergence(SpectralMetric):
    r"""SPEC-diff between two embeddings ``a`` and ``b`` of the same samples, accumulated over batches.

    State: one [`Accumulator`][lightning_spectral.metrics.Accumulator], ``joint``: the joint outer-product sum
    $\sum_i [\phi_a(a_i); \phi_b(b_i)]\,[\phi_a(a_i); \phi_b(b_i)]^\top$ ($(D_a + D_b)^2$), the feature sum and
    the count, float64, all-reduced under DDP. ``compute()`` returns $\max_i |\lambda_i|$ of the differential
    covariance $\Gamma = D C$ (SPEC, Proposition 1), whose non-zero eigenvalues are those of
    $\Lambda = (K_a - K_b)/n$; positive eigenvalues are clusters ``a`` groups and ``b`` does not, negative ones
    the reverse ([`clusters`][lightning_spectral.metrics.spec_reading.SPECReading.clusters],
    [`top_samples`][lightning_spectral.metrics.spec_reading.SPECReading.top_samples]).

    Args:
        kernel: ``"gaussian"`` (random Fourier features, ``D = 2 r`` per embedding) or ``"cosine"`` (``D = d``).
        sigma_a: Gaussian bandwidth of ``emb_a`` (see
            [`match_bandwidth`][lightning_spectral.functional.match_bandwidth]), or ``"auto"``: fixed at the first read
            from the held rows of ``emb_a`` alone, by the rule of
            [`auto_bandwidth`][lightning_spectral.kernels.auto_bandwidth] (every sample is a "reference" row here:
            the metric has one sample seen twice); ``summary()`` reports ``sigma_a`` and ``sigma_b``.
        sigma_b: Gaussian bandwidth of ``emb_b``, or ``"auto"`` (the same rule on the rows of ``emb_b``: each
            embedding gets its own sigma, as FKEAVendi(sigma="auto") would on it alone).
        n_frequencies: ``r`` per embedding for the Gaussian kernel.
        seed: frequency seed, shared by both maps and by every rank.
        noise_draws: ``A``, the multiplier draws kept for the standard error ``se`` of SPEC-diff (default 2: two more
            joint-size float64 sums; 0 keeps none and reports no ``se``); the 95 % interval is
            ``SPEC-diff +- t_{A, 0.975} se``. The multipliers are functions of the pair at the finer of the two
            bandwidths (Gaussian kernel) or of its two directions (cosine kernel).
        in_features: widths ``(d_a, d_b)``, if known (else learnt from the first batch; under DDP a rank that
            saw no sample adopts the others' widths before the sums are all-reduced).
        chunk_size: rows mapped and summed at once (rows wait in a buffer until this many are pending).
        kwargs: ``torchmetrics.Metric`` keyword arguments (``process_group``, ``dist_sync_fn``, ...).

    Examples:
        >>> import torch
        >>> metric = SPECDivergence("cosine", in_features=(4, 3))
        >>> x = torch.randn(100, 4)
        >>> metric.update(x, x[:, :3])      # the second embedding drops a coordinate
        >>> bool(metric.compute() > 0)
        True
    """

    inputs = "paired"
    higher_is_better = False
    feature_map: PairedFeatureMap
    reading_class = SPECReading

    def __init__(
        self,
        kernel: str = "gaussian",
        sigma_a: Union[float, str, None] = None,
        sigma_b: Union[float, str, None] = None,
        *,
        n_frequencies: int = 2000,
        seed: int = 0,
        noise_draws: int = DEFAULT_SCORE_DRAWS,
        in_features: Optional[tuple[int, int]] = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        **kwargs: Any,
    ) -> None:
        if kernel not in KERNELS:
            raise ValueError(f"SPECDivergence: `kernel` must be one of {KERNELS}, got {kernel!r}.")
        n_frequencies = check_positive_int(n_frequencies, "n_frequencies")
        noise_draws = check_noise_draws(noise_draws)
        if kernel == "gaussian":
            if sigma_a is None or sigma_b is None:
                raise ValueError(
                    "SPECDivergence(kernel='gaussian') needs `sigma_a` and `sigma_b`; choose them with "
                    "`lightning_spectral.functional.match_bandwidth`, pass \"auto\" (fixed from the data at the first "
                    "read), or use kernel='cosine'."
                )
            fitted = (check_sigma(sigma_a, "sigma_a"), check_sigma(sigma_b, "sigma_b"))
            sigmas: tuple[Any, Any] = tuple("auto" if value is None else value for value in fitted)  # type: ignore[assignment]
            check_state_memory("SPECDivergence", 2 * n_frequencies, matrices=1 + noise_draws, vectors=1)
        else:
            sigmas = (None, None)
        if in_features is not None and (not isinstance(in_features, (tuple, list)) or len(in_features) != 2):
            raise ValueError(f"SPECDivergence: `in_features` must be a pair (d_a, d_b), got {in_features!r}.")
        seed = check_seed(seed)
        paired = PairedFeatureMap(kernel, None, sigmas, n_frequencies, seed, persistent=False)
        super().__init__(feature_map=paired, chunk_size=chunk_size, **kwargs)
        self.kernel, self.n_frequencies, self.seed = kernel, n_frequencies, seed
        self.sigmas: tuple[Optional[float], Optional[float]] = paired.sigmas  # None while "auto" waits
        self.noise_draws = noise_draws
        multipliers = None
        if noise_draws:  # one multiplier per sample of the pair: at the finer bandwidth, or on the unit spheres
            multipliers = Multipliers(noise_draws, self._multiplier_bandwidth(), seed, DEFAULT_RATIO)
        self.joint = self._add_accumulator("joint", multipliers=multipliers)
        if in_features is not None:
            self._build(tuple(in_features))

    def _build(self, in_features: Any) -> None:
        """As the base class; with the cosine kernel the sums' width is ``d_a + d_b``: refused before allocating when
        they cannot fit in memory."""
        if self.kernel == "cosine" and isinstance(in_features, (tuple, list)) and len(in_features) == 2:
            widths = tuple(check_positive_int(width, "in_features") for width in in_features)
            check_width_memory("SPECDivergence", widths, sum(widths), matrices=1 + self.noise_draws)
            if self.joint.multipliers is not None:  # the cosine kernel reads directions: so do the multipliers
                self.joint.multipliers.unit_blocks = widths
        super()._build(in_features)

    def fit_bandwidth(self) -> Any:
        """Fix the ``"auto"`` bandwidths now, each from the held rows of its own embedding (the rule of
        [`auto_bandwidth`][lightning_spectral.kernels.auto_bandwidth]: rows chosen by content hash, so any order or
        sharding gives the same pair), and map the held rows; a no-op once both are fixed. Returns
        ``(sigma_a, sigma_b)``. A collective under DDP (one per ``"auto"`` side, on every rank).

        Raises:
            RuntimeError: fewer than 2 rows on all ranks (update first).
        """
        from lightning_spectral.metrics.auto_bandwidth import reference_bandwidth

        if not self.feature_map.awaits_bandwidth:
            return self.sigmas
        held = self.joint.held_rows
        widths = self.in_features if self.in_features is not None else (0, 0)
        rows = torch.cat(held) if held else torch.zeros(0, sum(widths), dtype=torch.float64)
        group = self.process_group if distributed_available() else None
        parts = (rows[:, : widths[0]], rows[:, widths[0] :])
        fitted = tuple(
            reference_bandwidth(part, f"{type(self).__name__}.{name}", group) if feature_map.awaits_bandwidth else None
            for part, name, feature_map in zip(
                parts, ("sigma_a", "sigma_b"), (self.feature_map.map_a, self.feature_map.map_b)
            )
        )
        self._set_bandwidth(fitted)
        self._flush()
        return self.sigmas

    def _set_bandwidth(self, sigma: Any) -> None:
        """Fix the ``"auto"`` bandwidths to the pair ``sigma = (sigma_a, sigma_b)`` (an entry for a fixed side is
        ignored) without mapping the held rows."""
        self.feature_map.set_bandwidth(tuple(sigma))
        self.sigmas = self.feature_map.sigmas
        multipliers = self.joint.multipliers
        if multipliers is not None and multipliers.bandwidth is None:  # the draws follow the fitted bandwidths
            multipliers.bandwidth = self._multiplier_bandwidth()

    def _multiplier_bandwidth(self) -> Optional[float]:
        """The noise multipliers' scale: 1 on the unit spheres (cosine kernel), else the finer of the two
        bandwidths (``None`` while an ``"auto"`` one waits)."""
        if self.kernel == "cosine":
            return 1.0
        if any(value is None for value in self.sigmas):
            return None
        return min(self.sigmas)  # type: ignore[type-var]

    def _fitted_bandwidth(self) -> Any:
        """``(sigma_a, sigma_b)``: what a checkpoint keeps of fitted ``"auto"`` bandwidths."""
        return tuple(float(value) for value in self.sigmas)  # type: ignore[arg-type]

    def update(self, emb_a: Tensor, emb_b: Tensor) -> None:
        """Add a batch: ``emb_a`` (N, d_a) and ``emb_b`` (N, d_b), row i of both the same sample.

        Raises:
            ValueError: different N, widths that differ from earlier batches, NaN, zero-norm rows (cosine).
        """
        emb_a, emb_b = check_pair(emb_a, emb_b, "SPECDivergence.update")
        widths = (emb_a.shape[1], emb_b.shape[1])
        if self.in_features is None:
            self._build(widths)
        elif widths != self.in_features:
            raise ValueError(
                f"SPECDivergence.update: widths {widths} differ from the earlier batches' {self.in_features}."
            )
        self.joint.add(torch.cat([emb_a, emb_b.to(emb_a.dtype)], dim=1))

    def forward(self, emb_a: Tensor, emb_b: Tensor) -> Tensor:
        """torchmetrics' ``forward``: add the batch and return SPEC-diff of this batch alone.

        With the cosine kernel the sums are sized by the first batch's widths: they are sized here, before
        torchmetrics copies the (still empty) global state, so that it merges with the batch's.
        """
        if self.in_features is None:
            a, b = check_pair(emb_a, emb_b, "SPECDivergence")
            self._build((a.shape[1], b.shape[1]))
        return super().forward(emb_a, emb_b)
