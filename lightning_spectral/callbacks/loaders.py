"""Evaluation loaders under DDP: each rank streams its share of the samples, none repeated."""

from __future__ import annotations

from collections.abc import Iterable

from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
from torch.utils.data import DataLoader, IterableDataset


def shard_loader(loader: Iterable, rank: int, world_size: int) -> Iterable:
    """This rank's share of an evaluation loader: samples ``rank, rank + W, ...`` of its dataset.

    A ``DataLoader`` over a sized map-style dataset is rebuilt with Lightning's ``UnrepeatedDistributedSampler``
    (``torch``'s ``DistributedSampler`` pads with repeated samples, which would count them twice). Anything else
    (an iterable dataset, a custom batch sampler, a plain iterable) is shared by batch: rank ``r`` keeps batches
    ``r, r + W, ...`` of its own pass over the loader.
    """
    if world_size == 1:
        return loader
    rebuildable = (
        isinstance(loader, DataLoader)
        and not isinstance(loader.dataset, IterableDataset)
        and hasattr(loader.dataset, "__len__")
        and loader.batch_size is not None
        and len(loader.dataset) >= world_size  # type: ignore[arg-type]
    )
    if not rebuildable:
        return (batch for index, batch in enumerate(loader) if index % world_size == rank)
    sampler = UnrepeatedDistributedSampler(loader.dataset, num_replicas=world_size, rank=rank, shuffle=False)
    return DataLoader(
        loader.dataset,
        batch_size=loader.batch_size,
        sampler=sampler,
        num_workers=loader.num_workers,
        collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory,
        timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn,
        persistent_workers=loader.persistent_workers,
    )
