"""Ranks: the one all-reduce of every sum, the one gather of rows, and the votes that check the ranks agree.

Inside a Trainer the callbacks reach the ranks through the Lightning strategy; these functions are the fallback
for code outside a Trainer (the metrics' torchmetrics sync, the command line under torchrun).
"""

from lightning_spectral.sync.agreement import agree_across_ranks, frequency_fingerprint
from lightning_spectral.sync.collectives import (
    all_gather_rows,
    all_reduce_max,
    all_reduce_sum,
    collective_device,
    distributed_available,
)
from lightning_spectral.sync.fingerprints import disagreeing_ranks, fingerprint

__all__ = [
    "agree_across_ranks",
    "all_gather_rows",
    "all_reduce_max",
    "all_reduce_sum",
    "collective_device",
    "disagreeing_ranks",
    "distributed_available",
    "fingerprint",
    "frequency_fingerprint",
]
