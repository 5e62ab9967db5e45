"""Pictures users look at: galleries of the top samples of each mode, and eigen-spectrum plots.

Build them anywhere (they return a tensor image or a matplotlib figure); log them through a Trainer's
logger with [`log_image`][lightning_spectral.viz.log_image] / [`log_figure`][lightning_spectral.viz.log_figure] (every
logger of the Trainer that holds pictures: TensorBoard,
W&B, MLflow, Comet, CSV; see [`lightning_spectral.loggers`][lightning_spectral.loggers]). Figures are
built with matplotlib's object interface (``matplotlib.figure.Figure``, imported when a plot is made): no
pyplot state and no backend switch, so importing this module leaves a notebook's backend alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional, Union

import torch
from torch import Tensor
from torchvision.utils import make_grid

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

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


def plot_spectrum(
    eigenvalues: Tensor,
    threshold: Optional[float] = None,
    top: int = 50,
    title: str = "Eigen-spectrum",
    ax: Any = None,
    *,
    cut: Optional[int] = None,
) -> "Figure":
    """Bar plot of the ``top`` largest eigenvalues, with an optional significance threshold line.

    Positive bars are modes (FKEA) or over-represented modes (FINC: those above the dashed threshold pass).
    ``cut`` marks the first ``cut`` bars as kept (kernel PCA's components): a dotted line after bar ``cut``, the
    bars beyond it grey, and at least ``cut + 10`` bars shown so the line is in the picture. Draws into ``ax`` when
    given (returns its figure), else into a new figure.

    Examples:
        >>> figure = plot_spectrum(torch.linspace(1, 0.01, 80), cut=60)
        >>> len(figure.axes[0].patches), figure.axes[0].get_legend().get_texts()[0].get_text()
        (70, '60 kept')
    """
    from matplotlib.figure import Figure

    if cut is not None:
        top = max(top, cut + 10)
    values = eigenvalues.detach().double().cpu()[:top]
    if ax is None:
        figure = Figure(figsize=(6, 3.2))
        axis = figure.subplots()
    else:
        axis, figure = ax, ax.figure
    colors = [
        "tab:gray" if (threshold is not None and v <= threshold) or (cut is not None and i >= cut) else "tab:blue"
        for i, v in enumerate(values.tolist())
    ]
    axis.bar(range(1, len(values) + 1), values.numpy(), color=colors)
    if threshold is not None:
        axis.axhline(threshold, color="tab:red", linestyle="--", label=f"threshold {threshold:.3g}")
    if cut is not None:
        axis.axvline(cut + 0.5, color="tab:red", linestyle=":", label=f"{cut} kept")
    if threshold is not None or cut is not None:
        axis.legend()
    axis.axhline(0.0, color="black", linewidth=0.5)
    axis.set_xlabel("mode (eigenvalue rank)")
    axis.set_ylabel("eigenvalue")
    axis.set_title(title)
    _integer_ticks(axis)
    figure.tight_layout()
    return figure


def _integer_ticks(axis: Any) -> None:
    """Ticks at whole numbers only on the x axis (ranks, epochs)."""
    from matplotlib.ticker import MaxNLocator

    axis.xaxis.set_major_locator(MaxNLocator(integer=True))


def plot_signed_spectrum(
    eigenvalues: Tensor, names: tuple[str, str] = ("A", "B"), top: int = 50, title: str = "", ax: Any = None
) -> "Figure":
    """SPEC's eigenvalues of ``(K_A - K_B) / n`` by magnitude (the ``top`` largest), coloured by sign: positive bars
    are clusters ``names[0]`` makes and ``names[1]`` does not, negative bars the reverse.

    Examples:
        >>> figure = plot_signed_spectrum(torch.tensor([0.3, -0.2, 0.1]), names=("clip.npy", "dino.npy"))
        >>> [t.get_text() for t in figure.axes[0].get_legend().get_texts()]
        ['clip.npy groups, dino.npy does not', 'dino.npy groups, clip.npy does not']
    """
    values = eigenvalues.detach().double().cpu()
    values = values[values.abs().argsort(descending=True)][:top]
    figure, (axis,) = panels(1, ax, width=7.0, height=3.6)
    ranks = torch.arange(1, len(values) + 1)
    for sign, color, label in (
        (1, "tab:blue", f"{names[0]} groups, {names[1]} does not"),
        (-1, "tab:orange", f"{names[1]} groups, {names[0]} does not"),
    ):
        chosen = values * sign > 0
        axis.bar(ranks[chosen].numpy(), values[chosen].numpy(), color=color, label=label)
    axis.axhline(0.0, color="black", linewidth=0.5)
    axis.set_xlabel("eigenvalue rank (by |eigenvalue|)")
    axis.set_ylabel("eigenvalue of (K_A - K_B)/n")
    axis.set_title(title or f"SPEC: A = {names[0]}, B = {names[1]}")
    axis.legend()
    _integer_ticks(axis)
    figure.tight_layout()
    return figure


def plot_test_history(
    epochs: Sequence[int],
    statistic: Mapping[str, Sequence[float]],
    p_value: Mapping[str, Sequence[float]],
    alpha: float = 0.05,
    title: str = "FastMMD",
    ax: Any = None,
) -> "Figure":
    """A two-sample test over epochs: the statistic (one line per bandwidth) left, the p-value right on a log scale
    with the test level ``alpha`` dashed (below it the samples differ from the reference).

    Examples:
        >>> figure = plot_test_history([0, 1, 2], {"MMD^2": [0.1, 0.05, 0.01]}, {"p-value": [0.001, 0.01, 0.3]})
        >>> [axis.get_title() for axis in figure.axes]
        ['FastMMD: MMD^2 over epochs', 'FastMMD: p-value over epochs']
    """
    figure, (left, right) = panels(2, ax, width=4.5, height=3.2)
    for axis, series, name in ((left, statistic, "MMD^2"), (right, p_value, "p-value")):
        for label, values in series.items():
            points = [max(float(v), 1e-16) if axis is right else float(v) for v in values]  # log scale: no zero
            axis.plot(list(epochs), points, marker="o", markersize=4, label=label)
        axis.set_xlabel("epoch")
        axis.set_title(f"{title}: {name} over epochs")
        _integer_ticks(axis)
    right.set_yscale("log")
    right.axhline(alpha, color="tab:red", linestyle="--", label=f"level {alpha:g}")
    left.axhline(0.0, color="black", linewidth=0.5)
    for axis in (left, right):
        if len(axis.get_legend_handles_labels()[0]) > 1:
            axis.legend(fontsize=8)
    figure.tight_layout()
    return figure


def log_image(logger_or_trainer: Any, tag: str, image: Tensor, step: int | None = None) -> None:
    """Log a (3, H, W) image to every logger of a Trainer (or to one logger), on rank 0: TensorBoard, W&B, MLflow,
    Comet, CSV ([`log_picture`][lightning_spectral.loggers.log_picture]); a logger that cannot hold it is warned
    once."""
    from lightning_spectral.loggers import log_picture

    log_picture(logger_or_trainer, tag, image, step)


def log_figure(logger_or_trainer: Any, tag: str, figure: "Figure", step: int | None = None) -> None:
    """Log a matplotlib figure to every logger of a Trainer (or to one logger), on rank 0 (see
    [`log_image`][lightning_spectral.viz.log_image])."""
    from lightning_spectral.loggers import log_picture

    log_picture(logger_or_trainer, tag, figure, step)


def panels(count: int, ax: Any = None, width: float = 6.0, height: float = 3.2) -> tuple["Figure", list[Any]]:
    """A figure with ``count`` side-by-side axes, or the given ones: ``ax`` may be one axis (``count == 1``) or a
    sequence of ``count`` axes.

    Raises:
        ValueError: ``ax`` does not hold ``count`` axes.
    """
    if ax is None:
        from matplotlib.figure import Figure

        figure = Figure(figsize=(width * count, height))
        axes = figure.subplots(1, count)
        return figure, list(axes) if count > 1 else [axes]
    axes = list(ax.flat) if hasattr(ax, "flat") else list(ax) if isinstance(ax, (list, tuple)) else [ax]
    if len(axes) != count:
        raise ValueError(f"`ax`: this plot has {count} panels; pass {count} axes (or none), got {len(axes)}.")
    return axes[0].figure, axes


def plot_spectra(
    spectra: Sequence[Tensor],
    labels: Optional[Sequence[str]] = None,
    top: int = 50,
    title: str = "Eigen-spectrum over steps",
    ax: Any = None,
) -> "Figure":
    """One line per spectrum (e.g. a covariance's eigenvalues at successive steps), the ``top`` largest each, on a
    log scale. Draws into ``ax`` when given (returns its figure), else into a new figure.

    Examples:
        >>> import torch
        >>> figure = plot_spectra([torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.9, 0.1, 0.0])])
        >>> len(figure.axes[0].lines)
        2
    """
    figure, (axis,) = panels(1, ax)
    for index, values in enumerate(spectra):
        values = values.detach().double().cpu()[:top].clamp_min(1e-12)
        label = labels[index] if labels is not None else f"step {index}"
        axis.plot(range(1, len(values) + 1), values.numpy(), marker="o", markersize=3, label=label)
    axis.set_yscale("log")
    axis.set_xlabel("mode (eigenvalue rank)")
    axis.set_ylabel("eigenvalue")
    axis.set_title(title)
    axis.legend()
    figure.tight_layout()
    return figure


def plot_values(
    values: Mapping[str, Tensor],
    title: str = "",
    lines: Optional[Mapping[str, float]] = None,
    ax: Any = None,
) -> "Figure":
    """One bar panel per named value, a bar per component (e.g. FastMMD's MMD^2 and p-value per bandwidth), with
    optional dashed reference lines per name (e.g. ``{"p_value": 0.05}``).

    Examples:
        >>> import torch
        >>> figure = plot_values({"": torch.tensor([0.1, 0.2]), "p_value": torch.tensor([0.5, 0.01])},
        ...                      title="FastMMD", lines={"p_value": 0.05})
        >>> len(figure.axes), len(figure.axes[1].patches)
        (2, 2)
    """
    figure, axes = panels(len(values), ax, width=4.0)
    for axis, (name, value) in zip(axes, values.items()):
        flat = torch.as_tensor(value).detach().double().cpu().flatten()
        axis.bar(range(len(flat)), flat.numpy(), color="tab:blue")
        if lines and name in lines:
            axis.axhline(lines[name], color="tab:red", linestyle="--", label=f"{lines[name]:.3g}")
            axis.legend()
        axis.axhline(0.0, color="black", linewidth=0.5)
        axis.set_xticks(range(len(flat)))
        axis.set_xlabel("component")
        axis.set_title(f"{title} {name or 'value'}".strip())
    figure.tight_layout()
    return figure
