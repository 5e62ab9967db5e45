"""Image files to tensors: open_clip's evaluation preprocessing and the normalisation statistics."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable, Optional, Union

from torch import Tensor

from lightning_spectral.io.images import open_rgb

# open_clip.constants.OPENAI_DATASET_MEAN / _STD, copied so that importing this module does not import open_clip
OPENAI_DATASET_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_DATASET_STD = (0.26862954, 0.26130258, 0.27577711)


class LoadImage:
    """A local image file as the tensor ``transform(PIL RGB image)`` returns (read by
    [`open_rgb`][lightning_spectral.io.open_rgb]: 16-bit greys scaled, not clipped to white)."""

    def __init__(self, transform: Callable[[Any], Tensor]) -> None:
        self.transform = transform

    def __call__(self, path: Union[str, Path]) -> Tensor:
        return self.transform(open_rgb(path))


def default_transform(
    image_size: int, mean: Optional[Sequence[float]], std: Optional[Sequence[float]]
) -> Callable[[Any], Tensor]:
    """open_clip's evaluation preprocessing (``open_clip.image_transform``): resize the shorter side to
    ``image_size`` (bicubic), centre crop, to a [0, 1] tensor, normalise by ``mean`` / ``std`` (both ``None``:
    keep [0, 1]).

    Examples:
        >>> from PIL import Image
        >>> default_transform(16, None, None)(Image.new("RGB", (40, 20), (255, 0, 0)))[:, 8, 8].tolist()
        [1.0, 0.0, 0.0]
    """
    import open_clip

    if mean is None or std is None:  # open_clip fills in its OPENAI statistics for None: normalise by nothing
        mean, std = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
    return open_clip.image_transform(image_size, is_train=False, mean=tuple(mean), std=tuple(std))
