"""FKEAVendi: Vendi / RKE diversity of embeddings through random Fourier features (FKEA)."""

from __future__ import annotations

from typing import Any, Optional, Union

from torch import nn

from lightning_spectral.algebra.eigen import eigen_dtype
from lightning_spectral.algebra.gram import DEFAULT_CHUNK_SIZE
from lightning_spectral.functional.fkea import (
    Orders,
    check_orders,
    check_truncation,
)
from lightning_spectral.functional.sampling_noise import DEFAULT_SCORE_DRAWS
from lightning_spectral.metrics.covariance import RFFCovariance
from lightning_spectral.metrics.vendi_reading import VendiReading


class FKEAVendi(RFFCovariance):
    r"""Vendi score of order ``alpha`` of a stream of embeddings, $\exp(H_\alpha(C))$ (FKEA, Ospanov et al. 2024).

    $C$ is the (2r x 2r) random-Fourier covariance of the Gaussian kernel
    $k(x, y) = \exp\big(-\|x - y\|^2 / (2\sigma^2)\big)$; its eigenvalues $\lambda_i$ sum to 1 and

    $$\mathrm{VENDI}_\alpha = \Big(\sum_i \lambda_i^\alpha\Big)^{1/(1-\alpha)}$$

    with $\alpha = 1$ the Shannon limit $\exp(-\sum_i \lambda_i \log \lambda_i)$, $\alpha = 2$ the RKE score
    $1 / \|C\|_F^2$ (computed without an eigendecomposition) and $\alpha = \infty$ $1 / \lambda_{\max}$.
    The score is an effective number of modes: 1 for identical samples, about k for k well-separated,
    equally likely modes much tighter than sigma. It depends on sigma, the embedding and n; compare runs at
    fixed values. At small r FKEA underestimates (Vendi-1 most); 2r = 4096 to 16k is typical.

    Which orders depend on n and r: Vendi-1 (and every order below 2) keeps rising with the sample size n and with
    2r on a flat spectrum (on Fashion-MNIST at the median-rule sigma it rose 5 % from n = 1,000 to 4,000, 37 % at
    half that sigma: docs/benchmarks/diversity-convergence.md); RKE (order 2) and the $t$-truncated score
    (``truncation=t``, Ospanov and Farnia, UAI 2025, arXiv 2410.21719) converge once n and 2r exceed a few times t
    and move by about 1 %.
    A reading's [`summary`][lightning_spectral.metrics.vendi_reading.VendiReading.summary] reports n and 2r beside the score.

    With ``truncation=t`` every order is the $t$-truncated Vendi score
    ([`truncated_vendi`][lightning_spectral.functional.fkea.truncated_vendi]): the top t eigenvalues of $C$, each
    raised by an equal share of the mass of the others. It is 1 at t = 1, the plain score once t reaches the rank,
    non-decreasing in t and at most t; RKE then needs the eigendecomposition too.

    State: the float64 covariance sum, feature sum and count (``RFFCovariance``), all-reduced under DDP;
    memory is ``O(r^2)`` whatever the number of samples. Everything else is read from ``metric.reading()``, a
    [`VendiReading`][lightning_spectral.metrics.vendi_reading.VendiReading]: ``value``, ``standard_error()``,
    ``summary()``, ``spectrum()``, ``modes(k)``, ``top_samples(batches)``.

    Args:
        sigma: Gaussian bandwidth (> 0), in embedding units (FKEA: 20-25 for DINOv2, 7 for CLIP), or ``"auto"``:
            fixed from all rows held before the first read (the rule of
            [`auto_bandwidth`][lightning_spectral.kernels.auto_bandwidth]; ``summary()["sigma"]`` reports it).
        n_frequencies: r; the covariance is 2r x 2r.
        alpha: an order in (0, inf] (``"inf"`` allowed) or a sequence of orders.
        seed: frequency seed, identical on every rank.
        truncation: ``None`` (default: the Vendi score) or t, an integer >= 1: the t-truncated Vendi score.
        noise_draws: ``A``, the multiplier draws kept for the standard error ``se`` of each score (default 2: two
            (2r)^2 float64 sums beside ``Q``: the state is 3x, an update measured 1.6x, the first ``summary()`` 4.5x
            at 2r = 1,024 when its ``eigh`` with eigenvectors came on top of the score's ``eigvalsh`` (it now gives
            the score's spectrum too);
            [`sampling_noise`][lightning_spectral.functional.sampling_noise]); 0 keeps none and reports no ``se``.
            The 95 % interval is ``score +- t_{A, 0.975} se`` (Student-t with ``A`` degrees of freedom: 4.30 at
            A = 2, 3.18 at A = 3, 2.23 at A = 10).
        precision: the eigendecomposition's dtype, as [`psd_eigenvalues`][lightning_spectral.algebra.psd_eigenvalues]:
            ``"auto"`` (float32 from 2r = 4096, measured faster with the same scores to 0.002 %, see
            docs/benchmarks/training-loop-cost.md; float64 below), ``"float32"`` or ``"float64"``. The sums are
            float64 either way.
        chunk_size: rows mapped and summed at once (rows wait in a buffer until this many are pending).
        feature: a frozen ``nn.Module`` mapping a batch of images to (N, d) embeddings: ``update`` then takes
            images ([`FrozenFeature`][lightning_spectral.metrics.FrozenFeature]); ``None``: embeddings.
        normalize: with ``feature``: images are floats in [0, 1] (``True``) or ``uint8`` in [0, 255] (``False``,
            torchmetrics' FID convention); ``None`` (default, as the callbacks): read from the dtype.
        save_feature: with ``feature``: also write its weights into the metric's ``state_dict``.
        kwargs: ``in_features`` (the input width d, if known) and ``torchmetrics.Metric`` keyword arguments.

    Returns (``compute``):
        A scalar tensor for one order (loggable with ``self.log("val/vendi", metric)``), or a dict
        ``{order: score}`` for several (log it with ``self.log_dict`` after ``compute``).

    Raises:
        ValueError: bad ``sigma`` / ``n_frequencies`` / ``alpha`` / ``truncation``; bad batches (rank, width change, NaN / Inf).
        RuntimeError: ``compute`` before any sample.

    Examples:
        >>> import torch
        >>> metric = FKEAVendi(sigma=1.0, n_frequencies=512, alpha=[1, 2])
        >>> centers = torch.randn(4, 8) * 50          # 4 far-apart modes
        >>> metric.update(centers.repeat(100, 1) + 0.01 * torch.randn(400, 8))
        >>> {order: round(float(value), 1) for order, value in metric.compute().items()}
        {1: 4.0, 2: 4.0}
    """

    higher_is_better: Optional[bool] = True
    plot_lower_bound: float = 1.0

    reports_scalars = True  # its value is the Vendi score (an RFFCovariance reports the matrix)
    reading_class = VendiReading

    def __init__(
        self,
        sigma: Union[float, str],
        n_frequencies: int = 2048,
        *,
        alpha: Orders = 1.0,
        seed: int = 0,
        precision: str = "auto",
        truncation: Optional[int] = None,
        noise_draws: int = DEFAULT_SCORE_DRAWS,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        feature: Optional[nn.Module] = None,
        normalize: Optional[bool] = None,
        save_feature: bool = False,
        **kwargs: Any,
    ) -> None:
        orders, single = check_orders(alpha)  # before the (2r)^2 state is allocated
        truncation = check_truncation(truncation)
        eigen_dtype(precision, 0)  # an unknown precision fails here, not at the first compute
        super().__init__(
            sigma,
            n_frequencies,
            seed=seed,
            noise_draws=noise_draws,
            chunk_size=chunk_size,
            feature=feature,
            normalize=normalize,
            save_feature=save_feature,
            **kwargs,
        )
        self.orders, self._single_order, self.alpha = orders, single, alpha
        self.precision = precision
        self.truncation = truncation
