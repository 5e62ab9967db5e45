"""The base of every metric here: accumulated sides under one lazily built feature map, one all-reduce per sync.

A :class:`SpectralMetric` is a ``torchmetrics.Metric`` whose states are the float64 sums of its
:class:`~lightning_spectral.metrics.side.CovarianceSide` s. The base does, once for all metrics:

- **input**: embeddings (N, d), or images through a frozen ``feature`` extractor (:class:`FrozenFeature`);
- **buffering**: rows wait per side until ``chunk_size`` are pending; every read flushes (``compute``, sync,
  ``state_dict``, ``forward``, ``reset``, device moves, pickling);
- **sync**: ranks first agree on the input width, the state sizes and the frequencies (a rank that saw no sample
  builds its map and takes part with zeros; a mismatch raises on every rank), then all states travel in one
  all-reduce;
- **checkpoints**: a side that holds no sample writes only its count; covariance sums are written as their upper
  triangle; the frequencies are redrawn from the seed and only checked against a fingerprint;
- **the protocol callbacks and the command line use**: :attr:`two_sample`, :meth:`sample_count`,
  :meth:`reset_reference`, :meth:`galleries`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Callable, NamedTuple, Optional

import torch
from torch import Tensor, nn
from torchmetrics import Metric

from lightning_spectral._checks import check_features, check_positive, check_positive_int, check_seed
from lightning_spectral.distributed import (
    all_gather_rows,
    all_reduce_sum,
    collective_device,
    distributed_available,
    fingerprint,
)
from lightning_spectral.features import GaussianRFF
from lightning_spectral.linalg import DEFAULT_CHUNK_SIZE
from lightning_spectral.metrics.feature import FrozenFeature
from lightning_spectral.metrics.side import CovarianceSide

class ModeGallery(NamedTuple):
    """The rows of a mode gallery: per mode, its top samples ``(ids, scores)`` and a label for the row."""

    samples: list[tuple[Tensor, Tensor]]
    labels: list[str]


class SpectralMetric(Metric):
    """A ``torchmetrics.Metric`` whose states are the sums of accumulated sides under one feature map.

    Subclasses declare sides with :meth:`add_side` and build their map in :meth:`build_feature_map`.

    Args:
        chunk_size: rows per chunk: pending rows are flushed (mapped and summed) once this many wait.
        feature: optional frozen ``nn.Module`` mapping a batch of images to (N, d) embeddings: ``update`` then
            takes images (see :class:`FrozenFeature` for the input conventions).
        normalize: with ``feature``: images are floats in [0, 1] (``True``) or ``uint8`` in [0, 255] (``False``,
            torchmetrics' FID convention).
        save_feature: with ``feature``: also write its weights into the metric's ``state_dict``.
        kwargs: ``torchmetrics.Metric`` keyword arguments.
    """

    full_state_update = False
    is_differentiable = False
    #: How ``update`` is called: ``"one"`` (``update(x)``), ``"two"`` (``update(x, real=...)``) or ``"paired"``
    #: (``update(emb_a, emb_b)``, two embeddings of the same samples).
    inputs: str = "one"
    feature_map: Optional[nn.Module]

    def __init__(
        self,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        feature: Optional[nn.Module] = None,
        normalize: bool = False,
        save_feature: bool = False,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("dist_sync_fn", all_reduce_sum)
        super().__init__(**kwargs)
        self.chunk_size = check_positive_int(chunk_size, "chunk_size")
        self.feature_map = None
        self.in_features: Any = None  # an int, or a pair of widths for paired metrics
        self.sides: dict[str, CovarianceSide] = {}
        self.reference_sides: tuple[str, ...] = ()
        self.reset_real_features = True
        self.feature = None if feature is None else FrozenFeature(feature, normalize=normalize, save=save_feature)

    # ---- declaring -----------------------------------------------------------------------------------------------
    def add_side(
        self,
        name: str,
        width: Optional[int],
        covariance: bool = True,
        bandwidths: Optional[int] = None,
        centre: bool = False,
        reference: bool = False,
    ) -> CovarianceSide:
        """Declare an accumulated side (see :class:`~lightning_spectral.metrics.side.CovarianceSide`).

        ``reference=True`` marks a side of the reference ("real") data: kept by ``reset()`` when
        ``reset_real_features=False`` and cleared by :meth:`reset_reference`.
        """
        side = CovarianceSide(self, name, width, covariance, bandwidths, centre)
        self.sides[name] = side
        if reference:
            self.reference_sides = (*self.reference_sides, name)
        return side

    def side(self, name: str) -> CovarianceSide:
        """The side called ``name``."""
        return self.sides[name]

    def build_feature_map(self, in_features: Any) -> nn.Module:
        """The feature map for inputs of width ``in_features`` (subclasses)."""
        raise NotImplementedError

    def feature_width(self, in_features: Any) -> int:
        """Width ``D`` of the features of inputs of width ``in_features`` (default: the map's ``out_features``)."""
        return int(self.require_feature_map().out_features)  # type: ignore[union-attr]

    def frequency_signature(self) -> Optional[Tensor]:
        """What every rank must hold identically (frequencies, bandwidths); ``None`` abstains."""
        return None

    def set_feature_map(self, in_features: Any) -> nn.Module:
        """Build the feature map for inputs of width ``in_features`` (a pair of widths for paired metrics) and size
        the sides that waited for it."""
        widths = tuple(in_features) if isinstance(in_features, (tuple, list)) else (in_features,)
        widths = tuple(check_positive_int(width, "in_features") for width in widths)
        self.in_features = widths if self.inputs == "paired" else widths[0]
        self.feature_map = self.build_feature_map(self.in_features).to(self.device)
        width = self.feature_width(in_features)
        for side in self.sides.values():
            if side.width is None:
                side.allocate(width)
        return self.feature_map

    def map_rows(self, rows: Tensor) -> Tensor:
        """Features of validated input rows: ``feature_map(rows)`` (N, D), or (B, N, D) for several bandwidths."""
        return self.require_feature_map()(rows)

    def sum_rows(self, rows: Tensor) -> Tensor:
        """``map_rows(rows).sum(-2)``, (D,) or (B, D); through the map's ``feature_sum`` when it has one."""
        feature_map = self.require_feature_map()
        if type(self).map_rows is SpectralMetric.map_rows and hasattr(feature_map, "feature_sum"):
            return feature_map.feature_sum(rows)
        return self.map_rows(rows).sum(-2)

    def require_feature_map(self) -> nn.Module:
        if self.feature_map is None:
            raise RuntimeError(f"{type(self).__name__}: no feature map yet (no sample was seen).")
        return self.feature_map

    # ---- input ---------------------------------------------------------------------------------------------------
    def embeddings(self, x: Tensor, name: str = "features") -> Tensor:
        """Validated embeddings (N, d) of an update's input: through ``feature`` for images, else as given.

        The first batch fixes the input width and builds the feature map.

        Raises:
            TypeError / ValueError: wrong type, rank or width, NaN / Inf; image errors (see :class:`FrozenFeature`).
        """
        if self.feature is not None:
            x = self.feature(x, name)
        x = check_features(x, name, width=self.in_features, owner=type(self).__name__)
        if self.feature_map is None:
            self.set_feature_map(x.shape[1])
        return x

    # ---- buffering -----------------------------------------------------------------------------------------------
    def flush(self) -> None:
        """Map and add every side's pending rows (done before anything reads the sums)."""
        for side in self.sides.values():
            side.flush()

    def sync(
        self,
        dist_sync_fn: Optional[Callable] = None,
        process_group: Optional[Any] = None,
        should_sync: bool = True,
        distributed_available: Optional[Callable] = None,
    ) -> None:
        """torchmetrics' ``sync``, after flushing and after the ranks agree on sizes, frequencies and shifts (so
        that a rank which saw no sample takes part with zeros of the right size)."""
        self.flush()
        available = distributed_available or self.distributed_available_fn
        if should_sync and not self._is_synced and callable(available) and available():
            self._agree_across_ranks(process_group or self.process_group)
        super().sync(dist_sync_fn, process_group, should_sync, distributed_available)

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
        self.flush()
        return super().forward(*args, **kwargs)

    def reset(self) -> None:
        """Clear the sums; the reference sides too unless ``reset_real_features`` is False. Frequencies stay."""
        kept = () if self.reset_real_features else self.reference_sides
        saved = {}
        for name in kept:
            self.sides[name].flush()
            saved.update({state: getattr(self, state) for state in self.sides[name].states})
        for name, side in self.sides.items():
            if name not in kept:
                side.discard()
        super().reset()
        for state, value in saved.items():
            setattr(self, state, value)

    # ---- protocol ------------------------------------------------------------------------------------------------
    @property
    def two_sample(self) -> bool:
        """True when ``update`` takes ``real=`` (a reference side and a generated / test side)."""
        return self.inputs == "two"

    def sample_count(self, real: bool = False) -> int:
        """Samples accumulated on the generated / test side (``real=False``) or the reference side, all ranks.

        A collective under DDP: every rank must call it (all get the same answer).
        """
        names = self.reference_sides if real else tuple(n for n in self.sides if n not in self.reference_sides)
        local = torch.stack([self.sides[n].count for n in names]).sum() if names else torch.zeros((), dtype=torch.float64)
        if distributed_available():
            local = all_reduce_sum(local.to(collective_device(self.process_group)), self.process_group)[0]
        return int(local)

    def reset_reference(self) -> None:
        """Clear the reference sides (e.g. to embed the reference again with a model that changed)."""
        for name in self.reference_sides:
            self.sides[name].reset()
        self._computed = None

    def summary(self) -> dict[str, Tensor]:
        """Every value the metric reports, by name (``""`` is the metric's own value, ``compute()``).

        Callbacks log ``{name}`` and ``{name}/{key}``; subclasses add values (FastMMD its p-value, FINC its
        missing modes). A collective under DDP.
        """
        return {"": self.compute()}

    def galleries(
        self, batches: Iterable[tuple[Any, Any]], k: int, per_mode: int, reference_batches: Optional[Iterable] = None
    ) -> dict[str, ModeGallery]:
        """Top samples of the top modes from a second pass over ``(features, ids)`` batches, by gallery name.

        ``reference_batches`` (reference samples) feed galleries of the reference side (FINC's missing modes).
        The default has none. A collective under DDP.
        """
        return {}

    # ---- pictures (matplotlib is imported inside, when a plot is made) -------------------------------------------
    def plot(self, val: Any = None, ax: Any = None) -> tuple[Any, Any]:
        """torchmetrics' ``plot``: the metric's value, or a list of values over steps (one line per value).

        ``val=None`` plots ``compute()``. Scalars, per-bandwidth vectors and dicts of orders go through torchmetrics'
        ``plot_single_or_multi_val``; a metric whose value is a matrix (``RFFCovariance``) plots its eigen-spectrum
        (a list of matrices: one spectrum per step).

        Args:
            val: a value of ``compute()``, or a sequence of them (steps).
            ax: a matplotlib axis to draw into (default: a new figure).

        Returns:
            ``(figure, axis)``.

        Examples:
            >>> import torch
            >>> from lightning_spectral.metrics import FKEAVendi
            >>> metric = FKEAVendi(sigma=1.0, n_frequencies=64)
            >>> values = []
            >>> for step in range(3):
            ...     metric.update(torch.randn(50, 2, generator=torch.Generator().manual_seed(step)) * (step + 1))
            ...     values.append(metric.compute())
            >>> figure, axis = metric.plot(values)        # Vendi over three steps
            >>> len(axis.lines[0].get_xdata())
            3
        """
        value = self.compute() if val is None else val
        steps = list(value) if isinstance(value, (list, tuple)) else [value]
        if steps and all(isinstance(v, Tensor) and v.ndim == 2 and v.shape[0] == v.shape[1] for v in steps):
            from lightning_spectral.linalg import psd_eigenvalues
            from lightning_spectral.viz import plot_spectra, plot_spectrum

            spectra = [psd_eigenvalues(v.double()) for v in steps]
            name = type(self).__name__
            if isinstance(value, (list, tuple)):
                figure = plot_spectra(spectra, title=f"{name}: eigen-spectrum over steps", ax=ax)
            else:
                figure = plot_spectrum(spectra[0], title=f"{name}: eigen-spectrum", ax=ax)
            return figure, figure.axes[0] if ax is None else ax
        return self._plot(value, ax)

    def plot_spectrum(self, ax: Any = None, top: int = 50) -> tuple[Any, Any]:
        """The picture behind the metric's value: by default one bar panel per value of :meth:`summary`, a bar per
        component (FastMMD: MMD^2 and the p-value per bandwidth, with the 5 % level dashed). Metrics with an
        eigen-spectrum override it (FKEA: the kernel covariance's spectrum; FINC: novel and missing spectra with
        their significance thresholds; SPEC: the signed spectrum). A collective under DDP (every rank calls it).

        Args:
            ax: an axis, or a sequence of axes (one per panel); default a new figure.
            top: the largest eigenvalues shown (spectra).

        Returns:
            ``(figure, axis)``, or ``(figure, [axes])`` for several panels.
        """
        from lightning_spectral.viz import plot_values

        check_positive_int(top, "top")
        values = {
            key: torch.stack([torch.as_tensor(v) for v in value.values()]) if isinstance(value, dict) else value
            for key, value in self.summary().items()
        }
        figure = plot_values(values, title=type(self).__name__, lines={"p_value": 0.05}, ax=ax)
        axes = list(figure.axes) if ax is None else ax
        return figure, axes[0] if isinstance(axes, list) and len(axes) == 1 else axes

    # ---- sync ----------------------------------------------------------------------------------------------------
    def _sync_dist(self, dist_sync_fn: Callable = all_reduce_sum, process_group: Optional[Any] = None) -> None:
        group = process_group or self.process_group
        names = [name for name in self._sums() if not name.endswith("_shift")]  # shifts are agreed, not summed
        flat = torch.cat([getattr(self, name).reshape(-1) for name in names]).to(collective_device(group))
        gathered = dist_sync_fn(flat, group=group)
        total = gathered[0] if len(gathered) == 1 else torch.stack(gathered).sum(0)
        offset = 0
        for name in names:
            value = getattr(self, name)
            setattr(self, name, total[offset : offset + value.numel()].reshape(value.shape).to(value.device))
            offset += value.numel()

    def _agree_across_ranks(self, group: Optional[Any]) -> None:
        """Every rank votes, all decide alike: widths, then state sizes and frequencies, then shifts.

        Raises:
            RuntimeError: on every rank, when ranks were built differently (the message names the arguments).
        """
        owner = type(self).__name__
        mine = self.in_features if isinstance(self.in_features, tuple) else (self.in_features or 0, 0)
        widths = all_gather_rows(torch.tensor([mine], dtype=torch.float64), group)
        seen = widths[widths[:, 0] > 0]
        if seen.shape[0] and bool((seen != seen[0]).any()):
            raise RuntimeError(
                f"{owner}: ranks saw inputs of different widths {sorted(set(map(tuple, seen.long().tolist())))}; "
                "every rank must feed embeddings of the same encoder(s)."
            )
        if self.in_features is None and seen.shape[0]:  # this rank saw no sample: it joins with zeros
            first = [int(w) for w in seen[0].tolist()]
            self.set_feature_map(tuple(first) if self.inputs == "paired" else first[0])
        signature = self.frequency_signature()
        vote = torch.cat(
            [
                torch.tensor([float(getattr(self, name).numel()) for name in self._sums()], dtype=torch.float64),
                fingerprint(signature) if signature is not None else torch.full((7,), float("nan"), dtype=torch.float64),
            ]
        )
        votes = all_gather_rows(vote[None], group)
        sizes = votes[:, : len(self._sums())]
        if bool((sizes != sizes[0]).any()):
            raise RuntimeError(
                f"{owner}: the metric's states have different sizes on different ranks: every rank must build it with "
                "the same `n_frequencies`, `sigma` (number of bandwidths) and settings."
            )
        prints = votes[:, len(self._sums()) :]
        voters = prints[~torch.isnan(prints).any(1)]
        if voters.shape[0] and bool(((voters - voters[0]).abs() > 1e-9 * voters[0].abs().clamp_min(1.0)).any()):
            raise RuntimeError(
                f"{owner}: random Fourier frequencies differ across ranks. Every rank must build the metric with the "
                "same `seed`, `sigma`, `n_frequencies` and input width."
            )
        for side in self.sides.values():
            if side.centre:
                count = getattr(self, f"{side.name}_count")
                weighted = torch.cat([side.shift.reshape(-1) * count, count.reshape(1)])[None]
                total = all_gather_rows(weighted, group).sum(0)
                shift = total[:-1] / total[-1].clamp_min(1.0)
                side.rebase(shift.reshape(side.shift.shape).to(side.shift.device))

    @contextmanager
    def synced(self) -> Iterator[None]:
        """Inside the block the sums cover all ranks (as in ``compute``); local sums are restored after.

        For methods other than ``compute`` (``modes``, ``top_samples``...). A collective under DDP.
        """
        if self._is_synced:
            yield
            return
        with self.sync_context(dist_sync_fn=self.dist_sync_fn, should_sync=self._to_sync, should_unsync=True):
            yield

    def cached(self, name: str, fn: Callable[[], Any]) -> Any:
        """``fn()``, reused while the sums are unchanged (eigendecompositions of 2r x 2r matrices cost seconds).

        Keyed by ``name``, whether the states are synced, and the sum of every state, so any update, reset, load
        or sync invalidates it.
        """
        self.flush()
        key = (name, self._is_synced, tuple(float(getattr(self, state).sum()) for state in self._sums()))
        entry = getattr(self, "_spectral_cache", None)
        if entry is not None and entry[0] == key:
            return entry[1]
        value = fn()
        self._spectral_cache = (key, value)
        return value

    # ---- devices, pickling, checkpoints -------------------------------------------------------------------------
    def _apply(self, fn: Callable, exclude_state: Any = "") -> "SpectralMetric":
        # States are float64 sums by design: a parent's dtype cast ("bf16-true") moves them but never rounds them.
        self.flush()
        this = super()._apply(fn, exclude_state=tuple(self._sums()))

        def device_only(value: Tensor) -> Tensor:
            moved = fn(value)
            return moved if moved.dtype == value.dtype else value.to(moved.device)

        for key in this._sums():
            this._defaults[key] = device_only(this._defaults[key])
            setattr(this, key, device_only(getattr(this, key)))
        return this

    def _sums(self) -> list[str]:
        """The tensor states (the sums and counts; the pending-row lists are not among them)."""
        return [name for name, default in self._defaults.items() if isinstance(default, Tensor)]

    def __getstate__(self) -> dict[str, Any]:
        self.flush()
        return super().__getstate__()

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        # Unpickled in a process started by torch.multiprocessing (Lightning's "ddp_spawn" on CPU), tensors arrive
        # in shared memory: every rank would add into the same sums. Give each process its own copy.
        for key in self._sums():
            value = getattr(self, key)
            if value.is_shared():
                setattr(self, key, value.clone())

    def state_dict(self, destination: Any = None, prefix: str = "", keep_vars: bool = False) -> Any:
        """torchmetrics' ``state_dict``, compact: an empty side writes its count only, and a covariance sum its
        upper triangle. ``metric.persistent(False)`` leaves all sums out (then a resumed run starts them anew)."""
        self.flush()
        destination = super().state_dict(destination=destination, prefix=prefix, keep_vars=keep_vars)
        for side in self.sides.values():
            if f"{prefix}{side.name}_count" not in destination:
                continue
            empty = float(getattr(self, f"{side.name}_count")) == 0
            for state in side.states[1:]:
                key = prefix + state
                if empty:
                    destination.pop(key, None)
                elif state.endswith("_cov_sum") and key in destination:
                    destination[key] = pack_symmetric(destination[key])
        return destination

    def get_extra_state(self) -> Any:
        signature = self.frequency_signature()
        return {"in_features": self.in_features, "frequencies": None if signature is None else fingerprint(signature)}

    def set_extra_state(self, state: Any) -> None:
        saved = state.get("frequencies")
        signature = self.frequency_signature()
        if saved is not None and signature is not None:
            mine = fingerprint(signature).cpu()
            if bool(((saved.cpu() - mine).abs() > 1e-9 * mine.abs().clamp_min(1.0)).any()):
                raise RuntimeError(
                    f"{type(self).__name__}: the checkpoint was written with other random frequencies; build the "
                    "metric with the `seed`, `sigma` and `n_frequencies` it was saved with."
                )

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: Any, **kwargs: Any) -> None:
        extra = state_dict.get(prefix + "_extra_state")
        if isinstance(extra, dict) and extra.get("in_features") and self.in_features is None:
            self.set_feature_map(extra["in_features"])
        for side in self.sides.values():
            if prefix + f"{side.name}_count" not in state_dict:
                continue
            side.discard()
            for state in side.states[1:]:
                key = prefix + state
                default = self._defaults[state]
                if key not in state_dict:  # an empty side: its sums were not written
                    state_dict[key] = default.clone()
                elif state.endswith("_cov_sum") and state_dict[key].shape != default.shape:
                    state_dict[key] = unpack_symmetric(state_dict[key], default.shape[-1])
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        if any(float(side.count) > 0 for side in self.sides.values()):
            self._update_count = max(self._update_count, 1)  # restored sums count as updates (no compute warning)


def pack_symmetric(matrix: Tensor) -> Tensor:
    """The upper triangle of symmetric (..., D, D) matrices, row by row: (..., D (D + 1) / 2)."""
    width = matrix.shape[-1]
    return torch.cat([matrix[..., i, i:] for i in range(width)], dim=-1)


def unpack_symmetric(packed: Tensor, width: int) -> Tensor:
    """Inverse of :func:`pack_symmetric`: (..., D (D + 1) / 2) -> symmetric (..., D, D)."""
    if packed.shape[-1] != width * (width + 1) // 2:
        raise ValueError(f"a packed symmetric matrix of width {width} has {width * (width + 1) // 2} entries, "
                         f"got {packed.shape[-1]}; the checkpoint does not belong to this metric's settings.")
    matrix = packed.new_zeros(*packed.shape[:-1], width, width)
    offset = 0
    for i in range(width):
        matrix[..., i, i:] = packed[..., offset : offset + width - i]
        offset += width - i
    return matrix + matrix.triu(1).transpose(-1, -2)


class RFFMetric(SpectralMetric):
    """A :class:`SpectralMetric` over the features of one :class:`~lightning_spectral.features.GaussianRFF`.

    The map is built from ``(sigma, n_frequencies, seed)`` and the input width: at construction when
    ``in_features`` is given, otherwise at the first ``update``. Every side has width ``2 r``, known up front.

    Args:
        sigma: Gaussian bandwidth (> 0).
        n_frequencies: r; the features have width 2r.
        seed: frequency seed, identical on every rank.
        in_features: input width, if known (else learnt from the first batch).
        chunk_size: as :class:`SpectralMetric`.
        feature: as :class:`SpectralMetric`.
        normalize: as :class:`SpectralMetric`.
        save_feature: as :class:`SpectralMetric`.
        kwargs: ``torchmetrics.Metric`` keyword arguments.
    """

    feature_map: Optional[GaussianRFF]

    def __init__(
        self,
        sigma: float,
        n_frequencies: int,
        seed: int = 0,
        in_features: Optional[int] = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        feature: Optional[nn.Module] = None,
        normalize: bool = False,
        save_feature: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(chunk_size, feature, normalize, save_feature, **kwargs)
        self.sigma = check_positive(sigma, "sigma")
        self.n_frequencies = check_positive_int(n_frequencies, "n_frequencies")
        self.seed = check_seed(seed)
        if in_features is not None:
            self.set_feature_map(check_positive_int(in_features, "in_features"))

    @property
    def feature_dim(self) -> int:
        """Width of the random features, ``2 * n_frequencies``."""
        return 2 * self.n_frequencies

    def build_feature_map(self, in_features: int) -> GaussianRFF:
        return GaussianRFF(in_features, self.n_frequencies, self.sigma, self.seed, persistent=False)

    def feature_width(self, in_features: Any) -> int:
        return self.feature_dim

    def frequency_signature(self) -> Optional[Tensor]:
        return None if self.feature_map is None else self.feature_map.omega
