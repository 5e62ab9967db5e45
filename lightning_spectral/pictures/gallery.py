"""Galleries of the top samples of each mode: labelled rows of tiles, a title and captions, as a (3, H, W) image.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Optional, Union

import torch
from torch import Tensor
from torchvision.utils import make_grid

if TYPE_CHECKING:  # pragma: no cover
    pass


ImageSource = Union[Callable[[int], Tensor], Sequence[Tensor]]


def _image(source: ImageSource, index: int, normalize: bool) -> Tensor:
    image = source(index) if callable(source) else source[index]
    if isinstance(image, (tuple, list)):  # a dataset item (image, label...): its first element
        image = image[0]
    image = torch.as_tensor(image).detach().cpu().float()
    if image.ndim == 2:
        image = image[None]
    if image.ndim != 3 or image.shape[0] not in (1, 3):
        raise ValueError(f"mode_gallery: image {index} has shape {tuple(image.shape)}; expected (C, H, W), C in 1, 3.")
    if normalize:
        image = (image - image.min()) / (image.max() - image.min()).clamp_min(1e-12)
    return image.expand(3, -1, -1)


#: Font size of the text drawn into galleries (labels, titles, captions), in pixels.
FONT_SIZE = 14


def _font(size: int = FONT_SIZE) -> Any:
    """PIL's bundled font at ``size`` px (Pillow >= 10.1 with FreeType), else its small bitmap font."""
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except (TypeError, OSError, ImportError):  # pragma: no cover - older Pillow, or no FreeType
        return ImageFont.load_default()


def _text_width(text: str, font: Any) -> int:
    left, _, right, _ = font.getbbox(text) if text else (0, 0, 0, 0)
    return int(right - left)


def _text_strip(lines: Sequence[str], width: int, height: int, tops: Sequence[int], left: int = 4) -> Tensor:
    """A white (3, height, width) strip with ``lines[i]`` written at height ``tops[i]``."""
    from PIL import Image, ImageDraw
    from torchvision.transforms.functional import pil_to_tensor

    strip = Image.new("RGB", (max(width, 1), max(height, 1)), "white")
    draw, font = ImageDraw.Draw(strip), _font()
    for line, top in zip(lines, tops, strict=True):
        draw.text((left, top), line, fill="black", font=font)
    return pil_to_tensor(strip).float() / 255.0


def enlarge(images: Tensor, min_side: int) -> Tensor:
    """Images (N, C, H, W) enlarged by a whole factor (nearest neighbour, pixels stay sharp) until their shorter side
    is ``min_side`` or more; larger images are returned as they are.

    Examples:
        >>> enlarge(torch.zeros(2, 1, 8, 8), 64).shape
        torch.Size([2, 1, 64, 64])
    """
    factor = -(-min_side // max(min(images.shape[-2:]), 1))
    return images if factor <= 1 else torch.nn.functional.interpolate(images, scale_factor=factor, mode="nearest")


def mode_gallery(
    samples: Sequence[tuple[Tensor, Tensor]],
    images: ImageSource,
    padding: int = 2,
    normalize: bool = True,
    labels: Optional[Sequence[str]] = None,
    *,
    tile_size: int = 64,
    title: Optional[str] = None,
    captions: Optional[Sequence[Sequence[str]]] = None,
) -> Tensor:
    """An image grid with one row per mode and the mode's top samples left to right (best first).

    Args:
        samples: the output of ``top_samples``: per mode, ``(ids, scores)``.
        images: maps a sample id to its image (C, H, W) or (H, W): a function or an indexable sequence of
            tensors (a list of kept images, a dataset of tensors). All images must share one size.
        padding: pixels between images.
        normalize: rescale each image to [0, 1] for display.
        labels: one text per row (e.g. ``"mode 1: 12.0% of the mass"``), drawn in a strip left of the row.
        tile_size: small images are enlarged by a whole factor (nearest neighbour) until their shorter side is at
            least this many pixels, so that 8 x 8 digits can be seen.
        title: a line above the grid (e.g. ``"6 significant, 4 shown"``).
        captions: per row, one text per image (e.g. its id and score), written under the image.

    Returns:
        A (3, H, W) float tensor in [0, 1], ready for ``add_image`` or ``torchvision.utils.save_image``.

    Examples:
        >>> import torch
        >>> pictures = torch.rand(10, 1, 8, 8)
        >>> modes = [(torch.tensor([0, 1, 2]), torch.ones(3)), (torch.tensor([5]), torch.ones(1))]
        >>> grid = mode_gallery(modes, pictures)
        >>> grid.shape  # 2 rows of 3 tiles of 64 + 2 pixels (8 x 8 enlarged 8 times), plus the outer padding
        torch.Size([3, 134, 200])
        >>> mode_gallery(modes, pictures, labels=["mode 1", "mode 2"]).shape[1]   # same height, a label strip
        134
    """
    rows = [[_image(images, int(i), normalize) for i in ids] for ids, _ in samples]
    first = next((row[0] for row in rows if row), None)
    if first is None:
        raise ValueError("mode_gallery: no samples to show (every mode is empty).")
    if labels is not None and len(labels) != len(rows):
        raise ValueError(f"mode_gallery: {len(labels)} labels for {len(rows)} rows; pass one label per mode.")
    if captions is not None and [len(c) for c in captions] != [len(row) for row in rows]:
        raise ValueError("mode_gallery: `captions` must hold one text per image of each row.")
    per_row = max(len(row) for row in rows)
    blank = torch.ones_like(first)
    tiles = enlarge(torch.stack([tile for row in rows for tile in row + [blank] * (per_row - len(row))]), tile_size)
    if captions is not None:
        texts = [text for row in captions for text in list(row) + [""] * (per_row - len(row))]
        lines = max(text.count("\n") + 1 for text in texts)
        tall = (FONT_SIZE + 3) * lines + 2
        strips = [_text_strip([text], tiles.shape[-1], tall, [1], left=2) for text in texts]
        tiles = torch.cat([tiles.expand(-1, 3, -1, -1), torch.stack(strips)], dim=2)
    grid = make_grid(tiles, nrow=per_row, padding=padding, pad_value=1.0)
    row_height = tiles.shape[2] + padding
    if labels is not None:
        font = _font()
        width = max(_text_width(label, font) for label in labels) + 12
        tops = [padding + row * row_height + max((tiles.shape[2] - FONT_SIZE) // 2, 0) for row in range(len(rows))]
        grid = torch.cat([_text_strip(labels, width, grid.shape[1], tops), grid], dim=2)
    if title:
        grid = torch.cat([_text_strip([title], grid.shape[2], FONT_SIZE + 10, [4]), grid], dim=1)
    return grid
