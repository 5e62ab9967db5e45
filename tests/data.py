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


def blobs(n: int, epsilon: float = 1.0, grid: int = 5, spacing: float = 10.0, seed: int = 0) -> Tensor:
    """The blobs of Gretton et al. 2012 / FastMMD section 4: a grid x grid lattice of 2-D Gaussians.

    ``epsilon = 1``: unit isotropic blobs (P). ``epsilon > 1``: each blob's covariance has eigenvalues
    (epsilon, 1) along axes rotated by 45 degrees (Q). The spacing and rotation are not given in the paper;
    these are the common choices the FastMMD digest suggests.
    """
    generator = torch.Generator().manual_seed(seed)
    centres = torch.randint(grid, (n, 2), generator=generator).double() * spacing
    noise = torch.randn(n, 2, generator=generator, dtype=torch.float64)
    rotation = torch.tensor([[1.0, -1.0], [1.0, 1.0]], dtype=torch.float64) / 2**0.5
    scale = torch.tensor([epsilon**0.5, 1.0], dtype=torch.float64)
    return centres + (noise * scale) @ rotation.T
