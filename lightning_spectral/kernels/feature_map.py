"""The feature-map interface every accumulator applies: input width fixed late, output width, frequencies.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

from lightning_spectral._checks import (
    check_positive_int,
)


def standard_normal_draws(in_features: int, n_frequencies: int, seed: int) -> Tensor:
    """The (d, r) float64 standard-normal matrix ``Z`` behind the frequencies, drawn on the CPU from ``seed``.

    A CPU ``torch.Generator`` makes the draw identical on every rank, device and run.
    """
    generator = torch.Generator(device="cpu").manual_seed(int(seed))
    return torch.randn(in_features, n_frequencies, generator=generator, dtype=torch.float64)


class FeatureMap(nn.Module):
    """A kernel's feature map ``phi`` whose input width may be fixed late: what an accumulator needs of a map.

    ``in_features`` is ``None`` until [`build`][lightning_spectral.kernels.FeatureMap.build] (or the first call) fixes
    it; ``out_features`` is the width ``D``
    of ``phi(x)`` (``None`` while it depends on an unknown input width);
    [`frequencies`][lightning_spectral.kernels.FeatureMap.frequencies] is what every rank must
    hold identically (``None`` for a map without randomness). A metric builds its map at construction and fixes the
    input width at the first batch, or from the other ranks' widths when its own rank saw no sample.
    """

    in_features: Optional[int]
    #: Every feature vector's squared norm ``|phi(x)|^2`` when it is the same for all inputs (1 for random Fourier
    #: features ``[cos, sin] / sqrt(r)``: a second-moment sum's trace is then the count), else ``None``.
    squared_norm: Optional[float] = None

    @property
    def out_features(self) -> Optional[int]:
        """Width ``D`` of the features (``None`` until it is known)."""
        raise NotImplementedError

    @property
    def built(self) -> bool:
        """Whether the input width is fixed."""
        return self.in_features is not None

    def build(self, in_features: int) -> "FeatureMap":
        """Fix the input width (a no-op when it is already ``in_features``). Returns ``self``.

        Raises:
            ValueError: the map was built for another width.
        """
        in_features = check_positive_int(in_features, "in_features")
        if self.in_features is not None and self.in_features != in_features:
            raise ValueError(
                f"{type(self).__name__} was built for inputs of width {self.in_features}, got width {in_features}."
            )
        if self.in_features is None:
            self.in_features = in_features
            self._build()
        return self

    def _build(self) -> None:
        """Allocate what depends on ``in_features`` (subclasses)."""

    def frequencies(self) -> Optional[Tensor]:
        """What every rank must hold identically (random frequencies, bandwidths), or ``None``."""
        return None

    @property
    def awaits_bandwidth(self) -> bool:
        """True while a bandwidth given as ``"auto"`` is not fixed yet (the map cannot map rows before
        [`set_bandwidth`][lightning_spectral.kernels.FeatureMap.set_bandwidth])."""
        return False

    def set_bandwidth(self, sigma: float) -> None:
        """Fix the bandwidth of a map built with ``sigma="auto"`` (frequencies ``Z / sigma`` drawn then)."""
        raise TypeError(f"{type(self).__name__} has no bandwidth to fix.")
