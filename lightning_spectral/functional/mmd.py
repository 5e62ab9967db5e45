r"""FastMMD: the maximum mean discrepancy through random Fourier features (Zhao & Meng, Neural Computation 2015).

With unit-norm features $z(x) = [\cos(xW), \sin(xW)] / \sqrt{r}$ ($z^\top z = K(0) = 1$) and side means
$\bar z_1 = \frac{1}{m} \sum_i z(x_i)$ (m samples) and $\bar z_2 = \frac{1}{n} \sum_j z(y_j)$ (n samples):

- biased (FastMMD App. A.2, eq. A.7): the squared amplitude of a sum of sinusoids averaged over the random
  frequencies, which is the mean-embedding distance,
  $$\mathrm{MMD}_b^2 = \|\bar z_1 - \bar z_2\|^2;$$
- unbiased (identity A.2); with [cos, sin] features this is *exactly* the U-statistic of the approximate kernel.
  It can be negative.
  $$\mathrm{MMD}_u^2 = \mathrm{MMD}_b^2 + \frac{\|\bar z_1\|^2}{m-1} + \frac{\|\bar z_2\|^2}{n-1}
  - \frac{m+n-2}{(m-1)(n-1)}.$$

Tests. ``fast_mmd_test`` permutes the pooled labels with the frequencies held fixed: an exact
finite-sample test for the approximate kernel, $p = (1 + \#\{T_b \ge T\}) / (B + 1)$. The streaming metric
cannot permute (it keeps no samples), so it uses the asymptotic null of $T = \mathrm{MMD}_b^2$: with the pooled,
centred feature covariance $S$ (eigenvalues $l_k$), under $H_0$
$$T \sim \Big(\frac{1}{m} + \frac{1}{n}\Big) \sum_k l_k\, \chi^2_1$$
(the feature map is finite-dimensional, so this is the central limit theorem for $\bar z_1 - \bar z_2$). The tail
is taken from a shifted, scaled chi-square with the same first three cumulants ($\operatorname{tr} S$,
$2 \operatorname{tr} S^2$, $8 \operatorname{tr} S^3$;
[`pearson3_p_value`][lightning_spectral.functional.mmd.pearson3_p_value]), the traces estimated from the
pooled sums ([`null_moments`][lightning_spectral.functional.mmd.null_moments],
[`null_trace_cube`][lightning_spectral.functional.mmd.null_trace_cube]);
[`streaming_p_value`][lightning_spectral.functional.mmd.streaming_p_value] does all of it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple, Union

import torch
from torch import Tensor

from lightning_spectral._checks import (
    check_bandwidths,
    check_bool,
    check_features,
    check_fraction,
    check_positive_int,
    check_seed,
)
from lightning_spectral.kernels.exact import gaussian_kernel
from lightning_spectral.kernels.gaussian_rff import GaussianRFF
from lightning_spectral.kernels.multi_bandwidth_rff import MultiBandwidthRFF


class MMDTest(NamedTuple):
    """Result of a two-sample test: the statistic, its p-value, and whether H0 (same distribution) is rejected."""

    statistic: Tensor
    p_value: Tensor
    reject: Tensor


def mmd_from_means(mean_x: Tensor, mean_y: Tensor, m: float, n: float, unbiased: bool) -> Tensor:
    """MMD^2 from the side means of unit-norm features (..., D) and the side sizes (see module doc).

    Raises:
        ValueError: an empty side, or a side with fewer than 2 samples for the unbiased form.
    """
    if min(m, n) < 1:
        raise ValueError("MMD needs at least one sample on each side.")
    biased = (mean_x - mean_y).square().sum(-1)
    if not unbiased:
        return biased
    if min(m, n) < 2:
        raise ValueError("The unbiased MMD^2 needs at least 2 samples on each side (use unbiased=False).")
    correction = mean_x.square().sum(-1) / (m - 1) + mean_y.square().sum(-1) / (n - 1)
    return biased + correction - (m + n - 2) / ((m - 1) * (n - 1))


def mmd_standard_error(
    mean_x: Tensor, mean_y: Tensor, covariance_x: Tensor, covariance_y: Tensor, m: float, n: float
) -> Tensor:
    r"""The standard error of MMD^2 (either form) from the side means and centred feature covariances.

    The mean difference $\hat\delta = \bar z_x - \bar z_y$ is about normal with covariance
    $\Sigma = S_x / m + S_y / n$, so $\|\hat\delta\|^2$ has variance $4 \delta^\top \Sigma \delta +
    2 \operatorname{tr}\Sigma^2$ (a quadratic form of a normal vector); with
    $E[\hat\delta^\top \Sigma \hat\delta] = \delta^\top \Sigma \delta + \operatorname{tr}\Sigma^2$ the estimate is

    $$\mathrm{se}^2 = \max\big(4 \hat\delta^\top \Sigma \hat\delta - 2 \operatorname{tr}\Sigma^2,\;
    2 \operatorname{tr}\Sigma^2\big)$$

    (the floor is the variance at $\delta = 0$). Exact given normal means; no draws are needed (the metric keeps
    the covariances for its test), so the interval is ``MMD^2 +- 1.96 se``. It is the sampling noise at these m, n.

    Args:
        mean_x, mean_y: (B?, D) side means.
        covariance_x, covariance_y: (B?, D, D) centred covariances (``Q / n - mu mu^T``).
        m, n: side sizes.

    Returns:
        (B?,) float64.

    Examples:
        >>> import torch
        >>> S = torch.eye(2, dtype=torch.float64) / 2
        >>> float(mmd_standard_error(torch.zeros(2), torch.zeros(2), S, S, 100.0, 100.0)) ** 2  # 2 tr(Sigma^2), Sigma = I / 100
        0.0004
    """
    delta = (mean_x - mean_y).double()
    sigma = covariance_x.double() / m + covariance_y.double() / n
    quadratic = (delta.unsqueeze(-2) @ sigma @ delta.unsqueeze(-1)).squeeze(-1).squeeze(-1)
    trace_sq = sigma.square().sum((-2, -1))
    return torch.maximum(4 * quadratic - 2 * trace_sq, 2 * trace_sq).sqrt()


def null_moments(feature_sum: Tensor, cov_sum: Tensor, count: float) -> tuple[Tensor, Tensor]:
    r"""Unbiased ``tr(S)`` and ``tr(S^2)`` of the feature covariance ``S`` from pooled sums of unit-norm features.

    $\operatorname{tr} S = 1 - \|\mu\|^2$ and
    $\operatorname{tr} S^2 = \operatorname{tr} C^2 - 2 \mu^\top C \mu + \|\mu\|^4$ ($C = E\, z z^\top$). Each term is
    estimated by the U-statistic over distinct samples of ``a_ij = z_i . z_j``, all of which follow from
    ``s = sum_i z_i``, ``Q = sum_i z_i z_i^T`` and ``||z_i|| = 1``:

    - ``P  = sum_{i != j} a_ij = ||s||^2 - N``                      (``N(N-1) ||mu||^2``)
    - ``A2 = sum_{i != j} a_ij^2 = ||Q||_F^2 - N``                  (``N(N-1) tr C^2``)
    - ``B3 = sum_{i,j,k distinct} a_ij a_jk = s^T Q s - 2||s||^2 + N - A2``   (``N(N-1)(N-2) mu^T C mu``)
    - ``D4 = sum_{i,j,k,l distinct} a_ij a_kl = P^2 - 2 A2 - 4 B3``   (``N(N-1)(N-2)(N-3) ||mu||^4``)

    The plug-in ``tr(S_hat^2)`` is biased up by about ``tr(S)^2 / N``: when N is below the feature width it
    overstates the null variance and the test loses power.
    """
    n = float(count)
    if n < 4:
        raise ValueError("The FastMMD test needs at least 4 samples in all.")
    squared_sum = feature_sum.square().sum(-1)
    pairs = squared_sum - n
    pair_squares = cov_sum.square().sum((-2, -1)) - n
    paths = torch.einsum("...i,...ij,...j->...", feature_sum, cov_sum, feature_sum) - 2 * squared_sum + n
    paths = paths - pair_squares
    disjoint = pairs.square() - 2 * pair_squares - 4 * paths
    n2, n3, n4 = n * (n - 1), n * (n - 1) * (n - 2), n * (n - 1) * (n - 2) * (n - 3)
    trace = 1.0 - pairs / n2
    trace_sq = pair_squares / n2 - 2.0 * paths / n3 + disjoint / n4
    return trace, trace_sq


def asymptotic_p_value(biased: Tensor, trace: Tensor, trace_sq: Tensor, m: float, n: float) -> Tensor:
    """p-value of ``T = MMD_b^2`` under its asymptotic null ``(1/m + 1/n) sum_k l_k chi2_1``, matched in mean
    (``tr S``) and variance (``2 tr S^2``) by a scaled chi-square ``g chi2_h``, ``g = tr S^2 / tr S``,
    ``h = (tr S)^2 / tr S^2`` (Gretton et al.'s two-moment Gamma approximation).

    The two-moment rule [`FastMMD`][lightning_spectral.metrics.FastMMD] used before
    [`streaming_p_value`][lightning_spectral.functional.mmd.streaming_p_value]; it is
    liberal at a small level (kept for comparison, see
    [`pearson3_p_value`][lightning_spectral.functional.mmd.pearson3_p_value])."""
    scale = 1.0 / m + 1.0 / n
    trace, trace_sq = trace.clamp_min(0), trace_sq.clamp_min(0)
    degenerate = (trace <= 1e-15) | (trace_sq <= 1e-30)  # all features identical: T is 0 under H0
    g = torch.where(degenerate, torch.ones_like(trace), trace_sq / trace.clamp_min(1e-300))
    h = torch.where(degenerate, torch.ones_like(trace), trace.square() / trace_sq.clamp_min(1e-300))
    p_value = torch.special.gammaincc(h / 2, biased.clamp_min(0) / (2 * g * scale))
    return torch.where(degenerate, (biased <= 1e-15).double(), p_value)


def _trace_cube_u_statistic(
    count: float, t: Tensor, f2: Tensor, f3: Tensor, v2: Tensor, x: Tensor, w: Tensor, y3: Tensor, z3: Tensor
) -> Tensor:
    """The U-statistic of ``tr S^3`` from sums over the sample-centred Gram matrix ``g_ij = y_i . y_j``, ``d_i = g_ii``.

    It averages the kernel ``(e1 . e2)(e2 . e3)(e3 . e1) / 8``, ``ek = z_a - z_b`` (``E ek ek^T = 2S``), over the
    ``N_(6) = N (N-1) ... (N-5)`` ordered 6-tuples of distinct samples. The kernel is translation-invariant, so
    it can be evaluated on ``y_i = z_i - z_bar``; inclusion-exclusion over index coincidences, using
    ``sum_i y_i = 0``, reduces it to ``t = sum_i d_i``, ``F2 = sum_ij g_ij^2``, ``F3 = sum_ijk g_ij g_jk g_ki``,
    ``V2 = sum_i d_i^2``, ``X = sum_ij d_i g_ij d_j``, ``W = sum_ij d_i g_ij^2``, ``Y3 = sum_i d_i^3``,
    ``Z3 = sum_ij g_ij^3``:

        N_(6) U = (N^3 - 9N^2 + 26N - 22) F3 - 3(N-2)(N^2 - 5N + 8) W - 3(N^2 - 5N + 8) X
                  - (3N^2 - 15N + 16) Z3 + 2N(N-1)(N-2) Y3 + 3(N-3) t F2 - 6(N-2) t V2 + t^3.

    The tests check it against the brute-force average over 6-tuples.
    """
    n = float(count)
    falling = n * (n - 1) * (n - 2) * (n - 3) * (n - 4) * (n - 5)
    quadratic = n * n - 5 * n + 8
    total = (
        (n**3 - 9 * n**2 + 26 * n - 22) * f3
        - 3 * (n - 2) * quadratic * w
        - 3 * quadratic * x
        - (3 * n * n - 15 * n + 16) * z3
        + 2 * n * (n - 1) * (n - 2) * y3
        + 3 * (n - 3) * t * f2
        - 6 * (n - 2) * t * v2
        + t**3
    )
    return total / falling


def null_trace_cube(feature_sum: Tensor, cov_sum: Tensor, count: float) -> Tensor:
    """Low-bias ``tr(S^3)`` of the feature covariance ``S`` from pooled sums of unit-norm features.

    ``feature_sum`` (..., D) is ``s = sum_i z_i``, ``cov_sum`` (..., D, D) is ``Q = sum_i z_i z_i^T``; returns (...).
    The U-statistic of ``tr S^3`` (`_trace_cube_u_statistic`) needs ``Q_c = Q - s s^T / N``
    (``= sum_i y_i y_i^T``, ``y_i = z_i - z_bar``) and sums over samples. Because ``||z_i|| = 1``,
    ``d_i = ||y_i||^2 = t_bar - 2 y_i . z_bar`` with ``t_bar = tr Q_c / N``, so ``V2 = N t_bar^2 + 4 z_bar^T Q_c z_bar``
    and ``X = 4 ||Q_c z_bar||^2`` are exact, while

    - ``W = t_bar tr Q_c^2 - 2 sum_i (y_i . z_bar) y_i^T Q_c y_i``,
    - ``Y3 = N t_bar^3 + 12 t_bar z_bar^T Q_c z_bar - 8 sum_i (y_i . z_bar)^3``,
    - ``Z3 = Y3 + sum_{i != j} (y_i . y_j)^3``

    hold sums of third powers of the centred features that the sums ``s``, ``Q`` do not determine. They are
    dropped, which leaves a bias of order ``1/N`` times third central moments of the features: within about
    1 % of ``tr S^3`` on digit images (N = 100 to 1600) and blobs (N = 100, 500) in ``bench_mmd.py moments``.
    The plug-in ``tr(S_hat^3)`` is biased up by about ``3 tr S tr S^2 / N``: +2 % to +32 % on the digits,
    +37 % and +227 % on the blobs.

    Cost: one D x D matrix product per leading index.

    Raises:
        ValueError: fewer than 6 samples.
    """
    n = float(count)
    if n < 6:
        raise ValueError(f"null_trace_cube: `count` must be at least 6 (the U-statistic uses 6 samples), got {n:g}.")
    mean = feature_sum / n
    centred = cov_sum - feature_sum.unsqueeze(-1) * mean.unsqueeze(-2)
    centred_sq = centred @ centred
    t = centred.diagonal(dim1=-2, dim2=-1).sum(-1)
    f2 = centred_sq.diagonal(dim1=-2, dim2=-1).sum(-1)
    f3 = (centred_sq * centred).sum((-2, -1))
    t_bar = t / n
    pulled = (centred @ mean.unsqueeze(-1)).squeeze(-1)  # Q_c z_bar
    spread = (mean * pulled).sum(-1)  # z_bar^T Q_c z_bar = sum_i (y_i . z_bar)^2
    v2 = n * t_bar**2 + 4 * spread
    x = 4 * pulled.square().sum(-1)
    w = t_bar * f2
    y3 = n * t_bar**3 + 12 * t_bar * spread
    return _trace_cube_u_statistic(n, t, f2, f3, v2, x, w, y3, z3=y3)


def log_gamma_upper(a: Tensor, x: Tensor) -> Tensor:
    r"""$\log Q(a, x)$, the log of the regularised upper incomplete gamma function (``gammaincc``), also where
    $Q$ underflows float64 (a p-value below 1e-308): ``log(gammaincc)`` where it is above 1e-300, else the
    continued fraction $Q(a, x) = e^{-x} x^a / \Gamma(a) \cdot 1 / (x + 1 - a - \frac{1 (1 - a)}{x + 3 - a - \dots})$
    (Numerical Recipes 6.2.7, modified Lentz; there ``x`` is far above ``a``, where it converges in a few terms).

    Examples:
        >>> import torch
        >>> a, x = torch.tensor(2.0, dtype=torch.float64), torch.tensor(5.0, dtype=torch.float64)
        >>> bool(torch.isclose(log_gamma_upper(a, x), torch.special.gammaincc(a, x).log()))
        True
        >>> float(log_gamma_upper(a, torch.tensor(1000.0, dtype=torch.float64))) < -990  # gammaincc gives 0 here
        True
    """
    a, x = torch.broadcast_tensors(a.double(), x.double())
    direct = torch.special.gammaincc(a, x)
    tiny = 1e-300
    b = x + 1.0 - a
    c = torch.full_like(x, 1.0 / tiny)
    d = 1.0 / torch.where(b.abs() < tiny, torch.full_like(b, tiny), b)
    h = d.clone()
    for i in range(1, 300):
        an = -i * (i - a)
        b = b + 2.0
        d = an * d + b
        d = torch.where(d.abs() < tiny, torch.full_like(d, tiny), d)
        c = b + an / c
        c = torch.where(c.abs() < tiny, torch.full_like(c, tiny), c)
        d = 1.0 / d
        h = h * d * c
    fraction = -x + a * torch.log(x.clamp_min(tiny)) - torch.lgamma(a) + torch.log(h.clamp_min(tiny))
    return torch.where(direct > tiny, direct.clamp_min(tiny).log(), fraction)


def pearson3_p_value(
    value: Tensor, trace: Tensor, trace_sq: Tensor, trace_cube: Tensor, log: bool = False
) -> Tensor:
    r"""$P(X \ge \text{value})$ for $X = \sum_k l_k \chi^2_1$ from the Pearson type III law $a + b\,\chi^2_\nu$ with
    the same mean $\operatorname{tr} S$, variance $2 \operatorname{tr} S^2$ and third cumulant
    $8 \operatorname{tr} S^3$ (shapes broadcast, float64):

    $$b = \frac{\operatorname{tr} S^3}{\operatorname{tr} S^2}, \qquad
    \nu = \frac{(\operatorname{tr} S^2)^3}{(\operatorname{tr} S^3)^2}, \qquad
    a = \operatorname{tr} S - \frac{(\operatorname{tr} S^2)^2}{\operatorname{tr} S^3}.$$

    Matching two moments only (``a = 0``, `asymptotic_p_value`) gives a lighter right tail than ``X``
    whenever the eigenvalues differ (``(tr S^2)^2 < tr S tr S^3``), so a liberal test at a small level; the
    third cumulant restores the skewness (the three-moment Pearson curve fit of Gretton, Borgwardt et al.,
    JMLR 2012, that FastMMD Sec. 2.5 names, here in closed form). ``tr S^3`` is clipped to
    ``[(tr S^2)^2 / tr S, (tr S^2)^(3/2)]``, its range for any spectrum: the two-moment law at the lower end,
    a single scaled ``chi2_1`` at the upper end. Needs ``tr S > 0`` and ``tr S^2 > 0``. With ``log`` the natural log
    of the p-value, finite where the p-value itself underflows to 0.

    Examples:
        >>> import torch
        >>> one = torch.tensor(1.0, dtype=torch.float64)
        >>> round(float(pearson3_p_value(3.84 * one, one, one, one)), 6)  # one eigenvalue: X = chi2_1, exact
        0.050044
    """
    trace, trace_sq = trace.clamp_min(1e-300), trace_sq.clamp_min(1e-300)
    trace_cube = torch.minimum(torch.maximum(trace_cube, trace_sq.square() / trace), trace_sq.pow(1.5))
    scale = trace_cube / trace_sq
    dof = trace_sq.pow(3) / trace_cube.square()
    shift = trace - trace_sq.square() / trace_cube
    if log:  # log p, also below float64's smallest number (`log_gamma_upper`)
        return log_gamma_upper(dof / 2, (value - shift).clamp_min(0) / (2 * scale))
    return torch.special.gammaincc(dof / 2, (value - shift).clamp_min(0) / (2 * scale))


def streaming_p_value(
    statistic: Tensor, feature_sum: Tensor, cov_sum: Tensor, count: float, m: float, n: float, log: bool = False
) -> Tensor:
    r"""Asymptotic p-value of ``T = MMD_b^2`` (biased) from the pooled streaming sums of unit-norm features (with
    ``log``: its natural log, finite where the p-value underflows float64, below 1e-308).

    Under $H_0$, $T \sim (1/m + 1/n) \sum_k l_k\, \chi^2_1$ with $l$ the eigenvalues of the pooled feature covariance
    ``S``. The p-value is the Pearson type III tail
    ([`pearson3_p_value`][lightning_spectral.functional.mmd.pearson3_p_value]) of ``T / (1/m + 1/n)`` with
    ``tr S``, ``tr S^2`` unbiased ([`null_moments`][lightning_spectral.functional.mmd.null_moments]) and ``tr S^3``
    low-bias ([`null_trace_cube`][lightning_spectral.functional.mmd.null_trace_cube]);
    no eigendecomposition. When all features are equal (``S = 0``), ``T`` is 0 under H0: p is 1 for
    ``T = 0`` and 0 otherwise.

    Args:
        statistic: ``||z_x_mean - z_y_mean||^2``, shape (...): one value per leading index (e.g. bandwidth).
        feature_sum: pooled ``sum_i z_i`` over both sides, (..., D).
        cov_sum: pooled ``sum_i z_i z_i^T``, (..., D, D).
        count: pooled sample count, ``m + n`` (at least 6).
        m: first side's sample count.
        n: second side's sample count.

    Returns:
        p-values, shape (...), float64.

    Raises:
        ValueError: mismatched shapes, ``count`` different from ``m + n``, an empty side, or fewer than 6
            samples in all.

    Examples:
        >>> import torch
        >>> from lightning_spectral.kernels import GaussianRFF
        >>> g = torch.Generator().manual_seed(0)
        >>> rff = GaussianRFF(2, 64, sigma=1.0)
        >>> z_x = rff(torch.randn(300, 2, generator=g, dtype=torch.float64))
        >>> z_y = rff(torch.randn(300, 2, generator=g, dtype=torch.float64) + 0.5)
        >>> z = torch.cat([z_x, z_y])
        >>> statistic = (z_x.mean(0) - z_y.mean(0)).square().sum()
        >>> float(streaming_p_value(statistic, z.sum(0), z.T @ z, 600, 300, 300)) < 1e-4   # shifted
        True
    """
    width = feature_sum.shape[-1]
    if cov_sum.shape != (*feature_sum.shape, width):
        raise ValueError(
            f"streaming_p_value: `cov_sum` must have shape {(*feature_sum.shape, width)} to match `feature_sum` "
            f"{tuple(feature_sum.shape)}, got {tuple(cov_sum.shape)}."
        )
    if statistic.shape != feature_sum.shape[:-1]:
        raise ValueError(
            f"streaming_p_value: `statistic` must have one value per leading index of `feature_sum`, shape "
            f"{tuple(feature_sum.shape[:-1])}, got {tuple(statistic.shape)}."
        )
    if min(float(m), float(n)) < 1 or abs(float(count) - (float(m) + float(n))) > 0.5:
        raise ValueError(
            f"streaming_p_value: `count` ({float(count):g}) must be m + n ({float(m) + float(n):g}), with at least "
            f"one sample on each side."
        )
    if float(count) < 6:
        raise ValueError(f"streaming_p_value: the null needs at least 6 samples in all (`count` = {float(count):g}).")
    trace, trace_sq = null_moments(feature_sum, cov_sum, count)
    trace_cube = null_trace_cube(feature_sum, cov_sum, count)
    degenerate = (trace <= 1e-15) | (trace_sq <= 1e-30)  # all features identical: T is 0 under H0
    p_value = pearson3_p_value(statistic.clamp_min(0) / (1.0 / m + 1.0 / n), trace, trace_sq, trace_cube, log)
    at_zero = (statistic <= 1e-15).double()
    return torch.where(degenerate, at_zero.log() if log else at_zero, p_value)


def _side_features(
    x: Tensor, y: Tensor, sigma: Union[float, Sequence[float]], n_frequencies: int, seed: int
) -> tuple[Tensor, Tensor]:
    """Features of both samples, float64: (m, D) and (n, D), or (B, m, D) and (B, n, D) for B bandwidths (one
    projection ``x Z``, rescaled per bandwidth, as the FastMMD authors' code does)."""
    x = check_features(x, "x", owner="fast_mmd")
    y = check_features(y, "y", width=x.shape[1], owner="fast_mmd")
    if x.shape[0] == 0 or y.shape[0] == 0:
        raise ValueError("fast_mmd: both samples must be non-empty.")
    sigmas, single = check_bandwidths(sigma)
    if single:
        rff: torch.nn.Module = GaussianRFF(x.shape[1], n_frequencies, sigmas[0], seed)
    else:
        rff = MultiBandwidthRFF(x.shape[1], n_frequencies, sigmas, seed)
    rff = rff.to(x.device)
    return rff(x).double(), rff(y).double()


def fast_mmd(
    x: Tensor,
    y: Tensor,
    sigma: Union[float, Sequence[float]],
    n_frequencies: int = 1024,
    seed: int = 0,
    unbiased: bool = True,
) -> Tensor:
    r"""FastMMD estimate of $\mathrm{MMD}^2$ between samples x (m, d) and y (n, d) with a Gaussian kernel.

    ``sigma`` may be a sequence: one estimate per bandwidth (``(B,)``), all from one projection of the data.

    Examples:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> x, y = torch.randn(500, 2, generator=g), torch.randn(500, 2, generator=g)
        >>> abs(float(fast_mmd(x, y, sigma=1.0))) < 0.01        # same distribution: about 0
        True
        >>> float(fast_mmd(x, y + 2.0, sigma=1.0)) > 0.5          # shifted: clearly positive
        True
        >>> fast_mmd(x, y + 2.0, sigma=[0.5, 1.0, 4.0]).shape     # three bandwidths, one projection
        torch.Size([3])
    """
    unbiased = check_bool(unbiased, "unbiased")
    z_x, z_y = _side_features(x, y, sigma, n_frequencies, seed)
    return mmd_from_means(z_x.mean(-2), z_y.mean(-2), z_x.shape[-2], z_y.shape[-2], unbiased)


def _permutation_test(
    pooled_features: Tensor, m: int, statistic: Tensor, n_permutations: int, level: float, seed: int,
    gram: bool = False,
) -> MMDTest:
    """Permute the pooled labels; the statistic is ``a^T G a`` (Gram form) or ``||Z^T a||^2`` (feature form)
    with weights ``a = 1/m`` on the first side and ``-1/n`` on the second."""
    check_positive_int(n_permutations, "n_permutations")
    if not bool(torch.isfinite(statistic).all()):  # a NaN would compare False everywhere: p-value 1/(B+1), reject
        raise ValueError(
            f"the MMD statistic is {float(statistic)}: the kernel matrix did not stay finite; rescale the inputs."
        )
    total = pooled_features.shape[0]
    n = total - m
    generator = torch.Generator().manual_seed(int(seed))
    exceed = 0
    for start in range(0, n_permutations, 256):
        size = min(256, n_permutations - start)
        order = torch.argsort(torch.rand(size, total, generator=generator), dim=1)
        weights = torch.where(order < m, 1.0 / m, -1.0 / n).to(pooled_features).T  # (N, B)
        if gram:
            values = (weights * (pooled_features @ weights)).sum(0)
        else:
            values = (pooled_features.T @ weights).square().sum(0)
        exceed += int((values >= statistic - 1e-12 * abs(float(statistic))).sum())
    p_value = torch.tensor((1 + exceed) / (n_permutations + 1), dtype=torch.float64)
    return MMDTest(statistic, p_value, p_value <= level)


def fast_mmd_test(
    x: Tensor,
    y: Tensor,
    sigma: float,
    n_frequencies: int = 1024,
    seed: int = 0,
    n_permutations: int = 1000,
    level: float = 0.05,
) -> MMDTest:
    """Permutation test of H0: x and y come from one distribution, with the frequencies fixed across
    permutations (an exact test for the approximate kernel). The statistic is the biased ``MMD_b^2``.

    Cost O(N L d) for the features plus O(N L B) for B permutations; memory O(N L).

    Raises:
        ValueError: ``level`` outside (0, 1), ``n_permutations`` < 1, a non-integer ``seed``, the input problems.
    """
    level = check_fraction(level, "level", high_closed=False)
    seed = check_seed(seed)
    z_x, z_y = _side_features(x, y, sigma, n_frequencies, seed)
    statistic = mmd_from_means(z_x.mean(0), z_y.mean(0), z_x.shape[0], z_y.shape[0], unbiased=False)
    return _permutation_test(torch.cat([z_x, z_y]), z_x.shape[0], statistic, n_permutations, level, seed)


def mmd_exact(x: Tensor, y: Tensor, sigma: float, unbiased: bool = True, chunk_size: int = 4096) -> Tensor:
    """Exact MMD^2 with the Gaussian kernel from the kernel matrices, in chunks (memory O(chunk^2)): the oracle.

    Biased: ``mean K_xx + mean K_yy - 2 mean K_xy``; unbiased: diagonals left out of the within-sample means.

    Examples:
        >>> import torch
        >>> x = torch.randn(50, 2)
        >>> float(mmd_exact(x, x, sigma=1.0, unbiased=False))
        0.0
    """
    unbiased = check_bool(unbiased, "unbiased")
    chunk_size = check_positive_int(chunk_size, "chunk_size")
    x = check_features(x, "x", owner="mmd_exact").double()
    y = check_features(y, "y", width=x.shape[1], owner="mmd_exact").double()
    m, n = x.shape[0], y.shape[0]
    if min(m, n) < (2 if unbiased else 1):
        raise ValueError("mmd_exact: each side needs at least 2 samples (1 for unbiased=False).")

    def kernel_sum(a: Tensor, b: Tensor) -> float:
        return sum(
            float(gaussian_kernel(a[i : i + chunk_size], b[j : j + chunk_size], sigma=sigma).sum())
            for i in range(0, a.shape[0], chunk_size)
            for j in range(0, b.shape[0], chunk_size)
        )

    k_xx, k_yy, k_xy = kernel_sum(x, x), kernel_sum(y, y), kernel_sum(x, y)
    if unbiased:  # the diagonal of a Gaussian kernel matrix is exactly 1
        value = (k_xx - m) / (m * (m - 1)) + (k_yy - n) / (n * (n - 1)) - 2 * k_xy / (m * n)
    else:
        value = k_xx / m**2 + k_yy / n**2 - 2 * k_xy / (m * n)
    if not math.isfinite(value):  # kernel values lie in [0, 1]: only a broken kernel matrix gets here
        raise ValueError(f"mmd_exact: the statistic is {value}; the kernel matrix did not stay finite.")
    return torch.tensor(value, dtype=torch.float64)


def mmd_exact_test(
    x: Tensor, y: Tensor, sigma: float, n_permutations: int = 1000, level: float = 0.05, seed: int = 0
) -> MMDTest:
    """Permutation test with the exact kernel (biased statistic): the reference FastMMD's power is compared to.

    Builds the (m+n) x (m+n) Gram matrix: for small samples only.

    Raises:
        ValueError: ``level`` outside (0, 1), an empty side, a non-integer ``seed``, the input problems.
    """
    level = check_fraction(level, "level", high_closed=False)
    seed = check_seed(seed)
    x = check_features(x, "x", owner="mmd_exact_test").double()
    y = check_features(y, "y", width=x.shape[1], owner="mmd_exact_test").double()
    if min(x.shape[0], y.shape[0]) == 0:
        raise ValueError("mmd_exact_test: both samples must be non-empty.")
    pooled = torch.cat([x, y])
    gram = gaussian_kernel(pooled, sigma=sigma)
    m, n = x.shape[0], y.shape[0]
    weights = torch.cat([gram.new_full((m,), 1.0 / m), gram.new_full((n,), -1.0 / n)])  # float64, gram's device
    statistic = weights @ gram @ weights
    return _permutation_test(gram, m, statistic, n_permutations, level, seed, gram=True)


__all__ = [
    "MMDTest",
    "asymptotic_p_value",
    "null_moments",
    "null_trace_cube",
    "pearson3_p_value",
    "streaming_p_value",
    "fast_mmd",
    "fast_mmd_test",
    "mmd_exact",
    "mmd_exact_test",
    "mmd_from_means",
]
