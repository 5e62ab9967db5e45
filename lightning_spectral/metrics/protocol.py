"""What a callback asks of a metric: how to feed it (``inputs``) and what it reports, checked once.

[`ReportedMetric`][lightning_spectral.metrics.protocol.ReportedMetric] is what every callback's epoch end reads
(one sync, the values, the counts, the reset); [`PicturedMetric`][lightning_spectral.metrics.protocol.PicturedMetric]
adds the pictures (galleries, spectrum). Every [`SpectralMetric`][lightning_spectral.metrics.SpectralMetric] is
both. A plain ``torchmetrics.Metric`` (none of the protocol's own members) is read through
[`PlainMetric`][lightning_spectral.metrics.protocol.PlainMetric]: ``update(x)``, ``compute()``, no pictures.
[`as_reported`][lightning_spectral.metrics.protocol.as_reported] checks a metric when a callback is built and names
what it lacks; [`feed`][lightning_spectral.metrics.protocol.feed] is the one place a batch's embeddings become the
``update`` call its ``inputs`` asks for.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, Optional, Protocol

import torch
from torch import Tensor
from torchmetrics import Metric

from lightning_spectral.sync.collectives import all_reduce_sum, collective_device, distributed_available

if TYPE_CHECKING:  # pragma: no cover
    from lightning_spectral.metrics.base import ModeGallery

#: The ways ``update`` is called: ``update(x)``, ``update(x, real=...)``, ``update(a, b)`` (two embeddings of the
#: same samples), ``update(x, prompts)``.
INPUTS = ("one", "two", "paired", "conditional")
#: What every callback calls at an epoch's end; ``"reset_reference"`` (two-sample metrics whose reference is
#: embedded again) and the ``PICTURES`` are asked for by name.
REPORTED = ("inputs", "update", "reset", "synced", "summary", "headline", "sample_count")
PICTURES = ("galleries", "plot_spectrum")


class ReportedMetric(Protocol):
    """What a callback's epoch end reads of a metric.

    Attributes:
        inputs: how ``update`` is called, one of `INPUTS` (see [`feed`][lightning_spectral.metrics.protocol.feed]).
    """

    inputs: str

    def update(self, *args: Any, **kwargs: Any) -> None:
        """Add a batch (as ``inputs`` says)."""

    def reset(self) -> None:
        """Clear the measured sums (the reference too, unless the metric keeps it)."""

    def synced(self) -> AbstractContextManager[None]:
        """A block in which every read covers all ranks, after one sync (a collective)."""

    def summary(self) -> Mapping[str, Any]:
        """Every value the metric reports, by name (``""``: its own value)."""

    def headline(self, summary: Mapping[str, Any]) -> Mapping[str, Any]:
        """The few scalars logged by default, ``{quantity: value}``, picked from ``summary``."""

    def sample_count(self, real: bool = False) -> int:
        """Samples accumulated on the measured (or, ``real``, the reference) side over all ranks (a collective)."""

    def reset_reference(self) -> None:
        """Clear the reference side (two-sample metrics)."""


class PicturedMetric(ReportedMetric, Protocol):
    """A [`ReportedMetric`][lightning_spectral.metrics.protocol.ReportedMetric] that also draws: mode galleries
    and a spectrum."""

    def galleries(
        self, batches: Iterable[tuple[Any, Any]], k: int, per_mode: int, reference_batches: Optional[Iterable] = None
    ) -> Mapping[str, "ModeGallery"]:
        """Top samples of the top modes from a second pass over ``(features, ids)`` batches, by gallery name."""

    def plot_spectrum(self) -> tuple[Any, Any]:
        """``(figure, axes)`` of the picture behind the metric's value (a collective)."""


class PlainMetric:
    """A plain ``torchmetrics.Metric`` read as a [`ReportedMetric`][lightning_spectral.metrics.protocol.ReportedMetric]:
    ``update(x)``, its ``compute()`` as the one value, no reference and no pictures.

    Its counts are torchmetrics' ``update_count``, summed over the metric's process group (``compute`` syncs there
    too: torchmetrics owns a metric's sync).

    Args:
        metric: the metric.
    """

    inputs = "one"

    def __init__(self, metric: Metric) -> None:
        self.metric = metric

    def update(self, *args: Any, **kwargs: Any) -> None:
        self.metric.update(*args, **kwargs)

    def reset(self) -> None:
        self.metric.reset()

    def synced(self) -> AbstractContextManager[None]:
        return nullcontext()  # `compute` syncs by itself

    def summary(self) -> dict[str, Any]:
        return {"": self.metric.compute()}

    def headline(self, summary: Mapping[str, Any]) -> dict[str, Any]:
        """The value of ``compute()`` as it is (``""``: logged under the metric's name; a dict, as KID's, by key)."""
        value = summary[""]
        return dict(value) if isinstance(value, Mapping) else {"": value}

    def sample_count(self, real: bool = False) -> int:
        count = torch.tensor(0.0 if real else float(self.metric.update_count), dtype=torch.float64)
        if distributed_available():
            group = self.metric.process_group
            count = all_reduce_sum(count.to(collective_device(group)), group)[0]
        return int(count)

    def reset_reference(self) -> None:
        """Nothing to clear: a plain metric has no reference side."""


def is_plain(metric: Any) -> bool:
    """Whether ``metric`` has none of the protocol's own members (a plain ``torchmetrics.Metric``)."""
    own = [name for name in (*REPORTED, "reset_reference", *PICTURES) if name not in ("update", "reset")]
    return not any(hasattr(metric, name) for name in own)


def as_reported(
    metric: Metric, name: str, owner: str, needs: Optional[Mapping[str, str]] = None, inputs: Sequence[str] = INPUTS
) -> ReportedMetric:
    """``metric`` (``metrics[name]`` of callback ``owner``) as the callback reads it: itself when it keeps the
    protocol, a [`PlainMetric`][lightning_spectral.metrics.protocol.PlainMetric] when it is a plain
    ``torchmetrics.Metric`` (none of the protocol's own members).

    Args:
        metric: the metric.
        name: its name in the callback's ``metrics``.
        owner: the callback, for the message.
        needs: members the callback will call besides `REPORTED`, each with the argument that asks for it (e.g.
            ``{"galleries": "images"}``).
        inputs: the ``inputs`` the callback can feed.

    Raises:
        TypeError: the metric keeps the protocol in part and lacks a member the callback will call (each named,
            with the argument that asks for it).
        ValueError: its ``inputs`` is one the callback cannot feed; its values are no scalars
            (``reports_scalars = False``: ``RFFCovariance``).

    Examples:
        >>> from torchmetrics import MeanMetric
        >>> type(as_reported(MeanMetric(), "mean", "EmbeddingMetrics")).__name__
        'PlainMetric'
    """
    needs = dict(needs or {})
    if is_plain(metric):
        reported: Any = PlainMetric(metric)
    else:
        missing = [member for member in REPORTED if not hasattr(metric, member)]
        missing += [f"{member} (asked for by `{why}`)" for member, why in needs.items() if not hasattr(metric, member)]
        if missing:
            raise TypeError(
                f"{owner}: `metrics[{name!r}]` ({type(metric).__name__}) has no {', '.join(missing)}, which {owner} "
                "calls; implement it (lightning_spectral.metrics.protocol.ReportedMetric / PicturedMetric, or subclass "
                "SpectralMetric), or leave the metric out of what asks for it."
            )
        reported = metric
    if not getattr(metric, "reports_scalars", True):
        raise ValueError(
            f"{owner}: `metrics[{name!r}]` ({type(metric).__name__}) reports a matrix, not scalars, so {owner} has "
            "nothing to log of it; use a metric that reports scores (FKEAVendi for the diversity of this covariance), "
            "or read the matrix yourself with `compute()`."
        )
    if reported.inputs not in inputs:
        raise ValueError(
            f"{owner}: `metrics[{name!r}]` ({type(metric).__name__}) takes {reported.inputs!r} inputs; {owner} "
            f"feeds {', '.join(repr(kind) for kind in inputs)} metrics only."
        )
    return reported


def feed(
    metric: ReportedMetric, embeddings: Tensor, other: Optional[Tensor] = None, *, real: bool = False,
    labels: Optional[Tensor] = None,
) -> None:
    """Add a batch's embeddings (N, d) to ``metric`` by its ``inputs``.

    - ``"one"``: ``update(embeddings)``;
    - ``"two"``: ``update(embeddings, real=real)`` (``real``: the reference side);
    - ``"paired"``: ``update(embeddings, other)``, ``other`` the reference embeddings (N, d') of the same samples;
    - ``"conditional"``: ``update(embeddings, other)``, ``other`` the prompts (N, ...), with ``labels=`` (N,) for a
      metric that keeps per-label sums (``num_classes``).
    """
    if metric.inputs == "two":
        metric.update(embeddings, real=real)
    elif metric.inputs == "paired":
        metric.update(embeddings, other)
    elif metric.inputs == "conditional":
        keep_labels = labels is not None and getattr(metric, "num_classes", None) is not None
        metric.update(embeddings, other, **({"labels": labels} if keep_labels else {}))
    else:
        metric.update(embeddings)
