"""The base of the callbacks that read a LightningModule's embeddings: one lifecycle, written once.

[`EmbeddingCallback`][lightning_spectral.callbacks.EmbeddingCallback] owns what every such callback needs:

- the capture lifecycle of an [`EmbeddingSource`][lightning_spectral.callbacks.EmbeddingSource]: the hook is
  attached at ``setup`` and removed at ``teardown``; each train / validation batch starts with an empty
  capture, and [`batch_embedding`][lightning_spectral.callbacks.EmbeddingCallback.batch_embedding] returns what the step
  computed (or embeds the batch);
- extra loaders (a reference set, OOD sets, a fit set):
  [`embed_loader`][lightning_spectral.callbacks.EmbeddingCallback.embed_loader] streams this
  rank's share ([`shard_loader`][lightning_spectral.callbacks.shard_loader]);
- the ranks, through the Lightning strategy: [`gather`][lightning_spectral.callbacks.EmbeddingCallback.gather] (rows of
  every rank, [`all_gather_rows`][lightning_spectral.sync.all_gather_rows]) and
  [`any_rank`][lightning_spectral.callbacks.EmbeddingCallback.any_rank] (a decision every rank takes alike);
- the checkpoint Lightning resumes from, checked before it is read: a cut-off file is refused by name
  ([`CheckedCheckpointIO`][lightning_spectral.callbacks.CheckedCheckpointIO], installed at ``setup``);
- arguments that name a datamodule attribute (``"train_dataloader_for_eval"``, ``"image_of"``), resolved at
  ``setup``.

A metric's epoch-end report (values, galleries, spectrum, reset) is
[`report`][lightning_spectral.callbacks.report.report].
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Optional, Union

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor
from typing_extensions import override

from lightning_spectral.callbacks.checkpoint_guard import guard_checkpoint_loading, release_checkpoint_loading
from lightning_spectral.callbacks.embeddings import BatchSelector, EmbeddingFn, EmbeddingSource, to_device
from lightning_spectral.callbacks.loaders import shard_loader
from lightning_spectral.sync.collectives import all_gather_rows


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
            `select`).
        owner: the callback's name in error messages.
    """

    def __init__(
        self, embedding: Union[str, EmbeddingFn, None], batch_input: BatchSelector = None, owner: str = ""
    ) -> None:
        super().__init__()
        self.owner = owner or type(self).__name__
        self.source = None if embedding is None else EmbeddingSource(embedding, batch_input, owner=self.owner)
        self._warned: set[str] = set()
        self.last_galleries: dict[str, Any] = {}  # "{metric}/{gallery}": ModeImages of the last report
        self._guarding = False  # whether `setup` wrapped the strategy's checkpoint plugin

    def _identity(self) -> str:
        """A label of the embedding for ``state_key``."""
        if self.source is None:
            return ""
        source = self.source.source
        return source if isinstance(source, str) else getattr(source, "__qualname__", repr(source))

    # ---- lifecycle ---------------------------------------------------------------------------------------------
    @override
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        # Lightning loads `ckpt_path` after `setup`: a cut-off file is refused by name (`checkpoint_guard`)
        self._guarding = guard_checkpoint_loading(trainer) or self._guarding
        if self.source is not None:
            self.source.attach(pl_module)

    @override
    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self._guarding:
            release_checkpoint_loading(trainer)
            self._guarding = False
        if self.source is not None:
            self.source.detach()

    @override
    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        # Lightning calls `on_exception` but no `teardown` when a run fails: put the checkpoint plugin back
        if self._guarding:
            release_checkpoint_loading(trainer)
            self._guarding = False

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
        """``(embeddings (N, d), batch)`` for this rank's share of ``loader`` (see
        [`shard_loader`][lightning_spectral.callbacks.shard_loader]), computed
        without gradients under the module's current mode."""
        assert self.source is not None
        for batch in shard_loader(loader, trainer.global_rank, trainer.world_size):
            batch = to_device(batch, pl_module.device)
            with torch.no_grad():
                yield self.source.embed(pl_module, batch).detach(), batch

    # ---- across ranks, arguments -------------------------------------------------------------------------------
    @staticmethod
    def gather(trainer: L.Trainer, rows: Tensor, sync_grads: bool = False) -> Tensor:
        """All ranks' rows (N_rank, ...) concatenated in rank order, through the trainer's strategy (ranks may hold
        different N, even 0; [`all_gather_rows`][lightning_spectral.sync.all_gather_rows]). With ``sync_grads`` each
        rank's slice sends its gradient back to it."""
        return all_gather_rows(rows, sync_grads=sync_grads, strategy=trainer.strategy)

    @staticmethod
    def any_rank(trainer: L.Trainer, decision: bool) -> bool:
        """``decision`` of any rank, the same on every rank (through the strategy)."""
        return bool(trainer.strategy.reduce_boolean_decision(bool(decision), all=False))

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
