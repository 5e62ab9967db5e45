"""The bandwidth rule: ``sigma = AUTO_FACTOR x`` the median pairwise distance of a subsample (``sigma="auto"``).
"""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

from lightning_spectral._checks import (
    check_features,
    check_positive,
    check_positive_int,
    check_seed,
)

#: ``sigma="auto"``: this factor times the median pairwise distance of the reference's subsample (docs/concepts.md
#: "Bandwidth"; the evidence is docs/benchmarks/dropped-modes.md "Dropped modes at the defaults").
AUTO_FACTOR = 0.5
#: ``sigma="auto"``: the rows of the subsample (the reference rows of the smallest content hashes).
AUTO_SAMPLES = 2000


def check_sigma(sigma: object, name: str = "sigma") -> Optional[float]:
    """``None`` for ``"auto"`` (fixed later from the data by the rule above), else ``float(sigma)`` > 0.

    Raises:
        ValueError: neither ``"auto"`` nor a number > 0 (``check_positive``'s message).
    """
    if isinstance(sigma, str) and sigma.strip().lower() == "auto":
        return None
    return check_positive(sigma, name)  # any other string is refused there, by name


def auto_bandwidth(x: Tensor, factor: float = AUTO_FACTOR) -> float:
    """``factor x median_bandwidth(x)`` of rows already chosen (the whole subsample): the rule of ``sigma="auto"``
    (``factor``: ``AUTO_FACTOR``, or a callback's own).

    Examples:
        >>> import torch
        >>> auto_bandwidth(torch.tensor([[0.0], [1.0], [3.0]]))
        1.0
    """
    return factor * median_bandwidth(x, max_samples=max(int(x.shape[0]), 2))


def median_bandwidth(x: Tensor, max_samples: int = 2000, seed: int = 0) -> float:
    """Median pairwise Euclidean distance of (a random subsample of) ``x``: a starting point for ``sigma``.

    This is a heuristic, not a rule from the papers (FKEA tunes sigma per dataset, FINC's rule is not fully
    specified). Scores are comparable only at one fixed sigma, embedding and sample size; smaller sigma
    splits data into more, finer modes.

    Args:
        x: samples (N, d), N >= 2.
        max_samples: subsample size (the cost is O(max_samples^2 d)).
        seed: seed of the subsample.

    Raises:
        ValueError: fewer than 2 samples, or all sampled points identical.

    Examples:
        >>> import torch
        >>> median_bandwidth(torch.tensor([[0.0], [1.0], [3.0]]))
        2.0
    """
    x = check_features(x, "x").double()
    max_samples = check_positive_int(max_samples, "max_samples")
    seed = check_seed(seed)
    if x.shape[0] < 2:
        raise ValueError(f"median_bandwidth needs at least 2 samples, got {x.shape[0]}.")
    if x.shape[0] > max_samples:
        generator = torch.Generator(device="cpu").manual_seed(seed)
        x = x[torch.randperm(x.shape[0], generator=generator)[:max_samples].to(x.device)]
    scale = float(x.abs().max())  # distances of x / scale neither overflow nor underflow (inputs near 1e300)
    median = float(torch.pdist(x / scale).median()) * scale if scale > 0 else 0.0
    if not math.isfinite(median):
        raise ValueError(
            f"median_bandwidth: the median pairwise distance {median} exceeds float64's range; rescale the inputs."
        )
    if median <= 0:
        raise ValueError("median_bandwidth: the median pairwise distance is 0 (most samples are identical).")
    return median
