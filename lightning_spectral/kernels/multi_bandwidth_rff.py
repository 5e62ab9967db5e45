"""Gaussian random features at several bandwidths from one projection (FastMMD's bandwidth grid).
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch
from torch import Tensor

from lightning_spectral._checks import (
    check_bandwidths,
    check_batch_memory,
    check_features,
    check_frequency_memory,
    check_positive,
    check_positive_int,
    check_seed,
)
from lightning_spectral.kernels.bandwidth import check_sigma
from lightning_spectral.kernels.feature_map import FeatureMap, standard_normal_draws
from lightning_spectral.kernels.gaussian_rff import check_phases


class MultiBandwidthRFF(FeatureMap):
    r"""Random Fourier features at several bandwidths from one projection:
    $\phi_b(x) = [\cos(xZ/s_b), \sin(xZ/s_b)] / \sqrt{r}$.

    The standard-normal draws ``Z`` (d, r) are shared by every bandwidth (as
    [`GaussianRFF`][lightning_spectral.kernels.GaussianRFF] with the same
    seed would draw them), so ``x Z`` is computed once and rescaled per bandwidth (FastMMD, Zhao & Meng 2015,
    section 3.3, evaluates all kernels of a family from one set of frequencies the same way).

    Shapes: input (N, d); output (B, N, 2r) for B bandwidths. ``in_features=None`` takes the width from the first
    batch ([`build`][lightning_spectral.kernels.FeatureMap.build]).

    Examples:
        >>> import torch
        >>> from lightning_spectral.kernels import GaussianRFF
        >>> x = torch.randn(5, 3, dtype=torch.float64)
        >>> multi = MultiBandwidthRFF(3, 16, sigmas=(1.0, 2.0))
        >>> torch.allclose(multi(x)[1], GaussianRFF(3, 16, sigma=2.0)(x))
        True
    """

    squared_norm: Optional[float] = 1.0  # unit-norm rows (each bandwidth's block)

    standard: Tensor

    def __init__(
        self, in_features: Optional[int], n_frequencies: int, sigmas: tuple[float, ...], seed: int = 0
    ) -> None:
        super().__init__()
        self.n_frequencies = check_positive_int(n_frequencies, "n_frequencies")
        empty = isinstance(sigmas, (list, tuple)) and not sigmas
        if empty or not isinstance(sigmas, (list, tuple, Tensor, np.ndarray)):
            raise ValueError(f"`sigmas` must be a non-empty sequence of bandwidths > 0, got {sigmas!r}.")
        auto = isinstance(sigmas, (list, tuple)) and len(sigmas) == 1 and check_sigma(sigmas[0]) is None
        #: ``(None,)`` while a single ``"auto"`` bandwidth waits for ``set_bandwidth``.
        self.sigmas: tuple = (None,) if auto else check_bandwidths(sigmas, "sigma")[0]
        self.seed = check_seed(seed)
        self.in_features = None
        self.register_buffer("standard", torch.zeros(0, self.n_frequencies, dtype=torch.float64), persistent=False)
        if in_features is not None:
            self.build(in_features)

    @property
    def out_features(self) -> int:
        """Width of each bandwidth's features, ``2 * n_frequencies``."""
        return 2 * self.n_frequencies

    @property
    def bandwidths(self) -> int:
        """B, the number of bandwidths (the leading dimension of the output)."""
        return len(self.sigmas)

    def _build(self) -> None:
        check_frequency_memory(type(self).__name__, self.in_features, self.n_frequencies)
        self.standard = self._draw().to(self.standard.device)

    def _draw(self) -> Tensor:
        if self.in_features is None:
            return torch.zeros(0, self.n_frequencies, dtype=torch.float64)
        return standard_normal_draws(self.in_features, self.n_frequencies, self.seed)

    @property
    def awaits_bandwidth(self) -> bool:
        """True while a single ``"auto"`` bandwidth is not fixed."""
        return self.sigmas == (None,)

    def set_bandwidth(self, sigma: float) -> None:
        """Fix the single ``"auto"`` bandwidth."""
        if not self.awaits_bandwidth:
            raise RuntimeError(f"{type(self).__name__}: its bandwidths are fixed already ({self.sigmas}).")
        self.sigmas = (check_positive(sigma, "sigma"),)

    def _apply(self, fn, recurse: bool = True):  # type: ignore[no-untyped-def]
        super()._apply(fn, recurse)
        if self.standard.dtype != torch.float64:  # keep the draws float64 under a parent's dtype cast
            self.standard = self._draw().to(self.standard.device)
        return self

    def forward(self, x: Tensor) -> Tensor:
        """Map inputs (N, d) to (B, N, 2r), one unit-norm feature block per bandwidth."""
        projected, scale = self._projected(x), 1.0 / math.sqrt(self.n_frequencies)
        blocks = []
        for sigma in self.sigmas:
            phases = projected / sigma
            blocks.append(torch.cat([phases.cos(), phases.sin()], dim=1).mul_(scale))
        return torch.stack(blocks)

    def feature_sum(self, x: Tensor) -> Tensor:
        """``forward(x).sum(1)`` (B, 2r) without the (B, N, 2r) features: all that a mean-only state needs."""
        projected, scale = self._projected(x), 1.0 / math.sqrt(self.n_frequencies)
        sums = []
        for sigma in self.sigmas:
            phases = projected / sigma
            sums.append(torch.cat([phases.cos().sum(0), phases.sin().sum(0)]).mul_(scale))
        return torch.stack(sums)

    def _projected(self, x: Tensor) -> Tensor:
        """``x Z`` (N, r), checked for overflow."""
        x = check_features(x, "x", width=self.in_features, owner=type(self).__name__)
        self.build(x.shape[1])
        if self.awaits_bandwidth:
            raise RuntimeError(
                f"{type(self).__name__}(sigmas=('auto',)) maps no row before its bandwidth is fixed: call "
                "`set_bandwidth(sigma)` (a metric fixes it from its reference rows at the first read)."
            )
        check_batch_memory(type(self).__name__, x, self.n_frequencies * (1 + len(self.sigmas)))
        projected = x @ self.standard.to(device=x.device, dtype=x.dtype)
        return check_phases(projected, type(self).__name__, x / min(self.sigmas), self.standard)

    def frequencies(self) -> Optional[Tensor]:
        """What every rank must hold identically: the draws and the bandwidths (``None`` before the width is known)."""
        if not self.built or self.awaits_bandwidth:
            return None
        return torch.cat([self.standard.flatten(), torch.tensor(self.sigmas, dtype=torch.float64).to(self.standard)])
