"""Seeded synthetic data for the statistical tests (the digest's section 7 setups)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def mixture_means(k: int, d: int = 10, spread: float = 20.0, seed: int = 0) -> Tensor:
    """k component means ~ N(0, spread^2 I_d), float64."""
    return spread * torch.randn(k, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def sample_mixture(
    means: Tensor, n: int, weights: Sequence[float] | None = None, std: float = 0.3, seed: int = 1
) -> tuple[Tensor, Tensor]:
    """n samples of the isotropic mixture with the given means; returns (x (n, d) float64, labels (n,))."""
    generator = torch.Generator().manual_seed(seed)
    k = means.shape[0]
    probs = torch.full((k,), 1.0 / k, dtype=torch.float64) if weights is None else torch.tensor(weights).double()
    labels = torch.multinomial(probs, n, replacement=True, generator=generator)
    noise = torch.randn(n, means.shape[1], generator=generator, dtype=torch.float64)
    return means[labels] + std * noise, labels


def within_mode_factor(sigma: float, std: float, d: int) -> float:
    """E k(x, x') for x, x' of one isotropic Gaussian mode: (sigma^2 / (sigma^2 + 2 std^2))^(d/2)."""
    return (sigma**2 / (sigma**2 + 2 * std**2)) ** (d / 2)
