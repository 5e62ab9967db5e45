"""A reading: what a metric's sums say at one moment, frozen, its answers computed on first use and kept on it.

A metric holds sums; [`SpectralMetric.reading`][lightning_spectral.metrics.SpectralMetric.reading] makes the one
collective (the all-reduce of the sums) and returns a reading of them. Everything a user reads of that epoch (the
value, the spectrum, the modes, the standard errors, the summary, the galleries' modes, the pictures) is a method of
the reading, computed the first time it is asked for and kept on the reading, so a second read costs nothing and each
decomposition is done once whoever asks for it. Nothing on a reading is a collective except what streams new data
(the galleries' second pass over batches, which every rank runs); an ``update`` after the reading leaves it as it was
(the metric copies its sums before it changes them while a reading holds them).

Each metric has its reading class beside it (`FKEAReading`, `FINCReading`, ...), with the methods of its own
answers; this base holds the streams' frozen sums, the settings they were read with, and the cache.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional

import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor

from lightning_spectral._checks import check_bool
from lightning_spectral.functional.mode_shares import ModeRow
from lightning_spectral.metrics.headline import headline_values

if TYPE_CHECKING:  # pragma: no cover
    from lightning_spectral.metrics.accumulator import Accumulator
    from lightning_spectral.metrics.base import SpectralMetric


class ModeGallery(NamedTuple):
    """The rows of a mode gallery: per mode, its top samples ``(ids, scores)``, a label for the row, where the
    ids point (``"samples"``: the measured stream, ``"reference"``: the reference stream), and a title line (e.g.
    ``"6 significant missing modes, 4 shown"``); ``rows``: what each label says, as
    [`ModeRow`][lightning_spectral.functional.mode_shares.ModeRow]s (the mode's share of its side), for a caller
    that knows the samples' classes (``None`` where the labels say something else)."""

    samples: list[tuple[Tensor, Tensor]]
    labels: list[str]
    source: str = "samples"
    title: str = ""
    rows: Optional[list[ModeRow]] = None


class Interval(NamedTuple):
    """A score's interval at ``level`` (`VendiReading.interval`, `FINCReading.top_interval`), float64 scalars: the
    ``value`` as read, its standard error ``se``, its estimated ``bias`` at this n (``E value - true value``), and
    ``[low, high]``, the interval with the bias accounted for (each method says how: shifted by it, or widened);
    ``high`` is ``+inf`` where only a lower bound can be claimed (`bias_corrected`)."""

    value: Tensor
    se: Tensor
    bias: Tensor
    low: Tensor
    high: Tensor
    level: float


#: The intervals that take a bias out (`VendiReading.interval`, `ConditionalReading.interval` and
#: `per_prompt_interval`) warn when it is above this share of the score. Measured (the mean over samples, as a share
#: of the large-n value): taking out 4.6 % left 0.3 % (the interval covered in 93.5 %), 6.2 % left 1.1 % (83 %),
#: 10-11 % left 2.4-4.5 % (78-90 %), 15 % left 12 % and 22 % left 18 % (8 % and 0 %) (docs/benchmarks/coverage.md,
#: "Vendi-1 without its bias at this n").
BIAS_SHARE_WARNING = 0.05


def past_bias_share(bias: Tensor, value: Tensor) -> Tensor:
    """Whether ``|bias|`` is above `BIAS_SHARE_WARNING` of ``value`` (bool, elementwise; False where NaN)."""
    return bias.abs() > BIAS_SHARE_WARNING * value


def warn_large_bias(
    method: str, what: str, bias: Tensor, value: Tensor, n: int, width: int, bounded: bool = False
) -> None:
    """Warn (rank 0) when ``bias`` is above `BIAS_SHARE_WARNING` of ``value``: its second-order estimate leaves
    about as much in, so an interval around the large-n value misses it (``bounded``: the interval is a lower bound
    only, `bias_corrected`)."""
    if bool(past_bias_share(bias, value)):
        share = float(abs(bias) / value)
        consequence = ("so the interval is a lower bound only (its upper end +inf): the score is at least its low end"
                       if bounded else "so the interval misses the large-n value")
        rank_zero_warn(
            f"{method}: the bias of the {what} is {share:.0%} of it at n = {n}, 2r = {width}: past "
            f"{BIAS_SHARE_WARNING:.0%} its second-order estimate leaves a bias about its own size in, {consequence}. "
            "Compare the score at one n and 2r, or use order 2 (RKE) or a t-truncated score, which converge with n."
        )


def bias_corrected(value: Tensor, se: Tensor, bias: Tensor, q: float, level: float, lower_bound: bool) -> Interval:
    """``[value - bias - q se, value - bias + q se]``; with ``lower_bound`` (a Vendi score of order <= 1), ``high`` is
    ``+inf`` where ``|bias|`` is above `BIAS_SHARE_WARNING` of ``value`` (elementwise for per-label tensors).

    There the second-order estimate leaves about as much bias in as it takes out, always of the same sign: the score
    reads low. An entropy of order <= 1 is concave in the covariance, so by Jensen its plug-in is low in
    expectation; the bias left after the correction was low in every measured case (docs/benchmarks/coverage.md,
    "Vendi-1 without its bias at this n"). So the score is at least the low end, and no upper end is claimed.
    """
    centre, half = value - bias, q * se
    high = centre + half
    if lower_bound:
        high = torch.where(past_bias_share(bias, value), torch.full_like(high, math.inf), high)
    return Interval(value, se, bias, centre - half, high, level)


def kept_summary(method: Callable[["Reading"], dict[str, Any]]) -> Callable[["Reading"], dict[str, Any]]:
    """A reading's ``summary`` computed once and kept on it; each call returns a new dict of the same values (a
    caller may add keys)."""

    @functools.wraps(method)
    def summary(self: "Reading") -> dict[str, Any]:
        return dict(self._cached(("summary", method.__qualname__), lambda: method(self)))

    return summary


class Reading:
    """The sums of a metric read once (all ranks' under DDP), and every answer computed from them, kept.

    Built by [`SpectralMetric.reading`][lightning_spectral.metrics.SpectralMetric.reading], never by hand. The
    attributes a subclass names in ``settings`` are copied from the metric (its ``rho``, ``alpha``, ...), the
    accumulators' frozen copies are ``streams`` (by name) and ``feature_map`` is the metric's map. A reading cannot be
    changed (setting an attribute raises).

    Attributes:
        metric_name: the metric's class name (messages and picture titles).
        streams: each accumulator's sums, frozen (``{name: Accumulator}``, read-only).
        feature_map: ``phi``.
        sigma: the bandwidth the sums were accumulated at (``sigma="auto"``'s fitted value), or ``None``.
    """

    #: The metric's attributes copied onto the reading (its settings).
    settings: tuple[str, ...] = ()

    def __init__(self, metric: "SpectralMetric") -> None:
        self.metric_name = type(metric).__name__
        self.streams: dict[str, "Accumulator"] = {
            name: accumulator.snapshot() for name, accumulator in metric.accumulators.items()
        }
        self.feature_map = metric.feature_map
        self.process_group = metric.process_group
        self._reference_names = metric.reference_names
        self._same_samples = dict(metric.same_samples)
        sigma = getattr(metric, "sigma", None)
        self.sigma = sigma
        for name in self.settings:
            setattr(self, name, getattr(metric, name))
        self._answers: dict[Any, Any] = {}
        self._bind(metric)
        self._frozen = True

    def _bind(self, metric: "SpectralMetric") -> None:
        """Name the streams a subclass reads (``self.samples = self.streams["samples"]``, ...)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if getattr(self, "_frozen", False):
            raise AttributeError(f"A {type(self).__name__} is frozen: it answers for the sums it was taken from. Take "
                                 "a new one with `metric.reading()` after more updates.")
        object.__setattr__(self, name, value)

    def holds(self, tensor: Tensor) -> bool:
        """Whether ``tensor`` is one of the sums this reading reads (the metric copies it before changing it)."""
        return any(stream.state is tensor for stream in self.streams.values())

    def reads(self, metric: "SpectralMetric") -> bool:
        """Whether this reading still answers for ``metric``: the same sums objects (the metric replaces a sum a
        reading holds before changing it, so the same object means the same values) and no row pending."""
        return set(self.streams) == set(metric.accumulators) and all(
            accumulator.pending_rows == 0 and getattr(metric, accumulator.state_name) is self.streams[name].state
            for name, accumulator in metric.accumulators.items()
        )

    # ---- the cache ---------------------------------------------------------------------------------------------
    def _cached(self, name: Any, fn: Callable[[], Any]) -> Any:
        """``fn()``, computed the first time ``name`` is asked for and kept."""
        if name not in self._answers:
            self._answers[name] = fn()
        return self._answers[name]

    def _cached_top(self, name: Any, k: int, fn: Callable[[int], Any]) -> Any:
        """``fn(k)``, a result with (at least) ``k`` leading modes, kept for any later call that needs ``k`` or
        fewer."""
        kept = self._answers.get(name)
        if kept is None or kept[0] < k:
            self._answers[name] = (k, fn(k))
        return self._answers[name][1]

    # ---- what every reading answers ----------------------------------------------------------------------------
    @property
    def two_sample(self) -> bool:
        """True for a reading of a reference side and a generated / test side."""
        return bool(self._reference_names)

    def sample_count(self, real: bool = False) -> int:
        """Samples read on the measured side (``real=False``) or the reference side, all ranks (no collective: the
        counts were read with the sums)."""
        check_bool(real, "real")
        names = [n for n in self.streams if (n in self._reference_names) == real and n not in self._same_samples]
        return int(sum(float(self.streams[n].count) for n in names))

    @property
    def value(self) -> Any:
        """What the metric's ``compute()`` returns, computed once."""
        return self._cached("value", self._value)

    def _value(self) -> Any:
        raise NotImplementedError

    @kept_summary
    def summary(self) -> dict[str, Any]:
        """Every value the reading reports, by name (``""`` is [`value`][lightning_spectral.metrics.Reading.value]);
        ``"sigma"``: the bandwidth the values were computed at."""
        return self._with_sigma({"": self.value})

    def _with_sigma(self, summary: dict[str, Any]) -> dict[str, Any]:
        sigma = self.sigma
        if isinstance(sigma, (int, float)) and not isinstance(sigma, bool):
            summary["sigma"] = torch.tensor(float(sigma), dtype=torch.float64)
        return summary

    def _sizes(self, real: bool = False) -> dict[str, Tensor]:
        """``n`` (and ``n_real`` with ``real``) and ``n_features`` (2r): the sizes a value was computed at."""
        sizes = {"n": torch.tensor(float(self.sample_count()), dtype=torch.float64)}
        if real:
            sizes["n_real"] = torch.tensor(float(self.sample_count(real=True)), dtype=torch.float64)
        sizes["n_features"] = torch.tensor(float(self.feature_map.out_features), dtype=torch.float64)
        return sizes

    def headline(self, summary: Optional[Mapping[str, Any]] = None) -> dict[str, Tensor]:
        """The few scalars a callback logs by default, ``{quantity: value}`` (scores with ``{quantity}_se``, counts,
        ``-log10`` p-values; never a setting or a sample size), read from ``summary`` (default: this reading's).
        The default is the value as ``"value"`` with its ``se``."""
        summary = self.summary() if summary is None else summary
        return headline_values("value", summary[""], summary.get("se"))

    def galleries(
        self, batches: Iterable[tuple[Any, Any]], k: int, per_mode: int, reference_batches: Optional[Iterable] = None
    ) -> dict[str, ModeGallery]:
        """Top samples of the top modes from a second pass over ``(features, ids)`` batches, by gallery name
        (``reference_batches`` feed the reference side's galleries). None by default. A collective under DDP: the
        pass streams new data on every rank."""
        return {}

    def plot_spectrum(self, ax: Any = None, top: int = 50) -> tuple[Any, Any]:
        """The picture behind the value (default: one bar panel per value of the summary)."""
        from lightning_spectral.metrics import plotting

        return plotting.plot_summary(self, ax, top)

    def __repr__(self) -> str:
        counts = ", ".join(f"{name}={int(stream.count)}" for name, stream in self.streams.items())
        return f"{type(self).__name__}({counts})"
