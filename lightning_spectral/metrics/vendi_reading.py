"""The reading of FKEAVendi: the Vendi / RKE score(s), their standard errors, the spectrum and the modes."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Optional

import torch
from torch import Tensor

from lightning_spectral._checks import check_fraction, check_order
from lightning_spectral.algebra.eigen import psd_eigh, top_eigh
from lightning_spectral.functional.fkea import (
    VendiResult,
    rke_from_covariance,
    vendi_bias,
    vendi_from_spectrum,
    vendi_standard_errors,
)
from lightning_spectral.functional.student_t import student_t_isf
from lightning_spectral.metrics.covariance_reading import CovarianceReading
from lightning_spectral.metrics.headline import headline_values
from lightning_spectral.metrics.reading import bias_corrected, kept_summary, warn_large_bias


class VendiReading(CovarianceReading):
    """A reading of [`FKEAVendi`][lightning_spectral.metrics.FKEAVendi]: ``value`` is the Vendi score (a scalar for
    one order, ``{order: score}`` for several; t-truncated with ``truncation``), ``standard_error()`` its standard
    error, and the covariance's ``spectrum()``, ``modes(k)``, ``top_samples`` and gallery
    ([`CovarianceReading`][lightning_spectral.metrics.covariance_reading.CovarianceReading])."""

    settings = ("noise_draws", "orders", "alpha", "precision", "truncation", "_single_order")

    def _value(self) -> VendiResult:
        """RKE (order 2) from pairs of distinct samples, without the plug-in's 1/n bias (`unbiased_purity`)."""
        n = float(self.sample_count())
        if self._single_order and self.orders[0] == 2 and self.truncation is None:
            return rke_from_covariance(self.samples.second_moment(), n)
        return vendi_from_spectrum(self.spectrum(), self.alpha, self.truncation, n)

    def standard_error(self) -> VendiResult:  # type: ignore[override]
        """The standard error of each score from the ``noise_draws`` multiplier draws, to first order
        (`functional.vendi_standard_errors`): the sampling noise of the score at this n, not its bias with n.

        Raises:
            RuntimeError: built with ``noise_draws=0`` (no draws were kept).
        """
        if not self.noise_draws:
            raise RuntimeError("FKEAVendi.standard_error: built with noise_draws=0, so no draws were kept; build it "
                               "with noise_draws >= 1 (default 2).")
        return self._cached("se", self._standard_error)

    def _standard_error(self) -> VendiResult:
        """The ``eigh`` it needs (not for RKE alone) also gives the score's spectrum (kept unless already there): one
        eigendecomposition for both."""
        noise = self.samples.noise_sums()
        orders = [check_order(order, "alpha") for order in self.orders]
        width, eigen = self.feature_map.out_features, None
        pairs = self.truncation if self.truncation is not None else 1 if min(orders) == math.inf else width
        if 16 * pairs <= width:
            # the gradient is one value past the top t pairs (t-truncated) or past the first (order inf): those
            # pairs (`top_eigh`: Lanczos from 1,024 rows) beside the score's spectrum, no dense eigh
            eigen = (self.spectrum(), top_eigh(self.samples.second_moment(), pairs)[1])
        elif self.truncation is not None or any(order != 2.0 for order in orders):
            eigen = self._eigen()
        return vendi_standard_errors(noise, self.alpha, self.truncation, self.precision, eigen)

    def _eigen(self) -> tuple[Tensor, Tensor]:
        """Every eigenpair of ``C``, kept (the score's spectrum too): rank(C) <= n, so with n well below 2r the range
        finder gives the same pairs (`psd_eigh` with ``rank``)."""

        def decompose() -> tuple[Tensor, Tensor]:
            rank = int(self.sample_count())
            eigen = psd_eigh(self.samples.second_moment(), precision=self.precision, rank=rank)
            self._cached("spectrum", lambda: eigen[0])
            return eigen

        return self._cached("eigen", decompose)

    def interval(self, level: float = 0.95) -> Any:
        """Each score's interval at ``level`` without its bias at this n:
        ``[value - bias - q se, value - bias + q se]``, ``q = t_{A, (1 + level) / 2}`` (Student-t, ``A`` =
        ``noise_draws``), as an [`Interval`][lightning_spectral.metrics.reading.Interval] (a dict ``{order: Interval}``
        for several orders). Where the bias is above `BIAS_SHARE_WARNING` of a score of order <= 1, a lower bound
        only: ``high`` is ``+inf`` ([`bias_corrected`][lightning_spectral.metrics.reading.bias_corrected]; it warns).

        Vendi of order 1 (and any order but 2 and inf) rises with n: at n = 1,000 Vendi-1 reads 2 spreads below its
        large-n value. ``bias`` is its second-order estimate from the draws
        ([`vendi_bias`][lightning_spectral.functional.fkea.vendi_bias]); RKE (order 2) is already reported without
        its ``1/n`` bias, and order inf and the t-truncated scores get 0 (measured within 0.1 spread of their large-n
        values: docs/benchmarks/coverage.md). Costs one pass over the draws beside the standard errors' ``eigh``;
        no summary or callback reads it.

        Raises:
            RuntimeError: built with ``noise_draws=0``.
        """
        level = check_fraction(level, "level", high_closed=False)
        if not self.noise_draws:
            raise RuntimeError("FKEAVendi.interval: built with noise_draws=0, so no draws were kept for the standard "
                               "error and the bias; build it with noise_draws >= 1 (default 2).")
        errors = self.standard_error()  # its eigh is kept for the bias
        orders = [check_order(order, "alpha") for order in self.orders]
        if self.truncation is None and any(order not in (2.0, math.inf) for order in orders):
            biases = self._cached("bias", lambda: vendi_bias(self.samples.noise_sums(), self.orders, self.precision,
                                                             self._eigen()))
        else:
            biases = {order: torch.zeros((), dtype=torch.float64) for order in self.orders}
        values = self.value if not self._single_order else {self.orders[0]: self.value}
        errors = errors if not self._single_order else {self.orders[0]: errors}
        for order in self.orders:
            warn_large_bias("FKEAVendi.interval", f"score of order {order}", biases[order], values[order],
                            int(self.sample_count()), self.feature_map.out_features, bounded=order <= 1)
        q = student_t_isf((1.0 - level) / 2.0, self.noise_draws)
        intervals = {order: bias_corrected(values[order], errors[order], biases[order], q, level, order <= 1)
                     for order in self.orders}
        return intervals[self.orders[0]] if self._single_order else intervals

    @kept_summary
    def summary(self) -> dict[str, Tensor]:
        """The score (``""``), its standard error ``se`` (unless ``noise_draws=0``), beside the sample size ``n`` and
        the feature count ``n_features`` (2r) it was computed at: Vendi-1 depends on both (see
        [`FKEAVendi`][lightning_spectral.metrics.FKEAVendi]), so a logged value names them; and ``sigma``."""
        error = self.standard_error() if self.noise_draws else None  # first: its eigh gives the score's spectrum
        values = {"": self.value}
        if error is not None:
            values["se"] = error
        values.update(self._sizes())
        return self._with_sigma(values)

    def headline(self, summary: Optional[Mapping[str, Any]] = None) -> dict[str, Tensor]:
        """``vendi_{order}`` and ``vendi_{order}_se`` for each order (``vendi_2``: RKE)."""
        summary = self.summary() if summary is None else summary
        value, se = summary[""], summary.get("se")
        if self._single_order:
            value, se = {self.orders[0]: value}, None if se is None else {self.orders[0]: se}
        return headline_values("vendi", value, se)
