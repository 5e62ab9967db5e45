"""Pictures users look at: galleries of the top samples of each mode, and eigen-spectrum plots.

Build them anywhere (they return a tensor image or a matplotlib figure); log them through a Trainer's
logger with :func:`log_image` / :func:`log_figure` (TensorBoard: ``add_image`` / ``add_figure``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Union

import matplotlib

matplotlib.use("Agg", force=False)  # no display needed; a no-op where a backend is already chosen
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from lightning.pytorch.utilities import rank_zero_only  # noqa: E402
from torch import Tensor  # noqa: E402
from torchvision.utils import make_grid  # noqa: E402

ImageSource = Union[Callable[[int], Tensor], Sequence[Tensor]]


def _image(source: ImageSource, index: int, normalize: bool) -> Tensor:
    image = source(index) if callable(source) else source[index]
    image = torch.as_tensor(image).detach().cpu().float()
    if image.ndim == 2:
        image = image[None]
    if image.ndim != 3 or image.shape[0] not in (1, 3):
        raise ValueError(f"mode_gallery: image {index} has shape {tuple(image.shape)}; expected (C, H, W), C in 1, 3.")
    if normalize:
        image = (image - image.min()) / (image.max() - image.min()).clamp_min(1e-12)
    return image.expand(3, -1, -1)


def mode_gallery(
    samples: Sequence[tuple[Tensor, Tensor]], images: ImageSource, padding: int = 2, normalize: bool = True
) -> Tensor:
    """An image grid with one row per mode and the mode's top samples left to right (best first).

    Args:
        samples: the output of ``top_samples``: per mode, ``(ids, scores)``.
        images: maps a sample id to its image (C, H, W) or (H, W): a function or an indexable dataset
            of tensors. All images must share one size.
        padding: pixels between images.
        normalize: rescale each image to [0, 1] for display.

    Returns:
        A (3, H, W) float tensor in [0, 1], ready for ``add_image`` or ``torchvision.utils.save_image``.

    Example:
        >>> import torch
        >>> pictures = torch.rand(10, 1, 8, 8)
        >>> modes = [(torch.tensor([0, 1, 2]), torch.ones(3)), (torch.tensor([5]), torch.ones(1))]
        >>> grid = mode_gallery(modes, pictures)
        >>> grid.shape  # 2 rows of 3 slots of 8 + 2 pixels, plus the outer padding
        torch.Size([3, 22, 32])
    """
    rows = [[_image(images, int(i), normalize) for i in ids] for ids, _ in samples]
    first = next((row[0] for row in rows if row), None)
    if first is None:
        raise ValueError("mode_gallery: no samples to show (every mode is empty).")
    per_row = max(len(row) for row in rows)
    blank = torch.zeros_like(first)
    tiles = [tile for row in rows for tile in row + [blank] * (per_row - len(row))]
    return make_grid(torch.stack(tiles), nrow=per_row, padding=padding, pad_value=1.0)


def plot_spectrum(
    eigenvalues: Tensor, threshold: float | None = None, top: int = 50, title: str = "Eigen-spectrum"
) -> plt.Figure:
    """Bar plot of the ``top`` largest eigenvalues, with an optional significance threshold line.

    Positive bars are modes (FKEA) or over-represented modes (FINC: those above the dashed threshold pass).
    """
    values = eigenvalues.detach().double().cpu()[:top]
    figure, axis = plt.subplots(figsize=(6, 3.2))
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


def _experiment(logger_or_trainer: Any, method: str) -> Any:
    logger = getattr(logger_or_trainer, "logger", logger_or_trainer)
    experiment = getattr(logger, "experiment", None)
    if experiment is None or not hasattr(experiment, method):
        raise TypeError(
            f"Cannot log pictures to {type(logger).__name__}: its experiment has no `{method}`. Use a "
            "TensorBoardLogger (lightning.pytorch.loggers.TensorBoardLogger) or save the picture yourself."
        )
    return experiment


@rank_zero_only
def log_image(logger_or_trainer: Any, tag: str, image: Tensor, step: int | None = None) -> None:
    """Log a (3, H, W) image through a Trainer's (or a logger's) TensorBoard experiment, on rank 0."""
    _experiment(logger_or_trainer, "add_image").add_image(tag, image, global_step=_step(logger_or_trainer, step))


@rank_zero_only
def log_figure(logger_or_trainer: Any, tag: str, figure: plt.Figure, step: int | None = None) -> None:
    """Log a matplotlib figure through a Trainer's (or a logger's) TensorBoard experiment, on rank 0; closes it."""
    _experiment(logger_or_trainer, "add_figure").add_figure(tag, figure, global_step=_step(logger_or_trainer, step))
    plt.close(figure)


def _step(logger_or_trainer: Any, step: int | None) -> int | None:
    return step if step is not None else getattr(logger_or_trainer, "global_step", None)
