"""DriftMonitor: which clusters of a probe set the fine-tuned encoder no longer makes, measured every epoch.

At the start of ``fit`` the callback embeds a probe set with the starting encoder and keeps those embeddings (the
start, ``start_``: ``4 N d + 8 N`` bytes for N probe samples of width d, in its checkpoint state); every
validation epoch it embeds the probe again with the current encoder and compares the two embeddings of the same
samples with [`SPECDivergence`][lightning_spectral.metrics.SPECDivergence] (SPEC, Jalali et al., ICML 2025):
positive eigenvalues of $(K_{start} - K_{now}) / n$ are clusters the start grouped and the current encoder lost,
negative ones groupings the fine-tuning made.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Callable, Optional, Union

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, IterableDataset
from torch.utils.data.dataloader import default_collate
from typing_extensions import override

from lightning_spectral._checks import (
    check_bool,
    check_embedding_source,
    check_features,
    check_positive_int,
    check_seed,
    check_selector,
)
from lightning_spectral.callbacks.embedding_callback import EmbeddingCallback, outside_inference_mode
from lightning_spectral.callbacks.embeddings import BatchSelector, EmbeddingFn, as_embedding, select
from lightning_spectral.callbacks.epoch_line import epoch_line
from lightning_spectral.callbacks.galleries import IndexedImages, as_image
from lightning_spectral.callbacks.report import log_values, report
from lightning_spectral.callbacks.saved_state import check_saved_state, refusal_fix, saved_mapping, state_key_of
from lightning_spectral.functional.modes import check_candidates_memory
from lightning_spectral.kernels.bandwidth import check_sigma
from lightning_spectral.kernels.by_name import KERNELS
from lightning_spectral.metrics.auto_bandwidth import reference_bandwidth
from lightning_spectral.metrics.headline import headline_values
from lightning_spectral.metrics.protocol import feed
from lightning_spectral.metrics.reading import ModeGallery, kept_summary
from lightning_spectral.metrics.spec import SPECDivergence
from lightning_spectral.metrics.spec_reading import SPECReading
from lightning_spectral.sync.collectives import all_gather_rows

#: ``sigma="auto"``: each embedding L2-normalised, its bandwidth this factor times the median pairwise distance of
#: the probe's normalised rows (a local kernel on the unit sphere, ``exp((cos - 1) / sigma^2)``, whose top lost
#: eigenvectors pick single classes; the evidence is docs/benchmarks/alignment-recipe.md "Does the top lost
#: cluster name a forgotten class?").
SPHERE_FACTOR = 0.15

__all__ = ["DriftMonitor"]

#: Names of the two sides of the comparison in galleries and logged values.
LOST, NEW = "lost", "new"


class _Numbered(Dataset):
    """A map-style dataset whose items carry their position: ``(item, i)``."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int) -> tuple[Any, int]:
        return self.dataset[i], i


class _NumberedCollate:
    """Collate ``(item, i)`` pairs into ``(batch, ids (B,))`` with the probe loader's own collate function."""

    def __init__(self, collate: Callable[[list], Any]) -> None:
        self.collate = collate

    def __call__(self, items: list[tuple[Any, int]]) -> tuple[Any, Tensor]:
        return self.collate([item for item, _ in items]), torch.tensor([i for _, i in items], dtype=torch.long)


class _Rows(Dataset):
    """The rows of a tensor probe as a dataset (a row: one sample's encoder input)."""

    def __init__(self, rows: Tensor) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> Tensor:
        return self.rows[i]


class _OfBatch:
    """``selector`` applied to the probe batch inside a numbered ``(batch, ids)`` pair (picklable for ddp_spawn)."""

    def __init__(self, selector: BatchSelector, what: str) -> None:
        self.selector, self.what = selector, what

    def __call__(self, pair: tuple[Any, Tensor]) -> Any:
        return select(pair[0], self.selector, self.what)


class _EmbedBatch:
    """``fn(pl_module, batch)`` of the probe batch inside a numbered ``(batch, ids)`` pair."""

    def __init__(self, fn: EmbeddingFn) -> None:
        self.fn = fn

    def __call__(self, pl_module: L.LightningModule, pair: tuple[Any, Tensor]) -> Tensor:
        return self.fn(pl_module, pair[0])


class _DriftReading(SPECReading):
    """A reading of SPEC-diff of (start, now) whose summary adds the top eigenvalues of both signs (and their standard
    errors ``lost_se``, ``new_se``) and whose galleries are named for drift: ``lost`` (the start groups, the current
    encoder does not) and ``new`` (the reverse)."""

    settings = (*SPECReading.settings, "top")

    @kept_summary
    def summary(self) -> dict[str, Tensor]:
        values = super().summary()  # the divergence, its se, n (and n_features)
        values[LOST] = self.clusters(self.top, 1).eigenvalues
        values[NEW] = self.clusters(self.top, -1).eigenvalues.abs()
        if self.noise_draws:  # each eigenvalue's se (`clusters_standard_error`)
            values[f"{LOST}_se"] = self.clusters_standard_error(self.top, 1)
            values[f"{NEW}_se"] = self.clusters_standard_error(self.top, -1)
        return values

    def headline(self, summary: Optional[Mapping[str, Any]] = None) -> dict[str, Tensor]:
        """SPEC-diff with its se, and the top lost / new clusters' eigenvalues (``lost_0``, ``lost_0_se``, ...)."""
        summary = self.summary() if summary is None else summary
        values = super().headline(summary)
        for side in (LOST, NEW):
            values.update(headline_values(side, summary[side], summary.get(f"{side}_se")))
        return values

    def galleries(
        self, batches: Iterable, k: int, per_mode: int, reference_batches: Optional[Iterable] = None
    ) -> dict[str, ModeGallery]:
        renamed = {}
        for name, gallery in super().galleries(batches, k, per_mode, reference_batches).items():
            lost = name == "a_only"
            labels = [
                label.split("(")[0] + ("(the start groups, the current encoder does not)" if lost else
                                       "(the current encoder groups, the start did not)")
                for label in gallery.labels
            ]
            title = "clusters the fine-tuned encoder lost" if lost else "groupings the fine-tuning made"
            renamed[LOST if lost else NEW] = gallery._replace(labels=labels, title=title)
        return renamed


class _DriftDivergence(SPECDivergence):
    """SPECDivergence of (start, now) read as a [`_DriftReading`][lightning_spectral.callbacks.drift_monitor._DriftReading]
    (``top``: the lost / new clusters its summary reports)."""

    reading_class = _DriftReading

    def __init__(self, *args: Any, top: int = 3, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.top = top


def _sphere_bandwidth(rows: Tensor) -> Optional[float]:
    """``SPHERE_FACTOR`` x the median distance of every rank's normalised probe rows (a collective, called with a
    probe of at least 2 rows), or ``None`` when most of them are identical (a collapsed embedding, whose kernel is 1
    among its rows at any bandwidth, so the other side's serves)."""
    try:
        return reference_bandwidth(rows, "DriftMonitor", factor=SPHERE_FACTOR)
    except ValueError:  # `median_bandwidth`'s zero median: every rank holds the same gathered rows, so all raise
        return None


class DriftMonitor(EmbeddingCallback):
    r"""Every validation epoch, compares the current encoder's embedding of a probe set to the starting encoder's.

    At ``fit`` start the probe is embedded with the starting encoder (in eval mode, without gradients); the
    embeddings, gathered over DDP ranks and sorted by sample id, are the start ``start_`` ((N, d) float32 with
    ``start_ids_`` (N,)): ``4 N d + 8 N`` bytes, kept in the checkpoint, so a resumed run measures against the start,
    not against the weights it resumed from; a probe whose start needs more than ``max_state_bytes`` is refused by
    name. At the end of every validation epoch each rank embeds its share of the probe (no sample twice, as
    [`embed_loader`][lightning_spectral.callbacks.EmbeddingCallback.embed_loader]) and streams the pairs
    (start, now) of the same samples into a
    [`SPECDivergence`][lightning_spectral.metrics.SPECDivergence] (the Gaussian kernel's random-feature route,
    ``(4r)^2``, or the cosine kernel's ``(2d)^2`` sums: bounded in N), all-reduced under DDP, and reported by
    [`report`][lightning_spectral.callbacks.report.report] (one sync, values, galleries, spectrum). Logged under
    ``log_prefix`` (``drift/``):

    - ``spec/spec_diff`` (with ``_se``): SPEC-diff $\max_i |\lambda_i|$ of $\Lambda = (K_{start} - K_{now}) / n$;
    - ``spec/lost_{i}`` (with ``_se``): the ``top_clusters`` largest positive eigenvalues (clusters the start
      grouped and the current encoder lost), ``spec/new_{i}``: the largest ``|negative|`` ones (new groupings);
    - with ``log_detail``, every value of the metric's summary as ``spec/detail/{key}``;
    - with ``images`` and a logger that takes pictures: galleries ``spec/lost`` and ``spec/new`` (every
      logger, through [`log_picture`][lightning_spectral.pictures.loggers.log_picture]) and the spectrum;
    - with ``class_prompts``, ``text_encoder`` and ``labels``: zero-shot accuracy of the probe ``zero_shot_acc``
      and ``zero_shot_acc_change`` (now - start); the start's (``zero_shot_start_``, the same every epoch) with
      ``log_detail`` as ``detail/zero_shot_acc_start``.

    [`drifted`][lightning_spectral.callbacks.DriftMonitor.drifted] names the members of the most lost clusters
    of the last validation epoch. Memory during fit: the start, this rank's share of the current embeddings
    (at most the start's size) and the metric's sums.

    Args:
        probe: the probe set: a ``DataLoader`` (typically held-out data of the pre-training distribution, in any
            order), the name of a datamodule method returning one (e.g. ``"val_dataloader_for_eval"``), or a
            tensor (N, ...) of encoder inputs (its rows are the batches, fed as they are).
        embedding: dotted name of the encoder submodule, or ``fn(pl_module, batch) -> Tensor (N, d)``.
        batch_input: what a loader's batch feeds the submodule (see
            [`EmbeddingSource`][lightning_spectral.callbacks.EmbeddingSource]).
        index: where a loader's batch holds sample ids (e.g. ``"index"``): the ids of galleries, ``images``
            lookups and `drifted`; ``None``: positions in the loader's dataset (a map-style dataset).
        kernel: ``"gaussian"`` (default) or ``"cosine"``.
        sigma: ``kernel="gaussian"``'s bandwidth: ``"auto"`` (default) L2-normalises both embeddings and gives
            each ``SPHERE_FACTOR`` (0.15) x the median pairwise distance of its normalised probe rows, fixed every
            validation epoch from the probe (the same on any sharding); a number: the bandwidth of both raw
            embeddings. The cosine kernel's top lost clusters are directions that mix classes; this local
            kernel's are single classes (docs/benchmarks/alignment-recipe.md).
        n_frequencies: random frequencies ``r`` per embedding for the Gaussian kernel (256: the top lost cluster
            named as at 512, at an eighth of the reading's cost; docs/benchmarks/alignment-recipe.md).
        seed: frequency seed.
        batch_size: rows per batch of a tensor probe.
        top_clusters: eigenvalues of each sign logged, and rows per gallery.
        gallery_per_cluster: images per gallery row.
        images: ``fn(sample_id) -> image (C, H, W)``, an indexable dataset or the name of a datamodule attribute
            (e.g. ``"image_of"``); ``None``: no galleries.
        class_prompts: one caption per class (or the name of a datamodule attribute holding them, e.g.
            ``"prompts"``), for zero-shot accuracy.
        text_encoder: dotted name of the text submodule, fed ``pl_module.tokenizer(class_prompts)`` (open_clip's
            convention), or ``fn(pl_module, class_prompts) -> Tensor (C, d)``.
        labels: where a loader's batch holds class ids (e.g. ``"label"``; -1 = unknown), or the (N,) labels of a
            tensor probe: the zero-shot accuracy's truth, and (alone too) the class and purity of each gallery row
            (its images' commonest class), in the pictures, their text and, with ``log_detail``, as scalars.
        max_state_bytes: the largest start kept (``4 N d + 8 N`` bytes).
        log_prefix: prefix of the logged names.
        log_detail: also log every value of the divergence's ``summary()`` (``spec/detail/{key}``) and each
            gallery row's share.
        print_epoch_line: print one line per measured epoch through Lightning's logger (rank 0): the headline
            numbers, and the modes' classes where the gallery images carry them
            ([`epoch_line`][lightning_spectral.callbacks.epoch_line.epoch_line]), and show the headline values (not
            their se) in the progress bar's postfix where one is shown; ``False``: neither.

    Examples:
        >>> import torch
        >>> monitor = DriftMonitor(torch.randn(100, 8), embedding="encoder")
        >>> monitor.state_bytes(n=100, d=16)
        7200
    """

    def __init__(
        self,
        probe: Union[DataLoader, Tensor, str],
        *,
        embedding: Union[str, EmbeddingFn] = "encoder",
        batch_input: BatchSelector = None,
        index: BatchSelector = None,
        kernel: str = "gaussian",
        sigma: Union[float, str] = "auto",
        n_frequencies: int = 256,
        seed: int = 0,
        batch_size: int = 256,
        top_clusters: int = 3,
        gallery_per_cluster: int = 8,
        images: Union[str, Callable[[int], Tensor], Any, None] = None,
        class_prompts: Union[str, Sequence[str], None] = None,
        text_encoder: Union[str, Callable[[L.LightningModule, list[str]], Tensor], None] = None,
        labels: Union[BatchSelector, Tensor] = None,
        max_state_bytes: int = 2**28,
        log_prefix: str = "drift/",
        log_detail: bool = False,
        print_epoch_line: bool = True,
    ) -> None:
        owner = "DriftMonitor"
        check_embedding_source(embedding, "embedding", owner)
        check_selector(batch_input, "batch_input", owner)
        check_selector(index, "index", owner)
        is_tensor = isinstance(probe, Tensor)
        if is_tensor:
            check_features(probe.flatten(1) if probe.ndim > 1 else probe[:, None], "probe", owner=owner)
            if probe.shape[0] == 0:
                raise ValueError(
                    "DriftMonitor: the `probe` tensor has no rows; pass the probe samples' encoder inputs."
                )
        elif isinstance(probe, bytes) or not isinstance(probe, (str, Iterable)):
            raise ValueError(
                "DriftMonitor: `probe` must be a DataLoader, the name of a datamodule method returning one, or a "
                f"tensor (N, ...) of encoder inputs, got {type(probe).__name__}."
            )
        if kernel not in KERNELS:
            raise ValueError(f"DriftMonitor: `kernel` must be one of {KERNELS}, got {kernel!r}.")
        # None: "auto" (the default; ignored by the cosine kernel)
        fixed_sigma = check_sigma(sigma) if kernel == "gaussian" else None
        if images is not None and not (isinstance(images, str) or callable(images) or hasattr(images, "__getitem__")):
            raise ValueError(
                "DriftMonitor: `images` must be `fn(sample_id) -> image`, an indexable dataset or the name of a "
                f"datamodule attribute, got {type(images).__name__}."
            )
        if (class_prompts is not None) != (text_encoder is not None) or (class_prompts is not None and labels is None):
            raise ValueError(
                "DriftMonitor: zero-shot accuracy needs `class_prompts`, `text_encoder` and `labels` together; "
                "pass all three (or none; `labels` alone names the classes under the galleries)."
            )
        if class_prompts is not None and not isinstance(class_prompts, str):
            if not (isinstance(class_prompts, Sequence) and class_prompts and all(
                isinstance(p, str) for p in class_prompts
            )):
                raise ValueError(
                    "DriftMonitor: `class_prompts` must be a non-empty list of captions (one per class) or the "
                    f"name of a datamodule attribute holding them, got {class_prompts!r}."
                )
        named = isinstance(text_encoder, str) and bool(text_encoder)
        if text_encoder is not None and not (named or callable(text_encoder)):
            raise ValueError(
                "DriftMonitor: `text_encoder` must be the name of the text submodule (e.g. 'text_tower') or "
                f"`fn(pl_module, prompts) -> Tensor`, got {text_encoder!r}."
            )
        if is_tensor and labels is not None:
            if not isinstance(labels, Tensor) or labels.shape != (probe.shape[0],) or labels.is_floating_point():
                raise ValueError(
                    "DriftMonitor: with a tensor probe `labels` must be an integer tensor of shape "
                    f"({probe.shape[0]},), "
                    f"got {type(labels).__name__} {tuple(getattr(labels, 'shape', ()))}."
                )
        elif labels is not None:
            check_selector(labels, "labels", owner)
        if not isinstance(log_prefix, str):
            raise ValueError(f"DriftMonitor: `log_prefix` must be a string (e.g. 'drift/'), got {log_prefix!r}.")
        # A numbered probe's batches are (batch, ids): the selectors read the batch inside.
        if callable(embedding):
            source: Union[str, EmbeddingFn] = _EmbedBatch(embedding)
        else:
            source = embedding
        inner = None if is_tensor else batch_input
        super().__init__(source, _OfBatch(inner, "batch_input"), owner=owner)
        self.embedding = embedding
        self.probe = probe
        self.batch_input = batch_input
        self.index = index
        self.kernel = kernel
        self.sigma = fixed_sigma
        self.n_frequencies = check_positive_int(n_frequencies, "n_frequencies")
        self.seed = check_seed(seed)
        self.batch_size = check_positive_int(batch_size, "batch_size")
        self.top_clusters = check_positive_int(top_clusters, "top_clusters")
        self.gallery_per_cluster = check_positive_int(gallery_per_cluster, "gallery_per_cluster")
        check_candidates_memory(owner, self.top_clusters, self.gallery_per_cluster, "gallery_per_cluster")
        self.images = images
        self.class_prompts = class_prompts
        self.text_encoder = text_encoder
        self.labels = labels
        self.max_state_bytes = check_positive_int(max_state_bytes, "max_state_bytes")
        self.log_prefix = log_prefix
        self.log_detail = check_bool(log_detail, "log_detail")
        self.print_epoch_line = check_bool(print_epoch_line, "print_epoch_line")
        self.last_line = ""  # the last measured epoch's line
        # fitted state (trailing underscore): the start, in the checkpoint
        self.start_: Optional[Tensor] = None  # (N, d) float32, rows sorted by id
        self.start_ids_: Optional[Tensor] = None  # (N,) int64, ascending
        self.zero_shot_start_: float = math.nan
        self.last_values: dict[str, float] = {}
        self.timings: dict[str, float] = {}  # seconds of the last fit start ("start") and validation epoch
        self._loader: Optional[Iterable] = None  # the numbered probe, resolved at setup
        self._lookup: Any = None
        self._prompts: Optional[list[str]] = None
        self._kept: list[tuple[Tensor, Tensor, Tensor]] = []  # this rank's (start, now, ids) of the last epoch
        self._sigmas: tuple[Optional[float], Optional[float]] = (fixed_sigma, fixed_sigma)  # of the last epoch
        self._compared = False  # a validation epoch of this process compared the probe (`drifted` needs its rows)

    @property
    @override
    def state_key(self) -> str:
        """``DriftMonitor{'embedding': ..., 'prefix': ...}``: the class, the embedding (its name, or the function's
        qualified name) and ``log_prefix``, so two monitors of different encoders or prefixes keep separate starts
        in one checkpoint (the form of Lightning's own keys, e.g. ``EarlyStopping{'monitor': ..., 'mode': ...}``)."""
        source = self.embedding
        embedding = source if isinstance(source, str) else getattr(source, "__qualname__", repr(source))
        return state_key_of(self, embedding=embedding, prefix=self.log_prefix)

    @staticmethod
    def state_bytes(n: int, d: int) -> int:
        """Bytes of the start kept for ``n`` probe samples of width ``d``: ``4 n d`` (float32) + ``8 n`` (ids)."""
        return 4 * n * d + 8 * n

    # ------------------------------------------------------------------ lifecycle

    @override
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        probe = self.resolve(trainer, self.probe, "probe", call=True)
        self._loader = self._numbered(probe)
        self._lookup = self.resolve(trainer, self.images, "images")
        if self.class_prompts is not None:
            prompts = self.resolve(trainer, self.class_prompts, "class_prompts")
            if not prompts or not all(isinstance(p, str) for p in prompts):
                raise ValueError(
                    f"DriftMonitor: `class_prompts`={self.class_prompts!r} gave {prompts!r}; one caption per class "
                    "is needed."
                )
            self._prompts = list(prompts)

    def _numbered(self, probe: Any) -> Iterable:
        """The probe as batches ``(batch, ids (B,))``."""
        if isinstance(probe, Tensor):
            return DataLoader(_Numbered(_Rows(probe)), batch_size=self.batch_size,
                              collate_fn=_NumberedCollate(default_collate))
        if not isinstance(probe, Iterable) or isinstance(probe, (str, bytes)):
            raise ValueError(
                f"DriftMonitor: `probe` resolved to a {type(probe).__name__}, not a DataLoader; pass a DataLoader, "
                "a datamodule method returning one, or a tensor."
            )
        numbered = (
            isinstance(probe, DataLoader)
            and not isinstance(probe.dataset, IterableDataset)
            and hasattr(probe.dataset, "__len__")
            and probe.batch_size is not None
        )
        if not numbered:
            if self.index is not None:
                return _WithIds(probe, self.index)
            raise ValueError(
                "DriftMonitor: the `probe` loader is not a DataLoader over a map-style dataset with a batch size, so "
                "its samples have no positions; pass `index`, where a batch holds its sample ids (e.g. 'index')."
            )
        # the probe's samples in dataset order, numbered (the order does not matter: pairs meet by id)
        return DataLoader(
            _Numbered(probe.dataset), batch_size=probe.batch_size, num_workers=probe.num_workers,
            collate_fn=_NumberedCollate(probe.collate_fn), pin_memory=probe.pin_memory,
            persistent_workers=probe.persistent_workers, worker_init_fn=probe.worker_init_fn,
        )

    @override
    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.start_ is not None:  # restored from a checkpoint: the start of the first run
            return
        began = time.perf_counter()
        was_training = pl_module.training
        pl_module.eval()
        try:
            with outside_inference_mode():
                start, ids, labels = self._embed_probe(trainer, pl_module, check_size=True)
                start_all, ids_all = self.gather(trainer, start.float()), self.gather(trainer, ids)
                order = ids_all.argsort()
                self.start_, self.start_ids_ = start_all[order].cpu(), ids_all[order].cpu()
                if bool((self.start_ids_[1:] == self.start_ids_[:-1]).any()):
                    raise ValueError(
                        "DriftMonitor: the `probe` repeats sample ids; `index` must give each probe sample its own id."
                    )
                if self._prompts is not None:
                    self.zero_shot_start_ = self._zero_shot(trainer, pl_module, start, labels)
        finally:
            pl_module.train(was_training)
        self.timings = {"start": time.perf_counter() - began}

    @override
    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or self.start_ is None:
            return
        began = time.perf_counter()
        timings: dict[str, float] = {}
        self._kept = []
        with outside_inference_mode():
            now, ids, labels = self._embed_probe(trainer, pl_module)
            start = self._start_of(ids).to(now.device)
            zero_shot_now = now
            if self.on_sphere:
                start, now = torch.nn.functional.normalize(start, dim=1), torch.nn.functional.normalize(now, dim=1)
                self._sigmas = self._sphere_bandwidths(start, now)
            metric = self._metric(pl_module.device)
            if len(ids):
                feed(metric, start, now)
                self._kept = [(start.cpu(), now.cpu(), ids.cpu())]
            values: dict[str, float] = {}
            if self._prompts is not None:
                accuracy = self._zero_shot(trainer, pl_module, zero_shot_now, labels)
                values = {"zero_shot_acc": accuracy, "zero_shot_acc_change": accuracy - self.zero_shot_start_}
                if self.log_detail:  # the start's accuracy: the same number every epoch
                    values["detail/zero_shot_acc_start"] = self.zero_shot_start_
                log_values(pl_module, {k: v for k, v in values.items() if math.isfinite(v)}, self.log_prefix)
            embedded = time.perf_counter()
            gallery = None
            if self._lookup is not None:
                lookup = self._lookup if labels is None else _Labelled(self._lookup, trainer, ids, labels)
                gallery = IndexedImages(lookup, self.top_clusters, self.gallery_per_cluster, paired=True)
                for kept_start, kept_now, kept_ids in self._kept:
                    gallery.keep(kept_start, kept_now, kept_ids)

            def spectrum(reading: Any, logged: dict[str, float]) -> tuple[str, Any]:
                return "spectrum", reading.plot_spectrum()[0]

            values.update(
                report(trainer, pl_module, "spec", metric, self.log_prefix, gallery, spectrum, timings,
                       self.last_galleries, self.log_detail, self.print_epoch_line)
            )
        self.last_values, self._compared = values, True
        self.timings = {"embed": embedded - began, **timings, "total": time.perf_counter() - began}
        self.last_line = epoch_line(self.log_prefix, trainer.current_epoch, values, self.last_galleries)
        if self.print_epoch_line and values:
            rank_zero_info(self.last_line)

    # ------------------------------------------------------------------ the comparison

    @property
    def on_sphere(self) -> bool:
        """``kernel="gaussian", sigma="auto"``: both embeddings L2-normalised, each with its own bandwidth."""
        return self.kernel == "gaussian" and self.sigma is None

    def _sphere_bandwidths(self, start: Tensor, now: Tensor) -> tuple[float, float]:
        """The epoch's (start, now) bandwidths: ``SPHERE_FACTOR`` x each side's median distance over every rank's
        L2-normalised probe rows ``start``, ``now`` (n, d) (a collective; `reference_bandwidth`'s sketch)."""
        assert self.start_ is not None
        # a probe of one sample has no distance (every rank holds the whole start, so all skip alike)
        sigma_start, sigma_now = (
            (_sphere_bandwidth(start), _sphere_bandwidth(now)) if len(self.start_) >= 2 else (None, None)
        )
        fallback = SPHERE_FACTOR * math.sqrt(2.0)  # the median distance of orthogonal unit vectors, times the factor
        return sigma_start or sigma_now or fallback, sigma_now or sigma_start or fallback

    def _metric(self, device: torch.device) -> _DriftDivergence:
        assert self.start_ is not None
        d = int(self.start_.shape[1])
        return _DriftDivergence(
            self.kernel, *self._sigmas, n_frequencies=self.n_frequencies, seed=self.seed, in_features=(d, d),
            top=self.top_clusters,
        ).to(device)

    def _embed_probe(
        self, trainer: L.Trainer, pl_module: L.LightningModule, check_size: bool = False
    ) -> tuple[Tensor, Tensor, Optional[Tensor]]:
        """This rank's share of the probe: embeddings (n, d), ids (n,) and labels (n,) or ``None``."""
        assert self._loader is not None
        parts, id_parts, label_parts = [], [], []
        total = len(self._loader.dataset) if isinstance(self._loader, DataLoader) else None  # type: ignore[arg-type]
        rows = 0
        for z, (batch, ids) in self.embed_loader(self._loader, trainer, pl_module):
            if z.shape[0] != len(ids):
                raise ValueError(
                    f"DriftMonitor: the encoder gave {z.shape[0]} embeddings for a probe batch of {len(ids)} samples."
                )
            if self.index is not None:  # the batch's own sample ids
                ids = torch.as_tensor(select(batch, self.index, "index")).long().flatten()
                if len(ids) != z.shape[0]:
                    raise ValueError(
                        f"DriftMonitor: `index`={self.index!r} gave {len(ids)} ids for {z.shape[0]} probe samples."
                    )
            rows += len(ids)
            if check_size:
                self._check_size(total if total is not None else rows * trainer.world_size, z.shape[1])
            parts.append(z.float())
            id_parts.append(ids.to(z.device).long().flatten())
            if self.labels is not None:
                label_parts.append(self._labels_of(batch, ids).to(z.device))
        if not parts:
            device = pl_module.device
            d = 0 if self.start_ is None else int(self.start_.shape[1])
            empty = torch.zeros(0, d, device=device)
            return empty, torch.zeros(0, dtype=torch.long, device=device), (
                torch.zeros(0, dtype=torch.long, device=device) if self.labels is not None else None
            )
        labels = torch.cat(label_parts) if label_parts else None
        return torch.cat(parts), torch.cat(id_parts), labels

    def _check_size(self, n: int, d: int) -> None:
        needed = self.state_bytes(n, d)
        if needed > self.max_state_bytes:
            raise ValueError(
                f"DriftMonitor: the `probe`'s start needs {needed:,} bytes ({n} samples x {d} floats + ids), more than "
                f"`max_state_bytes`={self.max_state_bytes:,}; pass a smaller probe (a few thousand samples suffice "
                "for clusters) or raise `max_state_bytes`."
            )

    def _labels_of(self, batch: Any, ids: Tensor) -> Tensor:
        if isinstance(self.labels, Tensor):
            return self.labels[ids.cpu()].long()
        return torch.as_tensor(select(batch, self.labels, "labels")).long().flatten()

    def _start_of(self, ids: Tensor) -> Tensor:
        """The start's rows of ``ids``."""
        assert self.start_ is not None and self.start_ids_ is not None
        known = self.start_ids_
        where = torch.searchsorted(known, ids.cpu()).clamp(max=max(len(known) - 1, 0))
        if len(ids) and not bool((known[where] == ids.cpu()).all()):
            raise ValueError(
                "DriftMonitor: the `probe` holds samples the start did not embed; the probe must stay the same "
                "samples for the whole fit (and across a resume)."
            )
        return self.start_[where]

    def _zero_shot(
        self, trainer: L.Trainer, pl_module: L.LightningModule, z: Tensor, labels: Optional[Tensor]
    ) -> float:
        """Zero-shot accuracy of this rank's probe embeddings ``z`` against the class prompts, over all ranks."""
        assert self._prompts is not None
        with torch.no_grad():
            if callable(self.text_encoder):
                text = self.text_encoder(pl_module, self._prompts)
            else:
                tokenizer = getattr(pl_module, "tokenizer", None)
                if tokenizer is None:
                    raise ValueError(
                        f"DriftMonitor: `text_encoder`={self.text_encoder!r} is fed `pl_module.tokenizer(prompts)`, "
                        "but the module has no `tokenizer`; pass `fn(pl_module, prompts) -> Tensor` instead."
                    )
                text = pl_module.get_submodule(self.text_encoder)(tokenizer(self._prompts).to(pl_module.device))
            text = as_embedding(text, "DriftMonitor(text_encoder)").float()
        counts = torch.zeros(1, 2, dtype=torch.float64, device=z.device)
        if labels is not None and len(labels):
            scores = torch.nn.functional.normalize(z, dim=1) @ torch.nn.functional.normalize(text, dim=1).T.to(z.device)
            known = labels >= 0
            counts[0, 0] = (scores.argmax(1)[known] == labels[known]).sum().double()
            counts[0, 1] = known.sum().double()
        total = self.gather(trainer, counts).sum(0)
        return float(total[0] / total[1]) if total[1] > 0 else math.nan

    def drifted(self, k: int = 3, per_cluster: int = 20) -> list[tuple[Tensor, Tensor]]:
        """The members of the ``k`` clusters the start grouped and the encoder of the last validation epoch lost
        most (largest positive eigenvalues of $(K_{start} - K_{now}) / n$), as
        [`SPECReading.top_samples`][lightning_spectral.metrics.spec_reading.SPECReading.top_samples].

        Returns:
            up to ``k`` pairs ``(ids (m,), scores (m,))``: sample ids of the probe (``index`` values, or
            positions), scores descending. A collective under DDP.

        Raises:
            RuntimeError: before the first validation epoch of a fit.
        """
        if self.start_ is None or not self._compared:
            raise RuntimeError(
                "DriftMonitor.drifted: no validation epoch has compared the probe yet; call it after `trainer.fit` "
                "(or `trainer.validate`) ran one."
            )
        metric = self._metric(self.start_.device)
        batches = [((start, now), ids) for start, now, ids in self._kept]
        for (start, now), _ in batches:
            metric.update(start, now)
        return metric.reading().top_samples(batches, k=k, sign=1, per_cluster=per_cluster)

    # ------------------------------------------------------------------ resume

    @override
    def state_dict(self) -> dict[str, Any]:
        """The start (``4 N d + 8 N`` bytes), the start's zero-shot accuracy and the last logged values."""
        return {
            "start": self.start_,
            "start_ids": self.start_ids_,
            "zero_shot_start": self.zero_shot_start_,
            "last_values": dict(self.last_values),
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the start, checked whole first (a refused state leaves the callback as it was).

        Raises:
            ValueError: a missing key or a damaged value, named with the fix.
        """
        required = ("start", "start_ids", "zero_shot_start", "last_values")
        check_saved_state(state_dict, required, self.owner, self.state_key)
        last_values = saved_mapping(state_dict, "last_values", self.owner, self.state_key)
        start, ids = state_dict["start"], state_dict["start_ids"]
        damaged = (start is None) != (ids is None) or (
            start is not None
            and not (isinstance(start, Tensor) and isinstance(ids, Tensor) and start.ndim == 2 and ids.ndim == 1
                     and start.shape[0] == ids.shape[0])
        )
        try:
            zero_shot_start = float(state_dict["zero_shot_start"])
        except (TypeError, ValueError):
            damaged = True
        if damaged:
            raise ValueError(
                f"{self.owner}.load_state_dict: the saved `start` must be an (N, d) tensor with its (N,) "
                "`start_ids` (or both None) and `zero_shot_start` a number. " + refusal_fix(self.owner, self.state_key)
            )
        self.start_, self.start_ids_ = start, ids
        self.zero_shot_start_ = zero_shot_start
        self.last_values = dict(last_values)


class _WithIds:
    """A probe loader whose batches hold their sample ids at ``index``: batches become ``(batch, ids)``."""

    def __init__(self, loader: Iterable, index: BatchSelector) -> None:
        self.loader, self.index = loader, index

    def __iter__(self) -> Any:
        for batch in self.loader:
            yield batch, torch.as_tensor(select(batch, self.index, "index")).long().flatten()


class _Labelled:
    """A gallery lookup whose items carry the probe's labels: ``(image, label)`` per sample id, the labels of every
    rank's shard gathered once (a collective under DDP); an id without a label (``-1``, or none) gives ``None``."""

    def __init__(self, lookup: Any, trainer: L.Trainer, ids: Tensor, labels: Tensor) -> None:
        pairs = torch.stack([ids.cpu().double(), labels.cpu().double()], 1)
        every = all_gather_rows(pairs, strategy=trainer.strategy)
        self.lookup = lookup
        self.labels = {int(i): int(label) for i, label in every.long().tolist() if label >= 0}

    def __call__(self, sample_id: int) -> tuple[Any, Optional[int]]:
        item = self.lookup(sample_id) if callable(self.lookup) else self.lookup[sample_id]
        return as_image(item), self.labels.get(int(sample_id))
