"""Pictures to every logger of a Trainer: one call, whatever the user logs to.

[`log_picture`][lightning_spectral.pictures.log_picture] sends an image (a tensor (C, H, W) or (H, W), a NumPy array
(H, W, C), (C, H, W) or (H, W), a PIL image) or a matplotlib figure to each of a Trainer's loggers through the
logger's public API:

| logger | how the picture is stored |
|---|---|
| TensorBoard | ``experiment.add_image`` (any logger whose experiment has ``add_image`` and ``add_figure``) |
| W&B | ``WandbLogger.log_image(key, [image], step)``: ``media/images`` of the run |
| MLflow | ``MlflowClient.log_image(run_id, image, key=tag, step=step)``: the run's time-stepped images |
| Comet | ``experiment.log_image(image, name=tag, step=step)`` |
| CSV | a PNG beside ``metrics.csv``: ``{log_dir}/{tag, '/' as '_'}-step{step}.png`` (written, then renamed) |

Figures are drawn into an RGB array (matplotlib's Agg canvas, no pyplot). Floats are read in [0, 1], integers in
[0, 255], bools as black / white. No picture is logged larger than ``MAX_SIDE`` (4096) pixels a side: a larger
image is averaged down to it, a larger figure drawn at a lower dpi (a 10,000 x 10,000 image would be a 300 MB PNG
per step). ``None``, strings, complex, empty, sparse and meta tensors, non-string tags and steps that are not
integers >= 0 are refused by name before any logger is called. A logger that cannot hold pictures gets
one warning that says what to do (never a silent skip); a Trainer built with
``logger=False`` logs nothing, by the user's choice. Logging happens on rank 0 only.

[`log_text`][lightning_spectral.pictures.log_text] sends lines a person reads (a gallery's rows: "missing region 1:
class 7 (19 of its top 20), about 10 % of the reference") the same way:

| logger | how the text is stored |
|---|---|
| TensorBoard | ``experiment.add_text(tag, text, global_step=step)`` (the Text tab) |
| W&B | ``WandbLogger.log_text(key, columns=["text"], data=[[text]], step=step)``: a table of the run |
| MLflow | ``MlflowClient.log_text(run_id, text, "text/{tag}-step{step}.txt")``: an artifact of the run |
| Comet | ``experiment.log_text(text, step=step, metadata={"tag": tag})`` |
| CSV | appended to ``{log_dir}/{tag, '/' as '_'}.txt`` beside ``metrics.csv``, each entry headed ``[step N]`` |
"""

from __future__ import annotations

import math
import os
import re
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Optional, Union

import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_only, rank_zero_warn
from torch import Tensor

from lightning_spectral._checks import check_dense, plain_number

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure
    from PIL.Image import Image

Picture = Union[Tensor, np.ndarray, "Image", "Figure"]

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
        f"lightning-spectral: {type(logger).__name__} cannot hold pictures or text (galleries, spectra, the modes' "
        "lines): they are not logged "
        "to it. Add a logger that can (TensorBoardLogger, WandbLogger, MLFlowLogger, CometLogger or CSVLogger, "
        "e.g. Trainer(logger=[your_logger, CSVLogger('logs')])), or read the callback's `last_galleries`.",
        category=UserWarning,
    )


#: The largest side of a logged picture in pixels: a larger image is averaged down to it (``f x f`` cells, ``f``
#: the smallest integer that brings its larger side to ``MAX_SIDE`` or below), a larger figure is drawn at the
#: dpi that gives its larger side ``MAX_SIDE`` pixels.
MAX_SIDE = 4096

#: Pixels converted to float at a time while an image is averaged down.
_BAND_PIXELS = 2**22

_ACCEPTED = (
    "an image (a tensor (C, H, W) or (H, W), a NumPy array (H, W, C), (C, H, W) or (H, W), a PIL image) or a "
    "matplotlib figure"
)


def _describe(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, str):
        return f"the string {value!r}; to log an image file, open it first, e.g. `PIL.Image.open(path)`"
    if isinstance(value, (int, float)):
        return f"{value!r}"
    return f"a {type(value).__module__}.{type(value).__qualname__}"


def _numpy_image(array: np.ndarray, name: str) -> Tensor:
    """An ndarray image as a (C, H, W) tensor (a view where the layout allows)."""
    if array.dtype.kind == "c":
        raise TypeError(
            f"`{name}` is complex ({array.dtype}); pass a real image, e.g. `np.abs({name})` or `{name}.real`."
        )
    if array.dtype.kind not in "biuf":
        raise TypeError(f"`{name}` must hold numbers, got a NumPy array of dtype {array.dtype}.")
    if array.ndim == 3 and array.shape[-1] in (1, 3, 4):  # (H, W, C): NumPy's, PIL's and imageio's layout
        array = np.moveaxis(array, -1, 0)
    elif array.ndim not in (2, 3):
        raise ValueError(f"`{name}` must be an image (H, W, C), (C, H, W) or (H, W), got shape {array.shape}.")
    array = array.astype(array.dtype.newbyteorder("="), copy=False)
    return torch.from_numpy(np.ascontiguousarray(array) if min(array.strides) < 0 else array)


def _pil_image(image: Any, name: str) -> Tensor:
    """A PIL image as a (C, H, W) tensor: 16-bit greys scaled from [0, 65535], 32-bit float ones read as [0, 1]; a
    large image is reduced by PIL before it is converted."""
    if image.mode.startswith("I;16"):
        return torch.from_numpy(np.asarray(image, dtype=np.float32) / 65535.0)
    if image.mode == "F":
        return torch.from_numpy(np.asarray(image, dtype=np.float32).copy())
    image = image if image.mode in ("L", "RGB", "RGBA") else image.convert("RGB")
    factor = -(-max(image.size) // MAX_SIDE)
    return _numpy_image(np.array(image.reduce(factor) if factor > 1 else image), name)  # a copy: writable


def _checked(picture: Any, name: str = "picture") -> Any:
    """``picture`` as a (C, H, W) tensor (C in 1, 3, 4; not yet scaled) or a matplotlib figure whose size is a
    positive, finite number of pixels.

    Raises:
        TypeError: ``None``, a string, another type, a complex, sparse or meta tensor / array.
        ValueError: another shape (a batch (N, C, H, W): tile it first), an empty image, a figure without size.
    """
    if isinstance(picture, np.ndarray):
        picture = _numpy_image(picture, name)
    elif type(picture).__module__.startswith("PIL."):
        from PIL import Image

        if isinstance(picture, Image.Image):
            picture = _pil_image(picture, name)
    if isinstance(picture, Tensor):
        check_dense(picture, name)
        if picture.is_complex():
            raise TypeError(
                f"`{name}` is complex ({picture.dtype}); pass a real image, e.g. `{name}.abs()` or `{name}.real`."
            )
        image = picture.detach()
        image = image[None] if image.ndim == 2 else image
        if image.ndim != 3 or image.shape[0] not in (1, 3, 4):
            hint = "; tile a batch first, e.g. `torchvision.utils.make_grid(images)`" if image.ndim == 4 else ""
            raise ValueError(
                f"`{name}` must be an image (C, H, W) with C in 1, 3, 4, or (H, W), got {tuple(picture.shape)}{hint}."
            )
        if image.shape[1] == 0 or image.shape[2] == 0:
            raise ValueError(f"`{name}` is an empty image (shape {tuple(picture.shape)}); there is nothing to log.")
        return image
    if type(picture).__module__.startswith("matplotlib."):
        from matplotlib.figure import Figure

        if isinstance(picture, Figure):
            width, height = (float(v) * float(picture.dpi) for v in picture.get_size_inches())
            finite = math.isfinite(width) and math.isfinite(height) and min(width, height) > 0
            drawn = min(width, height) * min(1.0, MAX_SIDE / max(width, height)) if finite else 0.0  # as drawn
            if drawn < 1:
                raise ValueError(
                    f"`{name}`: the figure is {width:g} x {height:g} pixels (its size in inches times its dpi), "
                    f"{drawn:.2g} pixels on its smaller side once its larger side is at most {MAX_SIDE}; give it a "
                    "positive size and a shape that can be drawn, e.g. `figure.set_size_inches(6.4, 4.8)` and "
                    "`figure.set_dpi(100)`."
                )
            return picture
    raise TypeError(f"`{name}` must be {_ACCEPTED}, got {_describe(picture)}.")


def _unit(image: Tensor) -> Tensor:
    """float32 in the [0, 1] scale: floats as they are, bools as 0 / 1, integers (0 to 255) divided by 255."""
    if image.is_floating_point() or image.dtype == torch.bool:
        return image.float()
    return image.float() / 255.0


def _shrunk(image: Tensor) -> Tensor:
    """``image`` (C, H, W) as float32 in [0, 1] scale, averaged over ``f x f`` cells when its larger side exceeds
    ``MAX_SIDE`` (``f = ceil(max(H, W) / MAX_SIDE)``); converted a band of rows at a time."""
    factor = -(-max(image.shape[1:]) // MAX_SIDE)
    if factor == 1:
        return _unit(image)
    rows = factor * max(1, _BAND_PIXELS // (factor * factor * image.shape[2]))
    bands = [
        torch.nn.functional.avg_pool2d(_unit(image[:, top : top + rows])[None], factor, ceil_mode=True)[0]
        for top in range(0, image.shape[1], rows)
    ]
    return torch.cat(bands, 1)


def _pixels(picture: Any, name: str = "picture") -> np.ndarray:
    """The (H, W, 3) uint8 array of a picture that passed `_checked`."""
    if isinstance(picture, Tensor):
        image = _shrunk(picture.cpu())
        if not bool(torch.isfinite(image).all()):
            raise ValueError(f"`{name}` holds NaN or Inf values; replace them first, e.g. `torch.nan_to_num({name})`.")
        image = image[:3].expand(3, -1, -1) if image.shape[0] == 1 else image[:3]
        return (image.clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).contiguous().numpy()
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    dpi = picture.dpi
    scale = min(1.0, MAX_SIDE / max(float(v) * float(dpi) for v in picture.get_size_inches()))
    if scale < 1:  # drawn smaller, never allocated at full size
        picture.set_dpi(dpi * scale)
    try:
        canvas = FigureCanvasAgg(picture)
        canvas.draw()
        return np.asarray(canvas.buffer_rgba())[..., :3].copy()
    finally:
        if scale < 1:
            picture.set_dpi(dpi)


def as_array(picture: Picture, name: str = "picture") -> np.ndarray:
    """An (H, W, 3) uint8 RGB array of an image or of a matplotlib figure.

    Images: a tensor (C, H, W) or (H, W) with C in 1, 3, 4 (alpha dropped), a NumPy array (H, W, C) (when its last
    axis has 1, 3 or 4 entries), (C, H, W) or (H, W), or a PIL image. Floats are read in [0, 1] (clipped), integers
    in [0, 255] (TensorBoard's ``add_image`` convention), bools as black / white; an image larger than ``MAX_SIDE``
    pixels a side is averaged down, a figure is drawn at the dpi that keeps it within ``MAX_SIDE``.

    Raises:
        TypeError: ``None``, a string or another type, a complex, sparse or meta tensor (naming ``name``).
        ValueError: another shape, an empty image, NaN / Inf values, a figure without size.

    Examples:
        >>> as_array(torch.ones(1, 2, 3)).shape
        (2, 3, 3)
        >>> int(as_array(torch.full((3, 1, 1), 128, dtype=torch.uint8))[0, 0, 0])
        128
        >>> as_array(torch.ones(2, 2, dtype=torch.bool))[0, 0].tolist()
        [255, 255, 255]
    """
    return _pixels(_checked(picture, name), name)


def _check_tag(tag: Any) -> str:
    if not isinstance(tag, str):
        raise TypeError(f"`tag` must be a string naming the picture (e.g. 'val/modes'), got {_describe(tag)}.")
    if not tag.strip():
        raise ValueError("`tag` is empty; name the picture, e.g. 'val/modes'.")
    return tag


def _check_step(step: Any) -> Optional[int]:
    if step is None:
        return None
    value = int(plain_number(step, "step", integer=True, what="an integer >= 0 (the training step) or None"))
    if value < 0:
        raise ValueError(f"`step` must be an integer >= 0 (the training step) or None, got {value}.")
    return value


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


def _text_file(log_dir: str, tag: str) -> str:
    return os.path.join(log_dir, (re.sub(r"[^A-Za-z0-9_.=-]+", "_", tag.strip("/")) or "text") + ".txt")


def _send_text(logger: Any, kind: str, tag: str, text: str, step: Optional[int]) -> None:
    if kind == "tensorboard":
        logger.experiment.add_text(tag, text, global_step=step)
    elif kind == "wandb":
        logger.log_text(key=tag, columns=["text"], data=[[text]], step=step)
    elif kind == "mlflow":
        name = re.sub(r"[^A-Za-z0-9_.=-]+", "_", tag.strip("/")) or "text"
        logger.experiment.log_text(logger.run_id, text, f"text/{name}-step{0 if step is None else int(step)}.txt")
    elif kind == "comet":
        logger.experiment.log_text(text, step=step, metadata={"tag": tag})
    elif kind == "csv":
        os.makedirs(logger.log_dir, exist_ok=True)
        with open(_text_file(logger.log_dir, tag), "a", encoding="utf-8") as file:
            file.write(("" if step is None else f"[step {int(step)}]\n") + text.rstrip("\n") + "\n")


@rank_zero_only
def log_text(target: Any, tag: str, text: str, step: Optional[int] = None) -> list[str]:
    """Send ``text`` (lines a person reads) as ``tag`` to every logger of a Trainer (or to one logger) that holds
    text, on rank 0 (the module doc's table); ``step`` (an integer >= 0) defaults to the Trainer's ``global_step``.

    Raises:
        TypeError: a ``tag`` or ``text`` that is not a string; before any logger is called.
        ValueError: an empty ``tag``, a ``step`` that is not an integer >= 0.

    Returns the kinds of logger that took it; a logger that cannot hold text is warned once (as for pictures).

    Examples:
        >>> import tempfile
        >>> from lightning.pytorch.loggers import CSVLogger
        >>> logger = CSVLogger(tempfile.mkdtemp())
        >>> log_text(logger, "val/finc/missing", "missing region 1: class 7 (19 of its top 20), about 10 % of the "
        ...          "reference", step=3)
        ['csv']
        >>> print(open(os.path.join(logger.log_dir, "val_finc_missing.txt")).read().strip())
        [step 3]
        missing region 1: class 7 (19 of its top 20), about 10 % of the reference
    """
    tag, step = _check_tag(tag), _check_step(step)
    if not isinstance(text, str):
        raise TypeError(f"`text` must be a string (lines a person reads), got {_describe(text)}.")
    if step is None:
        step = getattr(target, "global_step", None)
    taken = []
    for logger in loggers_of(target):
        kind = _kind(logger)
        if kind is None:
            warn_no_pictures(logger)
            continue
        _send_text(logger, kind, tag, text, step)
        taken.append(kind)
    return taken


@rank_zero_only
def log_picture(target: Any, tag: str, picture: Picture, step: Optional[int] = None) -> list[str]:
    """Send ``picture`` (an image or a matplotlib figure, as [`as_array`][lightning_spectral.pictures.as_array]
    takes them) as ``tag`` to every logger of a Trainer (or to one logger), on rank 0; ``step`` (an integer >= 0)
    defaults to the Trainer's ``global_step``.

    Raises:
        TypeError: a ``tag`` that is not a string, a ``picture`` of another type (``None``, a string), complex,
            sparse or meta; before any logger is called.
        ValueError: an empty ``tag``, a ``step`` that is not an integer >= 0, a picture of another shape, empty or
            holding NaN / Inf.

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
    tag, step, picture = _check_tag(tag), _check_step(step), _checked(picture)
    if step is None:
        step = getattr(target, "global_step", None)
    taken, array = [], None
    for logger in loggers_of(target):
        kind = _kind(logger)
        if kind is None:
            warn_no_pictures(logger)
            continue
        if array is None:  # drawn once, the same pixels for every logger ((H, W) and uint8 images included)
            array = _pixels(picture)
        _send(logger, kind, tag, array, step)
        taken.append(kind)
    return taken
