"""Image files as 8-bit RGB PIL images: the one reader of the command line, the image datasets and the galleries."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Union

import numpy as np


def as_rgb(image: Any) -> Any:
    """An 8-bit RGB copy of a PIL image; 16- and 32-bit integer greys are scaled to 8 bits first (PIL's
    ``convert("RGB")`` clips them at 255, which would read every 16-bit PNG as white).

    Examples:
        >>> import numpy as np
        >>> from PIL import Image
        >>> as_rgb(Image.fromarray(np.full((2, 2), 65535, np.uint16))).getpixel((0, 0))
        (255, 255, 255)
        >>> as_rgb(Image.fromarray(np.full((2, 2), 32896, np.uint16))).getpixel((0, 0))
        (128, 128, 128)
    """
    if image.mode.startswith("I"):
        from PIL import Image

        values = np.asarray(image, dtype=np.float64)
        top = 65535.0 if image.mode.startswith("I;16") or values.max(initial=0) > 255 else 255.0
        image = Image.fromarray(np.clip(np.round(values / top * 255.0), 0, 255).astype(np.uint8), mode="L")
    return image.convert("RGB")


def open_rgb(path: Union[str, Path]) -> Any:
    """The image file at ``path`` as an 8-bit RGB PIL image ([`as_rgb`][lightning_spectral.io.as_rgb]), read
    whole and the file closed.

    Raises:
        OSError: PIL cannot open or decode the file (``PIL.UnidentifiedImageError`` included).
    """
    from PIL import Image

    with Image.open(path) as image:
        return as_rgb(image)
