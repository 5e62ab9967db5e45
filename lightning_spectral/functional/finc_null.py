"""FINC's null model: draws of the sampling noise of the differential covariance ``C_x - rho C_y`` from the multiplier
draws of one side ([`sampling_noise`][lightning_spectral.functional.sampling_noise]), scaled to both sides' noise.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from lightning_spectral.algebra.eigen import eigen_dtype, extreme_eigenvalues
from lightning_spectral.functional.sampling_noise import NoiseSums
from lightning_spectral.functional.student_t import student_t_isf, student_t_sf


class NullModel(NamedTuple):
    """The estimated law of ``lambda_max`` of the sampling noise (module doc): its draws, their mean and spread.

    Attributes:
        draws: (K,) float64, the ``lambda_max`` draws.
        dof: ``nu``, the independent multiplier draws behind them.
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

    def threshold_se(self, significance: float) -> float:
        """The standard error of `threshold` from its few draws: ``m + s sqrt(1 + 1/nu) q`` with ``Var m = s^2 / nu``
        and ``Var s = s^2 / (2 nu)`` (normal draws, ``nu`` independent), so
        ``sqrt(s^2 / nu + q^2 (1 + 1/nu) s^2 / (2 nu))``, ``q = t_{nu, 1 - significance}``."""
        spread = float(self.draws.std()) if self.draws.numel() > 1 else 0.0
        q = student_t_isf(significance, self.dof)
        return spread * math.sqrt(1.0 / self.dof + q * q * (1.0 + 1.0 / self.dof) / (2.0 * self.dof))


def noise_scale(noise: NoiseSums, x: NoiseSums, y: NoiseSums, rho: float) -> float:
    """``c = sqrt(n_e (1 / n_x + rho^2 / n_y))``: the factor that gives a draw ``E_a`` of one side (``n_e``
    samples) the spread of the noise of ``C_x - rho C_y``.

    Each side's noise is a mean of its samples' ``phi phi^T - C``: ``Cov(C_x - rho C_y) = V / n_x + rho^2 V / n_y``
    when both sides hold one distribution (per-sample covariance ``V``, the null the level is stated for), and
    ``Cov(E_a) = V / n_e``. With the draws on the generated side the factor tends to 1 for the novel spectrum as
    the reference grows (``n_y >> n_x``): there it needs no assumption on the reference.
    """
    return math.sqrt(noise.count * (1.0 / x.count + rho * rho / y.count))


def null_scale(noise: NoiseSums, x: NoiseSums, y: NoiseSums, rho: float) -> float:
    """``c' = beta sqrt(n_e (1/n_x + 1/n_y))``, ``beta = 1 + (rho - 1) n_x / N`` (``N = n_x + n_y``): the factor of a
    draw ``E_a`` of one side (``n_e`` samples) in the null of `null_model`, which holds the observed pooled second
    moment ``C_pool`` fixed.

    Exactly ``C_x - rho C_y = (1 - rho) C_pool + beta (C_x - C_y)``, and on one distribution the noises of
    ``C_pool`` and of ``C_x - C_y`` are uncorrelated (``Cov = V / N - V / N = 0``): given ``C_pool`` the rest of
    the noise is ``beta (C_x - C_y)``, of covariance ``beta^2 V (1/n_x + 1/n_y)``. `noise_scale` counts the pooled
    part's noise a second time (``c^2 = 5`` against ``c'^2 = 4.5`` at ``rho = 2``, equal sides). Equal to
    `noise_scale` at ``rho = 1``, and as either side outgrows the other.
    """
    beta = 1.0 + (rho - 1.0) * x.count / (x.count + y.count)
    return beta * math.sqrt(noise.count * (1.0 / x.count + 1.0 / y.count))


def null_weights(x: NoiseSums, y: NoiseSums, rho: float) -> Tensor:
    """(K, J) float64: the weights on ``x.sums + y.sums`` of each matrix of `null_model`.

    The side with draws (exactly one) gives ``c' E(a)`` (`null_scale`); at ``rho = 1`` one matrix per draw, at
    ``rho != 1`` two: ``(1 - rho) C_pool + s c' E(a)``, ``s = +-1``
    ([`NoiseSums`][lightning_spectral.functional.sampling_noise.NoiseSums]).

    Raises:
        ValueError: both sides or neither keep draws.
    """
    if (x.draws > 0) == (y.draws > 0):
        raise ValueError(
            f"null_model: exactly one side keeps multiplier draws (FINC keeps them on the generated side), got "
            f"{x.draws} and {y.draws}."
        )
    noise_is_x = x.draws > 0
    noise = x if noise_is_x else y
    scale = null_scale(noise, x, y, rho)
    pooled_scale = (1.0 - rho) / (x.count + y.count)
    pooled = [pooled_scale] + [0.0] * x.draws + [pooled_scale] + [0.0] * y.draws
    rows = []
    for a in range(noise.draws):
        own = noise.draw_weights(a, scale)
        other = [0.0] * (1 + (y.draws if noise_is_x else x.draws))
        draw = own + other if noise_is_x else other + own
        if rho == 1.0:
            rows.append(draw)
            continue
        for sign in (1.0, -1.0):
            rows.append([sign * w + p for w, p in zip(draw, pooled, strict=True)])
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


#: Lanczos's accepted residual for the null's top eigenvalues at ``rho != 1``, relative to ``||A||`` (a top that is a
#: tight cluster just above 0: at 1e-5 Lanczos exhausts its budget and falls back to ``eigvalsh``; at 1e-4 the
#: threshold is within 0.4 % of the dense one at 2r = 4096, docs/benchmarks/finc-significance.md).
SHIFTED_RTOL = 1e-4

#: Matrices of the null formed at once (their memory: this many (2r)^2 matrices, float32 from FLOAT32_MIN_SIZE).
NULL_BATCH = 6


def null_model(x: NoiseSums, y: NoiseSums, rho: float) -> NullModel:
    """Draws of ``lambda_max`` of the noise of ``C_x - rho C_y`` on one distribution, from one side's multiplier
    draws.

    The side with draws (FINC: the generated one) gives ``A`` independent draws ``c' E(a)`` of the noise
    (`null_scale`). At ``rho = 1`` each gives two draws of ``lambda_max``: its largest eigenvalue and minus its
    smallest (``-E(a)`` has the law of ``E(a)``: the multipliers' phase is uniform). At ``rho != 1`` one
    distribution gives ``E[C_x - rho C_y] = (1 - rho) C``: each draw is the largest eigenvalue of
    ``(1 - rho) C_pool + s c' E(a)`` (``C_pool`` both sides' second moment, held at its observed value, and the rest
    of the noise drawn: `null_scale`; ``s = +-1``). Either way ``2 A`` draws
    with ``nu = A``. The matrices are formed `NULL_BATCH` at a time in one pass over the sums (float32 from
    [`FLOAT32_MIN_SIZE`][lightning_spectral.algebra.FLOAT32_MIN_SIZE] rows, as the score's ``eigvalsh``); their ends
    by Lanczos ([`extreme_eigenvalues`][lightning_spectral.algebra.extreme_eigenvalues], residual ``1e-10 ||A||`` in
    float64, ``1e-5 ||A||`` in float32 at ``rho = 1``, `SHIFTED_RTOL` at ``rho != 1``; dense fallback), or a dense
    ``eigvalsh`` at ``rho != 1`` when a side has more samples than features or the matrix is small (there the top
    is a tight cluster just above 0; docs/benchmarks/training-loop-cost.md, "FINC's noise floor without a full
    eigendecomposition").

    Raises:
        ValueError: both sides or neither keep draws.
    """
    size = x.total.shape[0]
    dense = rho != 1.0 and (size <= 1024 or min(x.count, y.count) >= size)
    dtype = eigen_dtype("auto", size)
    rtol = (1e-5 if dtype == torch.float32 else 1e-10) if rho == 1.0 else SHIFTED_RTOL
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
    return NullModel(torch.tensor(draws, dtype=torch.float64), max(x.draws, y.draws))
