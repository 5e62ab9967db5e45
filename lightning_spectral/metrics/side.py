"""One accumulated side of a metric: the count, the feature sum and the outer-product sum of one stream of samples.

Every method of this library reduces a stream of samples ``x_1 .. x_n`` to the same three float64 sums under one
feature map ``phi`` (FKEA eq. 2, FINC eq. 4, FastMMD App. A.2, kernel PCA OOD section 3):

    n,   s = sum_i (phi(x_i) - c),   Q = sum_i (phi(x_i) - c)(phi(x_i) - c)^T

with ``c`` an optional shift (zero unless ``centre=True``). From them follow the mean ``mu = c + s / n``, the
uncentred second moment ``C = Q / n`` (``c = 0``) and the centred covariance ``Q / n - (s / n)(s / n)^T``; a shift
near the mean keeps the last one exact when the features have a large offset (a float32 product of
un-shifted features cancels catastrophically). A :class:`CovarianceSide` declares the sums as states of its
owning ``torchmetrics.Metric`` (so they are reset, checkpointed and all-reduced with the metric), keeps
incoming rows in a bounded buffer until ``chunk_size`` of them are pending (one large product instead of many
small ones), and flushes the buffer whenever the sums are read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch
from torch import Tensor

from lightning_spectral.functional.modes import orient
from lightning_spectral.linalg import add_gram_, symmetric_eigh

if TYPE_CHECKING:  # pragma: no cover
    from lightning_spectral.metrics.base import SpectralMetric


class CovarianceSide:
    """The sums ``n``, ``s``, ``Q`` of one stream of samples, as float64 states of the metric that owns them.

    Args:
        owner: the metric; the states are named ``{name}_count``, ``{name}_sum`` and ``{name}_cov_sum``.
        name: the side's name (``"gen"``, ``"ref"``...).
        width: feature width ``D``; ``None`` until the feature map is known (the states are then allocated by
            :meth:`allocate`, on every rank before any all-reduce).
        covariance: keep ``Q`` (``D x D``); ``False`` keeps the count and the feature sum only.
        bandwidths: a leading dimension of the sums, one slice per bandwidth of a multi-bandwidth map whose
            output is ``(B, N, D)``.
        centre: accumulate around a shift ``c`` (the mean of the first flushed chunk, agreed across ranks at
            sync) so that centred covariances stay exact for features with a large offset.

    States: ``count`` (), ``sum`` (B?, D), ``cov_sum`` (B?, D, D) and, with ``centre``, ``shift`` (B?, D).

    Examples:
        >>> import torch
        >>> from lightning_spectral.metrics import RFFCovariance
        >>> metric = RFFCovariance(sigma=1.0, n_frequencies=4)
        >>> metric.update(torch.randn(10, 3))
        >>> side = metric.side("samples")
        >>> int(side.count), side.mean().shape, round(float(side.second_moment().trace()), 6)
        (10, torch.Size([8]), 1.0)
    """

    def __init__(
        self,
        owner: "SpectralMetric",
        name: str,
        width: Optional[int],
        covariance: bool = True,
        bandwidths: Optional[int] = None,
        centre: bool = False,
    ) -> None:
        self.owner = owner
        self.name = name
        self.covariance = covariance
        self.bandwidths = bandwidths
        self.centre = centre
        self.width: Optional[int] = None
        # Pending rows are a list state of the owner, so that metrics sharing states (a MetricCollection's compute
        # group) share them too; every change below is in place for the same reason.
        owner.add_state(f"{name}_pending", default=[], persistent=False)
        zero = torch.zeros((), dtype=torch.float64)
        owner.add_state(f"{name}_count", default=zero, dist_reduce_fx="sum", persistent=True)
        for state in self._sum_states:  # sized by `allocate` once the feature width is known
            owner.add_state(state, default=torch.zeros(0, dtype=torch.float64), dist_reduce_fx="sum", persistent=True)
        if width is not None:
            self.allocate(width)

    # ---- names and states --------------------------------------------------------------------------------------
    @property
    def _sum_states(self) -> tuple[str, ...]:
        names = [f"{self.name}_sum"]
        if self.covariance:
            names.append(f"{self.name}_cov_sum")
        if self.centre:
            names.append(f"{self.name}_shift")
        return tuple(names)

    @property
    def states(self) -> tuple[str, ...]:
        """The names of this side's states on the owner."""
        return (f"{self.name}_count", *self._sum_states)

    def _shape(self, state: str, width: int) -> tuple[int, ...]:
        lead = () if self.bandwidths is None else (self.bandwidths,)
        return lead + ((width, width) if state.endswith("_cov_sum") else (width,))

    def allocate(self, width: int) -> None:
        """Give the sums their size ``D`` (a no-op when they have it). Resets this side's sums."""
        if self.width == width:
            return
        self.width = width
        for state in self._sum_states:
            default = torch.zeros(self._shape(state, width), dtype=torch.float64, device=self.owner.device)
            self.owner._defaults[state] = default
            setattr(self.owner, state, default.clone())

    @property
    def _pending(self) -> list[Tensor]:
        return getattr(self.owner, f"{self.name}_pending")

    @property
    def pending_rows(self) -> int:
        """Rows waiting in the buffer."""
        return sum(rows.shape[0] for rows in self._pending)

    @property
    def count(self) -> Tensor:
        """``n``: the samples accumulated (pending rows included), float64 scalar."""
        return getattr(self.owner, f"{self.name}_count") + self.pending_rows

    @property
    def feature_sum(self) -> Tensor:
        """``s``, the (shifted) feature sum (B?, D)."""
        self.flush()
        return getattr(self.owner, f"{self.name}_sum")

    @property
    def cov_sum(self) -> Tensor:
        """``Q``, the (shifted) outer-product sum (B?, D, D)."""
        if not self.covariance:
            raise RuntimeError(f"{type(self.owner).__name__}: side {self.name!r} keeps no covariance.")
        self.flush()
        return getattr(self.owner, f"{self.name}_cov_sum")

    @property
    def shift(self) -> Optional[Tensor]:
        """``c`` (B?, D), or ``None`` for a side without a shift."""
        return getattr(self.owner, f"{self.name}_shift") if self.centre else None

    # ---- accumulation ------------------------------------------------------------------------------------------
    def add(self, x: Tensor) -> None:
        """Queue validated samples (N, d); they are mapped and summed once ``chunk_size`` rows are pending."""
        if x.shape[0] == 0:
            return
        self._pending.append(x.detach())
        if self.pending_rows >= self.owner.chunk_size:
            self.flush()

    def flush(self) -> None:
        """Map the pending rows and add them to the sums (called before anything reads the sums)."""
        if not self._pending:
            return
        rows = self._pending[0] if len(self._pending) == 1 else torch.cat(self._pending)
        self._pending.clear()
        count = getattr(self.owner, f"{self.name}_count")
        first = float(count) == 0
        with torch.no_grad():
            for start in range(0, rows.shape[0], self.owner.chunk_size):
                chunk = rows[start : start + self.owner.chunk_size]
                if self.covariance or self.centre:
                    self._add_features(self.owner.map_rows(chunk), set_shift=first and start == 0)
                else:  # a mean-only side: the map sums its features without building them (3x faster)
                    self._add_sum(self.owner.sum_rows(chunk))
        count.add_(rows.shape[0])

    def _add_sum(self, total: Tensor) -> None:
        """Add a chunk's feature sum (D,) or (B, D) to ``s`` (sides without covariance or shift)."""
        if self.width is None:
            self.allocate(total.shape[-1])
        getattr(self.owner, f"{self.name}_sum").add_(total)

    def _add_features(self, phi: Tensor, set_shift: bool = False) -> None:
        """Add mapped features (N, D), or (B, N, D) for a multi-bandwidth map, to the sums."""
        if self.width is None:
            self.allocate(phi.shape[-1])
        if self.centre:
            shift = getattr(self.owner, f"{self.name}_shift")
            if set_shift:  # the first chunk after a reset fixes the shift
                shift.copy_(phi.double().mean(-2))
            phi = phi - shift.to(phi.dtype).unsqueeze(-2)
        sums = getattr(self.owner, f"{self.name}_sum")
        outers = getattr(self.owner, f"{self.name}_cov_sum") if self.covariance else None
        if self.bandwidths is None:
            phi, sums, outers = phi[None], sums[None], None if outers is None else outers[None]
        for index, features in enumerate(phi):
            sums[index] += features.sum(0)
            if outers is not None:
                add_gram_(outers[index], features)

    def discard(self) -> None:
        """Drop the pending rows (``reset``)."""
        self._pending.clear()

    # ---- reading -----------------------------------------------------------------------------------------------
    def mean(self) -> Tensor:
        """``mu = c + s / n`` (B?, D), float64."""
        n = self._require()
        mean = self.feature_sum / n
        return mean + self.shift if self.centre else mean

    def second_moment(self) -> Tensor:
        """The uncentred ``C = (1/n) sum_i phi(x_i) phi(x_i)^T`` (B?, D, D) (``C = Q / n`` for an unshifted side)."""
        n = self._require()
        moment = self.cov_sum / n
        if not self.centre:
            return moment
        mean, shift = self.feature_sum / n, self.shift
        return moment + _outer(mean, shift) + _outer(shift, mean) + _outer(shift, shift)

    def centred_covariance(self) -> Tensor:
        """``S = (1/n) sum_i (phi(x_i) - mu)(phi(x_i) - mu)^T = Q / n - (s / n)(s / n)^T`` (B?, D, D)."""
        n = self._require()
        mean = self.feature_sum / n
        return self.cov_sum / n - _outer(mean, mean)

    def modes(self) -> tuple[Tensor, Tensor]:
        """Eigenvalues (descending, float64) and eigenvectors (columns) of the uncentred ``C``, each vector's sign
        fixed so that the mode scores sum to >= 0 over this side's samples (``v . mu >= 0``; FKEA and FINC code)."""
        values, vectors = symmetric_eigh(self.second_moment())
        return values, orient(vectors, self.mean())

    def _require(self) -> float:
        n = float(self.count)
        if n <= 0:
            where = "" if len(self.owner.sides) == 1 else f" on the {self.name!r} side"
            raise RuntimeError(
                f"{type(self.owner).__name__}.compute(): no samples were accumulated{where} (on any rank). Call "
                "`update(...)` with at least one sample first, or `reset()` was called since."
            )
        return n

    def reset(self) -> None:
        """Zero this side's sums and drop its pending rows."""
        self.discard()
        for state in self.states:
            setattr(self.owner, state, self.owner._defaults[state].clone().to(self.owner.device))

    # ---- across ranks ------------------------------------------------------------------------------------------
    def rebase(self, shift: Tensor) -> None:
        """Re-express the sums around another shift ``c'`` (exact algebra; ranks agree on ``c'`` before summing).

        ``s' = s + n (c - c')``, ``Q' = Q + d s^T + s d^T + n d d^T`` with ``d = c - c'``.
        """
        if not self.centre:
            return
        owner, n = self.owner, getattr(self.owner, f"{self.name}_count")
        old = getattr(owner, f"{self.name}_shift")
        delta = old - shift
        sums = getattr(owner, f"{self.name}_sum")
        if self.covariance:
            outer = getattr(owner, f"{self.name}_cov_sum")
            setattr(owner, f"{self.name}_cov_sum", outer + _outer(delta, sums) + _outer(sums, delta) + n * _outer(delta, delta))
        setattr(owner, f"{self.name}_sum", sums + n * delta)
        setattr(owner, f"{self.name}_shift", shift.clone())


def _outer(a: Tensor, b: Tensor) -> Tensor:
    return a.unsqueeze(-1) * b.unsqueeze(-2)
