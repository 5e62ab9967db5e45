"""A metric's epoch-end report: one sync, its headline logged, its galleries and spectrum drawn, then ``reset()``.

Every callback that measures metrics ends its validation epoch here, once per metric
([`report`][lightning_spectral.callbacks.report.report]). What is logged is the metric's headline
([`headline`][lightning_spectral.metrics.Reading.headline]: a few scores with their standard errors, counts,
``-log10`` p-values) as ``{prefix}{name}/{quantity}``; with ``detail`` every value of ``summary()`` too, as
``{prefix}{name}/detail/{key}``, and each gallery row's share, class and purity. Values are flattened to
``{name: float}`` ([`flatten_values`][lightning_spectral.callbacks.report.flatten_values]) and logged without a
further sync ([`log_values`][lightning_spectral.callbacks.report.log_values]: they are global already). The pictures
go to every logger that holds them (`lightning_spectral.pictures.loggers`), imported only when drawn, and so do the
galleries' rows as text ("missing region 1: class 7 (19 of its top 20), about 10 % of the reference": the dominant
class where the gallery's images carry classes).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any, Callable, Optional

import lightning as L
import torch
from torch import Tensor

from lightning_spectral.callbacks.galleries import GalleryImages, ModeImages
from lightning_spectral.callbacks.synced_logging import quiet_sync_advice
from lightning_spectral.metrics.headline import order_name
from lightning_spectral.metrics.protocol import PicturedReading, ReportedMetric

#: ``fn(reading, values) -> (tag suffix, figure)`` or ``None``: the spectrum picture of a report.
SpectrumFn = Callable[[Any, dict[str, float]], Optional[tuple[str, Any]]]


def flatten_values(name: str, value: Any) -> dict[str, float]:
    """``{name: float}`` pairs of a computed value: a dict becomes ``name/key``, a vector ``name/i``.

    Orders given as whole floats (``1.0``, as a config file parses them) are named as integers (``name/1``).

    Examples:
        >>> import torch
        >>> flatten_values("vendi", {1.0: torch.tensor(3.0), "inf": torch.tensor(2.0)})
        {'vendi/1': 3.0, 'vendi/inf': 2.0}
        >>> flatten_values("top", torch.zeros(0))  # an empty vector (no cluster found): nothing to log
        {}
    """
    if isinstance(value, Mapping):
        out: dict[str, float] = {}
        for key, item in value.items():
            out.update(flatten_values(f"{name}/{order_name(key)}", item))
        return out
    if isinstance(value, Tensor) and value.numel() != 1:  # a vector, one value per entry (none when empty)
        out = {}
        for index, item in enumerate(value.flatten()):
            out.update(flatten_values(f"{name}/{index}", item))
        return out
    return {name: float(value)}


def log_values(
    pl_module: L.LightningModule, values: Mapping[str, float], prefix: str = "", progress_bar: bool = False
) -> None:
    """Log values that are already global (computed from all-reduced sums or gathered rows): no further sync, and no
    Lightning advice to sync them (`quiet_sync_advice`). With ``progress_bar``, the values (not their ``_se``, not
    the ``detail/`` ones) also go to the progress bar's postfix (``prog_bar=True``)."""
    for name, value in values.items():
        quiet_sync_advice(prefix + name)
        shown = progress_bar and not name.endswith("_se") and "/detail/" not in name
        pl_module.log(prefix + name, float(value), sync_dist=False, rank_zero_only=False, prog_bar=shown)


def can_log_pictures(trainer: L.Trainer) -> bool:
    """Whether any of the trainer's loggers holds pictures (TensorBoard, W&B, MLflow, Comet, CSV: see
    [`lightning_spectral.pictures.loggers`][lightning_spectral.pictures.loggers]); each one that cannot is warned
    once, on rank 0."""
    from lightning_spectral.pictures.loggers import _kind, loggers_of, warn_no_pictures

    kinds = [(_kind(logger), logger) for logger in loggers_of(trainer)]
    if trainer.is_global_zero:
        for kind, logger in kinds:
            if kind is None:
                warn_no_pictures(logger)
    return any(kind is not None for kind, _ in kinds)


def report(
    trainer: L.Trainer,
    pl_module: L.LightningModule,
    name: str,
    metric: ReportedMetric,
    prefix: str,
    gallery: Optional[GalleryImages] = None,
    spectrum: Optional[SpectrumFn] = None,
    timings: Optional[dict[str, float]] = None,
    kept: Optional[dict[str, ModeImages]] = None,
    detail: bool = False,
    progress_bar: bool = False,
) -> dict[str, float]:
    """Report one metric at an epoch's end (a collective under DDP: every rank calls it).

    From one ``metric.reading()`` (the one collective: every read comes from the same all-reduced sums): when any rank saw a
    sample, the metric's headline is logged as ``{prefix}{name}/{quantity}`` (a plain torchmetrics metric's value as
    ``{prefix}{name}``; [`logged_values`][lightning_spectral.callbacks.report.logged_values]); with
    ``gallery`` (a metric whose reading is a [`PicturedReading`][lightning_spectral.metrics.protocol.PicturedReading], and where its images are)
    its galleries are built, kept in ``kept`` as ``{name}/{gallery}``
    ([`ModeImages`][lightning_spectral.callbacks.ModeImages]) and logged as ``{prefix}{name}/{gallery}`` (the
    picture, and its rows as text); with ``spectrum`` the figure it returns for the values is logged as
    ``{prefix}{name}/{suffix}``. Pictures go out only when a logger holds them. With ``detail``, every value of
    ``summary()`` is logged too, as ``{prefix}{name}/detail/{key}``, and each gallery row's share of its side as
    ``{prefix}{name}/detail/{gallery}_share/{i}`` (with ``..._share_se/{i}`` where the metric gives its standard
    error; and, where the images carry classes, the dominant class of its top samples as ``..._class/{i}`` and the
    fraction of them in that class as ``..._purity/{i}``). Then ``metric.reset()``.

    Args:
        trainer: the trainer (ranks, loggers).
        pl_module: the module that logs.
        name: the metric's name.
        metric: the metric (see [`as_reported`][lightning_spectral.metrics.protocol.as_reported]).
        prefix: prefix of the logged names.
        gallery: the second pass's batches and images, for a metric that draws galleries.
        spectrum: ``fn(values) -> (tag suffix, figure)`` or ``None`` (nothing drawn).
        timings: gains the seconds spent on the values (``"compute"``) and on the pictures (``"pictures"``).
        kept: gains the galleries as images.
        detail: also log every value of ``summary()`` and the galleries' rows as scalars.
        progress_bar: also show the headline values (not their se) in the progress bar's postfix.

    Returns:
        The values logged, without ``prefix`` (empty when no rank saw a sample); the galleries' scalars are logged,
        not returned.
    """
    values: dict[str, float] = {}
    timings = {} if timings is None else timings
    start = time.perf_counter()
    reading = metric.reading()
    if reading.sample_count() > 0:
        summary = reading.summary()
        values = logged_values(name, reading.headline(summary), summary, detail)
        # Values are global already (the metrics all-reduce their sums): no further sync.
        log_values(pl_module, {k: v for k, v in values.items() if math.isfinite(v)}, prefix, progress_bar)
        drawn = time.perf_counter()
        timings["compute"] = timings.get("compute", 0.0) + drawn - start
        pictures = (gallery is not None or spectrum is not None) and can_log_pictures(trainer)
        if gallery is not None:
            kept = {} if kept is None else kept
            rows = galleries(trainer, name, f"{prefix}{name}", reading, gallery, pictures, kept)
            if detail:  # global: every rank built the same rows (logged, not returned)
                log_values(pl_module, {key: value for key, value in rows.items() if math.isfinite(value)}, prefix)
        if spectrum is not None and pictures:
            from lightning_spectral.pictures.loggers import log_picture

            figure = spectrum(reading, values)
            if figure is not None:
                log_picture(trainer, f"{prefix}{name}/{figure[0]}", figure[1])
        timings["pictures"] = timings.get("pictures", 0.0) + time.perf_counter() - drawn
    metric.reset()
    return values


def logged_values(
    name: str, headline: Mapping[str, Any], summary: Mapping[str, Any], detail: bool = False
) -> dict[str, float]:
    """What [`report`][lightning_spectral.callbacks.report.report] logs of a reading, without the prefix: its
    ``headline`` as ``{name}/{quantity}`` (``{name}`` for a plain metric's one value), and with ``detail`` every value
    of its ``summary`` as ``{name}/detail/{key}`` (``""``: ``value``).

    Examples:
        >>> import torch
        >>> headline = {"mmd2": torch.tensor(0.02), "minus_log10_p": torch.tensor(60.0)}
        >>> logged_values("mmd", headline, {"": torch.tensor(0.02), "n": torch.tensor(500.0)})
        {'mmd/mmd2': 0.019999999552965164, 'mmd/minus_log10_p': 60.0}
    """
    values: dict[str, float] = {}
    for quantity, value in headline.items():
        values.update(flatten_values(name if quantity == "" else f"{name}/{quantity}", value))
    if detail:
        for key, value in summary.items():
            values.update(flatten_values(f"{name}/detail/{key or 'value'}", value))
    return values


def with_class(label: str, labels: list) -> str:
    """``label`` with its row's commonest class (`class_phrase` of the row's ``labels``) after the row's name (before
    the first ``": "``).

    Examples:
        >>> with_class("cluster 1: eigenvalue +0.067", [7] * 9 + [1, 2, 3])
        'cluster 1: class 7 (9 of its top 12), eigenvalue +0.067'
    """
    from lightning_spectral.functional.mode_shares import class_phrase

    name, colon, rest = label.partition(": ")
    text = class_phrase(labels)
    return f"{name}: {text}, {rest}" if colon else f"{label}: {text}"


def galleries(
    trainer: L.Trainer,
    name: str,
    tag: str,
    reading: PicturedReading,
    gallery: GalleryImages,
    log: bool,
    kept: dict[str, ModeImages],
) -> dict[str, float]:
    """The reading's galleries from a second pass over ``gallery``'s batches, their images (kept in ``kept`` as
    ``{name}/{gallery}``), and the grids and their rows as text (logged as ``{tag}/{gallery}`` when ``log``). Each
    row reads its mode's share, and the dominant class of its top samples where the images carry classes
    ([`ModeRow`][lightning_spectral.functional.mode_shares.ModeRow]). A collective under DDP.

    Returns:
        ``{name}/detail/{gallery}_share/{i}`` (``..._share_se/{i}``, and ``..._class/{i}``, ``..._purity/{i}``
        where classes are known) per row.
    """
    from lightning_spectral.functional.mode_shares import dominant_label
    from lightning_spectral.pictures.gallery import enlarge, mode_gallery
    from lightning_spectral.pictures.loggers import log_picture, log_text

    scalars: dict[str, float] = {}

    found = reading.galleries(
        gallery.batches("samples"), gallery.modes, gallery.per_mode, reference_batches=gallery.batches("reference")
    )
    for gallery_name, rows in found.items():
        described = rows.rows or [None] * len(rows.labels)  # what each label says, where the metric tells
        shown = [
            (index, ids, label, row)
            for index, ((ids, _), label, row) in enumerate(zip(rows.samples, rows.labels, described, strict=False))
            if len(ids)
        ]
        ids = torch.cat([ids for _, ids, _, _ in shown]) if shown else torch.zeros(0, dtype=torch.long)
        images, classes = gallery.images(trainer, rows.source, ids)  # a collective: every rank asks
        record, positions, start = ModeImages([], [], []), [], 0
        for index, row_ids, label, row in shown:
            span = torch.arange(start, start + len(row_ids))  # the row's images in `images`
            start += len(row_ids)
            positions.append((span, torch.zeros(len(span))))
            row_classes = None if classes is None else classes[span]
            key = f"{name}/detail/{gallery_name}"
            if row is not None:
                label = row.line(None if row_classes is None else row_classes.tolist())
                scalars[f"{key}_share/{index}"] = float(row.share)
                if row.share_se is not None:
                    scalars[f"{key}_share_se/{index}"] = float(row.share_se)
            if row_classes is not None and len(row_classes):
                dominant, count = dominant_label(row_classes.tolist())
                scalars[f"{key}_class/{index}"] = float(dominant)  # type: ignore[arg-type]
                scalars[f"{key}_purity/{index}"] = count / len(row_classes)
                if row is None:  # a row the metric does not describe: its label gains the class all the same
                    label = with_class(label, row_classes.tolist())
            record.labels.append(label)
            record.images.append(images[span])
            record.classes.append(row_classes)
        kept[f"{name}/{gallery_name}"] = record
        if shown and log:
            lines = [rows.title] if rows.title else []
            log_text(trainer, f"{tag}/{gallery_name}", "\n".join(lines + record.labels))
            captions = None
            if all(classes is not None for classes in record.classes):  # the caller's labels, under each image
                captions = [[f"class {int(c)}" for c in row] for row in record.classes]  # type: ignore[union-attr]
            grid = mode_gallery(
                positions, enlarge(images, 64), labels=record.labels, title=rows.title, captions=captions
            )
            log_picture(trainer, f"{tag}/{gallery_name}", grid)
    return scalars
