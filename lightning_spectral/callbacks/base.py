"""The base of the callbacks that read a LightningModule's embeddings: one lifecycle, written once.

:class:`EmbeddingCallback` owns what every such callback needs:

- the capture lifecycle of an :class:`~lightning_spectral.callbacks.embeddings.EmbeddingSource`: the hook is
  attached at ``setup`` and removed at ``teardown``; each train / validation batch starts with an empty
  capture, and :meth:`~EmbeddingCallback.batch_embedding` returns what the step computed (or embeds the batch);
- extra loaders (a reference set, OOD sets, a fit set): :meth:`~EmbeddingCallback.embed_loader` streams this
  rank's share, sharded by sample through Lightning's ``UnrepeatedDistributedSampler`` (no sample repeated);
- gathering rows from all ranks and logging values that are already global;
- arguments that name a datamodule attribute (``"train_dataloader_for_eval"``, ``"image_of"``), resolved at
  ``setup``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Optional, Union

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor
from torch.utils.data import DataLoader, IterableDataset
from typing_extensions import override

from lightning_spectral.callbacks.embeddings import BatchSelector, EmbeddingFn, EmbeddingSource, to_device
from lightning_spectral.distributed import all_gather_rows


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


@contextmanager
def outside_inference_mode() -> Iterator[None]:
    """Lightning validates under ``torch.inference_mode``; sums a callback keeps across epochs must stay ordinary
    tensors (an inference tensor cannot be updated in place by a later training step)."""
    with torch.inference_mode(False), torch.no_grad():
        yield


class EmbeddingCallback(Callback):
    """A Lightning callback that reads embeddings of the module it is attached to.

    Args:
        embedding: dotted name of the submodule whose output is the embedding (captured by a forward hook
            during the module's own steps, so no extra forward pass), or ``fn(pl_module, batch) -> Tensor``;
            ``None`` for a callback that needs no embedding of the module.
        batch_input: what to feed the submodule when the callback embeds a batch itself (see
            :func:`~lightning_spectral.callbacks.embeddings.select`).
        owner: the callback's name in error messages.
    """

    def __init__(
        self, embedding: Union[str, EmbeddingFn, None], batch_input: BatchSelector = None, owner: str = ""
    ) -> None:
        super().__init__()
        self.owner = owner or type(self).__name__
        self.source = None if embedding is None else EmbeddingSource(embedding, batch_input, owner=self.owner)
        self._warned: set[str] = set()

    def _identity(self) -> str:
        """A label of the embedding for ``state_key``."""
        if self.source is None:
            return ""
        source = self.source.source
        return source if isinstance(source, str) else getattr(source, "__qualname__", repr(source))

    # ---- lifecycle ---------------------------------------------------------------------------------------------
    @override
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.source is not None:
            self.source.attach(pl_module)

    @override
    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.source is not None:
            self.source.detach()

    @override
    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int) -> None:
        if self.source is not None:
            self.source.clear()

    @override
    def on_validation_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self.source is not None:
            self.source.clear()

    # ---- embeddings --------------------------------------------------------------------------------------------
    def batch_embedding(self, pl_module: L.LightningModule, batch: Any) -> Tensor:
        """The embedding (N, d) of the current step's batch: captured during the step, or computed now."""
        assert self.source is not None
        return self.source.captured_or_embed(pl_module, batch)

    def embed_loader(
        self, loader: Iterable, trainer: L.Trainer, pl_module: L.LightningModule
    ) -> Iterator[tuple[Tensor, Any]]:
        """``(embeddings (N, d), batch)`` for this rank's share of ``loader`` (see :func:`shard_loader`), computed
        without gradients under the module's current mode."""
        assert self.source is not None
        for batch in shard_loader(loader, trainer.global_rank, trainer.world_size):
            batch = to_device(batch, pl_module.device)
            with torch.no_grad():
                yield self.source.embed(pl_module, batch).detach(), batch

    # ---- across ranks, logging, arguments ----------------------------------------------------------------------
    @staticmethod
    def gather(rows: Tensor) -> Tensor:
        """All ranks' rows (N_rank, ...) concatenated in rank order (the rows themselves outside DDP)."""
        return all_gather_rows(rows)

    def log_values(self, pl_module: L.LightningModule, values: Mapping[str, float], prefix: str = "") -> None:
        """Log values that are already global (computed from all-reduced sums or gathered rows): no further sync."""
        for name, value in values.items():
            pl_module.log(prefix + name, float(value), sync_dist=False, rank_zero_only=False)

    def resolve(self, trainer: L.Trainer, value: Any, argument: str, call: bool = False) -> Any:
        """``value``, or the datamodule attribute it names (called when ``call``), e.g. a loader method.

        Raises:
            ValueError: no datamodule, or it has no such attribute; the message names ``argument``.
        """
        if not isinstance(value, str):
            return value
        datamodule = getattr(trainer, "datamodule", None)
        if datamodule is None or not hasattr(datamodule, value):
            where = "the trainer has no datamodule" if datamodule is None else f"{type(datamodule).__name__} has none"
            raise ValueError(
                f"{self.owner}: `{argument}`={value!r} names an attribute of the trainer's datamodule, but {where}; "
                "pass the object itself (e.g. a DataLoader) or the name of a datamodule method."
            )
        attribute = getattr(datamodule, value)
        return attribute() if call else attribute

    def warn_once(self, key: str, message: str, category: Optional[type] = None) -> None:
        """``rank_zero_warn(message)`` the first time ``key`` is seen."""
        if key not in self._warned:
            self._warned.add(key)
            rank_zero_warn(message, category=category or UserWarning)
