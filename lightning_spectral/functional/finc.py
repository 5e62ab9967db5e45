"""FINC: novel modes of a generated distribution against a reference (Zhang, Jalali, Li, Farnia), and the oracle.

The rho-conditional covariance ``L = C_gen - rho C_ref`` (FINC eq. 4, both sides through the same random
frequencies) has positive eigenvalues along modes that the generated samples hold more than ``rho`` times as
often as the reference; its mirror ``C_ref - rho C_gen`` finds the under-represented (missing) modes.
``trace(L) = 1 - rho`` and its eigenvalues lie in ``[-rho, 1]``.

**Significance** (beyond the paper: FINC's Algorithm 1 keeps every positive eigenvalue and its Theorem 1 bounds
only the random-feature error, not the sampling noise). Finite samples give ``L`` many small positive eigenvalues
from noise alone. Write ``L = E[L] + N`` with ``N = (C_gen - E C_gen) - rho (C_ref - E C_ref)`` the sampling noise.
The null hypothesis "no mode is over-represented more than rho-fold" is ``E[L] <= 0`` (negative semi-definite);
under it Weyl's inequality gives ``lambda_k(L) <= lambda_k(E[L]) + lambda_max(N) <= lambda_max(N)`` for every k,
and more generally, with fewer than k positive eigenvalues in ``E[L]``, ``lambda_k(L) <= lambda_max(N)``. So the
p-value of the k-th eigenvalue is ``P(lambda_max(N) >= lambda_k)``, and declaring the eigenvalues with p-value
``<= significance`` significant names a spurious extra mode with probability at most ``significance``.

The law of ``lambda_max(N)`` is estimated from the data by ``A`` multiplier draws of the generated side
([`sampling_noise`][lightning_spectral.functional.sampling_noise]): ``E_a = (1/n) sum_i (s_a(x_i) - sbar_a)
phi_i phi_i^T`` with ``s_a`` a smooth random Fourier function of the sample (mean 0, variance 1, uncorrelated
between samples farther apart than ``sigma / ratio``), a replicate of ``C - E C`` for that side (multiplier
bootstrap, Chernozhukov, Chetverikov and Kato 2013). One side's draw stands for both sides' noise, scaled by
``c = sqrt(n_gen (1/n_x + rho^2/n_y))`` (`noise_scale` in
[`finc_null`][lightning_spectral.functional.finc_null]): exact in law when both sides hold one distribution
(the null the level is stated for), and, for the novel spectrum, as the reference outgrows the generated side
whatever the reference. So the reference keeps ``Q`` only: ``2 + A`` (2r)^2 sums (5 at the default ``A = 3``). At
``rho = 1`` a draw gives ``lambda_max`` and ``-lambda_min`` of ``c E_a``. At ``rho > 1`` the Weyl bound is
loose: the noise is largest along the shared modes, where ``E[L] = (1 - rho) C`` is far below 0 on one
distribution. There the null is one distribution on both sides ("same distribution", the case the level is
stated for) and each draw is the top eigenvalue of ``(1 - rho) C_pool + s c' E_a`` (`null_model`, ``s = +-1``):
``C_pool`` (both sides' second moment) at its observed value, and ``c' = beta sqrt(n_gen (1/n_x + 1/n_y))``,
``beta = 1 + (rho - 1) n_x / (n_x + n_y)``, the scale of the noise left given ``C_pool`` (`null_scale`: ``c'^2`` is
4.5 against ``c^2 = 5`` at equal sides and ``rho = 2``; ``c' = c`` at ``rho = 1``).
Either way ``2 A`` draws. With their mean ``m`` and standard deviation ``s``, the p-value is the Student-t
prediction interval's, with ``nu = A`` degrees of freedom (the independent draws)::

    p(lambda) = P(T_nu >= (lambda - m) / (s sqrt(1 + 1/nu)))

An eigenvalue is significant when ``p <= significance`` (default 0.05) and it exceeds ``min_eigenvalue``
(default 1e-3: anything worth less than about 0.1 % of extra probability mass is not reported). The multipliers
depend on each sample's values alone and continuously, so draws and every number are the same for any order,
batch size or sharding of the same samples, and move by float round-off only when the embeddings do. ``novelty = sum of the significant eigenvalues`` (about the extra
probability mass of the novel modes times their within-mode kernel similarity; FINC section 3).
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch
from torch import Tensor

from lightning_spectral._checks import check_features, check_positive
from lightning_spectral.algebra.eigen import (
    PARTIAL_MIN_SIZE,
    eigen_dtype,
    eigenvalues_above,
    extreme_eigenvalues,
    symmetric_eigh,
    top_eigh,
)
from lightning_spectral.algebra.gram import DEFAULT_CHUNK_SIZE, symmetrize, weighted_sum
from lightning_spectral.functional.finc_null import SHIFTED_RTOL, NullModel, noise_scale, null_model
from lightning_spectral.functional.sampling_noise import (
    DEFAULT_DRAWS,
    DEFAULT_RATIO,
    Multipliers,
    NoiseSums,
    check_draws,
)
from lightning_spectral.kernels.exact import gaussian_kernel
from lightning_spectral.kernels.gaussian_rff import GaussianRFF

#: Default significance level: on same-distribution data at most this share of runs names any mode.
DEFAULT_SIGNIFICANCE = 0.05


#: Default ``rho``: a missing mode is one the generated side holds less than half as often as the reference, a novel
#: one more than twice as often. At ``rho = 1`` three dropped classes of ten are named less than half the time at
#: n = 2,000 (docs/benchmarks/dropped-modes.md "Dropped modes at the defaults"); the null at ``rho > 1`` is also more
#: conservative.
DEFAULT_RHO = 2.0


#: Default absolute minimum of a significant eigenvalue (a tolerance rather than FINC Algorithm 1's "> 0").
DEFAULT_MIN_EIGENVALUE = 1e-3

#: Lanczos's accepted residual (relative to ``||L||``) of the eigenvalues above the threshold in a ``partial``
#: spectrum, by the difference's dtype (float32 from FLOAT32_MIN_SIZE rows: its residuals stall near 1e-6).
PARTIAL_RTOL = {torch.float32: 1e-5, torch.float64: 1e-10}


def check_significance(value: float, name: str = "significance") -> float:
    """Return ``float(value)`` or raise ``ValueError`` unless it is a level in (0, 1)."""
    value = check_positive(value, name)
    if not value < 1:
        raise ValueError(f"`{name}` must be a significance level in (0, 1) (e.g. 0.05), got {value!r}.")
    return value


class DifferentialSpectrum(NamedTuple):
    """Eigenvalues (and eigenvectors) of ``C_x - rho C_y`` with their p-values and the significance threshold.

    Attributes:
        eigenvalues: (2r,) float64, descending; a ``partial`` one (`differential_spectrum`) holds the top m only:
            every eigenvalue above the threshold and at least the largest.
        eigenvectors: (2r, 2r) float64 columns (not yet oriented), or ``None`` when only the score was needed.
        p_values: (2r,) float64, ``P(lambda_max(noise) >= lambda_k)`` (module doc).
        threshold: the eigenvalue at which a mode becomes significant:
            ``max(null quantile at the level, min_eigenvalue)``.
        significance: the level.
        min_eigenvalue: the absolute minimum of a significant eigenvalue.
        null: the estimated law of the noise's top eigenvalue.
    """

    eigenvalues: Tensor
    eigenvectors: Optional[Tensor]
    p_values: Tensor
    threshold: float
    significance: float
    min_eigenvalue: float
    null: NullModel

    @property
    def significant(self) -> Tensor:
        """(2r,) bool: p-value ``<= significance`` and eigenvalue ``> min_eigenvalue``."""
        return (self.p_values <= self.significance) & (self.eigenvalues > self.min_eigenvalue)

    @property
    def score(self) -> Tensor:
        """Sum of the significant eigenvalues (0 when none passes)."""
        return self.eigenvalues[self.significant].sum()

    def mirrored(self) -> DifferentialSpectrum:
        """The spectrum of ``-(C_x - C_y) = C_y - C_x`` at ``rho = 1`` (of a full spectrum, not a ``partial`` one:
        eigenvalues negated and reversed, the same
        eigenvectors reversed), with its p-values under the same null (at ``rho = 1`` both orders share it:
        `null_scale` is symmetric in the sides there)."""
        values = -self.eigenvalues.flip(0)
        vectors = None if self.eigenvectors is None else self.eigenvectors.flip(1)
        return DifferentialSpectrum(
            values, vectors, self.null.p_values(values), self.threshold, self.significance, self.min_eigenvalue,
            self.null,
        )


def differential_spectrum(
    x: NoiseSums,
    y: NoiseSums,
    rho: float,
    significance: float = DEFAULT_SIGNIFICANCE,
    min_eigenvalue: float = DEFAULT_MIN_EIGENVALUE,
    vectors: bool = True,
    null: Optional[NullModel] = None,
    partial: bool = False,
) -> DifferentialSpectrum:
    """Eigenvalues (and, with ``vectors``, eigenvectors) of ``C_x - rho C_y``, their p-values and the threshold.

    Without ``vectors`` one ``eigvalsh`` suffices (the score needs no eigenvectors), in float32 from
    [`FLOAT32_MIN_SIZE`][lightning_spectral.algebra.FLOAT32_MIN_SIZE] rows (the FINC score within 0.001 % of float64's at
    2r = 4096 and 8192, docs/benchmarks/training-loop-cost.md). With ``partial`` (and no ``vectors``) from
    `PARTIAL_MIN_SIZE` rows only the eigenvalues above the
    threshold (and the largest) are found ([`eigenvalues_above`][lightning_spectral.algebra.eigenvalues_above]:
    Lanczos with an inertia certificate, the dense ``eigvalsh`` when it fails): the score, the significant modes and
    the top eigenvalue are those of the full spectrum, to round-off. ``null`` reuses a `null_model` of the same sums.
    """
    if null is None:
        null = null_model(x, y, rho)
    threshold = max(null.threshold(significance), min_eigenvalue)
    terms = [(1.0 / x.count, x.total), (-rho / y.count, y.total)]
    size = x.total.shape[0]
    if vectors:
        values, eigenvectors = symmetric_eigh(weighted_sum(terms))
    else:  # float32 from FLOAT32_MIN_SIZE rows, as FKEAVendi; eigvalsh reads one triangle of the symmetric difference
        difference = weighted_sum(terms, eigen_dtype("auto", size))
        if partial and size >= PARTIAL_MIN_SIZE:  # a Ritz value just below the threshold need not converge
            values = eigenvalues_above(difference, threshold, rtol=PARTIAL_RTOL[difference.dtype])
        else:
            values = torch.linalg.eigvalsh(difference).double().flip(0)
        eigenvectors = None
    return DifferentialSpectrum(
        values, eigenvectors, null.p_values(values), threshold, significance, min_eigenvalue, null
    )


def top_modes(spectrum: DifferentialSpectrum, x: NoiseSums, y: NoiseSums, rho: float, k: int) -> DifferentialSpectrum:
    """``spectrum`` (values only, of ``C_x - rho C_y``) with the top ``k`` eigenvectors (2r, k) added
    ([`top_eigh`][lightning_spectral.algebra.top_eigh]: Lanczos for a few of a wide matrix, instead of the dense
    ``eigh`` of all 2r). Its top ``k`` eigenvalues become the float64 ones of those pairs (the p-values follow), the
    others, the threshold and the null stay ``spectrum``'s."""
    difference = weighted_sum([(1.0 / x.count, x.total), (-rho / y.count, y.total)])  # symmetric, as its terms
    top, eigenvectors = top_eigh(difference, k, symmetric=True)
    values = torch.cat([top, spectrum.eigenvalues[top.shape[0] :]])  # a partial spectrum may hold fewer than k
    return DifferentialSpectrum(
        values, eigenvectors, spectrum.null.p_values(values), spectrum.threshold, spectrum.significance,
        spectrum.min_eigenvalue, spectrum.null,
    )


def top_bias(x: NoiseSums, y: NoiseSums, rho: float, near: Optional[Tensor] = None) -> Tensor:
    """The upward bias of the top eigenvalue of ``L = C_x - rho C_y``, by the multiplier bootstrap (second order).

    ``lambda_max`` is convex: with the noise ``N``, ``lambda_max(L + N) >= lambda + u^T N u`` (``u`` the top
    eigenvector of ``E L``), so the estimate is biased up, by about ``sum_j (u_j^T N u)^2 / (lambda - lambda_j)``
    (second-order perturbation, Kato 1995, II.2): small for a top mode far above the rest, of the size of the
    standard error near the noise floor, where the top eigenvalue is the largest of many noisy ones. With the
    draws ``D_a = c E_gen(a)`` of the noise ([`noise_scale`][lightning_spectral.functional.finc_null.noise_scale]) the
    bootstrap estimate is ``b = mean_a [(lambda_max(L + D_a) + lambda_max(L - D_a)) / 2 - lambda_max(L)]`` (the
    ``+-`` pair cancels the first-order term exactly), clamped at 0. The top eigenvalue's interval is then
    ``[lambda - b - q se, lambda + q se]``: the upper end needs no bias term (the inequality above), the lower one
    does. Each ``lambda_max`` by Lanczos from `PARTIAL_MIN_SIZE`
    rows (residual `SHIFTED_RTOL`; started near ``near``, ``L``'s top eigenvector if the caller has it, since the
    shifted matrices' top eigenvectors lie near it), else ``eigvalsh``; ``2 A + 1`` of them, ``L`` and each
    ``D_a`` built once. Returns a float64 scalar.
    """
    gen = x if x.draws else y
    size = x.total.shape[0]
    dtype = eigen_dtype("auto", size)
    scale = noise_scale(gen, x, y, rho)
    difference = weighted_sum([(1.0 / x.count, x.total), (-rho / y.count, y.total)], dtype)

    def top(matrix: Tensor) -> float:
        if size < PARTIAL_MIN_SIZE:
            return float(torch.linalg.eigvalsh(matrix)[-1])
        found = extreme_eigenvalues(matrix, rtol=SHIFTED_RTOL, which="largest", symmetric=True, near=near)
        return float(found[1])

    centre = top(difference)
    shifts = []
    for a in range(gen.draws):
        mean = float(gen.weight_sums[a]) / gen.count
        draw = weighted_sum([(scale / gen.count, gen.weighted[a]), (-scale * mean / gen.count, gen.total)], dtype)
        for sign in (1.0, -1.0):
            shifts.append(top(torch.add(difference, draw, alpha=sign)) - centre)
    return torch.tensor(max(sum(shifts) / len(shifts), 0.0), dtype=torch.float64)


def finc_spectrum(
    generated: Tensor,
    reference: Tensor,
    sigma: float,
    n_frequencies: int = 2048,
    rho: float = DEFAULT_RHO,
    seed: int = 0,
    significance: float = DEFAULT_SIGNIFICANCE,
    min_eigenvalue: float = DEFAULT_MIN_EIGENVALUE,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    noise_draws: int = DEFAULT_DRAWS,
) -> DifferentialSpectrum:
    """FINC on two embedding sets (N, d) and (M, d): the spectrum of ``C_gen - rho C_ref``, p-values, threshold.

    The generated side keeps ``noise_draws`` multiplier draws of its sampling noise for the null (module doc).

    Not differentiable: the inputs are detached (the content groups and the null are statistics of the data, not
    a loss), so inputs that require grad are read as plain values.

    Raises:
        ValueError: an empty side, widths that differ, NaN / Inf, ``rho`` or ``min_eigenvalue`` not a number
            > 0, ``significance`` not in (0, 1), ``noise_draws`` not an integer in [1, 64].
    """
    rho = check_positive(rho, "rho")
    significance = check_significance(significance)
    min_eigenvalue = check_positive(min_eigenvalue, "min_eigenvalue")
    noise_draws = check_draws(noise_draws, "noise_draws")
    generated = check_features(generated, "generated", owner="finc").detach()
    reference = check_features(reference, "reference", width=generated.shape[1], owner="finc").detach()
    if generated.shape[0] == 0 or reference.shape[0] < 2:
        raise ValueError("finc: needs at least 1 generated and 2 reference samples.")
    rff = GaussianRFF(generated.shape[1], n_frequencies, sigma, seed).to(generated.device)
    multipliers = Multipliers(noise_draws, rff.sigma, seed, DEFAULT_RATIO)
    x = NoiseSums.of(generated, rff, multipliers, chunk_size)
    y = NoiseSums.of(reference, rff, None, chunk_size)
    return differential_spectrum(x, y, rho, significance, min_eigenvalue)


def finc(
    generated: Tensor,
    reference: Tensor,
    sigma: float,
    n_frequencies: int = 2048,
    rho: float = DEFAULT_RHO,
    seed: int = 0,
    significance: float = DEFAULT_SIGNIFICANCE,
    min_eigenvalue: float = DEFAULT_MIN_EIGENVALUE,
    noise_draws: int = DEFAULT_DRAWS,
) -> Tensor:
    """FINC novelty score: the sum of the significant eigenvalues of ``C_gen - rho C_ref`` (module doc). Not
    differentiable: the inputs are detached
    ([`finc_spectrum`][lightning_spectral.functional.finc_spectrum]).

    Examples:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> shared = torch.randn(400, 2, generator=g) * 0.1
        >>> novel = torch.randn(100, 2, generator=g) * 0.1 + 10.0
        >>> score = finc(torch.cat([shared[:200], novel]), shared[200:], sigma=1.0, n_frequencies=256)
        >>> 0.25 < float(score) < 0.4   # about the novel share, 1/3, times its within-mode similarity
        True
    """
    return finc_spectrum(
        generated, reference, sigma, n_frequencies, rho, seed, significance, min_eigenvalue, noise_draws=noise_draws
    ).score


def ken_eigenvalues(k_xx: Tensor, k_xy: Tensor, k_yy: Tensor, rho: float = 1.0) -> Tensor:
    """Eigenvalues (descending) of the (n+m) x (n+m) matrix of the FINC appendix (KEN's formulation).

    ``[[K_xx/n, sqrt(rho/(nm)) K_xy], [-sqrt(rho/(nm)) K_xy^T, -(rho/m) K_yy]] = D K+`` with
    ``D = diag(1_n, -1_m)`` and ``K+`` the PSD block matrix with + signs; its spectrum is that of the
    symmetric ``sqrt(K+) D sqrt(K+)``, computed here with two symmetric eigendecompositions.
    """
    n, m = k_xy.shape
    off = math.sqrt(rho / (n * m)) * k_xy.double()
    k_plus = torch.cat(
        [torch.cat([k_xx.double() / n, off], 1), torch.cat([off.T, rho * k_yy.double() / m], 1)], 0
    )
    values, vectors = torch.linalg.eigh(symmetrize(k_plus))
    root = vectors @ torch.diag(values.clamp_min(0).sqrt()) @ vectors.T
    signs = torch.cat([torch.ones(n), -torch.ones(m)]).to(root)
    return torch.linalg.eigvalsh(symmetrize(root @ (signs[:, None] * root))).flip(0)


def finc_exact(generated: Tensor, reference: Tensor, sigma: float, rho: float = 1.0) -> Tensor:
    """Exact eigenvalues (descending) of ``C_gen - rho C_ref`` for the Gaussian kernel, through the n x n
    kernel matrices ([`ken_eigenvalues`][lightning_spectral.functional.ken_eigenvalues]). O((n+m)^3): the oracle for
    small n, m.

    Raises:
        ValueError: an empty side, widths that differ, NaN / Inf, ``rho`` or ``sigma`` not a number > 0.

    Examples:
        >>> import torch
        >>> x = torch.randn(20, 3)
        >>> values = finc_exact(x, x, sigma=1.0, rho=1.0)  # one sample against itself: all zero
        >>> bool(values.abs().max() < 1e-8)
        True
    """
    rho = check_positive(rho, "rho")
    generated = check_features(generated, "generated", owner="finc_exact")
    reference = check_features(reference, "reference", width=generated.shape[1], owner="finc_exact")
    for name, side in (("generated", generated), ("reference", reference)):
        if side.shape[0] == 0:
            raise ValueError(f"finc_exact: `{name}` is empty; each side needs at least one sample.")
    return ken_eigenvalues(
        gaussian_kernel(generated, sigma=sigma),
        gaussian_kernel(generated, reference, sigma=sigma),
        gaussian_kernel(reference, sigma=sigma),
        rho,
    )
