r"""FKEA: Vendi / RKE diversity through random Fourier features (Ospanov et al., NeurIPS 2024), and the exact oracle.

$$\mathrm{VENDI}_\alpha = \exp\big(H_\alpha(C)\big), \qquad C = \frac{1}{n} \sum_i \phi(x_i)\, \phi(x_i)^\top,$$

$C$ the (2r x 2r) RFF covariance, whose non-zero eigenvalues approximate those of the normalised kernel matrix
$K/n$ (FKEA eqs. 3-4, Algorithm 1). $\alpha = 2$ is RKE; $\alpha = 1$ the Shannon limit; $\alpha = \infty$ is
$1 / \lambda_{\max}$.

RKE, $1 / \|C\|_F^2$ (Jalali et al., "An Information-Theoretic Evaluation of Generative Models in Learning
Multi-modal Distributions", NeurIPS 2023), is estimated without the plug-in's bias: with unit-norm features
($k(x, x) = 1$), $\|C_n\|_F^2 = \frac{1}{n^2}\sum_{i,j} k(x_i, x_j)^2$ holds the $n$ diagonal terms $k(x_i, x_i)^2 = 1$, so
$E\|C_n\|_F^2 = (1 - 1/n)\|C\|_F^2 + 1/n$ and the plug-in RKE is low by $O(1/n)$. The mean over pairs
$i \ne j$ (a U-statistic, unbiased for $\|C\|_F^2$; `unbiased_purity`) is $(n \|C_n\|_F^2 - 1) / (n - 1)$, from the
same sums. Every RKE here (the metric, `fkea_vendi`, the exact oracle `vendi_exact`, the conditional and per-label
scores) is its reciprocal. The other orders' bias with $n$ has no closed form and is not removed (Vendi-1 keeps
rising with $n$); the $t$-truncated scores are the plug-in ones.

The $t$-truncated Vendi score (Ospanov and Farnia, "Do Vendi Scores Converge with Finite Samples? Truncated Vendi
Score for Finite-Sample Convergence Guarantees", UAI 2025, arXiv 2410.21719) keeps the top $t$ eigenvalues and
spreads the rest of the mass evenly over them (`truncate_spectrum`); unlike Vendi-1 it converges with $n = O(t)$
samples, and FKEA's and Nystrom's estimates converge to it (the paper's Nystrom / FKEA results).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple, Optional, Union

import torch
from torch import Tensor

from lightning_spectral._checks import all_finite, check_dense, check_features, check_order, check_positive_int
from lightning_spectral.algebra.eigen import psd_eigenvalues, psd_eigh
from lightning_spectral.algebra.gram import DEFAULT_CHUNK_SIZE, covariance
from lightning_spectral.functional.sampling_noise import NoiseSums, standard_error
from lightning_spectral.kernels.exact import gaussian_kernel
from lightning_spectral.kernels.gaussian_rff import GaussianRFF

Alpha = Union[float, int, str]
Orders = Union[Alpha, Sequence[Alpha]]
VendiResult = Union[Tensor, dict]


def parse_alpha(alpha: Alpha) -> float:
    """An order ``alpha`` as a float in (0, inf] (``"inf"`` allowed; `check_order`).

    Raises:
        ValueError: not an order (bools included), naming ``alpha``.
    """
    return check_order(alpha, "alpha")


def renyi_entropy(eigenvalues: Tensor, alpha: Alpha = 1.0) -> Tensor:
    r"""Order-``alpha`` Renyi entropy of a spectrum, $H_\alpha = \frac{1}{1 - \alpha} \log \sum_i p_i^\alpha$,
    $p = \lambda / \sum_j \lambda_j$.

    Special orders: $\alpha = 1$ is the Shannon limit $-\sum_i p_i \log p_i$; $\alpha = \infty$ is $-\log p_{\max}$.
    Zero eigenvalues contribute nothing (``0^a = 0``, ``0 log 0 = 0``), so the entropy of a spectrum padded
    with zeros is unchanged. Orders ``alpha < 1`` weigh tiny eigenvalues up (``p^alpha``), so round-off
    eigenvalues (~1e-16 in float64) shift them slightly; orders >= 1, the ones the papers report, are robust.
    The eigenvalues must be >= 0 (use [`psd_eigenvalues`][lightning_spectral.algebra.psd_eigenvalues]). For a normalised
    kernel they already sum to 1
    (trace of the covariance); normalising makes the helper safe for any PSD input.

    Args:
        eigenvalues: 1-D tensor of non-negative eigenvalues.
        alpha: order in (0, inf]; a number, ``math.inf`` or ``"inf"``.

    Returns:
        Scalar float64 tensor.

    Raises:
        ValueError: negative eigenvalues, an empty or all-zero spectrum, or ``alpha`` outside (0, inf].

    Examples:
        >>> import torch
        >>> float(renyi_entropy(torch.tensor([0.5, 0.5, 0.0]), alpha=2)) == math.log(2)
        True
    """
    alpha = parse_alpha(alpha)
    if not isinstance(eigenvalues, Tensor):
        raise TypeError(f"renyi_entropy: `eigenvalues` must be a 1-D tensor, got {type(eigenvalues).__name__}.")
    values = check_dense(eigenvalues, "eigenvalues", "renyi_entropy").double().flatten()
    if values.numel() == 0 or not all_finite(values) or bool((values < 0).any()):
        raise ValueError("renyi_entropy: eigenvalues must be a non-empty, finite, non-negative 1-D tensor.")
    total = values.sum()
    if float(total) <= 0:
        raise ValueError("renyi_entropy: all eigenvalues are zero (no samples were accumulated?).")
    p = values[values > 0] / total
    if math.isinf(alpha):
        return -torch.log(p.max())
    if alpha == 1.0:
        return -(p * torch.log(p)).sum()
    return torch.logsumexp(alpha * torch.log(p), dim=0) / (1.0 - alpha)


def vendi_score(eigenvalues: Tensor, alpha: Alpha = 1.0) -> Tensor:
    r"""Vendi score of order ``alpha``: $\exp(H_\alpha)$, the effective number of modes (1 <= score <= rank).

    $\alpha = 2$ is the RKE score $1 / \sum_i p_i^2$; $\alpha = \infty$ is $1 / p_{\max}$.

    Examples:
        >>> import torch
        >>> round(float(vendi_score(torch.full((4,), 0.25), alpha=1)), 6)
        4.0
    """
    return torch.exp(renyi_entropy(eigenvalues, alpha))


def check_pairs(n: float) -> float:
    """``n`` as a float, refused below 2: RKE is estimated over pairs of distinct samples (`unbiased_purity`).

    Raises:
        ValueError: ``n < 2``, naming the fix.
    """
    n = float(n)
    if not n >= 2:
        raise ValueError(f"RKE is estimated over pairs of distinct samples, so it needs at least 2 samples; got n = "
                         f"{n:g}. Feed more samples before reading it.")
    return n


def unbiased_purity(purity: Tensor, n: float, width: int) -> Tensor:
    r"""$\|C\|_F^2$ (at trace 1) without the plug-in's $1/n$ bias, from the plug-in purity
    $P = \|C_n\|_F^2 / \operatorname{tr}(C_n)^2$ of $n$ samples with unit-norm features (module doc):
    $U = (n P - 1) / (n - 1)$, the mean of $k(x_i, x_j)^2$ over pairs $i \ne j$. A sampling fluctuation can take it
    below the smallest purity a trace-1 matrix of ``width`` rows has, $1 / \mathrm{width}$: it is floored there (RKE
    at most ``width``).

    Raises:
        ValueError: ``n < 2`` (no pair of distinct samples; `check_pairs`).

    Examples:
        >>> import torch
        >>> round(float(unbiased_purity(torch.tensor(0.5), 100, 256)), 4)  # two equal halves: P = 1/2 at any n
        0.4949
    """
    n = check_pairs(n)
    purity = purity.double()
    return torch.maximum((n * purity - 1.0) / (n - 1.0), torch.full_like(purity, 1.0 / width))


def rke_from_covariance(covariance: Tensor, n: Optional[float] = None) -> Tensor:
    r"""RKE (Vendi of order 2) without an eigendecomposition: $1 / P$, $P = \|C\|_F^2 / \operatorname{tr}(C)^2$;
    with the sample count ``n``, $1 / U$ (`unbiased_purity`: the estimate without the plug-in's $1/n$ bias).

    Examples:
        >>> import torch
        >>> float(rke_from_covariance(torch.eye(3) / 3))
        3.0
    """
    covariance = covariance.double()
    frobenius_sq = covariance.square().sum()
    if float(frobenius_sq) <= 0 or not bool(torch.isfinite(frobenius_sq)):
        raise ValueError("rke_from_covariance: the covariance is zero or non-finite (no samples accumulated?).")
    purity = frobenius_sq / covariance.trace().square()
    return 1.0 / (purity if n is None else unbiased_purity(purity, n, covariance.shape[0]))



def check_orders(alpha: Orders) -> tuple[list[Alpha], bool]:
    """The orders as a list, and whether a single order was given. Raises ``ValueError`` on bad orders (bools too)."""
    single = not isinstance(alpha, Sequence) or isinstance(alpha, (str, bytes))  # a tensor is one (bad) order
    orders = [alpha] if single else list(alpha)  # type: ignore[arg-type]
    if not orders:
        raise ValueError("`alpha` must be an order in (0, inf] or a non-empty sequence of orders.")
    for order in orders:
        check_order(order, "alpha")
    return orders, single


def check_truncation(truncation: Optional[int]) -> Optional[int]:
    """``None`` (no truncation) or ``t`` as an ``int`` >= 1.

    Raises:
        ValueError: anything else (a bool, a float such as ``100.0``, a string, 0 or less), naming ``truncation``.
    """
    return None if truncation is None else check_positive_int(truncation, "truncation")


def truncate_spectrum(eigenvalues: Tensor, t: int) -> Tensor:
    r"""The $t$-truncated spectrum (Ospanov and Farnia, arXiv 2410.21719: the paper's definition of the
    $t$-truncated Vendi score; the authors' code, ``truncated_vendi.py``, does the same): the top $t$ eigenvalues of the trace-normalised spectrum, each raised by an equal share of the
    mass left out,

    $$\tilde\lambda_i = \lambda_i + \frac{1 - S_t}{t} \quad (i \le t), \qquad S_t = \sum_{i \le t} \lambda_i,$$

    with $\lambda_1 \ge \lambda_2 \ge \dots$ summing to 1. It sums to 1; with $t$ at least the number of eigenvalues
    it is the spectrum itself (nothing is left out).

    Args:
        eigenvalues: 1-D tensor of non-negative eigenvalues (any order, any positive sum; normalised here).
        t: how many eigenvalues to keep, an integer >= 1.

    Returns:
        (min(t, len),) float64 tensor, descending, summing to 1.

    Examples:
        >>> import torch
        >>> [round(v, 6) for v in truncate_spectrum(torch.tensor([0.5, 0.3, 0.2]), 2).tolist()]
        [0.6, 0.4]
    """
    t = check_positive_int(t, "t")
    if not isinstance(eigenvalues, Tensor):
        raise TypeError(f"truncate_spectrum: `eigenvalues` must be a 1-D tensor, got {type(eigenvalues).__name__}.")
    values = check_dense(eigenvalues, "eigenvalues", "truncate_spectrum").double().flatten()
    if values.numel() == 0 or not all_finite(values) or bool((values < 0).any()) or float(values.sum()) <= 0:
        raise ValueError("truncate_spectrum: eigenvalues must be a non-empty, finite, non-negative 1-D tensor with a "
                         "positive sum.")
    p = torch.sort(values / values.sum(), descending=True).values
    if t >= p.numel():
        return p
    top = p[:t]
    return top + p[t:].sum() / t  # the tail's mass summed directly: 1 - S_t would cancel digits when S_t is near 1


def truncated_vendi(eigenvalues: Tensor, t: int, alpha: Orders = 1.0) -> VendiResult:
    r"""The $t$-truncated Vendi score(s) of order ``alpha`` of a spectrum: $\exp\big(H_\alpha(\tilde\lambda)\big)$ of
    [`truncate_spectrum`][lightning_spectral.functional.fkea.truncate_spectrum] (Ospanov and Farnia, arXiv 2410.21719:
    the truncated spectrum's order-``alpha`` entropy, as the authors' code computes it for every order).

    Identities: 1 at $t = 1$; the ordinary Vendi score once $t$ reaches the rank; between 1 and $t$; never above the
    ordinary score, and non-decreasing in $t$ at every order (the $t$-truncated spectrum, padded with a zero,
    majorizes the $(t+1)$-truncated one, and Renyi entropies are Schur-concave).

    Args:
        eigenvalues: 1-D tensor of non-negative eigenvalues (e.g. of $K/n$ or of the RFF covariance).
        t: the truncation, an integer >= 1.
        alpha: an order in (0, inf] or a sequence of orders.

    Returns:
        A scalar float64 tensor for one order, a dict ``{order: score}`` for several.

    Examples:
        >>> import torch
        >>> round(float(truncated_vendi(torch.tensor([0.5, 0.3, 0.2]), t=2)), 4)  # exp(H(0.6, 0.4))
        1.9601
    """
    check_orders(alpha)
    return vendi_from_spectrum(truncate_spectrum(eigenvalues, t), alpha)


def vendi_from_spectrum(
    eigenvalues: Tensor, alpha: Orders, truncation: Optional[int] = None, n: Optional[float] = None
) -> VendiResult:
    """Vendi score(s) of a spectrum: a scalar tensor for one order, a dict ``{order: score}`` for several; with
    ``truncation`` the $t$-truncated score(s) (`truncated_vendi`); with the sample count ``n`` (and no truncation),
    order 2 without its $1/n$ bias (`unbiased_purity`)."""
    orders, single = check_orders(alpha)
    if truncation is not None:
        eigenvalues = truncate_spectrum(eigenvalues, truncation)
    scores = {order: vendi_score(eigenvalues, order) for order in orders}
    if n is not None and truncation is None:
        for order in orders:
            if parse_alpha(order) == 2.0:
                values = eigenvalues.double()
                scores[order] = 1.0 / unbiased_purity(values.square().sum() / values.sum().square(), n, len(values))
    return scores[orders[0]] if single else scores


def fkea_vendi(
    features: Tensor,
    sigma: float,
    n_frequencies: int = 2048,
    alpha: Orders = 1.0,
    seed: int = 0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    truncation: Optional[int] = None,
) -> VendiResult:
    r"""FKEA Vendi score(s) of embeddings (N, d): $\exp(H_\alpha)$ of the RFF covariance spectrum.

    With ``truncation=t``, the $t$-truncated score of that spectrum (`truncated_vendi`), the FKEA estimate of the
    truncated Vendi score (Ospanov and Farnia, arXiv 2410.21719, who show FKEA converges to it): it moves little with N and r once
    N and 2r exceed a few times t, where Vendi-1 keeps rising with both.

    Args:
        features: (N, d) embeddings, N >= 1.
        sigma: Gaussian bandwidth.
        n_frequencies: r (covariance 2r x 2r). FKEA underestimates at small r (Vendi-1 converges slowest).
        alpha: an order in (0, inf] or a sequence of orders (2 = RKE).
        seed: frequency seed.
        truncation: ``None`` (the Vendi score) or t, an integer >= 1 (the t-truncated score).

    Returns:
        A scalar float64 tensor for one order, a dict keyed by order for several.

    Examples:
        >>> import torch
        >>> x = torch.cat([torch.zeros(50, 2), torch.full((50, 2), 100.0)])  # two far-apart points
        >>> round(float(fkea_vendi(x, sigma=1.0, n_frequencies=256, alpha=2)), 1)
        2.0
    """
    check_orders(alpha)
    truncation = check_truncation(truncation)
    features = check_features(features, "features", owner="fkea_vendi")
    if features.shape[0] == 0:
        raise ValueError("fkea_vendi: `features` is empty; at least one sample is needed.")
    rff = GaussianRFF(features.shape[1], n_frequencies, sigma, seed).to(features.device)
    spectrum = psd_eigenvalues(covariance(features, rff, chunk_size))
    return vendi_from_spectrum(spectrum, alpha, truncation, features.shape[0])


def vendi_exact(
    features: Tensor, sigma: float, alpha: Orders = 1.0, truncation: Optional[int] = None
) -> VendiResult:
    r"""Exact Vendi score(s) from the n x n Gaussian kernel matrix: $\exp\big(H_\alpha(K/n)\big)$, in
    $O(n^2 d + n^3)$; with ``truncation=t`` the exact $t$-truncated score(s) of $K/n$ (`truncated_vendi`;
    Ospanov and Farnia, arXiv 2410.21719).

    The oracle FKEA converges to as r grows. RKE (order 2, no truncation) is $1 / \operatorname{mean}_{i \ne j}
    K_{ij}^2$, the estimate without the plug-in's $1/n$ bias (module doc).

    Examples:
        >>> import torch
        >>> round(float(vendi_exact(torch.eye(3) * 100, sigma=1.0)), 6)  # three far-apart points
        3.0
    """
    check_orders(alpha)
    truncation = check_truncation(truncation)
    features = check_features(features, "features", owner="vendi_exact")
    if features.shape[0] == 0:
        raise ValueError("vendi_exact: `features` is empty; at least one sample is needed.")
    kernel = gaussian_kernel(features, sigma=sigma)
    n = kernel.shape[0]
    return vendi_from_spectrum(psd_eigenvalues(kernel / n), alpha, truncation, n)


def vendi_gradient(eigenvalues: Tensor, alpha: Alpha = 1.0, truncation: Optional[int] = None) -> Tensor:
    r"""The gradient $g_i = \partial V / \partial \lambda_i$ of one Vendi score (`vendi_from_spectrum`) at a spectrum.

    With $p = \lambda / T$, $T = \sum_j \lambda_j$ and $h_i = \partial V / \partial p_i$:
    $g_i = (h_i - \sum_j h_j p_j) / T$, where $V = (\sum_i p_i^\alpha)^{1/(1-\alpha)}$ gives
    $h_i = V \alpha p_i^{\alpha-1} / ((1-\alpha) \sum_j p_j^\alpha)$, $h_i = -V (\log p_i + 1)$ at $\alpha = 1$ and
    $h_1 = -V^2$ at $\alpha = \infty$; with ``truncation=t`` the chain rule runs through
    $\tilde p_i = p_i + \sum_{j > t} p_j / t$ (`truncate_spectrum`): $h_j = \tilde h_j$ for $j \le t$ and
    $\bar{\tilde h}$ (their mean) for $j > t$. Eigenvalues at most ``1e-12`` of the largest get $h = 0$ (their
    $\log$ diverges; their moves are round-off).

    Args:
        eigenvalues: (D,) non-negative eigenvalues, descending.
        alpha: one order in (0, inf].
        truncation: ``None`` or t >= 1.

    Returns:
        (D,) float64.

    Examples:
        >>> import torch
        >>> lam = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
        >>> g = vendi_gradient(lam, 2)
        >>> step = 1e-6 * torch.tensor([1.0, -1.0, 0.0], dtype=torch.float64)
        >>> change = float(vendi_score(lam + step, 2) - vendi_score(lam, 2))
        >>> abs(change - float(g @ step)) < 1e-10
        True
    """
    order = parse_alpha(alpha)
    values = eigenvalues.double().clamp_min(0.0)
    total = values.sum()
    p = values / total
    if truncation is not None and truncation < p.numel():
        kept = truncate_spectrum(values, truncation)
        tilde = vendi_gradient(kept, order)  # dV/dp~ up to a constant, which cancels in g below
        h = torch.cat([tilde, tilde.mean().expand(p.numel() - truncation)])
    else:
        live = p > 1e-12 * float(p.max())
        h = torch.zeros_like(p)
        q = p[live]
        if math.isinf(order):
            h[0] = -1.0 / float(p[0]) ** 2
        elif order == 1.0:
            score = torch.exp(-(q * torch.log(q)).sum())
            h[live] = -score * (torch.log(q) + 1)
        else:  # scaled by the largest p: q^alpha underflows to 0 for a large alpha (NaN from 0 / 0 otherwise)
            largest = q.max()
            ratio = q / largest
            power = ratio.pow(order).sum()  # sum_j p_j^alpha / p_max^alpha, in [1, D]
            score = torch.exp((order * torch.log(largest) + torch.log(power)) / (1.0 - order))
            h[live] = score * order * ratio.pow(order - 1) / ((1.0 - order) * largest * power)
    return (h - (h * p).sum()) / total


def vendi_standard_errors(
    noise: NoiseSums,
    alpha: Orders = 1.0,
    truncation: Optional[int] = None,
    precision: str = "float64",
    eigen: Optional[tuple[Tensor, Tensor]] = None,
) -> VendiResult:
    r"""Standard errors of the Vendi score(s) of ``C = Q / n`` from the multiplier draws ``E_a``
    ([`sampling_noise`][lightning_spectral.functional.sampling_noise]), to first order (the delta method; eigenvalue
    derivatives $\delta\lambda_i = u_i^\top E u_i$, Kato 1995):

    $$d_a = \operatorname{tr}(G E_a), \quad G = U \operatorname{diag}(g) U^\top, \quad
    \mathrm{se} = \sqrt{\tfrac{1}{A} \sum_a d_a^2}$$

    with $g$ = `vendi_gradient` at the spectrum of ``C`` and $U$ its eigenvectors (one ``eigh`` for every order;
    `gradient_replicates` forms $G$ from the pairs whose $g_i$ is not the tail's). RKE
    alone (order 2, no truncation) needs none: $G = -2 V^2 (C / T - P I) / T$, $P = \|C\|_F^2 / T^2$, $V = 1 / P$.
    The interval ``score +- t_{A, 0.975} se`` (Student-t with A degrees of freedom) is the sampling noise of the
    score at this n: not its bias with n (Vendi-1 keeps rising with n).

    Args:
        noise: the stream's sums and draws (``A >= 1``).
        alpha: an order or a sequence of orders.
        truncation: ``None`` or t (the t-truncated score, `truncated_vendi`).
        precision: the eigendecomposition's dtype, as `psd_eigenvalues`.
        eigen: ``(values, vectors)`` of ``C`` if already at hand
            ([`psd_eigh`][lightning_spectral.algebra.psd_eigh] at ``precision``, or the spectrum with its leading
            pairs as `gradient_replicates` takes them); ``None``: computed here.

    Returns:
        A scalar float64 tensor for one order, a dict ``{order: se}`` for several.
    """
    orders, single = check_orders(alpha)
    replicates = vendi_replicates(noise, orders, truncation, precision, eigen)
    errors = {order: standard_error(moves) for order, moves in replicates.items()}
    return errors[orders[0]] if single else errors


def vendi_replicates(
    noise: NoiseSums,
    alpha: Orders = 1.0,
    truncation: Optional[int] = None,
    precision: str = "float64",
    eigen: Optional[tuple[Tensor, Tensor]] = None,
) -> dict:
    r"""The replicates $d_a = \operatorname{tr}(G E_a)$ (A,) of each order's Vendi score, by order
    (`vendi_standard_errors` is their root mean square; ``eigen`` as there); RKE's are those of $1 / U$
    (`unbiased_purity`): the plug-in's times $\frac{n}{n-1} (P / U)^2$."""
    orders, _ = check_orders(alpha)
    moment = noise.moment().double()
    draws = [noise.draw(a) for a in range(noise.draws)]
    total = moment.trace()
    purity = moment.square().sum() / total**2
    if truncation is None and all(parse_alpha(order) == 2.0 for order in orders):
        eye = torch.eye(moment.shape[0], dtype=moment.dtype, device=moment.device)
        gradient = -2 / purity**2 * (moment / total - purity * eye) / total
        moves = {order: torch.stack([(gradient * draw).sum() for draw in draws]) for order in orders}
    else:
        values, vectors = psd_eigh(moment, precision=precision) if eigen is None else eigen
        moves = {
            order: gradient_replicates(vendi_gradient(values, order, truncation), vectors, draws) for order in orders
        }
    rke = [order for order in orders if parse_alpha(order) == 2.0] if truncation is None else []
    if rke:  # RKE is 1 / U, U = (n P - 1) / (n - 1): its replicates are the plug-in's times dV_U / dV_P
        unbiased = unbiased_purity(purity, noise.count, moment.shape[0])  # raises below 2 samples
        scale = noise.count / (noise.count - 1) * (purity / unbiased) ** 2
        for order in rke:
            moves[order] = moves[order] * scale
    return moves


def vendi_bias(
    noise: NoiseSums, alpha: Orders = 1.0, precision: str = "float64", eigen: Optional[tuple[Tensor, Tensor]] = None
) -> VendiResult:
    r"""The second-order bias ``E V(C_n) - V(C)`` of each Vendi score at this n, from the multiplier draws.

    Vendi is a smooth function of ``p = C / tr C``: ``V = h(F)``, ``F = sum_i g(p_i)`` (``g = -p log p``,
    ``h = exp`` at order 1; ``g = p^alpha``, ``h = F^{1/(1 - alpha)}`` otherwise). With the noise ``N`` of ``p``
    (mean 0), Taylor to second order gives (``d/dt tr g(P + tN) = tr g'(P + tN) N``, and the derivative of ``g'(P)``
    by Daleckii and Krein's formula: Bhatia 1997, Matrix Analysis, Theorem V.3.3)::

        bias = (1/2) [ h'(F) sum_ij D_ij E N_ij^2 + h''(F) E (sum_i g'(p_i) N_ii)^2 ]

    with ``N`` in the eigenbasis of ``C`` and ``D_ij = (g'(p_i) - g'(p_j)) / (p_i - p_j)`` (``g''(p_i)`` on the
    diagonal): ``-1 / L(p_i, p_j)`` at order 1, ``L`` the logarithmic mean. ``E N_ij^2`` is the mean over the draws
    of ``(U^T E_a U)_ij^2 / T^2`` (``E_a`` has the covariance of ``C_n - E C_n``: `sampling_noise`), on the pairs with
    ``p > 1e-12 p_max`` (``E_a`` lives in the samples' span). At order 1 the entropy's bias is about
    -(effective rank) / (2 n), as a histogram's is -(bins - 1) / (2 n) (Miller 1955). Exact to second
    order for features of one norm (Gaussian random features: ``tr C = 1``, ``tr E_a = 0``); the trace's own
    second-order terms are left out otherwise. Third-order terms matter once n is small next to the effective rank
    (measured: docs/benchmarks/coverage.md).

    Order 2 is reported without its ``1/n`` bias (`unbiased_purity`) and order ``inf`` is not a smooth function of
    ``C``: both get 0.

    Args:
        noise: the stream's sums and draws (``A >= 1``).
        alpha: an order or a sequence of orders.
        precision: the eigendecomposition's dtype, as `psd_eigenvalues`.
        eigen: ``(values, vectors)`` of ``C`` if at hand (every pair with a non-zero eigenvalue); ``None``:
            computed here.

    Returns:
        A scalar float64 tensor for one order, a dict ``{order: bias}`` for several: ``V (b + E dH^2 / 2)`` with
        `entropy_bias`' ``b`` and replicates ``dH`` (``V = exp H``).

    Examples:
        >>> import torch
        >>> from lightning_spectral.functional.sampling_noise import Multipliers
        >>> from lightning_spectral.kernels import GaussianRFF
        >>> x = torch.randn(500, 2, generator=torch.Generator().manual_seed(0))
        >>> noise = NoiseSums.of(x, GaussianRFF(2, 64, sigma=1.0, seed=0), Multipliers(8, 1.0, seed=0))
        >>> float(vendi_bias(noise, 1)) < 0   # Vendi-1 reads low at small n
        True
    """
    orders, single = check_orders(alpha)
    eigen = psd_eigh(noise.moment().double(), precision=precision) if eigen is None else eigen  # one for both
    entropies, values = entropy_bias(noise, orders, precision, eigen), eigen[0]
    biases = {}
    for order in orders:
        if parse_alpha(order) in (2.0, math.inf):  # see `entropy_bias`
            biases[order] = torch.zeros((), dtype=torch.float64)
            continue
        score = vendi_score(values.double().clamp_min(0.0), order)
        found = entropies[order]
        biases[order] = score * (found.bias + 0.5 * found.replicates.square().mean())
    return biases[orders[0]] if single else biases


class EntropyBias(NamedTuple):
    """The second-order bias ``bias`` of a Renyi entropy ``H = log V`` at this n and its first-order replicates
    ``replicates`` (A,) over the multiplier draws (`entropy_bias`), float64."""

    bias: Tensor
    replicates: Tensor


def entropy_bias(
    noise: NoiseSums, alpha: Orders = 1.0, precision: str = "float64", eigen: Optional[tuple[Tensor, Tensor]] = None
) -> dict:
    """`vendi_bias` for the entropy ``H = log V`` (``H = F`` at order 1, ``log F / (1 - alpha)`` otherwise): its
    second-order bias ``(1/2) [H'(F) sum_ij D_ij E N_ij^2 + H''(F) E (sum_i g'(p_i) N_ii)^2]`` and its first-order
    replicates ``dH_a = H'(F) sum_i g'(p_i) N_ii`` per draw (orders 2 and inf: bias 0, the replicates; order 2 is
    reported from pairs of distinct samples, whose left bias is of the order of ``se^2 / V``), so that a
    difference of entropies (`ConditionalVendi`'s ``H_joint - H_prompts``) is biased by the difference of their
    biases, the draws being shared. Returns ``{order: EntropyBias}``.
    """
    orders, _ = check_orders(alpha)
    values, vectors = psd_eigh(noise.moment().double(), precision=precision) if eigen is None else eigen
    values = values.double().clamp_min(0.0)
    total = values.sum()
    live = values > 1e-12 * float(values.max())
    kept = vectors.shape[1]  # a rank-bounded `psd_eigh` gives the leading pairs only, the rest of the values 0
    if bool(live[kept:].any()):
        raise ValueError(f"vendi_bias: `eigen` holds {kept} eigenvectors but more non-zero eigenvalues; pass them all.")
    p, basis = values[:kept][live[:kept]] / total, vectors[:, live[:kept].to(vectors.device)].double()
    # the noise of p = C / tr C to first order, N_a = (E_a - C tr(E_a) / T) / T, in C's eigenbasis (U^T C U =
    # diag(T p)); E_a U without forming E_a (`NoiseSums.draws_times`)
    means = noise.weight_sums.double() / noise.count
    traces = (noise.weighted.double().diagonal(dim1=1, dim2=2).sum(1) - means * noise.total.double().trace())
    traces = (traces / noise.count).to(basis.device)  # tr E_a, (A,)
    rotated = basis.T @ noise.draws_times(basis).double().to(basis.device) / total  # (A, m, m)
    rotated = rotated - torch.diag_embed(p[None, :] * traces[:, None] / total)
    noise_squares = rotated.square().mean(0)  # E N_ij^2, (m, m)
    diagonals = rotated.diagonal(dim1=1, dim2=2)  # N_ii per draw, (A, m)
    found = {}
    for order in orders:
        exponent = parse_alpha(order)
        zero = torch.zeros((), dtype=torch.float64)
        if math.isinf(exponent):  # H = -log p_max: not smooth in C, no bias estimate; dH = -N_11 / p_1
            found[order] = EntropyBias(zero, -diagonals[:, 0] / p[0])
            continue
        first, second = _spectral_derivatives(p, exponent)
        if exponent == 1.0:
            outer_1, outer_2 = torch.ones((), dtype=torch.float64), zero
        else:
            power = (p**exponent).sum()
            outer_1, outer_2 = 1.0 / ((1.0 - exponent) * power), -1.0 / ((1.0 - exponent) * power**2)
        replicates = outer_1 * (diagonals * first).sum(1)
        if exponent == 2.0:  # reported without its 1/n bias (`unbiased_purity`)
            found[order] = EntropyBias(zero, replicates)
            continue
        bias = 0.5 * (outer_1 * (second * noise_squares).sum() + outer_2 * replicates.square().mean() / outer_1**2)
        found[order] = EntropyBias(bias, replicates)
    return found


def _spectral_derivatives(p: Tensor, exponent: float) -> tuple[Tensor, Tensor]:
    """``g'(p)`` (m,) and the divided differences ``D`` (m, m) of `vendi_bias` (stable where ``p_i`` is near
    ``p_j``: ``log1p`` / ``expm1`` of their ratio)."""
    a, b = p[:, None], p[None, :]
    ratio = (a - b) / b
    small = ratio.abs() < 1e-6
    safe = torch.where(small, torch.ones_like(ratio), ratio)
    if exponent == 1.0:
        first = -p.log() - 1.0
        difference = -torch.where(small, (1.0 - ratio / 2.0) / b, torch.log1p(safe) / (b * safe))
    else:
        first = exponent * p ** (exponent - 1.0)
        step = torch.where(small, (exponent - 1.0) * (1.0 + (exponent - 2.0) * ratio / 2.0),
                           torch.expm1((exponent - 1.0) * torch.log1p(safe)) / safe)
        difference = exponent * b ** (exponent - 2.0) * step
    return first, difference


def gradient_replicates(gradient: Tensor, vectors: Tensor, draws: Sequence[Tensor]) -> Tensor:
    r"""$d_a = \operatorname{tr}(G E_a)$ for $G = U \operatorname{diag}(g) U^\top$ without the pairs whose
    $g_i$ equals the tail's $c = g_D$ (the zero eigenvalues' and, under truncation, those past t: `vendi_gradient`
    gives them one value):

    $$G = \sum_{i:\, g_i \ne c} (g_i - c)\, u_i u_i^\top + c I, \qquad
    d_a = \operatorname{tr}(G_{\ne c} E_a) + c \operatorname{tr}(E_a),$$

    exact for orthonormal $U$; $G_{\ne c}$ is formed in ``vectors``' dtype (float32 when the ``eigh`` was), in
    $O(D^2 k)$ for the $k$ pairs kept.

    Args:
        gradient: $g$ (D,), float64, in the order of ``vectors``' columns (descending eigenvalues).
        vectors: $U$ (D, D), orthonormal columns; or only the leading k (D, k) when $g_i = c$ past them (the
            t-truncated scores: k = t; order inf: k = 1).
        draws: the $E_a$, each (D, D) float64.

    Returns:
        (A,) float64.

    Raises:
        ValueError: ``g`` varies past the columns given.
    """
    rest = gradient[-1]
    kept = (gradient != rest).nonzero().flatten()
    if kept.numel() and int(kept[-1]) >= vectors.shape[1]:
        raise ValueError(f"gradient_replicates: the gradient varies up to pair {int(kept[-1]) + 1}, past the "
                         f"{vectors.shape[1]} eigenvectors given; pass them all.")
    basis = vectors[:, kept]
    moved = (basis * (gradient[kept] - rest).to(basis.dtype)) @ basis.T
    moved = moved.double()
    return torch.stack([(moved * draw).sum() + rest * draw.trace() for draw in draws])
