"""What a callback asks of a metric: how to feed it (``inputs``), and a reading of what it reports, checked once.

[`ReportedMetric`][lightning_spectral.metrics.protocol.ReportedMetric] is what every callback's epoch end calls: it
feeds the metric, takes one [`reading`][lightning_spectral.metrics.SpectralMetric.reading] (the one collective), reads
the summary and headline off it ([`MetricReading`][lightning_spectral.metrics.protocol.MetricReading]) and resets
the metric; [`PicturedReading`][lightning_spectral.metrics.protocol.PicturedReading] adds the pictures (galleries,
spectrum). Every [`SpectralMetric`][lightning_spectral.metrics.SpectralMetric] keeps it, its
[`Reading`][lightning_spectral.metrics.Reading] both. A plain ``torchmetrics.Metric`` (none of the protocol's own
members) is read through [`PlainMetric`][lightning_spectral.metrics.protocol.PlainMetric]: ``update(x)``,
``compute()``, no pictures. [`as_reported`][lightning_spectral.metrics.protocol.as_reported] checks a metric when a
callback is built and names what it lacks; [`feed`][lightning_spectral.metrics.protocol.feed] is the one place a
batch's embeddings become the ``update`` call its ``inputs`` asks for.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional, Protocol

import torch
from torch import Tensor
from torchmetrics import Metric

from lightning_spectral.sync.collectives import all_reduce_sum, collective_device, distributed_available

if TYPE_CHECKING:  # pragma: no cover
    from lightning_spectral.metrics.reading import ModeGallery

#: The ways ``update`` is called: ``update(x)``, ``update(x, real=...)``, ``update(a, b)`` (two embeddings of the
#: same samples), ``update(x, prompts)``.
INPUTS = ("one", "two", "paired", "conditional")
#: What every callback calls at an epoch's end; ``"reset_reference"`` (two-sample metrics whose reference is
#: embedded again) is asked for by name.
REPORTED = ("inputs", "update", "reset", "reading")
#: What a reading answers for every callback, and what it answers for the pictures.
READ = ("summary", "headline", "sample_count")
PICTURES = ("galleries", "plot_spectrum")


class MetricReading(Protocol):
    """What a callback reads off a metric's reading (all ranks' sums, read once)."""

    def summary(self) -> Mapping[str, Any]:
        """Every value the reading reports, by name (``""``: the metric's value)."""

    def headline(self, summary: Optional[Mapping[str, Any]] = None) -> Mapping[str, Any]:
        """The few scalars logged by default, ``{quantity: value}``, picked from ``summary``."""

    def sample_count(self, real: bool = False) -> int:
        """Samples read on the measured (or, ``real``, the reference) side over all ranks."""


class PicturedReading(MetricReading, Protocol):
    """A [`MetricReading`][lightning_spectral.metrics.protocol.MetricReading] that also draws: mode galleries and a
    spectrum."""

    def galleries(
        self, batches: Iterable[tuple[Any, Any]], k: int, per_mode: int, reference_batches: Optional[Iterable] = None
    ) -> Mapping[str, "ModeGallery"]:
        """Top samples of the top modes from a second pass over ``(features, ids)`` batches, by gallery name (a
        collective: every rank streams its batches)."""

    def plot_spectrum(self) -> tuple[Any, Any]:
        """``(figure, axes)`` of the picture behind the metric's value."""


class ReportedMetric(Protocol):
    """What a callback's epoch end calls on a metric.

    Attributes:
        inputs: how ``update`` is called, one of `INPUTS` (see [`feed`][lightning_spectral.metrics.protocol.feed]).
    """

    inputs: str

    def update(self, *args: Any, **kwargs: Any) -> None:
        """Add a batch (as ``inputs`` says)."""

    def reset(self) -> None:
        """Clear the measured sums (the reference too, unless the metric keeps it)."""

    def reading(self) -> MetricReading:
        """All ranks' sums read once (the one collective), as a reading that answers the rest."""

    def reset_reference(self) -> None:
        """Clear the reference side (two-sample metrics)."""

    def sample_count(self, real: bool = False) -> int:
        """Samples held on the measured (or, ``real``, the reference) side over all ranks, without a reading (a
        collective of the counts alone); asked of a metric given a reference to embed."""


class PlainReading:
    """A plain ``torchmetrics.Metric``'s ``compute()`` read as a
    [`MetricReading`][lightning_spectral.metrics.protocol.MetricReading]; its counts are torchmetrics'
    ``update_count``, summed over the metric's process group (a collective, as ``compute`` is).

    Args:
        metric: the metric.
    """

    def __init__(self, metric: Metric) -> None:
        self.metric = metric
        self._summary: Optional[dict[str, Any]] = None

    def summary(self) -> dict[str, Any]:
        if self._summary is None:
            self._summary = {"": self.metric.compute()}
        return self._summary

    def headline(self, summary: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
        """The value of ``compute()`` as it is (``""``: logged under the metric's name; a dict, as KID's, by key)."""
        value = (self.summary() if summary is None else summary)[""]
        return dict(value) if isinstance(value, Mapping) else {"": value}

    def sample_count(self, real: bool = False) -> int:
        count = torch.tensor(0.0 if real else float(self.metric.update_count), dtype=torch.float64)
        if distributed_available():
            group = self.metric.process_group
            count = all_reduce_sum(count.to(collective_device(group)), group)[0]
        return int(count)


class PlainMetric:
    """A plain ``torchmetrics.Metric`` read as a [`ReportedMetric`][lightning_spectral.metrics.protocol.ReportedMetric]:
    ``update(x)``, its ``compute()`` as the one value of its reading, no reference and no pictures.

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

    def reading(self) -> PlainReading:
        """The metric's reading (its ``compute()``, run on the first ``summary``: torchmetrics syncs it)."""
        return PlainReading(self.metric)

    def reset_reference(self) -> None:
        """Nothing to clear: a plain metric has no reference side."""


def is_plain(metric: Any) -> bool:
    """Whether ``metric`` has none of the protocol's own members (a plain ``torchmetrics.Metric``)."""
    own = [name for name in (*REPORTED, "reset_reference") if name not in ("update", "reset")]
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
            ``{"reset_reference": "reference_dataloader"}``); the `PICTURES` (``{"galleries": "images"}``) are its
            reading's, checked on the metric's ``reading_class`` where it has one.
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
        reading_class = getattr(metric, "reading_class", None)  # what its readings answer, where the class says
        missing += [f"{member} (asked for by `{why}`)" for member, why in needs.items()
                    if member not in PICTURES and not hasattr(metric, member)
                    or member in PICTURES and reading_class is not None and not hasattr(reading_class, member)]
        if missing:
            raise TypeError(
                f"{owner}: `metrics[{name!r}]` ({type(metric).__name__}) has no {', '.join(missing)}, which {owner} "
                "calls; implement it (lightning_spectral.metrics.protocol.ReportedMetric, with a reading_class whose "
                "readings keep PicturedReading, or subclass SpectralMetric), or leave the metric out of what asks for "
                "it."
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
