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


def rate_standard_error(rate: Tensor, n: int) -> Tensor:
    """The binomial standard error ``sqrt(p (1 - p) / n)`` of a fraction ``p`` of ``n`` samples (float64): the se of
    a flagged rate at a FIXED threshold (the threshold's own noise is not in it)."""
    rate = torch.as_tensor(rate, dtype=torch.float64)
    return (rate * (1 - rate) / max(int(n), 1)).clamp_min(0).sqrt()


def threshold_standard_error(in_scores: Tensor, tpr: float = 0.95) -> Tensor:
    r"""The standard error of [`threshold_at_tpr`][lightning_spectral.functional.threshold_at_tpr], the order
    statistic $x_{(k)}$, $k = \lceil \mathrm{tpr}\, n \rceil$, in closed form: the sample quantile's
    $\sqrt{p(1-p)/n} / f(q)$ (Serfling 1980, section 2.3.3) with the density $f(q)$ read from the order statistics
    $j = \lceil\sqrt{n p (1-p)}\rceil$ ranks either side (the difference-quotient estimate of $1/f$ of
    Siddiqui 1960 and Bloch and Gastwirth 1968; clipped to the sample at the ends):

    $$\mathrm{se} = \sqrt{p(1-p)/n}\; n\, \frac{x_{(k_+)} - x_{(k_-)}}{k_+ - k_-}, \qquad
    k_\pm = \mathrm{clip}(k \pm j, 1, n).$$

    NaN with fewer than 2 scores; 0 at ``tpr = 1`` (the maximum is then taken, whose noise this form does not see)."""
    ordered = in_scores.double().flatten().sort().values
    n = ordered.numel()
    if n < 2:
        return torch.tensor(math.nan, dtype=torch.float64, device=ordered.device)
    p = check_fraction(tpr, "tpr")
    k = max(math.ceil(p * n), 1)
    j = max(math.ceil(math.sqrt(n * p * (1 - p))), 1)
    low, high = max(k - j, 1), min(k + j, n)
    spacing = (ordered[high - 1] - ordered[low - 1]) / (high - low)
    return math.sqrt(p * (1 - p) / n) * n * spacing


def score_standard_errors(scores: Tensor) -> dict[str, Tensor]:
    r"""``mean_se`` and ``std_se`` of the mean and the (population) standard deviation $s$ of scores (n,), in
    closed form: $s_1 / \sqrt{n}$ ($s_1$ with Bessel's correction) and, by the delta method on $s^2$,
    $\sqrt{(m_4 - s^4) / (4 s^2 n)}$ ($m_4$ the fourth central moment). NaN with fewer than 2 scores."""
    scores = scores.double().flatten()
    n = scores.numel()
    if n < 2:
        nan = torch.tensor(math.nan, dtype=torch.float64, device=scores.device)
        return {"mean_se": nan, "std_se": nan.clone()}
    centred = scores - scores.mean()
    variance = centred.square().mean()
    fourth = centred.pow(4).mean()
    std_se = ((fourth - variance.square()).clamp_min(0) / (4 * variance.clamp_min(1e-300) * n)).sqrt()
    return {"mean_se": scores.std() / math.sqrt(n), "std_se": std_se}


def detection_standard_errors(
    in_scores: Union[Tensor, np.ndarray, Sequence[float]],
    out_scores: Union[Tensor, np.ndarray, Sequence[float]],
    tpr: float = 0.95,
) -> dict[str, Tensor]:
    r"""Standard errors of [`detection_metrics`][lightning_spectral.functional.detection_metrics]' values, in closed
    form, for the scores of a fixed detector (the noise of the in- and out-of-distribution samples scored, not of the
    detector's fit): float64 scalars ``auroc_se``, ``fpr_se`` and ``threshold_se``.

    - ``auroc_se``: DeLong, DeLong and Clarke-Pearson (1988, Biometrics 44(3)) from the placement values
      $V_j = \hat F_{\mathrm{in}}(y_j)$ (OOD) and $W_i = 1 - \hat F_{\mathrm{out}}(x_i)$ (ties half):
      $\mathrm{se}^2 = s^2_V / n_{\mathrm{out}} + s^2_W / n_{\mathrm{in}}$.
    - ``threshold_se``: [`threshold_standard_error`][lightning_spectral.functional.threshold_standard_error].
    - ``fpr_se``: $\mathrm{fpr} = \hat F_{\mathrm{out}}(\hat q)$ moves with the OOD samples (binomial) and with the
      threshold: $\mathrm{se}^2 = \mathrm{fpr}(1 - \mathrm{fpr}) / n_{\mathrm{out}} + \big((\hat F_{\mathrm{out}}(\hat q
      + s) - \hat F_{\mathrm{out}}(\hat q - s)) / 2\big)^2$, $s$ = ``threshold_se`` (the delta method, the slope of
      $\hat F_{\mathrm{out}}$ read over $\pm s$).

    Raises: as ``detection_metrics``.
    """
    tpr = check_fraction(tpr, "tpr")
    in_scores, out_scores = _check_scores(in_scores, "in_scores"), _check_scores(out_scores, "out_scores")
    if in_scores.numel() == 0 or out_scores.numel() == 0:
        raise ValueError("detection_standard_errors: both in- and out-of-distribution scores are needed.")
    inside, outside = in_scores.sort().values, out_scores.to(in_scores.device).sort().values
    m, n = inside.numel(), outside.numel()

    def below(ordered: Tensor, values: Tensor) -> Tensor:  # the empirical CDF, ties half
        left = torch.searchsorted(ordered, values, right=False).double()
        right = torch.searchsorted(ordered, values, right=True).double()
        return (left + right) / (2 * ordered.numel())

    placements_out, placements_in = below(inside, outside), 1 - below(outside, inside)
    variance = torch.zeros((), dtype=torch.float64, device=inside.device)
    if n > 1:
        variance = variance + placements_out.var() / n
    if m > 1:
        variance = variance + placements_in.var() / m
    threshold = threshold_at_tpr(inside, tpr)
    spread = threshold_standard_error(inside, tpr)
    fpr = (outside <= threshold).double().mean()

    def accepted(at: Tensor) -> Tensor:
        return torch.searchsorted(outside, at.reshape(1), right=True).double()[0] / n

    slope = (accepted(threshold + spread) - accepted(threshold - spread)) / 2 if bool(spread.isfinite()) else spread
    return {
        "auroc_se": variance.sqrt(),
        "fpr_se": (fpr * (1 - fpr) / n + slope.square()).sqrt(),
        "threshold_se": spread,
    }


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
