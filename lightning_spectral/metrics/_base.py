"""The base of every metric in this library: a lazily built feature map, float64 sum states, synchronised by
all-reduce after a check that every rank holds the same feature map (:class:`SumStateMetric`), and its
random-Fourier-feature specialisation (:class:`RFFMetric`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable, Optional

import torch
from torch import Tensor, nn
from torchmetrics import Metric
from torchmetrics.utilities.distributed import gather_all_tensors

from lightning_spectral._checks import check_features, check_positive, check_positive_int
from lightning_spectral.distributed import all_reduce_sum, check_same_across_ranks
from lightning_spectral.features import GaussianRFF
from lightning_spectral.linalg import DEFAULT_CHUNK_SIZE


class SumStateMetric(Metric):
    """A ``torchmetrics.Metric`` whose states are float64 sums over the features of one (lazily built) feature map.

    The shared machinery of every metric in this library: sum states declared with :meth:`add_sum_state`,
    synchronised with one all-reduce each (:func:`~lightning_spectral.distributed.all_reduce_sum`, also used when
    torchmetrics' default all_gather is requested) after a check that all ranks hold the same feature map
    (:meth:`frequency_signature`); float64 states kept under dtype casts; a spectral cache; the ``synced()``
    context. A rank that saw no samples contributes zeros. Subclasses build ``feature_map``.
    """

    full_state_update = False
    feature_map: Optional[nn.Module]
    #: States of the reference side, kept by ``reset()`` when ``reset_real_features`` is False.
    reference_states: tuple[str, ...] = ()
    reset_real_features: bool = True

    def __init__(self, chunk_size: int = DEFAULT_CHUNK_SIZE, **kwargs: Any) -> None:
        kwargs.setdefault("dist_sync_fn", all_reduce_sum)
        super().__init__(**kwargs)
        self.chunk_size = check_positive_int(chunk_size, "chunk_size")
        self.feature_map = None

    def reset(self) -> None:
        """Clear the states; the reference side too unless ``reset_real_features=False`` (two-sample metrics)."""
        kept = {name: getattr(self, name) for name in self.reference_states if not self.reset_real_features}
        super().reset()
        for name, value in kept.items():
            setattr(self, name, value)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """As torchmetrics' ``forward``; for two-sample metrics (those with ``reference_states``) it only updates.

        torchmetrics computes a per-batch value by resetting, updating and merging the states back; for a
        two-sample metric that would drop (or, with ``reset_real_features=False``, double) the reference
        side, and one side of one batch has no two-sample value anyway. Returns ``None`` for those.
        """
        if self.reference_states:
            self.update(*args, **kwargs)
            return None
        return super().forward(*args, **kwargs)

    def frequency_signature(self) -> Optional[Tensor]:
        """What every rank must hold identically (frequencies, bandwidths); ``None`` abstains (no map yet)."""
        return None

    def add_sum_state(self, name: str, shape: tuple[int, ...] = ()) -> None:
        """Declare a float64 zero-initialised state, summed across ranks and saved in ``state_dict``.

        States are persistent so that a resumed run (a Lightning checkpoint) continues the same sums;
        call ``metric.persistent(False)`` to keep checkpoints small when that is not needed.
        """
        self.add_state(name, default=torch.zeros(shape, dtype=torch.float64), dist_reduce_fx="sum", persistent=True)

    def _sync_dist(self, dist_sync_fn: Callable = all_reduce_sum, process_group: Optional[Any] = None) -> None:
        group = process_group or self.process_group
        check_same_across_ranks(
            self.frequency_signature(), f"{type(self).__name__}: random Fourier frequencies", group=group
        )
        if dist_sync_fn is gather_all_tensors:  # every state is a sum: one all-reduce instead of all_gather
            dist_sync_fn = all_reduce_sum
        super()._sync_dist(dist_sync_fn, process_group=process_group)

    def _apply(self, fn: Callable, exclude_state: Any = "") -> "SumStateMetric":
        # States are float64 sums by design; a dtype cast from a parent (e.g. "bf16-true") may move them
        # between devices but never round them.
        this = super()._apply(fn, exclude_state=tuple(self._defaults))

        def device_only(value: Tensor) -> Tensor:
            moved = fn(value)
            return moved if moved.dtype == value.dtype else value.to(moved.device)

        for key, default in this._defaults.items():
            this._defaults[key] = device_only(default)
            setattr(this, key, device_only(getattr(this, key)))
        return this

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        # Unpickled in a process started by torch.multiprocessing (Lightning's "ddp_spawn" on CPU), tensors
        # arrive in shared memory: every rank would add into the same sums. Give each process its own copy.
        for key in self._defaults:
            value = getattr(self, key)
            if value.is_shared():
                setattr(self, key, value.clone())

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: Any, **kwargs: Any) -> None:
        if self.feature_map is None:
            self._map_from_state_dict(state_dict, prefix + "feature_map.")
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _map_from_state_dict(self, state_dict: dict, prefix: str) -> None:
        """Build a lazily built feature map from a checkpoint's entries under ``prefix`` (if it holds one)."""

    @contextmanager
    def synced(self) -> Iterator[None]:
        """Inside the block the states are summed over all ranks (as in ``compute``); restored after.

        For methods other than ``compute`` (``modes``, ``top_samples``...). Under DDP this is a collective:
        every rank must enter it.
        """
        if self._is_synced:
            yield
            return
        with self.sync_context(dist_sync_fn=self.dist_sync_fn, should_sync=self._to_sync, should_unsync=True):
            yield

    def cached(self, name: str, fn: Callable[[], Any]) -> Any:
        """``fn()``, reused while the states are unchanged (eigendecompositions of 2r x 2r matrices cost seconds).

        One entry per metric, keyed by ``name``, whether the states are synced, and the sum of every state:
        any update, reset, load or sync changes the key, whatever path changed the states.
        """
        key = (name, self._is_synced, tuple(float(getattr(self, state).sum()) for state in self._defaults))
        entry = getattr(self, "_spectral_cache", None)
        if entry is not None and entry[0] == key:
            return entry[1]
        value = fn()
        self._spectral_cache = (key, value)
        return value

    def _require_samples(self, count: Tensor, what: str = "samples") -> None:
        if float(count) <= 0:
            raise RuntimeError(
                f"{type(self).__name__}.compute(): no {what} were accumulated (on any rank). "
                "Call `update(features)` with at least one sample first, or `reset()` was called since."
            )


class RFFMetric(SumStateMetric):
    """A :class:`SumStateMetric` over the features of one :class:`GaussianRFF`.

    The feature map is built from ``(sigma, n_frequencies, seed)`` and the input width: at construction when
    ``in_features`` is given, otherwise at the first ``update``. Subclasses declare their states with
    :meth:`add_sum_state` and map inputs with :meth:`validated_features_map`.
    """

    feature_map: Optional[GaussianRFF]

    def __init__(
        self,
        sigma: float,
        n_frequencies: int,
        seed: int = 0,
        in_features: Optional[int] = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        **kwargs: Any,
    ) -> None:
        super().__init__(chunk_size, **kwargs)
        self.sigma = check_positive(sigma, "sigma")
        self._map_sigma = self.sigma  # the bandwidth the feature map is built with
        self.n_frequencies = check_positive_int(n_frequencies, "n_frequencies")
        self.seed = int(seed)
        if in_features is not None:
            self._build_feature_map(check_positive_int(in_features, "in_features"))

    @property
    def feature_dim(self) -> int:
        """Width of the random features, ``2 * n_frequencies``."""
        return 2 * self.n_frequencies

    def _build_feature_map(self, in_features: int) -> GaussianRFF:
        self.feature_map = GaussianRFF(in_features, self.n_frequencies, self._map_sigma, self.seed).to(self.device)
        return self.feature_map

    def validated_features_map(self, features: Tensor, name: str = "features") -> GaussianRFF:
        """Validate a batch (N, d) and return the feature map for it, building it on first use.

        Raises:
            ValueError / TypeError: wrong rank, a width that differs from earlier batches, NaN or Inf.
        """
        width = None if self.feature_map is None else self.feature_map.in_features
        check_features(features, name, width=width, owner=type(self).__name__)
        return self.feature_map if self.feature_map is not None else self._build_feature_map(features.shape[1])

    def frequency_signature(self) -> Optional[Tensor]:
        """The frequencies (subclasses may add bandwidths)."""
        return None if self.feature_map is None else self.feature_map.omega

    def _map_from_state_dict(self, state_dict: dict, prefix: str) -> None:
        # A metric whose feature map is built lazily learns the input width from the checkpoint.
        omega = state_dict.get(prefix + "omega")
        if omega is not None:
            self._build_feature_map(omega.shape[0])
