"""The reading of FastMMD: MMD^2 per bandwidth, its standard error and the two-sample test."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Optional

import torch
from torch import Tensor

from lightning_spectral._checks import check_fraction
from lightning_spectral.functional.mmd import MMDTest, mmd_from_means, mmd_standard_error, streaming_p_value
from lightning_spectral.metrics.headline import headline_values
from lightning_spectral.metrics.reading import Reading, kept_summary


class MMDReading(Reading):
    """A reading of [`FastMMD`][lightning_spectral.metrics.FastMMD]: ``value`` is MMD^2 (a scalar, or one per
    bandwidth); ``standard_error()``, ``p_value()`` and ``test(level)`` (computed once, whatever the level)."""

    settings = ("unbiased", "statistic_only", "n_frequencies", "sigmas", "_single")

    def _bind(self, metric: Any) -> None:
        self.real = self.streams["real"]
        self.gen = self.streams["gen"]

    def _side_sizes(self) -> tuple[float, float]:
        m, n = float(self.real.count), float(self.gen.count)
        if m < 1 or n < 1:
            side = "reference (real=True)" if m < 1 else "generated (real=False)"
            raise RuntimeError(f"FastMMD: the {side} side is empty (on every rank); call `update(x, real=...)`.")
        return m, n

    def _per_bandwidth(self, values: Tensor) -> Tensor:
        return values[0] if self._single else values

    def _value(self) -> Tensor:
        """MMD^2 (unbiased or biased): a scalar, or one value per bandwidth (``len(sigma),``)."""
        m, n = self._side_sizes()
        if self.unbiased and min(m, n) < 2:
            raise RuntimeError("FastMMD: the unbiased MMD^2 needs at least 2 samples per side (or unbiased=False).")
        means = (self.real.feature_sum / m, self.gen.feature_sum / n)
        return self._per_bandwidth(mmd_from_means(*means, m, n, self.unbiased))

    @kept_summary
    def summary(self) -> dict[str, Tensor]:
        """MMD^2 (``""``) and, unless ``statistic_only``, its ``p_value`` and its standard error ``se``
        ([`standard_error`][lightning_spectral.metrics.mmd_reading.MMDReading.standard_error]); ``n`` (generated) and
        ``n_real`` (reference) sizes and ``n_features`` (2r) beside them."""
        values = {"": self.value}
        if not self.statistic_only:
            values["p_value"] = self.p_value()
            values["minus_log10_p"] = self.minus_log10_p()  # finite where the p-value underflows to 0
            values["se"] = self.standard_error()
        values["n"] = self.gen.count.clone()
        values["n_real"] = self.real.count.clone()
        values["n_features"] = torch.tensor(float(2 * self.n_frequencies), dtype=torch.float64)
        return self._with_sigma(values)

    def headline(self, summary: Optional[Mapping[str, Any]] = None) -> dict[str, Tensor]:
        """From ``summary``: ``mmd2`` with its ``mmd2_se`` and the p-value as ``minus_log10_p`` (above 1.3: p < 0.05;
        ``_0``, ``_1``, ... per bandwidth with several)."""
        summary = self.summary() if summary is None else summary
        values = headline_values("mmd2", summary[""], summary.get("se"))
        if "minus_log10_p" in summary:
            values.update(headline_values("minus_log10_p", summary["minus_log10_p"]))
        return values

    def standard_error(self) -> Tensor:
        """The standard error of MMD^2 (either form) per bandwidth, from the side means and covariances the test keeps
        (`functional.mmd_standard_error`; no extra state): the sampling
        noise at these sample sizes, for the interval ``MMD^2 +- 1.96 se``.

        Raises:
            RuntimeError: with ``statistic_only=True`` (no covariances are kept).
        """
        if self.statistic_only:
            raise RuntimeError("FastMMD.standard_error: built with statistic_only=True, which keeps no covariance; "
                               "build it with statistic_only=False.")

        def error() -> Tensor:
            self._side_sizes()
            means = (self.real.mean(), self.gen.mean())
            covariances = (self.real.centred_covariance(), self.gen.centred_covariance())
            m, n = float(self.real.count), float(self.gen.count)
            return self._per_bandwidth(mmd_standard_error(*means, *covariances, m, n))

        return self._cached("se", error)

    def p_value(self) -> Tensor:
        """Asymptotic p-value of H0 (both sides from one distribution), per bandwidth."""
        return self.test().p_value

    def test(self, level: float = 0.05) -> MMDTest:
        """Two-sample test at ``level`` from the streamed state: ``(statistic, p_value, reject)``.

        ``statistic`` is the biased ``MMD_b^2`` the p-value refers to.

        Raises:
            RuntimeError: with ``statistic_only=True`` (the null distribution needs the covariance sums).
        """
        level = check_fraction(level, "level", high_closed=False)
        if self.statistic_only:
            raise RuntimeError(
                "FastMMD.test / p_value: the metric was built with statistic_only=True, which keeps only the feature "
                "means; the p-value needs the pooled feature covariance. Build it with statistic_only=False."
            )
        statistic, p_values, _ = self._cached("test", self._test)
        return MMDTest(statistic, p_values, p_values <= level)

    def _test(self) -> tuple[Tensor, Tensor, Tensor]:
        """The biased ``MMD_b^2``, its p-values and their natural logs, per bandwidth."""
        m, n = self._side_sizes()
        mean_real, mean_gen = self.real.feature_sum / m, self.gen.feature_sum / n
        biased = mmd_from_means(mean_real, mean_gen, m, n, unbiased=False)
        pooled_sum, pooled_cov = self.real.feature_sum + self.gen.feature_sum, self.real.cov_sum + self.gen.cov_sum
        p_values = streaming_p_value(biased, pooled_sum, pooled_cov, m + n, m, n)
        log_p = streaming_p_value(biased, pooled_sum, pooled_cov, m + n, m, n, log=True)
        return self._per_bandwidth(biased), self._per_bandwidth(p_values), self._per_bandwidth(log_p)

    def minus_log10_p(self) -> Tensor:
        """``-log10`` of the p-value per bandwidth, from its log: finite (and exact) where the p-value itself is
        below float64's smallest number (1e-308) and reads 0."""
        self.test()  # refuses statistic_only
        return -self._cached("test", self._test)[2] / math.log(10.0)
