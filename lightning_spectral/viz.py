"""Pictures users look at: galleries of the top samples of each mode, and eigen-spectrum plots.

Build them anywhere (they return a tensor image or a matplotlib figure); log them through a Trainer's
logger with :func:`log_image` / :func:`log_figure` (every logger of the Trainer that holds pictures: TensorBoard,
W&B, MLflow, Comet, CSV; see :mod:`lightning_spectral.loggers`). Figures are
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


def mode_gallery(
    samples: Sequence[tuple[Tensor, Tensor]],
    images: ImageSource,
    padding: int = 2,
    normalize: bool = True,
    labels: Optional[Sequence[str]] = None,
) -> Tensor:
    """An image grid with one row per mode and the mode's top samples left to right (best first).

    Args:
        samples: the output of ``top_samples``: per mode, ``(ids, scores)``.
        images: maps a sample id to its image (C, H, W) or (H, W): a function or an indexable sequence of
            tensors (a list of kept images, a dataset of tensors). All images must share one size.
        padding: pixels between images.
        normalize: rescale each image to [0, 1] for display.
        labels: one text per row (e.g. ``"mode 1: 12.0% of the mass"``), drawn in a strip left of the row.

    Returns:
        A (3, H, W) float tensor in [0, 1], ready for ``add_image`` or ``torchvision.utils.save_image``.

    Examples:
        >>> import torch
        >>> pictures = torch.rand(10, 1, 8, 8)
        >>> modes = [(torch.tensor([0, 1, 2]), torch.ones(3)), (torch.tensor([5]), torch.ones(1))]
        >>> grid = mode_gallery(modes, pictures)
        >>> grid.shape  # 2 rows of 3 slots of 8 + 2 pixels, plus the outer padding
        torch.Size([3, 22, 32])
        >>> mode_gallery(modes, pictures, labels=["mode 1", "mode 2"]).shape[1]   # same height, a label strip
        22
    """
    rows = [[_image(images, int(i), normalize) for i in ids] for ids, _ in samples]
    first = next((row[0] for row in rows if row), None)
    if first is None:
        raise ValueError("mode_gallery: no samples to show (every mode is empty).")
    if labels is not None and len(labels) != len(rows):
        raise ValueError(f"mode_gallery: {len(labels)} labels for {len(rows)} rows; pass one label per mode.")
    per_row = max(len(row) for row in rows)
    blank = torch.zeros_like(first)
    tiles = [tile for row in rows for tile in row + [blank] * (per_row - len(row))]
    grid = make_grid(torch.stack(tiles), nrow=per_row, padding=padding, pad_value=1.0)
    if labels is None:
        return grid
    row_height = first.shape[1] + padding
    return torch.cat([_label_strip(labels, grid.shape[1], row_height, padding), grid], dim=2)


def _label_strip(labels: Sequence[str], height: int, row_height: int, padding: int) -> Tensor:
    """A white (3, height, width) strip with ``labels[i]`` written at the height of row ``i`` (PIL's font)."""
    from PIL import Image, ImageDraw
    from torchvision.transforms.functional import pil_to_tensor

    width = 6 * max(len(label) for label in labels) + 2 * padding + 4
    strip = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(strip)
    for row, label in enumerate(labels):
        draw.text((padding + 2, padding + row * row_height + max(row_height // 2 - 6, 0)), label, fill="black")
    return pil_to_tensor(strip).float() / 255.0


def plot_spectrum(
    eigenvalues: Tensor,
    threshold: Optional[float] = None,
    top: int = 50,
    title: str = "Eigen-spectrum",
    ax: Any = None,
) -> "Figure":
    """Bar plot of the ``top`` largest eigenvalues, with an optional significance threshold line.

    Positive bars are modes (FKEA) or over-represented modes (FINC: those above the dashed threshold pass).
    Draws into ``ax`` when given (returns its figure), else into a new figure.
    """
    from matplotlib.figure import Figure

    values = eigenvalues.detach().double().cpu()[:top]
    if ax is None:
        figure = Figure(figsize=(6, 3.2))
        axis = figure.subplots()
    else:
        axis, figure = ax, ax.figure
    colors = ["tab:blue" if threshold is None or v > threshold else "tab:gray" for v in values.tolist()]
    axis.bar(range(1, len(values) + 1), values.numpy(), color=colors)
    if threshold is not None:
        axis.axhline(threshold, color="tab:red", linestyle="--", label=f"threshold {threshold:.3g}")
        axis.legend()
    axis.axhline(0.0, color="black", linewidth=0.5)
    axis.set_xlabel("mode (eigenvalue rank)")
    axis.set_ylabel("eigenvalue")
    axis.set_title(title)
    figure.tight_layout()
    return figure


def log_image(logger_or_trainer: Any, tag: str, image: Tensor, step: int | None = None) -> None:
    """Log a (3, H, W) image to every logger of a Trainer (or to one logger), on rank 0: TensorBoard, W&B, MLflow,
    Comet, CSV (:func:`~lightning_spectral.loggers.log_picture`); a logger that cannot hold it is warned once."""
    from lightning_spectral.loggers import log_picture

    log_picture(logger_or_trainer, tag, image, step)


def log_figure(logger_or_trainer: Any, tag: str, figure: "Figure", step: int | None = None) -> None:
    """Log a matplotlib figure to every logger of a Trainer (or to one logger), on rank 0 (see :func:`log_image`)."""
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
