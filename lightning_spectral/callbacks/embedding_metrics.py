"""EmbeddingMetrics: feed validation embeddings into this library's metrics and log them, no validation_step edits.

Embeddings come from the shared :class:`~lightning_spectral.callbacks.embeddings.EmbeddingSource` (a forward
hook on a named submodule, so the module's own ``validation_step`` forward is reused), the metrics are the
library's torchmetrics ``Metric`` objects, and each validation epoch ends with ``compute()`` (all-reduced under
DDP), ``log``, optional mode galleries to TensorBoard, and ``reset()``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Callable, Optional, Union

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from torch import Tensor
from torchmetrics import Metric
from typing_extensions import override

from lightning_spectral._checks import check_positive_int
from lightning_spectral.callbacks.embeddings import (
    BatchSelector,
    EmbeddingFn,
    EmbeddingSource,
    ReferenceEmbedding,
    datamodule_attribute,
    select,
    to_device,
)
from lightning_spectral.distributed import collective_device
from lightning_spectral.metrics import FastMMD, FINCNovelty, RFFCovariance, SPECDivergence
from lightning_spectral.viz import log_image, mode_gallery


class EmbeddingMetrics(Callback):
    """Computes and logs embedding metrics of the validation data every validation epoch.

    How each metric is fed (by type):

    - one-sample metrics (``FKEAVendi``, ``RFFCovariance``, any ``Metric`` with ``update(z)``): the validation
      embeddings;
    - two-sample metrics (``FINCNovelty``, ``FastMMD``): validation embeddings as the generated / test side
      (``real=False``) and the reference side (``real=True``) from ``reference_dataloader`` (embedded with the
      current model at the start of every validation epoch, e.g. the training data: "train vs validation"), or
      from fixed ``reference_features`` (accumulated once; set ``reset_real_features=False`` on the metric);
    - ``SPECDivergence``: validation embeddings against ``spec_reference`` (a frozen encoder, precomputed
      features looked up by ``index``, or a function of the batch) on the same samples.

    Logged as ``{log_prefix}{name}`` (a dict-valued metric as ``{name}/{key}``); ``FastMMD`` also logs
    ``{name}_p_value``. With ``images`` and a TensorBoard logger, galleries of the top samples of the top modes
    (FKEA / RFFCovariance modes, FINC novel modes, SPEC clusters of both signs) are logged as
    ``{log_prefix}{name}_modes``; that keeps up to ``max_gallery_samples`` validation embeddings per rank in
    memory for the second pass.

    Args:
        metrics: ``{name: metric}``.
        embedding: student submodule name or ``fn(pl_module, batch) -> Tensor``.
        batch_input: what the submodule is fed when the callback embeds a batch itself.
        reference_dataloader: reference batches for two-sample metrics (each rank embeds every
            ``world_size``-th batch), or the name of a datamodule method returning them (e.g.
            ``"train_dataloader_for_eval"``: train vs validation), resolved at ``setup``.
        reference_features: a fixed (N, d) reference embedding for two-sample metrics.
        spec_reference: the reference of ``SPECDivergence`` metrics (module, table with ``index``, function).
        spec_reference_input: what a ``spec_reference`` module is fed (default ``batch_input``).
        index: where a batch holds its dataset indices (galleries, table lookups).
        images: ``fn(dataset_index) -> image (C, H, W)``, an indexable dataset, or the name of a datamodule
            method such as ``"image_of"``, for galleries.
        gallery_modes: modes per gallery; gallery_per_mode: images per mode.
        max_gallery_samples: validation embeddings kept per rank for galleries.
        dataloader_idx: the validation dataloader whose batches are measured.
        log_prefix: prefix of the logged names.

    Example:
        >>> from lightning_spectral.metrics import FKEAVendi
        >>> callback = EmbeddingMetrics({"vendi": FKEAVendi(sigma=1.0, n_frequencies=64)}, embedding="encoder")
        >>> sorted(callback.metrics)
        ['vendi']
    """

    def __init__(
        self,
        metrics: Mapping[str, Metric],
        embedding: Union[str, EmbeddingFn] = "encoder",
        batch_input: BatchSelector = None,
        reference_dataloader: Union[str, Iterable, None] = None,
        reference_features: Optional[Tensor] = None,
        spec_reference: Any = None,
        spec_reference_input: BatchSelector = None,
        index: BatchSelector = None,
        images: Union[str, Callable[[int], Tensor], Any, None] = None,
        gallery_modes: int = 4,
        gallery_per_mode: int = 8,
        max_gallery_samples: int = 10_000,
        dataloader_idx: int = 0,
        log_prefix: str = "val/",
    ) -> None:
        if not metrics or not all(isinstance(m, Metric) for m in metrics.values()):
            raise ValueError("EmbeddingMetrics: `metrics` must be a non-empty {name: torchmetrics.Metric} mapping.")
        self.metrics = dict(metrics)
        self.source = EmbeddingSource(embedding, batch_input, owner="EmbeddingMetrics")
        self.two_sample = [n for n, m in self.metrics.items() if isinstance(m, (FINCNovelty, FastMMD))]
        if self.two_sample and reference_dataloader is None and reference_features is None:
            raise ValueError(
                f"EmbeddingMetrics: {self.two_sample} compare against a reference; pass `reference_dataloader` "
                "(embedded each epoch with the current model) or fixed `reference_features`."
            )
        self.reference_dataloader = reference_dataloader
        self.reference_features = reference_features
        self.spec_names = [n for n, m in self.metrics.items() if isinstance(m, SPECDivergence)]
        if self.spec_names and spec_reference is None:
            raise ValueError(
                f"EmbeddingMetrics: {self.spec_names} compare against a reference embedding of the same samples; "
                "pass `spec_reference` (a frozen encoder, precomputed features with `index`, or a function)."
            )
        self.spec_reference = (
            None
            if spec_reference is None
            else ReferenceEmbedding(
                spec_reference,
                spec_reference_input if spec_reference_input is not None else batch_input,
                index,
                "EmbeddingMetrics(spec_reference)",
            )
        )
        self.index = index
        self.images = images
        if images is not None and index is None:
            raise ValueError("EmbeddingMetrics: galleries look images up by dataset index; pass `index` too.")
        self.gallery_modes = check_positive_int(gallery_modes, "gallery_modes")
        self.gallery_per_mode = check_positive_int(gallery_per_mode, "gallery_per_mode")
        self.max_gallery_samples = check_positive_int(max_gallery_samples, "max_gallery_samples")
        self.dataloader_idx = dataloader_idx
        self.log_prefix = log_prefix
        self._reference_loader: Optional[Iterable] = None  # resolved at setup (a name needs the datamodule)
        self._images: Any = None
        self.reference_accumulated = False
        self.last_values: dict[str, float] = {}
        self._kept: list[tuple[Tensor, Optional[Tensor], Tensor]] = []

    @property
    def state_key(self) -> str:
        return self._generate_state_key(metrics=tuple(sorted(self.metrics)), prefix=self.log_prefix)

    # ------------------------------------------------------------------ lifecycle

    @override
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.source.attach(pl_module)
        if isinstance(self.reference_dataloader, str):
            self._reference_loader = datamodule_attribute(
                trainer, self.reference_dataloader, "EmbeddingMetrics", "reference_dataloader"
            )()
        else:
            self._reference_loader = self.reference_dataloader
        self._images = (
            datamodule_attribute(trainer, self.images, "EmbeddingMetrics", "images")
            if isinstance(self.images, str)
            else self.images
        )
        for metric in self.metrics.values():
            metric.to(pl_module.device)
        if self.spec_reference is not None:
            self.spec_reference.to(pl_module.device)

    @override
    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.source.detach()

    @override
    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._kept = []
        if trainer.sanity_checking or not self.two_sample:
            return
        if self._reference_loader is not None:
            for name in self.two_sample:  # the model changed since last epoch: embed the reference again
                self._reset_reference(self.metrics[name])
            for batch_idx, batch in enumerate(self._reference_loader):
                if batch_idx % trainer.world_size != trainer.global_rank:
                    continue
                z = self.source.embed(pl_module, to_device(batch, pl_module.device))
                for name in self.two_sample:
                    self.metrics[name].update(z, real=True)
        else:  # fixed features: once, or again each epoch for metrics whose reset() clears the reference
            shard = self.reference_features[trainer.global_rank :: trainer.world_size].to(pl_module.device)  # type: ignore[index]
            for name in self.two_sample:
                if not self.reference_accumulated or self.metrics[name].reset_real_features:
                    self.metrics[name].update(shard, real=True)
        self.reference_accumulated = True

    @staticmethod
    def _reset_reference(metric: Metric) -> None:
        for state in getattr(metric, "reference_states", ()):
            setattr(metric, state, metric._defaults[state].clone().to(metric.device))

    @override
    def on_validation_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self.source.start()

    @override
    def on_validation_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if trainer.sanity_checking or dataloader_idx != self.dataloader_idx:
            return
        z = self.source.captured_or_embed(pl_module, batch).detach()
        reference = None if self.spec_reference is None else self.spec_reference(batch, pl_module.device)
        for name, metric in self.metrics.items():
            if name in self.two_sample:
                metric.update(z, real=False)
            elif name in self.spec_names:
                metric.update(z, reference)
            else:
                metric.update(z)
        if self._images is not None and sum(len(k[0]) for k in self._kept) < self.max_gallery_samples:
            ids = torch.as_tensor(select(batch, self.index, "index")).long().flatten().cpu()
            self._kept.append((z.cpu(), None if reference is None else reference.cpu(), ids))

    @override
    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        for name, metric in self.metrics.items():
            if self._is_empty(metric):  # e.g. the measured dataloader did not run this epoch
                continue
            self._log(pl_module, name, metric.compute())
            if isinstance(metric, FastMMD):
                self._log(pl_module, f"{name}_p_value", metric.p_value())
            if self._images is not None:
                self._gallery(trainer, name, metric)
            metric.reset()
        self._kept = []

    def _is_empty(self, metric: Metric) -> bool:
        # every rank must agree: the counts are summed over ranks before deciding
        counts = [getattr(metric, s) for s in ("n_samples", "n_gen") if hasattr(metric, s)]
        if not counts:
            return False
        total = torch.stack([c.double().sum() for c in counts]).sum()
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            total = total.to(collective_device())
            torch.distributed.all_reduce(total)
        return float(total) == 0

    def _log(self, pl_module: L.LightningModule, name: str, value: Any) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                self._log(pl_module, f"{name}/{key}", item)
            return
        if isinstance(value, Tensor) and value.numel() > 1:  # e.g. one p-value per FastMMD bandwidth
            for i, item in enumerate(value.flatten()):
                self._log(pl_module, f"{name}/{i}", item)
            return
        value = float(value)
        self.last_values[name] = value
        if math.isfinite(value):  # values are global already (metrics all-reduce in compute)
            pl_module.log(self.log_prefix + name, value, sync_dist=False, rank_zero_only=False)

    def _gallery(self, trainer: L.Trainer, name: str, metric: Metric) -> None:
        k, per_mode = self.gallery_modes, self.gallery_per_mode
        if isinstance(metric, RFFCovariance):
            samples = metric.top_samples([(z, ids) for z, _, ids in self._kept], k=k, per_mode=per_mode)
        elif isinstance(metric, FINCNovelty):
            samples = metric.top_samples([(z, ids) for z, _, ids in self._kept], k=k, per_mode=per_mode)
        elif isinstance(metric, SPECDivergence):
            pairs = [((z, ref), ids) for z, ref, ids in self._kept]
            samples = metric.top_samples(pairs, k=k, sign=1, per_cluster=per_mode)
            samples += metric.top_samples(pairs, k=k, sign=-1, per_cluster=per_mode)
        else:
            return
        samples = [pair for pair in samples if len(pair[0])]
        if samples and trainer.logger is not None and hasattr(trainer.logger.experiment, "add_image"):
            log_image(trainer, f"{self.log_prefix}{name}_modes", mode_gallery(samples, self._images))

    # ------------------------------------------------------------------ resume

    @override
    def state_dict(self) -> dict[str, Any]:
        return {
            "metrics": {name: metric.state_dict() for name, metric in self.metrics.items()},
            "reference_accumulated": self.reference_accumulated,
            "last_values": dict(self.last_values),
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for name, metric in self.metrics.items():
            metric.load_state_dict(state_dict["metrics"][name])
        self.reference_accumulated = bool(state_dict["reference_accumulated"])
        self.last_values = dict(state_dict["last_values"])
