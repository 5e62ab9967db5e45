"""The contract every metric here keeps: accumulators under one feature map, one sync, reference sides, a protocol.

A [`SpectralMetric`][lightning_spectral.metrics.SpectralMetric] is a ``torchmetrics.Metric`` whose states are the sums
of its
[`Accumulator`][lightning_spectral.metrics.Accumulator]s, all under one
[`FeatureMap`][lightning_spectral.kernels.FeatureMap] whose input width is fixed by the first batch. It does, once
for all metrics:

- **input**: embeddings (N, d), or images through a frozen ``feature`` extractor
  ([`FrozenFeature`][lightning_spectral.metrics.FrozenFeature]);
- **sync**: pending rows are flushed and the ranks agree on widths, sizes, frequencies and shifts
  (`agree_across_ranks`), then torchmetrics all-reduces each accumulator's
  one state (``dist_sync_fn`` = [`all_reduce_sum`][lightning_spectral.sync.all_reduce_sum]);
- **a reading**: [`reading`][lightning_spectral.metrics.SpectralMetric.reading] makes the one sync of an epoch and
  returns a frozen, typed [`Reading`][lightning_spectral.metrics.Reading] (each metric's own class) whose answers
  (value, modes, standard errors, summary, galleries, plots) are computed on first use and kept on it; ``compute()``
  is ``reading().value``;
- **reference sides**: accumulators declared with ``reference=True`` survive ``reset()`` when
  ``reset_real_features=False`` (as torchmetrics' FID keeps its real features);
- **checkpoints** (`metrics.checkpoint`) and **plots**
  (`metrics.plotting`), beside this file;
- **the protocol callbacks and the command line use**
  ([`ReportedMetric`][lightning_spectral.metrics.protocol.ReportedMetric]): ``inputs``, ``update``, ``reset``,
  [`reading`][lightning_spectral.metrics.SpectralMetric.reading],
  [`sample_count`][lightning_spectral.metrics.SpectralMetric.sample_count],
  [`reset_reference`][lightning_spectral.metrics.SpectralMetric.reset_reference].

Shared constructor arguments (documented here once; every metric takes them as keywords):

- ``chunk_size``: rows mapped and summed at once; rows wait in a buffer until this many are pending.
- ``feature``: a frozen ``nn.Module`` mapping a batch of images to (N, d) embeddings: ``update`` then takes images
  (see [`FrozenFeature`][lightning_spectral.metrics.FrozenFeature]).
- ``normalize``: with ``feature``: images are floats in [0, 1] (``True``) or ``uint8`` in [0, 255] (``False``,
  torchmetrics' FID convention); ``None``, the default of every metric and callback, reads it from the dtype
  (``uint8``: [0, 255], floats: [0, 1], both checked).
- ``save_feature``: with ``feature``: also write its weights into the metric's ``state_dict``.
- ``in_features``: the input width, if known (else the first batch fixes it).
- ``kwargs``: ``torchmetrics.Metric`` keyword arguments.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Optional

import torch
from torch import Tensor, nn
from torchmetrics import Metric

from lightning_spectral._checks import check_bool, check_features, check_positive_int
from lightning_spectral.algebra.gram import DEFAULT_CHUNK_SIZE
from lightning_spectral.functional.sampling_noise import Multipliers
from lightning_spectral.kernels.feature_map import FeatureMap
from lightning_spectral.metrics import checkpoint, plotting
from lightning_spectral.metrics.accumulator import Accumulator
from lightning_spectral.metrics.feature import FrozenFeature
from lightning_spectral.metrics.reading import Reading
from lightning_spectral.sync.agreement import agree_across_ranks
from lightning_spectral.sync.collectives import all_reduce_sum, collective_device, distributed_available


class SpectralMetric(Metric):
    """A ``torchmetrics.Metric`` whose states are the sums of accumulators under one feature map.

    Subclasses pass their map to ``__init__`` and declare accumulators with
    `_add_accumulator`; the shared
    keyword arguments are documented in [`base`][lightning_spectral.metrics.base].

    Args:
        feature_map: ``phi``; its input width is fixed by the first batch (or ``in_features``).
        chunk_size: see the module doc.
        feature: see the module doc.
        normalize: see the module doc.
        save_feature: see the module doc.
        kwargs: ``torchmetrics.Metric`` keyword arguments.
    """

    full_state_update = False
    is_differentiable = False
    #: How ``update`` is called: ``"one"`` (``update(x)``), ``"two"`` (``update(x, real=...)``), ``"paired"``
    #: (``update(emb_a, emb_b)``, two embeddings of the same samples) or ``"conditional"`` (``update(x, prompts)``);
    #: see [`feed`][lightning_spectral.metrics.protocol.feed].
    inputs: str = "one"
    feature_map: FeatureMap

    def __init__(
        self,
        feature_map: FeatureMap,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        feature: Optional[nn.Module] = None,
        normalize: Optional[bool] = None,
        save_feature: bool = False,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("dist_sync_fn", all_reduce_sum)  # every state is a sum: one all-reduce each
        kwargs.setdefault("compute_with_cache", False)  # the metric keeps its reading instead
        super().__init__(**kwargs)
        self.chunk_size = check_positive_int(chunk_size, "chunk_size")
        self.feature_map = feature_map
        self.accumulators: dict[str, Accumulator] = {}
        self.reference_names: tuple[str, ...] = ()
        self.same_samples: dict[str, str] = {}  # accumulator -> the one that counts its samples
        self.reset_real_features = True
        self.feature = None if feature is None else FrozenFeature(feature, normalize=normalize, save=save_feature)
        self._kept_reading: Optional[Reading] = None  # the last reading, while it reads the sums
        self._lent_reading: Optional[weakref.ref] = None  # the last reading, while anyone holds it
        self._persistent_sums = True  # `persistent(False)` leaves the sums out of `state_dict`
        #: Built with ``sigma="auto"``: rows wait unmapped until `fit_bandwidth` fixes sigma (`auto_bandwidth`).
        self.auto_sigma = bool(feature_map.awaits_bandwidth)

    # ---- declaring -----------------------------------------------------------------------------------------------
    def _add_accumulator(
        self,
        name: str,
        covariance: bool = True,
        centre: bool = False,
        reference: bool = False,
        multipliers: Optional[Multipliers] = None,
        *,
        feature_map: Optional[FeatureMap] = None,
        accumulator_class: type[Accumulator] = Accumulator,
        same_samples_as: Optional[str] = None,
        mean_draws: bool = False,
    ) -> Accumulator:
        """Declare an [`Accumulator`][lightning_spectral.metrics.Accumulator] (of this metric's feature map unless
        ``feature_map`` names another, e.g. one side of a joint map).

        ``reference=True`` marks a stream of the reference ("real") data: kept by ``reset()`` when
        ``reset_real_features=False`` and cleared by
        [`reset_reference`][lightning_spectral.metrics.SpectralMetric.reset_reference]. ``multipliers`` keeps the
        stream's sampling-noise draws ([`sampling_noise`][lightning_spectral.functional.sampling_noise]).
        ``same_samples_as`` names an accumulator declared before that sees exactly these samples (another view of
        them): [`sample_count`][lightning_spectral.metrics.SpectralMetric.sample_count] counts them once, and a
        checkpoint must give both the same count. ``accumulator_class`` is an ``Accumulator`` subclass taking the
        same arguments. ``mean_draws`` (with ``multipliers``) also keeps the draws of the mean (``Accumulator``).
        """
        if same_samples_as is not None and same_samples_as not in self.accumulators:
            raise ValueError(f"{type(self).__name__}: `same_samples_as` names no accumulator ({same_samples_as!r}).")
        feature_map = self.feature_map if feature_map is None else feature_map
        extra = {"mean_draws": True} if mean_draws else {}
        accumulator = accumulator_class(
            self, name, feature_map, covariance, centre, self.chunk_size, multipliers, **extra
        )
        self.accumulators[name] = accumulator
        if reference:
            self.reference_names = (*self.reference_names, name)
        if same_samples_as is not None:
            self.same_samples[name] = same_samples_as
        return accumulator

    @property
    def in_features(self) -> Any:
        """The input width (a pair for paired metrics), ``None`` until the first batch."""
        return self.feature_map.in_features

    def _build(self, in_features: Any) -> None:
        """Fix the input width (a pair of widths for paired metrics) and size the accumulators that waited for it."""
        self.feature_map.build(in_features)
        for accumulator in self.accumulators.values():
            accumulator.allocate(accumulator.feature_map.out_features)  # type: ignore[arg-type]

    # ---- input ---------------------------------------------------------------------------------------------------
    def _embeddings(self, x: Tensor, name: str = "features") -> Tensor:
        """Validated embeddings (N, d) of an update's input: through ``feature`` for images, else as given.

        The first batch fixes the input width.

        Raises:
            TypeError / ValueError: wrong type, rank or width, NaN / Inf; image errors (see
                [`FrozenFeature`][lightning_spectral.metrics.FrozenFeature]).
        """
        if self.feature is not None:
            x = self.feature(x, name)
        x = check_features(x, name, width=self.in_features, owner=type(self).__name__)
        if self.in_features is None:
            self._build(x.shape[1])
        return x

    def _flush(self) -> None:
        """Map and add every accumulator's pending rows (done before anything reads the sums)."""
        for accumulator in self.accumulators.values():
            accumulator.flush()

    def fit_bandwidth(self) -> Optional[float]:
        """Fix ``sigma="auto"`` now from the reference rows held so far (every held row for a one-sample metric) and
        map the held rows; a no-op once sigma is fixed. Returns sigma.

        Called by the first read (``compute``, ``summary``, a sync, a checkpoint); call it yourself after the
        reference pass to stop holding rows. The rule and its invariance:
        [`auto_bandwidth`][lightning_spectral.kernels.auto_bandwidth]. A collective under DDP.

        Raises:
            RuntimeError: fewer than 2 reference rows on all ranks (feed the reference first).
        """
        from lightning_spectral.metrics.auto_bandwidth import reference_bandwidth

        if not self.feature_map.awaits_bandwidth:
            return getattr(self, "sigma", None)
        group = self.process_group if distributed_available() else None
        sigma = reference_bandwidth(self._bandwidth_rows(), type(self).__name__, group)
        self._set_bandwidth(sigma)
        self._flush()
        return sigma

    def _bandwidth_rows(self) -> Tensor:
        """The held rows ``sigma="auto"`` reads on this rank (float64 (N, d)): the reference's for a two-sample
        metric, every held row for a one-sample one."""
        names = self.reference_names if self.two_sample else tuple(self.accumulators)
        held = [rows for name in names for rows in self.accumulators[name].held_rows]
        width = self.in_features if isinstance(self.in_features, int) else 0
        return torch.cat(held) if held else torch.zeros(0, width, dtype=torch.float64)

    def _set_bandwidth(self, sigma: Any) -> None:
        """Fix a ``sigma="auto"`` bandwidth to ``sigma`` (the fitted value, or a checkpoint's) without mapping the held
        rows: the map, the noise multipliers that follow it, and ``sigma``."""
        self.feature_map.set_bandwidth(sigma)
        for accumulator in self.accumulators.values():  # the noise multipliers follow the kernel's bandwidth
            multipliers = getattr(accumulator, "multipliers", None)
            if multipliers is not None and multipliers.bandwidth is None:
                multipliers.bandwidth = self._noise_bandwidth(sigma)
        self.sigma = sigma
        if hasattr(self, "sigmas"):
            self.sigmas = (sigma,)

    def _noise_bandwidth(self, sigma: float) -> float:
        """The scale of the noise multipliers (`functional.sampling_noise`) for the kernel bandwidth ``sigma``:
        ``sigma`` itself, unless a metric's rows hold several scales."""
        return sigma

    def _fitted_bandwidth(self) -> Any:
        """What a checkpoint keeps of a fitted ``sigma="auto"`` (``sigma``), given back to
        `_set_bandwidth` on load."""
        return float(self.sigma)

    # ---- sync ----------------------------------------------------------------------------------------------------
    def sync(
        self,
        dist_sync_fn: Optional[Callable] = None,
        process_group: Optional[Any] = None,
        should_sync: bool = True,
        distributed_available: Optional[Callable] = None,
    ) -> None:
        """torchmetrics' ``sync``, after flushing and after the ranks agree on widths, sizes, frequencies and shifts
        (a rank that saw no sample builds its map and takes part with zeros)."""
        self.fit_bandwidth()  # "auto": every rank takes part, whether it holds rows or not
        self._flush()
        available = distributed_available or self.distributed_available_fn
        if should_sync and callable(available) and available():
            agree_across_ranks(self, process_group or self.process_group)
        super().sync(dist_sync_fn, process_group, should_sync, distributed_available)

    # ---- reading -------------------------------------------------------------------------------------------------
    #: The class of this metric's reading ([`Reading`][lightning_spectral.metrics.Reading] subclass).
    reading_class: type[Reading] = Reading

    def reading(self) -> Reading:
        """The sums read once: the one collective of an epoch (the all-reduce of every accumulator's sums under
        DDP), then a frozen, typed [`Reading`][lightning_spectral.metrics.Reading] whose every answer (value,
        spectrum, modes, standard errors, summary, galleries, pictures) is computed on first use and kept on it.

        Without DDP a reading is kept by the metric until the sums change, so a second call returns it again; an
        ``update`` after it leaves a reading you hold as it was. Under DDP every call is a collective (all ranks
        call it together), and reads nothing of other ranks after it returns.
        """
        with self.sync_context(
            dist_sync_fn=self.dist_sync_fn, process_group=self.process_group, should_sync=self.sync_on_compute
        ):
            return self._read()

    def _read(self) -> Reading:
        """The reading of the sums as they are now (all ranks' when synced), the kept one if it still reads them."""
        self.fit_bandwidth()
        self._flush()
        kept = self._kept_reading
        if kept is not None and kept.reads(self):
            return kept
        reading = self.reading_class(self)
        self._kept_reading, self._lent_reading = reading, weakref.ref(reading)
        return reading

    def _writable_state(self, state_name: str) -> Tensor:
        """The state ``state_name``, about to change in place: the metric lets go of its reading, and copies the state
        first while a reading someone still holds reads it (copy on write)."""
        self._kept_reading = None
        flat = getattr(self, state_name)
        lent = None if self._lent_reading is None else self._lent_reading()
        if lent is not None and lent.holds(flat):
            flat = flat.clone()
            setattr(self, state_name, flat)
        return flat

    def compute(self) -> Any:
        """The metric's value over all ranks (torchmetrics syncs the sums first):
        [`reading`][lightning_spectral.metrics.SpectralMetric.reading]``().value``."""
        return self._read().value

    # ---- torchmetrics' lifecycle ---------------------------------------------------------------------------------
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """As torchmetrics' ``forward`` (update, and return the value of this batch alone), for one-sample metrics.

        Raises:
            RuntimeError: for two-sample metrics, which have no per-batch value (one side of one batch). Call
                ``update(x, real=...)`` in the step and log the metric object at epoch level instead.
        """
        if self.two_sample:
            raise RuntimeError(
                f"{type(self).__name__}(...) was called like a function, but a two-sample metric has no per-batch "
                "value. Call `metric.update(x, real=...)` in the step and log the metric object at epoch level: "
                "`self.log(name, metric, on_step=False, on_epoch=True)` (the default in validation_step)."
            )
        return super().forward(*args, **kwargs)

    def reset(self) -> None:
        """Clear the sums; the reference streams too unless ``reset_real_features`` is False. Frequencies stay."""
        self._kept_reading = None  # a reading held elsewhere keeps its own sums; the metric lets go of its one
        kept = [] if self.reset_real_features else [self.accumulators[name] for name in self.reference_names]
        saved = [(accumulator.state_name, accumulator.state) for accumulator in kept]
        for accumulator in self.accumulators.values():
            accumulator.discard()
        super().reset()  # every sum is its one-zero default now (the full-size zeros are not kept twice)
        for accumulator in self.accumulators.values():
            if accumulator not in kept:
                accumulator.clear()
        for state_name, state in saved:
            setattr(self, state_name, state)

    def merge_state(self, incoming_state: Any) -> None:
        """torchmetrics' ``merge_state``: add another metric's sums to this one's, so that it reads what one metric fed
        both streams would (the way Ray and other engines combine metrics built apart). Both must be built alike (the
        same class, settings and frequencies, and any ``sigma="auto"`` fitted to the same value); pending rows are
        added first, and a centred stream's sums are re-expressed around this metric's shift (exact algebra). As
        torchmetrics' own, it is no ``update``: a metric merged into before any update warns at ``compute``.

        Raises:
            ValueError: ``incoming_state`` is no metric of this class, or was built otherwise (named); nothing is
                changed then.
        """
        from lightning_spectral.sync.agreement import frequency_fingerprint

        owner = type(self).__name__
        if type(incoming_state) is not type(self):
            raise ValueError(f"{owner}.merge_state: `incoming_state` must be another {owner} (built with the same "
                             f"settings), got {type(incoming_state).__name__}; a dict of states cannot be checked "
                             "against the frequencies, so pass the metric itself.")
        other = incoming_state

        def check() -> None:
            problems = []
            if None not in (self.in_features, other.in_features) and other.in_features != self.in_features:
                problems.append(f"input widths {other.in_features} and {self.in_features}")
            elif None in (self.in_features, other.in_features) or self.feature_map.awaits_bandwidth or (
                other.feature_map.awaits_bandwidth
            ):
                pass  # compared once both are built and fitted
            elif not _same(frequency_fingerprint(other), frequency_fingerprint(self)):
                problems.append("other frequencies (another sigma, n_frequencies or seed)")
            if other._checkpoint_settings() != self._checkpoint_settings():
                problems.append(f"settings {other._checkpoint_settings()} and {self._checkpoint_settings()}")
            if problems:
                raise ValueError(f"{owner}.merge_state: the two metrics were built or fed differently "
                                 f"({'; '.join(problems)}); build both with the same arguments and seed.")

        check()  # before anything is flushed or fitted
        for metric in (self, other):
            metric.fit_bandwidth()
            metric._flush()
        if other.in_features is None:
            check()  # sigma="auto": the fitted frequencies
            return
        if self.in_features is None:  # nothing seen here yet: take the other's width (undone if refused)
            snapshot = checkpoint.Snapshot(self)
            self._build(other.in_features)
            try:
                check()
            except ValueError:
                snapshot.restore()
                raise
        check()  # sigma="auto": the fitted frequencies
        for name, accumulator in self.accumulators.items():
            added = other.accumulators[name].rebased_state(accumulator)
            setattr(self, accumulator.state_name, accumulator.state + added)

    # ---- protocol ------------------------------------------------------------------------------------------------
    @property
    def two_sample(self) -> bool:
        """True when ``update`` takes ``real=`` (a reference side and a generated / test side)."""
        return self.inputs == "two"

    def sample_count(self, real: bool = False) -> int:
        """Samples accumulated on the measured side (``real=False``) or the reference side, all ranks: the counts of
        its accumulators, each sample once (an accumulator declared ``same_samples_as`` another is not added).

        The counts alone are all-reduced (a collective under DDP: every rank must call it, and all get the same answer;
        a [`Reading`][lightning_spectral.metrics.Reading] has them without one).
        """
        check_bool(real, "real")
        names = [
            n for n in self.accumulators if (n in self.reference_names) == real and n not in self.same_samples
        ]
        local = sum((self.accumulators[n].count for n in names), torch.zeros((), dtype=torch.float64))
        if distributed_available():
            local = all_reduce_sum(local.to(collective_device(self.process_group)), self.process_group)[0]
        return int(local)

    def reset_reference(self) -> None:
        """Clear the reference streams (e.g. to embed the reference again with a model that changed)."""
        self._kept_reading = None
        for name in self.reference_names:
            accumulator = self.accumulators[name]
            accumulator.discard()
            setattr(self, accumulator.state_name, torch.zeros_like(getattr(self, accumulator.state_name)))

    #: Whether the metric's values are scalars a callback can log (a covariance matrix is not): callbacks refuse, when
    #: they are built, a metric that says ``False``.
    reports_scalars: bool = True

    # ---- pictures ------------------------------------------------------------------------------------------------
    def plot(self, val: Any = None, ax: Any = None) -> tuple[Any, Any]:
        """torchmetrics' ``plot``: the metric's value, or a list of values over steps; see
        `plot_value`."""
        if val is None:
            val = self.reading().value
        return plotting.plot_value(self, val, ax)

    # ---- checkpoints, devices, pickling --------------------------------------------------------------------------
    def persistent(self, mode: bool = False) -> None:
        """Whether ``state_dict`` carries the sums (``True`` by default; ``False``: a resumed run starts them anew).

        The sums travel packed in the extra state (`metrics.checkpoint`): an empty
        accumulator writes its count only, a covariance its upper triangle.
        """
        self._persistent_sums = check_bool(mode, "mode")

    def _checkpoint_settings(self) -> dict[str, Any]:
        """Settings a checkpoint's sums depend on beyond the frequencies' fingerprint (written with the sums and
        compared on load; none by default)."""
        return {}

    def get_extra_state(self) -> Any:
        return checkpoint.extra_state(self, sums=self._persistent_sums)

    def set_extra_state(self, state: Any) -> None:
        checkpoint.load_extra_state(self, state)

    def _apply(self, fn: Callable, exclude_state: Any = "") -> "SpectralMetric":
        # The one private torchmetrics method overridden here (tests/test_torchmetrics_api.py pins it): a parent's
        # dtype cast (Lightning's "bf16-true" calls `module.to(dtype)`, which torchmetrics applies to states) must
        # move the float64 sums without rounding them.
        names = tuple(accumulator.state_name for accumulator in self.accumulators.values())
        this = super()._apply(fn, exclude_state=names)
        for name in names:
            value = getattr(this, name)
            moved = fn(value)
            setattr(this, name, moved if moved.dtype == value.dtype else value.to(moved.device))
        return this

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_kept_reading"], state["_lent_reading"] = None, None  # a reading is not sent along (nor a weak reference)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        # Unpickled in a process started by torch.multiprocessing (Lightning's "ddp_spawn" on CPU), tensors arrive
        # in shared memory: every rank would add into the same sums. Give each process its own copy.
        for accumulator in self.accumulators.values():
            value = getattr(self, accumulator.state_name)
            if value.is_shared():
                setattr(self, accumulator.state_name, value.clone())


def _same(a: Optional[Tensor], b: Optional[Tensor]) -> bool:
    """Two fingerprints (or ``None``) equal."""
    if a is None or b is None:
        return a is None and b is None
    return bool(torch.equal(a, b.to(a.device)))
