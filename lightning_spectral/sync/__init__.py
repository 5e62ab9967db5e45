"""Ranks: the one all-reduce of every sum, the one gather of rows, and the votes that check the ranks agree.

One rank back end per caller:

- **inside a Trainer** the callbacks pass the Lightning strategy (``trainer.strategy``) to
  [`all_gather_rows`][lightning_spectral.sync.all_gather_rows], so every gather of theirs (scores, gallery
  images, SPECAlign's batch) goes through Lightning, whatever its backend;
- **outside a Trainer** (the command line under torchrun, a metric's own methods such as ``top_samples`` or
  ``KernelPCAOOD.calibrate``) the same function falls back to ``torch.distributed`` on the metric's process group.

The metrics' own sync is torchmetrics': every state is a sum, all-reduced by ``dist_sync_fn`` =
[`all_reduce_sum`][lightning_spectral.sync.all_reduce_sum] on the metric's process group (torchmetrics owns that path,
inside a Trainer too), after the ranks agree on widths, sizes, frequencies and shifts (`agree_across_ranks`); a
metric's counts (``sample_count``, a plain torchmetrics metric's ``update_count``) cross ranks on that path too.
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
