"""Pictures written by ``--plot-dir``: spectrum plots ([`plot_spectrum`][lightning_spectral.pictures.plot_spectrum]) and mode
galleries ([`mode_gallery`][lightning_spectral.pictures.mode_gallery]) of images listed in ``--images`` (line i = sample
i)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from torch import Tensor

from lightning_spectral.io.images import open_rgb
from lightning_spectral.io.text_lists import list_lines
from lightning_spectral.io.writing import written


def save_figure(plot_dir: Path, name: str, figure: Any) -> str:
    """Save a matplotlib figure as ``plot_dir/name.png`` (whole or not at all); returns the path."""
    path = plot_dir / f"{name}.png"
    with written(path, "--plot-dir") as temporary:
        figure.savefig(temporary, dpi=100, format="png")
    return str(path)


def save_spectrum(
    plot_dir: Path,
    name: str,
    eigenvalues: Tensor,
    title: str,
    threshold: Optional[float] = None,
    cut: Optional[int] = None,
) -> str:
    """Save a bar plot of ``eigenvalues`` (the significance ``threshold``, the ``cut`` of kept components) as
    ``plot_dir/name.png``; returns the path."""
    from lightning_spectral.pictures.plots import plot_spectrum

    return save_figure(plot_dir, name, plot_spectrum(eigenvalues, threshold=threshold, title=title, cut=cut))


def image_paths(list_file: Path, ids: Sequence[int]) -> dict[int, Path]:
    """The image paths on lines ``ids`` (0-based) of ``list_file``; relative paths are relative to its folder.

    Reads the list once, keeping only the wanted lines (the list may be long).

    Raises:
        FileNotFoundError: no list file.
        ValueError: the list has fewer lines than a wanted id needs, or does not decode (`list_lines`).

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> folder = Path(tempfile.mkdtemp())
        >>> _ = (folder / "images.txt").write_text("a.png\\nb.png\\n/data/c.png\\n")
        >>> {i: p.name for i, p in image_paths(folder / "images.txt", [2, 0]).items()}
        {0: 'a.png', 2: 'c.png'}
    """
    if not list_file.is_file():
        raise FileNotFoundError(f"`--images`: no file at {str(list_file)!r}; pass a text file, one image path a line.")
    wanted, found, count = set(int(i) for i in ids), {}, 0
    for number, line in enumerate(list_lines(list_file, "--images")):  # UTF-8, or UTF-16 with its byte-order mark
        count = number + 1
        if number in wanted:
            path = Path(line.strip()).expanduser()
            found[number] = path if path.is_absolute() else list_file.parent / path
    missing = sorted(wanted - set(found))
    if missing:
        raise ValueError(
            f"`--images` ({str(list_file)!r}) has {count} lines but sample ids up to "
            f"{max(missing)} are needed; it must list one image per sample (line i = sample i)."
        )
    return found


def load_image(path: Path, size: int) -> Tensor:
    """An image file as a (3, size, size) float tensor in [0, 1] ([`open_rgb`][lightning_spectral.io.open_rgb]:
    16-bit greys scaled), centre-cropped to a square."""
    from PIL import ImageOps
    from torchvision.transforms.functional import pil_to_tensor

    if not path.is_file():
        raise FileNotFoundError(f"`--images`: no image at {str(path)!r}.")
    try:
        square = ImageOps.fit(open_rgb(path), (size, size))
    except OSError as error:
        raise ValueError(f"`--images`: cannot read the image {str(path)!r} ({error}).") from None
    return pil_to_tensor(square).float() / 255.0


def save_gallery(
    plot_dir: Path,
    name: str,
    samples: Sequence[tuple[Tensor, Tensor]],
    list_file: Path,
    size: int = 96,
    labels: Optional[Sequence[str]] = None,
    title: Optional[str] = None,
    captions: Optional[Sequence[Sequence[str]]] = None,
) -> str:
    """Save a gallery (one row per mode, best sample first, a label per row, a title line, a caption under each
    image) of ``top_samples`` output as ``plot_dir/name.png`` (whole or not at all); returns the path."""
    from torchvision.utils import save_image

    from lightning_spectral.pictures.gallery import mode_gallery

    ids = [int(i) for sample_ids, _ in samples for i in sample_ids.tolist()]
    if not ids:
        raise ValueError(f"no samples to show in the {name} gallery (every mode is empty).")
    paths = image_paths(list_file, ids)
    images = {i: load_image(path, size) for i, path in paths.items()}
    grid = mode_gallery(
        samples, lambda i: images[int(i)], normalize=False, labels=labels, title=title, captions=captions
    )
    path = plot_dir / f"{name}.png"
    with written(path, "--plot-dir") as temporary:
        save_image(grid, temporary, format="png")
    return str(path)


def as_lists(samples: Sequence[tuple[Tensor, Tensor]], eigenvalues: Optional[Tensor] = None) -> list[dict]:
    """``top_samples`` output as JSON-ready ``[{"eigenvalue", "ids", "scores"}, ...]``."""
    rows = []
    for mode, (ids, scores) in enumerate(samples):
        row = {"ids": ids.tolist(), "scores": scores.double().tolist()}
        if eigenvalues is not None:
            row = {"eigenvalue": float(eigenvalues[mode]), **row}
        rows.append(row)
    return rows
