"""``sigma="auto"``: the bandwidth fixed from the reference rows of every rank, the same under any order or sharding.

The rule ([`auto_bandwidth`][lightning_spectral.kernels.auto_bandwidth]): ``sigma = AUTO_FACTOR x`` the median
pairwise distance of the ``AUTO_SAMPLES`` reference rows of smallest content hash
([`content_hash`][lightning_spectral.functional.content_hash]). The rows are chosen by their values alone (a bottom-k
sketch: each rank keeps its own smallest hashes, the ranks gather them and keep the smallest again), so any order,
batching or sharding of the same reference picks the same rows, and every rank computes the same sigma.

A metric built with ``sigma="auto"`` holds its rows unmapped until its first read (``compute``, ``summary``, a sync,
a checkpoint) or an explicit [`fit_bandwidth`][lightning_spectral.metrics.SpectralMetric.fit_bandwidth]; then it fixes
sigma from the reference rows it holds (all rows for a one-sample metric), maps the held rows and keeps that sigma
for the rest of its life (``reset`` keeps it, so epochs stay comparable).
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from lightning_spectral.functional.content_groups import content_hash
from lightning_spectral.kernels.bandwidth import AUTO_FACTOR, AUTO_SAMPLES, auto_bandwidth
from lightning_spectral.sync.collectives import all_gather_rows, all_reduce_max, distributed_available


def smallest_hashes(rows: Tensor, k: int = AUTO_SAMPLES) -> Tensor:
    """The (at most ``k``) rows of ``rows`` (N, d) with the smallest content hashes, in hash order."""
    if rows.shape[0] == 0:
        return rows
    order = content_hash(rows).argsort(stable=True)
    return rows[order[:k]]


def reference_bandwidth(
    rows: Tensor, owner: str, group: Optional[Any] = None, factor: float = AUTO_FACTOR
) -> float:
    """``sigma`` of the rule above (``factor`` x the median distance) from this rank's reference rows (N, d) and,
    under DDP, every rank's (a collective: every rank calls it, with its own rows, possibly none).

    Raises:
        RuntimeError: fewer than 2 reference rows on all ranks together.
    """
    sketch = smallest_hashes(rows.detach().double())
    if distributed_available():
        width = int(all_reduce_max(float(rows.shape[1]) if rows.numel() or rows.ndim == 2 else 0.0, group))
        if sketch.shape[0] == 0:
            sketch = torch.zeros(0, width, dtype=torch.float64, device=rows.device)
        sketch = smallest_hashes(all_gather_rows(sketch, group))
    if sketch.shape[0] < 2:
        raise RuntimeError(
            f"{owner}(sigma='auto') fixes sigma from the reference rows held before its first read, and it holds "
            f"{sketch.shape[0]} (on all ranks): feed the reference first (`update(x, real=True)`), or pass a number."
        )
    return auto_bandwidth(sketch, factor)
