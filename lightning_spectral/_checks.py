"""Input validation shared by every layer: one place for the error messages users see."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Optional

import torch
from torch import Tensor


def check_positive(value: float, name: str) -> float:
    """Return ``float(value)`` or raise ``ValueError`` unless it is a finite number > 0 (not a bool)."""
    try:
        if isinstance(value, bool):
            raise TypeError
        value = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must be a positive number, got {value!r}.") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"`{name}` must be a finite number > 0, got {value}.")
    return value


#: Fraction of the machine's memory a metric's sums may take before construction refuses (they must also fit
#: a copy for the all-reduce and the eigendecomposition's workspace).
MEMORY_FRACTION = 0.5


def total_memory_bytes() -> int:
    """Physical memory of this machine in bytes (0 when unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def check_memory(owner: str, argument: str, value: object, needed: int, what: str) -> None:
    """Raise before allocating ``needed`` bytes (``what``) when they exceed half of this machine's memory.

    Raises:
        ValueError: naming ``argument`` (whose ``value`` asks for the memory) and the amount.
    """
    available = total_memory_bytes()
    if available and needed > MEMORY_FRACTION * available:
        raise ValueError(
            f"{owner}: `{argument}`={value} needs {needed / 2**30:.1f} GiB ({what}), more than half of this "
            f"machine's {available / 2**30:.1f} GiB; use a smaller `{argument}` (2r = 4096 to 16384 is typical)."
        )


def check_state_memory(owner: str, n_frequencies: int, matrices: int, vectors: int = 0) -> None:
    """Raise before allocating ``matrices`` float64 (2r)^2 sums and ``vectors`` 2r ones that cannot fit in memory."""
    width = 2 * n_frequencies
    needed = 8 * (matrices * width * width + vectors * width)
    check_memory(owner, "n_frequencies", n_frequencies, needed, f"{matrices} float64 matrices of {width} x {width}")


def check_positive_int(value: int, name: str) -> int:
    """Return ``int(value)`` or raise ``ValueError`` unless it is an integer >= 1 (NumPy integers are fine)."""
    if isinstance(value, bool) or not hasattr(value, "__index__") or value.__index__() < 1:
        raise ValueError(f"`{name}` must be an integer >= 1, got {value!r}.")
    return int(value.__index__())


def check_int_range(value: int, name: str, low: int, high: int, what: str = "") -> int:
    """Return ``int(value)`` or raise ``ValueError`` unless it is an integer (not a bool, not a float) in
    ``[low, high]``; ``what`` says what the argument is for."""
    from numbers import Integral

    if isinstance(value, bool) or not isinstance(value, Integral) or not low <= int(value) <= high:
        extra = f" ({what})" if what else ""
        raise ValueError(f"`{name}` must be an integer in [{low}, {high}]{extra}, got {value!r}.")
    return int(value)


def compute_dtype(x: Tensor) -> torch.dtype:
    """The dtype features are computed in: float64 stays float64, every other float runs in float32.

    Half precision (float16 / bfloat16) is upcast to float32: cos/sin of phases and the Gram sums lose
    too much in 16 bits (the unit-norm identity would fail at ~1e-3).
    """
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def all_finite(x: Tensor) -> bool:
    """Whether every entry of ``x`` is finite: one sum in the common case instead of three elementwise passes.

    A NaN or an Inf anywhere makes the sum NaN or Inf; a finite sum therefore proves every entry finite, and
    only a non-finite sum (possibly an overflow of finite entries) needs the elementwise check.
    """
    if x.numel() == 0 or bool(torch.isfinite(x.sum())):
        return True
    return bool(torch.isfinite(x).all())


def check_features(x: Tensor, name: str = "features", width: Optional[int] = None, owner: str = "") -> Tensor:
    """Validate an embedding batch of shape (N, d) and return it in its compute dtype.

    Raises:
        TypeError: if ``x`` is not a floating-point tensor.
        ValueError: wrong rank, wrong width, or NaN / Inf entries.
    """
    where = f"{owner}: " if owner else ""
    if not isinstance(x, Tensor):
        raise TypeError(f"{where}`{name}` must be a torch.Tensor of shape (N, d), got {type(x).__name__}.")
    if not x.is_floating_point():
        raise TypeError(
            f"{where}`{name}` must be floating point, got {x.dtype}; convert it first, e.g. `{name}.float()`."
        )
    if x.ndim != 2:
        raise ValueError(
            f"{where}`{name}` must have shape (N, d), got {tuple(x.shape)}; "
            "flatten per-sample dimensions with `x.flatten(1)` (or `x[None]` for one sample)."
        )
    if width is not None and x.shape[1] != width:
        raise ValueError(
            f"{where}`{name}` has width {x.shape[1]} but {width} was expected "
            "(the feature map was built for that width; all batches must share it)."
        )
    if not all_finite(x):
        bad = int((~torch.isfinite(x)).any(dim=1).sum())
        raise ValueError(f"{where}`{name}` contains NaN or Inf in {bad} of {x.shape[0]} rows; clean or drop them.")
    return x.to(compute_dtype(x))


def check_side(real: object, owner: str) -> bool:
    """The ``real`` flag of two-sample updates: True for the reference, False for the generated side."""
    if not isinstance(real, bool):
        raise TypeError(f"{owner}.update: `real` must be True (reference) or False (generated), got {real!r}.")
    return real


def check_fraction(value: float, name: str, low_open: bool = True, high_closed: bool = True) -> float:
    """Return ``float(value)`` or raise ``ValueError`` unless it lies in (0, 1] (the bounds as the flags say).

    ``low_open=False`` admits 0 and ``high_closed=False`` excludes 1: e.g. a validation share in [0, 1).
    """
    interval = ("(" if low_open else "[") + "0, 1" + ("]" if high_closed else ")")
    try:
        if isinstance(value, bool):
            raise TypeError
        value = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must be a number in {interval}, got {value!r}.") from None
    above = value > 0 if low_open else value >= 0
    below = value <= 1 if high_closed else value < 1
    if not (above and below):  # NaN fails both
        raise ValueError(f"`{name}` must be in {interval}, got {value}.")
    return value


def check_order(value: object, name: str = "alpha") -> float:
    """Return a Renyi / Vendi order as a float in (0, inf], or raise ``ValueError`` naming ``name``.

    Numbers (Python or NumPy) in (0, inf], ``math.inf`` and the strings ``"inf"`` / ``"infinity"`` are orders;
    bools are not (``True`` would silently be order 1).

    Examples:
        >>> check_order(2), check_order("inf")
        (2.0, inf)
    """
    if isinstance(value, str):
        if value.lower() not in ("inf", "infinity"):
            raise ValueError(f"`{name}` must be a number in (0, inf] or 'inf', got {value!r}.")
        return math.inf
    if isinstance(value, bool):
        raise ValueError(f"`{name}` must be an order in (0, inf], not a bool (got {value}); e.g. {name}=1 or 2.")
    try:
        order = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must be a number in (0, inf] or 'inf', got {value!r}.") from None
    if not order > 0:  # NaN fails too
        raise ValueError(f"`{name}` must be in (0, inf], got {order}.")
    return order


def check_bool(value: bool, name: str) -> bool:
    """Return ``value`` or raise ``TypeError`` unless it is ``True`` or ``False`` (the string "false" is truthy)."""
    if not isinstance(value, bool):
        raise TypeError(f"`{name}` must be True or False, got {value!r}.")
    return value


def check_seed(value: int, name: str = "seed") -> int:
    """Return ``int(value)`` or raise ``ValueError`` unless it is an integer (Python or NumPy) in the range a
    ``torch.Generator`` accepts."""
    from numbers import Integral

    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ValueError(f"`{name}` must be an integer, got {value!r}.")
    value = int(value)
    if not -(2**63) <= value < 2**64:
        raise ValueError(f"`{name}` must be an integer in [-2**63, 2**64) (torch.Generator's range), got {value}.")
    return value


def check_nonnegative_int(value: int, name: str) -> int:
    """Return ``int(value)`` or raise ``ValueError`` unless it is an integer >= 0 (e.g. ``num_workers``)."""
    from numbers import Integral

    if isinstance(value, bool) or not isinstance(value, Integral) or value < 0:
        raise ValueError(f"`{name}` must be an integer >= 0, got {value!r}.")
    return int(value)


def check_normalisation(
    mean: Optional[tuple[float, ...]],
    std: Optional[tuple[float, ...]],
    names: tuple[str, str] = ("mean", "std"),
    channels: tuple[int, ...] = (3,),
) -> None:
    """Per-channel image normalisation: ``mean`` and ``std`` (sequences) both given or both ``None``, each
    ``channels`` finite numbers, ``std > 0``; ``names`` are the two arguments as the caller calls them.

    Raises:
        ValueError: naming the argument at fault.
    """
    mean_name, std_name = names
    if (mean is None) != (std is None):
        raise ValueError(f"Pass both `{mean_name}` and `{std_name}` (per-channel normalisation), or neither.")
    if mean is None or std is None:
        return
    counts = " or ".join(map(str, channels))
    for values, name in ((mean, mean_name), (std, std_name)):
        try:
            floats = [float(v) for v in values]
        except (TypeError, ValueError):
            floats = []
        if len(floats) not in channels or not all(map(math.isfinite, floats)):
            raise ValueError(f"`{name}` must be {counts} finite numbers (per channel), got {values!r}.")
    if any(float(s) <= 0 for s in std):
        raise ValueError(f"`{std_name}` must be > 0 in every channel, got {std!r}.")


def check_image_batch(
    images: object, name: str = "images", channels: Sequence[int] = (1, 3), owner: str = ""
) -> Tensor:
    """Validate a float batch of images (N, C, H, W) in [0, 1] with C in ``channels``; return it as float32.

    Raises:
        TypeError: not a tensor, or not floating point.
        ValueError: no batch dimension or another rank, a channel count outside ``channels``, an empty image,
            NaN / Inf, values outside [0, 1]; the message names ``name`` and the fix.
    """
    where = f"{owner}: " if owner else ""
    if not isinstance(images, Tensor):
        raise TypeError(f"{where}`{name}` must be a tensor of images (N, C, H, W), got {type(images).__name__}.")
    if images.ndim == 3:
        raise ValueError(
            f"{where}`{name}` has shape {tuple(images.shape)}: one image without a batch dimension? Pass a batch "
            f"(N, C, H, W), e.g. `{name}[None]` for a single image."
        )
    if images.ndim != 4:
        raise ValueError(f"{where}`{name}` must be a batch of images (N, C, H, W), got shape {tuple(images.shape)}.")
    if not images.is_floating_point():
        raise TypeError(
            f"{where}`{name}` has dtype {images.dtype}; it takes float images in [0, 1]: convert uint8 images with "
            f"`{name}.float() / 255`."
        )
    if images.shape[1] not in channels:
        allowed = " or ".join(map(str, channels))
        hint = f"drop the alpha channel with `{name}[:, :3]`" if images.shape[1] == 4 else (
            "put the channels first, (N, C, H, W)" if images.shape[-1] in channels else "convert them to grey or RGB"
        )
        raise ValueError(
            f"{where}`{name}` has {images.shape[1]} channels (shape {tuple(images.shape)}), but it takes {allowed}; "
            f"{hint}."
        )
    if images.shape[-1] == 0 or images.shape[-2] == 0:
        raise ValueError(f"{where}`{name}` has empty images (shape {tuple(images.shape)}).")
    if not all_finite(images):
        raise ValueError(f"{where}`{name}` contains NaN or Inf; clean the images first.")
    if images.numel() and (float(images.min()) < -1e-6 or float(images.max()) > 1 + 1e-6):
        raise ValueError(
            f"{where}`{name}` has values in [{float(images.min()):.3g}, {float(images.max()):.3g}]; it takes images in "
            "[0, 1]: map [-1, 1] outputs with `(x + 1) / 2` and divide 0-255 values by 255."
        )
    return images.float()
