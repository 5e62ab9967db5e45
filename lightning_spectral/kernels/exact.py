"""Exact Gaussian kernel matrices, for the n x n oracles and small inputs.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from lightning_spectral._checks import (
    check_features,
    check_positive,
)


def gaussian_kernel(x: Tensor, y: Optional[Tensor] = None, sigma: float = 1.0) -> Tensor:
    r"""The exact kernel matrix $K_{ij} = \exp\big(-\|x_i - y_j\|^2 / (2\sigma^2)\big)$, shape (N, M), float64.

    For small inputs: the oracle the random-feature routes are tested against.

    Examples:
        >>> import torch
        >>> gaussian_kernel(torch.zeros(1, 2), torch.ones(1, 2), sigma=1.0)
        tensor([[0.3679]], dtype=torch.float64)
    """
    sigma = check_positive(sigma, "sigma")
    x = check_features(x, "x").double()
    if y is None:
        distances = scaled_distances(x, x, sigma).fill_diagonal_(0.0)  # k(x, x) = 1 exactly (not cdist's round-off)
    else:
        distances = scaled_distances(x, check_features(y, "y", width=x.shape[1]).double(), sigma)
    return torch.exp(-0.5 * distances.square())


def scaled_distances(x: Tensor, y: Tensor, sigma: float = 1.0) -> Tensor:
    """``||x_i - y_j|| / sigma`` (N, M) for finite float64 rows, without overflow or underflow at any magnitude.

    ``torch.cdist`` squares the entries (and, for many rows, expands ``||x||^2 + ||y||^2 - 2 x.y``): rows near
    1e155 give ``inf - inf = NaN`` and rows below 1e-155 give 0. Both sets are divided by their largest
    magnitude ``s`` first, and ``s / sigma`` is applied after: the kernel depends on ``x / sigma`` only. As with
    ``cdist`` itself, distances below ~1e-8 of the rows' magnitude are round-off (the expanded form).
    """
    scale = float(torch.cat([x.abs().flatten(), y.abs().flatten()]).max()) if x.numel() and y.numel() else 0.0
    if scale == 0.0:
        return torch.zeros(x.shape[0], y.shape[0], dtype=x.dtype, device=x.device)
    distances = torch.cdist(x / scale, y / scale)
    ratio = scale / sigma  # may overflow to inf for huge inputs and a tiny sigma: those distances are infinite
    return torch.where(distances > 0, distances * ratio, 0.0)
