r"""FKEA: Vendi / RKE diversity through random Fourier features (Ospanov et al., NeurIPS 2024), and the exact oracle.

$$\mathrm{VENDI}_\alpha = \exp\big(H_\alpha(C)\big), \qquad C = \frac{1}{n} \sum_i \phi(x_i)\, \phi(x_i)^\top,$$

$C$ the (2r x 2r) RFF covariance, whose non-zero eigenvalues approximate those of the normalised kernel matrix
$K/n$ (FKEA eqs. 3-4, Algorithm 1). $\alpha = 2$ is RKE; $\alpha = 1$ the Shannon limit; $\alpha = \infty$ is
$1 / \lambda_{\max}$.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Union

import torch
from torch import Tensor

from lightning_spectral._checks import all_finite, check_dense, check_features, check_order
from lightning_spectral.algebra.eigen import psd_eigenvalues
from lightning_spectral.algebra.gram import DEFAULT_CHUNK_SIZE, covariance
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


def rke_from_covariance(covariance: Tensor) -> Tensor:
    r"""RKE (Vendi of order 2) without an eigendecomposition: $\operatorname{tr}(C)^2 / \|C\|_F^2$
    ($= 1 / \|C\|_F^2$ at trace 1).

    Examples:
        >>> import torch
        >>> float(rke_from_covariance(torch.eye(3) / 3))
        3.0
    """
    covariance = covariance.double()
    frobenius_sq = covariance.square().sum()
    if float(frobenius_sq) <= 0 or not bool(torch.isfinite(frobenius_sq)):
        raise ValueError("rke_from_covariance: the covariance is zero or non-finite (no samples accumulated?).")
    return covariance.trace().square() / frobenius_sq



def check_orders(alpha: Orders) -> tuple[list[Alpha], bool]:
    """The orders as a list, and whether a single order was given. Raises ``ValueError`` on bad orders (bools too)."""
    single = not isinstance(alpha, Sequence) or isinstance(alpha, (str, bytes))  # a tensor is one (bad) order
    orders = [alpha] if single else list(alpha)  # type: ignore[arg-type]
    if not orders:
        raise ValueError("`alpha` must be an order in (0, inf] or a non-empty sequence of orders.")
    for order in orders:
        check_order(order, "alpha")
    return orders, single


def vendi_from_spectrum(eigenvalues: Tensor, alpha: Orders) -> VendiResult:
    """Vendi score(s) of a spectrum: a scalar tensor for one order, a dict ``{order: score}`` for several."""
    orders, single = check_orders(alpha)
    scores = {order: vendi_score(eigenvalues, order) for order in orders}
    return scores[orders[0]] if single else scores


def fkea_vendi(
    features: Tensor,
    sigma: float,
    n_frequencies: int = 2048,
    alpha: Orders = 1.0,
    seed: int = 0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> VendiResult:
    r"""FKEA Vendi score(s) of embeddings (N, d): $\exp(H_\alpha)$ of the RFF covariance spectrum.

    Args:
        features: (N, d) embeddings, N >= 1.
        sigma: Gaussian bandwidth.
        n_frequencies: r (covariance 2r x 2r). FKEA underestimates at small r (Vendi-1 converges slowest).
        alpha: an order in (0, inf] or a sequence of orders (2 = RKE).
        seed: frequency seed.

    Returns:
        A scalar float64 tensor for one order, a dict keyed by order for several.

    Examples:
        >>> import torch
        >>> x = torch.cat([torch.zeros(50, 2), torch.full((50, 2), 100.0)])  # two far-apart points
        >>> round(float(fkea_vendi(x, sigma=1.0, n_frequencies=256, alpha=2)), 1)
        2.0
    """
    check_orders(alpha)
    features = check_features(features, "features", owner="fkea_vendi")
    if features.shape[0] == 0:
        raise ValueError("fkea_vendi: `features` is empty; at least one sample is needed.")
    rff = GaussianRFF(features.shape[1], n_frequencies, sigma, seed).to(features.device)
    return vendi_from_spectrum(psd_eigenvalues(covariance(features, rff, chunk_size)), alpha)


def vendi_exact(features: Tensor, sigma: float, alpha: Orders = 1.0) -> VendiResult:
    r"""Exact Vendi score(s) from the n x n Gaussian kernel matrix: $\exp\big(H_\alpha(K/n)\big)$, in
    $O(n^2 d + n^3)$.

    The oracle FKEA converges to as r grows. For RKE alone, $1 / \operatorname{mean}(K^2)$ needs no
    eigendecomposition.

    Examples:
        >>> import torch
        >>> round(float(vendi_exact(torch.eye(3) * 100, sigma=1.0)), 6)  # three far-apart points
        3.0
    """
    check_orders(alpha)
    features = check_features(features, "features", owner="vendi_exact")
    if features.shape[0] == 0:
        raise ValueError("vendi_exact: `features` is empty; at least one sample is needed.")
    kernel = gaussian_kernel(features, sigma=sigma)
    return vendi_from_spectrum(psd_eigenvalues(kernel / kernel.shape[0]), alpha)
