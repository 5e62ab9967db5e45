"""Any torchmetrics ``Metric`` fed the images a callback already holds, and logged beside the spectral metrics.

``GeneratedSamples(..., alongside={"fid": FrechetInceptionDistance(feature=extractor)})`` feeds FID the generated
images of the same sampling pass (``update(images, real=False)``) and the reference images of the same reference pass
(``update(images, real=True)``): FID / KID beside Vendi cost no second sampling pass.
[`AlongsideMetrics`][lightning_spectral.callbacks.alongside.AlongsideMetrics] holds such metrics for a callback: the
checks at construction, the feeding, the report (``compute()`` logged, ``reset()``).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Optional

import lightning as L
import torch
from torch import Tensor
from torchmetrics import Metric

from lightning_spectral.callbacks.report import flatten_values, log_values
from lightning_spectral.metrics.protocol import PlainMetric


def takes_real(metric: Metric) -> bool:
    """Whether ``metric.update`` takes ``real=`` (torchmetrics' two-sided image metrics: FID, KID, MiFID)."""
    try:
        return "real" in inspect.signature(metric.update).parameters
    except (TypeError, ValueError):  # pragma: no cover - a builtin without a signature
        return False


class AlongsideMetrics:
    """torchmetrics metrics a callback feeds with the images (or inputs) it already holds, in the same pass.

    A metric whose ``update`` takes ``real`` (FID, KID, MiFID) gets the measured images with ``real=False`` and the
    reference images with ``real=True``; any other metric gets ``update(images)``. At each measured epoch's end every
    rank calls ``compute()`` (torchmetrics syncs the metric's own states across ranks: the callback feeds each rank's
    share once and reduces nothing itself), the result is logged as ``{prefix}{name}`` (a dict per key,
    ``{name}/{key}``; KID's ``(mean, std)`` as ``{name}/mean`` and ``{name}/std``; another tuple or a vector per
    index) without a further sync, then ``reset()``. ``compute()`` runs inside ``torch.random.fork_rng`` seeded with
    ``seed``: KID's random subsets are the same on every rank and every run, and the training's random stream is left
    alone. The reference side is fed once per ``fit`` / ``validate`` to a metric built with
    ``reset_real_features=False`` (its ``reset()`` keeps it; `to` clears it at ``setup``), every measured epoch
    otherwise; the callback fills it (a reference fed by hand before is cleared).

    Args:
        metrics: ``{name: torchmetrics.Metric}`` (``None``: none).
        owner: the callback, for messages.
        taken: names the callback logs already (its spectral metrics): an alongside metric may not reuse one.
        argument: the callback's argument, for messages.

    Raises:
        ValueError: ``metrics`` is not a mapping of names to ``torchmetrics.Metric``, or a name is taken.

    Examples:
        >>> from torchmetrics import MeanMetric
        >>> along = AlongsideMetrics({"mean": MeanMetric()}, "EmbeddingMetrics")
        >>> along.two_sided
        ()
    """

    def __init__(
        self, metrics: Optional[Mapping[str, Metric]], owner: str, taken: Mapping[str, Any] = {},  # noqa: B006
        argument: str = "alongside",
    ) -> None:
        if metrics is None:
            metrics = {}
        if not isinstance(metrics, Mapping):
            raise ValueError(
                f"{owner}: `{argument}` must map names to torchmetrics metrics, e.g. "
                f"{{'fid': FrechetInceptionDistance(feature=extractor)}}, got {type(metrics).__name__}."
            )
        for name, metric in metrics.items():
            if not isinstance(name, str) or not name:
                raise ValueError(f"{owner}: `{argument}` names must be non-empty strings, got {name!r}.")
            if not isinstance(metric, Metric):
                raise ValueError(
                    f"{owner}: `{argument}[{name!r}]` must be a torchmetrics.Metric (e.g. FrechetInceptionDistance, "
                    f"KernelInceptionDistance), got {type(metric).__name__}."
                )
            if name in taken:
                raise ValueError(
                    f"{owner}: `{argument}[{name!r}]` has the name of a metric in `metrics`; both would be logged "
                    "under it: rename one."
                )
        self.metrics: dict[str, Metric] = dict(metrics)
        self.owner, self.argument = owner, argument
        #: names of the metrics whose ``update`` takes ``real=`` (they need a reference)
        self.two_sided: tuple[str, ...] = tuple(sorted(n for n, m in self.metrics.items() if takes_real(m)))
        self._real_fed: set[str] = set()  # reference sides filled and kept (reset_real_features=False)
        # update calls per (name, real) of the metrics with list states, and a zero-row batch: see `_even_out`
        self._calls: dict[tuple[str, bool], int] = {}
        self._blank: Any = None
        self.seconds = 0.0  # spent in the metrics' update and compute since `start_epoch`

    def __bool__(self) -> bool:
        return bool(self.metrics)

    def __contains__(self, name: object) -> bool:
        return name in self.metrics

    def to(self, device: torch.device) -> None:
        """At ``setup``: move the metrics to ``device`` and clear them whole, kept references included (the callback
        fills them once per ``fit`` / ``validate``, so a resumed or repeated run never adds a reference twice).

        Clearing also gives each process states of its own: ``ddp_spawn`` on CPU hands every process the parent's
        tensors in shared memory, and torchmetrics adds to its states in place (the ranks would add into one tensor);
        ``reset()`` allocates them anew.
        """
        for metric in self.metrics.values():
            metric.to(device)
            kept = getattr(metric, "reset_real_features", None) is False
            if kept:  # torchmetrics' own switch, for this one reset
                metric.reset_real_features = True
            try:
                metric.reset()
            finally:
                if kept:
                    metric.reset_real_features = False
        self._real_fed.clear()
        self._calls.clear()
        self._blank = None

    def needing_reference(self) -> list[str]:
        """The two-sided metrics to be fed their reference this epoch: all, but those whose kept reference was fed
        already (``reset_real_features=False``)."""
        return [name for name in self.two_sided if name not in self._real_fed]

    @contextmanager
    def _timed(self) -> Iterator[None]:
        start = time.perf_counter()
        try:
            with torch.no_grad():
                yield
        finally:
            self.seconds += time.perf_counter() - start

    def update(self, images: Tensor, names: Optional[list[str]] = None, real: bool = False) -> None:
        """Feed ``images`` to the metrics ``names`` (default: all): ``update(images, real=real)`` for a two-sided
        metric, ``update(images)`` for any other (given measured images only, never a reference)."""
        with self._timed():
            for name in self.metrics if names is None else names:
                metric = self.metrics[name]
                if name in self.two_sided:
                    metric.update(images, real=real)
                elif not real:
                    metric.update(images)
                else:
                    continue
                if _has_list_state(metric):
                    self._calls[(name, real)] = self._calls.get((name, real), 0) + 1
        if isinstance(images, Tensor) and self._blank is None:
            self._blank = images[:0]

    def _even_out(self, trainer: Optional[L.Trainer]) -> None:
        """Make every rank's number of ``update`` calls equal for metrics with list states (KID, MiFID), with
        zero-row batches (a collective: every rank calls it).

        torchmetrics gathers a list state with ``dist_reduce_fx=None`` one element at a time; ranks holding lists of
        different lengths would pair wrong gathers (a hang, or another rank's rows lost). The callbacks' shards
        (samples by chunk, loaders by sample) may give one rank one batch more, so the shorter lists get empty
        batches, which add no row.

        Raises:
            RuntimeError: a rank must be padded but saw no batch at all (the shape of an empty batch is unknown).
        """
        if trainer is None or trainer.world_size <= 1:
            return
        keys = [(name, real) for name in self.metrics for real in (False, True) if _has_list_state(self.metrics[name])]
        if not keys:
            return
        # one max-reduce: the counts, their negatives (the minimum), and whether any rank has no batch to copy
        calls = [self._calls.get(key, 0) for key in keys]
        local = torch.tensor([*calls, *(-c for c in calls), int(self._blank is None)])
        reduced = trainer.strategy.reduce(local.to(trainer.strategy.root_device, copy=True), reduce_op="max").cpu()
        most, least = reduced[: len(keys)].tolist(), (-reduced[len(keys) : 2 * len(keys)]).tolist()
        uneven = sorted({name for (name, _), top, low in zip(keys, most, least, strict=True) if top != low})
        if uneven and int(reduced[-1]) > 0:  # decided alike on every rank: all raise
            raise RuntimeError(
                f"{self.owner}: a rank fed no batch to `{self.argument}` metrics {uneven}, whose list states need the "
                "same number of updates on every rank; give every rank at least one batch (GeneratedSamples: "
                "`n_samples` >= world size x `sample_batch_size`)."
            )
        counts = list(zip(keys, calls, most, strict=True))
        for (name, real), count, top in counts:
            for _ in range(int(top) - count):
                self.update(self._blank, [name], real=real)

    def report(
        self, trainer: Optional[L.Trainer], pl_module: L.LightningModule, prefix: str, seed: int = 0
    ) -> dict[str, float]:
        """``compute()`` of every metric (a collective: every rank calls it), logged under ``prefix`` without a
        further sync, then ``reset()``; returns the values logged, by name without the prefix."""
        values: dict[str, float] = {}
        device = pl_module.device
        self._even_out(trainer)
        with self._timed():
            for name, metric in self.metrics.items():
                if PlainMetric(metric).reading().sample_count() == 0:  # no rank fed it (a collective): nothing to compute
                    continue
                devices = [device.index or 0] if device.type == "cuda" else []
                with torch.random.fork_rng(devices=devices):
                    torch.manual_seed(seed)
                    result = metric.compute()
                values.update(flatten_values(name, _named(metric, result)))
                metric.reset()
                kept = name in self.two_sided and not getattr(metric, "reset_real_features", True)
                if kept:
                    self._real_fed.add(name)
                self._calls.pop((name, False), None)
                if not kept:
                    self._calls.pop((name, True), None)
        log_values(pl_module, values, prefix)
        return values


def _has_list_state(metric: Metric) -> bool:
    """Whether the metric keeps a list state (rows appended per ``update``, gathered per element: KID, MiFID)."""
    return any(isinstance(value, list) for value in metric.metric_state.values())


def _named(metric: Metric, result: Any) -> Any:
    """``result`` with names for a tuple: KID's ``(mean, std)``, another tuple by index."""
    if isinstance(result, (tuple, list)):
        from torchmetrics.image.kid import KernelInceptionDistance

        kid = isinstance(metric, KernelInceptionDistance) and len(result) == 2
        keys = ("mean", "std") if kid else range(len(result))
        return dict(zip(keys, result, strict=True))
    return result
