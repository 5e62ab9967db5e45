"""EmbeddingMetrics: feed validation embeddings into this library's metrics and log them, no validation_step edits.

Embeddings come from the module's own validation forward (a hook on a named submodule, see
[`EmbeddingCallback`][lightning_spectral.callbacks.EmbeddingCallback]); the metrics are torchmetrics ``Metric`` objects
fed according to their ``inputs`` ([`feed`][lightning_spectral.metrics.protocol.feed]); each validation epoch ends
with one [`report`][lightning_spectral.callbacks.report.report] per metric: ``summary()`` (all-reduced under DDP),
``log``, optional mode galleries to every logger that holds pictures, and ``reset()``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Callable, Optional, Union

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor
from torchmetrics import Metric
from typing_extensions import override

from lightning_spectral._checks import (
    check_bool,
    check_embedding_source,
    check_features,
    check_positive_int,
    check_selector,
)
from lightning_spectral.callbacks.alongside import AlongsideMetrics
from lightning_spectral.callbacks.embedding_callback import EmbeddingCallback, outside_inference_mode
from lightning_spectral.callbacks.embeddings import BatchSelector, EmbeddingFn, ReferenceEmbedding, select, to_device
from lightning_spectral.callbacks.epoch_line import epoch_line
from lightning_spectral.callbacks.galleries import IndexedImages
from lightning_spectral.callbacks.loaders import shard_loader
from lightning_spectral.callbacks.report import report
from lightning_spectral.callbacks.saved_state import check_saved_state, load_all_or_none, saved_mapping, state_key_of
from lightning_spectral.functional.modes import check_candidates_memory
from lightning_spectral.metrics.protocol import PlainMetric, ReportedMetric, as_reported, feed


class EmbeddingMetrics(EmbeddingCallback):
    """Computes and logs embedding metrics of the validation data every validation epoch.

    Each metric is fed by its ``inputs`` ([`feed`][lightning_spectral.metrics.protocol.feed]), never by its type, so
    any metric that keeps the [protocol][lightning_spectral.metrics.protocol.ReportedMetric] works, and a plain
    torchmetrics ``Metric`` (``update(z)``, ``compute()``) too:

    - ``"one"`` (``FKEAVendi``, ``RFFCovariance``, any ``Metric`` with ``update(z)``): the validation embeddings;
    - ``"two"`` (``FINCNovelty``, ``FastMMD``): validation embeddings as the generated / test side
      (``real=False``) and the reference side (``real=True``) from ``reference_dataloader`` (embedded with the
      current model at the start of every validation epoch, e.g. the training data: "train vs validation"), or
      from fixed ``reference_features`` (accumulated once when the metric keeps its reference,
      ``reset_real_features=False``);
    - ``"paired"`` (``SPECDivergence``): validation embeddings against ``spec_reference`` (a frozen encoder,
      precomputed features looked up by ``index``, or a function of the batch) on the same samples.

    Logged: each metric's headline as ``{log_prefix}{name}/{quantity}``
    ([`headline`][lightning_spectral.metrics.Reading.headline]: FKEA's ``vendi_{order}`` with ``_se``, FINC's
    ``novel_score`` / ``missing_score`` with ``_se``, the counts ``novel_modes`` / ``missing_modes`` and
    ``..._top_minus_log10_p``, FastMMD's ``mmd2``, ``mmd2_se``, ``minus_log10_p``, SPEC's ``spec_diff`` with
    ``_se``; several bandwidths as ``mmd2_0``, ``mmd2_1``, ...); plain torchmetrics metrics log ``compute()`` as
    ``{log_prefix}{name}``; everything else with ``log_detail``. A metric whose value is a matrix
    (``RFFCovariance``) is refused. With ``images`` and a logger that holds
    pictures (TensorBoard, W&B, MLflow, Comet, CSV), each metric's ``galleries`` (modes, significant novel modes, SPEC
    clusters of both signs; the class under each image when ``images`` gives dataset items ``(image, label, ...)``) are
    logged as ``{log_prefix}{name}/{gallery}``, rows labelled; that
    keeps a uniform sample of at most ``max_gallery_samples`` validation embeddings over all ranks (by dataset
    index: the same for any order and sharding) for the second pass.

    Args:
        metrics: ``{name: metric}``.
        embedding: student submodule name or ``fn(pl_module, batch) -> Tensor``.
        batch_input: what the submodule is fed when the callback embeds a batch itself.
        reference_dataloader: reference batches for two-sample metrics (each rank embeds its share), or the name
            of a datamodule method returning them (e.g. ``"train_dataloader_for_eval"``), resolved at ``setup``.
        reference_features: a fixed (N, d) reference embedding (tensor or array) for two-sample metrics.
        spec_reference: the reference of paired metrics (module, table with ``index``, function).
        spec_reference_input: what a ``spec_reference`` module is fed (default ``batch_input``).
        index: where a batch holds its dataset indices (galleries, table lookups).
        images: ``fn(dataset_index) -> image (C, H, W)``, an indexable dataset, or the name of a datamodule
            attribute such as ``"image_of"``, for galleries.
        gallery_modes: modes per gallery.
        gallery_per_mode: images per mode.
        max_gallery_samples: validation embeddings kept for galleries over all ranks: a uniform sample by dataset
            index (`index_priority`), every one when there are fewer.
        dataloader_idx: the validation dataloader whose batches are measured (>= 0).
        log_prefix: prefix of the logged names.
        log_detail: also log every value of each metric's ``summary()`` (``{log_prefix}{name}/detail/{key}``: sizes,
            settings, biases, per-mode shares) and each gallery row's share, class and purity; by default only the
            headline is logged (see the logged names above) and the rows go to the text beside each gallery.
        print_epoch_line: print one line per measured epoch through Lightning's logger (rank 0): the headline
            numbers, and the modes' classes where the gallery images carry them
            ([`epoch_line`][lightning_spectral.callbacks.epoch_line.epoch_line]), and show the headline values (not
            their se) in the progress bar's postfix where one is shown; ``False``: neither.
        alongside: ``{name: torchmetrics.Metric}`` fed the *inputs* of the same validation batches (what
            ``batch_input`` selects, the images a metric with its own ``feature`` such as torchmetrics'
            ``FrechetInceptionDistance`` / ``KernelInceptionDistance`` embeds itself; a metric of the module's
            embeddings belongs in ``metrics``), with ``real=False`` when its ``update`` takes ``real``, and then
            the inputs of ``reference_dataloader`` with ``real=True``, in the same pass as the reference embeddings
            (once per run when built with ``reset_real_features=False``). Its ``compute()`` is logged as
            ``{log_prefix}{name}`` (KID: ``{name}/mean``, ``{name}/std``) every validation epoch, then ``reset()``
            ([`AlongsideMetrics`][lightning_spectral.callbacks.alongside.AlongsideMetrics]); its states are not
            checkpointed (cleared at ``setup``, the reference filled again once per ``fit``).

    Raises:
        ValueError: bad arguments, named with the fix; an ``alongside`` value that is no ``torchmetrics.Metric``,
            reuses a name of ``metrics``, or takes ``real`` without a ``reference_dataloader``.

    Examples:
        >>> from lightning_spectral.metrics import FKEAVendi
        >>> callback = EmbeddingMetrics({"vendi": FKEAVendi(sigma=1.0, n_frequencies=64)}, embedding="encoder")
        >>> sorted(callback.metrics)
        ['vendi']
    """

    def __init__(
        self,
        metrics: Mapping[str, Metric],
        *,
        embedding: Union[str, EmbeddingFn] = "encoder",
        batch_input: BatchSelector = None,
        reference_dataloader: Union[str, Iterable, None] = None,
        reference_features: Union[Tensor, np.ndarray, None] = None,
        spec_reference: Any = None,
        spec_reference_input: BatchSelector = None,
        index: BatchSelector = None,
        images: Union[str, Callable[[int], Tensor], Any, None] = None,
        gallery_modes: int = 4,
        gallery_per_mode: int = 8,
        max_gallery_samples: int = 10_000,
        dataloader_idx: int = 0,
        log_prefix: str = "val/",
        log_detail: bool = False,
        print_epoch_line: bool = True,
        alongside: Optional[Mapping[str, Metric]] = None,
    ) -> None:
        check_embedding_source(embedding, "embedding", "EmbeddingMetrics")
        super().__init__(embedding, batch_input, owner="EmbeddingMetrics")
        if not isinstance(metrics, Mapping) or not metrics or not all(isinstance(m, Metric) for m in metrics.values()):
            raise ValueError("EmbeddingMetrics: `metrics` must be a non-empty {name: torchmetrics.Metric} mapping.")
        if reference_dataloader is not None and (
            isinstance(reference_dataloader, bytes) or not isinstance(reference_dataloader, (str, Iterable))
        ):
            raise ValueError(
                "EmbeddingMetrics: `reference_dataloader` must be a DataLoader (an iterable of batches) or the name of "
                f"a datamodule method returning one, got {type(reference_dataloader).__name__}."
            )
        if images is not None and not (isinstance(images, str) or callable(images) or hasattr(images, "__getitem__")):
            raise ValueError(
                "EmbeddingMetrics: `images` must be `fn(dataset_index) -> image`, an indexable dataset or the name of "
                f"a datamodule attribute, got {type(images).__name__}."
            )
        check_selector(index, "index", "EmbeddingMetrics")
        self.metrics = dict(metrics)
        # What the epoch end calls, checked now: a metric lacking a member it will call is named here.
        self._reported: dict[str, ReportedMetric] = {
            name: as_reported(
                metric, name, "EmbeddingMetrics", _needs(metric, reference_dataloader, images), ("one", "two", "paired")
            )
            for name, metric in self.metrics.items()
        }
        self.alongside = AlongsideMetrics(alongside, "EmbeddingMetrics", taken=self.metrics)
        if self.alongside.two_sided and reference_dataloader is None:
            raise ValueError(
                f"EmbeddingMetrics: `alongside` metrics {list(self.alongside.two_sided)} take `real=`: pass "
                "`reference_dataloader`, whose inputs they get as the real side (`reference_features` are "
                "embeddings, not inputs)."
            )
        two_sample = [n for n, m in self._reported.items() if m.inputs == "two"]
        if two_sample and reference_dataloader is None and reference_features is None:
            raise ValueError(
                f"EmbeddingMetrics: {two_sample} compare against a reference; pass `reference_dataloader` "
                "(embedded each epoch with the current model) or fixed `reference_features`."
            )
        if isinstance(reference_features, np.ndarray):
            reference_features = torch.from_numpy(np.ascontiguousarray(reference_features))
        if reference_features is not None and (not isinstance(reference_features, Tensor) or reference_features.ndim != 2):
            raise ValueError(
                "EmbeddingMetrics: `reference_features` must be an (N, d) tensor or array of embeddings, got "
                f"{type(reference_features).__name__} {tuple(getattr(reference_features, 'shape', ()))}."
            )
        if reference_features is not None:  # dense, floating, finite, at least one row: refused now, not at fit
            check_features(reference_features, "reference_features", owner="EmbeddingMetrics")
            if reference_features.shape[0] == 0:
                raise ValueError("EmbeddingMetrics: `reference_features` has no rows; pass the reference embeddings.")
        paired = [n for n, m in self._reported.items() if m.inputs == "paired"]
        if paired and spec_reference is None:
            raise ValueError(
                f"EmbeddingMetrics: {paired} compare against a reference embedding of the same samples; pass "
                "`spec_reference` (a frozen encoder, precomputed features with `index`, or a function)."
            )
        if images is not None and index is None:
            raise ValueError("EmbeddingMetrics: galleries look images up by dataset index; pass `index` too.")
        if isinstance(dataloader_idx, bool) or not isinstance(dataloader_idx, int) or dataloader_idx < 0:
            raise ValueError(f"EmbeddingMetrics: `dataloader_idx` must be an integer >= 0, got {dataloader_idx!r}.")
        if not isinstance(log_prefix, str):
            raise ValueError(f"EmbeddingMetrics: `log_prefix` must be a string (e.g. 'val/'), got {log_prefix!r}.")
        self.reference_dataloader = reference_dataloader
        self.reference_features = reference_features
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
        self.gallery_modes = check_positive_int(gallery_modes, "gallery_modes")
        self.gallery_per_mode = check_positive_int(gallery_per_mode, "gallery_per_mode")
        check_candidates_memory("EmbeddingMetrics", self.gallery_modes, self.gallery_per_mode, "gallery_per_mode")
        self.max_gallery_samples = check_positive_int(max_gallery_samples, "max_gallery_samples")
        self.dataloader_idx = dataloader_idx
        self.log_prefix = log_prefix
        self.log_detail = check_bool(log_detail, "log_detail")
        self.print_epoch_line = check_bool(print_epoch_line, "print_epoch_line")
        self.last_line = ""  # the last measured epoch's line
        self._reference_loader: Optional[Iterable] = None  # resolved at setup (a name needs the datamodule)
        self._lookup: Any = None  # `images`, resolved at setup (a name needs the datamodule)
        self._gallery: Optional[IndexedImages] = None  # this epoch's kept samples
        self.reference_accumulated = False
        self.last_values: dict[str, float] = {}

    @property
    def state_key(self) -> str:
        return state_key_of(self, metrics=tuple(sorted(self.metrics)), prefix=self.log_prefix)

    def _with(self, inputs: str) -> list[ReportedMetric]:
        return [metric for metric in self._reported.values() if metric.inputs == inputs]

    # ------------------------------------------------------------------ lifecycle

    @override
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        self._reference_loader = self.resolve(trainer, self.reference_dataloader, "reference_dataloader", call=True)
        self._lookup = self.resolve(trainer, self.images, "images")
        for metric in self.metrics.values():
            metric.to(pl_module.device)
        self.alongside.to(pl_module.device)
        if self.spec_reference is not None:
            self.spec_reference.to(pl_module.device)

    @override
    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._gallery = None if self.images is None else IndexedImages(
            self._lookup, self.gallery_modes, self.gallery_per_mode, limit=self.max_gallery_samples
        )
        two_sample = self._with("two")
        along = self.alongside.needing_reference()
        if trainer.sanity_checking or not (two_sample or along):
            return
        with outside_inference_mode():
            if self._reference_loader is not None and not two_sample:  # only alongside metrics: their inputs
                for batch in shard_loader(self._reference_loader, trainer.global_rank, trainer.world_size):
                    self.alongside.update(self._inputs(batch, pl_module), along, real=True)
            elif self._reference_loader is not None:  # the model changed since last epoch: embed the reference again
                for metric in two_sample:
                    metric.reset_reference()
                for z, batch in self.embed_loader(self._reference_loader, trainer, pl_module):
                    for metric in two_sample:
                        feed(metric, z, real=True)
                    if along:  # the same pass: the batch's inputs
                        self.alongside.update(self._inputs(batch, pl_module), along, real=True)
            else:  # fixed features: once, or again each epoch for metrics whose reset() clears the reference
                shard = self.reference_features[trainer.global_rank :: trainer.world_size].to(pl_module.device)  # type: ignore[index]
                for metric in two_sample:
                    # torchmetrics' convention (FID): a metric built with reset_real_features=False keeps its reference
                    if not self.reference_accumulated or getattr(metric, "reset_real_features", True):
                        feed(metric, shard, real=True)
        self.reference_accumulated = True

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
        z = self.batch_embedding(pl_module, batch).detach()
        reference = None if self.spec_reference is None else self.spec_reference(batch, pl_module.device)
        with outside_inference_mode():
            for metric in self._reported.values():
                feed(metric, z, reference)
            if self.alongside:
                self.alongside.update(self._inputs(batch, pl_module))
        if self._gallery is not None:
            self._gallery.keep(z, reference, torch.as_tensor(select(batch, self.index, "index")).long().flatten())

    @override
    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        if self._gallery is not None:
            self._gallery.settle(trainer)
        for name, metric in self._reported.items():
            pictured = self._gallery is not None and not isinstance(metric, PlainMetric)
            gallery = self._gallery.view(metric.inputs == "paired") if pictured else None  # type: ignore[union-attr]
            values = report(trainer, pl_module, name, metric, self.log_prefix, gallery, kept=self.last_galleries,
                            detail=self.log_detail, progress_bar=self.print_epoch_line)
            self.last_values.update(values)
        with outside_inference_mode():
            # torchmetrics syncs these metrics itself
            self.last_values.update(self.alongside.report(trainer, pl_module, self.log_prefix))
        self._gallery = None
        self.last_line = epoch_line(self.log_prefix, trainer.current_epoch, self.last_values, self.last_galleries)
        if self.print_epoch_line and self.last_values:
            rank_zero_info(self.last_line)

    def _inputs(self, batch: Any, pl_module: L.LightningModule) -> Any:
        """What the `alongside` metrics are fed of a batch: its inputs (``batch_input``), on the module's device."""
        return to_device(select(batch, self.source.batch_input, "batch_input"), pl_module.device)  # type: ignore[union-attr]

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
        """Restore `state_dict`'s output, checked whole first (a refused state leaves the callback as it was).

        Raises:
            ValueError: a missing key or metric, or a metric that refuses its state; named, with the fix.
        """
        check_saved_state(state_dict, ("metrics", "reference_accumulated", "last_values"), self.owner, self.state_key)
        last_values = saved_mapping(state_dict, "last_values", self.owner, self.state_key)
        load_all_or_none(self.metrics, state_dict["metrics"], self.owner, self.state_key)
        self.reference_accumulated = bool(state_dict["reference_accumulated"])
        self.last_values = dict(last_values)


def _needs(metric: Metric, reference_dataloader: Any, images: Any) -> dict[str, str]:
    """Members `EmbeddingMetrics` calls besides the report's, with the argument that asks: galleries with
    ``images``; ``reset_reference`` for a two-sample metric whose reference is embedded again every epoch."""
    needs = {"galleries": "images"} if images is not None else {}
    if getattr(metric, "inputs", "one") == "two" and reference_dataloader is not None:
        needs["reset_reference"] = "reference_dataloader"
    return needs
