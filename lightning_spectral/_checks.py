"""Input validation shared by every layer: one place for the error messages users see."""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor


def check_positive(value: float, name: str) -> float:
    """Return ``float(value)`` or raise ``ValueError`` unless it is finite and > 0."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must be a positive number, got {value!r}.") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"`{name}` must be a finite number > 0, got {value}.")
    return value


def check_positive_int(value: int, name: str) -> int:
    """Return ``value`` or raise ``ValueError`` unless it is an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"`{name}` must be an integer >= 1, got {value!r}.")
    return value


def compute_dtype(x: Tensor) -> torch.dtype:
    """The dtype features are computed in: float64 stays float64, every other float runs in float32.

    Half precision (float16 / bfloat16) is upcast to float32: cos/sin of phases and the Gram sums lose
    too much in 16 bits (the unit-norm identity would fail at ~1e-3).
    """
    return torch.float64 if x.dtype == torch.float64 else torch.float32


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
    if x.numel() and not bool(torch.isfinite(x).all()):
        bad = int((~torch.isfinite(x)).any(dim=1).sum())
        raise ValueError(f"{where}`{name}` contains NaN or Inf in {bad} of {x.shape[0]} rows; clean or drop them.")
    return x.to(compute_dtype(x))


def check_side(real: object, owner: str) -> bool:
    """The ``real`` flag of two-sample updates: True for the reference, False for the generated side."""
    if not isinstance(real, bool):
        raise TypeError(f"{owner}.update: `real` must be True (reference) or False (generated), got {real!r}.")
    return real
