"""What ranks agree on before a metric's sums are all-reduced: input widths, state sizes, frequencies, shifts.

Every state of a [`SpectralMetric`][lightning_spectral.metrics.SpectralMetric] is a sum, so torchmetrics can all-reduce
it as it is, provided every rank holds a state of the same size, built from the same random frequencies, around
the same shift. `agree_across_ranks` makes that so (or raises on every rank, never leaving one waiting in a
collective):

1. a rank that saw no sample builds its feature map from the other ranks' input width (it then adds zeros);
2. the state sizes and the frequencies' fingerprints must match (another ``seed``, ``sigma`` or ``n_frequencies``
   on one rank raises everywhere);
3. centred accumulators move their sums to one shift, the count-weighted mean of the ranks' shifts
   ([`rebase`][lightning_spectral.metrics.Accumulator.rebase], exact algebra).
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from lightning_spectral.sync.collectives import all_gather_rows
from lightning_spectral.sync.fingerprints import disagreeing_ranks, fingerprint


def frequency_fingerprint(metric: Any) -> Optional[Tensor]:
    """A small summary of what every rank must hold identically (the map's frequencies), or ``None``."""
    signature = metric.feature_map.frequencies()
    return None if signature is None else fingerprint(signature)


def _widths(in_features: Any) -> list[float]:
    """An input width as a pair of numbers (0 for none; a paired metric has two widths)."""
    if in_features is None:
        return [0.0, 0.0]
    widths = list(in_features) if isinstance(in_features, (tuple, list)) else [in_features, 0]
    return [float(width) for width in widths]


def agree_across_ranks(metric: Any, group: Optional[Any] = None) -> None:
    """Every rank votes, all decide alike: widths, then state sizes and frequencies, then shifts (module doc).

    Raises:
        RuntimeError: on every rank, when ranks were built or fed differently (the message names the fix).
    """
    owner = type(metric).__name__
    widths = all_gather_rows(torch.tensor([_widths(metric.in_features)], dtype=torch.float64), group)
    seen = widths[widths[:, 0] > 0]
    if seen.shape[0] and bool((seen != seen[0]).any()):
        raise RuntimeError(
            f"{owner}: ranks saw inputs of different widths {sorted(set(map(tuple, seen.long().tolist())))}; "
            "every rank must feed embeddings of the same encoder(s)."
        )
    if metric.in_features is None and seen.shape[0]:  # this rank saw no sample: it joins with zeros
        first = [int(width) for width in seen[0].tolist()]
        metric._build(tuple(first) if first[1] > 0 else first[0])  # a pair for paired / conditional metrics
    sizes = torch.tensor([float(acc.state.numel()) for acc in metric.accumulators.values()], dtype=torch.float64)
    if disagreeing_ranks(sizes, group):
        raise RuntimeError(
            f"{owner}: the metric's states have different sizes on different ranks: every rank must build it with "
            "the same `n_frequencies`, `sigma` (number of bandwidths) and settings."
        )
    if disagreeing_ranks(metric.feature_map.frequencies(), group):
        raise RuntimeError(
            f"{owner}: random Fourier frequencies differ across ranks. Every rank must build the metric with the "
            "same `seed`, `sigma`, `n_frequencies` and input width."
        )
    for accumulator in metric.accumulators.values():
        if accumulator.centre and accumulator.width is not None:
            count = accumulator.count.reshape(1)
            shift = accumulator.shift if accumulator.shift is not None else torch.zeros(
                *accumulator._lead, accumulator.width, dtype=torch.float64, device=count.device
            )
            total = all_gather_rows(torch.cat([shift.reshape(-1) * count, count])[None], group).sum(0)
            agreed = total[:-1] / total[-1].clamp_min(1.0)
            accumulator.rebase(agreed.reshape(shift.shape).to(shift.device))
