"""Image tensors normalised for one model, converted to the normalisation (and size) another model expects."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightning_spectral._checks import check_normalisation


def _per_channel(values: Sequence[float]) -> Tensor:
    """1 or 3 numbers as a (1, 3, 1, 1) tensor."""
    return torch.as_tensor([float(v) for v in values], dtype=torch.float32).expand(3).reshape(1, 3, 1, 1).clone()


class InputAdapter(nn.Module):
    """Re-normalise (and optionally resize) image tensors prepared for one model into another's convention.

    ``forward(x) = resize((x * std_in + mean_in - mean_out) / std_out)``: e.g. batches normalised with
    open_clip's OPENAI mean / std fed to a DINOv2 reference that expects ImageNet statistics.

    Args:
        mean_in: the per-channel mean the incoming tensors were normalised with (1 or 3 numbers).
        std_in: their per-channel standard deviation (1 or 3 numbers > 0).
        mean_out: the per-channel mean the wrapped model expects.
        std_out: the per-channel standard deviation the wrapped model expects.
        size: resize to this (height, width) or square size with bicubic interpolation; ``None`` keeps the size.

    Raises:
        ValueError: a mean / std that is not 1 or 3 finite numbers, a std <= 0, or a bad ``size``.

    Examples:
        >>> import torch
        >>> adapter = InputAdapter((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), size=4)
        >>> y = adapter(torch.zeros(1, 3, 2, 2))
        >>> y.shape, torch.allclose(y, torch.full_like(y, 0.5))
        (torch.Size([1, 3, 4, 4]), True)
    """

    def __init__(
        self,
        mean_in: Sequence[float],
        std_in: Sequence[float],
        mean_out: Sequence[float],
        std_out: Sequence[float],
        size: Union[int, tuple[int, int], None] = None,
    ) -> None:
        super().__init__()
        check_normalisation(mean_in, std_in, ("mean_in", "std_in"), channels=(1, 3))
        check_normalisation(mean_out, std_out, ("mean_out", "std_out"), channels=(1, 3))
        std_out_t = _per_channel(std_out)
        self.register_buffer("scale", _per_channel(std_in) / std_out_t, persistent=False)
        self.register_buffer("shift", (_per_channel(mean_in) - _per_channel(mean_out)) / std_out_t, persistent=False)
        if size is not None:
            size = (size, size) if isinstance(size, int) else tuple(size)  # type: ignore[assignment]
            if len(size) != 2 or any(not isinstance(s, int) or s < 1 for s in size):  # type: ignore[arg-type]
                raise ValueError(f"`size` must be an integer >= 1 or a pair of them, got {size!r}.")
        self.size = size

    def forward(self, x: Tensor) -> Tensor:
        x = x * self.scale.to(x.dtype) + self.shift.to(x.dtype)
        if self.size is not None and tuple(x.shape[-2:]) != self.size:
            x = F.interpolate(x, size=self.size, mode="bicubic", align_corners=False, antialias=True)
        return x
