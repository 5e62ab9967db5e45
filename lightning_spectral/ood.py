"""Kernel PCA out-of-distribution detection (CoP / CoRP; Fang et al., "Kernel PCA for Out-of-Distribution
Detection") with streaming fit, DDP-summed states and threshold calibration.

Features ``z`` are mapped by ``Phi``: ``"cop"`` L2-normalises (cosine kernel), ``"corp"`` L2-normalises then
applies the Gaussian random Fourier features of this library (``[cos, sin]`` pairs, ``2r`` features; the
paper's ``gamma`` is ``1 / (2 sigma^2)``), ``"linear"`` is the identity (linear PCA, the baseline that fails).
Fitting streams in-distribution features into sums (``sum Phi``, ``sum Phi Phi^T``, count); ``finalize``
forms the mean ``mu`` and centred covariance, keeps the top ``q`` eigenvectors ``U_q`` (the smallest q whose
explained-variance ratio reaches ``explained_variance``, or ``n_components``), and a sample's score is its
reconstruction error

    e(z) = || (I - U_q U_q^T)(Phi(z) - mu) || = sqrt(||r||^2 - ||U_q^T r||^2),   r = Phi(z) - mu

computed without forming the M x M projector (cost O(d r + M q) per sample, independent of the training
size). Higher = more out-of-distribution (the paper's score is ``-e``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Optional

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torchmetrics.functional.classification import binary_auroc
from torchmetrics.utilities.distributed import gather_all_tensors

from lightning_spectral._checks import check_features, check_positive, check_positive_int
from lightning_spectral.distributed import (
    all_reduce_sum,
    check_same_across_ranks,
    collective_device,
    distributed_available,
)
from lightning_spectral.features import CosineMap, GaussianRFF
from lightning_spectral.linalg import DEFAULT_CHUNK_SIZE, add_covariance_, symmetric_eigh

MAPPINGS = ("corp", "cop", "linear")


class KernelPCAOOD(nn.Module):
    """Kernel PCA reconstruction-error detector: fit on in-distribution features, score anything.

    Args:
        mapping: ``"corp"`` (cosine then Gaussian RFF; the paper's best), ``"cop"`` (cosine) or ``"linear"``.
        sigma: Gaussian bandwidth on the unit sphere for ``"corp"`` (distances there are at most 2).
        n_frequencies: r for ``"corp"`` (M = 2r mapped features).
        explained_variance: keep the smallest q whose cumulative explained-variance ratio reaches it, in (0, 1].
        n_components: keep exactly this many components instead (overrides ``explained_variance``).
        seed: frequency seed (identical on every rank).
        chunk_size: rows per chunk when accumulating.

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> angles = torch.randint(6, (2000,), generator=g) * (torch.pi / 3)
        >>> inside = torch.stack([angles.cos(), angles.sin()], 1) + 0.05 * torch.randn(2000, 2, generator=g)
        >>> detector = KernelPCAOOD("corp", sigma=0.5, n_frequencies=256).fit([inside[:1500]])
        >>> between = angles[:500] + torch.pi / 6   # the same circle, between the clusters
        >>> outside = torch.stack([between.cos(), between.sin()], 1)
        >>> bool(detector.score(outside).mean() > 3 * detector.score(inside[1500:]).mean())
        True
    """

    threshold: Tensor

    def __init__(
        self,
        mapping: str = "corp",
        sigma: float = 0.5,
        n_frequencies: int = 1024,
        explained_variance: float = 0.9,
        n_components: Optional[int] = None,
        seed: int = 0,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
    ) -> None:
        super().__init__()
        if mapping not in MAPPINGS:
            raise ValueError(f"`mapping` must be one of {MAPPINGS}, got {mapping!r}.")
        if not 0 < float(explained_variance) <= 1:
            raise ValueError(f"`explained_variance` must be in (0, 1], got {explained_variance}.")
        self.mapping = mapping
        self.sigma = check_positive(sigma, "sigma")
        self.n_frequencies = check_positive_int(n_frequencies, "n_frequencies")
        self.explained_variance = float(explained_variance)
        self.n_components = None if n_components is None else check_positive_int(n_components, "n_components")
        self.seed = int(seed)
        self.chunk_size = check_positive_int(chunk_size, "chunk_size")
        self.rff: Optional[GaussianRFF] = None
        self.in_features: Optional[int] = None
        for name in ("cov_sum", "feature_sum", "n_samples", "mean", "components", "eigenvalues"):
            self.register_buffer(name, None)
        self.register_buffer("threshold", torch.tensor(float("nan"), dtype=torch.float64))

    # ---- mapping -------------------------------------------------------------------------------------------
    @property
    def width(self) -> int:
        """M, the width of the mapped features."""
        if self.in_features is None:
            raise RuntimeError("KernelPCAOOD: the input width is unknown until the first `partial_fit`.")
        return 2 * self.n_frequencies if self.mapping == "corp" else self.in_features

    def _build(self, in_features: int) -> None:
        self.in_features = in_features
        if self.mapping == "corp":
            self.rff = GaussianRFF(in_features, self.n_frequencies, self.sigma, self.seed)
        device = self.threshold.device
        self.cov_sum = torch.zeros(self.width, self.width, dtype=torch.float64, device=device)
        self.feature_sum = torch.zeros(self.width, dtype=torch.float64, device=device)
        self.n_samples = torch.zeros((), dtype=torch.float64, device=device)
        if self.rff is not None:
            self.rff.to(device)

    def feature_map(self, features: Tensor) -> Tensor:
        """``Phi(z)``: (N, d) -> (N, M)."""
        if self.mapping == "linear":
            return features
        unit = CosineMap()(features)
        return self.rff(unit) if self.rff is not None else unit

    def _validated(self, features: Tensor, name: str = "features") -> Tensor:
        return check_features(features, name, width=self.in_features, owner="KernelPCAOOD")

    # ---- fitting -------------------------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget the accumulated sums and the fitted subspace (the frequencies stay)."""
        if self.in_features is not None:
            self._build(self.in_features)
        self.mean = self.components = self.eigenvalues = None
        self.threshold = torch.tensor(float("nan"), dtype=torch.float64, device=self.threshold.device)

    def partial_fit(self, features: Tensor) -> KernelPCAOOD:
        """Add in-distribution features (N, d) to the sums. Call :meth:`finalize` when the stream ends."""
        features = self._validated(features)
        if self.in_features is None:
            self._build(features.shape[1])
        add_covariance_(self.cov_sum, features, self.feature_map, self.chunk_size, feature_sum=self.feature_sum)
        self.n_samples += features.shape[0]
        return self

    def _sync_sums(self) -> None:
        """Sum the states over ranks (a collective): ranks agree on the width first, so a rank that saw no
        samples takes part with zeros instead of hanging."""
        if not distributed_available():
            return
        width = torch.tensor([self.in_features or 0], device=collective_device())
        dist.all_reduce(width, op=dist.ReduceOp.MAX)
        if int(width) == 0:
            return
        if self.in_features is None:
            self._build(int(width))
        check_same_across_ranks(
            None if self.rff is None else self.rff.omega, "KernelPCAOOD: random Fourier frequencies"
        )
        for name in ("cov_sum", "feature_sum", "n_samples"):
            (total,) = all_reduce_sum(getattr(self, name).to(collective_device()))
            setattr(self, name, total.to(self.threshold.device))

    def finalize(self) -> KernelPCAOOD:
        """Form mean, covariance and the kept subspace from the (all-reduced) sums. A collective under DDP.

        Raises:
            RuntimeError: no samples were accumulated.
        """
        self._sync_sums()
        if self.in_features is None or float(self.n_samples) < 2:
            raise RuntimeError("KernelPCAOOD.finalize: fewer than 2 in-distribution samples were accumulated.")
        mean = self.feature_sum / self.n_samples
        covariance = self.cov_sum / self.n_samples - torch.outer(mean, mean)
        values, vectors = symmetric_eigh(covariance)
        values = values.clamp_min(0)
        q = self._n_kept(values)
        self.mean, self.components, self.eigenvalues = mean, vectors[:, :q].contiguous(), values
        return self

    def _n_kept(self, eigenvalues: Tensor) -> int:
        if self.n_components is not None:
            return min(self.n_components, eigenvalues.numel())
        ratios = eigenvalues.cumsum(0) / eigenvalues.sum().clamp_min(1e-300)
        return min(int((ratios < self.explained_variance - 1e-12).sum()) + 1, eigenvalues.numel())

    def fit(self, batches: Iterable[Tensor]) -> KernelPCAOOD:
        """Reset, stream in-distribution batches (N, d) and finalize. Returns ``self``."""
        self.reset()
        for batch in batches:
            self.partial_fit(batch)
        return self.finalize()

    @property
    def fitted(self) -> bool:
        return self.components is not None

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
        for start in range(0, features.shape[0], self.chunk_size):
            residual = self.feature_map(features[start : start + self.chunk_size]).double() - self.mean
            kept = residual @ self.components
            scores.append((residual.square().sum(1) - kept.square().sum(1)).clamp_min(0).sqrt())
        return torch.cat(scores) if scores else torch.zeros(0, dtype=torch.float64)

    def calibrate(self, in_distribution: Tensor, tpr: float = 0.95) -> float:
        """Set the threshold so that a fraction ``tpr`` of in-distribution samples is accepted.

        The threshold is the ``ceil(tpr * n)``-th smallest in-distribution score (all ranks' scores under DDP,
        a collective); samples scoring above it are flagged. Returns the threshold.
        """
        if not 0 < tpr <= 1:
            raise ValueError(f"`tpr` must be in (0, 1], got {tpr}.")
        scores = self.score(in_distribution)
        if distributed_available():
            scores = torch.cat(gather_all_tensors(scores.to(collective_device())))
        if scores.numel() == 0:
            raise ValueError("KernelPCAOOD.calibrate: no in-distribution samples to calibrate on.")
        self.threshold = threshold_at_tpr(scores, tpr).to(self.threshold.device)
        return float(self.threshold)

    def predict(self, features: Tensor) -> Tensor:
        """True where a sample is flagged out-of-distribution (score above the calibrated threshold)."""
        if math.isnan(float(self.threshold)):
            raise RuntimeError("KernelPCAOOD.predict: no threshold; call `calibrate(in_distribution_features)`.")
        return self.score(features) > self.threshold

    # ---- state ---------------------------------------------------------------------------------------------
    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args, **kwargs) -> None:  # type: ignore[override]
        # Lazily sized buffers take their shapes from the checkpoint.
        for name in ("cov_sum", "feature_sum", "n_samples", "mean", "components", "eigenvalues"):
            if prefix + name in state_dict:
                setattr(self, name, torch.empty_like(state_dict[prefix + name]))
        if prefix + "rff.omega" in state_dict and self.rff is None:
            self.rff = GaussianRFF(state_dict[prefix + "rff.omega"].shape[0], self.n_frequencies, self.sigma, self.seed)
        if self.in_features is None:
            if self.rff is not None:
                self.in_features = self.rff.in_features
            elif prefix + "mean" in state_dict:
                self.in_features = state_dict[prefix + "mean"].shape[0]
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


def threshold_at_tpr(in_scores: Tensor, tpr: float = 0.95) -> Tensor:
    """The ``ceil(tpr * n)``-th smallest in-distribution score: accepting ``score <= threshold`` keeps at least
    a fraction ``tpr`` of in-distribution samples (ties at the threshold are accepted)."""
    ordered = in_scores.double().flatten().sort().values
    return ordered[max(math.ceil(tpr * ordered.numel()) - 1, 0)]


def detection_metrics(in_scores: Tensor, out_scores: Tensor, tpr: float = 0.95) -> dict[str, Tensor]:
    """AUROC and FPR at ``tpr`` TPR for scores where higher = more out-of-distribution.

    - ``auroc``: torchmetrics' binary AUROC with OOD as the positive class (equal to the paper's AUROC with
      in-distribution positive and score ``-e``).
    - ``fpr``: the fraction of OOD samples accepted (``score <= threshold``) at the threshold
      :func:`threshold_at_tpr` that keeps ``tpr`` of in-distribution samples. One convention: the first
      threshold with TPR >= tpr; ties count as accepted.

    Example:
        >>> import torch
        >>> metrics = detection_metrics(torch.tensor([0.1, 0.2, 0.3]), torch.tensor([0.5, 0.9]))
        >>> float(metrics["auroc"]), float(metrics["fpr"])
        (1.0, 0.0)
    """
    if in_scores.numel() == 0 or out_scores.numel() == 0:
        raise ValueError("detection_metrics: both in- and out-of-distribution scores are needed.")
    preds = torch.cat([in_scores, out_scores]).double()
    target = torch.cat([torch.zeros(in_scores.numel()), torch.ones(out_scores.numel())]).long()
    threshold = threshold_at_tpr(in_scores, tpr)
    return {
        "auroc": binary_auroc(preds, target),
        "fpr": (out_scores.double() <= threshold).double().mean(),
        "threshold": threshold,
    }
