r"""Kernel PCA out-of-distribution detection (CoP / CoRP; Fang et al., "Kernel PCA for Out-of-Distribution
Detection") with streaming fit, DDP-summed states and threshold calibration.

Features $z$ are mapped by $\Phi$: ``"cop"`` L2-normalises (cosine kernel), ``"corp"`` L2-normalises then
applies the Gaussian random Fourier features of this library (``[cos, sin]`` pairs, ``2r`` features; the
paper's $\gamma$ is $1 / (2\sigma^2)$), ``"linear"`` is the identity (linear PCA, the baseline that fails).
Fitting streams in-distribution features into sums ($\sum \Phi$, $\sum \Phi \Phi^\top$, count); ``finalize``
forms the mean $\mu$ and centred covariance, keeps the top $q$ eigenvectors $U_q$ (the smallest q whose
explained-variance ratio reaches ``explained_variance``, or ``n_components``), and a sample's score is its
reconstruction error

$$e(z) = \big\|(I - U_q U_q^\top)(\Phi(z) - \mu)\big\| = \sqrt{\|r\|^2 - \|U_q^\top r\|^2}, \qquad r = \Phi(z) - \mu,$$

computed without forming the M x M projector (cost O(d r + M q) per sample, independent of the training
size). Higher = more out-of-distribution (the paper's score is ``-e``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, Optional, Union

import numpy as np
import torch
from torch import Tensor, nn

from lightning_spectral._checks import (
    as_tensor,
    check_features,
    check_fraction,
    check_positive_int,
    check_seed,
    check_state_memory,
    check_width_memory,
    is_table,
)
from lightning_spectral.algebra.eigen import symmetric_eigh
from lightning_spectral.algebra.gram import DEFAULT_CHUNK_SIZE
from lightning_spectral.functional.ood import threshold_at_tpr
from lightning_spectral.kernels.bandwidth import check_sigma
from lightning_spectral.kernels.cosine_map import CosineMap
from lightning_spectral.kernels.feature_map import FeatureMap
from lightning_spectral.kernels.gaussian_rff import GaussianRFF
from lightning_spectral.kernels.linear_map import LinearMap
from lightning_spectral.metrics.covariance import Covariance
from lightning_spectral.sync.collectives import all_gather_rows

MAPPINGS = ("corp", "cop", "linear")

#: The fitted state (scikit-learn's trailing underscore), ``None`` until ``finalize`` / ``calibrate`` set it.
FITTED = ("mean_", "components_", "eigenvalues_", "threshold_", "n_fitted_")

#: The checkpoint keys the fitted state had before it took the trailing underscore; such checkpoints still load.
LEGACY_KEYS = {name[:-1]: name for name in FITTED}


class KernelPCAOOD(nn.Module):
    """Kernel PCA reconstruction-error detector: fit on in-distribution features, score anything.

    Args:
        mapping: ``"corp"`` (cosine then Gaussian RFF; the paper's best), ``"cop"`` (cosine) or ``"linear"``.
        sigma: Gaussian bandwidth on the unit sphere for ``"corp"`` (distances there are at most 2), or ``"auto"``:
            fixed from the fitted (in-distribution) rows at `finalize`
            ([`auto_bandwidth`][lightning_spectral.kernels.auto_bandwidth]).
        n_frequencies: r for ``"corp"`` (M = 2r mapped features).
        explained_variance: keep the smallest q whose cumulative explained-variance ratio reaches it, in (0, 1].
        n_components: keep exactly this many components instead (overrides ``explained_variance``).
        seed: frequency seed (identical on every rank).
        chunk_size: rows per chunk when accumulating.

    ``__init__`` only checks and stores these settings. The fit's sums (``sums``, a
    [`Covariance`][lightning_spectral.metrics.Covariance] accumulated around a shift near the mean, emptied once
    the fit is final) get their storage and frequencies at the first ``partial_fit``.

    Attributes:
        mean_: ``mu`` (M,), set by ``finalize`` (``None`` before; so are the others).
        components_: ``U_q`` (M, q), the kept eigenvectors.
        eigenvalues_: all M eigenvalues of the centred covariance, descending.
        threshold_: the calibrated threshold (a float64 scalar), set by
            [`calibrate`][lightning_spectral.metrics.KernelPCAOOD.calibrate] or
            [`calibrate_from_scores`][lightning_spectral.metrics.KernelPCAOOD.calibrate_from_scores].
        n_fitted_: samples of the last fit, all ranks (a float64 scalar).

    The same names without the underscore read them (``threshold``: NaN and ``n_fitted``: 0 while unset) and
    cannot be assigned. ``state_dict`` keys are the attribute names; checkpoints written with the names
    without the underscore load as well.

    Examples:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> angles = torch.randint(6, (2000,), generator=g) * (torch.pi / 3)
        >>> inside = torch.stack([angles.cos(), angles.sin()], 1) + 0.05 * torch.randn(2000, 2, generator=g)
        >>> detector = KernelPCAOOD("corp", sigma=0.5, n_frequencies=256).fit(inside[:1500])
        >>> between = angles[:500] + torch.pi / 6   # the same circle, between the clusters
        >>> outside = torch.stack([between.cos(), between.sin()], 1)
        >>> bool(detector.score(outside).mean() > 3 * detector.score(inside[1500:]).mean())
        True
    """

    mean_: Optional[Tensor]
    components_: Optional[Tensor]
    eigenvalues_: Optional[Tensor]
    threshold_: Optional[Tensor]
    n_fitted_: Optional[Tensor]

    def __init__(
        self,
        mapping: str = "corp",
        sigma: Union[float, str] = 0.5,
        n_frequencies: int = 1024,
        explained_variance: float = 0.9,
        n_components: Optional[int] = None,
        seed: int = 0,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
    ) -> None:
        super().__init__()
        if mapping not in MAPPINGS:
            raise ValueError(f"`mapping` must be one of {MAPPINGS}, got {mapping!r}.")
        self.mapping = mapping
        self._sigma = check_sigma(sigma)  # None: "auto", fixed from the fitted rows at `finalize`
        self.n_frequencies = check_positive_int(n_frequencies, "n_frequencies")
        self.explained_variance = check_fraction(explained_variance, "explained_variance")
        self.n_components = None if n_components is None else check_positive_int(n_components, "n_components")
        self.seed = check_seed(seed)
        if mapping == "corp":
            check_state_memory("KernelPCAOOD", self.n_frequencies, matrices=2)  # the sums, then the eigenvectors
            phi: FeatureMap = GaussianRFF(None, self.n_frequencies, sigma, self.seed, persistent=False)
        else:
            phi = LinearMap()
        # CoRP and CoP map L2-normalised inputs (`feature_map`); the sums are kept around a shift near their
        # mean, so that a large offset of the features (linear PCA of raw embeddings) does not cancel.
        # A torchmetrics metric declaring its states, so that `.to(device)` before the fit places the sums.
        self.sums = Covariance(phi, centre=True, chunk_size=chunk_size)
        for name in FITTED:
            self.register_buffer(name, None)
        self.register_load_state_dict_pre_hook(self._fitted_from_checkpoint)

    # ---- mapping -------------------------------------------------------------------------------------------
    @property
    def in_features(self) -> Optional[int]:
        """Width d of the inputs (``None`` until the first ``partial_fit``)."""
        return self.sums.in_features

    @property
    def device(self) -> torch.device:
        """Where the sums and the fitted state live (``.to(device)`` moves them)."""
        return self.sums.device

    @property
    def width(self) -> int:
        """M, the width of the mapped features."""
        if self.in_features is None:
            raise RuntimeError("KernelPCAOOD: the input width is unknown until the first `partial_fit`.")
        return int(self.sums.feature_map.out_features)  # type: ignore[arg-type]

    def _inputs(self, features: Tensor) -> Tensor:
        """What the sums' map takes: L2-normalised features for CoRP and CoP, the features themselves for linear."""
        return features if self.mapping == "linear" else CosineMap()(features)

    def feature_map(self, features: Tensor) -> Tensor:
        """``Phi(z)``: (N, d) -> (N, M)."""
        return self.sums.feature_map(self._inputs(self._validated(features)))

    def _validated(self, features: Any, name: str = "features") -> Tensor:
        """``features`` as a checked (N, d) float tensor; NumPy arrays and nested lists of numbers are converted
        (scikit-learn's habit), tensors are taken as they are."""
        features = as_tensor(features, name, "KernelPCAOOD")
        features = check_features(features, name, width=self.in_features, owner="KernelPCAOOD")  # type: ignore[arg-type]
        if self.mapping == "linear" and features.numel():
            # The linear map's sums are products of raw features in their dtype: refuse what would overflow them
            # (a bound that does not depend on the batch, so every batching and sharding agrees).
            limit = math.sqrt(torch.finfo(features.dtype).max / (16.0 * self.sums.chunk_size * features.shape[1]))
            largest = float(features.detach().abs().max())
            if largest > limit:
                raise ValueError(
                    f"KernelPCAOOD(mapping='linear'): `{name}` reach magnitude {largest:.3g}, beyond {limit:.3g} where "
                    f"the sums of products of {features.dtype} features overflow; divide the features by a constant "
                    "(their standard deviation, say: linear PCA's scores scale with them)"
                    + (" or pass float64 features." if features.dtype != torch.float64 else ".")
                )
        return features

    # ---- fitting -------------------------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget the accumulated sums and the fitted subspace (the frequencies stay)."""
        self.sums.reset()
        for name in FITTED:
            setattr(self, name, None)

    def partial_fit(self, features: Tensor) -> KernelPCAOOD:
        """Add in-distribution features (N, d) to the sums (detached). Call
        [`finalize`][lightning_spectral.metrics.KernelPCAOOD.finalize] when the stream ends.

        Raises:
            TypeError / ValueError: features that are not a finite (N, d) float table (see
                [`fit`][lightning_spectral.metrics.KernelPCAOOD.fit]); the ``"cop"`` / ``"linear"`` sums (the input's
                width) refused before allocating when they cannot fit.
        """
        features = self._validated(features).detach()
        if self.in_features is None:
            if self.mapping != "corp":  # the sums, then the eigenvectors, have the input's width
                check_width_memory("KernelPCAOOD", features.shape[1], features.shape[1], matrices=2, vectors=2)
            self.sums._build(features.shape[1])
        self.sums.update(self._inputs(features))
        return self

    @property
    def sigma(self) -> Optional[float]:
        """The Gaussian bandwidth (``"corp"``): ``None`` while ``"auto"`` waits for the fitted rows."""
        return getattr(self.sums.feature_map, "sigma", self._sigma)

    def finalize(self) -> KernelPCAOOD:
        """Form mean, covariance and the kept subspace from the (all-reduced) sums; then empty the sums.

        A collective under DDP: every rank must call it (a rank that saw no sample takes part with zeros).

        Raises:
            RuntimeError: fewer than 2 samples were accumulated on all ranks together.
        """
        samples = self.sums.reading().samples
        total = float(samples.count)
        if total < 2:
            raise RuntimeError("KernelPCAOOD.finalize: fewer than 2 in-distribution samples were accumulated.")
        mean, covariance = samples.mean(), samples.centred_covariance()
        values, vectors = symmetric_eigh(covariance)
        values = values.clamp_min(0)
        q = self._n_kept(values)
        self.mean_, self.components_, self.eigenvalues_ = mean, vectors[:, :q].contiguous(), values
        self.n_fitted_ = torch.tensor(total, dtype=torch.float64, device=self.device)
        self.sums.reset()
        return self

    def _n_kept(self, eigenvalues: Tensor) -> int:
        if self.n_components is not None:
            return min(self.n_components, eigenvalues.numel())
        ratios = eigenvalues.cumsum(0) / eigenvalues.sum().clamp_min(1e-300)
        return min(int((ratios < self.explained_variance - 1e-12).sum()) + 1, eigenvalues.numel())

    def fit(self, batches: Union[Tensor, np.ndarray, Sequence[Sequence[float]], Iterable[Tensor]]) -> KernelPCAOOD:
        """Reset, stream in-distribution features and finalize. Returns ``self``.

        Args:
            batches: one (N, d) table (scikit-learn's habit): a tensor, a NumPy array or a list of rows of numbers;
                or an iterable of (N_i, d) batches (tensors or arrays).

        Raises:
            TypeError: ``batches`` is neither a table nor an iterable of batches.
            ValueError: a batch that is not a finite (N, d) float table; fewer than 2 samples in all.
        """
        if is_table(batches):
            table = self._validated(batches, "batches")
            self.reset()
            batches = table.split(self.sums.chunk_size)
        elif isinstance(batches, (str, bytes)) or not isinstance(batches, Iterable):
            raise TypeError(
                "KernelPCAOOD.fit: `batches` must be an (N, d) table (a tensor, a NumPy array, a list of rows) or an "
                "iterable of (N_i, d) batches (e.g. `features.split(4096)` or a DataLoader), got "
                f"{type(batches).__name__}."
            )
        else:
            self.reset()
        for batch in batches:
            self.partial_fit(batch)
        return self.finalize()

    @property
    def fitted(self) -> bool:
        """Whether ``finalize`` (or ``fit``) formed the subspace."""
        return self.components_ is not None

    # ---- scoring -------------------------------------------------------------------------------------------
    def score(self, features: Tensor) -> Tensor:
        """Reconstruction error ``e(z)`` (N,), float64; higher = more out-of-distribution.

        Raises:
            RuntimeError: before ``fit`` / ``finalize``.
        """
        if not self.fitted:
            raise RuntimeError("KernelPCAOOD.score: the detector is not fitted; call `fit` (or `finalize`) first.")
        features = self._validated(features)
        scores = []
        for start in range(0, features.shape[0], self.sums.chunk_size):
            rows = self._inputs(features[start : start + self.sums.chunk_size])
            residual = self.sums.feature_map(rows).double() - self.mean_
            kept = residual @ self.components_
            scores.append((residual.square().sum(1) - kept.square().sum(1)).clamp_min(0).sqrt())
        return torch.cat(scores) if scores else torch.zeros(0, dtype=torch.float64, device=features.device)

    def calibrate(self, in_distribution: Tensor, tpr: float = 0.95) -> float:
        """Set the threshold so that a fraction ``tpr`` of in-distribution samples is accepted.

        The threshold is the ``ceil(tpr * n)``-th smallest in-distribution score (all ranks' scores under DDP,
        a collective). Returns the threshold.
        """
        tpr = check_fraction(tpr, "tpr")
        scores = all_gather_rows(self.score(in_distribution))
        if scores.numel() == 0:
            raise ValueError("KernelPCAOOD.calibrate: no in-distribution samples to calibrate on.")
        return self.calibrate_from_scores(scores, tpr)

    def calibrate_from_scores(self, scores: Tensor, tpr: float = 0.95) -> float:
        """Set the threshold from in-distribution scores already computed: their ``ceil(tpr * n)``-th smallest.

        For a caller that scored (and, under DDP, gathered) the in-distribution samples itself, as
        [`KPCAOODMonitor`][lightning_spectral.callbacks.KPCAOODMonitor] does; no collective. Returns the threshold.

        Args:
            scores: ``score`` values (n,) of in-distribution samples, n >= 1.
            tpr: the fraction of them the threshold accepts, in (0, 1].

        Raises:
            ValueError: ``tpr`` out of range, no scores, or NaN scores.
        """
        tpr = check_fraction(tpr, "tpr")
        if not isinstance(scores, Tensor) or scores.numel() == 0 or bool(scores.isnan().any()):
            raise ValueError(
                "KernelPCAOOD.calibrate_from_scores: `scores` must be a non-empty tensor of `score` values without "
                "NaN (score in-distribution samples with `detector.score(features)`)."
            )
        # a copy: the order statistic is a view of the sorted scores, whose storage a checkpoint would carry
        self.threshold_ = threshold_at_tpr(scores, tpr).to(self.device).clone()
        return float(self.threshold_)

    def predict(self, features: Tensor) -> Tensor:
        """True where a sample is flagged out-of-distribution (score above the calibrated threshold)."""
        if self.threshold_ is None:
            raise RuntimeError("KernelPCAOOD.predict: no threshold; call `calibrate(in_distribution_features)`.")
        return self.score(features) > self.threshold_

    # ---- state ---------------------------------------------------------------------------------------------
    @staticmethod
    def _fitted_from_checkpoint(module: KernelPCAOOD, state_dict: dict, prefix: str, *args: Any) -> None:
        """Load pre-hook: the fitted state takes its shapes from the checkpoint, on this detector's device.

        A checkpoint written before the trailing underscore has its keys renamed (``mean`` -> ``mean_``, ...), with
        its markers of unset values dropped (a NaN ``threshold``, a zero ``n_fitted``). An unset threshold or count
        is not saved, so one the checkpoint lacks is unset here.
        """
        for old, new in LEGACY_KEYS.items():
            if prefix + old in state_dict and prefix + new not in state_dict:
                value = state_dict.pop(prefix + old)
                unset = (new == "threshold_" and bool(value.isnan().all())) or (new == "n_fitted_" and not value.any())
                if not unset:
                    state_dict[prefix + new] = value
        for name in FITTED:
            if prefix + name in state_dict:
                setattr(module, name, torch.empty_like(state_dict[prefix + name], device=module.device))
            elif name in ("n_fitted_", "threshold_"):
                setattr(module, name, None)
