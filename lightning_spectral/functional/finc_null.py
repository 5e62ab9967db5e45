"""FINC's null model: draws of the sampling noise of the differential covariance from contrasts of content groups.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import torch
from torch import Tensor

from lightning_spectral.algebra.eigen import eigen_dtype, extreme_eigenvalues
from lightning_spectral.algebra.gram import DEFAULT_CHUNK_SIZE, add_covariance_
from lightning_spectral.functional.content_groups import content_groups
from lightning_spectral.functional.student_t import student_t_isf, student_t_sf


class Moment(NamedTuple):
    """An uncentred second moment kept as the sums it was accumulated in: ``C = (Q_1 + ... + Q_k) / count``.

    The matrices FINC decomposes are weighted sums of such moments, formed in one pass
    ([`weighted_sum`][lightning_spectral.algebra.weighted_sum]) instead of one full-size temporary per operation.

    Attributes:
        sums: (D, D) outer-product sums ``Q_j = sum_i phi(x_i) phi(x_i)^T``, symmetric (as
            [`add_gram_`][lightning_spectral.algebra.add_gram_] leaves them); float64 in this library.
        count: the number of samples behind them.
    """

    sums: tuple[Tensor, ...]
    count: float

    @classmethod
    def of(cls, x: Tensor, feature_map: Callable[[Tensor], Tensor], chunk_size: int = DEFAULT_CHUNK_SIZE) -> Moment:
        """The moment of the samples ``x`` (N, d) under ``feature_map``, accumulated chunk by chunk."""
        width = feature_map(x[:1]).shape[1]
        total = torch.zeros(width, width, dtype=torch.float64, device=x.device)
        return cls((add_covariance_(total, x, feature_map, chunk_size),), float(x.shape[0]))

    def terms(self, scale: float) -> list[tuple[float, Tensor]]:
        """``scale * C`` as ``(weight, matrix)`` terms of [`weighted_sum`][lightning_spectral.algebra.weighted_sum]."""
        return [(scale / self.count, total) for total in self.sums]


class Groups(NamedTuple):
    """One side's samples in ``G`` content groups (`content_groups`): group j's sum ``Q_j`` and size ``n_j``.

    Attributes:
        sums: G (D, D) outer-product sums.
        counts: G group sizes.
    """

    sums: tuple[Tensor, ...]
    counts: tuple[float, ...]

    @classmethod
    def of(
        cls, x: Tensor, feature_map: Callable[[Tensor], Tensor], groups: int, chunk_size: int = DEFAULT_CHUNK_SIZE
    ) -> Groups:
        """The groups of the samples ``x`` (N, d) under ``feature_map``."""
        index = content_groups(x, groups)
        width = feature_map(x[:1]).shape[1]
        sums = []
        for j in range(groups):
            total = torch.zeros(width, width, dtype=torch.float64, device=x.device)
            part = x[index == j]
            sums.append(add_covariance_(total, part, feature_map, chunk_size) if len(part) else total)
        return cls(tuple(sums), tuple(float((index == j).sum()) for j in range(groups)))

    @property
    def count(self) -> float:
        """The side's sample count."""
        return float(sum(self.counts))

    def moment(self) -> Moment:
        """The side's second moment ``C = sum_j Q_j / n``."""
        return Moment(self.sums, self.count)

    def contrast_terms(self, contrast: Tensor, scale: float) -> list[tuple[float, Tensor]]:
        """``scale * E(h)`` (module doc) for the +-1 contrast ``h`` (G,), as ``(weight, matrix)`` terms."""
        counts = torch.tensor(self.counts, dtype=torch.float64)
        n = float(counts.sum())
        mean = float((contrast * counts).sum()) / n
        norm = n * math.sqrt(max(1.0 - mean**2, 1e-12))
        pairs = zip(contrast.tolist(), self.sums, strict=True)
        return [(scale * (float(h) - mean) / norm, total) for h, total in pairs]


def hadamard_contrasts(groups: int) -> Tensor:
    """(G - 1, G) float64: the rows of the Sylvester Hadamard matrix other than the all-ones one (entries +-1,
    mutually orthogonal, each summing to 0)."""
    matrix = torch.ones(1, 1, dtype=torch.float64)
    while matrix.shape[0] < groups:
        matrix = torch.cat([torch.cat([matrix, matrix], 1), torch.cat([matrix, -matrix], 1)], 0)
    return matrix[1:]


class NullModel(NamedTuple):
    """The estimated law of ``lambda_max`` of the sampling noise (module doc): its draws, their mean and spread.

    Attributes:
        draws: (K,) float64, the ``lambda_max`` draws.
        dof: ``nu``, the independent contrast pairs behind them.
    """

    draws: Tensor
    dof: int

    @property
    def mean(self) -> float:
        return float(self.draws.mean())

    @property
    def scale(self) -> float:
        """``s sqrt(1 + 1/nu)``: the spread of a new draw about the estimated mean (prediction interval)."""
        spread = float(self.draws.std()) if self.draws.numel() > 1 else 0.0
        return max(spread, 1e-300) * math.sqrt(1 + 1 / self.dof)

    def p_values(self, values: Tensor) -> Tensor:
        """``P(T_nu >= (lambda - m) / scale)`` for each eigenvalue, float64, same shape."""
        return student_t_sf((values.double() - self.mean) / self.scale, self.dof)

    def threshold(self, significance: float) -> float:
        """The eigenvalue whose p-value is ``significance``."""
        return self.mean + self.scale * student_t_isf(significance, self.dof)


def null_weights(x: Groups, y: Groups, rho: float) -> Tensor:
    """(K, G_x + G_y) float64: the weights on ``x``'s then ``y``'s group sums of each matrix of `null_model`.

    The ``a``-th contrast of one side is paired with the ``a``-th of the other (``G_x = G_y``). At ``rho = 1``:
    ``E_x(h_a) - s E_y(h_a)``, ``s = +-1``; at ``rho != 1``: ``(1 - rho) C_pool + s E_x(h_a) - t rho E_y(h_a)``,
    ``s, t = +-1``.
    """

    def weights(side: Groups, contrast: Tensor, scale: float) -> list[float]:
        return [weight for weight, _ in side.contrast_terms(contrast, scale)]

    pooled = [(1.0 - rho) / (x.count + y.count)] * (len(x.sums) + len(y.sums))
    rows = []
    for a, b in zip(hadamard_contrasts(len(x.sums)), hadamard_contrasts(len(y.sums)), strict=True):
        for sign in (1.0, -1.0):
            if rho == 1.0:
                rows.append(weights(x, a, 1.0) + weights(y, b, -sign))
                continue
            for flip in (1.0, -1.0):
                row = weights(x, a, sign) + weights(y, b, -flip * rho)
                rows.append([w + p for w, p in zip(row, pooled, strict=True)])
    return torch.tensor(rows, dtype=torch.float64)


def combinations(sums: list[Tensor], weights: Tensor, dtype: torch.dtype, rows: int = 64) -> Tensor:
    """(K, D, D): ``sum_j weights[k, j] sums[j]`` for every row of ``weights`` (K, J), in one pass over the sums
    (each row block of every input read once into K float64 accumulators by a rank-1 ``addmm``, cast once to
    ``dtype``)."""
    first = sums[0]
    size, width = first.shape
    out = torch.empty((weights.shape[0], size, width), dtype=dtype, device=first.device)
    weights = weights.to(device=first.device, dtype=first.dtype)
    buffer = torch.empty((weights.shape[0], rows * width), dtype=first.dtype, device=first.device)
    for start in range(0, size, rows):
        end = min(start + rows, size)
        acc = buffer[:, : (end - start) * width]
        torch.mm(weights[:, :1], sums[0][start:end].reshape(1, -1), out=acc)
        for j in range(1, len(sums)):
            acc.addmm_(weights[:, j : j + 1], sums[j][start:end].reshape(1, -1))
        out[:, start:end] = acc.view(-1, end - start, width)
    return out


#: Matrices of the null formed at once (their memory: this many (2r)^2 matrices, float32 from FLOAT32_MIN_SIZE).
NULL_BATCH = 6


def null_model(x: Groups, y: Groups, rho: float) -> NullModel:
    """Draws of ``lambda_max`` of ``C_x - rho C_y`` on one distribution, from the groups' contrasts (module doc).

    Contrast ``a`` of one side is paired with contrast ``a`` of the other, so draws of different ``a`` are
    independent. At ``rho = 1`` each of the ``2 (G - 1)`` matrices ``E_x(h_a) - s E_y(h_a)`` (``s = +-1``) gives two
    draws, its largest eigenvalue and minus its smallest (the draw of the negated contrasts). At ``rho != 1`` one
    distribution gives ``E[C_x - rho C_y] = (1 - rho) C``: each draw is the largest eigenvalue of
    ``(1 - rho) C_pool + s E_x(h_a) - t rho E_y(h_a)`` (``C_pool`` both sides' second moment, ``s, t = +-1``).
    Either way ``4 (G - 1)`` draws. The matrices are formed `NULL_BATCH` at a time in one pass over the group
    sums (float32 from [`FLOAT32_MIN_SIZE`][lightning_spectral.algebra.FLOAT32_MIN_SIZE] rows, as the score's
    ``eigvalsh``);
    their ends by Lanczos ([`extreme_eigenvalues`][lightning_spectral.algebra.extreme_eigenvalues], residual ``1e-10
    ||A||`` in
    float64, ``1e-5 ||A||`` in float32; dense fallback), or a dense ``eigvalsh`` at ``rho != 1`` when a side has
    more samples than features or the matrix is small (there the top is a tight cluster just above 0 where
    Lanczos exhausts its budget; docs/benchmarks.md, issue 14).

    Raises:
        ValueError: the two sides have different numbers of groups.
    """
    if len(x.sums) != len(y.sums):
        raise ValueError(f"null_model: both sides need the same number of groups, got {len(x.sums)} and {len(y.sums)}.")
    size = x.sums[0].shape[0]
    dense = rho != 1.0 and (size <= 1024 or min(x.count, y.count) >= size)
    dtype = eigen_dtype("auto", size)
    rtol = 1e-5 if dtype == torch.float32 else 1e-10
    weights = null_weights(x, y, rho)
    sums = list(x.sums + y.sums)
    draws = []
    for start in range(0, weights.shape[0], NULL_BATCH):
        for matrix in combinations(sums, weights[start : start + NULL_BATCH], dtype):
            if dense:
                draws.append(float(torch.linalg.eigvalsh(matrix)[-1]))
            elif rho == 1.0:
                lowest, highest = extreme_eigenvalues(matrix, rtol=rtol, symmetric=True)
                draws += [float(highest), -float(lowest)]
            else:
                draws.append(float(extreme_eigenvalues(matrix, rtol=rtol, which="largest", symmetric=True)[1]))
    return NullModel(torch.tensor(draws, dtype=torch.float64), len(x.sums) - 1)
