"""Scores of an out-of-distribution detector: the threshold at a true-positive rate, and AUROC / FPR@95.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Union

import numpy as np
import torch
from torch import Tensor
from torchmetrics.functional.classification import binary_auroc

from lightning_spectral._checks import (
    as_tensor,
    check_dense,
    check_fraction,
)


def threshold_at_tpr(in_scores: Tensor, tpr: float = 0.95) -> Tensor:
    """The ``ceil(tpr * n)``-th smallest in-distribution score: accepting ``score <= threshold`` keeps at least
    a fraction ``tpr`` of in-distribution samples (ties at the threshold are accepted)."""
    ordered = in_scores.double().flatten().sort().values
    return ordered[max(math.ceil(tpr * ordered.numel()) - 1, 0)]


def detection_metrics(
    in_scores: Union[Tensor, np.ndarray, Sequence[float]],
    out_scores: Union[Tensor, np.ndarray, Sequence[float]],
    tpr: float = 0.95,
) -> dict[str, Tensor]:
    """AUROC and FPR at ``tpr`` TPR for scores where higher = more out-of-distribution.

    Scores are 1-D: tensors, NumPy arrays or lists of numbers (``+-inf`` allowed, NaN refused).

    - ``auroc``: torchmetrics' binary AUROC with OOD as the positive class (equal to the paper's AUROC with
      in-distribution positive and score ``-e``).
    - ``fpr``: the fraction of OOD samples accepted (``score <= threshold``) at the threshold
      [`threshold_at_tpr`][lightning_spectral.functional.threshold_at_tpr] that keeps ``tpr`` of in-distribution samples. One
      convention: the first
      threshold with TPR >= tpr; ties count as accepted.

    Examples:
        >>> import torch
        >>> metrics = detection_metrics(torch.tensor([0.1, 0.2, 0.3]), torch.tensor([0.5, 0.9]))
        >>> float(metrics["auroc"]), float(metrics["fpr"])
        (1.0, 0.0)

    Raises:
        TypeError: scores that are not numbers.
        ValueError: ``tpr`` outside (0, 1]; scores that are not 1-D, hold NaN, or an empty side.
    """
    tpr = check_fraction(tpr, "tpr")
    in_scores, out_scores = _check_scores(in_scores, "in_scores"), _check_scores(out_scores, "out_scores")
    if in_scores.numel() == 0 or out_scores.numel() == 0:
        raise ValueError("detection_metrics: both in- and out-of-distribution scores are needed.")
    preds = torch.cat([in_scores, out_scores.to(in_scores.device)])
    target = torch.cat([torch.zeros(in_scores.numel()), torch.ones(out_scores.numel())]).long().to(preds.device)
    threshold = threshold_at_tpr(in_scores, tpr)
    return {
        "auroc": binary_auroc(preds, target),
        "fpr": (out_scores.to(preds.device) <= threshold).double().mean(),
        "threshold": threshold,
    }


def _check_scores(scores: Any, name: str) -> Tensor:
    """Scores as a 1-D float64 tensor without NaN (a tensor, a NumPy array or a list of numbers; +-inf allowed).

    Raises:
        TypeError: not numbers, or a sparse / meta tensor.
        ValueError: not one score per sample (1-D), or NaN scores.
    """
    scores = as_tensor(scores, name, "detection_metrics")
    if not isinstance(scores, Tensor):
        raise TypeError(
            f"detection_metrics: `{name}` must be a 1-D tensor (or array, list) of scores, got {type(scores).__name__}."
        )
    check_dense(scores, name, "detection_metrics")
    if scores.ndim != 1 or scores.is_complex():
        raise ValueError(
            f"detection_metrics: `{name}` must be a 1-D tensor of real scores, one per sample, got shape "
            f"{tuple(scores.shape)} ({scores.dtype}); flatten it or pass the score column."
        )
    scores = scores.double()
    if bool(scores.isnan().any()):
        raise ValueError(
            f"detection_metrics: `{name}` holds {int(scores.isnan().sum())} NaN scores of {scores.numel()}; a NaN "
            "has no rank, so AUROC and FPR would be meaningless. Drop those samples or fix what produced them."
        )
    return scores
