"""FINC: novel modes of a generated distribution against a reference (Zhang, Jalali, Li, Farnia), and the oracle.

The rho-conditional covariance ``L = C_gen - rho C_ref`` (FINC eq. 4, both sides through the same random
frequencies) has positive eigenvalues along modes that the generated samples hold more than ``rho`` times as
often as the reference; its mirror ``C_ref - rho C_gen`` finds the under-represented (missing) modes.
``trace(L) = 1 - rho`` and its eigenvalues lie in ``[-rho, 1]``.

Finite samples give ``L`` many small positive eigenvalues from noise alone, so the novelty score counts only
eigenvalues above a noise floor estimated from the data: the reference is split into two disjoint halves
A and B and the largest eigenvalue of ``C_A - rho C_B`` (or its mirror) is what noise alone produces between
two samples of one distribution. Each reference sample joins a half by a hash of its own values
(:func:`reference_halves`), so the halves, the floor and every score are the same for any order, batch size,
sharding or float dtype of the same samples. The floor's size is rescaled from the halves' sample sizes to the test's:
the noise of ``C_x - rho C_y`` has standard deviation ~ ``sqrt(1/n_x + rho^2/n_y)``::

    floor = max(0, lambda_max(split)) * sqrt((1/n_gen + rho^2/n_ref) / (1/n_A + rho^2/n_B))

An eigenvalue is significant when it exceeds ``max(significance * floor, min_eigenvalue)`` (defaults 2 and
1e-3): the floor is itself one noisy draw, and the margin keeps one distribution against itself (disjoint
samples) free of false modes. The absolute minimum drops the tiny eigenvalues that a real, well-resolved
over-represented mode also has along its within-mode spread directions (its mass sits in the top one), and
anything worth less than about 0.1 % of extra probability mass (FINC, Algorithm 1 keeps "positive"
eigenvalues; with finite samples "positive" needs such a tolerance).
``novelty = sum of the significant eigenvalues`` (about the extra probability mass of the novel modes times
their within-mode kernel similarity; FINC section 3).
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Optional

import torch
from torch import Tensor

from lightning_spectral._checks import check_dense, check_features, check_positive
from lightning_spectral.features import GaussianRFF, gaussian_kernel
from lightning_spectral.linalg import (
    DEFAULT_CHUNK_SIZE,
    add_covariance_,
    eigen_dtype,
    extreme_eigenvalues,
    symmetric_eigh,
    symmetrize,
    top_eigenvalue,
    weighted_sum,
)

#: Default margin of the significance rule: eigenvalues must exceed twice the estimated noise floor.
DEFAULT_SIGNIFICANCE = 2.0
#: Default absolute minimum of a significant eigenvalue (a tolerance rather than FINC Algorithm 1's "> 0").
DEFAULT_MIN_EIGENVALUE = 1e-3


class DifferentialSpectrum(NamedTuple):
    """Eigenvalues (and eigenvectors) of ``C_x - rho C_y`` with its significance threshold.

    Attributes:
        eigenvalues: (2r,) float64, descending; when only the score was needed, the top ones: every eigenvalue
            above the threshold and at least one below.
        eigenvectors: (2r, 2r) float64 columns (not yet oriented), or ``None`` when only the score was needed.
        threshold: eigenvalues above it are significant (``max(significance * floor, min_eigenvalue)``).
    """

    eigenvalues: Tensor
    eigenvectors: Optional[Tensor]
    threshold: float

    @property
    def significant(self) -> Tensor:
        """(2r,) bool: the eigenvalues above the threshold."""
        return self.eigenvalues > self.threshold

    @property
    def score(self) -> Tensor:
        """Sum of the significant eigenvalues (0 when none passes)."""
        return self.eigenvalues[self.significant].sum()


class Moment(NamedTuple):
    """An uncentred second moment kept as the sums it was accumulated in: ``C = (Q_1 + ... + Q_k) / count``.

    The matrices FINC decomposes are weighted sums of such moments, formed in one pass
    (:func:`~lightning_spectral.linalg.weighted_sum`) instead of one full-size temporary per operation.

    Attributes:
        sums: (D, D) outer-product sums ``Q_j = sum_i phi(x_i) phi(x_i)^T``, symmetric (as
            :func:`~lightning_spectral.linalg.add_gram_` leaves them); float64 in this library.
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
        """``scale * C`` as ``(weight, matrix)`` terms of :func:`~lightning_spectral.linalg.weighted_sum`."""
        return [(scale / self.count, total) for total in self.sums]


class NoiseSplit(NamedTuple):
    """The reference's two disjoint halves A and B."""

    a: Moment
    b: Moment


_HASH_PRIME = 2_147_483_647  # 2^31 - 1: every product below stays under 2^62, so int64 never overflows
_hash_weights: dict[tuple[int, str], Tensor] = {}


def reference_halves(x: Tensor) -> Tensor:
    """(N,) bool: which half of the reference (A = True) each row of ``x`` (N, d) joins, from its values alone.

    ``h(x) = sum_j w_j b_j(x) mod p`` over the 32-bit words ``b_j`` of the row's float32 rounding (``p = 2^31 - 1``,
    fixed random weights ``w``), and the row joins A when ``h`` is even. Integer sums modulo ``p`` do not depend on
    the order of anything, so any order, batching or sharding of the same rows gives the same halves. The words
    are those of the float32 rounding whatever the dtype, so a float32 and a float64 copy of the same samples
    split alike (float64 values beyond float32's range fold their two words into one). Equal rows join the same
    half; ``-0.0`` counts as ``0.0``.

    Examples:
        >>> import torch
        >>> x = torch.randn(1000, 4)
        >>> halves = reference_halves(x)
        >>> torch.equal(halves[torch.arange(999, -1, -1)], reference_halves(x.flip(0)))   # order-free
        True
        >>> torch.equal(halves, reference_halves(x.double()))                              # dtype-free
        True
        >>> 400 < int(halves.sum()) < 600
        True
    """
    check_dense(x, "x", "reference_halves")
    rounded = x.float().contiguous() + 0.0  # + 0.0 turns -0.0 into 0.0
    words = rounded.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    beyond = torch.isinf(rounded) & torch.isfinite(x)
    if bool(beyond.any()):  # float64 values outside float32's range: fold both words of the float64 value
        bits = (x.double().contiguous() + 0.0).view(torch.int64)
        words = torch.where(beyond, (bits ^ (bits >> 32)) & 0xFFFFFFFF, words)
    key = (words.shape[1], str(words.device))
    if key not in _hash_weights:
        generator = torch.Generator().manual_seed(20_240_917)
        _hash_weights[key] = torch.randint(1, _HASH_PRIME, (words.shape[1],), generator=generator).to(words.device)
    hashed = ((words % _HASH_PRIME) * _hash_weights[key] % _HASH_PRIME).sum(1) % _HASH_PRIME
    return hashed % 2 == 0


def split_noise_floor(split: NoiseSplit, rho: float, n_x: float, n_y: float) -> float:
    """Noise floor of ``lambda_max(C_x - rho C_y)`` from two disjoint halves A, B of one sample (see module doc).

    Args:
        split: the two halves.
        rho: the novelty threshold.
        n_x: size of the first side being compared.
        n_y: the same for the second sample.
    """
    n_a, n_b = split.a.count, split.b.count
    if min(n_a, n_b) < 1:
        raise ValueError("the noise floor needs at least 2 reference samples (one in each half).")

    def difference(x: Moment, y: Moment) -> Tensor:
        return weighted_sum(x.terms(1.0) + y.terms(-rho))

    # Only lambda_max is needed: Lanczos instead of two dense eigvalsh. At rho = 1 the mirror is exactly the
    # negative (C_B - C_A = -(C_A - C_B)), so one run gives both: lambda_max(mirror) = -lambda_min. At rho > 1
    # with both halves' covariances of full rank (more samples than features), the top of C_A - rho C_B is a
    # tight cluster just above 0, far below the spectrum's width rho lambda_max(C_B): Lanczos would exhaust its
    # budget and fall back (measured, docs/benchmarks.md), so the dense eigvalsh answers directly.
    if rho == 1.0:
        lowest, highest = extreme_eigenvalues(difference(split.a, split.b), symmetric=True)
        split_top = max(float(highest), -float(lowest))
    elif min(n_a, n_b) < split.a.sums[0].shape[0]:
        split_top = max(
            float(top_eigenvalue(difference(x, y), symmetric=True)) for x, y in (split, split[::-1])
        )
    else:  # eigvalsh reads one triangle of the (symmetric) difference
        split_top = max(float(torch.linalg.eigvalsh(difference(x, y))[-1]) for x, y in (split, split[::-1]))
    scale = math.sqrt((1 / n_x + rho**2 / n_y) / (1 / n_a + rho**2 / n_b))
    return max(split_top, 0.0) * scale


def differential_spectrum(
    x: Moment,
    y: Moment,
    split: NoiseSplit,
    rho: float,
    significance: float = DEFAULT_SIGNIFICANCE,
    min_eigenvalue: float = DEFAULT_MIN_EIGENVALUE,
    vectors: bool = True,
) -> DifferentialSpectrum:
    """Eigenvalues (and, with ``vectors``, eigenvectors) of ``C_x - rho C_y`` and the threshold from ``split``.

    Without ``vectors`` one ``eigvalsh`` suffices (the score needs no eigenvectors), in float32 from
    :data:`~lightning_spectral.linalg.FLOAT32_MIN_SIZE` rows (the FINC score within 0.001 % of float64's at
    2r = 4096 and 8192, docs/benchmarks.md).
    """
    floor = split_noise_floor(split, rho=rho, n_x=x.count, n_y=y.count)
    threshold = max(significance * floor, min_eigenvalue)
    terms = x.terms(1.0) + y.terms(-rho)
    if vectors:
        values, eigenvectors = symmetric_eigh(weighted_sum(terms))
    else:  # float32 from FLOAT32_MIN_SIZE rows, as FKEAVendi: Lanczos for the eigenvalues above the threshold
        # needed ~1,000 memory-bound products at 2r = 4096, more than one eigvalsh (docs/benchmarks.md, issue 14).
        # eigvalsh reads one triangle of the symmetric difference.
        dtype = eigen_dtype("auto", x.sums[0].shape[0])
        values = torch.linalg.eigvalsh(weighted_sum(terms, dtype)).double().flip(0)
        eigenvectors = None
    return DifferentialSpectrum(values, eigenvectors, threshold)


def finc_spectrum(
    generated: Tensor,
    reference: Tensor,
    sigma: float,
    n_frequencies: int = 2048,
    rho: float = 1.0,
    seed: int = 0,
    significance: float = DEFAULT_SIGNIFICANCE,
    min_eigenvalue: float = DEFAULT_MIN_EIGENVALUE,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> DifferentialSpectrum:
    """FINC on two embedding sets (N, d) and (M, d): the spectrum of ``C_gen - rho C_ref`` and its threshold.

    The reference is split into halves by :func:`reference_halves` for the floor.

    Raises:
        ValueError: an empty side, fewer than 2 reference samples, widths that differ, NaN / Inf, ``rho``,
            ``significance`` or ``min_eigenvalue`` not a number > 0.
    """
    rho = check_positive(rho, "rho")
    significance = check_positive(significance, "significance")
    min_eigenvalue = check_positive(min_eigenvalue, "min_eigenvalue")
    generated = check_features(generated, "generated", owner="finc")
    reference = check_features(reference, "reference", width=generated.shape[1], owner="finc")
    if generated.shape[0] == 0 or reference.shape[0] < 2:
        raise ValueError("finc: needs at least 1 generated and 2 reference samples.")
    rff = GaussianRFF(generated.shape[1], n_frequencies, sigma, seed).to(generated.device)
    in_a = reference_halves(reference)
    if bool(in_a.all()) or not bool(in_a.any()):
        raise ValueError("finc: the noise floor needs reference samples in both halves; pass more reference samples.")
    half_a, half_b = Moment.of(reference[in_a], rff, chunk_size), Moment.of(reference[~in_a], rff, chunk_size)
    reference_moment = Moment(half_a.sums + half_b.sums, half_a.count + half_b.count)
    generated_moment = Moment.of(generated, rff, chunk_size)
    return differential_spectrum(
        generated_moment, reference_moment, NoiseSplit(half_a, half_b), rho, significance, min_eigenvalue
    )


def finc(
    generated: Tensor,
    reference: Tensor,
    sigma: float,
    n_frequencies: int = 2048,
    rho: float = 1.0,
    seed: int = 0,
    significance: float = DEFAULT_SIGNIFICANCE,
    min_eigenvalue: float = DEFAULT_MIN_EIGENVALUE,
) -> Tensor:
    """FINC novelty score: the sum of the eigenvalues of ``C_gen - rho C_ref`` above the noise threshold.

    Examples:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> shared = torch.randn(400, 2, generator=g) * 0.1
        >>> novel = torch.randn(100, 2, generator=g) * 0.1 + 10.0
        >>> score = finc(torch.cat([shared[:200], novel]), shared[200:], sigma=1.0, n_frequencies=256)
        >>> 0.25 < float(score) < 0.4   # about the novel share, 1/3, times its within-mode similarity
        True
    """
    return finc_spectrum(generated, reference, sigma, n_frequencies, rho, seed, significance, min_eigenvalue).score


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
    kernel matrices (:func:`ken_eigenvalues`). O((n+m)^3): the oracle for small n, m.

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
