"""FKEA: Vendi / RKE diversity through random Fourier features (Ospanov et al., NeurIPS 2024), and the exact oracle.

``VENDI_a = exp(H_a(C))`` with ``C = (1/n) sum_i phi(x_i) phi(x_i)^T`` the (2r x 2r) RFF covariance, whose
non-zero eigenvalues approximate those of the normalised kernel matrix ``K/n`` (FKEA eqs. 3-4, Algorithm 1).
``alpha = 2`` is RKE; ``alpha = 1`` the Shannon limit; ``alpha = inf`` is ``1 / lambda_max``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Union

import torch
from torch import Tensor

from lightning_spectral._checks import check_features, check_order
from lightning_spectral.features import GaussianRFF, gaussian_kernel
from lightning_spectral.linalg import DEFAULT_CHUNK_SIZE, Alpha, covariance, psd_eigenvalues, vendi_score

Orders = Union[Alpha, Sequence[Alpha]]
VendiResult = Union[Tensor, dict]


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
    """FKEA Vendi score(s) of embeddings (N, d): ``exp(H_alpha)`` of the RFF covariance spectrum.

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
    """Exact Vendi score(s) from the n x n Gaussian kernel matrix: ``exp(H_alpha(K/n))``. O(n^2 d + n^3).

    The oracle FKEA converges to as r grows. For RKE alone, ``1 / mean(K^2)`` needs no eigendecomposition.

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
