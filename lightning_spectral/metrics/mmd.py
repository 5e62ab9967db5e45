"""FastMMD: a streaming two-sample statistic (MMD^2 through random Fourier features) with calibrated p-values."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional, Union

from torch import Tensor, nn

from lightning_spectral._checks import (
    check_bandwidths,
    check_bool,
    check_positive_int,
    check_side,
    check_state_memory,
)
from lightning_spectral.algebra.gram import DEFAULT_CHUNK_SIZE
from lightning_spectral.kernels.bandwidth import check_sigma
from lightning_spectral.kernels.multi_bandwidth_rff import MultiBandwidthRFF
from lightning_spectral.metrics.base import SpectralMetric
from lightning_spectral.metrics.mmd_reading import MMDReading


class FastMMD(SpectralMetric):
    r"""MMD^2 between a reference ("real") and a generated sample, streamed through random Fourier features.

    With unit-norm features $z(x) = [\cos(xW), \sin(xW)] / \sqrt{r}$ and side means $\bar z_r$ (real),
    $\bar z_g$ (generated) of sizes m, n, ``compute()`` returns (FastMMD, Zhao & Meng 2015, App. A.2):

    - ``unbiased=True``: exactly the U-statistic of the approximate kernel (it can be slightly negative under
      $H_0$),
      $$\|\bar z_r - \bar z_g\|^2 + \frac{\|\bar z_r\|^2}{m-1} + \frac{\|\bar z_g\|^2}{n-1}
      - \frac{m+n-2}{(m-1)(n-1)};$$
    - ``unbiased=False``: $\|\bar z_r - \bar z_g\|^2$.

    ``sigma`` may be a sequence: one estimate per bandwidth, all from the same standard-normal draws
    (``W = Z / sigma``; [`MultiBandwidthRFF`][lightning_spectral.kernels.MultiBandwidthRFF] projects once and
    rescales), so
    estimates across bandwidths are correlated (as in the authors' code).

    The test (``metric.reading().test(level)`` and ``.p_value()``,
    [`MMDReading`][lightning_spectral.metrics.mmd_reading.MMDReading]) needs no stored samples: the pooled feature covariance is kept as
    a sum state, and under $H_0$ $T = \|\bar z_r - \bar z_g\|^2$ is distributed as
    $(1/m + 1/n) \sum_k l_k\, \chi^2_1$ with $l$ the eigenvalues of the pooled, centred covariance $S$; the
    p-value comes from a shifted, scaled chi-square (Pearson type III) matched in three cumulants,
    $\operatorname{tr} S$, $\operatorname{tr} S^2$ and $\operatorname{tr} S^3$ estimated from
    the sums with low bias ([`streaming_p_value`][lightning_spectral.functional.mmd.streaming_p_value]; no
    eigendecomposition).
    The test uses the biased statistic whatever ``unbiased`` says.
    Pick sigma without looking at the tested data (for example the
    median heuristic on a held-out split): choosing it to maximise the MMD inflates the type-I error.

    State: two [`Accumulator`][lightning_spectral.metrics.Accumulator]s, ``real`` and ``gen``, each with per
    bandwidth the feature sum (D = 2r) and the feature covariance sum (D x D; the sides are kept apart so the
    reference can survive ``reset``), and the count, float64, all-reduced under DDP. Memory:
    ``2 * len(sigma) * (2r)^2 * 8`` bytes (67 MB at r = 1024), whatever the number of samples. With
    ``statistic_only=True`` only the means are kept (``2 * len(sigma) * 2r`` floats, the FastMMD paper's
    algorithm): ``compute`` works, the test does not.

    Args:
        sigma: Gaussian bandwidth (> 0), a sequence of bandwidths, or ``"auto"``: fixed from the reference rows at
            the first read ([`auto_bandwidth`][lightning_spectral.kernels.auto_bandwidth]).
        n_frequencies: r; features 2r.
        seed: frequency seed (identical on every rank).
        unbiased: which form ``compute`` returns.
        reset_real_features: if False, ``reset()`` keeps the reference side.
        statistic_only: keep only the feature means (no covariance, no p-value): memory O(r), and each update
            costs O(N d r) instead of O(N r^2).
        in_features: the input width d, if known (else the first batch fixes it).
        chunk_size: rows mapped and summed at once (rows wait in a buffer until this many are pending).
        feature: a frozen ``nn.Module`` mapping a batch of images to (N, d) embeddings: ``update`` then takes
            images ([`FrozenFeature`][lightning_spectral.metrics.FrozenFeature]); ``None``: embeddings.
        normalize: with ``feature``: images are floats in [0, 1] (``True``) or ``uint8`` in [0, 255] (``False``,
            torchmetrics' FID convention); ``None`` (default, as the callbacks): read from the dtype.
        save_feature: with ``feature``: also write its weights into the metric's ``state_dict``.
        kwargs: ``torchmetrics.Metric`` keyword arguments (``process_group``, ``dist_sync_fn``, ...).

    Examples:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> mmd = FastMMD(sigma=1.0, n_frequencies=256)
        >>> mmd.update(torch.randn(400, 2, generator=g), real=True)
        >>> mmd.update(torch.randn(400, 2, generator=g) + 0.5, real=False)
        >>> float(mmd.compute()) > 0.01, bool(mmd.reading().test(level=0.05).reject)
        (True, True)
    """

    inputs = "two"
    higher_is_better: Optional[bool] = False
    reading_class = MMDReading
    feature_map: MultiBandwidthRFF

    def __init__(
        self,
        sigma: Union[float, Sequence[float], str],
        n_frequencies: int = 1024,
        *,
        seed: int = 0,
        unbiased: bool = True,
        reset_real_features: bool = True,
        statistic_only: bool = False,
        in_features: Optional[int] = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        feature: Optional[nn.Module] = None,
        normalize: Optional[bool] = None,
        save_feature: bool = False,
        **kwargs: Any,
    ) -> None:
        auto = isinstance(sigma, str) and check_sigma(sigma) is None
        sigmas, single = (("auto",), True) if auto else check_bandwidths(sigma)
        statistic_only = check_bool(statistic_only, "statistic_only")
        matrices = 0 if statistic_only else 2 * len(sigmas)
        check_state_memory("FastMMD", check_positive_int(n_frequencies, "n_frequencies"), matrices, 2 * len(sigmas))
        rff = MultiBandwidthRFF(None, n_frequencies, sigmas, seed)
        super().__init__(
            feature_map=rff,
            chunk_size=chunk_size,
            feature=feature,
            normalize=normalize,
            save_feature=save_feature,
            **kwargs,
        )
        self.sigmas, self.n_frequencies, self.seed = rff.sigmas, rff.n_frequencies, rff.seed
        self.sigma = None if auto else sigmas[0] if single else sigmas
        self._single = single
        self.unbiased = check_bool(unbiased, "unbiased")
        self.reset_real_features = check_bool(reset_real_features, "reset_real_features")
        self.statistic_only = statistic_only
        self.real = self._add_accumulator("real", covariance=not statistic_only, reference=True)
        self.gen = self._add_accumulator("gen", covariance=not statistic_only)
        if in_features is not None:
            self._build(check_positive_int(in_features, "in_features"))

    def update(self, features: Tensor, real: bool) -> None:
        """Add embeddings (N, d) (or images, with ``feature``) of the reference (``real=True``) or of the
        generated side (``real=False``)."""
        check_side(real, "FastMMD")
        (self.real if real else self.gen).add(self._embeddings(features))
