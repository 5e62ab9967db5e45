"""GeneratedSamples: measure a generative model's samples during training, and name the modes it drops or invents.

Every validation epoch (or every ``every_n_epochs``) the callback draws a fixed, seeded set of samples from the
module, embeds them with one frozen feature extractor, feeds them to the metrics by their ``inputs`` protocol and
logs every value of their ``summary()``:

- ``"one"`` metrics (``FKEAVendi`` with ``alpha=[1, 2]``: Vendi and RKE) take the generated embeddings;
- ``"two"`` metrics take them as the generated side (``real=False``) and a reference named per metric in
  ``references``: ``FINCNovelty`` against the training data (novel *and* missing modes), ``FastMMD`` against
  held-out data (its p-value). A reference is embedded when the metric holds none: once per run for metrics built
  with ``reset_real_features=False`` (the sums are cached across epochs and checkpointed), every epoch otherwise.

Sampling is sharded over DDP ranks so that the union of the samples is the same for any world size: the
``n_samples`` are cut into chunks of ``sample_batch_size``, chunk ``c`` is drawn with a generator seeded
``seed + c`` by rank ``c % world_size``. The draws are the same every epoch: epoch-to-epoch changes are the model's.

The callback runs at the end of validation epochs: the module needs a validation loop (``limit_val_batches > 0``).
Pictures (with a TensorBoard logger): each metric's ``galleries`` (FINC: *generated* images of the significant novel
modes, *real* images of the significant missing modes; FKEA: generated images of the top modes), a label per row,
and its ``plot_spectrum`` figure (FINC: both spectra with their significance thresholds). Galleries are built from
kept images, at most ``max_gallery_images`` in all (each rank keeps its share): the first generated samples of the
epoch, and the first samples of each reference, streamed again once per run when a gallery needs them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Callable, NamedTuple, Optional, Union

import lightning as L
import torch
from lightning.pytorch.trainer.states import TrainerFn
from torch import Tensor, nn
from torchmetrics import Metric
from typing_extensions import override

from lightning_spectral._checks import (
    check_bool,
    check_nonnegative_int,
    check_positive_int,
    check_seed,
    check_selector,
)
from lightning_spectral.callbacks.base import EmbeddingCallback, outside_inference_mode, shard_loader
from lightning_spectral.callbacks.embedding_metrics import flatten_values, metric_has_samples, metric_inputs
from lightning_spectral.callbacks.embeddings import BatchSelector, select, to_device
from lightning_spectral.distributed import all_reduce_sum, collective_device, distributed_available
from lightning_spectral.functional.modes import check_candidates_memory
from lightning_spectral.metrics.feature import FrozenFeature

SampleFn = Callable[["L.LightningModule", int, torch.Generator], Tensor]


class ModeImages(NamedTuple):
    """One gallery as images: per row (mode) its label, its images (n, C, H, W) best first, and their classes
    (reference images with ``label_key``; ``None`` for generated images, which have no label)."""

    labels: list[str]
    images: list[Tensor]
    classes: list[Optional[Tensor]]


def sample_chunks(n_samples: int, chunk_size: int, rank: int = 0, world_size: int = 1) -> list[tuple[int, int, int]]:
    """The chunks ``(index c, first sample, size)`` rank ``rank`` draws: ``c = rank, rank + W, ...``.

    Examples:
        >>> sample_chunks(10, 4, rank=0, world_size=2), sample_chunks(10, 4, rank=1, world_size=2)
        ([(0, 0, 4), (2, 8, 2)], [(1, 4, 4)])
    """
    count = math.ceil(n_samples / chunk_size)
    return [(c, c * chunk_size, min(chunk_size, n_samples - c * chunk_size)) for c in range(rank, count, world_size)]


def draw_samples(
    sampler: SampleFn,
    pl_module: Any,
    n_samples: int,
    chunk_size: int,
    seed: int,
    rank: int = 0,
    world_size: int = 1,
) -> Iterator[tuple[Tensor, Tensor]]:
    """``(global sample ids (n,), images (n, ...))`` of this rank's chunks, chunk ``c`` drawn from a CPU generator
    seeded ``seed + c``: the union over ranks is the same for any world size.

    Raises:
        ValueError: the sampler does not return one tensor of ``n`` images for ``n`` asked.
    """
    for chunk, start, size in sample_chunks(n_samples, chunk_size, rank, world_size):
        images = sampler(pl_module, size, torch.Generator().manual_seed(seed + chunk))
        if not isinstance(images, Tensor) or images.ndim < 2 or images.shape[0] != size:
            shape = tuple(images.shape) if isinstance(images, Tensor) else type(images).__name__
            raise ValueError(
                f"GeneratedSamples: `sample` must return a tensor of {size} images (N, C, H, W) when asked for "
                f"{size}, got {shape}."
            )
        yield torch.arange(start, start + size), images


class LazyBatches:
    """A re-iterable view of ``fn()``'s batches: nothing runs until it is iterated (a gallery that needs no reference
    images never streams the reference)."""

    def __init__(self, fn: Callable[[], Iterable[Any]]) -> None:
        self.fn = fn

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fn())


def for_display(images: Tensor, min_side: int = 48) -> Tensor:
    """Images (N, C, H, W) enlarged by a whole factor (nearest neighbour) until their shorter side is ``min_side``
    or more: 8x8 digits become readable in a gallery, and each row is tall enough for its label."""
    factor = math.ceil(min_side / max(min(images.shape[-2:]), 1))
    return images if factor <= 1 else torch.nn.functional.interpolate(images, scale_factor=factor, mode="nearest")


class GeneratedSamples(EmbeddingCallback):
    """Samples the module every validation epoch and logs its metrics of the generated images, with galleries.

    Logged (``log_prefix`` ``"gen/"``): every value of each metric's ``summary()``: ``gen/{name}`` (a dict of
    Vendi orders as ``gen/{name}/{order}``) and ``gen/{name}_{key}`` (FINC's ``_missing`` score and
    ``_novel_modes`` / ``_missing_modes`` counts, FastMMD's ``_p_value``). Images ``gen/{name}/{gallery}`` and
    figures ``gen/{name}/spectrum`` with a TensorBoard logger. :attr:`history` keeps every epoch's values,
    :attr:`last_galleries` the last galleries as images (with the classes of reference images), and
    :attr:`last_timings` the seconds spent sampling, embedding, in the metrics' updates and
    ``summary()``, on the references (embedded and added, when a metric holds none) and on pictures.

    Args:
        metrics: ``{name: metric}`` taking embeddings (build them without ``feature=``: the callback embeds once).
        feature: the frozen extractor, images -> (N, d) (e.g. :class:`~lightning_spectral.encoders.PixelImageFeature`,
            :class:`~lightning_spectral.encoders.ClipImageFeature`); kept out of the module's parameters and of
            checkpoints (see :class:`~lightning_spectral.metrics.FrozenFeature`).
        references: ``{metric name: loader}`` for every two-sample metric: a DataLoader (or iterable of batches) of
            real images, or the name of a datamodule method returning one (``"reference_dataloader"``,
            ``"val_dataloader"``), resolved at ``setup``.
        sample: the name of a module method called as ``sample(n, generator=g)``, or ``fn(pl_module, n, g)``;
            either returns ``n`` images (n, C, H, W).
        n_samples: generated samples per measured epoch.
        sample_batch_size: samples per chunk (the unit of sharding and seeding).
        seed: chunk ``c`` is drawn from ``torch.Generator().manual_seed(seed + c)``.
        normalize: images are floats in [0, 1] (``True``) or uint8 in [0, 255] (``False``), generated and real.
        image_key: where a reference batch holds its images (key, index or function).
        label_key: where a reference batch holds class labels (optional): :attr:`last_galleries` then gives the
            classes of the real images of each mode.
        every_n_epochs: measure every n-th epoch (and at the last one); ``trainer.validate`` always measures.
        galleries: build galleries (and keep images for them): ``True`` for every metric that has them, ``False``, or
            the names of the metrics whose galleries to build (each costs the metric's eigenvectors).
        gallery_modes: modes per gallery.
        gallery_per_mode: images per mode.
        max_gallery_images: images kept for galleries, per stream (the generated samples, each reference), over
            all ranks.
        log_prefix: prefix of the logged names.

    Raises:
        ValueError: bad arguments; a two-sample metric without a reference; a metric with its own ``feature``.

    Examples:
        >>> from lightning_spectral.encoders import PixelImageFeature
        >>> from lightning_spectral.metrics import FINCNovelty, FKEAVendi
        >>> callback = GeneratedSamples(
        ...     {"vendi": FKEAVendi(sigma=1.5, n_frequencies=256, alpha=[1, 2]),
        ...      "finc": FINCNovelty(sigma=1.5, n_frequencies=256, rho=2.0, reset_real_features=False)},
        ...     feature=PixelImageFeature(size=8), references={"finc": "reference_dataloader"}, n_samples=1500)
        >>> callback.state_key
        "GeneratedSamples{'metrics': ('finc', 'vendi'), 'prefix': 'gen/'}"
    """

    def __init__(
        self,
        metrics: Mapping[str, Metric],
        feature: nn.Module,
        references: Optional[Mapping[str, Union[str, Iterable]]] = None,
        sample: Union[str, SampleFn] = "sample",
        n_samples: int = 1500,
        sample_batch_size: int = 250,
        seed: int = 0,
        normalize: bool = True,
        image_key: BatchSelector = "image",
        label_key: BatchSelector = None,
        every_n_epochs: int = 1,
        galleries: Union[bool, Sequence[str]] = True,
        gallery_modes: int = 4,
        gallery_per_mode: int = 8,
        max_gallery_images: int = 2000,
        log_prefix: str = "gen/",
    ) -> None:
        super().__init__(None, owner="GeneratedSamples")
        if not isinstance(metrics, Mapping) or not metrics or not all(isinstance(m, Metric) for m in metrics.values()):
            raise ValueError("GeneratedSamples: `metrics` must be a non-empty {name: torchmetrics.Metric} mapping.")
        self.metrics = dict(metrics)
        for name, metric in self.metrics.items():
            if getattr(metric, "feature", None) is not None:
                raise ValueError(
                    f"GeneratedSamples: metric {name!r} has its own `feature`; the callback embeds the images once "
                    "with its `feature` and feeds embeddings: build the metric without `feature=`."
                )
            if metric_inputs(metric) not in ("one", "two"):
                raise ValueError(
                    f"GeneratedSamples: metric {name!r} takes {metric_inputs(metric)!r} inputs; generated samples feed "
                    "one-sample metrics (update(x)) and two-sample metrics (update(x, real=...)) only."
                )
        if references is not None and not isinstance(references, Mapping):
            raise ValueError(
                "GeneratedSamples: `references` must map each two-sample metric's name to a loader of real images (or "
                f"the name of a datamodule method), e.g. {{'finc': 'reference_dataloader'}}, got {references!r}."
            )
        references = dict(references or {})
        for name, loader in references.items():
            if isinstance(loader, bytes) or not isinstance(loader, (str, Iterable)):
                raise ValueError(
                    f"GeneratedSamples: `references[{name!r}]` must be a loader of real images (an iterable of "
                    f"batches) or the name of a datamodule method returning one, got {type(loader).__name__}."
                )
        two_sample = sorted(n for n, m in self.metrics.items() if metric_inputs(m) == "two")
        missing = [name for name in two_sample if name not in references]
        unknown = sorted(set(references) - set(two_sample))
        if missing or unknown:
            raise ValueError(
                f"GeneratedSamples: `references` must name a loader (or a datamodule method such as "
                f"'reference_dataloader') for each two-sample metric {two_sample}; missing {missing}, not two-sample "
                f"metrics {unknown}."
            )
        if not isinstance(sample, str) and not callable(sample):
            raise ValueError(
                f"GeneratedSamples: `sample` must be a method name or fn(pl_module, n, generator), got {sample!r}."
            )
        if not isinstance(feature, nn.Module) and not callable(feature):
            raise ValueError(
                f"GeneratedSamples: `feature` must be an nn.Module mapping images to (N, d), got {feature!r}."
            )
        if not isinstance(log_prefix, str):
            raise ValueError(f"GeneratedSamples: `log_prefix` must be a string (e.g. 'gen/'), got {log_prefix!r}.")
        self.feature = FrozenFeature(feature, normalize=check_bool(normalize, "normalize"))
        self.references = references
        self.sample = sample
        self.n_samples = check_positive_int(n_samples, "n_samples")
        self.sample_batch_size = check_positive_int(sample_batch_size, "sample_batch_size")
        self.seed = check_seed(seed)
        check_selector(image_key, "image_key", "GeneratedSamples")
        check_selector(label_key, "label_key", "GeneratedSamples")
        self.image_key, self.label_key = image_key, label_key
        self.every_n_epochs = check_positive_int(every_n_epochs, "every_n_epochs")
        if isinstance(galleries, bool):
            self.galleries: tuple[str, ...] = tuple(self.metrics) if galleries else ()
        elif isinstance(galleries, Sequence) and not isinstance(galleries, str) and set(galleries) <= set(self.metrics):
            self.galleries = tuple(galleries)
        else:
            raise ValueError(
                f"GeneratedSamples: `galleries` must be True, False or names of metrics {sorted(self.metrics)}, got "
                f"{galleries!r}."
            )
        self.gallery_modes = check_positive_int(gallery_modes, "gallery_modes")
        self.gallery_per_mode = check_positive_int(gallery_per_mode, "gallery_per_mode")
        check_candidates_memory("GeneratedSamples", self.gallery_modes, self.gallery_per_mode, "gallery_per_mode")
        self.max_gallery_images = check_nonnegative_int(max_gallery_images, "max_gallery_images")
        self.log_prefix = log_prefix
        self.history: dict[int, dict[str, float]] = {}
        self.last_values: dict[str, float] = {}
        self.last_galleries: dict[str, ModeImages] = {}
        self.last_timings: dict[str, float] = {}
        self.reference_passes = 0  # how often a reference loader was embedded into the metrics (not checkpointed)
        self._loaders: dict[str, Iterable] = {}
        self._kept: list[tuple[Tensor, Tensor, Tensor]] = []  # generated (embeddings, ids, images), this epoch
        self._pools: dict[str, list[tuple[Tensor, Tensor, Optional[Tensor]]]] = {}  # (z, images, labels) per reference

    @property
    def state_key(self) -> str:
        return self._generate_state_key(metrics=tuple(sorted(self.metrics)), prefix=self.log_prefix)

    # ---- lifecycle ---------------------------------------------------------------------------------------------
    @override
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        if isinstance(self.sample, str) and not callable(getattr(pl_module, self.sample, None)):
            raise ValueError(
                f"GeneratedSamples: `sample`={self.sample!r} names no method of {type(pl_module).__name__}; pass the "
                "name of its sampling method (called as `sample(n, generator=g)`) or a function fn(pl_module, n, g)."
            )
        self._loaders = {
            name: self.resolve(trainer, value, f"references[{name!r}]", call=True)
            for name, value in self.references.items()
        }
        self._pools = {}
        for metric in self.metrics.values():
            metric.to(pl_module.device)
        self.feature.to(pl_module.device)

    def due(self, trainer: L.Trainer) -> bool:
        """Whether this validation epoch is measured: every ``every_n_epochs``-th and the last epoch of ``fit``;
        always outside ``fit`` (``trainer.validate``)."""
        if trainer.sanity_checking:
            return False
        if trainer.state.fn != TrainerFn.FITTING:
            return True
        epoch = trainer.current_epoch + 1
        last = trainer.max_epochs is not None and trainer.max_epochs > 0 and epoch >= trainer.max_epochs
        return epoch % self.every_n_epochs == 0 or last

    @override
    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.due(trainer):
            return
        self.last_timings = dict.fromkeys(("sample", "embed", "update", "compute", "reference", "pictures"), 0.0)
        with outside_inference_mode():
            start = time.perf_counter()
            self._feed_references(trainer, pl_module)
            self.last_timings["reference"] = time.perf_counter() - start
            self._feed_samples(trainer, pl_module)
            values = self._report(trainer, pl_module)
        self.history[trainer.current_epoch] = values
        self._kept = []

    # ---- feeding -----------------------------------------------------------------------------------------------
    def _sampler(self, pl_module: L.LightningModule, n: int, generator: torch.Generator) -> Tensor:
        if isinstance(self.sample, str):
            return getattr(pl_module, self.sample)(n, generator=generator)
        return self.sample(pl_module, n, generator)

    def _share(self, trainer: L.Trainer) -> int:
        """Images this rank keeps per stream for galleries."""
        return math.ceil(self.max_gallery_images / trainer.world_size) if self.galleries else 0

    def _reference_batches(self, trainer: L.Trainer, pl_module: L.LightningModule, name: str) -> Iterator[Any]:
        """``(embeddings, images, labels)`` of this rank's share of reference ``name``."""
        for batch in shard_loader(self._loaders[name], trainer.global_rank, trainer.world_size):
            images = to_device(select(batch, self.image_key, "image_key"), pl_module.device)
            labels = None if self.label_key is None else torch.as_tensor(select(batch, self.label_key, "label_key"))
            yield self.feature(images, f"references[{name!r}] images"), images, labels

    def _feed_references(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Embed each reference into the metrics that hold none (a collective: every rank asks every metric); metrics
        naming the same reference share one pass."""
        groups: dict[Any, list[str]] = {}
        for name, metric in self.metrics.items():
            if name not in self._loaders:
                continue
            held = metric.sample_count(real=True) if hasattr(metric, "sample_count") else 0
            if held == 0:
                value = self.references[name]
                groups.setdefault(value if isinstance(value, str) else id(value), []).append(name)
        for names in groups.values():
            self.reference_passes += 1
            for z, _, _ in self._reference_batches(trainer, pl_module, names[0]):
                for name in names:
                    self.metrics[name].update(z, real=True)

    def _feed_samples(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        share, kept = self._share(trainer), 0
        chunks = draw_samples(
            self._sampler, pl_module, self.n_samples, self.sample_batch_size, self.seed,
            trainer.global_rank, trainer.world_size,
        )
        while True:
            start = time.perf_counter()
            try:
                ids, images = next(chunks)
            except StopIteration:
                break
            sampled = time.perf_counter()
            z = self.feature(images, "generated images")
            embedded = time.perf_counter()
            for metric in self.metrics.values():
                if metric_inputs(metric) == "two":
                    metric.update(z, real=False)
                else:
                    metric.update(z)
            self.last_timings["sample"] += sampled - start
            self.last_timings["embed"] += embedded - sampled
            self.last_timings["update"] += time.perf_counter() - embedded
            if kept < share:
                keep = min(share - kept, len(ids))
                self._kept.append((z[:keep].cpu(), ids[:keep], images[:keep].detach().cpu()))
                kept += keep

    # ---- values and pictures -----------------------------------------------------------------------------------
    def _report(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, float]:
        logger = trainer.logger
        experiment = getattr(logger, "experiment", None)
        can_log = hasattr(experiment, "add_image") and hasattr(experiment, "add_figure")
        values: dict[str, float] = {}
        self.last_galleries = {}
        for name, metric in self.metrics.items():
            if not metric_has_samples(metric):
                continue
            start = time.perf_counter()
            summary = metric.summary() if hasattr(metric, "summary") else {"": metric.compute()}
            found: dict[str, float] = {}
            for key, value in summary.items():
                if isinstance(value, Mapping):  # orders 1.0 (as a config file parses them) are logged as /1
                    value = {int(k) if isinstance(k, float) and k.is_integer() else k: v for k, v in value.items()}
                found.update(flatten_values(name if key == "" else f"{name}_{key}", value))
            self.last_timings["compute"] += time.perf_counter() - start
            # Values are global already (the metrics all-reduce their sums): no further sync.
            self.log_values(pl_module, {key: v for key, v in found.items() if math.isfinite(v)}, self.log_prefix)
            values.update(found)
            start = time.perf_counter()
            if name in self.galleries and hasattr(metric, "galleries"):
                self._galleries(trainer, name, metric, can_log)
            if can_log and hasattr(metric, "plot_spectrum"):
                from lightning_spectral.viz import log_figure

                figure = metric.plot_spectrum()[0]  # a collective: every rank draws, rank 0 logs
                log_figure(trainer, f"{self.log_prefix}{name}/spectrum", figure)
            self.last_timings["pictures"] += time.perf_counter() - start
            metric.reset()
        self.last_values = values
        return values

    def _pool(self, trainer: L.Trainer, pl_module: L.LightningModule, name: str) -> list[tuple[Tensor, Tensor]]:
        """``(embeddings, encoded ids)`` of the kept images of reference ``name`` (streamed once per run, on first
        use)."""
        if name not in self._pools:
            pool, share, kept = [], self._share(trainer), 0
            for z, images, labels in self._reference_batches(trainer, pl_module, name) if share else ():
                keep = min(share - kept, z.shape[0])
                pool.append((z[:keep].cpu(), images[:keep].detach().cpu(), None if labels is None else labels[:keep]))
                kept += keep
                if kept >= share:
                    break
            self._pools[name] = pool
        world, rank, position, batches = trainer.world_size, trainer.global_rank, 0, []
        for z, _, _ in self._pools[name]:
            local = torch.arange(position, position + z.shape[0])
            position += z.shape[0]
            batches.append((z, 2 * (local * world + rank) + 1))  # odd ids: reference images, owner rank inside
        return batches

    def _galleries(self, trainer: L.Trainer, name: str, metric: Metric, can_log: bool) -> None:
        pl_module = trainer.lightning_module
        generated = [(z, 2 * ids) for z, ids, _ in self._kept]
        reference = LazyBatches(lambda: self._pool(trainer, pl_module, name)) if name in self._loaders else None
        galleries = metric.galleries(  # type: ignore[operator]
            generated, self.gallery_modes, self.gallery_per_mode, reference_batches=reference
        )
        for gallery_name, gallery in galleries.items():
            rows = [ids for ids, _ in gallery.samples]
            images, classes = self._fetch(trainer, torch.cat(rows) if rows else torch.zeros(0, dtype=torch.long), name)
            record = ModeImages([], [], [])
            offset, shown = 0, []
            for ids, label in zip(rows, gallery.labels):
                span = slice(offset, offset + len(ids))
                offset += len(ids)
                if not len(ids):
                    continue
                real = bool(ids[0] % 2)
                record.labels.append(label)
                record.images.append(images[span])
                record.classes.append(classes[span] if real and self.label_key is not None else None)
                shown.append((torch.arange(span.start, span.stop), torch.zeros(len(ids))))
            self.last_galleries[f"{name}/{gallery_name}"] = record
            if shown and can_log:
                from lightning_spectral.viz import log_image, mode_gallery

                grid = mode_gallery(shown, for_display(images), labels=record.labels)
                log_image(trainer, f"{self.log_prefix}{name}/{gallery_name}", grid)

    def _fetch(self, trainer: L.Trainer, ids: Tensor, name: str) -> tuple[Tensor, Tensor]:
        """The kept images (R, C, H, W) and classes (R,) (-1: none) of encoded ids, from whichever rank keeps them
        (one all-reduce; the rows are few)."""
        world, rank = trainer.world_size, trainer.global_rank
        generated = {int(i): image for _, ids_, images in self._kept for i, image in zip(ids_, images)}
        pool = self._pools.get(name, [])
        pool_images = torch.cat([images for _, images, _ in pool]) if pool else None
        labelled = pool and all(labels is not None for _, _, labels in pool)
        pool_labels = torch.cat([labels for _, _, labels in pool]) if labelled else None
        shapes = [images.shape[1:] for _, _, images in self._kept[:1]] + ([pool_images.shape[1:]] if pool else [])
        known = self.gather(torch.tensor([list(shapes[0]) if shapes else [0, 0, 0]], dtype=torch.float64))
        known = known[known[:, 0] > 0]  # ranks that keep no image (few chunks, many ranks) do not vote
        shape = tuple(int(v) for v in known[0].tolist()) if len(known) else (1, 1, 1)
        images = torch.zeros(len(ids), *shape)
        classes = torch.zeros(len(ids), dtype=torch.float64)
        for row, code in enumerate(ids.tolist()):
            if code % 2 == 0 and code // 2 in generated:  # a generated sample this rank drew
                images[row] = generated[code // 2]
            elif code % 2 == 1 and (code // 2) % world == rank and pool_images is not None:
                position = (code // 2) // world
                images[row] = pool_images[position]
                if pool_labels is not None:
                    classes[row] = float(pool_labels[position]) + 1
        if distributed_available():
            device = collective_device()
            images = all_reduce_sum(images.to(device))[0].cpu()
            classes = all_reduce_sum(classes.to(device))[0].cpu()
        return images, classes.long() - 1

    # ---- resume ------------------------------------------------------------------------------------------------
    @override
    def state_dict(self) -> dict[str, Any]:
        return {
            "metrics": {name: metric.state_dict() for name, metric in self.metrics.items()},
            "history": {epoch: dict(values) for epoch, values in self.history.items()},
            "last_values": dict(self.last_values),
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for name, metric in self.metrics.items():
            metric.load_state_dict(state_dict["metrics"][name])
        self.history = {int(epoch): dict(values) for epoch, values in state_dict["history"].items()}
        self.last_values = dict(state_dict["last_values"])
