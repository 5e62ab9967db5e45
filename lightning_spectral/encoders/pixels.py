"""A weight-free image encoder: pooled grey pixels, the offline reference of the tiny recipe."""

from __future__ import annotations

from typing import Optional

import torch.nn.functional as F
from torch import Tensor, nn

from lightning_spectral._checks import check_memory, check_positive_int


class PixelEncoder(nn.Module):
    """A frozen, weight-free image encoder: grey images average-pooled to ``size x size``, centred per image.

    ``forward(x)[i] = g_i - mean(g_i)`` with ``g_i = avg_pool(mean over channels of x_i)``, (N, size^2). It is
    the offline reference of the tiny recipe: scikit-learn's digits are 8x8 grey images, so with ``size=8`` it
    recovers their pixels (up to the affine normalisation of the rendered images), whose neighbourhoods
    classify the digits well. Optionally followed by a fixed linear ``projection`` (``(size^2, k)`` with
    ``offset`` (size^2,)), e.g. a discriminant projection fitted elsewhere.

    Raises:
        ValueError: ``size`` not an integer >= 1 or so large that one feature row (``4 size^2`` bytes) cannot fit in
            memory, a ``projection`` without size^2 rows, or (``forward``) input
            that is not a batch of images (N, C, H, W).

    Examples:
        >>> import torch
        >>> z = PixelEncoder(size=4)(torch.rand(2, 3, 16, 16))
        >>> z.shape, bool(z.sum(1).abs().max() < 1e-5)
        (torch.Size([2, 16]), True)
    """

    def __init__(self, size: int = 8, projection: Optional[Tensor] = None, offset: Optional[Tensor] = None) -> None:
        super().__init__()
        self.size = check_positive_int(size, "size")
        check_memory(  # before `forward` pools a batch to size x size: one row already cannot fit
            "PixelEncoder", "size", size, 4 * self.size**2, f"one float32 feature row of {self.size}^2 values",
            "use a smaller `size` (8 to 32: images pooled to 8 x 8 to 32 x 32 pixels)",
        )
        if projection is not None and tuple(projection.shape[:1]) != (size * size,):
            raise ValueError(
                f"PixelEncoder: `projection` must have {size * size} rows (size^2), "
                f"got shape {tuple(projection.shape)}."
            )
        self.register_buffer("projection", None if projection is None else projection.float().clone())
        self.register_buffer("offset", None if offset is None else offset.float().reshape(1, -1).clone())

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim != 4:
            raise ValueError(f"PixelEncoder: expects images (N, C, H, W), got shape {tuple(x.shape)}.")
        grey = F.adaptive_avg_pool2d(x.float().mean(1, keepdim=True), self.size).flatten(1)
        z = grey - grey.mean(1, keepdim=True)
        if self.projection is not None:
            z = (z - (self.offset if self.offset is not None else 0.0)) @ self.projection
        return z
