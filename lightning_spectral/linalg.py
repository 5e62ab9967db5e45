"""Covariance accumulation and spectral helpers shared by every metric and callback.

The accumulator adds ``Phi^T Phi`` of a batch to a float64 total chunk by chunk, computing only the
upper triangle of tiles (the matrix is symmetric) and mirroring it, so a (2r x 2r) covariance costs
about 5/8 of a full Gram product and no per-sample outer product is ever formed.
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Union

import torch
from torch import Tensor

from lightning_spectral._checks import check_positive_int

#: Rows per chunk: bounds the transient feature matrix at ``chunk_size x width`` floats.
DEFAULT_CHUNK_SIZE = 4096
#: Column tile of the symmetric Gram product; tiles below the diagonal are mirrored, not computed.
DEFAULT_TILE = 1024

Alpha = Union[float, int, str]


def add_gram_(total: Tensor, phi: Tensor, tile: int = DEFAULT_TILE) -> Tensor:
    """In place ``total += phi^T phi`` for ``phi`` of shape (N, D), ``total`` of shape (D, D).

    The product runs in ``phi``'s dtype (one BLAS call per row strip of tiles on or above the diagonal)
    and is added to ``total`` in ``total``'s dtype (float64 for every state in this library). The total stays
    exactly symmetric (tiles below the diagonal are mirrors, diagonal tiles are symmetrised), so storing its
    upper triangle loses nothing. Returns ``total``.
    """
    width = phi.shape[1]
    if total.shape != (width, width):
        raise ValueError(f"add_gram_: total has shape {tuple(total.shape)}, expected ({width}, {width}).")
    for start in range(0, width, tile):
        stop = min(start + tile, width)
        strip = phi[:, start:stop].T @ phi[:, start:]  # (tile, width - start): diagonal tile and right of it
        diagonal = strip[:, : stop - start]
        diagonal.copy_(symmetrize(diagonal))  # a BLAS product is not exactly symmetric: the total must be
        total[start:stop, start:] += strip
        total[stop:, start:stop] += strip[:, stop - start :].T  # mirror of the off-diagonal part
    return total


def add_covariance_(
    total: Tensor,
    x: Tensor,
    feature_map: Callable[[Tensor], Tensor],
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    feature_sum: Optional[Tensor] = None,
) -> Tensor:
    """In place ``total += sum_i phi(x_i) phi(x_i)^T`` (and ``feature_sum += sum_i phi(x_i)`` if given).

    Streams ``x`` in chunks of ``chunk_size`` rows, so memory is ``O(chunk_size * D + D^2)`` whatever N is.
    Chunk products run in the compute dtype of ``x`` (float32, or float64 for float64 input) and are summed
    into the float64 ``total``: with float64 input any chunking or sample order gives the same matrix to
    ~1e-12 relative; with float32 input to the float32 rounding of one chunk (~1e-6 relative).

    Args:
        total: (D, D) float64 running sum, updated in place.
        x: samples (N, d).
        feature_map: maps (n, d) to (n, D), e.g. :class:`~lightning_spectral.features.GaussianRFF`.
        chunk_size: rows per chunk.
        feature_sum: optional (D,) float64 running sum of the features, updated in place.

    Returns:
        ``total``.

    Example:
        >>> import torch
        >>> from lightning_spectral.features import GaussianRFF
        >>> rff = GaussianRFF(2, n_frequencies=8, sigma=1.0)
        >>> total = torch.zeros(16, 16, dtype=torch.float64)
        >>> _ = add_covariance_(total, torch.randn(100, 2), rff, chunk_size=32)
        >>> round(float(total.trace()), 4)  # unit-norm rows: the trace counts the samples
        100.0
    """
    check_positive_int(chunk_size, "chunk_size")
    for start in range(0, x.shape[0], chunk_size):
        phi = feature_map(x[start : start + chunk_size])
        add_gram_(total, phi)
        if feature_sum is not None:
            feature_sum += phi.sum(dim=0)
    return total


def covariance(x: Tensor, feature_map: Callable[[Tensor], Tensor], chunk_size: int = DEFAULT_CHUNK_SIZE) -> Tensor:
    """One-shot normalised covariance ``(1/N) sum_i phi(x_i) phi(x_i)^T`` (D, D), float64, via :func:`add_covariance_`.

    Raises:
        ValueError: ``x`` is empty.
    """
    if x.shape[0] == 0:
        raise ValueError("covariance: no samples.")
    width = feature_map(x[:1]).shape[1]
    total = torch.zeros(width, width, dtype=torch.float64, device=x.device)
    return add_covariance_(total, x, feature_map, chunk_size) / x.shape[0]


def symmetrize(matrix: Tensor) -> Tensor:
    """``(A + A^T) / 2`` over the last two dimensions: removes round-off asymmetry before a symmetric solver."""
    return (matrix + matrix.transpose(-1, -2)) / 2


def symmetric_eigh(matrix: Tensor) -> tuple[Tensor, Tensor]:
    """Eigenvalues (descending) and eigenvectors (columns) of a symmetric matrix, in float64.

    The input is re-symmetrised as ``(A + A^T) / 2`` first to remove round-off asymmetry.
    """
    values, vectors = torch.linalg.eigh(symmetrize(matrix.double()))
    return values.flip(0), vectors.flip(1)


def psd_eigenvalues(matrix: Tensor, rtol: float = 1e-5, drop_round_off: bool = True) -> Tensor:
    """Eigenvalues (descending, float64) of a positive semi-definite matrix, round-off negatives set to 0.

    Tolerance: eigenvalues in ``[-rtol * lambda_max, 0)`` are round-off and are set to 0 (a covariance
    summed from float32 chunk products at 2r = 4096 shows negatives down to ~1e-6 * lambda_max; float64
    ones ~1e-15). A more negative eigenvalue means the matrix is not PSD (a bug or corrupted state) and
    raises rather than being hidden.

    Round-off positives: the round-off of a symmetric matrix moves its zero eigenvalues up and down alike (the
    largest positive one measured within 0.87x to 1.17x of the most negative one, float32 and float64 RFF
    covariances), so with ``drop_round_off`` eigenvalues at most twice the magnitude of the most negative one are
    set to 0 too (the largest is always kept). Renyi entropies of order < 1 weigh them up (``p^alpha``: Vendi-0.5
    of 10,000 identical float32 vectors was 1.5 with them, and Vendi-1 1.0006); a matrix without negative
    eigenvalues loses nothing.

    Raises:
        ValueError: non-finite entries, or an eigenvalue below ``-rtol * lambda_max``.

    Examples:
        >>> import torch
        >>> psd_eigenvalues(torch.diag(torch.tensor([1.0, 2e-9, 0.5, -1e-9], dtype=torch.float64))).tolist()
        [1.0, 0.5, 0.0, 0.0]
    """
    if not bool(torch.isfinite(matrix).all()):
        raise ValueError("psd_eigenvalues: the matrix has NaN or Inf entries.")
    values = torch.linalg.eigvalsh(symmetrize(matrix.double())).flip(0)
    scale = max(float(values[0]), 0.0) if values.numel() else 0.0
    lowest = float(values[-1]) if values.numel() else 0.0
    if lowest < -rtol * scale - 1e-300:
        raise ValueError(
            f"psd_eigenvalues: eigenvalue {lowest:.3e} is below the round-off tolerance "
            f"-{rtol:g} * lambda_max = {-rtol * scale:.3e}: the matrix is not positive semi-definite."
        )
    values = values.clamp_min(0.0)
    if drop_round_off and lowest < 0:
        values[1:] = torch.where(values[1:] > -2 * lowest, values[1:], 0.0)
    return values


def parse_alpha(alpha: Alpha) -> float:
    """An order ``alpha`` as a float in (0, inf] (``"inf"`` allowed). Raises ``ValueError`` otherwise."""
    if isinstance(alpha, str):
        if alpha.lower() not in ("inf", "infinity"):
            raise ValueError(f"`alpha` must be a number in (0, inf] or 'inf', got {alpha!r}.")
        return math.inf
    alpha = float(alpha)
    if not alpha > 0 or math.isnan(alpha):
        raise ValueError(f"`alpha` must be in (0, inf], got {alpha}.")
    return alpha


def renyi_entropy(eigenvalues: Tensor, alpha: Alpha = 1.0) -> Tensor:
    """Order-``alpha`` Renyi entropy of a spectrum, ``H_a = log(sum_i p_i^a) / (1 - a)``, ``p = lambda / sum lambda``.

    Special orders: ``alpha = 1`` is the Shannon limit ``-sum p log p``; ``alpha = inf`` is ``-log p_max``.
    Zero eigenvalues contribute nothing (``0^a = 0``, ``0 log 0 = 0``), so the entropy of a spectrum padded
    with zeros is unchanged. Orders ``alpha < 1`` weigh tiny eigenvalues up (``p^alpha``), so round-off
    eigenvalues (~1e-16 in float64) shift them slightly; orders >= 1, the ones the papers report, are robust.
    The eigenvalues must be >= 0 (use :func:`psd_eigenvalues`). For a normalised kernel they already sum to 1
    (trace of the covariance); normalising makes the helper safe for any PSD input.

    Args:
        eigenvalues: 1-D tensor of non-negative eigenvalues.
        alpha: order in (0, inf]; a number, ``math.inf`` or ``"inf"``.

    Returns:
        Scalar float64 tensor.

    Raises:
        ValueError: negative eigenvalues, an empty or all-zero spectrum, or ``alpha`` outside (0, inf].

    Example:
        >>> import torch
        >>> float(renyi_entropy(torch.tensor([0.5, 0.5, 0.0]), alpha=2)) == math.log(2)
        True
    """
    alpha = parse_alpha(alpha)
    values = eigenvalues.double().flatten()
    if values.numel() == 0 or not bool(torch.isfinite(values).all()) or bool((values < 0).any()):
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
    """Vendi score of order ``alpha``: ``exp(H_alpha)``, the effective number of modes (1 <= score <= rank).

    ``alpha = 2`` is the RKE score ``1 / sum p_i^2``; ``alpha = inf`` is ``1 / p_max``.

    Example:
        >>> import torch
        >>> round(float(vendi_score(torch.full((4,), 0.25), alpha=1)), 6)
        4.0
    """
    return torch.exp(renyi_entropy(eigenvalues, alpha))


def rke_from_covariance(covariance: Tensor) -> Tensor:
    """RKE (Vendi of order 2) without an eigendecomposition: ``trace(C)^2 / ||C||_F^2`` (= ``1/||C||_F^2`` at trace 1).

    Example:
        >>> import torch
        >>> float(rke_from_covariance(torch.eye(3) / 3))
        3.0
    """
    covariance = covariance.double()
    frobenius_sq = covariance.square().sum()
    if float(frobenius_sq) <= 0 or not bool(torch.isfinite(frobenius_sq)):
        raise ValueError("rke_from_covariance: the covariance is zero or non-finite (no samples accumulated?).")
    return covariance.trace().square() / frobenius_sq


def differential_eigh(joint_covariance: Tensor, width_a: int, rtol: float = 1e-12) -> tuple[Tensor, Tensor]:
    r"""Eigen-pairs of the SPEC differential covariance ``Gamma = D C`` through a symmetric similar matrix.

    ``C = (1/n) A^T A`` is the joint covariance of ``A = [Phi_a, Phi_b]`` (``width_a`` columns of the first
    embedding's features, then the second's) and ``D = diag(I, -I)``. ``Gamma`` is not symmetric, but with
    ``C = B B^T`` (``B = U_k sqrt(S_k)``, the eigen-pairs of ``C`` above ``rtol * s_max``) its non-zero
    eigenvalues are those of the symmetric ``Theta = B^T D B`` (k x k), and ``Theta w = lambda w`` gives
    ``Gamma v = lambda v`` with ``v = D B w``. No jitter and no general ``eig`` are needed.

    Args:
        joint_covariance: ``C`` (D_a + D_b, D_a + D_b), symmetric PSD.
        width_a: ``D_a``, the number of leading columns that belong to the first embedding.
        rtol: eigenvalues of ``C`` below ``rtol * s_max`` are treated as its null space.

    Returns:
        ``(eigenvalues (k,), vectors (D_a + D_b, k))``, float64, eigenvalues descending (both signs), ``k`` =
        the numerical rank of ``C``; the columns ``v`` are eigenvectors of ``Gamma`` scaled so that
        ``v^T D v = lambda`` and ``v^T C v = lambda^2`` (so ``u = A v``, the eigenvector of the n x n
        ``Lambda = A D A^T / n``, has ``||u||^2 = n lambda^2``).

    Example:
        >>> import torch
        >>> phi_a = torch.nn.functional.normalize(torch.randn(50, 3, dtype=torch.float64), dim=1)
        >>> joint = torch.cat([phi_a, phi_a], 1)
        >>> values, _ = differential_eigh(joint.T @ joint / 50, width_a=3)
        >>> bool(values.abs().max() < 1e-10)   # identical embeddings: no difference
        True
    """
    values, vectors = symmetric_eigh(joint_covariance)
    keep = values > rtol * max(float(values[0]), 0.0)
    if not bool(keep.any()):
        raise ValueError("differential_eigh: the joint covariance is zero (no samples accumulated?).")
    basis = vectors[:, keep] * values[keep].sqrt()  # B, with C = B B^T
    signs = torch.ones(basis.shape[0], dtype=basis.dtype, device=basis.device)
    signs[width_a:] = -1.0
    theta = basis.T @ (signs[:, None] * basis)
    eigenvalues, w = symmetric_eigh(theta)
    return eigenvalues, signs[:, None] * (basis @ w)
