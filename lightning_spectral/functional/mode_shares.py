"""A mode's share of its side's samples, from its eigenvalue and the scores of its top samples, and the line a
person reads about a mode.

An eigenvalue is a share times a similarity (FINC section 3): a cluster holding a fraction ``p`` of a side's
samples, with mean feature ``m`` and within-mode similarity ``s = ||m||^2``, has eigenvector ``v = m / ||m||`` and
eigenvalue ``p s`` (``(p_x - rho p_y) s`` for a mode of ``C_x - rho C_y``). A member ``x`` scores
``u(x) = sqrt(r) v . phi(x)``, about ``sqrt(r s)``, so the scores of the mode's top samples (the streamed top-sample
pass) give ``s ~ (median top score)^2 / r`` and::

    share = eigenvalue / s = eigenvalue x r / (median top score)^2        (clamped to [0, 1])

the fraction of the side's samples the mode holds (in excess of ``rho`` times the other side's, for FINC: "about
10 % of the reference" for a class of 10 % that the generated side lacks). The top samples are the mode's most
typical members, so ``s`` is over-estimated and the share is an under-estimate, by up to half for diffuse
clusters (0.08 for a class of 0.18 of width sigma / 2 in 6 dimensions; ``tests/test_mode_shares.py``
counts it against the truth on a mixture).
"""

from __future__ import annotations

from typing import Optional, Sequence

from torch import Tensor


def mode_share(eigenvalue: float, top_scores: Tensor, n_frequencies: int) -> float:
    """A mode's share of its side's samples from its ``eigenvalue`` and its top samples' scores ``u`` (module doc).

    Examples:
        >>> import torch
        >>> mode_share(0.05, torch.tensor([16.0, 16.0]), 256)   # s = 16^2 / 256 = 1
        0.05
    """
    if top_scores.numel() == 0:
        return 0.0
    typical = float(top_scores.double().median())
    if typical <= 0:
        return 0.0
    return min(max(float(eigenvalue) * n_frequencies / typical**2, 0.0), 1.0)


def mode_line(
    kind: str, index: int, share: float, side: str, labels: Optional[Sequence[object]] = None
) -> str:
    """``"missing mode 1: class 7 (19 of its top 20), about 10 % of the reference"``.

    Args:
        kind: ``"missing"``, ``"novel"`` or ``""`` (a side's own mode).
        index: the mode's rank, from 0.
        share: its share of ``side``'s samples.
        side: ``"reference"`` or ``"generated samples"``.
        labels: the known labels of its top samples (best first), or ``None``.

    Examples:
        >>> mode_line("missing", 0, 0.1, "reference", [7] * 19 + [1])
        'missing mode 1: class 7 (19 of its top 20), about 10 % of the reference'
        >>> mode_line("novel", 1, 0.052, "generated samples")
        'novel mode 2: about 5 % of the generated samples'
    """
    name = f"{kind} mode {index + 1}" if kind else f"mode {index + 1}"
    about = f"about {100 * share:.0f} % of the {side}" if share >= 0.01 else f"under 1 % of the {side}"
    if not labels:
        return f"{name}: {about}"
    dominant, count = dominant_label(labels)
    return f"{name}: class {dominant} ({count} of its top {len(labels)}), {about}"


def dominant_label(labels: Sequence[object]) -> tuple[object, int]:
    """The most common label and how many times it occurs (ties: the first seen)."""
    counts: dict[object, int] = {}
    for label in labels:
        key = label.item() if isinstance(label, Tensor) else label
        counts[key] = counts.get(key, 0) + 1
    best = max(counts, key=lambda key: counts[key])
    return best, counts[best]
