"""Pictures to every logger of a Trainer: one call, whatever the user logs to.

[`log_picture`][lightning_spectral.pictures.log_picture] sends an image (a (3, H, W) tensor in [0, 1]) or a matplotlib
figure to each of a Trainer's loggers through the logger's public API:

| logger | how the picture is stored |
|---|---|
| TensorBoard | ``experiment.add_image`` (any logger whose experiment has ``add_image`` and ``add_figure``) |
| W&B | ``WandbLogger.log_image(key, [image], step)``: ``media/images`` of the run |
| MLflow | ``MlflowClient.log_image(run_id, image, key=tag, step=step)``: the run's time-stepped images |
| Comet | ``experiment.log_image(image, name=tag, step=step)`` |
| CSV | a PNG beside ``metrics.csv``: ``{log_dir}/{tag, '/' as '_'}-step{step}.png`` (written, then renamed) |

Figures are drawn into an RGB array (matplotlib's Agg canvas, no pyplot). A logger that cannot hold pictures gets
one warning that says what to do (never a silent skip); a Trainer built with
``logger=False`` logs nothing, by the user's choice. Logging happens on rank 0 only.
"""

from __future__ import annotations

import os
import re
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Optional, Union

import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_only, rank_zero_warn
from torch import Tensor

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

Picture = Union[Tensor, "Figure"]

#: Loggers already warned that they cannot hold pictures (one warning each).
_WARNED: "weakref.WeakSet[Any]" = weakref.WeakSet()
_WARNED_IDS: set[int] = set()  # loggers that cannot be weakly referenced


def loggers_of(target: Any) -> list[Any]:
    """The loggers of a Trainer (``trainer.loggers``), or ``[target]`` for a logger itself."""
    if isinstance(getattr(target, "loggers", None), Iterable):
        return list(target.loggers)
    return [target] if target is not None else []


def _kind(logger: Any) -> Optional[str]:
    """Which way ``logger`` stores pictures, or ``None`` when it cannot."""
    from lightning.pytorch.loggers import CometLogger, CSVLogger, MLFlowLogger, WandbLogger

    if isinstance(logger, WandbLogger):
        return "wandb"
    if isinstance(logger, MLFlowLogger):
        return "mlflow"
    if isinstance(logger, CometLogger):
        return "comet"
    if isinstance(logger, CSVLogger):
        return "csv"
    experiment = getattr(logger, "experiment", None)  # TensorBoard, or a logger built on a SummaryWriter
    if hasattr(experiment, "add_image") and hasattr(experiment, "add_figure"):
        return "tensorboard"
    return None


def takes_pictures(target: Any) -> bool:
    """Whether any logger of ``target`` (a Trainer or a logger) can hold pictures."""
    return any(_kind(logger) is not None for logger in loggers_of(target))


def warn_no_pictures(logger: Any) -> None:
    """Warn once per logger that it cannot hold pictures, and what to do."""
    try:
        if logger in _WARNED:
            return
        _WARNED.add(logger)
    except TypeError:  # not weakly referenceable
        if id(logger) in _WARNED_IDS:
            return
        _WARNED_IDS.add(id(logger))
    rank_zero_warn(
        f"lightning-spectral: {type(logger).__name__} cannot hold pictures (galleries, spectra): they are not logged "
        "to it. Add a logger that can (TensorBoardLogger, WandbLogger, MLFlowLogger, CometLogger or CSVLogger, "
        "e.g. Trainer(logger=[your_logger, CSVLogger('logs')])), or read the callback's `last_galleries`.",
        category=UserWarning,
    )


def as_array(picture: Picture) -> np.ndarray:
    """An (H, W, 3) uint8 RGB array of an image (C, H, W) / (H, W) (floats in [0, 1], or uint8 in [0, 255] as
    TensorBoard's ``add_image`` reads them) or of a matplotlib figure.

    Examples:
        >>> as_array(torch.ones(1, 2, 3)).shape
        (2, 3, 3)
        >>> int(as_array(torch.full((3, 1, 1), 128, dtype=torch.uint8))[0, 0, 0])
        128
    """
    if isinstance(picture, Tensor):
        image = picture.detach().cpu()
        image = image.float() if image.is_floating_point() else image.float() / 255.0
        image = image[None] if image.ndim == 2 else image
        if image.ndim != 3 or image.shape[0] not in (1, 3, 4):
            raise ValueError(f"a picture must be an image (C, H, W) with C in 1, 3, 4, got {tuple(image.shape)}.")
        image = image[:3].expand(3, -1, -1) if image.shape[0] == 1 else image[:3]
        return (image.clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).contiguous().numpy()
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(picture)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()


def _csv_path(log_dir: str, tag: str, step: Optional[int]) -> str:
    """``{log_dir}/{tag}-step{step}.png``; without a step, ``{tag}-{k}.png`` with the first free k (never over an
    earlier picture)."""
    name = re.sub(r"[^A-Za-z0-9_.=-]+", "_", tag.strip("/")) or "picture"
    if step is not None:
        return os.path.join(log_dir, f"{name}-step{int(step)}.png")
    k = 0
    while os.path.exists(os.path.join(log_dir, f"{name}-{k}.png")):
        k += 1
    return os.path.join(log_dir, f"{name}-{k}.png")


def _save_png(array: np.ndarray, path: str) -> None:
    """Write the PNG into a temporary file beside ``path``, then rename it over ``path`` (whole or not at all)."""
    from PIL import Image

    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        Image.fromarray(array).save(temporary, format="png")
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def _send(logger: Any, kind: str, tag: str, array: np.ndarray, step: Optional[int]) -> None:
    if kind == "tensorboard":  # figures arrive drawn (Agg): add_figure would import pyplot
        logger.experiment.add_image(tag, array, global_step=step, dataformats="HWC")
        return
    if kind == "wandb":
        logger.log_image(key=tag, images=[array], step=step)
    elif kind == "mlflow":
        key = re.sub(r"[^A-Za-z0-9_\-. /]+", "_", tag)
        logger.experiment.log_image(logger.run_id, array, key=key, step=0 if step is None else int(step))
    elif kind == "comet":
        logger.experiment.log_image(array, name=tag, step=step)
    elif kind == "csv":
        _save_png(array, _csv_path(logger.log_dir, tag, step))


@rank_zero_only
def log_picture(target: Any, tag: str, picture: Picture, step: Optional[int] = None) -> list[str]:
    """Send ``picture`` (an image (C, H, W) in [0, 1], or a matplotlib figure) as ``tag`` to every logger of a
    Trainer (or to one logger), on rank 0; ``step`` defaults to the Trainer's ``global_step``.

    Returns the kinds of logger that took it (``"tensorboard"``, ``"wandb"``, ``"mlflow"``, ``"comet"``, ``"csv"``);
    each logger that cannot hold pictures is warned once (`warn_no_pictures`).

    Examples:
        >>> import tempfile, torch
        >>> from lightning.pytorch.loggers import CSVLogger
        >>> logger = CSVLogger(tempfile.mkdtemp())
        >>> log_picture(logger, "val/modes", torch.rand(3, 8, 8), step=3)
        ['csv']
        >>> sorted(os.listdir(logger.log_dir))
        ['val_modes-step3.png']
    """
    if step is None:
        step = getattr(target, "global_step", None)
    taken, array = [], None
    for logger in loggers_of(target):
        kind = _kind(logger)
        if kind is None:
            warn_no_pictures(logger)
            continue
        if array is None:  # drawn once, the same pixels for every logger ((H, W) and uint8 images included)
            array = as_array(picture)
        _send(logger, kind, tag, array, step)
        taken.append(kind)
    return taken
