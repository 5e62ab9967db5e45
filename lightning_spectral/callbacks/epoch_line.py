"""One line per measured epoch: the few numbers that matter and the modes by class, for the log and the console.

[`epoch_line`][lightning_spectral.callbacks.epoch_line.epoch_line] writes what a callback logged at an epoch's end
(its headline keys, `callbacks.report`) as one line: each score with its standard error, the counts of
significant modes with the classes their gallery rows show (where the images carry classes; an eigenvalue of a
gallery's side, DriftMonitor's ``lost_0``, with its row's class and purity), and the tests' p-values, for example::

    gen epoch 3: vendi: vendi_1 4.12 +- 0.05 | finc: missing_modes 3 (rows of classes 0, 6), novel_modes 0 | mmd: p=1e-12

The callbacks print it through Lightning's logger on rank 0 (``print_epoch_line=False`` turns it off).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightning_spectral.functional.mode_shares import dominant_label


def epoch_line(prefix: str, epoch: int, values: Mapping[str, float], galleries: Mapping[str, Any]) -> str:
    """The line of one measured epoch from the logged ``values`` (``{metric}/{quantity}``, no prefix) and the
    ``galleries`` as images (``{metric}/{gallery}`` -> rows with their classes, or ``None``).

    Examples:
        >>> values = {"vendi/vendi_1": 4.123, "vendi/vendi_1_se": 0.05, "finc/missing_modes": 2.0,
        ...           "finc/novel_modes": 0.0, "mmd/mmd2": 0.3, "mmd/mmd2_se": 0.01, "mmd/minus_log10_p": 12.0}
        >>> epoch_line("gen/", 3, values, {})
        'gen epoch 3: vendi: vendi_1 4.12 +- 0.05 | finc: missing_modes 2, novel_modes 0 | mmd: mmd2 0.3 +- 0.01, p=1e-12'
    """
    metrics: dict[str, list[str]] = {}
    for key, value in values.items():
        metric, _, quantity = key.partition("/")
        if not quantity:
            metrics.setdefault(metric, []).append(f"{float(value):.3g}")  # a plain torchmetrics metric's value
            continue
        if quantity.endswith("_se") or quantity.startswith("detail/"):
            continue
        parts = metrics.setdefault(metric, [])
        if quantity.endswith("minus_log10_p"):
            name = quantity.removesuffix("minus_log10_p").removesuffix("_")
            parts.append(f"{name + ' ' if name else ''}p={10.0 ** -float(value):.1g}")
            continue
        se = values.get(f"{key}_se")
        text = f"{quantity} {float(value):.3g}" + ("" if se is None else f" +- {float(se):.2g}")
        if quantity.endswith("_modes"):
            text = f"{quantity} {int(value)}" + _classes(galleries.get(f"{metric}/{quantity.removesuffix('_modes')}"))
        side, _, row = quantity.rpartition("_")
        if row.isdigit():  # one eigenvalue of a gallery's side (DriftMonitor's lost_0): its row's class
            text += _row_class(galleries.get(f"{metric}/{side}"), int(row))
        parts.append(text)
    body = " | ".join(f"{metric}: " + ", ".join(parts) for metric, parts in metrics.items() if parts)
    return f"{prefix.rstrip('/')} epoch {epoch}: {body}"


def _dominant(gallery: Any) -> list[tuple[Any, int, int]]:
    """Each gallery row's (dominant class, its count, images in the row); ``[]`` where the gallery is missing or does
    not know every row's classes."""
    rows = [] if gallery is None or not gallery.classes else gallery.classes
    if any(labels is None or not len(labels) for labels in rows):
        return []
    return [(*dominant_label(labels.tolist()), len(labels)) for labels in rows]


def _row_class(gallery: Any, row: int) -> str:
    """`` (class 7, 8 of 8)``: the dominant class of gallery row ``row`` and how many of its images it holds."""
    rows = _dominant(gallery)
    if row >= len(rows):
        return ""
    label, count, size = rows[row]
    return f" (class {label}, {count} of {size})"


def _classes(gallery: Any) -> str:
    """`` (rows of classes 0, 6)``: the dominant class of each gallery row's images (a FINC row is a region, which
    may hold several modes)."""
    rows = _dominant(gallery)
    return " (rows of classes " + ", ".join(str(label) for label, _, _ in rows) + ")" if rows else ""
