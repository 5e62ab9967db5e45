"""The accumulator: the count, feature sum and outer-product sum of one stream of samples under one feature map.

Every method of this library reduces a stream of samples ``x_1 .. x_n`` to the same three float64 sums under one
feature map ``phi`` (FKEA eq. 2, FINC eq. 4, FastMMD App. A.2, kernel PCA OOD section 3):

    n,   s = sum_i (phi(x_i) - c),   Q = sum_i (phi(x_i) - c)(phi(x_i) - c)^T

with ``c`` an optional shift (zero unless ``centre=True``). From them follow the mean ``mu = c + s / n``, the
uncentred second moment ``C = Q / n`` (``c = 0``) and the centred covariance ``Q / n - (s / n)(s / n)^T``; a shift
near the mean keeps the last one exact when the features have a large offset (a float32 product of un-shifted
features cancels catastrophically).

An [`Accumulator`][lightning_spectral.metrics.Accumulator] keeps the three sums as ONE flat float64 state of the
``torchmetrics.Metric`` that holds it
(``[n, s, Q]``, declared with the public ``add_state``), so torchmetrics all-reduces them with the metric: one
all-reduce per accumulator. The state is held once: its declared default (the value torchmetrics keeps for
``reset()``) is a single zero, and the metric's ``reset`` sizes the sums again
([`clear`][lightning_spectral.metrics.Accumulator.clear]), so a (2r)^2 sum costs its own memory, not twice it.
Incoming rows wait in a bounded buffer (a list state) until
``chunk_size`` of them are pending (one large product instead of many small ones), and the buffer is flushed
whenever the sums are read.
"""

from __future__ import annotations

import copy
import math
from typing import NamedTuple, Optional

import torch
from torch import Tensor
from torchmetrics import Metric

from lightning_spectral.algebra.eigen import psd_eigenvalues, symmetric_eigh, top_eigh
from lightning_spectral.algebra.gram import DEFAULT_CHUNK_SIZE, add_feature_sums_, weighted_sum
from lightning_spectral.algebra.precision import full_precision
from lightning_spectral.functional.modes import orient
from lightning_spectral.functional.sampling_noise import Multipliers, NoiseSums
from lightning_spectral.kernels.feature_map import FeatureMap


class Sums(NamedTuple):
    """The named sums of an accumulator's flat state, as views into it (``None`` for a sum it does not keep):
    ``n`` (), ``s`` (B?, D), ``Q`` (B?, D, D), and with multipliers ``w_a`` (L?, A), ``S_a`` (L?, A, D, D) and the
    mean draws ``F_a`` (A, D)."""

    count: Tensor
    feature_sum: Tensor
    outer: Optional[Tensor]
    weight_sums: Optional[Tensor]
    weighted: Optional[Tensor]
    weighted_features: Optional[Tensor]


class StreamSums:
    """The readings of one stream's sums ``n``, ``s``, ``Q``: its mean, second moment, centred covariance, spectrum
    and modes (written once, for an [`Accumulator`][lightning_spectral.metrics.Accumulator] and for several read as
    one stream).

    A subclass provides ``count`` (n), ``feature_sum`` (s, (B?, D)), ``cov_sum`` (Q, (B?, D, D)), ``shift`` (c, or
    ``None``) and the message of an empty stream.
    """

    shift: Optional[Tensor] = None

    @property
    def count(self) -> Tensor:
        raise NotImplementedError

    @property
    def feature_sum(self) -> Tensor:
        raise NotImplementedError

    @property
    def cov_sum(self) -> Tensor:
        raise NotImplementedError

    def _empty_message(self) -> str:
        raise NotImplementedError

    def _require(self) -> float:
        n = float(self.count)
        if n <= 0:
            raise RuntimeError(self._empty_message())
        return n

    def _scaled_cov_sum(self, n: float) -> Tensor:
        """``Q / n``."""
        return self.cov_sum / n

    def mean(self) -> Tensor:
        """``mu = c + s / n`` (B?, D), float64."""
        n = self._require()
        mean = self.feature_sum / n
        return mean if self.shift is None else mean + self.shift

    def second_moment(self) -> Tensor:
        """The uncentred ``C = (1/n) sum_i phi(x_i) phi(x_i)^T`` (B?, D, D) (``C = Q / n`` for an unshifted side)."""
        n = self._require()
        moment = self._scaled_cov_sum(n)
        if self.shift is None:
            return moment
        mean, shift = self.feature_sum / n, self.shift
        return moment + _outer(mean, shift) + _outer(shift, mean) + _outer(shift, shift)

    def centred_covariance(self) -> Tensor:
        """``S = (1/n) sum_i (phi(x_i) - mu)(phi(x_i) - mu)^T = Q / n - (s / n)(s / n)^T`` (B?, D, D)."""
        n = self._require()
        mean = self.feature_sum / n
        return self._scaled_cov_sum(n) - _outer(mean, mean)

    def eigenvalues(self, precision: str = "float64") -> Tensor:
        """Eigenvalues of ``C`` (descending, float64, round-off negatives zeroed; see
        [`psd_eigenvalues`][lightning_spectral.algebra.psd_eigenvalues])."""
        return psd_eigenvalues(self.second_moment(), precision=precision)

    def modes(self, k: Optional[int] = None) -> tuple[Tensor, Tensor]:
        """Eigenvalues (descending, float64) and eigenvectors (columns) of ``C``, each vector's sign fixed so that
        the mode scores sum to >= 0 over this stream's samples (``v . mu >= 0``; FKEA and FINC code); only the top
        ``k`` pairs with ``k`` ([`top_eigh`][lightning_spectral.algebra.top_eigh]: Lanczos for a few pairs of a wide
        ``C``)."""
        if k is None:
            values, vectors = symmetric_eigh(self.second_moment())
        else:
            values, vectors = top_eigh(self.second_moment(), k)
        return values, orient(vectors, self.mean())


class PooledSums(StreamSums):
    """Several [`Accumulator`][lightning_spectral.metrics.Accumulator]s of one feature map (unshifted) read as one
    stream: ``n = sum_j n_j``, ``s = sum_j s_j``, ``C = sum_j Q_j / n``.

    Args:
        accumulators: the accumulators pooled.
        empty_message: the error of a read with no sample.
    """

    def __init__(self, accumulators: list[Accumulator], empty_message: str) -> None:
        self.accumulators, self._empty = accumulators, empty_message

    def _empty_message(self) -> str:
        return self._empty

    @property
    def count(self) -> Tensor:
        """``n = sum_j n_j``, float64 scalar."""
        return sum((a.count for a in self.accumulators), torch.zeros((), dtype=torch.float64))

    @property
    def feature_sum(self) -> Tensor:
        """``s = sum_j s_j`` (B?, D)."""
        return sum(a.feature_sum for a in self.accumulators)  # type: ignore[return-value]

    @property
    def cov_sum(self) -> Tensor:
        """``Q = sum_j Q_j`` (B?, D, D)."""
        return sum(a.cov_sum for a in self.accumulators)  # type: ignore[return-value]

    def _scaled_cov_sum(self, n: float) -> Tensor:
        """``sum_j Q_j / n`` row block by row block (no full-size temporary per term)."""
        return weighted_sum([(1.0 / n, a.cov_sum) for a in self.accumulators])


class Accumulator(StreamSums):
    """The sums ``n``, ``s``, ``Q`` of one stream of samples under ``feature_map``, as one float64 state of ``metric``.

    Args:
        metric: the metric whose states hold the sums (``{name}_sums``) and the pending rows (``{name}_pending``).
        name: the state's name (``"gen"``, ``"ref"``...).
        feature_map: ``phi``; its output width fixes the size of the sums once known
            ([`allocate`][lightning_spectral.metrics.Accumulator.allocate]). A map with
            a leading bandwidth dimension (``MultiBandwidthRFF``, output (B, N, D)) gives sums with that dimension.
        covariance: keep ``Q``; ``False`` keeps the count and the feature sum only (summed by the map's
            ``feature_sum`` when it has one, without building the features).
        centre: accumulate around a shift ``c`` (the mean of the first flushed chunk, agreed across ranks before
            the sums are all-reduced, see [`rebase`][lightning_spectral.metrics.Accumulator.rebase]).
        chunk_size: rows mapped and summed at once.
        multipliers: also keep the ``A`` multiplier sums of the stream's sampling noise
            ([`NoiseSums`][lightning_spectral.functional.sampling_noise.NoiseSums]: ``w_a`` and ``S_a``, appended to
            the flat state as ``[n, s, Q, w, S]``); needs ``covariance``, one lane and no ``centre``.
        mean_draws: with ``multipliers``, also keep the ``A`` mean draws ``F_a = sum_i s_a(x_i) phi_i`` (A, D),
            appended as ``[n, s, Q, w, S, F]`` (``A D`` entries, no (D, D) sum; FINC's mode-share standard errors).

    Examples:
        >>> import torch
        >>> from lightning_spectral.metrics import RFFCovariance
        >>> metric = RFFCovariance(sigma=1.0, n_frequencies=4)
        >>> metric.update(torch.randn(10, 3))
        >>> samples = metric.accumulators["samples"]
        >>> int(samples.count), samples.mean().shape, round(float(samples.second_moment().trace()), 6)
        (10, torch.Size([8]), 1.0)
    """

    def __init__(
        self,
        metric: Metric,
        name: str,
        feature_map: FeatureMap,
        covariance: bool = True,
        centre: bool = False,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        multipliers: Optional[Multipliers] = None,
        mean_draws: bool = False,
    ) -> None:
        self.metric, self.name, self.feature_map = metric, name, feature_map
        self.owner = type(metric).__name__  # the metric's name, for messages
        self.multipliers = multipliers
        self.mean_draws = bool(mean_draws) and multipliers is not None
        if multipliers is not None and (not covariance or centre or getattr(feature_map, "bandwidths", None)):
            raise ValueError(f"{name}: multiplier sums need `covariance=True`, no `centre` and a one-lane map.")
        self.state_name = f"{name}_sums"
        self.covariance, self.centre, self.chunk_size = covariance, centre, chunk_size
        self.bandwidths: Optional[int] = getattr(feature_map, "bandwidths", None)
        self.width: Optional[int] = None
        self.shift: Optional[Tensor] = None  # c (B?, D) float64, with `centre` once a chunk was added
        # Pending rows are a list state, so that metrics sharing states (a MetricCollection's compute group) share
        # them too; every change below is in place for the same reason.
        metric.add_state(f"{name}_pending", default=[], persistent=False)
        # Not persistent in torchmetrics' sense: the metric writes the sums packed, through its extra state.
        metric.add_state(self.state_name, default=torch.zeros(1, dtype=torch.float64), dist_reduce_fx="sum")
        if feature_map.out_features is not None:
            self.allocate(feature_map.out_features)

    # ---- layout ------------------------------------------------------------------------------------------------
    @property
    def _lead(self) -> tuple[int, ...]:
        return () if self.bandwidths is None else (self.bandwidths,)

    def _layout(self, width: int) -> list[tuple[str, Optional[tuple[int, ...]], bool]]:
        """The parts of the flat state for features of width ``D``, in order: ``(name, shape, symmetric)``, the shape
        ``None`` for a sum this accumulator does not keep; a symmetric part is packed as its upper triangle."""
        noise_lead = () if self._noise_lanes == 1 else (self._noise_lanes,)
        draws, kept = self.draws, self.draws > 0
        return [
            ("count", (), False),
            ("feature_sum", (*self._lead, width), False),
            ("outer", (*self._lead, width, width) if self.covariance else None, True),
            ("weight_sums", (*noise_lead, draws) if kept else None, False),
            ("weighted", (*noise_lead, draws, width, width) if kept else None, True),
            ("weighted_features", (draws, width) if kept and self.mean_draws else None, False),
        ]

    def size(self, width: int) -> int:
        """Entries of the flat state for features of width ``D``: ``1 + B D (1 + D)`` (``1 + B D`` without ``Q``;
        ``+ A (1 + D^2)`` with ``A`` multiplier draws, ``+ A D`` more with ``mean_draws``)."""
        return sum(math.prod(shape) for _, shape, _ in self._layout(width) if shape is not None)

    @property
    def draws(self) -> int:
        """``A``, the multiplier draws kept (0 without multipliers)."""
        return 0 if self.multipliers is None else self.multipliers.draws

    #: Lanes with their own multiplier sums: 1 (the draws of the one lane), or the lanes themselves when they split
    #: the rows (a subclass's per-label sums).
    @property
    def _noise_lanes(self) -> int:
        return 1

    def allocate(self, width: int) -> None:
        """Size the sums for features of width ``D`` (zeros; a no-op when they have that size already)."""
        if self.width == width:
            return
        self.width = width
        self.clear()

    def clear(self) -> None:
        """Set the sums to zeros of their full size (after ``reset()``, which leaves the one-zero default that
        torchmetrics keeps; the default is not full size, so the state is held once)."""
        device = getattr(self.metric, self.state_name).device
        size = 1 if self.width is None else self.size(self.width)
        setattr(self.metric, self.state_name, torch.zeros(size, dtype=torch.float64, device=device))

    def _writable(self) -> Tensor:
        """The flat state, to be changed in place: the metric's own copy when a reading holds the current one
        (`SpectralMetric._writable_state`)."""
        writable = getattr(self.metric, "_writable_state", None)
        return getattr(self.metric, self.state_name) if writable is None else writable(self.state_name)

    def snapshot(self) -> "Accumulator":
        """This stream's sums as they are now, frozen: a copy of the accumulator that reads them (flushed first; the
        same tensor, which the metric copies before changing it while a reading holds it) and nothing pending."""
        frozen = copy.copy(self)
        frozen.metric = _FrozenSums(self.state_name, self.state, self.name, len(getattr(self.metric, "accumulators", ())))
        return frozen

    @property
    def state(self) -> Tensor:
        """The flat float64 state ``[n, s, Q]`` (flushed first)."""
        self.flush()
        return getattr(self.metric, self.state_name)

    def _views(self, flat: Tensor) -> Sums:
        """The named sums of a flat state, as views into it (`Sums`; ``None`` for a sum not kept)."""
        if self.width is None:
            raise RuntimeError(f"{self.owner}: no feature width yet (no sample was seen).")
        views, start = {}, 0
        for name, shape, _ in self._layout(self.width):
            if shape is None:
                views[name] = None
                continue
            size = math.prod(shape)
            views[name] = flat[start : start + size].view(shape)
            start += size
        return Sums(**views)

    # ---- the sums ----------------------------------------------------------------------------------------------
    @property
    def _pending(self) -> list[Tensor]:
        return getattr(self.metric, f"{self.name}_pending")

    @property
    def pending_rows(self) -> int:
        """Rows waiting in the buffer."""
        return sum(rows.shape[0] for rows in self._pending)

    @property
    def count(self) -> Tensor:
        """``n``: the samples accumulated (pending rows included), float64 scalar."""
        return getattr(self.metric, self.state_name)[0] + self.pending_rows

    @property
    def feature_sum(self) -> Tensor:
        """``s``, the (shifted) feature sum (B?, D)."""
        return self._views(self.state).feature_sum

    def noise_sums(self) -> NoiseSums:
        """``Q``, ``S_a``, ``w_a`` and ``n`` ([`NoiseSums`][lightning_spectral.functional.sampling_noise.NoiseSums]).

        Raises:
            RuntimeError: an accumulator without multipliers.
        """
        if self.multipliers is None:
            raise RuntimeError(f"{self.owner}: {self.name!r} keeps no multiplier sums.")
        sums = self._views(self.state)
        return NoiseSums(sums.outer, sums.weighted, sums.weight_sums, float(sums.count), sums.feature_sum,  # type: ignore[arg-type]
                         sums.weighted_features)

    @property
    def cov_sum(self) -> Tensor:
        """``Q``, the (shifted) outer-product sum (B?, D, D).

        Raises:
            RuntimeError: an accumulator without ``Q`` (``covariance=False``).
        """
        if not self.covariance:
            raise RuntimeError(f"{self.owner}: {self.name!r} keeps no covariance.")
        return self._views(self.state).outer  # type: ignore[return-value]

    # ---- accumulation ------------------------------------------------------------------------------------------
    def add(self, x: Tensor) -> None:
        """Queue validated samples (N, d); they are mapped and summed once ``chunk_size`` rows are pending."""
        if x.shape[0] == 0:
            return
        self._pending.append(x.detach())
        if self.feature_map.awaits_bandwidth:  # sigma="auto": held unmapped until the metric fixes sigma
            return
        if self.pending_rows >= self.chunk_size:
            self.flush()

    @property
    def held_rows(self) -> list[Tensor]:
        """The rows waiting unmapped (input rows (N, d), not features)."""
        return list(self._pending)

    def flush(self) -> None:
        """Map the pending rows and add them to the sums (done before anything reads the sums)."""
        if not self._pending:
            return
        if self.feature_map.awaits_bandwidth:  # sigma="auto": fix it first (it flushes every accumulator)
            self.metric.fit_bandwidth()  # type: ignore[attr-defined]
            return
        rows = self._pending[0] if len(self._pending) == 1 else torch.cat(self._pending)
        self._pending.clear()
        if self.width is None:  # the metric fixed the map's input width before adding rows
            self.allocate(self.feature_map.out_features)  # type: ignore[arg-type]
        flat = self._writable()
        with torch.no_grad(), full_precision():  # the map's x W and the sums' products at IEEE float32
            for start in range(0, rows.shape[0], self.chunk_size):
                self._add_chunk(flat, rows[start : start + self.chunk_size])

    def _add_chunk(self, flat: Tensor, chunk: Tensor) -> None:
        """Map one chunk of rows and add it to the sums in ``flat``
        ([`add_feature_sums_`][lightning_spectral.algebra.add_feature_sums_]), around the shift with ``centre``."""
        sums = self._views(flat)
        if not (self.covariance or self.centre) and hasattr(self.feature_map, "feature_sum"):
            sums.count.add_(chunk.shape[0])
            sums.feature_sum.add_(self.feature_map.feature_sum(chunk))  # a mean-only sum: no (N, D) features (3x faster)
            return
        phi = self.feature_map(chunk)
        if self.centre:
            if self.shift is None or float(sums.count) == 0:  # the first chunk after a reset
                self.shift = phi.double().mean(-2)
            phi = phi - self.shift.to(phi.dtype).unsqueeze(-2)
        weights = None if self.multipliers is None else self.multipliers(chunk)  # one lane, uncentred (checked)
        add_feature_sums_(
            phi, count=sums.count, feature_sum=sums.feature_sum, outer=sums.outer, weights=weights,
            weight_sums=sums.weight_sums, weighted=sums.weighted, weighted_features=sums.weighted_features,
        )

    def discard(self) -> None:
        """Drop the pending rows (``reset``)."""
        self._pending.clear()

    # ---- reading (StreamSums) --------------------------------------------------------------------------------
    def _empty_message(self) -> str:
        several = len(getattr(self.metric, "accumulators", ())) > 1
        where = f" on the {self.name!r} side" if several else ""
        return (
            f"{self.owner}.compute(): no samples were accumulated{where} (on any rank). Call "
            "`update(...)` with at least one sample first, or `reset()` was called since."
        )

    # ---- checkpoints and ranks ---------------------------------------------------------------------------------
    def pack(self, flat: Tensor) -> Tensor:
        """The compact form of a flat state: ``[n]`` when empty, else every part in order, a symmetric one (``Q``,
        ``S_a``) as its upper triangle."""
        if float(flat[0]) == 0 or self.width is None:
            return flat[:1].clone()
        rows, cols = torch.triu_indices(self.width, self.width, device=flat.device)
        parts = [
            (view[..., rows, cols] if symmetric else view).reshape(-1)
            for (_, _, symmetric), view in zip(self._layout(self.width), self._views(flat), strict=True)
            if view is not None
        ]
        return torch.cat(parts)

    def unpack(self, packed: Tensor) -> Tensor:
        """The flat state of [`pack`][lightning_spectral.metrics.Accumulator.pack]'s output.

        Raises:
            ValueError: the packed size does not belong to this accumulator's settings.
        """
        if packed.numel() == 1:
            flat = torch.zeros(1 if self.width is None else self.size(self.width), dtype=torch.float64)
            flat[0] = packed.reshape(())
            return flat.to(packed.device)
        width = self.width
        layout = [] if width is None else [(shape, symmetric) for _, shape, symmetric in self._layout(width)]
        triangle = 0 if width is None else width * (width + 1) // 2

        def packed_size(shape: tuple[int, ...], symmetric: bool) -> int:
            return math.prod(shape[:-2]) * triangle if symmetric else math.prod(shape)

        expected = None if width is None else sum(packed_size(*part) for part in layout if part[0] is not None)
        if expected != packed.numel():
            raise ValueError(
                f"{self.owner}: the checkpoint's {self.name!r} state has {packed.numel()} entries "
                f"where these settings need {expected}; build the metric with the settings it was saved with."
            )
        flat = torch.zeros(self.size(width), dtype=torch.float64, device=packed.device)  # type: ignore[arg-type]
        rows, cols = torch.triu_indices(width, width, device=flat.device)  # type: ignore[arg-type]
        start = 0
        for (shape, symmetric), view in zip(layout, self._views(flat), strict=True):
            if view is None:
                continue
            size = packed_size(shape, symmetric)
            part = packed[start : start + size]
            start += size
            if symmetric:
                upper = part.view(*shape[:-2], -1)
                view[..., rows, cols] = upper
                view[..., cols, rows] = upper
            else:
                view.copy_(part.view(shape))
        return flat

    #: Whether the lanes split the rows between them (one lane per label) rather than each seeing every row (one
    #: lane per bandwidth): the trace identity then holds for the lanes' total.
    lanes_split_rows = False

    def violation(self, flat: Tensor, shift: Optional[Tensor] = None) -> str:
        """What in a flat state (e.g. a checkpoint's) breaks the identities sums of this accumulator obey, ``""``
        when nothing does.

        Every entry finite; ``n`` a non-negative integer; with ``Q``: ``Q_ii >= 0``, ``Q_ij^2 <= Q_ii Q_jj`` and
        ``|s|^2 <= n tr Q`` (Cauchy-Schwarz: ``Q`` is a sum of outer products); for a map whose features have a
        constant squared norm ``c`` (random Fourier features: 1), ``tr Q = n c`` per lane (around a shift ``c0``:
        ``n c - 2 c0 . s - n |c0|^2``), ``|s| <= n sqrt(c)`` without ``Q``; with multiplier draws
        ``|w_a| <= sqrt(2) n`` and ``|diag S_a| <= sqrt(2) diag Q``; all within float32 round-off.
        """
        if not bool(torch.isfinite(flat).all()):
            return f"hold {int((~torch.isfinite(flat)).sum())} NaN or infinite entries"
        n = float(flat[0])
        if n < 0 or n != round(n):
            return f"count {n:g} samples (a count is a non-negative integer)"
        if self.width is None or flat.numel() == 1:
            return "" if n == 0 or flat.numel() > 1 else f"count {n:g} samples but hold no sums"
        views = self._views(flat)
        sums, outer = views.feature_sum.reshape(-1, self.width), views.outer
        norm = self.feature_map.squared_norm if shift is None or outer is not None else None
        tol = 1e-4
        if outer is None:
            if norm is not None and float(sums.norm(dim=-1).max()) > n * math.sqrt(norm) * (1 + tol) + tol:
                return f"sum to more than the {n:g} samples' unit features can (|s| > n)"
            return ""
        outer = outer.reshape(-1, self.width, self.width)
        diagonal = outer.diagonal(dim1=-2, dim2=-1)
        traces = diagonal.sum(-1)
        if bool((diagonal < -tol).any()):
            return "have negative diagonal entries in their outer-product sum (a sum of squares)"
        root = diagonal.clamp_min(0).sqrt()
        for start in range(0, self.width, 1024):  # |Q_ij| <= sqrt(Q_ii Q_jj), a row block at a time
            bound = root[:, start : start + 1024, None] * root[:, None, :]
            if bool((outer[:, start : start + 1024].abs() > bound * (1 + tol) + tol).any()):
                return "have an outer-product sum that is no sum of outer products (|Q_ij| > sqrt(Q_ii Q_jj))"
        if bool(((sums * sums).sum(-1) > n * traces * (1 + tol) + tol).any()):
            return "have a feature sum larger than their outer-product sum allows (|s|^2 > n tr Q)"
        if norm is not None:
            expected = torch.full_like(traces, n * norm)
            if shift is not None:
                c0 = shift.reshape(-1, self.width).to(traces)
                expected = expected - 2 * (c0 * sums).sum(-1) - n * (c0 * c0).sum(-1)
            if self.lanes_split_rows:
                traces, expected = traces.sum().reshape(1), expected[:1]
            if bool(((traces - expected).abs() > tol * max(n * norm, 1.0)).any()):
                return (
                    f"have an outer-product trace {float(traces[0]):.6g} where {n:g} samples of features of squared "
                    f"norm {norm:g} give {float(expected[0]):.6g}"
                )
        if self.draws:  # multipliers |s_a| <= sqrt(2): |w_a| <= sqrt(2) n and |diag S_a| <= sqrt(2) diag Q
            weights, weighted = views.weight_sums, views.weighted
            bound = math.sqrt(2.0) * (1 + tol)
            limit = diagonal if self._noise_lanes == 1 else diagonal[:, None, :]  # (1, D) or (L, 1, D)
            if bool((weights.abs() > bound * n + tol).any()) or bool(
                (weighted.diagonal(dim1=-2, dim2=-1).abs() > bound * limit + tol).any()
            ):
                return "have multiplier sums larger than multipliers of size at most sqrt(2) allow"
            mean_draws = views.weighted_features
            if mean_draws is not None and norm is not None and bool(
                (mean_draws.norm(dim=-1) > bound * n * math.sqrt(norm) + tol).any()
            ):
                return "have mean multiplier sums larger than multipliers of at most sqrt(2) allow (|F_a| > sqrt(2) n)"
        return ""

    def rebase(self, shift: Tensor) -> None:
        """Re-express the sums around another shift ``c'`` (exact algebra; ranks agree on ``c'`` before summing).

        ``s' = s + n (c - c')``, ``Q' = Q + d s^T + s d^T + n d d^T`` with ``d = c - c'``.
        """
        if not self.centre:
            return
        self.flush()
        self._rebase_(self._writable(), shift)
        self.shift = shift.clone()

    def _rebase_(self, flat: Tensor, shift: Tensor) -> None:
        """`rebase`'s algebra on a flat state in place."""
        count, sums, outer = self._views(flat)[:3]
        delta = (shift if self.shift is None else self.shift) - shift
        if outer is not None:
            outer += _outer(delta, sums) + _outer(sums, delta) + count * _outer(delta, delta)
        sums += count * delta

    def rebased_state(self, target: Accumulator) -> Tensor:
        """This accumulator's flat state, re-expressed around ``target``'s shift where both are centred (a copy; this
        one is unchanged), for adding to ``target``'s (``merge_state``)."""
        flat = self.state
        if not self.centre or target.shift is None or self.shift is None:
            if self.centre and target.shift is None and self.shift is not None:
                target.shift = self.shift.clone()  # an empty target takes the other's shift
            return flat
        flat = flat.clone()
        self._rebase_(flat, target.shift)
        return flat


class _FrozenSums:
    """What a snapshot's accumulator reads in place of its metric: the flat state, an empty buffer and the number of
    the metric's streams (for messages)."""

    def __init__(self, state_name: str, state: Tensor, name: str, streams: int) -> None:
        setattr(self, state_name, state)
        setattr(self, f"{name}_pending", [])
        self.accumulators = range(streams)


def _outer(a: Tensor, b: Tensor) -> Tensor:
    return a.unsqueeze(-1) * b.unsqueeze(-2)
