"""The base of the callbacks that read a LightningModule's embeddings: one lifecycle, written once.

[`EmbeddingCallback`][lightning_spectral.callbacks.EmbeddingCallback] owns what every such callback needs:

- the capture lifecycle of an [`EmbeddingSource`][lightning_spectral.callbacks.EmbeddingSource]: the hook is
  attached at ``setup`` and removed at ``teardown``; each train / validation batch starts with an empty
  capture, and [`batch_embedding`][lightning_spectral.callbacks.EmbeddingCallback.batch_embedding] returns what the step
  computed (or embeds the batch);
- extra loaders (a reference set, OOD sets, a fit set):
  [`embed_loader`][lightning_spectral.callbacks.EmbeddingCallback.embed_loader] streams this
  rank's share, sharded by sample through Lightning's ``UnrepeatedDistributedSampler`` (no sample repeated);
- the ranks, through the Lightning strategy: [`gather`][lightning_spectral.callbacks.EmbeddingCallback.gather] (rows of
  every rank) and
  [`any_rank`][lightning_spectral.callbacks.EmbeddingCallback.any_rank] (a decision every rank takes alike);
- the report of a metric at an epoch's end ([`report`][lightning_spectral.callbacks.EmbeddingCallback.report]): one
  sync, every value of its
  ``summary()`` logged, its galleries and spectrum drawn, then ``reset()``;
- arguments that name a datamodule attribute (``"train_dataloader_for_eval"``, ``"image_of"``), resolved at
  ``setup``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, Optional, Union

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor
from torch.utils.data import DataLoader, IterableDataset
from torchmetrics import Metric
from typing_extensions import override

from lightning_spectral.callbacks.embeddings import BatchSelector, EmbeddingFn, EmbeddingSource, to_device

if TYPE_CHECKING:  # pragma: no cover
    from lightning_spectral.callbacks.galleries import GalleryImages


def flatten_values(name: str, value: Any) -> dict[str, float]:
    """``{name: float}`` pairs of a computed value: a dict becomes ``name/key``, a vector ``name/i``.

    Orders given as whole floats (``1.0``, as a config file parses them) are named as integers (``name/1``).

    Examples:
        >>> import torch
        >>> flatten_values("vendi", {1.0: torch.tensor(3.0), "inf": torch.tensor(2.0)})
        {'vendi/1': 3.0, 'vendi/inf': 2.0}
    """
    if isinstance(value, Mapping):
        out: dict[str, float] = {}
        for key, item in value.items():
            key = int(key) if isinstance(key, float) and key.is_integer() else key
            out.update(flatten_values(f"{name}/{key}", item))
        return out
    if isinstance(value, Tensor) and value.numel() > 1:
        out = {}
        for index, item in enumerate(value.flatten()):
            out.update(flatten_values(f"{name}/{index}", item))
        return out
    return {name: float(value)}


def gather_rows(trainer: L.Trainer, rows: Tensor, sync_grads: bool = False) -> Tensor:
    """All ranks' rows (N_rank, ...) concatenated in rank order, through the trainer's strategy (ranks may hold
    different N, even 0); the rows themselves in one process. With ``sync_grads`` each rank's slice sends its
    gradient back to it (the strategy's differentiable all-gather)."""
    if trainer.world_size == 1:
        return rows
    strategy, device = trainer.strategy, trainer.strategy.root_device  # NCCL gathers only the device's tensors
    counts = strategy.all_gather(torch.tensor([rows.shape[0]], device=device)).flatten().tolist()
    padded = rows.to(device)
    if rows.shape[0] < max(counts):
        padded = torch.cat([padded, padded.new_zeros(max(counts) - rows.shape[0], *rows.shape[1:])])
    parts = strategy.all_gather(padded.contiguous(), sync_grads=sync_grads)  # (world, max N, ...)
    return torch.cat([part[:count] for part, count in zip(parts, counts)]).to(rows.device)


def has_samples(trainer: L.Trainer, metric: Metric) -> bool:
    """Whether a metric accumulated anything on any rank (every rank gets the same answer; a collective). Inside
    ``metric.synced()`` a [`SpectralMetric`][lightning_spectral.metrics.SpectralMetric] reads its synced counts."""
    if hasattr(metric, "sample_count"):
        return metric.sample_count() > 0
    return EmbeddingCallback.any_rank(trainer, metric.update_count > 0)


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
        """``(embeddings (N, d), batch)`` for this rank's share of ``loader`` (see
        [`shard_loader`][lightning_spectral.callbacks.shard_loader]), computed
        without gradients under the module's current mode."""
        assert self.source is not None
        for batch in shard_loader(loader, trainer.global_rank, trainer.world_size):
            batch = to_device(batch, pl_module.device)
            with torch.no_grad():
                yield self.source.embed(pl_module, batch).detach(), batch

    # ---- across ranks, logging, arguments ----------------------------------------------------------------------
    @staticmethod
    def gather(trainer: L.Trainer, rows: Tensor, sync_grads: bool = False) -> Tensor:
        """All ranks' rows concatenated in rank order (`gather_rows`)."""
        return gather_rows(trainer, rows, sync_grads)

    @staticmethod
    def any_rank(trainer: L.Trainer, decision: bool) -> bool:
        """``decision`` of any rank, the same on every rank (through the strategy)."""
        return bool(trainer.strategy.reduce_boolean_decision(bool(decision), all=False))

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

    def report(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        name: str,
        metric: Metric,
        prefix: str,
        gallery: Optional["GalleryImages"] = None,
        spectrum: Union[bool, Callable[[dict[str, float]], Optional[tuple[str, Any]]]] = False,
        timings: Optional[dict[str, float]] = None,
    ) -> dict[str, float]:
        """Log every value of a metric's ``summary()`` as ``{prefix}{name}`` / ``{prefix}{name}_{key}``, build its
        galleries (with ``gallery``, which knows the images behind the ids; kept in `last_galleries`) and log
        them with its spectrum figure (``spectrum``) when a logger takes pictures, then ``reset()`` the metric.
        ``spectrum`` may be ``fn(values) -> (tag suffix, figure)`` (e.g. a test's p-value over epochs), or return
        ``None`` for the metric's own ``plot_spectrum``.

        One sync: every read comes from the same all-reduced sums
        ([`synced`][lightning_spectral.metrics.SpectralMetric.synced]). A plain torchmetrics metric logs
        ``compute()``. ``timings`` (a dict) gains the seconds spent on the values (``"compute"``) and on the
        pictures (``"pictures"``). Returns the values logged (empty when no rank saw a sample). A collective under
        DDP.
        """
        values: dict[str, float] = {}
        timings = {} if timings is None else timings
        start = time.perf_counter()
        with metric.synced() if hasattr(metric, "synced") else nullcontext():
            if has_samples(trainer, metric):
                summary = metric.summary() if hasattr(metric, "summary") else {"": metric.compute()}
                for key, value in summary.items():
                    values.update(flatten_values(name if key == "" else f"{name}_{key}", value))
                # Values are global already (the metrics all-reduce their sums): no further sync.
                self.log_values(pl_module, {k: v for k, v in values.items() if math.isfinite(v)}, prefix)
                drawn = time.perf_counter()
                timings["compute"] = timings.get("compute", 0.0) + drawn - start
                wanted = (gallery is not None and hasattr(metric, "galleries")) or (
                    bool(spectrum) and (callable(spectrum) or hasattr(metric, "plot_spectrum"))
                )
                pictures = wanted and self.can_log_pictures(trainer)
                if gallery is not None and hasattr(metric, "galleries"):
                    self._galleries(trainer, name, f"{prefix}{name}", metric, gallery, pictures)
                if spectrum and pictures:
                    from lightning_spectral.pictures.loggers import log_picture

                    drawn_by_caller = spectrum(values) if callable(spectrum) else None
                    if drawn_by_caller is not None:
                        log_picture(trainer, f"{prefix}{name}/{drawn_by_caller[0]}", drawn_by_caller[1])
                    elif hasattr(metric, "plot_spectrum"):  # a collective: every rank draws
                        log_picture(trainer, f"{prefix}{name}/spectrum", metric.plot_spectrum()[0])
                timings["pictures"] = timings.get("pictures", 0.0) + time.perf_counter() - drawn
        metric.reset()
        return values

    @staticmethod
    def can_log_pictures(trainer: L.Trainer) -> bool:
        """Whether any of the trainer's loggers holds pictures (TensorBoard, W&B, MLflow, Comet, CSV: see
        [`lightning_spectral.pictures.loggers`][lightning_spectral.pictures.loggers]); each one that cannot is warned once, on rank 0."""
        from lightning_spectral.pictures.loggers import _kind, loggers_of, warn_no_pictures

        kinds = [(_kind(logger), logger) for logger in loggers_of(trainer)]
        if trainer.is_global_zero:
            for kind, logger in kinds:
                if kind is None:
                    warn_no_pictures(logger)
        return any(kind is not None for kind, _ in kinds)

    def _galleries(
        self, trainer: L.Trainer, name: str, tag: str, metric: Metric, gallery: "GalleryImages", log: bool
    ) -> None:
        """The metric's galleries from a second pass over ``gallery``'s batches, their images, and the grids."""
        from lightning_spectral.callbacks.galleries import ModeImages, for_display
        from lightning_spectral.pictures.gallery import mode_gallery
        from lightning_spectral.pictures.loggers import log_picture

        found = metric.galleries(  # type: ignore[operator]
            gallery.batches("samples"), gallery.modes, gallery.per_mode, reference_batches=gallery.batches("reference")
        )
        for gallery_name, rows in found.items():
            shown = [(ids, label) for (ids, _), label in zip(rows.samples, rows.labels) if len(ids)]
            ids = torch.cat([ids for ids, _ in shown]) if shown else torch.zeros(0, dtype=torch.long)
            images, classes = gallery.images(trainer, rows.source, ids)  # a collective: every rank asks
            record, positions, start = ModeImages([], [], []), [], 0
            for row_ids, label in shown:
                span = torch.arange(start, start + len(row_ids))  # the row's images in `images`
                start += len(row_ids)
                positions.append((span, torch.zeros(len(span))))
                record.labels.append(label)
                record.images.append(images[span])
                record.classes.append(None if classes is None else classes[span])
            self.last_galleries[f"{name}/{gallery_name}"] = record
            if shown and log:
                captions = None
                if all(classes is not None for classes in record.classes):  # the caller's labels, under each image
                    captions = [[f"class {int(c)}" for c in row] for row in record.classes]  # type: ignore[union-attr]
                title = getattr(rows, "title", "")
                grid = mode_gallery(
                    positions, for_display(images), labels=record.labels, title=title, captions=captions
                )
                log_picture(trainer, f"{tag}/{gallery_name}", grid)
