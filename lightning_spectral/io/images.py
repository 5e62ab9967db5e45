"""Image files as 8-bit RGB PIL images: the one reader of the command line, the image datasets and the galleries.

Greys wider than 8 bits are scaled by a fixed top, never by the image's own range (which would stretch each image's
contrast differently): 16- and 32-bit integers by 65535 (or 255 when no value exceeds it); 32-bit floats (PIL mode
``"F"``, e.g. float TIFFs) by 1 when every value lies in [0, 1] (fractions, the float convention of scikit-image and
torchvision), by 255 when they lie in [0, 255] and by 65535 when in [0, 65535]. Negative, larger or non-finite
floats are refused, naming the file. Images over PIL's decompression-bomb limit are refused before any pixel is
decoded, naming the file, its size and how to raise the limit.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np

#: Tops a float (mode "F") image's values are scaled by, tried in order: fractions, 8-bit and 16-bit levels.
FLOAT_TOPS = (1.0, 255.0, 65535.0)


def as_rgb(image: Any, name: Optional[str] = None) -> Any:
    """An 8-bit RGB copy of a PIL image; 16- and 32-bit integer greys and 32-bit float greys are scaled to 8 bits
    first (PIL's ``convert("RGB")`` clips them at 255, which would read every 16-bit PNG as white and every float
    image in [0, 1] as black; the tops: the module's docstring).

    Args:
        image: a PIL image.
        name: the file it came from, for messages.

    Raises:
        ValueError: a float image with negative, non-finite or values over 65535 (no fixed top fits); the message
            names the file and the fix.

    Examples:
        >>> import numpy as np
        >>> from PIL import Image
        >>> as_rgb(Image.fromarray(np.full((2, 2), 65535, np.uint16))).getpixel((0, 0))
        (255, 255, 255)
        >>> as_rgb(Image.fromarray(np.full((2, 2), 32896, np.uint16))).getpixel((0, 0))
        (128, 128, 128)
        >>> as_rgb(Image.fromarray(np.full((2, 2), 0.5, np.float32))).getpixel((0, 0))
        (128, 128, 128)
    """
    if image.mode.startswith("I"):
        values = np.asarray(image, dtype=np.float64)
        top = 65535.0 if image.mode.startswith("I;16") or values.max(initial=0) > 255 else 255.0
        return _grey(values, top)
    if image.mode == "F":
        values = np.asarray(image, dtype=np.float64)
        return _grey(values, _float_top(values, "the image" if name is None else f"the image {name!r}"))
    return image.convert("RGB")


def _grey(values: np.ndarray, top: float) -> Any:
    """Grey ``values`` in [0, top] as an 8-bit RGB image (rounded, clipped)."""
    from PIL import Image

    return Image.fromarray(np.clip(np.round(values / top * 255.0), 0, 255).astype(np.uint8), mode="L").convert("RGB")


def _float_top(values: np.ndarray, name: str) -> float:
    """The first of `FLOAT_TOPS` at or above every value of a float image.

    Raises:
        ValueError: non-finite or negative values, or values over the last top; naming ``name`` and the fix.
    """
    if not np.isfinite(values).all():
        raise ValueError(
            f"{name} is a float image holding NaN or infinite values; save it with finite values (in [0, 1], or as "
            "an 8- or 16-bit image)."
        )
    low, high = float(values.min(initial=0.0)), float(values.max(initial=0.0))
    for top in FLOAT_TOPS:
        if low >= 0 and high <= top:
            return top
    raise ValueError(
        f"{name} is a float image with values in [{low:g}, {high:g}], outside [0, 1], [0, 255] and [0, 65535]; "
        "there is no fixed scale to read it by. Save it scaled to [0, 1] (e.g. (x - min) / (max - min)) or as an "
        "8- or 16-bit image."
    )


#: PIL's ``DecompressionBombError`` text: the image's pixels and the limit.
_BOMB = re.compile(r"\((\d+) pixels\) exceeds limit of (\d+)")


@contextmanager
def opened(path: Union[str, Path], argument: Optional[str] = None) -> Iterator[Any]:
    """``PIL.Image.open(path)`` as a context, an image over PIL's decompression-bomb limit refused by name (PIL
    refuses it from the header, before decoding: twice ``PIL.Image.MAX_IMAGE_PIXELS``).

    Raises:
        ValueError: the image is over the limit; the message names ``argument``, the file, its pixels, the limit
            and how to raise it.
        OSError: PIL cannot open or decode the file (``PIL.UnidentifiedImageError`` included).
    """
    from PIL import Image

    try:
        with Image.open(path) as image:
            yield image
    except Image.DecompressionBombError as error:
        found = _BOMB.search(str(error))
        pixels, limit = (int(found.group(1)), int(found.group(2))) if found else (None, None)
        size = "over" if pixels is None else f"{pixels:,} pixels, over"
        bound = "twice MAX_IMAGE_PIXELS" if limit is None else f"{limit:,}"
        where = "" if argument is None else f"`{argument}`: "
        raise ValueError(
            f"{where}the image {str(path)!r} is {size} PIL's limit of {bound} pixels that "
            "guards against decompression bombs. If the file is trusted, raise the limit before reading it: "
            f"`PIL.Image.MAX_IMAGE_PIXELS = {pixels or 'N'}` (the limit is twice that; None removes it), or "
            "save the image smaller."
        ) from None


def open_rgb(path: Union[str, Path]) -> Any:
    """The image file at ``path`` as an 8-bit RGB PIL image ([`as_rgb`][lightning_spectral.io.as_rgb]), read
    whole and the file closed.

    Raises:
        OSError: PIL cannot open or decode the file (``PIL.UnidentifiedImageError`` included).
        ValueError: an image over PIL's decompression-bomb limit, or a float image no fixed scale fits; naming
            the file and the fix.
    """
    with opened(path) as image:
        return as_rgb(image, name=str(path))
