"""Chunked Gram accumulation in float64: ``Q += phi^T phi`` in tiles, the sums of one chunk of features (count,
feature sum, outer products, multiplier-weighted sums; per lane), covariances of streamed rows, weighted sums.
"""

from __future__ import annotations

from typing import Callable, Iterator, Optional, Sequence

import torch
from torch import Tensor

from lightning_spectral._checks import check_positive_int
from lightning_spectral.algebra.precision import full_precision

#: Rows per chunk: bounds the transient feature matrix at ``chunk_size x width`` floats.
DEFAULT_CHUNK_SIZE = 4096


#: Column tile of the symmetric Gram product; tiles below the diagonal are mirrored, not computed.
DEFAULT_TILE = 1024


def add_gram_(total: Tensor, phi: Tensor, tile: int = DEFAULT_TILE, weights: Optional[Tensor] = None) -> Tensor:
    r"""In place $\text{total} \mathrel{+}= \Phi^\top \Phi$ for $\Phi$ (``phi``) of shape (N, D), ``total`` of shape
    (D, D); with ``weights`` (N,) $\Phi^\top \operatorname{diag}(w) \Phi$ (the multiplier draws' sums, the same
    half of the tiles).

    The product runs in ``phi``'s dtype at its full precision (one BLAS call per row strip of tiles on or above the
    diagonal; [`full_precision`][lightning_spectral.algebra.full_precision]: no TF32 or bfloat16 whatever
    the user set)
    and is added to ``total`` in ``total``'s dtype (float64 for every state in this library). The total stays
    exactly symmetric (tiles below the diagonal are mirrors, diagonal tiles are symmetrised), so storing its
    upper triangle loses nothing. Returns ``total``.
    """
    width = phi.shape[1]
    if total.shape != (width, width):
        raise ValueError(f"add_gram_: total has shape {tuple(total.shape)}, expected ({width}, {width}).")
    left = phi if weights is None else phi * weights.reshape(-1, 1).to(phi.dtype)
    with full_precision():  # IEEE float32 products whatever `set_float32_matmul_precision` says
        for start in range(0, width, tile):
            stop = min(start + tile, width)
            strip = left[:, start:stop].T @ phi[:, start:]  # (tile, width - start): diagonal tile and right of it
            diagonal = strip[:, : stop - start]
            diagonal.copy_(symmetrize(diagonal))  # a BLAS product is not exactly symmetric: the total must be
            total[start:stop, start:] += strip
            total[stop:, start:stop] += strip[:, stop - start :].T  # mirror of the off-diagonal part
    return total


def add_feature_sums_(
    phi: Tensor,
    *,
    count: Optional[Tensor] = None,
    feature_sum: Optional[Tensor] = None,
    outer: Optional[Tensor] = None,
    weights: Optional[Tensor] = None,
    weight_sums: Optional[Tensor] = None,
    weighted: Optional[Tensor] = None,
    weighted_features: Optional[Tensor] = None,
    lanes: Optional[Tensor] = None,
    tile: int = DEFAULT_TILE,
) -> None:
    r"""Add one chunk of features $\Phi$ (``phi``, rows $\phi_i$) to the float64 sums given, in place:

    $n \mathrel{+}= N$, $s \mathrel{+}= \sum_i \phi_i$, $Q \mathrel{+}= \sum_i \phi_i \phi_i^\top$ and, with
    multipliers $W$ (``weights``), $w_a \mathrel{+}= \sum_i W_{ia}$, $S_a \mathrel{+}= \sum_i W_{ia}\, \phi_i
    \phi_i^\top$, $F_a \mathrel{+}= \sum_i W_{ia}\, \phi_i$ ($W^\top \Phi$). A sum left ``None`` is not kept.

    Lanes (a leading dimension L on every sum but $n$): ``phi`` of shape (B, N, D) adds ``phi[b]`` to lane ``b``
    (one lane per bandwidth, each sees every row); ``lanes`` (N,) sends row ``i`` of ``phi`` (N, D) to lane
    ``lanes[i]`` only (one lane per label). $s$ is summed in ``phi``'s dtype, $Q$ and $S_a$ by
    [`add_gram_`][lightning_spectral.algebra.add_gram_] (exactly symmetric), $F_a$ in the sums' dtype.

    Args:
        phi: features (N, D), or (B, N, D) with a lane per bandwidth.
        count: $n$ (), the rows of every lane together.
        feature_sum: $s$ (L?, D).
        outer: $Q$ (L?, D, D).
        weights: $W$ (N, A), the multipliers of the chunk's rows; without them $w$, $S$, $F$ are left alone.
        weight_sums: $w$ (L?, A).
        weighted: $S$ (L?, A, D, D).
        weighted_features: $F$ (L?, A, D).
        lanes: (N,) integer lane of each row, with ``phi`` (N, D).
        tile: the column tile of [`add_gram_`][lightning_spectral.algebra.add_gram_].

    Examples:
        >>> import torch
        >>> phi = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
        >>> f64 = {"dtype": torch.float64}
        >>> n, s, q = torch.zeros((), **f64), torch.zeros(2, **f64), torch.zeros(2, 2, **f64)
        >>> add_feature_sums_(phi, count=n, feature_sum=s, outer=q)
        >>> int(n), s.tolist(), q.tolist()
        (3, [2.0, 3.0], [[2.0, 1.0], [1.0, 5.0]])
        >>> w, f = torch.zeros(1, **f64), torch.zeros(1, 2, **f64)
        >>> add_feature_sums_(phi, weights=torch.tensor([[1.0], [-1.0], [2.0]]), weight_sums=w, weighted_features=f)
        >>> w.tolist(), f.tolist()
        ([2.0], [[3.0, 0.0]])
        >>> by_label = torch.zeros(2, 2, **f64)  # lane 0: row 0; lane 1: rows 1 and 2
        >>> add_feature_sums_(phi, feature_sum=by_label, lanes=torch.tensor([0, 1, 1]))
        >>> by_label.tolist()
        [[1.0, 0.0], [1.0, 3.0]]
    """
    if count is not None:
        count += phi.shape[-2]
    if phi.dim() == 3 or lanes is not None:
        if phi.dim() == 3 and lanes is not None:
            raise ValueError("add_feature_sums_: `lanes` split the rows of features (N, D), not (B, N, D).")
        sums = (feature_sum, outer, weight_sums, weighted, weighted_features)
        for lane, features, lane_weights in _lane_rows(phi, weights, lanes):
            part = [None if total is None else total[lane] for total in sums]
            add_feature_sums_(
                features, feature_sum=part[0], outer=part[1], weights=lane_weights, weight_sums=part[2],
                weighted=part[3], weighted_features=part[4], tile=tile,
            )
        return
    if feature_sum is not None:
        feature_sum += phi.sum(0)
    if outer is not None:
        add_gram_(outer, phi, tile)
    if weights is None:
        return
    if weight_sums is not None:
        weight_sums += weights.sum(0)
    if weighted is not None:  # the tiles on and above the diagonal: half the products of (W phi)^T phi
        for a in range(weights.shape[1]):
            add_gram_(weighted[a], phi, tile, weights=weights[:, a])
    if weighted_features is not None:
        dtype = weighted_features.dtype
        with full_precision():
            weighted_features += weights.T.to(dtype) @ phi.to(dtype)


def _lane_rows(
    phi: Tensor, weights: Optional[Tensor], lanes: Optional[Tensor]
) -> Iterator[tuple[int, Tensor, Optional[Tensor]]]:
    """``(lane, its features (n, D), its weights)``: every row in each of B lanes, or the rows of each label."""
    if lanes is None:
        for lane, features in enumerate(phi):
            yield lane, features, weights
        return
    for lane in torch.unique(lanes).tolist():
        rows = lanes == lane
        yield lane, phi[rows], None if weights is None else weights[rows]


def add_covariance_(
    total: Tensor,
    x: Tensor,
    feature_map: Callable[[Tensor], Tensor],
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    feature_sum: Optional[Tensor] = None,
) -> Tensor:
    r"""In place $\text{total} \mathrel{+}= \sum_i \phi(x_i)\, \phi(x_i)^\top$ (and
    $\text{feature\_sum} \mathrel{+}= \sum_i \phi(x_i)$ if given).

    Streams ``x`` in chunks of ``chunk_size`` rows, so memory is ``O(chunk_size * D + D^2)`` whatever N is.
    Chunk products run in the compute dtype of ``x`` (float32, or float64 for float64 input) and are summed
    into the float64 ``total``: with float64 input any chunking or sample order gives the same matrix to
    ~1e-12 relative; with float32 input to the float32 rounding of one chunk (~1e-6 relative).

    Args:
        total: (D, D) float64 running sum, updated in place.
        x: samples (N, d).
        feature_map: maps (n, d) to (n, D), e.g. [`GaussianRFF`][lightning_spectral.kernels.GaussianRFF].
        chunk_size: rows per chunk.
        feature_sum: optional (D,) float64 running sum of the features, updated in place.

    Returns:
        ``total``.

    Examples:
        >>> import torch
        >>> from lightning_spectral.kernels import GaussianRFF
        >>> rff = GaussianRFF(2, n_frequencies=8, sigma=1.0)
        >>> total = torch.zeros(16, 16, dtype=torch.float64)
        >>> _ = add_covariance_(total, torch.randn(100, 2), rff, chunk_size=32)
        >>> round(float(total.trace()), 4)  # unit-norm rows: the trace counts the samples
        100.0
    """
    check_positive_int(chunk_size, "chunk_size")
    with full_precision():  # the map's products too
        for start in range(0, x.shape[0], chunk_size):
            add_feature_sums_(feature_map(x[start : start + chunk_size]), feature_sum=feature_sum, outer=total)
    return total


def covariance(x: Tensor, feature_map: Callable[[Tensor], Tensor], chunk_size: int = DEFAULT_CHUNK_SIZE) -> Tensor:
    r"""One-shot normalised covariance $\frac{1}{N} \sum_i \phi(x_i)\, \phi(x_i)^\top$ (D, D), float64, via
    [`add_covariance_`][lightning_spectral.algebra.add_covariance_].

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


def weighted_sum(terms: Sequence[tuple[float, Tensor]], dtype: Optional[torch.dtype] = None, rows: int = 64) -> Tensor:
    r"""$\sum_k w_k M_k$ over ``terms = [(w_k, M_k)]`` of equal shape (n, m), row block by row block, as ``dtype``.

    Each block is summed in the inputs' dtype and cast once, so every input is read once and the result written
    once, with no full-size temporary: at 4096 x 4096 float64 about 7x faster than the same expression in
    whole-tensor operations, whose every step allocates and touches a fresh 128 MiB matrix (measured,
    docs/benchmarks/training-loop-cost.md, "Training-loop cost"). Entry by entry the same arithmetic, so symmetric
    inputs give a symmetric result (bit for bit wherever the vectorised loop treats every entry alike; to round-off
    in any case).

    Examples:
        >>> import torch
        >>> a, b = torch.ones(3, 3, dtype=torch.float64), torch.eye(3, dtype=torch.float64)
        >>> weighted_sum([(0.5, a), (-2.0, b)], dtype=torch.float32).diagonal().tolist()
        [-1.5, -1.5, -1.5]
    """
    (weight, first), rest = terms[0], terms[1:]
    out = torch.empty(first.shape, dtype=dtype or first.dtype, device=first.device)
    for start in range(0, first.shape[0], rows):
        block = first[start : start + rows] * weight
        for weight_k, matrix in rest:
            block.add_(matrix[start : start + rows], alpha=weight_k)
        out[start : start + rows] = block
    return out
