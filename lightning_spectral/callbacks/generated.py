"""GeneratedSamples: measure a generative model's samples during training, and name the modes it drops or invents.

Every validation epoch (every training epoch without a validation loop; or every ``every_n_epochs``) the callback draws a fixed, seeded set of samples from the
module (`callbacks.sampling`: sharded over DDP ranks, the same union for any world size),
embeds them with one frozen feature extractor, feeds them to the metrics by their ``inputs``
([`feed`][lightning_spectral.metrics.protocol.feed]) and reports each metric
([`report`][lightning_spectral.callbacks.report.report]: every value of its ``summary()``, its galleries and spectrum,
one sync):

- ``"one"`` metrics (``FKEAVendi`` with ``alpha=[1, 2]``: Vendi and RKE) take the generated embeddings;
- ``"conditional"`` metrics (``ConditionalVendi``), with ``prompts``: the generated embeddings and the prompt each
  sample was drawn for (sample ``i`` gets prompt ``i % P``; the module is called as ``sample(prompts, generator=g)``),
  and the prompt's index as its label: the least diverse prompts get a gallery;
- ``"two"`` metrics take them as the generated side (``real=False``) and a reference named per metric in
  ``references``: ``FINCNovelty`` against the training data (novel *and* missing modes), ``FastMMD`` against
  held-out data (its p-value). A reference is embedded when the metric holds none: once per run for metrics built
  with ``reset_real_features=False`` (the sums are cached across epochs and checkpointed), every epoch otherwise.

The callback measures at the end of validation epochs; a module without a validation loop (no ``validation_step``,
as most GANs, or ``limit_val_batches=0``) is measured at the end of each training epoch instead, and says so once.
Pictures (to every logger that holds them: TensorBoard, W&B, MLflow, Comet, CSV): each metric's ``galleries`` (FINC:
*generated* images of the significant novel modes, *real* images of the significant missing modes; FKEA: generated
images of the top modes), a label per row, and its ``plot_spectrum`` figure (FINC: both spectra with their
significance thresholds; a test with a p-value, FastMMD: its statistic and p-value over epochs). A gallery of
generated samples searches the epoch's first ``max_gallery_images`` samples (by global id: a uniform sample of the
seeded draws, kept in `KeptImages`, each rank its share); a gallery of a reference (FINC's missing modes) searches
every sample of it: the reference is streamed through the extractor at the first measured epoch that shows one (its
embeddings kept for the fit's later epochs up to `KEPT_REFERENCE_BYTES`, else streamed again), and once more, without
the extractor, to fetch the images shown (the loader must not shuffle).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any, Callable, Optional, Union, cast

import lightning as L
import torch
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from lightning.pytorch.utilities.model_helpers import is_overridden
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
from lightning_spectral.callbacks.alongside import AlongsideMetrics
from lightning_spectral.callbacks.embedding_callback import EmbeddingCallback, outside_inference_mode
from lightning_spectral.callbacks.embeddings import BatchSelector, select, to_device
from lightning_spectral.callbacks.epoch_line import epoch_line
from lightning_spectral.callbacks.galleries import KeptImages
from lightning_spectral.callbacks.loaders import shard_loader
from lightning_spectral.callbacks.report import SpectrumFn, report
from lightning_spectral.callbacks.sampling import SampleFn, draw_samples
from lightning_spectral.callbacks.saved_state import (
    check_saved_state,
    load_all_or_none,
    refusal_fix,
    saved_mapping,
    state_key_of,
)
from lightning_spectral.functional.modes import check_candidates_memory
from lightning_spectral.metrics.feature import FrozenFeature
from lightning_spectral.metrics.protocol import PicturedReading, PlainMetric, ReportedMetric, as_reported, feed

#: The level dashed in a two-sample test's picture over epochs (FastMMD's ``test()`` default).
TEST_LEVEL = 0.05


class GeneratedSamples(EmbeddingCallback):
    """Samples the module every validation epoch and logs its metrics of the generated images, with galleries.

    Logged (``log_prefix`` ``"gen/"``): each metric's headline as ``gen/{name}/{quantity}``
    ([`headline`][lightning_spectral.metrics.Reading.headline]: FKEA's ``vendi_1``, ``vendi_2`` and their
    ``_se``; FINC's ``novel_score``, ``missing_score`` with ``_se``, ``novel_modes`` / ``missing_modes`` counts and
    ``..._top_minus_log10_p``; FastMMD's ``mmd2``, ``mmd2_se``, ``minus_log10_p``; a plain torchmetrics metric's value
    as ``gen/{name}``); everything else with ``log_detail``. Images ``gen/{name}/{gallery}`` and
    figures ``gen/{name}/spectrum`` (a two-sample test such as FastMMD: ``gen/{name}/over_epochs``, its statistic
    and p-value at every measured epoch, from `history`, which checkpoints carry) to every logger that holds
    pictures. `history` keeps every epoch's values,
    `last_galleries` the last galleries as images (with the classes of reference images), and
    `last_timings` the seconds spent sampling, embedding, in the metrics' updates, reporting them (their
    ``summary()``, galleries and pictures) and on the references (embedded and added, when a metric holds none).

    Args:
        metrics: ``{name: metric}`` taking embeddings (build them without ``feature=``: the callback embeds once).
        feature: the frozen extractor, images -> (N, d) (e.g.
            [`PixelImageFeature`][lightning_spectral.encoders.PixelImageFeature],
            [`ClipImageFeature`][lightning_spectral.encoders.ClipImageFeature]); kept out of the module's parameters and
            of
            checkpoints (see [`FrozenFeature`][lightning_spectral.metrics.FrozenFeature]).
        references: ``{metric name: loader}`` for every two-sample metric: a DataLoader (or iterable of batches) of
            real images, or the name of a datamodule method returning one (``"reference_dataloader"``,
            ``"val_dataloader"``), resolved at ``setup``.
        sample: the name of a module method called as ``sample(n, generator=g)``, or ``fn(pl_module, n, g)``;
            either returns ``n`` images (n, C, H, W).
        n_samples: generated samples per measured epoch.
        sample_batch_size: samples per chunk (the unit of sharding and seeding).
        seed: chunk ``c`` is drawn from ``torch.Generator().manual_seed(seed + c)``.
        normalize: images are floats in [0, 1] (``True``) or uint8 in [0, 255] (``False``), generated and real;
            ``None`` (default, as the metrics): read from the dtype (``uint8``: [0, 255], floats: [0, 1]).
        image_key: where a reference batch holds its images (key, index or function).
        label_key: where a reference batch holds class labels (optional): `last_galleries` then gives the
            classes of the real images of each mode.
        every_n_epochs: measure every n-th epoch (and at the last one); ``trainer.validate`` always measures.
        galleries: build galleries (and keep images for them): ``True`` for every metric but plain torchmetrics ones
            (which have none), ``False``, or the names of the metrics whose galleries to build (each costs the
            metric's eigenvectors).
        gallery_modes: modes per gallery.
        gallery_per_mode: images per mode.
        max_gallery_images: generated images kept for galleries, over all ranks (the epoch's first, by global id);
            a reference's galleries search all of it.
        log_prefix: prefix of the logged names.
        log_detail: also log every value of each metric's ``summary()`` (``{log_prefix}{name}/detail/{key}``: sizes,
            settings, biases, per-mode shares) and each gallery row's share, class and purity; by default only the
            headline is logged (see the logged names above) and the rows go to the text beside each gallery.
        print_epoch_line: print one line per measured epoch through Lightning's logger (rank 0): the headline
            numbers, and the modes' classes where the gallery images carry them
            ([`epoch_line`][lightning_spectral.callbacks.epoch_line.epoch_line]), and show the headline values (not
            their se) in the progress bar's postfix where one is shown; ``False``: neither.
        prompts: for a conditional generator: a tensor of ``P`` prompts (``(P,)`` integer labels or ``(P, d)``
            embeddings; a list of integer labels, as a config file gives them), sample ``i`` drawn for prompt
            ``i % P`` (the same prompts every epoch, on any number of ranks), or ``fn(ids) -> prompts`` of the
            global sample ids. The module's sampler is then called as
            ``sample(prompts, generator=g)`` (``fn(pl_module, prompts, g)``) and must return one image per prompt.
        prompt_embeddings: ``(P, d_t)`` what the conditional metrics see of each of the ``P`` prompts (e.g. caption
            embeddings of class labels the model takes), default ``prompts`` themselves.
        alongside: ``{name: torchmetrics.Metric}`` fed the same images in the same passes, no second sampling
            ([`AlongsideMetrics`][lightning_spectral.callbacks.alongside.AlongsideMetrics]): e.g. torchmetrics'
            ``FrechetInceptionDistance`` / ``KernelInceptionDistance`` with their own ``feature``. Each gets the
            generated images as drawn (the metric's own ``normalize`` reads them) and, when its ``update`` takes
            ``real``, the images of the reference ``references[name]`` with ``real=True`` (once per run when built
            with ``reset_real_features=False``); its ``compute()`` is logged as ``{log_prefix}{name}`` (KID:
            ``{name}/mean``, ``{name}/std``) at every measured epoch, then ``reset()``. Its states are not
            checkpointed: the callback clears them at ``setup`` and fills the reference again once per ``fit``.

    Raises:
        ValueError: bad arguments; a two-sample metric without a reference; a metric with its own ``feature``; an
            ``alongside`` value that is no ``torchmetrics.Metric``, reuses a name of ``metrics``, takes ``real`` with
            no reference, or is given a reference its ``update`` has no ``real`` for.
        TypeError: a metric lacks a member the callback calls (its galleries when asked for, its spectrum).

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
        *,
        references: Optional[Mapping[str, Union[str, Iterable]]] = None,
        sample: Union[str, SampleFn] = "sample",
        n_samples: int = 1500,
        sample_batch_size: int = 250,
        seed: int = 0,
        normalize: Optional[bool] = None,
        image_key: BatchSelector = "image",
        label_key: BatchSelector = None,
        every_n_epochs: int = 1,
        galleries: Union[bool, Sequence[str]] = True,
        gallery_modes: int = 4,
        gallery_per_mode: int = 8,
        max_gallery_images: int = 2000,
        log_prefix: str = "gen/",
        log_detail: bool = False,
        print_epoch_line: bool = True,
        prompts: Union[Sequence[int], Tensor, Callable[[Tensor], Tensor], None] = None,
        prompt_embeddings: Optional[Tensor] = None,
        alongside: Optional[Mapping[str, Metric]] = None,
    ) -> None:
        super().__init__(None, owner="GeneratedSamples")
        if not isinstance(metrics, Mapping) or not metrics or not all(isinstance(m, Metric) for m in metrics.values()):
            raise ValueError("GeneratedSamples: `metrics` must be a non-empty {name: torchmetrics.Metric} mapping.")
        self.metrics = dict(metrics)
        for name, metric in self.metrics.items():
            if getattr(metric, "feature", None) is not None:
                raise ValueError(
                    f"GeneratedSamples: metric {name!r} has its own `feature`; the callback embeds the images once "
                    "with its `feature` and feeds embeddings: build the metric without `feature=`, or pass a "
                    "torchmetrics metric that embeds the images itself (FID, KID) in `alongside=`."
                )
            inputs = getattr(metric, "inputs", "one")
            if inputs == "conditional" and prompts is None:
                raise ValueError(
                    f"GeneratedSamples: metric {name!r} measures samples per prompt; pass `prompts=` (a tensor of "
                    "labels or prompt embeddings, or fn(ids) -> prompts) so that the module is sampled per prompt."
                )
            if inputs not in ("one", "two", "conditional"):
                raise ValueError(
                    f"GeneratedSamples: metric {name!r} takes {inputs!r} inputs; generated samples feed "
                    "one-sample metrics (update(x)), two-sample metrics (update(x, real=...)) and conditional metrics "
                    "(update(x, prompts)) only."
                )
        self.prompts, self.prompt_embeddings = _check_prompts(prompts, prompt_embeddings)
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
        self.alongside = AlongsideMetrics(alongside, "GeneratedSamples", taken=self.metrics)
        two_sample = sorted(n for n, m in self.metrics.items() if getattr(m, "inputs", "one") == "two")
        two_sample = sorted([*two_sample, *self.alongside.two_sided])
        missing = [name for name in two_sample if name not in references]
        unknown = sorted(set(references) - set(two_sample))
        if missing or unknown:
            raise ValueError(
                f"GeneratedSamples: `references` must name a loader (or a datamodule method such as "
                f"'reference_dataloader') for each two-sample metric {two_sample} (in `metrics`, or in `alongside` "
                f"with an `update(images, real=...)`); missing {missing}, not two-sample metrics {unknown}."
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
        self.feature = FrozenFeature(feature, normalize=normalize)
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
        # What the epoch end calls, checked now: a metric lacking a member it will call is named here. Every metric
        # draws its spectrum; galleries where `galleries` asks (a plain torchmetrics metric has none to give).
        self._reported: dict[str, ReportedMetric] = {}
        for name, metric in self.metrics.items():
            needs = {"plot_spectrum": "metrics"}  # drawn at every measured epoch
            if name in self.galleries:
                needs["galleries"] = f"galleries={galleries!r}"
            if name in self.references:  # whether it holds its reference already, asked before each measured epoch
                needs["sample_count"] = f"references[{name!r}]"
            self._reported[name] = as_reported(metric, name, "GeneratedSamples", needs, ("one", "two", "conditional"))
            if not isinstance(galleries, bool) and name in galleries and isinstance(self._reported[name], PlainMetric):
                raise TypeError(
                    f"GeneratedSamples: `galleries` names {name!r}, a plain torchmetrics {type(metric).__name__}, "
                    "which has no galleries; leave it out of `galleries`."
                )
        self.galleries = tuple(n for n in self.galleries if not isinstance(self._reported[n], PlainMetric))
        self.gallery_modes = check_positive_int(gallery_modes, "gallery_modes")
        self.gallery_per_mode = check_positive_int(gallery_per_mode, "gallery_per_mode")
        check_candidates_memory("GeneratedSamples", self.gallery_modes, self.gallery_per_mode, "gallery_per_mode")
        self.max_gallery_images = check_nonnegative_int(max_gallery_images, "max_gallery_images")
        self.log_prefix = log_prefix
        self.log_detail = check_bool(log_detail, "log_detail")
        self.print_epoch_line = check_bool(print_epoch_line, "print_epoch_line")
        self.last_line = ""  # the last measured epoch's line
        self.history: dict[int, dict[str, float]] = {}
        self.last_values: dict[str, float] = {}
        self.last_timings: dict[str, float] = {}
        self.reference_passes = 0  # how often a reference loader was embedded into the metrics (not checkpointed)
        self._loaders: dict[str, Iterable] = {}
        self._kept: Optional[KeptImages] = None  # generated images, and each reference searched whole (in a fit)
        self._prints: dict[str, Optional[tuple[Tensor, Tensor]]] = {}  # each reference's ids and image fingerprints
        self._features: dict[str, tuple[Any, list[tuple[Tensor, Tensor]]]] = {}  # each reference's (loader, embeddings)

    @property
    def state_key(self) -> str:
        return state_key_of(self, metrics=tuple(sorted(self.metrics)), prefix=self.log_prefix)

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
        self._kept = None  # built at the first measured epoch, inside the process that measures
        if stage == "fit":
            self._check_schedule(trainer, pl_module)
        for metric in self.metrics.values():
            metric.to(pl_module.device)
        self.alongside.to(pl_module.device)
        self.feature.to(pl_module.device)

    def _check_schedule(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """When the fit measures: at the end of each validation epoch, or, for a module that has no validation loop
        (no ``validation_step``, or ``limit_val_batches=0``), at the end of each training epoch (said once); and a
        warning when ``every_n_epochs`` exceeds ``max_epochs`` (then only the last epoch is measured)."""
        no_step = not is_overridden("validation_step", pl_module)
        self._at_train_end = no_step or trainer.limit_val_batches == 0
        if self._at_train_end:
            why = f"{type(pl_module).__name__} has no `validation_step`" if no_step else "`limit_val_batches=0`"
            rank_zero_info(f"GeneratedSamples: {why}, so the samples are measured at the end of each training epoch "
                           f"(every_n_epochs={self.every_n_epochs}) instead of each validation epoch.")
        epochs = trainer.max_epochs
        if epochs is not None and 0 < epochs < self.every_n_epochs:
            rank_zero_warn(f"GeneratedSamples: every_n_epochs={self.every_n_epochs} never comes within "
                           f"max_epochs={epochs}: only the last epoch is measured. Pass every_n_epochs <= {epochs}.")

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
        self._measure(trainer, pl_module)

    @override
    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Measure here when the fit has no validation loop (see `_check_schedule`)."""
        if getattr(self, "_at_train_end", False) and self.due(trainer):
            self._measure(trainer, pl_module)

    def _measure(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Draw, embed and report this epoch's samples (every rank)."""
        self.last_timings = dict.fromkeys(("sample", "embed", "update", "compute", "reference", "pictures"), 0.0)
        self.last_galleries = {}
        if self._kept is None:
            self._kept = KeptImages(self.gallery_modes, self.gallery_per_mode)
            for name in self._loaders if self.galleries else ():  # each reference searched whole by its galleries
                self._kept.search_whole(
                    name, partial(self._reference_features, trainer, pl_module, name),
                    partial(self._reference_rows, trainer, pl_module, name),
                )
        self.alongside.seconds = 0.0
        with outside_inference_mode():
            start = time.perf_counter()
            self._feed_references(trainer, pl_module)
            self.last_timings["reference"] = time.perf_counter() - start
            self._feed_samples(trainer, pl_module)
            values: dict[str, float] = {}
            for name, metric in self._reported.items():
                gallery = self._kept.view(name if name in self._loaders else None) if name in self.galleries else None
                if gallery is not None and metric.inputs == "conditional":
                    gallery = _PromptLabelled(gallery, self._prompt_labels)
                spectrum = self._spectrum(name, metric, trainer.current_epoch)
                values.update(
                    report(
                        trainer, pl_module, name, metric, self.log_prefix, gallery, spectrum, self.last_timings,  # type: ignore[arg-type]
                        self.last_galleries, self.log_detail, self.print_epoch_line,
                    )
                )
            # torchmetrics syncs these metrics itself
            values.update(self.alongside.report(trainer, pl_module, self.log_prefix, self.seed))
            self.last_timings["alongside"] = self.alongside.seconds
        self.last_values = values
        self.history[trainer.current_epoch] = values
        self._kept.clear("samples")
        self._print_line(trainer)

    def _print_line(self, trainer: L.Trainer) -> None:
        """The epoch's line (`epoch_line`), kept as ``last_line`` and printed on rank 0 unless turned off."""
        self.last_line = epoch_line(self.log_prefix, trainer.current_epoch, self.last_values, self.last_galleries)
        if self.print_epoch_line and self.last_values:
            rank_zero_info(self.last_line)

    def _spectrum(self, name: str, metric: ReportedMetric, epoch: int) -> SpectrumFn:
        """The report's picture of ``metric``: a two-sample test's statistic and p-value over epochs
        (`test_history`), else the metric's own spectrum (``"spectrum"``; none for a plain torchmetrics metric)."""
        history = partial(self.test_history, name, epoch, TEST_LEVEL)

        def draw(reading: Any, values: dict[str, float]) -> Optional[tuple[str, Any]]:
            drawn = history(values)
            if drawn is None and not isinstance(metric, PlainMetric):
                drawn = "spectrum", cast(PicturedReading, reading).plot_spectrum()[0]
            return drawn

        return draw

    def test_history(self, name: str, epoch: int, level: float, values: Mapping[str, float]) -> Optional[tuple]:
        """``("over_epochs", figure)``: a two-sample test's statistic (``{name}/mmd2``) and p-value (logged as
        ``{name}/minus_log10_p``, drawn as p on a log axis) at every measured epoch of `history` and this one
        (``values``); ``None`` for a metric with no p-value (its own spectrum is drawn instead)."""
        from lightning_spectral.pictures.plots import plot_test_history

        def series(records: Mapping[str, float], key: str) -> dict[str, float]:
            """``{"": value}``, or ``{i: value}`` per bandwidth (``{key}_{i}``)."""
            found = {"": records[key]} if key in records else {}
            found.update({k[len(key) + 1 :]: v for k, v in records.items()
                          if k.startswith(f"{key}_") and k[len(key) + 1 :].isdigit()})
            return found

        statistic_key, p_key = f"{name}/mmd2", f"{name}/minus_log10_p"
        if not series(values, p_key):
            return None
        records = {**self.history, epoch: dict(values)}
        epochs = sorted(records)
        statistic: dict[str, list[float]] = {}
        p_value: dict[str, list[float]] = {}
        for target, key, label in ((statistic, statistic_key, "MMD^2"), (p_value, p_key, "p-value")):
            parts = sorted({part for e in epochs for part in series(records[e], key)}, key=lambda p: (len(p), p))
            for part in parts:
                line = label if part == "" else f"bandwidth {part}"
                points = [series(records[e], key).get(part, float("nan")) for e in epochs]
                target[line] = [10.0 ** -v for v in points] if target is p_value else points
        return "over_epochs", plot_test_history(epochs, statistic, p_value, level, title=f"{self.log_prefix}{name}")

    @override
    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        super().teardown(trainer, pl_module, stage)
        self._kept = None  # the kept images and the loaders that hold the trainer go with the run

    # ---- feeding -----------------------------------------------------------------------------------------------
    def _sampler(self, pl_module: L.LightningModule, n: Any, generator: torch.Generator) -> Tensor:
        if isinstance(self.sample, str):
            return getattr(pl_module, self.sample)(n, generator=generator)
        return self.sample(pl_module, n, generator)

    def _prompts_of(self, ids: Tensor) -> Tensor:
        """The prompts the module is asked for, for global sample ids."""
        if isinstance(self.prompts, Tensor):
            return self.prompts[ids % len(self.prompts)]
        return self.prompts(ids)  # type: ignore[misc]

    def _conditional_inputs(self, ids: Tensor, device: torch.device) -> tuple[Tensor, Optional[Tensor]]:
        """What conditional metrics see of the samples' prompts, and their labels (the prompts' indices, or the
        integer prompts themselves)."""
        if isinstance(self.prompts, Tensor):
            index = ids % len(self.prompts)
            seen = self.prompts if self.prompt_embeddings is None else self.prompt_embeddings
            labels = None if not seen.is_floating_point() else index
            return seen[index].to(device), labels
        return torch.as_tensor(self.prompts(ids)).to(device), None  # type: ignore[misc]

    def _prompt_labels(self, ids: Tensor) -> Tensor:
        """The label a conditional metric keeps for each global sample id (for its galleries)."""
        prompts, labels = self._conditional_inputs(ids, torch.device("cpu"))
        return labels if labels is not None else prompts.long()

    def _share(self, trainer: L.Trainer) -> int:
        """Images this rank keeps per stream for galleries."""
        return math.ceil(self.max_gallery_images / trainer.world_size) if self.galleries else 0

    def _reference_batches(
        self, trainer: L.Trainer, pl_module: L.LightningModule, name: str, embed: bool = True
    ) -> Iterator[Any]:
        """``(embeddings, images, labels)`` of this rank's share of reference ``name`` (no embeddings unless
        ``embed``)."""
        for batch in shard_loader(self._loaders[name], trainer.global_rank, trainer.world_size):
            images = to_device(select(batch, self.image_key, "image_key"), pl_module.device)
            labels = None if self.label_key is None else torch.as_tensor(select(batch, self.label_key, "label_key"))
            yield self.feature(images, f"references[{name!r}] images") if embed else None, images, labels

    def _reference_features(self, trainer: L.Trainer, pl_module: L.LightningModule, name: str) -> Iterator[Any]:
        """``(embeddings, global ids)`` of every image of this rank's share of reference ``name`` (rank ``r``'s
        ``k``-th image has the global id ``k * world_size + r``), each image's fingerprint kept for
        `_reference_rows`. The extractor is frozen, so a pass's embeddings are kept (on the CPU) for later epochs,
        and later runs with the same loader object, while they take at most `KEPT_REFERENCE_BYTES`; a larger
        reference, or another loader (a datamodule's method gives a new one each run), is embedded again."""
        loader = self._loaders[name]
        if name in self._features and self._features[name][0] is loader:
            for z, ids in self._features[name][1]:
                yield z.to(pl_module.device), ids
            return
        ids, prints, size = [], [], 0
        kept: Optional[list[tuple[Tensor, Tensor]]] = []
        for batch_ids, (z, images, _) in self._numbered(trainer, pl_module, name, embed=True):
            ids.append(batch_ids)
            prints.append(_fingerprints(images))
            size += z.numel() * z.element_size()
            kept = kept if kept is not None and size <= KEPT_REFERENCE_BYTES else None
            if kept is not None:
                kept.append((z.detach().cpu(), ids[-1]))
            yield z, ids[-1]
        self._prints[name] = (torch.cat(ids), torch.cat(prints)) if ids else None
        if kept is not None:  # the whole pass was read, and it fits
            self._features[name] = (loader, kept)

    def _reference_rows(
        self, trainer: L.Trainer, pl_module: L.LightningModule, name: str, wanted: Tensor
    ) -> list[tuple[Tensor, Tensor, Tensor, Optional[Tensor]]]:
        """This rank's rows ``(no features, ids, images, labels)`` of reference ``name`` among the global ids
        ``wanted``, from one pass without embedding; each the image `_reference_features` saw under its id.

        Raises:
            RuntimeError: the reference loader gave another image under an id (it shuffles), naming the fix.
        """
        rows = []
        for ids, (_, images, labels) in self._numbered(trainer, pl_module, name, embed=False):
            keep = torch.isin(ids, wanted.cpu())
            if bool(keep.any()):
                keep_on = keep.to(images.device)
                rows.append((torch.zeros(int(keep.sum()), 0), ids[keep], images[keep_on],
                             None if labels is None else labels[keep.to(labels.device)]))
        seen = self._prints.get(name)
        for _, ids, images, _ in rows:
            if seen is None or not torch.equal(seen[1][torch.isin(seen[0], ids)], _fingerprints(images)):
                raise RuntimeError(
                    f"GeneratedSamples: references[{name!r}] gave other images on a second pass (a shuffling loader), "
                    "so its gallery cannot show the samples it found; pass a loader with `shuffle=False`."
                )
        return rows

    def _numbered(
        self, trainer: L.Trainer, pl_module: L.LightningModule, name: str, embed: bool
    ) -> Iterator[tuple[Tensor, Any]]:
        """``(global ids (N,), (embeddings, images, labels))`` over this rank's share: rank ``r``'s ``k``-th image has
        the id ``k * world_size + r``."""
        count = 0
        for batch in self._reference_batches(trainer, pl_module, name, embed=embed):
            rows = len(batch[1])
            yield (count + torch.arange(rows)) * trainer.world_size + trainer.global_rank, batch
            count += rows

    def _feed_references(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Embed each reference into the metrics that hold none (a collective: every rank asks every metric); metrics
        naming the same reference share one pass."""
        groups: dict[Any, list[str]] = {}
        for name, metric in self._reported.items():
            if name not in self._loaders:
                continue
            held = metric.sample_count(real=True)
            if held == 0:
                value = self.references[name]
                groups.setdefault(value if isinstance(value, str) else id(value), []).append(name)
        for name in self.alongside.needing_reference():  # the same pass: the images, with real=True
            value = self.references[name]
            groups.setdefault(value if isinstance(value, str) else id(value), []).append(name)
        for names in groups.values():
            self.reference_passes += 1
            spectral = [name for name in names if name in self._reported]
            along = [name for name in names if name in self.alongside]
            for z, images, _ in self._reference_batches(trainer, pl_module, names[0], embed=bool(spectral)):
                for name in spectral:
                    feed(self._reported[name], z, real=True)
                if along:
                    self.alongside.update(images, along, real=True)

    def _feed_samples(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        keeps = self._kept is not None and self._share(trainer) > 0
        if keeps:
            self._kept.open("samples")  # type: ignore[union-attr]
        chunks = draw_samples(
            self._sampler, pl_module, self.n_samples, self.sample_batch_size, self.seed,
            trainer.global_rank, trainer.world_size, None if self.prompts is None else self._prompts_of,
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
            for metric in self._reported.values():
                conditional = metric.inputs == "conditional"
                prompts, labels = self._conditional_inputs(ids, z.device) if conditional else (None, None)
                feed(metric, z, prompts, labels=labels)
            self.last_timings["sample"] += sampled - start
            self.last_timings["embed"] += embedded - sampled
            self.last_timings["update"] += time.perf_counter() - embedded
            if self.alongside:
                self.alongside.update(images)  # the same images, no second sampling (timed as "alongside")
            # the samples of global id < max_gallery_images, wherever they were drawn: the same set for any
            # number of ranks, so the galleries (and the shares counted over them) do not depend on the sharding
            kept = ids < self.max_gallery_images
            if keeps and bool(kept.any()):
                self._kept.keep("samples", z[kept], ids[kept], images[kept])  # type: ignore[union-attr]

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
        """Restore `state_dict`'s output, checked whole first (a refused state leaves the callback as it was).

        Raises:
            ValueError: a missing key or metric, a damaged history, or a metric that refuses its state; named, with
                the fix.
        """
        check_saved_state(state_dict, ("metrics", "history", "last_values"), self.owner, self.state_key)
        last_values = saved_mapping(state_dict, "last_values", self.owner, self.state_key)
        saved = saved_mapping(state_dict, "history", self.owner, self.state_key)
        try:
            history = {int(epoch): dict(values) for epoch, values in saved.items()}
        except (TypeError, ValueError) as error:
            raise ValueError(
                f"{self.owner}.load_state_dict: the saved `history` must map epochs to {{name: value}} dicts ({error})."
                " " + refusal_fix(self.owner, self.state_key)
            ) from error
        load_all_or_none(self.metrics, state_dict["metrics"], self.owner, self.state_key)
        self.history = history
        self.last_values = dict(last_values)


def _check_prompts(prompts: Any, embeddings: Any) -> tuple[Any, Optional[Tensor]]:
    """``prompts``: ``None``, a callable, or a non-empty tensor of ``(P,)`` integer labels or ``(P, d)`` finite
    embeddings; ``embeddings``: ``None`` or ``(P, d_t)`` finite floats for tensor prompts.

    Raises:
        ValueError: naming the argument and the fix.
    """
    if isinstance(prompts, (list, tuple)) and all(isinstance(p, int) and not isinstance(p, bool) for p in prompts):
        prompts = torch.tensor(prompts, dtype=torch.long)
    if prompts is None or callable(prompts):
        if embeddings is not None:
            raise ValueError(
                "GeneratedSamples: `prompt_embeddings` belong to a tensor of `prompts` (row i embeds prompt i); "
                "pass `prompts=` as a tensor, or let fn(ids) return what the metrics should see."
            )
        return prompts, None
    if not isinstance(prompts, Tensor) or prompts.numel() == 0 or prompts.ndim not in (1, 2):
        raise ValueError(
            "GeneratedSamples: `prompts` must be a non-empty tensor of (P,) integer labels or (P, d) prompt "
            f"embeddings, or fn(ids) -> prompts, got {type(prompts).__name__} "
            f"{tuple(prompts.shape) if isinstance(prompts, Tensor) else ''}."
        )
    integer = not prompts.is_floating_point() and prompts.dtype != torch.bool
    if (prompts.ndim == 1) != integer or (prompts.is_floating_point() and not bool(torch.isfinite(prompts).all())):
        raise ValueError(
            "GeneratedSamples: `prompts` must be (P,) integer labels or (P, d) finite float embeddings, got dtype "
            f"{prompts.dtype} and shape {tuple(prompts.shape)}."
        )
    if integer and bool((prompts < 0).any()):
        raise ValueError("GeneratedSamples: integer `prompts` are class labels and must be >= 0.")
    if embeddings is not None:
        if (
            not isinstance(embeddings, Tensor) or embeddings.ndim != 2 or embeddings.shape[0] != prompts.shape[0]
            or not embeddings.is_floating_point() or not bool(torch.isfinite(embeddings).all())
        ):
            raise ValueError(
                f"GeneratedSamples: `prompt_embeddings` must be a finite float tensor ({prompts.shape[0]}, d_t), one "
                "row per prompt."
            )
        embeddings = embeddings.detach().cpu()
    return prompts.detach().cpu(), embeddings


#: The most bytes of a reference's embeddings `GeneratedSamples` keeps between measured epochs for its galleries
#: (per rank): 256 MiB, e.g. 32,768 rows of 2,048 float32 features; a larger reference is embedded again each time.
KEPT_REFERENCE_BYTES = 2**28


def _fingerprints(images: Tensor) -> Tensor:
    """One number per image (N,): its pixels' sum, in float64 on the CPU, to tell two passes' images apart."""
    return images.detach().flatten(1).double().sum(1).cpu()


class _PromptLabelled:
    """A gallery view whose ``"samples"`` batches carry each sample's prompt label: ``((features, labels), ids)``."""

    def __init__(self, inner: Any, labels_of: Callable[[Tensor], Tensor]) -> None:
        self.inner, self.labels_of = inner, labels_of
        self.modes, self.per_mode = inner.modes, inner.per_mode

    def batches(self, stream: str) -> Optional[list[tuple[Any, Tensor]]]:
        batches = self.inner.batches(stream)
        if batches is None or stream != "samples":
            return batches
        return [((features, self.labels_of(ids)), ids) for features, ids in batches]

    def images(self, trainer: L.Trainer, stream: str, ids: Tensor) -> tuple[Tensor, Optional[Tensor]]:
        return self.inner.images(trainer, stream, ids)
